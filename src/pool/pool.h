/* pool.h: the storage pool: vdevs, transaction groups, datasets, the block cache and the intent log
 * wired together. What the CLI and the server call; dataset owners (the POSIX layer) use
 * pool/pool_impl.h in addition.
 *
 * Model for callers (the theory, the rules and the on-disk tables are at the top of pool.c):
 *   - A pool is 1..N top-level vdevs (a leaf or a mirror; N > 1 stripes) and optionally a log
 *     vdev. pool_create labels the leaves and writes the first transaction group (txg 1);
 *     pool_import assembles the vdevs from the leaves' labels, opens the newest uberblock and
 *     replays the intent log before it returns; pool_export writes a last txg and closes;
 *     pool_close closes without one (what a crash looks like, minus the process dying).
 *   - Changes are made in memory in the open txg and written by a sync thread, a txg at a time
 *     (every few seconds, when dirty data passes a limit, or on request). Stable changes are
 *     made durable at once through the intent log (pool_impl.h) and replayed after a crash.
 *   - Datasets are named trees in the pool; each is managed by an owner (a file system) that the
 *     caller attaches (pool_impl.h). A pool keeps working without owners for everything but log
 *     replay and destroying datasets that hold data blocks.
 *
 * Errors are 0 or a negative errno (or -SH_E*), as everywhere in Shale. Every function here may
 * block (I/O, the sync thread): none may run on an event-loop thread or the blk engine thread. */
#ifndef SHALE_POOL_H
#define SHALE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "blk/blk.h"
#include "cache/arc.h"
#include "ilog/ilog.h"

#define POOL_NAME_MAX 63u    /* pool and dataset names: [A-Za-z0-9_.-]{1,63} for pools */
#define POOL_DS_NAME_MAX 64u /* dataset names: [A-Za-z0-9_.-]{1,64} */
#define POOL_SNAP_NAME_MAX 64u /* snapshot names (after the '@'): [A-Za-z0-9_.:-]{1,64} */
#define POOL_SNAP_FULL_MAX (POOL_DS_NAME_MAX + 1u + POOL_SNAP_NAME_MAX) /* "fs@snap" */
#define POOL_SNAP_BATCH_MAX 64u /* snapshots one request takes together */
#define POOL_MAX_TOPS 64u    /* top-level vdevs (the space allocator's SPACE_MAX_VDEVS) */
#define POOL_FORMAT_VERSION 1u

/* Defaults of struct pool_open_opts (a zero field means its default). */
#define POOL_ARC_MAX_DEFAULT (256ull << 20) /* 256 MiB for cached blocks and dirty data */
/* The dirty data limit D (writers throttled past 2 D; a sync starts at a quarter of it, below)
 * defaults to the ARC limit divided by POOL_DIRTY_ARC_DIVISOR, within [POOL_DIRTY_MAX_MIN,
 * POOL_DIRTY_MAX_DEFAULT]: the open
 * txg (up to 2 D) and the txg being written (up to 2 D) then take at most 40% of the ARC's limit,
 * and the intent log's buffers fit in the rest of the half the ARC can give (pool.c's memory
 * model). At least 1 MiB: smaller txgs cost more in fixed work than they save in memory. At
 * most 128 MiB: each txg rewrites the tree nodes its changes touched (about 570 of 16 KiB for
 * sfs2008's 512 MB file set) whatever its size, so larger txgs cost less per change; with a 2 GiB
 * limit, 128 MiB against 64 answered sfs2008 in 0.10 against 0.13-0.17 ms at 60,000 ops/s
 * (queued 0.30-0.33 against 0.44-0.66 ms), and 160 or 256 MiB queued requests longer behind the
 * larger txgs' locked phases (docs/performance.md; measured when a sync started at D). The
 * other side of the trade: a forced txg (snapshot create, a property change) waits for the open
 * txg's data to be written, so under a write load it takes longer the more is dirty when it
 * comes: with the default 256 MiB and syncs started at D = 25.6 MiB, a create at 10,000 sfs2008
 * ops/s took a median of 161-195 ms; with D = 8 MiB (`shale serve --dirty-max`) 43-83 ms, but an
 * offline receive, which then waited at 2 D = 16 MiB, ran 30% slower (367 against 525 MB/s).
 * Starting syncs at D / 4 once the sync thread has been idle as long as its last txg took (and at
 * D in any case) keeps most of both: the create's median fell to 49.5-75 ms (its txg carries 2-4
 * MiB, not 25; 52-54 ms with every sync at D / 4, which cost the receive 30%) and sfs2008's mean
 * response at 10,000 ops/s from 3.3-4.4 to 0.8-1.3 ms, while the offline receive ran at 459
 * MB/s against 477-514 with syncs at D (docs/performance.md, "A txg at a quarter of the dirty
 * limit"). */
/* A txg is started when D / POOL_DIRTY_SYNC_DIVISOR bytes are dirty (ZFS's
 * zfs_dirty_data_sync_percent), not only at D, provided the sync thread has been idle as long
 * as its last txg took (pool_txg.c): under a moderate write load txgs stay small and a forced
 * one (snapshot create) waits for less, while a writer faster than the devices, which keeps
 * the sync thread busy, still gets txgs of D and keeps up to 2 D in flight. */
#define POOL_DIRTY_SYNC_DIVISOR 4u
#define POOL_DIRTY_SYNC_MIN (1ull << 20)
#define POOL_DIRTY_MAX_DEFAULT (128ull << 20) /* at most 128 MiB */
#define POOL_DIRTY_MAX_MIN (1ull << 20)
#define POOL_DIRTY_ARC_DIVISOR 10u
#define POOL_TXG_INTERVAL_MS_DEFAULT 5000u       /* a txg at least every 5 s */
#define POOL_RECORD_BYTES_DEFAULT (128u * 1024u) /* a dataset's data block size */
#define POOL_LOG_REGION_MAX (1ull << 30)         /* the log region on vdev 0: at most 1 GiB... */
#define POOL_LOG_REGION_SHIFT 5u                 /* ...and 1/32 of its data area by default */
#define POOL_DESTROY_STEP_DEFAULT 4096u          /* tree entries freed per destroy step */

