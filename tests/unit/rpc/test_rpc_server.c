/* test_rpc_server.c: an in-process rpc_server with a toy program on an ephemeral 127.0.0.1 port,
 * driven through rpc_clnt over TCP and UDP and through raw sockets: NULL, every RPC-level error,
 * AUTH_SYS, GARBAGE_ARGS, bulk replies, multi-fragment and pipelined calls, limits, the duplicate
 * request cache, a connection closed in the same turn as an accept, and the builtin portmapper
 * and registration with it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/rpc_impl.h"
#include "tap.h"

#define TOY_PROG 0x20005a1eu
#define TOY2_PROG 0x20005a1fu
#define TIMEOUT_MS 5000

enum {
	TOY_NULL, TOY_ECHO, TOY_COUNT, TOY_WHOAMI, TOY_NOPROC, TOY_BULK, TOY_DELAY, TOY_BIG,
	TOY_PIPED, TOY_SPIN
};

static atomic_uint toy_count;
static atomic_uint toy_bulk_released;
static const char toy_bulk_data[] = "0123456789"; /* 10 bytes: 2 bytes of padding */

static void toy_null(struct rpc_call *call)
{
	rpc_reply_success(call);
}

static void toy_echo(struct rpc_call *call)
{
	uint32_t len;
	const uint8_t *p = xdr_get_opaque(&call->rc_args, 1024, &len);
	if (!xdr_dec_ok(&call->rc_args) || xdr_dec_remaining(&call->rc_args) != 0) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	if (rpc_call_res_init(call, 4 + xdr_padded_len(len)) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_opaque(&call->rc_res, p, len);
	rpc_reply_success(call);
}

static void toy_count_proc(struct rpc_call *call)
{
	unsigned v = atomic_fetch_add(&toy_count, 1u) + 1u;
	if (rpc_call_res_init(call, 4) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, v);
	rpc_reply_success(call);
}

static void toy_whoami(struct rpc_call *call)
{
	if (rpc_call_res_init(call, 16 + 4 * RPC_AUTH_SYS_MAX_GIDS) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, call->rc_cred.rcr_flavor);
	xdr_put_u32(&call->rc_res, call->rc_cred.rcr_uid);
	xdr_put_u32(&call->rc_res, call->rc_cred.rcr_gid);
	xdr_put_u32(&call->rc_res, call->rc_cred.rcr_ngids);
	for (uint32_t i = 0; i < call->rc_cred.rcr_ngids; i++)
		xdr_put_u32(&call->rc_res, call->rc_cred.rcr_gids[i]);
	rpc_reply_success(call);
}

static void toy_bulk_release(void *arg)
{
	VERIFY(arg == (void *)toy_bulk_data);
	atomic_fetch_add(&toy_bulk_released, 1u);
}

static void toy_bulk(struct rpc_call *call)
{
	if (rpc_call_res_init(call, 4) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, 10);
	call->rc_bulk.iov_base = (void *)toy_bulk_data;
	call->rc_bulk.iov_len = 10;
	call->rc_bulk_pad = 2;
	call->rc_bulk_release = toy_bulk_release;
	call->rc_bulk_arg = (void *)toy_bulk_data;
	rpc_reply_success(call);
}

/* DELAY(ms): replies from a timer ms later, with a bulk segment, from the call's own loop. */
struct toy_delay {
	struct loop_timer td_timer;
	struct rpc_call *td_call;
};

static void toy_delay_fire(struct loop_timer *timer)
{
	struct toy_delay *td = timer->lt_arg;
	struct rpc_call *call = td->td_call;
	VERIFY(loop_on_thread(call->rc_loop));
	loop_timer_del(call->rc_loop, &td->td_timer);
	mem_free(td);
	if (rpc_call_res_init(call, 4) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, 10);
	call->rc_bulk.iov_base = (void *)toy_bulk_data;
	call->rc_bulk.iov_len = 10;
	call->rc_bulk_pad = 2;
	call->rc_bulk_release = toy_bulk_release;
	call->rc_bulk_arg = (void *)toy_bulk_data;
	rpc_reply_success(call);
}

static void toy_delay(struct rpc_call *call)
{
	uint32_t ms = xdr_get_u32(&call->rc_args);
	struct toy_delay *td = mem_zalloc(sizeof(*td));
	if (!xdr_dec_ok(&call->rc_args) || !td) {
		mem_free(td);
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	td->td_call = call;
	if (loop_timer_add(call->rc_loop, &td->td_timer, (uint64_t)ms * 1000000u, 0, toy_delay_fire, td) < 0) {
		mem_free(td);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
	}
}

/* SPIN(ms): keeps the loop's thread busy for ms (at most 1000) before it answers, so that what
 * reaches the server meanwhile is handled in one turn of the loop. */
static void toy_spin(struct rpc_call *call)
{
	uint32_t ms = xdr_get_u32(&call->rc_args);
	if (!xdr_dec_ok(&call->rc_args) || ms > 1000) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	uint64_t until = clock_monotonic_ns() + (uint64_t)ms * 1000000u;
	while (clock_monotonic_ns() < until)
		;
	rpc_reply_success(call);
}

/* BIG(n): n bytes (multiple of 4) of a pattern as bulk data, handed over as RPC_BULK_IOVS_MAX
 * pieces of uneven sizes (one of them empty), so that a reply the socket takes in parts stops and
 * resumes inside and between pieces. */
#define TOY_BIG_MAX (4u << 20)
static uint8_t *toy_big_data;
static atomic_uint toy_big_released;

struct toy_pieces {
	struct iovec tp_iov[RPC_BULK_IOVS_MAX];
};

static void toy_big_release(void *arg)
{
	mem_free(arg);
	atomic_fetch_add(&toy_big_released, 1u);
}

static void toy_big(struct rpc_call *call)
{
	uint32_t n = xdr_get_u32(&call->rc_args);
	if (!xdr_dec_ok(&call->rc_args) || n > TOY_BIG_MAX || n % 4) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	if (rpc_call_res_init(call, 4) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	struct toy_pieces *tp = mem_alloc(sizeof(*tp));
	if (tp == NULL) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, n);
	uint32_t at = 0;
	for (unsigned i = 0; i < RPC_BULK_IOVS_MAX; i++) {
		uint32_t len = SH_MIN(n - at, (n / 24 + 4 * i) & ~3u);
		if (i == 3)
			len = 0;
		if (i == RPC_BULK_IOVS_MAX - 1)
			len = n - at;
		tp->tp_iov[i].iov_base = toy_big_data + at;
		tp->tp_iov[i].iov_len = len;
		at += len;
	}
	call->rc_bulk_iov = tp->tp_iov;
	call->rc_bulk_iovcnt = RPC_BULK_IOVS_MAX;
	call->rc_bulk_release = toy_big_release;
	call->rc_bulk_arg = tp;
	rpc_reply_success(call);
}

/* PIPED(n): n bytes (at most 1 MiB; any length, padded) of the pattern as bulk data that waits
 * in a pipe, spliced to the socket by the rpc layer. The release records whether the pipe was
 * emptied (the reply sent whole) and closes it. */
#define TOY_PIPE_MAX (1u << 20)
static atomic_uint toy_piped_released, toy_piped_released_empty;

struct toy_pipe {
	int tpp_fds[2];
};

static void toy_piped_release(void *arg)
{
	struct toy_pipe *tp = arg;
	int queued = -1;
	if (ioctl(tp->tpp_fds[0], FIONREAD, &queued) == 0 && queued == 0)
		atomic_fetch_add(&toy_piped_released_empty, 1u);
	close(tp->tpp_fds[0]);
	close(tp->tpp_fds[1]);
	mem_free(tp);
	atomic_fetch_add(&toy_piped_released, 1u);
}

static void toy_piped(struct rpc_call *call)
{
	uint32_t n = xdr_get_u32(&call->rc_args);
	if (!xdr_dec_ok(&call->rc_args) || n == 0 || n > TOY_PIPE_MAX) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	struct toy_pipe *tp = mem_alloc(sizeof(*tp));
	if (tp == NULL || rpc_call_res_init(call, 4) < 0) {
		mem_free(tp);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	if (pipe2(tp->tpp_fds, O_CLOEXEC | O_NONBLOCK) != 0 ||
	    fcntl(tp->tpp_fds[1], F_SETPIPE_SZ, (int)TOY_PIPE_MAX) < (int)TOY_PIPE_MAX ||
	    write(tp->tpp_fds[1], toy_big_data, n) != (ssize_t)n) {
		mem_free(tp);
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, n);
	call->rc_bulk.iov_len = n;
	call->rc_bulk_piped = true;
	call->rc_bulk_pipe_fd = tp->tpp_fds[0];
	call->rc_bulk_pad = (uint32_t)(xdr_padded_len(n) - n);
	call->rc_bulk_release = toy_piped_release;
	call->rc_bulk_arg = tp;
	rpc_reply_success(call);
}

static const struct rpc_proc_desc toy_procs[] = {
	[TOY_NULL] = {"NULL", toy_null, false},
	[TOY_ECHO] = {"ECHO", toy_echo, false},
	[TOY_COUNT] = {"COUNT", toy_count_proc, true},
	[TOY_WHOAMI] = {"WHOAMI", toy_whoami, false},
	[TOY_NOPROC] = {"NOPROC", NULL, false},
	[TOY_BULK] = {"BULK", toy_bulk, false},
	[TOY_DELAY] = {"DELAY", toy_delay, false},
	[TOY_BIG] = {"BIG", toy_big, false},
	[TOY_PIPED] = {"PIPED", toy_piped, false},
	[TOY_SPIN] = {"SPIN", toy_spin, false},
};
static const struct rpc_version_desc toy_versions[] = {
	{2, toy_procs, SH_ARRAY_SIZE(toy_procs)},
	{4, toy_procs, SH_ARRAY_SIZE(toy_procs)},
};
static const struct rpc_program_desc toy_program = {"toy", TOY_PROG, toy_versions, 2};
static const struct rpc_program_desc toy2_program = {"toy2", TOY2_PROG, toy_versions, 1};

static struct rpc_server *srv;
static uint16_t srv_port;

static struct rpc_clnt *clnt_new(enum rpc_transport t, uint16_t port)
{
	struct rpc_clnt *c = NULL;
	int rc = rpc_clnt_create("127.0.0.1", port, t, &c);
	CHECKF(rc == 0, "rpc_clnt_create: %d", rc);
	return c;
}

static uint32_t get_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static const char *tname(enum rpc_transport t)
{
	return t == RPC_TCP ? "tcp" : "udp";
}

/* ---- raw TCP helpers ---- */
static int raw_connect(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads exactly len bytes; returns len, 0 on EOF, -1 on timeout or error. */
static ssize_t raw_read(int fd, void *buf, size_t len, int timeout_ms)
{
	size_t got = 0;
	while (got < len) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, timeout_ms) <= 0)
			return -1;
		ssize_t n = recv(fd, (uint8_t *)buf + got, len - got, 0);
		if (n == 0)
			return 0;
		if (n < 0)
			return -1;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Reads one single-fragment reply record into buf; returns its length or -1. */
static ssize_t raw_read_record(int fd, uint8_t *buf, size_t cap)
{
	uint8_t hdr[4];
	if (raw_read(fd, hdr, 4, TIMEOUT_MS) != 4)
		return -1;
	uint32_t len = get_be32(hdr) & RPC_RM_LEN_MASK;
	if (!(get_be32(hdr) & RPC_RM_LAST) || len > cap)
		return -1;
	return raw_read(fd, buf, len, TIMEOUT_MS) == (ssize_t)len ? (ssize_t)len : -1;
}

/* True when the server closes fd within timeout_ms (EOF or reset). */
static bool raw_closed_by_server(int fd, int timeout_ms)
{
	uint8_t b[256];
	uint64_t deadline = clock_monotonic_ns() + (uint64_t)timeout_ms * 1000000u;
	while (clock_monotonic_ns() < deadline) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		ssize_t n = recv(fd, b, sizeof(b), 0);
		if (n <= 0)
			return true;
	}
	return false;
}

/* ---- cases ---- */

static void server_null_and_echo(void)
{
	for (int t = RPC_TCP; t <= RPC_UDP; t++) {
		struct rpc_clnt *c = clnt_new((enum rpc_transport)t, srv_port);
		if (!c)
			return;
		size_t len = 99;
		int as, au;
		int rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_NULL, NULL, 0, NULL, 0, &len, TIMEOUT_MS, &as, &au);
		CHECKF(rc == 0 && len == 0 && as == RPC_SUCCESS, "%s NULL rc %d", tname(t), rc);
		uint8_t args[12], res[16];
		struct xdr_enc enc;
		xdr_enc_init(&enc, args, sizeof(args));
		xdr_put_opaque(&enc, "shale", 5);
		rc = rpc_clnt_call(c, TOY_PROG, 4, TOY_ECHO, args, xdr_enc_len(&enc), res, sizeof(res), &len,
				   TIMEOUT_MS, &as, &au);
		CHECKF(rc == 0 && len == 12 && memcmp(res, args, 12) == 0, "%s ECHO rc %d", tname(t), rc);
		rpc_clnt_destroy(c);
	}
	/* The TCP calls above went through their loop's io_uring unless the environment turned it
	 * off (this program also runs with SHALE_SOCKET_RING=0, for the epoll path). */
	const char *ring = getenv("SHALE_SOCKET_RING");
	bool want_ring = !(ring && strcmp(ring, "0") == 0);
	bool used = false;
	for (unsigned l = 0; l < rpc_server_nloops(srv); l++)
		used = used || rpc_server_socket_ring(srv, l);
	CHECKF(used == want_ring, "socket ring %d, expected %d", used, want_ring);
}

static void server_rpc_errors(void)
{
	for (int t = RPC_TCP; t <= RPC_UDP; t++) {
		struct rpc_clnt *c = clnt_new((enum rpc_transport)t, srv_port);
		if (!c)
			return;
		uint8_t res[16];
		size_t len;
		int as, au;
		int rc = rpc_clnt_call(c, TOY_PROG + 100, 2, 0, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, &as, &au);
		CHECKF(rc == -EPROTO && as == RPC_PROG_UNAVAIL, "%s PROG_UNAVAIL rc %d as %d", tname(t), rc, as);

		rc = rpc_clnt_call(c, TOY_PROG, 3, 0, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, &as, &au);
		CHECKF(rc == -EPROTO && as == RPC_PROG_MISMATCH, "%s PROG_MISMATCH rc %d as %d", tname(t), rc, as);
		CHECK(len == 8 && get_be32(res) == 2 && get_be32(res + 4) == 4);

		rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_NOPROC, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, &as, &au);
		CHECKF(rc == -EPROTO && as == RPC_PROC_UNAVAIL, "%s PROC_UNAVAIL(NULL handler) %d", tname(t), as);
		rc = rpc_clnt_call(c, TOY_PROG, 2, 1000, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, &as, &au);
		CHECKF(rc == -EPROTO && as == RPC_PROC_UNAVAIL, "%s PROC_UNAVAIL(range) %d", tname(t), as);

		/* ECHO with a length word but no data: the handler answers GARBAGE_ARGS. */
		uint8_t bad[4] = {0, 0, 0, 8};
		rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_ECHO, bad, sizeof(bad), res, sizeof(res), &len, TIMEOUT_MS,
				   &as, &au);
		CHECKF(rc == -EPROTO && as == RPC_GARBAGE_ARGS, "%s GARBAGE_ARGS %d", tname(t), as);

		/* A hand-made call with rpcvers 3. */
		uint8_t msg[40], reply[64];
		struct xdr_enc enc;
		xdr_enc_init(&enc, msg, sizeof(msg));
		rpc_msg_put_call(&enc, 0x1234, TOY_PROG, 2, 0, NULL);
		xdr_store_u32(msg + 8, 3);
		size_t rlen = 0;
		rc = rpc_clnt_exchange(c, msg, xdr_enc_len(&enc), reply, sizeof(reply), &rlen, TIMEOUT_MS);
		CHECKF(rc == 0 && rlen == 24, "%s RPC_MISMATCH exchange rc %d len %zu", tname(t), rc, rlen);
		if (rc == 0 && rlen == 24) {
			CHECK(get_be32(reply) == 0x1234 && get_be32(reply + 4) == RPC_MSG_REPLY);
			CHECK(get_be32(reply + 8) == RPC_MSG_DENIED && get_be32(reply + 12) == RPC_REJECT_MISMATCH);
			CHECK(get_be32(reply + 16) == 2 && get_be32(reply + 20) == 2);
		}
		rpc_clnt_destroy(c);
	}
}

