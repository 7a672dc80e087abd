/* space.c: the pool's space allocator: bitmaps of every vdev's data area, deferred reuse of freed
 * space, the reserve, the copy-on-write persistent state, and the offline check.
 *
 * ================================================================================================
 * THEORY
 * ================================================================================================
 *
 * Problem. The pool writes every block to new space (copy-on-write) and makes a txg durable with
 * one atomic uberblock write. The allocator must hand out space fast, must never hand out space
 * that a txg a crash could fall back to still uses, and must persist its own state the same way as
 * everything else: as new blocks written during the txg's sync, reached from the uberblock, so that
 * after a crash the allocator's state is exactly the one of the txg the pool imports.
 *
 * Model.
 *   - Each top-level vdev's data area is an array of BLK_SECTOR_BYTES (4 KiB) sectors; sector i is
 *     bit i of the vdev's bitmap (v_map), 1 = not allocatable. The whole bitmap is in memory: 32
 *     MiB per TiB of pool. That is fine for the pools Shale targets now; a pool of hundreds of TiB
 *     would want ZFS-style range trees loaded per metaslab on demand instead.
 *   - The data area is cut into metaslabs of sg_metaslab_bytes (the last one may be smaller). Each
 *     keeps its free count and a cursor. An allocation works in the vdev's *active* metaslab, first
 *     fit from the cursor, so consecutive allocations come out contiguous; the active metaslab is
 *     replaced by the one with the most free space when it cannot satisfy a request or falls below
 *     a quarter free. Between vdevs: the caller's hint when it has room, else the vdev with the
 *     most free space (which spreads data over the vdevs by free space).
 *   - The bitmap is also cut into chunks of (sg_chunk_bytes - 32) * 8 sectors: the unit of
 *     persistence. A chunk whose bits change is dirty; space_sync writes each dirty chunk as one
 *     block (header + its bitmap words). An all-free chunk is a hole: no block at all.
 *   - Index blocks hold the pointers of sg_index_chunks consecutive chunks (numbered across vdevs
 *     in vdev order); the root block holds the geometry and the index blocks' pointers. A small
 *     three-level tree: root -> index -> chunk. With the defaults, a 16 KiB index block maps 31 GiB
 *     and the root fits one 1 MiB block up to about 500 TiB (past what the in-memory bitmaps
 *     allow anyway); a root listing the chunks directly would stop at 2 TiB.
 *
 * The sets. Every set bit of v_map belongs to exactly one of (Rule 1):
 *   A  allocated: by space_alloc, space_claim, or loaded from a chunk image at open;
 *   F  freeing: given to space_free(txg), each range tagged with its txg (sp_freeing lists, and
 *      per chunk a lazily allocated bitmap ck_freeing of all of F for quick checks);
 *   O  own: the blocks of the allocator's in-memory tree (root, index and chunk blocks), kept in
 *      the sorted array sp_own;
 *   P  pending: allocated inside an ss_write callback, not yet known to be that call's block.
 *
 * Numbered rules.
 *   1. A, F, O and P are disjoint and their union is the set bits of v_map.
 *   2. Space in F(t) returns to the free pool only in space_txg_durable(T) with T >= t: a crash
 *      before txg t is durable falls back to t - 1, whose trees may still use it.
 *   3. The image of chunk c written by space_sync(T) is (A u F(>T)) restricted to c: everything
 *      allocated except the allocator's own blocks and what was freed in T or before (P is empty
 *      whenever an image is built). Space freed
 *      in a later txg (by the open txg while T syncs) is still in use by T's trees, so T's state
 *      shows it allocated; such a chunk stays dirty for the next sync.
 *   4. O is never in any image. space_open rebuilds O from the tree it reads: root, index blocks
 *      and chunk blocks are marked allocated (and must not overlap the images or each other).
 *   5. A chunk is clean only if its image for the next sync equals the image its block holds.
 *      Operations that change A or F(<=T) outside O dirty the chunks they touch; operations that
 *      only move space between O, P and F(<= the syncing txg), and space_txg_durable (which only
 *      removes from F ranges that every later image already excludes), dirty nothing.
 *   6. Space allocated during space_alloc belongs to A at once; so a state written by
 *      space_sync(T) also shows allocated the space the pool allocated after T's trees were
 *      written but before space_sync(T) (e.g. the intent log's blocks): after a crash that space is
 *      leaked, never overwritten, and space_check reports it.
 *
 * Why a sync converges in one pass. Writing a chunk allocates its new block (P, then O) and frees
 * the block it replaces (O -> F(T)). By rules 3 and 4 neither changes any image, so no chunk
 * becomes dirty; the same holds for the index blocks and the root. So one pass writes every dirty
 * chunk, the index blocks that changed and the root, and the next pass finds nothing. The loop
 * exists for callbacks that allocate or free anything besides the block being written (a pool
 * bug, or a pool that allocates twice on purpose): each such change dirties a chunk, which the
 * next pass writes. A pass itself changes nothing, so the loop ends when the callbacks stop doing
 * that; space_sync VERIFYs it ends within SPACE_SYNC_MAX_PASSES.
 *
 * Crash consistency. Let T be the txg a crash falls back to. Its uberblock names the root written
 * by space_sync(T). Every block T's trees reference was allocated before space_sync(T) and not
 * freed in a txg <= T, so it is in that state (rule 3), or it is one of the allocator's own blocks
 * and is re-marked from the tree (rule 4). No block of T's state was reused: whatever T's trees or
 * T's space tree reference and a later txg freed is in F(>T), kept until a later txg is durable
 * (rule 2). Nothing freed in T or before shows allocated (rule 3), so nothing leaks except
 * rule 6's allocations.
 *
 * Growth. Vdevs are only ever appended (the pool's vdev add), and chunks are numbered across
 * vdevs in vdev order, so a state written for the first n vdevs is a prefix of the larger one:
 * space_open accepts a root that names fewer vdevs than the geometry (the first ones matching),
 * takes the others as all free (their chunks and index blocks holes), and marks dirty the root
 * and the index block that now maps more chunks, so the next sync writes the larger state.
 *
 * Errors. Freeing space that is not allocated, or already being freed, or part of the allocator's
 * own tree, is what a corrupt tree on disk produces: -EINVAL, logged, nothing changes. Every byte
 * read by space_open is hostile: nonsense gives -EIO, never an assert or a read out of bounds.
 *
 * Concurrency. None: the pool calls every function under its own lock. space_sync, space_open and
 * space_check call the caller's callbacks on the calling thread; ss_write calls back into
 * space_alloc (and perhaps space_free) of the same allocator, which is expected (sp_in_write).
 *
 * Memory. space_create / space_open allocate the bitmaps, per-metaslab and per-chunk state and one
 * scratch buffer; space_close frees everything. Free lists, ck_freeing bitmaps and the own array
 * grow on demand; the operations that grow them reserve first and commit after, so -ENOMEM leaves
 * nothing half done.
 *
 * ------------------------------------------------------------------------------------------------
 * ON-DISK FORMATS (all little-endian; every block is written through ss_write, which compresses
 * and checksums it; sizes below are logical sizes, which must match exactly on load)
 *
 * Root block: 64 + 32 * nvdevs + 64 * nindex bytes.
 *   offset  size  field
 *   0       8     magic "SHSPROOT"
 *   8       4     format version (1)
 *   12      4     nvdevs
 *   16      8     metaslab bytes
 *   24      4     chunk bytes
 *   28      4     chunk pointers per index block (K)
 *   32      8     txg of the sync that wrote it
 *   40      4     nindex = ceil(total chunks / K)
 *   44      4     reserved, 0
 *   48      8     allocated sectors in all chunk images
 *   56      8     reserved, 0
 *   64      32*n  per vdev: 0 u64 data start; 8 u64 data bytes; 16 u64 allocated sectors in its
 *                 chunk images; 24 u64 reserved, 0
 *   64+32n  64*i  index block pointers (64-byte block pointers, below; all zero = hole)
 *
 * Index block i: 64 + 64 * entries bytes, entries = min(K, total chunks - i * K).
 *   0       8     magic "SHSPINDX"
 *   8       4     format version (1)
 *   12      4     index number i
 *   16      4     entries
 *   20      4     reserved, 0
 *   24      8     txg of the sync that wrote it
 *   32      8     first chunk number (i * K)
 *   40      24    reserved, 0
 *   64      64*e  chunk block pointers, chunk numbers i*K.. (hole = all-free chunk)
 *   A hole index pointer means all its chunks are holes.
 *
 * Chunk block (vdev v, chunk c, covering nbits = min(C, sectors of v - c * C) sectors where
 * C = (chunk bytes - 32) * 8): 32 + 8 * ceil(nbits / 64) bytes.
 *   0       8     magic "SHSPCHNK"
 *   8       4     vdev index v
 *   12      4     chunk index c within the vdev
 *   16      4     nbits
 *   20      4     format version (1)
 *   24      8     allocated sectors (bits set below); never 0: an all-free chunk is a hole
 *   32      8*w   bitmap words: bit j of word k is sector c * C + 64 k + j of the vdev's data
 *                 area, 1 = allocated; bits past nbits are 0
 *   Chunks are numbered across the pool in vdev order: chunk c of vdev v is number
 *   (chunks of vdevs 0..v-1) + c.
 *
 * Block pointer, 64 bytes (the layout blk_bp.c uses; encoded here so that this module needs only
 * blk.h):
 *   0 u64 offset; 8 u32 vdev; 12 u32 asize; 16 u32 psize; 20 u32 lsize; 24 u8 compress;
 *   25 u8 checksum type; 26 u8 type; 27 u8 level; 28 u32 reserved (0); 32 u64 birth txg;
 *   40 u8[16] checksum; 56 u64 fill.   All zero: a hole.
 */
#include "space/space.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECTOR ((uint64_t)BLK_SECTOR_BYTES)
#define SPACE_FORMAT_VERSION 1u
#define ROOT_HEADER_BYTES 64u
#define ROOT_VDEV_BYTES 32u
#define INDEX_HEADER_BYTES 64u
#define BP_BYTES 64u
/* The active metaslab is given up when less than 1/4 of it is free: first fit in a nearly full
 * metaslab scans long and fragments; ZFS switches on a similar weight drop. */
#define MS_SWITCH_DIVISOR 4u
#define NO_METASLAB UINT32_MAX

