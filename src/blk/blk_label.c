/* blk_label.c: vdev labels (who a leaf belongs to) and the uberblock ring (the commit point of
 * each txg).
 *
 * Each leaf carries four labels, two at each end (L0 at 0, L1 at 256 KiB, L2 at size - 512 KiB, L3
 * at size - 256 KiB; see blk_vdev.c), so that overwriting either end of a device leaves two. One
 * label, 256 KiB:
 *
 *   offset     size     what
 *   0          16 KiB   label header and configuration (table below); written by blk_label_write
 *   16 KiB     112 KiB  reserved, zero
 *   128 KiB    128 KiB  uberblock ring: 32 slots of 4 KiB; txg T lives in slot T % 32
 *
 * Label header and configuration (the first 16 KiB), little-endian:
 *
 *   offset  size    field
 *        0     8    magic BLK_LABEL_MAGIC
 *        8     4    format version, BLK_LABEL_VERSION
 *       12     4    lb_config_len (<= BLK_CONFIG_MAX_BYTES)
 *       16    16    XXH3-128 (as blk_checksum) of the whole 16 KiB with these 16 bytes zero
 *       32     8    lb_pool_guid
 *       40     8    lb_leaf_guid
 *       48     8    lb_top_guid
 *       56     4    lb_top_index
 *       60     4    reserved, zero
 *       64     8    lb_config_txg
 *       72     8    lb_leaf_bytes
 *       80    64    lb_pool_name, NUL-terminated, zero padded
 *      144   880    reserved, zero
 *     1024 12288    configuration text: lb_config_len bytes, then zeros
 *    13312  3072    reserved, zero
 *
 * A label is valid when magic, version and checksum match; one that passes the checksum but says
 * nonsense (config length too big, pool name without its NUL) is reported as -EINVAL if no valid
 * label exists. blk_label_write writes the header area of L0 and L2 and flushes, then L1 and L3
 * and flushes, so a crash in the middle leaves one complete pair, old or new; the uberblock rings
 * are never touched by it.
 *
 * Uberblock slot (one 4 KiB sector, written in one I/O: sectors are atomic), little-endian:
 *
 *   offset  size    field
 *        0     8    magic BLK_UB_MAGIC
 *        8     4    format version, BLK_UB_VERSION
 *       12     4    ub_nroots (<= BLK_UB_ROOTS)
 *       16     8    ub_txg
 *       24     8    ub_pool_guid
 *       32     8    ub_timestamp_ns
 *       40    24    reserved, zero
 *       64   512    ub_roots: 8 block pointers of 64 bytes (blk_bp.c); those past nroots are holes
 *      576  1024    ub_payload
 *     1600    16    XXH3-128 (as blk_checksum) of bytes [0, 1600)
 *     1616  2480    zero
 *
 * A slot is valid when magic, version and checksum match, the pool guid is the one asked for, and
 * its roots decode. blk_uberblock_write writes slot txg % 32 of all four labels of every leaf,
 * then flushes every leaf; blk_uberblock_find_best reads the four rings of a leaf and picks the
 * valid slot with the highest txg. A torn or lost write of the newest slot only costs that txg:
 * the slots of the 31 txgs before it are untouched. */
#include <errno.h>

#include "blk/blk_impl.h"

#define BLK_LABEL_MAGIC 0x4c42414c454c4853ull /* "SHLELABL" read as little-endian bytes */
#define BLK_LABEL_VERSION 1u
#define BLK_LABEL_CONFIG_OFF 1024u
#define BLK_LABEL_RING_OFF (128u * 1024u)
#define BLK_LABEL_RING_BYTES (BLK_UB_RING_SLOTS * BLK_UB_SLOT_BYTES)
#define BLK_LABELS 4u

#define BLK_UB_MAGIC 0x4b4c4242554c4853ull /* "SHLUBBLK" read as little-endian bytes */
#define BLK_UB_VERSION 1u
#define BLK_UB_ROOTS_OFF 64u
#define BLK_UB_PAYLOAD_OFF (BLK_UB_ROOTS_OFF + BLK_UB_ROOTS * BLK_PTR_DISK_BYTES)
#define BLK_UB_CKSUM_OFF (BLK_UB_PAYLOAD_OFF + BLK_UB_PAYLOAD_BYTES)

