/* test_pool_fs_send.c: unit tests of shale send and shale receive (src/poolfs/pool_fs_send.c,
 * src/pool/pool_recv.c): a tree of files (several blocks, sparse, empty), directories, hard and
 * symbolic links, modes and owners sent whole from one pool and received into another, then three
 * incremental streams (overwrites, removes, renames, new files, a truncation), each received
 * snapshot compared with the sender's through the fs.h back end: every name, every attribute but
 * the fsid and the allocated bytes (object ids, generations and times included), every byte; the
 * refusals (a full stream into a file system that exists, a stream whose base the target lacks,
 * a target changed since its base unless forced, the same stream twice); streams cut off,
 * damaged or reordered refused with the target as it was; both pools checked clean
 * throughout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/xxh.h"
#include "pool_fs_fixture.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"
#include "tap.h"

static struct pool *pool_new(struct blk_dev *d, const char *name, bool with_fs)
{
	struct pool_open_opts o = {0};
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 60000; /* tests sync when they say so */
	struct pool_create_args a = {.pc_name = name, .pc_opts = &o};
	struct pool *p = NULL;
	VERIFY(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	if (with_fs)
		VERIFY(pool_ds_create(p, "fs", NULL) == 0);
	return p;
}

static void snap(struct pool *p, const char *name)
{
	char err[256] = "";
	int rc = pool_snapshot_create(p, &name, 1, err, sizeof(err));
	CHECKF(rc == 0, "snapshot %s: %s", name, err);
}

/* ---- streams in memory files ---- */

static int stream_new(void)
{
	int fd = memfd_create("stream", 0);
	VERIFY(fd >= 0);
	return fd;
}

/* Sends snapshot (from: NULL or the base; flags as pool_fs_send's) into a new memory file,
 * rewound, with its statistics in *st_out (may be NULL); -1 on failure. */
static int send_to_fd_ext(struct pool *p, const char *snapshot, const char *from, unsigned flags,
                          struct pool_fs_send_stats *st_out)
{
	int fd = stream_new();
	struct pool_fs_send_stats st;
	char err[256] = "";
	int rc = pool_fs_send(p, snapshot, from, flags, fd, &st, err, sizeof(err));
	if (st_out)
		*st_out = st;
	CHECKF(rc == 0, "send %s: %s", snapshot, err);
	printf("# send %s%s%s: %" PRIu64 " puts, %" PRIu64 " dels, %" PRIu64 " data bytes, %" PRIu64
	       " stream bytes\n",
	       snapshot, from ? " from " : "", from ? from : "", st.ss_puts, st.ss_dels,
	       st.ss_data_bytes, st.ss_stream_bytes);
	if (rc != 0) {
		close(fd);
		return -1;
	}
	VERIFY(lseek(fd, 0, SEEK_SET) == 0);
	return fd;
}

static int send_to_fd(struct pool *p, const char *snapshot, const char *from)
{
	return send_to_fd_ext(p, snapshot, from, 0, NULL);
}

static int recv_from_fd(struct pool *p, const char *fs, bool force, int fd, char *err,
                        size_t err_len)
{
	struct pool_fs_recv_stats st;
	VERIFY(lseek(fd, 0, SEEK_SET) == 0);
	return pool_fs_receive(p, fs, force, fd, &st, err, err_len);
}

/* A copy of the stream in fd with edit applied to its bytes (len in/out). */
static int stream_edit(int fd, void (*edit)(uint8_t *b, size_t *len))
{
	off_t size = lseek(fd, 0, SEEK_END);
	uint8_t *b = malloc((size_t)size + 1);
	VERIFY(b && pread(fd, b, (size_t)size, 0) == size);
	size_t len = (size_t)size;
	edit(b, &len);
	int out = stream_new();
	VERIFY(sh_write_all(out, b, len) == 0);
	free(b);
	return out;
}

static void edit_cut(uint8_t *b, size_t *len)
{
	(void)b;
	*len = *len * 2 / 3;
}

static void edit_flip(uint8_t *b, size_t *len)
{
	b[*len / 2] ^= 0x40;
}

static void edit_drop_end(uint8_t *b, size_t *len)
{
	(void)b;
	*len -= 16 + 24 + 8; /* the END record */
}

/* ---- comparing two file systems ---- */

static unsigned compared_objects;

