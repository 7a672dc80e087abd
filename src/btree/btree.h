/* btree.h: the pool's generic copy-on-write B+tree: ordered byte-string keys to byte-string values,
 * stored as fixed-size node blocks named by block pointers. Inodes, directory entries, extent maps
 * and pool metadata all live in trees of this kind (the theory is at the top of btree.c).
 *
 * Model for callers:
 *   - A tree is opened at a root block pointer (or empty), changed in memory, and written out by
 *     btree_sync, which returns the new root. Nothing is written before btree_sync; a node that
 *     was on disk is never written over (copy on write), so the previous root stays readable
 *     until its blocks are reused.
 *   - The tree never blocks on I/O. When an operation needs a node that the store does not hold
 *     in memory, it returns -SH_ENEEDBLOCK and names the block in *missing_out. The caller reads
 *     the block into its cache (asynchronously), then retries the whole operation with the same
 *     arguments. An operation that returns -SH_ENEEDBLOCK has changed nothing (btree_scan may
 *     already have visited entries: see its contract).
 *   - Single-threaded: the tree takes no lock. Callers serialize every call on one tree
 *     (including read-only ones, which update the tree's private cache of checked nodes).
 *   - Bytes read from nodes are hostile: a malformed node makes the operation fail with -EIO and
 *     never crashes or reads outside the image.
 *
 * Errors are 0 or a negative errno (or -SH_ENEEDBLOCK), as everywhere in Shale. */
#ifndef SHALE_BTREE_H
#define SHALE_BTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "blk/blk.h"

#define BTREE_NODE_MIN_BYTES 1024u  /* smallest node: enough for 4 entries of a useful size */
#define BTREE_NODE_MAX_BYTES 65536u /* largest node: slot offsets are 16-bit */
#define BTREE_KEY_MAX 255u          /* key lengths are one byte on disk */
#define BTREE_MAX_LEVELS 32u        /* deepest tree; far beyond any real tree (see btree.c) */

/* ---------------------------------------------------------------------------------------------
 * The store: how the tree reaches node blocks, provided by the tree's owner (the pool, a test).
 * Every callback gets bs_ctx as its first argument; none may call back into the tree. */
struct btree_store {
	void *bs_ctx;
	/* The image of the clean node bp names, if the owner holds it in memory: sets *image_out to
	 * node_bytes readable bytes and *hold_out to a token, returns 0; the image stays valid and
	 * unchanged until bs_release(ctx, hold). If the block is not in memory: -SH_ENEEDBLOCK (the
	 * tree hands bp on to its caller, which loads the block and retries). Any other -errno
	 * (e.g. -EIO for a block whose checksum failed when it was read) fails the operation with
	 * that code. The tree only asks for pointers whose bp_lsize equals the node size. */
	int (*bs_get)(void *ctx, const struct blk_ptr *bp, const void **image_out, void **hold_out);
	/* Ends a hold taken by a successful bs_get. Called exactly once per such hold, before the
	 * tree call that took it returns. */
	void (*bs_release)(void *ctx, void *hold);
	/* Called by btree_sync only: writes (or queues for writing) the node image of image_bytes
	 * (= node_bytes) bytes, which the callee copies (the buffer is reused when the call
	 * returns), and fills *bp_out with the pointer that names it (the tree then sets
	 * bp_out->bp_level = level and bp_out->bp_fill = fill itself, whatever the callee left
	 * there; bp_lsize must be image_bytes and bp_birth_txg non-zero). level is the node's level
	 * (0 = leaf) and fill the number of entries below it. Returns 0, or -errno (-ENOSPC,
	 * -EIO...): btree_sync then fails and the tree stays dirty and intact. */
	int (*bs_write)(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
	                uint64_t fill, struct blk_ptr *bp_out);
	/* A block the tree no longer references: a clean node that was copied on write, a node that
	 * a delete removed, or a node merged into its sibling. Called once per block, at the moment
	 * the tree's in-memory state stops referencing it, never while the tree holds its image.
	 * The old blocks stay readable for the owner's purposes (e.g. an older root) until the
	 * owner reuses them. */
	void (*bs_free)(void *ctx, const struct blk_ptr *bp);
};

struct btree_config {
	uint32_t bc_node_bytes; /* a power of two, BTREE_NODE_MIN_BYTES..BTREE_NODE_MAX_BYTES (the
	                         * pool uses 16 KiB) */
	uint32_t bc_key_max;    /* longest key in bytes, 1..BTREE_KEY_MAX */
	uint32_t bc_val_max;    /* longest value in bytes (0 allowed) */
	uint8_t bc_type;        /* the tree's type byte, stored in every node header and checked on
	                         * every read, so a pointer into the wrong tree kind fails with -EIO */
	struct btree_store bc_store; /* copied by btree_open */
};

