/* zpl.c: the pool's file-system object layer: the dataset tree's records, the per-operation plan
 * that makes every operation restartable, and the zpl's life cycle.
 *
 * ---- Problem ----
 * A dataset is one copy-on-write B+tree (btree.h) plus data blocks. This layer turns the tree into
 * POSIX objects and runs the operations of fs.h on them, under the pool's rule that nothing blocks
 * on I/O: every call runs over memory and, when it needs a block the cache lacks, returns
 * -SH_ENEEDBLOCK naming it, having changed nothing; the caller loads the block and runs the call
 * again from the start. So an operation must never find out half-way through a change that it
 * needs a block. The layer also hands the caller the log records that make a change stable and
 * re-applies them after a crash (zpl_log.c).
 *
 * ---- Keys (all integers big-endian, so memcmp order is numeric order) ----
 *
 *   record     key                                              value
 *   meta       00 00 00 00 00 00 00 00 | 00          (9 bytes)  meta record (64 bytes)
 *   inode      objid(8)                | 01          (9 bytes)  inode record (128 + inline target)
 *   dirent     dir objid(8)            | 02 | hash(8) (17 bytes) dirent record (10 + name)
 *   extent     objid(8)                | 03 | block(8) (17 bytes) block pointer (64 bytes)
 *   queued     00(8)                   | 04 | objid(8) (17 bytes) generation (8 bytes; zpl_reap.c)
 *
 * So an object's inode, then its entries or extents, are adjacent, and a directory's entries are
 * one key range in hash order. Object ids start at ZPL_FIRST_OBJID (1 is reserved, the root is
 * ZPL_ROOT_OBJID) and are not reused within a line of states: each create takes the next id from
 * the meta record's counter, and the next generation, raised to ZPL_GEN_OF_TXG of the txg the
 * env says the create belongs to (ze_txg). The generation is carried in object ids, so a handle
 * to a removed object stays stale whatever happens to its id later; and since txgs keep growing
 * when the dataset is rolled back to an older state (whose counters hand out its ids again), an
 * object created after a rollback never takes the (id, generation) of one the rollback dropped.
 * An id at or above the counters is stale (a state the dataset left), not a bad handle.
 *
 * ---- Records (values; integers little-endian) ----
 *
 * Meta record, 64 bytes:
 *   offset  size  field
 *        0     4  format version   ZPL_FORMAT_VERSION (1)
 *        4     4  reserved         zero
 *        8     8  next object id   every object id in the tree is below it
 *       16     8  root object id   ZPL_ROOT_OBJID
 *       24     8  root generation
 *       32     8  object count     inodes in the tree
 *       40     8  next generation  every generation in the tree is below it
 *       48     8  hash salt        seeds the directory-name hash
 *       56     8  reserved         zero
 *
 * Inode record, 128 bytes plus a short symlink's target:
 *   offset  size  field
 *        0     1  type             enum fs_type (1..7)
 *        1     1  flags            0x01 verifier valid, 0x02 block size fixed, 0x04 unlinked
 *                                  (nlink 0, waiting in the queue of zpl_reap.c)
 *        2     2  link length      symlinks: target bytes (1..FS_PATH_MAX); others 0
 *        4     4  mode             07777 bits
 *        8     4  nlink            >= 1; 0 exactly when unlinked
 *       12     4  uid
 *       16     4  gid
 *       20     4  rdev major       FS_CHR, FS_BLK
 *       24     4  rdev minor
 *       28     4  block size       regular files and long symlinks: a multiple of 4 KiB
 *       32     8  size             bytes (directories: see "Directories")
 *       40    12  atime            i64 seconds, u32 nanoseconds (< 10^9)
 *       52    12  mtime
 *       64    12  ctime
 *       76    12  birth time
 *       88     8  generation       non-zero
 *       96     8  parent           directories: the directory holding their entry (root: itself)
 *      104     8  entry count      directories: entries, "." and ".." not counted
 *      112     8  block count      extents present
 *      120     8  verifier         EXCLUSIVE create verifier (when flag 0x01)
 *      128     n  target           symlinks whose target is at most 1 KiB (n = link length)
 * A longer target (up to FS_PATH_MAX) is data block 0 of the symlink.
 *
 * Dirent record, 10 bytes plus the name:
 *   offset  size  field
 *        0     8  child object id
 *        8     1  child type       enum fs_type
 *        9     1  name length      1..FS_NAME_MAX
 *       10     n  name             no '/' or NUL, never "." or ".."
 *
 * Extent record: the data block's pointer, 64 bytes as blk.h encodes it (blk_ptr_encode). All
 * zero means "being written": the block has a dirty buffer and zpl_sync will fill the pointer in.
 *
 * ---- Directories ----
 * An entry's key hash is XXH3_64bits(name, salt) with the top bit cleared and the low 16 bits
 * replaced by a collision index: names whose hashes agree on the other 47 bits take indexes
 * 0, 1, 2... (the first free one at insert), and a lookup scans the 2^16 keys of that range for
 * the name. A base of zero is moved to 1 << 16, so every key hash is at least 65536. The READDIR
 * cookie of an entry is its key hash: cookies 1 and 2 are "." and ".." (emitted first; ".." of
 * the root is the root), a cookie stays meaningful however the directory changes (resuming scans
 * the keys after it, so an entry removed since simply continues after its place), and the cookie
 * verifier is the directory's generation. A directory's reported size is ZPL_DIRENT_NOMINAL_BYTES
 * per entry, "." and ".." included: NFS clients only compare it.
 *
 * ---- Files ----
 * Block b of a regular file covers bytes [b * B, (b + 1) * B) where B is the inode's block size.
 * While the file is small it has one block whose size follows the file's size rounded up to
 * 4 KiB (the block is rewritten larger, copy on write, as the file grows); once the file grows
 * past the record size given to zpl_open, B is fixed (flag 0x02) at the larger of that record size
 * and its current size. A missing extent is a hole (zeros); a block whose image is shorter than B
 * (block 0 of a file that grew) reads as zeros beyond its image.
 *
 * Written data goes into dirty buffers, one per (object, block), until zpl_sync (zpl_data.c).
 * Reads see dirty buffers first. When a buffer is made for a block, the operation also puts the
 * block's extent key (its old pointer, or the all-zero "being written" value), which makes the
 * tree path to it dirty: dirty nodes stay in memory until btree_sync, so zpl_sync's puts of the
 * new pointers cannot miss (the caller runs zpl_sync before btree_sync).
 * A buffer is edited in place only while the table alone holds it (refs 1); one a READ reply or
 * a sealing caller holds is replaced by a fresh copy instead, so held bytes never change.
 * Sealing (zpl.h) builds on that: a buffer may carry the caller's block prepared from its bytes
 * (db_seal), which every edit, and the buffer's leaving the table, drops; zpl_sync writes a
 * sealed buffer through ze_write_sealed and may hand the buffer itself to the caller's cache.
 *
 * ---- Times ----
 * Every operation takes one "now" from ze_now (a replayed one, the time in its record) and uses it
 * for everything it sets: mtime and ctime of a file whose data or size changes and of a directory
 * whose entries change, ctime of an object whose attributes, link count or name change. atime
 * changes only through SETATTR, as on a noatime mount: reads never turn into tree writes.
 *
 * ---- Rules (zpl_check verifies them) ----
 *   R1 the meta record decodes; every object id and generation in the tree is below its counters;
 *      its object count is the number of inodes; the root exists, is a directory of the root
 *      generation and is its own parent.
 *   R2 every record decodes; every dirent names an existing inode of the type it states, and its
 *      key hash's base is its name's hash base.
 *   R3 a non-directory's nlink is the number of dirents naming it; a directory is named by exactly
 *      one dirent (the root by none), in the directory its parent field names, and its nlink is 2
 *      plus its subdirectories.
 *   R4 a directory's entry count is the number of its dirents.
 *   R5 extents belong to regular files (blocks below ceil(size / B)) and long symlinks (block 0);
 *      the block count is their number; a pointer's logical size is at most B; an all-zero
 *      pointer has a dirty buffer.
 *   R6 every inode but the root (and the objects the caller says are open) is named by a dirent.
 *   R7 a regular file whose block size is not fixed has at most block 0, and size <= B.
 *   R8 bytes of a file beyond its size read as zeros (truncation zeroes the new last block's tail
 *      and drops the blocks after it; zpl_check cannot see data, tests do).
 *   R9 (zpl_reap.c) an inode is unlinked exactly when its nlink is 0: a regular file that no
 *      dirent names and one queue entry names; R3 and R6 do not apply to it.
 *
 * ---- Restarts: look everything up, then mutate ----
 * Every operation runs in two phases on a plan (struct zpl_op):
 *   1. lookup and decide: load every inode, dirent, extent and data block the operation needs,
 *      check permissions and decide the outcome, building in memory the inodes as they will be,
 *      the dirent and extent puts and deletes, and fully prepared dirty buffers (allocated and
 *      filled with the old data). A miss ends the operation here: nothing has changed.
 *   2. commit (zpl_op_commit): first look up again every key the plan will put or delete, and the
 *      meta key; a miss still changes nothing. Then apply all puts, then all deletes, then the
 *      dirty buffer changes. These cannot miss, by the tree's own rules (btree.c):
 *        - a put walks the path to its key; that path was loaded by the lookup, and earlier puts
 *          only replace nodes on it by dirty copies or split dirty nodes into dirty halves;
 *        - a delete walks its key's path (loaded, and kept so by the puts before it and by the
 *          deletes before it, which only remove emptied nodes or merge leaves with siblings that
 *          are in memory), and when it leaves the root with one child it loads the chain that
 *          replaces the root: that child and its single-child descendants. The meta key is the
 *          smallest key in the tree and is never deleted, so it lies in the root's child 0, which
 *          therefore never empties: the surviving child is always child 0, and its chain is a
 *          prefix of the meta key's path, which the commit looked up;
 *        - puts come before deletes because a delete that empties a leaf reroutes the keys of
 *          its range to a neighbour that may not be loaded.
 *      The one failure left is -ENOMEM inside the tree half-way through; the zpl then marks itself
 *      failed (z_failed) and answers -EIO to everything, and the caller rebuilds its state from
 *      the last root and its log (zpl.h).
 * A truncation that drops more than ZPL_REAP_STEP_EXTENTS extents commits a step of its own first
 * (zpl_data_truncate_step: those extents' deletion alone, the size untouched) and returns
 * -SH_EPARTIAL; run again, it finds fewer extents, and the last run is the ordinary operation.
 * Truncating is idempotent, so a partial state is a state the whole change would pass through.
 * READDIR is the one operation with output before its end (rd_emit): it loads its first batch of
 * entries (and, for READDIRPLUS, their inodes) before emitting anything, and a miss after the
 * first emitted entry ends the reply early, without eof, instead of restarting (a short READDIR
 * reply is valid; the next one starts with the load).
 *
 * ---- Concurrency and memory ----
 * None inside: the caller serializes every call on a zpl and its tree. READ may hand out pointers
 * into dirty buffers (reference counted, atomically: released from any thread) and into cached
 * block images (released through ze_release). The plan's arrays are kept in the zpl between
 * operations.
 *
 * ---- The inode cache ----
 * Nearly every operation starts by loading an inode, and walking the tree for it costs a binary
 * search per level over nodes spread through memory. So the zpl keeps committed inode records by
 * object id (zpl_impl.h: two-way set associative, its size from ze_icache_entries). zpl_op_inode
 * and READDIRPLUS read through it and fill it on a miss; zpl_op_commit writes every inode record it
 * puts into it and drops every one it deletes, right after the tree change, so an entry is always
 * the tree's record. A failed commit (zpl_fail) empties it. */
