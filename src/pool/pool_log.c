/* pool_log.c: the pool's use of the intent log: framing records with their dataset, records that
 * wait in memory while the log is full (R7 of pool.c), commits, and replay at import (R5, R6),
 * with the claim of the blocks a record names before it is applied (pool_claim.c).
 *
 * Records waiting for log space (p_logq) keep LSN order: while any waits, a new record waits
 * behind it, and the sync thread appends them oldest first once the log has space. The log hands
 * out consecutive LSNs in append order and nobody else appends, so the LSN a waiting record will
 * get is known when it is queued (p_log_next_lsn counts them), and pool_log_append can return it
 * at once. A commit of a waiting record waits on p_commitq; once the record is in the log, the
 * sync thread passes the commit to ilog_commit.
 *
 * Locks: appending and draining hold p_lock (they change p_log_next_lsn and call ilog_append in
 * LSN order); p_logq, p_commitq, p_commit_ready and p_space_waiting also change under
 * p_state_lock, so pool_log_commit and the log's space callback (any thread, even the engine's)
 * need only that one. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "pool/pool_impl.h"

/* Any thread, no pool lock: the log freed space. */
void pool_log_space_cb(struct ilog_waiter *w, int status)
{
	struct pool *p = w->iw_arg;
	pthread_mutex_lock(&p->p_state_lock);
	p->p_space_waiting = false;
	if (status == 0)
		p->p_log_space_ready = true;
	pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
}

/* Under p_state_lock, after an append was refused: arrange to hear of free space. Returns true
 * when the waiting records should be retried now: there is space already, or the log has failed
 * (the retry's append then reports it and the waiting commits fail with it). */
static bool pool_log_want_space(struct pool *p)
{
	if (p->p_space_waiting)
		return false;
	int rc = ilog_wait_space(p->p_log, &p->p_space_waiter);
	if (rc == 0)
		p->p_space_waiting = true;
	return rc != 0;
}

int pool_log_append(struct pool *p, struct pool_ds *ds, uint16_t type, const void *payload,
                    uint32_t len, uint64_t *lsn_out)
{
	if (atomic_load(&p->p_suspended))
		return -EIO;
	if (len > POOL_LOG_PAYLOAD_MAX || (len > 0 && !payload))
		return len > POOL_LOG_PAYLOAD_MAX ? -EMSGSIZE : -EINVAL;
	uint32_t flen = len + POOL_LOG_FRAME_BYTES;
	uint64_t txg = p->p_open_txg;
	pthread_mutex_lock(&p->p_state_lock);
	bool waiting = p->p_logq_head != NULL;
	pthread_mutex_unlock(&p->p_state_lock);
	if (!waiting) {
		pool_put_le64(p->p_log_frame, ds->ds_id);
		if (len > 0)
			memcpy(p->p_log_frame + POOL_LOG_FRAME_BYTES, payload, len);
		uint64_t lsn;
		int rc = ilog_append(p->p_log, type, txg, p->p_log_frame, flen, &lsn);
		if (rc == 0) {
			VERIFY(lsn ==
			       p->p_log_next_lsn); /* R7: the pool is the log's only writer */
			pthread_mutex_lock(&p->p_state_lock);
			p->p_log_next_lsn++;
			pthread_mutex_unlock(&p->p_state_lock);
			*lsn_out = lsn;
			return 0;
		}
		if (rc != -EAGAIN)
			return rc;
	}
	/* The log is full (or records already wait): this one waits in memory, in order. */
	struct pool_logrec *rec = mem_alloc(sizeof(*rec) + flen);
	if (!rec)
		return -ENOMEM;
	rec->lr_next = NULL;
	rec->lr_txg = txg;
	rec->lr_type = type;
	rec->lr_len = flen;
	pool_put_le64(rec->lr_data, ds->ds_id);
	if (len > 0)
		memcpy(rec->lr_data + POOL_LOG_FRAME_BYTES, payload, len);
	pthread_mutex_lock(&p->p_state_lock);
	rec->lr_lsn = p->p_log_next_lsn++;
	if (p->p_logq_tail)
		p->p_logq_tail->lr_next = rec;
	else
		p->p_logq_head = rec;
	p->p_logq_tail = rec;
	if (pool_log_want_space(p))
		p->p_log_space_ready = true;
	/* Space comes back when a txg makes the records before it unnecessary. */
	pool_sync_request_locked(p, txg);
	pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
	*lsn_out = rec->lr_lsn;
	return 0;
}

