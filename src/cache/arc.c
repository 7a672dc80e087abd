/* arc.c: the Adaptive Replacement Cache that holds the pool's blocks in memory.
 *
 * Problem. The pool reads every B+tree node and data block through this cache. Plain LRU is flushed
 * by one long scan (a backup reading every file once); plain LFU never forgets. ARC (Megiddo &
 * Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003) keeps two lists: blocks
 * seen once recently (MRU, the paper's T1) and blocks seen at least twice (MFU, T2), plus two ghost
 * lists (B1, B2) holding only the keys recently evicted from each. A miss that finds its key in a
 * ghost list shows which side was cut too short, and moves the target size p of the MRU side
 * towards it. A scan only churns the MRU side; the MFU side keeps the working set.
 *
 * Departures from the paper (which counts uniform pages, is single-threaded and has no I/O):
 *   1. Bytes, not pages. Blocks vary from 4 KiB to 1 MiB, so c (the limit), p and every list
 *      length are bytes, and a ghost remembers the size of the block it stood for. The paper's
 *      adaptation by one page times max(1, |B2|/|B1|) becomes the ghost's bytes times
 *      max(1, b2/b1) (integer division), clamped to [0, c], as ZFS does. The paper's tests
 *      "|L1| = c" and "|L1| + |L2| = 2c" become "the new block would not fit" (arc_make_room).
 *   2. Holds. A held buffer cannot be evicted, so it leaves its list while held (still counted in
 *      its state's bytes) and its last release puts it back at the head, the most recent end.
 *      Eviction thus only looks at list tails: O(1) per victim, never a walk past held buffers
 *      (ZFS keeps referenced headers off its evictable lists for the same reason). When nothing
 *      evictable is left and the cache is still above c, an admission proceeds anyway (counted in
 *      as_overflows); the excess is evicted as the holds are released.
 *   3. Filling. A miss inserts the new buffer at once, in the state it is going to have (MRU for an
 *      unknown key; MFU after a ghost hit, as the paper's cases II and III move x to T2), held by
 *      the filler and flagged filling. Lookups of the key meanwhile see the flag and wait
 *      (ARC_MISS_WAIT, or a queued struct arc_waiter called back by arc_fill_done). A waiter's
 *      access is not a second access: concurrent misses on one block are one reference to it.
 *   4. Shards. The key's hash picks one of 2^k shards, each a complete, independent ARC over the
 *      keys that hash to it, with c / 2^k of the limit and its own lock. arc_create uses one shard
 *      per 64 MiB (so per-shard c stays far above the largest block) up to ARC_SHARDS_MAX; a small
 *      cache is one shard and therefore exactly the algorithm above.
 *   5. No minimum residence. ZFS leaves a block that is hit again within a few tens of
 *      milliseconds in MRU, so one reader touching a block several times in a burst does not
 *      promote it; here, as in the paper, every second access promotes. A caller that reads one
 *      block in pieces should look it up once and keep the hold.
 *   6. A reservation (the memory model below). The data the cache keeps are bounded by the target
 *      t = c - r, not by c; the ghost bounds and p still use c, so the adaptation sees the same
 *      cache whatever is reserved at the moment.
 *
 * Memory model. c (--arc-max) is meant to bound the pool's memory, not only its clean blocks, as
 * in ZFS, where dirty data are anonymous ARC buffers and the ARC's size counts them. Here the dirty
 * data live outside the cache (in the owners' buffers and the trees' dirty nodes, then, while a
 * txg is written, in the write buffers of blk), so their owner declares them instead:
 * arc_set_reserved(r) says "r bytes outside the cache count against c". Each shard gets its share
 * r_s of r (as of c) and keeps its unheld data within t_s = c_s - min(r_s, c_s / 2): eviction on
 * admission, on the last release and when r grows (arc_set_reserved evicts before returning).
 * So, while r <= c / 2 and apart from held buffers (which can never be evicted and overflow as
 * before), cached data + r <= c. The cap at c / 2 is a floor for the cache: an operation needs its
 * blocks in memory at the same time, and a target of zero would evict each block as soon as its
 * loader released it, so a load-and-retry caller would never finish; the caller that sets r
 * keeps it below c / 2 by limiting its dirty data (the pool derives its dirty limit from c). The
 * reservation is a level rounded up to ARC_RESERVE_QUANTUM (64 KiB), so a caller may set it on
 * every change and pay one lock unless the rounded value moved. What the cache does not count:
 * its headers (96 bytes per buffer or ghost), hash tables and the allocator's overhead on the
 * data (a malloc header per buffer, and whatever fragmentation the heap has).
 *
 * Header states and their transitions (struct arc_buf, all under the shard lock):
 *
 *     unknown key --miss--> MRU, filling --fill ok--> MRU --hit--> MFU --hit--> MFU
 *     ghost key   --miss--> MFU, filling --fill ok--> MFU        (the ghost header is freed)
 *     any key     --arc_insert--> MRU                            (a ghost or old buffer goes)
 *     MRU --evict--> MRU_GHOST        MFU --evict--> MFU_GHOST   (data freed, key kept)
 *     MRU --evict when MRU alone fills c--> freed                (the paper's Case IV(A) delete)
 *     MRU_GHOST, MFU_GHOST --ghost bounds, arc_remove, arc_insert--> freed
 *     MRU, MFU --arc_remove, replacing insert, failed fill--> freed if unheld, else ANON
 *     ANON --last arc_rele--> freed                              (ANON is in no table, no list)
 *
 * Invariants, per shard (arc_check verifies all but 8):
 *   1. Each MRU, MFU, MRU_GHOST or MFU_GHOST header is in the hash table once, in its hash's
 *      bucket; an ANON header is in neither the table nor a list.
 *   2. An MRU or MFU header is on its state's list iff it has no holds; a ghost is always on its
 *      list; a filling header is held (by its filler, at least) and is MRU, MFU or ANON.
 *   3. ash_bytes[s] is the sum of ab_size over headers in state s, ash_held_bytes the sum over held
 *      MRU and MFU headers; ghosts have no data, every other header has.
 *   4. 0 <= p <= c.
 *   5. mru + mfu <= t (= c - min(r, c / 2)), or no unheld MRU or MFU buffer is left.
 *   6. mru + mru_ghost <= c, or the MRU ghost list is empty (the paper's |L1| <= c).
 *   7. mru + mfu + mru_ghost + mfu_ghost <= 2c, or both ghost lists are empty (|L1|+|L2| <= 2c).
 *   8. ab_refs goes 0 -> 1 and 1 -> 0 only under the shard lock (a hit, a miss, an insert with
 *      buf_out; arc_rele's slow path). Between non-zero values it changes without the lock
 *      (arc_hold, arc_rele above 1). So under the lock "refs == 0" is stable, and it is the only
 *      question eviction asks.
 *   Ghosts are bounded in bytes, like the data. Each cached buffer or ghost also costs one header
 *   (sizeof(struct arc_buf), 96 bytes on LP64) and a hash table slot, which are not counted in
 *   as_size_bytes: 2.3% of a 4 KiB block, less for bigger ones.
 *
 * Locking. A shard's ash_lock protects everything in the shard and every header that hashes to it
 * (ab_refs aside, rule 8). The shard locks are leaves: two are never held at once (arc_stats,
 * arc_set_max and arc_check take them in turn; arc_destroy takes none), and under one nothing
 * outside this file is called but the allocator for hash table growth and the logger for a breach
 * arc_check found. Waiter callbacks run after the unlock. Data and headers are neither allocated
 * nor freed under a lock: a miss allocates, then relocks and looks again; everything evicted or
 * dropped is collected in a struct arc_reap and freed after the unlock. Hash table growth is the
 * exception (it allocates and frees under the lock); it is rare because the table is sized from c
 * at creation, and amortized O(1).
 *
 * This module has no on-disk format. */
