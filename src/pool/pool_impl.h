/* pool_impl.h: the pool's interface for dataset owners (the POSIX object layer and its glue, the
 * tests' key-value owner), and, in its second half, what the pool's own files (pool*.c) share.
 *
 * How an owner works (the rules are numbered in pool.c's theory):
 *   - Open the dataset (pool_ds_open), attach the owner (pool_ds_set_owner), and run every
 *     operation on pool_ds_tree(ds) under pool_lock, on the caller's thread, without I/O.
 *   - Before a change: pool_tx_throttle (it refuses changes when the pool is suspended, and defers
 *     the caller when dirty data is far above the limit); pool_space_would_fit for anything that
 *     needs new space.
 *   - A block that is not in memory: the operation returns -SH_ENEEDBLOCK naming it; unlock, call
 *     pool_block_load and run the operation again from its start when the callback comes.
 *   - A stable change: pool_log_append in the same locked section as the change, then
 *     pool_log_commit; reply once the commit waiter says 0.
 *   - At sync, the owner's do_sync writes its dirty data with pool_sync_write (or
 *     pool_ds_sync_write) and puts the pointers into the tree.
 * Callbacks the pool calls (do_*) run under the pool lock unless said otherwise and must not call
 * pool_lock. Callbacks run on the blk engine thread (pool_block_load's cb, commit waiters, the
 * throttle's callback... each says) must neither take the pool lock nor block: post the work
 * elsewhere. */
#ifndef SHALE_POOL_IMPL_H
#define SHALE_POOL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "btree/btree.h"
#include "pool/pool.h"
#include "space/space.h"

/* ---------------------------------------------------------------------------------------------
 * Locking and txgs */

/* The pool lock guards every tree, the allocator, the datasets and the open txg. Never held
 * across I/O by the pool, except by pool_check and destroy steps (documented there). */
void pool_lock(struct pool *p);
void pool_unlock(struct pool *p);
/* The txg that changes made now belong to (under the lock). */
uint64_t pool_open_txg(struct pool *p);
/* True when the pool refuses changes (a txg could not be written). */
bool pool_is_suspended(struct pool *p);

/* ---------------------------------------------------------------------------------------------
 * Datasets for owners */

/* The block types of the pool's block pointers (bp_type). Owners' data blocks use
 * POOL_BT_DATA or their own types from POOL_BT_OWNER_FIRST up. */
enum pool_block_type {
	POOL_BT_MOS_NODE = 1, /* a node of the metadata tree */
	POOL_BT_DS_NODE = 2,  /* a node of a dataset's tree */
	POOL_BT_SPACE = 3,    /* a block of the allocator's state */
	POOL_BT_DATA = 4,     /* an owner's data block */
	POOL_BT_DEADLIST = 5, /* a chunk of a dead list's chain (pool_snap.c) */
	POOL_BT_OWNER_FIRST = 16,
};

/* A dataset's tree: 16 KiB nodes, keys up to POOL_DS_KEY_MAX bytes and values up to
 * POOL_DS_VAL_MAX bytes. */
#define POOL_DS_NODE_BYTES 16384u
#define POOL_DS_KEY_MAX 128u
#define POOL_DS_VAL_MAX 3072u
#define POOL_DS_TREE_TYPE 2u /* btree_config.bc_type of dataset trees */

/* Opens a dataset by name (blocking: it may read the pool's metadata; not on an event loop).
 * Opens of one dataset share one struct pool_ds, counted; close each with pool_ds_close. Returns
 * 0, -ENOENT, -EBUSY (being destroyed), -EINVAL (name), -ENOMEM. */
SH_MUST_CHECK int pool_ds_open(struct pool *p, const char *name, struct pool_ds **ds_out);
/* Drops one open. The dataset stays in memory, owner attached, until its dirty state is synced
 * and nobody has it open; the sync thread then detaches the owner (do_detach) and frees it. */
void pool_ds_close(struct pool_ds *ds);

struct btree *pool_ds_tree(struct pool_ds *ds); /* use under the pool lock only */
struct pool *pool_ds_pool(const struct pool_ds *ds);
uint64_t pool_ds_id(const struct pool_ds *ds);
const char *pool_ds_name(const struct pool_ds *ds);
uint32_t pool_ds_record_bytes(const struct pool_ds *ds);
enum blk_compress pool_ds_compress(const struct pool_ds *ds);

/* Called by an owner's do_visit_blocks for each block pointer an entry holds; returns 0 or an
 * -errno that stops the walk. */
typedef int (*pool_bp_fn)(void *arg, const struct blk_ptr *bp);

struct pool_ds_owner {
	/* Txg txg is being written: put every dirty change into the tree (btree_put never misses
	 * there if the owner dirtied the path when it made the change), writing data blocks with
	 * pool_sync_write. Returns 0 or -errno (-ENOMEM, -EIO): the pool retries the txg once,
	 * then suspends. May be NULL. */
	int (*do_sync)(void *owner, uint64_t txg);
	/* Memory the owner holds for changes not yet in the tree (counted against the dirty
	 * limit). May be NULL. */
	uint64_t (*do_dirty_bytes)(void *owner);
	/* Applies a log record this owner wrote with pool_log_append (type and payload as given
	 * there) at import. May return -SH_ENEEDBLOCK with *missing_out set, having changed
	 * nothing: the pool loads the block and calls again. Any other error fails the import. */
	int (*do_replay)(void *owner, uint16_t type, const void *rec, uint32_t len,
	                 struct blk_ptr *missing_out);
	/* For check and destroy: calls fn(arg, bp) for every block pointer the tree entry (key,
	 * val) holds. Returns 0, fn's error, or -EIO for an entry that does not parse. */
	int (*do_visit_blocks)(void *owner, const void *key, uint32_t klen, const void *val,
	                       uint32_t vlen, pool_bp_fn fn, void *arg);
	/* The dataset leaves memory (or the pool closes, after all I/O has stopped): free the
	 * owner. It must not start I/O. May be NULL. */
	void (*do_detach)(void *owner);
	/* At import, before do_replay of a record (type, payload as given to pool_log_append):
	 * calls fn(arg, bp) for every block the record names (written by the owner with
	 * pool_iblock_alloc and pool_iblock_write before it appended the record); the pool claims
	 * and verifies them, and frees them once do_replay has applied the record (pool_claim.c).
	 * Returns 0, fn's error, or -EINVAL for a record that does not parse. Under the pool lock.
	 * May be NULL (no record names blocks). */
	int (*do_replay_blocks)(void *owner, uint16_t type, const void *rec, uint32_t len,
	                        pool_bp_fn fn, void *arg);
	/* Phase 0 of a sync, on the sync thread, WITHOUT the pool lock (take it with pool_lock
	 * around looking at the owner's state, and not around the work): prepare up to about
	 * *budget bytes of the dirty data do_sync will write, with pool_seal_block, subtracting
	 * what was prepared from *budget. The dataset stays loaded until it returns. May be
	 * NULL. */
	void (*do_seal)(void *owner, uint64_t *budget);
	/* Fills the owner's part of the dataset's status (sd_name is filled already), under the
	 * pool lock. May be NULL. */
	void (*do_stats)(void *owner, struct pool_status_ds *out);
	/* A rollback replaces the dataset's tree by a snapshot's while the owner serves it
	 * (pool_snap.c, S10): called under the pool lock in phase 1 of the rollback's txg, after
	 * the owner's do_sync of that txg and before the old tree is closed. The owner lets go of
	 * everything it holds of the old tree and reads the new one (pool_ds_tree) from its next
	 * operation on; it must not start I/O. May be NULL: a rollback of a dataset whose owner
	 * has none is refused while anything else holds the dataset open (-EBUSY). */
	void (*do_rollback)(void *owner);
};

