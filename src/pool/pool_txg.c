/* pool_txg.c: transaction groups: the sync thread and its four phases (pool.c's theory), the
 * triggers, waiting for a txg, the throttle, and the history of the txgs written (each one's
 * cause, size and phase times, kept in a ring of POOL_TXG_HISTORY under p_state_lock).
 *
 * The sync thread sleeps on p_state_cv until a sync is requested (p_sync_requested above the
 * durable txg), the txg interval has passed, the log has freed space for waiting records, or the
 * pool stops. It is the only thread that writes txgs once the pool is open (pool_create writes
 * txg 1 itself before starting it), so syncs never overlap. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool/pool_impl.h"

/* ---------------------------------------------------------------------------------------------
 * Dirty state */

static uint64_t pool_owner_dirty(const struct pool_ds *ds)
{
	return ds->ds_ops && ds->ds_ops->do_dirty_bytes ? ds->ds_ops->do_dirty_bytes(ds->ds_owner)
	                                                : 0;
}

uint64_t pool_dirty_bytes(struct pool *p)
{
	uint64_t sum = btree_dirty_bytes(p->p_mos);
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next)
		sum += btree_dirty_bytes(ds->ds_tree) + pool_owner_dirty(ds) + ds->ds_kill_mem;
	return sum;
}

/* Under p_lock: nothing for a txg to write. */
static bool pool_clean(struct pool *p)
{
	if (btree_is_dirty(p->p_mos) || space_is_dirty(p->p_space) ||
	    p->p_log_next_lsn != p->p_log_lsn_at_sync || pool_snap_reqs_pending(p))
		return false;
	/* A leaf faulted or mended since the last uberblock: the next one must say so. */
	uint64_t guids[POOL_UB_STALE_MAX], digest;
	(void)pool_stale_leaves(p, guids, &digest);
	if (digest != p->p_stale_digest)
		return false;
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (ds->ds_record_dirty || btree_is_dirty(ds->ds_tree) || pool_owner_dirty(ds) > 0 ||
		    ds->ds_nkills > 0)
			return false;
	}
	return true;
}

/* ---------------------------------------------------------------------------------------------
 * Requests and waiting */

void pool_sync_request_locked(struct pool *p, uint64_t txg)
{
	if (txg > p->p_sync_requested) {
		if (p->p_sync_requested <= p->p_synced_txg)
			p->p_sync_requested_ns = clock_monotonic_ns(); /* none was waiting */
		p->p_sync_requested = txg;
		pthread_cond_broadcast(&p->p_state_cv);
	}
}

void pool_txg_request_sync(struct pool *p)
{
	pthread_mutex_lock(&p->p_lock);
	uint64_t txg = p->p_open_txg;
	pthread_mutex_lock(&p->p_state_lock);
	pool_sync_request_locked(p, txg);
	pthread_mutex_unlock(&p->p_state_lock);
	pthread_mutex_unlock(&p->p_lock);
}

uint64_t pool_synced_txg(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	uint64_t t = p->p_synced_txg;
	pthread_mutex_unlock(&p->p_state_lock);
	return t;
}