#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>

#include "cache/arc.h"

/* arc_create: one shard per 64 MiB of limit. */
#define ARC_SHARD_MIN_BYTES (64ull << 20)
/* A shard's hash table starts with one bucket per 16 KiB of its c (a typical block size), within
 * these bounds (so at most 8 MiB of table to start); it doubles when its entries reach its buckets
 * and never shrinks. */
#define ARC_BUCKET_PER_BYTES (16u * 1024u)
#define ARC_BUCKETS_MIN 64u
#define ARC_BUCKETS_INITIAL_MAX (1u << 20)
#define ARC_CACHE_LINE 64u /* shards are aligned to it: no two locks share a line */

enum arc_state {
	ARC_MRU = 0,       /* seen once recently (T1) */
	ARC_MFU = 1,       /* seen at least twice (T2) */
	ARC_MRU_GHOST = 2, /* evicted from MRU, key only (B1) */
	ARC_MFU_GHOST = 3, /* evicted from MFU, key only (B2) */
	ARC_ANON = 4,      /* removed while held: freed at the last rele */
};
#define ARC_NLISTS 4 /* the states that have a list: MRU, MFU and their ghosts */
#define ARC_NSTATES 5

struct arc_link {
	struct arc_link *al_prev;
	struct arc_link *al_next;
};

struct arc_buf {
	struct arc_key ab_key;
	uint64_t ab_hash;              /* of ab_key, with the cache's seed */
	struct arc_buf *ab_chain;      /* hash bucket chain; the reap list once dropped */
	struct arc_link ab_link;       /* on its state's list (rule 2); both NULL when off */
	void *ab_data;                 /* NULL for a ghost */
	uint32_t ab_size;              /* data bytes (a ghost: those of the block it was) */
	uint8_t ab_state;              /* enum arc_state */
	bool ab_filling;               /* handed out by a miss, arc_fill_done not yet called */
	atomic_uint ab_refs;           /* holds (rule 8) */
	struct arc_waiter *ab_waiters; /* queued while filling, FIFO */
	struct arc_waiter **ab_waiters_tail;
};
/* The header overhead the theory comment quotes. */
_Static_assert(sizeof(void *) != 8 || sizeof(struct arc_buf) == 96, "arc_buf grew");

struct arc_shard {
	alignas(ARC_CACHE_LINE) pthread_mutex_t ash_lock; /* protects all below */
	struct arc_buf **ash_buckets;
	uint64_t ash_nbuckets; /* a power of two */
	uint64_t ash_nbufs;    /* MRU + MFU headers */
	uint64_t ash_nghosts;  /* MRU_GHOST + MFU_GHOST headers */
	/* Sentinels, one per list state; head = most recent, tail = the eviction end. */
	struct arc_link ash_lists[ARC_NLISTS];
	uint64_t ash_bytes[ARC_NSTATES];
	uint64_t ash_held_bytes;
	uint64_t ash_c;             /* this shard's limit */
	uint64_t ash_reserved;      /* this shard's share of the reservation (arc_set_reserved) */
	uint64_t ash_p;             /* target bytes for MRU */
	struct arc_stats ash_stats; /* only its counters; the gauges come from the above */
};

struct arc {
	struct arc_shard *a_shards;
	unsigned a_nshards; /* a power of two */
	uint64_t a_seed;    /* random per cache: chains stay short whatever the keys */
	/* Serializes arc_set_reserved; taken before a shard lock, never under one. */
	pthread_mutex_t a_reserve_lock;
	uint64_t a_reserved; /* the last reservation, rounded */
};

/* Memory evicted or dropped under a shard lock, freed after the unlock. */
struct arc_reap {
	void *ar_data;           /* data areas, chained through their first word */
	struct arc_buf *ar_hdrs; /* headers (with any data), chained through ab_chain */
};

/* ---------------------------------------------------------------------------------------------
 * Small pieces: data allocation, reaping, lists, hashing */

void *arc_data_alloc(uint32_t size)
{
	if (size == 0)
		return NULL;
	/* At least a pointer's worth, so that a reap list can chain through a freed area. Plain
	 * malloc, not an aligned allocation: the memory model wants cached blocks and the pool's
	 * dirty data to reuse each other's memory, and glibc serves an aligned request of n bytes
	 * only from a free chunk of n + alignment, splitting off gaps that small objects then
	 * occupy, so a heap of 4 KiB-aligned buffers fragments (measured: 17 MiB more heap for a
	 * 256 MiB cache under a long sequential write). */
	return mem_alloc(SH_MAX((size_t)size, sizeof(void *)));
}

void arc_data_free(void *data)
{
	mem_free(data);
}

static void arc_reap_data(struct arc_reap *reap, void *data)
{
	memcpy(data, &reap->ar_data, sizeof(void *));
	reap->ar_data = data;
}

