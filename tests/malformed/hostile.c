/* hostile.c: clients that break no protocol rule but abuse the server's resources, against a
 * private `shale serve` with its default bounds (README, "Limits"; rpc_server.c, "Flow control").
 *
 * Each case runs an abusive client in a thread of its own while a light client (one GETATTR at a
 * time on its own connection) measures its latency, and compares with the light client's latency
 * measured unloaded just before:
 *   never_reading   one TCP connection with a 4 KiB receive buffer sends READDIRPLUS calls
 *                   (maxcount 1 MiB) on the export's root for HOSTILE_SECONDS (default 60) and
 *                   never reads a reply (reconnecting when the server closes it). The server's
 *                   VmRSS must stay within 64 MiB of its idle level, the light client's median
 *                   within 2x of unloaded.
 *   udp_never_reading  the same over UDP for 10 s: nothing queues, the light client is served.
 *   idle_flood      5,000 idle connections from one address, then 5,000 more spread over five:
 *                   a fresh client still mounts, lists and reads; the server holds no more
 *                   connections than its limits allow.
 *   slow_senders    500 connections trickling a byte a second into never-finished records:
 *                   the light client's median stays within 2x.
 *   flood_fairness  a server with one loop; one connection keeps 10,000 GETATTRs queued, the
 *                   light client's p99 stays within 3x of unloaded.
 * On a machine with two cores or more, the server's threads run on core 0 and this program's on
 * core 1, so that a latency measures the server's turns, not a busy abuser thread taking the
 * light client's core (the way `make bench` pins server and load).
 * HOSTILE_CASES=name,... runs only the cases named. Under AddressSanitizer the server keeps freed memory in a quarantine; it is made small for this
 * program's servers (ASAN_OPTIONS), so the same 64 MiB bound holds. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mfcommon.h"
#include "tap.h"

#define NFS3_GETATTR 1u
#define NFS3_LOOKUP 3u
#define NFS3_READ 6u
#define NFS3_READDIRPLUS 17u
#define HOSTILE_RSS_BOUND_KIB (64L * 1024) /* the bound with the defaults */
#define HOSTILE_FILES 100                  /* entries in the export's root */
#define LIGHT_BASELINE_SECONDS 5

static struct mf_target tgt;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of n samples (sorted in place). */
static uint64_t quantile(uint64_t *v, size_t n, double q)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* A single-fragment record holding one NFS call of proc with args (xid given). */
static void put_nfs_record(struct rr_buf *rec, uint32_t xid, uint32_t proc, const struct rr_buf *args)
{
	struct rr_buf call;
	rr_buf_init(&call);
	rr_put_call(&call, xid, 2, RR_PROG_NFS, 3, proc, RR_CRED_SYS, 0, 0);
	rr_put_bytes(&call, args->rb_data, args->rb_len);
	rr_put_u32(rec, 0x80000000u | (uint32_t)call.rb_len);
	rr_put_bytes(rec, call.rb_data, call.rb_len);
	rr_buf_fini(&call);
}

static void put_readdirplus_args(struct rr_buf *b, const uint8_t *fh, uint32_t fh_len)
{
	rr_put_opaque(b, fh, fh_len);
	rr_put_u64(b, 0);                 /* cookie */
	rr_put_bytes(b, "\0\0\0\0\0\0\0\0", 8); /* cookieverf */
	rr_put_u32(b, 1u << 20);          /* dircount */
	rr_put_u32(b, 1u << 20);          /* maxcount */
}

/* ---------------------------------------------------------------- the light client */

struct light {
	int lt_fd;
	uint32_t lt_xid;
	struct rr_buf lt_args;
};

static bool light_open(struct light *l)
{
	memset(l, 0, sizeof(*l));
	l->lt_xid = 0x50000000u;
	rr_buf_init(&l->lt_args);
	rr_put_opaque(&l->lt_args, tgt.mt_root, tgt.mt_root_len);
	l->lt_fd = rr_connect_tcp(tgt.mt_srv.ts_port, 0);
	return l->lt_fd >= 0;
}

