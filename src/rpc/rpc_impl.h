/* rpc_impl.h: what the files of the rpc module share: the record-marking reassembler, the
 * duplicate request cache, call-header parsing and reply-header encoding. Not for other modules
 * (unit tests of this module include it too). */
#ifndef SHALE_RPC_IMPL_H
#define SHALE_RPC_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "rpc/rpc.h"

/* RFC 5531 section 9: message types, reply and reject statuses. */
#define RPC_MSG_CALL 0u
#define RPC_MSG_REPLY 1u
#define RPC_MSG_ACCEPTED 0u
#define RPC_MSG_DENIED 1u
#define RPC_REJECT_MISMATCH 0u
#define RPC_REJECT_AUTH_ERROR 1u
#define RPC_VERSION 2u
/* RFC 5531 section 8.2: opaque_auth bodies are at most 400 bytes. */
#define RPC_AUTH_BODY_MAX 400u

/* RFC 5531 section 11: a record-marking header is 4 bytes, top bit = last fragment. */
#define RPC_RM_HDR_BYTES 4u
#define RPC_RM_LAST 0x80000000u
#define RPC_RM_LEN_MASK 0x7fffffffu

/* Reply header sizes (RFC 5531 section 9): xid, mtype, reply_stat, verf flavor, verf length,
 * accept_stat = 24 bytes; PROG_MISMATCH adds low and high. Denied replies: xid, mtype,
 * reply_stat, reject_stat, then low+high (RPC_MISMATCH) or auth_stat (AUTH_ERROR). */
#define RPC_ACCEPTED_HDR_BYTES 24u
#define RPC_REPLY_PREFIX_BYTES (RPC_RM_HDR_BYTES + RPC_ACCEPTED_HDR_BYTES)

/* ---- record buffer pool (rpc_record.c) ----
 * A few buffers of the largest record size, kept by one loop and reused for large records (big
 * WRITEs), so that such a record is received straight into its final buffer: no realloc copies
 * while it grows and no page faults on fresh memory. At most bp_max buffers ever exist; when all
 * are in use a record grows on the heap as usual. Used on its loop's thread only. */
struct rpc_buf_pool {
	size_t bp_buf_bytes; /* size of every buffer (the record limit) */
	unsigned bp_max;     /* buffers allocated at most */
	unsigned bp_allocated;
	unsigned bp_nfree;
	uint8_t **bp_free;   /* bp_max slots */
};
/* Returns 0 or -ENOMEM. Free with rpc_buf_pool_fini once every buffer is back. */
SH_MUST_CHECK int rpc_buf_pool_init(struct rpc_buf_pool *pool, size_t buf_bytes, unsigned max);
void rpc_buf_pool_fini(struct rpc_buf_pool *pool);
/* A buffer of bp_buf_bytes, or NULL when bp_max are in use (or memory is short). */
uint8_t *rpc_buf_pool_get(struct rpc_buf_pool *pool);
void rpc_buf_pool_put(struct rpc_buf_pool *pool, uint8_t *buf);

/* ---- record marking (rpc_record.c) ----
 * A reassembler turns a TCP byte stream into whole records. It allocates the record buffer only
 * as fragment bytes actually arrive (never on the strength of a header's claim), and rejects a
 * fragment header that would take the record past rm_max_record before reading its body. */
struct rpc_rm {
	size_t rm_max_record;
	uint8_t rm_hdr[RPC_RM_HDR_BYTES];
	unsigned rm_hdr_have;  /* header bytes collected so far (0..4) */
	bool rm_in_body;       /* inside a fragment body */
	bool rm_last;          /* the current fragment is the record's last */
	uint32_t rm_frag_left; /* body bytes of the current fragment still to come */
	uint8_t *rm_buf;       /* the record so far; owned by the reassembler until handed out */
	size_t rm_len;
	size_t rm_cap;
	struct rpc_buf_pool *rm_pool;       /* optional: where large records get their buffer */
	struct rpc_buf_pool *rm_small_pool; /* optional: where small records get theirs */
	struct rpc_buf_pool *rm_buf_pool;   /* the pool rm_buf came from; NULL: the heap */
	struct rpc_buf_pool *rm_out_pool;   /* the same for the record last handed out */
};
void rpc_rm_init(struct rpc_rm *rm, size_t max_record_bytes);
/* Lets records whose fragment runs past RPC_RM_POOL_MIN bytes take a buffer from pool (whose
 * buffers must hold max_record_bytes), and records whose first fragment fits small's buffers take
 * one of those (small may be NULL). After a record is handed out, rm_out_pool says where its
 * buffer goes back (rpc_buf_pool_put; NULL: mem_free). */
