/* test_ilog.c: unit tests for src/ilog (the intent log) on memory and fault-injecting leaves:
 * round trips, group commit under many threads, wrap-around with checkpoints, a full log, crash
 * cuts at every recorded I/O event, mirrors with a bad side, device failure, a stale successor
 * after a reopen, and hostile images. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "blk/blk.h"
#include "ilog/ilog.h"
#include "ilog/ilog_impl.h"
#include "tap.h"

#define POOL_GUID 0x1234ull

static struct blk_engine *g_engine;

/* ---- deterministic randomness and payloads ---- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Payloads are slices of one random pattern, at an offset the record's seed picks: filling and
 * checking are a memcpy and a memcmp, and two records rarely share a slice. */
#define PATTERN_BYTES (ILOG_PAYLOAD_MAX + 65536u)
static uint8_t *g_pattern;

static void pattern_init(void)
{
	g_pattern = mem_alloc(PATTERN_BYTES);
	VERIFY(g_pattern);
	uint64_t st = 0x5eed;
	for (uint32_t i = 0; i < PATTERN_BYTES; i += 8) {
		uint64_t v = splitmix64(&st);
		memcpy(g_pattern + i, &v, 8);
	}
}

static const uint8_t *pattern_at(uint64_t seed)
{
	return g_pattern + (seed * 0x9e3779b97f4a7c15ull >> 40) % 65536u;
}

static void fill_payload(uint8_t *buf, uint32_t len, uint64_t seed)
{
	memcpy(buf, pattern_at(seed), len);
}

static bool payload_ok(const uint8_t *buf, uint32_t len, uint64_t seed)
{
	return memcmp(buf, pattern_at(seed), len) == 0;
}

/* What the test appended, by LSN. */
struct rec_meta {
	uint16_t rm_type;
	uint64_t rm_txg;
	uint32_t rm_len;
	uint64_t rm_seed;
};

struct meta_vec {
	struct rec_meta *mv_recs; /* indexed by LSN */
	size_t mv_cap;
};

static void meta_set(struct meta_vec *mv, uint64_t lsn, struct rec_meta m)
{
	if (lsn >= mv->mv_cap) {
		size_t cap = mv->mv_cap ? mv->mv_cap : 1024;
		while (cap <= lsn)
			cap *= 2;
		mv->mv_recs = mem_realloc(mv->mv_recs, cap * sizeof(*mv->mv_recs));
		VERIFY(mv->mv_recs);
		memset(mv->mv_recs + mv->mv_cap, 0, (cap - mv->mv_cap) * sizeof(*mv->mv_recs));
		mv->mv_cap = cap;
	}
	mv->mv_recs[lsn] = m;
}

static uint8_t g_payload[ILOG_PAYLOAD_MAX];

/* Appends a record with a generated payload and remembers it. */
static int append_gen(struct ilog *log, struct meta_vec *mv, uint16_t type, uint64_t txg,
                      uint32_t len, uint64_t seed, uint64_t *lsn_out)
{
	fill_payload(g_payload, len, seed);
	uint64_t lsn = 0;
	int rc = ilog_append(log, type, txg, g_payload, len, &lsn);
	if (rc == 0) {
		meta_set(mv, lsn,
		         (struct rec_meta){
		             .rm_type = type, .rm_txg = txg, .rm_len = len, .rm_seed = seed});
		if (lsn_out)
			*lsn_out = lsn;
	}
	return rc;
}

/* ---- replay collection ---- */

struct collect {
	const struct meta_vec *cl_meta;
	uint64_t cl_next_lsn; /* the LSN the next visit must carry */
	uint64_t cl_count;
	bool cl_bad;
	char cl_why[160];
};

static void collect_init(struct collect *cl, const struct meta_vec *mv, uint64_t first_lsn)
{
	memset(cl, 0, sizeof(*cl));
	cl->cl_meta = mv;
	cl->cl_next_lsn = first_lsn;
}

static int collect_visit(void *arg, uint16_t type, uint64_t txg, uint64_t lsn, const void *payload,
                         uint32_t len)
{
	struct collect *cl = arg;
	if (cl->cl_bad)
		return 0;
	const struct rec_meta *m = lsn < cl->cl_meta->mv_cap ? &cl->cl_meta->mv_recs[lsn] : NULL;
	if (lsn != cl->cl_next_lsn)
		snprintf(cl->cl_why, sizeof(cl->cl_why), "lsn %llu, expected %llu",
		         (unsigned long long)lsn, (unsigned long long)cl->cl_next_lsn);
	else if (!m || m->rm_txg == 0)
		snprintf(cl->cl_why, sizeof(cl->cl_why), "lsn %llu was never appended",
		         (unsigned long long)lsn);
	else if (m->rm_type != type || m->rm_txg != txg || m->rm_len != len)
		snprintf(cl->cl_why, sizeof(cl->cl_why),
		         "lsn %llu: type/txg/len %u/%llu/%u, expected %u/%llu/%u",
		         (unsigned long long)lsn, type, (unsigned long long)txg, len, m->rm_type,
		         (unsigned long long)m->rm_txg, m->rm_len);
	else if (!payload_ok(payload, len, m->rm_seed))
		snprintf(cl->cl_why, sizeof(cl->cl_why), "lsn %llu: payload damaged",
		         (unsigned long long)lsn);
	else {
		cl->cl_next_lsn++;
		cl->cl_count++;
		return 0;
	}
	cl->cl_bad = true;
	return 0;
}

/* ---- devices ---- */

struct rig {
	struct blk_dev *rg_devs[2];
	unsigned rg_ndevs;
	struct blk_vdev *rg_vdev;
	uint64_t rg_start; /* the log region */
	uint64_t rg_bytes;
	struct meta_vec rg_meta; /* what the test appended, by LSN */
};

/* ndevs leaves (memory, or fault recorders) with a log region of region_bytes that starts
 * skip_bytes into the data area and leaves tail_bytes after it. */
static bool rig_init(struct rig *r, unsigned ndevs, bool fault, uint64_t skip_bytes,
                     uint64_t region_bytes, uint64_t tail_bytes)
{
	memset(r, 0, sizeof(*r));
	uint64_t size = 2ull * BLK_LABEL_AREA_BYTES + skip_bytes + region_bytes + tail_bytes;
	size = (size + BLK_LABEL_BYTES - 1) / BLK_LABEL_BYTES * BLK_LABEL_BYTES;
	r->rg_ndevs = ndevs;
	for (unsigned i = 0; i < ndevs; i++) {
		int rc = fault ? blk_dev_create_fault(size, &r->rg_devs[i])
		               : blk_dev_create_mem(size, &r->rg_devs[i]);
		if (rc != 0)
			return false;
	}
	if (blk_vdev_create(g_engine, r->rg_devs, ndevs, &r->rg_vdev) != 0)
		return false;
	r->rg_start = blk_vdev_data_start(r->rg_vdev) + skip_bytes;
	r->rg_bytes = region_bytes;
	return true;
}

static void rig_fini(struct rig *r)
{
	mem_free(r->rg_meta.mv_recs);
	if (r->rg_vdev)
		blk_vdev_destroy(r->rg_vdev);
	for (unsigned i = 0; i < r->rg_ndevs; i++)
		if (r->rg_devs[i])
			blk_dev_close(r->rg_devs[i]);
	memset(r, 0, sizeof(*r));
}

/* rig_init, then a new log over the whole region; initial (may be NULL) receives the position it
 * starts at. Returns the log, or NULL after a failed check; rig_fini undoes the rig. */
static struct ilog *rig_open_log(struct rig *r, unsigned ndevs, bool fault, uint64_t skip_bytes,
                                 uint64_t region_bytes, uint64_t tail_bytes,
                                 struct ilog_position *initial)
{
	CHECKF(rig_init(r, ndevs, fault, skip_bytes, region_bytes, tail_bytes), "rig_init");
	struct ilog *log = NULL;
	int rc = ilog_create(r->rg_vdev, r->rg_start, r->rg_bytes, POOL_GUID, &log);
	CHECKF(rc == 0, "ilog_create: %d", rc);
	if (log && initial)
		ilog_checkpoint_position(log, 0, initial);
	return log;
}

static int64_t rig_replay(struct rig *r, const struct ilog_position *from, struct collect *cl,
                          struct ilog_position *end)
{
	return ilog_replay(g_engine, r->rg_vdev, r->rg_start, r->rg_bytes, POOL_GUID, from,
	                   collect_visit, cl, end);
}

/* Replays r's log from `from`, expecting the records of r->rg_meta from first_lsn on; end (may be
 * NULL) receives where replay ended. Returns replay's result: the records visited or an error.
 * Whether they were the right ones is not looked at. */