_Static_assert(BLK_LABEL_CONFIG_OFF + BLK_CONFIG_MAX_BYTES <= BLK_LABEL_HEADER_BYTES,
               "config fits the header");
_Static_assert(BLK_LABEL_RING_OFF + BLK_LABEL_RING_BYTES == BLK_LABEL_BYTES, "ring ends the label");
_Static_assert(BLK_UB_CKSUM_OFF + 16 <= BLK_UB_SLOT_BYTES, "uberblock fits its slot");
_Static_assert(BLK_UB_SLOT_BYTES == BLK_SECTOR_BYTES, "an uberblock is one atomic sector");

/* Byte offset of label i (0..3) on a leaf of size_bytes. */
static uint64_t blk_label_offset(uint64_t size_bytes, unsigned i)
{
	return i < 2 ? (uint64_t)i * BLK_LABEL_BYTES
	             : size_bytes - (uint64_t)(BLK_LABELS - i) * BLK_LABEL_BYTES;
}

static bool blk_label_dev_ok(const struct blk_dev *dev)
{
	return dev->bd_size >= BLK_LABELS * (uint64_t)BLK_LABEL_BYTES;
}

void blk_label_encode(const struct blk_label *label, uint8_t *out)
{
	memset(out, 0, BLK_LABEL_HEADER_BYTES);
	blk_put_le64(out + 0, BLK_LABEL_MAGIC);
	blk_put_le32(out + 8, BLK_LABEL_VERSION);
	blk_put_le32(out + 12, label->lb_config_len);
	blk_put_le64(out + 32, label->lb_pool_guid);
	blk_put_le64(out + 40, label->lb_leaf_guid);
	blk_put_le64(out + 48, label->lb_top_guid);
	blk_put_le32(out + 56, label->lb_top_index);
	blk_put_le64(out + 64, label->lb_config_txg);
	blk_put_le64(out + 72, label->lb_leaf_bytes);
	memcpy(out + 80, label->lb_pool_name,
	       strnlen(label->lb_pool_name, sizeof(label->lb_pool_name)));
	memcpy(out + BLK_LABEL_CONFIG_OFF, label->lb_config, label->lb_config_len);
	uint8_t cksum[16];
	blk_checksum(out, BLK_LABEL_HEADER_BYTES, cksum);
	memcpy(out + 16, cksum, 16);
}

int blk_label_decode(uint8_t *in, struct blk_label *out)
{
	if (blk_get_le64(in + 0) != BLK_LABEL_MAGIC || blk_get_le32(in + 8) != BLK_LABEL_VERSION)
		return -ENOENT;
	uint8_t stored[16], cksum[16];
	memcpy(stored, in + 16, 16);
	memset(in + 16, 0, 16);
	blk_checksum(in, BLK_LABEL_HEADER_BYTES, cksum);
	memcpy(in + 16, stored, 16);
	if (memcmp(stored, cksum, 16) != 0)
		return -ENOENT;
	uint32_t config_len = blk_get_le32(in + 12);
	if (config_len > BLK_CONFIG_MAX_BYTES ||
	    memchr(in + 80, 0, sizeof(out->lb_pool_name)) == NULL)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->lb_config_len = config_len;
	out->lb_pool_guid = blk_get_le64(in + 32);
	out->lb_leaf_guid = blk_get_le64(in + 40);
	out->lb_top_guid = blk_get_le64(in + 48);
	out->lb_top_index = blk_get_le32(in + 56);
	out->lb_config_txg = blk_get_le64(in + 64);
	out->lb_leaf_bytes = blk_get_le64(in + 72);
	memcpy(out->lb_pool_name, in + 80, sizeof(out->lb_pool_name));
	memcpy(out->lb_config, in + BLK_LABEL_CONFIG_OFF, config_len);
	return 0;
}

