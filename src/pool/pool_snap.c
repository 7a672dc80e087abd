/* pool_snap.c: snapshots, and the dead lists that let a snapshot's destroy find what to free.
 *
 * ================================================================================================
 * THEORY
 * ================================================================================================
 *
 * Model. A snapshot is a file system's tree as one txg left it: its root block pointer, kept in
 * the metadata tree, so every block that root reaches stays allocated while the snapshot exists.
 * Trees are copy on write and every block pointer carries its birth txg, so, as in ZFS, which
 * file systems and snapshots share a block follows from its birth and its death alone:
 *
 *   - A file system (the head) and its snapshots S1 < S2 < ... < Sn (by txg) form a line. A block
 *     born in txg b and killed (no longer referenced by the head) in txg d is referenced by
 *     exactly the snapshots S with b <= S.txg < d: a block never comes back once the head let it
 *     go, and a snapshot taken at or after its birth and before its death saw it.
 *   - So a block the head kills with b > Sn.txg (the head's prev_snap_txg) is referenced by
 *     nothing: freed at once, as without snapshots. One with b <= prev_snap_txg is still
 *     referenced by Sn at least: it goes on the head's dead list instead.
 *   - A clone's line starts at its origin snapshot O: its prev_snap_txg starts at O.txg, so the
 *     blocks it shares with O (born <= O.txg) are never freed through the clone.
 *
 * Dead lists (ZFS's deadlist, with its birth buckets). Each head and each snapshot X has a dead
 * list dl(X): the blocks referenced by X's predecessor P (the previous snapshot, or a clone's
 * origin) and not by X. The head's dead list is the one kills append to; taking a snapshot gives
 * the head's dead list to the new snapshot and starts the head on an empty one. A dead list is
 * split into buckets by birth: bucket k holds blocks born after txg k, k being the txg of the
 * latest snapshot (or origin) of the line older than the block when it was killed (0 if none).
 * Invariant D1: every key of dl(X) is < P.txg (a block X's predecessor references was born at or
 * before P.txg; when X's predecessor changes, by a destroy, the new one is older and the keys
 * that would break D1 are exactly the ones the destroy frees). A bucket is a set of chains; a
 * chain is an append-only linked list of chunk blocks (up to POOL_DL_CHUNK_MAX block pointers
 * each), newest first, written whole in phase 1 of a sync and never rewritten, so appending
 * needs no read.
 *
 * Destroying snapshot S, between P (its predecessor, txg 0 if none) and N (its successor: the
 * next snapshot or the head):
 *   - The blocks only S references are those born after P.txg that N no longer references:
 *     exactly the buckets of dl(N) with key >= P.txg (D1 makes their keys < S.txg). Their chains
 *     move, whole, to the free queue ("fq/"); nothing else of dl(N) is read.
 *   - dl(S) (blocks P references and S does not) are referenced by P and not by N: its chains
 *     move into dl(N) under their own keys, which D1 put below P.txg already.
 *   - S's record goes. All of it is changes to the metadata tree, which never misses (R9), made
 *     in phase 1 of one txg: the command's work is proportional to the chains moved, not to
 *     the size of anything.
 *   - The sync thread then frees the queued chains in steps (as a dataset's destroy, one step
 *     per txg, pool_destroy.c): a step reads the chain's newest chunk, frees the blocks it names
 *     and the chunk itself, and records the chain's rest in its "fq/" entry, all in the txg that
 *     follows; a crash resumes from the entry. Memory: one chunk and the walk's cache.
 *
 * Space.
 *   - REFER of a head is its record's used bytes (its tree and data, as before snapshots); a kill
 *     subtracts the block from it whether it is freed or dead-listed. A snapshot's REFER is the
 *     head's at the snapshot's txg, frozen.
 *   - USED of snapshot S (what its destroy frees) is the bytes of dl(N)'s buckets with key >=
 *     P.txg: a sum over chain headers in the metadata tree, plus the head's kills not written
 *     yet when N is the head.
 *   - USED of a file system is its REFER plus every block of its line that only snapshots hold:
 *     every dead list of the line, buckets with key >= its origin's txg (0 without one). Each
 *     such block is in exactly one dead list (it died once).
 *   - The pool counts each block once: the allocator knows blocks, not who holds them. A quota
 *     limits REFER (what the file system references, as ZFS's refquota); snapshots' blocks are
 *     allocated space of the pool.
 *
 * When. A snapshot is taken in phase 1 of a sync, right after its file system's changes are
 * written into its tree: it holds every change of that txg and of the ones before (UNSTABLE
 * data too: it is dirty data of the txg), and none of a later txg. The command asks for a sync
 * and returns once that txg is durable, so a change answered before the command began is in the
 * snapshot, and one answered after it returned is not. Several snapshots asked for together are
 * taken in the same phase 1, all or none. Destroys run in phase 1 too, after the file system's
 * kills of that txg are written into its dead list.
 *
 * Rules.
 *   S1 (kill) pool_free_block of a block of head H born at or before H's prev_snap_txg appends
 *      it to H's pending kills (memory, counted as dirty bytes) in the bucket of its birth;
 *      phase 1 writes each bucket's pending kills as one chunk on the bucket's chain.
 *   S2 (a dataset being destroyed) drops such blocks instead: its line's snapshots or its
 *      origin hold them.
 *   S3 (snapshot, phase 1) pending kills written first; the snapshot record takes the head's
 *      root, REFER, txg and dead list; the head starts a new dead list and prev_snap_txg = txg.
 *   S4 (destroy, phase 1) as above; refused while a clone's origin is the snapshot.
 *   S5 (one per txg) at most one snapshot of a file system per txg: a snapshot's txg is unique
 *      in its line (its record's key, its bucket boundary). A request that would take a second
 *      waits for the next txg.
 *   S6 (all or none) a request's snapshots are checked first, then made; a failure while
 *      making them undoes the ones made.
 *   S8 (rollback, phase 1) the later snapshots destroyed (asked for), the file system's dead
 *      list dropped (its blocks are the snapshot's, and the file system's again), its tree as it
 *      was queued for freeing as a destroyed dataset whose line ends at the snapshot (S2 keeps
 *      the snapshot's blocks), its root and REFER the snapshot's; refused while it is open,
 *      unless its owner follows rollbacks (S10).
 *   S7 (clones) a clone's record names its origin (file system id and txg); its line starts
 *      there (prev_snap_txg = the origin's txg), so what it shares with the origin is dead-listed,
 *      never freed, through it; the origin is not destroyed while a record names it; a clone
 *      being destroyed queues its dead list's chains with their entries kept (the origin holds
 *      them: only the chunks are freed).
 *   S9 (promote, phase 1) the origin's snapshots up to the clone's origin move to the clone and
 *      the origin becomes the clone of that snapshot, as below; refused while either is open.
 *   S10 (rollback of a served file system) when the file system's owner has do_rollback (the
 *      NFS back end's does), other holds of it do not refuse the rollback: in its phase 1,
 *      after the owner's do_sync of that txg has put every change made before it into the old
 *      tree (so that tree, queued for freeing, names every block they wrote), the owner is told
 *      (do_rollback) before the old tree is closed, drops what it knew of it and reads the new
 *      one from its next operation on. Its log records are all tagged with this txg or an
 *      earlier one (the open txg became the next when phase 1 began), so replay after a crash
 *      skips them once the rollback is durable and applies them to the old tree while it is
 *      not: no record of the old tree is ever replayed onto the new one. With -r, the later
 *      snapshots are doomed and let go of by their users (.zfs/snapshot) first, as a destroy's.
 *
 * Promote (zfs promote). Let H be a file system with snapshots S1 < ... < Sn and C a clone of
 * Sk, with snapshots C1 < ... < Cm. C's line reads Sk, C1..Cm, C and H's S1..Sn, H; after the
 * promote C's reads S1..Sk, C1..Cm, C and H's Sk+1..Sn, H with H's origin Sk: every snapshot and
 * file system keeps its predecessor, so every dead list keeps its meaning (D1 included). What
 * changes, all in phase 1 of one txg (a crash sees all of it or none):
 *   P1 The records sn/<H>/<txg> with txg <= Sk.txg become sn/<C>/<txg> (as they are: name,
 *      id, GUID, dead list, REFER; a GUID derived from H is stored); a name C has already is
 *      refused (-EEXIST) first.
 *   P2 C takes H's origin (none when H was no clone); H's origin is (C, Sk.txg); every other
 *      file system whose origin is one of S1..Sk names C instead (its txg unchanged).
 *   P3 The buckets. C's kills before the promote were bucketed by its old line, whose first
 *      boundary was Sk.txg: every block older than that went to bucket 0, whatever its birth.
 *      C's line now has S1..Sk-1 (and H's origin) below Sk, and USED of Sk (dl(C1)'s buckets
 *      from Sk-1.txg on) or a later destroy of one of them needs those blocks in the buckets of
 *      their births. So the chains of C's dead lists (C1..Cm and C's own) with keys below
 *      Sk.txg are read and their entries written again into chains keyed by the new line; the
 *      old chains go to the free queue with their entries kept (only their chunks are freed).
 *      This is the one part whose cost is not a constant: one read of each such chunk, under
 *      the lock (R2's exception, as a check), which only blocks the origin's line had before
 *      the clone and the clone has since let go of fill. It is skipped when nothing lies below
 *      Sk on the new line. A chain written in this very txg (C's last kills) is not on disk
 *      yet: the promote then waits for the next txg, as S5 does.
 *      H's dead lists keep theirs: keys below Sk.txg are blocks Sk holds, below H's new origin,
 *      which the space figures and destroys of H's line leave alone as they do a clone's.
 *   P4 The loaded lines (ds_snap_txgs) of both are built before anything changes and swapped
 *      in at the end; a snapshot of H being moved that is loaded read only is let go of first
 *      (-EBUSY while exported).
 * After it, H can be destroyed once its own later snapshots are: its tree frees what was born
 * after Sk (S2 with prev_snap_txg = Sk.txg), its dead list what Sk+1..Sn alone held.
 *
 * Concurrency. Everything here runs under p_lock: kills from the owners' operations and the
 * sync's tree writes, flushes and requests in phase 1, listings from any thread. The free queue's
 * steps run on the sync thread like destroy steps (R2's exception: they read chunks
 * synchronously under the lock, one chunk per step); a promote reads the chunks it re-keys (P3).
 *
 * ------------------------------------------------------------------------------------------------
 * ON-DISK FORMATS (integers little-endian; the keys' numbers are 16 lower-case hex digits)
 *
 * "sn/<head id>/<txg>" -> snapshot record, 192 bytes:
 *   offset  size  field
 *        0     4  record version (1)
 *        4     4  name length (1..POOL_SNAP_NAME_MAX)
 *        8     8  snapshot id (from the pool's dataset ids; never reused)
 *       16     8  txg (the key's)
 *       24     8  creation time, ns (CLOCK_REALTIME)
 *       32     8  REFER bytes
 *       40     8  its dead list's id (0: empty)
 *       48     8  GUID: random at creation, kept by a receive (zfs's guid); 0 in records
 *                 made before it was kept, whose GUID is then derived (pool_snap_guid)
 *       56     8  reserved, zero
 *       64    64  name, NUL padded
 *      128    64  its tree's root block pointer
 * "dl/<dead list id>/<bucket key>/<chain id>" -> chain header, 128 bytes:
 *        0     4  version (1)
 *        4     4  flags: 1 = free the blocks the entries name (fq/ only; else only the chunks)
 *        8     8  entries
 *       16     8  bytes (the entries' allocated sizes)
 *       24     8  chunks
 *       32    32  reserved, zero
 *       64    64  the newest chunk's block pointer
 * "fq/<chain id>" -> the header of a chain being freed (the same 128 bytes).
 * Chunk block (type POOL_BT_DEADLIST), 96 + 64 n bytes:
 *        0     8  magic "SHDLCHNK"
 *        8     4  version (1)
 *       12     4  n, entries (1..POOL_DL_CHUNK_MAX)
 *       16     8  bytes of the entries
 *       24     8  reserved, zero
 *       32    64  the previous (older) chunk's block pointer, a hole for the first
 *       96  64 n  the entries' block pointers (blk_ptr_encode)
 * The head's fields (prev_snap_txg, its dead list, its origin) are in its record (pool.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool/pool_impl.h"

#define POOL_SN_PREFIX "sn/"
#define POOL_DL_PREFIX "dl/"
#define POOL_FQ_PREFIX "fq/"
#define POOL_SN_RECORD_VERSION 1u
#define POOL_DL_CHAIN_VERSION 1u
#define POOL_DL_CHUNK_MAGIC "SHDLCHNK"
#define POOL_HEX_KEY_MAX 64u

/* ---------------------------------------------------------------------------------------------
 * Keys and records */

static uint32_t pool_sn_key(uint64_t head_id, uint64_t txg, char *key)
{
	return (uint32_t)snprintf(key, POOL_MOS_KEY_MAX, POOL_SN_PREFIX "%016" PRIx64 "/%016" PRIx64,
	                          head_id, txg);
}

/* "sn/<head id>/": the prefix of a line's snapshot records. */
static uint32_t pool_sn_prefix(uint64_t head_id, char *key)
{
	return (uint32_t)snprintf(key, POOL_MOS_KEY_MAX, POOL_SN_PREFIX "%016" PRIx64 "/", head_id);
}

static uint32_t pool_dl_key(uint64_t dl_id, uint64_t bucket, uint64_t seq, char *key)
{
	return (uint32_t)snprintf(key, POOL_MOS_KEY_MAX,
	                          POOL_DL_PREFIX "%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64, dl_id,
	                          bucket, seq);
}

static uint32_t pool_dl_prefix(uint64_t dl_id, char *key)
{
	return (uint32_t)snprintf(key, POOL_MOS_KEY_MAX, POOL_DL_PREFIX "%016" PRIx64 "/", dl_id);
}

static uint32_t pool_fq_key(uint64_t seq, char *key)
{
	return (uint32_t)snprintf(key, POOL_MOS_KEY_MAX, POOL_FQ_PREFIX "%016" PRIx64, seq);
}

