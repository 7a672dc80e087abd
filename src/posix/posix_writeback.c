/* posix_writeback.c: write-behind of UNSTABLE data on the posix back end.
 *
 * Problem
 *   An UNSTABLE WRITE only copies into the host's page cache. The kernel writes dirty pages back
 *   once they are 30 seconds old (vm.dirty_expire_centisecs), so under a steady write load it
 *   sends tens of seconds of data to the disk at once. Every fsync issued meanwhile (SETATTR's
 *   on the file it changes, which must also write that file's dirty pages, and a directory's)
 *   waits behind that burst in the device's queue: 100-500 ms, during which the client's slots
 *   fill with waiting stable requests and every other request queues behind them.
 *
 * Model
 *   After a successful UNSTABLE WRITE, the file's cache entry is put on a list (once:
 *   pfd_wb_queued) with a reference of its own. A thread of its own (SCHED_BATCH) wakes every
 *   POSIX_WRITEBACK_INTERVAL_NS (or at once, rule 7), takes the whole list, and for each entry
 *   starts the write-out of its dirty pages with sync_file_range(SYNC_FILE_RANGE_WRITE), which
 *   queues the I/O and does not wait for it, then drops the reference. Data therefore reaches
 *   the disk about a second after it was written, in steady amounts, and a later fsync or
 *   COMMIT finds little left to write. This is a hint only: durability still comes from
 *   COMMIT's fdatasync and the stable paths.
 *
 * Rules
 *   1. pf_wb_head, pf_wb_len and pf_wb_stopping are guarded by pf_wb_lock; pfd_wb_next too.
 *   2. An entry is on the list at most once (pfd_wb_queued, set under pf_wb_lock, cleared by the
 *      thread before it starts the entry's write-out, so a WRITE after the clear queues it again
 *      and a WRITE before it is covered by the write-out that follows).
 *   3. Each listed entry holds one reference (posix_fd_ref), dropped after its write-out started,
 *      so its fd stays open; an entry evicted from the cache meanwhile is closed at that release.
 *   4. A listed entry is held, so it cannot be evicted: the cache may stay over its fd limit by
 *      the fds of listed entries. At most pf_wb_max entries are listed (an eighth of the cache's
 *      fd limit, at most POSIX_WRITEBACK_MAX), two fds each: a quarter of the limit at most,
 *      inside the third that posix_cache_limit reserves beyond it. Past the bound, files are left
 *      to the kernel's own writeback.
 *   5. A listed file that is removed keeps its fds until the next pass (a second at most), so its
 *      space comes back then (knfsd's file cache closes NFSv3 files after a delay too); the pass
 *      starts no write-out for a file with no links left.
 *   6. posix_writeback_stop joins the thread, which releases whatever is still listed; it runs
 *      before the fd cache is torn down.
 *   7. Bursts: a file that takes pf_wb_burst bytes of UNSTABLE data (POSIX_WRITEBACK_BURST,
 *      32 MiB, unless configured) since its last write-out started sets pf_wb_urgent and wakes
 *      the thread, which passes the whole list at once rather than at its next second. A
 *      sequential write of a large file then reaches the disk while the client is still
 *      sending it, and the COMMIT at its end finds little left to write. pfd_wb_bytes is added
 *      to atomically by the writers and zeroed by the pass with pfd_wb_queued; the WRITE that
 *      crosses the size is the one that asks. Measured with `shale bench seq` (1 GiB of 1 MiB
 *      buffered UNSTABLE WRITEs then COMMIT, server on one core, A/B in alternate rounds):
 *      with 32 MiB bursts 1.3-2.6 times (median 1.6) the throughput of the once-a-second pass
 *      alone; 2 MiB bursts no better than none (460-860 MB/s against 620-690), their passes
 *      taking the server's core from the copies. Direct writes (posix_direct.c) dirty no page
 *      and are not counted.
 *   8. The same thread closes the fd cache's idle entries (posix_fdcache.c, rule 7): after a
 *      pass, once at least POSIX_WRITEBACK_INTERVAL_NS has gone by since it last did, so one
 *      expiry pass is about a second whatever the bursts. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "posix/posix_impl.h"

#define POSIX_WRITEBACK_INTERVAL_NS 1000000000ull
#define POSIX_WRITEBACK_MAX 4096u
#define POSIX_WRITEBACK_BURST (32ull << 20)

void posix_writeback_note(struct posix_fs *pf, struct posix_fd *pfd, uint64_t bytes)
{
	if (!pf->pf_wb_started)
		return;
	uint64_t before = __atomic_fetch_add(&pfd->pfd_wb_bytes, bytes, __ATOMIC_RELAXED);
	bool burst = before < pf->pf_wb_burst && before + bytes >= pf->pf_wb_burst;
	if (!burst && __atomic_load_n(&pfd->pfd_wb_queued, __ATOMIC_ACQUIRE))
		return; /* already listed (rule 2) */
	pthread_mutex_lock(&pf->pf_wb_lock);
	if (!pfd->pfd_wb_queued && !pf->pf_wb_stopping && pf->pf_wb_len < pf->pf_wb_max) {
		posix_fd_ref(pf, pfd);
		__atomic_store_n(&pfd->pfd_wb_queued, true, __ATOMIC_RELEASE);
		pfd->pfd_wb_next = pf->pf_wb_head;
		pf->pf_wb_head = pfd;
		pf->pf_wb_len++;
	}
	if (burst && pfd->pfd_wb_queued && !pf->pf_wb_urgent) { /* rule 7 */
		pf->pf_wb_urgent = true;
		pthread_cond_signal(&pf->pf_wb_cond);
	}
	pthread_mutex_unlock(&pf->pf_wb_lock);
}

