/* pool_ds.c: datasets: their records in the MOS (table in pool.c), creating, listing, opening and
 * closing them, owners, the sync's record updates, and pool properties.
 *
 * A dataset is loaded (a struct pool_ds on p_datasets, its tree open) while it is open, while the
 * pool works on it (replay, destroy, check), and afterwards until everything it changed is
 * written; pool_ds_evict_idle, after each sync, frees the ones nobody needs. Everything here runs
 * under p_lock; the MOS never misses (R9), so none of it waits. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pool/pool_impl.h"

#define POOL_DS_RECORD_V1_BYTES 128u /* before snapshots; read, never written */
#define POOL_DS_RECORD_BYTES 192u
#define POOL_DS_RECORD_VERSION 2u
#define POOL_DS_PREFIX "ds/"
#define POOL_PROP_PREFIX "prop/"

static void pool_ds_key(const char *name, char *key, uint32_t *klen)
{
	int n = snprintf(key, POOL_MOS_KEY_MAX, POOL_DS_PREFIX "%s", name);
	*klen = (uint32_t)n;
}

int pool_ds_record_encode(const struct pool_ds *ds, uint8_t *out, uint32_t cap)
{
	if (cap < POOL_DS_RECORD_BYTES)
		return -EINVAL;
	memset(out, 0, POOL_DS_RECORD_BYTES);
	pool_put_le32(out + 0, POOL_DS_RECORD_VERSION);
	pool_put_le32(out + 4, ds->ds_record_bytes);
	pool_put_le64(out + 8, ds->ds_id);
	pool_put_le64(out + 16, ds->ds_created_txg);
	pool_put_le64(out + 24, ds->ds_used_bytes < 0 ? 0 : (uint64_t)ds->ds_used_bytes);
	out[32] = (uint8_t)ds->ds_compress;
	pool_put_le64(out + 40, ds->ds_quota_bytes);
	blk_ptr_encode(&ds->ds_root, out + 64);
	pool_put_le64(out + 128, ds->ds_prev_snap_txg);
	pool_put_le64(out + 136, ds->ds_prev_snap_id);
	pool_put_le64(out + 144, ds->ds_dl_id);
	pool_put_le64(out + 152, ds->ds_origin_head_id);
	pool_put_le64(out + 160, ds->ds_origin_txg);
	pool_put_le64(out + 168, ds->ds_flags);
	return (int)POOL_DS_RECORD_BYTES;
}

static bool pool_ds_record_known(const uint8_t *in, uint32_t len)
{
	return (len == POOL_DS_RECORD_V1_BYTES && pool_get_le32(in) == 1) ||
	       (len == POOL_DS_RECORD_BYTES && pool_get_le32(in) == POOL_DS_RECORD_VERSION);
}

bool pool_ds_record_origin(const uint8_t *rec, uint32_t len, uint64_t *head_id, uint64_t *txg)
{
	if (!pool_ds_record_known(rec, len) || len < POOL_DS_RECORD_BYTES)
		return false;
	*head_id = pool_get_le64(rec + 152);
	*txg = pool_get_le64(rec + 160);
	return *head_id != 0;
}

int pool_ds_record_decode(struct pool_ds *ds, const uint8_t *in, uint32_t len)
{
	if (!pool_ds_record_known(in, len))
		return -EIO;
	if (len == POOL_DS_RECORD_BYTES) {
		ds->ds_prev_snap_txg = pool_get_le64(in + 128);
		ds->ds_prev_snap_id = pool_get_le64(in + 136);
		ds->ds_dl_id = pool_get_le64(in + 144);
		ds->ds_origin_head_id = pool_get_le64(in + 152);
		ds->ds_origin_txg = pool_get_le64(in + 160);
		ds->ds_flags = pool_get_le64(in + 168);
		if ((ds->ds_origin_head_id == 0) != (ds->ds_origin_txg == 0) ||
		    ds->ds_prev_snap_txg < ds->ds_origin_txg)
			return -EIO;
	}
	ds->ds_record_bytes = pool_get_le32(in + 4);
	ds->ds_id = pool_get_le64(in + 8);
	ds->ds_created_txg = pool_get_le64(in + 16);
	ds->ds_used_bytes = (int64_t)SH_MIN(pool_get_le64(in + 24), (uint64_t)INT64_MAX);
	ds->ds_compress = (enum blk_compress)in[32];
	ds->ds_quota_bytes = pool_get_le64(in + 40);
	if (ds->ds_id == 0 || in[32] > BLK_COMPRESS_ZSTD || ds->ds_record_bytes < 4096 ||
	    ds->ds_record_bytes > BLK_MAX_BLOCK_BYTES ||
	    (ds->ds_record_bytes & (ds->ds_record_bytes - 1)) != 0)
		return -EIO;
	if (blk_ptr_decode(in + 64, &ds->ds_root) != 0)
		return -EIO;
	if (!blk_ptr_is_hole(&ds->ds_root) && !pool_bp_valid(ds->ds_pool, &ds->ds_root))
		return -EIO;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Loading */

static struct pool_ds *pool_ds_find_loaded(struct pool *p, const char *name)
{
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (!ds->ds_queued && !ds->ds_snapshot && strcmp(ds->ds_name, name) == 0)
			return ds;
	}
	return NULL;
}