static void light_close(struct light *l)
{
	if (l->lt_fd >= 0)
		close(l->lt_fd);
	l->lt_fd = -1;
	rr_buf_fini(&l->lt_args);
}

/* One GETATTR of the root: its latency in ns, or 0 when it failed. */
static uint64_t light_call(struct light *l)
{
	uint32_t status = 1;
	uint64_t t0 = now_ns();
	int rc = rr_nfs_call(l->lt_fd, true, l->lt_xid++, NFS3_GETATTR, &l->lt_args, &status, NULL,
			     NULL);
	uint64_t t1 = now_ns();
	return rc == 0 && status == 0 ? (t1 - t0 > 0 ? t1 - t0 : 1) : 0;
}

/* Latency samples taken while an abuser runs (growable). */
struct samples {
	uint64_t *sa_v;
	size_t sa_n;
	size_t sa_cap;
	unsigned sa_failed;
};

static void samples_add(struct samples *s, uint64_t ns)
{
	if (ns == 0) {
		s->sa_failed++;
		return;
	}
	if (s->sa_n == s->sa_cap) {
		size_t cap = s->sa_cap ? 2 * s->sa_cap : 4096;
		uint64_t *v = realloc(s->sa_v, cap * sizeof(*v));
		if (!v)
			return;
		s->sa_v = v;
		s->sa_cap = cap;
	}
	s->sa_v[s->sa_n++] = ns;
}

/* ---------------------------------------------------------------- an abuser's thread */

struct abuser {
	pthread_t ab_thread;
	atomic_bool ab_stop;
	atomic_ulong ab_calls;      /* calls (or bytes) the abuser got out */
	atomic_ulong ab_reconnects; /* the server closed it and it came back */
	atomic_ulong ab_replies;
	bool ab_udp;
	unsigned ab_queue;          /* flood: calls to keep outstanding */
};

static int connect_small_rcvbuf(bool udp)
{
	int fd = socket(AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int small = 4096;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(tgt.mt_srv.ts_port)};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sends READDIRPLUS calls as fast as the server takes them and never reads. */
static void *never_reader_main(void *arg)
{
	struct abuser *ab = arg;
	struct rr_buf args, rec;
	rr_buf_init(&args);
	rr_buf_init(&rec);
	put_readdirplus_args(&args, tgt.mt_root, tgt.mt_root_len);
	/* 64 calls per send (TCP); one per datagram (UDP). */
	for (unsigned i = 0; i < (ab->ab_udp ? 1u : 64u); i++)
		put_nfs_record(&rec, 0x60000000u + i, NFS3_READDIRPLUS, &args);
	const uint8_t *data = rec.rb_data + (ab->ab_udp ? 4 : 0);
	size_t len = rec.rb_len - (ab->ab_udp ? 4 : 0);
	int fd = connect_small_rcvbuf(ab->ab_udp);
	size_t off = 0;
	while (!atomic_load(&ab->ab_stop)) {
		if (fd < 0) {
			sleep_ms(50);
			fd = connect_small_rcvbuf(ab->ab_udp);
			off = 0;
			continue;
		}
		ssize_t n = send(fd, data + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			if (off == len) {
				atomic_fetch_add(&ab->ab_calls, ab->ab_udp ? 1u : 64u);
				off = 0;
			}
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS ||
			      errno == ECONNREFUSED)) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			(void)poll(&p, 1, 100);
			continue;
		}
		/* The server closed the connection (the stall rule): come back, as an attacker would. */
		close(fd);
		fd = -1;
		atomic_fetch_add(&ab->ab_reconnects, 1u);
	}
	if (fd >= 0)
		close(fd);
	rr_buf_fini(&args);
	rr_buf_fini(&rec);
	return NULL;
}

/* Keeps ab_queue GETATTRs outstanding on one connection, reading the replies (fixed size, so they
 * are counted by bytes without parsing). */
