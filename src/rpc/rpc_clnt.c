/* rpc_clnt.c: a small synchronous ONC RPC client over TCP (record marking) or UDP.
 *
 * One call at a time: the call is encoded into one buffer and sent (over TCP as a single-fragment
 * record), then replies are read until one carries the call's xid; replies with other xids (late
 * answers to earlier timed-out calls) are skipped. Over UDP the call is retransmitted every
 * RPC_CLNT_UDP_RETRY_MS until the timeout. Replies are read into a buffer sized from the caller's
 * result capacity, so a hostile server cannot make the client allocate more than that. Used for
 * rpcbind registration, tests and benchmarks; not thread-safe (one client per thread). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/rpc_impl.h"

#define RPC_CLNT_UDP_RETRY_MS 1000
#define RPC_CLNT_HDR_SLACK 512u /* call/reply header room: fixed words + two 400-byte auth bodies */
#define RPC_CLNT_UDP_MAX 65536u

struct rpc_clnt {
	int cl_fd;
	enum rpc_transport cl_transport;
	uint32_t cl_next_xid;
	struct rpc_cred cl_cred;
};

int rpc_clnt_create(const char *addr, uint16_t port, enum rpc_transport transport,
		    struct rpc_clnt **out)
{
	struct sockaddr_storage ss;
	socklen_t len;
	if (rpc_parse_addr(addr, port, &ss, &len) != 0)
		return -EINVAL;
	if (transport != RPC_TCP && transport != RPC_UDP)
		return -EINVAL;
	struct rpc_clnt *clnt = mem_zalloc(sizeof(*clnt));
	if (!clnt)
		return -ENOMEM;
	int rc;
	clnt->cl_transport = transport;
	clnt->cl_cred.rcr_flavor = RPC_AUTH_NONE;
	rc = sh_random_bytes(&clnt->cl_next_xid, sizeof(clnt->cl_next_xid));
	if (rc < 0)
		goto out_free;
	clnt->cl_fd = socket(ss.ss_family, (transport == RPC_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	if (clnt->cl_fd < 0) {
		rc = -errno;
		goto out_free;
	}
	/* UDP connect fixes the peer, so datagrams from anyone else are filtered by the kernel. */
	while (connect(clnt->cl_fd, (struct sockaddr *)&ss, len) < 0) {
		if (errno == EINTR)
			continue;
		rc = -errno;
		goto out_close;
	}
	*out = clnt;
	return 0;
out_close:
	close(clnt->cl_fd);
out_free:
	mem_free(clnt);
	return rc;
}

void rpc_clnt_destroy(struct rpc_clnt *clnt)
{
	if (!clnt)
		return;
	close(clnt->cl_fd);
	mem_free(clnt);
}

void rpc_clnt_set_cred(struct rpc_clnt *clnt, const struct rpc_cred *cred)
{
	clnt->cl_cred = *cred;
}

void rpc_clnt_set_xid(struct rpc_clnt *clnt, uint32_t xid)
{
	clnt->cl_next_xid = xid;
}

/* Milliseconds left until deadline_ns (-1: no deadline). */
static int rpc_clnt_ms_left(uint64_t deadline_ns)
{
	if (deadline_ns == UINT64_MAX)
		return -1;
	uint64_t now = clock_monotonic_ns();
	if (now >= deadline_ns)
		return 0;
	return (int)((deadline_ns - now + 999999u) / 1000000u);
}

/* Waits until fd is readable. Returns 0, -ETIMEDOUT or -errno. */
static int rpc_clnt_wait(int fd, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	for (;;) {
		int n = poll(&pfd, 1, timeout_ms);
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* Reads exactly len bytes (buf NULL: discard them) before the deadline. */
static int rpc_clnt_read_exact(struct rpc_clnt *clnt, void *buf, size_t len, uint64_t deadline_ns)
{
	uint8_t sink[4096];
	size_t got = 0;
	while (got < len) {
		int rc = rpc_clnt_wait(clnt->cl_fd, rpc_clnt_ms_left(deadline_ns));
		if (rc < 0)
			return rc;
		size_t want = len - got;
		void *dst = buf ? (uint8_t *)buf + got : sink;
		if (!buf && want > sizeof(sink))
			want = sizeof(sink);
		ssize_t n = recv(clnt->cl_fd, dst, want, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

/* Reads one whole record into buf (cap bytes). A larger record is read and discarded
 * (-EMSGSIZE) so the stream stays in step. */
static int rpc_clnt_read_record(struct rpc_clnt *clnt, uint8_t *buf, size_t cap, size_t *len_out,
				uint64_t deadline_ns)
{
	size_t len = 0;
	bool too_big = false;
	for (;;) {
		uint8_t hdr[RPC_RM_HDR_BYTES];
		int rc = rpc_clnt_read_exact(clnt, hdr, sizeof(hdr), deadline_ns);
		if (rc < 0)
			return rc;
		uint32_t word = ((uint32_t)hdr[0] << 24) | ((uint32_t)hdr[1] << 16) | ((uint32_t)hdr[2] << 8) |
				hdr[3];
		size_t frag = word & RPC_RM_LEN_MASK;
		if (!too_big && frag > cap - len)
			too_big = true;
		rc = rpc_clnt_read_exact(clnt, too_big ? NULL : buf + len, frag, deadline_ns);
		if (rc < 0)
			return rc;
		if (!too_big)
			len += frag;
		if (word & RPC_RM_LAST)
			break;
	}
	*len_out = len;
	return too_big ? -EMSGSIZE : 0;
}

static uint32_t rpc_clnt_xid_of(const void *msg)
{
	const uint8_t *p = msg;
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

int rpc_clnt_exchange(struct rpc_clnt *clnt, const void *msg, size_t msg_len, void *reply_buf,
		      size_t reply_cap, size_t *reply_len_out, int timeout_ms)
{
	if (msg_len < 4 || msg_len > RPC_RM_LEN_MASK)
		return -EINVAL;
	uint32_t xid = rpc_clnt_xid_of(msg);
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX
					   : clock_monotonic_ns() + (uint64_t)timeout_ms * 1000000u;
	if (clnt->cl_transport == RPC_TCP) {
		uint8_t mark[RPC_RM_HDR_BYTES];
		xdr_store_u32(mark, RPC_RM_LAST | (uint32_t)msg_len);
		struct iovec iov[2] = {{mark, sizeof(mark)}, {(void *)msg, msg_len}};
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
		size_t total = sizeof(mark) + msg_len, sent = 0;
		while (sent < total) {
			ssize_t n = sendmsg(clnt->cl_fd, &mh, MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			sent += (size_t)n;
			size_t adv = (size_t)n;
			while (adv > 0 && mh.msg_iovlen > 0) {
				if (adv >= mh.msg_iov[0].iov_len) {
					adv -= mh.msg_iov[0].iov_len;
					mh.msg_iov++;
					mh.msg_iovlen--;
				} else {
					mh.msg_iov[0].iov_base = (uint8_t *)mh.msg_iov[0].iov_base + adv;
					mh.msg_iov[0].iov_len -= adv;
					adv = 0;
				}
			}
		}
		for (;;) {
			size_t len;
			int rc = rpc_clnt_read_record(clnt, reply_buf, reply_cap, &len, deadline);
			if (rc == -EMSGSIZE)
				continue; /* cannot tell its xid; a matching reply would not fit anyway */
			if (rc < 0)
				return rc;
			if (len >= 4 && rpc_clnt_xid_of(reply_buf) == xid) {
				*reply_len_out = len;
				return 0;
			}
		}
	}
	for (;;) {
		if (send(clnt->cl_fd, msg, msg_len, 0) < 0 && errno != EINTR)
			return -errno;
		uint64_t retry = clock_monotonic_ns() + RPC_CLNT_UDP_RETRY_MS * 1000000ull;
		if (retry > deadline)
			retry = deadline;
		for (;;) {
			int rc = rpc_clnt_wait(clnt->cl_fd, rpc_clnt_ms_left(retry));
			if (rc == -ETIMEDOUT)
				break;
			if (rc < 0)
				return rc;
			ssize_t n = recv(clnt->cl_fd, reply_buf, reply_cap, MSG_TRUNC);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return -errno; /* e.g. ECONNREFUSED from an ICMP port unreachable */
			}
			if ((size_t)n > reply_cap || n < 4 || rpc_clnt_xid_of(reply_buf) != xid)
				continue;
			*reply_len_out = (size_t)n;
			return 0;
		}
		if (clock_monotonic_ns() >= deadline)
			return -ETIMEDOUT;
	}
}

int rpc_clnt_call(struct rpc_clnt *clnt, uint32_t prog, uint32_t vers, uint32_t proc,
		  const void *args, size_t args_len, void *res_buf, size_t res_cap, size_t *res_len_out,
		  int timeout_ms, int *accept_stat_out, int *auth_stat_out)
{
	int accept_dummy, auth_dummy;
	size_t res_len_dummy;
	if (!accept_stat_out)
		accept_stat_out = &accept_dummy;
	if (!auth_stat_out)
		auth_stat_out = &auth_dummy;
	if (!res_len_out)
		res_len_out = &res_len_dummy;
	*accept_stat_out = -1;
	*auth_stat_out = -1;
	*res_len_out = 0;
	if (args_len > RPC_RM_LEN_MASK - RPC_CLNT_HDR_SLACK)
		return -EINVAL;
	size_t reply_cap = res_cap + RPC_CLNT_HDR_SLACK;
	if (clnt->cl_transport == RPC_UDP && reply_cap > RPC_CLNT_UDP_MAX)
		reply_cap = RPC_CLNT_UDP_MAX;
	uint8_t *msg = mem_alloc(args_len + RPC_CLNT_HDR_SLACK);
	uint8_t *reply = mem_alloc(reply_cap);
	int rc;
	if (!msg || !reply) {
		rc = -ENOMEM;
		goto out_free;
	}
	struct xdr_enc enc;
	xdr_enc_init(&enc, msg, args_len + RPC_CLNT_HDR_SLACK);
	uint32_t xid = clnt->cl_next_xid++;
	rpc_msg_put_call(&enc, xid, prog, vers, proc, &clnt->cl_cred);
	uint8_t *dst = xdr_reserve(&enc, args_len);
	if (!xdr_enc_ok(&enc)) {
		rc = -EINVAL;
		goto out_free;
	}
	if (args_len)
		memcpy(dst, args, args_len);
	size_t reply_len;
	rc = rpc_clnt_exchange(clnt, msg, xdr_enc_len(&enc), reply, reply_cap, &reply_len, timeout_ms);
	if (rc < 0)
		goto out_free;

	struct xdr_dec dec;
	xdr_dec_init(&dec, reply, reply_len);
	(void)xdr_get_u32(&dec); /* xid, matched already */
	uint32_t mtype = xdr_get_u32(&dec);
	uint32_t reply_stat = xdr_get_u32(&dec);
	rc = -EBADMSG;
	if (!xdr_dec_ok(&dec) || mtype != RPC_MSG_REPLY)
		goto out_free;
	if (reply_stat == RPC_MSG_ACCEPTED) {
		uint32_t verf_len;
		(void)xdr_get_u32(&dec);
		(void)xdr_get_opaque(&dec, RPC_AUTH_BODY_MAX, &verf_len);
		uint32_t stat = xdr_get_u32(&dec);
		if (!xdr_dec_ok(&dec))
			goto out_free;
		*accept_stat_out = (int)stat;
		*auth_stat_out = RPC_AUTH_OK;
		size_t body = xdr_dec_remaining(&dec);
		if (stat == RPC_SUCCESS || stat == RPC_PROG_MISMATCH) {
			if (body > res_cap) {
				rc = -EMSGSIZE;
				goto out_free;
			}
			if (body)
				memcpy(res_buf, dec.xd_pos, body);
			*res_len_out = body;
		}
		rc = stat == RPC_SUCCESS ? 0 : -EPROTO;
	} else if (reply_stat == RPC_MSG_DENIED) {
		uint32_t reject = xdr_get_u32(&dec);
		if (!xdr_dec_ok(&dec))
			goto out_free;
		if (reject == RPC_REJECT_MISMATCH) {
			size_t body = SH_MIN(xdr_dec_remaining(&dec), res_cap);
			if (body)
				memcpy(res_buf, dec.xd_pos, body);
			*res_len_out = body;
			rc = -EPROTONOSUPPORT;
		} else if (reject == RPC_REJECT_AUTH_ERROR) {
			uint32_t why = xdr_get_u32(&dec);
			if (!xdr_dec_ok(&dec))
				goto out_free;
			*auth_stat_out = (int)why;
			rc = -EPROTO;
		}
	}
out_free:
	mem_free(msg);
	mem_free(reply);
	return rc;
}
