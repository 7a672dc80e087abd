/* test_blk.c: unit tests for src/blk: block pointer encoding and its hostile-input checks,
 * prepare/write/read round trips on memory and file leaves (io_uring and the synchronous
 * fallback), mirrors with checksum repair and read-around, labels, the uberblock ring, crash
 * images of the fault leaf, concurrency and draining of the engine, and bad arguments. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blk/blk.h"
#include "blk/blk_impl.h" /* test hooks: blk_engine_uses_uring, blk_engine_set_max_transfer */
#include "tap.h"

#define MIB (1024ull * 1024ull)
#define SECTOR BLK_SECTOR_BYTES

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_random(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = rng_next(&s);
		memcpy(p + i, &v, SH_MIN(8, len - i));
	}
}

static void fill_text(void *buf, size_t len, uint64_t seed)
{
	char *p = buf;
	size_t off = 0;
	unsigned n = (unsigned)seed;
	while (off < len) {
		char line[64];
		int w = snprintf(line, sizeof(line),
		                 "the quick brown fox %u jumps over the lazy dog\n", n++ % 97);
		size_t take = SH_MIN((size_t)w, len - off);
		memcpy(p + off, line, take);
		off += take;
	}
}

static char tmp_dir[256];

static void tmp_dir_make(void)
{
	const char *base = getenv("TMPDIR");
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/shale-blk-XXXXXX", base && *base ? base : "/tmp");
	VERIFY(mkdtemp(tmp_dir) != NULL);
}

static void tmp_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", tmp_dir, name);
}

static struct blk_engine *engine_new(unsigned depth)
{
	struct blk_engine *e = NULL;
	VERIFY(blk_engine_create(depth, &e) == 0);
	return e;
}

/* An engine forced onto the pread/pwrite fallback through its environment hook. */
static struct blk_engine *engine_new_fallback(unsigned depth)
{
	VERIFY(setenv("SHALE_BLK_NO_URING", "1", 1) == 0);
	struct blk_engine *e = engine_new(depth);
	VERIFY(unsetenv("SHALE_BLK_NO_URING") == 0);
	return e;
}

static struct blk_dev *mem_new(uint64_t bytes)
{
	struct blk_dev *d = NULL;
	VERIFY(blk_dev_create_mem(bytes, &d) == 0);
	return d;
}

/* Opens the file leaf `name` in the test directory (created with create_bytes, or the existing one
 * when 0), runs fn on it with e and closes it. The file stays for the caller to unlink. */
static void on_file(struct blk_engine *e, const char *name, uint64_t create_bytes,
                    void (*fn)(struct blk_engine *e, struct blk_dev *d))
{
	char path[512];
	tmp_path(path, sizeof(path), name);
	struct blk_dev *f = NULL;
	CHECKF(blk_dev_open_file(path, create_bytes, &f) == 0, "opening %s", name);
	if (f) {
		fn(e, f);
		blk_dev_close(f);
	}
}

/* Removes the file `name` from the test directory: true when it was there. */
static bool tmp_unlink(const char *name)
{
	char path[512];
	tmp_path(path, sizeof(path), name);
	return unlink(path) == 0;
}

/* ---- block pointers ---- */

static struct blk_ptr sample_bp(void)
{
	struct blk_ptr bp = {
	    .bp_vdev = 3,
	    .bp_offset = 0x123456789000ull,
	    .bp_asize = 3 * SECTOR,
	    .bp_psize = 9000,
	    .bp_lsize = 16384,
	    .bp_compress = BLK_COMPRESS_LZ4,
	    .bp_checksum = BLK_CHECKSUM_XXH3_128,
	    .bp_type = 7,
	    .bp_level = 2,
	    .bp_birth_txg = 0x1122334455ull,
	    .bp_fill = 0xabcdef,
	};
	for (int i = 0; i < 16; i++)
		bp.bp_cksum[i] = (uint8_t)(0xa0 + i);
	return bp;
}

