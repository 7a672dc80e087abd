/* fuzz_pool_snap.c: libFuzzer target for the decoders of what snapshots keep in the metadata
 * tree and on disk (pool_snap.c: snapshot records, dead-list chain headers under their dl/ and
 * fq/ keys, chunk blocks) and of dataset records (pool_ds.c), all hostile bytes to a reader of
 * the pool.
 *
 * Input: byte 0 picks the decoder (mod 4: snapshot record, chain header, chunk, dataset record);
 * byte 1 the length of the key that follows (record kinds only; mod 64); then the key, then the
 * value or image. The block pointers inside are judged against a small pool made on a memory
 * leaf at the first input. Checks beyond "no crash": whatever decodes re-encodes and decodes to
 * the same fields; a decoded snapshot's name is valid, a decoded chunk's count within bounds. */
#include "fuzz.h"
#include "pool/pool_impl.h"

static struct pool *fuzz_pool(void)
{
	static struct pool *p;
	if (p)
		return p;
	struct blk_dev *d = NULL;
	struct pool_create_args a = {.pc_name = "fuzz"};
	if (blk_dev_create_mem(64u << 20, &d) != 0 || pool_create_on_devs(&a, &d, 1, NULL, 0, &p) != 0)
		__builtin_trap();
	return p;
}

static void fuzz_sn(struct pool *p, const uint8_t *key, uint32_t klen, const uint8_t *val,
                    uint32_t vlen)
{
	struct pool_snap_rec sr, again;
	if (pool_sn_decode(p, key, klen, val, vlen, &sr) != 0)
		return;
	if (!pool_snap_name_valid(sr.sr_name))
		__builtin_trap();
	uint8_t out[POOL_SN_RECORD_BYTES];
	pool_sn_encode(&sr, out);
	if (pool_sn_decode(p, key, klen, out, sizeof(out), &again) != 0 || again.sr_id != sr.sr_id ||
	    again.sr_txg != sr.sr_txg || again.sr_refer != sr.sr_refer ||
	    strcmp(again.sr_name, sr.sr_name) != 0)
		__builtin_trap();
}

static void fuzz_chain(struct pool *p, const uint8_t *key, uint32_t klen, const uint8_t *val,
                       uint32_t vlen)
{
	struct pool_dl_chain dc, again;
	if (pool_dl_chain_decode(p, key, klen, val, vlen, &dc) != 0)
		return;
	uint8_t out[POOL_DL_CHAIN_BYTES];
	pool_dl_chain_encode(&dc, out);
	if (pool_dl_chain_decode(p, key, klen, out, sizeof(out), &again) != 0 ||
	    again.dc_entries != dc.dc_entries || again.dc_bytes != dc.dc_bytes ||
	    again.dc_seq != dc.dc_seq || again.dc_flags != dc.dc_flags)
		__builtin_trap();
}

static void fuzz_chunk(struct pool *p, const uint8_t *img, uint32_t len)
{
	struct pool_dl_chunk ck;
	if (pool_dl_chunk_decode(p, img, len, &ck) != 0)
		return;
	if (ck.ck_n == 0 || ck.ck_n > POOL_DL_CHUNK_MAX)
		__builtin_trap();
	for (uint32_t i = 0; i < ck.ck_n; i++) {
		struct blk_ptr bp;
		(void)pool_dl_chunk_entry(p, &ck, i, &bp); /* each entry: a pointer or -EIO */
	}
}

static void fuzz_ds(struct pool *p, const uint8_t *val, uint32_t vlen)
{
	struct pool_ds ds = {.ds_pool = p}, again = {.ds_pool = p};
	if (pool_ds_record_decode(&ds, val, vlen) != 0)
		return;
	uint8_t out[POOL_MOS_VAL_MAX];
	int n = pool_ds_record_encode(&ds, out, sizeof(out));
	if (n < 0 || pool_ds_record_decode(&again, out, (uint32_t)n) != 0 ||
	    again.ds_id != ds.ds_id || again.ds_prev_snap_txg != ds.ds_prev_snap_txg ||
	    again.ds_origin_txg != ds.ds_origin_txg || again.ds_dl_id != ds.ds_dl_id)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {data, size};
	uint8_t kind = fuzz_u8(&in) % 4;
	uint32_t klen = kind == 2 ? 0 : fuzz_u8(&in) % 64;
	uint8_t key[64] = {0};
	for (uint32_t i = 0; i < klen; i++)
		key[i] = fuzz_u8(&in);
	uint32_t len = (uint32_t)SH_MIN(in.fi_len, 70000u);
	uint8_t *val = malloc(len ? len : 1);
	if (!val)
		return 0;
	memcpy(val, in.fi_data, len);
	struct pool *p = fuzz_pool();
	switch (kind) {
	case 0: fuzz_sn(p, key, klen, val, len); break;
	case 1: fuzz_chain(p, key, klen, val, len); break;
	case 2: fuzz_chunk(p, val, len); break;
	default: fuzz_ds(p, val, len); break;
	}
	free(val);
	return 0;
}

