/* blk_engine.c: the I/O engine: one completion thread per engine, io_uring for file leaves, a
 * synchronous fallback when io_uring is unavailable, and the synchronous wrappers.
 *
 * Model
 *   blk_submit appends the io to a mutex-protected FIFO (be_queue) and wakes the engine thread.
 *   The thread is the only one that touches the ring: it takes the whole FIFO, validates each io,
 *   serves memory and fault leaves at once with memcpy, prepares an SQE for each file-leaf io
 *   (while fewer than be_slots are in the ring; the rest wait in be_backlog), submits, runs the
 *   callbacks of everything that completed, then waits for a completion.
 *
 *   Wake-ups: an eventfd read is kept armed in the ring (user_data 0), so a single wait
 *   (io_uring_wait_cqe) covers both "a device finished" and "someone submitted". A submitter on
 *   another thread writes the eventfd only when no earlier write is still unconsumed
 *   (be_wake_pending), so a burst of submissions costs one wake-up. Submissions made on the engine
 *   thread itself (from a callback) need none: the thread re-checks the FIFO before it sleeps.
 *   This keeps the ring single-threaded, which liburing requires for the SQ and the CQ alike,
 *   instead of sharing the SQ under a mutex.
 *
 *   Without io_uring (io_uring_queue_init fails, or SHALE_BLK_NO_URING=1 in the environment as a
 *   test hook) the thread serves file leaves with pread/pwrite/fdatasync itself and sleeps on a
 *   condition variable instead of the ring.
 *
 * Invariants
 *   1. bi_done runs on the engine thread only, and never inside blk_submit.
 *   2. A short transfer is continued from where it stopped; a transfer that makes no progress (end
 *      of file), or that stops mid-sector on an O_DIRECT file, completes with -EIO.
 *   3. The thread exits only when be_stopping is set and nothing is queued, in a backlog, in the
 *      ring or awaiting its callback: blk_engine_destroy drains every submitted io, including
 *      those that callbacks submit during the drain.
 *   4. Memory and fault leaves are served in the order the thread takes ios from the FIFO, so for
 *      one submitting thread their completions are in submission order.
 *   5. queue_depth is clamped to [4, 4096] (0 means 128); one ring entry is kept for the wake-up
 *      read, the others bound the file ios in flight.
 *   6. Background ios (bi_background: the blocks of a transaction group) yield to all others
 *      (ZFS's vdev queue, async writes below sync ones): at most BLK_ENGINE_BACKGROUND_MAX of
 *      them (or of their groups, rule 8) are in the ring at once, the rest wait in their own
 *      backlog (be_bg_backlog), and a free ring slot goes to a waiting foreground io first. A
 *      txg hands over its whole write-out at once (60 MiB and more); in the ring, the device
 *      would serve it before an intent-log write or a read submitted a moment later, which then
 *      waited 20-30 ms.
 *   7. The thread is SCHED_BATCH (sh_thread_setup's background kind): a submission or a
 *      completion that wakes it never preempts the event loop sharing its core; it runs when the
 *      loop sleeps or at the scheduler's next tick, and then finds every io queued meanwhile.
 *      In the normal class, each intent-log write preempted the loop at its eventfd write (two
 *      context switches per commit, and one doorbell per commit). Measured against it, pool
 *      sfs2008 on one core (A/B, three rounds of ten points): peak +29%, overall response time
 *      -20%, server CPU per op -20%; 4 KiB FILE_SYNC writes from 64 in flight +7%.
 *   8. Aggregation (ZFS's vdev queue aggregation): when a background write enters the ring, the
 *      background writes waiting in its backlog that continue it on the same leaf (offset =
 *      where the group ends so far; looked for among the first BLK_ENGINE_AGG_SCAN waiting) join
 *      it, up to BLK_ENGINE_AGG_MAX_BYTES in all, and the group goes to the kernel as one
 *      vectored write: one request, one slot, one doorbell. A txg's blocks are allocated first
 *      fit from a cursor and handed over in that order, so they arrive contiguous: measured on
 *      pool sfs2008, every one of 49,575 background writes (all 4 KiB) continued the one before.
 *      Each 4 KiB request cost a virtio doorbell, a VM exit, on the server's core. The members
 *      complete together, each with its own callback. A group that fails or comes back short is
 *      split: its members return to the front of the backlog marked bi_alone and are written one
 *      by one, so each gets its own status (rewriting a written part is harmless).
 *
 * Locking: be_lock guards be_queue, be_stopping, be_wake_pending and the deferred-status ring.
 * Everything else (the ring, the request pool, the backlog, the done list) belongs to the engine
 * thread. */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "blk/blk_impl.h"

