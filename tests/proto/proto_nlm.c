/* proto_nlm.c: the lock manager over the wire: NLM v4 (and v1) and NSM, every procedure and the
 * statuses a client must see, with calls encoded here (rawrpc.h: none of the server's codecs).
 *
 * Three clients are played by this program: "alpha" from 127.0.0.1, "beta" from 127.0.0.2 and
 * "gamma" from 127.0.0.3 (all loopback). Each has a UDP socket of its own standing for its portmapper and its lock
 * manager, on one port number P at its own address; the server is told to find clients'
 * portmappers on P (SHALE_NLM_PORTMAP_PORT) instead of 111, answers GETPORT there with P itself,
 * and so sends its callbacks (GRANTED, the _RES calls) to the socket of the client whose request
 * made them, where this program reads and answers them as a kernel's lockd would. The last case
 * kills the server (kill -9) while two clients hold locks and follows the recovery: SM_NOTIFY to
 * each, the grace period, reclaims, and grace's early end. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rawrpc.h"
#include "tap.h"
#include "testserver.h"

#define NLM_PROG 100021u
#define NSM_PROG 100024u

enum { GRANTED = 0, DENIED = 1, DENIED_NOLOCKS = 2, BLOCKED = 3, GRACE = 4, STALE_FH = 7 };

static struct ts_server ts;
static uint8_t file_fh[64], file2_fh[64], other_fh[64];
static uint32_t file_fh_len, file2_fh_len, other_fh_len;
static uint32_t next_xid = 0x4e4c0001u;

/* ---------------------------------------------------------------------------------------------
 * A client: its request socket and its callback socket (portmapper and lock manager at once) */

struct client {
	const char *cl_name; /* caller_name */
	const char *cl_addr;
	int cl_req;          /* UDP, bound to cl_addr, connected to the server */
	int cl_cb;           /* UDP, bound to cl_addr:P */
	uint16_t cl_cb_port;
};

static struct client alpha = {.cl_name = "alpha", .cl_addr = "127.0.0.1"};
static struct client beta = {.cl_name = "beta", .cl_addr = "127.0.0.2"};
static struct client gamma_ = {.cl_name = "gamma", .cl_addr = "127.0.0.3"};
static uint32_t first_state; /* the server's NSM state, as SM_STAT told it at first */

static int udp_bound(const char *addr, uint16_t port, uint16_t *port_out)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, addr, &sin.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	socklen_t len = sizeof(sin);
	getsockname(fd, (struct sockaddr *)&sin, &len);
	if (port_out)
		*port_out = ntohs(sin.sin_port);
	return fd;
}

static int client_open(struct client *c, uint16_t cb_port)
{
	c->cl_cb = udp_bound(c->cl_addr, cb_port, &c->cl_cb_port);
	c->cl_req = udp_bound(c->cl_addr, 0, NULL);
	if (c->cl_cb < 0 || c->cl_req < 0)
		return -1;
	struct timeval tv = {.tv_sec = 10};
	setsockopt(c->cl_req, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return 0;
}

static int client_connect(struct client *c)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(ts.ts_port)};
	inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
	return connect(c->cl_req, (struct sockaddr *)&sin, sizeof(sin));
}

/* ---------------------------------------------------------------------------------------------
 * Encoding NLM arguments (XNFS, RFC 1813 appendix II) */

struct lk {
	uint32_t svid;
	const char *oh;
	uint64_t off, len;
	const uint8_t *fh;
	uint32_t fh_len;
};

static void put_lock(struct rr_buf *b, const struct client *c, uint32_t vers, const struct lk *l)
{
	rr_put_string(b, c->cl_name);
	rr_put_opaque(b, l->fh, l->fh_len);
	rr_put_string(b, l->oh);
	rr_put_u32(b, l->svid);
	if (vers == 4) {
		rr_put_u64(b, l->off);
		rr_put_u64(b, l->len);
	} else {
		rr_put_u32(b, (uint32_t)l->off);
		rr_put_u32(b, (uint32_t)l->len);
	}
}

/* One call from client c over its UDP socket; the reply's body is decoded by the caller from
 * *rec (freed by the caller). Returns the accept status, or -1. */
static int call(struct client *c, uint32_t prog, uint32_t vers, uint32_t proc,
                const struct rr_buf *args, struct rr_reply *rp, uint8_t **rec)
{
	struct rr_buf b;
	rr_buf_init(&b);
	uint32_t xid = next_xid++;
	rr_put_call(&b, xid, 2, prog, vers, proc, RR_CRED_SYS, 0, 0);
	if (args)
		rr_put_bytes(&b, args->rb_data, args->rb_len);
	int rc = rr_call(c->cl_req, false, &b, xid, rp, rec, 5000);
	rr_buf_fini(&b);
	if (rc != 0 || rp->rp_reply_stat != 0)
		return -1;
	return (int)rp->rp_accept_stat;
}