#include <stdio.h>

#include "base/xxh.h"
#include "zpl/zpl_impl.h"

/* ---------------------------------------------------------------------------------------------
 * Codecs */

void zpl_meta_encode(const struct zpl_meta *me, uint8_t out[ZPL_META_BYTES])
{
	memset(out, 0, ZPL_META_BYTES);
	zpl_put_le32(out + 0, ZPL_FORMAT_VERSION);
	zpl_put_le64(out + 8, me->me_next_objid);
	zpl_put_le64(out + 16, me->me_root_objid);
	zpl_put_le64(out + 24, me->me_root_gen);
	zpl_put_le64(out + 32, me->me_nobjects);
	zpl_put_le64(out + 40, me->me_next_gen);
	zpl_put_le64(out + 48, me->me_salt);
}

int zpl_meta_decode(const uint8_t *in, uint32_t len, struct zpl_meta *me)
{
	if (len != ZPL_META_BYTES || zpl_get_le32(in) != ZPL_FORMAT_VERSION ||
	    zpl_get_le32(in + 4) != 0 || zpl_get_le64(in + 56) != 0)
		return -EIO;
	me->me_next_objid = zpl_get_le64(in + 8);
	me->me_root_objid = zpl_get_le64(in + 16);
	me->me_root_gen = zpl_get_le64(in + 24);
	me->me_nobjects = zpl_get_le64(in + 32);
	me->me_next_gen = zpl_get_le64(in + 40);
	me->me_salt = zpl_get_le64(in + 48);
	if (me->me_root_objid < ZPL_FIRST_OBJID || me->me_root_objid >= me->me_next_objid ||
	    me->me_root_gen == 0 || me->me_root_gen >= me->me_next_gen)
		return -EIO;
	return 0;
}

