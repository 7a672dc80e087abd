/* pool_check.c: walking every block of the pool's trees (pool_check; a destroy step's reads,
 * pool_destroy.c), the space figures and the status report.
 *
 * A walk (struct pool_walk, set as p_walk under p_lock for its whole duration) gives the trees a
 * block cache of its own: while it is set, the MOS's and the datasets' bs_get serve blocks only
 * from the walk's cache, so that every node a walk reaches is read from disk once, through
 * pool_walk_load, which (for a check) records it as live and reads every copy on every child and
 * verifies it against the pointer's checksum, rewriting bad copies from a good one; a destroy
 * step's walk (pool_walk_new_cache) only caches. The cache is
 * bounded (least recently used first out, held entries stay), so a walk of a tree larger than
 * memory still progresses: a retried scan finds its current path cached.
 *
 * Walks hold p_lock and read synchronously (R2 of pool.c): the engine thread never takes p_lock,
 * so this cannot deadlock, but other users of the pool wait meanwhile. Before a walk starts, it
 * waits for the writes of a sync in progress (under p_lock no new one can start), so every block
 * the in-memory trees reference is on disk.
 *
 * The online scrub (pool_scrub) is the same walk in slices: each slice takes p_lock at a moment
 * when no txg's writes are in flight (waiting for them first without the lock), sets p_walk,
 * scans one dataset's tree on from the key where the last slice stopped (btree_scan's resume,
 * which a check also uses after each load) until about a slice's worth of copies is verified,
 * runs the queued verifications, clears p_walk and lets the lock go. Under p_lock the trees are
 * the current ones and every block they name is on disk and live (R4: nothing they name can have
 * been freed, let alone reused), so a copy found bad there is truly bad and rewriting it from a
 * good copy writes what every reader expects. The walk cache and the set of blocks seen survive
 * from slice to slice: a block is named by its pointer, checksum included, and never changes.
 * Between slices the trees change; entries added before the resume key are new blocks, written
 * whole, and the next scrub reads them. A dataset being destroyed is left (its tree is being
 * freed). After the file systems come their snapshots, oldest first, each slice beginning with a
 * look that the snapshot still exists (its blocks are live only while it does: a destroy between
 * slices frees them, and a block freed may be reused, so the walk of a destroyed snapshot
 * stops), then every dead-list and queued chain's chunks in one slice. The scrub checks no tree
 * structure and no allocator (that needs the whole pool at one instant): pool_check does.
 *
 * The online resilver. A scrub that ends with no problem, having left no dataset out, clears
 * the stale marks (as a check does), so a served pool's leaf that came back from missing writes
 * becomes current without stopping the service. Why every block it then holds is good: marks
 * are set only at import, so each stale child was stale, and written like any other (blk_vdev.c),
 * since before the scrub began. A block live at the end was either written after that, hence to
 * the stale child too, or live throughout, hence named by the same entry of the same tree from
 * before the scrub to its end (a block pointer never moves to another key: trees change by
 * copying nodes, which are new blocks, and entries keep their keys), and that entry was under or
 * after the resume key when the scrub's slice reached it, so the block was read on every child
 * and rewritten where bad; the rewrites on stale children are flushed before the marks go. The
 * metadata tree and the allocator's blocks are verified in the first slice, under the same
 * rule. The intent log's blocks are not walked: those written before the import are no longer
 * needed once a txg has been written since, and later ones went to every child.
 *
 * What pool_check counts as a problem: a tree that fails btree_check; a block with no good copy
 * (or a bad copy that cannot be rewritten); an entry an owner cannot parse or that names an
 * impossible block; the allocator's disagreements (double references, references to free space,
 * bad references, internal errors, and leaks unless a dataset had no owner to name its data
 * blocks); frees the allocator refused since import. Repaired copies are reported, not counted. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pool/pool_impl.h"

#define POOL_WALK_CACHE_BYTES (32ull << 20)
#define POOL_WALK_BATCH_BLOCKS 128u          /* blocks verified together */
#define POOL_WALK_BATCH_BYTES (32ull << 20) /* ...whose copies add up to at most this */

/* What a tree's blocks add up to: all of them, and those born after each of two txgs. */
struct pool_walk_sums {
	uint64_t su_total;
	uint64_t su_after[2]; /* txgs */
	uint64_t su_gt[2];    /* bytes of the blocks born after su_after[j] */
};

static void pool_walk_sums_add(void *arg, const struct blk_ptr *bp)
{
	struct pool_walk_sums *su = arg;
	su->su_total += bp->bp_asize;
	for (int j = 0; j < 2; j++)
		if (bp->bp_birth_txg > su->su_after[j])
			su->su_gt[j] += bp->bp_asize;
}

struct pool_walk {
	struct pool_bpmap w_cache; /* images of the nodes loaded */
	struct pool_bpmap w_seen;  /* nodes recorded (and verified) already */
	struct space *w_space;     /* check: the allocator whose check marks each live block */
	size_t w_nlive;            /* live blocks marked: nodes once, data as reported */
	/* check: data blocks born at or before this txg are left to the walk of the snapshot (or
	 * origin) that holds them as well, so that each is marked once (pool_snap.c) */
	uint64_t w_data_after;
	/* check: the blocks of the tree being walked add up here when set (pool_check_line) */
	struct pool_walk_sums *w_sums;
	bool w_record; /* check: every node reached goes into w_seen and is marked live */
	bool w_verify; /* check: read and verify every copy */
	pool_report_fn w_report;
	void *w_arg;
	int64_t w_problems;
	uint64_t w_repaired;
	uint64_t w_resilvered, w_resilvered_bytes; /* copies rewritten on stale children */
	/* the stale children written and not flushed yet: flushed once, before the marks go */
	struct blk_dev *w_unflushed[(POOL_MAX_TOPS + 1) * BLK_MIRROR_MAX];
	unsigned w_nunflushed;
	uint64_t w_blocks;
	uint64_t w_slice_bytes; /* scrub: copies queued or read in this slice */
	bool w_partial;         /* scrub: a dataset's tree was left (being destroyed, no owner) */
	/* blocks queued for verification (pool_walk_verify) */
	struct blk_ptr w_batch[POOL_WALK_BATCH_BLOCKS];
	unsigned w_nbatch;
	uint64_t w_batch_bytes; /* of their copies */
};

static void pool_walk_say(struct pool_walk *w, const char *fmt, ...) SH_PRINTF(2, 3);
static void pool_walk_say(struct pool_walk *w, const char *fmt, ...)
{
	if (!w->w_report)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	w->w_report(w->w_arg, line);
}

static int pool_walk_init(struct pool_walk *w, bool verify, pool_report_fn report, void *arg)
{
	memset(w, 0, sizeof(*w));
	pool_bpmap_init(&w->w_cache);
	pool_bpmap_init(&w->w_seen);
	w->w_record = true;
	w->w_verify = verify;
	w->w_report = report;
	w->w_arg = arg;
	return 0;
}

static void pool_walk_fini(struct pool_walk *w)
{
	pool_bpmap_fini(&w->w_cache);
	pool_bpmap_fini(&w->w_seen);
}

/* A live block, marked in the allocator's check as it is found (space_check reports double
 * references, references to free space and, at its end, leaks), so that no list of every block
 * of the pool is kept. */
static int pool_walk_live_add(struct pool_walk *w, const struct blk_ptr *bp)
{
	w->w_nlive++;
	if (!w->w_space)
		return 0; /* a scrub: no allocator check */
	return space_check_mark(w->w_space, bp->bp_vdev, bp->bp_offset, bp->bp_asize);
}

/* Notes that dev was written and not flushed. */
static void pool_walk_unflushed(struct pool_walk *w, struct blk_dev *dev)
{
	for (unsigned i = 0; i < w->w_nunflushed; i++)
		if (w->w_unflushed[i] == dev)
			return;
	if (w->w_nunflushed < SH_ARRAY_SIZE(w->w_unflushed))
		w->w_unflushed[w->w_nunflushed++] = dev; /* every leaf of the pool fits */
}

/* Flushes the stale children the walk wrote: their copies are durable before a check clears
 * the marks, which the next uberblock records. A failure is a problem (the marks stay). */
static void pool_walk_flush(struct pool *p, struct pool_walk *w)
{
	for (unsigned i = 0; i < w->w_nunflushed; i++) {
		int rc = blk_flush_sync(p->p_engine, w->w_unflushed[i]);
		if (rc != 0) {
			w->w_problems++;
			pool_walk_say(w, "leaf %s: the flush of its rewritten copies failed: %s",
			              blk_dev_path(w->w_unflushed[i]), sh_strerror(rc));
		}
	}
	w->w_nunflushed = 0;
}

/* One copy of a queued block: its read, then perhaps its rewrite. */
struct pool_walk_copy {
	struct blk_io wc_io;
	uint8_t *wc_buf; /* NULL: not read (a faulted child, or no memory) */
	bool wc_ok;      /* read and its checksum matched */
};

/* Verifies every queued block (pool_walk_verify): the copies of all of them are read at once
 * (the device's parallelism, not one read at a time), each checked against its pointer's
 * checksum, and the bad copies of a block with a good one rewritten from it, again all at once.
 * Rewrites on stale children are flushed at the end of the check (pool_walk_flush), the others
 * at the end of the batch. Returns -EIO when the last queued block has no good copy (a problem,
 * reported, as for every block without one), else 0. */
