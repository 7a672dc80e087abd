/* zpl_ops.c: the operations of fs.h over the dataset tree, with POSIX permissions.
 *
 * Each operation follows the plan of zpl.c: load the objects (zpl_op_obj, zpl_op_inode), check,
 * decide and edit them in memory, plan the dirent, extent and data changes, and zpl_op_commit.
 *
 * Permission rules (skipped in replay, where the record's credential still decides ownership and
 * set-id bits):
 *   - owner, group (the credential's gid or a supplementary one) or other bits, the first class
 *     that matches; uid 0 may read and write anything and execute or search when any x bit is set
 *     (a directory can always be searched by it);
 *   - lookup needs search (x) on the directory; create, remove, rename and link need write and
 *     search on the directories they change; READDIR needs read; moving a directory to another
 *     parent also needs write on the directory itself (its ".." changes);
 *   - sticky directories: an entry may be removed or replaced only by the owner of the entry's
 *     object, of the directory, or root (EPERM otherwise, as Linux);
 *   - setgid directories: new objects take the directory's gid and new directories its setgid
 *     bit; a non-root creator's setgid bit on a new non-directory is dropped when it is not in
 *     that group;
 *   - SETATTR: only root changes the owner; the owner may change the group to one it is in; the
 *     owner or root changes the mode, a non-root caller's setgid bit being dropped when it is not
 *     in the file's group; times set to the server's time need write access (or ownership),
 *     explicit times ownership (or root); size needs write access;
 *   - a change of owner or group of a non-directory clears its setuid bit, and its setgid bit
 *     when group execute is set (as knfsd); a WRITE by a caller other than the owner or root
 *     does the same (POSIX);
 *   - READ and WRITE (and SETATTR of the size) let the owner through whatever the mode bits, and
 *     READ accepts execute permission for read, as knfsd does: NFS clients check access at open,
 *     and a file created read-only must still take the data its creator writes into it. */
#include "zpl/zpl_impl.h"

#define ZPL_BYTES_PER_OBJECT                                                                       \
	512u /* FSSTAT's estimate of tree space per new file (inode, dirent)                       \
	      */

static bool zpl_in_group(const struct fs_cred *cred, uint32_t gid)
{
	if (cred->fc_gid == gid)
		return true;
	uint32_t n = SH_MIN(cred->fc_ngids, (uint32_t)FS_MAX_GIDS);
	for (uint32_t i = 0; i < n; i++)
		if (cred->fc_gids[i] == gid)
			return true;
	return false;
}

/* The rwx bits the credential has on ino (ZPL_R/W/X), root's included. */
static uint32_t zpl_mode_bits(const struct fs_cred *cred, const struct zpl_inode *ino)
{
	if (cred->fc_uid == 0) {
		uint32_t bits = ZPL_R | ZPL_W;
		if (ino->ino_type == FS_DIR || (ino->ino_mode & 0111) != 0)
			bits |= ZPL_X;
		return bits;
	}
	if (cred->fc_uid == ino->ino_uid)
		return (ino->ino_mode >> 6) & 7;
	if (zpl_in_group(cred, ino->ino_gid))
		return (ino->ino_mode >> 3) & 7;
	return ino->ino_mode & 7;
}

int zpl_perm(const struct zpl_op *op, const struct zpl_inode *ino, uint32_t want,
             bool owner_override, bool read_if_exec)
{
	if (op->op_replay || want == 0)
		return 0;
	uint32_t bits = zpl_mode_bits(op->op_cred, ino);
	if (owner_override && op->op_cred->fc_uid == ino->ino_uid)
		bits |= ZPL_R | ZPL_W;
	if (read_if_exec && (bits & ZPL_X) != 0)
		bits |= ZPL_R;
	return (bits & want) == want ? 0 : -EACCES;
}

static bool zpl_is_root(const struct zpl_op *op)
{
	return op->op_cred->fc_uid == 0;
}

static bool zpl_is_dot(const char *name)
{
	return name[0] == '.' && name[1] == '\0';
}

static bool zpl_is_dotdot(const char *name)
{
	return name[0] == '.' && name[1] == '.' && name[2] == '\0';
}

/* A name for an entry: 0 and *len_out, or -EINVAL (NULL, empty, or with '/'), -ENAMETOOLONG.
 * "." and ".." are the callers' business. */
static int zpl_name_check(const char *name, size_t *len_out)
{
	if (name == NULL)
		return -EINVAL;
	size_t len = strnlen(name, FS_NAME_MAX + 1);
	if (len > FS_NAME_MAX)
		return -ENAMETOOLONG;
	if (len == 0 || memchr(name, '/', len) != NULL)
		return -EINVAL;
	*len_out = len;
	return 0;
}

/* The sticky-directory rule for removing or replacing child's entry in dir. */
static int zpl_sticky_ok(const struct zpl_op *op, const struct zpl_inode *dir,
                         const struct zpl_inode *child)
{
	if (op->op_replay || (dir->ino_mode & 01000) == 0 || zpl_is_root(op))
		return 0;
	uint32_t uid = op->op_cred->fc_uid;
	return uid == dir->ino_uid || uid == child->ino_uid ? 0 : -EPERM;
}

static void zpl_touch_dir(struct zpl_op *op, struct zpl_oino *dir)
{
	dir->oi_ino.ino_mtime = dir->oi_ino.ino_ctime = op->op_now;
	dir->oi_dirty = true;
}

/* Plans the removal of an object whose last link goes. A regular file of more than
 * ZPL_REAP_INLINE_MAX extents is queued instead (zpl_reap.c): it loses its name now, and its
 * blocks are freed by later zpl_reap calls, so that no one operation has to hold a huge file's
 * extent leaves. */
static int zpl_obj_delete(struct zpl_op *op, struct zpl_oino *oi)
{
	if (oi->oi_ino.ino_type == FS_REG && oi->oi_ino.ino_nblocks > ZPL_REAP_INLINE_MAX)
		return zpl_reap_queue(op, oi);
	int rc = zpl_data_remove(op, oi);
	if (rc != 0)
		return rc;
	return zpl_op_delete_inode(op, oi);
}

/* A dirent's object, checked against the type the dirent states (a mismatch or a missing inode is
 * a malformed tree). */
