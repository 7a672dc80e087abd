/* rpc.h: ONC RPC version 2 (RFC 5531), server and client side.
 *
 * Server model: an rpc_server owns N event loops (one thread each, normally one per core) and the
 * listening sockets. Each loop has its own TCP listening socket and UDP socket per address, bound
 * to the same port with SO_REUSEPORT; a TCP connection belongs to the loop that accepted it for
 * its whole life. A complete call is parsed into a struct rpc_call and handed to the
 * program's procedure handler on that loop's thread. The handler decodes its arguments from
 * call->rc_args, does its work (possibly asynchronously: the reply may be sent from a later loop
 * turn, always on call->rc_loop's thread) and finishes the call with exactly one of
 * rpc_reply_success, rpc_reply_accept_error, rpc_reply_auth_error or rpc_call_drop. The rpc layer
 * frees the call after that.
 *
 * Buffers: the record a call arrived in is owned by the call and freed when the call finishes, so
 * decoded opaques (file handles, names, WRITE data) point into it with no copy. The reply header
 * and result body live in one buffer the handler sizes with rpc_call_res_init; an optional bulk
 * segment (READ data) is sent from the buffer that holds it by writev and released through its
 * release callback once sent.
 *
 * The rpc layer itself answers the RPC-level errors (RPC_MISMATCH, PROG_UNAVAIL, PROG_MISMATCH,
 * PROC_UNAVAIL, AUTH_ERROR for unknown or malformed credentials), keeps the duplicate request
 * cache for procedures marked non-idempotent, and keeps every client within bounds: record size,
 * connections (per address and in all), memory and calls per connection, memory of the whole
 * server, and a share of each loop's turns per connection (rpc_server.c, "Flow control"). */
#ifndef SHALE_RPC_H
#define SHALE_RPC_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/base.h"
#include "loop/loop.h"
#include "xdr/xdr.h"

/* RFC 5531 section 9 */
enum rpc_auth_flavor { RPC_AUTH_NONE = 0, RPC_AUTH_SYS = 1, RPC_AUTH_SHORT = 2, RPC_AUTH_DH = 3, RPC_AUTH_GSS = 6 };
enum rpc_accept_stat {
	RPC_SUCCESS = 0,
	RPC_PROG_UNAVAIL = 1,
	RPC_PROG_MISMATCH = 2,
	RPC_PROC_UNAVAIL = 3,
	RPC_GARBAGE_ARGS = 4,
	RPC_SYSTEM_ERR = 5,
};
enum rpc_auth_stat {
	RPC_AUTH_OK = 0,
	RPC_AUTH_BADCRED = 1,
	RPC_AUTH_REJECTEDCRED = 2,
	RPC_AUTH_BADVERF = 3,
	RPC_AUTH_REJECTEDVERF = 4,
	RPC_AUTH_TOOWEAK = 5,
	RPC_AUTH_INVALIDRESP = 6,
	RPC_AUTH_FAILED = 7,
};

#define RPC_AUTH_SYS_MAX_GIDS 16     /* RFC 5531 appendix A */
#define RPC_AUTH_SYS_MAX_MACHINE 255 /* RFC 5531 appendix A */

/* The caller's identity as its credential states it (before any export squashing). */
struct rpc_cred {
	uint32_t rcr_flavor; /* RPC_AUTH_NONE or RPC_AUTH_SYS */
	uint32_t rcr_uid;
	uint32_t rcr_gid;
	uint32_t rcr_ngids;
	uint32_t rcr_gids[RPC_AUTH_SYS_MAX_GIDS];
};

enum rpc_transport { RPC_TCP = 1, RPC_UDP = 2 };

struct rpc_conn; /* opaque: one TCP connection or one UDP socket */

#define RPC_BULK_IOVS_MAX 16u /* pieces of one reply's bulk data (rc_bulk_iov) */

