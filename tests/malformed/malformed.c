/* malformed.c: hostile and broken input against a private `shale serve`, over raw sockets with this
 * test's own XDR encoding (tests/proto/rawrpc.c), no libnfs.
 *
 * Each attack is followed by the same health check (mfcommon.h): the process is alive, a fresh
 * client gets a NULL and a GETATTR answered, and VmRSS stays within MF_RSS_SLACK_KIB of its
 * start-up level. Where RFC 5531 prescribes an answer (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL,
 * RPC_MISMATCH, AUTH_ERROR, GARBAGE_ARGS) the answer itself is checked; for arguments that cannot
 * be decoded either GARBAGE_ARGS or closing the connection is accepted. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mfcommon.h"
#include "tap.h"

static struct mf_target tgt;
static uint32_t next_xid = 0x10000000u;

enum { NFS_NPROCS = 22, MOUNT_NPROCS = 6 };
static const char *const nfs_proc_names[NFS_NPROCS] = {
	"NULL",   "GETATTR", "SETATTR", "LOOKUP",  "ACCESS", "READLINK", "READ",   "WRITE",
	"CREATE", "MKDIR",   "SYMLINK", "MKNOD",   "REMOVE", "RMDIR",    "RENAME", "LINK",
	"READDIR", "READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT",
};

static int connect_or_note(void)
{
	int fd = rr_connect_tcp(tgt.mt_srv.ts_port, 0);
	if (fd < 0)
		printf("#   connect: %s\n", strerror(errno));
	return fd;
}

/* Sends one call built by the caller and classifies the outcome. */
enum outcome { OUT_REPLY, OUT_CLOSED, OUT_TIMEOUT, OUT_BAD_REPLY };

static enum outcome send_and_classify(int fd, struct rr_buf *b, uint32_t xid, struct rr_reply *rp,
				      int timeout_ms)
{
	int rc = rr_call(fd, true, b, xid, rp, NULL, timeout_ms);
	if (rc == 0)
		return OUT_REPLY;
	if (rc == -2)
		return OUT_TIMEOUT;
	/* -1: closed, or something that does not parse as a reply. rr_call cannot tell which
	 * without the record; both count against the server only if it is not a close. */
	char probe;
	ssize_t n = recv(fd, &probe, 1, MSG_DONTWAIT | MSG_PEEK);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
		return OUT_CLOSED;
	return OUT_BAD_REPLY;
}

/* ---------------------------------------------------------------- record marking */

static void truncated_records(void)
{
	bool ok = true;
	/* A fragment header promising 100 bytes, then 20, then close. */
	for (int i = 0; i < 50; i++) {
		int fd = connect_or_note();
		if (fd < 0) {
			ok = false;
			break;
		}
		uint8_t msg[24];
		uint32_t mark = htonl(0x80000000u | 100u);
		memcpy(msg, &mark, 4);
		memset(msg + 4, 0xab, 20);
		ok = ok && send(fd, msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg);
		close(fd);
	}
	/* Half a fragment header, then close. */
	for (int i = 0; i < 50; i++) {
		int fd = connect_or_note();
		if (fd < 0) {
			ok = false;
			break;
		}
		ok = ok && send(fd, "\x80\x00", 2, MSG_NOSIGNAL) == 2;
		close(fd);
	}
	/* A full call header cut off in the middle of the credential. */
	{
		int fd = connect_or_note();
		struct rr_buf b;
		rr_buf_init(&b);
		rr_put_call(&b, next_xid++, 2, RR_PROG_NFS, 3, 1, RR_CRED_SYS, 0, 0);
		b.rb_len = 30;
		if (fd >= 0) {
			ok = ok && rr_send_record(fd, true, &b) == 0;
			/* The record is complete at the framing level but the header is short: the
			 * server answers nothing it can parse (no xid is trustworthy) or closes. */
			uint8_t *rec = NULL;
			long n = rr_recv_record(fd, true, &rec, 1 << 20, 2000);
			struct rr_reply rp;
			if (n > 0 && rr_parse_reply(rec, (size_t)n, &rp) == 0 && rp.rp_reply_stat == 0 &&
			    rp.rp_accept_stat == 0) {
				printf("#   a 30-byte call was answered with SUCCESS\n");
				ok = false;
			}
			free(rec);
			close(fd);
		}
		rr_buf_fini(&b);
	}
	tap_check(ok, "truncated records sent");
	tap_check(mf_check_health(&tgt, "truncated records"), "server healthy after truncated records");
}

