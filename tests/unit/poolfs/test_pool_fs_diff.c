/* test_pool_fs_diff.c: unit tests of `shale fs diff` (src/zpl/zpl_diff.c, src/poolfs/
 * pool_fs_diff.c): a tree of files, directories, hard links and symlinks changed in every way
 * (contents, attributes only, renames within and across directories, a directory renamed with a
 * changed file inside, links added and removed, a file removed and another made under its name,
 * a directory removed with its file, names that need escaping) between two snapshots, checked
 * line by line in zfs diff's format, both ways, against the file system as it is, after an
 * import with a cache too small to hold either tree (every step misses), and with enough files
 * that reading takes many steps; and the refusals (another file system, a missing snapshot, a
 * file system where a snapshot is wanted). The changes go through the pool's fs.h back end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fs_fixture.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"
#include "tap.h"

static struct pool *pool_new(struct blk_dev *d, const struct pool_open_opts *o)
{
	struct pool_create_args a = {.pc_name = "tank", .pc_opts = o};
	struct pool *p = NULL;
	VERIFY(pool_create_on_devs(&a, &d, 1, NULL, 0, &p) == 0);
	VERIFY(pool_ds_create(p, "fs", NULL) == 0);
	VERIFY(pool_ds_create(p, "other", NULL) == 0);
	return p;
}

/* A pool on a new memory device (*d_out) of dev_bytes with file systems fs and other; fs opened
 * into *fs_out unless fs_out is NULL. */
static struct pool *pool_with_fs(uint64_t dev_bytes, struct blk_dev **d_out, struct fs **fs_out)
{
	*d_out = mem_dev(dev_bytes);
	struct pool_open_opts o = opts_fs(0);
	struct pool *p = pool_new(*d_out, &o);
	if (fs_out) {
		*fs_out = NULL;
		CHECK(pool_fs_open(p, "fs", 77, fs_out) == 0);
	}
	return p;
}

/* p exported and imported again from d with a cache far smaller than the trees, so that every
 * step of reading them misses; NULL when the import failed. */
static struct pool *pool_reimport_tiny(struct pool *p, struct blk_dev *d)
{
	CHECK(pool_export(p) == 0);
	struct pool_open_opts o = opts_fs(64 * KIB);
	p = NULL;
	CHECK(pool_import_devs(&d, 1, &o, &p) == 0);
	return p;
}

/* Exports p (if any), closes d and checks that every request completed exactly once. */
static void pool_done(struct pool *p, struct blk_dev *d)
{
	if (p)
		CHECK(pool_export(p) == 0);
	blk_dev_close(d);
	CHECK(bad_completions == 0);
}

static void snap(struct pool *p, const char *name)
{
	char err[256] = "";
	int rc = pool_snapshot_create(p, &name, 1, err, sizeof(err));
	CHECKF(rc == 0, "snapshot %s: %s", name, err);
}

/* pool_fs_diff's output into *text (free it); returns its status, err into err. */
static int diff_text(struct pool *p, const char *from, const char *to, char **text, char *err,
                     size_t err_len)
{
	size_t len = 0;
	*text = NULL;
	FILE *out = open_memstream(text, &len);
	VERIFY(out != NULL);
	int rc = pool_fs_diff(p, from, to, out, err, err_len);
	VERIFY(fclose(out) == 0);
	return rc;
}

/* Whether the diff from -> to is exactly want; prints both when not. */
static bool diff_is(struct pool *p, const char *from, const char *to, const char *want)
{
	char *got = NULL, err[512] = "";
	int rc = diff_text(p, from, to, &got, err, sizeof(err));
	bool same = rc == 0 && strcmp(got, want) == 0;
	if (!same) {
		printf("#   diff %s %s: %s\n#   got:\n%s#   want:\n%s", from, to ? to : "(live)",
		       rc == 0 ? "differs" : err, got ? got : "", want);
	}
	free(got);
	return same;
}

static void write_bytes(struct fs *fs, const struct fs_obj_id *f, uint64_t off, uint32_t len,
                        uint8_t byte)
{
	static uint8_t buf[2 * MIB];
	VERIFY(len <= sizeof(buf));
	memset(buf, byte, len);
	CHECK(op_write(fs, f, off, buf, len, FS_UNSTABLE, NULL) == 0);
}

