/* pool_kv.h: a key-value dataset owner for the pool's tests (test_pool.c, test_pool_crash.c).
 * Header-only, like tap.h: each test program includes it once.
 *
 * Keys (1..KV_KEY_MAX bytes) map to values (0..KV_VAL_MAX bytes) in the dataset's tree. A value of
 * at most KV_INLINE_MAX bytes lives in the tree entry itself; a longer one is kept in memory
 * (dirty) until the txg's sync, where do_sync writes it as a data block (pool_sync_write) and puts
 * its pointer in the entry. The entry of a dirty long value is a placeholder put when the value was
 * set, so the path to it is dirty and the sync's put never misses. Entry values:
 *   [0] kind: 0 inline, then the bytes
 *             1 block, then the 64-byte block pointer and the u32 length
 *             2 pending (dirty in memory), then the u32 length
 * Every put and delete can be logged (pool_log_append) and replays through do_replay; log records:
 *   PUT: u8 klen, u32 vlen, key, value       DEL: u8 klen, key
 * Operations run under the pool lock and return -SH_ENEEDBLOCK with the missing block like the
 * tree; kv_exec is the blocking driver that loads blocks with pool_block_load and retries. */
#ifndef SHALE_TEST_POOL_KV_H
#define SHALE_TEST_POOL_KV_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "pool/pool_impl.h"

#define KV_KEY_MAX 64u
#define KV_VAL_MAX (64u * 1024u)
#define KV_INLINE_MAX 512u
#define KV_REC_PUT 1
#define KV_REC_DEL 2
#define KV_KIND_INLINE 0
#define KV_KIND_BLOCK 1
#define KV_KIND_PENDING 2
#define KV_BUCKETS 256u

struct kv_dirty {
	struct kv_dirty *kd_next;
	uint32_t kd_klen;
	uint32_t kd_vlen;
	uint8_t kd_key[KV_KEY_MAX];
	uint8_t *kd_val;
};

/* Records replayed by every kv owner of the process (the owners themselves come and go). */
static _Atomic uint64_t kv_replayed_total;

struct kv {
	struct pool *kv_pool;
	struct pool_ds *kv_ds;
	struct kv_dirty *kv_dirty[KV_BUCKETS];
	uint64_t kv_dirty_bytes;
	uint64_t kv_data_blocks_written;
	uint64_t kv_replayed;
	bool kv_check_space; /* refuse puts that pool_space_would_fit refuses */
};

static inline unsigned kv_bucket(const void *key, uint32_t klen)
{
	return (unsigned)(sh_hash64(key, klen, 7) % KV_BUCKETS);
}

static inline struct kv_dirty **kv_dirty_find(struct kv *kv, const void *key, uint32_t klen)
{
	struct kv_dirty **link = &kv->kv_dirty[kv_bucket(key, klen)];
	for (; *link; link = &(*link)->kd_next) {
		if ((*link)->kd_klen == klen && memcmp((*link)->kd_key, key, klen) == 0)
			return link;
	}
	return link;
}

static inline void kv_dirty_drop(struct kv *kv, struct kv_dirty **link)
{
	struct kv_dirty *d = *link;
	*link = d->kd_next;
	kv->kv_dirty_bytes -= d->kd_vlen;
	mem_free(d->kd_val);
	mem_free(d);
}

static inline void kv_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t kv_rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The block pointer an entry holds, if it holds one. */
static inline int kv_entry_block(const uint8_t *val, uint32_t vlen, struct blk_ptr *bp,
                                 uint32_t *len)
{
	if (vlen == 0)
		return -EIO;
	if (val[0] != KV_KIND_BLOCK)
		return -ENOENT;
	if (vlen != 1 + BLK_PTR_DISK_BYTES + 4 || blk_ptr_decode(val + 1, bp) != 0)
		return -EIO;
	*len = kv_rd32(val + 1 + BLK_PTR_DISK_BYTES);
	return *len == bp->bp_lsize ? 0 : -EIO;
}

