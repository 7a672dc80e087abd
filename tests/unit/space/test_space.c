/* test_space.c: unit tests for the pool's space allocator (src/space/space.c): deferred reuse, the
 * reserve, sync and reopen (exact bitmaps, one-pass convergence, failures), crash consistency over
 * a sequence of txgs, claims, hostile roots and chunks, the checker, and several vdevs.
 *
 * The block store is in the test: each vdev is a sparse in-memory disk (a table from sector to a
 * lazily allocated 4 KiB page), ss_write allocates from the allocator under test and writes the
 * image there, and the load callback reads it back and verifies a checksum kept in the block
 * pointer. So space that is reused too early really is overwritten, and a later load of an older
 * root fails. The test links only base and space.c (not blk's library). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "space/space.h"
#include "tap.h"

#define SEC 4096u
#define VSTART (512u * 1024u) /* where blk puts the data area */
#define SMALL_VDEV                                                                                 \
	((16u << 20) + 40u * 1024u + 100u) /* 4106 sectors: partial last chunk, metaslab */
#define KIB 1024ull
#define MIB (1024ull * 1024ull)

/* ---------------------------------------------------------------------------------------------
 * Deterministic randomness */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd_below(uint64_t n)
{
	return rnd() % n;
}

/* ---------------------------------------------------------------------------------------------
 * The in-memory block store */

struct text {
	uint32_t vdev;
	uint64_t off;
	uint64_t bytes;
};

struct tdisk {
	uint64_t nsec;  /* sectors from offset 0 to the end of the data area */
	uint8_t **page; /* [nsec], NULL = zeros */
};

struct tstore {
	struct space *sp; /* the allocator under test: ss_write allocates from it */
	uint64_t txg;     /* birth txg for blocks written */
	uint32_t nvdevs;
	struct tdisk disk[SPACE_MAX_VDEVS];
	bool verify;    /* load checks the checksum (off: nonsense that passes it) */
	int fail_after; /* ss_write fails when this reaches 0; < 0: never */
	/* a failing ss_write allocates, then frees, then fails (as the pool) */
	bool fail_alloc_first;
	bool foreign_bp; /* ss_write returns a pointer it did not allocate */
	/* this many root writes also allocate one extra sector and keep it */
	int strays;
	struct text stray[16];
	size_t nstray;
	uint64_t writes, frees, loads;
	struct text own[4096]; /* the allocator's blocks: written, not yet named by ss_free */
	size_t nown;
	bool own_overflow;
};

static void disk_write(struct tdisk *d, uint64_t off, const void *data, uint64_t len)
{
	const uint8_t *p = data;
	while (len > 0) {
		uint64_t s = off / SEC, in = off % SEC, take = SH_MIN(len, SEC - in);
		VERIFY(s < d->nsec);
		if (d->page[s] == NULL) {
			d->page[s] = calloc(1, SEC);
			VERIFY(d->page[s] != NULL);
		}
		memcpy(d->page[s] + in, p, take);
		off += take;
		p += take;
		len -= take;
	}
}

static void disk_read(const struct tdisk *d, uint64_t off, void *data, uint64_t len)
{
	uint8_t *p = data;
	while (len > 0) {
		uint64_t s = off / SEC, in = off % SEC, take = SH_MIN(len, SEC - in);
		if (s < d->nsec && d->page[s] != NULL)
			memcpy(p, d->page[s] + in, take);
		else
			memset(p, 0, take);
		off += take;
		p += take;
		len -= take;
	}
}

static uint64_t image_sum(const void *image, uint32_t bytes)
{
	return sh_hash64(image, bytes, 0x5350414345ull);
}

static int ts_write(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
                    uint64_t fill, struct blk_ptr *bp_out)
{
	struct tstore *ts = ctx;
	(void)fill;
	uint64_t asize = (image_bytes + SEC - 1) / SEC * SEC, off;
	uint32_t vdev;
	if (ts->fail_after == 0) {
		if (ts->fail_alloc_first && space_alloc(ts->sp, SPACE_CLASS_RESERVED,
		                                        SPACE_VDEV_ANY, asize, &vdev, &off) == 0)
			VERIFY(space_free(ts->sp, ts->txg, vdev, off, asize) == 0);
		return -EIO;
	}
	if (ts->fail_after > 0)
		ts->fail_after--;
	int rc = space_alloc(ts->sp, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY, asize, &vdev, &off);
	if (rc != 0)
		return rc;
	uint8_t *padded = calloc(1, asize);
	VERIFY(padded != NULL);
	memcpy(padded, image, image_bytes);
	disk_write(&ts->disk[vdev], off, padded, asize);
	free(padded);
	memset(bp_out, 0, sizeof(*bp_out));
	bp_out->bp_vdev = vdev;
	bp_out->bp_offset = off;
	bp_out->bp_asize = (uint32_t)asize;
	bp_out->bp_psize = image_bytes;
	bp_out->bp_lsize = image_bytes;
	bp_out->bp_compress = BLK_COMPRESS_OFF;
	bp_out->bp_checksum = BLK_CHECKSUM_XXH3_128;
	bp_out->bp_type = 42;
	bp_out->bp_level = (uint8_t)(level + 7); /* space_sync must overwrite it */
	bp_out->bp_birth_txg = ts->txg;
	uint64_t sum = image_sum(image, image_bytes);
	memcpy(bp_out->bp_cksum, &sum, sizeof(sum));
	if (ts->nown < SH_ARRAY_SIZE(ts->own))
		ts->own[ts->nown++] = (struct text){vdev, off, asize};
	else
		ts->own_overflow = true;
	ts->writes++;
	if (ts->strays > 0 && level == SPACE_LEVEL_ROOT) {
		ts->strays--;
		VERIFY(space_alloc(ts->sp, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY, SEC, &vdev,
		                   &off) == 0);
		VERIFY(ts->nstray < SH_ARRAY_SIZE(ts->stray));
		ts->stray[ts->nstray++] = (struct text){vdev, off, SEC};
	}
	if (ts->foreign_bp)
		bp_out->bp_offset += SEC; /* names space next to what it allocated */
	return 0;
}

static bool own_named_free_missing;

static void ts_free(void *ctx, const struct blk_ptr *bp)
{
	struct tstore *ts = ctx;
	ts->frees++;
	for (size_t i = 0; i < ts->nown; i++)
		if (ts->own[i].vdev == bp->bp_vdev && ts->own[i].off == bp->bp_offset &&
		    ts->own[i].bytes == bp->bp_asize) {
			ts->own[i] = ts->own[--ts->nown];
			return;
		}
	own_named_free_missing = true;
}

static int ts_load(void *ctx, const struct blk_ptr *bp, void *buf, uint32_t bytes)
{
	struct tstore *ts = ctx;
	ts->loads++;
	if (bp->bp_vdev >= ts->nvdevs || bp->bp_lsize != bytes ||
	    bp->bp_offset / SEC + (bp->bp_asize + SEC - 1) / SEC > ts->disk[bp->bp_vdev].nsec)
		return -EIO;
	disk_read(&ts->disk[bp->bp_vdev], bp->bp_offset, buf, bytes);
	uint64_t sum;
	memcpy(&sum, bp->bp_cksum, sizeof(sum));
	if (ts->verify && sum != image_sum(buf, bytes))
		return -EIO;
	return 0;
}

static struct tstore *ts_create(const struct space_geometry *g)
{
	struct tstore *ts = calloc(1, sizeof(*ts));
	VERIFY(ts != NULL);
	ts->nvdevs = g->sg_nvdevs;
	ts->verify = true;
	ts->fail_after = -1;
	ts->txg = 1;
	for (uint32_t v = 0; v < g->sg_nvdevs; v++) {
		ts->disk[v].nsec = (g->sg_vdevs[v].svg_start + g->sg_vdevs[v].svg_bytes) / SEC;
		ts->disk[v].page = calloc(ts->disk[v].nsec, sizeof(uint8_t *));
		VERIFY(ts->disk[v].page != NULL);
	}
	return ts;
}

static void ts_destroy(struct tstore *ts)
{
	for (uint32_t v = 0; v < ts->nvdevs; v++) {
		for (uint64_t s = 0; s < ts->disk[v].nsec; s++)
			free(ts->disk[v].page[s]);
		free(ts->disk[v].page);
	}
	free(ts);
}

/* A new allocator on g with a new store behind it, in ts->sp; store_close destroys both. */
static struct tstore *store_open(const struct space_geometry *g)
{
	struct tstore *ts = ts_create(g);
	int rc = space_create(g, &ts->sp);
	CHECKF(rc == 0, "space_create: %d", rc);
	return ts;
}

static void store_close(struct tstore *ts)
{
	space_close(ts->sp);
	ts_destroy(ts);
}

static struct space_store ts_store(struct tstore *ts)
{
	return (struct space_store){.ss_ctx = ts, .ss_write = ts_write, .ss_free = ts_free};
}

static int ts_sync(struct tstore *ts, uint64_t txg, struct blk_ptr *root)
{
	struct space_store st = ts_store(ts);
	ts->txg = txg;
	return space_sync(ts->sp, txg, &st, root);
}

/* ---------------------------------------------------------------------------------------------
 * Geometry and whole-pool views */

static void small_geom(struct space_geometry *g, uint32_t nvdevs)
{
	space_geometry_init(g);
	g->sg_nvdevs = nvdevs;
	for (uint32_t v = 0; v < nvdevs; v++) {
		g->sg_vdevs[v].svg_start = VSTART;
		g->sg_vdevs[v].svg_bytes = SMALL_VDEV;
	}
	g->sg_metaslab_bytes = 4 * MIB;
	g->sg_chunk_bytes = 96; /* (96 - 32) * 8 = 512 sectors = 2 MiB per chunk: 9 per vdev */
	g->sg_index_chunks = 4; /* several index blocks, the last one short */
	g->sg_reserve_shift = 5;
	g->sg_reserve_min_bytes = 256 * KIB;
}

/* Fills g by small_geom and opens a store on it. */
static struct tstore *small_store_open(struct space_geometry *g, uint32_t nvdevs)
{
	small_geom(g, nvdevs);
	return store_open(g);
}

/* One field of a geometry and a value for it: the cases below change one field at a time. */
struct geom_field {
	const char *gf_what;
	size_t gf_at;
	size_t gf_bytes; /* 4 or 8 */
	uint64_t gf_value;
};

