/* test_arc.c: unit tests for src/cache (the ARC block cache): the lookup/fill protocol, waiters on
 * success and failure, eviction bounds with and without holds, scan resistance against plain LRU,
 * ghost hits moving p, run-time shrinking, the reservation, removal while held, zero-copy
 * insertion, the statistics, and a multithreaded stress run. Under ASan the leak check at exit
 * proves that every buffer was freed. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "cache/arc.h"
#include "tap.h"

#define BLK 4096u /* the pool's sector and smallest block */

static struct arc_key key_of(uint64_t n)
{
	/* Three distinct words per key, so equality on all three is exercised. */
	return (struct arc_key){.ak_a = n % 3, .ak_b = n * 4096, .ak_c = n + 1000};
}

/* Each key's block has one content, so concurrent fillers and inserters agree and any hit on the
 * wrong buffer shows. */
static void pattern_write(void *data, uint32_t size, uint64_t n)
{
	uint64_t *w = data;
	for (uint32_t i = 0; i < size / 8; i++)
		w[i] = (n * 0x9e3779b97f4a7c15ull) ^ i;
}

static bool pattern_ok(const void *data, uint32_t size, uint64_t n)
{
	const uint64_t *w = data;
	for (uint32_t i = 0; i < size / 8; i++) {
		if (w[i] != ((n * 0x9e3779b97f4a7c15ull) ^ i))
			return false;
	}
	return true;
}

static bool buf_ok(const struct arc_buf *buf, uint64_t n, uint32_t size)
{
	const struct arc_key k = key_of(n);
	const struct arc_key *bk = arc_buf_key(buf);
	return arc_buf_size(buf) == size && bk->ak_a == k.ak_a && bk->ak_b == k.ak_b &&
	       bk->ak_c == k.ak_c && ((uintptr_t)arc_buf_data(buf) % ARC_BUF_ALIGN) == 0 &&
	       pattern_ok(arc_buf_data(buf), size, n);
}

/* One demand access of key n: a hit is checked and released, a miss filled and released.
 * Returns ARC_HIT, ARC_MISS_FILL or a negative errno; *ok goes false on a wrong buffer. */
static int access_key(struct arc *arc, uint64_t n, uint32_t size, bool *ok)
{
	struct arc_key k = key_of(n);
	struct arc_buf *buf;
	int rc = arc_lookup(arc, &k, size, &buf);
	if (rc == ARC_HIT) {
		if (!buf_ok(buf, n, size))
			*ok = false;
		arc_rele(arc, buf);
	} else if (rc == ARC_MISS_FILL) {
		pattern_write(arc_buf_data(buf), size, n);
		arc_fill_done(arc, buf, 0);
		arc_rele(arc, buf);
	}
	return rc;
}

/* Like access_key, but the buffer stays held and is returned. */
static struct arc_buf *access_hold(struct arc *arc, uint64_t n, uint32_t size)
{
	struct arc_key k = key_of(n);
	struct arc_buf *buf = NULL;
	int rc = arc_lookup(arc, &k, size, &buf);
	if (rc == ARC_MISS_FILL) {
		pattern_write(arc_buf_data(buf), size, n);
		arc_fill_done(arc, buf, 0);
	} else if (rc != ARC_HIT) {
		return NULL;
	}
	return buf;
}

static struct arc_stats stats_of(struct arc *arc)
{
	struct arc_stats s;
	arc_stats(arc, &s);
	return s;
}

/* The bounds every test expects whenever nothing is held (invariants 5-7 of arc.c, summed). */
static bool bounds_ok(struct arc *arc)
{
	struct arc_stats s = stats_of(arc);
	return s.as_size_bytes <= s.as_max_bytes &&
	       s.as_mru_bytes + s.as_mfu_bytes == s.as_size_bytes &&
	       s.as_mru_bytes + s.as_mru_ghost_bytes <= s.as_max_bytes &&
	       s.as_size_bytes + s.as_mru_ghost_bytes + s.as_mfu_ghost_bytes <=
	           2 * s.as_max_bytes &&
	       s.as_p_bytes <= s.as_max_bytes && arc_check(arc) == 0;
}

/* ---- the fill protocol ---- */

static void test_hit_miss_fill(void)
{
	struct arc *arc;
	CHECK(arc_create(1u << 20, &arc) == 0);
	struct arc_key k = key_of(1);
	struct arc_buf *filler = NULL, *b = NULL;

	CHECK(arc_lookup(arc, &k, BLK, &filler) == ARC_MISS_FILL);
	CHECK(filler != NULL && arc_buf_size(filler) == BLK);
	CHECK(((uintptr_t)arc_buf_data(filler) % ARC_BUF_ALIGN) == 0);
	/* Someone else asks while it is being filled: told to wait, given nothing. */
	b = (struct arc_buf *)1;
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_MISS_WAIT);
	CHECK(b == NULL);
	pattern_write(arc_buf_data(filler), BLK, 1);
	arc_fill_done(arc, filler, 0);

	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_HIT);
	CHECK(b == filler && buf_ok(b, 1, BLK));
	arc_rele(arc, b);
	arc_rele(arc, filler);

	/* The same key must always have the same size; size 0 is refused. */
	CHECK(arc_lookup(arc, &k, 2 * BLK, &b) == -EINVAL && b == NULL);
	CHECK(arc_lookup(arc, &k, 0, &b) == -EINVAL && b == NULL);

	/* Extra holds: hold and rele pair up; the buffer stays cached. */
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_HIT);
	arc_hold(b);
	CHECK(stats_of(arc).as_held_bytes == BLK);
	arc_rele(arc, b);
	CHECK(stats_of(arc).as_held_bytes == BLK);
	arc_rele(arc, b);

	struct arc_stats s = stats_of(arc);
	CHECK(s.as_hits == 2 && s.as_misses == 2);
	CHECK(s.as_miss_fills == 1 && s.as_miss_waits == 1);
	CHECK(s.as_mru_hits == 1 && s.as_mfu_hits == 1); /* the second access promoted it */
	CHECK(s.as_held_bytes == 0 && s.as_size_bytes == BLK && s.as_mfu_bytes == BLK);
	CHECK(s.as_buffers == 1 && s.as_ghosts == 0);
	CHECK(arc_check(arc) == 0);

	/* A hit allocates nothing: with the next allocation armed to fail, hits still succeed and
	 * the armed failure is still pending afterwards. */
	mem_fail_after(0);
	bool hits_ok = true;
	for (int i = 0; i < 1000; i++) {
		if (arc_lookup(arc, &k, BLK, &b) != ARC_HIT)
			hits_ok = false;
		else
			arc_rele(arc, b);
	}
	void *probe = mem_alloc(8);
	mem_fail_after(-1);
	CHECK(hits_ok);
	CHECK(probe == NULL);
	mem_free(probe);

	/* Out of memory on a miss (header, then data): an error, the cache unchanged. */
	struct arc_key k2 = key_of(2);
	s = stats_of(arc);
	for (long n = 0; n < 2; n++) {
		mem_fail_after(n);
		CHECK(arc_lookup(arc, &k2, BLK, &b) == -ENOMEM && b == NULL);
		mem_fail_after(-1);
	}
	struct arc_stats s2 = stats_of(arc);
	CHECK(s2.as_misses == s.as_misses && s2.as_buffers == s.as_buffers);
	CHECK(access_key(arc, 2, BLK, &hits_ok) == ARC_MISS_FILL);
	arc_destroy(arc);

	/* Creation fails cleanly at every allocation (ASan checks nothing leaks). */
	int rc = -1;
	for (long n = 0; n < 64 && rc != 0; n++) {
		mem_fail_after(n);
		rc = arc_create_shards(1u << 20, 4, &arc);
		mem_fail_after(-1);
		CHECK(rc == 0 || rc == -ENOMEM);
	}
	CHECK(rc == 0);
	if (rc == 0)
		arc_destroy(arc);
	CHECK(arc_create_shards(1u << 20, 3, &arc) == -EINVAL);
	CHECK(arc_create_shards(1u << 20, 2 * ARC_SHARDS_MAX, &arc) == -EINVAL);
}

