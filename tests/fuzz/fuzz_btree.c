/* fuzz_btree.c: libFuzzer target for the B+tree's reading of node images (btree_node.c: header
 * check, bounded entry access, search, full verification, child pointers; btree.c: descent,
 * scans and the copy-on-write of a clean node into a dirty one).
 *
 * Input: byte 0 picks the node size (1, 4 or 16 KiB), byte 1 the root's level (0-3); the rest is
 * a sequence of node images of that size (the last zero-padded). The tree's store serves them:
 * the pointer at byte offset O names image (O / 4096) mod N, and the root is the last image, with
 * the fill its own entries claim. On that tree the target runs a lookup, a full scan, btree_last,
 * btree_check, then a put and a delete (which copy hostile clean nodes into dirty ones) before
 * discarding the tree. Everything must end in a value or -EIO, never a crash. */
#include "fuzz.h"
#include "btree/btree_impl.h"

#define FUZZ_BT_TYPE 7
#define FUZZ_BT_KEY_MAX 32u
#define FUZZ_BT_VAL_MAX 64u
#define FUZZ_BT_SCAN_MAX 100000u

static const uint32_t fuzz_bt_sizes[] = {1024, 4096, 16384};

struct fuzz_bt_store {
	const uint8_t *fs_images; /* fs_n images of fs_nb bytes */
	size_t fs_n;
	uint32_t fs_nb;
	/* seed writing: the images written so far */
	uint8_t *fs_out;
	size_t fs_nout;
};

static int fuzz_bt_get(void *ctx, const struct blk_ptr *bp, const void **image_out, void **hold_out)
{
	struct fuzz_bt_store *st = ctx;
	*image_out =
	    st->fs_images + (size_t)(bp->bp_offset / BLK_SECTOR_BYTES % st->fs_n) * st->fs_nb;
	*hold_out = NULL;
	return 0;
}

static void fuzz_bt_release(void *ctx, void *hold)
{
	(void)ctx;
	(void)hold;
}

/* Only seed writing syncs: each image is appended and named by its index. */
static int fuzz_bt_write(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
                         uint64_t fill, struct blk_ptr *bp_out)
{
	(void)level;
	(void)fill;
	struct fuzz_bt_store *st = ctx;
	if (!st->fs_out)
		return -EIO;
	memcpy(st->fs_out + st->fs_nout * image_bytes, image, image_bytes);
	*bp_out = (struct blk_ptr){.bp_offset = st->fs_nout * (uint64_t)BLK_SECTOR_BYTES,
	                           .bp_asize = BLK_SECTOR_BYTES *
	                                       (1 + (image_bytes - 1) / BLK_SECTOR_BYTES),
	                           .bp_psize = image_bytes,
	                           .bp_lsize = image_bytes,
	                           .bp_checksum = BLK_CHECKSUM_XXH3_128,
	                           .bp_birth_txg = 1};
	st->fs_nout++;
	return 0;
}

static void fuzz_bt_free(void *ctx, const struct blk_ptr *bp)
{
	(void)ctx;
	(void)bp;
}

static int fuzz_bt_open(struct fuzz_bt_store *st, const struct blk_ptr *root, struct btree **out)
{
	struct btree_config cfg = {
	    .bc_node_bytes = st->fs_nb,
	    .bc_key_max = FUZZ_BT_KEY_MAX,
	    .bc_val_max = FUZZ_BT_VAL_MAX,
	    .bc_type = FUZZ_BT_TYPE,
	    .bc_store = {st, fuzz_bt_get, fuzz_bt_release, fuzz_bt_write, fuzz_bt_free}};
	return btree_open(&cfg, root, out);
}

static bool fuzz_bt_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                          uint32_t val_len)
{
	(void)key;
	(void)val;
	if (key_len > FUZZ_BT_KEY_MAX || val_len > FUZZ_BT_VAL_MAX)
		__builtin_trap();
	return ++*(unsigned *)arg < FUZZ_BT_SCAN_MAX;
}

static int fuzz_bt_load(void *arg, const struct blk_ptr *bp)
{
	(void)arg;
	(void)bp;
	return -EIO; /* the store holds every image: nothing is ever missing */
}