/* Attaches an owner (ops must outlive the dataset). Returns 0, or -EBUSY when one is attached
 * already (pool_ds_owner tells which). Takes the pool lock. */
SH_MUST_CHECK int pool_ds_set_owner(struct pool_ds *ds, const struct pool_ds_owner *ops,
                                    void *owner);
/* The attached owner, or NULL. */
void *pool_ds_owner(struct pool_ds *ds);

/* ---------------------------------------------------------------------------------------------
 * Blocks */

/* The image (bp_lsize logical bytes) of a block if it is in the cache: 0 with *image_out valid
 * until pool_block_release(p, *hold_out). Otherwise -SH_ENEEDBLOCK (a read of it is started).
 * -EIO for a pointer that cannot be right (a hole, sizes). Never blocks; any thread. */
SH_MUST_CHECK int pool_block_get(struct pool *p, const struct blk_ptr *bp, const void **image_out,
                                 void **hold_out);
void pool_block_release(struct pool *p, void *hold);
/* Gets the block into the cache: returns POOL_LOADED when it is there already (cb will not be
 * called), else 0 and cb(arg, status) runs once the block is cached (status 0) or could not be
 * read on any copy (-EIO, or the read's error): on the blk engine thread, or, when another
 * caller's read of the same block fails to start for lack of memory, on that caller's thread.
 * cb must not take the pool lock. Returns -EIO for a pointer that cannot be right, -ENOMEM.
 * Never blocks; any thread. */
#define POOL_LOADED 1
SH_MUST_CHECK int pool_block_load(struct pool *p, const struct blk_ptr *bp,
                                  void (*cb)(void *arg, int status), void *arg);
/* Starts reading the block into the cache unless it is cached or being read, for a reader that
 * streams through blocks once (a send's read-ahead): a block stored uncompressed in whole sectors
 * is read without a copy (pool_read_start). Returns 0 when it started the read, POOL_LOADED when
 * the block is cached or being read already, -EIO for a pointer that cannot be right, -ENOMEM; a
 * failed read is met again by whoever then asks for the block. Never blocks. */
SH_MUST_CHECK int pool_block_prefetch(struct pool *p, const struct blk_ptr *bp);
/* pool_block_load that waits (tools, tests, import). Not under the pool lock, not on the blk
 * engine thread. Returns 0 or the read's error. */
SH_MUST_CHECK int pool_block_read_sync(struct pool *p, const struct blk_ptr *bp);

/* Only inside do_sync (the sync's serialization phase, under the lock): compresses (with the
 * syncing dataset's compression), allocates (from the reserve when the pool is full), fills
 * *bp_out with birth = the syncing txg, and queues the write of lsize bytes of data (copied). The
 * block is cached at once and stays readable through the cache until it is on disk. Returns 0,
 * -ENOSPC, -ENOMEM, -EINVAL (lsize 0 or above BLK_MAX_BLOCK_BYTES, or not inside a sync). */
SH_MUST_CHECK int pool_sync_write(struct pool *p, const void *data, uint32_t lsize, uint8_t type,
                                  uint8_t level, uint64_t fill, struct blk_ptr *bp_out);
/* Sealing (phase 0 of a sync, pool_txg.c): an owner's do_seal prepares its dirty data blocks
 * before the sync takes the lock, so that do_sync under it does not compress or checksum them.
 * pool_seal_block, on any thread and without the lock, prepares lsize bytes of data (compressed
 * with compress, checksummed); the prepared block counts against the memory limit (the
 * reservation) until pool_sync_write_sealed writes it or pool_sealed_free frees it.
 * pool_sync_write_sealed, only inside do_sync, is pool_sync_write of data, the lsize bytes s was
 * prepared from, and consumes s, on failure too. With may_take (data then being a buffer from
 * mem_alloc, mem_aligned_alloc or arc_data_alloc of exactly lsize bytes), the cache takes data itself instead of a
 * copy: *taken_out says so (only on success; data stays readable until the block is freed or the
 * sync ends). Returns as pool_sync_write. */
struct pool_sealed;
SH_MUST_CHECK int pool_seal_block(struct pool *p, const void *data, uint32_t lsize,
                                  enum blk_compress compress, struct pool_sealed **out);
/* pool_seal_block, except that a block stored uncompressed whose data is sector-aligned and
 * a whole number of sectors (blk_prepare_lend) is not copied: the sealed block's image is data
 * itself, which must then stay alive and unchanged until pool_sync_write_sealed (whose may_take
 * then avoids every copy; without it the write takes one) or pool_sealed_free. */
SH_MUST_CHECK int pool_seal_block_lend(struct pool *p, const void *data, uint32_t lsize,
                                       enum blk_compress compress, struct pool_sealed **out);
SH_MUST_CHECK int pool_sync_write_sealed(struct pool *p, struct pool_sealed *s, void *data,
                                         bool may_take, bool *taken_out, uint8_t type,
                                         uint8_t level, uint64_t fill, struct blk_ptr *bp_out);
void pool_sealed_free(struct pool *p, struct pool_sealed *s);
/* A sealed block made of bytes as another pool stored them (blk_prepare_stored: psize bytes
 * compressed with compress, decompressed into logical_out, lsize bytes, to check them), written
 * as they are by pool_sync_write_sealed (with logical_out as its data). -EINVAL for bytes that
 * do not decompress to lsize, -ENOMEM. */
SH_MUST_CHECK int pool_seal_stored(struct pool *p, const void *phys, uint32_t psize,
                                   uint32_t lsize, enum blk_compress compress, void *logical_out,
                                   struct pool_sealed **out);
/* The bytes of bp's block as stored (bp_psize of them, compressed with bp_compress) into out,
 * checked against the checksum, read from the leaves (not through the cache: the cache keeps
 * logical bytes); bad copies read around and repaired. Blocks: not under the pool lock, not on
 * the blk engine thread. Returns 0, -EIO, or the read's error. */
SH_MUST_CHECK int pool_block_read_stored(struct pool *p, const struct blk_ptr *bp, void *out);
/* Only inside do_sync, for a block the owner wrote and allocated itself before the sync
 * (pool_iblock_alloc, birth = the syncing txg) and now references from the syncing dataset's
 * tree instead of writing its data again (block adoption): charges the block to the dataset's
 * used bytes, as pool_sync_write would, and caches a copy of data (bp_lsize bytes; skipped
 * without memory). The caller no longer frees it as an indirect block. 0 or -EINVAL (not inside
 * a sync, or a birth other than the syncing txg: it must then be written as usual). */