/* The file system before: what test_tree's snapshot a holds. */
struct tree {
	struct fs_obj_id root, keep, mod, chmod, gone, d1, d2, moved, hl, olddir, inner_mod, rmdir,
	    same, linked, two, big;
};

static void tree_make(struct fs *fs, struct tree *t)
{
	CHECK(fs_root(fs, &t->root) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "keep", NULL, 0, &t->keep) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "mod", NULL, 0, &t->mod) == 0);
	write_bytes(fs, &t->mod, 0, 5000, 'm');
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "chmod", NULL, 0, &t->chmod) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "gone", NULL, 0, &t->gone) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &t->root, "d1", NULL, 0, &t->d1) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &t->root, "d2", NULL, 0, &t->d2) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->d1, "moved", NULL, 0, &t->moved) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->d1, "stay", NULL, 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "hl", NULL, 0, &t->hl) == 0);
	CHECK(op_link(fs, &t->hl, &t->d1, "hl2") == 0);
	CHECK(op_create(fs, FS_OP_SYMLINK, &t->root, "sym", "keep", 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &t->root, "olddir", NULL, 0, &t->olddir) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->olddir, "inner", NULL, 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->olddir, "inner_mod", NULL, 0, &t->inner_mod) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &t->root, "rmdir", NULL, 0, &t->rmdir) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->rmdir, "x", NULL, 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "same", NULL, 0, &t->same) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "linked", NULL, 0, &t->linked) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "two", NULL, 0, &t->two) == 0);
	CHECK(op_link(fs, &t->two, &t->d1, "two2") == 0);
	CHECK(op_create(fs, FS_OP_MKNOD, &t->d2, "fifo", NULL, FS_FIFO, NULL) == 0);
	/* many extents: the scan jumps over them */
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "big", NULL, 0, &t->big) == 0);
	write_bytes(fs, &t->big, 0, 2 * MIB, 'b');
}

/* The changes from snapshot a to snapshot b. */
static void tree_change(struct fs *fs, struct tree *t)
{
	struct fs_obj_id newd;
	write_bytes(fs, &t->mod, 100, 10, 'M');
	CHECK(op_setattr(fs, &t->chmod, -1, 0600, NULL) == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &t->root, "gone") == 0);
	CHECK(op_rename(fs, &t->d1, "moved", &t->d2, "moved2") == 0);
	write_bytes(fs, &t->hl, 0, 100, 'h');
	CHECK(op_remove(fs, FS_OP_REMOVE, &t->root, "sym") == 0);
	CHECK(op_rename(fs, &t->root, "olddir", &t->root, "newdir") == 0);
	write_bytes(fs, &t->inner_mod, 0, 10, 'i');
	CHECK(op_remove(fs, FS_OP_REMOVE, &t->rmdir, "x") == 0);
	CHECK(op_remove(fs, FS_OP_RMDIR, &t->root, "rmdir") == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &t->root, "same") == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "same", NULL, 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->d2, "new", NULL, 0, NULL) == 0);
	CHECK(op_create(fs, FS_OP_MKDIR, &t->root, "newd", NULL, 0, &newd) == 0);
	CHECK(op_create(fs, FS_OP_SYMLINK, &newd, "ln", "../keep", 0, NULL) == 0);
	CHECK(op_link(fs, &t->linked, &t->d2, "linked2") == 0);
	CHECK(op_remove(fs, FS_OP_REMOVE, &t->d1, "two2") == 0);
	CHECK(op_create(fs, FS_OP_CREATE, &t->root, "sp ace\\nl\n", NULL, 0, NULL) == 0);
}

/* zfs diff's lines for tree_change, in path order: "/" and the directories whose entries
 * changed are modified; a renamed directory is one rename, and of the files under it only the
 * one that changed has a line; a file with two links has a line per link. */
