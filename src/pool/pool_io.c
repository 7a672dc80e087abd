/* pool_io.c: the pool's blocks: reads through the ARC (synchronous for tools, asynchronous with a
 * callback for owners), writes queued by a sync (rule R3 of pool.c), frees (R4), the B+tree stores
 * of the MOS (pinned, R9) and of the datasets, the allocator's store, and a small map of blocks
 * by identity used for the pinned MOS and for check walks.
 *
 * Block identity: (vdev, offset, birth txg), the ARC key. A block is immutable: a rewritten block
 * has a new birth, so a key never names two contents, and the size under a key (bp_lsize) never
 * changes.
 *
 * Threads: pool_block_get/load/read_sync may run on any thread (reads take no pool lock); the
 * completion of a read (pool_read_done) and of a write (pool_write_done) run on the blk engine
 * thread and take at most p_state_lock (R2). Writes, frees and the stores run under p_lock. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "pool/pool_impl.h"

/* ---------------------------------------------------------------------------------------------
 * The block map */

static uint64_t pool_bpmap_hash(const struct blk_ptr *bp)
{
	uint64_t k[3] = {bp->bp_vdev, bp->bp_offset, bp->bp_birth_txg};
	return sh_hash64(k, sizeof(k), 0x706f6f6c);
}

void pool_bpmap_init(struct pool_bpmap *m)
{
	memset(m, 0, sizeof(*m));
}

void pool_bpent_free(struct pool_bpent *e)
{
	mem_free(e->be_img);
	mem_free(e);
}

void pool_bpmap_fini(struct pool_bpmap *m)
{
	for (size_t i = 0; i < m->bm_nbuckets; i++) {
		struct pool_bpent *e = m->bm_buckets[i];
		while (e) {
			struct pool_bpent *next = e->be_next;
			pool_bpent_free(e);
			e = next;
		}
	}
	mem_free(m->bm_buckets);
	memset(m, 0, sizeof(*m));
}

struct pool_bpent *pool_bpmap_find(struct pool_bpmap *m, const struct blk_ptr *bp)
{
	if (m->bm_nbuckets == 0)
		return NULL;
	struct pool_bpent *e = m->bm_buckets[pool_bpmap_hash(bp) & (m->bm_nbuckets - 1)];
	for (; e; e = e->be_next) {
		if (blk_ptr_same_block(&e->be_bp, bp)) {
			e->be_used = ++m->bm_clock;
			return e;
		}
	}
	return NULL;
}

/* Doubles the table; on -ENOMEM it stays as it is (chains get longer, nothing breaks). */
static void pool_bpmap_grow(struct pool_bpmap *m)
{
	size_t n = m->bm_nbuckets ? m->bm_nbuckets * 2 : 64;
	struct pool_bpent **b = mem_zalloc(n * sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < m->bm_nbuckets; i++) {
		struct pool_bpent *e = m->bm_buckets[i];
		while (e) {
			struct pool_bpent *next = e->be_next;
			size_t h = pool_bpmap_hash(&e->be_bp) & (n - 1);
			e->be_next = b[h];
			b[h] = e;
			e = next;
		}
	}
	mem_free(m->bm_buckets);
	m->bm_buckets = b;
	m->bm_nbuckets = n;
}

struct pool_bpent *pool_bpent_new(struct pool_bpmap *m, const struct blk_ptr *bp,
                                  uint32_t img_bytes)
{
	if (m->bm_nbuckets == 0)
		pool_bpmap_grow(m);
	if (m->bm_nbuckets == 0)
		return NULL;
	struct pool_bpent *e = mem_zalloc(sizeof(*e));
	if (!e)
		return NULL;
	e->be_bp = *bp;
	if (img_bytes > 0) {
		e->be_img = mem_alloc(img_bytes);
		if (!e->be_img) {
			mem_free(e);
			return NULL;
		}
	}
	return e;
}

void pool_bpmap_insert(struct pool_bpmap *m, struct pool_bpent *e)
{
	if (m->bm_count >= m->bm_nbuckets)
		pool_bpmap_grow(m);
	VERIFY(m->bm_nbuckets > 0); /* pool_bpent_new made the first table */
	size_t h = pool_bpmap_hash(&e->be_bp) & (m->bm_nbuckets - 1);
	e->be_next = m->bm_buckets[h];
	m->bm_buckets[h] = e;
	e->be_used = ++m->bm_clock;
	m->bm_count++;
	if (e->be_img)
		m->bm_bytes += e->be_bp.bp_lsize;
}

struct pool_bpent *pool_bpmap_add(struct pool_bpmap *m, const struct blk_ptr *bp, const void *img)
{
	struct pool_bpent *e = pool_bpmap_find(m, bp);
	if (e)
		return e;
	e = pool_bpent_new(m, bp, img ? bp->bp_lsize : 0);
	if (!e)
		return NULL;
	if (img)
		memcpy(e->be_img, img, bp->bp_lsize);
	pool_bpmap_insert(m, e);
	return e;
}