static int pool_walk_verify_batch(struct pool *p, struct pool_walk *w)
{
	unsigned nb = w->w_nbatch;
	w->w_nbatch = 0;
	w->w_batch_bytes = 0;
	if (nb == 0)
		return 0;
	struct pool_walk_copy *copies = mem_zalloc((size_t)nb * BLK_MIRROR_MAX * sizeof(*copies));
	int last_rc = 0;
	if (!copies) {
		w->w_problems++;
		pool_walk_say(w, "%u blocks not verified: no memory", nb);
		return 0;
	}
	/* 1. every copy of every block */
	struct blk_batch reads;
	blk_batch_init(&reads);
	for (unsigned i = 0; i < nb; i++) {
		const struct blk_ptr *bp = &w->w_batch[i];
		struct blk_vdev *vdev = pool_bp_vdev(p, bp);
		for (unsigned c = 0; c < blk_vdev_children(vdev); c++) {
			struct pool_walk_copy *wc = &copies[i * BLK_MIRROR_MAX + c];
			if (blk_vdev_child_faulted(vdev, c))
				continue; /* written around: stale until the next import's check */
			wc->wc_buf = blk_buf_alloc(bp->bp_asize);
			if (!wc->wc_buf) {
				/* unverified (and not rewritten): a problem, so a stale child's
				 * mark stays */
				w->w_problems++;
				pool_walk_say(w, "block vdev %u offset %" PRIu64 ": leaf %u not "
				                 "verified: no memory",
				              bp->bp_vdev, bp->bp_offset, c);
				continue;
			}
			wc->wc_io = (struct blk_io){.bi_op = BLK_IO_READ,
			                            .bi_dev = blk_vdev_child(vdev, c),
			                            .bi_offset = bp->bp_offset,
			                            .bi_buf = wc->wc_buf,
			                            .bi_len = bp->bp_asize};
			blk_batch_submit(&reads, p->p_engine, &wc->wc_io);
		}
	}
	(void)!blk_batch_wait(&reads); /* each copy's own status is in its io */
	/* 2. judge each block; rewrite the bad copies of those with a good one */
	struct blk_batch writes;
	blk_batch_init(&writes);
	for (unsigned i = 0; i < nb; i++) {
		const struct blk_ptr *bp = &w->w_batch[i];
		struct blk_vdev *vdev = pool_bp_vdev(p, bp);
		unsigned n = blk_vdev_children(vdev);
		struct pool_walk_copy *wcs = &copies[i * BLK_MIRROR_MAX];
		int good = -1;
		w->w_blocks++;
		for (unsigned c = 0; c < n; c++) {
			if (!wcs[c].wc_buf || wcs[c].wc_io.bi_status != 0)
				continue;
			uint8_t ck[16];
			blk_checksum(wcs[c].wc_buf, bp->bp_psize, ck);
			wcs[c].wc_ok = memcmp(ck, bp->bp_cksum, 16) == 0;
			if (wcs[c].wc_ok && good < 0)
				good = (int)c;
		}
		if (good < 0) {
			w->w_problems++;
			pool_walk_say(w,
			              "block vdev %u offset %" PRIu64 " birth %" PRIu64
			              " type %u: no good copy (%u cop%s)",
			              bp->bp_vdev, bp->bp_offset, bp->bp_birth_txg, bp->bp_type, n,
			              n == 1 ? "y" : "ies");
			if (i + 1 == nb)
				last_rc = -EIO;
			continue;
		}
		for (unsigned c = 0; c < n; c++) {
			if (wcs[c].wc_ok || !wcs[c].wc_buf)
				continue; /* good, or not read: faulted, or no memory */
			wcs[c].wc_io = (struct blk_io){.bi_op = BLK_IO_WRITE,
			                               .bi_dev = blk_vdev_child(vdev, c),
			                               .bi_offset = bp->bp_offset,
			                               .bi_buf = wcs[good].wc_buf,
			                               .bi_len = bp->bp_asize};
			wcs[c].wc_io.bi_status = 1; /* a rewrite submitted (0 or -errno when done) */
			blk_batch_submit(&writes, p->p_engine, &wcs[c].wc_io);
		}
	}
	(void)!blk_batch_wait(&writes); /* likewise */
	/* 3. the rewrites' outcome; those on current children flushed now */
	struct blk_dev *flush[(POOL_MAX_TOPS + 1) * BLK_MIRROR_MAX];
	unsigned nflush = 0;
	for (unsigned i = 0; i < nb; i++) {
		const struct blk_ptr *bp = &w->w_batch[i];
		struct blk_vdev *vdev = pool_bp_vdev(p, bp);
		for (unsigned c = 0; c < blk_vdev_children(vdev); c++) {
			struct pool_walk_copy *wc = &copies[i * BLK_MIRROR_MAX + c];
			if (wc->wc_ok || wc->wc_io.bi_op != BLK_IO_WRITE)
				continue;
			struct blk_dev *dev = wc->wc_io.bi_dev;
			int rc = wc->wc_io.bi_status;
			if (rc == 0 && blk_vdev_child_stale(vdev, c)) {
				/* a child that missed writes or was attached since: counted, not
				 * listed, flushed once at the end (a resilver's many) */
				pool_walk_unflushed(w, dev);
				w->w_resilvered++;
				w->w_resilvered_bytes += bp->bp_asize;
			} else if (rc == 0) {
				bool listed = false;
				for (unsigned k = 0; k < nflush && !listed; k++)
					listed = flush[k] == dev;
				if (!listed && nflush < SH_ARRAY_SIZE(flush))
					flush[nflush++] = dev;
				w->w_repaired++;
				pool_walk_say(w,
				              "repaired: block vdev %u offset %" PRIu64
				              " on leaf %u (%s)",
				              bp->bp_vdev, bp->bp_offset, c, blk_dev_path(dev));
			} else {
				w->w_problems++;
				pool_walk_say(w,
				              "block vdev %u offset %" PRIu64
				              ": leaf %u (%s) has a bad copy and cannot be rewritten: %s",
				              bp->bp_vdev, bp->bp_offset, c, blk_dev_path(dev),
				              sh_strerror(rc));
			}
		}
	}
	for (unsigned k = 0; k < nflush; k++) {
		int rc = blk_flush_sync(p->p_engine, flush[k]);
		if (rc != 0) {
			w->w_problems++;
			pool_walk_say(w, "leaf %s: the flush of its repaired copies failed: %s",
			              blk_dev_path(flush[k]), sh_strerror(rc));
		}
	}
	for (unsigned k = 0; k < nb * BLK_MIRROR_MAX; k++)
		mem_free(copies[k].wc_buf);
	mem_free(copies);
	return last_rc;
}

/* Queues bp for verification (pool_walk_verify_batch), running the queue when it is full; with
 * now, runs it at once and returns whether bp has a good copy (0, or -EIO: reported). */
static int pool_walk_verify(struct pool *p, struct pool_walk *w, const struct blk_ptr *bp,
                            bool now)
{
	uint64_t bytes = (uint64_t)bp->bp_asize * blk_vdev_children(pool_bp_vdev(p, bp));
	if (w->w_nbatch == POOL_WALK_BATCH_BLOCKS ||
	    (w->w_nbatch > 0 && w->w_batch_bytes + bytes > POOL_WALK_BATCH_BYTES))
		(void)pool_walk_verify_batch(p, w); /* its blocks' problems are reported */
	w->w_batch[w->w_nbatch++] = *bp;
	w->w_batch_bytes += bytes;
	w->w_slice_bytes += bytes;
	return now ? pool_walk_verify_batch(p, w) : 0;
}

int pool_walk_get(struct pool *p, const struct blk_ptr *bp, const void **image_out, void **hold_out)
{
	struct pool_bpent *e = pool_bpmap_find(&p->p_walk->w_cache, bp);
	if (!e || !e->be_img || e->be_bp.bp_lsize != bp->bp_lsize)
		return -SH_ENEEDBLOCK;
	e->be_holds++;
	*image_out = e->be_img;
	*hold_out = e;
	return 0;
}

void pool_walk_release(struct pool *p, void *hold)
{
	(void)p;
	struct pool_bpent *e = hold;
	VERIFY(e->be_holds > 0);
	e->be_holds--;
}

struct pool_walk *pool_walk_new_cache(void)
{
	struct pool_walk *w = mem_zalloc(sizeof(*w));
	if (w && pool_walk_init(w, false, NULL, NULL) != 0) {
		pool_walk_free(w);
		return NULL;
	}
	if (w)
		w->w_record = false;
	return w;
}

void pool_walk_free(struct pool_walk *w)
{
	if (!w)
		return;
	pool_walk_fini(w);
	mem_free(w);
}

/* btree_load_fn and the scans' loader: bp into the walk's cache, recorded once as live (check). */
int pool_walk_load(void *arg, const struct blk_ptr *bp)
{
	struct pool *p = arg;
	struct pool_walk *w = p->p_walk;
	if (!pool_bp_valid(p, bp))
		return -EIO;
	if (w->w_record && !pool_bpmap_find(&w->w_seen, bp)) {
		if (!pool_bpmap_add(&w->w_seen, bp, NULL) || pool_walk_live_add(w, bp) != 0)
			return -ENOMEM;
		if (w->w_verify) {
			int rc = pool_walk_verify(p, w, bp, true); /* a node: before its read */
			if (rc != 0)
				return rc;
		}
	}
	int rc = pool_bpmap_read(p, &w->w_cache, bp);
	if (rc == 0)
		pool_bpmap_trim(&w->w_cache, POOL_WALK_CACHE_BYTES);
	return rc;
}