static void *flooder_main(void *arg)
{
	struct abuser *ab = arg;
	struct rr_buf args, one;
	rr_buf_init(&args);
	rr_buf_init(&one);
	rr_put_opaque(&args, tgt.mt_root, tgt.mt_root_len);
	put_nfs_record(&one, 0x70000000u, NFS3_GETATTR, &args);
	const unsigned batch = 512;
	uint8_t *calls = malloc(one.rb_len * batch);
	for (unsigned i = 0; calls && i < batch; i++)
		memcpy(calls + (size_t)i * one.rb_len, one.rb_data, one.rb_len);
	int fd = rr_connect_tcp(tgt.mt_srv.ts_port, 0);
	/* Learn the reply size from the first call. */
	uint32_t status = 1;
	size_t reply_bytes = 0;
	if (fd >= 0 && calls) {
		uint8_t *rec = NULL;
		if (send(fd, one.rb_data, one.rb_len, MSG_NOSIGNAL) == (ssize_t)one.rb_len) {
			long n = rr_recv_record(fd, true, &rec, 1 << 16, 5000);
			if (n > 0)
				reply_bytes = (size_t)n + 4;
		}
		free(rec);
		(void)status;
	}
	if (reply_bytes == 0) {
		printf("#   flooder: no first reply\n");
		goto out;
	}
	(void)fcntl(fd, F_SETFL, O_NONBLOCK);
	uint64_t sent = 0, replied_bytes = 0;
	size_t part = 0; /* bytes of the current batch already sent */
	static uint8_t sink[1 << 16];
	while (!atomic_load(&ab->ab_stop)) {
		uint64_t outstanding = sent - replied_bytes / reply_bytes;
		struct pollfd p = {.fd = fd, .events = POLLIN | (outstanding < ab->ab_queue ? POLLOUT : 0)};
		if (poll(&p, 1, 100) <= 0)
			continue;
		if (p.revents & (POLLERR | POLLHUP)) {
			printf("#   flooder: connection closed by the server\n");
			break;
		}
		if (p.revents & POLLIN) {
			ssize_t n = recv(fd, sink, sizeof(sink), 0);
			if (n == 0)
				break;
			if (n > 0) {
				replied_bytes += (uint64_t)n;
				atomic_store(&ab->ab_replies, replied_bytes / reply_bytes);
			}
		}
		if ((p.revents & POLLOUT) && outstanding < ab->ab_queue) {
			size_t total = one.rb_len * batch;
			ssize_t n = send(fd, calls + part, total - part, MSG_NOSIGNAL);
			if (n > 0) {
				part += (size_t)n;
				sent += (uint64_t)n / one.rb_len; /* whole calls only, roughly */
				if (part == total)
					part = 0;
				atomic_store(&ab->ab_calls, sent);
			}
		}
	}
out:
	if (fd >= 0)
		close(fd);
	free(calls);
	rr_buf_fini(&args);
	rr_buf_fini(&one);
	return NULL;
}

/* Trickles one byte a second into each of many never-finished records. */
struct trickler {
	pthread_t tr_thread;
	atomic_bool tr_stop;
	int *tr_fds;
	unsigned tr_n;
	atomic_ulong tr_bytes;
};