int pool_bpmap_read(struct pool *p, struct pool_bpmap *m, const struct blk_ptr *bp)
{
	if (pool_bpmap_find(m, bp))
		return 0;
	struct pool_bpent *e = pool_bpent_new(m, bp, bp->bp_lsize);
	if (!e)
		return -ENOMEM;
	int rc = blk_block_read_sync(pool_bp_vdev(p, bp), bp, e->be_img);
	if (rc != 0) {
		pool_bpent_free(e);
		return rc;
	}
	pool_bpmap_insert(m, e);
	return 0;
}

static void pool_bpmap_unlink(struct pool_bpmap *m, struct pool_bpent **link)
{
	struct pool_bpent *e = *link;
	*link = e->be_next;
	m->bm_count--;
	if (e->be_img)
		m->bm_bytes -= e->be_bp.bp_lsize;
	pool_bpent_free(e);
}

void pool_bpmap_remove(struct pool_bpmap *m, const struct blk_ptr *bp)
{
	if (m->bm_nbuckets == 0)
		return;
	struct pool_bpent **link = &m->bm_buckets[pool_bpmap_hash(bp) & (m->bm_nbuckets - 1)];
	for (; *link; link = &(*link)->be_next) {
		if (blk_ptr_same_block(&(*link)->be_bp, bp)) {
			pool_bpmap_unlink(m, link);
			return;
		}
	}
}

void pool_bpmap_trim(struct pool_bpmap *m, uint64_t max_bytes)
{
	/* Each round drops the unheld entries in the older half of the use clock: amortized O(1)
	 * per entry, and the entries used last (a walk's current path) stay. */
	for (int round = 0; round < 8 && m->bm_bytes > max_bytes; round++) {
		uint64_t cut = m->bm_clock - SH_MIN(m->bm_clock, (uint64_t)m->bm_count / 2);
		for (size_t i = 0; i < m->bm_nbuckets && m->bm_bytes > max_bytes; i++) {
			struct pool_bpent **link = &m->bm_buckets[i];
			while (*link) {
				if ((*link)->be_holds == 0 && (*link)->be_used <= cut)
					pool_bpmap_unlink(m, link);
				else
					link = &(*link)->be_next;
			}
		}
	}
}

/* ---------------------------------------------------------------------------------------------
 * Pointers */

struct arc_key pool_arc_key(const struct blk_ptr *bp)
{
	return (struct arc_key){bp->bp_vdev, bp->bp_offset, bp->bp_birth_txg};
}

bool pool_bp_valid(const struct pool *p, const struct blk_ptr *bp)
{
	if (blk_ptr_is_hole(bp) || bp->bp_vdev >= p->p_ntops ||
	    bp->bp_checksum != BLK_CHECKSUM_XXH3_128)
		return false;
	if (bp->bp_asize == 0 || bp->bp_asize % BLK_SECTOR_BYTES != 0 ||
	    bp->bp_offset % BLK_SECTOR_BYTES != 0)
		return false;
	if (bp->bp_psize == 0 || bp->bp_psize > bp->bp_asize || bp->bp_lsize == 0 ||
	    bp->bp_lsize > BLK_MAX_BLOCK_BYTES || bp->bp_compress > BLK_COMPRESS_ZSTD)
		return false;
	const struct space_vdev_geom *g = &p->p_geom.sg_vdevs[bp->bp_vdev];
	return bp->bp_offset >= g->svg_start && bp->bp_offset - g->svg_start <= g->svg_bytes &&
	       bp->bp_asize <= g->svg_bytes - (bp->bp_offset - g->svg_start);
}

struct blk_vdev *pool_bp_vdev(const struct pool *p, const struct blk_ptr *bp)
{
	return p->p_tops[bp->bp_vdev].pt_vdev;
}

