/* rpc_record.c: TCP record marking (RFC 5531 section 11): reassembling fragments into records.
 *
 * A record is one or more fragments; each fragment starts with a 4-byte big-endian header whose
 * top bit marks the record's last fragment and whose low 31 bits give the fragment's body length.
 * The reassembler is a small state machine fed with whatever a read returned:
 *
 *   HEADER (rm_hdr_have 0..3) --4th byte--> check limit --> BODY (rm_frag_left bytes)
 *   BODY --last byte of a non-last fragment--> HEADER
 *   BODY --last byte of the last fragment--> record handed out, back to HEADER
 *
 * Rules:
 *   1. The size limit applies to the whole record: the sum of fragment lengths so far plus the
 *      announced fragment is checked against rm_max_record when a header completes, before any
 *      byte of its body is read, so a header claiming 2 GiB is refused without allocating.
 *   2. Memory is allocated only for bytes that have arrived (growing geometrically up to the end
 *      of the current fragment), so a peer that announces a large fragment and then stalls holds
 *      at most what it actually sent, rounded up by at most a factor of two.
 *   3. Zero-length fragments are legal; an empty record is handed out as (NULL, 0).
 *   4. A fragment that runs past RPC_RM_POOL_MIN bytes takes a buffer of the full record size
 *      from the loop's pool when one is free (rpc_rm_set_pools). This commits no new memory on
 *      the strength of a header (the pool's buffers exist already and are few), and lets the
 *      body be read straight into its final place (rpc_rm_body_space) without a copy through
 *      the read buffer or a realloc while it grows.
 *   5. A record whose first fragment fits the loop's small buffers (rpc_rm_set_pools; most NFS
 *      calls but WRITE) takes one of those when one is free: glibc serves such sizes from its
 *      bins, not its per-thread cache, once dozens are in flight, which cost 1-2% of the
 *      server's CPU per call. A small buffer the record outgrows is copied to the heap. */
#include <errno.h>
#include <string.h>

#include "rpc/rpc_impl.h"

#define RPC_RM_MIN_ALLOC 4096u /* first allocation for a record: covers most NFS calls whole */

void rpc_rm_init(struct rpc_rm *rm, size_t max_record_bytes)
{
	memset(rm, 0, sizeof(*rm));
	rm->rm_max_record = max_record_bytes;
}

void rpc_rm_set_pools(struct rpc_rm *rm, struct rpc_buf_pool *pool, struct rpc_buf_pool *small)
{
	VERIFY(pool->bp_buf_bytes >= rm->rm_max_record);
	rm->rm_pool = pool;
	rm->rm_small_pool = small;
}

static void rpc_rm_free_buf(struct rpc_rm *rm)
{
	if (rm->rm_buf_pool)
		rpc_buf_pool_put(rm->rm_buf_pool, rm->rm_buf);
	else
		mem_free(rm->rm_buf);
	rm->rm_buf_pool = NULL;
}

void rpc_rm_fini(struct rpc_rm *rm)
{
	rpc_rm_free_buf(rm);
	rm->rm_buf = NULL;
	rm->rm_len = 0;
	rm->rm_cap = 0;
	rm->rm_hdr_have = 0;
	rm->rm_in_body = false;
}

/* Makes room for n more bytes of the current fragment (rule 2). */
static int rpc_rm_reserve(struct rpc_rm *rm, size_t n)
{
	size_t need = rm->rm_len + n;
	if (need <= rm->rm_cap)
		return 0;
	size_t frag_end = rm->rm_len + rm->rm_frag_left;
	struct rpc_buf_pool *pool = NULL;
	if (rm->rm_pool && rm->rm_buf_pool != rm->rm_pool && frag_end > RPC_RM_POOL_MIN)
		pool = rm->rm_pool; /* rule 4 */
	else if (rm->rm_cap == 0 && rm->rm_small_pool &&
	         frag_end <= rm->rm_small_pool->bp_buf_bytes)
		pool = rm->rm_small_pool; /* rule 5 */
	uint8_t *pbuf = pool ? rpc_buf_pool_get(pool) : NULL;
	if (pbuf) {
		if (rm->rm_len)
			memcpy(pbuf, rm->rm_buf, rm->rm_len);
		rpc_rm_free_buf(rm);
		rm->rm_buf = pbuf;
		rm->rm_cap = pool->bp_buf_bytes;
		rm->rm_buf_pool = pool;
		return 0;
	}
	size_t cap = rm->rm_cap ? rm->rm_cap * 2 : RPC_RM_MIN_ALLOC;
	if (cap > frag_end)
		cap = frag_end;
	if (cap < need)
		cap = need;
	uint8_t *buf;
	if (rm->rm_buf_pool) { /* a small buffer outgrown (a large one is never: it holds any) */
		buf = mem_alloc(cap);
		if (!buf)
			return -ENOMEM;
		memcpy(buf, rm->rm_buf, rm->rm_len);
		rpc_rm_free_buf(rm);
	} else {
		buf = mem_realloc(rm->rm_buf, cap);
		if (!buf)
			return -ENOMEM;
	}
	rm->rm_buf = buf;
	rm->rm_cap = cap;
	return 0;
}

/* Hands the completed record out and starts the next one empty (rule 3: no empty buffer). */
static void rpc_rm_hand_out(struct rpc_rm *rm, uint8_t **record_out, size_t *record_len_out)
{
	rm->rm_out_pool = NULL;
	if (rm->rm_len) {
		*record_out = rm->rm_buf;
		rm->rm_out_pool = rm->rm_buf_pool;
	} else {
		*record_out = NULL;
		rpc_rm_free_buf(rm);
	}
	*record_len_out = rm->rm_len;
	rm->rm_buf = NULL;
	rm->rm_buf_pool = NULL;
	rm->rm_len = 0;
	rm->rm_cap = 0;
	rm->rm_last = false;
}