#define GEOM_FIELD(f) offsetof(struct space_geometry, f), sizeof(((struct space_geometry *)0)->f)

/* g with the one field changed. */
static struct space_geometry geom_with(const struct space_geometry *g, const struct geom_field *f)
{
	struct space_geometry b = *g;
	uint8_t *at = (uint8_t *)&b + f->gf_at;
	if (f->gf_bytes == sizeof(uint32_t)) {
		uint32_t v = (uint32_t)f->gf_value;
		memcpy(at, &v, sizeof(v));
	} else {
		VERIFY(f->gf_bytes == sizeof(uint64_t));
		memcpy(at, &f->gf_value, sizeof(f->gf_value));
	}
	return b;
}

static uint64_t vdev_sectors(const struct space_geometry *g, uint32_t v)
{
	return g->sg_vdevs[v].svg_bytes / SEC;
}

static uint64_t sector_off(const struct space_geometry *g, uint32_t v, uint64_t s)
{
	return g->sg_vdevs[v].svg_start + s * SEC;
}

/* Per-sector expected allocation, one byte per sector per vdev. */
struct tmap {
	uint32_t nvdevs;
	uint64_t n[SPACE_MAX_VDEVS];
	uint8_t *bit[SPACE_MAX_VDEVS];
};

static void tmap_init(struct tmap *m, const struct space_geometry *g)
{
	memset(m, 0, sizeof(*m));
	m->nvdevs = g->sg_nvdevs;
	for (uint32_t v = 0; v < g->sg_nvdevs; v++) {
		m->n[v] = vdev_sectors(g, v);
		m->bit[v] = calloc(m->n[v], 1);
		VERIFY(m->bit[v] != NULL);
	}
}

static void tmap_fini(struct tmap *m)
{
	for (uint32_t v = 0; v < m->nvdevs; v++)
		free(m->bit[v]);
}

static void tmap_mark(struct tmap *m, const struct space_geometry *g, uint32_t vdev, uint64_t off,
                      uint64_t bytes, uint8_t val)
{
	uint64_t s0 = (off - g->sg_vdevs[vdev].svg_start) / SEC;
	for (uint64_t s = s0; s < s0 + bytes / SEC; s++)
		m->bit[vdev][s] = val;
}

/* The allocator's state of every sector. */
static void tmap_from_space(struct tmap *m, const struct space_geometry *g, const struct space *sp)
{
	for (uint32_t v = 0; v < m->nvdevs; v++)
		for (uint64_t s = 0; s < m->n[v]; s++) {
			enum space_range_state st = SPACE_RANGE_MIXED;
			VERIFY(space_query(sp, v, sector_off(g, v, s), SEC, &st) == 0);
			m->bit[v][s] = (uint8_t)st;
		}
}

/* Compares the allocator's sector states with expected (1 = ALLOCATED, 0 = FREE). Returns the
 * number of mismatches and prints the first few. */
static uint64_t compare_alloc(const struct space_geometry *g, const struct space *sp,
                              const struct tmap *expect, const char *what)
{
	uint64_t bad = 0;
	for (uint32_t v = 0; v < expect->nvdevs; v++)
		for (uint64_t s = 0; s < expect->n[v]; s++) {
			enum space_range_state st = SPACE_RANGE_MIXED;
			VERIFY(space_query(sp, v, sector_off(g, v, s), SEC, &st) == 0);
			enum space_range_state want =
			    expect->bit[v][s] ? SPACE_RANGE_ALLOCATED : SPACE_RANGE_FREE;
			if (st != want && bad++ < 5)
				printf("#   %s: vdev %u sector %llu is %d, expected %d\n", what, v,
				       (unsigned long long)s, (int)st, (int)want);
		}
	return bad;
}

/* Marks the store's record of the allocator's own blocks in m. */
static void tmap_add_own(struct tmap *m, const struct space_geometry *g, const struct tstore *ts)
{
	for (size_t i = 0; i < ts->nown; i++)
		tmap_mark(m, g, ts->own[i].vdev, ts->own[i].off, ts->own[i].bytes, 1);
}

/* Whether [off, off + bytes) of vdev is wholly in state want (a failed query is not). */
static bool range_is(const struct space *sp, uint32_t vdev, uint64_t off, uint64_t bytes,
                     enum space_range_state want)
{
	enum space_range_state st;
	return space_query(sp, vdev, off, bytes, &st) == 0 && st == want;
}

/* Initialises m to what a state should hold: the nlive extents of live and the store's record of
 * the allocator's own blocks allocated, everything else free. tmap_fini frees it. */
static void tmap_expect_live(struct tmap *m, const struct space_geometry *g,
                             const struct text *live, size_t nlive, const struct tstore *ts)
{
	tmap_init(m, g);
	for (size_t i = 0; i < nlive; i++)
		tmap_mark(m, g, live[i].vdev, live[i].off, live[i].bytes, 1);
	tmap_add_own(m, g, ts);
}

/* Opens root; a failure is a failed CHECK, and an empty allocator stands in for the result so that
 * the case goes on to report what else is wrong instead of crashing. */
static struct space *reopen(const struct space_geometry *g, const struct blk_ptr *root,
                            struct tstore *ts)
{
	struct space *re = NULL;
	int rc = space_open(g, root, ts_load, ts, &re);
	CHECKF(rc == 0, "space_open: %d", rc);
	if (rc != 0)
		VERIFY(space_create(g, &re) == 0);
	return re;
}

/* ---------------------------------------------------------------------------------------------
 * Cases */

static void test_deferred_reuse(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 1);
	struct space *sp = ts->sp;
	uint32_t v;
	uint64_t a, b, c;
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, 64 * KIB, &v, &a) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, 64 * KIB, &v, &b) == 0);
	CHECK(v == 0 && b == a + 64 * KIB); /* first fit from the cursor: contiguous */
	CHECK(space_free(sp, 5, 0, a, 64 * KIB) == 0);
	CHECK(range_is(sp, 0, a, 64 * KIB, SPACE_RANGE_FREEING));
	struct space_stats s0, s1;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &s0) == 0);
	CHECK(s0.st_freeing_bytes == 64 * KIB && s0.st_allocated_bytes == 64 * KIB);
	CHECK(s0.st_free_bytes == s0.st_total_bytes - 128 * KIB);

	/* Refused frees change nothing. */
	CHECK(space_free(sp, 5, 0, a, 64 * KIB) == -EINVAL); /* double free */
	/* half freeing, half allocated */
	CHECK(space_free(sp, 6, 0, a + 60 * KIB, 8 * KIB) == -EINVAL);
	CHECK(space_free(sp, 5, 0, b + 64 * KIB, SEC) == -EINVAL); /* never allocated */
	CHECK(space_free(sp, 5, 0, b + 100, SEC) == -EINVAL);      /* misaligned */
	CHECK(space_free(sp, 5, 0, b, 100) == -EINVAL);
	CHECK(space_free(sp, 5, 1, b, SEC) == -EINVAL);            /* no such vdev */
	CHECK(space_free(sp, 5, 0, VSTART - SEC, SEC) == -EINVAL); /* before the data area */
	/* after the data area */
	CHECK(space_free(sp, 5, 0, VSTART + (uint64_t)SMALL_VDEV / SEC * SEC, SEC) == -EINVAL);
	CHECK(space_free(sp, 0, 0, b, SEC) == -EINVAL); /* txg 0 */
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &s1) == 0);
	CHECK(memcmp(&s0, &s1, sizeof(s0)) == 0);
	CHECK(range_is(sp, 0, b, 64 * KIB, SPACE_RANGE_ALLOCATED));

	/* Sync txg 5 (its state shows a free), then take every other sector: none is a's. */
	struct blk_ptr root;
	CHECK(ts_sync(ts, 5, &root) == 0);
	uint64_t got = 0;
	bool overlap = false;
	for (;;) {
		uint64_t off;
		int rc = space_alloc(sp, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY, SEC, &v, &off);
		if (rc != 0) {
			CHECK(rc == -ENOSPC);
			break;
		}
		overlap = overlap || (off >= a && off < a + 64 * KIB);
		got++;
	}
	CHECK(!overlap);
	CHECK(got > 4000);
	CHECK(space_stats(sp, 0, &s1) == 0 && s1.st_free_bytes == 0 &&
	      s1.st_freeing_bytes == 64 * KIB);
	space_txg_durable(sp, 4); /* an older txg: a stays out of reach */
	CHECK(space_alloc(sp, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY, SEC, &v, &c) == -ENOSPC);
	space_txg_durable(sp, 5);
	CHECK(range_is(sp, 0, a, 64 * KIB, SPACE_RANGE_FREE));
	CHECK(space_alloc(sp, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY, 64 * KIB, &v, &c) == 0 &&
	      c == a);

	/* A free in a txg that has not been synced is not released by a durable call beyond the
	 * last sync (clamped). */
	CHECK(space_free(sp, 6, 0, b, 64 * KIB) == 0);
	space_txg_durable(sp, 6);
	CHECK(range_is(sp, 0, b, 64 * KIB, SPACE_RANGE_FREEING));
	CHECK(space_free(sp, 6, 0, a, 64 * KIB) == 0);
	/* full to the last sector: even the sync has no room */
	CHECK(ts_sync(ts, 6, &root) == -ENOSPC);
	CHECK(space_is_dirty(sp));
	store_close(ts);
}

