/* shale_pool_vdev.c: `shale pool attach`, `detach`, `replace` and `add`, the verbs that change a
 * pool's vdevs, in the manner of zpool(8):
 *
 *   shale pool add NAME [mirror] VDEV... [-d DIR] [--size BYTES] [--force]
 *   shale pool attach NAME EXISTING NEW [-d DIR] [--size BYTES] [--force]
 *   shale pool detach NAME LEAF [-d DIR]
 *   shale pool replace NAME OLD NEW [-d DIR] [--size BYTES] [--force] [--discard-log]
 *
 * Model: like the other pool verbs, each works on the pool's leaves found in DIR, with no
 * resident daemon (a pool that `shale serve` holds is refused: its leaves are locked). The label
 * work is the pool's (src/pool/pool_vdev.c); what is here opens the leaves, and after an attach
 * imports the pool with the new leaf and runs the check that copies every block onto it (the
 * resilver), as zpool attach starts one. replace is attach, that check, then detach of OLD once
 * the check found no problem; run again after an interruption, it goes on from where it was.
 * replace --discard-log is the way back for a pool whose log device is lost (it cannot be
 * imported): the log vdev becomes NEW alone and the lost log's records are discarded.
 * A leaf is named by its path (as the pool was given it, or any path to the same file) or by
 * the guid `shale pool status` prints for a missing one. NEW is created with --size when it does
 * not exist; it belongs in DIR, where later commands look for the pool's leaves. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blk/blk.h"
#include "shale_pool.h"
#include "pool/pool.h"

/* A new leaf: one of vc_devs, or opened on its own (vn_own). */
struct vdev_new {
	struct blk_dev *vn_dev;
	bool vn_own;
	const char *vn_created; /* the path, when this command created the file */
};

/* The pool's leaves found in DIR, open, and the new ones. */
struct vdev_cmd {
	const char *vc_cmd; /* "shale pool attach" ... */
	const char *vc_dir;
	const char *vc_name;
	struct blk_dev *vc_devs[POOL_CMD_MAX_LEAVES];
	unsigned vc_ndevs;
	struct vdev_new vc_new[BLK_MIRROR_MAX];
	unsigned vc_nnew;
	struct pool_open_opts vc_opts;
};

/* Closes the new leaves; with forget, removes the files this command created for them (nothing
 * refers to them when the change was refused). */
static void vdev_cmd_close_new(struct vdev_cmd *vc, bool forget)
{
	for (unsigned i = 0; i < vc->vc_nnew; i++) {
		struct vdev_new *vn = &vc->vc_new[i];
		if (vn->vn_own)
			blk_dev_close(vn->vn_dev);
		if (forget && vn->vn_own && vn->vn_created)
			(void)unlink(vn->vn_created);
		memset(vn, 0, sizeof(*vn));
	}
	vc->vc_nnew = 0;
}

static void vdev_cmd_close(struct vdev_cmd *vc)
{
	for (unsigned i = 0; i < vc->vc_ndevs; i++)
		blk_dev_close(vc->vc_devs[i]);
	vc->vc_ndevs = 0;
	vdev_cmd_close_new(vc, false);
}

static bool vdev_cmd_same_file(const char *a, const char *b)
{
	char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
	bool same = ra && rb && strcmp(ra, rb) == 0;
	free(ra);
	free(rb);
	return same;
}

/* Opens the leaves of the pool in DIR. */
static int vdev_cmd_open(struct vdev_cmd *vc)
{
	struct pool_leaves leaves;
	int rc = pool_find_leaves(vc->vc_dir, vc->vc_name, &leaves);
	if (rc < 0) {
		fprintf(stderr, "%s: cannot read %s: %s\n", vc->vc_cmd, vc->vc_dir,
		        sh_strerror(rc));
		return rc;
	}
	if (leaves.pl_count == 0) {
		fprintf(stderr, "%s: no leaf of pool '%s' found in %s%s\n", vc->vc_cmd, vc->vc_name,
		        vc->vc_dir,
		        leaves.pl_busy ? "; some leaves there are in use (a running `shale serve`?)"
		                       : "");
		pool_leaves_fini(&leaves);
		return -ENOENT;
	}
	for (unsigned i = 0; i < leaves.pl_count && rc == 0; i++) {
		rc = blk_dev_open_file(leaves.pl_paths[i], 0, &vc->vc_devs[vc->vc_ndevs]);
		if (rc < 0)
			fprintf(stderr, "%s: cannot open %s: %s\n", vc->vc_cmd, leaves.pl_paths[i],
			        rc == -EBUSY ? "in use by another process" : sh_strerror(rc));
		else
			vc->vc_ndevs++;
	}
	pool_leaves_fini(&leaves);
	return rc;
}