static void test_bp_round_trip(void)
{
	struct blk_ptr bp = sample_bp(), back;
	uint8_t raw[BLK_PTR_DISK_BYTES];
	blk_ptr_encode(&bp, raw);
	/* Spot-check the documented table: little-endian fields at their offsets. */
	CHECK(raw[0] == 0x00 && raw[1] == 0x90 && raw[2] == 0x78 && raw[5] == 0x12);
	CHECK(raw[8] == 3 && raw[12] == 0x00 && raw[13] == 0x30);
	CHECK(raw[24] == BLK_COMPRESS_LZ4 && raw[25] == BLK_CHECKSUM_XXH3_128 && raw[26] == 7 &&
	      raw[27] == 2);
	CHECK(raw[28] == 0 && raw[29] == 0 && raw[30] == 0 && raw[31] == 0);
	CHECK(raw[32] == 0x55 && raw[40] == 0xa0 && raw[55] == 0xaf && raw[56] == 0xef);
	CHECK(blk_ptr_decode(raw, &back) == 0);
	CHECK(memcmp(&bp, &back, sizeof(bp)) == 0);
	CHECK(!blk_ptr_is_hole(&back));

	struct blk_ptr hole = {0};
	CHECK(blk_ptr_is_hole(&hole));
	memset(raw, 0xee, sizeof(raw));
	blk_ptr_encode(&hole, raw);
	for (unsigned i = 0; i < BLK_PTR_DISK_BYTES; i++)
		CHECK(raw[i] == 0);
	memset(&back, 0xee, sizeof(back));
	CHECK(blk_ptr_decode(raw, &back) == 0);
	CHECK(blk_ptr_is_hole(&back) && back.bp_asize == 0 && back.bp_lsize == 0 &&
	      back.bp_offset == 0);

	/* An uncompressed pointer with psize == lsize < asize is fine. */
	bp.bp_compress = BLK_COMPRESS_OFF;
	bp.bp_psize = bp.bp_lsize = 5000;
	bp.bp_asize = 2 * SECTOR;
	blk_ptr_encode(&bp, raw);
	CHECK(blk_ptr_decode(raw, &back) == 0 && back.bp_psize == 5000);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* One way to spoil the encoded sample pointer: pb_bytes little-endian bytes of pb_value stored at
 * pb_at (offsets from the table at the top of src/blk/blk_bp.c). */
struct bp_patch {
	const char *pb_what;
	unsigned pb_at;
	unsigned pb_bytes;
	uint64_t pb_value;
};

static const struct bp_patch bp_rejects[] = {
    {"psize > asize", 16, 4, 3 * SECTOR + 1},
    {"asize unaligned", 12, 4, 3 * SECTOR + 512},
    {"asize 0", 12, 4, 0},
    {"asize too big", 12, 4, 2 * 1024 * 1024},
    {"lsize too big", 20, 4, BLK_MAX_BLOCK_BYTES + 1},
    {"lsize 0", 20, 4, 0},
    {"psize 0", 16, 4, 0},
    {"uncompressed, psize != lsize", 24, 1, BLK_COMPRESS_OFF},
    {"compressed, psize 9000 > lsize 8000", 20, 4, 8000},
    {"unknown compression", 24, 1, 3},
    {"unknown checksum", 25, 1, 2},
    {"checksum 0", 25, 1, 0},
    {"offset unaligned", 0, 1, 0x01},
    {"reserved byte set", 30, 1, 1},
    {"birth txg 0", 32, 8, 0},
    {"offset + asize overflows (offset aligned)", 0, 8, 0xfffffffffffff000ull},
};

/* Decodes the sample pointer with patch applied to its encoding. */
static int decode_patched(const struct bp_patch *patch)
{
	struct blk_ptr bp = sample_bp(), out;
	uint8_t raw[BLK_PTR_DISK_BYTES];
	blk_ptr_encode(&bp, raw);
	for (unsigned i = 0; i < patch->pb_bytes; i++)
		raw[patch->pb_at + i] = (uint8_t)(patch->pb_value >> (8 * i));
	return blk_ptr_decode(raw, &out);
}

static void test_bp_decode_rejects(void)
{
	for (size_t i = 0; i < SH_ARRAY_SIZE(bp_rejects); i++)
		CHECKF(decode_patched(&bp_rejects[i]) == -EINVAL, "%s", bp_rejects[i].pb_what);

	/* Random bytes never crash the decoder, and whatever it accepts re-encodes to itself. */
	uint64_t s = 42;
	int accepted = 0;
	for (int i = 0; i < 20000; i++) {
		uint8_t raw[BLK_PTR_DISK_BYTES], again[BLK_PTR_DISK_BYTES];
		fill_random(raw, sizeof(raw), rng_next(&s));
		if (i % 2 == 0) {
			/* Nudge half towards plausibility so the later checks are reached. */
			raw[0] = 0;
			raw[1] &= 0xf0;
			put32(raw + 12, (uint32_t)(1 + rng_next(&s) % 256) * SECTOR);
			put32(raw + 16, (uint32_t)(1 + rng_next(&s) % (256 * SECTOR)));
			put32(raw + 20, (uint32_t)(1 + rng_next(&s) % BLK_MAX_BLOCK_BYTES));
			raw[24] = (uint8_t)(rng_next(&s) % 4);
			raw[25] = 1;
			put32(raw + 28, 0);
		}
		struct blk_ptr bp;
		if (blk_ptr_decode(raw, &bp) == 0) {
			accepted++;
			blk_ptr_encode(&bp, again);
			CHECK(memcmp(raw, again, sizeof(raw)) == 0);
			CHECK(bp.bp_psize <= bp.bp_asize && bp.bp_lsize <= BLK_MAX_BLOCK_BYTES);
		}
	}
	CHECKF(accepted > 0, "no random pointer was accepted: the fuzz loop checks nothing");
}

/* ---- prepare, write, read ---- */

struct rt_stats {
	int blocks;
	int compressed;
};

/* Writes blocks of each size, compression and kind of data to vdev and reads them back. */
static void round_trip_on(struct blk_engine *e, struct blk_vdev *vdev, struct rt_stats *st)
{
	static const uint32_t sizes[] = {1, 4096, 5000, 8192, 65536, 131072, 1048576};
	uint64_t cursor = blk_vdev_data_start(vdev);
	uint8_t *data = mem_alloc(BLK_MAX_BLOCK_BYTES);
	uint8_t *out = mem_alloc(BLK_MAX_BLOCK_BYTES + 1);
	uint8_t *raw = blk_buf_alloc(BLK_MAX_BLOCK_BYTES);
	VERIFY(data && out && raw);
	for (unsigned si = 0; si < SH_ARRAY_SIZE(sizes); si++) {
		for (int c = BLK_COMPRESS_OFF; c <= BLK_COMPRESS_ZSTD; c++) {
			for (int kind = 0; kind < 2; kind++) {
				uint32_t lsize = sizes[si];
				uint64_t seed = si * 100 + (uint64_t)c * 10 + (uint64_t)kind;
				if (kind == 0)
					fill_text(data, lsize, seed);
				else
					fill_random(data, lsize, seed);
				struct blk_prepared p;
				CHECK(blk_prepare(data, lsize, c, &p) == 0);
				CHECK(p.bw_lsize == lsize);
				CHECK(p.bw_asize % SECTOR == 0 && p.bw_asize >= p.bw_psize &&
				      p.bw_asize - p.bw_psize < SECTOR);
				CHECK((uintptr_t)p.bw_buf % SECTOR == 0);
				uint8_t ck[16];
				blk_checksum(p.bw_buf, p.bw_psize, ck);
				CHECK(memcmp(ck, p.bw_cksum, 16) == 0);
				for (uint32_t i = p.bw_psize; i < p.bw_asize; i++) {
					if (((uint8_t *)p.bw_buf)[i] != 0) {
						CHECKF(false, "padding byte %u not zero", i);
						break;
					}
				}
				if (p.bw_compress == BLK_COMPRESS_OFF) {
					CHECK(p.bw_psize == lsize);
					CHECK(memcmp(p.bw_buf, data, lsize) == 0);
				} else {
					CHECK(p.bw_compress == c);
					CHECK(p.bw_psize <= lsize - lsize / 8);
					st->compressed++;
				}
				/* Text of 4 KiB and up must compress; random bytes must not. */
				if (c != BLK_COMPRESS_OFF && kind == 0 && lsize >= 4096)
					CHECKF(p.bw_compress == c,
					       "text of %u bytes not compressed by %d", lsize, c);
				if (kind == 1 || c == BLK_COMPRESS_OFF)
					CHECK(p.bw_compress == BLK_COMPRESS_OFF);

				struct blk_ptr bp;
				blk_ptr_fill(&bp, &p, 0, cursor, 5, 0, 77, 1);
				CHECK(bp.bp_asize == p.bw_asize && bp.bp_birth_txg == 77);
				uint8_t enc[BLK_PTR_DISK_BYTES];
				struct blk_ptr dec;
				blk_ptr_encode(&bp, enc);
				CHECK(blk_ptr_decode(enc, &dec) == 0 &&
				      memcmp(&dec, &bp, sizeof(bp)) == 0);
				CHECK(blk_block_write_sync(vdev, &dec, &p) == 0);
				/* Every child holds the physical bytes. */
				for (unsigned ch = 0; ch < blk_vdev_children(vdev); ch++) {
					memset(raw, 0xcc, p.bw_asize);
					CHECK(blk_read_sync(e, blk_vdev_child(vdev, ch), cursor,
					                    raw, p.bw_asize) == 0);
					CHECK(memcmp(raw, p.bw_buf, p.bw_asize) == 0);
				}
				/* An unaligned output buffer on purpose: it may be anywhere. */
				memset(out, 0xcc, lsize + 1);
				CHECK(blk_block_read_sync(vdev, &dec, out + 1) == 0);
				CHECKF(memcmp(out + 1, data, lsize) == 0,
				       "size %u compress %d kind %d", lsize, c, kind);
				st->blocks++;
				cursor += p.bw_asize;
				blk_prepared_fini(&p);
				CHECK(p.bw_buf == NULL);
			}
		}
	}
	mem_free(raw);
	mem_free(out);
	mem_free(data);
}

static void test_round_trip_mem_mirror(void)
{
	struct blk_engine *e = engine_new(64);
	struct blk_dev *d[2] = {mem_new(32 * MIB), mem_new(40 * MIB)};
	struct blk_vdev *v;
	CHECK(blk_vdev_create(e, d, 2, &v) == 0);
	CHECK(blk_vdev_data_start(v) == 512 * 1024);
	CHECK(blk_vdev_data_bytes(v) == 31 * MIB); /* the smaller child less 1 MiB of labels */
	CHECK(blk_vdev_children(v) == 2 && blk_vdev_child(v, 1) == d[1] &&
	      blk_vdev_child(v, 2) == NULL);
	struct rt_stats st = {0};
	round_trip_on(e, v, &st);
	CHECK(st.blocks == 42 && st.compressed >= 10);
	/* Both children got every block: their data areas are identical. */
	CHECK(memcmp(blk_dev_mem_bytes(d[0]) + 512 * 1024, blk_dev_mem_bytes(d[1]) + 512 * 1024,
	             20 * MIB) == 0);
	struct blk_vdev_stats s0, s1;
	blk_vdev_stats(v, 0, &s0);
	blk_vdev_stats(v, 1, &s1);
	CHECK(s0.vs_writes == 42 && s1.vs_writes == 42);
	CHECK(s0.vs_reads + s1.vs_reads == 42 && s0.vs_reads > 0 && s1.vs_reads > 0); /* spread */
	CHECK(s0.vs_checksum_errors == 0 && s0.vs_io_errors == 0 && s1.vs_repairs == 0);
	blk_vdev_destroy(v);
	blk_engine_destroy(e);
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
}

static void file_round_trip(struct blk_engine *e, const char *name)
{
	char path[512];
	tmp_path(path, sizeof(path), name);
	struct blk_dev *f = NULL;
	CHECK(blk_dev_open_file(path, 48 * MIB + 1000, &f) == 0);
	if (!f)
		return;
	CHECK(blk_dev_size(f) == 48 * MIB); /* rounded down to the label size */
	CHECK(strcmp(blk_dev_path(f), path) == 0);
	CHECK(blk_dev_mem_bytes(f) == NULL);
	struct blk_vdev *v;
	CHECK(blk_vdev_create(e, &f, 1, &v) == 0);
	struct rt_stats st = {0};
	round_trip_on(e, v, &st);
	CHECK(st.blocks == 42);
	CHECK(blk_flush_sync(e, f) == 0);

	/* A lent block (its image the caller's sector-aligned buffer) goes through the file's
	 * direct I/O as well as a copied one. */
	uint8_t *lent = mem_aligned_alloc(SECTOR, 131072), *lent_back = mem_alloc(131072);
	VERIFY(lent && lent_back);
	fill_random(lent, 131072, 77);
	struct blk_prepared lp;
	CHECK(blk_prepare_lend(lent, 131072, BLK_COMPRESS_LZ4, &lp) == 0);
	CHECK(lp.bw_lent && lp.bw_buf == lent);
	struct blk_ptr lbp;
	blk_ptr_fill(&lbp, &lp, 0, blk_vdev_data_start(v) + 8 * MIB, 5, 0, 78, 1);
	CHECK(blk_block_write_sync(v, &lbp, &lp) == 0);
	blk_prepared_fini(&lp);
	CHECK(blk_block_read_sync(v, &lbp, lent_back) == 0 &&
	      memcmp(lent, lent_back, 131072) == 0);
	mem_free(lent);
	mem_free(lent_back);

	/* Raw I/O lands in the file at the offset asked for. */
	uint8_t *buf = blk_buf_alloc(3 * SECTOR), *back = blk_buf_alloc(3 * SECTOR);
	fill_random(buf, 3 * SECTOR, 9);
	uint64_t off = blk_vdev_data_start(v) + blk_vdev_data_bytes(v) - 3 * SECTOR;
	CHECK(blk_write_sync(e, f, off, buf, 3 * SECTOR) == 0);
	CHECK(blk_flush_sync(e, f) == 0);
	blk_vdev_destroy(v);
	blk_dev_close(f);

	/* Reopen the existing file: same size, same bytes. */
	CHECK(blk_dev_open_file(path, 0, &f) == 0);
	if (f) {
		CHECK(blk_dev_size(f) == 48 * MIB);
		CHECK(blk_read_sync(e, f, off, back, 3 * SECTOR) == 0);
		CHECK(memcmp(buf, back, 3 * SECTOR) == 0);
		/* Reading past the usable end (the file is 1000 bytes longer) is refused. */
		CHECK(blk_read_sync(e, f, 48 * MIB, back, SECTOR) == -EINVAL);
		blk_dev_close(f);
	}
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	if (fd >= 0) {
		CHECK(pread(fd, back, 3 * SECTOR, (off_t)off) == 3 * SECTOR);
		CHECK(memcmp(buf, back, 3 * SECTOR) == 0);
		close(fd);
	}
	/* create_bytes never clobbers an existing file. */
	CHECK(blk_dev_open_file(path, 4 * MIB, &f) == -EEXIST && f == NULL);
	mem_free(buf);
	mem_free(back);
	CHECK(unlink(path) == 0);
}

static void test_round_trip_file_uring(void)
{
	struct blk_engine *e = engine_new(32);
	file_round_trip(e, "uring.img");
	blk_engine_destroy(e);
}

static void test_round_trip_file_fallback(void)
{
	struct blk_engine *e = engine_new_fallback(32);
	file_round_trip(e, "fallback.img");
	blk_engine_destroy(e);
}

/* blk_prepare_lend lends the caller's bytes only when they are written as they are: stored
 * uncompressed, sector-aligned, whole sectors. Otherwise it prepares a copy, as blk_prepare. */
static void test_prepare_lend(void)
{
	uint8_t *data = mem_aligned_alloc(SECTOR, 131072 + SECTOR);
	VERIFY(data);
	struct blk_prepared p;
	uint8_t ck[16];
	/* incompressible: lent, whatever compression was asked for */
	fill_random(data, 131072, 1);
	for (int c = BLK_COMPRESS_OFF; c <= BLK_COMPRESS_ZSTD; c++) {
		CHECK(blk_prepare_lend(data, 131072, c, &p) == 0);
		CHECK(p.bw_lent && p.bw_buf == data && p.bw_compress == BLK_COMPRESS_OFF);
		CHECK(p.bw_lsize == 131072 && p.bw_psize == 131072 && p.bw_asize == 131072);
		blk_checksum(data, 131072, ck);
		CHECK(memcmp(ck, p.bw_cksum, 16) == 0);
		blk_prepared_fini(&p); /* leaves data alone: ASan would see a double free below */
	}
	/* compressible: compressed into a buffer of its own */
	fill_text(data, 131072, 2);
	CHECK(blk_prepare_lend(data, 131072, BLK_COMPRESS_LZ4, &p) == 0);
	CHECK(!p.bw_lent && p.bw_buf != data && p.bw_compress == BLK_COMPRESS_LZ4);
	blk_prepared_fini(&p);
	/* not sector-aligned, or not whole sectors: copied */
	fill_random(data, 131072 + SECTOR, 3);
	CHECK(blk_prepare_lend(data + 16, 131072, BLK_COMPRESS_OFF, &p) == 0);
	CHECK(!p.bw_lent && p.bw_buf != data + 16 && memcmp(p.bw_buf, data + 16, 131072) == 0);
	CHECK((uintptr_t)p.bw_buf % SECTOR == 0);
	blk_prepared_fini(&p);
	CHECK(blk_prepare_lend(data, 5000, BLK_COMPRESS_OFF, &p) == 0);
	CHECK(!p.bw_lent && p.bw_asize == 2 * SECTOR && memcmp(p.bw_buf, data, 5000) == 0);
	blk_prepared_fini(&p);
	/* blk_prepared_own: the block takes a copy; changing data afterwards changes nothing */
	CHECK(blk_prepare_lend(data, 8192, BLK_COMPRESS_OFF, &p) == 0);
	CHECK(p.bw_lent);
	CHECK(blk_prepared_own(&p) == 0);
	CHECK(!p.bw_lent && p.bw_buf != data && (uintptr_t)p.bw_buf % SECTOR == 0);
	data[0] ^= 0xff;
	blk_checksum(p.bw_buf, 8192, ck);
	CHECK(memcmp(ck, p.bw_cksum, 16) == 0);
	CHECK(blk_prepared_own(&p) == 0 && !p.bw_lent); /* an owned block stays as it is */
	blk_prepared_fini(&p);
	mem_free(data);
}

/* ---- mirrors: checksum repair, read-around ---- */

static void write_block(struct blk_vdev *v, uint64_t off, uint32_t lsize, enum blk_compress c,
                        uint64_t seed, uint8_t *data, struct blk_ptr *bp)
{
	fill_text(data, lsize, seed);
	struct blk_prepared p;
	VERIFY(blk_prepare(data, lsize, c, &p) == 0);
	blk_ptr_fill(bp, &p, 0, off, 1, 0, 9, 1);
	CHECK(blk_block_write_sync(v, bp, &p) == 0);
	blk_prepared_fini(&p);
}

static void test_checksum_repair(void)
{
	struct blk_engine *e = engine_new(16);
	struct blk_dev *d[2] = {mem_new(8 * MIB), mem_new(8 * MIB)};
	struct blk_vdev *v;
	CHECK(blk_vdev_create(e, d, 2, &v) == 0);
	uint8_t *data = mem_alloc(65536), *out = mem_alloc(65536);
	struct blk_ptr bp;
	uint64_t off = blk_vdev_data_start(v) + 10 * SECTOR;
	write_block(v, off, 65536, BLK_COMPRESS_LZ4, 1, data, &bp);
	CHECK(bp.bp_compress == BLK_COMPRESS_LZ4);

	blk_dev_mem_bytes(d[1])[off + 17] ^= 0x40;
	/* Reads alternate between children, so one of two reads tries the bad copy first. */
	for (int i = 0; i < 2; i++) {
		memset(out, 0, 65536);
		CHECK(blk_block_read_sync(v, &bp, out) == 0);
		CHECK(memcmp(out, data, 65536) == 0);
	}
	struct blk_vdev_stats s0, s1;
	blk_vdev_stats(v, 0, &s0);
	blk_vdev_stats(v, 1, &s1);
	CHECK(s1.vs_checksum_errors == 1 && s1.vs_repairs == 1);
	CHECK(s0.vs_checksum_errors == 0 && s0.vs_repairs == 0);
	CHECK(memcmp(blk_dev_mem_bytes(d[0]) + off, blk_dev_mem_bytes(d[1]) + off, bp.bp_asize) ==
	      0);

	/* Both copies bad: -EIO, and the engine keeps working. */
	blk_dev_mem_bytes(d[0])[off + 5] ^= 1;
	blk_dev_mem_bytes(d[1])[off + 6] ^= 1;
	CHECK(blk_block_read_sync(v, &bp, out) == -EIO);
	blk_vdev_stats(v, 0, &s0);
	blk_vdev_stats(v, 1, &s1);
	CHECK(s0.vs_checksum_errors == 1 && s1.vs_checksum_errors == 2);
	CHECK(s0.vs_repairs == 0 && s1.vs_repairs == 1);
	struct blk_ptr bp2;
	write_block(v, off + bp.bp_asize, 8192, BLK_COMPRESS_OFF, 2, data, &bp2);
	CHECK(blk_block_read_sync(v, &bp2, out) == 0 && memcmp(out, data, 8192) == 0);

	/* A single-leaf vdev has nothing to read around to. */
	struct blk_vdev *single;
	CHECK(blk_vdev_create(e, &d[0], 1, &single) == 0);
	write_block(single, off, 16384, BLK_COMPRESS_ZSTD, 3, data, &bp);
	CHECK(blk_block_read_sync(single, &bp, out) == 0 && memcmp(out, data, 16384) == 0);
	blk_dev_mem_bytes(d[0])[off + bp.bp_psize - 1] ^= 0x80;
	CHECK(blk_block_read_sync(single, &bp, out) == -EIO);
	struct blk_vdev_stats ss;
	blk_vdev_stats(single, 0, &ss);
	CHECK(ss.vs_checksum_errors == 1 && ss.vs_repairs == 0);

	/* Bytes that pass the checksum but do not decompress count as a checksum error. */
	uint8_t *junk = blk_buf_alloc(SECTOR);
	fill_random(junk, SECTOR, 11);
	CHECK(blk_write_sync(e, d[0], off, junk, SECTOR) == 0);
	struct blk_ptr forged = {.bp_offset = off,
	                         .bp_asize = SECTOR,
	                         .bp_psize = 3000,
	                         .bp_lsize = 60000,
	                         .bp_compress = BLK_COMPRESS_LZ4,
	                         .bp_checksum = BLK_CHECKSUM_XXH3_128,
	                         .bp_birth_txg = 1};
	blk_checksum(junk, 3000, forged.bp_cksum);
	uint8_t *big = mem_alloc(60000);
	CHECK(blk_block_read_sync(single, &forged, big) == -EIO);
	forged.bp_compress = BLK_COMPRESS_ZSTD;
	CHECK(blk_block_read_sync(single, &forged, big) == -EIO);
	blk_vdev_stats(single, 0, &ss);
	CHECK(ss.vs_checksum_errors == 3);
	mem_free(big);
	mem_free(junk);

	blk_vdev_destroy(single);
	blk_vdev_destroy(v);
	blk_engine_destroy(e);
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
	mem_free(data);
	mem_free(out);
}

/* A block stored uncompressed in whole sectors, read into a sector-aligned buffer, goes straight
 * into it (the leaves' bytes are there even when they fail the checksum), and everything the
 * bounce-buffer path does still holds: the bad copy read around and repaired, -EIO when both are
 * bad. Into a buffer that is not aligned, the same block goes through the bounce buffer. */
static void test_read_direct(void)
{
	enum { LEN = 65536 };
	struct blk_engine *e = engine_new(16);
	struct blk_dev *d[2] = {mem_new(8 * MIB), mem_new(8 * MIB)};
	struct blk_vdev *v;
	CHECK(blk_vdev_create(e, d, 2, &v) == 0);
	uint8_t *data = mem_alloc(LEN), *aligned = mem_aligned_alloc(SECTOR, LEN);
	uint8_t *unaligned_base = mem_aligned_alloc(SECTOR, LEN + 64), *unaligned = unaligned_base + 16;
	struct blk_ptr bp;
	uint64_t off = blk_vdev_data_start(v) + 10 * SECTOR;
	fill_random(data, LEN, 21); /* incompressible: stored as it is */
	struct blk_prepared prep;
	VERIFY(blk_prepare(data, LEN, BLK_COMPRESS_LZ4, &prep) == 0);
	blk_ptr_fill(&bp, &prep, 0, off, 1, 0, 9, 1);
	CHECK(blk_block_write_sync(v, &bp, &prep) == 0);
	blk_prepared_fini(&prep);
	CHECK(bp.bp_compress == BLK_COMPRESS_OFF && bp.bp_psize == LEN && bp.bp_asize == LEN);

	blk_dev_mem_bytes(d[1])[off + 33] ^= 0x04;
	for (int i = 0; i < 2; i++) { /* one of the two reads tries the bad copy first */
		memset(aligned, 0, LEN);
		CHECK(blk_block_read_sync(v, &bp, aligned) == 0);
		CHECK(memcmp(aligned, data, LEN) == 0);
	}
	struct blk_vdev_stats s1;
	blk_vdev_stats(v, 1, &s1);
	CHECK(s1.vs_checksum_errors == 1 && s1.vs_repairs == 1);
	CHECK(memcmp(blk_dev_mem_bytes(d[0]) + off, blk_dev_mem_bytes(d[1]) + off, LEN) == 0);
	memset(unaligned, 0, LEN);
	CHECK(blk_block_read_sync(v, &bp, unaligned) == 0 && memcmp(unaligned, data, LEN) == 0);
	memset(aligned, 0, LEN);
	CHECK(blk_block_read_raw_sync(v, &bp, aligned) == 0 && memcmp(aligned, data, LEN) == 0);

	/* both copies bad: -EIO; the aligned buffer took what the leaves hold, the other did not */
	blk_dev_mem_bytes(d[0])[off + 5] ^= 1;
	blk_dev_mem_bytes(d[1])[off + 6] ^= 1;
	memset(aligned, 0xAA, LEN);
	memset(unaligned, 0xAA, LEN);
	CHECK(blk_block_read_sync(v, &bp, aligned) == -EIO);
	CHECK(blk_block_read_sync(v, &bp, unaligned) == -EIO);
	CHECK(aligned[100] == data[100] && unaligned[100] == 0xAA);

	blk_vdev_destroy(v);
	blk_engine_destroy(e);
	blk_dev_close(d[0]);
	blk_dev_close(d[1]);
	mem_free(data);
	mem_free(aligned);
	mem_free(unaligned_base);
}

static void test_read_errors_and_pulled(void)
{
	struct blk_engine *e = engine_new(16);
	struct blk_dev *d[3] = {mem_new(4 * MIB), mem_new(4 * MIB), mem_new(4 * MIB)};
	struct blk_vdev *v;
	CHECK(blk_vdev_create(e, d, 3, &v) == 0);
	uint8_t *data = mem_alloc(32768), *out = mem_alloc(32768), *orig = mem_alloc(32768);
	struct blk_ptr bp;
	uint64_t off = blk_vdev_data_start(v);
	write_block(v, off, 32768, BLK_COMPRESS_OFF, 5, data, &bp);
	memcpy(orig, data, 32768);

	/* An injected read error on each child in turn: every read succeeds by reading around,
	 * and the failed child is rewritten. */
	for (unsigned bad = 0; bad < 3; bad++) {
		blk_dev_inject_errors(d[bad], 1, -1);
		for (int i = 0; i < 3; i++) {
			memset(out, 0, 32768);
			CHECK(blk_block_read_sync(v, &bp, out) == 0 &&
			      memcmp(out, data, 32768) == 0);
		}
		blk_dev_inject_errors(d[bad], -1, -1);
	}
	for (unsigned c = 0; c < 3; c++) {
		struct blk_vdev_stats s;
		blk_vdev_stats(v, c, &s);
		CHECKF(s.vs_io_errors == 1 && s.vs_repairs == 1 && s.vs_checksum_errors == 0,
		       "child %u: io %llu repairs %llu", c, (unsigned long long)s.vs_io_errors,
		       (unsigned long long)s.vs_repairs);
	}

	/* Raw vdev reads pick the child asked for, modulo the count. */
	uint8_t *raw = blk_buf_alloc(SECTOR);
	blk_dev_mem_bytes(d[2])[off] ^= 0xff;
	struct blk_vdev_io vio = {.vi_op = BLK_IO_READ,
	                          .vi_vdev = v,
	                          .vi_offset = off,
	                          .vi_buf = raw,
	                          .vi_len = SECTOR,
	                          .vi_child = 5};
	uint8_t flipped = (uint8_t)~orig[0];
	CHECK(blk_vdev_io_sync(&vio) == 0 && raw[0] == flipped);
	vio.vi_child = 3;
	CHECK(blk_vdev_io_sync(&vio) == 0 && raw[0] == orig[0]);
	blk_dev_mem_bytes(d[2])[off] ^= 0xff;

	/* A pulled child: writes and flushes succeed on the others and fault it (write-around);
	 * reads go around it without repairing it. */
	CHECK(!blk_vdev_child_faulted(v, 1));
	blk_dev_set_pulled(d[1], true);
	struct blk_vdev_io w = {.vi_op = BLK_IO_WRITE,
	                        .vi_vdev = v,
	                        .vi_offset = off + 64 * SECTOR,
	                        .vi_buf = raw,
	                        .vi_len = SECTOR};
	uint8_t before_d1 = blk_dev_mem_bytes(d[1])[off + 64 * SECTOR];
	raw[0] = (uint8_t)(before_d1 + 1);
	CHECK(blk_vdev_io_sync(&w) == 0);
	CHECK(blk_vdev_child_faulted(v, 1) && !blk_vdev_child_faulted(v, 0) &&
	      !blk_vdev_child_faulted(v, 2));
	CHECK(blk_dev_mem_bytes(d[0])[off + 64 * SECTOR] == raw[0] &&
	      blk_dev_mem_bytes(d[2])[off + 64 * SECTOR] == raw[0]);
	struct blk_vdev_io fl = {.vi_op = BLK_IO_FLUSH, .vi_vdev = v};
	CHECK(blk_vdev_io_sync(&fl) == 0);
	struct blk_ptr bp2;
	fill_text(data, 8192, 6);
	struct blk_prepared p;
	CHECK(blk_prepare(data, 8192, BLK_COMPRESS_OFF, &p) == 0);
	blk_ptr_fill(&bp2, &p, 0, off + 128 * SECTOR, 1, 0, 9, 1);
	CHECK(blk_block_write_sync(v, &bp2, &p) == 0);
	struct blk_vdev_stats before, after;
	blk_vdev_stats(v, 1, &before);
	CHECK(before.vs_faulted);
	for (int i = 0; i < 6; i++)
		CHECK(blk_block_read_sync(v, &bp, out) == 0 && memcmp(out, orig, 32768) == 0);
	blk_vdev_stats(v, 1, &after);
	CHECK(after.vs_reads == before.vs_reads && after.vs_writes == before.vs_writes &&
	      after.vs_repairs == before.vs_repairs);
	/* Back, it stays faulted: nothing is written to it, its stale copies are not read while
	 * another child has a good one. */
	blk_dev_set_pulled(d[1], false);
	raw[0]++;
	CHECK(blk_vdev_io_sync(&w) == 0);
	CHECK(blk_dev_mem_bytes(d[1])[off + 64 * SECTOR] == before_d1);
	CHECK(blk_vdev_child_faulted(v, 1));
	memset(blk_dev_mem_bytes(d[1]) + off + 128 * SECTOR, 0x5a, 8192);
	uint8_t out8k[8192];
	for (int i = 0; i < 3; i++)
		CHECK(blk_block_read_sync(v, &bp2, out8k) == 0 && memcmp(out8k, data, 8192) == 0);
	blk_vdev_stats(v, 1, &after);
	CHECK(after.vs_reads == before.vs_reads && after.vs_checksum_errors == 0);
	/* With every other child unreadable, the faulted one is still tried. */
	blk_dev_inject_errors(d[0], 1, -1);
	blk_dev_inject_errors(d[2], 1, -1);
	CHECK(blk_block_read_sync(v, &bp, out) == 0 && memcmp(out, orig, 32768) == 0);
	blk_dev_inject_errors(d[0], -1, -1);
	blk_dev_inject_errors(d[2], -1, -1);
	blk_vdev_stats(v, 1, &after);
	CHECK(after.vs_reads == before.vs_reads + 1);
	blk_prepared_fini(&p);

	/* A fresh vdev over the same leaves: a write that fails on every child fails and faults
	 * none; one that fails on one child succeeds and faults that one. */
	struct blk_vdev *v2;
	CHECK(blk_vdev_create(e, d, 3, &v2) == 0);
	for (int i = 0; i < 3; i++)
		blk_dev_inject_errors(d[i], -1, 1);
	CHECK(blk_prepare(data, 8192, BLK_COMPRESS_OFF, &p) == 0);
	CHECK(blk_block_write_sync(v2, &bp2, &p) == -EIO);
	for (unsigned c = 0; c < 3; c++)
		CHECK(!blk_vdev_child_faulted(v2, c));
	blk_dev_inject_errors(d[0], -1, 1);
	CHECK(blk_block_write_sync(v2, &bp2, &p) == 0);
	CHECK(blk_vdev_child_faulted(v2, 0) && !blk_vdev_child_faulted(v2, 1));
	blk_prepared_fini(&p);
	blk_dev_inject_errors(d[0], -1, -1);
	blk_vdev_destroy(v2);
	/* A single leaf is never faulted: its write error is the write's. */
	struct blk_vdev *v1;
	CHECK(blk_vdev_create(e, &d[2], 1, &v1) == 0);
	blk_dev_inject_errors(d[2], -1, 1);
	CHECK(blk_prepare(data, 8192, BLK_COMPRESS_OFF, &p) == 0);
	CHECK(blk_block_write_sync(v1, &bp2, &p) == -EIO);
	CHECK(!blk_vdev_child_faulted(v1, 0));
	CHECK(blk_block_write_sync(v1, &bp2, &p) == 0); /* only the next write was to fail */
	blk_prepared_fini(&p);
	blk_dev_inject_errors(d[2], -1, -1);
	blk_vdev_destroy(v1);

	/* Every child pulled: the read error comes back. */
	for (int i = 0; i < 3; i++)
		blk_dev_set_pulled(d[i], true);
	CHECK(blk_block_read_sync(v, &bp, out) == -EIO);
	for (int i = 0; i < 3; i++)
		blk_dev_set_pulled(d[i], false);

	mem_free(raw);
	blk_vdev_destroy(v);
	blk_engine_destroy(e);
	for (int i = 0; i < 3; i++)
		blk_dev_close(d[i]);
	mem_free(data);
	mem_free(out);
	mem_free(orig);
}

/* ---- labels ---- */

#define LABEL_HDR (16u * 1024u)

static uint64_t label_off(uint64_t size, unsigned i)
{
	return i < 2 ? i * (uint64_t)BLK_LABEL_BYTES : size - (4 - i) * (uint64_t)BLK_LABEL_BYTES;
}

static void make_label(struct blk_label *lb, uint64_t txg, const char *config)
{
	memset(lb, 0, sizeof(*lb));
	lb->lb_pool_guid = 0x1111;
	lb->lb_leaf_guid = 0x2222;
	lb->lb_top_guid = 0x3333;
	lb->lb_top_index = 1;
	lb->lb_config_txg = txg;
	lb->lb_leaf_bytes = 4 * MIB;
	snprintf(lb->lb_pool_name, sizeof(lb->lb_pool_name), "tank");
	lb->lb_config_len = (uint32_t)strlen(config);
	memcpy(lb->lb_config, config, lb->lb_config_len);
}

static void test_labels(void)
{
	struct blk_engine *e = engine_new(16);
	struct blk_dev *d = mem_new(4 * MIB);
	uint8_t *bytes = blk_dev_mem_bytes(d);
	struct blk_label *lb = mem_alloc(sizeof(*lb)), *back = mem_alloc(sizeof(*back));
	CHECK(blk_label_read(e, d, back) == -ENOENT);

	/* The rings are not touched by a label write. */
	for (unsigned i = 0; i < 4; i++)
		memset(bytes + label_off(4 * MIB, i) + 128 * 1024, 0xab, 128 * 1024);
	make_label(lb, 3, "name=tank\nvdevs=1\n");
	CHECK(blk_label_write(e, d, lb) == 0);
	for (unsigned i = 0; i < 4; i++) {
		const uint8_t *ring = bytes + label_off(4 * MIB, i) + 128 * 1024;
		bool intact = true;
		for (unsigned k = 0; k < 128 * 1024; k++)
			intact = intact && ring[k] == 0xab;
		CHECKF(intact, "ring of label %u touched", i);
	}
	CHECK(blk_label_read(e, d, back) == 0);
	CHECK(back->lb_pool_guid == 0x1111 && back->lb_leaf_guid == 0x2222 &&
	      back->lb_top_guid == 0x3333);
	CHECK(back->lb_top_index == 1 && back->lb_config_txg == 3 &&
	      back->lb_leaf_bytes == 4 * MIB);
	CHECK(strcmp(back->lb_pool_name, "tank") == 0);
	CHECK(back->lb_config_len == lb->lb_config_len &&
	      memcmp(back->lb_config, lb->lb_config, lb->lb_config_len) == 0);

	/* Mix generations: L0 and L3 keep txg 3, L1 and L2 get txg 9; the highest wins. */
	uint8_t *old_hdr = mem_alloc(LABEL_HDR);
	memcpy(old_hdr, bytes, LABEL_HDR);
	make_label(lb, 9, "name=tank\nvdevs=2\n");
	CHECK(blk_label_write(e, d, lb) == 0);
	memcpy(bytes + label_off(4 * MIB, 0), old_hdr, LABEL_HDR);
	memcpy(bytes + label_off(4 * MIB, 3), old_hdr, LABEL_HDR);
	CHECK(blk_label_read(e, d, back) == 0 && back->lb_config_txg == 9);
	CHECK(memcmp(back->lb_config, "name=tank\nvdevs=2\n", back->lb_config_len) == 0);
	/* Corrupt the newer ones: the older, intact labels are used. */
	bytes[label_off(4 * MIB, 1) + 2000] ^= 1;
	bytes[label_off(4 * MIB, 2) + 40] ^= 1;
	CHECK(blk_label_read(e, d, back) == 0 && back->lb_config_txg == 3);
	/* An injected read error on one label read is read around too. */
	blk_dev_inject_errors(d, 1, -1);
	CHECK(blk_label_read(e, d, back) == 0 && back->lb_config_txg == 3);
	bytes[label_off(4 * MIB, 0) + 100] ^= 1;
	bytes[label_off(4 * MIB, 3) + 16] ^= 1;
	CHECK(blk_label_read(e, d, back) == -ENOENT);

	/* Nonsense that passes the checksum (config length too big) is -EINVAL, per the format. */
	memcpy(bytes, old_hdr, LABEL_HDR);
	put32(bytes + 12, BLK_CONFIG_MAX_BYTES + 1);
	memset(bytes + 16, 0, 16);
	uint8_t ck[16];
	blk_checksum(bytes, LABEL_HDR, ck);
	memcpy(bytes + 16, ck, 16);
	CHECK(blk_label_read(e, d, back) == -EINVAL);

	/* Bad labels are refused before anything is written. */
	lb->lb_config_len = BLK_CONFIG_MAX_BYTES + 1;
	CHECK(blk_label_write(e, d, lb) == -EINVAL);
	make_label(lb, 1, "x");
	memset(lb->lb_pool_name, 'a', sizeof(lb->lb_pool_name));
	CHECK(blk_label_write(e, d, lb) == -EINVAL);
	/* A device too small for labels has none. */
	struct blk_dev *tiny = mem_new(BLK_LABEL_BYTES);
	CHECK(blk_label_read(e, tiny, back) == -ENOENT);
	make_label(lb, 1, "x");
	CHECK(blk_label_write(e, tiny, lb) == -EINVAL);
	blk_dev_close(tiny);

	mem_free(old_hdr);
	mem_free(lb);
	mem_free(back);
	blk_engine_destroy(e);
	blk_dev_close(d);
}

/* ---- uberblocks ---- */

static void make_ub(struct blk_uberblock *ub, uint64_t guid, uint64_t txg)
{
	memset(ub, 0, sizeof(*ub));
	ub->ub_txg = txg;
	ub->ub_pool_guid = guid;
	ub->ub_timestamp_ns = clock_realtime_ns();
	ub->ub_nroots = 2;
	struct blk_ptr bp = sample_bp();
	bp.bp_birth_txg = txg;
	ub->ub_roots[0] = bp;
	bp.bp_offset += SECTOR * txg;
	ub->ub_roots[1] = bp;
	for (unsigned i = 0; i < BLK_UB_PAYLOAD_BYTES; i++)
		ub->ub_payload[i] = (uint8_t)(i * 7 + txg);
}

static void test_uberblock_ring(void)
{
	struct blk_engine *e = engine_new(16);
	struct blk_dev *d[3] = {mem_new(4 * MIB), mem_new(4 * MIB), mem_new(6 * MIB)};
	struct blk_vdev *v[2];
	CHECK(blk_vdev_create(e, d, 2, &v[0]) == 0);
	CHECK(blk_vdev_create(e, &d[2], 1, &v[1]) == 0);
	struct blk_uberblock *ub = mem_alloc(sizeof(*ub)), *best = mem_alloc(sizeof(*best));
	const uint64_t guid = 0xfeedface;
	CHECK(blk_uberblock_find_best(e, d[0], guid, best) == -ENOENT);
	for (uint64_t txg = 1; txg <= 40; txg++) {
		make_ub(ub, guid, txg);
		CHECK(blk_uberblock_write(e, v, 2, ub) == 0);
	}
	for (int i = 0; i < 3; i++) {
		CHECK(blk_uberblock_find_best(e, d[i], guid, best) == 0);
		CHECK(best->ub_txg == 40 && best->ub_pool_guid == guid && best->ub_nroots == 2);
		make_ub(ub, guid, 40);
		CHECK(memcmp(best->ub_payload, ub->ub_payload, BLK_UB_PAYLOAD_BYTES) == 0);
		CHECK(memcmp(&best->ub_roots[0], &ub->ub_roots[0], sizeof(struct blk_ptr)) == 0);
		CHECK(memcmp(&best->ub_roots[1], &ub->ub_roots[1], sizeof(struct blk_ptr)) == 0);
		CHECK(blk_ptr_is_hole(&best->ub_roots[2]));
	}
	/* Destroy the newest slot (40 % 32 = 8) in all four labels of d[0]: txg 39 is the best. */
	for (unsigned i = 0; i < 4; i++)
		blk_dev_mem_bytes(d[0])[label_off(4 * MIB, i) + 128 * 1024 + 8 * SECTOR + 100] ^=
		    0x10;
	CHECK(blk_uberblock_find_best(e, d[0], guid, best) == 0 && best->ub_txg == 39);
	/* Corrupt it in three labels only: the fourth copy still gives 40. */
	for (unsigned i = 0; i < 3; i++)
		blk_dev_mem_bytes(d[1])[label_off(4 * MIB, i) + 128 * 1024 + 8 * SECTOR + 1600] ^=
		    0x10;
	CHECK(blk_uberblock_find_best(e, d[1], guid, best) == 0 && best->ub_txg == 40);

	/* Another pool's uberblocks are ignored, even with a higher txg. */
	make_ub(ub, guid + 1, 100);
	CHECK(blk_uberblock_write(e, &v[1], 1, ub) == 0);
	CHECK(blk_uberblock_find_best(e, d[2], guid, best) == 0 && best->ub_txg == 40);
	CHECK(blk_uberblock_find_best(e, d[2], guid + 1, best) == 0 && best->ub_txg == 100);
	CHECK(blk_uberblock_find_best(e, d[2], guid + 2, best) == -ENOENT);

	/* Labels written afterwards leave the ring alone. */
	struct blk_label *lb = mem_alloc(sizeof(*lb));
	make_label(lb, 50, "k=v\n");
	CHECK(blk_label_write(e, d[2], lb) == 0);
	CHECK(blk_uberblock_find_best(e, d[2], guid, best) == 0 && best->ub_txg == 40);
	mem_free(lb);

	/* A write error is reported but the other copies land. */
	blk_dev_inject_errors(d[0], -1, 1);
	make_ub(ub, guid, 41);
	CHECK(blk_uberblock_write(e, v, 2, ub) == -EIO);
	CHECK(blk_uberblock_find_best(e, d[0], guid, best) == 0 && best->ub_txg == 41);
	make_ub(ub, guid, 42);
	ub->ub_nroots = BLK_UB_ROOTS + 1;
	CHECK(blk_uberblock_write(e, v, 2, ub) == -EINVAL);

	mem_free(ub);
	mem_free(best);
	blk_vdev_destroy(v[0]);
	blk_vdev_destroy(v[1]);
	blk_engine_destroy(e);
	for (int i = 0; i < 3; i++)
		blk_dev_close(d[i]);
}

/* ---- the fault leaf ---- */

#define FAULT_BYTES (2 * MIB)

static void write_pattern(struct blk_engine *e, struct blk_dev *d, uint64_t sector, unsigned nsec,
                          uint8_t fill)
{
	uint8_t *buf = blk_buf_alloc(nsec * SECTOR);
	memset(buf, fill, nsec * SECTOR);
	CHECK(blk_write_sync(e, d, sector * SECTOR, buf, nsec * SECTOR) == 0);
	mem_free(buf);
}

/* The fill byte of every sector in [first, first + n) of image, or -1 if a sector is mixed. */
static void sector_fills(struct blk_dev *image, unsigned first, unsigned n, int *fills)
{
	const uint8_t *b = blk_dev_mem_bytes(image);
	for (unsigned s = 0; s < n; s++) {
		const uint8_t *sec = b + (uint64_t)(first + s) * SECTOR;
		fills[s] = sec[0];
		for (unsigned k = 1; k < SECTOR; k++) {
			if (sec[k] != sec[0]) {
				fills[s] = -1;
				break;
			}
		}
	}
}

static bool image_is(struct blk_dev *image, unsigned first, unsigned n, const int *want)
{
	int got[32];
	sector_fills(image, first, n, got);
	return memcmp(got, want, n * sizeof(int)) == 0;
}

static struct blk_dev *image_at(struct blk_dev *f, size_t cut, enum blk_fault_mode mode,
                                uint64_t seed)
{
	struct blk_dev *img = NULL;
	CHECK(blk_fault_image(f, cut, mode, seed, &img) == 0);
	VERIFY(img != NULL);
	CHECK(blk_dev_size(img) == FAULT_BYTES);
	return img;
}

/* The index of the first of the nwant fill patterns that img shows over its first n sectors, or
 * -1 when it shows none of them. */
static int image_which(struct blk_dev *img, unsigned n, const int *const *want, int nwant)
{
	for (int i = 0; i < nwant; i++)
		if (image_is(img, 0, n, want[i]))
			return i;
	return -1;
}

/* Whether the image of f cut at `cut` in mode (seed for the random modes) shows the fills want
 * over its first n sectors. The image is closed again. */
static bool cut_is(struct blk_dev *f, size_t cut, enum blk_fault_mode mode, uint64_t seed,
                   unsigned n, const int *want)
{
	struct blk_dev *img = image_at(f, cut, mode, seed);
	bool is = image_is(img, 0, n, want);
	blk_dev_close(img);
	return is;
}

static void test_fault_images(void)
{
	struct blk_engine *e = engine_new(16);
	struct blk_dev *f;
	CHECK(blk_dev_create_fault(FAULT_BYTES, &f) == 0);
	/* Events: 0 write A (sectors 0..7), 1 flush, 2 write B (sectors 0..7). */
	write_pattern(e, f, 0, 8, 'A');
	CHECK(blk_flush_sync(e, f) == 0);
	write_pattern(e, f, 0, 8, 'B');
	CHECK(blk_fault_event_count(f) == 3);
	CHECK(!blk_fault_event_is_flush(f, 0) && blk_fault_event_is_flush(f, 1) &&
	      !blk_fault_event_is_flush(f, 2));
	CHECK(!blk_fault_event_is_flush(f, 3));
	/* Reads see every completed write. */
	CHECK(blk_dev_mem_bytes(f)[0] == 'B');

	static const int zero8[8] = {0}, a8[8] = {'A', 'A', 'A', 'A', 'A', 'A', 'A', 'A'},
	                 b8[8] = {'B', 'B', 'B', 'B', 'B', 'B', 'B', 'B'};
	for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER; mode++) {
		CHECK(cut_is(f, 0, mode, 1, 8, zero8));
		/* After the flush: A is durable whatever the mode. */
		CHECK(cut_is(f, 2, mode, 1, 8, a8));
	}
	CHECK(cut_is(f, 1, BLK_FAULT_KEEP_ALL, 1, 8, a8));
	CHECK(cut_is(f, 1, BLK_FAULT_DROP_ALL, 1, 8, zero8));
	CHECK(cut_is(f, 3, BLK_FAULT_KEEP_ALL, 1, 8, b8));
	CHECK(cut_is(f, 3, BLK_FAULT_DROP_ALL, 1, 8, a8));

	/* TEAR: each sector is old or new, the new ones a strict prefix; many seeds see several
	 * tear points. DROP_RANDOM: all old or all new, both seen. */
	bool seen_prefix[8] = {false};
	static const int *const old_or_new[2] = {a8, b8};
	bool seen_old_new[2] = {false};
	for (uint64_t seed = 0; seed < 64; seed++) {
		struct blk_dev *img = image_at(f, 3, BLK_FAULT_TEAR, seed);
		int got[8];
		sector_fills(img, 0, 8, got);
		unsigned t = 0;
		while (t < 8 && got[t] == 'B')
			t++;
		for (unsigned s = t; s < 8; s++)
			CHECKF(got[s] == 'A', "seed %llu sector %u is %d", (unsigned long long)seed,
			       s, got[s]);
		CHECK(t < 8);
		if (t < 8)
			seen_prefix[t] = true;
		blk_dev_close(img);
		img = image_at(f, 3, BLK_FAULT_DROP_RANDOM, seed);
		int which = image_which(img, 8, old_or_new, 2);
		if (which >= 0)
			seen_old_new[which] = true;
		else
			CHECKF(false, "DROP_RANDOM seed %llu gave a mixed image",
			       (unsigned long long)seed);
		blk_dev_close(img);
	}
	int tear_points = 0;
	for (int t = 0; t < 8; t++)
		tear_points += seen_prefix[t];
	CHECKF(seen_prefix[0] && tear_points >= 4, "tear points seen: %d", tear_points);
	CHECK(seen_old_new[0] && seen_old_new[1]);
	/* The same seed gives the same image. */
	struct blk_dev *i1 = image_at(f, 3, BLK_FAULT_TEAR, 12345),
	               *i2 = image_at(f, 3, BLK_FAULT_TEAR, 12345);
	CHECK(memcmp(blk_dev_mem_bytes(i1), blk_dev_mem_bytes(i2), FAULT_BYTES) == 0);
	blk_dev_close(i1);
	blk_dev_close(i2);

	/* REORDER: events 3 flush, 4 write C (sectors 0..7), 5 write D (sectors 4..11). Allowed:
	 * neither, C only, D only, C then D, D then C; both orders must show up. */
	CHECK(blk_flush_sync(e, f) == 0);
	write_pattern(e, f, 0, 8, 'C');
	write_pattern(e, f, 4, 8, 'D');
	CHECK(blk_fault_event_count(f) == 6);
	static const int r_none[12] = {'B', 'B', 'B', 'B', 'B', 'B', 'B', 'B', 0, 0, 0, 0};
	static const int r_c[12] = {'C', 'C', 'C', 'C', 'C', 'C', 'C', 'C', 0, 0, 0, 0};
	static const int r_d[12] = {'B', 'B', 'B', 'B', 'D', 'D', 'D', 'D', 'D', 'D', 'D', 'D'};
	static const int r_cd[12] = {'C', 'C', 'C', 'C', 'D', 'D', 'D', 'D', 'D', 'D', 'D', 'D'};
	static const int r_dc[12] = {'C', 'C', 'C', 'C', 'C', 'C', 'C', 'C', 'D', 'D', 'D', 'D'};
	static const int *const allowed[5] = {r_none, r_c, r_d, r_cd, r_dc};
	bool seen[5] = {false};
	for (uint64_t seed = 0; seed < 128; seed++) {
		struct blk_dev *img = image_at(f, 6, BLK_FAULT_REORDER, seed);
		int which = image_which(img, 12, allowed, 5);
		if (which >= 0)
			seen[which] = true;
		else
			CHECKF(false, "REORDER seed %llu gave a disallowed image",
			       (unsigned long long)seed);
		blk_dev_close(img);
	}
	CHECK(seen[0] && seen[1] && seen[2] && seen[3] && seen[4]);
	CHECK(cut_is(f, 6, BLK_FAULT_KEEP_ALL, 0, 12, r_cd));

	/* Trim folds everything up to the last flush into the base; images stay the same. */
	CHECK(cut_is(f, 6, BLK_FAULT_DROP_ALL, 0, 12, r_none));
	blk_fault_trim(f);
	CHECK(blk_fault_event_count(f) == 2);
	CHECK(!blk_fault_event_is_flush(f, 0) && !blk_fault_event_is_flush(f, 1));
	CHECK(cut_is(f, 0, BLK_FAULT_KEEP_ALL, 0, 12, r_none));
	CHECK(cut_is(f, 2, BLK_FAULT_KEEP_ALL, 0, 12, r_cd));
	CHECK(cut_is(f, 1, BLK_FAULT_KEEP_ALL, 0, 12, r_c));
	CHECK(blk_flush_sync(e, f) == 0);
	blk_fault_trim(f);
	CHECK(blk_fault_event_count(f) == 0);
	struct blk_dev *img = image_at(f, 0, BLK_FAULT_DROP_ALL, 0);
	CHECK(memcmp(blk_dev_mem_bytes(img), blk_dev_mem_bytes(f), FAULT_BYTES) == 0);
	blk_dev_close(img);
	blk_fault_trim(f); /* nothing to trim: harmless */
	CHECK(blk_fault_event_count(f) == 0);

	/* Bad cuts and devices. */
	struct blk_dev *none = (struct blk_dev *)1;
	CHECK(blk_fault_image(f, 1, BLK_FAULT_KEEP_ALL, 0, &none) == -EINVAL && none == NULL);
	CHECK(blk_fault_image(f, 0, (enum blk_fault_mode)9, 0, &none) == -EINVAL);
	struct blk_dev *m = mem_new(FAULT_BYTES);
	CHECK(blk_fault_image(m, 0, BLK_FAULT_KEEP_ALL, 0, &none) == -EINVAL);
	blk_dev_close(m);
	/* Failed writes are not recorded. */
	blk_dev_inject_errors(f, -1, 1);
	uint8_t *buf = blk_buf_alloc(SECTOR);
	CHECK(blk_write_sync(e, f, 0, buf, SECTOR) == -EIO);
	CHECK(blk_fault_event_count(f) == 0);
	mem_free(buf);

	blk_engine_destroy(e);
	blk_dev_close(f);
}

