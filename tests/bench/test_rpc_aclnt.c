/* test_rpc_aclnt.c: the asynchronous RPC client (src/rpc/rpc_aclnt.c) against a scripted server
 * thread on a loopback socket: many calls in flight with bulk data, replies in reverse order and
 * split into several record fragments written a few bytes at a time, a reply with an unknown xid,
 * a call never answered (timeout), error replies, and the connection closing under calls. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/rpc.h"
#include "tap.h"

#define NCALLS 50
#define PROC_ECHO 1u
#define PROC_SILENT 2u  /* the server never answers */
#define PROC_GARBAGE 3u /* the server answers GARBAGE_ARGS */
#define PROC_CLOSE 4u   /* the server closes the connection */

static int listen_fd;
static uint16_t listen_port;
static uint8_t bulk_src[NCALLS * 100 + 4];

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}
static int read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
/* Writes in 7-byte pieces so the client sees records cut anywhere. */
static void write_slowly(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		size_t n = len < 7 ? len : 7;
		if (write(fd, p, n) != (ssize_t)n)
			return;
		p += n;
		len -= n;
	}
}

struct call_seen {
	uint32_t xid, proc, value, bulk_sum, bulk_len;
};

/* Reads one call record (single fragment, as the client sends them). */
static int server_read_call(int fd, struct call_seen *c)
{
	uint8_t hdr[4];
	if (read_full(fd, hdr, 4) < 0)
		return -1;
	uint32_t len = get32(hdr) & 0x7fffffffu;
	uint8_t *rec = malloc(len);
	if (!rec || read_full(fd, rec, len) < 0) {
		free(rec);
		return -1;
	}
	c->xid = get32(rec);
	c->proc = get32(rec + 20);
	uint32_t off = 24;
	uint32_t cred_len = get32(rec + off + 4);
	off += 8 + ((cred_len + 3) & ~3u);
	uint32_t verf_len = get32(rec + off + 4);
	off += 8 + ((verf_len + 3) & ~3u);
	c->value = get32(rec + off);
	c->bulk_len = get32(rec + off + 4);
	c->bulk_sum = 0;
	for (uint32_t i = 0; i < c->bulk_len; i++)
		c->bulk_sum = c->bulk_sum * 31u + rec[off + 8 + i];
	free(rec);
	return 0;
}

/* Reply as three fragments: header words / first body word / the rest. */
static void server_reply(int fd, uint32_t xid, uint32_t accept_stat, uint32_t v1, uint32_t v2)
{
	uint8_t body[64];
	put32(body, xid);
	put32(body + 4, 1);  /* REPLY */
	put32(body + 8, 0);  /* MSG_ACCEPTED */
	put32(body + 12, 0); /* verifier AUTH_NONE */
	put32(body + 16, 0);
	put32(body + 20, accept_stat);
	size_t blen = 24;
	if (accept_stat == 0) {
		put32(body + 24, v1);
		put32(body + 28, v2);
		blen = 32;
	}
	uint8_t out[96];
	size_t n = 0;
	size_t cuts[3][2] = {{0, 12}, {12, 12}, {24, blen - 24}};
	for (int f = 0; f < 3; f++) {
		put32(out + n, (f == 2 ? 0x80000000u : 0) | (uint32_t)cuts[f][1]);
		memcpy(out + n + 4, body + cuts[f][0], cuts[f][1]);
		n += 4 + cuts[f][1];
	}
	write_slowly(fd, out, n);
}

static void *server_main(void *arg)
{
	(void)arg;
	int fd = accept(listen_fd, NULL, NULL);
	if (fd < 0)
		return NULL;
	static struct call_seen calls[NCALLS + 3];
	unsigned n = 0;
	/* Phase 1: NCALLS echoes, one silent and one garbage call. */
	while (n < NCALLS + 2 && server_read_call(fd, &calls[n]) == 0)
		n++;
	server_reply(fd, 0xdeadbeefu, 0, 1, 2); /* nobody asked: stray */
	for (unsigned i = n; i-- > 0;) {
		if (calls[i].proc == PROC_ECHO)
			server_reply(fd, calls[i].xid, 0, calls[i].value + 1,
				     calls[i].bulk_sum ^ calls[i].bulk_len);
		else if (calls[i].proc == PROC_GARBAGE)
			server_reply(fd, calls[i].xid, 4, 0, 0);
	}
	/* Phase 2: a call that makes the server hang up. */
	struct call_seen last;
	if (server_read_call(fd, &last) != 0 || last.proc != PROC_CLOSE)
		printf("# server: expected the closing call\n");
	close(fd);
	return NULL;
}

struct result {
	int status;
	uint32_t v1, v2;
	bool done;
};
static struct result results[NCALLS + 3];
static unsigned done_count;
static unsigned expect_done;
static struct loop *test_loop;
static struct rpc_aclnt *clnt;
static int issue(struct rpc_aclnt *c, uint32_t proc, uint32_t value, const void *bulk, uint32_t blen,
		 struct result *r);

static void on_done(void *arg, int status, struct xdr_dec *res)
{
	struct result *r = arg;
	r->done = true;
	r->status = status;
	if (status == 0) {
		r->v1 = xdr_get_u32(res);
		r->v2 = xdr_get_u32(res);
		if (!xdr_dec_ok(res) || xdr_dec_remaining(res) != 0)
			r->status = -EBADMSG;
	}
	/* The silent call's timeout starts the last call, from inside a callback. */
	if (r == &results[NCALLS] && status == -ETIMEDOUT &&
	    issue(clnt, PROC_CLOSE, 0, NULL, 0, &results[NCALLS + 2]) != 0)
		printf("# could not issue the closing call from a callback\n");
	if (++done_count == expect_done)
		loop_stop(test_loop);
}