int pool_txg_wait_synced(struct pool *p, uint64_t txg)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (txg == 0) {
		pthread_mutex_lock(&p->p_lock);
		txg = p->p_open_txg;
		pthread_mutex_unlock(&p->p_lock);
	}
	int rc = 0;
	pthread_mutex_lock(&p->p_state_lock);
	pool_sync_request_locked(p, txg);
	while (p->p_synced_txg < txg) {
		if (atomic_load(&p->p_suspended)) {
			rc = -EIO;
			break;
		}
		if (p->p_stopping || p->p_closing) {
			rc = -ECANCELED;
			break;
		}
		pthread_cond_wait(&p->p_state_cv, &p->p_state_lock);
	}
	pthread_mutex_unlock(&p->p_state_lock);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Memory (pool.c's memory model) */

void pool_mem_reserve_locked(struct pool *p, uint64_t dirty)
{
	uint64_t reserved = dirty + p->p_sync_bytes + atomic_load(&p->p_sealed_bytes) +
	                    (p->p_log ? ilog_buffer_bytes(p->p_log) : 0);
	p->p_reserved_bytes = reserved;
	arc_set_reserved(p->p_arc, reserved);
}

/* After a txg, at most every POOL_TRIM_INTERVAL_NS, free heap pages go back to the system when
 * the process is resident above three quarters of the memory limit and the heap holds more than
 * POOL_TRIM_FREE_DIVISOR-th of the memory limit free. */
#define POOL_TRIM_INTERVAL_NS (100000000ull)
#define POOL_TRIM_FREE_DIVISOR 8u

/* The C library keeps freed memory resident, and holes between live blocks of one size cannot
 * always serve blocks of another (a cache of small blocks, then a long write of 128 KiB ones):
 * resident free memory then adds to what the memory model bounds. glibc's malloc_trim returns
 * the whole free pages inside the heap to the system. It is done only when the free bytes pass
 * the threshold, because the pages of a hole that the next txg uses again fault back in (about
 * 2.5 us each here): when the heap's free memory stays below the threshold, nothing is trimmed;
 * when a workload keeps freeing more, a trim every POOL_TRIM_INTERVAL_NS returns it. Only one pool trims at a time;
 * the interval is per pool. Sync thread. */
/* The process's resident bytes (/proc/self/statm), or 0 when it cannot be read. */
static uint64_t pool_resident_bytes(void)
{
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[128];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	(void)close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	unsigned long long size_pages = 0, resident_pages = 0;
	if (sscanf(buf, "%llu %llu", &size_pages, &resident_pages) != 2)
		return 0;
	long page = sysconf(_SC_PAGESIZE);
	return (uint64_t)resident_pages * (uint64_t)(page > 0 ? page : 4096);
}

static void pool_mem_trim(struct pool *p)
{
#ifdef __GLIBC__
	uint64_t now = clock_monotonic_ns();
	if (now - p->p_trim_ns < POOL_TRIM_INTERVAL_NS)
		return;
	p->p_trim_ns = now;
	/* mallinfo2 walks every free chunk of the heap (1% of the server's CPU under sfs2008 with
	 * a fragmented heap): only worth it when the process is resident above three quarters of
	 * the memory limit. The bound needs the trims before the limit is reached, but not much
	 * sooner: a trim splits the heap's huge pages around the holes it returns (server.c, "The
	 * heap in huge pages"), and the blocks written into the holes afterwards go out slowly
	 * the first time. Trimming from half the limit, three rounds of a 1 GiB seq on a 2 GiB
	 * limit read 4,176, 1,647 and 1,305 MB/s from the cache (huge pages 1,164, 938, 852 MiB);
	 * from three quarters, in two runs, 2,410, 2,290, 3,321 (huge pages 1,172 MiB throughout)
	 * and 2,866, 4,227, 3,970. */
	uint64_t resident = pool_resident_bytes();
	if (resident != 0 && resident <= p->p_opts.po_arc_max_bytes / 4 * 3)
		return;
	struct mallinfo2 mi = mallinfo2();
	if (mi.fordblks < p->p_opts.po_arc_max_bytes / POOL_TRIM_FREE_DIVISOR)
		return;
	(void)malloc_trim(0);
#else
	(void)p;
#endif
}

/* One debug line per txg: where the memory is (MiB), and what the C library's allocator holds,
 * which shows fragmentation (heap bytes in use against bytes obtained from the system). */
static void pool_mem_log(struct pool *p, uint64_t txg, uint64_t txg_dirty, uint64_t build_ns,
                         uint64_t sync_ns)
{
	struct arc_stats as;
	arc_stats(p->p_arc, &as);
	pthread_mutex_lock(&p->p_lock);
	uint64_t reserved = p->p_reserved_bytes, dirty = pool_dirty_bytes(p);
	pthread_mutex_unlock(&p->p_lock);
	uint64_t log_bytes = p->p_log ? ilog_buffer_bytes(p->p_log) : 0;
	char heap[128] = "";
#ifdef __GLIBC__
	struct mallinfo2 mi = mallinfo2();
	snprintf(heap, sizeof(heap), "; heap %zu (in use %zu, free %zu), mmapped %zu",
	         mi.arena >> 20, mi.uordblks >> 20, mi.fordblks >> 20, mi.hblkhd >> 20);
#endif
	log_debug("pool %s: txg %" PRIu64 " (%" PRIu64 " dirty) built in %" PRIu64
	          " us under the lock, synced in %" PRIu64 " ms; arc %" PRIu64 " (held %" PRIu64 ", target %" PRIu64 " of %" PRIu64
	          "), reserved %" PRIu64 ", dirty now %" PRIu64 ", log %" PRIu64 "%s",
	          p->p_name, txg, txg_dirty >> 20, build_ns / 1000, sync_ns / 1000000, as.as_size_bytes >> 20,
	          as.as_held_bytes >> 20, as.as_target_bytes >> 20, as.as_max_bytes >> 20,
	          reserved >> 20, dirty >> 20, log_bytes >> 20, heap);
}

/* ---------------------------------------------------------------------------------------------
 * Throttling */

/* Under p_lock: whether the dirty bytes call for a txg. At the dirty limit always; from
 * po_dirty_sync_bytes (a quarter of it) on only while the sync thread is idle and has been for
 * as long as its last txg took, so that the quarter trigger keeps it busy at most half the time:
 * a writer faster than the devices (a receive) gets txgs nearer the limit's size, whose fixed
 * costs (the tree nodes, the flush, the uberblock) it would otherwise pay four times as often (a
 * receive ran 30% slower with every txg at a quarter). Three times as long made the receive as
 * fast as with txgs at the limit, but a larger txg takes longer than in proportion (sealing ran
 * 7 ms for 1.6 MiB of blocks, 37 for 4 MiB, under sfs2008), so the wait grew with each txg and
 * at 10,000 sfs2008 ops/s txgs settled at 17 MiB and a create took 139 ms. */
static bool pool_dirty_sync_due(struct pool *p, uint64_t dirty)
{
	if (dirty >= p->p_opts.po_dirty_max_bytes)
		return true;
	return dirty >= p->p_opts.po_dirty_sync_bytes && !p->p_sync_busy &&
	       clock_monotonic_ns() - p->p_sync_ended_ns >= p->p_sync_took_ns;
}

int pool_tx_throttle(struct pool *p, struct pool_waiter *w)
{
	if (atomic_load(&p->p_suspended))
		return -EIO;
	uint64_t dirty = pool_dirty_bytes(p);
	pool_mem_reserve_locked(p, dirty);
	uint64_t limit = p->p_opts.po_dirty_max_bytes;
	if (!pool_dirty_sync_due(p, dirty))
		return 0;
	bool throttle = dirty > 2 * limit && w;
	if (!throttle && p->p_sync_dirty_txg >= p->p_open_txg)
		return 0; /* asked for already: the sync thread has yet to take it */
	pthread_mutex_lock(&p->p_state_lock);
	pool_sync_request_locked(p, p->p_open_txg);
	p->p_sync_dirty_txg = p->p_open_txg;
	if (throttle) {
		w->pw_next = p->p_throttled;
		p->p_throttled = w;
	}
	pthread_mutex_unlock(&p->p_state_lock);
	return throttle ? POOL_THROTTLED : 0;
}

/* Calls back every waiter of the list w (queued newest first) with status. */
static void pool_waiters_call(struct pool_waiter *w, int status)
{
	/* queued newest first: call them oldest first */
	struct pool_waiter *rev = NULL;
	while (w) {
		struct pool_waiter *next = w->pw_next;
		w->pw_next = rev;
		rev = w;
		w = next;
	}
	while (rev) {
		struct pool_waiter *next = rev->pw_next;
		rev->pw_done(rev, status);
		rev = next;
	}
}

/* Takes the throttled callers queued so far (a sync takes them when it starts: they are called
 * back once it is durable; callers queued later wait for the next one). */
static struct pool_waiter *pool_take_throttled(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	struct pool_waiter *w = p->p_throttled;
	p->p_throttled = NULL;
	pthread_mutex_unlock(&p->p_state_lock);
	return w;
}

void pool_wake_throttled(struct pool *p, int status)
{
	pool_waiters_call(pool_take_throttled(p), status);
}

/* ---------------------------------------------------------------------------------------------
 * One sync */

/* Phase 0, without p_lock: each dataset's owner prepares (seals) the data blocks that phase 1
 * would otherwise compress and checksum under the lock, while requests keep running. Bounded by
 * the memory model: sealed blocks (a compressed copy and a cached copy of each) count in the
 * reservation, and phase 0 stops at twice the dirty limit of them, the room the model gives the
 * txg being written (pool.c), which is empty while phase 0 runs. A dataset stays loaded while
 * its owner seals: only this thread unloads idle datasets, and a destroy (which skips those
 * being sealed by waiting for this very sync) marks ds_destroying first. */
static void pool_seal_ahead(struct pool *p)
{
	uint64_t limit = 2 * p->p_opts.po_dirty_max_bytes;
	pthread_mutex_lock(&p->p_lock);
	struct pool_ds *ds = p->p_datasets;
	while (ds) {
		uint64_t sealed = atomic_load(&p->p_sealed_bytes);
		if (sealed >= limit || atomic_load(&p->p_suspended))
			break;
		if (ds->ds_ops && ds->ds_ops->do_seal && !ds->ds_destroying &&
		    pool_owner_dirty(ds) > 0) {
			uint64_t budget = limit - sealed;
			pthread_mutex_unlock(&p->p_lock);
			ds->ds_ops->do_seal(ds->ds_owner, &budget);
			pthread_mutex_lock(&p->p_lock);
			pool_mem_reserve_locked(p, pool_dirty_bytes(p));
		}
		ds = ds->ds_next;
	}
	pthread_mutex_unlock(&p->p_lock);
}

/* How many bytes of phase 1's writes (cached copies and prepared images) may wait for the lock
 * to be let go before they go to the engine: half of what the memory limit leaves beside the
 * cache and the reservation (the other half stays for what the model does not count: headers,
 * the heap's slack), and at least a 64th of the limit. Submitting under the lock wakes the
 * engine thread, which then shares the core with the locked section: with a 2 GiB limit and
 * sfs2008's txgs (about 60 MiB of data, 570 tree nodes), submitting every 32 MiB held the lock
 * 30-35 ms per txg, and 18-21 ms with the free room as the bound. A full cache (a small limit,
 * or a long run) leaves no room, and the writes go in 64ths of the limit, as they must. */
static uint64_t pool_sync_queue_room(struct pool *p)
{
	uint64_t limit = p->p_opts.po_arc_max_bytes;
	uint64_t used = arc_size_bytes(p->p_arc) + p->p_reserved_bytes;
	uint64_t room = limit > used ? (limit - used) / 2 : 0;
	return SH_MAX(room, limit / 64);
}

/* Set on the sync thread, whose scheduling class follows its phases; pool_create runs
 * pool_sync_once for txg 1 on the caller's thread, which keeps its class. */
static _Thread_local bool pool_on_sync_thread;

/* Phase 1, under p_lock with p_in_sync set: everything of txg into blocks, and the uberblock. */
static int pool_sync_build(struct pool *p, uint64_t txg, struct blk_uberblock *ub,
                           struct ilog_position *pos)
{
	int rc;
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		p->p_sync_ds = ds;
		if (ds->ds_ops && ds->ds_ops->do_sync) {
			rc = ds->ds_ops->do_sync(ds->ds_owner, txg);
			if (rc != 0) {
				log_warn("pool %s: dataset %s: writing its changes for txg %" PRIu64
				         ": %s",
				         p->p_name, ds->ds_name, txg, sh_strerror(rc));
				goto out;
			}
		}
		if (btree_is_dirty(ds->ds_tree)) {
			struct blk_ptr root;
			rc = btree_sync(ds->ds_tree, &root);
			if (rc != 0) {
				log_warn("pool %s: dataset %s: writing its tree for txg %" PRIu64
				         ": %s",
				         p->p_name, ds->ds_name, txg, sh_strerror(rc));
				goto out;
			}
			if (memcmp(&root, &ds->ds_root, sizeof(root)) != 0) {
				ds->ds_root = root;
				ds->ds_record_dirty = true;
			}
		}
		/* the blocks its snapshots still hold, killed in this txg (pool_snap.c, S1); the
		 * metadata tree's nodes this changes are not the dataset's */
		p->p_sync_ds = NULL;
		rc = pool_dl_flush(p, ds);
		if (rc != 0) {
			log_warn("pool %s: dataset %s: writing its dead list for txg %" PRIu64 ": %s",
			         p->p_name, ds->ds_name, txg, sh_strerror(rc));
			goto out;
		}
	}
	p->p_sync_ds = NULL;
	rc = pool_snap_sync(p, txg);
	if (rc != 0)
		goto out;
	rc = pool_ds_sync_records(p);
	if (rc != 0)
		goto out;
	struct blk_ptr mos_root, space_root;
	rc = btree_sync(p->p_mos, &mos_root);
	if (rc != 0) {
		log_warn("pool %s: writing the metadata tree for txg %" PRIu64 ": %s", p->p_name,
		         txg, sh_strerror(rc));
		goto out;
	}
	struct space_store st = pool_space_store_ops;
	st.ss_ctx = p;
	rc = space_sync(p->p_space, txg, &st, &space_root);
	if (rc != 0) {
		log_warn("pool %s: writing the allocator's state for txg %" PRIu64 ": %s",
		         p->p_name, txg, sh_strerror(rc));
		goto out;
	}
	ilog_checkpoint_position(p->p_log, txg, pos);
	memset(ub, 0, sizeof(*ub));
	ub->ub_txg = txg;
	ub->ub_pool_guid = p->p_guid;
	ub->ub_timestamp_ns = clock_realtime_ns();
	ub->ub_nroots = 2;
	ub->ub_roots[0] = mos_root;
	ub->ub_roots[1] = space_root;
	p->p_stale_digest = pool_ub_payload_encode(p, pos, ub->ub_timestamp_ns, ub->ub_payload);
out:
	p->p_sync_ds = NULL;
	return rc;
}

