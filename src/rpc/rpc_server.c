/* rpc_server.c: the ONC RPC server: listeners, connections, call dispatch and reply sending.
 *
 * Threading
 *   The server owns rs_nloops event loops, each run by one thread (rpc_server_start). Every
 *   listening address gets, per loop, its own TCP listening socket and its own UDP socket, all
 *   bound to the same port with SO_REUSEPORT, so the kernel spreads new connections and UDP
 *   flows over the loops and no loop hands work to another. A TCP connection lives on the loop
 *   whose listener accepted it; everything about it (reading, dispatch, replies, closing) runs on
 *   that loop's thread, so connection state needs no lock. Handlers run on the same thread and
 *   must send their reply from it (rpc.h). Shared between loops are only: the connection count
 *   (an atomic, touched on accept and close), and the duplicate request cache (sharded mutexes,
 *   touched only by non-idempotent procedures). No lock is taken on every request.
 *
 * Connection state machine (TCP)
 *
 *   accepted --> OPEN: reading (LOOP_IN) --buffered >= limit, calls in flight--> PAUSED (no
 *        LOOP_IN until calls finish or replies drain) --> OPEN
 *   OPEN/PAUSED --EOF, error, oversize record, budget breach, idle timeout, stop--> CLOSED
 *   CLOSED --last reference dropped--> freed
 *
 *   Replies completed during a loop turn are queued and written at the end of the turn by one
 *   deferred flush (loop_defer), so the answers to all the calls of one read, or a burst of
 *   back-end completions, cost one writev. When the socket refuses bytes the connection watches
 *   LOOP_OUT until the queue drains. Calls are read
 *   and dispatched as long as the connection is under its buffer limit (pipelining); replies are
 *   queued in completion order, each a whole record, so calls may complete out of order.
 *
 * References: an open connection holds one reference on itself (dropped by rpc_conn_close) and
 * each call in flight holds one. A call whose connection closed while it ran still finishes
 * normally: its reply is discarded (bulk release still called) and its reference dropped; the
 * last reference frees the connection. The read path holds a reference while it dispatches, so a
 * handler that replies at once, and thereby closes the connection on a write error, cannot free
 * it under the reader's feet.
 *
 * Buffers and owners
 *   - rl_scratch (per loop): the bytes of one read(2)/recvfrom(2); copied out before the next.
 *   - cn_rm (per connection): the partial record being reassembled (rpc_record.c). The body of
 *     a large fragment (a big WRITE) is read straight into its record buffer, which comes from
 *     the loop's pool of RPC_POOL_BUFS record-sized buffers when one is free (rl_pool), and goes
 *     back there when its call is freed; a small record (most calls but WRITE) takes one of the
 *     loop's RPC_SMALL_RECORD_BYTES buffers (rl_small_pool) the same way.
 *   - rc_record: a complete record, owned by its call until the call finishes; the handler's
 *     decoded opaques point into it.
 *   - rc_reply_buf / rc_small: 4 bytes of record mark, the reply header, then the result body;
 *     owned by the call. The bulk data (rc_bulk, or the rc_bulk_iov pieces) is the handler's;
 *     rc_bulk_release runs when the call is freed, after the bytes were written or discarded.
 *     Bulk data in a pipe (rc_bulk_piped: a READ's page-cache pages) has an entry with a NULL
 *     base in rc_out_iov; the flush writes what comes before it with writev, then splices the
 *     pipe to the socket (the pages travel without a copy), then goes on with writev.
 *   - A queued reply is its call: the call stays allocated in the connection's output queue
 *     until writev has taken all of its bytes. A freed call goes to its loop's free list
 *     (rl_free_calls, at most RPC_CALL_FREE_MAX) with its reply buffer when that is small, and
 *     the loop's next call reuses both: the steady state allocates nothing per call.
 *
 * Flow control: what no client can break, however it behaves
 *   Memory a connection holds ("held"): its partial record (cn_rm), input read from the socket
 *   but not yet parsed (cn_pend), and what its calls charge (cn_call_mem): each call, from
 *   dispatch until its reply is written or discarded, charges its record, its reply buffer's
 *   whole capacity and its bulk data (rc_charge). A loop's rl_mem is the sum over its
 *   connections, UDP sockets included.
 *   Rules:
 *   1. A connection is "over" when its held memory reaches rsc_max_conn_buffer_bytes, or its
 *      calls (in progress plus replies waiting to be sent, cn_calls) reach rsc_max_conn_calls,
 *      or its loop's rl_mem is over the loop's budget (rsc_max_total_buffer_bytes / nloops)
 *      while the connection has calls and holds at least its fair part of the budget (the
 *      budget over the loop's connections). An over connection dispatches no further call and
 *      its socket is not read: the client's bytes stay in the kernel's socket buffer, and TCP
 *      flow control stops the client. Nothing accepted is dropped; nothing is accepted past
 *      the bound but what a check cannot foresee: the one call that crosses it (a handler
 *      sizing its reply buffer) and input already read (at most one read, kept in cn_pend).
 *   2. The check runs before each record is dispatched, not per read: a read that holds many
 *      calls dispatches them one by one until the connection is over; the rest waits in
 *      cn_pend, and is parsed first when the connection is read again (bytes never overtake).
 *   3. An over connection is no longer over once replies drain or calls finish
 *      (rpc_conn_update, run on each), or, when the loop's budget was the reason, once the
 *      loop's rl_mem falls back under it (rl_wake_task revisits the connections that waited).
 *   4. A connection that is over with no call at all (a partial record larger than its limit)
 *      cannot drain: it is closed and logged. The loop's budget never stops a connection with
 *      no calls, so a large record always completes; but past the budget plus a quarter, a
 *      connection that grows a partial record beyond its fair part is closed instead.
 *      So a loop holds at most about twice its budget (what connections held when it was
 *      crossed, and what those under their fair part may still take), plus one call and one
 *      read per connection.
 *   5. Replies queued with no write progress for RPC_WRITE_STALL_NS (a client that stopped
 *      reading) close the connection, and with it free what it held.
 *   6. A reply buffer much larger than its reply (a handler sized it for a maximum, such as a
 *      READDIRPLUS maxcount) is cut to size when the reply is sent, so queued replies cost
 *      their own bytes.
 *   7. UDP: a datagram that would take the loop past its budget, or its socket past
 *      rsc_max_conn_calls calls in progress, is dropped (the client retransmits); a reply the
 *      socket does not take at once is dropped, never queued.
 *   Connections:
 *   8. The connection table (rpc_conntab.c) admits each new TCP connection: past
 *      rsc_max_conns_per_addr from its address, or past rsc_max_conns in all, it marks the
 *      least recently active connection (of the same address, or of the address holding the
 *      most) to close, and that connection's loop closes it (rl_evict_task). A new connection
 *      is refused only when nothing can be closed.
 *   9. rsc_idle_timeout_s: a connection with no call, no queued reply and no complete record
 *      received or reply written for this long is closed (a slow sender that never completes a
 *      record is idle too). rsc_record_timeout_s: a connection that is being read, has a
 *      partial record, and has received no byte for this long is closed. Both are checked by a
 *      one-second timer per loop.
 *   Fairness:
 *  10. A connection dispatches at most RPC_CALLS_PER_TURN calls per loop turn. When it has
 *      more input, it yields: the rest waits in cn_pend and cn_resume_task, posted to the
 *      loop, serves it again on a later turn, after the other connections ready in the turn
 *      between. A connection keeping thousands of calls queued thus delays another by at most
 *      one share of calls per turn. A UDP socket, all its clients together, takes one share
 *      of datagrams per turn likewise.
 *   Other limits: rsc_max_record_bytes, the whole-record limit, is enforced by the reassembler
 *   before allocating; an oversize record closes the connection. UDP datagrams are at most
 *   64 KiB anyway.
 *
 * Dispatch (rpc_conn_dispatch): parse the header (rpc_msg.c) -> RPC_MISMATCH / AUTH_ERROR ->
 * program (PROG_UNAVAIL), version (PROG_MISMATCH with the registered range), procedure
 * (PROC_UNAVAIL) -> duplicate request cache for non-idempotent procedures -> handler. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "rpc/rpc_impl.h"

#define RPC_SCRATCH_BYTES 65536u     /* one read or datagram; also the UDP datagram limit */
#define RPC_READS_PER_EVENT 16       /* reads per readiness event before yielding to others */
#define RPC_ACCEPTS_PER_EVENT 64
/* Large-record buffers a loop keeps (rpc_record.c rule 4): enough for a few connections
 * streaming 1 MiB WRITEs with some in flight each, small next to the receive budget. */
#define RPC_POOL_BUFS 8u
/* Small records (rpc_record.c rule 5): buffers of this many bytes, at most this many per loop. */
#define RPC_SMALL_RECORD_BYTES 512u
#define RPC_SMALL_POOL_BUFS 1024u
/* A fragment body with at least this much still to come is read straight into its record. */
#define RPC_DIRECT_READ_MIN (16u * 1024u)
#define RPC_WRITEV_IOVS 64           /* iovecs gathered per writev (well under IOV_MAX) */
/* Queued reply bytes beyond which a reply is written at once rather than at the end of the turn:
 * past this a writev is long enough that gathering more saves nothing. */
#define RPC_FLUSH_NOW_BYTES (256u * 1024u)
#define RPC_MAX_PROGRAMS 16
/* Calls one connection dispatches per loop turn before it yields to the others (rule 10): the
 * depth `shale bench` keeps on a connection, so pipelining still gathers replies into one write,
 * while a connection keeping thousands queued delays another by a few tens of microseconds.
 * Measured with hostile.c's flood (docs/performance.md, "A flooding connection"): 32 left a
 * light client's p99 at 3.5x its unloaded value, 16 at 2.1x for 15% less flood throughput. */
#define RPC_CALLS_PER_TURN 16u
/* Unparsed input past which a ring connection's receive is paused (rule 2): a few of the
 * ring's receive buffers. */
#define RPC_PEND_MAX_BYTES (64u * 1024u)
/* A reply buffer this much larger than its reply, and larger than a recycled call keeps, is
 * cut to the reply's size when sent (rule 6). */
#define RPC_REPLY_TRIM_FACTOR 2u
#define RPC_LISTEN_BACKLOG 1024
#define RPC_BIND_ATTEMPTS 16         /* port-0 retries when TCP and UDP cannot share a number */
#define RPC_IDLE_TICK_NS 1000000000ull
/* Queued replies that make no progress for this long mean the client stopped reading. */
#define RPC_WRITE_STALL_NS (30ull * 1000000000ull)
#define RPC_ACCEPT_BACKOFF_NS 100000000ull /* pause accepting 100 ms when out of descriptors */
/* The buffers a loop gives its ring for TCP receives (one buffer group): a receive takes one and
 * the loop hands it back as soon as the bytes are in their record. */
#define RPC_RING_BUFS 64u
#define RPC_RING_BUF_BYTES (16u * 1024u)
#define RPC_RING_BGID 0

struct rpc_prog_entry {
	const struct rpc_program_desc *pe_desc;
	void *pe_ctx;
	uint32_t pe_low; /* lowest and highest registered version, for PROG_MISMATCH */
	uint32_t pe_high;
};

/* One rpc_server_listen call: an address, a port and the programs served there. */
struct rpc_endpoint {
	struct rpc_server *ep_srv;
	bool ep_restricted;              /* serves only ep_prog (the builtin portmapper) */
	struct rpc_prog_entry ep_prog;
	unsigned ep_mask;
	uint16_t ep_port;
};

struct rpc_loop;

/* A TCP listening socket of one endpoint on one loop. */
struct rpc_listener {
	struct rpc_loop *li_rl;
	struct rpc_endpoint *li_ep;
	int li_fd;
	struct loop_watch li_watch;
	bool li_watching;
	struct loop_timer li_backoff; /* re-arms accepting after running out of descriptors */
	bool li_backoff_armed;
};

struct rpc_conn {
	struct rpc_server *cn_srv;
	struct rpc_loop *cn_rl;
	struct rpc_endpoint *cn_ep;
	enum rpc_transport cn_transport;
	int cn_fd;
	struct loop_watch cn_watch;
	bool cn_watching;
	uint32_t cn_events;
	unsigned cn_refs;
	bool cn_closed;
	bool cn_paused;
	struct sockaddr_storage cn_peer; /* TCP only */
	socklen_t cn_peer_len;
	struct rpc_rm cn_rm;
	size_t cn_call_mem;  /* what this connection's calls charge (rc_charge), "Flow control" */
	size_t cn_acct;      /* what this connection last added to its loop's rl_mem */
	size_t cn_out_bytes; /* queued reply bytes not yet written */
	unsigned cn_inflight; /* calls dispatched whose reply is not yet made */
	unsigned cn_calls;    /* calls dispatched and not yet freed (in progress or queued) */
	/* Input read but not parsed (rule 2): cn_pend[cn_pend_off .. cn_pend_len). */
	uint8_t *cn_pend;
	size_t cn_pend_off;
	size_t cn_pend_len;
	size_t cn_pend_cap;
	uint64_t cn_slice_turn_ns; /* the loop turn cn_slice_left belongs to (rule 10) */
	unsigned cn_slice_left;
	bool cn_global_wait;       /* over only by its loop's budget: rl_wake_task looks again */
	struct loop_task cn_resume_task; /* rule 10: serves the connection on a later turn */
	bool cn_resume_queued;     /* cn_resume_task is posted (and holds a reference) */
	uint64_t cn_last_rx_ns;    /* the last byte received (rule 9) */
	struct rpc_conntab_entry cn_tab; /* TCP: its place in the connection table (rule 8) */
	bool cn_tabbed;
	struct rpc_call *cn_out_head;
	struct rpc_call *cn_out_tail;
	struct loop_task cn_flush_task; /* deferred flush at the end of the loop's turn */
	bool cn_flush_queued;           /* cn_flush_task is queued (and holds a reference) */
	/* Ring connections (see "The ring" above): each op in flight holds a reference. */
	bool cn_ring;
	enum { RPC_RECV_IDLE, RPC_RECV_MULTI, RPC_RECV_DIRECT } cn_recv_state;
	bool cn_recv_cancelled;  /* the multishot receive was asked to end */
	struct loop_op cn_recv_op;
	bool cn_send_busy;       /* cn_send_op in flight: the queue's head bytes are the kernel's */
	struct loop_op cn_send_op;
	struct msghdr cn_send_msg;
	struct iovec cn_send_iov[RPC_WRITEV_IOVS];
	bool cn_pollout_busy;    /* waiting for room to splice a reply's piped bulk */
	struct loop_op cn_pollout_op;
	struct rpc_conn *cn_prev; /* the loop's list of open TCP connections */
	struct rpc_conn *cn_next;
};

