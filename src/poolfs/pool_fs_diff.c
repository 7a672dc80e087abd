/* pool_fs_diff.c: `shale fs diff` (zfs diff) on a pool: what changed between a snapshot of a
 * file system and a later snapshot of it, or the file system as it is, printed one path a line
 * as zfs diff prints them.
 *
 * The comparison is the zpl's (zpl_diff.c: its theory and its cost, both trees read whole).
 * This file opens the two datasets (pool_ds_open: a snapshot as a read-only dataset of its own,
 * the file system as it is, shared with whoever serves it) and reads each into a
 * zpl_diff_side in steps of POOL_FS_DIFF_STEP_RECORDS records under the pool lock, loading a
 * missing block without the lock (pool_block_read_sync) and resuming; then it compares them
 * without any lock. So on a served pool the NFS clients wait at most a step for the lock, and
 * the file system read as it is may change between steps (zpl_diff.c says what that does). It
 * neither attaches an owner nor opens the file system through pool_fs_open, whose attributes
 * carry the fsid of whoever serves it: reading the tree needs neither.
 *
 * Output (libzfs_diff.c's, without -F, -H or -t): "M\t/path", "+\t/path", "-\t/path",
 * "R\t/old -> /new", paths from the file system's root. A byte that is not printable ASCII, a
 * space or a backslash is written as a backslash and four octal digits (" " is "\0040", as
 * zfs diff's stream_bytes writes it), so every line stays one line. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pool/pool_impl.h"
#include "poolfs/pool_fs.h"
#include "zpl/zpl.h"

/* Records read per hold of the pool lock: a few milliseconds of scanning. */
#define POOL_FS_DIFF_STEP_RECORDS 4096u

/* Dataset name (fs or fs@snap) of pool p read into a new side (*side_out; the caller destroys
 * it). Returns 0 or -errno, with err saying why. */
static int pool_fs_diff_read(struct pool *p, const char *name, struct zpl_diff_side **side_out,
                             char *err, size_t err_len)
{
	*side_out = NULL;
	bool snapshot = strchr(name, '@') != NULL;
	struct pool_ds *ds;
	int rc = pool_ds_open(p, name, &ds);
	if (rc != 0) {
		if (rc == -ENOENT)
			snprintf(err, err_len, "%s/%s: no such %s", pool_name(p), name,
			         snapshot ? "snapshot" : "file system");
		else if (rc == -EBUSY)
			snprintf(err, err_len, "%s/%s is being destroyed", pool_name(p), name);
		else
			snprintf(err, err_len, "%s/%s: %s", pool_name(p), name, sh_strerror(rc));
		return rc;
	}
	struct zpl_diff_side *side = NULL;
	rc = zpl_diff_side_create(&side);
	for (bool done = false; rc == 0 && !done;) {
		struct blk_ptr missing;
		pool_lock(p);
		rc = zpl_diff_side_read(side, pool_ds_tree(ds), POOL_FS_DIFF_STEP_RECORDS, &done,
		                        &missing);
		pool_unlock(p);
		if (rc == -SH_ENEEDBLOCK)
			rc = pool_block_read_sync(p, &missing);
	}
	pool_ds_close(ds);
	if (rc != 0) {
		zpl_diff_side_destroy(side);
		snprintf(err, err_len, "%s/%s cannot be read: %s", pool_name(p), name,
		         rc == -EIO ? "a record or block is damaged (run shale pool check)"
		                    : sh_strerror(rc));
		return rc;
	}
	*side_out = side;
	return 0;
}

/* A path as zfs diff writes it (stream_bytes). */
static void pool_fs_diff_put_path(FILE *out, const char *path)
{
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if (*c > ' ' && *c != '\\' && *c < 0177)
			fputc(*c, out);
		else
			fprintf(out, "\\%04o", *c);
	}
}

static int pool_fs_diff_print(void *arg, const struct zpl_diff_entry *e)
{
	FILE *out = arg;
	fprintf(out, "%c\t", (char)e->zde_kind);
	pool_fs_diff_put_path(out, e->zde_path);
	if (e->zde_new_path) {
		fputs(" -> ", out);
		pool_fs_diff_put_path(out, e->zde_new_path);
	}
	return fputc('\n', out) == EOF ? -EIO : 0;
}

int pool_fs_diff(struct pool *p, const char *from, const char *to, FILE *out, char *err,
                 size_t err_len)
{
	char fs[POOL_DS_NAME_MAX + 1], snap[POOL_SNAP_NAME_MAX + 1];
	char to_fs[POOL_DS_NAME_MAX + 1], to_snap[POOL_SNAP_NAME_MAX + 1];
	err[0] = '\0';
	if (pool_snap_name_split(from, fs, snap) != 0) {
		snprintf(err, err_len, "'%s' does not name a snapshot (FS@SNAP)", from);
		return -EINVAL;
	}
	if (!to)
		to = fs;
	if (strchr(to, '@')) {
		if (pool_snap_name_split(to, to_fs, to_snap) != 0) {
			snprintf(err, err_len, "'%s' does not name a snapshot (FS@SNAP)", to);
			return -EINVAL;
		}
	} else if (snprintf(to_fs, sizeof(to_fs), "%s", to) >= (int)sizeof(to_fs)) {
		snprintf(err, err_len, "'%.*s...' does not name a file system", POOL_DS_NAME_MAX, to);
		return -EINVAL;
	}
	if (strcmp(fs, to_fs) != 0) {
		snprintf(err, err_len,
		         "%s/%s and %s/%s are not of one file system: diff compares a snapshot with a "
		         "later snapshot of its file system, or with the file system itself",
		         pool_name(p), from, pool_name(p), to);
		return -EXDEV;
	}
	struct zpl_diff_side *older = NULL, *newer = NULL;
	int rc = pool_fs_diff_read(p, from, &older, err, err_len);
	if (rc == 0)
		rc = pool_fs_diff_read(p, to, &newer, err, err_len);
	if (rc == 0) {
		rc = zpl_diff(older, newer, pool_fs_diff_print, out);
		if (rc == 0 && ferror(out))
			rc = -EIO;
		if (rc != 0)
			snprintf(err, err_len, "%s", sh_strerror(rc));
	}
	zpl_diff_side_destroy(newer);
	zpl_diff_side_destroy(older);
	return rc;
}