/* ---- concurrency and draining ---- */

#define CIO_SLOTS 500
#define CIO_SLOT_SECTORS 4

struct cio_thread {
	struct blk_engine *ct_engine;
	struct blk_dev *ct_dev;
	uint64_t ct_first_sector;
	uint64_t ct_seed;
	pthread_mutex_t ct_lock;
	pthread_cond_t ct_cond;
	unsigned ct_remaining;
	atomic_int ct_errors;
	atomic_int ct_wrong_thread;
	pthread_t ct_self;
	bool ct_ok;
};

static void cio_done(struct blk_io *io)
{
	struct cio_thread *t = io->bi_arg;
	if (io->bi_status != 0)
		atomic_fetch_add(&t->ct_errors, 1);
	if (pthread_equal(pthread_self(), t->ct_self))
		atomic_fetch_add(&t->ct_wrong_thread, 1);
	pthread_mutex_lock(&t->ct_lock);
	if (--t->ct_remaining == 0)
		pthread_cond_signal(&t->ct_cond);
	pthread_mutex_unlock(&t->ct_lock);
}

static void cio_wait(struct cio_thread *t)
{
	pthread_mutex_lock(&t->ct_lock);
	while (t->ct_remaining > 0)
		pthread_cond_wait(&t->ct_cond, &t->ct_lock);
	pthread_mutex_unlock(&t->ct_lock);
}