/* Opens (with size > 0, creates when missing) a new leaf as vc_new[vc_nnew]; one found in DIR
 * already is that device. */
static int vdev_cmd_open_new(struct vdev_cmd *vc, const char *path, uint64_t size)
{
	struct vdev_new *vn = &vc->vc_new[vc->vc_nnew];
	for (unsigned i = 0; i < vc->vc_ndevs; i++) {
		if (vdev_cmd_same_file(path, blk_dev_path(vc->vc_devs[i]))) {
			vn->vn_dev = vc->vc_devs[i];
			vc->vc_nnew++;
			return 0;
		}
	}
	struct stat st;
	bool exists = stat(path, &st) == 0;
	if (!exists && size == 0) {
		fprintf(stderr, "%s: %s does not exist (give --size to create it)\n", vc->vc_cmd,
		        path);
		return -ENOENT;
	}
	int rc = blk_dev_open_file(path, exists ? 0 : size, &vn->vn_dev);
	if (rc < 0) {
		fprintf(stderr, "%s: cannot %s %s: %s\n", vc->vc_cmd, exists ? "open" : "create",
		        path, rc == -EBUSY ? "in use by another process" : sh_strerror(rc));
		return rc;
	}
	vn->vn_own = true;
	vn->vn_created = exists ? NULL : path;
	vc->vc_nnew++;
	char dir_copy[PATH_MAX];
	snprintf(dir_copy, sizeof(dir_copy), "%s", path);
	if (!vdev_cmd_same_file(dirname(dir_copy), vc->vc_dir))
		fprintf(stderr,
		        "%s: note: %s is not in %s, where the commands look for the pool's "
		        "leaves; give them -d with a directory that holds them all\n",
		        vc->vc_cmd, path, vc->vc_dir);
	return 0;
}

/* Every open leaf that carries the pool's label (a detached one was wiped), the new ones
 * included. */
static unsigned vdev_cmd_labelled(struct vdev_cmd *vc, struct blk_dev **out)
{
	struct blk_engine *engine = NULL;
	struct blk_label *label = mem_alloc(sizeof(*label));
	unsigned n = 0;
	if (label && blk_engine_create(4, &engine) == 0) {
		for (unsigned i = 0; i < vc->vc_ndevs + vc->vc_nnew; i++) {
			const struct vdev_new *vn = &vc->vc_new[i - SH_MIN(i, vc->vc_ndevs)];
			struct blk_dev *d = i < vc->vc_ndevs ? vc->vc_devs[i]
			                    : vn->vn_own     ? vn->vn_dev
			                                     : NULL;
			if (d && blk_label_read(engine, d, label) == 0 &&
			    strcmp(label->lb_pool_name, vc->vc_name) == 0)
				out[n++] = d;
		}
		blk_engine_destroy(engine);
	}
	mem_free(label);
	return n;
}

static void vdev_cmd_report(void *arg, const char *line)
{
	(void)arg;
	printf("  %s\n", line);
}

/* Imports the pool from its labelled leaves; with resilver, checks it (copying every block onto
 * stale leaves); with status, prints its status; exports. Returns the check's problems (0
 * without one), or a negative errno. */
static int64_t vdev_cmd_import_check(struct vdev_cmd *vc, bool resilver, bool status)
{
	struct blk_dev *devs[POOL_CMD_MAX_LEAVES + BLK_MIRROR_MAX];
	unsigned n = vdev_cmd_labelled(vc, devs);
	struct pool *p = NULL;
	int rc = n > 0 ? pool_import_devs(devs, n, &vc->vc_opts, &p) : -ENOENT;
	if (rc < 0) {
		fprintf(stderr, "%s: cannot import pool %s: %s\n", vc->vc_cmd, vc->vc_name,
		        sh_strerror(rc));
		return rc;
	}
	int64_t problems = 0;
	if (resilver) {
		problems = pool_check(p, vdev_cmd_report, NULL);
		if (problems < 0)
			fprintf(stderr, "%s: the check stopped: %s\n", vc->vc_cmd,
			        sh_strerror((int)problems));
		else
			printf("pool %s: %" PRId64 " problem%s\n", vc->vc_name, problems,
			       problems == 1 ? "" : "s");
	}
	if (status && pool_status_print(p, stdout) < 0 && problems == 0)
		problems = -EIO;
	rc = pool_export(p);
	if (rc < 0) {
		fprintf(stderr, "%s: the pool's last txg could not be written: %s\n", vc->vc_cmd,
		        sh_strerror(rc));
		return rc;
	}
	return problems;
}