/* Writes buf over the first len bytes of each of dev's four labels in two flushed phases: the
 * even labels, then the odd ones (see the theory above). */
static int blk_label_put(struct blk_engine *engine, struct blk_dev *dev, const uint8_t *buf,
                         uint32_t len)
{
	int rc = 0;
	for (unsigned phase = 0; phase < 2 && rc == 0; phase++) {
		struct blk_io ios[2];
		struct blk_batch batch;
		blk_batch_init(&batch);
		for (unsigned k = 0; k < 2; k++) {
			unsigned i = phase + 2 * k;
			ios[k] = (struct blk_io){.bi_op = BLK_IO_WRITE,
			                         .bi_dev = dev,
			                         .bi_offset = blk_label_offset(dev->bd_size, i),
			                         .bi_buf = (void *)buf,
			                         .bi_len = len};
			blk_batch_submit(&batch, engine, &ios[k]);
		}
		rc = blk_batch_wait(&batch);
		if (rc == 0)
			rc = blk_flush_sync(engine, dev);
	}
	return rc;
}

int blk_label_write(struct blk_engine *engine, struct blk_dev *dev, const struct blk_label *label)
{
	if (!blk_label_dev_ok(dev))
		return -EINVAL;
	if (label->lb_config_len > BLK_CONFIG_MAX_BYTES ||
	    memchr(label->lb_pool_name, 0, sizeof(label->lb_pool_name)) == NULL)
		return -EINVAL;
	uint8_t *buf = blk_buf_alloc(BLK_LABEL_HEADER_BYTES);
	if (!buf)
		return -ENOMEM;
	blk_label_encode(label, buf);
	int rc = blk_label_put(engine, dev, buf, BLK_LABEL_HEADER_BYTES);
	mem_free(buf);
	return rc;
}

int blk_label_wipe(struct blk_engine *engine, struct blk_dev *dev)
{
	if (!blk_label_dev_ok(dev))
		return -EINVAL;
	uint8_t *zeros = blk_buf_alloc(BLK_LABEL_BYTES); /* zeroed */
	if (!zeros)
		return -ENOMEM;
	int rc = blk_label_put(engine, dev, zeros, BLK_LABEL_BYTES);
	mem_free(zeros);
	return rc;
}

/* Reads [off_in_label, off_in_label + len) of each of dev's four labels into bufs (label i at
 * bufs + i * len), all at once; status_out[i] says whether label i's read succeeded. Returns 0, or
 * -EDEADLK / -EINVAL when the reads could not be made at all (a misuse, not a bad label). */
static int blk_label_read_regions(struct blk_engine *engine, struct blk_dev *dev, uint64_t off_in_label,
                                  uint32_t len, uint8_t *bufs, int status_out[BLK_LABELS])
{
	struct blk_io ios[BLK_LABELS];
	struct blk_batch batch;
	blk_batch_init(&batch);
	for (unsigned i = 0; i < BLK_LABELS; i++) {
		ios[i] = (struct blk_io){.bi_op = BLK_IO_READ,
		                         .bi_dev = dev,
		                         .bi_offset = blk_label_offset(dev->bd_size, i) + off_in_label,
		                         .bi_buf = bufs + (size_t)i * len,
		                         .bi_len = len};
		blk_batch_submit(&batch, engine, &ios[i]);
	}
	int rc = blk_batch_wait(&batch);
	for (unsigned i = 0; i < BLK_LABELS; i++)
		status_out[i] = ios[i].bi_status;
	return rc == -EDEADLK || rc == -EINVAL ? rc : 0;
}

