/* test_pool_crash.c: crash consistency of the pool. A multi-threaded key-value workload (puts,
 * overwrites, deletes; each change logged and acknowledged when its log commit completes) runs on
 * fault-recording leaves; then, for hundreds of cut points, images of every leaf at one instant are
 * imported, checked (pool_check) and compared with the workload.
 *
 * Cutting several leaves at one instant: every leaf is a fault leaf served by the pool's single
 * blk engine thread, which records each completed write and flush with a number from one
 * process-wide counter (blk_fault_global_seq). A cut at number G keeps, on every leaf, exactly the
 * events numbered below G (blk_fault_events_before), i.e. what had completed everywhere when the
 * engine thread handed out G; the fault modes then drop, tear or reorder each leaf's writes since
 * its last flush before the cut, independently per leaf, as independent drives would (the cuts
 * and the images: crash_plan and crash_cut_import in pool_fs_fixture.h).
 *
 * What must hold for every cut and mode:
 *   - import succeeds and pool_check finds no problem;
 *   - the recovered contents equal the state after some prefix of the operations in log order
 *     (LSN order, which is the order they were applied in: each operation and its log append
 *     happen under the pool lock), and that prefix includes every operation acknowledged before
 *     the cut. An acknowledgement is before the cut when the global number read in the commit
 *     callback (so after the log's flush was recorded) is at most G;
 *   - no value is torn: every value present is exactly one written version.
 * Cut points per configuration: three quarters just before flush events (of any leaf), spread
 * over the whole run, the rest at random instants; each is tried in every fault mode, with a seed
 * per cut and mode. By default 56 for each of the three main configurations and 32 for the full
 * log one (200 cut points, 1000 images); SHALE_CRASH_CUTS=N sets N for every configuration. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fs_fixture.h"
#include "pool_kv.h"
#include "pool/pool.h"
#include "tap.h"

#define NTHREADS 4u
#define KEYS_PER_THREAD 48u
#define NKEYS (NTHREADS * KEYS_PER_THREAD)
#define WINDOW 4u /* commits in flight per thread */

/* ---- values: key, version and length in a header, then bytes derived from them ---- */

#define VAL_HDR 12u

/* One value in g_big_every is long (a data block, and a long log record) of up to g_big_max
 * bytes; the others are short. Set per configuration before its workload. */
static unsigned g_big_every = 10, g_big_max = 12000;

static uint32_t val_len(unsigned k, unsigned v)
{
	uint64_t s = (uint64_t)k * 7919u + v;
	uint64_t r = rng_next(&s);
	return VAL_HDR + ((r % g_big_every == 0) ? (uint32_t)(KV_INLINE_MAX + r % g_big_max)
	                                         : (uint32_t)(r % 200));
}

static void val_make(uint8_t *buf, unsigned k, unsigned v)
{
	uint32_t len = val_len(k, v);
	memcpy(buf, &k, 4);
	memcpy(buf + 4, &v, 4);
	memcpy(buf + 8, &len, 4);
	uint64_t s = ((uint64_t)k << 32) ^ v;
	for (uint32_t i = VAL_HDR; i < len; i += 8) {
		uint64_t r = rng_next(&s);
		memcpy(buf + i, &r, SH_MIN(8u, len - i));
	}
}

/* The version a value read back for key k is, or 0 when it is not exactly one written version. */
static unsigned val_version(const uint8_t *buf, uint32_t len, unsigned k)
{
	static _Thread_local uint8_t want[KV_VAL_MAX];
	if (len < VAL_HDR)
		return 0;
	unsigned kk, v;
	uint32_t l;
	memcpy(&kk, buf, 4);
	memcpy(&v, buf + 4, 4);
	memcpy(&l, buf + 8, 4);
	if (kk != k || v == 0 || l != len || val_len(k, v) != len)
		return 0;
	val_make(want, k, v);
	return memcmp(want, buf, len) == 0 ? v : 0;
}

/* ---- the workload ---- */

struct op {
	unsigned o_key;
	unsigned o_ver;             /* 0: a delete */
	_Atomic uint64_t o_ack_seq; /* global number when acknowledged; ACK_NONE before */
};