void pool_ds_unload_locked(struct pool *p, struct pool_ds *ds)
{
	for (struct pool_ds **link = &p->p_datasets; *link; link = &(*link)->ds_next) {
		if (*link == ds) {
			*link = ds->ds_next;
			break;
		}
	}
	if (ds->ds_ops && ds->ds_ops->do_detach)
		ds->ds_ops->do_detach(ds->ds_owner);
	btree_close(ds->ds_tree);
	pool_snap_ds_fini(ds);
	mem_free(ds);
}

int pool_ds_load(struct pool *p, const char *name, const uint8_t *rec, uint32_t len,
                 struct pool_ds **out)
{
	struct pool_ds *ds = mem_zalloc(sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->ds_pool = p;
	snprintf(ds->ds_name, sizeof(ds->ds_name), "%s", name);
	int rc = pool_ds_record_decode(ds, rec, len);
	if (rc != 0) {
		log_error("pool %s: the record of dataset %s is damaged", p->p_name, name);
		mem_free(ds);
		return rc;
	}
	struct btree_config cfg;
	pool_ds_config(ds, &cfg);
	rc = btree_open(&cfg, &ds->ds_root, &ds->ds_tree);
	if (rc != 0) {
		log_error("pool %s: dataset %s: its tree's root is damaged", p->p_name, name);
		mem_free(ds);
		return rc == -ENOMEM ? rc : -EIO;
	}
	rc = pool_snap_load_line(p, ds);
	if (rc != 0) {
		log_error("pool %s: dataset %s: its snapshots cannot be listed: %s", p->p_name, name,
		          sh_strerror(rc));
		btree_close(ds->ds_tree);
		pool_snap_ds_fini(ds);
		mem_free(ds);
		return rc;
	}
	ds->ds_next = p->p_datasets;
	p->p_datasets = ds;
	*out = ds;
	return 0;
}

/* Under p_lock: the loaded dataset name, loading it if need be; a reference is taken. */
static int pool_ds_hold_by_name(struct pool *p, const char *name, struct pool_ds **out)
{
	struct pool_ds *ds = pool_ds_find_loaded(p, name);
	if (!ds) {
		char key[POOL_MOS_KEY_MAX];
		uint32_t klen, vlen;
		uint8_t rec[POOL_MOS_VAL_MAX];
		pool_ds_key(name, key, &klen);
		int rc = btree_lookup(p->p_mos, key, klen, rec, sizeof(rec), &vlen, NULL);
		if (rc == -EOVERFLOW)
			rc = -EIO;
		if (rc != 0)
			return rc;
		rc = pool_ds_load(p, name, rec, vlen, &ds);
		if (rc != 0)
			return rc;
	}
	ds->ds_refs++;
	*out = ds;
	return 0;
}

struct pool_ds_find_id {
	uint64_t fi_id;
	char fi_name[POOL_DS_NAME_MAX + 1];
	bool fi_found;
};

static bool pool_ds_find_id_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                  uint32_t vlen)
{
	struct pool_ds_find_id *fi = arg;
	size_t pl = strlen(POOL_DS_PREFIX);
	if (klen < pl || memcmp(key, POOL_DS_PREFIX, pl) != 0)
		return false;
	if (pool_ds_record_known(val, vlen) && pool_get_le64((const uint8_t *)val + 8) == fi->fi_id &&
	    klen - pl <= POOL_DS_NAME_MAX) {
		memcpy(fi->fi_name, (const char *)key + pl, klen - pl);
		fi->fi_name[klen - pl] = '\0';
		fi->fi_found = true;
		return false;
	}
	return true;
}

