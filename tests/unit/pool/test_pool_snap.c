/* test_pool_snap.c: unit tests of snapshots (src/pool/pool_snap.c) on a key-value dataset
 * (pool_kv.h): a snapshot keeps its txg's contents while the file system changes; its USED is
 * what its destroy gives back and the file system's USED is its REFER plus what only snapshots
 * hold; destroying a snapshot in the middle of a line frees only its own blocks; several
 * snapshots at once are all or none; names are checked; a file system with snapshots is not
 * destroyed; the background freeing goes on across an export and import; a clone shares its
 * origin's blocks, changes apart and frees only its own when destroyed; a rollback makes the file
 * system its snapshot and frees what it changed since; a promote moves the origin's snapshots
 * up to the clone's origin to the clone, whole, with every figure exact after it; the online
 * scrub repairs what only snapshots hold; a random line of
 * changes, snapshots, destroys and promotes keeps every snapshot's contents and leaves a clean
 * check at every step; and power cuts anywhere in such a line, rollbacks and promotes included
 * (fault leaves, every fault mode; the cuts
 * as in test_pool_crash.c) leave a pool that imports and checks clean, holding every snapshot
 * whose create returned and none whose destroy returned, each with its contents, and whose
 * background freeing then finishes clean. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fs_fixture.h"
#include "pool_kv.h"
#include "pool/pool.h"
#include "tap.h"

#define MIB (1024ull * 1024ull)
#define CHECK_EQ_U64(a, b)                                                                         \
	CHECKF((uint64_t)(a) == (uint64_t)(b), "%s = %" PRIu64 ", %s = %" PRIu64, #a, (uint64_t)(a), \
	       #b, (uint64_t)(b))
#define NKEYS 200u
#define MAXSNAPS 8u

/* ---- the model: key k's version, per file system state and per snapshot ---- */

struct snap_model {
	char sm_name[32];
	unsigned sm_ver[NKEYS];
	bool sm_live;
};

/* Value of key k at version v (0: absent): long ones make data blocks, so that snapshots hold
 * blocks of their own. */
static uint32_t value_make(unsigned k, unsigned v, uint8_t *buf)
{
	uint64_t s = (uint64_t)k * 2654435761u ^ ((uint64_t)v << 20);
	uint32_t len = (k % 3 == 0) ? 3000u + (uint32_t)(s % 9000u) : 40u + (uint32_t)(s % 200u);
	for (uint32_t i = 0; i < len; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		buf[i] = (uint8_t)(s >> 56);
	}
	return len;
}

static uint32_t key_of(unsigned k, char *key)
{
	return (uint32_t)snprintf(key, KV_KEY_MAX, "k%05u", k);
}

static int set_key(struct kv *kv, unsigned k, unsigned v)
{
	static uint8_t buf[KV_VAL_MAX];
	char key[KV_KEY_MAX];
	uint32_t klen = key_of(k, key);
	if (v == 0) {
		int rc = kv_exec(kv, KV_OP_DEL, key, klen, NULL, 0, NULL, 0, NULL, NULL, NULL);
		return rc == -ENOENT ? 0 : rc;
	}
	uint32_t len = value_make(k, v, buf);
	return kv_exec(kv, KV_OP_PUT, key, klen, buf, len, NULL, 0, NULL, NULL, NULL);
}

static struct pool_open_opts opts_kv(void)
{
	struct pool_open_opts o = {0};
	o.po_attach = kv_attach;
	o.po_txg_interval_ms = 60000; /* tests sync when they say so */
	o.po_destroy_step = 64;       /* the background freeing takes several txgs */
	return o;
}

static uint64_t pool_used(struct pool *p)
{
	uint64_t total, free_b;
	pool_space(p, &total, &free_b, NULL);
	return total - free_b;
}

/* Waits, a txg at a time, until no chain waits to be freed. */
static bool free_settle(struct pool *p)
{
	for (int i = 0; i < 20000 && pool_snap_free_queued(p) > 0; i++)
		if (pool_txg_wait_synced(p, 0) != 0)
			return false;
	/* two more: the last step's frees become reusable once their txg is durable */
	return pool_snap_free_queued(p) == 0 && pool_txg_wait_synced(p, 0) == 0 &&
	       pool_txg_wait_synced(p, 0) == 0;
}

struct snap_find {
	const char *sf_name;
	struct pool_snap_info sf_info;
	unsigned sf_count;
	bool sf_found;
};

static int snap_find_cb(void *arg, const struct pool_snap_info *si)
{
	struct snap_find *sf = arg;
	sf->sf_count++;
	if (sf->sf_name && strcmp(si->si_name, sf->sf_name) == 0) {
		sf->sf_info = *si;
		sf->sf_found = true;
	}
	return 0;
}

static bool snap_info(struct pool *p, const char *fs, const char *name, struct pool_snap_info *out)
{
	struct snap_find sf = {.sf_name = name};
	if (pool_snapshot_list(p, fs, snap_find_cb, &sf) != 0 || !sf.sf_found)
		return false;
	*out = sf.sf_info;
	return true;
}

static unsigned snap_count(struct pool *p, const char *fs)
{
	struct snap_find sf = {0};
	return pool_snapshot_list(p, fs, snap_find_cb, &sf) == 0 ? sf.sf_count : UINT32_MAX;
}

struct fs_find {
	const char *ff_name;
	struct pool_ds_info ff_info;
};

static int fs_find_cb(void *arg, const struct pool_ds_info *di)
{
	struct fs_find *ff = arg;
	if (strcmp(di->di_name, ff->ff_name) == 0)
		ff->ff_info = *di;
	return 0;
}

static struct pool_ds_info ds_info_of(struct pool *p, const char *name)
{
	struct fs_find ff = {.ff_name = name};
	(void)!pool_ds_list(p, fs_find_cb, &ff);
	return ff.ff_info;
}

static int snap_create1(struct pool *p, const char *full)
{
	char err[200];
	int rc = pool_snapshot_create(p, &full, 1, err, sizeof(err));
	if (rc != 0)
		printf("#   snapshot %s: %s\n", full, err);
	return rc;
}

static int snap_destroy1(struct pool *p, const char *full)
{
	char err[200];
	int rc = pool_snapshot_destroy(p, full, err, sizeof(err));
	if (rc != 0)
		printf("#   destroy %s: %s\n", full, err);
	return rc;
}

/* ---- reading a snapshot's tree ---- */

/* Reads key k from the tree of snapshot `snap` of kv's file system: 0 and its bytes in buf,
 * -ENOENT, or another error. */
static int snap_get(struct kv *kv, const char *snap, unsigned k, uint8_t *buf, uint32_t cap,
                    uint32_t *len_out)
{
	struct pool *p = kv->kv_pool;
	char key[KV_KEY_MAX];
	uint32_t klen = key_of(k, key);
	for (;;) {
		struct blk_ptr missing;
		pool_lock(p);
		struct pool_snap_rec *recs = NULL;
		size_t n = 0;
		int rc = pool_sn_list(p, pool_ds_id(kv->kv_ds), &recs, &n);
		size_t i = 0;
		while (rc == 0 && i < n && strcmp(recs[i].sr_name, snap) != 0)
			i++;
		if (rc == 0 && i == n)
			rc = -ESRCH;
		struct btree *t = NULL;
		struct btree_config cfg;
		uint8_t ent[1 + BLK_PTR_DISK_BYTES + 4 + KV_INLINE_MAX];
		uint32_t elen = 0;
		if (rc == 0) {
			pool_ds_config(kv->kv_ds, &cfg);
			rc = btree_open(&cfg, &recs[i].sr_root, &t);
		}
		if (rc == 0)
			rc = btree_lookup(t, key, klen, ent, sizeof(ent), &elen, &missing);
		struct blk_ptr bp;
		uint32_t blen;
		if (rc == 0 && elen > 0 && ent[0] == KV_KIND_INLINE) {
			*len_out = elen - 1;
			memcpy(buf, ent + 1, elen - 1);
		} else if (rc == 0 && (rc = kv_entry_block(ent, elen, &bp, &blen)) == 0) {
			const void *img;
			void *hold;
			rc = pool_block_get(p, &bp, &img, &hold);
			if (rc == -SH_ENEEDBLOCK)
				missing = bp;
			if (rc == 0) {
				memcpy(buf, img, SH_MIN(blen, cap));
				*len_out = blen;
				pool_block_release(p, hold);
			}
		}
		btree_close(t);
		mem_free(recs);
		pool_unlock(p);
		if (rc != -SH_ENEEDBLOCK)
			return rc;
		rc = pool_block_read_sync(p, &missing);
		if (rc != 0)
			return rc;
	}
}

