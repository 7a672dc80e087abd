/* ilog.h: the intent log: stable, ordered, opaque records with group commit, kept in a circular
 * region of a top-level vdev and replayed after a crash.
 *
 * The pool acknowledges a stable change as soon as a record of it is durable here, long before
 * the transaction group (txg) that carries the change into the pool's trees is written. Records
 * are opaque: the store chooses their types and payloads and decides what replaying one means.
 * The theory (model, invariants, on-disk format) is at the top of ilog.c.
 *
 * How the store uses it:
 *   1. ilog_create when the pool (or a log vdev) is created; ilog_checkpoint_position(log, 0,
 *      &pos) gives the initial position, which goes into the uberblock (ilog_position_encode).
 *   2. Per stable change: ilog_append (returns the record's LSN), then ilog_commit with a waiter;
 *      reply to the client when the waiter's iw_done runs with 0 (or at once when ilog_commit
 *      returns ILOG_DONE).
 *   3. Per txg sync of txg S: ilog_checkpoint_position(log, S, &pos); write the uberblock of S with
 *      pos; once that uberblock is durable, ilog_release(log, &pos) lets the log reuse the space
 *      before pos. (ilog_checkpoint does both steps at once, for a caller whose position is
 *      already durable or that keeps no older position.)
 *   4. On import: ilog_replay from the uberblock's position, apply the records whose txg is newer
 *      than the uberblock's, sync a txg whose uberblock records the returned end position, then
 *      ilog_open at that end position.
 *
 * Threads: every function is thread-safe except ilog_close (no other call on that log may be in
 * progress or follow) and ilog_replay (which works without a struct ilog). ilog_close and
 * ilog_replay wait for I/O and must not run on the blk engine thread. */
#ifndef SHALE_ILOG_H
#define SHALE_ILOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "blk/blk.h"

/* The largest log block. 1 MiB, the same as the pool's largest block: a burst of concurrent
 * stable writes (64 clients x 16 KiB) still goes out as one sequential device write per flush,
 * which is what a device's bandwidth rewards; the price is up to one block of unused space at the
 * end of the region per lap and a 1 MiB buffer per block being filled or written. */
#define ILOG_BLOCK_MAX (1024u * 1024u)
/* The smallest region: room for two largest blocks, so one can be filled while the other is
 * still needed. Production logs are much larger (tens of MiB to GiB). */
#define ILOG_REGION_MIN (2u * ILOG_BLOCK_MAX)
#define ILOG_BLOCK_HEADER_BYTES 96u  /* see the table in ilog.c */
#define ILOG_RECORD_HEADER_BYTES 24u /* see the table in ilog.c */
/* The largest payload one record can carry: one record alone in the largest block. Larger
 * payloads are refused with -EMSGSIZE. */
#define ILOG_PAYLOAD_MAX (ILOG_BLOCK_MAX - ILOG_BLOCK_HEADER_BYTES - ILOG_RECORD_HEADER_BYTES)
/* ilog_commit's "every record appended so far". */
#define ILOG_LSN_ALL UINT64_MAX
/* A positive return of ilog_commit and ilog_wait_space: done at once, the waiter is not used. */
#define ILOG_DONE 1

struct ilog;

/* Where replay starts (and where a writer continues): a block's place in the chain. The store
 * keeps one in each uberblock, as the ILOG_POSITION_BYTES bytes of ilog_position_encode. */
struct ilog_position {
	uint64_t ip_offset;        /* absolute byte offset of the block on the vdev */
	uint64_t ip_seq;           /* the block's sequence number */
	uint64_t ip_next_lsn;      /* the LSN of the block's first record */
	uint64_t ip_log_guid;      /* the log the chain belongs to */
	uint8_t ip_prev_cksum[16]; /* the checksum the block must carry for its predecessor */
};
#define ILOG_POSITION_BYTES 48u

/* Encodes pos into exactly ILOG_POSITION_BYTES little-endian bytes (table in ilog.c). */
void ilog_position_encode(const struct ilog_position *pos, uint8_t out[ILOG_POSITION_BYTES]);
/* Decodes; -EINVAL for a position no log ever produces (unaligned offset, zero guid, seq or
 * LSN). Replay and ilog_open still check it against the region. */
SH_MUST_CHECK int ilog_position_decode(const uint8_t in[ILOG_POSITION_BYTES],
                                       struct ilog_position *pos_out);