static const char tree_diff[] = "M\t/\n"
                                "M\t/chmod\n"
                                "M\t/d1\n"
                                "M\t/d1/hl2\n"
                                "R\t/d1/moved -> /d2/moved2\n"
                                "-\t/d1/two2\n"
                                "M\t/d2\n"
                                "+\t/d2/linked2\n"
                                "+\t/d2/new\n"
                                "-\t/gone\n"
                                "M\t/hl\n"
                                "M\t/linked\n"
                                "M\t/mod\n"
                                "+\t/newd\n"
                                "+\t/newd/ln\n"
                                "R\t/olddir -> /newdir\n"
                                "R\t/olddir/inner_mod -> /newdir/inner_mod\n"
                                "-\t/rmdir\n"
                                "-\t/rmdir/x\n"
                                "-\t/same\n"
                                "+\t/same\n"
                                "+\t/sp\\0040ace\\0134nl\\0012\n"
                                "-\t/sym\n"
                                "M\t/two\n";

/* The same changes seen from b to a. */
static const char tree_diff_back[] = "M\t/\n"
                                     "M\t/chmod\n"
                                     "M\t/d1\n"
                                     "M\t/d1/hl2\n"
                                     "+\t/d1/two2\n"
                                     "M\t/d2\n"
                                     "-\t/d2/linked2\n"
                                     "R\t/d2/moved2 -> /d1/moved\n"
                                     "-\t/d2/new\n"
                                     "+\t/gone\n"
                                     "M\t/hl\n"
                                     "M\t/linked\n"
                                     "M\t/mod\n"
                                     "-\t/newd\n"
                                     "-\t/newd/ln\n"
                                     "R\t/newdir -> /olddir\n"
                                     "R\t/newdir/inner_mod -> /olddir/inner_mod\n"
                                     "+\t/rmdir\n"
                                     "+\t/rmdir/x\n"
                                     "-\t/same\n"
                                     "+\t/same\n"
                                     "-\t/sp\\0040ace\\0134nl\\0012\n"
                                     "+\t/sym\n"
                                     "M\t/two\n";

static void test_tree(void)
{
	struct blk_dev *d;
	struct fs *fs;
	struct pool *p = pool_with_fs(64 * MIB, &d, &fs);
	if (!fs)
		goto out;
	struct tree t;
	tree_make(fs, &t);
	snap(p, "fs@a");
	tree_change(fs, &t);
	snap(p, "fs@b");
	CHECK(diff_is(p, "fs@a", "fs@b", tree_diff));
	CHECK(diff_is(p, "fs@b", "fs@a", tree_diff_back));
	CHECK(diff_is(p, "fs@a", "fs@a", ""));
	/* the file system as it is: the same as b until it changes */
	CHECK(diff_is(p, "fs@b", NULL, ""));
	CHECK(diff_is(p, "fs@a", "fs", tree_diff));
	write_bytes(fs, &t.keep, 0, 1, 'k');
	CHECK(diff_is(p, "fs@b", "fs", "M\t/keep\n"));
	fs_destroy(fs);
	p = pool_reimport_tiny(p, d);
	if (p) {
		CHECK(diff_is(p, "fs@a", "fs@b", tree_diff));
		CHECK(diff_is(p, "fs@b", "fs", "M\t/keep\n"));
		struct check_lines cl = {.cl_n = 0};
		CHECK(pool_check(p, report_keep, &cl) == 0);
	}
out:
	pool_done(p, d);
}