static void arc_reap_hdr(struct arc_reap *reap, struct arc_buf *b)
{
	b->ab_chain = reap->ar_hdrs;
	reap->ar_hdrs = b;
}

static void arc_buf_free(struct arc_buf *b)
{
	arc_data_free(b->ab_data);
	mem_free(b);
}

/* Frees what a reap collected. Called with no lock held. */
static void arc_reap_run(struct arc_reap *reap)
{
	void *data = reap->ar_data;
	while (data) {
		void *next;
		memcpy(&next, data, sizeof(void *));
		arc_data_free(data);
		data = next;
	}
	struct arc_buf *b = reap->ar_hdrs;
	while (b) {
		struct arc_buf *next = b->ab_chain;
		arc_buf_free(b);
		b = next;
	}
	reap->ar_data = NULL;
	reap->ar_hdrs = NULL;
}

static void arc_list_init(struct arc_link *head)
{
	head->al_prev = head;
	head->al_next = head;
}

static bool arc_list_empty(const struct arc_link *head)
{
	return head->al_next == head;
}

static void arc_list_push_head(struct arc_link *head, struct arc_link *n)
{
	n->al_prev = head;
	n->al_next = head->al_next;
	head->al_next->al_prev = n;
	head->al_next = n;
}

static void arc_list_unlink(struct arc_link *n)
{
	n->al_prev->al_next = n->al_next;
	n->al_next->al_prev = n->al_prev;
	n->al_prev = NULL;
	n->al_next = NULL;
}

static struct arc_buf *arc_list_tail(struct arc_link *head)
{
	if (arc_list_empty(head))
		return NULL;
	return SH_CONTAINER_OF(head->al_prev, struct arc_buf, ab_link);
}

static bool arc_is_ghost(unsigned state)
{
	return state == ARC_MRU_GHOST || state == ARC_MFU_GHOST;
}

static bool arc_key_eq(const struct arc_key *x, const struct arc_key *y)
{
	return x->ak_a == y->ak_a && x->ak_b == y->ak_b && x->ak_c == y->ak_c;
}

static uint64_t arc_hash(const struct arc *arc, const struct arc_key *key)
{
	/* The three words, not the struct's bytes: padding can never matter. */
	uint64_t words[3] = {key->ak_a, key->ak_b, key->ak_c};
	return sh_hash64(words, sizeof(words), arc->a_seed);
}

/* The shard takes the hash's top bits, the bucket its low bits, so the two stay independent. */
static struct arc_shard *arc_shard_of(const struct arc *arc, uint64_t hash)
{
	return &arc->a_shards[(hash >> 48) & (arc->a_nshards - 1)];
}

static struct arc_buf *arc_hash_find(const struct arc_shard *sh, const struct arc_key *key,
                                     uint64_t hash)
{
	struct arc_buf *b = sh->ash_buckets[hash & (sh->ash_nbuckets - 1)];
	for (; b; b = b->ab_chain) {
		if (b->ab_hash == hash && arc_key_eq(&b->ab_key, key))
			return b;
	}
	return NULL;
}

/* Doubles the table. Failure to allocate is harmless: chains get longer until the next try. */
static void arc_hash_grow(struct arc_shard *sh)
{
	uint64_t n = sh->ash_nbuckets * 2;
	struct arc_buf **nb = mem_zalloc(n * sizeof(*nb));
	if (!nb)
		return;
	for (uint64_t i = 0; i < sh->ash_nbuckets; i++) {
		struct arc_buf *b = sh->ash_buckets[i];
		while (b) {
			struct arc_buf *next = b->ab_chain;
			uint64_t j = b->ab_hash & (n - 1);
			b->ab_chain = nb[j];
			nb[j] = b;
			b = next;
		}
	}
	mem_free(sh->ash_buckets);
	sh->ash_buckets = nb;
	sh->ash_nbuckets = n;
}

/* Inserts b, which must not be in the table; counts it as a buffer or a ghost per its state. */
static void arc_hash_insert(struct arc_shard *sh, struct arc_buf *b)
{
	if (sh->ash_nbufs + sh->ash_nghosts >= sh->ash_nbuckets)
		arc_hash_grow(sh);
	struct arc_buf **slot = &sh->ash_buckets[b->ab_hash & (sh->ash_nbuckets - 1)];
	b->ab_chain = *slot;
	*slot = b;
	if (arc_is_ghost(b->ab_state))
		sh->ash_nghosts++;
	else
		sh->ash_nbufs++;
}

static void arc_hash_remove(struct arc_shard *sh, struct arc_buf *b)
{
	struct arc_buf **pp = &sh->ash_buckets[b->ab_hash & (sh->ash_nbuckets - 1)];
	while (*pp != b) {
		VERIFY(*pp != NULL); /* rule 1: it must be there */
		pp = &(*pp)->ab_chain;
	}
	*pp = b->ab_chain;
	b->ab_chain = NULL;
	if (arc_is_ghost(b->ab_state))
		sh->ash_nghosts--;
	else
		sh->ash_nbufs--;
}

static unsigned arc_refs(const struct arc_buf *b)
{
	return atomic_load_explicit(&b->ab_refs, memory_order_relaxed);
}

/* ---------------------------------------------------------------------------------------------
 * Eviction and the ARC rules; all called with the shard lock held */

/* Evicts the least recent unheld buffer of state from (MRU or MFU, whose list must not be empty):
 * its data go, its key moves to the matching ghost list, or is forgotten if to_ghost is false. */
static void arc_evict_lru(struct arc_shard *sh, unsigned from, bool to_ghost, struct arc_reap *reap)
{
	struct arc_buf *b = arc_list_tail(&sh->ash_lists[from]);
	ASSERT(b && arc_refs(b) == 0 && !b->ab_filling);
	arc_list_unlink(&b->ab_link);
	sh->ash_bytes[from] -= b->ab_size;
	sh->ash_stats.as_evictions++;
	if (!to_ghost) {
		arc_hash_remove(sh, b);
		arc_reap_hdr(reap, b);
		return;
	}
	unsigned ghost = from == ARC_MRU ? ARC_MRU_GHOST : ARC_MFU_GHOST;
	arc_reap_data(reap, b->ab_data);
	b->ab_data = NULL;
	b->ab_state = (uint8_t)ghost;
	sh->ash_nbufs--;
	sh->ash_nghosts++;
	sh->ash_bytes[ghost] += b->ab_size;
	arc_list_push_head(&sh->ash_lists[ghost], &b->ab_link);
}