SH_MUST_CHECK int pool_sync_adopt(struct pool *p, const struct blk_ptr *bp, const void *data);
/* A block no longer referenced: its space is freed in the current txg (reused once that txg is
 * durable) and the cache forgets it. Under the lock. pool_ds_free also subtracts it from the
 * dataset's used bytes (pool_free does so only inside that dataset's do_sync). Returns 0, or
 * -EINVAL when the allocator refuses (the block is not allocated: a damaged tree; logged). */
SH_MUST_CHECK int pool_free(struct pool *p, const struct blk_ptr *bp);
SH_MUST_CHECK int pool_ds_free(struct pool_ds *ds, const struct blk_ptr *bp);

/* ---------------------------------------------------------------------------------------------
 * Space and throttling */

/* pool_space for a caller that holds the pool lock (an owner's FSSTAT). */
void pool_space_held(struct pool *p, uint64_t *total_out, uint64_t *free_out, uint64_t *avail_out);
/* Whether bytes more of new data fit, counting what is dirty and not yet allocated (under the
 * lock). Owners refuse writes and creates with -ENOSPC when it does not; removes go on. */
bool pool_space_would_fit(struct pool *p, uint64_t bytes);

/* A caller deferred by pool_tx_throttle. pw_done(w, status) runs on the sync thread, without the
 * pool lock, after the next txg is written (status 0) or when the pool is suspended or closes
 * (-EIO, -ECANCELED). The caller owns w and keeps it until then. */
struct pool_waiter {
	void (*pw_done)(struct pool_waiter *w, int status);
	void *pw_arg;
	struct pool_waiter *pw_next; /* private */
};
/* Under the lock, before a change: returns 0 (go on), POOL_THROTTLED (w is queued: go on once
 * pw_done runs), or -EIO (suspended). Asks for a sync when dirty data passes the limit and
 * throttles beyond twice the limit. Also tells the ARC how much memory the pool's dirty data,
 * the txg being written and the log hold (pool.c's memory model), which may evict clean blocks.
 * Never blocks. */
#define POOL_THROTTLED 1
SH_MUST_CHECK int pool_tx_throttle(struct pool *p, struct pool_waiter *w);
/* Under the lock, for a change that pool_space_would_fit refused: when it would fit once the
 * space being freed is back (a remove's space returns when its txg is durable, space.c rule 2),
 * asks for a sync, queues w as pool_tx_throttle does and returns POOL_THROTTLED: the caller
 * tries again once pw_done runs. Otherwise -ENOSPC. Never blocks. */
SH_MUST_CHECK int pool_space_wait(struct pool *p, uint64_t bytes, struct pool_waiter *w);
/* Dirty bytes the next txg will write (trees and owners), under the lock. */
uint64_t pool_dirty_bytes(struct pool *p);

/* ---------------------------------------------------------------------------------------------
 * The intent log */

/* Under the lock, in the same locked section as the change it describes: appends a record of
 * type (the owner's) and len bytes of payload for dataset ds, tagged with the open txg, and
 * returns its LSN. Never blocks and never fails for a full log: the record then waits in memory
 * for log space (a sync is asked for) and its commit completes later. Returns 0, -EMSGSIZE
 * (len above POOL_LOG_PAYLOAD_MAX), -EIO (suspended, or the log device failed), -ENOMEM. */
#define POOL_LOG_FRAME_BYTES 8u
#define POOL_LOG_PAYLOAD_MAX (ILOG_PAYLOAD_MAX - POOL_LOG_FRAME_BYTES)
SH_MUST_CHECK int pool_log_append(struct pool *p, struct pool_ds *ds, uint16_t type,
                                  const void *payload, uint32_t len, uint64_t *lsn_out);
/* Asks for every record up to lsn (ILOG_LSN_ALL: all appended) to be durable, with the return
 * values of ilog_commit: ILOG_DONE (durable already; w unused), 0 (w->iw_done(w, status) will
 * run, on the blk engine thread or the sync thread, never inside this call), -EIO, -EINVAL.
 * With or without the pool lock. */
SH_MUST_CHECK int pool_log_commit(struct pool *p, uint64_t lsn, struct ilog_waiter *w);

/* ---------------------------------------------------------------------------------------------
 * Blocks written ahead of their log records (pool_claim.c: the theory and rules C1-C3) */

/* A batch of prepared blocks to write and flush before the record naming them is appended. The
 * owner fills the (in) fields and keeps the struct, iw_preps and iw_flushes alive until iw_done. */
struct pool_iwrite {
	unsigned iw_nblocks;                 /* (in) > 0 */
	const struct blk_ptr *iw_bps;        /* (in) from pool_iblock_alloc */
	const struct blk_prepared *iw_preps; /* (in) the prepared images */
	struct blk_vdev_io *iw_flushes;      /* (in) min(iw_nblocks, POOL_MAX_TOPS) entries */
	/* (in) runs once, on the blk engine thread, when every write and flush is done: status 0,
	 * or the first error. Must not take the pool lock. */
	void (*iw_done)(struct pool_iwrite *iw, int status);
	/* private */
	struct pool *iw_pool;
	atomic_uint iw_pending;
	_Atomic int iw_status;
};
/* Under the lock: allocates space for the prepared block (class NORMAL) and fills *bp_out (type
 * POOL_BT_DATA, birth birth_txg); its write counts as in flight from now on (C1), so the block
 * must then be written with pool_iblock_write or given back with pool_iblock_unalloc. Returns 0,
 * -ENOSPC, -EIO (suspended). */
SH_MUST_CHECK int pool_iblock_alloc(struct pool *p, const struct blk_prepared *prep,
                                    uint64_t birth_txg, struct blk_ptr *bp_out);
/* Under the lock: gives back a block pool_iblock_alloc returned and that will not be written. */
void pool_iblock_unalloc(struct pool *p, const struct blk_ptr *bp);
/* Without the lock: writes the batch, flushes the vdevs the log's flush does not cover (C2),
 * then calls iw_done. */
void pool_iblock_write(struct pool *p, struct pool_iwrite *iw);
/* Under the lock: frees an indirect block (written or not; its write, if any, is done or still
 * counted) in the txg being synced inside a sync, else in the open txg. */
void pool_iblock_free(struct pool *p, const struct blk_ptr *bp);
/* Import only, under the lock: marks a block a replayable record names as allocated. Returns 0,
 * -EINVAL (not a plausible data block of this pool), -EEXIST (the space is in use). */
SH_MUST_CHECK int pool_iblock_claim(struct pool *p, const struct blk_ptr *bp);
/* Blocks named by replayed log records that could not be claimed or read since import (each
 * one's record was skipped and logged). */
uint64_t pool_log_bad_blocks(struct pool *p);

/* =============================================================================================
 * Below: private to src/pool/pool*.c and src/poolfs/pool_fs.c.
 * ============================================================================================= */