static void huge_fragment(void)
{
	long rss_before = ts_rss_kib(&tgt.mt_srv);
	int fd = connect_or_note();
	if (fd < 0) {
		tap_check(false, "2 GiB fragment header: connect");
		return;
	}
	/* Last-fragment bit plus a length of 2^31 - 1: no server should allocate that up front. */
	uint32_t mark = htonl(0xffffffffu);
	bool sent = send(fd, &mark, 4, MSG_NOSIGNAL) == 4;
	/* Follow it with a few MiB; a server that closes early makes these sends fail, which is
	 * the desired outcome. */
	static uint8_t chunk[65536];
	memset(chunk, 0x42, sizeof(chunk));
	size_t pushed = 0;
	for (int i = 0; i < 64; i++) {
		ssize_t n = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n <= 0)
			break;
		pushed += (size_t)n;
	}
	bool closed = rr_wait_closed(fd, 5000);
	printf("#   pushed %zu bytes after the header; connection closed by server: %d\n", pushed, closed);
	close(fd);
	tap_check(sent && closed, "2 GiB fragment: the server closes the connection");

	/* A non-last fragment that is huge, and one whose running total crosses the limit. */
	fd = connect_or_note();
	if (fd >= 0) {
		bool closed2 = false;
		uint32_t m = htonl(0x7fffff00u); /* not last, ~2 GiB */
		if (send(fd, &m, 4, MSG_NOSIGNAL) == 4)
			closed2 = rr_wait_closed(fd, 5000);
		close(fd);
		tap_check(closed2, "2 GiB non-last fragment: the server closes the connection");
	}
	/* Nothing near the announced size was allocated and touched: a few MiB of buffering at
	 * most (the bound allows for what the pushed bytes may have cost). */
	long rss_after = ts_rss_kib(&tgt.mt_srv);
	tap_check(rss_before > 0 && rss_after > 0 && rss_after - rss_before < 32 * 1024,
		  "2 GiB fragments: VmRSS %ld -> %ld KiB", rss_before, rss_after);
	tap_check(mf_check_health(&tgt, "2 GiB fragments"), "server healthy after 2 GiB fragment headers");
}

static void many_small_fragments(void)
{
	/* A GETATTR of the root sent as many fragments, including empty ones. */
	struct rr_buf b;
	rr_buf_init(&b);
	uint32_t xid = next_xid++;
	rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 1, RR_CRED_SYS, 0, 0);
	rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
	int fd = connect_or_note();
	bool ok = fd >= 0 && !b.rb_failed;
	size_t off = 0;
	size_t sizes[] = { 1, 0, 3, 8, 0, 12, 5 };
	size_t k = 0;
	while (ok && off < b.rb_len) {
		size_t want = sizes[k % (sizeof(sizes) / sizeof(sizes[0]))];
		k++;
		if (want > b.rb_len - off)
			want = b.rb_len - off;
		bool last = off + want == b.rb_len;
		uint32_t mark = htonl((last ? 0x80000000u : 0) | (uint32_t)want);
		ok = send(fd, &mark, 4, MSG_NOSIGNAL) == 4 &&
		     (want == 0 || send(fd, b.rb_data + off, want, MSG_NOSIGNAL) == (ssize_t)want);
		off += want;
	}
	printf("#   GETATTR sent as %zu fragments\n", k);
	uint8_t *rec = NULL;
	long n = ok ? rr_recv_record(fd, true, &rec, 1 << 20, 10000) : -1;
	struct rr_reply rp;
	bool good = n > 0 && rr_parse_reply(rec, (size_t)n, &rp) == 0 && rp.rp_xid == xid &&
		    rp.rp_reply_stat == 0 && rp.rp_accept_stat == 0 && rr_get_u32(&rp.rp_body) == 0 &&
		    rr_get_u32(&rp.rp_body) == 2 /* NF3DIR */;
	free(rec);
	/* The same connection serves a normal single-fragment call afterwards. */
	if (good) {
		b.rb_len = 0;
		xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
		good = rr_call(fd, true, &b, xid, &rp, NULL, 10000) == 0 && rp.rp_accept_stat == 0;
	}
	if (fd >= 0)
		close(fd);
	rr_buf_fini(&b);
	tap_check(good, "multi-fragment record (with empty fragments) is reassembled and answered");
	/* Two calls in one TCP write, pipelined. */
	fd = connect_or_note();
	good = false;
	if (fd >= 0) {
		struct rr_buf both, one;
		rr_buf_init(&both);
		rr_buf_init(&one);
		uint32_t x1 = next_xid++, x2 = next_xid++;
		for (int i = 0; i < 2; i++) {
			one.rb_len = 0;
			rr_put_call(&one, i == 0 ? x1 : x2, 2, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
			rr_put_u32(&both, 0x80000000u | (uint32_t)one.rb_len);
			rr_put_bytes(&both, one.rb_data, one.rb_len);
		}
		int got = 0;
		if (send(fd, both.rb_data, both.rb_len, MSG_NOSIGNAL) == (ssize_t)both.rb_len) {
			for (int i = 0; i < 2; i++) {
				uint8_t *r = NULL;
				long len = rr_recv_record(fd, true, &r, 1 << 20, 10000);
				if (len > 0 && rr_parse_reply(r, (size_t)len, &rp) == 0 &&
				    (rp.rp_xid == x1 || rp.rp_xid == x2) && rp.rp_accept_stat == 0)
					got++;
				free(r);
			}
		}
		good = got == 2;
		rr_buf_fini(&both);
		rr_buf_fini(&one);
		close(fd);
	}
	tap_check(good, "two pipelined calls in one write are both answered");
}

