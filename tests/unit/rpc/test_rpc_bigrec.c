/* test_rpc_bigrec.c: large call records through an in-process rpc_server (one loop): records
 * larger than the loop's read scratch, read straight into the loop's pool of record-sized
 * buffers (rpc_record.c rule 4) or, once the pool's RPC_POOL_BUFS buffers are all held by calls
 * in flight, grown on the heap. Many such records pipelined on one connection and sent over
 * several connections at once, multi-fragment records, a connection closed mid-record and one
 * closed while its calls hold pool buffers, and a per-connection limit below the record limit.
 * Every payload is hashed by the client and by the server when it replies, so a buffer reused or
 * overwritten while its call is in flight shows. That every pool buffer comes back is checked by
 * later rounds getting all of them again, and at exit by LeakSanitizer (a buffer never returned
 * is never freed). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/rpc_impl.h"
#include "tap.h"

#define BIG_PROG 0x20005b16u
#define BIG_VERS 1u
#define TIMEOUT_MS 10000
#define POOL_BUFS 8u /* RPC_POOL_BUFS in rpc_server.c */
#define PAYLOAD_MAX (1u << 20)
#define HASH_SEED 0x5eedull

enum { BIG_NULL, BIG_SUM, BIG_RELEASE };

/* ---- the server's program (runs on the server's single loop thread) ----
 * SUM(opaque data<PAYLOAD_MAX>, u32 hold): replies (len, hash high, hash low, pooled), the hash
 *   taken when replying. hold != 0 parks the call until a RELEASE lets it go.
 * RELEASE(u32 n): waits until at least n SUM calls are parked, replies to them all, then
 *   replies (released, how many of their records were pooled, how many were on the heap). */
#define PARK_MAX 64
struct parked {
	struct rpc_call *pk_call;
	const uint8_t *pk_data;
	uint32_t pk_len;
};
static struct parked park[PARK_MAX];
static unsigned nparked;
static struct rpc_call *releaser;
static uint32_t release_want;

/* The record came from the loop's large-record pool (small records have a pool of their own). */
static bool large_pooled(const struct rpc_call *call)
{
	return call->rc_record_pool && call->rc_record_pool->bp_buf_bytes > RPC_RM_POOL_MIN;
}

static void sum_reply(struct rpc_call *call, const uint8_t *data, uint32_t len)
{
	uint64_t h = sh_hash64(data, len, HASH_SEED);
	if (rpc_call_res_init(call, 16) < 0) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&call->rc_res, len);
	xdr_put_u32(&call->rc_res, (uint32_t)(h >> 32));
	xdr_put_u32(&call->rc_res, (uint32_t)h);
	xdr_put_u32(&call->rc_res, large_pooled(call) ? 1u : 0u);
	rpc_reply_success(call);
}

static void release_all(void)
{
	struct rpc_call *rel = releaser;
	releaser = NULL;
	uint32_t pooled = 0, heap = 0, n = nparked;
	for (unsigned i = 0; i < n; i++) {
		if (large_pooled(park[i].pk_call))
			pooled++;
		else
			heap++;
	}
	nparked = 0;
	for (unsigned i = 0; i < n; i++)
		sum_reply(park[i].pk_call, park[i].pk_data, park[i].pk_len);
	if (rpc_call_res_init(rel, 12) < 0) {
		rpc_reply_accept_error(rel, RPC_SYSTEM_ERR);
		return;
	}
	xdr_put_u32(&rel->rc_res, n);
	xdr_put_u32(&rel->rc_res, pooled);
	xdr_put_u32(&rel->rc_res, heap);
	rpc_reply_success(rel);
}

static void big_null(struct rpc_call *call)
{
	rpc_reply_success(call);
}