#define POOL_MOS_TREE_TYPE 1u
#define POOL_MOS_KEY_MAX 128u
#define POOL_MOS_VAL_MAX 512u
#define POOL_NODE_BYTES 16384u

/* A map from block identity (vdev, offset, birth) to an image, for the pinned metadata tree and
 * the check's own cache (pool_io.c). */
struct pool_bpent {
	struct pool_bpent *be_next;
	struct blk_ptr be_bp;
	void *be_img; /* be_bp.bp_lsize bytes, or NULL */
	uint32_t be_holds;
	uint64_t be_used; /* last use, for eviction */
};
struct pool_bpmap {
	struct pool_bpent **bm_buckets;
	size_t bm_nbuckets; /* a power of two */
	size_t bm_count;
	uint64_t bm_bytes; /* image bytes */
	uint64_t bm_clock;
};
void pool_bpmap_init(struct pool_bpmap *m);
/* A new entry for bp with room for its image (img_bytes, 0 for none), to be inserted into m with
 * pool_bpmap_insert (which then cannot fail) or freed with pool_bpent_free. NULL: -ENOMEM. */
struct pool_bpent *pool_bpent_new(struct pool_bpmap *m, const struct blk_ptr *bp,
                                  uint32_t img_bytes);
void pool_bpmap_insert(struct pool_bpmap *m, struct pool_bpent *e);
void pool_bpent_free(struct pool_bpent *e);
void pool_bpmap_fini(struct pool_bpmap *m);
struct pool_bpent *pool_bpmap_find(struct pool_bpmap *m, const struct blk_ptr *bp);
/* Adds bp (with a copy of img when img is not NULL). Returns the entry (an existing one as it
 * is), or NULL on -ENOMEM. */
struct pool_bpent *pool_bpmap_add(struct pool_bpmap *m, const struct blk_ptr *bp, const void *img);
/* Reads block bp (verified, as blk_block_read_sync does) into m unless m holds it already.
 * Waits for the read: not on the engine thread. Returns 0, -ENOMEM or the read's error. */
int pool_bpmap_read(struct pool *p, struct pool_bpmap *m, const struct blk_ptr *bp);
void pool_bpmap_remove(struct pool_bpmap *m, const struct blk_ptr *bp);
/* Drops unheld entries, least recently used first, until bm_bytes <= max_bytes. */
void pool_bpmap_trim(struct pool_bpmap *m, uint64_t max_bytes);

struct pool_leaf {
	uint64_t pl_guid;
	char *pl_path;          /* as configured */
	struct blk_dev *pl_dev; /* NULL when missing */
	bool pl_owned;          /* opened by the pool: closed by it */
	uint64_t pl_added_txg;  /* attached later (pool_vdev.c): the first txg that may know it;
	                         * 0 when it came with the pool */
};

struct pool_top {
	uint64_t pt_guid;
	bool pt_mirror;
	uint64_t pt_data_bytes; /* from the configuration (the allocator's geometry) */
	unsigned pt_nchildren;  /* configured */
	struct pool_leaf pt_leaves[BLK_MIRROR_MAX];
	struct blk_vdev *pt_vdev; /* over the present children */
};

/* A log record waiting in memory for log space (pool_log.c). */
struct pool_logrec {
	struct pool_logrec *lr_next;
	uint64_t lr_lsn;
	uint64_t lr_txg;
	uint16_t lr_type;
	uint32_t lr_len;
	uint8_t lr_data[]; /* frame + payload */
};

/* A block write queued by a sync (pool_io.c). */
struct pool_write {
	struct pool *wr_pool;
	struct pool_write *wr_next;
	struct blk_prepared wr_prep;
	struct blk_ptr wr_bp;
	struct blk_vdev *wr_vdev;
	struct arc_buf *wr_buf; /* the cached copy, held until the write is done; may be NULL */
	int wr_status;
};

/* The state of a pool_check walk or a destroy step's reads (pool_check.c). */
struct pool_walk;

struct pool_ds {
	struct pool *ds_pool;
	struct pool_ds *ds_next; /* p_datasets */
	char ds_name[POOL_DS_NAME_MAX + 1];
	uint64_t ds_id;
	uint64_t ds_created_txg;
	uint32_t ds_record_bytes;
	enum blk_compress ds_compress;
	uint64_t ds_quota_bytes; /* 0: none (pool_ds_set_quota) */
	int64_t ds_used_bytes;
	struct btree *ds_tree;
	struct blk_ptr ds_root; /* as the metadata tree records it */
	unsigned ds_refs;       /* opens, plus the pool's own while it works on it */
	bool ds_record_dirty;   /* the metadata record must be rewritten at the next sync */
	bool ds_destroying;     /* no opens: being destroyed (queued or about to be) */
	bool ds_queued;         /* its record is "dq/<id>": freed in steps (pool_destroy.c) */
	bool ds_destroy_failed; /* queued, but its steps cannot go on (no owner): left as it is */
	/* A snapshot opened read only (pool_ds_open of "fs@snap", pool_snap.c): ds_name is
	 * "fs@snap", ds_id the snapshot's id; its file system's id and its txg. Nothing in it
	 * changes: a free of one of its blocks is refused. */
	bool ds_snapshot;
	uint64_t ds_snap_head_id, ds_snap_txg;
	/* Snapshots (pool_snap.c). The line's latest snapshot (or a clone's origin): its txg (0 when
	 * none) and id; the head's dead list (0: none yet); a clone's origin (its head's id and its
	 * txg; 0 when not a clone); the line's bucket boundaries (its snapshots' txgs, ascending,
	 * the origin's first); kills not written yet, by bucket, in key order (rule S1). */
	uint64_t ds_prev_snap_txg;
	uint64_t ds_prev_snap_id;
	uint64_t ds_dl_id;
	uint64_t ds_origin_head_id;
	uint64_t ds_origin_txg;
	uint64_t ds_flags; /* POOL_DS_F_* */
	uint64_t *ds_snap_txgs;
	uint32_t ds_nsnap_txgs, ds_snap_txgs_cap;
	bool ds_snaps_loaded; /* ds_snap_txgs holds the line's snapshots */
	struct pool_dl_kills *ds_kills;
	uint32_t ds_nkills, ds_kills_cap;
	uint64_t ds_kill_mem; /* memory the pending kills hold */
	const struct pool_ds_owner *ds_ops;
	void *ds_owner;
};