/* ---------------------------------------------------------------- RPC-level errors */

static void rpc_level_errors(void)
{
	int fd = connect_or_note();
	if (fd < 0) {
		tap_check(false, "RPC-level errors: connect");
		return;
	}
	struct rr_buf b;
	struct rr_reply rp;
	rr_buf_init(&b);
	uint32_t xid;

	/* Unknown program: PROG_UNAVAIL. */
	xid = next_xid++;
	rr_put_call(&b, xid, 2, 200099u, 1, 0, RR_CRED_NONE, 0, 0);
	enum outcome o = send_and_classify(fd, &b, xid, &rp, 5000);
	tap_check(o == OUT_REPLY && rp.rp_reply_stat == 0 && rp.rp_accept_stat == 1,
		  "unknown program -> PROG_UNAVAIL (outcome %d, stat %u/%u)", o, rp.rp_reply_stat,
		  rp.rp_accept_stat);

	/* Unknown NFS versions: PROG_MISMATCH with low = high = 3. */
	uint32_t bad_versions[] = { 2, 4, 0, 0xffffffffu };
	for (size_t i = 0; i < sizeof(bad_versions) / sizeof(bad_versions[0]); i++) {
		b.rb_len = 0;
		xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_NFS, bad_versions[i], 0, RR_CRED_NONE, 0, 0);
		o = send_and_classify(fd, &b, xid, &rp, 5000);
		tap_check(o == OUT_REPLY && rp.rp_reply_stat == 0 && rp.rp_accept_stat == 2 &&
				  rp.rp_low == 3 && rp.rp_high == 3,
			  "NFS version %u -> PROG_MISMATCH 3..3 (outcome %d, stat %u, %u..%u)",
			  bad_versions[i], o, rp.rp_accept_stat, rp.rp_low, rp.rp_high);
	}
	/* MOUNT version 4: PROG_MISMATCH whose range includes 3. */
	b.rb_len = 0;
	xid = next_xid++;
	rr_put_call(&b, xid, 2, RR_PROG_MOUNT, 4, 0, RR_CRED_NONE, 0, 0);
	o = send_and_classify(fd, &b, xid, &rp, 5000);
	tap_check(o == OUT_REPLY && rp.rp_accept_stat == 2 && rp.rp_low <= 3 && rp.rp_high >= 3 &&
			  rp.rp_high < 4,
		  "MOUNT version 4 -> PROG_MISMATCH covering 3 (%u..%u)", rp.rp_low, rp.rp_high);

	/* Unknown procedures: PROC_UNAVAIL. */
	uint32_t bad_procs[] = { 22, 23, 1000, 0xffffffffu };
	for (size_t i = 0; i < sizeof(bad_procs) / sizeof(bad_procs[0]); i++) {
		b.rb_len = 0;
		xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, bad_procs[i], RR_CRED_SYS, 0, 0);
		o = send_and_classify(fd, &b, xid, &rp, 5000);
		tap_check(o == OUT_REPLY && rp.rp_reply_stat == 0 && rp.rp_accept_stat == 3,
			  "NFS procedure %u -> PROC_UNAVAIL (outcome %d, stat %u)", bad_procs[i], o,
			  rp.rp_accept_stat);
	}
	b.rb_len = 0;
	xid = next_xid++;
	rr_put_call(&b, xid, 2, RR_PROG_MOUNT, 3, 6, RR_CRED_SYS, 0, 0);
	o = send_and_classify(fd, &b, xid, &rp, 5000);
	tap_check(o == OUT_REPLY && rp.rp_accept_stat == 3, "MOUNT procedure 6 -> PROC_UNAVAIL");

	/* RPC version 3: MSG_DENIED, RPC_MISMATCH, low = high = 2. */
	b.rb_len = 0;
	xid = next_xid++;
	rr_put_call(&b, xid, 3, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
	o = send_and_classify(fd, &b, xid, &rp, 5000);
	tap_check(o == OUT_REPLY && rp.rp_reply_stat == 1 && rp.rp_reject_stat == 0 && rp.rp_low == 2 &&
			  rp.rp_high == 2,
		  "rpcvers 3 -> RPC_MISMATCH 2..2 (outcome %d, reply %u, reject %u, %u..%u)", o,
		  rp.rp_reply_stat, rp.rp_reject_stat, rp.rp_low, rp.rp_high);
	rr_buf_fini(&b);
	close(fd);
	tap_check(mf_check_health(&tgt, "RPC-level errors"), "server healthy after RPC-level errors");
}

