/* test_btree.c: unit tests for the copy-on-write B+tree (src/btree/btree*): a million entries in
 * 16 KiB nodes, random operations against a reference model with small nodes, variable-length keys
 * and values at the maxima, put modes, scans and seeks with resumption after misses, copy-on-write
 * block accounting, failing writes, corrupted node images, the offline check and allocation
 * failure.
 *
 * The store here is a table of block images indexed by a block id (bp_offset / 4096): each image is
 * an exact-size heap copy (so AddressSanitizer catches any read past a node), "cached" or not (a
 * forgotten block makes bs_get miss until the test loads it back), and freed blocks stay readable
 * (an older root can still be read), with every free checked against double frees and holds. The
 * test also parses the node format itself (from the table in btree.c) to compute which blocks a
 * root reaches, independently of the tree's own bookkeeping. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "btree/btree.h"
#include "rng.h"
#include "tap.h"

#define ID_SCALE 4096u /* bp_offset = block id * ID_SCALE, like a sector-aligned offset */
#define TREE_TYPE 7u

/* ---------------------------------------------------------------------------------------------
 * Keys; random choices come from rng.h, seeded per test so every run is the same */

/* A bijection on 64-bit integers (splitmix64's finalizer), so perm(i) are distinct keys in an
 * order unrelated to i. */
static uint64_t perm(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = n; i-- > 0;)
		v = (v << 8) | p[i];
	return v;
}

