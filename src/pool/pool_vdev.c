/* pool_vdev.c: changing a pool's vdevs: attaching a leaf to a vdev (a plain disk becomes a
 * mirror, a mirror gets wider) and detaching one from a mirror, as zpool attach and detach do;
 * adding a top-level vdev, as zpool add does; and a new log vdev for a lost one. `shale pool
 * replace` is attach and detach in turn with a check between them (tools/shale_pool_vdev.c).
 *
 * Model. The configuration lives only in the labels (pool.c), each copy stamped with the
 * configuration txg it was written for, and import takes the newest copy among the leaves it is
 * given. A change is made on an exported pool and rewrites labels only:
 *   1. import and export, with the caller's options: the intent log is replayed, and the last
 *      uberblock lists the leaves that missed writes;
 *   2. read the labels and the newest uberblock of the leaves: its txg T and that list;
 *   3. edit the configuration; the new configuration txg is C = max(T, the old one) + 1, above
 *      every txg written so far and equal to the first txg the next import writes;
 *   4. write the labels. Attach: the new leaf's first, then every other present leaf's. Detach:
 *      every remaining present leaf's, then the detached leaf's are wiped (blk_label_wipe).
 *
 * Crashes. Each leaf's labels hold the old configuration or the new one, whole (blk_label_write
 * writes in two flushed phases). Import takes the newest: before the first new label is written
 * the change did not happen; after it, the change is whole, for import leaves out a leaf that
 * only the older configuration names (the detached leaf before its wipe) and rewrites the labels
 * of present leaves that still hold the older one.
 *
 * A new leaf holds none of the pool's blocks. Its configuration entry records added_txg = C, and
 * import marks a present child stale when its added_txg is above the txg of the uberblock it
 * imports (a crash before txg C: the pool's state predates the leaf) or when that uberblock lists
 * it (from txg C on, the pool writes the list of stale leaves into every uberblock). A stale
 * child is written like the others and read after them. pool_check rewrites every bad copy of
 * every block, which on a new leaf is every copy: a resilver (of all blocks, as a full scrub
 * does, not of ZFS's dirty-time-log ranges); a check that finds no problem clears the marks, and
 * the next txg records that. The intent log needs no copying: step 1 left nothing to replay,
 * later records go to every child, and replay tries each child of a mirror in turn.
 *
 * Detach safety: the children that remain must include one that is present and current (not on
 * T's list of stale leaves, not attached after T), which holds every block. A detached leaf that
 * was missing is not wiped; should it come back, the newer configuration of the others leaves
 * it out, and it alone imports as the pool it was a part of, at the state it last saw.
 *
 * A lost log vdev (pool_vdev_replace_lost_log). With every leaf of the log vdev missing no import
 * can succeed, so no step 1: the log vdev of the configuration is replaced by a new one (new guid,
 * the new leaf alone, the region of the same size, so the uberblocks' record of the region stays
 * true). Import then replays from the uberblock's position on the blank region, finds nothing
 * (the lost records are discarded: the administrator's choice, as zpool import -m), and the log
 * goes on from there; a leaf of the lost log vdev that comes back is named by no configuration
 * the pool takes.
 *
 * Adding a top-level vdev (pool_vdev_add): after steps 1 and 2, a vdev appended to the
 * configuration (index ntops: block pointers of the others keep their vdev numbers); the new
 * leaves' labels are written first, so any configuration that names them finds them labelled
 * (else a crash could leave a configuration naming a vdev with no leaf, which no import takes).
 * The allocator of the next import opens the last state, written for fewer vdevs, with the
 * larger geometry and takes the new one as all free (space.c, "Growth").
 *
 * Concurrency: none. The leaves are the caller's and the pool is not imported meanwhile (the
 * leaves of a pool that `shale serve` holds are locked, so the commands refuse it). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/pool_impl.h"

#define POOL_VDEV_ENGINE_DEPTH 16u
#define POOL_VDEV_MIN_DATA_BYTES (16ull << 20) /* a vdev added: at least this much data area */