/* shale pool add NAME [mirror] VDEV...: the operands after NAME. */
static int vdev_cmd_add(struct vdev_cmd *vc, int n, char **paths, uint64_t size, bool force)
{
	bool mirror = n > 0 && strcmp(paths[0], "mirror") == 0;
	if (mirror) {
		n--;
		paths++;
	}
	if (n < 1 || n > (int)BLK_MIRROR_MAX || (mirror ? n < 2 : n != 1)) {
		fprintf(stderr, "%s: give one VDEV, or `mirror` and 2 to %u of them\n", vc->vc_cmd,
		        BLK_MIRROR_MAX);
		return 2;
	}
	char err[1536] = "";
	int status = 1;
	if (vdev_cmd_open(vc) < 0)
		goto out;
	for (int i = 0; i < n; i++)
		if (vdev_cmd_open_new(vc, paths[i], size) < 0)
			goto out_forget;
	struct blk_dev *news[BLK_MIRROR_MAX];
	for (unsigned i = 0; i < vc->vc_nnew; i++)
		news[i] = vc->vc_new[i].vn_dev;
	int rc = pool_vdev_add(vc->vc_devs, vc->vc_ndevs, &vc->vc_opts, news, vc->vc_nnew, force,
	                       err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", vc->vc_cmd, err[0] ? err : sh_strerror(rc));
		goto out_forget;
	}
	printf("added %s%s to pool %s\n", mirror ? "a mirror of " : "", paths[0], vc->vc_name);
	status = vdev_cmd_import_check(vc, false, true) == 0 ? 0 : 1;
	goto out;
out_forget:
	vdev_cmd_close_new(vc, true);
out:
	vdev_cmd_close(vc);
	return status;
}

static void vdev_cmd_usage(FILE *out)
{
	fprintf(
	    out,
	    "usage:\n"
	    "  shale pool attach NAME EXISTING NEW [-d DIR] [--size BYTES] [--force]\n"
	    "      NEW becomes another side of EXISTING's mirror (a plain vdev becomes one);\n"
	    "      every block is then copied onto it (resilver)\n"
	    "  shale pool add NAME [mirror] VDEV... [-d DIR] [--size BYTES] [--force]\n"
	    "      a new top-level vdev: more space (--force: another redundancy than the pool's)\n"
	    "  shale pool detach NAME LEAF [-d DIR]\n"
	    "      takes LEAF (present or missing) out of its mirror\n"
	    "  shale pool replace NAME OLD NEW [-d DIR] [--size BYTES] [--force] [--discard-log]\n"
	    "      attach NEW beside OLD, resilver, detach OLD (OLD may be missing);\n"
	    "      --discard-log: the log device OLD is lost for good, and with it its records\n"
	    "  a leaf is named by its path or by the guid `shale pool status` shows;\n"
	    "  --size creates NEW when it does not exist; --force takes a NEW holding\n"
	    "  another pool's labels; DIR holds the pool's leaves (default " POOL_CMD_DEFAULT_DIR
	    ")\n");
}