static int64_t replay_count(struct rig *r, const struct ilog_position *from, uint64_t first_lsn,
                            struct ilog_position *end)
{
	struct collect cl;
	collect_init(&cl, &r->rg_meta, first_lsn);
	return rig_replay(r, from, &cl, end);
}

/* Replays as replay_count and checks that it gives `expect` records, each of them the one
 * appended with its LSN (from first_lsn on, in order, intact). what names the replay in a
 * failure. */
static void replay_expect(struct rig *r, const struct ilog_position *from, uint64_t first_lsn,
                          int64_t expect, struct ilog_position *end, const char *what)
{
	struct collect cl;
	collect_init(&cl, &r->rg_meta, first_lsn);
	int64_t got = rig_replay(r, from, &cl, end);
	CHECKF(got == expect, "%s: replay gave %lld, expected %lld", what, (long long)got,
	       (long long)expect);
	CHECKF(!cl.cl_bad, "%s: %s", what, cl.cl_why);
}

/* ---- waiting for a commit ---- */

struct sync_waiter {
	struct ilog_waiter sw_w;
	pthread_mutex_t sw_lock;
	pthread_cond_t sw_cv;
	int sw_calls;
	int sw_status;
};

static void sync_waiter_done(struct ilog_waiter *w, int status)
{
	struct sync_waiter *sw = SH_CONTAINER_OF(w, struct sync_waiter, sw_w);
	pthread_mutex_lock(&sw->sw_lock);
	sw->sw_calls++;
	sw->sw_status = status;
	pthread_cond_signal(&sw->sw_cv);
	pthread_mutex_unlock(&sw->sw_lock);
}

static void sync_waiter_init(struct sync_waiter *sw)
{
	memset(sw, 0, sizeof(*sw));
	pthread_mutex_init(&sw->sw_lock, NULL);
	pthread_cond_init(&sw->sw_cv, NULL);
	sw->sw_w.iw_done = sync_waiter_done;
}

static void sync_waiter_fini(struct sync_waiter *sw)
{
	pthread_cond_destroy(&sw->sw_cv);
	pthread_mutex_destroy(&sw->sw_lock);
}

/* Waits until the waiter has been called `calls` times in all; returns its last status. */
static int sync_waiter_wait(struct sync_waiter *sw, int calls)
{
	pthread_mutex_lock(&sw->sw_lock);
	while (sw->sw_calls < calls)
		pthread_cond_wait(&sw->sw_cv, &sw->sw_lock);
	int status = sw->sw_status;
	pthread_mutex_unlock(&sw->sw_lock);
	return status;
}