static uint32_t expected_sum(unsigned i)
{
	uint32_t sum = 0;
	for (unsigned k = 0; k < i * 100; k++)
		sum = sum * 31u + bulk_src[k];
	return sum ^ (i * 100);
}

static int issue(struct rpc_aclnt *c, uint32_t proc, uint32_t value, const void *bulk, uint32_t blen,
		 struct result *r)
{
	struct xdr_enc *enc;
	int rc = rpc_aclnt_call_begin(c, 200000, 1, proc, 16, &enc);
	if (rc < 0)
		return rc;
	xdr_put_u32(enc, value);
	xdr_put_u32(enc, blen);
	return rpc_aclnt_call_end(c, bulk, blen, on_done, r);
}

static void test_many_calls(void)
{
	for (unsigned i = 0; i < NCALLS; i++)
		CHECK(issue(clnt, PROC_ECHO, i * 3, bulk_src, i * 100, &results[i]) == 0);
	CHECK(issue(clnt, PROC_SILENT, 0, NULL, 0, &results[NCALLS]) == 0);
	CHECK(issue(clnt, PROC_GARBAGE, 0, NULL, 0, &results[NCALLS + 1]) == 0);
	CHECK(rpc_aclnt_in_flight(clnt) == NCALLS + 2);
	CHECK(rpc_aclnt_free_slots(clnt) == 64 - (NCALLS + 2));
	CHECK(rpc_aclnt_flush(clnt) == 0);
	expect_done = NCALLS + 3;
	CHECK(loop_run(test_loop) == 0);
	for (unsigned i = 0; i < NCALLS; i++) {
		CHECKF(results[i].done && results[i].status == 0, "call %u: status %d", i, results[i].status);
		CHECKF(results[i].v1 == i * 3 + 1, "call %u: value %u", i, results[i].v1);
		CHECKF(results[i].v2 == expected_sum(i), "call %u: bulk bytes differ", i);
	}
	CHECKF(results[NCALLS].status == -ETIMEDOUT, "silent call: %d", results[NCALLS].status);
	CHECKF(results[NCALLS + 1].status == -EPROTO, "garbage call: %d", results[NCALLS + 1].status);
	struct rpc_aclnt_stats st;
	rpc_aclnt_get_stats(clnt, &st);
	CHECK(st.ras_stray == 1);
	CHECK(st.ras_timeouts == 1);
	CHECK(st.ras_replies == NCALLS + 1);
	CHECK(rpc_aclnt_in_flight(clnt) == 0);
}

/* The last call (started when the silent one timed out) made the server hang up. */
static void test_connection_closed(void)
{
	CHECK(results[NCALLS + 2].done && results[NCALLS + 2].status == -ECONNRESET);
	CHECK(rpc_aclnt_error(clnt) == -ECONNRESET);
	struct xdr_enc *enc;
	CHECK(rpc_aclnt_call_begin(clnt, 200000, 1, PROC_ECHO, 8, &enc) == -ECONNRESET);
}

static void test_refused(void)
{
	/* A port nobody listens on: the connect fails and queued calls fail with it. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	CHECK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
	close(fd); /* bound then closed: nothing listens there now */
	struct rpc_aclnt *c2;
	/* A loop runs once (loop_run after loop_stop returns at once): take a fresh one. */
	loop_destroy(test_loop);
	CHECK(loop_create(&test_loop) == 0);
	CHECK(rpc_aclnt_create(test_loop, "127.0.0.1", ntohs(sin.sin_port), NULL, &c2) == 0);
	done_count = 0;
	expect_done = 1;
	struct result r = {0};
	CHECK(issue(c2, PROC_ECHO, 1, NULL, 0, &r) == 0);
	CHECK(rpc_aclnt_flush(c2) == 0);
	CHECK(loop_run(test_loop) == 0);
	CHECKF(r.done && r.status == -ECONNREFUSED, "status %d", r.status);
	CHECK(rpc_aclnt_connected(c2) == false);
	rpc_aclnt_destroy(c2);
	CHECK(rpc_aclnt_create(test_loop, "not-an-address", 1, NULL, &c2) == -EINVAL);
}

int main(void)
{
	for (size_t i = 0; i < sizeof(bulk_src); i++)
		bulk_src[i] = (uint8_t)(i * 7 + 3);
	listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	if (bind(listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(listen_fd, 4) != 0 ||
	    getsockname(listen_fd, (struct sockaddr *)&sin, &len) != 0) {
		tap_check(false, "listen on loopback");
		return tap_finish();
	}
	listen_port = ntohs(sin.sin_port);
	pthread_t srv;
	pthread_create(&srv, NULL, server_main, NULL);
	if (loop_create(&test_loop) != 0) {
		tap_check(false, "loop_create");
		return tap_finish();
	}
	struct rpc_cred cred = {.rcr_flavor = RPC_AUTH_SYS, .rcr_uid = 1000, .rcr_gid = 1000};
	struct rpc_aclnt_config cfg = {.rac_max_calls = 64, .rac_timeout_ms = 300, .rac_cred = &cred};
	if (rpc_aclnt_create(test_loop, "127.0.0.1", listen_port, &cfg, &clnt) != 0) {
		tap_check(false, "rpc_aclnt_create");
		return tap_finish();
	}
	TAP_RUN(test_many_calls);
	TAP_RUN(test_connection_closed);
	rpc_aclnt_destroy(clnt);
	pthread_join(srv, NULL);
	TAP_RUN(test_refused);
	loop_destroy(test_loop);
	close(listen_fd);
	return tap_finish();
}
