/* zpl_data.c: file data: the dirty buffer table, READ (without copying when it can), the planning
 * of WRITE, truncation and removal, long symlink targets, and zpl_sync. The block layout of files
 * and the rule that keeps zpl_sync from missing are described in zpl.c. */
#include <stdlib.h>

#include "zpl/zpl_impl.h"

/* Zeros handed out by READs of holes; never written. READ returns at most ZPL_READ_MAX_BYTES. */
static uint8_t zpl_zero_page[ZPL_READ_MAX_BYTES];

static uint64_t zpl_mix64(uint64_t x)
{
	/* The finalizer of SplitMix64: spreads (object, block) pairs over the buckets. */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static uint64_t zpl_dbuf_hash(uint64_t obj, uint64_t blk)
{
	return zpl_mix64(obj * 0x9e3779b97f4a7c15ull ^ blk);
}

/* ---------------------------------------------------------------------------------------------
 * The dirty buffer table. Inserting never fails: the bucket arrays grow when memory allows and
 * otherwise the chains get longer; an object's list head is allocated in advance by the plan. */

#define ZPL_DTAB_MIN_BUCKETS 64u

int zpl_dtab_init(struct zpl_dtab *dt)
{
	memset(dt, 0, sizeof(*dt));
	/* Allocated up front, so that inserting (at commit, where nothing may fail) always has
	 * buckets, however a later growth fares. */
	dt->dt_buckets = mem_zalloc(sizeof(*dt->dt_buckets) * ZPL_DTAB_MIN_BUCKETS);
	dt->dt_obuckets = mem_zalloc(sizeof(*dt->dt_obuckets) * ZPL_DTAB_MIN_BUCKETS);
	if (dt->dt_buckets == NULL || dt->dt_obuckets == NULL) {
		mem_free(dt->dt_buckets);
		mem_free(dt->dt_obuckets);
		memset(dt, 0, sizeof(*dt));
		return -ENOMEM;
	}
	dt->dt_nbuckets = dt->dt_nobuckets = ZPL_DTAB_MIN_BUCKETS;
	return 0;
}

void zpl_dbuf_rele(struct zpl_dbuf *db)
{
	if (atomic_fetch_sub_explicit(&db->db_refs, 1, memory_order_acq_rel) == 1) {
		mem_free(db->db_data);
		mem_free(db);
	}
}

/* Drops db's seal, if it has one: its bytes are about to change, or it leaves the table. */
static void zpl_dbuf_unseal(const struct zpl_dtab *dt, struct zpl_dbuf *db)
{
	if (db->db_seal != NULL) {
		dt->dt_drop_seal(dt->dt_seal_ctx, db->db_seal);
		db->db_seal = NULL;
	}
}

void zpl_dtab_fini(struct zpl_dtab *dt)
{
	for (uint32_t i = 0; i < dt->dt_nbuckets; i++) {
		struct zpl_dbuf *db = dt->dt_buckets[i];
		while (db != NULL) {
			struct zpl_dbuf *next = db->db_hnext;
			zpl_dbuf_unseal(dt, db);
			zpl_dbuf_rele(db);
			db = next;
		}
	}
	for (uint32_t i = 0; i < dt->dt_nobuckets; i++) {
		struct zpl_dobj *dobj = dt->dt_obuckets[i];
		while (dobj != NULL) {
			struct zpl_dobj *next = dobj->do_hnext;
			mem_free(dobj);
			dobj = next;
		}
	}
	mem_free(dt->dt_buckets);
	mem_free(dt->dt_obuckets);
	memset(dt, 0, sizeof(*dt));
}

struct zpl_dbuf *zpl_dbuf_find(const struct zpl_dtab *dt, uint64_t obj, uint64_t blk)
{
	if (dt->dt_nbuckets == 0)
		return NULL;
	struct zpl_dbuf *db = dt->dt_buckets[zpl_dbuf_hash(obj, blk) & (dt->dt_nbuckets - 1)];
	while (db != NULL && (db->db_obj != obj || db->db_blk != blk))
		db = db->db_hnext;
	return db;
}

static struct zpl_dobj *zpl_dobj_find(const struct zpl_dtab *dt, uint64_t obj)
{
	if (dt->dt_nobuckets == 0)
		return NULL;
	struct zpl_dobj *d = dt->dt_obuckets[zpl_mix64(obj) & (dt->dt_nobuckets - 1)];
	while (d != NULL && d->do_obj != obj)
		d = d->do_hnext;
	return d;
}

static void zpl_dtab_grow(struct zpl_dtab *dt)
{
	if (dt->dt_count >= dt->dt_nbuckets) {
		uint32_t n = dt->dt_nbuckets != 0 ? dt->dt_nbuckets * 2 : ZPL_DTAB_MIN_BUCKETS;
		struct zpl_dbuf **b = mem_zalloc(sizeof(*b) * n);
		if (b != NULL) {
			for (uint32_t i = 0; i < dt->dt_nbuckets; i++) {
				struct zpl_dbuf *db = dt->dt_buckets[i];
				while (db != NULL) {
					struct zpl_dbuf *next = db->db_hnext;
					uint64_t h =
					    zpl_dbuf_hash(db->db_obj, db->db_blk) & (n - 1);
					db->db_hnext = b[h];
					b[h] = db;
					db = next;
				}
			}
			mem_free(dt->dt_buckets);
			dt->dt_buckets = b;
			dt->dt_nbuckets = n;
		}
	}
	if (dt->dt_ocount >= dt->dt_nobuckets) {
		uint32_t n = dt->dt_nobuckets != 0 ? dt->dt_nobuckets * 2 : ZPL_DTAB_MIN_BUCKETS;
		struct zpl_dobj **b = mem_zalloc(sizeof(*b) * n);
		if (b != NULL) {
			for (uint32_t i = 0; i < dt->dt_nobuckets; i++) {
				struct zpl_dobj *d = dt->dt_obuckets[i];
				while (d != NULL) {
					struct zpl_dobj *next = d->do_hnext;
					uint64_t h = zpl_mix64(d->do_obj) & (n - 1);
					d->do_hnext = b[h];
					b[h] = d;
					d = next;
				}
			}
			mem_free(dt->dt_obuckets);
			dt->dt_obuckets = b;
			dt->dt_nobuckets = n;
		}
	}
}

/* Unlinks db from the table and drops the table's reference. */
static void zpl_dtab_remove(struct zpl_dtab *dt, struct zpl_dbuf *db)
{
	struct zpl_dbuf **pp =
	    &dt->dt_buckets[zpl_dbuf_hash(db->db_obj, db->db_blk) & (dt->dt_nbuckets - 1)];
	while (*pp != db)
		pp = &(*pp)->db_hnext;
	*pp = db->db_hnext;
	struct zpl_dobj *dobj = zpl_dobj_find(dt, db->db_obj);
	VERIFY(dobj != NULL);
	if (db->db_oprev != NULL)
		db->db_oprev->db_onext = db->db_onext;
	else
		dobj->do_head = db->db_onext;
	if (db->db_onext != NULL)
		db->db_onext->db_oprev = db->db_oprev;
	if (dobj->do_head == NULL) {
		struct zpl_dobj **dp =
		    &dt->dt_obuckets[zpl_mix64(dobj->do_obj) & (dt->dt_nobuckets - 1)];
		while (*dp != dobj)
			dp = &(*dp)->do_hnext;
		*dp = dobj->do_hnext;
		dt->dt_ocount--;
		mem_free(dobj);
	}
	dt->dt_count--;
	dt->dt_bytes -= db->db_size;
	zpl_dbuf_unseal(dt, db);
	zpl_dbuf_rele(db);
}

/* Inserts db (a buffer of the same block may still be there: the caller removes it next); *spare
 * is used as the object's list head when it has none (and then set to NULL). */
static void zpl_dtab_insert(struct zpl_dtab *dt, struct zpl_dbuf *db, struct zpl_dobj **spare)
{
	struct zpl_dobj *dobj = zpl_dobj_find(dt, db->db_obj);
	if (dobj == NULL) {
		dobj = *spare;
		VERIFY(dobj != NULL); /* the plan allocated one */
		*spare = NULL;
		dobj->do_obj = db->db_obj;
		dobj->do_head = NULL;
		dt->dt_ocount++;
		zpl_dtab_grow(dt);
		uint64_t h = zpl_mix64(dobj->do_obj) & (dt->dt_nobuckets - 1);
		dobj->do_hnext = dt->dt_obuckets[h];
		dt->dt_obuckets[h] = dobj;
	}
	dt->dt_count++;
	zpl_dtab_grow(dt);
	uint64_t h = zpl_dbuf_hash(db->db_obj, db->db_blk) & (dt->dt_nbuckets - 1);
	db->db_hnext = dt->dt_buckets[h];
	dt->dt_buckets[h] = db;
	db->db_oprev = NULL;
	db->db_onext = dobj->do_head;
	if (dobj->do_head != NULL)
		dobj->do_head->db_oprev = db;
	dobj->do_head = db;
	dt->dt_bytes += db->db_size;
}

static void zpl_dtab_drop(struct zpl_dtab *dt, uint64_t obj, uint64_t first_blk, uint64_t last_blk)
{
	struct zpl_dobj *dobj = zpl_dobj_find(dt, obj);
	if (dobj == NULL)
		return;
	/* Removing the list's last buffer frees dobj; only db and next are read after a removal. */
	struct zpl_dbuf *db = dobj->do_head;
	while (db != NULL) {
		struct zpl_dbuf *next = db->db_onext;
		if (db->db_blk >= first_blk && db->db_blk <= last_blk)
			zpl_dtab_remove(dt, db);
		db = next;
	}
}

static struct zpl_dbuf *zpl_dbuf_alloc(uint64_t obj, uint64_t blk, uint32_t size)
{
	struct zpl_dbuf *db = mem_alloc(sizeof(*db));
	if (db == NULL)
		return NULL;
	db->db_data = mem_alloc(size);
	if (db->db_data == NULL) {
		mem_free(db);
		return NULL;
	}
	db->db_obj = obj;
	db->db_blk = blk;
	db->db_size = size;
	db->db_adoptable = false;
	db->db_seal = NULL;
	atomic_init(&db->db_refs, 1);
	db->db_hnext = db->db_onext = db->db_oprev = NULL;
	return db;
}

void zpl_dchg_discard(struct zpl_dchg *dc)
{
	if (dc->dc_fresh != NULL)
		zpl_dbuf_rele(dc->dc_fresh);
	mem_free(dc->dc_dobj);
	dc->dc_fresh = NULL;
	dc->dc_dobj = NULL;
}

static void zpl_dchg_edit(const struct zpl_dtab *dt, struct zpl_dbuf *db, const struct zpl_dchg *dc)
{
	db->db_adoptable = false; /* its bytes change: no written block holds them */
	zpl_dbuf_unseal(dt, db);
	if (dc->dc_len > 0)
		memcpy(db->db_data + dc->dc_off, dc->dc_src, dc->dc_len);
	if (dc->dc_zero && dc->dc_zero_from < db->db_size)
		memset(db->db_data + dc->dc_zero_from, 0, db->db_size - dc->dc_zero_from);
}

void zpl_dchg_apply(struct zpl *z, struct zpl_dchg *dc)
{
	struct zpl_dtab *dt = &z->z_dtab;
	switch (dc->dc_kind) {
	case ZPL_DCHG_INSTALL: {
		/* The new buffer goes in before the old one leaves, so the object's list head
		 * (which the old one may be alone on) stays. */
		struct zpl_dbuf *old = zpl_dbuf_find(dt, dc->dc_obj, dc->dc_blk);
		zpl_dchg_edit(dt, dc->dc_fresh, dc);
		zpl_dtab_insert(dt, dc->dc_fresh, &dc->dc_dobj);
		dc->dc_fresh = NULL;
		if (old != NULL)
			zpl_dtab_remove(dt, old);
		break;
	}
	case ZPL_DCHG_MODIFY: zpl_dchg_edit(dt, dc->dc_existing, dc); break;
	case ZPL_DCHG_DROP: zpl_dtab_drop(dt, dc->dc_obj, dc->dc_blk, dc->dc_blk_last); break;
	default: VERIFY(0);
	}
	zpl_dchg_discard(dc);
}

/* ---------------------------------------------------------------------------------------------
 * Block contents */

/* Where a block's current bytes are: a dirty buffer, a held block image, or nothing (a hole).
 * bs_len bytes are valid at bs_data; the block's bytes beyond them (up to B) are zeros. */
struct zpl_bsrc {
	const uint8_t *bs_data;
	uint32_t bs_len;
	struct zpl_dbuf *bs_db;             /* a dirty buffer (no reference taken) */
	void *bs_hold;                      /* an image held through ze_get_block */
	bool bs_extent;                     /* the extent key exists */
	uint8_t bs_ptr[BLK_PTR_DISK_BYTES]; /* its value */
};

static void zpl_bsrc_release(struct zpl *z, struct zpl_bsrc *s)
{
	if (s->bs_hold != NULL)
		z->z_env.ze_release(z->z_env.ze_ctx, s->bs_hold);
	s->bs_hold = NULL;
}

/* Finds block blk of object oi: its dirty buffer, else its extent and (when want_image) the
 * block's image, held until zpl_bsrc_release. 0, -EIO, -SH_ENEEDBLOCK, or the store's error. */
static int zpl_bsrc_get(struct zpl_op *op, const struct zpl_oino *oi, uint64_t blk, bool want_image,
                        struct zpl_bsrc *s)
{
	struct zpl *z = op->op_z;
	memset(s, 0, sizeof(*s));
	struct zpl_dbuf *db = zpl_dbuf_find(&z->z_dtab, oi->oi_objid, blk);
	if (db != NULL) {
		s->bs_db = db;
		s->bs_data = db->db_data;
		s->bs_len = SH_MIN(db->db_size, oi->oi_ino.ino_blksz);
		return 0;
	}
	uint8_t key[ZPL_LONG_KEY];
	uint32_t vlen;
	zpl_key_long(key, oi->oi_objid, ZPL_KIND_EXTENT, blk);
	int rc = zpl_op_lookup(op, key, sizeof(key), s->bs_ptr, sizeof(s->bs_ptr), &vlen);
	if (rc == -ENOENT)
		return 0; /* a hole */
	if (rc != 0)
		return rc;
	if (vlen != BLK_PTR_DISK_BYTES)
		return -EIO;
	s->bs_extent = true;
	struct blk_ptr bp;
	if (blk_ptr_decode(s->bs_ptr, &bp) != 0)
		return -EIO;
	if (blk_ptr_is_hole(&bp) || !want_image)
		return 0; /* a block still being written without its buffer reads as zeros (R5) */
	const void *image;
	void *hold;
	rc = z->z_env.ze_get_block(z->z_env.ze_ctx, &bp, &image, &hold);
	if (rc == -SH_ENEEDBLOCK) {
		if (op->op_missing != NULL)
			*op->op_missing = bp;
		return rc;
	}
	if (rc != 0)
		return rc;
	s->bs_hold = hold;
	s->bs_data = image;
	s->bs_len = SH_MIN(bp.bp_lsize, oi->oi_ino.ino_blksz);
	return 0;
}

/* Copies bytes [in_off, in_off + n) of the block s describes (zeros beyond its valid bytes). */
static void zpl_bsrc_copy(const struct zpl_bsrc *s, uint32_t in_off, uint32_t n, uint8_t *out)
{
	uint32_t have = in_off < s->bs_len ? SH_MIN(n, s->bs_len - in_off) : 0;
	if (have > 0)
		memcpy(out, s->bs_data + in_off, have);
	if (have < n)
		memset(out + have, 0, n - have);
}

/* ---------------------------------------------------------------------------------------------
 * Planning writes */

/* The block size after the file grows to new_size (zpl.c, "Files"). */
static void zpl_grow_blksz(const struct zpl *z, struct zpl_inode *ino, uint64_t new_size)
{
	if ((ino->ino_flags & ZPL_IF_FIXED) != 0 || new_size <= ino->ino_blksz)
		return;
	if (new_size <= z->z_record_bytes) {
		ino->ino_blksz =
		    (uint32_t)((new_size + ZPL_PAGE_BYTES - 1) / ZPL_PAGE_BYTES * ZPL_PAGE_BYTES);
	} else {
		ino->ino_blksz = SH_MAX(z->z_record_bytes, ino->ino_blksz);
		ino->ino_flags |= ZPL_IF_FIXED;
	}
}

/* Plans an edit of block blk (a copy of len bytes from src to in_off, or with zero set, zeroing
 * from zero_from): in place when the block's dirty buffer is unshared and full-sized, else into a
 * fresh buffer made from the block's current contents (read from its image unless the edit
 * overwrites the whole block), whose extent key is put so its tree path is dirty. skip_hole: a
 * block with no buffer and no extent needs no edit (zeroing a hole). */
static int zpl_plan_block(struct zpl_op *op, struct zpl_oino *oi, uint64_t blk, uint32_t in_off,
                          const uint8_t *src, uint32_t len, bool zero, uint32_t zero_from,
                          bool skip_hole)
{
	struct zpl *z = op->op_z;
	uint32_t bsize = oi->oi_ino.ino_blksz;
	struct zpl_dbuf *db = zpl_dbuf_find(&z->z_dtab, oi->oi_objid, blk);
	struct zpl_dchg *dc;
	int rc;
	if (db != NULL && db->db_size == bsize &&
	    atomic_load_explicit(&db->db_refs, memory_order_acquire) == 1) {
		if ((rc = zpl_op_dchg(op, &dc)) != 0)
			return rc;
		dc->dc_kind = ZPL_DCHG_MODIFY;
		dc->dc_existing = db;
	} else {
		bool whole = !zero && in_off == 0 && len == bsize;
		struct zpl_bsrc s;
		if ((rc = zpl_bsrc_get(op, oi, blk, !whole, &s)) != 0)
			return rc;
		if (skip_hole && s.bs_db == NULL && !s.bs_extent)
			return 0;
		if ((rc = zpl_op_dchg(op, &dc)) != 0) {
			zpl_bsrc_release(z, &s);
			return rc;
		}
		dc->dc_kind = ZPL_DCHG_INSTALL;
		dc->dc_fresh = zpl_dbuf_alloc(oi->oi_objid, blk, bsize);
		if (db == NULL)
			dc->dc_dobj = mem_alloc(sizeof(struct zpl_dobj));
		if (dc->dc_fresh == NULL || (db == NULL && dc->dc_dobj == NULL)) {
			zpl_bsrc_release(z, &s);
			return -ENOMEM;
		}
		if (whole)
			memset(dc->dc_fresh->db_data, 0, bsize);
		else
			zpl_bsrc_copy(&s, 0, bsize, dc->dc_fresh->db_data);
		zpl_bsrc_release(z, &s);
		if (db == NULL) {
			/* Dirty the extent's tree path now (see zpl.c): its old pointer stays until
			 * zpl_sync replaces (and frees) it; a new block gets the zero value. */
			uint8_t key[ZPL_LONG_KEY];
			zpl_key_long(key, oi->oi_objid, ZPL_KIND_EXTENT, blk);
			if (s.bs_extent) {
				rc = zpl_op_put(op, key, sizeof(key), s.bs_ptr, BLK_PTR_DISK_BYTES,
				                BTREE_PUT_REPLACE);
			} else {
				static const uint8_t zero_ptr[BLK_PTR_DISK_BYTES];
				rc = zpl_op_put(op, key, sizeof(key), zero_ptr, BLK_PTR_DISK_BYTES,
				                BTREE_PUT_NEW);
				oi->oi_ino.ino_nblocks++;
			}
			if (rc != 0)
				return rc;
		}
	}
	dc->dc_obj = oi->oi_objid;
	dc->dc_blk = blk;
	dc->dc_off = in_off;
	dc->dc_src = src;
	dc->dc_len = len;
	dc->dc_zero = zero;
	dc->dc_zero_from = zero_from;
	return 0;
}

int zpl_data_write(struct zpl_op *op, struct zpl_oino *oi, uint64_t off, const uint8_t *data,
                   uint32_t len)
{
	struct zpl_inode *ino = &oi->oi_ino;
	if (len == 0)
		return 0;
	uint64_t end = off + len; /* the caller checked end <= ZPL_MAX_FILE_BYTES */
	uint64_t new_size = SH_MAX(ino->ino_size, end);
	zpl_grow_blksz(op->op_z, ino, new_size);
	uint32_t bsize = ino->ino_blksz;
	for (uint64_t blk = off / bsize; blk <= (end - 1) / bsize; blk++) {
		uint64_t boff = blk * bsize;
		uint64_t from = SH_MAX(off, boff), to = SH_MIN(end, boff + bsize);
		int rc = zpl_plan_block(op, oi, blk, (uint32_t)(from - boff), data + (from - off),
		                        (uint32_t)(to - from), false, 0, false);
		if (rc != 0)
			return rc;
	}
	ino->ino_size = new_size;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Truncation and removal */

struct zpl_ext_scan {
	uint8_t es_prefix[9];
	struct zpl_op *es_op;
	uint64_t es_count;
	uint64_t es_max;  /* 0: no limit */
	uint64_t es_last; /* the block of the last extent planned */
	bool es_more;     /* stopped at es_max with extents left */
	int es_err;
};

static bool zpl_ext_visit(void *arg, const void *key, uint32_t key_len, const void *val,
                          uint32_t val_len)
{
	struct zpl_ext_scan *es = arg;
	if (key_len < 9 || memcmp(key, es->es_prefix, 9) != 0)
		return false;
	if (key_len != ZPL_LONG_KEY || val_len != BLK_PTR_DISK_BYTES) {
		es->es_err = -EIO;
		return false;
	}
	if (es->es_max != 0 && es->es_count == es->es_max) {
		es->es_more = true;
		return false;
	}
	struct blk_ptr bp;
	if (blk_ptr_decode(val, &bp) != 0) {
		es->es_err = -EIO;
		return false;
	}
	int rc = zpl_op_del_extent(es->es_op, key, val);
	if (rc != 0) {
		es->es_err = rc;
		return false;
	}
	es->es_count++;
	es->es_last = zpl_get_be64((const uint8_t *)key + 9);
	return true;
}

/* Plans deleting the object's extents from block first on (freeing their blocks) and dropping
 * its dirty buffers there; with max_extents non-zero, only the first max_extents of them (every
 * dirty buffer has an extent, so the buffers dropped are those of the extents deleted), and
 * *more_out says whether extents are left. */
static int zpl_plan_drop(struct zpl_op *op, struct zpl_oino *oi, uint64_t first,
                         uint64_t max_extents, bool *more_out)
{
	struct zpl_ext_scan es;
	memset(&es, 0, sizeof(es));
	zpl_put_be64(es.es_prefix, oi->oi_objid);
	es.es_prefix[8] = ZPL_KIND_EXTENT;
	es.es_op = op;
	es.es_max = max_extents;
	uint8_t start[ZPL_LONG_KEY];
	zpl_key_long(start, oi->oi_objid, ZPL_KIND_EXTENT, first);
	struct blk_ptr missing;
	int rc =
	    btree_scan(op->op_z->z_tree, start, sizeof(start), false, zpl_ext_visit, &es, &missing);
	if (rc != 0)
		return zpl_op_tree_error(op, rc, &missing);
	if (es.es_err != 0)
		return es.es_err;
	if (es.es_count > oi->oi_ino.ino_nblocks)
		return -EIO; /* more extents than the inode counts: a malformed tree */
	oi->oi_ino.ino_nblocks -= es.es_count;
	if (more_out != NULL)
		*more_out = es.es_more;
	struct zpl_dchg *dc;
	if ((rc = zpl_op_dchg(op, &dc)) != 0)
		return rc;
	dc->dc_kind = ZPL_DCHG_DROP;
	dc->dc_obj = oi->oi_objid;
	dc->dc_blk = first;
	dc->dc_blk_last = es.es_more ? es.es_last : UINT64_MAX;
	return 0;
}

int zpl_data_truncate_step(struct zpl_op *op, struct zpl_oino *oi, uint64_t new_size)
{
	struct zpl_inode *ino = &oi->oi_ino;
	if (ino->ino_type != FS_REG || new_size >= ino->ino_size ||
	    ino->ino_nblocks <= ZPL_REAP_STEP_EXTENTS)
		return 0;
	uint32_t bsize = ino->ino_blksz;
	uint64_t first = new_size / bsize + (new_size % bsize != 0 ? 1 : 0);
	uint32_t nmuts = op->op_nmuts, ndchg = op->op_ndchg;
	uint64_t nblocks = ino->ino_nblocks;
	bool more = false;
	int rc = zpl_plan_drop(op, oi, first, ZPL_REAP_STEP_EXTENTS, &more);
	if (rc == 0 && more) {
		oi->oi_dirty = true;
		rc = zpl_op_commit(op);
		return rc == 0 ? -SH_EPARTIAL : rc;
	}
	/* The rest fits in one step (or the plan missed): zpl_data_truncate plans it anew. */
	for (uint32_t i = ndchg; i < op->op_ndchg; i++)
		zpl_dchg_discard(&op->op_dchg[i]);
	op->op_ndchg = ndchg;
	op->op_nmuts = nmuts;
	ino->ino_nblocks = nblocks;
	return rc;
}

int zpl_data_truncate(struct zpl_op *op, struct zpl_oino *oi, uint64_t new_size)
{
	struct zpl_inode *ino = &oi->oi_ino;
	if (new_size == ino->ino_size)
		return 0;
	if (new_size > ino->ino_size) {
		/* The bytes past the old size already read as zeros (R8). */
		zpl_grow_blksz(op->op_z, ino, new_size);
		ino->ino_size = new_size;
		return 0;
	}
	uint32_t bsize = ino->ino_blksz;
	uint64_t first = new_size / bsize + (new_size % bsize != 0 ? 1 : 0);
	int rc;
	/* The tail of the new last block first: its buffer or image is still where it was. */
	if (new_size % bsize != 0) {
		uint32_t zoff = (uint32_t)(new_size % bsize);
		if ((rc = zpl_plan_block(op, oi, new_size / bsize, 0, NULL, 0, true, zoff, true)) !=
		    0)
			return rc;
	}
	if ((rc = zpl_plan_drop(op, oi, first, 0, NULL)) != 0)
		return rc;
	ino->ino_size = new_size;
	return 0;
}

int zpl_data_remove(struct zpl_op *op, struct zpl_oino *oi)
{
	if (oi->oi_ino.ino_type != FS_REG && oi->oi_ino.ino_type != FS_LNK)
		return 0;
	if (oi->oi_ino.ino_type == FS_LNK && oi->oi_ino.ino_link_len <= ZPL_SYMLINK_INLINE_MAX)
		return 0;
	return zpl_plan_drop(op, oi, 0, 0, NULL);
}

int zpl_data_drop_some(struct zpl_op *op, struct zpl_oino *oi, uint64_t max_extents, bool *more_out)
{
	return zpl_plan_drop(op, oi, 0, max_extents, more_out);
}

/* ---------------------------------------------------------------------------------------------
 * READ */

static void zpl_release_noop(void *arg)
{
	(void)arg;
}

static void zpl_release_dbuf(void *arg)
{
	zpl_dbuf_rele(arg);
}

static void zpl_release_copy(void *arg)
{
	mem_free(arg);
}

/* A READ's data handed out as pieces: the blocks' cached images and dirty buffers themselves
 * (each held until the reply is sent), and zeros for holes and short images. */
struct zpl_read_vec {
	void (*rv_release)(void *ctx, void *hold); /* the env's, copied: the zpl may be gone */
	void *rv_ctx;
	uint32_t rv_nholds;
	struct {
		void *rh_image;         /* an image held through ze_get_block, or */
		struct zpl_dbuf *rh_db; /* a dirty buffer with a reference taken */
	} rv_holds[FS_BUF_SEGS_MAX];
	struct iovec rv_segs[FS_BUF_SEGS_MAX];
};

static void zpl_release_vec(void *arg)
{
	struct zpl_read_vec *rv = arg;
	for (uint32_t i = 0; i < rv->rv_nholds; i++) {
		if (rv->rv_holds[i].rh_db != NULL)
			zpl_dbuf_rele(rv->rv_holds[i].rh_db);
		else
			rv->rv_release(rv->rv_ctx, rv->rv_holds[i].rh_image);
	}
	mem_free(rv);
}

static bool zpl_read_vec_add(struct zpl_read_vec *rv, uint32_t *nsegs, const uint8_t *data,
                             uint32_t len)
{
	if (len == 0)
		return true;
	if (*nsegs > 0 && data == zpl_zero_page &&
	    rv->rv_segs[*nsegs - 1].iov_base == (void *)zpl_zero_page) {
		rv->rv_segs[*nsegs - 1].iov_len += len; /* runs of zeros are one piece */
		return true;
	}
	if (*nsegs == FS_BUF_SEGS_MAX)
		return false;
	rv->rv_segs[*nsegs].iov_base = (void *)(uintptr_t)data;
	rv->rv_segs[*nsegs].iov_len = len;
	(*nsegs)++;
	return true;
}

/* Hands out bytes [off, off + n) of oi as pieces in fb. 0, 1 when
 * they need more than FS_BUF_SEGS_MAX pieces (fb untouched: the caller copies instead), or the
 * error of a block's lookup (-SH_ENEEDBLOCK among them), with nothing held. */
static int zpl_read_pieces(struct zpl_op *op, struct zpl_oino *oi, uint64_t off, uint32_t n,
                           struct fs_buf *fb)
{
	struct zpl *z = op->op_z;
	uint32_t bsize = oi->oi_ino.ino_blksz;
	uint64_t first = off / bsize, last = (off + n - 1) / bsize;
	if (last - first >= FS_BUF_SEGS_MAX)
		return 1;
	struct zpl_read_vec *rv = mem_alloc(sizeof(*rv));
	if (rv == NULL)
		return -ENOMEM;
	rv->rv_release = z->z_env.ze_release;
	rv->rv_ctx = z->z_env.ze_ctx;
	rv->rv_nholds = 0;
	uint32_t nsegs = 0;
	int rc = 0;
	for (uint64_t blk = first; blk <= last && rc == 0; blk++) {
		uint64_t boff = blk * bsize;
		uint32_t from = (uint32_t)(SH_MAX(off, boff) - boff);
		uint32_t to = (uint32_t)(SH_MIN(off + n, boff + bsize) - boff);
		struct zpl_bsrc s;
		if ((rc = zpl_bsrc_get(op, oi, blk, true, &s)) != 0)
			break;
		uint32_t have = from < s.bs_len ? SH_MIN(to, s.bs_len) - from : 0;
		if (have > 0) {
			if (s.bs_db != NULL) {
				atomic_fetch_add_explicit(&s.bs_db->db_refs, 1, memory_order_relaxed);
				rv->rv_holds[rv->rv_nholds].rh_db = s.bs_db;
				rv->rv_holds[rv->rv_nholds].rh_image = NULL;
			} else {
				rv->rv_holds[rv->rv_nholds].rh_db = NULL;
				rv->rv_holds[rv->rv_nholds].rh_image = s.bs_hold;
				s.bs_hold = NULL; /* the vector's now */
			}
			rv->rv_nholds++;
			if (!zpl_read_vec_add(rv, &nsegs, s.bs_data + from, have))
				rc = 1;
		}
		zpl_bsrc_release(z, &s);
		if (rc == 0 && !zpl_read_vec_add(rv, &nsegs, zpl_zero_page, to - from - have))
			rc = 1;
	}
	if (rc != 0) {
		zpl_release_vec(rv);
		return rc;
	}
	fb->fb_data = NULL;
	fb->fb_segs = rv->rv_segs;
	fb->fb_nsegs = nsegs;
	fb->fb_release = zpl_release_vec;
	fb->fb_release_arg = rv;
	return 0;
}

int zpl_data_read(struct zpl_op *op, struct zpl_oino *oi, struct fs_req *req)
{
	struct zpl *z = op->op_z;
	const struct zpl_inode *ino = &oi->oi_ino;
	struct fs_buf *fb = &req->u.read.rd_buf;
	uint64_t off = req->u.read.rd_offset;
	uint32_t count = SH_MIN(req->u.read.rd_count, ZPL_READ_MAX_BYTES);
	fb->fb_data = zpl_zero_page;
	fb->fb_len = 0;
	fb->fb_release = zpl_release_noop;
	fb->fb_release_arg = NULL;
	if (off >= ino->ino_size || count == 0) {
		req->u.read.rd_eof = off >= ino->ino_size;
		return 0;
	}
	uint32_t n = (uint32_t)SH_MIN((uint64_t)count, ino->ino_size - off);
	uint32_t bsize = ino->ino_blksz;
	uint64_t first = off / bsize, last = (off + n - 1) / bsize;
	if (first == last) {
		/* Within one dirty buffer: the buffer itself, no allocation (the common small READ of
		 * a file being written). */
		uint32_t in_off = (uint32_t)(off - first * bsize);
		struct zpl_dbuf *db = zpl_dbuf_find(&z->z_dtab, oi->oi_objid, first);
		if (db != NULL && in_off + n <= SH_MIN(db->db_size, bsize)) {
			atomic_fetch_add_explicit(&db->db_refs, 1, memory_order_relaxed);
			fb->fb_data = db->db_data + in_off;
			fb->fb_release = zpl_release_dbuf;
			fb->fb_release_arg = db;
			goto done;
		}
	}
	/* Cached images, dirty buffers and zeros as pieces; a copy only past FS_BUF_SEGS_MAX. */
	int rc = zpl_read_pieces(op, oi, off, n, fb);
	if (rc == 0)
		goto done;
	if (rc != 1)
		return rc;
	struct zpl_bsrc s;
	uint8_t *buf = mem_alloc(n);
	if (buf == NULL)
		return -ENOMEM;
	for (uint64_t blk = first; blk <= last; blk++) {
		uint64_t boff = blk * bsize;
		uint64_t from = SH_MAX(off, boff), to = SH_MIN(off + n, boff + bsize);
		if ((rc = zpl_bsrc_get(op, oi, blk, true, &s)) != 0) {
			mem_free(buf);
			return rc;
		}
		zpl_bsrc_copy(&s, (uint32_t)(from - boff), (uint32_t)(to - from),
		              buf + (from - off));
		zpl_bsrc_release(z, &s);
	}
	fb->fb_data = buf;
	fb->fb_release = zpl_release_copy;
	fb->fb_release_arg = buf;
done:
	fb->fb_len = n;
	req->u.read.rd_eof = off + n >= ino->ino_size;
	return 0;
}

int zpl_data_read_range(struct zpl_op *op, const struct zpl_oino *oi, uint64_t off, uint32_t len,
                        uint8_t *out)
{
	struct zpl *z = op->op_z;
	uint32_t bsize = oi->oi_ino.ino_blksz;
	if (len == 0)
		return 0;
	if (bsize == 0)
		return -EIO; /* a regular file with data always has a block size */
	uint64_t end = off + len;
	for (uint64_t blk = off / bsize; blk <= (end - 1) / bsize; blk++) {
		uint64_t boff = blk * bsize;
		uint64_t from = SH_MAX(off, boff), to = SH_MIN(end, boff + bsize);
		struct zpl_bsrc s;
		int rc = zpl_bsrc_get(op, oi, blk, true, &s);
		if (rc != 0)
			return rc;
		zpl_bsrc_copy(&s, (uint32_t)(from - boff), (uint32_t)(to - from),
		              out + (from - off));
		zpl_bsrc_release(z, &s);
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Long symlinks */

int zpl_data_read_link(struct zpl_op *op, struct zpl_oino *oi, char *out)
{
	struct zpl_bsrc s;
	uint32_t len = oi->oi_ino.ino_link_len;
	int rc = zpl_bsrc_get(op, oi, 0, true, &s);
	if (rc != 0)
		return rc;
	if (s.bs_len < len) {
		zpl_bsrc_release(op->op_z, &s);
		return -EIO; /* no block, or one too short for the target */
	}
	memcpy(out, s.bs_data, len);
	zpl_bsrc_release(op->op_z, &s);
	return 0;
}

int zpl_data_new_link(struct zpl_op *op, struct zpl_oino *oi, const char *target, uint32_t len)
{
	struct zpl_inode *ino = &oi->oi_ino;
	ino->ino_blksz = (len + ZPL_PAGE_BYTES - 1) / ZPL_PAGE_BYTES * ZPL_PAGE_BYTES;
	return zpl_plan_block(op, oi, 0, 0, (const uint8_t *)target, len, true, len, false);
}

/* ---------------------------------------------------------------------------------------------
 * zpl_sync */

static int zpl_dbuf_cmp(const void *a, const void *b)
{
	const struct zpl_dbuf *x = *(const struct zpl_dbuf *const *)a,
	                      *y = *(const struct zpl_dbuf *const *)b;
	if (x->db_obj != y->db_obj)
		return x->db_obj < y->db_obj ? -1 : 1;
	if (x->db_blk != y->db_blk)
		return x->db_blk < y->db_blk ? -1 : 1;
	return 0;
}

int zpl_sync(struct zpl *z, uint64_t *written_blocks_out)
{
	struct zpl_dtab *dt = &z->z_dtab;
	uint64_t written = 0;
	int rc = 0;
	if (written_blocks_out != NULL)
		*written_blocks_out = 0;
	if (z->z_failed != 0)
		return -EIO;
	if (dt->dt_count == 0)
		return 0;
	/* In key order, so the puts walk the tree left to right. */
	struct zpl_dbuf **v = mem_alloc(sizeof(*v) * dt->dt_count);
	if (v == NULL)
		return -ENOMEM;
	uint64_t n = 0;
	for (uint32_t i = 0; i < dt->dt_nbuckets; i++)
		for (struct zpl_dbuf *db = dt->dt_buckets[i]; db != NULL; db = db->db_hnext)
			v[n++] = db;
	qsort(v, n, sizeof(*v), zpl_dbuf_cmp);
	for (uint64_t i = 0; i < n; i++) {
		struct zpl_dbuf *db = v[i];
		uint8_t key[ZPL_LONG_KEY], old[BLK_PTR_DISK_BYTES], enc[BLK_PTR_DISK_BYTES];
		uint32_t vlen = 0;
		struct blk_ptr bp, old_bp, missing;
		zpl_key_long(key, db->db_obj, ZPL_KIND_EXTENT, db->db_blk);
		/* The extent's path is dirty since the buffer was made, so this lookup and the put
		 * below cannot miss (zpl.c). */
		rc = btree_lookup(z->z_tree, key, sizeof(key), old, sizeof(old), &vlen, &missing);
		if (rc != 0 || vlen != BLK_PTR_DISK_BYTES || blk_ptr_decode(old, &old_bp) != 0) {
			log_error("zpl: sync found no extent for the dirty block %llu of object "
			          "%llu (%s)",
			          (unsigned long long)db->db_blk, (unsigned long long)db->db_obj,
			          sh_strerror(rc));
			zpl_fail(z, -EIO, "sync");
			rc = -EIO;
			break;
		}
		bool adopted = db->db_adoptable && z->z_env.ze_adopt_block != NULL &&
		               z->z_env.ze_adopt_block(z->z_env.ze_ctx, &db->db_adopt, db->db_data) == 0;
		void *sealed = db->db_seal;
		uint8_t *taken = NULL; /* db_data, now the env's */
		db->db_seal = NULL;
		if (adopted) {
			bp = db->db_adopt;
			if (sealed != NULL)
				z->z_env.ze_drop_seal(z->z_env.ze_ctx, sealed);
		} else if (sealed != NULL) {
			/* Prepared from db_data, unchanged since (an edit would have dropped it). The
			 * buffer leaves the table below: unless a READ holds it too, the env may keep
			 * it instead of a copy. */
			bool may_take =
			    atomic_load_explicit(&db->db_refs, memory_order_acquire) == 1, took = false;
			if ((rc = z->z_env.ze_write_sealed(z->z_env.ze_ctx, sealed, db->db_data,
			                                   may_take, &took, &bp)) != 0)
				break;
			if (took) {
				taken = db->db_data;
				db->db_data = NULL;
			}
		} else if ((rc = z->z_env.ze_write_block(z->z_env.ze_ctx, db->db_data, db->db_size,
		                                         &bp)) != 0) {
			break;
		}
		blk_ptr_encode(&bp, enc);
		if ((rc = btree_put(z->z_tree, key, sizeof(key), enc, sizeof(enc),
		                    BTREE_PUT_REPLACE, NULL)) != 0) {
			if (taken != NULL) {
				/* the buffer stays dirty: it needs its bytes back (readable until
				 * the block is freed) */
				db->db_data = mem_alloc(db->db_size);
				if (db->db_data != NULL)
					memcpy(db->db_data, taken, db->db_size);
				else
					rc = -EIO; /* its bytes are lost: fail below */
			}
			z->z_env.ze_free_block(z->z_env.ze_ctx, &bp);
			if (rc != -ENOMEM) {
				zpl_fail(z, rc, "sync");
				rc = -EIO;
			}
			break;
		}
		if (!blk_ptr_is_hole(&old_bp))
			z->z_env.ze_free_block(z->z_env.ze_ctx, &old_bp);
		zpl_dtab_remove(dt, db);
		written += !adopted;
	}
	mem_free(v);
	if (written_blocks_out != NULL)
		*written_blocks_out = written;
	return rc;
}

size_t zpl_seal_pick(struct zpl *z, uint64_t *cursor, struct zpl_seal *v, size_t max,
                     uint64_t max_bytes)
{
	struct zpl_dtab *dt = &z->z_dtab;
	if (z->z_failed != 0 || dt->dt_drop_seal == NULL || z->z_env.ze_write_sealed == NULL)
		return 0;
	size_t n = 0;
	uint64_t bytes = 0;
	while (n < max && bytes < max_bytes && *cursor < dt->dt_nbuckets) {
		for (struct zpl_dbuf *db = dt->dt_buckets[*cursor]; db != NULL; db = db->db_hnext) {
			/* Buffers marked for adoption are not written; those handed out already
			 * (or held by a READ) wait for another pass. */
			if (n == max || db->db_seal != NULL || db->db_adoptable ||
			    atomic_load_explicit(&db->db_refs, memory_order_acquire) != 1)
				continue;
			atomic_fetch_add_explicit(&db->db_refs, 1, memory_order_acq_rel);
			v[n++] = (struct zpl_seal){.zs_buf = db, .zs_data = db->db_data,
			                           .zs_size = db->db_size, .zs_sealed = NULL};
			bytes += db->db_size;
		}
		if (n < max) /* the bucket was taken whole */
			(*cursor)++;
	}
	return n;
}

void zpl_seal_attach(struct zpl *z, struct zpl_seal *v, size_t n)
{
	struct zpl_dtab *dt = &z->z_dtab;
	for (size_t i = 0; i < n; i++) {
		struct zpl_dbuf *db = v[i].zs_buf;
		/* Unchanged since the pick (its hold kept edits out of place, zpl_plan_block), and
		 * still the block's dirty buffer: the sealed block holds its bytes. */
		if (v[i].zs_sealed != NULL && z->z_failed == 0 && db->db_seal == NULL &&
		    !db->db_adoptable && zpl_dbuf_find(dt, db->db_obj, db->db_blk) == db) {
			db->db_seal = v[i].zs_sealed;
			v[i].zs_sealed = NULL;
		}
		zpl_dbuf_rele(db);
		v[i].zs_buf = NULL;
	}
}

void zpl_seal_release(struct zpl_seal *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (v[i].zs_buf != NULL)
			zpl_dbuf_rele(v[i].zs_buf);
		v[i].zs_buf = NULL;
	}
}

bool zpl_adopt(struct zpl *z, const struct fs_obj_id *obj, uint64_t off, const void *data,
               const struct blk_ptr *bp)
{
	if (z->z_failed != 0 || obj->foi_len != ZPL_OBJ_ID_BYTES || blk_ptr_is_hole(bp) ||
	    bp->bp_lsize == 0 || off % bp->bp_lsize != 0)
		return false;
	uint64_t objid = zpl_get_le64(obj->foi_bytes);
	struct zpl_dbuf *db = zpl_dbuf_find(&z->z_dtab, objid, off / bp->bp_lsize);
	if (db == NULL || db->db_size != bp->bp_lsize ||
	    memcmp(db->db_data, data, db->db_size) != 0)
		return false;
	db->db_adopt = *bp;
	db->db_adoptable = true;
	return true;
}