/* A data block an owner reported. */
static int pool_walk_data_bp(void *arg, const struct blk_ptr *bp)
{
	struct pool *p = arg;
	struct pool_walk *w = p->p_walk;
	if (blk_ptr_is_hole(bp))
		return 0;
	if (w->w_sums)
		pool_walk_sums_add(w->w_sums, bp);
	if (bp->bp_birth_txg <= w->w_data_after)
		return 0;
	if (!pool_bp_valid(p, bp)) {
		if (!w->w_verify)
			return -EIO;
		w->w_problems++;
		pool_walk_say(
		    w, "an entry names an impossible block (vdev %u offset %" PRIu64 " size %u)",
		    bp->bp_vdev, bp->bp_offset, bp->bp_asize);
		return 0;
	}
	if (w->w_verify)
		(void)pool_walk_verify(p, w, bp, false); /* reported; still counts as referenced */
	return pool_walk_live_add(w, bp);
}

struct pool_walk_scan {
	struct pool *ws_pool;
	struct pool_ds *ws_ds;  /* whose owner names the entries' blocks */
	struct btree *ws_tree;  /* its tree, or one of its snapshots' */
	uint8_t ws_last[POOL_DS_KEY_MAX];
	uint32_t ws_last_len;
	bool ws_have_last;
	int ws_err;
	uint64_t ws_budget; /* scrub: stop after the entry that brings w_slice_bytes to this */
	bool ws_paused;     /* the scan stopped for its budget, not at the tree's end */
};

static bool pool_walk_scan_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                 uint32_t vlen)
{
	struct pool_walk_scan *ws = arg;
	struct pool_walk *w = ws->ws_pool->p_walk;
	if (klen > sizeof(ws->ws_last)) {
		ws->ws_err = -EIO;
		return false;
	}
	memcpy(ws->ws_last, key, klen);
	ws->ws_last_len = klen;
	ws->ws_have_last = true;
	int rc = ws->ws_ds->ds_ops->do_visit_blocks(ws->ws_ds->ds_owner, key, klen, val, vlen,
	                                            pool_walk_data_bp, ws->ws_pool);
	if (rc == 0) {
		if (ws->ws_budget > 0 && w->w_slice_bytes >= ws->ws_budget) {
			ws->ws_paused = true;
			return false;
		}
		return true;
	}
	if (rc == -EIO && w->w_verify) {
		w->w_problems++;
		pool_walk_say(w, "dataset %s: an entry does not parse", ws->ws_ds->ds_name);
		return true;
	}
	ws->ws_err = rc;
	return false;
}

/* The entries of ws's dataset through its owner's visitor, from after ws_last (all of them for a
 * fresh ws), loading what is missing; with a budget, until ws_paused. */
static int pool_walk_scan_run(struct pool *p, struct pool_walk_scan *ws)
{
	ws->ws_paused = false;
	for (;;) {
		struct blk_ptr missing;
		int rc = btree_scan(ws->ws_tree, ws->ws_have_last ? ws->ws_last : NULL,
		                    ws->ws_last_len, ws->ws_have_last, pool_walk_scan_visit, ws,
		                    &missing);
		if (rc == -SH_ENEEDBLOCK) {
			rc = pool_walk_load(p, &missing);
			if (rc == 0)
				continue;
		}
		return rc != 0 ? rc : ws->ws_err;
	}
}

/* A walk of ds's entries that stopped on rc: a problem, reported. */
static void pool_walk_entries_failed(struct pool_walk *w, const struct pool_ds *ds, int rc)
{
	w->w_problems++;
	pool_walk_say(w, "dataset %s: walking its entries: %s", ds->ds_name, sh_strerror(rc));
}

/* Every entry of tree (ds's, or a snapshot's of it) through ds's owner's visitor, loading what
 * is missing. */
static int pool_walk_entries(struct pool *p, struct pool_ds *ds, struct btree *tree)
{
	struct pool_walk_scan ws = {.ws_pool = p, .ws_ds = ds, .ws_tree = tree};
	return pool_walk_scan_run(p, &ws);
}

void pool_walk_wait_writes(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	while (p->p_writes_pending > 0)
		pthread_cond_wait(&p->p_state_cv, &p->p_state_lock);
	pthread_mutex_unlock(&p->p_state_lock);
}

/* ---------------------------------------------------------------------------------------------
 * Names of every dataset (for check) */

struct pool_names {
	char (*pn_names)[POOL_DS_NAME_MAX + 1];
	size_t pn_n, pn_cap;
	int pn_err;
};

static bool pool_names_visit(void *arg, const void *key, uint32_t klen, const void *val,
                             uint32_t vlen)
{
	(void)val;
	(void)vlen;
	struct pool_names *pn = arg;
	if (klen < 3 || memcmp(key, "ds/", 3) != 0)
		return false;
	if (klen - 3 > POOL_DS_NAME_MAX)
		return true;
	if (pn->pn_n == pn->pn_cap) {
		size_t cap = pn->pn_cap ? pn->pn_cap * 2 : 16;
		void *n = mem_realloc(pn->pn_names, cap * sizeof(*pn->pn_names));
		if (!n) {
			pn->pn_err = -ENOMEM;
			return false;
		}
		pn->pn_names = n;
		pn->pn_cap = cap;
	}
	memcpy(pn->pn_names[pn->pn_n], (const char *)key + 3, klen - 3);
	pn->pn_names[pn->pn_n][klen - 3] = '\0';
	pn->pn_n++;
	return true;
}

/* ---------------------------------------------------------------------------------------------
 * pool_check */

struct pool_check_walk {
	struct pool *cw_pool;
	struct pool_ds **cw_held;
	size_t cw_nheld;
	bool cw_leaks_countable; /* every tree could be walked whole, with its data blocks */
};

/* Under p_lock with p_walk set: tree t (ds's, or one of its snapshots') checked with its nodes
 * marked once and summed into su, then its entries through ds's owner, their data blocks summed
 * and marked when born after mark_after (the older ones are the predecessor's as well, whose walk
 * marks them: pool_snap.c), so that a block shared along a line is marked once. Returns 0, or an
 * error described in why (-ENOMEM stops the check). */
static int pool_check_tree(struct pool *p, struct pool_ds *ds, struct btree *t, uint64_t mark_after,
                           struct pool_walk_sums *su, char *why, size_t cap)
{
	struct pool_walk *w = p->p_walk;
	char tw[224];
	int rc = btree_check_nodes(t, pool_walk_load, p, pool_walk_sums_add, su, tw, sizeof(tw));
	if (rc != 0) {
		snprintf(why, cap, "tree: %s", tw);
		return rc;
	}
	w->w_data_after = mark_after;
	w->w_sums = su;
	rc = pool_walk_entries(p, ds, t);
	w->w_sums = NULL;
	w->w_data_after = 0;
	if (rc != 0)
		snprintf(why, cap, "walking its entries: %s", sh_strerror(rc));
	return rc;
}

/* Compares what a snapshot or file system records with what its walk found. */
static void pool_check_figure(struct pool_walk *w, const char *what, const char *name,
                              uint64_t recorded, uint64_t walked)
{
	if (recorded == walked)
		return;
	w->w_problems++;
	pool_walk_say(w, "%s: %s is %" PRIu64 " bytes, its blocks add up to %" PRIu64, name, what,
	              recorded, walked);
}

/* Under p_lock with p_walk set: head ds (its owner attached) and its snapshots, oldest first,
 * each tree walked as pool_check_tree says, its sums kept with the txgs of its predecessor
 * (p) and of the one before (pp); then every snapshot's REFER (all its blocks) and USED (the
 * blocks born after its predecessor that its successor N no longer holds: after(S, p) -
 * (after(N, pp) - after(N, p)), N's pp and p being S's p and S's own txg) and the file system's
 * REFER (at rest: nothing dirty, as its blocks are charged when a txg writes them) are compared
 * with what the walks found. Returns 0 or -ENOMEM; problems are reported. */
