/* bench_engine.c: the load engine of `shale bench`: load threads, each with its own event loop
 * and connections, operation slots, open-loop pacing with a backlog, completion checking and
 * per-thread statistics. The design is explained at the top of bench.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_impl.h"

/* Pacing tick: about one op per tick at low rates, never finer than 100 us (timer wake-ups would
 * then cost more than the ops) nor coarser than 2 ms. */
#define BENCH_TICK_MIN_NS 100000ull
#define BENCH_TICK_MAX_NS 2000000ull
#define BENCH_START_DELAY_NS 20000000ull /* threads start together this long after set-up */

uint64_t bench_rand(struct bench_thread *t)
{
	uint64_t x = t->bt_rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t->bt_rng = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static void bench_sleep_until(uint64_t when_ns)
{
	for (;;) {
		uint64_t now = clock_monotonic_ns();
		if (now >= when_ns)
			return;
		uint64_t d = when_ns - now;
		struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ull),
				      .tv_nsec = (long)(d % 1000000000ull)};
		nanosleep(&ts, NULL);
	}
}

/* ---- server and self measurement ---- */

double bench_proc_cpu_s(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *text = NULL;
	size_t len = 0;
	if (sh_read_file(path, &text, &len, 8192) < 0)
		return -1;
	double result = -1;
	char *p = strrchr(text, ')');
	if (p) {
		/* Fields after the command: 3 state ... 14 utime, 15 stime (proc(5)). */
		unsigned long long utime = 0, stime = 0;
		int field = 3;
		char *save = NULL;
		for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
			if (field == 14)
				utime = strtoull(tok, NULL, 10);
			if (field == 15) {
				stime = strtoull(tok, NULL, 10);
				result = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
				break;
			}
		}
	}
	mem_free(text);
	return result;
}

int bench_proc_reset_hwm(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = sh_write_all(fd, "5", 1);
	close(fd);
	return rc;
}

uint64_t bench_proc_hwm_kib(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	char *text = NULL;
	size_t len = 0;
	if (sh_read_file(path, &text, &len, 65536) < 0)
		return 0;
	uint64_t kib = 0;
	char *p = strstr(text, "VmHWM:");
	if (p)
		kib = strtoull(p + 6, NULL, 10);
	mem_free(text);
	return kib;
}

/* The load loops' idle polling so far, summed over the threads (loop_count_spin_idle). */
static uint64_t bench_spin_idle_ns(const struct bench_engine *eng)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < eng->be_nthreads; i++)
		sum += atomic_load_explicit(&eng->be_threads[i].bt_spin_idle_ns,
					    memory_order_relaxed);
	return sum;
}