struct crash_cfg {
	const char *cc_name;
	unsigned cc_nleaves; /* data leaves */
	bool cc_mirror;
	unsigned cc_nlog; /* log leaves */
	uint64_t cc_leaf_bytes;
	uint64_t cc_log_bytes;
	unsigned cc_big_every; /* one value in this many is long */
	unsigned cc_big_max;
	uint32_t cc_txg_ms;     /* the txg interval during the workload */
	unsigned cc_sync_every; /* worker 0 asks for a sync every this many operations (0: never) */
};

struct crash_run {
	const struct crash_cfg *cr_cfg;
	struct pool *cr_pool;
	struct kv *cr_kv;
	struct blk_dev *cr_leaves[8];
	unsigned cr_nleaves; /* data then log leaves */
	struct op *cr_ops;   /* indexed by LSN */
	uint64_t cr_nops_cap;
	_Atomic uint64_t cr_max_lsn;
	_Atomic unsigned cr_next_ver;
	_Atomic unsigned cr_errors;
	uint64_t cr_start_seq;
	unsigned cr_ops_per_thread;
};

struct commit_slot {
	struct ilog_waiter cs_w;
	struct worker *cs_worker;
	uint64_t cs_lsn;
	bool cs_busy;
};

struct worker {
	struct crash_run *wk_run;
	unsigned wk_id;
	pthread_mutex_t wk_lock;
	pthread_cond_t wk_cond;
	unsigned wk_inflight;
	struct commit_slot wk_slots[WINDOW];
};

static void crash_ack(struct crash_run *cr, uint64_t lsn, int status, uint64_t seq)
{
	if (status != 0) {
		atomic_fetch_add(&cr->cr_errors, 1);
		printf("#   commit of %" PRIu64 " failed: %s\n", lsn, sh_strerror(status));
		return;
	}
	atomic_store(&cr->cr_ops[lsn].o_ack_seq, seq);
}

static void crash_commit_done(struct ilog_waiter *w, int status)
{
	/* On the engine (or sync) thread, after the log's flush completed and was recorded. */
	uint64_t seq = blk_fault_global_seq();
	struct commit_slot *cs = SH_CONTAINER_OF(w, struct commit_slot, cs_w);
	struct worker *wk = cs->cs_worker;
	crash_ack(wk->wk_run, cs->cs_lsn, status, seq);
	pthread_mutex_lock(&wk->wk_lock);
	cs->cs_busy = false;
	wk->wk_inflight--;
	pthread_cond_signal(&wk->wk_cond);
	pthread_mutex_unlock(&wk->wk_lock);
}

static void *crash_worker(void *arg)
{
	struct worker *wk = arg;
	struct crash_run *cr = wk->wk_run;
	uint64_t seed = 0xc0ffee + wk->wk_id;
	bool present[KEYS_PER_THREAD] = {false};
	static _Thread_local uint8_t buf[KV_VAL_MAX];
	for (unsigned i = 0; i < cr->cr_ops_per_thread; i++) {
		unsigned slot = (unsigned)(rng_next(&seed) % KEYS_PER_THREAD);
		unsigned k = wk->wk_id * KEYS_PER_THREAD + slot;
		char key[16];
		uint32_t klen = (uint32_t)snprintf(key, sizeof(key), "k%05u", k);
		bool del = present[slot] && rng_next(&seed) % 4 == 0;
		unsigned v = del ? 0 : atomic_fetch_add(&cr->cr_next_ver, 1);
		uint64_t lsn = 0;
		int rc;
		if (del) {
			rc = kv_exec(cr->cr_kv, KV_OP_DEL, key, klen, NULL, 0, NULL, 0, NULL, &lsn,
			             NULL);
		} else {
			val_make(buf, k, v);
			rc = kv_exec(cr->cr_kv, KV_OP_PUT, key, klen, buf, val_len(k, v), NULL, 0,
			             NULL, &lsn, NULL);
		}
		if (rc != 0 || lsn == 0 || lsn >= cr->cr_nops_cap) {
			atomic_fetch_add(&cr->cr_errors, 1);
			printf("#   worker %u op %u: %s (lsn %" PRIu64 ")\n", wk->wk_id, i,
			       sh_strerror(rc), lsn);
			break;
		}
		present[slot] = !del;
		cr->cr_ops[lsn].o_key = k;
		cr->cr_ops[lsn].o_ver = v;
		uint64_t prev = atomic_load(&cr->cr_max_lsn);
		while (lsn > prev && !atomic_compare_exchange_weak(&cr->cr_max_lsn, &prev, lsn))
			;
		/* an acknowledgement window of WINDOW commits */
		pthread_mutex_lock(&wk->wk_lock);
		while (wk->wk_inflight == WINDOW)
			pthread_cond_wait(&wk->wk_cond, &wk->wk_lock);
		struct commit_slot *cs = NULL;
		for (unsigned s = 0; s < WINDOW; s++) {
			if (!wk->wk_slots[s].cs_busy) {
				cs = &wk->wk_slots[s];
				break;
			}
		}
		cs->cs_busy = true;
		cs->cs_lsn = lsn;
		wk->wk_inflight++;
		pthread_mutex_unlock(&wk->wk_lock);
		rc = pool_log_commit(cr->cr_pool, lsn, &cs->cs_w);
		if (rc != 0) {
			uint64_t seq = blk_fault_global_seq();
			crash_ack(cr, lsn, rc == ILOG_DONE ? 0 : rc, seq);
			pthread_mutex_lock(&wk->wk_lock);
			cs->cs_busy = false;
			wk->wk_inflight--;
			pthread_mutex_unlock(&wk->wk_lock);
		}
		unsigned every = cr->cr_cfg->cc_sync_every;
		if (wk->wk_id == 0 && every && i % every == every - 1)
			pool_txg_request_sync(cr->cr_pool);
	}
	pthread_mutex_lock(&wk->wk_lock);
	while (wk->wk_inflight > 0)
		pthread_cond_wait(&wk->wk_cond, &wk->wk_lock);
	pthread_mutex_unlock(&wk->wk_lock);
	return NULL;
}