/* Every key of snapshot sm as the model says. Returns the keys that differ. */
static unsigned snap_verify(struct kv *kv, const struct snap_model *sm)
{
	static uint8_t got[KV_VAL_MAX], want[KV_VAL_MAX];
	unsigned bad = 0;
	for (unsigned k = 0; k < NKEYS; k++) {
		uint32_t len = 0;
		int rc = snap_get(kv, sm->sm_name, k, got, sizeof(got), &len);
		if (sm->sm_ver[k] == 0) {
			bad += rc != -ENOENT;
			continue;
		}
		uint32_t wlen = value_make(k, sm->sm_ver[k], want);
		if (rc != 0 || len != wlen || memcmp(got, want, len) != 0) {
			if (bad < 3)
				printf("#   %s: key %u: rc %d len %u (want version %u, %u bytes)\n",
				       sm->sm_name, k, rc, len, sm->sm_ver[k], wlen);
			bad++;
		}
	}
	return bad;
}

static struct pool *new_pool(const char *name, struct blk_dev **dev_out, struct kv **kv_out)
{
	struct blk_dev *d = NULL;
	VERIFY(blk_dev_create_mem(128 * MIB, &d) == 0);
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = name, .pc_opts = &o};
	struct pool *p = NULL;
	*kv_out = NULL;
	*dev_out = d;
	CHECK(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	if (!p)
		return NULL;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	CHECK(kv_open(p, "kv", kv_out) == 0);
	return p;
}

/* Whether `shale pool status`'s text holds what. */
static bool status_says(struct pool *p, const char *what)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	if (!out)
		return false;
	int rc = pool_status_print(p, out);
	bool found = fclose(out) == 0 && rc == 0 && text && strstr(text, what) != NULL;
	if (!found && text)
		printf("#   status: %s\n", text);
	free(text);
	return found;
}

/* Every snapshot is destroyed already: once the freeing has settled, the file system holds no
 * snapshot space and the check is clean; then the pool is exported. */
static void finish(struct pool *p, struct kv *kv, struct blk_dev *d)
{
	CHECK(free_settle(p));
	CHECK(snap_count(p, "kv") == 0);
	struct pool_ds_info di = ds_info_of(p, "kv");
	CHECK_EQ_U64(di.di_snap_bytes, 0);
	CHECK(pool_check(p, report_print, NULL) == 0); /* a leak would be reported here */
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
}

/* Closes kv, exports the pool and imports it again with kv reopened; false (reported, the leaf
 * closed when the import failed) when that cannot be done. */
static bool reimport(struct pool **p, struct kv **kv, struct blk_dev *d)
{
	kv_close(*kv);
	*kv = NULL;
	CHECK(pool_export(*p) == 0);
	struct pool_open_opts o = opts_kv();
	*p = NULL;
	CHECK(pool_import_devs(&d, 1, &o, p) == 0);
	if (!*p) {
		blk_dev_close(d);
		return false;
	}
	CHECK(kv_open(*p, "kv", kv) == 0);
	return *kv != NULL;
}

/* ---- tests ---- */

/* A snapshot keeps its txg's contents while the file system changes; USED and REFER add up; its
 * destroy frees what its USED said, in the background, and the check is clean throughout. */