/* ---- waiters ---- */

struct test_waiter {
	struct arc_waiter tw_w;
	struct arc *tw_arc;
	uint64_t tw_n;
	int tw_calls;
	int tw_status;
	int tw_order;
	bool tw_buf_ok;
	bool tw_relookup_ok;
	pthread_t tw_thread;
	struct arc_buf *tw_buf;
};
static int waiter_order;

static void waiter_done(struct arc_waiter *w, struct arc_buf *buf, int status)
{
	struct test_waiter *tw = SH_CONTAINER_OF(w, struct test_waiter, tw_w);
	tw->tw_calls++;
	tw->tw_status = status;
	tw->tw_buf = buf;
	tw->tw_order = waiter_order++;
	tw->tw_thread = pthread_self();
	tw->tw_buf_ok = buf && buf_ok(buf, tw->tw_n, BLK);
	if (buf) {
		/* No cache lock is held here: a lookup (same shard) and the stats (every shard)
		 * must not deadlock. */
		struct arc_key k = key_of(tw->tw_n);
		struct arc_buf *again;
		tw->tw_relookup_ok =
		    arc_lookup(tw->tw_arc, &k, BLK, &again) == ARC_HIT && again == buf;
		if (tw->tw_relookup_ok)
			arc_rele(tw->tw_arc, again);
		struct arc_stats s;
		arc_stats(tw->tw_arc, &s);
	}
}

static void test_fill_error_wakes_waiters(void)
{
	struct arc *arc;
	CHECK(arc_create(1u << 20, &arc) == 0);
	struct arc_key k = key_of(7);
	struct arc_buf *filler, *b;
	CHECK(arc_lookup(arc, &k, BLK, &filler) == ARC_MISS_FILL);

	struct test_waiter tw[3];
	memset(tw, 0, sizeof(tw));
	waiter_order = 0;
	for (int i = 0; i < 3; i++) {
		tw[i].tw_w.aw_done = waiter_done;
		tw[i].tw_arc = arc;
		tw[i].tw_n = 7;
		CHECK(arc_lookup_async(arc, &k, BLK, &tw[i].tw_w, &b) == ARC_MISS_WAIT &&
		      b == NULL);
	}
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_MISS_WAIT);
	CHECK(tw[0].tw_calls == 0); /* nothing runs before the fill completes */

	arc_fill_done(arc, filler, -EIO);
	for (int i = 0; i < 3; i++) {
		CHECK(tw[i].tw_calls == 1);
		CHECK(tw[i].tw_status == -EIO && tw[i].tw_buf == NULL);
		CHECK(tw[i].tw_order == i); /* in queueing order */
	}
	/* The filler still holds the failed buffer, now outside the cache. */
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_anon_bytes == BLK && s.as_size_bytes == 0 && s.as_buffers == 0);
	CHECK(s.as_fill_errors == 1 && s.as_held_bytes == 0);
	memset(arc_buf_data(filler), 0xab, BLK);
	arc_rele(arc, filler); /* frees it */
	CHECK(stats_of(arc).as_anon_bytes == 0);

	/* The key is missing afterwards: the next lookup fills it anew. */
	bool ok = true;
	CHECK(access_key(arc, 7, BLK, &ok) == ARC_MISS_FILL);
	CHECK(access_key(arc, 7, BLK, &ok) == ARC_HIT && ok);
	CHECK(arc_check(arc) == 0);
	arc_destroy(arc);
}

struct filler_ctx {
	struct arc *fc_arc;
	struct arc_buf *fc_buf;
	uint64_t fc_n;
};

static void *filler_main(void *arg)
{
	struct filler_ctx *fc = arg;
	pattern_write(arc_buf_data(fc->fc_buf), BLK, fc->fc_n);
	arc_fill_done(fc->fc_arc, fc->fc_buf, 0);
	arc_rele(fc->fc_arc, fc->fc_buf);
	return NULL;
}

static void test_async_waiters_get_buffer(void)
{
	enum { NWAITERS = 8 };
	struct arc *arc;
	CHECK(arc_create(1u << 20, &arc) == 0);
	struct arc_key k = key_of(11);
	struct arc_buf *filler, *b;
	CHECK(arc_lookup(arc, &k, BLK, &filler) == ARC_MISS_FILL);

	struct test_waiter tw[NWAITERS];
	memset(tw, 0, sizeof(tw));
	waiter_order = 0;
	for (int i = 0; i < NWAITERS; i++) {
		tw[i].tw_w.aw_done = waiter_done;
		tw[i].tw_arc = arc;
		tw[i].tw_n = 11;
		CHECK(arc_lookup_async(arc, &k, BLK, &tw[i].tw_w, &b) == ARC_MISS_WAIT);
	}
	/* The filler finishes on another thread; the callbacks run there. */
	struct filler_ctx fc = {.fc_arc = arc, .fc_buf = filler, .fc_n = 11};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, filler_main, &fc) == 0);
	pthread_join(t, NULL);

	for (int i = 0; i < NWAITERS; i++) {
		CHECK(tw[i].tw_calls == 1 && tw[i].tw_status == 0);
		CHECK(tw[i].tw_buf == filler && tw[i].tw_buf_ok);
		CHECK(tw[i].tw_relookup_ok);
		CHECK(tw[i].tw_order == i);
		CHECK(pthread_equal(tw[i].tw_thread, t));
	}
	/* Each waiter holds the buffer (the filler has released its own hold). */
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_held_bytes == BLK);
	CHECK(s.as_miss_waits == NWAITERS && s.as_miss_fills == 1);
	/* Waiting is not an access: the first relookup found the block still in MRU (and promoted
	 * it), the other seven found it in MFU. */
	CHECK(s.as_mru_hits == 1 && s.as_mfu_hits == NWAITERS - 1);
	for (int i = 0; i < NWAITERS; i++) {
		CHECK(pattern_ok(arc_buf_data(tw[i].tw_buf), BLK, 11));
		arc_rele(arc, tw[i].tw_buf);
	}
	CHECK(stats_of(arc).as_held_bytes == 0);

	/* On a cached key the async lookup is a plain hit and queues nothing. */
	struct test_waiter idle = {.tw_w.aw_done = waiter_done, .tw_arc = arc, .tw_n = 11};
	CHECK(arc_lookup_async(arc, &k, BLK, &idle.tw_w, &b) == ARC_HIT && b == filler);
	arc_rele(arc, b);
	/* And on a missing key it hands out the fill. */
	struct arc_key k2 = key_of(12);
	CHECK(arc_lookup_async(arc, &k2, BLK, &idle.tw_w, &b) == ARC_MISS_FILL);
	pattern_write(arc_buf_data(b), BLK, 12);
	arc_fill_done(arc, b, 0);
	arc_rele(arc, b);
	CHECK(idle.tw_calls == 0);
	CHECK(arc_check(arc) == 0);
	arc_destroy(arc);
}

