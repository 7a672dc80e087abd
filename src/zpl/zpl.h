/* zpl.h: the pool's file-system object layer: POSIX files, directories, symlinks and devices kept
 * in one copy-on-write B+tree per dataset (btree.h) plus data blocks, executing the NFS-facing
 * operations of fs.h. The theory (model, key and record formats, restart rules) is at the top of
 * zpl.c.
 *
 * Model for callers:
 *   - A dataset is one btree the caller opened (and owns) with the configuration below, plus data
 *     blocks the caller stores and caches (struct zpl_env). zpl_format makes an empty file system
 *     in an empty tree; zpl_open attaches to a formatted one.
 *   - Every call is synchronous over memory and does no I/O and no locking: the caller serializes
 *     all calls on one struct zpl and its tree (one lock for both), as it does for the tree.
 *   - When an operation needs a block (a tree node or a data block) that is not in memory it
 *     returns -SH_ENEEDBLOCK naming the block in *missing_out, having changed nothing and
 *     produced no output the caller must keep. The caller loads the block into its cache and runs
 *     the same call again from the start, with the same inputs.
 *   - Cache contract: a block the caller reported as in memory during one zpl call (a tree node
 *     through the tree's bs_get, a data block through ze_get_block) must stay in memory until that
 *     call returns: eviction happens only between calls. (Operations look everything up first and
 *     mutate afterwards; this is what makes the mutations unable to miss.)
 *   - Written file data stays in memory ("dirty buffers") until zpl_sync, which the caller runs at
 *     each txg sync immediately before btree_sync, with no other zpl call in between: the tree's
 *     extent entries for dirty buffers sit in dirty tree nodes (always in memory) until zpl_sync
 *     fills them in, which is what keeps zpl_sync from missing.
 *   - Changes NFSv3 wants stable are made stable by the caller through its intent log, with the
 *     records zpl_record_encode produces (and, for UNSTABLE writes it logs only at COMMIT,
 *     zpl_record_encode_range); after a crash zpl_replay re-applies them.
 *
 * Errors are 0 or a negative errno (or -SH_E* code), as everywhere in Shale. */
#ifndef SHALE_ZPL_H
#define SHALE_ZPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "blk/blk.h"
#include "fs/fs.h"
#include "btree/btree.h"

/* ---------------------------------------------------------------------------------------------
 * The tree a dataset needs. The caller opens it with bc_key_max >= ZPL_KEY_MAX and bc_val_max >=
 * ZPL_VAL_MAX, which needs nodes of at least 8 KiB (btree_entry_max_bytes); ZPL_BTREE_TYPE is the
 * type byte the pool uses for dataset trees. */
#define ZPL_KEY_MAX 17u          /* objid(8) | kind(1) | hash or block index(8) */
#define ZPL_VAL_MAX 1152u        /* an inode record with a 1 KiB inline symlink target */
#define ZPL_BTREE_TYPE 0x5a      /* 'Z' */
#define ZPL_NODE_MIN_BYTES 8192u /* the smallest node size that fits ZPL_KEY_MAX + ZPL_VAL_MAX */

#define ZPL_RECORD_DEFAULT_BYTES (128u * 1024u) /* default record size of large files */
#define ZPL_LINK_MAX 65000u                /* most links to one object (as ext4): EMLINK beyond */
#define ZPL_READ_MAX_BYTES (1024u * 1024u) /* most bytes one READ returns */
#define ZPL_SYMLINK_INLINE_MAX 1024u       /* longer symlink targets go in data block 0 */
#define ZPL_ICACHE_MIN_ENTRIES 2048u        /* the inode cache (struct zpl_env) */
#define ZPL_ICACHE_MAX_ENTRIES (1u << 20)
#define ZPL_ICACHE_ENTRY_BYTES 192u
#define ZPL_OBJ_ID_BYTES 16u               /* object id (u64 LE) then generation (u64 LE) */
#define ZPL_ROOT_OBJID 2u                  /* object id of the root directory (1 is reserved) */
/* A regular file whose last link goes with more extents than this is not freed by that operation
 * but queued (zpl_reap.c); a zpl_reap call, and a step of a large truncation (-SH_EPARTIAL),
 * frees at most ZPL_REAP_STEP_EXTENTS extents. */