/* Parses 16 lower-case hex digits. */
static bool pool_hex16(const uint8_t *s, uint64_t *out)
{
	uint64_t v = 0;
	for (int i = 0; i < 16; i++) {
		uint8_t c = s[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10u;
		else
			return false;
		v = (v << 4) | d;
	}
	*out = v;
	return true;
}


void pool_sn_encode(const struct pool_snap_rec *sr, uint8_t out[POOL_SN_RECORD_BYTES])
{
	memset(out, 0, POOL_SN_RECORD_BYTES);
	size_t n = strlen(sr->sr_name);
	pool_put_le32(out + 0, POOL_SN_RECORD_VERSION);
	pool_put_le32(out + 4, (uint32_t)n);
	pool_put_le64(out + 8, sr->sr_id);
	pool_put_le64(out + 16, sr->sr_txg);
	pool_put_le64(out + 24, sr->sr_creation_ns);
	pool_put_le64(out + 32, sr->sr_refer);
	pool_put_le64(out + 40, sr->sr_dl_id);
	pool_put_le64(out + 48, sr->sr_guid);
	memcpy(out + 64, sr->sr_name, n);
	blk_ptr_encode(&sr->sr_root, out + 128);
}

bool pool_snap_name_valid(const char *name)
{
	return pool_name_chars_valid(name, POOL_SNAP_NAME_MAX, ":");
}

/* A snapshot record under key (klen bytes; hostile) into *sr. -EIO when it does not parse. */
int pool_sn_decode(struct pool *p, const void *key, uint32_t klen, const uint8_t *in,
                   uint32_t len, struct pool_snap_rec *sr)
{
	const uint8_t *k = key;
	size_t pl = strlen(POOL_SN_PREFIX);
	memset(sr, 0, sizeof(*sr));
	if (klen != pl + 33 || k[pl + 16] != '/' || !pool_hex16(k + pl, &sr->sr_head_id) ||
	    !pool_hex16(k + pl + 17, &sr->sr_txg))
		return -EIO;
	if (len != POOL_SN_RECORD_BYTES || pool_get_le32(in) != POOL_SN_RECORD_VERSION)
		return -EIO;
	uint32_t n = pool_get_le32(in + 4);
	if (n == 0 || n > POOL_SNAP_NAME_MAX || pool_get_le64(in + 16) != sr->sr_txg)
		return -EIO;
	memcpy(sr->sr_name, in + 64, n);
	sr->sr_name[n] = '\0';
	if (!pool_snap_name_valid(sr->sr_name))
		return -EIO;
	sr->sr_id = pool_get_le64(in + 8);
	sr->sr_creation_ns = pool_get_le64(in + 24);
	sr->sr_refer = pool_get_le64(in + 32);
	sr->sr_dl_id = pool_get_le64(in + 40);
	sr->sr_guid = pool_get_le64(in + 48);
	if (sr->sr_id == 0 || blk_ptr_decode(in + 128, &sr->sr_root) != 0)
		return -EIO;
	if (!blk_ptr_is_hole(&sr->sr_root) && !pool_bp_valid(p, &sr->sr_root))
		return -EIO;
	return 0;
}


void pool_dl_chain_encode(const struct pool_dl_chain *dc, uint8_t out[POOL_DL_CHAIN_BYTES])
{
	memset(out, 0, POOL_DL_CHAIN_BYTES);
	pool_put_le32(out + 0, POOL_DL_CHAIN_VERSION);
	pool_put_le32(out + 4, dc->dc_flags);
	pool_put_le64(out + 8, dc->dc_entries);
	pool_put_le64(out + 16, dc->dc_bytes);
	pool_put_le64(out + 24, dc->dc_chunks);
	blk_ptr_encode(&dc->dc_head, out + 64);
}

/* A chain header (hostile) under a dl/ or fq/ key into *dc. -EIO when it does not parse. */
int pool_dl_chain_decode(struct pool *p, const void *key, uint32_t klen, const uint8_t *in,
                         uint32_t len, struct pool_dl_chain *dc)
{
	const uint8_t *k = key;
	memset(dc, 0, sizeof(*dc));
	size_t dl = strlen(POOL_DL_PREFIX), fq = strlen(POOL_FQ_PREFIX);
	if (klen == dl + 50 && memcmp(k, POOL_DL_PREFIX, dl) == 0) {
		if (k[dl + 16] != '/' || k[dl + 33] != '/' || !pool_hex16(k + dl, &dc->dc_dl_id) ||
		    !pool_hex16(k + dl + 17, &dc->dc_bucket) || !pool_hex16(k + dl + 34, &dc->dc_seq))
			return -EIO;
	} else if (klen == fq + 16 && memcmp(k, POOL_FQ_PREFIX, fq) == 0) {
		if (!pool_hex16(k + fq, &dc->dc_seq))
			return -EIO;
	} else {
		return -EIO;
	}
	if (len != POOL_DL_CHAIN_BYTES || pool_get_le32(in) != POOL_DL_CHAIN_VERSION)
		return -EIO;
	dc->dc_flags = pool_get_le32(in + 4);
	dc->dc_entries = pool_get_le64(in + 8);
	dc->dc_bytes = pool_get_le64(in + 16);
	dc->dc_chunks = pool_get_le64(in + 24);
	if (dc->dc_flags > POOL_DL_F_FREE_ENTRIES || blk_ptr_decode(in + 64, &dc->dc_head) != 0)
		return -EIO;
	if (!blk_ptr_is_hole(&dc->dc_head) &&
	    (!pool_bp_valid(p, &dc->dc_head) || dc->dc_head.bp_type != POOL_BT_DEADLIST))
		return -EIO;
	return 0;
}

/* A chunk's image (hostile: read from disk, its checksum verified) into its fields; the entries
 * stay in the image, each checked by pool_dl_chunk_entry. */

int pool_dl_chunk_decode(struct pool *p, const uint8_t *img, uint32_t len,
                         struct pool_dl_chunk *ck)
{
	if (len < POOL_DL_CHUNK_HDR || memcmp(img, POOL_DL_CHUNK_MAGIC, 8) != 0 ||
	    pool_get_le32(img + 8) != 1)
		return -EIO;
	ck->ck_n = pool_get_le32(img + 12);
	ck->ck_bytes = pool_get_le64(img + 16);
	if (ck->ck_n == 0 || ck->ck_n > POOL_DL_CHUNK_MAX ||
	    len != POOL_DL_CHUNK_HDR + 64u * ck->ck_n || blk_ptr_decode(img + 32, &ck->ck_prev) != 0)
		return -EIO;
	if (!blk_ptr_is_hole(&ck->ck_prev) &&
	    (!pool_bp_valid(p, &ck->ck_prev) || ck->ck_prev.bp_type != POOL_BT_DEADLIST))
		return -EIO;
	ck->ck_entries = img + POOL_DL_CHUNK_HDR;
	return 0;
}

int pool_dl_chunk_entry(struct pool *p, const struct pool_dl_chunk *ck, uint32_t i,
                               struct blk_ptr *bp)
{
	if (blk_ptr_decode(ck->ck_entries + 64u * i, bp) != 0 || blk_ptr_is_hole(bp) ||
	    !pool_bp_valid(p, bp))
		return -EIO;
	return 0;
}

/* A slot at the end of a growable array of items of size bytes (*n of *cap used), or NULL for
 * -ENOMEM; *n counts it. */
static void *pool_vec_push(void *items_ptr, size_t *n, size_t *cap, size_t size)
{
	void **items = items_ptr;
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		void *grown = mem_realloc(*items, c * size);
		if (!grown)
			return NULL;
		*items = grown;
		*cap = c;
	}
	return (uint8_t *)*items + (*n)++ * size;
}

/* Records of a range of the metadata tree, each decoded into an item of a growable array; a
 * record that does not decode stops the collection with -EIO (logged as `what`), or is left out
 * when skip_bad (pool_check reports it). */
struct pool_collect {
	struct pool *co_pool;
	void *co_items;
	size_t co_n, co_cap, co_size;
	int (*co_decode)(struct pool *p, const void *key, uint32_t klen, const void *val,
	                 uint32_t vlen, void *item);
	const char *co_what;
	bool co_skip_bad;
	int co_err;
};

static bool pool_collect_visit(void *arg, const void *key, uint32_t klen, const void *val,
                               uint32_t vlen)
{
	struct pool_collect *co = arg;
	void *item = pool_vec_push(&co->co_items, &co->co_n, &co->co_cap, co->co_size);
	if (!item) {
		co->co_err = -ENOMEM;
		return false;
	}
	if (co->co_decode(co->co_pool, key, klen, val, vlen, item) == 0)
		return true;
	co->co_n--;
	if (co->co_skip_bad)
		return true;
	log_ratelimited(LOG_ERROR, "pool %s: %s is damaged (%.*s)", co->co_pool->p_name,
	                co->co_what, (int)SH_MIN(klen, 60u), (const char *)key);
	co->co_err = -EIO;
	return false;
}

/* ---------------------------------------------------------------------------------------------
 * Scanning the metadata tree (pinned: no scan misses, R9) */

static int pool_mos_range(struct pool *p, const char *prefix, uint32_t plen, const char *start,
                          uint32_t slen, bool after,
                          bool (*fn)(void *, const void *, uint32_t, const void *, uint32_t),
                          void *arg);

/* Under p_lock: co's items from the records whose keys start with prefix, from start on. */
static int pool_collect_run(struct pool_collect *co, const char *prefix, uint32_t plen,
                            const char *start, uint32_t slen, void *items_out, size_t *n_out)
{
	int rc = pool_mos_range(co->co_pool, prefix, plen, start, slen, false, pool_collect_visit,
	                        co);
	if (rc == 0)
		rc = co->co_err;
	if (rc != 0) {
		mem_free(co->co_items);
		return rc;
	}
	*(void **)items_out = co->co_items;
	*n_out = co->co_n;
	return 0;
}

/* Visits the entries whose key starts with prefix, from start (a key at or after the prefix). */
struct pool_mos_range {
	const char *mr_prefix;
	uint32_t mr_plen;
	bool (*mr_fn)(void *arg, const void *key, uint32_t klen, const void *val, uint32_t vlen);
	void *mr_arg;
};

static bool pool_mos_range_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                 uint32_t vlen)
{
	struct pool_mos_range *mr = arg;
	if (klen < mr->mr_plen || memcmp(key, mr->mr_prefix, mr->mr_plen) != 0)
		return false;
	return mr->mr_fn(mr->mr_arg, key, klen, val, vlen);
}

static int pool_mos_range(struct pool *p, const char *prefix, uint32_t plen, const char *start,
                          uint32_t slen, bool after,
                          bool (*fn)(void *, const void *, uint32_t, const void *, uint32_t),
                          void *arg)
{
	struct pool_mos_range mr = {prefix, plen, fn, arg};
	/* From the pinned copy (R9), also while a check's or a scrub's walk is set: those route
	 * the metadata tree's reads through their own bounded cache, which may have let go of a
	 * node by now. */
	struct pool_walk *walk = p->p_walk;
	p->p_walk = NULL;
	int rc = btree_scan(p->p_mos, start, slen, after, pool_mos_range_visit, &mr, NULL);
	p->p_walk = walk;
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

static int pool_sn_decode_item(struct pool *p, const void *key, uint32_t klen, const void *val,
                               uint32_t vlen, void *item)
{
	return pool_sn_decode(p, key, klen, val, vlen, item);
}

/* Under p_lock: head_id's snapshots into *recs_out (mem_free), ascending. */
int pool_sn_list(struct pool *p, uint64_t head_id, struct pool_snap_rec **recs_out,
                        size_t *n_out)
{
	char prefix[POOL_MOS_KEY_MAX];
	uint32_t plen = pool_sn_prefix(head_id, prefix);
	struct pool_collect co = {.co_pool = p, .co_size = sizeof(struct pool_snap_rec),
	                          .co_decode = pool_sn_decode_item, .co_what = "a snapshot record"};
	return pool_collect_run(&co, prefix, plen, prefix, plen, recs_out, n_out);
}

/* Under p_lock: the snapshot of head_id called name (0, -ENOENT). */
static int pool_sn_find(struct pool *p, uint64_t head_id, const char *name,
                        struct pool_snap_rec *out)
{
	struct pool_snap_rec *recs;
	size_t n;
	int rc = pool_sn_list(p, head_id, &recs, &n);
	if (rc != 0)
		return rc;
	rc = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(recs[i].sr_name, name) == 0) {
			*out = recs[i];
			rc = 0;
			break;
		}
	}
	mem_free(recs);
	return rc;
}

uint64_t pool_snap_count(struct pool *p, uint64_t head_id)
{
	struct pool_snap_rec *recs;
	size_t n;
	if (pool_sn_list(p, head_id, &recs, &n) != 0)
		return 1; /* unknown: as if there were some */
	mem_free(recs);
	return n;
}

static int pool_dl_chain_decode_item(struct pool *p, const void *key, uint32_t klen,
                                     const void *val, uint32_t vlen, void *item)
{
	return pool_dl_chain_decode(p, key, klen, val, vlen, item);
}

/* Under p_lock: the chains whose keys start with prefix, from key start on, ascending. */
static int pool_dl_collect(struct pool *p, const char *prefix, uint32_t plen, const char *start,
                           uint32_t slen, struct pool_dl_chain **out, size_t *n_out)
{
	struct pool_collect co = {.co_pool = p, .co_size = sizeof(struct pool_dl_chain),
	                          .co_decode = pool_dl_chain_decode_item,
	                          .co_what = "a dead list's chain header"};
	return pool_collect_run(&co, prefix, plen, start, slen, out, n_out);
}

/* Under p_lock: the chains of dead list dl_id with bucket key >= from (all: 0). */
static int pool_dl_list(struct pool *p, uint64_t dl_id, uint64_t from,
                        struct pool_dl_chain **out, size_t *n_out)
{
	*out = NULL;
	*n_out = 0;
	if (dl_id == 0)
		return 0;
	char prefix[POOL_MOS_KEY_MAX], start[POOL_MOS_KEY_MAX];
	uint32_t plen = pool_dl_prefix(dl_id, prefix);
	uint32_t slen = (uint32_t)snprintf(start, sizeof(start), "%s%016" PRIx64 "/", prefix, from);
	return pool_dl_collect(p, prefix, plen, start, slen, out, n_out);
}