int pool_ds_hold_by_id(struct pool *p, uint64_t id, struct pool_ds **ds_out)
{
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (ds->ds_id == id) {
			if (ds->ds_destroying)
				return -ENOENT;
			ds->ds_refs++;
			*ds_out = ds;
			return 0;
		}
	}
	struct pool_ds_find_id fi = {.fi_id = id};
	int rc = btree_scan(p->p_mos, POOL_DS_PREFIX, (uint32_t)strlen(POOL_DS_PREFIX), false,
	                    pool_ds_find_id_visit, &fi, NULL);
	if (rc != 0)
		return rc == -SH_ENEEDBLOCK ? -EIO : rc;
	if (!fi.fi_found)
		return -ENOENT;
	return pool_ds_hold_by_name(p, fi.fi_name, ds_out);
}

void pool_ds_rele_locked(struct pool_ds *ds)
{
	VERIFY(ds->ds_refs > 0);
	ds->ds_refs--;
}

int pool_ds_attach_owner(struct pool *p, struct pool_ds *ds)
{
	pool_lock(p);
	bool have = ds->ds_ops != NULL;
	pool_unlock(p);
	if (have)
		return 0;
	if (!p->p_opts.po_attach)
		return -ENOTSUP;
	int rc = p->p_opts.po_attach(p->p_opts.po_attach_arg, ds);
	if (rc != 0)
		return rc;
	pool_lock(p);
	have = ds->ds_ops != NULL;
	pool_unlock(p);
	return have ? 0 : -ENOTSUP;
}

/* ---------------------------------------------------------------------------------------------
 * The owner's interface */

int pool_ds_open(struct pool *p, const char *name, struct pool_ds **ds_out)
{
	*ds_out = NULL;
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (name && strchr(name, '@')) {
		/* a snapshot, read only (pool_snap.c) */
		pool_lock(p);
		int rc = pool_snap_ds_hold(p, name, ds_out);
		pool_unlock(p);
		return rc;
	}
	if (!pool_name_valid(name, POOL_DS_NAME_MAX))
		return -EINVAL;
	pool_lock(p);
	struct pool_ds *ds = pool_ds_find_loaded(p, name);
	int rc;
	if (ds && ds->ds_destroying) {
		rc = -EBUSY;
	} else {
		rc = pool_ds_hold_by_name(p, name, &ds);
		if (rc == 0)
			*ds_out = ds;
	}
	pool_unlock(p);
	return rc;
}

void pool_ds_close(struct pool_ds *ds)
{
	if (!ds)
		return;
	struct pool *p = ds->ds_pool;
	pool_lock(p);
	pool_ds_rele_locked(ds);
	pool_unlock(p);
}

struct btree *pool_ds_tree(struct pool_ds *ds)
{
	return ds->ds_tree;
}

struct pool *pool_ds_pool(const struct pool_ds *ds)
{
	return ds->ds_pool;
}

uint64_t pool_ds_id(const struct pool_ds *ds)
{
	return ds->ds_id;
}

const char *pool_ds_name(const struct pool_ds *ds)
{
	return ds->ds_name;
}

int pool_ds_set_compress(struct pool *p, const char *name, enum pool_compress c)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (c != POOL_COMPRESS_OFF && c != POOL_COMPRESS_LZ4 && c != POOL_COMPRESS_ZSTD)
		return -EINVAL;
	struct pool_ds *ds = NULL;
	int rc = pool_ds_open(p, name, &ds);
	if (rc == 0) {
		pool_lock(p);
		/* Read without the lock by writers of blocks (pool_ds_compress), as the served
		 * pool may change it at any time. */
		__atomic_store_n(&ds->ds_compress, pool_compress_resolve(p, c), __ATOMIC_RELAXED);
		ds->ds_record_dirty = true; /* the next txg writes the record */
		pool_ds_rele_locked(ds);
		pool_unlock(p);
		rc = pool_txg_wait_synced(p, 0);
	}
	return rc;
}