/* A filler that read the block into a buffer of its own hands it over (arc_fill_take): a waiter
 * and later hits see that buffer's bytes, the old data comes back to the filler, and a failed
 * fill after a take frees the new data with the buffer (ASan would see a leak or a double free). */
static void test_fill_take(void)
{
	struct arc *arc;
	CHECK(arc_create(1u << 20, &arc) == 0);
	struct arc_key k = key_of(21);
	struct arc_buf *filler, *b;
	CHECK(arc_lookup(arc, &k, BLK, &filler) == ARC_MISS_FILL);
	struct test_waiter tw = {.tw_w.aw_done = waiter_done, .tw_arc = arc, .tw_n = 21};
	CHECK(arc_lookup_async(arc, &k, BLK, &tw.tw_w, &b) == ARC_MISS_WAIT);
	void *own = mem_aligned_alloc(4096, BLK);
	VERIFY(own != NULL);
	pattern_write(own, BLK, 21);
	void *old = arc_fill_take(filler, own);
	CHECK(old != NULL && old != own && arc_buf_data(filler) == own);
	arc_data_free(old);
	arc_fill_done(arc, filler, 0);
	arc_rele(arc, filler);
	CHECK(tw.tw_calls == 1 && tw.tw_status == 0 && tw.tw_buf == filler && tw.tw_buf_ok);
	arc_rele(arc, tw.tw_buf);
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_HIT && arc_buf_data(b) == own);
	CHECK(pattern_ok(arc_buf_data(b), BLK, 21));
	arc_rele(arc, b);
	struct arc_key k2 = key_of(22);
	CHECK(arc_lookup(arc, &k2, BLK, &filler) == ARC_MISS_FILL);
	void *own2 = mem_aligned_alloc(4096, BLK);
	VERIFY(own2 != NULL);
	arc_data_free(arc_fill_take(filler, own2));
	arc_fill_done(arc, filler, -EIO);
	arc_rele(arc, filler);
	CHECK(arc_lookup(arc, &k2, BLK, &b) == ARC_MISS_FILL);
	arc_fill_done(arc, b, -EIO);
	arc_rele(arc, b);
	CHECK(arc_check(arc) == 0);
	arc_destroy(arc);
}

/* ---- eviction ---- */

static void test_eviction_bounds(void)
{
	/* Uniform blocks: the cache holds exactly max / BLK of them. */
	struct arc *arc;
	CHECK(arc_create(64 * BLK, &arc) == 0);
	bool ok = true, bounded = true;
	for (uint64_t n = 0; n < 1000; n++) {
		if (access_key(arc, n, BLK, &ok) != ARC_MISS_FILL)
			ok = false;
		if (stats_of(arc).as_size_bytes > 64 * BLK)
			bounded = false;
	}
	CHECK(ok && bounded);
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_size_bytes == 64 * BLK && s.as_buffers == 64);
	CHECK(s.as_evictions == 1000 - 64);
	CHECK(bounds_ok(arc));
	/* The most recent 64 are the ones kept. */
	for (uint64_t n = 1000 - 64; n < 1000; n++)
		CHECK(access_key(arc, n, BLK, &ok) == ARC_HIT);
	CHECK(ok);
	arc_destroy(arc);

	/* Mixed sizes, repeats and a growing hash table (256 buckets to start, up to about 800
	 * buffers and ghosts). */
	CHECK(arc_create(4u << 20, &arc) == 0);
	uint64_t x = 88172645463325252ull;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t n = x % 3000;
		uint32_t size = BLK << (n % 4); /* 4, 8, 16 or 32 KiB, always the same for a key */
		int rc = access_key(arc, n, size, &ok);
		if (rc != ARC_HIT && rc != ARC_MISS_FILL)
			ok = false;
		if (i % 1000 == 0 && !bounds_ok(arc))
			bounded = false;
	}
	CHECK(ok && bounded && bounds_ok(arc));
	s = stats_of(arc);
	CHECK(s.as_hits > 0 && s.as_evictions > 0 && s.as_ghosts > 0);
	CHECK(s.as_overflows == 0);
	arc_destroy(arc);
}

static void test_held_never_evicted(void)
{
	struct arc *arc;
	CHECK(arc_create(16 * BLK, &arc) == 0);
	struct arc_buf *held_a[8], *held_b[12];
	for (int i = 0; i < 8; i++)
		held_a[i] = access_hold(arc, 100 + (uint64_t)i, BLK);
	bool ok = true;
	for (uint64_t n = 0; n < 200; n++)
		access_key(arc, n, BLK, &ok);
	CHECK(ok);
	/* Two hundred blocks went through a 16-block cache; the held ones are still there. */
	for (int i = 0; i < 8; i++) {
		CHECK(held_a[i] && buf_ok(held_a[i], 100 + (uint64_t)i, BLK));
		struct arc_key k = key_of(100 + (uint64_t)i);
		struct arc_buf *b;
		CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_HIT && b == held_a[i]);
		arc_rele(arc, b);
	}
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_held_bytes == 8 * BLK && s.as_size_bytes == 16 * BLK && s.as_overflows == 0);

	/* Hold 12 more: the 8 unheld go first, then the last 4 admissions find nothing evictable
	 * and take the cache above its limit, counted as overflows. */
	for (int i = 0; i < 12; i++)
		held_b[i] = access_hold(arc, 200 + (uint64_t)i, BLK);
	s = stats_of(arc);
	CHECK(s.as_overflows == 4);
	CHECK(s.as_size_bytes == 20 * BLK && s.as_held_bytes == 20 * BLK);
	CHECK(arc_check(arc) == 0);
	for (int i = 0; i < 12; i++)
		CHECK(held_b[i] && buf_ok(held_b[i], 200 + (uint64_t)i, BLK));

	/* Released, the excess goes at once. */
	for (int i = 0; i < 8; i++)
		arc_rele(arc, held_a[i]);
	for (int i = 0; i < 12; i++)
		arc_rele(arc, held_b[i]);
	s = stats_of(arc);
	CHECK(s.as_held_bytes == 0 && s.as_size_bytes <= 16 * BLK);
	CHECK(bounds_ok(arc));
	arc_destroy(arc);
}

/* A plain LRU of capacity blocks over the same accesses, for comparison. */
struct lru_sim {
	uint64_t ls_keys[64];
	uint64_t ls_stamp[64];
	unsigned ls_used;
	uint64_t ls_clock;
};