static void test_reserve(void)
{
	struct space_geometry g;
	small_geom(&g, 1);
	g.sg_reserve_min_bytes = 1 * MIB; /* 256 sectors; 1/32 of 4106 sectors would be only 128 */
	struct tstore *ts = store_open(&g);
	struct space *sp = ts->sp;
	struct space_stats st;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &st) == 0 && st.st_reserve_bytes == 1 * MIB);
	struct text blocks[1100];
	size_t nblocks = 0;
	for (;;) {
		uint32_t v;
		uint64_t off;
		int rc = space_alloc(sp, SPACE_CLASS_NORMAL, 0, 16 * KIB, &v, &off);
		if (rc != 0) {
			CHECK(rc == -ENOSPC);
			break;
		}
		VERIFY(nblocks < SH_ARRAY_SIZE(blocks));
		blocks[nblocks++] = (struct text){v, off, 16 * KIB};
	}
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &st) == 0);
	CHECKF(st.st_free_bytes >= 1 * MIB && st.st_free_bytes < 1 * MIB + 16 * KIB, "free %llu",
	       (unsigned long long)st.st_free_bytes);
	uint32_t v;
	uint64_t off;
	int singles = 0;
	while (space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == 0)
		singles++;
	CHECK(singles < 4);
	/* to the sector */
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &st) == 0 && st.st_free_bytes == 1 * MIB);
	/* The reserve serves RESERVED: half of it now. */
	for (int i = 0; i < 32; i++)
		CHECK(space_alloc(sp, SPACE_CLASS_RESERVED, 0, 16 * KIB, &v, &off) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == -ENOSPC);

	/* Remove "files": the sync of their txg runs on the reserve; their space counts after it is
	 * durable, not before. */
	for (size_t i = 0; i < 100; i++)
		CHECK(space_free(sp, 1, 0, blocks[i].off, blocks[i].bytes) == 0);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == -ENOSPC);
	space_txg_durable(sp, 1);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == 0);

	/* RESERVED runs the pool dry: then even a sync has no room, and says so without harm. */
	int n = 0;
	while (space_alloc(sp, SPACE_CLASS_RESERVED, 0, SEC, &v, &off) == 0)
		n++;
	CHECK(n > 0);
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &st) == 0 && st.st_free_bytes == 0);
	CHECK(space_free(sp, 2, 0, blocks[200].off, blocks[200].bytes) == 0);
	CHECK(space_is_dirty(sp));
	CHECK(ts_sync(ts, 2, &root) == -ENOSPC);
	CHECK(space_is_dirty(sp));
	store_close(ts);
}

/* Random allocations and frees (txg) on sp; returns the live extents in out. */
static size_t random_ops(struct space *sp, uint64_t txg, struct text *live, size_t nlive,
                         size_t cap, int allocs, int frees)
{
	for (int i = 0; i < allocs && nlive < cap; i++) {
		uint64_t bytes = (1 + rnd_below(rnd_below(4) == 0 ? 64 : 4)) * SEC;
		uint32_t v, hint = rnd_below(3) == 0 ? (uint32_t)rnd_below(2) : SPACE_VDEV_ANY;
		uint64_t off;
		if (space_alloc(sp, SPACE_CLASS_NORMAL, hint, bytes, &v, &off) == 0)
			live[nlive++] = (struct text){v, off, bytes};
	}
	for (int i = 0; i < frees && nlive > 0; i++) {
		size_t k = rnd_below(nlive);
		/* sometimes only a part of a block: the bitmap does not know extents */
		struct text e = live[k];
		if (e.bytes > SEC && rnd_below(4) == 0) {
			VERIFY(space_free(sp, txg, e.vdev, e.off, SEC) == 0);
			live[k].off += SEC;
			live[k].bytes -= SEC;
			continue;
		}
		VERIFY(space_free(sp, txg, e.vdev, e.off, e.bytes) == 0);
		live[k] = live[--nlive];
	}
	return nlive;
}

static void test_sync_reopen_exact(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 2);
	struct space *sp = ts->sp;
	static struct text live[4000];
	/* a range in the very last sectors (the short last chunk and metaslab) */
	CHECK(space_claim(sp, 1, sector_off(&g, 1, vdev_sectors(&g, 1) - 3), 3 * SEC) == 0);
	live[0] = (struct text){1, sector_off(&g, 1, vdev_sectors(&g, 1) - 3), 3 * SEC};
	size_t nlive = random_ops(sp, 1, live, 1, SH_ARRAY_SIZE(live), 600, 200);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	space_txg_durable(sp, 1);
	nlive = random_ops(sp, 2, live, nlive, SH_ARRAY_SIZE(live), 300, 300);
	CHECK(ts_sync(ts, 2, &root) == 0);
	CHECK(!space_is_dirty(sp));
	CHECK(root.bp_level == SPACE_LEVEL_ROOT);

	/* Expected after reopening txg 2's root: the live extents and the allocator's blocks. */
	struct tmap expect, now;
	tmap_expect_live(&expect, &g, live, nlive, ts);
	tmap_init(&now, &g);
	/* In memory, txg 2's frees are FREEING; everything else agrees with expect. */
	tmap_from_space(&now, &g, sp);
	uint64_t bad = 0;
	for (uint32_t v = 0; v < 2; v++)
		for (uint64_t s = 0; s < expect.n[v]; s++) {
			uint8_t st = now.bit[v][s];
			bool ok = expect.bit[v][s]
			              ? st == SPACE_RANGE_ALLOCATED
			              : (st == SPACE_RANGE_FREE || st == SPACE_RANGE_FREEING);
			bad += ok ? 0 : 1;
		}
	CHECKF(bad == 0, "%llu sectors differ in memory", (unsigned long long)bad);

	struct space *re;
	re = reopen(&g, &root, ts);
	CHECK(compare_alloc(&g, re, &expect, "reopened") == 0);
	struct space_stats a, b;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &a) == 0 && space_stats(re, SPACE_VDEV_ANY, &b) == 0);
	CHECK(b.st_allocated_bytes == a.st_allocated_bytes && b.st_freeing_bytes == 0);
	CHECK(b.st_free_bytes == a.st_free_bytes + a.st_freeing_bytes);

	/* Allocating everything free in the reopened allocator returns exactly the complement. */
	uint64_t expected_free = 0, got = 0, wrong = 0;
	for (uint32_t v = 0; v < 2; v++)
		for (uint64_t s = 0; s < expect.n[v]; s++)
			expected_free += expect.bit[v][s] ? 0 : 1;
	for (;;) {
		uint32_t v;
		uint64_t off;
		if (space_alloc(re, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY, SEC, &v, &off) != 0)
			break;
		uint64_t s = (off - VSTART) / SEC;
		if (expect.bit[v][s] != 0)
			wrong++;
		expect.bit[v][s] = 2; /* handed out now: a second time would count as wrong */
		got++;
	}
	CHECKF(got == expected_free && wrong == 0, "got %llu of %llu free sectors, %llu wrong",
	       (unsigned long long)got, (unsigned long long)expected_free,
	       (unsigned long long)wrong);
	space_close(re);
	tmap_fini(&expect);
	tmap_fini(&now);

	/* The real default geometry (4 KiB chunks, 1 GiB metaslabs) round-trips too. */
	struct space_geometry dg;
	space_geometry_init(&dg);
	dg.sg_nvdevs = 1;
	dg.sg_vdevs[0] = (struct space_vdev_geom){VSTART, 1024 * MIB};
	struct tstore *dts = store_open(&dg);
	struct space *dsp = dts->sp, *dre;
	CHECK(space_stats(dsp, SPACE_VDEV_ANY, &a) == 0 && a.st_reserve_bytes == 32 * MIB);
	uint64_t offs[300];
	for (int i = 0; i < 300; i++) {
		uint32_t v;
		CHECK(space_alloc(dsp, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, 1 * MIB, &v, &offs[i]) ==
		      0);
	}
	for (int i = 0; i < 300; i += 3)
		CHECK(space_free(dsp, 3, 0, offs[i], 1 * MIB) == 0);
	CHECK(ts_sync(dts, 3, &root) == 0);
	struct space_sync_info info;
	space_last_sync(dsp, &info);
	CHECK(info.si_passes == 1 && info.si_chunks_written == 3 && info.si_index_written == 1);
	dre = reopen(&dg, &root, dts);
	enum space_range_state st;
	for (int i = 0; i < 300; i++) {
		CHECK(space_query(dre, 0, offs[i], 1 * MIB, &st) == 0);
		CHECK(st == (i % 3 == 0 ? SPACE_RANGE_FREE : SPACE_RANGE_ALLOCATED));
	}
	CHECK(space_stats(dre, SPACE_VDEV_ANY, &b) == 0);
	CHECK(b.st_allocated_bytes == 200 * MIB + (uint64_t)dts->nown * SEC);
	space_close(dre);
	store_close(dts);
	store_close(ts);
}