int pool_log_commit(struct pool *p, uint64_t lsn, struct ilog_waiter *w)
{
	pthread_mutex_lock(&p->p_state_lock);
	if (lsn == ILOG_LSN_ALL)
		lsn = p->p_log_next_lsn - 1;
	if (lsn == 0 || lsn >= p->p_log_next_lsn) {
		pthread_mutex_unlock(&p->p_state_lock);
		return lsn == 0 && p->p_log_next_lsn == 1 ? ILOG_DONE : -EINVAL;
	}
	if (atomic_load(&p->p_suspended)) {
		pthread_mutex_unlock(&p->p_state_lock);
		return -EIO;
	}
	if (p->p_logq_head && lsn >= p->p_logq_head->lr_lsn) {
		w->iw_lsn = lsn;
		w->iw_next = p->p_commitq;
		p->p_commitq = w;
		pthread_mutex_unlock(&p->p_state_lock);
		return 0;
	}
	pthread_mutex_unlock(&p->p_state_lock);
	return ilog_commit(p->p_log, lsn, w);
}

/* Under p_state_lock: moves the commits whose records are all in the log to p_commit_ready. */
static void pool_log_commits_ready(struct pool *p)
{
	uint64_t first_waiting = p->p_logq_head ? p->p_logq_head->lr_lsn : UINT64_MAX;
	struct ilog_waiter **link = &p->p_commitq;
	while (*link) {
		struct ilog_waiter *w = *link;
		if (w->iw_lsn < first_waiting) {
			*link = w->iw_next;
			w->iw_next = p->p_commit_ready;
			p->p_commit_ready = w;
		} else {
			link = &w->iw_next;
		}
	}
}

void pool_log_drain(struct pool *p)
{
	pthread_mutex_lock(&p->p_lock);
	for (;;) {
		pthread_mutex_lock(&p->p_state_lock);
		struct pool_logrec *rec = p->p_logq_head;
		pthread_mutex_unlock(&p->p_state_lock);
		if (!rec)
			break;
		uint64_t lsn;
		int rc = ilog_append(p->p_log, rec->lr_type, rec->lr_txg, rec->lr_data, rec->lr_len,
		                     &lsn);
		if (rc == 0) {
			VERIFY(lsn == rec->lr_lsn);
			pthread_mutex_lock(&p->p_state_lock);
			p->p_logq_head = rec->lr_next;
			if (!p->p_logq_head)
				p->p_logq_tail = NULL;
			pool_log_commits_ready(p);
			pthread_mutex_unlock(&p->p_state_lock);
			mem_free(rec);
			continue;
		}
		if (rc == -EAGAIN) {
			pthread_mutex_lock(&p->p_state_lock);
			bool retry = pool_log_want_space(p);
			/* the records holding the space may belong to the open txg: sync it */
			pool_sync_request_locked(p, p->p_open_txg);
			pthread_mutex_unlock(&p->p_state_lock);
			if (retry)
				continue;
			break;
		}
		pthread_mutex_unlock(&p->p_lock);
		log_error("pool %s: appending waiting log records: %s", p->p_name, sh_strerror(rc));
		pool_log_cancel(p, rc == -ENOMEM ? -ENOMEM : -EIO);
		pthread_mutex_lock(&p->p_lock);
		break;
	}
	pthread_mutex_unlock(&p->p_lock);
	/* Hand the ready commits to the log, outside every pool lock (their callbacks may run). */
	pthread_mutex_lock(&p->p_state_lock);
	struct ilog_waiter *w = p->p_commit_ready;
	p->p_commit_ready = NULL;
	pthread_mutex_unlock(&p->p_state_lock);
	while (w) {
		struct ilog_waiter *next = w->iw_next;
		int rc = ilog_commit(p->p_log, w->iw_lsn, w);
		if (rc == ILOG_DONE)
			w->iw_done(w, 0);
		else if (rc < 0)
			w->iw_done(w, rc == -EINVAL ? -EIO : rc);
		w = next;
	}
}

void pool_log_cancel(struct pool *p, int status)
{
	pthread_mutex_lock(&p->p_state_lock);
	struct pool_logrec *rec = p->p_logq_head;
	struct ilog_waiter *w = p->p_commitq, *ready = p->p_commit_ready;
	p->p_logq_head = p->p_logq_tail = NULL;
	p->p_commitq = p->p_commit_ready = NULL;
	pthread_mutex_unlock(&p->p_state_lock);
	while (rec) {
		struct pool_logrec *next = rec->lr_next;
		mem_free(rec);
		rec = next;
	}
	for (int pass = 0; pass < 2; pass++) {
		struct ilog_waiter *list = pass == 0 ? ready : w;
		while (list) {
			struct ilog_waiter *next = list->iw_next;
			list->iw_done(list, status);
			list = next;
		}
	}
}