/* Starts the write-out of each listed entry's dirty pages and releases it. */
static void posix_writeback_pass(struct posix_fs *pf, struct posix_fd *list, bool write)
{
	while (list != NULL) {
		struct posix_fd *pfd = list;
		list = pfd->pfd_wb_next;
		pfd->pfd_wb_next = NULL;
		__atomic_store_n(&pfd->pfd_wb_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&pfd->pfd_wb_queued, false, __ATOMIC_SEQ_CST);
		int wfd = __atomic_load_n(&pfd->pfd_wfd, __ATOMIC_ACQUIRE);
		struct stat st;
		/* A removed file's pages are dropped at its last close: nothing to write. */
		if (write && wfd >= 0 && fstat(wfd, &st) == 0 && st.st_nlink > 0 &&
		    sync_file_range(wfd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0)
			log_ratelimited(LOG_WARN, "posix: write-behind: sync_file_range: %s",
					sh_strerror(-errno));
		posix_fd_rele(pf, pfd);
	}
}

static void *posix_writeback_main(void *arg)
{
	struct posix_fs *pf = arg;
	sh_thread_setup("shale-wback", SH_THREAD_BACKGROUND);
	uint64_t expired_at = clock_monotonic_ns();
	pthread_mutex_lock(&pf->pf_wb_lock);
	for (;;) {
		uint64_t wake = clock_monotonic_ns() + POSIX_WRITEBACK_INTERVAL_NS;
		struct timespec until = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
		while (!pf->pf_wb_stopping && !pf->pf_wb_urgent &&
		       pthread_cond_timedwait(&pf->pf_wb_cond, &pf->pf_wb_lock, &until) == 0) {
		}
		if (pf->pf_wb_urgent)
			pf->pf_wb_bursts++;
		pf->pf_wb_urgent = false;
		struct posix_fd *list = pf->pf_wb_head;
		pf->pf_wb_head = NULL;
		pf->pf_wb_len = 0;
		bool stopping = pf->pf_wb_stopping;
		pthread_mutex_unlock(&pf->pf_wb_lock);
		posix_writeback_pass(pf, list, !stopping);
		if (stopping)
			return NULL;
		uint64_t now = clock_monotonic_ns();
		if (now - expired_at >= POSIX_WRITEBACK_INTERVAL_NS) { /* rule 8 */
			posix_fdcache_expire(&pf->pf_cache);
			expired_at = now;
		}
		pthread_mutex_lock(&pf->pf_wb_lock);
	}
}

int posix_writeback_start(struct posix_fs *pf, uint64_t burst_bytes)
{
	pthread_condattr_t attr;
	int rc = -pthread_condattr_init(&attr);
	if (rc != 0)
		return rc;
	rc = -pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = -pthread_cond_init(&pf->pf_wb_cond, &attr);
	pthread_condattr_destroy(&attr);
	if (rc != 0)
		return rc;
	rc = -pthread_mutex_init(&pf->pf_wb_lock, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&pf->pf_wb_cond);
		return rc;
	}
	pf->pf_wb_head = NULL;
	pf->pf_wb_len = 0;
	pf->pf_wb_max = SH_MIN(pf->pf_cache.pc_max_fds / 8, POSIX_WRITEBACK_MAX);
	pf->pf_wb_stopping = false;
	pf->pf_wb_urgent = false;
	pf->pf_wb_burst = burst_bytes != 0 ? burst_bytes : POSIX_WRITEBACK_BURST;
	pf->pf_wb_bursts = 0;
	rc = -pthread_create(&pf->pf_wb_thread, NULL, posix_writeback_main, pf);
	if (rc != 0) {
		pthread_mutex_destroy(&pf->pf_wb_lock);
		pthread_cond_destroy(&pf->pf_wb_cond);
		return rc;
	}
	pf->pf_wb_started = true;
	return 0;
}

void posix_writeback_stop(struct posix_fs *pf)
{
	if (!pf->pf_wb_started)
		return;
	pthread_mutex_lock(&pf->pf_wb_lock);
	pf->pf_wb_stopping = true;
	pthread_cond_signal(&pf->pf_wb_cond);
	pthread_mutex_unlock(&pf->pf_wb_lock);
	pthread_join(pf->pf_wb_thread, NULL);
	pf->pf_wb_started = false;
	pthread_mutex_destroy(&pf->pf_wb_lock);
	pthread_cond_destroy(&pf->pf_wb_cond);
}
