/* btree_node.c: the B+tree's node format: reading node images defensively (header check, bounded
 * entry access, binary search, full verification), building and editing dirty node images, and the
 * 64-byte block pointer codec. The format's tables and rules are in the theory comment of btree.c;
 * every check below cites the rule it enforces. */
#include <errno.h>
#include <stdio.h>

#include "btree/btree_impl.h"

#define BT_WHY(...)                                                                                \
	do {                                                                                       \
		if (why_bytes > 0)                                                                 \
			snprintf(why, why_bytes, __VA_ARGS__);                                     \
	} while (0)

uint32_t btree_entry_max_bytes(uint32_t node_bytes)
{
	if (node_bytes < BT_HDR_BYTES + BT_MIN_ENTRIES * (BT_SLOT_BYTES + BT_ENTRY_HDR_BYTES))
		return 0;
	return (node_bytes - BT_HDR_BYTES) / BT_MIN_ENTRIES - BT_SLOT_BYTES - BT_ENTRY_HDR_BYTES;
}

/* ---------------------------------------------------------------------------------------------
 * Block pointers (blk.h's 64-byte codec, with the tree's own rules on top) */

void bt_ptr_encode(const struct blk_ptr *bp, uint8_t out[BT_PTR_BYTES])
{
	blk_ptr_encode(bp, out); /* a hole is 64 zero bytes */
}

uint64_t bt_ptr_fill_of(const uint8_t in[BT_PTR_BYTES])
{
	return bt_get64(in + 56);
}

int bt_ptr_check(const struct btree *t, const struct blk_ptr *bp, uint8_t level)
{
	/* Rule P1: a child pointer names a node of this tree's size at the level below its parent,
	 * with at least one entry under it. */
	if (bp->bp_birth_txg == 0 || bp->bp_lsize != t->t_nb || bp->bp_level != level ||
	    bp->bp_fill == 0)
		return -EIO;
	return 0;
}