static bool attr_same(const struct fs_attr *a, const struct fs_attr *b)
{
	return a->fa_type == b->fa_type && a->fa_mode == b->fa_mode && a->fa_nlink == b->fa_nlink &&
	       a->fa_uid == b->fa_uid && a->fa_gid == b->fa_gid && a->fa_size == b->fa_size &&
	       a->fa_fileid == b->fa_fileid && a->fa_rdev_major == b->fa_rdev_major &&
	       a->fa_rdev_minor == b->fa_rdev_minor &&
	       a->fa_mtime.ft_sec == b->fa_mtime.ft_sec &&
	       a->fa_mtime.ft_nsec == b->fa_mtime.ft_nsec &&
	       a->fa_ctime.ft_sec == b->fa_ctime.ft_sec &&
	       a->fa_ctime.ft_nsec == b->fa_ctime.ft_nsec;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Whether directory da of a and db of b hold the same names, attributes and bytes, below too. */
static bool tree_same(struct fs *a, const struct fs_obj_id *da, struct fs *b,
                      const struct fs_obj_id *db, const char *path)
{
	enum { MAXN = 1100 };
	static char na[MAXN][32], nb[MAXN][32]; /* compared one directory level at a time */
	unsigned n_a = 0, n_b = 0;
	if (op_readdir_all(a, da, true, na, MAXN, &n_a) != 0 ||
	    op_readdir_all(b, db, true, nb, MAXN, &n_b) != 0 || n_a != n_b || n_a > MAXN) {
		printf("#   %s: listings differ (%u and %u names)\n", path, n_a, n_b);
		return false;
	}
	qsort(na, n_a, 32, name_cmp);
	qsort(nb, n_b, 32, name_cmp);
	char (*names)[32] = malloc((size_t)n_a * 32 + 1);
	VERIFY(names != NULL);
	bool same = true;
	for (unsigned i = 0; i < n_a; i++) {
		if (strcmp(na[i], nb[i]) != 0) {
			printf("#   %s: names differ (%s, %s)\n", path, na[i], nb[i]);
			same = false;
		}
		memcpy(names[i], na[i], 32);
	}
	for (unsigned i = 0; same && i < n_a; i++) {
		struct fs_obj_id oa, ob;
		struct fs_attr aa = {0}, ab = {0};
		char sub[512];
		snprintf(sub, sizeof(sub), "%s/%s", path, names[i]);
		if (op_lookup(a, da, names[i], &oa, &aa) != 0 ||
		    op_lookup(b, db, names[i], &ob, &ab) != 0 || !attr_same(&aa, &ab)) {
			printf("#   %s: attributes differ\n", sub);
			same = false;
			break;
		}
		compared_objects++;
		if (aa.fa_type == FS_DIR) {
			same = tree_same(a, &oa, b, &ob, sub);
		} else if (aa.fa_type == FS_REG && aa.fa_size > 0) {
			uint8_t *ba = malloc(aa.fa_size), *bb = malloc(aa.fa_size);
			VERIFY(ba && bb);
			uint32_t ga = 0, gb = 0;
			same = op_read(a, &oa, 0, (uint32_t)aa.fa_size, ba, &ga, NULL) == 0 &&
			       op_read(b, &ob, 0, (uint32_t)aa.fa_size, bb, &gb, NULL) == 0 &&
			       ga == aa.fa_size && gb == ga && memcmp(ba, bb, ga) == 0;
			if (!same)
				printf("#   %s: bytes differ\n", sub);
			free(ba);
			free(bb);
		}
	}
	free(names);
	return same;
}

/* Snapshot name_a of pool a and name_b of pool b hold the same tree. */
static bool snaps_same(struct pool *a, const char *name_a, struct pool *b, const char *name_b)
{
	struct fs *fa = NULL, *fb = NULL;
	bool same = false;
	if (pool_fs_open(a, name_a, 81, &fa) == 0 && pool_fs_open(b, name_b, 82, &fb) == 0) {
		struct fs_obj_id ra, rb;
		compared_objects = 0;
		same = fs_root(fa, &ra) == 0 && fs_root(fb, &rb) == 0 &&
		       tree_same(fa, &ra, fb, &rb, name_a);
		printf("# %s and %s: %u objects compared: %s\n", name_a, name_b, compared_objects,
		       same ? "the same" : "DIFFERENT");
	}
	if (fa)
		fs_destroy(fa);
	if (fb)
		fs_destroy(fb);
	return same;
}

/* ---- the tree ---- */

static uint8_t big[700 * KIB], big2[300 * KIB], small[3000];

static void make_tree(struct fs *fs)
{
	struct fs_obj_id root, d, sub, f, g, h;
	CHECK(fs_root(fs, &root) == 0);
	fill(big, sizeof(big), 1);
	fill(big2, sizeof(big2), 2);
	fill(small, sizeof(small), 3);
	CHECK(op_create(fs, FS_OP_MKDIR, &root, "d", NULL, 0, &d) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &d, "sub", NULL, 0, &sub) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "big", NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, big, sizeof(big), FS_UNSTABLE, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &d, "small", NULL, 0, &g) == 0);
	CHECK(op_write(fs, &g, 0, small, sizeof(small), FS_FILE_SYNC, NULL) == 0);
	CHECK(op_setattr(fs, &g, -1, 0600, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &sub, "sparse", NULL, 0, &h) == 0);
	CHECK(op_write(fs, &h, 5 * MIB, "end", 3, FS_UNSTABLE, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, "empty", NULL, 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_SYMLINK, &d, "link", "../big", 0, NULL) == 0);
	CHECK(op_link(fs, &g, &root, "hard") == 0);
	CHECK(op_create(fs, FS_OP_MKNOD, &root, "fifo", NULL, FS_FIFO, NULL) == 0);
	for (int i = 0; i < 40; i++) {
		char name[16];
		struct fs_obj_id x;
		snprintf(name, sizeof(name), "f%02d", i);
		CHECK(op_create(fs, FS_OP_CREATE, &sub, name, NULL, 0, &x) == 0);
		CHECK(op_write(fs, &x, 0, small, (uint32_t)(100 + i * 50), FS_UNSTABLE, NULL) == 0);
	}
}