/* Under p_lock: the bytes of dead list dl_id's chains with key >= from. */
static int pool_dl_bytes(struct pool *p, uint64_t dl_id, uint64_t from, uint64_t *bytes_out)
{
	struct pool_dl_chain *ch;
	size_t n;
	int rc = pool_dl_list(p, dl_id, from, &ch, &n);
	uint64_t sum = 0;
	for (size_t i = 0; rc == 0 && i < n; i++)
		sum += ch[i].dc_bytes;
	mem_free(ch);
	*bytes_out = sum;
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The line and kills (S1, S2) */

static int pool_line_add(struct pool_ds *ds, uint64_t txg)
{
	if (ds->ds_nsnap_txgs == ds->ds_snap_txgs_cap) {
		uint32_t cap = ds->ds_snap_txgs_cap ? ds->ds_snap_txgs_cap * 2 : 8;
		uint64_t *n = mem_realloc(ds->ds_snap_txgs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		ds->ds_snap_txgs = n;
		ds->ds_snap_txgs_cap = cap;
	}
	uint32_t i = ds->ds_nsnap_txgs;
	while (i > 0 && ds->ds_snap_txgs[i - 1] > txg) {
		ds->ds_snap_txgs[i] = ds->ds_snap_txgs[i - 1];
		i--;
	}
	ds->ds_snap_txgs[i] = txg;
	ds->ds_nsnap_txgs++;
	return 0;
}

static void pool_line_remove(struct pool_ds *ds, uint64_t txg)
{
	for (uint32_t i = 0; i < ds->ds_nsnap_txgs; i++) {
		if (ds->ds_snap_txgs[i] == txg) {
			memmove(&ds->ds_snap_txgs[i], &ds->ds_snap_txgs[i + 1],
			        (ds->ds_nsnap_txgs - i - 1) * sizeof(uint64_t));
			ds->ds_nsnap_txgs--;
			return;
		}
	}
}

int pool_snap_load_line(struct pool *p, struct pool_ds *ds)
{
	ds->ds_nsnap_txgs = 0;
	struct pool_snap_rec *recs;
	size_t n;
	int rc = pool_sn_list(p, ds->ds_id, &recs, &n);
	if (rc != 0)
		return rc;
	if (ds->ds_origin_txg != 0)
		rc = pool_line_add(ds, ds->ds_origin_txg);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = pool_line_add(ds, recs[i].sr_txg);
	mem_free(recs);
	if (rc == 0)
		ds->ds_snaps_loaded = true;
	return rc;
}

void pool_snap_ds_fini(struct pool_ds *ds)
{
	for (uint32_t i = 0; i < ds->ds_nkills; i++)
		mem_free(ds->ds_kills[i].dk_bps);
	mem_free(ds->ds_kills);
	mem_free(ds->ds_snap_txgs);
	ds->ds_kills = NULL;
	ds->ds_snap_txgs = NULL;
	ds->ds_nkills = ds->ds_kills_cap = 0;
	ds->ds_nsnap_txgs = ds->ds_snap_txgs_cap = 0;
	ds->ds_kill_mem = 0;
}

/* How many of n ascending uint64 keys, the first at base and each stride bytes after the one
 * before (an array of them, or a key field of an array of structures), are below key: where key
 * is, or would go. */
static uint32_t pool_key_lower_bound(const void *base, uint32_t n, size_t stride, uint64_t key)
{
	uint32_t lo = 0, hi = n; /* the first key >= key is at hi */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint64_t k;
		memcpy(&k, (const uint8_t *)base + (size_t)mid * stride, sizeof(k));
		if (k < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* How many of a line's n boundaries (ascending) lie before a block born in txg birth: the
 * block's bucket is the last of those (bounds[i - 1]), or 0 when i is 0. */
static uint32_t pool_bucket_index(const uint64_t *bounds, uint32_t n, uint64_t birth)
{
	return pool_key_lower_bound(bounds, n, sizeof(bounds[0]), birth);
}

/* The bucket a block born in txg birth goes to: the latest boundary of the line before it. */
static uint64_t pool_line_bucket(const struct pool_ds *ds, uint64_t birth)
{
	uint32_t i = pool_bucket_index(ds->ds_snap_txgs, ds->ds_nsnap_txgs, birth);
	return i == 0 ? 0 : ds->ds_snap_txgs[i - 1];
}

int pool_dl_kill(struct pool_ds *ds, const struct blk_ptr *bp)
{
	if (ds->ds_queued)
		return 0; /* S2 */
	uint64_t key = pool_line_bucket(ds, bp->bp_birth_txg);
	/* ds_kills is kept in key order, so that finding the bucket's list is a binary search
	 * however many buckets a txg's kills touch (one per snapshot interval they were born in) */
	uint32_t lo = ds->ds_nkills == 0 ? 0
	                                 : pool_key_lower_bound(&ds->ds_kills[0].dk_key, ds->ds_nkills,
	                                                        sizeof(ds->ds_kills[0]), key);
	struct pool_dl_kills *dk = NULL;
	if (lo < ds->ds_nkills && ds->ds_kills[lo].dk_key == key) {
		dk = &ds->ds_kills[lo];
	} else {
		if (ds->ds_nkills == ds->ds_kills_cap) {
			uint32_t cap = ds->ds_kills_cap ? ds->ds_kills_cap * 2 : 4;
			struct pool_dl_kills *n = mem_realloc(ds->ds_kills, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			ds->ds_kills = n;
			ds->ds_kills_cap = cap;
		}
		memmove(&ds->ds_kills[lo + 1], &ds->ds_kills[lo],
		        (size_t)(ds->ds_nkills - lo) * sizeof(ds->ds_kills[0]));
		ds->ds_nkills++;
		dk = &ds->ds_kills[lo];
		memset(dk, 0, sizeof(*dk));
		dk->dk_key = key;
	}
	if (dk->dk_n == dk->dk_cap) {
		uint32_t cap = dk->dk_cap ? dk->dk_cap * 2 : 64;
		struct blk_ptr *n = mem_realloc(dk->dk_bps, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		ds->ds_kill_mem += (uint64_t)(cap - dk->dk_cap) * sizeof(*n);
		dk->dk_bps = n;
		dk->dk_cap = cap;
	}
	dk->dk_bps[dk->dk_n++] = *bp;
	dk->dk_bytes += bp->bp_asize;
	return 0;
}

/* Under p_lock: the head's pending kills' bytes in buckets >= from. */
static uint64_t pool_dl_pending_bytes(const struct pool_ds *ds, uint64_t from)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < ds->ds_nkills; i++)
		if (ds->ds_kills[i].dk_key >= from)
			sum += ds->ds_kills[i].dk_bytes;
	return sum;
}

/* Under p_lock: a new id from the pool's dataset ids (never reused; the uberblock keeps the
 * next one). */
static uint64_t pool_new_id(struct pool *p)
{
	return p->p_next_ds_id++;
}

/* Phase 1: writes n entries as one chunk after chain dc's head. */
static int pool_dl_write_chunk(struct pool *p, struct pool_dl_chain *dc, const struct blk_ptr *bps,
                               uint32_t n)
{
	uint32_t len = POOL_DL_CHUNK_HDR + 64u * n;
	uint8_t *img = mem_zalloc(len);
	if (!img)
		return -ENOMEM;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < n; i++) {
		blk_ptr_encode(&bps[i], img + POOL_DL_CHUNK_HDR + 64u * i);
		bytes += bps[i].bp_asize;
	}
	memcpy(img, POOL_DL_CHUNK_MAGIC, 8);
	pool_put_le32(img + 8, 1);
	pool_put_le32(img + 12, n);
	pool_put_le64(img + 16, bytes);
	blk_ptr_encode(&dc->dc_head, img + 32);
	struct blk_ptr bp;
	int rc = pool_write_block(p, img, len, p->p_compress, SPACE_CLASS_NORMAL, POOL_BT_DEADLIST,
	                          0, n, false, &bp);
	mem_free(img);
	if (rc != 0)
		return rc;
	dc->dc_head = bp;
	dc->dc_entries += n;
	dc->dc_bytes += bytes;
	dc->dc_chunks++;
	return 0;
}

/* Under p_lock: the chain of dead list dl_id's bucket that appends go to (its last), or a new
 * one. */
static int pool_dl_active_chain(struct pool *p, uint64_t dl_id, uint64_t bucket,
                                struct pool_dl_chain *dc)
{
	char key[POOL_MOS_KEY_MAX], found[POOL_MOS_KEY_MAX];
	uint32_t klen = pool_dl_key(dl_id, bucket, UINT64_MAX, key), flen = 0, vlen = 0;
	uint8_t val[POOL_MOS_VAL_MAX];
	int rc = btree_seek_le(p->p_mos, key, klen, found, sizeof(found), &flen, val, sizeof(val),
	                       &vlen, NULL);
	if (rc == 0 && flen == klen && memcmp(found, key, klen - 16) == 0)
		return pool_dl_chain_decode(p, found, flen, val, vlen, dc);
	if (rc != 0 && rc != -ENOENT && rc != -EOVERFLOW)
		return rc == -SH_ENEEDBLOCK ? -EIO : rc;
	memset(dc, 0, sizeof(*dc));
	dc->dc_dl_id = dl_id;
	dc->dc_bucket = bucket;
	dc->dc_seq = pool_new_id(p);
	return 0;
}

static int pool_dl_chain_put(struct pool *p, const struct pool_dl_chain *dc, bool fq)
{
	char key[POOL_MOS_KEY_MAX];
	uint32_t klen = fq ? pool_fq_key(dc->dc_seq, key)
	                   : pool_dl_key(dc->dc_dl_id, dc->dc_bucket, dc->dc_seq, key);
	uint8_t val[POOL_DL_CHAIN_BYTES];
	pool_dl_chain_encode(dc, val);
	int rc = btree_put(p->p_mos, key, klen, val, sizeof(val), BTREE_PUT_UPSERT, NULL);
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

static int pool_dl_chain_delete(struct pool *p, const struct pool_dl_chain *dc, bool fq)
{
	char key[POOL_MOS_KEY_MAX];
	uint32_t klen = fq ? pool_fq_key(dc->dc_seq, key)
	                   : pool_dl_key(dc->dc_dl_id, dc->dc_bucket, dc->dc_seq, key);
	int rc = btree_delete(p->p_mos, key, klen, NULL);
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

int pool_dl_flush(struct pool *p, struct pool_ds *ds)
{
	while (ds->ds_nkills > 0) {
		struct pool_dl_kills *dk = &ds->ds_kills[ds->ds_nkills - 1];
		if (dk->dk_n > 0) {
			if (ds->ds_dl_id == 0) {
				ds->ds_dl_id = pool_new_id(p);
				ds->ds_record_dirty = true;
			}
			struct pool_dl_chain dc;
			int rc = pool_dl_active_chain(p, ds->ds_dl_id, dk->dk_key, &dc);
			/* Chunks of at most POOL_DL_CHUNK_MAX, written from the end so that a
			 * failure leaves the entries not written pending (the txg is retried). */
			while (rc == 0 && dk->dk_n > 0) {
				uint32_t n = SH_MIN(dk->dk_n, POOL_DL_CHUNK_MAX);
				rc = pool_dl_write_chunk(p, &dc, dk->dk_bps + dk->dk_n - n, n);
				if (rc != 0)
					break;
				rc = pool_dl_chain_put(p, &dc, false);
				if (rc != 0)
					break;
				for (uint32_t i = dk->dk_n - n; i < dk->dk_n; i++)
					dk->dk_bytes -= dk->dk_bps[i].bp_asize;
				dk->dk_n -= n;
			}
			if (rc != 0)
				return rc;
		}
		ds->ds_kill_mem -= (uint64_t)dk->dk_cap * sizeof(struct blk_ptr);
		mem_free(dk->dk_bps);
		ds->ds_nkills--;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Requests, made in phase 1 (S3-S6) */

enum pool_snap_op { POOL_SNAP_CREATE, POOL_SNAP_DESTROY, POOL_SNAP_ROLLBACK, POOL_SNAP_PROMOTE };

struct pool_snap_target {
	struct pool_ds *st_ds; /* the head, held by the caller (promote: the clone, then its origin) */
	char st_name[POOL_SNAP_NAME_MAX + 1];
	/* create: a received snapshot's GUID and creation time (0: new ones) */
	uint64_t st_guid, st_creation_ns;
	/* create: the head's fields before its snapshot, for an undo (S6) */
	uint64_t st_undo_prev_txg, st_undo_prev_id, st_undo_dl_id;
};

struct pool_snap_req {
	struct pool_snap_req *rq_next;
	enum pool_snap_op rq_op;
	struct pool_snap_target *rq_targets;
	unsigned rq_n;
	bool rq_recursive; /* rollback: destroy the later snapshots */
	bool rq_done;
	int rq_rc;
	uint64_t rq_txg; /* the txg that made it */
	char rq_err[160];
};

bool pool_snap_reqs_pending(const struct pool *p)
{
	return p->p_snap_reqs != NULL;
}

static void pool_snap_req_fail(struct pool_snap_req *rq, int rc, const char *fmt, ...)
    SH_PRINTF(3, 4);
static void pool_snap_req_fail(struct pool_snap_req *rq, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rq->rq_err, sizeof(rq->rq_err), fmt, ap);
	va_end(ap);
	rq->rq_rc = rc;
}

/* Under p_lock: the first file system whose origin is head_id's snapshot at txg. */
struct pool_clone_find {
	uint64_t cf_head_id, cf_txg;
	char *cf_name;
	bool cf_found;
};

static bool pool_clone_find_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                  uint32_t vlen)
{
	struct pool_clone_find *cf = arg;
	const uint8_t *v = val;
	uint64_t head = 0, txg = 0;
	if (pool_ds_record_origin(v, vlen, &head, &txg) && head == cf->cf_head_id &&
	    txg == cf->cf_txg && klen - 3 <= POOL_DS_NAME_MAX) {
		memcpy(cf->cf_name, (const char *)key + 3, klen - 3);
		cf->cf_name[klen - 3] = '\0';
		cf->cf_found = true;
		return false;
	}
	return true;
}

bool pool_snap_first_clone(struct pool *p, uint64_t head_id, uint64_t txg, char *name)
{
	struct pool_clone_find cf = {head_id, txg, name, false};
	if (pool_mos_range(p, "ds/", 3, "ds/", 3, false, pool_clone_find_visit, &cf) != 0)
		return false;
	if (!cf.cf_found) {
		/* a clone being destroyed holds its origin too */
		for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
			if (ds->ds_queued && ds->ds_origin_head_id == head_id &&
			    ds->ds_origin_txg == txg) {
				snprintf(name, POOL_DS_NAME_MAX + 1, "%s", ds->ds_name);
				return true;
			}
		}
	}
	return cf.cf_found;
}

/* Phase 1: takes the snapshots of rq (S3, S5, S6). Returns 1 when it must wait for the next txg
 * (a file system of it has a snapshot of this txg already), else 0 with rq_rc set. */
static int pool_snap_do_create(struct pool *p, struct pool_snap_req *rq, uint64_t txg)
{
	for (unsigned i = 0; i < rq->rq_n; i++) {
		struct pool_snap_target *st = &rq->rq_targets[i];
		struct pool_ds *ds = st->st_ds;
		if (ds->ds_prev_snap_txg == txg)
			return 1; /* S5 */
		if (ds->ds_destroying) {
			pool_snap_req_fail(rq, -ENOENT, "%s@%s: the file system is being destroyed",
			                   ds->ds_name, st->st_name);
			return 0;
		}
		struct pool_snap_rec old;
		int rc = pool_sn_find(p, ds->ds_id, st->st_name, &old);
		if (rc == 0) {
			pool_snap_req_fail(rq, -EEXIST, "%s@%s: a snapshot of that name exists",
			                   ds->ds_name, st->st_name);
			return 0;
		}
		if (rc != -ENOENT) {
			pool_snap_req_fail(rq, rc, "%s@%s: %s", ds->ds_name, st->st_name,
			                   sh_strerror(rc));
			return 0;
		}
		if (btree_is_dirty(ds->ds_tree)) {
			pool_snap_req_fail(rq, -EIO, "%s@%s: the file system's tree is not written",
			                   ds->ds_name, st->st_name);
			return 0;
		}
	}
	uint64_t now = clock_realtime_ns();
	unsigned made = 0;
	int rc = 0;
	for (; made < rq->rq_n; made++) {
		struct pool_snap_target *st = &rq->rq_targets[made];
		struct pool_ds *ds = st->st_ds;
		struct pool_snap_rec sr = {
		    .sr_head_id = ds->ds_id,
		    .sr_id = pool_new_id(p),
		    .sr_txg = txg,
		    .sr_creation_ns = st->st_creation_ns != 0 ? st->st_creation_ns : now,
		    .sr_refer = ds->ds_used_bytes < 0 ? 0 : (uint64_t)ds->ds_used_bytes,
		    .sr_dl_id = ds->ds_dl_id,
		    .sr_guid = st->st_guid,
		    .sr_root = ds->ds_root,
		};
		while (sr.sr_guid == 0 && sh_random_bytes(&sr.sr_guid, sizeof(sr.sr_guid)) == 0)
			; /* a fresh one, never 0 (a read failure leaves 0: derived when read) */
		snprintf(sr.sr_name, sizeof(sr.sr_name), "%s", st->st_name);
		char key[POOL_MOS_KEY_MAX];
		uint32_t klen = pool_sn_key(ds->ds_id, txg, key);
		uint8_t val[POOL_SN_RECORD_BYTES];
		pool_sn_encode(&sr, val);
		rc = pool_line_add(ds, txg);
		if (rc != 0)
			break;
		rc = btree_put(p->p_mos, key, klen, val, sizeof(val), BTREE_PUT_NEW, NULL);
		if (rc != 0) {
			pool_line_remove(ds, txg);
			break;
		}
		/* S3: the head goes on from here with a new dead list */
		st->st_undo_prev_txg = ds->ds_prev_snap_txg;
		st->st_undo_prev_id = ds->ds_prev_snap_id;
		st->st_undo_dl_id = ds->ds_dl_id;
		ds->ds_prev_snap_txg = txg;
		ds->ds_prev_snap_id = sr.sr_id;
		ds->ds_dl_id = 0;
		ds->ds_record_dirty = true;
	}
	if (rc != 0) {
		/* S6: undo the ones made */
		while (made-- > 0) {
			struct pool_snap_target *st = &rq->rq_targets[made];
			struct pool_ds *ds = st->st_ds;
			char key[POOL_MOS_KEY_MAX];
			uint32_t klen = pool_sn_key(ds->ds_id, txg, key);
			(void)!btree_delete(p->p_mos, key, klen, NULL);
			pool_line_remove(ds, txg);
			ds->ds_prev_snap_txg = st->st_undo_prev_txg;
			ds->ds_prev_snap_id = st->st_undo_prev_id;
			ds->ds_dl_id = st->st_undo_dl_id;
		}
		pool_snap_req_fail(rq, rc, "the snapshots could not be recorded: %s",
		                   sh_strerror(rc));
		return 0;
	}
	for (unsigned i = 0; i < rq->rq_n; i++)
		log_info("pool %s: snapshot %s@%s taken in txg %" PRIu64, p->p_name,
		         rq->rq_targets[i].st_ds->ds_name, rq->rq_targets[i].st_name, txg);
	rq->rq_rc = 0;
	return 0;
}

/* Under p_lock: moves chain dc (of dead list dc_dl_id) to dead list to_dl, or to the free queue
 * when to_dl is 0. */
static int pool_dl_chain_move(struct pool *p, const struct pool_dl_chain *dc, uint64_t to_dl)
{
	struct pool_dl_chain moved = *dc;
	moved.dc_dl_id = to_dl;
	moved.dc_flags = to_dl == 0 ? POOL_DL_F_FREE_ENTRIES : 0;
	int rc = pool_dl_chain_put(p, &moved, to_dl == 0);
	if (rc != 0)
		return rc;
	rc = pool_dl_chain_delete(p, dc, false);
	if (rc != 0) {
		(void)!pool_dl_chain_delete(p, &moved, to_dl == 0);
		return rc;
	}
	if (to_dl == 0)
		atomic_fetch_add(&p->p_fq_queued, 1);
	return 0;
}

/* Phase 1: destroys the snapshot of rq (S4). The order makes any failure part way a leak (blocks
 * left allocated, which a check reports), never a block freed that something references: the
 * record goes first, then S's dead list joins its successor's, then the blocks only S held are
 * queued. */
static void pool_snap_do_destroy(struct pool *p, struct pool_snap_req *rq, struct pool_ds *ds,
                                 const char *name)
{
	struct pool_snap_rec *recs = NULL;
	struct pool_dl_chain *chains = NULL;
	size_t n = 0, nchains = 0, i;
	char clone[POOL_DS_NAME_MAX + 1];
	int rc = pool_sn_list(p, ds->ds_id, &recs, &n);
	if (rc != 0) {
		pool_snap_req_fail(rq, rc, "%s@%s: %s", ds->ds_name, name, sh_strerror(rc));
		return;
	}
	for (i = 0; i < n && strcmp(recs[i].sr_name, name) != 0; i++)
		;
	if (i == n) {
		pool_snap_req_fail(rq, -ENOENT, "%s@%s: no such snapshot", ds->ds_name,
		                   name);
		goto out;
	}
	const struct pool_snap_rec *s = &recs[i];
	if (pool_snap_first_clone(p, ds->ds_id, s->sr_txg, clone)) {
		pool_snap_req_fail(rq, -EBUSY, "%s@%s has dependent clones: %s", ds->ds_name,
		                   name, clone);
		goto out;
	}
	if (pool_snap_ds_release_idle(p, ds->ds_id, s->sr_txg) != 0) {
		pool_snap_req_fail(rq, -EBUSY,
		                   "%s@%s is in use (exported): take it out of the exports and "
		                   "reload them first (SIGHUP)",
		                   ds->ds_name, name);
		goto out;
	}
	uint64_t prev_txg = i > 0 ? recs[i - 1].sr_txg : ds->ds_origin_txg;
	uint64_t prev_id = i > 0 ? recs[i - 1].sr_id : 0;
	bool next_is_head = i + 1 == n;
	uint64_t next_dl = next_is_head ? ds->ds_dl_id : recs[i + 1].sr_dl_id;
	/* 1. The record, and the line's view of it. */
	char key[POOL_MOS_KEY_MAX];
	uint32_t klen = pool_sn_key(ds->ds_id, s->sr_txg, key);
	rc = btree_delete(p->p_mos, key, klen, NULL);
	if (rc != 0) {
		pool_snap_req_fail(rq, rc == -SH_ENEEDBLOCK ? -EIO : rc, "%s@%s: %s", ds->ds_name,
		                   name, sh_strerror(rc));
		goto out;
	}
	pool_line_remove(ds, s->sr_txg);
	if (next_is_head) {
		ds->ds_prev_snap_txg = prev_txg;
		ds->ds_prev_snap_id = prev_id;
		ds->ds_record_dirty = true;
	}
	rq->rq_rc = 0;
	/* 2. dl(S) joins dl(N): blocks P holds and N does not. */
	rc = pool_dl_list(p, s->sr_dl_id, 0, &chains, &nchains);
	if (rc == 0 && nchains > 0 && next_dl == 0) {
		next_dl = pool_new_id(p);
		if (next_is_head) {
			ds->ds_dl_id = next_dl;
		} else {
			struct pool_snap_rec nr = recs[i + 1];
			nr.sr_dl_id = next_dl;
			uint8_t val[POOL_SN_RECORD_BYTES];
			pool_sn_encode(&nr, val);
			klen = pool_sn_key(ds->ds_id, nr.sr_txg, key);
			rc = btree_put(p->p_mos, key, klen, val, sizeof(val), BTREE_PUT_REPLACE, NULL);
		}
	}
	for (size_t c = 0; rc == 0 && c < nchains; c++)
		rc = pool_dl_chain_move(p, &chains[c], next_dl);
	mem_free(chains);
	chains = NULL;
	/* 3. The blocks only S held: dl(N)'s buckets from P's txg on. */
	if (rc == 0)
		rc = pool_dl_list(p, next_dl, prev_txg, &chains, &nchains);
	for (size_t c = 0; rc == 0 && c < nchains; c++)
		rc = pool_dl_chain_move(p, &chains[c], 0);
	if (rc != 0)
		log_error("pool %s: snapshot %s@%s destroyed, but moving its dead lists failed (%s): "
		          "some of its blocks stay allocated",
		          p->p_name, ds->ds_name, name, sh_strerror(rc));
	else
		log_info("pool %s: snapshot %s@%s destroyed; its blocks are freed in the background",
		         p->p_name, ds->ds_name, name);
out:
	mem_free(chains);
	mem_free(recs);
}

/* Phase 1: rolls the file system of rq back to its snapshot (S8). Later snapshots are destroyed
 * first (with rq_recursive), newest first; then the file system's dead list goes (what it names,
 * the snapshot holds and the file system holds again: only the chunks are freed); the tree as it
 * was is queued for freeing like a destroyed dataset whose line ends at the snapshot (only its
 * blocks born after the snapshot's txg are freed, S2); the file system takes the snapshot's root
 * and REFER. The new tree is opened before anything changes, and the old one queued before the
 * file system lets it go, so a failure part way leaves blocks allocated (a leak a check
 * reports), never a block freed that something references. */
static void pool_snap_do_rollback(struct pool *p, struct pool_snap_req *rq)
{
	struct pool_snap_target *st = &rq->rq_targets[0];
	struct pool_ds *ds = st->st_ds;
	struct pool_snap_rec *recs = NULL;
	size_t n = 0, i;
	struct btree *tree = NULL;
	int rc = pool_sn_list(p, ds->ds_id, &recs, &n);
	if (rc != 0) {
		pool_snap_req_fail(rq, rc, "%s@%s: %s", ds->ds_name, st->st_name, sh_strerror(rc));
		return;
	}
	for (i = 0; i < n && strcmp(recs[i].sr_name, st->st_name) != 0; i++)
		;
	if (i == n) {
		pool_snap_req_fail(rq, -ENOENT, "%s@%s: no such snapshot", ds->ds_name,
		                   st->st_name);
		goto out;
	}
	bool follows = ds->ds_ops && ds->ds_ops->do_rollback; /* S10 */
	if ((ds->ds_refs > 1 && !follows) || ds->ds_destroying) {
		pool_snap_req_fail(rq, -EBUSY,
		                   "%s is in use (being received into, read by another command, or "
		                   "destroyed): try again when that is over",
		                   ds->ds_name);
		goto out;
	}
	if (i + 1 < n && !rq->rq_recursive) {
		pool_snap_req_fail(rq, -ENOTEMPTY,
		                   "%s@%s: more recent snapshots exist (the latest: %s@%s); -r "
		                   "destroys them",
		                   ds->ds_name, st->st_name, ds->ds_name, recs[n - 1].sr_name);
		goto out;
	}
	char clone[POOL_DS_NAME_MAX + 1];
	for (size_t j = i + 1; j < n; j++) {
		if (pool_snap_first_clone(p, ds->ds_id, recs[j].sr_txg, clone)) {
			pool_snap_req_fail(rq, -EBUSY, "%s@%s has dependent clones: %s", ds->ds_name,
			                   recs[j].sr_name, clone);
			goto out;
		}
	}
	const struct pool_snap_rec target = recs[i];
	struct btree_config cfg;
	pool_ds_config(ds, &cfg);
	rc = btree_open(&cfg, &target.sr_root, &tree);
	if (rc != 0) {
		pool_snap_req_fail(rq, rc, "%s@%s: its tree: %s", ds->ds_name, st->st_name,
		                   sh_strerror(rc));
		goto out;
	}
	/* 1. the later snapshots, newest first */
	for (size_t j = n; j-- > i + 1;) {
		pool_snap_do_destroy(p, rq, ds, recs[j].sr_name);
		if (rq->rq_rc != 0)
			goto out;
	}
	/* 2. the tree as it is, queued for freeing what the snapshot does not hold */
	if (!blk_ptr_same_block(&ds->ds_root, &target.sr_root) && !blk_ptr_is_hole(&ds->ds_root)) {
		struct pool_ds ghost = {
		    .ds_pool = p,
		    .ds_id = pool_new_id(p),
		    .ds_created_txg = p->p_syncing_txg,
		    .ds_record_bytes = ds->ds_record_bytes,
		    .ds_compress = pool_ds_compress(ds),
		    .ds_used_bytes = ds->ds_used_bytes,
		    .ds_root = ds->ds_root,
		    .ds_prev_snap_txg = target.sr_txg,
		};
		rc = pool_destroy_queue_record(p, &ghost, ds->ds_name);
		if (rc != 0) {
			pool_snap_req_fail(rq, rc, "%s@%s: queueing the changes for freeing: %s",
			                   ds->ds_name, st->st_name, sh_strerror(rc));
			goto out;
		}
	}
	/* 3. its dead list: the snapshot holds those blocks, and so does the file system again */
	if (pool_dl_drop_locked(p, ds) != 0)
		log_error("pool %s: %s: its dead list could not be queued after the rollback; its "
		          "chunks stay allocated",
		          p->p_name, ds->ds_name);
	ds->ds_dl_id = 0;
	/* 4. the file system becomes the snapshot; its owner's state was of the old tree: an
	 * owner that follows rollbacks lets go of it (S10), any other goes */
	if (follows) {
		ds->ds_ops->do_rollback(ds->ds_owner);
	} else {
		if (ds->ds_ops && ds->ds_ops->do_detach)
			ds->ds_ops->do_detach(ds->ds_owner);
		ds->ds_ops = NULL;
		ds->ds_owner = NULL;
	}
	btree_close(ds->ds_tree);
	ds->ds_tree = tree;
	tree = NULL;
	ds->ds_root = target.sr_root;
	ds->ds_used_bytes = (int64_t)SH_MIN(target.sr_refer, (uint64_t)INT64_MAX);
	ds->ds_prev_snap_txg = target.sr_txg;
	ds->ds_prev_snap_id = target.sr_id;
	ds->ds_record_dirty = true;
	rq->rq_rc = 0;
	log_info("pool %s: %s rolled back to %s@%s", p->p_name, ds->ds_name, ds->ds_name,
	         st->st_name);
out:
	btree_close(tree);
	mem_free(recs);
}

static int pool_snap_do_promote(struct pool *p, struct pool_snap_req *rq, uint64_t txg);

int pool_snap_sync(struct pool *p, uint64_t txg)
{
	struct pool_snap_req **link = &p->p_snap_reqs, *last = NULL;
	while (*link) {
		struct pool_snap_req *rq = *link;
		int wait = 0;
		if (rq->rq_op == POOL_SNAP_CREATE)
			wait = pool_snap_do_create(p, rq, txg);
		else if (rq->rq_op == POOL_SNAP_DESTROY)
			pool_snap_do_destroy(p, rq, rq->rq_targets[0].st_ds, rq->rq_targets[0].st_name);
		else if (rq->rq_op == POOL_SNAP_PROMOTE)
			wait = pool_snap_do_promote(p, rq, txg);
		else
			pool_snap_do_rollback(p, rq);
		if (wait) {
			last = rq;
			link = &rq->rq_next;
			continue;
		}
		rq->rq_done = true;
		rq->rq_txg = txg;
		*link = rq->rq_next;
		atomic_fetch_add(&p->p_snap_gen, 1); /* after its records changed (under the lock) */
	}
	p->p_snap_reqs_tail = last;
	return 0;
}

/* Queues rq, waits until a phase 1 has made it and that txg is durable; takes it off the queue
 * when the pool fails first. Returns rq's result, or the wait's error. */
static int pool_snap_run(struct pool *p, struct pool_snap_req *rq)
{
	pool_lock(p);
	if (pool_is_suspended(p)) {
		pool_unlock(p);
		return -EIO;
	}
	rq->rq_next = NULL;
	if (p->p_snap_reqs_tail)
		p->p_snap_reqs_tail->rq_next = rq;
	else
		p->p_snap_reqs = rq;
	p->p_snap_reqs_tail = rq;
	pool_unlock(p);
	int rc = 0;
	for (;;) {
		rc = pool_txg_wait_synced(p, 0);
		pool_lock(p);
		bool done = rq->rq_done;
		if (!done && rc != 0) {
			/* the pool failed before making it: off the queue */
			struct pool_snap_req **link = &p->p_snap_reqs, *last = NULL;
			while (*link && *link != rq) {
				last = *link;
				link = &(*link)->rq_next;
			}
			if (*link)
				*link = rq->rq_next;
			if (p->p_snap_reqs_tail == rq)
				p->p_snap_reqs_tail = last;
		}
		pool_unlock(p);
		if (done || rc != 0)
			break;
	}
	if (rc != 0)
		return rc;
	if (rq->rq_rc != 0)
		return rq->rq_rc;
	return pool_txg_wait_synced(p, rq->rq_txg);
}

int pool_snap_name_split(const char *full, char *fs, char *snap)
{
	const char *at = full ? strchr(full, '@') : NULL;
	if (!at || (size_t)(at - full) > POOL_DS_NAME_MAX)
		return -EINVAL;
	memcpy(fs, full, (size_t)(at - full));
	fs[at - full] = '\0';
	if (strlen(at + 1) > POOL_SNAP_NAME_MAX)
		return -EINVAL;
	strcpy(snap, at + 1);
	return pool_name_valid(fs, POOL_DS_NAME_MAX) && pool_snap_name_valid(snap) ? 0 : -EINVAL;
}


/* Parses and opens the targets of a request (names "fs@snap"). */
static int pool_snap_targets(struct pool *p, const char *const *names, unsigned n,
                             struct pool_snap_target *targets, char *err, size_t err_len)
{
	for (unsigned i = 0; i < n; i++) {
		char fs[POOL_DS_NAME_MAX + 1];
		struct pool_snap_target *st = &targets[i];
		if (pool_snap_name_split(names[i], fs, st->st_name) != 0) {
			pool_say(err, err_len,
			         "'%s' is not a valid snapshot name (FS@NAME, NAME of 1 to %u of "
			         "[A-Za-z0-9_.:-])",
			         names[i], POOL_SNAP_NAME_MAX);
			return -EINVAL;
		}
		for (unsigned j = 0; j < i; j++) {
			if (strcmp(targets[j].st_ds->ds_name, fs) == 0) {
				pool_say(err, err_len,
				         "'%s': one snapshot per file system per command", names[i]);
				return -EINVAL;
			}
		}
		int rc = pool_ds_open(p, fs, &st->st_ds);
		if (rc != 0) {
			pool_say(err, err_len, "%s: %s", fs,
			         rc == -ENOENT ? "no such file system" : sh_strerror(rc));
			return rc;
		}
	}
	return 0;
}

static void pool_snap_targets_close(struct pool_snap_target *targets, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		pool_ds_close(targets[i].st_ds);
}

void pool_snap_user_add(struct pool *p, struct pool_snap_user *su)
{
	pthread_mutex_lock(&p->p_snap_users_lock);
	su->su_next = p->p_snap_users;
	p->p_snap_users = su;
	pthread_mutex_unlock(&p->p_snap_users_lock);
}

void pool_snap_user_remove(struct pool *p, struct pool_snap_user *su)
{
	pthread_mutex_lock(&p->p_snap_users_lock);
	struct pool_snap_user **link = &p->p_snap_users;
	while (*link && *link != su)
		link = &(*link)->su_next;
	if (*link)
		*link = su->su_next;
	pthread_mutex_unlock(&p->p_snap_users_lock);
}

/* Before the destroy of snapshot name of head ds: dooms it (none may open it from now on) and
 * asks its users to let go of it. Returns 0 (*doomed says whether doom went on the pool's list,
 * for pool_snap_undoom), or -EBUSY with err saying why. */
static int pool_snap_doom(struct pool *p, struct pool_ds *ds, const char *name,
                          struct pool_snap_doom *doom, bool *doomed, char *err, size_t err_len)
{
	struct pool_snap_rec sr;
	*doomed = false;
	pool_lock(p);
	int rc = pool_sn_find(p, ds->ds_id, name, &sr);
	if (rc == 0) {
		doom->sd_head_id = ds->ds_id;
		doom->sd_txg = sr.sr_txg;
		doom->sd_next = p->p_snap_dooms;
		p->p_snap_dooms = doom;
		*doomed = true;
	}
	pool_unlock(p);
	if (rc != 0)
		return 0; /* the destroy itself says what is wrong */
	pthread_mutex_lock(&p->p_snap_users_lock);
	for (struct pool_snap_user *su = p->p_snap_users; rc == 0 && su; su = su->su_next)
		if (su->su_head_id == ds->ds_id)
			rc = su->su_release(su->su_arg, sr.sr_txg);
	pthread_mutex_unlock(&p->p_snap_users_lock);
	if (rc != 0)
		pool_say(err, err_len,
		         "%s@%s is being read over NFS (.zfs/snapshot) and could not be let go of: "
		         "try again",
		         ds->ds_name, name);
	return rc;
}

static void pool_snap_undoom(struct pool *p, struct pool_snap_doom *doom)
{
	pool_lock(p);
	struct pool_snap_doom **link = &p->p_snap_dooms;
	while (*link && *link != doom)
		link = &(*link)->sd_next;
	if (*link)
		*link = doom->sd_next;
	pool_unlock(p);
}

/* Before a rollback -r of head ds to snapshot name (S10): dooms every later snapshot, as a
 * destroy dooms its one. Returns 0 with *dooms_out (mem_free it after pool_snap_undoom of each
 * of the *n_out), or an error with err saying why and nothing doomed. */
static int pool_snap_doom_later(struct pool *p, struct pool_ds *ds, const char *name,
                                struct pool_snap_doom **dooms_out, size_t *n_out, char *err,
                                size_t err_len)
{
	struct pool_snap_rec *recs = NULL;
	size_t n = 0, i, ndoomed = 0;
	*dooms_out = NULL;
	*n_out = 0;
	pool_lock(p);
	int rc = pool_sn_list(p, ds->ds_id, &recs, &n);
	pool_unlock(p);
	if (rc != 0) {
		pool_say(err, err_len, "%s: its snapshots: %s", ds->ds_name, sh_strerror(rc));
		return rc;
	}
	for (i = 0; i < n && strcmp(recs[i].sr_name, name) != 0; i++)
		;
	/* none later (or no such snapshot: the rollback itself says so) */
	struct pool_snap_doom *dooms = i + 1 < n ? mem_zalloc((n - i - 1) * sizeof(*dooms)) : NULL;
	if (i + 1 < n && !dooms) {
		mem_free(recs);
		return -ENOMEM;
	}
	for (size_t j = i + 1; rc == 0 && j < n; j++) {
		bool doomed = false;
		rc = pool_snap_doom(p, ds, recs[j].sr_name, &dooms[ndoomed], &doomed, err, err_len);
		if (doomed)
			ndoomed++;
	}
	mem_free(recs);
	if (rc != 0) {
		for (size_t j = 0; j < ndoomed; j++)
			pool_snap_undoom(p, &dooms[j]);
		mem_free(dooms);
		return rc;
	}
	*dooms_out = dooms;
	*n_out = ndoomed;
	return 0;
}

uint64_t pool_snap_gen(struct pool *p)
{
	return atomic_load(&p->p_snap_gen);
}

int pool_snap_entries(struct pool *p, uint64_t head_id, struct pool_snap_entry **out,
                      size_t *n_out)
{
	struct pool_snap_rec *recs = NULL;
	size_t n = 0;
	*out = NULL;
	*n_out = 0;
	pool_lock(p);
	int rc = pool_sn_list(p, head_id, &recs, &n);
	pool_unlock(p);
	if (rc != 0 || n == 0)
		goto out;
	struct pool_snap_entry *ents = mem_alloc(n * sizeof(*ents));
	if (!ents) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		ents[i].se_txg = recs[i].sr_txg;
		ents[i].se_creation_ns = recs[i].sr_creation_ns;
		ents[i].se_guid = pool_snap_guid(p, head_id, recs[i].sr_txg, recs[i].sr_guid);
		ents[i].se_refer = recs[i].sr_refer;
		ents[i].se_root = recs[i].sr_root;
		memcpy(ents[i].se_name, recs[i].sr_name, sizeof(ents[i].se_name));
	}
	*out = ents;
	*n_out = n;
out:
	mem_free(recs);
	return rc;
}

/* A request of op on names (n of them), recursive for rollback; received: the one snapshot's
 * GUID and creation time (NULL: new ones). */
static int pool_snap_request_ext(struct pool *p, enum pool_snap_op op, const char *const *names,
                                 unsigned n, bool recursive, const struct pool_snap_entry *received,
                                 char *err, size_t err_len);

static int pool_snap_request(struct pool *p, enum pool_snap_op op, const char *const *names,
                             unsigned n, bool recursive, char *err, size_t err_len)
{
	return pool_snap_request_ext(p, op, names, n, recursive, NULL, err, err_len);
}

static int pool_snap_request_ext(struct pool *p, enum pool_snap_op op, const char *const *names,
                                 unsigned n, bool recursive, const struct pool_snap_entry *received,
                                 char *err, size_t err_len)
{
	pool_say(err, err_len, "%s", "");
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (n == 0 || n > POOL_SNAP_BATCH_MAX) {
		pool_say(err, err_len, "from 1 to %u snapshots at once", POOL_SNAP_BATCH_MAX);
		return -EINVAL;
	}
	struct pool_snap_req rq = {.rq_op = op, .rq_n = n, .rq_recursive = recursive};
	rq.rq_targets = mem_zalloc(n * sizeof(*rq.rq_targets));
	if (!rq.rq_targets)
		return -ENOMEM;
	int rc = pool_snap_targets(p, names, n, rq.rq_targets, err, err_len);
	struct pool_snap_doom doom;
	bool doomed = false;
	if (rc == 0 && received) {
		rq.rq_targets[0].st_guid = received->se_guid;
		rq.rq_targets[0].st_creation_ns = received->se_creation_ns;
	}
	if (rc == 0 && op == POOL_SNAP_DESTROY)
		rc = pool_snap_doom(p, rq.rq_targets[0].st_ds, rq.rq_targets[0].st_name, &doom,
		                    &doomed, err, err_len);
	struct pool_snap_doom *later = NULL;
	size_t nlater = 0;
	if (rc == 0 && op == POOL_SNAP_ROLLBACK && recursive)
		rc = pool_snap_doom_later(p, rq.rq_targets[0].st_ds, rq.rq_targets[0].st_name,
		                          &later, &nlater, err, err_len);
	if (rc == 0) {
		rc = pool_snap_run(p, &rq);
		if (rq.rq_done && rq.rq_rc != 0)
			pool_say(err, err_len, "%s", rq.rq_err);
		else if (rc != 0)
			pool_say(err, err_len, "%s", sh_strerror(rc));
	}
	if (doomed)
		pool_snap_undoom(p, &doom);
	for (size_t i = 0; i < nlater; i++)
		pool_snap_undoom(p, &later[i]);
	mem_free(later);
	pool_snap_targets_close(rq.rq_targets, n);
	mem_free(rq.rq_targets);
	return rc;
}

int pool_snapshot_create(struct pool *p, const char *const *names, unsigned n, char *err,
                         size_t err_len)
{
	return pool_snap_request(p, POOL_SNAP_CREATE, names, n, false, err, err_len);
}

int pool_snapshot_create_received(struct pool *p, const char *name,
                                  const struct pool_snap_entry *received, char *err, size_t err_len)
{
	return pool_snap_request_ext(p, POOL_SNAP_CREATE, &name, 1, false, received, err, err_len);
}

uint64_t pool_snap_guid(const struct pool *p, uint64_t head_id, uint64_t txg, uint64_t stored)
{
	if (stored != 0)
		return stored;
	uint64_t in[3] = {p->p_guid, head_id, txg};
	uint64_t g = sh_hash64(in, sizeof(in), 0x736e617067756964ull);
	return g != 0 ? g : 1;
}

int pool_snapshot_destroy(struct pool *p, const char *name, char *err, size_t err_len)
{
	return pool_snap_request(p, POOL_SNAP_DESTROY, &name, 1, false, err, err_len);
}

int pool_fs_rollback(struct pool *p, const char *snapshot, bool destroy_later, char *err,
                     size_t err_len)
{
	return pool_snap_request(p, POOL_SNAP_ROLLBACK, &snapshot, 1, destroy_later, err, err_len);
}

/* ---------------------------------------------------------------------------------------------
 * Listing and space */

/* What the listing needs of a head: from its loaded dataset when there is one (current), else
 * from its record (as of the last txg; nothing pending then). */
struct pool_head_view {
	char hv_name[POOL_DS_NAME_MAX + 1];
	uint64_t hv_id, hv_dl_id, hv_origin_txg;
	const struct pool_ds *hv_ds; /* loaded, or NULL */
};

/* Under p_lock: the snapshots of head hv, with their USED, into fn's calls. */
static int pool_snap_list_head(struct pool *p, const struct pool_head_view *hv,
                               struct pool_snap_info **infos, size_t *n_out, size_t *cap)
{
	struct pool_snap_rec *recs;
	size_t n;
	int rc = pool_sn_list(p, hv->hv_id, &recs, &n);
	if (rc != 0)
		return rc;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint64_t used = 0;
		if (hv->hv_ds) {
			rc = pool_snap_used(p, hv->hv_ds, recs, n, i, &used);
		} else {
			/* from its record: nothing pending */
			struct pool_ds rec_view = {.ds_origin_txg = hv->hv_origin_txg,
			                           .ds_dl_id = hv->hv_dl_id};
			rc = pool_snap_used(p, &rec_view, recs, n, i, &used);
		}
		if (rc != 0)
			break;
		struct pool_snap_info *si = pool_vec_push(infos, n_out, cap, sizeof(*si));
		if (!si) {
			rc = -ENOMEM;
			break;
		}
		memset(si, 0, sizeof(*si));
		snprintf(si->si_fs, sizeof(si->si_fs), "%s", hv->hv_name);
		snprintf(si->si_name, sizeof(si->si_name), "%s", recs[i].sr_name);
		si->si_id = recs[i].sr_id;
		si->si_txg = recs[i].sr_txg;
		si->si_creation_ns = recs[i].sr_creation_ns;
		si->si_refer_bytes = recs[i].sr_refer;
		si->si_used_bytes = used;
	}
	mem_free(recs);
	return rc;
}

/* Under p_lock: the head view of dataset record (key "ds/<name>", hostile). */
static int pool_head_view_of(struct pool *p, const void *key, uint32_t klen, const void *val,
                             uint32_t vlen, struct pool_head_view *hv)
{
	if (klen <= 3 || klen - 3 > POOL_DS_NAME_MAX)
		return -EIO;
	memset(hv, 0, sizeof(*hv));
	memcpy(hv->hv_name, (const char *)key + 3, klen - 3);
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (!ds->ds_queued && strcmp(ds->ds_name, hv->hv_name) == 0) {
			hv->hv_ds = ds;
			hv->hv_id = ds->ds_id;
			hv->hv_dl_id = ds->ds_dl_id;
			hv->hv_origin_txg = ds->ds_origin_txg;
			return 0;
		}
	}
	struct pool_ds tmp = {.ds_pool = p};
	int rc = pool_ds_record_decode(&tmp, val, vlen);
	if (rc != 0)
		return rc;
	hv->hv_id = tmp.ds_id;
	hv->hv_dl_id = tmp.ds_dl_id;
	hv->hv_origin_txg = tmp.ds_origin_txg;
	return 0;
}

static int pool_head_view_item(struct pool *p, const void *key, uint32_t klen, const void *val,
                               uint32_t vlen, void *item)
{
	return pool_head_view_of(p, key, klen, val, vlen, item);
}

/* Under p_lock: the heads (every file system, or the one named fs) into co's items. */
static int pool_heads_collect(struct pool *p, const char *fs, struct pool_collect *co)
{
	*co = (struct pool_collect){.co_pool = p, .co_size = sizeof(struct pool_head_view),
	                            .co_decode = pool_head_view_item, .co_skip_bad = true};
	char key[POOL_MOS_KEY_MAX];
	int rc;
	if (fs) {
		int klen = snprintf(key, sizeof(key), "ds/%s", fs);
		uint8_t val[POOL_MOS_VAL_MAX];
		uint32_t vlen;
		rc = btree_lookup(p->p_mos, key, (uint32_t)klen, val, sizeof(val), &vlen, NULL);
		if (rc == 0)
			(void)pool_collect_visit(co, key, (uint32_t)klen, val, vlen);
	} else {
		rc = pool_mos_range(p, "ds/", 3, "ds/", 3, false, pool_collect_visit, co);
	}
	if (rc == 0)
		rc = co->co_err;
	return rc == -SH_ENEEDBLOCK || rc == -EOVERFLOW ? -EIO : rc;
}

int pool_snapshot_list(struct pool *p, const char *fs,
                       int (*fn)(void *arg, const struct pool_snap_info *info), void *arg)
{
	if (fs && !pool_name_valid(fs, POOL_DS_NAME_MAX))
		return -EINVAL;
	struct pool_collect heads;
	struct pool_snap_info *infos = NULL;
	size_t n = 0, cap = 0;
	pool_lock(p);
	int rc = pool_heads_collect(p, fs, &heads);
	const struct pool_head_view *views = heads.co_items;
	for (size_t i = 0; rc == 0 && i < heads.co_n; i++)
		rc = pool_snap_list_head(p, &views[i], &infos, &n, &cap);
	pool_unlock(p);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = fn(arg, &infos[i]);
	mem_free(infos);
	mem_free(heads.co_items);
	return rc;
}

int pool_snap_space(struct pool *p, const struct pool_ds *loaded, uint64_t head_id,
                    uint64_t dl_id, uint64_t origin_txg, uint64_t *bytes_out)
{
	struct pool_snap_rec *recs;
	size_t n;
	*bytes_out = 0;
	int rc = pool_sn_list(p, head_id, &recs, &n);
	if (rc != 0)
		return rc;
	uint64_t sum = 0, b = 0;
	rc = pool_dl_bytes(p, dl_id, origin_txg, &b);
	sum += b;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = pool_dl_bytes(p, recs[i].sr_dl_id, origin_txg, &b);
		sum += b;
	}
	mem_free(recs);
	if (loaded)
		sum += pool_dl_pending_bytes(loaded, origin_txg);
	*bytes_out = sum;
	return rc;
}

