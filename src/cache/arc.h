/* arc.h: the block cache of the pool engine, an Adaptive Replacement Cache (Megiddo & Modha, FAST
 * 2003, as ZFS uses it) of reference-counted buffers keyed by block identity.
 *
 * The cache knows nothing about disks. It maps a key to a buffer and, on a miss, hands the caller a
 * new empty buffer to fill ("filling" state); other callers that ask for that key meanwhile are
 * told to wait and, if they want, queue an asynchronous waiter that is called back when the fill
 * completes. No function here ever blocks waiting for another caller's I/O and no callback ever
 * runs while a lock of the cache is held. The theory (lists, ghost lists, the target p, the byte
 * accounting, locking) is at the top of arc.c.
 *
 * Ownership in one paragraph: the creator destroys the cache (arc_destroy) after every hold has
 * been released. A buffer returned by arc_lookup, arc_lookup_async or arc_insert, or handed to a
 * waiter's callback, is held: its data stay valid and it is never evicted or freed until that
 * holder calls arc_rele. A held buffer that is removed (arc_remove, a replacing arc_insert, a
 * failed fill) stays valid for its holders and is freed by the last arc_rele.
 *
 * Thread safety: every function may be called from any thread, concurrently, except that
 * arc_destroy must not race with anything. The cache's locks are leaves: nothing the cache calls
 * while holding one takes another lock of the caller's. The one call-out, a waiter's aw_done, runs
 * with no cache lock held, on the thread that calls arc_fill_done, so a caller of arc_fill_done
 * must not hold a lock that its waiters' callbacks take. */
#ifndef SHALE_CACHE_ARC_H
#define SHALE_CACHE_ARC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

/* Data alignment of every buffer: malloc's, enough for any C object. Not the sector: blk reads
 * through a bounce buffer and writes a prepared copy, so no I/O touches a cache buffer (but for
 * a received block, which is written from the sector-aligned buffer the cache then takes while
 * the write holds it), and aligned allocations fragment the heap the cache shares with dirty
 * data (arc_data_alloc). */
#define ARC_BUF_ALIGN 16u
#define ARC_SHARDS_MAX 16u /* most shards a cache is split into (arc_create_shards) */

/* A block's identity. The pool uses (vdev index, byte offset, birth txg), which names one immutable
 * block: a rewritten block gets a new birth txg and therefore a new key. Two keys are equal when
 * all three words are. */
struct arc_key {
	uint64_t ak_a;
	uint64_t ak_b;
	uint64_t ak_c;
};

struct arc;     /* opaque: the cache */
struct arc_buf; /* opaque: one cached block (header plus data) */

/* What a lookup found (non-negative returns; errors are negative errno). */
enum arc_lookup_result {
	ARC_HIT = 0,       /* *buf_out is held and its data are valid */
	ARC_MISS_FILL = 1, /* *buf_out is a new buffer in the filling state, held by the caller, who
	                    * must write its data and then call arc_fill_done */
	ARC_MISS_WAIT = 2, /* another caller is filling this key; *buf_out is NULL (see the lookup
	                    * functions for what happens to a waiter) */
};

/* An asynchronous waiter for a key that another caller is filling. The caller owns the struct,
 * usually embedded in its request (recover it with SH_CONTAINER_OF), and must keep it alive and
 * untouched from arc_lookup_async returning ARC_MISS_WAIT until aw_done has been called; aw_done
 * is called exactly once, and the arc does not touch the struct after aw_done starts, so the
 * callback may free or reuse it. */
struct arc_waiter {
	/* Called by the thread that calls arc_fill_done, after the cache's lock is released.
	 *   w      the waiter passed to arc_lookup_async;
	 *   buf    status == 0: the filled buffer, held on the waiter's behalf (the waiter must
	 *          arc_rele it); status < 0: NULL;
	 *   status 0, or the negative errno the filler passed to arc_fill_done.
	 * The callback may call any arc function, including arc_lookup and arc_fill_done. */
	void (*aw_done)(struct arc_waiter *w, struct arc_buf *buf, int status);
	void *aw_arg;               /* the caller's; the arc never touches it */
	struct arc_waiter *aw_next; /* private to the arc while queued */
};