struct pool {
	/* Set at open, then read-only. */
	char p_name[POOL_NAME_MAX + 1];
	uint64_t p_guid;
	uint64_t p_created_ns;
	struct pool_open_opts p_opts; /* with defaults filled in */
	enum blk_compress p_compress; /* datasets' default */
	struct blk_engine *p_engine;
	unsigned p_ntops;
	struct pool_top *p_tops; /* p_ntops */
	bool p_has_log;
	struct pool_top p_logtop;
	struct blk_vdev *p_vdevs[POOL_MAX_TOPS + 1]; /* tops, then the log vdev: for uberblocks */
	unsigned p_nvdevs;
	struct blk_vdev *p_log_vdev; /* where the log region is */
	uint32_t p_log_vdev_index;   /* UINT32_MAX: the log vdev */
	uint64_t p_log_start, p_log_bytes;
	uint64_t p_log_config_bytes; /* the configured region on vdev 0 (0 with a log vdev) */
	struct space_geometry p_geom;
	bool p_degraded;
	uint64_t p_config_txg; /* the labels' lb_config_txg of this configuration */
	struct arc *p_arc;
	struct ilog *p_log;
	pthread_t p_sync_thread;
	bool p_sync_thread_started;
	bool p_read_only;            /* imported with po_read_only: nothing is ever written */
	uint64_t p_log_unreplayed;   /* read only: the log's records newer than the last txg */
	uint64_t p_log_replayed;     /* read-write: those records, taken in by the import */

	/* p_lock: trees, allocator, datasets, txgs (see pool.c, rule L1). */
	pthread_mutex_t p_lock;
	uint64_t p_open_txg;
	uint64_t p_syncing_txg;    /* inside phase 1 of a sync: the txg being written */
	bool p_in_sync;            /* phase 1 is running: frees and writes belong to it */
	struct pool_ds *p_sync_ds; /* the dataset whose do_sync/btree_sync is running */
	struct btree *p_mos;
	struct pool_bpmap p_mos_pin; /* every block of the metadata tree, in memory */
	bool p_mos_loading;          /* pool_mos_load runs: a block not pinned yet is read */
	struct space *p_space;
	struct pool_bpmap
	    p_space_blocks; /* the allocator's own blocks now (no images), for check */
	uint64_t p_next_ds_id;
	/* Snapshot creates and destroys waiting for phase 1 (pool_snap.c), oldest first. */
	struct pool_snap_req *p_snap_reqs, *p_snap_reqs_tail;
	/* Snapshots being destroyed: none of them may be opened meanwhile (pool_snap_ds_hold). */
	struct pool_snap_doom *p_snap_dooms;
	_Atomic uint64_t p_snap_gen; /* pool_snap_gen: bumped by each phase 1 that ran requests */
	/* Who holds snapshots open of its own accord (.zfs/snapshot), asked to let go of one
	 * before its destroy; the lock is held while they are asked (pool_snap.c). */
	pthread_mutex_t p_snap_users_lock;
	struct pool_snap_user *p_snap_users;
	struct pool_ds *p_datasets; /* loaded datasets */
	uint64_t p_log_next_lsn;    /* the LSN the next pool_log_append gets */
	uint64_t p_log_lsn_at_sync; /* p_log_next_lsn when the last sync started */
	struct ilog_waiter p_space_waiter;
	bool p_space_waiting;     /* p_space_waiter is queued with the log */
	uint8_t *p_log_frame;     /* ILOG_PAYLOAD_MAX bytes for framing a record */
	struct pool_walk *p_walk; /* a check, scrub slice or destroy walk runs (its own cache) */
	uint64_t p_destroy_step_txg; /* sync thread: the txg of the last destroy step */
	uint64_t p_stale_digest;     /* pool_stale_leaves's digest as the last uberblock holds it */
	uint64_t p_free_errors;
	uint64_t p_log_bad_blocks; /* pool_log_bad_blocks (import) */
	/* The memory model (pool.c): the bytes the txg being written holds outside the ARC (its
	 * dirty bytes when phase 1 began; 0 when no sync runs), and the reservation last given to
	 * the ARC. */
	uint64_t p_sync_bytes;
	uint64_t p_reserved_bytes;
	/* Sealing (phase 0): bytes the sealed blocks not yet written hold (any thread), and the
	 * sealed blocks phase 1 wrote (p_lock). The longest and the last phase 1, in us
	 * (p_state_lock). */
	_Atomic uint64_t p_sealed_bytes;
	/* p_lock: phase 1's writes, in order, submitted after it (pool_writes_submit) or once
	 * p_sync_queue_room bytes of them wait (set at the start of each phase 1) */
	struct pool_write *p_sync_queue, *p_sync_queue_tail;
	uint64_t p_sync_queue_bytes;
	uint64_t p_sync_queue_room;
	uint64_t p_sealed_writes;
	uint64_t p_build_last_us, p_build_max_us;
	/* p_lock: the blocks phase 1 placed and their allocated bytes, since open (the txg
	 * history's written figures are their growth over one sync) */
	uint64_t p_placed_blocks, p_placed_bytes;
	/* p_lock: a sync is between its start and its end (pool_sync_once); when the last one
	 * ended and how long it took (CLOCK_MONOTONIC): the quarter trigger's duty cycle. The
	 * time is the sync thread's whole busy time, longer than the history's total by the
	 * callbacks of throttled writers, the heap trim and, at debug level, the memory line. */
	bool p_sync_busy;
	uint64_t p_sync_ended_ns, p_sync_took_ns;

	/* p_state_lock (after p_lock when both are taken): the sync thread's requests, durable
	 * txgs, writes in flight, the log's waiting records, throttled callers. */
	pthread_mutex_t p_state_lock;
	pthread_cond_t p_state_cv; /* broadcast on every change of the fields below */
	bool p_stopping;
	bool p_closing;
	uint64_t p_sync_requested; /* sync until p_synced_txg >= this */
	uint64_t p_sync_requested_ns; /* when p_sync_requested last rose (CLOCK_MONOTONIC) */
	uint64_t p_sync_dirty_txg;    /* the last txg the dirty bytes asked for (pool_tx_throttle);
	                               * written under p_lock and p_state_lock, read under either */
	/* The txg history (pool_txg_history): a ring, p_txg_hist_n written in all */
	struct pool_txg_stat p_txg_hist[POOL_TXG_HISTORY];
	uint64_t p_txg_hist_n;
	uint64_t p_synced_txg;
	uint64_t p_syncs;
	atomic_bool p_suspended;
	/* Datasets queued for destruction (p_lock to change, read by the sync thread anywhere). */
	atomic_uint p_destroy_queued;
	/* Dead-list chains queued for freeing ("fq/" records, pool_snap.c). */
	atomic_uint p_fq_queued;
	unsigned p_writes_pending;
	struct pool_write *p_writes_failed;
	struct pool_logrec *p_logq_head, *p_logq_tail; /* records waiting for log space */
	struct ilog_waiter *p_commitq;                 /* commits of records still in p_logq */
	struct ilog_waiter *p_commit_ready; /* commits to hand to the log (sync thread) */
	bool p_log_space_ready;             /* the log freed space: drain p_logq */
	struct pool_waiter *p_throttled;
	/* The online scrub (pool_check.c): its thread, and its progress for pool_status_print. */
	bool p_scrub_thread_started; /* p_scrub_thread exists and is not joined yet */
	bool p_scrub_running;
	atomic_bool p_scrub_cancel;
	pthread_t p_scrub_thread;
	struct pool_scrub_opts p_scrub_opts; /* the running scrub's */
	uint64_t p_scrub_started_ns; /* CLOCK_REALTIME */
	uint64_t p_scrub_blocks, p_scrub_repaired;
	int64_t p_scrub_problems;
	uint64_t p_last_sync_ns;
	uint64_t p_trim_ns; /* sync thread only: the last return of free heap pages (pool_txg.c) */
};

