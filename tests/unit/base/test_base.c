/* test_base.c: unit tests for src/base (allocation failure injection, rate limiting, helpers) and
 * src/loop (cross-thread posting, ordering, timers, watch deletion during a batch, deferred tasks
 * at the end of a turn and their interplay with posting and stopping). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "loop/loop.h"
#include "tap.h"

static void test_mem_fail_after(void)
{
	mem_fail_after(2);
	void *a = mem_alloc(8), *b = mem_alloc(8), *c = mem_alloc(8), *d = mem_alloc(8);
	CHECK(a != NULL);
	CHECK(b != NULL);
	CHECK(c == NULL); /* the third call from now fails */
	CHECK(d != NULL); /* and only that one */
	mem_free(a);
	mem_free(b);
	mem_free(d);
	mem_fail_after(-1);
	char *s = mem_strndup("abcdef", 3);
	CHECK(s && strcmp(s, "abc") == 0);
	mem_free(s);
}

static void test_ratelimit(void)
{
	struct log_ratelimit rl = {0};
	rl.window_start_ns = clock_monotonic_ns();
	int allowed = 0;
	for (int i = 0; i < 100; i++)
		allowed += log_ratelimit_allow(&rl) ? 1 : 0;
	CHECKF(allowed == 5, "allowed %d", allowed);
	CHECK(rl.suppressed == 95);
}

static void test_strerror_and_random(void)
{
	CHECK(strcmp(sh_strerror(-SH_EBADHANDLE), "bad file handle") == 0);
	CHECK(strlen(sh_strerror(-ENOENT)) > 0);
	uint8_t a[32] = {0}, b[32] = {0};
	CHECK(sh_random_bytes(a, sizeof(a)) == 0);
	CHECK(sh_random_bytes(b, sizeof(b)) == 0);
	CHECK(memcmp(a, b, sizeof(a)) != 0);
	CHECK(sh_hash64("abc", 3, 1) == sh_hash64("abc", 3, 1));
	CHECK(sh_hash64("abc", 3, 1) != sh_hash64("abd", 3, 1));
}

/* ---- loop ---- */
#define POSTERS 4
#define POSTS_EACH 20000

struct post_item {
	struct loop_task task;
	int poster;
	int seq;
};
struct post_state {
	struct loop *loop;
	struct post_item *items;
	int last_seq[POSTERS];
	atomic_int ran;
	bool order_ok;
	bool thread_ok;
};
static struct post_state post_state;

static void post_item_run(struct loop_task *task)
{
	struct post_item *item = SH_CONTAINER_OF(task, struct post_item, task);
	if (!loop_on_thread(post_state.loop))
		post_state.thread_ok = false;
	if (item->seq != post_state.last_seq[item->poster] + 1)
		post_state.order_ok = false;
	post_state.last_seq[item->poster] = item->seq;
	if (atomic_fetch_add(&post_state.ran, 1) + 1 == POSTERS * POSTS_EACH)
		loop_stop(post_state.loop);
}

static void *poster_main(void *arg)
{
	int poster = (int)(intptr_t)arg;
	for (int i = 0; i < POSTS_EACH; i++) {
		struct post_item *item = &post_state.items[poster * POSTS_EACH + i];
		item->poster = poster;
		item->seq = i;
		item->task.lt_fn = post_item_run;
		loop_post(post_state.loop, &item->task);
	}
	return NULL;
}

static void test_loop_post_from_threads(void)
{
	memset(&post_state, 0, sizeof(post_state));
	CHECK(loop_create(&post_state.loop) == 0);
	post_state.items = mem_zalloc(sizeof(struct post_item) * POSTERS * POSTS_EACH);
	post_state.order_ok = true;
	post_state.thread_ok = true;
	for (int i = 0; i < POSTERS; i++)
		post_state.last_seq[i] = -1;
	pthread_t threads[POSTERS];
	for (int i = 0; i < POSTERS; i++)
		pthread_create(&threads[i], NULL, poster_main, (void *)(intptr_t)i);
	CHECK(loop_run(post_state.loop) == 0);
	for (int i = 0; i < POSTERS; i++)
		pthread_join(threads[i], NULL);
	CHECK(atomic_load(&post_state.ran) == POSTERS * POSTS_EACH);
	CHECK(post_state.order_ok);
	CHECK(post_state.thread_ok);
	CHECK(loop_current() == NULL);
	mem_free(post_state.items);
	loop_destroy(post_state.loop);
}