static void *cio_main(void *arg)
{
	struct cio_thread *t = arg;
	t->ct_self = pthread_self();
	size_t slot_bytes = CIO_SLOT_SECTORS * SECTOR;
	uint8_t *wbuf = blk_buf_alloc(CIO_SLOTS * slot_bytes),
	        *rbuf = blk_buf_alloc(CIO_SLOTS * slot_bytes);
	struct blk_io *ios = mem_zalloc(CIO_SLOTS * sizeof(*ios));
	unsigned order[CIO_SLOTS], len_sectors[CIO_SLOTS];
	uint64_t s = t->ct_seed;
	for (unsigned i = 0; i < CIO_SLOTS; i++) {
		order[i] = i;
		len_sectors[i] = 1 + (unsigned)(rng_next(&s) % CIO_SLOT_SECTORS);
	}
	for (unsigned i = CIO_SLOTS; i > 1; i--) {
		unsigned j = (unsigned)(rng_next(&s) % i), x = order[i - 1];
		order[i - 1] = order[j];
		order[j] = x;
	}
	fill_random(wbuf, CIO_SLOTS * slot_bytes, t->ct_seed);
	/* Writes of random slots in random order, all in flight together. */
	t->ct_remaining = CIO_SLOTS;
	for (unsigned k = 0; k < CIO_SLOTS; k++) {
		unsigned i = order[k];
		ios[i] = (struct blk_io){
		    .bi_op = BLK_IO_WRITE,
		    .bi_dev = t->ct_dev,
		    .bi_offset = (t->ct_first_sector + (uint64_t)i * CIO_SLOT_SECTORS) * SECTOR,
		    .bi_buf = wbuf + i * slot_bytes,
		    .bi_len = len_sectors[i] * SECTOR,
		    .bi_done = cio_done,
		    .bi_arg = t};
		blk_submit(t->ct_engine, &ios[i]);
	}
	cio_wait(t);
	t->ct_remaining = CIO_SLOTS;
	for (unsigned k = 0; k < CIO_SLOTS; k++) {
		unsigned i = order[CIO_SLOTS - 1 - k];
		ios[i].bi_op = BLK_IO_READ;
		ios[i].bi_buf = rbuf + i * slot_bytes;
		blk_submit(t->ct_engine, &ios[i]);
	}
	cio_wait(t);
	t->ct_ok = true;
	for (unsigned i = 0; i < CIO_SLOTS; i++) {
		if (memcmp(wbuf + i * slot_bytes, rbuf + i * slot_bytes, len_sectors[i] * SECTOR) !=
		    0)
			t->ct_ok = false;
	}
	mem_free(ios);
	mem_free(wbuf);
	mem_free(rbuf);
	return NULL;
}

