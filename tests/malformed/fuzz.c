/* fuzz.c: rounds of pseudo-random RPC records against a private `shale serve`.
 *
 * Each message starts from a well-formed NFS v3, MOUNT v3, NLM (v1, v3, v4) or NSM call whose
 * arguments are generated
 * from the procedure's XDR shape with edge-biased values (real handles of files and directories
 * in the export, forged handles, names such as "..", empty and over-long, sizes and offsets near
 * 0 and 2^64) and is then, with some probability, mutated: bytes flipped, truncated, extended, or
 * framed as several fragments, or framed with a wrong length (after which the connection is
 * dropped, since the stream is no longer in step). Every 64 messages a NULL call acts as a barrier:
 * its reply must arrive, which proves the server is still reading and answering this connection.
 * After each round the common health check runs (alive, fresh client served, VmRSS bounded).
 *
 * Seeds are fixed and printed so a failure can be replayed; SHALE_FUZZ_SEED overrides the first
 * round's seed and SHALE_FUZZ_MESSAGES the number of messages per round. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mfcommon.h"
#include "tap.h"

#define FUZZ_BARRIER_EVERY 64
#define FUZZ_STALL_MS 10000
#define FUZZ_MAX_HANDLES 8

static struct mf_target tgt;
static struct mf_rng rng;

struct handle {
	uint8_t h_data[64];
	uint32_t h_len;
};
static struct handle handles[FUZZ_MAX_HANDLES];
static unsigned nhandles;

/* ---------------------------------------------------------------- connection with reassembly */

struct conn {
	int c_fd;
	uint8_t c_in[1 << 16];
	size_t c_in_len;
	size_t c_frag_left;     /* bytes of the current fragment still to consume */
	bool c_frag_last;       /* the current fragment ends its record */
	bool c_at_record_start; /* the next data byte is a record's first (its xid) */
	unsigned long c_replies;
};

static int conn_open(struct conn *c)
{
	memset(c, 0, sizeof(*c));
	c->c_at_record_start = true;
	c->c_fd = rr_connect_tcp(tgt.mt_srv.ts_port, 0);
	if (c->c_fd < 0)
		return -1;
	int fl = fcntl(c->c_fd, F_GETFL);
	fcntl(c->c_fd, F_SETFL, fl | O_NONBLOCK);
	return 0;
}

static void conn_close(struct conn *c)
{
	if (c->c_fd >= 0)
		close(c->c_fd);
	c->c_fd = -1;
}

/* Consumes inbound bytes, noting the xid at the start of each record (record marking, RFC 5531
 * section 11). Returns 0, or -1 once the server has closed the connection. */
static int conn_drain(struct conn *c, uint32_t want_xid, bool *found)
{
	for (;;) {
		ssize_t n = recv(c->c_fd, c->c_in + c->c_in_len, sizeof(c->c_in) - c->c_in_len, 0);
		if (n == 0)
			return -1;
		if (n < 0)
			return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
		c->c_in_len += (size_t)n;
		size_t pos = 0;
		while (pos < c->c_in_len) {
			size_t avail = c->c_in_len - pos;
			if (c->c_frag_left == 0) { /* expecting a fragment header */
				if (avail < 4)
					break;
				uint32_t mark;
				memcpy(&mark, c->c_in + pos, 4);
				mark = ntohl(mark);
				pos += 4;
				c->c_frag_left = mark & 0x7fffffffu;
				c->c_frag_last = (mark & 0x80000000u) != 0;
				if (c->c_frag_left == 0 && c->c_frag_last)
					c->c_at_record_start = true;
				continue;
			}
			if (c->c_at_record_start) {
				if (c->c_frag_left >= 4) {
					if (avail < 4)
						break;
					uint32_t xid;
					memcpy(&xid, c->c_in + pos, 4);
					if (found != NULL && ntohl(xid) == want_xid)
						*found = true;
				}
				c->c_replies++;
				c->c_at_record_start = false;
			}
			size_t take = avail < c->c_frag_left ? avail : c->c_frag_left;
			pos += take;
			c->c_frag_left -= take;
			if (c->c_frag_left == 0 && c->c_frag_last)
				c->c_at_record_start = true;
		}
		memmove(c->c_in, c->c_in + pos, c->c_in_len - pos);
		c->c_in_len -= pos;
	}
}

