/* loop.h: the event loop. One loop runs per thread (one thread per core in `shale serve`); it
 * multiplexes file descriptors with epoll, runs timers, and runs tasks posted from other threads.
 *
 * Threading contract: every function here except loop_post and loop_stop must be called on the
 * loop's own thread (or before loop_run starts it). Callbacks always run on the loop's thread.
 * Objects that callers register (struct loop_watch, struct loop_timer, struct loop_task) are
 * embedded in the caller's own structures; the loop never allocates or frees them. */
#ifndef SHALE_LOOP_H
#define SHALE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

struct loop;

/* Readiness event bits, the same values as EPOLLIN/EPOLLOUT/EPOLLERR/EPOLLHUP/EPOLLRDHUP so that
 * callers need not include sys/epoll.h. */
enum {
	LOOP_IN = 0x001,
	LOOP_OUT = 0x004,
	LOOP_ERR = 0x008,
	LOOP_HUP = 0x010,
	LOOP_RDHUP = 0x2000,
};

struct loop_watch;
typedef void (*loop_io_fn)(struct loop_watch *watch, uint32_t events);
struct loop_watch {
	int lw_fd;
	uint32_t lw_events;
	loop_io_fn lw_fn;
	void *lw_arg; /* the caller's own pointer */
};

struct loop_timer;
typedef void (*loop_timer_fn)(struct loop_timer *timer);
struct loop_timer {
	int lt_fd; /* timerfd */
	struct loop_watch lt_watch;
	loop_timer_fn lt_fn;
	void *lt_arg;
};

/* A unit of work handed to a loop from any thread. Embed it in the object it concerns. */
struct loop_task;
typedef void (*loop_task_fn)(struct loop_task *task);
struct loop_task {
	struct loop_task *lt_next; /* the loop's own link while queued */
	loop_task_fn lt_fn;
};

/* Ring operations. A loop asked for a ring (loop_want_ring) owns an io_uring, made on its own
 * thread when loop_run starts, and then waits in it rather than in epoll_wait: the epoll set is
 * one multishot poll in the ring, so watches, timers and posted tasks work as before, while an
 * owner may also put operations (a socket's receives and sends) straight into the ring, which
 * the loop submits with its next wait: a turn then costs one system call however many sockets
 * it reads and writes. A loop_op is embedded by its owner, which must keep it valid until the
 * op's last completion (a completion without IORING_CQE_F_MORE in cqe_flags). An entry names
 * its descriptor by number until it is submitted, so the owner must not close that descriptor
 * before the op's last completion either: a descriptor opened meanwhile under the same number
 * would receive the op. */
struct loop_op;
typedef void (*loop_op_fn)(struct loop_op *op, int res, uint32_t cqe_flags);
struct loop_op {
	loop_op_fn lo_fn;
};
struct io_uring;
struct io_uring_sqe;

/* Creates a loop (epoll set, eventfd for posted tasks). Destroy with loop_destroy. */
SH_MUST_CHECK int loop_create(struct loop **out);
/* Frees the loop. Watches still registered are not closed: their owners close their fds. */
void loop_destroy(struct loop *loop);

/* Starts watching fd for events (LOOP_IN/LOOP_OUT; errors and hang-ups always reported). The
 * watch must stay valid until loop_watch_del. Returns 0 or -errno. */
SH_MUST_CHECK int loop_watch_add(struct loop *loop, struct loop_watch *watch, int fd,
				 uint32_t events, loop_io_fn fn, void *arg);
SH_MUST_CHECK int loop_watch_mod(struct loop *loop, struct loop_watch *watch, uint32_t events);
/* Stops watching; safe to call from inside the watch's own callback. */
void loop_watch_del(struct loop *loop, struct loop_watch *watch);

/* Arms a timer that first fires after first_ns and then every interval_ns (0 = once).
 * Stop with loop_timer_del. Returns 0 or -errno. */
SH_MUST_CHECK int loop_timer_add(struct loop *loop, struct loop_timer *timer, uint64_t first_ns,
				 uint64_t interval_ns, loop_timer_fn fn, void *arg);
void loop_timer_del(struct loop *loop, struct loop_timer *timer);

/* Queues task to run on the loop's thread. Callable from any thread, including the loop's own
 * (then it runs on a later turn, never re-entrantly). Never fails: the task is embedded. */
void loop_post(struct loop *loop, struct loop_task *task);

/* Runs task on the loop's thread at the end of the current turn: after every ready event and
 * every posted task of the turn has been handled, before the loop waits again. For work that
 * gathers what a turn produced, such as writing all the replies completed in a turn with one
 * system call. Loop thread only; the task must not be deferred again until it has run. Tasks
 * deferred by a deferred task run in the same turn. */
void loop_defer(struct loop *loop, struct loop_task *task);

/* The monotonic clock (clock_monotonic_ns) as read when the loop's current turn began: one read
 * per turn, for coarse bookkeeping on the loop's thread (idle timeouts). A turn that runs long
 * leaves it that far behind. */
uint64_t loop_turn_ns(const struct loop *loop);

/* Makes the loop poll its descriptors without sleeping for up to spin_ns after each turn before it
 * blocks. A woken sleeping thread costs tens of microseconds on a virtual machine (the idle vCPU
 * halts); a spinning one answers at once, at the price of a busy core. For the load generator,
 * whose own latency must not be counted against the server it measures; 0 (the default) turns it
 * off. Call before loop_run. */
void loop_set_spin_ns(struct loop *loop, uint64_t spin_ns);

/* Makes the loop add to *counter the nanoseconds each spin (loop_set_spin_ns) polled without
 * finding an event: CPU that a polling loop burns while idle, which a caller measuring its own
 * CPU can take off. Only the loop's thread adds; any thread may read the counter. NULL stops
 * the counting. Call before loop_run. */
void loop_count_spin_idle(struct loop *loop, _Atomic uint64_t *counter);

/* Asks loop_run to make the loop a ring of its own (above). Call before loop_run. Without one
 * (not asked, or the kernel refused it: an old kernel, a sandbox), the loop runs on epoll alone
 * and loop_ring returns NULL. */
void loop_want_ring(struct loop *loop);
/* The loop's ring, or NULL. Loop thread only. */
struct io_uring *loop_ring(struct loop *loop);
/* A submission entry of the loop's ring whose completions run op->lo_fn on the loop's thread
 * (op NULL: completions are ignored, for cancellations). The loop submits it with its next wait.
 * NULL when the ring has none free even after submitting what it holds. Loop thread only. */
struct io_uring_sqe *loop_op_sqe(struct loop *loop, struct loop_op *op);

/* Runs the loop on the calling thread until loop_stop. Returns 0 or -errno on a fatal epoll
 * error. */
SH_MUST_CHECK int loop_run(struct loop *loop);
/* Asks the loop to return from loop_run after the current turn. Callable from any thread. A
 * stopped loop stays stopped: a later loop_run returns at once (so a stop that races ahead of
 * loop_run is never lost); make a new loop to run again. */
void loop_stop(struct loop *loop);

/* The loop running on the calling thread, or NULL. */
struct loop *loop_current(void);
/* True when called on loop's own thread. */
bool loop_on_thread(const struct loop *loop);
/* Index in the order loops were created in this process (0, 1, ...), for logs. */
unsigned loop_index(const struct loop *loop);

#endif