struct pool;
struct pool_ds;

/* Compression of a dataset's blocks. DEFAULT: the pool's (po_compress), itself lz4 by default. */
enum pool_compress {
	POOL_COMPRESS_DEFAULT = 0,
	POOL_COMPRESS_OFF = 1,
	POOL_COMPRESS_LZ4 = 2,
	POOL_COMPRESS_ZSTD = 3,
};
/* The names the commands use: "default", "off", "lz4", "zstd". from_name returns the value, or -1
 * for another name (and for "default" unless allow_default). */
const char *pool_compress_name(enum pool_compress c);
int pool_compress_from_name(const char *name, bool allow_default);

/* Attaches an owner to a dataset that needs one while the pool works on its own: at import, for a
 * dataset with log records to replay; in pool_ds_destroy and pool_check, to learn the data blocks
 * its tree entries name. It is expected to call pool_ds_set_owner(ds, ...) and return 0; a
 * negative errno means no owner (import then fails, destroy refuses; check checks the tree only).
 * Called on the thread that called the pool function, without the pool lock; it may take the
 * lock and read blocks synchronously (pool_block_read_sync). */
typedef int (*pool_attach_fn)(void *arg, struct pool_ds *ds);

/* `shale fs diff` (zfs diff), for the status socket's "fs diff" (pool_statsock.c) while a process
 * holds the pool: the layer that knows the file systems' format does it (pool_fs_diff,
 * poolfs/pool_fs.h), the pool only carries it. Prints to out what changed from snapshot from
 * ("fs@snap") to to ("fs@snap", "fs", or NULL: from's file system as it is); returns 0, or a
 * negative errno with err (err_len bytes) saying why. */
typedef int (*pool_fs_diff_fn)(struct pool *p, const char *from, const char *to, FILE *out,
                               char *err, size_t err_len);
/* `shale send` and `shale receive` (zfs send / receive) for the status socket's "send" and
 * "receive" while a process holds the pool, carried the same way (pool_fs_send and
 * pool_fs_receive, poolfs/pool_fs.h, behind the server's adapters). send writes snapshot's stream
 * (from: NULL, or its base) to fd and says how many bytes it wrote; receive reads one from fd
 * into file system fs; stored asks for blocks as stored (send -c). 0, or a negative errno with err
 * saying why. */
typedef int (*pool_fs_send_fn)(struct pool *p, const char *snapshot, const char *from,
                               bool stored, int fd, uint64_t *written, char *err, size_t err_len);
typedef int (*pool_fs_receive_fn)(struct pool *p, const char *fs, bool force, int fd, char *err,
                                  size_t err_len);

struct pool_open_opts {
	/* 0: POOL_ARC_MAX_DEFAULT. Bounds the pool's cached blocks plus its dirty data, the buffers
	 * of the txg being written and the intent log's blocks (pool.c, memory model). */
	uint64_t po_arc_max_bytes;
	/* 0: po_arc_max_bytes / POOL_DIRTY_ARC_DIVISOR within [POOL_DIRTY_MAX_MIN,
	 * POOL_DIRTY_MAX_DEFAULT]. A larger value is honoured, but when the open and the syncing
	 * txg's dirty data (up to 4x this) and the log's buffers pass half of po_arc_max_bytes the
	 * excess goes beyond the memory bound (the ARC keeps half its limit for cached blocks). */
	uint64_t po_dirty_max_bytes;
	/* 0: po_dirty_max_bytes / POOL_DIRTY_SYNC_DIVISOR, at least POOL_DIRTY_SYNC_MIN (or D
	 * when D is smaller); at most D. A txg is started once this much is dirty and the sync
	 * thread has been idle as long as its last txg took (at D in any case). */
	uint64_t po_dirty_sync_bytes;
	uint32_t po_txg_interval_ms; /* 0: POOL_TXG_INTERVAL_MS_DEFAULT */
	/* pool_create only: bytes of vdev 0's data area given to the intent log when there is no
	 * log vdev. 0: 1/32 of the area clamped to [ILOG_REGION_MIN, POOL_LOG_REGION_MAX]. Rounded
	 * down to the sector. */
	uint64_t po_log_region_bytes;
	enum pool_compress po_compress; /* datasets' default; DEFAULT = lz4 */
	uint32_t po_record_bytes;       /* datasets' default; 0: POOL_RECORD_BYTES_DEFAULT */
	/* Entries of a dataset being destroyed freed per step, one step per txg (pool_destroy.c);
	 * 0: POOL_DESTROY_STEP_DEFAULT. */
	uint32_t po_destroy_step;
	pool_attach_fn po_attach;       /* may be NULL */
	void *po_attach_arg;
	pool_fs_diff_fn po_fs_diff;     /* may be NULL: the status socket then refuses "fs diff" */
	pool_fs_send_fn po_fs_send;     /* may be NULL: ... refuses "send" */
	pool_fs_receive_fn po_fs_receive; /* may be NULL: ... refuses "receive" */
	/* pool_import only: read the pool without writing to it (`shale pool status` and `list` of
	 * a pool no server holds). The leaves are opened read only; the intent log's records are
	 * counted (pool_status: ps_log_unreplayed) and left for the next import to replay, so
	 * datasets show their last txg's state; no txg is written, no label rewritten, no bad copy
	 * repaired; every change is refused with -EROFS. Close it with pool_close or pool_export
	 * (which then writes nothing either). */
	bool po_read_only;
};

/* ---------------------------------------------------------------------------------------------
 * Creating, importing, closing */

enum pool_layout {
	POOL_LAYOUT_STRIPE = 0, /* every leaf is a top-level vdev of its own */
	POOL_LAYOUT_MIRROR = 1, /* consecutive groups of pc_mirror_width leaves form mirrors */
};