#define ZPL_REAP_INLINE_MAX 1024u
#define ZPL_REAP_STEP_EXTENTS 1024u

/* ---------------------------------------------------------------------------------------------
 * The environment: what the caller provides. Every callback gets ze_ctx first; none may call back
 * into this zpl or its tree. */
struct zpl_env {
	void *ze_ctx;
	/* The logical bytes (bp->bp_lsize of them) of the data block bp names, if the caller holds
	 * it in memory: sets *image_out and *hold_out, returns 0; the image stays valid and
	 * unchanged until ze_release(ctx, hold). Not in memory: -SH_ENEEDBLOCK (zpl hands bp to its
	 * caller, which loads the block and retries). Any other -errno (-EIO for a bad checksum)
	 * fails the operation with that code. */
	int (*ze_get_block)(void *ctx, const struct blk_ptr *bp, const void **image_out,
	                    void **hold_out);
	/* Ends a hold from ze_get_block. Holds taken during a call are released before it returns,
	 * except those handed out with READ data (struct fs_buf), which are released when the
	 * READ's consumer calls fb_release: possibly later, from another thread and without the
	 * caller's lock, so this callback must be thread-safe. */
	void (*ze_release)(void *ctx, void *hold);
	/* Called by zpl_sync only: writes (or queues for writing) a data block of lsize logical
	 * bytes (a multiple of 4 KiB, at most BLK_MAX_BLOCK_BYTES), which the callee copies
	 * (compressing, allocating, checksumming as it wishes; the buffer is reused when the call
	 * returns), and fills *bp_out with its pointer (not a hole; bp_lsize = lsize). Returns 0 or
	 * -errno (-ENOSPC, -EIO...): zpl_sync then stops and the data stays dirty. */
	int (*ze_write_block)(void *ctx, const void *data, uint32_t lsize, struct blk_ptr *bp_out);
	/* A data block that the dataset's in-memory state no longer references (replaced by
	 * zpl_sync, or its file truncated or removed). Called once per block. The block stays
	 * readable for older roots and for READ holds until the caller reuses it. */
	void (*ze_free_block)(void *ctx, const struct blk_ptr *bp);
	/* Space for FSSTAT: total, free, and available to this dataset, in bytes. Returns 0 or
	 * -errno (FSSTAT then fails with it). */
	int (*ze_space)(void *ctx, uint64_t *total_bytes, uint64_t *free_bytes,
	                uint64_t *avail_bytes);
	/* The current time (tests pass a fake clock). */
	void (*ze_now)(void *ctx, struct fs_time *now_out);
	uint64_t ze_fsid; /* reported in every attribute's fa_fsid */
	/* Entries of the inode cache (zpl_impl.h), rounded down to a power of two within
	 * [ZPL_ICACHE_MIN_ENTRIES, ZPL_ICACHE_MAX_ENTRIES]; 0: the minimum. Each takes
	 * ZPL_ICACHE_ENTRY_BYTES, allocated at the first operation. */
	uint32_t ze_icache_entries;
	/* May be NULL. Called by zpl_sync only, for a dirty buffer zpl_adopt marked: the caller
	 * already wrote bp (lsize logical bytes, equal to data) and offers it as the block; returns
	 * 0 when the block is now the dataset's to reference (the extent takes bp, which is later
	 * freed through ze_free_block like any data block), or -errno to have the buffer written as
	 * usual (ze_write_block). */
	int (*ze_adopt_block)(void *ctx, const struct blk_ptr *bp, const void *data);
	/* Sealing (zpl_seal_pick); both NULL, or both set. ze_write_sealed is called by zpl_sync
	 * only, for a dirty buffer with a sealed block attached (zpl_seal_attach): data is the
	 * buffer (lsize bytes, exactly those the block was prepared from). It writes the block as
	 * ze_write_block would write the buffer, and consumes sealed, on failure too. With
	 * may_take (nobody else holds the buffer), the callee may keep data itself (a mem_alloc
	 * buffer) instead of copying it, and then sets *taken_out on success: data stays readable
	 * until ze_free_block of *bp_out or the end of zpl_sync. ze_drop_seal frees a sealed block
	 * that will not be written (its buffer changed, left, or the zpl closes); called wherever
	 * the zpl's operations run. */
	int (*ze_write_sealed)(void *ctx, void *sealed, void *data, bool may_take, bool *taken_out,
	                       struct blk_ptr *bp_out);
	void (*ze_drop_seal)(void *ctx, void *sealed);
	/* May be NULL. The txg a change made now belongs to (numbers that only grow, whatever
	 * happens to the tree: a rollback to an older state keeps them growing). A new object's
	 * generation is then at least ZPL_GEN_OF_TXG(txg), so that no (object id, generation)
	 * handed out before a rollback is handed out again after it, as ZFS's z_gen is the txg. */
	uint64_t (*ze_txg)(void *ctx);
};
/* The least generation a create in txg may take: 2^24 generations per txg, more than the
 * creates one txg's dirty limit can hold (each costs a 128-byte inode and an entry). */
