/* rawrpc.h: a deliberately small ONC RPC client with its own XDR encoding, for tests that must
 * send exactly the bytes they choose (malformed records, wrong versions, bad credentials, chosen
 * source ports). It shares no code with the server, so a bug in the server's codecs cannot hide
 * behind the same bug here.
 *
 * Wire format (RFC 5531 section 9 and 11): over TCP each record is sent as fragments, each led by
 * a 4-byte big-endian header whose top bit marks the last fragment and whose low 31 bits give the
 * fragment length. A call is: xid, msg_type 0, rpcvers 2, prog, vers, proc, cred (flavor, opaque
 * body), verf (flavor, opaque body), then the procedure's arguments. */
#ifndef SHALE_RAWRPC_H
#define SHALE_RAWRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RR_PROG_NFS 100003u
#define RR_PROG_MOUNT 100005u

/* ---- encoding ---- */
struct rr_buf {
	uint8_t *rb_data;
	size_t rb_len;
	size_t rb_cap;
	bool rb_failed; /* out of memory: the buffer must not be sent */
};
void rr_buf_init(struct rr_buf *b);
void rr_buf_fini(struct rr_buf *b);
void rr_put_u32(struct rr_buf *b, uint32_t v);
void rr_put_u64(struct rr_buf *b, uint64_t v);
void rr_put_bytes(struct rr_buf *b, const void *data, size_t len); /* raw, no length or pad */
void rr_put_opaque(struct rr_buf *b, const void *data, uint32_t len); /* length, data, pad */
void rr_put_string(struct rr_buf *b, const char *s);

/* Credential choices for rr_put_call. */
enum rr_cred { RR_CRED_NONE, RR_CRED_SYS };

/* Appends a call header: xid, CALL, rpcvers, prog, vers, proc, credential (AUTH_SYS with the given
 * uid/gid and no extra groups, or AUTH_NONE) and an AUTH_NONE verifier. */
void rr_put_call(struct rr_buf *b, uint32_t xid, uint32_t rpcvers, uint32_t prog, uint32_t vers,
		 uint32_t proc, enum rr_cred cred, uint32_t uid, uint32_t gid);

/* ---- decoding ---- */
struct rr_dec {
	const uint8_t *rd_pos;
	size_t rd_left;
	bool rd_failed;
};
void rr_dec_init(struct rr_dec *d, const void *data, size_t len);
uint32_t rr_get_u32(struct rr_dec *d);
uint64_t rr_get_u64(struct rr_dec *d);
/* Variable-length opaque: returns a pointer into the buffer (NULL on failure), sets *len. */
const uint8_t *rr_get_opaque(struct rr_dec *d, uint32_t max_len, uint32_t *len);
void rr_skip(struct rr_dec *d, size_t len);

/* A parsed reply header (RFC 5531 section 9, struct rpc_msg with a reply_body). */
struct rr_reply {
	uint32_t rp_xid;
	uint32_t rp_reply_stat;  /* 0 MSG_ACCEPTED, 1 MSG_DENIED */
	uint32_t rp_accept_stat; /* when accepted: SUCCESS, PROG_UNAVAIL, ... */
	uint32_t rp_reject_stat; /* when denied: 0 RPC_MISMATCH, 1 AUTH_ERROR */
	uint32_t rp_auth_stat;   /* when AUTH_ERROR */
	uint32_t rp_low, rp_high; /* PROG_MISMATCH or RPC_MISMATCH versions */
	struct rr_dec rp_body;   /* the results, when accepted with SUCCESS */
};
/* Parses a reply record. Returns 0, or -1 if it is not a well-formed reply. */
int rr_parse_reply(const uint8_t *rec, size_t len, struct rr_reply *out);

/* ---- transport ---- */
/* Connects a TCP socket to 127.0.0.1:port. bind_port 0 = any; otherwise binds that local port
 * first. Returns the fd or -1. The socket has 10 s send and receive timeouts. */
int rr_connect_tcp(uint16_t port, uint16_t bind_port);
/* A UDP socket connected to 127.0.0.1:port, or -1. */
int rr_connect_udp(uint16_t port);
/* Sends b as one record in a single fragment (TCP) or one datagram (UDP). 0 or -1. */
int rr_send_record(int fd, bool tcp, const struct rr_buf *b);
/* Receives one record (all fragments; at most max bytes) into a malloc'd buffer. Returns its
 * length, -1 on close or error, -2 on timeout (timeout_ms). The caller frees *out. */
long rr_recv_record(int fd, bool tcp, uint8_t **out, size_t max, int timeout_ms);
/* True if the peer closed the connection (or reset it) within timeout_ms; replies that arrive
 * meanwhile are read and discarded. */
bool rr_wait_closed(int fd, int timeout_ms);

/* Sends b and waits for the reply whose xid matches, parsing it. rec_out (if not NULL) receives
 * the record buffer (caller frees), and the reply's rp_body points into it; with rec_out NULL the
 * body must not be used. Returns 0, -1 (closed or unparsable) or -2 (timeout). */
int rr_call(int fd, bool tcp, const struct rr_buf *b, uint32_t xid, struct rr_reply *reply,
	    uint8_t **rec_out, int timeout_ms);

/* ---- conveniences built on the above ---- */
/* MOUNT v3 MNT of path: the root handle into fh (up to 64 bytes). Returns the mountstat3 (0 =
 * success) or -1 on an RPC failure. */
int rr_mount(uint16_t port, const char *path, uint8_t *fh, uint32_t *fh_len);
/* One NFS NULL and one GETATTR of fh over a fresh TCP connection; true if both succeed with
 * NFS3_OK and a well-formed reply. */
bool rr_server_healthy(uint16_t port, const uint8_t *fh, uint32_t fh_len);
/* One NFS v3 call as root (AUTH_SYS 0/0) on fd, with the arguments args encodes. *status gets the
 * NFS status (the first result word); with fh_out, a successful reply's first opaque (LOOKUP's
 * handle) is copied there (up to 64 bytes). Returns 0 once a reply was parsed, else -1. */
int rr_nfs_call(int fd, bool tcp, uint32_t xid, uint32_t proc, const struct rr_buf *args,
		uint32_t *status, uint8_t *fh_out, uint32_t *fh_len_out);
/* rr_nfs_call over a fresh TCP connection to port. */
int rr_nfs_simple(uint16_t port, uint32_t proc, const struct rr_buf *args, uint32_t *status,
		  uint8_t *fh_out, uint32_t *fh_len_out);
/* Makes name in dir as root with the given mode (an existing one is reused): a file holding text
 * (written FILE_SYNC), or a directory when text is NULL; its handle goes to fh_out. 0 or -1. */
int rr_nfs_make(uint16_t port, const uint8_t *dir, uint32_t dir_len, const char *name,
		const char *text, uint32_t mode, uint8_t *fh_out, uint32_t *fh_len_out);
/* SETATTR of fh's mode as root. 0 or -1. */
int rr_nfs_chmod(uint16_t port, const uint8_t *fh, uint32_t fh_len, uint32_t mode);

#endif