static void *trickler_main(void *arg)
{
	struct trickler *t = arg;
	while (!atomic_load(&t->tr_stop)) {
		for (unsigned i = 0; i < t->tr_n; i++)
			if (t->tr_fds[i] >= 0 && send(t->tr_fds[i], "z", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
				atomic_fetch_add(&t->tr_bytes, 1u);
		for (int w = 0; w < 10 && !atomic_load(&t->tr_stop); w++)
			sleep_ms(100);
	}
	return NULL;
}

/* ---------------------------------------------------------------- cases */

static unsigned hostile_seconds(void)
{
	const char *s = getenv("HOSTILE_SECONDS");
	long v = s ? strtol(s, NULL, 10) : 60;
	return v > 0 && v < 3600 ? (unsigned)v : 60;
}

/* The light client's way of sampling, the same unloaded and loaded: GETATTRs back to back, each
 * sent when the last was answered, for seconds. (Paused between calls, the light client would
 * measure its cores waking from idle more than the server: the unloaded figure would be the
 * slower one.) */
static void light_sample(struct light *l, struct samples *s, unsigned seconds)
{
	uint64_t end = now_ns() + (uint64_t)seconds * 1000000000ull;
	while (now_ns() < end) {
		samples_add(s, light_call(l));
	}
}

/* The light client's unloaded median and p99, in ns; false when it could not run. */
static bool light_baseline(struct light *l, uint64_t *p50, uint64_t *p99)
{
	struct samples s = {0};
	light_sample(l, &s, 1); /* warm-up */
	free(s.sa_v);
	memset(&s, 0, sizeof(s));
	light_sample(l, &s, LIGHT_BASELINE_SECONDS);
	*p50 = quantile(s.sa_v, s.sa_n, 0.5);
	*p99 = quantile(s.sa_v, s.sa_n, 0.99);
	printf("#   light client unloaded: %zu calls, p50 %.1f us, p99 %.1f us (%u failed)\n", s.sa_n,
	       *p50 / 1e3, *p99 / 1e3, s.sa_failed);
	bool ok = s.sa_failed == 0 && s.sa_n > 0;
	free(s.sa_v);
	return ok;
}

static void never_reading(bool udp)
{
	const char *what = udp ? "UDP never-reading client" : "never-reading client";
	unsigned secs = udp ? 10 : hostile_seconds();
	struct light l;
	uint64_t base50, base99;
	if (!light_open(&l) || !light_baseline(&l, &base50, &base99)) {
		tap_check(false, "%s: light client unloaded", what);
		light_close(&l);
		return;
	}
	long idle = ts_rss_kib(&tgt.mt_srv);
	struct abuser ab;
	memset(&ab, 0, sizeof(ab));
	ab.ab_udp = udp;
	if (pthread_create(&ab.ab_thread, NULL, never_reader_main, &ab) != 0) {
		tap_check(false, "%s: thread", what);
		light_close(&l);
		return;
	}
	struct samples s = {0};
	long peak = idle;
	for (unsigned t = 0; t < secs; t++) {
		light_sample(&l, &s, 1);
		long rss = ts_rss_kib(&tgt.mt_srv);
		if (rss > peak)
			peak = rss;
	}
	atomic_store(&ab.ab_stop, true);
	pthread_join(ab.ab_thread, NULL);
	uint64_t p50 = quantile(s.sa_v, s.sa_n, 0.5), p99 = quantile(s.sa_v, s.sa_n, 0.99);
	printf("#   %s for %u s: %lu calls sent, %lu reconnects; server VmRSS idle %ld KiB, peak "
	       "%ld KiB (+%ld)\n", what, secs, atomic_load(&ab.ab_calls),
	       atomic_load(&ab.ab_reconnects), idle, peak, peak - idle);
	printf("#   light client meanwhile: %zu calls, p50 %.1f us, p99 %.1f us, %u failed\n",
	       s.sa_n, p50 / 1e3, p99 / 1e3, s.sa_failed);
	tap_check(idle > 0 && peak - idle <= HOSTILE_RSS_BOUND_KIB,
		  "%s: server VmRSS stays within 64 MiB of idle (+%ld KiB)", what, peak - idle);
	/* Over UDP the datagrams of all clients share one socket's turn, and a flood of costly
	 * READDIRPLUS calls takes a CPU's worth: the other client is served, more slowly. */
	if (udp)
		tap_check(s.sa_failed == 0 && s.sa_n > 0, "%s: another client is served meanwhile "
			  "(median %.1f us against %.1f unloaded)", what, p50 / 1e3, base50 / 1e3);
	else
		tap_check(s.sa_failed == 0 && s.sa_n > 0 && p50 <= 2 * base50,
			  "%s: another client's GETATTR median within 2x of unloaded (%.1f vs "
			  "%.1f us)", what, p50 / 1e3, base50 / 1e3);
	free(s.sa_v);
	light_close(&l);
	tap_check(mf_check_health(&tgt, what), "server healthy after the %s", what);
}

/* Opens n idle TCP connections from the loopback address src into fds (-1 where one failed);
 * returns how many connected. */
static unsigned open_idle(int *fds, unsigned n, const char *src)
{
	unsigned ok = 0;
	struct sockaddr_in from = {.sin_family = AF_INET};
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(tgt.mt_srv.ts_port)};
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (inet_pton(AF_INET, src, &from.sin_addr) != 1)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] >= 0 && bind(fds[i], (struct sockaddr *)&from, sizeof(from)) == 0 &&
		    connect(fds[i], (struct sockaddr *)&to, sizeof(to)) == 0) {
			ok++;
			continue;
		}
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
	return ok;
}