/* Forgets a ghost. */
static void arc_ghost_drop(struct arc_shard *sh, struct arc_buf *g, struct arc_reap *reap)
{
	ASSERT(arc_is_ghost(g->ab_state));
	arc_list_unlink(&g->ab_link);
	sh->ash_bytes[g->ab_state] -= g->ab_size;
	arc_hash_remove(sh, g);
	arc_reap_hdr(reap, g);
}

static bool arc_ghost_drop_lru(struct arc_shard *sh, unsigned ghost, struct arc_reap *reap)
{
	struct arc_buf *g = arc_list_tail(&sh->ash_lists[ghost]);
	if (!g)
		return false;
	arc_ghost_drop(sh, g, reap);
	return true;
}

/* The paper's REPLACE(x, p): one victim from MRU if it is above its target p (or at it, when the
 * miss was an MFU ghost hit), else from MFU; falls back to the other list when the preferred one
 * has nothing unheld. Returns false when neither has. */
static bool arc_replace(struct arc_shard *sh, bool mfu_ghost_hit, struct arc_reap *reap)
{
	bool mru_ok = !arc_list_empty(&sh->ash_lists[ARC_MRU]);
	bool mfu_ok = !arc_list_empty(&sh->ash_lists[ARC_MFU]);
	if (!mru_ok && !mfu_ok)
		return false;
	uint64_t mru = sh->ash_bytes[ARC_MRU];
	bool from_mru =
	    mru_ok && (!mfu_ok || mru > sh->ash_p || (mfu_ghost_hit && mru >= sh->ash_p));
	arc_evict_lru(sh, from_mru ? ARC_MRU : ARC_MFU, true, reap);
	return true;
}

static uint64_t arc_data_bytes(const struct arc_shard *sh)
{
	return sh->ash_bytes[ARC_MRU] + sh->ash_bytes[ARC_MFU];
}

/* The shard's bound on cached data (rule 5): c less the reservation, which counts for at most
 * half of c (the memory model). */
static uint64_t arc_target(const struct arc_shard *sh)
{
	return sh->ash_c - SH_MIN(sh->ash_reserved, sh->ash_c / 2);
}

static uint64_t arc_dir_bytes(const struct arc_shard *sh)
{
	return arc_data_bytes(sh) + sh->ash_bytes[ARC_MRU_GHOST] + sh->ash_bytes[ARC_MFU_GHOST];
}

/* Restores invariants 6 and 7 after the lists changed. */
static void arc_trim_ghosts(struct arc_shard *sh, struct arc_reap *reap)
{
	uint64_t c = sh->ash_c;
	while (sh->ash_bytes[ARC_MRU] + sh->ash_bytes[ARC_MRU_GHOST] > c &&
	       arc_ghost_drop_lru(sh, ARC_MRU_GHOST, reap))
		;
	while (arc_dir_bytes(sh) > 2 * c && arc_ghost_drop_lru(sh, ARC_MFU_GHOST, reap))
		;
	while (arc_dir_bytes(sh) > 2 * c && arc_ghost_drop_lru(sh, ARC_MRU_GHOST, reap))
		;
}

/* Evicts unheld buffers until the data fit in the target again (invariant 5), then trims the
 * ghosts. */
static void arc_shrink(struct arc_shard *sh, struct arc_reap *reap)
{
	while (arc_data_bytes(sh) > arc_target(sh) && arc_replace(sh, false, reap))
		;
	arc_trim_ghosts(sh, reap);
}

/* Makes room for a block of size bytes about to join the cache. new_key: the key is in no list
 * (the paper's Case IV), else it was just taken out of a ghost list (Cases II and III, where
 * mfu_ghost_hit says which). */
static void arc_make_room(struct arc_shard *sh, uint64_t size, bool new_key, bool mfu_ghost_hit,
                          struct arc_reap *reap)
{
	uint64_t c = sh->ash_c;
	if (new_key) {
		if (sh->ash_bytes[ARC_MRU] + sh->ash_bytes[ARC_MRU_GHOST] + size > c) {
			/* Case IV(A), L1 full: forget the oldest MRU ghosts; if MRU alone is
			 * too big for the new block, delete its oldest buffers outright (no
			 * ghost: L1 has no room for one). */
			while (sh->ash_bytes[ARC_MRU] + sh->ash_bytes[ARC_MRU_GHOST] + size > c &&
			       arc_ghost_drop_lru(sh, ARC_MRU_GHOST, reap))
				;
			while (sh->ash_bytes[ARC_MRU] + size > c &&
			       !arc_list_empty(&sh->ash_lists[ARC_MRU]))
				arc_evict_lru(sh, ARC_MRU, false, reap);
		} else {
			/* Case IV(B): keep the whole directory within 2c. */
			while (arc_dir_bytes(sh) + size > 2 * c &&
			       arc_ghost_drop_lru(sh, ARC_MFU_GHOST, reap))
				;
		}
	}
	/* The data bound is the target (rule 5); the paper's list bounds above stay with c. */
	uint64_t t = arc_target(sh);
	while (arc_data_bytes(sh) + size > t && arc_replace(sh, mfu_ghost_hit, reap))
		;
	if (arc_data_bytes(sh) + size > t)
		sh->ash_stats.as_overflows++;
}

/* Adapts p on a hit in ghost list g->ab_state (Cases II and III), before g leaves it. */
static void arc_adapt(struct arc_shard *sh, const struct arc_buf *g)
{
	uint64_t b1 = sh->ash_bytes[ARC_MRU_GHOST], b2 = sh->ash_bytes[ARC_MFU_GHOST];
	uint64_t c = sh->ash_c, p = sh->ash_p;
	/* The ghost is in its list, so that list's bytes are >= g->ab_size > 0: the divisions are
	 * safe, and delta <= the other list's bytes cannot overflow. */
	if (g->ab_state == ARC_MRU_GHOST) {
		uint64_t delta = g->ab_size * (b2 > b1 ? b2 / b1 : 1);
		sh->ash_p = delta >= c - p ? c : p + delta;
		sh->ash_stats.as_mru_ghost_hits++;
	} else {
		uint64_t delta = g->ab_size * (b1 > b2 ? b1 / b2 : 1);
		sh->ash_p = delta >= p ? 0 : p - delta;
		sh->ash_stats.as_mfu_ghost_hits++;
	}
}