/* What a TEST said. */
struct test_res {
	int stat;
	uint32_t excl, svid;
	uint64_t off, len;
};

static int nlm_simple(struct client *c, uint32_t vers, uint32_t proc, const struct rr_buf *args,
                      const char *cookie, struct test_res *tr)
{
	struct rr_reply rp;
	uint8_t *rec = NULL;
	int st = -1;
	if (call(c, NLM_PROG, vers, proc, args, &rp, &rec) == 0) {
		uint32_t ck_len;
		const uint8_t *ck = rr_get_opaque(&rp.rp_body, 1024, &ck_len);
		st = (int)rr_get_u32(&rp.rp_body);
		if (!ck || ck_len != strlen(cookie) || memcmp(ck, cookie, ck_len) != 0)
			st = -2; /* the cookie must come back as sent */
		if (tr && st == DENIED) {
			tr->excl = rr_get_u32(&rp.rp_body);
			tr->svid = rr_get_u32(&rp.rp_body);
			uint32_t oh_len;
			(void)rr_get_opaque(&rp.rp_body, 1024, &oh_len);
			tr->off = vers == 4 ? rr_get_u64(&rp.rp_body) : rr_get_u32(&rp.rp_body);
			tr->len = vers == 4 ? rr_get_u64(&rp.rp_body) : rr_get_u32(&rp.rp_body);
		}
		if (rp.rp_body.rd_failed)
			st = -3;
	}
	free(rec);
	if (tr)
		tr->stat = st;
	return st;
}

static int nlm_test(struct client *c, uint32_t vers, bool excl, const struct lk *l,
                    struct test_res *tr)
{
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "ck-test");
	rr_put_u32(&a, excl);
	put_lock(&a, c, vers, l);
	int st = nlm_simple(c, vers, 1, &a, "ck-test", tr);
	rr_buf_fini(&a);
	return st;
}

static void put_lockargs(struct rr_buf *a, const struct client *c, uint32_t vers, bool block,
                         bool excl, const struct lk *l, bool reclaim, const char *cookie)
{
	rr_put_string(a, cookie);
	rr_put_u32(a, block);
	rr_put_u32(a, excl);
	put_lock(a, c, vers, l);
	rr_put_u32(a, reclaim);
	rr_put_u32(a, 3); /* the client's NSM state */
}

static int nlm_lock_ext(struct client *c, uint32_t vers, bool block, bool excl,
                        const struct lk *l, bool reclaim)
{
	struct rr_buf a;
	rr_buf_init(&a);
	put_lockargs(&a, c, vers, block, excl, l, reclaim, "ck-lock");
	int st = nlm_simple(c, vers, 2, &a, "ck-lock", NULL);
	rr_buf_fini(&a);
	return st;
}

static int nlm_lock(struct client *c, uint32_t vers, bool block, bool excl, const struct lk *l)
{
	return nlm_lock_ext(c, vers, block, excl, l, false);
}

static int nlm_unlock(struct client *c, uint32_t vers, const struct lk *l)
{
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "ck-unlock");
	put_lock(&a, c, vers, l);
	int st = nlm_simple(c, vers, 4, &a, "ck-unlock", NULL);
	rr_buf_fini(&a);
	return st;
}

static int nlm_cancel(struct client *c, bool excl, const struct lk *l)
{
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "ck-cancel");
	rr_put_u32(&a, 1);
	rr_put_u32(&a, excl);
	put_lock(&a, c, 4, l);
	int st = nlm_simple(c, 4, 3, &a, "ck-cancel", NULL);
	rr_buf_fini(&a);
	return st;
}

static int nlm_share(struct client *c, uint32_t proc, const char *oh, uint32_t mode,
                     uint32_t access)
{
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "ck-share");
	rr_put_string(&a, c->cl_name);
	rr_put_opaque(&a, file2_fh, file2_fh_len);
	rr_put_string(&a, oh);
	rr_put_u32(&a, mode);
	rr_put_u32(&a, access);
	rr_put_u32(&a, 0);
	int st = nlm_simple(c, 4, proc, &a, "ck-share", NULL);
	rr_buf_fini(&a);
	return st;
}

/* ---------------------------------------------------------------------------------------------
 * The client's side of callbacks */