struct pool_snap_print {
	FILE *sp_out;
	const char *sp_pool;
	bool sp_exact;
};

static int pool_snap_print_one(void *arg, const struct pool_snap_info *si)
{
	struct pool_snap_print *sp = arg;
	char name[POOL_NAME_MAX + POOL_SNAP_FULL_MAX + 2];
	snprintf(name, sizeof(name), "%s/%s@%s", sp->sp_pool, si->si_fs, si->si_name);
	char used[24], refer[24], created[40];
	time_t at = (time_t)(si->si_creation_ns / 1000000000u);
	if (sp->sp_exact) {
		snprintf(used, sizeof(used), "%" PRIu64, si->si_used_bytes);
		snprintf(refer, sizeof(refer), "%" PRIu64, si->si_refer_bytes);
		snprintf(created, sizeof(created), "%" PRIu64, (uint64_t)at);
	} else {
		struct tm tm;
		pool_fmt_bytes(used, sizeof(used), si->si_used_bytes);
		pool_fmt_bytes(refer, sizeof(refer), si->si_refer_bytes);
		if (!localtime_r(&at, &tm) ||
		    strftime(created, sizeof(created), "%a %b %e %H:%M %Y", &tm) == 0)
			snprintf(created, sizeof(created), "-");
	}
	if (fprintf(sp->sp_out, "%-40s %10s %10s  %s\n", name, used, refer, created) < 0)
		return -EIO;
	return 0;
}