static int zpl_child(struct zpl_op *op, const struct zpl_dirent *de, struct zpl_oino **out)
{
	int rc = zpl_op_inode(op, de->de_child, out);
	if (rc == -ENOENT)
		return -EIO;
	if (rc != 0)
		return rc;
	return (*out)->oi_ino.ino_type == de->de_type ? 0 : -EIO;
}

/* Clears the set-id bits a change of owner, or a write by anyone but root, revokes. */
static void zpl_kill_setid(struct zpl_inode *ino)
{
	ino->ino_mode &= ~04000u;
	if ((ino->ino_mode & 0010) != 0)
		ino->ino_mode &= ~02000u;
}

static void zpl_set_times(struct zpl_op *op, struct zpl_inode *ino, const struct fs_sattr *sa)
{
	if (sa->fs_atime_how == FS_TIME_SERVER)
		ino->ino_atime = op->op_now;
	else if (sa->fs_atime_how == FS_TIME_CLIENT)
		ino->ino_atime = sa->fs_atime;
	if (sa->fs_mtime_how == FS_TIME_SERVER)
		ino->ino_mtime = op->op_now;
	else if (sa->fs_mtime_how == FS_TIME_CLIENT)
		ino->ino_mtime = sa->fs_mtime;
}

static int zpl_sattr_times_valid(const struct fs_sattr *sa)
{
	if ((unsigned)sa->fs_atime_how > FS_TIME_CLIENT ||
	    (unsigned)sa->fs_mtime_how > FS_TIME_CLIENT)
		return -EINVAL;
	if ((sa->fs_atime_how == FS_TIME_CLIENT && sa->fs_atime.ft_nsec >= 1000000000u) ||
	    (sa->fs_mtime_how == FS_TIME_CLIENT && sa->fs_mtime.ft_nsec >= 1000000000u))
		return -EINVAL;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Attributes */

static int zpl_getattr(struct zpl_op *op, struct fs_req *req)
{
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	zpl_attr_from_inode(op->op_z, oi->oi_objid, &oi->oi_ino, &req->u.getattr.ga_attr);
	return 0;
}

/* The permission checks of SETATTR against the attributes before the change. */
static int zpl_setattr_check(struct zpl_op *op, const struct zpl_inode *ino,
                             const struct fs_sattr *sa)
{
	if (sa->fs_set_size) {
		if (ino->ino_type == FS_DIR)
			return -EISDIR;
		if (ino->ino_type != FS_REG)
			return -EINVAL;
		if (sa->fs_size > ZPL_MAX_FILE_BYTES)
			return -EFBIG;
	}
	int rc = zpl_sattr_times_valid(sa);
	if (rc != 0 || op->op_replay)
		return rc;
	bool root = zpl_is_root(op), owner = op->op_cred->fc_uid == ino->ino_uid;
	if (sa->fs_set_size && (rc = zpl_perm(op, ino, ZPL_W, true, false)) != 0)
		return rc;
	/* chown(2)'s rules, for an owner or group set even to what it is: only the owner may
	 * keep the owner, and give the group to one of its own groups; root may do anything. */
	if (sa->fs_set_uid && !root && !(owner && sa->fs_uid == ino->ino_uid))
		return -EPERM;
	if (sa->fs_set_gid && !root &&
	    !(owner && (sa->fs_gid == ino->ino_gid || zpl_in_group(op->op_cred, sa->fs_gid))))
		return -EPERM;
	if (sa->fs_set_mode && !owner && !root)
		return -EPERM;
	if ((sa->fs_atime_how == FS_TIME_CLIENT || sa->fs_mtime_how == FS_TIME_CLIENT) && !owner &&
	    !root)
		return -EPERM;
	if ((sa->fs_atime_how == FS_TIME_SERVER || sa->fs_mtime_how == FS_TIME_SERVER) && !owner &&
	    !root && zpl_perm(op, ino, ZPL_W, false, false) != 0)
		return -EACCES;
	return 0;
}

/* Applies sa to oi (checked), planning a size change. Sets *changed when anything was set. */
static int zpl_setattr_apply(struct zpl_op *op, struct zpl_oino *oi, const struct fs_sattr *sa,
                             bool *changed)
{
	struct zpl_inode *ino = &oi->oi_ino;
	int rc;
	if (sa->fs_set_size) {
		if (sa->fs_size != ino->ino_size) {
			if ((rc = zpl_data_truncate_step(op, oi, sa->fs_size)) != 0 ||
			    (rc = zpl_data_truncate(op, oi, sa->fs_size)) != 0)
				return rc;
			ino->ino_mtime = op->op_now;
		}
		/* As truncate(2) by anyone but root, even to the same size; a mode set in the same
		 * call comes after, as the posix back end's chmod does. */
		if (!zpl_is_root(op))
			zpl_kill_setid(ino);
		*changed = true;
	}
	/* As knfsd: setting the owner or group of anything but a directory, even to what it was,
	 * revokes the set-id bits, those of a mode set in the same call too. */
	bool owner_set = sa->fs_set_uid || sa->fs_set_gid;
	if (sa->fs_set_uid)
		ino->ino_uid = sa->fs_uid;
	if (sa->fs_set_gid)
		ino->ino_gid = sa->fs_gid;
	if (sa->fs_set_mode) {
		ino->ino_mode = sa->fs_mode & 07777;
		if (!zpl_is_root(op) && !zpl_in_group(op->op_cred, ino->ino_gid))
			ino->ino_mode &= ~02000u;
	}
	if (owner_set && ino->ino_type != FS_DIR)
		zpl_kill_setid(ino);
	zpl_set_times(op, ino, sa);
	/* The verifier of an EXCLUSIVE create lives until the file's times or data change, as
	 * it does in the times knfsd keeps it in. */
	if (sa->fs_set_size || sa->fs_atime_how != FS_TIME_DONT_CHANGE ||
	    sa->fs_mtime_how != FS_TIME_DONT_CHANGE)
		ino->ino_flags &= (uint8_t)~ZPL_IF_VERF;
	if (sa->fs_set_uid || sa->fs_set_gid || sa->fs_set_mode ||
	    sa->fs_atime_how != FS_TIME_DONT_CHANGE || sa->fs_mtime_how != FS_TIME_DONT_CHANGE)
		*changed = true;
	if (*changed) {
		ino->ino_ctime = op->op_now;
		oi->oi_dirty = true;
	}
	return 0;
}

static int zpl_setattr(struct zpl_op *op, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.setattr.sa_wcc;
	const struct fs_sattr *sa = &req->u.setattr.sa_sattr;
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	zpl_wcc_pre(&oi->oi_ino, wcc);
	if (!op->op_replay && req->u.setattr.sa_guard &&
	    (oi->oi_ino.ino_ctime.ft_sec != req->u.setattr.sa_guard_ctime.ft_sec ||
	     oi->oi_ino.ino_ctime.ft_nsec != req->u.setattr.sa_guard_ctime.ft_nsec)) {
		rc = -SH_ENOTSYNC;
		goto out;
	}
	/* A symlink's mode means nothing, and knfsd ignores a mode set on one. */
	struct fs_sattr wanted = *sa;
	if (oi->oi_ino.ino_type == FS_LNK)
		wanted.fs_set_mode = false;
	if ((rc = zpl_setattr_check(op, &oi->oi_ino, &wanted)) != 0)
		goto out;
	struct zpl_inode before = oi->oi_ino;
	bool changed = false;
	if ((rc = zpl_setattr_apply(op, oi, &wanted, &changed)) == 0 && changed)
		rc = zpl_op_commit(op);
	if (rc != 0) {
		oi->oi_ino = before;
		if (rc == -SH_ENEEDBLOCK || rc == -SH_EPARTIAL)
			return rc;
	}
out:
	zpl_wcc_post(op->op_z, oi, wcc);
	return rc;
}

static int zpl_access(struct zpl_op *op, struct fs_req *req)
{
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	const struct zpl_inode *ino = &oi->oi_ino;
	uint32_t bits = zpl_mode_bits(op->op_cred, ino);
	uint32_t granted = 0;
	/* ACCESS3 bits to rwx as RFC 1813 section 3.3.4 describes them (and as the posix back end
	 * maps them). */
	if (ino->ino_type == FS_DIR) {
		if (bits & ZPL_R)
			granted |= FS_ACCESS_READ;
		if (bits & ZPL_X)
			granted |= FS_ACCESS_LOOKUP;
		if ((bits & (ZPL_W | ZPL_X)) == (ZPL_W | ZPL_X))
			granted |= FS_ACCESS_MODIFY | FS_ACCESS_EXTEND | FS_ACCESS_DELETE;
	} else {
		if (bits & ZPL_R)
			granted |= FS_ACCESS_READ;
		if (bits & ZPL_W)
			granted |= FS_ACCESS_MODIFY | FS_ACCESS_EXTEND;
		if ((bits & ZPL_X) && ino->ino_type == FS_REG)
			granted |= FS_ACCESS_EXECUTE;
	}
	req->u.access.ac_granted = granted & req->u.access.ac_want;
	req->u.access.ac_attr_valid = true;
	zpl_attr_from_inode(op->op_z, oi->oi_objid, ino, &req->u.access.ac_attr);
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Lookup, symlinks, data */

static int zpl_lookup(struct zpl_op *op, struct fs_req *req)
{
	struct zpl_oino *dir, *child;
	const char *name = req->u.lookup.lk_name;
	int rc = zpl_op_obj(op, &req->fr_obj, &dir);
	if (rc != 0)
		return rc;
	req->u.lookup.lk_dir_attr_valid = true;
	zpl_attr_from_inode(op->op_z, dir->oi_objid, &dir->oi_ino, &req->u.lookup.lk_dir_attr);
	if (dir->oi_ino.ino_type != FS_DIR)
		return -ENOTDIR;
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_X, false, false)) != 0)
		return rc;
	if (name == NULL)
		return -EINVAL;
	if (zpl_is_dot(name)) {
		child = dir;
	} else if (zpl_is_dotdot(name)) {
		rc = zpl_op_inode(op, dir->oi_ino.ino_parent, &child);
		if (rc == -ENOENT)
			rc = -EIO;
		if (rc != 0)
			return rc;
	} else {
		size_t len;
		if (name[0] == '\0')
			return -ENOENT;
		if ((rc = zpl_name_check(name, &len)) != 0)
			return rc;
		struct zpl_dirent de;
		if ((rc = zpl_dir_find(op, dir->oi_objid, name, len, &de, NULL, NULL)) != 0)
			return rc;
		if ((rc = zpl_child(op, &de, &child)) != 0)
			return rc;
	}
	zpl_objid_encode(child->oi_objid, child->oi_ino.ino_gen, &req->u.lookup.lk_obj);
	zpl_attr_from_inode(op->op_z, child->oi_objid, &child->oi_ino, &req->u.lookup.lk_attr);
	return 0;
}