int bt_ptr_decode(const struct btree *t, const uint8_t in[BT_PTR_BYTES], uint8_t level,
                  struct blk_ptr *bp_out)
{
	struct blk_ptr bp;
	if (blk_ptr_decode(in, &bp) != 0)
		return -EIO;
	int rc = bt_ptr_check(t, &bp, level);
	if (rc != 0)
		return rc;
	*bp_out = bp;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Reading images */

int bt_node_check_header(const struct btree *t, const uint8_t *img, uint8_t level, char *why,
                         size_t why_bytes)
{
	/* Rules H1-H5 of the theory comment. */
	if (bt_get32(img + BT_OFF_MAGIC) != BT_MAGIC) {
		BT_WHY("bad magic 0x%08x", bt_get32(img + BT_OFF_MAGIC));
		return -EIO;
	}
	if (img[BT_OFF_VERSION] != BT_VERSION) {
		BT_WHY("unknown format version %u", img[BT_OFF_VERSION]);
		return -EIO;
	}
	if (img[BT_OFF_TYPE] != t->t_cfg.bc_type) {
		BT_WHY("tree type %u, expected %u", img[BT_OFF_TYPE], t->t_cfg.bc_type);
		return -EIO;
	}
	if (img[BT_OFF_LEVEL] != level) {
		BT_WHY("level %u, expected %u", img[BT_OFF_LEVEL], level);
		return -EIO;
	}
	if (img[BT_OFF_SHIFT] != t->t_shift) {
		BT_WHY("node size 2^%u, expected 2^%u", img[BT_OFF_SHIFT], t->t_shift);
		return -EIO;
	}
	if (bt_get16(img + BT_OFF_PAD) != 0) {
		BT_WHY("non-zero padding");
		return -EIO;
	}
	for (uint32_t i = BT_OFF_RESERVED; i < BT_HDR_BYTES; i++) {
		if (img[i] != 0) {
			BT_WHY("non-zero reserved byte at %u", i);
			return -EIO;
		}
	}
	uint32_t n = bt_count(img);
	uint32_t max = level == 0 ? t->t_max_entries : t->t_max_kids;
	if (n == 0 || n > max) {
		BT_WHY("entry count %u outside 1..%u", n, max);
		return -EIO;
	}
	uint32_t heap = bt_heap(img), garbage = bt_garbage(img);
	if (heap < BT_HDR_BYTES + BT_SLOT_BYTES * n || heap > t->t_nb) {
		BT_WHY("heap start %u outside %u..%u", heap, BT_HDR_BYTES + BT_SLOT_BYTES * n,
		       t->t_nb);
		return -EIO;
	}
	if (garbage > t->t_nb - heap) {
		BT_WHY("garbage %u beyond the %u heap bytes", garbage, t->t_nb - heap);
		return -EIO;
	}
	return 0;
}

/* What the entry checks need from the header, read once per node rather than once per entry. */
struct bt_limits {
	uint32_t bl_heap; /* lowest valid entry offset */
	uint32_t bl_end;  /* node bytes */
	uint32_t bl_kmax;
	uint32_t bl_vmax;
	bool bl_internal; /* values are exactly one pointer */
};

static inline void bt_limits_of(const struct btree *t, const uint8_t *img, struct bt_limits *lim)
{
	lim->bl_heap = bt_heap(img);
	lim->bl_end = t->t_nb;
	lim->bl_kmax = t->t_cfg.bc_key_max;
	lim->bl_internal = img[BT_OFF_LEVEL] != 0;
	lim->bl_vmax = lim->bl_internal ? BT_PTR_BYTES : t->t_cfg.bc_val_max;
}

/* Rule E1: an entry lies wholly inside [heap start, node end) and its lengths are within the
 * configured maxima (an internal entry's value is exactly one pointer). */
static inline int bt_entry_at(const struct bt_limits *lim, const uint8_t *img, uint32_t i,
                              struct bt_ent *e)
{
	const uint8_t *slot = img + BT_HDR_BYTES + BT_SLOT_BYTES * i;
	uint32_t off = (uint32_t)slot[0] | ((uint32_t)slot[1] << 8);
	if (off < lim->bl_heap || off > lim->bl_end - BT_ENTRY_HDR_BYTES)
		return -EIO;
	uint32_t klen = img[off], vlen = (uint32_t)img[off + 1] | ((uint32_t)img[off + 2] << 8);
	if (klen > lim->bl_kmax || vlen > lim->bl_vmax ||
	    (lim->bl_internal && vlen != BT_PTR_BYTES) ||
	    klen + vlen > lim->bl_end - off - BT_ENTRY_HDR_BYTES)
		return -EIO;
	e->be_key = img + off + BT_ENTRY_HDR_BYTES;
	e->be_klen = klen;
	e->be_val = e->be_key + klen;
	e->be_vlen = vlen;
	e->be_kid = NULL;
	return 0;
}

int bt_node_entry(const struct btree *t, const uint8_t *img, uint32_t i, struct bt_ent *e)
{
	struct bt_limits lim;
	bt_limits_of(t, img, &lim);
	return bt_entry_at(&lim, img, i, e);
}

void bt_node_entry_trusted(const struct btree *t, const uint8_t *img, uint32_t i, struct bt_ent *e)
{
	(void)t;
	uint32_t off = bt_get16(img + BT_HDR_BYTES + BT_SLOT_BYTES * i);
	e->be_klen = img[off];
	e->be_vlen = bt_get16(img + off + 1);
	e->be_key = img + off + BT_ENTRY_HDR_BYTES;
	e->be_val = e->be_key + e->be_klen;
	e->be_kid = NULL;
}

int bt_node_search(const struct btree *t, const uint8_t *img, const uint8_t *key, uint32_t klen,
                   uint32_t *pos_out, bool *eq_out)
{
	/* The checks of bt_entry_at, written out: this loop is the hot path of every operation. */
	const uint32_t heap = bt_heap(img), end = t->t_nb, kmax = t->t_cfg.bc_key_max;
	const bool internal = img[BT_OFF_LEVEL] != 0;
	const uint32_t vmax = internal ? BT_PTR_BYTES : t->t_cfg.bc_val_max;
	const uint8_t *slots = img + BT_HDR_BYTES;
	uint32_t lo = 0, hi = bt_count(img);
	uint32_t eq_at = UINT32_MAX;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint32_t off = (uint32_t)slots[BT_SLOT_BYTES * mid] |
		               ((uint32_t)slots[BT_SLOT_BYTES * mid + 1] << 8);
		if (off < heap || off > end - BT_ENTRY_HDR_BYTES)
			return -EIO;
		uint32_t elen = img[off],
		         vlen = (uint32_t)img[off + 1] | ((uint32_t)img[off + 2] << 8);
		if (elen > kmax || vlen > vmax || (internal && vlen != BT_PTR_BYTES) ||
		    elen + vlen > end - off - BT_ENTRY_HDR_BYTES)
			return -EIO;
		uint32_t common = elen < klen ? elen : klen;
		int c = common ? memcmp(img + off + BT_ENTRY_HDR_BYTES, key, common) : 0;
		if (c == 0)
			c = (elen > klen) - (elen < klen);
		if (c < 0) {
			lo = mid + 1;
		} else {
			if (c == 0)
				eq_at = mid;
			hi = mid;
		}
	}
	*pos_out = lo;
	*eq_out = eq_at == lo; /* keys are distinct, so an equal probe is where lower_bound lands */
	return 0;
}