static void big_sum(struct rpc_call *call)
{
	uint32_t len;
	const uint8_t *data = xdr_get_opaque(&call->rc_args, PAYLOAD_MAX, &len);
	uint32_t hold = xdr_get_u32(&call->rc_args);
	if (!xdr_dec_ok(&call->rc_args) || xdr_dec_remaining(&call->rc_args) != 0) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	if (!hold) {
		sum_reply(call, data, len);
		return;
	}
	if (nparked == PARK_MAX) {
		rpc_reply_accept_error(call, RPC_SYSTEM_ERR);
		return;
	}
	park[nparked++] = (struct parked){call, data, len};
	if (releaser && nparked >= release_want)
		release_all();
}

static void big_release(struct rpc_call *call)
{
	uint32_t n = xdr_get_u32(&call->rc_args);
	if (!xdr_dec_ok(&call->rc_args) || releaser) {
		rpc_reply_accept_error(call, RPC_GARBAGE_ARGS);
		return;
	}
	releaser = call;
	release_want = n;
	if (nparked >= n)
		release_all();
}

static const struct rpc_proc_desc big_procs[] = {
    [BIG_NULL] = {"NULL", big_null, false},
    [BIG_SUM] = {"SUM", big_sum, false},
    [BIG_RELEASE] = {"RELEASE", big_release, false},
};
static const struct rpc_version_desc big_versions[] = {
    {BIG_VERS, big_procs, SH_ARRAY_SIZE(big_procs)}};
static const struct rpc_program_desc big_program = {"big", BIG_PROG, big_versions, 1};

static struct rpc_server *srv;
static uint16_t srv_port;

/* ---- client side ---- */

static uint32_t get_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int raw_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(srv_port)};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* Reads exactly len bytes; false on EOF, error or timeout. */
static bool recv_all(int fd, uint8_t *p, size_t n)
{
	while (n > 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, TIMEOUT_MS) <= 0)
			return false;
		ssize_t r = recv(fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

/* A deterministic payload for xid. */
static void payload_fill(uint8_t *p, size_t len, uint32_t xid)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (xid + 1u);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
}

/* One call as the client built it: the record body (no fragment headers) and what the reply
 * must say. */
struct big_call {
	uint32_t bc_xid;
	uint32_t bc_len;
	uint64_t bc_hash;
	uint8_t *bc_rec;
	size_t bc_rec_len;
	bool bc_replied;
	bool bc_ok;
	bool bc_pooled;
};

static void call_build_sum(struct big_call *bc, uint32_t xid, uint32_t len, bool hold)
{
	uint8_t *payload = mem_alloc(len ? len : 1);
	VERIFY(payload);
	payload_fill(payload, len, xid);
	bc->bc_xid = xid;
	bc->bc_len = len;
	bc->bc_hash = sh_hash64(payload, len, HASH_SEED);
	size_t cap = 128 + xdr_padded_len(len);
	bc->bc_rec = mem_alloc(cap);
	VERIFY(bc->bc_rec);
	struct xdr_enc enc;
	xdr_enc_init(&enc, bc->bc_rec, cap);
	rpc_msg_put_call(&enc, xid, BIG_PROG, BIG_VERS, BIG_SUM, NULL);
	xdr_put_opaque(&enc, payload, len);
	xdr_put_u32(&enc, hold ? 1u : 0u);
	VERIFY(xdr_enc_ok(&enc));
	bc->bc_rec_len = xdr_enc_len(&enc);
	bc->bc_replied = bc->bc_ok = bc->bc_pooled = false;
	mem_free(payload);
}

static void call_free(struct big_call *bc)
{
	mem_free(bc->bc_rec);
	bc->bc_rec = NULL;
}

/* Sends rec as fragments of the given sizes (the last one takes what is left; NULL: one
 * fragment), each write at most chunk bytes, so that headers and bodies split across the
 * server's reads. */