/* The pool as its exported leaves describe it. */
struct pool_vdev_view {
	struct pool *vv_cfg;        /* configuration only (its engine is ours); pl_dev: present */
	struct blk_label *vv_label; /* the label holding the newest configuration */
	uint64_t vv_ub_txg;         /* the newest valid uberblock's txg */
	uint64_t vv_stale[POOL_UB_STALE_MAX]; /* the leaves it lists as having missed writes */
	unsigned vv_nstale;
};

/* Where a leaf is: its vdev, that vdev's index (UINT32_MAX for the log vdev), its child index. */
struct pool_vdev_place {
	struct pool_top *vp_top;
	uint32_t vp_top_index;
	unsigned vp_child;
};


/* Vdev k of the view: the top-level vdevs, then the log vdev. */
static unsigned pool_vdev_count(const struct pool *cfg)
{
	return cfg->p_ntops + (cfg->p_has_log ? 1u : 0u);
}

static struct pool_top *pool_vdev_top(struct pool *cfg, unsigned k, uint32_t *index_out)
{
	if (k < cfg->p_ntops) {
		*index_out = k;
		return &cfg->p_tops[k];
	}
	*index_out = UINT32_MAX;
	return &cfg->p_logtop;
}

static void pool_vdev_view_fini(struct pool_vdev_view *v)
{
	if (v->vv_cfg)
		pool_free_all(v->vv_cfg); /* destroys the engine; closes no leaf (none is owned) */
	mem_free(v->vv_label);
	memset(v, 0, sizeof(*v));
}

/* Step 1: import and export. */
static int pool_vdev_settle(struct blk_dev *const *devs, unsigned ndevs,
                            const struct pool_open_opts *opts, char *err, size_t err_len)
{
	struct pool *p = NULL;
	int rc = pool_import_devs(devs, ndevs, opts, &p);
	if (rc != 0) {
		pool_say(err, err_len, "cannot import the pool: %s", sh_strerror(rc));
		return rc;
	}
	rc = pool_export(p);
	if (rc != 0)
		pool_say(err, err_len, "cannot export the pool cleanly: %s", sh_strerror(rc));
	return rc;
}