struct rpc_loop {
	struct rpc_server *rl_srv;
	struct loop *rl_loop;
	pthread_t rl_thread;
	bool rl_thread_started;
	struct loop_timer rl_idle_timer;
	bool rl_timer_armed;
	uint8_t *rl_scratch;
	struct rpc_buf_pool rl_pool;       /* large-record buffers of this loop's connections */
	struct rpc_buf_pool rl_small_pool; /* small-record buffers of the same (rpc_record.c) */
	struct rpc_call *rl_free_calls; /* freed calls kept for reuse, with their reply buffers */
	unsigned rl_nfree_calls;
	size_t rl_mem;      /* memory held by this loop's connections and calls ("Flow control") */
	size_t rl_budget;   /* this loop's part of rsc_max_total_buffer_bytes */
	unsigned rl_nconns; /* open TCP connections of this loop */
	unsigned rl_global_waiters;   /* connections with cn_global_wait */
	struct loop_task rl_wake_task; /* rule 3: revisits them once rl_mem is under the budget */
	bool rl_wake_queued;
	_Atomic size_t rl_mem_seen;     /* rl_mem and its peak, for rpc_server_get_stats */
	_Atomic size_t rl_mem_peak;
	struct loop_task rl_evict_task; /* rule 8: closes this loop's marked connections */
	atomic_bool rl_evict_queued;
	struct rpc_conn *rl_conns;
	struct rpc_conn **rl_udp; /* one UDP conn per endpoint with UDP, NULL otherwise */
	/* The ring's receive buffers, set up on the loop's thread at its first accept. */
	bool rl_ring_checked;
	/* TCP connections of this loop use the ring; set once, on the loop's thread, and read by
	 * rpc_server_socket_ring on others. */
	atomic_bool rl_ring;
	struct io_uring_buf_ring *rl_br;
	uint8_t *rl_br_mem;      /* RPC_RING_BUFS buffers of RPC_RING_BUF_BYTES */
	struct loop_task rl_quiesce_task; /* rpc_server_stop: close this loop's sockets */
	atomic_bool rl_quiesced;
};

struct rpc_server {
	struct rpc_server_config rs_cfg;
	unsigned rs_nloops;
	struct rpc_loop *rs_loops;
	struct rpc_prog_entry rs_progs[RPC_MAX_PROGRAMS];
	unsigned rs_nprogs;
	struct rpc_endpoint **rs_eps;
	unsigned rs_neps;
	struct rpc_listener **rs_listeners;
	unsigned rs_nlisteners;
	struct rpc_conntab *rs_conntab; /* every open TCP connection, by address (rule 8) */
	atomic_uint rs_calls_live; /* calls allocated and not yet freed, for the drain at stop */
	struct rpc_drc *rs_drc;
	bool rs_started;
	bool rs_stopped;
	struct rpc_portmap *rs_portmap;
	uint16_t rs_pmap_port; /* see rpc_portmap_set_port */
};

static const uint8_t rpc_zero_pad[4];

static void rpc_conn_close(struct rpc_conn *conn, const char *why);
static void rpc_conn_update(struct rpc_conn *conn);
static void rpc_conn_ring_recv(struct rpc_conn *conn);

/* ------------------------------------------------------------------------------------------ */
/* Configuration */

void rpc_server_config_default(struct rpc_server_config *config)
{
	memset(config, 0, sizeof(*config));
	config->rsc_nloops = 0;
	config->rsc_max_record_bytes = (1u << 20) + 4096u; /* 1 MiB WRITE data + headers */
	config->rsc_max_conns = 4096;
	/* nconnect=16 from 64 mounts of one client host */
	config->rsc_max_conns_per_addr = 1024;
	config->rsc_max_conn_buffer_bytes = 4u << 20;
	config->rsc_max_conn_calls = 256;
	config->rsc_drc_entries = 4096;
	config->rsc_idle_timeout_s = 300; /* knfsd closes idle connections after 6 minutes */
	config->rsc_record_timeout_s = 30;
	config->rsc_max_total_buffer_bytes = (size_t)256 << 20;
}

static void rpc_config_fill(struct rpc_server_config *cfg, const struct rpc_server_config *given)
{
	struct rpc_server_config def;
	rpc_server_config_default(&def);
	*cfg = given ? *given : def;
	if (cfg->rsc_nloops == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->rsc_nloops = n > 0 ? (unsigned)n : 1;
	}
	if (cfg->rsc_max_record_bytes == 0)
		cfg->rsc_max_record_bytes = def.rsc_max_record_bytes;
	if (cfg->rsc_max_record_bytes > RPC_RM_LEN_MASK)
		cfg->rsc_max_record_bytes = RPC_RM_LEN_MASK;
	if (cfg->rsc_max_conns == 0)
		cfg->rsc_max_conns = def.rsc_max_conns;
	if (cfg->rsc_max_conns_per_addr == 0)
		cfg->rsc_max_conns_per_addr = def.rsc_max_conns_per_addr;
	if (cfg->rsc_max_conn_buffer_bytes == 0)
		cfg->rsc_max_conn_buffer_bytes = def.rsc_max_conn_buffer_bytes;
	if (cfg->rsc_max_conn_calls == 0)
		cfg->rsc_max_conn_calls = def.rsc_max_conn_calls;
	if (cfg->rsc_record_timeout_s == 0)
		cfg->rsc_record_timeout_s = def.rsc_record_timeout_s;
	if (cfg->rsc_drc_entries == 0)
		cfg->rsc_drc_entries = def.rsc_drc_entries;
	if (cfg->rsc_max_total_buffer_bytes == 0)
		cfg->rsc_max_total_buffer_bytes = def.rsc_max_total_buffer_bytes;
	if (cfg->rsc_idle_timeout_s == 0)
		cfg->rsc_idle_timeout_s = def.rsc_idle_timeout_s;
	const char *ring = getenv("SHALE_SOCKET_RING");
	if (ring && strcmp(ring, "0") == 0)
		cfg->rsc_no_socket_ring = true;
}

/* ------------------------------------------------------------------------------------------ */
/* Connections: references, accounting, events */

static void rpc_conn_hold(struct rpc_conn *conn)
{
	conn->cn_refs++;
}

static void rpc_conn_rele(struct rpc_conn *conn)
{
	VERIFY(conn->cn_refs > 0);
	if (--conn->cn_refs > 0)
		return;
	VERIFY(conn->cn_closed);
	if (conn->cn_fd >= 0)
		close(conn->cn_fd); /* a ring connection's, kept until its ops ended */
	mem_free(conn->cn_pend);
	mem_free(conn);
}

/* Memory the connection holds ("Flow control"). */
static size_t rpc_conn_held(const struct rpc_conn *conn)
{
	return rpc_rm_buffered(&conn->cn_rm) + conn->cn_pend_cap + conn->cn_call_mem;
}

static void rpc_loop_wake_waiters(struct loop_task *task);

/* Brings the loop's total up to date with this connection's holdings; when the total falls
 * under the budget with connections waiting for that, has them looked at again (rule 3). */
static void rpc_conn_account(struct rpc_conn *conn)
{
	size_t now = rpc_conn_held(conn);
	struct rpc_loop *rl = conn->cn_rl;
	rl->rl_mem = rl->rl_mem - conn->cn_acct + now;
	conn->cn_acct = now;
	atomic_store_explicit(&rl->rl_mem_seen, rl->rl_mem, memory_order_relaxed);
	if (rl->rl_mem > atomic_load_explicit(&rl->rl_mem_peak, memory_order_relaxed))
		atomic_store_explicit(&rl->rl_mem_peak, rl->rl_mem, memory_order_relaxed);
	if (rl->rl_global_waiters > 0 && rl->rl_mem < rl->rl_budget && !rl->rl_wake_queued &&
	    loop_on_thread(rl->rl_loop)) {
		rl->rl_wake_queued = true;
		loop_post(rl->rl_loop, &rl->rl_wake_task);
	}
}

/* Sets what call charges its connection (rc_charge) to bytes. */
static void rpc_call_charge(struct rpc_call *call, size_t bytes)
{
	struct rpc_conn *conn = call->rc_conn;
	conn->cn_call_mem = conn->cn_call_mem - call->rc_charge + bytes;
	call->rc_charge = bytes;
	rpc_conn_account(conn);
}

/* Rule 1, with *global_out set when the loop's budget is the only reason. */
static bool rpc_conn_over(const struct rpc_conn *conn, bool *global_out)
{
	const struct rpc_server_config *cfg = &conn->cn_srv->rs_cfg;
	const struct rpc_loop *rl = conn->cn_rl;
	size_t held = rpc_conn_held(conn);
	*global_out = false;
	if (held >= cfg->rsc_max_conn_buffer_bytes || conn->cn_calls >= cfg->rsc_max_conn_calls)
		return true;
	if (rl->rl_mem >= rl->rl_budget && conn->cn_calls > 0 &&
	    held >= rl->rl_budget / SH_MAX(rl->rl_nconns, 1u)) {
		*global_out = true;
		return true;
	}
	return false;
}

/* True while the connection may dispatch another call in this turn (rules 1 and 10). */
static bool rpc_conn_may_dispatch(struct rpc_conn *conn)
{
	bool global;
	if (conn->cn_closed || rpc_conn_over(conn, &global))
		return false;
	uint64_t turn = loop_turn_ns(conn->cn_rl->rl_loop);
	if (conn->cn_slice_turn_ns != turn) {
		conn->cn_slice_turn_ns = turn;
		conn->cn_slice_left = RPC_CALLS_PER_TURN;
	}
	return conn->cn_slice_left > 0;
}

/* The connection's last activity, for the idle timeout and the connection table's choice. */
static void rpc_conn_touch(struct rpc_conn *conn)
{
	atomic_store_explicit(&conn->cn_tab.ce_active_ns, loop_turn_ns(conn->cn_rl->rl_loop),
			      memory_order_relaxed);
}

static uint64_t rpc_conn_active_ns(const struct rpc_conn *conn)
{
	return atomic_load_explicit(&conn->cn_tab.ce_active_ns, memory_order_relaxed);
}

/* Frees a received record: back to the loop's pool it came from (NULL: the heap). */
static void rpc_record_free(uint8_t *record, struct rpc_buf_pool *pool)
{
	if (pool)
		rpc_buf_pool_put(pool, record);
	else
		mem_free(record);
}

/* Calls a loop keeps for reuse (rpc_call_alloc), each with its reply buffer when that is at most
 * RPC_CALL_KEEP_REPLY_BYTES: a call then costs no allocation at all once its loop has served a
 * few. Bounded: RPC_CALL_FREE_MAX calls of well under 1 KiB, plus their buffers. */
#define RPC_CALL_FREE_MAX 256u
#define RPC_CALL_KEEP_REPLY_BYTES (16u * 1024u)

static void rpc_call_destroy(struct rpc_call *call)
{
	mem_free(call->rc_reply_buf);
	mem_free(call);
}

/* A zeroed call for rl (its reply buffer kept from an earlier life, if any). Loop thread. */
static struct rpc_call *rpc_call_alloc(struct rpc_loop *rl)
{
	struct rpc_call *call = rl->rl_free_calls;
	if (!call)
		return mem_zalloc(sizeof(*call));
	rl->rl_free_calls = call->rc_next_free;
	rl->rl_nfree_calls--;
	uint8_t *buf = call->rc_reply_buf;
	size_t cap = call->rc_reply_cap;
	memset(call, 0, offsetof(struct rpc_call, rc_out_iov));
	call->rc_reply_buf = buf;
	call->rc_reply_cap = cap;
	return call;
}

/* Keeps a finished call on rl's free list, or frees it. Loop thread (or after it was joined). */
static void rpc_call_recycle(struct rpc_loop *rl, struct rpc_call *call)
{
	if (rl && rl->rl_nfree_calls < RPC_CALL_FREE_MAX) {
		if (call->rc_reply_cap > RPC_CALL_KEEP_REPLY_BYTES) {
			mem_free(call->rc_reply_buf);
			call->rc_reply_buf = NULL;
			call->rc_reply_cap = 0;
		}
		call->rc_next_free = rl->rl_free_calls;
		rl->rl_free_calls = call;
		rl->rl_nfree_calls++;
		return;
	}
	rpc_call_destroy(call);
}