static void test_sync_converges(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 2);
	struct space *sp = ts->sp;
	uint32_t chunk_sectors = (g.sg_chunk_bytes - SPACE_CHUNK_HEADER_BYTES) * 8, nchunks = 0;
	/* one allocated sector in every chunk: every chunk dirty */
	for (uint32_t v = 0; v < 2; v++)
		for (uint64_t s = 0; s < vdev_sectors(&g, v); s += chunk_sectors, nchunks++)
			CHECK(space_claim(sp, v, sector_off(&g, v, s), SEC) == 0);
	uint32_t nindex = (nchunks + g.sg_index_chunks - 1) / g.sg_index_chunks;
	struct blk_ptr r1, r2, r3;
	CHECK(ts_sync(ts, 1, &r1) == 0);
	struct space_sync_info info;
	space_last_sync(sp, &info);
	CHECKF(info.si_passes == 1, "passes %u", info.si_passes);
	CHECK(info.si_chunks_written == nchunks && info.si_index_written == nindex &&
	      info.si_root_written == 1);
	CHECK(ts->writes == (uint64_t)nchunks + nindex + 1 && ts->frees == 0);
	CHECK(info.si_txg == 1 && info.si_bytes_written > 0);
	/* the allocator's own blocks are not the pool's to free or claim */
	CHECK(space_free(sp, 2, r1.bp_vdev, r1.bp_offset, r1.bp_asize) == -EINVAL);
	CHECK(space_free(sp, 2, ts->own[0].vdev, ts->own[0].off, ts->own[0].bytes) == -EINVAL);
	CHECK(space_claim(sp, r1.bp_vdev, r1.bp_offset, r1.bp_asize) == -EEXIST);
	CHECK(!space_is_dirty(sp));

	/* Nothing changed: nothing written, same root. */
	CHECK(ts_sync(ts, 2, &r2) == 0);
	space_last_sync(sp, &info);
	CHECK(info.si_passes == 0 && info.si_chunks_written == 0 && info.si_root_written == 0);
	CHECK(memcmp(&r1, &r2, sizeof(r1)) == 0);

	/* Free them all: every chunk becomes a hole, so do the index blocks; only the root is left.
	 * The replaced blocks are named to ss_free and are FREEING until txg 3 is durable. */
	for (uint32_t v = 0; v < 2; v++)
		for (uint64_t s = 0; s < vdev_sectors(&g, v); s += chunk_sectors)
			CHECK(space_free(sp, 3, v, sector_off(&g, v, s), SEC) == 0);
	uint64_t frees_before = ts->frees;
	CHECK(ts_sync(ts, 3, &r3) == 0);
	space_last_sync(sp, &info);
	CHECK(info.si_passes == 1 && info.si_chunks_holed == nchunks &&
	      info.si_chunks_written == 0);
	CHECK(info.si_index_written == 0 && info.si_root_written == 1);
	CHECK(ts->frees - frees_before == (uint64_t)nchunks + nindex + 1);
	CHECK(ts->nown == 1 && !own_named_free_missing);
	struct space_stats st;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &st) == 0);
	CHECK(st.st_allocated_bytes == ts->own[0].bytes);
	struct space *re;
	re = reopen(&g, &r3, ts);
	CHECK(space_stats(re, SPACE_VDEV_ANY, &st) == 0 &&
	      st.st_allocated_bytes == ts->own[0].bytes);
	space_close(re);
	/* r1's blocks are FREEING, not reused: r1 still opens (a crash before txg 3 is durable). */
	re = reopen(&g, &r1, ts);
	space_close(re);
	space_txg_durable(sp, 3);

	/* A callback that allocates one extra sector (beyond its block) while writing the root,
	 * after every chunk of the pass, costs one more pass, and the extra sector is in the state
	 * like any allocation. */
	CHECK(space_claim(sp, 0, sector_off(&g, 0, 700), SEC) == 0);
	ts->strays = 1;
	struct blk_ptr r4;
	CHECK(ts_sync(ts, 4, &r4) == 0);
	space_last_sync(sp, &info);
	CHECKF(info.si_passes == 2, "passes %u", info.si_passes);
	CHECK(ts->nstray == 1 && info.si_root_written == 2 && info.si_chunks_written >= 2);
	re = reopen(&g, &r4, ts);
	CHECK(range_is(re, ts->stray[0].vdev, ts->stray[0].off, SEC, SPACE_RANGE_ALLOCATED));
	CHECK(range_is(re, 0, sector_off(&g, 0, 700), SEC, SPACE_RANGE_ALLOCATED));
	space_close(re);

	/* Invalid txgs. */
	CHECK(ts_sync(ts, 3, &r4) == -EINVAL); /* before the last sync */
	space_txg_durable(sp, 4);
	CHECK(ts_sync(ts, 4, &r4) == -EINVAL); /* already durable */
	struct space_store bad = {0};
	CHECK(space_sync(sp, 5, &bad, &r4) == -EINVAL);
	store_close(ts);
}

/* A live data block of the crash test, with the stamp written at its start. */
struct cblock {
	uint32_t vdev;
	uint64_t off, bytes, stamp;
	uint64_t alloc_txg; /* allocated while this txg was open */
	uint64_t freed_txg; /* 0 = live */
};

struct check_arg {
	const struct cblock *blocks;
	size_t n;
	uint64_t txg; /* mark the blocks live at this txg */
};

static int visit_live(void *arg, struct space *sp)
{
	const struct check_arg *ca = arg;
	for (size_t i = 0; i < ca->n; i++) {
		const struct cblock *b = &ca->blocks[i];
		if (b->alloc_txg <= ca->txg && (b->freed_txg == 0 || b->freed_txg > ca->txg))
			VERIFY(space_check_mark(sp, b->vdev, b->off, b->bytes) == 0);
	}
	return 0;
}

/* Reopens txg's root (a crash that falls back to txg) and checks it against the sectors expected,
 * the checker (blocks live at txg plus the allocator's own: nothing leaked, nothing missing), and
 * the stamps of the blocks live at txg on disk. Returns the number of problems. */
static uint64_t crash_check(const struct space_geometry *g, struct tstore *ts,
                            const struct blk_ptr *root, const struct tmap *expect,
                            const struct cblock *blocks, size_t nblocks, uint64_t txg)
{
	uint64_t problems = 0;
	struct space *re;
	int rc = space_open(g, root, ts_load, ts, &re);
	if (rc != 0) {
		printf("#   opening txg %llu's root: %d\n", (unsigned long long)txg, rc);
		return 1;
	}
	problems += compare_alloc(g, re, expect, "after a crash");
	struct check_arg ca = {blocks, nblocks, txg};
	struct space_check_report rep;
	VERIFY(space_check(re, visit_live, &ca, &rep) == 0);
	if (rep.cr_leaked_bytes || rep.cr_double_refs || rep.cr_unalloc_refs || rep.cr_bad_refs ||
	    rep.cr_internal_errors) {
		problems++;
		printf("#   check of txg %llu: %s\n", (unsigned long long)txg, rep.cr_first);
	}
	space_close(re);
	for (size_t i = 0; i < nblocks; i++) {
		const struct cblock *b = &blocks[i];
		if (b->alloc_txg > txg || (b->freed_txg != 0 && b->freed_txg <= txg))
			continue;
		uint64_t got = 0;
		disk_read(&ts->disk[b->vdev], b->off, &got, sizeof(got));
		if (got != b->stamp && problems++ < 5)
			printf("#   txg %llu: the block at vdev %u offset %llu was overwritten\n",
			       (unsigned long long)txg, b->vdev, (unsigned long long)b->off);
	}
	return problems;
}

/* The pool's pipeline: txg t is open (allocating, freeing) while txg t - 1 has been synced but its
 * uberblock is not yet durable; then t - 1 becomes durable and t syncs. A crash at any point falls
 * back to the newest durable txg, whose state must be intact: checked after t's open phase (crash
 * before t - 1 is durable: import t - 2) and after t's sync (crash before t is durable: import
 * t - 1). Vdevs are small and the churn high, so space is reused all the time. */
static void test_crash_consistency(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 2);
	struct space *sp = ts->sp;
	static struct cblock blocks[8000];
	size_t nblocks = 0;
	uint64_t next_stamp = 1;
	struct tmap snap[3]; /* the expected state of txg t, by t % 3 */
	struct blk_ptr roots[3];
	for (int i = 0; i < 3; i++)
		tmap_init(&snap[i], &g);
	uint64_t problems = 0, checks = 0, reused = 0;
	struct tmap ever;
	tmap_init(&ever, &g); /* sectors ever given to a data block, to see that space is reused */
	const uint64_t last_txg = 60;
	for (uint64_t t = 1; t <= last_txg; t++) {
		/* the open txg: allocations (stamped on disk) and frees */
		int nalloc = 10 + (int)rnd_below(60), nfree = (int)rnd_below(70);
		for (int i = 0; i < nalloc && nblocks < SH_ARRAY_SIZE(blocks); i++) {
			uint64_t bytes = (1 + rnd_below(rnd_below(3) == 0 ? 32 : 3)) * SEC, off;
			uint32_t v;
			if (space_alloc(sp, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, bytes, &v, &off) !=
			    0)
				continue;
			struct cblock *b = &blocks[nblocks++];
			*b = (struct cblock){v, off, bytes, next_stamp++, t, 0};
			disk_write(&ts->disk[v], off, &b->stamp, sizeof(b->stamp));
			uint64_t s0 = (off - VSTART) / SEC;
			reused += ever.bit[v][s0];
			ever.bit[v][s0] = 1;
		}
		for (int i = 0; i < nfree && nblocks > 0; i++) {
			struct cblock *b = &blocks[rnd_below(nblocks)];
			if (b->freed_txg != 0)
				continue;
			/* now and then freed by the next txg while this one syncs */
			b->freed_txg = rnd_below(8) == 0 ? t + 1 : t;
			CHECK(space_free(sp, b->freed_txg, b->vdev, b->off, b->bytes) == 0);
		}
		/* crash now: t - 1 is synced, not durable; import t - 2 */
		if (t >= 3) {
			problems += crash_check(&g, ts, &roots[(t - 2) % 3], &snap[(t - 2) % 3],
			                        blocks, nblocks, t - 2);
			checks++;
		}
		if (t >= 2) {
			space_txg_durable(sp, t - 1);
			/* forget blocks freed in durable txgs: their space may be reused now */
			size_t keep = 0;
			for (size_t i = 0; i < nblocks; i++)
				if (blocks[i].freed_txg == 0 || blocks[i].freed_txg > t - 1)
					blocks[keep++] = blocks[i];
			nblocks = keep;
		}
		CHECK(ts_sync(ts, t, &roots[t % 3]) == 0);
		/* what txg t's state holds: blocks live at t, and the allocator's own */
		struct tmap *cur = &snap[t % 3];
		for (uint32_t v = 0; v < 2; v++)
			memset(cur->bit[v], 0, cur->n[v]);
		for (size_t i = 0; i < nblocks; i++)
			if (blocks[i].freed_txg == 0 || blocks[i].freed_txg > t)
				tmap_mark(cur, &g, blocks[i].vdev, blocks[i].off, blocks[i].bytes,
				          1);
		tmap_add_own(cur, &g, ts);
		/* crash now: t is synced, not durable; import t - 1 */
		if (t >= 2) {
			problems += crash_check(&g, ts, &roots[(t - 1) % 3], &snap[(t - 1) % 3],
			                        blocks, nblocks, t - 1);
			checks++;
		}
	}
	CHECK(checks == 2 * last_txg - 3);
	CHECKF(problems == 0, "%llu problems", (unsigned long long)problems);
	CHECKF(reused > 200, "only %llu allocations reused space", (unsigned long long)reused);
	/* the live allocator agrees with itself */
	struct check_arg ca = {blocks, nblocks, UINT64_MAX};
	struct space_check_report rep;
	CHECK(space_check(sp, visit_live, &ca, &rep) == 0);
	CHECKF(rep.cr_leaked_bytes == 0 && rep.cr_internal_errors == 0 && rep.cr_unalloc_refs == 0,
	       "%s", rep.cr_first);
	for (int i = 0; i < 3; i++)
		tmap_fini(&snap[i]);
	tmap_fini(&ever);
	store_close(ts);
}

