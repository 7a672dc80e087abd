/* ilog.c: the intent log's writer: records appended into log blocks, group commit, the circular
 * region's space, checkpoints, and the shared format helpers. Replay is in ilog_replay.c.
 *
 * Problem
 *   A stable NFS change (FILE_SYNC WRITE, COMMIT, CREATE, REMOVE, RENAME, SETATTR...) must be on
 *   stable storage before the reply, but the pool writes its trees only once per transaction
 *   group (txg), every few seconds. The store therefore appends a record of each change to this
 *   log and replies once the record is durable; after a crash, import replays the records the
 *   last durable txg does not contain. Records are opaque here: type, txg and payload are the
 *   store's.
 *
 * Model
 *   The log is a chain of blocks written circularly in a region [start, end) of a top-level vdev
 *   with raw vdev I/O (every mirror child gets each write). Each block names its predecessor by
 *   checksum and carries a sequence number one above it and the LSN of its first record, so the
 *   chain can be followed from a known place (struct ilog_position) and ends at the first block
 *   that does not continue it: one never written, torn, left from an earlier lap, or from another
 *   log or pool. Nothing on disk says where the chain ends; the store's uberblock says where it
 *   begins.
 *
 *   Placement rule (writer and reader): the block after one at offset o of b bytes starts at
 *   o + b, unless fewer than ILOG_BLOCK_MAX bytes remain before the region's end, in which case
 *   it starts at the region's start. So every block starts where a block of ILOG_BLOCK_MAX bytes
 *   still fits and no block ever crosses the region's end; the space between the last block of a
 *   lap and the end is left unused.
 *
 *   Records are copied into the open block (a buffer of ILOG_BLOCK_MAX bytes) under il_lock. The
 *   open block is sealed (its size rounded up to the sector, padding zeroed, header and checksum
 *   filled in) when the next record does not fit or when a commit needs its records. Group
 *   commit: a write is a batch of every sealed block, submitted together, followed by one flush;
 *   at most one batch is in flight, and whatever is appended meanwhile goes into the next batch,
 *   started as soon as the flush completes. A batch is started when a commit waits for a record
 *   not yet written or when a full block has been sealed (so filled blocks do not pile up in
 *   memory); records that nobody commits are written only then, or not at all.
 *
 * Block states (every transition under il_lock)
 *
 *      append ----> OPEN --seal (full, or a commit needs it)--> SEALED
 *      SEALED --batch starts--> WRITING --its flush completes--> DURABLE
 *      DURABLE and before the release position --> freed (its space may be reused)
 *      any state --device error--> the log has failed; blocks are freed by ilog_close
 *
 * Invariants
 *   1. The live list holds every block not yet freed, in chain order: consecutive sequence
 *      numbers, each block's predecessor checksum the checksum of the block before it, offsets
 *      by the placement rule, and states in the order DURABLE* WRITING* SEALED* OPEN?. il_open is
 *      the OPEN block or NULL; il_open_offset/seq/prev_cksum describe it, or with il_open NULL
 *      the block that will be opened next.
 *   2. At most one batch plus its flush is in flight (il_in_flight). A batch starts only after
 *      the flush of the previous one has completed, so blocks are durable in chain order and a
 *      batch never overlaps a block being written.
 *   3. il_durable_lsn is the last record of the last flushed batch: every record up to it is
 *      written and flushed, and so is every block before it in the chain.
 *   4. Every queued commit waiter has iw_lsn > il_durable_lsn, and while one is queued a batch
 *      is in flight (or the log has failed and the queue is empty), so ilog_close cannot wait
 *      forever.
 *   5. Space rule: no block is ever placed over a live block. The open block at o may grow to b
 *      bytes only if [o, o + b) does not reach the oldest live block (the chain from the oldest
 *      live block to o is contiguous around the ring, so this one comparison suffices).
 *   6. A block is freed only when DURABLE and before the release position (il_release_seq),
 *      which the store sets only once its uberblock records a position at or after it: the
 *      blocks a durable uberblock's position needs are never overwritten.
 *   7. After a failure (il_failed) no batch is started, every waiter has been called with -EIO,
 *      and appends, commits of records not durable before the failure and space waits return
 *      -EIO.
 *
 * Why a committed record survives a crash: the commit completed after the flush of its block's
 *   batch, so that block and every block before it back to the durable position are on stable
 *   storage (2, 3), on every mirror child (a vdev write completes only when every child has it,
 *   and any failure fails the log); none was overwritten (5, 6); so replay from that position
 *   follows the chain through it. Replay stops at the first block that does not continue the
 *   chain, so what it returns is always a prefix of the LSN sequence, whatever subset of the
 *   unflushed writes reached the media.
 *
 * Why a stale block never joins the chain: a block of an earlier lap has a lower sequence number,
 *   one of another log another guid. The remaining case is a crash between two writes of one
 *   batch: block N is lost, N+1 survives. Replay ends at N, the store reopens the log there, and
 *   the new block N carries the same place, sequence number, predecessor and first LSN as the lost
 *   one, perhaps even the same records; if it were byte-identical the stale N+1 would chain to it
 *   and replay would return a record that was never acknowledged, under an LSN since given to
 *   another. Every block therefore carries the writer nonce of the ilog_create or ilog_open that
 *   wrote it, so a block written after a reopen never has the checksum of one written before.
 *
 * Concurrency
 *   il_lock guards all mutable state. blk completions (ilog_block_done, ilog_flush_done) run on
 *   the blk engine thread and take il_lock. Nothing is submitted to blk and no waiter is called
 *   with il_lock held: a batch is prepared under the lock and submitted after it is dropped, and
 *   waiters are moved to a local list and called afterwards. After dropping il_lock a completion
 *   touches the log only to submit I/O of the batch in flight (which keeps ilog_close waiting) and,
 *   when it called waiters, to count itself out of il_running once they have returned. ilog_close
 *   frees the log once no batch is in flight, no commit waiter is queued and il_running is zero:
 *   every waiter has then been called and has returned, so its owner may free it.
 *
 * On-disk format (little-endian)
 *
 *   Block header, at the block's start (ILOG_BLOCK_HEADER_BYTES = 96):
 *     offset size field
 *          0    8 magic ILOG_MAGIC
 *          8    4 format version, 1
 *         12    4 block bytes: a multiple of 4096, at most ILOG_BLOCK_MAX
 *         16    8 pool guid
 *         24    8 log guid: drawn at ilog_create; a new log (or a reset one) gets a new one
 *         32    8 block sequence number: one more than the previous block's
 *         40    8 LSN of the first record: the previous block's first LSN plus its record count
 *         48    4 record count, at least 1
 *         52    4 bytes used: header plus records; bytes used..block bytes are zero
 *         56    8 writer nonce: drawn anew by each ilog_create and ilog_open
 *         64   16 checksum of the previous block (its bytes 80..95)
 *         80   16 XXH3-128 (blk_checksum) of the whole block with these 16 bytes taken as zero
 *   Records follow the header back to back, each 8-byte aligned:
 *     offset size field
 *          0    2 type (the store's)
 *          2    2 flags, 0 (reserved)
 *          4    4 payload length
 *          8    8 txg whose in-memory state holds the change
 *         16    8 LSN: consecutive across the whole log, from 1
 *         24  len payload, then zeros up to a multiple of 8
 *
 *   Position, as the store keeps it in its uberblock (ILOG_POSITION_BYTES = 48):
 *     offset size field
 *          0    8 offset of the block replay starts with (absolute on the vdev)
 *          8    8 its sequence number
 *         16    8 the LSN of its first record
 *         24    8 log guid
 *         32   16 the checksum it must carry for its predecessor
 *   A fresh log's first block has sequence 1, first LSN 1 and a random predecessor checksum. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "ilog/ilog_impl.h"

#define ILOG_FREE_BUFS 4 /* idle block buffers kept for reuse: a batch or two of small blocks */
/* Sealed blocks waiting to be durable before appends that need a new block are refused: bounds
 * the memory a slow device can make the log hold. 32 largest blocks, well above what a few
 * milliseconds of flush latency let even many fast clients append. */