int rpc_rm_feed(struct rpc_rm *rm, const uint8_t *data, size_t len, size_t *consumed_out,
		uint8_t **record_out, size_t *record_len_out)
{
	size_t pos = 0;
	*record_out = NULL;
	*record_len_out = 0;
	for (;;) {
		if (!rm->rm_in_body) {
			while (rm->rm_hdr_have < RPC_RM_HDR_BYTES && pos < len)
				rm->rm_hdr[rm->rm_hdr_have++] = data[pos++];
			if (rm->rm_hdr_have < RPC_RM_HDR_BYTES)
				break;
			uint32_t word = ((uint32_t)rm->rm_hdr[0] << 24) | ((uint32_t)rm->rm_hdr[1] << 16) |
					((uint32_t)rm->rm_hdr[2] << 8) | (uint32_t)rm->rm_hdr[3];
			uint32_t frag_len = word & RPC_RM_LEN_MASK;
			rm->rm_hdr_have = 0;
			if (frag_len > rm->rm_max_record || rm->rm_len > rm->rm_max_record - frag_len) {
				*consumed_out = pos;
				return -EMSGSIZE; /* rule 1 */
			}
			rm->rm_last = (word & RPC_RM_LAST) != 0;
			rm->rm_frag_left = frag_len;
			rm->rm_in_body = true;
		}
		size_t take = SH_MIN((size_t)rm->rm_frag_left, len - pos);
		if (take) {
			int rc = rpc_rm_reserve(rm, take);
			if (rc < 0) {
				*consumed_out = pos;
				return rc;
			}
			memcpy(rm->rm_buf + rm->rm_len, data + pos, take);
			rm->rm_len += take;
			rm->rm_frag_left -= (uint32_t)take;
			pos += take;
		}
		if (rm->rm_frag_left > 0)
			break; /* input exhausted mid-fragment */
		rm->rm_in_body = false;
		if (rm->rm_last) {
			rpc_rm_hand_out(rm, record_out, record_len_out);
			*consumed_out = pos;
			return 1;
		}
	}
	*consumed_out = pos;
	return 0;
}

uint8_t *rpc_rm_body_space(struct rpc_rm *rm, size_t min_bytes, size_t *space_out, int *err_out)
{
	*err_out = 0;
	if (!rm->rm_in_body || rm->rm_frag_left == 0 || rm->rm_frag_left < min_bytes)
		return NULL;
	/* Room for the rest of the fragment, or as much as the growth rule allows now. */
	if (rm->rm_cap == rm->rm_len) {
		int rc = rpc_rm_reserve(rm, SH_MIN((size_t)rm->rm_frag_left, (size_t)RPC_RM_MIN_ALLOC));
		if (rc < 0) {
			*err_out = rc;
			return NULL;
		}
	}
	*space_out = SH_MIN(rm->rm_cap - rm->rm_len, (size_t)rm->rm_frag_left);
	return rm->rm_buf + rm->rm_len;
}

int rpc_rm_body_commit(struct rpc_rm *rm, size_t n, uint8_t **record_out, size_t *record_len_out)
{
	*record_out = NULL;
	*record_len_out = 0;
	VERIFY(rm->rm_in_body && n <= rm->rm_frag_left && rm->rm_len + n <= rm->rm_cap);
	rm->rm_len += n;
	rm->rm_frag_left -= (uint32_t)n;
	if (rm->rm_frag_left > 0)
		return 0;
	rm->rm_in_body = false;
	if (!rm->rm_last)
		return 0;
	rpc_rm_hand_out(rm, record_out, record_len_out);
	return 1;
}

int rpc_buf_pool_init(struct rpc_buf_pool *pool, size_t buf_bytes, unsigned max)
{
	memset(pool, 0, sizeof(*pool));
	pool->bp_buf_bytes = buf_bytes;
	pool->bp_max = max;
	pool->bp_free = mem_zalloc((max ? max : 1) * sizeof(pool->bp_free[0]));
	return pool->bp_free ? 0 : -ENOMEM;
}

void rpc_buf_pool_fini(struct rpc_buf_pool *pool)
{
	/* Buffers still out belong to calls abandoned at stop (rpc_server_stop gave up waiting);
	 * they are left to the process's exit rather than freed under their holders. */
	if (pool->bp_nfree != pool->bp_allocated)
		log_warn("rpc: %u pooled record buffers still in use at shutdown",
			 pool->bp_allocated - pool->bp_nfree);
	while (pool->bp_nfree > 0)
		mem_free(pool->bp_free[--pool->bp_nfree]);
	pool->bp_allocated = 0;
	mem_free(pool->bp_free);
	pool->bp_free = NULL;
}

uint8_t *rpc_buf_pool_get(struct rpc_buf_pool *pool)
{
	if (pool->bp_nfree > 0)
		return pool->bp_free[--pool->bp_nfree];
	if (pool->bp_allocated >= pool->bp_max)
		return NULL;
	uint8_t *buf = mem_alloc(pool->bp_buf_bytes);
	if (buf)
		pool->bp_allocated++;
	return buf;
}

void rpc_buf_pool_put(struct rpc_buf_pool *pool, uint8_t *buf)
{
	VERIFY(pool->bp_nfree < pool->bp_allocated);
	pool->bp_free[pool->bp_nfree++] = buf;
}