/* Makes room for b and enters it in the table in state (MRU or MFU), off every list: the caller
 * either holds it (rule 2) or puts it on its list. */
static void arc_admit(struct arc_shard *sh, struct arc_buf *b, unsigned state, bool new_key,
                      bool mfu_ghost_hit, struct arc_reap *reap)
{
	arc_make_room(sh, b->ab_size, new_key, mfu_ghost_hit, reap);
	b->ab_state = (uint8_t)state;
	arc_hash_insert(sh, b);
	sh->ash_bytes[state] += b->ab_size;
	arc_trim_ghosts(sh, reap);
}

/* Takes a cached buffer out of the cache: freed now if unheld, else ANON until its last rele. */
static void arc_unlink_cached(struct arc_shard *sh, struct arc_buf *b, struct arc_reap *reap)
{
	ASSERT(b->ab_state == ARC_MRU || b->ab_state == ARC_MFU);
	arc_hash_remove(sh, b);
	sh->ash_bytes[b->ab_state] -= b->ab_size;
	if (arc_refs(b) == 0) {
		arc_list_unlink(&b->ab_link);
		arc_reap_hdr(reap, b);
		return;
	}
	sh->ash_held_bytes -= b->ab_size;
	b->ab_state = ARC_ANON;
	sh->ash_bytes[ARC_ANON] += b->ab_size;
}

/* A hit on a cached, filled buffer: take a hold and apply the paper's Case I. */
static void arc_access_hit(struct arc_shard *sh, struct arc_buf *b)
{
	if (arc_refs(b) == 0) {
		arc_list_unlink(&b->ab_link);
		sh->ash_held_bytes += b->ab_size;
	}
	atomic_fetch_add_explicit(&b->ab_refs, 1, memory_order_relaxed);
	if (b->ab_state == ARC_MRU) {
		sh->ash_stats.as_mru_hits++;
		sh->ash_bytes[ARC_MRU] -= b->ab_size;
		sh->ash_bytes[ARC_MFU] += b->ab_size;
		b->ab_state = ARC_MFU;
	} else {
		sh->ash_stats.as_mfu_hits++;
	}
	sh->ash_stats.as_hits++;
}

/* ---------------------------------------------------------------------------------------------
 * Creation */

static uint64_t arc_shard_share(uint64_t max_bytes, unsigned nshards, unsigned i)
{
	return max_bytes / nshards + (i < max_bytes % nshards ? 1 : 0);
}

int arc_create(uint64_t max_bytes, struct arc **out)
{
	return arc_create_shards(max_bytes, 0, out);
}

int arc_create_shards(uint64_t max_bytes, unsigned nshards, struct arc **out)
{
	if (nshards == 0) {
		nshards = 1;
		while (nshards < ARC_SHARDS_MAX &&
		       max_bytes / (nshards * 2ull) >= ARC_SHARD_MIN_BYTES)
			nshards *= 2;
	} else if (nshards > ARC_SHARDS_MAX || (nshards & (nshards - 1)) != 0) {
		return -EINVAL;
	}
	int rc;
	struct arc *arc = mem_zalloc(sizeof(*arc));
	if (!arc)
		return -ENOMEM;
	rc = sh_random_bytes(&arc->a_seed, sizeof(arc->a_seed));
	if (rc != 0)
		goto out_free_arc;
	arc->a_shards = mem_aligned_alloc(ARC_CACHE_LINE, nshards * sizeof(*arc->a_shards));
	if (!arc->a_shards) {
		rc = -ENOMEM;
		goto out_free_arc;
	}
	memset(arc->a_shards, 0, nshards * sizeof(*arc->a_shards));
	arc->a_nshards = nshards;
	VERIFY(pthread_mutex_init(&arc->a_reserve_lock, NULL) == 0);
	unsigned i;
	for (i = 0; i < nshards; i++) {
		struct arc_shard *sh = &arc->a_shards[i];
		sh->ash_c = arc_shard_share(max_bytes, nshards, i);
		uint64_t nbuckets = ARC_BUCKETS_MIN;
		while (nbuckets < ARC_BUCKETS_INITIAL_MAX &&
		       nbuckets * ARC_BUCKET_PER_BYTES < sh->ash_c)
			nbuckets *= 2;
		sh->ash_buckets = mem_zalloc(nbuckets * sizeof(*sh->ash_buckets));
		if (!sh->ash_buckets) {
			rc = -ENOMEM;
			goto out_free_shards;
		}
		sh->ash_nbuckets = nbuckets;
		for (unsigned l = 0; l < ARC_NLISTS; l++)
			arc_list_init(&sh->ash_lists[l]);
		VERIFY(pthread_mutex_init(&sh->ash_lock, NULL) == 0);
	}
	*out = arc;
	return 0;
out_free_shards:
	while (i-- > 0) {
		pthread_mutex_destroy(&arc->a_shards[i].ash_lock);
		mem_free(arc->a_shards[i].ash_buckets);
	}
	pthread_mutex_destroy(&arc->a_reserve_lock);
	mem_free(arc->a_shards);
out_free_arc:
	mem_free(arc);
	return rc;
}

void arc_destroy(struct arc *arc)
{
	if (!arc)
		return;
	for (unsigned i = 0; i < arc->a_nshards; i++) {
		struct arc_shard *sh = &arc->a_shards[i];
		/* A hold left now would be a use after free later. */
		VERIFY(sh->ash_held_bytes == 0 && sh->ash_bytes[ARC_ANON] == 0);
		for (uint64_t j = 0; j < sh->ash_nbuckets; j++) {
			struct arc_buf *b = sh->ash_buckets[j];
			while (b) {
				struct arc_buf *next = b->ab_chain;
				VERIFY(arc_refs(b) == 0);
				arc_buf_free(b);
				b = next;
			}
		}
		mem_free(sh->ash_buckets);
		pthread_mutex_destroy(&sh->ash_lock);
	}
	pthread_mutex_destroy(&arc->a_reserve_lock);
	mem_free(arc->a_shards);
	mem_free(arc);
}

