/* pool_destroy.c: destroying a dataset in steps, as ZFS's asynchronous destroy does.
 *
 * Model
 * =====
 * A destroy has two parts. pool_ds_destroy_start makes the name go, at once and in one txg: the
 * dataset's record moves in the metadata tree from "ds/<name>" to "dq/<id>" (id as 16 hex
 * digits; the record's format is pool.c's, unchanged), so the name may be created again at
 * once and nothing can open the old dataset. The dataset stays loaded, marked ds_queued (and
 * ds_destroying, so no open finds it), with one reference that the queue holds, and its owner
 * attached: the owner is what names the data blocks of an entry (do_visit_blocks).
 *
 * The freeing then runs on the sync thread, one step per txg (pool_destroy_step, called by the
 * sync thread's loop once the txg of the previous step is durable). A step, under p_lock, with a
 * walk of its own set as p_walk so that the tree's nodes are read synchronously into a bounded
 * cache (pool_check.c), takes the tree's first entry, deletes it and collects the blocks its
 * owner names, up to po_destroy_step entries; it then frees the collected blocks. The deletes
 * free the tree's emptied nodes themselves (btree bs_free). When the tree is empty, the step
 * deletes "dq/<id>" and unloads the dataset. The step's deletes and frees, and the record's new
 * root (written by pool_ds_sync_records under "dq/<id>"), are in the txg that follows the step,
 * so each txg holds a consistent state: every block an entry left in the tree names is still
 * allocated, every block of an entry deleted is freed, and the record names the tree as it is.
 * A crash therefore loses nothing and leaks nothing, and the next import loads every "dq/"
 * record (pool_destroy_load_queued) and goes on.
 *
 * Bounds. Memory per step: the walk's cache (32 MiB at most), one entry's key and value, and
 * the pointers of po_destroy_step entries (4,096 by default: 256 KiB). Time under p_lock per
 * step: the deletes plus the reads of the nodes they reach, a few dozen for 4,096 entries of a
 * file system's extents; requests wait that long once per txg.
 *
 * Failures. A step that fails (no memory, a node that cannot be read) changes what it changed up
 * to the failure, consistently, and the next txg tries again. A queued dataset whose owner cannot
 * be attached (import) is left queued and reported (ds_destroy_failed); an entry whose owner
 * cannot parse it is deleted and its blocks, unknown, stay allocated (a check reports them as
 * leaked).
 *
 * Concurrency. Queueing and steps run under p_lock. The sync thread is the only stepper, so
 * steps never interleave; pool_check may hold a reference to a queued dataset meanwhile (it walks
 * queued datasets as well), and the last step then leaves the empty dataset for a later one. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pool/pool_impl.h"

#define POOL_DQ_PREFIX "dq/"

void pool_destroy_key(uint64_t id, char *key, uint32_t *klen)
{
	int n = snprintf(key, POOL_MOS_KEY_MAX, POOL_DQ_PREFIX "%016" PRIx64, id);
	*klen = (uint32_t)n;
}

unsigned pool_destroy_queued(struct pool *p)
{
	return atomic_load(&p->p_destroy_queued);
}

/* Under p_lock: the loaded dataset queued with this id, or NULL. */
static struct pool_ds *pool_destroy_find(struct pool *p, uint64_t id)
{
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next)
		if (ds->ds_queued && ds->ds_id == id)
			return ds;
	return NULL;
}

/* Under p_lock: ds's record (rec, POOL_MOS_VAL_MAX bytes; its length into *reclen) put under
 * "dq/<id>" (the key into qkey, *qlen). */