static struct pool_open_opts crash_opts(void)
{
	struct pool_open_opts o = {0};
	o.po_attach = kv_attach;
	o.po_txg_interval_ms = 60000;
	o.po_arc_max_bytes = 8 * MIB;
	return o;
}

/* Creates the pool and runs the workload; the pool is closed without export at the end. */
static bool crash_run_workload(struct crash_run *cr)
{
	const struct crash_cfg *cfg = cr->cr_cfg;
	cr->cr_nleaves = cfg->cc_nleaves + cfg->cc_nlog;
	for (unsigned i = 0; i < cr->cr_nleaves; i++)
		VERIFY(blk_dev_create_fault(i < cfg->cc_nleaves ? cfg->cc_leaf_bytes
		                                                : cfg->cc_log_bytes,
		                            &cr->cr_leaves[i]) == 0);
	struct pool_open_opts o = crash_opts();
	o.po_txg_interval_ms = cfg->cc_txg_ms;
	g_big_every = cfg->cc_big_every;
	g_big_max = cfg->cc_big_max;
	struct pool_create_args a = {.pc_name = "crash",
	                             .pc_layout =
	                                 cfg->cc_mirror ? POOL_LAYOUT_MIRROR : POOL_LAYOUT_STRIPE,
	                             .pc_opts = &o};
	int rc = pool_create_on_devs(&a, cr->cr_leaves, cfg->cc_nleaves,
	                             cr->cr_leaves + cfg->cc_nleaves, cfg->cc_nlog, &cr->cr_pool);
	if (rc != 0) {
		printf("#   create: %s\n", sh_strerror(rc));
		return false;
	}
	rc = pool_ds_create(cr->cr_pool, "kv", NULL);
	if (rc == 0)
		rc = kv_open(cr->cr_pool, "kv", &cr->cr_kv);
	if (rc != 0) {
		printf("#   dataset: %s\n", sh_strerror(rc));
		pool_close(cr->cr_pool);
		return false;
	}
	cr->cr_start_seq = blk_fault_global_seq();
	cr->cr_nops_cap = (uint64_t)NTHREADS * cr->cr_ops_per_thread + 16;
	cr->cr_ops = calloc(cr->cr_nops_cap, sizeof(*cr->cr_ops));
	VERIFY(cr->cr_ops != NULL);
	for (uint64_t i = 0; i < cr->cr_nops_cap; i++)
		atomic_init(&cr->cr_ops[i].o_ack_seq, ACK_NONE);
	atomic_init(&cr->cr_next_ver, 1);
	struct worker wk[NTHREADS];
	pthread_t th[NTHREADS];
	for (unsigned t = 0; t < NTHREADS; t++) {
		memset(&wk[t], 0, sizeof(wk[t]));
		wk[t].wk_run = cr;
		wk[t].wk_id = t;
		VERIFY(pthread_mutex_init(&wk[t].wk_lock, NULL) == 0);
		VERIFY(pthread_cond_init(&wk[t].wk_cond, NULL) == 0);
		for (unsigned s = 0; s < WINDOW; s++) {
			wk[t].wk_slots[s].cs_w.iw_done = crash_commit_done;
			wk[t].wk_slots[s].cs_worker = &wk[t];
		}
		VERIFY(pthread_create(&th[t], NULL, crash_worker, &wk[t]) == 0);
	}
	for (unsigned t = 0; t < NTHREADS; t++) {
		VERIFY(pthread_join(th[t], NULL) == 0);
		pthread_cond_destroy(&wk[t].wk_cond);
		pthread_mutex_destroy(&wk[t].wk_lock);
	}
	kv_close(cr->cr_kv);
	struct pool_status *st = mem_alloc(sizeof(*st));
	pool_status(cr->cr_pool, st);
	printf("#   %s: %" PRIu64 " operations, %" PRIu64 " txgs, %" PRIu64
	       " log flushes (%.1f records each), %" PRIu64 " appends waited for log space\n",
	       cfg->cc_name, atomic_load(&cr->cr_max_lsn), st->ps_syncs,
	       st->ps_log_stats.is_flushes, st->ps_log_stats.is_records_per_flush,
	       st->ps_log_stats.is_full);
	mem_free(st);
	pool_close(cr->cr_pool); /* the crash: whatever was not durable is lost */
	cr->cr_pool = NULL;
	return atomic_load(&cr->cr_errors) == 0;
}