static int zpl_readlink(struct zpl_op *op, struct fs_req *req)
{
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	const struct zpl_inode *ino = &oi->oi_ino;
	req->u.readlink.rl_attr_valid = true;
	zpl_attr_from_inode(op->op_z, oi->oi_objid, ino, &req->u.readlink.rl_attr);
	if (ino->ino_type != FS_LNK)
		return -EINVAL;
	if (ino->ino_link_len <= ZPL_SYMLINK_INLINE_MAX)
		memcpy(req->u.readlink.rl_target, ino->ino_link, ino->ino_link_len);
	else if ((rc = zpl_data_read_link(op, oi, req->u.readlink.rl_target)) != 0)
		return rc;
	req->u.readlink.rl_target[ino->ino_link_len] = '\0';
	req->u.readlink.rl_len = ino->ino_link_len;
	return 0;
}

static int zpl_read(struct zpl_op *op, struct fs_req *req)
{
	struct zpl_oino *oi;
	struct fs_buf *fb = &req->u.read.rd_buf;
	memset(fb, 0, sizeof(*fb));
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	const struct zpl_inode *ino = &oi->oi_ino;
	req->u.read.rd_attr_valid = true;
	zpl_attr_from_inode(op->op_z, oi->oi_objid, ino, &req->u.read.rd_attr);
	if (ino->ino_type != FS_REG)
		return ino->ino_type == FS_DIR ? -EISDIR : -EINVAL;
	if ((rc = zpl_perm(op, ino, ZPL_R, true, true)) != 0)
		return rc;
	return zpl_data_read(op, oi, req);
}