/* Little-endian fields of the pool's on-disk formats. */
static inline void pool_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void pool_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t pool_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t pool_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* pool.c */
/* Refuses further changes (R8 of pool.c), logging why; wakes every waiter with -EIO. */
void pool_suspend(struct pool *p, const char *why);
/* Most leaves an uberblock can name as having missed writes (table in pool.c). */
#define POOL_UB_STALE_MAX ((BLK_UB_PAYLOAD_BYTES - 112u) / 8u)
/* The mirror children (and log mirror children) that missed writes now: missing, faulted or
 * still marked stale; their guids into guids, in configuration order, and a digest of the list
 * (may be NULL). Returns how many. Under p_lock (or before the sync thread runs). */
unsigned pool_stale_leaves(const struct pool *p, uint64_t guids[POOL_UB_STALE_MAX],
                           uint64_t *digest_out);
uint64_t pool_stale_digest(const uint64_t *guids, unsigned n);
/* The leaves an uberblock's payload lists as having missed writes (hostile bytes: the count is
 * bounded). Returns how many. */
unsigned pool_ub_stale_decode(const uint8_t in[BLK_UB_PAYLOAD_BYTES],
                              uint64_t guids[POOL_UB_STALE_MAX]);
/* After a check that found no problem: every present child is current again (blk_vdev_set_stale
 * false); the next txg records it. Under p_lock. */
void pool_stale_clear_locked(struct pool *p);
/* Under p_lock: whether some mirror child is marked stale. */
bool pool_has_stale_locked(struct pool *p);
/* The uberblock payload of the open state (table in pool.c); returns the digest of the list of
 * leaves that missed writes it holds (pool_stale_leaves). */
uint64_t pool_ub_payload_encode(const struct pool *p, const struct ilog_position *pos,
                                uint64_t time_ns, uint8_t out[BLK_UB_PAYLOAD_BYTES]);
/* [A-Za-z0-9_.-]{1,max}; pool_name_chars_valid also takes the characters of extra (may be
 * NULL). */
bool pool_name_valid(const char *name, size_t max);
bool pool_name_chars_valid(const char *name, size_t max, const char *extra);
/* Formats a sentence into err (err_len bytes; nothing when err is NULL): the commands' why. */
void pool_say(char *err, size_t err_len, const char *fmt, ...) SH_PRINTF(3, 4);
/* A pool with nothing open yet (options defaulted from opts, which may be NULL), and its undoing:
 * pool_free_all frees whatever of a pool exists (the sync thread stopped, the log closed). */
struct pool *pool_alloc(const struct pool_open_opts *opts);
void pool_free_all(struct pool *p);
/* The configuration text of the labels (table in pool.c): parsed into p's name, guid, tops and
 * log top (hostile text: every line is checked), and built from them into buf
 * (BLK_CONFIG_MAX_BYTES + 1 bytes; -E2BIG when too long). */
int pool_config_parse(struct pool *p, const char *text, uint32_t len);
int pool_config_build(const struct pool *p, char *buf, uint32_t *len_out);
/* Writes leaf l's labels: the configuration text, config_txg, its own guid, its top-level
 * vdev's guid and index (UINT32_MAX for the log vdev). */
int pool_label_leaf(struct pool *p, const char *config, uint32_t config_len, uint64_t config_txg,
                    const struct pool_leaf *l, const struct pool_top *t, uint32_t top_index);
/* A leaf's name for messages: its path, or "(a memory leaf)". */
const char *pool_dev_name(const struct blk_dev *d);
/* The compression c means for p (DEFAULT: the pool's). */
enum blk_compress pool_compress_resolve(const struct pool *p, enum pool_compress c);

/* pool_io.c */
/* A block's ARC key: (vdev, offset, birth). */
struct arc_key pool_arc_key(const struct blk_ptr *bp);
/* Is bp a plausible pointer into this pool (vdev, sizes, alignment, the data area)? */
bool pool_bp_valid(const struct pool *p, const struct blk_ptr *bp);
/* The vdev of a valid bp. */
struct blk_vdev *pool_bp_vdev(const struct pool *p, const struct blk_ptr *bp);
/* Phase 1's queued writes (pool_write_block, pool_sync_write_sealed), taken off the queue under
 * p_lock, and their submission once the lock is let go; pool_writes_wait waits for them. Taken
 * in the locked section itself, so that no write counted in p_writes_pending ever needs p_lock
 * to reach the engine: a thread that holds p_lock may wait for p_writes_pending to drain
 * (pool_check's walk). */
struct pool_write *pool_writes_take_locked(struct pool *p);
void pool_writes_submit(struct pool_write *queued);
/* A write of any class and compression, for the sync's own writers. cache: keep a copy in the
 * ARC until the write is done. */
int pool_write_block(struct pool *p, const void *data, uint32_t lsize, enum blk_compress compress,
                     enum space_class cls, uint8_t type, uint8_t level, uint64_t fill, bool cache,
                     struct blk_ptr *bp_out);
/* Waits for every queued write; re-issues failed ones once. Returns 0 or the error that
 * remains. Sync thread, no lock held. */
int pool_writes_wait(struct pool *p);
extern const struct space_store pool_space_store_ops;
/* The btree configs (store callbacks included) of the metadata tree and of dataset ds. */
void pool_mos_config(struct pool *p, struct btree_config *cfg);
void pool_ds_config(struct pool_ds *ds, struct btree_config *cfg);
/* Reads the whole metadata tree into p_mos_pin (import). */
int pool_mos_load(struct pool *p);
/* space_open's loader: a synchronous read of a block's logical bytes, recorded in
 * p_space_blocks. */
int pool_space_load(void *ctx, const struct blk_ptr *bp, void *buf, uint32_t bytes);

/* pool_txg.c */
/* Starts the sync thread (pool_sync_thread_stop stops it). Returns 0 or -errno. */
int pool_sync_thread_start(struct pool *p);
/* Stops the thread after the sync in progress, if any. */
void pool_sync_thread_stop(struct pool *p);
/* Runs one sync now on the calling thread (pool_create's txg 1). */
int pool_sync_once(struct pool *p, bool forced);
/* With p_state_lock held: asks the sync thread to write up to txg. */
void pool_sync_request_locked(struct pool *p, uint64_t txg);
/* Calls back every throttled caller with status (suspension, close). */
void pool_wake_throttled(struct pool *p, int status);
/* Under p_lock: tells the ARC what memory outside it the pool holds now (dirty, the txg being
 * written, the log's blocks), dirty being pool_dirty_bytes(p) (the memory model of pool.c). */
void pool_mem_reserve_locked(struct pool *p, uint64_t dirty);

/* pool_io.c */
/* Under the lock: frees bp in the txg being synced inside a sync, else in the open txg, drops it
 * from the ARC, and takes its bytes off ds's usage (ds may be NULL). A hole is a no-op. Returns
 * 0, or the allocator's refusal (logged and counted in p_free_errors). */