static int pool_destroy_put_record(struct pool *p, const struct pool_ds *ds, uint8_t *rec,
                                   int *reclen, char *qkey, uint32_t *qlen)
{
	pool_destroy_key(ds->ds_id, qkey, qlen);
	*reclen = pool_ds_record_encode(ds, rec, POOL_MOS_VAL_MAX);
	if (*reclen < 0)
		return *reclen;
	int rc = btree_put(p->p_mos, qkey, *qlen, rec, (uint32_t)*reclen, BTREE_PUT_NEW, NULL);
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

/* Under p_lock: moves ds's record from "ds/<name>" to "dq/<id>" (the MOS never misses, R9). */
static int pool_destroy_queue_locked(struct pool *p, struct pool_ds *ds)
{
	char dkey[POOL_MOS_KEY_MAX], qkey[POOL_MOS_KEY_MAX];
	uint32_t qlen;
	int dlen = snprintf(dkey, sizeof(dkey), "ds/%s", ds->ds_name), reclen;
	uint8_t rec[POOL_MOS_VAL_MAX];
	int rc = pool_destroy_put_record(p, ds, rec, &reclen, qkey, &qlen);
	if (rc != 0)
		return rc;
	rc = btree_delete(p->p_mos, dkey, (uint32_t)dlen, NULL);
	if (rc != 0) {
		(void)!btree_delete(p->p_mos, qkey, qlen, NULL);
		return rc;
	}
	/* a clone's dead list names blocks its origin holds: only the chunks go (a failure here
	 * leaves them allocated, a leak a check reports, never a block freed in use) */
	if (pool_dl_drop_locked(p, ds) != 0)
		log_error("pool %s: dataset %s: its dead list could not be queued; its chunks stay "
		          "allocated",
		          p->p_name, ds->ds_name);
	ds->ds_queued = true;
	ds->ds_record_dirty = false; /* the record just written is current */
	atomic_fetch_add(&p->p_destroy_queued, 1);
	return 0;
}

int pool_destroy_queue_record(struct pool *p, const struct pool_ds *rec_of, const char *was)
{
	char qkey[POOL_MOS_KEY_MAX], name[POOL_DS_NAME_MAX + 1];
	uint32_t qlen;
	uint8_t rec[POOL_MOS_VAL_MAX];
	int reclen;
	int rc = pool_destroy_put_record(p, rec_of, rec, &reclen, qkey, &qlen);
	if (rc != 0)
		return rc;
	snprintf(name, sizeof(name), "rolled-back-%s", was);
	struct pool_ds *ds;
	rc = pool_ds_load(p, name, rec, (uint32_t)reclen, &ds);
	if (rc != 0) {
		(void)!btree_delete(p->p_mos, qkey, qlen, NULL);
		return rc;
	}
	ds->ds_destroying = true;
	ds->ds_queued = true;
	ds->ds_refs = 1; /* the queue's; its owner is attached before its first step */
	atomic_fetch_add(&p->p_destroy_queued, 1);
	return 0;
}

/* Waits until the queued dataset id is freed and that is durable. */
static int pool_destroy_wait(struct pool *p, uint64_t id)
{
	for (;;) {
		pool_lock(p);
		struct pool_ds *ds = pool_destroy_find(p, id);
		bool failed = ds && ds->ds_destroy_failed;
		pool_unlock(p);
		if (failed)
			return -EIO;
		int rc = pool_txg_wait_synced(p, 0);
		if (rc != 0 || !ds)
			return rc;
	}
}

int pool_ds_destroy_start(struct pool *p, const char *name, bool wait)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (!pool_name_valid(name, POOL_DS_NAME_MAX))
		return -EINVAL;
	struct pool_ds *ds;
	int rc = pool_ds_open(p, name, &ds);
	if (rc != 0)
		return rc;
	pool_lock(p);
	if (ds->ds_refs > 1 || ds->ds_destroying) {
		pool_ds_rele_locked(ds);
		pool_unlock(p);
		return -EBUSY;
	}
	if (pool_snap_count(p, ds->ds_id) > 0) {
		pool_ds_rele_locked(ds);
		pool_unlock(p);
		return -ENOTEMPTY; /* its snapshots first (zfs destroy without -r) */
	}
	ds->ds_destroying = true;
	pool_unlock(p);
	bool owner = pool_ds_attach_owner(p, ds) == 0 && ds->ds_ops->do_visit_blocks;
	/* Its owner's dirty data into the tree, so that the steps see every block. */
	rc = pool_txg_wait_synced(p, 0);
	uint64_t id = ds->ds_id;
	pool_lock(p);
	if (rc == 0 && !owner && (btree_is_dirty(ds->ds_tree) || !blk_ptr_is_hole(&ds->ds_root)))
		rc = -ENOTSUP;
	if (rc == 0)
		rc = pool_destroy_queue_locked(p, ds);
	if (rc != 0) {
		ds->ds_destroying = false;
		pool_ds_rele_locked(ds);
	} else {
		/* The open's reference is now the queue's. */
		log_info("pool %s: dataset %s destroyed; its blocks are freed in the background",
		         p->p_name, name);
	}
	pool_unlock(p);
	if (rc == 0)
		rc = pool_txg_wait_synced(p, 0); /* the name's removal, durable */
	if (rc == 0 && wait)
		rc = pool_destroy_wait(p, id);
	return rc;
}

int pool_ds_destroy(struct pool *p, const char *name)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	return pool_ds_destroy_start(p, name, true);
}

/* ---------------------------------------------------------------------------------------------
 * Import */

struct pool_destroy_load {
	struct pool *dl_pool;
	int dl_err;
};