struct seen {
	uint32_t prog;
	uint32_t proc;
	uint32_t vers;
	uint8_t args[2048];
	size_t args_len;
};

/* Serves the client's callback socket until one NLM call arrives (answering GETPORT on the
 * way), or timeout_ms pass. A GRANTED is answered with answer; other NLM calls with a void
 * result. Returns 1 with *s filled, 0 on timeout. */
static int cb_serve(struct client *c, int timeout_ms, uint32_t answer, struct seen *s)
{
	for (;;) {
		struct pollfd p = {.fd = c->cl_cb, .events = POLLIN};
		if (poll(&p, 1, timeout_ms) <= 0)
			return 0;
		uint8_t buf[4096];
		struct sockaddr_in from;
		socklen_t from_len = sizeof(from);
		ssize_t n = recvfrom(c->cl_cb, buf, sizeof(buf), 0, (struct sockaddr *)&from, &from_len);
		if (n <= 0)
			continue;
		struct rr_dec d;
		rr_dec_init(&d, buf, (size_t)n);
		uint32_t xid = rr_get_u32(&d), type = rr_get_u32(&d), rpcvers = rr_get_u32(&d);
		uint32_t prog = rr_get_u32(&d), vers = rr_get_u32(&d), proc = rr_get_u32(&d);
		uint32_t len;
		(void)rr_get_u32(&d);
		(void)rr_get_opaque(&d, 400, &len); /* credential */
		(void)rr_get_u32(&d);
		(void)rr_get_opaque(&d, 400, &len); /* verifier */
		if (d.rd_failed || type != 0 || rpcvers != 2)
			continue;
		struct rr_buf r;
		rr_buf_init(&r);
		rr_put_u32(&r, xid);
		rr_put_u32(&r, 1); /* REPLY */
		rr_put_u32(&r, 0); /* MSG_ACCEPTED */
		rr_put_u32(&r, 0);
		rr_put_u32(&r, 0); /* verifier AUTH_NONE */
		rr_put_u32(&r, 0); /* SUCCESS */
		bool nlm = prog == NLM_PROG || prog == NSM_PROG; /* a lock manager's, or SM_NOTIFY */
		if (prog == 100000u && proc == 3)
			rr_put_u32(&r, c->cl_cb_port); /* GETPORT: this very socket */
		if (prog == NLM_PROG && proc == 5) {
			uint32_t ck_len;
			const uint8_t *ck = rr_get_opaque(&d, 1024, &ck_len);
			rr_put_opaque(&r, ck, ck_len);
			rr_put_u32(&r, answer);
			rr_dec_init(&d, buf, (size_t)n); /* the args again, for the caller */
			rr_skip(&d, 24);
			(void)rr_get_u32(&d);
			(void)rr_get_opaque(&d, 400, &len);
			(void)rr_get_u32(&d);
			(void)rr_get_opaque(&d, 400, &len);
		}
		sendto(c->cl_cb, r.rb_data, r.rb_len, 0, (struct sockaddr *)&from, from_len);
		rr_buf_fini(&r);
		if (nlm) {
			s->prog = prog;
			s->proc = proc;
			s->vers = vers;
			s->args_len = d.rd_left < sizeof(s->args) ? d.rd_left : sizeof(s->args);
			memcpy(s->args, d.rd_pos, s->args_len);
			return 1;
		}
	}
}

/* A GRANTED's arguments: cookie, exclusive, the lock. Checks the lock is l of client c. */
static bool granted_is(const struct seen *s, const struct client *c, bool excl, const struct lk *l)
{
	struct rr_dec d;
	rr_dec_init(&d, s->args, s->args_len);
	uint32_t n;
	(void)rr_get_opaque(&d, 1024, &n); /* cookie */
	uint32_t ex = rr_get_u32(&d);
	const uint8_t *name = rr_get_opaque(&d, 1024, &n);
	bool ok = name && n == strlen(c->cl_name) && memcmp(name, c->cl_name, n) == 0;
	const uint8_t *fh = rr_get_opaque(&d, 64, &n);
	ok = ok && fh && n == l->fh_len && memcmp(fh, l->fh, n) == 0;
	const uint8_t *oh = rr_get_opaque(&d, 1024, &n);
	ok = ok && oh && n == strlen(l->oh) && memcmp(oh, l->oh, n) == 0;
	uint32_t svid = rr_get_u32(&d);
	uint64_t off = rr_get_u64(&d), len = rr_get_u64(&d);
	return ok && !d.rd_failed && ex == excl && svid == l->svid && off == l->off && len == l->len;
}

/* ---------------------------------------------------------------------------------------------
 * Cases */