int blk_label_read(struct blk_engine *engine, struct blk_dev *dev, struct blk_label *label_out)
{
	if (!blk_label_dev_ok(dev))
		return -ENOENT;
	uint8_t *bufs = blk_buf_alloc((size_t)BLK_LABELS * BLK_LABEL_HEADER_BYTES);
	struct blk_label *cand = mem_alloc(sizeof(*cand));
	if (!bufs || !cand) {
		mem_free(bufs);
		mem_free(cand);
		return -ENOMEM;
	}
	int status[BLK_LABELS];
	int rc = blk_label_read_regions(engine, dev, 0, BLK_LABEL_HEADER_BYTES, bufs, status);
	if (rc != 0)
		goto out;
	/* A label that could not be read is simply not a candidate; the others still count. */
	rc = -ENOENT;
	for (unsigned i = 0; i < BLK_LABELS; i++) {
		if (status[i] != 0)
			continue;
		int drc = blk_label_decode(bufs + (size_t)i * BLK_LABEL_HEADER_BYTES, cand);
		if (drc == -EINVAL && rc == -ENOENT)
			rc = -EINVAL;
		if (drc != 0)
			continue;
		if (rc != 0 || cand->lb_config_txg > label_out->lb_config_txg)
			memcpy(label_out, cand, sizeof(*cand));
		rc = 0;
	}
out:
	mem_free(cand);
	mem_free(bufs);
	return rc;
}

/* ---- the uberblock ring ---- */

void blk_ub_encode(const struct blk_uberblock *ub, uint8_t *out)
{
	memset(out, 0, BLK_UB_SLOT_BYTES);
	blk_put_le64(out + 0, BLK_UB_MAGIC);
	blk_put_le32(out + 8, BLK_UB_VERSION);
	blk_put_le32(out + 12, ub->ub_nroots);
	blk_put_le64(out + 16, ub->ub_txg);
	blk_put_le64(out + 24, ub->ub_pool_guid);
	blk_put_le64(out + 32, ub->ub_timestamp_ns);
	for (unsigned i = 0; i < ub->ub_nroots && i < BLK_UB_ROOTS; i++)
		blk_ptr_encode(&ub->ub_roots[i], out + BLK_UB_ROOTS_OFF + i * BLK_PTR_DISK_BYTES);
	memcpy(out + BLK_UB_PAYLOAD_OFF, ub->ub_payload, BLK_UB_PAYLOAD_BYTES);
	blk_checksum(out, BLK_UB_CKSUM_OFF, out + BLK_UB_CKSUM_OFF);
}

bool blk_ub_decode(const uint8_t *in, uint64_t pool_guid, struct blk_uberblock *out)
{
	if (blk_get_le64(in + 0) != BLK_UB_MAGIC || blk_get_le32(in + 8) != BLK_UB_VERSION)
		return false;
	uint8_t cksum[16];
	blk_checksum(in, BLK_UB_CKSUM_OFF, cksum);
	if (memcmp(cksum, in + BLK_UB_CKSUM_OFF, 16) != 0)
		return false;
	uint32_t nroots = blk_get_le32(in + 12);
	if (blk_get_le64(in + 24) != pool_guid || nroots > BLK_UB_ROOTS)
		return false;
	memset(out, 0, sizeof(*out));
	out->ub_nroots = nroots;
	out->ub_txg = blk_get_le64(in + 16);
	out->ub_pool_guid = pool_guid;
	out->ub_timestamp_ns = blk_get_le64(in + 32);
	for (unsigned i = 0; i < nroots; i++) {
		if (blk_ptr_decode(in + BLK_UB_ROOTS_OFF + i * BLK_PTR_DISK_BYTES,
		                   &out->ub_roots[i]) != 0)
			return false;
	}
	memcpy(out->ub_payload, in + BLK_UB_PAYLOAD_OFF, BLK_UB_PAYLOAD_BYTES);
	return true;
}