#define BLK_ENGINE_DEFAULT_DEPTH 128u
#define BLK_ENGINE_MAX_DEPTH 4096u  /* the kernel's IORING_MAX_ENTRIES is larger; no use beyond */
#define BLK_ENGINE_DEFERRED_MAX 64u /* allocation failures reported at once; more run inline */
#define BLK_ENGINE_WAKE_TAG 0ull    /* user_data of the eventfd read */
#define BLK_ENGINE_BACKGROUND_MAX 8u /* background ios in the ring at once (rule 6) */
/* Rule 8: at most 8 groups of 128 KiB, 1 MiB, in the device ahead of a foreground io. */
#define BLK_ENGINE_AGG_MAX_BYTES (128u * 1024u)
#define BLK_ENGINE_AGG_MAX_IOS (BLK_ENGINE_AGG_MAX_BYTES / BLK_SECTOR_BYTES)
#define BLK_ENGINE_AGG_SCAN 64u /* waiting background ios looked at for a continuation */

/* One file-leaf io in the ring, with how far it has got (a short transfer continues), or an
 * aggregated group of background writes (rule 8): rq_io first, the others on rq_group_rest
 * (linked by bi_next), written with one vectored write from rq_iov. */
struct blk_req {
	struct blk_io *rq_io;
	uint32_t rq_done_bytes;
	struct blk_req *rq_next_free;
	struct blk_io *rq_group_rest; /* NULL: a single io */
	uint32_t rq_group_bytes;
	unsigned rq_niov;
	struct iovec *rq_iov; /* a group's vector, taken from be_free_iovs */
};

struct blk_deferred {
	void (*df_fn)(void *arg, int status);
	void *df_arg;
	int df_status;
};

struct blk_engine {
	pthread_t be_thread;
	pthread_mutex_t be_lock;
	pthread_cond_t be_cond;       /* fallback mode: the thread sleeps here */
	struct blk_io *be_queue_head; /* be_lock */
	struct blk_io *be_queue_tail; /* be_lock */
	bool be_stopping;             /* be_lock */
	bool be_wake_pending;         /* be_lock: an eventfd write not yet consumed */
	struct blk_deferred be_deferred[BLK_ENGINE_DEFERRED_MAX]; /* be_lock */
	unsigned be_ndeferred;                                    /* be_lock */
	/* engine thread only */
	bool be_uring;
	struct io_uring be_ring;
	int be_eventfd;
	uint64_t be_eventfd_value;
	unsigned be_slots;        /* file ios allowed in the ring at once */
	uint32_t be_max_transfer; /* bytes per read or write request (test hook) */
	unsigned be_inflight;     /* file ios in the ring */
	unsigned be_bg_inflight;  /* background ones among them (rule 6) */
	bool be_sqes_pending;     /* SQEs prepared but not yet submitted */
	struct blk_req *be_reqs;
	struct blk_req *be_free_reqs;
	struct blk_io *be_backlog_head, *be_backlog_tail;
	struct blk_io *be_bg_backlog_head, *be_bg_backlog_tail;
	struct blk_io *be_done_head, *be_done_tail;
	struct iovec *be_iovs;       /* BLK_ENGINE_BACKGROUND_MAX vectors for groups (rule 8) */
	struct iovec *be_free_iovs[BLK_ENGINE_BACKGROUND_MAX];
	unsigned be_nfree_iovs;
	_Atomic uint64_t be_aggregated; /* writes that joined another's group (test hook) */
	unsigned be_fail_groups;        /* be_lock: groups still to fail (test hook) */
};

static _Thread_local struct blk_engine *blk_engine_self;
static atomic_bool blk_engine_fallback_logged;

bool blk_engine_uses_uring(const struct blk_engine *engine)
{
	return engine->be_uring;
}

void blk_engine_set_max_transfer(struct blk_engine *engine, uint32_t bytes)
{
	VERIFY(bytes >= BLK_SECTOR_BYTES && bytes % BLK_SECTOR_BYTES == 0);
	pthread_mutex_lock(&engine->be_lock); /* publishes the value to the engine thread */
	engine->be_max_transfer = bytes;
	pthread_mutex_unlock(&engine->be_lock);
}

void blk_engine_fail_groups(struct blk_engine *engine, unsigned n)
{
	pthread_mutex_lock(&engine->be_lock);
	engine->be_fail_groups = n;
	pthread_mutex_unlock(&engine->be_lock);
}