struct pool_create_args {
	const char *pc_name; /* [A-Za-z0-9_.-]{1,63} */
	enum pool_layout pc_layout;
	unsigned pc_mirror_width; /* POOL_LAYOUT_MIRROR: 2..BLK_MIRROR_MAX (0 means all leaves
	                           * form one mirror) */
	/* pool_create: the leaves by path, created at pc_create_bytes each when that is non-zero
	 * (they must not exist), else opened as they are (files or block devices). */
	const char *const *pc_paths;
	unsigned pc_npaths;
	const char *const *pc_log_paths; /* 0, 1 (a leaf) or 2..BLK_MIRROR_MAX (a mirror) */
	unsigned pc_nlog_paths;
	uint64_t pc_create_bytes;
	const struct pool_open_opts *pc_opts; /* NULL: all defaults */
};

/* Creates a pool on the leaves pc_paths (and the log leaves pc_log_paths), writes their labels,
 * an empty metadata tree, the allocator's first state and the uberblock of txg 1, initialises the
 * intent log, and returns the open pool. Every leaf is overwritten. Returns 0; -EINVAL (a bad
 * name, layout or leaf count, a leaf too small, a path with a newline); -E2BIG (the configuration
 * text does not fit a label); or the error of opening or writing a leaf. Close with pool_export
 * or pool_close, which close the leaves the pool opened. */
SH_MUST_CHECK int pool_create(const struct pool_create_args *args, struct pool **out);
/* The same on leaves the caller has opened (memory and fault leaves for tests): pc_paths and
 * pc_log_paths are ignored. The caller keeps ownership of devs and log_devs and closes them after
 * the pool is closed. */
SH_MUST_CHECK int pool_create_on_devs(const struct pool_create_args *args,
                                      struct blk_dev *const *devs, unsigned ndevs,
                                      struct blk_dev *const *log_devs, unsigned nlog_devs,
                                      struct pool **out);

/* Imports the pool whose leaves are at paths (every leaf of the pool, in any order; leaves of
 * other pools are refused). A mirror with missing children imports degraded (with a warning); a
 * missing top-level vdev or log vdev refuses the import with -ENXIO (the log may hold
 * acknowledged changes). Finds the newest valid uberblock on all leaves, loads the pool's
 * metadata, replays the intent log through the datasets' owners (opts->po_attach attaches them),
 * writes a txg with the replayed changes, and returns the open pool. Errors: -ENOENT (a leaf
 * without a pool label), -EINVAL (leaves of different pools, a configuration that does not
 * parse, a format version this code does not know), -ENXIO, -EIO (metadata that cannot be read),
 * -ENOTSUP (records to replay for a dataset without an owner), -ENOMEM, or a leaf's open error. */
SH_MUST_CHECK int pool_import(const char *const *paths, unsigned npaths,
                              const struct pool_open_opts *opts, struct pool **out);
/* The same on leaves the caller has opened; the caller keeps ownership of devs. */
SH_MUST_CHECK int pool_import_devs(struct blk_dev *const *devs, unsigned ndevs,
                                   const struct pool_open_opts *opts, struct pool **out);

/* The leaves of one pool found in a directory (pool_find_leaves). */
struct pool_leaves {
	char **pl_paths;   /* pl_count paths, owned */
	unsigned pl_count;
	unsigned pl_busy;  /* files that another user had open (locked), so could not be read */
};
/* Collects the files and block devices in dir whose labels name pool `name` (at most 256).
 * Returns 0 (possibly with none found), -errno when dir cannot be read, -ENOMEM. Free with
 * pool_leaves_fini. */
SH_MUST_CHECK int pool_find_leaves(const char *dir, const char *name, struct pool_leaves *out);
void pool_leaves_fini(struct pool_leaves *leaves);
/* The names of the pools in a directory: those whose leaves' labels can be read there, and those
 * a process serves from there (their leaves are locked; their status sockets, .NAME.status, name
 * them). Sorted, each once (at most 256). Returns 0, -errno when dir cannot be read, -ENOMEM.
 * Free with pool_names_fini. */
struct pool_names_found {
	char **pn_names; /* pn_count names, owned */
	unsigned pn_count;
};
SH_MUST_CHECK int pool_find_names(const char *dir, struct pool_names_found *out);
void pool_names_fini(struct pool_names_found *names);
/* pool_find_leaves then pool_import; on failure err (err_len bytes) says why in a sentence for
 * the administrator (none found, in use by another process, the import's error). */
SH_MUST_CHECK int pool_import_by_name(const char *dir, const char *name, const struct pool_open_opts *opts,
				      struct pool **out, char *err, size_t err_len);

/* Writes a last txg (every change so far becomes durable), then closes the pool: stops the sync
 * thread, closes the log, frees everything and closes the leaves the pool opened. Every dataset
 * must have been closed and every block hold released. Returns 0, or -EIO when the last txg
 * could not be written (the pool is closed all the same; the previous txg and the log stand). */
SH_MUST_CHECK int pool_export(struct pool *p);
/* Closes the pool without a last txg: what is not durable yet is dropped (changes whose log
 * records are durable come back through replay at the next import). Same conditions as
 * pool_export. NULL is a no-op. */
void pool_close(struct pool *p);

/* ---------------------------------------------------------------------------------------------
 * Changing a pool's vdevs (pool_vdev.c): zpool attach and detach, on an exported pool.
 *
 * devs are the pool's leaves as found (a missing leaf is simply absent; the caller keeps them).
 * Each function first imports the pool from them with opts and exports it again, so that its
 * intent log is replayed and its last state records which leaves missed writes, then writes
 * the new configuration into the labels of every present leaf, with a configuration txg above
 * every txg written so far. Import takes the newest configuration its leaves hold, leaves out
 * a leaf that only an older one names (with a warning), and brings older labels up to date, so
 * a change cut short by a crash is either absent or whole. A leaf is named by its guid (decimal),
 * by its path as the configuration holds it, or by the path of the device open for it. On
 * failure err (err_len bytes) says why in a sentence for the administrator. */

