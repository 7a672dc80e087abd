/* btree.c: the pool's generic copy-on-write B+tree: walking, lookups, ordered scans, inserts with
 * splits, deletes with node removal and leaf merging, writing out, and the offline check.
 *
 * ---- Problem ----
 * Everything the pool keeps (inodes, directory entries keyed by name hash, file extent maps, pool
 * metadata) lives in trees of one kind: ordered byte-string keys to byte-string values, in nodes of
 * a fixed size stored as blocks. Blocks are never overwritten: a change copies the nodes on the
 * path from the root (copy on write) and the txg sync writes them to new places, so the tree of the
 * last committed txg stays intact on disk. The tree must never block on I/O: it runs under the
 * caller's lock on a thread that may not wait for a disk.
 *
 * ---- Model ----
 * A node is either
 *   - clean: an immutable image held by the owner's cache, named by a block pointer, reached
 *     through bs_get; or
 *   - dirty: a private, mutable image in the same format (struct bt_node), made by copying a clean
 *     image (copy on write) or by a split, plus, for an internal node, bn_kids: the in-memory
 *     child of each slot. A dirty node's image is trusted (this file built it from verified bytes).
 * The tree's root is a dirty node (t_root) or a clean pointer (t_root_bp; a hole when empty).
 *
 * Every operation is written as walk, then mutate:
 *   1. walk: load every node the operation will touch (the root-to-leaf path; for a delete also
 *      the chain that replaces a shrinking root and a sibling to merge with), check each clean one
 *      (see "Hostile bytes"), and decide (present or not, which nodes empty, whether to merge).
 *      A node not in memory ends the operation with -SH_ENEEDBLOCK: nothing has changed yet.
 *   2. prepare: reserve every spare node the mutation could need (copies of the clean path nodes,
 *      one per level for splits, one for a new root) and copy the clean path nodes into them.
 *      Failures (-ENOMEM, -EIO from a malformed entry) still leave the tree unchanged.
 *   3. commit and mutate: link the copies into their parents, releasing and bs_free-ing the clean
 *      blocks they replace, and edit the dirty nodes. Nothing in this step can fail, and no store
 *      call other than bs_release and bs_free is made.
 * So a caller that got -SH_ENEEDBLOCK loads the named block and simply retries the whole call; a
 * put or delete is never applied twice.
 *
 * ---- Node format (node_bytes long, little-endian) ----
 *
 *   offset    size  field
 *        0       4  magic     0x54424853 (the bytes "SHBT")
 *        4       1  version   1
 *        5       1  type      the tree's bc_type
 *        6       1  level     0 = leaf; an internal node's children are at level - 1
 *        7       1  shift     log2(node bytes), 10..16
 *        8       2  count     entries, >= 1 (an empty node is never written)
 *       10       2  pad       zero
 *       12       4  heap      offset of the lowest entry byte
 *       16       4  garbage   bytes in [heap, node end) that no slot references (0 when written)
 *       20      12  reserved  zero
 *       32 2*count  slots     u16 offset of each entry, in key order
 *        .       .  free      zero when written
 *     heap       .  entries   packed towards the end of the node
 *
 * An entry, at the offset its slot gives:
 *
 *   offset    size  field
 *        0       1  klen      key bytes, <= bc_key_max
 *        1       2  vlen      value bytes: <= bc_val_max in a leaf, exactly 64 in an internal node
 *        3    klen  key
 *   3+klen    vlen  value     leaf: the caller's value; internal: the child's block pointer,
 *                             encoded as in blk.h (0 u64 offset, 8 u32 vdev, 12 u32 asize,
 *                             16 u32 psize, 20 u32 lsize, 24 u8 compress, 25 u8 checksum, 26 u8
 *                             type, 27 u8 level, 28 u32 reserved, 32 u64 birth txg, 40 u8[16]
 *                             checksum, 56 u64 fill) by blk_ptr_encode / blk_ptr_decode
 *
 * An internal node's entry i routes keys in [key_i, key_{i+1}) to child i; key_0 is empty, meaning
 * minus infinity. Written images are compact (garbage 0, free space zero) so equal contents give
 * equal bytes and the free gap compresses away.
 *
 * ---- Rules (checked where named; btree_check checks them all) ----
 *   H1 magic, version, type and shift are as configured.
 *   H2 level is the one the parent (or the root pointer) implies.
 *   H3 1 <= count <= the most entries a node of that level can hold.
 *   H4 32 + 2 * count <= heap <= node bytes.   H5 garbage <= node bytes - heap.
 *   H6 the entries take exactly node bytes - heap - garbage bytes.
 *   E1 every entry lies inside [heap, node end) with lengths inside the maxima.
 *   E2 entries do not overlap (only btree_check looks: readers are safe either way).
 *   K1 keys strictly increase within a node.
 *   K2 every key under entry i of an internal node lies in [key_i, key_{i+1}), with the node's own
 *      range as the outer bounds: separators are lower bounds, not necessarily the smallest key
 *      present (deletes never rewrite them, and a leaf split uses the shortest prefix of the right
 *      half's first key that sorts above the left half's last key).
 *   K3 an internal node's first key is empty.
 *   P1 a child pointer is not a hole, has lsize = node bytes, level = the parent's level - 1,
 *      fill >= 1 and reserved bytes zero.
 *   F1 a leaf's fill is its count; an internal node's fill is the sum of its children's; the root
 *      pointer's fill is the number of entries in the tree.
 *   D1 every ancestor of a dirty node is dirty. A dirty internal node's slot i has either
 *      bn_kids[i] (its value bytes are then meaningless until sync) or a clean child's pointer.
 *   D2 no node is empty: a node emptied by a delete is removed from its parent at once, and the
 *      root, when left with a single child, is replaced by that child (repeatedly).
 *
 * ---- Hostile bytes ----
 * Node images come from disk: they produce -EIO, never a crash or a read outside the image. Three
 * layers, so that a lookup in a cached tree is a binary search straight on the owner's images:
 *   1. every visit of a clean node checks its header (H1-H5), O(1);
 *   2. every entry access is bounds-checked (E1), so even bytes never verified cannot make the
 *      tree read outside the image;
 *   3. the first time this tree uses a given clean node at a given position, it verifies it fully
 *      (H6, K1-K3, P1 of each child pointer, F1 against the pointer's fill). It remembers that with
 *      a 64-bit fingerprint of the encoded pointer and the node's key range (randomly seeded per
 *      tree). Blocks are immutable (the pointer carries the checksum blk verifies), so a
 *      remembered pointer still names verified bytes. A pointer reused at another position (a
 *      hostile image sharing one block between two parents) comes with another range, is
 *      verified again, and fails K2.
 * The fingerprints live in an open-addressing set that grows with the nodes in use (8 bytes per
 * node: 1/2048 of a 16 KiB node held by the cache) up to BT_VSET_MAX_SLOTS; a full set becomes
 * the previous generation and a fresh one starts, a hit in the previous generation moving to the
 * current one. So the nodes in use stay remembered, the memory stays bounded in a long-lived tree
 * whose old blocks are replaced txg after txg, and a working set larger than the set costs
 * re-verification, never a wrong answer. Nodes this tree writes are not pre-marked: the first
 * read after a sync verifies them again (once per node per txg).
 *
 * ---- Splits, removal and merging ----
 * An insert that does not fit (even after compacting away garbage) splits the node in two: when
 * the new entry is the last one the old entries stay left and the new one goes right (and the
 * mirror case for the first), which packs sequential inserts into full nodes; otherwise the split
 * point balances the bytes. Both halves always fit because a node takes at least four entries of
 * the largest size (btree_entry_max_bytes). The separator goes up and may split the parent in
 * turn; a root split adds a level. A delete that empties a node removes it from its parent
 * (repeatedly up the path), and a root left with one child is replaced by it. A leaf that falls
 * below a quarter full is merged with an adjacent sibling when the two fit in three quarters of a
 * node and the sibling is in memory (dirty, or clean and held by the store): merging never causes a
 * miss. Internal nodes are not merged. Consequences: a leaf whose sibling is never in memory when
 * it shrinks stays under-full (space, not correctness), and internal nodes may keep few children
 * (even one) after mass deletes, so the depth stays what the tree's largest size made it:
 * logarithmic in the peak number of entries, not the current one.
 *
 * ---- Writing out ----
 * btree_sync walks the dirty nodes depth first, writing each node's dirty children before the node
 * (the parent stores their new pointers), through bs_write. A written child becomes clean in its
 * (still dirty) parent at once, so when a bs_write fails the tree is left with the same contents,
 * partly clean, and the next sync writes only what is still dirty.
 *
 * ---- Concurrency and memory ----
 * None inside: the owner serializes every call on a tree with its own lock (reads too: they update
 * the fingerprint table). Store callbacks run under that lock and must not call into the tree.
 * Dirty nodes are counted in btree_dirty_bytes; up to BT_SPARES_KEEP spare nodes are kept between
 * operations so that an insert rarely allocates; a scratch image and an entry array per tree
 * (allocated by the first mutation, so a tree that is only read does without) serve copies,
 * compaction, splits, merges and sync.
 *
 * ---- Depth ----
 * Only a root split adds a level, and it needs a full root. Ordinary workloads (random keys,
 * ascending keys, a sliding window of keys) keep the depth near log_fanout(peak entries): 3 levels
 * for a million small entries in 16 KiB nodes. Since internal nodes are not merged, a contrived
 * history of inserts and deletes can leave a tree deeper than its current size needs; the depth
 * is capped at BTREE_MAX_LEVELS, where an insert that would split the root fails with -EFBIG
 * rather than corrupting anything. */