#define ZPL_GEN_TXG_SHIFT 24u
#define ZPL_GEN_OF_TXG(txg) ((txg) < (UINT64_MAX >> ZPL_GEN_TXG_SHIFT) ? (txg) << ZPL_GEN_TXG_SHIFT : 0)

struct zpl;

/* ---------------------------------------------------------------------------------------------
 * Life cycle */

/* Makes an empty file system in the empty tree: the dataset's meta record and the root directory
 * (object ZPL_ROOT_OBJID, generation 1) owned by root_owner's uid and gid with mode (07777 bits),
 * its times from ze_now. salt (NULL: random, from getrandom) seeds the directory-name hash; a
 * caller that wants two datasets to hash names alike (a test comparing a replayed copy) passes
 * the same value. The changes are in the tree, written by the caller's next btree_sync. Returns 0;
 * -EEXIST when the tree is not empty; -SH_ENEEDBLOCK (*missing_out filled; may be NULL only if
 * the tree is known to be all in memory); -ENOMEM, -EIO, or -EINVAL for a NULL argument. */
SH_MUST_CHECK int zpl_format(struct btree *tree, const struct zpl_env *env,
                             const struct fs_cred *root_owner, uint32_t mode, const uint64_t *salt,
                             struct blk_ptr *missing_out);

/* Attaches to the file system in tree (which the caller keeps open and owns; it must outlive the
 * zpl). env is copied. record_bytes is the block size of files larger than one block (0 means
 * ZPL_RECORD_DEFAULT_BYTES; otherwise a multiple of 4 KiB from 4 KiB to BLK_MAX_BLOCK_BYTES); it
 * may differ between opens, as it applies only to files that grow past one block afterwards.
 * Reads the meta record: returns 0 and *out; -SH_ENEEDBLOCK (*missing_out); -EINVAL for a bad
 * argument; -ENOENT for an unformatted tree; -EIO for a malformed or unknown-version meta record;
 * -ENOMEM. Destroy with zpl_close. */
SH_MUST_CHECK int zpl_open(struct btree *tree, const struct zpl_env *env, uint32_t record_bytes,
                           struct zpl **out, struct blk_ptr *missing_out);

/* Frees the zpl and its dirty buffers, discarding unsynced data (zpl_sync first to keep it).
 * READ data handed out stays valid until released. Does not close the tree. NULL is a no-op. */
void zpl_close(struct zpl *z);

/* The root directory's object id. */
void zpl_root(const struct zpl *z, struct fs_obj_id *root_out);

/* Static properties for FSINFO and PATHCONF. */
void zpl_info(const struct zpl *z, struct fs_info *info_out);
/* The inode cache's counters since zpl_open: lookups served from it, and those that walked the
 * tree; entries is its capacity. plan_bytes: what the operation plan's reusable arrays hold
 * between operations (bounded, however big the last operation was). */
struct zpl_cache_stats {
	uint64_t zcs_hits, zcs_misses;
	uint32_t zcs_entries;
	uint64_t zcs_plan_bytes;
};
void zpl_cache_stats(const struct zpl *z, struct zpl_cache_stats *out);
/* Empties the inode cache: for whoever changes inode records in the tree behind the zpl's back
 * (tests planting damage). */