/* Makes new_dev one more child of the vdev (a top-level vdev, or the log vdev) that holds leaf
 * `existing`: a plain disk becomes a two-way mirror, an N-way mirror an N+1-way one. new_dev
 * holds none of the pool's blocks yet: the configuration records the txg it was attached
 * before, every import marks it STALE until a check has found no problem, and pool_check copies
 * every block onto it (a resilver). Its path as opened is recorded. force: new_dev may hold
 * another pool's labels. Returns 0; -ENOENT (no such leaf), -EINVAL (ambiguous name, new_dev too
 * small for the vdev's data area), -EALREADY (new_dev, one of devs, is a child of that vdev
 * already: an attach done before), -EEXIST (new_dev is another leaf of this pool), -EBUSY
 * (new_dev holds another pool's labels), -EOVERFLOW (the mirror has BLK_MIRROR_MAX children), or
 * the error of the import, export or a label write. */
SH_MUST_CHECK int pool_vdev_attach(struct blk_dev *const *devs, unsigned ndevs,
                                   const struct pool_open_opts *opts, const char *existing,
                                   struct blk_dev *new_dev, bool force, char *err,
                                   size_t err_len);
/* Takes leaf `leaf` (present or missing) out of its mirror; a mirror left with one child becomes
 * a plain disk. A present detached leaf's labels are wiped (blk_label_wipe), so it is no longer
 * found as the pool's; its file or device is left as it is. Returns 0; -ENOENT, -EINVAL (not a
 * mirror's child: the only copy of a vdev cannot be detached); -EBUSY when no child that is
 * present and current (holding every block: not stale, not attached since the last txg) would
 * remain; or the error of the import, export or a label write. */
SH_MUST_CHECK int pool_vdev_detach(struct blk_dev *const *devs, unsigned ndevs,
                                   const struct pool_open_opts *opts, const char *leaf,
                                   char *err, size_t err_len);
/* Adds a top-level vdev made of new_devs (one leaf, a plain disk, or nnew > 1 leaves, a mirror)
 * to the pool: more space, allocated from beside the others (by free space). Its data area is
 * the smallest new leaf's less the labels at both ends, at least 16 MiB. The new leaves' labels
 * are written first; the allocator of the next import takes the new vdev as all free. Without
 * force, refused when the new vdev's shape (a disk, or a mirror of n) differs from any existing
 * top-level vdev's (its redundancy would differ, as zpool add refuses) or a new leaf holds
 * another pool's labels. Returns 0; -EINVAL (a leaf twice, too small, redundancy); -EEXIST (a new
 * leaf is this pool's); -EBUSY (another pool's labels); -EOVERFLOW (POOL_MAX_TOPS vdevs
 * already); or the error of the import, export or a label write. */
SH_MUST_CHECK int pool_vdev_add(struct blk_dev *const *devs, unsigned ndevs,
                                const struct pool_open_opts *opts, struct blk_dev *const *new_devs,
                                unsigned nnew, bool force, char *err, size_t err_len);
/* The way back for a pool whose log vdev is lost (every leaf of it missing: the pool cannot be
 * imported, for the log may hold acknowledged changes), as zpool import -m is: the log vdev
 * becomes new_dev alone (`old` names one of its leaves), a blank log; the records of the lost one
 * are discarded, so stable changes acknowledged after the pool's last txg are lost. No import
 * comes first (none can succeed). Returns 0; -ENOENT; -EINVAL (not a log leaf, new_dev too
 * small); -EBUSY (a log leaf is present: use attach and detach, losing nothing, or new_dev holds
 * another pool's labels, see pool_vdev_attach's force); or a label write's error. */
SH_MUST_CHECK int pool_vdev_replace_lost_log(struct blk_dev *const *devs, unsigned ndevs,
                                             const char *old, struct blk_dev *new_dev,
                                             bool force, char *err, size_t err_len);

/* ---------------------------------------------------------------------------------------------
 * Transaction groups */

/* Asks the sync thread to write the open txg now (returns at once). */
void pool_txg_request_sync(struct pool *p);
/* Waits until txg is durable (0: the txg open at the call), asking for a sync if it is not yet
 * being written. Returns 0, -EIO when the pool is suspended, -ECANCELED when it is closing. */
SH_MUST_CHECK int pool_txg_wait_synced(struct pool *p, uint64_t txg);
/* The last durable txg. */
uint64_t pool_synced_txg(struct pool *p);

/* ---------------------------------------------------------------------------------------------
 * Datasets */

struct pool_ds_props {
	uint32_t dp_record_bytes; /* a power of two from 4 KiB to 1 MiB; 0: the pool's default */
	enum pool_compress dp_compress;
	bool dp_receiving; /* a receive makes it: marked receiving from its first txg (pool_recv.c) */
};

/* Creates an empty dataset and waits until its creation is durable. name: [A-Za-z0-9_.-]{1,64}.
 * props may be NULL (defaults). Returns 0, -EINVAL (name or props), -EEXIST, -EIO (suspended),
 * -ENOSPC, -ENOMEM. */
SH_MUST_CHECK int pool_ds_create(struct pool *p, const char *name,
                                 const struct pool_ds_props *props);
/* Destroys a dataset: its name goes at once (one txg), then the sync thread frees its tree and
 * the data blocks its entries name (asked of its owner: an attached one, or one po_attach
 * attaches) in steps of po_destroy_step entries, one per txg, with memory bounded whatever the
 * dataset's size; a crash meanwhile loses nothing, and the next import goes on where the last
 * txg left off (pool_destroy.c). Waits until the whole dataset is freed and that is durable
 * when wait is true; else returns once the name is gone. The dataset must not be open. Returns
 * 0, -ENOENT, -EBUSY (open), -ENOTEMPTY (it has snapshots: destroy them first), -ENOTSUP (a
 * non-empty tree and no owner to name its data blocks),
 * -EIO (a suspended pool), -ENOMEM. */
SH_MUST_CHECK int pool_ds_destroy(struct pool *p, const char *name);
SH_MUST_CHECK int pool_ds_destroy_start(struct pool *p, const char *name, bool wait);
/* Datasets being destroyed in the background now (0 when none). */
unsigned pool_destroy_queued(struct pool *p);