#define ILOG_BACKLOG_MAX_BYTES (32ull * ILOG_BLOCK_MAX)

enum ilog_blk_state { ILOG_BLK_OPEN, ILOG_BLK_SEALED, ILOG_BLK_WRITING, ILOG_BLK_DURABLE };

struct ilog_blk {
	struct ilog_blk *ib_next; /* live list, oldest first */
	struct ilog *ib_log;
	uint8_t *ib_buf; /* ILOG_BLOCK_MAX bytes until durable, then NULL */
	enum ilog_blk_state ib_state;
	uint64_t ib_offset;
	uint32_t ib_bytes; /* on disk; 0 while OPEN */
	uint32_t ib_used;  /* header plus records so far */
	uint64_t ib_seq;
	uint64_t ib_first_lsn;
	uint32_t ib_nrecords;
	uint64_t ib_max_txg; /* highest txg among its records */
	uint8_t ib_prev_cksum[16];
	uint8_t ib_cksum[16];      /* once sealed */
	struct blk_vdev_io ib_vio; /* its write, while WRITING */
};

struct ilog {
	/* Set when created, then read-only. */
	struct blk_vdev *il_vdev;
	uint64_t il_start;
	uint64_t il_end;
	uint64_t il_pool_guid;
	uint64_t il_log_guid;
	uint64_t il_nonce; /* the writer nonce every block it writes carries */

	pthread_mutex_t il_lock;   /* guards everything below */
	pthread_cond_t il_idle_cv; /* ilog_close waits here for the batch and commit waiters */

	/* The chain (invariant 1). */
	struct ilog_blk *il_live_head;
	struct ilog_blk *il_live_tail;
	struct ilog_blk *il_open;      /* the OPEN block, or NULL */
	struct ilog_blk *il_unwritten; /* the first SEALED block, or NULL */
	uint64_t il_open_offset;
	uint64_t il_open_seq;
	uint8_t il_open_prev_cksum[16];
	uint64_t il_next_lsn;
	uint64_t il_durable_lsn;
	uint64_t il_release_seq;   /* blocks below this sequence number may be freed once durable */
	uint64_t il_backlog_bytes; /* sealed blocks not yet durable */
	bool il_backlog_blocked;   /* an append was refused because of the backlog */