static void test_future_frees(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 1);
	struct space *sp = ts->sp, *re;
	uint32_t v;
	uint64_t a, b;
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 32 * KIB, &v, &a) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 32 * KIB, &v, &b) == 0);
	struct blk_ptr r1, r2, r3;
	CHECK(ts_sync(ts, 1, &r1) == 0);
	space_txg_durable(sp, 1);
	CHECK(space_free(sp, 3, 0, a, 32 * KIB) == 0); /* by txg 3, while txg 2 syncs */
	CHECK(space_free(sp, 2, 0, b, 32 * KIB) == 0);
	CHECK(ts_sync(ts, 2, &r2) == 0);
	CHECK(space_is_dirty(sp)); /* a's chunk waits for txg 3 */
	re = reopen(&g, &r2, ts);
	CHECK(range_is(re, 0, a, 32 * KIB, SPACE_RANGE_ALLOCATED));
	CHECK(range_is(re, 0, b, 32 * KIB, SPACE_RANGE_FREE));
	space_close(re);
	space_txg_durable(sp, 2);
	CHECK(range_is(sp, 0, a, 32 * KIB, SPACE_RANGE_FREEING));
	CHECK(range_is(sp, 0, b, 32 * KIB, SPACE_RANGE_FREE));
	CHECK(ts_sync(ts, 3, &r3) == 0);
	CHECK(!space_is_dirty(sp));
	re = reopen(&g, &r3, ts);
	CHECK(range_is(re, 0, a, 32 * KIB, SPACE_RANGE_FREE));
	space_close(re);
	space_txg_durable(sp, 3);
	CHECK(range_is(sp, 0, a, 32 * KIB, SPACE_RANGE_FREE));
	store_close(ts);
}

static void test_claim(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 1);
	struct space *sp = ts->sp, *re;
	uint32_t v;
	uint64_t a;
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 32 * KIB, &v, &a) == 0);
	CHECK(space_claim(sp, 0, a, 32 * KIB) == -EEXIST);
	CHECK(space_claim(sp, 0, a + 8 * KIB, SEC) == -EEXIST);
	CHECK(space_claim(sp, 0, a + 28 * KIB, 16 * KIB) == -EEXIST); /* half allocated */
	CHECK(range_is(sp, 0, a + 32 * KIB, 12 * KIB, SPACE_RANGE_FREE));
	uint64_t c = VSTART + 10 * MIB;
	CHECK(space_claim(sp, 0, c, 64 * KIB) == 0);
	CHECK(range_is(sp, 0, c, 64 * KIB, SPACE_RANGE_ALLOCATED));
	CHECK(space_claim(sp, 0, c + 60 * KIB, 8 * KIB) == -EEXIST);
	CHECK(space_free(sp, 1, 0, a, 32 * KIB) == 0);
	CHECK(space_claim(sp, 0, a, SEC) == -EEXIST); /* being freed */
	CHECK(space_claim(sp, 0, c + 1, SEC) == -EINVAL);
	CHECK(space_claim(sp, 3, c, SEC) == -EINVAL);
	CHECK(space_claim(sp, 0, VSTART + 17 * MIB, SEC) == -EINVAL);
	/* Claims ignore the reserve: fill up to it, then claim inside it. */
	uint64_t off;
	while (space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == 0)
		;
	uint64_t inside = 0;
	for (uint64_t s = 0; s < vdev_sectors(&g, 0) && inside == 0; s++)
		if (range_is(sp, 0, sector_off(&g, 0, s), SEC, SPACE_RANGE_FREE))
			inside = sector_off(&g, 0, s);
	CHECK(inside != 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == -ENOSPC);
	CHECK(space_claim(sp, 0, inside, SEC) == 0);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	re = reopen(&g, &root, ts);
	CHECK(range_is(re, 0, c, 64 * KIB, SPACE_RANGE_ALLOCATED));
	CHECK(range_is(re, 0, a, 32 * KIB, SPACE_RANGE_FREE));
	CHECK(range_is(re, 0, inside, SEC, SPACE_RANGE_ALLOCATED));
	space_close(re);
	store_close(ts);
}

/* ---- hostile roots and blocks ---- */

struct located {
	struct blk_ptr root;
	struct text index[64];
	size_t nindex;
	struct text chunk[64];
	uint32_t chunk_no[64]; /* pool-wide chunk number */
	size_t nchunk;
};

/* The block an on-disk block pointer names: offset at 0, vdev at 8, lsize at 20 (a hole: 0). */
static struct text bp_text(const uint8_t *bp)
{
	uint64_t off;
	uint32_t vdev, lsize;
	memcpy(&off, bp, 8);
	memcpy(&vdev, bp + 8, 4);
	memcpy(&lsize, bp + 20, 4);
	return (struct text){vdev, off, lsize};
}

/* Finds the blocks of a state by reading its root and index blocks as the format tables say. */
static void locate(struct tstore *ts, const struct blk_ptr *root, uint32_t nvdevs,
                   struct located *loc)
{
	memset(loc, 0, sizeof(*loc));
	loc->root = *root;
	uint8_t buf[16384];
	disk_read(&ts->disk[root->bp_vdev], root->bp_offset, buf, root->bp_lsize);
	uint32_t nindex, k;
	memcpy(&nindex, buf + 40, 4);
	memcpy(&k, buf + 28, 4);
	for (uint32_t i = 0; i < nindex; i++) {
		struct text ix = bp_text(buf + 64 + 32 * nvdevs + 64 * i);
		if (ix.bytes == 0)
			continue;
		loc->index[loc->nindex++] = ix;
		uint8_t ibuf[16384];
		uint32_t entries;
		disk_read(&ts->disk[ix.vdev], ix.off, ibuf, ix.bytes);
		memcpy(&entries, ibuf + 16, 4);
		for (uint32_t e = 0; e < entries; e++) {
			struct text ck = bp_text(ibuf + 64 + 64 * e);
			if (ck.bytes == 0)
				continue;
			loc->chunk_no[loc->nchunk] = i * k + e;
			loc->chunk[loc->nchunk++] = ck;
		}
	}
}

static int open_rc(const struct space_geometry *g, const struct blk_ptr *root, struct tstore *ts)
{
	struct space *re = NULL;
	int rc = space_open(g, root, ts_load, ts, &re);
	if (rc == 0)
		space_close(re);
	return rc;
}

/* A pool that grows (a vdev added: pool_vdev_add): a state written for the first vdevs opens
 * with the larger geometry, the new vdev all free; the next sync writes the root again and the
 * index block that maps more chunks now (here the third, 1 chunk before and 4 after), and that
 * state reopens exactly; it does not open with the smaller geometry. */
static void test_grow(void)
{
	struct space_geometry g1, g2;
	small_geom(&g1, 1);
	small_geom(&g2, 2);
	struct tstore *ts = ts_create(&g2); /* disks for both vdevs */
	VERIFY(space_create(&g1, &ts->sp) == 0);
	static struct text live[2000];
	/* the last sectors: vdev 0's last chunk, alone in the third index block, is not a hole */
	uint64_t last = sector_off(&g1, 0, vdev_sectors(&g1, 0) - 3);
	CHECK(space_claim(ts->sp, 0, last, 3 * SEC) == 0);
	live[0] = (struct text){0, last, 3 * SEC};
	size_t nlive = random_ops(ts->sp, 1, live, 1, SH_ARRAY_SIZE(live), 300, 100);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	space_txg_durable(ts->sp, 1);
	space_close(ts->sp);
	ts->sp = reopen(&g2, &root, ts);
	struct tmap expect;
	tmap_expect_live(&expect, &g2, live, nlive, ts);
	CHECK(compare_alloc(&g2, ts->sp, &expect, "grown") == 0);
	tmap_fini(&expect);
	/* a sync with nothing else changed: the root and that index block */
	CHECK(space_is_dirty(ts->sp));
	CHECK(ts_sync(ts, 2, &root) == 0);
	struct space_sync_info info;
	space_last_sync(ts->sp, &info);
	CHECKF(info.si_index_written == 1 && info.si_chunks_written == 0, "index %u chunks %u root %u", info.si_index_written, info.si_chunks_written, info.si_root_written);
	space_txg_durable(ts->sp, 2);
	struct space *re = reopen(&g2, &root, ts);
	tmap_expect_live(&expect, &g2, live, nlive, ts);
	CHECK(compare_alloc(&g2, re, &expect, "grown, synced") == 0);
	tmap_fini(&expect);
	space_close(re);
	/* the new vdev takes allocations */
	uint32_t v = 0;
	uint64_t off = 0;
	CHECK(space_alloc(ts->sp, SPACE_CLASS_NORMAL, 1, 8 * SEC, &v, &off) == 0 && v == 1);
	live[nlive++] = (struct text){v, off, 8 * SEC};
	nlive = random_ops(ts->sp, 3, live, nlive, SH_ARRAY_SIZE(live), 300, 100);
	CHECK(ts_sync(ts, 3, &root) == 0);
	CHECK(!space_is_dirty(ts->sp));
	space_txg_durable(ts->sp, 3);
	re = reopen(&g2, &root, ts);
	tmap_expect_live(&expect, &g2, live, nlive, ts);
	CHECK(compare_alloc(&g2, re, &expect, "reopened after growing") == 0);
	tmap_fini(&expect);
	space_close(re);
	CHECK(open_rc(&g1, &root, ts) == -EIO);
	store_close(ts);
}

/* Changes bytes [at, at + len) of a block on disk to val's bytes, opens, puts the bytes back. */
static int open_with_patch(const struct space_geometry *g, const struct blk_ptr *root,
                           struct tstore *ts, const struct text *blk, uint64_t at, const void *val,
                           size_t len)
{
	uint8_t save[64];
	VERIFY(len <= sizeof(save));
	disk_read(&ts->disk[blk->vdev], blk->off + at, save, len);
	disk_write(&ts->disk[blk->vdev], blk->off + at, val, len);
	int rc = open_rc(g, root, ts);
	disk_write(&ts->disk[blk->vdev], blk->off + at, save, len);
	return rc;
}

/* One field of an on-disk block made nonsense: its fp_bytes little-endian bytes at fp_at set to,
 * increased by or xor-ed with fp_value. */
enum patch_op { PATCH_SET, PATCH_ADD, PATCH_XOR };

struct field_patch {
	const char *fp_what;
	uint64_t fp_at;
	unsigned fp_bytes; /* 1, 4 or 8 */
	enum patch_op fp_op;
	uint64_t fp_value;
};

/* The first index block pointer in the root, after the header and two vdevs' entries. */
#define ROOT_INDEX_BP (64 + 32 * 2)