uint64_t blk_engine_aggregated(const struct blk_engine *engine)
{
	return atomic_load_explicit(&engine->be_aggregated, memory_order_relaxed);
}

bool blk_engine_on_thread(const struct blk_engine *engine)
{
	return blk_engine_self == engine;
}

static void blk_list_append(struct blk_io **head, struct blk_io **tail, struct blk_io *io)
{
	io->bi_next = NULL;
	if (*tail)
		(*tail)->bi_next = io;
	else
		*head = io;
	*tail = io;
}

static struct blk_io *blk_list_pop(struct blk_io **head, struct blk_io **tail)
{
	struct blk_io *io = *head;
	if (io) {
		*head = io->bi_next;
		if (!*head)
			*tail = NULL;
		io->bi_next = NULL;
	}
	return io;
}

int blk_io_check(const struct blk_io *io)
{
	const struct blk_dev *dev = io->bi_dev;
	if (io->bi_op == BLK_IO_NOP)
		return 0;
	if (!dev)
		return -EINVAL;
	switch (io->bi_op) {
	case BLK_IO_FLUSH: return 0;
	case BLK_IO_READ:
	case BLK_IO_WRITE: break;
	default: return -EINVAL;
	}
	if (io->bi_len == 0 || io->bi_len % BLK_SECTOR_BYTES != 0 ||
	    io->bi_offset % BLK_SECTOR_BYTES != 0)
		return -EINVAL;
	if (!io->bi_buf || (uintptr_t)io->bi_buf % BLK_SECTOR_BYTES != 0)
		return -EINVAL;
	if (io->bi_offset > dev->bd_size || io->bi_len > dev->bd_size - io->bi_offset)
		return -EINVAL;
	return 0;
}

/* ---- the engine thread ---- */

static void blk_engine_complete(struct blk_engine *e, struct blk_io *io, int status)
{
	io->bi_status = status;
	blk_list_append(&e->be_done_head, &e->be_done_tail, io);
}

static struct io_uring_sqe *blk_engine_sqe(struct blk_engine *e)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->be_ring);
	if (!sqe) {
		/* The SQ is full of prepared entries: hand them to the kernel and retry. */
		int rc = io_uring_submit(&e->be_ring);
		if (rc < 0)
			log_ratelimited(LOG_ERROR, "blk: io_uring_submit: %s", sh_strerror(rc));
		sqe = io_uring_get_sqe(&e->be_ring);
	}
	e->be_sqes_pending = true;
	return sqe;
}

static void blk_engine_arm_wake(struct blk_engine *e)
{
	struct io_uring_sqe *sqe = blk_engine_sqe(e);
	VERIFY(sqe != NULL); /* the ring always keeps one entry for this read (be_slots) */
	io_uring_prep_read(sqe, e->be_eventfd, &e->be_eventfd_value, sizeof(e->be_eventfd_value),
	                   0);
	io_uring_sqe_set_data64(sqe, BLK_ENGINE_WAKE_TAG);
}

/* Prepares the SQE for (the rest of) a file io. */
static void blk_engine_prep(struct blk_engine *e, struct blk_req *rq)
{
	struct blk_io *io = rq->rq_io;
	struct io_uring_sqe *sqe = blk_engine_sqe(e);
	VERIFY(sqe != NULL); /* in-flight ios never exceed the ring's entries */
	int fd = io->bi_dev->bd_fd;
	uint8_t *buf = io->bi_op == BLK_IO_FLUSH ? NULL : (uint8_t *)io->bi_buf + rq->rq_done_bytes;
	unsigned len = SH_MIN(io->bi_len - rq->rq_done_bytes, e->be_max_transfer);
	uint64_t off = io->bi_offset + rq->rq_done_bytes;
	if (rq->rq_group_rest) {
		io_uring_prep_writev(sqe, fd, rq->rq_iov, rq->rq_niov, io->bi_offset);
		io_uring_sqe_set_data(sqe, rq);
		return;
	}
	switch (io->bi_op) {
	case BLK_IO_READ: io_uring_prep_read(sqe, fd, buf, len, off); break;
	case BLK_IO_WRITE: io_uring_prep_write(sqe, fd, buf, len, off); break;
	default: io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC); break;
	}
	io_uring_sqe_set_data(sqe, rq);
}

/* Rule 8: takes from the background backlog the writes that continue rq's io on its leaf, and
 * makes rq a group of them. Leaves rq a single io when none does (or no vector is free). */