double bench_self_cpu_s(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* ---- operations ---- */

static void bench_conn_flush_dirty(struct bench_thread *t)
{
	for (unsigned i = 0; i < t->bt_nconns; i++) {
		struct bench_conn *c = &t->bt_conns[i];
		if (!c->bc_dirty || c == t->bt_cur)
			continue;
		c->bc_dirty = false;
		int rc = rpc_aclnt_flush(c->bc_clnt);
		if (rc < 0 && t->bt_error == 0)
			t->bt_error = rc;
	}
}

struct bench_op *bench_op_begin(struct bench_thread *t, uint32_t proc, uint16_t stat,
				size_t max_args, uint64_t start_ns, struct xdr_enc **enc_out)
{
	struct bench_conn *c = NULL;
	if (t->bt_cur && t->bt_cur->bc_nfree > 0 && rpc_aclnt_free_slots(t->bt_cur->bc_clnt) > 0) {
		c = t->bt_cur;
	} else {
		for (unsigned i = 0; i < t->bt_nconns; i++) {
			struct bench_conn *cand = &t->bt_conns[(t->bt_rr + i) % t->bt_nconns];
			if (cand->bc_nfree > 0 && rpc_aclnt_free_slots(cand->bc_clnt) > 0 &&
			    rpc_aclnt_error(cand->bc_clnt) == 0) {
				c = cand;
				/* Stay on this connection until it is full: the calls started in
				 * one turn of the loop then leave in one writev, and their replies
				 * tend to come back in one read. */
				t->bt_rr = (t->bt_rr + i) % t->bt_nconns;
				break;
			}
		}
	}
	if (!c)
		return NULL;
	int rc = rpc_aclnt_call_begin(c->bc_clnt, BENCH_NFS3_PROG, BENCH_NFS3_VERS, proc, max_args,
				      enc_out);
	if (rc < 0) {
		if (rc != -EAGAIN && t->bt_error == 0)
			t->bt_error = rc;
		return NULL;
	}
	struct bench_op *op = c->bc_free[--c->bc_nfree];
	memset(op, 0, sizeof(*op));
	op->op_conn = c;
	op->op_proc = proc;
	op->op_stat = stat;
	op->op_start_ns = start_ns;
	return op;
}

static void bench_engine_done(void *arg, int status, struct xdr_dec *dec);
static void bench_generate(struct bench_thread *t, uint64_t now);

int bench_op_send(struct bench_thread *t, struct bench_op *op, const void *bulk, size_t bulk_len)
{
	struct bench_conn *c = op->op_conn;
	op->op_sent_ns = clock_monotonic_ns();
	if (op->op_start_ns == 0 || op->op_start_ns > op->op_sent_ns)
		op->op_start_ns = op->op_sent_ns;
	int rc = rpc_aclnt_call_end(c->bc_clnt, bulk, bulk_len, bench_engine_done, op);
	if (rc < 0) {
		c->bc_free[c->bc_nfree++] = op;
		if (t->bt_error == 0)
			t->bt_error = rc;
		return rc;
	}
	t->bt_in_flight++;
	if (c != t->bt_cur)
		c->bc_dirty = true;
	return 0;
}

/* Issues what the workload has to issue now: open loop from the backlog, closed loop until the
 * workload has nothing more or no slot is free. */
static void bench_pump(struct bench_thread *t)
{
	struct bench_engine *eng = t->bt_eng;
	if (t->bt_error)
		return;
	if (eng->be_open) {
		while (t->bt_backlog > 0 && !t->bt_stopping) {
			uint64_t intended = t->bt_ring_time[t->bt_ring_head];
			int r = eng->be_mix(t, intended);
			if (r <= 0) {
				if (r < 0 && t->bt_error == 0)
					t->bt_error = r;
				break;
			}
			t->bt_backlog--;
			if (--t->bt_ring_count[t->bt_ring_head] == 0) {
				t->bt_ring_head = (t->bt_ring_head + 1) % BENCH_BACKLOG_RING;
				t->bt_ring_len--;
			}
		}
	} else {
		for (;;) {
			int r = eng->be_next(t);
			if (r <= 0) {
				if (r < 0 && t->bt_error == 0)
					t->bt_error = r;
				break;
			}
		}
	}
}

static void bench_maybe_stop(struct bench_thread *t)
{
	if (t->bt_in_flight > 0)
		return;
	if (t->bt_eng->be_open && !t->bt_stopping && !t->bt_error)
		return;
	loop_stop(t->bt_loop);
}

static void bench_engine_done(void *arg, int status, struct xdr_dec *dec)
{
	struct bench_op *op = arg;
	struct bench_conn *c = op->op_conn;
	struct bench_thread *t = c->bc_thread;
	struct bench_engine *eng = t->bt_eng;
	uint64_t now = clock_monotonic_ns();
	struct bench_nfs3_res res;
	int rc = status;
	bool unanswered = status == -ETIMEDOUT;
	if (rc == 0)
		rc = bench_nfs3_decode(op->op_proc, dec, &res);
	if (rc == 0) {
		uint32_t expected = op->op_noent == BENCH_NOENT_EXPECTED ? BENCH_NFS3ERR_NOENT
									  : BENCH_NFS3_OK;
		bool right = res.nr_status == expected ||
			     (op->op_noent == BENCH_NOENT_ALLOWED && res.nr_status == BENCH_NFS3ERR_NOENT);
		if (!right) {
			log_ratelimited(LOG_WARN, "bench: %s answered NFS status %u, expected %u",
					bench_nfs3_proc_name(op->op_proc), res.nr_status, expected);
			rc = -EREMOTEIO;
		}
	} else if (rc == -EBADMSG) {
		log_ratelimited(LOG_WARN, "bench: %s reply does not decode",
				bench_nfs3_proc_name(op->op_proc));
	} else {
		log_ratelimited(LOG_WARN, "bench: %s failed: %s", bench_nfs3_proc_name(op->op_proc),
				sh_strerror(rc));
	}
	bool measured = eng->be_measure_end_ns == 0 ||
			(now >= eng->be_measure_start_ns && now < eng->be_measure_end_ns);
	t->bt_measuring = measured;
	if (measured) {
		struct bench_stat *st = &t->bt_stats[op->op_stat];
		bench_hist_record(&st->bs_hist, now > op->op_start_ns ? now - op->op_start_ns : 0);
		bench_hist_record(&st->bs_sent_hist, now > op->op_sent_ns ? now - op->op_sent_ns : 0);
		if (unanswered)
			st->bs_unanswered++;
		else if (rc < 0)
			st->bs_failed++;
	} else if (unanswered) {
		t->bt_unanswered_outside++;
	} else if (rc < 0) {
		t->bt_failed_outside++;
	}
	/* Free the op before the workload sees it, so that it can start the next op at once. */
	struct bench_op copy = *op;
	c->bc_free[c->bc_nfree++] = op;
	t->bt_in_flight--;
	struct bench_conn *prev = t->bt_cur;
	t->bt_cur = c;
	if (copy.op_done)
		copy.op_done(t, &copy, rc, rc == 0 ? &res : NULL);
	if (status != 0 && status != -EPROTO && status != -EBADMSG && status != -ETIMEDOUT &&
	    t->bt_error == 0)
		t->bt_error = status; /* the connection failed */
	if (eng->be_open)
		bench_generate(t, now);
	bench_pump(t);
	bench_conn_flush_dirty(t);
	t->bt_cur = prev;
	bench_maybe_stop(t);
}

/* Open loop: appends the operations that became due by now to the backlog, stamped now. Called
 * at every tick and after every completion, so that under load (replies arriving all the time)
 * due operations are noticed, and sent together with the calls a reply batch starts, without
 * waiting for the next tick: the tick then only wakes an idle thread. */
static void bench_generate(struct bench_thread *t, uint64_t now)
{
	struct bench_engine *eng = t->bt_eng;
	if (t->bt_stopping || now < eng->be_start_ns || now >= eng->be_measure_end_ns)
		return;
	uint64_t due = (uint64_t)((double)(now - eng->be_start_ns) * t->bt_rate / 1e9);
	if (due > t->bt_generated) {
		uint64_t n = due - t->bt_generated;
		t->bt_generated = due;
		t->bt_backlog += n;
		if (t->bt_ring_len == BENCH_BACKLOG_RING) {
			unsigned last = (t->bt_ring_head + t->bt_ring_len - 1) % BENCH_BACKLOG_RING;
			t->bt_ring_count[last] += n;
		} else {
			unsigned slot = (t->bt_ring_head + t->bt_ring_len) % BENCH_BACKLOG_RING;
			t->bt_ring_time[slot] = now;
			t->bt_ring_count[slot] = n;
			t->bt_ring_len++;
		}
	}
}

static void bench_tick(struct loop_timer *timer)
{
	struct bench_thread *t = timer->lt_arg;
	struct bench_engine *eng = t->bt_eng;
	uint64_t now = clock_monotonic_ns();
	if (now >= eng->be_measure_end_ns || t->bt_error) {
		if (!t->bt_stopping) {
			t->bt_stopping = true;
			t->bt_backlog = 0;
		}
		bench_maybe_stop(t);
		return;
	}
	bench_generate(t, now);
	bench_pump(t);
	bench_conn_flush_dirty(t);
	bench_maybe_stop(t);
}

/* Starts the closed-loop work on the loop's first turn. */
struct bench_start_task {
	struct loop_task st_task;
	struct bench_thread *st_thread;
};

static void bench_thread_start(struct loop_task *task)
{
	struct bench_start_task *st = SH_CONTAINER_OF(task, struct bench_start_task, st_task);
	struct bench_thread *t = st->st_thread;
	bench_pump(t);
	bench_conn_flush_dirty(t);
	bench_maybe_stop(t);
}

static void *bench_thread_main(void *arg)
{
	struct bench_thread *t = arg;
	struct bench_engine *eng = t->bt_eng;
	const struct bench_ctx *ctx = eng->be_ctx;
	int rc;
	/* Timer wake-ups as precise as the kernel gives: pacing accuracy is latency accuracy. */
	(void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	struct rpc_aclnt_config cfg = {
		.rac_max_calls = eng->be_depth,
		.rac_timeout_ms = ctx->bc_opts->bo_timeout_ms,
		.rac_max_reply_bytes = ((size_t)1 << 20) + 4096u,
		.rac_cred = &ctx->bc_cred,
	};
	rc = loop_create(&t->bt_loop);
	unsigned made = 0;
	if (rc == 0) {
		loop_set_spin_ns(t->bt_loop, (uint64_t)ctx->bc_opts->bo_spin_us * 1000u);
		loop_count_spin_idle(t->bt_loop, &t->bt_spin_idle_ns);
		for (; made < t->bt_nconns; made++) {
			struct bench_conn *c = &t->bt_conns[made];
			c->bc_thread = t;
			rc = rpc_aclnt_create(t->bt_loop, ctx->bc_target->bt_host,
					      ctx->bc_target->bt_port, &cfg, &c->bc_clnt);
			if (rc < 0)
				break;
		}
	}
	if (rc < 0)
		t->bt_error = rc;
	pthread_mutex_lock(&eng->be_mutex);
	eng->be_ready++;
	pthread_cond_broadcast(&eng->be_cond);
	while (eng->be_go == 0)
		pthread_cond_wait(&eng->be_cond, &eng->be_mutex);
	bool go = eng->be_go > 0;
	pthread_mutex_unlock(&eng->be_mutex);
	if (go && t->bt_error == 0) {
		struct bench_start_task st = {.st_thread = t};
		if (eng->be_open) {
			uint64_t tick = (uint64_t)(1e9 / (t->bt_rate > 0 ? t->bt_rate : 1));
			tick = SH_MAX(BENCH_TICK_MIN_NS, SH_MIN(BENCH_TICK_MAX_NS, tick));
			rc = loop_timer_add(t->bt_loop, &t->bt_timer,
					    eng->be_start_ns - SH_MIN(eng->be_start_ns, clock_monotonic_ns()),
					    tick, bench_tick, t);
			if (rc == 0)
				t->bt_timer_on = true;
			else
				t->bt_error = rc;
		} else {
			bench_sleep_until(eng->be_start_ns);
			st.st_task.lt_fn = bench_thread_start;
			loop_post(t->bt_loop, &st.st_task);
		}
		if (t->bt_error == 0) {
			rc = loop_run(t->bt_loop);
			if (rc < 0 && t->bt_error == 0)
				t->bt_error = rc;
		}
	}
	if (t->bt_timer_on)
		loop_timer_del(t->bt_loop, &t->bt_timer);
	for (unsigned i = 0; i < made; i++) {
		if (t->bt_conns[i].bc_clnt) {
			if (rpc_aclnt_in_flight(t->bt_conns[i].bc_clnt) > 0)
				t->bt_unanswered_outside += rpc_aclnt_in_flight(t->bt_conns[i].bc_clnt);
			rpc_aclnt_destroy(t->bt_conns[i].bc_clnt);
			t->bt_conns[i].bc_clnt = NULL;
		}
	}
	loop_destroy(t->bt_loop);
	t->bt_loop = NULL;
	return NULL;
}

static void bench_engine_free_threads(struct bench_engine *eng)
{
	if (!eng->be_threads)
		return;
	for (unsigned i = 0; i < eng->be_nthreads; i++) {
		struct bench_thread *t = &eng->be_threads[i];
		if (t->bt_conns) {
			for (unsigned j = 0; j < t->bt_nconns; j++) {
				mem_free(t->bt_conns[j].bc_ops);
				mem_free(t->bt_conns[j].bc_free);
			}
		}
		mem_free(t->bt_conns);
		mem_free(t->bt_stats);
	}
	mem_free(eng->be_threads);
	eng->be_threads = NULL;
}

void bench_engine_fini(struct bench_engine *eng)
{
	bench_engine_free_threads(eng);
	mem_free(eng->be_total);
	eng->be_total = NULL;
}

int bench_engine_run(struct bench_engine *eng)
{
	VERIFY(eng->be_nthreads > 0 && eng->be_nconns > 0 && eng->be_depth > 0 && eng->be_nstats > 0);
	eng->be_threads = mem_zalloc(sizeof(*eng->be_threads) * eng->be_nthreads);
	eng->be_total = mem_zalloc(sizeof(*eng->be_total) * eng->be_nstats);
	if (!eng->be_threads || !eng->be_total)
		goto out_nomem;
	uint64_t seed;
	if (sh_random_bytes(&seed, sizeof(seed)) < 0)
		seed = clock_realtime_ns();
	for (unsigned i = 0; i < eng->be_nthreads; i++) {
		struct bench_thread *t = &eng->be_threads[i];
		t->bt_index = i;
		t->bt_eng = eng;
		t->bt_rng = (seed + (uint64_t)i * 0x9E3779B97F4A7C15ull) | 1u;
		t->bt_wl = eng->be_thread_wl ? eng->be_thread_wl[i] : NULL;
		t->bt_rate = eng->be_rate / eng->be_nthreads;
		t->bt_nconns = eng->be_nconns;
		t->bt_conns = mem_zalloc(sizeof(*t->bt_conns) * eng->be_nconns);
		t->bt_stats = mem_zalloc(sizeof(*t->bt_stats) * eng->be_nstats);
		if (!t->bt_conns || !t->bt_stats)
			goto out_nomem;
		for (unsigned j = 0; j < eng->be_nconns; j++) {
			struct bench_conn *c = &t->bt_conns[j];
			c->bc_ops = mem_zalloc(sizeof(*c->bc_ops) * eng->be_depth);
			c->bc_free = mem_alloc(sizeof(*c->bc_free) * eng->be_depth);
			if (!c->bc_ops || !c->bc_free)
				goto out_nomem;
			for (unsigned k = 0; k < eng->be_depth; k++)
				c->bc_free[k] = &c->bc_ops[k];
			c->bc_nfree = eng->be_depth;
		}
	}
	int rc;
	eng->be_ready = 0;
	eng->be_go = 0;
	pthread_mutex_init(&eng->be_mutex, NULL);
	pthread_cond_init(&eng->be_cond, NULL);
	unsigned started = 0;
	for (; started < eng->be_nthreads; started++) {
		rc = pthread_create(&eng->be_threads[started].bt_tid, NULL, bench_thread_main,
				    &eng->be_threads[started]);
		if (rc != 0) {
			log_error("bench: cannot start a load thread: %s", strerror(rc));
			eng->be_error = -rc;
			break;
		}
	}
	pthread_mutex_lock(&eng->be_mutex);
	while (eng->be_ready < started)
		pthread_cond_wait(&eng->be_cond, &eng->be_mutex);
	for (unsigned i = 0; i < started; i++)
		if (eng->be_threads[i].bt_error && eng->be_error == 0)
			eng->be_error = eng->be_threads[i].bt_error;
	pid_t pid = eng->be_ctx->bc_target->bt_pid;
	eng->be_start_ns = clock_monotonic_ns() + BENCH_START_DELAY_NS;
	bool windowed = eng->be_runtime_s > 0;
	if (windowed) {
		eng->be_measure_start_ns = eng->be_start_ns + (uint64_t)(eng->be_warmup_s * 1e9);
		eng->be_measure_end_ns = eng->be_measure_start_ns + (uint64_t)(eng->be_runtime_s * 1e9);
	} else {
		eng->be_measure_start_ns = eng->be_start_ns;
		eng->be_measure_end_ns = 0;
	}
	eng->be_go = eng->be_error ? -1 : 1;
	pthread_cond_broadcast(&eng->be_cond);
	pthread_mutex_unlock(&eng->be_mutex);
	if (eng->be_go < 0) {
		for (unsigned i = 0; i < started; i++)
			pthread_join(eng->be_threads[i].bt_tid, NULL);
		pthread_cond_destroy(&eng->be_cond);
		pthread_mutex_destroy(&eng->be_mutex);
		rc = eng->be_error;
		goto out_free;
	}
	double srv0 = -1, srv1 = -1, cli0, cli1 = 0;
	uint64_t t0, t1 = 0, spin0, spin1 = 0;
	bench_sleep_until(eng->be_measure_start_ns);
	t0 = clock_monotonic_ns();
	cli0 = bench_self_cpu_s();
	spin0 = bench_spin_idle_ns(eng);
	if (pid > 0)
		srv0 = bench_proc_cpu_s(pid);
	if (windowed) {
		bench_sleep_until(eng->be_measure_end_ns);
		t1 = clock_monotonic_ns();
		cli1 = bench_self_cpu_s();
		spin1 = bench_spin_idle_ns(eng);
		if (pid > 0)
			srv1 = bench_proc_cpu_s(pid);
	}
	for (unsigned i = 0; i < eng->be_nthreads; i++)
		pthread_join(eng->be_threads[i].bt_tid, NULL);
	if (!windowed) {
		t1 = clock_monotonic_ns();
		cli1 = bench_self_cpu_s();
		spin1 = bench_spin_idle_ns(eng);
		if (pid > 0)
			srv1 = bench_proc_cpu_s(pid);
	}
	pthread_cond_destroy(&eng->be_cond);
	pthread_mutex_destroy(&eng->be_mutex);
	eng->be_elapsed_s = (double)(t1 - t0) / 1e9;
	eng->be_client_cpu_s = cli1 - cli0;
	eng->be_client_spin_s = (double)(spin1 - spin0) / 1e9;
	eng->be_server_cpu_s = srv0 >= 0 && srv1 >= 0 ? srv1 - srv0 : 0;

	/* Merge. */
	for (unsigned i = 0; i < eng->be_nthreads; i++) {
		struct bench_thread *t = &eng->be_threads[i];
		if (t->bt_error && eng->be_error == 0)
			eng->be_error = t->bt_error;
		for (unsigned s = 0; s < eng->be_nstats; s++) {
			bench_hist_merge(&eng->be_total[s].bs_hist, &t->bt_stats[s].bs_hist);
			bench_hist_merge(&eng->be_total[s].bs_sent_hist, &t->bt_stats[s].bs_sent_hist);
			eng->be_total[s].bs_failed += t->bt_stats[s].bs_failed;
			eng->be_total[s].bs_unanswered += t->bt_stats[s].bs_unanswered;
			eng->be_failed += t->bt_stats[s].bs_failed;
			eng->be_unanswered += t->bt_stats[s].bs_unanswered;
			eng->be_ops += t->bt_stats[s].bs_hist.bh_count;
		}
		eng->be_failed += t->bt_failed_outside;
		eng->be_unanswered += t->bt_unanswered_outside;
		eng->be_bytes_read += t->bt_bytes_read;
		eng->be_bytes_written += t->bt_bytes_written;
	}
	/* Ops that timed out were recorded with their latency: they count as unanswered, not as
	 * completed. */
	eng->be_ops -= SH_MIN(eng->be_ops, eng->be_unanswered);
	bench_engine_free_threads(eng);
	return 0;
out_nomem:
	rc = -ENOMEM;
out_free:
	bench_engine_fini(eng);
	return rc;
}

void bench_engine_point(const struct bench_engine *eng, double requested_ops, struct bench_point *pt)
{
	memset(pt, 0, sizeof(*pt));
	struct bench_hist *all = mem_zalloc(sizeof(*all));
	pt->bp_requested_ops = requested_ops;
	pt->bp_durable_ms = NAN;
	pt->bp_seconds = eng->be_elapsed_s;
	pt->bp_ops = eng->be_ops;
	pt->bp_achieved_ops = eng->be_elapsed_s > 0 ? (double)eng->be_ops / eng->be_elapsed_s : 0;
	pt->bp_failed = eng->be_failed;
	pt->bp_unanswered = eng->be_unanswered;
	pt->bp_server_cpu_s = eng->be_server_cpu_s;
	pt->bp_client_cpu_s = eng->be_client_cpu_s;
	pt->bp_cpu_window_s = eng->be_elapsed_s;
	pt->bp_client_spin_s = eng->be_client_spin_s;
	unsigned n = 0;
	uint64_t sent_sum = 0, sent_count = 0;
	for (unsigned s = 0; s < eng->be_nstats; s++) {
		sent_sum += eng->be_total[s].bs_sent_hist.bh_sum_ns;
		sent_count += eng->be_total[s].bs_sent_hist.bh_count;
	}
	pt->bp_mean_sent_ms = sent_count > 0 ? (double)sent_sum / (double)sent_count / 1e6 : 0.0;
	for (unsigned s = 0; s < eng->be_nstats && n < BENCH_MAX_PROCS; s++) {
		const struct bench_stat *st = &eng->be_total[s];
		if (st->bs_hist.bh_count == 0 && st->bs_failed == 0 && st->bs_unanswered == 0)
			continue; /* not part of this phase */
		struct bench_proc_result *pr = &pt->bp_procs[n++];
		pr->bpr_name = eng->be_stat_names[s];
		pr->bpr_count = st->bs_hist.bh_count;
		pr->bpr_failed = st->bs_failed + st->bs_unanswered;
		pr->bpr_mean_ms = bench_hist_mean_ms(&st->bs_hist);
		pr->bpr_p99_ms = bench_hist_percentile_ms(&st->bs_hist, 99.0);
		pr->bpr_resp_mean_ms = bench_hist_mean_ms(&st->bs_sent_hist);
		pr->bpr_resp_p99_ms = bench_hist_percentile_ms(&st->bs_sent_hist, 99.0);
		if (all)
			bench_hist_merge(all, &st->bs_hist);
	}
	pt->bp_nprocs = n;
	if (all) {
		pt->bp_mean_ms = bench_hist_mean_ms(all);
		pt->bp_p99_ms = bench_hist_percentile_ms(all, 99.0);
		mem_free(all);
	}
}
