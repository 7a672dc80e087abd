/* blk_bp.c: block pointers (their 64-byte on-disk form), checksums, and preparing a block for
 * writing (compression, padding, checksum).
 *
 * Block pointer on disk, 64 bytes, little-endian:
 *
 *   offset  size  field
 *        0     8  bp_offset      absolute byte offset on each child of the vdev, sector-aligned
 *        8     4  bp_vdev        top-level vdev index
 *       12     4  bp_asize       allocated bytes: a non-zero multiple of BLK_SECTOR_BYTES
 *       16     4  bp_psize       physical bytes, 1 <= psize <= asize
 *       20     4  bp_lsize       logical bytes, 1 <= lsize <= BLK_MAX_BLOCK_BYTES
 *       24     1  bp_compress    enum blk_compress (OFF: psize == lsize; else psize <= lsize)
 *       25     1  bp_checksum    enum blk_checksum (only XXH3_128)
 *       26     1  bp_type        the store's block type, not interpreted here
 *       27     1  bp_level       the store's level, not interpreted here
 *       28     4  reserved       zero
 *       32     8  bp_birth_txg   non-zero for every block
 *       40    16  bp_cksum       XXH3-128 of the psize physical bytes (see below)
 *       56     8  bp_fill        the store's count, not interpreted here
 *
 * A hole is 64 zero bytes; a pointer whose birth txg is 0 is a hole and encodes as zeros.
 *
 * The checksum is XXH3_128bits over the physical bytes, stored as the low 64 bits then the high
 * 64 bits, each little-endian. The same 16-byte form is used by labels, uberblocks and the intent
 * log's records (blk_checksum).
 *
 * Compression: LZ4 block format (LZ4_compress_default, LZ4_decompress_safe) or a zstd frame
 * (ZSTD_compress at level 3, ZSTD_decompress); psize is the exact compressed byte count. A
 * compressed form is kept only when it saves at least 1/8 of lsize, else the block is stored as is
 * with compress OFF. The physical bytes are zero padded to asize = psize rounded up to the
 * sector. */
#include <errno.h>
#include <lz4.h>
#include <zstd.h>

#include "base/xxh.h"
#include "blk/blk_impl.h"

#define BLK_ZSTD_LEVEL 3 /* zstd's own default: a good ratio at a few hundred MB/s */

void blk_checksum(const void *data, size_t len, uint8_t out[16])
{
	XXH128_hash_t h = XXH3_128bits(data, len);
	blk_put_le64(out, h.low64);
	blk_put_le64(out + 8, h.high64);
}

bool blk_ptr_is_hole(const struct blk_ptr *bp)
{
	return bp->bp_birth_txg == 0;
}

bool blk_ptr_same_block(const struct blk_ptr *a, const struct blk_ptr *b)
{
	return a->bp_vdev == b->bp_vdev && a->bp_offset == b->bp_offset &&
	       a->bp_birth_txg == b->bp_birth_txg;
}

void blk_ptr_encode(const struct blk_ptr *bp, uint8_t out[BLK_PTR_DISK_BYTES])
{
	memset(out, 0, BLK_PTR_DISK_BYTES);
	if (blk_ptr_is_hole(bp))
		return;
	blk_put_le64(out + 0, bp->bp_offset);
	blk_put_le32(out + 8, bp->bp_vdev);
	blk_put_le32(out + 12, bp->bp_asize);
	blk_put_le32(out + 16, bp->bp_psize);
	blk_put_le32(out + 20, bp->bp_lsize);
	out[24] = bp->bp_compress;
	out[25] = bp->bp_checksum;
	out[26] = bp->bp_type;
	out[27] = bp->bp_level;
	blk_put_le64(out + 32, bp->bp_birth_txg);
	memcpy(out + 40, bp->bp_cksum, 16);
	blk_put_le64(out + 56, bp->bp_fill);
}

