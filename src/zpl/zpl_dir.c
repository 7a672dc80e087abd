/* zpl_dir.c: directory entries: their record, name lookup over the collision range of a hash, and
 * READDIR with stable cookies. The key and record formats and the hash rule are in zpl.c. */
#include "zpl/zpl_impl.h"

/* Entries READDIR loads (with their inodes, for READDIRPLUS) before emitting them. */
#define ZPL_READDIR_BATCH 64u

uint32_t zpl_dirent_encode(uint64_t child, uint8_t type, const char *name, size_t len, uint8_t *out)
{
	zpl_put_le64(out, child);
	out[8] = type;
	out[9] = (uint8_t)len;
	memcpy(out + ZPL_DIRENT_FIXED_BYTES, name, len);
	return (uint32_t)(ZPL_DIRENT_FIXED_BYTES + len);
}

int zpl_dirent_decode(const uint8_t *in, uint32_t len, struct zpl_dirent *de)
{
	if (len < ZPL_DIRENT_FIXED_BYTES)
		return -EIO;
	de->de_child = zpl_get_le64(in);
	de->de_type = in[8];
	de->de_name_len = in[9];
	if (de->de_name_len == 0 || len != ZPL_DIRENT_FIXED_BYTES + (uint32_t)de->de_name_len ||
	    de->de_type < FS_REG || de->de_type > FS_FIFO || de->de_child < ZPL_FIRST_OBJID)
		return -EIO;
	memcpy(de->de_name, in + ZPL_DIRENT_FIXED_BYTES, de->de_name_len);
	de->de_name[de->de_name_len] = '\0';
	if (memchr(de->de_name, '/', de->de_name_len) != NULL ||
	    memchr(de->de_name, '\0', de->de_name_len) != NULL)
		return -EIO;
	if ((de->de_name_len == 1 && de->de_name[0] == '.') ||
	    (de->de_name_len == 2 && de->de_name[0] == '.' && de->de_name[1] == '.'))
		return -EIO;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Lookup by name */

struct zpl_find {
	uint8_t fi_prefix[9]; /* dir | 02 */
	uint64_t fi_base;
	const char *fi_name;
	size_t fi_len;
	uint64_t fi_next_free; /* first index not yet seen taken; valid while fi_gap is false */
	bool fi_gap;
	bool fi_found;
	int fi_err;
	uint64_t fi_hash;
	struct zpl_dirent *fi_de;
};

static bool zpl_find_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                           uint32_t val_len)
{
	struct zpl_find *f = arg;
	const uint8_t *k = key;
	if (key_len < 9 || memcmp(k, f->fi_prefix, 9) != 0)
		return false; /* past the directory */
	if (key_len != ZPL_LONG_KEY) {
		f->fi_err = -EIO;
		return false;
	}
	uint64_t h = zpl_get_be64(k + 9);
	if ((h & ~ZPL_HASH_INDEX_MASK) != f->fi_base)
		return false; /* past the name's collision range */
	if (!f->fi_gap) {
		if (h == f->fi_next_free)
			f->fi_next_free++;
		else
			f->fi_gap = true;
	}
	if (zpl_dirent_decode(val, val_len, f->fi_de) != 0) {
		f->fi_err = -EIO;
		return false;
	}
	if (f->fi_de->de_name_len == f->fi_len &&
	    memcmp(f->fi_de->de_name, f->fi_name, f->fi_len) == 0) {
		f->fi_found = true;
		f->fi_hash = h;
		return false;
	}
	return true;
}