static int zpl_write_check(const struct zpl_op *op, const struct zpl_inode *ino, uint64_t off,
                           uint32_t len, const void *data)
{
	if (ino->ino_type != FS_REG)
		return ino->ino_type == FS_DIR ? -EISDIR : -EINVAL;
	int rc = zpl_perm(op, ino, ZPL_W, true, false);
	if (rc != 0)
		return rc;
	if (off > ZPL_MAX_FILE_BYTES || ZPL_MAX_FILE_BYTES - off < len)
		return -EFBIG;
	return data == NULL && len > 0 ? -EINVAL : 0;
}

static int zpl_write(struct zpl_op *op, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.write.wr_wcc;
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	struct zpl_inode *ino = &oi->oi_ino;
	struct zpl_inode before = *ino;
	zpl_wcc_pre(ino, wcc);
	uint64_t off = req->u.write.wr_offset;
	uint32_t len = req->u.write.wr_len;
	req->u.write.wr_count = 0;
	req->u.write.wr_committed = FS_UNSTABLE;
	if ((rc = zpl_write_check(op, ino, off, len, req->u.write.wr_data)) != 0 || len == 0)
		goto out;
	if ((rc = zpl_data_write(op, oi, off, req->u.write.wr_data, len)) != 0)
		goto undo;
	/* As write(2) by anyone without CAP_FSETID, the owner included: only root keeps them. */
	if (op->op_cred->fc_uid != 0)
		zpl_kill_setid(ino);
	ino->ino_flags &= (uint8_t)~ZPL_IF_VERF;
	ino->ino_mtime = ino->ino_ctime = op->op_now;
	oi->oi_dirty = true;
	if ((rc = zpl_op_commit(op)) != 0)
		goto undo;
	req->u.write.wr_count = len;
	goto out;
undo:
	*ino = before;
	if (rc == -SH_ENEEDBLOCK)
		return rc;
out:
	zpl_wcc_post(op->op_z, oi, wcc);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Creating: CREATE, MKDIR, SYMLINK, MKNOD */

/* CREATE of a name that exists (RFC 1813 section 3.3.8): 0 with *out the object the reply
 * names, or the error. */
static int zpl_create_existing(struct zpl_op *op, struct fs_req *req, const struct zpl_dirent *de,
                               struct zpl_oino **out)
{
	const struct fs_sattr *sa = &req->u.create.cr_sattr;
	struct zpl_oino *child;
	if (req->fr_op != FS_OP_CREATE || req->u.create.cr_mode == FS_CREATE_GUARDED)
		return -EEXIST;
	int rc = zpl_child(op, de, &child);
	if (rc != 0)
		return rc;
	const struct zpl_inode *ino = &child->oi_ino;
	if (req->u.create.cr_mode == FS_CREATE_EXCLUSIVE) {
		/* A retransmission finds the file its first transmission made. */
		if (ino->ino_type != FS_REG || (ino->ino_flags & ZPL_IF_VERF) == 0 ||
		    ino->ino_size != 0 || memcmp(ino->ino_verf, req->u.create.cr_verf, 8) != 0)
			return -EEXIST;
		*out = child;
		return 0;
	}
	/* UNCHECKED over an existing regular file: only a size applies (as knfsd reads 3.3.8). */
	if (ino->ino_type != FS_REG)
		return -EEXIST;
	if (sa->fs_set_size) {
		if (sa->fs_size > ZPL_MAX_FILE_BYTES)
			return -EFBIG;
		if ((rc = zpl_perm(op, ino, ZPL_W, true, false)) != 0)
			return rc;
		if (sa->fs_size != ino->ino_size) {
			if ((rc = zpl_data_truncate_step(op, child, sa->fs_size)) != 0 ||
			    (rc = zpl_data_truncate(op, child, sa->fs_size)) != 0)
				return rc;
			child->oi_ino.ino_mtime = op->op_now;
		}
		if (!zpl_is_root(op))
			zpl_kill_setid(&child->oi_ino); /* as truncate(2) */
		child->oi_ino.ino_ctime = op->op_now;
		child->oi_dirty = true;
		if ((rc = zpl_op_commit(op)) != 0)
			return rc;
	}
	*out = child;
	return 0;
}

static uint32_t zpl_default_mode(enum fs_op op)
{
	switch (op) {
	case FS_OP_MKDIR: return 0755;
	case FS_OP_SYMLINK: return 0777;
	default: return 0644;
	}
}

static int zpl_create(struct zpl_op *op, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.create.cr_dir_wcc;
	const struct fs_sattr *sa = &req->u.create.cr_sattr;
	const char *name = req->u.create.cr_name;
	bool exclusive = req->fr_op == FS_OP_CREATE && req->u.create.cr_mode == FS_CREATE_EXCLUSIVE;
	struct zpl_oino *dir, *child = NULL;
	size_t len = 0, tlen = 0;
	uint8_t type;
	int rc = zpl_op_obj(op, &req->fr_obj, &dir);
	if (rc != 0)
		return rc;
	struct zpl_inode dir_before = dir->oi_ino;
	zpl_wcc_pre(&dir->oi_ino, wcc);
	req->u.create.cr_attr_valid = false;

	if (name != NULL && (zpl_is_dot(name) || zpl_is_dotdot(name))) {
		rc = -EEXIST;
		goto out;
	}
	switch (req->fr_op) {
	case FS_OP_CREATE:
		type = FS_REG;
		if ((unsigned)req->u.create.cr_mode > FS_CREATE_EXCLUSIVE)
			rc = -EINVAL;
		break;
	case FS_OP_MKDIR: type = FS_DIR; break;
	case FS_OP_SYMLINK:
		type = FS_LNK;
		if (req->u.create.cr_link_target == NULL)
			rc = -EINVAL;
		else if ((tlen = strnlen(req->u.create.cr_link_target, FS_PATH_MAX + 1)) >
		         FS_PATH_MAX)
			rc = -ENAMETOOLONG;
		else if (tlen == 0)
			rc = -ENOENT; /* as symlink(2) with an empty target */
		break;
	default:
		type = (uint8_t)req->u.create.cr_type;
		if (type != FS_CHR && type != FS_BLK && type != FS_SOCK && type != FS_FIFO)
			rc = -SH_EBADTYPE;
		break;
	}
	if (rc != 0)
		goto out;
	if (dir->oi_ino.ino_type != FS_DIR) {
		rc = -ENOTDIR;
		goto out;
	}
	if ((rc = zpl_name_check(name, &len)) != 0)
		goto out;
	/* The order of open(2) and mkdir(2), which knfsd's answers follow: searching the
	 * directory needs X, an existing name is found (EEXIST) before creating needs W. */
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_X, false, false)) != 0)
		goto out;
	if (!exclusive && (rc = zpl_sattr_times_valid(sa)) != 0)
		goto out;

	struct zpl_dirent de;
	uint64_t free_hash = 0;
	rc = zpl_dir_find(op, dir->oi_objid, name, len, &de, NULL, &free_hash);
	if (rc == 0) {
		if ((rc = zpl_create_existing(op, req, &de, &child)) != 0)
			goto undo;
		goto done;
	}
	if (rc != -ENOENT)
		goto undo;
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_W | ZPL_X, false, false)) != 0)
		goto undo;

	/* A new object: owner and group first, as the permission rules on sattr need them. */
	const struct fs_cred *cred = op->op_cred;
	bool setgid_dir = (dir->oi_ino.ino_mode & 02000) != 0;
	uint32_t gid = setgid_dir ? dir->oi_ino.ino_gid : cred->fc_gid;
	if (!exclusive && !op->op_replay && !zpl_is_root(op)) {
		if ((sa->fs_set_uid && sa->fs_uid != cred->fc_uid) ||
		    (sa->fs_set_gid && sa->fs_gid != gid && !zpl_in_group(cred, sa->fs_gid))) {
			rc = -EPERM;
			goto undo;
		}
	}
	if (type == FS_REG && !exclusive && sa->fs_set_size && sa->fs_size > ZPL_MAX_FILE_BYTES) {
		rc = -EFBIG;
		goto undo;
	}
	if (type == FS_DIR && dir->oi_ino.ino_nlink >= ZPL_LINK_MAX) {
		rc = -EMLINK;
		goto undo;
	}
	if ((rc = zpl_op_new_inode(op, type, &child)) != 0)
		goto undo;
	struct zpl_inode *ino = &child->oi_ino;
	ino->ino_uid = cred->fc_uid;
	ino->ino_gid = gid;
	if (exclusive) {
		ino->ino_mode = 0600; /* until the SETATTR that follows: only the owner */
		ino->ino_flags |= ZPL_IF_VERF;
		memcpy(ino->ino_verf, req->u.create.cr_verf, 8);
	} else {
		ino->ino_mode =
		    (sa->fs_set_mode ? sa->fs_mode : zpl_default_mode(req->fr_op)) & 07777;
		if (sa->fs_set_uid)
			ino->ino_uid = sa->fs_uid;
		if (sa->fs_set_gid)
			ino->ino_gid = sa->fs_gid;
		zpl_set_times(op, ino, sa);
	}
	if (type == FS_LNK)
		ino->ino_mode = 0777; /* symlink modes mean nothing; Linux shows 0777 */
	if (type == FS_DIR) {
		/* As mkdir(2) (and so knfsd, which sets no mode after it): of the special bits
		 * only sticky is taken from the call; set-group-ID comes from the parent. */
		ino->ino_mode &= 01777;
		if (setgid_dir)
			ino->ino_mode |= 02000;
	}
	if (type != FS_DIR && (ino->ino_mode & 02000) != 0 && !zpl_is_root(op) &&
	    !zpl_in_group(cred, ino->ino_gid))
		ino->ino_mode &= ~02000u;
	switch (type) {
	case FS_DIR:
		ino->ino_nlink = 2;
		ino->ino_parent = dir->oi_objid;
		dir->oi_ino.ino_nlink++;
		break;
	case FS_LNK:
		ino->ino_link_len = (uint16_t)tlen;
		ino->ino_size = tlen;
		if (tlen <= ZPL_SYMLINK_INLINE_MAX)
			memcpy(ino->ino_link, req->u.create.cr_link_target, tlen);
		else if ((rc = zpl_data_new_link(op, child, req->u.create.cr_link_target,
		                                 (uint32_t)tlen)) != 0)
			goto undo;
		break;
	case FS_CHR:
	case FS_BLK:
		ino->ino_rdev_major = req->u.create.cr_rdev_major;
		ino->ino_rdev_minor = req->u.create.cr_rdev_minor;
		break;
	default: break;
	}
	if (type == FS_REG && !exclusive && sa->fs_set_size && sa->fs_size > 0) {
		if ((rc = zpl_data_truncate(op, child, sa->fs_size)) != 0)
			goto undo;
		if (!zpl_is_root(op))
			zpl_kill_setid(ino); /* as the truncate(2) that follows open(2) */
	}

	uint8_t key[ZPL_LONG_KEY], val[ZPL_DIRENT_FIXED_BYTES + FS_NAME_MAX];
	zpl_key_long(key, dir->oi_objid, ZPL_KIND_DIRENT, free_hash);
	uint32_t vlen = zpl_dirent_encode(child->oi_objid, type, name, len, val);
	if ((rc = zpl_op_put(op, key, sizeof(key), val, vlen, BTREE_PUT_NEW)) != 0)
		goto undo;
	dir->oi_ino.ino_nentries++;
	zpl_touch_dir(op, dir);
	if ((rc = zpl_op_commit(op)) != 0)
		goto undo;