/* ---------------------------------------------------------------------------------------------
 * Replay */

struct pool_replay {
	struct pool *rp_pool;
	uint64_t rp_ub_txg;
	uint64_t rp_applied;
	uint64_t rp_skipped;
	uint64_t rp_orphans;
	uint64_t rp_bad;         /* records skipped for a block that could not be claimed or read */
	struct blk_ptr *rp_bps;  /* the blocks the record being replayed names */
	size_t rp_nbps, rp_cap;
};

uint64_t pool_log_bad_blocks(struct pool *p)
{
	pool_lock(p);
	uint64_t n = p->p_log_bad_blocks;
	pool_unlock(p);
	return n;
}

static int pool_replay_add_bp(void *arg, const struct blk_ptr *bp)
{
	struct pool_replay *rp = arg;
	if (rp->rp_nbps == rp->rp_cap) {
		size_t cap = rp->rp_cap ? rp->rp_cap * 2 : 16;
		struct blk_ptr *n = mem_realloc(rp->rp_bps, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		rp->rp_bps = n;
		rp->rp_cap = cap;
	}
	rp->rp_bps[rp->rp_nbps++] = *bp;
	return 0;
}

/* Frees the first n blocks of the record (claimed by pool_replay_claim). */
static void pool_replay_unclaim(struct pool *p, const struct blk_ptr *bps, size_t n)
{
	pool_lock(p);
	for (size_t i = 0; i < n; i++)
		pool_iblock_free(p, &bps[i]);
	pool_unlock(p);
}

/* Claims and verifies the blocks record lsn names (pool_claim.c). Returns 0 (all claimed: the
 * caller frees them after the record is applied), 1 (one could not be claimed or read: reported,
 * counted, none left claimed; skip the record), or -errno. */
static int pool_replay_claim(struct pool_replay *rp, struct pool_ds *ds, uint16_t type,
                             const void *rec, uint32_t rlen, uint64_t lsn)
{
	struct pool *p = rp->rp_pool;
	rp->rp_nbps = 0;
	if (!ds->ds_ops->do_replay_blocks)
		return 0;
	pool_lock(p);
	int rc = ds->ds_ops->do_replay_blocks(ds->ds_owner, type, rec, rlen, pool_replay_add_bp,
	                                      rp);
	pool_unlock(p);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < rp->rp_nbps; i++) {
		const struct blk_ptr *bp = &rp->rp_bps[i];
		const char *what = "claiming";
		pool_lock(p);
		rc = pool_iblock_claim(p, bp);
		pool_unlock(p);
		if (rc == 0) {
			what = "reading";
			rc = pool_block_read_sync(p, bp);
			if (rc != 0)
				i++; /* claimed: freed below with the others */
		}
		if (rc == 0)
			continue;
		log_error("pool %s: dataset %s: log record %" PRIu64 " names block vdev %u offset "
		          "%" PRIu64 " size %u; %s it: %s; the record is skipped",
		          p->p_name, ds->ds_name, lsn, bp->bp_vdev, bp->bp_offset, bp->bp_asize,
		          what, sh_strerror(rc));
		pool_replay_unclaim(p, rp->rp_bps, i);
		pool_lock(p);
		p->p_log_bad_blocks++;
		pool_unlock(p);
		rp->rp_bad++;
		rp->rp_nbps = 0;
		return 1;
	}
	return 0;
}