static void test_null_and_stat(void)
{
	struct rr_reply rp;
	uint8_t *rec = NULL;
	for (uint32_t v = 1; v <= 4; v++) {
		if (v == 2)
			continue; /* NLM has no version 2 */
		CHECKF(call(&alpha, NLM_PROG, v, 0, NULL, &rp, NULL) == 0, "NLM v%u NULL", v);
	}
	CHECK(call(&alpha, NSM_PROG, 1, 0, NULL, &rp, NULL) == 0);
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "alpha");
	CHECK(call(&alpha, NSM_PROG, 1, 1, &a, &rp, &rec) == 0);
	uint32_t res = rr_get_u32(&rp.rp_body), state = rr_get_u32(&rp.rp_body);
	CHECKF(res == 0 && state % 2 == 1, "SM_STAT: res %u state %u", res, state);
	first_state = state;
	free(rec);
	rr_buf_fini(&a);
}

static void test_lock_test_unlock(void)
{
	struct lk a1 = {.svid = 11, .oh = "alpha-11", .off = 0, .len = 100, .fh = file_fh,
	                .fh_len = file_fh_len};
	struct lk b1 = {.svid = 21, .oh = "beta-21", .off = 50, .len = 1, .fh = file_fh,
	                .fh_len = file_fh_len};
	struct test_res tr;
	CHECK(nlm_test(&alpha, 4, true, &a1, &tr) == GRANTED);
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	/* the holder told is alpha's lock: exclusive, its svid, 0 for 100 */
	CHECK(nlm_test(&beta, 4, false, &b1, &tr) == DENIED);
	CHECKF(tr.excl == 1 && tr.svid == 11 && tr.off == 0 && tr.len == 100,
	       "holder %u %u %llu %llu", tr.excl, tr.svid, (unsigned long long)tr.off,
	       (unsigned long long)tr.len);
	CHECK(nlm_lock(&beta, 4, false, false, &b1) == DENIED);
	/* a different svid of the same client is another owner */
	struct lk a2 = a1;
	a2.svid = 12;
	a2.oh = "alpha-12";
	CHECK(nlm_lock(&alpha, 4, false, false, &a2) == DENIED);
	/* the same owner upgrades and downgrades its own range freely */
	CHECK(nlm_lock(&alpha, 4, false, false, &a1) == GRANTED);
	CHECK(nlm_lock(&beta, 4, false, false, &b1) == GRANTED); /* shared with shared */
	CHECK(nlm_unlock(&beta, 4, &b1) == GRANTED);
	/* version 1, 32-bit offsets, sees the same lock */
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	CHECK(nlm_test(&beta, 1, true, &b1, &tr) == DENIED && tr.svid == 11 && tr.len == 100);
	/* past 4 GiB and to the end of the file (len 0) */
	struct lk far = {.svid = 11, .oh = "alpha-11", .off = 5ull << 30, .len = 0, .fh = file_fh,
	                 .fh_len = file_fh_len};
	CHECK(nlm_lock(&alpha, 4, false, true, &far) == GRANTED);
	struct lk probe = b1;
	probe.off = UINT64_MAX - 10;
	probe.len = 5;
	CHECK(nlm_test(&beta, 4, false, &probe, &tr) == DENIED && tr.off == 5ull << 30 &&
	      tr.len == 0);
	CHECK(nlm_unlock(&alpha, 4, &far) == GRANTED);
	CHECK(nlm_test(&beta, 4, false, &probe, &tr) == GRANTED);
	CHECK(nlm_unlock(&alpha, 4, &a1) == GRANTED);
	CHECK(nlm_test(&beta, 4, true, &a1, &tr) == GRANTED);
	/* a handle that is not the server's */
	struct lk bad = a1;
	uint8_t junk[32] = {1, 2, 3};
	bad.fh = junk;
	bad.fh_len = sizeof(junk);
	CHECK(nlm_lock(&alpha, 4, false, true, &bad) == STALE_FH);
	CHECK(nlm_lock(&alpha, 1, false, true, &bad) == DENIED_NOLOCKS); /* v1 says it so */
}

