/* fuzz_blk_bp.c: libFuzzer target for block pointers and block decompression (blk_bp.c).
 *
 * Input: the first 64 bytes are a block pointer as stored in an indirect block, a B+tree node or
 * an uberblock (blk_ptr_decode); when it decodes to a block, the rest of the input is that
 * block's physical bytes (zero-padded or cut to its psize, as the device would hold them) and is
 * decompressed into lsize bytes (blk_decompress: LZ4, zstd or none), as a read does after the
 * checksum passed. Checks beyond "no crash": a decoded pointer keeps the rules of blk_bp.c's
 * table (sector-aligned offset and asize, 1 <= psize <= asize, lsize <= the block maximum) and
 * encodes back to the same 64 bytes. */
#include "fuzz.h"
#include "blk/blk_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t in[BLK_PTR_DISK_BYTES] = {0}, out[BLK_PTR_DISK_BYTES];
	memcpy(in, data, SH_MIN(size, sizeof(in)));
	struct blk_ptr bp;
	if (blk_ptr_decode(in, &bp) != 0)
		return 0;
	blk_ptr_encode(&bp, out);
	if (memcmp(in, out, sizeof(in)) != 0)
		__builtin_trap();
	if (blk_ptr_is_hole(&bp))
		return 0;
	if (bp.bp_offset % BLK_SECTOR_BYTES || bp.bp_asize % BLK_SECTOR_BYTES || bp.bp_psize == 0 ||
	    bp.bp_psize > bp.bp_asize || bp.bp_lsize == 0 || bp.bp_lsize > BLK_MAX_BLOCK_BYTES)
		__builtin_trap();
	const uint8_t *rest = data + SH_MIN(size, sizeof(in));
	size_t rest_len = size - SH_MIN(size, sizeof(in));
	uint8_t *phys = calloc(1, bp.bp_psize);
	uint8_t *block = malloc(bp.bp_lsize);
	if (!phys || !block)
		abort();
	memcpy(phys, rest, SH_MIN(rest_len, (size_t)bp.bp_psize));
	(void)blk_decompress(bp.bp_compress, phys, bp.bp_psize, block, bp.bp_lsize);
	free(block);
	free(phys);
	return 0;
}

static void fuzz_write_seeds(const char *dir)
{
	static const enum blk_compress kinds[] = {BLK_COMPRESS_OFF, BLK_COMPRESS_LZ4,
	                                          BLK_COMPRESS_ZSTD};
	static const char *const names[] = {"block-off", "block-lz4", "block-zstd"};
	uint8_t data[2048];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)("shale block "[i % 12] + i / 256);
	for (size_t k = 0; k < SH_ARRAY_SIZE(kinds); k++) {
		struct blk_prepared prep;
		struct blk_ptr bp;
		if (blk_prepare(data, sizeof(data), kinds[k], &prep) != 0)
			abort();
		blk_ptr_fill(&bp, &prep, 0, 1u << 20, 3, 0, 12, 1);
		uint8_t *seed = malloc(BLK_PTR_DISK_BYTES + prep.bw_psize);
		if (!seed)
			abort();
		blk_ptr_encode(&bp, seed);
		memcpy(seed + BLK_PTR_DISK_BYTES, prep.bw_buf, prep.bw_psize);
		fuzz_seed(dir, names[k], seed, BLK_PTR_DISK_BYTES + prep.bw_psize);
		free(seed);
		blk_prepared_fini(&prep);
	}
	uint8_t hole[BLK_PTR_DISK_BYTES] = {0};
	fuzz_seed(dir, "hole", hole, sizeof(hole));
}