void rpc_rm_set_pools(struct rpc_rm *rm, struct rpc_buf_pool *pool, struct rpc_buf_pool *small);
#define RPC_RM_POOL_MIN (64u * 1024u)
/* Frees any partial record. */
void rpc_rm_fini(struct rpc_rm *rm);
/* Consumes bytes from data until one record completes or the input runs out. *consumed_out is
 * always set. Returns 1 when a record completed: *record_out (NULL for an empty record; else
 * owned by the caller, free with mem_free) and *record_len_out. Returns 0 when all input was
 * consumed without completing a record; -EMSGSIZE when a fragment would exceed the limit;
 * -ENOMEM. After an error the reassembler must only be finalised. */
SH_MUST_CHECK int rpc_rm_feed(struct rpc_rm *rm, const uint8_t *data, size_t len,
			      size_t *consumed_out, uint8_t **record_out, size_t *record_len_out);
/* Direct reception of a large fragment body: when the reassembler is inside a body with at least
 * min_bytes still to come, makes room and returns where the next body bytes go, with
 * *space_out (> 0, never past the fragment's end); the caller reads into it and reports the
 * bytes with rpc_rm_body_commit. Returns NULL when not in such a body (feed with rpc_rm_feed
 * instead) or, with *err_out = -ENOMEM, when room could not be made. */
uint8_t *rpc_rm_body_space(struct rpc_rm *rm, size_t min_bytes, size_t *space_out, int *err_out);
/* Accounts n bytes stored at rpc_rm_body_space's pointer (n <= its *space_out). Returns 1 when
 * the record completed (*record_out, *record_len_out as rpc_rm_feed), else 0. */
int rpc_rm_body_commit(struct rpc_rm *rm, size_t n, uint8_t **record_out, size_t *record_len_out);
/* Bytes the reassembler holds right now, as counted against the connection and loop limits: its
 * heap buffer, or for a pool buffer (which the loop owns and keeps, as large as the record limit
 * whatever the record's size) the bytes received into it. */
static inline size_t rpc_rm_buffered(const struct rpc_rm *rm)
{
	return rm->rm_buf_pool && rm->rm_buf_pool == rm->rm_pool ? rm->rm_len : rm->rm_cap;
}
/* True when no partial record (not even a partial header) is pending. */
static inline bool rpc_rm_idle(const struct rpc_rm *rm)
{
	return rm->rm_hdr_have == 0 && !rm->rm_in_body && rm->rm_len == 0;
}

/* ---- call header (rpc_msg.c) ---- */
enum rpc_parse_result {
	RPC_PARSE_OK,          /* a CALL with rpcvers 2 and acceptable credentials */
	RPC_PARSE_DROP,        /* not a CALL, or too short to answer: drop silently (logged) */
	RPC_PARSE_RPC_MISMATCH, /* answer MSG_DENIED RPC_MISMATCH */
	RPC_PARSE_AUTH_ERROR,  /* answer MSG_DENIED AUTH_ERROR with *auth_stat_out */
};
struct rpc_call_hdr {
	uint32_t rch_xid;
	uint32_t rch_rpcvers;
	uint32_t rch_prog;
	uint32_t rch_vers;
	uint32_t rch_proc;
	struct rpc_cred rch_cred;
};
/* Parses the call header at the start of msg. On OK, *args_out covers the procedure arguments.
 * On AUTH_ERROR, *auth_stat_out says why. */
enum rpc_parse_result rpc_msg_parse_call(const uint8_t *msg, size_t len, struct rpc_call_hdr *hdr,
					 struct xdr_dec *args_out, enum rpc_auth_stat *auth_stat_out);