/* Sets the bits [from, to) of map; false if one was set already. Whole bytes at a time where it
 * can: btree_check runs this over every byte of every node. */
static bool bt_bits_claim(uint8_t *map, uint32_t from, uint32_t to)
{
	static const uint8_t zeros[BTREE_NODE_MAX_BYTES / 8];
	for (; from < to && (from % 8 != 0 || to - from < 8); from++) {
		uint8_t bit = (uint8_t)(1u << (from % 8));
		if (map[from / 8] & bit)
			return false;
		map[from / 8] = (uint8_t)(map[from / 8] | bit);
	}
	uint32_t bytes = (to - from) / 8;
	if (bytes > 0) {
		if (memcmp(map + from / 8, zeros, bytes) != 0)
			return false;
		memset(map + from / 8, 0xff, bytes);
		from += bytes * 8;
	}
	for (; from < to; from++) {
		uint8_t bit = (uint8_t)(1u << (from % 8));
		if (map[from / 8] & bit)
			return false;
		map[from / 8] = (uint8_t)(map[from / 8] | bit);
	}
	return true;
}

int bt_node_verify(const struct btree *t, const uint8_t *img, uint8_t level, uint64_t fill,
                   const struct bt_key *lo, const struct bt_key *hi, struct bt_node *const *kids,
                   bool strict, char *why, size_t why_bytes)
{
	int rc = bt_node_check_header(t, img, level, why, why_bytes);
	if (rc != 0)
		return rc;
	uint32_t n = bt_count(img);
	uint64_t entry_bytes = 0, sum = 0;
	struct bt_ent prev = {0}, e;
	struct bt_limits lim;
	bt_limits_of(t, img, &lim);
	for (uint32_t i = 0; i < n; i++) {
		if (bt_entry_at(&lim, img, i, &e) != 0) {
			BT_WHY("entry %u: slot or lengths out of bounds", i);
			return -EIO;
		}
		entry_bytes += BT_ENTRY_HDR_BYTES + e.be_klen + e.be_vlen;
		/* Rule K1: keys strictly increasing. */
		if (i > 0 && bt_cmp(prev.be_key, prev.be_klen, e.be_key, e.be_klen) >= 0) {
			BT_WHY("entry %u: key not greater than entry %u's", i, i - 1);
			return -EIO;
		}
		if (level > 0) {
			/* Rule K3: an internal node's first key is empty (minus infinity). */
			if (i == 0 && e.be_klen != 0) {
				BT_WHY("internal node's first key is not empty");
				return -EIO;
			}
			/* Rule K2: separators lie strictly inside the node's own range. */
			if (i == 1 && lo->bk_set &&
			    bt_cmp(e.be_key, e.be_klen, lo->bk_key, lo->bk_len) <= 0) {
				BT_WHY("separator 1 not above the node's lower bound");
				return -EIO;
			}
			uint64_t child_fill;
			if (kids != NULL && kids[i] != NULL) {
				child_fill = kids[i]->bn_fill;
			} else {
				struct blk_ptr bp;
				/* Rule P1 for each child. */
				if (bt_ptr_decode(t, e.be_val, (uint8_t)(level - 1), &bp) != 0) {
					BT_WHY("entry %u: child pointer invalid for level %u", i,
					       level - 1);
					return -EIO;
				}
				child_fill = bp.bp_fill;
			}
			if (__builtin_add_overflow(sum, child_fill, &sum)) {
				BT_WHY("children's fills overflow");
				return -EIO;
			}
		} else if (i == 0 && lo->bk_set &&
		           bt_cmp(e.be_key, e.be_klen, lo->bk_key, lo->bk_len) < 0) {
			BT_WHY("first key below the node's lower bound");
			return -EIO;
		}
		prev = e;
	}
	/* Rule K2, upper end: every key below the next separator of the ancestors. */
	if (hi->bk_set && (level == 0 || n > 1) &&
	    bt_cmp(prev.be_key, prev.be_klen, hi->bk_key, hi->bk_len) >= 0) {
		BT_WHY("last key not below the node's upper bound");
		return -EIO;
	}
	/* Rule H6: exact byte accounting. */
	if (entry_bytes != (uint64_t)(t->t_nb - bt_heap(img) - bt_garbage(img))) {
		BT_WHY("entries take %llu bytes, the header accounts for %u",
		       (unsigned long long)entry_bytes, t->t_nb - bt_heap(img) - bt_garbage(img));
		return -EIO;
	}
	/* Rule F1: fills. */
	if (level == 0)
		sum = n;
	if (sum != fill) {
		BT_WHY("fill %llu, expected %llu", (unsigned long long)sum,
		       (unsigned long long)fill);
		return -EIO;
	}
	if (strict) {
		/* Rule E2: entries do not overlap (harmless to readers, but a sign of a bad
		 * writer). */
		uint8_t map[BTREE_NODE_MAX_BYTES / 8];
		memset(map, 0, t->t_nb / 8);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t off = bt_get16(img + BT_HDR_BYTES + BT_SLOT_BYTES * i);
			VERIFY(bt_entry_at(&lim, img, i, &e) == 0); /* checked in the loop above */
			if (!bt_bits_claim(map, off,
			                   off + BT_ENTRY_HDR_BYTES + e.be_klen + e.be_vlen)) {
				BT_WHY("entry %u overlaps another entry", i);
				return -EIO;
			}
		}
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Building and editing dirty images */

uint64_t bt_ents_used(const struct bt_ent *ents, uint32_t n)
{
	uint64_t used = BT_HDR_BYTES;
	for (uint32_t i = 0; i < n; i++)
		used += bt_ent_bytes(ents[i].be_klen, ents[i].be_vlen);
	return used;
}

void bt_node_build(const struct btree *t, uint8_t *img, uint8_t level, const struct bt_ent *ents,
                   uint32_t n)
{
	VERIFY(bt_ents_used(ents, n) <= t->t_nb);
	memset(img, 0, t->t_nb);
	bt_put32(img + BT_OFF_MAGIC, BT_MAGIC);
	img[BT_OFF_VERSION] = (uint8_t)BT_VERSION;
	img[BT_OFF_TYPE] = t->t_cfg.bc_type;
	img[BT_OFF_LEVEL] = level;
	img[BT_OFF_SHIFT] = (uint8_t)t->t_shift;
	bt_put16(img + BT_OFF_COUNT, n);
	uint32_t heap = t->t_nb;
	for (uint32_t i = 0; i < n; i++) {
		const struct bt_ent *e = &ents[i];
		heap -= BT_ENTRY_HDR_BYTES + e->be_klen + e->be_vlen;
		img[heap] = (uint8_t)e->be_klen;
		bt_put16(img + heap + 1, e->be_vlen);
		if (e->be_klen > 0)
			memcpy(img + heap + BT_ENTRY_HDR_BYTES, e->be_key, e->be_klen);
		if (e->be_vlen > 0 &&
		    e->be_val != NULL) /* NULL: a dirty child's placeholder, zeros */
			memcpy(img + heap + BT_ENTRY_HDR_BYTES + e->be_klen, e->be_val, e->be_vlen);
		bt_put16(img + BT_HDR_BYTES + BT_SLOT_BYTES * i, heap);
	}
	bt_put32(img + BT_OFF_HEAP, heap);
	bt_put32(img + BT_OFF_GARBAGE, 0);
}

void bt_node_compact(struct btree *t, struct bt_node *node)
{
	uint32_t n = bt_count(node->bn_img);
	for (uint32_t i = 0; i < n; i++)
		bt_node_entry_trusted(t, node->bn_img, i, &t->t_ents[i]);
	bt_node_build(t, t->t_scratch, bt_level(node->bn_img), t->t_ents, n);
	memcpy(node->bn_img, t->t_scratch, t->t_nb);
}

bool bt_node_insert(struct btree *t, struct bt_node *node, uint32_t pos, const uint8_t *key,
                    uint32_t klen, const uint8_t *val, uint32_t vlen, struct bt_node *kid)
{
	uint8_t *img = node->bn_img;
	uint32_t n = bt_count(img);
	uint32_t need = bt_ent_bytes(klen, vlen);
	uint32_t free_bytes = bt_heap(img) - (BT_HDR_BYTES + BT_SLOT_BYTES * n);
	if (free_bytes < need) {
		if (free_bytes + bt_garbage(img) < need)
			return false;
		bt_node_compact(t, node);
	}
	uint32_t heap = bt_heap(img) - (BT_ENTRY_HDR_BYTES + klen + vlen);
	img[heap] = (uint8_t)klen;
	bt_put16(img + heap + 1, vlen);
	if (klen > 0)
		memcpy(img + heap + BT_ENTRY_HDR_BYTES, key, klen);
	if (val != NULL)
		memcpy(img + heap + BT_ENTRY_HDR_BYTES + klen, val, vlen);
	else
		memset(img + heap + BT_ENTRY_HDR_BYTES + klen, 0, vlen);
	uint8_t *slots = img + BT_HDR_BYTES;
	memmove(slots + BT_SLOT_BYTES * (pos + 1), slots + BT_SLOT_BYTES * pos,
	        BT_SLOT_BYTES * (n - pos));
	bt_put16(slots + BT_SLOT_BYTES * pos, heap);
	bt_put16(img + BT_OFF_COUNT, n + 1);
	bt_put32(img + BT_OFF_HEAP, heap);
	if (bt_level(img) > 0) {
		memmove(&node->bn_kids[pos + 1], &node->bn_kids[pos],
		        sizeof(node->bn_kids[0]) * (n - pos));
		node->bn_kids[pos] = kid;
	}
	return true;
}

void bt_node_remove(struct btree *t, struct bt_node *node, uint32_t pos)
{
	uint8_t *img = node->bn_img;
	uint32_t n = bt_count(img);
	struct bt_ent e;
	bt_node_entry_trusted(t, img, pos, &e);
	uint8_t *slots = img + BT_HDR_BYTES;
	memmove(slots + BT_SLOT_BYTES * pos, slots + BT_SLOT_BYTES * (pos + 1),
	        BT_SLOT_BYTES * (n - pos - 1));
	bt_put16(slots + BT_SLOT_BYTES * (n - 1), 0);
	bt_put16(img + BT_OFF_COUNT, n - 1);
	if (n == 1) {
		bt_put32(img + BT_OFF_HEAP, t->t_nb);
		bt_put32(img + BT_OFF_GARBAGE, 0);
	} else {
		bt_put32(img + BT_OFF_GARBAGE,
		         bt_garbage(img) + BT_ENTRY_HDR_BYTES + e.be_klen + e.be_vlen);
	}
	if (bt_level(img) > 0) {
		memmove(&node->bn_kids[pos], &node->bn_kids[pos + 1],
		        sizeof(node->bn_kids[0]) * (n - pos - 1));
		node->bn_kids[n - 1] = NULL;
	}
}

void bt_node_clear_key0(struct btree *t, struct bt_node *node)
{
	uint8_t *img = node->bn_img;
	uint32_t off = bt_get16(img + BT_HDR_BYTES);
	uint32_t klen = img[off], vlen = bt_get16(img + off + 1);
	(void)t;
	if (klen == 0)
		return;
	/* The entry's header moves up to just before its value; the key bytes become garbage. */
	uint32_t noff = off + klen;
	img[noff] = 0;
	bt_put16(img + noff + 1, vlen);
	bt_put16(img + BT_HDR_BYTES, noff);
	bt_put32(img + BT_OFF_GARBAGE, bt_garbage(img) + klen);
}

uint8_t *bt_node_val_mut(const struct btree *t, struct bt_node *node, uint32_t i)
{
	(void)t;
	uint32_t off = bt_get16(node->bn_img + BT_HDR_BYTES + BT_SLOT_BYTES * i);
	return node->bn_img + off + BT_ENTRY_HDR_BYTES + node->bn_img[off];
}