struct pool_ds_info {
	char di_name[POOL_DS_NAME_MAX + 1];
	uint64_t di_id;
	uint64_t di_created_txg;
	uint64_t di_used_bytes;  /* REFER plus what only its snapshots hold (zfs list's USED) */
	uint64_t di_refer_bytes; /* allocated bytes of its tree and data blocks (REFER) */
	uint64_t di_snap_bytes;  /* what only its snapshots hold (usedbysnapshots) */
	uint64_t di_snapshots;   /* how many snapshots it has */
	uint64_t di_entries;    /* entries in its tree as of the last txg */
	bool di_receiving;      /* a receive into it has not ended (pool_recv.c) */
	uint32_t di_record_bytes;
	enum blk_compress di_compress;
	uint64_t di_quota_bytes; /* 0: none */
};
/* ---------------------------------------------------------------------------------------------
 * Snapshots (pool_snap.c: the theory, the dead lists and the space they hold) */

/* Takes a snapshot of each "fs@snap" in names (n of them, at most 64, one per file system), all
 * in one txg, and returns once that txg is durable: each holds every change made before the call
 * (dirty data included) and none made after it returned. All or none. Returns 0, -EINVAL (a
 * name), -ENOENT (no such file system), -EEXIST (a snapshot of that name exists), -EROFS, -EIO,
 * -ENOMEM; err (err_len bytes, may be NULL) says why in a sentence. */
SH_MUST_CHECK int pool_snapshot_create(struct pool *p, const char *const *names, unsigned n,
                                       char *err, size_t err_len);
/* Destroys snapshot "fs@snap": its record goes in one txg (durable on return) and the blocks only
 * it held are freed in the background. -ENOENT, -EBUSY (a clone depends on it: err names it),
 * -EINVAL, -EROFS, -EIO. */
SH_MUST_CHECK int pool_snapshot_destroy(struct pool *p, const char *name, char *err,
                                        size_t err_len);
/* Makes file system `name` a clone of snapshot "fs@snap" (zfs clone): writable, its tree the
 * snapshot's, sharing every block with it until either changes; its REFER starts at the
 * snapshot's and its USED at nothing. The snapshot cannot be destroyed while the clone exists.
 * Durable on return. -EINVAL (a name), -ENOENT (no such file system or snapshot), -EEXIST,
 * -EROFS, -EIO; err says why. */
SH_MUST_CHECK int pool_fs_clone(struct pool *p, const char *snapshot, const char *name, char *err,
                                size_t err_len);
/* Rolls file system fs back to its snapshot "fs@snap" (zfs rollback): in one txg, durable on
 * return, it becomes what the snapshot holds; what it had changed since is freed in the
 * background. Refused (-ENOTEMPTY, err naming the latest) when later snapshots exist unless
 * destroy_later, which destroys them first (-EBUSY when one has a clone); refused (-EBUSY) while
 * the file system is open (exported). -ENOENT, -EINVAL, -EROFS, -EIO; err says why. */
SH_MUST_CHECK int pool_fs_rollback(struct pool *p, const char *snapshot, bool destroy_later,
                                   char *err, size_t err_len);
/* Promotes clone fs (zfs promote): in one txg, durable on return, the snapshots of its origin's
 * file system up to its origin snapshot become its own (their names kept), the origin's file
 * system becomes a clone of that snapshot, and every other clone of those snapshots depends on
 * fs; the former origin can then be destroyed. Refused: -EINVAL (not a clone, a name), -EEXIST
 * (fs has a snapshot named as one that would move: err names both), -EBUSY (either file system,
 * or a snapshot that would move, is open: exported), -ENOENT, -EROFS, -EIO; err says why. */
SH_MUST_CHECK int pool_fs_promote(struct pool *p, const char *fs, char *err, size_t err_len);
/* Splits "fs@snap" into fs (POOL_DS_NAME_MAX + 1 bytes) and snap (POOL_SNAP_NAME_MAX + 1),
 * checking both names. 0 or -EINVAL. */
SH_MUST_CHECK int pool_snap_name_split(const char *full, char *fs, char *snap);
bool pool_snap_name_valid(const char *name);

struct pool_snap_info {
	char si_fs[POOL_DS_NAME_MAX + 1];
	char si_name[POOL_SNAP_NAME_MAX + 1];
	uint64_t si_id;
	uint64_t si_txg;
	uint64_t si_creation_ns; /* CLOCK_REALTIME */
	uint64_t si_refer_bytes; /* what it references */
	uint64_t si_used_bytes;  /* what only it holds: what its destroy frees */
};
/* Calls fn for each snapshot of file system fs (NULL: of every file system), by file system
 * name, then by txg; fn returning non-zero stops the walk with that value. */
SH_MUST_CHECK int pool_snapshot_list(struct pool *p, const char *fs,
                                     int (*fn)(void *arg, const struct pool_snap_info *info),
                                     void *arg);
/* `shale snapshot list`'s table: NAME (POOL/FS@SNAP), USED, REFER, CREATION; exact: bytes and
 * seconds since the epoch instead of 1.2M and dates. */
SH_MUST_CHECK int pool_snapshot_list_print(struct pool *p, const char *fs, bool exact, FILE *out);
/* What `shale fs list -t` shows: file systems, snapshots, or both (zfs list -t). */
enum pool_list_types {
	POOL_LIST_FILESYSTEMS = 1,
	POOL_LIST_SNAPSHOTS = 2,
	POOL_LIST_ALL = 3,
};
/* "filesystem", "snapshot", "all" (zfs's words; "fs" and "snap" too), or -1. */
int pool_list_types_from_name(const char *name);
/* fs list's table (pool_ds_list_print) with rows of the types asked for: a snapshot's row says
 * POOL/FS@SNAP, its USED and REFER, and "-" where a file system's figures do not apply. */
SH_MUST_CHECK int pool_ds_list_print_types(struct pool *p, enum pool_list_types types, FILE *out);
/* Dead-list chains waiting to be freed in the background (0 when none). */
unsigned pool_snap_free_queued(struct pool *p);