int zpl_dir_find(struct zpl_op *op, uint64_t dir, const char *name, size_t len,
                 struct zpl_dirent *de, uint64_t *hash_out, uint64_t *free_hash_out)
{
	struct zpl_find f;
	memset(&f, 0, sizeof(f));
	zpl_put_be64(f.fi_prefix, dir);
	f.fi_prefix[8] = ZPL_KIND_DIRENT;
	f.fi_base = zpl_name_hash(op->op_z, name, len);
	f.fi_name = name;
	f.fi_len = len;
	f.fi_next_free = f.fi_base;
	f.fi_de = de;
	uint8_t start[ZPL_LONG_KEY];
	zpl_key_long(start, dir, ZPL_KIND_DIRENT, f.fi_base);
	struct blk_ptr missing;
	int rc =
	    btree_scan(op->op_z->z_tree, start, sizeof(start), false, zpl_find_visit, &f, &missing);
	if (rc != 0)
		return zpl_op_tree_error(op, rc, &missing);
	if (f.fi_err != 0)
		return f.fi_err;
	if (f.fi_found) {
		if (hash_out != NULL)
			*hash_out = f.fi_hash;
		return 0;
	}
	if (free_hash_out != NULL) {
		if (f.fi_next_free > (f.fi_base | ZPL_HASH_INDEX_MASK))
			return -ENOSPC; /* 2^16 names share this hash */
		*free_hash_out = f.fi_next_free;
	}
	return -ENOENT;
}

/* ---------------------------------------------------------------------------------------------
 * READDIR */

struct zpl_rd_ent {
	uint64_t re_hash;
	uint64_t re_child;
	uint8_t re_type;
	uint8_t re_name_len;
	char re_name[FS_NAME_MAX + 1];
	bool re_has_obj;
	struct fs_obj_id re_obj;
	struct fs_attr re_attr;
};

struct zpl_rd_batch {
	uint8_t rb_prefix[9];
	uint32_t rb_n;
	bool rb_end; /* the directory's last entry is in the batch (or it has none after start) */
	int rb_err;
	struct zpl_rd_ent rb_ents[ZPL_READDIR_BATCH];
};

static bool zpl_rd_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                         uint32_t val_len)
{
	struct zpl_rd_batch *b = arg;
	const uint8_t *k = key;
	if (key_len < 9 || memcmp(k, b->rb_prefix, 9) != 0) {
		b->rb_end = true;
		return false;
	}
	if (b->rb_n == ZPL_READDIR_BATCH)
		return false; /* full; the entry is taken by the next batch */
	struct zpl_dirent de;
	if (key_len != ZPL_LONG_KEY || zpl_dirent_decode(val, val_len, &de) != 0) {
		b->rb_err = -EIO;
		return false;
	}
	struct zpl_rd_ent *e = &b->rb_ents[b->rb_n++];
	e->re_hash = zpl_get_be64(k + 9);
	e->re_child = de.de_child;
	e->re_type = de.de_type;
	e->re_name_len = de.de_name_len;
	memcpy(e->re_name, de.de_name, (size_t)de.de_name_len + 1);
	e->re_has_obj = false;
	return true;
}

/* Fills b with the entries after (or from) start: 0, -SH_ENEEDBLOCK, -EIO, -ENOMEM. */
static int zpl_rd_gather(struct zpl_op *op, struct zpl_rd_batch *b, const uint8_t *start,
                         uint32_t start_len, bool after)
{
	b->rb_n = 0;
	b->rb_end = false;
	b->rb_err = 0;
	struct blk_ptr missing;
	int rc = btree_scan(op->op_z->z_tree, start, start_len, after, zpl_rd_visit, b, &missing);
	if (rc != 0)
		return zpl_op_tree_error(op, rc, &missing);
	if (b->rb_err != 0)
		return b->rb_err;
	if (b->rb_n < ZPL_READDIR_BATCH)
		b->rb_end = true; /* the scan ran to the end of the tree or of the directory */
	return 0;
}

/* READDIRPLUS reads the inodes of a batch in turn; the inode cache's set of the entry this many
 * ahead is prefetched (zpl_icache_prefetch), so that the misses overlap. */
#define ZPL_RD_PREFETCH_AHEAD 8u

/* READDIRPLUS: the inode of entry i of b. 0 (filled, or left without attributes when the inode
 * is absent or malformed: the entry is still listed) or -SH_ENEEDBLOCK. */