static const char ROOT_MAGIC[8] = {'S', 'H', 'S', 'P', 'R', 'O', 'O', 'T'};
static const char INDEX_MAGIC[8] = {'S', 'H', 'S', 'P', 'I', 'N', 'D', 'X'};
static const char CHUNK_MAGIC[8] = {'S', 'H', 'S', 'P', 'C', 'H', 'N', 'K'};

/* A range of sectors of one vdev; se_bit is relative to the vdev's data area. */
struct space_extent {
	uint32_t se_vdev;
	uint64_t se_bit;
	uint64_t se_nbits;
};

/* The ranges freed in one txg (part of F). */
struct space_freeing {
	uint64_t sf_txg;
	struct space_extent *sf_ext;
	size_t sf_count;
	size_t sf_cap;
	bool sf_sorted; /* sf_ext sorted by (vdev, bit) */
};

struct space_chunk {
	struct blk_ptr ck_bp;        /* its block in the last written state; a hole when all free */
	uint64_t ck_count;           /* allocated sectors ck_bp's image records */
	uint64_t *ck_freeing;        /* F within the chunk (any txg); NULL when empty */
	uint64_t ck_freeing_bits;    /* bits set in ck_freeing */
	uint64_t ck_freeing_max_txg; /* >= the txg of every F range in the chunk */
	uint64_t ck_kept_gen;        /* sync generation that wrote it but kept it dirty (rule 3) */
	bool ck_dirty;               /* rule 5 */
};

struct space_metaslab {
	uint64_t ms_first;  /* first sector */
	uint64_t ms_nbits;  /* sectors */
	uint64_t ms_free;   /* clear bits */
	uint64_t ms_cursor; /* where the next first-fit search starts */
	/* No run of this many free sectors exists (a search failed). Allocations only shorten runs,
	 * so it stays true until space returns to the metaslab. */
	uint64_t ms_nofit;
};

struct space_vdev {
	uint64_t v_start;        /* absolute byte offset of sector 0 */
	uint64_t v_bytes;        /* as given (before rounding) */
	uint64_t v_nbits;        /* sectors */
	uint64_t *v_map;         /* A u F u O u P */
	uint64_t v_set_bits;     /* bits set in v_map */
	uint64_t v_freeing_bits; /* bits in F */
	uint32_t v_nms;
	uint32_t v_active; /* the active metaslab, or NO_METASLAB */
	struct space_metaslab *v_ms;
	uint32_t v_nchunks;
	uint32_t v_chunk_base; /* pool-wide number of its chunk 0 */
	struct space_chunk *v_chunks;
};

struct space {
	struct space_geometry sp_geom;
	uint32_t sp_nvdevs;
	struct space_vdev sp_vdevs[SPACE_MAX_VDEVS];
	uint64_t sp_chunk_bits; /* sectors per full chunk, a multiple of 64 */
	uint64_t sp_ms_bits;    /* sectors per full metaslab */
	uint64_t sp_total_bits;
	uint64_t sp_free_bits; /* clear bits, all vdevs */
	uint64_t sp_reserve_bits;

	uint32_t sp_nchunks; /* all vdevs */
	uint32_t sp_nindex;
	struct blk_ptr *sp_index; /* [sp_nindex] */
	bool *sp_index_dirty;     /* [sp_nindex] */
	struct blk_ptr sp_root;   /* a hole before the first sync */
	bool sp_root_dirty;

	struct space_extent *sp_own; /* O, sorted by (vdev, bit), disjoint */
	size_t sp_nown, sp_own_cap;
	struct space_extent *sp_pending; /* P */
	size_t sp_npending, sp_pending_cap;
	struct space_freeing *sp_freeing; /* F, one list per txg */
	size_t sp_nfreeing, sp_freeing_cap;

	uint64_t sp_last_sync_txg;
	uint64_t sp_durable_txg;

	uint8_t *sp_scratch;  /* image buffer: the largest of chunk, index and root */
	uint64_t *sp_words;   /* one chunk's bitmap words while building its image */
	bool sp_syncing;      /* inside space_sync */
	bool sp_in_write;     /* inside ss_write */
	uint64_t sp_sync_txg; /* valid while syncing */
	uint64_t sp_sync_gen; /* counts syncs, for ck_kept_gen */
	const struct space_store *sp_store;
	struct space_sync_info sp_info;      /* the running sync */
	struct space_sync_info sp_last_info; /* the last successful one */

	uint64_t *sp_check_ref[SPACE_MAX_VDEVS]; /* referenced sectors, during space_check */
	struct space_check_report *sp_check_rep;
	bool sp_checking;
};

/* ---------------------------------------------------------------------------------------------
 * Little-endian fields */

static void put_u32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static bool bp_is_hole(const struct blk_ptr *bp)
{
	return bp->bp_birth_txg == 0;
}

static void bp_encode(const struct blk_ptr *bp, uint8_t *out)
{
	blk_ptr_encode(bp, out);
}

/* Decodes a pointer read from disk (blk_ptr_decode's checks); -EIO for anything a writer could
 * not have produced. */
static int bp_decode(const uint8_t *in, struct blk_ptr *bp)
{
	return blk_ptr_decode(in, bp) == 0 ? 0 : -EIO;
}

/* ---------------------------------------------------------------------------------------------
 * Bitmaps */

static uint64_t words_for(uint64_t nbits)
{
	return (nbits + 63) / 64;
}

/* The bits [b, b + take) of one word, 0 < take <= 64 - b. */
static uint64_t word_mask(uint64_t b, uint64_t take)
{
	return (take == 64 ? ~0ull : ((1ull << take) - 1)) << b;
}

static void bits_set(uint64_t *map, uint64_t from, uint64_t n)
{
	while (n > 0) {
		uint64_t b = from % 64, take = SH_MIN(n, 64 - b);
		map[from / 64] |= word_mask(b, take);
		from += take;
		n -= take;
	}
}

static void bits_clear(uint64_t *map, uint64_t from, uint64_t n)
{
	while (n > 0) {
		uint64_t b = from % 64, take = SH_MIN(n, 64 - b);
		map[from / 64] &= ~word_mask(b, take);
		from += take;
		n -= take;
	}
}

static uint64_t bits_count(const uint64_t *map, uint64_t from, uint64_t n)
{
	uint64_t total = 0;
	while (n > 0) {
		uint64_t b = from % 64, take = SH_MIN(n, 64 - b);
		total += (uint64_t)__builtin_popcountll(map[from / 64] & word_mask(b, take));
		from += take;
		n -= take;
	}
	return total;
}

/* The first clear bit in [from, to), or to. */
static uint64_t bits_next_zero(const uint64_t *map, uint64_t from, uint64_t to)
{
	while (from < to) {
		uint64_t w = from / 64;
		uint64_t x = ~map[w] & (~0ull << (from % 64));
		if (x != 0) {
			uint64_t r = w * 64 + (uint64_t)__builtin_ctzll(x);
			return r < to ? r : to;
		}
		from = (w + 1) * 64;
	}
	return to;
}

/* The first set bit in [from, to), or to. */
static uint64_t bits_next_one(const uint64_t *map, uint64_t from, uint64_t to)
{
	while (from < to) {
		uint64_t w = from / 64;
		uint64_t x = map[w] & (~0ull << (from % 64));
		if (x != 0) {
			uint64_t r = w * 64 + (uint64_t)__builtin_ctzll(x);
			return r < to ? r : to;
		}
		from = (w + 1) * 64;
	}
	return to;
}

/* First fit: the first run of n clear bits starting in [from, to) and ending by to. */
static bool bits_find_run(const uint64_t *map, uint64_t from, uint64_t to, uint64_t n,
                          uint64_t *out)
{
	while (from < to && to - from >= n) {
		uint64_t start = bits_next_zero(map, from, to);
		if (to - start < n)
			return false;
		uint64_t end = bits_next_one(map, start, start + n);
		if (end - start >= n) {
			*out = start;
			return true;
		}
		from = end;
	}
	return false;
}

/* ---------------------------------------------------------------------------------------------
 * Small helpers */

static SH_MUST_CHECK int grow(void **arr, size_t *cap, size_t need, size_t elem_bytes)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap < 8 ? 8 : *cap * 2;
	while (ncap < need)
		ncap *= 2;
	void *n = mem_realloc(*arr, ncap * elem_bytes);
	if (n == NULL)
		return -ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

static uint64_t chunk_nbits(const struct space *sp, const struct space_vdev *v, uint32_t c)
{
	uint64_t first = (uint64_t)c * sp->sp_chunk_bits;
	return SH_MIN(sp->sp_chunk_bits, v->v_nbits - first);
}

static uint32_t chunk_image_bytes(uint64_t nbits)
{
	return (uint32_t)(SPACE_CHUNK_HEADER_BYTES + 8 * words_for(nbits));
}

static uint32_t index_entries(const struct space *sp, uint32_t i)
{
	uint32_t k = sp->sp_geom.sg_index_chunks;
	return SH_MIN(k, sp->sp_nchunks - i * k);
}

static uint32_t index_image_bytes(uint32_t entries)
{
	return INDEX_HEADER_BYTES + BP_BYTES * entries;
}

static uint64_t root_image_bytes(uint32_t nvdevs, uint32_t nindex)
{
	return ROOT_HEADER_BYTES + (uint64_t)ROOT_VDEV_BYTES * nvdevs + (uint64_t)BP_BYTES * nindex;
}

/* Pool-wide chunk number g (< sp_nchunks) -> its vdev and its chunk number there. Every vdev has
 * at least one chunk, so the bases strictly increase. */
static void chunk_locate(const struct space *sp, uint32_t g, uint32_t *vi_out, uint32_t *c_out)
{
	uint32_t vi = sp->sp_nvdevs - 1;
	while (g < sp->sp_vdevs[vi].v_chunk_base)
		vi--;
	*vi_out = vi;
	*c_out = g - sp->sp_vdevs[vi].v_chunk_base;
}

static struct space_chunk *chunk_at(struct space *sp, uint32_t g)
{
	uint32_t vi, c;
	chunk_locate(sp, g, &vi, &c);
	return &sp->sp_vdevs[vi].v_chunks[c];
}

/* (vdev, offset, bytes) from a caller -> sectors of that vdev; -EINVAL when outside its data area
 * or misaligned. */
