/* space.h: the pool's space allocator: sector-aligned extents on the data area of every top-level
 * vdev, deferred reuse of freed space, a reserve for frees and the pool's own commits, and a
 * copy-on-write persistent state written as ordinary blocks during each txg's sync.
 *
 * Model for callers (the full theory and the on-disk tables are at the top of space.c):
 *   - Each vdev's data area is a bitmap of BLK_SECTOR_BYTES sectors, cut into metaslabs (the unit
 *     an allocation searches) and into bitmap chunks (the unit written to disk). The whole bitmap
 *     is kept in memory: one bit per 4 KiB, so 32 MiB of memory per TiB of pool.
 *   - space_alloc hands out space at once; space_free(txg) takes effect on disk in txg's state but
 *     the space is handed out again only after space_txg_durable(txg), so an older txg that a crash
 *     falls back to never finds its blocks overwritten.
 *   - space_sync(txg) writes the state of txg as blocks (through the pool's callbacks, which
 *     allocate from this same allocator) and returns the root block pointer for the uberblock.
 *     space_open loads it back at import. The blocks of the allocator's own tree are never marked
 *     in its bitmaps: space_open re-derives them from the tree, which is what lets a sync finish in
 *     one pass (see space.c).
 *   - Not thread-safe: the pool calls every function under its own lock. Callbacks run on the
 *     calling thread, inside space_sync / space_open / space_check.
 *
 * Offsets are absolute device offsets, as in blk_ptr.bp_offset, inside a vdev's data area
 * [svg_start, svg_start + svg_bytes). Lengths are bytes, multiples of BLK_SECTOR_BYTES.
 * Errors are 0 or a negative errno, as everywhere in Shale. */
#ifndef SHALE_SPACE_H
#define SHALE_SPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "blk/blk.h"

#define SPACE_MAX_VDEVS 64u /* top-level vdevs per pool; the root block lists all of them */
/* space_alloc: no preferred vdev; space_stats: the whole pool */
#define SPACE_VDEV_ANY UINT32_MAX

/* Defaults for struct space_geometry (space_geometry_init). */
#define SPACE_METASLAB_BYTES_DEFAULT (1ull << 30)     /* 1 GiB: ~1000 metaslabs per TiB */
#define SPACE_CHUNK_BYTES_DEFAULT 4096u               /* a chunk block maps 127 MiB */
#define SPACE_INDEX_CHUNKS_DEFAULT 255u               /* 64 + 255 * 64 = 16 KiB index blocks */
#define SPACE_RESERVE_SHIFT_DEFAULT 5u                /* reserve 1/32 of the pool... */
#define SPACE_RESERVE_MIN_BYTES_DEFAULT (16ull << 20) /* ...but at least 16 MiB (at most half) */

#define SPACE_CHUNK_HEADER_BYTES 32u /* of every chunk block; the rest is bitmap */
#define SPACE_SYNC_MAX_PASSES 4u     /* space_sync VERIFYs it finishes within this many passes */

/* Levels space_sync passes to ss_write, one per kind of block of the allocator's tree. */
#define SPACE_LEVEL_CHUNK 0u
#define SPACE_LEVEL_INDEX 1u
#define SPACE_LEVEL_ROOT 2u

struct space_vdev_geom {
	uint64_t svg_start; /* first byte of the data area (sector-aligned) */
	uint64_t svg_bytes; /* its length; rounded down to a whole sector */
};

/* The allocator's shape. Everything but the reserve is stored in the root block and must match it
 * at space_open; the reserve is policy, read from here each time. */