	/* The batch in flight (invariant 2). */
	bool il_in_flight;
	struct ilog_blk *il_batch; /* its first block; the others follow it in the live list */
	unsigned il_batch_blocks;
	unsigned il_batch_pending; /* block writes not yet completed */
	int il_batch_status;
	uint64_t il_batch_last_lsn;
	uint64_t il_batch_records;
	struct blk_vdev_io il_flush_vio;

	struct ilog_waiter *il_commit_head; /* FIFO of commit waiters */
	struct ilog_waiter *il_commit_tail;
	uint64_t il_commit_max_lsn;
	struct ilog_waiter *il_space_head; /* FIFO of space waiters */
	struct ilog_waiter *il_space_tail;
	uint64_t il_space_gen; /* counts the times space was freed */
	uint64_t il_full_gen;  /* il_space_gen when an append was last refused */

	int il_failed; /* 0, or -EIO once the device failed (invariant 7) */
	bool il_closing;
	unsigned il_running; /* completions calling waiters they took off the lists */

	uint8_t *il_free_bufs[ILOG_FREE_BUFS];
	unsigned il_nfree_bufs;
	uint64_t il_buf_bytes; /* block buffers allocated now, idle ones included */

	struct ilog_stats il_stats;
};

static void ilog_block_done(struct blk_vdev_io *vio);
static void ilog_flush_done(struct blk_vdev_io *vio);

/* ---------------------------------------------------------------------------------------------
 * Format helpers shared with ilog_replay.c */

void ilog_block_cksum(uint8_t *block, uint32_t bytes, uint8_t out[16])
{
	uint8_t saved[16];
	memcpy(saved, block + ILOG_BH_CKSUM, 16);
	memset(block + ILOG_BH_CKSUM, 0, 16);
	blk_checksum(block, bytes, out);
	memcpy(block + ILOG_BH_CKSUM, saved, 16);
}

int ilog_region_check(struct blk_vdev *vdev, uint64_t start, uint64_t bytes)
{
	if (!vdev || start % BLK_SECTOR_BYTES != 0 || bytes % BLK_SECTOR_BYTES != 0 ||
	    bytes < ILOG_REGION_MIN)
		return -EINVAL;
	uint64_t data_start = blk_vdev_data_start(vdev), data_bytes = blk_vdev_data_bytes(vdev);
	if (start < data_start || bytes > data_bytes || start - data_start > data_bytes - bytes)
		return -EINVAL;
	return 0;
}

int ilog_position_check(const struct ilog_position *pos, uint64_t start, uint64_t bytes)
{
	if (!pos || pos->ip_log_guid == 0 || pos->ip_seq == 0 || pos->ip_next_lsn == 0)
		return -EINVAL;
	if (pos->ip_offset % BLK_SECTOR_BYTES != 0 || pos->ip_offset < start ||
	    pos->ip_offset - start > bytes - ILOG_BLOCK_MAX)
		return -EINVAL;
	return 0;
}

void ilog_position_encode(const struct ilog_position *pos, uint8_t out[ILOG_POSITION_BYTES])
{
	ilog_put64(out + ILOG_POS_OFFSET, pos->ip_offset);
	ilog_put64(out + ILOG_POS_SEQ, pos->ip_seq);
	ilog_put64(out + ILOG_POS_NEXT_LSN, pos->ip_next_lsn);
	ilog_put64(out + ILOG_POS_LOG_GUID, pos->ip_log_guid);
	memcpy(out + ILOG_POS_PREV_CKSUM, pos->ip_prev_cksum, 16);
}