int blk_uberblock_write(struct blk_engine *engine, struct blk_vdev *const *vdevs, unsigned nvdevs,
                        const struct blk_uberblock *ub)
{
	if (ub->ub_nroots > BLK_UB_ROOTS)
		return -EINVAL;
	unsigned nleaves = 0;
	for (unsigned v = 0; v < nvdevs; v++) {
		for (unsigned c = 0; c < blk_vdev_children(vdevs[v]); c++) {
			if (!blk_label_dev_ok(blk_vdev_child(vdevs[v], c)))
				return -EINVAL;
			nleaves++;
		}
	}
	uint8_t *buf = blk_buf_alloc(BLK_UB_SLOT_BYTES);
	struct blk_io *ios = mem_zalloc(((size_t)nleaves * BLK_LABELS + 1) * sizeof(*ios));
	if (!buf || !ios) {
		mem_free(buf);
		mem_free(ios);
		return -ENOMEM;
	}
	blk_ub_encode(ub, buf);
	uint64_t slot_off =
	    BLK_LABEL_RING_OFF + (ub->ub_txg % BLK_UB_RING_SLOTS) * (uint64_t)BLK_UB_SLOT_BYTES;
	struct blk_batch batch;
	blk_batch_init(&batch);
	size_t k = 0;
	for (unsigned v = 0; v < nvdevs; v++) {
		for (unsigned c = 0; c < blk_vdev_children(vdevs[v]); c++) {
			if (blk_vdev_child_faulted(vdevs[v], c))
				continue; /* written around (blk_vdev.c) */
			struct blk_dev *dev = blk_vdev_child(vdevs[v], c);
			for (unsigned i = 0; i < BLK_LABELS; i++) {
				ios[k] = (struct blk_io){
				    .bi_op = BLK_IO_WRITE,
				    .bi_dev = dev,
				    .bi_offset = blk_label_offset(dev->bd_size, i) + slot_off,
				    .bi_buf = buf,
				    .bi_len = BLK_UB_SLOT_BYTES};
				blk_batch_submit(&batch, engine, &ios[k++]);
			}
		}
	}
	int rc = blk_batch_wait(&batch);
	/* Flush every leaf even after an error: the copies that did land should be durable. */
	blk_batch_init(&batch);
	k = 0;
	for (unsigned v = 0; v < nvdevs; v++) {
		for (unsigned c = 0; c < blk_vdev_children(vdevs[v]); c++) {
			if (blk_vdev_child_faulted(vdevs[v], c))
				continue;
			ios[k] = (struct blk_io){.bi_op = BLK_IO_FLUSH,
			                         .bi_dev = blk_vdev_child(vdevs[v], c)};
			blk_batch_submit(&batch, engine, &ios[k++]);
		}
	}
	int frc = blk_batch_wait(&batch);
	if (rc == 0)
		rc = frc;
	mem_free(ios);
	mem_free(buf);
	return rc;
}

int blk_uberblock_find_best(struct blk_engine *engine, struct blk_dev *dev, uint64_t pool_guid,
                            struct blk_uberblock *ub_out)
{
	if (!blk_label_dev_ok(dev))
		return -ENOENT;
	uint8_t *rings = blk_buf_alloc((size_t)BLK_LABELS * BLK_LABEL_RING_BYTES);
	struct blk_uberblock *cand = mem_alloc(sizeof(*cand));
	if (!rings || !cand) {
		mem_free(rings);
		mem_free(cand);
		return -ENOMEM;
	}
	int status[BLK_LABELS];
	int rc = blk_label_read_regions(engine, dev, BLK_LABEL_RING_OFF, BLK_LABEL_RING_BYTES, rings, status);
	if (rc != 0)
		goto out;
	rc = -ENOENT;
	for (unsigned i = 0; i < BLK_LABELS; i++) {
		if (status[i] != 0)
			continue; /* an unreadable ring: the others may do */
		for (unsigned s = 0; s < BLK_UB_RING_SLOTS; s++) {
			const uint8_t *slot = rings + (size_t)i * BLK_LABEL_RING_BYTES +
			                      (size_t)s * BLK_UB_SLOT_BYTES;
			if (!blk_ub_decode(slot, pool_guid, cand) ||
			    cand->ub_txg % BLK_UB_RING_SLOTS != s)
				continue;
			if (rc != 0 || cand->ub_txg > ub_out->ub_txg)
				memcpy(ub_out, cand, sizeof(*cand));
			rc = 0;
		}
	}
out:
	mem_free(cand);
	mem_free(rings);
	return rc;
}