struct timer_state {
	struct loop *loop;
	int fired;
};
static void timer_fired(struct loop_timer *timer)
{
	struct timer_state *st = timer->lt_arg;
	if (++st->fired == 3) {
		loop_timer_del(st->loop, timer);
		loop_stop(st->loop);
	}
}

static void test_loop_timer(void)
{
	struct timer_state st = {0};
	struct loop_timer timer;
	_Atomic uint64_t spin_idle = 0;
	CHECK(loop_create(&st.loop) == 0);
	loop_count_spin_idle(st.loop, &spin_idle); /* a loop that does not spin counts nothing */
	uint64_t start = clock_monotonic_ns();
	CHECK(loop_timer_add(st.loop, &timer, 10000000, 10000000, timer_fired, &st) == 0);
	CHECK(loop_run(st.loop) == 0);
	uint64_t elapsed = clock_monotonic_ns() - start;
	CHECK(st.fired == 3);
	CHECKF(elapsed >= 30000000ull, "elapsed %llu ns", (unsigned long long)elapsed);
	CHECK(atomic_load(&spin_idle) == 0);
	loop_destroy(st.loop);
}

/* A spinning loop (loop_set_spin_ns) still fires timers, runs posted tasks and stops; and its
 * polling does use the CPU, which is the point of it (CPU time close to the wall time). Its idle
 * polling, most of the wall time here (it waits for three 10 ms timers), is counted
 * (loop_count_spin_idle). */
static void test_loop_spin(void)
{
	struct timer_state st = {0};
	struct loop_timer timer;
	_Atomic uint64_t spin_idle = 0;
	CHECK(loop_create(&st.loop) == 0);
	loop_set_spin_ns(st.loop, 1000000000ull);
	loop_count_spin_idle(st.loop, &spin_idle);
	struct timespec cpu0, cpu1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
	uint64_t start = clock_monotonic_ns();
	CHECK(loop_timer_add(st.loop, &timer, 10000000, 10000000, timer_fired, &st) == 0);
	CHECK(loop_run(st.loop) == 0);
	uint64_t elapsed = clock_monotonic_ns() - start;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
	uint64_t cpu_ns = (uint64_t)(cpu1.tv_sec - cpu0.tv_sec) * 1000000000ull + (uint64_t)cpu1.tv_nsec -
			  (uint64_t)cpu0.tv_nsec;
	CHECK(st.fired == 3);
	CHECKF(elapsed >= 30000000ull && elapsed < 1000000000ull, "elapsed %llu ns", (unsigned long long)elapsed);
	/* Sleeping would use almost no CPU; spinning uses most of the wall time unless preempted. */
	CHECKF(cpu_ns > elapsed / 4, "cpu %llu ns of %llu ns", (unsigned long long)cpu_ns,
	       (unsigned long long)elapsed);
	uint64_t idle = atomic_load(&spin_idle);
	CHECKF(idle > elapsed / 2 && idle <= elapsed, "idle %llu ns of %llu ns",
	       (unsigned long long)idle, (unsigned long long)elapsed);
	loop_destroy(st.loop);
}

/* Two sockets become readable in the same turn; the first callback deletes the second's watch.
 * The second callback must not run (invariant 2 of loop.c). */
struct del_state {
	struct loop *loop;
	struct loop_watch watches[2];
	int calls[2];
};
static void del_cb(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	struct del_state *st = watch->lw_arg;
	int me = watch == &st->watches[0] ? 0 : 1;
	st->calls[me]++;
	loop_watch_del(st->loop, &st->watches[0]);
	loop_watch_del(st->loop, &st->watches[1]);
	loop_stop(st->loop);
}