static void blk_engine_gather(struct blk_engine *e, struct blk_req *rq)
{
	struct blk_io *io = rq->rq_io;
	uint32_t limit = SH_MIN(BLK_ENGINE_AGG_MAX_BYTES, e->be_max_transfer);
	if (io->bi_op != BLK_IO_WRITE || io->bi_alone || e->be_nfree_iovs == 0 ||
	    io->bi_len >= limit)
		return;
	uint64_t end = io->bi_offset + io->bi_len;
	uint32_t bytes = io->bi_len;
	struct blk_io *rest_head = NULL, *rest_tail = NULL;
	unsigned n = 1;
	while (n < BLK_ENGINE_AGG_MAX_IOS) {
		struct blk_io *prev = NULL, *cand = e->be_bg_backlog_head;
		bool found = false;
		for (unsigned seen = 0; cand && seen < BLK_ENGINE_AGG_SCAN; seen++) {
			found = cand->bi_dev == io->bi_dev && cand->bi_op == BLK_IO_WRITE &&
			        !cand->bi_alone && cand->bi_offset == end;
			if (found)
				break;
			prev = cand;
			cand = cand->bi_next;
		}
		if (!found || cand->bi_len > limit - bytes)
			break;
		if (prev)
			prev->bi_next = cand->bi_next;
		else
			e->be_bg_backlog_head = cand->bi_next;
		if (e->be_bg_backlog_tail == cand)
			e->be_bg_backlog_tail = prev;
		blk_list_append(&rest_head, &rest_tail, cand);
		end += cand->bi_len;
		bytes += cand->bi_len;
		n++;
	}
	if (!rest_head)
		return;
	rq->rq_iov = e->be_free_iovs[--e->be_nfree_iovs];
	rq->rq_iov[0] = (struct iovec){.iov_base = io->bi_buf, .iov_len = io->bi_len};
	unsigned i = 1;
	for (struct blk_io *m = rest_head; m; m = m->bi_next)
		rq->rq_iov[i++] = (struct iovec){.iov_base = m->bi_buf, .iov_len = m->bi_len};
	rq->rq_niov = n;
	rq->rq_group_rest = rest_head;
	rq->rq_group_bytes = bytes;
	atomic_fetch_add_explicit(&e->be_aggregated, n - 1, memory_order_relaxed);
}

static void blk_engine_to_ring(struct blk_engine *e, struct blk_io *io)
{
	struct blk_req *rq = e->be_free_reqs;
	VERIFY(rq != NULL);
	e->be_free_reqs = rq->rq_next_free;
	rq->rq_io = io;
	rq->rq_done_bytes = 0;
	rq->rq_group_rest = NULL;
	if (io->bi_background)
		blk_engine_gather(e, rq);
	e->be_inflight++;
	if (io->bi_background)
		e->be_bg_inflight++;
	blk_engine_prep(e, rq);
}

/* Fills free ring slots from the backlogs: foreground ios first (rule 6). */
static void blk_engine_refill(struct blk_engine *e)
{
	while (e->be_backlog_head && e->be_inflight < e->be_slots)
		blk_engine_to_ring(e, blk_list_pop(&e->be_backlog_head, &e->be_backlog_tail));
	while (e->be_bg_backlog_head && e->be_inflight < e->be_slots &&
	       e->be_bg_inflight < BLK_ENGINE_BACKGROUND_MAX)
		blk_engine_to_ring(e, blk_list_pop(&e->be_bg_backlog_head, &e->be_bg_backlog_tail));
}

static void blk_engine_start(struct blk_engine *e, struct blk_io *io)
{
	int rc = blk_io_check(io);
	if (rc == 0 && io->bi_op == BLK_IO_NOP) {
		blk_engine_complete(e, io, 0);
		return;
	}
	if (rc == 0)
		rc = blk_dev_hook_status(io->bi_dev, io->bi_op);
	if (rc != 0) {
		blk_engine_complete(e, io, rc);
		return;
	}
	if (io->bi_dev->bd_kind != BLK_DEV_FILE) {
		blk_engine_complete(e, io, blk_dev_mem_execute(io->bi_dev, io));
	} else if (!e->be_uring) {
		blk_engine_complete(e, io,
		                    blk_dev_file_execute(io->bi_dev, io, e->be_max_transfer));
	} else if (io->bi_background) {
		blk_list_append(&e->be_bg_backlog_head, &e->be_bg_backlog_tail, io);
	} else if (e->be_inflight < e->be_slots && !e->be_backlog_head) {
		blk_engine_to_ring(e, io);
	} else {
		blk_list_append(&e->be_backlog_head, &e->be_backlog_tail, io);
	}
}