static void rpc_loop_free_calls(struct rpc_loop *rl)
{
	while (rl->rl_free_calls) {
		struct rpc_call *call = rl->rl_free_calls;
		rl->rl_free_calls = call->rc_next_free;
		rpc_call_destroy(call);
	}
	rl->rl_nfree_calls = 0;
}

/* Frees a call (its reply went out or was discarded) and drops its connection reference. */
static void rpc_call_free(struct rpc_call *call)
{
	struct rpc_conn *conn = call->rc_conn;
	if (call->rc_bulk_release) {
		void (*release)(void *) = call->rc_bulk_release;
		call->rc_bulk_release = NULL;
		release(call->rc_bulk_arg);
	}
	if (call->rc_record)
		rpc_record_free(call->rc_record, call->rc_record_pool);
	call->rc_record = NULL;
	if (conn) {
		rpc_call_charge(call, 0);
		VERIFY(conn->cn_calls > 0);
		conn->cn_calls--;
	}
	rpc_call_recycle(conn ? conn->cn_rl : NULL, call);
	if (conn) {
		atomic_fetch_sub_explicit(&conn->cn_srv->rs_calls_live, 1u, memory_order_release);
		rpc_conn_rele(conn);
	}
}

static size_t rpc_conn_pend_bytes(const struct rpc_conn *conn)
{
	return conn->cn_pend_len - conn->cn_pend_off;
}

static void rpc_conn_resume(struct loop_task *task);

/* Has cn_resume_task serve the connection on a later turn (rules 3 and 10). */
static void rpc_conn_post_resume(struct rpc_conn *conn)
{
	if (conn->cn_resume_queued || conn->cn_closed || !loop_on_thread(conn->cn_rl->rl_loop))
		return;
	conn->cn_resume_queued = true;
	rpc_conn_hold(conn);
	conn->cn_resume_task.lt_fn = rpc_conn_resume;
	loop_post(conn->cn_rl->rl_loop, &conn->cn_resume_task);
}

/* Re-derives paused/LOOP_IN/LOOP_OUT from the connection's state and applies the limits
 * ("Flow control"). */
static void rpc_conn_update(struct rpc_conn *conn)
{
	if (conn->cn_closed || conn->cn_transport != RPC_TCP)
		return;
	bool global;
	bool over = rpc_conn_over(conn, &global);
	if (over && conn->cn_calls == 0) {
		rpc_conn_close(conn, "partial record over the per-connection limit"); /* rule 4 */
		return;
	}
	struct rpc_loop *rl = conn->cn_rl;
	if (global != conn->cn_global_wait) {
		conn->cn_global_wait = global;
		if (global)
			rl->rl_global_waiters++;
		else
			rl->rl_global_waiters--;
	}
	if (!over && rpc_conn_pend_bytes(conn) > 0)
		rpc_conn_post_resume(conn);
	conn->cn_paused = over || rpc_conn_pend_bytes(conn) >= RPC_PEND_MAX_BYTES;
	if (conn->cn_ring) {
		rpc_conn_ring_recv(conn); /* starts, or asks to end, the receive */
		return;
	}
	/* Output waits for LOOP_OUT only when the socket refused it; replies queued during this turn
	 * go out with the deferred flush at its end, without an epoll_ctl round trip. */
	bool want_out = conn->cn_out_head != NULL && !conn->cn_flush_queued;
	uint32_t events =
	    (conn->cn_paused ? 0u : (uint32_t)LOOP_IN) | (want_out ? (uint32_t)LOOP_OUT : 0u);
	if (events != conn->cn_events) {
		int rc = loop_watch_mod(conn->cn_rl->rl_loop, &conn->cn_watch, events);
		if (rc < 0) {
			rpc_conn_close(conn, "epoll_ctl failed");
			return;
		}
		conn->cn_events = events;
	}
}

static void rpc_conn_close(struct rpc_conn *conn, const char *why)
{
	if (conn->cn_closed)
		return;
	conn->cn_closed = true;
	struct rpc_loop *rl = conn->cn_rl;
	if (why)
		log_ratelimited(LOG_INFO, "rpc: closing connection (fd %d): %s", conn->cn_fd, why);
	if (conn->cn_watching)
		loop_watch_del(rl->rl_loop, &conn->cn_watch);
	conn->cn_watching = false;
	/* A ring connection's ops end when its socket is shut down (a receive sees the end of
	 * the stream, a send an error, a poll the hang-up). Its descriptor stays open until the
	 * last of them has completed (rpc_conn_rele): an op prepared but not yet submitted names
	 * the socket by number, and a connection accepted meanwhile under the same number would
	 * get the op, and lose the bytes it receives to a closed connection. */
	if (conn->cn_ring) {
		(void)shutdown(conn->cn_fd, SHUT_RDWR);
	} else {
		close(conn->cn_fd);
		conn->cn_fd = -1;
	}
	/* A direct receive in flight may still write into the record: freed when it ends. */
	if (conn->cn_recv_state != RPC_RECV_DIRECT)
		rpc_rm_fini(&conn->cn_rm);
	/* Queued replies are discarded: their calls are complete, only the bytes are left. A send
	 * in flight still reads the head's buffers: its completion frees the queue then. */
	struct rpc_call *call = conn->cn_send_busy ? NULL : conn->cn_out_head;
	if (!conn->cn_send_busy)
		conn->cn_out_head = conn->cn_out_tail = NULL;
	conn->cn_out_bytes = 0;
	mem_free(conn->cn_pend);
	conn->cn_pend = NULL;
	conn->cn_pend_off = conn->cn_pend_len = conn->cn_pend_cap = 0;
	if (conn->cn_global_wait) {
		conn->cn_global_wait = false;
		rl->rl_global_waiters--;
	}
	rpc_conn_account(conn);
	if (conn->cn_transport == RPC_TCP) {
		if (conn->cn_prev)
			conn->cn_prev->cn_next = conn->cn_next;
		else if (rl->rl_conns == conn)
			rl->rl_conns = conn->cn_next;
		if (conn->cn_next)
			conn->cn_next->cn_prev = conn->cn_prev;
		conn->cn_prev = conn->cn_next = NULL;
		rl->rl_nconns--;
	}
	if (conn->cn_tabbed) {
		rpc_conntab_remove(conn->cn_srv->rs_conntab, &conn->cn_tab);
		conn->cn_tabbed = false;
	}
	/* The open reference is dropped last so the frees below cannot free conn early. */
	while (call) {
		struct rpc_call *next = call->rc_out_next;
		rpc_call_free(call);
		call = next;
	}
	rpc_conn_rele(conn);
}

/* ------------------------------------------------------------------------------------------ */
/* Sending */

/* Splices up to len bytes of a reply's piped bulk data to the socket: the bytes written, or -1
 * with errno (EAGAIN: the socket is full). An empty pipe that should hold them is EPIPE. */
static ssize_t rpc_conn_splice(struct rpc_conn *conn, const struct rpc_call *call, size_t len)
{
	ssize_t n = splice(call->rc_bulk_pipe_fd, NULL, conn->cn_fd, NULL, len, SPLICE_F_NONBLOCK);
	if (n == 0) {
		errno = EPIPE;
		return -1;
	}
	if (n < 0 && errno == EAGAIN) {
		/* The socket is full, or (a back-end bug) the pipe holds fewer bytes than promised:
		 * waiting for the socket would then wait forever. */
		int queued = 0;
		if (ioctl(call->rc_bulk_pipe_fd, FIONREAD, &queued) == 0 && queued == 0)
			errno = EPIPE;
		else
			errno = EAGAIN;
	}
	return n;
}

/* Gathers the output queue's next bytes into iov (RPC_WRITEV_IOVS entries at most) and returns
 * how many entries it filled; 0 with *piped set when the next bytes are a reply's bulk data in a
 * pipe (*piped_len of them), which go out by splice. */
static int rpc_conn_gather(const struct rpc_conn *conn, struct iovec *iov,
			   const struct rpc_call **piped, size_t *piped_len)
{
	int n = 0;
	*piped = NULL;
	*piped_len = 0;
	for (struct rpc_call *c = conn->cn_out_head;
	     c && n + (int)c->rc_out_iovcnt <= RPC_WRITEV_IOVS; c = c->rc_out_next) {
		size_t skip = c == conn->cn_out_head ? c->rc_out_sent : 0;
		for (unsigned i = 0; i < c->rc_out_iovcnt; i++) {
			size_t len = c->rc_out_iov[i].iov_len;
			if (skip >= len) {
				skip -= len;
				continue;
			}
			if (c->rc_out_iov[i].iov_base == NULL) {
				/* Piped bulk data: the gathering stops before it. */
				if (n == 0) {
					*piped = c;
					*piped_len = len - skip;
				}
				return n;
			}
			iov[n].iov_base = (uint8_t *)c->rc_out_iov[i].iov_base + skip;
			iov[n].iov_len = len - skip;
			skip = 0;
			n++;
		}
	}
	return n;
}

/* Takes written bytes off the head of the output queue, freeing each call sent whole. */
static void rpc_conn_sent(struct rpc_conn *conn, size_t written)
{
	rpc_conn_touch(conn);
	size_t left = written;
	conn->cn_out_bytes -= left;
	while (left > 0) {
		struct rpc_call *c = conn->cn_out_head;
		size_t rest = c->rc_out_len - c->rc_out_sent;
		if (left < rest) {
			c->rc_out_sent += left;
			break;
		}
		left -= rest;
		conn->cn_out_head = c->rc_out_next;
		if (!conn->cn_out_head)
			conn->cn_out_tail = NULL;
		rpc_call_free(c);
	}
}

static void rpc_conn_ring_send(struct rpc_conn *conn);

/* Writes as much of the output queue as the socket takes (a ring connection: starts its send). */
static void rpc_conn_flush(struct rpc_conn *conn)
{
	if (conn->cn_ring) {
		rpc_conn_ring_send(conn);
		return;
	}
	while (conn->cn_out_head && !conn->cn_closed) {
		struct iovec iov[RPC_WRITEV_IOVS];
		const struct rpc_call *piped;
		size_t piped_len;
		int n = rpc_conn_gather(conn, iov, &piped, &piped_len);
		ssize_t written =
		    piped ? rpc_conn_splice(conn, piped, piped_len) : writev(conn->cn_fd, iov, n);
		if (written < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			rpc_conn_close(conn, piped ? "splice failed" : "write failed");
			return;
		}
		rpc_conn_sent(conn, (size_t)written);
	}
	rpc_conn_update(conn);
}

static void rpc_conn_deferred_flush(struct loop_task *task)
{
	struct rpc_conn *conn = SH_CONTAINER_OF(task, struct rpc_conn, cn_flush_task);
	conn->cn_flush_queued = false;
	if (!conn->cn_closed)
		rpc_conn_flush(conn);
	rpc_conn_rele(conn);
}

/* Sends what the output queue holds: at the end of the loop's turn when called on the loop's
 * thread, so that every reply completed in one turn goes out in one writev (the replies to the
 * calls of one read, or a burst of back-end completions); at once from any other thread (stop)
 * or when the queue has grown large. */
static void rpc_conn_send_queued(struct rpc_conn *conn)
{
	if (conn->cn_flush_queued)
		return;
	if (conn->cn_out_bytes >= RPC_FLUSH_NOW_BYTES || !loop_on_thread(conn->cn_rl->rl_loop)) {
		rpc_conn_flush(conn);
		return;
	}
	conn->cn_flush_queued = true;
	rpc_conn_hold(conn);
	conn->cn_flush_task.lt_fn = rpc_conn_deferred_flush;
	loop_defer(conn->cn_rl->rl_loop, &conn->cn_flush_task);
}

/* Lays out the reply in rc_out_iov: head (record mark included) of head_len bytes, then bulk. */
static void rpc_call_set_out(struct rpc_call *call, uint8_t *head, size_t head_len, bool with_bulk)
{
	call->rc_out_iov[0].iov_base = head;
	call->rc_out_iov[0].iov_len = head_len;
	call->rc_out_iovcnt = 1;
	bool bulk = false;
	if (with_bulk && call->rc_bulk_iovcnt > 0) {
		VERIFY(call->rc_bulk_iovcnt <= RPC_BULK_IOVS_MAX);
		for (unsigned i = 0; i < call->rc_bulk_iovcnt; i++) {
			if (call->rc_bulk_iov[i].iov_len > 0)
				call->rc_out_iov[call->rc_out_iovcnt++] = call->rc_bulk_iov[i];
		}
		bulk = call->rc_out_iovcnt > 1;
	} else if (with_bulk && call->rc_bulk.iov_len > 0) {
		call->rc_out_iov[call->rc_out_iovcnt] = call->rc_bulk;
		if (call->rc_bulk_piped) {
			VERIFY(call->rc_transport == RPC_TCP);
			call->rc_out_iov[call->rc_out_iovcnt].iov_base = NULL; /* the flush splices */
		}
		call->rc_out_iovcnt++;
		bulk = true;
	}
	if (bulk) {
		if (call->rc_bulk_pad > 0) {
			call->rc_out_iov[call->rc_out_iovcnt].iov_base = (void *)rpc_zero_pad;
			call->rc_out_iov[call->rc_out_iovcnt].iov_len = SH_MIN(call->rc_bulk_pad, 3u);
			call->rc_out_iovcnt++;
		}
	}
	size_t total = 0;
	for (unsigned i = 0; i < call->rc_out_iovcnt; i++)
		total += call->rc_out_iov[i].iov_len;
	call->rc_out_len = total;
	xdr_store_u32(head, RPC_RM_LAST | (uint32_t)(total - RPC_RM_HDR_BYTES));
}