static int range_to_bits(const struct space *sp, uint32_t vdev, uint64_t offset, uint64_t bytes,
                         uint64_t *bit_out, uint64_t *n_out)
{
	if (vdev >= sp->sp_nvdevs || bytes == 0 || offset % SECTOR != 0 || bytes % SECTOR != 0)
		return -EINVAL;
	const struct space_vdev *v = &sp->sp_vdevs[vdev];
	if (offset < v->v_start)
		return -EINVAL;
	uint64_t bit = (offset - v->v_start) / SECTOR, n = bytes / SECTOR;
	if (bit >= v->v_nbits || n > v->v_nbits - bit)
		return -EINVAL;
	*bit_out = bit;
	*n_out = n;
	return 0;
}

static void chunks_dirty(struct space *sp, struct space_vdev *v, uint64_t bit, uint64_t n)
{
	for (uint64_t c = bit / sp->sp_chunk_bits; c <= (bit + n - 1) / sp->sp_chunk_bits; c++) {
		v->v_chunks[c].ck_dirty = true;
		v->v_chunks[c].ck_kept_gen = 0;
	}
}

/* Keeps the metaslabs' free counts: n bits from bit were set (taken) or cleared. */
static void ms_account(struct space *sp, struct space_vdev *v, uint64_t bit, uint64_t n, bool taken)
{
	while (n > 0) {
		struct space_metaslab *ms = &v->v_ms[bit / sp->sp_ms_bits];
		uint64_t take = SH_MIN(n, ms->ms_first + ms->ms_nbits - bit);
		if (taken) {
			ASSERT(ms->ms_free >= take);
			ms->ms_free -= take;
		} else {
			ms->ms_free += take;
			ms->ms_nofit = UINT64_MAX;
		}
		bit += take;
		n -= take;
	}
}

/* F bits within [bit, bit + n) of v. */
static uint64_t freeing_count(const struct space *sp, const struct space_vdev *v, uint64_t bit,
                              uint64_t n)
{
	uint64_t total = 0;
	while (n > 0) {
		uint64_t c = bit / sp->sp_chunk_bits, first = c * sp->sp_chunk_bits;
		uint64_t take = SH_MIN(n, first + sp->sp_chunk_bits - bit);
		const struct space_chunk *ck = &v->v_chunks[c];
		if (ck->ck_freeing != NULL)
			total += bits_count(ck->ck_freeing, bit - first, take);
		bit += take;
		n -= take;
	}
	return total;
}

/* ---------------------------------------------------------------------------------------------
 * Extent arrays: O (sorted), P (unsorted), F lists (sorted on demand) */

