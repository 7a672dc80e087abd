/* zpl_log.c: log records of changes (zpl_record_encode) and their replay (zpl_replay).
 *
 * A record carries what the operation needs to run again exactly as it ran the first time: its
 * inputs, the credential (it decides the owner of new objects and which set-id bits go), the time
 * it used (for every time it set), and for a create the object id and generation it made. Replay
 * runs the same code as zpl_execute (zpl_run) with permission checks and the SETATTR guard off,
 * that time, and those ids; the caller applies each record exactly once, in order, to the state
 * the original saw, so every decision comes out the same.
 *
 * Records are hostile input (they come back from disk): every length is checked against the
 * record's end, every enum against its range, and a record must be exactly as long as its
 * fields; anything else is -EINVAL.
 *
 * Record format (little-endian):
 *
 *   offset  size  field
 *        0     4  magic        0x524c505a ("ZPLR")
 *        4     1  version      1
 *        5     1  op           enum fs_op
 *        6     2  reserved     zero
 *        8     4  length       of the whole record
 *       12     4  reserved     zero
 *       16    12  time         i64 seconds, u32 nanoseconds: the operation's "now"
 *       28     4  uid
 *       32     4  gid
 *       36     4  ngids        0..FS_MAX_GIDS
 *       40    64  gids         FS_MAX_GIDS u32 (those beyond ngids zero)
 *      104    16  object       fr_obj: object id (u64), generation (u64)
 *      120     .  body, by op:
 *        SETATTR   sattr
 *        WRITE     offset u64, length u32, data
 *        CREATE, MKDIR, SYMLINK, MKNOD
 *                  name, create mode u8, type u8, sattr, verifier 8, rdev major u32,
 *                  rdev minor u32, target length u16, target, new object (16)
 *        REMOVE, RMDIR   name
 *        RENAME    from name, to directory (16), to name
 *        LINK      directory (16), name
 *        0x40 (a WRITE by blocks, below)
 *                  offset u64, length u32, nblocks u32 (1..ZPL_REC_BLOCKS_MAX),
 *                  nblocks block pointers of 64 bytes (blk_ptr_encode)
 *   name:  length u8 (1..FS_NAME_MAX), bytes
 *   sattr (48 bytes): flags u8 (0x01 mode, 0x02 uid, 0x04 gid, 0x08 size), atime how u8, mtime
 *          how u8, zero u8, mode u32, uid u32, gid u32, size u64, atime (i64, u32), mtime (i64,
 *          u32) */
#include "zpl/zpl_impl.h"

#define ZPL_REC_MAGIC 0x524c505au
#define ZPL_REC_VERSION 1u
#define ZPL_REC_HEADER_BYTES 120u
#define ZPL_REC_SATTR_BYTES 48u
#define ZPL_REC_CREATE_FIXED (1u + 1u + ZPL_REC_SATTR_BYTES + 8u + 4u + 4u + 2u + ZPL_OBJ_ID_BYTES)
#define ZPL_REC_OP_BLOCKS 0x40u /* a WRITE whose data is named by block pointers */
#define ZPL_REC_BLOCKS_FIXED 16u

/* A cursor over a record being written (wc_buf NULL: only counting) or read. */
struct zpl_cur {
	uint8_t *wc_buf;
	const uint8_t *rc_buf;
	size_t c_pos, c_cap;
	bool c_bad;
};

static uint8_t *zpl_cur_w(struct zpl_cur *c, size_t n)
{
	size_t at = c->c_pos;
	c->c_pos += n;
	if (c->wc_buf == NULL || c->c_pos > c->c_cap) {
		c->c_bad = true;
		return NULL;
	}
	return c->wc_buf + at;
}

static void zpl_w8(struct zpl_cur *c, uint8_t v)
{
	uint8_t *p = zpl_cur_w(c, 1);
	if (p != NULL)
		*p = v;
}
static void zpl_w16(struct zpl_cur *c, uint16_t v)
{
	uint8_t *p = zpl_cur_w(c, 2);
	if (p != NULL)
		zpl_put_le16(p, v);
}
static void zpl_w32(struct zpl_cur *c, uint32_t v)
{
	uint8_t *p = zpl_cur_w(c, 4);
	if (p != NULL)
		zpl_put_le32(p, v);
}
static void zpl_w64(struct zpl_cur *c, uint64_t v)
{
	uint8_t *p = zpl_cur_w(c, 8);
	if (p != NULL)
		zpl_put_le64(p, v);
}
static void zpl_wbytes(struct zpl_cur *c, const void *src, size_t n)
{
	uint8_t *p = zpl_cur_w(c, n);
	if (p != NULL && n > 0)
		memcpy(p, src, n);
}