/* ---- cutting and verifying ---- */

struct verify_stats {
	unsigned vs_images;
	unsigned vs_failed;
	uint64_t vs_replayed_total;
};

/* Imports the images at cut g in mode/seed and verifies them. Returns true when all holds. */
static bool crash_verify_cut(struct crash_run *cr, uint64_t g, enum blk_fault_mode mode,
                             uint64_t seed, struct verify_stats *vs)
{
	struct blk_dev *img[8] = {NULL};
	vs->vs_images++;
	struct pool_open_opts o = crash_opts();
	struct pool *p = NULL;
	bool ok = crash_cut_import(cr->cr_leaves, cr->cr_nleaves, g, mode, seed, &o, img, &p);
	if (p == NULL)
		goto out;
	/* the recovered contents */
	unsigned got[NKEYS];
	struct kv *kv = NULL;
	int rc = kv_open(p, "kv", &kv);
	if (rc != 0) {
		printf("#   cut %" PRIu64 ": dataset: %s\n", g, sh_strerror(rc));
		ok = false;
		goto out_close;
	}
	static uint8_t buf[KV_VAL_MAX];
	for (unsigned k = 0; k < NKEYS; k++) {
		char key[16];
		uint32_t klen = (uint32_t)snprintf(key, sizeof(key), "k%05u", k), len = 0;
		rc = kv_exec(kv, KV_OP_GET, key, klen, NULL, 0, buf, sizeof(buf), &len, NULL, NULL);
		if (rc == -ENOENT) {
			got[k] = 0;
		} else if (rc != 0 || (got[k] = val_version(buf, len, k)) == 0) {
			printf("#   cut %" PRIu64 " mode %d: key %u: %s\n", g, mode, k,
			       rc ? sh_strerror(rc) : "a value that is no written version (torn?)");
			ok = false;
			got[k] = UINT32_MAX;
		}
	}
	kv_close(kv);
	/* the prefix: at least every operation acknowledged before the cut */
	uint64_t nops = atomic_load(&cr->cr_max_lsn);
	uint64_t need = 0;
	for (uint64_t l = 1; l <= nops; l++) {
		if (atomic_load(&cr->cr_ops[l].o_ack_seq) <= g)
			need = l;
	}
	unsigned model[NKEYS] = {0};
	for (uint64_t l = 1; l <= need; l++)
		model[cr->cr_ops[l].o_key] = cr->cr_ops[l].o_ver;
	unsigned mismatches = 0;
	for (unsigned k = 0; k < NKEYS; k++)
		mismatches += model[k] != got[k];
	uint64_t m = need;
	while (mismatches > 0 && m < nops) {
		m++;
		unsigned k = cr->cr_ops[m].o_key;
		mismatches -= model[k] != got[k];
		model[k] = cr->cr_ops[m].o_ver;
		mismatches += model[k] != got[k];
	}
	if (mismatches != 0) {
		printf("#   cut %" PRIu64 " mode %d seed %" PRIu64
		       ": the contents are no prefix of at least %" PRIu64 " operations\n",
		       g, mode, seed, need);
		ok = false;
	} else {
		vs->vs_replayed_total += m;
	}
out_close:
	pool_close(p);
out:
	for (unsigned i = 0; i < cr->cr_nleaves; i++)
		blk_dev_close(img[i]);
	if (!ok)
		vs->vs_failed++;
	return ok;
}