static void test_loop_watch_del_in_batch(void)
{
	struct del_state st = {0};
	int a[2], b[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
	CHECK(write(a[1], "x", 1) == 1);
	CHECK(write(b[1], "x", 1) == 1);
	CHECK(loop_create(&st.loop) == 0);
	CHECK(loop_watch_add(st.loop, &st.watches[0], a[0], LOOP_IN, del_cb, &st) == 0);
	CHECK(loop_watch_add(st.loop, &st.watches[1], b[0], LOOP_IN, del_cb, &st) == 0);
	CHECK(loop_run(st.loop) == 0);
	CHECKF(st.calls[0] + st.calls[1] == 1, "calls %d %d", st.calls[0], st.calls[1]);
	loop_destroy(st.loop);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
}

/* ---- loop_defer ---- */

/* A log of what ran, in order, on the loop's thread. */
#define DLOG_MAX 64
struct defer_state {
	struct loop *loop;
	char log[DLOG_MAX];
	int nlog;
	bool on_thread; /* every callback ran on the loop's thread */
	struct loop_watch watches[2];
	struct loop_task post;
	struct loop_task post2;
	struct loop_task deferred[4];
	char deferred_order[4]; /* the letters of the deferred tasks in the order deferred */
	int ndeferred;
	int self_runs;
	int fds[2][2];
};
static struct defer_state dst;

static void dlog(char c)
{
	if (!loop_on_thread(dst.loop) || loop_current() != dst.loop)
		dst.on_thread = false;
	if (dst.nlog < DLOG_MAX)
		dst.log[dst.nlog++] = c;
}

static void defer_letter(struct loop_task *task)
{
	int i = (int)(task - dst.deferred);
	dlog((char)('a' + i));
	if (dst.nlog == 6)
		loop_stop(dst.loop);
}

static void defer_next(char letter)
{
	int i = letter - 'a';
	dst.deferred[i].lt_fn = defer_letter;
	dst.deferred_order[dst.ndeferred++] = letter;
	loop_defer(dst.loop, &dst.deferred[i]);
}

static void defer_watch_cb(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	int me = watch == &dst.watches[0] ? 0 : 1;
	dlog((char)('W' + me)); /* 'W' or 'X' */
	loop_watch_del(dst.loop, watch);
	defer_next((char)('a' + me));
}

static void defer_post_cb(struct loop_task *task)
{
	(void)task;
	dlog('P');
	defer_next('c');
}

static void defer_state_init(void)
{
	memset(&dst, 0, sizeof(dst));
	dst.on_thread = true;
	CHECK(loop_create(&dst.loop) == 0);
	for (int i = 0; i < 2; i++)
		CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, dst.fds[i]) == 0);
}

static void defer_state_fini(void)
{
	loop_destroy(dst.loop);
	for (int i = 0; i < 2; i++) {
		close(dst.fds[i][0]);
		close(dst.fds[i][1]);
	}
}

/* Two readable sockets and a posted task are handled in one turn; each defers a task. The
 * deferred tasks run after all three, in the order they were deferred. */
static void test_loop_defer_order(void)
{
	defer_state_init();
	for (int i = 0; i < 2; i++) {
		CHECK(write(dst.fds[i][1], "x", 1) == 1);
		CHECK(loop_watch_add(dst.loop, &dst.watches[i], dst.fds[i][0], LOOP_IN,
		                     defer_watch_cb, NULL) == 0);
	}
	dst.post.lt_fn = defer_post_cb;
	loop_post(dst.loop, &dst.post);
	CHECK(loop_run(dst.loop) == 0);
	CHECKF(dst.nlog == 6, "log %.*s", dst.nlog, dst.log);
	/* The first three entries are the turn's events (in whatever order epoll gave them). */
	int events = 0;
	for (int i = 0; i < 3 && i < dst.nlog; i++)
		events += (dst.log[i] == 'W' || dst.log[i] == 'X' || dst.log[i] == 'P') ? 1 : 0;
	CHECKF(events == 3, "log %.*s", dst.nlog, dst.log);
	CHECK(dst.ndeferred == 3);
	CHECKF(dst.nlog == 6 && memcmp(dst.log + 3, dst.deferred_order, 3) == 0,
	       "log %.*s, deferred in order %.3s", dst.nlog, dst.log, dst.deferred_order);
	CHECK(dst.on_thread);
	CHECK(loop_current() == NULL);
	defer_state_fini();
}

/* A deferred task defers more work (itself, repeatedly, and another task): all of it runs in the
 * same turn, before events that became ready meanwhile and before tasks posted meanwhile. */
static void defer_self(struct loop_task *task)
{
	dlog('s');
	if (++dst.self_runs < 5)
		loop_defer(dst.loop,
		           task); /* it has started running, so it may be deferred again */
}

static void defer_late_cb(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	dlog('W');
	loop_watch_del(dst.loop, watch);
	if (strchr(dst.log, 'Q'))
		loop_stop(dst.loop);
}

static void defer_late_post(struct loop_task *task)
{
	(void)task;
	dlog('Q');
	if (strchr(dst.log, 'W'))
		loop_stop(dst.loop);
}

static void defer_first(struct loop_task *task)
{
	(void)task;
	dlog('d');
	/* Make an event ready and post a task: both belong to a later turn. */
	VERIFY(write(dst.fds[0][1], "x", 1) == 1);
	dst.post2.lt_fn = defer_late_post;
	loop_post(dst.loop, &dst.post2);
	dst.deferred[1].lt_fn = defer_self;
	loop_defer(dst.loop, &dst.deferred[1]);
}