static void zpl_put_time(uint8_t *p, const struct fs_time *t)
{
	zpl_put_le64(p, (uint64_t)t->ft_sec);
	zpl_put_le32(p + 8, t->ft_nsec);
}

static int zpl_get_time(const uint8_t *p, struct fs_time *t)
{
	t->ft_sec = (int64_t)zpl_get_le64(p);
	t->ft_nsec = zpl_get_le32(p + 8);
	return t->ft_nsec < 1000000000u ? 0 : -EIO;
}

uint32_t zpl_inode_encode(const struct zpl_inode *ino, uint8_t *out)
{
	memset(out, 0, ZPL_INODE_FIXED_BYTES);
	out[0] = ino->ino_type;
	out[1] = ino->ino_flags;
	zpl_put_le16(out + 2, ino->ino_link_len);
	zpl_put_le32(out + 4, ino->ino_mode);
	zpl_put_le32(out + 8, ino->ino_nlink);
	zpl_put_le32(out + 12, ino->ino_uid);
	zpl_put_le32(out + 16, ino->ino_gid);
	zpl_put_le32(out + 20, ino->ino_rdev_major);
	zpl_put_le32(out + 24, ino->ino_rdev_minor);
	zpl_put_le32(out + 28, ino->ino_blksz);
	zpl_put_le64(out + 32, ino->ino_size);
	zpl_put_time(out + 40, &ino->ino_atime);
	zpl_put_time(out + 52, &ino->ino_mtime);
	zpl_put_time(out + 64, &ino->ino_ctime);
	zpl_put_time(out + 76, &ino->ino_btime);
	zpl_put_le64(out + 88, ino->ino_gen);
	zpl_put_le64(out + 96, ino->ino_parent);
	zpl_put_le64(out + 104, ino->ino_nentries);
	zpl_put_le64(out + 112, ino->ino_nblocks);
	memcpy(out + 120, ino->ino_verf, 8);
	uint32_t len = ZPL_INODE_FIXED_BYTES;
	if (ino->ino_type == FS_LNK && ino->ino_link_len <= ZPL_SYMLINK_INLINE_MAX) {
		memcpy(out + len, ino->ino_link, ino->ino_link_len);
		len += ino->ino_link_len;
	}
	return len;
}

int zpl_inode_decode(const uint8_t *in, uint32_t len, struct zpl_inode *ino)
{
	if (len < ZPL_INODE_FIXED_BYTES)
		return -EIO;
	ino->ino_type = in[0];
	ino->ino_flags = in[1];
	ino->ino_link_len = zpl_get_le16(in + 2);
	ino->ino_mode = zpl_get_le32(in + 4);
	ino->ino_nlink = zpl_get_le32(in + 8);
	ino->ino_uid = zpl_get_le32(in + 12);
	ino->ino_gid = zpl_get_le32(in + 16);
	ino->ino_rdev_major = zpl_get_le32(in + 20);
	ino->ino_rdev_minor = zpl_get_le32(in + 24);
	ino->ino_blksz = zpl_get_le32(in + 28);
	ino->ino_size = zpl_get_le64(in + 32);
	if (zpl_get_time(in + 40, &ino->ino_atime) != 0 ||
	    zpl_get_time(in + 52, &ino->ino_mtime) != 0 ||
	    zpl_get_time(in + 64, &ino->ino_ctime) != 0 ||
	    zpl_get_time(in + 76, &ino->ino_btime) != 0)
		return -EIO;
	ino->ino_gen = zpl_get_le64(in + 88);
	ino->ino_parent = zpl_get_le64(in + 96);
	ino->ino_nentries = zpl_get_le64(in + 104);
	ino->ino_nblocks = zpl_get_le64(in + 112);
	memcpy(ino->ino_verf, in + 120, 8);
	if (ino->ino_type < FS_REG || ino->ino_type > FS_FIFO ||
	    (ino->ino_flags & ~ZPL_IF_ALL) != 0 || ino->ino_mode > 07777 || ino->ino_gen == 0)
		return -EIO;
	/* Only a queued file (zpl_reap.c) has no links, and it is a regular file. */
	bool unlinked = (ino->ino_flags & ZPL_IF_UNLINKED) != 0;
	if ((ino->ino_nlink == 0) != unlinked || (unlinked && ino->ino_type != FS_REG))
		return -EIO;
	uint32_t want = ZPL_INODE_FIXED_BYTES;
	if (ino->ino_type == FS_LNK) {
		if (ino->ino_link_len == 0 || ino->ino_link_len > FS_PATH_MAX ||
		    ino->ino_size != ino->ino_link_len)
			return -EIO;
		if (ino->ino_link_len <= ZPL_SYMLINK_INLINE_MAX) {
			want += ino->ino_link_len;
			if (len == want)
				memcpy(ino->ino_link, in + ZPL_INODE_FIXED_BYTES,
				       ino->ino_link_len);
		} else if (ino->ino_blksz % ZPL_PAGE_BYTES != 0 ||
		           ino->ino_blksz < ino->ino_link_len ||
		           ino->ino_blksz > BLK_MAX_BLOCK_BYTES) {
			return -EIO;
		}
	} else if (ino->ino_link_len != 0) {
		return -EIO;
	}
	if (len != want)
		return -EIO;
	if (ino->ino_type == FS_REG &&
	    (ino->ino_blksz == 0 || ino->ino_blksz % ZPL_PAGE_BYTES != 0 ||
	     ino->ino_blksz > BLK_MAX_BLOCK_BYTES || ino->ino_size > ZPL_MAX_FILE_BYTES))
		return -EIO;
	return 0;
}

void zpl_objid_encode(uint64_t objid, uint64_t gen, struct fs_obj_id *id)
{
	memset(id, 0, sizeof(*id));
	id->foi_len = ZPL_OBJ_ID_BYTES;
	zpl_put_le64(id->foi_bytes, objid);
	zpl_put_le64(id->foi_bytes + 8, gen);
}