static bool send_record(int fd, const uint8_t *rec, size_t len, const uint32_t *frags,
                        size_t nfrags, size_t chunk)
{
	size_t off = 0;
	for (size_t f = 0; off < len || f == 0; f++) {
		bool last = frags == NULL || f + 1 >= nfrags;
		size_t flen = last ? len - off : SH_MIN((size_t)frags[f], len - off);
		uint8_t hdr[4];
		xdr_store_u32(hdr, (last ? RPC_RM_LAST : 0u) | (uint32_t)flen);
		if (!send_all(fd, hdr, 4))
			return false;
		for (size_t done = 0; done < flen;) {
			size_t n = SH_MIN(chunk, flen - done);
			if (!send_all(fd, rec + off + done, n))
				return false;
			done += n;
		}
		off += flen;
		if (last)
			break;
	}
	return true;
}

/* Reads one reply record; matches it to calls[] by xid and checks it. Returns the xid, or 0
 * on a transport failure. */
static uint32_t read_sum_reply(int fd, struct big_call *calls, size_t ncalls)
{
	uint8_t hdr[4], body[64];
	if (!recv_all(fd, hdr, 4))
		return 0;
	uint32_t len = get_be32(hdr) & RPC_RM_LEN_MASK;
	if (!(get_be32(hdr) & RPC_RM_LAST) || len > sizeof(body) || !recv_all(fd, body, len))
		return 0;
	uint32_t xid = get_be32(body);
	for (size_t i = 0; i < ncalls; i++) {
		struct big_call *bc = &calls[i];
		if (bc->bc_xid != xid)
			continue;
		bool ok = len == 24 + 16 && get_be32(body + 20) == RPC_SUCCESS &&
		          get_be32(body + 24) == bc->bc_len &&
		          get_be32(body + 28) == (uint32_t)(bc->bc_hash >> 32) &&
		          get_be32(body + 32) == (uint32_t)bc->bc_hash;
		bc->bc_ok = ok && !bc->bc_replied;
		bc->bc_replied = true;
		bc->bc_pooled = len >= 40 && get_be32(body + 36) == 1;
		return xid;
	}
	printf("#   reply with unexpected xid %u\n", xid);
	return 0;
}

/* Sends RELEASE(n) on fd and reads its reply (after any SUM replies that precede it on fd,
 * which are matched against calls[]). Returns false on failure. */
static bool release(int fd, uint32_t xid, uint32_t n, struct big_call *calls, size_t ncalls,
                    uint32_t *released, uint32_t *pooled, uint32_t *heap)
{
	uint8_t rec[128];
	struct xdr_enc enc;
	xdr_enc_init(&enc, rec, sizeof(rec));
	rpc_msg_put_call(&enc, xid, BIG_PROG, BIG_VERS, BIG_RELEASE, NULL);
	xdr_put_u32(&enc, n);
	if (!send_record(fd, rec, xdr_enc_len(&enc), NULL, 0, sizeof(rec)))
		return false;
	for (;;) {
		uint8_t hdr[4], body[64];
		if (!recv_all(fd, hdr, 4))
			return false;
		uint32_t len = get_be32(hdr) & RPC_RM_LEN_MASK;
		if (len > sizeof(body) || !recv_all(fd, body, len))
			return false;
		if (get_be32(body) != xid) {
			/* A SUM reply on the same connection: check it as read_sum_reply would. */
			bool matched = false;
			for (size_t i = 0; i < ncalls; i++) {
				struct big_call *bc = &calls[i];
				if (bc->bc_xid != get_be32(body))
					continue;
				matched = true;
				bc->bc_ok = !bc->bc_replied && len == 40 &&
				            get_be32(body + 20) == RPC_SUCCESS &&
				            get_be32(body + 24) == bc->bc_len &&
				            get_be32(body + 28) == (uint32_t)(bc->bc_hash >> 32) &&
				            get_be32(body + 32) == (uint32_t)bc->bc_hash;
				bc->bc_replied = true;
				bc->bc_pooled = len == 40 && get_be32(body + 36) == 1;
			}
			if (!matched)
				return false;
			continue;
		}
		if (len != 24 + 12 || get_be32(body + 20) != RPC_SUCCESS)
			return false;
		*released = get_be32(body + 24);
		*pooled = get_be32(body + 28);
		*heap = get_be32(body + 32);
		return true;
	}
}