static void concurrent_on(struct blk_engine *e, struct blk_dev *d)
{
	struct cio_thread t[2];
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].ct_engine = e;
		t[i].ct_dev = d;
		t[i].ct_first_sector = (uint64_t)i * CIO_SLOTS * CIO_SLOT_SECTORS + 8;
		t[i].ct_seed = 1000 + (uint64_t)i;
		VERIFY(pthread_mutex_init(&t[i].ct_lock, NULL) == 0);
		VERIFY(pthread_cond_init(&t[i].ct_cond, NULL) == 0);
		VERIFY(pthread_create(&th[i], NULL, cio_main, &t[i]) == 0);
	}
	for (int i = 0; i < 2; i++) {
		VERIFY(pthread_join(th[i], NULL) == 0);
		CHECK(t[i].ct_ok);
		CHECK(atomic_load(&t[i].ct_errors) == 0);
		CHECK(atomic_load(&t[i].ct_wrong_thread) == 0); /* bi_done never on the submitter */
		pthread_cond_destroy(&t[i].ct_cond);
		pthread_mutex_destroy(&t[i].ct_lock);
	}
}

static void test_concurrent_io(void)
{
	/* A small queue depth so most file ios wait in the backlog for a ring slot. */
	struct blk_engine *e = engine_new(8);
	struct blk_dev *m = mem_new(16 * MIB);
	concurrent_on(e, m);
	on_file(e, "concurrent.img", 16 * MIB, concurrent_on);
	blk_engine_destroy(e);
	/* The fallback path, same workload. */
	e = engine_new_fallback(8);
	on_file(e, "concurrent.img", 0, concurrent_on);
	blk_engine_destroy(e);
	blk_dev_close(m);
	CHECK(tmp_unlink("concurrent.img"));
}