/* Rule 8: a group's vectored write has completed. */
static void blk_engine_group_done(struct blk_engine *e, struct blk_req *rq, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		blk_engine_prep(e, rq); /* the whole group again */
		return;
	}
	struct blk_io *first = rq->rq_io, *rest = rq->rq_group_rest;
	pthread_mutex_lock(&e->be_lock);
	if (e->be_fail_groups > 0) {
		e->be_fail_groups--;
		res = -EIO;
	}
	pthread_mutex_unlock(&e->be_lock);
	bool whole = res >= 0 && (uint32_t)res == rq->rq_group_bytes;
	e->be_free_iovs[e->be_nfree_iovs++] = rq->rq_iov;
	rq->rq_group_rest = NULL;
	rq->rq_next_free = e->be_free_reqs;
	e->be_free_reqs = rq;
	e->be_inflight--;
	e->be_bg_inflight--;
	first->bi_next = rest;
	if (whole) {
		for (struct blk_io *m = first; m;) {
			struct blk_io *next = m->bi_next;
			blk_engine_complete(e, m, 0);
			m = next;
		}
		return;
	}
	/* Failed or short: each member again on its own, first in line, in the same order. */
	struct blk_io *last = first;
	for (struct blk_io *m = first; m; m = m->bi_next) {
		m->bi_alone = true;
		last = m;
	}
	last->bi_next = e->be_bg_backlog_head;
	e->be_bg_backlog_head = first;
	if (!e->be_bg_backlog_tail)
		e->be_bg_backlog_tail = last;
}

static void blk_engine_req_done(struct blk_engine *e, struct blk_req *rq, int res)
{
	if (rq->rq_group_rest) {
		blk_engine_group_done(e, rq, res);
		return;
	}
	struct blk_io *io = rq->rq_io;
	int status = 0;
	if (io->bi_op == BLK_IO_FLUSH) {
		status = res < 0 ? res : 0;
	} else if (res == -EINTR || res == -EAGAIN) {
		blk_engine_prep(e, rq); /* try the same range again */
		return;
	} else if (res < 0) {
		status = res;
	} else if (res == 0) {
		status = -EIO; /* no progress: end of file inside the leaf */
	} else {
		rq->rq_done_bytes += (uint32_t)res;
		if (rq->rq_done_bytes < io->bi_len && io->bi_dev->bd_direct &&
		    rq->rq_done_bytes % BLK_SECTOR_BYTES != 0) {
			/* It ended mid-sector: O_DIRECT cannot ask for the rest. */
			status = -EIO;
		} else if (rq->rq_done_bytes < io->bi_len) {
			blk_engine_prep(e, rq); /* a short transfer: continue with the rest */
			return;
		}
	}
	rq->rq_next_free = e->be_free_reqs;
	e->be_free_reqs = rq;
	e->be_inflight--;
	if (io->bi_background)
		e->be_bg_inflight--;
	blk_engine_complete(e, io, status);
}

/* Handles every available completion; with wait, first blocks for one. Returns how many. */
static unsigned blk_engine_reap(struct blk_engine *e, bool wait)
{
	struct io_uring_cqe *cqe;
	unsigned n = 0;
	if (wait) {
		int rc = io_uring_wait_cqe(&e->be_ring, &cqe);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIME)
			log_ratelimited(LOG_ERROR, "blk: io_uring_wait_cqe: %s", sh_strerror(rc));
	}
	while (io_uring_peek_cqe(&e->be_ring, &cqe) == 0) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&e->be_ring, cqe);
		n++;
		if (tag == BLK_ENGINE_WAKE_TAG) {
			if (res < 0 && res != -EINTR && res != -EAGAIN)
				log_ratelimited(LOG_ERROR, "blk: engine wake-up read: %s",
				                sh_strerror(res));
			pthread_mutex_lock(&e->be_lock);
			e->be_wake_pending = false;
			pthread_mutex_unlock(&e->be_lock);
			blk_engine_arm_wake(e);
			continue;
		}
		blk_engine_req_done(e, (struct blk_req *)(uintptr_t)tag, res);
	}
	return n;
}

static void blk_engine_flush_sqes(struct blk_engine *e)
{
	if (!e->be_sqes_pending)
		return;
	e->be_sqes_pending = false;
	int rc;
	do {
		rc = io_uring_submit(&e->be_ring);
	} while (rc == -EINTR || rc == -EAGAIN);
	if (rc < 0)
		log_ratelimited(LOG_ERROR, "blk: io_uring_submit: %s", sh_strerror(rc));
}