static size_t count_ok(const struct big_call *calls, size_t n)
{
	size_t ok = 0;
	for (size_t i = 0; i < n; i++)
		ok += calls[i].bc_replied && calls[i].bc_ok ? 1 : 0;
	return ok;
}

static uint32_t next_xid = 1000;

/* ---- cases ---- */

/* Records below, at and above the 64 KiB read scratch and the pool threshold, pipelined on one
 * connection with small calls between them and answered at once: each reply carries the hash
 * of exactly what was sent; those past the threshold were received into pool buffers. */
static void bigrec_pipelined_immediate(void)
{
	const uint32_t sizes[] = {100,         40000,  65536, 65537,           100001, 3,
	                          PAYLOAD_MAX, 300000, 7,     PAYLOAD_MAX - 1, 70000,  16385};
	enum { N = SH_ARRAY_SIZE(sizes) };
	struct big_call calls[N];
	int fd = raw_connect();
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	for (size_t i = 0; i < N; i++) {
		call_build_sum(&calls[i], next_xid++, sizes[i], false);
		/* Writes of odd sizes: the server's reads end anywhere in a record. */
		CHECK(send_record(fd, calls[i].bc_rec, calls[i].bc_rec_len, NULL, 0,
		                  12345 + i * 1000));
	}
	for (size_t i = 0; i < N; i++)
		CHECK(read_sum_reply(fd, calls, N) != 0);
	CHECKF(count_ok(calls, N) == N, "%zu of %u replies right", count_ok(calls, N), (unsigned)N);
	for (size_t i = 0; i < N; i++) {
		/* Record = call header (40 bytes) + 4 + payload + pad + 4; rule 4 applies past 64
		 * KiB. */
		bool want_pooled = calls[i].bc_rec_len > RPC_RM_POOL_MIN;
		CHECKF(calls[i].bc_pooled == want_pooled, "payload %u: pooled %d", calls[i].bc_len,
		       calls[i].bc_pooled);
		call_free(&calls[i]);
	}
	close(fd);
}

/* More large records held in flight on one connection than the pool has buffers: the first
 * POOL_BUFS take pool buffers, the rest grow on the heap, all arrive intact; done twice, the
 * second round finds every buffer back in the pool. */
static void bigrec_pool_exhausted_one_connection(void)
{
	enum { N = 12 };
	for (int round = 0; round < 2; round++) {
		struct big_call calls[N];
		int fd = raw_connect();
		CHECK(fd >= 0);
		if (fd < 0)
			return;
		for (size_t i = 0; i < N; i++) {
			uint32_t len = i % 3 == 0 ? PAYLOAD_MAX : 150000u + (uint32_t)i * 4099u;
			call_build_sum(&calls[i], next_xid++, len, true);
			CHECK(send_record(fd, calls[i].bc_rec, calls[i].bc_rec_len, NULL, 0,
			                  65536 * 3));
		}
		uint32_t released = 0, pooled = 0, heap = 0;
		CHECK(release(fd, next_xid++, N, calls, N, &released, &pooled, &heap));
		CHECKF(released == N && pooled == POOL_BUFS && heap == N - POOL_BUFS,
		       "round %d: released %u pooled %u heap %u", round, released, pooled, heap);
		/* The SUM replies were written before RELEASE's, on this same connection. */
		CHECKF(count_ok(calls, N) == N, "round %d: %zu of %d replies right", round,
		       count_ok(calls, N), N);
		for (size_t i = 0; i < N; i++)
			call_free(&calls[i]);
		close(fd);
	}
}

/* Several connections send large records at once, in small interleaved writes, so partial
 * records of different connections hold pool buffers together; more records end up in flight
 * than the pool holds. Every reply is right and exactly POOL_BUFS records were pooled. */
#define MC_CONNS 5
#define MC_EACH 3
struct mc_conn {
	int mc_fd;
	struct big_call mc_calls[MC_EACH];
	bool mc_sent;
	size_t mc_ok;
};