/* Sends a call whose credential is given raw; returns the auth_stat of an AUTH_ERROR reply, 0
 * for an accepted reply, -1 otherwise. */
static int raw_auth_call(struct rpc_clnt *c, uint32_t flavor, const uint8_t *body, uint32_t body_len,
			 uint32_t verf_flavor)
{
	uint8_t msg[1024], reply[64];
	struct xdr_enc enc;
	xdr_enc_init(&enc, msg, sizeof(msg));
	static uint32_t xid = 0x4000;
	xdr_put_u32(&enc, ++xid);
	xdr_put_u32(&enc, RPC_MSG_CALL);
	xdr_put_u32(&enc, 2);
	xdr_put_u32(&enc, TOY_PROG);
	xdr_put_u32(&enc, 2);
	xdr_put_u32(&enc, TOY_NULL);
	xdr_put_u32(&enc, flavor);
	xdr_put_opaque(&enc, body, body_len);
	xdr_put_u32(&enc, verf_flavor);
	xdr_put_u32(&enc, 0);
	size_t rlen;
	if (rpc_clnt_exchange(c, msg, xdr_enc_len(&enc), reply, sizeof(reply), &rlen, TIMEOUT_MS) != 0)
		return -1;
	if (rlen >= 20 && get_be32(reply + 8) == RPC_MSG_DENIED && get_be32(reply + 12) == RPC_REJECT_AUTH_ERROR)
		return (int)get_be32(reply + 16);
	if (rlen >= 24 && get_be32(reply + 8) == RPC_MSG_ACCEPTED && get_be32(reply + 20) == RPC_SUCCESS)
		return 0;
	return -1;
}