struct drain_state {
	struct blk_engine *ds_engine;
	atomic_int ds_done;
	atomic_int ds_chained;
	atomic_int ds_errors;
	atomic_int ds_nested;
	atomic_int ds_deadlock_ok;
	bool ds_in_callback;
	struct blk_io ds_chain_io;
};

static void drain_chain_done(struct blk_io *io)
{
	struct drain_state *ds = io->bi_arg;
	if (ds->ds_in_callback)
		atomic_fetch_add(&ds->ds_nested, 1); /* ran inside the callback that submitted it */
	if (io->bi_status != 0)
		atomic_fetch_add(&ds->ds_errors, 1);
	atomic_fetch_add(&ds->ds_chained, 1);
}

static void drain_done(struct blk_io *io)
{
	struct drain_state *ds = io->bi_arg;
	ds->ds_in_callback = true;
	if (io->bi_status != 0)
		atomic_fetch_add(&ds->ds_errors, 1);
	if (atomic_fetch_add(&ds->ds_done, 1) == 0) {
		/* The first callback submits more work during the drain, and checks that the
		 * synchronous wrappers refuse to deadlock on the engine thread. */
		ds->ds_chain_io = (struct blk_io){.bi_op = BLK_IO_FLUSH,
		                                  .bi_dev = io->bi_dev,
		                                  .bi_done = drain_chain_done,
		                                  .bi_arg = ds};
		blk_submit(ds->ds_engine, &ds->ds_chain_io);
		uint8_t *b = io->bi_buf;
		if (blk_read_sync(ds->ds_engine, io->bi_dev, 0, b, SECTOR) == -EDEADLK &&
		    blk_flush_sync(ds->ds_engine, io->bi_dev) == -EDEADLK)
			atomic_fetch_add(&ds->ds_deadlock_ok, 1);
	}
	ds->ds_in_callback = false;
}

static void drain_on(struct blk_dev *d, bool fallback)
{
	enum { N = 200 };
	struct drain_state ds = {0};
	ds.ds_engine = fallback ? engine_new_fallback(8) : engine_new(8);
	uint8_t *buf = blk_buf_alloc(N * 16384);
	struct blk_io *ios = mem_zalloc(N * sizeof(*ios));
	fill_random(buf, N * 16384, 3);
	for (int i = 0; i < N; i++) {
		ios[i] = (struct blk_io){.bi_op = BLK_IO_WRITE,
		                         .bi_dev = d,
		                         .bi_offset = (uint64_t)i * 16384,
		                         .bi_buf = buf + i * 16384,
		                         .bi_len = 16384,
		                         .bi_done = drain_done,
		                         .bi_arg = &ds};
		blk_submit(ds.ds_engine, &ios[i]);
	}
	blk_engine_destroy(ds.ds_engine); /* with most of them still in flight */
	CHECK(atomic_load(&ds.ds_done) == N);
	CHECK(atomic_load(&ds.ds_chained) == 1);
	CHECK(atomic_load(&ds.ds_errors) == 0);
	CHECK(atomic_load(&ds.ds_nested) == 0);
	CHECK(atomic_load(&ds.ds_deadlock_ok) == 1);
	mem_free(ios);
	mem_free(buf);
}

static void test_engine_drain(void)
{
	struct blk_dev *m = mem_new(8 * MIB);
	drain_on(m, false);
	blk_dev_close(m);
	char path[512];
	tmp_path(path, sizeof(path), "drain.img");
	struct blk_dev *f = NULL;
	CHECK(blk_dev_open_file(path, 8 * MIB, &f) == 0);
	if (f) {
		drain_on(f, false);
		drain_on(f, true);
		blk_dev_close(f);
	}
	CHECK(unlink(path) == 0);
	/* An idle engine stops at once, many times over. */
	for (int i = 0; i < 20; i++)
		blk_engine_destroy(engine_new(4));
}

/* ---- short transfers ---- */

static void short_on(struct blk_engine *e, const char *name)
{
	char path[512];
	tmp_path(path, sizeof(path), name);
	struct blk_dev *f = NULL;
	CHECK(blk_dev_open_file(path, 4 * MIB, &f) == 0);
	if (!f)
		return;
	/* Requests split in 8 KiB pieces: a 200 KiB transfer is continued 24 times. */
	blk_engine_set_max_transfer(e, 8192);
	uint32_t len = 200 * 1024;
	uint8_t *buf = blk_buf_alloc(len), *back = blk_buf_alloc(len);
	fill_random(buf, len, 77);
	CHECK(blk_write_sync(e, f, MIB, buf, len) == 0);
	CHECK(blk_read_sync(e, f, MIB, back, len) == 0);
	CHECK(memcmp(buf, back, len) == 0);
	blk_engine_set_max_transfer(e, UINT32_MAX / BLK_SECTOR_BYTES * BLK_SECTOR_BYTES);

	/* The file shrinks behind the pool's back: a read that runs into its end is -EIO, whether
	 * the end is on a sector boundary or inside a sector. */
	uint64_t size = blk_dev_size(f);
	CHECK(blk_write_sync(e, f, size - 3 * SECTOR, buf, 3 * SECTOR) == 0);
	CHECK(truncate(path, (off_t)(size - 2 * SECTOR)) == 0);
	CHECK(blk_read_sync(e, f, size - 3 * SECTOR, back, 3 * SECTOR) == -EIO);
	CHECK(blk_read_sync(e, f, size - 3 * SECTOR, back, SECTOR) == 0 &&
	      memcmp(back, buf, SECTOR) == 0);
	CHECK(truncate(path, (off_t)(size - 2 * SECTOR - 1000)) == 0);
	CHECK(blk_read_sync(e, f, size - 3 * SECTOR, back, 3 * SECTOR) == -EIO);
	CHECK(blk_read_sync(e, f, size - 3 * SECTOR, back, 2 * SECTOR) == -EIO);
	mem_free(buf);
	mem_free(back);
	blk_dev_close(f);
	CHECK(unlink(path) == 0);
}

static void test_short_transfers(void)
{
	struct blk_engine *e = engine_new(8);
	if (!blk_engine_uses_uring(e))
		printf("# io_uring is not available here: the first engine runs on the fallback "
		       "too\n");
	short_on(e, "short-uring.img");
	blk_engine_destroy(e);
	e = engine_new_fallback(8);
	CHECK(!blk_engine_uses_uring(e));
	short_on(e, "short-fallback.img");
	blk_engine_destroy(e);
}

/* ---- hostile arguments ---- */

static void hostile_on(struct blk_engine *e, struct blk_dev *d)
{
	uint8_t *buf = blk_buf_alloc(4 * SECTOR);
	uint64_t size = blk_dev_size(d);
	CHECK(blk_read_sync(e, d, 512, buf, SECTOR) == -EINVAL);    /* offset */
	CHECK(blk_read_sync(e, d, 0, buf, 1000) == -EINVAL);        /* length */
	CHECK(blk_write_sync(e, d, 0, buf + 8, SECTOR) == -EINVAL); /* buffer */
	CHECK(blk_write_sync(e, d, 0, buf, 0) == -EINVAL);          /* empty */
	CHECK(blk_read_sync(e, d, size, buf, SECTOR) == -EINVAL);   /* past the end */
	CHECK(blk_read_sync(e, d, size - SECTOR, buf, 2 * SECTOR) == -EINVAL);
	CHECK(blk_read_sync(e, d, UINT64_MAX - SECTOR + 1, buf, SECTOR) == -EINVAL); /* wraps */
	CHECK(blk_read_sync(e, d, 0, NULL, SECTOR) == -EINVAL);
	CHECK(blk_read_sync(e, NULL, 0, buf, SECTOR) == -EINVAL);
	struct blk_io io = {
	    .bi_op = (enum blk_io_op)7, .bi_dev = d, .bi_buf = buf, .bi_len = SECTOR};
	CHECK(blk_io_sync(e, &io) == -EINVAL);
	/* Still working afterwards. */
	memset(buf, 0x5a, SECTOR);
	CHECK(blk_write_sync(e, d, size - SECTOR, buf, SECTOR) == 0);
	memset(buf, 0, SECTOR);
	CHECK(blk_read_sync(e, d, size - SECTOR, buf, SECTOR) == 0 && buf[SECTOR - 1] == 0x5a);
	mem_free(buf);
}