int pool_ds_set_snapdir(struct pool *p, const char *name, bool visible)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (strchr(name, '@'))
		return -EINVAL; /* a property of a file system, not of its snapshots */
	struct pool_ds *ds = NULL;
	int rc = pool_ds_open(p, name, &ds);
	if (rc == 0) {
		pool_lock(p);
		/* Read without the lock by the file system's requests (pool_ds_snapdir_visible). */
		uint64_t flags = ds->ds_flags & ~(uint64_t)POOL_DS_F_SNAPDIR_VISIBLE;
		if (visible)
			flags |= POOL_DS_F_SNAPDIR_VISIBLE;
		__atomic_store_n(&ds->ds_flags, flags, __ATOMIC_RELAXED);
		ds->ds_record_dirty = true; /* the next txg writes the record */
		pool_ds_rele_locked(ds);
		pool_unlock(p);
		rc = pool_txg_wait_synced(p, 0);
	}
	return rc;
}

bool pool_ds_snapdir_visible(const struct pool_ds *ds)
{
	return (__atomic_load_n(&ds->ds_flags, __ATOMIC_RELAXED) & POOL_DS_F_SNAPDIR_VISIBLE) != 0;
}

/* What counts against a dataset's quota: its allocated bytes as of the last txg plus its owner's
 * dirty data, which the next txg writes. Under p_lock. */
static uint64_t pool_ds_charged_locked(const struct pool_ds *ds)
{
	uint64_t used = ds->ds_used_bytes < 0 ? 0 : (uint64_t)ds->ds_used_bytes;
	if (ds->ds_ops && ds->ds_ops->do_dirty_bytes)
		used += ds->ds_ops->do_dirty_bytes(ds->ds_owner);
	return used;
}

int pool_ds_set_quota(struct pool *p, const char *name, uint64_t bytes)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	struct pool_ds *ds = NULL;
	int rc = pool_ds_open(p, name, &ds);
	if (rc == 0) {
		pool_lock(p);
		/* As zfs set quota: not below what the dataset holds now. */
		if (bytes != 0 && bytes < pool_ds_charged_locked(ds)) {
			rc = -ENOSPC;
		} else {
			ds->ds_quota_bytes = bytes;
			ds->ds_record_dirty = true; /* the next txg writes the record */
		}
		pool_ds_rele_locked(ds);
		pool_unlock(p);
		if (rc == 0)
			rc = pool_txg_wait_synced(p, 0);
	}
	return rc;
}


bool pool_ds_quota_would_fit(const struct pool_ds *ds, uint64_t bytes)
{
	if (ds->ds_quota_bytes == 0)
		return true;
	uint64_t used = pool_ds_charged_locked(ds);
	return used <= ds->ds_quota_bytes && bytes <= ds->ds_quota_bytes - used;
}

void pool_ds_quota_space(const struct pool_ds *ds, uint64_t *total, uint64_t *free_bytes,
                         uint64_t *avail)
{
	if (ds->ds_quota_bytes == 0)
		return;
	uint64_t used = pool_ds_charged_locked(ds);
	uint64_t left = used < ds->ds_quota_bytes ? ds->ds_quota_bytes - used : 0;
	*total = SH_MIN(*total, ds->ds_quota_bytes);
	*free_bytes = SH_MIN(*free_bytes, left);
	*avail = SH_MIN(*avail, left);
}

uint32_t pool_ds_record_bytes(const struct pool_ds *ds)
{
	return ds->ds_record_bytes;
}

enum blk_compress pool_ds_compress(const struct pool_ds *ds)
{
	return __atomic_load_n(&ds->ds_compress, __ATOMIC_RELAXED);
}

int pool_ds_set_owner(struct pool_ds *ds, const struct pool_ds_owner *ops, void *owner)
{
	if (!ops)
		return -EINVAL;
	struct pool *p = ds->ds_pool;
	pool_lock(p);
	int rc = 0;
	if (ds->ds_ops) {
		rc = -EBUSY;
	} else {
		ds->ds_ops = ops;
		ds->ds_owner = owner;
	}
	pool_unlock(p);
	return rc;
}