/* Changes of round r (1..3). */
static void change_tree(struct fs *fs, int r)
{
	struct fs_obj_id root, d, sub, f, x;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_lookup(fs, &root, "d", &d, NULL) == 0);
	CHECK(r > 2 || op_lookup(fs, &d, "sub", &sub, NULL) == 0); /* round 2 removes it */
	CHECK(op_lookup(fs, &root, "big", &f, NULL) == 0);
	char name[32];
	switch (r) {
	case 1: /* an overwrite in the middle, removes, a rename across directories, new files */
		CHECK(op_write(fs, &f, 200 * KIB, big2, 100 * KIB, FS_UNSTABLE, NULL) == 0);
		CHECK(op_remove(fs, FS_OP_REMOVE, &sub, "f03") == 0);
		CHECK(op_remove(fs, FS_OP_REMOVE, &root, "hard") == 0);
		CHECK(op_rename(fs, &sub, "f07", &root, "moved") == 0);
		CHECK(op_create(fs, FS_OP_CREATE, &d, "new", NULL, 0, &x) == 0);
		CHECK(op_write(fs, &x, 0, big2, sizeof(big2), FS_UNSTABLE, NULL) == 0);
		break;
	case 2: /* a truncation, a directory emptied and removed, a mode change */
		CHECK(op_setattr(fs, &f, 100 * KIB, -1, NULL) == 0);
		for (int i = 0; i < 40; i++) {
			snprintf(name, sizeof(name), "f%02d", i);
			int rc = op_remove(fs, FS_OP_REMOVE, &sub, name);
			CHECK(rc == 0 || (rc == -ENOENT && (i == 3 || i == 7)));
		}
		CHECK(op_remove(fs, FS_OP_REMOVE, &sub, "sparse") == 0);
		CHECK(op_remove(fs, FS_OP_RMDIR, &d, "sub") == 0);
		CHECK(op_setattr(fs, &d, -1, 0700, NULL) == 0);
		break;
	default: /* many new files, one name reused */
		for (int i = 0; i < 150; i++) {
			snprintf(name, sizeof(name), "n%03d", i);
			CHECK(op_create(fs, FS_OP_CREATE, &root, name, NULL, 0, &x) == 0);
			CHECK(op_write(fs, &x, 0, small, (uint32_t)(1 + i * 7), FS_UNSTABLE, NULL) == 0);
		}
		CHECK(op_create(fs, FS_OP_CREATE, &root, "hard", NULL, 0, NULL) == 0);
		break;
	}
}

/* Both pools synced and checked clean. */
static void pools_check(struct pool *a, struct pool *b)
{
	CHECK(pool_txg_wait_synced(a, 0) == 0 && pool_txg_wait_synced(b, 0) == 0);
	CHECK(pool_check(a, report_print, NULL) == 0);
	CHECK(pool_check(b, report_print, NULL) == 0);
}

/* Both pools exported, their leaves closed; no request completed twice. */
static void pools_done(struct pool *a, struct blk_dev *da, struct pool *b, struct blk_dev *db)
{
	CHECK(pool_export(a) == 0);
	CHECK(pool_export(b) == 0);
	blk_dev_close(da);
	blk_dev_close(db);
	CHECK(bad_completions == 0);
}

static void test_send_receive(void)
{
	struct blk_dev *da = mem_dev(128 * MIB), *db = mem_dev(128 * MIB);
	struct pool *a = pool_new(da, "src", true), *b = pool_new(db, "dst", false);
	struct fs *fs = NULL;
	char err[256];
	CHECK(pool_fs_open(a, "fs", 77, &fs) == 0);
	if (!fs)
		goto out;
	make_tree(fs);
	snap(a, "fs@s0");
	/* full */
	int fd = send_to_fd(a, "fs@s0", NULL);
	CHECK(fd >= 0);
	if (fd < 0)
		goto out_fs;
	err[0] = '\0';
	int rc = recv_from_fd(b, "copy", false, fd, err, sizeof(err));
	CHECKF(rc == 0, "receive: %s", err);
	CHECK(snaps_same(a, "fs@s0", b, "copy@s0"));
	CHECK(recv_from_fd(b, "copy", false, fd, err, sizeof(err)) == -EEXIST);
	close(fd);
	/* three incrementals, each compared, the file system itself too */
	for (int r = 1; r <= 3; r++) {
		char cur[16], prev[16], bcur[16];
		snprintf(prev, sizeof(prev), "fs@s%d", r - 1);
		snprintf(cur, sizeof(cur), "fs@s%d", r);
		snprintf(bcur, sizeof(bcur), "copy@s%d", r);
		change_tree(fs, r);
		snap(a, cur);
		char from[8];
		snprintf(from, sizeof(from), "@s%d", r - 1);
		fd = send_to_fd(a, cur, from);
		if (fd < 0)
			break;
		err[0] = '\0';
		rc = recv_from_fd(b, "copy", false, fd, err, sizeof(err));
		CHECKF(rc == 0, "receive %s: %s", cur, err);
		CHECK(snaps_same(a, cur, b, bcur));
		/* the same stream again: received already */
		CHECK(recv_from_fd(b, "copy", false, fd, err, sizeof(err)) == -EEXIST);
		close(fd);
		(void)prev;
	}
	/* each received snapshot still the sender's */
	for (int r = 0; r <= 3; r++) {
		char sa[16], sb[16];
		snprintf(sa, sizeof(sa), "fs@s%d", r);
		snprintf(sb, sizeof(sb), "copy@s%d", r);
		CHECK(snaps_same(a, sa, b, sb));
	}
	pools_check(a, b);
out_fs:
	fs_destroy(fs);
out:
	pools_done(a, da, b, db);
}

/* Whether fs of p still is its snapshot latest (by name) with nothing changed: what a refused or
 * failed receive must leave. */