static void rpc_drc_key_of(const struct rpc_call *call, struct rpc_drc_key *key)
{
	rpc_drc_key_init(key, &call->rc_peer, call->rc_transport, call->rc_xid, call->rc_prog,
			 call->rc_vers, call->rc_proc, NULL, 0);
	key->rdk_args_hash = call->rc_drc_args_hash;
}

/* Ends a call: releases its record, settles its cache entry, and sends the reply laid out in
 * rc_out_iov (send) or discards it. */
static void rpc_call_finish(struct rpc_call *call, bool send)
{
	VERIFY(!call->rc_finished);
	call->rc_finished = true;
	struct rpc_conn *conn = call->rc_conn;
	ASSERT(loop_on_thread(call->rc_loop) || conn->cn_srv->rs_stopped || !conn->cn_srv->rs_started);
	rpc_conn_hold(conn); /* freeing the call below may otherwise free a closed conn */

	rpc_record_free(call->rc_record, call->rc_record_pool);
	call->rc_record = NULL;
	call->rc_record_pool = NULL;
	call->rc_record_len = 0;
	conn->cn_inflight--;
	/* From here the call charges its reply buffer and bulk data, until it is freed. */
	size_t bulk = send && call->rc_out_iovcnt > 0 ? call->rc_out_len - call->rc_out_iov[0].iov_len
						       : 0;
	rpc_call_charge(call, call->rc_reply_cap + bulk);

	if (call->rc_drc_tracked) {
		struct rpc_drc_key key;
		rpc_drc_key_of(call, &key);
		if (send) {
			/* Stored without the record mark: a replay recomputes it for its transport.
			 * (Piped bulk data cannot be stored: procedures the cache tracks have none.) */
			VERIFY(!call->rc_bulk_piped);
			struct iovec iov[RPC_BULK_IOVS_MAX + 2];
			for (unsigned i = 0; i < call->rc_out_iovcnt; i++)
				iov[i] = call->rc_out_iov[i];
			iov[0].iov_base = (uint8_t *)iov[0].iov_base + RPC_RM_HDR_BYTES;
			iov[0].iov_len -= RPC_RM_HDR_BYTES;
			rpc_drc_complete(conn->cn_srv->rs_drc, &key, iov, call->rc_out_iovcnt);
		} else {
			rpc_drc_abandon(conn->cn_srv->rs_drc, &key);
		}
		call->rc_drc_tracked = false;
	}

	if (!send || conn->cn_closed) {
		rpc_call_free(call);
		rpc_conn_update(conn);
		rpc_conn_rele(conn);
		return;
	}
	if (conn->cn_transport == RPC_UDP) {
		struct iovec iov[RPC_BULK_IOVS_MAX + 2];
		for (unsigned i = 0; i < call->rc_out_iovcnt; i++)
			iov[i] = call->rc_out_iov[i];
		iov[0].iov_base = (uint8_t *)iov[0].iov_base + RPC_RM_HDR_BYTES;
		iov[0].iov_len -= RPC_RM_HDR_BYTES;
		struct msghdr msg = {
			.msg_name = &call->rc_peer,
			.msg_namelen = call->rc_peer_len,
			.msg_iov = iov,
			.msg_iovlen = call->rc_out_iovcnt,
		};
		/* A lost datagram is the client's to retransmit; nothing to queue. */
		if (sendmsg(conn->cn_fd, &msg, MSG_DONTWAIT) < 0)
			log_debug("rpc: UDP reply not sent: %s", strerror(errno));
		rpc_call_free(call);
		rpc_conn_rele(conn);
		return;
	}
	call->rc_out_next = NULL;
	call->rc_out_sent = 0;
	if (conn->cn_out_tail)
		conn->cn_out_tail->rc_out_next = call;
	else
		conn->cn_out_head = call;
	conn->cn_out_tail = call;
	conn->cn_out_bytes += call->rc_out_len;
	rpc_conn_send_queued(conn);
	rpc_conn_rele(conn);
}

int rpc_call_res_init(struct rpc_call *call, size_t max_res_bytes)
{
	size_t need = RPC_REPLY_PREFIX_BYTES + max_res_bytes;
	call->rc_has_res = false;
	if (!call->rc_reply_buf || call->rc_reply_cap < need) {
		mem_free(call->rc_reply_buf);
		call->rc_reply_cap = 0;
		/* at least 1 KiB, so that a recycled call's buffer serves most later replies */
		size_t cap = need < 1024 ? 1024 : need;
		call->rc_reply_buf = mem_alloc(cap);
		if (!call->rc_reply_buf) {
			xdr_enc_init(&call->rc_res, NULL, 0);
			call->rc_res.xe_failed = true;
			return -ENOMEM;
		}
		call->rc_reply_cap = cap;
	}
	xdr_enc_init(&call->rc_res, call->rc_reply_buf + RPC_REPLY_PREFIX_BYTES, max_res_bytes);
	call->rc_has_res = true;
	if (call->rc_conn)
		rpc_call_charge(call, call->rc_record_len + call->rc_reply_cap);
	return 0;
}

/* Rule 6: a reply buffer far larger than the reply it holds is cut to size. */
static void rpc_call_trim_reply(struct rpc_call *call, size_t used)
{
	if (call->rc_reply_cap <= RPC_CALL_KEEP_REPLY_BYTES ||
	    call->rc_reply_cap / RPC_REPLY_TRIM_FACTOR < used)
		return;
	uint8_t *buf = mem_realloc(call->rc_reply_buf, used);
	if (!buf)
		return; /* keeps the larger buffer, still charged in full */
	call->rc_reply_buf = buf;
	call->rc_reply_cap = used;
}

void rpc_reply_success(struct rpc_call *call)
{
	if (call->rc_has_res && xdr_enc_ok(&call->rc_res)) {
		size_t used = RPC_REPLY_PREFIX_BYTES + xdr_enc_len(&call->rc_res);
		rpc_call_trim_reply(call, used);
		rpc_msg_put_accepted(call->rc_reply_buf + RPC_RM_HDR_BYTES, call->rc_xid, RPC_SUCCESS);
		rpc_call_set_out(call, call->rc_reply_buf, used, true);
	} else if (!call->rc_has_res && xdr_enc_ok(&call->rc_res)) {
		/* No result body (e.g. a NULL procedure). */
		rpc_msg_put_accepted(call->rc_small + RPC_RM_HDR_BYTES, call->rc_xid, RPC_SUCCESS);
		rpc_call_set_out(call, call->rc_small, RPC_REPLY_PREFIX_BYTES, true);
	} else {
		log_ratelimited(LOG_ERROR, "rpc: result of prog %u vers %u proc %u overflowed its buffer",
				call->rc_prog, call->rc_vers, call->rc_proc);
		rpc_msg_put_accepted(call->rc_small + RPC_RM_HDR_BYTES, call->rc_xid, RPC_SYSTEM_ERR);
		rpc_call_set_out(call, call->rc_small, RPC_REPLY_PREFIX_BYTES, false);
	}
	rpc_call_finish(call, true);
}

void rpc_reply_accept_error(struct rpc_call *call, enum rpc_accept_stat stat)
{
	rpc_msg_put_accepted(call->rc_small + RPC_RM_HDR_BYTES, call->rc_xid, (uint32_t)stat);
	rpc_call_set_out(call, call->rc_small, RPC_REPLY_PREFIX_BYTES, false);
	rpc_call_finish(call, true);
}

static void rpc_reply_prog_mismatch(struct rpc_call *call, uint32_t low, uint32_t high)
{
	size_t n = rpc_msg_put_prog_mismatch(call->rc_small + RPC_RM_HDR_BYTES, call->rc_xid, low, high);
	rpc_call_set_out(call, call->rc_small, RPC_RM_HDR_BYTES + n, false);
	rpc_call_finish(call, true);
}

static void rpc_reply_rpc_mismatch(struct rpc_call *call)
{
	size_t n = rpc_msg_put_rpc_mismatch(call->rc_small + RPC_RM_HDR_BYTES, call->rc_xid);
	rpc_call_set_out(call, call->rc_small, RPC_RM_HDR_BYTES + n, false);
	rpc_call_finish(call, true);
}

void rpc_reply_auth_error(struct rpc_call *call, enum rpc_auth_stat stat)
{
	size_t n = rpc_msg_put_auth_error(call->rc_small + RPC_RM_HDR_BYTES, call->rc_xid, (uint32_t)stat);
	rpc_call_set_out(call, call->rc_small, RPC_RM_HDR_BYTES + n, false);
	rpc_call_finish(call, true);
}

void rpc_call_drop(struct rpc_call *call)
{
	rpc_call_finish(call, false);
}

uint16_t rpc_call_peer_port(const struct rpc_call *call)
{
	if (call->rc_peer.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)&call->rc_peer)->sin_port);
	if (call->rc_peer.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)&call->rc_peer)->sin6_port);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Dispatch */

static const struct rpc_prog_entry *rpc_find_program(const struct rpc_conn *conn, uint32_t prog)
{
	if (conn->cn_ep->ep_restricted)
		return conn->cn_ep->ep_prog.pe_desc->rpg_prog == prog ? &conn->cn_ep->ep_prog : NULL;
	const struct rpc_server *srv = conn->cn_srv;
	for (unsigned i = 0; i < srv->rs_nprogs; i++)
		if (srv->rs_progs[i].pe_desc->rpg_prog == prog)
			return &srv->rs_progs[i];
	return NULL;
}

/* Resends a cached reply (without record mark) for a retransmitted call. Takes ownership. */
static void rpc_call_replay(struct rpc_call *call, uint8_t *reply, size_t len)
{
	uint8_t *buf = mem_alloc(len + RPC_RM_HDR_BYTES);
	if (!buf) {
		mem_free(reply);
		rpc_call_drop(call);
		return;
	}
	memcpy(buf + RPC_RM_HDR_BYTES, reply, len);
	mem_free(reply);
	mem_free(call->rc_reply_buf);
	call->rc_reply_buf = buf;
	call->rc_reply_cap = len + RPC_RM_HDR_BYTES;
	rpc_call_set_out(call, buf, len + RPC_RM_HDR_BYTES, false);
	rpc_call_finish(call, true);
}

/* Takes ownership of record (len bytes, from peer; from pool, one of the loop's, or the heap when
 * NULL) and runs the call it holds. */
static void rpc_conn_dispatch(struct rpc_conn *conn, uint8_t *record, size_t len,
                              struct rpc_buf_pool *pool,
			      const struct sockaddr_storage *peer, socklen_t peer_len)
{
	struct rpc_call_hdr hdr;
	struct xdr_dec args;
	enum rpc_auth_stat auth_stat;
	enum rpc_parse_result pr = rpc_msg_parse_call(record, len, &hdr, &args, &auth_stat);
	if (pr == RPC_PARSE_DROP) {
		log_ratelimited(LOG_WARN, "rpc: dropped a %zu-byte message that is not an RPC call", len);
		rpc_record_free(record, pool);
		return;
	}
	struct rpc_call *call = rpc_call_alloc(conn->cn_rl);
	if (!call) {
		log_ratelimited(LOG_WARN, "rpc: no memory for a call; dropped");
		rpc_record_free(record, pool);
		return;
	}
	call->rc_xid = hdr.rch_xid;
	call->rc_prog = hdr.rch_prog;
	call->rc_vers = hdr.rch_vers;
	call->rc_proc = hdr.rch_proc;
	call->rc_cred = hdr.rch_cred;
	memcpy(&call->rc_peer, peer, peer_len);
	call->rc_peer_len = peer_len;
	call->rc_transport = conn->cn_transport;
	call->rc_loop = conn->cn_rl->rl_loop;
	call->rc_args = args;
	call->rc_conn = conn;
	call->rc_record = record;
	call->rc_record_len = len;
	call->rc_record_pool = pool;
	rpc_conn_hold(conn);
	atomic_fetch_add_explicit(&conn->cn_srv->rs_calls_live, 1u, memory_order_relaxed);
	conn->cn_inflight++;
	conn->cn_calls++;
	rpc_call_charge(call, len + call->rc_reply_cap);

	if (pr == RPC_PARSE_RPC_MISMATCH) {
		rpc_reply_rpc_mismatch(call);
		return;
	}
	if (pr == RPC_PARSE_AUTH_ERROR) {
		rpc_reply_auth_error(call, auth_stat);
		return;
	}
	const struct rpc_prog_entry *pe = rpc_find_program(conn, hdr.rch_prog);
	if (!pe) {
		rpc_reply_accept_error(call, RPC_PROG_UNAVAIL);
		return;
	}
	const struct rpc_version_desc *vd = NULL;
	for (uint32_t i = 0; i < pe->pe_desc->rpg_nversions; i++)
		if (pe->pe_desc->rpg_versions[i].rvd_vers == hdr.rch_vers)
			vd = &pe->pe_desc->rpg_versions[i];
	if (!vd) {
		rpc_reply_prog_mismatch(call, pe->pe_low, pe->pe_high);
		return;
	}
	if (hdr.rch_proc >= vd->rvd_nprocs || !vd->rvd_procs[hdr.rch_proc].rpd_handler) {
		rpc_reply_accept_error(call, RPC_PROC_UNAVAIL);
		return;
	}
	const struct rpc_proc_desc *pd = &vd->rvd_procs[hdr.rch_proc];
	call->rc_prog_ctx = pe->pe_ctx;
	if (pd->rpd_non_idempotent) {
		struct rpc_drc_key key;
		rpc_drc_key_init(&key, &call->rc_peer, call->rc_transport, call->rc_xid, call->rc_prog,
				 call->rc_vers, call->rc_proc, args.xd_pos, xdr_dec_remaining(&args));
		call->rc_drc_args_hash = key.rdk_args_hash;
		enum rpc_drc_state state;
		uint8_t *reply;
		size_t reply_len;
		int rc = rpc_drc_begin(conn->cn_srv->rs_drc, &key, &state, &reply, &reply_len);
		if (rc == 0 && state == RPC_DRC_IN_PROGRESS) {
			rpc_call_drop(call);
			return;
		}
		if (rc == 0 && state == RPC_DRC_DONE) {
			rpc_call_replay(call, reply, reply_len);
			return;
		}
		call->rc_drc_tracked = rc == 0;
	}
	pd->rpd_handler(call);
}

