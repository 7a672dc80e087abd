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
 *   3. Zero-length fragments are legal; an empty record is handed out as (NULL, 0). */
#include <errno.h>
#include <string.h>

#include "rpc/rpc_impl.h"

#define RPC_RM_MIN_ALLOC 4096u /* first allocation for a record: covers most NFS calls whole */

void rpc_rm_init(struct rpc_rm *rm, size_t max_record_bytes)
{
	memset(rm, 0, sizeof(*rm));
	rm->rm_max_record = max_record_bytes;
}

void rpc_rm_fini(struct rpc_rm *rm)
{
	mem_free(rm->rm_buf);
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
	size_t cap = rm->rm_cap ? rm->rm_cap * 2 : RPC_RM_MIN_ALLOC;
	if (cap > frag_end)
		cap = frag_end;
	if (cap < need)
		cap = need;
	uint8_t *buf = mem_realloc(rm->rm_buf, cap);
	if (!buf)
		return -ENOMEM;
	rm->rm_buf = buf;
	rm->rm_cap = cap;
	return 0;
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
			*record_out = rm->rm_len ? rm->rm_buf : NULL;
			if (!rm->rm_len)
				mem_free(rm->rm_buf);
			*record_len_out = rm->rm_len;
			rm->rm_buf = NULL;
			rm->rm_len = 0;
			rm->rm_cap = 0;
			rm->rm_last = false;
			*consumed_out = pos;
			return 1;
		}
	}
	*consumed_out = pos;
	return 0;
}