/* ---- operations (pool lock held) ---- */

static inline int kv_put(struct kv *kv, const void *key, uint32_t klen, const void *val,
                         uint32_t vlen, struct blk_ptr *missing)
{
	if (klen == 0 || klen > KV_KEY_MAX || vlen > KV_VAL_MAX)
		return -EINVAL;
	if (kv->kv_check_space && !pool_space_would_fit(kv->kv_pool, (uint64_t)klen + vlen + 64))
		return -ENOSPC;
	struct btree *t = pool_ds_tree(kv->kv_ds);
	uint8_t old[1 + BLK_PTR_DISK_BYTES + 4 + KV_INLINE_MAX];
	uint32_t olen = 0;
	int rc = btree_lookup(t, key, klen, old, sizeof(old), &olen, missing);
	if (rc != 0 && rc != -ENOENT)
		return rc;
	bool had = rc == 0;
	uint8_t ent[1 + KV_INLINE_MAX];
	uint32_t elen;
	struct kv_dirty *d = NULL;
	if (vlen <= KV_INLINE_MAX) {
		ent[0] = KV_KIND_INLINE;
		if (vlen)
			memcpy(ent + 1, val, vlen);
		elen = 1 + vlen;
	} else {
		ent[0] = KV_KIND_PENDING;
		kv_le32(ent + 1, vlen);
		elen = 5;
		d = mem_zalloc(sizeof(*d));
		if (!d || !(d->kd_val = mem_alloc(vlen))) {
			mem_free(d);
			return -ENOMEM;
		}
		memcpy(d->kd_key, key, klen);
		d->kd_klen = klen;
		d->kd_vlen = vlen;
		memcpy(d->kd_val, val, vlen);
	}
	rc = btree_put(t, key, klen, ent, elen, BTREE_PUT_UPSERT, missing);
	if (rc != 0) {
		if (d) {
			mem_free(d->kd_val);
			mem_free(d);
		}
		return rc;
	}
	/* applied: the old value's block and dirty copy go */
	struct blk_ptr obp;
	uint32_t oblen;
	if (had && kv_entry_block(old, olen, &obp, &oblen) == 0)
		(void)!pool_ds_free(kv->kv_ds, &obp);
	struct kv_dirty **link = kv_dirty_find(kv, key, klen);
	if (*link)
		kv_dirty_drop(kv, link);
	if (d) {
		d->kd_next = kv->kv_dirty[kv_bucket(key, klen)];
		kv->kv_dirty[kv_bucket(key, klen)] = d;
		kv->kv_dirty_bytes += vlen;
	}
	return 0;
}

static inline int kv_del(struct kv *kv, const void *key, uint32_t klen, struct blk_ptr *missing)
{
	if (klen == 0 || klen > KV_KEY_MAX)
		return -EINVAL;
	struct btree *t = pool_ds_tree(kv->kv_ds);
	uint8_t old[1 + BLK_PTR_DISK_BYTES + 4 + KV_INLINE_MAX];
	uint32_t olen = 0;
	int rc = btree_lookup(t, key, klen, old, sizeof(old), &olen, missing);
	if (rc != 0)
		return rc;
	rc = btree_delete(t, key, klen, missing);
	if (rc != 0)
		return rc;
	struct blk_ptr obp;
	uint32_t oblen;
	if (kv_entry_block(old, olen, &obp, &oblen) == 0)
		(void)!pool_ds_free(kv->kv_ds, &obp);
	struct kv_dirty **link = kv_dirty_find(kv, key, klen);
	if (*link)
		kv_dirty_drop(kv, link);
	return 0;
}