struct space_geometry {
	uint32_t sg_nvdevs;                               /* 1..SPACE_MAX_VDEVS */
	struct space_vdev_geom sg_vdevs[SPACE_MAX_VDEVS]; /* [0, sg_nvdevs) are meaningful */
	/* A sector multiple; the last metaslab of a vdev may be smaller. Also the largest single
	 * allocation. */
	uint64_t sg_metaslab_bytes;
	uint32_t sg_chunk_bytes;       /* bytes of a chunk block: a multiple of 8, from
	                                * SPACE_CHUNK_HEADER_BYTES + 8 to BLK_MAX_BLOCK_BYTES; each
	                                * covers (sg_chunk_bytes - SPACE_CHUNK_HEADER_BYTES) * 8
	                                * sectors */
	uint32_t sg_index_chunks;      /* chunk pointers per index block, 1..16383 */
	uint32_t sg_reserve_shift;     /* reserve total >> shift (0: no proportional part) */
	uint64_t sg_reserve_min_bytes; /* ...but at least this much; the reserve never exceeds half
	                                * of the pool */
};

/* Fills geom with the defaults above and no vdevs (sg_nvdevs = 0): the caller adds its vdevs. */
void space_geometry_init(struct space_geometry *geom);

/* How space_sync writes blocks. Every callback receives ss_ctx first and runs inside space_sync. */
struct space_store {
	void *ss_ctx;
	/* Writes (or queues for writing) image (image_bytes bytes, copied by the callee: the buffer
	 * is reused when the call returns) as a new block and fills *bp_out. The callee allocates
	 * the block's space with exactly one space_alloc on this allocator (class
	 * SPACE_CLASS_RESERVED: the allocator's own writes may use the reserve) of bp_out->bp_asize
	 * bytes at (bp_vdev, bp_offset); bp_lsize must be image_bytes and bp_birth_txg non-zero.
	 * space_sync then sets bp_level = level and bp_fill = fill itself (level: SPACE_LEVEL_*;
	 * fill: the allocated sectors a chunk records, or the non-hole pointers an index or root
	 * holds). Returns 0 or -errno (-ENOSPC, -EIO...): space_sync then fails with it; if the
	 * callee had allocated, it either frees the space (space_free with the syncing txg) or
	 * leaves it allocated, to be reported as a leak by space_check. */
	int (*ss_write)(void *ctx, const void *image, uint32_t image_bytes, uint8_t level,
	                uint64_t fill, struct blk_ptr *bp_out);
	/* May be NULL. Tells the pool that the allocator's tree no longer references bp (a chunk,
	 * index or root block that this sync replaced). The allocator has ALREADY recorded the
	 * deferred free of its space in the syncing txg: the callee must not space_free it (that
	 * would be refused as a double free); it only drops the block from its caches. Unlike
	 * btree_store.bs_free, where the pool frees. */
	void (*ss_free)(void *ctx, const struct blk_ptr *bp);
};

/* Reads the block bp names, verified against its checksum and decompressed, into buf, which has
 * room for exactly bytes = bp->bp_lsize bytes. Returns 0 or -errno (-EIO for a bad checksum). */
typedef int (*space_load_fn)(void *ctx, const struct blk_ptr *bp, void *buf, uint32_t bytes);

struct space;

/* A new allocator with every sector free (a new pool). Returns 0 and *sp_out; -EINVAL for a
 * geometry outside the limits above; -EFBIG when the root block would exceed BLK_MAX_BLOCK_BYTES
 * (a pool of more than about 500 TiB with the defaults); -ENOMEM. The root is written by the first
 * space_sync. Destroy with space_close. */
SH_MUST_CHECK int space_create(const struct space_geometry *geom, struct space **sp_out);

/* Loads the state a space_sync wrote, from its root pointer (taken from an uberblock), reading
 * every block synchronously through load(ctx, ...). The geometry must be the one the state was
 * written with (the pool keeps it in its configuration; the root repeats it and is checked against
 * it). The loaded txg counts as durable. Every byte read is checked: a root, index or chunk block
 * that is malformed, names blocks outside the data areas or overlapping one another, or disagrees
 * with the geometry gives -EIO (and a log line saying what); load's own errors are returned as
 * they are. Also -EINVAL (bad geometry, NULL or hole root), -EFBIG, -ENOMEM. Destroy with
 * space_close. */