static int zpl_rd_plus(struct zpl_op *op, struct zpl_rd_batch *b, uint32_t i)
{
	struct zpl_rd_ent *e = &b->rb_ents[i];
	if (i == 0) {
		for (uint32_t a = 0; a < ZPL_RD_PREFETCH_AHEAD && a < b->rb_n; a++)
			zpl_icache_prefetch(op->op_z, b->rb_ents[a].re_child);
	}
	if (i + ZPL_RD_PREFETCH_AHEAD < b->rb_n)
		zpl_icache_prefetch(op->op_z, b->rb_ents[i + ZPL_RD_PREFETCH_AHEAD].re_child);
	struct zpl_inode ino;
	int rc = zpl_op_read_inode(op, e->re_child, &ino);
	if (rc == -SH_ENEEDBLOCK)
		return rc;
	if (rc == 0) {
		e->re_has_obj = true;
		zpl_objid_encode(e->re_child, ino.ino_gen, &e->re_obj);
		zpl_attr_from_inode(op->op_z, e->re_child, &ino, &e->re_attr);
	}
	return 0;
}

static bool zpl_rd_emit(struct fs_req *req, const struct zpl_rd_ent *e)
{
	struct fs_dirent d;
	memset(&d, 0, sizeof(d));
	d.fd_fileid = e->re_child;
	d.fd_cookie = e->re_hash;
	d.fd_name = e->re_name;
	d.fd_name_len = e->re_name_len;
	if (req->u.readdir.rd_plus && e->re_has_obj) {
		d.fd_has_obj = true;
		d.fd_obj = e->re_obj;
		d.fd_has_attr = true;
		d.fd_attr = e->re_attr;
	}
	return req->u.readdir.rd_emit(req, &d);
}

static bool zpl_rd_emit_dot(struct zpl_op *op, struct fs_req *req, const char *name,
                            uint64_t cookie, const struct zpl_oino *oi)
{
	struct fs_dirent d;
	memset(&d, 0, sizeof(d));
	d.fd_fileid = oi->oi_objid;
	d.fd_cookie = cookie;
	d.fd_name = name;
	d.fd_name_len = (uint32_t)strlen(name);
	if (req->u.readdir.rd_plus) {
		d.fd_has_obj = true;
		zpl_objid_encode(oi->oi_objid, oi->oi_ino.ino_gen, &d.fd_obj);
		d.fd_has_attr = true;
		zpl_attr_from_inode(op->op_z, oi->oi_objid, &oi->oi_ino, &d.fd_attr);
	}
	return req->u.readdir.rd_emit(req, &d);
}

/* Emits the batch; returns 1 when the caller's reply is full, 0 when all were emitted,
 * 2 when an inode for READDIRPLUS is missing (the entries before it were emitted). */
static int zpl_rd_emit_batch(struct zpl_op *op, struct fs_req *req, struct zpl_rd_batch *b,
                             bool plus_loaded)
{
	for (uint32_t i = 0; i < b->rb_n; i++) {
		if (req->u.readdir.rd_plus && !plus_loaded && zpl_rd_plus(op, b, i) != 0)
			return 2;
		if (!zpl_rd_emit(req, &b->rb_ents[i]))
			return 1;
	}
	return 0;
}