void zpl_cache_forget(struct zpl *z);

/* ---------------------------------------------------------------------------------------------
 * Operations */

/* Runs req->fr_op (any FS_OP_*) against req's inputs for req->fr_cred, filling req's outputs as
 * fs.h documents. Does not call fs_req_complete or touch fr_done/fr_loop/fr_task/fr_fs.
 *
 * Returns:
 *   0: done. req->fr_status holds the operation's result: 0, or the error the NFS reply carries
 *      (-ENOENT, -EACCES, -ESTALE, -SH_EBADHANDLE, -SH_ENOTSYNC, -SH_EBADCOOKIE, -EIO for a
 *      malformed tree...). Output fields are filled as far as the operation got (wcc data and
 *      attributes also on most errors, with their valid flags).
 *   -SH_ENEEDBLOCK: *missing_out names the block to load; nothing changed, and no output (not
 *      even a READDIR entry emitted through rd_emit) needs to be kept: run the same request again.
 *   -SH_EPARTIAL: a truncation (SETATTR, or CREATE UNCHECKED with a size) that drops more extents
 *      than one step frees made one step: the first ZPL_REAP_STEP_EXTENTS extents past the new
 *      size are gone (the range reads as zeros; the size, times and everything else are as they
 *      were), committed like any change. No output needs to be kept: run the same request again
 *      (it takes the next step, and the last run makes the whole change and replies). So no one
 *      operation holds more than a step's extent leaves, whatever the file's size.
 * Nothing else. A READ hands out rd_buf, which the caller releases (fb_release) once done, also
 * when fb_len is 0.
 *
 * Permissions follow POSIX for fr_cred (see zpl_ops.c). WRITE always answers wr_committed =
 * FS_UNSTABLE: making the change stable is the caller's job (the intent log). COMMIT changes
 * nothing. After an internal failure in the middle of applying a change (-ENOMEM from the tree,
 * which cannot be undone), the zpl refuses every later operation with -EIO: the caller must
 * discard its in-memory state (close the tree unsynced and reopen at the last root, then replay
 * its log). */
SH_MUST_CHECK int zpl_execute(struct zpl *z, struct fs_req *req, struct blk_ptr *missing_out);
/* After zpl_execute missed *missing inside a scan of the tree (a directory's entries, a file's
 * extents): the nodes that scan will want next, to load with it (btree_scan_hints). */
size_t zpl_scan_hints(struct zpl *z, const struct blk_ptr *missing, struct blk_ptr *out,
                      size_t max);

/* Frees part of what removed files left (zpl_reap.c): the last link of a regular file with many
 * extents goes at once, but its blocks wait in a queue. One call frees up to a fixed number of
 * extents of the queue's first file (deleting the file when none is left), as one restartable
 * change like an operation's: 0 with *more_out true when it changed something (call again),
 * false when the queue is empty; -SH_ENEEDBLOCK (*missing_out; nothing changed); -EIO (a
 * malformed queue, or a failed zpl); -ENOMEM. The caller runs it under its lock like any call. */
SH_MUST_CHECK int zpl_reap(struct zpl *z, bool *more_out, struct blk_ptr *missing_out);
/* How many files operations (replay included) have queued since zpl_open: a caller that sees it
 * change has reaping to do. */
uint64_t zpl_reap_queued(const struct zpl *z);
/* What zpl_reap has done since zpl_open: files it finished (deleted) and extents it freed. */
void zpl_reap_stats(const struct zpl *z, uint64_t *files_out, uint64_t *extents_out);

/* Writes every dirty data buffer through ze_write_block (ze_write_sealed for a sealed one), stores the new block pointers in the
 * tree, frees the blocks they replace (ze_free_block) and forgets the buffers (READ holders keep
 * theirs). Never misses. The caller then runs btree_sync. *written_blocks_out (may be NULL) gets
 * the number of blocks written. Returns 0, or the first ze_write_block error or -ENOMEM: the
 * buffers not yet written stay dirty (a later zpl_sync writes them), those written are done. */
SH_MUST_CHECK int zpl_sync(struct zpl *z, uint64_t *written_blocks_out);