static bool still_at(struct pool *p, const char *fs, const char *latest_name, struct pool *src,
                     const char *src_snap)
{
	char name[64];
	snprintf(name, sizeof(name), "%s@%s", fs, latest_name);
	bool same = snaps_same(src, src_snap, p, name);
	/* the head itself equals it too */
	struct fs *h = NULL, *s = NULL;
	bool head_same = false;
	if (pool_fs_open(p, fs, 83, &h) == 0 && pool_fs_open(p, name, 84, &s) == 0) {
		struct fs_obj_id rh, rs;
		head_same = fs_root(h, &rh) == 0 && fs_root(s, &rs) == 0 &&
		            tree_same(h, &rh, s, &rs, fs);
	}
	if (h)
		fs_destroy(h);
	if (s)
		fs_destroy(s);
	return same && head_same;
}

static void test_receive_refused(void)
{
	struct blk_dev *da = mem_dev(96 * MIB), *db = mem_dev(96 * MIB);
	struct pool *a = pool_new(da, "src", true), *b = pool_new(db, "dst", false);
	struct fs *fs = NULL;
	char err[256];
	CHECK(pool_fs_open(a, "fs", 77, &fs) == 0);
	if (!fs)
		goto out;
	make_tree(fs);
	snap(a, "fs@s0");
	change_tree(fs, 1);
	snap(a, "fs@s1");
	change_tree(fs, 3);
	snap(a, "fs@s2");
	int full = send_to_fd(a, "fs@s0", NULL), inc1 = send_to_fd(a, "fs@s1", "@s0"),
	    inc2 = send_to_fd(a, "fs@s2", "fs@s1");
	if (full < 0 || inc1 < 0 || inc2 < 0)
		goto out_fs;
	/* damaged full streams: nothing is left behind */
	void (*damage[])(uint8_t *, size_t *) = {edit_cut, edit_flip, edit_drop_end};
	for (unsigned i = 0; i < 3; i++) {
		int bad = stream_edit(full, damage[i]);
		err[0] = '\0';
		CHECK(recv_from_fd(b, "copy", false, bad, err, sizeof(err)) == -EPROTO);
		printf("# damaged full stream %u: %s\n", i, err);
		struct fs *left = NULL;
		CHECK(pool_fs_open(b, "copy", 85, &left) == -ENOENT); /* nothing received stays */
		if (left)
			fs_destroy(left);
		close(bad);
	}
	CHECK(pool_txg_wait_synced(b, 0) == 0);
	CHECK(pool_check(b, report_print, NULL) == 0);
	/* an incremental stream without its base */
	CHECK(recv_from_fd(b, "copy", false, inc1, err, sizeof(err)) == -ENOENT);
	CHECK(recv_from_fd(b, "copy", false, full, err, sizeof(err)) == 0);
	/* a stream two steps ahead: its base is not there */
	CHECK(recv_from_fd(b, "copy", false, inc2, err, sizeof(err)) == -ENOENT);
	printf("# out of order: %s\n", err);
	/* damaged incremental streams: the target stays at its base */
	for (unsigned i = 0; i < 3; i++) {
		int bad = stream_edit(inc1, damage[i]);
		err[0] = '\0';
		CHECK(recv_from_fd(b, "copy", false, bad, err, sizeof(err)) == -EPROTO);
		printf("# damaged incremental stream %u: %s\n", i, err);
		CHECK(still_at(b, "copy", "s0", a, "fs@s0"));
		close(bad);
	}
	/* a target changed since its base: refused, then forced */
	struct fs *c = NULL;
	CHECK(pool_fs_open(b, "copy", 86, &c) == 0);
	if (c) {
		struct fs_obj_id root;
		CHECK(fs_root(c, &root) == 0);
		CHECK(op_create(c, FS_OP_CREATE, &root, "local", NULL, 0, NULL) == 0);
		/* exported: refused whatever */
		CHECK(recv_from_fd(b, "copy", true, inc1, err, sizeof(err)) == -EBUSY);
		fs_destroy(c);
	}
	CHECK(pool_txg_wait_synced(b, 0) == 0);
	CHECK(recv_from_fd(b, "copy", false, inc1, err, sizeof(err)) == -EBUSY);
	printf("# changed since its base: %s\n", err);
	CHECK(recv_from_fd(b, "copy", true, inc1, err, sizeof(err)) == 0);
	CHECK(snaps_same(a, "fs@s1", b, "copy@s1"));
	CHECK(still_at(b, "copy", "s1", a, "fs@s1"));
	CHECK(recv_from_fd(b, "copy", false, inc2, err, sizeof(err)) == 0);
	CHECK(snaps_same(a, "fs@s2", b, "copy@s2"));
	/* a snapshot after the base on the target: refused unless forced (destroyed) */
	snap(b, "copy@mine");
	char e2[256];
	CHECK(recv_from_fd(b, "copy", false, inc2, e2, sizeof(e2)) == -EEXIST);
	CHECK(pool_txg_wait_synced(a, 0) == 0 && pool_txg_wait_synced(b, 0) == 0);
	CHECK(pool_check(a, report_print, NULL) == 0);
	CHECK(pool_check(b, report_print, NULL) == 0);
	/* an import finds nothing to undo */
out_fs:
	if (full >= 0)
		close(full);
	if (inc1 >= 0)
		close(inc1);
	if (inc2 >= 0)
		close(inc2);
	fs_destroy(fs);
out:
	CHECK(pool_export(a) == 0);
	CHECK(pool_export(b) == 0);
	blk_dev_close(da);
	blk_dev_close(db);
	CHECK(bad_completions == 0);
}

