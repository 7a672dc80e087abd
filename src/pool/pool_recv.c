/* pool_recv.c: what a receive (shale receive, src/poolfs/pool_fs_send.c) needs of the pool: the
 * dataset marked while a stream is applied to it, its owner taken over for the time, and the
 * receives a crash cut off finished or undone at import.
 *
 * Model. A receive writes a file system's tree over many txgs. Before its first change the
 * dataset's record gets POOL_DS_F_RECEIVING (durable before anything else is written); the
 * receive ends by taking the stream's snapshot (one txg) and then clearing the flag (another).
 * A dataset found with the flag at import is therefore in one of three states, each made whole
 * by one rule: "roll back to the latest snapshot, or destroy it when it has none":
 *   - a full receive cut off: no snapshot yet: destroyed (it did not exist before);
 *   - an incremental one cut off: its latest snapshot is the stream's base: rolled back to it,
 *     the file system is as it was before the receive;
 *   - cut off between the snapshot and the flag's clearing: its latest snapshot is the received
 *     one, which the file system already equals: the rollback changes nothing.
 * A receive that fails while running applies the same rule itself.
 *
 * Concurrency: under p_lock, as the rest of the dataset's state. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pool/pool_impl.h"

int pool_ds_set_receiving(struct pool_ds *ds, bool receiving)
{
	struct pool *p = ds->ds_pool;
	pool_lock(p);
	uint64_t flags = ds->ds_flags & ~(uint64_t)POOL_DS_F_RECEIVING;
	if (receiving)
		flags |= POOL_DS_F_RECEIVING;
	__atomic_store_n(&ds->ds_flags, flags, __ATOMIC_RELAXED);
	ds->ds_record_dirty = true; /* the next txg writes the record */
	pool_unlock(p);
	return pool_txg_wait_synced(p, 0);
}

int pool_ds_take_owner(struct pool_ds *ds, const struct pool_ds_owner *ops, void *owner)
{
	struct pool *p = ds->ds_pool;
	pool_lock(p);
	int rc = 0;
	if (ds->ds_refs != 1 || ds->ds_destroying || ds->ds_snapshot) {
		rc = -EBUSY; /* another open (an export), or not a file system of its own */
	} else if (ds->ds_ops && ((ds->ds_ops->do_dirty_bytes &&
	                           ds->ds_ops->do_dirty_bytes(ds->ds_owner) != 0) ||
	                          btree_is_dirty(ds->ds_tree))) {
		rc = -EBUSY; /* its changes are not written yet: the caller syncs first */
	} else {
		if (ds->ds_ops && ds->ds_ops->do_detach)
			ds->ds_ops->do_detach(ds->ds_owner);
		ds->ds_ops = ops;
		ds->ds_owner = owner;
	}
	pool_unlock(p);
	return rc;
}

struct pool_recv_left {
	char (*rl_names)[POOL_DS_NAME_MAX + 1];
	size_t rl_n, rl_cap;
	int rl_err;
};

static int pool_recv_left_one(void *arg, const struct pool_ds_info *di)
{
	struct pool_recv_left *rl = arg;
	if (!di->di_receiving)
		return 0;
	if (rl->rl_n == rl->rl_cap) {
		size_t cap = rl->rl_cap ? rl->rl_cap * 2 : 4;
		void *n = mem_realloc(rl->rl_names, cap * sizeof(*rl->rl_names));
		if (!n)
			return -ENOMEM;
		rl->rl_names = n;
		rl->rl_cap = cap;
	}
	memcpy(rl->rl_names[rl->rl_n++], di->di_name, sizeof(rl->rl_names[0]));
	return 0;
}

/* The latest snapshot of fs (its name into snap), or -ENOENT. */
static int pool_recv_latest(struct pool *p, const char *fs, char *snap, size_t snap_len)
{
	struct pool_ds *ds;
	int rc = pool_ds_open(p, fs, &ds);
	if (rc != 0)
		return rc;
	struct pool_snap_entry *ents;
	size_t n;
	rc = pool_snap_entries(p, ds->ds_id, &ents, &n);
	pool_ds_close(ds);
	if (rc != 0)
		return rc;
	if (n == 0)
		rc = -ENOENT;
	else
		snprintf(snap, snap_len, "%s@%s", fs, ents[n - 1].se_name);
	mem_free(ents);
	return rc;
}

int pool_recv_undo(struct pool *p, const char *fs, char *err, size_t err_len)
{
	char snap[POOL_SNAP_FULL_MAX + 1];
	int rc = pool_recv_latest(p, fs, snap, sizeof(snap));
	if (rc == -ENOENT) {
		rc = pool_ds_destroy_start(p, fs, false);
		if (rc != 0)
			snprintf(err, err_len, "%s: cannot destroy what was received: %s", fs,
			         sh_strerror(rc));
		return rc;
	}
	if (rc == 0)
		rc = pool_fs_rollback(p, snap, false, err, err_len);
	struct pool_ds *ds;
	if (rc == 0 && (rc = pool_ds_open(p, fs, &ds)) == 0) {
		rc = pool_ds_set_receiving(ds, false);
		pool_ds_close(ds);
	}
	if (rc != 0 && err[0] == '\0')
		snprintf(err, err_len, "%s: %s", fs, sh_strerror(rc));
	return rc;
}

void pool_recv_fixup(struct pool *p)
{
	struct pool_recv_left rl = {0};
	int rc = pool_ds_list(p, pool_recv_left_one, &rl);
	if (rc != 0)
		log_error("pool %s: cannot look for receives cut off: %s", p->p_name,
		          sh_strerror(rc));
	for (size_t i = 0; rc == 0 && i < rl.rl_n; i++) {
		char err[256] = "";
		int one = pool_recv_undo(p, rl.rl_names[i], err, sizeof(err));
		if (one != 0)
			log_error("pool %s: a receive into %s was cut off, and %s", p->p_name,
			          rl.rl_names[i], err);
		else
			log_info("pool %s: a receive into %s was cut off: undone (back to its latest "
			         "snapshot, or gone when it had none)",
			         p->p_name, rl.rl_names[i]);
	}
	mem_free(rl.rl_names);
}
