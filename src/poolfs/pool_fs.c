/* pool_fs.c: the pool's fs.h back end ("poolfs"): the zpl on a pool dataset, behind the
 * asynchronous file-system interface, with NFSv3's durability made from the intent log and txgs.
 *
 * ---- Model ----
 * Two objects, with different lives:
 *   - The owner (struct pfs_owner): what the pool knows about. It holds the zpl of one dataset and
 *     the zpl_env that maps zpl's block needs onto the pool (get/release: the ARC through
 *     pool_block_get/release; write: pool_sync_write of POOL_BT_DATA blocks; free: pool_ds_free;
 *     space: pool_space; now: CLOCK_REALTIME). It is attached by pool_fs_open or, at import, by
 *     pool_fs_attach (po_attach) so that log records replay through zpl_replay. The pool calls it
 *     at every txg (do_sync: zpl_sync), for dirty accounting, replay, block walks (check,
 *     destroy) and finally do_detach (zpl_close), when the dataset leaves memory: after its last
 *     close and sync, or when the pool closes. An owner whose dataset was never formatted has no
 *     zpl yet (po_zpl NULL); pool_fs_open formats it (root 0:0 mode 0755) and waits until the
 *     format's txg is durable, so that no log record can ever precede the format on disk.
 *     The owner also keeps the dataset's pending writes (below), since every open shares them.
 *     A rollback of the dataset while it is open (pool_snap.c, S10) calls do_rollback in its
 *     phase 1: the zpl is closed and the pending writes forgotten, and the next request opens
 *     the zpl on the new tree (pfs_run); opens keep their root and limits, which a rollback
 *     does not change, and new objects' generations follow the txgs (zpl_env.ze_txg), so no
 *     handle a client kept from before names another object after it.
 *   - The file system (struct pool_fs): one pool_fs_open; the struct fs the NFS layer uses. It
 *     holds a dataset open (so the owner stays), the write verifier, two helper threads and the
 *     free list of slow-path contexts. fo_destroy closes the dataset.
 *
 * ---- A request's path (pfs_run), always on the caller's thread first ----
 *   1. Under the pool lock. A change (SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE,
 *      RMDIR, RENAME, LINK) first passes pool_tx_throttle: POOL_THROTTLED parks the request until
 *      pw_done (then it starts over), -EIO (suspended pool) fails it. WRITE and the creates then
 *      need pool_space_would_fit(their bytes plus one tree node), or, when it would fit once
 *      the space removes freed is back, wait for the txg that returns it (pool_space_wait, as
 *      throttled, at most POOL_FS_SPACE_WAITS_MAX times), or fail with -ENOSPC; and the
 *      dataset's quota room (pool_ds_quota_would_fit) or fail with -EDQUOT; removes
 *      always go on, so a full pool can be emptied.
 *   2. zpl_execute. -SH_ENEEDBLOCK: unlock, pool_block_load; POOL_LOADED starts over at once; 0
 *      means the load callback (blk engine thread, where the pool lock may not be taken) starts
 *      the request over: posted to fr_loop, or to this fs's runner thread when fr_loop is NULL.
 *      zpl guarantees that a run that misses changed nothing and produced no output to keep
 *      (READDIR loads its first batch before emitting anything), so starting over is exact.
 *   3. A change that must be stable (every change but an UNSTABLE WRITE): first, in the locked
 *      section and before zpl_execute, the pending writes of the files it changes are appended to
 *      the log (rule F8). On success the change's record (zpl_record_encode) is appended in the
 *      same locked section (so log order is change order), then, unlocked, pool_log_commit:
 *      ILOG_DONE completes at once, 0 completes from the log's waiter callback. A stable WRITE of
 *      at least POOL_FS_INDIRECT_MIN_BYTES first writes its data as blocks of their own and logs
 *      their pointers ("Indirect writes" below); one whose blocks cannot be had falls back to a
 *      copy in the log, or, above POOL_LOG_PAYLOAD_MAX, to waiting for a txg sync (step 5).
 *      A stable WRITE answers wr_committed = FS_FILE_SYNC. An UNSTABLE
 *      WRITE answers FS_UNSTABLE and leaves no record: it only notes its range as pending (F7).
 *   4. COMMIT of file X (after zpl_execute validated the handle and filled its wcc; its offset and
 *      count are ignored: the whole file is committed, as knfsd mostly does): in the same locked
 *      section, X's pending writes are appended to the log as WRITE records of their ranges'
 *      current bytes (zpl_record_encode_range reads them from zpl's dirty buffers) and forgotten;
 *      unlocked, pool_log_commit up to the last of them, or, when X had none, up to the log's end
 *      (records an earlier COMMIT or change of X appended may not be durable yet). The reply comes
 *      with that group commit's flush; no txg is written. When the log cannot take them (rule F9:
 *      X has more than POOL_FS_COMMIT_LOG_MAX_BYTES pending, a loss of X or of the table is not
 *      durable yet, a range needs a block not in memory, no memory) the COMMIT goes to step 5.
 *   5. The committer thread takes every COMMIT and stable write that could not use the log, calls
 *      pool_txg_wait_synced(p, 0) once for that batch (group commit) and completes them. UNSTABLE
 *      data lives in zpl's dirty buffers until a txg writes it, so a durable txg that was open at
 *      or after the COMMIT makes every earlier write durable (pending records or not).
 *
 * ---- Rules ----
 *   F1 fr_done runs exactly once: every path ends in exactly one pfs_finish, and a request that
 *      leaves pfs_run without finishing has handed itself to exactly one callback (load,
 *      throttle, log commit, or a queue of a helper thread), which resumes or finishes it.
 *   F2 The fast path allocates nothing: a read-only operation that hits in memory uses no
 *      context. A change needs a pool_waiter for the throttle before it knows whether it will
 *      wait, so changes (and COMMIT, for its log waiter) take a context from the free list
 *      (allocated only when the list is empty; at most POOL_FS_CTX_FREE_MAX are kept) and return
 *      it when they finish. An UNSTABLE WRITE's pending range allocates only for an object new to
 *      the table (from a free list of POOL_FS_PEND_FREE_MAX entries first).
 *   F3 The pool lock is never taken on the blk engine thread or the sync thread: callbacks only
 *      post work (fr_loop or the runner) or finish the request (fs_req_complete is safe anywhere).
 *   F4 A change's record is appended in the locked section of its change, a pending write's in
 *      the locked section of a later COMMIT or logged change of its file (F8); nothing blocks
 *      under the lock.
 *   F5 pfs_finish returns the context before fs_req_complete, so nothing of this fs is touched
 *      after the request's completion (the caller may destroy the fs right after the last one).
 *   F6 Every block a request loads stays held until the request ends: with a cache smaller than
 *      what one operation touches, blocks loaded for one restart would otherwise be evicted
 *      before the next, and the request would restart forever (a scan from the start of what it
 *      needs each time, evicting the least recently used block it will need next). So each
 *      restart gets further than the last. A request whose held blocks would pass --arc-max
 *      fails with -EIO instead of holding unbounded memory (none should come near: a large
 *      REMOVE or truncation goes in steps of ZPL_REAP_STEP_EXTENTS extents, and a truncation's
 *      step, -SH_EPARTIAL, lets go of what it held). A scan that missed also loads the nodes
 *      ahead of it (zpl_scan_hints; cached, not held) and the request restarts when all are
 *      in, once per run of nodes rather than per node; only with --arc-max >=
 *      POOL_FS_AHEAD_MIN_ARC.
 *
 * ---- Pending writes (ZFS's itxs of WR_NEED_COPY writes, made at zil_commit) ----
 * The owner (shared by every open of the dataset) keeps, under the pool lock, a hash of entries
 * per object with UNSTABLE writes not known durable: up to POOL_FS_PEND_RANGES disjoint byte
 * ranges, each with the newest txg that wrote into it, and a "loss" txg. An UNSTABLE WRITE adds
 * its range (merged with ranges it overlaps or touches; with all slots taken, with the nearest
 * one, gap included): no data is copied, nothing allocated unless the object is new to the table.
 * Bounds: POOL_FS_PEND_OBJS_MAX entries; an object above POOL_FS_COMMIT_LOG_MAX_BYTES pending
 * trades its ranges for a loss. Entries are pruned at every txg's do_sync (every txg before the
 * one syncing is durable then: syncs do not overlap), lazily when a flush looks at them, and
 * when the table is full, by a scan that runs at most once per durable txg (a full table of the
 * open txg's writes would otherwise be scanned again at each new object's write).
 *
 * Rules (all under the pool lock):
 *   F7 Every successful UNSTABLE WRITE to X in txg T is, until T is durable, either inside a range
 *      of X's entry whose txg is >= T, or covered by a loss >= T (X's, or the table's when X
 *      could not get an entry), or its bytes' later contents were logged by a flush that came
 *      after it, or X is gone. So what COMMIT logs is everything of X that no durable txg holds.
 *   F8 A range is forgotten only when logged, when its txg is durable, or with its object. Before
 *      a change of X that is logged (stable WRITE, SETATTR, LINK of X; REMOVE of a name of X and
 *      RENAME from it; RENAME over X; CREATE UNCHECKED of X's name, which may truncate X: the
 *      last four are found with zpl_lookup_name), X's pending writes are appended first. Their
 *      records therefore precede every later logged change of X, which keeps the mtime, ctime
 *      and set-id bits a range record sets equal to the original's (zpl_log.c).
 *   F9 A write or range that cannot go through the log becomes a loss: a txg number. While it is
 *      not durable, COMMIT of X (of any file, for the table's loss) waits for a txg (step 5).
 *   F10 A range record sets bytes [off, off + n) of X, clipped to X's size, to what they held
 *      when it was encoded, at absolute offsets: applied to any earlier state of X it yields those
 *      bytes, and applying it again changes nothing. Logging more than was written (a merged gap,
 *      a range logged twice) is therefore harmless.
 *   F11 Pending writes of a file removed with its last link are not logged (ZFS's
 *      zil_remove_async): the change that removed it is logged, and a flush that finds its object
 *      gone (zpl_record_encode_range: -ESTALE) forgets the entry. No range record of X is ever
 *      appended after the record that removed X: both happen under the pool lock, the flush
 *      reading X as it is then.
 *
 * Why replay restores every acknowledged COMMIT exactly. Let COMMIT of X append its records in
 * txg M (pool_log_append tags them M) and be acknowledged, then a crash leave the uberblock of
 * txg U. If U >= M, the records are skipped (R5 of pool.c), and U's state holds X as it was when
 * M began to sync, after the COMMIT: the committed bytes or newer. If U < M, replay starts from
 * U's state and applies, in order, every record tagged above U, through the COMMIT's (all
 * durable: the COMMIT waited for its LSN, and the log is durable in order). In U's state X holds
 * every change made before U began to sync; the changes of X made since are (a) logged changes,
 * replayed in order, and (b) UNSTABLE writes in txgs above U, none durable, so by F7 each is in a
 * range logged by this COMMIT or an earlier flush (F8 forgets ranges only when logged or durable,
 * and a durable txg is <= U). F8 puts a flush of X right before each logged change of X, so X's
 * records are its logged changes in change order with flushes between them; by induction over
 * them, replay leaves X after each record as X was when that record was appended: a logged change
 * re-runs on the same state, and a flush (F10) restores the bytes of every write since the
 * previous record, these being in its ranges. So after the COMMIT's records X is as it was at the
 * COMMIT, attributes included (zpl_log.c: times and set-id bits). Records appended
 * after the txg of their writes began to sync (tag M > T) are covered by the same argument: U >=
 * M skips them and U's state is newer; U in [T, M) replays them onto a state that holds the
 * writes already, which F10 makes harmless; U < T is the ordinary case.
 *
 * ---- Indirect writes (ZFS's WR_INDIRECT: dmu_sync, then a record with the block pointer) ----
 * A large stable WRITE would cost the log its whole data (and above POOL_LOG_PAYLOAD_MAX could not
 * go there at all). Instead:
 *   1. Before the lock, its data is cut into pieces of the dataset's record size and prepared
 *      (compressed, checksummed: pfs_ind_prepare). Under the lock, after the throttle, each
 *      piece's space is allocated (pool_iblock_alloc) and the indirect write goes on the owner's
 *      list, LIVE. Unlocked, the blocks are written and the vdevs the log's flush does not cover
 *      are flushed (pool_iblock_write; C2 of pool_claim.c); the completion resumes the request.
 *   2. The request runs as in step 3 above (F8's flush of pending writes, zpl_execute, all in one
 *      locked section), but its record names the blocks (zpl_record_encode_blocks) instead of
 *      carrying the data; the indirect write becomes LOGGED with the record's txg. Replies after
 *      the log commit, as any stable change. The data never goes into the log, and no txg is
 *      waited for.
 *   3. Block adoption (ZFS's dbuf override): right after the record, each block that is one
 *      whole dirty buffer of the file byte for byte (aligned to the file's block size, which
 *      the dataset's record size usually is) is offered to zpl (zpl_adopt), which marks the
 *      buffer; at the sync, zpl_sync takes the block as the file's extent (pfs_env_adopt,
 *      pool_sync_adopt) instead of writing the buffer again, so a large aligned FILE_SYNC write
 *      costs one data write. A later change of the buffer unmarks it, and its block is freed
 *      as below.
 *
 *   F12 An indirect write's blocks, but those adopted (F13), are freed exactly once, in a txg
 *      whose state no replayable
 *      record depends on them in: under the pool lock, in do_sync of txg T, a LOGGED one whose
 *      record is tagged <= T is freed in T (its record is skipped at replay once T is durable,
 *      and replayed, with the blocks free in the state replay starts from, while it is not); a
 *      LIVE one is freed in T as well and becomes FREED: no record will ever name it (the
 *      request finds it FREED when it resumes and falls back to the copy or the txg), and its
 *      write, if still in flight, keeps T from becoming durable until it lands (C1), so the
 *      space cannot be reused under it. Hence no synced state shows an indirect block allocated
 *      unless an extent names it, and an allocation followed by a crash leaks nothing. A request that ends elsewhere (a
 *      failure found on a thread where the pool lock may not be taken) marks its indirect write
 *      abandoned and the next do_sync frees it. While blocks are LIVE or LOGGED they belong to the
 *      dataset: do_visit_blocks names them with the dataset's meta entry, so that pool_check
 *      counts them as live (destroy never sees any: no request runs then, and its txg frees the
 *      LOGGED ones first).
 *   F13 A block is adopted only in the sync of its record's txg (the txg that allocated it and
 *      whose dirty buffer it stands for: a LOGGED write always is; pool_sync_adopt refuses any
 *      other birth), in zpl_sync, before pfs_ind_sync of the same do_sync, which then frees the
 *      write's other blocks and never the adopted ones. From there the block is a data block of
 *      the dataset like any other (charged to its usage, freed through ze_free_block). The
 *      record stays as it was: once that txg is durable it is skipped, and while it is not,
 *      replay starts from a state in which the block is free and claims it as for any record.
 *   Replay (pool_log.c, pool_claim.c) claims a record's blocks, verifying their checksums, before
 *   applying it, and frees them after; zpl_replay reads them through ze_get_block. That such a
 *   record is replayed exactly when its change is missing from the uberblock's state is R5 of
 *   pool.c, as for every record: the change and its record share a locked section (step 2).
 *
 * ---- Sealing (phase 0 of a sync, pool.c) ----
 *   F14 do_seal (pfs_do_seal, on the sync thread) picks batches of dirty buffers under the pool
 *      lock (zpl_seal_pick), prepares each without it (pool_seal_block, with the compression the
 *      dataset had at the pick), and attaches them under it again (zpl_seal_attach), or, when the
 *      zpl was reopened meanwhile (po_zpl changed), releases them (zpl_seal_release) and frees
 *      the blocks. zpl keeps a picked buffer from being edited in place while it is held and
 *      drops a seal at any later edit, so zpl_sync writes through ze_write_sealed only blocks
 *      that hold the buffer's bytes at the sync: the txg's contents are what they would be
 *      without sealing. A sealed block phase 1 does not take (the buffer was edited, truncated,
 *      or the zpl closed) is freed through ze_drop_seal.
 *
 * ---- Locks ----
 * The pool lock (pool_lock) guards the zpl, its tree and the owner's pending writes (a flush
 * reads the durable txg under it: p_state_lock nests inside). pf_lock (a leaf, may be taken under
 * the pool lock) guards the helper threads' queues, the stopping flag and the context free list.
 * FSSTAT's space comes from pool_space_held, under the pool lock zpl's caller holds.
 * zpl copies its env at zpl_open, fsid included: pool_fs_open reopens a zpl that
 * pool_fs_attach opened with fsid 0 (exact while it has no dirty buffers, as after import).
 *
 * ---- Log record (pool_log_append type POOL_FS_REC_ZPL = 1) ----
 *   offset  size  field
 *        0     n  the zpl record exactly as zpl_record_encode (a change),
 *                 zpl_record_encode_range (a pending range, a WRITE record of at most
 *                 POOL_FS_RANGE_REC_DATA bytes) or zpl_record_encode_blocks (a large stable
 *                 WRITE whose data is in the blocks it names) wrote it (its format: zpl_log.c)
 *
 * ---- Tree entries named to the pool (do_visit_blocks), per zpl.c's key table ----
 *   key: objid(8) | kind(1) [| index(8)]; kind 0x03 (extent, 17-byte key) holds a 64-byte block
 *   pointer (blk_ptr_encode); all-zero means "being written" (no block yet). Every other entry
 *   holds no block pointer. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "poolfs/pool_fs.h"
#include "poolfs/pool_fs_impl.h"
#include "poolfs/pool_fs_snapdir.h"
#include "pool/pool_impl.h"
#include "zpl/zpl.h"

#define POOL_FS_REC_ZPL 1u
#define POOL_FS_OWNER_MAGIC 0x706f6f6c66737a31ull /* "poolfsz1" */
#define POOL_FS_CTX_FREE_MAX 64u                 /* contexts kept for reuse */
#define POOL_FS_REC_KEEP_BYTES (16u * 1024u)     /* larger record buffers are not kept */
/* Space a change may add to the tree before the next sync: one dataset tree node. */
#define POOL_FS_NODE_SLACK_BYTES POOL_DS_NODE_BYTES
/* How many txgs a change that does not fit waits for space being freed before -ENOSPC: each wait
 * returns what was freed before it; more would only mean others keep taking the space. */