static uint32_t le32_at(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The first PUT of a block as stored in stream b (len bytes): its record's offset, or -1. */
static long stream_find_stored(const uint8_t *b, size_t len)
{
	size_t at = 0;
	while (at + 16 <= len) {
		uint32_t n = le32_at(b + at + 12);
		if (b[at + 4] == 2 && b[at + 6] == 1)
			return (long)at;
		at += 16 + (size_t)n + 8;
	}
	return -1;
}

/* Edits of a send -c stream's first stored block, the record's checksum made right again: the
 * logical size it claims is one sector more (its bytes no longer decompress to it), or its
 * compressed bytes are cut short (d and the record's length one less). */
static void stored_reseal(uint8_t *b, long at, uint32_t n)
{
	uint64_t sum = XXH3_64bits(b + at, 16 + (size_t)n);
	for (unsigned i = 0; i < 8; i++)
		b[at + 16 + n + i] = (uint8_t)(sum >> (8 * i));
}

/* The first stored PUT of stream b: its record's offset and payload length, the prefix before
 * its data (compression, zero, logical bytes) and its data's length. */
struct stored_put {
	long sp_at;
	uint32_t sp_n, sp_d;
	uint8_t *sp_hdr;
};

static struct stored_put stored_put_find(uint8_t *b, size_t len)
{
	struct stored_put sp = {.sp_at = stream_find_stored(b, len)};
	VERIFY(sp.sp_at >= 0);
	sp.sp_n = le32_at(b + sp.sp_at + 12);
	uint8_t *pl = b + sp.sp_at + 16;
	uint32_t k = (uint32_t)pl[0] | (uint32_t)pl[1] << 8, v = (uint32_t)pl[2] | (uint32_t)pl[3] << 8;
	sp.sp_d = le32_at(pl + 4);
	sp.sp_hdr = pl + 8 + k + v;
	return sp;
}

static void edit_stored_lsize(uint8_t *b, size_t *len)
{
	struct stored_put sp = stored_put_find(b, *len);
	uint32_t lsize = le32_at(sp.sp_hdr + 4) + 4096;
	for (unsigned i = 0; i < 4; i++)
		sp.sp_hdr[4 + i] = (uint8_t)(lsize >> (8 * i));
	stored_reseal(b, sp.sp_at, sp.sp_n);
}

static void edit_stored_garbage(uint8_t *b, size_t *len)
{
	struct stored_put sp = stored_put_find(b, *len);
	memset(sp.sp_hdr + 8, 0xff, sp.sp_d); /* no compressed form decodes from that */
	stored_reseal(b, sp.sp_at, sp.sp_n);
}

/* Compressible files: every block compresses. */
static void make_text(struct fs *fs, const char *name, uint32_t bytes, unsigned seed)
{
	static uint8_t text[512 * KIB];
	VERIFY(bytes <= sizeof(text));
	for (uint32_t i = 0; i < bytes; i++)
		text[i] = (uint8_t)("the quick brown fox jumps over the lazy dog "[(i + seed) % 44]);
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &root, name, NULL, 0, &f) == 0);
	CHECK(op_write(fs, &f, 0, text, bytes, FS_UNSTABLE, NULL) == 0);
}

/* send -c: compressed blocks travel as stored, a smaller stream for compressible data; received
 * as they came where the target compresses alike, decompressed and sealed anew where it does
 * not; the received file systems the sender's; stored bytes that do not decompress to what
 * they claim refused, nothing left behind. */