/* Sends len bytes, draining replies meanwhile. Returns 0, -1 closed, -2 stalled. */
static int conn_send(struct conn *c, const uint8_t *data, size_t len)
{
	while (len > 0) {
		struct pollfd pfd = { .fd = c->c_fd, .events = POLLIN | POLLOUT };
		int n = poll(&pfd, 1, FUZZ_STALL_MS);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -2;
		if ((pfd.revents & POLLIN) && conn_drain(c, 0, NULL) != 0)
			return -1;
		if (pfd.revents & (POLLERR | POLLHUP))
			return -1;
		if (pfd.revents & POLLOUT) {
			ssize_t w = send(c->c_fd, data, len, MSG_NOSIGNAL);
			if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				continue;
			if (w <= 0)
				return -1;
			data += w;
			len -= (size_t)w;
		}
	}
	return 0;
}

/* Sends a NULL call and waits for its reply. 0, -1 closed, -2 stalled. */
static int conn_barrier(struct conn *c, uint32_t xid)
{
	struct rr_buf b;
	rr_buf_init(&b);
	rr_put_u32(&b, 0);
	rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
	uint32_t mark = htonl(0x80000000u | (uint32_t)(b.rb_len - 4));
	memcpy(b.rb_data, &mark, 4);
	int rc = conn_send(c, b.rb_data, b.rb_len);
	rr_buf_fini(&b);
	if (rc != 0)
		return rc;
	bool found = false;
	while (!found) {
		struct pollfd pfd = { .fd = c->c_fd, .events = POLLIN };
		int n = poll(&pfd, 1, FUZZ_STALL_MS);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -2;
		if (conn_drain(c, xid, &found) != 0 && !found)
			return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- argument generation */

static uint32_t pick_u32(void)
{
	static const uint32_t edges[] = { 0, 1, 2, 3, 4, 255, 256, 4095, 4096, 65535, 65536, 1048576,
					  1048577, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu };
	if (mf_rng_below(&rng, 3) == 0)
		return (uint32_t)mf_rng_next(&rng);
	return edges[mf_rng_below(&rng, sizeof(edges) / sizeof(edges[0]))];
}

static uint64_t pick_u64(void)
{
	static const uint64_t edges[] = { 0, 1, 4096, 1ull << 20, 1ull << 31, 1ull << 32, 1ull << 40,
					  (1ull << 63) - 1, 1ull << 63, ~0ull, ~0ull - 1 };
	if (mf_rng_below(&rng, 3) == 0)
		return mf_rng_next(&rng) >> mf_rng_below(&rng, 64);
	return edges[mf_rng_below(&rng, sizeof(edges) / sizeof(edges[0]))];
}

static void put_handle(struct rr_buf *b)
{
	uint32_t k = mf_rng_below(&rng, 10);
	if (k < 7 && nhandles > 0) {
		struct handle *h = &handles[mf_rng_below(&rng, nhandles)];
		rr_put_opaque(b, h->h_data, h->h_len);
	} else if (k == 7 && nhandles > 0) {
		/* A real handle with one byte changed. */
		struct handle h = handles[mf_rng_below(&rng, nhandles)];
		h.h_data[mf_rng_below(&rng, h.h_len)] ^= (uint8_t)(1u << mf_rng_below(&rng, 8));
		rr_put_opaque(b, h.h_data, h.h_len);
	} else {
		uint8_t junk[80];
		uint32_t n = mf_rng_below(&rng, sizeof(junk));
		mf_rng_fill(&rng, junk, n);
		rr_put_opaque(b, junk, n); /* lengths above 64 are illegal for nfs_fh3 */
	}
}

static void put_name(struct rr_buf *b)
{
	static const char *const names[] = { "f0", "f1", "d", ".", "..", "", "fz", "a/b", "new" };
	uint32_t k = mf_rng_below(&rng, 12);
	if (k < 9) {
		rr_put_string(b, names[k]);
	} else if (k == 9) {
		char name[32];
		snprintf(name, sizeof(name), "n%u", mf_rng_below(&rng, 50));
		rr_put_string(b, name);
	} else {
		uint8_t junk[300];
		uint32_t n = mf_rng_below(&rng, sizeof(junk));
		mf_rng_fill(&rng, junk, n);
		rr_put_opaque(b, junk, n);
	}
}

static void put_sattr(struct rr_buf *b)
{
	/* mode, uid, gid (bool + u32 each), size (bool + u64), atime, mtime (how + time). */
	for (int i = 0; i < 3; i++) {
		uint32_t set = mf_rng_below(&rng, 4) == 0 ? pick_u32() : mf_rng_below(&rng, 2);
		rr_put_u32(b, set);
		if (set == 1)
			rr_put_u32(b, i == 0 ? (mf_rng_below(&rng, 2) ? 0644u : pick_u32()) : pick_u32());
	}
	uint32_t set = mf_rng_below(&rng, 3) == 0;
	rr_put_u32(b, set);
	if (set) /* keep most sizes modest so the export stays small */
		rr_put_u64(b, mf_rng_below(&rng, 4) == 0 ? pick_u64() : mf_rng_below(&rng, 1u << 20));
	for (int i = 0; i < 2; i++) {
		uint32_t how = mf_rng_below(&rng, 5) == 0 ? pick_u32() : mf_rng_below(&rng, 3);
		rr_put_u32(b, how);
		if (how == 2) {
			rr_put_u32(b, pick_u32());
			rr_put_u32(b, pick_u32());
		}
	}
}

static void put_nfs_args(struct rr_buf *b, uint32_t proc)
{
	uint8_t junk[9000];
	switch (proc) {
	case 0: /* NULL */
		break;
	case 1:  /* GETATTR */
	case 5:  /* READLINK */
	case 18: /* FSSTAT */
	case 19: /* FSINFO */
	case 20: /* PATHCONF */
		put_handle(b);
		break;
	case 2: /* SETATTR */
		put_handle(b);
		put_sattr(b);
		rr_put_u32(b, mf_rng_below(&rng, 2));
		if (mf_rng_below(&rng, 2)) {
			rr_put_u32(b, pick_u32());
			rr_put_u32(b, pick_u32());
		}
		break;
	case 3:  /* LOOKUP */
	case 12: /* REMOVE */
	case 13: /* RMDIR */
		put_handle(b);
		put_name(b);
		break;
	case 4: /* ACCESS */
		put_handle(b);
		rr_put_u32(b, pick_u32());
		break;
	case 6: /* READ */
		put_handle(b);
		rr_put_u64(b, mf_rng_below(&rng, 2) ? mf_rng_below(&rng, 1u << 16) : pick_u64());
		rr_put_u32(b, pick_u32());
		break;
	case 7: { /* WRITE */
		put_handle(b);
		rr_put_u64(b, mf_rng_below(&rng, 2) ? mf_rng_below(&rng, 1u << 16) : pick_u64());
		uint32_t n = mf_rng_below(&rng, sizeof(junk));
		rr_put_u32(b, mf_rng_below(&rng, 4) == 0 ? pick_u32() : n); /* count, sometimes wrong */
		rr_put_u32(b, mf_rng_below(&rng, 4));                      /* stable_how, sometimes bad */
		mf_rng_fill(&rng, junk, n);
		rr_put_opaque(b, junk, n);
		break;
	}
	case 8: { /* CREATE */
		put_handle(b);
		put_name(b);
		uint32_t how = mf_rng_below(&rng, 4);
		rr_put_u32(b, how);
		if (how == 2) {
			mf_rng_fill(&rng, junk, 8);
			rr_put_bytes(b, junk, 8);
		} else {
			put_sattr(b);
		}
		break;
	}
	case 9: /* MKDIR */
		put_handle(b);
		put_name(b);
		put_sattr(b);
		break;
	case 10: /* SYMLINK */
		put_handle(b);
		put_name(b);
		put_sattr(b);
		put_name(b); /* target */
		break;
	case 11: { /* MKNOD */
		put_handle(b);
		put_name(b);
		uint32_t type = mf_rng_below(&rng, 10);
		rr_put_u32(b, type);
		if (type == 3 || type == 4) {
			put_sattr(b);
			rr_put_u32(b, pick_u32());
			rr_put_u32(b, pick_u32());
		} else if (type == 6 || type == 7) {
			put_sattr(b);
		}
		break;
	}
	case 14: /* RENAME */
		put_handle(b);
		put_name(b);
		put_handle(b);
		put_name(b);
		break;
	case 15: /* LINK */
		put_handle(b);
		put_handle(b);
		put_name(b);
		break;
	case 16: /* READDIR */
		put_handle(b);
		rr_put_u64(b, mf_rng_below(&rng, 2) ? mf_rng_below(&rng, 64) : pick_u64());
		mf_rng_fill(&rng, junk, 8);
		rr_put_bytes(b, mf_rng_below(&rng, 2) ? (const void *)"\0\0\0\0\0\0\0\0" : junk, 8);
		rr_put_u32(b, pick_u32());
		break;
	case 17: /* READDIRPLUS */
		put_handle(b);
		rr_put_u64(b, mf_rng_below(&rng, 2) ? mf_rng_below(&rng, 64) : pick_u64());
		mf_rng_fill(&rng, junk, 8);
		rr_put_bytes(b, mf_rng_below(&rng, 2) ? (const void *)"\0\0\0\0\0\0\0\0" : junk, 8);
		rr_put_u32(b, pick_u32());
		rr_put_u32(b, pick_u32());
		break;
	case 21: /* COMMIT */
		put_handle(b);
		rr_put_u64(b, pick_u64());
		rr_put_u32(b, pick_u32());
		break;
	default: { /* beyond the table: random bytes */
		uint32_t n = mf_rng_below(&rng, 200);
		mf_rng_fill(&rng, junk, n);
		rr_put_bytes(b, junk, n);
		break;
	}
	}
}

/* An NLM lock (nlm_lock / nlm4_lock): a caller name, a handle, an owner handle of any length up
 * to past the bound, a svid, and an offset and length near the edges. */
static void put_nlm_lock(struct rr_buf *b, uint32_t vers)
{
	static const char *const callers[] = {"client-1", "client-2", "", "a-client-name"};
	uint8_t junk[1100];
	if (mf_rng_below(&rng, 8) == 0) {
		uint32_t n = mf_rng_below(&rng, sizeof(junk));
		mf_rng_fill(&rng, junk, n);
		rr_put_opaque(b, junk, n);
	} else {
		rr_put_string(b, callers[mf_rng_below(&rng, 4)]);
	}
	put_handle(b);
	uint32_t n = mf_rng_below(&rng, 4) == 0 ? mf_rng_below(&rng, sizeof(junk)) : 8;
	mf_rng_fill(&rng, junk, n);
	rr_put_opaque(b, junk, n);
	rr_put_u32(b, mf_rng_below(&rng, 4) ? mf_rng_below(&rng, 8) : pick_u32());
	if (vers == 4) {
		rr_put_u64(b, pick_u64());
		rr_put_u64(b, pick_u64());
	} else {
		rr_put_u32(b, pick_u32());
		rr_put_u32(b, pick_u32());
	}
}

/* A bool, now and then one that is neither 0 nor 1. */
static void put_bool(struct rr_buf *b)
{
	rr_put_u32(b, mf_rng_below(&rng, 16) ? mf_rng_below(&rng, 2) : pick_u32());
}

/* The arguments of an NLM procedure, by its shape (XNFS; RFC 1813 appendix II for version 4). */
static void put_nlm_args(struct rr_buf *b, uint32_t vers, uint32_t proc)
{
	uint8_t cookie[8];
	mf_rng_fill(&rng, cookie, sizeof(cookie));
	switch (proc) {
	case 0: break;
	case 1: case 5: case 6: case 10: /* TEST, GRANTED (+_MSG) */
		rr_put_opaque(b, cookie, sizeof(cookie));
		put_bool(b);
		put_nlm_lock(b, vers);
		break;
	case 2: case 7: case 22: /* LOCK, LOCK_MSG, NM_LOCK */
		rr_put_opaque(b, cookie, sizeof(cookie));
		put_bool(b);
		put_bool(b);
		put_nlm_lock(b, vers);
		put_bool(b);
		rr_put_u32(b, pick_u32());
		break;
	case 3: case 8: /* CANCEL */
		rr_put_opaque(b, cookie, sizeof(cookie));
		put_bool(b);
		put_bool(b);
		put_nlm_lock(b, vers);
		break;
	case 4: case 9: /* UNLOCK */
		rr_put_opaque(b, cookie, sizeof(cookie));
		put_nlm_lock(b, vers);
		break;
	case 20: case 21: /* SHARE, UNSHARE */
		rr_put_opaque(b, cookie, sizeof(cookie));
		rr_put_string(b, "client-1");
		put_handle(b);
		rr_put_opaque(b, cookie, 4);
		rr_put_u32(b, mf_rng_below(&rng, 6));
		rr_put_u32(b, mf_rng_below(&rng, 6));
		put_bool(b);
		break;
	case 23: /* FREE_ALL */
		rr_put_string(b, mf_rng_below(&rng, 2) ? "client-1" : "client-2");
		rr_put_u32(b, pick_u32());
		break;
	default: /* the _RES calls and beyond: a cookie, a status, junk */
		rr_put_opaque(b, cookie, sizeof(cookie));
		rr_put_u32(b, mf_rng_below(&rng, 12));
		break;
	}
}

/* An NFS v3 or MOUNT v3 call into b. */
static void make_nfs_call(struct rr_buf *b, uint32_t xid)
{
	bool mount = mf_rng_below(&rng, 10) == 0;
	uint32_t proc = mount ? mf_rng_below(&rng, 7) : mf_rng_below(&rng, 23);
	uint32_t vers = mf_rng_below(&rng, 40) == 0 ? mf_rng_below(&rng, 5) : 3;
	enum rr_cred cred = mf_rng_below(&rng, 8) == 0 ? RR_CRED_NONE : RR_CRED_SYS;
	uint32_t uid = mf_rng_below(&rng, 4) == 0 ? pick_u32() : 0;
	rr_put_call(b, xid, 2, mount ? RR_PROG_MOUNT : RR_PROG_NFS, vers, proc, cred, uid, uid);
	if (mount) {
		if (proc == 1 || proc == 3) {
			if (mf_rng_below(&rng, 2))
				rr_put_string(b, tgt.mt_srv.ts_export_path[0]);
			else
				put_name(b);
		}
	} else {
		put_nfs_args(b, proc);
	}
}

/* Builds one message body (no framing) into b. */
static void make_message(struct rr_buf *b, uint32_t xid)
{
	uint32_t kind = mf_rng_below(&rng, 16);
	if (kind < 3) { /* the lock manager: NLM (or, one time in six, NSM) */
		bool nsm = kind == 0 && mf_rng_below(&rng, 2) == 0;
		static const uint32_t nlm_versions[] = {1, 3, 4, 4, 4, 2};
		uint32_t vers = nsm ? (mf_rng_below(&rng, 20) ? 1 : 2)
		                    : nlm_versions[mf_rng_below(&rng, 6)];
		uint32_t proc = mf_rng_below(&rng, nsm ? 8 : 25);
		rr_put_call(b, xid, 2, nsm ? 100024u : 100021u, vers, proc,
			    mf_rng_below(&rng, 8) ? RR_CRED_SYS : RR_CRED_NONE, 0, 0);
		if (!nsm) {
			put_nlm_args(b, vers, proc);
		} else if (proc == 1 || proc == 6) { /* STAT, NOTIFY */
			rr_put_string(b, "client-2");
			if (proc == 6)
				rr_put_u32(b, pick_u32());
		} else if (proc >= 2 && proc <= 4) { /* MON, UNMON, UNMON_ALL: junk of a plausible size */
			uint8_t junk[64];
			mf_rng_fill(&rng, junk, sizeof(junk));
			rr_put_bytes(b, junk, 4 * mf_rng_below(&rng, 16));
		}
	} else {
		make_nfs_call(b, xid);
	}
	/* Mutations of the encoded message. */
	uint32_t m = mf_rng_below(&rng, 20);
	if (m < 6 && b->rb_len > 0) { /* flip 1..8 bytes anywhere, header included */
		uint32_t flips = 1 + mf_rng_below(&rng, 8);
		for (uint32_t i = 0; i < flips; i++)
			b->rb_data[mf_rng_below(&rng, (uint32_t)b->rb_len)] ^= (uint8_t)(1u + mf_rng_below(&rng, 255));
	} else if (m < 9) { /* truncate */
		b->rb_len = mf_rng_below(&rng, (uint32_t)b->rb_len + 1);
	} else if (m < 11) { /* extend with junk */
		uint8_t junk[512];
		uint32_t n = mf_rng_below(&rng, sizeof(junk));
		mf_rng_fill(&rng, junk, n);
		rr_put_bytes(b, junk, n);
	}
}

/* Frames body into wire bytes. Returns true if the framing is honest (the stream stays in step). */
static bool frame_message(struct rr_buf *wire, const struct rr_buf *body)
{
	uint32_t f = mf_rng_below(&rng, 20);
	if (f < 16 || body->rb_len == 0) {
		rr_put_u32(wire, 0x80000000u | (uint32_t)body->rb_len);
		rr_put_bytes(wire, body->rb_data, body->rb_len);
		return true;
	}
	if (f < 19) { /* several honest fragments */
		size_t off = 0;
		while (off < body->rb_len) {
			size_t left = body->rb_len - off;
			size_t n = 1 + mf_rng_below(&rng, (uint32_t)(left < 64 ? left : 64));
			if (mf_rng_below(&rng, 4) == 0)
				n = left;
			bool last = off + n == body->rb_len;
			rr_put_u32(wire, (last ? 0x80000000u : 0) | (uint32_t)n);
			rr_put_bytes(wire, body->rb_data + off, n);
			off += n;
		}
		return true;
	}
	/* A lying fragment header: longer or shorter than what follows. */
	uint32_t claimed = mf_rng_below(&rng, 2) ? (uint32_t)body->rb_len + 1 + mf_rng_below(&rng, 100000)
						 : mf_rng_below(&rng, (uint32_t)body->rb_len);
	rr_put_u32(wire, (mf_rng_below(&rng, 2) ? 0x80000000u : 0) | claimed);
	rr_put_bytes(wire, body->rb_data, body->rb_len);
	return false;
}

/* ---------------------------------------------------------------- rounds */

/* Makes a fixture over NFS, through the server itself, so that the same code serves a posix
 * directory and a pool's file system (SHALE_TS_BACKEND=pool). */
static int make_fixture(const struct handle *dir, const char *name, const char *text,
			struct handle *out)
{
	return rr_nfs_make(tgt.mt_srv.ts_port, dir->h_data, dir->h_len, name, text,
			   text != NULL ? 0666 : 0777, out->h_data, &out->h_len);
}

static void prepare_export(void)
{
	memcpy(handles[0].h_data, tgt.mt_root, tgt.mt_root_len);
	handles[0].h_len = tgt.mt_root_len;
	nhandles = 1;
	const struct handle root = handles[0];
	const char *text = "some file content\n";
	bool made = make_fixture(&root, "f0", text, &handles[1]) == 0 &&
		    make_fixture(&root, "f1", text, &handles[2]) == 0 &&
		    make_fixture(&root, "d", NULL, &handles[3]) == 0 &&
		    make_fixture(&handles[3], "inner", NULL, &handles[4]) == 0;
	nhandles = made ? 5 : 1;
	tap_check(made, "fixtures made over NFS: %u handles to fuzz with", nhandles);
}

static void fuzz_round(int round, uint64_t seed, unsigned messages)
{
	mf_rng_seed(&rng, seed);
	printf("# round %d: seed %llu, %u messages\n", round, (unsigned long long)seed, messages);
	struct conn c;
	unsigned reconnects = 0, stalls = 0, barriers = 0, lost_barriers = 0;
	unsigned long total_replies = 0;
	if (conn_open(&c) != 0) {
		tap_check(false, "round %d: connect", round);
		return;
	}
	uint32_t xid = (uint32_t)round << 24;
	for (unsigned i = 0; i < messages; i++) {
		struct rr_buf body, wire;
		rr_buf_init(&body);
		rr_buf_init(&wire);
		make_message(&body, ++xid);
		bool honest = frame_message(&wire, &body);
		int rc = wire.rb_failed ? -1 : conn_send(&c, wire.rb_data, wire.rb_len);
		rr_buf_fini(&body);
		rr_buf_fini(&wire);
		if (rc == -2) {
			printf("#   message %u: the server stopped reading for %d ms\n", i, FUZZ_STALL_MS);
			stalls++;
		}
		bool reopen = rc != 0 || !honest;
		if (!reopen && (i + 1) % FUZZ_BARRIER_EVERY == 0) {
			barriers++;
			int brc = conn_barrier(&c, 0xb0000000u | i);
			if (brc == -2) {
				printf("#   message %u: barrier NULL not answered within %d ms\n", i, FUZZ_STALL_MS);
				stalls++;
			}
			if (brc != 0) {
				lost_barriers++;
				reopen = true;
			}
		}
		if (reopen) {
			total_replies += c.c_replies;
			conn_close(&c);
			if (!ts_alive(&tgt.mt_srv)) {
				printf("#   the server died after message %u of round %d (seed %llu)\n", i, round,
				       (unsigned long long)seed);
				break;
			}
			if (conn_open(&c) != 0) {
				printf("#   reconnect failed after message %u\n", i);
				break;
			}
			reconnects++;
		}
	}
	total_replies += c.c_replies;
	conn_close(&c);
	printf("#   %u reconnects, %u barriers (%u ended by a close), %lu replies in all\n", reconnects,
	       barriers, lost_barriers, total_replies);
	tap_check(stalls == 0, "round %d (seed %llu): the server never stalled", round, (unsigned long long)seed);
	/* A barrier may be lost when the server closes a connection over a bad message just
	 * before it; most must get through, or the server is closing connections for valid input. */
	tap_check(barriers > 0 && lost_barriers * 4 <= barriers,
		  "round %d: barrier NULLs answered (%u of %u)", round, barriers - lost_barriers, barriers);
	char what[64];
	snprintf(what, sizeof(what), "fuzz round %d", round);
	tap_check(mf_check_health(&tgt, what), "server healthy after fuzz round %d", round);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	uint64_t seed = 20240601u;
	unsigned messages = 4000;
	const char *env = getenv("SHALE_FUZZ_SEED");
	if (env != NULL)
		seed = strtoull(env, NULL, 0);
	env = getenv("SHALE_FUZZ_MESSAGES");
	if (env != NULL)
		messages = (unsigned)strtoul(env, NULL, 0);
	if (!tap_check(mf_start(&tgt) == 0, "server starts and the export mounts"))
		return tap_finish();
	prepare_export();
	fuzz_round(1, seed, messages);
	fuzz_round(2, seed + 1, messages);
	tap_check(ts_stop(&tgt.mt_srv) == 0, "server exits cleanly on SIGTERM");
	return tap_finish();
}