/* Block adoption (ZFS's dbuf override after dmu_sync): the caller wrote bp (bp_lsize logical
 * bytes, the same as data) to stand for bytes [off, off + bp_lsize) of obj, and a WRITE that
 * just committed put those bytes in obj's dirty buffers. When they are exactly one whole dirty
 * buffer (aligned, its size, byte for byte), that buffer is marked, and zpl_sync offers bp to
 * ze_adopt_block instead of writing the buffer again. Any later change of the buffer unmarks it.
 * True when marked. */
bool zpl_adopt(struct zpl *z, const struct fs_obj_id *obj, uint64_t off, const void *data,
               const struct blk_ptr *bp);

/* Sealing: preparing the dirty buffers' blocks (compression, checksum: the costly part of a
 * write) before zpl_sync, without the caller's lock, so that zpl_sync, which runs under it, has
 * little left to do (ze_write_sealed). zpl_seal_pick, under the lock, hands out dirty buffers
 * with no seal, each held: a held buffer is never edited in place (zpl_plan_block), so zs_data's
 * zs_size bytes stay as they are while the entry exists and may be read on any thread. The
 * caller prepares each (zs_sealed; NULL when it could not), then, under the lock again,
 * zpl_seal_attach attaches each sealed block to its buffer if that buffer is still its block's
 * dirty buffer, and releases the holds. Any later edit of a buffer drops its seal
 * (ze_drop_seal), so zpl_sync only writes sealed blocks that hold the buffer's current bytes.
 * *cursor (0 at first) carries the pick on from where the previous one stopped; returns the
 * number of entries filled (at most max, about max_bytes of buffers), 0 when no buffer is left
 * or the env has no sealing. */
struct zpl_seal {
	void *zs_buf;        /* the held buffer (zpl's) */
	const void *zs_data; /* its bytes */
	uint32_t zs_size;
	void *zs_sealed;     /* the caller's: its sealed block, or NULL */
};
size_t zpl_seal_pick(struct zpl *z, uint64_t *cursor, struct zpl_seal *v, size_t max,
                     uint64_t max_bytes);
/* Under the lock, with the zpl that picked them. Entries whose zs_sealed is still set afterwards
 * were not attached: their sealed blocks are the caller's to free. */
void zpl_seal_attach(struct zpl *z, struct zpl_seal *v, size_t n);
/* Releases the holds of entries whose zpl has closed since the pick (any thread). */
void zpl_seal_release(struct zpl_seal *v, size_t n);

/* Bytes of dirty data buffers zpl_sync has yet to write (the caller's dirty limit is its own). */
uint64_t zpl_dirty_bytes(const struct zpl *z);

/* ---------------------------------------------------------------------------------------------
 * Checking */

/* Walks the whole tree (loading every node and no data block through load(arg, bp), as
 * btree_check does) and verifies the file system's invariants (the numbered rules in zpl.c): the
 * tree itself (btree_check), the meta record, every record's format, every dirent pointing at an
 * existing inode of its stated type and hashed where its name says, nlink and entry counts,
 * directories' parents, extents only for regular files and long symlinks, inside the file's
 * block range and counted in the inode, no orphan inode except the object ids in open_objids
 * (nopen of them; may be NULL when nopen is 0), generations and object ids below the counters.
 * Returns 0 when sound; -EIO at the first violation, described in report (report_bytes bytes,
 * NUL-terminated; may be NULL when report_bytes is 0); or the error that stopped the walk
 * (-ENOMEM, load's error). Changes nothing. */
SH_MUST_CHECK int zpl_check(struct zpl *z, btree_load_fn load, void *arg,
                            const uint64_t *open_objids, size_t nopen, char *report,
                            size_t report_bytes);

/* ---------------------------------------------------------------------------------------------
 * Log records */

/* The bytes zpl_record_encode needs for req at most (a WRITE: its data plus a header). */
size_t zpl_record_bytes(const struct fs_req *req);

/* Encodes the change req made into a self-contained record: req must be a request that
 * zpl_execute completed with fr_status 0, unmodified since (the record takes the time it used and
 * the object it created from the outputs). Writes at most cap bytes to buf and sets *len_out.
 * Returns 0; -EOVERFLOW when cap is too small (*len_out says how many bytes are needed); -EINVAL
 * for an operation that changes nothing (GETATTR, LOOKUP, ACCESS, READLINK, READ, READDIR,
 * FSSTAT, COMMIT) or a request that is not a successful one. */