/* Copies good to *b and spoils it in the i-th way a block read must refuse (-EINVAL); false
 * past the last way. */
static bool spoil_ptr(unsigned i, const struct blk_ptr *good, uint64_t data_end, struct blk_ptr *b)
{
	*b = *good;
	switch (i) {
	case 0:
		b->bp_psize = 2 * SECTOR; /* more than its asize */
		return true;
	case 1:
		b->bp_offset = 0; /* the front label area */
		return true;
	case 2:
		b->bp_offset = data_end - SECTOR; /* runs past the data area */
		b->bp_asize = 2 * SECTOR;
		return true;
	case 3: b->bp_compress = 7; return true;
	case 4: b->bp_lsize = 2 * BLK_MAX_BLOCK_BYTES; return true;
	default: return false;
	}
}

static void block_done_count(void *arg, int status)
{
	atomic_int *n = arg;
	atomic_fetch_add(n, status == -ENOMEM ? 1 : 1000);
}

static void test_hostile_arguments(void)
{
	struct blk_engine *e = engine_new(8);
	struct blk_dev *m = mem_new(4 * MIB);
	hostile_on(e, m);
	on_file(e, "hostile.img", 4 * MIB, hostile_on);
	CHECK(tmp_unlink("hostile.img"));
	char path[512];
	struct blk_dev *f = NULL;
	tmp_path(path, sizeof(path), "missing.img");
	CHECK(blk_dev_open_file(path, 0, &f) == -ENOENT && f == NULL);
	CHECK(blk_dev_open_file(tmp_dir, 0, &f) != 0 && f == NULL); /* a directory */

	/* Leaves and vdevs that cannot be. */
	struct blk_dev *bad = (struct blk_dev *)1;
	CHECK(blk_dev_create_mem(1000, &bad) == -EINVAL && bad == NULL);
	CHECK(blk_dev_create_mem(0, &bad) == -EINVAL);
	struct blk_dev *small = mem_new(BLK_LABEL_BYTES * 4 + BLK_LABEL_BYTES * 3); /* < 2 MiB */
	struct blk_vdev *v = NULL;
	CHECK(blk_vdev_create(e, &small, 1, &v) == -EINVAL && v == NULL);
	struct blk_dev *twice[2] = {m, m};
	CHECK(blk_vdev_create(e, twice, 2, &v) == -EINVAL);
	struct blk_dev *many[BLK_MIRROR_MAX + 1] = {0};
	CHECK(blk_vdev_create(e, many, BLK_MIRROR_MAX + 1, &v) == -EINVAL);
	CHECK(blk_vdev_create(e, &m, 0, &v) == -EINVAL);
	blk_dev_close(small);

	/* Raw vdev I/O outside the data area, and block pointers that say nonsense. */
	CHECK(blk_vdev_create(e, &m, 1, &v) == 0);
	uint8_t *buf = blk_buf_alloc(SECTOR);
	struct blk_vdev_io vio = {
	    .vi_op = BLK_IO_WRITE, .vi_vdev = v, .vi_offset = 0, .vi_buf = buf, .vi_len = SECTOR};
	CHECK(blk_vdev_io_sync(&vio) == -EINVAL); /* the front label area */
	vio.vi_offset = blk_vdev_data_start(v) + blk_vdev_data_bytes(v);
	CHECK(blk_vdev_io_sync(&vio) == -EINVAL); /* the back label area */
	vio.vi_offset = blk_vdev_data_start(v) + 1;
	CHECK(blk_vdev_io_sync(&vio) == -EINVAL); /* misaligned */
	vio.vi_op = (enum blk_io_op)9;
	vio.vi_offset = blk_vdev_data_start(v);
	CHECK(blk_vdev_io_sync(&vio) == -EINVAL);
	vio.vi_op = BLK_IO_READ;
	CHECK(blk_vdev_io_sync(&vio) == 0);

	uint8_t *out = mem_alloc(BLK_MAX_BLOCK_BYTES);
	struct blk_ptr bp = {.bp_offset = blk_vdev_data_start(v),
	                     .bp_asize = SECTOR,
	                     .bp_psize = SECTOR,
	                     .bp_lsize = SECTOR,
	                     .bp_checksum = BLK_CHECKSUM_XXH3_128,
	                     .bp_birth_txg = 1};
	struct blk_ptr b;
	uint64_t data_end = blk_vdev_data_start(v) + blk_vdev_data_bytes(v);
	for (unsigned i = 0; spoil_ptr(i, &bp, data_end, &b); i++)
		CHECKF(blk_block_read_sync(v, &b, out) == -EINVAL, "spoilt pointer %u", i);
	CHECK(blk_block_read_sync(v, &bp, out) == -EIO); /* zeros on disk: the checksum fails */
	struct blk_ptr hole = {0};
	CHECK(blk_block_read_sync(v, &hole, out) == 0);

	/* Allocation failures become -ENOMEM, reported on the engine thread. */
	struct blk_prepared p;
	mem_fail_after(0);
	CHECK(blk_prepare(buf, SECTOR, BLK_COMPRESS_OFF, &p) == -ENOMEM);
	mem_fail_after(0);
	CHECK(blk_block_read_sync(v, &bp, out) == -ENOMEM);
	mem_fail_after(1); /* the context succeeds, the bounce buffer fails */
	CHECK(blk_block_read_sync(v, &bp, out) == -ENOMEM);
	mem_fail_after(-1);
	CHECK(blk_prepare(buf, 0, BLK_COMPRESS_OFF, &p) == -EINVAL);
	CHECK(blk_prepare(buf, BLK_MAX_BLOCK_BYTES + 1, BLK_COMPRESS_OFF, &p) == -EINVAL);
	CHECK(blk_prepare(buf, SECTOR, (enum blk_compress)5, &p) == -EINVAL);
	CHECK(blk_prepare(buf, SECTOR, BLK_COMPRESS_OFF, &p) == 0);
	b = bp;
	b.bp_asize = 2 * SECTOR; /* does not match the prepared block */
	CHECK(blk_block_write_sync(v, &b, &p) == -EINVAL);
	b = bp;
	b.bp_offset = 0;
	CHECK(blk_block_write_sync(v, &b, &p) == -EINVAL);
	atomic_int count = 0;
	mem_fail_after(0);
	blk_block_write(v, &bp, &p, false, block_done_count, &count);
	mem_fail_after(-1);
	struct blk_vdev_io fl = {.vi_op = BLK_IO_FLUSH, .vi_vdev = v};
	CHECK(blk_vdev_io_sync(&fl) == 0); /* a round trip through the engine thread */
	CHECK(atomic_load(&count) == 1);
	blk_prepared_fini(&p);

	mem_free(out);
	mem_free(buf);
	blk_vdev_destroy(v);
	blk_engine_destroy(e);
	blk_dev_close(m);
}

/* ---- one instant across several fault leaves ---- */

/* Events of two fault leaves interleave in one process-wide order; cutting both at the same
 * global number gives the images of one moment, also after a trim of one of them. */
/* A file leaf is locked while open: a second open (here, in the same process; another process
 * alike) is refused with -EBUSY, and the leaf opens again once closed. */
static void test_file_lock(void)
{
	char path[300];
	tmp_path(path, sizeof(path), "locked.img");
	struct blk_dev *a = NULL, *b = NULL;
	CHECK(blk_dev_open_file(path, 4u << 20, &a) == 0);
	CHECK(blk_dev_open_file(path, 0, &b) == -EBUSY && b == NULL);
	blk_dev_close(a);
	CHECK(blk_dev_open_file(path, 0, &b) == 0);
	blk_dev_close(b);
	CHECK(unlink(path) == 0);
}

/* A leaf opened read only: readers share it and a writer is refused (and the other way round);
 * it reads, refuses every write and flush with -EROFS, and its bytes stay as they were. */
static void test_file_read_only(void)
{
	char path[300];
	tmp_path(path, sizeof(path), "ro.img");
	struct blk_engine *e = engine_new(8);
	struct blk_dev *w = NULL, *r1 = NULL, *r2 = NULL;
	CHECK(blk_dev_open_file(path, 4u << 20, &w) == 0);
	if (!w)
		goto out;
	CHECK(!blk_dev_read_only(w));
	write_pattern(e, w, 8, 2, 0x5a);
	CHECK(blk_dev_open_file_read_only(path, &r1) == -EBUSY && r1 == NULL);
	blk_dev_close(w);
	CHECK(blk_dev_open_file_read_only(path, &r1) == 0);
	CHECK(blk_dev_open_file_read_only(path, &r2) == 0);
	CHECK(blk_dev_open_file(path, 0, &w) == -EBUSY && w == NULL);
	if (r1 && r2) {
		CHECK(blk_dev_read_only(r1) && blk_dev_size(r1) == blk_dev_size(r2));
		uint8_t *buf = blk_buf_alloc(2 * SECTOR);
		CHECK(blk_read_sync(e, r2, 8 * SECTOR, buf, 2 * SECTOR) == 0);
		CHECK(buf[0] == 0x5a && buf[2 * SECTOR - 1] == 0x5a);
		memset(buf, 0xa5, 2 * SECTOR);
		CHECK(blk_write_sync(e, r1, 8 * SECTOR, buf, 2 * SECTOR) == -EROFS);
		CHECK(blk_flush_sync(e, r1) == -EROFS);
		CHECK(blk_read_sync(e, r1, 8 * SECTOR, buf, 2 * SECTOR) == 0);
		CHECK(buf[0] == 0x5a && buf[2 * SECTOR - 1] == 0x5a);
		mem_free(buf);
	}
	struct blk_dev *bad = NULL;
	CHECK(blk_dev_open_file_read_only(tmp_dir, &bad) != 0 && bad == NULL); /* a directory */
	blk_dev_close(r1);
	blk_dev_close(r2);
	CHECK(unlink(path) == 0);
out:
	blk_engine_destroy(e);
}

/* Background ios yield (blk_engine.c, rule 6): a read submitted right after 200 background
 * writes is served before most of them, since at most a few of those are in the ring at once. */
static struct {
	atomic_int bg_done;
	atomic_int fg_done;
	atomic_int bg_done_at_fg; /* background writes complete when the read completed */
	atomic_int errors;
} yield;

static void yield_bg_done(struct blk_io *io)
{
	if (io->bi_status != 0)
		atomic_fetch_add(&yield.errors, 1);
	atomic_fetch_add(&yield.bg_done, 1);
}

static void yield_fg_done(struct blk_io *io)
{
	if (io->bi_status != 0)
		atomic_fetch_add(&yield.errors, 1);
	atomic_store(&yield.bg_done_at_fg, atomic_load(&yield.bg_done));
	atomic_fetch_add(&yield.fg_done, 1);
}