static void *mc_sender(void *arg)
{
	struct mc_conn *mc = arg;
	mc->mc_sent = true;
	for (size_t i = 0; i < MC_EACH; i++) {
		/* Three fragments per record, written 4000 bytes at a time with yields between. */
		const uint32_t frags[] = {50000, 1, 200000};
		struct big_call *bc = &mc->mc_calls[i];
		size_t off = 0;
		for (size_t f = 0; f < 3 && mc->mc_sent; f++) {
			bool last = f == 2;
			size_t flen = last ? bc->bc_rec_len - off : frags[f];
			uint8_t hdr[4];
			xdr_store_u32(hdr, (last ? RPC_RM_LAST : 0u) | (uint32_t)flen);
			mc->mc_sent = send_all(mc->mc_fd, hdr, 4);
			for (size_t done = 0; done < flen && mc->mc_sent; done += 4000) {
				mc->mc_sent = send_all(mc->mc_fd, bc->bc_rec + off + done,
				                       SH_MIN((size_t)4000, flen - done));
				sched_yield();
			}
			off += flen;
		}
	}
	for (size_t i = 0; i < MC_EACH && mc->mc_sent; i++)
		if (read_sum_reply(mc->mc_fd, mc->mc_calls, MC_EACH) == 0)
			break;
	mc->mc_ok = count_ok(mc->mc_calls, MC_EACH);
	return NULL;
}

static void bigrec_pool_exhausted_many_connections(void)
{
	struct mc_conn conns[MC_CONNS];
	pthread_t th[MC_CONNS];
	for (int c = 0; c < MC_CONNS; c++) {
		conns[c].mc_fd = raw_connect();
		CHECK(conns[c].mc_fd >= 0);
		for (size_t i = 0; i < MC_EACH; i++)
			call_build_sum(&conns[c].mc_calls[i], next_xid++,
			               260000u + (uint32_t)(c * MC_EACH + i) * 50021u, true);
	}
	for (int c = 0; c < MC_CONNS; c++)
		CHECK(pthread_create(&th[c], NULL, mc_sender, &conns[c]) == 0);
	int fd = raw_connect();
	uint32_t released = 0, pooled = 0, heap = 0;
	CHECK(fd >= 0 &&
	      release(fd, next_xid++, MC_CONNS * MC_EACH, NULL, 0, &released, &pooled, &heap));
	CHECKF(released == MC_CONNS * MC_EACH && pooled == POOL_BUFS &&
	           heap == MC_CONNS * MC_EACH - POOL_BUFS,
	       "released %u pooled %u heap %u", released, pooled, heap);
	for (int c = 0; c < MC_CONNS; c++) {
		pthread_join(th[c], NULL);
		CHECKF(conns[c].mc_sent && conns[c].mc_ok == MC_EACH,
		       "connection %d: sent %d, %zu right", c, conns[c].mc_sent, conns[c].mc_ok);
		for (size_t i = 0; i < MC_EACH; i++)
			call_free(&conns[c].mc_calls[i]);
		close(conns[c].mc_fd);
	}
	close(fd);
}

/* One large record in many fragments of every awkward size (empty ones, one byte, ones shorter
 * than a header, ones crossing the pool threshold), and a record made only of fragments smaller
 * than the threshold whose sum exceeds it. */