/* The first extent of a sorted, disjoint array that ends after sector bit of vdev. */
static size_t ext_lower(const struct space_extent *a, size_t count, uint32_t vdev, uint64_t bit)
{
	size_t lo = 0, hi = count;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct space_extent *e = &a[mid];
		bool before =
		    e->se_vdev < vdev || (e->se_vdev == vdev && e->se_bit + e->se_nbits <= bit);
		if (before)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool ext_overlaps(const struct space_extent *e, uint32_t vdev, uint64_t bit, uint64_t n)
{
	return e->se_vdev == vdev && e->se_bit < bit + n && bit < e->se_bit + e->se_nbits;
}

static int ext_cmp(const void *a, const void *b)
{
	const struct space_extent *x = a, *y = b;
	if (x->se_vdev != y->se_vdev)
		return x->se_vdev < y->se_vdev ? -1 : 1;
	if (x->se_bit != y->se_bit)
		return x->se_bit < y->se_bit ? -1 : 1;
	return 0;
}

/* The index of the O extent overlapping the range, or SIZE_MAX. */
static size_t own_overlap(const struct space *sp, uint32_t vdev, uint64_t bit, uint64_t n)
{
	size_t i = ext_lower(sp->sp_own, sp->sp_nown, vdev, bit);
	if (i < sp->sp_nown && ext_overlaps(&sp->sp_own[i], vdev, bit, n))
		return i;
	return SIZE_MAX;
}

static SH_MUST_CHECK int own_reserve(struct space *sp, size_t extra)
{
	return grow((void **)&sp->sp_own, &sp->sp_own_cap, sp->sp_nown + extra,
	            sizeof(*sp->sp_own));
}

static void own_insert(struct space *sp, struct space_extent e)
{
	VERIFY(sp->sp_nown < sp->sp_own_cap);
	size_t i = ext_lower(sp->sp_own, sp->sp_nown, e.se_vdev, e.se_bit);
	memmove(&sp->sp_own[i + 1], &sp->sp_own[i], (sp->sp_nown - i) * sizeof(*sp->sp_own));
	sp->sp_own[i] = e;
	sp->sp_nown++;
}

static void own_remove(struct space *sp, size_t i)
{
	memmove(&sp->sp_own[i], &sp->sp_own[i + 1], (sp->sp_nown - i - 1) * sizeof(*sp->sp_own));
	sp->sp_nown--;
}

static size_t pending_find(const struct space *sp, uint32_t vdev, uint64_t bit, uint64_t n,
                           bool exact)
{
	for (size_t i = 0; i < sp->sp_npending; i++) {
		const struct space_extent *e = &sp->sp_pending[i];
		if (exact ? (e->se_vdev == vdev && e->se_bit == bit && e->se_nbits == n)
		          : ext_overlaps(e, vdev, bit, n))
			return i;
	}
	return SIZE_MAX;
}

static void pending_remove(struct space *sp, size_t i)
{
	sp->sp_pending[i] = sp->sp_pending[sp->sp_npending - 1];
	sp->sp_npending--;
}

static struct space_freeing *freeing_find(struct space *sp, uint64_t txg)
{
	for (size_t i = 0; i < sp->sp_nfreeing; i++)
		if (sp->sp_freeing[i].sf_txg == txg)
			return &sp->sp_freeing[i];
	return NULL;
}

/* Makes room so that freeing_commit of this range cannot fail. Changes nothing observable. */
static SH_MUST_CHECK int freeing_prepare(struct space *sp, uint64_t txg, uint32_t vdev,
                                         uint64_t bit, uint64_t n)
{
	struct space_freeing *f = freeing_find(sp, txg);
	if (f == NULL) {
		int rc = grow((void **)&sp->sp_freeing, &sp->sp_freeing_cap, sp->sp_nfreeing + 1,
		              sizeof(*sp->sp_freeing));
		if (rc != 0)
			return rc;
		f = &sp->sp_freeing[sp->sp_nfreeing++];
		memset(f, 0, sizeof(*f));
		f->sf_txg = txg;
		f->sf_sorted = true;
	}
	int rc = grow((void **)&f->sf_ext, &f->sf_cap, f->sf_count + 1, sizeof(*f->sf_ext));
	if (rc != 0)
		return rc;
	struct space_vdev *v = &sp->sp_vdevs[vdev];
	for (uint64_t c = bit / sp->sp_chunk_bits; c <= (bit + n - 1) / sp->sp_chunk_bits; c++) {
		struct space_chunk *ck = &v->v_chunks[c];
		if (ck->ck_freeing == NULL) {
			ck->ck_freeing = mem_zalloc(sp->sp_chunk_bits / 8);
			if (ck->ck_freeing == NULL)
				return -ENOMEM;
		}
	}
	return 0;
}

/* Moves [bit, bit + n) of vdev into F(txg). The bits are already set in v_map. */
static void freeing_commit(struct space *sp, uint64_t txg, uint32_t vdev, uint64_t bit, uint64_t n)
{
	struct space_freeing *f = freeing_find(sp, txg);
	VERIFY(f != NULL && f->sf_count < f->sf_cap);
	struct space_extent *last = f->sf_count > 0 ? &f->sf_ext[f->sf_count - 1] : NULL;
	if (last != NULL && last->se_vdev == vdev && last->se_bit + last->se_nbits == bit) {
		last->se_nbits += n;
	} else {
		struct space_extent e = {.se_vdev = vdev, .se_bit = bit, .se_nbits = n};
		if (last != NULL && ext_cmp(last, &e) > 0)
			f->sf_sorted = false;
		f->sf_ext[f->sf_count++] = e;
	}
	struct space_vdev *v = &sp->sp_vdevs[vdev];
	uint64_t b = bit, left = n;
	while (left > 0) {
		uint64_t c = b / sp->sp_chunk_bits, first = c * sp->sp_chunk_bits;
		uint64_t take = SH_MIN(left, first + sp->sp_chunk_bits - b);
		struct space_chunk *ck = &v->v_chunks[c];
		VERIFY(ck->ck_freeing != NULL);
		bits_set(ck->ck_freeing, b - first, take);
		ck->ck_freeing_bits += take;
		ck->ck_freeing_max_txg = SH_MAX(ck->ck_freeing_max_txg, txg);
		b += take;
		left -= take;
	}
	v->v_freeing_bits += n;
}

/* F -> free: the txg of the range is durable. */
static void freeing_release(struct space *sp, const struct space_extent *e)
{
	struct space_vdev *v = &sp->sp_vdevs[e->se_vdev];
	uint64_t b = e->se_bit, left = e->se_nbits;
	while (left > 0) {
		uint64_t c = b / sp->sp_chunk_bits, first = c * sp->sp_chunk_bits;
		uint64_t take = SH_MIN(left, first + sp->sp_chunk_bits - b);
		struct space_chunk *ck = &v->v_chunks[c];
		VERIFY(ck->ck_freeing != NULL && ck->ck_freeing_bits >= take);
		bits_clear(ck->ck_freeing, b - first, take);
		ck->ck_freeing_bits -= take;
		if (ck->ck_freeing_bits == 0) {
			mem_free(ck->ck_freeing);
			ck->ck_freeing = NULL;
			ck->ck_freeing_max_txg = 0;
		}
		b += take;
		left -= take;
	}
	bits_clear(v->v_map, e->se_bit, e->se_nbits);
	v->v_set_bits -= e->se_nbits;
	v->v_freeing_bits -= e->se_nbits;
	sp->sp_free_bits += e->se_nbits;
	ms_account(sp, v, e->se_bit, e->se_nbits, false);
}

/* Sets [bit, bit + n) of vdev, which are clear, in v_map (into A, or P inside ss_write). */
static void take_bits(struct space *sp, uint32_t vdev, uint64_t bit, uint64_t n, bool pending)
{
	struct space_vdev *v = &sp->sp_vdevs[vdev];
	bits_set(v->v_map, bit, n);
	v->v_set_bits += n;
	sp->sp_free_bits -= n;
	ms_account(sp, v, bit, n, true);
	if (pending) {
		VERIFY(sp->sp_npending < sp->sp_pending_cap);
		sp->sp_pending[sp->sp_npending++] =
		    (struct space_extent){.se_vdev = vdev, .se_bit = bit, .se_nbits = n};
	} else {
		chunks_dirty(sp, v, bit, n);
	}
}

/* ---------------------------------------------------------------------------------------------
 * Construction */

void space_geometry_init(struct space_geometry *geom)
{
	memset(geom, 0, sizeof(*geom));
	geom->sg_metaslab_bytes = SPACE_METASLAB_BYTES_DEFAULT;
	geom->sg_chunk_bytes = SPACE_CHUNK_BYTES_DEFAULT;
	geom->sg_index_chunks = SPACE_INDEX_CHUNKS_DEFAULT;
	geom->sg_reserve_shift = SPACE_RESERVE_SHIFT_DEFAULT;
	geom->sg_reserve_min_bytes = SPACE_RESERVE_MIN_BYTES_DEFAULT;
}

static int geom_check(const struct space_geometry *g)
{
	if (g->sg_nvdevs == 0 || g->sg_nvdevs > SPACE_MAX_VDEVS)
		return -EINVAL;
	if (g->sg_metaslab_bytes == 0 || g->sg_metaslab_bytes % SECTOR != 0)
		return -EINVAL;
	if (g->sg_chunk_bytes % 8 != 0 || g->sg_chunk_bytes < SPACE_CHUNK_HEADER_BYTES + 8 ||
	    g->sg_chunk_bytes > BLK_MAX_BLOCK_BYTES)
		return -EINVAL;
	if (g->sg_index_chunks == 0 ||
	    g->sg_index_chunks > (BLK_MAX_BLOCK_BYTES - INDEX_HEADER_BYTES) / BP_BYTES)
		return -EINVAL;
	if (g->sg_reserve_shift >= 64)
		return -EINVAL;
	uint64_t chunk_bits = (uint64_t)(g->sg_chunk_bytes - SPACE_CHUNK_HEADER_BYTES) * 8;
	uint64_t total_chunks = 0;
	for (uint32_t v = 0; v < g->sg_nvdevs; v++) {
		const struct space_vdev_geom *vg = &g->sg_vdevs[v];
		if (vg->svg_start % SECTOR != 0 || vg->svg_bytes < SECTOR ||
		    vg->svg_start + vg->svg_bytes < vg->svg_start)
			return -EINVAL;
		uint64_t nbits = vg->svg_bytes / SECTOR;
		total_chunks += (nbits + chunk_bits - 1) / chunk_bits;
		if (total_chunks > UINT32_MAX)
			return -EFBIG;
	}
	return 0;
}

static int space_build(const struct space_geometry *geom, struct space **sp_out)
{
	int rc = geom_check(geom);
	if (rc != 0)
		return rc;
	struct space *sp = mem_zalloc(sizeof(*sp));
	if (sp == NULL)
		return -ENOMEM;
	sp->sp_geom = *geom;
	sp->sp_nvdevs = geom->sg_nvdevs;
	sp->sp_chunk_bits = (uint64_t)(geom->sg_chunk_bytes - SPACE_CHUNK_HEADER_BYTES) * 8;
	sp->sp_ms_bits = geom->sg_metaslab_bytes / SECTOR;
	uint64_t nchunks = 0;
	for (uint32_t i = 0; i < sp->sp_nvdevs; i++)
		nchunks += (geom->sg_vdevs[i].svg_bytes / SECTOR + sp->sp_chunk_bits - 1) /
		           sp->sp_chunk_bits;
	sp->sp_nchunks = (uint32_t)nchunks; /* geom_check bounded it */
	sp->sp_nindex = (uint32_t)((nchunks + geom->sg_index_chunks - 1) / geom->sg_index_chunks);
	uint64_t root_bytes = root_image_bytes(sp->sp_nvdevs, sp->sp_nindex);
	if (root_bytes > BLK_MAX_BLOCK_BYTES) {
		rc = -EFBIG;
		goto fail;
	}
	uint32_t chunk_base = 0;
	for (uint32_t i = 0; i < sp->sp_nvdevs; i++) {
		struct space_vdev *v = &sp->sp_vdevs[i];
		v->v_start = geom->sg_vdevs[i].svg_start;
		v->v_bytes = geom->sg_vdevs[i].svg_bytes;
		v->v_nbits = v->v_bytes / SECTOR;
		v->v_active = NO_METASLAB;
		v->v_nms = (uint32_t)((v->v_nbits + sp->sp_ms_bits - 1) / sp->sp_ms_bits);
		v->v_nchunks = (uint32_t)((v->v_nbits + sp->sp_chunk_bits - 1) / sp->sp_chunk_bits);
		v->v_chunk_base = chunk_base;
		chunk_base += v->v_nchunks;
		v->v_map = mem_zalloc(words_for(v->v_nbits) * 8);
		v->v_ms = mem_zalloc((size_t)v->v_nms * sizeof(*v->v_ms));
		v->v_chunks = mem_zalloc((size_t)v->v_nchunks * sizeof(*v->v_chunks));
		if (v->v_map == NULL || v->v_ms == NULL || v->v_chunks == NULL) {
			rc = -ENOMEM;
			goto fail;
		}
		for (uint32_t m = 0; m < v->v_nms; m++) {
			struct space_metaslab *ms = &v->v_ms[m];
			ms->ms_first = (uint64_t)m * sp->sp_ms_bits;
			ms->ms_nbits = SH_MIN(sp->sp_ms_bits, v->v_nbits - ms->ms_first);
			ms->ms_free = ms->ms_nbits;
			ms->ms_cursor = ms->ms_first;
			ms->ms_nofit = UINT64_MAX;
		}
		sp->sp_total_bits += v->v_nbits;
	}
	VERIFY(chunk_base == sp->sp_nchunks);
	sp->sp_free_bits = sp->sp_total_bits;
	uint64_t reserve =
	    geom->sg_reserve_shift > 0 ? sp->sp_total_bits >> geom->sg_reserve_shift : 0;
	reserve = SH_MAX(reserve, geom->sg_reserve_min_bytes / SECTOR);
	sp->sp_reserve_bits = SH_MIN(reserve, sp->sp_total_bits / 2);

	sp->sp_index = mem_zalloc((size_t)sp->sp_nindex * sizeof(*sp->sp_index));
	sp->sp_index_dirty = mem_zalloc((size_t)sp->sp_nindex * sizeof(*sp->sp_index_dirty));
	uint64_t scratch = SH_MAX(root_bytes, SH_MAX((uint64_t)geom->sg_chunk_bytes,
	                                             index_image_bytes(geom->sg_index_chunks)));
	sp->sp_scratch = mem_alloc(scratch);
	sp->sp_words = mem_alloc(sp->sp_chunk_bits / 8);
	if (sp->sp_index == NULL || sp->sp_index_dirty == NULL || sp->sp_scratch == NULL ||
	    sp->sp_words == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	*sp_out = sp;
	return 0;
fail:
	space_close(sp);
	return rc;
}

int space_create(const struct space_geometry *geom, struct space **sp_out)
{
	struct space *sp;
	int rc = space_build(geom, &sp);
	if (rc != 0)
		return rc;
	sp->sp_root_dirty = true; /* the first sync writes the root, even of an empty pool */
	*sp_out = sp;
	return 0;
}

void space_close(struct space *sp)
{
	if (sp == NULL)
		return;
	for (uint32_t i = 0; i < sp->sp_nvdevs; i++) {
		struct space_vdev *v = &sp->sp_vdevs[i];
		if (v->v_chunks != NULL)
			for (uint32_t c = 0; c < v->v_nchunks; c++)
				mem_free(v->v_chunks[c].ck_freeing);
		mem_free(v->v_chunks);
		mem_free(v->v_ms);
		mem_free(v->v_map);
		mem_free(sp->sp_check_ref[i]);
	}
	for (size_t i = 0; i < sp->sp_nfreeing; i++)
		mem_free(sp->sp_freeing[i].sf_ext);
	mem_free(sp->sp_freeing);
	mem_free(sp->sp_own);
	mem_free(sp->sp_pending);
	mem_free(sp->sp_index);
	mem_free(sp->sp_index_dirty);
	mem_free(sp->sp_scratch);
	mem_free(sp->sp_words);
	mem_free(sp);
}

/* ---------------------------------------------------------------------------------------------
 * Loading */

#define OPEN_FAIL(...)                                                                             \
	do {                                                                                       \
		log_error("space: open: " __VA_ARGS__);                                            \
		rc = -EIO;                                                                         \
		goto fail;                                                                         \
	} while (0)

/* A pointer to one of the allocator's own blocks read from disk: a block of lsize bytes inside a
 * data area. */
static int own_bp_check(const struct space *sp, const struct blk_ptr *bp, uint32_t lsize)
{
	uint64_t bit, n;
	if (bp->bp_lsize != lsize || bp->bp_birth_txg == 0 || bp->bp_psize == 0 ||
	    bp->bp_psize > bp->bp_asize ||
	    range_to_bits(sp, bp->bp_vdev, bp->bp_offset, bp->bp_asize, &bit, &n) != 0)
		return -EIO;
	return 0;
}

/* Marks an own block read from disk (rule 4): it must be free in the images loaded and not
 * overlap another own block. */
static int own_mark_loaded(struct space *sp, const struct blk_ptr *bp)
{
	uint64_t bit, n;
	if (range_to_bits(sp, bp->bp_vdev, bp->bp_offset, bp->bp_asize, &bit, &n) != 0)
		return -EIO;
	struct space_vdev *v = &sp->sp_vdevs[bp->bp_vdev];
	if (bits_count(v->v_map, bit, n) != 0)
		return -EIO;
	bits_set(v->v_map, bit, n);
	VERIFY(sp->sp_nown < sp->sp_own_cap);
	sp->sp_own[sp->sp_nown++] =
	    (struct space_extent){.se_vdev = bp->bp_vdev, .se_bit = bit, .se_nbits = n};
	return 0;
}

static int load_chunk(struct space *sp, uint32_t vi, uint32_t c, space_load_fn load, void *ctx,
                      uint8_t *buf)
{
	struct space_vdev *v = &sp->sp_vdevs[vi];
	struct space_chunk *ck = &v->v_chunks[c];
	uint64_t nbits = chunk_nbits(sp, v, c), nw = words_for(nbits);
	uint32_t bytes = chunk_image_bytes(nbits);
	int rc = load(ctx, &ck->ck_bp, buf, bytes);
	if (rc != 0) {
		log_error("space: open: reading chunk %u of vdev %u: %s", c, vi, sh_strerror(rc));
		return rc;
	}
	if (memcmp(buf, CHUNK_MAGIC, 8) != 0 || get_u32(buf + 8) != vi || get_u32(buf + 12) != c ||
	    get_u32(buf + 16) != nbits || get_u32(buf + 20) != SPACE_FORMAT_VERSION) {
		log_error("space: open: chunk %u of vdev %u: bad header", c, vi);
		return -EIO;
	}
	uint64_t count = 0, first_word = (uint64_t)c * sp->sp_chunk_bits / 64;
	for (uint64_t w = 0; w < nw; w++) {
		uint64_t x = get_u64(buf + SPACE_CHUNK_HEADER_BYTES + 8 * w);
		if (w == nw - 1 && nbits % 64 != 0 && (x >> (nbits % 64)) != 0) {
			log_error("space: open: chunk %u of vdev %u: bits past the end of the vdev",
			          c, vi);
			return -EIO;
		}
		v->v_map[first_word + w] = x;
		count += (uint64_t)__builtin_popcountll(x);
	}
	if (count == 0 || count != get_u64(buf + 24)) {
		log_error("space: open: chunk %u of vdev %u: count %llu, header says %llu", c, vi,
		          (unsigned long long)count, (unsigned long long)get_u64(buf + 24));
		return -EIO;
	}
	ck->ck_count = count;
	return 0;
}

int space_open(const struct space_geometry *geom, const struct blk_ptr *root, space_load_fn load,
               void *ctx, struct space **sp_out)
{
	if (root == NULL || bp_is_hole(root) || load == NULL)
		return -EINVAL;
	struct space *sp;
	int rc = space_build(geom, &sp);
	if (rc != 0)
		return rc;
	uint8_t *buf = sp->sp_scratch;
	/* The root was written for this geometry, or for its first vdevs only, before the others
	 * were added (the pool grew): those vdevs' state as it was, the others all free. Its size
	 * follows from the count of vdevs it names, checked below. */
	uint32_t max_bytes = (uint32_t)root_image_bytes(sp->sp_nvdevs, sp->sp_nindex);
	uint32_t root_bytes = root->bp_lsize;
	if (root_bytes < root_image_bytes(1, 0) || root_bytes > max_bytes ||
	    own_bp_check(sp, root, root_bytes) != 0)
		OPEN_FAIL("root pointer: lsize %u (at most %u), vdev %u offset %llu asize %u",
		          root->bp_lsize, max_bytes, root->bp_vdev,
		          (unsigned long long)root->bp_offset, root->bp_asize);
	rc = load(ctx, root, buf, root_bytes);
	if (rc != 0) {
		log_error("space: open: reading the root: %s", sh_strerror(rc));
		goto fail;
	}

	/* The root: header, geometry, index pointers. */
	uint64_t txg = get_u64(buf + 32);
	if (memcmp(buf, ROOT_MAGIC, 8) != 0 || get_u32(buf + 8) != SPACE_FORMAT_VERSION)
		OPEN_FAIL("root: bad magic or version");
	uint32_t old_nvdevs = get_u32(buf + 12);
	if (old_nvdevs == 0 || old_nvdevs > sp->sp_nvdevs)
		OPEN_FAIL("root: %u vdevs, the pool's configuration has %u", old_nvdevs,
		          sp->sp_nvdevs);
	uint32_t k = geom->sg_index_chunks;
	uint32_t old_nchunks = old_nvdevs == sp->sp_nvdevs
	                           ? sp->sp_nchunks
	                           : sp->sp_vdevs[old_nvdevs].v_chunk_base;
	uint32_t old_nindex = (old_nchunks + k - 1) / k;
	if (get_u64(buf + 16) != geom->sg_metaslab_bytes ||
	    get_u32(buf + 24) != geom->sg_chunk_bytes || get_u32(buf + 28) != k ||
	    get_u32(buf + 40) != old_nindex || root_bytes != root_image_bytes(old_nvdevs, old_nindex))
		OPEN_FAIL("root: geometry differs from the pool's configuration");
	if (txg == 0 || get_u32(buf + 44) != 0 || get_u64(buf + 56) != 0)
		OPEN_FAIL("root: bad txg or reserved fields");
	uint64_t root_total = get_u64(buf + 48), vdev_counts[SPACE_MAX_VDEVS] = {0};
	for (uint32_t v = 0; v < old_nvdevs; v++) {
		const uint8_t *e = buf + ROOT_HEADER_BYTES + ROOT_VDEV_BYTES * v;
		if (get_u64(e) != geom->sg_vdevs[v].svg_start ||
		    get_u64(e + 8) != geom->sg_vdevs[v].svg_bytes || get_u64(e + 24) != 0)
			OPEN_FAIL("root: vdev %u differs from the pool's configuration", v);
		vdev_counts[v] = get_u64(e + 16);
	}
	size_t nown = 1;
	/* index block i of the root's geometry: its count of chunk pointers */
#define OLD_ENTRIES(i) SH_MIN(k, old_nchunks - (i) * k)
	const uint8_t *ip = buf + ROOT_HEADER_BYTES + ROOT_VDEV_BYTES * old_nvdevs;
	for (uint32_t i = 0; i < old_nindex; i++) {
		struct blk_ptr *bp = &sp->sp_index[i];
		if (bp_decode(ip + BP_BYTES * i, bp) != 0 ||
		    (!bp_is_hole(bp) &&
		     own_bp_check(sp, bp, index_image_bytes(OLD_ENTRIES(i))) != 0))
			OPEN_FAIL("root: bad pointer to index block %u", i);
		nown += bp_is_hole(bp) ? 0 : 1;
	}
	if (old_nvdevs < sp->sp_nvdevs) {
		/* grown: the next sync writes the root for the new geometry, and the last index
		 * block again if it maps more chunks now (the new ones are holes: all free) */
		sp->sp_root_dirty = true;
		if (old_nindex > 0 && OLD_ENTRIES(old_nindex - 1) != index_entries(sp, old_nindex - 1))
			sp->sp_index_dirty[old_nindex - 1] = true;
	}

	/* The index blocks: chunk pointers. (The root image in buf is not needed any more.) */
	for (uint32_t i = 0; i < old_nindex; i++) {
		if (bp_is_hole(&sp->sp_index[i]))
			continue;
		uint32_t entries = OLD_ENTRIES(i);
		rc = load(ctx, &sp->sp_index[i], buf, index_image_bytes(entries));
		if (rc != 0) {
			log_error("space: open: reading index block %u: %s", i, sh_strerror(rc));
			goto fail;
		}
		if (memcmp(buf, INDEX_MAGIC, 8) != 0 || get_u32(buf + 8) != SPACE_FORMAT_VERSION ||
		    get_u32(buf + 12) != i || get_u32(buf + 16) != entries ||
		    get_u32(buf + 20) != 0 || get_u64(buf + 24) == 0 ||
		    get_u64(buf + 32) != (uint64_t)i * k)
			OPEN_FAIL("index block %u: bad header", i);
		for (uint32_t e = 0; e < entries; e++) {
			uint32_t g = i * k + e, vi, c;
			chunk_locate(sp, g, &vi, &c);
			const struct space_vdev *v = &sp->sp_vdevs[vi];
			struct space_chunk *ck = &sp->sp_vdevs[vi].v_chunks[c];
			if (bp_decode(buf + INDEX_HEADER_BYTES + BP_BYTES * e, &ck->ck_bp) != 0 ||
			    (!bp_is_hole(&ck->ck_bp) &&
			     own_bp_check(sp, &ck->ck_bp,
			                  chunk_image_bytes(chunk_nbits(sp, v, c))) != 0))
				OPEN_FAIL("index block %u: bad pointer to chunk %u", i, g);
			nown += bp_is_hole(&ck->ck_bp) ? 0 : 1;
		}
	}

	/* The chunks: the bitmaps (A). */
	uint64_t total = 0;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		struct space_vdev *v = &sp->sp_vdevs[vi];
		uint64_t count = 0;
		for (uint32_t c = 0; c < v->v_nchunks; c++) {
			if (bp_is_hole(&v->v_chunks[c].ck_bp))
				continue;
			rc = load_chunk(sp, vi, c, load, ctx, buf);
			if (rc != 0)
				goto fail;
			count += v->v_chunks[c].ck_count;
		}
		if (count != vdev_counts[vi])
			OPEN_FAIL("vdev %u: chunks hold %llu allocated sectors, the root says %llu",
			          vi, (unsigned long long)count,
			          (unsigned long long)vdev_counts[vi]);
		total += count;
	}
	if (total != root_total)
		OPEN_FAIL("chunks hold %llu allocated sectors, the root says %llu",
		          (unsigned long long)total, (unsigned long long)root_total);
#undef OLD_ENTRIES

	/* The allocator's own blocks (O, rule 4). */
	rc = own_reserve(sp, nown);
	if (rc != 0)
		goto fail;
	if (own_mark_loaded(sp, root) != 0)
		OPEN_FAIL("the root block overlaps allocated space");
	for (uint32_t i = 0; i < sp->sp_nindex; i++)
		if (!bp_is_hole(&sp->sp_index[i]) && own_mark_loaded(sp, &sp->sp_index[i]) != 0)
			OPEN_FAIL("index block %u overlaps allocated space or another block", i);
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++)
		for (uint32_t c = 0; c < sp->sp_vdevs[vi].v_nchunks; c++) {
			const struct blk_ptr *bp = &sp->sp_vdevs[vi].v_chunks[c].ck_bp;
			if (!bp_is_hole(bp) && own_mark_loaded(sp, bp) != 0)
				OPEN_FAIL("the block of chunk %u of vdev %u overlaps allocated "
				          "space or another block",
				          c, vi);
		}
	qsort(sp->sp_own, sp->sp_nown, sizeof(*sp->sp_own), ext_cmp);

	/* Counters. */
	sp->sp_free_bits = 0;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		struct space_vdev *v = &sp->sp_vdevs[vi];
		v->v_set_bits = bits_count(v->v_map, 0, v->v_nbits);
		sp->sp_free_bits += v->v_nbits - v->v_set_bits;
		for (uint32_t m = 0; m < v->v_nms; m++)
			v->v_ms[m].ms_free =
			    v->v_ms[m].ms_nbits -
			    bits_count(v->v_map, v->v_ms[m].ms_first, v->v_ms[m].ms_nbits);
	}
	sp->sp_root = *root;
	sp->sp_last_sync_txg = txg;
	sp->sp_durable_txg = txg;
	*sp_out = sp;
	return 0;
