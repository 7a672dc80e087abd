/* fuzz_ilog.c: libFuzzer target for what intent-log replay reads from the device (ilog.c,
 * ilog_replay.c): the chain position the pool keeps (ilog_position_decode), a block's header
 * (ilog_replay_header_ok), its checksum, its contents (ilog_replay_check_block), and the walk
 * over its records that hands each to the store, as ilog_replay does.
 *
 * Input: byte 0 flags: bit 0, write a correct checksum into the block first; bit 1, take the
 * chain position from the block's own header rather than from the input, so that the fuzzer
 * reaches the checks behind the chain match and the checksum. Bytes 1-48: an encoded position.
 * The rest: the block as read, zero-padded to the size its header gives. The pool guid is the
 * one the block carries. Checks beyond "no crash": every record replay would visit lies inside
 * the block's used bytes. */
#include "fuzz.h"
#include "ilog/ilog_impl.h"

static uint8_t fuzz_block[ILOG_BLOCK_MAX];

/* The walk ilog_replay makes over a block that passed ilog_replay_check_block. */
static void fuzz_ilog_walk(const uint8_t *buf, int64_t nrecords)
{
	uint32_t used = ilog_get32(buf + ILOG_BH_USED);
	uint64_t off = ILOG_BLOCK_HEADER_BYTES;
	for (int64_t i = 0; i < nrecords; i++) {
		const uint8_t *r = buf + off;
		uint32_t len = ilog_get32(r + ILOG_RH_LEN);
		if (off + ILOG_RECORD_HEADER_BYTES + (uint64_t)len > used)
			__builtin_trap();
		off += ilog_record_bytes(len);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {data, size};
	uint8_t flags = fuzz_u8(&in);
	uint8_t raw[ILOG_POSITION_BYTES] = {0};
	for (unsigned i = 0; i < ILOG_POSITION_BYTES; i++)
		raw[i] = fuzz_u8(&in);
	struct ilog_position pos;
	int prc = ilog_position_decode(raw, &pos);
	size_t n = SH_MIN(in.fi_len, sizeof(fuzz_block));
	memcpy(fuzz_block, in.fi_data, n);
	if (n < ILOG_BLOCK_HEADER_BYTES) {
		memset(fuzz_block + n, 0, ILOG_BLOCK_HEADER_BYTES - n);
		n = ILOG_BLOCK_HEADER_BYTES;
	}
	if (flags & 2) {
		pos.ip_offset = 0;
		pos.ip_seq = ilog_get64(fuzz_block + ILOG_BH_SEQ);
		pos.ip_next_lsn = ilog_get64(fuzz_block + ILOG_BH_FIRST_LSN);
		pos.ip_log_guid = ilog_get64(fuzz_block + ILOG_BH_LOG_GUID);
		memcpy(pos.ip_prev_cksum, fuzz_block + ILOG_BH_PREV_CKSUM, 16);
	} else if (prc != 0) {
		return 0;
	}
	uint64_t pool_guid = ilog_get64(fuzz_block + ILOG_BH_POOL_GUID);
	uint32_t bytes;
	if (!ilog_replay_header_ok(fuzz_block, &pos, pool_guid, &bytes))
		return 0;
	if (bytes < BLK_SECTOR_BYTES || bytes > ILOG_BLOCK_MAX || bytes % BLK_SECTOR_BYTES)
		__builtin_trap();
	if (n < bytes)
		memset(fuzz_block + n, 0, bytes - n);
	uint8_t cksum[16];
	ilog_block_cksum(fuzz_block, bytes, cksum);
	if (flags & 1)
		memcpy(fuzz_block + ILOG_BH_CKSUM, cksum, 16);
	else if (memcmp(cksum, fuzz_block + ILOG_BH_CKSUM, 16) != 0)
		return 0;
	int64_t nrecords = ilog_replay_check_block(fuzz_block, bytes, &pos);
	if (nrecords < 0 && nrecords != -EIO)
		__builtin_trap();
	if (nrecords > 0)
		fuzz_ilog_walk(fuzz_block, nrecords);
	return 0;
}

static void fuzz_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static void fuzz_put32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void fuzz_put64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A block of three records as the log writes it (the tables of ilog.c), after its position. */
static void fuzz_write_seeds(const char *dir)
{
	static uint8_t seed[1 + ILOG_POSITION_BYTES + BLK_SECTOR_BYTES];
	struct ilog_position pos = {.ip_offset = 8u << 20,
	                            .ip_seq = 5,
	                            .ip_next_lsn = 100,
	                            .ip_log_guid = 0xabcdef0123456789ull,
	                            .ip_prev_cksum = "previous-cksum!"};
	ilog_position_encode(&pos, seed + 1);
	uint8_t *b = seed + 1 + ILOG_POSITION_BYTES;
	fuzz_put64(b + ILOG_BH_MAGIC, ILOG_MAGIC);
	fuzz_put32(b + ILOG_BH_VERSION, ILOG_VERSION);
	fuzz_put32(b + ILOG_BH_BYTES, BLK_SECTOR_BYTES);
	fuzz_put64(b + ILOG_BH_POOL_GUID, 0x1122334455667788ull);
	fuzz_put64(b + ILOG_BH_LOG_GUID, pos.ip_log_guid);
	fuzz_put64(b + ILOG_BH_SEQ, pos.ip_seq);
	fuzz_put64(b + ILOG_BH_FIRST_LSN, pos.ip_next_lsn);
	fuzz_put32(b + ILOG_BH_NRECORDS, 3);
	fuzz_put64(b + ILOG_BH_NONCE, 77);
	memcpy(b + ILOG_BH_PREV_CKSUM, pos.ip_prev_cksum, 16);
	uint32_t off = ILOG_BLOCK_HEADER_BYTES;
	static const uint32_t lens[3] = {0, 13, 200};
	for (unsigned i = 0; i < 3; i++) {
		uint8_t *r = b + off;
		fuzz_put16(r + ILOG_RH_TYPE, (uint16_t)(1 + i));
		fuzz_put32(r + ILOG_RH_LEN, lens[i]);
		fuzz_put64(r + ILOG_RH_TXG, 40);
		fuzz_put64(r + ILOG_RH_LSN, pos.ip_next_lsn + i);
		memset(r + ILOG_RECORD_HEADER_BYTES, 'a' + (int)i, lens[i]);
		off += ilog_record_bytes(lens[i]);
	}
	fuzz_put32(b + ILOG_BH_USED, off);
	uint8_t cksum[16];
	ilog_block_cksum(b, BLK_SECTOR_BYTES, cksum);
	memcpy(b + ILOG_BH_CKSUM, cksum, 16);
	/* the zeros after the used bytes are left out: the target pads the block */
	seed[0] = 0;
	fuzz_seed(dir, "block-3-records", seed, 1 + ILOG_POSITION_BYTES + off);
	seed[0] = 3;
	fuzz_seed(dir, "block-3-records-own-position", seed, 1 + ILOG_POSITION_BYTES + off);
}