static void server_auth(void)
{
	struct rpc_clnt *c = clnt_new(RPC_TCP, srv_port);
	if (!c)
		return;
	struct rpc_cred cred = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = 1234, .rcr_gid = 55, .rcr_ngids = 3,
				.rcr_gids = {7, 8, 9}};
	rpc_clnt_set_cred(c, &cred);
	uint8_t res[96];
	size_t len;
	int rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_WHOAMI, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, NULL, NULL);
	CHECKF(rc == 0 && len == 28, "WHOAMI rc %d len %zu", rc, len);
	if (rc == 0 && len == 28) {
		CHECK(get_be32(res) == RPC_AUTH_SYS && get_be32(res + 4) == 1234 && get_be32(res + 8) == 55);
		CHECK(get_be32(res + 12) == 3 && get_be32(res + 24) == 9);
	}
	cred.rcr_flavor = RPC_AUTH_NONE;
	rpc_clnt_set_cred(c, &cred);
	rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_WHOAMI, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, NULL, NULL);
	CHECK(rc == 0 && len >= 4 && get_be32(res) == RPC_AUTH_NONE);

	/* AUTH_SYS bodies: good; 17 gids; machine name of 256; truncated. */
	uint8_t body[400];
	struct xdr_enc enc;
	xdr_enc_init(&enc, body, sizeof(body));
	xdr_put_u32(&enc, 0);
	xdr_put_opaque(&enc, "host", 4);
	xdr_put_u32(&enc, 0);
	xdr_put_u32(&enc, 0);
	xdr_put_u32(&enc, 0);
	CHECK(raw_auth_call(c, RPC_AUTH_SYS, body, (uint32_t)xdr_enc_len(&enc), RPC_AUTH_NONE) == 0);
	CHECK(raw_auth_call(c, RPC_AUTH_SYS, body, (uint32_t)xdr_enc_len(&enc) - 4, RPC_AUTH_NONE) ==
	      RPC_AUTH_BADCRED);
	xdr_enc_init(&enc, body, sizeof(body));
	xdr_put_u32(&enc, 0);
	xdr_put_opaque(&enc, "host", 4);
	xdr_put_u32(&enc, 0);
	xdr_put_u32(&enc, 0);
	xdr_put_u32(&enc, 17);
	for (int i = 0; i < 17; i++)
		xdr_put_u32(&enc, (uint32_t)i);
	CHECK(raw_auth_call(c, RPC_AUTH_SYS, body, (uint32_t)xdr_enc_len(&enc), RPC_AUTH_NONE) ==
	      RPC_AUTH_BADCRED);
	uint8_t name[256];
	memset(name, 'a', sizeof(name));
	xdr_enc_init(&enc, body, sizeof(body));
	xdr_put_u32(&enc, 0);
	xdr_put_opaque(&enc, name, 256);
	xdr_put_u32(&enc, 0);
	xdr_put_u32(&enc, 0);
	xdr_put_u32(&enc, 0);
	CHECK(raw_auth_call(c, RPC_AUTH_SYS, body, (uint32_t)xdr_enc_len(&enc), RPC_AUTH_NONE) ==
	      RPC_AUTH_BADCRED);
	/* Unknown flavors are rejected; a verifier that is not AUTH_NONE is a bad verifier. */
	CHECK(raw_auth_call(c, RPC_AUTH_DH, body, 8, RPC_AUTH_NONE) == RPC_AUTH_REJECTEDCRED);
	CHECK(raw_auth_call(c, 0x7777, body, 0, RPC_AUTH_NONE) == RPC_AUTH_REJECTEDCRED);
	CHECK(raw_auth_call(c, RPC_AUTH_NONE, body, 0, RPC_AUTH_SYS) == RPC_AUTH_BADVERF);
	rpc_clnt_destroy(c);
}