SH_MUST_CHECK int zpl_record_encode(const struct fs_req *req, void *buf, size_t cap,
                                    size_t *len_out);

/* Re-applies a record zpl_record_encode produced, as the operation did originally: same object
 * ids, generations and times, for the credential the record carries, without permission checks.
 * The caller guarantees each record is applied exactly once, in the original order, to the state
 * the original operation saw (the dataset as of the last txg, plus the records before it).
 * Returns 0; -SH_ENEEDBLOCK (*missing_out; nothing changed: retry); -EINVAL for a malformed record
 * (records are hostile: every length is checked); or the operation's error when the state does
 * not allow it (-ENOENT, -EEXIST, -ESTALE...: the log and the tree disagree). */
SH_MUST_CHECK int zpl_replay(struct zpl *z, const void *rec, size_t len,
                             struct blk_ptr *missing_out);
/* (zpl_replay also returns -SH_EPARTIAL as zpl_execute does: a step made; apply it again.) */

/* ---------------------------------------------------------------------------------------------
 * Logging unstable writes later (the caller's COMMIT; the model is in zpl_log.c) */

/* The bytes of the record zpl_record_encode_range makes for len data bytes. */
size_t zpl_record_range_bytes(uint32_t len);

/* Encodes into buf (cap bytes) a WRITE record that sets bytes [off, off + len) of regular file
 * obj to what they hold now, clipped to the file's size, timed with the file's ctime, for the
 * credential that clears the set-id bits exactly as the file has lost them (zpl_log.c). Changes
 * nothing. Returns 0 and *len_out (0: the range lies at or beyond the end of the file, no
 * record); -EOVERFLOW (*len_out: the bytes needed); -ESTALE or -SH_EBADHANDLE (no such object
 * now); -EINVAL (not a regular file); -SH_ENEEDBLOCK (*missing_out: an inode or a data block the
 * range needs is not in memory; data written since the last zpl_sync is always in memory); -EIO;
 * -ENOMEM. zpl_replay applies the record like any other. */
SH_MUST_CHECK int zpl_record_encode_range(struct zpl *z, const struct fs_obj_id *obj, uint64_t off,
                                          uint32_t len, void *buf, size_t cap, size_t *len_out,
                                          struct blk_ptr *missing_out);

/* ---------------------------------------------------------------------------------------------
 * Records that name blocks instead of carrying data (the caller's large stable writes and
 * COMMITs: zpl_log.c, "Records by block pointer")
 *
 * The data of such a record lives in blocks the caller wrote before appending the record and
 * keeps until the record can no longer be replayed. Block i holds the record's bytes from the sum
 * of the earlier blocks' bp_lsize on, bp_lsize of them; the lsizes add up to the record's length.
 * zpl_replay reads them through ze_get_block (-SH_ENEEDBLOCK names a block not in memory, as
 * always) and applies the record as the WRITE it stands for. */

#define ZPL_REC_BLOCKS_MAX 1024u                  /* block pointers in one record */
#define ZPL_REC_BLOCKS_MAX_BYTES (64u * 1024u * 1024u) /* data bytes one record names */

/* The bytes of a record naming nblocks blocks. */
size_t zpl_record_blocks_bytes(uint32_t nblocks);

/* Encodes the WRITE req made, as zpl_record_encode does (same conditions), but with its data
 * named by the nblocks blocks bps (their lsizes must add up to wr_len) instead of copied.
 * Returns 0; -EOVERFLOW (*len_out: the bytes needed); -EINVAL (not a successful WRITE, holes,
 * lengths that do not add up, too many blocks or bytes). */
SH_MUST_CHECK int zpl_record_encode_blocks(const struct fs_req *req, const struct blk_ptr *bps,
                                           uint32_t nblocks, void *buf, size_t cap,
                                           size_t *len_out);

/* Calls fn(arg, bp) for every block the record (as zpl_record_encode* made it) names: none for a
 * record that carries its data. Returns 0, fn's first error, or -EINVAL for a malformed record.
 * Changes nothing. */