static int key_cmp(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint32_t m = alen < blen ? alen : blen;
	int c = m ? memcmp(a, b, m) : 0;
	if (c != 0)
		return c;
	return alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * The in-memory store */

struct mblock {
	uint8_t *mb_img; /* the bytes as written; NULL for an unused id */
	bool mb_cached;  /* bs_get succeeds */
	bool mb_freed;
	uint8_t mb_level;
	uint64_t mb_hash; /* of the bytes when written: proves they never change */
	uint32_t mb_holds;
};

struct mstore {
	uint32_t ms_nb;
	struct mblock *ms_blocks; /* index = id; id 0 is never used */
	uint64_t ms_nblocks;
	uint64_t ms_cap;
	uint64_t ms_txg;
	long ms_holds; /* outstanding holds */
	uint64_t ms_writes, ms_frees, ms_gets, ms_misses, ms_loads;
	long ms_fail_write_in; /* < 0 off; 0 fails the next write, n the (n+1)th */
	int ms_fail_errno;
	bool ms_ignore_frees;   /* fuzzing: frees of a throw-away tree are not recorded */
	uint64_t ms_bad_frees;  /* double frees, frees of unknown ids, frees while held */
	uint64_t ms_bad_writes; /* images whose header does not match the level passed */
	uint64_t *ms_freed_log; /* ids freed since the last reset */
	size_t ms_nfreed_log, ms_freed_cap;
};

static struct mblock *ms_block(struct mstore *ms, const struct blk_ptr *bp)
{
	if (bp->bp_offset % ID_SCALE != 0)
		return NULL;
	uint64_t id = bp->bp_offset / ID_SCALE;
	if (id == 0 || id >= ms->ms_nblocks || ms->ms_blocks[id].mb_img == NULL)
		return NULL;
	return &ms->ms_blocks[id];
}

static int ms_get(void *ctx, const struct blk_ptr *bp, const void **image_out, void **hold_out)
{
	struct mstore *ms = ctx;
	struct mblock *mb = ms_block(ms, bp);
	if (mb == NULL)
		return -EIO; /* a pointer to nowhere */
	ms->ms_gets++;
	if (!mb->mb_cached) {
		ms->ms_misses++;
		return -SH_ENEEDBLOCK;
	}
	mb->mb_holds++;
	ms->ms_holds++;
	*image_out = mb->mb_img;
	*hold_out = mb;
	return 0;
}

static void ms_release(void *ctx, void *hold)
{
	struct mstore *ms = ctx;
	struct mblock *mb = hold;
	if (mb->mb_holds == 0 || ms->ms_holds == 0) {
		ms->ms_bad_frees++;
		return;
	}
	mb->mb_holds--;
	ms->ms_holds--;
}

static uint64_t img_hash(const void *img, uint32_t len)
{
	return sh_hash64(img, len, 0x7465737462747265ull);
}

static int ms_write(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
                    uint64_t fill, struct blk_ptr *bp_out)
{
	struct mstore *ms = ctx;
	if (ms->ms_fail_write_in == 0) {
		ms->ms_fail_write_in = -1;
		return -ms->ms_fail_errno;
	}
	if (ms->ms_fail_write_in > 0)
		ms->ms_fail_write_in--;
	if (image_bytes != ms->ms_nb || ((const uint8_t *)image)[6] != level)
		ms->ms_bad_writes++;
	if (ms->ms_nblocks == ms->ms_cap) {
		uint64_t cap = ms->ms_cap ? ms->ms_cap * 2 : 1024;
		struct mblock *b = mem_realloc(ms->ms_blocks, sizeof(*b) * cap);
		VERIFY(b != NULL);
		memset(b + ms->ms_cap, 0, sizeof(*b) * (cap - ms->ms_cap));
		ms->ms_blocks = b;
		ms->ms_cap = cap;
	}
	uint64_t id = ms->ms_nblocks++;
	struct mblock *mb = &ms->ms_blocks[id];
	mb->mb_img = mem_alloc(image_bytes);
	VERIFY(mb->mb_img != NULL);
	memcpy(mb->mb_img, image, image_bytes);
	mb->mb_cached = true;
	mb->mb_freed = false;
	mb->mb_level = level;
	mb->mb_hash = img_hash(image, image_bytes);
	ms->ms_writes++;
	memset(bp_out, 0, sizeof(*bp_out));
	bp_out->bp_offset = id * ID_SCALE;
	bp_out->bp_asize = (image_bytes + 4095u) / 4096u * 4096u;
	bp_out->bp_psize = image_bytes;
	bp_out->bp_lsize = image_bytes;
	bp_out->bp_checksum = 1;
	bp_out->bp_type = 42;
	bp_out->bp_birth_txg = ++ms->ms_txg;
	put_be64(bp_out->bp_cksum, mb->mb_hash);
	(void)fill; /* the tree sets bp_fill and bp_level itself: leave them for it to do */
	return 0;
}

static void ms_free(void *ctx, const struct blk_ptr *bp)
{
	struct mstore *ms = ctx;
	if (ms->ms_ignore_frees)
		return;
	struct mblock *mb = ms_block(ms, bp);
	if (mb == NULL || mb->mb_freed || mb->mb_holds != 0) {
		ms->ms_bad_frees++;
		return;
	}
	mb->mb_freed = true;
	ms->ms_frees++;
	if (ms->ms_nfreed_log == ms->ms_freed_cap) {
		ms->ms_freed_cap = ms->ms_freed_cap ? ms->ms_freed_cap * 2 : 256;
		ms->ms_freed_log =
		    mem_realloc(ms->ms_freed_log, sizeof(uint64_t) * ms->ms_freed_cap);
		VERIFY(ms->ms_freed_log != NULL);
	}
	ms->ms_freed_log[ms->ms_nfreed_log++] = bp->bp_offset / ID_SCALE;
}

static void ms_init(struct mstore *ms, uint32_t nb)
{
	memset(ms, 0, sizeof(*ms));
	ms->ms_nb = nb;
	ms->ms_cap = 1024;
	ms->ms_blocks = mem_zalloc(sizeof(*ms->ms_blocks) * ms->ms_cap);
	VERIFY(ms->ms_blocks != NULL);
	ms->ms_nblocks = 1; /* id 0 is never used: a zero offset is not a block */
	/* Room for the free log up front: bs_free must not allocate while a test injects
	 * allocation failures into the tree. */
	ms->ms_freed_cap = 1u << 16;
	ms->ms_freed_log = mem_alloc(sizeof(uint64_t) * ms->ms_freed_cap);
	VERIFY(ms->ms_freed_log != NULL);
	ms->ms_fail_write_in = -1;
}

static void ms_fini(struct mstore *ms)
{
	for (uint64_t i = 0; i < ms->ms_nblocks; i++)
		mem_free(ms->ms_blocks[i].mb_img);
	mem_free(ms->ms_blocks);
	mem_free(ms->ms_freed_log);
}

static void ms_forget_all(struct mstore *ms)
{
	for (uint64_t i = 1; i < ms->ms_nblocks; i++)
		ms->ms_blocks[i].mb_cached = false;
}

static uint64_t ms_live_blocks(const struct mstore *ms, int level)
{
	uint64_t n = 0;
	for (uint64_t i = 1; i < ms->ms_nblocks; i++) {
		const struct mblock *mb = &ms->ms_blocks[i];
		if (mb->mb_img != NULL && !mb->mb_freed && (level < 0 || mb->mb_level == level))
			n++;
	}
	return n;
}

/* The test's own reading of the node format (the tables in btree.c). */
static uint32_t img_count(const uint8_t *img)
{
	return (uint32_t)get_le(img + 8, 2);
}

static const uint8_t *img_entry(const uint8_t *img, uint32_t i, uint32_t *klen, uint32_t *vlen)
{
	uint32_t off = (uint32_t)get_le(img + 32 + 2 * i, 2);
	*klen = img[off];
	*vlen = (uint32_t)get_le(img + off + 1, 2);
	return img + off + 3;
}

static uint64_t img_child_id(const uint8_t *img, uint32_t i)
{
	uint32_t klen, vlen;
	const uint8_t *key = img_entry(img, i, &klen, &vlen);
	return get_le(key + klen, 8) / ID_SCALE;
}

/* Marks the blocks root reaches; false when one is reached twice or does not exist. */
static bool reach_mark(const struct mstore *ms, uint64_t id, uint8_t *mark)
{
	if (id == 0 || id >= ms->ms_nblocks || ms->ms_blocks[id].mb_img == NULL || mark[id])
		return false;
	mark[id] = 1;
	const uint8_t *img = ms->ms_blocks[id].mb_img;
	if (img[6] == 0)
		return true;
	for (uint32_t i = 0; i < img_count(img); i++)
		if (!reach_mark(ms, img_child_id(img, i), mark))
			return false;
	return true;
}

static uint8_t *reach_set(const struct mstore *ms, const struct blk_ptr *root)
{
	uint8_t *mark = mem_zalloc(ms->ms_nblocks + 1);
	VERIFY(mark != NULL);
	if (root->bp_birth_txg != 0 && !reach_mark(ms, root->bp_offset / ID_SCALE, mark)) {
		mem_free(mark);
		return NULL;
	}
	return mark;
}

/* After a sync: the blocks written and not freed are exactly those the root reaches (no leak, no
 * block freed while still referenced), and nothing was freed twice. */
static bool store_matches_root(const struct mstore *ms, const struct blk_ptr *root)
{
	uint8_t *mark = reach_set(ms, root);
	if (mark == NULL)
		return false;
	bool ok = ms->ms_bad_frees == 0 && ms->ms_bad_writes == 0;
	for (uint64_t i = 1; i < ms->ms_nblocks; i++) {
		const struct mblock *mb = &ms->ms_blocks[i];
		bool live = mb->mb_img != NULL && !mb->mb_freed;
		if (live != (mark[i] != 0)) {
			printf("#   block %llu: live %d, reachable %d\n", (unsigned long long)i,
			       live, mark[i]);
			ok = false;
		}
	}
	mem_free(mark);
	return ok;
}

/* ---------------------------------------------------------------------------------------------
 * A tree over the store, with operations that load what is missing and retry */

struct env {
	struct mstore e_ms;
	struct btree_config e_cfg;
	struct btree *e_t;
	uint64_t e_misses;
	bool e_bad_miss; /* a miss named a block that is not missing */
};

static void env_init(struct env *e, uint32_t nb, uint32_t kmax, uint32_t vmax)
{
	memset(e, 0, sizeof(*e));
	ms_init(&e->e_ms, nb);
	e->e_cfg.bc_node_bytes = nb;
	e->e_cfg.bc_key_max = kmax;
	e->e_cfg.bc_val_max = vmax;
	e->e_cfg.bc_type = TREE_TYPE;
	e->e_cfg.bc_store = (struct btree_store){&e->e_ms, ms_get, ms_release, ms_write, ms_free};
	VERIFY(btree_open(&e->e_cfg, NULL, &e->e_t) == 0);
}

static void env_reopen(struct env *e, const struct blk_ptr *root)
{
	btree_close(e->e_t);
	VERIFY(btree_open(&e->e_cfg, root, &e->e_t) == 0);
}

static void env_fini(struct env *e)
{
	btree_close(e->e_t);
	ms_fini(&e->e_ms);
}

static void env_miss(struct env *e, const struct blk_ptr *bp)
{
	struct mblock *mb = ms_block(&e->e_ms, bp);
	if (mb == NULL || mb->mb_cached) {
		e->e_bad_miss = true;
		return;
	}
	mb->mb_cached = true;
	e->e_ms.ms_loads++;
	e->e_misses++;
}

#define RETRY(e, call)                                                                             \
	do {                                                                                       \
		for (int tries_ = 0; tries_ < 200; tries_++) {                                     \
			rc = (call);                                                               \
			if (rc != -SH_ENEEDBLOCK)                                                  \
				break;                                                             \
			env_miss((e), &miss);                                                      \
		}                                                                                  \
	} while (0)

static int e_lookup(struct env *e, const void *k, uint32_t kl, void *v, uint32_t cap, uint32_t *vl)
{
	struct blk_ptr miss;
	int rc;
	RETRY(e, btree_lookup(e->e_t, k, kl, v, cap, vl, &miss));
	return rc;
}

static int e_put(struct env *e, const void *k, uint32_t kl, const void *v, uint32_t vl,
                 enum btree_put_mode mode)
{
	struct blk_ptr miss;
	int rc;
	RETRY(e, btree_put(e->e_t, k, kl, v, vl, mode, &miss));
	return rc;
}

static int e_delete(struct env *e, const void *k, uint32_t kl)
{
	struct blk_ptr miss;
	int rc;
	RETRY(e, btree_delete(e->e_t, k, kl, &miss));
	return rc;
}

static int e_seek_le(struct env *e, const void *k, uint32_t kl, void *ko, uint32_t kcap,
                     uint32_t *klo, void *vo, uint32_t vcap, uint32_t *vlo)
{
	struct blk_ptr miss;
	int rc;
	RETRY(e, btree_seek_le(e->e_t, k, kl, ko, kcap, klo, vo, vcap, vlo, &miss));
	return rc;
}

static int env_load(void *arg, const struct blk_ptr *bp)
{
	struct env *e = arg;
	struct mblock *mb = ms_block(&e->e_ms, bp);
	if (mb == NULL)
		return -EIO;
	mb->mb_cached = true;
	e->e_ms.ms_loads++;
	return 0;
}

static uint64_t tree_entries(struct env *e)
{
	struct btree_stats st;
	btree_stats(e->e_t, &st);
	return st.bst_entries;
}

/* ---------------------------------------------------------------------------------------------
 * The reference model: a sorted array of entries */

struct mentry {
	uint32_t me_klen, me_vlen;
	uint8_t me_key[BTREE_KEY_MAX];
	uint8_t me_val[];
};

struct model {
	struct mentry **m_ents;
	size_t m_n, m_cap;
};

static size_t model_find(const struct model *m, const uint8_t *k, uint32_t kl, bool *found)
{
	size_t lo = 0, hi = m->m_n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (key_cmp(m->m_ents[mid]->me_key, m->m_ents[mid]->me_klen, k, kl) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < m->m_n && key_cmp(m->m_ents[lo]->me_key, m->m_ents[lo]->me_klen, k, kl) == 0;
	return lo;
}

static void model_put(struct model *m, const uint8_t *k, uint32_t kl, const uint8_t *v, uint32_t vl)
{
	bool found;
	size_t pos = model_find(m, k, kl, &found);
	struct mentry *me = mem_alloc(sizeof(*me) + vl + 1);
	VERIFY(me != NULL);
	me->me_klen = kl;
	me->me_vlen = vl;
	if (kl)
		memcpy(me->me_key, k, kl);
	if (vl)
		memcpy(me->me_val, v, vl);
	if (found) {
		mem_free(m->m_ents[pos]);
		m->m_ents[pos] = me;
		return;
	}
	if (m->m_n == m->m_cap) {
		m->m_cap = m->m_cap ? m->m_cap * 2 : 64;
		m->m_ents = mem_realloc(m->m_ents, sizeof(*m->m_ents) * m->m_cap);
		VERIFY(m->m_ents != NULL);
	}
	memmove(&m->m_ents[pos + 1], &m->m_ents[pos], sizeof(*m->m_ents) * (m->m_n - pos));
	m->m_ents[pos] = me;
	m->m_n++;
}

static bool model_del(struct model *m, const uint8_t *k, uint32_t kl)
{
	bool found;
	size_t pos = model_find(m, k, kl, &found);
	if (!found)
		return false;
	mem_free(m->m_ents[pos]);
	memmove(&m->m_ents[pos], &m->m_ents[pos + 1], sizeof(*m->m_ents) * (m->m_n - pos - 1));
	m->m_n--;
	return true;
}

static void model_fini(struct model *m)
{
	for (size_t i = 0; i < m->m_n; i++)
		mem_free(m->m_ents[i]);
	mem_free(m->m_ents);
	memset(m, 0, sizeof(*m));
}

/* Scans [start...] and compares every visited entry with the model, resuming after misses as the
 * header's contract says. Returns the number of entries visited (or -1 on a mismatch or error);
 * *resumed_mid counts misses that came after at least one entry of that call. */
struct scan_cmp {
	const struct model *sc_m;
	size_t sc_next;  /* model index expected next */
	size_t sc_limit; /* stop after this many in total */
	size_t sc_seen;
	bool sc_ok;
	uint8_t sc_last[BTREE_KEY_MAX];
	uint32_t sc_last_len;
	size_t sc_seen_this_call;
};

static bool scan_visit(void *arg, const void *key, uint32_t klen, const void *val, uint32_t vlen)
{
	struct scan_cmp *sc = arg;
	if (sc->sc_next >= sc->sc_m->m_n) {
		sc->sc_ok = false;
		return false;
	}
	const struct mentry *me = sc->sc_m->m_ents[sc->sc_next];
	if (key_cmp(key, klen, me->me_key, me->me_klen) != 0 || vlen != me->me_vlen ||
	    (vlen && memcmp(val, me->me_val, vlen) != 0)) {
		sc->sc_ok = false;
		return false;
	}
	memcpy(sc->sc_last, key, klen);
	sc->sc_last_len = klen;
	sc->sc_next++;
	sc->sc_seen++;
	sc->sc_seen_this_call++;
	return sc->sc_seen < sc->sc_limit;
}

static long scan_compare(struct env *e, const struct model *m, const uint8_t *start, uint32_t slen,
                         bool after, size_t limit, uint64_t *resumed_mid)
{
	bool found;
	struct scan_cmp sc = {.sc_m = m, .sc_limit = limit, .sc_ok = true};
	sc.sc_next = model_find(m, start, slen, &found);
	if (found && after)
		sc.sc_next++;
	size_t expect_end = limit < m->m_n - sc.sc_next ? sc.sc_next + limit : m->m_n;
	const uint8_t *from = start;
	uint32_t from_len = slen;
	bool from_after = after;
	int rc;
	for (int tries = 0; tries < 100000; tries++) {
		struct blk_ptr miss;
		sc.sc_seen_this_call = 0;
		rc = btree_scan(e->e_t, from, from_len, from_after, scan_visit, &sc, &miss);
		if (rc != -SH_ENEEDBLOCK)
			break;
		if (sc.sc_seen_this_call > 0 && resumed_mid != NULL)
			(*resumed_mid)++;
		env_miss(e, &miss);
		if (sc.sc_seen > 0) {
			from = sc.sc_last;
			from_len = sc.sc_last_len;
			from_after = true;
		}
	}
	if (rc != 0 || !sc.sc_ok || sc.sc_next != expect_end || e->e_ms.ms_holds != 0) {
		printf("#   scan: rc %d ok %d next %zu expected end %zu\n", rc, sc.sc_ok,
		       sc.sc_next, expect_end);
		return -1;
	}
	return (long)sc.sc_seen;
}

/* Every model entry is found with its value, and the tree has exactly the model's count. */
static bool tree_equals_model(struct env *e, const struct model *m)
{
	uint8_t *buf = mem_alloc(e->e_cfg.bc_val_max + 1);
	VERIFY(buf != NULL);
	bool ok = tree_entries(e) == m->m_n;
	for (size_t i = 0; ok && i < m->m_n; i++) {
		const struct mentry *me = m->m_ents[i];
		uint32_t vl = 0;
		int rc = e_lookup(e, me->me_key, me->me_klen, buf, e->e_cfg.bc_val_max, &vl);
		if (rc != 0 || vl != me->me_vlen || (vl && memcmp(buf, me->me_val, vl) != 0)) {
			printf("#   entry %zu: rc %d\n", i, rc);
			ok = false;
		}
	}
	mem_free(buf);
	if (ok && scan_compare(e, m, NULL, 0, false, SIZE_MAX, NULL) != (long)m->m_n)
		ok = false;
	return ok;
}

static int e_check(struct env *e, char *report, size_t report_bytes)
{
	return btree_check(e->e_t, env_load, e, report, report_bytes);
}

static int e_sync(struct env *e, struct blk_ptr *root)
{
	int rc = btree_sync(e->e_t, root);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * A million entries */

#define MILLION 1000000u

/* Entry i: key perm(i), big-endian (so memcmp order is numeric order, unrelated to i); value i and
 * the key again, so a scan can tell which entry it sees. */
static void million_kv(uint64_t i, uint8_t key[8], uint8_t val[16])
{
	uint64_t k = perm(i);
	put_be64(key, k);
	put_be64(val, i);
	put_be64(val + 8, k ^ 0x5555aaaa5555aaaaull);
}

static double secs_since(uint64_t t0)
{
	return (double)(clock_monotonic_ns() - t0) / 1e9;
}

/* The scan after the reopen: keys strictly increasing, each value naming an even i whose key it
 * is. With the count, that proves the tree holds exactly the even entries. */
struct million_scan {
	uint8_t ms_prev[8];
	uint64_t ms_seen;
	bool ms_ok;
};

static bool million_visit(void *arg, const void *key, uint32_t klen, const void *val, uint32_t vlen)
{
	struct million_scan *sc = arg;
	uint8_t k[8], v[16];
	const uint8_t *vb = val;
	uint64_t i = 0;
	for (int b = 0; b < 8; b++)
		i = (i << 8) | vb[b];
	million_kv(i, k, v);
	if (klen != 8 || vlen != 16 || i % 2 != 0 || i >= MILLION || memcmp(key, k, 8) != 0 ||
	    memcmp(val, v, 16) != 0 || (sc->ms_seen > 0 && memcmp(sc->ms_prev, key, 8) >= 0)) {
		sc->ms_ok = false;
		return false;
	}
	memcpy(sc->ms_prev, key, 8);
	sc->ms_seen++;
	return true;
}

static void test_million(void)
{
	struct env e;
	env_init(&e, 16384, 8, 16);
	uint8_t key[8], val[16], out[16];
	uint32_t vl;
	uint64_t t0 = clock_monotonic_ns();
	bool ok = true;
	for (uint64_t i = 0; i < MILLION && ok; i++) {
		million_kv(i, key, val);
		ok = e_put(&e, key, 8, val, 16, BTREE_PUT_NEW) == 0;
	}
	CHECK(ok);
	struct btree_stats st;
	btree_stats(e.e_t, &st);
	CHECK(st.bst_entries == MILLION);
	printf("# 1M random inserts: %.2f s, depth %u, %llu dirty nodes, %.1f MiB dirty\n",
	       secs_since(t0), st.bst_depth, (unsigned long long)st.bst_dirty_nodes,
	       (double)st.bst_dirty_bytes / 1048576.0);
	/* 16 KiB leaves hold about 560 such entries, internal nodes over 200 children: 3 levels. */
	CHECKF(st.bst_depth >= 2 && st.bst_depth <= 4, "depth %u", st.bst_depth);
	t0 = clock_monotonic_ns();
	for (uint64_t i = 0; i < MILLION && ok; i++) {
		uint64_t j = (i * 7919u) % MILLION; /* another order */
		million_kv(j, key, val);
		ok = e_lookup(&e, key, 8, out, sizeof(out), &vl) == 0 && vl == 16 &&
		     memcmp(out, val, 16) == 0;
	}
	CHECK(ok);
	/* Every other entry goes. */
	for (uint64_t i = 1; i < MILLION && ok; i += 2) {
		million_kv(i, key, val);
		ok = e_delete(&e, key, 8) == 0;
	}
	CHECK(ok);
	CHECK(tree_entries(&e) == MILLION / 2);
	printf("# 1M lookups, 500k deletes: %.2f s\n", secs_since(t0));
	t0 = clock_monotonic_ns();
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	CHECK(root.bp_fill == MILLION / 2);
	CHECK(!btree_is_dirty(e.e_t) && btree_dirty_bytes(e.e_t) == 0);
	CHECK(store_matches_root(&e.e_ms, &root));
	printf("# sync: %.2f s, %llu blocks (%llu leaves)\n", secs_since(t0),
	       (unsigned long long)e.e_ms.ms_writes,
	       (unsigned long long)ms_live_blocks(&e.e_ms, 0));
	/* Reopened from the root: the whole contents by an ordered scan, lookups of present and
	 * deleted keys on clean nodes, and the full check. */
	t0 = clock_monotonic_ns();
	env_reopen(&e, &root);
	btree_stats(e.e_t, &st);
	CHECK(st.bst_entries == MILLION / 2);
	struct million_scan sc = {.ms_ok = true};
	struct blk_ptr miss;
	CHECK(btree_scan(e.e_t, NULL, 0, false, million_visit, &sc, &miss) == 0);
	CHECKF(sc.ms_ok && sc.ms_seen == MILLION / 2, "seen %llu", (unsigned long long)sc.ms_seen);
	for (uint64_t i = 0; i < MILLION / 5 && ok; i++) {
		uint64_t j = perm(i) % MILLION;
		million_kv(j, key, val);
		int rc = e_lookup(&e, key, 8, out, sizeof(out), &vl);
		ok = (j % 2) ? rc == -ENOENT : (rc == 0 && memcmp(out, val, 16) == 0);
	}
	CHECK(ok);
	CHECK(e.e_ms.ms_holds == 0);
	char report[256];
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	printf("# reopened: a full scan, 200k lookups on clean nodes and a full check: %.2f s\n",
	       secs_since(t0));
	t0 = clock_monotonic_ns();
	for (uint64_t i = 0; i < MILLION && ok; i += 2) {
		million_kv(i, key, val);
		ok = e_delete(&e, key, 8) == 0;
	}
	CHECK(ok);
	btree_stats(e.e_t, &st);
	CHECK(st.bst_entries == 0 && st.bst_depth == 0);
	CHECK(e_sync(&e, &root) == 0);
	CHECK(root.bp_birth_txg == 0 && root.bp_fill == 0);
	CHECK(ms_live_blocks(&e.e_ms, -1) == 0 && e.e_ms.ms_bad_frees == 0);
	printf("# 500k deletes to empty and sync: %.2f s\n", secs_since(t0));
	env_fini(&e);
}

/* ---------------------------------------------------------------------------------------------
 * Random operations against the model */

struct keypool {
	uint8_t (*kp_keys)[BTREE_KEY_MAX];
	uint32_t *kp_lens;
	uint32_t kp_n;
};

/* Keys of random lengths 1..kmax; about a third are prefixes or extensions of another key, and
 * those of big-key pools share a long common prefix (long separators, deep trees). */
static void keypool_init(struct keypool *kp, uint32_t n, uint32_t kmax, uint32_t common_prefix)
{
	kp->kp_keys = mem_alloc(sizeof(*kp->kp_keys) * n);
	kp->kp_lens = mem_alloc(sizeof(*kp->kp_lens) * n);
	VERIFY(kp->kp_keys && kp->kp_lens);
	kp->kp_n = n;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *k = kp->kp_keys[i];
		uint32_t len;
		if (i > 0 && test_rng_below(3) == 0) {
			uint32_t j = test_rng_below(i);
			len = kp->kp_lens[j];
			memcpy(k, kp->kp_keys[j], len);
			if (len > 1 && test_rng_below(2))
				len -= 1 + test_rng_below(len - 1 > 3 ? 3 : len - 1);
			else
				while (len < kmax && test_rng_below(2))
					k[len++] = (uint8_t)test_rng_next();
		} else {
			len = common_prefix + 1 + test_rng_below(kmax - common_prefix);
			memset(k, 'x', common_prefix);
			for (uint32_t b = common_prefix; b < len; b++)
				k[b] = (uint8_t)(test_rng_below(4) == 0   ? 0xff
				                 : test_rng_below(3) == 0 ? 0
				                                     : test_rng_next());
		}
		kp->kp_lens[i] = len;
	}
}

static void keypool_fini(struct keypool *kp)
{
	mem_free(kp->kp_keys);
	mem_free(kp->kp_lens);
}

static void random_model_run(uint32_t nb, uint32_t kmax, uint32_t vmax, uint32_t common_prefix,
                             uint32_t nkeys, uint32_t rounds, uint64_t seed)
{
	test_rng_seed(seed);
	struct env e;
	env_init(&e, nb, kmax, vmax);
	struct model m = {0};
	struct keypool kp;
	keypool_init(&kp, nkeys, kmax, common_prefix);
	uint8_t *val = mem_alloc(vmax + 1), *out = mem_alloc(vmax + 1);
	uint8_t kout[BTREE_KEY_MAX];
	VERIFY(val && out);
	struct blk_ptr root = {0};
	uint64_t syncs = 0, reopens = 0, checks = 0, mismatches = 0, forgets = 0;
	uint32_t max_depth = 0;
	char report[256];
	for (uint32_t r = 0; r < rounds && mismatches == 0; r++) {
		bool grow = (r / 4000) % 2 == 0; /* alternate growing and shrinking phases */
		uint32_t op = test_rng_below(100);
		uint32_t ki = test_rng_below(kp.kp_n);
		const uint8_t *k = kp.kp_keys[ki];
		uint32_t kl = kp.kp_lens[ki];
		bool found;
		size_t mpos = model_find(&m, k, kl, &found);
		int rc;
		if (op < (grow ? 50u : 25u)) {
			uint32_t vl = test_rng_below(vmax + 1);
			for (uint32_t b = 0; b < vl; b++)
				val[b] = (uint8_t)test_rng_next();
			enum btree_put_mode mode = (enum btree_put_mode)test_rng_below(3);
			rc = e_put(&e, k, kl, val, vl, mode);
			int want = (mode == BTREE_PUT_NEW && found)        ? -EEXIST
			           : (mode == BTREE_PUT_REPLACE && !found) ? -ENOENT
			                                                   : 0;
			if (rc != want) {
				printf("#   round %u: put mode %d rc %d want %d\n", r, mode, rc,
				       want);
				mismatches++;
			}
			if (rc == 0)
				model_put(&m, k, kl, val, vl);
		} else if (op < 75) {
			rc = e_delete(&e, k, kl);
			if (rc != (found ? 0 : -ENOENT)) {
				printf("#   round %u: delete rc %d, found %d\n", r, rc, found);
				mismatches++;
			}
			model_del(&m, k, kl);
		} else if (op < 88) {
			uint32_t vl = 0;
			rc = e_lookup(&e, k, kl, out, vmax, &vl);
			if (found ? (rc != 0 || vl != m.m_ents[mpos]->me_vlen ||
			             (vl && memcmp(out, m.m_ents[mpos]->me_val, vl) != 0))
			          : rc != -ENOENT) {
				printf("#   round %u: lookup rc %d found %d\n", r, rc, found);
				mismatches++;
			}
		} else if (op < 95) {
			uint32_t klo = 0, vlo = 0;
			rc = e_seek_le(&e, k, kl, kout, sizeof(kout), &klo, out, vmax, &vlo);
			size_t want = found ? mpos : mpos - 1; /* SIZE_MAX when none */
			if (!found && mpos == 0) {
				if (rc != -ENOENT) {
					printf("#   round %u: seek_le rc %d, want ENOENT\n", r, rc);
					mismatches++;
				}
			} else {
				const struct mentry *me = m.m_ents[want];
				if (rc != 0 || key_cmp(kout, klo, me->me_key, me->me_klen) != 0 ||
				    vlo != me->me_vlen ||
				    (vlo && memcmp(out, me->me_val, vlo) != 0)) {
					printf("#   round %u: seek_le rc %d\n", r, rc);
					mismatches++;
				}
			}
		} else if (op < 98) {
			bool after = test_rng_below(2) != 0;
			uint32_t count = 1 + test_rng_below(50);
			if (scan_compare(&e, &m, k, kl, after, count, NULL) < 0) {
				printf("#   round %u: scan mismatch\n", r);
				mismatches++;
			}
		} else {
			uint32_t what = test_rng_below(100);
			if (what < 60) {
				if (e_sync(&e, &root) != 0 || !store_matches_root(&e.e_ms, &root) ||
				    root.bp_fill != m.m_n || btree_is_dirty(e.e_t)) {
					printf("#   round %u: sync or block accounting\n", r);
					mismatches++;
				}
				syncs++;
			} else if (what < 75) {
				if (e_sync(&e, &root) != 0) {
					mismatches++;
				}
				env_reopen(&e, &root);
				reopens++;
			} else if (what < 90) {
				ms_forget_all(&e.e_ms);
				forgets++;
			} else {
				if (e_check(&e, report, sizeof(report)) != 0) {
					printf("#   round %u: check: %s\n", r, report);
					mismatches++;
				}
				checks++;
			}
		}
		if (e.e_ms.ms_holds != 0 || e.e_ms.ms_bad_frees != 0 || e.e_bad_miss) {
			printf("#   round %u: holds %ld bad frees %llu bad miss %d\n", r,
			       e.e_ms.ms_holds, (unsigned long long)e.e_ms.ms_bad_frees,
			       e.e_bad_miss);
			mismatches++;
		}
		if (r % 256 == 0) {
			struct btree_stats st;
			btree_stats(e.e_t, &st);
			max_depth = SH_MAX(max_depth, st.bst_depth);
			if (st.bst_entries != m.m_n) {
				printf("#   round %u: %llu entries, model %zu\n", r,
				       (unsigned long long)st.bst_entries, m.m_n);
				mismatches++;
			}
		}
	}
	CHECK(mismatches == 0);
	CHECK(tree_equals_model(&e, &m));
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	CHECK(e_sync(&e, &root) == 0);
	CHECK(store_matches_root(&e.e_ms, &root));
	env_reopen(&e, &root);
	ms_forget_all(&e.e_ms);
	CHECK(tree_equals_model(&e, &m));
	CHECK(!e.e_bad_miss && e.e_misses > 0);
	printf("# %u-byte nodes, keys <= %u: %u rounds, %zu entries at the end, max depth %u, %llu "
	       "syncs, "
	       "%llu reopens, %llu forgets, %llu checks, %llu misses\n",
	       nb, kmax, rounds, m.m_n, max_depth, (unsigned long long)syncs,
	       (unsigned long long)reopens, (unsigned long long)forgets, (unsigned long long)checks,
	       (unsigned long long)e.e_misses);
	mem_free(val);
	mem_free(out);
	keypool_fini(&kp);
	model_fini(&m);
	env_fini(&e);
}

static void test_random_small_keys(void)
{
	random_model_run(1024, 16, 100, 0, 3000, 60000, 0x1234);
}

static void test_random_big_keys(void)
{
	/* 1 KiB nodes with 179-byte keys: four internal entries per node, so deep trees and long
	 * split cascades. */
	random_model_run(1024, 179, 40, 150, 1500, 30000, 0x5678);
}

static void test_random_16k(void)
{
	random_model_run(16384, 64, 2000, 0, 6000, 30000, 0x9abc);
}

static void test_random_64k(void)
{
	/* The largest nodes: entry offsets near 65535, a heap start of 65536 when empty. */
	CHECK(btree_entry_max_bytes(65536) == 16371);
	random_model_run(65536, 255, 12000, 0, 2000, 8000, 0xdef0);
}

/* ---------------------------------------------------------------------------------------------
 * Variable lengths at the maxima, put modes, overflow */

static void test_varlen_and_modes(void)
{
	/* 4 KiB nodes: entry max (4096 - 32) / 4 - 5 = 1011 bytes, so keys up to 255 and values up
	 * to 756. */
	CHECK(btree_entry_max_bytes(4096) == 1011);
	const uint32_t kmax = 255, vmax = 756;
	struct env e;
	env_init(&e, 4096, kmax, vmax);
	struct model m = {0};
	test_rng_seed(42);
	uint8_t k[BTREE_KEY_MAX], v[756], out[756];
	uint32_t vl;
	/* The empty key, and a chain of keys each a prefix of the next. */
	for (uint32_t len = 0; len <= kmax; len++) {
		memset(k, 'a', len);
		uint32_t vlen = (len * 37) % (vmax + 1);
		memset(v, (int)len, vlen);
		CHECK(e_put(&e, k, len, v, vlen, BTREE_PUT_NEW) == 0);
		model_put(&m, k, len, v, vlen);
	}
	/* Max-sized keys and values. */
	for (uint32_t i = 0; i < 300; i++) {
		for (uint32_t b = 0; b < kmax; b++)
			k[b] = (uint8_t)test_rng_next();
		uint32_t vlen = i % 3 == 0 ? vmax : test_rng_below(vmax + 1);
		for (uint32_t b = 0; b < vlen; b++)
			v[b] = (uint8_t)test_rng_next();
		CHECK(e_put(&e, k, kmax, v, vlen, BTREE_PUT_UPSERT) == 0);
		model_put(&m, k, kmax, v, vlen);
	}
	CHECK(tree_equals_model(&e, &m));
	/* The empty key sorts first, then "a", "aa", ... */
	uint32_t klo = 99, vlo = 0;
	uint8_t kout[BTREE_KEY_MAX];
	CHECK(e_seek_le(&e, "", 0, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      klo == 0 && vlo == 0);
	memset(k, 'a', 10);
	CHECK(e_seek_le(&e, k, 10, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      klo == 10);
	k[10] = 0;
	CHECK(e_seek_le(&e, k, 11, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      klo == 10);
	/* Put modes. */
	memset(k, 'a', 5);
	memset(v, 0x77, 700);
	CHECK(e_put(&e, k, 5, v, 3, BTREE_PUT_NEW) == -EEXIST);
	CHECK(e_lookup(&e, k, 5, out, sizeof(out), &vl) == 0 && vl == (5 * 37) % (vmax + 1) &&
	      out[0] == 5);
	CHECK(e_put(&e, "zz-absent", 9, v, 3, BTREE_PUT_REPLACE) == -ENOENT);
	CHECK(e_lookup(&e, "zz-absent", 9, out, sizeof(out), &vl) == -ENOENT);
	CHECK(e_put(&e, k, 5, v, 700, BTREE_PUT_REPLACE) == 0); /* grows */
	CHECK(e_lookup(&e, k, 5, out, sizeof(out), &vl) == 0 && vl == 700 && out[699] == 0x77);
	CHECK(e_put(&e, k, 5, v, 0, BTREE_PUT_UPSERT) == 0); /* shrinks to empty */
	CHECK(e_lookup(&e, k, 5, out, sizeof(out), &vl) == 0 && vl == 0);
	model_put(&m, k, 5, v, 0);
	CHECK(e_put(&e, "zz-new", 6, v, vmax, BTREE_PUT_NEW) == 0);
	model_put(&m, (const uint8_t *)"zz-new", 6, v, vmax);
	CHECK(tree_entries(&e) == m.m_n);
	/* Overflow: the needed length comes back, nothing is copied. */
	memset(out, 0xee, sizeof(out));
	CHECK(e_lookup(&e, "zz-new", 6, out, vmax - 1, &vl) == -EOVERFLOW && vl == vmax &&
	      out[0] == 0xee);
	CHECK(e_lookup(&e, "zz-new", 6, out, vmax, &vl) == 0 && vl == vmax && out[0] == 0x77);
	CHECK(e_lookup(&e, "zz-new", 6, NULL, 0, &vl) == -EOVERFLOW && vl == vmax);
	CHECK(e_seek_le(&e, "zz-new", 6, kout, 5, &klo, out, sizeof(out), &vlo) == -EOVERFLOW &&
	      klo == 6);
	CHECK(e_seek_le(&e, "zz-new", 6, kout, 6, &klo, out, 10, &vlo) == -EOVERFLOW &&
	      vlo == vmax);
	/* Lengths beyond the configuration. */
	uint8_t big[BTREE_KEY_MAX + 1] = {0};
	struct blk_ptr miss;
	CHECK(btree_put(e.e_t, big, kmax + 1, v, 1, BTREE_PUT_UPSERT, &miss) == -EINVAL);
	CHECK(btree_put(e.e_t, big, 1, v, vmax + 1, BTREE_PUT_UPSERT, &miss) == -EINVAL);
	CHECK(btree_lookup(e.e_t, big, kmax + 1, out, sizeof(out), &vl, &miss) == -EINVAL);
	CHECK(btree_delete(e.e_t, big, kmax + 1, &miss) == -EINVAL);
	CHECK(btree_put(e.e_t, big, 1, v, 1, (enum btree_put_mode)9, &miss) == -EINVAL);
	/* Sync, reopen, everything is still there; then delete it all. */
	struct blk_ptr root;
	char report[256];
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	CHECK(e_sync(&e, &root) == 0 && root.bp_fill == m.m_n);
	CHECK(store_matches_root(&e.e_ms, &root));
	env_reopen(&e, &root);
	CHECK(tree_equals_model(&e, &m));
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	while (m.m_n > 0) {
		struct mentry *me = m.m_ents[test_rng_below((uint32_t)m.m_n)];
		CHECK(e_delete(&e, me->me_key, me->me_klen) == 0);
		CHECK(e_delete(&e, me->me_key, me->me_klen) == -ENOENT);
		model_del(&m, me->me_key, me->me_klen);
	}
	CHECK(tree_entries(&e) == 0);
	CHECK(e_lookup(&e, "", 0, out, sizeof(out), &vl) == -ENOENT);
	CHECK(e_sync(&e, &root) == 0 && root.bp_birth_txg == 0);
	CHECK(store_matches_root(&e.e_ms, &root));
	model_fini(&m);
	env_fini(&e);
}

static void test_config(void)
{
	struct mstore ms;
	ms_init(&ms, 1024);
	struct btree_config cfg = {
	    1024, 16, 100, TREE_TYPE, {&ms, ms_get, ms_release, ms_write, ms_free}};
	struct btree *t = NULL;
	CHECK(btree_open(&cfg, NULL, &t) == 0);
	btree_close(t);
	struct btree_config bad = cfg;
	bad.bc_node_bytes = 512;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	bad.bc_node_bytes = 3000;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	bad.bc_node_bytes = 131072;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	bad = cfg;
	bad.bc_key_max = 0;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	bad.bc_key_max = 256;
	bad.bc_node_bytes = 65536;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	/* 1 KiB: entry max 243, so an internal entry (key + 64) allows keys up to 179. */
	bad = cfg;
	bad.bc_val_max = 0;
	bad.bc_key_max = 179;
	CHECK(btree_open(&bad, NULL, &t) == 0);
	btree_close(t);
	bad.bc_key_max = 180;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	bad = cfg;
	bad.bc_val_max = 243 - 16 + 1;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	bad.bc_val_max = 243 - 16;
	CHECK(btree_open(&bad, NULL, &t) == 0);
	btree_close(t);
	bad = cfg;
	bad.bc_store.bs_free = NULL;
	CHECK(btree_open(&bad, NULL, &t) == -EINVAL);
	/* Root pointers that cannot name a node of this tree. */
	struct blk_ptr root = {
	    .bp_offset = ID_SCALE, .bp_lsize = 1024, .bp_birth_txg = 1, .bp_fill = 1};
	CHECK(btree_open(&cfg, &root, &t) == 0);
	btree_close(t);
	root.bp_lsize = 2048;
	CHECK(btree_open(&cfg, &root, &t) == -EIO);
	root.bp_lsize = 1024;
	root.bp_level = BTREE_MAX_LEVELS;
	CHECK(btree_open(&cfg, &root, &t) == -EIO);
	root.bp_level = 0;
	root.bp_fill = 0;
	CHECK(btree_open(&cfg, &root, &t) == -EIO);
	struct blk_ptr hole = {0};
	CHECK(btree_open(&cfg, &hole, &t) == 0);
	struct btree_stats st;
	btree_stats(t, &st);
	CHECK(st.bst_depth == 0 && st.bst_entries == 0 && !btree_is_dirty(t));
	btree_close(t);
	btree_close(NULL);
	ms_fini(&ms);
}

/* ---------------------------------------------------------------------------------------------
 * Scans and seeks */

static void fmt_key(uint8_t *k, uint32_t n)
{
	snprintf((char *)k, 8, "k%05u", n);
}

static void test_scan_and_seek(void)
{
	struct env e;
	env_init(&e, 1024, 16, 8);
	struct model m = {0};
	uint8_t k[8], v[8], kout[16], out[8];
	uint32_t klo, vlo;
	for (uint32_t i = 0; i < 2000; i += 2) { /* ascending: sequential splits */
		fmt_key(k, i);
		memcpy(v, &i, sizeof(i));
		CHECK(e_put(&e, k, 6, v, 4, BTREE_PUT_NEW) == 0);
		model_put(&m, k, 6, v, 4);
	}
	struct btree_stats st;
	btree_stats(e.e_t, &st);
	CHECKF(st.bst_depth >= 2, "depth %u", st.bst_depth);
	CHECK(scan_compare(&e, &m, NULL, 0, false, SIZE_MAX, NULL) == 1000);
	CHECK(scan_compare(&e, &m, (const uint8_t *)"", 0, true, SIZE_MAX, NULL) == 1000);
	/* From the middle: present key, absent key, with and without after. */
	fmt_key(k, 1000);
	CHECK(scan_compare(&e, &m, k, 6, false, SIZE_MAX, NULL) == 500);
	CHECK(scan_compare(&e, &m, k, 6, true, SIZE_MAX, NULL) == 499);
	fmt_key(k, 1001);
	CHECK(scan_compare(&e, &m, k, 6, false, SIZE_MAX, NULL) == 499);
	CHECK(scan_compare(&e, &m, k, 6, true, SIZE_MAX, NULL) == 499);
	CHECK(scan_compare(&e, &m, (const uint8_t *)"k", 1, false, SIZE_MAX, NULL) == 1000);
	CHECK(scan_compare(&e, &m, (const uint8_t *)"z", 1, false, SIZE_MAX, NULL) == 0);
	fmt_key(k, 1998);
	CHECK(scan_compare(&e, &m, k, 6, true, SIZE_MAX, NULL) == 0);
	/* Stopping early. */
	CHECK(scan_compare(&e, &m, NULL, 0, false, 10, NULL) == 10);
	fmt_key(k, 500);
	CHECK(scan_compare(&e, &m, k, 6, false, 77, NULL) == 77);
	/* seek_le at, between, before and after the keys; last. */
	fmt_key(k, 1001);
	CHECK(e_seek_le(&e, k, 6, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      klo == 6 && memcmp(kout, "k01000", 6) == 0 && vlo == 4);
	fmt_key(k, 1000);
	CHECK(e_seek_le(&e, k, 6, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      memcmp(kout, "k01000", 6) == 0);
	CHECK(e_seek_le(&e, k, 7, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) ==
	          0 && /* "k01000\0" */
	      memcmp(kout, "k01000", 6) == 0);
	CHECK(e_seek_le(&e, "k", 1, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == -ENOENT);
	CHECK(e_seek_le(&e, "", 0, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == -ENOENT);
	CHECK(e_seek_le(&e, "z", 1, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      memcmp(kout, "k01998", 6) == 0);
	struct blk_ptr miss;
	CHECK(btree_last(e.e_t, kout, sizeof(kout), &klo, out, sizeof(out), &vlo, &miss) == 0 &&
	      klo == 6 && memcmp(kout, "k01998", 6) == 0);
	CHECK(btree_last(e.e_t, kout, 3, &klo, out, sizeof(out), &vlo, &miss) == -EOVERFLOW &&
	      klo == 6);
	/* seek_le where the separator that routes the key is below the leaf's first key, so the
	 * answer is in the previous leaf: find the second leaf's first key from the synced images,
	 * delete it and its successor, and seek the deleted key. */
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	const uint8_t *img = e.e_ms.ms_blocks[root.bp_offset / ID_SCALE].mb_img;
	while (img[6] > 1)
		img = e.e_ms.ms_blocks[img_child_id(img, 0)].mb_img;
	CHECK(img[6] == 1 && img_count(img) >= 2);
	uint32_t kl0, vl0;
	const uint8_t *first =
	    img_entry(e.e_ms.ms_blocks[img_child_id(img, 1)].mb_img, 0, &kl0, &vl0);
	uint8_t victim[8];
	memcpy(victim, first, 6);
	unsigned num = (unsigned)atoi((const char *)victim + 1);
	fmt_key(k, num + 2);
	CHECK(e_delete(&e, victim, 6) == 0 && e_delete(&e, k, 6) == 0);
	model_del(&m, victim, 6);
	model_del(&m, k, 6);
	fmt_key(k, num - 2);
	CHECK(e_seek_le(&e, victim, 6, kout, sizeof(kout), &klo, out, sizeof(out), &vlo) == 0 &&
	      klo == 6 && memcmp(kout, k, 6) == 0);
	/* Every probe position against the model. */
	bool ok = true;
	for (uint32_t i = 0; i < 2002 && ok; i++) {
		fmt_key(k, i);
		bool found;
		size_t pos = model_find(&m, k, 6, &found);
		int rc = e_seek_le(&e, k, 6, kout, sizeof(kout), &klo, out, sizeof(out), &vlo);
		if (!found && pos == 0)
			ok = rc == -ENOENT;
		else
			ok = rc == 0 &&
			     memcmp(kout, m.m_ents[found ? pos : pos - 1]->me_key, 6) == 0;
	}
	CHECK(ok);
	CHECK(e.e_ms.ms_holds == 0);
	model_fini(&m);
	env_fini(&e);
}

static void test_scan_resume_after_miss(void)
{
	struct env e;
	env_init(&e, 1024, 16, 24);
	struct model m = {0};
	test_rng_seed(7);
	uint8_t k[16], v[24];
	for (uint32_t i = 0; i < 3000; i++) {
		uint32_t kl = 4 + test_rng_below(12), vl = test_rng_below(25);
		for (uint32_t b = 0; b < kl; b++)
			k[b] = (uint8_t)test_rng_next();
		for (uint32_t b = 0; b < vl; b++)
			v[b] = (uint8_t)test_rng_next();
		CHECK(e_put(&e, k, kl, v, vl, BTREE_PUT_UPSERT) == 0);
		model_put(&m, k, kl, v, vl);
	}
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	/* Cold: every leaf misses after the previous one's entries were visited. */
	ms_forget_all(&e.e_ms);
	uint64_t resumed_mid = 0, misses0 = e.e_misses;
	CHECK(scan_compare(&e, &m, NULL, 0, false, SIZE_MAX, &resumed_mid) == (long)m.m_n);
	uint64_t leaves = ms_live_blocks(&e.e_ms, 0);
	printf(
	    "# cold scan of %zu entries: %llu misses, %llu after visiting entries, %llu leaves\n",
	    m.m_n, (unsigned long long)(e.e_misses - misses0), (unsigned long long)resumed_mid,
	    (unsigned long long)leaves);
	CHECK(resumed_mid + 1 >= leaves); /* every leaf but the first was reached mid-scan */
	CHECK(e.e_misses - misses0 == ms_live_blocks(&e.e_ms, -1)); /* each block missed once */
	/* From the middle, cold again, with after. */
	ms_forget_all(&e.e_ms);
	const struct mentry *mid = m.m_ents[m.m_n / 3];
	resumed_mid = 0;
	CHECK(scan_compare(&e, &m, mid->me_key, mid->me_klen, true, SIZE_MAX, &resumed_mid) ==
	      (long)(m.m_n - m.m_n / 3 - 1));
	CHECK(resumed_mid > 0);
	CHECK(!e.e_bad_miss);
	model_fini(&m);
	env_fini(&e);
}

/* ---------------------------------------------------------------------------------------------
 * Misses: every operation on a cold tree misses, changes nothing, and succeeds once loaded */

static void test_misses(void)
{
	struct env e;
	env_init(&e, 1024, 16, 16);
	struct model m = {0};
	uint8_t k[16], v[16], out[16];
	uint32_t vl;
	for (uint32_t i = 0; i < 2000; i++) {
		snprintf((char *)k, sizeof(k), "m%07u", i * 3);
		memset(v, (int)i, 16);
		CHECK(e_put(&e, k, 8, v, 16, BTREE_PUT_NEW) == 0);
		model_put(&m, k, 8, v, 16);
	}
	struct blk_ptr root, miss;
	CHECK(e_sync(&e, &root) == 0);
	struct btree_stats st;
	btree_stats(e.e_t, &st);
	CHECK(st.bst_depth >= 3);
	uint32_t depth = st.bst_depth;

	/* Each of lookup, put NEW, put UPSERT, delete: the first call misses on the root, then on
	 * each level below, changing nothing; it then succeeds exactly once (no double insert). */
	for (int op = 0; op < 4; op++) {
		ms_forget_all(&e.e_ms);
		snprintf((char *)k, sizeof(k), "m%07u", op == 1 ? 3001u : 3000u); /* 3001: absent */
		memset(v, 0x40 + op, 16);
		uint64_t entries = tree_entries(&e);
		int rc;
		uint32_t misses = 0;
		for (;;) {
			if (op == 0)
				rc = btree_lookup(e.e_t, k, 8, out, sizeof(out), &vl, &miss);
			else if (op == 1)
				rc = btree_put(e.e_t, k, 8, v, 16, BTREE_PUT_NEW, &miss);
			else if (op == 2)
				rc = btree_put(e.e_t, k, 8, v, 16, BTREE_PUT_UPSERT, &miss);
			else
				rc = btree_delete(e.e_t, k, 8, &miss);
			if (rc != -SH_ENEEDBLOCK)
				break;
			misses++;
			CHECK(e.e_ms.ms_holds == 0);
			CHECK(!btree_is_dirty(e.e_t) &&
			      tree_entries(&e) == entries); /* unchanged */
			if (misses == 1)
				CHECK(miss.bp_offset == root.bp_offset); /* the root first */
			env_miss(&e, &miss);
		}
		CHECKF(rc == 0, "op %d rc %d", op, rc);
		CHECKF(misses == depth, "op %d: %u misses, depth %u", op, misses, depth);
		if (op == 1) {
			model_put(&m, k, 8, v, 16);
			CHECK(tree_entries(&e) == entries + 1);
		} else if (op == 2) {
			model_put(&m, k, 8, v, 16);
			CHECK(tree_entries(&e) == entries);
		} else if (op == 3) {
			model_del(&m, k, 8);
			CHECK(tree_entries(&e) == entries - 1);
		}
		CHECK(e_sync(&e, &root) == 0);
		CHECK(store_matches_root(&e.e_ms, &root));
	}
	/* The read-only operations on a cold tree: each first names the root, then every level. */
	for (int op = 0; op < 3; op++) {
		ms_forget_all(&e.e_ms);
		snprintf((char *)k, sizeof(k), "m%07u", 4000u);
		uint8_t kout[16];
		uint32_t klo = 0, vlo = 0, misses = 0;
		struct scan_cmp sc = {.sc_m = &m, .sc_limit = 5, .sc_ok = true};
		bool found;
		sc.sc_next = model_find(&m, k, 8, &found);
		int rc;
		for (;;) {
			if (op == 0)
				rc = btree_seek_le(e.e_t, k, 8, kout, sizeof(kout), &klo, out,
				                   sizeof(out), &vlo, &miss);
			else if (op == 1)
				rc = btree_last(e.e_t, kout, sizeof(kout), &klo, out, sizeof(out),
				                &vlo, &miss);
			else
				rc = btree_scan(e.e_t, k, 8, false, scan_visit, &sc, &miss);
			if (rc != -SH_ENEEDBLOCK)
				break;
			if (misses++ == 0)
				CHECK(miss.bp_offset == root.bp_offset);
			CHECK(sc.sc_seen == 0 && e.e_ms.ms_holds == 0);
			env_miss(&e, &miss);
		}
		CHECKF(rc == 0 && misses == depth, "read op %d: rc %d, %u misses", op, rc, misses);
		if (op == 0)
			CHECK(klo == 8 &&
			      memcmp(kout, m.m_ents[found ? sc.sc_next : sc.sc_next - 1]->me_key,
			             8) == 0);
		else if (op == 1)
			CHECK(klo == 8 && memcmp(kout, m.m_ents[m.m_n - 1]->me_key, 8) == 0);
		else
			CHECK(sc.sc_ok && sc.sc_seen == 5);
	}
	CHECK(!btree_is_dirty(e.e_t));
	/* The retried operations did exactly one thing each. */
	snprintf((char *)k, sizeof(k), "m%07u", 3001u);
	CHECK(e_put(&e, k, 8, v, 16, BTREE_PUT_NEW) == -EEXIST);
	snprintf((char *)k, sizeof(k), "m%07u", 3000u);
	CHECK(e_lookup(&e, k, 8, out, sizeof(out), &vl) == -ENOENT);
	/* Cold tree, random operations through the retrying wrappers. */
	ms_forget_all(&e.e_ms);
	test_rng_seed(99);
	for (uint32_t i = 0; i < 3000; i++) {
		snprintf((char *)k, sizeof(k), "m%07u", test_rng_below(7000));
		bool found;
		model_find(&m, k, 8, &found);
		if (test_rng_below(2)) {
			CHECK(e_delete(&e, k, 8) == (found ? 0 : -ENOENT));
			model_del(&m, k, 8);
		} else {
			memset(v, (int)i, 16);
			CHECK(e_put(&e, k, 8, v, 16, BTREE_PUT_NEW) == (found ? -EEXIST : 0));
			if (!found)
				model_put(&m, k, 8, v, 16);
		}
		if (i % 500 == 0) {
			CHECK(e_sync(&e, &root) == 0);
			ms_forget_all(&e.e_ms);
		}
	}
	CHECK(tree_equals_model(&e, &m));
	CHECK(!e.e_bad_miss);
	model_fini(&m);
	env_fini(&e);
}

/* ---------------------------------------------------------------------------------------------
 * Copy on write */

static void test_copy_on_write(void)
{
	struct env e;
	env_init(&e, 1024, 16, 32);
	struct model m = {0};
	test_rng_seed(3);
	uint8_t k[16], v[32], out[32];
	uint32_t vl;
	for (uint32_t i = 0; i < 600; i++) {
		snprintf((char *)k, sizeof(k), "c%06u", (uint32_t)perm(i) % 1000000u);
		memset(v, (int)i, 32);
		CHECK(e_put(&e, k, 7, v, 32, BTREE_PUT_UPSERT) == 0);
		model_put(&m, k, 7, v, 32);
	}
	struct blk_ptr root1, root2;
	CHECK(e_sync(&e, &root1) == 0);
	CHECK(store_matches_root(&e.e_ms, &root1));
	uint8_t *s1 = reach_set(&e.e_ms, &root1);
	VERIFY(s1 != NULL);
	uint64_t n1 = e.e_ms.ms_nblocks;
	struct model old = {0};
	for (size_t i = 0; i < m.m_n; i++)
		model_put(&old, m.m_ents[i]->me_key, 7, m.m_ents[i]->me_val, 32);
	e.e_ms.ms_nfreed_log = 0;
	/* Updates, deletes and inserts. Frees happen as the changes are made, not at sync. */
	for (uint32_t i = 0; i < 30; i++) {
		const struct mentry *me = m.m_ents[test_rng_below((uint32_t)m.m_n)];
		memset(v, 0xaa, 32);
		CHECK(e_put(&e, me->me_key, 7, v, 32, BTREE_PUT_REPLACE) == 0);
		model_put(&m, me->me_key, 7, v, 32);
	}
	size_t frees_before_sync = e.e_ms.ms_nfreed_log;
	CHECK(frees_before_sync > 0);
	for (uint32_t i = 0; i < 40; i++) {
		const struct mentry *me = m.m_ents[test_rng_below((uint32_t)m.m_n)];
		uint8_t victim[7];
		memcpy(victim, me->me_key, 7);
		CHECK(e_delete(&e, victim, 7) == 0);
		model_del(&m, victim, 7);
	}
	for (uint32_t i = 0; i < 50; i++) {
		snprintf((char *)k, sizeof(k), "d%06u", i);
		memset(v, 0xbb, 32);
		CHECK(e_put(&e, k, 7, v, 32, BTREE_PUT_NEW) == 0);
		model_put(&m, k, 7, v, 32);
	}
	size_t frees_at_sync = e.e_ms.ms_nfreed_log;
	CHECK(e_sync(&e, &root2) == 0);
	CHECK(e.e_ms.ms_nfreed_log == frees_at_sync); /* sync itself frees nothing */
	uint8_t *s2 = reach_set(&e.e_ms, &root2);
	VERIFY(s2 != NULL);
	/* Freed = exactly the blocks of root 1 that root 2 does not reach, each once. */
	uint8_t *freed = mem_zalloc(e.e_ms.ms_nblocks);
	VERIFY(freed != NULL);
	bool ok = e.e_ms.ms_bad_frees == 0;
	for (size_t i = 0; i < e.e_ms.ms_nfreed_log; i++) {
		uint64_t id = e.e_ms.ms_freed_log[i];
		ok = ok && id < n1 && s1[id] && !s2[id] && !freed[id];
		freed[id] = 1;
	}
	size_t replaced = 0;
	for (uint64_t id = 1; id < n1; id++) {
		if (s1[id] && !s2[id]) {
			replaced++;
			ok = ok && freed[id];
		}
	}
	CHECKF(ok && replaced == e.e_ms.ms_nfreed_log, "replaced %zu freed %zu", replaced,
	       e.e_ms.ms_nfreed_log);
	printf("# copy on write: %zu of root 1's blocks replaced and freed, %llu new blocks\n",
	       replaced, (unsigned long long)(e.e_ms.ms_nblocks - n1));
	/* Root 1's images are untouched, and a tree opened at root 1 still reads the old contents.
	 */
	for (uint64_t id = 1; id < n1; id++)
		if (s1[id])
			ok = ok && img_hash(e.e_ms.ms_blocks[id].mb_img, 1024) ==
			               e.e_ms.ms_blocks[id].mb_hash;
	CHECK(ok);
	struct btree *t1;
	CHECK(btree_open(&e.e_cfg, &root1, &t1) == 0);
	struct btree *t2 = e.e_t;
	e.e_t = t1;
	CHECK(tree_equals_model(&e, &old));
	char report[256];
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	e.e_t = t2;
	btree_close(t1);
	CHECK(tree_equals_model(&e, &m));
	CHECK(store_matches_root(&e.e_ms, &root2));
	/* A lookup on the clean tree changes nothing; a delete of an absent key frees nothing. */
	size_t nfreed = e.e_ms.ms_nfreed_log;
	CHECK(e_lookup(&e, m.m_ents[0]->me_key, 7, out, sizeof(out), &vl) == 0);
	CHECK(e_delete(&e, "nothing", 7) == -ENOENT);
	CHECK(e.e_ms.ms_nfreed_log == nfreed && !btree_is_dirty(e.e_t));
	mem_free(s1);
	mem_free(s2);
	mem_free(freed);
	model_fini(&old);
	model_fini(&m);
	env_fini(&e);
}

/* ---------------------------------------------------------------------------------------------
 * A failing bs_write */

static void test_sync_failure(void)
{
	struct env e;
	env_init(&e, 1024, 16, 40);
	struct model m = {0};
	test_rng_seed(11);
	uint8_t k[16], v[40];
	for (uint32_t i = 0; i < 800; i++) {
		snprintf((char *)k, sizeof(k), "f%08u", (uint32_t)(perm(i) % 100000000u));
		for (uint32_t b = 0; b < 40; b++)
			v[b] = (uint8_t)test_rng_next();
		CHECK(e_put(&e, k, 9, v, 40, BTREE_PUT_UPSERT) == 0);
		model_put(&m, k, 9, v, 40);
	}
	struct btree_stats st0, st;
	btree_stats(e.e_t, &st0);
	struct blk_ptr root = {0};
	char report[256];
	/* Fail the 6th write: five nodes are written and become clean in dirty parents. */
	e.e_ms.ms_fail_write_in = 5;
	e.e_ms.ms_fail_errno = ENOSPC;
	CHECK(e_sync(&e, &root) == -ENOSPC);
	btree_stats(e.e_t, &st);
	CHECK(btree_is_dirty(e.e_t));
	CHECK(st.bst_dirty_nodes == st0.bst_dirty_nodes - 5);
	CHECK(e.e_ms.ms_writes == 5);
	CHECK(tree_equals_model(&e, &m));
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	/* Fail the very first write: nothing changes. */
	e.e_ms.ms_fail_write_in = 0;
	e.e_ms.ms_fail_errno = EIO;
	CHECK(e_sync(&e, &root) == -EIO);
	btree_stats(e.e_t, &st);
	CHECK(st.bst_dirty_nodes == st0.bst_dirty_nodes - 5);
	/* Changes between the failed sync and the next: a written node copied again is freed. */
	for (uint32_t i = 0; i < 40; i++) {
		const struct mentry *me = m.m_ents[test_rng_below((uint32_t)m.m_n)];
		memset(v, 0x11, 40);
		CHECK(e_put(&e, me->me_key, 9, v, 40, BTREE_PUT_REPLACE) == 0);
		model_put(&m, me->me_key, 9, v, 40);
	}
	CHECK(e_sync(&e, &root) == 0);
	CHECK(!btree_is_dirty(e.e_t) && root.bp_fill == m.m_n);
	CHECK(store_matches_root(&e.e_ms,
	                         &root)); /* the nodes of the failed sync are used or freed */
	env_reopen(&e, &root);
	ms_forget_all(&e.e_ms);
	CHECK(tree_equals_model(&e, &m));
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	/* A clean tree's sync writes nothing. */
	uint64_t writes = e.e_ms.ms_writes;
	struct blk_ptr again;
	CHECK(e_sync(&e, &again) == 0 && again.bp_offset == root.bp_offset &&
	      e.e_ms.ms_writes == writes);
	model_fini(&m);
	env_fini(&e);
}

/* ---------------------------------------------------------------------------------------------
 * Corrupted images */

struct corrupt_env {
	struct env ce_e;
	struct model ce_m;
	struct blk_ptr ce_root;          /* as synced */
	struct blk_ptr ce_open_root;     /* what corrupt_ops opens (a case may change the fill) */
	uint64_t ce_root_id, ce_leaf_id; /* the root (internal) and its second child's first leaf */
};

static void corrupt_setup(struct corrupt_env *ce)
{
	memset(ce, 0, sizeof(*ce));
	env_init(&ce->ce_e, 1024, 16, 20);
	uint8_t k[16], v[20];
	for (uint32_t i = 0; i < 600; i++) {
		snprintf((char *)k, sizeof(k), "r%06u", (uint32_t)(perm(i) % 1000000u));
		memset(v, (int)i, 20);
		VERIFY(e_put(&ce->ce_e, k, 7, v, 20, BTREE_PUT_UPSERT) == 0);
		model_put(&ce->ce_m, k, 7, v, 20);
	}
	VERIFY(e_sync(&ce->ce_e, &ce->ce_root) == 0);
	ce->ce_open_root = ce->ce_root;
	ce->ce_root_id = ce->ce_root.bp_offset / ID_SCALE;
	const uint8_t *img = ce->ce_e.e_ms.ms_blocks[ce->ce_root_id].mb_img;
	VERIFY(img[6] >= 1 && img_count(img) >= 2);
	uint64_t id = img_child_id(img, 1);
	while (ce->ce_e.e_ms.ms_blocks[id].mb_img[6] > 0)
		id = img_child_id(ce->ce_e.e_ms.ms_blocks[id].mb_img, 0);
	ce->ce_leaf_id = id;
}

static void corrupt_teardown(struct corrupt_env *ce)
{
	model_fini(&ce->ce_m);
	env_fini(&ce->ce_e);
}

/* The test's own writer of the node format: rewrites img (header kept) with n entries. */
struct img_ent {
	uint8_t ie_key[BTREE_KEY_MAX];
	uint32_t ie_klen;
	uint8_t ie_val[64];
	uint32_t ie_vlen;
};

static uint32_t img_read(const uint8_t *img, struct img_ent *ents)
{
	uint32_t n = img_count(img);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *k = img_entry(img, i, &ents[i].ie_klen, &ents[i].ie_vlen);
		memcpy(ents[i].ie_key, k, ents[i].ie_klen);
		memcpy(ents[i].ie_val, k + ents[i].ie_klen, ents[i].ie_vlen);
	}
	return n;
}

static void img_write(uint8_t *img, uint32_t nb, const struct img_ent *ents, uint32_t n)
{
	memset(img + 8, 0, nb - 8);
	img[8] = (uint8_t)n;
	img[9] = (uint8_t)(n >> 8);
	uint32_t heap = nb;
	for (uint32_t i = 0; i < n; i++) {
		heap -= 3 + ents[i].ie_klen + ents[i].ie_vlen;
		img[heap] = (uint8_t)ents[i].ie_klen;
		img[heap + 1] = (uint8_t)ents[i].ie_vlen;
		img[heap + 2] = (uint8_t)(ents[i].ie_vlen >> 8);
		memcpy(img + heap + 3, ents[i].ie_key, ents[i].ie_klen);
		memcpy(img + heap + 3 + ents[i].ie_klen, ents[i].ie_val, ents[i].ie_vlen);
		img[32 + 2 * i] = (uint8_t)heap;
		img[33 + 2 * i] = (uint8_t)(heap >> 8);
	}
	img[12] = (uint8_t)heap;
	img[13] = (uint8_t)(heap >> 8);
}

/* Runs the operations on a fresh tree over the current (corrupted) images: a lookup of a key in
 * the damaged leaf, a full scan, a put and a delete of that key, and the check. Returns how many
 * of them failed with -EIO; any other failure, a hold left or a changed tree is an error. */
static int corrupt_ops(struct corrupt_env *ce, const uint8_t *key, uint32_t klen, bool *other_error,
                       char *report, size_t report_bytes)
{
	struct env *e = &ce->ce_e;
	env_reopen(e, &ce->ce_open_root);
	int eio = 0;
	uint8_t out[32];
	uint32_t vl;
	struct blk_ptr miss;
	int rc[5];
	rc[0] = btree_lookup(e->e_t, key, klen, out, sizeof(out), &vl, &miss);
	struct scan_cmp sc = {.sc_m = &ce->ce_m, .sc_limit = SIZE_MAX, .sc_ok = true};
	rc[1] = btree_scan(e->e_t, NULL, 0, false, scan_visit, &sc, &miss);
	rc[2] = btree_put(e->e_t, key, klen, "x", 1, BTREE_PUT_UPSERT, &miss);
	rc[3] = btree_delete(e->e_t, key, klen, &miss);
	rc[4] = e_check(e, report, report_bytes);
	for (int i = 0; i < 5; i++) {
		if (rc[i] == -EIO)
			eio++;
		else if (rc[i] != 0 && rc[i] != -ENOENT && rc[i] != -EOVERFLOW)
			*other_error = true;
	}
	if (rc[4] == -EIO && strstr(report, "level") == NULL)
		*other_error = true;
	if (e->e_ms.ms_holds != 0)
		*other_error = true;
	if (rc[2] == -EIO && rc[3] == -EIO && btree_is_dirty(e->e_t))
		*other_error = true;
	return eio;
}

static void swap_slots(uint8_t *img, uint32_t a, uint32_t b)
{
	uint8_t t0 = img[32 + 2 * a], t1 = img[33 + 2 * a];
	img[32 + 2 * a] = img[32 + 2 * b];
	img[33 + 2 * a] = img[33 + 2 * b];
	img[32 + 2 * b] = t0;
	img[33 + 2 * b] = t1;
}

static void test_corrupt_images(void)
{
	struct corrupt_env ce;
	corrupt_setup(&ce);
	struct mstore *ms = &ce.ce_e.e_ms;
	ms->ms_ignore_frees = true; /* the trees opened over damaged images are thrown away */
	uint8_t *leaf = ms->ms_blocks[ce.ce_leaf_id].mb_img;
	uint8_t *root = ms->ms_blocks[ce.ce_root_id].mb_img;
	uint8_t save_leaf[1024], save_root[1024];
	memcpy(save_leaf, leaf, 1024);
	memcpy(save_root, root, 1024);
	uint32_t klen, vlen;
	uint8_t key[16];
	const uint8_t *k0 = img_entry(leaf, 0, &klen, &vlen);
	memcpy(key, k0, klen);
	bool other = false;
	char report[256];
	/* The untouched tree: nothing fails. */
	CHECK(corrupt_ops(&ce, key, klen, &other, report, sizeof(report)) == 0 && !other);

	/* Each case, and what the check must say about it. */
	static const struct {
		const char *name, *report;
	} cases[] = {
	    {"bad magic", "bad magic"},
	    {"slot offset past the end", "out of bounds"},
	    {"slot offset inside the slot array", "out of bounds"},
	    {"unsorted keys", "not greater"},
	    {"wrong level", "level 1, expected 0"},
	    {"key length beyond the maximum", "out of bounds"},
	    {"value running past the end", "out of bounds"},
	    {"count beyond the node", "entry count"},
	    {"count zero", "entry count"},
	    {"heap start inside the slots", "heap start"},
	    {"wrong tree type", "tree type"},
	    {"byte accounting", "accounts for"},
	    {"first key below the separator", "below the node's lower bound"},
	    {"unknown version", "version"},
	    {"reserved byte set", "reserved"},
	    /* in the root: */
	    {"child fill wrong", "fill"},
	    {"child level wrong", "child pointer invalid"},
	    {"separators unsorted", "key"},
	    {"first separator not empty", "first key is not empty"},
	    {"child pointer size wrong", "out of bounds"},
	    {"child pointer is a hole", "child pointer invalid"},
	    {"one block under two separators", "lower bound"},
	};
	static struct img_ent ents[64];
	for (size_t c = 0; c < SH_ARRAY_SIZE(cases); c++) {
		bool in_root = c >= 15;
		uint8_t *img = in_root ? root : leaf;
		uint32_t cnt = img_count(img);
		uint32_t off0 = (uint32_t)get_le(img + 32, 2), off1 = (uint32_t)get_le(img + 34, 2);
		uint32_t kl, vl, far = 0;
		for (uint32_t i = 0; i < cnt; i++)
			far = SH_MAX(far, (uint32_t)get_le(img + 32 + 2 * i, 2));
		ce.ce_open_root = ce.ce_root;
		switch (c) {
		case 0: img[0] ^= 0xff; break;
		case 1:
			img[32] = 0xfe;
			img[33] = 0x03;
			break; /* 1022: no room for an entry header */
		case 2:
			img[32] = 34;
			img[33] = 0;
			break;
		case 3: swap_slots(img, 0, 1); break;
		case 4: img[6] = 1; break;
		case 5: img[off0] = 200; break;
		case 6:
			img[far] = 16;
			img[far + 1] = 20;
			img[far + 2] = 0;
			break; /* lengths legal, too long here */
		case 7:
			img[8] = 0xff;
			img[9] = 0xff;
			break;
		case 8:
			img[8] = 0;
			img[9] = 0;
			break;
		case 9:
			img[12] = (uint8_t)(32 + 2 * cnt - 2);
			img[13] = 0;
			break;
		case 10: img[5] ^= 1; break;
		case 11: img[16] = 1; break; /* claims a garbage byte that is not there */
		case 12: { /* lowering the first key keeps the leaf sorted but leaves its range */
			uint8_t *k = (uint8_t *)img_entry(img, 0, &kl, &vl);
			k[1] = '0' - 1;
			break;
		}
		case 13: img[4] = 2; break;
		case 14: img[25] = 1; break;
		case 15: { /* child 1's pointer: fill + 1 */
			uint8_t *k = (uint8_t *)img_entry(img, 1, &kl, &vl);
			k[kl + 56]++;
			break;
		}
		case 16: {
			uint8_t *k = (uint8_t *)img_entry(img, 1, &kl, &vl);
			k[kl + 27]++;
			break;
		}
		case 17: swap_slots(img, cnt >= 3 ? 1 : 0, cnt >= 3 ? 2 : 1); break;
		case 18: { /* a well-formed node whose first separator is not empty */
			uint32_t n = img_read(img, ents);
			ents[0].ie_key[0] = 'a';
			ents[0].ie_klen = 1;
			img_write(img, 1024, ents, n);
			break;
		}
		case 19: img[off1 + 1] = 63; break;
		case 20: {
			uint8_t *k = (uint8_t *)img_entry(img, 1, &kl, &vl);
			memset(k + kl, 0, 64);
			break;
		}
		case 21: { /* child 1's slot names child 0's block, fills adjusted to match */
			uint32_t n = img_read(img, ents);
			uint64_t f0 = get_le(ents[0].ie_val + 56, 8),
			         f1 = get_le(ents[1].ie_val + 56, 8);
			memcpy(ents[1].ie_val, ents[0].ie_val, 64);
			img_write(img, 1024, ents, n);
			ce.ce_open_root.bp_fill = ce.ce_root.bp_fill - f1 + f0;
			break;
		}
		default: break;
		}
		(void)off1;
		other = false;
		int eio = corrupt_ops(&ce, key, klen, &other, report, sizeof(report));
		/* The lookup, scan, put and delete all pass through the damaged node, and so does
		 * the check: all five fail with -EIO. */
		CHECKF(eio == 5 && !other, "%s: %d of 5 failed with EIO, other error %d",
		       cases[c].name, eio, other);
		CHECKF(strstr(report, cases[c].report) != NULL, "%s: %s", cases[c].name, report);
		memcpy(leaf, save_leaf, 1024);
		memcpy(root, save_root, 1024);
	}
	ce.ce_open_root = ce.ce_root;
	CHECK(corrupt_ops(&ce, key, klen, &other, report, sizeof(report)) == 0);
	corrupt_teardown(&ce);
}

/* Random byte damage in random nodes: never a crash, a read out of bounds (ASan) or a hold left,
 * only the allowed results. */
static void test_corrupt_fuzz(void)
{
	struct corrupt_env ce;
	corrupt_setup(&ce);
	struct mstore *ms = &ce.ce_e.e_ms;
	ms->ms_ignore_frees = true;
	uint8_t *mark = reach_set(ms, &ce.ce_root);
	VERIFY(mark != NULL);
	uint64_t ids[512];
	uint32_t nids = 0;
	for (uint64_t id = 1; id < ms->ms_nblocks && nids < SH_ARRAY_SIZE(ids); id++)
		if (mark[id])
			ids[nids++] = id;
	mem_free(mark);
	test_rng_seed(2024);
	uint8_t save[1024];
	uint32_t eio = 0, bad = 0;
	for (int it = 0; it < 1500; it++) {
		uint64_t id = ids[test_rng_below(nids)];
		uint8_t *img = ms->ms_blocks[id].mb_img;
		memcpy(save, img, 1024);
		uint32_t flips = 1 + test_rng_below(3);
		for (uint32_t f = 0; f < flips; f++) {
			/* Mostly the header, slots and entry headers, where damage matters. */
			bool header = test_rng_below(3) == 0;
			uint32_t off = header ? test_rng_below(64) : test_rng_below(1024);
			img[off] ^= (uint8_t)(1u << test_rng_below(8));
		}
		const struct mentry *me = ce.ce_m.m_ents[test_rng_below((uint32_t)ce.ce_m.m_n)];
		bool other = false;
		char report[256];
		eio += (uint32_t)corrupt_ops(&ce, me->me_key, me->me_klen, &other, report,
		                             sizeof(report));
		struct blk_ptr miss;
		uint8_t ko[16], vo[32];
		uint32_t kl, vl;
		int rc = btree_seek_le(ce.ce_e.e_t, me->me_key, me->me_klen, ko, sizeof(ko), &kl,
		                       vo, sizeof(vo), &vl, &miss);
		if (rc != 0 && rc != -EIO && rc != -ENOENT)
			other = true;
		rc = btree_last(ce.ce_e.e_t, ko, sizeof(ko), &kl, vo, sizeof(vo), &vl, &miss);
		if (rc != 0 && rc != -EIO && rc != -ENOENT && rc != -EOVERFLOW)
			other = true;
		if (other || ms->ms_holds != 0)
			bad++;
		memcpy(img, save, 1024);
	}
	CHECKF(bad == 0, "%u iterations with an unexpected result", bad);
	CHECK(eio > 0);
	printf("# 1500 damaged trees: %u operations failed with EIO, none crashed\n", eio);
	corrupt_teardown(&ce);
}

/* ---------------------------------------------------------------------------------------------
 * The offline check */

static void test_check(void)
{
	struct env e;
	env_init(&e, 1024, 16, 16);
	uint8_t k[16], v[16];
	char report[256];
	CHECK(e_check(&e, report, sizeof(report)) == 0); /* empty */
	for (uint32_t i = 0; i < 1500; i++) {
		snprintf((char *)k, sizeof(k), "q%07u", (uint32_t)(perm(i) % 10000000u));
		memset(v, (int)i, 16);
		CHECK(e_put(&e, k, 8, v, 16, BTREE_PUT_UPSERT) == 0);
	}
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "all dirty: %s", report);
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	/* Part dirty, part clean and not in memory: the check loads through its callback. */
	for (uint32_t i = 0; i < 50; i++) {
		snprintf((char *)k, sizeof(k), "q%07u", (uint32_t)(perm(i * 7) % 10000000u));
		CHECK(e_put(&e, k, 8, "new", 3, BTREE_PUT_UPSERT) == 0);
	}
	ms_forget_all(&e.e_ms);
	uint64_t loads = e.e_ms.ms_loads;
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "mixed: %s", report);
	CHECK(strcmp(report, "ok") == 0);
	CHECK(e.e_ms.ms_loads > loads && e.e_ms.ms_holds == 0);
	CHECK(e_sync(&e, &root) == 0);
	/* Damage: a leaf with two keys swapped, then a pointer with a wrong fill. */
	const uint8_t *rimg = e.e_ms.ms_blocks[root.bp_offset / ID_SCALE].mb_img;
	uint64_t id = img_child_id(rimg, 1);
	while (e.e_ms.ms_blocks[id].mb_img[6] > 0)
		id = img_child_id(e.e_ms.ms_blocks[id].mb_img, 0);
	uint8_t *leaf = e.e_ms.ms_blocks[id].mb_img;
	uint8_t save[1024];
	memcpy(save, leaf, 1024);
	uint8_t tmp[2];
	memcpy(tmp, leaf + 34, 2);
	memcpy(leaf + 34, leaf + 36, 2);
	memcpy(leaf + 36, tmp, 2);
	env_reopen(&e, &root);
	CHECK(e_check(&e, report, sizeof(report)) == -EIO);
	CHECKF(strstr(report, "level 0") && strstr(report, "key not greater"), "%s", report);
	printf("# check on a damaged tree: %s\n", report);
	memcpy(leaf, save, 1024);
	uint8_t *root_img = e.e_ms.ms_blocks[root.bp_offset / ID_SCALE].mb_img;
	memcpy(save, root_img, 1024);
	uint32_t kl, vl;
	uint8_t *ent = (uint8_t *)img_entry(root_img, 0, &kl, &vl);
	ent[kl + 56] ^= 4; /* child 0's fill */
	env_reopen(&e, &root);
	CHECK(e_check(&e, report, sizeof(report)) == -EIO);
	CHECKF(strstr(report, "fill") != NULL, "%s", report);
	printf("# check on a damaged tree: %s\n", report);
	memcpy(root_img, save, 1024);
	env_reopen(&e, &root);
	CHECK(e_check(&e, report, sizeof(report)) == 0);
	/* A load that fails stops the check with its error. */
	ms_forget_all(&e.e_ms);
	env_reopen(&e, &root);
	e.e_ms.ms_blocks[root.bp_offset / ID_SCALE].mb_cached = true;
	uint64_t child = img_child_id(root_img, 0);
	uint8_t *child_img = e.e_ms.ms_blocks[child].mb_img;
	e.e_ms.ms_blocks[child].mb_img = NULL; /* the load callback finds nothing */
	CHECK(btree_check(e.e_t, env_load, &e, report, sizeof(report)) == -EIO);
	CHECKF(strstr(report, "cannot read") != NULL, "%s", report);
	e.e_ms.ms_blocks[child].mb_img = child_img;
	CHECK(e.e_ms.ms_holds == 0);
	env_fini(&e);
}

/* ---------------------------------------------------------------------------------------------
 * Shape: node removal, root shrinking, leaf merging */

static void test_shrink_and_merge(void)
{
	struct env e;
	env_init(&e, 1024, 16, 16);
	uint8_t k[16], v[16];
	test_rng_seed(5);
	const uint32_t n = 4000;
	for (uint32_t i = 0; i < n; i++) {
		put_be64(k, perm(i)); /* distinct keys in random order */
		memset(v, (int)i, 16);
		CHECK(e_put(&e, k, 8, v, 16, BTREE_PUT_NEW) == 0);
	}
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	struct btree_stats st;
	btree_stats(e.e_t, &st);
	uint32_t depth_full = st.bst_depth;
	uint64_t leaves_full = ms_live_blocks(&e.e_ms, 0);
	/* Delete 90% in random order, the blocks all in memory (so siblings can merge). */
	uint32_t *order = mem_alloc(sizeof(uint32_t) * n);
	VERIFY(order != NULL);
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = test_rng_below(i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (uint32_t i = 0; i < n * 9 / 10; i++) {
		put_be64(k, perm(order[i]));
		CHECK(e_delete(&e, k, 8) == 0);
	}
	CHECK(e_sync(&e, &root) == 0);
	CHECK(store_matches_root(&e.e_ms, &root));
	uint64_t leaves_after = ms_live_blocks(&e.e_ms, 0);
	printf("# 90%% deleted: %llu leaves -> %llu (entries %llu -> %llu)\n",
	       (unsigned long long)leaves_full, (unsigned long long)leaves_after,
	       (unsigned long long)n, (unsigned long long)root.bp_fill);
	/* Without merging, a leaf of ~24 entries survives unless all of them go (0.9^24: ~8%), so
	 * about 92% of the leaves would remain; merging keeps leaves at least a quarter full. */
	CHECKF(leaves_after * 10 <= leaves_full * 4, "%llu of %llu leaves remain",
	       (unsigned long long)leaves_after, (unsigned long long)leaves_full);
	char report[256];
	CHECKF(e_check(&e, report, sizeof(report)) == 0, "%s", report);
	/* Delete the rest down to one entry: the root shrinks to a single leaf. */
	for (uint32_t i = n * 9 / 10; i + 1 < n; i++) {
		put_be64(k, perm(order[i]));
		CHECK(e_delete(&e, k, 8) == 0);
	}
	btree_stats(e.e_t, &st);
	CHECKF(st.bst_depth == 1 && st.bst_entries == 1, "depth %u (was %u), entries %llu",
	       st.bst_depth, depth_full, (unsigned long long)st.bst_entries);
	CHECK(e_sync(&e, &root) == 0 && root.bp_level == 0 && root.bp_fill == 1);
	CHECK(store_matches_root(&e.e_ms, &root));
	CHECK(ms_live_blocks(&e.e_ms, -1) == 1);
	mem_free(order);
	env_fini(&e);
}

/* A root left with one child whose own subtree is a chain of single children, none in memory: the
 * delete loads the chain (misses) before changing anything, then the root becomes the first node
 * with two or more children. Ascending inserts leave single-child nodes on the right spine, so
 * deleting in ascending order empties the left subtree and collapses the root through that chain:
 * the depth then drops by more than one level in a single delete. Deleting in descending order
 * takes the other path (the right subtree empties node by node). */
static void chain_key(uint8_t k[179], uint32_t i)
{
	char num[16];
	snprintf(num, sizeof(num), "%08u", i % 100000000u);
	memset(k, 'p', 171);
	memcpy(k + 171, num, 8);
}

static void root_chain_run(uint32_t n, bool ascending, uint32_t *max_drop)
{
	struct env e;
	env_init(&e, 1024, 179, 0);
	/* Big keys give four entries per internal node: a deep tree from few entries. */
	uint8_t k[179];
	for (uint32_t i = 0; i < n; i++) {
		chain_key(k, i);
		CHECK(e_put(&e, k, 179, NULL, 0, BTREE_PUT_NEW) == 0);
	}
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	struct btree_stats st;
	btree_stats(e.e_t, &st);
	CHECKF(st.bst_depth >= 3, "depth %u", st.bst_depth);
	char report[256] = "";
	bool ok = true;
	uint32_t left = n;
	for (uint32_t j = 0; j + 1 < n && ok; j++) {
		uint32_t i = ascending ? j : n - 1 - j;
		chain_key(k, i);
		uint32_t depth_before = st.bst_depth;
		ms_forget_all(&e.e_ms);
		ok = e_delete(&e, k, 179) == 0;
		ok = ok && e_check(&e, report, sizeof(report)) == 0;
		btree_stats(e.e_t, &st);
		left--;
		ok = ok && st.bst_entries == left;
		if (st.bst_depth + 1 < depth_before)
			*max_drop = SH_MAX(*max_drop, depth_before - st.bst_depth);
		if (j % 10 == 0)
			ok = ok && e_sync(&e, &root) == 0 && store_matches_root(&e.e_ms, &root);
	}
	CHECKF(ok, "n %u: %s", n, report);
	btree_stats(e.e_t, &st);
	CHECK(st.bst_entries == 1 && st.bst_depth == 1);
	CHECK(e_sync(&e, &root) == 0 && store_matches_root(&e.e_ms, &root));
	CHECK(!e.e_bad_miss && e.e_ms.ms_holds == 0);
	env_fini(&e);
}

static void test_root_chain(void)
{
	uint32_t max_drop = 0;
	for (uint32_t n = 60; n <= 400; n += 37) {
		root_chain_run(n, true, &max_drop);
		root_chain_run(n, false, &max_drop);
	}
	CHECKF(max_drop >= 2, "largest depth drop in one delete: %u", max_drop);
	printf("# root collapse: the depth dropped by up to %u levels in one delete\n", max_drop);
}

/* ---------------------------------------------------------------------------------------------
 * Memory */

static void test_enomem_and_dirty_bytes(void)
{
	struct env e;
	env_init(&e, 1024, 16, 16);
	uint8_t k[16], v[16] = {0}, out[16];
	uint32_t vl;
	CHECK(btree_dirty_bytes(e.e_t) == 0 && !btree_is_dirty(e.e_t));
	for (uint32_t i = 0; i < 1000; i++) {
		snprintf((char *)k, sizeof(k), "n%07u", i * 2);
		CHECK(e_put(&e, k, 8, v, 16, BTREE_PUT_NEW) == 0);
	}
	struct btree_stats st;
	btree_stats(e.e_t, &st);
	CHECK(btree_is_dirty(e.e_t) && st.bst_dirty_nodes > 0 &&
	      btree_dirty_bytes(e.e_t) >= st.bst_dirty_nodes * 1024);
	struct blk_ptr root;
	CHECK(e_sync(&e, &root) == 0);
	CHECK(btree_dirty_bytes(e.e_t) == 0 && !btree_is_dirty(e.e_t));
	/* A fresh tree at the clean root has no spare nodes: a put must allocate copies. Fail each
	 * allocation in turn until the put gets through; each failure leaves the tree unchanged. */
	int failures = 0;
	for (long n = 0; n < 100; n++) {
		env_reopen(&e, &root);
		snprintf((char *)k, sizeof(k), "n%07u", 1001u);
		/* A lookup first: the walk's own bookkeeping (the verified-node set, whose
		 * allocation failures are harmless) is then done, and the injection hits the put's
		 * copies. */
		CHECK(e_lookup(&e, k, 8, out, sizeof(out), &vl) == -ENOENT);
		mem_fail_after(n);
		struct blk_ptr miss;
		int rc = btree_put(e.e_t, k, 8, v, 16, BTREE_PUT_NEW, &miss);
		mem_fail_after(-1);
		if (rc == 0)
			break;
		CHECK(rc == -ENOMEM);
		failures++;
		CHECK(!btree_is_dirty(e.e_t) && btree_dirty_bytes(e.e_t) == 0);
		CHECK(e_lookup(&e, k, 8, out, sizeof(out), &vl) == -ENOENT);
		CHECK(tree_entries(&e) == 1000 && e.e_ms.ms_frees == 0 && e.e_ms.ms_holds == 0);
	}
	CHECK(failures > 0);
	CHECK(e_lookup(&e, k, 8, out, sizeof(out), &vl) == 0 && tree_entries(&e) == 1001);
	CHECK(e_sync(&e, &root) == 0 && store_matches_root(&e.e_ms, &root));
	/* The same for a delete. */
	failures = 0;
	for (long n = 0; n < 100; n++) {
		env_reopen(&e, &root);
		snprintf((char *)k, sizeof(k), "n%07u", 500u);
		CHECK(e_lookup(&e, k, 8, out, sizeof(out), &vl) == 0);
		mem_fail_after(n);
		struct blk_ptr miss;
		int rc = btree_delete(e.e_t, k, 8, &miss);
		mem_fail_after(-1);
		if (rc == 0)
			break;
		CHECK(rc == -ENOMEM);
		failures++;
		CHECK(!btree_is_dirty(e.e_t) && e_lookup(&e, k, 8, out, sizeof(out), &vl) == 0);
	}
	CHECK(failures > 0 && e_lookup(&e, k, 8, out, sizeof(out), &vl) == -ENOENT);
	/* Opening allocates the tree alone; the rest comes with the first mutation. */
	struct btree *t = NULL;
	mem_fail_after(0);
	CHECK(btree_open(&e.e_cfg, &root, &t) == -ENOMEM);
	mem_fail_after(-1);
	CHECK(btree_open(&e.e_cfg, &root, &t) == 0);
	struct blk_ptr miss;
	CHECK(btree_lookup(t, "n0000001", 8, out, sizeof(out), &vl, &miss) ==
	      -ENOENT); /* a read: nothing */
	mem_fail_after(0);
	CHECK(btree_put(t, "n0000001", 8, v, 16, BTREE_PUT_NEW, &miss) ==
	      -ENOMEM); /* the scratch image */
	mem_fail_after(-1);
	CHECK(!btree_is_dirty(t));
	btree_close(t);
	CHECK(e.e_ms.ms_bad_frees == 0);
	env_fini(&e);
}

int main(void)
{
	log_set_level(LOG_WARN);
	TAP_RUN(test_config);
	TAP_RUN(test_varlen_and_modes);
	TAP_RUN(test_scan_and_seek);
	TAP_RUN(test_scan_resume_after_miss);
	TAP_RUN(test_misses);
	TAP_RUN(test_copy_on_write);
	TAP_RUN(test_sync_failure);
	TAP_RUN(test_corrupt_images);
	TAP_RUN(test_corrupt_fuzz);
	TAP_RUN(test_check);
	TAP_RUN(test_shrink_and_merge);
	TAP_RUN(test_root_chain);
	TAP_RUN(test_enomem_and_dirty_bytes);
	TAP_RUN(test_random_small_keys);
	TAP_RUN(test_random_big_keys);
	TAP_RUN(test_random_16k);
	TAP_RUN(test_random_64k);
	TAP_RUN(test_million);
	return tap_finish();
}