/* Fields of the root block (two vdevs), of an index block and of a chunk block, at the offsets of
 * the format tables in src/space/space.c. */
static const struct field_patch root_patches[] = {
    {"magic", 0, 1, PATCH_XOR, 0x40},
    {"version", 8, 4, PATCH_SET, 2},
    {"nvdevs", 12, 4, PATCH_SET, 1},
    {"chunk bytes", 24, 4, PATCH_SET, 4096},
    {"txg 0", 32, 8, PATCH_SET, 0},
    {"nindex", 40, 4, PATCH_SET, 99},
    {"reserved", 44, 4, PATCH_SET, 1},
    {"total", 48, 8, PATCH_ADD, 1},
    {"vdev 0 start", 64, 8, PATCH_SET, VSTART + SEC},
    {"vdev 1 count", 64 + 32 + 16, 8, PATCH_SET, 1},
    {"bp reserved", ROOT_INDEX_BP + 28, 4, PATCH_SET, 1},
    {"bp lsize", ROOT_INDEX_BP + 20, 4, PATCH_SET, 64},
    {"bp vdev", ROOT_INDEX_BP + 8, 4, PATCH_SET, 5},
    {"bp offset", ROOT_INDEX_BP + 0, 8, PATCH_SET, VSTART + 64 * MIB},
    {"bp offset misaligned", ROOT_INDEX_BP + 0, 8, PATCH_SET, VSTART + 100},
    {"bp asize 0", ROOT_INDEX_BP + 12, 4, PATCH_SET, 0},
    {"bp birth 0, not a hole", ROOT_INDEX_BP + 32, 8, PATCH_SET, 0},
};

static const struct field_patch index_patches[] = {
    {"magic", 3, 1, PATCH_SET, 'x'},
    {"version", 8, 4, PATCH_SET, 9},
    {"index number", 12, 4, PATCH_SET, 77},
    {"entries", 16, 4, PATCH_SET, 77},
    {"reserved", 20, 4, PATCH_SET, 1},
    {"first chunk", 32, 8, PATCH_SET, 77},
    {"chunk bp lsize", 64 + 20, 4, PATCH_SET, 100},
    {"chunk bp vdev", 64 + 8, 4, PATCH_SET, 2},
};

static const struct field_patch chunk_patches[] = {
    {"magic", 7, 1, PATCH_SET, 'x'},        {"vdev", 8, 4, PATCH_SET, 9},
    {"chunk number", 12, 4, PATCH_SET, 77}, {"nbits", 16, 4, PATCH_SET, 511},
    {"version", 20, 4, PATCH_SET, 0},       {"count", 24, 8, PATCH_ADD, 1},
    {"bits vs count", 32, 8, PATCH_XOR, 1},
};

/* Opens root with blk's field changed as fp says, then puts the field back. */
static int open_with_field(const struct space_geometry *g, const struct blk_ptr *root,
                           struct tstore *ts, const struct text *blk, const struct field_patch *fp)
{
	uint64_t v = 0; /* the host is little-endian, as the format */
	disk_read(&ts->disk[blk->vdev], blk->off + fp->fp_at, &v, fp->fp_bytes);
	if (fp->fp_op == PATCH_SET)
		v = fp->fp_value;
	else if (fp->fp_op == PATCH_ADD)
		v += fp->fp_value;
	else
		v ^= fp->fp_value;
	return open_with_patch(g, root, ts, blk, fp->fp_at, &v, fp->fp_bytes);
}

/* Each of the n patches of blk (named what) in turn must make the open fail with -EIO. */
static void refuse_patches(const struct space_geometry *g, const struct blk_ptr *root,
                           struct tstore *ts, const struct text *blk, const char *what,
                           const struct field_patch *patches, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = open_with_field(g, root, ts, blk, &patches[i]);
		CHECKF(rc == -EIO, "%s %s: open gave %d", what, patches[i].fp_what, rc);
	}
}

static uint64_t disk_u64(struct tstore *ts, const struct text *blk, uint64_t at)
{
	uint64_t v;
	disk_read(&ts->disk[blk->vdev], blk->off + at, &v, sizeof(v));
	return v;
}

/* Replaces bitmap word `word` of chunk block blk (which maps vdev cvd) by val and raises the
 * chunk's, the vdev's and the pool's counts to match, so that only what the word means can be
 * wrong; opens, undoes everything, returns open's result. */
static int open_with_word(const struct space_geometry *g, const struct blk_ptr *root,
                          struct tstore *ts, const struct text *blk, uint32_t cvd, uint64_t word,
                          uint64_t val)
{
	struct text rootblk = {root->bp_vdev, root->bp_offset, root->bp_lsize};
	uint64_t at = 32 + 8 * word, vat = 64 + 32 * (uint64_t)cvd + 16;
	uint64_t w = disk_u64(ts, blk, at), cnt = disk_u64(ts, blk, 24);
	uint64_t vcnt = disk_u64(ts, &rootblk, vat), tot = disk_u64(ts, &rootblk, 48);
	uint64_t delta = (uint64_t)__builtin_popcountll(val) - (uint64_t)__builtin_popcountll(w);
	uint64_t s2 = cnt + delta, s3 = vcnt + delta, s4 = tot + delta;
	disk_write(&ts->disk[blk->vdev], blk->off + at, &val, 8);
	disk_write(&ts->disk[blk->vdev], blk->off + 24, &s2, 8);
	disk_write(&ts->disk[rootblk.vdev], rootblk.off + vat, &s3, 8);
	disk_write(&ts->disk[rootblk.vdev], rootblk.off + 48, &s4, 8);
	int rc = open_rc(g, root, ts);
	disk_write(&ts->disk[blk->vdev], blk->off + at, &w, 8);
	disk_write(&ts->disk[blk->vdev], blk->off + 24, &cnt, 8);
	disk_write(&ts->disk[rootblk.vdev], rootblk.off + vat, &vcnt, 8);
	disk_write(&ts->disk[rootblk.vdev], rootblk.off + 48, &tot, 8);
	return rc;
}

static void test_hostile(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 2);
	struct space *sp = ts->sp;
	static struct text live[2000];
	size_t nlive = random_ops(sp, 1, live, 0, SH_ARRAY_SIZE(live), 400, 50);
	(void)nlive;
	/* the last chunk of vdev 0 (10 sectors, a partial word) holds something */
	CHECK(space_claim(sp, 0, sector_off(&g, 0, vdev_sectors(&g, 0) - 1), SEC) == 0);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	struct located loc;
	locate(ts, &root, 2, &loc);
	CHECK(loc.nindex >= 2 && loc.nchunk >= 4);
	struct text rootblk = {root.bp_vdev, root.bp_offset, root.bp_lsize};
	CHECK(open_rc(&g, &root, ts) == 0);

	/* A bad checksum (the root's magic changed) is the load callback's -EIO. */
	CHECK(open_with_field(&g, &root, ts, &rootblk, &root_patches[0]) == -EIO);
	/* From here on the checksum passes whatever the bytes are: the parser must catch it. */
	ts->verify = false;
	refuse_patches(&g, &root, ts, &rootblk, "root", root_patches, SH_ARRAY_SIZE(root_patches));
	/* the same index pointer twice */
	uint8_t bp0[64];
	disk_read(&ts->disk[rootblk.vdev], rootblk.off + ROOT_INDEX_BP, bp0, 64);
	CHECK(open_with_patch(&g, &root, ts, &rootblk, ROOT_INDEX_BP + 64, bp0, 64) == -EIO);

	/* the root pointer itself */
	struct blk_ptr r = root;
	r.bp_lsize -= 64;
	CHECK(open_rc(&g, &r, ts) == -EIO);
	r = root;
	r.bp_vdev = 7;
	CHECK(open_rc(&g, &r, ts) == -EIO);
	r = root;
	r.bp_offset = VSTART + 40 * MIB;
	CHECK(open_rc(&g, &r, ts) == -EIO);
	r = root;
	r.bp_offset = VSTART; /* another block (or nothing) there */
	CHECK(open_rc(&g, &r, ts) == -EIO);
	struct blk_ptr hole = {0};
	struct space *re;
	CHECK(space_open(&g, &hole, ts_load, ts, &re) == -EINVAL);
	CHECK(space_open(&g, NULL, ts_load, ts, &re) == -EINVAL);

	/* the geometry the caller believes in must be the one on disk */
	static const struct geom_field other_geom[] = {
	    {"metaslab size", GEOM_FIELD(sg_metaslab_bytes), 8 * MIB},
	    {"vdev 1 start", GEOM_FIELD(sg_vdevs[1].svg_start), VSTART + SEC},
	    {"vdev count", GEOM_FIELD(sg_nvdevs), 1},
	};
	for (size_t i = 0; i < SH_ARRAY_SIZE(other_geom); i++) {
		struct space_geometry g2 = geom_with(&g, &other_geom[i]);
		CHECKF(open_rc(&g2, &root, ts) == -EIO, "%s", other_geom[i].gf_what);
	}
	struct space_geometry g2 = g;
	g2.sg_reserve_min_bytes = 2 * MIB; /* policy: not on disk */
	CHECK(open_rc(&g2, &root, ts) == 0);

	/* index blocks */
	refuse_patches(&g, &root, ts, &loc.index[0], "index", index_patches,
	               SH_ARRAY_SIZE(index_patches));
	/* chunk blocks: the first one, and the short last one of vdev 0 */
	refuse_patches(&g, &root, ts, &loc.chunk[0], "chunk", chunk_patches,
	               SH_ARRAY_SIZE(chunk_patches));
	const struct text *last = NULL;
	for (size_t i = 0; i < loc.nchunk; i++)
		if (loc.chunk_no[i] == 8) /* 9 chunks per vdev: number 8 is vdev 0's last */
			last = &loc.chunk[i];
	CHECK(last != NULL && last->bytes == 32 + 8);
	if (last != NULL) {
		uint64_t w = disk_u64(ts, last, 32);
		CHECK((w & (1ull << 9)) != 0 && (w >> 10) == 0);
		/* counts alone: fine */
		CHECK(open_with_word(&g, &root, ts, last, 0, 0, w | (1ull << 8)) == 0);
		/* past the end */
		CHECK(open_with_word(&g, &root, ts, last, 0, 0, w | (1ull << 10)) == -EIO);
	}
	/* an own block inside space a chunk says is allocated: mark the first sector of one of the
	 * allocator's blocks allocated in its (non-hole) chunk, with every count raised to match */
	{
		uint32_t chunk_sectors = (g.sg_chunk_bytes - 32) * 8;
		const struct text *hit = NULL;
		uint64_t in = 0;
		uint32_t cvd = 0;
		for (size_t o = 0; o < ts->nown && hit == NULL; o++) {
			uint64_t s0 = (ts->own[o].off - VSTART) / SEC;
			uint32_t cno = ts->own[o].vdev * 9 + (uint32_t)(s0 / chunk_sectors);
			for (size_t i = 0; i < loc.nchunk; i++)
				if (loc.chunk_no[i] == cno) {
					/* (its block may be on the other vdev) */
					hit = &loc.chunk[i];
					in = s0 % chunk_sectors;
					cvd = ts->own[o].vdev;
				}
		}
		CHECK(hit != NULL);
		if (hit != NULL) {
			uint64_t w = disk_u64(ts, hit, 32 + 8 * (in / 64));
			CHECK((w & (1ull << (in % 64))) == 0);
			CHECK(open_with_word(&g, &root, ts, hit, cvd, in / 64,
			                     w | (1ull << (in % 64))) == -EIO);
		}
	}
	CHECK(open_rc(&g, &root, ts) == 0); /* every patch was undone */

	/* Random damage anywhere in the state: 0 or -EIO, never a crash (ASan watches). */
	int ok = 0, eio = 0, other = 0;
	for (int i = 0; i < 600; i++) {
		size_t pick = rnd_below(1 + loc.nindex + loc.nchunk);
		const struct text *blk = pick == 0            ? &rootblk
		                         : pick <= loc.nindex ? &loc.index[pick - 1]
		                                              : &loc.chunk[pick - 1 - loc.nindex];
		uint64_t at = rnd_below(blk->bytes);
		uint8_t b;
		disk_read(&ts->disk[blk->vdev], blk->off + at, &b, 1);
		uint8_t nb = (uint8_t)(b ^ (1u << rnd_below(8)));
		int rc = open_with_patch(&g, &root, ts, blk, at, &nb, 1);
		if (rc == 0)
			ok++;
		else if (rc == -EIO)
			eio++;
		else
			other++;
	}
	CHECKF(other == 0 && eio > 300, "ok %d eio %d other %d", ok, eio, other);
	ts->verify = true;
	CHECK(open_rc(&g, &root, ts) == 0);
	store_close(ts);
}