static int pool_check_line(struct pool *p, struct pool_ds *ds, bool *countable)
{
	struct pool_walk *w = p->p_walk;
	struct pool_snap_rec *recs = NULL;
	size_t n = 0;
	char why[256], name[POOL_SNAP_FULL_MAX + 16];
	int rc = pool_sn_list(p, ds->ds_id, &recs, &n);
	if (rc != 0) {
		w->w_problems++;
		pool_walk_say(w, "dataset %s: its snapshots cannot be listed: %s", ds->ds_name,
		              sh_strerror(rc));
		*countable = false;
		return rc == -ENOMEM ? rc : 0;
	}
	struct pool_walk_sums *sums = mem_zalloc((n + 1) * sizeof(*sums));
	bool *walked = mem_zalloc((n + 1) * sizeof(*walked));
	if (!sums || !walked) {
		rc = -ENOMEM;
		goto out;
	}
	/* tree i: snapshot i, then the file system itself (i = n) */
	for (size_t i = 0; i <= n; i++) {
		uint64_t prev = i > 0 ? recs[i - 1].sr_txg : ds->ds_origin_txg;
		uint64_t pprev = i > 1 ? recs[i - 2].sr_txg : ds->ds_origin_txg;
		sums[i].su_after[0] = pprev;
		sums[i].su_after[1] = prev;
		if (i < n)
			snprintf(name, sizeof(name), "snapshot %s@%s", ds->ds_name, recs[i].sr_name);
		else
			snprintf(name, sizeof(name), "dataset %s", ds->ds_name);
		bool owner = ds->ds_ops && ds->ds_ops->do_visit_blocks;
		struct btree *t = ds->ds_tree, *opened = NULL;
		if (i < n) {
			struct btree_config cfg;
			pool_ds_config(ds, &cfg);
			rc = btree_open(&cfg, &recs[i].sr_root, &opened);
			if (rc != 0)
				snprintf(why, sizeof(why), "its root: %s", sh_strerror(rc));
			t = opened;
		}
		if (rc == 0 && owner) {
			rc = pool_check_tree(p, ds, t, prev, &sums[i], why, sizeof(why));
		} else if (rc == 0) {
			const struct blk_ptr *root = i < n ? &recs[i].sr_root : &ds->ds_root;
			rc = btree_check(t, pool_walk_load, p, why, sizeof(why));
			if (rc == 0 && (btree_is_dirty(t) || !blk_ptr_is_hole(root)))
				pool_walk_say(w,
				              "%s: no owner: checked as a tree only (its data blocks "
				              "are not counted, nor are leaks)",
				              name);
			*countable = false;
		}
		btree_close(opened);
		if (rc == -ENOMEM)
			goto out;
		if (rc != 0) {
			w->w_problems++;
			pool_walk_say(w, "%s: %s", name, why);
			*countable = false;
			rc = 0;
			continue;
		}
		walked[i] = owner;
	}
	/* the figures */
	for (size_t i = 0; i <= n; i++) {
		if (!walked[i])
			continue;
		if (i == n) {
			/* only at rest: a change charges its blocks when its txg writes them */
			bool at_rest = !btree_is_dirty(ds->ds_tree) && ds->ds_nkills == 0 &&
			               !(ds->ds_ops->do_dirty_bytes &&
			                 ds->ds_ops->do_dirty_bytes(ds->ds_owner) > 0);
			snprintf(name, sizeof(name), "dataset %s", ds->ds_name);
			if (at_rest)
				pool_check_figure(w, "REFER", name,
				                  ds->ds_used_bytes < 0 ? 0
				                                        : (uint64_t)ds->ds_used_bytes,
				                  sums[i].su_total);
			continue;
		}
		snprintf(name, sizeof(name), "snapshot %s@%s", ds->ds_name, recs[i].sr_name);
		pool_check_figure(w, "REFER", name, recs[i].sr_refer, sums[i].su_total);
		if (!walked[i + 1])
			continue;
		uint64_t used = 0;
		rc = pool_snap_used(p, ds, recs, n, i, &used);
		if (rc == -ENOMEM)
			goto out;
		if (rc != 0) {
			rc = 0;
			continue; /* its chains' problems are reported with the chains */
		}
		uint64_t still = sums[i + 1].su_gt[0] - sums[i + 1].su_gt[1];
		uint64_t walked_used = sums[i].su_gt[1] >= still ? sums[i].su_gt[1] - still : 0;
		pool_check_figure(w, "USED", name, used, walked_used);
	}
out:
	mem_free(walked);
	mem_free(sums);
	mem_free(recs);
	return rc;
}

/* Under p_lock with p_walk set: every dead-list chain ("dl/": its entries are blocks snapshots
 * hold, marked by their walks) and every chain queued for freeing ("fq/": its entries are marked
 * here, nothing else holds them); each chunk is marked and verified, and the entries counted
 * against the chain's header. */
static int pool_check_chains(struct pool *p, const char *prefix, bool *countable)
{
	struct pool_walk *w = p->p_walk;
	struct pool_dl_chain *chains;
	size_t n;
	int rc = pool_dl_chains_all(p, prefix, &chains, &n);
	if (rc != 0) {
		w->w_problems++;
		pool_walk_say(w, "dead lists (%s): cannot be listed: %s", prefix, sh_strerror(rc));
		*countable = false;
		return rc == -ENOMEM ? rc : 0;
	}
	for (size_t c = 0; c < n; c++) {
		struct pool_dl_chain *dc = &chains[c];
		uint64_t entries = 0, bytes = 0, chunks = 0;
		struct blk_ptr at = dc->dc_head;
		while (!blk_ptr_is_hole(&at) && rc == 0) {
			struct pool_dl_chunk ck;
			void *hold;
			rc = pool_dl_chunk_read(p, &at, &ck, &hold);
			if (rc != 0)
				break;
			for (uint32_t i = 0; i < ck.ck_n && rc == 0; i++) {
				struct blk_ptr bp;
				if (pool_dl_chunk_entry(p, &ck, i, &bp) != 0) {
					rc = -EIO;
					break;
				}
				entries++;
				bytes += bp.bp_asize;
				if (dc->dc_flags & POOL_DL_F_FREE_ENTRIES)
					rc = pool_walk_data_bp(p, &bp);
			}
			chunks++;
			at = ck.ck_prev;
			pool_walk_release(p, hold);
		}
		if (rc == -ENOMEM)
			break;
		if (rc == 0 && (entries != dc->dc_entries || bytes != dc->dc_bytes ||
		                chunks != dc->dc_chunks))
			rc = -EILSEQ;
		if (rc != 0) {
			w->w_problems++;
			pool_walk_say(w,
			              "dead list chain %016" PRIx64 " (%s): %s (header: %" PRIu64
			              " entries, %" PRIu64 " bytes, %" PRIu64 " chunks; found %" PRIu64
			              ", %" PRIu64 ", %" PRIu64 ")",
			              dc->dc_seq, prefix,
			              rc == -EILSEQ ? "its header does not match" : sh_strerror(rc),
			              dc->dc_entries, dc->dc_bytes, dc->dc_chunks, entries, bytes,
			              chunks);
			*countable = false;
			rc = 0;
		}
	}
	mem_free(chains);
	return rc;
}

/* space_check's visitor, under p_lock with p_walk set: every tree and every data block its
 * owner names, each block marked live as it is found; the allocator's own blocks verified (it
 * marks those itself). Returns 0, or -ENOMEM (the check stops). */
static int pool_check_walk_all(void *arg, struct space *sp)
{
	struct pool_check_walk *cw = arg;
	struct pool *p = cw->cw_pool;
	struct pool_walk *w = p->p_walk;
	w->w_space = sp;
	char why[256];
	int rc = btree_check(p->p_mos, pool_walk_load, p, why, sizeof(why));
	if (rc == -ENOMEM)
		return rc;
	if (rc != 0) {
		w->w_problems++;
		pool_walk_say(w, "metadata tree: %s", why);
		cw->cw_leaks_countable = false;
	}
	for (size_t i = 0; i < cw->cw_nheld; i++) {
		struct pool_ds *ds = cw->cw_held[i];
		if (!ds->ds_queued) {
			rc = pool_check_line(p, ds, &cw->cw_leaks_countable);
			if (rc != 0)
				return rc;
			continue;
		}
		/* being destroyed: what is left of its tree */
		struct pool_walk_sums su = {0};
		bool owner = ds->ds_ops && ds->ds_ops->do_visit_blocks;
		if (owner)
			rc = pool_check_tree(p, ds, ds->ds_tree, ds->ds_prev_snap_txg, &su, why,
			                     sizeof(why));
		else
			rc = btree_check(ds->ds_tree, pool_walk_load, p, why, sizeof(why));
		if (rc == -ENOMEM)
			return rc;
		if (rc != 0) {
			w->w_problems++;
			pool_walk_say(w, "dataset %s: %s", ds->ds_name, why);
			cw->cw_leaks_countable = false;
		} else if (!owner && (btree_is_dirty(ds->ds_tree) || !blk_ptr_is_hole(&ds->ds_root))) {
			pool_walk_say(w,
			              "dataset %s: no owner: checked as a tree only (its data blocks are "
			              "not counted, nor are leaks)",
			              ds->ds_name);
			cw->cw_leaks_countable = false;
		}
	}
	rc = pool_check_chains(p, "dl/", &cw->cw_leaks_countable);
	if (rc == 0)
		rc = pool_check_chains(p, "fq/", &cw->cw_leaks_countable);
	if (rc != 0)
		return rc;
	for (size_t b = 0; b < p->p_space_blocks.bm_nbuckets; b++) {
		for (struct pool_bpent *e = p->p_space_blocks.bm_buckets[b]; e; e = e->be_next) {
			if (pool_bp_valid(p, &e->be_bp))
				(void)pool_walk_verify(p, w, &e->be_bp, false); /* reported */
		}
	}
	return 0;
}

void pool_fmt_bytes(char *buf, size_t cap, uint64_t b)
{
	static const char units[] = "BKMGTPE";
	double v = (double)b;
	unsigned u = 0;
	while (v >= 1024.0 && u + 1 < sizeof(units) - 1) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 "B", b);
	else
		snprintf(buf, cap, "%.1f%c", v, units[u]);
}

/* The pool property that records the last check's outcome, for status (zpool status's scan). */
#define POOL_CHECK_PROP "last_check"

/* Records a finished check in POOL_CHECK_PROP (durable with the next txg). A failure to record
 * it is only logged: the check's result stands. */