static unsigned g_total_cuts, g_total_images;

static void crash_config(const struct crash_cfg *cfg, unsigned ops_per_thread,
                         unsigned default_cuts)
{
	struct crash_run *cr = calloc(1, sizeof(*cr));
	VERIFY(cr != NULL);
	cr->cr_cfg = cfg;
	cr->cr_ops_per_thread = ops_per_thread;
	bool ok = crash_run_workload(cr);
	CHECKF(ok, "%s: the workload failed", cfg->cc_name);
	if (!ok)
		goto out;
	/* Cut points: just before flush events (all leaves), plus random instants. */
	struct crash_plan plan;
	crash_plan_init(&plan, cr->cr_leaves, cr->cr_nleaves, cr->cr_start_seq, default_cuts,
	                0x5157);
	struct verify_stats vs = {0};
	unsigned cuts = 0;
	for (unsigned c = 0; c < plan.cp_ncuts; c++) {
		uint64_t g = crash_plan_cut(&plan, c);
		cuts++;
		for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER; mode++) {
			bool okc = crash_verify_cut(cr, g, (enum blk_fault_mode)mode,
			                            c * 7 + (uint64_t)mode, &vs);
			if (!okc && vs.vs_failed > 8)
				break;
		}
		if (vs.vs_failed > 8)
			break;
	}
	g_total_cuts += cuts;
	g_total_images += vs.vs_images;
	CHECKF(vs.vs_failed == 0, "%s: %u of %u crash images failed", cfg->cc_name, vs.vs_failed,
	       vs.vs_images);
	printf(
	    "#   %s: %u cut points (%zu flush events available), %u images, all in 5 fault modes\n",
	    cfg->cc_name, cuts, plan.cp_nflush, vs.vs_images);
	crash_plan_fini(&plan);
out:
	for (unsigned i = 0; i < cr->cr_nleaves; i++)
		blk_dev_close(cr->cr_leaves[i]);
	free(cr->cr_ops);
	free(cr);
}

static void test_crash_single_leaf(void)
{
	static const struct crash_cfg cfg = {"single leaf", 1, false, 0, 8 * MIB, 0, 10,
	                                     12000,         2, 13};
	crash_config(&cfg, 300, 56);
}

static void test_crash_log_vdev(void)
{
	static const struct crash_cfg cfg = {
	    "leaf and log vdev", 1, false, 1, 8 * MIB, 4 * MIB, 10, 12000, 2, 13};
	crash_config(&cfg, 300, 56);
}

static void test_crash_mirror(void)
{
	static const struct crash_cfg cfg = {"mirror", 2, true, 0, 8 * MIB, 0, 10, 12000, 2, 13};
	crash_config(&cfg, 300, 56);
}

/* Long records into a small log with rare txgs: the log fills again and again, records wait in
 * memory for space (and their commits with them). */
static void test_crash_full_log(void)
{
	static const struct crash_cfg cfg = {"full log", 1, false, 1,   24 * MIB,
	                                     4 * MIB,    2, 60000, 200, 0};
	crash_config(&cfg, 150, 32);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_crash_single_leaf);
	TAP_RUN(test_crash_log_vdev);
	TAP_RUN(test_crash_mirror);
	TAP_RUN(test_crash_full_log);
	printf("# %u cut points, %u crash images in all\n", g_total_cuts, g_total_images);
	return tap_finish();
}