SH_MUST_CHECK int zpl_record_visit_blocks(const void *rec, size_t len,
                                          int (*fn)(void *arg, const struct blk_ptr *bp),
                                          void *arg);

/* The object directory dir's entry `name` names, without permission checks (the caller uses it
 * to find the object a REMOVE, RENAME or CREATE by name will change): 0 with *obj_out, its type
 * and link count; -ENOENT (no such entry); -ESTALE or -SH_EBADHANDLE (no such directory);
 * -ENOTDIR; -EINVAL (a malformed name, "." or ".."); -SH_ENEEDBLOCK (*missing_out); -EIO;
 * -ENOMEM. Changes nothing. */
SH_MUST_CHECK int zpl_lookup_name(struct zpl *z, const struct fs_obj_id *dir, const char *name,
                                  struct fs_obj_id *obj_out, enum fs_type *type_out,
                                  uint32_t *nlink_out, struct blk_ptr *missing_out);

/* ---------------------------------------------------------------------------------------------
 * Differences between two states of a file system (zpl_diff.c, as zfs diff; the theory is there)
 *
 * Each state is a tree read into a struct zpl_diff_side, in steps, under the caller's lock for
 * that tree; zpl_diff then compares two sides read whole. */

struct zpl_diff_side;

/* An empty side: 0 and *out, or -ENOMEM. Destroy with zpl_diff_side_destroy (NULL: a no-op). */
SH_MUST_CHECK int zpl_diff_side_create(struct zpl_diff_side **out);
void zpl_diff_side_destroy(struct zpl_diff_side *side);

/* Reads up to max_records more records (0: no bound) of the file system in tree into side, from
 * where its last call stopped; every call must name the same tree. Returns 0 with *done_out true
 * when the tree has been read to its end (an unformatted tree reads as a file system with no
 * objects), false when the step's bound stopped it (call again); -SH_ENEEDBLOCK with
 * *missing_out (the records read so far stay read: load the block and call again); -EIO (a
 * record that does not decode); -ENOMEM (side is then of no further use but to destroy). */
SH_MUST_CHECK int zpl_diff_side_read(struct zpl_diff_side *side, struct btree *tree,
                                     uint32_t max_records, bool *done_out,
                                     struct blk_ptr *missing_out);

/* What changed about one path (zfs diff's letters). */
enum zpl_diff_kind {
	ZPL_DIFF_REMOVED = '-',
	ZPL_DIFF_RENAMED = 'R',  /* zde_path -> zde_new_path: the same object */
	ZPL_DIFF_MODIFIED = 'M', /* contents or attributes; a directory: its entries */
	ZPL_DIFF_CREATED = '+',
};
struct zpl_diff_entry {
	enum zpl_diff_kind zde_kind;
	const char *zde_path;     /* "/" then the names from the root down ("/" is the root) */
	const char *zde_new_path; /* ZPL_DIFF_RENAMED only, else NULL */
};
/* Called per entry in path order; the strings live during the call. A non-zero return stops the
 * walk, and zpl_diff returns it. */
typedef int (*zpl_diff_fn)(void *arg, const struct zpl_diff_entry *entry);

/* Compares two sides read to their end (from: the older state), calling fn per difference (the
 * rules are at the top of zpl_diff.c). Both sides remember what it learns of their names, so
 * comparing them again costs less. Returns 0, fn's value, -ENOMEM, or -EINVAL (a side not read
 * to its end). */
SH_MUST_CHECK int zpl_diff(struct zpl_diff_side *from, struct zpl_diff_side *to, zpl_diff_fn fn,
                           void *arg);

/* ---------------------------------------------------------------------------------------------
 * Test hooks */

/* Replaces the directory-name hash (NULL restores XXH3_64bits with the dataset's salt), so a test
 * can force collisions. The result is adjusted as every hash is (the low 16 bits become the
 * collision index). Only for a fresh or test dataset: names already stored under the other hash
 * are no longer found. */
void zpl_test_set_hash(struct zpl *z,
                       uint64_t (*hash)(const void *name, size_t len, uint64_t salt));

#endif