#include <errno.h>
#include <stdio.h>

#include "btree/btree_impl.h"

/* A node on a walk: root at index 0, leaf last. */
struct bt_level {
	struct bt_node *bl_node; /* dirty node, or NULL for a clean one */
	const uint8_t *bl_img;   /* its image */
	void *bl_hold;           /* clean: the store's hold, NULL once released */
	struct blk_ptr bl_bp;    /* clean: the pointer it was reached through */
	uint32_t bl_n;           /* entry count */
	uint32_t bl_idx;         /* internal: the child the walk took */
	/* The node's key range [lo, hi): points into ancestors' images, so only valid during the
	 * walk (copy on write releases those images). */
	struct bt_key bl_lo;
	struct bt_key bl_hi;
};

struct bt_path {
	uint32_t pa_depth; /* levels loaded */
	uint8_t pa_root_level;
	struct bt_level pa_lv[BTREE_MAX_LEVELS];
};

enum bt_route { BT_ROUTE_KEY, BT_ROUTE_FIRST, BT_ROUTE_LAST };

/* A leaf below a quarter full is merged with a sibling when both fit in three quarters. */
#define BT_MERGE_BELOW(nb) ((nb) / 4)
#define BT_MERGE_FIT(nb) ((nb) / 4 * 3)

static bool bt_empty(const struct btree *t)
{
	return t->t_root == NULL && t->t_root_bp.bp_birth_txg == 0;
}

static uint8_t bt_root_level(const struct btree *t)
{
	return t->t_root != NULL ? bt_level(t->t_root->bn_img) : t->t_root_bp.bp_level;
}

/* ---------------------------------------------------------------------------------------------
 * Dirty node allocation */

/* Makes sure a mutation has what it may use: need spare nodes, and the scratch image and entry
 * array (allocated on the first mutation, so a tree that is only read never holds them). */
static int bt_reserve(struct btree *t, uint32_t need)
{
	if (t->t_scratch == NULL) {
		t->t_scratch = mem_alloc(t->t_nb);
		if (t->t_scratch == NULL)
			return -ENOMEM;
	}
	if (t->t_ents == NULL) {
		t->t_ents = mem_alloc(sizeof(t->t_ents[0]) * (t->t_max_entries + 2));
		if (t->t_ents == NULL)
			return -ENOMEM;
	}
	while (t->t_nspares < need) {
		struct bt_node *node = mem_alloc(t->t_node_alloc_bytes);
		if (node == NULL)
			return -ENOMEM;
		node->bn_kids = (struct bt_node **)(void *)(node + 1);
		node->bn_img = (uint8_t *)(void *)(node->bn_kids + t->t_max_kids);
		node->bn_next = t->t_spares;
		t->t_spares = node;
		t->t_nspares++;
	}
	return 0;
}

/* Takes a reserved spare as a new dirty node (its image is set by the caller). */
static struct bt_node *bt_take(struct btree *t)
{
	struct bt_node *node = t->t_spares;
	VERIFY(node != NULL); /* the walk reserved enough */
	t->t_spares = node->bn_next;
	t->t_nspares--;
	node->bn_next = NULL;
	node->bn_fill = 0;
	memset(node->bn_kids, 0, sizeof(node->bn_kids[0]) * t->t_max_kids);
	t->t_dirty_nodes++;
	return node;
}

static void bt_recycle(struct btree *t, struct bt_node *node)
{
	VERIFY(t->t_dirty_nodes > 0);
	t->t_dirty_nodes--;
	if (t->t_nspares < BT_SPARES_KEEP) {
		node->bn_next = t->t_spares;
		t->t_spares = node;
		t->t_nspares++;
	} else {
		mem_free(node);
	}
}

/* Frees a dirty subtree without writing it (btree_close). */
static void bt_drop(struct btree *t, struct bt_node *node)
{
	if (bt_level(node->bn_img) > 0) {
		uint32_t n = bt_count(node->bn_img);
		for (uint32_t i = 0; i < n; i++)
			if (node->bn_kids[i] != NULL)
				bt_drop(t, node->bn_kids[i]);
	}
	t->t_dirty_nodes--;
	mem_free(node);
}

/* Sets a dirty node's image, children and fill from ents (which may point into its old image). */
static void bt_node_set(struct btree *t, struct bt_node *node, uint8_t level,
                        const struct bt_ent *ents, uint32_t n)
{
	uint64_t fill = n;
	if (level > 0) {
		fill = 0;
		for (uint32_t i = 0; i < n; i++)
			fill += ents[i].be_kid != NULL ? ents[i].be_kid->bn_fill
			                               : bt_ptr_fill_of(ents[i].be_val);
	}
	bt_node_build(t, t->t_scratch, level, ents, n);
	memcpy(node->bn_img, t->t_scratch, t->t_nb);
	if (level > 0) {
		for (uint32_t i = 0; i < n; i++)
			node->bn_kids[i] = ents[i].be_kid;
		memset(&node->bn_kids[n], 0, sizeof(node->bn_kids[0]) * (t->t_max_kids - n));
	}
	node->bn_fill = fill;
}

/* A dirty copy of a clean image (copy on write): its entries repacked, so the copy is compact and
 * free of whatever overlaps the image might have had. -EIO for an entry out of bounds. */