SH_MUST_CHECK int space_open(const struct space_geometry *geom, const struct blk_ptr *root,
                             space_load_fn load, void *ctx, struct space **sp_out);

/* Frees the allocator and all its memory; unsynced changes are lost. NULL is a no-op. */
void space_close(struct space *sp);

/* ---------------------------------------------------------------------------------------------
 * Allocating and freeing */

enum space_class {
	SPACE_CLASS_NORMAL = 0,   /* file data and tree changes: refused inside the reserve */
	SPACE_CLASS_RESERVED = 1, /* frees' own tree updates, the intent log, and space_sync's
	                           * blocks: may use the reserve, so a full pool can still remove
	                           * files and commit txgs */
};

/* Allocates bytes (a sector multiple, at most sg_metaslab_bytes) of contiguous space. The vdev is
 * vdev_hint when it has room, else the vdev with the most free space (which spreads allocations
 * over the vdevs by free space); inside it, first fit from the cursor of the active metaslab, which
 * is the one with the most free space when it was chosen (so consecutive allocations are
 * contiguous). Returns 0 with *vdev_out and *offset_out; -ENOSPC when nothing fits (or, for
 * SPACE_CLASS_NORMAL, when the allocation would dig into the reserve); -EINVAL for a bad size or
 * class; -ENOMEM only inside ss_write. The space appears allocated in the state written by every
 * later space_sync (not by one already running). */
SH_MUST_CHECK int space_alloc(struct space *sp, enum space_class cls, uint32_t vdev_hint,
                              uint64_t bytes, uint32_t *vdev_out, uint64_t *offset_out);

/* Frees allocated space [offset, offset + bytes) of vdev because the trees of txg no longer
 * reference it. The state written by space_sync(T) for T >= txg shows it free; the allocator hands
 * it out again only after space_txg_durable(T) for some T >= txg. Any part of the range already
 * free or being freed, or belonging to the allocator's own tree, or outside the data area, is a
 * sign of a corrupt tree on disk: -EINVAL, logged, and nothing changes. -ENOMEM leaves nothing
 * changed either. */
SH_MUST_CHECK int space_free(struct space *sp, uint64_t txg, uint32_t vdev, uint64_t offset,
                             uint64_t bytes);

/* Marks [offset, offset + bytes) allocated: space that the persisted state shows free but that a
 * surviving structure uses (log replay claims the blocks that large writes logged by pointer).
 * Returns 0; -EEXIST when any part of it is allocated or being freed (nothing changes); -EINVAL for
 * a range outside the data area. Claims ignore the reserve (the data already exists). */
SH_MUST_CHECK int space_claim(struct space *sp, uint32_t vdev, uint64_t offset, uint64_t bytes);

/* Txg's uberblock is on stable storage: the space freed in txgs <= txg may now be handed out
 * again. Txgs after the last successful space_sync are clamped to it (their frees may not yet be
 * in a written state). */
void space_txg_durable(struct space *sp, uint64_t txg);

/* ---------------------------------------------------------------------------------------------
 * Persistence */

/* Writes the state of txg: every chunk whose bitmap changed (its new block replaces the old one,
 * which is freed in txg), then the index blocks and the root that point at them; on success
 * *root_out names the root (for the uberblock). The state written shows allocated every space
 * allocated before this call and not freed in a txg <= txg, except the allocator's own blocks.
 * When nothing changed since the last sync, nothing is written and the current root is returned.
 * txg must be at least the last synced txg and after the last durable one (else -EINVAL). On
 * failure (ss_write's error, -ENOMEM, or -EINVAL when ss_write breaks its contract) the state stays
 * dirty and intact, and a later space_sync writes what is left. */
SH_MUST_CHECK int space_sync(struct space *sp, uint64_t txg, const struct space_store *store,
                             struct blk_ptr *root_out);

