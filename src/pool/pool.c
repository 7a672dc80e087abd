/* pool.c: the storage pool: configuration, creation, import (with log replay), export and close.
 * The other parts: pool_io.c (blocks through the cache, writes, the trees' stores), pool_txg.c
 * (the sync thread, throttling), pool_ds.c (datasets), pool_log.c (the intent log's use and
 * replay), pool_check.c (check, destroy walks, status).
 *
 * ================================================================================================
 * THEORY
 * ================================================================================================
 *
 * Problem. Shale keeps file systems in a pool of its own, modelled on ZFS and simpler: data and
 * metadata are blocks named by checksummed block pointers, never overwritten in place; a
 * transaction group (txg) gathers every change made during a few seconds and writes it out as new
 * blocks, then commits it with one uberblock write; an intent log makes single changes durable in
 * between. This file and its siblings wire the finished parts together: leaves, vdevs, labels and
 * uberblocks (src/blk), the ARC (src/cache), the copy-on-write B+tree and the space allocator
 * (src/btree, src/space), the intent log (src/ilog).
 *
 * Differences from ZFS, on purpose. One lock for all in-memory pool state (ZFS has many); one
 * B+tree per dataset instead of object sets and dnodes; snapshots as in ZFS (birth txgs, dead
 * lists in birth buckets: pool_snap.c) and clones;
 * the configuration lives only in the labels (no MOS copy); a log record is replayed through its
 * dataset's owner, which the importer attaches (ZFS replays ZIL records through the ZPL it knows).
 *
 * Vdevs. A pool has 1..POOL_MAX_TOPS top-level vdevs (a leaf or a mirror), striped by the
 * allocator's choice of vdev per block, and optionally a log vdev (a leaf or a mirror) that holds
 * only the intent log. Every leaf carries the pool's configuration text in its four labels
 * (table below), stamped with the configuration txg it was written for (1 at creation; a change
 * of the vdevs, pool_vdev.c, writes a higher one). Import reads the labels of the leaves it is
 * given, requires one pool guid, takes the newest configuration among them, maps leaves to it by
 * leaf guid (a leaf that only an older configuration names, a detached one, is left out with a
 * warning; one that is not named by a configuration as new as the pool's is refused), builds
 * each vdev over its present children (a mirror with children missing imports DEGRADED; a
 * top-level or log vdev with none present refuses import), picks the valid uberblock with the
 * highest txg across the leaves it kept, and once the pool is up rewrites the labels of present
 * leaves that hold an older configuration.
 *
 * Uberblock. roots[0] is the root of the MOS (meta object set), the pool's metadata tree: per
 * dataset "ds/<name>" -> its record (table below), per property "prop/<name>" -> its text.
 * roots[1] is the allocator's root (space_sync). The payload (table below) holds the next dataset
 * id, the log's region and the position replay starts from as of this txg, and the txg's time.
 *
 * The intent log's region is the log vdev's whole data area, or, without a log vdev, the first
 * po_log_region_bytes (default 1/32, clamped to [ILOG_REGION_MIN, 1 GiB]) of vdev 0's data area,
 * which the allocator's geometry then excludes (its vdev 0 area starts after the region).
 *
 * Txg states. Txg numbers only grow. At any moment exactly one txg is OPEN (changes made now
 * belong to it) and at most one is SYNCING (being written); every txg below is DURABLE (its
 * uberblock is on stable storage) or was never written because it held nothing.
 *
 *     OPEN --sync thread, phase 1, under p_lock--> SYNCING --uberblock on disk--> DURABLE
 *
 * Sync of txg N (pool_txg.c):
 *   0. Without p_lock (sealing): each dataset's owner prepares (compresses, checksums) the data
 *      blocks phase 1 would write, with pool_seal_block, while requests go on; phase 1 takes a
 *      sealed block instead of preparing the buffer again, as long as nothing changed it since
 *      (the owner's rule; zpl.h's sealing). Bounded to 2 * po_dirty_max_bytes of prepared
 *      blocks, counted in the reservation (the memory model below).
 *   1. Under p_lock: the open txg becomes N + 1. For each loaded dataset: its owner's do_sync
 *      (dirty data into the tree, data blocks through pool_sync_write or, sealed,
 *      pool_sync_write_sealed), then btree_sync of its tree; the new roots and used bytes go
 *      into the MOS records; btree_sync of the MOS; space_sync(N); ilog_checkpoint_position(N);
 *      the uberblock is built. Nothing here waits, and little is submitted: the writes queue in
 *      p_sync_queue, are taken off it before the lock is let go and go to the engine just after
 *      (pool_writes_submit; a write counted in p_writes_pending never needs p_lock to be
 *      submitted, so pool_check may wait for them under the lock), so the
 *      device's work does not take the CPU from the locked section, or when they fill half
 *      the room the memory limit leaves beside the cache and the reservation (at least a 64th
 *      of po_arc_max_bytes), so that their buffers do not all live at once; the sync thread is
 *      SCHED_BATCH but for this phase. The lock is held for this phase only: every request
 *      waits for it, so its length is the pool's worst stall (`pool status` shows the last and
 *      the longest). A failure is retried once at once (the trees and
 *      the allocator stay dirty and intact when a sync of theirs fails), then the pool is
 *      suspended.
 *   2. Without the lock: submit phase 1's writes, wait for every one (a failed one is re-issued
 *      once), then flush every top-level vdev: the flush is what makes the blocks durable.
 *   3. blk_uberblock_write: the commit point. When it reports an error, the leaves are read back:
 *      the txg is durable if any leaf holds its uberblock; else it is retried once, then the pool
 *      is suspended.
 *   4. space_txg_durable(N) under p_lock (space freed in N may be reused); ilog_release of the
 *      checkpoint (log space before it may be reused); waiters for N are woken; throttled callers
 *      are called back; loaded datasets nobody uses and that are clean are freed.
 * Triggers: every po_txg_interval_ms when anything is dirty; dirty bytes (trees plus owners)
 * at po_dirty_sync_bytes, a quarter of the dirty limit by default, when the sync thread has
 * been idle as long as its last txg took, and at the limit always (pool_tx_throttle notices;
 * phase 4 notices the limit reached while the txg was written); a request (pool_txg_request_sync,
 * pool_txg_wait_synced, dataset create and destroy); the log running out of space.
 *
 * Memory model. po_arc_max_bytes (C, `--arc-max`) bounds the pool's memory for blocks, not only
 * its cache, as zfs_arc_max does in ZFS, where dirty data are ARC buffers. Shale's dirty data live
 * outside the ARC, so the pool declares them to it (arc_set_reserved, the ARC's memory model):
 *     reserved = dirty + sealed + syncing + log
 *   dirty    pool_dirty_bytes: the owners' dirty buffers and the trees' dirty nodes, open txg;
 *   sealed   p_sealed_bytes: the blocks phase 0 prepared that phase 1 has not taken yet;
 *   syncing  p_sync_bytes: what the txg being written holds outside the ARC from phase 1 until
 *            its writes complete (each written block's compressed copy, blk_prepare's buffer of
 *            its rounded logical size, lives until its write is done; the cached copy of the
 *            block is an ARC buffer held until then, counted by the ARC itself); taken as the
 *            txg's dirty bytes when phase 1 begins, which is what those buffers add up to;
 *   log      ilog_buffer_bytes: the intent log's block buffers.
 * The ARC keeps its unheld data within C - reserved, so cached + dirty + syncing + log <= C, as
 * long as reserved <= C / 2 (the ARC never gives more than half of C away, so that operations
 * keep the blocks they need). The dirty limit D keeps it there: by default D = C / 10 (within
 * [1 MiB, 128 MiB]); a sync starts at D / 4 (when the sync thread has been idle a while) or at
 * D, and writers are throttled beyond 2 D, so the open txg
 * holds at most 2 D (plus the one change each throttle check lets through) and the txg being
 * written another 2 D (or, before phase 1, its sealed blocks: at most 2 D, while nothing is being
 * written): 4 D = 0.4 C, and the remaining 0.1 C is for the log, whose buffers are a
 * few MiB while its device keeps up (an idle buffer or four and the block being filled; up to
 * ILOG_BACKLOG_MAX_BYTES more when it does not). ZFS's zfs_dirty_data_max is similar in
 * proportion: 10% of memory against an ARC of half of it. With C = 256 MiB: D = 25.6 MiB, and
 * the cache keeps at least 153 MiB of clean blocks under a sustained write. The reservation is
 * updated at each pool_tx_throttle (so it lags by the changes made since the last check), after
 * phase 1 and in phase 4; changes that grow it evict clean blocks. Writers are throttled, never
 * failed, for memory. Not counted: the ARC's headers and hash tables, the pinned MOS, the
 * allocator's in-memory state, the owners' own structures (inodes, open files), per-request buffers
 * and the allocator's overhead: the rest of the server's footprint beside C. The server limits
 * glibc's arenas (server.c) so that memory one thread frees can be reused by another instead of
 * staying resident in its arena, and the sync thread gives whole free heap pages back to the
 * system when the process is resident above C / 2 and more than C / 8 of the heap is free, at
 * most every 100 ms (pool_txg.c), so that holes which blocks of another size cannot reuse do not
 * stay resident.
 *
 * Rules.
 *   R1 (p_lock) Every tree, the allocator, the datasets, the open txg and the framing of log
 *      records are changed only under p_lock. Owners run operations under it on their own
 *      threads, fast and without I/O; a block not in memory makes the operation return
 *      -SH_ENEEDBLOCK and the caller loads it asynchronously (pool_block_load) and retries.
 *   R2 (no waiting under p_lock) The pool never waits for I/O holding p_lock, except pool_check,
 *      a slice of the online scrub (pool_check.c, bounded by its slice size), a destroy step and
 *      a step of the dead-list free queue (pool_destroy.c, pool_snap.c, on the sync thread,
 *      bounded), and a promote's re-keying of the clone's dead list (pool_snap.c, S9: not
 *      bounded, in proportion to what the clone let go of below its origin), which read
 *      synchronously under it (documented there). No callback
 *      that runs on the blk engine thread takes p_lock: the engine thread therefore never waits
 *      for a thread that holds p_lock, and synchronous reads under p_lock cannot deadlock.
 *   R3 (writes only at sync) Blocks are allocated and written only in phase 1, by btree_sync's
 *      bs_write, the owners' do_sync and space_sync, with birth = N. A written block is inserted
 *      into the ARC at once and held there until its write completes, so it is never read from
 *      disk before it is there.
 *   R4 (frees) A block the in-memory trees stop referencing is freed in the open txg (unless a
 *      snapshot still holds it: it then goes on the dataset's dead list, pool_snap.c S1), or in
 *      the syncing txg N while phase 1 runs (N's trees do not reference it: freeing it in N + 1 would
 *      show it allocated in N's state, a leak after a crash at N). The allocator hands freed space
 *      out again only after that txg is durable, so the state a crash falls back to is intact.
 *   R5 (log) A change and its log record are made in one p_lock section, and the record carries
 *      the open txg. So txg N's state holds exactly the changes whose records have txg <= N, the
 *      records are in LSN order, and ilog_checkpoint_position(N) is where the changes missing from
 *      N's state start. Replay applies, in LSN order, the records with txg greater than the
 *      uberblock's: the result is the state after a prefix of all changes, which includes every
 *      acknowledged one (its record was durable, and so were all before it).
 *   R6 (replay lands on the uberblock's state) Import replays before anything else can change
 *      the pool, then opens the log after the replayed end and writes a txg whose uberblock
 *      records that end, before returning. A crash before that uberblock is durable replays the
 *      same records, still unreleased, onto the same uberblock state again; after it, replay
 *      starts after them. The old records' txg numbers may exceed the new txgs: the position, not
 *      the txg, is what keeps them from being replayed twice. A read-only import
 *      (po_read_only) only counts the records replay would apply and writes nothing at all (no
 *      txg, no relabel, no repair; its leaves refuse writes), so the next import replays them.
 *   R7 (full log) pool_log_append never fails for a full log: the record waits in memory
 *      (p_logq), keeping LSN order (records are appended to the log strictly in the order of
 *      their LSNs, so the pool knows the LSN a waiting record will get), a sync is requested, and
 *      the sync thread appends waiting records once the log frees space. Commits of waiting
 *      records complete after they are appended and written.
 *   R8 (suspension) When a txg cannot be written, the pool is suspended: pool_tx_throttle and
 *      pool_log_append return -EIO, no further sync runs, waiters get -EIO; reads keep working
 *      from the cache and the disk. Export then fails with -EIO; the previous txg and the
 *      durable log records stand, and import replays them.
 *   R9 (MOS pinned) Every block of the MOS is kept in memory (p_mos_pin): it is small (a record
 *      per dataset), and its operations therefore never miss, which lets phase 1 update dataset
 *      records without ever waiting.
 *
 * Concurrency. p_lock (R1). p_state_lock (always after p_lock when both are held) guards what the
 * engine thread and the sync thread exchange: sync requests and durable txgs, writes in flight,
 * the records waiting for log space and their commits, throttled callers; p_state_cv is broadcast
 * on every change. The ARC and the log have their own locks, taken inside both. Threads: callers
 * (owners' operations, tools), the sync thread (phases 1-4, log draining), the blk engine thread
 * (I/O completions: block reads fill the ARC and call pool_block_load's callbacks; block writes
 * count down; log commits call their waiters).
 *
 * Datasets (pool_ds.c). A loaded dataset (struct pool_ds) has its tree open and maybe an owner.
 * Opens are counted; a dataset nobody has open stays loaded until its changes are durable, then
 * the sync thread detaches its owner and frees it. Destroy (pool_destroy.c) first writes a txg
 * (the owner's dirty data into the tree), then moves the record from "ds/<name>" to "dq/<id>" in
 * one txg (the name is gone and free again), and the sync thread frees the tree and the data
 * blocks its entries name in steps of po_destroy_step entries, one step per txg, each txg
 * consistent on its own; the last step deletes "dq/<id>". Import loads every queued dataset and
 * the steps go on. Memory stays bounded whatever the dataset's size.
 *
 * Check (pool_check.c). Under p_lock, after the writes of a sync in progress have completed:
 * btree_check of the MOS and of every dataset tree through a walk cache of its own (every node is
 * read from disk), every copy of every node, data block (named by the owners' visitors) and
 * allocator block (the pool tracks those: p_space_blocks) read from each mirror child and
 * verified against its checksum (the copies of up to 128 blocks read at once), bad copies
 * rewritten from a good one (those on stale children flushed once, at the end); the walk runs
 * inside space_check, each live block marked in its bitmap as it is found (no list of every
 * block: a bit per sector plus the nodes seen), and space_check then reports leaks.
 *
 * Failures and limits. A txg whose writes, flush or uberblock fail (after one retry) suspends the
 * pool (R8). A mirror child that starts failing writes or flushes at run time does not: the vdev
 * layer faults it and writes around it while another child takes the writes (blk_vdev.c), the
 * pool reports itself DEGRADED, and the uberblock goes to the other leaves. Each uberblock lists
 * the mirror children that missed writes (missing, faulted, or stale: payload table below), and
 * the sync writes a txg when that list changes (pool_clean). Import marks the listed children
 * that are present stale (blk_vdev_set_stale: written, read after the current children); a check
 * that finds no problem has rewritten every stale copy and clears the marks, which the next txg
 * records. Import uses the newest valid uberblock only: if its trees cannot be read, import fails
 * (no rewind to an older txg yet). With a faulted child's partner gone, an import from the
 * faulted child alone comes up at the txg it was faulted in: the record is on the partner (as in
 * ZFS, whose labels of the other children carry it).
 *
 * Replacing a device (pool_vdev.c). A leaf is attached to a vdev (a disk becomes a mirror) or
 * detached from a mirror by rewriting the labels of an exported pool; an attached leaf is stale
 * (import marks it so while the uberblock predates it, and the uberblocks list it from then on)
 * until a check has copied every block onto it, which is the resilver. Replace is attach,
 * check, detach. A top-level vdev can be added (appended: the allocator's state grows with it).
 *
 * ------------------------------------------------------------------------------------------------
 * ON-DISK FORMATS (integers little-endian)
 *
 * Configuration text, in every leaf's labels (blk_label_write; lb_config_txg 1 at creation, higher
 * after each change of the vdevs). Lines "key=value" ending in '\n', in this order; unknown keys
 * are refused:
 *     version=1
 *     name=<pool name>
 *     pool_guid=<u64>
 *     created_ns=<u64, CLOCK_REALTIME>
 *     log_bytes=<u64: the log region on vdev 0's data area; 0 with a log vdev>
 *     tops=<n, 1..64>
 *     top.<i>.guid=<u64>              for each i < n, then its children:
 *     top.<i>.type=disk|mirror
 *     top.<i>.data_bytes=<u64: the vdev's data area when created>
 *     top.<i>.children=<k: 1 for disk, 2..8 for mirror>
 *     top.<i>.child.<j>.guid=<u64>
 *     top.<i>.child.<j>.path=<path at creation; "" for memory leaves>
 *     top.<i>.child.<j>.added_txg=<u64>  only for a leaf attached later (pool_vdev.c): the
 *                                     configuration txg it came with; import marks it stale
 *                                     while the uberblock it imports is older
 *     log.type=none|disk|mirror       then, unless none, log.guid, log.data_bytes,
 *                                     log.children, log.child.<j>.guid, log.child.<j>.path,
 *                                     log.child.<j>.added_txg
 * Each leaf's label also says its own guid (lb_leaf_guid), its top-level vdev's guid and index
 * (UINT32_MAX for the log vdev's leaves) and the pool name and guid.
 *
 * Uberblock (struct blk_uberblock): ub_txg, ub_pool_guid, ub_timestamp_ns = the txg's time,
 * ub_nroots = 2: roots[0] the MOS root (a hole when empty), roots[1] the allocator's root.
 * Payload (the first 112 + 8 * n of BLK_UB_PAYLOAD_BYTES; the rest zero):
 *   offset  size  field
 *        0     8  magic "SHPOOLUB"
 *        8     4  format version (POOL_FORMAT_VERSION)
 *       12     4  the log's vdev: a top-level index, or 0xffffffff for the log vdev
 *       16     8  next dataset id
 *       24     8  txg time, ns (CLOCK_REALTIME)
 *       32     8  log region start (absolute offset on that vdev)
 *       40     8  log region bytes
 *       48    48  replay position (ilog_position_encode)
 *       96     8  reserved, zero
 *      104     4  n, leaves that missed writes (0..POOL_UB_STALE_MAX): mirror children that were
 *                 missing, faulted or still stale when the txg was written
 *      108     4  reserved, zero
 *      112   8 n  their leaf guids, in configuration order (tops, then the log vdev)
 *
 * MOS entries (a btree of type POOL_MOS_TREE_TYPE, 16 KiB nodes):
 *   "ds/<name>" -> dataset record, 192 bytes (version 2; version 1, the first 128 bytes, is
 *       read as a dataset with no snapshots):
 *   offset  size  field
 *        0     4  record version (2)
 *        4     4  record bytes (the dataset's data block size)
 *        8     8  dataset id (unique, never reused)
 *       16     8  txg the dataset was created in
 *       24     8  used bytes (its tree's and data blocks' allocated bytes)
 *       32     1  compression (enum blk_compress)
 *       33     7  reserved, zero
 *       40     8  quota in bytes (0: none; records written before quotas hold 0 here)
 *       48    16  reserved, zero
 *       64    64  its tree's root block pointer (blk_ptr_encode; a hole when empty)
 *      128     8  prev_snap_txg: its latest snapshot's txg (or a clone's origin's; 0: none)
 *      136     8  its latest snapshot's id (0: none)
 *      144     8  its dead list's id (0: none yet; pool_snap.c)
 *      152     8  a clone's origin: its file system's id (0: not a clone)
 *      160     8  a clone's origin: its txg (0: not a clone)
 *      168     8  flags (POOL_DS_F_*)
 *      176    16  reserved, zero
 *   "dq/<id, 16 lower-case hex digits>" -> the record of a dataset being destroyed (the same
 *       bytes; its root names what is left to free: pool_destroy.c)
 *   "sn/<head id>/<txg>", "dl/<dead list id>/<bucket>/<chain id>", "fq/<chain id>" -> a
 *       snapshot, a dead list's chain, a chain being freed (tables in pool_snap.c)
 *   "prop/<name>" -> the property's text (1..255 bytes, no NUL)
 *
 * Log records (pool_log_append): ilog type = the owner's type, ilog txg = the open txg; payload =
 *        0     8  dataset id
 *        8     .  the owner's payload
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool/pool_impl.h"

#define POOL_UB_MAGIC "SHPOOLUB"
#define POOL_UB_STALE_OFF 112u
#define POOL_LOG_ON_LOG_VDEV UINT32_MAX
#define POOL_ENGINE_DEPTH 256u

/* ---------------------------------------------------------------------------------------------
 * Small helpers */