struct rpc_call {
	/* ---- read by handlers ---- */
	uint32_t rc_xid;
	uint32_t rc_prog;
	uint32_t rc_vers;
	uint32_t rc_proc;
	struct rpc_cred rc_cred;
	struct sockaddr_storage rc_peer; /* the client's address and port */
	socklen_t rc_peer_len;
	enum rpc_transport rc_transport;
	struct loop *rc_loop;   /* the loop this call runs on; replies are sent from its thread */
	void *rc_prog_ctx;      /* the ctx given to rpc_server_add_program */
	struct xdr_dec rc_args; /* the procedure's arguments, pointing into the call's record */
	/* ---- written by handlers ---- */
	struct xdr_enc rc_res;  /* result body; valid after rpc_call_res_init */
	struct iovec rc_bulk;   /* optional data sent after rc_res (e.g. READ data); no padding added */
	const struct iovec *rc_bulk_iov; /* or, when rc_bulk_iovcnt > 0, these pieces instead */
	unsigned rc_bulk_iovcnt;         /* 0..RPC_BULK_IOVS_MAX; the pieces live until the release */
	void (*rc_bulk_release)(void *arg); /* called once the bulk data was sent or discarded */
	void *rc_bulk_arg;
	uint32_t rc_bulk_pad;   /* zero bytes (0..3) to send after the bulk data for XDR alignment */
	/* Or, on TCP only, rc_bulk_piped: the rc_bulk.iov_len bulk bytes (rc_bulk.iov_base unused)
	 * wait in the pipe whose read end is rc_bulk_pipe_fd, and are spliced from it to the socket.
	 * The rpc layer takes exactly those bytes from the pipe, or none, before the release. */
	bool rc_bulk_piped;
	int rc_bulk_pipe_fd;
	/* ---- the rpc layer's own ---- */
	struct rpc_conn *rc_conn;       /* holds a reference on the connection until the call is freed */
	uint8_t *rc_record;             /* the received record; owned by the call until it finishes */
	size_t rc_record_len;
	struct rpc_buf_pool *rc_record_pool; /* the loop's pool rc_record belongs to; NULL: heap */
	uint8_t *rc_reply_buf;          /* record mark + reply header + result body (rpc_call_res_init) */
	size_t rc_reply_cap;            /* bytes of rc_reply_buf (kept when the call is recycled) */
	bool rc_has_res;                /* rpc_call_res_init succeeded: rc_res writes into it */
	struct rpc_call *rc_next_free;  /* the loop's free calls */
	uint8_t rc_small[40];           /* record mark + header of a reply with no result body */
	unsigned rc_out_iovcnt;         /* entries of rc_out_iov in use */
	size_t rc_out_len;              /* total bytes of the reply record */
	size_t rc_out_sent;             /* TCP: bytes already written */
	struct rpc_call *rc_out_next;   /* TCP: the connection's output queue */
	uint64_t rc_drc_args_hash;      /* hash of the argument bytes, for the duplicate request cache */
	bool rc_drc_tracked;            /* an in-progress cache entry awaits this call's reply */
	size_t rc_charge;               /* memory charged to rc_conn ("Flow control", rpc_server.c) */
	bool rc_finished;               /* a reply function or rpc_call_drop has run */
	struct loop_task rc_task;       /* free for the handler, e.g. to post its completion to rc_loop */
	/* The reply as sent: mark+header(+result), the bulk pieces, padding. Last, because a call
	 * taken for reuse is cleared only up to here: the reply layout writes it before any read. */
	struct iovec rc_out_iov[RPC_BULK_IOVS_MAX + 2];
};

/* A procedure: its handler and whether a retransmission must not execute it twice. */
struct rpc_proc_desc {
	const char *rpd_name;
	void (*rpd_handler)(struct rpc_call *call); /* NULL: PROC_UNAVAIL */
	bool rpd_non_idempotent;                    /* tracked by the duplicate request cache */
};
struct rpc_version_desc {
	uint32_t rvd_vers;
	const struct rpc_proc_desc *rvd_procs; /* indexed by procedure number */
	uint32_t rvd_nprocs;
};
struct rpc_program_desc {
	const char *rpg_name;
	uint32_t rpg_prog;
	const struct rpc_version_desc *rpg_versions;
	uint32_t rpg_nversions;
};