static void test_blocking_and_grant(void)
{
	struct lk a1 = {.svid = 31, .oh = "alpha-31", .off = 1000, .len = 10, .fh = file_fh,
	                .fh_len = file_fh_len};
	struct lk b1 = {.svid = 41, .oh = "beta-41", .off = 1005, .len = 10, .fh = file_fh,
	                .fh_len = file_fh_len};
	struct seen s;
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	CHECK(nlm_lock(&beta, 4, true, true, &b1) == BLOCKED);
	CHECK(nlm_lock(&beta, 4, true, true, &b1) == BLOCKED); /* asked again: still one waiter */
	CHECK(cb_serve(&beta, 300, GRANTED, &s) == 0);       /* nothing yet */
	CHECK(nlm_unlock(&alpha, 4, &a1) == GRANTED);
	CHECK(cb_serve(&beta, 5000, GRANTED, &s) == 1 && s.proc == 5 && s.vers == 4);
	CHECK(granted_is(&s, &beta, true, &b1));
	CHECK(cb_serve(&beta, 500, GRANTED, &s) == 0); /* one waiter, one GRANTED */
	/* beta holds it now */
	struct test_res tr;
	CHECK(nlm_test(&alpha, 4, false, &a1, &tr) == DENIED && tr.svid == 41);

	/* a grant the client refuses is withdrawn */
	CHECK(nlm_lock(&alpha, 4, true, false, &a1) == BLOCKED);
	CHECK(nlm_unlock(&beta, 4, &b1) == GRANTED);
	CHECK(cb_serve(&alpha, 5000, DENIED, &s) == 1 && granted_is(&s, &alpha, false, &a1));
	bool freed = false;
	for (int i = 0; i < 50 && !freed; i++) {
		freed = nlm_test(&beta, 4, true, &b1, &tr) == GRANTED;
		if (!freed)
			usleep(20000);
	}
	CHECK(freed);

	/* a cancelled waiter is never granted */
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	CHECK(nlm_lock(&beta, 4, true, true, &b1) == BLOCKED);
	CHECK(nlm_cancel(&beta, true, &b1) == GRANTED);
	CHECK(nlm_unlock(&alpha, 4, &a1) == GRANTED);
	CHECK(cb_serve(&beta, 700, GRANTED, &s) == 0);
	CHECK(nlm_test(&alpha, 4, true, &b1, &tr) == GRANTED);
}

static void test_msg_forms(void)
{
	struct lk a1 = {.svid = 51, .oh = "alpha-51", .off = 0, .len = 10, .fh = file2_fh,
	                .fh_len = file2_fh_len};
	struct rr_buf a;
	rr_buf_init(&a);
	put_lockargs(&a, &alpha, 4, false, true, &a1, false, "ck-msg");
	struct rr_reply rp;
	/* LOCK_MSG: a void reply, then LOCK_RES to the client's lock manager */
	CHECK(call(&alpha, NLM_PROG, 4, 7, &a, &rp, NULL) == 0);
	struct seen s;
	CHECK(cb_serve(&alpha, 5000, GRANTED, &s) == 1 && s.proc == 12);
	struct rr_dec d;
	rr_dec_init(&d, s.args, s.args_len);
	uint32_t n;
	const uint8_t *ck = rr_get_opaque(&d, 1024, &n);
	CHECK(ck && n == 6 && memcmp(ck, "ck-msg", 6) == 0 && rr_get_u32(&d) == GRANTED);
	rr_buf_fini(&a);
	/* TEST_MSG from beta: TEST_RES with the holder */
	rr_buf_init(&a);
	rr_put_string(&a, "ck-tmsg");
	rr_put_u32(&a, 1);
	struct lk b1 = {.svid = 61, .oh = "beta-61", .off = 5, .len = 1, .fh = file2_fh,
	                .fh_len = file2_fh_len};
	put_lock(&a, &beta, 4, &b1);
	CHECK(call(&beta, NLM_PROG, 4, 6, &a, &rp, NULL) == 0);
	CHECK(cb_serve(&beta, 5000, GRANTED, &s) == 1 && s.proc == 11);
	rr_dec_init(&d, s.args, s.args_len);
	(void)rr_get_opaque(&d, 1024, &n);
	uint32_t st = rr_get_u32(&d), ex = rr_get_u32(&d), svid = rr_get_u32(&d);
	CHECKF(st == DENIED && ex == 1 && svid == 51, "TEST_RES %u %u %u", st, ex, svid);
	rr_buf_fini(&a);
	CHECK(nlm_unlock(&alpha, 4, &a1) == GRANTED);
}

static void test_share(void)
{
	/* alpha reads and denies writes; beta may read, not write */
	CHECK(nlm_share(&alpha, 20, "alpha-sh", 2 /* fsm_DW */, 1 /* fsa_R */) == GRANTED);
	CHECK(nlm_share(&beta, 20, "beta-sh", 0, 3 /* fsa_RW */) == DENIED);
	CHECK(nlm_share(&beta, 20, "beta-sh", 0, 1) == GRANTED);
	CHECK(nlm_share(&beta, 21, "beta-sh", 0, 0) == GRANTED); /* UNSHARE */
	CHECK(nlm_share(&alpha, 21, "alpha-sh", 0, 0) == GRANTED);
	CHECK(nlm_share(&beta, 20, "beta-sh", 3, 3) == GRANTED);
	CHECK(nlm_share(&beta, 21, "beta-sh", 0, 0) == GRANTED);
}