/* Builds a call by hand with an arbitrary credential. */
static void put_call_with_cred(struct rr_buf *b, uint32_t xid, uint32_t proc, uint32_t flavor,
			       const void *cred, uint32_t cred_len)
{
	rr_put_u32(b, xid);
	rr_put_u32(b, 0);
	rr_put_u32(b, 2);
	rr_put_u32(b, RR_PROG_NFS);
	rr_put_u32(b, 3);
	rr_put_u32(b, proc);
	rr_put_u32(b, flavor);
	rr_put_opaque(b, cred, cred_len);
	rr_put_u32(b, 0);
	rr_put_u32(b, 0);
}

static void bad_credentials(void)
{
	struct {
		const char *what;
		uint32_t flavor;
		uint8_t body[512];
		uint32_t len;
	} cases[6];
	memset(cases, 0, sizeof(cases));
	struct rr_buf body;
	rr_buf_init(&body);

	/* 0: AUTH_SYS whose body is 8 bytes of noise (too short to hold the structure). */
	cases[0].what = "AUTH_SYS body of 8 bytes";
	cases[0].flavor = 1;
	memcpy(cases[0].body, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	cases[0].len = 8;
	/* 1: AUTH_SYS with a machine name of 300 bytes (limit 255, RFC 5531 appendix A). */
	rr_put_u32(&body, 1);
	{
		char name[301];
		memset(name, 'm', 300);
		name[300] = '\0';
		rr_put_string(&body, name);
	}
	rr_put_u32(&body, 0);
	rr_put_u32(&body, 0);
	rr_put_u32(&body, 0);
	cases[1].what = "AUTH_SYS machine name of 300 bytes";
	cases[1].flavor = 1;
	cases[1].len = (uint32_t)body.rb_len; /* 4 + 4 + 300 + 12 = 320 bytes, under 400 */
	memcpy(cases[1].body, body.rb_data, body.rb_len);
	/* 2: AUTH_SYS claiming 17 gids (limit 16). */
	body.rb_len = 0;
	rr_put_u32(&body, 1);
	rr_put_string(&body, "h");
	rr_put_u32(&body, 0);
	rr_put_u32(&body, 0);
	rr_put_u32(&body, 17);
	for (int i = 0; i < 17; i++)
		rr_put_u32(&body, (uint32_t)i);
	cases[2].what = "AUTH_SYS with 17 gids";
	cases[2].flavor = 1;
	cases[2].len = (uint32_t)body.rb_len;
	memcpy(cases[2].body, body.rb_data, body.rb_len);
	/* 3: AUTH_SYS whose machine-name length runs past the body. */
	body.rb_len = 0;
	rr_put_u32(&body, 1);
	rr_put_u32(&body, 1000);
	rr_put_u32(&body, 0);
	cases[3].what = "AUTH_SYS name length past the body";
	cases[3].flavor = 1;
	cases[3].len = (uint32_t)body.rb_len;
	memcpy(cases[3].body, body.rb_data, body.rb_len);
	/* 4: an unknown flavor. */
	cases[4].what = "credential flavor 12345";
	cases[4].flavor = 12345;
	cases[4].len = 4;
	/* 5: a credential body over the 400-byte limit (RFC 5531 section 8.2). */
	cases[5].what = "credential body of 500 bytes";
	cases[5].flavor = 1;
	cases[5].len = 500;
	memset(cases[5].body, 0, 500);
	rr_buf_fini(&body);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = connect_or_note();
		if (fd < 0) {
			tap_check(false, "%s: connect", cases[i].what);
			continue;
		}
		struct rr_buf b;
		struct rr_reply rp;
		rr_buf_init(&b);
		uint32_t xid = next_xid++;
		put_call_with_cred(&b, xid, 1, cases[i].flavor, cases[i].body, cases[i].len);
		rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
		enum outcome o = send_and_classify(fd, &b, xid, &rp, 5000);
		bool auth_error = o == OUT_REPLY && rp.rp_reply_stat == 1 && rp.rp_reject_stat == 1;
		/* Over-long opaque in the header: a server may also treat the record as garbage and
		 * close; everything else must be answered with AUTH_ERROR. */
		bool ok = auth_error || (i == 5 && o == OUT_CLOSED);
		tap_check(ok, "%s -> AUTH_ERROR (outcome %d, reply %u, reject %u, auth %u)", cases[i].what, o,
			  rp.rp_reply_stat, rp.rp_reject_stat, rp.rp_auth_stat);
		rr_buf_fini(&b);
		close(fd);
	}
	/* AUTH_NONE on a procedure that needs an identity is still answered (as the anonymous
	 * user): GETATTR works on the 0777 export root. */
	int fd = connect_or_note();
	if (fd >= 0) {
		struct rr_buf b;
		struct rr_reply rp;
		rr_buf_init(&b);
		uint32_t xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 1, RR_CRED_NONE, 0, 0);
		rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
		enum outcome o = send_and_classify(fd, &b, xid, &rp, 5000);
		tap_check(o == OUT_REPLY && ((rp.rp_reply_stat == 0 && rp.rp_accept_stat == 0) ||
					     (rp.rp_reply_stat == 1 && rp.rp_reject_stat == 1)),
			  "GETATTR with AUTH_NONE is answered (outcome %d)", o);
		rr_buf_fini(&b);
		close(fd);
	}
	tap_check(mf_check_health(&tgt, "bad credentials"), "server healthy after bad credentials");
}