/* Step 2: the newest configuration, the present leaves in it, the newest uberblock. */
static int pool_vdev_view_load(struct pool_vdev_view *v, struct blk_dev *const *devs,
                               unsigned ndevs, char *err, size_t err_len)
{
	memset(v, 0, sizeof(*v));
	struct blk_label *labels = mem_zalloc((size_t)ndevs * sizeof(*labels));
	struct blk_uberblock *ub = mem_alloc(sizeof(*ub));
	v->vv_cfg = pool_alloc(NULL);
	v->vv_label = mem_alloc(sizeof(*v->vv_label));
	int rc = labels && ub && v->vv_cfg && v->vv_label ? 0 : -ENOMEM;
	if (rc == 0)
		rc = blk_engine_create(POOL_VDEV_ENGINE_DEPTH, &v->vv_cfg->p_engine);
	struct blk_engine *engine = rc == 0 ? v->vv_cfg->p_engine : NULL;
	unsigned best = 0;
	for (unsigned k = 0; rc == 0 && k < ndevs; k++) {
		rc = blk_label_read(engine, devs[k], &labels[k]);
		if (rc != 0)
			pool_say(err, err_len, "%s has no valid pool label",
			              pool_dev_name(devs[k]));
		else if (labels[k].lb_config_txg > labels[best].lb_config_txg)
			best = k;
	}
	if (rc == 0) {
		*v->vv_label = labels[best];
		rc = pool_config_parse(v->vv_cfg, labels[best].lb_config,
		                       labels[best].lb_config_len);
		if (rc != 0)
			pool_say(err, err_len,
			              "the configuration in %s's labels does not parse",
			              pool_dev_name(devs[best]));
	}
	/* the present leaves; the newest uberblock among them (as import finds them) */
	bool have_ub = false;
	for (unsigned k = 0; rc == 0 && k < ndevs; k++) {
		struct pool_leaf *member = NULL;
		for (unsigned t = 0; t < pool_vdev_count(v->vv_cfg) && !member; t++) {
			uint32_t index;
			struct pool_top *top = pool_vdev_top(v->vv_cfg, t, &index);
			for (unsigned j = 0; j < top->pt_nchildren && !member; j++) {
				struct pool_leaf *l = &top->pt_leaves[j];
				if (l->pl_guid == labels[k].lb_leaf_guid &&
				    top->pt_guid == labels[k].lb_top_guid &&
				    index == labels[k].lb_top_index && !l->pl_dev)
					member = l;
			}
		}
		if (!member || labels[k].lb_pool_guid != v->vv_cfg->p_guid)
			continue; /* a former leaf (the import in step 1 accepted the set) */
		member->pl_dev = devs[k];
		int r = blk_uberblock_find_best(engine, devs[k], v->vv_cfg->p_guid, ub);
		if (r == 0 && (!have_ub || ub->ub_txg > v->vv_ub_txg)) {
			have_ub = true;
			v->vv_ub_txg = ub->ub_txg;
			v->vv_nstale = pool_ub_stale_decode(ub->ub_payload, v->vv_stale);
		}
	}
	if (rc == 0 && !have_ub) {
		pool_say(err, err_len, "no valid uberblock on the pool's leaves");
		rc = -EIO;
	}
	mem_free(labels);
	mem_free(ub);
	if (rc != 0)
		pool_vdev_view_fini(v);
	return rc;
}

/* Is name leaf l: its guid, its configured path, or (present) the path it is open by; a path
 * that exists also matches through realpath. */
static bool pool_vdev_name_is(const struct pool_leaf *l, const char *name)
{
	char guid[24];
	snprintf(guid, sizeof(guid), "%" PRIu64, l->pl_guid);
	if (strcmp(name, guid) == 0)
		return true;
	if (name[0] == '\0')
		return false;
	const char *open_path = l->pl_dev ? blk_dev_path(l->pl_dev) : "";
	if (strcmp(name, l->pl_path) == 0 || strcmp(name, open_path) == 0)
		return true;
	char *want = realpath(name, NULL);
	if (!want)
		return false;
	bool same = false;
	const char *paths[2] = {l->pl_path, open_path};
	for (unsigned i = 0; i < 2 && !same; i++) {
		char *have = paths[i][0] ? realpath(paths[i], NULL) : NULL;
		same = have && strcmp(want, have) == 0;
		free(have);
	}
	free(want);
	return same;
}

/* "path (guid N[, missing])" of every leaf, for a message. */
static void pool_vdev_list(struct pool *cfg, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = '\0';
	for (unsigned t = 0; t < pool_vdev_count(cfg); t++) {
		uint32_t index;
		struct pool_top *top = pool_vdev_top(cfg, t, &index);
		for (unsigned j = 0; j < top->pt_nchildren && len < cap; j++) {
			const struct pool_leaf *l = &top->pt_leaves[j];
			int n = snprintf(buf + len, cap - len, "%s%s (guid %" PRIu64 "%s)",
			                 len ? ", " : "", l->pl_path[0] ? l->pl_path : "(memory)",
			                 l->pl_guid, l->pl_dev ? "" : ", missing");
			if (n < 0)
				return;
			len += (size_t)n;
		}
	}
}