static bool pool_destroy_load_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                    uint32_t vlen)
{
	struct pool_destroy_load *dl = arg;
	size_t pl = strlen(POOL_DQ_PREFIX);
	if (klen < pl || memcmp(key, POOL_DQ_PREFIX, pl) != 0)
		return false;
	char name[POOL_DS_NAME_MAX + 1], want[POOL_MOS_KEY_MAX];
	snprintf(name, sizeof(name), "destroyed-%.*s", (int)SH_MIN(klen - pl, 16u),
	         (const char *)key + pl);
	struct pool_ds *ds;
	int rc = pool_ds_load(dl->dl_pool, name, val, vlen, &ds);
	if (rc != 0) {
		dl->dl_err = rc;
		return false;
	}
	uint32_t wlen;
	pool_destroy_key(ds->ds_id, want, &wlen);
	if (wlen != klen || memcmp(want, key, klen) != 0) {
		/* A record under another dataset's key: left alone (a check reports its blocks). */
		log_error("pool %s: the record under %.*s names dataset id %" PRIu64
		          ": not destroyed",
		          dl->dl_pool->p_name, (int)SH_MIN(klen, 32u), (const char *)key,
		          ds->ds_id);
		pool_ds_unload_locked(dl->dl_pool, ds);
		return true;
	}
	ds->ds_destroying = true;
	ds->ds_queued = true;
	ds->ds_refs = 1; /* the queue's */
	atomic_fetch_add(&dl->dl_pool->p_destroy_queued, 1);
	return true;
}

int pool_destroy_load_queued(struct pool *p)
{
	struct pool_destroy_load dl = {.dl_pool = p};
	int rc = btree_scan(p->p_mos, POOL_DQ_PREFIX, (uint32_t)strlen(POOL_DQ_PREFIX), false,
	                    pool_destroy_load_visit, &dl, NULL);
	if (rc == -SH_ENEEDBLOCK)
		rc = -EIO; /* the MOS is pinned (R9) */
	return rc != 0 ? rc : dl.dl_err;
}

void pool_destroy_attach_all(struct pool *p)
{
	for (;;) {
		/* One at a time, without the lock while attaching; attached ones are skipped. */
		pool_lock(p);
		struct pool_ds *ds = p->p_datasets;
		while (ds && !(ds->ds_queued && !ds->ds_ops && !ds->ds_destroy_failed))
			ds = ds->ds_next;
		pool_unlock(p);
		if (!ds)
			return;
		int rc = pool_ds_attach_owner(p, ds);
		if (rc == 0)
			continue;
		pool_lock(p);
		ds->ds_destroy_failed = true;
		atomic_fetch_sub(&p->p_destroy_queued, 1);
		pool_unlock(p);
		log_error("pool %s: dataset %s being destroyed has no owner to name its blocks "
		          "(%s): left as it is",
		          p->p_name, ds->ds_name, sh_strerror(rc));
	}
}

/* ---------------------------------------------------------------------------------------------
 * Steps */

struct pool_destroy_first {
	uint8_t df_key[POOL_DS_KEY_MAX];
	uint32_t df_klen;
	uint8_t df_val[POOL_DS_VAL_MAX];
	uint32_t df_vlen;
	bool df_found;
};

static bool pool_destroy_first_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                     uint32_t vlen)
{
	struct pool_destroy_first *f = arg;
	if (klen > sizeof(f->df_key) || vlen > sizeof(f->df_val))
		return false; /* the tree's own limits make this impossible; found stays false */
	memcpy(f->df_key, key, klen);
	memcpy(f->df_val, val, vlen);
	f->df_klen = klen;
	f->df_vlen = vlen;
	f->df_found = true;
	return false;
}

struct pool_destroy_bps {
	struct pool *db_pool;
	struct blk_ptr *db_bps;
	size_t db_n, db_cap;
};

