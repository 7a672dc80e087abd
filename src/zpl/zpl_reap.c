/* zpl_reap.c: the queue of removed files whose blocks are still to be freed (ZFS's delete queue).
 *
 * ---- Problem ----
 * Removing a file frees every block it has. Done in one operation, that operation plans one
 * deletion per extent and must hold all of the file's extent leaves in memory at once: about
 * 0.07% of the file's size, so the REMOVE of a file a few hundred GiB large would need more than
 * the whole cache, and even a few GiB make one long locked section. ZFS answers the same problem
 * with its delete queue: the name goes at once, the object waits in a queue, and its blocks are
 * freed a bounded piece per transaction.
 *
 * ---- Model ----
 *   - When the last link of a regular file with more than ZPL_REAP_INLINE_MAX extents goes
 *     (REMOVE, or RENAME over it), the operation deletes the name as always but, instead of
 *     deleting the inode and its extents, marks the inode unlinked (flag ZPL_IF_UNLINKED, nlink
 *     0, ctime now) and puts a queue entry naming it. Smaller files are freed inline as before.
 *   - zpl_reap (the caller's background work) takes the queue's first entry, deletes up to
 *     ZPL_REAP_STEP_EXTENTS of its extents from the front (freeing their blocks through
 *     ze_free_block and dropping their dirty buffers), and, once none is left, deletes the inode
 *     and the entry. Each call is one ordinary operation: restartable on a miss, committed to
 *     the in-memory tree like any change, durable with the next txg.
 *   - A queued file is invisible: no dirent names it, and its handle is stale (zpl_op_obj).
 *     Its inode is still counted in the meta record's object count until it is deleted.
 *
 * ---- Queue entry ----
 *   key    00 00 00 00 00 00 00 00 | 04 | objid(8)   (17 bytes; object id 0 is the meta object,
 *          so the queue sorts right after the meta record, in object id order)
 *   value  offset 0, 8 bytes: the file's generation (little-endian)
 *
 * ---- Rules (zpl_check verifies them) ----
 *   R9 an inode is unlinked exactly when it has nlink 0, and then it is a regular file named by
 *      no dirent, and a queue entry names it with its generation; every queue entry names such
 *      an inode.
 *
 * A truncation has the same problem and is cut the same way, but within its own request, since
 * the file stays: zpl_data_truncate_step (zpl_data.c) commits the next ZPL_REAP_STEP_EXTENTS
 * extents' deletion and the operation returns -SH_EPARTIAL until the rest fits in one step.
 *
 * ---- Crashes ----
 * Nothing here is logged. The REMOVE that queued a file is logged as any REMOVE, and replaying it
 * queues the file again (the same rule decides, on the same state). A reap step is a change of
 * the in-memory tree that the next txg makes durable: after a crash the pool is at a txg that
 * holds the queue as some step left it, and reaping goes on from there. Freed blocks are reused
 * only once the txg that freed them is durable, as for every free. */
#include "zpl/zpl_impl.h"

#define ZPL_REAP_VAL_BYTES 8u

static void zpl_key_queue(uint8_t k[ZPL_LONG_KEY], uint64_t objid)
{
	zpl_key_long(k, 0, ZPL_KIND_UNLINKED, objid);
}

int zpl_reap_queue(struct zpl_op *op, struct zpl_oino *oi)
{
	struct zpl_inode *ino = &oi->oi_ino;
	ino->ino_flags |= ZPL_IF_UNLINKED;
	ino->ino_nlink = 0;
	ino->ino_ctime = op->op_now;
	oi->oi_dirty = true;
	op->op_queued = true;
	uint8_t key[ZPL_LONG_KEY], val[ZPL_REAP_VAL_BYTES];
	zpl_key_queue(key, oi->oi_objid);
	zpl_put_le64(val, ino->ino_gen);
	return zpl_op_put(op, key, sizeof(key), val, sizeof(val), BTREE_PUT_NEW);
}

struct zpl_queue_scan {
	bool qs_found;
	uint64_t qs_objid;
	uint64_t qs_gen;
	int qs_err;
};

static bool zpl_queue_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                            uint32_t val_len)
{
	struct zpl_queue_scan *qs = arg;
	const uint8_t *k = key;
	if (key_len != ZPL_LONG_KEY || zpl_get_be64(k) != 0 || k[8] != ZPL_KIND_UNLINKED)
		return false; /* past the queue */
	if (val_len != ZPL_REAP_VAL_BYTES) {
		qs->qs_err = -EIO;
		return false;
	}
	qs->qs_found = true;
	qs->qs_objid = zpl_get_be64(k + 9);
	qs->qs_gen = zpl_get_le64(val);
	return false;
}

static int zpl_reap_step(struct zpl_op *op, bool *more_out)
{
	uint8_t key[ZPL_LONG_KEY];
	zpl_key_queue(key, 0);
	struct zpl_queue_scan qs;
	memset(&qs, 0, sizeof(qs));
	struct blk_ptr missing;
	int rc = btree_scan(op->op_z->z_tree, key, sizeof(key), false, zpl_queue_visit, &qs,
	                    &missing);
	if (rc != 0)
		return zpl_op_tree_error(op, rc, &missing);
	if (qs.qs_err != 0)
		return qs.qs_err;
	if (!qs.qs_found)
		return 0;
	struct zpl_oino *oi;
	rc = zpl_op_inode(op, qs.qs_objid, &oi);
	if (rc == -ENOENT)
		return -EIO; /* R9: the entry names no inode */
	if (rc != 0)
		return rc;
	if (oi->oi_ino.ino_type != FS_REG || (oi->oi_ino.ino_flags & ZPL_IF_UNLINKED) == 0 ||
	    oi->oi_ino.ino_gen != qs.qs_gen)
		return -EIO;
	bool left = false;
	uint64_t nblocks = oi->oi_ino.ino_nblocks;
	if ((rc = zpl_data_drop_some(op, oi, ZPL_REAP_STEP_EXTENTS, &left)) != 0)
		return rc;
	uint64_t freed = nblocks - oi->oi_ino.ino_nblocks;
	if (left) {
		oi->oi_dirty = true;
	} else {
		if ((rc = zpl_op_delete_inode(op, oi)) != 0)
			return rc;
		zpl_key_queue(key, qs.qs_objid);
		if ((rc = zpl_op_del(op, key, sizeof(key))) != 0)
			return rc;
	}
	if ((rc = zpl_op_commit(op)) != 0)
		return rc;
	op->op_z->z_reap_extents += freed;
	op->op_z->z_reap_files += left ? 0 : 1;
	*more_out = true;
	return 0;
}

int zpl_reap(struct zpl *z, bool *more_out, struct blk_ptr *missing_out)
{
	*more_out = false;
	if (z->z_failed != 0)
		return -EIO;
	static const struct fs_cred reaper; /* checks no permission */
	struct zpl_op *op = &z->z_op;
	zpl_op_begin(z, op, &reaper, missing_out);
	int rc = zpl_reap_step(op, more_out);
	zpl_op_abort(op);
	if (rc != 0)
		*more_out = false;
	return rc;
}

uint64_t zpl_reap_queued(const struct zpl *z)
{
	return z->z_reap_queued;
}

void zpl_reap_stats(const struct zpl *z, uint64_t *files_out, uint64_t *extents_out)
{
	*files_out = z->z_reap_files;
	*extents_out = z->z_reap_extents;
}