int pool_snapshot_list_print(struct pool *p, const char *fs, bool exact, FILE *out)
{
	if (fprintf(out, "%-40s %10s %10s  %s\n", "NAME", "USED", "REFER", "CREATION") < 0)
		return -EIO;
	struct pool_snap_print sp = {out, p->p_name, exact};
	return pool_snapshot_list(p, fs, pool_snap_print_one, &sp);
}

/* ---------------------------------------------------------------------------------------------
 * The free queue (chains of blocks only destroyed snapshots held) */

struct pool_fq_first {
	struct pool *ff_pool;
	struct pool_dl_chain ff_chain;
	char ff_key[POOL_MOS_KEY_MAX]; /* the entry's key as found */
	uint32_t ff_klen;
	bool ff_found;
	int ff_err;
};

static bool pool_fq_first_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                uint32_t vlen)
{
	struct pool_fq_first *ff = arg;
	ff->ff_klen = (uint32_t)SH_MIN(klen, sizeof(ff->ff_key));
	memcpy(ff->ff_key, key, ff->ff_klen);
	ff->ff_err = pool_dl_chain_decode(ff->ff_pool, key, klen, val, vlen, &ff->ff_chain);
	ff->ff_found = ff->ff_err == 0;
	if (ff->ff_err != 0)
		log_error("pool %s: a queued chain's header is damaged (%.*s): its blocks stay "
		          "allocated",
		          ff->ff_pool->p_name, (int)SH_MIN(klen, 40u), (const char *)key);
	return false;
}