static void test_background_yields(void)
{
	enum { NBG = 200, BG_BYTES = 64 * 1024 };
	struct blk_engine *e = engine_new(64);
	/* The fallback serves ios one by one, in order: only io_uring has a ring to share. */
	CHECKF(blk_engine_uses_uring(e), "io_uring is needed to test background ios");
	if (!blk_engine_uses_uring(e)) {
		blk_engine_destroy(e);
		return;
	}
	char path[300];
	tmp_path(path, sizeof(path), "yield.img");
	struct blk_dev *d = NULL;
	CHECK(blk_dev_open_file(path, (uint64_t)NBG * BG_BYTES + MIB, &d) == 0);
	memset(&yield, 0, sizeof(yield));
	uint8_t *wbuf = blk_buf_alloc(BG_BYTES), *rbuf = blk_buf_alloc(SECTOR);
	memset(wbuf, 0x5a, BG_BYTES);
	struct blk_io *ios = mem_zalloc((NBG + 1) * sizeof(*ios));
	VERIFY(ios);
	for (unsigned i = 0; i < NBG; i++) {
		ios[i] = (struct blk_io){.bi_op = BLK_IO_WRITE, .bi_dev = d,
		                         .bi_offset = (uint64_t)i * BG_BYTES, .bi_buf = wbuf,
		                         .bi_len = BG_BYTES, .bi_done = yield_bg_done,
		                         .bi_background = true};
		blk_submit(e, &ios[i]);
	}
	ios[NBG] = (struct blk_io){.bi_op = BLK_IO_READ, .bi_dev = d,
	                           .bi_offset = (uint64_t)NBG * BG_BYTES, .bi_buf = rbuf,
	                           .bi_len = SECTOR, .bi_done = yield_fg_done};
	blk_submit(e, &ios[NBG]);
	for (int spins = 0; spins < 30000 && (atomic_load(&yield.bg_done) < NBG ||
	                                      atomic_load(&yield.fg_done) < 1); spins++)
		usleep(1000);
	CHECK(atomic_load(&yield.bg_done) == NBG && atomic_load(&yield.fg_done) == 1);
	CHECK(atomic_load(&yield.errors) == 0);
	CHECKF(atomic_load(&yield.bg_done_at_fg) < NBG / 4,
	       "%d of %d background writes were done before the read",
	       atomic_load(&yield.bg_done_at_fg), NBG);
	blk_engine_destroy(e);
	blk_dev_close(d);
	mem_free(ios);
	mem_free(wbuf);
	mem_free(rbuf);
	CHECK(unlink(path) == 0);
}

/* A file the pool creates is written with zeros throughout (blk_dev.c): no hole, no unwritten
 * extent (where the file system can tell, through FIEMAP), and it reads as zeros. */
static void test_file_created_written(void)
{
	char path[300];
	tmp_path(path, sizeof(path), "zeroed.img");
	struct blk_dev *d = NULL;
	const uint64_t size = 6u << 20;
	CHECK(blk_dev_open_file(path, size, &d) == 0);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	enum { MAX_EXTENTS = 64 };
	struct fiemap *fm = mem_zalloc(sizeof(*fm) + MAX_EXTENTS * sizeof(struct fiemap_extent));
	VERIFY(fm);
	fm->fm_length = FIEMAP_MAX_OFFSET;
	fm->fm_flags = FIEMAP_FLAG_SYNC;
	fm->fm_extent_count = MAX_EXTENTS;
	if (ioctl(fd, FS_IOC_FIEMAP, fm) == 0) {
		uint64_t mapped = 0;
		unsigned unwritten = 0;
		for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
			mapped += fm->fm_extents[i].fe_length;
			unwritten += (fm->fm_extents[i].fe_flags & FIEMAP_EXTENT_UNWRITTEN) != 0;
		}
		CHECKF(unwritten == 0, "%u unwritten extents", unwritten);
		CHECKF(fm->fm_mapped_extents == MAX_EXTENTS || mapped >= size,
		       "%llu of %llu bytes mapped", (unsigned long long)mapped,
		       (unsigned long long)size);
	} else {
		CHECK(errno == EOPNOTSUPP || errno == ENOTTY); /* a file system without FIEMAP */
	}
	mem_free(fm);
	char *buf = mem_alloc(size);
	VERIFY(buf);
	CHECK(pread(fd, buf, size, 0) == (ssize_t)size);
	size_t nonzero = 0;
	for (size_t i = 0; i < size; i++)
		nonzero += buf[i] != 0;
	CHECK(nonzero == 0);
	mem_free(buf);
	close(fd);
	blk_dev_close(d);
	CHECK(unlink(path) == 0);
}

static void test_fault_global_order(void)
{
	struct blk_engine *e = engine_new(16);
	struct blk_dev *a, *b;
	CHECK(blk_dev_create_fault(FAULT_BYTES, &a) == 0);
	CHECK(blk_dev_create_fault(FAULT_BYTES, &b) == 0);
	uint64_t g0 = blk_fault_global_seq();
	CHECK(blk_fault_events_before(a, g0) == 0 && blk_fault_events_before(b, g0) == 0);
	/* a: write 'A' (g0), flush (g0+2); b: write 'B' (g0+1), flush (g0+3); a: write 'C' (g0+4). */
	write_pattern(e, a, 0, 2, 'A');
	write_pattern(e, b, 0, 2, 'B');
	CHECK(blk_flush_sync(e, a) == 0);
	CHECK(blk_flush_sync(e, b) == 0);
	write_pattern(e, a, 0, 2, 'C');
	CHECK(blk_fault_global_seq() == g0 + 5);
	static const size_t want_a[] = {0, 1, 1, 2, 2, 3}, want_b[] = {0, 0, 1, 1, 2, 2};
	for (uint64_t k = 0; k <= 5; k++) {
		CHECKF(blk_fault_events_before(a, g0 + k) == want_a[k], "a at +%llu: %zu",
		       (unsigned long long)k, blk_fault_events_before(a, g0 + k));
		CHECKF(blk_fault_events_before(b, g0 + k) == want_b[k], "b at +%llu: %zu",
		       (unsigned long long)k, blk_fault_events_before(b, g0 + k));
	}
	CHECK(blk_fault_events_before(a, UINT64_MAX) == 3);
	/* The instant after b's flush: both flushed writes durable, 'C' not yet issued. */
	static const int a8[2] = {'A', 'A'}, b8[2] = {'B', 'B'};
	struct blk_dev *ia = image_at(a, blk_fault_events_before(a, g0 + 4), BLK_FAULT_DROP_ALL, 1);
	struct blk_dev *ib = image_at(b, blk_fault_events_before(b, g0 + 4), BLK_FAULT_DROP_ALL, 1);
	CHECK(image_is(ia, 0, 2, a8) && image_is(ib, 0, 2, b8));
	blk_dev_close(ia);
	blk_dev_close(ib);
	/* A trim renumbers a leaf's indexes, not its global numbers. */
	blk_fault_trim(a);
	CHECK(blk_fault_event_count(a) == 1);
	CHECK(blk_fault_events_before(a, g0 + 4) == 0 && blk_fault_events_before(a, g0 + 5) == 1);
	blk_engine_destroy(e);
	blk_dev_close(a);
	blk_dev_close(b);
}

/* ---- aggregation of contiguous background writes (blk_engine.c, rule 8) ---- */

#define AGG_WRITES 80u

struct agg_run {
	struct blk_engine *ar_engine;
	struct blk_dev *ar_dev;
	uint8_t *ar_data;               /* AGG_WRITES sectors */
	struct blk_io ar_ios[AGG_WRITES];
	atomic_uint ar_pending; /* writes (and the trigger) not yet completed */
	atomic_int ar_status;   /* the first error */
	uint64_t ar_base;
};

static void agg_write_done(struct blk_io *io)
{
	struct agg_run *ar = io->bi_arg;
	int none = 0;
	if (io->bi_status != 0)
		(void)atomic_compare_exchange_strong(&ar->ar_status, &none, io->bi_status);
	atomic_fetch_sub(&ar->ar_pending, 1);
}

/* Runs on the engine thread: every write is queued before the engine looks at its queue again,
 * so all of them wait in the background backlog together, as a txg's write-out does. They are
 * submitted in a shuffled order within each 16 (the engine finds a continuation a few places
 * further on), on one file. */
static void agg_submit_all(struct blk_io *trigger)
{
	struct agg_run *ar = trigger->bi_arg;
	for (unsigned i = 0; i < AGG_WRITES; i++) {
		unsigned k = (i & ~15u) | ((i * 7u) & 15u);
		ar->ar_ios[k] = (struct blk_io){.bi_op = BLK_IO_WRITE,
		                                .bi_dev = ar->ar_dev,
		                                .bi_offset = ar->ar_base + (uint64_t)k * SECTOR,
		                                .bi_buf = ar->ar_data + (size_t)k * SECTOR,
		                                .bi_len = SECTOR,
		                                .bi_done = agg_write_done,
		                                .bi_arg = ar,
		                                .bi_background = true};
		blk_submit(ar->ar_engine, &ar->ar_ios[k]);
	}
	agg_write_done(trigger);
}

/* Writes AGG_WRITES contiguous sectors at base through the engine's backlog; returns the first
 * error (0) and checks the bytes read back. */
static int agg_write_all(struct blk_engine *e, struct blk_dev *f, uint64_t base, uint64_t seed)
{
	struct agg_run *ar = mem_zalloc(sizeof(*ar));
	ar->ar_engine = e;
	ar->ar_dev = f;
	ar->ar_base = base;
	ar->ar_data = blk_buf_alloc(AGG_WRITES * SECTOR);
	fill_random(ar->ar_data, AGG_WRITES * SECTOR, seed);
	atomic_init(&ar->ar_pending, AGG_WRITES + 1);
	atomic_init(&ar->ar_status, 0);
	struct blk_io trigger = {.bi_op = BLK_IO_FLUSH, .bi_dev = f, .bi_done = agg_submit_all,
	                         .bi_arg = ar};
	blk_submit(e, &trigger);
	/* A blk_batch cannot be filled from the engine thread; a counter and a poll will do. */
	for (int i = 0; i < 5000 && atomic_load(&ar->ar_pending) > 0; i++)
		usleep(1000);
	if (atomic_load(&ar->ar_pending) > 0)
		return -ETIMEDOUT; /* ar stays allocated: the engine may still write to it */
	int rc = atomic_load(&ar->ar_status);
	uint8_t *back = blk_buf_alloc(AGG_WRITES * SECTOR);
	CHECK(blk_read_sync(e, f, base, back, AGG_WRITES * SECTOR) == 0);
	CHECKF(memcmp(back, ar->ar_data, AGG_WRITES * SECTOR) == 0, "aggregated bytes, seed %llu",
	       (unsigned long long)seed);
	mem_free(back);
	mem_free(ar->ar_data);
	mem_free(ar);
	return rc;
}

static void test_aggregation(void)
{
	struct blk_engine *e = engine_new(32);
	char path[512];
	tmp_path(path, sizeof(path), "agg.img");
	struct blk_dev *f = NULL;
	CHECK(blk_dev_open_file(path, 8 * MIB, &f) == 0);
	if (!f || !blk_engine_uses_uring(e)) {
		CHECK(f != NULL);
		blk_engine_destroy(e);
		return;
	}
	/* 80 sectors: groups of at most 32 (128 KiB): 0-31, 32-63 and 64-79, so 77 joined
	 * another's group (a few fewer would still be aggregation at work). */
	uint64_t before = blk_engine_aggregated(e);
	CHECK(agg_write_all(e, f, MIB, 1) == 0);
	uint64_t joined = blk_engine_aggregated(e) - before;
	CHECKF(joined >= AGG_WRITES - 8 && joined <= AGG_WRITES - 3, "joined %llu",
	       (unsigned long long)joined);

	/* A group that fails is written again member by member, and every member succeeds. */
	blk_engine_fail_groups(e, 2);
	before = blk_engine_aggregated(e);
	CHECK(agg_write_all(e, f, 2 * MIB, 2) == 0);
	CHECK(blk_engine_aggregated(e) - before >= AGG_WRITES - 8);

	blk_dev_close(f);
	blk_engine_destroy(e);
	CHECK(unlink(path) == 0);
}

int main(void)
{
	log_set_level(LOG_ERROR); /* checksum errors below are intended */
	tmp_dir_make();
	TAP_RUN(test_bp_round_trip);
	TAP_RUN(test_bp_decode_rejects);
	TAP_RUN(test_round_trip_mem_mirror);
	TAP_RUN(test_prepare_lend);
	TAP_RUN(test_round_trip_file_uring);
	TAP_RUN(test_round_trip_file_fallback);
	TAP_RUN(test_checksum_repair);
	TAP_RUN(test_read_direct);
	TAP_RUN(test_read_errors_and_pulled);
	TAP_RUN(test_labels);
	TAP_RUN(test_uberblock_ring);
	TAP_RUN(test_fault_images);
	TAP_RUN(test_concurrent_io);
	TAP_RUN(test_engine_drain);
	TAP_RUN(test_short_transfers);
	TAP_RUN(test_hostile_arguments);
	TAP_RUN(test_fault_global_order);
	TAP_RUN(test_file_lock);
	TAP_RUN(test_file_read_only);
	TAP_RUN(test_file_created_written);
	TAP_RUN(test_background_yields);
	TAP_RUN(test_aggregation);
	rmdir(tmp_dir);
	return tap_finish();
}