fail:
	space_close(sp);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Allocation */

/* First fit for n sectors in ms: from the cursor to the end, then from the start (a run may
 * cross the cursor). A failure is remembered in ms_nofit, so that a fragmented metaslab is not
 * scanned again for as much or more until space returns to it. */
static bool ms_search(const struct space_vdev *v, struct space_metaslab *ms, uint64_t n,
                      uint64_t *bit_out)
{
	if (ms->ms_free < n || n >= ms->ms_nofit)
		return false;
	uint64_t end = ms->ms_first + ms->ms_nbits, cur = ms->ms_cursor;
	if (bits_find_run(v->v_map, cur, end, n, bit_out) ||
	    bits_find_run(v->v_map, ms->ms_first, SH_MIN(end, cur + n - 1), n, bit_out))
		return true;
	ms->ms_nofit = n;
	return false;
}

static bool vdev_alloc(struct space_vdev *v, uint64_t n, uint64_t *bit_out)
{
	if (v->v_nbits - v->v_set_bits < n)
		return false;
	if (v->v_active != NO_METASLAB) {
		struct space_metaslab *ms = &v->v_ms[v->v_active];
		if (ms->ms_free * MS_SWITCH_DIVISOR >= ms->ms_nbits && ms_search(v, ms, n, bit_out))
			return true;
	}
	uint32_t best = 0;
	for (uint32_t m = 1; m < v->v_nms; m++)
		if (v->v_ms[m].ms_free > v->v_ms[best].ms_free)
			best = m;
	if (v->v_ms[best].ms_free < n)
		return false;
	if (ms_search(v, &v->v_ms[best], n, bit_out)) {
		v->v_active = best;
		return true;
	}
	/* The most free space is too fragmented for n: any metaslab that fits. */
	for (uint32_t m = 0; m < v->v_nms; m++)
		if (m != best && ms_search(v, &v->v_ms[m], n, bit_out)) {
			v->v_active = m;
			return true;
		}
	return false;
}