static int pool_vdev_find(struct pool_vdev_view *v, const char *name, struct pool_vdev_place *out,
                          char *err, size_t err_len)
{
	unsigned found = 0;
	for (unsigned t = 0; t < pool_vdev_count(v->vv_cfg); t++) {
		uint32_t index;
		struct pool_top *top = pool_vdev_top(v->vv_cfg, t, &index);
		for (unsigned j = 0; j < top->pt_nchildren; j++) {
			if (!pool_vdev_name_is(&top->pt_leaves[j], name))
				continue;
			if (found++ == 0)
				*out = (struct pool_vdev_place){top, index, j};
		}
	}
	if (found == 1)
		return 0;
	char list[1024];
	pool_vdev_list(v->vv_cfg, list, sizeof(list));
	pool_say(err, err_len, "%s '%s' in pool %s; its leaves: %s",
	              found == 0 ? "no leaf" : "more than one leaf is", name, v->vv_cfg->p_name,
	              list);
	return found == 0 ? -ENOENT : -EINVAL;
}

/* Does leaf l hold every block of the state at the view's uberblock? */
static bool pool_vdev_current(const struct pool_vdev_view *v, const struct pool_leaf *l)
{
	if (!l->pl_dev || l->pl_added_txg > v->vv_ub_txg)
		return false;
	for (unsigned i = 0; i < v->vv_nstale; i++)
		if (v->vv_stale[i] == l->pl_guid)
			return false;
	return true;
}

/* Step 4: the edited configuration into the labels of the leaf `first` or of every leaf of the
 * vdev `first_top` (when not NULL), then of every other present leaf. */
static int pool_vdev_relabel(struct pool_vdev_view *v, uint64_t config_txg,
                             const struct pool_leaf *first, const struct pool_top *first_top,
                             char *err, size_t err_len)
{
	struct pool *cfg = v->vv_cfg;
	char *text = mem_alloc(BLK_CONFIG_MAX_BYTES + 1);
	if (!text)
		return -ENOMEM;
	uint32_t len = 0;
	int rc = pool_config_build(cfg, text, &len);
	if (rc != 0)
		pool_say(err, err_len, "the new configuration does not fit a label");
	for (unsigned pass = 0; pass < 2 && rc == 0; pass++) {
		for (unsigned t = 0; t < pool_vdev_count(cfg) && rc == 0; t++) {
			uint32_t index;
			struct pool_top *top = pool_vdev_top(cfg, t, &index);
			for (unsigned j = 0; j < top->pt_nchildren && rc == 0; j++) {
				const struct pool_leaf *l = &top->pt_leaves[j];
				bool is_first = l == first || top == first_top;
				if (!l->pl_dev || (pass == 0) != is_first)
					continue;
				rc = pool_label_leaf(cfg, text, len, config_txg, l, top, index);
				if (rc != 0)
					pool_say(err, err_len,
					              "cannot write the labels of %s: %s",
					              pool_dev_name(l->pl_dev), sh_strerror(rc));
			}
		}
	}
	mem_free(text);
	return rc;
}

static uint64_t pool_vdev_config_txg(const struct pool_vdev_view *v)
{
	return SH_MAX(v->vv_ub_txg, v->vv_label->lb_config_txg) + 1;
}

/* A guid no leaf of the pool has. */
static int pool_vdev_new_guid(struct pool *cfg, uint64_t *out)
{
	for (;;) {
		uint64_t g = 0;
		int rc = sh_random_bytes(&g, sizeof(g));
		if (rc != 0)
			return rc;
		bool used = g == 0 || g == cfg->p_guid;
		for (unsigned t = 0; t < pool_vdev_count(cfg) && !used; t++) {
			uint32_t index;
			struct pool_top *top = pool_vdev_top(cfg, t, &index);
			used = top->pt_guid == g;
			for (unsigned j = 0; j < top->pt_nchildren && !used; j++)
				used = top->pt_leaves[j].pl_guid == g;
		}
		if (!used) {
			*out = g;
			return 0;
		}
	}
}

/* Refuses a new leaf for top that is too small for its data area, whose path holds a newline,
 * that is in use by this pool or, without force, holds another pool's labels. */