static int pool_flush_vdev(struct blk_vdev *vdev)
{
	struct blk_vdev_io vio = {.vi_op = BLK_IO_FLUSH, .vi_vdev = vdev};
	return blk_vdev_io_sync(&vio);
}

/* Phase 2's flush of every top-level vdev, each retried once. */
static int pool_flush_tops(struct pool *p)
{
	for (unsigned i = 0; i < p->p_ntops; i++) {
		int rc = pool_flush_vdev(p->p_tops[i].pt_vdev);
		if (rc != 0) {
			log_warn("pool %s: flushing vdev %u: %s; retrying", p->p_name, i,
			         sh_strerror(rc));
			rc = pool_flush_vdev(p->p_tops[i].pt_vdev);
		}
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* True when some leaf holds the uberblock of txg. */
static bool pool_ub_on_disk(struct pool *p, uint64_t txg)
{
	struct blk_uberblock *ub = mem_alloc(sizeof(*ub));
	if (!ub)
		return false;
	bool found = false;
	for (unsigned v = 0; v < p->p_nvdevs && !found; v++) {
		for (unsigned c = 0; c < blk_vdev_children(p->p_vdevs[v]) && !found; c++) {
			struct blk_dev *dev = blk_vdev_child(p->p_vdevs[v], c);
			found = blk_uberblock_find_best(p->p_engine, dev, p->p_guid, ub) == 0 &&
			        ub->ub_txg == txg;
		}
	}
	mem_free(ub);
	return found;
}

/* Phase 3: the commit point. */
static int pool_ub_commit(struct pool *p, const struct blk_uberblock *ub)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		int rc = blk_uberblock_write(p->p_engine, p->p_vdevs, p->p_nvdevs, ub);
		if (rc == 0)
			return 0;
		/* durable if any copy is (import picks the best valid one) */
		if (pool_ub_on_disk(p, ub->ub_txg)) {
			log_warn("pool %s: the uberblock of txg %" PRIu64 " missed some leaves: %s",
			         p->p_name, ub->ub_txg, sh_strerror(rc));
			return 0;
		}
		log_warn("pool %s: writing the uberblock of txg %" PRIu64 ": %s%s", p->p_name,
		         ub->ub_txg, sh_strerror(rc), attempt == 0 ? "; retrying" : "");
		if (attempt == 1)
			return rc;
	}
	return -EIO;
}