void zpl_attr_from_inode(const struct zpl *z, uint64_t objid, const struct zpl_inode *ino,
                         struct fs_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->fa_type = (enum fs_type)ino->ino_type;
	attr->fa_mode = ino->ino_mode;
	attr->fa_nlink = ino->ino_nlink;
	attr->fa_uid = ino->ino_uid;
	attr->fa_gid = ino->ino_gid;
	switch (ino->ino_type) {
	case FS_DIR:
		attr->fa_size = (ino->ino_nentries + 2) * ZPL_DIRENT_NOMINAL_BYTES;
		attr->fa_used_bytes = attr->fa_size;
		break;
	case FS_REG:
	case FS_LNK:
		attr->fa_size = ino->ino_size;
		attr->fa_used_bytes = ino->ino_nblocks * ino->ino_blksz;
		break;
	default: break;
	}
	if (ino->ino_type == FS_CHR || ino->ino_type == FS_BLK) {
		attr->fa_rdev_major = ino->ino_rdev_major;
		attr->fa_rdev_minor = ino->ino_rdev_minor;
	}
	attr->fa_fsid = z->z_env.ze_fsid;
	attr->fa_fileid = objid;
	attr->fa_atime = ino->ino_atime;
	attr->fa_mtime = ino->ino_mtime;
	attr->fa_ctime = ino->ino_ctime;
}

void zpl_wcc_pre(const struct zpl_inode *ino, struct fs_wcc *wcc)
{
	wcc->fw_pre_valid = true;
	wcc->fw_pre_size = ino->ino_type == FS_DIR
	                       ? (ino->ino_nentries + 2) * ZPL_DIRENT_NOMINAL_BYTES
	                       : ino->ino_size;
	wcc->fw_pre_mtime = ino->ino_mtime;
	wcc->fw_pre_ctime = ino->ino_ctime;
}

void zpl_wcc_post(const struct zpl *z, const struct zpl_oino *oi, struct fs_wcc *wcc)
{
	wcc->fw_post_valid = true;
	zpl_attr_from_inode(z, oi->oi_objid, &oi->oi_ino, &wcc->fw_post);
}

uint64_t zpl_name_hash(const struct zpl *z, const char *name, size_t len)
{
	uint64_t h = z->z_hash != NULL ? z->z_hash(name, len, z->z_meta.me_salt)
	                               : XXH3_64bits_withSeed(name, len, z->z_meta.me_salt);
	h &= ZPL_HASH_BASE_MASK;
	if (h == 0)
		h = 1ull << ZPL_HASH_INDEX_BITS; /* keeps every key hash >= 65536, above cookies 1
		                                    and 2 */
	return h;
}

/* ---------------------------------------------------------------------------------------------
 * The plan */

void zpl_op_begin(struct zpl *z, struct zpl_op *op, const struct fs_cred *cred,
                  struct blk_ptr *missing)
{
	op->op_z = z;
	op->op_cred = cred;
	z->z_env.ze_now(z->z_env.ze_ctx, &op->op_now);
	op->op_replay = false;
	op->op_forced = false;
	op->op_forced_objid = 0;
	op->op_forced_gen = 0;
	op->op_missing = missing;
	op->op_meta = z->z_meta;
	op->op_meta_dirty = false;
	op->op_queued = false;
	op->op_ninos = 0;
	op->op_muts = z->z_muts;
	op->op_nmuts = 0;
	op->op_dchg = z->z_dchg;
	op->op_ndchg = 0;
}

void zpl_op_abort(struct zpl_op *op)
{
	for (uint32_t i = 0; i < op->op_ndchg; i++)
		zpl_dchg_discard(&op->op_dchg[i]);
	op->op_ndchg = 0;
	op->op_nmuts = 0;
	op->op_ninos = 0;
}

int zpl_op_tree_error(struct zpl_op *op, int rc, const struct blk_ptr *missing)
{
	if (rc == -SH_ENEEDBLOCK) {
		if (op->op_missing != NULL)
			*op->op_missing = *missing;
		return rc;
	}
	if (rc == -ENOMEM)
		return rc;
	return -EIO;
}

int zpl_op_lookup(struct zpl_op *op, const uint8_t *key, uint32_t klen, void *val, uint32_t val_cap,
                  uint32_t *vlen)
{
	struct blk_ptr missing;
	uint32_t len = 0;
	int rc = btree_lookup(op->op_z->z_tree, key, klen, val, val_cap, &len, &missing);
	if (rc == 0) {
		*vlen = len;
		return 0;
	}
	if (rc == -ENOENT)
		return rc;
	return zpl_op_tree_error(op, rc, &missing);
}

/* ---------------------------------------------------------------------------------------------
 * The inode cache (zpl_impl.h) */

static uint32_t zpl_icache_set(const struct zpl_icache *ic, uint64_t objid)
{
	return sh_hash_fib(objid, ic->ic_set_bits);
}

static struct zpl_icache_ent *zpl_icache_find(struct zpl *z, uint64_t objid)
{
	struct zpl_icache *ic = &z->z_icache;
	if (ic->ic_ents == NULL)
		return NULL;
	uint32_t set = zpl_icache_set(ic, objid);
	for (uint32_t w = 0; w < ZPL_ICACHE_WAYS; w++) {
		struct zpl_icache_ent *e = &ic->ic_ents[set * ZPL_ICACHE_WAYS + w];
		if (e->ie_objid == objid) {
			ic->ic_last_used[set] = (uint8_t)w;
			return e;
		}
	}
	return NULL;
}

/* Caches objid's record (replacing its entry, else the way of its set not used last). An
 * allocation failure or a long record only means no entry. */
static void zpl_icache_drop(struct zpl *z, uint64_t objid);

static void zpl_icache_put(struct zpl *z, uint64_t objid, const uint8_t *rec, uint32_t len)
{
	if (len > ZPL_ICACHE_REC_MAX) {
		zpl_icache_drop(z, objid); /* not cached, and no older record may stay */
		return;
	}
	struct zpl_icache *ic = &z->z_icache;
	struct zpl_icache_ent *e = zpl_icache_find(z, objid);
	if (e == NULL) {
		if (ic->ic_ents == NULL) {
			ic->ic_ents = mem_zalloc(sizeof(*ic->ic_ents) * ic->ic_nsets * ZPL_ICACHE_WAYS);
			ic->ic_last_used = mem_zalloc(ic->ic_nsets);
			if (ic->ic_ents == NULL || ic->ic_last_used == NULL) {
				mem_free(ic->ic_ents);
				mem_free(ic->ic_last_used);
				ic->ic_ents = NULL;
				ic->ic_last_used = NULL;
				return;
			}
		}
		uint32_t set = zpl_icache_set(ic, objid);
		uint32_t way = 1u - ic->ic_last_used[set];
		e = &ic->ic_ents[set * ZPL_ICACHE_WAYS + way];
		ic->ic_last_used[set] = (uint8_t)way;
	}
	e->ie_objid = objid;
	e->ie_len = len;
	memcpy(e->ie_rec, rec, len);
}