int pool_free_block(struct pool *p, struct pool_ds *ds, const struct blk_ptr *bp);

/* pool_ds.c */
/* Finds a loaded dataset by id, or loads it from the metadata tree (under the lock). Returns 0
 * with a reference taken, -ENOENT, -ENOMEM, -EIO. */
int pool_ds_hold_by_id(struct pool *p, uint64_t id, struct pool_ds **ds_out);
/* Drops a reference taken by pool_ds_hold_by_id or pool_ds_open (under the lock). */
void pool_ds_rele_locked(struct pool_ds *ds);
/* Puts the records of loaded datasets whose metadata changed into the metadata tree (sync). */
int pool_ds_sync_records(struct pool *p);
/* Frees loaded datasets nobody uses whose state is all written (after a sync). */
void pool_ds_evict_idle(struct pool *p);
/* Unlinks ds from the loaded datasets, detaches its owner and frees it (under the lock). */
void pool_ds_unload_locked(struct pool *p, struct pool_ds *ds);
/* Detaches every owner and frees every loaded dataset (close). */
void pool_ds_free_all(struct pool *p);
/* The 128-byte metadata record of ds (table in pool.c) into out (cap >= 128); returns 128. */
int pool_ds_record_encode(const struct pool_ds *ds, uint8_t *out, uint32_t cap);
/* Under the lock: loads the dataset whose record is rec (len bytes; hostile) under the name
 * given, onto p_datasets, with no reference taken. Returns 0, -EIO (a damaged record or root),
 * -ENOMEM. */
int pool_ds_load(struct pool *p, const char *name, const uint8_t *rec, uint32_t len,
                 struct pool_ds **out);
/* Makes sure ds has an owner, asking po_attach (without the lock) when it has none. Returns 0,
 * -ENOTSUP (no owner to be had) or the callback's error. */
int pool_ds_attach_owner(struct pool *p, struct pool_ds *ds);

/* pool_log.c */
/* Replays the log from `from` (R5, R6), applying the records of txgs after ub_txg; *end_out is
 * where the log continues. Before the sync thread starts. */
int pool_log_replay(struct pool *p, uint64_t ub_txg, const struct ilog_position *from,
                    struct ilog_position *end_out);
/* A read-only import's stand-in for pool_log_replay: reads the same chain and counts the records
 * that replay would apply (p_log_unreplayed), applying none. */
int pool_log_count_unreplayed(struct pool *p, uint64_t ub_txg, const struct ilog_position *from,
                              struct ilog_position *end_out);
/* The sync thread's log work: appends waiting records once space is free and hands their
 * commits to the log. */
void pool_log_drain(struct pool *p);
/* Completes every waiting record's commit with status (close, suspension). */
void pool_log_cancel(struct pool *p, int status);
/* p_space_waiter's callback: the log freed space (any thread; takes p_state_lock only). */
void pool_log_space_cb(struct ilog_waiter *w, int status);

/* pool_check.c */
/* The trees' bs_get and bs_release while a walk runs (p_walk set): the walk's own cache. */
int pool_walk_get(struct pool *p, const struct blk_ptr *bp, const void **image_out,
                  void **hold_out);
void pool_walk_release(struct pool *p, void *hold);
/* A walk that only caches what it loads (bounded, least recently used out): set it as p_walk
 * under p_lock to run tree operations that read synchronously. NULL: no memory. */
struct pool_walk *pool_walk_new_cache(void);
void pool_walk_free(struct pool_walk *w); /* NULL is a no-op */
/* The loader of tree operations under a walk (arg: the pool): reads bp into p_walk's cache. */
int pool_walk_load(void *arg, const struct blk_ptr *bp);
/* Under p_lock: waits for the block writes of a sync in progress. */
void pool_walk_wait_writes(struct pool *p);
/* Cancels a running scrub and joins its thread (pool_check.c); before a pool closes. */
void pool_scrub_stop(struct pool *p);

/* pool_recv.c */
/* Sets or clears ds's POOL_DS_F_RECEIVING and waits until the record is durable. 0 or the
 * sync's error. */
SH_MUST_CHECK int pool_ds_set_receiving(struct pool_ds *ds, bool receiving);
/* Makes (ops, owner) ds's owner, detaching the one it had: only while the caller's is the one
 * open of ds and the old owner has nothing unwritten (else -EBUSY: sync and try again). */
SH_MUST_CHECK int pool_ds_take_owner(struct pool_ds *ds, const struct pool_ds_owner *ops,
                                     void *owner);
/* Undoes a receive into file system fs (nobody may hold it open): rolled back to its latest
 * snapshot and the flag cleared, or destroyed when it has no snapshot. 0, or the error with err
 * saying why. */
SH_MUST_CHECK int pool_recv_undo(struct pool *p, const char *fs, char *err, size_t err_len);
/* Import, once the sync thread runs: finishes or undoes the receives a crash cut off. Logs what
 * it did; an error leaves the dataset for the next import. */
void pool_recv_fixup(struct pool *p);

/* pool_snap.c */
#define POOL_DS_F_SNAPDIR_VISIBLE 1u /* .zfs is listed in the root's READDIR */
#define POOL_DS_F_RECEIVING 2u       /* a receive into it has not ended (pool_recv.c) */
/* A snapshot being destroyed (under p_lock, on p_snap_dooms while its destroy runs). */
struct pool_snap_doom {
	uint64_t sd_head_id, sd_txg;
	struct pool_snap_doom *sd_next;
};
/* The kills of one bucket not written yet (rule S1). */
struct pool_dl_kills {
	uint64_t dk_key;
	uint64_t dk_bytes;
	struct blk_ptr *dk_bps;
	uint32_t dk_n, dk_cap;
};
/* Under p_lock, from pool_free_block: head ds stops referencing bp, born at or before its
 * prev_snap_txg: appends it to the pending kills (S1), or drops it for a dataset being destroyed
 * (S2). Returns 0 or -ENOMEM (the block then stays allocated: logged, counted, a leak a check
 * reports). */
int pool_dl_kill(struct pool_ds *ds, const struct blk_ptr *bp);
/* Phase 1, after ds's tree is written: its pending kills go onto its dead list's chains. */
int pool_dl_flush(struct pool *p, struct pool_ds *ds);
/* Phase 1, after every dataset's tree and kills are written: the snapshots asked for are taken
 * and destroyed (S3, S4). */
int pool_snap_sync(struct pool *p, uint64_t txg);
/* Under p_lock: loads ds's line (its snapshots' txgs) from the metadata tree. 0, -ENOMEM, -EIO. */
int pool_snap_load_line(struct pool *p, struct pool_ds *ds);
/* Whether ds is a snapshot opened read only (any thread: fixed while it is loaded). */
bool pool_ds_is_snapshot(const struct pool_ds *ds);
/* Under p_lock: snapshot "fs@snap" loaded read only (a reference taken), or found loaded.
 * Returns 0, -ENOENT, -EINVAL (a name), -EIO, -ENOMEM. */