static void blk_engine_run_callbacks(struct blk_engine *e)
{
	struct blk_io *io;
	while ((io = blk_list_pop(&e->be_done_head, &e->be_done_tail)) != NULL)
		io->bi_done(io);
}

static void *blk_engine_main(void *arg)
{
	struct blk_engine *e = arg;
	blk_engine_self = e;
	sh_thread_setup("shale-io", SH_THREAD_BACKGROUND); /* rule 7 */
	if (e->be_uring) {
		blk_engine_arm_wake(e);
		blk_engine_flush_sqes(e);
	}
	struct blk_deferred deferred[BLK_ENGINE_DEFERRED_MAX];
	for (;;) {
		pthread_mutex_lock(&e->be_lock);
		struct blk_io *list = e->be_queue_head;
		e->be_queue_head = e->be_queue_tail = NULL;
		unsigned ndeferred = e->be_ndeferred;
		memcpy(deferred, e->be_deferred, ndeferred * sizeof(deferred[0]));
		e->be_ndeferred = 0;
		pthread_mutex_unlock(&e->be_lock);

		/* Reports queued before these ios were submitted go first. */
		for (unsigned i = 0; i < ndeferred; i++)
			deferred[i].df_fn(deferred[i].df_arg, deferred[i].df_status);
		while (list) {
			struct blk_io *next = list->bi_next;
			blk_engine_start(e, list);
			list = next;
		}
		blk_engine_refill(e);
		if (e->be_uring)
			blk_engine_flush_sqes(e);
		blk_engine_run_callbacks(e);
		if (e->be_uring && blk_engine_reap(e, false) > 0) {
			blk_engine_flush_sqes(e);
			continue;
		}

		pthread_mutex_lock(&e->be_lock);
		/* A non-empty backlog here means the ring (or its background share) is full: it
		 * waits for a completion. */
		bool more = e->be_queue_head || e->be_ndeferred > 0 || e->be_done_head;
		if (!more && e->be_stopping && e->be_inflight == 0 && !e->be_backlog_head &&
		    !e->be_bg_backlog_head) {
			pthread_mutex_unlock(&e->be_lock);
			break;
		}
		if (!more && !e->be_uring) {
			while (!e->be_queue_head && e->be_ndeferred == 0 && !e->be_stopping)
				pthread_cond_wait(&e->be_cond, &e->be_lock);
		}
		pthread_mutex_unlock(&e->be_lock);
		if (!more && e->be_uring) {
			blk_engine_reap(e, true);
			blk_engine_flush_sqes(e);
		}
	}
	blk_engine_self = NULL;
	return NULL;
}

/* ---- public entry points ---- */

int blk_engine_create(unsigned queue_depth, struct blk_engine **engine_out)
{
	*engine_out = NULL;
	if (queue_depth == 0)
		queue_depth = BLK_ENGINE_DEFAULT_DEPTH;
	queue_depth = SH_MAX(SH_MIN(queue_depth, BLK_ENGINE_MAX_DEPTH), 4u);
	struct blk_engine *e = mem_zalloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	int rc = 0;
	e->be_eventfd = -1;
	e->be_max_transfer = UINT32_MAX;
	VERIFY(pthread_mutex_init(&e->be_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&e->be_cond, NULL) == 0);

	const char *no_uring = getenv("SHALE_BLK_NO_URING");
	bool want_uring = !(no_uring && *no_uring && strcmp(no_uring, "0") != 0);
	if (want_uring) {
		int urc = io_uring_queue_init(queue_depth, &e->be_ring, 0);
		if (urc == 0) {
			e->be_uring = true;
		} else if (!atomic_exchange(&blk_engine_fallback_logged, true)) {
			log_warn("blk: io_uring unavailable (%s); file leaves use "
			         "pread/pwrite/fdatasync",
			         sh_strerror(urc));
		}
	}
	if (e->be_uring) {
		e->be_eventfd = eventfd(0, EFD_CLOEXEC);
		if (e->be_eventfd < 0) {
			rc = -errno;
			goto fail_ring;
		}
		/* One entry stays free for the wake-up read. */
		e->be_slots = queue_depth - 1;
		e->be_reqs = mem_zalloc(e->be_slots * sizeof(*e->be_reqs));
		if (!e->be_reqs) {
			rc = -ENOMEM;
			goto fail_eventfd;
		}
		for (unsigned i = 0; i < e->be_slots; i++) {
			e->be_reqs[i].rq_next_free = e->be_free_reqs;
			e->be_free_reqs = &e->be_reqs[i];
		}
		e->be_iovs = mem_alloc(BLK_ENGINE_BACKGROUND_MAX * BLK_ENGINE_AGG_MAX_IOS *
		                       sizeof(*e->be_iovs));
		if (!e->be_iovs) {
			rc = -ENOMEM;
			goto fail_reqs;
		}
		for (unsigned i = 0; i < BLK_ENGINE_BACKGROUND_MAX; i++) {
			struct iovec *vec = e->be_iovs + i * BLK_ENGINE_AGG_MAX_IOS;
			e->be_free_iovs[e->be_nfree_iovs++] = vec;
		}
	}
	rc = -pthread_create(&e->be_thread, NULL, blk_engine_main, e);
	if (rc != 0)
		goto fail_reqs;
	*engine_out = e;
	return 0;

fail_reqs:
	mem_free(e->be_iovs);
	mem_free(e->be_reqs);
fail_eventfd:
	if (e->be_eventfd >= 0)
		(void)close(e->be_eventfd);
fail_ring:
	if (e->be_uring)
		io_uring_queue_exit(&e->be_ring);
	pthread_cond_destroy(&e->be_cond);
	pthread_mutex_destroy(&e->be_lock);
	mem_free(e);
	return rc;
}