static void pool_check_record(struct pool *p, const struct pool_walk *w, const char *kind,
                              uint64_t started_ns, uint64_t elapsed_ns)
{
	time_t at = (time_t)(started_ns / 1000000000u);
	struct tm tm;
	char when[32] = "?";
	if (gmtime_r(&at, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	char bytes[16];
	pool_fmt_bytes(bytes, sizeof(bytes), w->w_resilvered_bytes);
	char text[POOL_PROP_VALUE_MAX + 1];
	snprintf(text, sizeof(text),
	         "%s%s, %.1f s: %" PRIu64 " blocks, %" PRIu64 " copies repaired, %" PRIu64
	         " resilvered (%s), %" PRId64 " problem%s",
	         kind, when, (double)elapsed_ns / 1e9, w->w_blocks, w->w_repaired, w->w_resilvered,
	         bytes, w->w_problems, w->w_problems == 1 ? "" : "s");
	int rc = pool_prop_set(p, POOL_CHECK_PROP, text);
	if (rc != 0)
		log_warn("pool %s: cannot record the check's outcome: %s", p->p_name,
		         sh_strerror(rc));
}

/* Every dataset of the pool, held (*held_out, mem_free'd by the caller after
 * pool_walk_rele_all_locked), with its owner attached where one can be: those named in the
 * metadata tree and those being destroyed (loaded, with their owners, until done). A dataset that
 * cannot be loaded is a problem, reported. */
static int pool_walk_hold_all(struct pool *p, struct pool_walk *w, struct pool_ds ***held_out,
                              size_t *nheld_out)
{
	struct pool_names pn = {0};
	struct pool_ds **held = NULL;
	size_t nheld = 0;
	pool_lock(p);
	int rc = btree_scan(p->p_mos, "ds/", 3, false, pool_names_visit, &pn, NULL);
	if (rc == 0)
		rc = pn.pn_err;
	size_t nqueued = 0;
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next)
		nqueued += ds->ds_queued;
	held = rc == 0 ? mem_zalloc((pn.pn_n + nqueued + 1) * sizeof(*held)) : NULL;
	if (rc == 0 && !held)
		rc = -ENOMEM;
	for (struct pool_ds *ds = p->p_datasets; rc == 0 && ds; ds = ds->ds_next) {
		if (ds->ds_queued) {
			ds->ds_refs++;
			held[nheld++] = ds;
		}
	}
	pool_unlock(p);
	for (size_t i = 0; rc == 0 && i < pn.pn_n; i++) {
		struct pool_ds *ds;
		int r = pool_ds_open(p, pn.pn_names[i], &ds);
		if (r == -EBUSY)
			continue; /* being destroyed */
		if (r != 0) {
			w->w_problems++;
			pool_walk_say(w, "dataset %s: cannot be loaded: %s", pn.pn_names[i],
			              sh_strerror(r));
			continue;
		}
		held[nheld++] = ds;
		(void)pool_ds_attach_owner(p, ds);
	}
	mem_free(pn.pn_names);
	*held_out = held;
	*nheld_out = nheld;
	return rc;
}

static void pool_walk_rele_all_locked(struct pool_ds **held, size_t nheld)
{
	for (size_t i = 0; i < nheld; i++)
		pool_ds_rele_locked(held[i]);
}

int64_t pool_check(struct pool *p, pool_report_fn report, void *arg)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	uint64_t started_ns = clock_realtime_ns(), started_mono = clock_monotonic_ns();
	struct pool_walk *w = mem_zalloc(sizeof(*w));
	struct pool_ds **held = NULL;
	size_t nheld = 0;
	int64_t result;
	int rc;
	if (!w)
		return -ENOMEM;
	rc = pool_walk_init(w, true, report, arg);
	if (rc != 0)
		goto out;
	/* 1. Every dataset, held and with its owner where one can be attached. */
	rc = pool_walk_hold_all(p, w, &held, &nheld);
	if (rc != 0)
		goto out;
	/* 2. The walk, under the lock. */
	pool_lock(p);
	pool_walk_wait_writes(p);
	p->p_walk = w;
	struct pool_check_walk cw = {.cw_pool = p, .cw_held = held, .cw_nheld = nheld,
	                              .cw_leaks_countable = true};
	struct space_check_report sr;
	rc = space_check(p->p_space, pool_check_walk_all, &cw, &sr);
	w->w_space = NULL;
	if (rc != 0)
		goto out_locked;
	bool leaks_countable = cw.cw_leaks_countable;
	int64_t space_problems =
	    (int64_t)(sr.cr_double_refs + sr.cr_unalloc_refs + sr.cr_bad_refs +
	              sr.cr_internal_errors + (leaks_countable ? sr.cr_leaked_extents : 0));
	if (sr.cr_double_refs || sr.cr_unalloc_refs || sr.cr_bad_refs || sr.cr_internal_errors ||
	    (leaks_countable && sr.cr_leaked_extents))
		pool_walk_say(w,
		              "space: %" PRIu64 " leaked extents (%" PRIu64 " bytes), %" PRIu64
		              " double references, %" PRIu64 " references to free space, %" PRIu64
		              " bad references, %" PRIu64 " internal errors; first: %s",
		              sr.cr_leaked_extents, sr.cr_leaked_bytes, sr.cr_double_refs,
		              sr.cr_unalloc_refs, sr.cr_bad_refs, sr.cr_internal_errors,
		              sr.cr_first);
	w->w_problems += space_problems;
	if (p->p_free_errors > 0) {
		pool_walk_say(w, "%" PRIu64 " frees were refused by the allocator since import",
		              p->p_free_errors);
		w->w_problems++;
	}
	(void)pool_walk_verify_batch(p, w); /* the blocks still queued; reported */
	pool_walk_flush(p, w);
	if (w->w_resilvered > 0)
		pool_walk_say(w,
		              "resilvered: %" PRIu64 " copies (%" PRIu64
		              " bytes) rewritten on stale leaves",
		              w->w_resilvered, w->w_resilvered_bytes);
	pool_walk_say(w,
	              "checked %" PRIu64 " blocks (%zu live), repaired %" PRIu64 " copies, %" PRId64
	              " problems",
	              w->w_blocks, w->w_nlive, w->w_repaired, w->w_problems);
	/* Every copy on every child that is not faulted is good now: stale ones are current. */
	if (w->w_problems == 0)
		pool_stale_clear_locked(p);
	rc = 0;
out_locked:
	p->p_walk = NULL;
	pool_walk_rele_all_locked(held, nheld);
	pool_unlock(p);
	if (rc == 0)
		pool_check_record(p, w, "", started_ns, clock_monotonic_ns() - started_mono);
out:
	result = rc != 0 ? rc : w->w_problems;
	mem_free(held);
	pool_walk_fini(w);
	mem_free(w);
	return result;
}

/* ---------------------------------------------------------------------------------------------
 * The online scrub */

#define POOL_SCRUB_SLICE_BYTES (2ull << 20)
#define POOL_SCRUB_THREAD_PAUSE_MS 5u

/* Takes p_lock at a moment when no txg's writes are in flight: every block the trees name is
 * then on disk, and none can start before the lock is let go (phase 1 needs it). */
static void pool_scrub_lock(struct pool *p)
{
	for (;;) {
		pool_lock(p);
		pthread_mutex_lock(&p->p_state_lock);
		bool writing = p->p_writes_pending > 0;
		pthread_mutex_unlock(&p->p_state_lock);
		if (!writing)
			return;
		pool_unlock(p);
		pool_walk_wait_writes(p);
	}
}

/* Publishes the walk's figures for pool_status_print. */
static void pool_scrub_progress(struct pool *p, const struct pool_walk *w)
{
	pthread_mutex_lock(&p->p_state_lock);
	p->p_scrub_blocks = w->w_blocks;
	p->p_scrub_repaired = w->w_repaired;
	p->p_scrub_problems = w->w_problems;
	pthread_mutex_unlock(&p->p_state_lock);
}

static void pool_scrub_pause(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
	while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* The metadata tree and the allocator's own blocks: small, in one slice. */
static int pool_scrub_meta(struct pool *p, struct pool_walk *w)
{
	char why[256];
	pool_scrub_lock(p);
	p->p_walk = w;
	int rc = btree_check(p->p_mos, pool_walk_load, p, why, sizeof(why));
	if (rc != 0 && rc != -ENOMEM) {
		w->w_problems++;
		pool_walk_say(w, "metadata tree: %s", why);
		rc = 0;
	}
	for (size_t b = 0; rc == 0 && b < p->p_space_blocks.bm_nbuckets; b++) {
		for (struct pool_bpent *e = p->p_space_blocks.bm_buckets[b]; e; e = e->be_next) {
			if (pool_bp_valid(p, &e->be_bp))
				(void)pool_walk_verify(p, w, &e->be_bp, false); /* reported */
		}
	}
	(void)pool_walk_verify_batch(p, w);
	p->p_walk = NULL;
	pool_unlock(p);
	return rc;
}

/* One dataset's entries, a slice at a time. Returns 0, -ECANCELED or -ENOMEM. */
static int pool_scrub_ds(struct pool *p, struct pool_walk *w, struct pool_ds *ds,
                         const struct pool_scrub_opts *o)
{
	struct pool_walk_scan ws = {
	    .ws_pool = p, .ws_ds = ds, .ws_tree = ds->ds_tree, .ws_budget = o->so_slice_bytes};
	for (;;) {
		if (atomic_load(&p->p_scrub_cancel))
			return -ECANCELED;
		pool_scrub_lock(p);
		if (ds->ds_destroying || !ds->ds_ops || !ds->ds_ops->do_visit_blocks) {
			pool_unlock(p); /* being destroyed, or no owner to name its data blocks */
			w->w_partial = true;
			return 0;
		}
		p->p_walk = w;
		w->w_slice_bytes = 0;
		int rc = pool_walk_scan_run(p, &ws);
		(void)pool_walk_verify_batch(p, w); /* reported */
		p->p_walk = NULL;
		pool_unlock(p);
		pool_scrub_progress(p, w);
		if (rc == -ENOMEM)
			return rc;
		if (rc != 0) {
			pool_walk_entries_failed(w, ds, rc);
			return 0;
		}
		if (!ws.ws_paused)
			return 0;
		pool_scrub_pause(o->so_pause_ms);
	}
}

/* Under p_lock: whether head_id's snapshot at txg is still the one with id (a destroy between
 * slices frees its blocks: the scrub leaves it then). */
static bool pool_scrub_snap_alive(struct pool *p, uint64_t head_id, uint64_t txg, uint64_t id)
{
	struct pool_snap_rec *recs;
	size_t n;
	bool alive = false;
	if (pool_sn_list(p, head_id, &recs, &n) != 0)
		return false;
	for (size_t i = 0; i < n && !alive; i++)
		alive = recs[i].sr_txg == txg && recs[i].sr_id == id;
	mem_free(recs);
	return alive;
}

/* The snapshots of head ds, oldest first, a slice at a time as pool_scrub_ds does: each slice
 * first makes sure its snapshot still exists (its blocks are live only while it does); the data
 * blocks older than the snapshot before it were verified with that one (w_data_after). Returns
 * 0, -ECANCELED or -ENOMEM. */
static int pool_scrub_snapshots(struct pool *p, struct pool_walk *w, struct pool_ds *ds,
                                const struct pool_scrub_opts *o)
{
	struct pool_snap_rec *recs = NULL;
	size_t n = 0;
	pool_lock(p);
	int rc = ds->ds_ops && ds->ds_ops->do_visit_blocks ? pool_sn_list(p, ds->ds_id, &recs, &n)
	                                                   : 0;
	pool_unlock(p);
	if (rc != 0)
		return rc == -ENOMEM ? rc : 0; /* reported by a check */
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct btree_config cfg;
		struct btree *t = NULL;
		pool_ds_config(ds, &cfg);
		if (btree_open(&cfg, &recs[i].sr_root, &t) != 0) {
			w->w_partial = true;
			continue;
		}
		struct pool_walk_scan ws = {
		    .ws_pool = p, .ws_ds = ds, .ws_tree = t, .ws_budget = o->so_slice_bytes};
		for (;;) {
			if (atomic_load(&p->p_scrub_cancel)) {
				rc = -ECANCELED;
				break;
			}
			pool_scrub_lock(p);
			if (!pool_scrub_snap_alive(p, ds->ds_id, recs[i].sr_txg, recs[i].sr_id)) {
				pool_unlock(p); /* destroyed meanwhile: its blocks are no longer live */
				break;
			}
			p->p_walk = w;
			w->w_slice_bytes = 0;
			w->w_data_after = i > 0 ? recs[i - 1].sr_txg : ds->ds_origin_txg;
			int src = pool_walk_scan_run(p, &ws);
			w->w_data_after = 0;
			(void)pool_walk_verify_batch(p, w); /* reported */
			p->p_walk = NULL;
			pool_unlock(p);
			pool_scrub_progress(p, w);
			if (src == -ENOMEM) {
				rc = src;
				break;
			}
			if (src != 0) {
				w->w_problems++;
				pool_walk_say(w, "snapshot %s@%s: walking its entries: %s", ds->ds_name,
				              recs[i].sr_name, sh_strerror(src));
				break;
			}
			if (!ws.ws_paused)
				break;
			pool_scrub_pause(o->so_pause_ms);
		}
		btree_close(t);
	}
	mem_free(recs);
	return rc;
}