/* Allocates the reply buffer with room for max_res_bytes of result body (plus the RPC reply header
 * in front) and initialises call->rc_res over it. Returns 0 or -ENOMEM (then finish the call with
 * rpc_reply_accept_error(call, RPC_SYSTEM_ERR)). */
SH_MUST_CHECK int rpc_call_res_init(struct rpc_call *call, size_t max_res_bytes);
/* Sends an accepted SUCCESS reply: header, call->rc_res, bulk. If the encoder failed, sends
 * SYSTEM_ERR instead and logs. Finishes the call. Must run on call->rc_loop's thread. */
void rpc_reply_success(struct rpc_call *call);
/* Sends an accepted reply with a non-SUCCESS status (GARBAGE_ARGS, SYSTEM_ERR, PROC_UNAVAIL...).
 * Finishes the call. */
void rpc_reply_accept_error(struct rpc_call *call, enum rpc_accept_stat stat);
/* Sends a denied reply AUTH_ERROR with the given reason. Finishes the call. */
void rpc_reply_auth_error(struct rpc_call *call, enum rpc_auth_stat stat);
/* Finishes the call without any reply. */
void rpc_call_drop(struct rpc_call *call);
/* Source port of the caller, host order (for the `secure` export option). */
uint16_t rpc_call_peer_port(const struct rpc_call *call);

/* ---- server ---- */
#define RPC_IDLE_NEVER UINT32_MAX
/* TCP connections the server may hold past rsc_max_conns while those it chose to close to make
 * room are closing; beyond it a new connection is refused. */
#define RPC_CONNS_SLACK 64u
struct rpc_server_config {
	unsigned rsc_nloops;              /* event loops (threads); 0 = one per online core */
	size_t rsc_max_record_bytes;      /* largest call record accepted (default 1 MiB + 4 KiB) */
	unsigned rsc_max_conns;           /* TCP connections at once (default 4096); a new one
					   * past it closes the least recently active connection
					   * of the address holding the most (rpc_conntab.c) */
	unsigned rsc_max_conns_per_addr;  /* TCP connections from one client address (default
					   * 1024); a new one past it closes that address's least
					   * recently active one */
	size_t rsc_max_conn_buffer_bytes; /* memory one connection may hold: its partial record,
					   * unparsed input, its calls' records and reply buffers
					   * and its queued replies (default 4 MiB); reaching it
					   * stops reading the connection until replies drain */
	unsigned rsc_max_conn_calls;      /* calls one connection may have in progress or
					   * waiting to be sent (default 256); likewise */
	unsigned rsc_drc_entries;         /* duplicate request cache capacity (default 4096) */
	unsigned rsc_idle_timeout_s;      /* close TCP connections idle this long (default 300;
					   * RPC_IDLE_NEVER: never) */
	unsigned rsc_record_timeout_s;    /* close a connection whose partial record got no byte
					   * for this long (default 30) */
	size_t rsc_max_total_buffer_bytes; /* request and reply memory of all connections together
					    * (default 256 MiB), split evenly over the loops. Over
					    * a loop's share, connections holding more than their
					    * fair part of it stop being read until it drains, and
					    * UDP calls are dropped. */
	bool rsc_no_socket_ring;          /* TCP connections wait in epoll and use read/writev,
					   * not the loop's io_uring (rpc_server.c). Also set when
					   * the environment has SHALE_SOCKET_RING=0. */
};
/* A config with every field at its default (fields left 0 in a config mean "default" too). */
void rpc_server_config_default(struct rpc_server_config *config);
struct rpc_server;

/* Creates a server (not yet running). Destroy with rpc_server_destroy. */
SH_MUST_CHECK int rpc_server_create(const struct rpc_server_config *config, struct rpc_server **out);
/* Registers a program; ctx is handed to its handlers as call->rc_prog_ctx. Before start only. */
SH_MUST_CHECK int rpc_server_add_program(struct rpc_server *srv, const struct rpc_program_desc *prog,
					 void *ctx);
