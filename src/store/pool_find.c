/* pool_find.c: finding a pool's leaves by name in a directory, the way `zpool import -d DIR`
 * does: every regular file or block device there whose label names the pool. Used by the
 * `shale pool`/`shale fs` commands and by `shale serve`, which import pools by name.
 *
 * A leaf that another process has open (locked, see blk_dev_open_file) cannot be read and is
 * counted as busy rather than silently skipped, so that the caller can say the pool is in use. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "blk/blk.h"
#include "store/pool.h"

#define POOL_FIND_MAX_LEAVES 256u

void pool_leaves_fini(struct pool_leaves *leaves)
{
	for (unsigned i = 0; i < leaves->pl_count; i++)
		mem_free(leaves->pl_paths[i]);
	mem_free(leaves->pl_paths);
	memset(leaves, 0, sizeof(*leaves));
}

int pool_find_leaves(const char *dir, const char *name, struct pool_leaves *out)
{
	memset(out, 0, sizeof(*out));
	out->pl_paths = mem_zalloc(sizeof(char *) * POOL_FIND_MAX_LEAVES);
	if (!out->pl_paths)
		return -ENOMEM;
	DIR *d = opendir(dir);
	if (!d) {
		int rc = -errno;
		pool_leaves_fini(out);
		return rc;
	}
	struct blk_engine *engine = NULL;
	struct blk_label *label = mem_alloc(sizeof(*label));
	int rc = label ? blk_engine_create(8, &engine) : -ENOMEM;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL && out->pl_count < POOL_FIND_MAX_LEAVES) {
		if (de->d_name[0] == '.')
			continue;
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		struct stat st;
		if (stat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
			continue;
		struct blk_dev *dev = NULL;
		int orc = blk_dev_open_file(path, 0, &dev);
		if (orc == -EBUSY) {
			out->pl_busy++;
			continue;
		}
		if (orc < 0)
			continue;
		bool ours = blk_label_read(engine, dev, label) == 0 && strcmp(label->lb_pool_name, name) == 0;
		blk_dev_close(dev);
		if (!ours)
			continue;
		out->pl_paths[out->pl_count] = mem_strdup(path);
		if (!out->pl_paths[out->pl_count])
			rc = -ENOMEM;
		else
			out->pl_count++;
	}
	mem_free(label);
	if (engine)
		blk_engine_destroy(engine);
	closedir(d);
	if (rc < 0)
		pool_leaves_fini(out);
	return rc;
}

int pool_import_by_name(const char *dir, const char *name, const struct pool_open_opts *opts, struct pool **out,
			char *err, size_t err_len)
{
	struct pool_leaves leaves;
	int rc = pool_find_leaves(dir, name, &leaves);
	if (rc < 0) {
		snprintf(err, err_len, "cannot read %s: %s", dir, sh_strerror(rc));
		return rc;
	}
	if (leaves.pl_count == 0) {
		if (leaves.pl_busy > 0)
			snprintf(err, err_len,
				 "no leaf of pool '%s' found in %s; %u leaves there are in use by another process "
				 "(a running `shale serve`?)",
				 name, dir, leaves.pl_busy);
		else
			snprintf(err, err_len, "no leaf of pool '%s' found in %s", name, dir);
		pool_leaves_fini(&leaves);
		return -ENOENT;
	}
	rc = pool_import((const char *const *)leaves.pl_paths, leaves.pl_count, opts, out);
	if (rc < 0)
		snprintf(err, err_len, "cannot import pool '%s' from %u leaves in %s: %s%s", name, leaves.pl_count,
			 dir, sh_strerror(rc),
			 leaves.pl_busy ? " (some leaves there are in use by another process)" : "");
	pool_leaves_fini(&leaves);
	return rc;
}