/* Seeds: a snapshot record, a dl/ and an fq/ chain header, a chunk of two entries and a dataset
 * record, as the pool writes them. */
static void fuzz_write_seeds(const char *dir)
{
	struct pool *p = fuzz_pool();
	uint8_t buf[512];
	struct blk_ptr bp = {.bp_vdev = 0, .bp_offset = 8u << 20, .bp_asize = 4096,
	                     .bp_psize = 4096, .bp_lsize = 4096, .bp_birth_txg = 3, .bp_type = 4};
	/* snapshot record */
	const char sn_key[] = "sn/0000000000000002/0000000000000005";
	struct pool_snap_rec sr = {.sr_id = 9, .sr_txg = 5, .sr_refer = 8192, .sr_root = bp};
	snprintf(sr.sr_name, sizeof(sr.sr_name), "monday");
	buf[0] = 0;
	buf[1] = (uint8_t)strlen(sn_key);
	memcpy(buf + 2, sn_key, strlen(sn_key));
	pool_sn_encode(&sr, buf + 2 + strlen(sn_key));
	fuzz_seed(dir, "snapshot", buf, 2 + strlen(sn_key) + POOL_SN_RECORD_BYTES);
	/* chain headers */
	const char dl_key[] = "dl/0000000000000007/0000000000000000/0000000000000008";
	struct pool_dl_chain dc = {.dc_entries = 2, .dc_bytes = 8192, .dc_chunks = 1,
	                           .dc_head = bp};
	dc.dc_head.bp_type = POOL_BT_DEADLIST;
	buf[0] = 1;
	buf[1] = (uint8_t)strlen(dl_key);
	memcpy(buf + 2, dl_key, strlen(dl_key));
	pool_dl_chain_encode(&dc, buf + 2 + strlen(dl_key));
	fuzz_seed(dir, "chain-dl", buf, 2 + strlen(dl_key) + POOL_DL_CHAIN_BYTES);
	const char fq_key[] = "fq/0000000000000008";
	dc.dc_flags = POOL_DL_F_FREE_ENTRIES;
	buf[1] = (uint8_t)strlen(fq_key);
	memcpy(buf + 2, fq_key, strlen(fq_key));
	pool_dl_chain_encode(&dc, buf + 2 + strlen(fq_key));
	fuzz_seed(dir, "chain-fq", buf, 2 + strlen(fq_key) + POOL_DL_CHAIN_BYTES);
	/* a chunk of two entries */
	uint8_t chunk[1 + POOL_DL_CHUNK_HDR + 128] = {2};
	uint8_t *img = chunk + 1;
	memcpy(img, "SHDLCHNK", 8);
	pool_put_le32(img + 8, 1);
	pool_put_le32(img + 12, 2);
	pool_put_le64(img + 16, 8192);
	blk_ptr_encode(&bp, img + POOL_DL_CHUNK_HDR);
	bp.bp_offset += 4096;
	blk_ptr_encode(&bp, img + POOL_DL_CHUNK_HDR + 64);
	fuzz_seed(dir, "chunk", chunk, sizeof(chunk));
	/* a dataset record of a clone */
	struct pool_ds ds = {.ds_pool = p, .ds_id = 4, .ds_record_bytes = 131072, .ds_root = bp,
	                     .ds_prev_snap_txg = 5, .ds_origin_head_id = 2, .ds_origin_txg = 5};
	buf[0] = 3;
	buf[1] = 0;
	int n = pool_ds_record_encode(&ds, buf + 2, sizeof(buf) - 2);
	fuzz_seed(dir, "dataset", buf, 2 + (size_t)n);
}