/* ------------------------------------------------------------------------------------------ */
/* Readiness callbacks */

/* Takes a completed record from the reassembler and dispatches it. Returns false when the
 * connection was closed. */
static bool rpc_conn_take_record(struct rpc_conn *conn, uint8_t *record, size_t record_len)
{
	rpc_conn_touch(conn);
	if (conn->cn_slice_left > 0)
		conn->cn_slice_left--;
	if (record)
		rpc_conn_dispatch(conn, record, record_len, conn->cn_rm.rm_out_pool, &conn->cn_peer,
				  conn->cn_peer_len);
	else
		log_ratelimited(LOG_WARN, "rpc: dropped an empty record");
	return !conn->cn_closed;
}

/* Rule 4's last part: past the loop's budget and a quarter, a partial record may not grow past
 * its connection's fair part. Returns false when it closed the connection. */
static bool rpc_conn_check_partial(struct rpc_conn *conn)
{
	const struct rpc_loop *rl = conn->cn_rl;
	if (rl->rl_mem <= rl->rl_budget + rl->rl_budget / 4 ||
	    rpc_rm_buffered(&conn->cn_rm) <= rl->rl_budget / SH_MAX(rl->rl_nconns, 1u))
		return true;
	log_ratelimited(LOG_WARN, "rpc: loop %u over its memory budget; closing a connection "
			"growing a partial record", loop_index(rl->rl_loop));
	rpc_conn_close(conn, NULL);
	return false;
}

/* Commits n bytes read straight into the record's body; false when the connection closed. */
static bool rpc_conn_body_read(struct rpc_conn *conn, size_t n)
{
	uint8_t *record;
	size_t record_len;
	conn->cn_last_rx_ns = loop_turn_ns(conn->cn_rl->rl_loop);
	int rc = rpc_rm_body_commit(&conn->cn_rm, n, &record, &record_len);
	rpc_conn_account(conn);
	if (rc == 1)
		return rpc_conn_take_record(conn, record, record_len);
	return rpc_conn_check_partial(conn);
}

/* Parses input, dispatching each record it completes, while the connection may go on (rules 1,
 * 2 and 10). Returns the bytes consumed (n, or fewer when it had to stop: the rest is the
 * caller's to keep, in order), or -1 when the connection closed. */
static ssize_t rpc_conn_consume(struct rpc_conn *conn, const uint8_t *data, size_t n)
{
	size_t off = 0;
	while (off < n && rpc_conn_may_dispatch(conn)) {
		size_t used;
		uint8_t *record;
		size_t record_len;
		int rc = rpc_rm_feed(&conn->cn_rm, data + off, n - off, &used, &record,
				     &record_len);
		off += used;
		rpc_conn_account(conn);
		if (rc < 0) {
			log_ratelimited(LOG_WARN, "rpc: %s from a client; closing its connection",
					rc == -EMSGSIZE ? "record over the size limit"
							: "no memory for a record");
			rpc_conn_close(conn, NULL);
			return -1;
		}
		if (rc == 1 ? !rpc_conn_take_record(conn, record, record_len)
			    : !rpc_conn_check_partial(conn))
			return -1;
	}
	return conn->cn_closed ? -1 : (ssize_t)off;
}

/* Keeps input the connection could not parse yet at the end of cn_pend. False: no memory. */
static bool rpc_conn_pend_add(struct rpc_conn *conn, const uint8_t *data, size_t n)
{
	if (conn->cn_pend_off > 0) {
		memmove(conn->cn_pend, conn->cn_pend + conn->cn_pend_off, rpc_conn_pend_bytes(conn));
		conn->cn_pend_len -= conn->cn_pend_off;
		conn->cn_pend_off = 0;
	}
	if (conn->cn_pend_len + n > conn->cn_pend_cap) {
		size_t cap = SH_MAX(conn->cn_pend_len + n, (size_t)4096);
		uint8_t *buf = mem_realloc(conn->cn_pend, cap);
		if (!buf)
			return false;
		conn->cn_pend = buf;
		conn->cn_pend_cap = cap;
	}
	memcpy(conn->cn_pend + conn->cn_pend_len, data, n);
	conn->cn_pend_len += n;
	rpc_conn_account(conn);
	return true;
}

/* Parses what cn_pend holds as far as the connection may go on; frees it once empty. Returns
 * false when the connection closed. */
static bool rpc_conn_pend_drain(struct rpc_conn *conn)
{
	if (rpc_conn_pend_bytes(conn) == 0)
		return !conn->cn_closed;
	ssize_t used = rpc_conn_consume(conn, conn->cn_pend + conn->cn_pend_off,
					rpc_conn_pend_bytes(conn));
	if (used < 0)
		return false;
	conn->cn_pend_off += (size_t)used;
	if (rpc_conn_pend_bytes(conn) == 0) {
		mem_free(conn->cn_pend);
		conn->cn_pend = NULL;
		conn->cn_pend_off = conn->cn_pend_len = conn->cn_pend_cap = 0;
		rpc_conn_account(conn);
	}
	return true;
}

/* Takes n bytes received from the socket: parsed at once when nothing waits before them,
 * else (or for what cannot be parsed now) kept in cn_pend. False when the connection closed. */
static bool rpc_conn_input(struct rpc_conn *conn, const uint8_t *data, size_t n)
{
	conn->cn_last_rx_ns = loop_turn_ns(conn->cn_rl->rl_loop);
	size_t off = 0;
	if (rpc_conn_pend_bytes(conn) == 0) {
		ssize_t used = rpc_conn_consume(conn, data, n);
		if (used < 0)
			return false;
		off = (size_t)used;
	}
	if (off < n && !rpc_conn_pend_add(conn, data + off, n - off)) {
		log_ratelimited(LOG_WARN, "rpc: no memory for a connection's input; closing it");
		rpc_conn_close(conn, NULL);
		return false;
	}
	return true;
}

/* Serves a connection that yielded or waited, on a later turn (rules 3 and 10): parses its kept
 * input, then (epoll) reads on. */
static void rpc_conn_read(struct rpc_conn *conn);
static void rpc_conn_resume(struct loop_task *task)
{
	struct rpc_conn *conn = SH_CONTAINER_OF(task, struct rpc_conn, cn_resume_task);
	conn->cn_resume_queued = false;
	if (!conn->cn_closed) {
		if (conn->cn_ring)
			(void)rpc_conn_pend_drain(conn);
		else
			rpc_conn_read(conn);
		rpc_conn_update(conn);
	}
	rpc_conn_rele(conn);
}

/* Rule 3: the loop's memory is back under its budget; connections that waited for that are
 * looked at again. */
static void rpc_loop_wake_waiters(struct loop_task *task)
{
	struct rpc_loop *rl = SH_CONTAINER_OF(task, struct rpc_loop, rl_wake_task);
	rl->rl_wake_queued = false;
	struct rpc_conn *conn = rl->rl_conns;
	while (conn) {
		struct rpc_conn *next = conn->cn_next;
		if (conn->cn_global_wait) {
			rpc_conn_hold(conn);
			rpc_conn_update(conn);
			rpc_conn_rele(conn);
		}
		conn = next;
	}
}

/* Rule 8: closes the connections of this loop that the connection table chose to make room. */
static void rpc_loop_evict(struct loop_task *task)
{
	struct rpc_loop *rl = SH_CONTAINER_OF(task, struct rpc_loop, rl_evict_task);
	/* An exchange, so that every mark made before a poster saw the flag set is seen below. */
	(void)atomic_exchange(&rl->rl_evict_queued, false);
	struct rpc_conn *conn = rl->rl_conns;
	while (conn) {
		struct rpc_conn *next = conn->cn_next;
		if (atomic_load_explicit(&conn->cn_tab.ce_evict, memory_order_relaxed))
			rpc_conn_close(conn, "closed to make room for a new connection");
		conn = next;
	}
}

/* Reads the rest of a large fragment body straight into its record buffer. Returns 2 when bytes
 * were read and the socket had no more (a short read), 1 when bytes were read and more may wait,
 * 0 when the socket had none (EAGAIN), -1 when the connection was closed. */
static int rpc_conn_read_direct(struct rpc_conn *conn, uint8_t *dst, size_t space)
{
	ssize_t n;
	do {
		n = read(conn->cn_fd, dst, space);
	} while (n < 0 && errno == EINTR);
	if (n == 0) {
		rpc_conn_close(conn, NULL); /* orderly shutdown by the client */
		return -1;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			rpc_conn_close(conn, "read failed");
			return -1;
		}
		return 0;
	}
	if (!rpc_conn_body_read(conn, (size_t)n))
		return -1;
	return (size_t)n < space ? 2 : 1;
}

/* Parses input kept from earlier reads, then reads until the socket is drained, the connection
 * must stop (over, or its share of the turn used), or RPC_READS_PER_EVENT reads. The watch is
 * level-triggered, so a read shorter than asked for ends the turn without a further read that
 * would only return EAGAIN: bytes that arrive later make the socket readable again, and a
 * connection that stopped with bytes still in its socket is reported again next turn. */
static void rpc_conn_read(struct rpc_conn *conn)
{
	struct rpc_loop *rl = conn->cn_rl;
	if (!rpc_conn_pend_drain(conn))
		return;
	for (int i = 0; i < RPC_READS_PER_EVENT && rpc_conn_pend_bytes(conn) == 0 &&
			rpc_conn_may_dispatch(conn);
	     i++) {
		size_t space;
		int err;
		uint8_t *dst = rpc_rm_body_space(&conn->cn_rm, RPC_DIRECT_READ_MIN, &space, &err);
		if (err < 0) {
			log_ratelimited(LOG_WARN, "rpc: no memory for a record; closing its connection");
			rpc_conn_close(conn, NULL);
			return;
		}
		if (dst) {
			int rc = rpc_conn_read_direct(conn, dst, space);
			if (rc < 0)
				return;
			if (rc == 0 || rc == 2)
				break;
			continue;
		}
		ssize_t n = read(conn->cn_fd, rl->rl_scratch, RPC_SCRATCH_BYTES);
		if (n == 0) {
			rpc_conn_close(conn, NULL); /* orderly shutdown by the client */
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				rpc_conn_close(conn, "read failed");
				return;
			}
			break;
		}
		if (!rpc_conn_input(conn, rl->rl_scratch, (size_t)n))
			return;
		if ((size_t)n < RPC_SCRATCH_BYTES)
			break; /* drained (see above) */
	}
	rpc_conn_update(conn);
}

/* ------------------------------------------------------------------------------------------ */
/* The ring: TCP connections on the loop's io_uring
 *
 * When the loop has a ring (loop_want_ring; not with rsc_no_socket_ring), a TCP connection is not
 * in the epoll set: its bytes come in through a multishot receive into the loop's buffer group
 * (RPC_RING_BUFS buffers, each handed back once its bytes are in their record), and its replies
 * go out through one non-blocking sendmsg at a time, submitted with the loop's next wait, so the
 * reads and answers of a busy turn cost one system call. A send the socket has no room for
 * completes with EAGAIN, and a POLLOUT poll in the ring waits for room. (A send's completion
 * wakes the loop's next wait at once: at light load a call still costs two system calls, the
 * wait that sleeps and the one that submits the reply. Waiting instead for one completion
 * beyond the sends' would save one, but a send that must be followed up, short or EAGAIN,
 * would then wait for an unrelated event; bounding that wait with a timeout cost more here
 * than the call saved, see docs/performance.md.) A large fragment body (a big WRITE) is
 * still read straight into its record: the multishot receive is cancelled and single receives
 * into the record follow until the body is complete. A paused connection's receive is cancelled
 * and started again when it resumes. A reply's piped bulk data is spliced from the loop's thread
 * between sends, with the same poll when the socket is full. Closing shuts the
 * socket down, which ends every op; each op holds a connection reference until its last
 * completion, and the queue a send is reading, or the record a direct receive is filling, is
 * freed only when that op has ended. */