/* A caller's wait for durability (ilog_commit) or for space (ilog_wait_space), embedded in the
 * caller's own state. The caller owns it; the log links it until iw_done has been called, and
 * never touches it afterwards (iw_done may free it). */
struct ilog_waiter {
	void (*iw_done)(struct ilog_waiter *w, int status); /* (in) */
	void *iw_arg;                                       /* (in) the caller's own pointer */
	/* private to the log */
	uint64_t iw_lsn;
	struct ilog_waiter *iw_next;
};

/* Creates a new, empty log over [start, start + bytes) of vdev (both multiples of
 * BLK_SECTOR_BYTES, bytes >= ILOG_REGION_MIN, inside the vdev's data area) for pool_guid. It
 * draws a new random log guid, so no block already in the region (an older log's, or garbage) can
 * continue its chain: replay of the new log finds nothing, and no I/O is needed. The initial
 * position is ilog_checkpoint_position(*out, 0, &pos). The vdev must outlive the log. Returns 0,
 * -EINVAL (bad region) or -ENOMEM; destroy with ilog_close. */
SH_MUST_CHECK int ilog_create(struct blk_vdev *vdev, uint64_t start, uint64_t bytes,
                              uint64_t pool_guid, struct ilog **out);
/* Continues the chain of an existing log at resume, normally the end position ilog_replay
 * returned. Everything before resume counts as free space: the caller has made the replayed
 * records durable in the pool (a txg sync whose uberblock records resume) before the log can wrap
 * onto them. Returns 0, -EINVAL (bad region or a position outside it) or -ENOMEM; destroy with
 * ilog_close. */
SH_MUST_CHECK int ilog_open(struct blk_vdev *vdev, uint64_t start, uint64_t bytes,
                            uint64_t pool_guid, const struct ilog_position *resume,
                            struct ilog **out);
/* Waits until no log I/O is in flight and every commit waiter has been called (records that were
 * committed get written; records only appended are dropped), completes any space waiter with
 * -ECANCELED on the calling thread, and frees the log. */
void ilog_close(struct ilog *log);

/* Copies a record (type: the store's; txg: the transaction group that holds the change in memory;
 * len <= ILOG_PAYLOAD_MAX bytes of payload, which may be NULL when len is 0) into the batch being
 * filled and returns its LSN: LSNs are consecutive from 1 across the whole life of the log, in the
 * order appends took place. Never waits for I/O (it may start a write of a filled block).
 * Returns 0; -EMSGSIZE when len is too large; -EAGAIN when the log is full (the space it would
 * need is still held by records of unsynced txgs, or too many filled blocks wait to be written):
 * force a txg sync and use ilog_wait_space; -ENOMEM; -EIO after the log device failed. */
SH_MUST_CHECK int ilog_append(struct ilog *log, uint16_t type, uint64_t txg, const void *payload,
                              uint32_t len, uint64_t *lsn_out);
/* Asks for every record up to lsn (ILOG_LSN_ALL: every record appended so far) to be durable.
 * Group commit: at most one log write (of one or more blocks) plus its flush is in flight; the
 * records appended meanwhile go out together in the next write, started as soon as that flush
 * completes.
 * Returns:
 *   ILOG_DONE  the records are already durable; w is not used and iw_done will not be called, so
 *              the caller never finds its callback running inside its own call.
 *   0          w is queued: w->iw_done(w, 0) runs on the blk engine thread, with no log lock held,
 *              once the records are written and flushed, or w->iw_done(w, -EIO) if the log device
 *              fails first (the log then refuses all further work with -EIO).
 *   -EIO       the log has already failed; w is not used.
 *   -EINVAL    lsn was never handed out; w is not used.
 *   -EINPROGRESS  w is NULL (a caller only asking) and the records are not durable yet; nothing
 *              is queued and no write is started for them. */
SH_MUST_CHECK int ilog_commit(struct ilog *log, uint64_t lsn, struct ilog_waiter *w);
/* After ilog_append returned -EAGAIN: returns ILOG_DONE when space has been freed since the most
 * recent refused append (retry now; w is not used), or 0 with w queued: w->iw_done(w, 0) runs
 * once space is freed, on the thread that frees it (the caller of ilog_release or
 * ilog_checkpoint, or the blk engine thread when a backlog of filled blocks has been written),
 * with no log lock held; -EIO if the log has failed (w is not used; a queued waiter gets -EIO if
 * the log fails later, -ECANCELED from ilog_close); -EINVAL when w is NULL and would be queued.
 * Being woken is a hint to retry, not a reservation: the append may be refused again. */