static int pool_vdev_new_leaf_ok(struct pool_vdev_view *v, const struct pool_top *top,
                                 struct blk_dev *new_dev, bool force, char *err, size_t err_len)
{
	uint64_t need = top->pt_data_bytes + 2ull * BLK_LABEL_AREA_BYTES;
	if (blk_dev_size(new_dev) < need) {
		pool_say(err, err_len,
		              "%s is too small: %" PRIu64 " bytes, the vdev needs %" PRIu64,
		              pool_dev_name(new_dev), blk_dev_size(new_dev), need);
		return -EINVAL;
	}
	if (strchr(blk_dev_path(new_dev), '\n')) {
		pool_say(err, err_len, "a leaf's path may not hold a newline");
		return -EINVAL;
	}
	struct blk_label *lb = mem_alloc(sizeof(*lb));
	if (!lb)
		return -ENOMEM;
	int rc = 0;
	if (blk_label_read(v->vv_cfg->p_engine, new_dev, lb) == 0) {
		bool ours = lb->lb_pool_guid == v->vv_cfg->p_guid;
		bool member = false;
		for (unsigned t = 0; ours && t < pool_vdev_count(v->vv_cfg) && !member; t++) {
			uint32_t index;
			const struct pool_top *vt = pool_vdev_top(v->vv_cfg, t, &index);
			for (unsigned j = 0; j < vt->pt_nchildren && !member; j++)
				member = vt->pt_leaves[j].pl_guid == lb->lb_leaf_guid;
		}
		if (member) {
			pool_say(err, err_len, "%s is a leaf of pool %s already",
			              pool_dev_name(new_dev), v->vv_cfg->p_name);
			rc = -EEXIST;
		} else if (!ours && !force) {
			pool_say(
			    err, err_len,
			    "%s holds the labels of pool %s (use --force to overwrite it)",
			    pool_dev_name(new_dev), lb->lb_pool_name);
			rc = -EBUSY;
		}
	}
	mem_free(lb);
	return rc;
}

/* Steps 1 and 2, and the leaf called name: on success the caller finishes the view. */
static int pool_vdev_begin(struct blk_dev *const *devs, unsigned ndevs,
                           const struct pool_open_opts *opts, const char *name,
                           struct pool_vdev_view *v, struct pool_vdev_place *at, char *err,
                           size_t err_len)
{
	if (!devs || ndevs == 0 || !name)
		return -EINVAL;
	int rc = pool_vdev_settle(devs, ndevs, opts, err, err_len);
	if (rc == 0)
		rc = pool_vdev_view_load(v, devs, ndevs, err, err_len);
	if (rc != 0)
		return rc;
	rc = pool_vdev_find(v, name, at, err, err_len);
	if (rc != 0)
		pool_vdev_view_fini(v);
	return rc;
}