void arc_set_max(struct arc *arc, uint64_t max_bytes)
{
	for (unsigned i = 0; i < arc->a_nshards; i++) {
		struct arc_shard *sh = &arc->a_shards[i];
		struct arc_reap reap = {0};
		pthread_mutex_lock(&sh->ash_lock);
		sh->ash_c = arc_shard_share(max_bytes, arc->a_nshards, i);
		sh->ash_p = SH_MIN(sh->ash_p, sh->ash_c);
		arc_shrink(sh, &reap);
		pthread_mutex_unlock(&sh->ash_lock);
		arc_reap_run(&reap);
	}
}

void arc_set_reserved(struct arc *arc, uint64_t bytes)
{
	uint64_t q = ARC_RESERVE_QUANTUM;
	bytes = bytes > UINT64_MAX - (q - 1) ? UINT64_MAX / q * q : (bytes + q - 1) / q * q;
	pthread_mutex_lock(&arc->a_reserve_lock);
	if (bytes != arc->a_reserved) {
		arc->a_reserved = bytes;
		for (unsigned i = 0; i < arc->a_nshards; i++) {
			struct arc_shard *sh = &arc->a_shards[i];
			struct arc_reap reap = {0};
			pthread_mutex_lock(&sh->ash_lock);
			sh->ash_reserved = arc_shard_share(bytes, arc->a_nshards, i);
			if (arc_data_bytes(sh) > arc_target(sh))
				arc_shrink(sh, &reap);
			pthread_mutex_unlock(&sh->ash_lock);
			arc_reap_run(&reap);
		}
	}
	pthread_mutex_unlock(&arc->a_reserve_lock);
}

/* ---------------------------------------------------------------------------------------------
 * Lookup and fill */

/* A fresh header with data, for a miss. Not yet in any table. */
static int arc_buf_new(const struct arc_key *key, uint64_t hash, uint32_t size,
                       struct arc_buf **out)
{
	struct arc_buf *b = mem_zalloc(sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ab_data = arc_data_alloc(size);
	if (!b->ab_data) {
		mem_free(b);
		return -ENOMEM;
	}
	b->ab_key = *key;
	b->ab_hash = hash;
	b->ab_size = size;
	b->ab_state = ARC_ANON;
	atomic_init(&b->ab_refs, 0);
	b->ab_waiters_tail = &b->ab_waiters;
	*out = b;
	return 0;
}

static int arc_lookup_impl(struct arc *arc, const struct arc_key *key, uint32_t size,
                           struct arc_waiter *w, struct arc_buf **buf_out)
{
	*buf_out = NULL;
	if (size == 0)
		return -EINVAL;
	uint64_t hash = arc_hash(arc, key);
	struct arc_shard *sh = arc_shard_of(arc, hash);
	struct arc_buf *fresh = NULL;
	struct arc_reap reap = {0};
	int rc;