#define POOL_FS_SPACE_WAITS_MAX 4u
/* Per zpl.c's key table: extent entries. */
#define POOL_FS_KIND_EXTENT 0x03u
#define POOL_FS_LONG_KEY 17u
#define POOL_FS_META_KEY 9u /* the dataset's meta entry: nine zero bytes */

/* ---- Pending writes (the theory's "Pending writes") ---- */
#define POOL_FS_PEND_RANGES 8u      /* ranges per object; more are merged across their gaps */
#define POOL_FS_PEND_OBJS_MAX 4096u /* objects with pending writes (~250 KiB of entries) */
#define POOL_FS_PEND_BUCKET_BITS 10u
#define POOL_FS_PEND_BUCKETS (1u << POOL_FS_PEND_BUCKET_BITS) /* hash chains */
#define POOL_FS_PEND_FREE_MAX 64u   /* entries kept for reuse */
/* A file with more pending bytes than this is committed by a txg, not copied into the log: large
 * writes are cheaper written once, by the txg, than twice. */
#define POOL_FS_COMMIT_LOG_MAX_BYTES (1024u * 1024u)
/* Data bytes per WRITE record of a pending range (several records for a longer one): well below
 * POOL_LOG_PAYLOAD_MAX, so that records of several files share log blocks. */
#define POOL_FS_RANGE_REC_DATA (128u * 1024u)
/* pfs_pend_flush: the file's pending writes cannot go through the log; a txg must carry them. */
#define POOL_FS_USE_TXG 1

/* ---- Indirect writes (the theory's "Indirect writes") ---- */
/* A stable WRITE of at least this many bytes writes its data as blocks of their own and logs
 * their pointers instead of copying the data into the log (ZFS's zfs_immediate_write_sz). */
#define POOL_FS_INDIRECT_MIN_BYTES (32u * 1024u)

enum pfs_ind_state {
	PFS_IND_LIVE = 1,   /* blocks allocated (being written, or written), no record yet */
	PFS_IND_LOGGED = 2, /* a record names the blocks; freed by the sync of pi_txg */
	PFS_IND_FREED = 3,  /* a sync freed the blocks before any record named them */
};

/* One indirect write: a request's blocks, from their allocation until the sync that frees them.
 * On the owner's list (po_inds) under the pool lock from pfs_ind_alloc_locked on. */
struct pfs_ind {
	struct pfs_ind *pi_next;
	uint8_t pi_state;          /* enum pfs_ind_state, under the pool lock */
	uint64_t pi_txg;           /* PFS_IND_LOGGED: the txg its record is tagged with */
	struct pfs_ctx *pi_ctx;    /* the request the write's completion resumes */
	atomic_bool pi_abandoned;  /* the request ended without letting go of it (rule F12) */
	_Atomic int pi_io_status;  /* the writes' and flushes' outcome, set before the resume */
	unsigned pi_nblocks;
	unsigned pi_nprepared;     /* images in pi_preps still to release */
	struct pool_iwrite pi_iw;
	struct blk_ptr *pi_bps;
	bool *pi_adopted;          /* per block: taken by the txg as a file's block (pool lock) */
	struct blk_prepared *pi_preps;
	struct blk_vdev_io *pi_flushes;
};

struct pfs_prange {
	uint64_t pr_off, pr_end; /* bytes [pr_off, pr_end) */
	uint64_t pr_txg;         /* the newest txg that wrote into the range */
};

/* One object's pending writes: a hash entry, under the pool lock. */
struct pfs_pobj {
	struct pfs_pobj *pp_next;  /* hash chain, or the free list */
	uint64_t pp_objid, pp_gen; /* the object id (zpl.h: id, generation) */
	uint64_t pp_bytes;         /* sum of the ranges' lengths */
	uint64_t pp_lost_txg;      /* 0, or the newest txg with a write of this object that the
	                            * ranges do not hold (rule F9) */
	uint32_t pp_nranges;
	struct pfs_prange pp_ranges[POOL_FS_PEND_RANGES]; /* disjoint, not adjacent */
};

struct pfs_owner {
	uint64_t po_magic;       /* POOL_FS_OWNER_MAGIC */
	struct pool *po_pool;
	struct pool_ds *po_ds;
	struct zpl *po_zpl;      /* NULL until the dataset is formatted */
	struct zpl_env po_env;
	/* Pending writes, under the pool lock. */
	struct pfs_pobj **po_pend; /* POOL_FS_PEND_BUCKETS chains */
	uint32_t po_npend;         /* entries in the chains */
	struct pfs_pobj *po_pend_free;
	uint32_t po_npend_free;
	uint64_t po_pend_lost_txg; /* 0, or the newest txg with a write no entry holds (F9) */
	uint64_t po_pend_pruned;   /* the durable txg the last full prune used: again finds nothing */
	uint8_t *po_rec;           /* the buffer range records are encoded in */
	size_t po_rec_cap;
	struct pfs_ind *po_inds;   /* indirect writes whose blocks are allocated (pool lock) */
	_Atomic uint64_t po_adopted; /* blocks adopted (F13) */
	_Atomic uint64_t po_pend_scans; /* full scans of the pending-write chains */
	uint64_t po_reap_seen;     /* zpl_reap_queued when a reap was last started (pool lock) */
	_Atomic unsigned po_reapers; /* opens whose reaper is busy */
};

struct pool_fs;

/* Blocks one request holds across its restarts (rule F6) in its context itself; more go to an
 * array grown for that request alone. */
#define POOL_FS_PINS_INLINE 64u

/* The smallest --arc-max with which a scan that misses also loads the nodes ahead of it (up to
 * BTREE_SCAN_HINTS_MAX, 512 KiB of 16 KiB nodes): 64 such batches. */
#define POOL_FS_AHEAD_MIN_ARC (32ull << 20)

/* Per-request state of the slow paths (rule F2). */
struct pfs_ctx {
	struct pool_fs *pc_fs;
	struct fs_req *pc_req;
	struct pfs_ctx *pc_next;     /* free list or a helper's queue */
	struct loop_task pc_task;    /* the re-run on fr_loop */
	struct pool_waiter pc_pw;    /* the throttle */
	struct ilog_waiter pc_iw;    /* the log commit */
	uint8_t *pc_rec;             /* the log record */
	size_t pc_rec_cap;
	/* Blocks this request loaded, held until it completes, so that a cache too small for what
	 * one operation touches cannot evict them between its restarts: each restart then gets
	 * further than the last, and a large READDIRPLUS on a tiny cache finishes (rule F6). */
	struct blk_ptr pc_missing;   /* the block being loaded */
	/* The nodes a scan that missed pc_missing wants next (zpl_scan_hints), loaded with it: the
	 * request resumes once all of these loads are done (pc_loading counts those in flight, the
	 * missing block's included), so a cold scan restarts about once per run of nodes instead of
	 * once per node. pc_load_failed: the missing block could not be read. */
	struct blk_ptr pc_ahead[BTREE_SCAN_HINTS_MAX];
	unsigned pc_nahead;
	atomic_uint pc_loading;
	atomic_bool pc_load_failed;
	void *pc_pins[POOL_FS_PINS_INLINE];
	void **pc_pins_more;         /* the pins past POOL_FS_PINS_INLINE; NULL when none */
	unsigned pc_npins, pc_pins_more_cap;
	uint64_t pc_pinned_bytes;
	/* A large stable WRITE (rule F12): its blocks prepared (pc_fresh, not allocated yet), then
	 * allocated and written (pc_ind, on the owner's list); pc_ind_tried once either happened. */
	struct pfs_ind *pc_fresh;
	struct pfs_ind *pc_ind;
	bool pc_ind_tried;
	bool pc_reap;                /* the fs's reaper (pf_reap_ctx), not a request */
	unsigned pc_space_waits;     /* txgs waited for removed files' space (pool_space_wait) */
};

struct pool_fs {
	struct fs pf_fs;             /* first: struct fs * converts */
	struct pool *pf_pool;
	struct pool_ds *pf_ds;
	struct pfs_owner *pf_owner;
	uint8_t pf_verf[8];
	bool pf_read_only; /* a snapshot (POOL/FS@SNAP): every change answers -EROFS */
	struct fs_obj_id pf_root; /* zpl_root and zpl_info at the open */
	struct fs_info pf_info;
	struct pfs_snapdir *pf_snapdir; /* .zfs (pool_fs_snapdir.c); NULL for a snapshot */