/* ---- the checker ---- */

struct mark_list {
	struct text *e;
	size_t n;
	int fail; /* returned by the visitor */
};

static int visit_list(void *arg, struct space *sp)
{
	struct mark_list *ml = arg;
	for (size_t i = 0; i < ml->n; i++)
		VERIFY(space_check_mark(sp, ml->e[i].vdev, ml->e[i].off, ml->e[i].bytes) == 0);
	return ml->fail;
}

static void test_check(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 2);
	struct space *sp = ts->sp;
	static struct text live[1000];
	size_t nlive = random_ops(sp, 1, live, 0, 900, 500, 100);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	space_txg_durable(sp, 1);
	/* some FREEING: neither live nor leaked */
	nlive = random_ops(sp, 2, live, nlive, 900, 50, 50);
	struct space_check_report rep;
	struct mark_list ml = {live, nlive, 0};
	CHECK(space_check(sp, visit_list, &ml, &rep) == 0);
	CHECKF(rep.cr_leaked_bytes == 0 && rep.cr_double_refs == 0 && rep.cr_unalloc_refs == 0 &&
	           rep.cr_bad_refs == 0 && rep.cr_internal_errors == 0 && rep.cr_first[0] == '\0',
	       "clean pool: %s", rep.cr_first);

	/* a leak: allocated, never marked (two separate runs) */
	uint32_t v;
	uint64_t l1, l2, tmp;
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 1, 12 * KIB, &v, &l1) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 1, SEC, &v, &tmp) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 1, 8 * KIB, &v, &l2) == 0);
	live[nlive++] = (struct text){1, tmp, SEC};
	ml.n = nlive;
	CHECK(space_check(sp, visit_list, &ml, &rep) == 0);
	CHECKF(rep.cr_leaked_bytes == 20 * KIB && rep.cr_leaked_extents == 2, "leaked %llu in %llu",
	       (unsigned long long)rep.cr_leaked_bytes, (unsigned long long)rep.cr_leaked_extents);
	CHECK(strstr(rep.cr_first, "leaked") != NULL);
	CHECK(rep.cr_double_refs == 0 && rep.cr_unalloc_refs == 0);
	live[nlive++] = (struct text){1, l1, 12 * KIB};
	live[nlive++] = (struct text){1, l2, 8 * KIB};

	/* a double reference, a reference to free space, one to FREEING space, one outside */
	live[nlive++] = (struct text){1, l1 + 4 * KIB, 4 * KIB};
	uint64_t freeoff = 0;
	for (uint64_t s = 0; s + 1 < vdev_sectors(&g, 0) && freeoff == 0; s++)
		if (range_is(sp, 0, sector_off(&g, 0, s), 8 * KIB, SPACE_RANGE_FREE))
			freeoff = sector_off(&g, 0, s);
	CHECK(freeoff != 0);
	live[nlive++] = (struct text){0, freeoff, 8 * KIB};
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &tmp) == 0);
	CHECK(space_free(sp, 2, v, tmp, SEC) == 0);
	live[nlive++] = (struct text){v, tmp, SEC};
	live[nlive++] = (struct text){0, VSTART + 100 * MIB, SEC};
	ml.n = nlive;
	CHECK(space_check(sp, visit_list, &ml, &rep) == 0);
	CHECK(rep.cr_leaked_bytes == 0);
	CHECK(rep.cr_double_refs == 1 && rep.cr_double_bytes == 4 * KIB);
	CHECK(rep.cr_unalloc_refs == 2 && rep.cr_unalloc_bytes == 12 * KIB);
	CHECK(rep.cr_bad_refs == 1 && rep.cr_internal_errors == 0);
	CHECK(strstr(rep.cr_first, "twice") != NULL);

	/* the visitor's error stops the check; marking outside a check is refused */
	ml.fail = -EIO;
	CHECK(space_check(sp, visit_list, &ml, &rep) == -EIO);
	CHECK(space_check_mark(sp, 0, VSTART, SEC) == -EINVAL);
	store_close(ts);
}

static void test_multi_vdev(void)
{
	struct space_geometry g;
	space_geometry_init(&g);
	g.sg_nvdevs = 2;
	g.sg_vdevs[0] = (struct space_vdev_geom){VSTART, 32 * MIB};
	g.sg_vdevs[1] = (struct space_vdev_geom){VSTART, 16 * MIB};
	g.sg_metaslab_bytes = 4 * MIB;
	g.sg_chunk_bytes = 256;
	g.sg_reserve_min_bytes = 0;
	g.sg_reserve_shift = 0;
	struct space *sp;
	CHECK(space_create(&g, &sp) == 0);
	uint32_t v;
	uint64_t off, prev = 0;
	/* the larger vdev gets everything until both have as much free */
	bool all_first = true, contiguous = true;
	for (int i = 0; i < 256; i++) { /* 16 MiB of 64 KiB */
		CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, 64 * KIB, &v, &off) == 0);
		all_first = all_first && v == 0;
		/* first fit from the cursor: one run per metaslab */
		contiguous = contiguous &&
		             (i == 0 || off == prev + 64 * KIB || (off - VSTART) % (4 * MIB) == 0);
		prev = off;
	}
	CHECK(all_first);
	CHECK(contiguous);
	/* then they alternate, staying within one block of each other */
	int per[2] = {0, 0};
	bool close_enough = true;
	for (int i = 0; i < 128; i++) {
		CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, 64 * KIB, &v, &off) == 0);
		per[v]++;
		struct space_stats a, b;
		CHECK(space_stats(sp, 0, &a) == 0 && space_stats(sp, 1, &b) == 0);
		uint64_t d = a.st_free_bytes > b.st_free_bytes ? a.st_free_bytes - b.st_free_bytes
		                                               : b.st_free_bytes - a.st_free_bytes;
		close_enough = close_enough && d <= 64 * KIB;
	}
	CHECK(per[0] == 64 && per[1] == 64);
	CHECK(close_enough);
	/* a bad hint is no hint */
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 7, SEC, &v, &off) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 0, &v, &off) == -EINVAL);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 100, &v, &off) == -EINVAL);
	/* > a metaslab */
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 8 * MIB, &v, &off) == -EINVAL);
	CHECK(space_alloc(sp, (enum space_class)9, 0, SEC, &v, &off) == -EINVAL);
	struct space_stats all;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &all) == 0 && all.st_total_bytes == 48 * MIB);
	CHECK(space_stats(sp, 2, &all) == -EINVAL);
	space_close(sp);

	/* The hint wins while its vdev has room, then the allocations go elsewhere. */
	g.sg_vdevs[0].svg_bytes = 16 * MIB;
	CHECK(space_create(&g, &sp) == 0);
	int on_hint = 0, elsewhere = 0;
	bool order = true;
	while (space_alloc(sp, SPACE_CLASS_NORMAL, 1, 256 * KIB, &v, &off) == 0) {
		if (v == 1) {
			order = order && elsewhere == 0; /* never elsewhere while vdev 1 had room */
			on_hint++;
		} else {
			elsewhere++;
		}
	}
	CHECK(order);
	CHECK(on_hint == 64 && elsewhere == 64);
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &all) == 0 && all.st_free_bytes == 0);
	space_close(sp);

	/* A metaslab with the most free space but no run long enough is passed over. One vdev of
	 * two metaslabs: every other sector of the first taken (512 free, no two adjacent), the
	 * first 768 sectors of the second (256 free, one run). */
	g.sg_nvdevs = 1;
	g.sg_vdevs[0].svg_bytes = 8 * MIB;
	CHECK(space_create(&g, &sp) == 0);
	for (uint64_t s = 0; s < 1024; s += 2)
		CHECK(space_claim(sp, 0, VSTART + s * SEC, SEC) == 0);
	CHECK(space_claim(sp, 0, VSTART + 4 * MIB, 3 * MIB) == 0);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 8 * KIB, &v, &off) == 0);
	CHECK(off == VSTART + 7 * MIB);
	/* the second is now under a quarter free: a single sector goes to the first again */
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, SEC, &v, &off) == 0);
	CHECK(off < VSTART + 4 * MIB && (off - VSTART) / SEC % 2 == 1);
	/* The first failed to fit 8 KiB, and remembers it; once space returns to it (sectors 100
	 * and 102 freed and durable: 99..103 free), it is searched again and has the run. */
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 8 * KIB, &v, &off) == 0 &&
	      off >= VSTART + 4 * MIB);
	struct tstore *ts = ts_create(&g);
	ts->sp = sp;
	CHECK(space_free(sp, 1, 0, VSTART + 100 * SEC, SEC) == 0);
	CHECK(space_free(sp, 1, 0, VSTART + 102 * SEC, SEC) == 0);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	space_txg_durable(sp, 1);
	CHECK(space_alloc(sp, SPACE_CLASS_NORMAL, 0, 8 * KIB, &v, &off) == 0);
	CHECKF(off >= VSTART + 99 * SEC && off <= VSTART + 102 * SEC, "at sector %llu",
	       (unsigned long long)((off - VSTART) / SEC));
	store_close(ts);
}