/* Wakes the engine thread (be_lock held); returns true when the caller must write the eventfd
 * after unlocking. */
static bool blk_engine_wake_locked(struct blk_engine *e)
{
	if (!e->be_uring) {
		pthread_cond_signal(&e->be_cond);
		return false;
	}
	if (e->be_wake_pending)
		return false;
	e->be_wake_pending = true;
	return true;
}

static void blk_engine_write_wake(struct blk_engine *e)
{
	uint64_t one = 1;
	while (write(e->be_eventfd, &one, sizeof(one)) < 0) {
		if (errno != EINTR) {
			/* Only an overflowing counter fails: a wake-up is pending anyway. */
			log_ratelimited(LOG_ERROR, "blk: engine wake-up: %s", sh_strerror(-errno));
			break;
		}
	}
}

void blk_engine_destroy(struct blk_engine *engine)
{
	if (!engine)
		return;
	VERIFY(!blk_engine_on_thread(engine));
	pthread_mutex_lock(&engine->be_lock);
	engine->be_stopping = true;
	bool write_wake = blk_engine_wake_locked(engine);
	pthread_mutex_unlock(&engine->be_lock);
	if (write_wake)
		blk_engine_write_wake(engine);
	VERIFY(pthread_join(engine->be_thread, NULL) == 0);
	if (engine->be_uring) {
		io_uring_queue_exit(&engine->be_ring); /* cancels the armed wake-up read */
		(void)close(engine->be_eventfd);
	}
	mem_free(engine->be_iovs);
	mem_free(engine->be_reqs);
	pthread_cond_destroy(&engine->be_cond);
	pthread_mutex_destroy(&engine->be_lock);
	mem_free(engine);
}

void blk_submit(struct blk_engine *engine, struct blk_io *io)
{
	bool on_thread = blk_engine_on_thread(engine);
	pthread_mutex_lock(&engine->be_lock);
	blk_list_append(&engine->be_queue_head, &engine->be_queue_tail, io);
	/* The engine thread re-checks the queue before it sleeps: no wake-up needed from it. */
	bool write_wake = !on_thread && blk_engine_wake_locked(engine);
	pthread_mutex_unlock(&engine->be_lock);
	if (write_wake)
		blk_engine_write_wake(engine);
}

void blk_engine_defer_status(struct blk_engine *engine, void (*fn)(void *arg, int status),
                             void *arg, int status)
{
	bool on_thread = blk_engine_on_thread(engine);
	pthread_mutex_lock(&engine->be_lock);
	if (engine->be_ndeferred == BLK_ENGINE_DEFERRED_MAX) {
		pthread_mutex_unlock(&engine->be_lock);
		log_ratelimited(LOG_ERROR,
		                "blk: too many failures to report at once; reporting one inline");
		fn(arg, status);
		return;
	}
	engine->be_deferred[engine->be_ndeferred++] = (struct blk_deferred){fn, arg, status};
	bool write_wake = !on_thread && blk_engine_wake_locked(engine);
	pthread_mutex_unlock(&engine->be_lock);
	if (write_wake)
		blk_engine_write_wake(engine);
}

/* ---- synchronous wrappers ---- */

struct blk_sync_wait {
	pthread_mutex_t sw_lock;
	pthread_cond_t sw_cond;
	bool sw_done;
};