static int pool_destroy_collect(void *arg, const struct blk_ptr *bp)
{
	struct pool_destroy_bps *db = arg;
	if (blk_ptr_is_hole(bp))
		return 0;
	if (!pool_bp_valid(db->db_pool, bp))
		return -EIO;
	if (db->db_n == db->db_cap) {
		size_t cap = db->db_cap ? db->db_cap * 2 : 256;
		struct blk_ptr *n = mem_realloc(db->db_bps, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		db->db_bps = n;
		db->db_cap = cap;
	}
	db->db_bps[db->db_n++] = *bp;
	return 0;
}

/* Under p_lock with p_walk set: the first entry of ds's tree into f (df_found false: empty). */
static int pool_destroy_first(struct pool *p, struct pool_ds *ds, struct pool_destroy_first *f)
{
	for (;;) {
		struct blk_ptr missing;
		f->df_found = false;
		int rc = btree_scan(ds->ds_tree, NULL, 0, false, pool_destroy_first_visit, f,
		                    &missing);
		if (rc == -SH_ENEEDBLOCK && (rc = pool_walk_load(p, &missing)) == 0)
			continue;
		return rc;
	}
}

static int pool_destroy_delete(struct pool *p, struct pool_ds *ds, const void *key, uint32_t klen)
{
	for (;;) {
		struct blk_ptr missing;
		int rc = btree_delete(ds->ds_tree, key, klen, &missing);
		if (rc == -SH_ENEEDBLOCK && (rc = pool_walk_load(p, &missing)) == 0)
			continue;
		return rc;
	}
}

/* Under p_lock: deletes up to max entries of ds, collecting the blocks they name into db. Sets
 * *empty when the tree has no entry left, *changed when an entry went. */
static int pool_destroy_entries(struct pool *p, struct pool_ds *ds, uint32_t max,
                                struct pool_destroy_bps *db, bool *empty, bool *changed)
{
	struct pool_destroy_first *f = mem_alloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t n = 0; n < max; n++) {
		rc = pool_destroy_first(p, ds, f);
		if (rc != 0)
			break;
		if (!f->df_found) {
			*empty = true;
			break;
		}
		if (!ds->ds_ops || !ds->ds_ops->do_visit_blocks) {
			rc = -ENOTSUP; /* entries, and nobody to name their blocks */
			break;
		}
		/* Named before the delete (an entry whose blocks cannot all be collected stays),
		 * freed after it (a delete that fails frees nothing). */
		size_t had = db->db_n;
		rc = ds->ds_ops->do_visit_blocks(ds->ds_owner, f->df_key, f->df_klen, f->df_val,
		                                 f->df_vlen, pool_destroy_collect, db);
		if (rc == -EIO) {
			log_warn("pool %s: dataset %s being destroyed: an entry does not parse; "
			         "its blocks stay allocated",
			         p->p_name, ds->ds_name);
			db->db_n = had;
			rc = 0;
		}
		if (rc != 0) {
			db->db_n = had;
			break;
		}
		rc = pool_destroy_delete(p, ds, f->df_key, f->df_klen);
		if (rc != 0) {
			db->db_n = had;
			break;
		}
		*changed = true;
	}
	mem_free(f);
	return rc;
}

/* Under p_lock: the empty queued ds leaves the pool (its record, then its memory). */
static void pool_destroy_finish(struct pool *p, struct pool_ds *ds)
{
	char qkey[POOL_MOS_KEY_MAX];
	uint32_t qlen;
	pool_destroy_key(ds->ds_id, qkey, &qlen);
	int rc = btree_delete(p->p_mos, qkey, qlen, NULL);
	if (rc != 0) {
		log_warn("pool %s: dataset %s being destroyed: removing its record: %s", p->p_name,
		         ds->ds_name, sh_strerror(rc));
		return; /* a later step tries again */
	}
	log_info("pool %s: dataset %s is freed", p->p_name, ds->ds_name);
	atomic_fetch_sub(&p->p_destroy_queued, 1);
	pool_ds_rele_locked(ds);
	pool_ds_unload_locked(p, ds); /* its tree is empty: nothing unsynced to lose */
}

bool pool_destroy_step(struct pool *p)
{
	/* a tree a rollback queued gets its owner here (attaching may read: not under the lock) */
	pool_destroy_attach_all(p);
	struct pool_walk *w = pool_walk_new_cache();
	struct pool_destroy_bps db = {.db_pool = p};
	bool changed = false, empty = false;
	pool_lock(p);
	p->p_destroy_step_txg = p->p_open_txg;
	struct pool_ds *ds = p->p_datasets;
	while (ds && !(ds->ds_queued && !ds->ds_destroy_failed))
		ds = ds->ds_next;
	if (!ds || !w || pool_is_suspended(p)) {
		pool_unlock(p);
		pool_walk_free(w);
		return false;
	}
	pool_walk_wait_writes(p);
	p->p_walk = w;
	int rc = pool_destroy_entries(p, ds, p->p_opts.po_destroy_step, &db, &empty, &changed);
	p->p_walk = NULL;
	for (size_t i = 0; i < db.db_n; i++)
		(void)!pool_ds_free(ds, &db.db_bps[i]); /* a refusal is logged and counted */
	if (rc == -ENOTSUP) {
		ds->ds_destroy_failed = true;
		atomic_fetch_sub(&p->p_destroy_queued, 1);
		log_error("pool %s: dataset %s being destroyed has no owner to name its blocks: "
		          "left as it is",
		          p->p_name, ds->ds_name);
	} else if (rc != 0) {
		log_warn("pool %s: dataset %s being destroyed: a step failed (%s); trying again "
		         "after the next txg",
		         p->p_name, ds->ds_name, sh_strerror(rc));
	} else if (empty && ds->ds_refs == 1) {
		pool_destroy_finish(p, ds);
		changed = true;
	}
	pool_unlock(p);
	mem_free(db.db_bps);
	pool_walk_free(w);
	return changed;
}