static void server_bulk_reply(void)
{
	unsigned before = atomic_load(&toy_bulk_released);
	for (int t = RPC_TCP; t <= RPC_UDP; t++) {
		struct rpc_clnt *c = clnt_new((enum rpc_transport)t, srv_port);
		if (!c)
			return;
		uint8_t res[32];
		size_t len;
		int rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_BULK, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, NULL, NULL);
		CHECKF(rc == 0 && len == 16, "%s BULK rc %d len %zu", tname(t), rc, len);
		CHECK(get_be32(res) == 10 && memcmp(res + 4, toy_bulk_data, 10) == 0 && res[14] == 0 && res[15] == 0);
		rpc_clnt_destroy(c);
	}
	/* The release runs just after the bytes left, possibly after the client has them. */
	for (int i = 0; i < 100 && atomic_load(&toy_bulk_released) != before + 2; i++)
		usleep(10000);
	CHECK(atomic_load(&toy_bulk_released) == before + 2);
}

static void server_drc_retransmission_executes_once(void)
{
	for (int t = RPC_TCP; t <= RPC_UDP; t++) {
		struct rpc_clnt *c = clnt_new((enum rpc_transport)t, srv_port);
		if (!c)
			return;
		uint32_t xid = 0x77000000u + (uint32_t)t * 16;
		uint8_t r1[4], r2[4];
		size_t len;
		rpc_clnt_set_xid(c, xid);
		int rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_COUNT, NULL, 0, r1, 4, &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0 && len == 4);
		unsigned after_first = atomic_load(&toy_count);
		rpc_clnt_set_xid(c, xid); /* a retransmission */
		rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_COUNT, NULL, 0, r2, 4, &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0 && len == 4 && memcmp(r1, r2, 4) == 0);
		CHECKF(atomic_load(&toy_count) == after_first, "%s: executed twice", tname(t));
		/* A new xid executes. */
		rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_COUNT, NULL, 0, r2, 4, &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0 && get_be32(r2) == get_be32(r1) + 1);
		rpc_clnt_destroy(c);
		if (t == RPC_TCP) {
			/* Over TCP the retransmission may come on a new connection. */
			c = clnt_new(RPC_TCP, srv_port);
			if (!c)
				return;
			rpc_clnt_set_xid(c, xid);
			rc = rpc_clnt_call(c, TOY_PROG, 2, TOY_COUNT, NULL, 0, r2, 4, &len, TIMEOUT_MS, NULL, NULL);
			CHECK(rc == 0 && memcmp(r1, r2, 4) == 0);
			CHECK(atomic_load(&toy_count) == after_first + 1);
			rpc_clnt_destroy(c);
		}
	}
}

/* Builds an ECHO call for xid into msg; returns its length. */
static size_t make_echo(uint8_t *msg, size_t cap, uint32_t xid, const char *text)
{
	struct xdr_enc enc;
	xdr_enc_init(&enc, msg, cap);
	rpc_msg_put_call(&enc, xid, TOY_PROG, 2, TOY_ECHO, NULL);
	xdr_put_opaque(&enc, text, (uint32_t)strlen(text));
	VERIFY(xdr_enc_ok(&enc));
	return xdr_enc_len(&enc);
}

static void server_multi_fragment_and_pipelining(void)
{
	int fd = raw_connect(srv_port);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	uint8_t msg[128], stream[1024], reply[128];
	size_t mlen = make_echo(msg, sizeof(msg), 501, "fragmented call");
	/* Three fragments: 5 bytes, 0 bytes, the rest; sent in two writes split mid-header. */
	size_t n = 0;
	xdr_store_u32(stream + n, 5);
	memcpy(stream + n + 4, msg, 5);
	n += 9;
	xdr_store_u32(stream + n, 0);
	n += 4;
	xdr_store_u32(stream + n, RPC_RM_LAST | (uint32_t)(mlen - 5));
	memcpy(stream + n + 4, msg + 5, mlen - 5);
	n += 4 + mlen - 5;
	CHECK(send(fd, stream, 11, 0) == 11);
	usleep(20000);
	CHECK(send(fd, stream + 11, n - 11, 0) == (ssize_t)(n - 11));
	ssize_t r = raw_read_record(fd, reply, sizeof(reply));
	CHECKF(r == 24 + 4 + 16, "fragmented reply length %zd", r);
	if (r > 0)
		CHECK(get_be32(reply) == 501 && get_be32(reply + 20) == RPC_SUCCESS &&
		      memcmp(reply + 28, "fragmented call", 15) == 0);

	/* Ten calls in one write; ten replies, each a whole record with its own xid. */
	n = 0;
	for (uint32_t i = 0; i < 10; i++) {
		size_t l = make_echo(msg, sizeof(msg), 600 + i, "pipelined");
		xdr_store_u32(stream + n, RPC_RM_LAST | (uint32_t)l);
		memcpy(stream + n + 4, msg, l);
		n += 4 + l;
	}
	CHECK(send(fd, stream, n, 0) == (ssize_t)n);
	bool seen[10] = {false};
	for (int i = 0; i < 10; i++) {
		r = raw_read_record(fd, reply, sizeof(reply));
		CHECK(r > 0);
		if (r <= 0)
			break;
		uint32_t x = get_be32(reply);
		CHECK(x >= 600 && x < 610);
		if (x >= 600 && x < 610)
			seen[x - 600] = true;
	}
	for (int i = 0; i < 10; i++)
		CHECK(seen[i]);

	/* Not a CALL: dropped without a reply; the connection keeps working. */
	n = make_echo(msg, sizeof(msg), 700, "x");
	xdr_store_u32(msg + 4, RPC_MSG_REPLY);
	xdr_store_u32(stream, RPC_RM_LAST | (uint32_t)n);
	memcpy(stream + 4, msg, n);
	size_t l2 = make_echo(msg, sizeof(msg), 701, "after");
	xdr_store_u32(stream + 4 + n, RPC_RM_LAST | (uint32_t)l2);
	memcpy(stream + 8 + n, msg, l2);
	CHECK(send(fd, stream, 8 + n + l2, 0) == (ssize_t)(8 + n + l2));
	r = raw_read_record(fd, reply, sizeof(reply));
	CHECK(r > 0 && get_be32(reply) == 701);
	close(fd);
}

/* Appends a call record with a single u32 argument to stream at *n. */
static void put_u32_call(uint8_t *stream, size_t *n, uint32_t xid, uint32_t proc, uint32_t arg)
{
	struct xdr_enc enc;
	xdr_enc_init(&enc, stream + *n + 4, 64);
	rpc_msg_put_call(&enc, xid, TOY_PROG, 2, proc, NULL);
	xdr_put_u32(&enc, arg);
	VERIFY(xdr_enc_ok(&enc));
	xdr_store_u32(stream + *n, RPC_RM_LAST | (uint32_t)xdr_enc_len(&enc));
	*n += 4 + xdr_enc_len(&enc);
}