static const uint8_t *zpl_cur_r(struct zpl_cur *c, size_t n)
{
	if (c->c_bad || n > c->c_cap - c->c_pos) {
		c->c_bad = true;
		return NULL;
	}
	const uint8_t *p = c->rc_buf + c->c_pos;
	c->c_pos += n;
	return p;
}
static uint8_t zpl_r8(struct zpl_cur *c)
{
	const uint8_t *p = zpl_cur_r(c, 1);
	return p != NULL ? *p : 0;
}
static uint16_t zpl_r16(struct zpl_cur *c)
{
	const uint8_t *p = zpl_cur_r(c, 2);
	return p != NULL ? zpl_get_le16(p) : 0;
}
static uint32_t zpl_r32(struct zpl_cur *c)
{
	const uint8_t *p = zpl_cur_r(c, 4);
	return p != NULL ? zpl_get_le32(p) : 0;
}
static uint64_t zpl_r64(struct zpl_cur *c)
{
	const uint8_t *p = zpl_cur_r(c, 8);
	return p != NULL ? zpl_get_le64(p) : 0;
}

static int zpl_name_len(const char *name, size_t *len)
{
	if (name == NULL)
		return -EINVAL;
	*len = strnlen(name, FS_NAME_MAX + 1);
	return *len == 0 || *len > FS_NAME_MAX ? -EINVAL : 0;
}

static void zpl_w_name(struct zpl_cur *c, const char *name, size_t len)
{
	zpl_w8(c, (uint8_t)len);
	zpl_wbytes(c, name, len);
}

/* Reads a name into out (FS_NAME_MAX + 1 bytes, NUL-terminated). */
static void zpl_r_name(struct zpl_cur *c, char *out)
{
	uint8_t len = zpl_r8(c);
	const uint8_t *p = zpl_cur_r(c, len);
	if (p == NULL || len == 0 || memchr(p, '\0', len) != NULL) {
		c->c_bad = true;
		out[0] = '\0';
		return;
	}
	memcpy(out, p, len);
	out[len] = '\0';
}

static void zpl_w_id(struct zpl_cur *c, const struct fs_obj_id *id)
{
	uint8_t zero[ZPL_OBJ_ID_BYTES] = {0};
	zpl_wbytes(c, id->foi_len == ZPL_OBJ_ID_BYTES ? id->foi_bytes : zero, ZPL_OBJ_ID_BYTES);
}

static void zpl_r_id(struct zpl_cur *c, struct fs_obj_id *id)
{
	memset(id, 0, sizeof(*id));
	const uint8_t *p = zpl_cur_r(c, ZPL_OBJ_ID_BYTES);
	if (p != NULL) {
		id->foi_len = ZPL_OBJ_ID_BYTES;
		memcpy(id->foi_bytes, p, ZPL_OBJ_ID_BYTES);
	}
}

static void zpl_w_time(struct zpl_cur *c, const struct fs_time *t)
{
	zpl_w64(c, (uint64_t)t->ft_sec);
	zpl_w32(c, t->ft_nsec);
}

static void zpl_r_time(struct zpl_cur *c, struct fs_time *t)
{
	t->ft_sec = (int64_t)zpl_r64(c);
	t->ft_nsec = zpl_r32(c);
	if (t->ft_nsec >= 1000000000u)
		c->c_bad = true;
}

static void zpl_w_sattr(struct zpl_cur *c, const struct fs_sattr *sa)
{
	uint8_t flags = (uint8_t)((sa->fs_set_mode ? 1 : 0) | (sa->fs_set_uid ? 2 : 0) |
	                          (sa->fs_set_gid ? 4 : 0) | (sa->fs_set_size ? 8 : 0));
	zpl_w8(c, flags);
	zpl_w8(c, (uint8_t)sa->fs_atime_how);
	zpl_w8(c, (uint8_t)sa->fs_mtime_how);
	zpl_w8(c, 0);
	zpl_w32(c, sa->fs_mode);
	zpl_w32(c, sa->fs_uid);
	zpl_w32(c, sa->fs_gid);
	zpl_w64(c, sa->fs_size);
	zpl_w_time(c, &sa->fs_atime);
	zpl_w_time(c, &sa->fs_mtime);
}