static bool pool_fq_count_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                uint32_t vlen)
{
	(void)key;
	(void)klen;
	(void)val;
	(void)vlen;
	(*(unsigned *)arg)++;
	return true;
}

int pool_fq_load(struct pool *p)
{
	unsigned n = 0;
	int rc = pool_mos_range(p, POOL_FQ_PREFIX, 3, POOL_FQ_PREFIX, 3, false, pool_fq_count_visit,
	                        &n);
	if (rc == 0)
		atomic_store(&p->p_fq_queued, n);
	return rc;
}

/* Under p_lock with p_walk set: chunk bp's image held in the walk's cache (*hold_out to
 * release with pool_walk_release), decoded into ck. */
int pool_dl_chunk_read(struct pool *p, const struct blk_ptr *bp, struct pool_dl_chunk *ck,
                       void **hold_out)
{
	int rc = pool_walk_load(p, bp);
	const void *img;
	if (rc == 0)
		rc = pool_walk_get(p, bp, &img, hold_out);
	if (rc != 0)
		return rc == -SH_ENEEDBLOCK ? -EIO : rc;
	rc = pool_dl_chunk_decode(p, img, bp->bp_lsize, ck);
	if (rc != 0)
		pool_walk_release(p, *hold_out);
	return rc;
}

/* Under p_lock with p_walk set: frees up to budget entries' worth of the chain dc (whole chunks,
 * newest first), updating dc. */
static int pool_fq_chain_step(struct pool *p, struct pool_dl_chain *dc, uint32_t budget)
{
	while (!blk_ptr_is_hole(&dc->dc_head) && budget > 0) {
		struct pool_dl_chunk ck;
		void *hold;
		int rc = pool_dl_chunk_read(p, &dc->dc_head, &ck, &hold);
		if (rc != 0)
			return rc;
		for (uint32_t i = 0; (dc->dc_flags & POOL_DL_F_FREE_ENTRIES) && i < ck.ck_n; i++) {
			struct blk_ptr bp;
			if (pool_dl_chunk_entry(p, &ck, i, &bp) != 0) {
				p->p_free_errors++;
				log_ratelimited(LOG_ERROR,
				                "pool %s: a dead list's entry names an impossible "
				                "block: left",
				                p->p_name);
				continue;
			}
			(void)!pool_free_block(p, NULL, &bp); /* a refusal is logged and counted */
		}
		(void)!pool_free_block(p, NULL, &dc->dc_head);
		dc->dc_head = ck.ck_prev;
		dc->dc_entries -= SH_MIN(dc->dc_entries, ck.ck_n);
		dc->dc_bytes -= SH_MIN(dc->dc_bytes, ck.ck_bytes);
		dc->dc_chunks -= SH_MIN(dc->dc_chunks, 1u);
		budget -= SH_MIN(budget, ck.ck_n);
		pool_walk_release(p, hold);
	}
	return 0;
}

bool pool_fq_step(struct pool *p)
{
	if (atomic_load(&p->p_fq_queued) == 0)
		return false;
	struct pool_walk *w = pool_walk_new_cache();
	pool_lock(p);
	p->p_destroy_step_txg = p->p_open_txg;
	struct pool_fq_first ff = {.ff_pool = p};
	int rc = pool_mos_range(p, POOL_FQ_PREFIX, 3, POOL_FQ_PREFIX, 3, false, pool_fq_first_visit,
	                        &ff);
	bool changed = false;
	if (rc != 0 || !w || pool_is_suspended(p)) {
		pool_unlock(p);
		pool_walk_free(w);
		return false;
	}
	if (!ff.ff_found && ff.ff_err == 0) {
		atomic_store(&p->p_fq_queued, 0); /* nothing left */
		pool_unlock(p);
		pool_walk_free(w);
		return false;
	}
	if (ff.ff_err == 0) {
		pool_walk_wait_writes(p);
		p->p_walk = w;
		rc = pool_fq_chain_step(p, &ff.ff_chain, p->p_opts.po_destroy_step);
		p->p_walk = NULL;
	} else {
		rc = ff.ff_err;
	}
	if (rc == 0 && !blk_ptr_is_hole(&ff.ff_chain.dc_head)) {
		rc = pool_dl_chain_put(p, &ff.ff_chain, true);
		changed = true;
	} else {
		if (rc != 0)
			log_error("pool %s: freeing a queued chain: %s; the rest of its blocks stay "
			          "allocated",
			          p->p_name, sh_strerror(rc));
		/* done, or unreadable (a check reports what stays allocated) */
		if (btree_delete(p->p_mos, ff.ff_key, ff.ff_klen, NULL) == 0) {
			atomic_fetch_sub(&p->p_fq_queued, 1);
			changed = true;
		}
		rc = 0;
	}
	pool_unlock(p);
	pool_walk_free(w);
	return changed;
}

int pool_dl_chains_all(struct pool *p, const char *prefix, struct pool_dl_chain **out,
                       size_t *n_out)
{
	uint32_t plen = (uint32_t)strlen(prefix);
	return pool_dl_collect(p, prefix, plen, prefix, plen, out, n_out);
}

unsigned pool_snap_free_queued(struct pool *p)
{
	return atomic_load(&p->p_fq_queued);
}