	pthread_mutex_t pf_lock;     /* the fields below */
	pthread_cond_t pf_run_cv;
	pthread_cond_t pf_commit_cv;
	bool pf_stopping;
	struct pfs_ctx *pf_runq, *pf_runq_tail;       /* re-runs of requests without fr_loop */
	struct pfs_ctx *pf_commitq, *pf_commitq_tail; /* waiting for a txg sync */
	struct pfs_ctx *pf_free;
	unsigned pf_nfree;
	pthread_t pf_runner, pf_committer;
	/* The reaper ("Freeing removed files" below): one zpl_reap step at a time, run as a
	 * request of its own (pf_reap_req, with its own context) on the runner thread. */
	struct fs_req pf_reap_req;
	struct pfs_ctx *pf_reap_ctx;
	bool pf_reap_busy;           /* a step is queued or running */
	bool pf_reap_again;          /* kicked while busy: look at the queue again */
	bool pf_reap_stopping;
	pthread_cond_t pf_reap_cv;   /* pf_reap_busy went false */
	bool pf_reap_more;           /* the last step changed something (pool lock, then its end) */
	_Atomic uint64_t pf_reap_steps;

	_Atomic uint64_t pf_restarts, pf_throttled, pf_log_commits, pf_txg_waits, pf_txg_waited_reqs,
		pf_ctx_allocs;
};

static void pfs_resume(struct pfs_ctx *c);

static struct pool_fs *pfs_of(struct fs *fs)
{
	return SH_CONTAINER_OF(fs, struct pool_fs, pf_fs);
}

/* ---------------------------------------------------------------------------------------------
 * The zpl environment over the pool */

static int pfs_env_get(void *ctx, const struct blk_ptr *bp, const void **image_out, void **hold_out)
{
	struct pfs_owner *o = ctx;
	return pool_block_get(o->po_pool, bp, image_out, hold_out);
}

static void pfs_env_release(void *ctx, void *hold)
{
	struct pfs_owner *o = ctx;
	pool_block_release(o->po_pool, hold);
}

static int pfs_env_write(void *ctx, const void *data, uint32_t lsize, struct blk_ptr *bp_out)
{
	struct pfs_owner *o = ctx;
	return pool_sync_write(o->po_pool, data, lsize, POOL_BT_DATA, 0, 1, bp_out);
}

static int pfs_env_write_sealed(void *ctx, void *sealed, void *data, bool may_take,
                                bool *taken_out, struct blk_ptr *bp_out)
{
	struct pfs_owner *o = ctx;
	return pool_sync_write_sealed(o->po_pool, sealed, data, may_take, taken_out, POOL_BT_DATA,
	                              0, 1, bp_out);
}

static void pfs_env_drop_seal(void *ctx, void *sealed)
{
	struct pfs_owner *o = ctx;
	pool_sealed_free(o->po_pool, sealed);
}

static void pfs_env_free(void *ctx, const struct blk_ptr *bp)
{
	struct pfs_owner *o = ctx;
	/* A refusal means a damaged tree; the pool logs and counts it (ps_free_errors). */
	(void)!pool_ds_free(o->po_ds, bp);
}

/* FSSTAT's space: zpl calls this under the pool lock (pfs_run holds it). */
static int pfs_env_space(void *ctx, uint64_t *total_bytes, uint64_t *free_bytes, uint64_t *avail_bytes)
{
	struct pfs_owner *o = ctx;
	pool_space_held(o->po_pool, total_bytes, free_bytes, avail_bytes);
	pool_ds_quota_space(o->po_ds, total_bytes, free_bytes, avail_bytes);
	return 0;
}

static uint64_t pfs_env_txg(void *ctx)
{
	struct pfs_owner *o = ctx;
	return pool_open_txg(o->po_pool); /* under the pool lock, as every zpl operation */
}

static void pfs_env_now(void *ctx, struct fs_time *now_out)
{
	(void)ctx;
	uint64_t ns = clock_realtime_ns();
	now_out->ft_sec = (int64_t)(ns / 1000000000u);
	now_out->ft_nsec = (uint32_t)(ns % 1000000000u);
}

/* ---------------------------------------------------------------------------------------------
 * The owner */

/* Under the pool lock: opens the zpl if it is not open, formatting an empty dataset first when
 * format is set (*formatted then says so). 0, -SH_ENEEDBLOCK (*missing), -ENOENT (unformatted and
 * !format), or zpl's error. */
static int pfs_owner_load_locked(struct pfs_owner *o, bool format, struct blk_ptr *missing, bool *formatted)
{
	if (o->po_zpl)
		return 0;
	struct btree *tree = pool_ds_tree(o->po_ds);
	uint32_t record_bytes = pool_ds_record_bytes(o->po_ds);
	int rc = zpl_open(tree, &o->po_env, record_bytes, &o->po_zpl, missing);
	if (rc != -ENOENT || !format)
		return rc;
	const struct fs_cred root = {0};
	rc = zpl_format(tree, &o->po_env, &root, 0755, NULL, missing);
	if (rc != 0)
		return rc;
	if (formatted)
		*formatted = true;
	return zpl_open(tree, &o->po_env, record_bytes, &o->po_zpl, missing);
}

/* The same, blocking: takes the pool lock and reads missing blocks synchronously. */
static int pfs_owner_load_sync(struct pfs_owner *o, bool format, bool *formatted)
{
	for (;;) {
		struct blk_ptr missing;
		pool_lock(o->po_pool);
		int rc = pfs_owner_load_locked(o, format, &missing, formatted);
		pool_unlock(o->po_pool);
		if (rc != -SH_ENEEDBLOCK)
			return rc;
		rc = pool_block_read_sync(o->po_pool, &missing);
		if (rc != 0)
			return rc;
	}
}

/* ---------------------------------------------------------------------------------------------
 * Pending writes (theory: "Pending writes"; all under the pool lock) */

/* The (id, generation) of a zpl object id; false for one that is not a zpl id. */
static bool pfs_obj_key(const struct fs_obj_id *id, uint64_t *objid, uint64_t *gen)
{
	if (id->foi_len != ZPL_OBJ_ID_BYTES)
		return false;
	*objid = pool_get_le64(id->foi_bytes);
	*gen = pool_get_le64(id->foi_bytes + 8);
	return true;
}

static struct pfs_pobj **pfs_pend_chain(struct pfs_owner *o, uint64_t objid)
{
	/* Fibonacci hashing: consecutive object ids spread over the chains. */
	return &o->po_pend[sh_hash_fib(objid, POOL_FS_PEND_BUCKET_BITS)];
}

/* The link that points at objid's entry (whatever its generation), or at the chain's end. */
static struct pfs_pobj **pfs_pend_link(struct pfs_owner *o, uint64_t objid)
{
	struct pfs_pobj **link = pfs_pend_chain(o, objid);
	while (*link && (*link)->pp_objid != objid)
		link = &(*link)->pp_next;
	return link;
}

/* Unlinks the entry *link points at and frees it (to the free list while it is short). */
static void pfs_pend_unlink(struct pfs_owner *o, struct pfs_pobj **link)
{
	struct pfs_pobj *pp = *link;
	*link = pp->pp_next;
	o->po_npend--;
	if (o->po_npend_free < POOL_FS_PEND_FREE_MAX) {
		pp->pp_next = o->po_pend_free;
		o->po_pend_free = pp;
		o->po_npend_free++;
	} else {
		mem_free(pp);
	}
}

static void pfs_pobj_recount(struct pfs_pobj *pp)
{
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < pp->pp_nranges; i++)
		bytes += pp->pp_ranges[i].pr_end - pp->pp_ranges[i].pr_off;
	pp->pp_bytes = bytes;
}

/* Forgets the ranges and the loss whose txg is durable (rule F8); true when nothing is left. */
static bool pfs_pobj_prune(struct pfs_pobj *pp, uint64_t synced)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < pp->pp_nranges; i++)
		if (pp->pp_ranges[i].pr_txg > synced)
			pp->pp_ranges[n++] = pp->pp_ranges[i];
	if (n != pp->pp_nranges) {
		pp->pp_nranges = n;
		pfs_pobj_recount(pp);
	}
	if (pp->pp_lost_txg <= synced)
		pp->pp_lost_txg = 0;
	return pp->pp_nranges == 0 && pp->pp_lost_txg == 0;
}

static void pfs_pend_prune_all(struct pfs_owner *o, uint64_t synced)
{
	if (o->po_pend_lost_txg <= synced)
		o->po_pend_lost_txg = 0;
	/* Entries only gain ranges of the open txg, so until another txg is durable a second scan
	 * would prune nothing: a full table would otherwise be scanned at every new object's write. */
	if (o->po_npend == 0 || synced == o->po_pend_pruned)
		return;
	o->po_pend_pruned = synced;
	atomic_fetch_add_explicit(&o->po_pend_scans, 1, memory_order_relaxed);
	for (uint32_t b = 0; b < POOL_FS_PEND_BUCKETS; b++) {
		struct pfs_pobj **link = &o->po_pend[b];
		while (*link) {
			if (pfs_pobj_prune(*link, synced))
				pfs_pend_unlink(o, link);
			else
				link = &(*link)->pp_next;
		}
	}
}

/* Replaces the ranges by a loss: a txg must carry them (rule F9). */
static void pfs_pobj_lose(struct pfs_pobj *pp)
{
	for (uint32_t i = 0; i < pp->pp_nranges; i++)
		pp->pp_lost_txg = SH_MAX(pp->pp_lost_txg, pp->pp_ranges[i].pr_txg);
	pp->pp_nranges = 0;
	pp->pp_bytes = 0;
}

/* Adds [off, off + len) written in txg to the entry, merging it with the ranges it overlaps or
 * touches; with all POOL_FS_PEND_RANGES taken, also with the range nearest to it (their gap is
 * then logged too, with its current bytes, which is harmless: rule F10). */
static void pfs_pobj_add(struct pfs_pobj *pp, uint64_t off, uint64_t end, uint64_t txg)
{
	struct pfs_prange nr = {off, end, txg};
	for (;;) {
		uint32_t i = 0;
		while (i < pp->pp_nranges) {
			struct pfs_prange *r = &pp->pp_ranges[i];
			if (r->pr_off <= nr.pr_end && nr.pr_off <= r->pr_end) {
				nr.pr_off = SH_MIN(nr.pr_off, r->pr_off);
				nr.pr_end = SH_MAX(nr.pr_end, r->pr_end);
				nr.pr_txg = SH_MAX(nr.pr_txg, r->pr_txg);
				*r = pp->pp_ranges[--pp->pp_nranges];
				i = 0; /* the grown range may now reach ranges already passed */
				continue;
			}
			i++;
		}
		if (pp->pp_nranges < POOL_FS_PEND_RANGES)
			break;
		uint32_t best = 0;
		uint64_t best_gap = UINT64_MAX;
		for (i = 0; i < pp->pp_nranges; i++) {
			const struct pfs_prange *r = &pp->pp_ranges[i];
			uint64_t gap =
			    r->pr_end < nr.pr_off ? nr.pr_off - r->pr_end : r->pr_off - nr.pr_end;
			if (gap < best_gap) {
				best_gap = gap;
				best = i;
			}
		}
		const struct pfs_prange *r = &pp->pp_ranges[best];
		nr.pr_off = SH_MIN(nr.pr_off, r->pr_off);
		nr.pr_end = SH_MAX(nr.pr_end, r->pr_end);
		nr.pr_txg = SH_MAX(nr.pr_txg, r->pr_txg);
		pp->pp_ranges[best] = pp->pp_ranges[--pp->pp_nranges];
	}
	pp->pp_ranges[pp->pp_nranges++] = nr;
	pfs_pobj_recount(pp);
}

/* An UNSTABLE WRITE of [off, off + len) to id succeeded in the open txg (rule F7). */
static void pfs_pend_note(struct pfs_owner *o, const struct fs_obj_id *id, uint64_t off,
                          uint32_t len)
{
	uint64_t objid, gen, txg = pool_open_txg(o->po_pool);
	if (len == 0 || !pfs_obj_key(id, &objid, &gen))
		return;
	struct pfs_pobj **link = pfs_pend_link(o, objid);
	struct pfs_pobj *pp = *link;
	if (pp && pp->pp_gen != gen) {
		pfs_pend_unlink(o, link); /* an entry of an object gone (ids are never reused) */
		link = pfs_pend_link(o, objid);
		pp = NULL;
	}
	if (!pp) {
		if (o->po_npend >= POOL_FS_PEND_OBJS_MAX) {
			pfs_pend_prune_all(o, pool_synced_txg(o->po_pool));
			link = pfs_pend_link(o, objid);
		}
		if (o->po_npend < POOL_FS_PEND_OBJS_MAX) {
			pp = o->po_pend_free;
			if (pp) {
				o->po_pend_free = pp->pp_next;
				o->po_npend_free--;
			} else {
				pp = mem_alloc(sizeof(*pp));
			}
		}
		if (!pp) { /* the table is full, or no memory: every COMMIT waits for this txg */
			o->po_pend_lost_txg = SH_MAX(o->po_pend_lost_txg, txg);
			return;
		}
		memset(pp, 0, sizeof(*pp));
		pp->pp_objid = objid;
		pp->pp_gen = gen;
		*link = pp;
		o->po_npend++;
	}
	pfs_pobj_add(pp, off, off + len, txg);
	if (pp->pp_bytes > POOL_FS_COMMIT_LOG_MAX_BYTES)
		pfs_pobj_lose(pp); /* its COMMIT takes a txg anyway: stop tracking its ranges */
}