static void zpl_icache_drop(struct zpl *z, uint64_t objid)
{
	struct zpl_icache_ent *e = zpl_icache_find(z, objid);
	if (e != NULL)
		e->ie_objid = 0;
}

static void zpl_icache_init(struct zpl_icache *ic, uint32_t entries)
{
	if (entries < ZPL_ICACHE_MIN_ENTRIES)
		entries = ZPL_ICACHE_MIN_ENTRIES;
	if (entries > ZPL_ICACHE_MAX_ENTRIES)
		entries = ZPL_ICACHE_MAX_ENTRIES;
	uint32_t sets = 1;
	unsigned bits = 0;
	while (sets * 2 * ZPL_ICACHE_WAYS <= entries) {
		sets *= 2;
		bits++;
	}
	memset(ic, 0, sizeof(*ic));
	ic->ic_nsets = sets;
	ic->ic_set_bits = bits;
}

/* Forgets every entry (and their memory; the next insert allocates again). */
static void zpl_icache_fini(struct zpl *z)
{
	struct zpl_icache *ic = &z->z_icache;
	mem_free(ic->ic_ents);
	mem_free(ic->ic_last_used);
	ic->ic_ents = NULL;
	ic->ic_last_used = NULL;
}

#define ZPL_CPU_CACHE_LINE 64u /* bytes the CPU loads at once (x86-64, arm64) */

void zpl_icache_prefetch(const struct zpl *z, uint64_t objid)
{
	const struct zpl_icache *ic = &z->z_icache;
	if (ic->ic_ents == NULL)
		return;
	const char *set = (const char *)&ic->ic_ents[zpl_icache_set(ic, objid) * ZPL_ICACHE_WAYS];
	for (size_t at = 0; at < sizeof(struct zpl_icache_ent) * ZPL_ICACHE_WAYS;
	     at += ZPL_CPU_CACHE_LINE)
		__builtin_prefetch(set + at, 0, 3);
}

int zpl_op_read_inode(struct zpl_op *op, uint64_t objid, struct zpl_inode *out)
{
	struct zpl *z = op->op_z;
	const struct zpl_icache_ent *e = zpl_icache_find(z, objid);
	const uint8_t *rec;
	uint32_t len;
	uint8_t val[ZPL_VAL_MAX];
	if (e != NULL) {
		z->z_icache.ic_hits++;
		rec = e->ie_rec;
		len = e->ie_len;
	} else {
		uint8_t key[ZPL_SHORT_KEY];
		zpl_key_inode(key, objid);
		int rc = zpl_op_lookup(op, key, sizeof(key), val, sizeof(val), &len);
		if (rc != 0)
			return rc;
		z->z_icache.ic_misses++;
		rec = val;
	}
	if (zpl_inode_decode(rec, len, out) != 0) {
		log_ratelimited(LOG_WARN, "zpl: malformed inode record of object %llu",
		                (unsigned long long)objid);
		return -EIO;
	}
	if (e == NULL)
		zpl_icache_put(z, objid, rec, len);
	return 0;
}

int zpl_op_inode(struct zpl_op *op, uint64_t objid, struct zpl_oino **out)
{
	for (uint32_t i = 0; i < op->op_ninos; i++) {
		if (op->op_inos[i].oi_objid == objid) {
			if (op->op_inos[i].oi_deleted)
				return -ENOENT;
			*out = &op->op_inos[i];
			return 0;
		}
	}
	if (op->op_ninos == ZPL_OP_INODES)
		return -ENOMEM; /* no operation touches more than 4; the table is a safety margin */
	struct zpl_oino *oi = &op->op_inos[op->op_ninos];
	memset(oi, 0, offsetof(struct zpl_oino, oi_ino));
	int rc = zpl_op_read_inode(op, objid, &oi->oi_ino);
	if (rc != 0)
		return rc;
	oi->oi_objid = objid;
	op->op_ninos++;
	*out = oi;
	return 0;
}

int zpl_op_obj(struct zpl_op *op, const struct fs_obj_id *id, struct zpl_oino **out)
{
	if (id->foi_len != ZPL_OBJ_ID_BYTES)
		return -SH_EBADHANDLE;
	uint64_t objid = zpl_get_le64(id->foi_bytes);
	uint64_t gen = zpl_get_le64(id->foi_bytes + 8);
	if (objid < ZPL_FIRST_OBJID || gen == 0)
		return -SH_EBADHANDLE; /* never issued by any dataset */
	if (objid >= op->op_meta.me_next_objid || gen >= op->op_meta.me_next_gen)
		return -ESTALE; /* issued by a state the dataset left: a rollback's */
	struct zpl_oino *oi;
	int rc = zpl_op_inode(op, objid, &oi);
	if (rc == -ENOENT)
		return -ESTALE;
	if (rc != 0)
		return rc;
	if (oi->oi_ino.ino_gen != gen || (oi->oi_ino.ino_flags & ZPL_IF_UNLINKED) != 0)
		return -ESTALE; /* another object's, or removed and waiting for zpl_reap */
	*out = oi;
	return 0;
}

int zpl_op_delete_inode(struct zpl_op *op, struct zpl_oino *oi)
{
	oi->oi_deleted = true;
	oi->oi_dirty = false;
	if (op->op_meta.me_nobjects == 0)
		return -EIO; /* the meta record miscounts: a malformed tree */
	op->op_meta.me_nobjects--;
	op->op_meta_dirty = true;
	return 0;
}