int pool_snap_used(struct pool *p, const struct pool_ds *head, const struct pool_snap_rec *recs,
                   size_t n, size_t i, uint64_t *used_out)
{
	uint64_t prev_txg = i > 0 ? recs[i - 1].sr_txg : head->ds_origin_txg;
	bool next_is_head = i + 1 == n;
	uint64_t next_dl = next_is_head ? head->ds_dl_id : recs[i + 1].sr_dl_id;
	int rc = pool_dl_bytes(p, next_dl, prev_txg, used_out);
	if (rc == 0 && next_is_head)
		*used_out += pool_dl_pending_bytes(head, prev_txg);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Clones */

int pool_fs_clone(struct pool *p, const char *snapshot, const char *name, char *err,
                  size_t err_len)
{
	pool_say(err, err_len, "%s", "");
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	char fs[POOL_DS_NAME_MAX + 1], snap[POOL_SNAP_NAME_MAX + 1];
	if (pool_snap_name_split(snapshot, fs, snap) != 0) {
		pool_say(err, err_len, "'%s' is not a snapshot's name (FS@NAME)", snapshot);
		return -EINVAL;
	}
	if (!pool_name_valid(name, POOL_DS_NAME_MAX)) {
		pool_say(err, err_len, "'%s' is not a valid file system name", name);
		return -EINVAL;
	}
	struct pool_ds *head = NULL;
	int rc = pool_ds_open(p, fs, &head);
	if (rc != 0) {
		pool_say(err, err_len, "%s: %s", fs,
		         rc == -ENOENT ? "no such file system" : sh_strerror(rc));
		return rc;
	}
	char key[POOL_MOS_KEY_MAX];
	int klen = snprintf(key, sizeof(key), "ds/%s", name);
	pool_lock(p);
	struct pool_snap_rec sr;
	rc = pool_is_suspended(p) ? -EIO : pool_sn_find(p, head->ds_id, snap, &sr);
	if (rc == -ENOENT)
		pool_say(err, err_len, "%s: no such snapshot", snapshot);
	if (rc == 0) {
		/* the clone's record: the snapshot's tree and REFER, its line starting there */
		struct pool_ds clone = {
		    .ds_pool = p,
		    .ds_id = pool_new_id(p),
		    .ds_created_txg = p->p_open_txg,
		    .ds_record_bytes = head->ds_record_bytes,
		    .ds_compress = pool_ds_compress(head),
		    .ds_used_bytes = (int64_t)SH_MIN(sr.sr_refer, (uint64_t)INT64_MAX),
		    .ds_root = sr.sr_root,
		    .ds_prev_snap_txg = sr.sr_txg,
		    .ds_prev_snap_id = sr.sr_id,
		    .ds_origin_head_id = head->ds_id,
		    .ds_origin_txg = sr.sr_txg,
		};
		uint8_t rec[POOL_MOS_VAL_MAX];
		int reclen = pool_ds_record_encode(&clone, rec, sizeof(rec));
		rc = reclen < 0 ? reclen
		                : btree_put(p->p_mos, key, (uint32_t)klen, rec, (uint32_t)reclen,
		                            BTREE_PUT_NEW, NULL);
		if (rc == -EEXIST)
			pool_say(err, err_len, "%s exists", name);
		else if (rc != 0)
			pool_say(err, err_len, "%s", sh_strerror(rc == -SH_ENEEDBLOCK ? -EIO : rc));
	}
	pool_unlock(p);
	pool_ds_close(head);
	if (rc == 0) {
		rc = pool_txg_wait_synced(p, 0);
		if (rc == 0)
			log_info("pool %s: %s cloned from %s", p->p_name, name, snapshot);
	}
	return rc == -SH_ENEEDBLOCK ? -EIO : rc;
}

/* Under p_lock: chain dc of a dead list goes to the free queue with its entries kept (something
 * else holds them: a clone's origin, S2, or the chains a promote copied them to, P3); only its
 * chunks are freed. */
static int pool_dl_chain_retire(struct pool *p, const struct pool_dl_chain *dc)
{
	struct pool_dl_chain queued = *dc;
	queued.dc_flags = 0;
	int rc = pool_dl_chain_put(p, &queued, true);
	if (rc != 0)
		return rc;
	rc = pool_dl_chain_delete(p, dc, false);
	if (rc != 0) {
		(void)!pool_dl_chain_delete(p, &queued, true);
		return rc;
	}
	atomic_fetch_add(&p->p_fq_queued, 1);
	return 0;
}

int pool_dl_drop_locked(struct pool *p, struct pool_ds *ds)
{
	struct pool_dl_chain *chains = NULL;
	size_t n = 0;
	int rc = pool_dl_list(p, ds->ds_dl_id, 0, &chains, &n);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = pool_dl_chain_retire(p, &chains[i]); /* an origin holds the entries (S2) */
	mem_free(chains);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Promote (S9; P1-P4 in the theory) */

/* A promote of clone C (rq_targets[0]) whose origin is H's snapshot Sk (H: rq_targets[1]). */
struct pool_promote {
	struct pool_ds *pm_clone, *pm_origin;
	struct pool_snap_rec *pm_orecs, *pm_crecs; /* H's and C's snapshots, ascending */
	size_t pm_on, pm_cn;
	size_t pm_moved; /* pm_orecs[0 .. pm_moved) move to C; Sk is the last */
	uint64_t pm_txg; /* Sk's */
	/* The new lines (P4), of which only ds_snap_txgs is used; C's first pm_nbounds boundaries
	 * are those up to Sk's txg, by which P3 re-keys. */
	struct pool_ds pm_cline, pm_oline;
	uint32_t pm_nbounds;
	/* Other file systems whose origin is a snapshot that moves (P2), by name. */
	char (*pm_clones)[POOL_DS_NAME_MAX + 1];
	size_t pm_nclones, pm_clones_cap;
	int pm_clones_err;
};

static void pool_promote_fini(struct pool_promote *pm)
{
	mem_free(pm->pm_orecs);
	mem_free(pm->pm_crecs);
	mem_free(pm->pm_cline.ds_snap_txgs);
	mem_free(pm->pm_oline.ds_snap_txgs);
	mem_free(pm->pm_clones);
}

/* Phase 1: rq's promote checked (S9's refusals, P1's names, P4's snapshots let go of) and its
 * snapshot lists into *pm. False when it is refused: rq failed, saying why. */
static bool pool_promote_check(struct pool *p, struct pool_snap_req *rq, struct pool_promote *pm)
{
	struct pool_ds *c = rq->rq_targets[0].st_ds, *h = rq->rq_targets[1].st_ds;
	pm->pm_clone = c;
	pm->pm_origin = h;
	if (c->ds_origin_head_id == 0) {
		pool_snap_req_fail(rq, -EINVAL, "%s is not a clone", c->ds_name);
		return false;
	}
	if (c->ds_origin_head_id != h->ds_id) {
		pool_snap_req_fail(rq, -EAGAIN, "%s: its origin changed meanwhile: try again",
		                   c->ds_name);
		return false;
	}
	if (c->ds_refs > 1 || c->ds_destroying || h->ds_refs > 1 || h->ds_destroying) {
		const struct pool_ds *busy = c->ds_refs > 1 || c->ds_destroying ? c : h;
		pool_snap_req_fail(rq, -EBUSY,
		                   "%s is in use (exported, or being destroyed): take it out of the "
		                   "exports and reload them first (SIGHUP)",
		                   busy->ds_name);
		return false;
	}
	int rc = pool_sn_list(p, h->ds_id, &pm->pm_orecs, &pm->pm_on);
	if (rc == 0)
		rc = pool_sn_list(p, c->ds_id, &pm->pm_crecs, &pm->pm_cn);
	if (rc != 0) {
		pool_snap_req_fail(rq, rc, "%s: %s", c->ds_name, sh_strerror(rc));
		return false;
	}
	size_t k = 0;
	while (k < pm->pm_on && pm->pm_orecs[k].sr_txg != c->ds_origin_txg)
		k++;
	if (k == pm->pm_on) {
		pool_snap_req_fail(rq, -EIO, "%s: its origin (txg %" PRIu64 ") is not a snapshot of %s",
		                   c->ds_name, c->ds_origin_txg, h->ds_name);
		return false;
	}
	pm->pm_moved = k + 1;
	pm->pm_txg = c->ds_origin_txg;
	for (size_t i = 0; i < pm->pm_moved; i++) {
		const char *name = pm->pm_orecs[i].sr_name;
		for (size_t j = 0; j < pm->pm_cn; j++) {
			if (strcmp(name, pm->pm_crecs[j].sr_name) == 0) {
				pool_snap_req_fail(rq, -EEXIST,
				                   "%s@%s of its origin conflicts with %s@%s: destroy "
				                   "one of them first",
				                   h->ds_name, name, c->ds_name, name);
				return false;
			}
		}
		if (pool_snap_ds_release_idle(p, h->ds_id, pm->pm_orecs[i].sr_txg) != 0) {
			pool_snap_req_fail(rq, -EBUSY,
			                   "%s@%s is in use (exported): take it out of the exports and "
			                   "reload them first (SIGHUP)",
			                   h->ds_name, name);
			return false;
		}
	}
	return true;
}

/* Phase 1: the lines both will have (P4) into pm_cline and pm_oline. 0 or -ENOMEM. */
static int pool_promote_lines(struct pool_promote *pm)
{
	const struct pool_ds *h = pm->pm_origin;
	int rc = 0;
	if (h->ds_origin_txg != 0)
		rc = pool_line_add(&pm->pm_cline, h->ds_origin_txg);
	for (size_t i = 0; rc == 0 && i < pm->pm_moved; i++)
		rc = pool_line_add(&pm->pm_cline, pm->pm_orecs[i].sr_txg);
	pm->pm_nbounds = pm->pm_cline.ds_nsnap_txgs;
	for (size_t i = 0; rc == 0 && i < pm->pm_cn; i++)
		rc = pool_line_add(&pm->pm_cline, pm->pm_crecs[i].sr_txg);
	if (rc == 0)
		rc = pool_line_add(&pm->pm_oline, pm->pm_txg);
	for (size_t i = pm->pm_moved; rc == 0 && i < pm->pm_on; i++)
		rc = pool_line_add(&pm->pm_oline, pm->pm_orecs[i].sr_txg);
	return rc;
}

/* Phase 1 (P3): the chains of C's dead lists (its snapshots' and its own) keyed below Sk's txg,
 * grouped by dead list, into *out (mem_free). Returns 1 when one of them was written in this txg
 * (not on disk yet: the promote waits for the next), else 0 or an error. */
static int pool_promote_low_chains(struct pool *p, const struct pool_promote *pm, uint64_t txg,
                                   struct pool_dl_chain **out, size_t *n_out)
{
	struct pool_dl_chain *low = NULL;
	size_t n = 0, cap = 0;
	int rc = pm->pm_clone->ds_nkills > 0 ? 1 : 0;
	for (size_t i = 0; rc == 0 && i <= pm->pm_cn; i++) {
		uint64_t dl = i < pm->pm_cn ? pm->pm_crecs[i].sr_dl_id : pm->pm_clone->ds_dl_id;
		struct pool_dl_chain *ch;
		size_t nch;
		rc = pool_dl_list(p, dl, 0, &ch, &nch);
		for (size_t j = 0; rc == 0 && j < nch && ch[j].dc_bucket < pm->pm_txg; j++) {
			struct pool_dl_chain *slot = NULL;
			if (ch[j].dc_head.bp_birth_txg >= txg)
				rc = 1;
			else if (!(slot = pool_vec_push(&low, &n, &cap, sizeof(*slot))))
				rc = -ENOMEM;
			else
				*slot = ch[j];
		}
		mem_free(ch);
	}
	if (rc != 0) {
		mem_free(low);
		return rc;
	}
	*out = low;
	*n_out = n;
	return 0;
}

/* P3's work on one dead list: the entries of its chains keyed below Sk, by the bucket of the new
 * line each goes to (bucket i: the boundary rk_bounds[i - 1], bucket 0: key 0), each bucket's
 * new chain with the entries not written yet (a chunk at most), and every chunk written. */
struct pool_rekey_bucket {
	struct pool_dl_chain rb_chain; /* dc_seq 0: not started */
	struct blk_ptr *rb_bps;        /* POOL_DL_CHUNK_MAX, allocated on first use */
	uint32_t rb_n;
};

struct pool_rekey {
	struct pool *rk_pool;
	uint64_t rk_dl_id;
	const uint64_t *rk_bounds;
	uint32_t rk_nbounds;
	struct pool_walk *rk_walk;            /* the chunks are read through its cache */
	struct pool_rekey_bucket *rk_buckets; /* rk_nbounds + 1 */
	struct blk_ptr *rk_written;           /* freed again when the dead list cannot change */
	size_t rk_nwritten, rk_written_cap;
};

/* Phase 1: bucket b's pending entries as one chunk on its chain, started if need be. */
static int pool_rekey_write(struct pool_rekey *rk, uint32_t b)
{
	struct pool_rekey_bucket *rb = &rk->rk_buckets[b];
	if (rb->rb_n == 0)
		return 0;
	struct blk_ptr *written = pool_vec_push(&rk->rk_written, &rk->rk_nwritten,
	                                        &rk->rk_written_cap, sizeof(*written));
	if (!written)
		return -ENOMEM;
	if (rb->rb_chain.dc_seq == 0) {
		rb->rb_chain.dc_dl_id = rk->rk_dl_id;
		rb->rb_chain.dc_bucket = b == 0 ? 0 : rk->rk_bounds[b - 1];
		rb->rb_chain.dc_seq = pool_new_id(rk->rk_pool);
	}
	int rc = pool_dl_write_chunk(rk->rk_pool, &rb->rb_chain, rb->rb_bps, rb->rb_n);
	if (rc != 0) {
		rk->rk_nwritten--;
		return rc;
	}
	*written = rb->rb_chain.dc_head;
	rb->rb_n = 0;
	return 0;
}

static int pool_rekey_add(struct pool_rekey *rk, const struct blk_ptr *bp)
{
	uint32_t b = pool_bucket_index(rk->rk_bounds, rk->rk_nbounds, bp->bp_birth_txg);
	struct pool_rekey_bucket *rb = &rk->rk_buckets[b];
	if (!rb->rb_bps) {
		rb->rb_bps = mem_alloc(POOL_DL_CHUNK_MAX * sizeof(*rb->rb_bps));
		if (!rb->rb_bps)
			return -ENOMEM;
	}
	rb->rb_bps[rb->rb_n++] = *bp;
	return rb->rb_n == POOL_DL_CHUNK_MAX ? pool_rekey_write(rk, b) : 0;
}

/* Under p_lock: every entry of chain dc into rk's buckets. */
static int pool_rekey_chain(struct pool_rekey *rk, const struct pool_dl_chain *dc)
{
	struct pool *p = rk->rk_pool;
	struct blk_ptr at = dc->dc_head;
	int rc = 0;
	while (rc == 0 && !blk_ptr_is_hole(&at)) {
		struct pool_dl_chunk ck;
		void *hold;
		/* The walk's cache for this read only: set, it would route the metadata tree's
		 * reads through it too (pool_mos_range), and the entries change that tree. */
		struct pool_walk *saved = p->p_walk;
		p->p_walk = rk->rk_walk;
		rc = pool_dl_chunk_read(p, &at, &ck, &hold);
		p->p_walk = saved;
		if (rc != 0)
			break;
		for (uint32_t i = 0; rc == 0 && i < ck.ck_n; i++) {
			struct blk_ptr bp;
			rc = pool_dl_chunk_entry(p, &ck, i, &bp);
			if (rc == 0)
				rc = pool_rekey_add(rk, &bp);
		}
		at = ck.ck_prev;
		pool_walk_release(p, hold);
	}
	return rc;
}

/* Phase 1 (P3): dead list dl_id's chains low (n, keyed below Sk) re-keyed by the
 * new line's first nbounds boundaries: their entries read and written into new chains, then the
 * old chains queued with their entries kept, then the new ones recorded. A failure before the
 * old chains go frees what was written and leaves the dead list as it was; keys below Sk's are
 * valid on either line, so a dead list done stays done when a later one fails. A failure after
 * leaves entries on no chain: blocks that stay allocated (a leak a check reports), never one
 * listed twice. */
static int pool_promote_rekey(struct pool *p, struct pool_walk *w, uint64_t dl_id,
                              const struct pool_dl_chain *low, size_t n, const uint64_t *bounds,
                              uint32_t nbounds)
{
	struct pool_rekey rk = {.rk_pool = p, .rk_dl_id = dl_id, .rk_bounds = bounds,
	                        .rk_nbounds = nbounds, .rk_walk = w};
	rk.rk_buckets = mem_zalloc((nbounds + 1u) * sizeof(*rk.rk_buckets));
	int rc = rk.rk_buckets ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = pool_rekey_chain(&rk, &low[i]);
	for (uint32_t b = 0; rc == 0 && b <= nbounds; b++)
		rc = pool_rekey_write(&rk, b);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = pool_dl_chain_retire(p, &low[i]);
	if (rc != 0) {
		for (size_t i = 0; i < rk.rk_nwritten; i++)
			(void)!pool_free_block(p, NULL, &rk.rk_written[i]); /* a refusal is logged */
	}
	for (uint32_t b = 0; rc == 0 && b <= nbounds; b++)
		if (rk.rk_buckets[b].rb_chain.dc_seq != 0)
			rc = pool_dl_chain_put(p, &rk.rk_buckets[b].rb_chain, false);
	for (uint32_t b = 0; rk.rk_buckets && b <= nbounds; b++)
		mem_free(rk.rk_buckets[b].rb_bps);
	mem_free(rk.rk_buckets);
	mem_free(rk.rk_written);
	return rc;
}

/* Phase 1 (P3): every low chain of C's dead lists re-keyed, a dead list at a time, through a
 * walk's cache of its own. */
static int pool_promote_rekey_all(struct pool *p, const struct pool_promote *pm,
                                  const struct pool_dl_chain *low, size_t n)
{
	if (n == 0)
		return 0;
	struct pool_walk *w = pool_walk_new_cache();
	if (!w)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0, j; rc == 0 && i < n; i = j) {
		for (j = i; j < n && low[j].dc_dl_id == low[i].dc_dl_id; j++)
			;
		rc = pool_promote_rekey(p, w, low[i].dc_dl_id, low + i, j - i,
		                        pm->pm_cline.ds_snap_txgs, pm->pm_nbounds);
	}
	pool_walk_free(w);
	return rc;
}

static bool pool_promote_clones_visit(void *arg, const void *key, uint32_t klen, const void *val,
                                      uint32_t vlen)
{
	struct pool_promote *pm = arg;
	uint64_t head = 0, txg = 0;
	if (!pool_ds_record_origin(val, vlen, &head, &txg) || head != pm->pm_origin->ds_id ||
	    txg > pm->pm_txg || klen - 3 > POOL_DS_NAME_MAX)
		return true;
	char(*name)[POOL_DS_NAME_MAX + 1] =
	    pool_vec_push(&pm->pm_clones, &pm->pm_nclones, &pm->pm_clones_cap, sizeof(*name));
	if (!name) {
		pm->pm_clones_err = -ENOMEM;
		return false;
	}
	memcpy(*name, (const char *)key + 3, klen - 3);
	(*name)[klen - 3] = '\0';
	if (strcmp(*name, pm->pm_clone->ds_name) == 0)
		pm->pm_nclones--; /* C itself: its origin is set apart */
	return true;
}

/* Phase 1 (P2): the names of the other file systems whose origin is a snapshot that moves. */
static int pool_promote_clones_find(struct pool *p, struct pool_promote *pm)
{
	int rc = pool_mos_range(p, "ds/", 3, "ds/", 3, false, pool_promote_clones_visit, pm);
	return rc != 0 ? rc : pm->pm_clones_err;
}

/* Phase 1 (P2): the file system called name (not loaded) names C as its origin, in its record. */
static int pool_promote_clone_record(struct pool *p, const char *name, uint64_t clone_id)
{
	char key[POOL_MOS_KEY_MAX];
	int klen = snprintf(key, sizeof(key), "ds/%s", name);
	uint8_t rec[POOL_MOS_VAL_MAX];
	uint32_t vlen;
	struct pool_ds tmp = {.ds_pool = p};
	int rc = btree_lookup(p->p_mos, key, (uint32_t)klen, rec, sizeof(rec), &vlen, NULL);
	if (rc == 0)
		rc = pool_ds_record_decode(&tmp, rec, vlen);
	if (rc == 0) {
		tmp.ds_origin_head_id = clone_id;
		int reclen = pool_ds_record_encode(&tmp, rec, sizeof(rec));
		rc = reclen < 0 ? reclen
		                : btree_put(p->p_mos, key, (uint32_t)klen, rec, (uint32_t)reclen,
		                            BTREE_PUT_REPLACE, NULL);
	}
	return rc == -SH_ENEEDBLOCK || rc == -EOVERFLOW ? -EIO : rc;
}

/* Phase 1 (P2): every other file system whose origin moves names C: a loaded one (a clone being
 * destroyed too) in memory, its record written with the others at the end of phase 1; the rest
 * in their records. A failure is logged: the record then names a snapshot H no longer has. */
static void pool_promote_clones_set(struct pool *p, const struct pool_promote *pm)
{
	const struct pool_ds *c = pm->pm_clone, *h = pm->pm_origin;
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (ds != c && !ds->ds_snapshot && ds->ds_origin_head_id == h->ds_id &&
		    ds->ds_origin_txg <= pm->pm_txg) {
			ds->ds_origin_head_id = c->ds_id;
			ds->ds_record_dirty = true;
		}
	}
	for (size_t i = 0; i < pm->pm_nclones; i++) {
		bool loaded = false;
		for (const struct pool_ds *ds = p->p_datasets; ds && !loaded; ds = ds->ds_next)
			loaded = !ds->ds_queued && !ds->ds_snapshot &&
			         strcmp(ds->ds_name, pm->pm_clones[i]) == 0;
		int rc = loaded ? 0 : pool_promote_clone_record(p, pm->pm_clones[i], c->ds_id);
		if (rc != 0)
			log_error("pool %s: %s: its origin could not be moved to %s: %s", p->p_name,
			          pm->pm_clones[i], c->ds_name, sh_strerror(rc));
	}
}