static void test_free_all_and_notify(void)
{
	struct lk a1 = {.svid = 71, .oh = "alpha-71", .off = 0, .len = 0, .fh = file2_fh,
	                .fh_len = file2_fh_len};
	struct lk b1 = {.svid = 81, .oh = "beta-81", .off = 0, .len = 0, .fh = file2_fh,
	                .fh_len = file2_fh_len};
	struct test_res tr;
	struct seen s;
	/* FREE_ALL from alpha: its locks go, beta's blocked request is granted */
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	CHECK(nlm_lock(&beta, 4, true, true, &b1) == BLOCKED);
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "alpha");
	rr_put_u32(&a, 5);
	struct rr_reply rp;
	CHECK(call(&alpha, NLM_PROG, 4, 23, &a, &rp, NULL) == 0);
	rr_buf_fini(&a);
	CHECK(cb_serve(&beta, 5000, GRANTED, &s) == 1 && granted_is(&s, &beta, true, &b1));
	/* beta reboots: its SM_NOTIFY (from its own address) frees what it held */
	CHECK(nlm_test(&alpha, 4, false, &a1, &tr) == DENIED && tr.svid == 81);
	rr_buf_init(&a);
	rr_put_string(&a, "beta");
	rr_put_u32(&a, 7);
	CHECK(call(&beta, NSM_PROG, 1, 6, &a, &rp, NULL) == 0);
	rr_buf_fini(&a);
	CHECK(nlm_test(&alpha, 4, true, &a1, &tr) == GRANTED);
}

/* Rewrites the server's exports file (keeping its first `keep` lines) and makes it reload. */
static int reexport(const char *saved, unsigned keep)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/exports", ts.ts_root);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	const char *p = saved;
	for (unsigned i = 0; i < keep && *p; i++) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
		fwrite(p, 1, n, f);
		p += n;
	}
	if (fclose(f) != 0)
		return -1;
	return kill(ts.ts_pid, SIGHUP);
}

/* Waits up to 5 s for beta's TEST of the other export's file to say stale (want_stale) or not. */
static int test_other_until(bool want_stale)
{
	struct lk o = {.svid = 111, .oh = "beta-111", .off = 0, .len = 1, .fh = other_fh,
	               .fh_len = other_fh_len};
	struct test_res tr;
	int st = -1;
	for (int i = 0; i < 100; i++) {
		st = nlm_test(&beta, 4, true, &o, &tr);
		if ((st == STALE_FH) == want_stale)
			return st;
		usleep(50000);
	}
	return st;
}

/* An export removed by a reload takes its locks with it: back again, the file is free. */
static void test_export_removal(void)
{
	struct lk a1 = {.svid = 110, .oh = "alpha-110", .off = 0, .len = 0, .fh = other_fh,
	                .fh_len = other_fh_len};
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	CHECK(test_other_until(false) == DENIED);
	char path[512], saved[2048] = "";
	snprintf(path, sizeof(path), "%s/exports", ts.ts_root);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(saved, 1, sizeof(saved) - 1, f) : 0;
	if (f)
		fclose(f);
	saved[n] = '\0';
	CHECK(n > 0 && reexport(saved, 1) == 0);
	CHECK(test_other_until(true) == STALE_FH); /* the export is gone */
	CHECK(reexport(saved, 2) == 0);
	CHECK(test_other_until(false) == GRANTED); /* back, and alpha's lock went with it */
}

/* SM_NOTIFY on client c's callback socket: the server's name and a state above the first. */
static bool notified(struct client *c)
{
	struct seen s;
	if (cb_serve(c, 8000, GRANTED, &s) != 1 || s.prog != NSM_PROG || s.proc != 6)
		return false;
	struct rr_dec d;
	rr_dec_init(&d, s.args, s.args_len);
	uint32_t n;
	const uint8_t *name = rr_get_opaque(&d, 1024, &n);
	uint32_t state = rr_get_u32(&d);
	printf("# %s notified: state %u (was %u)\n", c->cl_name, state, first_state);
	return name && n == 9 && memcmp(name, "127.0.0.1", 9) == 0 && state > first_state &&
	       state % 2 == 1;
}