static void bigrec_multi_fragment(void)
{
	struct big_call calls[2];
	int fd = raw_connect();
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	const uint32_t frags1[] = {1, 0, 3, 65535, 0, 2, 70000, 16384, 1, 300000, 9};
	call_build_sum(&calls[0], next_xid++, 900000, false);
	CHECK(send_record(fd, calls[0].bc_rec, calls[0].bc_rec_len, frags1, SH_ARRAY_SIZE(frags1),
	                  7777));
	const uint32_t frags2[] = {30000, 30000, 30000, 30000, 30000, 30000, 30000};
	call_build_sum(&calls[1], next_xid++, 200000, false);
	CHECK(send_record(fd, calls[1].bc_rec, calls[1].bc_rec_len, frags2, SH_ARRAY_SIZE(frags2),
	                  65536));
	for (int i = 0; i < 2; i++)
		CHECK(read_sum_reply(fd, calls, 2) != 0);
	CHECKF(calls[0].bc_replied && calls[0].bc_ok, "many fragments: replied %d ok %d",
	       calls[0].bc_replied, calls[0].bc_ok);
	CHECKF(calls[1].bc_replied && calls[1].bc_ok, "small fragments: replied %d ok %d",
	       calls[1].bc_replied, calls[1].bc_ok);
	CHECK(calls[0].bc_pooled);
	call_free(&calls[0]);
	call_free(&calls[1]);
	close(fd);
}

/* Connections that go away with pool buffers: one in the middle of a large record (the partial
 * record's buffer), one while its calls are parked (their records' buffers, freed when the calls
 * finish and their replies are discarded). Afterwards a full round gets every buffer again. */
static void bigrec_closed_connections_return_buffers(void)
{
	/* Mid-record, and mid-header after a record. */
	for (int k = 0; k < 3; k++) {
		struct big_call bc;
		call_build_sum(&bc, next_xid++, PAYLOAD_MAX, false);
		int fd = raw_connect();
		CHECK(fd >= 0);
		if (fd < 0) {
			call_free(&bc);
			return;
		}
		uint8_t hdr[4];
		xdr_store_u32(hdr, RPC_RM_LAST | (uint32_t)bc.bc_rec_len);
		/* 300000 bytes (read directly into a pool buffer), 70000 bytes, or the whole record
		 * (answered to a closed connection) and half of the next header. */
		size_t part = k == 0 ? 300000 : k == 1 ? 70000 : bc.bc_rec_len;
		CHECK(send_all(fd, hdr, 4) && send_all(fd, bc.bc_rec, part));
		if (k == 2)
			CHECK(send_all(fd, hdr, 2));
		usleep(20000);
		close(fd);
		call_free(&bc);
	}
	/* Parked calls whose connection closes before they are released. */
	struct big_call held[3];
	int fd = raw_connect();
	CHECK(fd >= 0);
	for (size_t i = 0; i < 3; i++) {
		call_build_sum(&held[i], next_xid++, 500000, true);
		CHECK(fd >= 0 &&
		      send_record(fd, held[i].bc_rec, held[i].bc_rec_len, NULL, 0, 65536));
	}
	int fd2 = raw_connect();
	uint32_t released = 0, pooled = 0, heap = 0;
	/* RELEASE(3) completes only once all three are parked; then close their connection before
	 * reading anything: the server may or may not have written the replies. */
	uint8_t rec[128];
	struct xdr_enc enc;
	xdr_enc_init(&enc, rec, sizeof(rec));
	uint32_t rel_xid = next_xid++;
	rpc_msg_put_call(&enc, rel_xid, BIG_PROG, BIG_VERS, BIG_RELEASE, NULL);
	xdr_put_u32(&enc, 3);
	close(fd);
	usleep(20000);
	CHECK(fd2 >= 0 && send_record(fd2, rec, xdr_enc_len(&enc), NULL, 0, sizeof(rec)));
	uint8_t hdr[4], body[64];
	CHECK(recv_all(fd2, hdr, 4) && (get_be32(hdr) & RPC_RM_LEN_MASK) == 36 &&
	      recv_all(fd2, body, 36));
	released = get_be32(body + 24);
	pooled = get_be32(body + 28);
	heap = get_be32(body + 32);
	CHECKF(get_be32(body) == rel_xid && released == 3 && pooled == 3 && heap == 0,
	       "released %u pooled %u heap %u", released, pooled, heap);
	for (size_t i = 0; i < 3; i++)
		call_free(&held[i]);

	/* A round with more records than buffers: the pool is whole again. */
	enum { N = POOL_BUFS + 2 };
	struct big_call calls[N];
	for (size_t i = 0; i < N; i++) {
		call_build_sum(&calls[i], next_xid++, 100000u + (uint32_t)i, true);
		CHECK(fd2 >= 0 &&
		      send_record(fd2, calls[i].bc_rec, calls[i].bc_rec_len, NULL, 0, 65536));
	}
	CHECK(fd2 >= 0 && release(fd2, next_xid++, N, calls, N, &released, &pooled, &heap));
	CHECKF(released == N && pooled == POOL_BUFS && heap == N - POOL_BUFS,
	       "after closes: released %u pooled %u heap %u", released, pooled, heap);
	CHECK(count_ok(calls, N) == N);
	for (size_t i = 0; i < N; i++)
		call_free(&calls[i]);
	close(fd2);
}