/* Something above the pool that opens snapshots of a file system of its own accord (the
 * .zfs/snapshot directory of a served file system, pool_fs.c) and must let go of one before it
 * is destroyed. Before the destroy of a snapshot of file system su_head_id (its dataset id), with
 * no pool lock held, su_release(su_arg, txg) is called with the snapshot's txg: it closes what it
 * holds of it and returns 0, or -EBUSY when it cannot in time (the destroy then fails, nothing
 * changed). From the call until the destroy ends, the snapshot cannot be opened (pool_ds_open
 * answers -ENOENT), so nothing reopens it in between. su is the caller's until removed;
 * pool_snap_user_remove waits for a call in progress. */
struct pool_snap_user {
	uint64_t su_head_id;
	int (*su_release)(void *arg, uint64_t txg);
	void *su_arg;
	struct pool_snap_user *su_next;
};
void pool_snap_user_add(struct pool *p, struct pool_snap_user *su);
void pool_snap_user_remove(struct pool *p, struct pool_snap_user *su);

/* One snapshot of a file system as .zfs/snapshot lists it. */
struct pool_snap_entry {
	uint64_t se_txg; /* the snapshot's txg: unique within its file system, never reused */
	uint64_t se_creation_ns;
	uint64_t se_guid;  /* the same in every pool a receive copied it to (zfs's guid) */
	uint64_t se_refer; /* bytes it references */
	struct blk_ptr se_root; /* its tree's root */
	char se_name[POOL_SNAP_NAME_MAX + 1];
};
/* A snapshot's GUID: stored, or for a record made before GUIDs were kept (stored 0) one derived
 * from the pool's GUID, head_id and txg (stable, never 0). */
uint64_t pool_snap_guid(const struct pool *p, uint64_t head_id, uint64_t txg, uint64_t stored);
/* pool_snapshot_create of one snapshot "fs@snap" with received's GUID and creation time (a
 * receive's: the snapshot is the sender's copy). */
SH_MUST_CHECK int pool_snapshot_create_received(struct pool *p, const char *name,
                                                const struct pool_snap_entry *received,
                                                char *err, size_t err_len);
/* The snapshots of file system head_id (its dataset id), by txg, into *out (mem_free it; NULL
 * when none). Cheap: no space figures. 0, -ENOMEM, -EIO. */
SH_MUST_CHECK int pool_snap_entries(struct pool *p, uint64_t head_id,
                                    struct pool_snap_entry **out, size_t *n_out);
/* A number that moves whenever a snapshot record may have changed (a create, destroy, rollback,
 * promote or receive made in phase 1): a list pool_snap_entries gave after reading an equal
 * number is still current. Any thread, no lock. */
uint64_t pool_snap_gen(struct pool *p);

/* Limits what dataset `name` may hold (zfs set quota; 0 removes the limit): its allocated bytes
 * plus the data it has dirty. A change that would take it over the limit fails with -EDQUOT
 * (removes and truncations still work), and FSSTAT reports the limit as the file system's size.
 * Durable when it returns. Returns 0, -ENOSPC (bytes is less than what it holds now, which zfs
 * refuses too), -ENOENT, -EIO. */
SH_MUST_CHECK int pool_ds_set_quota(struct pool *p, const char *name, uint64_t bytes);
/* Under the pool lock: whether bytes more fit under ds's quota (true without one). */
bool pool_ds_quota_would_fit(const struct pool_ds *ds, uint64_t bytes);
/* Under the pool lock: the pool's space figures narrowed to ds's quota, if it has one. */
void pool_ds_quota_space(const struct pool_ds *ds, uint64_t *total, uint64_t *free_bytes,
                         uint64_t *avail);

/* Calls fn(arg, info) for each dataset in name order; fn returning non-zero stops the walk and
 * that value is returned. fn runs without the pool lock and may call the pool. Returns 0, fn's
 * value, or -ENOMEM. */
SH_MUST_CHECK int pool_ds_list(struct pool *p,
                               int (*fn)(void *arg, const struct pool_ds_info *info), void *arg);
/* `shale fs list`'s table: a header, then one line per dataset (NAME as POOL/FS, USED: its
 * REFER plus what only its snapshots hold, AVAIL, REFER, entries, record size, compression,
 * quota). Returns 0, -EIO (the stream), or pool_ds_list's errors. */
SH_MUST_CHECK int pool_ds_list_print(struct pool *p, FILE *out);
/* Renames dataset `from` to `to` (zfs rename, within the pool: its record moves to the new name
 * in one txg; its id and its files' object ids stay) and waits until that is durable. Returns 0, -EINVAL (a name), -ENOENT (no `from`), -EEXIST (`to` exists), -EBUSY (open,
 * or being destroyed), -EIO. */
SH_MUST_CHECK int pool_ds_rename(struct pool *p, const char *from, const char *to);
/* Sets dataset name's compression (OFF, LZ4 or ZSTD) for the blocks it writes from now on, as
 * zfs set compression does (each block pointer records its own compression, so blocks already
 * written stay readable as they are), and waits until the change is durable. The record size
 * cannot change: a file's blocks are laid out by it. Returns 0, -EINVAL, -ENOENT, -EBUSY (being
 * destroyed), -EIO. */
SH_MUST_CHECK int pool_ds_set_compress(struct pool *p, const char *name, enum pool_compress c);
/* Sets whether the root of file system name lists its .zfs directory (zfs set snapdir=visible;
 * hidden, the default, leaves it out of READDIR, while LOOKUP still finds it), durable on
 * return. 0, -EINVAL (a snapshot), -ENOENT, -EBUSY, -EROFS, -EIO. */
SH_MUST_CHECK int pool_ds_set_snapdir(struct pool *p, const char *name, bool visible);
/* Whether ds's root lists .zfs (any thread). */
bool pool_ds_snapdir_visible(const struct pool_ds *ds);

/* ---------------------------------------------------------------------------------------------
 * Space, status, check */

/* total: the allocator's data areas; free: free now plus freed space waiting for its txg to be
 * durable (free within a txg or two); avail: free less the reserve kept for frees and the pool's
 * own commits (what new data may use). Any output may be NULL. */
void pool_space(struct pool *p, uint64_t *total_out, uint64_t *free_out, uint64_t *avail_out);

enum pool_state {
	POOL_STATE_ONLINE = 0,
	POOL_STATE_DEGRADED = 1,  /* a mirror child is missing or faulted */
	POOL_STATE_SUSPENDED = 2, /* a txg could not be written: changes refused, reads work */
};