/* Every dead-list and queued chain's chunks, read and verified in one slice. */
static int pool_scrub_chains(struct pool *p, struct pool_walk *w)
{
	bool countable = true;
	pool_scrub_lock(p);
	p->p_walk = w;
	int rc = pool_check_chains(p, "dl/", &countable);
	if (rc == 0)
		rc = pool_check_chains(p, "fq/", &countable);
	(void)pool_walk_verify_batch(p, w);
	p->p_walk = NULL;
	pool_unlock(p);
	return rc;
}

int64_t pool_scrub(struct pool *p, const struct pool_scrub_opts *opts, pool_report_fn report,
                   void *arg)
{
	struct pool_scrub_opts o = opts ? *opts : (struct pool_scrub_opts){0};
	if (o.so_slice_bytes == 0)
		o.so_slice_bytes = POOL_SCRUB_SLICE_BYTES;
	uint64_t started_ns = clock_realtime_ns(), started_mono = clock_monotonic_ns();
	struct pool_walk *w = mem_zalloc(sizeof(*w));
	struct pool_ds **held = NULL;
	size_t nheld = 0;
	if (!w)
		return -ENOMEM;
	int rc = pool_walk_init(w, true, report, arg);
	if (rc == 0)
		rc = pool_walk_hold_all(p, w, &held, &nheld);
	if (rc == 0)
		rc = pool_scrub_meta(p, w);
	pool_scrub_progress(p, w);
	for (size_t i = 0; rc == 0 && i < nheld; i++)
		rc = pool_scrub_ds(p, w, held[i], &o);
	for (size_t i = 0; rc == 0 && i < nheld; i++)
		if (!held[i]->ds_queued)
			rc = pool_scrub_snapshots(p, w, held[i], &o);
	if (rc == 0)
		rc = pool_scrub_chains(p, w);
	pool_lock(p);
	pool_walk_flush(p, w); /* copies rewritten on stale children */
	/* The online resilver: every stale child is as good as a current one now (see the
	 * header), so the marks go, and the next txg records it. */
	bool resilvered =
	    rc == 0 && w->w_problems == 0 && !w->w_partial && pool_has_stale_locked(p);
	if (resilvered)
		pool_stale_clear_locked(p);
	pool_walk_rele_all_locked(held, nheld);
	pool_unlock(p);
	pool_scrub_progress(p, w);
	if (rc == 0) {
		if (w->w_resilvered > 0 || resilvered)
			pool_walk_say(w,
			              "resilvered: %" PRIu64 " copies (%" PRIu64
			              " bytes) rewritten on stale leaves%s",
			              w->w_resilvered, w->w_resilvered_bytes,
			              resilvered ? "; they are current now" : "");
		pool_walk_say(w,
		              "scrubbed %" PRIu64 " blocks, repaired %" PRIu64 " copies, %" PRId64
		              " problems",
		              w->w_blocks, w->w_repaired, w->w_problems);
		pool_check_record(p, w, "scrub ", started_ns, clock_monotonic_ns() - started_mono);
	}
	int64_t result = rc != 0 ? rc : w->w_problems;
	mem_free(held);
	pool_walk_fini(w);
	mem_free(w);
	return result;
}

static void pool_scrub_log_line(void *arg, const char *line)
{
	struct pool *p = arg;
	log_info("pool %s: scrub: %s", p->p_name, line);
}

static void *pool_scrub_main(void *arg)
{
	struct pool *p = arg;
	sh_thread_setup("shale-scrub", SH_THREAD_BACKGROUND);
	int64_t r = pool_scrub(p, &p->p_scrub_opts, pool_scrub_log_line, p);
	if (r < 0)
		log_warn("pool %s: the scrub stopped: %s", p->p_name, sh_strerror((int)r));
	else
		log_info("pool %s: the scrub is done: %" PRId64 " problems", p->p_name, r);
	pthread_mutex_lock(&p->p_state_lock);
	p->p_scrub_running = false;
	pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
	return NULL;
}

/* Joins a scrub thread that has ended (or, with wait, waits for the running one to end). */
static void pool_scrub_reap(struct pool *p, bool wait)
{
	pthread_mutex_lock(&p->p_state_lock);
	while (wait && p->p_scrub_running)
		pthread_cond_wait(&p->p_state_cv, &p->p_state_lock);
	bool join = p->p_scrub_thread_started && !p->p_scrub_running;
	if (join)
		p->p_scrub_thread_started = false;
	pthread_mutex_unlock(&p->p_state_lock);
	if (join)
		VERIFY(pthread_join(p->p_scrub_thread, NULL) == 0);
}

int pool_scrub_start(struct pool *p, const struct pool_scrub_opts *opts)
{
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	pool_scrub_reap(p, false);
	pthread_mutex_lock(&p->p_state_lock);
	int rc = 0;
	if (p->p_scrub_running || p->p_scrub_thread_started) {
		rc = -EALREADY;
	} else if (p->p_closing || p->p_stopping) {
		rc = -ESHUTDOWN;
	} else {
		atomic_store(&p->p_scrub_cancel, false);
		const struct pool_scrub_opts dflt = {.so_pause_ms = POOL_SCRUB_THREAD_PAUSE_MS};
		p->p_scrub_opts = opts ? *opts : dflt;
		p->p_scrub_running = true;
		p->p_scrub_started_ns = clock_realtime_ns();
		p->p_scrub_blocks = p->p_scrub_repaired = 0;
		p->p_scrub_problems = 0;
		rc = -pthread_create(&p->p_scrub_thread, NULL, pool_scrub_main, p);
		if (rc == 0)
			p->p_scrub_thread_started = true;
		else
			p->p_scrub_running = false;
	}
	pthread_mutex_unlock(&p->p_state_lock);
	return rc;
}

int pool_scrub_cancel(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	bool running = p->p_scrub_running;
	if (running)
		atomic_store(&p->p_scrub_cancel, true);
	pthread_mutex_unlock(&p->p_state_lock);
	return running ? 0 : -ENOENT;
}

bool pool_scrub_running(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	bool running = p->p_scrub_running;
	pthread_mutex_unlock(&p->p_state_lock);
	return running;
}

void pool_scrub_stop(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	atomic_store(&p->p_scrub_cancel, true); /* a scrub starting now stops at its first slice */
	pthread_mutex_unlock(&p->p_state_lock);
	pool_scrub_reap(p, true);
}

/* ---------------------------------------------------------------------------------------------
 * Space and status */

static void pool_space_locked(struct pool *p, uint64_t *total, uint64_t *free_now,
                              uint64_t *freeing, uint64_t *reserve)
{
	struct space_stats st;
	if (space_stats(p->p_space, SPACE_VDEV_ANY, &st) != 0)
		memset(&st, 0, sizeof(st));
	*total = st.st_total_bytes;
	*free_now = st.st_free_bytes;
	*freeing = st.st_freeing_bytes;
	*reserve = st.st_reserve_bytes;
}