done:
	zpl_objid_encode(child->oi_objid, child->oi_ino.ino_gen, &req->u.create.cr_obj);
	req->u.create.cr_attr_valid = true;
	zpl_attr_from_inode(op->op_z, child->oi_objid, &child->oi_ino, &req->u.create.cr_attr);
	goto out;
undo:
	dir->oi_ino = dir_before;
	if (rc == -SH_ENEEDBLOCK || rc == -SH_EPARTIAL)
		return rc;
out:
	zpl_wcc_post(op->op_z, dir, wcc);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * REMOVE, RMDIR */

static int zpl_remove(struct zpl_op *op, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.remove.rm_dir_wcc;
	const char *name = req->u.remove.rm_name;
	bool rmdir = req->fr_op == FS_OP_RMDIR;
	struct zpl_oino *dir, *child;
	size_t len;
	int rc = zpl_op_obj(op, &req->fr_obj, &dir);
	if (rc != 0)
		return rc;
	struct zpl_inode dir_before = dir->oi_ino;
	zpl_wcc_pre(&dir->oi_ino, wcc);
	if (name != NULL && (zpl_is_dot(name) || zpl_is_dotdot(name))) {
		rc = rmdir && zpl_is_dotdot(name) ? -ENOTEMPTY : -EINVAL;
		goto out;
	}
	if (dir->oi_ino.ino_type != FS_DIR) {
		rc = -ENOTDIR;
		goto out;
	}
	if ((rc = zpl_name_check(name, &len)) != 0)
		goto out;
	/* The order of unlink(2) and rmdir(2) (may_delete): search permission, the name
	 * (ENOENT), write permission, the sticky rule, then the object's type. */
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_X, false, false)) != 0)
		goto out;
	struct zpl_dirent de;
	uint64_t hash;
	if ((rc = zpl_dir_find(op, dir->oi_objid, name, len, &de, &hash, NULL)) != 0)
		goto out;
	if ((rc = zpl_child(op, &de, &child)) != 0)
		goto out;
	struct zpl_inode *ino = &child->oi_ino;
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_W | ZPL_X, false, false)) != 0 ||
	    (rc = zpl_sticky_ok(op, &dir->oi_ino, ino)) != 0)
		goto out;
	if (rmdir && ino->ino_type != FS_DIR)
		rc = -ENOTDIR;
	else if (!rmdir && ino->ino_type == FS_DIR)
		rc = -EISDIR;
	else if (rmdir && ino->ino_nentries != 0)
		rc = -ENOTEMPTY;
	if (rc != 0)
		goto out;

	uint8_t key[ZPL_LONG_KEY];
	zpl_key_long(key, dir->oi_objid, ZPL_KIND_DIRENT, hash);
	if ((rc = zpl_op_del(op, key, sizeof(key))) != 0)
		goto undo;
	if (dir->oi_ino.ino_nentries == 0) {
		rc = -EIO;
		goto undo;
	}
	dir->oi_ino.ino_nentries--;
	if (rmdir) {
		dir->oi_ino.ino_nlink--;
		rc = zpl_obj_delete(op, child);
	} else if (--ino->ino_nlink == 0) {
		rc = zpl_obj_delete(op, child);
	} else {
		ino->ino_ctime = op->op_now;
		child->oi_dirty = true;
	}
	if (rc != 0)
		goto undo;
	zpl_touch_dir(op, dir);
	if ((rc = zpl_op_commit(op)) != 0)
		goto undo;
	goto out;