static void zpl_r_sattr(struct zpl_cur *c, struct fs_sattr *sa)
{
	memset(sa, 0, sizeof(*sa));
	uint8_t flags = zpl_r8(c);
	uint8_t ah = zpl_r8(c), mh = zpl_r8(c);
	if ((flags & ~0x0fu) != 0 || ah > FS_TIME_CLIENT || mh > FS_TIME_CLIENT || zpl_r8(c) != 0)
		c->c_bad = true;
	sa->fs_set_mode = (flags & 1) != 0;
	sa->fs_set_uid = (flags & 2) != 0;
	sa->fs_set_gid = (flags & 4) != 0;
	sa->fs_set_size = (flags & 8) != 0;
	sa->fs_atime_how = (enum fs_time_how)ah;
	sa->fs_mtime_how = (enum fs_time_how)mh;
	sa->fs_mode = zpl_r32(c);
	sa->fs_uid = zpl_r32(c);
	sa->fs_gid = zpl_r32(c);
	sa->fs_size = zpl_r64(c);
	zpl_r_time(c, &sa->fs_atime);
	zpl_r_time(c, &sa->fs_mtime);
}

static const uint8_t no_sattr_verf[8];

/* The time a successful request used, from its outputs (see zpl_record_encode). */
static int zpl_req_time(const struct fs_req *req, struct fs_time *t)
{
	const struct fs_wcc *w = NULL;
	switch (req->fr_op) {
	case FS_OP_SETATTR: w = &req->u.setattr.sa_wcc; break;
	case FS_OP_WRITE: w = &req->u.write.wr_wcc; break;
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD:
		if (!req->u.create.cr_attr_valid)
			return -EINVAL;
		*t = req->u.create.cr_attr.fa_ctime;
		return 0;
	case FS_OP_REMOVE:
	case FS_OP_RMDIR: w = &req->u.remove.rm_dir_wcc; break;
	case FS_OP_RENAME: w = &req->u.rename.rn_to_wcc; break;
	case FS_OP_LINK: w = &req->u.link.ln_dir_wcc; break;
	default: return -EINVAL;
	}
	if (!w->fw_post_valid)
		return -EINVAL;
	*t = w->fw_post.fa_ctime; /* every change this operation made set ctime to its time */
	return 0;
}

/* The header every record starts with (ZPL_REC_HEADER_BYTES; the length is filled in last). */
static void zpl_record_header(struct zpl_cur *c, uint8_t op, const struct fs_time *now,
                              const struct fs_cred *cred, const struct fs_obj_id *obj)
{
	uint32_t ngids = SH_MIN(cred->fc_ngids, (uint32_t)FS_MAX_GIDS);
	zpl_w32(c, ZPL_REC_MAGIC);
	zpl_w8(c, ZPL_REC_VERSION);
	zpl_w8(c, op);
	zpl_w16(c, 0);
	zpl_w32(c, 0); /* the length, filled in at the end */
	zpl_w32(c, 0);
	zpl_w_time(c, now);
	zpl_w32(c, cred->fc_uid);
	zpl_w32(c, cred->fc_gid);
	zpl_w32(c, ngids);
	for (uint32_t i = 0; i < FS_MAX_GIDS; i++)
		zpl_w32(c, i < ngids ? cred->fc_gids[i] : 0);
	zpl_w_id(c, obj);
}