/* Statistics. Counters count since creation; gauges are the state when arc_stats ran. With several
 * shards the snapshot is taken shard by shard, so under concurrent use it is not one instant. */
struct arc_stats {
	/* counters */
	uint64_t as_hits;           /* lookups that returned ARC_HIT (= mru + mfu hits) */
	uint64_t as_misses;         /* ARC_MISS_FILL or ARC_MISS_WAIT (= fills + waits); a lookup
	                             * that failed with an error counts in neither, so
	                             * hits + misses = successful lookups */
	uint64_t as_miss_fills;     /* misses that handed out a buffer to fill */
	uint64_t as_miss_waits;     /* misses on a key being filled (ARC_MISS_WAIT) */
	uint64_t as_mru_hits;       /* hits on a buffer in the MRU state (seen once) */
	uint64_t as_mfu_hits;       /* hits on a buffer in the MFU state (seen twice or more) */
	uint64_t as_mru_ghost_hits; /* fill misses on a key in the MRU ghost list: p grew */
	uint64_t as_mfu_ghost_hits; /* fill misses on a key in the MFU ghost list: p shrank */
	uint64_t as_evictions;      /* buffers whose data the cache freed to make room */
	uint64_t as_inserts;        /* successful arc_insert calls */
	uint64_t as_removes;        /* arc_remove calls that found the key (buffer or ghost) */
	uint64_t as_fill_errors;    /* arc_fill_done calls with a negative status */
	uint64_t as_overflows;      /* admissions that left the cache above its maximum because
	                             * every other buffer was held (see as_size_bytes) */
	/* gauges */
	uint64_t as_size_bytes;      /* data bytes of cached buffers (= mru + mfu), held or not,
	                              * being filled or not; above as_max_bytes only while held
	                              * buffers leave nothing else to evict */
	uint64_t as_mru_bytes;       /* data bytes in the MRU state */
	uint64_t as_mfu_bytes;       /* data bytes in the MFU state */
	uint64_t as_mru_ghost_bytes; /* bytes the MRU ghost keys stood for (no data kept) */
	uint64_t as_mfu_ghost_bytes; /* bytes the MFU ghost keys stood for */
	uint64_t as_p_bytes;         /* the adaptive target for the MRU side (sum over shards) */
	uint64_t as_max_bytes;       /* the limit, c (arc_create / arc_set_max) */
	uint64_t as_reserved_bytes;  /* memory outside the cache counted against c
	                              * (arc_set_reserved), rounded up to ARC_RESERVE_QUANTUM */
	uint64_t as_target_bytes;    /* what cached data may fill now: c less the reservation,
	                              * which counts for at most half of c */
	uint64_t as_held_bytes;      /* data bytes of cached buffers with at least one hold */
	uint64_t as_anon_bytes;      /* removed buffers still held (freed at the last rele) */
	uint64_t as_buffers;         /* cached buffers (MRU + MFU) */
	uint64_t as_ghosts;          /* ghost keys (MRU ghost + MFU ghost) */
};

/* ---- creation ---- */

/* Creates a cache that keeps at most max_bytes of data in unheld buffers, less any reservation
 * (arc_set_reserved; 0 is allowed: nothing stays cached once released). The number of shards is
 * chosen from max_bytes: one per 64 MiB, at most ARC_SHARDS_MAX, so a small cache is one exact ARC.
 * Returns 0 or -ENOMEM (or the error of getrandom, which seeds the hash); *out is set on success.
 * Destroy with arc_destroy. */
SH_MUST_CHECK int arc_create(uint64_t max_bytes, struct arc **out);

/* Like arc_create with an explicit shard count: nshards is a power of two from 1 to ARC_SHARDS_MAX,
 * or 0 for the automatic choice. Each shard is an independent ARC over the keys that hash to it,
 * with max_bytes / nshards of the limit; more shards mean less lock contention and a coarser
 * approximation of one global ARC. Returns 0, -EINVAL for a bad nshards, or as arc_create. */