/* A server whose per-connection buffer limit lies below the record limit: a large record well
 * within the per-connection limit is served, though the pool buffer it lands in is as large as
 * the record limit (what counts against the limit is what the connection received). */
static void bigrec_conn_limit_below_record_limit(void)
{
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1;
	cfg.rsc_max_conn_buffer_bytes = 512u * 1024u;
	struct rpc_server *s = NULL;
	uint16_t port = 0;
	CHECK(rpc_server_create(&cfg, &s) == 0);
	if (!s)
		return;
	CHECK(rpc_server_add_program(s, &big_program, NULL) == 0);
	CHECK(rpc_server_listen(s, "127.0.0.1", 0, RPC_TCP, &port) == 0);
	CHECK(rpc_server_start(s) == 0);
	uint16_t main_port = srv_port;
	srv_port = port;
	struct big_call calls[3];
	int fd = raw_connect();
	CHECK(fd >= 0);
	const uint32_t sizes[] = {200000, 100000, 300000};
	for (size_t i = 0; i < 3; i++) {
		call_build_sum(&calls[i], next_xid++, sizes[i], false);
		CHECK(fd >= 0 &&
		      send_record(fd, calls[i].bc_rec, calls[i].bc_rec_len, NULL, 0, 65536));
		CHECKF(fd >= 0 && read_sum_reply(fd, calls, 3) == calls[i].bc_xid,
		       "no reply to a %u-byte call", sizes[i]);
	}
	CHECK(count_ok(calls, 3) == 3);
	for (size_t i = 0; i < 3; i++)
		call_free(&calls[i]);
	if (fd >= 0)
		close(fd);
	srv_port = main_port;
	rpc_server_stop(s);
	rpc_server_destroy(s);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	struct rpc_server_config cfg;
	rpc_server_config_default(&cfg);
	cfg.rsc_nloops = 1; /* one loop: one pool, so its exhaustion is exact */
	cfg.rsc_max_conn_buffer_bytes = 64u << 20;
	int rc = rpc_server_create(&cfg, &srv);
	if (!tap_check(rc == 0, "server_create"))
		return tap_finish();
	VERIFY(rpc_server_add_program(srv, &big_program, NULL) == 0);
	rc = rpc_server_listen(srv, "127.0.0.1", 0, RPC_TCP, &srv_port);
	if (!tap_check(rc == 0 && srv_port != 0, "server_listen on an ephemeral port"))
		return tap_finish();
	rc = rpc_server_start(srv);
	if (!tap_check(rc == 0, "server_start"))
		return tap_finish();

	TAP_RUN(bigrec_pipelined_immediate);
	TAP_RUN(bigrec_pool_exhausted_one_connection);
	TAP_RUN(bigrec_pool_exhausted_many_connections);
	TAP_RUN(bigrec_multi_fragment);
	TAP_RUN(bigrec_closed_connections_return_buffers);
	TAP_RUN(bigrec_conn_limit_below_record_limit);

	rpc_server_stop(srv);
	/* Nothing was left parked (read after the loop thread was joined): a call left behind
	 * would hold its record past the stop. */
	tap_check(nparked == 0 && releaser == NULL, "no call left parked");
	rpc_server_destroy(srv);
	return tap_finish();
}