static int bt_node_copy(struct btree *t, struct bt_node *node, const uint8_t *img, uint64_t fill)
{
	uint32_t n = bt_count(img);
	for (uint32_t i = 0; i < n; i++) {
		int rc = bt_node_entry(t, img, i, &t->t_ents[i]);
		if (rc != 0)
			return rc;
	}
	if (bt_ents_used(t->t_ents, n) > t->t_nb)
		return -EIO;
	bt_node_build(t, node->bn_img, bt_level(img), t->t_ents, n);
	node->bn_fill = fill;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Walking */

static uint64_t bt_fingerprint(const struct btree *t, const struct blk_ptr *bp,
                               const struct bt_key *lo, const struct bt_key *hi)
{
	uint8_t enc[BT_PTR_BYTES];
	bt_ptr_encode(bp, enc);
	uint64_t h = sh_hash64(enc, sizeof(enc), t->t_fp_seed);
	/* Odd constants (from splitmix64) tell "unbounded" apart from any bound. */
	h = lo->bk_set ? sh_hash64(lo->bk_key, lo->bk_len, h) : h ^ 0x9e3779b97f4a7c15ull;
	h = hi->bk_set ? sh_hash64(hi->bk_key, hi->bk_len, ~h) : h ^ 0xbf58476d1ce4e5b9ull;
	return h != 0 ? h : 1; /* 0 marks an empty slot */
}

static bool bt_vset_has(const struct bt_vset *vs, uint64_t fp)
{
	if (vs->vs_slots == NULL)
		return false;
	uint32_t mask = vs->vs_cap - 1;
	for (uint32_t i = (uint32_t)fp & mask;; i = (i + 1) & mask) {
		if (vs->vs_slots[i] == fp)
			return true;
		if (vs->vs_slots[i] == 0)
			return false;
	}
}

static void bt_vset_insert(struct bt_vset *vs, uint64_t fp)
{
	uint32_t mask = vs->vs_cap - 1;
	uint32_t i = (uint32_t)fp & mask;
	while (vs->vs_slots[i] != 0 && vs->vs_slots[i] != fp)
		i = (i + 1) & mask;
	if (vs->vs_slots[i] == 0) {
		vs->vs_slots[i] = fp;
		vs->vs_count++;
	}
}

/* Remembers a verified node. Growing the current generation, or, at its largest, retiring it as
 * the previous one (dropping the older) and starting afresh. Remembering is only a saving: when
 * memory is short the node is simply verified again next time. */
static void bt_verified_add(struct btree *t, uint64_t fp)
{
	struct bt_vset *cur = &t->t_vset[0];
	if ((uint64_t)(cur->vs_count + 1) * 4 > (uint64_t)cur->vs_cap * 3) {
		uint32_t cap = cur->vs_cap == 0 ? BT_VSET_MIN_SLOTS : cur->vs_cap;
		bool grow = cur->vs_cap != 0 && cur->vs_cap < BT_VSET_MAX_SLOTS;
		struct bt_vset next = {mem_zalloc(sizeof(uint64_t) * (grow ? cap * 2 : cap)),
		                       grow ? cap * 2 : cap, 0};
		if (next.vs_slots == NULL)
			return;
		if (grow) {
			for (uint32_t i = 0; i < cur->vs_cap; i++)
				if (cur->vs_slots[i] != 0)
					bt_vset_insert(&next, cur->vs_slots[i]);
			mem_free(cur->vs_slots);
		} else if (cur->vs_cap != 0) {
			mem_free(t->t_vset[1].vs_slots);
			t->t_vset[1] = *cur;
		}
		*cur = next;
	}
	bt_vset_insert(cur, fp);
}

/* Whether this tree has verified the node of fingerprint fp (a hit in the previous generation is
 * carried into the current one, so nodes in use survive the retirement of their generation). */
static bool bt_verified(struct btree *t, uint64_t fp)
{
	if (bt_vset_has(&t->t_vset[0], fp))
		return true;
	if (!bt_vset_has(&t->t_vset[1], fp))
		return false;
	bt_verified_add(t, fp);
	return true;
}

static void bt_level_release(struct btree *t, struct bt_level *lv)
{
	if (lv->bl_hold != NULL) {
		t->t_st.bs_release(t->t_st.bs_ctx, lv->bl_hold);
		lv->bl_hold = NULL;
	}
}

/* Opens the node that dirty (or else the checked pointer bp) names at level, whose key range is
 * [lo, hi), into *lv. A clean node's hold is recorded in lv even when a check then fails, so the
 * caller's release covers it. missing_out may be NULL (the miss is then just reported). */
static int bt_level_open(struct btree *t, struct bt_level *lv, struct bt_node *dirty,
                         const struct blk_ptr *bp, uint8_t level, const struct bt_key *lo,
                         const struct bt_key *hi, struct blk_ptr *missing_out)
{
	lv->bl_lo = *lo;
	lv->bl_hi = *hi;
	lv->bl_idx = 0;
	lv->bl_hold = NULL;
	lv->bl_node = dirty;
	if (dirty != NULL) {
		lv->bl_img = dirty->bn_img;
		lv->bl_n = bt_count(dirty->bn_img);
		return 0;
	}
	lv->bl_bp = *bp;
	lv->bl_img = NULL;
	lv->bl_n = 0;
	const void *image = NULL;
	void *hold = NULL;
	int rc = t->t_st.bs_get(t->t_st.bs_ctx, bp, &image, &hold);
	if (rc == -SH_ENEEDBLOCK) {
		if (missing_out != NULL)
			*missing_out = *bp;
		return rc;
	}
	if (rc != 0)
		return rc < 0 ? rc : -EIO;
	lv->bl_hold = hold;
	const uint8_t *img = image;
	if (img == NULL)
		return -EIO;
	lv->bl_img = img;
	if ((rc = bt_node_check_header(t, img, level, NULL, 0)) != 0)
		return rc;
	uint64_t fp = bt_fingerprint(t, bp, lo, hi);
	if (!bt_verified(t, fp)) {
		rc = bt_node_verify(t, img, level, bp->bp_fill, lo, hi, NULL, false, NULL, 0);
		if (rc != 0)
			return rc;
		bt_verified_add(t, fp);
	}
	lv->bl_n = bt_count(img);
	return 0;
}

/* Child i of the node up (at level + 1): its range, and its dirty node or its checked pointer. */
static int bt_child_ref(const struct btree *t, const struct bt_level *up, uint32_t i, uint8_t level,
                        struct bt_node **dirty_out, struct blk_ptr *bp_out, struct bt_key *lo,
                        struct bt_key *hi)
{
	struct bt_ent e;
	int rc;
	*lo = up->bl_lo;
	*hi = up->bl_hi;
	if (i > 0) {
		if ((rc = bt_node_entry(t, up->bl_img, i, &e)) != 0)
			return rc;
		*lo = (struct bt_key){e.be_key, e.be_klen, true};
	}
	if (i + 1 < up->bl_n) {
		if ((rc = bt_node_entry(t, up->bl_img, i + 1, &e)) != 0)
			return rc;
		*hi = (struct bt_key){e.be_key, e.be_klen, true};
	}
	*dirty_out = up->bl_node != NULL ? up->bl_node->bn_kids[i] : NULL;
	if (*dirty_out != NULL)
		return 0;
	if ((rc = bt_node_entry(t, up->bl_img, i, &e)) != 0)
		return rc;
	return bt_ptr_decode(t, e.be_val, level, bp_out);
}

/* Loads the child at the last level's bl_idx as a new last level. */
static int bt_path_push(struct btree *t, struct bt_path *pa, struct blk_ptr *missing_out)
{
	uint32_t l = pa->pa_depth;
	VERIFY(l > 0 && l < BTREE_MAX_LEVELS && l <= pa->pa_root_level);
	uint8_t level = (uint8_t)(pa->pa_root_level - l);
	struct bt_node *dirty;
	struct blk_ptr bp;
	struct bt_key lo, hi;
	int rc = bt_child_ref(t, &pa->pa_lv[l - 1], pa->pa_lv[l - 1].bl_idx, level, &dirty, &bp,
	                      &lo, &hi);
	if (rc != 0)
		return rc;
	pa->pa_lv[l].bl_hold = NULL;
	pa->pa_depth = l + 1;
	return bt_level_open(t, &pa->pa_lv[l], dirty, &bp, level, &lo, &hi, missing_out);
}

/* Releases the holds of levels [keep, depth) and forgets them. */
static void bt_path_release(struct btree *t, struct bt_path *pa, uint32_t keep)
{
	while (pa->pa_depth > keep) {
		pa->pa_depth--;
		bt_level_release(t, &pa->pa_lv[pa->pa_depth]);
	}
}

/* From the last loaded level down to a leaf, routing by key or to the first or last child. */
static int bt_descend(struct btree *t, struct bt_path *pa, enum bt_route route, const uint8_t *key,
                      uint32_t klen, struct blk_ptr *missing_out)
{
	for (;;) {
		struct bt_level *lv = &pa->pa_lv[pa->pa_depth - 1];
		if (pa->pa_depth - 1 == pa->pa_root_level)
			return 0; /* a leaf */
		uint32_t idx;
		if (route == BT_ROUTE_FIRST) {
			idx = 0;
		} else if (route == BT_ROUTE_LAST) {
			idx = lv->bl_n - 1;
		} else {
			uint32_t pos;
			bool eq;
			int rc = bt_node_search(t, lv->bl_img, key, klen, &pos, &eq);
			if (rc != 0)
				return rc;
			if (!eq && pos == 0)
				return -EIO; /* impossible when K3 holds */
			idx = eq ? pos : pos - 1;
		}
		lv->bl_idx = idx;
		int rc = bt_path_push(t, pa, missing_out);
		if (rc != 0)
			return rc;
	}
}

/* Loads the path from the root to the leaf that key routes to (or the first or last leaf). The
 * caller releases pa (bt_path_release(t, pa, 0)) whatever the result. */
static int bt_walk(struct btree *t, struct bt_path *pa, enum bt_route route, const uint8_t *key,
                   uint32_t klen, struct blk_ptr *missing_out)
{
	const struct bt_key none = {NULL, 0, false};
	pa->pa_root_level = bt_root_level(t);
	pa->pa_lv[0].bl_hold = NULL;
	pa->pa_depth = 1;
	int rc = bt_level_open(t, &pa->pa_lv[0], t->t_root, &t->t_root_bp, pa->pa_root_level, &none,
	                       &none, missing_out);
	if (rc != 0)
		return rc;
	return bt_descend(t, pa, route, key, klen, missing_out);
}

/* Moves the path to the next (forward) or previous leaf. 0: moved; 1: there is none; or an error
 * (the path is then partly released; the caller releases the rest). */
static int bt_path_step(struct btree *t, struct bt_path *pa, bool forward,
                        struct blk_ptr *missing_out)
{
	uint32_t l = pa->pa_depth - 1;
	while (l-- > 0) {
		struct bt_level *lv = &pa->pa_lv[l];
		if (forward ? lv->bl_idx + 1 >= lv->bl_n : lv->bl_idx == 0)
			continue;
		bt_path_release(t, pa, l + 1);
		lv->bl_idx = forward ? lv->bl_idx + 1 : lv->bl_idx - 1;
		int rc = bt_path_push(t, pa, missing_out);
		if (rc != 0)
			return rc;
		return bt_descend(t, pa, forward ? BT_ROUTE_FIRST : BT_ROUTE_LAST, NULL, 0,
		                  missing_out);
	}
	return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Copy on write */

/* Copies the clean nodes among levels [0, upto) into reserved spares (copies[l], NULL for levels
 * already dirty). On failure the copies are returned to the spares and the tree is unchanged. */
static int bt_cow_prepare(struct btree *t, struct bt_path *pa, uint32_t upto,
                          struct bt_node **copies)
{
	for (uint32_t l = 0; l < upto; l++) {
		struct bt_level *lv = &pa->pa_lv[l];
		copies[l] = NULL;
		if (lv->bl_node != NULL)
			continue;
		struct bt_node *node = bt_take(t);
		int rc = bt_node_copy(t, node, lv->bl_img, lv->bl_bp.bp_fill);
		if (rc != 0) {
			bt_recycle(t, node);
			while (l-- > 0)
				if (copies[l] != NULL)
					bt_recycle(t, copies[l]);
			return rc;
		}
		copies[l] = node;
	}
	return 0;
}

/* Links the copies in, top down (so each parent is dirty already: D1), and frees the blocks they
 * replace. */
static void bt_cow_commit(struct btree *t, struct bt_path *pa, uint32_t upto,
                          struct bt_node **copies)
{
	for (uint32_t l = 0; l < upto; l++) {
		struct bt_node *node = copies[l];
		if (node == NULL)
			continue;
		struct bt_level *lv = &pa->pa_lv[l];
		bt_level_release(t, lv);
		t->t_st.bs_free(t->t_st.bs_ctx, &lv->bl_bp);
		if (l == 0) {
			t->t_root = node;
			t->t_root_changed = true;
		} else {
			struct bt_level *up = &pa->pa_lv[l - 1];
			up->bl_node->bn_kids[up->bl_idx] = node;
		}
		lv->bl_node = node;
		lv->bl_img = node->bn_img;
	}
}

static uint32_t bt_clean_levels(const struct bt_path *pa, uint32_t upto)
{
	uint32_t n = 0;
	for (uint32_t l = 0; l < upto; l++)
		n += pa->pa_lv[l].bl_node == NULL ? 1u : 0u;
	return n;
}

/* Drops a level's node from the tree: a dirty one goes back to the spares (its clean block, if it
 * had one, was freed when it was copied), a clean one is released and freed. */
static void bt_discard_level(struct btree *t, struct bt_level *lv)
{
	if (lv->bl_node != NULL) {
		bt_recycle(t, lv->bl_node);
		lv->bl_node = NULL;
	} else {
		bt_level_release(t, lv);
		t->t_st.bs_free(t->t_st.bs_ctx, &lv->bl_bp);
	}
}

/* ---------------------------------------------------------------------------------------------
 * Lookup, scan, seek */

int btree_lookup(struct btree *t, const void *key, uint32_t key_len, void *val_out,
                 uint32_t val_cap, uint32_t *val_len_out, struct blk_ptr *missing_out)
{
	if (key_len > t->t_cfg.bc_key_max || (key == NULL && key_len > 0) ||
	    (val_out == NULL && val_cap > 0))
		return -EINVAL;
	if (bt_empty(t))
		return -ENOENT;
	struct bt_path pa;
	int rc = bt_walk(t, &pa, BT_ROUTE_KEY, key, key_len, missing_out);
	if (rc != 0)
		goto out;
	const struct bt_level *leaf = &pa.pa_lv[pa.pa_depth - 1];
	uint32_t pos;
	bool eq;
	if ((rc = bt_node_search(t, leaf->bl_img, key, key_len, &pos, &eq)) != 0)
		goto out;
	if (!eq) {
		rc = -ENOENT;
		goto out;
	}
	struct bt_ent e;
	if ((rc = bt_node_entry(t, leaf->bl_img, pos, &e)) != 0)
		goto out;
	if (val_len_out != NULL)
		*val_len_out = e.be_vlen;
	if (e.be_vlen > val_cap)
		rc = -EOVERFLOW;
	else if (e.be_vlen > 0)
		memcpy(val_out, e.be_val, e.be_vlen);
out:
	bt_path_release(t, &pa, 0);
	return rc;
}

/* After a scan's step to its next leaf missed the node at the path's last level: notes up to
 * max clean siblings that follow it under its parent (the scan's next nodes) as hints for
 * btree_scan_hints. */
static void bt_scan_note_hints(struct btree *t, const struct bt_path *pa,
                               const struct blk_ptr *missing, uint32_t max)
{
	t->t_nhints = 0;
	t->t_hint_for = *missing;
	max = SH_MIN(max, BTREE_SCAN_HINTS_MAX);
	if (pa->pa_depth < 2)
		return;
	uint32_t l = pa->pa_depth - 1; /* the missing node's level in the path */
	const struct bt_level *up = &pa->pa_lv[l - 1];
	uint8_t level = (uint8_t)(pa->pa_root_level - l);
	for (uint32_t i = up->bl_idx + 1; i < up->bl_n && t->t_nhints < max; i++) {
		struct bt_node *dirty;
		struct blk_ptr bp;
		struct bt_key lo, hi;
		if (bt_child_ref(t, up, i, level, &dirty, &bp, &lo, &hi) != 0)
			break;
		if (dirty == NULL)
			t->t_hints[t->t_nhints++] = bp;
	}
}

size_t btree_scan_hints(struct btree *t, const struct blk_ptr *missing, struct blk_ptr *out,
                        size_t max)
{
	size_t n = 0;
	if (blk_ptr_same_block(&t->t_hint_for, missing)) {
		n = SH_MIN((size_t)t->t_nhints, max);
		memcpy(out, t->t_hints, n * sizeof(*out));
	}
	t->t_nhints = 0;
	memset(&t->t_hint_for, 0, sizeof(t->t_hint_for));
	return n;
}

int btree_scan(struct btree *t, const void *start, uint32_t start_len, bool after,
               btree_visit_fn visit, void *arg, struct blk_ptr *missing_out)
{
	if ((start == NULL && start_len > 0) || visit == NULL)
		return -EINVAL;
	if (bt_empty(t))
		return 0;
	struct bt_path pa;
	struct blk_ptr missing;
	if (missing_out == NULL)
		missing_out = &missing;
	/* Leaves stepped to; the hints after a miss grow with them, as a readahead window does: a
	 * scan that stays in one leaf or two (most directories) loads nothing ahead. */
	uint32_t steps = 0;
	int rc = bt_walk(t, &pa, BT_ROUTE_KEY, start, start_len, missing_out);
	if (rc != 0) {
		t->t_nhints = 0;
		bt_path_release(t, &pa, 0);
		return rc;
	}
	uint32_t pos;
	bool eq;
	if ((rc = bt_node_search(t, pa.pa_lv[pa.pa_depth - 1].bl_img, start, start_len, &pos,
	                         &eq)) != 0)
		goto out;
	if (eq && after)
		pos++;
	for (;;) {
		const struct bt_level *leaf = &pa.pa_lv[pa.pa_depth - 1];
		for (; pos < leaf->bl_n; pos++) {
			struct bt_ent e;
			if ((rc = bt_node_entry(t, leaf->bl_img, pos, &e)) != 0)
				goto out;
			if (!visit(arg, e.be_key, e.be_klen, e.be_val, e.be_vlen))
				goto out;
		}
		rc = bt_path_step(t, &pa, true, missing_out);
		if (rc != 0) {
			if (rc == 1)
				rc = 0; /* the end */
			else if (rc == -SH_ENEEDBLOCK)
				bt_scan_note_hints(t, &pa, missing_out,
				                   steps >= 5 ? BTREE_SCAN_HINTS_MAX : 1u << steps);
			goto out;
		}
		steps++;
		pos = 0;
	}
out:
	bt_path_release(t, &pa, 0);
	return rc;
}

static int bt_seek_le(struct btree *t, const uint8_t *key, uint32_t key_len, bool last,
                      void *key_out, uint32_t key_cap, uint32_t *key_len_out, void *val_out,
                      uint32_t val_cap, uint32_t *val_len_out, struct blk_ptr *missing_out)
{
	if ((key == NULL && key_len > 0) || (key_out == NULL && key_cap > 0) ||
	    (val_out == NULL && val_cap > 0))
		return -EINVAL;
	if (bt_empty(t))
		return -ENOENT;
	struct bt_path pa;
	int rc = bt_walk(t, &pa, last ? BT_ROUTE_LAST : BT_ROUTE_KEY, key, key_len, missing_out);
	if (rc != 0)
		goto out;
	const struct bt_level *leaf = &pa.pa_lv[pa.pa_depth - 1];
	uint32_t pos = leaf->bl_n - 1;
	if (!last) {
		bool eq;
		if ((rc = bt_node_search(t, leaf->bl_img, key, key_len, &pos, &eq)) != 0)
			goto out;
		if (!eq) {
			if (pos == 0) {
				/* Every key here is greater (the separator that routed us is only a
				 * lower bound): the answer is the previous leaf's last entry. */
				rc = bt_path_step(t, &pa, false, missing_out);
				if (rc == 1)
					rc = -ENOENT;
				if (rc != 0)
					goto out;
				leaf = &pa.pa_lv[pa.pa_depth - 1];
				pos = leaf->bl_n;
			}
			pos--;
		}
	}
	struct bt_ent e;
	if ((rc = bt_node_entry(t, leaf->bl_img, pos, &e)) != 0)
		goto out;
	if (key_len_out != NULL)
		*key_len_out = e.be_klen;
	if (val_len_out != NULL)
		*val_len_out = e.be_vlen;
	if (e.be_klen > key_cap || e.be_vlen > val_cap) {
		rc = -EOVERFLOW;
		goto out;
	}
	if (e.be_klen > 0)
		memcpy(key_out, e.be_key, e.be_klen);
	if (e.be_vlen > 0)
		memcpy(val_out, e.be_val, e.be_vlen);
out:
	bt_path_release(t, &pa, 0);
	return rc;
}

int btree_seek_le(struct btree *t, const void *key, uint32_t key_len, void *key_out,
                  uint32_t key_cap, uint32_t *key_len_out, void *val_out, uint32_t val_cap,
                  uint32_t *val_len_out, struct blk_ptr *missing_out)
{
	return bt_seek_le(t, key, key_len, false, key_out, key_cap, key_len_out, val_out, val_cap,
	                  val_len_out, missing_out);
}

int btree_last(struct btree *t, void *key_out, uint32_t key_cap, uint32_t *key_len_out,
               void *val_out, uint32_t val_cap, uint32_t *val_len_out, struct blk_ptr *missing_out)
{
	return bt_seek_le(t, NULL, 0, true, key_out, key_cap, key_len_out, val_out, val_cap,
	                  val_len_out, missing_out);
}

/* ---------------------------------------------------------------------------------------------
 * Insert */

/* The length of the shortest prefix of b that sorts above a (a < b), and so separates them. */
static uint32_t bt_shortest_sep(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint32_t i = 0;
	while (i < alen && i < blen && a[i] == b[i])
		i++;
	VERIFY(i < blen); /* a < b: either a is a proper prefix of b or they differ at i */
	return i + 1;
}

/* Where to split cnt entries (one of them new, at pos): the first index of the right half. */
static uint32_t bt_split_point(const struct btree *t, const struct bt_ent *ents, uint32_t cnt,
                               uint32_t pos)
{
	/* Sequential inserts: keep the old entries together, full. */
	if (pos == cnt - 1 && bt_ents_used(ents, cnt - 1) <= t->t_nb)
		return cnt - 1;
	if (pos == 0 && bt_ents_used(ents + 1, cnt - 1) <= t->t_nb)
		return 1;
	uint64_t total = bt_ents_used(ents, cnt) + BT_HDR_BYTES; /* two headers */
	uint64_t left = BT_HDR_BYTES, best = UINT64_MAX;
	uint32_t best_k = 1;
	for (uint32_t k = 1; k < cnt; k++) {
		left += bt_ent_bytes(ents[k - 1].be_klen, ents[k - 1].be_vlen);
		uint64_t worst = SH_MAX(left, total - left);
		if (worst < best) {
			best = worst;
			best_k = k;
		}
	}
	VERIFY(best <= t->t_nb); /* four max-sized entries per node guarantee it */
	return best_k;
}

/* Splits a dirty node that cannot take the entry (key, val, kid) at pos: the entries, new one
 * included, are shared between node (left) and right (a reserved spare). Copies the separator for
 * the parent into sepbuf and returns its length. */
static uint32_t bt_split(struct btree *t, struct bt_node *node, uint32_t pos, const uint8_t *key,
                         uint32_t klen, const uint8_t *val, uint32_t vlen, struct bt_node *kid,
                         struct bt_node *right, uint8_t *sepbuf)
{
	uint8_t level = bt_level(node->bn_img);
	uint32_t n = bt_count(node->bn_img), cnt = n + 1;
	struct bt_ent *ents = t->t_ents;
	for (uint32_t i = 0, j = 0; i < cnt; i++) {
		if (i == pos) {
			ents[i] = (struct bt_ent){key, klen, val, vlen, kid};
			continue;
		}
		bt_node_entry_trusted(t, node->bn_img, j, &ents[i]);
		if (level > 0)
			ents[i].be_kid = node->bn_kids[j];
		j++;
	}
	uint32_t k = bt_split_point(t, ents, cnt, pos);
	uint32_t seplen;
	if (level == 0) {
		seplen = bt_shortest_sep(ents[k - 1].be_key, ents[k - 1].be_klen, ents[k].be_key,
		                         ents[k].be_klen);
		memcpy(sepbuf, ents[k].be_key, seplen);
	} else {
		/* The right half's first key moves up; in the right node it becomes minus infinity.
		 */
		seplen = ents[k].be_klen;
		memcpy(sepbuf, ents[k].be_key, seplen);
		ents[k].be_klen = 0;
	}
	bt_node_set(t, right, level, ents + k, cnt - k);
	bt_node_set(t, node, level, ents, k); /* through the scratch image: ents point into node */
	return seplen;
}

/* Inserts (key, val, kid) at pos of the dirty node at path level l, splitting up the path as
 * needed. Every node on the path is dirty and the spares suffice (one per level, plus a root). */
static void bt_insert_up(struct btree *t, struct bt_path *pa, uint32_t l, uint32_t pos,
                         const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen,
                         struct bt_node *kid)
{
	uint8_t sep[2][BTREE_KEY_MAX];
	unsigned cur = 0;
	for (;;) {
		struct bt_node *node = pa->pa_lv[l].bl_node;
		uint8_t level = bt_level(node->bn_img);
		if (bt_node_insert(t, node, pos, key, klen, val, vlen, kid)) {
			if (level == 0)
				node->bn_fill = bt_count(node->bn_img);
			return;
		}
		struct bt_node *right = bt_take(t);
		uint32_t seplen =
		    bt_split(t, node, pos, key, klen, val, vlen, kid, right, sep[cur]);
		if (l == 0) {
			struct bt_node *root = bt_take(t);
			const struct bt_ent ents[2] = {
			    {NULL, 0, NULL, BT_PTR_BYTES, node},
			    {sep[cur], seplen, NULL, BT_PTR_BYTES, right},
			};
			bt_node_set(t, root, (uint8_t)(level + 1), ents, 2);
			t->t_root = root;
			t->t_root_changed = true;
			return;
		}
		key = sep[cur];
		klen = seplen;
		val = NULL; /* a dirty child's placeholder */
		vlen = BT_PTR_BYTES;
		kid = right;
		cur ^= 1u; /* the next split must not overwrite the separator it is inserting */
		l--;
		pos = pa->pa_lv[l].bl_idx + 1;
	}
}

int btree_put(struct btree *t, const void *key, uint32_t key_len, const void *val, uint32_t val_len,
              enum btree_put_mode mode, struct blk_ptr *missing_out)
{
	const uint8_t *k = key, *v = val;
	if (key_len > t->t_cfg.bc_key_max || val_len > t->t_cfg.bc_val_max ||
	    (k == NULL && key_len > 0) || (v == NULL && val_len > 0) ||
	    (mode != BTREE_PUT_UPSERT && mode != BTREE_PUT_NEW && mode != BTREE_PUT_REPLACE))
		return -EINVAL;
	int rc;
	if (bt_empty(t)) {
		if (mode == BTREE_PUT_REPLACE)
			return -ENOENT;
		if ((rc = bt_reserve(t, 1)) != 0)
			return rc;
		struct bt_node *leaf = bt_take(t);
		const struct bt_ent e = {k, key_len, v, val_len, NULL};
		bt_node_set(t, leaf, 0, &e, 1);
		t->t_root = leaf;
		t->t_root_changed = true;
		return 0;
	}
	struct bt_path pa;
	struct bt_node *copies[BTREE_MAX_LEVELS];
	if ((rc = bt_walk(t, &pa, BT_ROUTE_KEY, k, key_len, missing_out)) != 0)
		goto out;
	uint32_t d = pa.pa_depth - 1;
	struct bt_level *leaf = &pa.pa_lv[d];
	uint32_t pos;
	bool eq;
	if ((rc = bt_node_search(t, leaf->bl_img, k, key_len, &pos, &eq)) != 0)
		goto out;
	if (eq && mode == BTREE_PUT_NEW) {
		rc = -EEXIST;
		goto out;
	}
	if (!eq && mode == BTREE_PUT_REPLACE) {
		rc = -ENOENT;
		goto out;
	}
	uint32_t old_vlen = 0;
	if (eq) {
		struct bt_ent e;
		if ((rc = bt_node_entry(t, leaf->bl_img, pos, &e)) != 0)
			goto out;
		old_vlen = e.be_vlen;
	}
	bool may_split = !(eq && old_vlen == val_len);
	if (may_split && pa.pa_depth == BTREE_MAX_LEVELS) {
		/* A split reaching this root would add a level beyond the limit. */
		const uint8_t *root = pa.pa_lv[0].bl_img;
		uint32_t room = bt_heap(root) - (BT_HDR_BYTES + BT_SLOT_BYTES * bt_count(root)) +
		                bt_garbage(root);
		if (room < bt_ent_bytes(t->t_cfg.bc_key_max, BT_PTR_BYTES)) {
			rc = -EFBIG;
			goto out;
		}
	}
	if ((rc = bt_reserve(t, bt_clean_levels(&pa, pa.pa_depth) +
	                            (may_split ? pa.pa_depth + 1 : 0))) != 0)
		goto out;
	if ((rc = bt_cow_prepare(t, &pa, pa.pa_depth, copies)) != 0)
		goto out;
	bt_cow_commit(t, &pa, pa.pa_depth, copies);
	/* From here nothing fails. */
	struct bt_node *node = leaf->bl_node;
	if (eq) {
		if (old_vlen == val_len) {
			if (val_len > 0)
				memcpy(bt_node_val_mut(t, node, pos), v, val_len);
			goto out;
		}
		bt_node_remove(t, node, pos);
	} else {
		for (uint32_t l = 0; l < d; l++)
			pa.pa_lv[l].bl_node->bn_fill++;
	}
	bt_insert_up(t, &pa, d, pos, k, key_len, v, val_len, NULL);
out:
	bt_path_release(t, &pa, 0);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Delete */

/* Loads the chain that will replace a root left with one child: child s of up (at level + 1),
 * then while the loaded node is internal with a single entry, its child. */
static int bt_load_chain(struct btree *t, const struct bt_level *up, uint32_t s, uint8_t level,
                         struct bt_level *chain, uint32_t *nchain, struct blk_ptr *missing_out)
{
	for (;;) {
		struct bt_node *dirty;
		struct blk_ptr bp;
		struct bt_key lo, hi;
		int rc = bt_child_ref(t, up, s, level, &dirty, &bp, &lo, &hi);
		if (rc != 0)
			return rc;
		struct bt_level *lv = &chain[(*nchain)++];
		rc = bt_level_open(t, lv, dirty, &bp, level, &lo, &hi, missing_out);
		if (rc != 0)
			return rc;
		if (level == 0 || lv->bl_n != 1)
			return 0;
		up = lv;
		s = 0;
		level--;
	}
}

/* Replaces the dirty root, which has one child, by that child or, through the chain of single
 * children loaded by bt_load_chain, by the first descendant that is a leaf or has two or more. */
static void bt_shrink_root(struct btree *t, struct bt_level *chain, uint32_t nchain)
{
	VERIFY(nchain >= 1);
	bt_recycle(t, t->t_root); /* its clean block, if any, was freed when it was copied */
	t->t_root = NULL;
	t->t_root_changed = true;
	for (uint32_t c = 0;; c++) {
		struct bt_level *ch = &chain[c];
		if (c + 1 < nchain) {
			bt_discard_level(t, ch); /* a single child's parent */
			continue;
		}
		if (ch->bl_node != NULL) {
			t->t_root = ch->bl_node;
		} else {
			t->t_root_bp = ch->bl_bp;
			bt_level_release(t, ch);
		}
		return;
	}
}

/* Decides whether the leaf at the end of pa, after losing entry pos, merges with an adjacent
 * sibling, and if so builds the merged leaf into a reserved spare (*merged_out), opening the
 * sibling into *sib (index *sib_idx in the parent). Misses and malformed siblings just mean no
 * merge. */
static void bt_plan_merge(struct btree *t, struct bt_path *pa, uint32_t pos, struct bt_level *sib,
                          uint32_t *sib_idx, struct bt_node **merged_out)
{
	uint32_t d = pa->pa_depth - 1;
	const struct bt_level *leaf = &pa->pa_lv[d], *up = &pa->pa_lv[d - 1];
	struct bt_ent e;
	if (bt_node_entry(t, leaf->bl_img, pos, &e) != 0)
		return;
	uint32_t used_after = bt_used_bytes(t, leaf->bl_img) - bt_ent_bytes(e.be_klen, e.be_vlen);
	if (used_after >= BT_MERGE_BELOW(t->t_nb) || up->bl_n < 2)
		return;
	uint32_t s = up->bl_idx + 1 < up->bl_n ? up->bl_idx + 1 : up->bl_idx - 1;
	struct bt_node *dirty;
	struct blk_ptr bp;
	struct bt_key lo, hi;
	if (bt_child_ref(t, up, s, 0, &dirty, &bp, &lo, &hi) != 0)
		return;
	if (bt_level_open(t, sib, dirty, &bp, 0, &lo, &hi, NULL) != 0)
		goto no_merge;
	if (used_after + bt_used_bytes(t, sib->bl_img) - BT_HDR_BYTES > BT_MERGE_FIT(t->t_nb))
		goto no_merge;
	const struct bt_level *left = s < up->bl_idx ? sib : leaf,
	                      *right = s < up->bl_idx ? leaf : sib;
	uint32_t cnt = 0;
	for (const struct bt_level *side = left;; side = right) {
		for (uint32_t i = 0; i < side->bl_n; i++) {
			if (side == leaf && i == pos)
				continue;
			if (bt_node_entry(t, side->bl_img, i, &t->t_ents[cnt]) != 0)
				goto no_merge;
			cnt++;
		}
		if (side == right)
			break;
	}
	struct bt_node *merged = bt_take(t);
	bt_node_set(t, merged, 0, t->t_ents, cnt);
	*sib_idx = s;
	*merged_out = merged;
	return;
no_merge:
	bt_level_release(t, sib);
}

int btree_delete(struct btree *t, const void *key, uint32_t key_len, struct blk_ptr *missing_out)
{
	const uint8_t *k = key;
	if (key_len > t->t_cfg.bc_key_max || (k == NULL && key_len > 0))
		return -EINVAL;
	if (bt_empty(t))
		return -ENOENT;
	struct bt_path pa;
	struct bt_level chain[BTREE_MAX_LEVELS];
	uint32_t nchain = 0;
	struct bt_level sib = {0};
	uint32_t sib_idx = 0;
	struct bt_node *merged = NULL;
	struct bt_node *copies[BTREE_MAX_LEVELS];
	int rc = bt_walk(t, &pa, BT_ROUTE_KEY, k, key_len, missing_out);
	if (rc != 0)
		goto out;
	uint32_t d = pa.pa_depth - 1;
	struct bt_level *leaf = &pa.pa_lv[d];
	uint32_t pos;
	bool eq;
	if ((rc = bt_node_search(t, leaf->bl_img, k, key_len, &pos, &eq)) != 0)
		goto out;
	if (!eq) {
		rc = -ENOENT;
		goto out;
	}
	/* Levels [j, d] hold one entry each and disappear with this one (D2). */
	uint32_t j = d + 1;
	while (j > 0 && pa.pa_lv[j - 1].bl_n == 1)
		j--;
	uint32_t upto = j; /* levels that stay, so are copied */
	if (j == 1 && d >= 1 && pa.pa_lv[0].bl_n == 2) {
		/* The root keeps one child and will be replaced by it. */
		rc = bt_load_chain(t, &pa.pa_lv[0], 1 - pa.pa_lv[0].bl_idx,
		                   (uint8_t)(pa.pa_root_level - 1), chain, &nchain, missing_out);
		if (rc != 0)
			goto out;
	}
	bool may_merge = j == d + 1 && d >= 1;
	if ((rc = bt_reserve(t, bt_clean_levels(&pa, SH_MIN(upto, d + 1)) + (may_merge ? 1 : 0))) !=
	    0)
		goto out;
	if (may_merge) {
		bt_plan_merge(t, &pa, pos, &sib, &sib_idx, &merged);
		if (merged != NULL)
			upto = d; /* the leaf is replaced, not copied */
	}
	if ((rc = bt_cow_prepare(t, &pa, SH_MIN(upto, d + 1), copies)) != 0)
		goto out;
	bt_cow_commit(t, &pa, SH_MIN(upto, d + 1), copies);
	/* From here nothing fails. */
	if (j == 0) {
		for (uint32_t l = d + 1; l-- > 0;)
			bt_discard_level(t, &pa.pa_lv[l]);
		t->t_root = NULL;
		memset(&t->t_root_bp, 0, sizeof(t->t_root_bp));
		t->t_root_changed = true;
		goto out;
	}
	for (uint32_t l = 0; l < j && l < d; l++)
		pa.pa_lv[l].bl_node->bn_fill--;
	if (j <= d) {
		for (uint32_t l = d + 1; l-- > j;)
			bt_discard_level(t, &pa.pa_lv[l]);
		struct bt_node *parent = pa.pa_lv[j - 1].bl_node;
		uint32_t idx = pa.pa_lv[j - 1].bl_idx;
		bt_node_remove(t, parent, idx);
		if (idx == 0)
			bt_node_clear_key0(
			    t, parent); /* K3: the new first child covers from the bound */
		if (j == 1 && bt_count(parent->bn_img) == 1)
			bt_shrink_root(t, chain, nchain);
	} else if (merged != NULL) {
		struct bt_node *parent = pa.pa_lv[d - 1].bl_node;
		uint32_t idx = pa.pa_lv[d - 1].bl_idx;
		bt_discard_level(t, leaf);
		bt_discard_level(t, &sib);
		parent->bn_kids[SH_MIN(idx, sib_idx)] = merged;
		bt_node_remove(t, parent, SH_MAX(idx, sib_idx)); /* never entry 0: K3 holds */
		if (d == 1 && bt_count(parent->bn_img) == 1) {
			chain[0] = (struct bt_level){.bl_node = merged,
			                             .bl_img = merged->bn_img,
			                             .bl_n = bt_count(merged->bn_img)};
			bt_shrink_root(t, chain, 1);
		}
		merged = NULL;
	} else {
		bt_node_remove(t, leaf->bl_node, pos);
		leaf->bl_node->bn_fill = bt_count(leaf->bl_node->bn_img);
	}
out:
	if (merged != NULL)
		bt_recycle(t, merged);
	bt_level_release(t, &sib);
	for (uint32_t c = 0; c < nchain; c++)
		bt_level_release(t, &chain[c]);
	bt_path_release(t, &pa, 0);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Sync */

static int bt_sync_node(struct btree *t, struct bt_node *node, struct blk_ptr *bp_out)
{
	uint8_t *img = node->bn_img;
	uint8_t level = bt_level(img);
	uint32_t n = bt_count(img);
	if (level > 0) {
		for (uint32_t i = 0; i < n; i++) {
			struct bt_node *kid = node->bn_kids[i];
			if (kid == NULL)
				continue;
			struct blk_ptr bp;
			int rc = bt_sync_node(t, kid, &bp);
			if (rc != 0)
				return rc;
			/* The child is clean now, in a parent that is still dirty. */
			bt_ptr_encode(&bp, bt_node_val_mut(t, node, i));
			node->bn_kids[i] = NULL;
			bt_recycle(t, kid);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		bt_node_entry_trusted(t, img, i, &t->t_ents[i]);
	bt_node_build(t, t->t_scratch, level, t->t_ents, n); /* compact, canonical bytes */
	struct blk_ptr bp = {0};
	int rc = t->t_st.bs_write(t->t_st.bs_ctx, t->t_scratch, t->t_nb, level, node->bn_fill, &bp);
	if (rc != 0)
		return rc < 0 ? rc : -EIO;
	bp.bp_level = level;
	bp.bp_fill = node->bn_fill;
	VERIFY(bp.bp_birth_txg != 0 && bp.bp_lsize == t->t_nb); /* the owner's bs_write contract */
	*bp_out = bp;
	return 0;
}

int btree_sync(struct btree *t, struct blk_ptr *root_out)
{
	if (t->t_root != NULL) {
		struct blk_ptr bp;
		int rc = bt_sync_node(t, t->t_root, &bp);
		if (rc != 0)
			return rc;
		bt_recycle(t, t->t_root);
		t->t_root = NULL;
		t->t_root_bp = bp;
	}
	t->t_root_changed = false;
	*root_out = t->t_root_bp;
	return 0;
}

uint64_t btree_dirty_bytes(const struct btree *t)
{
	return t->t_dirty_nodes * t->t_node_alloc_bytes;
}

bool btree_is_dirty(const struct btree *t)
{
	return t->t_root != NULL || t->t_root_changed;
}

void btree_stats(const struct btree *t, struct btree_stats *stats_out)
{
	memset(stats_out, 0, sizeof(*stats_out));
	if (!bt_empty(t)) {
		stats_out->bst_depth = (uint32_t)bt_root_level(t) + 1;
		stats_out->bst_entries =
		    t->t_root != NULL ? t->t_root->bn_fill : t->t_root_bp.bp_fill;
	}
	stats_out->bst_dirty_nodes = t->t_dirty_nodes;
	stats_out->bst_dirty_bytes = btree_dirty_bytes(t);
}

/* ---------------------------------------------------------------------------------------------
 * Open and close */

int btree_open(const struct btree_config *cfg, const struct blk_ptr *root, struct btree **out)
{
	uint32_t nb = cfg->bc_node_bytes;
	if (nb < BTREE_NODE_MIN_BYTES || nb > BTREE_NODE_MAX_BYTES || (nb & (nb - 1)) != 0)
		return -EINVAL;
	uint32_t emax = btree_entry_max_bytes(nb);
	if (cfg->bc_key_max < 1 || cfg->bc_key_max > BTREE_KEY_MAX || cfg->bc_val_max > emax ||
	    cfg->bc_key_max + cfg->bc_val_max > emax || cfg->bc_key_max + BT_PTR_BYTES > emax)
		return -EINVAL;
	const struct btree_store *st = &cfg->bc_store;
	if (st->bs_get == NULL || st->bs_release == NULL || st->bs_write == NULL ||
	    st->bs_free == NULL)
		return -EINVAL;
	struct btree *t = mem_zalloc(sizeof(*t));
	if (t == NULL)
		return -ENOMEM;
	t->t_cfg = *cfg;
	t->t_st = *st;
	t->t_nb = nb;
	t->t_shift = (uint32_t)__builtin_ctz(nb);
	t->t_max_entries = (nb - BT_HDR_BYTES) / (BT_SLOT_BYTES + BT_ENTRY_HDR_BYTES);
	t->t_max_kids = (nb - BT_HDR_BYTES) / (BT_SLOT_BYTES + BT_ENTRY_HDR_BYTES + BT_PTR_BYTES);
	t->t_node_alloc_bytes =
	    sizeof(struct bt_node) + sizeof(struct bt_node *) * t->t_max_kids + nb;
	if (root != NULL && root->bp_birth_txg != 0) {
		if (root->bp_level >= BTREE_MAX_LEVELS ||
		    bt_ptr_check(t, root, root->bp_level) != 0) {
			mem_free(t);
			return -EIO;
		}
		t->t_root_bp = *root;
	}
	if (sh_random_bytes(&t->t_fp_seed, sizeof(t->t_fp_seed)) != 0)
		t->t_fp_seed = clock_monotonic_ns() ^ (uint64_t)(uintptr_t)t;
	*out = t;
	return 0;
}

void btree_close(struct btree *t)
{
	if (t == NULL)
		return;
	if (t->t_root != NULL)
		bt_drop(t, t->t_root);
	while (t->t_spares != NULL) {
		struct bt_node *node = t->t_spares;
		t->t_spares = node->bn_next;
		mem_free(node);
	}
	mem_free(t->t_scratch);
	mem_free(t->t_ents);
	mem_free(t->t_vset[0].vs_slots);
	mem_free(t->t_vset[1].vs_slots);
	mem_free(t);
}

/* ---------------------------------------------------------------------------------------------
 * The offline check */

struct bt_check {
	struct btree *ck_t;
	btree_load_fn ck_load;
	void *ck_arg;
	btree_node_fn ck_node; /* may be NULL */
	void *ck_node_arg;
	char *ck_report;
	size_t ck_report_bytes;
	uint32_t ck_path[BTREE_MAX_LEVELS]; /* child indexes from the root, for the report */
};

static void bt_check_report(struct bt_check *ck, const struct bt_node *dirty,
                            const struct blk_ptr *bp, uint8_t level, uint32_t depth,
                            const char *what)
{
	if (ck->ck_report_bytes == 0)
		return;
	char path[BTREE_MAX_LEVELS * 11 + 2] = "";
	size_t off = 0;
	for (uint32_t i = 0; i < depth && off < sizeof(path); i++)
		off += (size_t)snprintf(path + off, sizeof(path) - off, "/%u", ck->ck_path[i]);
	if (dirty != NULL)
		snprintf(ck->ck_report, ck->ck_report_bytes,
		         "level %u node at root%s (in memory): %s", level, path, what);
	else
		snprintf(ck->ck_report, ck->ck_report_bytes,
		         "level %u node at root%s (block vdev %u offset %llu birth %llu): %s",
		         level, path, bp->bp_vdev, (unsigned long long)bp->bp_offset,
		         (unsigned long long)bp->bp_birth_txg, what);
}

static int bt_check_node(struct bt_check *ck, struct bt_node *dirty, const struct blk_ptr *bp,
                         uint8_t level, uint32_t depth, uint64_t fill, const struct bt_key *lo,
                         const struct bt_key *hi)
{
	struct btree *t = ck->ck_t;
	const uint8_t *img;
	void *hold = NULL;
	char why[200];
	int rc;
	if (dirty != NULL) {
		img = dirty->bn_img;
	} else {
		const void *image = NULL;
		rc = t->t_st.bs_get(t->t_st.bs_ctx, bp, &image, &hold);
		if (rc == -SH_ENEEDBLOCK) {
			rc = ck->ck_load(ck->ck_arg, bp);
			if (rc == 0)
				rc = t->t_st.bs_get(t->t_st.bs_ctx, bp, &image, &hold);
			if (rc == -SH_ENEEDBLOCK)
				rc = -EIO; /* loaded, yet still missing */
		}
		if (rc == 0 && image == NULL) {
			t->t_st.bs_release(t->t_st.bs_ctx, hold);
			rc = -EIO;
		}
		if (rc != 0) {
			snprintf(why, sizeof(why), "cannot read the block: %s",
			         sh_strerror(rc < 0 ? rc : -EIO));
			bt_check_report(ck, NULL, bp, level, depth, why);
			return rc < 0 ? rc : -EIO;
		}
		img = image;
	}
	rc = bt_node_verify(t, img, level, fill, lo, hi, dirty != NULL ? dirty->bn_kids : NULL,
	                    true, why, sizeof(why));
	if (rc != 0) {
		bt_check_report(ck, dirty, bp, level, depth, why);
		goto out;
	}
	if (dirty == NULL && ck->ck_node != NULL)
		ck->ck_node(ck->ck_node_arg, bp);
	uint32_t n = bt_count(img);
	if (dirty != NULL) {
		for (uint32_t i = level > 0 ? n : 0; i < t->t_max_kids; i++) {
			if (dirty->bn_kids[i] != NULL) {
				snprintf(why, sizeof(why), "child pointer in unused slot %u", i);
				bt_check_report(ck, dirty, bp, level, depth, why);
				rc = -EIO;
				goto out;
			}
		}
	}
	for (uint32_t i = 0; level > 0 && i < n; i++) {
		struct bt_ent e;
		struct bt_key clo = *lo, chi = *hi;
		if (i > 0) {
			VERIFY(bt_node_entry(t, img, i, &e) == 0); /* verified above */
			clo = (struct bt_key){e.be_key, e.be_klen, true};
		}
		if (i + 1 < n) {
			VERIFY(bt_node_entry(t, img, i + 1, &e) == 0);
			chi = (struct bt_key){e.be_key, e.be_klen, true};
		}
		struct bt_node *kid = dirty != NULL ? dirty->bn_kids[i] : NULL;
		struct blk_ptr cbp = {0};
		uint64_t cfill;
		if (kid != NULL) {
			cfill = kid->bn_fill;
		} else {
			VERIFY(bt_node_entry(t, img, i, &e) == 0);
			VERIFY(bt_ptr_decode(t, e.be_val, (uint8_t)(level - 1), &cbp) ==
			       0); /* verified (P1) */
			cfill = cbp.bp_fill;
		}
		ck->ck_path[depth] = i;
		rc = bt_check_node(ck, kid, &cbp, (uint8_t)(level - 1), depth + 1, cfill, &clo,
		                   &chi);
		if (rc != 0)
			break;
	}
out:
	if (hold != NULL)
		t->t_st.bs_release(t->t_st.bs_ctx, hold);
	return rc;
}

int btree_check(struct btree *t, btree_load_fn load, void *arg, char *report, size_t report_bytes)
{
	return btree_check_nodes(t, load, arg, NULL, NULL, report, report_bytes);
}

int btree_check_nodes(struct btree *t, btree_load_fn load, void *arg, btree_node_fn node,
                      void *node_arg, char *report, size_t report_bytes)
{
	struct bt_check ck = {t, load, arg, node, node_arg, report, report_bytes, {0}};
	if (report_bytes > 0)
		snprintf(report, report_bytes, "ok");
	if (bt_empty(t))
		return 0;
	const struct bt_key none = {NULL, 0, false};
	uint64_t fill = t->t_root != NULL ? t->t_root->bn_fill : t->t_root_bp.bp_fill;
	return bt_check_node(&ck, t->t_root, &t->t_root_bp, bt_root_level(t), 0, fill, &none,
	                     &none);
}
