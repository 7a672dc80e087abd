/* rawrpc.c: a small independent RPC client for tests (see rawrpc.h). */
#include "rawrpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define RR_LAST_FRAGMENT 0x80000000u /* RFC 5531 section 11: record marking */

void rr_buf_init(struct rr_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void rr_buf_fini(struct rr_buf *b)
{
	free(b->rb_data);
	memset(b, 0, sizeof(*b));
}

static bool rr_reserve(struct rr_buf *b, size_t more)
{
	if (b->rb_failed)
		return false;
	if (b->rb_len + more <= b->rb_cap)
		return true;
	size_t cap = b->rb_cap ? b->rb_cap : 256;
	while (cap < b->rb_len + more)
		cap *= 2;
	uint8_t *p = realloc(b->rb_data, cap);
	if (p == NULL) {
		b->rb_failed = true;
		return false;
	}
	b->rb_data = p;
	b->rb_cap = cap;
	return true;
}

void rr_put_bytes(struct rr_buf *b, const void *data, size_t len)
{
	if (len == 0 || !rr_reserve(b, len))
		return;
	memcpy(b->rb_data + b->rb_len, data, len);
	b->rb_len += len;
}

void rr_put_u32(struct rr_buf *b, uint32_t v)
{
	uint8_t p[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	rr_put_bytes(b, p, 4);
}

void rr_put_u64(struct rr_buf *b, uint64_t v)
{
	rr_put_u32(b, (uint32_t)(v >> 32));
	rr_put_u32(b, (uint32_t)v);
}

void rr_put_opaque(struct rr_buf *b, const void *data, uint32_t len)
{
	static const uint8_t zeros[4];
	rr_put_u32(b, len);
	rr_put_bytes(b, data, len);
	rr_put_bytes(b, zeros, (4u - (len & 3u)) & 3u);
}

void rr_put_string(struct rr_buf *b, const char *s)
{
	rr_put_opaque(b, s, (uint32_t)strlen(s));
}

void rr_put_call(struct rr_buf *b, uint32_t xid, uint32_t rpcvers, uint32_t prog, uint32_t vers,
		 uint32_t proc, enum rr_cred cred, uint32_t uid, uint32_t gid)
{
	rr_put_u32(b, xid);
	rr_put_u32(b, 0); /* CALL */
	rr_put_u32(b, rpcvers);
	rr_put_u32(b, prog);
	rr_put_u32(b, vers);
	rr_put_u32(b, proc);
	if (cred == RR_CRED_SYS) {
		struct rr_buf body;
		rr_buf_init(&body);
		rr_put_u32(&body, 0x5348414cu); /* stamp: any value */
		rr_put_string(&body, "shale-test");
		rr_put_u32(&body, uid);
		rr_put_u32(&body, gid);
		rr_put_u32(&body, 0); /* no supplementary gids */
		rr_put_u32(b, 1);     /* AUTH_SYS */
		rr_put_opaque(b, body.rb_data, (uint32_t)body.rb_len);
		if (body.rb_failed)
			b->rb_failed = true;
		rr_buf_fini(&body);
	} else {
		rr_put_u32(b, 0); /* AUTH_NONE */
		rr_put_u32(b, 0);
	}
	rr_put_u32(b, 0); /* verifier AUTH_NONE, empty */
	rr_put_u32(b, 0);
}

void rr_dec_init(struct rr_dec *d, const void *data, size_t len)
{
	d->rd_pos = data;
	d->rd_left = len;
	d->rd_failed = false;
}

uint32_t rr_get_u32(struct rr_dec *d)
{
	if (d->rd_failed || d->rd_left < 4) {
		d->rd_failed = true;
		return 0;
	}
	const uint8_t *p = d->rd_pos;
	d->rd_pos += 4;
	d->rd_left -= 4;
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

uint64_t rr_get_u64(struct rr_dec *d)
{
	uint64_t hi = rr_get_u32(d);
	return (hi << 32) | rr_get_u32(d);
}

void rr_skip(struct rr_dec *d, size_t len)
{
	if (d->rd_failed || d->rd_left < len) {
		d->rd_failed = true;
		return;
	}
	d->rd_pos += len;
	d->rd_left -= len;
}

const uint8_t *rr_get_opaque(struct rr_dec *d, uint32_t max_len, uint32_t *len)
{
	uint32_t n = rr_get_u32(d);
	size_t padded = ((size_t)n + 3u) & ~(size_t)3u;
	if (d->rd_failed || n > max_len || d->rd_left < padded) {
		d->rd_failed = true;
		*len = 0;
		return NULL;
	}
	const uint8_t *p = d->rd_pos;
	rr_skip(d, padded);
	*len = n;
	return p;
}

int rr_parse_reply(const uint8_t *rec, size_t len, struct rr_reply *out)
{
	struct rr_dec d;
	memset(out, 0, sizeof(*out));
	rr_dec_init(&d, rec, len);
	out->rp_xid = rr_get_u32(&d);
	if (rr_get_u32(&d) != 1) /* REPLY */
		return -1;
	out->rp_reply_stat = rr_get_u32(&d);
	if (out->rp_reply_stat == 0) {
		uint32_t vlen;
		rr_get_u32(&d); /* verifier flavor */
		rr_get_opaque(&d, 400, &vlen);
		out->rp_accept_stat = rr_get_u32(&d);
		if (out->rp_accept_stat == 2) { /* PROG_MISMATCH */
			out->rp_low = rr_get_u32(&d);
			out->rp_high = rr_get_u32(&d);
		}
	} else if (out->rp_reply_stat == 1) {
		out->rp_reject_stat = rr_get_u32(&d);
		if (out->rp_reject_stat == 0) {
			out->rp_low = rr_get_u32(&d);
			out->rp_high = rr_get_u32(&d);
		} else if (out->rp_reject_stat == 1) {
			out->rp_auth_stat = rr_get_u32(&d);
		} else {
			return -1;
		}
	} else {
		return -1;
	}
	if (d.rd_failed)
		return -1;
	out->rp_body = d;
	return 0;
}

static void rr_set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = 10, .tv_usec = 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static struct sockaddr_in rr_loopback(uint16_t port)
{
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

int rr_connect_tcp(uint16_t port, uint16_t bind_port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind_port != 0) {
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		struct sockaddr_in local = rr_loopback(bind_port);
		if (bind(fd, (struct sockaddr *)&local, sizeof(local)) != 0)
			goto fail;
	}
	struct sockaddr_in sin = rr_loopback(port);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0)
		goto fail;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	rr_set_timeouts(fd);
	return fd;
fail:
	close(fd);
	return -1;
}

int rr_connect_udp(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sin = rr_loopback(port);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
		close(fd);
		return -1;
	}
	rr_set_timeouts(fd);
	return fd;
}

static int rr_write_all(int fd, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int rr_send_record(int fd, bool tcp, const struct rr_buf *b)
{
	if (b->rb_failed)
		return -1;
	if (!tcp)
		return send(fd, b->rb_data, b->rb_len, MSG_NOSIGNAL) == (ssize_t)b->rb_len ? 0 : -1;
	uint32_t mark = htonl(RR_LAST_FRAGMENT | (uint32_t)b->rb_len);
	if (rr_write_all(fd, &mark, 4) != 0)
		return -1;
	return rr_write_all(fd, b->rb_data, b->rb_len);
}

/* Reads exactly len bytes, waiting at most timeout_ms for each chunk. 0, -1 closed, -2 timeout. */
static int rr_read_exact(int fd, void *buf, size_t len, int timeout_ms)
{
	uint8_t *p = buf;
	while (len > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int n = poll(&pfd, 1, timeout_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			return -2;
		if (n < 0)
			return -1;
		ssize_t r = recv(fd, p, len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

long rr_recv_record(int fd, bool tcp, uint8_t **out, size_t max, int timeout_ms)
{
	*out = NULL;
	if (!tcp) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int n = poll(&pfd, 1, timeout_ms);
		if (n == 0)
			return -2;
		if (n < 0)
			return -1;
		uint8_t *buf = malloc(65536);
		if (buf == NULL)
			return -1;
		ssize_t r = recv(fd, buf, 65536, 0);
		if (r < 0) {
			free(buf);
			return -1;
		}
		*out = buf;
		return (long)r;
	}
	uint8_t *buf = NULL;
	size_t len = 0;
	for (;;) {
		uint32_t mark;
		int rc = rr_read_exact(fd, &mark, 4, timeout_ms);
		if (rc != 0) {
			free(buf);
			return rc;
		}
		mark = ntohl(mark);
		size_t frag = mark & ~RR_LAST_FRAGMENT;
		if (len + frag > max) {
			free(buf);
			return -1;
		}
		uint8_t *nb = realloc(buf, len + frag + 1);
		if (nb == NULL) {
			free(buf);
			return -1;
		}
		buf = nb;
		rc = rr_read_exact(fd, buf + len, frag, timeout_ms);
		if (rc != 0) {
			free(buf);
			return rc;
		}
		len += frag;
		if (mark & RR_LAST_FRAGMENT)
			break;
	}
	*out = buf;
	return (long)len;
}

bool rr_wait_closed(int fd, int timeout_ms)
{
	uint8_t scratch[4096];
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int n = poll(&pfd, 1, timeout_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		ssize_t r = recv(fd, scratch, sizeof(scratch), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return true;
	}
}

int rr_call(int fd, bool tcp, const struct rr_buf *b, uint32_t xid, struct rr_reply *reply,
	    uint8_t **rec_out, int timeout_ms)
{
	if (rec_out != NULL)
		*rec_out = NULL;
	if (rr_send_record(fd, tcp, b) != 0)
		return -1;
	for (int tries = 0; tries < 16; tries++) {
		uint8_t *rec;
		long len = rr_recv_record(fd, tcp, &rec, 4u << 20, timeout_ms);
		if (len < 0)
			return (int)len;
		if (rr_parse_reply(rec, (size_t)len, reply) != 0) {
			free(rec);
			return -1;
		}
		if (reply->rp_xid != xid) { /* a late reply to something else: skip it */
			free(rec);
			continue;
		}
		if (rec_out != NULL)
			*rec_out = rec;
		else
			free(rec);
		return 0;
	}
	return -1;
}

int rr_mount(uint16_t port, const char *path, uint8_t *fh, uint32_t *fh_len)
{
	int fd = rr_connect_tcp(port, 0);
	if (fd < 0)
		return -1;
	struct rr_buf b;
	rr_buf_init(&b);
	rr_put_call(&b, 0x4d4e5401u, 2, RR_PROG_MOUNT, 3, 1 /* MNT */, RR_CRED_SYS, 0, 0);
	rr_put_string(&b, path);
	struct rr_reply rp;
	uint8_t *rec = NULL;
	int result = -1;
	if (rr_call(fd, true, &b, 0x4d4e5401u, &rp, &rec, 10000) == 0 && rp.rp_reply_stat == 0 &&
	    rp.rp_accept_stat == 0) {
		uint32_t status = rr_get_u32(&rp.rp_body);
		if (status == 0) {
			uint32_t n;
			const uint8_t *p = rr_get_opaque(&rp.rp_body, 64, &n);
			if (p != NULL) {
				memcpy(fh, p, n);
				*fh_len = n;
				result = 0;
			}
		} else if (!rp.rp_body.rd_failed) {
			result = (int)status;
		}
	}
	free(rec);
	rr_buf_fini(&b);
	close(fd);
	return result;
}

bool rr_server_healthy(uint16_t port, const uint8_t *fh, uint32_t fh_len)
{
	int fd = rr_connect_tcp(port, 0);
	if (fd < 0)
		return false;
	bool ok = false;
	struct rr_buf b;
	struct rr_reply rp;
	uint8_t *rec = NULL;
	rr_buf_init(&b);
	rr_put_call(&b, 0x48454c31u, 2, RR_PROG_NFS, 3, 0 /* NULL */, RR_CRED_NONE, 0, 0);
	if (rr_call(fd, true, &b, 0x48454c31u, &rp, NULL, 10000) != 0 || rp.rp_reply_stat != 0 ||
	    rp.rp_accept_stat != 0)
		goto out;
	b.rb_len = 0;
	rr_put_call(&b, 0x48454c32u, 2, RR_PROG_NFS, 3, 1 /* GETATTR */, RR_CRED_SYS, 0, 0);
	rr_put_opaque(&b, fh, fh_len);
	if (rr_call(fd, true, &b, 0x48454c32u, &rp, &rec, 10000) != 0 || rp.rp_reply_stat != 0 ||
	    rp.rp_accept_stat != 0)
		goto out;
	uint32_t status = rr_get_u32(&rp.rp_body);
	uint32_t type = rr_get_u32(&rp.rp_body); /* fattr3.type: NF3DIR for an export root */
	ok = !rp.rp_body.rd_failed && status == 0 && type == 2;
out:
	free(rec);
	rr_buf_fini(&b);
	close(fd);
	return ok;
}

int rr_nfs_call(int fd, bool tcp, uint32_t xid, uint32_t proc, const struct rr_buf *args,
		uint32_t *status, uint8_t *fh_out, uint32_t *fh_len_out)
{
	struct rr_buf b;
	struct rr_reply rp;
	uint8_t *rec = NULL;
	rr_buf_init(&b);
	rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, proc, RR_CRED_SYS, 0, 0);
	rr_put_bytes(&b, args->rb_data, args->rb_len);
	int rc = -1;
	if (!b.rb_failed && !args->rb_failed && rr_call(fd, tcp, &b, xid, &rp, &rec, 10000) == 0 &&
	    rp.rp_reply_stat == 0 && rp.rp_accept_stat == 0) {
		*status = rr_get_u32(&rp.rp_body);
		rc = rp.rp_body.rd_failed ? -1 : 0;
		if (rc == 0 && *status == 0 && fh_out != NULL) {
			uint32_t n;
			const uint8_t *h = rr_get_opaque(&rp.rp_body, 64, &n);
			if (h != NULL) {
				memcpy(fh_out, h, n);
				*fh_len_out = n;
			} else {
				rc = -1;
			}
		}
	}
	free(rec);
	rr_buf_fini(&b);
	return rc;
}

int rr_nfs_simple(uint16_t port, uint32_t proc, const struct rr_buf *args, uint32_t *status,
		  uint8_t *fh_out, uint32_t *fh_len_out)
{
	int fd = rr_connect_tcp(port, 0);
	if (fd < 0)
		return -1;
	int rc = rr_nfs_call(fd, true, 0x46495800u + proc, proc, args, status, fh_out, fh_len_out);
	close(fd);
	return rc;
}

/* sattr3 setting the mode only. */
static void rr_put_sattr_mode(struct rr_buf *b, uint32_t mode)
{
	rr_put_u32(b, 1);
	rr_put_u32(b, mode);
	for (int i = 0; i < 5; i++) /* uid, gid, size, atime, mtime: unchanged */
		rr_put_u32(b, 0);
}

int rr_nfs_make(uint16_t port, const uint8_t *dir, uint32_t dir_len, const char *name,
		const char *text, uint32_t mode, uint8_t *fh_out, uint32_t *fh_len_out)
{
	struct rr_buf a;
	uint32_t status = 1;
	rr_buf_init(&a);
	rr_put_opaque(&a, dir, dir_len);
	rr_put_string(&a, name);
	if (text != NULL)
		rr_put_u32(&a, 0); /* createhow3: UNCHECKED */
	rr_put_sattr_mode(&a, mode);
	int rc = rr_nfs_simple(port, text != NULL ? 8 /* CREATE */ : 9 /* MKDIR */, &a, &status,
			       NULL, NULL);
	rr_buf_fini(&a);
	if (rc != 0 || (status != 0 && status != 17 /* NFS3ERR_EXIST */))
		return -1;
	rr_buf_init(&a);
	rr_put_opaque(&a, dir, dir_len);
	rr_put_string(&a, name);
	rc = rr_nfs_simple(port, 3 /* LOOKUP */, &a, &status, fh_out, fh_len_out);
	rr_buf_fini(&a);
	if (rc != 0 || status != 0)
		return -1;
	if (text == NULL)
		return 0;
	rr_buf_init(&a);
	rr_put_opaque(&a, fh_out, *fh_len_out);
	rr_put_u64(&a, 0);
	rr_put_u32(&a, (uint32_t)strlen(text));
	rr_put_u32(&a, 2); /* FILE_SYNC */
	rr_put_opaque(&a, text, (uint32_t)strlen(text));
	rc = rr_nfs_simple(port, 7 /* WRITE */, &a, &status, NULL, NULL);
	rr_buf_fini(&a);
	return rc == 0 && status == 0 ? 0 : -1;
}

int rr_nfs_chmod(uint16_t port, const uint8_t *fh, uint32_t fh_len, uint32_t mode)
{
	struct rr_buf a;
	uint32_t status = 1;
	rr_buf_init(&a);
	rr_put_opaque(&a, fh, fh_len);
	rr_put_sattr_mode(&a, mode);
	rr_put_u32(&a, 0); /* no guard */
	int rc = rr_nfs_simple(port, 2 /* SETATTR */, &a, &status, NULL, NULL);
	rr_buf_fini(&a);
	return rc == 0 && status == 0 ? 0 : -1;
}