/* Under p_lock: snapshot record txg of head from_id becomes head to_id's, as it is but for a
 * GUID derived from its head (a record made before GUIDs were kept): stored, so that it stays
 * the snapshot's GUID (an incremental send matches snapshots by it). */
static int pool_sn_move(struct pool *p, uint64_t from_id, uint64_t to_id, uint64_t txg)
{
	char from[POOL_MOS_KEY_MAX], to[POOL_MOS_KEY_MAX];
	uint32_t flen = pool_sn_key(from_id, txg, from), tlen = pool_sn_key(to_id, txg, to), vlen;
	uint8_t val[POOL_MOS_VAL_MAX];
	struct pool_snap_rec sr;
	int rc = btree_lookup(p->p_mos, from, flen, val, sizeof(val), &vlen, NULL);
	if (rc == 0)
		rc = pool_sn_decode(p, from, flen, val, vlen, &sr);
	if (rc == 0 && sr.sr_guid == 0) {
		sr.sr_guid = pool_snap_guid(p, from_id, txg, 0);
		pool_sn_encode(&sr, val);
	}
	if (rc == 0)
		rc = btree_put(p->p_mos, to, tlen, val, vlen, BTREE_PUT_NEW, NULL);
	if (rc == 0) {
		rc = btree_delete(p->p_mos, from, flen, NULL);
		if (rc != 0)
			(void)!btree_delete(p->p_mos, to, tlen, NULL);
	}
	return rc == -SH_ENEEDBLOCK || rc == -EOVERFLOW ? -EIO : rc;
}

/* Phase 1 (P1): H's snapshots up to Sk become C's; all or none. */
static int pool_promote_records(struct pool *p, const struct pool_promote *pm)
{
	uint64_t h = pm->pm_origin->ds_id, c = pm->pm_clone->ds_id;
	size_t moved = 0;
	int rc = 0;
	for (; rc == 0 && moved < pm->pm_moved; moved++) {
		rc = pool_sn_move(p, h, c, pm->pm_orecs[moved].sr_txg);
		if (rc != 0)
			break;
	}
	while (rc != 0 && moved-- > 0) {
		if (pool_sn_move(p, c, h, pm->pm_orecs[moved].sr_txg) != 0)
			log_error("pool %s: %s@%s: moving it back to %s failed: its record names %s",
			          p->p_name, pm->pm_clone->ds_name, pm->pm_orecs[moved].sr_name,
			          pm->pm_origin->ds_name, pm->pm_clone->ds_name);
	}
	return rc;
}

/* Swaps the line (ds_snap_txgs) of ds and of line. */
static void pool_line_swap(struct pool_ds *ds, struct pool_ds *line)
{
	uint64_t *txgs = ds->ds_snap_txgs;
	uint32_t n = ds->ds_nsnap_txgs, cap = ds->ds_snap_txgs_cap;
	ds->ds_snap_txgs = line->ds_snap_txgs;
	ds->ds_nsnap_txgs = line->ds_nsnap_txgs;
	ds->ds_snap_txgs_cap = line->ds_snap_txgs_cap;
	line->ds_snap_txgs = txgs;
	line->ds_nsnap_txgs = n;
	line->ds_snap_txgs_cap = cap;
}

/* Phase 1: promotes the clone of rq (S9): checks, builds the new lines, re-keys C's dead lists
 * (P3), moves the records (P1), then the origins (P2) and the lines (P4), which cannot fail.
 * Returns 1 when it must wait for the next txg (P3), else 0 with rq_rc set. */
static int pool_snap_do_promote(struct pool *p, struct pool_snap_req *rq, uint64_t txg)
{
	struct pool_promote pm = {0};
	struct pool_dl_chain *low = NULL;
	size_t nlow = 0;
	int wait = 0;
	if (!pool_promote_check(p, rq, &pm))
		goto out;
	struct pool_ds *c = pm.pm_clone, *h = pm.pm_origin;
	int rc = pool_promote_lines(&pm);
	if (rc == 0)
		rc = pool_promote_clones_find(p, &pm);
	if (rc == 0 && pm.pm_nbounds > 1) /* else every old block stays in bucket 0 */
		rc = pool_promote_low_chains(p, &pm, txg, &low, &nlow);
	if (rc == 1) {
		wait = 1;
		goto out;
	}
	if (rc == 0) {
		rc = pool_promote_rekey_all(p, &pm, low, nlow);
		if (rc != 0)
			log_error("pool %s: promoting %s: re-keying its dead lists: %s", p->p_name,
			          c->ds_name, sh_strerror(rc));
	}
	if (rc == 0)
		rc = pool_promote_records(p, &pm);
	if (rc != 0) {
		pool_snap_req_fail(rq, rc, "%s: %s", c->ds_name, sh_strerror(rc));
		goto out;
	}
	pool_promote_clones_set(p, &pm);
	c->ds_origin_head_id = h->ds_origin_head_id;
	c->ds_origin_txg = h->ds_origin_txg;
	h->ds_origin_head_id = c->ds_id;
	h->ds_origin_txg = pm.pm_txg;
	c->ds_record_dirty = true;
	h->ds_record_dirty = true;
	pool_line_swap(c, &pm.pm_cline);
	pool_line_swap(h, &pm.pm_oline);
	rq->rq_rc = 0;
	log_info("pool %s: %s promoted: %zu snapshot%s of %s moved to it (%zu chains re-keyed); %s "
	         "is now a clone of %s@%s",
	         p->p_name, c->ds_name, pm.pm_moved, pm.pm_moved == 1 ? "" : "s", h->ds_name, nlow,
	         h->ds_name, c->ds_name, pm.pm_orecs[pm.pm_moved - 1].sr_name);
out:
	mem_free(low);
	pool_promote_fini(&pm);
	return wait;
}

int pool_fs_promote(struct pool *p, const char *clone, char *err, size_t err_len)
{
	pool_say(err, err_len, "%s", "");
	if (p->p_read_only)
		return -EROFS; /* imported read only: nothing may change */
	if (!pool_name_valid(clone, POOL_DS_NAME_MAX)) {
		pool_say(err, err_len, "'%s' is not a valid file system name", clone);
		return -EINVAL;
	}
	/* the clone, then its origin's file system, held until the request is made */
	struct pool_snap_target targets[2];
	memset(targets, 0, sizeof(targets));
	int rc = pool_ds_open(p, clone, &targets[0].st_ds);
	if (rc != 0) {
		pool_say(err, err_len, "%s: %s", clone,
		         rc == -ENOENT ? "no such file system" : sh_strerror(rc));
		return rc;
	}
	pool_lock(p);
	uint64_t origin_id = targets[0].st_ds->ds_origin_head_id;
	rc = origin_id == 0 ? -EINVAL : pool_ds_hold_by_id(p, origin_id, &targets[1].st_ds);
	pool_unlock(p);
	if (rc == -EINVAL)
		pool_say(err, err_len, "%s is not a clone", clone);
	else if (rc != 0)
		pool_say(err, err_len, "%s: its origin: %s", clone, sh_strerror(rc));
	if (rc == 0) {
		struct pool_snap_req rq = {.rq_op = POOL_SNAP_PROMOTE, .rq_targets = targets,
		                           .rq_n = 2};
		rc = pool_snap_run(p, &rq);
		if (rq.rq_done && rq.rq_rc != 0)
			pool_say(err, err_len, "%s", rq.rq_err);
		else if (rc != 0)
			pool_say(err, err_len, "%s", sh_strerror(rc));
	}
	pool_snap_targets_close(targets, 2);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Snapshots opened read only (an export of POOL/FS@SNAP; later .zfs/snapshot) */

bool pool_ds_is_snapshot(const struct pool_ds *ds)
{
	return ds->ds_snapshot;
}

int pool_snap_ds_hold(struct pool *p, const char *full, struct pool_ds **ds_out)
{
	char fs[POOL_DS_NAME_MAX + 1], snap[POOL_SNAP_NAME_MAX + 1];
	if (pool_snap_name_split(full, fs, snap) != 0)
		return -EINVAL;
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (ds->ds_snapshot && strcmp(ds->ds_name, full) == 0) {
			ds->ds_refs++;
			*ds_out = ds;
			return 0;
		}
	}
	/* its file system's record, then its own */
	char key[POOL_MOS_KEY_MAX];
	int klen = snprintf(key, sizeof(key), "ds/%s", fs);
	uint8_t rec[POOL_MOS_VAL_MAX];
	uint32_t vlen;
	int rc = btree_lookup(p->p_mos, key, (uint32_t)klen, rec, sizeof(rec), &vlen, NULL);
	if (rc != 0)
		return rc == -ENOENT ? rc : -EIO;
	struct pool_ds head = {.ds_pool = p};
	if (pool_ds_record_decode(&head, rec, vlen) != 0)
		return -EIO;
	struct pool_snap_rec sr;
	rc = pool_sn_find(p, head.ds_id, snap, &sr);
	if (rc != 0)
		return rc;
	for (const struct pool_snap_doom *d = p->p_snap_dooms; d; d = d->sd_next)
		if (d->sd_head_id == head.ds_id && d->sd_txg == sr.sr_txg)
			return -ENOENT; /* being destroyed: as good as gone */
	struct pool_ds *ds = mem_zalloc(sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->ds_pool = p;
	snprintf(ds->ds_name, sizeof(ds->ds_name), "%s", full);
	ds->ds_id = sr.sr_id;
	ds->ds_created_txg = sr.sr_txg;
	ds->ds_record_bytes = head.ds_record_bytes;
	ds->ds_compress = head.ds_compress;
	ds->ds_used_bytes = (int64_t)SH_MIN(sr.sr_refer, (uint64_t)INT64_MAX);
	ds->ds_root = sr.sr_root;
	ds->ds_snapshot = true;
	ds->ds_snap_head_id = head.ds_id;
	ds->ds_snap_txg = sr.sr_txg;
	struct btree_config cfg;
	pool_ds_config(ds, &cfg);
	rc = btree_open(&cfg, &ds->ds_root, &ds->ds_tree);
	if (rc != 0) {
		mem_free(ds);
		return rc == -ENOMEM ? rc : -EIO;
	}
	ds->ds_next = p->p_datasets;
	p->p_datasets = ds;
	ds->ds_refs = 1;
	*ds_out = ds;
	return 0;
}

int pool_snap_ds_release_idle(struct pool *p, uint64_t head_id, uint64_t txg)
{
	for (struct pool_ds *ds = p->p_datasets; ds; ds = ds->ds_next) {
		if (!ds->ds_snapshot || ds->ds_snap_head_id != head_id ||
		    (txg != 0 && ds->ds_snap_txg != txg))
			continue;
		if (ds->ds_refs > 0)
			return -EBUSY;
	}
	struct pool_ds *ds = p->p_datasets;
	while (ds) {
		struct pool_ds *next = ds->ds_next;
		if (ds->ds_snapshot && ds->ds_snap_head_id == head_id &&
		    (txg == 0 || ds->ds_snap_txg == txg))
			pool_ds_unload_locked(p, ds);
		ds = next;
	}
	return 0;
}
