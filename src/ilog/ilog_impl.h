/* ilog_impl.h: what the intent log's own files (and its white-box tests) share: the on-disk
 * layout of log blocks and records (the tables and their meaning are in the theory comment at the
 * top of ilog.c) and little-endian field access. */
#ifndef SHALE_ILOG_IMPL_H
#define SHALE_ILOG_IMPL_H

#include <stdint.h>
#include <string.h>

#include "ilog/ilog.h"

#define ILOG_MAGIC 0x474f4c4948534c53ull /* "SLSHILOG" read as a little-endian u64 */
#define ILOG_VERSION 1u

/* Block header field offsets (bytes from the block's start). */
#define ILOG_BH_MAGIC 0       /* u64 */
#define ILOG_BH_VERSION 8     /* u32 */
#define ILOG_BH_BYTES 12      /* u32: the block's size, a multiple of 4 KiB */
#define ILOG_BH_POOL_GUID 16  /* u64 */
#define ILOG_BH_LOG_GUID 24   /* u64 */
#define ILOG_BH_SEQ 32        /* u64 */
#define ILOG_BH_FIRST_LSN 40  /* u64 */
#define ILOG_BH_NRECORDS 48   /* u32 */
#define ILOG_BH_USED 52       /* u32: header + records, the rest is zero */
#define ILOG_BH_NONCE 56      /* u64 */
#define ILOG_BH_PREV_CKSUM 64 /* u8[16] */
#define ILOG_BH_CKSUM 80      /* u8[16] */

/* Record header field offsets (bytes from the record's start). */
#define ILOG_RH_TYPE 0  /* u16 */
#define ILOG_RH_FLAGS 2 /* u16: 0 in version 1 */
#define ILOG_RH_LEN 4   /* u32: payload bytes */
#define ILOG_RH_TXG 8   /* u64 */
#define ILOG_RH_LSN 16  /* u64 */

/* Position encoding offsets. */
#define ILOG_POS_OFFSET 0      /* u64 */
#define ILOG_POS_SEQ 8         /* u64 */
#define ILOG_POS_NEXT_LSN 16   /* u64 */
#define ILOG_POS_LOG_GUID 24   /* u64 */
#define ILOG_POS_PREV_CKSUM 32 /* u8[16] */

/* A record's size in a block: header plus payload padded to 8 bytes. */
static inline uint32_t ilog_record_bytes(uint32_t len)
{
	return ILOG_RECORD_HEADER_BYTES + ((len + 7u) & ~7u);
}

static inline void ilog_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void ilog_put32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void ilog_put64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t ilog_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t ilog_get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t ilog_get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The checksum of a block of `bytes` bytes as the header stores it: XXH3-128 (blk_checksum) over
 * the whole block with the checksum field zeroed. The field is zeroed only for the computation and
 * then restored, so the block is unchanged on return. */
void ilog_block_cksum(uint8_t *block, uint32_t bytes, uint8_t out[16]);

/* The placement rule: where the block after one that ends at `end_off` starts, in the region
 * [start, region_end). Writer and reader both use it. */
static inline uint64_t ilog_next_offset(uint64_t start, uint64_t region_end, uint64_t end_off)
{
	return region_end - end_off < ILOG_BLOCK_MAX ? start : end_off;
}

/* Checks a region: sector-aligned, at least ILOG_REGION_MIN, inside the vdev's data area. */
SH_MUST_CHECK int ilog_region_check(struct blk_vdev *vdev, uint64_t start, uint64_t bytes);
/* Checks that a position can name a block of the region: a non-zero guid, seq and LSN, and a
 * sector-aligned offset where a block of ILOG_BLOCK_MAX bytes fits before the region's end. */
SH_MUST_CHECK int ilog_position_check(const struct ilog_position *pos, uint64_t start,
                                      uint64_t bytes);

/* ilog_replay.c: the two checks replay makes of a block read from the device (hostile bytes).
 * ilog_replay_header_ok: does the header at buf (at least ILOG_BLOCK_HEADER_BYTES) continue the
 * chain at pos? Sets *bytes_out to the block's size (sector multiple, <= ILOG_BLOCK_MAX).
 * ilog_replay_check_block: checks the contents of a block of `bytes` bytes whose header passed
 * and whose checksum matched; returns its record count or -EIO. */
bool ilog_replay_header_ok(const uint8_t *buf, const struct ilog_position *pos,
                           uint64_t pool_guid, uint32_t *bytes_out);
int64_t ilog_replay_check_block(const uint8_t *buf, uint32_t bytes,
                                const struct ilog_position *pos);

#endif