/* ---------------------------------------------------------------- garbage arguments */

/* Procedures whose whole argument is one handle: a handle alone is a complete call for them. */
static bool handle_only(uint32_t proc)
{
	return proc == 1 || proc == 5 || proc == 18 || proc == 19 || proc == 20;
}

static void garbage_args(void)
{
	struct mf_rng rng;
	mf_rng_seed(&rng, 0x5eedf00dull);
	int fd = connect_or_note();
	int bad = 0, replies = 0, closes = 0;
	for (uint32_t proc = 1; proc < NFS_NPROCS; proc++) {
		/* (a) truncated: a handle length word with nothing after it; (b) a valid handle and
		 * nothing else (for procedures that need more); (c) a name length of ~4 GiB; then
		 * (d) a few rounds of random bytes. */
		for (int variant = 0; variant < 3 + 8; variant++) {
			if (fd < 0)
				fd = connect_or_note();
			if (fd < 0) {
				bad++;
				break;
			}
			if (variant == 1 && handle_only(proc))
				continue;
			struct rr_buf b;
			struct rr_reply rp;
			rr_buf_init(&b);
			uint32_t xid = next_xid++;
			rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, proc, RR_CRED_SYS, 0, 0);
			bool must_be_garbage = variant < 3;
			if (variant == 0) {
				rr_put_u32(&b, 32);
			} else if (variant == 1) {
				rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
			} else if (variant == 2) {
				rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
				/* After the handle comes a length (a name, a second handle), a
				 * bool (SETATTR), or half of a 64-bit offset: all undecodable.
				 * ACCESS alone takes a plain 32-bit mask there, so its call is
				 * complete. */
				rr_put_u32(&b, 0xfffffff0u);
				must_be_garbage = !handle_only(proc) && proc != 4;
			} else {
				uint8_t junk[256];
				uint32_t n = mf_rng_below(&rng, sizeof(junk));
				mf_rng_fill(&rng, junk, n);
				rr_put_bytes(&b, junk, n);
			}
			enum outcome o = send_and_classify(fd, &b, xid, &rp, 5000);
			rr_buf_fini(&b);
			if (o == OUT_REPLY) {
				replies++;
				bool garbage = rp.rp_reply_stat == 0 && rp.rp_accept_stat == 4;
				if (must_be_garbage && !garbage) {
					printf("#   %s variant %d: reply %u/%u, want GARBAGE_ARGS\n",
					       nfs_proc_names[proc], variant, rp.rp_reply_stat, rp.rp_accept_stat);
					bad++;
				}
			} else if (o == OUT_CLOSED) {
				closes++;
				close(fd);
				fd = -1;
			} else {
				printf("#   %s variant %d: outcome %d (timeout or unparsable reply)\n",
				       nfs_proc_names[proc], variant, o);
				bad++;
				close(fd);
				fd = -1;
			}
			if (!ts_alive(&tgt.mt_srv)) {
				printf("#   server died on %s variant %d\n", nfs_proc_names[proc], variant);
				bad++;
				goto out;
			}
		}
	}
	/* MOUNT procedures with garbage too. */
	for (uint32_t proc = 1; proc < MOUNT_NPROCS; proc++) {
		if (fd < 0)
			fd = connect_or_note();
		if (fd < 0)
			break;
		struct rr_buf b;
		struct rr_reply rp;
		rr_buf_init(&b);
		uint32_t xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_MOUNT, 3, proc, RR_CRED_SYS, 0, 0);
		rr_put_u32(&b, 0xfffffff0u); /* a path length far beyond MNTPATHLEN */
		enum outcome o = send_and_classify(fd, &b, xid, &rp, 5000);
		rr_buf_fini(&b);
		/* DUMP, UMNTALL and EXPORT take no arguments: extra bytes may be ignored. */
		bool takes_path = proc == 1 || proc == 3;
		if (o == OUT_REPLY && takes_path && rp.rp_accept_stat != 4) {
			printf("#   MOUNT proc %u: accept_stat %u, want GARBAGE_ARGS\n", proc, rp.rp_accept_stat);
			bad++;
		} else if (o == OUT_CLOSED) {
			close(fd);
			fd = -1;
		} else if (o != OUT_REPLY) {
			bad++;
		}
	}
	/* MNT of the export's path with a NUL and more after it: GARBAGE_ARGS, never the export
	 * (a C string would stop at the NUL). */
	if (fd < 0)
		fd = connect_or_note();
	if (fd >= 0) {
		char path[400];
		size_t plen = strlen(tgt.mt_srv.ts_export_path[0]);
		memcpy(path, tgt.mt_srv.ts_export_path[0], plen);
		memcpy(path + plen, "\0/x", 3);
		struct rr_buf b;
		struct rr_reply rp;
		rr_buf_init(&b);
		uint32_t xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_MOUNT, 3, 1, RR_CRED_SYS, 0, 0);
		rr_put_opaque(&b, path, (uint32_t)plen + 3);
		enum outcome o = send_and_classify(fd, &b, xid, &rp, 5000);
		rr_buf_fini(&b);
		if (o != OUT_REPLY || rp.rp_accept_stat != 4) {
			printf("#   MNT of a path holding a NUL: outcome %d accept_stat %u, want "
			       "GARBAGE_ARGS\n", o, rp.rp_accept_stat);
			bad++;
		}
	}