/* Records a durable txg. Under p_state_lock. */
static void pool_txg_record(struct pool *p, const struct pool_txg_stat *ts)
{
	p->p_txg_hist[p->p_txg_hist_n % POOL_TXG_HISTORY] = *ts;
	p->p_txg_hist_n++;
}

/* Microseconds between two CLOCK_MONOTONIC readings, saturated to 32 bits. */
static uint32_t pool_us_between(uint64_t from_ns, uint64_t to_ns)
{
	uint64_t us = to_ns > from_ns ? (to_ns - from_ns) / 1000u : 0;
	return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

int pool_sync_once(struct pool *p, bool forced)
{
	if (atomic_load(&p->p_suspended))
		return -EIO;
	struct blk_uberblock *ub = mem_alloc(sizeof(*ub));
	if (!ub)
		return -ENOMEM;
	struct ilog_position pos;
	pthread_mutex_lock(&p->p_lock);
	if (!forced && pool_clean(p)) {
		pool_ds_evict_idle(p); /* datasets a check or a replay loaded and left */
		pthread_mutex_unlock(&p->p_lock);
		mem_free(ub);
		return 0;
	}
	struct pool_txg_stat ts = {.ts_started_ns = clock_realtime_ns(), .ts_cause = POOL_TXG_TIMER};
	uint64_t seal_ns = clock_monotonic_ns();
	p->p_sync_busy = true;
	if (forced) {
		pthread_mutex_lock(&p->p_state_lock);
		ts.ts_cause = p->p_sync_dirty_txg >= p->p_open_txg ? POOL_TXG_DIRTY : POOL_TXG_WAITER;
		ts.ts_queued_us = pool_us_between(p->p_sync_requested_ns, seal_ns);
		pthread_mutex_unlock(&p->p_state_lock);
	}
	pthread_mutex_unlock(&p->p_lock);
	/* Phase 0 */
	pool_seal_ahead(p);
	if (pool_on_sync_thread)
		sh_thread_set_kind(SH_THREAD_SERVING);
	pthread_mutex_lock(&p->p_lock);
	/* Phase 1 */
	uint64_t txg = p->p_open_txg++;
	ts.ts_txg = txg;
	uint64_t placed_blocks = p->p_placed_blocks, placed_bytes = p->p_placed_bytes;
	p->p_syncing_txg = txg;
	p->p_in_sync = true;
	struct pool_waiter *throttled = pool_take_throttled(p); /* released when txg is durable */
	p->p_log_lsn_at_sync = p->p_log_next_lsn;
	/* The memory model: the txg's dirty bytes become the write buffers of phase 2. */
	uint64_t txg_dirty = pool_dirty_bytes(p);
	p->p_sync_bytes = txg_dirty;
	p->p_sync_queue_room = pool_sync_queue_room(p);
	uint64_t t0_ns = clock_monotonic_ns();
	ts.ts_seal_us = pool_us_between(seal_ns, t0_ns);
	ts.ts_dirty_bytes = txg_dirty;
	int rc = pool_sync_build(p, txg, ub, &pos);
	if (rc != 0) {
		log_warn("pool %s: txg %" PRIu64 ": retrying its serialization", p->p_name, txg);
		rc = pool_sync_build(p, txg, ub, &pos);
	}
	p->p_in_sync = false;
	uint64_t build_ns = clock_monotonic_ns() - t0_ns;
	ts.ts_build_us = pool_us_between(t0_ns, t0_ns + build_ns);
	pool_mem_reserve_locked(p, pool_dirty_bytes(p));
	struct pool_write *queued = pool_writes_take_locked(p);
	ts.ts_blocks = p->p_placed_blocks - placed_blocks;
	ts.ts_written_bytes = p->p_placed_bytes - placed_bytes;
	pthread_mutex_unlock(&p->p_lock);
	uint64_t write_ns = clock_monotonic_ns();
	if (pool_on_sync_thread)
		sh_thread_set_kind(SH_THREAD_BACKGROUND);
	pool_writes_submit(queued);
	pthread_mutex_lock(&p->p_state_lock);
	p->p_build_last_us = build_ns / 1000;
	p->p_build_max_us = SH_MAX(p->p_build_max_us, p->p_build_last_us);
	pthread_mutex_unlock(&p->p_state_lock);
	/* Phase 2: the blocks, then the flush that makes them durable. */
	int wrc = pool_writes_wait(p);
	if (rc == 0)
		rc = wrc;
	uint64_t flush_ns = clock_monotonic_ns();
	if (rc == 0)
		rc = pool_flush_tops(p);
	/* Phase 3 */
	uint64_t commit_ns = clock_monotonic_ns();
	if (rc == 0)
		rc = pool_ub_commit(p, ub);
	uint64_t end_ns = clock_monotonic_ns();
	ts.ts_write_us = pool_us_between(write_ns, flush_ns);
	ts.ts_flush_us = pool_us_between(flush_ns, commit_ns);
	ts.ts_commit_us = pool_us_between(commit_ns, end_ns);
	ts.ts_total_us = pool_us_between(seal_ns, end_ns);
	mem_free(ub);
	if (rc != 0) {
		char why[96];
		snprintf(why, sizeof(why), "txg %" PRIu64 " could not be written (%s)", txg,
		         sh_strerror(rc));
		pool_suspend(p, why);
		pool_waiters_call(throttled, -EIO);
		pthread_mutex_lock(&p->p_lock);
		p->p_sync_busy = false;
		p->p_sync_bytes = 0; /* the writes are done or given up (pool_writes_wait) */
		pool_mem_reserve_locked(p, pool_dirty_bytes(p));
		pthread_mutex_unlock(&p->p_lock);
		return rc;
	}
	/* Phase 4 */
	pthread_mutex_lock(&p->p_lock);
	space_txg_durable(p->p_space, txg);
	p->p_sync_bytes = 0;
	pool_mem_reserve_locked(p, pool_dirty_bytes(p));
	pthread_mutex_unlock(&p->p_lock);
	if (ilog_release(p->p_log, &pos) != 0)
		log_warn("pool %s: txg %" PRIu64 ": the log refused its checkpoint", p->p_name,
		         txg);
	pthread_mutex_lock(&p->p_state_lock);
	p->p_synced_txg = txg;
	p->p_syncs++;
	pool_txg_record(p, &ts);
	pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
	pool_waiters_call(throttled, 0);
	pool_mem_trim(p);
	if (log_get_level() <= LOG_DEBUG)
		pool_mem_log(p, txg, txg_dirty, build_ns, clock_monotonic_ns() - t0_ns);
	pthread_mutex_lock(&p->p_lock);
	p->p_sync_busy = false;
	p->p_sync_ended_ns = clock_monotonic_ns();
	p->p_sync_took_ns = p->p_sync_ended_ns - seal_ns;
	pool_ds_evict_idle(p);
	uint64_t dirty = pool_dirty_bytes(p);
	if (dirty >= p->p_opts.po_dirty_max_bytes) {
		pthread_mutex_lock(&p->p_state_lock);
		pool_sync_request_locked(p, p->p_open_txg);
		p->p_sync_dirty_txg = p->p_open_txg;
		pthread_mutex_unlock(&p->p_state_lock);
	}
	pthread_mutex_unlock(&p->p_lock);
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The txg history */

unsigned pool_txg_history(struct pool *p, struct pool_txg_stat *out)
{
	pthread_mutex_lock(&p->p_state_lock);
	uint64_t total = p->p_txg_hist_n;
	unsigned n = total < POOL_TXG_HISTORY ? (unsigned)total : POOL_TXG_HISTORY;
	for (unsigned i = 0; i < n; i++)
		out[i] = p->p_txg_hist[(total - n + i) % POOL_TXG_HISTORY];
	pthread_mutex_unlock(&p->p_state_lock);
	return n;
}

static const char *pool_txg_cause_name(enum pool_txg_cause c)
{
	switch (c) {
	case POOL_TXG_TIMER: return "timer";
	case POOL_TXG_DIRTY: return "dirty";
	default: return "waiter";
	}
}

int pool_txg_history_print(struct pool *p, FILE *out)
{
	struct pool_txg_stat *hist = mem_alloc(POOL_TXG_HISTORY * sizeof(*hist));
	if (!hist)
		return -ENOMEM;
	unsigned n = pool_txg_history(p, hist);
	fprintf(out, "pool %s: the last %u txgs written (times in ms)\n", p->p_name, n);
	fprintf(out, "%10s  %-12s  %-6s  %9s  %9s  %6s  %7s  %7s  %7s  %7s  %7s  %7s  %7s\n",
	        "TXG", "STARTED", "CAUSE", "DIRTY", "WRITTEN", "BLOCKS", "QUEUED", "SEAL",
	        "LOCKED", "WRITE", "FLUSH", "COMMIT", "TOTAL");
	for (unsigned i = 0; i < n; i++) {
		const struct pool_txg_stat *ts = &hist[i];
		time_t at = (time_t)(ts->ts_started_ns / 1000000000ull);
		struct tm tm;
		char when[16] = "?";
		if (gmtime_r(&at, &tm))
			snprintf(when, sizeof(when), "%02d:%02d:%02d.%03u", tm.tm_hour, tm.tm_min,
			         tm.tm_sec, (unsigned)(ts->ts_started_ns % 1000000000ull / 1000000u));
		char dirty[16], written[16];
		pool_fmt_bytes(dirty, sizeof(dirty), ts->ts_dirty_bytes);
		pool_fmt_bytes(written, sizeof(written), ts->ts_written_bytes);
		fprintf(out,
		        "%10" PRIu64 "  %-12s  %-6s  %9s  %9s  %6" PRIu64
		        "  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f\n",
		        ts->ts_txg, when, pool_txg_cause_name(ts->ts_cause), dirty, written,
		        ts->ts_blocks,
		        ts->ts_queued_us / 1000.0, ts->ts_seal_us / 1000.0, ts->ts_build_us / 1000.0,
		        ts->ts_write_us / 1000.0, ts->ts_flush_us / 1000.0, ts->ts_commit_us / 1000.0,
		        ts->ts_total_us / 1000.0);
	}
	mem_free(hist);
	return ferror(out) ? -EIO : 0;
}

/* ---------------------------------------------------------------------------------------------
 * The thread */

static void *pool_sync_main(void *arg)
{
	struct pool *p = arg;
	/* Background, but for phase 1 (pool_sync_once). Phases 0, 2 and 4 (compressing ahead,
	 * submitting, finishing) are slow work that, in the normal class, takes the core from the
	 * event loop whenever it wakes; phase 1 holds the pool lock every request needs, and as
	 * SCHED_BATCH there too the pool's sfs2008 response time at mid load was about 10% higher. */
	pool_on_sync_thread = true;
	sh_thread_setup("shale-sync", SH_THREAD_BACKGROUND);
	uint64_t interval_ns = (uint64_t)p->p_opts.po_txg_interval_ms * 1000000ull;
	uint64_t destroy_retry_ns = 0; /* a destroy step that changed nothing: try again then */
	pthread_mutex_lock(&p->p_state_lock);
	p->p_last_sync_ns = clock_monotonic_ns();
	while (!p->p_stopping) {
		if (p->p_log_space_ready) {
			p->p_log_space_ready = false;
			pthread_mutex_unlock(&p->p_state_lock);
			pool_log_drain(p);
			pthread_mutex_lock(&p->p_state_lock);
			continue;
		}
		bool suspended = atomic_load(&p->p_suspended);
		uint64_t now = clock_monotonic_ns();
		/* A dataset being destroyed: one step per txg, once the last step's txg is
		 * durable (pool_destroy.c); each step asks for the txg that writes it. */
		bool destroying = !suspended && (atomic_load(&p->p_destroy_queued) > 0 ||
		                                 atomic_load(&p->p_fq_queued) > 0);
		if (destroying && (p->p_destroy_step_txg <= p->p_synced_txg ||
		                   (destroy_retry_ns != 0 && now >= destroy_retry_ns))) {
			pthread_mutex_unlock(&p->p_state_lock);
			bool changed = pool_destroy_step(p);
			changed |= pool_fq_step(p);
			pthread_mutex_lock(&p->p_state_lock);
			destroy_retry_ns = changed ? 0 : now + interval_ns;
			if (changed)
				pool_sync_request_locked(p, p->p_destroy_step_txg);
			continue;
		}
		bool wanted = p->p_sync_requested > p->p_synced_txg;
		bool due = now - p->p_last_sync_ns >= interval_ns;
		if (suspended || (!wanted && !due)) {
			uint64_t wake =
			    suspended ? now + 1000000000ull : p->p_last_sync_ns + interval_ns;
			if (destroying && destroy_retry_ns != 0 && destroy_retry_ns < wake)
				wake = destroy_retry_ns;
			struct timespec ts = {(time_t)(wake / 1000000000ull),
			                      (long)(wake % 1000000000ull)};
			pthread_cond_timedwait(&p->p_state_cv, &p->p_state_lock, &ts);
			continue;
		}
		p->p_last_sync_ns = now;
		pthread_mutex_unlock(&p->p_state_lock);
		(void)pool_sync_once(p, wanted);
		pthread_mutex_lock(&p->p_state_lock);
	}
	pthread_mutex_unlock(&p->p_state_lock);
	return NULL;
}

int pool_sync_thread_start(struct pool *p)
{
	int rc = pthread_create(&p->p_sync_thread, NULL, pool_sync_main, p);
	if (rc != 0)
		return -rc;
	p->p_sync_thread_started = true;
	return 0;
}

void pool_sync_thread_stop(struct pool *p)
{
	if (!p->p_sync_thread_started)
		return;
	pthread_mutex_lock(&p->p_state_lock);
	p->p_stopping = true;
	pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
	VERIFY(pthread_join(p->p_sync_thread, NULL) == 0);
	p->p_sync_thread_started = false;
}