void pool_space(struct pool *p, uint64_t *total_out, uint64_t *free_out, uint64_t *avail_out)
{
	pool_lock(p);
	pool_space_held(p, total_out, free_out, avail_out);
	pool_unlock(p);
}

void pool_space_held(struct pool *p, uint64_t *total_out, uint64_t *free_out, uint64_t *avail_out)
{
	uint64_t total, free_now, freeing, reserve;
	pool_space_locked(p, &total, &free_now, &freeing, &reserve);
	uint64_t free_all = free_now + freeing;
	if (total_out)
		*total_out = total;
	if (free_out)
		*free_out = free_all;
	if (avail_out)
		*avail_out = free_all > reserve ? free_all - reserve : 0;
}

bool pool_space_would_fit(struct pool *p, uint64_t bytes)
{
	uint64_t total, free_now, freeing, reserve;
	pool_space_locked(p, &total, &free_now, &freeing, &reserve);
	/* Only what is allocatable now counts (space being freed returns a txg later), and the
	 * dirty bytes (memory of dirty nodes and owners' buffers: more than they will take on disk)
	 * are spoken for already. */
	uint64_t need = bytes + pool_dirty_bytes(p) + reserve;
	return need >= bytes && need <= free_now;
}

int pool_space_wait(struct pool *p, uint64_t bytes, struct pool_waiter *w)
{
	uint64_t total, free_now, freeing, reserve;
	pool_space_locked(p, &total, &free_now, &freeing, &reserve);
	uint64_t need = bytes + pool_dirty_bytes(p) + reserve;
	if (freeing == 0 || need < bytes || need > free_now + freeing)
		return -ENOSPC;
	pthread_mutex_lock(&p->p_state_lock);
	pool_sync_request_locked(p, p->p_open_txg);
	w->pw_next = p->p_throttled;
	p->p_throttled = w;
	pthread_mutex_unlock(&p->p_state_lock);
	return POOL_THROTTLED;
}

static void pool_status_vdev(const struct pool_top *t, bool log, struct pool_status_vdev *sv)
{
	memset(sv, 0, sizeof(*sv));
	sv->sv_guid = t->pt_guid;
	sv->sv_mirror = t->pt_mirror;
	sv->sv_log = log;
	sv->sv_data_bytes = t->pt_data_bytes;
	sv->sv_nchildren = t->pt_nchildren;
	for (unsigned j = 0; j < t->pt_nchildren; j++) {
		struct pool_status_leaf *sl = &sv->sv_children[j];
		sl->sl_path = t->pt_leaves[j].pl_path;
		sl->sl_guid = t->pt_leaves[j].pl_guid;
		sl->sl_present = t->pt_leaves[j].pl_dev != NULL;
		for (unsigned c = 0; sl->sl_present && c < blk_vdev_children(t->pt_vdev); c++) {
			if (blk_vdev_child(t->pt_vdev, c) == t->pt_leaves[j].pl_dev)
				blk_vdev_stats(t->pt_vdev, c, &sl->sl_stats);
		}
	}
}

/* True when a child of the vdev is faulted (written around: blk_vdev.c) or stale (it missed
 * writes before this import and no check has rewritten its copies yet). */
static bool pool_status_vdev_faulted(const struct pool_status_vdev *sv)
{
	for (unsigned j = 0; j < sv->sv_nchildren; j++) {
		const struct pool_status_leaf *sl = &sv->sv_children[j];
		if (sl->sl_present && (sl->sl_stats.vs_faulted || sl->sl_stats.vs_stale))
			return true;
	}
	return false;
}

/* Counts the metadata tree's keys that start with cc_prefix (3 bytes: "ds/", "sn/"). */
struct pool_count {
	const char *cc_prefix;
	uint64_t cc_n;
};

static bool pool_count_visit(void *arg, const void *key, uint32_t klen, const void *val,
                             uint32_t vlen)
{
	(void)val;
	(void)vlen;
	struct pool_count *cc = arg;
	if (klen < 3 || memcmp(key, cc->cc_prefix, 3) != 0)
		return false;
	cc->cc_n++;
	return true;
}

void pool_status(struct pool *p, struct pool_status *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->ps_name, sizeof(st->ps_name), "%s", p->p_name);
	st->ps_guid = p->p_guid;
	st->ps_ntops = p->p_ntops;
	for (unsigned i = 0; i < p->p_ntops; i++)
		pool_status_vdev(&p->p_tops[i], false, &st->ps_tops[i]);
	st->ps_has_log = p->p_has_log;
	if (p->p_has_log)
		pool_status_vdev(&p->p_logtop, true, &st->ps_log);
	bool faulted = st->ps_has_log && pool_status_vdev_faulted(&st->ps_log);
	for (unsigned i = 0; i < st->ps_ntops; i++)
		faulted = faulted || pool_status_vdev_faulted(&st->ps_tops[i]);
	st->ps_state = pool_is_suspended(p)       ? POOL_STATE_SUSPENDED
	               : p->p_degraded || faulted ? POOL_STATE_DEGRADED
	                                          : POOL_STATE_ONLINE;
	arc_stats(p->p_arc, &st->ps_arc);
	uint64_t lookups = st->ps_arc.as_hits + st->ps_arc.as_misses;
	st->ps_arc_hit_rate = lookups ? (double)st->ps_arc.as_hits / (double)lookups : 0.0;
	ilog_stats(p->p_log, &st->ps_log_stats);
	st->ps_read_only = p->p_read_only;
	st->ps_log_unreplayed = p->p_log_unreplayed;
	st->ps_log_replayed = p->p_log_replayed;
	uint64_t total, free_now, freeing, reserve;
	pool_lock(p);
	pool_space_locked(p, &total, &free_now, &freeing, &reserve);
	st->ps_open_txg = p->p_open_txg;
	st->ps_dirty_bytes = pool_dirty_bytes(p);
	st->ps_dirty_max_bytes = p->p_opts.po_dirty_max_bytes;
	st->ps_dirty_sync_bytes = p->p_opts.po_dirty_sync_bytes;
	st->ps_free_errors = p->p_free_errors;
	st->ps_sealed_writes = p->p_sealed_writes;
	st->ps_sealed_bytes = atomic_load(&p->p_sealed_bytes);
	for (struct pool_ds *ds = p->p_datasets; ds && st->ps_nloaded < POOL_STATUS_DS_MAX;
	     ds = ds->ds_next) {
		struct pool_status_ds *sd = &st->ps_loaded[st->ps_nloaded++];
		snprintf(sd->sd_name, sizeof(sd->sd_name), "%s", ds->ds_name);
		if (ds->ds_queued) {
			sd->sd_destroying = true;
			sd->sd_destroy_stuck = ds->ds_destroy_failed;
			sd->sd_destroy_entries = ds->ds_root.bp_fill;
			continue;
		}
		if (ds->ds_ops && ds->ds_ops->do_stats) {
			ds->ds_ops->do_stats(ds->ds_owner, sd);
			sd->sd_has_stats = true;
		}
	}
	struct pool_count ds_count = {"ds/", 0}, sn_count = {"sn/", 0};
	/* the MOS is pinned (R9): only a damaged tree fails here */
	if (btree_scan(p->p_mos, "ds/", 3, false, pool_count_visit, &ds_count, NULL) == 0)
		st->ps_datasets = ds_count.cc_n;
	if (btree_scan(p->p_mos, "sn/", 3, false, pool_count_visit, &sn_count, NULL) == 0)
		st->ps_snapshots = sn_count.cc_n;
	st->ps_snap_free_queued = atomic_load(&p->p_fq_queued);
	pool_unlock(p);
	st->ps_total_bytes = total;
	st->ps_free_bytes = free_now + freeing;
	st->ps_avail_bytes = st->ps_free_bytes > reserve ? st->ps_free_bytes - reserve : 0;
	pthread_mutex_lock(&p->p_state_lock);
	st->ps_synced_txg = p->p_synced_txg;
	st->ps_syncs = p->p_syncs;
	st->ps_build_last_us = p->p_build_last_us;
	st->ps_build_max_us = p->p_build_max_us;
	pthread_mutex_unlock(&p->p_state_lock);
}

static const char *pool_state_name(enum pool_state s)
{
	switch (s) {
	case POOL_STATE_ONLINE: return "ONLINE";
	case POOL_STATE_DEGRADED: return "DEGRADED";
	default: return "SUSPENDED";
	}
}

static void pool_print_vdev(FILE *out, const struct pool_status_vdev *sv, unsigned index,
                            enum pool_state pool_st)
{
	unsigned present = 0;
	for (unsigned j = 0; j < sv->sv_nchildren; j++)
		present += sv->sv_children[j].sl_present;
	const char *vst = pool_st == POOL_STATE_SUSPENDED ? "SUSPENDED"
	                  : present < sv->sv_nchildren || pool_status_vdev_faulted(sv) ? "DEGRADED"
	                                                                                : "ONLINE";
	unsigned indent = 2;
	if (sv->sv_mirror) {
		char name[32];
		snprintf(name, sizeof(name), "mirror-%u", index);
		fprintf(out, "\t  %-28s %-9s\n", name, vst);
		indent = 4;
	}
	for (unsigned j = 0; j < sv->sv_nchildren; j++) {
		const struct pool_status_leaf *sl = &sv->sv_children[j];
		char name[64];
		if (sl->sl_path[0])
			snprintf(name, sizeof(name), "%s", sl->sl_path);
		else
			snprintf(name, sizeof(name), "mem-%016" PRIx64, sl->sl_guid);
		if (!sl->sl_present) {
			fprintf(out, "\t%*s%-*s %-9s %5s %5s %5s %8s  guid %" PRIu64 "\n", (int)indent,
			        "", 30 - (int)indent, name, "MISSING", "-", "-", "-", "-", sl->sl_guid);
			continue;
		}
		fprintf(out, "\t%*s%-*s %-9s %5" PRIu64 " %5" PRIu64 " %5" PRIu64 " %8" PRIu64 "\n",
		        (int)indent, "", 30 - (int)indent, name,
		        pool_st == POOL_STATE_SUSPENDED ? "SUSPENDED"
		        : sl->sl_stats.vs_faulted        ? "FAULTED"
		        : sl->sl_stats.vs_stale          ? "STALE"
		                                         : "ONLINE",
		        sl->sl_stats.vs_io_errors, sl->sl_stats.vs_checksum_errors,
		        sl->sl_stats.vs_repairs, sl->sl_stats.vs_reads + sl->sl_stats.vs_writes);
	}
}