/* kill -9 while alpha and beta hold locks: both are notified; in grace only they reclaim, new
 * locks wait; grace ends once both have sent a request that is no reclaim, and alpha's reclaimed
 * lock still refuses beta. */
static void test_recovery(void)
{
	struct lk a1 = {.svid = 91, .oh = "alpha-91", .off = 0, .len = 10, .fh = file_fh,
	                .fh_len = file_fh_len};
	struct lk b1 = {.svid = 92, .oh = "beta-92", .off = 0, .len = 10, .fh = file2_fh,
	                .fh_len = file2_fh_len};
	struct lk b_on_a = {.svid = 92, .oh = "beta-92", .off = 5, .len = 1, .fh = file_fh,
	                    .fh_len = file_fh_len};
	struct lk g1 = {.svid = 93, .oh = "gamma-93", .off = 100, .len = 1, .fh = file_fh,
	                .fh_len = file_fh_len};
	struct test_res tr;
	CHECK(nlm_lock(&alpha, 4, false, true, &a1) == GRANTED);
	CHECK(nlm_lock(&beta, 4, false, true, &b1) == GRANTED);
	static const char *const grace[] = {"--grace", "60", NULL};
	ts_set_extra_args(grace);
	if (!tap_check(ts_restart(&ts, true) == 0, "the server starts again after kill -9"))
		return;
	CHECK(client_connect(&alpha) == 0 && client_connect(&beta) == 0 &&
	      client_connect(&gamma_) == 0);
	CHECK(notified(&alpha));
	CHECK(notified(&beta));
	/* grace: new locks and TESTs wait; a client that held nothing may not reclaim */
	CHECK(nlm_lock(&gamma_, 4, false, true, &g1) == GRACE);
	CHECK(nlm_lock_ext(&gamma_, 4, false, true, &g1, true) == DENIED);
	CHECK(nlm_test(&gamma_, 4, true, &g1, &tr) == GRACE);
	/* the clients of the last run reclaim theirs */
	CHECK(nlm_lock_ext(&alpha, 4, false, true, &a1, true) == GRANTED);
	CHECK(nlm_lock_ext(&beta, 4, false, true, &b1, true) == GRANTED);
	/* alpha is done reclaiming; beta not yet: still grace */
	CHECK(nlm_test(&alpha, 4, true, &b1, &tr) == GRACE);
	/* beta's first request that is no reclaim ends grace, and alpha's lock refuses it */
	CHECK(nlm_lock(&beta, 4, false, true, &b_on_a) == DENIED);
	CHECK(nlm_lock(&gamma_, 4, false, true, &g1) == GRANTED);
	CHECK(nlm_test(&gamma_, 4, true, &b1, &tr) == DENIED && tr.svid == 92);
	/* a reclaim after grace is refused as knfsd does */
	CHECK(nlm_lock_ext(&alpha, 4, false, true, &a1, true) == GRACE);
	CHECK(nlm_unlock(&alpha, 4, &a1) == GRANTED && nlm_unlock(&beta, 4, &b1) == GRANTED &&
	      nlm_unlock(&gamma_, 4, &g1) == GRANTED);
}

/* A server that lets a client hold 8 records: past them NLM4_DENIED_NOLOCKS, blocked requests
 * count, another client is not touched, and the server goes on. */
static void test_bounds(void)
{
	static const char *const bound[] = {"--client-locks", "8", "--grace", "1", NULL};
	ts_set_extra_args(bound);
	if (!tap_check(ts_restart(&ts, false) == 0, "the server starts again with --client-locks 8"))
		return;
	CHECK(client_connect(&alpha) == 0 && client_connect(&beta) == 0);
	usleep(1500000); /* the clients of the run before had their grace */
	struct lk l = {.svid = 100, .oh = "alpha-100", .len = 1, .fh = file_fh,
	               .fh_len = file_fh_len};
	for (unsigned i = 0; i < 8; i++) {
		l.off = i * 10;
		CHECKF(nlm_lock(&alpha, 4, false, true, &l) == GRANTED, "lock %u", i);
	}
	l.off = 100;
	CHECK(nlm_lock(&alpha, 4, false, true, &l) == DENIED_NOLOCKS);
	l.off = 0;
	CHECK(nlm_lock(&alpha, 4, false, true, &l) == GRANTED); /* one it holds: no new record */
	/* a flood of blocked requests from beta behind alpha's lock: 8 wait, the rest are refused */
	struct lk b = {.oh = "beta-flood", .off = 0, .len = 1, .fh = file_fh, .fh_len = file_fh_len};
	unsigned blocked = 0, nolocks = 0;
	for (unsigned i = 0; i < 20; i++) {
		b.svid = 200 + i;
		int st = nlm_lock(&beta, 4, true, true, &b);
		blocked += st == BLOCKED;
		nolocks += st == DENIED_NOLOCKS;
	}
	CHECKF(blocked == 8 && nolocks == 12, "%u blocked, %u refused", blocked, nolocks);
	struct lk g = {.svid = 300, .oh = "gamma-300", .off = 1000, .len = 1, .fh = file_fh,
	               .fh_len = file_fh_len};
	CHECK(client_connect(&gamma_) == 0 && nlm_lock(&gamma_, 4, false, true, &g) == GRANTED);
	/* alpha frees all: beta's first waiter is granted (a callback), the server goes on */
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "alpha");
	rr_put_u32(&a, 5);
	struct rr_reply rp;
	CHECK(call(&alpha, NLM_PROG, 4, 23, &a, &rp, NULL) == 0);
	rr_buf_fini(&a);
	struct seen s;
	int got;
	do /* the restart's SM_NOTIFY may come first */
		got = cb_serve(&beta, 5000, GRANTED, &s);
	while (got == 1 && s.prog == NSM_PROG);
	CHECK(got == 1 && s.prog == NLM_PROG && s.proc == 5);
	CHECK(ts_alive(&ts));
}