void *pool_ds_owner(struct pool_ds *ds)
{
	struct pool *p = ds->ds_pool;
	pool_lock(p);
	void *o = ds->ds_ops ? ds->ds_owner : NULL;
	pool_unlock(p);
	return o;
}

/* ---------------------------------------------------------------------------------------------
 * Sync and lifetime */

int pool_ds_sync_records(struct pool *p)
{
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (!ds->ds_record_dirty || (ds->ds_destroying && !ds->ds_queued))
			continue;
		char key[POOL_MOS_KEY_MAX];
		uint32_t klen;
		uint8_t rec[POOL_DS_RECORD_BYTES];
		if (ds->ds_queued)
			pool_destroy_key(ds->ds_id, key, &klen);
		else
			pool_ds_key(ds->ds_name, key, &klen);
		(void)pool_ds_record_encode(ds, rec, sizeof(rec));
		int rc = btree_put(p->p_mos, key, klen, rec, sizeof(rec), BTREE_PUT_REPLACE, NULL);
		if (rc != 0) {
			log_warn("pool %s: updating the record of dataset %s: %s", p->p_name,
			         ds->ds_name, sh_strerror(rc));
			return rc;
		}
		ds->ds_record_dirty = false;
	}
	return 0;
}

void pool_ds_evict_idle(struct pool *p)
{
	struct pool_ds *ds = p->p_datasets;
	while (ds) {
		struct pool_ds *next = ds->ds_next;
		if (ds->ds_refs == 0 && !ds->ds_destroying && !ds->ds_record_dirty &&
		    !btree_is_dirty(ds->ds_tree) && ds->ds_nkills == 0 &&
		    !(ds->ds_ops && ds->ds_ops->do_dirty_bytes &&
		      ds->ds_ops->do_dirty_bytes(ds->ds_owner) > 0))
			pool_ds_unload_locked(p, ds);
		ds = next;
	}
}

void pool_ds_free_all(struct pool *p)
{
	while (p->p_datasets) {
		if (p->p_datasets->ds_refs > (p->p_datasets->ds_queued ? 1u : 0u))
			log_warn("pool %s: dataset %s is still open at close", p->p_name,
			         p->p_datasets->ds_name);
		pool_ds_unload_locked(p, p->p_datasets);
	}
}

/* ---------------------------------------------------------------------------------------------
 * Creating and listing */

int pool_ds_create(struct pool *p, const char *name, const struct pool_ds_props *props)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (!pool_name_valid(name, POOL_DS_NAME_MAX))
		return -EINVAL;
	struct pool_ds_props pr = props ? *props : (struct pool_ds_props){0};
	if (pr.dp_record_bytes == 0)
		pr.dp_record_bytes = p->p_opts.po_record_bytes;
	if (pr.dp_compress > POOL_COMPRESS_ZSTD ||
	    (pr.dp_record_bytes & (pr.dp_record_bytes - 1)) != 0 || pr.dp_record_bytes < 4096 ||
	    pr.dp_record_bytes > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	struct pool_ds tmp = {.ds_pool = p};
	tmp.ds_record_bytes = pr.dp_record_bytes;
	tmp.ds_compress = pool_compress_resolve(p, pr.dp_compress);
	if (pr.dp_receiving)
		tmp.ds_flags = POOL_DS_F_RECEIVING; /* made by a receive: undone unless it ends */
	char key[POOL_MOS_KEY_MAX];
	uint32_t klen;
	uint8_t rec[POOL_DS_RECORD_BYTES];
	pool_ds_key(name, key, &klen);
	pool_lock(p);
	int rc = 0;
	if (pool_is_suspended(p)) {
		rc = -EIO;
	} else if (!pool_space_would_fit(p, 0)) {
		rc = -ENOSPC;
	} else {
		tmp.ds_id = p->p_next_ds_id;
		tmp.ds_created_txg = p->p_open_txg;
		(void)pool_ds_record_encode(&tmp, rec, sizeof(rec));
		rc = btree_put(p->p_mos, key, klen, rec, sizeof(rec), BTREE_PUT_NEW, NULL);
		if (rc == 0)
			p->p_next_ds_id++;
	}
	pool_unlock(p);
	if (rc == 0)
		rc = pool_txg_wait_synced(p, 0);
	return rc;
}