SH_MUST_CHECK int arc_create_shards(uint64_t max_bytes, unsigned nshards, struct arc **out);

/* Frees the cache and every cached buffer and ghost. No buffer may be held any more, including
 * removed ones (a panic says so otherwise: a later arc_rele would touch freed memory). NULL is a
 * no-op. */
void arc_destroy(struct arc *arc);

/* Changes the limit at run time. Shrinking evicts unheld buffers (and trims the ghost lists) before
 * returning; held buffers stay, and the cache reaches the new limit as they are released. The shard
 * count stays the one chosen at creation. */
void arc_set_max(struct arc *arc, uint64_t max_bytes);

/* The reservation is rounded up to this, so that a stream of small changes to it does not visit
 * every shard each time. */
#define ARC_RESERVE_QUANTUM (64u * 1024u)

/* Tells the cache that bytes of memory outside it (the pool's dirty data, the buffers of the txg
 * being written, the intent log's blocks) count against its limit: unheld cached data is then
 * kept within c - bytes, so that cached data plus the reservation stay within c. The reservation
 * counts for at most half of c, so at least c / 2 always stays for cached blocks (an operation
 * needs its blocks in memory at once, and a cache squeezed to nothing would make its load-and-
 * retry loop spin); a caller that keeps bytes <= c / 2 gets the exact bound. bytes replaces the
 * previous reservation (it is a level, not a delta) and is rounded up to ARC_RESERVE_QUANTUM.
 * Growing it evicts unheld buffers before returning; held ones stay, as with arc_set_max.
 * Concurrent calls are serialized; the last one wins. O(shards) when the rounded value changes,
 * one uncontended lock otherwise. */
void arc_set_reserved(struct arc *arc, uint64_t bytes);

/* ---- lookup and the fill protocol ---- */

/* Looks key up for a block of size bytes (> 0). Never blocks on I/O. Returns:
 *   ARC_HIT        *buf_out is held by the caller, data valid. A hit on an MRU buffer moves it to
 *                  the MFU state.
 *   ARC_MISS_FILL  *buf_out is a new buffer of size bytes (contents undefined), already in the
 *                  cache in the filling state and held by the caller. The caller reads the block
 *                  into arc_buf_data and calls arc_fill_done (success or error), then arc_rele
 *                  when it no longer needs the data. Until arc_fill_done, other lookups of the key
 *                  return ARC_MISS_WAIT.
 *   ARC_MISS_WAIT  another caller is filling key; *buf_out is NULL and nothing is queued: retry
 *                  later, or use arc_lookup_async to be called back.
 *   -EINVAL        size is 0, or a buffer of another size is cached or being filled under key
 *                  (the same key must always name the same block size).
 *   -ENOMEM        no memory for a new buffer; the cache is unchanged.
 * A hit costs a hash lookup and a list unlink under the shard lock, with no allocation. */
SH_MUST_CHECK int arc_lookup(struct arc *arc, const struct arc_key *key, uint32_t size,
                             struct arc_buf **buf_out);

/* arc_lookup with an asynchronous wait: the same returns, except that on ARC_MISS_WAIT the waiter
 * w (aw_done set by the caller) has been queued on the buffer being filled, and w->aw_done will be
 * called exactly once, by the thread that calls arc_fill_done for it, after the fill completes:
 * with the buffer held for the waiter on success, with NULL and the fill's error otherwise. On
 * every other return w is untouched and no callback will come. Waiters are called in the order
 * they were queued. A waiter's access does not count as a second access of the block (it does not
 * move the block to the MFU state). */
SH_MUST_CHECK int arc_lookup_async(struct arc *arc, const struct arc_key *key, uint32_t size,
                                   struct arc_waiter *w, struct arc_buf **buf_out);

/* Completes the fill of a buffer returned with ARC_MISS_FILL; called once per such buffer, by its
 * filler. status 0: the data are valid; the buffer becomes an ordinary cached buffer and each
 * queued waiter gets a hold and its callback. status < 0 (a negative errno): the buffer is removed
 * from the cache (later lookups miss), each waiter's callback gets NULL and status. In both cases
 * the filler keeps its own hold and must still arc_rele the buffer (after a failure that frees it).
 * The callbacks run inside this call, on this thread, with no cache lock held. */