static void defer_from_post(struct loop_task *task)
{
	(void)task;
	dlog('P');
	dst.deferred[0].lt_fn = defer_first;
	loop_defer(dst.loop, &dst.deferred[0]);
}

static void test_loop_defer_from_deferred(void)
{
	defer_state_init();
	CHECK(loop_watch_add(dst.loop, &dst.watches[0], dst.fds[0][0], LOOP_IN, defer_late_cb,
	                     NULL) == 0);
	dst.post.lt_fn = defer_from_post;
	loop_post(dst.loop, &dst.post);
	CHECK(loop_run(dst.loop) == 0);
	dst.log[SH_MIN(dst.nlog, DLOG_MAX - 1)] = '\0';
	/* P, then d and five runs of s in the same turn, then the later turn's W and Q. */
	CHECKF(dst.nlog == 9 && strncmp(dst.log, "Pdsssss", 7) == 0, "log %s", dst.log);
	CHECKF(strchr(dst.log + 7, 'W') && strchr(dst.log + 7, 'Q'), "log %s", dst.log);
	CHECK(dst.self_runs == 5);
	CHECK(dst.on_thread);
	defer_state_fini();
}

/* loop_stop called during a turn: the tasks deferred in that turn (and those they defer) still
 * run before loop_run returns; a task posted from the loop's thread in that turn still runs (no
 * completion is lost), and what it defers too. A stopped loop stays stopped. */
static void defer_stop_d2(struct loop_task *task)
{
	(void)task;
	dlog('2');
}

static void defer_stop_d1(struct loop_task *task)
{
	(void)task;
	dlog('1');
	dst.deferred[1].lt_fn = defer_stop_d2;
	loop_defer(dst.loop, &dst.deferred[1]);
}

static void defer_stop_d3(struct loop_task *task)
{
	(void)task;
	dlog('3');
}

static void defer_stop_post2(struct loop_task *task)
{
	(void)task;
	dlog('Q');
	dst.deferred[2].lt_fn = defer_stop_d3;
	loop_defer(dst.loop, &dst.deferred[2]);
}

static void defer_stop_post(struct loop_task *task)
{
	(void)task;
	dlog('P');
	loop_stop(dst.loop);
	dst.deferred[0].lt_fn = defer_stop_d1;
	loop_defer(dst.loop, &dst.deferred[0]);
	dst.post2.lt_fn = defer_stop_post2;
	loop_post(dst.loop, &dst.post2);
}

static void defer_never(struct loop_task *task)
{
	(void)task;
	dlog('!');
}

static void test_loop_defer_and_stop(void)
{
	defer_state_init();
	dst.post.lt_fn = defer_stop_post;
	loop_post(dst.loop, &dst.post);
	CHECK(loop_run(dst.loop) == 0);
	dst.log[SH_MIN(dst.nlog, DLOG_MAX - 1)] = '\0';
	CHECKF(strcmp(dst.log, "P12Q3") == 0, "log %s", dst.log);
	CHECK(loop_current() == NULL);
	/* Stopped for good: a second run returns at once. What it does with a task posted now is
	 * not specified, but it must not block. */
	dst.post.lt_fn = defer_never;
	loop_post(dst.loop, &dst.post);
	uint64_t t0 = clock_monotonic_ns();
	CHECK(loop_run(dst.loop) == 0);
	CHECK(clock_monotonic_ns() - t0 < 1000000000ull);
	CHECK(dst.on_thread);
	defer_state_fini();
}

/* Another thread posts tasks, each of which defers one, then stops the loop while it is busy:
 * every post made before the stop runs, and every task deferred by them runs, before loop_run
 * returns. A repeating timer defers a task on every tick as well. */
#define DEFER_POSTS 20000
struct defer_post_item {
	struct loop_task dp_post;
	struct loop_task dp_defer;
	bool dp_posted_ran;
	bool dp_deferred_ran;
};
struct defer_race {
	struct loop *loop;
	struct defer_post_item *items;
	atomic_int posted_ran;
	int deferred_ran;
	int ticks;
	int tick_deferred_ran;
	bool tick_pending; /* the timer's deferred task is queued */
	bool early;        /* a deferred task ran before its posting task */
	struct loop_timer timer;
	struct loop_task tick_task;
};
static struct defer_race drace;

static void drace_deferred(struct loop_task *task)
{
	struct defer_post_item *it = SH_CONTAINER_OF(task, struct defer_post_item, dp_defer);
	if (!it->dp_posted_ran)
		drace.early = true;
	it->dp_deferred_ran = true;
	drace.deferred_ran++;
}

