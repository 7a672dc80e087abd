/* btree_impl.h: what btree.c (tree algorithms) and btree_node.c (the node format) share. The node
 * format's offset/size tables are in the theory comment at the top of btree.c. Not for use outside
 * src/btree/btree*. */
#ifndef SHALE_BTREE_IMPL_H
#define SHALE_BTREE_IMPL_H

#include <string.h>

#include "btree/btree.h"

/* ---- node format constants (see the tables in btree.c) ---- */
#define BT_MAGIC 0x54424853u /* the bytes "SHBT" when stored little-endian */
#define BT_VERSION 1u
#define BT_HDR_BYTES 32u      /* the header of the table in btree.c, room to spare included */
#define BT_SLOT_BYTES 2u      /* one u16 entry offset per entry */
#define BT_ENTRY_HDR_BYTES 3u /* u8 key length, u16 value length */
#define BT_PTR_BYTES 64u      /* an encoded block pointer: an internal entry's value */
#define BT_MIN_ENTRIES 4u     /* max-sized entries a node must take: enough that a two-way */
                              /* split of a full node plus one entry always fits (btree.c) */

#define BT_OFF_MAGIC 0u     /* u32 */
#define BT_OFF_VERSION 4u   /* u8 */
#define BT_OFF_TYPE 5u      /* u8 */
#define BT_OFF_LEVEL 6u     /* u8 */
#define BT_OFF_SHIFT 7u     /* u8: log2(node bytes) */
#define BT_OFF_COUNT 8u     /* u16 */
#define BT_OFF_PAD 10u      /* u16, zero */
#define BT_OFF_HEAP 12u     /* u32 */
#define BT_OFF_GARBAGE 16u  /* u32 */
#define BT_OFF_RESERVED 20u /* 12 bytes, zero */

/* Spare nodes kept for reuse between operations: what an insert into a clean tree of depth 7
 * reserves (a copy per level, a split per level, a new root), so inserts rarely allocate. */
#define BT_SPARES_KEEP 16u
/* The set of fingerprints of clean nodes this tree has fully verified (see "Hostile bytes" in
 * btree.c): open addressing, grown from BT_VSET_MIN_SLOTS up to BT_VSET_MAX_SLOTS per generation
 * (2 MiB, enough for some 196,000 nodes: 3 GiB of 16 KiB nodes), two generations. */
#define BT_VSET_MIN_SLOTS 64u
#define BT_VSET_MAX_SLOTS (1u << 18)

struct bt_vset {
	uint64_t *vs_slots; /* vs_cap fingerprints, 0 = empty; NULL before the first */
	uint32_t vs_cap;    /* a power of two */
	uint32_t vs_count;
};

/* ---- little-endian helpers ---- */
static inline uint16_t bt_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t bt_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}
static inline uint64_t bt_get64(const uint8_t *p)
{
	return (uint64_t)bt_get32(p) | ((uint64_t)bt_get32(p + 4) << 32);
}
static inline void bt_put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v & 0xffu);
	p[1] = (uint8_t)((v >> 8) & 0xffu);
}
static inline void bt_put32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)((v >> (8 * i)) & 0xffu);
}
static inline void bt_put64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)((v >> (8 * i)) & 0xffu);
}

/* Key order: memcmp over the common length, then the shorter first. */
static inline int bt_cmp(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint32_t common = alen < blen ? alen : blen;
	int c = common ? memcmp(a, b, common) : 0;
	if (c != 0)
		return c;
	return (alen > blen) - (alen < blen);
}

/* A key bound of a node's range: set = false means unbounded. Points into a held image or a
 * caller's buffer that outlives its use. */
struct bt_key {
	const uint8_t *bk_key;
	uint32_t bk_len;
	bool bk_set;
};

/* One entry read out of a node image (pointers into the image), or one to be written. */
struct bt_ent {
	const uint8_t *be_key;
	uint32_t be_klen;
	const uint8_t *be_val;
	uint32_t be_vlen;
	struct bt_node *be_kid; /* building internal nodes: the dirty child, or NULL */
};

/* A dirty node: a private, mutable image in the on-disk format, plus for internal nodes the
 * in-memory children. */
struct bt_node {
	uint8_t *bn_img;          /* node_bytes; trusted (built or copied by this tree) */
	struct bt_node **bn_kids; /* internal: the dirty child of each slot, NULL when the slot's
	                           * value holds a clean child's pointer; t_max_kids long */
	uint64_t bn_fill;         /* entries in this subtree */
	struct bt_node *bn_next;  /* spare list link */
};

struct btree {
	struct btree_config t_cfg;
	struct btree_store t_st;
	uint32_t t_nb;          /* node bytes */
	uint32_t t_shift;       /* log2(t_nb) */
	uint32_t t_max_entries; /* most entries a node can hold (a slot array bound) */
	uint32_t t_max_kids;    /* most entries an internal node can hold */
	/* The root: a dirty node, or else a clean pointer (a hole when the tree is empty). */
	struct bt_node *t_root;
	struct blk_ptr t_root_bp;
	bool t_root_changed; /* the root is not the one last synced (or opened) */
	uint64_t t_dirty_nodes;
	uint64_t t_node_alloc_bytes; /* memory of one node with its image and kids array */
	struct bt_node *t_spares;
	uint32_t t_nspares;
	uint8_t *t_scratch;       /* t_nb bytes for building images (from the first mutation on) */
	struct bt_ent *t_ents;    /* t_max_entries + 2 entries for copies, splits, merges, sync */
	struct bt_vset t_vset[2]; /* verified nodes: [0] the current generation, [1] the previous */
	uint64_t t_fp_seed;
	/* The last btree_scan that missed: the node it missed and the clean siblings after it. */
	struct blk_ptr t_hint_for;
	struct blk_ptr t_hints[BTREE_SCAN_HINTS_MAX];
	uint32_t t_nhints;
};