static int pool_replay_visit(void *arg, uint16_t type, uint64_t txg, uint64_t lsn,
                             const void *payload, uint32_t len)
{
	struct pool_replay *rp = arg;
	struct pool *p = rp->rp_pool;
	if (txg <= rp->rp_ub_txg) {
		rp->rp_skipped++; /* R5: the uberblock's state holds it */
		return 0;
	}
	if (len < POOL_LOG_FRAME_BYTES) {
		log_error("pool %s: log record %" PRIu64 " is too short", p->p_name, lsn);
		return -EIO;
	}
	uint64_t id = pool_get_le64(payload);
	struct pool_ds *ds;
	pool_lock(p);
	int rc = pool_ds_hold_by_id(p, id, &ds);
	pool_unlock(p);
	if (rc == -ENOENT) {
		/* its dataset was destroyed in a durable txg: nothing to apply it to */
		rp->rp_orphans++;
		return 0;
	}
	if (rc != 0)
		return rc;
	rc = pool_ds_attach_owner(p, ds);
	if (rc != 0 || !ds->ds_ops->do_replay) {
		log_error(
		    "pool %s: dataset %s has log records to replay and no owner to apply them",
		    p->p_name, ds->ds_name);
		rc = -ENOTSUP;
		goto out;
	}
	const uint8_t *rec = (const uint8_t *)payload + POOL_LOG_FRAME_BYTES;
	uint32_t rlen = len - POOL_LOG_FRAME_BYTES;
	rc = pool_replay_claim(rp, ds, type, rec, rlen, lsn);
	if (rc == 1) {
		rc = 0;
		goto out;
	}
	if (rc != 0) {
		log_error("pool %s: dataset %s: log record %" PRIu64 " (txg %" PRIu64
		          "): naming its blocks: %s",
		          p->p_name, ds->ds_name, lsn, txg, sh_strerror(rc));
		goto out;
	}
	for (;;) {
		struct blk_ptr missing;
		pool_lock(p);
		rc = ds->ds_ops->do_replay(ds->ds_owner, type, rec, rlen, &missing);
		pool_unlock(p);
		if (rc == -SH_EPARTIAL)
			continue; /* a step of a large truncation made: on with the rest */
		if (rc != -SH_ENEEDBLOCK)
			break;
		rc = pool_block_read_sync(p, &missing);
		if (rc != 0)
			break;
	}
	/* Applied (its blocks' bytes are the file's dirty data now) or failed: either way the
	 * claimed blocks are not needed any more. */
	pool_replay_unclaim(p, rp->rp_bps, rp->rp_nbps);
	rp->rp_nbps = 0;
	if (rc != 0)
		log_error("pool %s: dataset %s: replaying log record %" PRIu64 " (txg %" PRIu64
		          "): %s",
		          p->p_name, ds->ds_name, lsn, txg, sh_strerror(rc));
	else
		rp->rp_applied++;
out:
	pool_lock(p);
	pool_ds_rele_locked(ds);
	pool_unlock(p);
	return rc;
}

struct pool_log_count {
	uint64_t lc_ub_txg;
	uint64_t lc_newer;
};

static int pool_log_count_visit(void *arg, uint16_t type, uint64_t txg, uint64_t lsn,
                                const void *payload, uint32_t len)
{
	(void)type;
	(void)lsn;
	(void)payload;
	(void)len;
	struct pool_log_count *lc = arg;
	if (txg > lc->lc_ub_txg)
		lc->lc_newer++; /* what pool_replay_visit would apply or find orphaned */
	return 0;
}

int pool_log_count_unreplayed(struct pool *p, uint64_t ub_txg, const struct ilog_position *from,
                              struct ilog_position *end_out)
{
	struct pool_log_count lc = {.lc_ub_txg = ub_txg};
	int64_t n = ilog_replay(p->p_engine, p->p_log_vdev, p->p_log_start, p->p_log_bytes,
	                        p->p_guid, from, pool_log_count_visit, &lc, end_out);
	if (n < 0) {
		log_error("pool %s: reading the log failed: %s", p->p_name, sh_strerror((int)n));
		return (int)n;
	}
	p->p_log_unreplayed = lc.lc_newer;
	return 0;
}

int pool_log_replay(struct pool *p, uint64_t ub_txg, const struct ilog_position *from,
                    struct ilog_position *end_out)
{
	struct pool_replay rp = {.rp_pool = p, .rp_ub_txg = ub_txg};
	int64_t n = ilog_replay(p->p_engine, p->p_log_vdev, p->p_log_start, p->p_log_bytes,
	                        p->p_guid, from, pool_replay_visit, &rp, end_out);
	mem_free(rp.rp_bps);
	if (rp.rp_bad > 0)
		log_error("pool %s: %" PRIu64 " log record%s skipped: %s blocks could not be read",
		          p->p_name, rp.rp_bad, rp.rp_bad == 1 ? "" : "s",
		          rp.rp_bad == 1 ? "its" : "their");
	if (n < 0) {
		log_error("pool %s: log replay failed: %s", p->p_name, sh_strerror((int)n));
		return (int)n;
	}
	/* every record newer than the uberblock: applied, of a destroyed dataset, or skipped */
	p->p_log_replayed = rp.rp_applied + rp.rp_orphans + rp.rp_bad;
	if (rp.rp_applied > 0 || rp.rp_orphans > 0)
		log_info("pool %s: replayed %" PRIu64 " log record%s (%" PRIu64
		         " already in txg %" PRIu64 ", %" PRIu64 " of destroyed datasets)",
		         p->p_name, rp.rp_applied, rp.rp_applied == 1 ? "" : "s", rp.rp_skipped,
		         ub_txg, rp.rp_orphans);
	return 0;
}