/* Drops id's entry: the object is gone (its last link removed). */
static void pfs_pend_forget(struct pfs_owner *o, const struct fs_obj_id *id)
{
	uint64_t objid, gen;
	if (o->po_npend == 0 || !pfs_obj_key(id, &objid, &gen))
		return;
	struct pfs_pobj **link = pfs_pend_link(o, objid);
	if (*link && (*link)->pp_gen == gen)
		pfs_pend_unlink(o, link);
}

static void pfs_prange_sort(struct pfs_prange *r, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		struct pfs_prange x = r[i];
		uint32_t j = i;
		for (; j > 0 && r[j - 1].pr_off > x.pr_off; j--)
			r[j] = r[j - 1];
		r[j] = x;
	}
}

/* Appends one record per POOL_FS_RANGE_REC_DATA bytes of the range, with their current bytes
 * (rule F10). 0; -ENOENT: the object is gone or is no regular file; or the error. */
static int pfs_pend_log_range(struct pfs_owner *o, const struct fs_obj_id *id,
                              const struct pfs_prange *r, uint64_t *lsn_out)
{
	struct pool *p = o->po_pool;
	for (uint64_t pos = r->pr_off; pos < r->pr_end;) {
		uint32_t n = (uint32_t)SH_MIN(r->pr_end - pos, (uint64_t)POOL_FS_RANGE_REC_DATA);
		size_t need = zpl_record_range_bytes(n), len = 0;
		if (o->po_rec_cap < need) {
			size_t cap = zpl_record_range_bytes(POOL_FS_RANGE_REC_DATA);
			uint8_t *buf = mem_alloc(cap);
			if (!buf)
				return -ENOMEM;
			mem_free(o->po_rec);
			o->po_rec = buf;
			o->po_rec_cap = cap;
		}
		struct blk_ptr missing;
		int rc = zpl_record_encode_range(o->po_zpl, id, pos, n, o->po_rec, o->po_rec_cap,
		                                 &len, &missing);
		if (rc == -ESTALE || rc == -SH_EBADHANDLE || rc == -EINVAL)
			return -ENOENT;
		if (rc != 0)
			return rc; /* -SH_ENEEDBLOCK included: the txg carries the range instead */
		if (len == 0)
			return 0; /* the rest lies beyond the end of the file */
		uint64_t lsn;
		rc = pool_log_append(p, o->po_ds, POOL_FS_REC_ZPL, o->po_rec, (uint32_t)len, &lsn);
		if (rc != 0)
			return rc;
		*lsn_out = lsn;
		pos += n;
	}
	return 0;
}

/* Logs id's pending writes (rules F8-F10), for a COMMIT of id (commit) or before a logged change
 * of id. Returns 0 when every pending write of id is in the log now (*lsn_out: the last record
 * appended; unchanged when none was needed); POOL_FS_USE_TXG (commit only) when a txg must carry
 * them instead; -EIO when the log refused a record (commit only). Before a change, whatever
 * cannot be logged becomes a loss of the object (F9) and 0 is returned. */
static int pfs_pend_flush(struct pfs_owner *o, const struct fs_obj_id *id, bool commit,
                          uint64_t *lsn_out)
{
	uint64_t objid, gen;
	if (!pfs_obj_key(id, &objid, &gen))
		return 0;
	if (o->po_npend == 0 && o->po_pend_lost_txg == 0)
		return 0;
	uint64_t synced = pool_synced_txg(o->po_pool);
	if (o->po_pend_lost_txg <= synced)
		o->po_pend_lost_txg = 0;
	if (commit && o->po_pend_lost_txg != 0)
		return POOL_FS_USE_TXG;
	struct pfs_pobj **link = pfs_pend_link(o, objid);
	struct pfs_pobj *pp = *link;
	if (!pp || pp->pp_gen != gen)
		return 0; /* nothing pending (an entry of another generation is not id's) */
	if (pfs_pobj_prune(pp, synced)) {
		pfs_pend_unlink(o, link);
		return 0;
	}
	if (pp->pp_lost_txg != 0 || pp->pp_bytes > POOL_FS_COMMIT_LOG_MAX_BYTES) {
		if (commit)
			return POOL_FS_USE_TXG;
		pfs_pobj_lose(pp);
		return 0;
	}
	pfs_prange_sort(pp->pp_ranges, pp->pp_nranges);
	uint32_t done = 0;
	int rc = 0;
	while (done < pp->pp_nranges) {
		rc = pfs_pend_log_range(o, id, &pp->pp_ranges[done], lsn_out);
		if (rc != 0)
			break;
		done++;
	}
	if (rc == 0 || rc == -ENOENT) {
		/* All logged, or the object is gone (removed in an earlier logged change). */
		pfs_pend_unlink(o, link);
		return 0;
	}
	/* Keep what is not logged yet (logging it again later is harmless: rule F10). */
	memmove(pp->pp_ranges, pp->pp_ranges + done,
	        (pp->pp_nranges - done) * sizeof(pp->pp_ranges[0]));
	pp->pp_nranges -= done;
	pfs_pobj_recount(pp);
	if (commit)
		return rc == -EIO ? -EIO : POOL_FS_USE_TXG;
	pfs_pobj_lose(pp);
	return 0;
}

/* Before a change that will be logged: logs the pending writes of the objects it changes, so
 * that their records come before the change's own (rule F8). REMOVE and RENAME name their
 * objects by name: those are looked up (only when anything is pending). *gone_out gets the
 * object the change removes if it succeeds (its pending writes need no record: F11), else
 * foi_len 0. Returns 0 or -SH_ENEEDBLOCK (*missing). */