/* ---- btree_node.c: the node format ---- */

/* Validates a block pointer read from a node (or given as root) as the name of a node at level:
 * not a hole, lsize = node bytes, level matches, fill >= 1, reserved bytes zero. -EIO otherwise. */
SH_MUST_CHECK int bt_ptr_decode(const struct btree *t, const uint8_t in[BT_PTR_BYTES],
                                uint8_t level, struct blk_ptr *bp_out);
SH_MUST_CHECK int bt_ptr_check(const struct btree *t, const struct blk_ptr *bp, uint8_t level);
void bt_ptr_encode(const struct blk_ptr *bp, uint8_t out[BT_PTR_BYTES]);
uint64_t bt_ptr_fill_of(const uint8_t in[BT_PTR_BYTES]);

static inline uint32_t bt_count(const uint8_t *img)
{
	return bt_get16(img + BT_OFF_COUNT);
}
static inline uint8_t bt_level(const uint8_t *img)
{
	return img[BT_OFF_LEVEL];
}
static inline uint32_t bt_heap(const uint8_t *img)
{
	return bt_get32(img + BT_OFF_HEAP);
}
static inline uint32_t bt_garbage(const uint8_t *img)
{
	return bt_get32(img + BT_OFF_GARBAGE);
}
/* Bytes a node's header, slots and entries take (what a compacted image uses). */
static inline uint32_t bt_used_bytes(const struct btree *t, const uint8_t *img)
{
	return BT_HDR_BYTES + BT_SLOT_BYTES * bt_count(img) +
	       (t->t_nb - bt_heap(img) - bt_garbage(img));
}
static inline uint32_t bt_ent_bytes(uint32_t klen, uint32_t vlen)
{
	return BT_SLOT_BYTES + BT_ENTRY_HDR_BYTES + klen + vlen;
}

/* The O(1) header check done on every visit of a clean node: magic, version, type, level, size,
 * count, heap and garbage bounds. -EIO on failure, with a reason in why when why_bytes > 0. */
SH_MUST_CHECK int bt_node_check_header(const struct btree *t, const uint8_t *img, uint8_t level,
                                       char *why, size_t why_bytes);
/* Entry i of a node whose header passed the check, bounds-checked against the image: -EIO when its
 * slot or lengths point outside the node. */
SH_MUST_CHECK int bt_node_entry(const struct btree *t, const uint8_t *img, uint32_t i,
                                struct bt_ent *e);
/* The full verification of a node: header, every entry's bounds, exact byte accounting, strict
 * key order, keys inside [lo, hi) (separators: entry 0's key empty, entry 1's key > lo), child
 * pointers, and the fill (leaf: count; internal: the children's sum) against fill. kids (NULL for
 * a clean node) gives a dirty node's in-memory children, whose slots hold no pointer yet. strict
 * adds the overlap check btree_check wants. -EIO, with a reason in why when why_bytes > 0. */
SH_MUST_CHECK int bt_node_verify(const struct btree *t, const uint8_t *img, uint8_t level,
                                 uint64_t fill, const struct bt_key *lo, const struct bt_key *hi,
                                 struct bt_node *const *kids, bool strict, char *why,
                                 size_t why_bytes);
/* Binary search: *pos_out = the first entry whose key >= key (count if none), *eq_out whether it
 * equals key. -EIO for a malformed entry met on the way. */
SH_MUST_CHECK int bt_node_search(const struct btree *t, const uint8_t *img, const uint8_t *key,
                                 uint32_t klen, uint32_t *pos_out, bool *eq_out);

/* Writes a compact image of ents[0..n) at level into img (t_nb bytes; must not alias the entries'
 * bytes). The entries must fit: bt_ents_used(ents, n) <= t_nb. */
void bt_node_build(const struct btree *t, uint8_t *img, uint8_t level, const struct bt_ent *ents,
                   uint32_t n);
/* Bytes ents[0..n) take in a node, header included. */
uint64_t bt_ents_used(const struct bt_ent *ents, uint32_t n);
/* Rewrites a dirty node compactly (its garbage becomes free space). */
void bt_node_compact(struct btree *t, struct bt_node *node);
/* Inserts an entry at pos in a dirty node, compacting first if needed; false when it does not
 * fit (nothing changed). kid: an internal node's dirty child (val NULL: a zeroed placeholder). */
bool bt_node_insert(struct btree *t, struct bt_node *node, uint32_t pos, const uint8_t *key,
                    uint32_t klen, const uint8_t *val, uint32_t vlen, struct bt_node *kid);
/* Removes entry pos of a dirty node (its bytes become garbage). */
void bt_node_remove(struct btree *t, struct bt_node *node, uint32_t pos);
/* Empties the key of entry 0 of a dirty internal node in place (a minus-infinity separator). */
void bt_node_clear_key0(struct btree *t, struct bt_node *node);
/* Entry i of a dirty (trusted) node. */
void bt_node_entry_trusted(const struct btree *t, const uint8_t *img, uint32_t i, struct bt_ent *e);
/* The value bytes of entry i of a dirty node, writable. */
uint8_t *bt_node_val_mut(const struct btree *t, struct bt_node *node, uint32_t i);

#endif
