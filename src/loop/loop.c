/* loop.c: the per-thread event loop.
 *
 * Model
 *   A loop is an epoll set plus an eventfd. File descriptors are registered through struct
 *   loop_watch objects that the caller embeds in its own state; epoll_event.data.ptr points at the
 *   watch. Timers are timerfds registered the same way. Cross-thread work arrives as struct
 *   loop_task items pushed onto a lock-free LIFO (one atomic exchange/compare-exchange per push);
 *   the pusher that turns the list from empty to non-empty writes the eventfd, so a burst of posts
 *   costs one wake-up. The loop drains the whole list at once and runs it in FIFO order.
 *
 * Deferred tasks (loop_defer) are a plain FIFO of the loop's own thread, run at the end of each
 * turn, so that what a turn's callbacks produce (replies to many calls) can be handled once.
 *
 * Each turn reads the monotonic clock once, when its wait returns (loop_turn_ns), for
 * bookkeeping that needs no finer time (the RPC layer's idle connections): reading it per call
 * was a few percent of a busy loop's time here.
 *
 * The ring (loop_want_ring)
 *   A loop asked for one makes an io_uring on its own thread when loop_run starts (single issuer,
 *   completions' work deferred to the waits, so the kernel runs it only when the loop asks for
 *   events) and waits there instead of in epoll_wait. The epoll set is one multishot poll in the
 *   ring: when it fires, the turn fetches the set's events with a non-blocking epoll_wait and
 *   dispatches them as before. The eventfd of posted tasks leaves the epoll set for a read in
 *   the ring, so a task posted from another thread costs one completion rather than a poll
 *   event, a fetch and the fetch after it. A multishot poll reports new readiness only, and
 *   epoll puts a level-triggered descriptor that stays ready back on its ready list without
 *   waking the set's pollers, so after a fetch that returned events the next turn fetches
 *   again without sleeping, until one returns none. Owners' ops (struct loop_op, the entry's
 *   user data) complete through the ring: each turn submits what the turn prepared, waits for
 *   at least one completion, copies the completions out and runs their callbacks. lp_ring_ops
 *   counts ops whose last completion has not come; at stop the loop cancels them all and runs
 *   their callbacks before it frees the ring, so no owner is left holding an op.
 *
 * Invariants
 *   1. Only the loop's thread touches the epoll set's registrations and runs callbacks.
 *   2. A watch deleted during a turn receives no further events from that turn: loop_watch_del
 *      clears any not-yet-dispatched entries of the current batch that point at it, so its owner
 *      may free it right after deleting it.
 *   3. Posted tasks run in the order posted by any one thread; a task posted from the loop's own
 *      thread runs on a later turn, never re-entrantly.
 *
 * Concurrency: loop_post and loop_stop are the only entry points safe from other threads; they
 * touch only the atomic task list head, the atomic stop flag and the eventfd. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "loop/loop.h"

#define LOOP_BATCH 64 /* events fetched per epoll_wait; enough to amortise the syscall */
#define LOOP_RING_ENTRIES 256u
#define LOOP_RING_CQ_ENTRIES 4096u
#define LOOP_REAP_MAX 128u /* completions copied out of the ring per batch */
#define LOOP_DRAIN_WAIT_NS 100000000L /* per wait while cancelling ops at stop */
#define LOOP_DRAIN_ROUNDS 50