	pthread_mutex_lock(&sh->ash_lock);
	for (;;) {
		struct arc_buf *b = arc_hash_find(sh, key, hash);
		if (b && !arc_is_ghost(b->ab_state)) {
			if (b->ab_size != size) {
				rc = -EINVAL;
				break;
			}
			if (!b->ab_filling) {
				arc_access_hit(sh, b);
				*buf_out = b;
				rc = ARC_HIT;
				break;
			}
			if (w) {
				w->aw_next = NULL;
				*b->ab_waiters_tail = w;
				b->ab_waiters_tail = &w->aw_next;
			}
			sh->ash_stats.as_misses++;
			sh->ash_stats.as_miss_waits++;
			rc = ARC_MISS_WAIT;
			break;
		}
		if (!fresh) {
			/* A miss: allocate without the lock, then look again, since another
			 * thread may have filled or started filling the key meanwhile. */
			pthread_mutex_unlock(&sh->ash_lock);
			rc = arc_buf_new(key, hash, size, &fresh);
			if (rc != 0)
				return rc;
			pthread_mutex_lock(&sh->ash_lock);
			continue;
		}
		unsigned state = ARC_MRU;
		bool mfu_ghost_hit = false;
		if (b) {
			mfu_ghost_hit = b->ab_state == ARC_MFU_GHOST;
			arc_adapt(sh, b);
			arc_ghost_drop(sh, b, &reap);
			state = ARC_MFU;
		}
		arc_admit(sh, fresh, state, b == NULL, mfu_ghost_hit, &reap);
		fresh->ab_filling = true;
		atomic_store_explicit(&fresh->ab_refs, 1, memory_order_relaxed);
		sh->ash_held_bytes += size;
		sh->ash_stats.as_misses++;
		sh->ash_stats.as_miss_fills++;
		*buf_out = fresh;
		fresh = NULL;
		rc = ARC_MISS_FILL;
		break;
	}
	pthread_mutex_unlock(&sh->ash_lock);
	if (fresh)
		arc_buf_free(fresh);
	arc_reap_run(&reap);
	return rc;
}

int arc_lookup(struct arc *arc, const struct arc_key *key, uint32_t size, struct arc_buf **buf_out)
{
	return arc_lookup_impl(arc, key, size, NULL, buf_out);
}

int arc_lookup_async(struct arc *arc, const struct arc_key *key, uint32_t size,
                     struct arc_waiter *w, struct arc_buf **buf_out)
{
	VERIFY(w != NULL && w->aw_done != NULL);
	return arc_lookup_impl(arc, key, size, w, buf_out);
}

void arc_fill_done(struct arc *arc, struct arc_buf *b, int status)
{
	VERIFY(status <= 0);
	struct arc_shard *sh = arc_shard_of(arc, b->ab_hash);
	pthread_mutex_lock(&sh->ash_lock);
	VERIFY(b->ab_filling);
	b->ab_filling = false;
	struct arc_waiter *waiters = b->ab_waiters;
	b->ab_waiters = NULL;
	b->ab_waiters_tail = &b->ab_waiters;
	if (status < 0) {
		sh->ash_stats.as_fill_errors++;
		if (b->ab_state != ARC_ANON) {
			/* Held by the filler, so it becomes ANON and the filler's rele frees it. */
			arc_hash_remove(sh, b);
			sh->ash_bytes[b->ab_state] -= b->ab_size;
			sh->ash_held_bytes -= b->ab_size;
			b->ab_state = ARC_ANON;
			sh->ash_bytes[ARC_ANON] += b->ab_size;
		}
	} else {
		unsigned n = 0;
		for (struct arc_waiter *w = waiters; w; w = w->aw_next)
			n++;
		/* The holds are taken before the unlock, so the filler's rele cannot free it. */
		if (n)
			atomic_fetch_add_explicit(&b->ab_refs, n, memory_order_relaxed);
	}
	pthread_mutex_unlock(&sh->ash_lock);
	while (waiters) {
		struct arc_waiter *next = waiters->aw_next;
		waiters->aw_next = NULL;
		waiters->aw_done(waiters, status < 0 ? NULL : b, status);
		waiters = next;
	}
}

void *arc_fill_take(struct arc_buf *b, void *data)
{
	VERIFY(b->ab_filling && data != NULL);
	void *old = b->ab_data;
	b->ab_data = data;
	return old;
}

/* ---------------------------------------------------------------------------------------------
 * Buffers */

void *arc_buf_data(const struct arc_buf *buf)
{
	ASSERT(buf->ab_data != NULL);
	return buf->ab_data;
}

uint32_t arc_buf_size(const struct arc_buf *buf)
{
	return buf->ab_size;
}

const struct arc_key *arc_buf_key(const struct arc_buf *buf)
{
	return &buf->ab_key;
}

void arc_hold(struct arc_buf *buf)
{
	unsigned prev = atomic_fetch_add_explicit(&buf->ab_refs, 1, memory_order_relaxed);
	VERIFY(prev > 0); /* only a holder may add a hold (rule 8) */
}

void arc_rele(struct arc *arc, struct arc_buf *b)
{
	/* Fast path: not the last hold, no lock. Release order: this holder's use of the data
	 * happens before whoever frees it. */
	unsigned n = arc_refs(b);
	while (n > 1) {
		if (atomic_compare_exchange_weak_explicit(
		        &b->ab_refs, &n, n - 1, memory_order_release, memory_order_relaxed))
			return;
	}
	struct arc_shard *sh = arc_shard_of(arc, b->ab_hash);
	struct arc_reap reap = {0};
	pthread_mutex_lock(&sh->ash_lock);
	unsigned prev = atomic_fetch_sub_explicit(&b->ab_refs, 1, memory_order_acq_rel);
	VERIFY(prev > 0);
	if (prev == 1) {
		VERIFY(!b->ab_filling); /* the filler calls arc_fill_done before its last rele */
		if (b->ab_state == ARC_ANON) {
			sh->ash_bytes[ARC_ANON] -= b->ab_size;
			arc_reap_hdr(&reap, b);
		} else {
			sh->ash_held_bytes -= b->ab_size;
			arc_list_push_head(&sh->ash_lists[b->ab_state], &b->ab_link);
			if (arc_data_bytes(sh) > arc_target(sh))
				arc_shrink(sh, &reap);
		}
	}
	pthread_mutex_unlock(&sh->ash_lock);
	arc_reap_run(&reap);
}

/* ---------------------------------------------------------------------------------------------
 * Insert and remove */

static int arc_insert_impl(struct arc *arc, const struct arc_key *key, void *data, uint32_t size,
                           struct arc_buf **buf_out, bool free_on_error)
{
	if (buf_out)
		*buf_out = NULL;
	if (!data)
		return -EINVAL;
	if (size == 0) {
		if (free_on_error)
			arc_data_free(data);
		return -EINVAL;
	}
	struct arc_buf *b = mem_zalloc(sizeof(*b));
	if (!b) {
		if (free_on_error)
			arc_data_free(data);
		return -ENOMEM;
	}
	uint64_t hash = arc_hash(arc, key);
	struct arc_shard *sh = arc_shard_of(arc, hash);
	b->ab_key = *key;
	b->ab_hash = hash;
	b->ab_size = size;
	b->ab_data = data;
	b->ab_state = ARC_ANON;
	atomic_init(&b->ab_refs, 0);
	b->ab_waiters_tail = &b->ab_waiters;

	struct arc_reap reap = {0};
	int rc = 0;
	pthread_mutex_lock(&sh->ash_lock);
	struct arc_buf *old = arc_hash_find(sh, key, hash);
	if (old && arc_is_ghost(old->ab_state)) {
		arc_ghost_drop(sh, old, &reap);
	} else if (old && old->ab_filling) {
		rc = -EBUSY;
		goto out_unlock;
	} else if (old) {
		arc_unlink_cached(sh, old, &reap);
	}
	arc_admit(sh, b, ARC_MRU, true, false, &reap);
	if (buf_out) {
		atomic_store_explicit(&b->ab_refs, 1, memory_order_relaxed);
		sh->ash_held_bytes += size;
		*buf_out = b;
	} else {
		arc_list_push_head(&sh->ash_lists[ARC_MRU], &b->ab_link);
		/* Above the target only if everything else is held; then this block is the one
		 * to go. */
		if (arc_data_bytes(sh) > arc_target(sh))
			arc_shrink(sh, &reap);
	}
	sh->ash_stats.as_inserts++;
	b = NULL;
out_unlock:
	pthread_mutex_unlock(&sh->ash_lock);
	if (b) {
		if (!free_on_error)
			b->ab_data = NULL;
		arc_buf_free(b);
	}
	arc_reap_run(&reap);
	return rc;
}

int arc_insert(struct arc *arc, const struct arc_key *key, void *data, uint32_t size,
               struct arc_buf **buf_out)
{
	return arc_insert_impl(arc, key, data, size, buf_out, true);
}

int arc_insert_keep_on_error(struct arc *arc, const struct arc_key *key, void *data,
                             uint32_t size, struct arc_buf **buf_out)
{
	return arc_insert_impl(arc, key, data, size, buf_out, false);
}

bool arc_remove(struct arc *arc, const struct arc_key *key)
{
	uint64_t hash = arc_hash(arc, key);
	struct arc_shard *sh = arc_shard_of(arc, hash);
	struct arc_reap reap = {0};
	pthread_mutex_lock(&sh->ash_lock);
	struct arc_buf *b = arc_hash_find(sh, key, hash);
	if (b) {
		if (arc_is_ghost(b->ab_state))
			arc_ghost_drop(sh, b, &reap);
		else
			arc_unlink_cached(sh, b, &reap);
		sh->ash_stats.as_removes++;
	}
	pthread_mutex_unlock(&sh->ash_lock);
	arc_reap_run(&reap);
	return b != NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Observation */

uint64_t arc_size_bytes(struct arc *arc)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < arc->a_nshards; i++) {
		struct arc_shard *sh = &arc->a_shards[i];
		pthread_mutex_lock(&sh->ash_lock);
		sum += arc_data_bytes(sh);
		pthread_mutex_unlock(&sh->ash_lock);
	}
	return sum;
}