int pool_snap_ds_hold(struct pool *p, const char *full, struct pool_ds **ds_out);
/* Under p_lock, before a snapshot's record goes (destroy, rollback -r) or its file system is
 * renamed: -EBUSY when it is open (exported), else its idle loaded copy, if any, is unloaded. */
int pool_snap_ds_release_idle(struct pool *p, uint64_t head_id, uint64_t txg);
/* Under p_lock, as ds is queued for destruction: its dead list's chains go to the free queue
 * with their entries kept (a clone's: its origin holds them; S2); only their chunks are freed. */
int pool_dl_drop_locked(struct pool *p, struct pool_ds *ds);
/* Frees what pool_ds_unload needs freed of ds's snapshot state. */
void pool_snap_ds_fini(struct pool_ds *ds);
/* Under p_lock: the number of snapshots of head id (0 when none), and the first clone of a
 * snapshot (by head id and txg), named into name (POOL_DS_NAME_MAX + 1). */
uint64_t pool_snap_count(struct pool *p, uint64_t head_id);
bool pool_snap_first_clone(struct pool *p, uint64_t head_id, uint64_t txg, char *name);
/* The sync thread, no lock held: one step of freeing the queued chains. Returns true when it
 * changed something. */
bool pool_fq_step(struct pool *p);
/* Import, under p_lock: counts the queued chains into p_fq_queued. */
int pool_fq_load(struct pool *p);
/* Pending snapshot requests (under p_lock): nothing for pool_clean to skip. */
bool pool_snap_reqs_pending(const struct pool *p);
/* The listing a check walks (pool_check.c): a line's snapshot records, ascending by txg, and
 * every dead list's (dl/) or queued (fq/) chain, each read from the metadata tree. */
struct pool_snap_rec {
	uint64_t sr_head_id;
	uint64_t sr_id;
	uint64_t sr_txg;
	uint64_t sr_creation_ns;
	uint64_t sr_refer;
	uint64_t sr_dl_id;
	uint64_t sr_guid; /* 0 in records made before it was kept: pool_snap_guid */
	char sr_name[POOL_SNAP_NAME_MAX + 1];
	struct blk_ptr sr_root;
};
struct pool_dl_chain {
	uint64_t dc_dl_id; /* dl/ only */
	uint64_t dc_bucket;
	uint64_t dc_seq;
	uint32_t dc_flags; /* POOL_DL_F_FREE_ENTRIES: fq/ chains whose entries are freed */
	uint64_t dc_entries, dc_bytes, dc_chunks;
	struct blk_ptr dc_head;
};
#define POOL_DL_F_FREE_ENTRIES 1u
int pool_sn_list(struct pool *p, uint64_t head_id, struct pool_snap_rec **recs_out,
                 size_t *n_out);
/* The formats (tables in pool_snap.c). The decoders take hostile bytes (a record with its key as
 * found in the metadata tree, a chunk as read) and return 0 or -EIO. */
#define POOL_SN_RECORD_BYTES 192u
#define POOL_DL_CHAIN_BYTES 128u
#define POOL_DL_CHUNK_HDR 96u
#define POOL_DL_CHUNK_MAX 1022u /* entries of a chunk: 64 KiB */
void pool_sn_encode(const struct pool_snap_rec *sr, uint8_t out[POOL_SN_RECORD_BYTES]);
int pool_sn_decode(struct pool *p, const void *key, uint32_t klen, const uint8_t *in,
                   uint32_t len, struct pool_snap_rec *sr);
void pool_dl_chain_encode(const struct pool_dl_chain *dc, uint8_t out[POOL_DL_CHAIN_BYTES]);
int pool_dl_chain_decode(struct pool *p, const void *key, uint32_t klen, const uint8_t *in,
                         uint32_t len, struct pool_dl_chain *dc);
/* Every chain whose key starts with prefix ("dl/" or "fq/"), into *out (mem_free). */
int pool_dl_chains_all(struct pool *p, const char *prefix, struct pool_dl_chain **out,
                       size_t *n_out);
/* A chunk of a chain, read through the walk's cache (p_walk set, under p_lock): its image is
 * held (*hold_out, for pool_walk_release); pool_dl_chunk_entry checks and decodes entry i. */
struct pool_dl_chunk {
	uint32_t ck_n;
	uint64_t ck_bytes;
	struct blk_ptr ck_prev;
	const uint8_t *ck_entries;
};
int pool_dl_chunk_read(struct pool *p, const struct blk_ptr *bp, struct pool_dl_chunk *ck,
                       void **hold_out);
int pool_dl_chunk_decode(struct pool *p, const uint8_t *img, uint32_t len,
                         struct pool_dl_chunk *ck);
int pool_dl_chunk_entry(struct pool *p, const struct pool_dl_chunk *ck, uint32_t i,
                        struct blk_ptr *bp);
/* Under p_lock: USED of snapshot recs[i] of head (recs: its line, n of them): what only it
 * holds. 0, or the metadata tree's error. */
int pool_snap_used(struct pool *p, const struct pool_ds *head, const struct pool_snap_rec *recs,
                   size_t n, size_t i, uint64_t *used_out);
/* Under p_lock: the bytes only the snapshots of a line hold (its usedbysnapshots). loaded may be
 * NULL (then nothing is pending). */
int pool_snap_space(struct pool *p, const struct pool_ds *loaded, uint64_t head_id,
                    uint64_t dl_id, uint64_t origin_txg, uint64_t *bytes_out);
/* pool_ds.c: a dataset record's origin (false when the record does not parse or has none). */
bool pool_ds_record_origin(const uint8_t *rec, uint32_t len, uint64_t *head_id, uint64_t *txg);
/* pool_ds.c: decodes a dataset record (hostile) into ds's fields (ds_pool set). */
int pool_ds_record_decode(struct pool_ds *ds, const uint8_t *in, uint32_t len);

/* pool_destroy.c */
/* The metadata key "dq/<id as 16 hex digits>" of a dataset queued for destruction (key holds
 * POOL_MOS_KEY_MAX bytes). */
void pool_destroy_key(uint64_t id, char *key, uint32_t *klen);
/* At import, under p_lock, after the metadata tree is loaded: loads every dataset queued for
 * destruction. Their owners are attached by pool_destroy_attach_all, without the lock. */
int pool_destroy_load_queued(struct pool *p);
void pool_destroy_attach_all(struct pool *p);
/* Under p_lock (phase 1 of a rollback): queues for freeing the tree rec_of's record names, as a
 * destroyed dataset (its record under "dq/<id>", loaded, named after `was`); its owner is
 * attached before its first step. Returns 0 or -errno (nothing queued). */
int pool_destroy_queue_record(struct pool *p, const struct pool_ds *rec_of, const char *was);
/* The sync thread, no lock held: one step of the first queued dataset (frees up to
 * po_destroy_step entries' blocks, or finishes it). Returns true when it changed something (a
 * txg should follow). */
bool pool_destroy_step(struct pool *p);

#endif