int zpl_op_new_inode(struct zpl_op *op, uint8_t type, struct zpl_oino **out)
{
	struct zpl_meta *me = &op->op_meta;
	uint64_t objid, gen;
	if (op->op_ninos == ZPL_OP_INODES)
		return -ENOMEM;
	if (op->op_forced) {
		objid = op->op_forced_objid;
		gen = op->op_forced_gen;
		/* A replayed create comes at the point where the original took these from the
		 * counters; a record contradicting them does not match this dataset. */
		if (objid < me->me_next_objid || gen < me->me_next_gen || objid == UINT64_MAX ||
		    gen == UINT64_MAX)
			return -EINVAL;
		uint8_t key[ZPL_SHORT_KEY];
		uint32_t vlen;
		zpl_key_inode(key, objid);
		int rc = zpl_op_lookup(op, key, sizeof(key), NULL, 0, &vlen);
		if (rc == 0 || rc == -EIO)
			return -EIO; /* an inode at or above the counter: a malformed tree */
		if (rc != -ENOENT)
			return rc;
	} else {
		objid = me->me_next_objid;
		gen = me->me_next_gen;
		const struct zpl_env *env = &op->op_z->z_env;
		if (env->ze_txg) {
			uint64_t floor = ZPL_GEN_OF_TXG(env->ze_txg(env->ze_ctx));
			gen = SH_MAX(gen, floor);
		}
		if (objid == UINT64_MAX || gen == UINT64_MAX)
			return -ENOSPC;
	}
	me->me_next_objid = objid + 1;
	me->me_next_gen = gen + 1;
	me->me_nobjects++;
	op->op_meta_dirty = true;
	struct zpl_oino *oi = &op->op_inos[op->op_ninos++];
	memset(oi, 0, sizeof(*oi));
	oi->oi_objid = objid;
	oi->oi_created = true;
	oi->oi_dirty = true;
	struct zpl_inode *ino = &oi->oi_ino;
	ino->ino_type = type;
	ino->ino_nlink = 1;
	ino->ino_gen = gen;
	ino->ino_atime = ino->ino_mtime = ino->ino_ctime = ino->ino_btime = op->op_now;
	if (type == FS_REG)
		ino->ino_blksz = ZPL_PAGE_BYTES;
	*out = oi;
	return 0;
}

/* The plan's arrays are the zpl's and are reused from one operation to the next, but one that
 * grew past these capacities (the REMOVE of a 10 GiB file plans 81,920 extent deletions: 38 MiB
 * of mutations) is given back when its operation ends, so that a rare big operation does not
 * leave its peak resident for the life of the dataset. */
#define ZPL_PLAN_KEEP_MUTS 1024u
#define ZPL_PLAN_KEEP_DCHG 1024u

static void zpl_plan_shrink(struct zpl_op *op)
{
	struct zpl *z = op->op_z;
	if (z->z_cap_muts > ZPL_PLAN_KEEP_MUTS) {
		mem_free(z->z_muts);
		z->z_muts = NULL;
		z->z_cap_muts = 0;
	}
	if (z->z_cap_dchg > ZPL_PLAN_KEEP_DCHG) {
		mem_free(z->z_dchg);
		z->z_dchg = NULL;
		z->z_cap_dchg = 0;
	}
	op->op_muts = z->z_muts;
	op->op_dchg = z->z_dchg;
}

static int zpl_op_mut(struct zpl_op *op, struct zpl_mut **out)
{
	struct zpl *z = op->op_z;
	if (op->op_nmuts == z->z_cap_muts) {
		uint32_t cap = z->z_cap_muts != 0 ? z->z_cap_muts * 2 : 16;
		struct zpl_mut *m = mem_realloc(z->z_muts, sizeof(*m) * cap);
		if (m == NULL)
			return -ENOMEM;
		z->z_muts = op->op_muts = m;
		z->z_cap_muts = cap;
	}
	*out = &op->op_muts[op->op_nmuts++];
	return 0;
}

int zpl_op_put(struct zpl_op *op, const uint8_t *key, uint32_t klen, const void *val, uint32_t vlen,
               int mode)
{
	struct zpl_mut *m;
	VERIFY(klen <= ZPL_KEY_MAX && vlen <= sizeof(m->mu_val));
	int rc = zpl_op_mut(op, &m);
	if (rc != 0)
		return rc;
	memcpy(m->mu_key, key, klen);
	m->mu_klen = (uint8_t)klen;
	m->mu_kind = ZPL_MUT_PUT;
	m->mu_mode = (uint8_t)mode;
	m->mu_vlen = vlen;
	if (vlen > 0)
		memcpy(m->mu_val, val, vlen);
	return 0;
}

int zpl_op_del(struct zpl_op *op, const uint8_t *key, uint32_t klen)
{
	struct zpl_mut *m;
	VERIFY(klen <= ZPL_KEY_MAX);
	int rc = zpl_op_mut(op, &m);
	if (rc != 0)
		return rc;
	memcpy(m->mu_key, key, klen);
	m->mu_klen = (uint8_t)klen;
	m->mu_kind = ZPL_MUT_DEL;
	m->mu_vlen = 0;
	return 0;
}

int zpl_op_del_extent(struct zpl_op *op, const uint8_t *key, const uint8_t bp[BLK_PTR_DISK_BYTES])
{
	struct zpl_mut *m;
	int rc = zpl_op_mut(op, &m);
	if (rc != 0)
		return rc;
	memcpy(m->mu_key, key, ZPL_LONG_KEY);
	m->mu_klen = ZPL_LONG_KEY;
	m->mu_kind = ZPL_MUT_DEL_FREE;
	m->mu_vlen = BLK_PTR_DISK_BYTES;
	memcpy(m->mu_val, bp, BLK_PTR_DISK_BYTES);
	return 0;
}

int zpl_op_dchg(struct zpl_op *op, struct zpl_dchg **out)
{
	struct zpl *z = op->op_z;
	if (op->op_ndchg == z->z_cap_dchg) {
		uint32_t cap = z->z_cap_dchg != 0 ? z->z_cap_dchg * 2 : 16;
		struct zpl_dchg *d = mem_realloc(z->z_dchg, sizeof(*d) * cap);
		if (d == NULL)
			return -ENOMEM;
		z->z_dchg = op->op_dchg = d;
		z->z_cap_dchg = cap;
	}
	struct zpl_dchg *dc = &op->op_dchg[op->op_ndchg++];
	memset(dc, 0, sizeof(*dc));
	*out = dc;
	return 0;
}

/* Looks key up only to bring its path into memory: 0 when the path is loaded. */
static int zpl_preload(struct zpl_op *op, const uint8_t *key, uint32_t klen)
{
	struct blk_ptr missing;
	int rc = btree_lookup(op->op_z->z_tree, key, klen, NULL, 0, NULL, &missing);
	if (rc == 0 || rc == -ENOENT || rc == -EOVERFLOW)
		return 0;
	return zpl_op_tree_error(op, rc, &missing);
}