out:
	if (fd >= 0)
		close(fd);
	printf("#   %d replies, %d connection closes\n", replies, closes);
	tap_check(bad == 0, "garbage and truncated arguments to every procedure: GARBAGE_ARGS or close");
	tap_check(mf_check_health(&tgt, "garbage arguments"), "server healthy after garbage arguments");
}

/* Oversized but well-framed: a WRITE whose data is larger than wtmax, and a call record far above
 * any sane size sent in full. */
static void oversized_calls(void)
{
	int fd = connect_or_note();
	bool ok = fd >= 0;
	if (ok) {
		struct rr_buf b;
		struct rr_reply rp;
		rr_buf_init(&b);
		uint32_t xid = next_xid++;
		rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 7, RR_CRED_SYS, 0, 0);
		rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
		rr_put_u64(&b, 0);
		uint32_t len = 3u << 20; /* 3 MiB, three times wtmax */
		rr_put_u32(&b, len);
		rr_put_u32(&b, 0);
		uint8_t *data = calloc(1, len);
		if (data != NULL)
			rr_put_opaque(&b, data, len);
		free(data);
		enum outcome o = send_and_classify(fd, &b, xid, &rp, 10000);
		/* Acceptable: close (record above the limit), GARBAGE_ARGS, or an NFS error reply
		 * (the root is a directory, so never success). */
		bool fine = o == OUT_CLOSED || (o == OUT_REPLY && rp.rp_reply_stat == 0 &&
						(rp.rp_accept_stat == 4 ||
						 (rp.rp_accept_stat == 0 && rr_get_u32(&rp.rp_body) != 0)));
		if (!fine)
			printf("#   3 MiB WRITE: outcome %d stat %u/%u\n", o, rp.rp_reply_stat, rp.rp_accept_stat);
		ok = fine;
		rr_buf_fini(&b);
		close(fd);
	}
	tap_check(ok, "a 3 MiB WRITE record is refused or failed, not served");
	tap_check(mf_check_health(&tgt, "oversized calls"), "server healthy after oversized calls");
}