int pool_ds_rename(struct pool *p, const char *from, const char *to)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (!pool_name_valid(from, POOL_DS_NAME_MAX) || !pool_name_valid(to, POOL_DS_NAME_MAX))
		return -EINVAL;
	if (strcmp(from, to) == 0)
		return 0;
	char fkey[POOL_MOS_KEY_MAX], tkey[POOL_MOS_KEY_MAX];
	uint32_t flen, tlen, vlen = 0;
	uint8_t rec[POOL_DS_RECORD_BYTES];
	pool_ds_key(from, fkey, &flen);
	pool_ds_key(to, tkey, &tlen);
	pool_lock(p);
	struct pool_ds *ds = pool_ds_find_loaded(p, from);
	int rc = pool_is_suspended(p) ? -EIO : 0;
	if (rc == 0) {
		/* is `to` taken? (a value that does not fit 0 bytes: it exists) */
		int taken = btree_lookup(p->p_mos, tkey, tlen, NULL, 0, NULL, NULL);
		if (taken == 0 || taken == -EOVERFLOW || pool_ds_find_loaded(p, to))
			rc = -EEXIST;
		else if (taken != -ENOENT)
			rc = taken;
	}
	if (rc == 0 && ds && (ds->ds_refs > 0 || ds->ds_destroying))
		rc = -EBUSY; /* open (served), or being destroyed */
	if (rc == 0 && ds)
		rc = pool_snap_ds_release_idle(p, ds->ds_id, 0); /* its snapshots' names change */
	/* the record under the new key (a loaded dataset's as it is in memory), then the old key
	 * goes: one txg holds both changes (the MOS never misses, R9) */
	if (rc == 0 && ds)
		vlen = (uint32_t)pool_ds_record_encode(ds, rec, sizeof(rec));
	else if (rc == 0)
		rc = btree_lookup(p->p_mos, fkey, flen, rec, sizeof(rec), &vlen, NULL);
	if (rc == 0)
		rc = btree_put(p->p_mos, tkey, tlen, rec, vlen, BTREE_PUT_NEW, NULL);
	if (rc == 0) {
		rc = btree_delete(p->p_mos, fkey, flen, NULL);
		if (rc != 0)
			(void)!btree_delete(p->p_mos, tkey, tlen, NULL);
	}
	if (rc == 0 && ds)
		snprintf(ds->ds_name, sizeof(ds->ds_name), "%s", to);
	pool_unlock(p);
	if (rc == -SH_ENEEDBLOCK)
		rc = -EIO;
	return rc == 0 ? pool_txg_wait_synced(p, 0) : rc;
}

/* What the snapshots' space needs of each record listed. */
struct pool_ds_list_line {
	uint64_t ll_dl_id, ll_origin_txg;
};

struct pool_ds_list_ctx {
	struct pool *lc_pool;
	struct pool_ds_info *lc_infos;
	struct pool_ds_list_line *lc_lines; /* lc_cap, beside lc_infos */
	size_t lc_n, lc_cap;
	int lc_err;
};

static bool pool_ds_list_visit(void *arg, const void *key, uint32_t klen, const void *val,
                               uint32_t vlen)
{
	struct pool_ds_list_ctx *lc = arg;
	size_t pl = strlen(POOL_DS_PREFIX);
	if (klen < pl || memcmp(key, POOL_DS_PREFIX, pl) != 0)
		return false;
	if (klen - pl > POOL_DS_NAME_MAX)
		return true;
	struct pool_ds tmp = {.ds_pool = lc->lc_pool};
	if (pool_ds_record_decode(&tmp, val, vlen) != 0)
		return true; /* reported by pool_check */
	if (lc->lc_n == lc->lc_cap) {
		size_t cap = lc->lc_cap ? lc->lc_cap * 2 : 16;
		struct pool_ds_info *n = mem_realloc(lc->lc_infos, cap * sizeof(*n));
		if (n)
			lc->lc_infos = n;
		struct pool_ds_list_line *nl = mem_realloc(lc->lc_lines, cap * sizeof(*nl));
		if (nl)
			lc->lc_lines = nl;
		if (!n || !nl) {
			lc->lc_err = -ENOMEM;
			return false;
		}
		lc->lc_cap = cap;
	}
	lc->lc_lines[lc->lc_n] = (struct pool_ds_list_line){tmp.ds_dl_id, tmp.ds_origin_txg};
	struct pool_ds_info *di = &lc->lc_infos[lc->lc_n++];
	memset(di, 0, sizeof(*di));
	memcpy(di->di_name, (const char *)key + pl, klen - pl);
	di->di_id = tmp.ds_id;
	di->di_created_txg = tmp.ds_created_txg;
	di->di_refer_bytes = (uint64_t)tmp.ds_used_bytes;
	di->di_entries = tmp.ds_root.bp_fill;
	di->di_record_bytes = tmp.ds_record_bytes;
	di->di_compress = tmp.ds_compress;
	di->di_quota_bytes = tmp.ds_quota_bytes;
	di->di_receiving = (tmp.ds_flags & POOL_DS_F_RECEIVING) != 0;
	return true;
}