static void test_snap_basic(void)
{
	struct blk_dev *d;
	struct kv *kv;
	struct pool *p = new_pool("snapa", &d, &kv);
	if (!p || !kv)
		return;
	static struct snap_model base = {.sm_name = "base", .sm_live = true};
	for (unsigned k = 0; k < NKEYS; k++) {
		CHECK(set_key(kv, k, 1) == 0);
		base.sm_ver[k] = 1;
	}
	/* changes not yet in a txg are in the snapshot (it takes the open txg) */
	CHECK(snap_create1(p, "kv@base") == 0);
	struct pool_snap_info si = {0};
	struct pool_ds_info di = ds_info_of(p, "kv");
	CHECK(snap_info(p, "kv", "base", &si));
	CHECK_EQ_U64(si.si_refer_bytes, di.di_refer_bytes);
	CHECK_EQ_U64(si.si_used_bytes, 0);
	CHECK_EQ_U64(di.di_snap_bytes, 0);
	CHECK(snap_verify(kv, &base) == 0);
	/* overwrite every third key's long value: the old blocks now belong to the snapshot */
	for (unsigned k = 0; k < NKEYS; k += 3)
		CHECK(set_key(kv, k, 2) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(snap_info(p, "kv", "base", &si));
	di = ds_info_of(p, "kv");
	CHECK(si.si_used_bytes > 200 * 1024); /* 67 long values of 3..12 KiB at least */
	CHECK_EQ_U64(di.di_snap_bytes, si.si_used_bytes);
	CHECK_EQ_U64(di.di_used_bytes, di.di_refer_bytes + di.di_snap_bytes);
	CHECK(snap_verify(kv, &base) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	/* a second name, a bad name, a duplicate: refused, nothing changed */
	const char *bad[] = {"kv@new", "kv@base"};
	char err[200];
	CHECK(pool_snapshot_create(p, bad, 2, err, sizeof(err)) == -EINVAL); /* one fs twice */
	CHECK(strstr(err, "one snapshot per file system") != NULL);
	CHECK(snap_create1(p, "kv@base") == -EEXIST);
	const char *names[] = {"kv@a/b", "kv@", "nofs@x", "kv@" "01234567890123456789012345678901"
	                                                  "234567890123456789012345678901234"};
	CHECK(pool_snapshot_create(p, &names[0], 1, err, sizeof(err)) == -EINVAL);
	CHECK(pool_snapshot_create(p, &names[1], 1, err, sizeof(err)) == -EINVAL);
	CHECK(pool_snapshot_create(p, &names[2], 1, err, sizeof(err)) == -ENOENT);
	CHECK(pool_snapshot_create(p, &names[3], 1, err, sizeof(err)) == -EINVAL);
	CHECK(snap_count(p, "kv") == 1);
	/* a file system with snapshots is not destroyed */
	kv_close(kv);
	CHECK(pool_ds_destroy(p, "kv") == -ENOTEMPTY);
	CHECK(kv_open(p, "kv", &kv) == 0);
	/* destroy: the pool gets back what USED said (chunks of its dead list besides) */
	uint64_t used_before = pool_used(p), unique = si.si_used_bytes;
	CHECK(snap_destroy1(p, "kv@base") == 0);
	CHECK(snap_count(p, "kv") == 0);
	CHECK(snap_destroy1(p, "kv@base") == -ENOENT);
	CHECK(free_settle(p));
	uint64_t used_after = pool_used(p);
	CHECK(used_before - used_after >= unique);
	CHECK(used_before - used_after <= unique + 64 * 1024);
	finish(p, kv, d);
}

/* Three snapshots with changes between; destroying the middle one frees only the blocks it
 * alone held (born after the first, dead before the third); the others keep their contents. */
static void test_snap_middle(void)
{
	struct blk_dev *d;
	struct kv *kv;
	struct pool *p = new_pool("snapm", &d, &kv);
	if (!p || !kv)
		return;
	static struct snap_model sm[3] = {{.sm_name = "s1"}, {.sm_name = "s2"}, {.sm_name = "s3"}};
	unsigned ver[NKEYS] = {0};
	for (unsigned s = 0; s < 3; s++) {
		/* each round rewrites a different third of the keys */
		for (unsigned k = s; k < NKEYS; k += 3) {
			ver[k]++;
			CHECK(set_key(kv, k, ver[k]) == 0);
		}
		CHECK(pool_txg_wait_synced(p, 0) == 0);
		memcpy(sm[s].sm_ver, ver, sizeof(ver));
		char full[40];
		snprintf(full, sizeof(full), "kv@%.31s", sm[s].sm_name);
		CHECK(snap_create1(p, full) == 0);
	}
	/* after s3: rewrite everything, so each snapshot holds blocks the head does not */
	for (unsigned k = 0; k < NKEYS; k++) {
		ver[k]++;
		CHECK(set_key(kv, k, ver[k]) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	struct pool_snap_info i1 = {0}, i2 = {0}, i3 = {0};
	CHECK(snap_info(p, "kv", "s1", &i1) && snap_info(p, "kv", "s2", &i2) &&
	      snap_info(p, "kv", "s3", &i3));
	/* s2 alone holds the keys 1 mod 3 written in round 2 ... and no others: s1 holds round 1's
	 * (keys 0 mod 3), which s2 and s3 hold as well */
	CHECK(i2.si_used_bytes > 0 && i3.si_used_bytes > 0);
	struct pool_ds_info di = ds_info_of(p, "kv");
	CHECK(di.di_snap_bytes >= i1.si_used_bytes + i2.si_used_bytes + i3.si_used_bytes);
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(status_says(p, "(1 in memory); 3 snapshots\n"));
	uint64_t before = pool_used(p);
	CHECK(snap_destroy1(p, "kv@s2") == 0);
	CHECK(status_says(p, "2 snapshots; 1 chain of blocks only destroyed snapshots held, being "
	                     "freed") ||
	      pool_snap_free_queued(p) == 0); /* the chain may be freed already */
	CHECK(free_settle(p));
	uint64_t after = pool_used(p);
	CHECK(before - after >= i2.si_used_bytes);
	CHECK(before - after <= i2.si_used_bytes + 64 * 1024);
	CHECK(snap_verify(kv, &sm[0]) == 0);
	CHECK(snap_verify(kv, &sm[2]) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	/* s1 and s3 now hold what s2 shared with each alone */
	struct pool_snap_info j1 = {0}, j3 = {0};
	CHECK(snap_info(p, "kv", "s1", &j1) && snap_info(p, "kv", "s3", &j3));
	CHECK(j1.si_used_bytes >= i1.si_used_bytes);
	CHECK(j3.si_used_bytes >= i3.si_used_bytes);
	/* across an export and import with chains still queued: the freeing goes on */
	CHECK(snap_destroy1(p, "kv@s1") == 0);
	if (!reimport(&p, &kv, d))
		return;
	CHECK(free_settle(p));
	CHECK(snap_count(p, "kv") == 1);
	CHECK(snap_verify(kv, &sm[2]) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(snap_destroy1(p, "kv@s3") == 0);
	finish(p, kv, d);
}

static int promote1(struct pool *p, const char *fs, char *err, size_t err_len);
static unsigned head_verify(struct kv *kv, const unsigned *ver);

/* A step of the random line: cl, a clone of the live snapshot with the newest txg, changed and
 * promoted (the live snapshots up to its origin read through cl, the rest through kv), then kv
 * promoted back and cl destroyed; kv is closed meanwhile. Returns the snapshots that differ. */
static unsigned random_promote(struct pool *p, struct kv **kv, struct snap_model *sm,
                               unsigned *made)
{
	struct pool_snap_info si[MAXSNAPS];
	unsigned origin = MAXSNAPS, bad = 0;
	for (unsigned s = 0; s < MAXSNAPS; s++) {
		if (!sm[s].sm_live || !snap_info(p, "kv", sm[s].sm_name, &si[s]))
			continue;
		if (origin == MAXSNAPS || si[s].si_txg > si[origin].si_txg)
			origin = s;
	}
	if (origin == MAXSNAPS)
		return 0;
	char full[48], err[200];
	snprintf(full, sizeof(full), "kv@%.31s", sm[origin].sm_name);
	kv_close(*kv);
	*kv = NULL;
	struct kv *ckv = NULL;
	static unsigned cver[NKEYS];
	memcpy(cver, sm[origin].sm_ver, sizeof(cver));
	CHECK(pool_fs_clone(p, full, "cl", err, sizeof(err)) == 0);
	CHECK(kv_open(p, "cl", &ckv) == 0);
	if (!ckv)
		return 1;
	for (unsigned k = 0; k < NKEYS; k += 4) {
		cver[k] = 100;
		CHECK(set_key(ckv, k, 100) == 0);
	}
	kv_close(ckv);
	CHECK(promote1(p, "cl", err, sizeof(err)) == 0);
	(*made)++;
	CHECK(kv_open(p, "cl", &ckv) == 0 && kv_open(p, "kv", kv) == 0);
	if (!ckv || !*kv)
		return 1;
	for (unsigned s = 0; s < MAXSNAPS; s++)
		if (sm[s].sm_live)
			bad += snap_verify(si[s].si_txg <= si[origin].si_txg ? ckv : *kv, &sm[s]);
	bad += head_verify(ckv, cver);
	CHECK(pool_check(p, report_print, NULL) == 0);
	kv_close(ckv);
	kv_close(*kv);
	*kv = NULL;
	CHECK(promote1(p, "kv", err, sizeof(err)) == 0);
	CHECK(pool_ds_destroy(p, "cl") == 0);
	CHECK(kv_open(p, "kv", kv) == 0);
	return bad;
}

/* Random changes, snapshots, destroys and promotes: every live snapshot keeps its contents, the
 * check is clean at every step, and once every snapshot is gone the pool holds what the file
 * system alone needs (nothing leaked, nothing freed twice). */
static void test_snap_random(void)
{
	struct blk_dev *d;
	struct kv *kv;
	struct pool *p = new_pool("snapr", &d, &kv);
	if (!p || !kv)
		return;
	static struct snap_model sm[MAXSNAPS];
	unsigned ver[NKEYS] = {0}, next_id = 0, problems = 0, promotes = 0;
	uint64_t seed = 12345;
	for (unsigned round = 0; round < 24; round++) {
		unsigned changes = 20 + (unsigned)(seed % 60);
		for (unsigned c = 0; c < changes; c++) {
			seed = seed * 6364136223846793005ull + 1;
			unsigned k = (unsigned)(seed >> 33) % NKEYS;
			ver[k] = (seed >> 20) % 5 == 0 ? 0 : ver[k] + 1;
			CHECK(set_key(kv, k, ver[k]) == 0);
		}
		if (round % 3 == 1)
			CHECK(pool_txg_wait_synced(p, 0) == 0); /* some snapshots of synced data */
		seed = seed * 6364136223846793005ull + 1;
		unsigned slot = (unsigned)(seed >> 40) % MAXSNAPS;
		char full[48];
		if (sm[slot].sm_live) {
			snprintf(full, sizeof(full), "kv@%.31s", sm[slot].sm_name);
			CHECK(snap_destroy1(p, full) == 0);
			sm[slot].sm_live = false;
		} else {
			snprintf(sm[slot].sm_name, sizeof(sm[slot].sm_name), "r%u", next_id++);
			snprintf(full, sizeof(full), "kv@%.31s", sm[slot].sm_name);
			CHECK(snap_create1(p, full) == 0);
			memcpy(sm[slot].sm_ver, ver, sizeof(ver));
			sm[slot].sm_live = true;
		}
		if (round % 8 == 5)
			problems += random_promote(p, &kv, sm, &promotes);
		if (!kv)
			return;
		for (unsigned s = 0; s < MAXSNAPS; s++)
			if (sm[s].sm_live)
				problems += snap_verify(kv, &sm[s]);
		if (round % 4 == 3)
			CHECK(pool_check(p, report_print, NULL) == 0);
	}
	CHECK(problems == 0);
	CHECK(promotes > 0);
	for (unsigned s = 0; s < MAXSNAPS; s++) {
		if (!sm[s].sm_live)
			continue;
		char full[48];
		snprintf(full, sizeof(full), "kv@%.31s", sm[s].sm_name);
		CHECK(snap_destroy1(p, full) == 0);
	}
	finish(p, kv, d);
}

/* Several file systems' snapshots in one request share one txg; a request with one bad name
 * makes none. */
static void test_snap_atomic(void)
{
	struct blk_dev *d;
	struct kv *kv;
	struct pool *p = new_pool("snapt", &d, &kv);
	if (!p || !kv)
		return;
	CHECK(pool_ds_create(p, "other", NULL) == 0);
	CHECK(set_key(kv, 1, 1) == 0);
	const char *two[] = {"kv@both", "other@both"};
	char err[200];
	CHECK(pool_snapshot_create(p, two, 2, err, sizeof(err)) == 0);
	struct pool_snap_info a = {0}, b = {0};
	CHECK(snap_info(p, "kv", "both", &a) && snap_info(p, "other", "both", &b));
	CHECK_EQ_U64(a.si_txg, b.si_txg);
	const char *mixed[] = {"kv@more", "other@both"};
	CHECK(pool_snapshot_create(p, mixed, 2, err, sizeof(err)) == -EEXIST);
	CHECK(strstr(err, "other@both") != NULL);
	CHECK(snap_count(p, "kv") == 1 && snap_count(p, "other") == 1);
	CHECK(snap_count(p, NULL) == 2);
	/* two snapshots of one file system back to back: different txgs */
	CHECK(snap_create1(p, "kv@x1") == 0);
	CHECK(snap_create1(p, "kv@x2") == 0);
	struct pool_snap_info x1 = {0}, x2 = {0};
	CHECK(snap_info(p, "kv", "x1", &x1) && snap_info(p, "kv", "x2", &x2));
	CHECK(x2.si_txg > x1.si_txg);
	CHECK(pool_check(p, report_print, NULL) == 0);
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
}

/* Every key of kv's file system as the model says (its head, not a snapshot). */
static unsigned head_verify(struct kv *kv, const unsigned *ver)
{
	static uint8_t got[KV_VAL_MAX], want[KV_VAL_MAX];
	unsigned bad = 0;
	for (unsigned k = 0; k < NKEYS; k++) {
		char key[KV_KEY_MAX];
		uint32_t klen = key_of(k, key), len = 0;
		int rc = kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, got, sizeof(got), &len, NULL,
		                 NULL);
		if (ver[k] == 0) {
			bad += rc != -ENOENT;
			continue;
		}
		uint32_t wlen = value_make(k, ver[k], want);
		bad += rc != 0 || len != wlen || memcmp(got, want, len) != 0;
	}
	return bad;
}

/* Sets every key to version v (ver, the model, follows). */
static void set_all(struct kv *kv, unsigned *ver, unsigned v)
{
	for (unsigned k = 0; k < NKEYS; k++) {
		ver[k] = v;
		CHECK(set_key(kv, k, v) == 0);
	}
}

/* A clone shares its origin's blocks, changes apart from it, keeps its origin snapshot from
 * being destroyed, and when destroyed frees only its own blocks. */
static void test_snap_clone(void)
{
	struct blk_dev *d;
	struct kv *kv;
	struct pool *p = new_pool("snapc", &d, &kv);
	if (!p || !kv)
		return;
	unsigned ver[NKEYS], cver[NKEYS];
	set_all(kv, ver, 1);
	CHECK(snap_create1(p, "kv@origin") == 0);
	uint64_t used_at_snap = pool_used(p);
	char err[200];
	CHECK(pool_fs_clone(p, "kv@origin", "cl", err, sizeof(err)) == 0);
	CHECK(pool_fs_clone(p, "kv@origin", "cl", err, sizeof(err)) == -EEXIST);
	CHECK(pool_fs_clone(p, "kv@nosuch", "cl2", err, sizeof(err)) == -ENOENT);
	CHECK(pool_fs_clone(p, "kv@origin", "bad/name", err, sizeof(err)) == -EINVAL);
	struct pool_snap_info si = {0};
	CHECK(snap_info(p, "kv", "origin", &si));
	struct pool_ds_info ci = ds_info_of(p, "cl");
	CHECK_EQ_U64(ci.di_refer_bytes, si.si_refer_bytes);
	CHECK(pool_used(p) - used_at_snap < 64 * 1024); /* a clone costs a record */
	struct kv *ckv = NULL;
	CHECK(kv_open(p, "cl", &ckv) == 0);
	if (!ckv)
		return;
	CHECK(head_verify(ckv, ver) == 0);
	/* both change, apart */
	memcpy(cver, ver, sizeof(ver));
	for (unsigned k = 0; k < NKEYS; k += 2) {
		cver[k] = 7;
		CHECK(set_key(ckv, k, 7) == 0);
	}
	for (unsigned k = 1; k < NKEYS; k += 3) {
		ver[k] = 9;
		CHECK(set_key(kv, k, 9) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(head_verify(ckv, cver) == 0);
	CHECK(head_verify(kv, ver) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	/* the origin stays while the clone lives */
	CHECK(pool_snapshot_destroy(p, "kv@origin", err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "cl") != NULL);
	/* a snapshot of the clone, changes, then everything of the clone goes */
	CHECK(snap_create1(p, "cl@mine") == 0);
	for (unsigned k = 0; k < NKEYS; k += 5)
		CHECK(set_key(ckv, k, 11) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	kv_close(ckv);
	CHECK(pool_ds_destroy(p, "cl") == -ENOTEMPTY);
	CHECK(snap_destroy1(p, "cl@mine") == 0);
	CHECK(pool_ds_destroy(p, "cl") == 0);
	CHECK(free_settle(p));
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(head_verify(kv, ver) == 0);
	CHECK(snap_destroy1(p, "kv@origin") == 0);
	finish(p, kv, d);
}

/* Rollback: the file system becomes the snapshot (its contents, its REFER), what it changed
 * since is freed in the background; later snapshots are refused unless asked to go; an open
 * file system is refused. */
static void test_snap_rollback(void)
{
	struct blk_dev *d;
	struct kv *kv;
	struct pool *p = new_pool("snapb", &d, &kv);
	if (!p || !kv)
		return;
	unsigned ver[NKEYS], at_snap[NKEYS];
	set_all(kv, ver, 1);
	CHECK(snap_create1(p, "kv@good") == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	memcpy(at_snap, ver, sizeof(ver));
	uint64_t used_at_snap = pool_used(p);
	/* a mistake: most keys rewritten, some removed */
	for (unsigned k = 0; k < NKEYS; k++) {
		ver[k] = k % 4 == 0 ? 0 : 5;
		CHECK(set_key(kv, k, ver[k]) == 0);
	}
	CHECK(snap_create1(p, "kv@bad") == 0);
	for (unsigned k = 0; k < NKEYS; k += 2)
		CHECK(set_key(kv, k, 6) == 0);
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	char err[200];
	/* open: refused */
	CHECK(pool_fs_rollback(p, "kv@good", true, err, sizeof(err)) == -EBUSY);
	kv_close(kv);
	/* a later snapshot: refused without -r, naming it */
	CHECK(pool_fs_rollback(p, "kv@good", false, err, sizeof(err)) == -ENOTEMPTY);
	CHECK(strstr(err, "kv@bad") != NULL);
	CHECK(snap_count(p, "kv") == 2);
	CHECK(pool_fs_rollback(p, "kv@nosuch", true, err, sizeof(err)) == -ENOENT);
	CHECK(pool_fs_rollback(p, "kv@good", true, err, sizeof(err)) == 0);
	CHECK(snap_count(p, "kv") == 1);
	CHECK(kv_open(p, "kv", &kv) == 0);
	if (!kv)
		return;
	CHECK(head_verify(kv, at_snap) == 0);
	struct pool_snap_info si = {0};
	CHECK(snap_info(p, "kv", "good", &si));
	CHECK_EQ_U64(ds_info_of(p, "kv").di_refer_bytes, si.si_refer_bytes);
	CHECK_EQ_U64(si.si_used_bytes, 0);
	/* the changes' space comes back */
	for (int i = 0; i < 20000 && pool_destroy_queued(p) > 0; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(free_settle(p));
	CHECK(pool_used(p) <= used_at_snap + 64 * 1024);
	CHECK(pool_check(p, report_print, NULL) == 0);
	/* and it goes on from there */
	for (unsigned k = 0; k < NKEYS; k += 3) {
		at_snap[k] = 8;
		CHECK(set_key(kv, k, 8) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(head_verify(kv, at_snap) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	/* across an export and import */
	if (!reimport(&p, &kv, d))
		return;
	CHECK(head_verify(kv, at_snap) == 0);
	CHECK(snap_destroy1(p, "kv@good") == 0);
	finish(p, kv, d);
}

/* Sets the keys from, from + step, ... of kv's file system to version v (ver, its model,
 * follows), then makes the changes durable. */
static void rewrite(struct pool *p, struct kv *kv, unsigned *ver, unsigned from, unsigned step,
                    unsigned v)
{
	for (unsigned k = from; k < NKEYS; k += step) {
		ver[k] = v;
		CHECK(set_key(kv, k, v) == 0);
	}
	CHECK(pool_txg_wait_synced(p, 0) == 0);
}

/* Snapshot fs@sm_name, its model the file system's (ver). */
static void snap_take(struct pool *p, const char *fs, struct snap_model *sm, const unsigned *ver)
{
	char full[80];
	snprintf(full, sizeof(full), "%s@%.31s", fs, sm->sm_name);
	CHECK(snap_create1(p, full) == 0);
	memcpy(sm->sm_ver, ver, sizeof(sm->sm_ver));
	sm->sm_live = true;
}

static int promote1(struct pool *p, const char *fs, char *err, size_t err_len)
{
	int rc = pool_fs_promote(p, fs, err, err_len);
	if (rc != 0)
		printf("#   promote %s: %s\n", fs, err);
	return rc;
}

/* The GUID of snapshot name of kv's file system (0: none). */
static uint64_t snap_guid(struct pool *p, struct kv *kv, const char *name)
{
	struct pool_snap_entry *ents = NULL;
	size_t n = 0;
	uint64_t guid = 0;
	if (pool_snap_entries(p, pool_ds_id(kv->kv_ds), &ents, &n) == 0)
		for (size_t i = 0; i < n; i++)
			if (strcmp(ents[i].se_name, name) == 0)
				guid = ents[i].se_guid;
	mem_free(ents);
	return guid;
}

/* Every snapshot of sms (n) through the file system kv's, as its model says. */
static unsigned snaps_verify(struct kv *kv, struct snap_model *const *sms, unsigned n)
{
	unsigned bad = 0;
	for (unsigned i = 0; i < n; i++)
		bad += snap_verify(kv, sms[i]);
	return bad;
}

/* Promote: the clone takes its origin's snapshots up to its origin, with their contents, and
 * its origin becomes its clone; every USED and REFER stays what the walks find (pool_check);
 * clones of moved snapshots read on and depend on the clone; refusals change nothing; back and
 * forth; a clone of a clone; then the former origin and its later snapshots go, each destroy
 * freeing what its USED said, and the check stays clean (nothing leaked, nothing freed twice). */
static void test_snap_promote(void)
{
	struct blk_dev *d;
	struct kv *kv, *ckv = NULL, *dkv = NULL;
	struct pool *p = new_pool("snapp", &d, &kv);
	if (!p || !kv)
		return;
	static struct snap_model s[5] = {{.sm_name = "s1"}, {.sm_name = "s2"}, {.sm_name = "s3"},
	                                 {.sm_name = "s4"}, {.sm_name = "s5"}};
	static struct snap_model c[2] = {{.sm_name = "c1"}, {.sm_name = "c2"}};
	static unsigned ver[NKEYS], cver[NKEYS], dver[NKEYS];
	char err[200];
	/* kv: s1, s2, s3, each after a third of the keys changed */
	set_all(kv, ver, 1);
	snap_take(p, "kv", &s[0], ver);
	rewrite(p, kv, ver, 0, 3, 2);
	snap_take(p, "kv", &s[1], ver);
	rewrite(p, kv, ver, 1, 3, 3);
	snap_take(p, "kv", &s[2], ver);
	/* cl, a clone of s3, lets go of blocks of every era of kv's line, then c1 and c2 */
	CHECK(pool_fs_clone(p, "kv@s3", "cl", err, sizeof(err)) == 0);
	CHECK(kv_open(p, "cl", &ckv) == 0);
	if (!ckv)
		return;
	memcpy(cver, ver, sizeof(ver));
	rewrite(p, ckv, cver, 0, 3, 10);
	rewrite(p, ckv, cver, 1, 5, 11);
	snap_take(p, "cl", &c[0], cver);
	rewrite(p, ckv, cver, 2, 4, 12);
	snap_take(p, "cl", &c[1], cver);
	rewrite(p, ckv, cver, 0, 7, 13);
	/* kv goes on: s4, s5 and changes of its own */
	rewrite(p, kv, ver, 2, 3, 4);
	snap_take(p, "kv", &s[3], ver);
	rewrite(p, kv, ver, 0, 2, 5);
	snap_take(p, "kv", &s[4], ver);
	rewrite(p, kv, ver, 0, 5, 6);
	/* clones of s1 (never opened), s2 (open through the promote) and s4 (does not move) */
	CHECK(pool_fs_clone(p, "kv@s1", "d1", err, sizeof(err)) == 0);
	CHECK(pool_fs_clone(p, "kv@s2", "d2", err, sizeof(err)) == 0);
	CHECK(pool_fs_clone(p, "kv@s4", "e4", err, sizeof(err)) == 0);
	CHECK(kv_open(p, "d2", &dkv) == 0);
	if (!dkv)
		return;
	memcpy(dver, s[1].sm_ver, sizeof(dver));
	rewrite(p, dkv, dver, 3, 6, 20);
	CHECK(pool_check(p, report_print, NULL) == 0);
	uint64_t guid_s1 = snap_guid(p, kv, "s1");
	CHECK(guid_s1 != 0);

	/* refusals, each changing nothing */
	CHECK(pool_fs_promote(p, "kv", err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "not a clone") != NULL);
	CHECK(pool_fs_promote(p, "nosuch", err, sizeof(err)) == -ENOENT);
	CHECK(pool_fs_promote(p, "bad/name", err, sizeof(err)) == -EINVAL);
	CHECK(pool_fs_promote(p, "cl", err, sizeof(err)) == -EBUSY); /* cl is open */
	CHECK(strstr(err, "cl is in use") != NULL);
	kv_close(ckv);
	ckv = NULL;
	CHECK(pool_fs_promote(p, "cl", err, sizeof(err)) == -EBUSY); /* kv is open */
	CHECK(strstr(err, "kv is in use") != NULL);
	kv_close(kv);
	kv = NULL;
	CHECK(snap_create1(p, "cl@s2") == 0);
	CHECK(pool_fs_promote(p, "cl", err, sizeof(err)) == -EEXIST);
	CHECK(strstr(err, "kv@s2") != NULL && strstr(err, "cl@s2") != NULL);
	CHECK(snap_destroy1(p, "cl@s2") == 0);
	CHECK(snap_count(p, "kv") == 5 && snap_count(p, "cl") == 2);

	/* the promote */
	CHECK(promote1(p, "cl", err, sizeof(err)) == 0);
	CHECK(snap_count(p, "kv") == 2 && snap_count(p, "cl") == 5);
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(kv_open(p, "kv", &kv) == 0 && kv_open(p, "cl", &ckv) == 0);
	if (!kv || !ckv)
		return;
	struct snap_model *cl_line[] = {&s[0], &s[1], &s[2], &c[0], &c[1]};
	struct snap_model *kv_line[] = {&s[3], &s[4]};
	CHECK(snaps_verify(ckv, cl_line, 5) == 0);
	CHECK(snaps_verify(kv, kv_line, 2) == 0);
	CHECK_EQ_U64(snap_guid(p, ckv, "s1"), guid_s1); /* a moved snapshot is the same one */
	CHECK(head_verify(ckv, cver) == 0 && head_verify(kv, ver) == 0);
	CHECK(head_verify(dkv, dver) == 0);
	/* the moved snapshots' clones and kv depend on cl now */
	CHECK(pool_snapshot_destroy(p, "cl@s1", err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "d1") != NULL);
	CHECK(pool_snapshot_destroy(p, "cl@s2", err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "d2") != NULL);
	CHECK(pool_snapshot_destroy(p, "cl@s3", err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "kv") != NULL);
	CHECK(pool_snapshot_destroy(p, "kv@s1", err, sizeof(err)) == -ENOENT);
	/* both go on changing */
	rewrite(p, kv, ver, 1, 4, 7);
	rewrite(p, ckv, cver, 3, 4, 14);
	rewrite(p, dkv, dver, 0, 9, 21);
	CHECK(pool_check(p, report_print, NULL) == 0);

	/* back, and forth again */
	kv_close(kv);
	kv_close(ckv);
	kv = ckv = NULL;
	CHECK(promote1(p, "kv", err, sizeof(err)) == 0);
	CHECK(snap_count(p, "kv") == 5 && snap_count(p, "cl") == 2);
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(kv_open(p, "kv", &kv) == 0);
	if (!kv)
		return;
	struct snap_model *kv_all[] = {&s[0], &s[1], &s[2], &s[3], &s[4]};
	CHECK(snaps_verify(kv, kv_all, 5) == 0);
	kv_close(kv);
	kv = NULL;
	CHECK(promote1(p, "cl", err, sizeof(err)) == 0);
	CHECK(snap_count(p, "kv") == 2 && snap_count(p, "cl") == 5);
	CHECK(pool_check(p, report_print, NULL) == 0);

	/* a clone of a clone: n2 of n1@n, n1 of cl@c2; n2 takes n1@n and n1's origin */
	static struct snap_model n = {.sm_name = "n"};
	static unsigned nver[NKEYS];
	struct kv *nkv = NULL;
	CHECK(pool_fs_clone(p, "cl@c2", "n1", err, sizeof(err)) == 0);
	CHECK(kv_open(p, "n1", &nkv) == 0);
	if (!nkv)
		return;
	memcpy(nver, c[1].sm_ver, sizeof(nver));
	rewrite(p, nkv, nver, 1, 2, 30);
	snap_take(p, "n1", &n, nver);
	kv_close(nkv);
	nkv = NULL;
	CHECK(pool_fs_clone(p, "n1@n", "n2", err, sizeof(err)) == 0);
	CHECK(promote1(p, "n2", err, sizeof(err)) == 0);
	CHECK(snap_count(p, "n1") == 0 && snap_count(p, "n2") == 1);
	CHECK(pool_snapshot_destroy(p, "cl@c2", err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "n2") != NULL);
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(kv_open(p, "n2", &nkv) == 0);
	if (!nkv)
		return;
	CHECK(snap_verify(nkv, &n) == 0 && head_verify(nkv, nver) == 0);
	kv_close(nkv);
	CHECK(pool_ds_destroy(p, "n1") == 0); /* the former origin, without snapshots now */

	/* the former origin goes: e4 first (a clone of s4), then s5, s4 and kv itself */
	CHECK(pool_ds_destroy(p, "e4") == 0);
	CHECK(pool_ds_destroy(p, "kv") == -ENOTEMPTY);
	for (unsigned i = 5; i-- > 3;) {
		struct pool_snap_info si = {0};
		CHECK(snap_info(p, "kv", s[i].sm_name, &si));
		CHECK(free_settle(p));
		uint64_t before = pool_used(p);
		char full[40];
		snprintf(full, sizeof(full), "kv@%s", s[i].sm_name);
		CHECK(snap_destroy1(p, full) == 0);
		CHECK(free_settle(p));
		uint64_t after = pool_used(p);
		CHECK(before - after >= si.si_used_bytes);
		CHECK(before - after <= si.si_used_bytes + 64 * 1024);
	}
	CHECK(pool_ds_destroy(p, "kv") == 0);
	for (int i = 0; i < 20000 && pool_destroy_queued(p) > 0; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(free_settle(p));
	CHECK(pool_check(p, report_print, NULL) == 0);
	CHECK(kv_open(p, "cl", &ckv) == 0);
	if (!ckv)
		return;
	CHECK(snaps_verify(ckv, cl_line, 5) == 0);
	CHECK(head_verify(ckv, cver) == 0 && head_verify(dkv, dver) == 0);
	/* and everything else: cl's snapshots once their clones are gone */
	kv_close(dkv);
	CHECK(pool_ds_destroy(p, "d1") == 0 && pool_ds_destroy(p, "d2") == 0);
	CHECK(pool_ds_destroy(p, "n2") == -ENOTEMPTY);
	CHECK(snap_destroy1(p, "n2@n") == 0 && pool_ds_destroy(p, "n2") == 0);
	const char *cl_names[] = {"cl@s2", "cl@c2", "cl@s1", "cl@s3", "cl@c1"};
	for (unsigned i = 0; i < 5; i++)
		CHECK(snap_destroy1(p, cl_names[i]) == 0);
	for (int i = 0; i < 20000 && pool_destroy_queued(p) > 0; i++)
		CHECK(pool_txg_wait_synced(p, 0) == 0);
	CHECK(free_settle(p));
	CHECK_EQ_U64(ds_info_of(p, "cl").di_snap_bytes, 0);
	CHECK(head_verify(ckv, cver) == 0);
	CHECK(pool_check(p, report_print, NULL) == 0);
	kv_close(ckv);
	CHECK(pool_export(p) == 0);
	blk_dev_close(d);
}

/* The online scrub verifies and repairs the blocks only snapshots hold too: a mirror with one
 * side scribbled over, scrubbed, then imported from that side alone, holds every snapshot
 * byte-exact and checks clean. */
static void test_snap_scrub(void)
{
	struct blk_dev *d[2];
	for (int i = 0; i < 2; i++)
		VERIFY(blk_dev_create_mem(64 * MIB, &d[i]) == 0);
	struct pool_open_opts o = opts_kv();
	struct pool_create_args a = {.pc_name = "snaps", .pc_layout = POOL_LAYOUT_MIRROR,
	                             .pc_opts = &o};
	struct pool *p = NULL;
	struct kv *kv = NULL;
	CHECK(pool_create_on_devs(&a, d, 2, NULL, 0, &p) == 0);
	if (!p)
		return;
	CHECK(pool_ds_create(p, "kv", NULL) == 0);
	CHECK(kv_open(p, "kv", &kv) == 0);
	static struct snap_model s1 = {.sm_name = "s1"}, s2 = {.sm_name = "s2"};
	unsigned ver[NKEYS];
	set_all(kv, s1.sm_ver, 1);
	CHECK(snap_create1(p, "kv@s1") == 0);
	set_all(kv, s2.sm_ver, 2);
	CHECK(snap_create1(p, "kv@s2") == 0);
	set_all(kv, ver, 3); /* now v1 and v2 live in the snapshots only */
	kv_close(kv);
	CHECK(pool_export(p) == 0);
	uint8_t *bytes = blk_dev_mem_bytes(d[0]);
	uint64_t seed = 99, end = blk_dev_size(d[0]) - BLK_LABEL_AREA_BYTES;
	for (uint64_t off = BLK_LABEL_AREA_BYTES; off + 8 <= end; off += 8) {
		uint64_t r = rng_next(&seed);
		memcpy(bytes + off, &r, 8);
	}
	p = NULL;
	CHECK(pool_import_devs(d, 2, &o, &p) == 0);
	if (!p)
		return;
	CHECK(pool_scrub(p, NULL, report_print, NULL) == 0);
	CHECK(pool_export(p) == 0);
	/* the scribbled side alone */
	p = NULL;
	CHECK(pool_import_devs(d, 1, &o, &p) == 0);
	if (p) {
		CHECK(kv_open(p, "kv", &kv) == 0);
		if (kv) {
			CHECK(snap_verify(kv, &s1) == 0);
			CHECK(snap_verify(kv, &s2) == 0);
			CHECK(head_verify(kv, ver) == 0);
			kv_close(kv);
		}
		CHECK(pool_check(p, report_print, NULL) == 0);
		pool_close(p);
	}
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
}

/* ---- power cuts ---- */

#define CRASH_ROUNDS 40u

struct crash_snap {
	struct snap_model cs_model;
	/* The global fault numbers when its create returned, when its destroy was asked for and when
	 * that returned (0: never). Between the last two the destroy may or may not be durable. */
	uint64_t cs_created_seq;
	uint64_t cs_destroy_asked_seq, cs_destroyed_seq;
};

struct snap_crash_run {
	struct blk_dev *sc_leaf;
	uint64_t sc_start_seq;
	struct crash_snap sc_snaps[CRASH_ROUNDS];
	unsigned sc_nsnaps;
	unsigned sc_rollbacks;
	/* Promotes: a clone "cl" of a live snapshot (sc_snaps[pe_origin]) promoted, then kv promoted
	 * back and cl destroyed; the global fault numbers when that began and when it ended. */
	struct crash_promote {
		unsigned pe_origin;
		uint64_t pe_begin_seq, pe_end_seq;
	} sc_promotes[CRASH_ROUNDS];
	unsigned sc_npromotes;
};

/* The promote of sc's line: cl, a clone of kv's newest live snapshot, promoted (the snapshots up
 * to it move to cl), kv promoted back, cl destroyed; kv closed meanwhile. */
static bool snap_crash_promote(struct snap_crash_run *sc, struct pool *p, struct kv **kv)
{
	unsigned origin = sc->sc_nsnaps;
	while (origin-- > 0 && sc->sc_snaps[origin].cs_destroyed_seq != 0)
		;
	struct crash_promote *pe = &sc->sc_promotes[sc->sc_npromotes++];
	pe->pe_origin = origin;
	pe->pe_begin_seq = blk_fault_global_seq();
	char full[48], err[200];
	snprintf(full, sizeof(full), "kv@%.31s", sc->sc_snaps[origin].cs_model.sm_name);
	kv_close(*kv);
	*kv = NULL;
	bool ok = pool_fs_clone(p, full, "cl", err, sizeof(err)) == 0 &&
	          promote1(p, "cl", err, sizeof(err)) == 0 && promote1(p, "kv", err, sizeof(err)) == 0 &&
	          pool_ds_destroy(p, "cl") == 0 && kv_open(p, "kv", kv) == 0;
	pe->pe_end_seq = blk_fault_global_seq();
	return ok;
}

static struct pool_open_opts crash_snap_opts(void)
{
	struct pool_open_opts o = opts_kv();
	o.po_txg_interval_ms = 30;  /* txgs, and background frees, all through the run */
	o.po_destroy_step = 16;     /* a chain freed over several txgs */
	o.po_arc_max_bytes = 16 * MIB;
	return o;
}

/* The line of changes, snapshots and destroys on one fault leaf; the pool is closed without an
 * export (the crash). */
static bool snap_crash_workload(struct snap_crash_run *sc)
{
	VERIFY(blk_dev_create_fault(64 * MIB, &sc->sc_leaf) == 0);
	struct pool_open_opts o = crash_snap_opts();
	struct pool_create_args a = {.pc_name = "snapcrash", .pc_opts = &o};
	struct pool *p = NULL;
	struct kv *kv = NULL;
	if (pool_create_on_devs(&a, &sc->sc_leaf, 1, NULL, 0, &p) != 0)
		return false;
	bool ok = pool_ds_create(p, "kv", NULL) == 0 && kv_open(p, "kv", &kv) == 0;
	sc->sc_start_seq = blk_fault_global_seq();
	unsigned ver[NKEYS] = {0};
	uint64_t seed = 777;
	for (unsigned round = 0; ok && round < CRASH_ROUNDS; round++) {
		for (unsigned c = 0; ok && c < 40; c++) {
			seed = seed * 6364136223846793005ull + 1;
			unsigned k = (unsigned)(seed >> 33) % NKEYS;
			ver[k] = (seed >> 20) % 6 == 0 ? 0 : ver[k] + 1;
			ok = set_key(kv, k, ver[k]) == 0;
		}
		seed = seed * 6364136223846793005ull + 1;
		unsigned live = 0, pick = (unsigned)(seed >> 40);
		for (unsigned i = 0; i < sc->sc_nsnaps; i++)
			live += sc->sc_snaps[i].cs_destroyed_seq == 0;
		char full[48];
		if (live > 0 && round % 10 == 4) {
			ok = snap_crash_promote(sc, p, &kv);
		} else if (live > 0 && round % 7 == 6) {
			/* roll back to a live one, the later ones destroyed (-r) */
			unsigned skip = pick % live, i = 0;
			for (;; i++)
				if (sc->sc_snaps[i].cs_destroyed_seq == 0 && skip-- == 0)
					break;
			snprintf(full, sizeof(full), "kv@%.31s", sc->sc_snaps[i].cs_model.sm_name);
			uint64_t asked = blk_fault_global_seq();
			for (unsigned j = i + 1; j < sc->sc_nsnaps; j++)
				if (sc->sc_snaps[j].cs_destroyed_seq == 0)
					sc->sc_snaps[j].cs_destroy_asked_seq = asked;
			kv_close(kv);
			kv = NULL;
			char err[200];
			ok = pool_fs_rollback(p, full, true, err, sizeof(err)) == 0 &&
			     kv_open(p, "kv", &kv) == 0;
			uint64_t done = blk_fault_global_seq();
			for (unsigned j = i + 1; j < sc->sc_nsnaps; j++)
				if (sc->sc_snaps[j].cs_destroyed_seq == 0)
					sc->sc_snaps[j].cs_destroyed_seq = done;
			memcpy(ver, sc->sc_snaps[i].cs_model.sm_ver, sizeof(ver));
			sc->sc_rollbacks++;
		} else if (live >= 3 || (live > 0 && round % 3 == 2)) {
			/* destroy one that lives: its blocks are freed in the background */
			unsigned skip = pick % live, i = 0;
			for (;; i++)
				if (sc->sc_snaps[i].cs_destroyed_seq == 0 && skip-- == 0)
					break;
			snprintf(full, sizeof(full), "kv@%.31s", sc->sc_snaps[i].cs_model.sm_name);
			sc->sc_snaps[i].cs_destroy_asked_seq = blk_fault_global_seq();
			ok = snap_destroy1(p, full) == 0;
			sc->sc_snaps[i].cs_destroyed_seq = blk_fault_global_seq();
		} else {
			struct crash_snap *cs = &sc->sc_snaps[sc->sc_nsnaps++];
			snprintf(cs->cs_model.sm_name, sizeof(cs->cs_model.sm_name), "c%u", round);
			memcpy(cs->cs_model.sm_ver, ver, sizeof(ver));
			snprintf(full, sizeof(full), "kv@%.31s", cs->cs_model.sm_name);
			ok = snap_create1(p, full) == 0;
			cs->cs_created_seq = blk_fault_global_seq();
		}
	}
	if (kv)
		kv_close(kv);
	pool_close(p); /* the crash */
	return ok && sc->sc_rollbacks > 0 && sc->sc_npromotes > 0;
}

/* One image at cut g: imported and checked (crash_cut_import), its snapshots as the line says,
 * then its background freeing finished and checked again. */
/* One image at cut g: imported and checked (crash_cut_import), its snapshots as the line says,
 * each under kv or, while a promote was under way, under cl: the snapshots up to that promote's
 * origin all under one of them (a promote happened whole or not at all), no later one under cl;
 * then its background freeing finished and checked again. *promoted counts the images that
 * held a promoted cl. */
static bool snap_crash_verify(struct snap_crash_run *sc, uint64_t g, enum blk_fault_mode mode,
                              uint64_t seed, unsigned *mid_free, unsigned *promoted)
{
	struct blk_dev *img[1] = {NULL};
	struct pool_open_opts o = crash_snap_opts();
	struct pool *p = NULL;
	bool ok = crash_cut_import(&sc->sc_leaf, 1, g, mode, seed, &o, img, &p);
	struct kv *kv = NULL, *ckv = NULL;
	if (p && kv_open(p, "kv", &kv) != 0)
		ok = false;
	if (p && kv_open(p, "cl", &ckv) != 0)
		ckv = NULL; /* no promote under way */
	if (p && (pool_snap_free_queued(p) > 0 || pool_destroy_queued(p) > 0))
		(*mid_free)++; /* cut while a destroyed snapshot's or rolled-back blocks were freed */
	const struct crash_promote *pe = NULL;
	for (unsigned e = 0; e < sc->sc_npromotes; e++)
		if (sc->sc_promotes[e].pe_begin_seq <= g)
			pe = &sc->sc_promotes[e];
	unsigned early_kv = 0, early_cl = 0;
	for (unsigned i = 0; kv && i < sc->sc_nsnaps; i++) {
		const struct crash_snap *cs = &sc->sc_snaps[i];
		struct pool_snap_info si = {0};
		bool on_kv = snap_info(p, "kv", cs->cs_model.sm_name, &si);
		bool on_cl = ckv && snap_info(p, "cl", cs->cs_model.sm_name, &si);
		bool present = on_kv || on_cl;
		bool must = cs->cs_created_seq <= g &&
		            !(cs->cs_destroy_asked_seq != 0 && cs->cs_destroy_asked_seq <= g);
		bool must_not = cs->cs_destroyed_seq != 0 && cs->cs_destroyed_seq <= g;
		bool early = pe && i <= pe->pe_origin; /* moves with that promote */
		early_kv += early && on_kv;
		early_cl += early && on_cl;
		if ((must && !present) || (must_not && present) || (on_kv && on_cl) ||
		    (on_cl && !early)) {
			printf("#   cut %" PRIu64 " mode %d: snapshot %s %s\n", g, mode,
			       cs->cs_model.sm_name,
			       on_kv && on_cl ? "is on both"
			       : on_cl        ? "is on cl"
			       : present      ? "is there"
			                      : "is missing");
			ok = false;
		} else if (present && snap_verify(on_kv ? kv : ckv, &cs->cs_model) != 0) {
			printf("#   cut %" PRIu64 " mode %d: snapshot %s differs\n", g, mode,
			       cs->cs_model.sm_name);
			ok = false;
		}
	}
	if (early_kv > 0 && early_cl > 0) {
		printf("#   cut %" PRIu64 " mode %d: half promoted (%u snapshots on kv, %u on cl)\n",
		       g, mode, early_kv, early_cl);
		ok = false;
	}
	*promoted += early_cl > 0;
	if (ckv)
		kv_close(ckv);
	if (kv) {
		kv_close(kv);
		for (int w = 0; w < 20000 && pool_destroy_queued(p) > 0; w++)
			(void)!pool_txg_wait_synced(p, 0);
		if (!free_settle(p) || pool_check(p, report_print, NULL) != 0) {
			printf("#   cut %" PRIu64 " mode %d: after the background freeing\n", g, mode);
			ok = false;
		}
	}
	if (p)
		pool_close(p);
	blk_dev_close(img[0]);
	return ok;
}

static void test_snap_crash(void)
{
	struct snap_crash_run *sc = calloc(1, sizeof(*sc));
	VERIFY(sc != NULL);
	CHECK(snap_crash_workload(sc));
	struct crash_plan plan;
	crash_plan_init(&plan, &sc->sc_leaf, 1, sc->sc_start_seq, 24, 0x5a9);
	unsigned images = 0, failed = 0, mid_free = 0, promoted = 0;
	for (unsigned c = 0; c < plan.cp_ncuts && failed <= 4; c++) {
		uint64_t g = crash_plan_cut(&plan, c);
		for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER; mode++) {
			images++;
			failed += !snap_crash_verify(sc, g, (enum blk_fault_mode)mode,
			                             c * 7 + (uint64_t)mode, &mid_free, &promoted);
		}
	}
	/* and cuts across each promote: before 6 of its flushes, spread over it, every write
	 * kept or a random subset of them reordered */
	for (unsigned e = 0; e < sc->sc_npromotes && failed <= 4; e++) {
		const struct crash_promote *pe = &sc->sc_promotes[e];
		size_t first = 0, end;
		while (first < plan.cp_nflush && plan.cp_flushes[first] < pe->pe_begin_seq)
			first++;
		for (end = first; end < plan.cp_nflush && plan.cp_flushes[end] <= pe->pe_end_seq;)
			end++;
		size_t step = SH_MAX((end - first) / 6, (size_t)1);
		for (size_t f = first; f < end; f += step) {
			uint64_t g = plan.cp_flushes[f];
			for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER;
			     mode += BLK_FAULT_REORDER - BLK_FAULT_KEEP_ALL) {
				images++;
				failed += !snap_crash_verify(sc, g, (enum blk_fault_mode)mode,
				                             f * 5 + (uint64_t)mode, &mid_free,
				                             &promoted);
			}
		}
	}
	CHECKF(failed == 0, "%u of %u images failed", failed, images);
	CHECKF(mid_free > 0, "no cut fell while a destroyed snapshot's blocks were being freed");
	CHECKF(promoted > 0, "no cut fell while a clone was promoted");
	printf("#   %u cut points (%zu flush events), %u images in 5 fault modes (%u in the middle "
	       "of a background free, %u with a clone promoted), %u snapshots taken, %u "
	       "rollbacks, %u promotes\n",
	       plan.cp_ncuts, plan.cp_nflush, images, mid_free, promoted, sc->sc_nsnaps,
	       sc->sc_rollbacks, sc->sc_npromotes);
	crash_plan_fini(&plan);
	blk_dev_close(sc->sc_leaf);
	free(sc);
}

int main(void)
{
	log_set_level(LOG_WARN);
	TAP_RUN(test_snap_basic);
	TAP_RUN(test_snap_middle);
	TAP_RUN(test_snap_random);
	TAP_RUN(test_snap_atomic);
	TAP_RUN(test_snap_clone);
	TAP_RUN(test_snap_rollback);
	TAP_RUN(test_snap_promote);
	TAP_RUN(test_snap_scrub);
	TAP_RUN(test_snap_crash);
	return tap_finish();
}