/* Encodes req through c (counting only when c->wc_buf is NULL). */
static int zpl_record_write(const struct fs_req *req, struct zpl_cur *c)
{
	struct fs_time now;
	size_t len, len2;
	int rc;
	if (req->fr_status != 0 || req->fr_cred == NULL)
		return -EINVAL;
	if ((rc = zpl_req_time(req, &now)) != 0)
		return rc;
	zpl_record_header(c, (uint8_t)req->fr_op, &now, req->fr_cred, &req->fr_obj);
	switch (req->fr_op) {
	case FS_OP_SETATTR: zpl_w_sattr(c, &req->u.setattr.sa_sattr); break;
	case FS_OP_WRITE:
		if (req->u.write.wr_count != req->u.write.wr_len ||
		    (req->u.write.wr_data == NULL && req->u.write.wr_len > 0))
			return -EINVAL;
		zpl_w64(c, req->u.write.wr_offset);
		zpl_w32(c, req->u.write.wr_len);
		zpl_wbytes(c, req->u.write.wr_data, req->u.write.wr_len);
		break;
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD: {
		if ((rc = zpl_name_len(req->u.create.cr_name, &len)) != 0)
			return rc;
		len2 = 0;
		if (req->fr_op == FS_OP_SYMLINK) {
			if (req->u.create.cr_link_target == NULL)
				return -EINVAL;
			len2 = strnlen(req->u.create.cr_link_target, FS_PATH_MAX + 1);
			if (len2 == 0 || len2 > FS_PATH_MAX)
				return -EINVAL;
		}
		/* Only the inputs the operation reads: the others may hold anything. */
		bool create = req->fr_op == FS_OP_CREATE, mknod = req->fr_op == FS_OP_MKNOD;
		bool exclusive = create && req->u.create.cr_mode == FS_CREATE_EXCLUSIVE;
		static const struct fs_sattr no_sattr;
		zpl_w_name(c, req->u.create.cr_name, len);
		zpl_w8(c, create ? (uint8_t)req->u.create.cr_mode : 0);
		zpl_w8(c, mknod ? (uint8_t)req->u.create.cr_type : 0);
		zpl_w_sattr(c, exclusive ? &no_sattr : &req->u.create.cr_sattr);
		zpl_wbytes(c, exclusive ? req->u.create.cr_verf : no_sattr_verf, 8);
		zpl_w32(c, mknod ? req->u.create.cr_rdev_major : 0);
		zpl_w32(c, mknod ? req->u.create.cr_rdev_minor : 0);
		zpl_w16(c, (uint16_t)len2);
		zpl_wbytes(c, req->u.create.cr_link_target, len2);
		zpl_w_id(c, &req->u.create.cr_obj);
		break;
	}
	case FS_OP_REMOVE:
	case FS_OP_RMDIR:
		if ((rc = zpl_name_len(req->u.remove.rm_name, &len)) != 0)
			return rc;
		zpl_w_name(c, req->u.remove.rm_name, len);
		break;
	case FS_OP_RENAME:
		if ((rc = zpl_name_len(req->u.rename.rn_from_name, &len)) != 0 ||
		    (rc = zpl_name_len(req->u.rename.rn_to_name, &len2)) != 0)
			return rc;
		zpl_w_name(c, req->u.rename.rn_from_name, len);
		zpl_w_id(c, &req->u.rename.rn_to_dir);
		zpl_w_name(c, req->u.rename.rn_to_name, len2);
		break;
	case FS_OP_LINK:
		if ((rc = zpl_name_len(req->u.link.ln_name, &len)) != 0)
			return rc;
		zpl_w_id(c, &req->u.link.ln_dir);
		zpl_w_name(c, req->u.link.ln_name, len);
		break;
	default: return -EINVAL;
	}
	return 0;
}

size_t zpl_record_bytes(const struct fs_req *req)
{
	size_t n = ZPL_REC_HEADER_BYTES;
	switch (req->fr_op) {
	case FS_OP_SETATTR: return n + ZPL_REC_SATTR_BYTES;
	case FS_OP_WRITE: return n + 12 + req->u.write.wr_len;
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD: return n + 1 + FS_NAME_MAX + ZPL_REC_CREATE_FIXED + FS_PATH_MAX;
	case FS_OP_REMOVE:
	case FS_OP_RMDIR: return n + 1 + FS_NAME_MAX;
	case FS_OP_RENAME: return n + 2 * (1 + FS_NAME_MAX) + ZPL_OBJ_ID_BYTES;
	case FS_OP_LINK: return n + 1 + FS_NAME_MAX + ZPL_OBJ_ID_BYTES;
	default: return n;
	}
}