static void server_async_out_of_order_and_closed_conn(void)
{
	unsigned released0 = atomic_load(&toy_bulk_released);
	int fd = raw_connect(srv_port);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	uint8_t stream[256], reply[128];
	size_t n = 0;
	put_u32_call(stream, &n, 900, TOY_DELAY, 300);
	put_u32_call(stream, &n, 901, TOY_NULL, 0);
	CHECK(send(fd, stream, n, 0) == (ssize_t)n);
	ssize_t r = raw_read_record(fd, reply, sizeof(reply));
	CHECK(r > 0 && get_be32(reply) == 901); /* the later call completes first */
	r = raw_read_record(fd, reply, sizeof(reply));
	CHECK(r == 24 + 4 + 12 && get_be32(reply) == 900 && memcmp(reply + 28, toy_bulk_data, 10) == 0);
	close(fd);
	for (int i = 0; i < 100 && atomic_load(&toy_bulk_released) != released0 + 1; i++)
		usleep(10000);
	CHECK(atomic_load(&toy_bulk_released) == released0 + 1);

	/* The client goes away while the call runs: the reply is discarded, bulk still released. */
	unsigned before = atomic_load(&toy_bulk_released);
	fd = raw_connect(srv_port);
	CHECK(fd >= 0);
	n = 0;
	put_u32_call(stream, &n, 902, TOY_DELAY, 200);
	CHECK(send(fd, stream, n, 0) == (ssize_t)n);
	usleep(50000);
	close(fd);
	for (int i = 0; i < 50 && atomic_load(&toy_bulk_released) == before; i++)
		usleep(20000);
	CHECK(atomic_load(&toy_bulk_released) == before + 1);
}

/* A connection whose small receive buffer makes the server's writes stop part-way. */
static int slow_reader_connect(void)
{
	int fd = raw_connect(srv_port);
	CHECK(fd >= 0);
	if (fd >= 0) {
		int small = 16384;
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	}
	return fd;
}

static void server_large_replies_and_slow_reader(void)
{
	int fd = slow_reader_connect();
	if (fd < 0)
		return;
	uint8_t stream[256];
	size_t n = 0;
	uint32_t sizes[2] = {3u << 20, 1u << 20};
	unsigned released = atomic_load(&toy_big_released);
	put_u32_call(stream, &n, 1000, TOY_BIG, sizes[0]);
	put_u32_call(stream, &n, 1001, TOY_BIG, sizes[1]);
	CHECK(send(fd, stream, n, 0) == (ssize_t)n);
	usleep(200000); /* let the server hit a full socket and queue */
	uint8_t *buf = mem_alloc(TOY_BIG_MAX + 64);
	for (int i = 0; i < 2 && buf; i++) {
		ssize_t r = raw_read_record(fd, buf, TOY_BIG_MAX + 64);
		CHECKF(r == (ssize_t)(28 + sizes[i]), "reply %d length %zd", i, r);
		if (r > 0) {
			CHECK(get_be32(buf) == 1000u + (uint32_t)i);
			CHECK(memcmp(buf + 28, toy_big_data, sizes[i]) == 0);
		}
	}
	mem_free(buf);
	close(fd);
	for (int i = 0; i < 100 && atomic_load(&toy_big_released) != released + 2; i++)
		usleep(10000);
	CHECK(atomic_load(&toy_big_released) == released + 2);
}

/* Replies whose bulk data waits in a pipe, pipelined between ordinary ones, to a reader whose
 * small socket buffer makes the server stop and resume inside the spliced data, inside the
 * padding after it and between replies; then a piped reply the client never reads, whose pipe
 * is released unemptied when the connection closes. */
static void server_piped_replies_and_slow_reader(void)
{
	int fd = slow_reader_connect();
	if (fd < 0)
		return;
	uint8_t stream[256];
	size_t n = 0;
	const uint32_t procs[4] = {TOY_PIPED, TOY_BIG, TOY_PIPED, TOY_PIPED};
	const uint32_t sizes[4] = {TOY_PIPE_MAX, 300000, 777777, 5};
	unsigned released = atomic_load(&toy_piped_released);
	unsigned emptied = atomic_load(&toy_piped_released_empty);
	for (int i = 0; i < 4; i++)
		put_u32_call(stream, &n, 1100u + (uint32_t)i, procs[i], sizes[i]);
	CHECK(send(fd, stream, n, 0) == (ssize_t)n);
	usleep(200000); /* let the server hit a full socket and queue */
	uint8_t *buf = mem_alloc(TOY_PIPE_MAX + 64);
	for (int i = 0; i < 4 && buf; i++) {
		ssize_t r = raw_read_record(fd, buf, TOY_PIPE_MAX + 64);
		size_t padded = (sizes[i] + 3u) & ~3u;
		CHECKF(r == (ssize_t)(28 + padded), "reply %d length %zd", i, r);
		if (r > 0) {
			CHECK(get_be32(buf) == 1100u + (uint32_t)i);
			CHECK(get_be32(buf + 24) == sizes[i]);
			CHECK(memcmp(buf + 28, toy_big_data, sizes[i]) == 0);
			for (size_t k = sizes[i]; k < padded; k++)
				CHECK(buf[28 + k] == 0);
		}
	}
	for (int i = 0; i < 100 && atomic_load(&toy_piped_released) != released + 3; i++)
		usleep(10000);
	CHECK(atomic_load(&toy_piped_released) == released + 3);
	CHECK(atomic_load(&toy_piped_released_empty) == emptied + 3);

	/* A piped reply stuck behind a full socket when the client leaves. */
	n = 0;
	put_u32_call(stream, &n, 1200, TOY_BIG, 3u << 20);
	put_u32_call(stream, &n, 1201, TOY_PIPED, TOY_PIPE_MAX);
	CHECK(send(fd, stream, n, 0) == (ssize_t)n);
	usleep(200000);
	close(fd);
	for (int i = 0; i < 100 && atomic_load(&toy_piped_released) != released + 4; i++)
		usleep(10000);
	CHECK(atomic_load(&toy_piped_released) == released + 4);
	CHECK(atomic_load(&toy_piped_released_empty) == emptied + 3); /* that one kept its bytes */
	mem_free(buf);
}

static void server_oversize_record_closes(void)
{
	int fd = raw_connect(srv_port);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	uint8_t hdr[4];
	xdr_store_u32(hdr, RPC_RM_LAST | 0x7fffffffu); /* 2 GiB */
	CHECK(send(fd, hdr, 4, 0) == 4);
	CHECK(raw_closed_by_server(fd, 2000));
	close(fd);
	/* The server still answers others. */
	struct rpc_clnt *c = clnt_new(RPC_TCP, srv_port);
	if (c) {
		CHECK(rpc_clnt_call(c, TOY_PROG, 2, TOY_NULL, NULL, 0, NULL, 0, NULL, TIMEOUT_MS, NULL, NULL) == 0);
		rpc_clnt_destroy(c);
	}
}

/* Starts a server of its own for one case: cfg, the toy program, TCP on an ephemeral port,
 * stored in *port. */
static struct rpc_server *case_server_start(struct rpc_server_config *cfg, uint16_t *port)
{
	struct rpc_server *s = NULL;
	*port = 0;
	bool ok = rpc_server_create(cfg, &s) == 0;
	CHECK(ok);
	if (!ok)
		return NULL; /* the case fails rather than the program */
	ok = rpc_server_add_program(s, &toy_program, NULL) == 0 &&
	     rpc_server_listen(s, "127.0.0.1", 0, RPC_TCP, port) == 0 && rpc_server_start(s) == 0;
	CHECK(ok);
	if (!ok) {
		rpc_server_stop(s);
		rpc_server_destroy(s);
		return NULL;
	}
	return s;
}

