/* pool_fs.h: a pool dataset served through the asynchronous file-system interface (fs/fs.h): the
 * POSIX object layer (zpl.h) attached to the dataset as its owner, made durable through the
 * pool's intent log and transaction groups. The theory is at the top of pool_fs.c. */
#ifndef SHALE_POOLFS_POOL_FS_H
#define SHALE_POOLFS_POOL_FS_H

#include <stdint.h>

#include "fs/fs.h"
#include "pool/pool.h"

/* Opens dataset `dataset` of pool p (which must exist: pool_ds_create) as a file system whose
 * attributes report fsid. Attaches the zpl owner to the dataset unless one is attached already
 * (pool_fs_attach at import), and formats a dataset that has never been used (a root directory
 * owned by uid 0, gid 0, mode 0755), waiting until the format is durable. Blocking: not on an
 * event loop or the blk engine thread. Returns 0 and *fs_out; -ENOENT (no such dataset), -EBUSY
 * (the dataset has an owner that is not a zpl, or another open with another fsid holds unsynced
 * data), -EIO, -ENOMEM, or the dataset open's error.
 * Destroy with fs_destroy once every submitted request has completed and every READ buffer has
 * been released: it closes the dataset (the owner stays attached until the pool evicts it). */
SH_MUST_CHECK int pool_fs_open(struct pool *p, const char *dataset, uint64_t fsid,
                               struct fs **fs_out);

/* A pool_attach_fn (struct pool_open_opts.po_attach, arg unused) that attaches the zpl owner to
 * ds, so that pool_import replays the dataset's log records through zpl_replay and pool_check
 * and pool_ds_destroy learn its data blocks. Returns 0 (also when an owner is attached already),
 * -EIO, -ENOMEM. */
SH_MUST_CHECK int pool_fs_attach(void *arg, struct pool_ds *ds);

/* `shale fs diff` (zfs diff; a pool_fs_diff_fn for struct pool_open_opts.po_fs_diff): prints to
 * out, a line per path in path order, what changed from snapshot `from` ("fs@snap") to `to`
 * ("fs@snap" of the same file system, "fs" itself, or NULL: from's file system as it is):
 * "M\t/path" (modified), "+\t/path" (created), "-\t/path" (removed), "R\t/old -> /new"
 * (renamed). The rules are in zpl_diff.c, the reading in pool_fs_diff.c. Blocking (both trees
 * are read whole, the pool lock taken a step at a time): not on an event loop or the blk engine
 * thread. Returns 0; or -EINVAL (a name), -EXDEV (not of one file system), -ENOENT (no such
 * snapshot or file system), -EBUSY (being destroyed), -EIO, -ENOMEM or out's error, with err
 * (err_len bytes) saying why in a sentence. */
SH_MUST_CHECK int pool_fs_diff(struct pool *p, const char *from, const char *to, FILE *out,
                               char *err, size_t err_len);

/* Counters since pool_fs_open, for tests and status. */
struct pool_fs_stats {
	uint64_t ps_restarts;      /* runs that stopped on a block not in memory and started again */
	uint64_t ps_throttled;     /* changes deferred by the pool's dirty-data throttle */
	uint64_t ps_log_commits;   /* stable changes made durable through the intent log */
	uint64_t ps_txg_waits;     /* txg syncs waited for (one per batch of COMMITs and oversize
	                            * stable writes) */
	uint64_t ps_txg_waited_reqs; /* requests completed by those waits */
	uint64_t ps_slow_ctx_allocs; /* slow-path contexts allocated (not taken from the free list) */
	uint64_t ps_adopted_blocks;  /* blocks of large stable writes a txg took as the files'
	                              * blocks instead of writing them again (the dataset's, since it
	                              * was loaded) */
	uint64_t ps_pend_scans;      /* full scans of the dataset's table of pending writes (one
	                              * per durable txg at most) */
	uint64_t ps_reap_steps;      /* steps of freeing removed files' blocks (zpl_reap) */
	bool ps_reap_busy;           /* the freeing of removed files is running */
};
/* Fills *st for a file system pool_fs_open returned. */
void pool_fs_stats(struct fs *fs, struct pool_fs_stats *st);

/* ---- shale send / shale receive (pool_fs_send.c: the model and the stream's format) ---- */

/* The most payload one stream record carries: a tree entry and its block. */
#define POOL_FS_SEND_PAYLOAD_MAX (BLK_MAX_BLOCK_BYTES + 4096u)

struct pool_fs_send_stats {
	uint64_t ss_puts, ss_dels; /* entries sent, keys removed */
	uint64_t ss_data_bytes;    /* blocks' bytes, as they travel */
	uint64_t ss_stored_blocks; /* blocks sent as stored (POOL_FS_SEND_STORED) */
	uint64_t ss_read_ahead;    /* blocks whose reads it started ahead of sending them */
	uint64_t ss_stream_bytes;  /* all of it that reached fd */
};
/* pool_fs_send's flags: compressed blocks travel as stored (zfs send -c), not decompressed;
 * a receiver with the same compression writes them as they come. */
#define POOL_FS_SEND_STORED 0x1u
/* Writes snapshot "fs@snap" of pool p to fd as a stream: full, or with from ("@base" or
 * "fs@base", an older snapshot of the same file system) what changed since it; flags:
 * POOL_FS_SEND_STORED or 0. Blocking (reads the pool): not on an event loop. 0, or an error with
 * err saying why (-ENOENT, -EINVAL, a write's error: -EPIPE when the reader went away). */
SH_MUST_CHECK int pool_fs_send(struct pool *p, const char *snapshot, const char *from,
                               unsigned flags, int fd, struct pool_fs_send_stats *st, char *err,
                               size_t err_len);

struct pool_fs_recv_stats {
	uint64_t rs_puts, rs_dels, rs_data_bytes, rs_stream_bytes;
};
/* Reads a stream from fd into file system fs of pool p: a full stream makes fs (which must not
 * exist), an incremental one applies to fs, whose latest snapshot must be the stream's base with
 * nothing changed since (force: rolled back to the base first, later snapshots destroyed). Ends
 * with the stream's snapshot taken (its GUID and creation time kept). All or nothing: on any
 * failure (the stream cut off, damaged, out of order; no space) fs is as it was and err says
 * why. fs must not be exported. Blocking. 0, -EPROTO (the stream), -EEXIST, -ENOENT, -EBUSY, or
 * the pool's error. */
SH_MUST_CHECK int pool_fs_receive(struct pool *p, const char *fs, bool force, int fd,
                                  struct pool_fs_recv_stats *st, char *err, size_t err_len);

#endif