int zpl_record_encode(const struct fs_req *req, void *buf, size_t cap, size_t *len_out)
{
	struct zpl_cur count = {0};
	int rc = zpl_record_write(req, &count);
	if (rc != 0)
		return rc;
	*len_out = count.c_pos;
	if (count.c_pos > cap || count.c_pos > UINT32_MAX)
		return -EOVERFLOW;
	struct zpl_cur c = {.wc_buf = buf, .c_cap = cap};
	rc = zpl_record_write(req, &c);
	VERIFY(rc == 0 && !c.c_bad && c.c_pos == count.c_pos);
	zpl_put_le32((uint8_t *)buf + 8, (uint32_t)c.c_pos);
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Records of unstable writes, made at COMMIT
 *
 * An UNSTABLE WRITE leaves no record; the caller remembers the ranges written and, when the file
 * is committed (or before a logged change of it), logs each range as a WRITE record of the bytes
 * it holds then. Such a record says "these bytes are now this", at absolute offsets, so applying
 * it to any earlier state of the file gives the range's contents at the time it was encoded. Its
 * other effects on replay are made to match the file's state at encoding too:
 *   - time: the file's ctime. The caller logs a file's pending ranges before any other logged
 *     change of the file, so since the last of them nothing but unstable writes changed the file,
 *     and mtime = ctime = the time of the last one; replay sets both to it.
 *   - credential: a WRITE by anyone but root clears the file's set-id bits (zpl_kill_setid).
 *     When the file's mode has no set-id bit such a write could still clear, the record names
 *     a user who is not root (the owner's uid + 1, or 1), so replay clears what an unstable
 *     write by such a user cleared; otherwise it names root, which clears nothing (a set-id bit
 *     still set was not cleared by any of the writes).
 *   - size: the range is clipped to the file's size, so the write extends the file at most to its
 *     current size. */

/* The credential of a range record (see above). */
static void zpl_range_cred(const struct zpl_inode *ino, struct fs_cred *cred)
{
	memset(cred, 0, sizeof(*cred));
	bool keeps_setid = (ino->ino_mode & 04000u) != 0 || (ino->ino_mode & 02010u) == 02010u;
	if (!keeps_setid) {
		cred->fc_uid = ino->ino_uid + 1u;
		cred->fc_uid = cred->fc_uid == 0 ? 1u : cred->fc_uid;
		cred->fc_gid = ino->ino_gid;
	}
}

size_t zpl_record_range_bytes(uint32_t len)
{
	return ZPL_REC_HEADER_BYTES + 12u + len;
}

int zpl_record_encode_range(struct zpl *z, const struct fs_obj_id *obj, uint64_t off, uint32_t len,
                            void *buf, size_t cap, size_t *len_out, struct blk_ptr *missing_out)
{
	*len_out = 0;
	if (z->z_failed != 0)
		return -EIO;
	static const struct fs_cred no_cred = {0};
	struct zpl_op *op = &z->z_op;
	zpl_op_begin(z, op, &no_cred, missing_out);
	struct zpl_oino *oi;
	int rc = zpl_op_obj(op, obj, &oi);
	if (rc != 0)
		goto out;
	const struct zpl_inode *ino = &oi->oi_ino;
	if (ino->ino_type != FS_REG) {
		rc = -EINVAL;
		goto out;
	}
	if (off >= ino->ino_size || len == 0)
		goto out; /* nothing left of the range: no record */
	uint32_t n = (uint32_t)SH_MIN((uint64_t)len, ino->ino_size - off);
	size_t need = zpl_record_range_bytes(n);
	if (need > cap) {
		*len_out = need;
		rc = -EOVERFLOW;
		goto out;
	}
	struct fs_cred cred;
	zpl_range_cred(ino, &cred);
	struct zpl_cur c = {.wc_buf = buf, .c_cap = cap};
	zpl_record_header(&c, (uint8_t)FS_OP_WRITE, &ino->ino_ctime, &cred, obj);
	zpl_w64(&c, off);
	zpl_w32(&c, n);
	uint8_t *data = zpl_cur_w(&c, n);
	VERIFY(!c.c_bad && data != NULL && c.c_pos == need);
	if ((rc = zpl_data_read_range(op, oi, off, n, data)) != 0)
		goto out;
	zpl_put_le32((uint8_t *)buf + 8, (uint32_t)need);
	*len_out = need;
out:
	zpl_op_abort(op);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Records by block pointer
 *
 * A large stable write need not copy its data into the log: the caller writes
 * the bytes as blocks of their own first and logs a record (op ZPL_REC_OP_BLOCKS) that names
 * them. It has the header of the WRITE or range record it stands for (time, credential, object:
 * replay makes the same decisions) and is applied as that WRITE, with the blocks' bytes as data.
 * (A COMMIT range by blocks is not made yet: such a COMMIT waits for a txg, pool_fs.c.) */

size_t zpl_record_blocks_bytes(uint32_t nblocks)
{
	return ZPL_REC_HEADER_BYTES + ZPL_REC_BLOCKS_FIXED + (size_t)nblocks * BLK_PTR_DISK_BYTES;
}

/* The data bytes nblocks blocks hold: 0 when they cannot make a record (holes, too many). */
static uint64_t zpl_blocks_len(const struct blk_ptr *bps, uint32_t nblocks)
{
	uint64_t n = 0;
	if (nblocks == 0 || nblocks > ZPL_REC_BLOCKS_MAX)
		return 0;
	for (uint32_t i = 0; i < nblocks; i++) {
		if (blk_ptr_is_hole(&bps[i]) || bps[i].bp_lsize == 0)
			return 0;
		n += bps[i].bp_lsize;
	}
	return n <= ZPL_REC_BLOCKS_MAX_BYTES ? n : 0;
}

static void zpl_w_blocks(struct zpl_cur *c, uint64_t off, uint32_t len, const struct blk_ptr *bps,
                         uint32_t nblocks)
{
	zpl_w64(c, off);
	zpl_w32(c, len);
	zpl_w32(c, nblocks);
	for (uint32_t i = 0; i < nblocks; i++) {
		uint8_t *p = zpl_cur_w(c, BLK_PTR_DISK_BYTES);
		if (p != NULL)
			blk_ptr_encode(&bps[i], p);
	}
}

int zpl_record_encode_blocks(const struct fs_req *req, const struct blk_ptr *bps,
                             uint32_t nblocks, void *buf, size_t cap, size_t *len_out)
{
	struct fs_time now;
	*len_out = 0;
	if (req->fr_op != FS_OP_WRITE || req->fr_status != 0 || req->fr_cred == NULL ||
	    req->u.write.wr_count != req->u.write.wr_len ||
	    zpl_blocks_len(bps, nblocks) != req->u.write.wr_len ||
	    zpl_req_time(req, &now) != 0)
		return -EINVAL;
	size_t need = zpl_record_blocks_bytes(nblocks);
	if (need > cap) {
		*len_out = need;
		return -EOVERFLOW;
	}
	struct zpl_cur c = {.wc_buf = buf, .c_cap = cap};
	zpl_record_header(&c, ZPL_REC_OP_BLOCKS, &now, req->fr_cred, &req->fr_obj);
	zpl_w_blocks(&c, req->u.write.wr_offset, req->u.write.wr_len, bps, nblocks);
	VERIFY(!c.c_bad && c.c_pos == need);
	zpl_put_le32((uint8_t *)buf + 8, (uint32_t)need);
	*len_out = need;
	return 0;
}

int zpl_lookup_name(struct zpl *z, const struct fs_obj_id *dir, const char *name,
                    struct fs_obj_id *obj_out, enum fs_type *type_out, uint32_t *nlink_out,
                    struct blk_ptr *missing_out)
{
	if (z->z_failed != 0)
		return -EIO;
	size_t len;
	int rc = zpl_name_len(name, &len);
	if (rc != 0)
		return rc;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return -EINVAL;
	static const struct fs_cred no_cred = {0};
	struct zpl_op *op = &z->z_op;
	zpl_op_begin(z, op, &no_cred, missing_out);
	struct zpl_oino *d, *child;
	struct zpl_dirent de;
	if ((rc = zpl_op_obj(op, dir, &d)) != 0)
		goto out;
	if (d->oi_ino.ino_type != FS_DIR) {
		rc = -ENOTDIR;
		goto out;
	}
	if ((rc = zpl_dir_find(op, d->oi_objid, name, len, &de, NULL, NULL)) != 0)
		goto out;
	if ((rc = zpl_op_inode(op, de.de_child, &child)) != 0) {
		rc = rc == -ENOENT ? -EIO : rc; /* a dirent without its inode: a malformed tree */
		goto out;
	}
	zpl_objid_encode(child->oi_objid, child->oi_ino.ino_gen, obj_out);
	*type_out = (enum fs_type)child->oi_ino.ino_type;
	*nlink_out = child->oi_ino.ino_nlink;
out:
	zpl_op_abort(op);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Replay */

/* A decoded record: the request it describes points into these buffers and into the record. */
struct zpl_rec {
	struct fs_cred r_cred;
	struct fs_time r_now;
	struct fs_obj_id r_new;
	char r_name[FS_NAME_MAX + 1];
	char r_name2[FS_NAME_MAX + 1];
	char r_target[FS_PATH_MAX + 1];
	const uint8_t *r_bps; /* a WRITE by blocks: r_nbps encoded pointers in the record */
	uint32_t r_nbps;
};

static int zpl_record_decode(const uint8_t *p, size_t len, struct zpl_rec *r, struct fs_req *req)
{
	struct zpl_cur c = {.rc_buf = p, .c_cap = len};
	memset(req, 0, sizeof(*req));
	r->r_bps = NULL;
	r->r_nbps = 0;
	if (len < ZPL_REC_HEADER_BYTES || zpl_r32(&c) != ZPL_REC_MAGIC ||
	    zpl_r8(&c) != ZPL_REC_VERSION)
		return -EINVAL;
	uint8_t op = zpl_r8(&c);
	if (zpl_r16(&c) != 0 || zpl_r32(&c) != len || zpl_r32(&c) != 0)
		return -EINVAL;
	zpl_r_time(&c, &r->r_now);
	memset(&r->r_cred, 0, sizeof(r->r_cred));
	r->r_cred.fc_uid = zpl_r32(&c);
	r->r_cred.fc_gid = zpl_r32(&c);
	r->r_cred.fc_ngids = zpl_r32(&c);
	if (r->r_cred.fc_ngids > FS_MAX_GIDS)
		return -EINVAL;
	for (uint32_t i = 0; i < FS_MAX_GIDS; i++)
		r->r_cred.fc_gids[i] = zpl_r32(&c);
	req->fr_op = (enum fs_op)op;
	req->fr_cred = &r->r_cred;
	zpl_r_id(&c, &req->fr_obj);
	switch (op) {
	case FS_OP_SETATTR: zpl_r_sattr(&c, &req->u.setattr.sa_sattr); break;
	case ZPL_REC_OP_BLOCKS: {
		req->fr_op = FS_OP_WRITE;
		req->u.write.wr_offset = zpl_r64(&c);
		req->u.write.wr_len = zpl_r32(&c);
		req->u.write.wr_stable = FS_UNSTABLE;
		r->r_nbps = zpl_r32(&c);
		if (r->r_nbps == 0 || r->r_nbps > ZPL_REC_BLOCKS_MAX || req->u.write.wr_len == 0 ||
		    req->u.write.wr_len > ZPL_REC_BLOCKS_MAX_BYTES)
			return -EINVAL;
		r->r_bps = zpl_cur_r(&c, (size_t)r->r_nbps * BLK_PTR_DISK_BYTES);
		break;
	}
	case FS_OP_WRITE: {
		req->u.write.wr_offset = zpl_r64(&c);
		req->u.write.wr_len = zpl_r32(&c);
		req->u.write.wr_data = zpl_cur_r(&c, req->u.write.wr_len);
		req->u.write.wr_stable = FS_UNSTABLE;
		break;
	}
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD: {
		zpl_r_name(&c, r->r_name);
		req->u.create.cr_name = r->r_name;
		uint8_t mode = zpl_r8(&c), type = zpl_r8(&c);
		if (mode > FS_CREATE_EXCLUSIVE || type > FS_FIFO)
			return -EINVAL;
		req->u.create.cr_mode = (enum fs_create_mode)mode;
		req->u.create.cr_type = (enum fs_type)type;
		zpl_r_sattr(&c, &req->u.create.cr_sattr);
		const uint8_t *verf = zpl_cur_r(&c, 8);
		if (verf != NULL)
			memcpy(req->u.create.cr_verf, verf, 8);
		req->u.create.cr_rdev_major = zpl_r32(&c);
		req->u.create.cr_rdev_minor = zpl_r32(&c);
		uint16_t tlen = zpl_r16(&c);
		const uint8_t *t = zpl_cur_r(&c, tlen);
		if (op == FS_OP_SYMLINK) {
			if (t == NULL || tlen == 0 || tlen > FS_PATH_MAX ||
			    memchr(t, '\0', tlen) != NULL)
				return -EINVAL;
			memcpy(r->r_target, t, tlen);
			r->r_target[tlen] = '\0';
			req->u.create.cr_link_target = r->r_target;
		} else if (tlen != 0) {
			return -EINVAL;
		}
		zpl_r_id(&c, &r->r_new);
		break;
	}
	case FS_OP_REMOVE:
	case FS_OP_RMDIR:
		zpl_r_name(&c, r->r_name);
		req->u.remove.rm_name = r->r_name;
		break;
	case FS_OP_RENAME:
		zpl_r_name(&c, r->r_name);
		zpl_r_id(&c, &req->u.rename.rn_to_dir);
		zpl_r_name(&c, r->r_name2);
		req->u.rename.rn_from_name = r->r_name;
		req->u.rename.rn_to_name = r->r_name2;
		break;
	case FS_OP_LINK:
		zpl_r_id(&c, &req->u.link.ln_dir);
		zpl_r_name(&c, r->r_name);
		req->u.link.ln_name = r->r_name;
		break;
	default: return -EINVAL;
	}
	if (c.c_bad || c.c_pos != len)
		return -EINVAL;
	return 0;
}

/* Decodes block pointer i of a WRITE by blocks. 0 or -EINVAL. */
static int zpl_rec_bp(const struct zpl_rec *r, uint32_t i, struct blk_ptr *bp)
{
	if (blk_ptr_decode(r->r_bps + (size_t)i * BLK_PTR_DISK_BYTES, bp) != 0 ||
	    blk_ptr_is_hole(bp) || bp->bp_lsize == 0)
		return -EINVAL;
	return 0;
}

/* Checks that the blocks of a WRITE by blocks hold exactly its length. */
static int zpl_rec_blocks_check(const struct zpl_rec *r, const struct fs_req *req)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < r->r_nbps; i++) {
		struct blk_ptr bp;
		if (zpl_rec_bp(r, i, &bp) != 0)
			return -EINVAL;
		sum += bp.bp_lsize;
	}
	return sum == req->u.write.wr_len ? 0 : -EINVAL;
}

/* Gathers the data of a WRITE by blocks into *data_out (wr_len bytes, the caller frees it):
 * 0, -SH_ENEEDBLOCK (*missing_out), -ENOMEM, or ze_get_block's error. */
static int zpl_rec_blocks_gather(struct zpl *z, const struct zpl_rec *r, const struct fs_req *req,
                                 uint8_t **data_out, struct blk_ptr *missing_out)
{
	uint8_t *data = mem_alloc(req->u.write.wr_len);
	if (data == NULL)
		return -ENOMEM;
	uint64_t pos = 0;
	for (uint32_t i = 0; i < r->r_nbps; i++) {
		struct blk_ptr bp;
		VERIFY(zpl_rec_bp(r, i, &bp) == 0); /* zpl_rec_blocks_check passed */
		const void *image;
		void *hold;
		int rc = z->z_env.ze_get_block(z->z_env.ze_ctx, &bp, &image, &hold);
		if (rc != 0) {
			if (rc == -SH_ENEEDBLOCK && missing_out != NULL)
				*missing_out = bp;
			mem_free(data);
			return rc;
		}
		memcpy(data + pos, image, bp.bp_lsize);
		z->z_env.ze_release(z->z_env.ze_ctx, hold);
		pos += bp.bp_lsize;
	}
	*data_out = data;
	return 0;
}

int zpl_record_visit_blocks(const void *rec, size_t len,
                            int (*fn)(void *arg, const struct blk_ptr *bp), void *arg)
{
	if (rec == NULL)
		return -EINVAL;
	struct zpl_rec *r = mem_alloc(sizeof(*r));
	struct fs_req *req = mem_alloc(sizeof(*req));
	int rc = -ENOMEM;
	if (r == NULL || req == NULL)
		goto out;
	if ((rc = zpl_record_decode(rec, len, r, req)) != 0)
		goto out;
	if (r->r_nbps > 0 && (rc = zpl_rec_blocks_check(r, req)) != 0)
		goto out;
	for (uint32_t i = 0; i < r->r_nbps && rc == 0; i++) {
		struct blk_ptr bp;
		VERIFY(zpl_rec_bp(r, i, &bp) == 0);
		rc = fn(arg, &bp);
	}
out:
	mem_free(r);
	mem_free(req);
	return rc;
}

int zpl_replay(struct zpl *z, const void *rec, size_t len, struct blk_ptr *missing_out)
{
	if (z->z_failed != 0)
		return -EIO;
	if (rec == NULL)
		return -EINVAL;
	struct zpl_rec *r = mem_alloc(sizeof(*r));
	struct fs_req *req = mem_alloc(sizeof(*req));
	int rc = -ENOMEM;
	if (r == NULL || req == NULL)
		goto out;
	if ((rc = zpl_record_decode(rec, len, r, req)) != 0)
		goto out;
	uint8_t *data = NULL;
	if (r->r_nbps > 0) {
		if ((rc = zpl_rec_blocks_check(r, req)) != 0 ||
		    (rc = zpl_rec_blocks_gather(z, r, req, &data, missing_out)) != 0)
			goto out;
		req->u.write.wr_data = data;
	}
	struct zpl_op *op = &z->z_op;
	zpl_op_begin(z, op, &r->r_cred, missing_out);
	op->op_replay = true;
	op->op_now = r->r_now;
	if (req->fr_op == FS_OP_CREATE || req->fr_op == FS_OP_MKDIR ||
	    req->fr_op == FS_OP_SYMLINK || req->fr_op == FS_OP_MKNOD) {
		op->op_forced = true;
		op->op_forced_objid = zpl_get_le64(r->r_new.foi_bytes);
		op->op_forced_gen = zpl_get_le64(r->r_new.foi_bytes + 8);
	}
	rc = zpl_run(op, req);
	zpl_op_abort(op);
	mem_free(data);
out:
	mem_free(r);
	mem_free(req);
	return rc;
}