static bool lru_access(struct lru_sim *l, uint64_t n)
{
	l->ls_clock++;
	unsigned oldest = 0;
	for (unsigned i = 0; i < l->ls_used; i++) {
		if (l->ls_keys[i] == n) {
			l->ls_stamp[i] = l->ls_clock;
			return true;
		}
		if (l->ls_stamp[i] < l->ls_stamp[oldest])
			oldest = i;
	}
	unsigned slot = l->ls_used < SH_ARRAY_SIZE(l->ls_keys) ? l->ls_used++ : oldest;
	l->ls_keys[slot] = n;
	l->ls_stamp[slot] = l->ls_clock;
	return false;
}

static void test_scan_resistance(void)
{
	enum { CAP = 64, WSET = 32, SCAN = 4000, SCAN_PER_W = 8 };
	struct arc *arc;
	CHECK(arc_create(CAP * BLK, &arc) == 0);
	struct lru_sim lru = {0};
	bool ok = true;
	/* The working set (keys 0..31, half the cache) is used twice: it is frequent. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t n = 0; n < WSET; n++) {
			access_key(arc, n, BLK, &ok);
			lru_access(&lru, n);
		}
	}
	CHECK(stats_of(arc).as_mfu_bytes == WSET * BLK);
	/* A long one-time scan (keys 1000000...), with the working set still used in between:
	 * one working-set access per 8 scanned blocks, so each working-set key comes back after
	 * 256 scanned blocks, four times the cache. */
	unsigned w_hits_arc = 0, w_hits_lru = 0, w_accesses = 0;
	for (uint64_t i = 0; i < SCAN; i++) {
		access_key(arc, 1000000 + i, BLK, &ok);
		lru_access(&lru, 1000000 + i);
		if (i % SCAN_PER_W == SCAN_PER_W - 1) {
			uint64_t n = w_accesses++ % WSET;
			w_hits_arc += access_key(arc, n, BLK, &ok) == ARC_HIT;
			w_hits_lru += lru_access(&lru, n);
		}
	}
	double rate_arc = (double)w_hits_arc / w_accesses,
	       rate_lru = (double)w_hits_lru / w_accesses;
	printf("# working-set hit rate during the scan: ARC %.3f, LRU %.3f (%u accesses)\n",
	       rate_arc, rate_lru, w_accesses);
	CHECKF(rate_arc >= 0.95, "ARC %.3f", rate_arc);
	CHECKF(rate_lru <= 0.05, "LRU %.3f", rate_lru);
	/* And right after the scan the whole working set is still there. */
	unsigned after = 0;
	for (uint64_t n = 0; n < WSET; n++)
		after += access_key(arc, n, BLK, &ok) == ARC_HIT;
	CHECKF(after == WSET, "%u of %d", after, WSET);
	CHECK(ok && bounds_ok(arc));
	arc_destroy(arc);
}

/* One lookup of key n that must be a ghost hit of the given kind; checks that p moved by exactly
 * the paper's step (in bytes): the ghost's size times max(1, other ghost list / this one). */
static void ghost_hit_and_check_p(struct arc *arc, uint64_t n, bool mru_ghost)
{
	struct arc_stats before = stats_of(arc);
	bool ok = true;
	CHECK(access_key(arc, n, BLK, &ok) == ARC_MISS_FILL);
	struct arc_stats after = stats_of(arc);
	uint64_t b1 = before.as_mru_ghost_bytes, b2 = before.as_mfu_ghost_bytes;
	uint64_t c = before.as_max_bytes, p = before.as_p_bytes, want;
	if (mru_ghost) {
		CHECK(after.as_mru_ghost_hits == before.as_mru_ghost_hits + 1);
		uint64_t delta = BLK * (b2 > b1 ? b2 / b1 : 1);
		want = p + delta > c ? c : p + delta;
		CHECKF(after.as_p_bytes == want && want > p, "p %llu -> %llu, want %llu",
		       (unsigned long long)p, (unsigned long long)after.as_p_bytes,
		       (unsigned long long)want);
	} else {
		CHECK(after.as_mfu_ghost_hits == before.as_mfu_ghost_hits + 1);
		uint64_t delta = BLK * (b1 > b2 ? b1 / b2 : 1);
		want = delta > p ? 0 : p - delta;
		CHECKF(after.as_p_bytes == want && want < p, "p %llu -> %llu, want %llu",
		       (unsigned long long)p, (unsigned long long)after.as_p_bytes,
		       (unsigned long long)want);
	}
	/* A ghost hit brings the block back as frequent. */
	CHECK(after.as_mfu_bytes >= before.as_mfu_bytes);
	CHECK(bounds_ok(arc));
}

static void test_ghost_hits_adapt_p(void)
{
	struct arc *arc;
	CHECK(arc_create(16 * BLK, &arc) == 0);
	bool ok = true;
	/* 8 frequent blocks (keys 100..107, seen twice), then 8 seen once fill the cache. */
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t n = 100; n < 108; n++)
			access_key(arc, n, BLK, &ok);
	for (uint64_t n = 0; n < 8; n++)
		access_key(arc, n, BLK, &ok);
	CHECK(stats_of(arc).as_p_bytes == 0);
	/* Four more once-seen blocks push the oldest once-seen ones (0..3) to the MRU ghost list:
	 * with p = 0, MRU is over its target. */
	for (uint64_t n = 8; n < 12; n++)
		access_key(arc, n, BLK, &ok);
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_mru_ghost_bytes == 4 * BLK && s.as_mfu_ghost_bytes == 0);
	CHECK(s.as_mfu_bytes == 8 * BLK);

	/* Asking again for an evicted once-seen block says MRU was too short: p grows, by one block
	 * per hit while the MRU ghost list is the longer. Each hit evicts the next MRU block into
	 * the MRU ghost list, until MRU is within p and MFU has to give instead. */
	uint64_t n = 0;
	while (stats_of(arc).as_mfu_ghost_bytes == 0 && n < 12)
		ghost_hit_and_check_p(arc, n++, true);
	s = stats_of(arc);
	CHECK(s.as_mfu_ghost_bytes == BLK && s.as_p_bytes > 0);
	/* The least recent frequent block, key 100, is the one that went to the MFU ghost list.
	 * Asking for it says MFU was too short: p shrinks, by the ratio of the ghost lists. */
	ghost_hit_and_check_p(arc, 100, false);
	CHECK(ok);
	arc_destroy(arc);
}