/* The most bytes of key plus value that node_bytes can take per entry (so that at least four
 * entries of that size fit in a leaf); a configuration is valid when key_max + val_max is at most
 * this and key_max + 64 (an internal node's entry) is too. For 16 KiB nodes: 4083. */
uint32_t btree_entry_max_bytes(uint32_t node_bytes);

struct btree;

/* Opens a tree at root (NULL or a hole: an empty tree; else the pointer btree_sync returned).
 * Nothing is read: the first node is loaded by the first operation that needs it. cfg is copied;
 * its node size, key and value maxima and type must be the ones the tree was written with, and
 * the store behind bs_ctx must outlive the tree. Returns 0 and *out, -EINVAL for an invalid
 * configuration, -EIO for a root pointer that cannot name a node of this configuration (wrong
 * size, level beyond BTREE_MAX_LEVELS, no entries), or -ENOMEM. Destroy with btree_close. */
SH_MUST_CHECK int btree_open(const struct btree_config *cfg, const struct blk_ptr *root,
                             struct btree **out);
/* Frees the tree and every dirty node, discarding unsynced changes (sync first to keep them). No
 * store callback is made: the blocks bs_free already named stay freed. NULL is a no-op. */
void btree_close(struct btree *t);

/* ---------------------------------------------------------------------------------------------
 * Operations. Keys are compared as memcmp over the common length, a shorter key that is a prefix of
 * a longer one sorting first (so the empty key is the smallest). key may be NULL when key_len is 0.
 * missing_out (may be NULL) receives the missing block on -SH_ENEEDBLOCK. Every operation may also
 * return -EIO (a malformed node, or the store's error) and the mutators -ENOMEM; after any error
 * the tree is unchanged. */

/* Looks key up and copies its value into val_out (val_cap bytes available; val_out may be NULL when
 * val_cap is 0). Returns 0 with *val_len_out = the value's length; -ENOENT; -EOVERFLOW when the
 * value is longer than val_cap (*val_len_out says how long; nothing copied); -SH_ENEEDBLOCK;
 * -EINVAL for key_len > key_max. val_len_out may be NULL. */
SH_MUST_CHECK int btree_lookup(struct btree *t, const void *key, uint32_t key_len, void *val_out,
                               uint32_t val_cap, uint32_t *val_len_out,
                               struct blk_ptr *missing_out);

enum btree_put_mode {
	BTREE_PUT_UPSERT = 0,  /* insert or replace */
	BTREE_PUT_NEW = 1,     /* insert; -EEXIST if key is present */
	BTREE_PUT_REPLACE = 2, /* replace; -ENOENT if key is absent */
};

/* Stores key -> val (both copied) according to mode. Returns 0, -EEXIST / -ENOENT per mode,
 * -SH_ENEEDBLOCK, -EINVAL (key_len > key_max or val_len > val_max), -ENOMEM, -EIO, or -EFBIG
 * when the tree would grow beyond BTREE_MAX_LEVELS. */
SH_MUST_CHECK int btree_put(struct btree *t, const void *key, uint32_t key_len, const void *val,
                            uint32_t val_len, enum btree_put_mode mode,
                            struct blk_ptr *missing_out);

/* Removes key. Returns 0, -ENOENT, -SH_ENEEDBLOCK, -EINVAL (key_len > key_max), -ENOMEM, -EIO. */
SH_MUST_CHECK int btree_delete(struct btree *t, const void *key, uint32_t key_len,
                               struct blk_ptr *missing_out);

/* Called by btree_scan for each entry in key order. key and val are valid only during the call;
 * the function must not call into this tree. Return true to go on, false to stop. */
typedef bool (*btree_visit_fn)(void *arg, const void *key, uint32_t key_len, const void *val,
                               uint32_t val_len);

/* Visits entries in key order starting at the first key >= start (after = false) or > start
 * (after = true); start may be NULL with start_len 0 (from the beginning) and may be any length
 * (it is a position, not a key). Returns 0 when the end was reached or visit returned false.
 *
 * Resumption contract: the scan can reach a node that is not in memory after it has already
 * visited entries. It then returns -SH_ENEEDBLOCK naming the block, and the entries visited so far
 * stay visited. The caller loads the block and calls btree_scan again starting from the last key
 * it was given, with after = true (or from its original start, with its original after, if nothing
 * was visited); the two calls together visit every entry exactly once, in order, provided the tree
 * was not changed in between. */
SH_MUST_CHECK int btree_scan(struct btree *t, const void *start, uint32_t start_len, bool after,
                             btree_visit_fn visit, void *arg, struct blk_ptr *missing_out);