static void test_send_stored(void)
{
	struct blk_dev *da = mem_dev(128 * MIB), *db = mem_dev(128 * MIB);
	struct pool *a = pool_new(da, "src", true), *b = pool_new(db, "dst", false);
	struct fs *fs = NULL;
	char err[256];
	struct pool_fs_send_stats plain, stored;
	CHECK(pool_ds_set_compress(a, "fs", POOL_COMPRESS_LZ4) == 0);
	CHECK(pool_fs_open(a, "fs", 77, &fs) == 0);
	if (!fs)
		goto out;
	make_tree(fs); /* incompressible data: sent as it is */
	make_text(fs, "text1", 500 * KIB, 0);
	make_text(fs, "text2", 20 * KIB, 7);
	snap(a, "fs@s0");
	int fd0 = send_to_fd_ext(a, "fs@s0", NULL, 0, &plain);
	int fd = send_to_fd_ext(a, "fs@s0", NULL, POOL_FS_SEND_STORED, &stored);
	CHECK(fd >= 0 && fd0 >= 0);
	if (fd < 0 || fd0 < 0)
		goto out_fs;
	CHECKF(stored.ss_stored_blocks >= 5 && stored.ss_puts == plain.ss_puts &&
	       stored.ss_stream_bytes + 400 * KIB < plain.ss_stream_bytes,
	       "%" PRIu64 " stored blocks, %" PRIu64 " against %" PRIu64 " stream bytes",
	       stored.ss_stored_blocks, stored.ss_stream_bytes, plain.ss_stream_bytes);
	close(fd0);
	/* damaged stored blocks, their records' checksums right: refused, nothing left */
	void (*damage[])(uint8_t *, size_t *) = {edit_stored_lsize, edit_stored_garbage};
	for (unsigned i = 0; i < 2; i++) {
		int bad = stream_edit(fd, damage[i]);
		err[0] = '\0';
		CHECK(recv_from_fd(b, "copy", false, bad, err, sizeof(err)) == -EPROTO &&
		      strstr(err, "does not decompress") != NULL);
		printf("# damaged stored block %u: %s\n", i, err);
		struct fs *left = NULL;
		CHECK(pool_fs_open(b, "copy", 85, &left) == -ENOENT);
		if (left)
			fs_destroy(left);
		close(bad);
	}
	/* a full stream makes the copy with the sender's compression: written as they came */
	err[0] = '\0';
	int rc = recv_from_fd(b, "copy", false, fd, err, sizeof(err));
	CHECKF(rc == 0, "receive: %s", err);
	close(fd);
	CHECK(snaps_same(a, "fs@s0", b, "copy@s0"));
	/* incrementals: into the copy as it is, then after it changed its compression */
	for (int r = 1; r <= 2; r++) {
		char cur[16], bcur[16], from[8];
		change_tree(fs, r);
		snprintf(cur, sizeof(cur), "text%d", 10 + r);
		make_text(fs, cur, 300 * KIB, (unsigned)r);
		snprintf(cur, sizeof(cur), "fs@s%d", r);
		snprintf(bcur, sizeof(bcur), "copy@s%d", r);
		snprintf(from, sizeof(from), "@s%d", r - 1);
		snap(a, cur);
		if (r == 2)
			CHECK(pool_ds_set_compress(b, "copy", POOL_COMPRESS_ZSTD) == 0);
		fd = send_to_fd_ext(a, cur, from, POOL_FS_SEND_STORED, &stored);
		if (fd < 0)
			break;
		CHECK(stored.ss_stored_blocks >= 3);
		err[0] = '\0';
		rc = recv_from_fd(b, "copy", false, fd, err, sizeof(err));
		CHECKF(rc == 0, "receive %s: %s", cur, err);
		close(fd);
		CHECK(snaps_same(a, cur, b, bcur));
	}
	pools_check(a, b);
out_fs:
	fs_destroy(fs);
out:
	pools_done(a, da, b, db);
}

/* A full send from a cold cache of a file larger than several read-ahead batches (40 MiB of 128
 * KiB blocks, each different) after 300 empty files (batches that end at their count of
 * entries): the copy is the sender's, and each data block was read from the leaves once (what
 * is read ahead stays cached until it is sent; the rest of the reads are the tree's nodes). */
static void test_send_read_ahead(void)
{
	enum { FILE_MIB = 40, SMALL = 300 };
	struct blk_dev *da = mem_dev(192 * MIB), *db = mem_dev(192 * MIB);
	struct pool *a = pool_new(da, "src", true), *b = pool_new(db, "dst", false);
	struct fs *fs = NULL;
	char err[256], name[32];
	static uint8_t chunk[MIB];
	CHECK(pool_fs_open(a, "fs", 77, &fs) == 0);
	if (!fs)
		goto out;
	struct fs_obj_id root, f;
	CHECK(fs_root(fs, &root) == 0);
	for (unsigned i = 0; i < SMALL; i++) {
		snprintf(name, sizeof(name), "s%03u", i);
		CHECK(op_create(fs, FS_OP_CREATE, &root, name, NULL, 0, &f) == 0);
	}
	CHECK(op_create(fs, FS_OP_CREATE, &root, "long", NULL, 0, &f) == 0);
	for (unsigned i = 0; i < FILE_MIB; i++) {
		fill(chunk, sizeof(chunk), 1000 + i);
		CHECK(op_write(fs, &f, (uint64_t)i * MIB, chunk, MIB, FS_UNSTABLE, NULL) == 0);
	}
	snap(a, "fs@s0");
	fs_destroy(fs);
	fs = NULL;
	/* cold: the pool exported and imported again */
	CHECK(pool_export(a) == 0);
	a = NULL;
	struct pool_open_opts o = {0};
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 60000;
	CHECK(pool_import_devs(&da, 1, &o, &a) == 0);
	if (!a)
		goto out;
	struct pool_status before, after;
	pool_status(a, &before);
	struct pool_fs_send_stats st;
	int fd = send_to_fd_ext(a, "fs@s0", NULL, 0, &st);
	pool_status(a, &after);
	uint64_t blocks = FILE_MIB * MIB / (128 * KIB);
	uint64_t fills = after.ps_arc.as_miss_fills - before.ps_arc.as_miss_fills;
	CHECKF(fills >= blocks && fills < blocks + blocks / 8,
	       "%" PRIu64 " blocks read from the leaves for %" PRIu64 " data blocks", fills, blocks);
	printf("# %" PRIu64 " reads for %" PRIu64 " data blocks, %" PRIu64 " started ahead\n", fills,
	       blocks, st.ss_read_ahead);
	/* each data block's read was started by the read-ahead, not by the sender reaching it */
	CHECK(st.ss_read_ahead >= blocks && st.ss_read_ahead <= fills);
	CHECK(st.ss_data_bytes == (uint64_t)FILE_MIB * MIB);
	if (fd >= 0) {
		err[0] = '\0';
		CHECKF(recv_from_fd(b, "copy", false, fd, err, sizeof(err)) == 0, "%s", err);
		close(fd);
		CHECK(snaps_same(a, "fs@s0", b, "copy@s0"));
	}
	pools_check(a, b);
out:
	if (fs)
		fs_destroy(fs);
	if (a) {
		pools_done(a, da, b, db);
	} else { /* the import failed */
		CHECK(pool_export(b) == 0);
		blk_dev_close(da);
		blk_dev_close(db);
	}
}