int ilog_position_decode(const uint8_t in[ILOG_POSITION_BYTES], struct ilog_position *pos_out)
{
	struct ilog_position pos;
	pos.ip_offset = ilog_get64(in + ILOG_POS_OFFSET);
	pos.ip_seq = ilog_get64(in + ILOG_POS_SEQ);
	pos.ip_next_lsn = ilog_get64(in + ILOG_POS_NEXT_LSN);
	pos.ip_log_guid = ilog_get64(in + ILOG_POS_LOG_GUID);
	memcpy(pos.ip_prev_cksum, in + ILOG_POS_PREV_CKSUM, 16);
	if (pos.ip_offset % BLK_SECTOR_BYTES != 0 || pos.ip_seq == 0 || pos.ip_next_lsn == 0 ||
	    pos.ip_log_guid == 0)
		return -EINVAL;
	*pos_out = pos;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Blocks and buffers */

static uint8_t *ilog_buf_get_locked(struct ilog *log)
{
	if (log->il_nfree_bufs > 0)
		return log->il_free_bufs[--log->il_nfree_bufs];
	uint8_t *buf = blk_buf_alloc(ILOG_BLOCK_MAX);
	if (buf)
		log->il_buf_bytes += ILOG_BLOCK_MAX;
	return buf;
}

static void ilog_buf_put_locked(struct ilog *log, uint8_t *buf)
{
	if (!buf)
		return;
	if (log->il_nfree_bufs < ILOG_FREE_BUFS) {
		log->il_free_bufs[log->il_nfree_bufs++] = buf;
	} else {
		mem_free(buf);
		log->il_buf_bytes -= ILOG_BLOCK_MAX;
	}
}

static void ilog_blk_free_locked(struct ilog *log, struct ilog_blk *b)
{
	ilog_buf_put_locked(log, b->ib_buf);
	mem_free(b);
}

/* Opens a block where invariant 1 says the next one goes and links it at the live list's end. */
static int ilog_open_block_locked(struct ilog *log)
{
	struct ilog_blk *b = mem_zalloc(sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ib_buf = ilog_buf_get_locked(log);
	if (!b->ib_buf) {
		mem_free(b);
		return -ENOMEM;
	}
	b->ib_log = log;
	b->ib_state = ILOG_BLK_OPEN;
	b->ib_offset = log->il_open_offset;
	b->ib_used = ILOG_BLOCK_HEADER_BYTES;
	b->ib_seq = log->il_open_seq;
	b->ib_first_lsn = log->il_next_lsn;
	memcpy(b->ib_prev_cksum, log->il_open_prev_cksum, 16);
	if (log->il_live_tail)
		log->il_live_tail->ib_next = b;
	else
		log->il_live_head = b;
	log->il_live_tail = b;
	log->il_open = b;
	return 0;
}

static uint32_t ilog_round_sector(uint32_t bytes)
{
	return (bytes + BLK_SECTOR_BYTES - 1) & ~(BLK_SECTOR_BYTES - 1);
}

/* OPEN -> SEALED: fixes the block's size, fills in its header and checksum, and moves the open
 * place to the next block by the placement rule. */
static void ilog_seal_locked(struct ilog *log)
{
	struct ilog_blk *b = log->il_open;
	ASSERT(b && b->ib_nrecords > 0);
	b->ib_bytes = ilog_round_sector(b->ib_used);
	uint8_t *h = b->ib_buf;
	memset(h + b->ib_used, 0, b->ib_bytes - b->ib_used);
	memset(h, 0, ILOG_BLOCK_HEADER_BYTES);
	ilog_put64(h + ILOG_BH_MAGIC, ILOG_MAGIC);
	ilog_put32(h + ILOG_BH_VERSION, ILOG_VERSION);
	ilog_put32(h + ILOG_BH_BYTES, b->ib_bytes);
	ilog_put64(h + ILOG_BH_POOL_GUID, log->il_pool_guid);
	ilog_put64(h + ILOG_BH_LOG_GUID, log->il_log_guid);
	ilog_put64(h + ILOG_BH_SEQ, b->ib_seq);
	ilog_put64(h + ILOG_BH_FIRST_LSN, b->ib_first_lsn);
	ilog_put32(h + ILOG_BH_NRECORDS, b->ib_nrecords);
	ilog_put32(h + ILOG_BH_USED, b->ib_used);
	ilog_put64(h + ILOG_BH_NONCE, log->il_nonce);
	memcpy(h + ILOG_BH_PREV_CKSUM, b->ib_prev_cksum, 16);
	ilog_block_cksum(h, b->ib_bytes, b->ib_cksum);
	memcpy(h + ILOG_BH_CKSUM, b->ib_cksum, 16);

	b->ib_state = ILOG_BLK_SEALED;
	if (!log->il_unwritten)
		log->il_unwritten = b;
	log->il_backlog_bytes += b->ib_bytes;
	log->il_open = NULL;
	log->il_open_offset =
	    ilog_next_offset(log->il_start, log->il_end, b->ib_offset + b->ib_bytes);
	log->il_open_seq = b->ib_seq + 1;
	memcpy(log->il_open_prev_cksum, b->ib_cksum, 16);
}

/* Invariant 5: may the open block (at il_open_offset) be `bytes` long? */
static bool ilog_fits_locked(const struct ilog *log, uint32_t bytes)
{
	const struct ilog_blk *oldest = log->il_live_head;
	/* Nothing else live: the placement rule alone keeps the block inside the region. */
	if (!oldest || oldest == log->il_open)
		return true;
	/* The live chain lies behind it: it may grow up to the region's end, never past it. */
	if (oldest->ib_offset < log->il_open_offset)
		return true;
	/* Wrapped: the oldest live block lies ahead of it. */
	return log->il_open_offset + bytes <= oldest->ib_offset;
}

/* Frees durable blocks before the release position (invariant 6). Returns whether any was. */
static bool ilog_free_released_locked(struct ilog *log)
{
	bool freed = false;
	struct ilog_blk *b;
	while ((b = log->il_live_head) && b->ib_seq < log->il_release_seq &&
	       b->ib_state == ILOG_BLK_DURABLE) {
		log->il_live_head = b->ib_next;
		if (!log->il_live_head)
			log->il_live_tail = NULL;
		ilog_blk_free_locked(log, b);
		freed = true;
	}
	if (freed)
		log->il_space_gen++;
	return freed;
}

/* ---------------------------------------------------------------------------------------------
 * Waiters */

static void ilog_waiters_append(struct ilog_waiter **head, struct ilog_waiter **tail,
                                struct ilog_waiter *w)
{
	w->iw_next = NULL;
	if (*tail)
		(*tail)->iw_next = w;
	else
		*head = w;
	*tail = w;
}

/* Calls every waiter of a list taken off the log, with no lock held. */
static void ilog_waiters_run(struct ilog_waiter *list, int status)
{
	while (list) {
		struct ilog_waiter *next = list->iw_next;
		list->iw_next = NULL;
		list->iw_done(list, status);
		list = next;
	}
}

static struct ilog_waiter *ilog_take_space_waiters_locked(struct ilog *log)
{
	struct ilog_waiter *list = log->il_space_head;
	log->il_space_head = log->il_space_tail = NULL;
	return list;
}

/* Moves the commit waiters whose records are durable to a list, in commit order. */
static struct ilog_waiter *ilog_take_durable_waiters_locked(struct ilog *log)
{
	struct ilog_waiter *done_head = NULL, *done_tail = NULL;
	struct ilog_waiter *keep_head = NULL, *keep_tail = NULL;
	uint64_t max_lsn = 0;
	struct ilog_waiter *w = log->il_commit_head;
	while (w) {
		struct ilog_waiter *next = w->iw_next;
		if (w->iw_lsn <= log->il_durable_lsn) {
			ilog_waiters_append(&done_head, &done_tail, w);
		} else {
			ilog_waiters_append(&keep_head, &keep_tail, w);
			max_lsn = SH_MAX(max_lsn, w->iw_lsn);
		}
		w = next;
	}
	log->il_commit_head = keep_head;
	log->il_commit_tail = keep_tail;
	log->il_commit_max_lsn = max_lsn;
	return done_head;
}

/* A completion that took waiters off the log has called them all. ilog_close waits for
 * il_running to drop to zero: until then a waiter its caller may free is still in use. */
static void ilog_running_end(struct ilog *log)
{
	pthread_mutex_lock(&log->il_lock);
	ASSERT(log->il_running > 0);
	if (--log->il_running == 0 && log->il_closing)
		pthread_cond_broadcast(&log->il_idle_cv);
	pthread_mutex_unlock(&log->il_lock);
}

/* Invariant 7: the log stops; every waiter is handed back for -EIO. */
static void ilog_fail_locked(struct ilog *log, int status, struct ilog_waiter **commit_out,
                             struct ilog_waiter **space_out)
{
	if (!log->il_failed) {
		log->il_failed = -EIO;
		log_error(
		    "ilog: log device failed (%s) at LSN %llu; the log refuses further records",
		    sh_strerror(status), (unsigned long long)log->il_durable_lsn);
	}
	*commit_out = log->il_commit_head;
	log->il_commit_head = log->il_commit_tail = NULL;
	log->il_commit_max_lsn = 0;
	*space_out = ilog_take_space_waiters_locked(log);
}

/* ---------------------------------------------------------------------------------------------
 * Group commit */

struct ilog_batch {
	struct ilog_blk *bt_first;
	unsigned bt_blocks;
};

/* Starts a batch if none is in flight and there is something to write: the open block when a
 * commit waits for its records, and every sealed block. The caller submits it with
 * ilog_batch_submit after dropping il_lock. */
static void ilog_start_batch_locked(struct ilog *log, struct ilog_batch *batch)
{
	batch->bt_first = NULL;
	batch->bt_blocks = 0;
	if (log->il_in_flight || log->il_failed)
		return;
	if (log->il_open && log->il_commit_head &&
	    log->il_commit_max_lsn >= log->il_open->ib_first_lsn)
		ilog_seal_locked(log);
	if (!log->il_unwritten)
		return;
	unsigned n = 0;
	uint64_t records = 0, bytes = 0;
	struct ilog_blk *last = NULL;
	for (struct ilog_blk *b = log->il_unwritten; b && b->ib_state == ILOG_BLK_SEALED;
	     b = b->ib_next) {
		b->ib_state = ILOG_BLK_WRITING;
		memset(&b->ib_vio, 0, sizeof(b->ib_vio));
		b->ib_vio.vi_op = BLK_IO_WRITE;
		b->ib_vio.vi_vdev = log->il_vdev;
		b->ib_vio.vi_offset = b->ib_offset;
		b->ib_vio.vi_buf = b->ib_buf;
		b->ib_vio.vi_len = b->ib_bytes;
		b->ib_vio.vi_done = ilog_block_done;
		b->ib_vio.vi_arg = b;
		n++;
		records += b->ib_nrecords;
		bytes += b->ib_bytes;
		last = b;
	}
	VERIFY(n > 0 && last);
	batch->bt_first = log->il_unwritten;
	batch->bt_blocks = n;
	log->il_unwritten = NULL;
	log->il_in_flight = true;
	log->il_batch = batch->bt_first;
	log->il_batch_blocks = n;
	log->il_batch_pending = n;
	log->il_batch_status = 0;
	log->il_batch_last_lsn = last->ib_first_lsn + last->ib_nrecords - 1;
	log->il_batch_records = records;
	log->il_stats.is_writes++;
	log->il_stats.is_blocks += n;
	log->il_stats.is_write_bytes += bytes;
}

/* Submits a batch's block writes (no lock held). Only the links between the batch's own blocks
 * are read, and each before its block is submitted: the batch cannot complete, nor its blocks
 * move, until the last one has been. */
static void ilog_batch_submit(const struct ilog_batch *batch)
{
	struct ilog_blk *b = batch->bt_first;
	for (unsigned i = 0; i < batch->bt_blocks; i++) {
		struct ilog_blk *next = i + 1 < batch->bt_blocks ? b->ib_next : NULL;
		blk_vdev_submit(&b->ib_vio);
		b = next;
	}
}

/* The batch in flight has ended (its flush completed, or a write or the flush failed). Called
 * with il_lock held; drops it. */
static void ilog_batch_end_locked(struct ilog *log, int status)
{
	struct ilog_waiter *done = NULL, *space = NULL;
	struct ilog_batch next = {0};
	int waiter_status = 0;
	log->il_in_flight = false;
	if (status != 0) {
		ilog_fail_locked(log, status, &done, &space);
		waiter_status = -EIO;
	} else {
		struct ilog_blk *b = log->il_batch;
		for (unsigned i = 0; i < log->il_batch_blocks; i++, b = b->ib_next) {
			b->ib_state = ILOG_BLK_DURABLE;
			ilog_buf_put_locked(log, b->ib_buf);
			b->ib_buf = NULL;
			log->il_backlog_bytes -= b->ib_bytes;
		}
		log->il_batch = NULL;
		log->il_durable_lsn = log->il_batch_last_lsn;
		log->il_stats.is_flushes++;
		log->il_stats.is_flushed_records += log->il_batch_records;
		done = ilog_take_durable_waiters_locked(log);
		bool freed = ilog_free_released_locked(log);
		if (log->il_backlog_blocked && log->il_backlog_bytes < ILOG_BACKLOG_MAX_BYTES) {
			log->il_backlog_blocked = false;
			log->il_space_gen++;
			freed = true;
		}
		if (freed)
			space = ilog_take_space_waiters_locked(log);
		ilog_start_batch_locked(log, &next);
	}
	bool calls = done || space;
	if (calls)
		log->il_running++;
	else if (log->il_closing)
		pthread_cond_broadcast(&log->il_idle_cv);
	pthread_mutex_unlock(&log->il_lock);
	/* From here on the log may be touched only through `next` and to end il_running (see
	 * Concurrency). */
	ilog_batch_submit(&next);
	if (calls) {
		ilog_waiters_run(done, waiter_status);
		ilog_waiters_run(space, waiter_status);
		ilog_running_end(log);
	}
}

static void ilog_block_done(struct blk_vdev_io *vio)
{
	struct ilog_blk *b = vio->vi_arg;
	struct ilog *log = b->ib_log;
	pthread_mutex_lock(&log->il_lock);
	if (vio->vi_status != 0 && log->il_batch_status == 0)
		log->il_batch_status = vio->vi_status;
	ASSERT(log->il_batch_pending > 0);
	if (--log->il_batch_pending > 0) {
		pthread_mutex_unlock(&log->il_lock);
		return;
	}
	if (log->il_batch_status != 0) {
		ilog_batch_end_locked(log, log->il_batch_status);
		return;
	}
	/* Every block of the batch is written: one flush makes them all durable. */
	memset(&log->il_flush_vio, 0, sizeof(log->il_flush_vio));
	log->il_flush_vio.vi_op = BLK_IO_FLUSH;
	log->il_flush_vio.vi_vdev = log->il_vdev;
	log->il_flush_vio.vi_done = ilog_flush_done;
	log->il_flush_vio.vi_arg = log;
	pthread_mutex_unlock(&log->il_lock);
	blk_vdev_submit(&log->il_flush_vio);
}

static void ilog_flush_done(struct blk_vdev_io *vio)
{
	struct ilog *log = vio->vi_arg;
	pthread_mutex_lock(&log->il_lock);
	ilog_batch_end_locked(log, vio->vi_status);
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle */

static int ilog_new(struct blk_vdev *vdev, uint64_t start, uint64_t bytes, uint64_t pool_guid,
                    struct ilog **out)
{
	int rc = ilog_region_check(vdev, start, bytes);
	if (rc != 0)
		return rc;
	struct ilog *log = mem_zalloc(sizeof(*log));
	if (!log)
		return -ENOMEM;
	log->il_vdev = vdev;
	log->il_start = start;
	log->il_end = start + bytes;
	log->il_pool_guid = pool_guid;
	do {
		rc = sh_random_bytes(&log->il_nonce, sizeof(log->il_nonce));
	} while (rc == 0 && log->il_nonce == 0);
	if (rc != 0) {
		mem_free(log);
		return rc;
	}
	pthread_mutex_init(&log->il_lock, NULL);
	pthread_cond_init(&log->il_idle_cv, NULL);
	log->il_stats.is_space_bytes = bytes;
	*out = log;
	return 0;
}

int ilog_create(struct blk_vdev *vdev, uint64_t start, uint64_t bytes, uint64_t pool_guid,
                struct ilog **out)
{
	struct ilog *log;
	int rc = ilog_new(vdev, start, bytes, pool_guid, &log);
	if (rc != 0)
		return rc;
	/* A random guid no block in the region carries, and a random anchor for the chain. */
	do {
		rc = sh_random_bytes(&log->il_log_guid, sizeof(log->il_log_guid));
	} while (rc == 0 && log->il_log_guid == 0);
	if (rc == 0)
		rc = sh_random_bytes(log->il_open_prev_cksum, sizeof(log->il_open_prev_cksum));
	if (rc != 0) {
		ilog_close(log);
		return rc;
	}
	log->il_open_offset = start;
	log->il_open_seq = 1;
	log->il_next_lsn = 1;
	log->il_durable_lsn = 0;
	log->il_release_seq = 1;
	*out = log;
	return 0;
}

int ilog_open(struct blk_vdev *vdev, uint64_t start, uint64_t bytes, uint64_t pool_guid,
              const struct ilog_position *resume, struct ilog **out)
{
	int rc = ilog_region_check(vdev, start, bytes);
	if (rc == 0)
		rc = ilog_position_check(resume, start, bytes);
	if (rc != 0)
		return rc;
	struct ilog *log;
	rc = ilog_new(vdev, start, bytes, pool_guid, &log);
	if (rc != 0)
		return rc;
	log->il_log_guid = resume->ip_log_guid;
	memcpy(log->il_open_prev_cksum, resume->ip_prev_cksum, 16);
	log->il_open_offset = resume->ip_offset;
	log->il_open_seq = resume->ip_seq;
	log->il_next_lsn = resume->ip_next_lsn;
	log->il_durable_lsn = resume->ip_next_lsn - 1;
	log->il_release_seq = resume->ip_seq;
	*out = log;
	return 0;
}

void ilog_close(struct ilog *log)
{
	if (!log)
		return;
	pthread_mutex_lock(&log->il_lock);
	log->il_closing = true;
	while (log->il_in_flight || log->il_commit_head || log->il_running)
		pthread_cond_wait(&log->il_idle_cv, &log->il_lock);
	struct ilog_waiter *space = ilog_take_space_waiters_locked(log);
	pthread_mutex_unlock(&log->il_lock);
	ilog_waiters_run(space, -ECANCELED);

	struct ilog_blk *b = log->il_live_head;
	while (b) {
		struct ilog_blk *next = b->ib_next;
		ilog_blk_free_locked(log, b);
		b = next;
	}
	for (unsigned i = 0; i < log->il_nfree_bufs; i++)
		mem_free(log->il_free_bufs[i]);
	pthread_cond_destroy(&log->il_idle_cv);
	pthread_mutex_destroy(&log->il_lock);
	mem_free(log);
}

/* ---------------------------------------------------------------------------------------------
 * Appending and committing */

int ilog_append(struct ilog *log, uint16_t type, uint64_t txg, const void *payload, uint32_t len,
                uint64_t *lsn_out)
{
	if (len > ILOG_PAYLOAD_MAX)
		return -EMSGSIZE;
	if (len > 0 && !payload)
		return -EINVAL;
	uint32_t rec_bytes = ilog_record_bytes(len);
	struct ilog_batch batch = {0};
	int rc = 0;
	bool sealed = false;

	pthread_mutex_lock(&log->il_lock);
	if (log->il_failed) {
		rc = log->il_failed;
		goto out;
	}
	if (log->il_open && log->il_open->ib_used + rec_bytes > ILOG_BLOCK_MAX) {
		ilog_seal_locked(log);
		sealed = true;
	}
	struct ilog_blk *b = log->il_open;
	uint32_t used = (b ? b->ib_used : ILOG_BLOCK_HEADER_BYTES) + rec_bytes;
	if ((!b && log->il_backlog_bytes >= ILOG_BACKLOG_MAX_BYTES) ||
	    !ilog_fits_locked(log, ilog_round_sector(used))) {
		if (!b && log->il_backlog_bytes >= ILOG_BACKLOG_MAX_BYTES)
			log->il_backlog_blocked = true;
		log->il_full_gen = log->il_space_gen;
		log->il_stats.is_full++;
		rc = -EAGAIN;
		goto out;
	}
	if (!b) {
		rc = ilog_open_block_locked(log);
		if (rc != 0)
			goto out;
		b = log->il_open;
	}
	uint8_t *r = b->ib_buf + b->ib_used;
	uint64_t lsn = log->il_next_lsn++;
	ilog_put16(r + ILOG_RH_TYPE, type);
	ilog_put16(r + ILOG_RH_FLAGS, 0);
	ilog_put32(r + ILOG_RH_LEN, len);
	ilog_put64(r + ILOG_RH_TXG, txg);
	ilog_put64(r + ILOG_RH_LSN, lsn);
	if (len > 0)
		memcpy(r + ILOG_RECORD_HEADER_BYTES, payload, len);
	memset(r + ILOG_RECORD_HEADER_BYTES + len, 0, rec_bytes - ILOG_RECORD_HEADER_BYTES - len);
	b->ib_used += rec_bytes;
	b->ib_nrecords++;
	b->ib_max_txg = SH_MAX(b->ib_max_txg, txg);
	log->il_stats.is_records++;
	log->il_stats.is_payload_bytes += len;
	*lsn_out = lsn;
out:
	if (sealed) /* a full block goes out without waiting for a commit */
		ilog_start_batch_locked(log, &batch);
	pthread_mutex_unlock(&log->il_lock);
	ilog_batch_submit(&batch);
	return rc;
}

int ilog_commit(struct ilog *log, uint64_t lsn, struct ilog_waiter *w)
{
	struct ilog_batch batch = {0};
	int rc = 0;
	pthread_mutex_lock(&log->il_lock);
	if (lsn == ILOG_LSN_ALL)
		lsn = log->il_next_lsn - 1;
	if (lsn >= log->il_next_lsn) {
		rc = -EINVAL;
	} else if (lsn <= log->il_durable_lsn) {
		rc = ILOG_DONE;
	} else if (log->il_failed) {
		rc = log->il_failed;
	} else if (!w) {
		rc = -EINPROGRESS;
	} else {
		w->iw_lsn = lsn;
		ilog_waiters_append(&log->il_commit_head, &log->il_commit_tail, w);
		log->il_commit_max_lsn = SH_MAX(log->il_commit_max_lsn, lsn);
		ilog_start_batch_locked(log, &batch);
	}
	pthread_mutex_unlock(&log->il_lock);
	ilog_batch_submit(&batch);
	return rc;
}

int ilog_wait_space(struct ilog *log, struct ilog_waiter *w)
{
	int rc = 0;
	pthread_mutex_lock(&log->il_lock);
	if (log->il_failed) {
		rc = log->il_failed;
	} else if (log->il_space_gen != log->il_full_gen) {
		rc = ILOG_DONE;
	} else if (!w) {
		rc = -EINVAL;
	} else {
		w->iw_lsn = 0;
		ilog_waiters_append(&log->il_space_head, &log->il_space_tail, w);
	}
	pthread_mutex_unlock(&log->il_lock);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Checkpoints */

static void ilog_block_position(const struct ilog *log, const struct ilog_blk *b,
                                struct ilog_position *pos)
{
	pos->ip_offset = b->ib_offset;
	pos->ip_seq = b->ib_seq;
	pos->ip_next_lsn = b->ib_first_lsn;
	pos->ip_log_guid = log->il_log_guid;
	memcpy(pos->ip_prev_cksum, b->ib_prev_cksum, 16);
}

void ilog_checkpoint_position(struct ilog *log, uint64_t synced_txg, struct ilog_position *pos_out)
{
	pthread_mutex_lock(&log->il_lock);
	for (const struct ilog_blk *b = log->il_live_head; b; b = b->ib_next) {
		if (b->ib_seq >= log->il_release_seq && b->ib_max_txg > synced_txg) {
			ilog_block_position(log, b, pos_out);
			pthread_mutex_unlock(&log->il_lock);
			return;
		}
	}
	/* The current end: the open block, or the place of the next one. */
	pos_out->ip_offset = log->il_open_offset;
	pos_out->ip_seq = log->il_open_seq;
	pos_out->ip_next_lsn = log->il_open ? log->il_open->ib_first_lsn : log->il_next_lsn;
	pos_out->ip_log_guid = log->il_log_guid;
	memcpy(pos_out->ip_prev_cksum, log->il_open_prev_cksum, 16);
	pthread_mutex_unlock(&log->il_lock);
}

int ilog_release(struct ilog *log, const struct ilog_position *pos)
{
	if (!pos || pos->ip_log_guid != log->il_log_guid)
		return -EINVAL;
	struct ilog_waiter *space = NULL;
	pthread_mutex_lock(&log->il_lock);
	if (pos->ip_seq > log->il_open_seq) {
		pthread_mutex_unlock(&log->il_lock);
		return -EINVAL;
	}
	log->il_release_seq = SH_MAX(log->il_release_seq, pos->ip_seq);
	if (ilog_free_released_locked(log))
		space = ilog_take_space_waiters_locked(log);
	pthread_mutex_unlock(&log->il_lock);
	ilog_waiters_run(space, 0);
	return 0;
}

int ilog_checkpoint(struct ilog *log, uint64_t synced_txg, struct ilog_position *pos_out)
{
	ilog_checkpoint_position(log, synced_txg, pos_out);
	return ilog_release(log, pos_out);
}

/* ---------------------------------------------------------------------------------------------
 * Statistics */

void ilog_stats(struct ilog *log, struct ilog_stats *stats_out)
{
	pthread_mutex_lock(&log->il_lock);
	struct ilog_stats s = log->il_stats;
	s.is_records_per_flush =
	    s.is_flushes ? (double)s.is_flushed_records / (double)s.is_flushes : 0.0;
	uint64_t open_end =
	    log->il_open_offset + (log->il_open ? ilog_round_sector(log->il_open->ib_used) : 0);
	const struct ilog_blk *oldest = log->il_live_head;
	if (!oldest)
		s.is_space_used_bytes = 0;
	else if (oldest->ib_offset < log->il_open_offset || oldest == log->il_open)
		s.is_space_used_bytes = open_end - oldest->ib_offset;
	else /* wrapped: from the oldest to the region's end, and from its start to the open end */
		s.is_space_used_bytes =
		    (log->il_end - oldest->ib_offset) + (open_end - log->il_start);
	s.is_next_lsn = log->il_next_lsn;
	s.is_durable_lsn = log->il_durable_lsn;
	s.is_buffer_bytes = log->il_buf_bytes;
	pthread_mutex_unlock(&log->il_lock);
	*stats_out = s;
}

uint64_t ilog_buffer_bytes(struct ilog *log)
{
	pthread_mutex_lock(&log->il_lock);
	uint64_t bytes = log->il_buf_bytes;
	pthread_mutex_unlock(&log->il_lock);
	return bytes;
}
