/* pool_claim.c: blocks written ahead of the log records that name them ("indirect" log records,
 * ZFS's WR_INDIRECT with dmu_sync), and their claim when the log is replayed (zil_claim).
 *
 * An owner that makes a large change stable does not copy its data into the log: it writes the
 * data as blocks of their own, in open context, and logs a small record that carries their block
 * pointers. This file gives it the three pool-side steps and the import-side one:
 *   pool_iblock_alloc   (under p_lock) allocates a prepared block's space and counts its write as
 *                       in flight (p_writes_pending) in the same locked section;
 *   pool_iblock_write   (no lock) writes every block of a batch, then flushes each top-level
 *                       vdev they went to unless it is the log's own vdev, whose flush after the
 *                       record covers them, and calls back once all of it is done;
 *   pool_iblock_free    (under p_lock) gives a block back in the txg being synced, or the open
 *                       one outside a sync;
 *   pool_iblock_claim   (import, under p_lock) marks a block a replayable record names as
 *                       allocated before the record is applied.
 *
 * Rules (the owner's side is in pool_fs.c's theory, "Indirect writes"):
 *   C1 An indirect block's write is counted in p_writes_pending from the locked section that
 *      allocated it until it completes. A sync whose phase 1 frees the block (its owner gave it
 *      up) therefore cannot reach its uberblock, and so cannot make the space reusable, before the
 *      stale write has landed: no later block can be overwritten by it. pool_check's walk waits
 *      for these writes too, so the blocks it verifies are on disk.
 *   C2 The block is on stable storage before its record can be: the record is appended only
 *      after pool_iblock_write's callback, which comes after the block's write and, for a vdev
 *      other than the log's, after that vdev's flush. On the log's vdev (a pool without a log
 *      device keeps its log on vdev 0), the log's own flush, issued after the record's batch is
 *      written and so after the block's write completed, covers the block as well.
 *   C3 Indirect blocks are not counted in any dataset's used bytes: they live for a txg or two.
 *
 * Claims at import. Replay (pool_log.c) visits records in log order; before it applies one that
 * names blocks, each is checked for plausibility, claimed (space_claim: the state of the
 * uberblock shows it free, since the owner frees the block in the very txg its record is tagged
 * with, and a block given up before its record was appended never got one), and read through the
 * cache with its checksum verified. The record is then applied (its blocks' bytes become dirty
 * data of the file) and the blocks are freed in the open txg, which the import's first txg makes
 * durable. No allocation happens during replay (blocks are allocated only by syncs, and the sync
 * thread starts after replay), so claiming each record's blocks just before it is applied is the
 * same as claiming every block first. A block that cannot be claimed (space in use: a damaged log
 * or allocator) or read (a bad checksum: its write was acknowledged only after the flush, so this
 * is corruption) is reported, counted in p_log_bad_blocks, and its record skipped. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "pool/pool_impl.h"

int pool_iblock_alloc(struct pool *p, const struct blk_prepared *prep, uint64_t birth_txg,
                      struct blk_ptr *bp_out)
{
	if (atomic_load(&p->p_suspended))
		return -EIO;
	uint32_t vdev;
	uint64_t off;
	int rc = space_alloc(p->p_space, SPACE_CLASS_NORMAL, SPACE_VDEV_ANY, prep->bw_asize, &vdev,
	                     &off);
	if (rc != 0)
		return rc;
	blk_ptr_fill(bp_out, prep, vdev, off, POOL_BT_DATA, 0, birth_txg, 1);
	pthread_mutex_lock(&p->p_state_lock);
	p->p_writes_pending++; /* C1 */
	pthread_mutex_unlock(&p->p_state_lock);
	return 0;
}

/* The end of one in-flight write counted by pool_iblock_alloc. */
static void pool_iblock_write_ended(struct pool *p)
{
	pthread_mutex_lock(&p->p_state_lock);
	VERIFY(p->p_writes_pending > 0);
	if (--p->p_writes_pending == 0)
		pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
}