/* SETATTR of mode and owner. */
static int op_chmod_chown(struct fs *fs, const struct fs_obj_id *obj, uint32_t mode, uint32_t uid,
                          uint32_t gid)
{
	struct call c;
	call_init(&c, fs, FS_OP_SETATTR, obj);
	c.c_req.u.setattr.sa_sattr.fs_set_mode = true;
	c.c_req.u.setattr.sa_sattr.fs_mode = mode;
	c.c_req.u.setattr.sa_sattr.fs_set_uid = true;
	c.c_req.u.setattr.sa_sattr.fs_uid = uid;
	c.c_req.u.setattr.sa_sattr.fs_set_gid = true;
	c.c_req.u.setattr.sa_sattr.fs_gid = gid;
	int rc = call_run(&c);
	call_fini(&c);
	return rc;
}

/* 100,000 small files in 100 directories, every mode bit and many owners; sent whole, then once
 * more after a tenth of them changed, were removed or were renamed; each side compared. */
static void test_send_many(void)
{
	enum { DIRS = 100, PER_DIR = 1000 };
	struct blk_dev *da = mem_dev(512 * MIB), *db = mem_dev(512 * MIB);
	struct pool *a = pool_new(da, "src", true), *b = pool_new(db, "dst", false);
	struct fs *fs = NULL;
	char err[256], name[32];
	CHECK(pool_fs_open(a, "fs", 77, &fs) == 0);
	if (!fs)
		goto out;
	struct fs_obj_id root, dirs[DIRS];
	CHECK(fs_root(fs, &root) == 0);
	unsigned made = 0;
	for (unsigned d = 0; d < DIRS; d++) {
		snprintf(name, sizeof(name), "d%03u", d);
		CHECK(op_create(fs, FS_OP_MKDIR, &root, name, NULL, 0, &dirs[d]) == 0);
		for (unsigned i = 0; i < PER_DIR; i++) {
			struct fs_obj_id f;
			unsigned n = d * PER_DIR + i;
			snprintf(name, sizeof(name), "f%05u", n);
			if (op_create(fs, FS_OP_CREATE, &dirs[d], name, NULL, 0, &f) != 0)
				continue;
			if (op_write(fs, &f, 0, small, 1 + n % 700, FS_UNSTABLE, NULL) == 0 &&
			    op_chmod_chown(fs, &f, n % 07777, n % 5000, n % 300) == 0)
				made++;
		}
	}
	CHECKF(made == DIRS * PER_DIR, "%u files made", made);
	snap(a, "fs@m0");
	int fd = send_to_fd(a, "fs@m0", NULL);
	if (fd >= 0) {
		CHECKF(recv_from_fd(b, "copy", false, fd, err, sizeof(err)) == 0, "%s", err);
		close(fd);
	}
	CHECK(snaps_same(a, "fs@m0", b, "copy@m0"));
	/* a tenth changed: rewritten, removed, renamed into the next directory */
	for (unsigned d = 0; d < DIRS; d++) {
		for (unsigned i = 0; i < PER_DIR; i += 10) {
			unsigned n = d * PER_DIR + i;
			struct fs_obj_id f;
			snprintf(name, sizeof(name), "f%05u", n);
			if (op_lookup(fs, &dirs[d], name, &f, NULL) != 0)
				continue;
			switch (n % 3) {
			case 0: CHECK(op_write(fs, &f, 0, big2, 4096, FS_UNSTABLE, NULL) == 0); break;
			case 1: CHECK(op_remove(fs, FS_OP_REMOVE, &dirs[d], name) == 0); break;
			default: {
				char to[32];
				snprintf(to, sizeof(to), "r%05u", n);
				CHECK(op_rename(fs, &dirs[d], name, &dirs[(d + 1) % DIRS], to) == 0);
			}
			}
		}
	}
	snap(a, "fs@m1");
	fd = send_to_fd(a, "fs@m1", "@m0");
	if (fd >= 0) {
		CHECKF(recv_from_fd(b, "copy", false, fd, err, sizeof(err)) == 0, "%s", err);
		close(fd);
	}
	CHECK(snaps_same(a, "fs@m1", b, "copy@m1"));
	CHECK(pool_txg_wait_synced(b, 0) == 0);
	CHECK(pool_check(b, report_print, NULL) == 0);
	fs_destroy(fs);
out:
	CHECK(pool_export(a) == 0);
	CHECK(pool_export(b) == 0);
	blk_dev_close(da);
	blk_dev_close(db);
	CHECK(bad_completions == 0);
}

/* ---- crash: power cuts across receives ---- */

/* Whether fs of p (a head, or "fs@snap") holds what snapshot want of src does. */
static bool fs_holds(struct pool *p, const char *fs, struct pool *src, const char *want)
{
	struct fs *h = NULL, *s = NULL;
	bool same = false;
	if (pool_fs_open(p, fs, 87, &h) == 0 && pool_fs_open(src, want, 88, &s) == 0) {
		struct fs_obj_id rh, rs;
		same = fs_root(h, &rh) == 0 && fs_root(s, &rs) == 0 && tree_same(s, &rs, h, &rh, fs);
	}
	if (h)
		fs_destroy(h);
	if (s)
		fs_destroy(s);
	return same;
}

struct recv_seen {
	bool rs_copy, rs_receiving;
};

