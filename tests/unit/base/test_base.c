/* test_base.c: unit tests for src/base (allocation failure injection, rate limiting, helpers) and
 * src/loop (cross-thread posting, ordering, timers, watch deletion during a batch). */
#include <errno.h>
#include <pthread.h>
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
	CHECK(loop_create(&st.loop) == 0);
	uint64_t start = clock_monotonic_ns();
	CHECK(loop_timer_add(st.loop, &timer, 10000000, 10000000, timer_fired, &st) == 0);
	CHECK(loop_run(st.loop) == 0);
	uint64_t elapsed = clock_monotonic_ns() - start;
	CHECK(st.fired == 3);
	CHECKF(elapsed >= 30000000ull, "elapsed %llu ns", (unsigned long long)elapsed);
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

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_mem_fail_after);
	TAP_RUN(test_ratelimit);
	TAP_RUN(test_strerror_and_random);
	TAP_RUN(test_loop_post_from_threads);
	TAP_RUN(test_loop_timer);
	TAP_RUN(test_loop_watch_del_in_batch);
	return tap_finish();
}