void arc_stats(struct arc *arc, struct arc_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < arc->a_nshards; i++) {
		struct arc_shard *sh = &arc->a_shards[i];
		pthread_mutex_lock(&sh->ash_lock);
		const struct arc_stats *s = &sh->ash_stats;
		out->as_hits += s->as_hits;
		out->as_misses += s->as_misses;
		out->as_miss_fills += s->as_miss_fills;
		out->as_miss_waits += s->as_miss_waits;
		out->as_mru_hits += s->as_mru_hits;
		out->as_mfu_hits += s->as_mfu_hits;
		out->as_mru_ghost_hits += s->as_mru_ghost_hits;
		out->as_mfu_ghost_hits += s->as_mfu_ghost_hits;
		out->as_evictions += s->as_evictions;
		out->as_inserts += s->as_inserts;
		out->as_removes += s->as_removes;
		out->as_fill_errors += s->as_fill_errors;
		out->as_overflows += s->as_overflows;
		out->as_size_bytes += arc_data_bytes(sh);
		out->as_mru_bytes += sh->ash_bytes[ARC_MRU];
		out->as_mfu_bytes += sh->ash_bytes[ARC_MFU];
		out->as_mru_ghost_bytes += sh->ash_bytes[ARC_MRU_GHOST];
		out->as_mfu_ghost_bytes += sh->ash_bytes[ARC_MFU_GHOST];
		out->as_p_bytes += sh->ash_p;
		out->as_max_bytes += sh->ash_c;
		out->as_reserved_bytes += sh->ash_reserved;
		out->as_target_bytes += arc_target(sh);
		out->as_held_bytes += sh->ash_held_bytes;
		out->as_anon_bytes += sh->ash_bytes[ARC_ANON];
		out->as_buffers += sh->ash_nbufs;
		out->as_ghosts += sh->ash_nghosts;
		pthread_mutex_unlock(&sh->ash_lock);
	}
}

#define ARC_CHECK(cond)                                                                            \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			log_error("arc_check: shard %u: %s fails", shard_index, #cond);            \
			return -EUCLEAN;                                                           \
		}                                                                                  \
	} while (0)

static int arc_check_shard(struct arc_shard *sh, unsigned shard_index, unsigned nshards)
{
	uint64_t bytes[ARC_NSTATES] = {0}, held = 0, nbufs = 0, nghosts = 0;
	for (uint64_t j = 0; j < sh->ash_nbuckets; j++) {
		for (struct arc_buf *b = sh->ash_buckets[j]; b; b = b->ab_chain) {
			/* Rule 1: in its bucket and in its shard. */
			ARC_CHECK((b->ab_hash & (sh->ash_nbuckets - 1)) == j);
			ARC_CHECK(((b->ab_hash >> 48) & (nshards - 1)) == shard_index);
			ARC_CHECK(b->ab_state != ARC_ANON && b->ab_state < ARC_NSTATES);
			bytes[b->ab_state] += b->ab_size;
			bool on_list = b->ab_link.al_next != NULL;
			ARC_CHECK(on_list == (b->ab_link.al_prev != NULL));
			if (arc_is_ghost(b->ab_state)) {
				/* Rules 2 and 3 for ghosts. */
				nghosts++;
				ARC_CHECK(b->ab_data == NULL && on_list && arc_refs(b) == 0);
				ARC_CHECK(!b->ab_filling && b->ab_waiters == NULL);
			} else {
				nbufs++;
				unsigned refs = arc_refs(b);
				ARC_CHECK(b->ab_data != NULL);
				ARC_CHECK(on_list == (refs == 0)); /* rule 2 */
				ARC_CHECK(!b->ab_filling || refs > 0);
				ARC_CHECK(b->ab_filling || b->ab_waiters == NULL);
				if (refs > 0)
					held += b->ab_size;
			}
		}
	}
	ARC_CHECK(nbufs == sh->ash_nbufs && nghosts == sh->ash_nghosts);
	for (unsigned s = 0; s < ARC_NLISTS; s++)
		ARC_CHECK(bytes[s] == sh->ash_bytes[s]); /* rule 3 */
	ARC_CHECK(held == sh->ash_held_bytes);
	/* Every list entry is in the list's state, and the links agree both ways. */
	for (unsigned s = 0; s < ARC_NLISTS; s++) {
		struct arc_link *head = &sh->ash_lists[s];
		uint64_t count = 0;
		for (struct arc_link *l = head->al_next; l != head; l = l->al_next) {
			struct arc_buf *b = SH_CONTAINER_OF(l, struct arc_buf, ab_link);
			ARC_CHECK(b->ab_state == s);
			ARC_CHECK(l->al_next->al_prev == l && l->al_prev->al_next == l);
			ARC_CHECK(++count <= nbufs + nghosts);
		}
	}
	uint64_t c = sh->ash_c;
	ARC_CHECK(sh->ash_p <= c); /* rule 4 */
	ARC_CHECK(arc_data_bytes(sh) <= arc_target(sh) ||
	          (arc_list_empty(&sh->ash_lists[ARC_MRU]) &&
	           arc_list_empty(&sh->ash_lists[ARC_MFU]))); /* 5 */
	ARC_CHECK(sh->ash_bytes[ARC_MRU] + sh->ash_bytes[ARC_MRU_GHOST] <= c ||
	          arc_list_empty(&sh->ash_lists[ARC_MRU_GHOST]));      /* 6 */
	ARC_CHECK(arc_dir_bytes(sh) <= 2 * c || sh->ash_nghosts == 0); /* 7 */
	return 0;
}

int arc_check(struct arc *arc)
{
	for (unsigned i = 0; i < arc->a_nshards; i++) {
		struct arc_shard *sh = &arc->a_shards[i];
		pthread_mutex_lock(&sh->ash_lock);
		int rc = arc_check_shard(sh, i, arc->a_nshards);
		pthread_mutex_unlock(&sh->ash_lock);
		if (rc != 0)
			return rc;
	}
	return 0;
}