static void test_set_max_shrinks(void)
{
	struct arc *arc;
	CHECK(arc_create(64 * BLK, &arc) == 0);
	bool ok = true;
	for (uint64_t n = 0; n < 32; n++) /* frequent */
		for (int pass = 0; pass < 2; pass++)
			access_key(arc, n, BLK, &ok);
	for (uint64_t n = 1000; n < 1100; n++) /* once each, leaves ghosts */
		access_key(arc, n, BLK, &ok);
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_size_bytes == 64 * BLK && s.as_ghosts > 0);

	arc_set_max(arc, 16 * BLK);
	s = stats_of(arc);
	CHECK(s.as_max_bytes == 16 * BLK && s.as_size_bytes <= 16 * BLK);
	CHECK(bounds_ok(arc)); /* the ghost lists were trimmed to the new c as well */

	/* With holds, shrinking keeps the held buffers and finishes as they are released. */
	arc_set_max(arc, 64 * BLK);
	struct arc_buf *held[20];
	for (int i = 0; i < 20; i++)
		held[i] = access_hold(arc, 2000 + (uint64_t)i, BLK);
	arc_set_max(arc, 8 * BLK);
	s = stats_of(arc);
	CHECK(s.as_size_bytes == 20 * BLK && s.as_held_bytes == 20 * BLK);
	for (int i = 0; i < 20; i++) {
		CHECK(held[i] && buf_ok(held[i], 2000 + (uint64_t)i, BLK));
		arc_rele(arc, held[i]);
	}
	s = stats_of(arc);
	CHECK(s.as_size_bytes <= 8 * BLK && bounds_ok(arc));

	/* A limit of 0 keeps nothing once released. */
	arc_set_max(arc, 0);
	CHECK(stats_of(arc).as_size_bytes == 0);
	CHECK(access_key(arc, 3000, BLK, &ok) == ARC_MISS_FILL);
	CHECK(access_key(arc, 3000, BLK, &ok) == ARC_MISS_FILL);
	s = stats_of(arc);
	CHECK(s.as_size_bytes == 0 && s.as_ghosts == 0 && bounds_ok(arc));
	arc_set_max(arc, 64 * BLK);
	CHECK(access_key(arc, 3000, BLK, &ok) == ARC_MISS_FILL);
	CHECK(access_key(arc, 3000, BLK, &ok) == ARC_HIT);
	CHECK(ok);
	arc_destroy(arc);
}

/* ---- the reservation (memory model of arc.c) ---- */

/* Memory declared outside the cache shrinks what it keeps: cached + reserved stays within c while
 * the reservation is at most c / 2, at least c / 2 stays for cached blocks beyond that, held
 * buffers overflow and go at their release, and a smaller reservation lets the cache grow back. */
static void test_reserved_bounds_cache(void)
{
	struct arc *arc;
	const uint64_t c = 64 * BLK;
	CHECK(arc_create_shards(c, 1, &arc) == 0);
	bool ok = true;
	for (uint64_t n = 0; n < 64; n++)
		access_key(arc, n, BLK, &ok);
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_size_bytes == c && s.as_reserved_bytes == 0 && s.as_target_bytes == c);

	/* Growing the reservation evicts at once. 16 blocks are exactly the 64 KiB quantum. */
	arc_set_reserved(arc, 16 * BLK);
	s = stats_of(arc);
	CHECK(s.as_reserved_bytes == 16 * BLK && s.as_target_bytes == c - 16 * BLK);
	CHECKF(s.as_size_bytes + s.as_reserved_bytes <= c, "size %llu",
	       (unsigned long long)s.as_size_bytes);
	CHECK(s.as_max_bytes == c && bounds_ok(arc));
	/* Admissions respect it: a scan of new keys never takes the cache past the target. */
	for (uint64_t n = 100; n < 300; n++) {
		access_key(arc, n, BLK, &ok);
		s = stats_of(arc);
		if (s.as_size_bytes + s.as_reserved_bytes > c) {
			CHECKF(false, "key %llu: size %llu", (unsigned long long)n,
			       (unsigned long long)s.as_size_bytes);
			break;
		}
	}
	CHECK(bounds_ok(arc));

	/* Rounded up to the quantum: one byte reserves 64 KiB. */
	arc_set_reserved(arc, 1);
	s = stats_of(arc);
	CHECK(s.as_reserved_bytes == ARC_RESERVE_QUANTUM &&
	      s.as_size_bytes <= c - ARC_RESERVE_QUANTUM);

	/* More than c / 2 counts as c / 2: half the cache stays usable. */
	arc_set_reserved(arc, 10 * c);
	s = stats_of(arc);
	CHECK(s.as_target_bytes == c / 2 && s.as_size_bytes <= c / 2);
	for (uint64_t n = 300; n < 400; n++)
		access_key(arc, n, BLK, &ok);
	s = stats_of(arc);
	CHECK(s.as_size_bytes == c / 2 && bounds_ok(arc));
	CHECK(access_key(arc, 399, BLK, &ok) == ARC_HIT); /* what was just loaded stays */

	/* Held buffers cannot be evicted: they overflow the target until released. */
	arc_set_reserved(arc, 32 * BLK);
	struct arc_buf *held[40];
	for (int i = 0; i < 40; i++)
		held[i] = access_hold(arc, 500 + (uint64_t)i, BLK);
	s = stats_of(arc);
	CHECK(s.as_held_bytes == 40 * BLK && s.as_size_bytes == 40 * BLK && s.as_overflows > 0);
	for (int i = 0; i < 40; i++) {
		CHECK(held[i] && buf_ok(held[i], 500 + (uint64_t)i, BLK));
		if (held[i])
			arc_rele(arc, held[i]);
	}
	s = stats_of(arc);
	CHECK(s.as_size_bytes <= 32 * BLK && bounds_ok(arc));

	/* Released, the reservation gives the room back. */
	arc_set_reserved(arc, 0);
	for (uint64_t n = 600; n < 700; n++)
		access_key(arc, n, BLK, &ok);
	s = stats_of(arc);
	CHECK(s.as_size_bytes == c && s.as_target_bytes == c && bounds_ok(arc));
	CHECK(ok);
	arc_destroy(arc);

	/* With shards, each keeps its share; the totals add up to the rounded reservation. */
	CHECK(arc_create_shards(4 * c, 4, &arc) == 0);
	for (uint64_t n = 0; n < 512; n++)
		access_key(arc, n, BLK, &ok);
	arc_set_reserved(arc, 3 * c / 2 + 1);
	s = stats_of(arc);
	uint64_t r = (3 * c / 2 + ARC_RESERVE_QUANTUM) / ARC_RESERVE_QUANTUM * ARC_RESERVE_QUANTUM;
	CHECK(s.as_reserved_bytes == r && s.as_target_bytes == 4 * c - r);
	CHECK(s.as_size_bytes + s.as_reserved_bytes <= 4 * c && bounds_ok(arc));
	CHECK(ok);
	arc_destroy(arc);
}

/* ---- remove and insert ---- */