/* Copies the value into buf (cap bytes). 0, -ENOENT, -EOVERFLOW, -SH_ENEEDBLOCK, -EIO. */
static inline int kv_get(struct kv *kv, const void *key, uint32_t klen, void *buf, uint32_t cap,
                         uint32_t *len_out, struct blk_ptr *missing)
{
	uint8_t ent[1 + BLK_PTR_DISK_BYTES + 4 + KV_INLINE_MAX];
	uint32_t elen;
	int rc = btree_lookup(pool_ds_tree(kv->kv_ds), key, klen, ent, sizeof(ent), &elen, missing);
	if (rc != 0)
		return rc == -EOVERFLOW ? -EIO : rc;
	if (elen == 0)
		return -EIO;
	if (ent[0] == KV_KIND_INLINE) {
		*len_out = elen - 1;
		if (elen - 1 > cap)
			return -EOVERFLOW;
		memcpy(buf, ent + 1, elen - 1);
		return 0;
	}
	if (ent[0] == KV_KIND_PENDING) {
		struct kv_dirty **link = kv_dirty_find(kv, key, klen);
		if (!*link || elen != 5)
			return -EIO;
		*len_out = (*link)->kd_vlen;
		if ((*link)->kd_vlen > cap)
			return -EOVERFLOW;
		memcpy(buf, (*link)->kd_val, (*link)->kd_vlen);
		return 0;
	}
	struct blk_ptr bp;
	uint32_t len;
	rc = kv_entry_block(ent, elen, &bp, &len);
	if (rc != 0)
		return -EIO;
	const void *img;
	void *hold;
	rc = pool_block_get(kv->kv_pool, &bp, &img, &hold);
	if (rc == -SH_ENEEDBLOCK && missing)
		*missing = bp;
	if (rc != 0)
		return rc;
	*len_out = len;
	if (len <= cap)
		memcpy(buf, img, len);
	pool_block_release(kv->kv_pool, hold);
	return len <= cap ? 0 : -EOVERFLOW;
}

/* ---- the owner's hooks ---- */

static inline int kv_do_sync(void *owner, uint64_t txg)
{
	(void)txg;
	struct kv *kv = owner;
	struct btree *t = pool_ds_tree(kv->kv_ds);
	for (unsigned b = 0; b < KV_BUCKETS; b++) {
		while (kv->kv_dirty[b]) {
			struct kv_dirty *d = kv->kv_dirty[b];
			struct blk_ptr bp;
			int rc = pool_sync_write(kv->kv_pool, d->kd_val, d->kd_vlen, POOL_BT_DATA,
			                         0, 1, &bp);
			if (rc != 0)
				return rc;
			uint8_t ent[1 + BLK_PTR_DISK_BYTES + 4];
			ent[0] = KV_KIND_BLOCK;
			blk_ptr_encode(&bp, ent + 1);
			kv_le32(ent + 1 + BLK_PTR_DISK_BYTES, d->kd_vlen);
			rc = btree_put(t, d->kd_key, d->kd_klen, ent, sizeof(ent),
			               BTREE_PUT_REPLACE, NULL);
			if (rc != 0) {
				(void)!pool_free(kv->kv_pool, &bp);
				return rc == -SH_ENEEDBLOCK
				           ? -EIO
				           : rc; /* the placeholder's path is dirty */
			}
			kv->kv_data_blocks_written++;
			kv_dirty_drop(kv, &kv->kv_dirty[b]);
		}
	}
	return 0;
}

static inline uint64_t kv_do_dirty_bytes(void *owner)
{
	return ((struct kv *)owner)->kv_dirty_bytes;
}

static inline int kv_do_replay(void *owner, uint16_t type, const void *rec, uint32_t len,
                               struct blk_ptr *missing)
{
	struct kv *kv = owner;
	const uint8_t *r = rec;
	int rc;
	if (type == KV_REC_PUT) {
		if (len < 5 || r[0] == 0 || (uint64_t)5 + r[0] + kv_rd32(r + 1) != len)
			return -EIO;
		rc = kv_put(kv, r + 5, r[0], r + 5 + r[0], kv_rd32(r + 1), missing);
	} else if (type == KV_REC_DEL) {
		if (len < 2 || (uint32_t)1 + r[0] != len)
			return -EIO;
		rc = kv_del(kv, r + 1, r[0], missing);
		if (rc == -ENOENT)
			rc = -EIO; /* exactly-once replay onto the uberblock's state finds every
			              deleted key */
	} else {
		return -EIO;
	}
	if (rc == 0) {
		kv->kv_replayed++;
		atomic_fetch_add(&kv_replayed_total, 1);
	}
	return rc;
}