/* True when there are changes space_sync has not written. */
bool space_is_dirty(const struct space *sp);

/* What the last successful space_sync did. */
struct space_sync_info {
	uint64_t si_txg;
	uint32_t si_passes;         /* passes that wrote something: 1 when ss_write behaves */
	uint32_t si_chunks_written; /* chunk blocks written */
	uint32_t si_chunks_holed;   /* chunks that became all free (a hole, nothing written) */
	uint32_t si_index_written;  /* index blocks written */
	uint32_t si_root_written;   /* root blocks written (0 when nothing changed) */
	uint64_t si_bytes_written;  /* logical bytes passed to ss_write */
};
void space_last_sync(const struct space *sp, struct space_sync_info *info_out);

/* ---------------------------------------------------------------------------------------------
 * Accounting and queries */

struct space_stats {
	uint64_t st_total_bytes;     /* the data area(s) */
	uint64_t st_allocated_bytes; /* allocated, not being freed (includes the allocator's own) */
	uint64_t st_freeing_bytes;   /* freed, waiting for their txg to be durable */
	uint64_t st_free_bytes;      /* allocatable now (for the pool: including the reserve) */
	uint64_t st_reserve_bytes;   /* the pool's reserve (0 for a single vdev's figures) */
};
/* Figures for one vdev, or for the whole pool with vdev = SPACE_VDEV_ANY. Returns 0 or -EINVAL. */
SH_MUST_CHECK int space_stats(const struct space *sp, uint32_t vdev, struct space_stats *stats_out);

enum space_range_state {
	SPACE_RANGE_FREE = 0,      /* every sector allocatable */
	SPACE_RANGE_ALLOCATED = 1, /* every sector allocated and not being freed */
	SPACE_RANGE_FREEING = 2,   /* every sector freed, waiting for its txg to be durable */
	SPACE_RANGE_MIXED = 3,     /* anything else */
};
/* The state of [offset, offset + bytes) of vdev. Returns 0, or -EINVAL for a bad range. */
SH_MUST_CHECK int space_query(const struct space *sp, uint32_t vdev, uint64_t offset,
                              uint64_t bytes, enum space_range_state *state_out);

/* ---------------------------------------------------------------------------------------------
 * Checking (`shale pool check`) */

struct space_check_report {
	uint64_t cr_leaked_bytes;    /* allocated (not being freed) but referenced by nothing */
	uint64_t cr_leaked_extents;  /* ...as maximal runs of sectors */
	uint64_t cr_double_refs;     /* marks that overlap an earlier mark */
	uint64_t cr_double_bytes;    /* ...the overlapping bytes */
	uint64_t cr_unalloc_refs;    /* marks of space that is free or being freed */
	uint64_t cr_unalloc_bytes;   /* ...the bytes not allocated */
	uint64_t cr_bad_refs;        /* marks outside every data area or misaligned */
	uint64_t cr_internal_errors; /* the allocator's own counters disagree with its bitmaps */
	char cr_first[192];          /* the first problem found, as text ("" when none) */
};

/* Called by space_check: marks every live block with space_check_mark(sp, ...) and returns 0, or
 * an -errno that stops the check. */
typedef int (*space_visit_fn)(void *arg, struct space *sp);

/* Checks that the live blocks and the allocated space agree: visit(arg, sp) names every block the
 * pool's trees reference; the allocator adds its own blocks. Fills *report; returns 0 when the
 * check ran (whatever it found: look at the report), visit's error, or -ENOMEM. Changes nothing. */
SH_MUST_CHECK int space_check(struct space *sp, space_visit_fn visit, void *arg,
                              struct space_check_report *report);
/* Inside visit: one live block. Problems go into the report; returns 0, or -EINVAL when no
 * space_check is running. */
SH_MUST_CHECK int space_check_mark(struct space *sp, uint32_t vdev, uint64_t offset,
                                   uint64_t bytes);

#endif