int zpl_do_readdir(struct zpl_op *op, struct fs_req *req)
{
	struct zpl *z = op->op_z;
	struct zpl_oino *dir, *parent;
	uint64_t cookie = req->u.readdir.rd_cookie;
	bool plus = req->u.readdir.rd_plus;
	int rc = zpl_op_obj(op, &req->fr_obj, &dir);
	if (rc != 0)
		return rc;
	const struct zpl_inode *dino = &dir->oi_ino;
	/* The directory's attributes go back whatever happens next. */
	zpl_attr_from_inode(z, dir->oi_objid, dino, &req->u.readdir.rd_attr);
	req->u.readdir.rd_attr_valid = true;
	req->u.readdir.rd_eof = false;
	if (dino->ino_type != FS_DIR)
		return -ENOTDIR;
	if (req->u.readdir.rd_emit == NULL)
		return -EINVAL;
	if ((rc = zpl_perm(op, dino, ZPL_R, false, false)) != 0)
		return rc;
	uint8_t verf[8];
	static const uint8_t zero_verf[8];
	zpl_put_le64(verf, dino->ino_gen);
	/* A client that never saw a verifier sends zeros; any other mismatch is a cookie of another
	 * directory (or of one removed and made again). */
	if (cookie != 0 && memcmp(req->u.readdir.rd_verf, verf, 8) != 0 &&
	    memcmp(req->u.readdir.rd_verf, zero_verf, 8) != 0)
		return -SH_EBADCOOKIE;
	if (cookie > (uint64_t)INT64_MAX)
		return -SH_EBADCOOKIE;
	memcpy(req->u.readdir.rd_verf_out, verf, 8);

	parent = dir;
	if (cookie < 2 && dino->ino_parent != dir->oi_objid) {
		if (plus) {
			rc = zpl_op_inode(op, dino->ino_parent, &parent);
			if (rc == -ENOENT)
				rc = -EIO; /* a directory whose parent is gone: a malformed tree */
			if (rc != 0)
				return rc;
		}
	}

	if (z->z_scratch == NULL && (z->z_scratch = mem_alloc(sizeof(struct zpl_rd_batch))) == NULL)
		return -ENOMEM;
	struct zpl_rd_batch *b = z->z_scratch;
	zpl_put_be64(b->rb_prefix, dir->oi_objid);
	b->rb_prefix[8] = ZPL_KIND_DIRENT;
	uint8_t start[ZPL_LONG_KEY];
	uint32_t start_len;
	bool after;
	if (cookie <= 2) {
		memcpy(start, b->rb_prefix, 9);
		start_len = 9;
		after = false;
	} else {
		zpl_key_long(start, dir->oi_objid, ZPL_KIND_DIRENT, cookie);
		start_len = ZPL_LONG_KEY;
		after = true;
	}

	/* The first batch is loaded in full before anything is emitted, so a miss here restarts a
	 * READDIR that has not output anything. */
	if ((rc = zpl_rd_gather(op, b, start, start_len, after)) != 0)
		return rc;
	if (plus) {
		for (uint32_t i = 0; i < b->rb_n; i++)
			if ((rc = zpl_rd_plus(op, b, i)) != 0)
				return rc;
	}
	if (cookie == 0 && !zpl_rd_emit_dot(op, req, ".", 1, dir))
		return 0;
	if (cookie <= 1) {
		if (plus) {
			if (!zpl_rd_emit_dot(op, req, "..", 2, parent))
				return 0;
		} else {
			struct zpl_oino dotdot;
			dotdot.oi_objid = dino->ino_parent;
			dotdot.oi_ino.ino_gen = 0;
			if (!zpl_rd_emit_dot(op, req, "..", 2, &dotdot))
				return 0;
		}
	}
	bool loaded = true;
	for (;;) {
		int er = zpl_rd_emit_batch(op, req, b, loaded);
		if (er != 0)
			return 0; /* the reply is full, or a short reply ends at a missing inode */
		if (b->rb_end) {
			req->u.readdir.rd_eof = true;
			return 0;
		}
		if (b->rb_n == 0)
			return 0;
		zpl_key_long(start, dir->oi_objid, ZPL_KIND_DIRENT,
		             b->rb_ents[b->rb_n - 1].re_hash);
		rc = zpl_rd_gather(op, b, start, ZPL_LONG_KEY, true);
		if (rc == -SH_ENEEDBLOCK)
			return 0; /* something was emitted: end this reply short rather than restart
			           */
		if (rc != 0)
			return rc;
		loaded = false;
	}
}