void zpl_fail(struct zpl *z, int rc, const char *what)
{
	if (z->z_failed == 0)
		log_error("zpl: %s failed half-way through a change (%s): the dataset's in-memory "
		          "state must be "
		          "rebuilt",
		          what, sh_strerror(rc));
	z->z_failed = rc != 0 ? rc : -EIO;
	zpl_icache_fini(z); /* the tree may now hold anything */
}

int zpl_op_commit(struct zpl_op *op)
{
	struct zpl *z = op->op_z;
	struct btree *t = z->z_tree;
	uint8_t key[ZPL_SHORT_KEY];
	int rc;

	/* Phase 2a: bring every path the commit walks into memory (see the theory above). */
	zpl_key_meta(key);
	if ((rc = zpl_preload(op, key, sizeof(key))) != 0)
		goto abort;
	for (uint32_t i = 0; i < op->op_ninos; i++) {
		const struct zpl_oino *oi = &op->op_inos[i];
		if (!oi->oi_dirty && !oi->oi_deleted)
			continue;
		zpl_key_inode(key, oi->oi_objid);
		if ((rc = zpl_preload(op, key, sizeof(key))) != 0)
			goto abort;
	}
	for (uint32_t i = 0; i < op->op_nmuts; i++) {
		const struct zpl_mut *m = &op->op_muts[i];
		if ((rc = zpl_preload(op, m->mu_key, m->mu_klen)) != 0)
			goto abort;
	}

	/* Phase 2b: puts, then deletes. From here a failure cannot be undone. */
	const char *what = "put";
	if (op->op_meta_dirty) {
		uint8_t val[ZPL_META_BYTES];
		zpl_meta_encode(&op->op_meta, val);
		zpl_key_meta(key);
		if ((rc = btree_put(t, key, sizeof(key), val, sizeof(val), BTREE_PUT_REPLACE,
		                    NULL)) != 0)
			goto failed;
	}
	for (uint32_t i = 0; i < op->op_ninos; i++) {
		const struct zpl_oino *oi = &op->op_inos[i];
		if (!oi->oi_dirty || oi->oi_deleted)
			continue;
		uint8_t val[ZPL_VAL_MAX];
		uint32_t vlen = zpl_inode_encode(&oi->oi_ino, val);
		zpl_key_inode(key, oi->oi_objid);
		rc = btree_put(t, key, sizeof(key), val, vlen,
		               oi->oi_created ? BTREE_PUT_NEW : BTREE_PUT_REPLACE, NULL);
		if (rc != 0)
			goto failed;
		zpl_icache_put(z, oi->oi_objid, val, vlen);
	}
	for (uint32_t i = 0; i < op->op_nmuts; i++) {
		const struct zpl_mut *m = &op->op_muts[i];
		if (m->mu_kind != ZPL_MUT_PUT)
			continue;
		rc = btree_put(t, m->mu_key, m->mu_klen, m->mu_val, m->mu_vlen,
		               (enum btree_put_mode)m->mu_mode, NULL);
		if (rc != 0)
			goto failed;
	}
	what = "delete";
	for (uint32_t i = 0; i < op->op_nmuts; i++) {
		const struct zpl_mut *m = &op->op_muts[i];
		if (m->mu_kind != ZPL_MUT_DEL && m->mu_kind != ZPL_MUT_DEL_FREE)
			continue;
		if ((rc = btree_delete(t, m->mu_key, m->mu_klen, NULL)) != 0)
			goto failed;
	}
	for (uint32_t i = 0; i < op->op_nmuts; i++) {
		const struct zpl_mut *m = &op->op_muts[i];
		struct blk_ptr bp;
		/* The pointer decoded when the extent was planned for deletion; a zero one was a
		 * block still being written, which has no block yet. */
		if (m->mu_kind == ZPL_MUT_DEL_FREE && blk_ptr_decode(m->mu_val, &bp) == 0 &&
		    !blk_ptr_is_hole(&bp))
			z->z_env.ze_free_block(z->z_env.ze_ctx, &bp);
	}
	for (uint32_t i = 0; i < op->op_ninos; i++) {
		const struct zpl_oino *oi = &op->op_inos[i];
		if (!oi->oi_deleted || oi->oi_created)
			continue;
		zpl_key_inode(key, oi->oi_objid);
		zpl_icache_drop(z, oi->oi_objid);
		if ((rc = btree_delete(t, key, sizeof(key), NULL)) != 0)
			goto failed;
	}

	/* Phase 2c: dirty data (nothing here can fail). */
	for (uint32_t i = 0; i < op->op_ndchg; i++)
		zpl_dchg_apply(z, &op->op_dchg[i]);
	op->op_ndchg = 0;
	z->z_meta = op->op_meta;
	if (op->op_queued)
		z->z_reap_queued++;
	op->op_nmuts = 0;
	zpl_plan_shrink(op);
	return 0;

failed:
	zpl_fail(z, rc, what);
	zpl_op_abort(op);
	zpl_plan_shrink(op);
	return -EIO;
abort:
	zpl_op_abort(op);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle */

static bool zpl_env_valid(const struct zpl_env *env)
{
	return env != NULL && env->ze_get_block != NULL && env->ze_release != NULL &&
	       env->ze_write_block != NULL && env->ze_free_block != NULL && env->ze_space != NULL &&
	       env->ze_now != NULL;
}

static bool zpl_visit_any(void *arg, const void *key, uint32_t key_len, const void *val,
                          uint32_t val_len)
{
	(void)key;
	(void)key_len;
	(void)val;
	(void)val_len;
	*(bool *)arg = true;
	return false;
}

int zpl_format(struct btree *tree, const struct zpl_env *env, const struct fs_cred *root_owner,
               uint32_t mode, const uint64_t *salt, struct blk_ptr *missing_out)
{
	if (tree == NULL || !zpl_env_valid(env) || root_owner == NULL)
		return -EINVAL;
	struct blk_ptr missing;
	bool any = false;
	int rc = btree_scan(tree, NULL, 0, false, zpl_visit_any, &any, &missing);
	if (rc == -SH_ENEEDBLOCK && missing_out != NULL)
		*missing_out = missing;
	if (rc != 0)
		return rc;
	if (any)
		return -EEXIST;

	struct zpl_meta me = {
	    .me_next_objid = ZPL_ROOT_OBJID + 1,
	    .me_root_objid = ZPL_ROOT_OBJID,
	    .me_root_gen = 1,
	    .me_nobjects = 1,
	    .me_next_gen = 2,
	};
	if (salt != NULL) {
		me.me_salt = *salt;
	} else if ((rc = sh_random_bytes(&me.me_salt, sizeof(me.me_salt))) != 0) {
		return rc;
	}
	struct zpl_inode root;
	memset(&root, 0, sizeof(root));
	root.ino_type = FS_DIR;
	root.ino_mode = mode & 07777;
	root.ino_nlink = 2;
	root.ino_uid = root_owner->fc_uid;
	root.ino_gid = root_owner->fc_gid;
	env->ze_now(env->ze_ctx, &root.ino_atime);
	root.ino_mtime = root.ino_ctime = root.ino_btime = root.ino_atime;
	root.ino_gen = me.me_root_gen;
	root.ino_parent = ZPL_ROOT_OBJID;

	uint8_t mkey[ZPL_SHORT_KEY], mval[ZPL_META_BYTES], ikey[ZPL_SHORT_KEY], ival[ZPL_VAL_MAX];
	zpl_key_meta(mkey);
	zpl_meta_encode(&me, mval);
	zpl_key_inode(ikey, ZPL_ROOT_OBJID);
	uint32_t ilen = zpl_inode_encode(&root, ival);
	/* The tree is empty: the first put makes an in-memory root, so neither put can miss. */
	if ((rc = btree_put(tree, mkey, sizeof(mkey), mval, sizeof(mval), BTREE_PUT_NEW, NULL)) !=
	    0)
		return rc;
	if ((rc = btree_put(tree, ikey, sizeof(ikey), ival, ilen, BTREE_PUT_NEW, NULL)) != 0) {
		/* Leave the tree as it was. The delete of the only key cannot miss either. */
		if (btree_delete(tree, mkey, sizeof(mkey), NULL) != 0)
			log_error("zpl: format could not undo its meta record");
		return rc;
	}
	return 0;
}

int zpl_open(struct btree *tree, const struct zpl_env *env, uint32_t record_bytes, struct zpl **out,
             struct blk_ptr *missing_out)
{
	if (tree == NULL || !zpl_env_valid(env) || out == NULL)
		return -EINVAL;
	if (record_bytes == 0)
		record_bytes = ZPL_RECORD_DEFAULT_BYTES;
	if (record_bytes % ZPL_PAGE_BYTES != 0 || record_bytes > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	uint8_t key[ZPL_SHORT_KEY], val[ZPL_META_BYTES];
	uint32_t vlen = 0;
	struct blk_ptr missing;
	zpl_key_meta(key);
	int rc = btree_lookup(tree, key, sizeof(key), val, sizeof(val), &vlen, &missing);
	if (rc == -SH_ENEEDBLOCK && missing_out != NULL)
		*missing_out = missing;
	if (rc == -EOVERFLOW)
		rc = -EIO;
	if (rc != 0)
		return rc;
	struct zpl_meta me;
	if (zpl_meta_decode(val, vlen, &me) != 0)
		return -EIO;
	struct zpl *z = mem_zalloc(sizeof(*z));
	if (z == NULL)
		return -ENOMEM;
	z->z_tree = tree;
	z->z_env = *env;
	z->z_record_bytes = record_bytes;
	z->z_meta = me;
	zpl_icache_init(&z->z_icache, env->ze_icache_entries);
	if (zpl_dtab_init(&z->z_dtab) != 0) {
		mem_free(z);
		return -ENOMEM;
	}
	if (env->ze_write_sealed != NULL && env->ze_drop_seal != NULL) {
		z->z_dtab.dt_drop_seal = env->ze_drop_seal;
		z->z_dtab.dt_seal_ctx = env->ze_ctx;
	}
	*out = z;
	return 0;
}

void zpl_close(struct zpl *z)
{
	if (z == NULL)
		return;
	zpl_dtab_fini(&z->z_dtab);
	zpl_icache_fini(z);
	mem_free(z->z_muts);
	mem_free(z->z_dchg);
	mem_free(z->z_scratch);
	mem_free(z);
}

void zpl_root(const struct zpl *z, struct fs_obj_id *root_out)
{
	zpl_objid_encode(z->z_meta.me_root_objid, z->z_meta.me_root_gen, root_out);
}

void zpl_cache_stats(const struct zpl *z, struct zpl_cache_stats *out)
{
	out->zcs_hits = z->z_icache.ic_hits;
	out->zcs_misses = z->z_icache.ic_misses;
	out->zcs_entries = z->z_icache.ic_nsets * ZPL_ICACHE_WAYS;
	out->zcs_plan_bytes = (uint64_t)z->z_cap_muts * sizeof(struct zpl_mut) +
	                      (uint64_t)z->z_cap_dchg * sizeof(struct zpl_dchg);
}

void zpl_cache_forget(struct zpl *z)
{
	zpl_icache_fini(z);
}

void zpl_info(const struct zpl *z, struct fs_info *info_out)
{
	(void)z;
	memset(info_out, 0, sizeof(*info_out));
	info_out->fi_max_file_size = ZPL_MAX_FILE_BYTES;
	info_out->fi_time_delta.ft_sec = 0;
	info_out->fi_time_delta.ft_nsec = 1;
	info_out->fi_link_max = ZPL_LINK_MAX;
	info_out->fi_name_max = FS_NAME_MAX;
	info_out->fi_has_links = true;
	info_out->fi_has_symlinks = true;
	info_out->fi_can_set_time = true;
	info_out->fi_no_trunc = true;
	info_out->fi_chown_restricted = true;
	info_out->fi_case_insensitive = false;
	info_out->fi_case_preserving = true;
}

uint64_t zpl_dirty_bytes(const struct zpl *z)
{
	return z->z_dtab.dt_bytes;
}

void zpl_test_set_hash(struct zpl *z, uint64_t (*hash)(const void *name, size_t len, uint64_t salt))
{
	z->z_hash = hash;
}

size_t zpl_scan_hints(struct zpl *z, const struct blk_ptr *missing, struct blk_ptr *out,
                      size_t max)
{
	return btree_scan_hints(z->z_tree, missing, out, max);
}

int zpl_execute(struct zpl *z, struct fs_req *req, struct blk_ptr *missing_out)
{
	if (z->z_failed != 0) {
		req->fr_status = -EIO;
		return 0;
	}
	struct zpl_op *op = &z->z_op;
	zpl_op_begin(z, op, req->fr_cred, missing_out);
	int rc = zpl_run(op, req);
	zpl_op_abort(op); /* a finished plan is empty; an unfinished one is dropped */
	if (rc == -SH_ENEEDBLOCK || rc == -SH_EPARTIAL)
		return rc;
	req->fr_status = rc;
	return 0;
}