static unsigned count_open(const int *fds, unsigned n)
{
	unsigned open_now = 0;
	for (unsigned i = 0; i < n; i++) {
		if (fds[i] < 0)
			continue;
		char b;
		ssize_t r = recv(fds[i], &b, 1, MSG_DONTWAIT | MSG_PEEK);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			open_now++;
	}
	return open_now;
}

/* A fresh client from 127.0.0.1: MNT, READDIRPLUS of the root, LOOKUP and READ of a file. */
static bool fresh_client_works(void)
{
	uint8_t root[64], fh[64];
	uint32_t root_len = 0, fh_len = 0, status = 1;
	if (rr_mount(tgt.mt_srv.ts_port, tgt.mt_srv.ts_export_path[0], root, &root_len) != 0) {
		printf("#   fresh client: MNT failed\n");
		return false;
	}
	int fd = rr_connect_tcp(tgt.mt_srv.ts_port, 0);
	if (fd < 0)
		return false;
	struct rr_buf b;
	rr_buf_init(&b);
	put_readdirplus_args(&b, root, root_len);
	bool ok = rr_nfs_call(fd, true, 1, NFS3_READDIRPLUS, &b, &status, NULL, NULL) == 0 &&
		  status == 0;
	b.rb_len = 0;
	rr_put_opaque(&b, root, root_len);
	rr_put_string(&b, "f7");
	ok = ok && rr_nfs_call(fd, true, 2, NFS3_LOOKUP, &b, &status, fh, &fh_len) == 0 &&
	     status == 0;
	b.rb_len = 0;
	rr_put_opaque(&b, fh, fh_len);
	rr_put_u64(&b, 0);
	rr_put_u32(&b, 4096);
	ok = ok && rr_nfs_call(fd, true, 3, NFS3_READ, &b, &status, NULL, NULL) == 0 && status == 0;
	rr_buf_fini(&b);
	close(fd);
	if (!ok)
		printf("#   fresh client: READDIRPLUS/LOOKUP/READ failed (status %u)\n", status);
	return ok;
}

static long server_fds(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)tgt.mt_srv.ts_pid);
	char *argv[] = {"/bin/sh", "-c", NULL, NULL};
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "ls %s | wc -l > /tmp/shale-hostile-fds.%d", path, (int)getpid());
	argv[2] = cmd;
	if (ts_run_cmd(argv, "/dev/null", false) != 0)
		return -1;
	char out[64];
	snprintf(out, sizeof(out), "/tmp/shale-hostile-fds.%d", (int)getpid());
	FILE *f = fopen(out, "r");
	long n = -1;
	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	unlink(out);
	return n;
}