/* After a btree_scan returned -SH_ENEEDBLOCK naming *missing: up to max nodes the scan will want
 * next (the siblings that follow the missing node under its parent, those not dirty), so that the
 * caller can load them together with it and restart the scan fewer times. Returns how many it
 * wrote to out (0 when the tree's last miss was not that scan's); the hints are consumed. */
#define BTREE_SCAN_HINTS_MAX 32u
size_t btree_scan_hints(struct btree *t, const struct blk_ptr *missing, struct blk_ptr *out,
                        size_t max);

/* Finds the entry with the greatest key <= key (key may be any length: a position), e.g. the
 * extent that contains an offset. Copies its key to key_out (key_cap bytes) and its value to
 * val_out (val_cap bytes); either buffer may be NULL when its capacity is 0, and key_len_out and
 * val_len_out may be NULL. Returns 0; -ENOENT when every key is greater (or the tree is empty);
 * -EOVERFLOW when either buffer is too small (both lengths are still reported, nothing is
 * copied); -SH_ENEEDBLOCK. */
SH_MUST_CHECK int btree_seek_le(struct btree *t, const void *key, uint32_t key_len, void *key_out,
                                uint32_t key_cap, uint32_t *key_len_out, void *val_out,
                                uint32_t val_cap, uint32_t *val_len_out,
                                struct blk_ptr *missing_out);
/* The entry with the greatest key: btree_seek_le above every key. -ENOENT when empty. */
SH_MUST_CHECK int btree_last(struct btree *t, void *key_out, uint32_t key_cap,
                             uint32_t *key_len_out, void *val_out, uint32_t val_cap,
                             uint32_t *val_len_out, struct blk_ptr *missing_out);

/* ---------------------------------------------------------------------------------------------
 * Writing out */

/* Writes every dirty node through bs_write, children before their parents (a parent holds its
 * children's pointers). On success the tree is clean and *root_out names it: its bp_fill is the
 * number of entries in the tree and its bp_level the root's level; an empty tree gives a hole (all
 * zero). A tree that is not dirty writes nothing and returns its current root. On failure (the
 * first bs_write error, returned as is) the tree stays dirty with the same contents: the nodes
 * already written are referenced by their (still dirty) parents, so a later btree_sync writes only
 * the rest. Reads nothing, allocates nothing, never returns -SH_ENEEDBLOCK. */
SH_MUST_CHECK int btree_sync(struct btree *t, struct blk_ptr *root_out);

/* Memory held by dirty nodes (images and bookkeeping), for the txg's dirty limit. */
uint64_t btree_dirty_bytes(const struct btree *t);
/* True when the tree has changes that btree_sync has not written (including a root that changed
 * without any dirty node, e.g. after a delete shrank the tree to a clean subtree). */
bool btree_is_dirty(const struct btree *t);

struct btree_stats {
	uint32_t bst_depth;       /* levels from the root to the leaves: 0 empty, 1 a lone leaf */
	uint64_t bst_entries;     /* entries in the tree (the root's fill) */
	uint64_t bst_dirty_nodes; /* nodes changed since the last sync */
	uint64_t bst_dirty_bytes; /* as btree_dirty_bytes */
};
void btree_stats(const struct btree *t, struct btree_stats *stats_out);

/* ---------------------------------------------------------------------------------------------
 * Offline checking */

/* Reads the block bp names into the store synchronously, so that the following bs_get succeeds.
 * Returns 0 or -errno. */
typedef int (*btree_load_fn)(void *arg, const struct blk_ptr *bp);

/* Walks the whole tree, dirty and clean nodes alike, loading every node the store lacks through
 * load(arg, bp), and verifies every invariant: node headers (magic, version, type, level, size),
 * slot and entry bounds, no overlapping entries, exact byte accounting, key order inside each node
 * and against the separators of every ancestor, empty first key in internal nodes, child levels,
 * and fills (each leaf's entry count, each internal node's sum, the root's total). Returns 0 when
 * the tree is sound; -EIO at the first violation, described in report (report_bytes bytes,
 * NUL-terminated, may be NULL when report_bytes is 0); or the error that stopped the walk (-ENOMEM,
 * or the load callback's error), also described in report. Does not change the tree. */
SH_MUST_CHECK int btree_check(struct btree *t, btree_load_fn load, void *arg, char *report,
                              size_t report_bytes);
/* btree_check that also calls node(node_arg, bp) for each clean node it verified (dirty nodes
 * have no block yet), in depth-first order: what a tree's blocks add up to. */
typedef void (*btree_node_fn)(void *arg, const struct blk_ptr *bp);
SH_MUST_CHECK int btree_check_nodes(struct btree *t, btree_load_fn load, void *arg,
                                    btree_node_fn node, void *node_arg, char *report,
                                    size_t report_bytes);

#endif