struct pool_status_leaf {
	/* as configured ("" for a memory leaf); valid while the pool is open */
	const char *sl_path;
	uint64_t sl_guid;
	bool sl_present;
	struct blk_vdev_stats sl_stats; /* zero when not present */
};

struct pool_status_vdev {
	uint64_t sv_guid;
	bool sv_mirror;
	bool sv_log;
	uint64_t sv_data_bytes;
	unsigned sv_nchildren;
	struct pool_status_leaf sv_children[BLK_MIRROR_MAX];
};

/* What a loaded dataset's owner reports for status (pool_ds_owner's do_stats); zero when it
 * has none. */
struct pool_status_ds {
	char sd_name[POOL_DS_NAME_MAX + 1];
	bool sd_has_stats;
	uint64_t sd_dirty_bytes;
	uint32_t sd_icache_entries; /* the inode cache: capacity, lookups served, lookups missed */
	uint64_t sd_icache_hits, sd_icache_misses;
	uint64_t sd_adopted_blocks; /* large stable writes' blocks the txgs took (no second write) */
	/* Removed files freed in the background (zpl_reap.c) since the dataset was loaded: files
	 * finished, blocks freed, and whether freeing is going on now. */
	uint64_t sd_reap_files, sd_reap_blocks;
	bool sd_freeing;
	/* Destroyed, its blocks being freed in the background (pool_destroy.c): the tree's entries
	 * left as of the last txg; stuck when its steps cannot go on. */
	bool sd_destroying, sd_destroy_stuck;
	uint64_t sd_destroy_entries;
};
#define POOL_STATUS_DS_MAX 32u

struct pool_status {
	char ps_name[POOL_NAME_MAX + 1];
	uint64_t ps_guid;
	enum pool_state ps_state;
	uint64_t ps_synced_txg;
	uint64_t ps_open_txg;
	uint64_t ps_syncs; /* txgs written since open */
	/* Data blocks prepared ahead of their txg's locked phase (sealed) and written so, since
	 * open; the last and the longest time a txg held the pool lock to serialize itself. */
	uint64_t ps_sealed_writes;
	uint64_t ps_sealed_bytes; /* memory held by sealed blocks not written yet */
	uint64_t ps_build_last_us, ps_build_max_us;
	unsigned ps_ntops;
	struct pool_status_vdev ps_tops[POOL_MAX_TOPS];
	bool ps_has_log;
	struct pool_status_vdev ps_log;
	struct arc_stats ps_arc;
	double ps_arc_hit_rate; /* hits / (hits + misses), 0 before any lookup */
	struct ilog_stats ps_log_stats;
	/* Imported read only (po_read_only): the log's records newer than the last txg, left for
	 * the next import to replay. */
	bool ps_read_only;
	uint64_t ps_log_unreplayed;
	/* Imported read-write: the records newer than the last txg that the import replayed
	 * (applied, of a destroyed dataset, or skipped for blocks it could not read). */
	uint64_t ps_log_replayed;
	uint64_t ps_total_bytes, ps_free_bytes, ps_avail_bytes;
	uint64_t ps_dirty_bytes;
	uint64_t ps_dirty_max_bytes;    /* the dirty limit D: writers wait past 2 D */
	uint64_t ps_dirty_sync_bytes;   /* a txg is started at it when the sync thread is idle */
	uint64_t ps_datasets;
	uint64_t ps_snapshots;          /* of every file system */
	unsigned ps_snap_free_queued;   /* dead-list chains of destroyed snapshots being freed */
	uint64_t ps_free_errors; /* frees the allocator refused (a sign of a damaged tree) */
	/* The datasets in memory (being served, or just used), up to POOL_STATUS_DS_MAX. */
	unsigned ps_nloaded;
	struct pool_status_ds ps_loaded[POOL_STATUS_DS_MAX];
};
/* Fills *st (a large struct: allocate it). */
void pool_status(struct pool *p, struct pool_status *st);

/* The last POOL_TXG_HISTORY txgs the pool wrote since it was opened (as ZFS's txgs kstat):
 * why each was written, how much it carried and where its time went, phase by phase
 * (pool_txg.c). In memory only. */
#define POOL_TXG_HISTORY 64u
enum pool_txg_cause {
	POOL_TXG_TIMER,  /* the txg interval passed */
	POOL_TXG_DIRTY,  /* the dirty limit was reached */
	POOL_TXG_WAITER, /* a caller waited for it: a snapshot, a property, a commit of the log */
};
struct pool_txg_stat {
	uint64_t ts_txg;
	uint64_t ts_started_ns;  /* CLOCK_REALTIME at phase 0 */
	uint64_t ts_dirty_bytes; /* at phase 1 */
	uint64_t ts_written_bytes; /* allocated bytes of its blocks (metadata and data) */
	uint64_t ts_blocks;
	/* Microseconds: from the first request of this txg to its start (the sync before it, when
	 * one was running; 0 for a timer's txg), then phase 0 (sealing), phase 1 (under the pool
	 * lock), phase 2's writes and flush, phase 3 (the uberblock), and all of it. */
	uint32_t ts_queued_us, ts_seal_us, ts_build_us, ts_write_us, ts_flush_us, ts_commit_us;
	uint32_t ts_total_us;
	enum pool_txg_cause ts_cause;
};
/* Copies the history, oldest first, into out (POOL_TXG_HISTORY of them); returns how many. */
unsigned pool_txg_history(struct pool *p, struct pool_txg_stat *out);
/* Prints the history as a table (`shale pool txgs`). Returns 0 or -errno of the stream. */
SH_MUST_CHECK int pool_txg_history_print(struct pool *p, FILE *out);
/* Prints the status in the style of `zpool status`. Returns 0 or -errno of the stream. */
SH_MUST_CHECK int pool_status_print(struct pool *p, FILE *out);