static int pfs_pend_before_change(struct pfs_owner *o, const struct fs_req *req,
                                  struct fs_obj_id *gone_out, struct blk_ptr *missing)
{
	gone_out->foi_len = 0;
	if (o->po_npend == 0)
		return 0;
	uint64_t lsn = 0;
	const struct fs_obj_id *dir = &req->fr_obj;
	const char *names[2] = {NULL, NULL};
	bool may_go[2] = {false, false};
	switch (req->fr_op) {
	case FS_OP_WRITE: /* stable ones only: an UNSTABLE one adds to the pending writes */
	case FS_OP_SETATTR:
	case FS_OP_LINK:
		if (req->fr_op != FS_OP_WRITE || req->u.write.wr_stable != FS_UNSTABLE)
			(void)pfs_pend_flush(o, &req->fr_obj, false, &lsn);
		return 0;
	case FS_OP_CREATE:
		if (req->u.create.cr_mode != FS_CREATE_UNCHECKED)
			return 0;
		/* an existing file of that name gets the create's attributes */
		names[0] = req->u.create.cr_name;
		break;
	case FS_OP_REMOVE:
		names[0] = req->u.remove.rm_name;
		may_go[0] = true;
		break;
	case FS_OP_RENAME:
		names[0] = req->u.rename.rn_from_name;
		names[1] = req->u.rename.rn_to_name;
		may_go[1] = true;
		break;
	default: return 0;
	}
	for (int i = 0; i < 2; i++) {
		if (!names[i])
			continue;
		struct fs_obj_id id;
		enum fs_type type;
		uint32_t nlink;
		int rc = zpl_lookup_name(o->po_zpl, i == 0 ? dir : &req->u.rename.rn_to_dir,
		                         names[i], &id, &type, &nlink, missing);
		if (rc == -SH_ENEEDBLOCK)
			return rc;
		/* Not found: the change fails, or changes no file with pending writes. */
		if (rc != 0 || type != FS_REG)
			continue;
		if (may_go[i] && nlink == 1)
			*gone_out = id;
		else
			(void)pfs_pend_flush(o, &id, false, &lsn);
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Indirect writes (theory: "Indirect writes") */

/* Frees an indirect write that holds no space (never allocated, freed, or handed over). */
static void pfs_ind_free(struct pfs_ind *pi)
{
	if (!pi)
		return;
	for (unsigned i = 0; i < pi->pi_nprepared; i++)
		blk_prepared_fini(&pi->pi_preps[i]);
	mem_free(pi->pi_bps);
	mem_free(pi->pi_adopted);
	mem_free(pi->pi_preps);
	mem_free(pi->pi_flushes);
	mem_free(pi);
}

/* Engine thread: the blocks are written and flushed (or failed): resume the request. */
static void pfs_ind_io_done(struct pool_iwrite *iw, int status)
{
	struct pfs_ind *pi = SH_CONTAINER_OF(iw, struct pfs_ind, pi_iw);
	for (unsigned i = 0; i < pi->pi_nprepared; i++)
		blk_prepared_fini(&pi->pi_preps[i]);
	pi->pi_nprepared = 0;
	atomic_store(&pi->pi_io_status, status);
	pfs_resume(pi->pi_ctx);
}

/* Before the lock: the blocks of a large stable WRITE, prepared (compressed, checksummed) from
 * its data in pieces of the dataset's record size. NULL: no memory (the write goes the other
 * way). */
static struct pfs_ind *pfs_ind_prepare(struct pool_fs *pf, const struct fs_req *req)
{
	uint32_t piece = pool_ds_record_bytes(pf->pf_ds);
	uint32_t len = req->u.write.wr_len;
	unsigned n = (unsigned)((len + (uint64_t)piece - 1) / piece);
	if (piece == 0 || n == 0 || n > ZPL_REC_BLOCKS_MAX)
		return NULL;
	struct pfs_ind *pi = mem_zalloc(sizeof(*pi));
	if (!pi)
		return NULL;
	pi->pi_nblocks = n;
	pi->pi_bps = mem_zalloc(n * sizeof(*pi->pi_bps));
	pi->pi_adopted = mem_zalloc(n * sizeof(*pi->pi_adopted));
	pi->pi_preps = mem_zalloc(n * sizeof(*pi->pi_preps));
	pi->pi_flushes = mem_zalloc(SH_MIN(n, POOL_MAX_TOPS) * sizeof(*pi->pi_flushes));
	if (!pi->pi_bps || !pi->pi_adopted || !pi->pi_preps || !pi->pi_flushes) {
		pfs_ind_free(pi);
		return NULL;
	}
	enum blk_compress comp = pool_ds_compress(pf->pf_ds);
	const uint8_t *data = req->u.write.wr_data;
	for (unsigned i = 0; i < n; i++) {
		uint32_t at = i * piece, m = SH_MIN(piece, len - at);
		if (blk_prepare(data + at, m, comp, &pi->pi_preps[i]) != 0) {
			pfs_ind_free(pi);
			return NULL;
		}
		pi->pi_nprepared++;
	}
	return pi;
}

/* Under the pool lock: allocates pi's blocks and puts it on the owner's list (LIVE). 0, or the
 * allocator's error (nothing allocated then). */
static int pfs_ind_alloc_locked(struct pfs_owner *o, struct pfs_ind *pi, struct pfs_ctx *c)
{
	struct pool *p = o->po_pool;
	uint64_t txg = pool_open_txg(p);
	for (unsigned i = 0; i < pi->pi_nblocks; i++) {
		int rc = pool_iblock_alloc(p, &pi->pi_preps[i], txg, &pi->pi_bps[i]);
		if (rc != 0) {
			while (i > 0)
				pool_iblock_unalloc(p, &pi->pi_bps[--i]);
			return rc;
		}
	}
	pi->pi_state = PFS_IND_LIVE;
	pi->pi_ctx = c;
	pi->pi_iw = (struct pool_iwrite){
	    .iw_nblocks = pi->pi_nblocks,
	    .iw_bps = pi->pi_bps,
	    .iw_preps = pi->pi_preps,
	    .iw_flushes = pi->pi_flushes,
	    .iw_done = pfs_ind_io_done,
	};
	pi->pi_next = o->po_inds;
	o->po_inds = pi;
	return 0;
}

static void pfs_ind_unlink(struct pfs_owner *o, struct pfs_ind *pi)
{
	struct pfs_ind **link = &o->po_inds;
	while (*link != pi)
		link = &(*link)->pi_next;
	*link = pi->pi_next;
}

static void pfs_ind_free_blocks(struct pfs_owner *o, struct pfs_ind *pi)
{
	for (unsigned i = 0; i < pi->pi_nblocks; i++) {
		if (!pi->pi_adopted[i])
			pool_iblock_free(o->po_pool, &pi->pi_bps[i]);
	}
}

/* zpl_sync's ze_adopt_block, in do_sync under the pool lock: bp is one of a LOGGED indirect
 * write's blocks, which a file's dirty buffer holds byte for byte (zpl_adopt): the txg takes it
 * as that file's block (rule F13) instead of writing the data again. */
static int pfs_env_adopt(void *ctx, const struct blk_ptr *bp, const void *data)
{
	struct pfs_owner *o = ctx;
	for (struct pfs_ind *pi = o->po_inds; pi; pi = pi->pi_next) {
		if (pi->pi_state != PFS_IND_LOGGED)
			continue;
		for (unsigned i = 0; i < pi->pi_nblocks; i++) {
			const struct blk_ptr *b = &pi->pi_bps[i];
			if (!blk_ptr_same_block(b, bp) || pi->pi_adopted[i])
				continue;
			if (pool_sync_adopt(o->po_pool, b, data) != 0)
				return -EINVAL;
			pi->pi_adopted[i] = true;
			atomic_fetch_add(&o->po_adopted, 1);
			return 0;
		}
	}
	return -ENOENT; /* freed already (an earlier sync): written as usual */
}

/* Under the pool lock: the request lets go of its indirect write without logging it (failed, or
 * falling back): its blocks are freed unless a sync freed them already. */
static void pfs_ind_drop_locked(struct pfs_owner *o, struct pfs_ctx *c)
{
	struct pfs_ind *pi = c->pc_ind;
	if (!pi)
		return;
	c->pc_ind = NULL;
	if (pi->pi_state == PFS_IND_LIVE)
		pfs_ind_free_blocks(o, pi);
	pfs_ind_unlink(o, pi);
	pfs_ind_free(pi);
}

/* In do_sync of txg, under the pool lock (rule F12): blocks whose record is tagged txg or less
 * are freed in txg; blocks no record names yet are freed in txg too (their write still counts
 * as in flight until it lands: C1 of pool_claim.c), and their request falls back when it
 * resumes. */
static void pfs_ind_sync(struct pfs_owner *o, uint64_t txg)
{
	struct pfs_ind **link = &o->po_inds;
	while (*link) {
		struct pfs_ind *pi = *link;
		if (pi->pi_state == PFS_IND_LIVE) {
			pfs_ind_free_blocks(o, pi);
			pi->pi_state = PFS_IND_FREED;
		}
		bool done = (pi->pi_state == PFS_IND_LOGGED && pi->pi_txg <= txg) ||
		            (pi->pi_state == PFS_IND_FREED && atomic_load(&pi->pi_abandoned));
		if (!done) {
			link = &pi->pi_next;
			continue;
		}
		if (pi->pi_state == PFS_IND_LOGGED)
			pfs_ind_free_blocks(o, pi);
		*link = pi->pi_next;
		pfs_ind_free(pi);
	}
}

static int pfs_do_sync(void *owner, uint64_t txg)
{
	struct pfs_owner *o = owner;
	/* Syncs do not overlap: every txg before this one is durable now (rule F8). */
	pfs_pend_prune_all(o, pool_synced_txg(o->po_pool));
	/* zpl_sync first: the blocks it adopts (F13) are not freed by pfs_ind_sync. */
	int rc = o->po_zpl ? zpl_sync(o->po_zpl, NULL) : 0;
	pfs_ind_sync(o, txg);
	return rc;
}

/* Phase 0 of a sync (rule F14): batches of dirty buffers picked under the pool lock, sealed
 * without it, attached under it again. */
#define POOL_FS_SEAL_BATCH 32u

static void pfs_do_seal(void *owner, uint64_t *budget)
{
	struct pfs_owner *o = owner;
	struct pool *p = o->po_pool;
	struct zpl_seal batch[POOL_FS_SEAL_BATCH];
	uint64_t cursor = 0;
	while (*budget > 0) {
		pool_lock(p);
		struct zpl *z = o->po_zpl;
		enum blk_compress c = pool_ds_compress(o->po_ds);
		size_t n = z ? zpl_seal_pick(z, &cursor, batch, POOL_FS_SEAL_BATCH, *budget) : 0;
		pool_unlock(p);
		if (n == 0)
			return;
		for (size_t i = 0; i < n; i++) {
			struct pool_sealed *sealed = NULL;
			if (pool_seal_block(p, batch[i].zs_data, batch[i].zs_size, c, &sealed) == 0)
				batch[i].zs_sealed = sealed;
			uint64_t cost = batch[i].zs_size; /* at most, once compressed */
			*budget = *budget > cost ? *budget - cost : 0;
		}
		pool_lock(p);
		if (o->po_zpl == z)
			zpl_seal_attach(z, batch, n);
		else
			zpl_seal_release(batch, n);
		pool_unlock(p);
		for (size_t i = 0; i < n; i++)
			pool_sealed_free(p, batch[i].zs_sealed);
	}
}

static void pfs_do_stats(void *owner, struct pool_status_ds *out)
{
	struct pfs_owner *o = owner;
	out->sd_adopted_blocks = atomic_load(&o->po_adopted);
	if (!o->po_zpl)
		return;
	struct zpl_cache_stats cs;
	zpl_cache_stats(o->po_zpl, &cs);
	out->sd_dirty_bytes = zpl_dirty_bytes(o->po_zpl);
	out->sd_icache_entries = cs.zcs_entries;
	out->sd_icache_hits = cs.zcs_hits;
	out->sd_icache_misses = cs.zcs_misses;
	zpl_reap_stats(o->po_zpl, &out->sd_reap_files, &out->sd_reap_blocks);
	out->sd_freeing = atomic_load(&o->po_reapers) != 0;
}

static uint64_t pfs_do_dirty_bytes(void *owner)
{
	struct pfs_owner *o = owner;
	return o->po_zpl ? zpl_dirty_bytes(o->po_zpl) : 0;
}

static int pfs_do_replay(void *owner, uint16_t type, const void *rec, uint32_t len, struct blk_ptr *missing_out)
{
	struct pfs_owner *o = owner;
	if (type != POOL_FS_REC_ZPL)
		return -EINVAL;
	/* pool_fs_open makes the format durable before any record exists; formatting here only
	 * covers a log written by an older opener that did not. */
	int rc = pfs_owner_load_locked(o, true, missing_out, NULL);
	if (rc != 0)
		return rc;
	return zpl_replay(o->po_zpl, rec, len, missing_out);
}

static int pfs_do_replay_blocks(void *owner, uint16_t type, const void *rec, uint32_t len,
                                pool_bp_fn fn, void *arg)
{
	(void)owner;
	if (type != POOL_FS_REC_ZPL)
		return -EINVAL;
	return zpl_record_visit_blocks(rec, len, fn, arg);
}

/* The blocks of the indirect writes in progress, named with the dataset's meta entry (rule F12):
 * written (pool_check waits for their writes) and allocated, but in no tree entry. */
static int pfs_ind_visit(struct pfs_owner *o, pool_bp_fn fn, void *arg)
{
	for (struct pfs_ind *pi = o->po_inds; pi; pi = pi->pi_next) {
		if (pi->pi_state == PFS_IND_FREED || atomic_load(&pi->pi_iw.iw_status) != 0)
			continue; /* freed, or a failed write (its request frees it) */
		for (unsigned i = 0; i < pi->pi_nblocks; i++) {
			if (pi->pi_adopted[i])
				continue; /* an extent names it */
			int rc = fn(arg, &pi->pi_bps[i]);
			if (rc != 0)
				return rc;
		}
	}
	return 0;
}

bool pfs_entry_is_extent(const void *key, uint32_t klen)
{
	const uint8_t *k = key;
	return klen >= 9 && k[8] == POOL_FS_KIND_EXTENT;
}

int pfs_entry_block(const void *key, uint32_t klen, const void *val, uint32_t vlen,
                    struct blk_ptr *bp_out)
{
	if (!pfs_entry_is_extent(key, klen))
		return PFS_ENTRY_NONE;
	if (klen != POOL_FS_LONG_KEY || vlen != BLK_PTR_DISK_BYTES)
		return -EIO;
	static const uint8_t zero[BLK_PTR_DISK_BYTES];
	if (memcmp(val, zero, BLK_PTR_DISK_BYTES) == 0)
		return PFS_ENTRY_NONE; /* being written: its block does not exist yet */
	if (blk_ptr_decode(val, bp_out) != 0)
		return -EIO;
	return blk_ptr_is_hole(bp_out) ? PFS_ENTRY_NONE : PFS_ENTRY_BLOCK;
}

static int pfs_do_visit_blocks(void *owner, const void *key, uint32_t klen, const void *val, uint32_t vlen,
			       pool_bp_fn fn, void *arg)
{
	static const uint8_t meta_key[POOL_FS_META_KEY] = {0};
	if (klen == POOL_FS_META_KEY && memcmp(key, meta_key, klen) == 0)
		return pfs_ind_visit(owner, fn, arg);
	struct blk_ptr bp;
	int kind = pfs_entry_block(key, klen, val, vlen, &bp);
	if (kind < 0)
		return kind;
	return kind == PFS_ENTRY_BLOCK ? fn(arg, &bp) : 0;
}

static void pfs_owner_free(struct pfs_owner *o)
{
	if (o->po_pend) {
		for (uint32_t b = 0; b < POOL_FS_PEND_BUCKETS; b++)
			while (o->po_pend[b])
				pfs_pend_unlink(o, &o->po_pend[b]);
	}
	while (o->po_pend_free) {
		struct pfs_pobj *pp = o->po_pend_free;
		o->po_pend_free = pp->pp_next;
		mem_free(pp);
	}
	mem_free(o->po_pend);
	mem_free(o->po_rec);
	/* Detached after every request ended and every write landed: what is left holds space
	 * only in memory, which goes with the pool's (or is freed by the sync before eviction). */
	while (o->po_inds) {
		struct pfs_ind *pi = o->po_inds;
		o->po_inds = pi->pi_next;
		pfs_ind_free(pi);
	}
	mem_free(o);
}

/* A rollback (pool_snap.c, S10), under the pool lock in phase 1 right after this owner's
 * do_sync: the zpl goes with every cached inode and directory entry of the old tree (it holds
 * no dirty buffer: do_sync just wrote them), and so do the pending writes (their txgs' changes
 * are the ones rolled back). The next request opens the zpl on the new tree (pfs_run). Indirect
 * writes stay: a LOGGED one was freed by this do_sync (its record is tagged with this txg or an
 * earlier one); a LIVE one's request runs on the new tree when its blocks land. */
static void pfs_do_rollback(void *owner)
{
	struct pfs_owner *o = owner;
	zpl_close(o->po_zpl);
	o->po_zpl = NULL;
	o->po_reap_seen = 0;
	o->po_pend_pruned = 0;
	pfs_pend_prune_all(o, UINT64_MAX);
}

static void pfs_do_detach(void *owner)
{
	struct pfs_owner *o = owner;
	zpl_close(o->po_zpl);
	pfs_owner_free(o);
}

static const struct pool_ds_owner pfs_owner_ops = {
	.do_sync = pfs_do_sync,
	.do_dirty_bytes = pfs_do_dirty_bytes,
	.do_replay = pfs_do_replay,
	.do_visit_blocks = pfs_do_visit_blocks,
	.do_detach = pfs_do_detach,
	.do_replay_blocks = pfs_do_replay_blocks,
	.do_seal = pfs_do_seal,
	.do_stats = pfs_do_stats,
	.do_rollback = pfs_do_rollback,
};

/* The inode cache of each dataset takes 1/256 of the pool's memory limit (--arc-max): 6 MiB of a
 * 2 GiB ARC, 32,768 inodes; 768 KiB and 4,096 inodes of the default 256 MiB. It is one of the
 * owners' own structures of pool.c's memory model, beside the limit. */
static uint32_t pfs_icache_entries(const struct pool *p)
{
	uint64_t n = p->p_opts.po_arc_max_bytes / 256 / ZPL_ICACHE_ENTRY_BYTES;
	return n > ZPL_ICACHE_MAX_ENTRIES ? ZPL_ICACHE_MAX_ENTRIES : (uint32_t)n;
}

/* A new owner of ds, not attached, its zpl not opened; NULL without memory. */
static struct pfs_owner *pfs_owner_new(struct pool_ds *ds)
{
	struct pfs_owner *o = mem_zalloc(sizeof(*o));
	if (!o)
		return NULL;
	o->po_pend = mem_zalloc(POOL_FS_PEND_BUCKETS * sizeof(*o->po_pend));
	if (!o->po_pend) {
		mem_free(o);
		return NULL;
	}
	o->po_magic = POOL_FS_OWNER_MAGIC;
	o->po_pool = pool_ds_pool(ds);
	o->po_ds = ds;
	o->po_env = (struct zpl_env){
		.ze_ctx = o,
		.ze_get_block = pfs_env_get,
		.ze_release = pfs_env_release,
		.ze_write_block = pfs_env_write,
		.ze_free_block = pfs_env_free,
		.ze_space = pfs_env_space,
		.ze_now = pfs_env_now,
		.ze_fsid = 0,
		.ze_icache_entries = pfs_icache_entries(o->po_pool),
		.ze_adopt_block = pfs_env_adopt,
		.ze_write_sealed = pfs_env_write_sealed,
		.ze_drop_seal = pfs_env_drop_seal,
		.ze_txg = pfs_env_txg,
	};
	return o;
}

static int pfs_check_load(void *arg, const struct blk_ptr *bp)
{
	return pool_block_read_sync(arg, bp);
}

int pfs_tree_check(struct pool_ds *ds, char *report, size_t report_bytes)
{
	struct pfs_owner *o = pfs_owner_new(ds);
	if (!o)
		return -ENOMEM;
	int rc = pfs_owner_load_sync(o, false, NULL);
	if (rc == -ENOENT)
		snprintf(report, report_bytes, "it holds no file system (no root)");
	else if (rc != 0)
		snprintf(report, report_bytes, "its file system does not open: %s", sh_strerror(rc));
	if (rc == 0)
		rc = zpl_check(o->po_zpl, pfs_check_load, o->po_pool, NULL, 0, report, report_bytes);
	if (o->po_zpl)
		zpl_close(o->po_zpl);
	pfs_owner_free(o);
	return rc == 0 ? 0 : rc == -ENOMEM ? rc : -EIO;
}

int pool_fs_attach(void *arg, struct pool_ds *ds)
{
	(void)arg;
	struct pfs_owner *o = pfs_owner_new(ds);
	if (!o)
		return -ENOMEM;
	/* Opened now when formatted (the reads may block: po_attach runs where they may). An
	 * unformatted dataset keeps po_zpl NULL: checking or destroying it must not format it. */
	int rc = pfs_owner_load_sync(o, false, NULL);
	/* What a receive left that is no file system (a stream refused by its check, a crash in
	 * the middle) is attached without a zpl all the same: its undo (a destroy, or a rollback
	 * that frees it) only needs the blocks its entries name, which do_visit_blocks reads
	 * without one. */
	bool receiving = (__atomic_load_n(&ds->ds_flags, __ATOMIC_RELAXED) & POOL_DS_F_RECEIVING) != 0;
	if (rc != 0 && rc != -ENOENT && !(receiving && rc == -EIO)) {
		pfs_owner_free(o);
		return rc == -ENOMEM ? rc : -EIO;
	}
	rc = pool_ds_set_owner(ds, &pfs_owner_ops, o);
	if (rc != 0) {
		pfs_do_detach(o);
		return rc == -EBUSY ? 0 : rc;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Contexts and helper queues */

static void pfs_task_fn(struct loop_task *task);
static void pfs_load_cb(void *arg, int status);
static void pfs_throttle_cb(struct pool_waiter *w, int status);
static void pfs_commit_cb(struct ilog_waiter *w, int status);

/* A context for req, from the free list or new. NULL: out of memory. */
static void pfs_ctx_init(struct pool_fs *pf, struct pfs_ctx *c, struct fs_req *req);

static struct pfs_ctx *pfs_ctx_get(struct pool_fs *pf, struct fs_req *req)
{
	pthread_mutex_lock(&pf->pf_lock);
	struct pfs_ctx *c = pf->pf_free;
	if (c) {
		pf->pf_free = c->pc_next;
		pf->pf_nfree--;
	}
	pthread_mutex_unlock(&pf->pf_lock);
	if (!c) {
		c = mem_zalloc(sizeof(*c));
		if (!c)
			return NULL;
		atomic_fetch_add(&pf->pf_ctx_allocs, 1);
	}
	pfs_ctx_init(pf, c, req);
	return c;
}

static void pfs_ctx_init(struct pool_fs *pf, struct pfs_ctx *c, struct fs_req *req)
{
	c->pc_fs = pf;
	c->pc_req = req;
	c->pc_next = NULL;
	c->pc_fresh = NULL;
	c->pc_ind = NULL;
	c->pc_ind_tried = false;
	c->pc_task = (struct loop_task){.lt_fn = pfs_task_fn};
	c->pc_pw = (struct pool_waiter){.pw_done = pfs_throttle_cb, .pw_arg = c};
	c->pc_iw = (struct ilog_waiter){.iw_done = pfs_commit_cb, .iw_arg = c};
	c->pc_reap = false;
	c->pc_space_waits = 0;
}

/* Holds bp, just loaded for c (rule F6). 0 (also when the block is gone again: nothing held),
 * -EFBIG when c's held blocks would pass --arc-max, -ENOMEM. Any thread. */
static int pfs_pin(struct pfs_ctx *c, const struct blk_ptr *bp)
{
	struct pool *p = c->pc_fs->pf_pool;
	const void *image;
	void *hold;
	if (pool_block_get(p, bp, &image, &hold) != 0)
		return 0;
	uint64_t bytes = bp->bp_lsize;
	int rc = 0;
	if (c->pc_pinned_bytes + bytes > p->p_opts.po_arc_max_bytes) {
		rc = -EFBIG;
	} else if (c->pc_npins < POOL_FS_PINS_INLINE) {
		c->pc_pins[c->pc_npins] = hold;
	} else {
		unsigned more = c->pc_npins - POOL_FS_PINS_INLINE;
		if (more == c->pc_pins_more_cap) {
			unsigned cap = c->pc_pins_more_cap ? 2 * c->pc_pins_more_cap : 64;
			void **grown = mem_realloc(c->pc_pins_more, cap * sizeof(*grown));
			if (!grown) {
				rc = -ENOMEM;
			} else {
				c->pc_pins_more = grown;
				c->pc_pins_more_cap = cap;
			}
		}
		if (rc == 0)
			c->pc_pins_more[more] = hold;
	}
	if (rc != 0) {
		pool_block_release(p, hold);
		if (rc == -EFBIG)
			log_ratelimited(LOG_WARN,
			                "pool %s: a request needs more blocks at once than --arc-max "
			                "(%" PRIu64 " MiB) holds; it fails with an I/O error",
			                p->p_name, p->p_opts.po_arc_max_bytes >> 20);
		return rc;
	}
	c->pc_npins++;
	c->pc_pinned_bytes += bytes;
	return 0;
}

static void pfs_unpin(struct pfs_ctx *c)
{
	struct pool *p = c->pc_fs->pf_pool;
	for (unsigned i = 0; i < c->pc_npins; i++)
		pool_block_release(p, i < POOL_FS_PINS_INLINE ? c->pc_pins[i]
		                                              : c->pc_pins_more[i - POOL_FS_PINS_INLINE]);
	c->pc_npins = 0;
	c->pc_pinned_bytes = 0;
	mem_free(c->pc_pins_more);
	c->pc_pins_more = NULL;
	c->pc_pins_more_cap = 0;
}

static void pfs_ctx_put(struct pool_fs *pf, struct pfs_ctx *c)
{
	pfs_unpin(c);
	pfs_ind_free(c->pc_fresh);
	c->pc_fresh = NULL;
	if (c->pc_ind) {
		/* Ended where the pool lock may not be taken: the next sync frees it (F12). */
		atomic_store(&c->pc_ind->pi_abandoned, true);
		c->pc_ind = NULL;
	}
	if (c->pc_rec_cap > POOL_FS_REC_KEEP_BYTES) {
		mem_free(c->pc_rec);
		c->pc_rec = NULL;
		c->pc_rec_cap = 0;
	}
	if (c->pc_reap)
		return; /* pf_reap_ctx stays the reaper's */
	pthread_mutex_lock(&pf->pf_lock);
	if (pf->pf_nfree < POOL_FS_CTX_FREE_MAX) {
		c->pc_next = pf->pf_free;
		pf->pf_free = c;
		pf->pf_nfree++;
		c = NULL;
	}
	pthread_mutex_unlock(&pf->pf_lock);
	if (c) {
		mem_free(c->pc_rec);
		mem_free(c);
	}
}

/* Ends a request (rule F5: the context goes back before the completion). */
static void pfs_finish(struct pool_fs *pf, struct fs_req *req, struct pfs_ctx *c)
{
	if (c)
		pfs_ctx_put(pf, c);
	fs_req_complete(req);
}

static void pfs_fail(struct pool_fs *pf, struct fs_req *req, struct pfs_ctx *c, int status)
{
	req->fr_status = status;
	pfs_finish(pf, req, c);
}

static void pfs_enqueue(struct pool_fs *pf, struct pfs_ctx **head, struct pfs_ctx **tail, pthread_cond_t *cv,
			struct pfs_ctx *c)
{
	pthread_mutex_lock(&pf->pf_lock);
	c->pc_next = NULL;
	if (*tail)
		(*tail)->pc_next = c;
	else
		*head = c;
	*tail = c;
	pthread_cond_signal(cv);
	pthread_mutex_unlock(&pf->pf_lock);
}

/* Starts a request over from any thread (rule F3). */
static void pfs_resume(struct pfs_ctx *c)
{
	struct pool_fs *pf = c->pc_fs;
	if (c->pc_req->fr_loop)
		loop_post(c->pc_req->fr_loop, &c->pc_task);
	else
		pfs_enqueue(pf, &pf->pf_runq, &pf->pf_runq_tail, &pf->pf_run_cv, c);
}

static void pfs_wait_txg(struct pool_fs *pf, struct pfs_ctx *c)
{
	pfs_enqueue(pf, &pf->pf_commitq, &pf->pf_commitq_tail, &pf->pf_commit_cv, c);
}

/* ---- Freeing removed files (zpl_reap.c) ----
 * The last link of a large file goes at once and the file waits in the dataset's queue; this
 * fs's reaper frees it step by step. A step is zpl_reap run like a request through pfs_run (the
 * throttle, restarts on misses with the blocks it loaded held: rule F6, one step's extent leaves
 * being few) on the runner thread, without a log record: the txg carries it. It is started by a
 * change whose commit queued a file (pfs_run sees zpl_reap_queued move) and once at open (a
 * replayed REMOVE may have queued one), runs steps while they change something, and is waited
 * for by pfs_destroy. Steps of several opens of one dataset serialize on the pool lock. */
static void pfs_reap_done(struct fs_req *req);

/* pf_reap_busy is set: queues the next step on the runner. Any thread; may run under the pool
 * lock (pf_lock is a leaf, nothing allocates). */
static void pfs_reap_submit(struct pool_fs *pf)
{
	struct fs_req *req = &pf->pf_reap_req;
	memset(req, 0, sizeof(*req));
	req->fr_op = FS_OP_REMOVE; /* a change that needs no space and no record */
	req->fr_fs = &pf->pf_fs;
	req->fr_done = pfs_reap_done;
	pfs_ctx_init(pf, pf->pf_reap_ctx, req);
	pf->pf_reap_ctx->pc_reap = true;
	pfs_enqueue(pf, &pf->pf_runq, &pf->pf_runq_tail, &pf->pf_run_cv, pf->pf_reap_ctx);
}

static void pfs_reap_kick(struct pool_fs *pf)
{
	pthread_mutex_lock(&pf->pf_lock);
	bool start = !pf->pf_reap_busy && !pf->pf_reap_stopping;
	if (start) {
		pf->pf_reap_busy = true;
		atomic_fetch_add(&pf->pf_owner->po_reapers, 1);
	} else {
		pf->pf_reap_again = true;
	}
	pthread_mutex_unlock(&pf->pf_lock);
	if (start)
		pfs_reap_submit(pf);
}

static void pfs_reap_done(struct fs_req *req)
{
	struct pool_fs *pf = SH_CONTAINER_OF(req, struct pool_fs, pf_reap_req);
	atomic_fetch_add(&pf->pf_reap_steps, 1);
	if (req->fr_status != 0)
		log_ratelimited(LOG_WARN, "pool %s: freeing removed files: %s", pf->pf_pool->p_name,
		                sh_strerror(req->fr_status));
	pthread_mutex_lock(&pf->pf_lock);
	bool again = !pf->pf_reap_stopping &&
	             ((req->fr_status == 0 && pf->pf_reap_more) || pf->pf_reap_again);
	pf->pf_reap_again = false;
	if (!again) {
		pf->pf_reap_busy = false;
		atomic_fetch_sub(&pf->pf_owner->po_reapers, 1);
		pthread_cond_broadcast(&pf->pf_reap_cv);
	}
	pthread_mutex_unlock(&pf->pf_lock);
	if (again)
		pfs_reap_submit(pf);
}

/* One step, under the pool lock: zpl_execute's contract (fr_status, or -SH_ENEEDBLOCK). */
static int pfs_reap_run(struct pool_fs *pf, struct fs_req *req, struct blk_ptr *missing)
{
	struct pfs_owner *o = pf->pf_owner;
	pf->pf_reap_more = false;
	int rc = o->po_zpl ? zpl_reap(o->po_zpl, &pf->pf_reap_more, missing) : 0;
	if (rc == -SH_ENEEDBLOCK)
		return rc;
	req->fr_status = rc;
	return 0;
}

/* The last of c's loads is done: holds the missing block (the nodes ahead are only cached: the
 * restart that needs one that was evicted meanwhile misses it, loads it and holds it then) and
 * reports whether the request may go on. */
static bool pfs_loads_done(struct pfs_ctx *c)
{
	c->pc_nahead = 0;
	return !atomic_load(&c->pc_load_failed) && pfs_pin(c, &c->pc_missing) == 0;
}

/* One of c's loads ended; the last one resumes or fails the request. Engine thread. */
static void pfs_load_end(struct pfs_ctx *c)
{
	if (atomic_fetch_sub(&c->pc_loading, 1u) != 1u)
		return;
	if (pfs_loads_done(c))
		pfs_resume(c);
	else
		pfs_fail(c->pc_fs, c->pc_req, c, -EIO);
}

static void pfs_load_cb(void *arg, int status)
{
	struct pfs_ctx *c = arg;
	if (status != 0)
		atomic_store(&c->pc_load_failed, true);
	pfs_load_end(c);
}

/* A next node's load ended: a node that could not be read fails the scan when it needs it. */
static void pfs_next_load_cb(void *arg, int status)
{
	(void)status;
	pfs_load_end(arg);
}

/* Loads c->pc_missing and c's next nodes. 0: the last load's callback resumes or fails the
 * request; 1: all were in the cache and are held, run the request again now; -EIO. */
static int pfs_load_start(struct pool *p, struct pfs_ctx *c)
{
	atomic_store(&c->pc_load_failed, false);
	atomic_store(&c->pc_loading, 1u); /* this function's share, given up below */
	for (unsigned i = 0; i < c->pc_nahead; i++) {
		atomic_fetch_add(&c->pc_loading, 1u);
		if (pool_block_load(p, &c->pc_ahead[i], pfs_next_load_cb, c) != 0)
			atomic_fetch_sub(&c->pc_loading, 1u); /* cached, or refused: no callback */
	}
	atomic_fetch_add(&c->pc_loading, 1u);
	int rc = pool_block_load(p, &c->pc_missing, pfs_load_cb, c);
	if (rc != 0) {
		if (rc != POOL_LOADED)
			atomic_store(&c->pc_load_failed, true);
		atomic_fetch_sub(&c->pc_loading, 1u);
	}
	if (atomic_fetch_sub(&c->pc_loading, 1u) != 1u)
		return 0;
	return pfs_loads_done(c) ? 1 : -EIO;
}

static void pfs_throttle_cb(struct pool_waiter *w, int status)
{
	struct pfs_ctx *c = w->pw_arg;
	if (status != 0)
		pfs_fail(c->pc_fs, c->pc_req, c, -EIO);
	else
		pfs_resume(c);
}

static void pfs_commit_cb(struct ilog_waiter *w, int status)
{
	struct pfs_ctx *c = w->iw_arg;
	if (status != 0)
		c->pc_req->fr_status = -EIO;
	pfs_finish(c->pc_fs, c->pc_req, c);
}

/* ---------------------------------------------------------------------------------------------
 * The request path */

/* New space a change needs before it may start (0: none checked). */
static uint64_t pfs_space_need(const struct fs_req *req)
{
	switch (req->fr_op) {
	case FS_OP_WRITE:
		return (uint64_t)req->u.write.wr_len + POOL_FS_NODE_SLACK_BYTES;
	case FS_OP_CREATE:
	case FS_OP_MKDIR:
	case FS_OP_SYMLINK:
	case FS_OP_MKNOD:
		return POOL_FS_NODE_SLACK_BYTES;
	default:
		return 0;
	}
}

/* Under the pool lock, on a failure path: lets go of c's indirect write (F12), unlocks, fails. */
static void pfs_fail_locked(struct pool_fs *pf, struct fs_req *req, struct pfs_ctx *c, int status)
{
	if (c)
		pfs_ind_drop_locked(pf->pf_owner, c);
	pool_unlock(pf->pf_pool);
	pfs_fail(pf, req, c, status);
}

/* Makes sure c's record buffer holds bytes. 0 or -ENOMEM. */
static int pfs_rec_reserve(struct pfs_ctx *c, size_t bytes)
{
	if (c->pc_rec_cap >= bytes)
		return 0;
	uint8_t *buf = mem_alloc(bytes);
	if (!buf)
		return -ENOMEM;
	mem_free(c->pc_rec);
	c->pc_rec = buf;
	c->pc_rec_cap = bytes;
	return 0;
}

/* Under the pool lock, after a large stable WRITE succeeded: appends the record that names its
 * blocks (F12). 0 with *lsn_out; -EAGAIN when the blocks cannot be used (a sync freed them, their
 * write failed): the write goes the other way; or pool_log_append's error. c lets go of the
 * indirect write either way. */
static int pfs_ind_log_locked(struct pool_fs *pf, struct fs_req *req, struct pfs_ctx *c,
                              uint64_t *lsn_out)
{
	struct pfs_owner *o = pf->pf_owner;
	struct pfs_ind *pi = c->pc_ind;
	int rc = -EAGAIN;
	size_t len = 0;
	if (pi->pi_state == PFS_IND_LIVE && atomic_load(&pi->pi_io_status) == 0) {
		rc = zpl_record_encode_blocks(req, pi->pi_bps, pi->pi_nblocks, c->pc_rec,
		                              c->pc_rec_cap, &len);
		if (rc == 0)
			rc = pool_log_append(pf->pf_pool, pf->pf_ds, POOL_FS_REC_ZPL, c->pc_rec,
			                     (uint32_t)len, lsn_out);
		else
			rc = -EAGAIN;
	}
	if (rc != 0) {
		pfs_ind_drop_locked(o, c);
		return rc;
	}
	/* The record is tagged with the open txg: that txg's sync frees the blocks, or adopts
	 * those that are whole blocks of the file as the WRITE left them (F13). */
	pi->pi_state = PFS_IND_LOGGED;
	pi->pi_txg = pool_open_txg(pf->pf_pool);
	pi->pi_ctx = NULL;
	c->pc_ind = NULL;
	if (o->po_zpl) {
		uint32_t piece = pi->pi_bps[0].bp_lsize;
		const uint8_t *data = req->u.write.wr_data;
		for (unsigned i = 0; i < pi->pi_nblocks; i++)
			(void)zpl_adopt(o->po_zpl, &req->fr_obj,
			                req->u.write.wr_offset + (uint64_t)i * piece,
			                data + (size_t)i * piece, &pi->pi_bps[i]);
	}
	return 0;
}

/* After a run that missed (pool lock let go): the request waits for missing and the nahead
 * nodes after it (may be NULL when 0) to be cached, with its context (*cp, got here when it has
 * none). Returns true when they are all in already: run again now; false when the request went
 * to the last load's callback, which resumes or fails it, or failed here. */
static bool pfs_wait_blocks(struct pool_fs *pf, struct fs_req *req, struct pfs_ctx **cp,
                            const struct blk_ptr *missing, const struct blk_ptr *ahead,
                            size_t nahead)
{
	struct pfs_ctx *c = *cp;
	atomic_fetch_add(&pf->pf_restarts, 1);
	if (!c && !(c = pfs_ctx_get(pf, req))) {
		pfs_fail(pf, req, NULL, -ENOMEM);
		return false;
	}
	*cp = c;
	c->pc_missing = *missing;
	if (nahead > 0)
		memcpy(c->pc_ahead, ahead, nahead * sizeof(ahead[0]));
	c->pc_nahead = (unsigned)nahead;
	int rc = pfs_load_start(pf->pf_pool, c);
	if (rc == 1)
		return true;
	if (rc != 0)
		pfs_fail(pf, req, c, -EIO);
	return false;
}

static void pfs_run(struct pool_fs *pf, struct fs_req *req, struct pfs_ctx *c)
{
	struct pool *p = pf->pf_pool;
	enum fs_op op = req->fr_op;
	bool change = fs_op_changes(op);
	bool reap = c && c->pc_reap; /* a step of the reaper: a change with no record */
	bool stable = !reap && change &&
	              (op != FS_OP_WRITE || req->u.write.wr_stable != FS_UNSTABLE);
	size_t rec_bytes = stable ? zpl_record_bytes(req) : 0;
	bool oversize = rec_bytes > POOL_LOG_PAYLOAD_MAX;
	bool indirect = stable && op == FS_OP_WRITE &&
	                req->u.write.wr_len >= POOL_FS_INDIRECT_MIN_BYTES;
	struct pfs_owner *o = pf->pf_owner;

	/* Everything that can fail to allocate happens before the lock (rule F4). */
	if ((change || op == FS_OP_COMMIT) && !c && !(c = pfs_ctx_get(pf, req))) {
		pfs_fail(pf, req, NULL, -ENOMEM);
		return;
	}
	if (indirect && !c->pc_ind_tried && !c->pc_fresh && !c->pc_ind) {
		c->pc_fresh = pfs_ind_prepare(pf, req); /* NULL: the write goes the other way */
		if (!c->pc_fresh)
			c->pc_ind_tried = true;
	}
	size_t need = stable && !oversize ? rec_bytes : 0;
	if (c && (c->pc_fresh || c->pc_ind)) {
		unsigned n = c->pc_fresh ? c->pc_fresh->pi_nblocks : c->pc_ind->pi_nblocks;
		need = SH_MAX(need, zpl_record_blocks_bytes(n));
	}
	if (need > 0 && pfs_rec_reserve(c, need) != 0) {
		pfs_fail(pf, req, c, -ENOMEM); /* an indirect write is let go by pfs_ctx_put */
		return;
	}

	for (;;) {
		struct blk_ptr missing;
		pool_lock(p);
		if (!o->po_zpl) {
			/* A rollback let go of the zpl (pfs_do_rollback): open it on the new tree,
			 * formatting it when the snapshot was taken before the first open had (its
			 * root is the same object, generation 1; replay formats an empty tree too) */
			int rc = pfs_owner_load_locked(o, !pf->pf_read_only, &missing, NULL);
			if (rc == -SH_ENEEDBLOCK) {
				pool_unlock(p);
				if (pfs_wait_blocks(pf, req, &c, &missing, NULL, 0))
					continue;
				return;
			}
			if (rc != 0) {
				pfs_fail_locked(pf, req, c, -EIO);
				return;
			}
		}
		if (change) {
			int rc = pool_tx_throttle(p, &c->pc_pw);
			if (rc == POOL_THROTTLED) {
				pool_unlock(p);
				atomic_fetch_add(&pf->pf_throttled, 1);
				return; /* pfs_throttle_cb resumes or fails it */
			}
			if (rc != 0) {
				pfs_fail_locked(pf, req, c, -EIO);
				return;
			}
			uint64_t space = pfs_space_need(req);
			if (space != 0 && !pool_space_would_fit(p, space)) {
				/* What removes freed comes back with their txg: rather than
				 * refuse a write that FSSTAT says fits, wait for it (a few
				 * times at most, should others take the space first). */
				if (c->pc_space_waits < POOL_FS_SPACE_WAITS_MAX &&
				    pool_space_wait(p, space, &c->pc_pw) == POOL_THROTTLED) {
					c->pc_space_waits++;
					pool_unlock(p);
					return; /* pfs_throttle_cb resumes or fails it */
				}
				pfs_fail_locked(pf, req, c, -ENOSPC);
				return;
			}
			if (space != 0 && !pool_ds_quota_would_fit(o->po_ds, space)) {
				pfs_fail_locked(pf, req, c, -EDQUOT);
				return;
			}
		}
		if (c && c->pc_fresh) {
			/* F12: the blocks first; the change and its record once they are durable. */
			struct pfs_ind *pi = c->pc_fresh;
			c->pc_fresh = NULL;
			c->pc_ind_tried = true;
			if (pfs_ind_alloc_locked(o, pi, c) == 0) {
				c->pc_ind = pi;
				pool_unlock(p);
				pool_iblock_write(p, &pi->pi_iw);
				return; /* pfs_ind_io_done resumes it */
			}
			pfs_ind_free(pi); /* no space for them: the write goes the other way */
		}
		/* Pending writes of what a logged change changes go first (rule F8). */
		struct fs_obj_id gone;
		gone.foi_len = 0;
		int rc = change && stable ? pfs_pend_before_change(o, req, &gone, &missing) : 0;
		if (rc == 0)
			rc = reap ? pfs_reap_run(pf, req, &missing)
			          : zpl_execute(o->po_zpl, req, &missing);
		if (rc == 0 && change && !reap && zpl_reap_queued(o->po_zpl) != o->po_reap_seen) {
			o->po_reap_seen = zpl_reap_queued(o->po_zpl);
			pfs_reap_kick(pf);
		}
		if (rc == -SH_EPARTIAL) {
			/* A step of a large truncation is made (committed like any change, carried
			 * by the txg): the blocks it needed are not needed again, so they are let
			 * go, and the request runs again (throttled) for the next step. */
			pool_unlock(p);
			if (c)
				pfs_unpin(c);
			continue;
		}
		if (rc == -SH_ENEEDBLOCK) {
			struct blk_ptr next[BTREE_SCAN_HINTS_MAX];
			size_t nnext = zpl_scan_hints(o->po_zpl, &missing, next, SH_ARRAY_SIZE(next));
			/* Nodes ahead are cached, not held: in a cache that cannot keep many of them,
			 * loading them would evict the nodes the restart needs first. */
			if (p->p_opts.po_arc_max_bytes < POOL_FS_AHEAD_MIN_ARC)
				nnext = 0;
			pool_unlock(p);
			if (pfs_wait_blocks(pf, req, &c, &missing, next, nnext))
				continue;
			return;
		}
		if (rc != 0) { /* zpl_execute promises nothing else */
			pfs_fail_locked(pf, req, c, -EIO);
			return;
		}
		if (req->fr_status != 0 || (!stable && op != FS_OP_COMMIT)) {
			if (req->fr_status == 0 && op == FS_OP_WRITE)
				pfs_pend_note(o, &req->fr_obj, req->u.write.wr_offset,
				              req->u.write.wr_count);
			if (c)
				pfs_ind_drop_locked(o, c);
			pool_unlock(p);
			pfs_finish(pf, req, c);
			return;
		}
		if (op == FS_OP_COMMIT) {
			/* Theory, step 4: the file's pending writes into the log, then commit. */
			uint64_t lsn = 0;
			rc = pfs_pend_flush(o, &req->fr_obj, true, &lsn);
			pool_unlock(p);
			if (rc == POOL_FS_USE_TXG) {
				pfs_wait_txg(pf, c);
				return;
			}
			if (rc != 0) {
				pfs_fail(pf, req, c, -EIO);
				return;
			}
			atomic_fetch_add(&pf->pf_log_commits, 1);
			/* Nothing pending: what an earlier COMMIT or change of the file
			 * appended may still be on its way to the disk: commit the whole log. */
			rc = pool_log_commit(p, lsn != 0 ? lsn : ILOG_LSN_ALL, &c->pc_iw);
			if (rc == ILOG_DONE)
				pfs_finish(pf, req, c);
			else if (rc != 0)
				pfs_fail(pf, req, c, -EIO);
			return; /* 0: pfs_commit_cb finishes it */
		}
		if (gone.foi_len != 0)
			pfs_pend_forget(o, &gone); /* removed with its last link (rule F11) */
		/* A stable change that succeeded: make it durable (theory, step 3). */
		if (op == FS_OP_WRITE)
			req->u.write.wr_committed = FS_FILE_SYNC;
		uint64_t lsn = 0;
		size_t len = 0;
		rc = -EMSGSIZE;
		if (c->pc_ind)
			rc = pfs_ind_log_locked(pf, req, c, &lsn); /* F12 */
		if (rc != 0 && rc != -EIO && !oversize) {
			rc = zpl_record_encode(req, c->pc_rec, c->pc_rec_cap, &len);
			if (rc == 0)
				rc = pool_log_append(p, pf->pf_ds, POOL_FS_REC_ZPL, c->pc_rec, (uint32_t)len, &lsn);
		}
		pool_unlock(p);
		if (rc == -EIO) {
			pfs_fail(pf, req, c, -EIO);
			return;
		}
		if (rc != 0) {
			/* Too large for a log record (or the log could not take it): the txg that
			 * holds the change makes it durable. */
			pfs_wait_txg(pf, c);
			return;
		}
		atomic_fetch_add(&pf->pf_log_commits, 1);
		rc = pool_log_commit(p, lsn, &c->pc_iw);
		if (rc == ILOG_DONE)
			pfs_finish(pf, req, c);
		else if (rc != 0)
			pfs_fail(pf, req, c, -EIO);
		return; /* 0: pfs_commit_cb finishes it */
	}
}

static void pfs_task_fn(struct loop_task *task)
{
	struct pfs_ctx *c = SH_CONTAINER_OF(task, struct pfs_ctx, pc_task);
	pfs_run(c->pc_fs, c->pc_req, c);
}

/* Re-runs requests that have no loop (tests, tools). */
static void *pfs_runner_main(void *arg)
{
	struct pool_fs *pf = arg;
	sh_thread_setup("shale-run", SH_THREAD_SERVING);
	pthread_mutex_lock(&pf->pf_lock);
	for (;;) {
		struct pfs_ctx *c = pf->pf_runq;
		if (!c) {
			if (pf->pf_stopping)
				break;
			pthread_cond_wait(&pf->pf_run_cv, &pf->pf_lock);
			continue;
		}
		pf->pf_runq = c->pc_next;
		if (!pf->pf_runq)
			pf->pf_runq_tail = NULL;
		pthread_mutex_unlock(&pf->pf_lock);
		pfs_run(pf, c->pc_req, c);
		pthread_mutex_lock(&pf->pf_lock);
	}
	pthread_mutex_unlock(&pf->pf_lock);
	return NULL;
}

/* Group commit of COMMITs and oversize stable writes: one txg wait per batch. */
static void *pfs_committer_main(void *arg)
{
	struct pool_fs *pf = arg;
	sh_thread_setup("shale-commit", SH_THREAD_BACKGROUND);
	pthread_mutex_lock(&pf->pf_lock);
	for (;;) {
		struct pfs_ctx *batch = pf->pf_commitq;
		if (!batch) {
			if (pf->pf_stopping)
				break;
			pthread_cond_wait(&pf->pf_commit_cv, &pf->pf_lock);
			continue;
		}
		pf->pf_commitq = pf->pf_commitq_tail = NULL;
		pthread_mutex_unlock(&pf->pf_lock);
		/* Every request of the batch made its change before this call: the txg open now
		 * holds it or a txg before it does. */
		int rc = pool_txg_wait_synced(pf->pf_pool, 0);
		atomic_fetch_add(&pf->pf_txg_waits, 1);
		while (batch) {
			struct pfs_ctx *c = batch;
			batch = c->pc_next;
			atomic_fetch_add(&pf->pf_txg_waited_reqs, 1);
			if (rc != 0)
				c->pc_req->fr_status = -EIO;
			pfs_finish(pf, c->pc_req, c);
		}
		pthread_mutex_lock(&pf->pf_lock);
	}
	pthread_mutex_unlock(&pf->pf_lock);
	return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * struct fs_ops */

/* A request of the file system itself, .zfs aside (pfs_snapdir's way back in). */
static void pfs_head_run(struct fs *fs, struct fs_req *req)
{
	pfs_run(pfs_of(fs), req, NULL);
}

static void pfs_submit(struct fs *fs, struct fs_req *req)
{
	struct pool_fs *pf = pfs_of(fs);
	if (pf->pf_snapdir && pfs_snapdir_claims(pf->pf_snapdir, req)) {
		pfs_snapdir_submit(pf->pf_snapdir, req); /* .zfs and the snapshots in it */
		return;
	}
	if (pf->pf_read_only && (fs_op_changes(req->fr_op) || req->fr_op == FS_OP_COMMIT)) {
		pfs_fail(pf, req, NULL, -EROFS); /* a snapshot: nothing in it changes */
		return;
	}
	pfs_run(pf, req, NULL);
}

/* The root and the limits as the zpl said at the open: a rollback keeps both (the root's id is
 * the format's, the limits zpl's), and the zpl may be closed meanwhile (pfs_do_rollback). */
static int pfs_root(struct fs *fs, struct fs_obj_id *root_out)
{
	*root_out = pfs_of(fs)->pf_root;
	return 0;
}

static void pfs_info(struct fs *fs, struct fs_info *info_out)
{
	*info_out = pfs_of(fs)->pf_info;
}

static void pfs_write_verifier(struct fs *fs, uint8_t verf_out[8])
{
	memcpy(verf_out, pfs_of(fs)->pf_verf, 8);
}

static void pfs_stop_threads(struct pool_fs *pf, bool runner, bool committer)
{
	pthread_mutex_lock(&pf->pf_lock);
	pf->pf_stopping = true;
	pthread_cond_broadcast(&pf->pf_run_cv);
	pthread_cond_broadcast(&pf->pf_commit_cv);
	pthread_mutex_unlock(&pf->pf_lock);
	if (runner)
		pthread_join(pf->pf_runner, NULL);
	if (committer)
		pthread_join(pf->pf_committer, NULL);
}

static void pfs_free(struct pool_fs *pf)
{
	while (pf->pf_free) {
		struct pfs_ctx *c = pf->pf_free;
		pf->pf_free = c->pc_next;
		mem_free(c->pc_rec);
		mem_free(c);
	}
	if (pf->pf_reap_ctx) {
		mem_free(pf->pf_reap_ctx->pc_rec);
		mem_free(pf->pf_reap_ctx);
	}
	pthread_cond_destroy(&pf->pf_reap_cv);
	pthread_cond_destroy(&pf->pf_commit_cv);
	pthread_cond_destroy(&pf->pf_run_cv);
	pthread_mutex_destroy(&pf->pf_lock);
	mem_free(pf);
}

/* Every submitted request has completed (fs_destroy's contract): the queues are empty. */
static void pfs_destroy(struct fs *fs)
{
	struct pool_fs *pf = pfs_of(fs);
	pthread_mutex_lock(&pf->pf_lock);
	pf->pf_reap_stopping = true;
	while (pf->pf_reap_busy)
		pthread_cond_wait(&pf->pf_reap_cv, &pf->pf_lock);
	pthread_mutex_unlock(&pf->pf_lock);
	pfs_snapdir_destroy(pf->pf_snapdir);
	pfs_stop_threads(pf, true, true);
	VERIFY(pf->pf_runq == NULL && pf->pf_commitq == NULL);
	pool_ds_close(pf->pf_ds);
	pfs_free(pf);
}

static const struct fs_ops pfs_ops = {
	.fo_name = "pool",
	.fo_submit = pfs_submit,
	.fo_root = pfs_root,
	.fo_info = pfs_info,
	.fo_write_verifier = pfs_write_verifier,
	.fo_destroy = pfs_destroy,
};

int pool_fs_open(struct pool *p, const char *dataset, uint64_t fsid, struct fs **fs_out)
{
	*fs_out = NULL;
	struct pool_ds *ds;
	int rc = pool_ds_open(p, dataset, &ds);
	if (rc != 0)
		return rc;
	struct pfs_owner *o = pool_ds_owner(ds);
	if (!o) {
		rc = pool_fs_attach(NULL, ds);
		if (rc != 0)
			goto out_close;
		o = pool_ds_owner(ds);
	}
	if (!o || o->po_magic != POOL_FS_OWNER_MAGIC) {
		rc = -EBUSY;
		goto out_close;
	}
	/* Attributes carry this open's fsid; zpl keeps its own copy of the env, so a zpl opened
	 * with another one (by pool_fs_attach at import) is reopened, which is exact while it holds
	 * no dirty buffers (the tree, dirty nodes included, is its whole state then). */
	pool_lock(p);
	if (o->po_zpl && o->po_env.ze_fsid != fsid) {
		if (zpl_dirty_bytes(o->po_zpl) != 0) {
			rc = -EBUSY;
		} else {
			zpl_close(o->po_zpl);
			o->po_zpl = NULL;
		}
	}
	if (rc == 0)
		o->po_env.ze_fsid = fsid;
	pool_unlock(p);
	if (rc != 0)
		goto out_close;
	/* A snapshot (POOL/FS@SNAP) is served read only, as it is: never formatted or reaped. */
	bool read_only = pool_ds_is_snapshot(ds);
	bool formatted = false;
	struct fs_obj_id root;
	struct fs_info info;
	for (;;) {
		rc = pfs_owner_load_sync(o, !read_only, &formatted);
		if (rc != 0)
			break;
		pool_lock(p);
		bool loaded = o->po_zpl != NULL; /* not let go of by a rollback meanwhile */
		if (loaded) {
			zpl_root(o->po_zpl, &root);
			zpl_info(o->po_zpl, &info);
		}
		pool_unlock(p);
		if (loaded)
			break;
	}
	if (rc == -ENOENT && read_only)
		goto out_close; /* a snapshot of a file system never used */
	if (rc != 0) {
		rc = rc == -ENOMEM ? rc : -EIO;
		goto out_close;
	}
	/* Rule: no log record may reach the disk before the format it applies to. */
	if (formatted && (rc = pool_txg_wait_synced(p, 0)) != 0) {
		rc = -EIO;
		goto out_close;
	}
	struct pool_fs *pf = mem_zalloc(sizeof(*pf));
	if (!pf) {
		rc = -ENOMEM;
		goto out_close;
	}
	pf->pf_fs.fs_ops = &pfs_ops;
	pf->pf_fs.fs_fsid = fsid;
	pf->pf_pool = p;
	pf->pf_ds = ds;
	pf->pf_owner = o;
	pf->pf_read_only = read_only;
	pf->pf_root = root;
	pf->pf_info = info;
	VERIFY(pthread_mutex_init(&pf->pf_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&pf->pf_run_cv, NULL) == 0);
	VERIFY(pthread_cond_init(&pf->pf_commit_cv, NULL) == 0);
	VERIFY(pthread_cond_init(&pf->pf_reap_cv, NULL) == 0);
	rc = sh_random_bytes(pf->pf_verf, sizeof(pf->pf_verf));
	if (rc != 0)
		goto out_free;
	pf->pf_reap_ctx = mem_zalloc(sizeof(*pf->pf_reap_ctx));
	if (!pf->pf_reap_ctx) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = -pthread_create(&pf->pf_runner, NULL, pfs_runner_main, pf);
	if (rc != 0)
		goto out_free;
	rc = -pthread_create(&pf->pf_committer, NULL, pfs_committer_main, pf);
	if (rc != 0) {
		pfs_stop_threads(pf, true, false);
		goto out_free;
	}
	if (!read_only) {
		rc = pfs_snapdir_create(p, ds, &pf->pf_fs, &root, pfs_head_run, &pf->pf_snapdir);
		if (rc != 0) {
			pfs_stop_threads(pf, true, true);
			goto out_free;
		}
	}
	*fs_out = &pf->pf_fs;
	if (!read_only)
		pfs_reap_kick(pf); /* import may have replayed a REMOVE that queued a file */
	return 0;

out_free:
	pfs_free(pf);
out_close:
	pool_ds_close(ds);
	return rc;
}

void pool_fs_stats(struct fs *fs, struct pool_fs_stats *st)
{
	struct pool_fs *pf = pfs_of(fs);
	st->ps_restarts = atomic_load(&pf->pf_restarts);
	st->ps_throttled = atomic_load(&pf->pf_throttled);
	st->ps_log_commits = atomic_load(&pf->pf_log_commits);
	st->ps_txg_waits = atomic_load(&pf->pf_txg_waits);
	st->ps_txg_waited_reqs = atomic_load(&pf->pf_txg_waited_reqs);
	st->ps_slow_ctx_allocs = atomic_load(&pf->pf_ctx_allocs);
	st->ps_adopted_blocks = atomic_load(&pf->pf_owner->po_adopted);
	st->ps_pend_scans = atomic_load(&pf->pf_owner->po_pend_scans);
	st->ps_reap_steps = atomic_load(&pf->pf_reap_steps);
	pthread_mutex_lock(&pf->pf_lock);
	st->ps_reap_busy = pf->pf_reap_busy;
	pthread_mutex_unlock(&pf->pf_lock);
}