/* The fill the root's own entries claim: a leaf's count, an internal node's children's fills. */
static uint64_t fuzz_bt_root_fill(const struct btree *t, const uint8_t *img, uint8_t level)
{
	if (bt_node_check_header(t, img, level, NULL, 0) != 0)
		return 1;
	if (level == 0)
		return bt_count(img);
	uint64_t fill = 0;
	for (uint32_t i = 0; i < bt_count(img); i++) {
		struct bt_ent e;
		if (bt_node_entry(t, img, i, &e) == 0 && e.be_vlen == BT_PTR_BYTES)
			fill += bt_ptr_fill_of(e.be_val);
	}
	return fill ? fill : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	struct fuzz_bt_store st = {.fs_nb = fuzz_bt_sizes[data[0] % SH_ARRAY_SIZE(fuzz_bt_sizes)]};
	uint8_t level = data[1] % 4;
	st.fs_n = SH_MAX((size_t)1, (size - 2 + st.fs_nb - 1) / st.fs_nb);
	uint8_t *images = calloc(st.fs_n, st.fs_nb);
	if (!images)
		abort();
	memcpy(images, data + 2, size - 2);
	st.fs_images = images;

	struct btree *t;
	struct blk_ptr root = {.bp_offset = (st.fs_n - 1) * (uint64_t)BLK_SECTOR_BYTES,
	                       .bp_asize = SH_MAX(st.fs_nb, BLK_SECTOR_BYTES),
	                       .bp_psize = st.fs_nb,
	                       .bp_lsize = st.fs_nb,
	                       .bp_checksum = BLK_CHECKSUM_XXH3_128,
	                       .bp_level = level,
	                       .bp_birth_txg = 1,
	                       .bp_fill = 1};
	if (fuzz_bt_open(&st, NULL, &t) != 0)
		abort();
	root.bp_fill = fuzz_bt_root_fill(t, images + (st.fs_n - 1) * st.fs_nb, level);
	btree_close(t);
	if (fuzz_bt_open(&st, &root, &t) != 0)
		goto out;

	uint8_t val[FUZZ_BT_VAL_MAX], key[FUZZ_BT_KEY_MAX];
	uint32_t vlen, klen;
	struct blk_ptr missing;
	unsigned visited = 0;
	char report[256];
	(void)btree_lookup(t, "key-0042", 8, val, sizeof(val), &vlen, &missing);
	(void)btree_scan(t, NULL, 0, false, fuzz_bt_visit, &visited, &missing);
	(void)btree_last(t, key, sizeof(key), &klen, val, sizeof(val), &vlen, &missing);
	(void)btree_check(t, fuzz_bt_load, NULL, report, sizeof(report));
	(void)btree_put(t, "key-0042x", 9, "new value", 9, BTREE_PUT_UPSERT, &missing);
	(void)btree_delete(t, "key-0007", 8, &missing);
	btree_close(t);
out:
	free(images);
	return 0;
}

/* Builds a tree of n keys "key-%04u" with nodes of nb bytes through the tree's own code, and
 * writes it as a seed (the root is the last image synced). */
static void fuzz_bt_seed(const char *dir, const char *name, uint8_t size_index, unsigned n)
{
	struct fuzz_bt_store st = {.fs_nb = fuzz_bt_sizes[size_index], .fs_n = 1};
	st.fs_out = calloc(64, st.fs_nb);
	struct btree *t;
	if (!st.fs_out || fuzz_bt_open(&st, NULL, &t) != 0)
		abort();
	for (unsigned i = 0; i < n; i++) {
		char key[16], val[40];
		struct blk_ptr missing;
		snprintf(key, sizeof(key), "key-%04u", i);
		snprintf(val, sizeof(val), "value of entry %u", i);
		if (btree_put(t, key, (uint32_t)strlen(key), val, (uint32_t)strlen(val),
		              BTREE_PUT_UPSERT, &missing) != 0)
			abort();
	}
	struct blk_ptr root;
	if (btree_sync(t, &root) != 0 || st.fs_nout > 64)
		abort();
	btree_close(t);
	size_t len = 2 + st.fs_nout * st.fs_nb;
	uint8_t *seed = malloc(len);
	if (!seed)
		abort();
	seed[0] = size_index;
	seed[1] = root.bp_level;
	memcpy(seed + 2, st.fs_out, st.fs_nout * st.fs_nb);
	fuzz_seed(dir, name, seed, len);
	free(seed);
	free(st.fs_out);
}

static void fuzz_write_seeds(const char *dir)
{
	fuzz_bt_seed(dir, "leaf-1k", 0, 12);
	fuzz_bt_seed(dir, "two-levels-1k", 0, 60);
	fuzz_bt_seed(dir, "three-levels-1k", 0, 400);
	fuzz_bt_seed(dir, "leaf-4k", 1, 40);
}