undo:
	dir->oi_ino = dir_before;
	if (rc == -SH_ENEEDBLOCK)
		return rc;
out:
	zpl_wcc_post(op->op_z, dir, wcc);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * RENAME (RFC 1813 section 3.3.14, with rename(2)'s semantics) */

/* -EINVAL when directory dir is obj or lies below it: walks dir's parents up to the root. */
static int zpl_check_not_below(struct zpl_op *op, uint64_t dir, uint64_t obj)
{
	uint64_t root = op->op_meta.me_root_objid;
	/* A chain longer than the objects in the dataset is a loop: a malformed tree. */
	for (uint64_t steps = 0; steps <= op->op_meta.me_nobjects; steps++) {
		if (dir == obj)
			return -EINVAL;
		if (dir == root)
			return 0;
		uint8_t key[ZPL_SHORT_KEY], val[ZPL_VAL_MAX];
		uint32_t vlen;
		struct zpl_inode ino;
		zpl_key_inode(key, dir);
		int rc = zpl_op_lookup(op, key, sizeof(key), val, sizeof(val), &vlen);
		if (rc == -ENOENT)
			return -EIO;
		if (rc != 0)
			return rc;
		if (zpl_inode_decode(val, vlen, &ino) != 0 || ino.ino_type != FS_DIR)
			return -EIO;
		dir = ino.ino_parent;
	}
	return -EIO;
}

/* The checks of rename(2) once both names are looked up, in vfs_rename's order (the answers
 * knfsd gives): removing src from fdir (W and X, the sticky rule), then adding to tdir (as a
 * creation, or as the removal of tgt, with the type rules), then the W a moving directory needs
 * for its "..", then what the file system itself refuses (a non-empty target, too many links). */
static int zpl_rename_check(struct zpl_op *op, const struct zpl_oino *fdir,
                            const struct zpl_oino *tdir, const struct zpl_oino *src,
                            const struct zpl_oino *tgt, bool moves)
{
	int rc;
	if ((rc = zpl_perm(op, &fdir->oi_ino, ZPL_W | ZPL_X, false, false)) != 0 ||
	    (rc = zpl_sticky_ok(op, &fdir->oi_ino, &src->oi_ino)) != 0 ||
	    (rc = zpl_perm(op, &tdir->oi_ino, ZPL_W | ZPL_X, false, false)) != 0)
		return rc;
	if (tgt != NULL) {
		if ((rc = zpl_sticky_ok(op, &tdir->oi_ino, &tgt->oi_ino)) != 0)
			return rc;
		if (src->oi_ino.ino_type == FS_DIR && tgt->oi_ino.ino_type != FS_DIR)
			return -ENOTDIR;
		if (src->oi_ino.ino_type != FS_DIR && tgt->oi_ino.ino_type == FS_DIR)
			return -EISDIR;
	}
	if (moves && (rc = zpl_perm(op, &src->oi_ino, ZPL_W, false, false)) != 0)
		return rc;
	if (tgt != NULL && tgt->oi_ino.ino_type == FS_DIR && tgt->oi_ino.ino_nentries != 0)
		return -ENOTEMPTY;
	return moves && tgt == NULL && tdir->oi_ino.ino_nlink >= ZPL_LINK_MAX ? -EMLINK : 0;
}

static int zpl_rename(struct zpl_op *op, struct fs_req *req)
{
	struct fs_wcc *fwcc = &req->u.rename.rn_from_wcc, *twcc = &req->u.rename.rn_to_wcc;
	const char *fname = req->u.rename.rn_from_name, *tname = req->u.rename.rn_to_name;
	struct zpl_oino *fdir, *tdir = NULL, *src, *tgt = NULL;
	size_t flen, tlen;
	int rc = zpl_op_obj(op, &req->fr_obj, &fdir);
	if (rc != 0)
		return rc;
	struct zpl_inode fdir_before = fdir->oi_ino;
	zpl_wcc_pre(&fdir->oi_ino, fwcc);
	if ((rc = zpl_op_obj(op, &req->u.rename.rn_to_dir, &tdir)) != 0) {
		tdir = NULL;
		goto out;
	}
	struct zpl_inode tdir_before = tdir->oi_ino;
	zpl_wcc_pre(&tdir->oi_ino, twcc);
	if ((fname != NULL && (zpl_is_dot(fname) || zpl_is_dotdot(fname))) ||
	    (tname != NULL && (zpl_is_dot(tname) || zpl_is_dotdot(tname)))) {
		rc = -EINVAL;
		goto out;
	}
	if (fdir->oi_ino.ino_type != FS_DIR || tdir->oi_ino.ino_type != FS_DIR) {
		rc = -ENOTDIR;
		goto out;
	}
	if ((rc = zpl_name_check(fname, &flen)) != 0 || (rc = zpl_name_check(tname, &tlen)) != 0)
		goto out;
	/* rename(2)'s order: searching both directories needs X; the source must exist; a
	 * directory cannot move below itself; then zpl_rename_check. */
	if ((rc = zpl_perm(op, &fdir->oi_ino, ZPL_X, false, false)) != 0 ||
	    (rc = zpl_perm(op, &tdir->oi_ino, ZPL_X, false, false)) != 0)
		goto out;
	struct zpl_dirent fde, tde;
	uint64_t fhash, thash = 0, free_hash = 0;
	if ((rc = zpl_dir_find(op, fdir->oi_objid, fname, flen, &fde, &fhash, NULL)) != 0)
		goto out;
	if ((rc = zpl_child(op, &fde, &src)) != 0)
		goto out;
	bool moves = src->oi_ino.ino_type == FS_DIR && fdir->oi_objid != tdir->oi_objid;
	if (moves && (rc = zpl_check_not_below(op, tdir->oi_objid, src->oi_objid)) != 0)
		goto out;
	rc = zpl_dir_find(op, tdir->oi_objid, tname, tlen, &tde, &thash, &free_hash);
	bool replace = rc == 0;
	if (rc != 0 && rc != -ENOENT)
		goto out;
	rc = 0;
	if (replace && tde.de_child == src->oi_objid)
		goto out; /* both names are links to the same object: nothing to do (POSIX) */
	if (replace && (rc = zpl_child(op, &tde, &tgt)) != 0)
		goto out;
	/* A target directory that holds the source's directory: rename(2)'s ENOTEMPTY, found
	 * before any permission check. */
	if (replace && tgt->oi_ino.ino_type == FS_DIR) {
		rc = zpl_check_not_below(op, fdir->oi_objid, tgt->oi_objid);
		if (rc == -EINVAL)
			rc = -ENOTEMPTY;
		if (rc != 0)
			goto out;
	}
	if ((rc = zpl_rename_check(op, fdir, tdir, src, replace ? tgt : NULL, moves)) != 0)
		goto out;

	/* The new entry, then the old one's removal. */
	uint8_t key[ZPL_LONG_KEY], val[ZPL_DIRENT_FIXED_BYTES + FS_NAME_MAX];
	uint32_t vlen = zpl_dirent_encode(src->oi_objid, src->oi_ino.ino_type, tname, tlen, val);
	zpl_key_long(key, tdir->oi_objid, ZPL_KIND_DIRENT, replace ? thash : free_hash);
	if ((rc = zpl_op_put(op, key, sizeof(key), val, vlen,
	                     replace ? BTREE_PUT_REPLACE : BTREE_PUT_NEW)) != 0)
		goto undo;
	zpl_key_long(key, fdir->oi_objid, ZPL_KIND_DIRENT, fhash);
	if ((rc = zpl_op_del(op, key, sizeof(key))) != 0)
		goto undo;
	if (replace) {
		if (tgt->oi_ino.ino_type == FS_DIR) {
			tdir->oi_ino.ino_nlink--; /* the replaced directory's ".." */
			rc = zpl_obj_delete(op, tgt);
		} else if (--tgt->oi_ino.ino_nlink == 0) {
			rc = zpl_obj_delete(op, tgt);
		} else {
			tgt->oi_ino.ino_ctime = op->op_now;
			tgt->oi_dirty = true;
		}
		if (rc != 0)
			goto undo;
	} else {
		tdir->oi_ino.ino_nentries++;
	}
	if (fdir->oi_ino.ino_nentries == 0) {
		rc = -EIO;
		goto undo;
	}
	fdir->oi_ino.ino_nentries--;
	if (moves) {
		fdir->oi_ino.ino_nlink--;
		tdir->oi_ino.ino_nlink++;
		src->oi_ino.ino_parent = tdir->oi_objid;
	}
	src->oi_ino.ino_ctime = op->op_now;
	src->oi_dirty = true;
	zpl_touch_dir(op, fdir);
	zpl_touch_dir(op, tdir);
	if ((rc = zpl_op_commit(op)) != 0)
		goto undo;
	goto out;
undo:
	tdir->oi_ino = tdir_before;
	fdir->oi_ino = fdir_before; /* last: when both are one directory, its state before either */
	if (rc == -SH_ENEEDBLOCK)
		return rc;
out:
	zpl_wcc_post(op->op_z, fdir, fwcc);
	if (tdir != NULL)
		zpl_wcc_post(op->op_z, tdir, twcc);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * LINK */

/* The checks of LINK in knfsd's order, which the posix back end shares: the name, the file
 * (no links to a directory: NFS3ERR_ISDIR, as knfsd answers), then as link(2): searching the
 * directory needs X, an existing name is EEXIST, creating the entry needs W. */
static int zpl_link_check(struct zpl_op *op, const struct zpl_oino *file,
                          const struct zpl_oino *dir, const char *name, size_t *len,
                          uint64_t *free_hash)
{
	if (dir->oi_ino.ino_type != FS_DIR)
		return -ENOTDIR;
	int rc = zpl_name_check(name, len);
	if (rc != 0)
		return rc;
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_X, false, false)) != 0)
		return rc;
	struct zpl_dirent de;
	rc = zpl_dir_find(op, dir->oi_objid, name, *len, &de, NULL, free_hash);
	if (rc == 0)
		return -EEXIST;
	if (rc != -ENOENT)
		return rc;
	if ((rc = zpl_perm(op, &dir->oi_ino, ZPL_W | ZPL_X, false, false)) != 0)
		return rc;
	return file->oi_ino.ino_nlink >= ZPL_LINK_MAX ? -EMLINK : 0;
}