struct pool_ds_print_ctx {
	struct pool *pc_p;
	enum pool_list_types pc_types;
	const char *pc_pool;
	FILE *pc_out;
	uint64_t pc_pool_avail; /* what the pool has left for any dataset */
};

static int pool_ds_list_print_snap(void *arg, const struct pool_snap_info *si)
{
	const struct pool_ds_print_ctx *pc = arg;
	char name[POOL_SNAP_FULL_MAX + 1];
	snprintf(name, sizeof(name), "%s@%s", si->si_fs, si->si_name);
	if (fprintf(pc->pc_out, "%s/%-30s %14" PRIu64 " %14s %14" PRIu64 " %10s %9s  %-8s %s\n",
		    pc->pc_pool, name, si->si_used_bytes, "-", si->si_refer_bytes, "-", "-", "-",
		    "-") < 0)
		return -EIO;
	return 0;
}

static int pool_ds_list_print_one(void *arg, const struct pool_ds_info *info)
{
	const struct pool_ds_print_ctx *pc = arg;
	static const char *const compress_names[] = {"off", "lz4", "zstd"};
	const char *c = (unsigned)info->di_compress < SH_ARRAY_SIZE(compress_names)
				? compress_names[info->di_compress]
				: "?";
	char quota[24] = "none";
	/* as zfs list's AVAIL: the pool's available space, within the quota where there is one
	 * (a quota limits what the file system references, as zfs's refquota) */
	uint64_t avail = pc->pc_pool_avail;
	if (info->di_quota_bytes) {
		snprintf(quota, sizeof(quota), "%" PRIu64, info->di_quota_bytes);
		uint64_t room = info->di_quota_bytes > info->di_refer_bytes
					? info->di_quota_bytes - info->di_refer_bytes
					: 0;
		avail = SH_MIN(avail, room);
	}
	if ((pc->pc_types & POOL_LIST_FILESYSTEMS) &&
	    fprintf(pc->pc_out, "%s/%-30s %14" PRIu64 " %14" PRIu64 " %14" PRIu64 " %10" PRIu64
		    " %9" PRIu32 "  %-8s %s\n",
		    pc->pc_pool, info->di_name, info->di_used_bytes, avail, info->di_refer_bytes,
		    info->di_entries, info->di_record_bytes, c, quota) < 0)
		return -EIO;
	/* its snapshots below it, as zfs list -t all */
	if ((pc->pc_types & POOL_LIST_SNAPSHOTS) && info->di_snapshots > 0)
		return pool_snapshot_list(pc->pc_p, info->di_name, pool_ds_list_print_snap,
		                          (void *)pc);
	return 0;
}

int pool_list_types_from_name(const char *name)
{
	if (strcmp(name, "filesystem") == 0 || strcmp(name, "fs") == 0)
		return POOL_LIST_FILESYSTEMS;
	if (strcmp(name, "snapshot") == 0 || strcmp(name, "snap") == 0)
		return POOL_LIST_SNAPSHOTS;
	if (strcmp(name, "all") == 0)
		return POOL_LIST_ALL;
	return -1;
}