static void test_remove_while_held(void)
{
	struct arc *arc;
	CHECK(arc_create(1u << 20, &arc) == 0);
	struct arc_key k = key_of(5);
	struct arc_buf *old = access_hold(arc, 5, BLK), *b;
	CHECK(old != NULL);
	arc_hold(old); /* two holds */
	CHECK(arc_remove(arc, &k));
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_anon_bytes == BLK && s.as_size_bytes == 0 && s.as_held_bytes == 0);
	CHECK(s.as_removes == 1 && s.as_buffers == 0);
	/* Gone from the cache, still valid for its holders. */
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_MISS_FILL && b != old);
	pattern_write(arc_buf_data(b), BLK, 5);
	arc_fill_done(arc, b, 0);
	arc_rele(arc, b);
	CHECK(buf_ok(old, 5, BLK));
	arc_rele(arc, old);
	CHECK(buf_ok(old, 5, BLK));
	memset(arc_buf_data(old), 0, BLK); /* the last holder may still write it */
	arc_rele(arc, old);                /* frees it: ASan would report a leak or a later use */
	CHECK(stats_of(arc).as_anon_bytes == 0);
	bool ok = true;
	CHECK(access_key(arc, 5, BLK, &ok) == ARC_HIT && ok); /* the new copy */

	/* Unheld: freed at once. Missing: false. */
	CHECK(arc_remove(arc, &k));
	CHECK(!arc_remove(arc, &k));
	s = stats_of(arc);
	CHECK(s.as_size_bytes == 0 && s.as_anon_bytes == 0 && s.as_removes == 2);

	/* A ghost is dropped too: the next lookup is a plain miss, not a ghost hit. In a 4-block
	 * cache with one frequent block (50), three once-seen blocks fill it and a fourth pushes
	 * the oldest once-seen one (60) to the MRU ghost list. */
	arc_set_max(arc, 4 * BLK);
	access_key(arc, 50, BLK, &ok);
	access_key(arc, 50, BLK, &ok);
	for (uint64_t n = 60; n < 64; n++)
		access_key(arc, n, BLK, &ok);
	s = stats_of(arc);
	CHECK(s.as_ghosts == 1 && s.as_mru_ghost_bytes == BLK);
	struct arc_key k60 = key_of(60);
	CHECK(arc_remove(arc, &k60));
	s = stats_of(arc);
	CHECK(s.as_ghosts == 0 && s.as_mru_ghost_bytes == 0 && s.as_size_bytes == 4 * BLK);
	CHECK(access_key(arc, 60, BLK, &ok) == ARC_MISS_FILL);
	struct arc_stats after = stats_of(arc);
	CHECK(after.as_mru_ghost_hits == 0 && after.as_mfu_ghost_hits == 0);
	CHECK(after.as_p_bytes == 0);
	arc_set_max(arc, 1u << 20);

	/* Removed while being filled: the filler and its waiters complete, nothing is cached. */
	struct arc_key k9 = key_of(9);
	struct arc_buf *filler, *second;
	CHECK(arc_lookup(arc, &k9, BLK, &filler) == ARC_MISS_FILL);
	struct test_waiter tw = {.tw_w.aw_done = waiter_done, .tw_arc = arc, .tw_n = 9};
	CHECK(arc_lookup_async(arc, &k9, BLK, &tw.tw_w, &b) == ARC_MISS_WAIT);
	CHECK(arc_remove(arc, &k9));
	CHECK(arc_lookup(arc, &k9, BLK, &second) == ARC_MISS_FILL && second != filler);
	pattern_write(arc_buf_data(filler), BLK, 9);
	arc_fill_done(arc, filler, 0);
	CHECK(tw.tw_calls == 1 && tw.tw_status == 0 && tw.tw_buf == filler && tw.tw_buf_ok);
	/* Its relookup found the second filler's buffer still filling, not the removed one. */
	CHECK(!tw.tw_relookup_ok);
	arc_rele(arc, filler);
	CHECK(stats_of(arc).as_anon_bytes == BLK); /* the waiter still holds it */
	arc_rele(arc, tw.tw_buf);
	CHECK(stats_of(arc).as_anon_bytes == 0);
	pattern_write(arc_buf_data(second), BLK, 9);
	arc_fill_done(arc, second, 0);
	arc_rele(arc, second);
	CHECK(access_key(arc, 9, BLK, &ok) == ARC_HIT && ok);
	CHECK(arc_check(arc) == 0);
	arc_destroy(arc);
}

static void test_insert_zero_copy(void)
{
	struct arc *arc;
	CHECK(arc_create(1u << 20, &arc) == 0);
	struct arc_key k = key_of(21);
	void *data = arc_data_alloc(BLK);
	CHECK(data != NULL && ((uintptr_t)data % ARC_BUF_ALIGN) == 0);
	pattern_write(data, BLK, 21);
	CHECK(arc_insert(arc, &k, data, BLK, NULL) == 0);
	struct arc_buf *b, *old;
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_HIT);
	CHECK(arc_buf_data(b) == data && buf_ok(b, 21, BLK)); /* the very bytes handed over */
	old = b;
	struct arc_stats s = stats_of(arc);
	CHECK(s.as_inserts == 1 && s.as_hits == 1 && s.as_misses == 0);
	CHECK(s.as_mru_hits == 1); /* an insert is a first access */

	/* Replacing while the old one is held: new lookups see the new data, the holder the old. */
	void *data2 = arc_data_alloc(BLK);
	CHECK(data2 != NULL);
	pattern_write(data2, BLK, 21);
	CHECK(arc_insert(arc, &k, data2, BLK, &b) == 0);
	CHECK(b != old && arc_buf_data(b) == data2);
	arc_rele(arc, b);
	CHECK(arc_lookup(arc, &k, BLK, &b) == ARC_HIT && arc_buf_data(b) == data2);
	arc_rele(arc, b);
	CHECK(buf_ok(old, 21, BLK) && stats_of(arc).as_anon_bytes == BLK);
	arc_rele(arc, old);
	CHECK(stats_of(arc).as_anon_bytes == 0 && stats_of(arc).as_buffers == 1);

	/* While the key is being filled an insert is refused; the data are freed either way. */
	struct arc_key k2 = key_of(22);
	struct arc_buf *filler;
	CHECK(arc_lookup(arc, &k2, BLK, &filler) == ARC_MISS_FILL);
	CHECK(arc_insert(arc, &k2, arc_data_alloc(BLK), BLK, NULL) == -EBUSY);
	pattern_write(arc_buf_data(filler), BLK, 22);
	arc_fill_done(arc, filler, 0);
	arc_rele(arc, filler);
	CHECK(arc_insert(arc, &k2, arc_data_alloc(BLK), 0, NULL) == -EINVAL);
	CHECK(arc_insert(arc, &k2, NULL, BLK, NULL) == -EINVAL);
	void *data3 = arc_data_alloc(BLK);
	CHECK(data3 != NULL);
	mem_fail_after(0); /* the header allocation fails: the data are freed all the same */
	CHECK(arc_insert(arc, &k2, data3, BLK, &b) == -ENOMEM && b == NULL);
	mem_fail_after(-1);
	bool ok = true;
	CHECK(access_key(arc, 22, BLK, &ok) == ARC_HIT && ok); /* the filled copy is untouched */
	/* arc_insert_keep_on_error: the same, except that a refused buffer stays the caller's
	 * (freed here once; freeing it twice or never would show under the sanitizers) */
	void *mine = arc_data_alloc(BLK);
	CHECK(mine != NULL);
	pattern_write(mine, BLK, 23);
	CHECK(arc_insert_keep_on_error(arc, &k2, mine, 0, NULL) == -EINVAL);
	mem_fail_after(0);
	CHECK(arc_insert_keep_on_error(arc, &k2, mine, BLK, &b) == -ENOMEM && b == NULL);
	mem_fail_after(-1);
	CHECK(pattern_ok(mine, BLK, 23));
	struct arc_key k3 = key_of(23);
	CHECK(arc_lookup(arc, &k3, BLK, &filler) == ARC_MISS_FILL);
	CHECK(arc_insert_keep_on_error(arc, &k3, mine, BLK, NULL) == -EBUSY);
	CHECK(pattern_ok(mine, BLK, 23));
	pattern_write(arc_buf_data(filler), BLK, 23);
	arc_fill_done(arc, filler, 0);
	arc_rele(arc, filler);
	CHECK(arc_remove(arc, &k3));
	CHECK(arc_insert_keep_on_error(arc, &k3, mine, BLK, &b) == 0 && arc_buf_data(b) == mine);
	arc_rele(arc, b);
	CHECK(access_key(arc, 23, BLK, &ok) == ARC_HIT && ok);

	/* Inserts obey the limit like fills. */
	arc_set_max(arc, 8 * BLK);
	for (uint64_t n = 100; n < 200; n++) {
		struct arc_key kn = key_of(n);
		void *d = arc_data_alloc(2 * BLK);
		pattern_write(d, 2 * BLK, n);
		if (arc_insert(arc, &kn, d, 2 * BLK, NULL) != 0)
			ok = false;
	}
	CHECK(ok && bounds_ok(arc));
	CHECK(access_key(arc, 199, 2 * BLK, &ok) == ARC_HIT && ok);
	CHECK(arc_check(arc) == 0);
	arc_destroy(arc);
	CHECK(arc_data_alloc(0) == NULL);
}