int pool_vdev_attach(struct blk_dev *const *devs, unsigned ndevs, const struct pool_open_opts *opts,
                     const char *existing, struct blk_dev *new_dev, bool force, char *err,
                     size_t err_len)
{
	if (!new_dev)
		return -EINVAL;
	struct pool_vdev_view v;
	struct pool_vdev_place at;
	int rc = pool_vdev_begin(devs, ndevs, opts, existing, &v, &at, err, err_len);
	if (rc != 0)
		return rc;
	struct pool_top *top = at.vp_top;
	for (unsigned t = 0; t < pool_vdev_count(v.vv_cfg); t++) {
		uint32_t index;
		struct pool_top *other = pool_vdev_top(v.vv_cfg, t, &index);
		for (unsigned j = 0; j < other->pt_nchildren; j++) {
			if (other->pt_leaves[j].pl_dev != new_dev)
				continue;
			pool_say(err, err_len, "%s is a leaf of pool %s already%s",
			              pool_dev_name(new_dev), v.vv_cfg->p_name,
			              other == top ? ", beside the one named" : "");
			rc = other == top ? -EALREADY : -EEXIST;
			goto out;
		}
	}
	if (top->pt_nchildren >= BLK_MIRROR_MAX) {
		pool_say(err, err_len, "the mirror of %s has %u children already", existing,
		              BLK_MIRROR_MAX);
		rc = -EOVERFLOW;
		goto out;
	}
	rc = pool_vdev_new_leaf_ok(&v, top, new_dev, force, err, err_len);
	if (rc != 0)
		goto out;
	const char *path = blk_dev_path(new_dev);
	uint64_t config_txg = pool_vdev_config_txg(&v);
	struct pool_leaf *l = &top->pt_leaves[top->pt_nchildren];
	rc = pool_vdev_new_guid(v.vv_cfg, &l->pl_guid);
	if (rc != 0)
		goto out;
	l->pl_path = mem_strdup(path);
	if (!l->pl_path) {
		rc = -ENOMEM;
		goto out;
	}
	l->pl_dev = new_dev;
	l->pl_added_txg = config_txg;
	top->pt_nchildren++;
	top->pt_mirror = true;
	rc = pool_vdev_relabel(&v, config_txg, l, NULL, err, err_len);
	if (rc == 0)
		log_info("pool %s: %s attached beside %s (configuration txg %" PRIu64 ")",
		         v.vv_cfg->p_name, pool_dev_name(new_dev), existing, config_txg);
out:
	pool_vdev_view_fini(&v);
	return rc;
}

int pool_vdev_detach(struct blk_dev *const *devs, unsigned ndevs, const struct pool_open_opts *opts,
                     const char *leaf, char *err, size_t err_len)
{
	struct pool_vdev_view v;
	struct pool_vdev_place at;
	int rc = pool_vdev_begin(devs, ndevs, opts, leaf, &v, &at, err, err_len);
	if (rc != 0)
		return rc;
	struct pool_top *top = at.vp_top;
	if (top->pt_nchildren < 2) {
		pool_say(
		    err, err_len,
		    "%s is the only leaf of its vdev: it cannot be detached (attach another "
		    "first, or replace it)",
		    leaf);
		rc = -EINVAL;
		goto out;
	}
	bool current_left = false;
	for (unsigned j = 0; j < top->pt_nchildren; j++)
		if (j != at.vp_child && pool_vdev_current(&v, &top->pt_leaves[j]))
			current_left = true;
	if (!current_left) {
		pool_say(err, err_len,
		              "no other leaf of the mirror of %s is present and holds every block "
		              "(stale or missing): run `shale pool check` first",
		              leaf);
		rc = -EBUSY;
		goto out;
	}
	struct blk_dev *gone = top->pt_leaves[at.vp_child].pl_dev;
	char *gone_path = top->pt_leaves[at.vp_child].pl_path;
	for (unsigned j = at.vp_child; j + 1 < top->pt_nchildren; j++)
		top->pt_leaves[j] = top->pt_leaves[j + 1];
	memset(&top->pt_leaves[top->pt_nchildren - 1], 0, sizeof(top->pt_leaves[0]));
	top->pt_nchildren--;
	top->pt_mirror = top->pt_nchildren > 1;
	uint64_t config_txg = pool_vdev_config_txg(&v);
	rc = pool_vdev_relabel(&v, config_txg, NULL, NULL, err, err_len);
	if (rc == 0 && gone) {
		int wrc = blk_label_wipe(v.vv_cfg->p_engine, gone);
		if (wrc != 0) /* the others' newer configuration leaves it out all the same */
			log_warn("pool %s: cannot wipe the labels of detached %s: %s",
			         v.vv_cfg->p_name, pool_dev_name(gone), sh_strerror(wrc));
	}
	if (rc == 0)
		log_info("pool %s: %s detached (configuration txg %" PRIu64 ")", v.vv_cfg->p_name,
		         gone_path[0] ? gone_path : leaf, config_txg);
	mem_free(gone_path);
out:
	pool_vdev_view_fini(&v);
	return rc;
}