static void test_sync_failures(void)
{
	struct space_geometry g;
	small_geom(&g, 2);
	for (int fail_at = 0; fail_at < 12; fail_at++) {
		struct tstore *ts = store_open(&g);
		struct space *sp = ts->sp;
		static struct text live[2000];
		size_t nlive = random_ops(sp, 1, live, 0, SH_ARRAY_SIZE(live), 300, 0);
		struct blk_ptr r1, r2;
		CHECK(ts_sync(ts, 1, &r1) == 0);
		space_txg_durable(sp, 1);
		nlive = random_ops(sp, 2, live, nlive, SH_ARRAY_SIZE(live), 200, 150);
		ts->fail_after = fail_at;
		ts->fail_alloc_first = fail_at % 2 == 1;
		int rc = ts_sync(ts, 2, &r2);
		CHECK(rc == -EIO);
		CHECK(space_is_dirty(sp));
		/* a crash now imports txg 1: its state is intact */
		CHECK(open_rc(&g, &r1, ts) == 0);
		ts->fail_after = -1;
		CHECK(ts_sync(ts, 2, &r2) == 0);
		CHECK(!space_is_dirty(sp));
		struct tmap expect;
		tmap_expect_live(&expect, &g, live, nlive, ts);
		struct space *re;
		re = reopen(&g, &r2, ts);
		CHECKF(compare_alloc(&g, re, &expect, "after a failed sync") == 0, "fail_at %d",
		       fail_at);
		space_close(re);
		CHECK(open_rc(&g, &r1, ts) == 0); /* still: txg 2 is not durable */
		/* nothing leaked in memory either */
		struct mark_list ml = {live, nlive, 0};
		struct space_check_report rep;
		CHECK(space_check(sp, visit_list, &ml, &rep) == 0);
		CHECKF(rep.cr_leaked_bytes == 0 && rep.cr_internal_errors == 0, "fail_at %d: %s",
		       fail_at, rep.cr_first);
		tmap_fini(&expect);
		store_close(ts);
	}

	/* ss_write naming space it did not allocate breaks the contract: -EINVAL. */
	struct tstore *ts = store_open(&g);
	ts->foreign_bp = true;
	struct blk_ptr r;
	CHECK(ts_sync(ts, 1, &r) == -EINVAL);
	ts->foreign_bp = false;
	CHECK(ts_sync(ts, 1, &r) == 0);
	CHECK(open_rc(&g, &r, ts) == 0);
	store_close(ts);
}

static void test_mem_failures(void)
{
	struct space_geometry g;
	struct tstore *ts = small_store_open(&g, 2);
	struct space *sp = ts->sp;
	static struct text live[2000];
	size_t nlive = random_ops(sp, 1, live, 0, SH_ARRAY_SIZE(live), 300, 100);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	space_txg_durable(sp, 1);

	/* open: every allocation failing in turn */
	int opened = 0, nomem = 0, other = 0;
	for (long n = 0; n < 40; n++) {
		struct space *re = NULL;
		mem_fail_after(n);
		int rc = space_open(&g, &root, ts_load, ts, &re);
		mem_fail_after(-1);
		if (rc == 0) {
			opened++;
			space_close(re);
		} else if (rc == -ENOMEM) {
			nomem++;
		} else {
			other++;
		}
	}
	CHECK(nomem > 5 && opened > 0 && other == 0);

	/* free: -ENOMEM changes nothing (the first free of txg 2 needs a new list) */
	struct space_stats a, b;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &a) == 0);
	mem_fail_after(0);
	int rc = space_free(sp, 2, live[0].vdev, live[0].off, live[0].bytes);
	mem_fail_after(-1);
	CHECK(rc == -ENOMEM);
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &b) == 0 && memcmp(&a, &b, sizeof(a)) == 0);
	CHECK(range_is(sp, live[0].vdev, live[0].off, live[0].bytes, SPACE_RANGE_ALLOCATED));
	CHECK(!space_is_dirty(sp));
	space_close(sp);

	/* sync, on a freshly opened allocator (no free list yet: retiring the first replaced block
	 * must allocate): fails cleanly at each allocation, then succeeds with the same result */
	sp = reopen(&g, &root, ts);
	ts->sp = sp;
	nlive = random_ops(sp, 2, live, nlive, SH_ARRAY_SIZE(live), 100, 0);
	int failures = 0;
	for (long n = 0; n < 30; n++) {
		mem_fail_after(n);
		rc = ts_sync(ts, 2, &root);
		mem_fail_after(-1);
		if (rc == 0)
			break;
		CHECK(rc == -ENOMEM);
		failures++;
	}
	CHECK(failures > 0);
	CHECK(ts_sync(ts, 2, &root) == 0);
	struct tmap expect;
	tmap_expect_live(&expect, &g, live, nlive, ts);
	struct space *re;
	re = reopen(&g, &root, ts);
	CHECK(compare_alloc(&g, re, &expect, "after failed allocations") == 0);
	struct mark_list ml = {live, nlive, 0};
	struct space_check_report rep;
	CHECK(space_check(sp, visit_list, &ml, &rep) == 0);
	CHECKF(rep.cr_leaked_bytes == 0 && rep.cr_internal_errors == 0 && rep.cr_unalloc_refs == 0,
	       "%s", rep.cr_first);
	space_close(re);
	tmap_fini(&expect);
	store_close(ts);
}

static void test_geometry(void)
{
	static const struct geom_field invalid[] = {
	    {"no vdevs", GEOM_FIELD(sg_nvdevs), 0},
	    {"too many vdevs", GEOM_FIELD(sg_nvdevs), SPACE_MAX_VDEVS + 1},
	    {"metaslab not a sector multiple", GEOM_FIELD(sg_metaslab_bytes), 1000},
	    {"chunk smaller than its header and a word", GEOM_FIELD(sg_chunk_bytes), 36},
	    {"chunk not a multiple of 8", GEOM_FIELD(sg_chunk_bytes), 100},
	    {"chunk too big", GEOM_FIELD(sg_chunk_bytes), 2 * 1024 * 1024},
	    {"no chunks per index block", GEOM_FIELD(sg_index_chunks), 0},
	    {"too many chunks per index block", GEOM_FIELD(sg_index_chunks), 16384},
	    {"data area misaligned", GEOM_FIELD(sg_vdevs[0].svg_start), VSTART + 1},
	    {"data area under a sector", GEOM_FIELD(sg_vdevs[0].svg_bytes), SEC - 1},
	    {"reserve shift too big", GEOM_FIELD(sg_reserve_shift), 64},
	};
	struct space_geometry g;
	struct space *sp;
	small_geom(&g, 1);
	for (size_t i = 0; i < SH_ARRAY_SIZE(invalid); i++) {
		struct space_geometry b = geom_with(&g, &invalid[i]);
		CHECKF(space_create(&b, &sp) == -EINVAL, "%s", invalid[i].gf_what);
	}
	struct space_geometry b;
	/* a root too big for a block: 40-byte chunks (64 sectors each), one per index block */
	b = g;
	b.sg_chunk_bytes = 40;
	b.sg_index_chunks = 1;
	b.sg_vdevs[0].svg_bytes = 8ull << 30;
	CHECK(space_create(&b, &sp) == -EFBIG);
	/* the smallest chunk works */
	b.sg_vdevs[0].svg_bytes = 2 * MIB;
	struct tstore *ts = store_open(&b);
	sp = ts->sp;
	uint32_t v;
	uint64_t off;
	CHECK(space_alloc(sp, SPACE_CLASS_RESERVED, 0, 100 * KIB, &v, &off) == 0);
	struct blk_ptr root;
	CHECK(ts_sync(ts, 1, &root) == 0);
	CHECK(open_rc(&b, &root, ts) == 0);
	store_close(ts);
	/* reserve: at most half the pool */
	b = g;
	b.sg_reserve_min_bytes = 1ull << 40;
	CHECK(space_create(&b, &sp) == 0);
	struct space_stats st;
	CHECK(space_stats(sp, SPACE_VDEV_ANY, &st) == 0 &&
	      st.st_reserve_bytes == st.st_total_bytes / 2 / SEC * SEC);
	space_close(sp);
	space_close(NULL);
}

int main(void)
{
	/* Many cases feed the allocator nonsense on purpose, and it logs every refusal; the CHECKs
	 * say what matters. SHALE_TEST_LOGS=1 shows the log lines. */
	if (getenv("SHALE_TEST_LOGS") == NULL)
		log_set_level((enum log_level)(LOG_ERROR + 1));
	TAP_RUN(test_deferred_reuse);
	TAP_RUN(test_reserve);
	TAP_RUN(test_sync_reopen_exact);
	TAP_RUN(test_sync_converges);
	TAP_RUN(test_crash_consistency);
	TAP_RUN(test_future_frees);
	TAP_RUN(test_claim);
	TAP_RUN(test_hostile);
	TAP_RUN(test_check);
	TAP_RUN(test_multi_vdev);
	TAP_RUN(test_grow);
	TAP_RUN(test_sync_failures);
	TAP_RUN(test_mem_failures);
	TAP_RUN(test_geometry);
	return tap_finish();
}