struct loop {
	int lp_epoll_fd;
	int lp_wake_fd;
	struct loop_watch lp_wake_watch;
	_Atomic(struct loop_task *) lp_posted; /* LIFO of tasks posted since the last drain */
	atomic_bool lp_stop;
	unsigned lp_index;
	/* The batch being dispatched, so loop_watch_del can cancel pending events (invariant 2). */
	struct epoll_event lp_batch[LOOP_BATCH];
	int lp_batch_len;
	int lp_batch_pos;
	/* Tasks to run at the end of this turn (loop thread only). */
	struct loop_task *lp_deferred_head;
	struct loop_task *lp_deferred_tail;
	uint64_t lp_spin_ns; /* loop_set_spin_ns; 0: block at once */
	_Atomic uint64_t *lp_spin_idle; /* loop_count_spin_idle, or NULL */
	uint64_t lp_turn_ns; /* loop_turn_ns: the monotonic clock when this turn's wait returned */
	/* The ring (see the top of this file); NULL when the loop runs on epoll alone. */
	bool lp_want_ring;
	struct io_uring *lp_ring;
	struct io_uring lp_ring_storage;
	struct loop_op lp_epoll_op; /* the multishot poll of lp_epoll_fd */
	struct loop_op lp_wake_op;  /* a read of lp_wake_fd, which is then not in the epoll set */
	bool lp_wake_armed;
	uint64_t lp_wake_count;     /* lp_wake_op's buffer */
	bool lp_epoll_armed;
	bool lp_epoll_again;        /* fetch the epoll set's events next turn without sleeping */
	bool lp_ring_closing;       /* stopping: cancel, do not re-arm */
	unsigned lp_ring_ops;       /* ops whose last completion has not been handled */
};

static _Thread_local struct loop *loop_this_thread;
static atomic_uint loop_next_index;

static void loop_drain_posted(struct loop *loop)
{
	struct loop_task *list = atomic_exchange(&loop->lp_posted, NULL);
	/* The list is newest first; reverse it to run tasks in posting order. */
	struct loop_task *fifo = NULL;
	while (list) {
		struct loop_task *next = list->lt_next;
		list->lt_next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo) {
		struct loop_task *task = fifo;
		fifo = task->lt_next;
		task->lt_next = NULL;
		task->lt_fn(task);
	}
}

static void loop_on_wake(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	struct loop *loop = watch->lw_arg;
	uint64_t count;
	/* Reset the eventfd before draining: a post that lands after the drain writes it again. */
	ssize_t n = read(loop->lp_wake_fd, &count, sizeof(count));
	(void)n; /* EAGAIN just means another turn already consumed the wake-up */
	loop_drain_posted(loop);
}

int loop_create(struct loop **out)
{
	struct loop *loop = mem_zalloc(sizeof(*loop));
	if (!loop)
		return -ENOMEM;
	int rc;
	loop->lp_epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->lp_epoll_fd < 0) {
		rc = -errno;
		goto out_free;
	}
	loop->lp_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (loop->lp_wake_fd < 0) {
		rc = -errno;
		goto out_close_epoll;
	}
	atomic_init(&loop->lp_posted, NULL);
	atomic_init(&loop->lp_stop, false);
	loop->lp_index = atomic_fetch_add(&loop_next_index, 1);
	loop->lp_turn_ns = clock_monotonic_ns();
	rc = loop_watch_add(loop, &loop->lp_wake_watch, loop->lp_wake_fd, LOOP_IN, loop_on_wake, loop);
	if (rc < 0)
		goto out_close_wake;
	*out = loop;
	return 0;
out_close_wake:
	close(loop->lp_wake_fd);
out_close_epoll:
	close(loop->lp_epoll_fd);
out_free:
	mem_free(loop);
	return rc;
}

void loop_destroy(struct loop *loop)
{
	if (!loop)
		return;
	close(loop->lp_wake_fd);
	close(loop->lp_epoll_fd);
	mem_free(loop);
}