static void not_a_call(void)
{
	/* A REPLY message sent to the server, and a message type of 7. */
	int fd = connect_or_note();
	bool ok = fd >= 0;
	if (ok) {
		struct rr_buf b;
		rr_buf_init(&b);
		rr_put_u32(&b, next_xid++);
		rr_put_u32(&b, 1); /* REPLY */
		rr_put_u32(&b, 0);
		rr_put_u32(&b, 0);
		rr_put_u32(&b, 0);
		rr_put_u32(&b, 0);
		ok = rr_send_record(fd, true, &b) == 0;
		b.rb_len = 0;
		rr_put_u32(&b, next_xid++);
		rr_put_u32(&b, 7);
		rr_put_u32(&b, 2);
		if (ok)
			(void)rr_send_record(fd, true, &b);
		/* Neither may be answered with anything that parses as a successful reply. */
		uint8_t *rec = NULL;
		long n = rr_recv_record(fd, true, &rec, 1 << 20, 1000);
		struct rr_reply rp;
		if (n > 0 && rr_parse_reply(rec, (size_t)n, &rp) == 0 && rp.rp_reply_stat == 0 &&
		    rp.rp_accept_stat == 0) {
			printf("#   a non-call message got a SUCCESS reply\n");
			ok = false;
		}
		free(rec);
		rr_buf_fini(&b);
		close(fd);
	}
	tap_check(ok, "messages that are not calls are ignored or refused");
	tap_check(mf_check_health(&tgt, "non-call messages"), "server healthy after non-call messages");
}

/* ---------------------------------------------------------------- UDP */

static void udp_garbage(void)
{
	int fd = rr_connect_udp(tgt.mt_srv.ts_port);
	if (fd < 0) {
		tap_check(false, "UDP socket");
		return;
	}
	struct mf_rng rng;
	mf_rng_seed(&rng, 0x0dd5eedull);
	uint8_t dgram[1500];
	int sent = 0;
	for (int i = 0; i < 2000; i++) {
		uint32_t n = mf_rng_below(&rng, sizeof(dgram));
		mf_rng_fill(&rng, dgram, n);
		if (i % 3 == 0 && n >= 24) {
			/* Plausible header, garbage after it: reaches the dispatcher. */
			uint32_t hdr[6] = { htonl((uint32_t)i), 0, htonl(2), htonl(RR_PROG_NFS), htonl(3),
					    htonl(mf_rng_below(&rng, 24)) };
			memcpy(dgram, hdr, sizeof(hdr));
		}
		if (send(fd, dgram, n, MSG_NOSIGNAL) >= 0)
			sent++;
		/* Drain whatever came back so our receive buffer never fills. */
		while (recv(fd, dgram, sizeof(dgram), MSG_DONTWAIT) > 0) {
		}
	}
	printf("#   %d datagrams sent\n", sent);
	/* A valid NULL over UDP is still answered. */
	struct rr_buf b;
	struct rr_reply rp;
	rr_buf_init(&b);
	uint32_t xid = next_xid++;
	rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
	bool answered = false;
	for (int attempt = 0; attempt < 5 && !answered; attempt++)
		answered = rr_call(fd, false, &b, xid, &rp, NULL, 1000) == 0 && rp.rp_accept_stat == 0;
	rr_buf_fini(&b);
	close(fd);
	tap_check(answered, "UDP NULL answered after 2000 garbage datagrams");
	tap_check(mf_check_health(&tgt, "UDP garbage"), "server healthy after UDP garbage");
}

/* ---------------------------------------------------------------- connection flood */