static int zpl_link(struct zpl_op *op, struct fs_req *req)
{
	struct fs_wcc *wcc = &req->u.link.ln_dir_wcc;
	const char *name = req->u.link.ln_name;
	struct zpl_oino *file, *dir = NULL;
	size_t len;
	if (name != NULL && (zpl_is_dot(name) || zpl_is_dotdot(name)))
		return -EEXIST;
	int rc = zpl_op_obj(op, &req->fr_obj, &file);
	if (rc != 0)
		return rc;
	if (file->oi_ino.ino_type == FS_DIR)
		return -EISDIR;
	if ((rc = zpl_op_obj(op, &req->u.link.ln_dir, &dir)) != 0)
		return rc;
	struct zpl_inode dir_before = dir->oi_ino, file_before = file->oi_ino;
	zpl_wcc_pre(&dir->oi_ino, wcc);
	uint64_t free_hash = 0;
	if ((rc = zpl_link_check(op, file, dir, name, &len, &free_hash)) != 0)
		goto out;
	uint8_t key[ZPL_LONG_KEY], val[ZPL_DIRENT_FIXED_BYTES + FS_NAME_MAX];
	zpl_key_long(key, dir->oi_objid, ZPL_KIND_DIRENT, free_hash);
	uint32_t vlen = zpl_dirent_encode(file->oi_objid, file->oi_ino.ino_type, name, len, val);
	if ((rc = zpl_op_put(op, key, sizeof(key), val, vlen, BTREE_PUT_NEW)) != 0)
		goto undo;
	file->oi_ino.ino_nlink++;
	file->oi_ino.ino_ctime = op->op_now;
	file->oi_dirty = true;
	dir->oi_ino.ino_nentries++;
	zpl_touch_dir(op, dir);
	if ((rc = zpl_op_commit(op)) != 0)
		goto undo;
	req->u.link.ln_attr_valid = true;
	zpl_attr_from_inode(op->op_z, file->oi_objid, &file->oi_ino, &req->u.link.ln_attr);
	goto out;
undo:
	dir->oi_ino = dir_before;
	file->oi_ino = file_before;
	if (rc == -SH_ENEEDBLOCK)
		return rc;
out:
	zpl_wcc_post(op->op_z, dir, wcc);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * FSSTAT, COMMIT */

static int zpl_fsstat(struct zpl_op *op, struct fs_req *req)
{
	struct zpl *z = op->op_z;
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	req->u.fsstat.st_attr_valid = true;
	zpl_attr_from_inode(z, oi->oi_objid, &oi->oi_ino, &req->u.fsstat.st_attr);
	uint64_t total = 0, free_bytes = 0, avail = 0;
	if ((rc = z->z_env.ze_space(z->z_env.ze_ctx, &total, &free_bytes, &avail)) != 0)
		return rc;
	req->u.fsstat.st_total_bytes = total;
	req->u.fsstat.st_free_bytes = free_bytes;
	req->u.fsstat.st_avail_bytes = avail;
	req->u.fsstat.st_free_files = free_bytes / ZPL_BYTES_PER_OBJECT;
	req->u.fsstat.st_avail_files = avail / ZPL_BYTES_PER_OBJECT;
	req->u.fsstat.st_total_files = z->z_meta.me_nobjects + req->u.fsstat.st_free_files;
	req->u.fsstat.st_invarsec = 0;
	return 0;
}

static int zpl_commit_op(struct zpl_op *op, struct fs_req *req)
{
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, &req->fr_obj, &oi);
	if (rc != 0)
		return rc;
	/* Data is made stable by the caller's log; COMMIT changes nothing here. Only a regular
	 * file has data to commit (knfsd: NFS3ERR_ISDIR for a directory, INVAL otherwise). */
	zpl_wcc_pre(&oi->oi_ino, &req->u.commit.cm_wcc);
	zpl_wcc_post(op->op_z, oi, &req->u.commit.cm_wcc);
	if (oi->oi_ino.ino_type != FS_REG)
		return oi->oi_ino.ino_type == FS_DIR ? -EISDIR : -EINVAL;
	return 0;
}

int zpl_run(struct zpl_op *op, struct fs_req *req)
{
	if (req->fr_cred == NULL)
		return -EINVAL;
	switch (req->fr_op) {
	case FS_OP_GETATTR: return zpl_getattr(op, req);
	case FS_OP_SETATTR: return zpl_setattr(op, req);
	case FS_OP_LOOKUP: return zpl_lookup(op, req);
	case FS_OP_ACCESS: return zpl_access(op, req);
	case FS_OP_READLINK: return zpl_readlink(op, req);
	case FS_OP_READ: return zpl_read(op, req);
	case FS_OP_WRITE: return zpl_write(op, req);
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD: return zpl_create(op, req);
	case FS_OP_REMOVE:
	case FS_OP_RMDIR: return zpl_remove(op, req);
	case FS_OP_RENAME: return zpl_rename(op, req);
	case FS_OP_LINK: return zpl_link(op, req);
	case FS_OP_READDIR: return zpl_do_readdir(op, req);
	case FS_OP_FSSTAT: return zpl_fsstat(op, req);
	case FS_OP_COMMIT: return zpl_commit_op(op, req);
	}
	return -SH_ENOTSUPP;
}