int loop_watch_add(struct loop *loop, struct loop_watch *watch, int fd, uint32_t events,
		   loop_io_fn fn, void *arg)
{
	watch->lw_fd = fd;
	watch->lw_events = events;
	watch->lw_fn = fn;
	watch->lw_arg = arg;
	struct epoll_event ev = {.events = events, .data.ptr = watch};
	if (epoll_ctl(loop->lp_epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	return 0;
}

int loop_watch_mod(struct loop *loop, struct loop_watch *watch, uint32_t events)
{
	if (watch->lw_events == events)
		return 0;
	struct epoll_event ev = {.events = events, .data.ptr = watch};
	if (epoll_ctl(loop->lp_epoll_fd, EPOLL_CTL_MOD, watch->lw_fd, &ev) < 0)
		return -errno;
	watch->lw_events = events;
	return 0;
}

void loop_watch_del(struct loop *loop, struct loop_watch *watch)
{
	/* Failure means the fd was already closed or never added: nothing left to undo. */
	(void)epoll_ctl(loop->lp_epoll_fd, EPOLL_CTL_DEL, watch->lw_fd, NULL);
	for (int i = loop->lp_batch_pos; i < loop->lp_batch_len; i++)
		if (loop->lp_batch[i].data.ptr == watch)
			loop->lp_batch[i].data.ptr = NULL;
}

static void loop_on_timer(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	struct loop_timer *timer = watch->lw_arg;
	uint64_t expirations;
	if (read(timer->lt_fd, &expirations, sizeof(expirations)) != (ssize_t)sizeof(expirations))
		return; /* spurious wake-up */
	timer->lt_fn(timer);
}

int loop_timer_add(struct loop *loop, struct loop_timer *timer, uint64_t first_ns,
		   uint64_t interval_ns, loop_timer_fn fn, void *arg)
{
	timer->lt_fn = fn;
	timer->lt_arg = arg;
	timer->lt_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (timer->lt_fd < 0)
		return -errno;
	if (first_ns == 0)
		first_ns = 1; /* an all-zero it_value would disarm the timer */
	struct itimerspec spec = {
		.it_value = {.tv_sec = (time_t)(first_ns / 1000000000ull),
			     .tv_nsec = (long)(first_ns % 1000000000ull)},
		.it_interval = {.tv_sec = (time_t)(interval_ns / 1000000000ull),
				.tv_nsec = (long)(interval_ns % 1000000000ull)},
	};
	int rc;
	if (timerfd_settime(timer->lt_fd, 0, &spec, NULL) < 0) {
		rc = -errno;
		goto out_close;
	}
	rc = loop_watch_add(loop, &timer->lt_watch, timer->lt_fd, LOOP_IN, loop_on_timer, timer);
	if (rc < 0)
		goto out_close;
	return 0;
out_close:
	close(timer->lt_fd);
	timer->lt_fd = -1;
	return rc;
}

void loop_timer_del(struct loop *loop, struct loop_timer *timer)
{
	if (timer->lt_fd < 0)
		return;
	loop_watch_del(loop, &timer->lt_watch);
	close(timer->lt_fd);
	timer->lt_fd = -1;
}

static void loop_wake(struct loop *loop)
{
	uint64_t one = 1;
	/* EAGAIN means the counter is already non-zero: the loop will wake anyway. */
	ssize_t n = write(loop->lp_wake_fd, &one, sizeof(one));
	(void)n;
}

void loop_post(struct loop *loop, struct loop_task *task)
{
	struct loop_task *head = atomic_load_explicit(&loop->lp_posted, memory_order_relaxed);
	do {
		task->lt_next = head;
	} while (!atomic_compare_exchange_weak_explicit(&loop->lp_posted, &head, task,
							memory_order_release, memory_order_relaxed));
	if (head == NULL)
		loop_wake(loop);
}

void loop_defer(struct loop *loop, struct loop_task *task)
{
	ASSERT(loop_this_thread == loop);
	task->lt_next = NULL;
	if (loop->lp_deferred_tail)
		loop->lp_deferred_tail->lt_next = task;
	else
		loop->lp_deferred_head = task;
	loop->lp_deferred_tail = task;
}

static void loop_run_deferred(struct loop *loop)
{
	while (loop->lp_deferred_head) {
		struct loop_task *task = loop->lp_deferred_head;
		loop->lp_deferred_head = task->lt_next;
		if (!loop->lp_deferred_head)
			loop->lp_deferred_tail = NULL;
		task->lt_next = NULL;
		task->lt_fn(task);
	}
}

uint64_t loop_turn_ns(const struct loop *loop)
{
	return loop->lp_turn_ns;
}

void loop_set_spin_ns(struct loop *loop, uint64_t spin_ns)
{
	loop->lp_spin_ns = spin_ns;
}

void loop_count_spin_idle(struct loop *loop, _Atomic uint64_t *counter)
{
	loop->lp_spin_idle = counter;
}

/* Adds idle_ns to the spin counter, if any. Only this thread writes it, so no locked add. */
static void loop_note_spin_idle(struct loop *loop, uint64_t idle_ns)
{
	if (loop->lp_spin_idle == NULL)
		return;
	uint64_t v = atomic_load_explicit(loop->lp_spin_idle, memory_order_relaxed);
	atomic_store_explicit(loop->lp_spin_idle, v + idle_ns, memory_order_relaxed);
}

/* One epoll_wait, after polling without sleeping for up to lp_spin_ns when that is set. The
 * time up to the start of the poll that found something (or to the deadline) counts as the
 * spin's idle time. */
static int loop_wait(struct loop *loop)
{
	if (loop->lp_spin_ns > 0) {
		uint64_t start = clock_monotonic_ns(), now = start;
		uint64_t deadline = start + loop->lp_spin_ns;
		do {
			int n = epoll_wait(loop->lp_epoll_fd, loop->lp_batch, LOOP_BATCH, 0);
			if (n != 0 || atomic_load_explicit(&loop->lp_stop, memory_order_relaxed)) {
				loop_note_spin_idle(loop, now - start);
				return n;
			}
			now = clock_monotonic_ns();
		} while (now < deadline);
		loop_note_spin_idle(loop, now - start);
	}
	return epoll_wait(loop->lp_epoll_fd, loop->lp_batch, LOOP_BATCH, -1);
}

/* Runs the callbacks of the events in lp_batch[0..n). */
static void loop_dispatch_batch(struct loop *loop, int n)
{
	loop->lp_batch_len = n;
	for (loop->lp_batch_pos = 0; loop->lp_batch_pos < n;) {
		struct epoll_event *ev = &loop->lp_batch[loop->lp_batch_pos++];
		struct loop_watch *watch = ev->data.ptr;
		if (watch)
			watch->lw_fn(watch, ev->events);
	}
	loop->lp_batch_len = 0;
	loop->lp_batch_pos = 0;
}

void loop_want_ring(struct loop *loop)
{
	loop->lp_want_ring = true;
}

struct io_uring *loop_ring(struct loop *loop)
{
	return loop->lp_ring;
}

struct io_uring_sqe *loop_op_sqe(struct loop *loop, struct loop_op *op)
{
	struct io_uring *ring = loop->lp_ring;
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		(void)io_uring_submit(ring); /* a full queue: hand it to the kernel now */
		sqe = io_uring_get_sqe(ring);
		if (!sqe)
			return NULL;
	}
	io_uring_sqe_set_data(sqe, op);
	if (op)
		loop->lp_ring_ops++;
	return sqe;
}

static void loop_on_epoll_ready(struct loop_op *op, int res, uint32_t cqe_flags)
{
	(void)res; /* an error ends the poll (no F_MORE); it is armed again below */
	struct loop *loop = SH_CONTAINER_OF(op, struct loop, lp_epoll_op);
	if (!(cqe_flags & IORING_CQE_F_MORE))
		loop->lp_epoll_armed = false;
	loop->lp_epoll_again = true;
}

static void loop_arm_epoll(struct loop *loop)
{
	struct io_uring_sqe *sqe = loop_op_sqe(loop, &loop->lp_epoll_op);
	if (!sqe) {
		loop->lp_epoll_again = true; /* fetch without sleeping, and try again next turn */
		return;
	}
	io_uring_prep_poll_multishot(sqe, loop->lp_epoll_fd, POLLIN);
	loop->lp_epoll_armed = true;
}

static void loop_arm_wake(struct loop *loop);

static void loop_on_wake_read(struct loop_op *op, int res, uint32_t cqe_flags)
{
	(void)res; /* a failed read is armed again below; the tasks are drained either way */
	(void)cqe_flags;
	struct loop *loop = SH_CONTAINER_OF(op, struct loop, lp_wake_op);
	loop->lp_wake_armed = false;
	if (!loop->lp_ring_closing)
		loop_arm_wake(loop);
	loop_drain_posted(loop);
}

/* Reads the eventfd through the ring: its completion is the wake-up of a post. */
static void loop_arm_wake(struct loop *loop)
{
	struct io_uring_sqe *sqe = loop_op_sqe(loop, &loop->lp_wake_op);
	if (!sqe)
		return; /* tried again at the end of the turn */
	io_uring_prep_read(sqe, loop->lp_wake_fd, &loop->lp_wake_count,
			   sizeof(loop->lp_wake_count), 0);
	loop->lp_wake_armed = true;
}

/* Makes the loop's ring, on the loop's thread (a single-issuer ring belongs to its maker). */
static void loop_ring_open(struct loop *loop)
{
	struct io_uring_params params;
	memset(&params, 0, sizeof(params));
	params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	params.flags |= IORING_SETUP_CQSIZE;
	params.cq_entries = LOOP_RING_CQ_ENTRIES;
	int rc = io_uring_queue_init_params(LOOP_RING_ENTRIES, &loop->lp_ring_storage, &params);
	if (rc < 0) {
		/* A kernel before 6.1: no deferred completion work. */
		memset(&params, 0, sizeof(params));
		params.flags = IORING_SETUP_CQSIZE;
		params.cq_entries = LOOP_RING_CQ_ENTRIES;
		rc = io_uring_queue_init_params(LOOP_RING_ENTRIES, &loop->lp_ring_storage, &params);
	}
	if (rc < 0) {
		log_info("loop %u: no io_uring (%s); waiting in epoll", loop->lp_index,
			 strerror(-rc));
		return;
	}
	loop->lp_ring = &loop->lp_ring_storage;
	loop->lp_epoll_op.lo_fn = loop_on_epoll_ready;
	loop->lp_wake_op.lo_fn = loop_on_wake_read;
	loop_watch_del(loop, &loop->lp_wake_watch);
	/* Blocking, or the ring's read of it would fail at once with EAGAIN rather than wait. */
	int flags = fcntl(loop->lp_wake_fd, F_GETFL);
	if (flags >= 0)
		(void)fcntl(loop->lp_wake_fd, F_SETFL, flags & ~O_NONBLOCK);
	loop_arm_wake(loop);
	loop->lp_epoll_again = true; /* what is already ready raised no poll event */
	loop_arm_epoll(loop);
	/* Tasks posted before the read was armed: their eventfd write is consumed by the read. */
}

/* Copies out and handles the ring's completions; the number handled. */
static unsigned loop_ring_reap(struct loop *loop)
{
	struct io_uring *ring = loop->lp_ring;
	unsigned total = 0;
	for (;;) {
		struct {
			struct loop_op *op;
			int res;
			uint32_t flags;
		} done[LOOP_REAP_MAX];
		unsigned n = 0;
		unsigned head;
		struct io_uring_cqe *cqe;
		io_uring_for_each_cqe(ring, head, cqe)
		{
			if (n == LOOP_REAP_MAX)
				break;
			done[n].op = io_uring_cqe_get_data(cqe);
			done[n].res = cqe->res;
			done[n].flags = cqe->flags;
			n++;
		}
		if (n == 0)
			return total;
		/* Handed back before the callbacks run, which may submit (and so complete) more. */
		io_uring_cq_advance(ring, n);
		for (unsigned i = 0; i < n; i++) {
			if (!done[i].op)
				continue;
			if (!(done[i].flags & IORING_CQE_F_MORE))
				loop->lp_ring_ops--;
			done[i].op->lo_fn(done[i].op, done[i].res, done[i].flags);
		}
		total += n;
	}
}

/* One turn on the ring: submit what the last turn prepared and wait (see the top of the file). */
static int loop_ring_turn(struct loop *loop)
{
	struct io_uring *ring = loop->lp_ring;
	int rc = loop->lp_epoll_again ? io_uring_submit_and_get_events(ring)
				       : io_uring_submit_and_wait(ring, 1);
	loop->lp_turn_ns = clock_monotonic_ns();
	if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
		log_error("io_uring_enter failed: %s", strerror(-rc));
		return rc;
	}
	loop_ring_reap(loop);
	if (loop->lp_epoll_again) {
		loop->lp_epoll_again = false;
		int n = epoll_wait(loop->lp_epoll_fd, loop->lp_batch, LOOP_BATCH, 0);
		if (n < 0 && errno != EINTR) {
			rc = -errno;
			log_error("epoll_wait failed: %s", strerror(errno));
			return rc;
		}
		if (n > 0) {
			loop_dispatch_batch(loop, n);
			loop->lp_epoll_again = true;
		}
	}
	if (!loop->lp_epoll_armed && !loop->lp_ring_closing)
		loop_arm_epoll(loop);
	if (!loop->lp_wake_armed && !loop->lp_ring_closing)
		loop_arm_wake(loop);
	loop_run_deferred(loop);
	return 0;
}