/* Reads one reply record of at most cap bytes and returns its xid; 0 on a timeout, a close, or a
 * longer record (then left unread). */
static uint32_t raw_read_reply_xid(int fd, size_t cap)
{
	uint8_t hdr[4], *body = mem_alloc(cap);
	uint32_t xid = 0;
	if (body && raw_read(fd, hdr, 4, TIMEOUT_MS) == 4) {
		uint32_t len = get_be32(hdr) & RPC_RM_LEN_MASK;
		if (len >= 4 && len <= cap && raw_read(fd, body, len, TIMEOUT_MS) == (ssize_t)len)
			xid = get_be32(body);
	}
	mem_free(body);
	return xid;
}

/* A connection closed in the same turn of the loop as an accept, with a send of its own prepared
 * but not yet submitted: the accepted connection must not get that send. While the loop is kept
 * busy by SPIN on c, a sends a call whose reply is large enough to be sent at once (so its send
 * is prepared as its record is read) followed by a record mark the server refuses (so a is closed
 * right after), and b connects and sends a NULL call. When the loop next turns, it reads a's
 * bytes, prepares the send, closes a, and accepts b. A ring connection's descriptor stays open
 * until its last op has completed (rpc_conn_close): were it closed at once, b would be accepted
 * under a's number and the next submission would send a's reply down b. */