static void connection_flood(void)
{
	enum { NCONN = 5000 };
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < NCONN + 200) {
		rlim_t want = NCONN + 200;
		if (rl.rlim_max < want && rl.rlim_max != RLIM_INFINITY)
			rl.rlim_max = want; /* root may raise the hard limit */
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			printf("#   setrlimit(%lu): %s\n", (unsigned long)want, strerror(errno));
	}
	/* The steady client connects first and must keep being served throughout. */
	int steady = connect_or_note();
	int *fds = calloc(NCONN, sizeof(int));
	if (steady < 0 || fds == NULL) {
		tap_check(false, "connection flood set-up");
		free(fds);
		if (steady >= 0)
			close(steady);
		return;
	}
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(tgt.mt_srv.ts_port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	int opened = 0, failed = 0, steady_ok = 0, steady_bad = 0;
	struct rr_buf b;
	struct rr_reply rp;
	rr_buf_init(&b);
	for (int i = 0; i < NCONN; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fds[i] < 0) {
			failed++;
			continue;
		}
		if (connect(fds[i], (struct sockaddr *)&sin, sizeof(sin)) != 0 && errno != EINPROGRESS) {
			close(fds[i]);
			fds[i] = -1;
			failed++;
			continue;
		}
		opened++;
		/* Every 250 connections, the steady client asks for a GETATTR. */
		if (i % 250 == 0) {
			b.rb_len = 0;
			uint32_t xid = next_xid++;
			rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 1, RR_CRED_SYS, 0, 0);
			rr_put_opaque(&b, tgt.mt_root, tgt.mt_root_len);
			if (rr_call(steady, true, &b, xid, &rp, NULL, 10000) == 0 && rp.rp_accept_stat == 0)
				steady_ok++;
			else
				steady_bad++;
		}
	}
	/* Half of the flood also sends a partial record and leaves it hanging. */
	for (int i = 0; i < NCONN; i += 2)
		if (fds[i] >= 0)
			(void)send(fds[i], "\x80\x00\x00\x40\x00\x00", 6, MSG_NOSIGNAL | MSG_DONTWAIT);
	long rss_peak = ts_rss_kib(&tgt.mt_srv);
	b.rb_len = 0;
	uint32_t xid = next_xid++;
	rr_put_call(&b, xid, 2, RR_PROG_NFS, 3, 0, RR_CRED_NONE, 0, 0);
	if (rr_call(steady, true, &b, xid, &rp, NULL, 10000) == 0 && rp.rp_accept_stat == 0)
		steady_ok++;
	else
		steady_bad++;
	printf("#   %d connections opened (%d failed locally); steady client %d answered, %d not; "
	       "VmRSS with the flood open %ld KiB\n",
	       opened, failed, steady_ok, steady_bad, rss_peak);
	for (int i = 0; i < NCONN; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	rr_buf_fini(&b);
	close(steady);
	tap_check(opened >= NCONN / 2, "opened at least %d connections (%d)", NCONN / 2, opened);
	tap_check(steady_bad == 0 && steady_ok > 0, "an established client is served during the flood");
	tap_check(rss_peak > 0 && rss_peak < tgt.mt_rss_start_kib + tgt.mt_rss_slack_kib,
		  "VmRSS during the flood stays bounded (%ld KiB)", rss_peak);
	/* Give the server a moment to notice 5000 closes before judging a fresh connection: poll the
	 * health check instead of sleeping a fixed time. */
	bool healthy = false;
	for (int attempt = 0; attempt < 20 && !healthy; attempt++) {
		healthy = rr_server_healthy(tgt.mt_srv.ts_port, tgt.mt_root, tgt.mt_root_len);
		if (!healthy) {
			struct timespec ts = { 0, 250 * 1000000L };
			nanosleep(&ts, NULL);
		}
	}
	tap_check(mf_check_health(&tgt, "5000-connection flood"), "server healthy after the connection flood");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!tap_check(mf_start(&tgt) == 0, "server starts and the export mounts"))
		return tap_finish();
	tap_check(mf_check_health(&tgt, "start"), "server healthy at start");
	truncated_records();
	huge_fragment();
	many_small_fragments();
	rpc_level_errors();
	bad_credentials();
	garbage_args();
	oversized_calls();
	not_a_call();
	udp_garbage();
	connection_flood();
	tap_check(ts_stop(&tgt.mt_srv) == 0, "server exits cleanly on SIGTERM");
	return tap_finish();
}