int pool_vdev_replace_lost_log(struct blk_dev *const *devs, unsigned ndevs, const char *old,
                               struct blk_dev *new_dev, bool force, char *err, size_t err_len)
{
	if (!devs || ndevs == 0 || !old || !new_dev)
		return -EINVAL;
	struct pool_vdev_view v;
	int rc = pool_vdev_view_load(&v, devs, ndevs, err, err_len);
	if (rc != 0)
		return rc;
	struct pool_vdev_place at;
	rc = pool_vdev_find(&v, old, &at, err, err_len);
	if (rc != 0)
		goto out;
	struct pool_top *top = at.vp_top;
	if (at.vp_top_index != UINT32_MAX) {
		pool_say(err, err_len, "%s is not a leaf of the log vdev", old);
		rc = -EINVAL;
		goto out;
	}
	for (unsigned j = 0; j < top->pt_nchildren; j++) {
		if (top->pt_leaves[j].pl_dev) {
			pool_say(err, err_len,
			              "a leaf of the log vdev is present: replace %s without "
			              "discarding the log",
			              old);
			rc = -EBUSY;
			goto out;
		}
	}
	rc = pool_vdev_new_leaf_ok(&v, top, new_dev, force, err, err_len);
	if (rc != 0)
		goto out;
	const char *path = blk_dev_path(new_dev);
	/* A log vdev of its own: a new guid, so that a leaf of the lost one, should it come back,
	 * is named by no configuration the pool takes; the region keeps its size, so the
	 * uberblocks' record of it stays true. */
	uint64_t top_guid, leaf_guid;
	rc = pool_vdev_new_guid(v.vv_cfg, &top_guid);
	if (rc == 0)
		rc = pool_vdev_new_guid(v.vv_cfg, &leaf_guid);
	char *leaf_path = rc == 0 ? mem_strdup(path) : NULL;
	if (rc == 0 && !leaf_path)
		rc = -ENOMEM;
	if (rc != 0)
		goto out;
	for (unsigned j = 0; j < BLK_MIRROR_MAX; j++)
		mem_free(top->pt_leaves[j].pl_path);
	memset(top->pt_leaves, 0, sizeof(top->pt_leaves));
	top->pt_guid = top_guid;
	top->pt_mirror = false;
	top->pt_nchildren = 1;
	top->pt_leaves[0] =
	    (struct pool_leaf){.pl_guid = leaf_guid, .pl_path = leaf_path, .pl_dev = new_dev};
	uint64_t config_txg = pool_vdev_config_txg(&v);
	rc = pool_vdev_relabel(&v, config_txg, &top->pt_leaves[0], NULL, err, err_len);
	if (rc == 0)
		log_warn(
		    "pool %s: the log vdev is now %s; the records of the lost one are discarded: "
		    "stable changes acknowledged after txg %" PRIu64 " are not in the pool",
		    v.vv_cfg->p_name, pool_dev_name(new_dev), v.vv_ub_txg);
out:
	pool_vdev_view_fini(&v);
	return rc;
}

/* The shape of a top-level vdev, for the redundancy check: its child count (1: a plain disk). */
static unsigned pool_vdev_width(const struct pool_top *t)
{
	return t->pt_mirror ? t->pt_nchildren : 1u;
}