int space_alloc(struct space *sp, enum space_class cls, uint32_t vdev_hint, uint64_t bytes,
                uint32_t *vdev_out, uint64_t *offset_out)
{
	if ((cls != SPACE_CLASS_NORMAL && cls != SPACE_CLASS_RESERVED) || bytes == 0 ||
	    bytes % SECTOR != 0 || bytes > sp->sp_geom.sg_metaslab_bytes)
		return -EINVAL;
	VERIFY(!sp->sp_checking);
	uint64_t n = bytes / SECTOR, avail = sp->sp_free_bits;
	if (cls == SPACE_CLASS_NORMAL)
		avail = avail > sp->sp_reserve_bits ? avail - sp->sp_reserve_bits : 0;
	if (avail < n)
		return -ENOSPC;
	if (sp->sp_in_write) {
		int rc = grow((void **)&sp->sp_pending, &sp->sp_pending_cap, sp->sp_npending + 1,
		              sizeof(*sp->sp_pending));
		if (rc != 0)
			return rc;
	}
	uint64_t tried = 0, bit = 0;
	uint32_t vi = SPACE_VDEV_ANY;
	if (vdev_hint < sp->sp_nvdevs) {
		tried |= 1ull << vdev_hint;
		if (vdev_alloc(&sp->sp_vdevs[vdev_hint], n, &bit))
			vi = vdev_hint;
	}
	while (vi == SPACE_VDEV_ANY) {
		uint32_t best = SPACE_VDEV_ANY;
		uint64_t best_free = 0;
		for (uint32_t v = 0; v < sp->sp_nvdevs; v++) {
			uint64_t vfree = sp->sp_vdevs[v].v_nbits - sp->sp_vdevs[v].v_set_bits;
			if ((tried & (1ull << v)) == 0 && vfree >= n &&
			    (best == SPACE_VDEV_ANY || vfree > best_free)) {
				best = v;
				best_free = vfree;
			}
		}
		if (best == SPACE_VDEV_ANY)
			return -ENOSPC;
		tried |= 1ull << best;
		if (vdev_alloc(&sp->sp_vdevs[best], n, &bit))
			vi = best;
	}
	struct space_vdev *v = &sp->sp_vdevs[vi];
	struct space_metaslab *ms = &v->v_ms[bit / sp->sp_ms_bits];
	ms->ms_cursor = bit + n < ms->ms_first + ms->ms_nbits ? bit + n : ms->ms_first;
	take_bits(sp, vi, bit, n, sp->sp_in_write);
	*vdev_out = vi;
	*offset_out = v->v_start + bit * SECTOR;
	return 0;
}

int space_claim(struct space *sp, uint32_t vdev, uint64_t offset, uint64_t bytes)
{
	uint64_t bit, n;
	VERIFY(!sp->sp_checking);
	if (range_to_bits(sp, vdev, offset, bytes, &bit, &n) != 0) {
		log_ratelimited(
		    LOG_ERROR,
		    "space: claim of vdev %u offset %llu bytes %llu: outside the data area", vdev,
		    (unsigned long long)offset, (unsigned long long)bytes);
		return -EINVAL;
	}
	if (bits_count(sp->sp_vdevs[vdev].v_map, bit, n) != 0)
		return -EEXIST;
	take_bits(sp, vdev, bit, n, false);
	return 0;
}

int space_free(struct space *sp, uint64_t txg, uint32_t vdev, uint64_t offset, uint64_t bytes)
{
	uint64_t bit, n;
	const char *why = NULL;
	VERIFY(!sp->sp_checking);
	if (txg == 0 || range_to_bits(sp, vdev, offset, bytes, &bit, &n) != 0) {
		why = "outside the data area";
		goto bad;
	}
	struct space_vdev *v = &sp->sp_vdevs[vdev];
	if (sp->sp_in_write) {
		/* The callee of ss_write giving back the block it allocated (its write failed). */
		size_t pi = pending_find(sp, vdev, bit, n, true);
		if (pi != SIZE_MAX) {
			int rc = freeing_prepare(sp, txg, vdev, bit, n);
			if (rc != 0)
				return rc;
			pending_remove(sp, pi);
			freeing_commit(sp, txg, vdev, bit, n);
			if (txg >
			    sp->sp_sync_txg) /* rule 5: image-neutral only up to the syncing txg */
				chunks_dirty(sp, v, bit, n);
			return 0;
		}
		if (pending_find(sp, vdev, bit, n, false) != SIZE_MAX) {
			why = "part of a block being written";
			goto bad;
		}
	}
	if (own_overlap(sp, vdev, bit, n) != SIZE_MAX) {
		why = "it holds the space allocator's own state";
		goto bad;
	}
	if (bits_count(v->v_map, bit, n) != n) {
		why = "not allocated";
		goto bad;
	}
	if (freeing_count(sp, v, bit, n) != 0) {
		why = "already freed (double free)";
		goto bad;
	}
	int rc = freeing_prepare(sp, txg, vdev, bit, n);
	if (rc != 0)
		return rc;
	freeing_commit(sp, txg, vdev, bit, n);
	chunks_dirty(sp, v, bit, n);
	return 0;
bad:
	log_ratelimited(LOG_ERROR,
	                "space: free in txg %llu of vdev %u offset %llu bytes %llu refused: %s",
	                (unsigned long long)txg, vdev, (unsigned long long)offset,
	                (unsigned long long)bytes, why);
	return -EINVAL;
}

void space_txg_durable(struct space *sp, uint64_t txg)
{
	VERIFY(!sp->sp_syncing); /* not from a callback: the sync holds free lists it prepared */
	if (txg > sp->sp_last_sync_txg) {
		log_ratelimited(LOG_WARN, "space: txg %llu durable but the last sync was txg %llu",
		                (unsigned long long)txg, (unsigned long long)sp->sp_last_sync_txg);
		txg = sp->sp_last_sync_txg;
	}
	size_t keep = 0;
	for (size_t i = 0; i < sp->sp_nfreeing; i++) {
		struct space_freeing *f = &sp->sp_freeing[i];
		if (f->sf_txg <= txg) {
			for (size_t j = 0; j < f->sf_count; j++)
				freeing_release(sp, &f->sf_ext[j]);
			mem_free(f->sf_ext);
		} else {
			sp->sp_freeing[keep++] = *f;
		}
	}
	sp->sp_nfreeing = keep;
	sp->sp_durable_txg = SH_MAX(sp->sp_durable_txg, txg);
}

/* ---------------------------------------------------------------------------------------------
 * Syncing */

/* Builds chunk c's image for the state of txg (rule 3) into sp_scratch; returns its size. */
static uint32_t chunk_image(struct space *sp, uint32_t vi, uint32_t c, uint64_t txg,
                            uint64_t *count_out, bool *future_out)
{
	struct space_vdev *v = &sp->sp_vdevs[vi];
	struct space_chunk *ck = &v->v_chunks[c];
	uint64_t first = (uint64_t)c * sp->sp_chunk_bits, nbits = chunk_nbits(sp, v, c),
	         nw = words_for(nbits);
	uint64_t *words = sp->sp_words;
	memcpy(words, &v->v_map[first / 64], nw * 8);
	if (ck->ck_freeing != NULL)
		for (uint64_t w = 0; w < nw; w++)
			words[w] &= ~ck->ck_freeing[w];
	for (size_t i = ext_lower(sp->sp_own, sp->sp_nown, vi, first);
	     i < sp->sp_nown && ext_overlaps(&sp->sp_own[i], vi, first, nbits); i++) {
		const struct space_extent *e = &sp->sp_own[i];
		uint64_t s = SH_MAX(e->se_bit, first),
		         end = SH_MIN(e->se_bit + e->se_nbits, first + nbits);
		bits_clear(words, s - first, end - s);
	}
	bool future = false;
	if (ck->ck_freeing != NULL && ck->ck_freeing_max_txg > txg) {
		/* Freed in a later txg: still allocated in txg's state. */
		for (size_t l = 0; l < sp->sp_nfreeing; l++) {
			struct space_freeing *f = &sp->sp_freeing[l];
			if (f->sf_txg <= txg)
				continue;
			if (!f->sf_sorted) {
				qsort(f->sf_ext, f->sf_count, sizeof(*f->sf_ext), ext_cmp);
				f->sf_sorted = true;
			}
			for (size_t i = ext_lower(f->sf_ext, f->sf_count, vi, first);
			     i < f->sf_count && ext_overlaps(&f->sf_ext[i], vi, first, nbits);
			     i++) {
				const struct space_extent *e = &f->sf_ext[i];
				uint64_t s = SH_MAX(e->se_bit, first),
				         end = SH_MIN(e->se_bit + e->se_nbits, first + nbits);
				bits_set(words, s - first, end - s);
				future = true;
			}
		}
	}
	uint64_t count = 0;
	uint8_t *buf = sp->sp_scratch;
	for (uint64_t w = 0; w < nw; w++) {
		count += (uint64_t)__builtin_popcountll(words[w]);
		put_u64(buf + SPACE_CHUNK_HEADER_BYTES + 8 * w, words[w]);
	}
	memcpy(buf, CHUNK_MAGIC, 8);
	put_u32(buf + 8, vi);
	put_u32(buf + 12, c);
	put_u32(buf + 16, (uint32_t)nbits);
	put_u32(buf + 20, SPACE_FORMAT_VERSION);
	put_u64(buf + 24, count);
	*count_out = count;
	*future_out = future;
	return chunk_image_bytes(nbits);
}

