/* fuzz_rpc_record.c: libFuzzer target for TCP record marking (rpc_record.c) and, for each record
 * it completes, the call header parser (rpc_msg.c).
 *
 * Covers: rpc_rm_feed over a stream cut into reads of varying sizes, the direct reception of
 * fragment bodies (rpc_rm_body_space / rpc_rm_body_commit) as the server uses it for large
 * WRITEs, and the loop's record buffer pools (a large pool for fragments past RPC_RM_POOL_MIN, a
 * small one for short records; rpc_rm_set_pools), with a record limit of 128 KiB.
 *
 * Input: byte 0 picks the pattern of read sizes, byte 1 bit 0 whether bodies are received
 * directly, bit 1 whether the pools are used; the rest is the byte stream. Checks beyond "no
 * crash": a record never exceeds the limit, an error is -EMSGSIZE or -ENOMEM, and the reassembler
 * never holds more than the record limit plus what one fragment may round up to. */
#include "fuzz_rpc.h"

#define FUZZ_RM_MAX_RECORD (128u * 1024u)
#define FUZZ_RM_SMALL_BYTES 1024u
#define FUZZ_RM_DIRECT_MIN 256u /* the least body a direct reception asks for (as the server's) */

/* Read sizes: byte 0 picks a starting point in this table and a stride through it. */
static const size_t fuzz_rm_reads[] = {1, 2, 3, 4, 5, 7, 8, 13, 64, 511, 4096, 65536};
#define FUZZ_RM_NREADS (sizeof(fuzz_rm_reads) / sizeof(fuzz_rm_reads[0]))

static void fuzz_rm_record(struct rpc_rm *rm, uint8_t *rec, size_t len)
{
	if (len > FUZZ_RM_MAX_RECORD || (rec == NULL) != (len == 0))
		__builtin_trap();
	if (!rec)
		return;
	struct rpc_call_hdr hdr;
	struct xdr_dec args;
	enum rpc_auth_stat why;
	(void)rpc_msg_parse_call(rec, len, &hdr, &args, &why);
	if (rm->rm_out_pool)
		rpc_buf_pool_put(rm->rm_out_pool, rec);
	else
		mem_free(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {data, size};
	uint8_t pattern = fuzz_u8(&in);
	uint8_t mode = fuzz_u8(&in);
	struct rpc_buf_pool big, small;
	struct rpc_rm rm;
	rpc_rm_init(&rm, FUZZ_RM_MAX_RECORD);
	if (rpc_buf_pool_init(&big, FUZZ_RM_MAX_RECORD, 2) != 0 ||
	    rpc_buf_pool_init(&small, FUZZ_RM_SMALL_BYTES, 4) != 0)
		abort();
	if (mode & 2)
		rpc_rm_set_pools(&rm, &big, &small);
	size_t pick = pattern % FUZZ_RM_NREADS, stride = 1u + pattern / FUZZ_RM_NREADS % 5u;
	size_t pos = 0;
	const uint8_t *s = in.fi_data;
	while (pos < in.fi_len) {
		size_t want = SH_MIN(fuzz_rm_reads[pick], in.fi_len - pos);
		pick = (pick + stride) % FUZZ_RM_NREADS;
		uint8_t *rec = NULL;
		size_t len = 0;
		int rc;
		size_t space;
		int err;
		uint8_t *direct =
		    (mode & 1) ? rpc_rm_body_space(&rm, FUZZ_RM_DIRECT_MIN, &space, &err) : NULL;
		if (direct) {
			size_t n = SH_MIN(space, want);
			memcpy(direct, s + pos, n);
			pos += n;
			rc = rpc_rm_body_commit(&rm, n, &rec, &len);
		} else {
			if ((mode & 1) && err != 0)
				break; /* -ENOMEM: the connection would close */
			size_t used = 0;
			rc = rpc_rm_feed(&rm, s + pos, want, &used, &rec, &len);
			if (used > want)
				__builtin_trap();
			pos += used;
			if (rc < 0) {
				if (rc != -EMSGSIZE && rc != -ENOMEM)
					__builtin_trap();
				break; /* the connection closes; only rpc_rm_fini may follow */
			}
		}
		if (rc == 1)
			fuzz_rm_record(&rm, rec, len);
		if (rpc_rm_buffered(&rm) > 2 * (size_t)FUZZ_RM_MAX_RECORD)
			__builtin_trap();
	}
	rpc_rm_fini(&rm);
	rpc_buf_pool_fini(&big);
	rpc_buf_pool_fini(&small);
	return 0;
}

/* Appends a fragment header and body to enc. */
static void fuzz_rm_put_frag(struct xdr_enc *enc, const uint8_t *body, size_t len, bool last)
{
	xdr_put_u32(enc, (uint32_t)len | (last ? RPC_RM_LAST : 0u));
	memcpy(xdr_reserve(enc, len), body, len);
}

/* Starts a seed: the read pattern and mode bytes, then the stream in enc. */
static void fuzz_rm_seed_begin(struct xdr_enc *enc, uint8_t *buf, size_t cap, uint8_t pattern,
                               uint8_t mode)
{
	buf[0] = pattern;
	buf[1] = mode;
	xdr_enc_init(enc, buf + 2, cap - 2);
}

static void fuzz_write_seeds(const char *dir)
{
	uint8_t call[1024], buf[4096];
	size_t clen = fuzz_seed_getattr(call, sizeof(call));
	struct xdr_enc enc;

	/* one GETATTR in one fragment, read 5 bytes at a time, fed through rpc_rm_feed */
	fuzz_rm_seed_begin(&enc, buf, sizeof(buf), 4, 0);
	fuzz_rm_put_frag(&enc, call, clen, true);
	fuzz_seed(dir, "getattr", buf, 2 + xdr_enc_len(&enc));
	/* the same call in three fragments (one empty), then a second record; bodies received
	 * directly, with the pools, in reads of 64 KiB */
	fuzz_rm_seed_begin(&enc, buf, sizeof(buf), 11, 3);
	fuzz_rm_put_frag(&enc, call, 12, false);
	fuzz_rm_put_frag(&enc, call + 12, 0, false);
	fuzz_rm_put_frag(&enc, call + 12, clen - 12, true);
	fuzz_rm_put_frag(&enc, call, clen, true);
	fuzz_seed(dir, "getattr-fragments-direct", buf, 2 + xdr_enc_len(&enc));
	/* an empty record, then a header announcing 100 KiB of which 300 bytes arrive (the large
	 * pool's path) */
	fuzz_rm_seed_begin(&enc, buf, sizeof(buf), 7, 3);
	xdr_put_u32(&enc, RPC_RM_LAST);
	xdr_put_u32(&enc, RPC_RM_LAST | (100u * 1024u));
	memset(xdr_reserve(&enc, 300), 0x5a, 300);
	fuzz_seed(dir, "empty-then-partial-large", buf, 2 + xdr_enc_len(&enc));
	/* a fragment past the limit: -EMSGSIZE */
	fuzz_rm_seed_begin(&enc, buf, sizeof(buf), 0, 0);
	xdr_put_u32(&enc, RPC_RM_LAST | 0x7fffffffu);
	fuzz_seed(dir, "oversized", buf, 2 + xdr_enc_len(&enc));
}