int pool_vdev_add(struct blk_dev *const *devs, unsigned ndevs, const struct pool_open_opts *opts,
                  struct blk_dev *const *new_devs, unsigned nnew, bool force, char *err,
                  size_t err_len)
{
	if (!devs || ndevs == 0 || !new_devs || nnew == 0 || nnew > BLK_MIRROR_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < nnew; i++)
		for (unsigned j = 0; j < i; j++)
			if (new_devs[i] == new_devs[j])
				return -EINVAL;
	int rc = pool_vdev_settle(devs, ndevs, opts, err, err_len);
	if (rc != 0)
		return rc;
	struct pool_vdev_view v;
	rc = pool_vdev_view_load(&v, devs, ndevs, err, err_len);
	if (rc != 0)
		return rc;
	struct pool *cfg = v.vv_cfg;
	if (cfg->p_ntops >= POOL_MAX_TOPS) {
		pool_say(err, err_len, "pool %s has %u top-level vdevs, the most it can have",
		              cfg->p_name, POOL_MAX_TOPS);
		rc = -EOVERFLOW;
		goto out;
	}
	for (unsigned i = 0; i < cfg->p_ntops && !force; i++) {
		if (pool_vdev_width(&cfg->p_tops[i]) != nnew) {
			pool_say(
			    err, err_len,
			    "the pool's vdev %u is %s of %u, the new one would be %s of %u: "
			    "its redundancy would differ (use --force to add it anyway)",
			    i, cfg->p_tops[i].pt_mirror ? "a mirror" : "a disk",
			    pool_vdev_width(&cfg->p_tops[i]), nnew > 1 ? "a mirror" : "a disk",
			    nnew);
			rc = -EINVAL;
			goto out;
		}
	}
	/* the new vdev's data area: the smallest new leaf's, less the labels at both ends */
	uint64_t smallest = UINT64_MAX;
	for (unsigned i = 0; i < nnew; i++)
		smallest = SH_MIN(smallest, blk_dev_size(new_devs[i]));
	uint64_t data_bytes =
	    smallest > 2ull * BLK_LABEL_AREA_BYTES + POOL_VDEV_MIN_DATA_BYTES
	        ? (smallest - 2ull * BLK_LABEL_AREA_BYTES) / BLK_SECTOR_BYTES * BLK_SECTOR_BYTES
	        : 0;
	if (data_bytes == 0) {
		pool_say(
		    err, err_len, "a new vdev needs leaves of more than %llu bytes",
		    (unsigned long long)(2ull * BLK_LABEL_AREA_BYTES + POOL_VDEV_MIN_DATA_BYTES));
		rc = -EINVAL;
		goto out;
	}
	struct pool_top *tops = mem_zalloc((cfg->p_ntops + 1) * sizeof(*tops));
	if (!tops) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(tops, cfg->p_tops, cfg->p_ntops * sizeof(*tops));
	mem_free(cfg->p_tops);
	cfg->p_tops = tops;
	struct pool_top *top = &cfg->p_tops[cfg->p_ntops++];
	top->pt_mirror = nnew > 1;
	top->pt_data_bytes = data_bytes;
	rc = pool_vdev_new_guid(cfg, &top->pt_guid);
	for (unsigned i = 0; i < nnew && rc == 0; i++) {
		rc = pool_vdev_new_leaf_ok(&v, top, new_devs[i], force, err, err_len);
		struct pool_leaf *l = &top->pt_leaves[i];
		if (rc == 0)
			rc = pool_vdev_new_guid(cfg, &l->pl_guid);
		if (rc == 0) {
			l->pl_path = mem_strdup(blk_dev_path(new_devs[i]));
			rc = l->pl_path ? 0 : -ENOMEM;
		}
		l->pl_dev = new_devs[i];
		top->pt_nchildren = i + 1;
	}
	if (rc != 0)
		goto out;
	uint64_t config_txg = pool_vdev_config_txg(&v);
	rc = pool_vdev_relabel(&v, config_txg, NULL, top, err, err_len);
	if (rc == 0)
		log_info("pool %s: vdev %u added (%s of %u, %llu bytes; configuration txg %" PRIu64
		         ")",
		         cfg->p_name, cfg->p_ntops - 1, top->pt_mirror ? "a mirror" : "a disk",
		         nnew, (unsigned long long)data_bytes, config_txg);
out:
	pool_vdev_view_fini(&v);
	return rc;
}