static void idle_flood(void)
{
	enum { N = 5000 };
	static int fds[N];
	long fds_before = server_fds();
	unsigned ok = open_idle(fds, N, "127.0.0.2");
	sleep_ms(500);
	unsigned held = count_open(fds, N);
	long fds_during = server_fds();
	printf("#   5,000 idle connections from 127.0.0.2: %u connected, %u still open; server "
	       "fds %ld -> %ld\n", ok, held, fds_before, fds_during);
	tap_check(ok == N, "5,000 idle connections from one address are accepted");
	tap_check(held <= 1024 && held > 0,
		  "one address holds no more than its cap of 1,024 connections (%u)", held);
	tap_check(fresh_client_works(), "a fresh client mounts, lists and reads beside them");
	/* And spread over five addresses, past the connection limit of 4,096 in all. */
	static int more[N];
	char src[16];
	unsigned ok2 = 0;
	for (unsigned a = 0; a < 5; a++) {
		snprintf(src, sizeof(src), "127.0.0.%u", 3 + a);
		ok2 += open_idle(more + a * (N / 5), N / 5, src);
	}
	sleep_ms(500);
	unsigned held2 = count_open(fds, N) + count_open(more, N);
	long fds_after = server_fds();
	printf("#   5,000 more from five addresses: %u connected; %u of 10,000 still open; server "
	       "fds %ld\n", ok2, held2, fds_after);
	tap_check(ok2 == N, "5,000 idle connections from five addresses are accepted");
	tap_check(held2 <= 4096 + 64 && fds_after > 0 && fds_after <= fds_before + 4096 + 64,
		  "the server holds no more than its 4,096 connections (%u open, %ld fds)", held2,
		  fds_after);
	tap_check(fresh_client_works(), "a fresh client mounts, lists and reads at the limit");
	for (unsigned i = 0; i < N; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		if (more[i] >= 0)
			close(more[i]);
	}
	sleep_ms(500);
	tap_check(mf_check_health(&tgt, "idle connections"), "server healthy after 10,000 idle "
		  "connections");
}

static void slow_senders(void)
{
	enum { N = 500 };
	static int fds[N];
	struct light l;
	uint64_t base50, base99;
	if (!light_open(&l) || !light_baseline(&l, &base50, &base99)) {
		tap_check(false, "slow senders: light client unloaded");
		light_close(&l);
		return;
	}
	unsigned ok = open_idle(fds, N, "127.0.0.9");
	uint8_t hdr[4];
	uint32_t mark = htonl(0x80000000u | 200u);
	memcpy(hdr, &mark, 4);
	for (unsigned i = 0; i < N; i++)
		if (fds[i] >= 0)
			(void)send(fds[i], hdr, 4, MSG_NOSIGNAL);
	struct trickler t = {.tr_fds = fds, .tr_n = N};
	atomic_init(&t.tr_stop, false);
	if (pthread_create(&t.tr_thread, NULL, trickler_main, &t) != 0) {
		tap_check(false, "slow senders: thread");
		light_close(&l);
		return;
	}
	struct samples s = {0};
	light_sample(&l, &s, 10);
	atomic_store(&t.tr_stop, true);
	pthread_join(t.tr_thread, NULL);
	unsigned still = count_open(fds, N);
	uint64_t p50 = quantile(s.sa_v, s.sa_n, 0.5), p99 = quantile(s.sa_v, s.sa_n, 0.99);
	printf("#   500 slow senders (%u connected, %u still open, %lu bytes trickled); light "
	       "client: %zu calls, p50 %.1f us, p99 %.1f us, %u failed\n", ok, still,
	       atomic_load(&t.tr_bytes), s.sa_n, p50 / 1e3, p99 / 1e3, s.sa_failed);
	tap_check(ok == N && s.sa_failed == 0 && s.sa_n > 0 && p50 <= 2 * base50,
		  "500 slow senders: another client's GETATTR median within 2x of unloaded "
		  "(%.1f vs %.1f us)", p50 / 1e3, base50 / 1e3);
	for (unsigned i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(s.sa_v);
	light_close(&l);
	tap_check(mf_check_health(&tgt, "slow senders"), "server healthy after 500 slow senders");
}

static void flood_fairness(void)
{
	struct light l;
	uint64_t base50, base99;
	if (!light_open(&l) || !light_baseline(&l, &base50, &base99)) {
		tap_check(false, "flood: light client unloaded");
		light_close(&l);
		return;
	}
	struct abuser ab;
	memset(&ab, 0, sizeof(ab));
	ab.ab_queue = 10000;
	if (pthread_create(&ab.ab_thread, NULL, flooder_main, &ab) != 0) {
		tap_check(false, "flood: thread");
		light_close(&l);
		return;
	}
	sleep_ms(500); /* the queue fills */
	struct samples s = {0};
	unsigned long replies0 = atomic_load(&ab.ab_replies);
	light_sample(&l, &s, 10);
	unsigned long flood_replies = atomic_load(&ab.ab_replies) - replies0;
	atomic_store(&ab.ab_stop, true);
	pthread_join(ab.ab_thread, NULL);
	uint64_t p50 = quantile(s.sa_v, s.sa_n, 0.5), p99 = quantile(s.sa_v, s.sa_n, 0.99);
	printf("#   flooding connection: %lu calls answered in 10 s (%.0f/s); light client: %zu "
	       "calls, p50 %.1f us, p99 %.1f us, %u failed\n", flood_replies,
	       flood_replies / 10.0, s.sa_n, p50 / 1e3, p99 / 1e3, s.sa_failed);
	tap_check(flood_replies > 10000, "the flooding connection is served too");
	tap_check(s.sa_failed == 0 && s.sa_n > 0 && p99 <= 3 * base99,
		  "a flooding connection keeping 10,000 calls queued: another's GETATTR p99 within "
		  "3x of unloaded (%.1f vs %.1f us)", p99 / 1e3, base99 / 1e3);
	free(s.sa_v);
	light_close(&l);
	tap_check(mf_check_health(&tgt, "flood"), "server healthy after the flood");
}

/* Runs every thread of process pid (0: this process's calling thread) on core cpu. */
static void pin_to(pid_t pid, int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pid == 0) {
		(void)sched_setaffinity(0, sizeof(set), &set);
		return;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int tid = atoi(e->d_name);
		if (tid > 0)
			(void)sched_setaffinity(tid, sizeof(set), &set);
	}
	closedir(d);
}