/* ---- the statistics ---- */

static void test_stats_add_up(void)
{
	struct arc *arc;
	CHECK(arc_create(32 * BLK, &arc) == 0);
	uint64_t lookups = 0, hits = 0, fills = 0, waits = 0;
	struct arc_buf *pending = NULL; /* at most one fill left open, so waits happen */
	uint64_t x = 0x2545f4914f6cdd1dull;
	for (int i = 0; i < 5000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* Skewed keys: half the accesses to 10 keys, the rest spread over 100. */
		uint64_t n = (x & 1) ? (x >> 8) % 10 : (x >> 8) % 100;
		struct arc_key k = key_of(n);
		struct arc_buf *b;
		int rc = arc_lookup(arc, &k, BLK, &b);
		lookups++;
		if (rc == ARC_HIT) {
			hits++;
			arc_rele(arc, b);
		} else if (rc == ARC_MISS_FILL) {
			fills++;
			pattern_write(arc_buf_data(b), BLK, n);
			if (!pending && (x & 0x10)) {
				pending = b;
				continue;
			}
			arc_fill_done(arc, b, (x & 0x300) == 0 ? -EIO : 0);
			arc_rele(arc, b);
		} else if (rc == ARC_MISS_WAIT) {
			waits++;
		} else {
			CHECKF(false, "lookup %d returned %d", i, rc);
		}
		if (pending && (x & 0x70) == 0x70) {
			arc_fill_done(arc, pending, 0);
			arc_rele(arc, pending);
			pending = NULL;
		}
	}
	if (pending) {
		arc_fill_done(arc, pending, 0);
		arc_rele(arc, pending);
	}
	struct arc_stats s = stats_of(arc);
	CHECK(lookups == 5000);
	CHECK(s.as_hits + s.as_misses == lookups);
	CHECK(s.as_hits == hits && s.as_miss_fills == fills && s.as_miss_waits == waits);
	CHECK(s.as_misses == s.as_miss_fills + s.as_miss_waits);
	CHECK(s.as_mru_hits + s.as_mfu_hits == s.as_hits);
	CHECK(s.as_mru_ghost_hits + s.as_mfu_ghost_hits <= s.as_miss_fills);
	CHECK(waits > 0 && s.as_fill_errors > 0);
	CHECK(s.as_size_bytes == s.as_buffers * BLK && s.as_held_bytes == 0);
	printf("# %llu lookups: %llu hits (%llu MRU, %llu MFU), %llu fills, %llu waits, "
	       "%llu ghost hits (%llu MRU, %llu MFU), p %llu of %llu bytes\n",
	       (unsigned long long)lookups, (unsigned long long)s.as_hits,
	       (unsigned long long)s.as_mru_hits, (unsigned long long)s.as_mfu_hits,
	       (unsigned long long)s.as_miss_fills, (unsigned long long)s.as_miss_waits,
	       (unsigned long long)(s.as_mru_ghost_hits + s.as_mfu_ghost_hits),
	       (unsigned long long)s.as_mru_ghost_hits, (unsigned long long)s.as_mfu_ghost_hits,
	       (unsigned long long)s.as_p_bytes, (unsigned long long)s.as_max_bytes);
	CHECK(bounds_ok(arc));
	arc_destroy(arc);
}

/* ---- stress ---- */

#define STRESS_THREADS 4
#define STRESS_KEYS 400
#define STRESS_SLOTS 4
#define STRESS_NS 1000000000ull /* about a second */

struct stress {
	struct arc *st_arc;
	uint64_t st_deadline_ns;
	atomic_ulong st_lookups;
	atomic_ulong st_hits;
	atomic_ulong st_fills;
	atomic_ulong st_waits;
	atomic_ulong st_fill_errors;
	atomic_ulong st_inserts;
	atomic_ulong st_waiters_pending;
	atomic_ulong st_waiters_done;
	atomic_ulong st_bad;
};

struct stress_waiter {
	struct arc_waiter sw_w;
	struct stress *sw_st;
	uint64_t sw_n;
};

static uint32_t stress_size(uint64_t n)
{
	return BLK * (uint32_t)(1 + n % 4); /* 4 to 16 KiB, fixed per key */
}

static void stress_waiter_done(struct arc_waiter *w, struct arc_buf *buf, int status)
{
	struct stress_waiter *sw = SH_CONTAINER_OF(w, struct stress_waiter, sw_w);
	struct stress *st = sw->sw_st;
	if (status == 0) {
		if (!buf || !buf_ok(buf, sw->sw_n, stress_size(sw->sw_n)))
			atomic_fetch_add(&st->st_bad, 1);
		if (buf)
			arc_rele(st->st_arc, buf);
	} else if (buf || status != -EIO) {
		atomic_fetch_add(&st->st_bad, 1);
	}
	atomic_fetch_add(&st->st_waiters_done, 1);
	atomic_fetch_sub(&st->st_waiters_pending, 1);
	mem_free(sw);
}

struct stress_thread {
	struct stress *t_st;
	unsigned t_index;
	uint64_t t_ops;
};