/* Calls ss_write and makes the block it allocated one of the allocator's own (P -> O). */
static int store_write(struct space *sp, uint32_t bytes, uint8_t level, uint64_t fill,
                       struct blk_ptr *bp_out)
{
	const struct space_store *st = sp->sp_store;
	struct blk_ptr bp;
	memset(&bp, 0, sizeof(bp));
	int rc = own_reserve(sp, 1);
	if (rc != 0)
		return rc;
	VERIFY(sp->sp_npending == 0);
	sp->sp_in_write = true;
	rc = st->ss_write(st->ss_ctx, sp->sp_scratch, bytes, level, fill, &bp);
	sp->sp_in_write = false;
	if (rc == 0) {
		uint64_t bit = 0, n = 0;
		size_t pi = SIZE_MAX;
		if (bp.bp_birth_txg != 0 && bp.bp_lsize == bytes &&
		    range_to_bits(sp, bp.bp_vdev, bp.bp_offset, bp.bp_asize, &bit, &n) == 0)
			pi = pending_find(sp, bp.bp_vdev, bit, n, true);
		if (pi == SIZE_MAX) {
			log_error(
			    "space: sync: ss_write returned vdev %u offset %llu asize %u lsize "
			    "%u birth %llu: not a block it allocated for this image",
			    bp.bp_vdev, (unsigned long long)bp.bp_offset, bp.bp_asize, bp.bp_lsize,
			    (unsigned long long)bp.bp_birth_txg);
			rc = -EINVAL;
		} else {
			pending_remove(sp, pi);
			own_insert(sp, (struct space_extent){
			                   .se_vdev = bp.bp_vdev, .se_bit = bit, .se_nbits = n});
		}
	}
	/* Anything else the callback allocated is an ordinary allocation (the next pass). */
	for (size_t i = 0; i < sp->sp_npending; i++) {
		const struct space_extent *e = &sp->sp_pending[i];
		chunks_dirty(sp, &sp->sp_vdevs[e->se_vdev], e->se_bit, e->se_nbits);
	}
	sp->sp_npending = 0;
	if (rc != 0)
		return rc;
	bp.bp_level = level;
	bp.bp_fill = fill;
	*bp_out = bp;
	sp->sp_info.si_bytes_written += bytes;
	return 0;
}

/* The tree no longer references old, one of its own blocks: O -> F(syncing txg), prepared by
 * freeing_prepare before the write that replaced it. */
static void retire(struct space *sp, const struct blk_ptr *old)
{
	uint64_t bit, n;
	VERIFY(range_to_bits(sp, old->bp_vdev, old->bp_offset, old->bp_asize, &bit, &n) == 0);
	size_t i = own_overlap(sp, old->bp_vdev, bit, n);
	VERIFY(i != SIZE_MAX && sp->sp_own[i].se_bit == bit && sp->sp_own[i].se_nbits == n);
	own_remove(sp, i);
	freeing_commit(sp, sp->sp_sync_txg, old->bp_vdev, bit, n);
	if (sp->sp_store->ss_free != NULL)
		sp->sp_store->ss_free(sp->sp_store->ss_ctx, old);
}

static SH_MUST_CHECK int prepare_retire(struct space *sp, const struct blk_ptr *old)
{
	uint64_t bit, n;
	if (bp_is_hole(old))
		return 0;
	VERIFY(range_to_bits(sp, old->bp_vdev, old->bp_offset, old->bp_asize, &bit, &n) == 0);
	return freeing_prepare(sp, sp->sp_sync_txg, old->bp_vdev, bit, n);
}

static int sync_chunk(struct space *sp, uint32_t vi, uint32_t c, bool *changed)
{
	struct space_vdev *v = &sp->sp_vdevs[vi];
	struct space_chunk *ck = &v->v_chunks[c];
	struct blk_ptr old = ck->ck_bp, nbp;
	memset(&nbp, 0, sizeof(nbp));
	int rc = prepare_retire(sp, &old);
	if (rc != 0)
		return rc;
	uint64_t count;
	bool future;
	uint32_t bytes = chunk_image(sp, vi, c, sp->sp_sync_txg, &count, &future);
	/* Clean before the write: whatever the callback changes in this chunk dirties it again. */
	ck->ck_dirty = future;
	ck->ck_kept_gen = future ? sp->sp_sync_gen : 0;
	if (count > 0) {
		rc = store_write(sp, bytes, SPACE_LEVEL_CHUNK, count, &nbp);
		if (rc != 0) {
			ck->ck_dirty = true;
			ck->ck_kept_gen = 0;
			return rc;
		}
		sp->sp_info.si_chunks_written++;
	} else if (bp_is_hole(&old)) {
		return 0; /* all free before and after */
	} else {
		sp->sp_info.si_chunks_holed++;
	}
	ck->ck_bp = nbp;
	ck->ck_count = count;
	sp->sp_index_dirty[(v->v_chunk_base + c) / sp->sp_geom.sg_index_chunks] = true;
	if (!bp_is_hole(&old))
		retire(sp, &old);
	*changed = true;
	return 0;
}

static int sync_index(struct space *sp, uint32_t i, bool *changed)
{
	struct blk_ptr old = sp->sp_index[i], nbp;
	memset(&nbp, 0, sizeof(nbp));
	int rc = prepare_retire(sp, &old);
	if (rc != 0)
		return rc;
	uint32_t entries = index_entries(sp, i), k = sp->sp_geom.sg_index_chunks, nonholes = 0;
	uint8_t *buf = sp->sp_scratch;
	memset(buf, 0, INDEX_HEADER_BYTES);
	memcpy(buf, INDEX_MAGIC, 8);
	put_u32(buf + 8, SPACE_FORMAT_VERSION);
	put_u32(buf + 12, i);
	put_u32(buf + 16, entries);
	put_u64(buf + 24, sp->sp_sync_txg);
	put_u64(buf + 32, (uint64_t)i * k);
	for (uint32_t e = 0; e < entries; e++) {
		const struct blk_ptr *bp = &chunk_at(sp, i * k + e)->ck_bp;
		bp_encode(bp, buf + INDEX_HEADER_BYTES + BP_BYTES * e);
		nonholes += bp_is_hole(bp) ? 0 : 1;
	}
	sp->sp_index_dirty[i] = false;
	if (nonholes > 0) {
		rc = store_write(sp, index_image_bytes(entries), SPACE_LEVEL_INDEX, nonholes, &nbp);
		if (rc != 0) {
			sp->sp_index_dirty[i] = true;
			return rc;
		}
		sp->sp_info.si_index_written++;
	} else if (bp_is_hole(&old)) {
		return 0;
	}
	sp->sp_index[i] = nbp;
	sp->sp_root_dirty = true;
	if (!bp_is_hole(&old))
		retire(sp, &old);
	*changed = true;
	return 0;
}

static int sync_root(struct space *sp, bool *changed)
{
	struct blk_ptr old = sp->sp_root, nbp;
	memset(&nbp, 0, sizeof(nbp));
	int rc = prepare_retire(sp, &old);
	if (rc != 0)
		return rc;
	uint32_t bytes = (uint32_t)root_image_bytes(sp->sp_nvdevs, sp->sp_nindex), nonholes = 0;
	uint8_t *buf = sp->sp_scratch;
	memset(buf, 0, ROOT_HEADER_BYTES + ROOT_VDEV_BYTES * sp->sp_nvdevs);
	memcpy(buf, ROOT_MAGIC, 8);
	put_u32(buf + 8, SPACE_FORMAT_VERSION);
	put_u32(buf + 12, sp->sp_nvdevs);
	put_u64(buf + 16, sp->sp_geom.sg_metaslab_bytes);
	put_u32(buf + 24, sp->sp_geom.sg_chunk_bytes);
	put_u32(buf + 28, sp->sp_geom.sg_index_chunks);
	put_u64(buf + 32, sp->sp_sync_txg);
	put_u32(buf + 40, sp->sp_nindex);
	uint64_t total = 0;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		const struct space_vdev *v = &sp->sp_vdevs[vi];
		uint64_t count = 0;
		for (uint32_t c = 0; c < v->v_nchunks; c++)
			count += v->v_chunks[c].ck_count;
		uint8_t *e = buf + ROOT_HEADER_BYTES + ROOT_VDEV_BYTES * vi;
		put_u64(e, v->v_start);
		put_u64(e + 8, v->v_bytes);
		put_u64(e + 16, count);
		total += count;
	}
	put_u64(buf + 48, total);
	uint8_t *ip = buf + ROOT_HEADER_BYTES + ROOT_VDEV_BYTES * sp->sp_nvdevs;
	for (uint32_t i = 0; i < sp->sp_nindex; i++) {
		bp_encode(&sp->sp_index[i], ip + BP_BYTES * i);
		nonholes += bp_is_hole(&sp->sp_index[i]) ? 0 : 1;
	}
	sp->sp_root_dirty = false;
	rc = store_write(sp, bytes, SPACE_LEVEL_ROOT, nonholes, &nbp);
	if (rc != 0) {
		sp->sp_root_dirty = true;
		return rc;
	}
	sp->sp_info.si_root_written++;
	sp->sp_root = nbp;
	if (!bp_is_hole(&old))
		retire(sp, &old);
	*changed = true;
	return 0;
}