SH_MUST_CHECK int ilog_wait_space(struct ilog *log, struct ilog_waiter *w);

/* The position replay would have to start from if every txg <= synced_txg were durable in the
 * pool: the oldest block still holding a record with txg > synced_txg, or the current end (the
 * block being filled, or the place of the next one) when none does. Releases nothing. */
void ilog_checkpoint_position(struct ilog *log, uint64_t synced_txg, struct ilog_position *pos_out);
/* Lets the log reuse the space before pos (from ilog_checkpoint_position of this log), once the
 * blocks there are durable. Call it only when a durable uberblock records pos (or a later
 * position): until then a crash would replay from an older position whose blocks must still be
 * intact. Wakes space waiters when space is freed (on this thread). Returns 0 or -EINVAL (a
 * position of another log or beyond the current end). */
SH_MUST_CHECK int ilog_release(struct ilog *log, const struct ilog_position *pos);
/* ilog_checkpoint_position followed by ilog_release of the same position. */
SH_MUST_CHECK int ilog_checkpoint(struct ilog *log, uint64_t synced_txg,
                                  struct ilog_position *pos_out);

/* Called by ilog_replay for each record, in LSN order. payload is valid only during the call.
 * Return 0 to continue; a negative errno stops replay, which returns it. */
typedef int (*ilog_visit_fn)(void *arg, uint16_t type, uint64_t txg, uint64_t lsn,
                             const void *payload, uint32_t len);

/* Reads the chain of the log in [start, start + bytes) of vdev (on engine, the engine the vdev's
 * leaves are served by) from position `from` and calls visit for each record, in LSN order. It
 * stops at the first block that is missing, has the wrong magic, pool or log guid, sequence number
 * or predecessor checksum, or fails its checksum (a torn or stale tail), after trying every child
 * of a mirror. On success returns the number of records visited (>= 0) and, when end_out is not
 * NULL, the position where the writer continues (pass it to ilog_open). Returns -EINVAL for a
 * region or position that cannot be right, -EIO when every child failed to read a block or when a
 * block whose checksum passed holds nonsense (records of the blocks before it have been visited),
 * -ENOMEM, or visit's own negative return. */
SH_MUST_CHECK int64_t ilog_replay(struct blk_engine *engine, struct blk_vdev *vdev, uint64_t start,
                                  uint64_t bytes, uint64_t pool_guid,
                                  const struct ilog_position *from, ilog_visit_fn visit, void *arg,
                                  struct ilog_position *end_out);

/* Counters since ilog_create/ilog_open, for `shale pool status` and tests. */
struct ilog_stats {
	uint64_t is_records;          /* records appended */
	uint64_t is_payload_bytes;    /* payload bytes appended */
	uint64_t is_writes;           /* log writes (each one or more blocks, then one flush) */
	uint64_t is_blocks;           /* blocks written */
	uint64_t is_write_bytes;      /* bytes written */
	uint64_t is_flushes;          /* flushes completed */
	uint64_t is_flushed_records;  /* records made durable by those flushes */
	double is_records_per_flush;  /* is_flushed_records / is_flushes (0 before the first) */
	uint64_t is_full;             /* appends refused with -EAGAIN */
	uint64_t is_space_used_bytes; /* region bytes not available to new blocks now */
	uint64_t is_space_bytes;      /* the region's size */
	uint64_t is_next_lsn;         /* the LSN the next append gets */
	uint64_t is_durable_lsn;      /* every record up to this one is durable */
	uint64_t is_buffer_bytes;     /* memory in block buffers now (ilog_buffer_bytes) */
};
void ilog_stats(struct ilog *log, struct ilog_stats *stats_out);
/* Memory the log holds in block buffers now: the block being filled, the blocks waiting to be
 * written or being written (ILOG_BLOCK_MAX each, whatever their size on disk) and up to a few
 * idle ones kept for reuse. At most about (ILOG_BACKLOG_MAX_BYTES of ilog.c + 6 blocks) = 38 MiB
 * while the log device keeps up; the pool counts it against its ARC limit. Takes the log's lock
 * (a leaf), so it may be called under the caller's own locks. */
uint64_t ilog_buffer_bytes(struct ilog *log);

#endif