static inline int kv_do_visit_blocks(void *owner, const void *key, uint32_t klen, const void *val,
                                     uint32_t vlen, pool_bp_fn fn, void *arg)
{
	(void)owner;
	(void)key;
	(void)klen;
	struct blk_ptr bp;
	uint32_t len;
	int rc = kv_entry_block(val, vlen, &bp, &len);
	if (rc == -ENOENT)
		return 0;
	return rc == 0 ? fn(arg, &bp) : rc;
}

static inline void kv_do_detach(void *owner)
{
	struct kv *kv = owner;
	for (unsigned b = 0; b < KV_BUCKETS; b++)
		while (kv->kv_dirty[b])
			kv_dirty_drop(kv, &kv->kv_dirty[b]);
	mem_free(kv);
}

static const struct pool_ds_owner kv_owner_ops = {
    .do_sync = kv_do_sync,
    .do_dirty_bytes = kv_do_dirty_bytes,
    .do_replay = kv_do_replay,
    .do_visit_blocks = kv_do_visit_blocks,
    .do_detach = kv_do_detach,
};

/* pool_attach_fn: a new kv owner on ds. */
static inline int kv_attach(void *arg, struct pool_ds *ds)
{
	(void)arg;
	struct kv *kv = mem_zalloc(sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->kv_pool = pool_ds_pool(ds);
	kv->kv_ds = ds;
	int rc = pool_ds_set_owner(ds, &kv_owner_ops, kv);
	if (rc != 0)
		mem_free(kv);
	return rc == -EBUSY ? 0 : rc;
}

/* Opens dataset name and returns its kv owner (attached now if it has none). Close with
 * pool_ds_close(kv->kv_ds); the owner lives until the pool evicts the dataset. */
static inline int kv_open(struct pool *p, const char *name, struct kv **out)
{
	*out = NULL;
	struct pool_ds *ds;
	int rc = pool_ds_open(p, name, &ds);
	if (rc != 0)
		return rc;
	if (!pool_ds_owner(ds)) {
		rc = kv_attach(NULL, ds);
		if (rc != 0) {
			pool_ds_close(ds);
			return rc;
		}
	}
	*out = pool_ds_owner(ds);
	return 0;
}

static inline void kv_close(struct kv *kv)
{
	pool_ds_close(kv->kv_ds);
}

/* ---- the blocking driver ---- */

struct kv_wait {
	pthread_mutex_t kw_lock;
	pthread_cond_t kw_cond;
	bool kw_done;
	int kw_status;
	struct ilog_waiter kw_iw;
	struct pool_waiter kw_pw;
};

static inline void kv_wait_init(struct kv_wait *w)
{
	memset(w, 0, sizeof(*w));
	VERIFY(pthread_mutex_init(&w->kw_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&w->kw_cond, NULL) == 0);
}

static inline void kv_wait_fini(struct kv_wait *w)
{
	pthread_cond_destroy(&w->kw_cond);
	pthread_mutex_destroy(&w->kw_lock);
}

static inline void kv_wait_signal(struct kv_wait *w, int status)
{
	pthread_mutex_lock(&w->kw_lock);
	w->kw_done = true;
	w->kw_status = status;
	pthread_cond_signal(&w->kw_cond);
	pthread_mutex_unlock(&w->kw_lock);
}

static inline int kv_wait_for(struct kv_wait *w)
{
	pthread_mutex_lock(&w->kw_lock);
	while (!w->kw_done)
		pthread_cond_wait(&w->kw_cond, &w->kw_lock);
	w->kw_done = false;
	int st = w->kw_status;
	pthread_mutex_unlock(&w->kw_lock);
	return st;
}

static inline void kv_load_cb(void *arg, int status)
{
	kv_wait_signal(arg, status);
}

static inline void kv_commit_cb(struct ilog_waiter *iw, int status)
{
	kv_wait_signal(SH_CONTAINER_OF(iw, struct kv_wait, kw_iw), status);
}

static inline void kv_throttle_cb(struct pool_waiter *pw, int status)
{
	kv_wait_signal(SH_CONTAINER_OF(pw, struct kv_wait, kw_pw), status);
}

struct kv_stats {
	uint64_t ks_loads;     /* blocks loaded asynchronously by the driver */
	uint64_t ks_throttled; /* times pool_tx_throttle deferred it */
};

enum kv_op { KV_OP_PUT, KV_OP_DEL, KV_OP_GET };

/* Runs one operation to completion: throttles, retries after loading missing blocks with
 * pool_block_load (waiting for its callback), and for PUT/DEL appends the log record in the same
 * locked section when lsn_out is not NULL. Returns the operation's result. */
static inline int kv_exec(struct kv *kv, enum kv_op op, const void *key, uint32_t klen,
                          const void *val, uint32_t vlen, void *out, uint32_t cap,
                          uint32_t *out_len, uint64_t *lsn_out, struct kv_stats *ks)
{
	struct pool *p = kv->kv_pool;
	struct kv_wait w;
	kv_wait_init(&w);
	w.kw_pw.pw_done = kv_throttle_cb;
	uint8_t *rec = NULL;
	uint32_t rlen = 0;
	int rc;
	if (lsn_out && op != KV_OP_GET) {
		rlen = op == KV_OP_PUT ? 5 + klen + vlen : 1 + klen;
		rec = mem_alloc(rlen);
		if (!rec) {
			rc = -ENOMEM;
			goto out;
		}
		rec[0] = (uint8_t)klen;
		if (op == KV_OP_PUT) {
			kv_le32(rec + 1, vlen);
			memcpy(rec + 5, key, klen);
			memcpy(rec + 5 + klen, val, vlen);
		} else {
			memcpy(rec + 1, key, klen);
		}
	}
	for (;;) {
		struct blk_ptr missing;
		pool_lock(p);
		if (op != KV_OP_GET) {
			rc = pool_tx_throttle(p, &w.kw_pw);
			if (rc != 0) {
				pool_unlock(p);
				if (rc < 0)
					goto out;
				if (ks)
					ks->ks_throttled++;
				rc = kv_wait_for(&w);
				if (rc != 0)
					goto out;
				continue;
			}
		}
		if (op == KV_OP_PUT)
			rc = kv_put(kv, key, klen, val, vlen, &missing);
		else if (op == KV_OP_DEL)
			rc = kv_del(kv, key, klen, &missing);
		else
			rc = kv_get(kv, key, klen, out, cap, out_len, &missing);
		if (rc == 0 && rec)
			rc =
			    pool_log_append(p, kv->kv_ds, op == KV_OP_PUT ? KV_REC_PUT : KV_REC_DEL,
			                    rec, rlen, lsn_out);
		pool_unlock(p);
		if (rc != -SH_ENEEDBLOCK)
			break;
		if (ks)
			ks->ks_loads++;
		rc = pool_block_load(p, &missing, kv_load_cb, &w);
		if (rc == POOL_LOADED)
			continue;
		if (rc < 0)
			break;
		rc = kv_wait_for(&w);
		if (rc != 0)
			break;
	}
out:
	mem_free(rec);
	kv_wait_fini(&w);
	return rc;
}

/* Waits until lsn is durable. */
static inline int kv_commit(struct kv *kv, uint64_t lsn)
{
	struct kv_wait w;
	kv_wait_init(&w);
	w.kw_iw.iw_done = kv_commit_cb;
	int rc = pool_log_commit(kv->kv_pool, lsn, &w.kw_iw);
	if (rc == ILOG_DONE)
		rc = 0;
	else if (rc == 0)
		rc = kv_wait_for(&w);
	kv_wait_fini(&w);
	return rc;
}

#endif