/* Encoders of reply headers; each writes at p and returns the bytes written. */
size_t rpc_msg_put_accepted(uint8_t *p, uint32_t xid, uint32_t accept_stat);
size_t rpc_msg_put_prog_mismatch(uint8_t *p, uint32_t xid, uint32_t low, uint32_t high);
size_t rpc_msg_put_rpc_mismatch(uint8_t *p, uint32_t xid);
size_t rpc_msg_put_auth_error(uint8_t *p, uint32_t xid, uint32_t auth_stat);
/* Encodes a call header (client side) with the given credential (NULL or flavor NONE: AUTH_NONE)
 * and an AUTH_NONE verifier. */
void rpc_msg_put_call(struct xdr_enc *enc, uint32_t xid, uint32_t prog, uint32_t vers,
		      uint32_t proc, const struct rpc_cred *cred);

/* ---- duplicate request cache (rpc_drc.c) ---- */
struct rpc_drc_key {
	uint8_t rdk_addr[16];  /* IPv4 (first 4 bytes) or IPv6 address of the client */
	uint16_t rdk_family;
	uint16_t rdk_port;     /* UDP source port; 0 for TCP (see rpc_drc.c) */
	uint32_t rdk_transport;
	uint32_t rdk_xid;
	uint32_t rdk_prog;
	uint32_t rdk_vers;
	uint32_t rdk_proc;
	uint64_t rdk_args_hash;
};
enum rpc_drc_state { RPC_DRC_MISS, RPC_DRC_IN_PROGRESS, RPC_DRC_DONE };
struct rpc_drc;
/* Largest reply kept for replay; a larger one is not cached (non-idempotent replies are small). */
#define RPC_DRC_MAX_REPLY_BYTES 65536u
/* Creates a cache of at most capacity entries (>= 1). Destroy with rpc_drc_destroy. */
SH_MUST_CHECK int rpc_drc_create(unsigned capacity, struct rpc_drc **out);
void rpc_drc_destroy(struct rpc_drc *drc);
/* Builds the key of a call (from its peer, transport, header and argument bytes). */
void rpc_drc_key_init(struct rpc_drc_key *key, const struct sockaddr_storage *peer,
		      enum rpc_transport transport, uint32_t xid, uint32_t prog, uint32_t vers,
		      uint32_t proc, const void *args, size_t args_len);
/* Looks the key up. MISS: an in-progress entry was inserted (the caller must later call
 * rpc_drc_complete or rpc_drc_abandon). IN_PROGRESS: drop the retransmission. DONE: *reply_out
 * receives a copy of the original reply (owned by the caller, mem_free) and *reply_len_out its
 * length. Returns 0 or -ENOMEM (then treat as untracked). */
SH_MUST_CHECK int rpc_drc_begin(struct rpc_drc *drc, const struct rpc_drc_key *key,
				enum rpc_drc_state *state_out, uint8_t **reply_out,
				size_t *reply_len_out);
/* Stores the reply (the concatenation of iov) for the key and marks it done. */
void rpc_drc_complete(struct rpc_drc *drc, const struct rpc_drc_key *key, const struct iovec *iov,
		      unsigned iovcnt);
/* Forgets an in-progress entry (its call was dropped without a reply). */
void rpc_drc_abandon(struct rpc_drc *drc, const struct rpc_drc_key *key);
/* Entries held (for tests and statistics). */
unsigned rpc_drc_count(struct rpc_drc *drc);

/* ---- connection table (rpc_conntab.c) ----
 * The server's open TCP connections by client address: the connection limit, the per-address
 * cap, and which connection to close to make room (the rules are at the top of rpc_conntab.c).
 * Thread-safe: one mutex, taken on accept and close only. */