static void server_closed_conn_keeps_its_fd_until_its_ops_end(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	const uint32_t big = 512u * 1024u; /* above the reply size that is sent at once */
	for (int round = 0; round < 5; round++) {
		int c = raw_connect(port), a = raw_connect(port);
		CHECK(c >= 0 && a >= 0);
		if (c < 0 || a < 0) {
			if (c >= 0)
				close(c);
			if (a >= 0)
				close(a);
			break;
		}
		/* Both accepted and answering before the loop is held. */
		uint8_t stream[256];
		size_t n = 0;
		put_u32_call(stream, &n, 1000, TOY_NULL, 0);
		CHECK(send(c, stream, n, 0) == (ssize_t)n && raw_read_reply_xid(c, 256) == 1000);
		CHECK(send(a, stream, n, 0) == (ssize_t)n && raw_read_reply_xid(a, 256) == 1000);
		n = 0;
		put_u32_call(stream, &n, 1001, TOY_SPIN, 300);
		CHECK(send(c, stream, n, 0) == (ssize_t)n);
		usleep(50000); /* the loop is spinning now */
		n = 0;
		put_u32_call(stream, &n, 2000, TOY_BIG, big);
		/* A record mark of 2 GiB: refused, and a is closed. */
		xdr_store_u32(stream + n, RPC_RM_LAST | 0x7fffffffu);
		n += 4;
		CHECK(send(a, stream, n, 0) == (ssize_t)n);
		int b = raw_connect(port);
		CHECK(b >= 0);
		if (b >= 0) {
			n = 0;
			put_u32_call(stream, &n, 3000, TOY_NULL, 0);
			CHECK(send(b, stream, n, 0) == (ssize_t)n);
			uint32_t xid = raw_read_reply_xid(b, big + 1024);
			CHECKF(xid == 3000, "round %d: b's first reply has xid %u", round, xid);
		}
		CHECK(raw_read_reply_xid(c, 256) == 1001);
		CHECK(raw_closed_by_server(a, 2000));
		close(a);
		close(c);
		if (b >= 0)
			close(b);
	}
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

static void server_portmap_builtin_and_registration(void)
{
	uint16_t pmap = rpc_portmap_port(srv);
	CHECK(pmap != 0);
	if (!pmap)
		return;
	for (int t = RPC_TCP; t <= RPC_UDP; t++) {
		struct rpc_clnt *c = clnt_new((enum rpc_transport)t, pmap);
		if (!c)
			return;
		CHECK(rpc_clnt_call(c, RPC_PMAP_PROG, 2, 0, NULL, 0, NULL, 0, NULL, TIMEOUT_MS, NULL, NULL) == 0);
		uint8_t args[16], res[1024];
		size_t len;
		uint32_t prots[2] = {RPC_IPPROTO_TCP, RPC_IPPROTO_UDP};
		for (int p = 0; p < 2; p++) {
			xdr_store_u32(args, TOY_PROG);
			xdr_store_u32(args + 4, 4);
			xdr_store_u32(args + 8, prots[p]);
			xdr_store_u32(args + 12, 0);
			int rc = rpc_clnt_call(c, RPC_PMAP_PROG, 2, 3, args, 16, res, sizeof(res), &len, TIMEOUT_MS,
					       NULL, NULL);
			CHECKF(rc == 0 && len == 4 && get_be32(res) == srv_port, "%s GETPORT rc %d", tname(t), rc);
		}
		xdr_store_u32(args + 4, 3); /* unserved version */
		int rc = rpc_clnt_call(c, RPC_PMAP_PROG, 2, 3, args, 16, res, sizeof(res), &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0 && len == 4 && get_be32(res) == 0);
		/* The toy program is not served on the portmapper's port. */
		rc = rpc_clnt_call(c, TOY_PROG, 2, 0, NULL, 0, NULL, 0, NULL, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == -EPROTO);
		/* DUMP: portmapper x2 + toy (2 versions x 2 transports). */
		rc = rpc_clnt_call(c, RPC_PMAP_PROG, 2, 4, NULL, 0, res, sizeof(res), &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0);
		struct xdr_dec dec;
		xdr_dec_init(&dec, res, len);
		int entries = 0, toy_tcp_v2 = 0;
		while (xdr_get_bool(&dec)) {
			uint32_t prog = xdr_get_u32(&dec), vers = xdr_get_u32(&dec), prot = xdr_get_u32(&dec);
			uint32_t port = xdr_get_u32(&dec);
			entries++;
			if (prog == TOY_PROG && vers == 2 && prot == RPC_IPPROTO_TCP && port == srv_port)
				toy_tcp_v2++;
		}
		CHECK(xdr_dec_ok(&dec) && xdr_dec_remaining(&dec) == 0);
		CHECKF(entries == 6 && toy_tcp_v2 == 1, "DUMP entries %d", entries);
		rpc_clnt_destroy(c);
	}

	/* A second server finds this portmapper and registers with it. */
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	struct rpc_server *srv2;
	CHECK(rpc_server_create(&cfg, &srv2) == 0);
	CHECK(rpc_server_add_program(srv2, &toy2_program, NULL) == 0);
	uint16_t port2 = 0;
	CHECK(rpc_server_listen(srv2, "127.0.0.1", 0, RPC_TCP | RPC_UDP, &port2) == 0);
	rpc_portmap_set_port(srv2, pmap);
	enum rpc_portmap_mode mode = RPC_PORTMAP_NONE;
	CHECK(rpc_portmap_start(srv2, "127.0.0.1", true, &mode) == 0);
	CHECK(mode == RPC_PORTMAP_REGISTERED);
	CHECK(rpc_server_start(srv2) == 0);
	struct rpc_clnt *c = clnt_new(RPC_UDP, pmap);
	if (c) {
		uint8_t args[16], res[4];
		size_t len;
		xdr_store_u32(args, TOY2_PROG);
		xdr_store_u32(args + 4, 2);
		xdr_store_u32(args + 8, RPC_IPPROTO_UDP);
		xdr_store_u32(args + 12, 0);
		int rc = rpc_clnt_call(c, RPC_PMAP_PROG, 2, 3, args, 16, res, 4, &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0 && get_be32(res) == port2);
		rpc_portmap_stop(srv2);
		rc = rpc_clnt_call(c, RPC_PMAP_PROG, 2, 3, args, 16, res, 4, &len, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0 && get_be32(res) == 0);
		rpc_clnt_destroy(c);
	}
	rpc_server_stop(srv2);
	rpc_server_destroy(srv2);
}

/* A TCP connection to port from the loopback address src (127.0.0.0/8: every such address is
 * this host's), or -1. */
static int raw_connect_from(uint16_t port, const char *src)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in from = {.sin_family = AF_INET};
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || inet_pton(AF_INET, src, &from.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Sends a NULL call of the toy program on fd and reads its reply: true when answered. */
static bool raw_null(int fd, uint32_t xid)
{
	uint8_t buf[128];
	struct xdr_enc enc;
	xdr_enc_init(&enc, buf + 4, sizeof(buf) - 4);
	rpc_msg_put_call(&enc, xid, TOY_PROG, 2, TOY_NULL, NULL);
	if (!xdr_enc_ok(&enc))
		return false;
	xdr_store_u32(buf, RPC_RM_LAST | (uint32_t)xdr_enc_len(&enc));
	size_t len = 4 + xdr_enc_len(&enc);
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return false;
	return raw_read_reply_xid(fd, 1024) == xid;
}

/* Rule 8 of rpc_server.c: a new connection at the limit closes the least recently active one of
 * the address holding the most connections, and is served itself. */
static void server_conn_limit_closes_oldest(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	cfg.rsc_max_conns = 3;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	/* b (alone on its address) is the oldest; a1 and a2 share an address. */
	int b = raw_connect_from(port, "127.0.0.3");
	CHECK(b >= 0 && raw_null(b, 1));
	usleep(20000);
	int a1 = raw_connect_from(port, "127.0.0.2");
	CHECK(a1 >= 0 && raw_null(a1, 2));
	usleep(20000);
	int a2 = raw_connect_from(port, "127.0.0.2");
	CHECK(a2 >= 0 && raw_null(a2, 3));
	usleep(20000);
	int c = raw_connect_from(port, "127.0.0.4");
	CHECKF(c >= 0 && raw_null(c, 4), "the new connection at the limit is served");
	CHECKF(raw_closed_by_server(a1, 2000), "the oldest of the largest address is closed");
	CHECKF(raw_null(b, 5) && raw_null(a2, 6), "the other connections are kept");
	/* At the limit again, with one address per connection: the oldest overall goes. */
	int d = raw_connect_from(port, "127.0.0.5");
	CHECK(d >= 0 && raw_null(d, 7));
	CHECKF(raw_closed_by_server(c, 2000), "the least recently active connection is closed");
	CHECK(raw_null(b, 8) && raw_null(a2, 9) && raw_null(d, 10));
	int fds[] = {a1, a2, b, c, d};
	for (unsigned i = 0; i < SH_ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

/* The per-address cap: past it, a new connection from that address closes the address's least
 * recently active connection; other addresses are not touched. */
static void server_conn_per_addr_cap(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 2;
	cfg.rsc_max_conns_per_addr = 2;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	int other = raw_connect_from(port, "127.0.0.7");
	CHECK(other >= 0 && raw_null(other, 1));
	int a1 = raw_connect_from(port, "127.0.0.6");
	CHECK(a1 >= 0 && raw_null(a1, 2));
	usleep(20000);
	int a2 = raw_connect_from(port, "127.0.0.6");
	CHECK(a2 >= 0 && raw_null(a2, 3));
	usleep(20000);
	int a3 = raw_connect_from(port, "127.0.0.6");
	CHECKF(a3 >= 0 && raw_null(a3, 4), "a connection past the address's cap is served");
	CHECKF(raw_closed_by_server(a1, 2000), "the address's oldest connection is closed");
	CHECKF(raw_null(a2, 5) && raw_null(other, 6), "the rest are kept");
	/* Many more from the same address: the address never holds more than its cap. */
	int many[20];
	unsigned open_now = 0;
	for (unsigned i = 0; i < SH_ARRAY_SIZE(many); i++) {
		many[i] = raw_connect_from(port, "127.0.0.6");
		CHECK(many[i] >= 0 && raw_null(many[i], 100 + i));
	}
	usleep(300000);
	for (unsigned i = 0; i < SH_ARRAY_SIZE(many); i++)
		if (many[i] >= 0 && !raw_closed_by_server(many[i], 50))
			open_now++;
	CHECKF(open_now <= 2, "%u of 20 connections from one address still open (cap 2)",
	       open_now);
	CHECK(raw_null(other, 7));
	for (unsigned i = 0; i < SH_ARRAY_SIZE(many); i++)
		if (many[i] >= 0)
			close(many[i]);
	int fds[] = {other, a1, a2, a3};
	for (unsigned i = 0; i < SH_ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

/* A connection that never reads: sends calls for 1 MiB replies until the socket stops taking
 * them (the server stopped reading it). Returns the fd. */
static int hog_connect_and_fill(uint16_t port, uint32_t first_xid)
{
	/* The small receive buffer is set before connecting: shrunk after, it would drop what the
	 * window already let through, and the retransmissions would stall the reads below. */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int small = 4096;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
	    connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	(void)fcntl(fd, F_SETFL, O_NONBLOCK);
	uint8_t stream[64];
	for (uint32_t i = 0; i < 2000; i++) {
		size_t n = 0;
		put_u32_call(stream, &n, first_xid + i, TOY_BIG, 1u << 20);
		if (send(fd, stream, n, MSG_NOSIGNAL) != (ssize_t)n)
			break; /* the socket is full: the server stopped reading */
	}
	return fd;
}

/* Rules 1 to 3 of rpc_server.c: one connection that never reads holds at most its own bound;
 * many together stay within the server's budget (plus what the rules let through: the fair
 * parts and a call each), get alike shares, and a light client is served meanwhile. */
static void server_memory_bounds(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	cfg.rsc_max_total_buffer_bytes = 16u << 20;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	const size_t one_call = (1u << 20) + 64 * 1024; /* a reply and one read's input */
	int hog = hog_connect_and_fill(port, 5000);
	usleep(300000);
	struct rpc_server_stats st;
	rpc_server_get_stats(s, &st);
	CHECKF(hog >= 0 && st.rss_mem_peak_bytes <= cfg.rsc_max_conn_buffer_bytes + one_call,
	       "one never-reading connection held %zu bytes at its peak", st.rss_mem_peak_bytes);
	enum { HOGS = 16 };
	int hogs[HOGS];
	for (unsigned i = 0; i < HOGS; i++)
		hogs[i] = hog_connect_and_fill(port, 10000 + 4000 * i);
	usleep(500000);
	rpc_server_get_stats(s, &st);
	size_t bound = 2 * cfg.rsc_max_total_buffer_bytes + (HOGS + 1) * one_call;
	CHECKF(st.rss_mem_peak_bytes <= bound, "%u never-reading connections: peak %zu bytes, "
	       "bound %zu", HOGS + 1, st.rss_mem_peak_bytes, bound);
	int light = raw_connect(port);
	CHECKF(light >= 0 && raw_null(light, 77), "a light client is served beside them");
	/* Each hog, once read, got replies: none was starved to nothing. */
	unsigned served = 0;
	uint8_t *buf = mem_alloc(TOY_BIG_MAX + 64);
	for (unsigned i = 0; i < HOGS && buf; i++) {
		if (hogs[i] < 0)
			continue;
		(void)fcntl(hogs[i], F_SETFL, 0);
		ssize_t r = raw_read_record(hogs[i], buf, TOY_BIG_MAX + 64);
		if (r == 28 + (1 << 20))
			served++;
		else
			printf("#   hog %u: first reply %zd bytes\n", i, r);
	}
	mem_free(buf);
	CHECKF(served == HOGS, "%u of %u never-reading connections had replies waiting", served,
	       HOGS);
	for (unsigned i = 0; i < HOGS; i++)
		if (hogs[i] >= 0)
			close(hogs[i]);
	if (hog >= 0)
		close(hog);
	if (light >= 0)
		close(light);
	/* Closed: everything they held is given back. */
	size_t left = SIZE_MAX;
	for (int i = 0; i < 100 && left != 0; i++) {
		usleep(20000);
		rpc_server_get_stats(s, &st);
		left = st.rss_mem_bytes;
	}
	CHECKF(left == 0, "%zu bytes still held after every connection closed", left);
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

static void server_conn_idle(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	cfg.rsc_idle_timeout_s = 1;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	struct rpc_clnt *a = clnt_new(RPC_TCP, port);
	if (a) {
		/* Idle: closed after about a second. */
		int rc = rpc_clnt_call(a, TOY_PROG, 2, 0, NULL, 0, NULL, 0, NULL, TIMEOUT_MS, NULL, NULL);
		CHECK(rc == 0);
		sleep(3);
		rc = rpc_clnt_call(a, TOY_PROG, 2, 0, NULL, 0, NULL, 0, NULL, 1000, NULL, NULL);
		CHECKF(rc < 0, "idle connection still open: rc %d", rc);
	}
	rpc_clnt_destroy(a);
	/* A new connection works. */
	struct rpc_clnt *d = clnt_new(RPC_TCP, port);
	if (d) {
		CHECK(rpc_clnt_call(d, TOY_PROG, 2, 0, NULL, 0, NULL, 0, NULL, TIMEOUT_MS, NULL, NULL) == 0);
		rpc_clnt_destroy(d);
	}
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

/* Rule 9's second part: a partial record that gets no byte for rsc_record_timeout_s closes its
 * connection, long before the idle timeout; one that keeps getting bytes is not closed by it. */
static void server_partial_record_timeout(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	cfg.rsc_record_timeout_s = 1;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	uint8_t hdr[4];
	xdr_store_u32(hdr, RPC_RM_LAST | 1000u);
	int stalled = raw_connect(port), trickle = raw_connect(port);
	CHECK(stalled >= 0 && trickle >= 0);
	CHECK(send(stalled, hdr, 4, 0) == 4 && send(trickle, hdr, 4, 0) == 4);
	bool trickle_closed = false;
	for (int i = 0; i < 10 && !trickle_closed; i++) {
		if (send(trickle, "z", 1, MSG_NOSIGNAL) != 1)
			trickle_closed = true;
		else
			trickle_closed = raw_closed_by_server(trickle, 300);
	}
	CHECKF(!trickle_closed, "a partial record still receiving bytes is kept");
	CHECKF(raw_closed_by_server(stalled, 3000), "a stalled partial record is closed");
	close(stalled);
	close(trickle);
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

static void server_slow_sender_is_idle(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	cfg.rsc_idle_timeout_s = 1;
	cfg.rsc_max_conn_buffer_bytes = 64 * 1024;
	uint16_t port;
	struct rpc_server *s = case_server_start(&cfg, &port);
	if (!s)
		return;
	/* A record that never completes, trickled a byte at a time. */
	int fd = raw_connect(port);
	CHECK(fd >= 0);
	uint8_t hdr[4];
	xdr_store_u32(hdr, RPC_RM_LAST | 1000u);
	CHECK(send(fd, hdr, 4, 0) == 4);
	bool closed = false;
	for (int i = 0; i < 40 && !closed; i++) {
		if (send(fd, "z", 1, MSG_NOSIGNAL) != 1)
			closed = true;
		else
			closed = raw_closed_by_server(fd, 100);
	}
	CHECK(closed);
	close(fd);
	/* A partial record larger than the per-connection buffer with nothing in flight closes. */
	fd = raw_connect(port);
	CHECK(fd >= 0);
	xdr_store_u32(hdr, RPC_RM_LAST | (512u * 1024));
	static uint8_t junk[200 * 1024];
	CHECK(send(fd, hdr, 4, 0) == 4);
	(void)send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
	CHECK(raw_closed_by_server(fd, 2000));
	close(fd);
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

int main(void)
{
	toy_big_data = mem_alloc(TOY_BIG_MAX);
	VERIFY(toy_big_data);
	for (uint32_t i = 0; i < TOY_BIG_MAX; i++)
		toy_big_data[i] = (uint8_t)(i * 31 + (i >> 12));
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 2;
	cfg.rsc_max_conn_buffer_bytes = 8u << 20;
	int rc = rpc_server_create(&cfg, &srv);
	if (!tap_check(rc == 0, "server_create"))
		return tap_finish();
	VERIFY(rpc_server_add_program(srv, &toy_program, NULL) == 0);
	rc = rpc_server_listen(srv, "127.0.0.1", 0, RPC_TCP | RPC_UDP, &srv_port);
	tap_check(rc == 0 && srv_port != 0, "server_listen on an ephemeral port");
	rpc_portmap_set_port(srv, 0);
	enum rpc_portmap_mode mode = RPC_PORTMAP_NONE;
	rc = rpc_portmap_start(srv, "127.0.0.1", true, &mode);
	tap_check(rc == 0 && mode == RPC_PORTMAP_BUILTIN, "builtin portmapper started");
	rc = rpc_server_start(srv);
	if (!tap_check(rc == 0, "server_start"))
		return tap_finish();

	TAP_RUN(server_null_and_echo);
	TAP_RUN(server_rpc_errors);
	TAP_RUN(server_auth);
	TAP_RUN(server_bulk_reply);
	TAP_RUN(server_drc_retransmission_executes_once);
	TAP_RUN(server_multi_fragment_and_pipelining);
	TAP_RUN(server_async_out_of_order_and_closed_conn);
	TAP_RUN(server_large_replies_and_slow_reader);
	TAP_RUN(server_piped_replies_and_slow_reader);
	TAP_RUN(server_oversize_record_closes);
	TAP_RUN(server_closed_conn_keeps_its_fd_until_its_ops_end);
	TAP_RUN(server_portmap_builtin_and_registration);
	TAP_RUN(server_conn_limit_closes_oldest);
	TAP_RUN(server_conn_per_addr_cap);
	TAP_RUN(server_conn_idle);
	TAP_RUN(server_memory_bounds);
	TAP_RUN(server_partial_record_timeout);
	TAP_RUN(server_slow_sender_is_idle);

	rpc_portmap_stop(srv);
	rpc_server_stop(srv);
	rpc_server_destroy(srv);
	mem_free(toy_big_data);
	return tap_finish();
}