static int recv_seen_one(void *arg, const struct pool_ds_info *di)
{
	struct recv_seen *rs = arg;
	if (strcmp(di->di_name, "copy") == 0) {
		rs->rs_copy = true;
		rs->rs_receiving = di->di_receiving;
	}
	return 0;
}

/* Image at cut g of the target's leaf: imported (the cut-off receive undone or finished by the
 * import), checked, and "copy" either absent (cut in the full receive before its snapshot), or
 * at s0 whole, or at s1 whole with s0 beside it, never half. */
static bool recv_crash_verify(struct blk_dev *leaf, uint64_t g, enum blk_fault_mode mode,
                              uint64_t seed, struct pool *src, unsigned *states)
{
	struct blk_dev *img[1] = {NULL};
	struct pool_open_opts o = {0};
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 60000;
	struct pool *p = NULL;
	bool ok = crash_cut_import(&leaf, 1, g, mode, seed, &o, img, &p);
	if (p) {
		struct recv_seen rs = {0};
		CHECK(pool_ds_list(p, recv_seen_one, &rs) == 0);
		bool has_s1 = false, has_s0 = false;
		struct fs *t = NULL;
		if (pool_fs_open(p, "copy@s1", 89, &t) == 0) {
			has_s1 = true;
			fs_destroy(t);
		}
		if (pool_fs_open(p, "copy@s0", 90, &t) == 0) {
			has_s0 = true;
			fs_destroy(t);
		}
		if (rs.rs_receiving) {
			printf("#   cut %" PRIu64 " mode %d: still marked receiving\n", g, mode);
			ok = false;
		} else if (!rs.rs_copy) {
			states[0]++;
		} else if (has_s1) {
			ok = ok && has_s0 && fs_holds(p, "copy", src, "fs@s1") &&
			     fs_holds(p, "copy@s1", src, "fs@s1") && fs_holds(p, "copy@s0", src, "fs@s0");
			states[2]++;
		} else {
			ok = ok && has_s0 && fs_holds(p, "copy", src, "fs@s0") &&
			     fs_holds(p, "copy@s0", src, "fs@s0");
			states[1]++;
		}
		if (!ok)
			printf("#   cut %" PRIu64 " mode %d: copy is %s (s0 %d, s1 %d)\n", g, mode,
			       rs.rs_copy ? "there" : "absent", has_s0, has_s1);
		for (int w = 0; w < 2000 && pool_destroy_queued(p) > 0; w++)
			(void)!pool_txg_wait_synced(p, 0);
		if (pool_check(p, report_print, NULL) != 0)
			ok = false;
		pool_close(p);
	}
	blk_dev_close(img[0]);
	return ok;
}

static void test_receive_crash(void)
{
	struct blk_dev *da = mem_dev(96 * MIB), *leaf = NULL;
	VERIFY(blk_dev_create_fault(96 * MIB, &leaf) == 0);
	struct pool *a = pool_new(da, "src", true), *b = pool_new(leaf, "dst", false);
	struct fs *fs = NULL;
	char err[256];
	CHECK(pool_fs_open(a, "fs", 77, &fs) == 0);
	if (!fs)
		goto out;
	make_tree(fs);
	snap(a, "fs@s0");
	change_tree(fs, 1);
	change_tree(fs, 2);
	snap(a, "fs@s1");
	fs_destroy(fs);
	int full = send_to_fd(a, "fs@s0", NULL), inc = send_to_fd(a, "fs@s1", "@s0");
	CHECK(full >= 0 && inc >= 0);
	uint64_t start = blk_fault_global_seq();
	CHECK(recv_from_fd(b, "copy", false, full, err, sizeof(err)) == 0);
	CHECK(recv_from_fd(b, "copy", false, inc, err, sizeof(err)) == 0);
	pool_close(b); /* the crash */
	b = NULL;
	struct crash_plan plan;
	crash_plan_init(&plan, &leaf, 1, start, 24, 0x5e4d);
	unsigned images = 0, failed = 0, states[3] = {0};
	for (unsigned c = 0; c < plan.cp_ncuts && failed <= 4; c++) {
		uint64_t g = crash_plan_cut(&plan, c);
		for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER; mode++) {
			images++;
			failed += !recv_crash_verify(leaf, g, (enum blk_fault_mode)mode,
			                             c * 7 + (uint64_t)mode, a, states);
		}
	}
	CHECKF(failed == 0, "%u of %u images failed", failed, images);
	CHECKF(states[0] > 0 && states[1] > 0 && states[2] > 0,
	       "cuts in every phase: %u none, %u at s0, %u at s1", states[0], states[1], states[2]);
	printf("#   %u cut points (%zu flush events), %u images: %u without copy, %u at s0, %u at "
	       "s1\n",
	       plan.cp_ncuts, plan.cp_nflush, images, states[0], states[1], states[2]);
	crash_plan_fini(&plan);
	if (full >= 0)
		close(full);
	if (inc >= 0)
		close(inc);
out:
	if (b)
		CHECK(pool_export(b) == 0);
	CHECK(pool_export(a) == 0);
	blk_dev_close(da);
	blk_dev_close(leaf);
}

int main(void)
{
	TAP_RUN(test_send_receive);
	TAP_RUN(test_receive_refused);
	TAP_RUN(test_send_stored);
	TAP_RUN(test_send_read_ahead);
	TAP_RUN(test_send_many);
	TAP_RUN(test_receive_crash);
	return tap_finish();
}