void pool_iblock_unalloc(struct pool *p, const struct blk_ptr *bp)
{
	pool_iblock_free(p, bp);
	pool_iblock_write_ended(p);
}

void pool_iblock_free(struct pool *p, const struct blk_ptr *bp)
{
	/* Indirect blocks belong to no dataset's usage; a refusal is logged and counted there. */
	(void)pool_free_block(p, NULL, bp);
}

/* Engine thread: the batch is done (every write, then every flush). */
static void pool_iwrite_finish(struct pool_iwrite *iw)
{
	iw->iw_done(iw, atomic_load(&iw->iw_status));
}

static void pool_iwrite_flush_done(struct blk_vdev_io *vio)
{
	struct pool_iwrite *iw = vio->vi_arg;
	if (vio->vi_status != 0) {
		int zero = 0;
		(void)atomic_compare_exchange_strong(&iw->iw_status, &zero, vio->vi_status);
	}
	if (atomic_fetch_sub(&iw->iw_pending, 1) == 1)
		pool_iwrite_finish(iw);
}

/* Engine thread: one block written. */
static void pool_iwrite_block_done(void *arg, int status)
{
	struct pool_iwrite *iw = arg;
	struct pool *p = iw->iw_pool;
	if (status != 0) {
		int zero = 0;
		(void)atomic_compare_exchange_strong(&iw->iw_status, &zero, status);
		log_ratelimited(LOG_WARN, "pool %s: writing an indirect log block: %s", p->p_name,
		                sh_strerror(status));
	}
	/* The status is recorded before the write stops counting (a walk then sees it). */
	pool_iblock_write_ended(p);
	if (atomic_fetch_sub(&iw->iw_pending, 1) != 1)
		return;
	/* C2: flush every vdev written to but the log's (its flush follows the record). */
	unsigned nflush = 0;
	struct blk_vdev *seen[POOL_MAX_TOPS];
	if (atomic_load(&iw->iw_status) == 0) {
		for (unsigned i = 0; i < iw->iw_nblocks; i++) {
			struct blk_vdev *v = pool_bp_vdev(p, &iw->iw_bps[i]);
			bool dup = v == p->p_log_vdev;
			for (unsigned j = 0; j < nflush && !dup; j++)
				dup = seen[j] == v;
			if (!dup)
				seen[nflush++] = v;
		}
	}
	if (nflush == 0) {
		pool_iwrite_finish(iw);
		return;
	}
	atomic_store(&iw->iw_pending, nflush);
	for (unsigned j = 0; j < nflush; j++) {
		struct blk_vdev_io *vio = &iw->iw_flushes[j];
		memset(vio, 0, sizeof(*vio));
		vio->vi_op = BLK_IO_FLUSH;
		vio->vi_vdev = seen[j];
		vio->vi_done = pool_iwrite_flush_done;
		vio->vi_arg = iw;
		blk_vdev_submit(vio);
	}
}

void pool_iblock_write(struct pool *p, struct pool_iwrite *iw)
{
	/* The last write's completion may end the batch (and free iw) before the loop ends: only
	 * locals are read after a submission. */
	unsigned n = iw->iw_nblocks;
	const struct blk_ptr *bps = iw->iw_bps;
	const struct blk_prepared *preps = iw->iw_preps;
	VERIFY(n > 0);
	iw->iw_pool = p;
	atomic_store(&iw->iw_status, 0);
	atomic_store(&iw->iw_pending, n);
	for (unsigned i = 0; i < n; i++)
		blk_block_write(pool_bp_vdev(p, &bps[i]), &bps[i], &preps[i], false,
		                pool_iwrite_block_done, iw);
}

int pool_iblock_claim(struct pool *p, const struct blk_ptr *bp)
{
	if (blk_ptr_is_hole(bp) || !pool_bp_valid(p, bp) || bp->bp_type != POOL_BT_DATA)
		return -EINVAL;
	return space_claim(p->p_space, bp->bp_vdev, bp->bp_offset, bp->bp_asize);
}