int blk_ptr_decode(const uint8_t in[BLK_PTR_DISK_BYTES], struct blk_ptr *bp_out)
{
	struct blk_ptr bp = {0};
	bool zero = true;
	for (unsigned i = 0; i < BLK_PTR_DISK_BYTES; i++)
		zero = zero && in[i] == 0;
	if (zero) {
		*bp_out = bp;
		return 0;
	}
	bp.bp_offset = blk_get_le64(in + 0);
	bp.bp_vdev = blk_get_le32(in + 8);
	bp.bp_asize = blk_get_le32(in + 12);
	bp.bp_psize = blk_get_le32(in + 16);
	bp.bp_lsize = blk_get_le32(in + 20);
	bp.bp_compress = in[24];
	bp.bp_checksum = in[25];
	bp.bp_type = in[26];
	bp.bp_level = in[27];
	uint32_t reserved = blk_get_le32(in + 28);
	bp.bp_birth_txg = blk_get_le64(in + 32);
	memcpy(bp.bp_cksum, in + 40, 16);
	bp.bp_fill = blk_get_le64(in + 56);

	if (reserved != 0 || bp.bp_birth_txg == 0)
		return -EINVAL;
	if (bp.bp_compress > BLK_COMPRESS_ZSTD || bp.bp_checksum != BLK_CHECKSUM_XXH3_128)
		return -EINVAL;
	if (bp.bp_offset % BLK_SECTOR_BYTES != 0 || bp.bp_offset > UINT64_MAX - bp.bp_asize)
		return -EINVAL;
	if (bp.bp_asize == 0 || bp.bp_asize % BLK_SECTOR_BYTES != 0 ||
	    bp.bp_asize > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	if (bp.bp_psize == 0 || bp.bp_psize > bp.bp_asize)
		return -EINVAL;
	if (bp.bp_lsize == 0 || bp.bp_lsize > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	if (bp.bp_compress == BLK_COMPRESS_OFF ? bp.bp_psize != bp.bp_lsize
	                                       : bp.bp_psize > bp.bp_lsize)
		return -EINVAL;
	*bp_out = bp;
	return 0;
}

/* Compresses into dst (capacity cap); returns the compressed size, or 0 when it does not fit. */
static size_t blk_compress_into(enum blk_compress compress, const void *src, uint32_t lsize,
                                void *dst, size_t cap)
{
	if (cap == 0)
		return 0;
	if (compress == BLK_COMPRESS_LZ4) {
		int n = LZ4_compress_default(src, dst, (int)lsize, (int)cap);
		return n > 0 ? (size_t)n : 0;
	}
	size_t n = ZSTD_compress(dst, cap, src, lsize, BLK_ZSTD_LEVEL);
	return ZSTD_isError(n) ? 0 : n;
}

/* blk_prepare_lend's block: data itself, stored uncompressed (lsize a multiple of the sector,
 * data sector-aligned). */
static int blk_prepare_lent(const void *data, uint32_t lsize, struct blk_prepared *out)
{
	out->bw_buf = (void *)data;
	out->bw_lent = true;
	out->bw_lsize = out->bw_psize = out->bw_asize = lsize;
	out->bw_compress = (uint8_t)BLK_COMPRESS_OFF;
	blk_checksum(data, lsize, out->bw_cksum);
	return 0;
}

static int blk_prepare_as(const void *data, uint32_t lsize, enum blk_compress compress,
                          bool may_lend, struct blk_prepared *out)
{
	memset(out, 0, sizeof(*out));
	if (lsize == 0 || lsize > BLK_MAX_BLOCK_BYTES || compress > BLK_COMPRESS_ZSTD)
		return -EINVAL;
	may_lend = may_lend && lsize % BLK_SECTOR_BYTES == 0 &&
	           (uintptr_t)data % BLK_SECTOR_BYTES == 0;
	if (may_lend && compress == BLK_COMPRESS_OFF)
		return blk_prepare_lent(data, lsize, out);
	/* Big enough for the uncompressed form, hence for any compressed form worth keeping. Not
	 * zeroed: every byte up to asize is written below. */
	uint32_t cap_bytes = (uint32_t)blk_round_up(lsize, BLK_SECTOR_BYTES);
	uint8_t *buf = mem_aligned_alloc(BLK_SECTOR_BYTES, cap_bytes);
	if (!buf)
		return -ENOMEM;
	size_t psize = 0;
	if (compress != BLK_COMPRESS_OFF)
		psize = blk_compress_into(compress, data, lsize, buf, lsize - lsize / 8);
	if (psize == 0 && may_lend) {
		mem_free(buf);
		return blk_prepare_lent(data, lsize, out);
	}
	if (psize == 0) {
		compress = BLK_COMPRESS_OFF;
		memcpy(buf, data, lsize);
		psize = lsize;
	}
	out->bw_buf = buf;
	out->bw_lsize = lsize;
	out->bw_psize = (uint32_t)psize;
	out->bw_asize = (uint32_t)blk_round_up(psize, BLK_SECTOR_BYTES);
	out->bw_compress = (uint8_t)compress;
	/* The compressor may have scribbled past psize before giving up or finishing: re-zero. */
	memset(buf + psize, 0, out->bw_asize - psize);
	/* A block that compressed to half its size or less moves to a buffer of its own size: the
	 * prepared image lives until its write is done (a whole txg's worth of them at once), and
	 * should take the memory it writes, not the block's logical size. */
	if (out->bw_asize <= cap_bytes / 2) {
		uint8_t *small = mem_aligned_alloc(BLK_SECTOR_BYTES, out->bw_asize);
		if (small) {
			memcpy(small, buf, out->bw_asize);
			mem_free(buf);
			out->bw_buf = buf = small;
		}
	}
	blk_checksum(buf, psize, out->bw_cksum);
	return 0;
}

int blk_prepare(const void *data, uint32_t lsize, enum blk_compress compress,
                struct blk_prepared *out)
{
	return blk_prepare_as(data, lsize, compress, false, out);
}

int blk_prepare_lend(const void *data, uint32_t lsize, enum blk_compress compress,
                     struct blk_prepared *out)
{
	return blk_prepare_as(data, lsize, compress, true, out);
}

int blk_prepared_own(struct blk_prepared *prepared)
{
	if (!prepared->bw_lent)
		return 0;
	uint8_t *buf = mem_aligned_alloc(BLK_SECTOR_BYTES, prepared->bw_asize);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, prepared->bw_buf, prepared->bw_asize);
	prepared->bw_buf = buf;
	prepared->bw_lent = false;
	return 0;
}

int blk_prepare_stored(const void *phys, uint32_t psize, uint32_t lsize, enum blk_compress compress,
                       void *logical_out, struct blk_prepared *out)
{
	memset(out, 0, sizeof(*out));
	if (lsize == 0 || lsize > BLK_MAX_BLOCK_BYTES || compress > BLK_COMPRESS_ZSTD ||
	    psize == 0 || psize > lsize || (compress == BLK_COMPRESS_OFF && psize != lsize))
		return -EINVAL;
	/* the bytes must be what they claim: they decompress to exactly lsize bytes */
	if (blk_decompress(compress, phys, psize, logical_out, lsize) != 0)
		return -EINVAL;
	uint32_t asize = (uint32_t)blk_round_up(psize, BLK_SECTOR_BYTES);
	uint8_t *buf = mem_aligned_alloc(BLK_SECTOR_BYTES, asize);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, phys, psize);
	memset(buf + psize, 0, asize - psize);
	out->bw_buf = buf;
	out->bw_lsize = lsize;
	out->bw_psize = psize;
	out->bw_asize = asize;
	out->bw_compress = (uint8_t)compress;
	blk_checksum(buf, psize, out->bw_cksum);
	return 0;
}