static void rpc_conn_on_send(struct loop_op *op, int res, uint32_t cqe_flags);
static void rpc_conn_on_pollout(struct loop_op *op, int res, uint32_t cqe_flags);

/* Frees the replies left queued on a closed connection. */
static void rpc_conn_discard_queue(struct rpc_conn *conn)
{
	struct rpc_call *call = conn->cn_out_head;
	conn->cn_out_head = conn->cn_out_tail = NULL;
	while (call) {
		struct rpc_call *next = call->rc_out_next;
		rpc_call_free(call);
		call = next;
	}
}

/* Polls for room in a full socket; the poll's completion sends again. False if it closed. */
static bool rpc_conn_ring_wait_room(struct rpc_conn *conn)
{
	struct io_uring_sqe *sqe = loop_op_sqe(conn->cn_rl->rl_loop, &conn->cn_pollout_op);
	if (!sqe) {
		rpc_conn_close(conn, "no room in the loop's ring");
		return false;
	}
	io_uring_prep_poll_add(sqe, conn->cn_fd, POLLOUT);
	conn->cn_pollout_busy = true;
	rpc_conn_hold(conn);
	return true;
}

/* Starts the next send of a ring connection when none is in flight. */
static void rpc_conn_ring_send(struct rpc_conn *conn)
{
	struct loop *loop = conn->cn_rl->rl_loop;
	while (conn->cn_out_head && !conn->cn_closed && !conn->cn_send_busy &&
	       !conn->cn_pollout_busy) {
		const struct rpc_call *piped;
		size_t piped_len;
		int n = rpc_conn_gather(conn, conn->cn_send_iov, &piped, &piped_len);
		if (piped) {
			ssize_t written = rpc_conn_splice(conn, piped, piped_len);
			if (written >= 0) {
				rpc_conn_sent(conn, (size_t)written);
				continue;
			}
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				rpc_conn_close(conn, "splice failed");
				return;
			}
			if (!rpc_conn_ring_wait_room(conn))
				return;
			break;
		}
		struct io_uring_sqe *sqe = loop_op_sqe(loop, &conn->cn_send_op);
		if (!sqe) {
			rpc_conn_close(conn, "no room in the loop's ring");
			return;
		}
		memset(&conn->cn_send_msg, 0, sizeof(conn->cn_send_msg));
		conn->cn_send_msg.msg_iov = conn->cn_send_iov;
		conn->cn_send_msg.msg_iovlen = (size_t)n;
		/* Non-blocking: it completes as it is submitted, with what the socket took or
		 * EAGAIN. */
		io_uring_prep_sendmsg(sqe, conn->cn_fd, &conn->cn_send_msg,
				      MSG_NOSIGNAL | MSG_DONTWAIT);
		conn->cn_send_busy = true;
		rpc_conn_hold(conn);
	}
	if (!conn->cn_closed)
		rpc_conn_update(conn);
}

static void rpc_conn_on_send(struct loop_op *op, int res, uint32_t cqe_flags)
{
	(void)cqe_flags;
	struct rpc_conn *conn = SH_CONTAINER_OF(op, struct rpc_conn, cn_send_op);
	conn->cn_send_busy = false;
	if (conn->cn_closed) {
		rpc_conn_discard_queue(conn);
	} else if (res == -EAGAIN || res == -EWOULDBLOCK) {
		if (rpc_conn_ring_wait_room(conn))
			rpc_conn_update(conn);
	} else if (res < 0 && res != -EINTR) {
		rpc_conn_close(conn, "send failed");
	} else if (res < 0) {
		rpc_conn_ring_send(conn);
	} else {
		rpc_conn_sent(conn, (size_t)res);
		rpc_conn_ring_send(conn);
	}
	rpc_conn_rele(conn);
}

static void rpc_conn_on_pollout(struct loop_op *op, int res, uint32_t cqe_flags)
{
	(void)res;
	(void)cqe_flags;
	struct rpc_conn *conn = SH_CONTAINER_OF(op, struct rpc_conn, cn_pollout_op);
	conn->cn_pollout_busy = false;
	if (!conn->cn_closed)
		rpc_conn_ring_send(conn); /* a hang-up shows as the splice's error */
	rpc_conn_rele(conn);
}

/* Starts the receive a ring connection wants, or asks the running one to end when it no longer
 * fits (paused, or a large body to read straight into its record). */
static void rpc_conn_ring_recv(struct rpc_conn *conn)
{
	if (conn->cn_closed || conn->cn_recv_state == RPC_RECV_DIRECT)
		return; /* a direct receive's completion decides what follows it */
	uint8_t *dst = NULL;
	size_t space = 0;
	/* A direct receive only once kept input is parsed: bytes never overtake (rule 2). */
	if (!conn->cn_paused && rpc_conn_pend_bytes(conn) == 0) {
		int err;
		dst = rpc_rm_body_space(&conn->cn_rm, RPC_DIRECT_READ_MIN, &space, &err);
		if (err < 0) {
			log_ratelimited(LOG_WARN,
					"rpc: no memory for a record; closing its connection");
			rpc_conn_close(conn, NULL);
			return;
		}
	}
	struct loop *loop = conn->cn_rl->rl_loop;
	if (conn->cn_recv_state == RPC_RECV_MULTI) {
		if ((conn->cn_paused || dst) && !conn->cn_recv_cancelled) {
			struct io_uring_sqe *sqe = loop_op_sqe(loop, NULL);
			if (!sqe) {
				rpc_conn_close(conn, "no room in the loop's ring");
				return;
			}
			io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)&conn->cn_recv_op, 0);
			conn->cn_recv_cancelled = true;
		}
		return;
	}
	if (conn->cn_paused)
		return;
	struct io_uring_sqe *sqe = loop_op_sqe(loop, &conn->cn_recv_op);
	if (!sqe) {
		rpc_conn_close(conn, "no room in the loop's ring");
		return;
	}
	if (dst) {
		io_uring_prep_recv(sqe, conn->cn_fd, dst, space, 0);
		conn->cn_recv_state = RPC_RECV_DIRECT;
	} else {
		io_uring_prep_recv_multishot(sqe, conn->cn_fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = RPC_RING_BGID;
		conn->cn_recv_state = RPC_RECV_MULTI;
		conn->cn_recv_cancelled = false;
	}
	rpc_conn_hold(conn);
}

static void rpc_conn_on_recv(struct loop_op *op, int res, uint32_t cqe_flags)
{
	struct rpc_conn *conn = SH_CONTAINER_OF(op, struct rpc_conn, cn_recv_op);
	struct rpc_loop *rl = conn->cn_rl;
	bool last = !(cqe_flags & IORING_CQE_F_MORE);
	bool direct = conn->cn_recv_state == RPC_RECV_DIRECT;
	if (last)
		conn->cn_recv_state = RPC_RECV_IDLE;
	if (cqe_flags & IORING_CQE_F_BUFFER) {
		unsigned bid = cqe_flags >> IORING_CQE_BUFFER_SHIFT;
		uint8_t *buf = rl->rl_br_mem + (size_t)bid * RPC_RING_BUF_BYTES;
		if (res > 0 && !conn->cn_closed)
			(void)rpc_conn_input(conn, buf, (size_t)res);
		io_uring_buf_ring_add(rl->rl_br, buf, RPC_RING_BUF_BYTES, (unsigned short)bid,
				      io_uring_buf_ring_mask(RPC_RING_BUFS), 0);
		io_uring_buf_ring_advance(rl->rl_br, 1);
	} else if (direct && res > 0 && !conn->cn_closed) {
		(void)rpc_conn_body_read(conn, (size_t)res);
	}
	if (!conn->cn_closed) {
		if (res == 0)
			rpc_conn_close(conn, NULL); /* orderly shutdown by the client */
		else if (res < 0 && res != -ENOBUFS && res != -ECANCELED && res != -EINTR &&
			 res != -EAGAIN)
			rpc_conn_close(conn, "receive failed");
	}
	if (conn->cn_closed) {
		if (last && direct) {
			rpc_rm_fini(&conn->cn_rm);
			rpc_conn_account(conn);
		}
	} else {
		rpc_conn_update(conn); /* the next receive, or the end of this one when paused */
	}
	if (last)
		rpc_conn_rele(conn);
}

/* Sets up the loop's receive buffers on its first accept, on its thread: from then on its TCP
 * connections use the ring, or, when that fails, epoll as before. */
static void rpc_loop_ring_check(struct rpc_loop *rl)
{
	if (rl->rl_ring_checked)
		return;
	rl->rl_ring_checked = true;
	struct io_uring *ring = loop_ring(rl->rl_loop);
	if (!ring || rl->rl_srv->rs_cfg.rsc_no_socket_ring)
		return;
	/* Multishot receives came with Linux 6.0; an older kernel fails them with EINVAL. */
	struct utsname uts;
	memset(&uts, 0, sizeof(uts));
	unsigned major = 0, minor = 0;
	if (uname(&uts) != 0 || sscanf(uts.release, "%u.%u", &major, &minor) != 2 ||
	    major < 6) {
		log_info("rpc: loop %u: kernel %s has no multishot receive; connections wait in "
			 "epoll", loop_index(rl->rl_loop), uts.release);
		return;
	}
	size_t ring_bytes = RPC_RING_BUFS * sizeof(struct io_uring_buf);
	void *br = NULL;
	if (posix_memalign(&br, 4096, ring_bytes) != 0)
		return;
	rl->rl_br_mem = mem_alloc((size_t)RPC_RING_BUFS * RPC_RING_BUF_BYTES);
	if (!rl->rl_br_mem) {
		free(br);
		return;
	}
	rl->rl_br = br;
	io_uring_buf_ring_init(rl->rl_br);
	struct io_uring_buf_reg reg;
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)rl->rl_br;
	reg.ring_entries = RPC_RING_BUFS;
	reg.bgid = RPC_RING_BGID;
	int rc = io_uring_register_buf_ring(ring, &reg, 0);
	if (rc < 0) {
		log_info("rpc: loop %u: no buffer ring (%s); connections wait in epoll",
			 loop_index(rl->rl_loop), strerror(-rc));
		free(rl->rl_br);
		rl->rl_br = NULL;
		mem_free(rl->rl_br_mem);
		rl->rl_br_mem = NULL;
		return;
	}
	for (unsigned i = 0; i < RPC_RING_BUFS; i++)
		io_uring_buf_ring_add(rl->rl_br, rl->rl_br_mem + (size_t)i * RPC_RING_BUF_BYTES,
				      RPC_RING_BUF_BYTES, (unsigned short)i,
				      io_uring_buf_ring_mask(RPC_RING_BUFS), (int)i);
	io_uring_buf_ring_advance(rl->rl_br, RPC_RING_BUFS);
	atomic_store_explicit(&rl->rl_ring, true, memory_order_relaxed);
	log_info("rpc: loop %u: TCP connections on io_uring", loop_index(rl->rl_loop));
}

bool rpc_server_socket_ring(const struct rpc_server *srv, unsigned index)
{
	return index < srv->rs_nloops &&
	       atomic_load_explicit(&srv->rs_loops[index].rl_ring, memory_order_relaxed);
}

static void rpc_conn_on_event(struct loop_watch *watch, uint32_t events)
{
	struct rpc_conn *conn = watch->lw_arg;
	rpc_conn_hold(conn);
	if (events & LOOP_OUT)
		rpc_conn_flush(conn);
	if (!conn->cn_closed && (events & (LOOP_IN | LOOP_ERR | LOOP_HUP | LOOP_RDHUP)))
		rpc_conn_read(conn);
	if (!conn->cn_closed && (events & (LOOP_ERR | LOOP_HUP)) && conn->cn_paused)
		rpc_conn_close(conn, "socket error");
	rpc_conn_rele(conn);
}

static void rpc_udp_on_event(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	struct rpc_conn *conn = watch->lw_arg;
	struct rpc_loop *rl = conn->cn_rl;
	for (unsigned i = 0; i < RPC_CALLS_PER_TURN; i++) { /* one share per turn (rule 10) */
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof(peer);
		ssize_t n = recvfrom(conn->cn_fd, rl->rl_scratch, RPC_SCRATCH_BYTES, MSG_DONTWAIT,
				     (struct sockaddr *)&peer, &peer_len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return; /* EAGAIN, or an ICMP error queued by an earlier send */
		}
		if (n == 0 || (size_t)n > conn->cn_srv->rs_cfg.rsc_max_record_bytes)
			continue;
		if (rl->rl_mem + (size_t)n > rl->rl_budget ||
		    conn->cn_calls >= conn->cn_srv->rs_cfg.rsc_max_conn_calls) {
			log_ratelimited(LOG_WARN, "rpc: loop %u over its memory budget or its UDP calls "
					"in progress; UDP call dropped", loop_index(rl->rl_loop));
			continue;
		}
		uint8_t *record = mem_alloc((size_t)n);
		if (!record)
			continue;
		memcpy(record, rl->rl_scratch, (size_t)n);
		rpc_conn_dispatch(conn, record, (size_t)n, NULL, &peer, peer_len);
	}
}