/* Listens on addr (numeric IPv4/IPv6) and port (0 = any free port) over the transports in the
 * mask (RPC_TCP | RPC_UDP, same port number for both). *bound_port_out receives the port. Every
 * registered program is served on every listener. Before start only. */
SH_MUST_CHECK int rpc_server_listen(struct rpc_server *srv, const char *addr, uint16_t port,
				    unsigned transport_mask, uint16_t *bound_port_out);
/* Starts the loop threads. Returns 0 or -errno. */
SH_MUST_CHECK int rpc_server_start(struct rpc_server *srv);
/* Number of loops and each loop, for back ends that keep per-loop state. */
unsigned rpc_server_nloops(const struct rpc_server *srv);
struct loop *rpc_server_loop(const struct rpc_server *srv, unsigned index);
/* True once loop index serves its TCP connections through its io_uring (rpc_server.c, "The
 * ring"): decided at the loop's first accepted connection; false before, with
 * rsc_no_socket_ring, or where the kernel refused the ring. */
bool rpc_server_socket_ring(const struct rpc_server *srv, unsigned index);
/* What the server holds now, read from any thread (each figure a moment's, not a snapshot of
 * all together). */
struct rpc_server_stats {
	size_t rss_mem_bytes;      /* request and reply memory held ("Flow control") */
	size_t rss_mem_peak_bytes; /* the most any loop held at once, summed over the loops */
	unsigned rss_conns;        /* open TCP connections */
	unsigned rss_conns_closed_for_room; /* closed to admit a new one, since start */
};
void rpc_server_get_stats(struct rpc_server *srv, struct rpc_server_stats *out);
/* Stops the loops and joins their threads; open connections are closed. */
void rpc_server_stop(struct rpc_server *srv);
void rpc_server_destroy(struct rpc_server *srv);

/* ---- portmapper (RFC 1833, PMAP version 2) ----
 * rpc_portmap_start: if an rpcbind/portmapper answers on 127.0.0.1:111, registers every
 * (program, version, transport, port) the server serves there (SET) and remembers to UNSET them
 * in rpc_portmap_stop. Otherwise, when builtin_allowed, the server answers PMAP NULL, GETPORT and
 * DUMP itself on port 111 (TCP and UDP) of listen_addr. Call after rpc_server_listen and before
 * rpc_server_start. */
enum rpc_portmap_mode { RPC_PORTMAP_NONE, RPC_PORTMAP_REGISTERED, RPC_PORTMAP_BUILTIN };
SH_MUST_CHECK int rpc_portmap_start(struct rpc_server *srv, const char *listen_addr,
				    bool builtin_allowed, enum rpc_portmap_mode *mode_out);
/* Unregisters (REGISTERED mode); the builtin portmapper keeps answering until rpc_server_stop. */
void rpc_portmap_stop(struct rpc_server *srv);
/* The portmapper port rpc_portmap_start probes on 127.0.0.1 and the builtin one binds (default
 * 111). 0: do not probe; run the builtin portmapper on any free port (tests). Before
 * rpc_portmap_start. */
void rpc_portmap_set_port(struct rpc_server *srv, uint16_t port);
/* The port the builtin portmapper listens on, or 0 when it does not run. */
uint16_t rpc_portmap_port(const struct rpc_server *srv);

/* ---- client side (tests, rpcbind registration, later `shale bench`) ---- */
struct rpc_clnt;
/* Connects to addr:port over TCP or UDP. Destroy with rpc_clnt_destroy. */
SH_MUST_CHECK int rpc_clnt_create(const char *addr, uint16_t port, enum rpc_transport transport,
				  struct rpc_clnt **out);