static void blk_sync_done(struct blk_io *io)
{
	struct blk_sync_wait *w = io->bi_arg;
	pthread_mutex_lock(&w->sw_lock);
	w->sw_done = true;
	pthread_cond_signal(&w->sw_cond);
	pthread_mutex_unlock(&w->sw_lock);
}

int blk_io_sync(struct blk_engine *engine, struct blk_io *io)
{
	if (blk_engine_on_thread(engine)) {
		/* Waiting here would wait for this very thread. */
		io->bi_status = -EDEADLK;
		return io->bi_status;
	}
	struct blk_sync_wait w = {.sw_done = false};
	VERIFY(pthread_mutex_init(&w.sw_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&w.sw_cond, NULL) == 0);
	io->bi_done = blk_sync_done;
	io->bi_arg = &w;
	blk_submit(engine, io);
	pthread_mutex_lock(&w.sw_lock);
	while (!w.sw_done)
		pthread_cond_wait(&w.sw_cond, &w.sw_lock);
	pthread_mutex_unlock(&w.sw_lock);
	pthread_cond_destroy(&w.sw_cond);
	pthread_mutex_destroy(&w.sw_lock);
	return io->bi_status;
}

int blk_read_sync(struct blk_engine *engine, struct blk_dev *dev, uint64_t offset, void *buf,
                  uint32_t len)
{
	struct blk_io io = {
	    .bi_op = BLK_IO_READ, .bi_dev = dev, .bi_offset = offset, .bi_buf = buf, .bi_len = len};
	return blk_io_sync(engine, &io);
}

int blk_write_sync(struct blk_engine *engine, struct blk_dev *dev, uint64_t offset, const void *buf,
                   uint32_t len)
{
	/* The engine only reads a write's buffer; blk_io has one pointer type for both ways. */
	struct blk_io io = {.bi_op = BLK_IO_WRITE,
	                    .bi_dev = dev,
	                    .bi_offset = offset,
	                    .bi_buf = (void *)buf,
	                    .bi_len = len};
	return blk_io_sync(engine, &io);
}

int blk_flush_sync(struct blk_engine *engine, struct blk_dev *dev)
{
	struct blk_io io = {.bi_op = BLK_IO_FLUSH, .bi_dev = dev};
	return blk_io_sync(engine, &io);
}

void *blk_buf_alloc(size_t bytes)
{
	if (bytes > SIZE_MAX - BLK_SECTOR_BYTES)
		return NULL;
	size_t len = bytes == 0 ? BLK_SECTOR_BYTES : (size_t)blk_round_up(bytes, BLK_SECTOR_BYTES);
	void *buf = mem_aligned_alloc(BLK_SECTOR_BYTES, len);
	if (buf)
		memset(buf, 0, len);
	return buf;
}

/* ---- batches ---- */

static void blk_batch_done(struct blk_io *io)
{
	struct blk_batch *b = io->bi_arg;
	pthread_mutex_lock(&b->bb_lock);
	if (io->bi_status != 0 && b->bb_status == 0)
		b->bb_status = io->bi_status;
	if (--b->bb_pending == 0)
		pthread_cond_signal(&b->bb_cond);
	pthread_mutex_unlock(&b->bb_lock);
}

void blk_batch_init(struct blk_batch *batch)
{
	VERIFY(pthread_mutex_init(&batch->bb_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&batch->bb_cond, NULL) == 0);
	batch->bb_pending = 0;
	batch->bb_status = 0;
}

void blk_batch_submit(struct blk_batch *batch, struct blk_engine *engine, struct blk_io *io)
{
	if (blk_engine_on_thread(engine)) {
		/* A batch waits; waiting on the engine thread would deadlock. */
		pthread_mutex_lock(&batch->bb_lock);
		if (batch->bb_status == 0)
			batch->bb_status = -EDEADLK;
		pthread_mutex_unlock(&batch->bb_lock);
		return;
	}
	io->bi_done = blk_batch_done;
	io->bi_arg = batch;
	pthread_mutex_lock(&batch->bb_lock);
	batch->bb_pending++;
	pthread_mutex_unlock(&batch->bb_lock);
	blk_submit(engine, io);
}

int blk_batch_wait(struct blk_batch *batch)
{
	pthread_mutex_lock(&batch->bb_lock);
	while (batch->bb_pending > 0)
		pthread_cond_wait(&batch->bb_cond, &batch->bb_lock);
	int rc = batch->bb_status;
	pthread_mutex_unlock(&batch->bb_lock);
	pthread_cond_destroy(&batch->bb_cond);
	pthread_mutex_destroy(&batch->bb_lock);
	return rc;
}
