/* pool_find.c: finding a pool's leaves by name in a directory, the way `zpool import -d DIR`
 * does: every regular file or block device there whose label names the pool; and the names of
 * the pools there (`shale pool list`). Used by the `shale pool`/`shale fs` commands and by
 * `shale serve`, which import pools by name.
 *
 * Labels are read through read-only opens (blk_dev_open_file_read_only), which need no write
 * permission and share their lock with other readers (a `shale pool status` running meanwhile).
 * A leaf that a writer has open (locked, see blk_dev_open_file) cannot be read and is counted as
 * busy rather than silently skipped, so that the caller can say the pool is in use. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "blk/blk.h"
#include "pool/pool_impl.h"

#define POOL_FIND_MAX_LEAVES 256u

void pool_leaves_fini(struct pool_leaves *leaves)
{
	for (unsigned i = 0; i < leaves->pl_count; i++)
		mem_free(leaves->pl_paths[i]);
	mem_free(leaves->pl_paths);
	memset(leaves, 0, sizeof(*leaves));
}

/* Calls fn for every regular file or block device in dir that carries a valid pool label, with
 * its path and label; counts in *busy those another user holds (locked: unreadable). fn returns
 * 0 to go on, or -errno to stop with it. */
static int pool_find_scan(const char *dir,
                          int (*fn)(void *arg, const char *path, const struct blk_label *label),
                          void *arg, unsigned *busy)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	struct blk_engine *engine = NULL;
	struct blk_label *label = mem_alloc(sizeof(*label));
	int rc = label ? blk_engine_create(8, &engine) : -ENOMEM;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
			continue;
		struct stat st;
		if (stat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
			continue;
		struct blk_dev *dev = NULL;
		int orc = blk_dev_open_file_read_only(path, &dev);
		if (orc == -EBUSY) {
			(*busy)++;
			continue;
		}
		if (orc < 0)
			continue;
		bool labelled = blk_label_read(engine, dev, label) == 0;
		blk_dev_close(dev);
		if (labelled)
			rc = fn(arg, path, label);
	}
	mem_free(label);
	if (engine)
		blk_engine_destroy(engine);
	closedir(d);
	return rc;
}

struct pool_find_leaves_arg {
	const char *fa_name;
	struct pool_leaves *fa_out;
};

static int pool_find_leaves_one(void *arg, const char *path, const struct blk_label *label)
{
	struct pool_find_leaves_arg *fa = arg;
	struct pool_leaves *out = fa->fa_out;
	if (strcmp(label->lb_pool_name, fa->fa_name) != 0 || out->pl_count == POOL_FIND_MAX_LEAVES)
		return 0;
	out->pl_paths[out->pl_count] = mem_strdup(path);
	if (!out->pl_paths[out->pl_count])
		return -ENOMEM;
	out->pl_count++;
	return 0;
}

int pool_find_leaves(const char *dir, const char *name, struct pool_leaves *out)
{
	memset(out, 0, sizeof(*out));
	out->pl_paths = mem_zalloc(sizeof(char *) * POOL_FIND_MAX_LEAVES);
	if (!out->pl_paths)
		return -ENOMEM;
	struct pool_find_leaves_arg fa = {.fa_name = name, .fa_out = out};
	int rc = pool_find_scan(dir, pool_find_leaves_one, &fa, &out->pl_busy);
	if (rc < 0)
		pool_leaves_fini(out);
	return rc;
}

void pool_names_fini(struct pool_names_found *names)
{
	for (unsigned i = 0; i < names->pn_count; i++)
		mem_free(names->pn_names[i]);
	mem_free(names->pn_names);
	memset(names, 0, sizeof(*names));
}

/* Adds name to the list unless it is there already. */
static int pool_names_add(struct pool_names_found *names, const char *name)
{
	for (unsigned i = 0; i < names->pn_count; i++)
		if (strcmp(names->pn_names[i], name) == 0)
			return 0;
	if (names->pn_count == POOL_FIND_MAX_LEAVES)
		return 0;
	names->pn_names[names->pn_count] = mem_strdup(name);
	if (!names->pn_names[names->pn_count])
		return -ENOMEM;
	names->pn_count++;
	return 0;
}

static int pool_names_one(void *arg, const char *path, const struct blk_label *label)
{
	(void)path;
	return pool_names_add(arg, label->lb_pool_name);
}

static int pool_names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int pool_find_names(const char *dir, struct pool_names_found *out)
{
	memset(out, 0, sizeof(*out));
	out->pn_names = mem_zalloc(sizeof(char *) * POOL_FIND_MAX_LEAVES);
	if (!out->pn_names)
		return -ENOMEM;
	unsigned busy = 0;
	int rc = pool_find_scan(dir, pool_names_one, out, &busy);
	/* served pools: their leaves are locked, their status sockets say their names */
	DIR *d = rc == 0 ? opendir(dir) : NULL;
	struct dirent *de;
	while (d && rc == 0 && (de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		static const char suffix[] = ".status";
		if (de->d_name[0] != '.' || len <= 1 + sizeof(suffix) - 1 ||
		    strcmp(de->d_name + len - (sizeof(suffix) - 1), suffix) != 0)
			continue;
		char name[POOL_NAME_MAX + 1];
		size_t nlen = len - 1 - (sizeof(suffix) - 1);
		if (nlen > POOL_NAME_MAX)
			continue;
		memcpy(name, de->d_name + 1, nlen);
		name[nlen] = '\0';
		if (pool_name_valid(name, POOL_NAME_MAX))
			rc = pool_names_add(out, name);
	}
	if (d)
		closedir(d);
	if (rc < 0) {
		pool_names_fini(out);
		return rc;
	}
	qsort(out->pn_names, out->pn_count, sizeof(*out->pn_names), pool_names_cmp);
	return 0;
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
	if (rc == -EBUSY)
		/* found while only read (a `shale pool status` meanwhile), or taken since */
		snprintf(err, err_len, "pool '%s' in %s is in use by another process (a running "
			 "`shale serve`, or a `shale pool` command reading it)", name, dir);
	else if (rc < 0)
		snprintf(err, err_len, "cannot import pool '%s' from %u leaves in %s: %s%s", name, leaves.pl_count,
			 dir, sh_strerror(rc),
			 leaves.pl_busy ? " (some leaves there are in use by another process)" : "");
	pool_leaves_fini(&leaves);
	return rc;
}
