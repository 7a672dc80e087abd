/* fuzz_blk_label.c: libFuzzer target for the decoders of vdev labels and uberblock slots
 * (blk_label.c: blk_label_decode, blk_ub_decode, and through it blk_ptr_decode of each root).
 *
 * Input: byte 0 bit 0 picks an uberblock slot (else a label's 16 KiB header area); bit 1 asks
 * the target to write a correct checksum into the bytes first, so that the fuzzer reaches the
 * checks behind the checksum (a bad one is the common case and is refused first). The rest is
 * the bytes read from the device, zero-padded or cut to the structure's size; an uberblock is
 * looked for under the pool guid its own bytes carry. Checks beyond "no crash": a decoded label
 * has a NUL-terminated pool name and a bounded configuration, and encoding what was decoded and
 * decoding it again gives the same fields. */
#include "fuzz.h"
#include "blk/blk_impl.h"

/* Where the checksums sit (the tables at the top of blk_label.c). */
#define FUZZ_LABEL_CKSUM_OFF 16u
#define FUZZ_UB_GUID_OFF 24u
#define FUZZ_UB_CKSUM_OFF 1600u

static void fuzz_label(uint8_t *buf, bool fix)
{
	if (fix) {
		memset(buf + FUZZ_LABEL_CKSUM_OFF, 0, 16);
		blk_checksum(buf, BLK_LABEL_HEADER_BYTES, buf + FUZZ_LABEL_CKSUM_OFF);
	}
	static struct blk_label label, again;
	if (blk_label_decode(buf, &label) != 0)
		return;
	if (label.lb_config_len > BLK_CONFIG_MAX_BYTES ||
	    !memchr(label.lb_pool_name, 0, sizeof(label.lb_pool_name)))
		__builtin_trap();
	blk_label_encode(&label, buf);
	if (blk_label_decode(buf, &again) != 0 || again.lb_pool_guid != label.lb_pool_guid ||
	    again.lb_config_txg != label.lb_config_txg ||
	    again.lb_config_len != label.lb_config_len ||
	    memcmp(again.lb_config, label.lb_config, label.lb_config_len) != 0 ||
	    strcmp(again.lb_pool_name, label.lb_pool_name) != 0)
		__builtin_trap();
}

static void fuzz_ub(uint8_t *buf, bool fix)
{
	if (fix)
		blk_checksum(buf, FUZZ_UB_CKSUM_OFF, buf + FUZZ_UB_CKSUM_OFF);
	uint64_t guid = 0;
	for (int i = 7; i >= 0; i--)
		guid = (guid << 8) | buf[FUZZ_UB_GUID_OFF + (unsigned)i];
	static struct blk_uberblock ub, again;
	if (!blk_ub_decode(buf, guid, &ub))
		return;
	if (ub.ub_nroots > BLK_UB_ROOTS)
		__builtin_trap();
	blk_ub_encode(&ub, buf);
	if (!blk_ub_decode(buf, guid, &again) || again.ub_txg != ub.ub_txg ||
	    again.ub_nroots != ub.ub_nroots)
		__builtin_trap();
	for (unsigned i = 0; i < ub.ub_nroots; i++)
		if (!blk_ptr_same_block(&again.ub_roots[i], &ub.ub_roots[i]))
			__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static uint8_t buf[BLK_LABEL_HEADER_BYTES];
	bool ub = data[0] & 1, fix = data[0] & 2;
	size_t want = ub ? BLK_UB_SLOT_BYTES : BLK_LABEL_HEADER_BYTES;
	size_t n = SH_MIN(size - 1, want);
	memcpy(buf, data + 1, n);
	memset(buf + n, 0, want - n);
	if (ub)
		fuzz_ub(buf, fix);
	else
		fuzz_label(buf, fix);
	return 0;
}

static void fuzz_write_seeds(const char *dir)
{
	static uint8_t buf[1 + BLK_LABEL_HEADER_BYTES];
	static struct blk_label label = {.lb_pool_guid = 0x1122334455667788ull,
	                                 .lb_leaf_guid = 0x99,
	                                 .lb_top_guid = 0x42,
	                                 .lb_top_index = 0,
	                                 .lb_config_txg = 17,
	                                 .lb_leaf_bytes = 1ull << 30,
	                                 .lb_pool_name = "tank"};
	static const char config[] = "version=1\nname=tank\nguid=1234605616436508552\n"
	                             "top0=mirror\ntop0.child0=leaf\n";
	memcpy(label.lb_config, config, sizeof(config) - 1);
	label.lb_config_len = sizeof(config) - 1;
	buf[0] = 0;
	blk_label_encode(&label, buf + 1);
	/* the header area ends in zeros: the seed stops after the configuration text */
	fuzz_seed(dir, "label", buf, 1 + 1024 + label.lb_config_len);
	buf[0] = 2;
	fuzz_seed(dir, "label-fix-cksum", buf, 1 + 1024 + label.lb_config_len);

	struct blk_uberblock ub = {.ub_txg = 33,
	                           .ub_pool_guid = label.lb_pool_guid,
	                           .ub_timestamp_ns = 1700000000000000000ull,
	                           .ub_nroots = 2};
	for (unsigned i = 0; i < 2; i++)
		ub.ub_roots[i] = (struct blk_ptr){.bp_vdev = i,
		                                  .bp_offset = 4096u * (10 + i),
		                                  .bp_asize = 16384,
		                                  .bp_psize = 9000,
		                                  .bp_lsize = 16384,
		                                  .bp_compress = BLK_COMPRESS_LZ4,
		                                  .bp_checksum = BLK_CHECKSUM_XXH3_128,
		                                  .bp_level = 1,
		                                  .bp_birth_txg = 33,
		                                  .bp_fill = 7};
	memcpy(ub.ub_payload, "SHLPOOL!", 8);
	buf[0] = 1;
	blk_ub_encode(&ub, buf + 1);
	fuzz_seed(dir, "uberblock", buf, 1 + FUZZ_UB_CKSUM_OFF + 16);
	buf[0] = 3;
	fuzz_seed(dir, "uberblock-fix-cksum", buf, 1 + FUZZ_UB_CKSUM_OFF + 16);
}