int pool_status_print(struct pool *p, FILE *out)
{
	struct pool_status *st = mem_alloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pool_status(p, st);
	char total[16], free_b[16], avail[16], dirty[16], dirty_max[16], dirty_sync[16];
	char dirty_wait[16];
	char arc_size[16], arc_max[16];
	pool_fmt_bytes(total, sizeof(total), st->ps_total_bytes);
	pool_fmt_bytes(free_b, sizeof(free_b), st->ps_free_bytes);
	pool_fmt_bytes(avail, sizeof(avail), st->ps_avail_bytes);
	pool_fmt_bytes(dirty, sizeof(dirty), st->ps_dirty_bytes);
	pool_fmt_bytes(dirty_max, sizeof(dirty_max), st->ps_dirty_max_bytes);
	pool_fmt_bytes(dirty_sync, sizeof(dirty_sync), st->ps_dirty_sync_bytes);
	pool_fmt_bytes(dirty_wait, sizeof(dirty_wait), 2 * st->ps_dirty_max_bytes);
	pool_fmt_bytes(arc_size, sizeof(arc_size), st->ps_arc.as_size_bytes);
	pool_fmt_bytes(arc_max, sizeof(arc_max), st->ps_arc.as_max_bytes);
	fprintf(out, "  pool: %s\n", st->ps_name);
	fprintf(out, "    id: %" PRIu64 "\n", st->ps_guid);
	fprintf(out, " state: %s\n", pool_state_name(st->ps_state));
	if (st->ps_state == POOL_STATE_DEGRADED)
		fprintf(out, "status: One or more devices are missing, faulted or stale. The pool "
		             "continues without redundancy there. A faulted device's copies may be "
		             "stale: export the pool, mend the device and import it (it is then "
		             "STALE, read last); `shale pool scrub` (while served) or `shale pool "
		             "check` rewrites a stale device's copies and makes it ONLINE. `shale "
		             "pool replace` puts a new device in "
		             "the place of a missing or failing one.\n");
	else if (st->ps_state == POOL_STATE_SUSPENDED)
		fprintf(out, "status: A transaction group could not be written. Changes are "
		             "refused; export and "
		             "import the pool once the devices work.\n");
	if (st->ps_read_only)
		fprintf(out, "   txg: %" PRIu64 " durable (imported read only: nothing written)\n",
		        st->ps_synced_txg);
	else
		fprintf(out,
		        "   txg: %" PRIu64 " durable, %" PRIu64 " open, %" PRIu64
		        " written since import\n",
		        st->ps_synced_txg, st->ps_open_txg, st->ps_syncs);
	if (!st->ps_read_only) /* a read-only import writes no txg to time */
		fprintf(out,
		        "  sync: pool lock held %.1f ms by the last txg's serialization (longest "
		        "%.1f ms); %" PRIu64 " data blocks prepared before it\n",
		        (double)st->ps_build_last_us / 1000.0, (double)st->ps_build_max_us / 1000.0,
		        st->ps_sealed_writes);
	char last_check[POOL_PROP_VALUE_MAX + 1];
	pthread_mutex_lock(&p->p_state_lock);
	bool scrubbing = p->p_scrub_running;
	uint64_t scrub_started = p->p_scrub_started_ns, scrub_blocks = p->p_scrub_blocks;
	uint64_t scrub_repaired = p->p_scrub_repaired;
	int64_t scrub_problems = p->p_scrub_problems;
	pthread_mutex_unlock(&p->p_state_lock);
	if (scrubbing) {
		time_t at = (time_t)(scrub_started / 1000000000u);
		struct tm tm;
		char when[32] = "?";
		if (gmtime_r(&at, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
		fprintf(out,
		        "  scan: scrub in progress since %s: %" PRIu64 " blocks verified, %" PRIu64
		        " copies repaired, %" PRId64 " problems\n",
		        when, scrub_blocks, scrub_repaired, scrub_problems);
	} else if (pool_prop_get(p, POOL_CHECK_PROP, last_check, sizeof(last_check)) == 0) {
		/* a scrub's record starts with "scrub ", a check's with its date */
		if (strncmp(last_check, "scrub ", 6) == 0)
			fprintf(out, "  scan: last scrub %s\n", last_check + 6);
		else
			fprintf(out, "  scan: last check %s\n", last_check);
	}
	fprintf(out, "config:\n\n");
	fprintf(out, "\t%-30s %-9s %5s %5s %5s %8s\n", "NAME", "STATE", "IOERR", "CKSUM", "REPAIR",
	        "IOS");
	fprintf(out, "\t%-30s %-9s\n", st->ps_name, pool_state_name(st->ps_state));
	for (unsigned i = 0; i < st->ps_ntops; i++)
		pool_print_vdev(out, &st->ps_tops[i], i, st->ps_state);
	if (st->ps_has_log) {
		fprintf(out, "\tlogs\n");
		/* a mirrored log is mirror-N, numbered after the top-level vdevs, as in zpool */
		pool_print_vdev(out, &st->ps_log, st->ps_ntops, st->ps_state);
	}
	fprintf(out, "\n");
	fprintf(out,
	        " space: %s total, %s free, %s available, %s dirty (a txg at %s, or %s with the "
	        "sync thread idle; writers wait past %s)\n",
	        total, free_b, avail, dirty, dirty_max, dirty_sync, dirty_wait);
	fprintf(out,
	        "   arc: %s of %s, %" PRIu64 " hits, %" PRIu64 " misses (hit rate %.1f%%), %" PRIu64
	        " evictions\n",
	        arc_size, arc_max, st->ps_arc.as_hits, st->ps_arc.as_misses,
	        100.0 * st->ps_arc_hit_rate, st->ps_arc.as_evictions);
	if (st->ps_read_only)
		fprintf(out,
		        "   log: %" PRIu64
		        " record%s newer than the last txg, replayed by the next import\n",
		        st->ps_log_unreplayed, st->ps_log_unreplayed == 1 ? "" : "s");
	else
		fprintf(out,
		        "   log: %" PRIu64 " records, %" PRIu64 " flushes, %.1f records per flush, "
		        "%" PRIu64 " full; %" PRIu64 " replayed at import\n",
		        st->ps_log_stats.is_records, st->ps_log_stats.is_flushes,
		        st->ps_log_stats.is_records_per_flush, st->ps_log_stats.is_full,
		        st->ps_log_replayed);
	fprintf(out, "datasets: %" PRIu64 " (%u in memory); %" PRIu64 " snapshot%s", st->ps_datasets,
	        st->ps_nloaded, st->ps_snapshots, st->ps_snapshots == 1 ? "" : "s");
	if (st->ps_snap_free_queued > 0)
		fprintf(out, "; %u chain%s of blocks only destroyed snapshots held, being freed",
		        st->ps_snap_free_queued, st->ps_snap_free_queued == 1 ? "" : "s");
	fputc('\n', out);
	for (unsigned i = 0; i < st->ps_nloaded; i++) {
		const struct pool_status_ds *sd = &st->ps_loaded[i];
		if (sd->sd_destroying) {
			fprintf(out,
			        "\t%s/%s: destroyed, %" PRIu64 " tree entries left to free%s\n",
			        st->ps_name, sd->sd_name, sd->sd_destroy_entries,
			        sd->sd_destroy_stuck ? " (stuck: no owner to name its blocks)"
			                             : " (freeing in the background)");
			continue;
		}
		if (!sd->sd_has_stats) {
			fprintf(out, "\t%s/%s\n", st->ps_name, sd->sd_name);
			continue;
		}
		uint64_t lookups = sd->sd_icache_hits + sd->sd_icache_misses;
		char ddirty[16];
		pool_fmt_bytes(ddirty, sizeof(ddirty), sd->sd_dirty_bytes);
		fprintf(out,
		        "\t%s/%s: %s dirty; inode cache %" PRIu32 " entries, %" PRIu64
		        " hits, %" PRIu64 " misses (hit rate %.1f%%); %" PRIu64
		        " blocks of stable writes adopted; %" PRIu64
		        " removed files freed in the background (%" PRIu64 " blocks)%s\n",
		        st->ps_name, sd->sd_name, ddirty, sd->sd_icache_entries, sd->sd_icache_hits,
		        sd->sd_icache_misses,
		        lookups ? 100.0 * (double)sd->sd_icache_hits / (double)lookups : 0.0,
		        sd->sd_adopted_blocks, sd->sd_reap_files, sd->sd_reap_blocks,
		        sd->sd_freeing ? ", freeing more now" : "");
	}
	if (st->ps_free_errors)
		fprintf(out, "errors: %" PRIu64 " refused frees: run a check\n",
		        st->ps_free_errors);
	else
		fprintf(out, "errors: No known data errors\n");
	mem_free(st);
	return ferror(out) ? -EIO : 0;
}