bool pool_name_chars_valid(const char *name, size_t max, const char *extra)
{
	size_t n = 0;
	if (!name)
		return false;
	for (; name[n]; n++) {
		char c = name[n];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		          (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
		          (extra && strchr(extra, c));
		if (!ok || n >= max)
			return false;
	}
	return n >= 1;
}

bool pool_name_valid(const char *name, size_t max)
{
	return pool_name_chars_valid(name, max, NULL);
}

void pool_say(char *err, size_t err_len, const char *fmt, ...)
{
	if (!err || err_len == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

static int pool_guid_new(uint64_t *out)
{
	uint64_t g = 0;
	while (g == 0) {
		int rc = sh_random_bytes(&g, sizeof(g));
		if (rc != 0)
			return rc;
	}
	*out = g;
	return 0;
}

/* Fills the defaults of opts into out. */
static void pool_opts_defaults(const struct pool_open_opts *opts, struct pool_open_opts *out)
{
	if (opts)
		*out = *opts;
	else
		memset(out, 0, sizeof(*out));
	if (out->po_arc_max_bytes == 0)
		out->po_arc_max_bytes = POOL_ARC_MAX_DEFAULT;
	if (out->po_dirty_max_bytes == 0) {
		/* The memory model: 2 D open plus 2 D being written, with the log's buffers, fit in
		 * the half of the ARC's limit that the ARC gives to a reservation. */
		uint64_t d = out->po_arc_max_bytes / POOL_DIRTY_ARC_DIVISOR;
		out->po_dirty_max_bytes =
		    SH_MIN(SH_MAX(d, POOL_DIRTY_MAX_MIN), POOL_DIRTY_MAX_DEFAULT);
	}
	if (out->po_dirty_sync_bytes == 0)
		out->po_dirty_sync_bytes =
		    SH_MAX(out->po_dirty_max_bytes / POOL_DIRTY_SYNC_DIVISOR, POOL_DIRTY_SYNC_MIN);
	out->po_dirty_sync_bytes = SH_MIN(out->po_dirty_sync_bytes, out->po_dirty_max_bytes);
	if (out->po_txg_interval_ms == 0)
		out->po_txg_interval_ms = POOL_TXG_INTERVAL_MS_DEFAULT;
	if (out->po_record_bytes == 0)
		out->po_record_bytes = POOL_RECORD_BYTES_DEFAULT;
	if (out->po_destroy_step == 0)
		out->po_destroy_step = POOL_DESTROY_STEP_DEFAULT;
}

static const char *const pool_compress_names[] = {"default", "off", "lz4", "zstd"};

const char *pool_compress_name(enum pool_compress c)
{
	return (unsigned)c < SH_ARRAY_SIZE(pool_compress_names) ? pool_compress_names[c] : "?";
}

int pool_compress_from_name(const char *name, bool allow_default)
{
	for (unsigned c = allow_default ? 0 : 1; c < SH_ARRAY_SIZE(pool_compress_names); c++)
		if (strcmp(name, pool_compress_names[c]) == 0)
			return (int)c;
	return -1;
}

enum blk_compress pool_compress_resolve(const struct pool *p, enum pool_compress c)
{
	switch (c) {
	case POOL_COMPRESS_OFF: return BLK_COMPRESS_OFF;
	case POOL_COMPRESS_LZ4: return BLK_COMPRESS_LZ4;
	case POOL_COMPRESS_ZSTD: return BLK_COMPRESS_ZSTD;
	default: return p ? p->p_compress : BLK_COMPRESS_LZ4;
	}
}

const char *pool_name(const struct pool *p)
{
	return p->p_name;
}

uint64_t pool_guid(const struct pool *p)
{
	return p->p_guid;
}

void pool_lock(struct pool *p)
{
	pthread_mutex_lock(&p->p_lock);
}

void pool_unlock(struct pool *p)
{
	pthread_mutex_unlock(&p->p_lock);
}

uint64_t pool_open_txg(struct pool *p)
{
	return p->p_open_txg;
}

bool pool_is_suspended(struct pool *p)
{
	return atomic_load(&p->p_suspended);
}

void pool_suspend(struct pool *p, const char *why)
{
	bool was = atomic_exchange(&p->p_suspended, true);
	if (!was)
		log_error("pool %s: suspended: %s; changes are refused until it is imported again",
		          p->p_name, why);
	pthread_mutex_lock(&p->p_state_lock);
	pthread_cond_broadcast(&p->p_state_cv);
	pthread_mutex_unlock(&p->p_state_lock);
	pool_log_cancel(p, -EIO);
	pool_wake_throttled(p, -EIO);
}

/* ---------------------------------------------------------------------------------------------
 * The configuration text */

struct pool_cfgbuf {
	char *cb_buf;
	size_t cb_len;
	bool cb_overflow;
};

static void pool_cfg_add(struct pool_cfgbuf *cb, const char *fmt, ...) SH_PRINTF(2, 3);
static void pool_cfg_add(struct pool_cfgbuf *cb, const char *fmt, ...)
{
	if (cb->cb_overflow)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(cb->cb_buf + cb->cb_len, BLK_CONFIG_MAX_BYTES + 1 - cb->cb_len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n > BLK_CONFIG_MAX_BYTES - cb->cb_len)
		cb->cb_overflow = true;
	else
		cb->cb_len += (size_t)n;
}

static void pool_cfg_add_top(struct pool_cfgbuf *cb, const char *prefix, const struct pool_top *t)
{
	pool_cfg_add(cb, "%s.guid=%" PRIu64 "\n", prefix, t->pt_guid);
	pool_cfg_add(cb, "%s.type=%s\n", prefix, t->pt_mirror ? "mirror" : "disk");
	pool_cfg_add(cb, "%s.data_bytes=%" PRIu64 "\n", prefix, t->pt_data_bytes);
	pool_cfg_add(cb, "%s.children=%u\n", prefix, t->pt_nchildren);
	for (unsigned j = 0; j < t->pt_nchildren; j++) {
		pool_cfg_add(cb, "%s.child.%u.guid=%" PRIu64 "\n", prefix, j,
		             t->pt_leaves[j].pl_guid);
		pool_cfg_add(cb, "%s.child.%u.path=%s\n", prefix, j, t->pt_leaves[j].pl_path);
		if (t->pt_leaves[j].pl_added_txg != 0)
			pool_cfg_add(cb, "%s.child.%u.added_txg=%" PRIu64 "\n", prefix, j,
			             t->pt_leaves[j].pl_added_txg);
	}
}

int pool_config_build(const struct pool *p, char *buf, uint32_t *len_out)
{
	struct pool_cfgbuf cb = {buf, 0, false};
	pool_cfg_add(&cb, "version=%u\n", POOL_FORMAT_VERSION);
	pool_cfg_add(&cb, "name=%s\n", p->p_name);
	pool_cfg_add(&cb, "pool_guid=%" PRIu64 "\n", p->p_guid);
	pool_cfg_add(&cb, "created_ns=%" PRIu64 "\n", p->p_created_ns);
	pool_cfg_add(&cb, "log_bytes=%" PRIu64 "\n", p->p_log_config_bytes);
	pool_cfg_add(&cb, "tops=%u\n", p->p_ntops);
	for (unsigned i = 0; i < p->p_ntops; i++) {
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "top.%u", i);
		pool_cfg_add_top(&cb, prefix, &p->p_tops[i]);
	}
	if (!p->p_has_log) {
		pool_cfg_add(&cb, "log.type=none\n");
	} else {
		pool_cfg_add(&cb, "log.type=%s\n", p->p_logtop.pt_mirror ? "mirror" : "disk");
		/* the same lines as a top, without repeating the type */
		pool_cfg_add(&cb, "log.guid=%" PRIu64 "\n", p->p_logtop.pt_guid);
		pool_cfg_add(&cb, "log.data_bytes=%" PRIu64 "\n", p->p_logtop.pt_data_bytes);
		pool_cfg_add(&cb, "log.children=%u\n", p->p_logtop.pt_nchildren);
		for (unsigned j = 0; j < p->p_logtop.pt_nchildren; j++) {
			pool_cfg_add(&cb, "log.child.%u.guid=%" PRIu64 "\n", j,
			             p->p_logtop.pt_leaves[j].pl_guid);
			pool_cfg_add(&cb, "log.child.%u.path=%s\n", j,
			             p->p_logtop.pt_leaves[j].pl_path);
			if (p->p_logtop.pt_leaves[j].pl_added_txg != 0)
				pool_cfg_add(&cb, "log.child.%u.added_txg=%" PRIu64 "\n", j,
				             p->p_logtop.pt_leaves[j].pl_added_txg);
		}
	}
	if (cb.cb_overflow)
		return -E2BIG;
	*len_out = (uint32_t)cb.cb_len;
	return 0;
}

/* Parses a decimal u64 that is the whole of s. */
static bool pool_parse_u64(const char *s, uint64_t *out)
{
	if (*s < '0' || *s > '9')
		return false;
	uint64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/* Parses "<n>.<rest>" at s: the index and where the rest starts. */
static bool pool_parse_index(const char *s, unsigned limit, unsigned *idx_out,
                             const char **rest_out)
{
	const char *dot = strchr(s, '.');
	if (!dot || dot == s || dot - s > 3)
		return false;
	char num[4];
	memcpy(num, s, (size_t)(dot - s));
	num[dot - s] = '\0';
	uint64_t v;
	if (!pool_parse_u64(num, &v) || v >= limit)
		return false;
	*idx_out = (unsigned)v;
	*rest_out = dot + 1;
	return true;
}

/* One top's (or the log's) key after "top.<i>." or "log.". */
static int pool_config_top_key(struct pool_top *t, bool *seen_children, const char *key,
                               const char *val)
{
	uint64_t v;
	if (strcmp(key, "guid") == 0)
		return pool_parse_u64(val, &t->pt_guid) && t->pt_guid != 0 ? 0 : -EINVAL;
	if (strcmp(key, "type") == 0) {
		if (strcmp(val, "disk") == 0)
			t->pt_mirror = false;
		else if (strcmp(val, "mirror") == 0)
			t->pt_mirror = true;
		else
			return -EINVAL;
		return 0;
	}
	if (strcmp(key, "data_bytes") == 0) {
		if (!pool_parse_u64(val, &v) || v == 0 || v % BLK_SECTOR_BYTES != 0)
			return -EINVAL;
		t->pt_data_bytes = v;
		return 0;
	}
	if (strcmp(key, "children") == 0) {
		if (*seen_children || !pool_parse_u64(val, &v) || v == 0 || v > BLK_MIRROR_MAX)
			return -EINVAL;
		t->pt_nchildren = (unsigned)v;
		*seen_children = true;
		return 0;
	}
	if (strncmp(key, "child.", 6) == 0) {
		unsigned j;
		const char *rest;
		if (!*seen_children || !pool_parse_index(key + 6, t->pt_nchildren, &j, &rest))
			return -EINVAL;
		struct pool_leaf *l = &t->pt_leaves[j];
		if (strcmp(rest, "guid") == 0)
			return pool_parse_u64(val, &l->pl_guid) && l->pl_guid != 0 ? 0 : -EINVAL;
		if (strcmp(rest, "path") == 0) {
			if (l->pl_path)
				return -EINVAL;
			l->pl_path = mem_strdup(val);
			return l->pl_path ? 0 : -ENOMEM;
		}
		if (strcmp(rest, "added_txg") == 0)
			return pool_parse_u64(val, &l->pl_added_txg) && l->pl_added_txg != 0 ? 0
			                                                                      : -EINVAL;
	}
	return -EINVAL;
}

static bool pool_config_top_complete(const struct pool_top *t)
{
	if (t->pt_guid == 0 || t->pt_data_bytes == 0 || t->pt_nchildren == 0)
		return false;
	if (t->pt_mirror ? t->pt_nchildren < 2 : t->pt_nchildren != 1)
		return false;
	for (unsigned j = 0; j < t->pt_nchildren; j++) {
		if (t->pt_leaves[j].pl_guid == 0 || !t->pt_leaves[j].pl_path)
			return false;
	}
	return true;
}

int pool_config_parse(struct pool *p, const char *text, uint32_t len)
{
	char *copy = mem_strndup(text, len);
	if (!copy)
		return -ENOMEM;
	int rc = 0;
	bool seen_version = false, seen_tops = false, seen_log = false, seen_name = false,
	     seen_guid = false;
	bool top_children[POOL_MAX_TOPS] = {false}, log_children = false;
	char *save = NULL;
	if (strlen(copy) != len) {
		rc = -EINVAL; /* a NUL inside the text */
		goto out;
	}
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq) {
			rc = -EINVAL;
			goto out;
		}
		*eq = '\0';
		const char *key = line, *val = eq + 1;
		uint64_t v;
		if (strcmp(key, "version") == 0) {
			if (!pool_parse_u64(val, &v) || v != POOL_FORMAT_VERSION) {
				log_error("pool: configuration format version %s is not %u", val,
				          POOL_FORMAT_VERSION);
				rc = -EINVAL;
				goto out;
			}
			seen_version = true;
		} else if (strcmp(key, "name") == 0) {
			if (!pool_name_valid(val, POOL_NAME_MAX)) {
				rc = -EINVAL;
				goto out;
			}
			snprintf(p->p_name, sizeof(p->p_name), "%s", val);
			seen_name = true;
		} else if (strcmp(key, "pool_guid") == 0) {
			if (!pool_parse_u64(val, &p->p_guid) || p->p_guid == 0) {
				rc = -EINVAL;
				goto out;
			}
			seen_guid = true;
		} else if (strcmp(key, "created_ns") == 0) {
			if (!pool_parse_u64(val, &p->p_created_ns)) {
				rc = -EINVAL;
				goto out;
			}
		} else if (strcmp(key, "log_bytes") == 0) {
			if (!pool_parse_u64(val, &v) || v % BLK_SECTOR_BYTES != 0) {
				rc = -EINVAL;
				goto out;
			}
			p->p_log_config_bytes = v;
		} else if (strcmp(key, "tops") == 0) {
			if (seen_tops || !pool_parse_u64(val, &v) || v == 0 || v > POOL_MAX_TOPS) {
				rc = -EINVAL;
				goto out;
			}
			p->p_tops = mem_zalloc((size_t)v * sizeof(*p->p_tops));
			if (!p->p_tops) {
				rc = -ENOMEM;
				goto out;
			}
			p->p_ntops = (unsigned)v;
			seen_tops = true;
		} else if (strncmp(key, "top.", 4) == 0) {
			unsigned i;
			const char *rest;
			if (!seen_tops || !pool_parse_index(key + 4, p->p_ntops, &i, &rest)) {
				rc = -EINVAL;
				goto out;
			}
			rc = pool_config_top_key(&p->p_tops[i], &top_children[i], rest, val);
			if (rc != 0)
				goto out;
		} else if (strcmp(key, "log.type") == 0) {
			if (seen_log) {
				rc = -EINVAL;
				goto out;
			}
			seen_log = true;
			if (strcmp(val, "none") == 0) {
				p->p_has_log = false;
			} else {
				p->p_has_log = true;
				rc = pool_config_top_key(&p->p_logtop, &log_children, "type", val);
				if (rc != 0)
					goto out;
			}
		} else if (strncmp(key, "log.", 4) == 0) {
			if (!seen_log || !p->p_has_log) {
				rc = -EINVAL;
				goto out;
			}
			rc = pool_config_top_key(&p->p_logtop, &log_children, key + 4, val);
			if (rc != 0)
				goto out;
		} else {
			rc = -EINVAL;
			goto out;
		}
	}
	if (!seen_version || !seen_name || !seen_guid || !seen_tops || !seen_log) {
		rc = -EINVAL;
		goto out;
	}
	for (unsigned i = 0; i < p->p_ntops; i++) {
		if (!pool_config_top_complete(&p->p_tops[i])) {
			rc = -EINVAL;
			goto out;
		}
	}
	if (p->p_has_log && !pool_config_top_complete(&p->p_logtop))
		rc = -EINVAL;
	if ((p->p_has_log && p->p_log_config_bytes != 0) ||
	    (!p->p_has_log && p->p_log_config_bytes == 0))
		rc = -EINVAL;
out:
	if (rc == -EINVAL)
		log_error("pool: a label's configuration does not parse");
	mem_free(copy);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The uberblock payload */

uint64_t pool_ub_payload_encode(const struct pool *p, const struct ilog_position *pos,
                                uint64_t time_ns, uint8_t out[BLK_UB_PAYLOAD_BYTES])
{
	memset(out, 0, BLK_UB_PAYLOAD_BYTES);
	memcpy(out, POOL_UB_MAGIC, 8);
	pool_put_le32(out + 8, POOL_FORMAT_VERSION);
	pool_put_le32(out + 12, p->p_log_vdev_index);
	pool_put_le64(out + 16, p->p_next_ds_id);
	pool_put_le64(out + 24, time_ns);
	pool_put_le64(out + 32, p->p_log_start);
	pool_put_le64(out + 40, p->p_log_bytes);
	ilog_position_encode(pos, out + 48);
	uint64_t guids[POOL_UB_STALE_MAX], digest;
	unsigned n = pool_stale_leaves(p, guids, &digest);
	pool_put_le32(out + 104, n);
	for (unsigned i = 0; i < n; i++)
		pool_put_le64(out + POOL_UB_STALE_OFF + 8 * i, guids[i]);
	return digest;
}

/* ---------------------------------------------------------------------------------------------
 * Leaves that missed writes */

const char *pool_dev_name(const struct blk_dev *d)
{
	const char *path = blk_dev_path(d);
	return path[0] ? path : "(a memory leaf)";
}


uint64_t pool_stale_digest(const uint64_t *guids, unsigned n)
{
	return sh_hash64(guids, (size_t)n * sizeof(*guids), n);
}

/* The vdev child index of leaf j of t, or -1 when the leaf is missing. */
static int pool_leaf_child(const struct pool_top *t, unsigned j)
{
	if (!t->pt_vdev || !t->pt_leaves[j].pl_dev)
		return -1;
	for (unsigned c = 0; c < blk_vdev_children(t->pt_vdev); c++)
		if (blk_vdev_child(t->pt_vdev, c) == t->pt_leaves[j].pl_dev)
			return (int)c;
	return -1;
}

/* Calls fn for each mirror top-level vdev and the log vdev. */
static void pool_each_mirror(const struct pool *p, void (*fn)(const struct pool_top *t, void *arg),
                             void *arg)
{
	for (unsigned i = 0; i < p->p_ntops; i++)
		if (p->p_tops[i].pt_mirror)
			fn(&p->p_tops[i], arg);
	if (p->p_has_log && p->p_logtop.pt_mirror)
		fn(&p->p_logtop, arg);
}

struct pool_stale_list {
	uint64_t *sl_guids;
	unsigned sl_n;
	bool sl_overflow;
};

static void pool_stale_collect(const struct pool_top *t, void *arg)
{
	struct pool_stale_list *sl = arg;
	for (unsigned j = 0; j < t->pt_nchildren; j++) {
		int c = pool_leaf_child(t, j);
		if (c >= 0 && !blk_vdev_child_faulted(t->pt_vdev, (unsigned)c) &&
		    !blk_vdev_child_stale(t->pt_vdev, (unsigned)c))
			continue;
		if (sl->sl_n == POOL_UB_STALE_MAX) {
			sl->sl_overflow = true;
			return;
		}
		sl->sl_guids[sl->sl_n++] = t->pt_leaves[j].pl_guid;
	}
}

unsigned pool_stale_leaves(const struct pool *p, uint64_t guids[POOL_UB_STALE_MAX],
                           uint64_t *digest_out)
{
	struct pool_stale_list sl = {.sl_guids = guids};
	pool_each_mirror(p, pool_stale_collect, &sl);
	if (sl.sl_overflow)
		log_ratelimited(LOG_WARN, "pool %s: more than %u leaves missed writes: the record "
		                          "names the first %u",
		                p->p_name, POOL_UB_STALE_MAX, POOL_UB_STALE_MAX);
	if (digest_out)
		*digest_out = pool_stale_digest(guids, sl.sl_n);
	return sl.sl_n;
}

struct pool_stale_mark {
	const struct pool *sm_pool;
	const uint64_t *sm_guids;
	unsigned sm_n;
	uint64_t sm_ub_txg;
};

static void pool_stale_mark_top(const struct pool_top *t, void *arg)
{
	struct pool_stale_mark *sm = arg;
	unsigned current = 0;
	for (unsigned j = 0; j < t->pt_nchildren; j++) {
		int c = pool_leaf_child(t, j);
		if (c < 0)
			continue;
		bool listed = false;
		for (unsigned i = 0; i < sm->sm_n && !listed; i++)
			listed = sm->sm_guids[i] == t->pt_leaves[j].pl_guid;
		bool newer = t->pt_leaves[j].pl_added_txg > sm->sm_ub_txg;
		if (!listed && !newer) {
			current++;
			continue;
		}
		blk_vdev_set_stale(t->pt_vdev, (unsigned)c, true);
		if (newer)
			log_warn("pool %s: leaf %s was attached after txg %" PRIu64 " and holds none "
			         "of its blocks yet: it is read last until `shale pool check` has "
			         "copied them (resilvered)",
			         sm->sm_pool->p_name, pool_dev_name(t->pt_leaves[j].pl_dev),
			         sm->sm_ub_txg);
		else
			log_warn("pool %s: leaf %s missed writes while it was missing or faulted: "
			         "it is read last until `shale pool check` rewrites its copies",
			         sm->sm_pool->p_name, pool_dev_name(t->pt_leaves[j].pl_dev));
	}
	if (current == 0)
		log_error("pool %s: every present leaf of a mirror missed writes: blocks written "
		          "meanwhile may have no good copy here",
		          sm->sm_pool->p_name);
}

unsigned pool_ub_stale_decode(const uint8_t in[BLK_UB_PAYLOAD_BYTES],
                              uint64_t guids[POOL_UB_STALE_MAX])
{
	unsigned n = SH_MIN(pool_get_le32(in + 104), POOL_UB_STALE_MAX);
	for (unsigned i = 0; i < n; i++)
		guids[i] = pool_get_le64(in + POOL_UB_STALE_OFF + 8 * i);
	return n;
}

/* Import: marks as stale the present leaves the uberblock's payload lists (hostile bytes: the
 * count is bounded, unknown guids are ignored) and those attached after its txg, ub_txg (they
 * hold nothing of that state: pool_vdev.c), and remembers the list as written. */
static void pool_stale_apply(struct pool *p, const uint8_t in[BLK_UB_PAYLOAD_BYTES],
                             uint64_t ub_txg)
{
	uint64_t guids[POOL_UB_STALE_MAX];
	unsigned n = pool_ub_stale_decode(in, guids);
	struct pool_stale_mark sm = {.sm_pool = p, .sm_guids = guids, .sm_n = n, .sm_ub_txg = ub_txg};
	pool_each_mirror(p, pool_stale_mark_top, &sm);
	p->p_stale_digest = pool_stale_digest(guids, n);
}

static void pool_stale_clear_top(const struct pool_top *t, void *arg)
{
	(void)arg;
	for (unsigned c = 0; c < blk_vdev_children(t->pt_vdev); c++)
		blk_vdev_set_stale(t->pt_vdev, c, false);
}

void pool_stale_clear_locked(struct pool *p)
{
	pool_each_mirror(p, pool_stale_clear_top, NULL);
}

static void pool_stale_find_top(const struct pool_top *t, void *arg)
{
	bool *found = arg;
	for (unsigned c = 0; c < blk_vdev_children(t->pt_vdev); c++)
		*found = *found || blk_vdev_child_stale(t->pt_vdev, c);
}

bool pool_has_stale_locked(struct pool *p)
{
	bool found = false;
	pool_each_mirror(p, pool_stale_find_top, &found);
	return found;
}

/* Decodes and checks the payload against the region the configuration implies. */
static int pool_ub_payload_decode(struct pool *p, const uint8_t in[BLK_UB_PAYLOAD_BYTES],
                                  struct ilog_position *pos, uint64_t *next_ds_id)
{
	if (memcmp(in, POOL_UB_MAGIC, 8) != 0) {
		log_error("pool %s: the uberblock payload has no pool magic", p->p_name);
		return -EIO;
	}
	uint32_t version = pool_get_le32(in + 8);
	if (version != POOL_FORMAT_VERSION) {
		log_error("pool %s: uberblock format version %u is not %u", p->p_name, version,
		          POOL_FORMAT_VERSION);
		return -EINVAL;
	}
	if (pool_get_le32(in + 12) != p->p_log_vdev_index ||
	    pool_get_le64(in + 32) != p->p_log_start || pool_get_le64(in + 40) != p->p_log_bytes) {
		log_error("pool %s: the uberblock's log region disagrees with the configuration",
		          p->p_name);
		return -EIO;
	}
	*next_ds_id = pool_get_le64(in + 16);
	if (*next_ds_id == 0 || ilog_position_decode(in + 48, pos) != 0) {
		log_error("pool %s: the uberblock payload is damaged", p->p_name);
		return -EIO;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Assembling */

struct pool *pool_alloc(const struct pool_open_opts *opts)
{
	struct pool *p = mem_zalloc(sizeof(*p));
	if (!p)
		return NULL;
	pool_opts_defaults(opts, &p->p_opts);
	p->p_compress = pool_compress_resolve(NULL, p->p_opts.po_compress == POOL_COMPRESS_DEFAULT
	                                                ? POOL_COMPRESS_LZ4
	                                                : p->p_opts.po_compress);
	VERIFY(pthread_mutex_init(&p->p_lock, NULL) == 0);
	VERIFY(pthread_mutex_init(&p->p_state_lock, NULL) == 0);
	VERIFY(pthread_mutex_init(&p->p_snap_users_lock, NULL) == 0);
	pthread_condattr_t ca;
	VERIFY(pthread_condattr_init(&ca) == 0);
	VERIFY(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0);
	VERIFY(pthread_cond_init(&p->p_state_cv, &ca) == 0);
	pthread_condattr_destroy(&ca);
	atomic_init(&p->p_suspended, false);
	p->p_stale_digest = pool_stale_digest(NULL, 0);
	p->p_log_vdev_index = POOL_LOG_ON_LOG_VDEV;
	pool_bpmap_init(&p->p_mos_pin);
	pool_bpmap_init(&p->p_space_blocks);
	p->p_space_waiter.iw_done = pool_log_space_cb;
	p->p_space_waiter.iw_arg = p;
	return p;
}

static void pool_top_fini(struct pool_top *t)
{
	if (t->pt_vdev)
		blk_vdev_destroy(t->pt_vdev);
	t->pt_vdev = NULL;
	for (unsigned j = 0; j < BLK_MIRROR_MAX; j++) {
		struct pool_leaf *l = &t->pt_leaves[j];
		if (l->pl_owned && l->pl_dev)
			blk_dev_close(l->pl_dev);
		mem_free(l->pl_path);
		memset(l, 0, sizeof(*l));
	}
}

/* The pool closes the leaves it was given (owned) or leaves them to the caller. */
static void pool_leaves_own(struct pool *p, bool owned)
{
	for (unsigned i = 0; i < p->p_ntops; i++)
		for (unsigned j = 0; j < BLK_MIRROR_MAX; j++)
			p->p_tops[i].pt_leaves[j].pl_owned =
			    owned && p->p_tops[i].pt_leaves[j].pl_dev != NULL;
	for (unsigned j = 0; j < BLK_MIRROR_MAX; j++)
		p->p_logtop.pt_leaves[j].pl_owned =
		    owned && p->p_logtop.pt_leaves[j].pl_dev != NULL;
}

void pool_free_all(struct pool *p)
{
	/* Every read and write completes first (their callbacks may still reach owners). */
	if (p->p_engine)
		blk_engine_destroy(p->p_engine);
	p->p_engine = NULL;
	pool_ds_free_all(p);
	pool_log_cancel(p, -ECANCELED);
	btree_close(p->p_mos);
	pool_bpmap_fini(&p->p_mos_pin);
	space_close(p->p_space);
	pool_bpmap_fini(&p->p_space_blocks);
	arc_destroy(p->p_arc);
	for (unsigned i = 0; i < p->p_ntops; i++)
		pool_top_fini(&p->p_tops[i]);
	mem_free(p->p_tops);
	pool_top_fini(&p->p_logtop);
	mem_free(p->p_log_frame);
	pthread_cond_destroy(&p->p_state_cv);
	pthread_mutex_destroy(&p->p_state_lock);
	pthread_mutex_destroy(&p->p_snap_users_lock);
	pthread_mutex_destroy(&p->p_lock);
	mem_free(p);
}

/* The log region and the allocator's geometry, from the vdevs and p_log_config_bytes. */
static int pool_layout_derive(struct pool *p)
{
	p->p_nvdevs = 0;
	for (unsigned i = 0; i < p->p_ntops; i++)
		p->p_vdevs[p->p_nvdevs++] = p->p_tops[i].pt_vdev;
	if (p->p_has_log) {
		p->p_vdevs[p->p_nvdevs++] = p->p_logtop.pt_vdev;
		p->p_log_vdev = p->p_logtop.pt_vdev;
		p->p_log_vdev_index = POOL_LOG_ON_LOG_VDEV;
		p->p_log_start = blk_vdev_data_start(p->p_log_vdev);
		p->p_log_bytes = p->p_logtop.pt_data_bytes / BLK_SECTOR_BYTES * BLK_SECTOR_BYTES;
	} else {
		p->p_log_vdev = p->p_tops[0].pt_vdev;
		p->p_log_vdev_index = 0;
		p->p_log_start = blk_vdev_data_start(p->p_log_vdev);
		p->p_log_bytes = p->p_log_config_bytes;
	}
	if (p->p_log_bytes < ILOG_REGION_MIN)
		return -EINVAL;
	space_geometry_init(&p->p_geom);
	p->p_geom.sg_nvdevs = p->p_ntops;
	for (unsigned i = 0; i < p->p_ntops; i++) {
		uint64_t start = blk_vdev_data_start(p->p_tops[i].pt_vdev);
		uint64_t bytes = p->p_tops[i].pt_data_bytes;
		if (i == 0 && !p->p_has_log) {
			if (p->p_log_bytes >= bytes)
				return -EINVAL;
			start += p->p_log_bytes;
			bytes -= p->p_log_bytes;
		}
		p->p_geom.sg_vdevs[i].svg_start = start;
		p->p_geom.sg_vdevs[i].svg_bytes = bytes / BLK_SECTOR_BYTES * BLK_SECTOR_BYTES;
	}
	return 0;
}

/* The in-memory parts every open pool has: cache, log framing buffer. */
static int pool_open_common(struct pool *p)
{
	int rc = arc_create(p->p_opts.po_arc_max_bytes, &p->p_arc);
	if (rc != 0)
		return rc;
	p->p_log_frame = mem_alloc(ILOG_PAYLOAD_MAX);
	if (!p->p_log_frame)
		return -ENOMEM;
	return 0;
}

int pool_label_leaf(struct pool *p, const char *config, uint32_t config_len, uint64_t config_txg,
                    const struct pool_leaf *l, const struct pool_top *t, uint32_t top_index)
{
	struct blk_label *lb = mem_zalloc(sizeof(*lb));
	if (!lb)
		return -ENOMEM;
	lb->lb_pool_guid = p->p_guid;
	lb->lb_leaf_guid = l->pl_guid;
	lb->lb_top_guid = t->pt_guid;
	lb->lb_top_index = top_index;
	lb->lb_config_txg = config_txg;
	lb->lb_leaf_bytes = blk_dev_size(l->pl_dev);
	snprintf(lb->lb_pool_name, sizeof(lb->lb_pool_name), "%s", p->p_name);
	lb->lb_config_len = config_len;
	memcpy(lb->lb_config, config, config_len);
	int rc = blk_label_write(p->p_engine, l->pl_dev, lb);
	mem_free(lb);
	return rc;
}

static int pool_top_setup(struct pool *p, struct pool_top *t, struct blk_dev *const *devs,
                          unsigned n, bool mirror)
{
	int rc = pool_guid_new(&t->pt_guid);
	if (rc != 0)
		return rc;
	t->pt_mirror = mirror;
	t->pt_nchildren = n;
	for (unsigned j = 0; j < n; j++) {
		struct pool_leaf *l = &t->pt_leaves[j];
		rc = pool_guid_new(&l->pl_guid);
		if (rc != 0)
			return rc;
		const char *path = blk_dev_path(devs[j]);
		if (strchr(path, '\n'))
			return -EINVAL;
		l->pl_path = mem_strdup(path);
		if (!l->pl_path)
			return -ENOMEM;
		l->pl_dev = devs[j];
	}
	rc = blk_vdev_create(p->p_engine, devs, n, &t->pt_vdev);
	if (rc != 0)
		return rc;
	t->pt_data_bytes = blk_vdev_data_bytes(t->pt_vdev);
	return 0;
}

static int pool_create_impl(const struct pool_create_args *args, struct blk_dev *const *devs,
                            unsigned ndevs, struct blk_dev *const *log_devs, unsigned nlog,
                            bool owned, struct pool **out)
{
	*out = NULL;
	if (!args || !pool_name_valid(args->pc_name, POOL_NAME_MAX) || ndevs == 0 ||
	    nlog > BLK_MIRROR_MAX || (args->pc_opts && args->pc_opts->po_read_only))
		return -EINVAL;
	unsigned width = 1;
	if (args->pc_layout == POOL_LAYOUT_MIRROR) {
		width = args->pc_mirror_width ? args->pc_mirror_width : ndevs;
		if (width < 2 || width > BLK_MIRROR_MAX || ndevs % width != 0)
			return -EINVAL;
	} else if (args->pc_layout != POOL_LAYOUT_STRIPE) {
		return -EINVAL;
	}
	unsigned ntops = ndevs / width;
	if (ntops > POOL_MAX_TOPS)
		return -EINVAL;
	struct pool *p = pool_alloc(args->pc_opts);
	if (!p)
		return -ENOMEM;
	char *config = NULL;
	int rc = blk_engine_create(POOL_ENGINE_DEPTH, &p->p_engine);
	if (rc != 0)
		goto fail;
	snprintf(p->p_name, sizeof(p->p_name), "%s", args->pc_name);
	p->p_created_ns = clock_realtime_ns();
	p->p_config_txg = 1;
	rc = pool_guid_new(&p->p_guid);
	if (rc != 0)
		goto fail;
	p->p_tops = mem_zalloc(ntops * sizeof(*p->p_tops));
	if (!p->p_tops) {
		rc = -ENOMEM;
		goto fail;
	}
	p->p_ntops = ntops;
	for (unsigned i = 0; i < ntops; i++) {
		rc = pool_top_setup(p, &p->p_tops[i], devs + i * width, width, width > 1);
		if (rc != 0)
			goto fail;
	}
	if (nlog > 0) {
		p->p_has_log = true;
		rc = pool_top_setup(p, &p->p_logtop, log_devs, nlog, nlog > 1);
		if (rc != 0)
			goto fail;
	} else {
		uint64_t area = p->p_tops[0].pt_data_bytes;
		uint64_t want = p->p_opts.po_log_region_bytes;
		if (want == 0)
			want =
			    SH_MIN(SH_MAX(area >> POOL_LOG_REGION_SHIFT, (uint64_t)ILOG_REGION_MIN),
			           POOL_LOG_REGION_MAX);
		want = want / BLK_SECTOR_BYTES * BLK_SECTOR_BYTES;
		if (want < ILOG_REGION_MIN || want > area / 2) {
			log_error("pool %s: vdev 0 is too small for a log region of %" PRIu64
			          " bytes",
			          p->p_name, want);
			rc = -EINVAL;
			goto fail;
		}
		p->p_log_config_bytes = want;
	}
	rc = pool_layout_derive(p);
	if (rc != 0)
		goto fail;
	config = mem_alloc(BLK_CONFIG_MAX_BYTES + 1);
	if (!config) {
		rc = -ENOMEM;
		goto fail;
	}
	uint32_t config_len;
	rc = pool_config_build(p, config, &config_len);
	if (rc != 0)
		goto fail;
	for (unsigned i = 0; i < ntops && rc == 0; i++) {
		for (unsigned j = 0; j < p->p_tops[i].pt_nchildren && rc == 0; j++)
			rc = pool_label_leaf(p, config, config_len, 1, &p->p_tops[i].pt_leaves[j],
			                     &p->p_tops[i], i);
	}
	for (unsigned j = 0; p->p_has_log && j < p->p_logtop.pt_nchildren && rc == 0; j++)
		rc = pool_label_leaf(p, config, config_len, 1, &p->p_logtop.pt_leaves[j],
		                     &p->p_logtop, UINT32_MAX);
	if (rc != 0)
		goto fail;
	rc = pool_open_common(p);
	if (rc != 0)
		goto fail;
	rc = space_create(&p->p_geom, &p->p_space);
	if (rc != 0)
		goto fail;
	struct btree_config mcfg;
	pool_mos_config(p, &mcfg);
	rc = btree_open(&mcfg, NULL, &p->p_mos);
	if (rc != 0)
		goto fail;
	rc = ilog_create(p->p_log_vdev, p->p_log_start, p->p_log_bytes, p->p_guid, &p->p_log);
	if (rc != 0)
		goto fail;
	struct ilog_stats ls;
	ilog_stats(p->p_log, &ls);
	p->p_log_next_lsn = ls.is_next_lsn;
	p->p_log_lsn_at_sync = p->p_log_next_lsn;
	p->p_next_ds_id = 1;
	p->p_open_txg = 1;
	rc = pool_sync_once(p, true); /* txg 1: the empty MOS, the allocator's first state */
	if (rc != 0)
		goto fail;
	rc = pool_sync_thread_start(p);
	if (rc != 0)
		goto fail;
	mem_free(config);
	pool_leaves_own(p, owned); /* on failure the caller keeps (and closes) them */
	log_info("pool %s: created (guid %" PRIu64 ", %u top-level vdev%s%s)", p->p_name, p->p_guid,
	         ntops, ntops == 1 ? "" : "s", p->p_has_log ? ", a log vdev" : "");
	*out = p;
	return 0;
fail:
	mem_free(config);
	if (p->p_log)
		ilog_close(p->p_log);
	p->p_log = NULL;
	pool_free_all(p);
	return rc;
}

int pool_create_on_devs(const struct pool_create_args *args, struct blk_dev *const *devs,
                        unsigned ndevs, struct blk_dev *const *log_devs, unsigned nlog_devs,
                        struct pool **out)
{
	return pool_create_impl(args, devs, ndevs, log_devs, nlog_devs, false, out);
}

int pool_create(const struct pool_create_args *args, struct pool **out)
{
	*out = NULL;
	if (!args || !args->pc_paths || args->pc_npaths == 0 ||
	    args->pc_npaths > POOL_MAX_TOPS * BLK_MIRROR_MAX ||
	    args->pc_nlog_paths > BLK_MIRROR_MAX ||
	    (args->pc_nlog_paths > 0 && !args->pc_log_paths))
		return -EINVAL;
	unsigned n = args->pc_npaths, nl = args->pc_nlog_paths;
	struct blk_dev **devs = mem_zalloc((n + nl + 1) * sizeof(*devs));
	if (!devs)
		return -ENOMEM;
	int rc = 0;
	unsigned opened = 0;
	for (; opened < n + nl; opened++) {
		const char *path =
		    opened < n ? args->pc_paths[opened] : args->pc_log_paths[opened - n];
		rc = blk_dev_open_file(path, args->pc_create_bytes, &devs[opened]);
		if (rc != 0) {
			log_error("pool %s: cannot open %s: %s",
			          args->pc_name ? args->pc_name : "?", path, sh_strerror(rc));
			break;
		}
	}
	/* With pc_create_bytes, the files [0, opened) are ours: removed again on failure. */
	unsigned created = args->pc_create_bytes > 0 ? opened : 0;
	if (rc == 0)
		rc = pool_create_impl(args, devs, n, devs + n, nl, true, out);
	if (rc != 0) {
		for (unsigned i = 0; i < opened; i++)
			blk_dev_close(devs[i]);
		for (unsigned i = 0; i < created; i++)
			(void)unlink(i < n ? args->pc_paths[i] : args->pc_log_paths[i - n]);
	}
	mem_free(devs);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Import */

struct pool_found_leaf {
	struct blk_dev *fl_dev;
	struct blk_label *fl_label;
	bool fl_used;                 /* a leaf of the configuration: */
	const struct pool_leaf *fl_leaf; /* which one */
	const struct pool_top *fl_top;
	uint32_t fl_top_index;
};

/* Finds the leaf with guid among found and puts it into l. */
static void pool_import_match(struct pool_found_leaf *found, unsigned n, struct pool_leaf *l,
                              const struct pool_top *t, uint32_t top_index)
{
	for (unsigned k = 0; k < n; k++) {
		struct blk_label *lb = found[k].fl_label;
		if (!found[k].fl_used && lb->lb_leaf_guid == l->pl_guid &&
		    lb->lb_top_guid == t->pt_guid && lb->lb_top_index == top_index) {
			found[k].fl_used = true;
			found[k].fl_leaf = l;
			found[k].fl_top = t;
			found[k].fl_top_index = top_index;
			l->pl_dev = found[k].fl_dev;
			return;
		}
	}
}

/* Import, once the pool is up: leaves whose labels hold an older configuration (a change of the
 * vdevs, pool_vdev.c, cut short) get the current one. A failure is only logged: the leaves
 * that have it still name the pool's configuration. */
static void pool_import_relabel(struct pool *p, const struct pool_found_leaf *found, unsigned n,
                                const struct blk_label *best)
{
	for (unsigned k = 0; k < n; k++) {
		if (!found[k].fl_used || found[k].fl_label->lb_config_txg >= best->lb_config_txg)
			continue;
		int rc = pool_label_leaf(p, best->lb_config, best->lb_config_len,
		                         best->lb_config_txg, found[k].fl_leaf, found[k].fl_top,
		                         found[k].fl_top_index);
		if (rc != 0)
			log_warn("pool %s: cannot bring the labels of %s up to date: %s", p->p_name,
			         pool_dev_name(found[k].fl_dev), sh_strerror(rc));
		else
			log_info("pool %s: labels of %s brought up to the configuration of txg %" PRIu64,
			         p->p_name, pool_dev_name(found[k].fl_dev), best->lb_config_txg);
	}
}

static int pool_import_top(struct pool *p, struct pool_top *t, const char *what)
{
	struct blk_dev *present[BLK_MIRROR_MAX];
	unsigned n = 0;
	for (unsigned j = 0; j < t->pt_nchildren; j++) {
		if (t->pt_leaves[j].pl_dev)
			present[n++] = t->pt_leaves[j].pl_dev;
		else
			log_warn("pool %s: %s: leaf %s (guid %" PRIu64 ") is missing", p->p_name,
			         what, t->pt_leaves[j].pl_path, t->pt_leaves[j].pl_guid);
	}
	if (n == 0) {
		log_error("pool %s: %s has none of its %u leaves: cannot import", p->p_name, what,
		          t->pt_nchildren);
		return -ENXIO;
	}
	if (n < t->pt_nchildren) {
		log_warn("pool %s: %s is degraded (%u of %u leaves)", p->p_name, what, n,
		         t->pt_nchildren);
		p->p_degraded = true;
	}
	int rc = blk_vdev_create(p->p_engine, present, n, &t->pt_vdev);
	if (rc != 0)
		return rc;
	if (blk_vdev_data_bytes(t->pt_vdev) < t->pt_data_bytes) {
		log_error("pool %s: %s: its leaves are smaller than when the pool was created",
		          p->p_name, what);
		return -EINVAL;
	}
	return 0;
}

static int pool_import_impl(struct blk_dev *const *devs, unsigned ndevs, bool owned,
                            const struct pool_open_opts *opts, struct pool **out)
{
	*out = NULL;
	if (!devs || ndevs == 0 || ndevs > POOL_MAX_TOPS * BLK_MIRROR_MAX + BLK_MIRROR_MAX)
		return -EINVAL;
	/* A read-only import reads leaves opened read only, so that nothing below the pool (a
	 * mirror's repair of a bad copy) writes either. */
	for (unsigned k = 0; opts && opts->po_read_only && k < ndevs; k++)
		if (!devs[k] || !blk_dev_read_only(devs[k]))
			return -EINVAL;
	struct pool *p = pool_alloc(opts);
	if (!p)
		return -ENOMEM;
	p->p_read_only = p->p_opts.po_read_only;
	struct pool_found_leaf *found = mem_zalloc(ndevs * sizeof(*found));
	struct blk_uberblock *ub = mem_zalloc(sizeof(*ub));
	struct blk_uberblock *cand = mem_zalloc(sizeof(*cand));
	int rc;
	if (!found || !ub || !cand) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = blk_engine_create(POOL_ENGINE_DEPTH, &p->p_engine);
	if (rc != 0)
		goto fail;
	/* 1. Labels: one pool, the newest configuration. */
	unsigned best_cfg = 0;
	for (unsigned k = 0; k < ndevs; k++) {
		found[k].fl_dev = devs[k];
		found[k].fl_label = mem_zalloc(sizeof(struct blk_label));
		if (!found[k].fl_label) {
			rc = -ENOMEM;
			goto fail;
		}
		rc = blk_label_read(p->p_engine, devs[k], found[k].fl_label);
		if (rc != 0) {
			log_error("pool: leaf %s has no valid pool label: %s",
			          pool_dev_name(devs[k]), sh_strerror(rc));
			goto fail;
		}
		if (found[k].fl_label->lb_pool_guid != found[0].fl_label->lb_pool_guid) {
			log_error("pool: leaves %s and %s belong to different pools",
			          pool_dev_name(devs[0]), pool_dev_name(devs[k]));
			rc = -EINVAL;
			goto fail;
		}
		if (found[k].fl_label->lb_config_txg > found[best_cfg].fl_label->lb_config_txg)
			best_cfg = k;
	}
	rc = pool_config_parse(p, found[best_cfg].fl_label->lb_config,
	                       found[best_cfg].fl_label->lb_config_len);
	if (rc != 0)
		goto fail;
	if (p->p_guid != found[0].fl_label->lb_pool_guid) {
		rc = -EINVAL;
		goto fail;
	}
	/* 2. Leaves into the configuration, vdevs over the present ones. */
	for (unsigned i = 0; i < p->p_ntops; i++)
		for (unsigned j = 0; j < p->p_tops[i].pt_nchildren; j++)
			pool_import_match(found, ndevs, &p->p_tops[i].pt_leaves[j], &p->p_tops[i],
			                  i);
	for (unsigned j = 0; p->p_has_log && j < p->p_logtop.pt_nchildren; j++)
		pool_import_match(found, ndevs, &p->p_logtop.pt_leaves[j], &p->p_logtop,
		                  UINT32_MAX);
	const struct blk_label *best_label = found[best_cfg].fl_label;
	p->p_config_txg = best_label->lb_config_txg;
	for (unsigned k = 0; k < ndevs; k++) {
		if (found[k].fl_used)
			continue;
		if (found[k].fl_label->lb_config_txg < best_label->lb_config_txg) {
			/* detached or replaced while missing, or its labels not wiped yet: the newer
			 * configuration the other leaves hold does not name it */
			log_warn("pool %s: leaf %s is no longer part of the pool (its labels are of "
			         "configuration txg %" PRIu64 ", the pool's of %" PRIu64 "): left out",
			         p->p_name, pool_dev_name(devs[k]), found[k].fl_label->lb_config_txg,
			         best_label->lb_config_txg);
			continue;
		}
		log_error("pool %s: leaf %s is not part of its configuration", p->p_name,
		          pool_dev_name(devs[k]));
		rc = -EINVAL;
		goto fail;
	}
	for (unsigned i = 0; i < p->p_ntops; i++) {
		char what[40];
		snprintf(what, sizeof(what), "top-level vdev %u", i);
		rc = pool_import_top(p, &p->p_tops[i], what);
		if (rc != 0)
			goto fail;
	}
	if (p->p_has_log) {
		rc = pool_import_top(p, &p->p_logtop, "the log vdev");
		if (rc != 0)
			goto fail;
	}
	rc = pool_layout_derive(p);
	if (rc != 0) {
		log_error("pool %s: the configuration's log region does not fit vdev 0", p->p_name);
		goto fail;
	}
	/* 3. The newest valid uberblock of any leaf. */
	bool have_ub = false;
	for (unsigned k = 0; k < ndevs; k++) {
		if (!found[k].fl_used)
			continue; /* a former leaf's state is not the pool's */
		int r = blk_uberblock_find_best(p->p_engine, devs[k], p->p_guid, cand);
		if (r == 0 && (!have_ub || cand->ub_txg > ub->ub_txg)) {
			*ub = *cand;
			have_ub = true;
		} else if (r != 0 && r != -ENOENT) {
			log_warn("pool %s: reading the uberblocks of %s: %s", p->p_name,
			         pool_dev_name(devs[k]), sh_strerror(r));
		}
	}
	if (!have_ub || ub->ub_nroots < 2) {
		log_error("pool %s: no valid uberblock on any leaf", p->p_name);
		rc = -EIO;
		goto fail;
	}
	struct ilog_position pos;
	rc = pool_ub_payload_decode(p, ub->ub_payload, &pos, &p->p_next_ds_id);
	if (rc != 0)
		goto fail;
	pool_stale_apply(p, ub->ub_payload, ub->ub_txg);
	/* 4. Metadata: the allocator, the MOS. */
	rc = pool_open_common(p);
	if (rc != 0)
		goto fail;
	rc = space_open(&p->p_geom, &ub->ub_roots[1], pool_space_load, p, &p->p_space);
	if (rc != 0) {
		log_error("pool %s: cannot load the allocator's state of txg %" PRIu64 ": %s",
		          p->p_name, ub->ub_txg, sh_strerror(rc));
		goto fail;
	}
	struct btree_config mcfg;
	pool_mos_config(p, &mcfg);
	rc = btree_open(&mcfg, &ub->ub_roots[0], &p->p_mos);
	if (rc == 0)
		rc = pool_mos_load(p);
	if (rc == 0) {
		pool_lock(p);
		rc = pool_destroy_load_queued(p);
		if (rc == 0)
			rc = pool_fq_load(p);
		pool_unlock(p);
	}
	if (rc != 0) {
		log_error("pool %s: cannot load the metadata tree of txg %" PRIu64 ": %s",
		          p->p_name, ub->ub_txg, sh_strerror(rc));
		goto fail;
	}
	p->p_open_txg = ub->ub_txg + 1;
	p->p_synced_txg = ub->ub_txg;
	/* 5. Replay (R6), then the log continues after what was replayed. Read only: the records
	 * are counted and stay for the next import; the log object exists for status, unwritten. */
	struct ilog_position end;
	rc = p->p_read_only ? pool_log_count_unreplayed(p, ub->ub_txg, &pos, &end)
	                    : pool_log_replay(p, ub->ub_txg, &pos, &end);
	if (rc != 0)
		goto fail;
	rc = ilog_open(p->p_log_vdev, p->p_log_start, p->p_log_bytes, p->p_guid, &end, &p->p_log);
	if (rc != 0)
		goto fail;
	struct ilog_stats ls;
	ilog_stats(p->p_log, &ls);
	p->p_log_next_lsn = ls.is_next_lsn;
	p->p_log_lsn_at_sync = p->p_log_next_lsn;
	if (!p->p_read_only) {
		/* Datasets being destroyed: their owners, then the sync thread goes on freeing
		 * them. */
		pool_destroy_attach_all(p);
		rc = pool_sync_thread_start(p);
		if (rc != 0)
			goto fail;
		/* The txg that records the replayed end (R6). */
		rc = pool_txg_wait_synced(p, p->p_open_txg);
		if (rc != 0) {
			log_error("pool %s: cannot write the first txg after import: %s",
			          p->p_name, sh_strerror(rc));
			goto fail;
		}
		pool_import_relabel(p, found, ndevs, best_label);
		pool_recv_fixup(p); /* receives a crash cut off */
	}
	for (unsigned k = 0; k < ndevs; k++) {
		if (owned && !found[k].fl_used)
			blk_dev_close(devs[k]); /* left out: the pool does not keep it */
		mem_free(found[k].fl_label);
	}
	mem_free(found);
	mem_free(ub);
	mem_free(cand);
	pool_leaves_own(p, owned); /* on failure the caller keeps (and closes) them */
	log_info("pool %s: imported%s at txg %" PRIu64 "%s", p->p_name,
	         p->p_read_only ? " read only" : "", p->p_synced_txg,
	         p->p_degraded ? " (degraded)" : "");
	*out = p;
	return 0;
fail:
	if (p->p_sync_thread_started)
		pool_sync_thread_stop(p);
	if (p->p_log)
		ilog_close(p->p_log);
	p->p_log = NULL;
	if (found)
		for (unsigned k = 0; k < ndevs; k++)
			mem_free(found[k].fl_label);
	mem_free(found);
	mem_free(ub);
	mem_free(cand);
	pool_free_all(p);
	return rc;
}

int pool_import_devs(struct blk_dev *const *devs, unsigned ndevs, const struct pool_open_opts *opts,
                     struct pool **out)
{
	return pool_import_impl(devs, ndevs, false, opts, out);
}

int pool_import(const char *const *paths, unsigned npaths, const struct pool_open_opts *opts,
                struct pool **out)
{
	*out = NULL;
	if (!paths || npaths == 0 || npaths > POOL_MAX_TOPS * BLK_MIRROR_MAX + BLK_MIRROR_MAX)
		return -EINVAL;
	struct blk_dev **devs = mem_zalloc(npaths * sizeof(*devs));
	if (!devs)
		return -ENOMEM;
	int rc = 0;
	unsigned opened = 0;
	const bool read_only = opts && opts->po_read_only;
	for (; opened < npaths; opened++) {
		rc = read_only ? blk_dev_open_file_read_only(paths[opened], &devs[opened])
		               : blk_dev_open_file(paths[opened], 0, &devs[opened]);
		if (rc != 0) {
			log_error("pool: cannot open %s: %s", paths[opened], sh_strerror(rc));
			break;
		}
	}
	if (rc == 0)
		rc = pool_import_impl(devs, npaths, true, opts, out);
	if (rc != 0)
		for (unsigned i = 0; i < opened; i++)
			blk_dev_close(devs[i]);
	mem_free(devs);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Closing */

static void pool_close_impl(struct pool *p, int waiting_status)
{
	pool_scrub_stop(p);
	pool_sync_thread_stop(p);
	pool_wake_throttled(p, -ECANCELED);
	/* Records still waiting for log space: after a successful export their changes are in the
	 * last txg (durable); otherwise they are lost with the rest of the open txg. */
	pool_log_cancel(p, waiting_status);
	if (p->p_log)
		ilog_close(p->p_log);
	p->p_log = NULL;
	pool_free_all(p);
}

int pool_export(struct pool *p)
{
	if (p->p_read_only) {
		pool_close_impl(p, -ECANCELED); /* nothing was changed, nothing to write */
		return 0;
	}
	pool_scrub_stop(p); /* before the last txg: a scrub's record goes into it */
	int rc = pool_txg_wait_synced(p, 0);
	if (rc == 0 && pool_is_suspended(p))
		rc = -EIO;
	pool_close_impl(p, rc == 0 ? 0 : -ECANCELED);
	return rc;
}

void pool_close(struct pool *p)
{
	if (p)
		pool_close_impl(p, -ECANCELED);
}