static void test_garbage(void)
{
	struct rr_reply rp;
	struct rr_buf a;
	rr_buf_init(&a);
	rr_put_string(&a, "ck");
	rr_put_u32(&a, 7); /* a bool of 7 */
	CHECK(call(&alpha, NLM_PROG, 4, 1, &a, &rp, NULL) == 4 /* GARBAGE_ARGS */);
	rr_buf_fini(&a);
	rr_buf_init(&a);
	rr_put_u32(&a, 5000); /* a cookie longer than the bound */
	CHECK(call(&alpha, NLM_PROG, 4, 2, &a, &rp, NULL) == 4);
	rr_buf_fini(&a);
	CHECK(call(&alpha, NLM_PROG, 4, 17, NULL, &rp, NULL) == 3 /* PROC_UNAVAIL */);
	CHECK(call(&alpha, NLM_PROG, 2, 0, NULL, &rp, NULL) == 2 /* PROG_MISMATCH */);
	CHECK(ts_alive(&ts));
}

int main(void)
{
	if (client_open(&alpha, 0) != 0 || client_open(&beta, alpha.cl_cb_port) != 0 ||
	    client_open(&gamma_, alpha.cl_cb_port) != 0) {
		printf("# cannot bind the clients' sockets on 127.0.0.1, .2 and .3\n");
		tap_check(false, "clients");
		return tap_finish();
	}
	char port[16];
	snprintf(port, sizeof(port), "%u", alpha.cl_cb_port);
	setenv("SHALE_NLM_PORTMAP_PORT", port, 1);
	static const char *const lines[] = {"%s *(rw,insecure,no_root_squash)",
	                                    "%s *(rw,insecure,no_root_squash)"};
	if (ts_start(&ts, lines, 2) != 0)
		return tap_finish();
	uint8_t root[64], root1[64];
	uint32_t root_len = 0, root1_len = 0;
	bool ready = rr_mount(ts.ts_port, ts.ts_export_path[0], root, &root_len) == 0 &&
	             rr_nfs_make(ts.ts_port, root, root_len, "locked", "x", 0666, file_fh,
	                         &file_fh_len) == 0 &&
	             rr_nfs_make(ts.ts_port, root, root_len, "shared", "y", 0666, file2_fh,
	                         &file2_fh_len) == 0 &&
	             rr_mount(ts.ts_port, ts.ts_export_path[1], root1, &root1_len) == 0 &&
	             rr_nfs_make(ts.ts_port, root1, root1_len, "other", "z", 0666, other_fh,
	                         &other_fh_len) == 0 &&
	             client_connect(&alpha) == 0 && client_connect(&beta) == 0;
	if (tap_check(ready, "mount, three files in two exports, two clients")) {
		TAP_RUN(test_null_and_stat);
		TAP_RUN(test_lock_test_unlock);
		TAP_RUN(test_blocking_and_grant);
		TAP_RUN(test_msg_forms);
		TAP_RUN(test_share);
		TAP_RUN(test_free_all_and_notify);
		TAP_RUN(test_garbage);
		TAP_RUN(test_export_removal);
		TAP_RUN(test_recovery);
		TAP_RUN(test_bounds);
	}
	if (tap_failed_count)
		ts_dump_log(&ts, 30);
	tap_check(ts_stop(&ts) == 0, "server stops cleanly");
	return tap_finish();
}