int space_sync(struct space *sp, uint64_t txg, const struct space_store *store,
               struct blk_ptr *root_out)
{
	VERIFY(!sp->sp_syncing && !sp->sp_checking);
	if (store == NULL || store->ss_write == NULL || txg == 0 || txg < sp->sp_last_sync_txg ||
	    txg <= sp->sp_durable_txg)
		return -EINVAL;
	memset(&sp->sp_info, 0, sizeof(sp->sp_info));
	sp->sp_info.si_txg = txg;
	sp->sp_syncing = true;
	sp->sp_sync_txg = txg;
	sp->sp_sync_gen++;
	sp->sp_store = store;
	int rc = 0;
	for (;;) {
		bool changed = false;
		for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
			struct space_vdev *v = &sp->sp_vdevs[vi];
			for (uint32_t c = 0; c < v->v_nchunks; c++) {
				const struct space_chunk *ck = &v->v_chunks[c];
				if (!ck->ck_dirty || ck->ck_kept_gen == sp->sp_sync_gen)
					continue;
				rc = sync_chunk(sp, vi, c, &changed);
				if (rc != 0)
					goto out;
			}
		}
		for (uint32_t i = 0; i < sp->sp_nindex; i++) {
			if (!sp->sp_index_dirty[i])
				continue;
			rc = sync_index(sp, i, &changed);
			if (rc != 0)
				goto out;
		}
		if (sp->sp_root_dirty) {
			rc = sync_root(sp, &changed);
			if (rc != 0)
				goto out;
		}
		if (!changed)
			break;
		sp->sp_info.si_passes++;
		/* Each pass is image-neutral (see the theory): only callbacks that allocate or free
		 * beyond their own block can make another pass necessary. */
		VERIFY(sp->sp_info.si_passes <= SPACE_SYNC_MAX_PASSES);
	}
	sp->sp_last_sync_txg = txg;
	sp->sp_last_info = sp->sp_info;
	*root_out = sp->sp_root;
out:
	sp->sp_syncing = false;
	sp->sp_store = NULL;
	return rc;
}

bool space_is_dirty(const struct space *sp)
{
	if (sp->sp_root_dirty)
		return true;
	for (uint32_t i = 0; i < sp->sp_nindex; i++)
		if (sp->sp_index_dirty[i])
			return true;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++)
		for (uint32_t c = 0; c < sp->sp_vdevs[vi].v_nchunks; c++)
			if (sp->sp_vdevs[vi].v_chunks[c].ck_dirty)
				return true;
	return false;
}

void space_last_sync(const struct space *sp, struct space_sync_info *info_out)
{
	*info_out = sp->sp_last_info;
}

/* ---------------------------------------------------------------------------------------------
 * Accounting and queries */

int space_stats(const struct space *sp, uint32_t vdev, struct space_stats *stats_out)
{
	memset(stats_out, 0, sizeof(*stats_out));
	if (vdev != SPACE_VDEV_ANY && vdev >= sp->sp_nvdevs)
		return -EINVAL;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		if (vdev != SPACE_VDEV_ANY && vi != vdev)
			continue;
		const struct space_vdev *v = &sp->sp_vdevs[vi];
		stats_out->st_total_bytes += v->v_nbits * SECTOR;
		stats_out->st_allocated_bytes += (v->v_set_bits - v->v_freeing_bits) * SECTOR;
		stats_out->st_freeing_bytes += v->v_freeing_bits * SECTOR;
		stats_out->st_free_bytes += (v->v_nbits - v->v_set_bits) * SECTOR;
	}
	if (vdev == SPACE_VDEV_ANY)
		stats_out->st_reserve_bytes = sp->sp_reserve_bits * SECTOR;
	return 0;
}

int space_query(const struct space *sp, uint32_t vdev, uint64_t offset, uint64_t bytes,
                enum space_range_state *state_out)
{
	uint64_t bit, n;
	if (range_to_bits(sp, vdev, offset, bytes, &bit, &n) != 0)
		return -EINVAL;
	const struct space_vdev *v = &sp->sp_vdevs[vdev];
	uint64_t set = bits_count(v->v_map, bit, n), freeing = freeing_count(sp, v, bit, n);
	if (set == 0)
		*state_out = SPACE_RANGE_FREE;
	else if (freeing == n)
		*state_out = SPACE_RANGE_FREEING;
	else if (set == n && freeing == 0)
		*state_out = SPACE_RANGE_ALLOCATED;
	else
		*state_out = SPACE_RANGE_MIXED;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Checking */

static void report_first(struct space_check_report *rep, const char *fmt, ...) SH_PRINTF(2, 3);
static void report_first(struct space_check_report *rep, const char *fmt, ...)
{
	if (rep->cr_first[0] != '\0')
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rep->cr_first, sizeof(rep->cr_first), fmt, ap);
	va_end(ap);
}

int space_check_mark(struct space *sp, uint32_t vdev, uint64_t offset, uint64_t bytes)
{
	if (!sp->sp_checking)
		return -EINVAL;
	struct space_check_report *rep = sp->sp_check_rep;
	uint64_t bit, n;
	if (range_to_bits(sp, vdev, offset, bytes, &bit, &n) != 0) {
		rep->cr_bad_refs++;
		report_first(rep, "reference outside the data area: vdev %u offset %llu bytes %llu",
		             vdev, (unsigned long long)offset, (unsigned long long)bytes);
		return 0;
	}
	const struct space_vdev *v = &sp->sp_vdevs[vdev];
	uint64_t *ref = sp->sp_check_ref[vdev];
	uint64_t again = bits_count(ref, bit, n);
	if (again != 0) {
		rep->cr_double_refs++;
		rep->cr_double_bytes += again * SECTOR;
		report_first(rep, "referenced twice: vdev %u offset %llu bytes %llu", vdev,
		             (unsigned long long)offset, (unsigned long long)bytes);
	}
	uint64_t unalloc = n - bits_count(v->v_map, bit, n) + freeing_count(sp, v, bit, n);
	if (unalloc != 0) {
		rep->cr_unalloc_refs++;
		rep->cr_unalloc_bytes += unalloc * SECTOR;
		report_first(rep, "referenced but not allocated: vdev %u offset %llu bytes %llu",
		             vdev, (unsigned long long)offset, (unsigned long long)bytes);
	}
	bits_set(ref, bit, n);
	return 0;
}

int space_check(struct space *sp, space_visit_fn visit, void *arg,
                struct space_check_report *report)
{
	VERIFY(!sp->sp_syncing && !sp->sp_checking);
	memset(report, 0, sizeof(*report));
	int rc = 0;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		sp->sp_check_ref[vi] = mem_zalloc(words_for(sp->sp_vdevs[vi].v_nbits) * 8);
		if (sp->sp_check_ref[vi] == NULL) {
			rc = -ENOMEM;
			goto out;
		}
	}
	sp->sp_checking = true;
	sp->sp_check_rep = report;
	/* The allocator's own blocks are live; the pool does not know them. */
	for (size_t i = 0; i < sp->sp_nown; i++) {
		const struct space_extent *e = &sp->sp_own[i];
		VERIFY(space_check_mark(sp, e->se_vdev,
		                        sp->sp_vdevs[e->se_vdev].v_start + e->se_bit * SECTOR,
		                        e->se_nbits * SECTOR) == 0);
	}
	rc = visit(arg, sp);
	if (rc != 0)
		goto out;
	uint64_t total_free = 0;
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		const struct space_vdev *v = &sp->sp_vdevs[vi];
		const uint64_t *ref = sp->sp_check_ref[vi];
		uint64_t nw = words_for(v->v_nbits), cw = sp->sp_chunk_bits / 64;
		uint64_t prev_top = 0, set = 0, freeing = 0;
		for (uint64_t w = 0; w < nw; w++) {
			/* Chunks are whole words: word w is word w % cw of chunk w / cw. */
			const struct space_chunk *ck = &v->v_chunks[w / cw];
			uint64_t fw = ck->ck_freeing != NULL ? ck->ck_freeing[w % cw] : 0;
			uint64_t leak = v->v_map[w] & ~fw & ~ref[w];
			set += (uint64_t)__builtin_popcountll(v->v_map[w]);
			freeing += (uint64_t)__builtin_popcountll(fw);
			if ((fw & ~v->v_map[w]) != 0) {
				report->cr_internal_errors++;
				report_first(report,
				             "vdev %u: freeing sectors not set in the bitmap", vi);
			}
			if (leak != 0) {
				uint64_t starts = leak & ~((leak << 1) | prev_top);
				report->cr_leaked_bytes +=
				    (uint64_t)__builtin_popcountll(leak) * SECTOR;
				report->cr_leaked_extents += (uint64_t)__builtin_popcountll(starts);
				uint64_t b = w * 64 + (uint64_t)__builtin_ctzll(leak);
				report_first(
				    report, "leaked: vdev %u offset %llu (the first leaked sector)",
				    vi, (unsigned long long)(v->v_start + b * SECTOR));
			}
			prev_top = leak >> 63;
		}
		if (set != v->v_set_bits || freeing != v->v_freeing_bits) {
			report->cr_internal_errors++;
			report_first(report, "vdev %u: counters disagree with the bitmaps", vi);
		}
		for (uint32_t m = 0; m < v->v_nms; m++) {
			const struct space_metaslab *ms = &v->v_ms[m];
			if (ms->ms_free !=
			    ms->ms_nbits - bits_count(v->v_map, ms->ms_first, ms->ms_nbits)) {
				report->cr_internal_errors++;
				report_first(
				    report,
				    "vdev %u metaslab %u: free count disagrees with the bitmap", vi,
				    m);
			}
		}
		total_free += v->v_nbits - set;
	}
	if (total_free != sp->sp_free_bits) {
		report->cr_internal_errors++;
		report_first(report, "pool free count disagrees with the bitmaps");
	}
out:
	for (uint32_t vi = 0; vi < sp->sp_nvdevs; vi++) {
		mem_free(sp->sp_check_ref[vi]);
		sp->sp_check_ref[vi] = NULL;
	}
	sp->sp_checking = false;
	sp->sp_check_rep = NULL;
	return rc;
}