static struct rpc_conn *rpc_conn_new(struct rpc_loop *rl, struct rpc_endpoint *ep, int fd,
				     enum rpc_transport transport)
{
	struct rpc_conn *conn = mem_zalloc(sizeof(*conn));
	if (!conn)
		return NULL;
	conn->cn_srv = rl->rl_srv;
	conn->cn_rl = rl;
	conn->cn_ep = ep;
	conn->cn_transport = transport;
	conn->cn_fd = fd;
	conn->cn_refs = 1; /* the open reference */
	conn->cn_last_rx_ns = loop_turn_ns(conn->cn_rl->rl_loop);
	rpc_conn_touch(conn);
	rpc_rm_init(&conn->cn_rm, rl->rl_srv->rs_cfg.rsc_max_record_bytes);
	return conn;
}

static void rpc_listener_on_backoff(struct loop_timer *timer)
{
	struct rpc_listener *li = timer->lt_arg;
	loop_timer_del(li->li_rl->rl_loop, &li->li_backoff);
	li->li_backoff_armed = false;
	if (loop_watch_mod(li->li_rl->rl_loop, &li->li_watch, LOOP_IN) < 0)
		log_error("rpc: cannot resume accepting connections");
}

/* Out of descriptors: the pending connection stays in the backlog and the level-triggered
 * listener would fire again at once, so stop watching it for a moment instead of spinning. */
static void rpc_listener_back_off(struct rpc_listener *li)
{
	if (li->li_backoff_armed)
		return;
	if (loop_watch_mod(li->li_rl->rl_loop, &li->li_watch, 0) < 0)
		return;
	if (loop_timer_add(li->li_rl->rl_loop, &li->li_backoff, RPC_ACCEPT_BACKOFF_NS, 0,
			   rpc_listener_on_backoff, li) < 0) {
		if (loop_watch_mod(li->li_rl->rl_loop, &li->li_watch, LOOP_IN) < 0)
			log_error("rpc: cannot resume accepting connections");
		return;
	}
	li->li_backoff_armed = true;
}

/* Has the loop rl close its connections the connection table marked (rule 8). Any thread. */
static void rpc_loop_post_evict(void *rl_arg)
{
	struct rpc_loop *rl = rl_arg;
	if (!atomic_exchange(&rl->rl_evict_queued, true))
		loop_post(rl->rl_loop, &rl->rl_evict_task);
}

static void rpc_listener_on_event(struct loop_watch *watch, uint32_t events)
{
	(void)events;
	struct rpc_listener *li = watch->lw_arg;
	struct rpc_loop *rl = li->li_rl;
	struct rpc_server *srv = rl->rl_srv;
	for (int i = 0; i < RPC_ACCEPTS_PER_EVENT; i++) {
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof(peer);
		int fd = accept4(li->li_fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			log_ratelimited(LOG_WARN, "rpc: accept failed: %s", strerror(errno));
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				rpc_listener_back_off(li);
			return;
		}
		struct rpc_conn *conn = rpc_conn_new(rl, li->li_ep, fd, RPC_TCP);
		if (!conn) {
			close(fd);
			continue;
		}
		void *victim = NULL;
		int rc = rpc_conntab_add(srv->rs_conntab, &conn->cn_tab, &peer,
					 loop_turn_ns(rl->rl_loop), rl, &victim);
		if (rc < 0) {
			close(fd);
			mem_free(conn);
			log_ratelimited(LOG_WARN, "rpc: connection limit (%u) reached with no "
					"connection to close; refusing a connection",
					srv->rs_cfg.rsc_max_conns);
			continue;
		}
		conn->cn_tabbed = true;
		if (victim)
			rpc_loop_post_evict(victim);
		rl->rl_nconns++;
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		rpc_rm_set_pools(&conn->cn_rm, &rl->rl_pool, &rl->rl_small_pool);
		memcpy(&conn->cn_peer, &peer, peer_len);
		conn->cn_peer_len = peer_len;
		rpc_loop_ring_check(rl);
		if (atomic_load_explicit(&rl->rl_ring, memory_order_relaxed)) {
			conn->cn_ring = true;
			conn->cn_recv_op.lo_fn = rpc_conn_on_recv;
			conn->cn_send_op.lo_fn = rpc_conn_on_send;
			conn->cn_pollout_op.lo_fn = rpc_conn_on_pollout;
			conn->cn_next = rl->rl_conns;
			if (rl->rl_conns)
				rl->rl_conns->cn_prev = conn;
			rl->rl_conns = conn;
			rpc_conn_ring_recv(conn);
			continue;
		}
		if (loop_watch_add(rl->rl_loop, &conn->cn_watch, fd, LOOP_IN, rpc_conn_on_event, conn) < 0) {
			rpc_conn_close(conn, "epoll_ctl failed");
			continue;
		}
		conn->cn_watching = true;
		conn->cn_events = LOOP_IN;
		conn->cn_next = rl->rl_conns;
		if (rl->rl_conns)
			rl->rl_conns->cn_prev = conn;
		rl->rl_conns = conn;
	}
}

static void rpc_loop_on_tick(struct loop_timer *timer)
{
	struct rpc_loop *rl = timer->lt_arg;
	const struct rpc_server_config *cfg = &rl->rl_srv->rs_cfg;
	uint64_t now = clock_monotonic_ns();
	uint64_t idle_ns = cfg->rsc_idle_timeout_s == RPC_IDLE_NEVER
				   ? UINT64_MAX
				   : (uint64_t)cfg->rsc_idle_timeout_s * 1000000000ull;
	uint64_t record_ns = (uint64_t)cfg->rsc_record_timeout_s * 1000000000ull;
	struct rpc_conn *conn = rl->rl_conns;
	while (conn) {
		struct rpc_conn *next = conn->cn_next;
		uint64_t quiet_ns = now - rpc_conn_active_ns(conn);
		if (conn->cn_inflight == 0 && !conn->cn_out_head && quiet_ns >= idle_ns)
			rpc_conn_close(conn, "idle");
		else if (conn->cn_out_head && quiet_ns >= RPC_WRITE_STALL_NS)
			rpc_conn_close(conn, "client stopped reading its replies");
		else if (!conn->cn_paused && !rpc_rm_idle(&conn->cn_rm) &&
			 now - conn->cn_last_rx_ns >= record_ns)
			rpc_conn_close(conn, "a partial record got no more bytes");
		conn = next;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Server life cycle */

int rpc_server_create(const struct rpc_server_config *config, struct rpc_server **out)
{
	struct rpc_server *srv = mem_zalloc(sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	rpc_config_fill(&srv->rs_cfg, config);
	srv->rs_pmap_port = 111; /* RFC 1833 section 3 */
	int rc = rpc_conntab_create(srv->rs_cfg.rsc_max_conns, srv->rs_cfg.rsc_max_conns_per_addr,
				    &srv->rs_conntab);
	if (rc < 0)
		goto out_free_srv;
	rc = rpc_drc_create(srv->rs_cfg.rsc_drc_entries, &srv->rs_drc);
	if (rc < 0)
		goto out_free_conntab;
	srv->rs_loops = mem_zalloc(srv->rs_cfg.rsc_nloops * sizeof(*srv->rs_loops));
	if (!srv->rs_loops) {
		rc = -ENOMEM;
		goto out_free_drc;
	}
	for (srv->rs_nloops = 0; srv->rs_nloops < srv->rs_cfg.rsc_nloops; srv->rs_nloops++) {
		struct rpc_loop *rl = &srv->rs_loops[srv->rs_nloops];
		rl->rl_srv = srv;
		rl->rl_budget = srv->rs_cfg.rsc_max_total_buffer_bytes / srv->rs_cfg.rsc_nloops;
		rl->rl_wake_task.lt_fn = rpc_loop_wake_waiters;
		rl->rl_evict_task.lt_fn = rpc_loop_evict;
		rl->rl_scratch = mem_alloc(RPC_SCRATCH_BYTES);
		if (!rl->rl_scratch) {
			rc = -ENOMEM;
			goto out_free_loops;
		}
		rc = rpc_buf_pool_init(&rl->rl_pool, srv->rs_cfg.rsc_max_record_bytes, RPC_POOL_BUFS);
		if (rc < 0) {
			mem_free(rl->rl_scratch);
			goto out_free_loops;
		}
		rc = rpc_buf_pool_init(&rl->rl_small_pool, RPC_SMALL_RECORD_BYTES,
		                       RPC_SMALL_POOL_BUFS);
		if (rc < 0) {
			rpc_buf_pool_fini(&rl->rl_pool);
			mem_free(rl->rl_scratch);
			goto out_free_loops;
		}
		rc = loop_create(&rl->rl_loop);
		if (rc < 0) {
			rpc_buf_pool_fini(&rl->rl_small_pool);
			rpc_buf_pool_fini(&rl->rl_pool);
			mem_free(rl->rl_scratch);
			goto out_free_loops;
		}
		if (!srv->rs_cfg.rsc_no_socket_ring)
			loop_want_ring(rl->rl_loop);
	}
	*out = srv;
	return 0;
out_free_loops:
	while (srv->rs_nloops-- > 0) {
		loop_destroy(srv->rs_loops[srv->rs_nloops].rl_loop);
		rpc_buf_pool_fini(&srv->rs_loops[srv->rs_nloops].rl_pool);
		rpc_buf_pool_fini(&srv->rs_loops[srv->rs_nloops].rl_small_pool);
		mem_free(srv->rs_loops[srv->rs_nloops].rl_scratch);
	}
	mem_free(srv->rs_loops);
out_free_drc:
	rpc_drc_destroy(srv->rs_drc);
out_free_conntab:
	rpc_conntab_destroy(srv->rs_conntab);
out_free_srv:
	mem_free(srv);
	return rc;
}

static void rpc_prog_entry_init(struct rpc_prog_entry *pe, const struct rpc_program_desc *prog,
				void *ctx)
{
	pe->pe_desc = prog;
	pe->pe_ctx = ctx;
	pe->pe_low = UINT32_MAX;
	pe->pe_high = 0;
	for (uint32_t i = 0; i < prog->rpg_nversions; i++) {
		pe->pe_low = SH_MIN(pe->pe_low, prog->rpg_versions[i].rvd_vers);
		pe->pe_high = SH_MAX(pe->pe_high, prog->rpg_versions[i].rvd_vers);
	}
}

int rpc_server_add_program(struct rpc_server *srv, const struct rpc_program_desc *prog, void *ctx)
{
	if (srv->rs_started || prog->rpg_nversions == 0)
		return -EINVAL;
	for (unsigned i = 0; i < srv->rs_nprogs; i++)
		if (srv->rs_progs[i].pe_desc->rpg_prog == prog->rpg_prog)
			return -EEXIST;
	if (srv->rs_nprogs >= RPC_MAX_PROGRAMS)
		return -ENOSPC;
	rpc_prog_entry_init(&srv->rs_progs[srv->rs_nprogs++], prog, ctx);
	return 0;
}

int rpc_parse_addr(const char *addr, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *sin = (struct sockaddr_in *)(void *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)ss;
	if (inet_pton(AF_INET, addr, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		*len = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, addr, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		*len = sizeof(*sin6);
		return 0;
	}
	return -EINVAL;
}

static void rpc_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)(void *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)(void *)ss)->sin6_port = htons(port);
}

/* Opens and binds one socket; reuseport for the per-loop group. Returns the fd or -errno. */
static int rpc_bind_socket(const struct sockaddr_storage *ss, socklen_t len, int type, bool reuseport)
{
	int fd = socket(ss->ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	if (type == SOCK_STREAM)
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->ss_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		goto out_err;
	if (bind(fd, (const struct sockaddr *)ss, len) < 0)
		goto out_err;
	if (type == SOCK_STREAM && reuseport && listen(fd, RPC_LISTEN_BACKLOG) < 0)
		goto out_err;
	return fd;
out_err:;
	int rc = -errno;
	close(fd);
	return rc;
}

static uint16_t rpc_socket_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)(void *)&ss)->sin_port);
	return ntohs(((struct sockaddr_in6 *)(void *)&ss)->sin6_port);
}

/* Binds the per-loop sockets of one endpoint for both transports on one port number. fds is
 * [transport 0..1][loop]; unused entries are -1. */