int shale_pool_vdev_main(const char *verb, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'}, {"size", required_argument, NULL, 's'},
	    {"force", no_argument, NULL, 'f'},     {"discard-log", no_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
	};
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "shale pool %s", verb);
	struct vdev_cmd vc = {.vc_cmd = cmd, .vc_dir = POOL_CMD_DEFAULT_DIR};
	shale_cmd_pool_opts(&vc.vc_opts);
	uint64_t size = 0;
	bool force = false, discard_log = false;
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "d:s:fDh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': vc.vc_dir = optarg; break;
		case 's':
			if (shale_parse_bytes(optarg, &size) < 0) {
				fprintf(stderr, "%s: bad size '%s'\n", cmd, optarg);
				return 2;
			}
			break;
		case 'f': force = true; break;
		case 'D': discard_log = true; break;
		case 'h': vdev_cmd_usage(stdout); return 0;
		default: vdev_cmd_usage(stderr); return 2;
		}
	}
	bool detach = strcmp(verb, "detach") == 0, replace = strcmp(verb, "replace") == 0;
	if (strcmp(verb, "add") == 0) {
		if (discard_log || optind >= argc) {
			vdev_cmd_usage(stderr);
			return 2;
		}
		vc.vc_name = argv[optind];
		return vdev_cmd_add(&vc, argc - optind - 1, argv + optind + 1, size, force);
	}
	int operands = detach ? 2 : 3;
	if (argc - optind != operands || (discard_log && !replace)) {
		vdev_cmd_usage(stderr);
		return 2;
	}
	vc.vc_name = argv[optind];
	const char *leaf = argv[optind + 1];
	const char *new_path = detach ? NULL : argv[optind + 2];
	char err[1536] = "";
	int status = 1;
	if (vdev_cmd_open(&vc) < 0)
		goto out;
	if (detach) {
		int rc =
		    pool_vdev_detach(vc.vc_devs, vc.vc_ndevs, &vc.vc_opts, leaf, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
			goto out;
		}
		printf("detached %s from pool %s\n", leaf, vc.vc_name);
		status = vdev_cmd_import_check(&vc, false, true) == 0 ? 0 : 1;
		goto out;
	}
	if (vdev_cmd_open_new(&vc, new_path, size) < 0)
		goto out;
	/* the new leaf goes in with the others when it carries this pool's labels (a replace
	 * interrupted after its attach); otherwise the import would refuse it */
	struct blk_dev *devs[POOL_CMD_MAX_LEAVES + BLK_MIRROR_MAX];
	unsigned n = vdev_cmd_labelled(&vc, devs);
	int rc;
	if (discard_log) {
		rc = pool_vdev_replace_lost_log(devs, n, leaf, vc.vc_new[0].vn_dev, force, err,
		                                sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
			vdev_cmd_close_new(&vc, true);
			goto out;
		}
		printf("replaced the lost log device %s with %s in pool %s; its records are "
		       "discarded\n",
		       leaf, new_path, vc.vc_name);
		status = vdev_cmd_import_check(&vc, true, true) == 0 ? 0 : 1;
		goto out;
	}
	rc = pool_vdev_attach(devs, n, &vc.vc_opts, leaf, vc.vc_new[0].vn_dev, force, err,
	                      sizeof(err));
	if (rc == -ENXIO)
		fprintf(stderr,
		        "%s: a vdev has no leaf present; if it is the log device, lost for "
		        "good, `replace --discard-log` puts a new one in its place (stable "
		        "changes not yet in a txg are lost)\n",
		        cmd);
	if (rc == -EALREADY && replace) {
		printf("%s is attached beside %s already: going on with the resilver\n", new_path,
		       leaf);
	} else if (rc < 0) {
		fprintf(stderr, "%s: %s\n", cmd, err[0] ? err : sh_strerror(rc));
		vdev_cmd_close_new(&vc, true);
		goto out;
	} else {
		printf("attached %s beside %s in pool %s; resilvering\n", new_path, leaf,
		       vc.vc_name);
	}
	int64_t problems = vdev_cmd_import_check(&vc, true, !replace);
	if (problems != 0) {
		fprintf(stderr,
		        "%s: the check did not end clean: %s stays STALE%s; mend what it reports "
		        "and run "
		        "`shale pool check %s`%s\n",
		        cmd, new_path, replace ? " and is not detached" : "", vc.vc_name,
		        replace ? ", then this command again" : "");
		goto out;
	}
	if (!replace) {
		status = 0;
		goto out;
	}
	n = vdev_cmd_labelled(&vc, devs);
	rc = pool_vdev_detach(devs, n, &vc.vc_opts, leaf, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "%s: %s is resilvered, but %s could not be detached: %s\n", cmd,
		        new_path, leaf, err[0] ? err : sh_strerror(rc));
		goto out;
	}
	printf("replaced %s with %s in pool %s\n", leaf, new_path, vc.vc_name);
	status = vdev_cmd_import_check(&vc, false, true) == 0 ? 0 : 1;
out:
	vdev_cmd_close(&vc);
	return status;
}