int pool_ds_list_print_types(struct pool *p, enum pool_list_types types, FILE *out)
{
	if (fprintf(out, "%-36s %14s %14s %14s %10s %9s  %-8s %s\n", "NAME", "USED(bytes)",
		    "AVAIL(bytes)", "REFER(bytes)", "ENTRIES", "RECORD", "COMPRESS",
		    "QUOTA(bytes)") < 0)
		return -EIO;
	struct pool_ds_print_ctx pc = {.pc_pool = p->p_name, .pc_out = out};
	pool_space(p, NULL, NULL, &pc.pc_pool_avail);
	pc.pc_p = p;
	pc.pc_types = types;
	return pool_ds_list(p, pool_ds_list_print_one, &pc);
}

int pool_ds_list_print(struct pool *p, FILE *out)
{
	return pool_ds_list_print_types(p, POOL_LIST_FILESYSTEMS, out);
}

int pool_ds_list(struct pool *p, int (*fn)(void *arg, const struct pool_ds_info *info), void *arg)
{
	struct pool_ds_list_ctx lc = {.lc_pool = p};
	pool_lock(p);
	int rc = btree_scan(p->p_mos, POOL_DS_PREFIX, (uint32_t)strlen(POOL_DS_PREFIX), false,
	                    pool_ds_list_visit, &lc, NULL);
	if (rc == 0)
		rc = lc.lc_err;
	/* loaded datasets know their current used bytes; snapshots add theirs */
	for (size_t i = 0; rc == 0 && i < lc.lc_n; i++) {
		struct pool_ds_info *di = &lc.lc_infos[i];
		struct pool_ds *ds = pool_ds_find_loaded(p, di->di_name);
		uint64_t dl_id = lc.lc_lines[i].ll_dl_id, origin_txg = lc.lc_lines[i].ll_origin_txg;
		if (ds) {
			di->di_refer_bytes = ds->ds_used_bytes < 0 ? 0 : (uint64_t)ds->ds_used_bytes;
			dl_id = ds->ds_dl_id;
		}
		rc = pool_snap_space(p, ds, di->di_id, dl_id, origin_txg, &di->di_snap_bytes);
		di->di_snapshots = pool_snap_count(p, di->di_id);
		di->di_used_bytes = di->di_refer_bytes + di->di_snap_bytes;
	}
	pool_unlock(p);
	for (size_t i = 0; rc == 0 && i < lc.lc_n; i++)
		rc = fn(arg, &lc.lc_infos[i]);
	mem_free(lc.lc_infos);
	mem_free(lc.lc_lines);
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

/* ---------------------------------------------------------------------------------------------
 * Properties */

static bool pool_prop_name_valid(const char *name)
{
	size_t n = 0;
	for (; name && name[n]; n++) {
		char c = name[n];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-') ||
		    n >= 64)
			return false;
	}
	return n >= 1;
}

int pool_prop_set(struct pool *p, const char *name, const char *value)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (!pool_prop_name_valid(name) ||
	    (value && (strlen(value) == 0 || strlen(value) > POOL_PROP_VALUE_MAX)))
		return -EINVAL;
	char key[POOL_MOS_KEY_MAX];
	int klen = snprintf(key, sizeof(key), POOL_PROP_PREFIX "%s", name);
	pool_lock(p);
	int rc;
	if (pool_is_suspended(p))
		rc = -EIO;
	else if (value)
		rc = btree_put(p->p_mos, key, (uint32_t)klen, value, (uint32_t)strlen(value),
		               BTREE_PUT_UPSERT, NULL);
	else
		rc = btree_delete(p->p_mos, key, (uint32_t)klen, NULL);
	pool_unlock(p);
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

int pool_prop_get(struct pool *p, const char *name, char *buf, size_t cap)
{
	if (!pool_prop_name_valid(name) || cap == 0)
		return -EINVAL;
	char key[POOL_MOS_KEY_MAX];
	int klen = snprintf(key, sizeof(key), POOL_PROP_PREFIX "%s", name);
	uint32_t vlen;
	pool_lock(p);
	int rc = btree_lookup(p->p_mos, key, (uint32_t)klen, buf,
	                      (uint32_t)SH_MIN(cap - 1, UINT32_MAX), &vlen, NULL);
	pool_unlock(p);
	if (rc == 0)
		buf[vlen] = '\0';
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}