void rpc_clnt_destroy(struct rpc_clnt *clnt);
/* Credential used for following calls (default AUTH_NONE). */
void rpc_clnt_set_cred(struct rpc_clnt *clnt, const struct rpc_cred *cred);
/* The xid of the next call (xids then count up from it); for tests of retransmission handling.
 * The default start is random. */
void rpc_clnt_set_xid(struct rpc_clnt *clnt, uint32_t xid);
/* One synchronous call: sends args (already XDR-encoded) and waits up to timeout_ms (-1: no
 * limit) for the reply; over UDP the call is retransmitted every second meanwhile. Returns:
 *   0: an accepted SUCCESS reply; the result body is copied into res_buf (res_cap bytes) and
 *      *res_len_out set; *accept_stat_out = RPC_SUCCESS, *auth_stat_out = RPC_AUTH_OK.
 *   -EPROTO: an accepted reply with another status (*accept_stat_out set, *auth_stat_out =
 *      RPC_AUTH_OK; for PROG_MISMATCH res_buf receives the XDR low and high versions), or a
 *      denied AUTH_ERROR (*auth_stat_out = the reason, *accept_stat_out = -1).
 *   -EPROTONOSUPPORT: denied RPC_MISMATCH; res_buf receives the XDR low and high versions.
 *   -EMSGSIZE: the result did not fit res_buf; -EBADMSG: an unparseable reply; -ETIMEDOUT; or
 *      another -errno from the socket.
 * Any of the out pointers may be NULL. */
SH_MUST_CHECK int rpc_clnt_call(struct rpc_clnt *clnt, uint32_t prog, uint32_t vers, uint32_t proc,
				const void *args, size_t args_len, void *res_buf, size_t res_cap,
				size_t *res_len_out, int timeout_ms, int *accept_stat_out,
				int *auth_stat_out);
/* Sends msg, a complete RPC message whose first 4 bytes are its xid (over TCP it goes out as one
 * record), and waits up to timeout_ms for a reply with that xid, copied whole into reply_buf.
 * For tests that send hand-made or malformed calls. Returns 0, -ETIMEDOUT, -ECONNRESET (the
 * server closed the connection) or -errno. */
SH_MUST_CHECK int rpc_clnt_exchange(struct rpc_clnt *clnt, const void *msg, size_t msg_len,
				    void *reply_buf, size_t reply_cap, size_t *reply_len_out,
				    int timeout_ms);

/* ---- asynchronous client ----
 * rpc_aclnt: many calls in flight on one TCP connection, driven by a struct loop (load generators,
 * one client per connection, all on the loop's thread). A call is encoded straight into the
 * client's send buffer: rpc_aclnt_call_begin writes the record mark and call header and hands out
 * an encoder for the arguments; rpc_aclnt_call_end closes the record (optionally followed by a
 * bulk segment, e.g. WRITE data, that is sent from the caller's buffer by writev without a copy).
 * Calls accumulate until rpc_aclnt_flush, which sends all of them with one writev; calls begun from
 * inside a done callback are flushed automatically after the batch of replies that ran it. Replies
 * are read many per read(2) and matched to calls by xid (an index into a slot array plus a
 * per-slot generation). The done callback receives the result body as a decoder pointing into the
 * receive buffer, valid only during the callback. The client never allocates per call. */
struct rpc_aclnt;
struct rpc_aclnt_config {
	unsigned rac_max_calls;          /* calls in flight at once (0: 64; at most 65536) */
	uint32_t rac_timeout_ms;         /* a call unanswered this long fails with -ETIMEDOUT
					  * (0: 30000) */
	size_t rac_max_reply_bytes;      /* largest reply record accepted (0: 1 MiB + 4 KiB); a
					  * larger one is a protocol error that fails the connection */
	const struct rpc_cred *rac_cred; /* credential of every call (copied); NULL: AUTH_NONE */
};
/* Completion of one call, run on the loop's thread, exactly once per call that
 * rpc_aclnt_call_end accepted (never after rpc_aclnt_destroy). status:
 *   0           an accepted SUCCESS reply; *res covers the result body (valid during the callback);
 *   -EPROTO     an accepted reply with another accept_stat, or a denied reply (res NULL);
 *   -EBADMSG    a reply that does not parse as an RPC reply;
 *   -ETIMEDOUT  no reply within rac_timeout_ms;
 *   -ECONNRESET or another -errno: the connection failed (every call in flight fails with it). */