/* Commits up to lsn and waits: 0 when durable, or the error. */
static int commit_wait(struct ilog *log, uint64_t lsn)
{
	struct sync_waiter sw;
	sync_waiter_init(&sw);
	int rc = ilog_commit(log, lsn, &sw.sw_w);
	if (rc == 0)
		rc = sync_waiter_wait(&sw, 1);
	else if (rc == ILOG_DONE)
		rc = 0;
	sync_waiter_fini(&sw);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Round trip, resume, API edges */

static void test_roundtrip(void)
{
	struct rig r;
	struct ilog_position initial, end;
	/* Large enough that the reopened log below does not wrap onto the first writer's blocks
	 * (ilog_open counts everything before its position as free). */
	struct ilog *log = rig_open_log(&r, 1, false, 0, 8u << 20, 0, &initial);
	if (!log)
		return;
	CHECK(initial.ip_offset == r.rg_start && initial.ip_seq == 1 && initial.ip_next_lsn == 1);
	CHECK(replay_count(&r, &initial, 1, &end) == 0); /* a fresh log replays nothing */
	CHECK(end.ip_offset == initial.ip_offset && end.ip_seq == 1);

	uint64_t rng = 7, lsn = 0;
	CHECK(ilog_commit(log, ILOG_LSN_ALL, NULL) == ILOG_DONE); /* nothing appended yet */
	for (uint64_t i = 1; i <= 300; i++) {
		uint32_t len = (uint32_t)(splitmix64(&rng) % 5000);
		if (i % 97 == 0)
			len =
			    200000 + (uint32_t)(splitmix64(&rng) % 400000); /* spans many sectors */
		if (i == 5)
			len = 0;
		CHECK(append_gen(log, &r.rg_meta, (uint16_t)(i % 13), 3 + i / 50, len, i * 1000003,
		                 &lsn) == 0);
		CHECK(lsn == i);
		if (i % 10 == 0)
			CHECK(commit_wait(log, lsn) == 0);
	}
	/* One record as large as a record can be, alone in a largest block. */
	CHECK(append_gen(log, &r.rg_meta, 99, 9, ILOG_PAYLOAD_MAX, 77, &lsn) == 0);
	CHECK(lsn == 301);
	CHECK(ilog_append(log, 1, 9, g_payload, ILOG_PAYLOAD_MAX + 1, &lsn) == -EMSGSIZE);
	CHECK(commit_wait(log, ILOG_LSN_ALL) == 0);
	CHECK(ilog_commit(log, 301, NULL) == ILOG_DONE);
	CHECK(ilog_commit(log, 150, NULL) == ILOG_DONE);
	CHECK(ilog_commit(log, 302, NULL) == -EINVAL);

	struct ilog_stats st;
	ilog_stats(log, &st);
	CHECK(st.is_records == 301 && st.is_next_lsn == 302 && st.is_durable_lsn == 301);
	CHECK(st.is_flushes >= 31 && st.is_flushes <= st.is_writes && st.is_blocks >= st.is_writes);
	CHECK(st.is_flushed_records == 301);
	CHECK(st.is_space_used_bytes > 0 && st.is_space_used_bytes <= r.rg_bytes);
	ilog_close(log);

	replay_expect(&r, &initial, 1, 301, &end, "first writer");
	CHECK(end.ip_next_lsn == 302 && end.ip_log_guid == initial.ip_log_guid);

	/* Continue the chain where replay ended; the old and the new records replay as one. */
	log = NULL;
	CHECK(ilog_open(r.rg_vdev, r.rg_start, r.rg_bytes, POOL_GUID, &end, &log) == 0);
	if (log) {
		for (uint64_t i = 302; i <= 350; i++) {
			CHECK(append_gen(log, &r.rg_meta, 5, 20, (uint32_t)(i * 37 % 3000),
			                 i * 1000003, &lsn) == 0);
			CHECK(lsn == i);
		}
		CHECK(commit_wait(log, 340) == 0); /* 341..350 go out with 340's block: one block */
		ilog_close(log);
	}
	struct ilog_position resumed = end;
	replay_expect(&r, &initial, 1, 350, &end, "both writers");
	CHECK(end.ip_next_lsn == 351);

	/* Replay from the resume point gives only the new records. */
	replay_expect(&r, &resumed, 302, 49, NULL, "from the resume point");
	rig_fini(&r);
}

static void test_position_codec(void)
{
	struct ilog_position p = {
	    .ip_offset = 1ull << 40, .ip_seq = 77, .ip_next_lsn = 1234567, .ip_log_guid = 99};
	for (int i = 0; i < 16; i++)
		p.ip_prev_cksum[i] = (uint8_t)(i * 17 + 1);
	uint8_t buf[ILOG_POSITION_BYTES];
	ilog_position_encode(&p, buf);
	struct ilog_position q;
	CHECK(ilog_position_decode(buf, &q) == 0);
	CHECK(memcmp(&p, &q, sizeof(p)) == 0);
	CHECK(buf[ILOG_POS_SEQ] == 77 &&
	      buf[ILOG_POS_LOG_GUID] == 99); /* little-endian, table offsets */
	buf[ILOG_POS_OFFSET] = 1;            /* unaligned */
	CHECK(ilog_position_decode(buf, &q) == -EINVAL);
	memset(buf, 0, sizeof(buf));
	CHECK(ilog_position_decode(buf, &q) == -EINVAL);
}

static void test_bad_arguments(void)
{
	struct rig r;
	CHECK(rig_init(&r, 1, false, 0, 4u << 20, 0));
	struct ilog *log = NULL;
	CHECK(ilog_create(r.rg_vdev, r.rg_start + 512, r.rg_bytes, POOL_GUID, &log) == -EINVAL);
	CHECK(ilog_create(r.rg_vdev, r.rg_start, ILOG_REGION_MIN - BLK_SECTOR_BYTES, POOL_GUID,
	                  &log) == -EINVAL);
	CHECK(ilog_create(r.rg_vdev, r.rg_start, r.rg_bytes + BLK_SECTOR_BYTES, POOL_GUID, &log) ==
	      -EINVAL);
	CHECK(ilog_create(r.rg_vdev, r.rg_start - BLK_SECTOR_BYTES, r.rg_bytes, POOL_GUID, &log) ==
	      -EINVAL);
	CHECK(log == NULL);
	struct ilog_position pos = {
	    .ip_offset = r.rg_start, .ip_seq = 1, .ip_next_lsn = 1, .ip_log_guid = 5};
	CHECK(replay_count(&r, &pos, 1, NULL) == 0);
	struct ilog_position bad = pos;
	bad.ip_offset += 512;
	CHECK(replay_count(&r, &bad, 1, NULL) == -EINVAL);
	bad = pos;
	bad.ip_offset =
	    r.rg_start + r.rg_bytes - ILOG_BLOCK_MAX + BLK_SECTOR_BYTES; /* no room for a block */
	CHECK(replay_count(&r, &bad, 1, NULL) == -EINVAL);
	bad.ip_offset = r.rg_start - BLK_SECTOR_BYTES;
	CHECK(replay_count(&r, &bad, 1, NULL) == -EINVAL);
	bad = pos;
	bad.ip_log_guid = 0;
	CHECK(replay_count(&r, &bad, 1, NULL) == -EINVAL);
	CHECK(ilog_open(r.rg_vdev, r.rg_start, r.rg_bytes, POOL_GUID, &bad, &log) == -EINVAL);
	struct collect cl;
	collect_init(&cl, &r.rg_meta, 1);
	CHECK(ilog_replay(g_engine, r.rg_vdev, r.rg_start, 4096, POOL_GUID, &pos, collect_visit,
	                  &cl, NULL) == -EINVAL);

	CHECK(ilog_create(r.rg_vdev, r.rg_start, r.rg_bytes, POOL_GUID, &log) == 0);
	if (log) {
		uint64_t lsn = 0;
		CHECK(ilog_append(log, 1, 1, NULL, 10, &lsn) == -EINVAL);
		CHECK(ilog_append(log, 1, 1, NULL, 0, &lsn) == 0 && lsn == 1);
		struct ilog_position other = pos;
		CHECK(ilog_release(log, &other) == -EINVAL); /* another log's position */
		ilog_checkpoint_position(log, 0, &other);
		other.ip_seq += 5;
		CHECK(ilog_release(log, &other) == -EINVAL); /* beyond the end */
		ilog_close(log); /* the appended record was never committed: dropped */
	}
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Group commit */

#define GC_THREADS 64
#define GC_EACH 200

struct gc_thread {
	pthread_t gt_thread;
	unsigned gt_index;
	struct ilog *gt_log;
	struct meta_vec *gt_meta;
	struct sync_waiter gt_waiter;
	unsigned gt_completions; /* callbacks plus ILOG_DONE returns */
	unsigned gt_errors;
};

static void *gc_main(void *arg)
{
	struct gc_thread *gt = arg;
	uint8_t payload[48];
	for (unsigned i = 0; i < GC_EACH; i++) {
		uint64_t seed = ((uint64_t)gt->gt_index << 32) | i;
		uint32_t len = 16 + (uint32_t)(seed % 29);
		fill_payload(payload, len, seed);
		uint64_t lsn = 0;
		if (ilog_append(gt->gt_log, (uint16_t)gt->gt_index, 1 + i / 50, payload, len,
		                &lsn) != 0) {
			gt->gt_errors++;
			continue;
		}
		/* Each thread writes its own entries of a vector sized beforehand. */
		gt->gt_meta->mv_recs[lsn] = (struct rec_meta){.rm_type = (uint16_t)gt->gt_index,
		                                              .rm_txg = 1 + i / 50,
		                                              .rm_len = len,
		                                              .rm_seed = seed};
		int calls_before = gt->gt_waiter.sw_calls;
		int rc = ilog_commit(gt->gt_log, lsn, &gt->gt_waiter.sw_w);
		if (rc == ILOG_DONE) {
			gt->gt_completions++;
		} else if (rc == 0) {
			if (sync_waiter_wait(&gt->gt_waiter, calls_before + 1) != 0)
				gt->gt_errors++;
			gt->gt_completions++;
		} else {
			gt->gt_errors++;
		}
	}
	return NULL;
}

static void test_group_commit(void)
{
	struct rig r;
	struct ilog_position initial;
	struct ilog *log = rig_open_log(&r, 1, false, 0, 96u << 20, 0, &initial);
	if (!log)
		return;
	meta_set(&r.rg_meta, GC_THREADS * GC_EACH + 1, (struct rec_meta){0});

	static struct gc_thread threads[GC_THREADS];
	for (unsigned t = 0; t < GC_THREADS; t++) {
		memset(&threads[t], 0, sizeof(threads[t]));
		threads[t].gt_index = t;
		threads[t].gt_log = log;
		threads[t].gt_meta = &r.rg_meta;
		sync_waiter_init(&threads[t].gt_waiter);
	}
	for (unsigned t = 0; t < GC_THREADS; t++)
		VERIFY(pthread_create(&threads[t].gt_thread, NULL, gc_main, &threads[t]) == 0);
	unsigned completions = 0, errors = 0, callbacks = 0;
	for (unsigned t = 0; t < GC_THREADS; t++) {
		pthread_join(threads[t].gt_thread, NULL);
		completions += threads[t].gt_completions;
		errors += threads[t].gt_errors;
		callbacks += (unsigned)threads[t].gt_waiter.sw_calls;
	}
	struct ilog_stats st;
	ilog_stats(log, &st);
	ilog_close(log);
	/* A waiter is called at most once per commit; every commit completed exactly once. */
	for (unsigned t = 0; t < GC_THREADS; t++) {
		CHECK(threads[t].gt_completions == GC_EACH);
		CHECK((unsigned)threads[t].gt_waiter.sw_calls <= GC_EACH);
		sync_waiter_fini(&threads[t].gt_waiter);
	}
	CHECKF(completions == GC_THREADS * GC_EACH && errors == 0, "completions %u errors %u",
	       completions, errors);
	CHECK(st.is_records == GC_THREADS * GC_EACH && st.is_flushed_records == st.is_records);
	CHECKF(st.is_records_per_flush > 4.0, "%.2f records per flush (%llu flushes, %u callbacks)",
	       st.is_records_per_flush, (unsigned long long)st.is_flushes, callbacks);
	printf("# group commit: %llu records, %llu writes, %llu flushes, %.1f records per flush\n",
	       (unsigned long long)st.is_records, (unsigned long long)st.is_writes,
	       (unsigned long long)st.is_flushes, st.is_records_per_flush);

	/* Replay: every record, in LSN order, intact; each thread's in its own order. */
	struct ilog_position end;
	replay_expect(&r, &initial, 1, GC_THREADS * GC_EACH, &end, "group commit");
	uint64_t last_seed[GC_THREADS];
	memset(last_seed, 0xff, sizeof(last_seed));
	bool ordered = true;
	for (uint64_t lsn = 1; lsn <= GC_THREADS * GC_EACH; lsn++) {
		const struct rec_meta *m = &r.rg_meta.mv_recs[lsn];
		uint64_t i = m->rm_seed & 0xffffffffu;
		if (m->rm_type >= GC_THREADS ||
		    (last_seed[m->rm_type] != UINT64_MAX && i != last_seed[m->rm_type] + 1) ||
		    (last_seed[m->rm_type] == UINT64_MAX && i != 0))
			ordered = false;
		if (m->rm_type < GC_THREADS)
			last_seed[m->rm_type] = i;
	}
	CHECK(ordered);
	rig_fini(&r);
}

/* The pipeline, step by step on a fault leaf. A's callback holds the engine thread, so the write
 * B1's commit starts waits behind it; B2..B5 are appended and committed meanwhile. They must go out
 * together in one more write, started only once B1's flush has completed: events W F W F W F. */
struct pipe_waiter {
	struct ilog_waiter pw_w;
	struct blk_dev *pw_dev;
	uint64_t pw_events; /* recorder events when called */
	int pw_calls;
	int pw_status;
	bool pw_gate;
};

static pthread_mutex_t g_pipe_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_pipe_cv = PTHREAD_COND_INITIALIZER;
static bool g_pipe_entered, g_pipe_open;

static void pipe_done(struct ilog_waiter *w, int status)
{
	struct pipe_waiter *pw = SH_CONTAINER_OF(w, struct pipe_waiter, pw_w);
	pthread_mutex_lock(&g_pipe_lock);
	pw->pw_events = pw->pw_dev ? blk_fault_event_count(pw->pw_dev) : 0;
	pw->pw_calls++;
	pw->pw_status = status;
	if (pw->pw_gate) {
		g_pipe_entered = true;
		pthread_cond_broadcast(&g_pipe_cv);
		while (!g_pipe_open)
			pthread_cond_wait(&g_pipe_cv, &g_pipe_lock);
	}
	pthread_cond_broadcast(&g_pipe_cv);
	pthread_mutex_unlock(&g_pipe_lock);
}

/* Waits until a gated waiter's callback holds the engine thread. */
static void pipe_wait_entered(void)
{
	pthread_mutex_lock(&g_pipe_lock);
	while (!g_pipe_entered)
		pthread_cond_wait(&g_pipe_cv, &g_pipe_lock);
	pthread_mutex_unlock(&g_pipe_lock);
}

/* Lets the gated callback return, then waits until pw (if not NULL) has been called. */
static void pipe_open_and_wait(const struct pipe_waiter *pw)
{
	pthread_mutex_lock(&g_pipe_lock);
	g_pipe_open = true;
	pthread_cond_broadcast(&g_pipe_cv);
	while (pw && pw->pw_calls == 0)
		pthread_cond_wait(&g_pipe_cv, &g_pipe_lock);
	pthread_mutex_unlock(&g_pipe_lock);
}

static void test_group_commit_pipeline(void)
{
	struct rig r;
	struct ilog *log = rig_open_log(&r, 1, true, 0, 4u << 20, 0, NULL);
	if (!log)
		return;
	struct pipe_waiter pw[6];
	memset(pw, 0, sizeof(pw));
	for (unsigned i = 0; i < 6; i++) {
		pw[i].pw_w.iw_done = pipe_done;
		pw[i].pw_dev = r.rg_devs[0];
	}
	pw[0].pw_gate = true;
	g_pipe_entered = g_pipe_open = false;
	uint64_t lsn = 0;
	CHECK(append_gen(log, &r.rg_meta, 1, 1, 100, 1, &lsn) == 0);
	CHECK(ilog_commit(log, lsn, &pw[0].pw_w) == 0);
	pipe_wait_entered();
	CHECK(blk_fault_event_count(r.rg_devs[0]) == 2);
	for (unsigned i = 1; i < 6; i++) {
		CHECK(append_gen(log, &r.rg_meta, 1, 1, 100 + i, 1 + i, &lsn) == 0);
		CHECK(ilog_commit(log, lsn, &pw[i].pw_w) == 0);
	}
	struct ilog_stats st;
	ilog_stats(log, &st);
	CHECK(st.is_writes == 2 && st.is_flushes == 1); /* B1's write waits behind the engine */
	pipe_open_and_wait(&pw[5]);
	ilog_stats(log, &st);
	CHECK(st.is_writes == 3 && st.is_blocks == 3 && st.is_flushes == 3 &&
	      st.is_flushed_records == 6);
	ilog_close(log);
	CHECK(blk_fault_event_count(r.rg_devs[0]) == 6);
	for (size_t e = 0; e < 6; e++)
		CHECK(blk_fault_event_is_flush(r.rg_devs[0], e) == (e % 2 == 1));
	CHECK(pw[0].pw_events == 2 && pw[1].pw_events == 4);
	for (unsigned i = 0; i < 6; i++)
		CHECK(pw[i].pw_calls == 1 && pw[i].pw_status == 0);
	for (unsigned i = 2; i < 6; i++)
		CHECK(pw[i].pw_events == 6);
	rig_fini(&r);
}

/* Filled blocks pile up while the device is slow (here: the engine thread held in a callback):
 * once ILOG_BACKLOG_MAX_BYTES of them wait, appends that need a new block are refused although
 * the region has room, and the space waiter is woken when a write completes. */
static void test_backlog(void)
{
	struct rig r;
	struct ilog_position initial;
	struct ilog *log = rig_open_log(&r, 1, false, 0, 48u << 20, 0, &initial);
	if (!log)
		return;
	struct pipe_waiter gate = {.pw_w.iw_done = pipe_done, .pw_gate = true};
	g_pipe_entered = g_pipe_open = false;
	uint64_t lsn = 0;
	CHECK(append_gen(log, &r.rg_meta, 1, 1, 100, 1, &lsn) == 0);
	CHECK(ilog_commit(log, lsn, &gate.pw_w) == 0);
	pipe_wait_entered();

	/* Each largest record fills a block alone. */
	unsigned appended = 0;
	int rc = 0;
	while (appended < 64 &&
	       (rc = append_gen(log, &r.rg_meta, 2, 1, ILOG_PAYLOAD_MAX, appended, &lsn)) == 0)
		appended++;
	CHECK(rc == -EAGAIN);
	CHECKF(appended >= 32 && appended <= 34, "%u appended", appended);
	struct ilog_stats st;
	ilog_stats(log, &st);
	CHECK(st.is_space_used_bytes < r.rg_bytes - 2 * ILOG_BLOCK_MAX); /* not for want of space */
	struct sync_waiter sw;
	sync_waiter_init(&sw);
	CHECK(ilog_wait_space(log, &sw.sw_w) == 0);

	pipe_open_and_wait(NULL);
	CHECK(sync_waiter_wait(&sw, 1) == 0); /* woken once written blocks left the backlog */
	CHECK(append_gen(log, &r.rg_meta, 3, 1, 5000, 99, &lsn) == 0);
	CHECK(commit_wait(log, ILOG_LSN_ALL) == 0);
	ilog_close(log);
	replay_expect(&r, &initial, 1, appended + 2, NULL, "after the backlog");
	sync_waiter_fini(&sw);
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Wrap-around with checkpoints */

static bool region_outside_zero(struct rig *r, uint64_t before, uint64_t after)
{
	const uint8_t *bytes = blk_dev_mem_bytes(r->rg_devs[0]);
	for (uint64_t i = r->rg_start - before; i < r->rg_start; i++)
		if (bytes[i])
			return false;
	for (uint64_t i = r->rg_start + r->rg_bytes; i < r->rg_start + r->rg_bytes + after; i++)
		if (bytes[i])
			return false;
	return true;
}

static void test_wraparound(void)
{
	struct rig r;
	/* A region in the middle of the data area, to show the log keeps inside it. */
	struct ilog *log = rig_open_log(&r, 1, false, 256u << 10, 3u << 20, 256u << 10, NULL);
	if (!log)
		return;
	uint64_t rng = 99, lsn = 0;
	uint64_t first_lsn_of_txg[4096] = {0};
	unsigned replays = 0, bad_replays = 0;
	uint64_t txg;
	struct ilog_stats st = {0};
	for (txg = 1; txg < SH_ARRAY_SIZE(first_lsn_of_txg); txg++) {
		unsigned n = 1 + (unsigned)(splitmix64(&rng) % 24);
		/* At most one large record per txg: two txgs always fit, appends never fail. */
		unsigned large_at = (unsigned)(splitmix64(&rng) % (2 * n));
		first_lsn_of_txg[txg] = 0;
		for (unsigned i = 0; i < n; i++) {
			uint64_t x = splitmix64(&rng);
			uint32_t len = (uint32_t)(x % 3000);
			if (i == large_at)
				len = 100000 + (uint32_t)(x % 150000);
			int rc =
			    append_gen(log, &r.rg_meta, (uint16_t)(x >> 48), txg, len, x, &lsn);
			CHECKF(rc == 0, "append in txg %llu: %d", (unsigned long long)txg, rc);
			if (rc != 0)
				break;
			if (!first_lsn_of_txg[txg])
				first_lsn_of_txg[txg] = lsn;
			if (x % 5 == 0)
				CHECK(commit_wait(log, lsn) == 0);
		}
		CHECK(commit_wait(log, ILOG_LSN_ALL) == 0);
		/* txg - 2 is synced: replay starts at the first block with a record of txg - 1. */
		struct ilog_position pos;
		CHECK(ilog_checkpoint(log, txg >= 2 ? txg - 2 : 0, &pos) == 0);
		uint64_t expect_first = txg >= 2 && first_lsn_of_txg[txg - 1]
		                            ? first_lsn_of_txg[txg - 1]
		                            : (first_lsn_of_txg[txg] ? first_lsn_of_txg[txg] : 1);
		if (txg == 1)
			expect_first = 1;
		CHECKF(pos.ip_next_lsn == expect_first,
		       "txg %llu: position at LSN %llu, expected %llu", (unsigned long long)txg,
		       (unsigned long long)pos.ip_next_lsn, (unsigned long long)expect_first);
		struct collect cl;
		collect_init(&cl, &r.rg_meta, pos.ip_next_lsn);
		struct ilog_position end;
		int64_t got = rig_replay(&r, &pos, &cl, &end);
		replays++;
		if (got != (int64_t)(lsn - pos.ip_next_lsn + 1) || cl.cl_bad ||
		    end.ip_next_lsn != lsn + 1) {
			if (bad_replays++ < 3)
				CHECKF(false,
				       "txg %llu: replay from LSN %llu gave %lld records, expected "
				       "%llu (%s)",
				       (unsigned long long)txg, (unsigned long long)pos.ip_next_lsn,
				       (long long)got,
				       (unsigned long long)(lsn - pos.ip_next_lsn + 1), cl.cl_why);
		}
		ilog_stats(log, &st);
		CHECK(st.is_space_used_bytes <= r.rg_bytes);
		if (st.is_write_bytes >= 10 * r.rg_bytes)
			break;
	}
	CHECKF(st.is_write_bytes >= 10 * r.rg_bytes, "only %llu bytes written",
	       (unsigned long long)st.is_write_bytes);
	CHECK(bad_replays == 0 && replays > 20);
	CHECK(st.is_full == 0);
	CHECK(region_outside_zero(&r, 256u << 10, 256u << 10));
	ilog_close(log);
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * A full log */

static void test_full_log(void)
{
	struct rig r;
	struct ilog_position initial;
	struct ilog *log = rig_open_log(&r, 1, false, 0, ILOG_REGION_MIN, 0, &initial);
	if (!log)
		return;
	uint64_t lsn = 0, appended = 0;
	int rc = 0;
	/* Large records until one is refused, then small ones until one of those is too, committing
	 * in groups so the blocks are of many sizes and the last ones end right at the oldest. */
	uint32_t sizes[2] = {8000, 40};
	for (unsigned phase = 0; phase < 2; phase++) {
		for (unsigned i = 0; i < 100000; i++) {
			rc = append_gen(log, &r.rg_meta, 1, 1, sizes[phase], appended, &lsn);
			if (rc != 0)
				break;
			appended++;
			if (i % 16 == 15)
				CHECK(commit_wait(log, lsn) == 0);
		}
		CHECK(rc == -EAGAIN);
		CHECK(commit_wait(log, ILOG_LSN_ALL) == 0);
	}
	/* Filled to the brim, and no block overwrote another: every record replays. */
	replay_expect(&r, &initial, 1, (int64_t)appended, NULL, "the full log");
	struct ilog_stats st;
	ilog_stats(log, &st);
	CHECKF(st.is_space_used_bytes > r.rg_bytes / 2 && st.is_space_used_bytes <= r.rg_bytes,
	       "%llu used", (unsigned long long)st.is_space_used_bytes);
	CHECK(st.is_full == 2 && appended * 8000 > r.rg_bytes / 2);
	CHECK(append_gen(log, &r.rg_meta, 1, 2, 8000, 1, &lsn) == -EAGAIN);

	/* Nothing has been freed since: the space waiter is queued. */
	struct sync_waiter sw;
	sync_waiter_init(&sw);
	CHECK(ilog_wait_space(log, &sw.sw_w) == 0);
	struct ilog_position pos;
	CHECK(ilog_checkpoint(log, 0, &pos) == 0); /* txg 1 is not synced: nothing to free */
	CHECK(sw.sw_calls == 0);
	CHECK(append_gen(log, &r.rg_meta, 1, 2, 8000, 1, &lsn) == -EAGAIN);
	CHECK(ilog_checkpoint(log, 1, &pos) == 0); /* frees everything and wakes the waiter, here */
	CHECK(sw.sw_calls == 1 && sw.sw_status == 0);
	ilog_stats(log, &st);
	CHECK(st.is_space_used_bytes == 0);
	CHECK(pos.ip_next_lsn == appended + 1);

	/* The log takes records again, and replay from the checkpoint sees only them. */
	uint64_t first = 0;
	for (unsigned i = 0; i < 20; i++) {
		CHECK(append_gen(log, &r.rg_meta, 2, 2, 8000, 5000 + i, &lsn) == 0);
		if (!first)
			first = lsn;
	}
	CHECK(first == appended + 1);
	CHECK(commit_wait(log, lsn) == 0);
	replay_expect(&r, &pos, pos.ip_next_lsn, 20, NULL, "from the checkpoint");

	/* Space freed between the refusal and the wait: wait_space says retry at once. */
	for (unsigned i = 0; i < 10000; i++)
		if ((rc = append_gen(log, &r.rg_meta, 1, 3, 8000, i, &lsn)) != 0)
			break;
	CHECK(rc == -EAGAIN);
	CHECK(commit_wait(log, ILOG_LSN_ALL) == 0);
	CHECK(ilog_checkpoint(log, 3, &pos) == 0);
	CHECK(ilog_wait_space(log, &sw.sw_w) == ILOG_DONE);
	CHECK(append_gen(log, &r.rg_meta, 1, 4, 8000, 1, &lsn) == 0);
	CHECK(sw.sw_calls == 1);

	/* A queued space waiter is cancelled by close. */
	for (unsigned i = 0; i < 10000; i++)
		if ((rc = append_gen(log, &r.rg_meta, 1, 4, 8000, i, &lsn)) != 0)
			break;
	CHECK(rc == -EAGAIN);
	CHECK(ilog_wait_space(log, &sw.sw_w) == 0);
	ilog_close(log);
	CHECK(sw.sw_calls == 2 && sw.sw_status == -ECANCELED);
	sync_waiter_fini(&sw);
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Crash simulation */

struct crash_commit {
	struct ilog_waiter cc_w;
	uint64_t cc_lsn;
	uint64_t
	    cc_done_events; /* absolute event count when it completed: its flush is among them */
	int cc_status;
	bool cc_done;
	bool cc_gated; /* its callback holds the engine thread until the gate opens */
};

struct crash_ckpt {
	struct ilog_position ck_pos;
	uint64_t ck_events; /* absolute event index from which the position is in effect */
};

#define CRASH_MAX_COMMITS 1024
#define CRASH_MAX_CKPTS 256

/* The run being cut. Event indices are absolute: the recorder forgets what blk_fault_trim folds
 * into its base, and cs_trimmed counts those events. */
struct crash_state {
	struct rig cs_rig;
	struct ilog *cs_log;
	struct meta_vec cs_meta;
	pthread_mutex_t cs_lock;
	pthread_cond_t cs_cv;
	unsigned cs_outstanding;
	bool cs_gate_entered;               /* a gated callback is holding the engine thread */
	struct crash_commit *cs_gate_owner; /* whose callback the gate holds, NULL when open */
	uint64_t cs_trimmed;
	uint64_t cs_verified; /* cuts below this absolute index have been checked */
	struct crash_commit cs_commits[CRASH_MAX_COMMITS];
	unsigned cs_ncommits;
	struct crash_ckpt cs_ckpts[CRASH_MAX_CKPTS];
	unsigned cs_nckpts;
	unsigned cs_images;
	unsigned cs_failures;
	uint64_t cs_replayed;
};

static struct crash_state g_crash;

static uint64_t crash_events(void)
{
	return g_crash.cs_trimmed + blk_fault_event_count(g_crash.cs_rig.rg_devs[0]);
}

static void crash_commit_done(struct ilog_waiter *w, int status)
{
	struct crash_commit *cc = SH_CONTAINER_OF(w, struct crash_commit, cc_w);
	/* On the engine thread, which also serves the fault leaf: the flush that made this commit
	 * durable is already recorded, so this count is at or after it. */
	cc->cc_done_events = crash_events();
	cc->cc_status = status;
	pthread_mutex_lock(&g_crash.cs_lock);
	if (cc->cc_gated) {
		/* Hold the engine thread: the next batch is queued behind us, so what the test
		 * appends and commits now finds a write in flight. */
		g_crash.cs_gate_entered = true;
		pthread_cond_broadcast(&g_crash.cs_cv);
		while (g_crash.cs_gate_owner == cc)
			pthread_cond_wait(&g_crash.cs_cv, &g_crash.cs_lock);
	}
	cc->cc_done = true;
	g_crash.cs_outstanding--;
	pthread_cond_broadcast(&g_crash.cs_cv);
	pthread_mutex_unlock(&g_crash.cs_lock);
}

static void crash_gate_open(void)
{
	pthread_mutex_lock(&g_crash.cs_lock);
	g_crash.cs_gate_owner = NULL;
	pthread_cond_broadcast(&g_crash.cs_cv);
	pthread_mutex_unlock(&g_crash.cs_lock);
}

static void crash_wait_all(void)
{
	crash_gate_open();
	pthread_mutex_lock(&g_crash.cs_lock);
	while (g_crash.cs_outstanding > 0)
		pthread_cond_wait(&g_crash.cs_cv, &g_crash.cs_lock);
	pthread_mutex_unlock(&g_crash.cs_lock);
}

/* A checkpoint as after a txg sync. The event count is read before the checkpoint releases any
 * space: a cut before a write that reuses released space then already replays from this
 * position, whose blocks are intact at every cut from that count on. */
static void crash_checkpoint(uint64_t synced_txg)
{
	VERIFY(g_crash.cs_nckpts < CRASH_MAX_CKPTS);
	struct crash_ckpt *ck = &g_crash.cs_ckpts[g_crash.cs_nckpts++];
	ck->ck_events = crash_events();
	CHECK(ilog_checkpoint(g_crash.cs_log, synced_txg, &ck->ck_pos) == 0);
}

/* Cuts at every event index not yet checked, in every mode (two seeds for the random ones), and
 * replays each image: every record committed before the cut is there, the records form a prefix
 * of the LSN sequence from the position in effect, and none is damaged. Then folds the checked
 * events into the recorder's base so later images stay cheap. The log must be idle. */
static void crash_verify_and_trim(void)
{
	struct blk_dev *dev = g_crash.cs_rig.rg_devs[0];
	uint64_t nevents = crash_events();
	for (uint64_t k = g_crash.cs_verified; k <= nevents; k++) {
		unsigned ck = 0;
		while (ck + 1 < g_crash.cs_nckpts && g_crash.cs_ckpts[ck + 1].ck_events <= k)
			ck++;
		const struct ilog_position *from = &g_crash.cs_ckpts[ck].ck_pos;
		uint64_t required = 0; /* every LSN up to this one must be replayed */
		for (unsigned i = 0; i < g_crash.cs_ncommits; i++)
			if (g_crash.cs_commits[i].cc_done &&
			    g_crash.cs_commits[i].cc_done_events <= k)
				required = SH_MAX(required, g_crash.cs_commits[i].cc_lsn);
		/* Right after a flush nothing is unflushed, so no mode has anything to drop, tear
		 * or reorder: every mode gives the same image, and one replay checks them all. */
		bool settled = k == g_crash.cs_trimmed ||
		               blk_fault_event_is_flush(dev, (size_t)(k - 1 - g_crash.cs_trimmed));
		for (int mode = BLK_FAULT_KEEP_ALL;
		     mode <= (settled ? BLK_FAULT_KEEP_ALL : BLK_FAULT_REORDER); mode++) {
			unsigned seeds = mode <= BLK_FAULT_DROP_ALL ? 1 : 2;
			for (unsigned s = 0; s < seeds; s++) {
				struct blk_dev *image = NULL;
				struct blk_vdev *vdev = NULL;
				if (blk_fault_image(dev, (size_t)(k - g_crash.cs_trimmed),
				                    (enum blk_fault_mode)mode, k * 31 + s,
				                    &image) != 0 ||
				    blk_vdev_create(g_engine, &image, 1, &vdev) != 0) {
					CHECK(false);
					if (image)
						blk_dev_close(image);
					continue;
				}
				g_crash.cs_images++;
				struct collect cl;
				collect_init(&cl, &g_crash.cs_meta, from->ip_next_lsn);
				struct ilog_position end;
				int64_t got = ilog_replay(g_engine, vdev, g_crash.cs_rig.rg_start,
				                          g_crash.cs_rig.rg_bytes, POOL_GUID, from,
				                          collect_visit, &cl, &end);
				uint64_t last =
				    from->ip_next_lsn + (uint64_t)(got > 0 ? got : 0) - 1;
				bool ok = got >= 0 && !cl.cl_bad &&
				          (required < from->ip_next_lsn || last >= required) &&
				          end.ip_next_lsn == last + 1;
				if (!ok && g_crash.cs_failures++ < 5)
					CHECKF(false,
					       "cut %llu mode %d seed %u: from LSN %llu got %lld "
					       "records, need up to %llu (%s)",
					       (unsigned long long)k, mode, s,
					       (unsigned long long)from->ip_next_lsn,
					       (long long)got, (unsigned long long)required,
					       cl.cl_why);
				g_crash.cs_replayed += (uint64_t)(got > 0 ? got : 0);
				blk_vdev_destroy(vdev);
				blk_dev_close(image);
			}
		}
	}
	g_crash.cs_verified = nevents + 1;
	/* The last event is the flush of the last batch: trimming folds every event in. */
	size_t before = blk_fault_event_count(dev);
	blk_fault_trim(dev);
	g_crash.cs_trimmed += before - blk_fault_event_count(dev);
}

static void test_crash_cuts(void)
{
	struct crash_state *cs = &g_crash;
	memset(cs, 0, sizeof(*cs));
	cs->cs_log = rig_open_log(&cs->cs_rig, 1, true, 0, ILOG_REGION_MIN, 0, NULL);
	if (!cs->cs_log)
		return;
	pthread_mutex_init(&cs->cs_lock, NULL);
	pthread_cond_init(&cs->cs_cv, NULL);
	crash_checkpoint(0); /* the initial position, in effect from event 0 */

	uint64_t rng = 2024, txg = 1;
	unsigned gate_groups = 0; /* groups still to append before the gate opens */
	/* Each round is a txg: groups of appends, each group committed without waiting, sometimes
	 * a wait for everything outstanding (so later groups find a flush in flight or not), then a
	 * "txg sync" that counts txg - 1 as synced. A full log forces a sync of everything. Now and
	 * then a commit's callback holds the engine thread while the next groups are appended and
	 * committed, so they certainly meet a write in flight and must wait for the one after. */
	struct ilog_stats st = {0};
	for (unsigned round = 0; (round < 12 || crash_events() < 200 ||
	                          st.is_write_bytes < 5 * cs->cs_rig.rg_bytes / 2) &&
	                         round < 100 && cs->cs_ncommits + 16 < CRASH_MAX_COMMITS;
	     round++) {
		unsigned n = 3 + (unsigned)(splitmix64(&rng) % 6);
		for (unsigned c = 0; c < n; c++) {
			unsigned nrec = 1 + (unsigned)(splitmix64(&rng) % 3);
			uint64_t lsn = 0;
			for (unsigned i = 0; i < nrec; i++) {
				uint64_t x = splitmix64(&rng);
				uint32_t len = (uint32_t)(x % 6000);
				if (x % 100 < 8)
					len = 20000 + (uint32_t)(x % 60000);
				else if (x % 100 < 12)
					len = 300000 + (uint32_t)(x % 400000);
				int rc;
				while ((rc = append_gen(cs->cs_log, &cs->cs_meta,
				                        (uint16_t)(x % 100), txg, len, x, &lsn)) ==
				       -EAGAIN) {
					crash_wait_all();
					crash_checkpoint(txg);
					txg++;
					struct sync_waiter sw;
					sync_waiter_init(&sw);
					if (ilog_wait_space(cs->cs_log, &sw.sw_w) == 0)
						CHECK(sync_waiter_wait(&sw, 1) == 0);
					sync_waiter_fini(&sw);
				}
				CHECK(rc == 0);
			}
			struct crash_commit *cc = &cs->cs_commits[cs->cs_ncommits++];
			cc->cc_lsn = lsn;
			cc->cc_w.iw_done = crash_commit_done;
			bool gate = gate_groups == 0 && splitmix64(&rng) % 4 == 0;
			pthread_mutex_lock(&cs->cs_lock);
			cs->cs_outstanding++;
			if (gate) {
				cc->cc_gated = true;
				cs->cs_gate_owner = cc;
				cs->cs_gate_entered = false;
			}
			pthread_mutex_unlock(&cs->cs_lock);
			int rc = ilog_commit(cs->cs_log, lsn, &cc->cc_w);
			if (rc != 0) {
				CHECK(rc == ILOG_DONE);
				/* Durable already: a count after its flush's is conservative. */
				cc->cc_done_events = crash_events();
				pthread_mutex_lock(&cs->cs_lock);
				cc->cc_done = true;
				cs->cs_outstanding--;
				cs->cs_gate_owner = NULL;
				pthread_mutex_unlock(&cs->cs_lock);
			} else if (gate) {
				pthread_mutex_lock(&cs->cs_lock);
				while (!cs->cs_gate_entered)
					pthread_cond_wait(&cs->cs_cv, &cs->cs_lock);
				pthread_mutex_unlock(&cs->cs_lock);
				gate_groups = 1 + (unsigned)(splitmix64(&rng) % 3);
				continue;
			}
			if (gate_groups > 0 && --gate_groups == 0)
				crash_gate_open();
			if (splitmix64(&rng) % 3 == 0)
				crash_wait_all();
		}
		crash_wait_all();
		crash_checkpoint(txg - 1);
		txg++;
		crash_verify_and_trim();
		ilog_stats(cs->cs_log, &st);
	}
	ilog_close(cs->cs_log);
	uint64_t nevents = crash_events();
	CHECKF(nevents >= 200, "%llu events", (unsigned long long)nevents);
	CHECKF(st.is_write_bytes >= 5 * cs->cs_rig.rg_bytes / 2,
	       "%llu bytes written: the log did not wrap", (unsigned long long)st.is_write_bytes);
	for (unsigned i = 0; i < cs->cs_ncommits; i++)
		CHECK(cs->cs_commits[i].cc_done && cs->cs_commits[i].cc_status == 0);
	CHECK(cs->cs_failures == 0);
	printf("# crash: %llu events, %u commits, %u checkpoints, %u images replayed, %llu "
	       "records, %.1f laps, "
	       "%llu appends refused\n",
	       (unsigned long long)nevents, cs->cs_ncommits, cs->cs_nckpts, cs->cs_images,
	       (unsigned long long)cs->cs_replayed,
	       (double)st.is_write_bytes / (double)cs->cs_rig.rg_bytes,
	       (unsigned long long)st.is_full);
	pthread_cond_destroy(&cs->cs_cv);
	pthread_mutex_destroy(&cs->cs_lock);
	mem_free(cs->cs_meta.mv_recs);
	rig_fini(&cs->cs_rig);
}

/* ---------------------------------------------------------------------------------------------
 * Mirrors */

/* Walks the chain of a memory leaf the way replay does, returning block offsets and sizes. */
static unsigned chain_blocks(struct rig *r, unsigned child, const struct ilog_position *from,
                             uint64_t *offs, uint32_t *sizes, unsigned max)
{
	const uint8_t *bytes = blk_dev_mem_bytes(r->rg_devs[child]);
	uint64_t off = from->ip_offset, seq = from->ip_seq;
	unsigned n = 0;
	while (n < max && ilog_get64(bytes + off + ILOG_BH_MAGIC) == ILOG_MAGIC &&
	       ilog_get64(bytes + off + ILOG_BH_SEQ) == seq) {
		uint32_t b = ilog_get32(bytes + off + ILOG_BH_BYTES);
		offs[n] = off;
		sizes[n++] = b;
		off = ilog_next_offset(r->rg_start, r->rg_start + r->rg_bytes, off + b);
		seq++;
	}
	return n;
}

static void test_mirror(void)
{
	struct rig r;
	struct ilog_position initial;
	struct ilog *log = rig_open_log(&r, 2, false, 0, 4u << 20, 0, &initial);
	if (!log)
		return;
	uint64_t rng = 5, lsn = 0;
	for (unsigned i = 0; i < 300; i++) {
		uint64_t x = splitmix64(&rng);
		CHECK(append_gen(log, &r.rg_meta, 3, 1, (uint32_t)(x % 9000), x, &lsn) == 0);
		if (i % 10 == 9)
			CHECK(commit_wait(log, lsn) == 0);
	}
	ilog_close(log);

	uint8_t *side[2];
	size_t region = r.rg_bytes;
	uint8_t *saved[2];
	for (unsigned c = 0; c < 2; c++) {
		side[c] = blk_dev_mem_bytes(r.rg_devs[c]) + r.rg_start;
		saved[c] = mem_alloc(region);
		VERIFY(saved[c]);
		memcpy(saved[c], side[c], region);
	}
	CHECK(memcmp(saved[0], saved[1], region) == 0); /* every write went to both */
	uint64_t offs[64];
	uint32_t sizes[64];
	unsigned nblocks = chain_blocks(&r, 0, &initial, offs, sizes, 64);
	CHECK(nblocks == 30);

	for (unsigned bad = 0; bad < 2; bad++) {
		uint64_t st = 1000 + bad;
		for (size_t i = 0; i < region; i += 8) {
			uint64_t v = splitmix64(&st);
			memcpy(side[bad] + i, &v, 8);
		}
		replay_expect(&r, &initial, 1, 300, NULL,
		              bad == 0 ? "side 0 garbage" : "side 1 garbage");
		memcpy(side[bad], saved[bad], region);
	}
	/* Each block bad on one side or the other: still every record. */
	for (unsigned b = 0; b < nblocks; b++)
		side[b % 2][offs[b] - r.rg_start + sizes[b] / 2] ^= 0x40;
	replay_expect(&r, &initial, 1, 300, NULL, "each block bad on one side");
	/* Block 7 bad on both sides (its middle on side 1 already): the chain ends before it. */
	side[0][offs[7] - r.rg_start + 100] ^= 0x01;
	replay_expect(&r, &initial, 1, 70, NULL, "block 7 bad on both sides");
	for (unsigned c = 0; c < 2; c++)
		memcpy(side[c], saved[c], region);

	/* One side failing its reads: the other serves them. Both failing: an I/O error. */
	blk_dev_inject_errors(r.rg_devs[0], 1000000, -1);
	CHECK(replay_count(&r, &initial, 1, NULL) == 300);
	blk_dev_inject_errors(r.rg_devs[1], 1000000, -1);
	CHECK(replay_count(&r, &initial, 1, NULL) == -EIO);
	blk_dev_inject_errors(r.rg_devs[0], -1, -1);
	blk_dev_inject_errors(r.rg_devs[1], -1, -1);
	CHECK(replay_count(&r, &initial, 1, NULL) == 300);
	mem_free(saved[0]);
	mem_free(saved[1]);
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Device failure */

static void test_device_failure(void)
{
	struct rig r;
	struct ilog *log = rig_open_log(&r, 1, false, 0, 4u << 20, 0, NULL);
	if (!log)
		return;
	uint64_t lsn = 0;
	CHECK(append_gen(log, &r.rg_meta, 1, 1, 100, 1, &lsn) == 0);
	CHECK(commit_wait(log, lsn) == 0);
	CHECK(append_gen(log, &r.rg_meta, 1, 1, 100, 2, &lsn) == 0);
	struct sync_waiter space;
	sync_waiter_init(&space);
	blk_dev_inject_errors(r.rg_devs[0], -1, 1);
	CHECK(commit_wait(log, lsn) == -EIO);
	CHECK(ilog_commit(log, 1, NULL) == ILOG_DONE); /* durable before the failure */
	CHECK(ilog_commit(log, 2, NULL) == -EIO);
	CHECK(append_gen(log, &r.rg_meta, 1, 1, 100, 3, &lsn) == -EIO);
	CHECK(ilog_wait_space(log, &space.sw_w) == -EIO);
	ilog_close(log);
	CHECK(space.sw_calls == 0);

	/* A pulled device fails the commit waiting for it, and a later one. */
	log = NULL;
	CHECK(ilog_create(r.rg_vdev, r.rg_start, r.rg_bytes, POOL_GUID, &log) == 0);
	if (log) {
		blk_dev_set_pulled(r.rg_devs[0], true);
		CHECK(append_gen(log, &r.rg_meta, 1, 1, 100, 4, &lsn) == 0);
		struct sync_waiter a, b;
		sync_waiter_init(&a);
		sync_waiter_init(&b);
		CHECK(ilog_commit(log, lsn, &a.sw_w) == 0);
		int rc = append_gen(log, &r.rg_meta, 1, 1, 100, 5, &lsn);
		CHECK(rc == 0 || rc == -EIO);
		rc = ilog_commit(log, ILOG_LSN_ALL, &b.sw_w);
		CHECK(rc == 0 || rc == -EIO);
		CHECK(sync_waiter_wait(&a, 1) == -EIO);
		if (rc == 0)
			CHECK(sync_waiter_wait(&b, 1) == -EIO);
		ilog_close(log);
		CHECK(a.sw_calls == 1 && b.sw_calls == (rc == 0 ? 1 : 0));
		sync_waiter_fini(&a);
		sync_waiter_fini(&b);
		blk_dev_set_pulled(r.rg_devs[0], false);
	}
	sync_waiter_fini(&space);
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Close with a commit in flight */

static void test_close_waits(void)
{
	struct rig r;
	struct ilog *log = rig_open_log(&r, 1, false, 0, 4u << 20, 0, NULL);
	if (!log)
		return;
	struct sync_waiter sw[8];
	uint64_t lsn = 0;
	for (unsigned i = 0; i < 8; i++) {
		sync_waiter_init(&sw[i]);
		CHECK(append_gen(log, &r.rg_meta, 1, 1, 300000, i, &lsn) ==
		      0); /* 8 x 300 KB: several blocks */
		CHECK(ilog_commit(log, lsn, &sw[i].sw_w) == 0);
	}
	ilog_close(log); /* waits for all of them */
	for (unsigned i = 0; i < 8; i++) {
		CHECK(sw[i].sw_calls == 1 && sw[i].sw_status == 0);
		sync_waiter_fini(&sw[i]);
	}
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * A stale successor after a reopen */

/* A first writer writes block N (record A) and block N+1 (record B); block N is then lost, as if
 * the crash had come while both were in flight. Replay ends at N; a second writer continues there
 * and appends exactly the same record A, so its block N has the same place, sequence number,
 * predecessor, first LSN and record as the lost one. The stale B must not chain to it. */
static void test_stale_successor(void)
{
	struct rig r;
	struct ilog_position initial, end;
	struct ilog *log = rig_open_log(&r, 1, false, 0, 4u << 20, 0, &initial);
	if (!log)
		return;
	uint64_t lsn = 0;
	CHECK(append_gen(log, &r.rg_meta, 7, 1, 500, 11, &lsn) == 0 && lsn == 1);
	CHECK(commit_wait(log, 1) == 0);
	CHECK(append_gen(log, &r.rg_meta, 8, 1, 600, 12, &lsn) == 0 && lsn == 2);
	CHECK(commit_wait(log, 2) == 0);
	ilog_close(log);
	uint8_t *bytes = blk_dev_mem_bytes(r.rg_devs[0]);
	memset(bytes + r.rg_start, 0, BLK_SECTOR_BYTES); /* block N lost */
	CHECK(replay_count(&r, &initial, 1, &end) == 0);
	CHECK(end.ip_offset == initial.ip_offset && end.ip_seq == 1 && end.ip_next_lsn == 1);

	log = NULL;
	CHECK(ilog_open(r.rg_vdev, r.rg_start, r.rg_bytes, POOL_GUID, &end, &log) == 0);
	if (log) {
		CHECK(append_gen(log, &r.rg_meta, 7, 1, 500, 11, &lsn) == 0 && lsn == 1);
		CHECK(commit_wait(log, 1) == 0);
		ilog_close(log);
	}
	CHECK(ilog_get64(bytes + r.rg_start + BLK_SECTOR_BYTES + ILOG_BH_SEQ) ==
	      2); /* the stale B is there */
	CHECK(replay_count(&r, &initial, 1, &end) == 1);
	CHECK(end.ip_seq == 2 && end.ip_next_lsn == 2);
	rig_fini(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Hostile images */

static int count_visit(void *arg, uint16_t type, uint64_t txg, uint64_t lsn, const void *payload,
                       uint32_t len)
{
	(void)type;
	(void)txg;
	(void)lsn;
	uint64_t *n = arg;
	/* Touch every payload byte so ASan sees any read past the block. */
	const volatile uint8_t *p = payload;
	uint8_t x = 0;
	for (uint32_t i = 0; i < len; i++)
		x ^= p[i];
	(void)x;
	(*n)++;
	return 0;
}

/* Replays the region of r from pos, adding the records visited to *n (their bytes all read). */
static int64_t count_replay(struct rig *r, const struct ilog_position *pos, uint64_t *n)
{
	return ilog_replay(g_engine, r->rg_vdev, r->rg_start, r->rg_bytes, POOL_GUID, pos,
	                   count_visit, n, NULL);
}

/* Gives a block of `bytes` bytes the checksum of what it now holds. */
static void block_reseal(uint8_t *blk, uint32_t bytes)
{
	uint8_t ck[16];
	ilog_block_cksum(blk, bytes, ck);
	memcpy(blk + ILOG_BH_CKSUM, ck, 16);
}

static void test_hostile(void)
{
	struct rig r;
	CHECK(rig_init(&r, 1, false, 0, 4u << 20, 0));
	uint8_t *dev = blk_dev_mem_bytes(r.rg_devs[0]);
	uint8_t *region = dev + r.rg_start;

	/* Random bytes everywhere: a clean, empty replay. */
	uint64_t st = 31337;
	for (uint64_t i = 0; i < r.rg_bytes; i += 8) {
		uint64_t v = splitmix64(&st);
		memcpy(region + i, &v, 8);
	}
	struct ilog_position pos = {
	    .ip_offset = r.rg_start, .ip_seq = 1, .ip_next_lsn = 1, .ip_log_guid = 42};
	uint64_t n = 0;
	CHECK(count_replay(&r, &pos, &n) == 0);
	CHECK(n == 0);

	/* A real log of three blocks over the garbage. */
	struct ilog *log = NULL;
	CHECK(ilog_create(r.rg_vdev, r.rg_start, r.rg_bytes, POOL_GUID, &log) == 0);
	if (!log)
		return;
	ilog_checkpoint_position(log, 0, &pos);
	uint64_t lsn = 0;
	for (unsigned b = 0; b < 3; b++) {
		for (unsigned i = 0; i < 4; i++)
			CHECK(append_gen(log, &r.rg_meta, 1, 1, 700 + 300 * i, b * 10 + i, &lsn) ==
			      0);
		CHECK(commit_wait(log, lsn) == 0);
	}
	ilog_close(log);
	n = 0;
	CHECK(count_replay(&r, &pos, &n) == 12);
	uint64_t offs[8];
	uint32_t sizes[8];
	CHECK(chain_blocks(&r, 0, &pos, offs, sizes, 8) == 3);
	uint8_t *blk1 = dev + offs[1];
	uint32_t b1 = sizes[1];
	uint8_t *saved = mem_alloc(b1);
	VERIFY(saved);
	memcpy(saved, blk1, b1);

	/* Block 2's second record claims a length past the block's end, with a valid checksum. */
	uint8_t *rec0 = blk1 + ILOG_BLOCK_HEADER_BYTES;
	uint8_t *rec1 = rec0 + ilog_record_bytes(ilog_get32(rec0 + ILOG_RH_LEN));
	ilog_put32(rec1 + ILOG_RH_LEN, b1 + 4096);
	block_reseal(blk1, b1);
	n = 0;
	CHECK(count_replay(&r, &pos, &n) == -EIO);
	CHECK(n == 4); /* the first block's records, none of the bad block's */
	ilog_put32(rec1 + ILOG_RH_LEN, UINT32_MAX - 3);
	block_reseal(blk1, b1);
	CHECK(count_replay(&r, &pos, &n) == -EIO);

	/* A header whose size is nonsense cannot be checksummed: the chain ends there. */
	memcpy(blk1, saved, b1);
	ilog_put32(blk1 + ILOG_BH_BYTES, 3 * ILOG_BLOCK_MAX);
	n = 0;
	CHECK(count_replay(&r, &pos, &n) == 4);
	ilog_put32(blk1 + ILOG_BH_BYTES, 100);
	CHECK(count_replay(&r, &pos, &n) == 4);

	/* Fuzz the middle block: random bytes changed, checksum fixed up or not. Replay must stop
	 * cleanly or fail with -EIO, never crash, never visit more than the good records. */
	uint64_t fz = 4242;
	unsigned stopped = 0, errors = 0, full = 0;
	enum log_level level = log_get_level();
	log_set_level(LOG_ERROR); /* each -EIO logs a warning; thousands are expected here */
	for (unsigned iter = 0; iter < 3000; iter++) {
		memcpy(blk1, saved, b1);
		unsigned flips = 1 + (unsigned)(splitmix64(&fz) % 4);
		for (unsigned f = 0; f < flips; f++) {
			uint64_t x = splitmix64(&fz);
			/* Mostly the header and records, sometimes anywhere. */
			uint32_t at = (uint32_t)(x % 4 ? (x >> 8) % 4096 : (x >> 8) % b1);
			blk1[at] = (uint8_t)(x >> 40);
		}
		if (splitmix64(&fz) % 4 != 0) {
			block_reseal(blk1, b1);
		}
		n = 0;
		int64_t got = count_replay(&r, &pos, &n);
		if (got == -EIO)
			errors++;
		else if (got == 12)
			full++;
		else if (got >= 4 && got < 12)
			stopped++;
		else
			CHECKF(false, "iteration %u: replay returned %lld", iter, (long long)got);
		CHECK(got < 0 || (uint64_t)got == n);
	}
	log_set_level(level);
	printf("# fuzz: %u clean stops, %u -EIO, %u unchanged\n", stopped, errors, full);
	CHECK(stopped > 0 && errors > 0);
	mem_free(saved);
	rig_fini(&r);
}

/* Runs a case and reports its time, so a slow case shows in the log. */
#define RUN_TIMED(fn)                                                                              \
	do {                                                                                       \
		uint64_t t0_ = clock_monotonic_ns();                                               \
		TAP_RUN(fn);                                                                       \
		printf("# %s: %llu ms\n", #fn,                                                     \
		       (unsigned long long)((clock_monotonic_ns() - t0_) / 1000000));              \
	} while (0)

int main(void)
{
	pattern_init();
	if (blk_engine_create(256, &g_engine) != 0) {
		printf("not ok - blk_engine_create\n");
		return 1;
	}
	RUN_TIMED(test_position_codec);
	RUN_TIMED(test_roundtrip);
	RUN_TIMED(test_bad_arguments);
	RUN_TIMED(test_group_commit);
	RUN_TIMED(test_group_commit_pipeline);
	RUN_TIMED(test_backlog);
	RUN_TIMED(test_wraparound);
	RUN_TIMED(test_full_log);
	RUN_TIMED(test_crash_cuts);
	RUN_TIMED(test_mirror);
	RUN_TIMED(test_device_failure);
	RUN_TIMED(test_close_waits);
	RUN_TIMED(test_stale_successor);
	RUN_TIMED(test_hostile);
	blk_engine_destroy(g_engine);
	mem_free(g_pattern);
	return tap_finish();
}