#define RPC_CONNTAB_SLACK RPC_CONNS_SLACK
struct rpc_conntab_addr;
struct rpc_conntab_entry {
	struct rpc_conntab_addr *ce_addr; /* the table's; NULL while not in the table */
	struct rpc_conntab_entry *ce_prev; /* the address's entries */
	struct rpc_conntab_entry *ce_next;
	void *ce_owner;                /* the caller's: who closes the connection (its loop) */
	_Atomic uint64_t ce_active_ns; /* last activity, stored by the owning loop */
	atomic_bool ce_evict;          /* chosen to close to make room; its loop closes it */
};
struct rpc_conntab;
/* Creates a table for max_conns connections at most max_per_addr from one address (both > 0).
 * Destroy with rpc_conntab_destroy once it is empty. Returns 0, -EINVAL or -ENOMEM. */
SH_MUST_CHECK int rpc_conntab_create(unsigned max_conns, unsigned max_per_addr,
				     struct rpc_conntab **out);
void rpc_conntab_destroy(struct rpc_conntab *t);
/* Admits a new connection from peer, active at now_ns, whose owner is owner: fills and files
 * entry. Returns 0, with *victim_owner_out NULL, or the owner of a connection now marked
 * (ce_evict) that the owner must close to make room; or -EBUSY (refused: the table is full and
 * nothing can be closed; entry not filed) or -ENOMEM. */
SH_MUST_CHECK int rpc_conntab_add(struct rpc_conntab *t, struct rpc_conntab_entry *entry,
				  const struct sockaddr_storage *peer, uint64_t now_ns, void *owner,
				  void **victim_owner_out);
/* Takes a filed entry out of the table (the connection closed). */
void rpc_conntab_remove(struct rpc_conntab *t, struct rpc_conntab_entry *entry);
/* Connections in the table, those from peer's address (peer may be NULL), and connections
 * marked for closing since the table was made. */
void rpc_conntab_counts(struct rpc_conntab *t, const struct sockaddr_storage *peer,
			unsigned *total_out, unsigned *of_addr_out, unsigned *evicted_out);

/* ---- server internals shared with the portmapper (rpc_server.c, rpc_portmap.c) ---- */
#define RPC_PMAP_PROG 100000u
#define RPC_PMAP_VERS 2u
#define RPC_IPPROTO_TCP 6u
#define RPC_IPPROTO_UDP 17u

/* Adds listeners that serve only the given program (the builtin portmapper). */
SH_MUST_CHECK int rpc_server_listen_program(struct rpc_server *srv, const char *addr, uint16_t port,
					    unsigned transport_mask,
					    const struct rpc_program_desc *prog, void *ctx,
					    uint16_t *bound_port_out);
/* The port the first main (not program-restricted) listener of the transport is bound to, or 0. */
uint16_t rpc_server_main_port(const struct rpc_server *srv, enum rpc_transport transport);
/* Iterates the registered programs: returns false past the end. */
bool rpc_server_program_at(const struct rpc_server *srv, unsigned index,
			   const struct rpc_program_desc **prog_out);
/* The portmapper's state hung on the server (owned by rpc_portmap.c, freed by
 * rpc_portmap_stop or rpc_server_destroy through rpc_portmap_free). */
struct rpc_portmap;
struct rpc_portmap **rpc_server_portmap_slot(struct rpc_server *srv);
/* The port given to rpc_portmap_set_port (default 111). */
uint16_t rpc_server_portmap_cfg_port(const struct rpc_server *srv);
void rpc_portmap_free(struct rpc_portmap *pm);
/* A portmapper mapping (RFC 1833 section 3): prog | vers | prot | port. */
struct rpc_pmap_mapping {
	uint32_t pmm_prog;
	uint32_t pmm_vers;
	uint32_t pmm_prot;
	uint32_t pmm_port;
};
/* Decodes the arguments of SET, UNSET and GETPORT (one mapping, nothing after it) into *m.
 * Returns false for bytes that are not exactly one mapping (GARBAGE_ARGS). */
bool rpc_pmap_get_mapping(struct xdr_dec *dec, struct rpc_pmap_mapping *m);


/* Fills *ss and *len from a numeric IPv4 or IPv6 address and a port (host order). Returns 0 or
 * -EINVAL for anything that is not a numeric address. Shared by the server and both clients. */
SH_MUST_CHECK int rpc_parse_addr(const char *addr, uint16_t port, struct sockaddr_storage *ss,
				 socklen_t *len);

#endif