static void drace_posted(struct loop_task *task)
{
	struct defer_post_item *it = SH_CONTAINER_OF(task, struct defer_post_item, dp_post);
	it->dp_posted_ran = true;
	atomic_fetch_add(&drace.posted_ran, 1);
	it->dp_defer.lt_fn = drace_deferred;
	loop_defer(drace.loop, &it->dp_defer);
}

static void drace_tick_deferred(struct loop_task *task)
{
	(void)task;
	drace.tick_pending = false;
	drace.tick_deferred_ran++;
}

static void drace_tick(struct loop_timer *timer)
{
	(void)timer;
	drace.ticks++;
	if (drace.tick_pending)
		drace.early = true; /* the previous turn's deferred task had not run */
	drace.tick_pending = true;
	drace.tick_task.lt_fn = drace_tick_deferred;
	loop_defer(drace.loop, &drace.tick_task);
}

static void *drace_poster(void *arg)
{
	(void)arg;
	for (int i = 0; i < DEFER_POSTS; i++) {
		drace.items[i].dp_post.lt_fn = drace_posted;
		loop_post(drace.loop, &drace.items[i].dp_post);
		if (i % 1000 == 0)
			usleep(1000); /* let the timer tick in between */
	}
	loop_stop(drace.loop);
	return NULL;
}

static void test_loop_defer_post_stop_race(void)
{
	memset(&drace, 0, sizeof(drace));
	CHECK(loop_create(&drace.loop) == 0);
	drace.items = mem_zalloc(sizeof(*drace.items) * DEFER_POSTS);
	VERIFY(drace.items);
	CHECK(loop_timer_add(drace.loop, &drace.timer, 500000, 500000, drace_tick, NULL) == 0);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, drace_poster, NULL) == 0);
	CHECK(loop_run(drace.loop) == 0);
	pthread_join(th, NULL);
	loop_timer_del(drace.loop, &drace.timer);
	CHECKF(atomic_load(&drace.posted_ran) == DEFER_POSTS, "posted ran %d",
	       atomic_load(&drace.posted_ran));
	CHECKF(drace.deferred_ran == DEFER_POSTS, "deferred ran %d", drace.deferred_ran);
	int missing = 0;
	for (int i = 0; i < DEFER_POSTS; i++)
		missing += drace.items[i].dp_deferred_ran ? 0 : 1;
	CHECK(missing == 0);
	CHECK(!drace.early);
	CHECK(drace.ticks > 0);
	CHECKF(drace.tick_deferred_ran == drace.ticks && !drace.tick_pending,
	       "ticks %d deferred %d", drace.ticks, drace.tick_deferred_ran);
	mem_free(drace.items);
	loop_destroy(drace.loop);
}

/* A thread set up as background is SCHED_BATCH; sh_thread_set_kind moves it between the two
 * classes (the txg sync thread does so around its locked phase). */
static void *thread_kind_main(void *arg)
{
	int *policies = arg;
	sh_thread_setup("shale-test", SH_THREAD_BACKGROUND);
	policies[0] = sched_getscheduler(0);
	sh_thread_set_kind(SH_THREAD_SERVING);
	policies[1] = sched_getscheduler(0);
	sh_thread_set_kind(SH_THREAD_BACKGROUND);
	policies[2] = sched_getscheduler(0);
	char name[16] = "";
	policies[3] = pthread_getname_np(pthread_self(), name, sizeof(name)) == 0 &&
	              strcmp(name, "shale-test") == 0;
	return NULL;
}

static void test_thread_kinds(void)
{
	int policies[4] = {-1, -1, -1, -1};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, thread_kind_main, policies) == 0);
	pthread_join(th, NULL);
	CHECKF(policies[0] == SCHED_BATCH, "policy %d", policies[0]);
	CHECKF(policies[1] == SCHED_OTHER, "policy %d", policies[1]);
	CHECKF(policies[2] == SCHED_BATCH, "policy %d", policies[2]);
	CHECK(policies[3] == 1);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_mem_fail_after);
	TAP_RUN(test_ratelimit);
	TAP_RUN(test_strerror_and_random);
	TAP_RUN(test_loop_post_from_threads);
	TAP_RUN(test_loop_timer);
	TAP_RUN(test_loop_spin);
	TAP_RUN(test_loop_watch_del_in_batch);
	TAP_RUN(test_loop_defer_order);
	TAP_RUN(test_loop_defer_from_deferred);
	TAP_RUN(test_loop_defer_and_stop);
	TAP_RUN(test_loop_defer_post_stop_race);
	TAP_RUN(test_thread_kinds);
	return tap_finish();
}