static void *stress_main(void *arg)
{
	struct stress_thread *t = arg;
	struct stress *st = t->t_st;
	struct arc *arc = st->st_arc;
	struct arc_buf *slots[STRESS_SLOTS] = {0}; /* buffers kept held across operations */
	uint64_t x = 0x9e3779b97f4a7c15ull * (t->t_index + 1);
	/* Until the deadline, and at least some work however slow the machine. */
	for (int rounds = 0; rounds < 16 || clock_monotonic_ns() < st->st_deadline_ns; rounds++) {
		for (int burst = 0; burst < 64; burst++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			t->t_ops++;
			/* Half the operations on a hot eighth of the keys, so there are hits and
			 * concurrent misses on one key, the rest spread over all of them. */
			uint64_t n = (x >> 16) % ((x & 0x800) ? STRESS_KEYS / 8 : STRESS_KEYS);
			uint32_t size = stress_size(n);
			struct arc_key k = key_of(n);
			unsigned op = (unsigned)(x % 100);
			if (op < 60) {
				struct arc_buf *b;
				struct stress_waiter *sw = NULL;
				int rc;
				if (op & 1) {
					sw = mem_alloc(sizeof(*sw));
					VERIFY(sw != NULL);
					sw->sw_w.aw_done = stress_waiter_done;
					sw->sw_st = st;
					sw->sw_n = n;
					/* Counted before it can run. */
					atomic_fetch_add(&st->st_waiters_pending, 1);
					rc = arc_lookup_async(arc, &k, size, &sw->sw_w, &b);
					if (rc != ARC_MISS_WAIT) {
						atomic_fetch_sub(&st->st_waiters_pending, 1);
						mem_free(sw);
					}
				} else {
					rc = arc_lookup(arc, &k, size, &b);
				}
				atomic_fetch_add(&st->st_lookups, 1);
				if (rc == ARC_HIT) {
					atomic_fetch_add(&st->st_hits, 1);
					if (!buf_ok(b, n, size))
						atomic_fetch_add(&st->st_bad, 1);
					unsigned s = (unsigned)(x >> 40) % (STRESS_SLOTS * 8);
					if (s < STRESS_SLOTS) {
						if (slots[s])
							arc_rele(arc, slots[s]);
						slots[s] = b;
					} else {
						arc_rele(arc, b);
					}
				} else if (rc == ARC_MISS_FILL) {
					atomic_fetch_add(&st->st_fills, 1);
					pattern_write(arc_buf_data(b), size, n);
					/* Sometimes the "I/O" takes a while: others wait on it. */
					if ((x >> 28) % 4 == 0)
						sched_yield();
					if ((x >> 32) % 20 == 0) {
						atomic_fetch_add(&st->st_fill_errors, 1);
						arc_fill_done(arc, b, -EIO);
					} else {
						arc_fill_done(arc, b, 0);
					}
					arc_rele(arc, b);
				} else if (rc == ARC_MISS_WAIT) {
					atomic_fetch_add(&st->st_waits, 1);
				} else {
					atomic_fetch_add(&st->st_bad, 1);
				}
			} else if (op < 72) {
				void *d = arc_data_alloc(size);
				VERIFY(d != NULL);
				pattern_write(d, size, n);
				struct arc_buf *b = NULL;
				int rc = arc_insert(arc, &k, d, size, (op & 1) ? &b : NULL);
				if (rc == 0)
					atomic_fetch_add(&st->st_inserts, 1);
				else if (rc != -EBUSY)
					atomic_fetch_add(&st->st_bad, 1);
				if (b) {
					if (!buf_ok(b, n, size))
						atomic_fetch_add(&st->st_bad, 1);
					arc_rele(arc, b);
				}
			} else if (op < 87) {
				(void)arc_remove(arc, &k);
			} else if (op < 93) {
				struct arc_buf *b = slots[op % STRESS_SLOTS];
				if (b) {
					arc_hold(b);
					if (!buf_ok(b, (uint64_t)(arc_buf_key(b)->ak_c - 1000),
					            arc_buf_size(b)))
						atomic_fetch_add(&st->st_bad, 1);
					arc_rele(arc, b);
				}
			} else if (op < 95 && t->t_index == 0) {
				arc_set_max(arc, BLK * (32 + (x >> 24) % 160));
			} else {
				struct arc_stats s;
				arc_stats(arc, &s);
				if (s.as_mru_bytes + s.as_mfu_bytes != s.as_size_bytes ||
				    s.as_p_bytes > s.as_max_bytes)
					atomic_fetch_add(&st->st_bad, 1);
			}
		}
	}
	for (int s = 0; s < STRESS_SLOTS; s++) {
		if (slots[s])
			arc_rele(arc, slots[s]);
	}
	return NULL;
}

static void stress_run(unsigned nshards)
{
	struct stress st;
	memset(&st, 0, sizeof(st));
	CHECK(arc_create_shards(128 * BLK, nshards, &st.st_arc) == 0);
	st.st_deadline_ns = clock_monotonic_ns() + STRESS_NS / 2;
	struct stress_thread th[STRESS_THREADS];
	pthread_t tid[STRESS_THREADS];
	for (unsigned i = 0; i < STRESS_THREADS; i++) {
		th[i] = (struct stress_thread){.t_st = &st, .t_index = i};
		VERIFY(pthread_create(&tid[i], NULL, stress_main, &th[i]) == 0);
	}
	uint64_t ops = 0;
	for (unsigned i = 0; i < STRESS_THREADS; i++) {
		pthread_join(tid[i], NULL);
		ops += th[i].t_ops;
	}
	struct arc_stats s = stats_of(st.st_arc);
	printf("# %u shard(s): %llu operations; %llu hits, %llu fills (%llu failed), %llu waits "
	       "(%llu called back), %llu inserts, %llu evictions, %llu overflows\n",
	       nshards, (unsigned long long)ops, (unsigned long long)s.as_hits,
	       (unsigned long long)s.as_miss_fills, (unsigned long long)s.as_fill_errors,
	       (unsigned long long)s.as_miss_waits, (unsigned long long)st.st_waiters_done,
	       (unsigned long long)s.as_inserts, (unsigned long long)s.as_evictions,
	       (unsigned long long)s.as_overflows);
	CHECKF(atomic_load(&st.st_bad) == 0, "%lu bad", atomic_load(&st.st_bad));
	/* Every fill completed, so every waiter was called back. */
	CHECK(atomic_load(&st.st_waiters_pending) == 0);
	CHECK(s.as_hits + s.as_misses == atomic_load(&st.st_lookups));
	CHECK(s.as_hits == atomic_load(&st.st_hits));
	CHECK(s.as_miss_fills == atomic_load(&st.st_fills));
	CHECK(s.as_miss_waits == atomic_load(&st.st_waits));
	CHECK(s.as_fill_errors == atomic_load(&st.st_fill_errors));
	CHECK(s.as_inserts == atomic_load(&st.st_inserts));
	CHECK(s.as_mru_hits + s.as_mfu_hits == s.as_hits);
	CHECK(s.as_held_bytes == 0 && s.as_anon_bytes == 0);
	CHECK(s.as_hits > 0 && s.as_miss_fills > 0 && s.as_evictions > 0);
	CHECK(bounds_ok(st.st_arc));
	arc_destroy(st.st_arc);
}

static void test_stress_threads(void)
{
	stress_run(1); /* all threads on one lock: the most contention */
	stress_run(4); /* sharded */
}

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_hit_miss_fill);
	TAP_RUN(test_fill_error_wakes_waiters);
	TAP_RUN(test_async_waiters_get_buffer);
	TAP_RUN(test_fill_take);
	TAP_RUN(test_eviction_bounds);
	TAP_RUN(test_held_never_evicted);
	TAP_RUN(test_scan_resistance);
	TAP_RUN(test_ghost_hits_adapt_p);
	TAP_RUN(test_set_max_shrinks);
	TAP_RUN(test_reserved_bounds_cache);
	TAP_RUN(test_remove_while_held);
	TAP_RUN(test_insert_zero_copy);
	TAP_RUN(test_stats_add_up);
	TAP_RUN(test_stress_threads);
	return tap_finish();
}