/* Live status for `shale pool status` while a process holds the pool (pool_statsock.c): the
 * holder serves pool_status_print's text on a Unix socket, <dir>/.<pool>.status (mode 0600),
 * dir being the directory of the pool's leaves; pool_status_remote prints what the holder
 * answers to out. Start returns 0, -ENAMETOOLONG (the path does not fit a socket address),
 * -EADDRINUSE (another live process answers there) or -errno; stop before closing the pool.
 * Remote returns 0, or -ENOENT/-ECONNREFUSED when nobody serves it, or -errno. */
struct pool_statsock;
SH_MUST_CHECK int pool_status_serve_start(struct pool *p, const char *dir,
                                          struct pool_statsock **out);
void pool_status_serve_stop(struct pool_statsock *ss);
SH_MUST_CHECK int pool_status_remote(const char *dir, const char *name, FILE *out);
/* Sends one request line ("status", "scrub", "scrub stop", "fs list", "fs set FS quota BYTES",
 * "fs set FS compression off|lz4|zstd"; pool_statsock.c) to the status socket of the process
 * that holds pool name in dir and copies its answer to out. Returns 0, or a negative errno
 * (-ENOENT or -ECONNREFUSED: nobody serves the pool there). */
SH_MUST_CHECK int pool_statsock_request(const char *dir, const char *name, const char *request,
                                        FILE *out);
/* pool_statsock_request waiting up to wait_s seconds (instead of POOL_STATSOCK_WAIT_S) for each
 * part of the answer, for a request the holder takes long to answer ("fs diff" reads two trees
 * whole before its first byte). A holder that dies closes the connection: no wait runs out. */
#define POOL_STATSOCK_WAIT_S 10u
SH_MUST_CHECK int pool_statsock_request_wait(const char *dir, const char *name,
                                             const char *request, unsigned wait_s, FILE *out);
/* A connection to the status socket of the process serving pool `name` (leaves in dir): 0 and
 * *fd_out (close it), or -errno (-ENOENT or -ECONNREFUSED: nobody serves it). For a request
 * whose data flows both ways ("receive"'s stream). */
SH_MUST_CHECK int pool_statsock_connect(const char *dir, const char *name, int *fd_out);
SH_MUST_CHECK int pool_status_socket_path(const char *dir, const char *name, char *out,
                                          size_t cap);

/* One line per problem (and a few informational lines) found by pool_check. */
typedef void (*pool_report_fn)(void *arg, const char *line);

/* Checks the whole pool: the metadata tree and every dataset's tree (btree_check), every copy of
 * every block they and the owners' entries name, read from disk and verified against its checksum
 * (a bad copy with a good one elsewhere is rewritten and reported as repaired, not as a problem;
 * those on stale children, which missed writes or were attached since, are counted in one
 * "resilvered:" line),
 * and the allocator against the set of live blocks (leaks, double references, references to free
 * space). Datasets without an owner are checked as trees only, and leaks are then not counted
 * (their data blocks cannot be named). Holds the pool lock throughout and reads synchronously:
 * other users of the pool wait. A check that ran to its end records its outcome (time, duration,
 * blocks, repairs, resilvered copies, problems) in the pool property "last_check", which
 * pool_status_print shows as its scan line. Returns the number of problems (0: the pool is sound) or a
 * negative errno that stopped the check. report may be NULL. */
SH_MUST_CHECK int64_t pool_check(struct pool *p, pool_report_fn report, void *arg);

/* The online scrub: every copy of every block the trees and the owners' entries name, read and
 * verified against its checksum, a bad copy with a good one elsewhere rewritten (as pool_check
 * does), while the pool goes on serving. It works in slices: each holds the pool lock while no
 * transaction group's writes are in flight (so every block the trees name is on disk), walks on
 * from where the last slice stopped in the trees as they are now, and stops once about
 * slice_bytes of copies are verified; between slices it lets go of the lock for pause_ms. A
 * block changed after the walk passed it is new, written whole, and left for the next scrub.
 * It does not check the trees' structure or the allocator, and it clears no stale mark (both
 * need the whole pool at one instant: pool_check). A scrub that ran to its end records its
 * outcome in "last_check" as "scrub ...". Returns the problems found (0: none) or a negative
 * errno that stopped it (-ECANCELED: pool_scrub_cancel). report may be NULL. */
struct pool_scrub_opts {
	uint64_t so_slice_bytes; /* copies verified per slice; 0: 2 MiB */
	unsigned so_pause_ms;    /* between slices; 0: none */
};
SH_MUST_CHECK int64_t pool_scrub(struct pool *p, const struct pool_scrub_opts *opts,
                                 pool_report_fn report, void *arg);
/* Runs pool_scrub on a thread of its own, its lines logged; opts NULL: 2 MiB slices 5 ms apart.
 * Returns 0, or -EALREADY when one runs. */
SH_MUST_CHECK int pool_scrub_start(struct pool *p, const struct pool_scrub_opts *opts);
/* Asks a running scrub to stop after its slice. Returns 0, or -ENOENT when none runs. */
SH_MUST_CHECK int pool_scrub_cancel(struct pool *p);
/* Whether a scrub runs now. */
bool pool_scrub_running(struct pool *p);

/* ---------------------------------------------------------------------------------------------
 * Pool properties: short text values kept in the metadata tree, durable with the next txg. */

#define POOL_PROP_VALUE_MAX 255u /* bytes of a property's value */

/* name: [a-z0-9_.-]{1,64}; value: up to 255 bytes of text, NULL to remove. Returns 0, -EINVAL,
 * -ENOENT (removing an absent one), -EIO (suspended), -ENOMEM. */
SH_MUST_CHECK int pool_prop_set(struct pool *p, const char *name, const char *value);
/* Copies the value (NUL-terminated) into buf. Returns 0, -ENOENT, -EOVERFLOW (buf too small). */
SH_MUST_CHECK int pool_prop_get(struct pool *p, const char *name, char *buf, size_t cap);

/* "1.5M": bytes in the largest unit (B, K, M, G, T...) that keeps the number at least 1. */
void pool_fmt_bytes(char *buf, size_t cap, uint64_t bytes);

/* The pool's name and guid. */
const char *pool_name(const struct pool *p);
uint64_t pool_guid(const struct pool *p);

#endif