int pool_space_load(void *ctx, const struct blk_ptr *bp, void *buf, uint32_t bytes)
{
	struct pool *p = ctx;
	if (!pool_bp_valid(p, bp) || bytes != bp->bp_lsize)
		return -EIO;
	int rc = blk_block_read_sync(pool_bp_vdev(p, bp), bp, buf);
	if (rc == 0 && !pool_bpmap_add(&p->p_space_blocks, bp, NULL))
		rc = -ENOMEM;
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Reads through the ARC */

struct pool_read {
	struct pool *rd_pool;
	struct arc_buf *rd_buf;
	struct blk_ptr rd_bp;
	void (*rd_cb)(void *arg, int status);
	void *rd_arg;
	void *rd_direct; /* sector-aligned, read into without a copy; the buffer takes it (or NULL) */
};

/* Engine thread: the block is read (or not); fill the cache, then tell the one who asked. */
static void pool_read_done(void *arg, int status)
{
	struct pool_read *rd = arg;
	struct pool *p = rd->rd_pool;
	if (status != 0)
		log_ratelimited(LOG_WARN,
		                "pool %s: block vdev %u offset %" PRIu64 " birth %" PRIu64
		                " unreadable: %s",
		                p->p_name, rd->rd_bp.bp_vdev, rd->rd_bp.bp_offset,
		                rd->rd_bp.bp_birth_txg, sh_strerror(status));
	if (rd->rd_direct)
		arc_data_free(status == 0 ? arc_fill_take(rd->rd_buf, rd->rd_direct) : rd->rd_direct);
	arc_fill_done(p->p_arc, rd->rd_buf, status);
	arc_rele(p->p_arc, rd->rd_buf);
	if (rd->rd_cb)
		rd->rd_cb(rd->rd_arg, status);
	mem_free(rd);
}

/* Fills buf (handed out by a miss) from disk. On -ENOMEM the fill fails at once (its waiters are
 * called on this thread) and cb is not called. direct: a block stored uncompressed in whole
 * sectors is read into a sector-aligned buffer of its own, which the cache then takes, so that
 * the leaves read it in place (blk_block_read) and the engine thread copies nothing; for
 * streaming readers (a send), whose blocks pass through the cache once. Other readers keep the
 * cache's own buffers, which are not aligned (arc_data_alloc says why). */
static int pool_read_start(struct pool *p, const struct blk_ptr *bp, struct arc_buf *buf,
                           void (*cb)(void *arg, int status), void *arg, bool direct)
{
	struct pool_read *rd = mem_alloc(sizeof(*rd));
	if (!rd) {
		arc_fill_done(p->p_arc, buf, -ENOMEM);
		arc_rele(p->p_arc, buf);
		return -ENOMEM;
	}
	*rd = (struct pool_read){p, buf, *bp, cb, arg, NULL};
	if (direct && bp->bp_compress == BLK_COMPRESS_OFF && bp->bp_lsize == bp->bp_asize)
		rd->rd_direct = mem_aligned_alloc(BLK_SECTOR_BYTES, bp->bp_lsize); /* NULL: copied */
	blk_block_read(pool_bp_vdev(p, bp), bp, rd->rd_direct ? rd->rd_direct : arc_buf_data(buf),
	               pool_read_done, rd);
	return 0;
}

static int pool_arc_error(int rc)
{
	/* -EINVAL: a block of another size under this key: the pointer cannot be right */
	return rc == -ENOMEM ? -ENOMEM : -EIO;
}

/* arc_lookup of bp's block: ARC_HIT or ARC_MISS_FILL (*buf held), ARC_MISS_WAIT, or -EIO for a
 * pointer that cannot be right, -ENOMEM. */
static int pool_block_lookup(struct pool *p, const struct blk_ptr *bp, struct arc_buf **buf)
{
	if (!pool_bp_valid(p, bp))
		return -EIO;
	struct arc_key key = pool_arc_key(bp);
	int rc = arc_lookup(p->p_arc, &key, bp->bp_lsize, buf);
	return rc < 0 ? pool_arc_error(rc) : rc;
}

int pool_block_get(struct pool *p, const struct blk_ptr *bp, const void **image_out,
                   void **hold_out)
{
	struct arc_buf *buf;
	int rc = pool_block_lookup(p, bp, &buf);
	if (rc < 0)
		return rc;
	if (rc == ARC_HIT) {
		*image_out = arc_buf_data(buf);
		*hold_out = buf;
		return 0;
	}
	if (rc == ARC_MISS_FILL)
		(void)pool_read_start(p, bp, buf, NULL, NULL,
		                      false); /* a read ahead of the caller's load */
	return -SH_ENEEDBLOCK;
}

void pool_block_release(struct pool *p, void *hold)
{
	arc_rele(p->p_arc, hold);
}

struct pool_load {
	struct arc_waiter lw_w;
	struct pool *lw_pool;
	void (*lw_cb)(void *arg, int status);
	void *lw_arg;
};

static void pool_load_waiter_done(struct arc_waiter *w, struct arc_buf *buf, int status)
{
	struct pool_load *lw = SH_CONTAINER_OF(w, struct pool_load, lw_w);
	if (buf)
		arc_rele(lw->lw_pool->p_arc, buf);
	lw->lw_cb(lw->lw_arg, status);
	mem_free(lw);
}

int pool_block_load(struct pool *p, const struct blk_ptr *bp, void (*cb)(void *arg, int status),
                    void *arg)
{
	if (!pool_bp_valid(p, bp) || !cb)
		return -EIO;
	struct pool_load *lw = mem_zalloc(sizeof(*lw));
	if (!lw)
		return -ENOMEM;
	lw->lw_w.aw_done = pool_load_waiter_done;
	lw->lw_pool = p;
	lw->lw_cb = cb;
	lw->lw_arg = arg;
	struct arc_key key = pool_arc_key(bp);
	struct arc_buf *buf;
	int rc = arc_lookup_async(p->p_arc, &key, bp->bp_lsize, &lw->lw_w, &buf);
	if (rc == ARC_MISS_WAIT)
		return 0;
	mem_free(lw);
	if (rc < 0)
		return pool_arc_error(rc);
	if (rc == ARC_HIT) {
		arc_rele(p->p_arc, buf);
		return POOL_LOADED;
	}
	return pool_read_start(p, bp, buf, cb, arg, false);
}

int pool_block_prefetch(struct pool *p, const struct blk_ptr *bp)
{
	struct arc_buf *buf;
	int rc = pool_block_lookup(p, bp, &buf);
	if (rc < 0)
		return rc;
	if (rc == ARC_HIT)
		arc_rele(p->p_arc, buf);
	if (rc != ARC_MISS_FILL)
		return POOL_LOADED; /* cached, or being read */
	return pool_read_start(p, bp, buf, NULL, NULL, true);
}

struct pool_sync_wait {
	struct arc_waiter sw_w;
	struct pool *sw_pool;
	pthread_mutex_t sw_lock;
	pthread_cond_t sw_cond;
	bool sw_done;
	int sw_status;
};

static void pool_sync_wait_done(struct arc_waiter *w, struct arc_buf *buf, int status)
{
	struct pool_sync_wait *sw = SH_CONTAINER_OF(w, struct pool_sync_wait, sw_w);
	if (buf)
		arc_rele(sw->sw_pool->p_arc, buf);
	pthread_mutex_lock(&sw->sw_lock);
	sw->sw_done = true;
	sw->sw_status = status;
	pthread_cond_signal(&sw->sw_cond);
	pthread_mutex_unlock(&sw->sw_lock);
}

int pool_block_read_sync(struct pool *p, const struct blk_ptr *bp)
{
	if (!pool_bp_valid(p, bp))
		return -EIO;
	struct pool_sync_wait sw = {.sw_pool = p};
	sw.sw_w.aw_done = pool_sync_wait_done;
	VERIFY(pthread_mutex_init(&sw.sw_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&sw.sw_cond, NULL) == 0);
	struct arc_key key = pool_arc_key(bp);
	struct arc_buf *buf;
	int rc = arc_lookup_async(p->p_arc, &key, bp->bp_lsize, &sw.sw_w, &buf);
	if (rc == ARC_HIT) {
		arc_rele(p->p_arc, buf);
		rc = 0;
	} else if (rc == ARC_MISS_FILL) {
		rc = blk_block_read_sync(pool_bp_vdev(p, bp), bp, arc_buf_data(buf));
		arc_fill_done(p->p_arc, buf, rc);
		arc_rele(p->p_arc, buf);
	} else if (rc == ARC_MISS_WAIT) {
		pthread_mutex_lock(&sw.sw_lock);
		while (!sw.sw_done)
			pthread_cond_wait(&sw.sw_cond, &sw.sw_lock);
		pthread_mutex_unlock(&sw.sw_lock);
		rc = sw.sw_status;
	} else {
		rc = pool_arc_error(rc);
	}
	pthread_cond_destroy(&sw.sw_cond);
	pthread_mutex_destroy(&sw.sw_lock);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Writes (phase 1 of a sync) */

static void pool_write_release(struct pool *p, struct pool_write *w)
{
	if (w->wr_buf)
		arc_rele(p->p_arc, w->wr_buf);
	blk_prepared_fini(&w->wr_prep);
	mem_free(w);
}

/* Engine thread. */
static void pool_write_done(void *arg, int status)
{
	struct pool_write *w = arg;
	struct pool *p = w->wr_pool;
	if (status == 0) {
		pool_write_release(p, w);
	} else {
		log_ratelimited(LOG_WARN, "pool %s: writing block vdev %u offset %" PRIu64 ": %s",
		                p->p_name, w->wr_bp.bp_vdev, w->wr_bp.bp_offset,
		                sh_strerror(status));
		w->wr_status = status;
	}
	pthread_mutex_lock(&p->p_state_lock);
	if (status != 0) {
		w->wr_next = p->p_writes_failed;
		p->p_writes_failed = w;
	}
	VERIFY(p->p_writes_pending > 0);
	if (--p->p_writes_pending == 0)
		pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
}

static void pool_writes_submit_locked(struct pool *p);

/* A block written in phase 1 for dataset ds (NULL: the pool's own) counts in its used bytes. */
static void pool_ds_charge(struct pool_ds *ds, const struct blk_ptr *bp)
{
	if (ds) {
		ds->ds_used_bytes += bp->bp_asize;
		ds->ds_record_dirty = true;
	}
}

/* Places w, whose wr_prep is filled: allocates its space, fills its pointer (*bp_out too),
 * caches its logical bytes (data: copied, or taken as the cached buffer when take is set; on
 * failure it stays the caller's), and queues the write. On failure frees w and the allocation. */
static int pool_write_place(struct pool *p, struct pool_write *w, void *data, bool take,
                            enum space_class cls, uint8_t type, uint8_t level, uint64_t fill,
                            bool cache, struct blk_ptr *bp_out)
{
	uint32_t lsize = w->wr_prep.bw_lsize;
	uint32_t vdev;
	uint64_t off;
	int rc = space_alloc(p->p_space, cls, SPACE_VDEV_ANY, w->wr_prep.bw_asize, &vdev, &off);
	if (rc == -ENOSPC && cls == SPACE_CLASS_NORMAL)
		rc = space_alloc(p->p_space, SPACE_CLASS_RESERVED, SPACE_VDEV_ANY,
		                 w->wr_prep.bw_asize, &vdev, &off);
	if (rc != 0) {
		blk_prepared_fini(&w->wr_prep);
		mem_free(w);
		return rc;
	}
	blk_ptr_fill(&w->wr_bp, &w->wr_prep, vdev, off, type, level, p->p_syncing_txg, fill);
	if (cache) {
		/* R3: readable through the cache until it is on disk */
		struct arc_key key = pool_arc_key(&w->wr_bp);
		if (take) {
			rc = arc_insert_keep_on_error(p->p_arc, &key, data, lsize, &w->wr_buf);
		} else {
			void *copy = arc_data_alloc(lsize);
			if (copy) {
				memcpy(copy, data, lsize);
				rc = arc_insert(p->p_arc, &key, copy, lsize, &w->wr_buf);
			} else {
				rc = -ENOMEM;
			}
		}
		if (rc != 0) {
			/* never referenced: give the space back in the syncing txg */
			if (space_free(p->p_space, p->p_syncing_txg, vdev, off,
			               w->wr_prep.bw_asize) != 0)
				log_error("pool %s: cannot give back an unused allocation",
				          p->p_name);
			blk_prepared_fini(&w->wr_prep);
			mem_free(w);
			return rc;
		}
	}
	w->wr_pool = p;
	w->wr_vdev = p->p_tops[vdev].pt_vdev;
	*bp_out = w->wr_bp;
	pthread_mutex_lock(&p->p_state_lock);
	p->p_writes_pending++;
	pthread_mutex_unlock(&p->p_state_lock);
	/* Submitted when phase 1 lets the lock go (pool_writes_submit), so that the device's
	 * work does not compete with the locked section for the CPU, or once the room the memory
	 * limit leaves them waits (cached copy and prepared buffer counted; pool_sync_queue_room),
	 * so that with a full cache the buffers of a large txg do not all live at once (measured
	 * with 256 MiB: 10 MiB more resident over 1,000,000 creates without it). */
	w->wr_next = NULL;
	if (p->p_sync_queue)
		p->p_sync_queue_tail->wr_next = w;
	else
		p->p_sync_queue = w;
	p->p_sync_queue_tail = w;
	p->p_sync_queue_bytes += (uint64_t)w->wr_prep.bw_lsize + w->wr_prep.bw_asize;
	p->p_placed_blocks++;
	p->p_placed_bytes += w->wr_prep.bw_asize;
	if (p->p_sync_queue_bytes >= p->p_sync_queue_room)
		pool_writes_submit_locked(p);
	return 0;
}

struct pool_write *pool_writes_take_locked(struct pool *p)
{
	struct pool_write *queued = p->p_sync_queue;
	p->p_sync_queue = p->p_sync_queue_tail = NULL;
	p->p_sync_queue_bytes = 0;
	return queued;
}

/* Hands writes to the engine (which never takes p_lock: R2), in allocation order. */
void pool_writes_submit(struct pool_write *queued)
{
	while (queued) {
		struct pool_write *next = queued->wr_next;
		queued->wr_next = NULL;
		blk_block_write(queued->wr_vdev, &queued->wr_bp, &queued->wr_prep, true,
		                pool_write_done, queued);
		queued = next;
	}
}

/* Hands the queued writes to the engine without letting the lock go. Under p_lock. */
static void pool_writes_submit_locked(struct pool *p)
{
	pool_writes_submit(pool_writes_take_locked(p));
}

int pool_write_block(struct pool *p, const void *data, uint32_t lsize, enum blk_compress compress,
                     enum space_class cls, uint8_t type, uint8_t level, uint64_t fill, bool cache,
                     struct blk_ptr *bp_out)
{
	if (!p->p_in_sync || lsize == 0 || lsize > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	struct pool_write *w = mem_zalloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc = blk_prepare(data, lsize, compress, &w->wr_prep);
	if (rc != 0) {
		mem_free(w);
		return rc;
	}
	return pool_write_place(p, w, (void *)data, false, cls, type, level, fill, cache, bp_out);
}

/* ---------------------------------------------------------------------------------------------
 * Sealed blocks (prepared ahead of phase 1) */

struct pool_sealed {
	struct blk_prepared sl_prep;
};

/* The memory a sealed block holds of its own: none when its image is the caller's data. */
static uint64_t pool_sealed_mem(const struct pool_sealed *s)
{
	return s->sl_prep.bw_lent ? 0 : s->sl_prep.bw_asize;
}

static int pool_seal_block_as(struct pool *p, const void *data, uint32_t lsize,
                              enum blk_compress compress, bool lend, struct pool_sealed **out)
{
	if (lsize == 0 || lsize > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	struct pool_sealed *s = mem_zalloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = lend ? blk_prepare_lend(data, lsize, compress, &s->sl_prep)
	              : blk_prepare(data, lsize, compress, &s->sl_prep);
	if (rc != 0) {
		mem_free(s);
		return rc;
	}
	atomic_fetch_add(&p->p_sealed_bytes, pool_sealed_mem(s));
	*out = s;
	return 0;
}

int pool_seal_block(struct pool *p, const void *data, uint32_t lsize, enum blk_compress compress,
                    struct pool_sealed **out)
{
	return pool_seal_block_as(p, data, lsize, compress, false, out);
}

int pool_seal_block_lend(struct pool *p, const void *data, uint32_t lsize,
                         enum blk_compress compress, struct pool_sealed **out)
{
	return pool_seal_block_as(p, data, lsize, compress, true, out);
}

int pool_seal_stored(struct pool *p, const void *phys, uint32_t psize, uint32_t lsize,
                     enum blk_compress compress, void *logical_out, struct pool_sealed **out)
{
	struct pool_sealed *s = mem_zalloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = blk_prepare_stored(phys, psize, lsize, compress, logical_out, &s->sl_prep);
	if (rc != 0) {
		mem_free(s);
		return rc;
	}
	atomic_fetch_add(&p->p_sealed_bytes, s->sl_prep.bw_asize);
	*out = s;
	return 0;
}

int pool_block_read_stored(struct pool *p, const struct blk_ptr *bp, void *out)
{
	if (!pool_bp_valid(p, bp) || blk_ptr_is_hole(bp))
		return -EIO;
	return blk_block_read_raw_sync(pool_bp_vdev(p, bp), bp, out);
}

void pool_sealed_free(struct pool *p, struct pool_sealed *s)
{
	if (!s)
		return;
	atomic_fetch_sub(&p->p_sealed_bytes, pool_sealed_mem(s));
	blk_prepared_fini(&s->sl_prep);
	mem_free(s);
}

int pool_sync_write_sealed(struct pool *p, struct pool_sealed *s, void *data, bool may_take,
                           bool *taken_out, uint8_t type, uint8_t level, uint64_t fill,
                           struct blk_ptr *bp_out)
{
	*taken_out = false;
	if (!p->p_in_sync) {
		pool_sealed_free(p, s);
		return -EINVAL;
	}
	struct pool_write *w = mem_zalloc(sizeof(*w));
	if (!w) {
		pool_sealed_free(p, s);
		return -ENOMEM;
	}
	/* Its buffer moves into the write: phase 1's accounting (p_sync_bytes) from here on. */
	atomic_fetch_sub(&p->p_sealed_bytes, pool_sealed_mem(s));
	w->wr_prep = s->sl_prep;
	mem_free(s);
	/* A lent image is data itself, which stays alive and unchanged through the write only
	 * when the cache takes it (the write holds the cached buffer until done): otherwise the
	 * write needs a copy of its own. */
	if (!may_take && blk_prepared_own(&w->wr_prep) != 0) {
		blk_prepared_fini(&w->wr_prep);
		mem_free(w);
		return -ENOMEM;
	}
	int rc = pool_write_place(p, w, data, may_take, SPACE_CLASS_NORMAL, type, level, fill,
	                          true, bp_out);
	if (rc != 0)
		return rc;
	*taken_out = may_take;
	p->p_sealed_writes++;
	pool_ds_charge(p->p_sync_ds, bp_out);
	return 0;
}

int pool_writes_wait(struct pool *p)
{
	for (int attempt = 0;; attempt++) {
		pthread_mutex_lock(&p->p_state_lock);
		while (p->p_writes_pending > 0)
			pthread_cond_wait(&p->p_state_cv, &p->p_state_lock);
		struct pool_write *failed = p->p_writes_failed;
		p->p_writes_failed = NULL;
		pthread_mutex_unlock(&p->p_state_lock);
		if (!failed)
			return 0;
		if (attempt > 0) {
			int rc = failed->wr_status;
			while (failed) {
				struct pool_write *next = failed->wr_next;
				pool_write_release(p, failed);
				failed = next;
			}
			return rc;
		}
		unsigned n = 0;
		for (struct pool_write *w = failed; w; w = w->wr_next)
			n++;
		log_warn("pool %s: retrying %u failed block write%s", p->p_name, n,
		         n == 1 ? "" : "s");
		pthread_mutex_lock(&p->p_state_lock);
		p->p_writes_pending += n;
		pthread_mutex_unlock(&p->p_state_lock);
		while (failed) {
			struct pool_write *next = failed->wr_next;
			failed->wr_status = 0;
			blk_block_write(failed->wr_vdev, &failed->wr_bp, &failed->wr_prep, true,
			                pool_write_done, failed);
			failed = next;
		}
	}
}

int pool_sync_write(struct pool *p, const void *data, uint32_t lsize, uint8_t type, uint8_t level,
                    uint64_t fill, struct blk_ptr *bp_out)
{
	struct pool_ds *ds = p->p_sync_ds;
	enum blk_compress c = ds ? pool_ds_compress(ds) : p->p_compress;
	int rc = pool_write_block(p, data, lsize, c, SPACE_CLASS_NORMAL, type, level, fill, true,
	                          bp_out);
	if (rc == 0)
		pool_ds_charge(ds, bp_out);
	return rc;
}

int pool_sync_adopt(struct pool *p, const struct blk_ptr *bp, const void *data)
{
	struct pool_ds *ds = p->p_sync_ds;
	if (!p->p_in_sync || bp->bp_birth_txg != p->p_syncing_txg || bp->bp_lsize == 0 ||
	    bp->bp_lsize > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	pool_ds_charge(ds, bp);
	void *copy = arc_data_alloc(bp->bp_lsize);
	if (copy) {
		memcpy(copy, data, bp->bp_lsize);
		struct arc_key key = pool_arc_key(bp);
		if (arc_insert(p->p_arc, &key, copy, bp->bp_lsize, NULL) != 0)
			log_debug("pool %s: an adopted block is not cached", p->p_name);
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Frees (R4) */

int pool_free_block(struct pool *p, struct pool_ds *ds, const struct blk_ptr *bp)
{
	if (blk_ptr_is_hole(bp))
		return 0;
	if (ds && ds->ds_snapshot) {
		/* nothing in a snapshot changes: a tree or an owner that tries is wrong */
		p->p_free_errors++;
		log_ratelimited(LOG_ERROR, "pool %s: a free of a block of snapshot %s refused",
		                p->p_name, ds->ds_name);
		return -EROFS;
	}
	if (ds && bp->bp_birth_txg <= ds->ds_prev_snap_txg) {
		/* A snapshot (or the origin) still holds it: dead-listed, not freed (pool_snap.c,
		 * S1, S2); the head no longer references it. */
		int rc = pool_dl_kill(ds, bp);
		if (rc != 0) {
			p->p_free_errors++;
			log_ratelimited(LOG_ERROR,
			                "pool %s: dataset %s: recording a block its snapshots hold: "
			                "%s (it stays allocated)",
			                p->p_name, ds->ds_name, sh_strerror(rc));
		}
		ds->ds_used_bytes -= bp->bp_asize;
		ds->ds_record_dirty = true;
		return rc;
	}
	uint64_t txg = p->p_in_sync ? p->p_syncing_txg : p->p_open_txg;
	int rc = pool_bp_valid(p, bp)
	             ? space_free(p->p_space, txg, bp->bp_vdev, bp->bp_offset, bp->bp_asize)
	             : -EINVAL;
	if (rc != 0) {
		p->p_free_errors++;
		log_ratelimited(LOG_ERROR,
		                "pool %s: freeing block vdev %u offset %" PRIu64
		                " size %u: %s (a damaged tree?)",
		                p->p_name, bp->bp_vdev, bp->bp_offset, bp->bp_asize,
		                sh_strerror(rc));
		return rc;
	}
	struct arc_key key = pool_arc_key(bp);
	(void)arc_remove(p->p_arc, &key);
	if (ds) {
		ds->ds_used_bytes -= bp->bp_asize;
		ds->ds_record_dirty = true;
	}
	return 0;
}

int pool_free(struct pool *p, const struct blk_ptr *bp)
{
	return pool_free_block(p, p->p_in_sync ? p->p_sync_ds : NULL, bp);
}

int pool_ds_free(struct pool_ds *ds, const struct blk_ptr *bp)
{
	return pool_free_block(ds->ds_pool, ds, bp);
}

/* ---------------------------------------------------------------------------------------------
 * The MOS's store: every block pinned in p_mos_pin (R9) */

static int pool_mos_get(void *ctx, const struct blk_ptr *bp, const void **image_out,
                        void **hold_out)
{
	struct pool *p = ctx;
	if (p->p_walk)
		return pool_walk_get(p, bp, image_out, hold_out);
	struct pool_bpent *e = pool_bpmap_find(&p->p_mos_pin, bp);
	if (!e && p->p_mos_loading)
		return -SH_ENEEDBLOCK; /* pool_mos_load's walk reads it */
	if (!e || !e->be_img || e->be_bp.bp_lsize != bp->bp_lsize) {
		log_ratelimited(LOG_ERROR, "pool %s: a metadata block is not in memory", p->p_name);
		return -EIO;
	}
	e->be_holds++;
	*image_out = e->be_img;
	*hold_out = e;
	return 0;
}

static void pool_mos_release(void *ctx, void *hold)
{
	struct pool *p = ctx;
	if (p->p_walk) {
		pool_walk_release(p, hold);
		return;
	}
	struct pool_bpent *e = hold;
	VERIFY(e->be_holds > 0);
	e->be_holds--;
}

static int pool_mos_write(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
                          uint64_t fill, struct blk_ptr *bp_out)
{
	struct pool *p = ctx;
	struct blk_ptr tmp = {.bp_lsize = image_bytes};
	struct pool_bpent *e = pool_bpent_new(&p->p_mos_pin, &tmp, image_bytes);
	if (!e)
		return -ENOMEM;
	int rc = pool_write_block(p, image, image_bytes, BLK_COMPRESS_LZ4, SPACE_CLASS_NORMAL,
	                          POOL_BT_MOS_NODE, level, fill, false, bp_out);
	if (rc != 0) {
		pool_bpent_free(e);
		return rc;
	}
	e->be_bp = *bp_out;
	memcpy(e->be_img, image, image_bytes);
	pool_bpmap_insert(&p->p_mos_pin, e);
	return 0;
}

static void pool_mos_free(void *ctx, const struct blk_ptr *bp)
{
	struct pool *p = ctx;
	if (pool_free(p, bp) != 0)
		return; /* refused (logged and counted): keep the block pinned, a check reports it
		         */
	pool_bpmap_remove(&p->p_mos_pin, bp);
}

void pool_mos_config(struct pool *p, struct btree_config *cfg)
{
	*cfg = (struct btree_config){
	    .bc_node_bytes = POOL_NODE_BYTES,
	    .bc_key_max = POOL_MOS_KEY_MAX,
	    .bc_val_max = POOL_MOS_VAL_MAX,
	    .bc_type = POOL_MOS_TREE_TYPE,
	    .bc_store = {p, pool_mos_get, pool_mos_release, pool_mos_write, pool_mos_free},
	};
}

/* btree_check's loader at import: each node into the pinned map. */
static int pool_mos_load_block(void *arg, const struct blk_ptr *bp)
{
	struct pool *p = arg;
	if (!pool_bp_valid(p, bp))
		return -EIO;
	return pool_bpmap_read(p, &p->p_mos_pin, bp);
}

int pool_mos_load(struct pool *p)
{
	char report[256];
	p->p_mos_loading = true;
	int rc = btree_check(p->p_mos, pool_mos_load_block, p, report, sizeof(report));
	p->p_mos_loading = false;
	if (rc != 0)
		log_error("pool %s: metadata tree: %s", p->p_name, report);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * A dataset tree's store: blocks through the ARC */

static int pool_dst_get(void *ctx, const struct blk_ptr *bp, const void **image_out,
                        void **hold_out)
{
	struct pool_ds *ds = ctx;
	struct pool *p = ds->ds_pool;
	if (p->p_walk)
		return pool_walk_get(p, bp, image_out, hold_out);
	return pool_block_get(p, bp, image_out, hold_out);
}

static void pool_dst_release(void *ctx, void *hold)
{
	struct pool_ds *ds = ctx;
	struct pool *p = ds->ds_pool;
	if (p->p_walk)
		pool_walk_release(p, hold);
	else
		pool_block_release(p, hold);
}

static int pool_dst_write(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
                          uint64_t fill, struct blk_ptr *bp_out)
{
	struct pool_ds *ds = ctx;
	struct pool *p = ds->ds_pool;
	int rc = pool_write_block(p, image, image_bytes, pool_ds_compress(ds), SPACE_CLASS_NORMAL,
	                          POOL_BT_DS_NODE, level, fill, true, bp_out);
	if (rc == 0)
		pool_ds_charge(ds, bp_out);
	return rc;
}

static void pool_dst_free(void *ctx, const struct blk_ptr *bp)
{
	if (pool_ds_free(ctx, bp) != 0)
		return; /* refused: logged and counted in p_free_errors, reported by pool_check */
}

void pool_ds_config(struct pool_ds *ds, struct btree_config *cfg)
{
	*cfg = (struct btree_config){
	    .bc_node_bytes = POOL_DS_NODE_BYTES,
	    .bc_key_max = POOL_DS_KEY_MAX,
	    .bc_val_max = POOL_DS_VAL_MAX,
	    .bc_type = POOL_DS_TREE_TYPE,
	    .bc_store = {ds, pool_dst_get, pool_dst_release, pool_dst_write, pool_dst_free},
	};
}

/* ---------------------------------------------------------------------------------------------
 * The allocator's store */

static int pool_space_write(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
                            uint64_t fill, struct blk_ptr *bp_out)
{
	struct pool *p = ctx;
	struct blk_ptr tmp = {0};
	struct pool_bpent *e = pool_bpent_new(&p->p_space_blocks, &tmp, 0);
	if (!e)
		return -ENOMEM;
	/* exactly one allocation, from the reserve if need be, as space.h asks */
	int rc = pool_write_block(p, image, image_bytes, BLK_COMPRESS_LZ4, SPACE_CLASS_RESERVED,
	                          POOL_BT_SPACE, level, fill, false, bp_out);
	if (rc != 0) {
		pool_bpent_free(e);
		return rc;
	}
	e->be_bp = *bp_out;
	pool_bpmap_insert(&p->p_space_blocks, e);
	return 0;
}

/* The allocator has freed bp itself (space.h): only forget it. */
static void pool_space_forget(void *ctx, const struct blk_ptr *bp)
{
	struct pool *p = ctx;
	pool_bpmap_remove(&p->p_space_blocks, bp);
}

const struct space_store pool_space_store_ops = {NULL, pool_space_write, pool_space_forget};