static int rpc_bind_group(struct rpc_server *srv, struct sockaddr_storage *ss, socklen_t len,
			  unsigned mask, uint16_t port, int *fds, uint16_t *port_out)
{
	static const int types[2] = {SOCK_STREAM, SOCK_DGRAM};
	static const unsigned bits[2] = {RPC_TCP, RPC_UDP};
	unsigned n = srv->rs_nloops;
	int probes[2] = {-1, -1};
	int rc = 0;
	for (unsigned i = 0; i < 2 * n; i++)
		fds[i] = -1;
	/* Probe sockets without SO_REUSEPORT claim the port first: this picks the number for port 0
	 * and makes the bind fail when anything else holds it, even another SO_REUSEPORT group. */
	rpc_set_port(ss, port);
	for (unsigned t = 0; t < 2; t++) {
		if (!(mask & bits[t]))
			continue;
		probes[t] = rpc_bind_socket(ss, len, types[t], false);
		if (probes[t] < 0) {
			rc = probes[t];
			goto out_close;
		}
		if (port == 0) {
			port = rpc_socket_port(probes[t]);
			rpc_set_port(ss, port);
		}
	}
	for (unsigned t = 0; t < 2; t++) {
		if (!(mask & bits[t]))
			continue;
		close(probes[t]);
		probes[t] = -1;
		for (unsigned l = 0; l < n; l++) {
			int fd = rpc_bind_socket(ss, len, types[t], true);
			if (fd < 0) {
				rc = fd;
				goto out_close;
			}
			fds[t * n + l] = fd;
		}
	}
	*port_out = port;
	return 0;
out_close:
	for (unsigned t = 0; t < 2; t++)
		if (probes[t] >= 0)
			close(probes[t]);
	for (unsigned i = 0; i < 2 * n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
	return rc;
}

int rpc_server_listen_program(struct rpc_server *srv, const char *addr, uint16_t port,
			      unsigned transport_mask, const struct rpc_program_desc *prog, void *ctx,
			      uint16_t *bound_port_out)
{
	if (srv->rs_started || !(transport_mask & (RPC_TCP | RPC_UDP)))
		return -EINVAL;
	struct sockaddr_storage ss;
	socklen_t ss_len;
	int rc = rpc_parse_addr(addr, port, &ss, &ss_len);
	if (rc < 0)
		return rc;
	unsigned n = srv->rs_nloops;
	int *fds = mem_alloc(2 * n * sizeof(int));
	if (!fds)
		return -ENOMEM;
	uint16_t bound = 0;
	for (int attempt = 0; attempt < RPC_BIND_ATTEMPTS; attempt++) {
		rc = rpc_bind_group(srv, &ss, ss_len, transport_mask, port, fds, &bound);
		if (rc != -EADDRINUSE || port != 0)
			break;
	}
	if (rc < 0)
		goto out_free_fds;

	struct rpc_endpoint *ep = mem_zalloc(sizeof(*ep));
	struct rpc_endpoint **eps = mem_realloc(srv->rs_eps, (srv->rs_neps + 1) * sizeof(*eps));
	if (eps)
		srv->rs_eps = eps;
	struct rpc_listener **lis = NULL;
	if (eps)
		lis = mem_realloc(srv->rs_listeners, (srv->rs_nlisteners + n) * sizeof(*lis));
	if (lis)
		srv->rs_listeners = lis;
	if (!ep || !eps || !lis) {
		rc = -ENOMEM;
		goto out_free_ep;
	}
	ep->ep_srv = srv;
	ep->ep_mask = transport_mask;
	ep->ep_port = bound;
	if (prog) {
		ep->ep_restricted = true;
		rpc_prog_entry_init(&ep->ep_prog, prog, ctx);
	}
	srv->rs_eps[srv->rs_neps++] = ep;
	unsigned ep_index = srv->rs_neps - 1;
	/* From here every failure leaves already-registered sockets to rpc_server_destroy. */
	for (unsigned l = 0; l < n; l++) {
		struct rpc_loop *rl = &srv->rs_loops[l];
		struct rpc_conn **udp = mem_realloc(rl->rl_udp, srv->rs_neps * sizeof(*udp));
		if (!udp) {
			rc = -ENOMEM;
			goto out_close_rest;
		}
		rl->rl_udp = udp;
		udp[ep_index] = NULL;
		if (fds[l] >= 0) {
			struct rpc_listener *li = mem_zalloc(sizeof(*li));
			if (!li) {
				rc = -ENOMEM;
				goto out_close_rest;
			}
			li->li_rl = rl;
			li->li_ep = ep;
			li->li_fd = fds[l];
			fds[l] = -1;
			srv->rs_listeners[srv->rs_nlisteners++] = li;
			rc = loop_watch_add(rl->rl_loop, &li->li_watch, li->li_fd, LOOP_IN,
					    rpc_listener_on_event, li);
			if (rc < 0)
				goto out_close_rest;
			li->li_watching = true;
		}
		if (fds[n + l] >= 0) {
			struct rpc_conn *conn = rpc_conn_new(rl, ep, fds[n + l], RPC_UDP);
			if (!conn) {
				rc = -ENOMEM;
				goto out_close_rest;
			}
			fds[n + l] = -1;
			udp[ep_index] = conn;
			rc = loop_watch_add(rl->rl_loop, &conn->cn_watch, conn->cn_fd, LOOP_IN,
					    rpc_udp_on_event, conn);
			if (rc < 0)
				goto out_close_rest;
			conn->cn_watching = true;
		}
	}
	*bound_port_out = bound;
	mem_free(fds);
	return 0;
out_free_ep:
	mem_free(ep);
out_close_rest:
	for (unsigned i = 0; i < 2 * n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
out_free_fds:
	mem_free(fds);
	return rc;
}

int rpc_server_listen(struct rpc_server *srv, const char *addr, uint16_t port, unsigned transport_mask,
		      uint16_t *bound_port_out)
{
	return rpc_server_listen_program(srv, addr, port, transport_mask, NULL, NULL, bound_port_out);
}

uint16_t rpc_server_main_port(const struct rpc_server *srv, enum rpc_transport transport)
{
	for (unsigned i = 0; i < srv->rs_neps; i++)
		if (!srv->rs_eps[i]->ep_restricted && (srv->rs_eps[i]->ep_mask & (unsigned)transport))
			return srv->rs_eps[i]->ep_port;
	return 0;
}

bool rpc_server_program_at(const struct rpc_server *srv, unsigned index,
			   const struct rpc_program_desc **prog_out)
{
	if (index >= srv->rs_nprogs)
		return false;
	*prog_out = srv->rs_progs[index].pe_desc;
	return true;
}

struct rpc_portmap **rpc_server_portmap_slot(struct rpc_server *srv)
{
	return &srv->rs_portmap;
}

void rpc_portmap_set_port(struct rpc_server *srv, uint16_t port)
{
	srv->rs_pmap_port = port;
}

uint16_t rpc_server_portmap_cfg_port(const struct rpc_server *srv)
{
	return srv->rs_pmap_port;
}

static void *rpc_loop_thread(void *arg)
{
	struct rpc_loop *rl = arg;
	char name[16];
	snprintf(name, sizeof(name), "shale-loop%u", loop_index(rl->rl_loop));
	sh_thread_setup(name, SH_THREAD_SERVING);
	int rc = loop_run(rl->rl_loop);
	if (rc < 0)
		log_error("rpc: loop %u stopped: %s", loop_index(rl->rl_loop), sh_strerror(rc));
	return NULL;
}

int rpc_server_start(struct rpc_server *srv)
{
	if (srv->rs_started)
		return -EINVAL;
	srv->rs_started = true;
	for (unsigned l = 0; l < srv->rs_nloops; l++) {
		struct rpc_loop *rl = &srv->rs_loops[l];
		int rc = loop_timer_add(rl->rl_loop, &rl->rl_idle_timer, RPC_IDLE_TICK_NS, RPC_IDLE_TICK_NS,
					rpc_loop_on_tick, rl);
		if (rc < 0) {
			rpc_server_stop(srv);
			return rc;
		}
		rl->rl_timer_armed = true;
		rc = -pthread_create(&rl->rl_thread, NULL, rpc_loop_thread, rl);
		if (rc < 0) {
			rpc_server_stop(srv);
			return rc;
		}
		rl->rl_thread_started = true;
	}
	return 0;
}

void rpc_server_get_stats(struct rpc_server *srv, struct rpc_server_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned l = 0; l < srv->rs_nloops; l++) {
		const struct rpc_loop *rl = &srv->rs_loops[l];
		out->rss_mem_bytes += atomic_load_explicit(&rl->rl_mem_seen, memory_order_relaxed);
		out->rss_mem_peak_bytes += atomic_load_explicit(&rl->rl_mem_peak, memory_order_relaxed);
	}
	unsigned of_addr;
	rpc_conntab_counts(srv->rs_conntab, NULL, &out->rss_conns, &of_addr,
			   &out->rss_conns_closed_for_room);
}

unsigned rpc_server_nloops(const struct rpc_server *srv)
{
	return srv->rs_nloops;
}

struct loop *rpc_server_loop(const struct rpc_server *srv, unsigned index)
{
	return index < srv->rs_nloops ? srv->rs_loops[index].rl_loop : NULL;
}

/* Closes every socket of the server. Runs after the loop threads have been joined (or never
 * started), so touching loop state from this thread is safe. */
/* Closes every socket of one loop: its TCP connections, its UDP sockets, its listeners and its
 * timers. Calls still in flight keep their connection alive until they finish (their replies are
 * then discarded). Runs on the loop's thread, or after the loop's thread has been joined. */
static void rpc_loop_close_all(struct rpc_loop *rl)
{
	struct rpc_server *srv = rl->rl_srv;
	while (rl->rl_conns)
		rpc_conn_close(rl->rl_conns, NULL);
	for (unsigned e = 0; rl->rl_udp && e < srv->rs_neps; e++) {
		if (rl->rl_udp[e]) {
			rpc_conn_close(rl->rl_udp[e], NULL);
			rl->rl_udp[e] = NULL;
		}
	}
	if (rl->rl_timer_armed) {
		loop_timer_del(rl->rl_loop, &rl->rl_idle_timer);
		rl->rl_timer_armed = false;
	}
	for (unsigned i = 0; i < srv->rs_nlisteners; i++) {
		struct rpc_listener *li = srv->rs_listeners[i];
		if (li->li_rl != rl || li->li_fd < 0)
			continue;
		if (li->li_backoff_armed)
			loop_timer_del(rl->rl_loop, &li->li_backoff);
		li->li_backoff_armed = false;
		if (li->li_watching)
			loop_watch_del(rl->rl_loop, &li->li_watch);
		li->li_watching = false;
		close(li->li_fd);
		li->li_fd = -1;
	}
}

static void rpc_loop_quiesce(struct loop_task *task)
{
	struct rpc_loop *rl = SH_CONTAINER_OF(task, struct rpc_loop, rl_quiesce_task);
	rpc_loop_close_all(rl);
	atomic_store(&rl->rl_quiesced, true);
}

static void rpc_server_close_all(struct rpc_server *srv)
{
	for (unsigned l = 0; l < srv->rs_nloops; l++)
		rpc_loop_close_all(&srv->rs_loops[l]);
}

/* How long rpc_server_stop waits for calls in flight (waiting on a back end) to finish. */
#define RPC_STOP_DRAIN_NS (10ull * 1000000000ull)

void rpc_server_stop(struct rpc_server *srv)
{
	if (srv->rs_stopped)
		return;
	srv->rs_stopped = true;
	/* Drain: each running loop closes its sockets on its own thread, so no new call arrives;
	 * the loops keep running until every call in flight has finished (its back end completed
	 * it), so nothing below the rpc layer is left holding a call or posting to a dead loop. */
	for (unsigned l = 0; l < srv->rs_nloops; l++) {
		struct rpc_loop *rl = &srv->rs_loops[l];
		if (!rl->rl_thread_started)
			continue;
		rl->rl_quiesce_task.lt_fn = rpc_loop_quiesce;
		loop_post(rl->rl_loop, &rl->rl_quiesce_task);
	}
	uint64_t deadline = clock_monotonic_ns() + RPC_STOP_DRAIN_NS;
	for (;;) {
		bool quiet = atomic_load(&srv->rs_calls_live) == 0;
		for (unsigned l = 0; quiet && l < srv->rs_nloops; l++)
			if (srv->rs_loops[l].rl_thread_started && !atomic_load(&srv->rs_loops[l].rl_quiesced))
				quiet = false;
		if (quiet)
			break;
		if (clock_monotonic_ns() > deadline) {
			log_warn("rpc: %u calls still in flight at stop; abandoning them",
				 atomic_load(&srv->rs_calls_live));
			break;
		}
		struct timespec pause = {.tv_sec = 0, .tv_nsec = 5000000};
		nanosleep(&pause, NULL);
	}
	for (unsigned l = 0; l < srv->rs_nloops; l++)
		if (srv->rs_loops[l].rl_thread_started)
			loop_stop(srv->rs_loops[l].rl_loop);
	for (unsigned l = 0; l < srv->rs_nloops; l++) {
		struct rpc_loop *rl = &srv->rs_loops[l];
		if (rl->rl_thread_started) {
			pthread_join(rl->rl_thread, NULL);
			rl->rl_thread_started = false;
		}
	}
	rpc_server_close_all(srv);
}

void rpc_server_destroy(struct rpc_server *srv)
{
	if (!srv)
		return;
	rpc_server_stop(srv);
	if (srv->rs_portmap) {
		rpc_portmap_free(srv->rs_portmap);
		srv->rs_portmap = NULL;
	}
	for (unsigned i = 0; i < srv->rs_nlisteners; i++)
		mem_free(srv->rs_listeners[i]);
	mem_free(srv->rs_listeners);
	for (unsigned i = 0; i < srv->rs_neps; i++)
		mem_free(srv->rs_eps[i]);
	mem_free(srv->rs_eps);
	for (unsigned l = 0; l < srv->rs_nloops; l++) {
		loop_destroy(srv->rs_loops[l].rl_loop);
		rpc_loop_free_calls(&srv->rs_loops[l]);
		rpc_buf_pool_fini(&srv->rs_loops[l].rl_pool);
		rpc_buf_pool_fini(&srv->rs_loops[l].rl_small_pool);
		mem_free(srv->rs_loops[l].rl_scratch);
		mem_free(srv->rs_loops[l].rl_udp);
		free(srv->rs_loops[l].rl_br); /* unregistered when its ring was freed */
		mem_free(srv->rs_loops[l].rl_br_mem);
	}
	mem_free(srv->rs_loops);
	rpc_drc_destroy(srv->rs_drc);
	rpc_conntab_destroy(srv->rs_conntab);
	mem_free(srv);
}