/* At stop: cancels every op still in the ring, runs their last callbacks, frees the ring. */
static void loop_ring_close(struct loop *loop)
{
	struct io_uring *ring = loop->lp_ring;
	loop->lp_ring_closing = true;
	for (int round = 0; loop->lp_ring_ops > 0 && round < LOOP_DRAIN_ROUNDS; round++) {
		struct io_uring_sqe *sqe = loop_op_sqe(loop, NULL);
		if (sqe)
			io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
		struct __kernel_timespec limit = {.tv_sec = 0, .tv_nsec = LOOP_DRAIN_WAIT_NS};
		struct io_uring_cqe *cqe;
		(void)io_uring_submit_and_wait_timeout(ring, &cqe, 1, &limit, NULL);
		loop_ring_reap(loop);
		loop_drain_posted(loop);
		loop_run_deferred(loop);
	}
	if (loop->lp_ring_ops > 0)
		log_warn("loop %u: %u ring ops did not finish at stop", loop->lp_index,
			 loop->lp_ring_ops);
	io_uring_queue_exit(ring);
	loop->lp_ring = NULL;
}

int loop_run(struct loop *loop)
{
	loop_this_thread = loop;
	int rc = 0;
	if (loop->lp_want_ring && !loop->lp_ring)
		loop_ring_open(loop);
	while (!atomic_load_explicit(&loop->lp_stop, memory_order_relaxed)) {
		if (loop->lp_ring) {
			rc = loop_ring_turn(loop);
			if (rc < 0)
				break;
			continue;
		}
		int n = loop_wait(loop);
		loop->lp_turn_ns = clock_monotonic_ns();
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			log_error("epoll_wait failed: %s", strerror(errno));
			break;
		}
		loop_dispatch_batch(loop, n);
		loop_run_deferred(loop);
	}
	/* Run what was posted before the stop so that no completion is silently lost. */
	loop_drain_posted(loop);
	loop_run_deferred(loop);
	if (loop->lp_ring)
		loop_ring_close(loop);
	loop_this_thread = NULL;
	return rc;
}

void loop_stop(struct loop *loop)
{
	atomic_store(&loop->lp_stop, true);
	loop_wake(loop);
}

struct loop *loop_current(void)
{
	return loop_this_thread;
}

bool loop_on_thread(const struct loop *loop)
{
	return loop_this_thread == loop;
}

unsigned loop_index(const struct loop *loop)
{
	return loop->lp_index;
}