void blk_prepared_fini(struct blk_prepared *prepared)
{
	if (!prepared->bw_lent)
		mem_free(prepared->bw_buf);
	memset(prepared, 0, sizeof(*prepared));
}

void blk_ptr_fill(struct blk_ptr *bp, const struct blk_prepared *prepared, uint32_t vdev_index,
                  uint64_t offset, uint8_t type, uint8_t level, uint64_t birth_txg, uint64_t fill)
{
	memset(bp, 0, sizeof(*bp));
	bp->bp_vdev = vdev_index;
	bp->bp_offset = offset;
	bp->bp_asize = prepared->bw_asize;
	bp->bp_psize = prepared->bw_psize;
	bp->bp_lsize = prepared->bw_lsize;
	bp->bp_compress = prepared->bw_compress;
	bp->bp_checksum = BLK_CHECKSUM_XXH3_128;
	bp->bp_type = type;
	bp->bp_level = level;
	bp->bp_birth_txg = birth_txg;
	memcpy(bp->bp_cksum, prepared->bw_cksum, 16);
	bp->bp_fill = fill;
}

int blk_decompress(uint8_t compress, const void *phys, uint32_t psize, void *out, uint32_t lsize)
{
	switch (compress) {
	case BLK_COMPRESS_OFF:
		if (psize != lsize)
			return -EIO;
		memcpy(out, phys, lsize);
		return 0;
	case BLK_COMPRESS_LZ4: {
		if (psize > (uint32_t)INT32_MAX || lsize > (uint32_t)INT32_MAX)
			return -EIO;
		int n = LZ4_decompress_safe(phys, out, (int)psize, (int)lsize);
		return n == (int)lsize ? 0 : -EIO;
	}
	case BLK_COMPRESS_ZSTD: {
		size_t n = ZSTD_decompress(out, lsize, phys, psize);
		return !ZSTD_isError(n) && n == lsize ? 0 : -EIO;
	}
	default: return -EIO;
	}
}