void arc_fill_done(struct arc *arc, struct arc_buf *buf, int status);

/* For the filler of a buffer (ARC_MISS_FILL, before arc_fill_done): data (arc_buf_size bytes,
 * from arc_data_alloc or mem_aligned_alloc; the cache frees it as its own) becomes the buffer's
 * data. Returns the data the buffer had, which the caller frees with arc_data_free. For a filler
 * that read the block into a buffer of its own, one the leaves could read into without a copy.
 * No lock: nobody but the filler touches a buffer's data before arc_fill_done. */
void *arc_fill_take(struct arc_buf *buf, void *data);

/* ---- buffers ---- */

/* The buffer's data: ARC_BUF_ALIGN-aligned, arc_buf_size bytes, valid while the caller holds it. */
void *arc_buf_data(const struct arc_buf *buf);
uint32_t arc_buf_size(const struct arc_buf *buf);
const struct arc_key *arc_buf_key(const struct arc_buf *buf);

/* Takes one more hold on a buffer the caller already holds (to hand it to another owner). */
void arc_hold(struct arc_buf *buf);

/* Releases one hold. When the last hold of a cached buffer goes, it becomes evictable (and if the
 * cache is above its limit, eviction runs now); when the last hold of a removed buffer goes, it is
 * freed. buf must not be used after this call unless the caller holds it otherwise. A filler must
 * call arc_fill_done before releasing its last hold. */
void arc_rele(struct arc *arc, struct arc_buf *buf);

/* ---- write-through and frees ---- */

/* Allocates data for arc_insert: size bytes (> 0), ARC_BUF_ALIGN-aligned, contents undefined.
 * Returns NULL when out of memory. Free with arc_data_free unless it was passed to arc_insert. */
void *arc_data_alloc(uint32_t size);
void arc_data_free(void *data);

/* Caches a block the caller has just written, without copying: data (from arc_data_alloc, size
 * bytes) becomes the buffer's data. Ownership of data passes to the cache on every return,
 * success or error; the caller must not touch it afterwards except through *buf_out.
 *   buf_out  NULL, or where to return the new buffer held by the caller (arc_rele it).
 * The new buffer enters the MRU state like a first access. If key is already cached, the old
 * buffer is replaced (it is removed as by arc_remove: its holders keep it until their rele); a
 * ghost of key is forgotten without adapting p. Returns 0, -EBUSY if key is being filled (a
 * lookup found it missing and is reading it), -EINVAL if data is NULL or size is 0, -ENOMEM. */
SH_MUST_CHECK int arc_insert(struct arc *arc, const struct arc_key *key, void *data, uint32_t size,
                             struct arc_buf **buf_out);
/* arc_insert, except that data stays the caller's when it fails. */
SH_MUST_CHECK int arc_insert_keep_on_error(struct arc *arc, const struct arc_key *key, void *data,
                                           uint32_t size, struct arc_buf **buf_out);

/* Forgets key (a freed block): a cached buffer leaves the lists and is freed now if unheld,
 * else at its last arc_rele (its holders keep valid data); a buffer being filled is unlinked (its
 * filler and waiters still complete, but the result is not cached); a ghost is dropped. Returns
 * true if anything was found. */
bool arc_remove(struct arc *arc, const struct arc_key *key);

/* ---- observation ---- */

/* Fills *out with the counters and gauges above. */
void arc_stats(struct arc *arc, struct arc_stats *out);

/* as_size_bytes alone: the data bytes of cached buffers, held or not (one lock per shard). */
uint64_t arc_size_bytes(struct arc *arc);

/* Walks every structure and checks the invariants listed in arc.c (hash placement, list links,
 * byte accounting, the size and ghost bounds). O(number of entries), holding one shard lock at a
 * time: meant for tests and debugging. Returns 0, or -EUCLEAN after logging the first breach. */
SH_MUST_CHECK int arc_check(struct arc *arc);

#endif