static bool start_target(void)
{
	if (mf_start(&tgt) != 0)
		return false;
	if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
		pin_to(tgt.mt_srv.ts_pid, 0);
		pin_to(0, 1);
	}
	for (int i = 0; i < HOSTILE_FILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		uint8_t fh[64];
		uint32_t fh_len;
		if (rr_nfs_make(tgt.mt_srv.ts_port, tgt.mt_root, tgt.mt_root_len, name,
				"hostile-test-content", 0644, fh, &fh_len) != 0) {
			printf("# could not make %s\n", name);
			return false;
		}
	}
	/* Idle again after the set-up traffic. */
	sleep_ms(200);
	return true;
}

/* HOSTILE_CASES (a comma-separated list of case names) runs only those, for working on one. */
static bool want(const char *name)
{
	const char *only = getenv("HOSTILE_CASES");
	if (!only)
		return true;
	size_t len = strlen(name);
	for (const char *p = strstr(only, name); p; p = strstr(p + 1, name))
		if ((p == only || p[-1] == ',') && (p[len] == '\0' || p[len] == ','))
			return true;
	return false;
}

int main(void)
{
	/* Small quarantine: freed memory must not count as held (see the top). */
	setenv("ASAN_OPTIONS", "quarantine_size_mb=4:detect_leaks=1", 1);
	struct rlimit rl = {.rlim_cur = 16384, .rlim_max = 16384};
	struct rlimit have;
	if (getrlimit(RLIMIT_NOFILE, &have) == 0 && have.rlim_max != RLIM_INFINITY &&
	    have.rlim_max > rl.rlim_max)
		rl.rlim_max = have.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		printf("# setrlimit(NOFILE, 16384): %s\n", strerror(errno));
	tap_check(start_target(), "server started with %d files in its export", HOSTILE_FILES);
	if (want("never_reading"))
		never_reading(false);
	if (want("udp_never_reading"))
		never_reading(true);
	if (want("idle_flood"))
		idle_flood();
	if (want("slow_senders"))
		slow_senders();
	tap_check(ts_stop(&tgt.mt_srv) == 0, "server stops cleanly");
	/* Fairness within one loop: the flooder and the light client on the same thread. */
	static const char *const one_loop[] = {"--threads", "1", NULL};
	ts_set_extra_args(one_loop);
	tap_check(start_target(), "one-loop server started");
	if (want("flood_fairness"))
		flood_fairness();
	tap_check(ts_stop(&tgt.mt_srv) == 0, "one-loop server stops cleanly");
	return tap_finish();
}