/* Enough files that each side takes many steps of POOL_FS_DIFF_STEP_RECORDS records. */
static void test_many(void)
{
	struct blk_dev *d;
	struct fs *fs;
	struct pool *p = pool_with_fs(128 * MIB, &d, &fs);
	if (!fs)
		goto out;
	struct fs_obj_id root, dirs[10];
	CHECK(fs_root(fs, &root) == 0);
	char name[32];
	for (unsigned i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "d%u", i);
		CHECK(op_create(fs, FS_OP_MKDIR, &root, name, NULL, 0, &dirs[i]) == 0);
		for (unsigned j = 0; j < 1000; j++) {
			snprintf(name, sizeof(name), "f%04u", j);
			CHECK(op_create(fs, FS_OP_CREATE, &dirs[i], name, NULL, 0, NULL) == 0);
		}
	}
	snap(p, "fs@a");
	/* every 100th file of d7 removed; d3/f0500 moved to d9 */
	for (unsigned j = 0; j < 1000; j += 100) {
		snprintf(name, sizeof(name), "f%04u", j);
		CHECK(op_remove(fs, FS_OP_REMOVE, &dirs[7], name) == 0);
	}
	CHECK(op_rename(fs, &dirs[3], "f0500", &dirs[9], "g0500") == 0);
	snap(p, "fs@b");
	char want[1024];
	size_t at = (size_t)snprintf(want, sizeof(want), "M\t/d3\nR\t/d3/f0500 -> /d9/g0500\nM\t/d7\n");
	for (unsigned j = 0; j < 1000; j += 100)
		at += (size_t)snprintf(want + at, sizeof(want) - at, "-\t/d7/f%04u\n", j);
	snprintf(want + at, sizeof(want) - at, "M\t/d9\n");
	CHECK(diff_is(p, "fs@a", "fs@b", want));
	fs_destroy(fs);
	p = pool_reimport_tiny(p, d);
	if (p)
		CHECK(diff_is(p, "fs@a", "fs", want));
out:
	pool_done(p, d);
}

/* What is refused, with the error saying so. */
static void test_refusals(void)
{
	struct blk_dev *d;
	struct fs *fs, *other = NULL;
	struct pool *p = pool_with_fs(64 * MIB, &d, &fs);
	CHECK(pool_fs_open(p, "other", 78, &other) == 0);
	snap(p, "fs@a");
	snap(p, "other@a");
	char *text = NULL, err[512] = "";
	CHECK(diff_text(p, "fs@a", "other@a", &text, err, sizeof(err)) == -EXDEV &&
	      strstr(err, "not of one file system"));
	free(text);
	CHECK(diff_text(p, "fs@a", "other", &text, err, sizeof(err)) == -EXDEV);
	free(text);
	CHECK(diff_text(p, "fs@nosuch", NULL, &text, err, sizeof(err)) == -ENOENT &&
	      strcmp(err, "tank/fs@nosuch: no such snapshot") == 0);
	free(text);
	CHECK(diff_text(p, "fs@a", "fs@nosuch", &text, err, sizeof(err)) == -ENOENT &&
	      strcmp(err, "tank/fs@nosuch: no such snapshot") == 0);
	free(text);
	CHECK(diff_text(p, "nofs@a", NULL, &text, err, sizeof(err)) == -ENOENT);
	free(text);
	CHECK(diff_text(p, "fs", NULL, &text, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "does not name a snapshot"));
	free(text);
	CHECK(diff_text(p, "fs@a/b", NULL, &text, err, sizeof(err)) == -EINVAL);
	free(text);
	if (fs)
		fs_destroy(fs);
	if (other)
		fs_destroy(other);
	pool_done(p, d);
}

/* A snapshot of a file system nobody had used yet (its tree empty, not even a root) reads as
 * an empty root directory. */
static void test_never_used(void)
{
	struct blk_dev *d;
	struct pool *p = pool_with_fs(64 * MIB, &d, NULL);
	snap(p, "fs@unused");
	CHECK(diff_is(p, "fs@unused", NULL, ""));
	struct fs *fs = NULL;
	CHECK(pool_fs_open(p, "fs", 77, &fs) == 0); /* formats it: a root, no entries */
	CHECK(diff_is(p, "fs@unused", NULL, ""));
	struct fs_obj_id root;
	if (fs) {
		CHECK(fs_root(fs, &root) == 0);
		CHECK(op_create(fs, FS_OP_CREATE, &root, "f", NULL, 0, NULL) == 0);
		CHECK(diff_is(p, "fs@unused", "fs", "M\t/\n+\t/f\n"));
		snap(p, "fs@used");
		CHECK(diff_is(p, "fs@used", "fs@unused", "M\t/\n-\t/f\n"));
		fs_destroy(fs);
	}
	pool_done(p, d);
}

int main(void)
{
	TAP_RUN(test_tree);
	TAP_RUN(test_many);
	TAP_RUN(test_refusals);
	TAP_RUN(test_never_used);
	return tap_finish();
}