typedef void (*rpc_aclnt_done_fn)(void *arg, int status, struct xdr_dec *res);

/* Creates a client on loop (call on the loop's thread or before it runs) and starts a
 * non-blocking connect to addr (numeric IPv4/IPv6) and port; calls may be begun at once, they are
 * sent when the connection is up. Destroy with rpc_aclnt_destroy. Returns 0, -EINVAL, -ENOMEM or
 * -errno. */
SH_MUST_CHECK int rpc_aclnt_create(struct loop *loop, const char *addr, uint16_t port,
				   const struct rpc_aclnt_config *config, struct rpc_aclnt **out);
/* Closes the connection and frees the client. Calls still in flight are dropped without their
 * callbacks running. Not from inside one of the client's own done callbacks. */
void rpc_aclnt_destroy(struct rpc_aclnt *clnt);
/* Starts a call: reserves a slot and max_args_bytes of send buffer, writes the record mark and
 * call header, and sets *enc_out to an encoder (owned by the client) for the arguments. Returns
 * 0, -EAGAIN when every slot is in use, -ENOMEM, or the error that failed the connection. Exactly
 * one of rpc_aclnt_call_end / rpc_aclnt_call_abort must follow before the next begin. */
SH_MUST_CHECK int rpc_aclnt_call_begin(struct rpc_aclnt *clnt, uint32_t prog, uint32_t vers,
				       uint32_t proc, size_t max_args_bytes,
				       struct xdr_enc **enc_out);
/* Finishes the call begun last: bulk_len bytes at bulk (may be 0/NULL) follow the encoded
 * arguments, with XDR padding added. The bulk buffer is not copied: it must stay valid until fn
 * runs (for a call that timed out: until the client is flushed or destroyed). Returns 0 (fn will
 * run exactly once) or -EMSGSIZE when the encoder overflowed (the call is withdrawn, fn never
 * runs). The call is queued; it goes out with the next flush. */
SH_MUST_CHECK int rpc_aclnt_call_end(struct rpc_aclnt *clnt, const void *bulk, size_t bulk_len,
				     rpc_aclnt_done_fn fn, void *arg);
/* Withdraws the call begun last. */
void rpc_aclnt_call_abort(struct rpc_aclnt *clnt);
/* Sends queued calls (as much as the socket takes; the rest goes when it is writable again).
 * Returns 0 or the error that failed the connection. */
SH_MUST_CHECK int rpc_aclnt_flush(struct rpc_aclnt *clnt);
/* Calls in flight (accepted by call_end, done not yet run). */
unsigned rpc_aclnt_in_flight(const struct rpc_aclnt *clnt);
/* Slots free for new calls. */
unsigned rpc_aclnt_free_slots(const struct rpc_aclnt *clnt);
/* 0 while usable; else the negative errno that failed the connection (sticky). */
int rpc_aclnt_error(const struct rpc_aclnt *clnt);
/* True once the TCP connection is established (and has not failed). */
bool rpc_aclnt_connected(const struct rpc_aclnt *clnt);
struct rpc_aclnt_stats {
	uint64_t ras_calls;        /* calls sent */
	uint64_t ras_replies;      /* replies matched to a call */
	uint64_t ras_timeouts;     /* calls failed with -ETIMEDOUT */
	uint64_t ras_stray;        /* replies matching no call in flight (late, after a timeout) */
	uint64_t ras_bytes_out;
	uint64_t ras_bytes_in;
	uint64_t ras_writes;       /* writev system calls */
	uint64_t ras_reads;        /* read system calls */
};
void rpc_aclnt_get_stats(const struct rpc_aclnt *clnt, struct rpc_aclnt_stats *out);

#endif
