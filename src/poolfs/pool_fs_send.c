/* pool_fs_send.c: shale send and shale receive: a snapshot of a pool file system as a stream of
 * bytes, full or relative to an earlier snapshot, and that stream applied to a file system of
 * another pool (or the same one), as zfs send and zfs receive.
 *
 * ---- Model ----
 * A file system is its dataset's tree (zpl.c's key table) plus the data blocks its extent
 * entries name. A stream carries tree entries: PUT (a key and its value, and for an extent the
 * block's data) and DEL (a key). A full stream PUTs every entry of the snapshot; an incremental
 * one, from snapshot A to a later B of the same file system, PUTs the entries of B that A does
 * not hold with the same value and DELs the keys of A that B does not hold, found by walking both
 * trees in key order side by side (every entry is read; an extent whose block pointer is the
 * same is not sent). The receiver applies them to its copy of A and so holds B, entry for entry;
 * the blocks are its own (written anew, born in its txgs), so nothing of the sender's pointers
 * crosses. Object ids, generations, directory cookies, times and every other attribute are in
 * the entries, so the received file system is the sender's: the same handles' objects, the same
 * bytes.
 *
 * A snapshot has a GUID (pool_snap.c), kept by a receive: an incremental stream names its base's
 * and the receiver refuses it unless its own latest snapshot has that GUID and the file system
 * has not changed since (its root is the snapshot's); -F rolls it back to that snapshot first
 * (and destroys later ones), as zfs receive -F.
 *
 * Receiving. The dataset is marked receiving (durable) before its first change, and the
 * receiver takes over as the dataset's owner (pool_ds_take_owner: no export may hold it). Each
 * record is applied in one locked section, on this thread: the old value's block freed
 * (pool_ds_free: to the dead list when a snapshot holds it), the new value put; an extent's
 * value goes in as "being written" (all zero) and its data waits in the pending list, which
 * do_sync writes with pool_sync_write and puts the pointer of, as zpl does with its dirty
 * buffers. A block's logical bytes are read from the stream into a sector-aligned buffer of
 * their own (the record's checksum taken over its parts), which the pending block takes and the
 * cache takes from it at the sync; a block stored uncompressed is also written from it (the
 * write holds the cached buffer until it is done): its bytes are not copied on the way. The
 * pending bytes count as dirty data, so the throttle bounds them. At the end: the
 * counts of the END record checked, a txg synced (nothing pending), the stream's snapshot taken
 * with its GUID and creation time, the mark cleared, the owner let go. Any failure (a record
 * that does not parse or whose checksum is wrong, a cut-off stream, a full pool) stops it, and
 * the file system is put back as it was (pool_recv_undo: rolled back to its latest snapshot, the
 * base; or destroyed when the receive created it). A crash at any point leaves the mark, and
 * import does the same (pool_recv.c). So a receive is all or nothing.
 *
 * ---- Stream format (integers little-endian) ----
 * A sequence of records, each:
 *   offset  size  field
 *        0     4  magic 0x53524853 ("SHRS")
 *        4     2  type: 1 BEGIN, 2 PUT, 3 DEL, 4 END
 *        6     2  flags: 0, or for a PUT in a stream of version 2, PFS_REC_F_STORED (1): its
 *                 block as stored
 *        8     4  sequence number: 0 for BEGIN, then +1 per record (a record lost, repeated
 *                 or moved is found)
 *       12     4  payload length n (at most POOL_FS_SEND_PAYLOAD_MAX)
 *       16     n  payload
 *     16+n     8  XXH3-64 of bytes [0, 16 + n)
 * BEGIN payload (PFS_SEND_BEGIN_BYTES + name):
 *        0     4  stream version: 1, or 2 when PUTs may carry blocks as stored (send -c)
 *        4     4  kind: 1 full, 2 incremental
 *        8     8  the snapshot's GUID
 *       16     8  the base's GUID (incremental; 0 for full)
 *       24     8  the snapshot's creation time, ns
 *       32     4  the file system's record size
 *       36     1  the file system's compression (blk_compress: 0 off, 1 lz4, 2 zstd)
 *       37     1  the snapshot's name length m (1..POOL_SNAP_NAME_MAX)
 *       38     2  zero
 *       40     8  the snapshot's REFER bytes (for progress; not checked)
 *       48     m  the snapshot's name
 * PUT payload:
 *        0     2  key length k (1..BTREE_KEY_MAX)
 *        2     2  value length v (0..POOL_DS_VAL_MAX)
 *        4     4  the data's length d (0: no block; else the extent's block, its logical bytes)
 *        8     k  key
 *      8+k     v  value (an extent with data: all zero, the receiver's pointer goes there)
 *    8+k+v     d  data
 * PUT payload with PFS_REC_F_STORED: as above, d the bytes as stored, and between value and data
 *    8+k+v     1  the block's compression (1 lz4, 2 zstd)
 *  8+k+v+1     3  zero
 *  8+k+v+4     4  its logical bytes (d..BLK_MAX_BLOCK_BYTES)
 *  8+k+v+8     d  the block as stored
 * DEL payload: 2 key length k, then the key.
 * END payload: 8 PUTs, 8 DELs, 8 data bytes (the sum of the PUTs' d: the counts the receiver
 * checks).
 * Blocks travel as their logical bytes (the receiver compresses them with its own setting), or
 * with send -c (POOL_FS_SEND_STORED) a compressed block as stored, read from the leaves past the
 * cache (pool_block_read_stored): the receiver decompresses it to check it decompresses to its
 * logical size (a block that would not read back is refused, never written) and writes the
 * bytes as they came when its file system compresses the same way (pool_seal_stored), else
 * seals the logical bytes anew. So a stream of compressible data is smaller and neither side
 * compresses it again.
 *
 * ---- Concurrency ----
 * The sender reads snapshot trees under the pool lock a batch at a time, loading what misses
 * outside it, so it runs beside a serving process. It reads the blocks ahead: when it starts on
 * a batch, the next batch's reads are started (struct pfs_cursor), so the leaves never wait for
 * it; a block stored uncompressed is read straight into the buffer the cache then holds
 * (pool_block_prefetch), and the engine thread only checks its checksum. The receiver's tree
 * changes and do_sync are under the pool lock; its pending list is touched only there. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/xxh.h"
#include "poolfs/pool_fs.h"
#include "poolfs/pool_fs_impl.h"
#include "pool/pool_impl.h"

#define PFS_SEND_MAGIC 0x53524853u
#define PFS_SEND_VERSION 1u
#define PFS_SEND_VERSION_STORED 2u /* may hold PUTs of blocks as stored (send -c) */
#define PFS_REC_F_STORED 0x1u      /* a PUT's block as stored (PFS_SEND_STORED_HDR first) */
#define PFS_SEND_STORED_HDR 8u
#define PFS_SEND_HDR 16u
#define PFS_SEND_SUM 8u
#define PFS_SEND_BEGIN_BYTES 48u
#define PFS_SEND_PUT_HDR 8u
#define PFS_SEND_BATCH 128u                 /* entries a cursor reads per hold of the lock */
#define PFS_SEND_AHEAD_BYTES (8u * 1024u * 1024u) /* block bytes in a batch read ahead */
#define PFS_SEND_BUF_BYTES (1024u * 1024u)  /* the writer's buffer */
/* A stream through a pipe (`shale send | shale receive`) has the pipe grown to this, the most an
 * unprivileged process may ask for by default (/proc/sys/fs/pipe-max-size): with the default 64
 * KiB, each 128 KiB block crossed it in several turns, each a wake-up of the other side. */
#define PFS_PIPE_BYTES (1024 * 1024)

enum pfs_send_type { PFS_REC_BEGIN = 1, PFS_REC_PUT = 2, PFS_REC_DEL = 3, PFS_REC_END = 4 };
enum pfs_send_kind { PFS_SEND_FULL = 1, PFS_SEND_INCREMENTAL = 2 };

static void pfs_put_le16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}
static void pfs_put_le32(uint8_t *b, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}
static void pfs_put_le64(uint8_t *b, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t pfs_get_le16(const uint8_t *b)
{
	return (uint16_t)(b[0] | (b[1] << 8));
}
static uint32_t pfs_get_le32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t pfs_get_le64(const uint8_t *b)
{
	return (uint64_t)pfs_get_le32(b) | (uint64_t)pfs_get_le32(b + 4) << 32;
}

/* The name of file system fs's snapshot named by "fs@snap" or "@snap" (of fs), into entry. */
static int pfs_send_find(struct pool *p, uint64_t head_id, const char *snap,
                         struct pool_snap_entry *entry)
{
	struct pool_snap_entry *ents;
	size_t n;
	int rc = pool_snap_entries(p, head_id, &ents, &n);
	if (rc != 0)
		return rc;
	rc = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(ents[i].se_name, snap) == 0) {
			*entry = ents[i];
			rc = 0;
		}
	}
	mem_free(ents);
	return rc;
}

/* A stream's fd that is a pipe is grown to PFS_PIPE_BYTES, or as far as allowed (a smaller
 * pipe only costs wake-ups: nothing fails for it). */
static void pfs_stream_pipe_grow(int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode))
		return;
	for (int bytes = PFS_PIPE_BYTES; bytes > 65536; bytes /= 2)
		if (fcntl(fd, F_SETPIPE_SZ, bytes) >= bytes)
			return;
}

/* ---------------------------------------------------------------------------------------------
 * Writing a stream */

struct pfs_writer {
	int w_fd;
	uint8_t *w_buf;
	size_t w_len;
	uint32_t w_seq;
	uint8_t *w_rec;       /* a record too large for w_buf being made */
	size_t w_rec_cap;
	uint8_t *w_cur;       /* the record being made: in w_buf at w_len, or w_rec */
	uint64_t w_puts, w_dels, w_data_bytes;
	uint64_t w_written; /* bytes written to w_fd */
	int w_err;
	bool w_stored;      /* send -c: compressed blocks as stored */
	uint64_t w_stored_blocks;
};

static int pfs_writer_flush(struct pfs_writer *w)
{
	if (w->w_err == 0 && w->w_len > 0) {
		w->w_err = sh_write_all(w->w_fd, w->w_buf, w->w_len);
		if (w->w_err == 0)
			w->w_written += w->w_len;
		w->w_len = 0;
	}
	return w->w_err;
}

/* Appends a record of type and flags with payload (n bytes, already in w_rec + PFS_SEND_HDR). */
static int pfs_writer_emit_flags(struct pfs_writer *w, enum pfs_send_type type, uint16_t flags,
                                 uint32_t n)
{
	uint8_t *r = w->w_cur;
	pfs_put_le32(r, PFS_SEND_MAGIC);
	pfs_put_le16(r + 4, (uint16_t)type);
	pfs_put_le16(r + 6, flags);
	pfs_put_le32(r + 8, w->w_seq++);
	pfs_put_le32(r + 12, n);
	pfs_put_le64(r + PFS_SEND_HDR + n, XXH3_64bits(r, PFS_SEND_HDR + n));
	size_t total = PFS_SEND_HDR + n + PFS_SEND_SUM;
	if (r != w->w_rec) { /* made in place (pfs_writer_payload) */
		w->w_len += total;
		return w->w_err;
	}
	if (pfs_writer_flush(w) == 0 && (w->w_err = sh_write_all(w->w_fd, r, total)) == 0)
		w->w_written += total;
	return w->w_err;
}

static int pfs_writer_emit(struct pfs_writer *w, enum pfs_send_type type, uint32_t n)
{
	return pfs_writer_emit_flags(w, type, 0, n);
}

/* Room for a record with a payload of n bytes: in place at the end of w_buf (written out first
 * when the record does not fit after what it holds), so that no byte is copied again; or in
 * w_rec for a record larger than w_buf. Returns where its payload goes. */
static uint8_t *pfs_writer_payload(struct pfs_writer *w, size_t n)
{
	size_t need = PFS_SEND_HDR + n + PFS_SEND_SUM;
	if (need <= PFS_SEND_BUF_BYTES) {
		if (w->w_len + need > PFS_SEND_BUF_BYTES && pfs_writer_flush(w) != 0)
			return NULL;
		w->w_cur = w->w_buf + w->w_len;
		return w->w_cur + PFS_SEND_HDR;
	}
	if (need > w->w_rec_cap) {
		uint8_t *r = mem_realloc(w->w_rec, need);
		if (!r) {
			w->w_err = -ENOMEM;
			return NULL;
		}
		w->w_rec = r;
		w->w_rec_cap = need;
	}
	w->w_cur = w->w_rec;
	return w->w_rec + PFS_SEND_HDR;
}

/* ---------------------------------------------------------------------------------------------
 * Reading a snapshot's tree in key order, a batch at a time */

struct pfs_entry {
	uint8_t e_key[BTREE_KEY_MAX];
	uint32_t e_klen;
	uint8_t e_val[POOL_DS_VAL_MAX];
	uint32_t e_vlen;
};

/* A cursor of the snapshot sent reads ahead (c_prefetch): when its reader starts on a batch, the
 * next batch is scanned and the reads of its blocks started, so the leaves are kept busy across
 * the batches' boundaries and never wait for the sender to ask. A batch stops at PFS_SEND_BATCH
 * entries or once its blocks reach PFS_SEND_AHEAD_BYTES, so what is read ahead (the batch being
 * sent and the next, at most twice that plus one block) stays a small part of the cache
 * whatever the record size, and is not evicted before it is sent. */
struct pfs_cursor {
	struct pool *c_pool;
	struct pool_ds *c_ds;
	struct pfs_entry *c_ents;  /* the batch being read: PFS_SEND_BATCH */
	uint32_t c_n, c_i;
	struct pfs_entry *c_ahead; /* c_prefetch: the next batch, scanned and its reads started */
	uint32_t c_ahead_n;
	bool c_has_ahead;
	uint64_t c_scan_bytes;     /* the block bytes of the batch being scanned */
	uint8_t c_last[BTREE_KEY_MAX];
	uint32_t c_last_len;
	bool c_started, c_eof;
	bool c_prefetch; /* blocks are read ahead (the snapshot sent, not its base) */
	bool c_stored;   /* send -c: compressed blocks are not (they are read as stored) */
	uint64_t c_read_ahead; /* reads it started */
	int c_err;
	struct pfs_entry *c_scan;  /* where pfs_cursor_visit puts entries */
	uint32_t *c_scan_n;
};

static bool pfs_cursor_visit(void *arg, const void *key, uint32_t klen, const void *val,
                             uint32_t vlen)
{
	struct pfs_cursor *c = arg;
	if (klen > BTREE_KEY_MAX || vlen > POOL_DS_VAL_MAX) {
		c->c_err = -EIO;
		return false;
	}
	struct pfs_entry *e = &c->c_scan[(*c->c_scan_n)++];
	memcpy(e->e_key, key, klen);
	e->e_klen = klen;
	memcpy(e->e_val, val, vlen);
	e->e_vlen = vlen;
	memcpy(c->c_last, key, klen);
	c->c_last_len = klen;
	c->c_started = true;
	struct blk_ptr bp;
	if (c->c_prefetch && pfs_entry_block(key, klen, val, vlen, &bp) == PFS_ENTRY_BLOCK)
		c->c_scan_bytes += bp.bp_lsize;
	return *c->c_scan_n < PFS_SEND_BATCH && c->c_scan_bytes < PFS_SEND_AHEAD_BYTES;
}

/* Starts reading the blocks the extents of a batch (n entries) name, so that sending it does
 * not wait for each in turn (the cache keeps them: see struct pfs_cursor). */
static void pfs_cursor_prefetch(struct pfs_cursor *c, const struct pfs_entry *ents, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct pfs_entry *e = &ents[i];
		struct blk_ptr bp;
		if (pfs_entry_block(e->e_key, e->e_klen, e->e_val, e->e_vlen, &bp) ==
		        PFS_ENTRY_BLOCK &&
		    !(c->c_stored && bp.bp_compress != BLK_COMPRESS_OFF) && /* read as stored */
		    pool_block_prefetch(c->c_pool, &bp) == 0)
			c->c_read_ahead++;
	}
}

/* Scans the tree on from the last key into ents (*n entries: a batch), setting c_eof when it
 * ran to the end, and starts reading its blocks when the cursor reads ahead. */
static int pfs_cursor_scan(struct pfs_cursor *c, struct pfs_entry *ents, uint32_t *n)
{
	*n = 0;
	c->c_scan = ents;
	c->c_scan_n = n;
	c->c_scan_bytes = 0;
	while (!c->c_eof && *n < PFS_SEND_BATCH && c->c_scan_bytes < PFS_SEND_AHEAD_BYTES) {
		struct blk_ptr missing;
		pool_lock(c->c_pool);
		int rc = btree_scan(pool_ds_tree(c->c_ds), c->c_started ? c->c_last : NULL,
		                    c->c_started ? c->c_last_len : 0, c->c_started, pfs_cursor_visit,
		                    c, &missing);
		pool_unlock(c->c_pool);
		if (c->c_err != 0)
			return c->c_err;
		if (rc == -SH_ENEEDBLOCK) {
			rc = pool_block_read_sync(c->c_pool, &missing);
			if (rc != 0)
				return rc;
			continue;
		}
		if (rc != 0)
			return rc;
		/* the scan ran to the end unless the visitor stopped it (a full batch) */
		if (*n < PFS_SEND_BATCH && c->c_scan_bytes < PFS_SEND_AHEAD_BYTES)
			c->c_eof = true;
	}
	if (c->c_prefetch)
		pfs_cursor_prefetch(c, ents, *n);
	return 0;
}

/* The next batch (c_n entries from c_i = 0; none at the end), and when the cursor reads ahead,
 * the one after it scanned and its reads started. */
static int pfs_cursor_fill(struct pfs_cursor *c)
{
	c->c_n = c->c_i = 0;
	if (c->c_has_ahead) {
		struct pfs_entry *t = c->c_ents;
		c->c_ents = c->c_ahead;
		c->c_ahead = t;
		c->c_n = c->c_ahead_n;
		c->c_has_ahead = false;
	} else {
		int rc = pfs_cursor_scan(c, c->c_ents, &c->c_n);
		if (rc != 0)
			return rc;
	}
	if (c->c_prefetch && !c->c_eof) {
		int rc = pfs_cursor_scan(c, c->c_ahead, &c->c_ahead_n);
		if (rc != 0)
			return rc;
		c->c_has_ahead = true;
	}
	return 0;
}

/* The cursor's current entry, or NULL at the end. */
static int pfs_cursor_peek(struct pfs_cursor *c, const struct pfs_entry **out)
{
	while (c->c_i == c->c_n && (!c->c_eof || c->c_has_ahead)) {
		int rc = pfs_cursor_fill(c);
		if (rc != 0)
			return rc;
	}
	*out = c->c_i < c->c_n ? &c->c_ents[c->c_i] : NULL;
	return 0;
}

/* Opens a cursor of the snapshot name; prefetch: it reads ahead (c_prefetch; only then does it
 * have a second batch). */
static int pfs_cursor_open(struct pool *p, const char *name, bool prefetch, struct pfs_cursor *c)
{
	memset(c, 0, sizeof(*c));
	c->c_pool = p;
	c->c_prefetch = prefetch;
	c->c_ents = mem_alloc(PFS_SEND_BATCH * sizeof(*c->c_ents));
	if (prefetch)
		c->c_ahead = mem_alloc(PFS_SEND_BATCH * sizeof(*c->c_ahead));
	int rc = c->c_ents && (c->c_ahead || !prefetch) ? pool_ds_open(p, name, &c->c_ds) : -ENOMEM;
	if (rc != 0) {
		mem_free(c->c_ents);
		mem_free(c->c_ahead);
		c->c_ents = c->c_ahead = NULL;
	}
	return rc;
}

static void pfs_cursor_close(struct pfs_cursor *c)
{
	if (c->c_ds)
		pool_ds_close(c->c_ds);
	mem_free(c->c_ents);
	mem_free(c->c_ahead);
	c->c_ds = NULL;
	c->c_ents = c->c_ahead = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Sending */

/* PUT of entry e, with its block's data when it is an extent that names one: its logical
 * bytes, or with send -c, a compressed block's bytes as stored. */
static int pfs_send_put(struct pfs_writer *w, struct pool *p, const struct pfs_entry *e)
{
	struct blk_ptr bp;
	int kind = pfs_entry_block(e->e_key, e->e_klen, e->e_val, e->e_vlen, &bp);
	if (kind < 0)
		return kind;
	bool stored = w->w_stored && kind == PFS_ENTRY_BLOCK && bp.bp_compress != BLK_COMPRESS_OFF;
	uint32_t d = kind != PFS_ENTRY_BLOCK ? 0 : stored ? bp.bp_psize : bp.bp_lsize;
	uint32_t pre = stored ? PFS_SEND_STORED_HDR : 0;
	uint32_t n = PFS_SEND_PUT_HDR + e->e_klen + e->e_vlen + pre + d;
	uint8_t *pl = pfs_writer_payload(w, n);
	if (!pl)
		return w->w_err;
	pfs_put_le16(pl, (uint16_t)e->e_klen);
	pfs_put_le16(pl + 2, (uint16_t)e->e_vlen);
	pfs_put_le32(pl + 4, d);
	memcpy(pl + PFS_SEND_PUT_HDR, e->e_key, e->e_klen);
	uint8_t *val = pl + PFS_SEND_PUT_HDR + e->e_klen;
	if (stored) {
		memset(val, 0, e->e_vlen); /* the receiver's pointer goes there */
		uint8_t *hdr = val + e->e_vlen;
		memset(hdr, 0, PFS_SEND_STORED_HDR);
		hdr[0] = bp.bp_compress;
		pfs_put_le32(hdr + 4, bp.bp_lsize);
		int rc = pool_block_read_stored(p, &bp, hdr + PFS_SEND_STORED_HDR);
		if (rc != 0)
			return rc;
		w->w_data_bytes += d;
		w->w_stored_blocks++;
		w->w_puts++;
		return pfs_writer_emit_flags(w, PFS_REC_PUT, PFS_REC_F_STORED, n);
	}
	if (kind == PFS_ENTRY_BLOCK) {
		memset(val, 0, e->e_vlen); /* the receiver's pointer goes there */
		const void *img;
		void *hold;
		int rc;
		while ((rc = pool_block_get(p, &bp, &img, &hold)) == -SH_ENEEDBLOCK)
			if ((rc = pool_block_read_sync(p, &bp)) != 0)
				return rc;
		if (rc != 0)
			return rc;
		memcpy(val + e->e_vlen, img, d);
		pool_block_release(p, hold);
		w->w_data_bytes += d;
	} else {
		memcpy(val, e->e_val, e->e_vlen);
	}
	w->w_puts++;
	return pfs_writer_emit(w, PFS_REC_PUT, PFS_SEND_PUT_HDR + e->e_klen + e->e_vlen + d);
}

static int pfs_send_del(struct pfs_writer *w, const struct pfs_entry *e)
{
	uint8_t *pl = pfs_writer_payload(w, 2 + e->e_klen);
	if (!pl)
		return w->w_err;
	pfs_put_le16(pl, (uint16_t)e->e_klen);
	memcpy(pl + 2, e->e_key, e->e_klen);
	w->w_dels++;
	return pfs_writer_emit(w, PFS_REC_DEL, 2 + e->e_klen);
}

static int pfs_key_cmp(const struct pfs_entry *a, const struct pfs_entry *b)
{
	uint32_t n = SH_MIN(a->e_klen, b->e_klen);
	int c = memcmp(a->e_key, b->e_key, n);
	if (c != 0)
		return c;
	return a->e_klen < b->e_klen ? -1 : a->e_klen > b->e_klen;
}

/* The entries of to (and, with from, only what differs from it) as PUT and DEL records. */
static int pfs_send_entries(struct pfs_writer *w, struct pool *p, struct pfs_cursor *to,
                            struct pfs_cursor *from)
{
	for (;;) {
		const struct pfs_entry *b, *a = NULL;
		int rc = pfs_cursor_peek(to, &b);
		if (rc == 0 && from)
			rc = pfs_cursor_peek(from, &a);
		if (rc != 0)
			return rc;
		if (!a && !b)
			return 0;
		int c = !a ? 1 : !b ? -1 : pfs_key_cmp(a, b);
		if (c < 0) { /* only in the base: gone */
			rc = pfs_send_del(w, a);
			from->c_i++;
		} else if (c > 0) { /* only in the snapshot: new */
			rc = pfs_send_put(w, p, b);
			to->c_i++;
		} else { /* in both: sent when its value changed */
			if (a->e_vlen != b->e_vlen || memcmp(a->e_val, b->e_val, a->e_vlen) != 0)
				rc = pfs_send_put(w, p, b);
			from->c_i++;
			to->c_i++;
		}
		if (rc != 0)
			return rc;
	}
}

int pool_fs_send(struct pool *p, const char *snapshot, const char *from, unsigned flags, int fd,
                 struct pool_fs_send_stats *st, char *err, size_t err_len)
{
	char fs[POOL_DS_NAME_MAX + 1], snap[POOL_SNAP_NAME_MAX + 1], base[POOL_SNAP_NAME_MAX + 1];
	memset(st, 0, sizeof(*st));
	err[0] = '\0';
	if (pool_snap_name_split(snapshot, fs, snap) != 0) {
		snprintf(err, err_len, "'%s' is not FS@SNAP", snapshot);
		return -EINVAL;
	}
	if (from) {
		const char *at = strchr(from, '@');
		char from_fs[POOL_DS_NAME_MAX + 1];
		if (!at || (at != from && (pool_snap_name_split(from, from_fs, base) != 0 ||
		                           strcmp(from_fs, fs) != 0)) ||
		    strlen(at + 1) > POOL_SNAP_NAME_MAX || !pool_snap_name_valid(at + 1)) {
			snprintf(err, err_len, "-i '%s': give @SNAP or FS@SNAP of %s", from, fs);
			return -EINVAL;
		}
		snprintf(base, sizeof(base), "%s", at + 1);
	}
	struct pool_ds *head;
	int rc = pool_ds_open(p, fs, &head);
	if (rc != 0) {
		snprintf(err, err_len, "%s: %s", fs,
		         rc == -ENOENT ? "no such file system" : sh_strerror(rc));
		return rc;
	}
	struct pool_snap_entry to_ent = {0}, from_ent = {0};
	rc = pfs_send_find(p, pool_ds_id(head), snap, &to_ent);
	if (rc != 0)
		snprintf(err, err_len, "%s: %s", snapshot,
		         rc == -ENOENT ? "no such snapshot" : sh_strerror(rc));
	if (rc == 0 && from) {
		rc = pfs_send_find(p, pool_ds_id(head), base, &from_ent);
		if (rc != 0)
			snprintf(err, err_len, "%s@%s: %s", fs, base,
			         rc == -ENOENT ? "no such snapshot" : sh_strerror(rc));
		else if (from_ent.se_txg >= to_ent.se_txg) {
			snprintf(err, err_len, "%s@%s is not older than %s", fs, base, snapshot);
			rc = -EINVAL;
		}
	}
	uint32_t record_bytes = pool_ds_record_bytes(head);
	enum blk_compress compress = pool_ds_compress(head);
	pool_ds_close(head);
	if (rc != 0)
		return rc;

	struct pfs_cursor to = {0}, base_c = {0};
	bool stored = (flags & POOL_FS_SEND_STORED) != 0;
	struct pfs_writer w = {.w_fd = fd, .w_stored = stored};
	pfs_stream_pipe_grow(fd);
	w.w_buf = mem_alloc(PFS_SEND_BUF_BYTES);
	rc = w.w_buf ? pfs_cursor_open(p, snapshot, true, &to) : -ENOMEM;
	to.c_stored = stored;
	if (rc == 0 && from) {
		char full[POOL_SNAP_FULL_MAX + 1];
		snprintf(full, sizeof(full), "%s@%s", fs, base);
		rc = pfs_cursor_open(p, full, false, &base_c);
	}
	size_t m = strlen(snap);
	uint8_t *pl = rc == 0 ? pfs_writer_payload(&w, PFS_SEND_BEGIN_BYTES + m) : NULL;
	if (rc == 0 && !pl)
		rc = w.w_err;
	if (rc == 0) {
		memset(pl, 0, PFS_SEND_BEGIN_BYTES);
		pfs_put_le32(pl, stored ? PFS_SEND_VERSION_STORED : PFS_SEND_VERSION);
		pfs_put_le32(pl + 4, from ? PFS_SEND_INCREMENTAL : PFS_SEND_FULL);
		pfs_put_le64(pl + 8, to_ent.se_guid);
		pfs_put_le64(pl + 16, from ? from_ent.se_guid : 0);
		pfs_put_le64(pl + 24, to_ent.se_creation_ns);
		pfs_put_le32(pl + 32, record_bytes);
		pl[36] = (uint8_t)compress;
		pl[37] = (uint8_t)m;
		pfs_put_le64(pl + 40, to_ent.se_refer);
		memcpy(pl + PFS_SEND_BEGIN_BYTES, snap, m);
		rc = pfs_writer_emit(&w, PFS_REC_BEGIN, (uint32_t)(PFS_SEND_BEGIN_BYTES + m));
	}
	if (rc == 0)
		rc = pfs_send_entries(&w, p, &to, from ? &base_c : NULL);
	if (rc == 0 && (pl = pfs_writer_payload(&w, 24)) == NULL)
		rc = w.w_err;
	if (rc == 0) {
		pfs_put_le64(pl, w.w_puts);
		pfs_put_le64(pl + 8, w.w_dels);
		pfs_put_le64(pl + 16, w.w_data_bytes);
		rc = pfs_writer_emit(&w, PFS_REC_END, 24);
	}
	if (rc == 0)
		rc = pfs_writer_flush(&w);
	if (rc != 0 && err[0] == '\0')
		snprintf(err, err_len, "%s: %s", snapshot,
		         rc == -EPIPE ? "the reader went away" : sh_strerror(rc));
	st->ss_puts = w.w_puts;
	st->ss_dels = w.w_dels;
	st->ss_data_bytes = w.w_data_bytes;
	st->ss_stored_blocks = w.w_stored_blocks;
	st->ss_read_ahead = to.c_read_ahead;
	st->ss_stream_bytes = w.w_written;
	pfs_cursor_close(&to);
	pfs_cursor_close(&base_c);
	mem_free(w.w_buf);
	mem_free(w.w_rec);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Receiving: the owner that writes the received blocks at the sync */

struct pfs_pending {
	struct pfs_pending *pp_next;
	uint8_t pp_key[BTREE_KEY_MAX];
	uint32_t pp_klen;
	uint32_t pp_lsize;
	struct pool_sealed *pp_sealed; /* compressed and checksummed before the sync (or NULL) */
	/* pp_lsize bytes, sector-aligned (mem_aligned_alloc): the cache takes it at the sync (no
	 * copy); the sealed block's image when it is stored uncompressed (pool_seal_block_lend) */
	uint8_t *pp_data;
};

struct pfs_recv {
	struct pool *rv_pool;
	struct pool_ds *rv_ds;
	struct pfs_pending *rv_pending, *rv_pending_tail; /* pool lock */
	uint64_t rv_pending_bytes;                          /* pool lock */
	int rv_sync_err;                                    /* pool lock: do_sync's failure */
	/* the throttle's wait */
	pthread_mutex_t rv_lock;
	pthread_cond_t rv_cv;
	bool rv_throttle_done;
	int rv_throttle_status;
	struct pool_waiter rv_waiter;
};

static int pfs_recv_do_sync(void *owner, uint64_t txg)
{
	(void)txg;
	struct pfs_recv *rv = owner;
	while (rv->rv_pending) {
		struct pfs_pending *pp = rv->rv_pending;
		struct blk_ptr bp;
		bool taken = false, sealed = pp->pp_sealed != NULL;
		int rc = pp->pp_sealed
		             ? pool_sync_write_sealed(rv->rv_pool, pp->pp_sealed, pp->pp_data, true,
		                                      &taken, POOL_BT_DATA, 0, 1, &bp)
		             : pool_sync_write(rv->rv_pool, pp->pp_data, pp->pp_lsize, POOL_BT_DATA, 0,
		                               1, &bp);
		pp->pp_sealed = NULL; /* consumed, also on a failure */
		if (rc == 0 && sealed && taken)
			pp->pp_data = NULL; /* the cache's now */
		uint8_t val[BLK_PTR_DISK_BYTES];
		if (rc == 0) {
			blk_ptr_encode(&bp, val);
			rc = btree_put(pool_ds_tree(rv->rv_ds), pp->pp_key, pp->pp_klen, val,
			               sizeof(val), BTREE_PUT_REPLACE, NULL);
			if (rc != 0)
				(void)!pool_free(rv->rv_pool, &bp);
		}
		if (rc != 0) {
			rv->rv_sync_err = rc;
			return rc; /* the pool retries the txg once, then suspends */
		}
		rv->rv_pending = pp->pp_next;
		rv->rv_pending_bytes -= pp->pp_lsize;
		mem_free(pp->pp_data);
		mem_free(pp);
	}
	rv->rv_pending_tail = NULL;
	return 0;
}

static uint64_t pfs_recv_do_dirty_bytes(void *owner)
{
	struct pfs_recv *rv = owner;
	return rv->rv_pending_bytes;
}

static int pfs_recv_do_visit_blocks(void *owner, const void *key, uint32_t klen, const void *val,
                                    uint32_t vlen, pool_bp_fn fn, void *arg)
{
	(void)owner;
	struct blk_ptr bp;
	int kind = pfs_entry_block(key, klen, val, vlen, &bp);
	if (kind < 0)
		return kind;
	return kind == PFS_ENTRY_BLOCK ? fn(arg, &bp) : 0;
}

static void pfs_pending_free(struct pool *p, struct pfs_pending *pp)
{
	if (pp && pp->pp_sealed)
		pool_sealed_free(p, pp->pp_sealed);
	if (pp)
		mem_free(pp->pp_data);
	mem_free(pp);
}

static void pfs_recv_free(struct pfs_recv *rv)
{
	while (rv->rv_pending) {
		struct pfs_pending *pp = rv->rv_pending;
		rv->rv_pending = pp->pp_next;
		pfs_pending_free(rv->rv_pool, pp);
	}
	pthread_cond_destroy(&rv->rv_cv);
	pthread_mutex_destroy(&rv->rv_lock);
	mem_free(rv);
}

static void pfs_recv_do_detach(void *owner)
{
	pfs_recv_free(owner);
}

static const struct pool_ds_owner pfs_recv_ops = {
	.do_sync = pfs_recv_do_sync,
	.do_dirty_bytes = pfs_recv_do_dirty_bytes,
	.do_visit_blocks = pfs_recv_do_visit_blocks,
	.do_detach = pfs_recv_do_detach,
};

static void pfs_recv_throttle_cb(struct pool_waiter *pw, int status)
{
	struct pfs_recv *rv = pw->pw_arg;
	pthread_mutex_lock(&rv->rv_lock);
	rv->rv_throttle_done = true;
	rv->rv_throttle_status = status;
	pthread_cond_broadcast(&rv->rv_cv);
	pthread_mutex_unlock(&rv->rv_lock);
}

/* Under the pool lock on return (0): the throttle let this change go. */
static int pfs_recv_lock(struct pfs_recv *rv)
{
	struct pool *p = rv->rv_pool;
	for (;;) {
		pool_lock(p);
		rv->rv_throttle_done = false;
		int rc = pool_tx_throttle(p, &rv->rv_waiter);
		if (rc == 0 && rv->rv_sync_err != 0)
			rc = rv->rv_sync_err;
		if (rc == 0)
			return 0;
		pool_unlock(p);
		if (rc != POOL_THROTTLED)
			return rc;
		pthread_mutex_lock(&rv->rv_lock);
		while (!rv->rv_throttle_done)
			pthread_cond_wait(&rv->rv_cv, &rv->rv_lock);
		rc = rv->rv_throttle_status;
		pthread_mutex_unlock(&rv->rv_lock);
		if (rc != 0)
			return rc;
	}
}

/* A block as stored (PFS_REC_F_STORED): its compression and logical size. */
struct pfs_stored {
	enum blk_compress st_compress;
	uint32_t st_lsize;
};

/* The pending block of data (d bytes; as stored when stored is not NULL) for key; a logical
 * block in *take (a mem_alloc buffer of exactly d bytes, the reader's) is taken, *take set to
 * NULL, instead of copied. Returns 0 with *out, -ENOMEM, or -EBADMSG for stored bytes that do
 * not decompress to their size. */
static int pfs_pending_make(struct pfs_recv *rv, const uint8_t *key, uint32_t klen,
                            const uint8_t *data, uint32_t d, const struct pfs_stored *stored,
                            uint8_t **take, struct pfs_pending **out)
{
	uint32_t lsize = stored ? stored->st_lsize : d;
	bool taking = !stored && take && *take == data;
	struct pfs_pending *pp = mem_zalloc(sizeof(*pp));
	if (pp && taking) {
		pp->pp_data = *take;
		*take = NULL;
	} else if (pp && !(pp->pp_data = mem_aligned_alloc(BLK_SECTOR_BYTES, lsize))) {
		mem_free(pp);
		pp = NULL;
	}
	if (!pp)
		return -ENOMEM;
	memcpy(pp->pp_key, key, klen);
	pp->pp_klen = klen;
	pp->pp_lsize = lsize;
	pp->pp_sealed = NULL;
	enum blk_compress mine = pool_ds_compress(rv->rv_ds);
	if (stored) {
		/* decompressed into pp_data to check it; written as it came when this file system
		 * compresses the same way (no compression again), else sealed anew below */
		int rc = pool_seal_stored(rv->rv_pool, data, d, lsize, stored->st_compress,
		                          pp->pp_data, &pp->pp_sealed);
		if (rc != 0) {
			pfs_pending_free(rv->rv_pool, pp);
			return rc == -EINVAL ? -EBADMSG : rc;
		}
		if (stored->st_compress == mine) {
			*out = pp;
			return 0;
		}
		pool_sealed_free(rv->rv_pool, pp->pp_sealed);
		pp->pp_sealed = NULL;
	} else if (!taking) {
		memcpy(pp->pp_data, data, d);
	}
	/* compressed here, not in the sync under the pool lock (NULL: the sync does it); stored
	 * uncompressed, pp_data itself is the image written (lent: the cache takes it at the sync,
	 * and the write holds the cached buffer until it is done) */
	if (pool_seal_block_lend(rv->rv_pool, pp->pp_data, lsize, mine, &pp->pp_sealed) != 0)
		pp->pp_sealed = NULL;
	*out = pp;
	return 0;
}

/* One PUT or DEL (put false) applied to the tree: the old value's block freed, the new value
 * put, an extent's data (data, d bytes; as stored when stored is not NULL) pending for do_sync.
 * -EBADMSG: stored bytes that do not decompress to their size. */
static int pfs_recv_apply(struct pfs_recv *rv, bool put, const uint8_t *key, uint32_t klen,
                          const uint8_t *val, uint32_t vlen, const uint8_t *data, uint32_t d,
                          const struct pfs_stored *stored, uint8_t **take)
{
	struct pfs_pending *pp = NULL;
	if (d > 0) {
		int rc = pfs_pending_make(rv, key, klen, data, d, stored, take, &pp);
		if (rc != 0)
			return rc;
	}
	struct pool *p = rv->rv_pool;
	uint8_t old[POOL_DS_VAL_MAX];
	for (;;) {
		int rc = pfs_recv_lock(rv);
		if (rc != 0) {
			pfs_pending_free(p, pp);
			return rc;
		}
		struct btree *t = pool_ds_tree(rv->rv_ds);
		struct blk_ptr missing, old_bp;
		uint32_t old_len = 0;
		rc = btree_lookup(t, key, klen, old, sizeof(old), &old_len, &missing);
		bool had = rc == 0;
		if (rc == 0 || rc == -ENOENT)
			rc = put ? btree_put(t, key, klen, val, vlen, BTREE_PUT_UPSERT, &missing)
			         : had ? btree_delete(t, key, klen, &missing) : -ENOENT;
		if (rc == -SH_ENEEDBLOCK) {
			pool_unlock(p);
			if ((rc = pool_block_read_sync(p, &missing)) != 0) {
				pfs_pending_free(p, pp);
				return rc;
			}
			continue;
		}
		if (rc == 0 && had &&
		    pfs_entry_block(key, klen, old, old_len, &old_bp) == PFS_ENTRY_BLOCK)
			(void)!pool_ds_free(rv->rv_ds, &old_bp); /* a refusal is logged and counted */
		if (rc == 0 && pp) {
			pp->pp_next = NULL;
			if (rv->rv_pending_tail)
				rv->rv_pending_tail->pp_next = pp;
			else
				rv->rv_pending = pp;
			rv->rv_pending_tail = pp;
			rv->rv_pending_bytes += pp->pp_lsize;
			pp = NULL;
		}
		pool_unlock(p);
		pfs_pending_free(p, pp);
		return rc;
	}
}

/* ---------------------------------------------------------------------------------------------
 * Receiving: reading the stream */

struct pfs_reader {
	int r_fd;
	uint8_t *r_rec;
	size_t r_cap;
	uint32_t r_seq;
	uint64_t r_bytes;
	uint16_t r_flags;   /* the last record's */
	uint32_t r_version; /* the stream's (BEGIN), once known */
	/* The last record's data when it is a PUT of a block's logical bytes: read into a buffer
	 * of its own (mem_alloc of exactly r_data_len bytes), not into r_rec, so that the receiver
	 * takes it as the block's pending data instead of copying it (NULL once taken). */
	uint8_t *r_data;
	uint32_t r_data_len;
	XXH3_state_t *r_sum; /* the checksum of a record read in parts */
};

static void pfs_reader_fini(struct pfs_reader *r)
{
	mem_free(r->r_rec);
	mem_free(r->r_data);
	if (r->r_sum)
		XXH3_freeState(r->r_sum);
	r->r_rec = r->r_data = NULL;
	r->r_sum = NULL;
}

/* Reads n bytes into buf: 0, the read's error, or -EPROTO (why in err) when the stream ends. */
static int pfs_reader_read(struct pfs_reader *r, void *buf, size_t n, char *err, size_t err_len)
{
	size_t got = 0;
	int rc = sh_read_full(r->r_fd, buf, n, &got);
	if (rc == 0 && got < n) {
		snprintf(err, err_len, "the stream ends inside record %" PRIu32, r->r_seq);
		rc = -EPROTO;
	}
	return rc;
}

/* The rest of a PUT whose first PFS_SEND_PUT_HDR payload bytes are in r_rec already: when it
 * names data of its own (d > 0, the lengths adding up), its key and value into r_rec, its data
 * into r_data, its checksum checked over the parts; 1 when it does not (the caller reads it
 * whole). 0 or an error. */
static int pfs_reader_put_parts(struct pfs_reader *r, uint32_t len, char *err, size_t err_len)
{
	const uint8_t *ph = r->r_rec + PFS_SEND_HDR;
	uint32_t k = pfs_get_le16(ph), v = pfs_get_le16(ph + 2), d = pfs_get_le32(ph + 4);
	uint64_t prefix = (uint64_t)PFS_SEND_PUT_HDR + k + v;
	if (d == 0 || d > BLK_MAX_BLOCK_BYTES || prefix + d != len)
		return 1;
	if (!r->r_sum && !(r->r_sum = XXH3_createState()))
		return -ENOMEM;
	/* sector-aligned, so that a block stored uncompressed is written from it (the sealed
	 * block's image, pool_seal_block_lend) and then cached as it is: no copy of its bytes */
	uint8_t *data = mem_aligned_alloc(BLK_SECTOR_BYTES, d);
	if (!data)
		return -ENOMEM;
	uint8_t sum[PFS_SEND_SUM];
	int rc = pfs_reader_read(r, r->r_rec + PFS_SEND_HDR + PFS_SEND_PUT_HDR,
	                         (size_t)prefix - PFS_SEND_PUT_HDR, err, err_len);
	if (rc == 0)
		rc = pfs_reader_read(r, data, d, err, err_len);
	if (rc == 0)
		rc = pfs_reader_read(r, sum, sizeof(sum), err, err_len);
	if (rc == 0) {
		(void)XXH3_64bits_reset(r->r_sum);
		(void)XXH3_64bits_update(r->r_sum, r->r_rec, PFS_SEND_HDR + (size_t)prefix);
		(void)XXH3_64bits_update(r->r_sum, data, d);
		if (pfs_get_le64(sum) != XXH3_64bits_digest(r->r_sum)) {
			snprintf(err, err_len, "record %" PRIu32 " is damaged (its checksum is wrong)",
			         r->r_seq);
			rc = -EPROTO;
		}
	}
	if (rc != 0) {
		mem_free(data);
		return rc;
	}
	r->r_data = data;
	r->r_data_len = d;
	return 0;
}

/* The next record: its type and payload (valid until the next call). A PUT of a block's logical
 * bytes has them in r_data instead, and its payload ends before them (*n still counts them).
 * -EPROTO (with why) for a record that is not whole, not right, or out of order; -ENODATA at
 * the end of the input before any byte of a record. */
static int pfs_reader_next(struct pfs_reader *r, enum pfs_send_type *type, const uint8_t **pl,
                           uint32_t *n, char *err, size_t err_len)
{
	mem_free(r->r_data);
	r->r_data = NULL;
	r->r_data_len = 0;
	uint8_t hdr[PFS_SEND_HDR];
	size_t got = 0;
	int rc = sh_read_full(r->r_fd, hdr, sizeof(hdr), &got);
	if (rc != 0)
		return rc;
	if (got == 0)
		return -ENODATA;
	if (got < sizeof(hdr)) {
		snprintf(err, err_len, "the stream ends inside a record (byte %" PRIu64 ")",
		         r->r_bytes + got);
		return -EPROTO;
	}
	uint32_t len = pfs_get_le32(hdr + 12);
	if (pfs_get_le32(hdr) != PFS_SEND_MAGIC || (pfs_get_le16(hdr + 6) & ~PFS_REC_F_STORED) != 0 ||
	    len > POOL_FS_SEND_PAYLOAD_MAX) {
		snprintf(err, err_len, "not a stream record at byte %" PRIu64, r->r_bytes);
		return -EPROTO;
	}
	if (pfs_get_le32(hdr + 8) != r->r_seq) {
		snprintf(err, err_len, "record %" PRIu32 " came where %" PRIu32 " belongs",
		         pfs_get_le32(hdr + 8), r->r_seq);
		return -EPROTO;
	}
	size_t need = PFS_SEND_HDR + (size_t)len + PFS_SEND_SUM;
	if (need > r->r_cap) {
		uint8_t *b = mem_realloc(r->r_rec, need);
		if (!b)
			return -ENOMEM;
		r->r_rec = b;
		r->r_cap = need;
	}
	memcpy(r->r_rec, hdr, PFS_SEND_HDR);
	uint32_t done = 0; /* payload bytes in r_rec already */
	if (pfs_get_le16(hdr + 4) == PFS_REC_PUT && pfs_get_le16(hdr + 6) == 0 &&
	    len >= PFS_SEND_PUT_HDR) {
		rc = pfs_reader_read(r, r->r_rec + PFS_SEND_HDR, PFS_SEND_PUT_HDR, err, err_len);
		if (rc == 0)
			rc = pfs_reader_put_parts(r, len, err, err_len);
		if (rc < 0)
			return rc;
		done = PFS_SEND_PUT_HDR; /* rc 1: the rest follows whole */
	}
	if (!r->r_data) {
		rc = pfs_reader_read(r, r->r_rec + PFS_SEND_HDR + done, len - done + PFS_SEND_SUM,
		                     err, err_len);
		if (rc != 0)
			return rc;
	}
	if (!r->r_data && pfs_get_le64(r->r_rec + PFS_SEND_HDR + len) !=
	                      XXH3_64bits(r->r_rec, PFS_SEND_HDR + len)) {
		snprintf(err, err_len, "record %" PRIu32 " is damaged (its checksum is wrong)",
		         r->r_seq);
		return -EPROTO;
	}
	r->r_seq++;
	r->r_bytes += need;
	r->r_flags = pfs_get_le16(hdr + 6);
	*type = (enum pfs_send_type)pfs_get_le16(hdr + 4);
	*pl = r->r_rec + PFS_SEND_HDR;
	*n = len;
	return 0;
}

struct pfs_begin {
	uint32_t b_version;
	uint32_t b_kind;
	struct pool_snap_entry b_snap; /* name, GUID, creation */
	uint64_t b_base_guid;
	uint32_t b_record_bytes;
	uint8_t b_compress;
};

static int pfs_begin_parse(const uint8_t *pl, uint32_t n, struct pfs_begin *b, char *err,
                           size_t err_len)
{
	memset(b, 0, sizeof(*b));
	uint32_t m = n >= PFS_SEND_BEGIN_BYTES ? pl[37] : 0;
	uint32_t version = n >= PFS_SEND_BEGIN_BYTES ? pfs_get_le32(pl) : 0;
	if (n < PFS_SEND_BEGIN_BYTES ||
	    (version != PFS_SEND_VERSION && version != PFS_SEND_VERSION_STORED) ||
	    n != PFS_SEND_BEGIN_BYTES + m || m == 0 || m > POOL_SNAP_NAME_MAX) {
		snprintf(err, err_len,
		         "not a stream of version %u or %u (or its first record is damaged)",
		         PFS_SEND_VERSION, PFS_SEND_VERSION_STORED);
		return -EPROTO;
	}
	b->b_version = version;
	b->b_kind = pfs_get_le32(pl + 4);
	b->b_snap.se_guid = pfs_get_le64(pl + 8);
	b->b_base_guid = pfs_get_le64(pl + 16);
	b->b_snap.se_creation_ns = pfs_get_le64(pl + 24);
	b->b_record_bytes = pfs_get_le32(pl + 32);
	b->b_compress = pl[36];
	memcpy(b->b_snap.se_name, pl + PFS_SEND_BEGIN_BYTES, m);
	b->b_snap.se_name[m] = '\0';
	if ((b->b_kind != PFS_SEND_FULL && b->b_kind != PFS_SEND_INCREMENTAL) ||
	    (b->b_kind == PFS_SEND_INCREMENTAL) != (b->b_base_guid != 0) ||
	    b->b_snap.se_guid == 0 || b->b_compress > BLK_COMPRESS_ZSTD ||
	    !pool_snap_name_valid(b->b_snap.se_name)) {
		snprintf(err, err_len, "the stream's first record does not make sense");
		return -EPROTO;
	}
	return 0;
}

/* Applies records until END; returns 0 when the END's counts match. */
static int pfs_recv_records(struct pfs_recv *rv, struct pfs_reader *r, struct pool_fs_recv_stats *st,
                            char *err, size_t err_len)
{
	for (;;) {
		enum pfs_send_type type;
		const uint8_t *pl;
		uint32_t n;
		int rc = pfs_reader_next(r, &type, &pl, &n, err, err_len);
		if (rc == -ENODATA) {
			snprintf(err, err_len, "the stream ends before its last record (cut off)");
			return -EPROTO;
		}
		if (rc != 0)
			return rc;
		if (type == PFS_REC_END) {
			if (n != 24 || pfs_get_le64(pl) != st->rs_puts ||
			    pfs_get_le64(pl + 8) != st->rs_dels ||
			    pfs_get_le64(pl + 16) != st->rs_data_bytes) {
				snprintf(err, err_len, "the stream's counts do not match what came");
				return -EPROTO;
			}
			return 0;
		}
		bool put = type == PFS_REC_PUT;
		if (!put && type != PFS_REC_DEL) {
			snprintf(err, err_len, "record %" PRIu32 " is of no known type", r->r_seq - 1);
			return -EPROTO;
		}
		/* blocks as stored only in a stream that says it may hold them, only in PUTs */
		bool stored = (r->r_flags & PFS_REC_F_STORED) != 0;
		if (stored && (!put || r->r_version != PFS_SEND_VERSION_STORED)) {
			snprintf(err, err_len, "record %" PRIu32 " is of no known kind", r->r_seq - 1);
			return -EPROTO;
		}
		uint32_t k = n >= 2 ? pfs_get_le16(pl) : 0, v = 0, d = 0, at = put ? PFS_SEND_PUT_HDR : 2;
		uint32_t pre = stored ? PFS_SEND_STORED_HDR : 0;
		if (put && n >= PFS_SEND_PUT_HDR) {
			v = pfs_get_le16(pl + 2);
			d = pfs_get_le32(pl + 4);
		}
		const uint8_t *key = pl + at, *val = key + k, *data = val + v + pre;
		if (r->r_data) /* read apart (pfs_reader_next): the lengths were checked there */
			data = r->r_data;
		struct blk_ptr bp;
		bool ok = n >= at && k >= 1 && k <= BTREE_KEY_MAX && v <= POOL_DS_VAL_MAX &&
		          d <= BLK_MAX_BLOCK_BYTES && (uint64_t)at + k + v + pre + d == n;
		struct pfs_stored st_block = {0};
		if (ok && stored) {
			const uint8_t *hdr = val + v;
			st_block.st_compress = (enum blk_compress)hdr[0];
			st_block.st_lsize = pfs_get_le32(hdr + 4);
			ok = (hdr[0] == BLK_COMPRESS_LZ4 || hdr[0] == BLK_COMPRESS_ZSTD) && hdr[1] == 0 &&
			     hdr[2] == 0 && hdr[3] == 0 && d >= 1 && st_block.st_lsize >= d &&
			     st_block.st_lsize <= BLK_MAX_BLOCK_BYTES;
		}
		if (ok && put) {
			/* an extent's data and its (zero) value go together; nothing else has data */
			int kind = pfs_entry_block(key, k, val, v, &bp);
			static const uint8_t zero[BLK_PTR_DISK_BYTES];
			bool is_extent = pfs_entry_is_extent(key, k);
			ok = kind >= 0 && (d == 0 ? kind != PFS_ENTRY_BLOCK
			                          : is_extent && v == sizeof(zero) &&
			                                memcmp(val, zero, v) == 0);
			if (ok && is_extent && d == 0 && kind == PFS_ENTRY_NONE && v == sizeof(zero) &&
			    memcmp(val, zero, v) == 0)
				ok = false; /* "being written" is no state a snapshot holds */
		}
		if (!ok) {
			snprintf(err, err_len, "record %" PRIu32 " does not parse", r->r_seq - 1);
			return -EPROTO;
		}
		rc = pfs_recv_apply(rv, put, key, k, val, v, data, d, stored ? &st_block : NULL,
		                    &r->r_data);
		if (rc == -EBADMSG) {
			snprintf(err, err_len,
			         "record %" PRIu32 "'s block is damaged (it does not decompress to its "
			         "size)",
			         r->r_seq - 1);
			return -EPROTO;
		}
		if (rc == -ENOENT) {
			snprintf(err, err_len,
			         "record %" PRIu32 " removes what the file system does not hold: it is "
			         "not the stream's base",
			         r->r_seq - 1);
			return -EPROTO;
		}
		if (rc != 0) {
			snprintf(err, err_len, "%s", sh_strerror(rc));
			return rc;
		}
		if (put)
			st->rs_puts++;
		else
			st->rs_dels++;
		st->rs_data_bytes += d;
		st->rs_stream_bytes = r->r_bytes;
	}
}

/* The target, ready for an incremental stream: its latest snapshot is the base and it has not
 * changed since (or, force, made so). The file system is closed on return. */
static int pfs_recv_incremental_target(struct pool *p, const char *fs, const struct pfs_begin *b,
                                       bool force, char *err, size_t err_len)
{
	struct pool_ds *ds;
	int rc = pool_ds_open(p, fs, &ds);
	if (rc != 0) {
		snprintf(err, err_len, "%s: %s", fs,
		         rc == -ENOENT ? "no such file system (an incremental stream needs its base)"
		                       : sh_strerror(rc));
		return rc;
	}
	struct pool_snap_entry *ents = NULL;
	size_t n = 0, i;
	rc = pool_snap_entries(p, pool_ds_id(ds), &ents, &n);
	for (i = 0; rc == 0 && i < n && ents[i].se_guid != b->b_base_guid; i++)
		;
	bool changed = false;
	for (size_t j = 0; rc == 0 && j < n; j++)
		if (ents[j].se_guid == b->b_snap.se_guid) {
			snprintf(err, err_len, "%s@%s is the stream's snapshot: received already", fs,
			         ents[j].se_name);
			rc = -EEXIST;
		}
	if (rc == 0 && i == n) {
		snprintf(err, err_len, "%s has no snapshot with the stream's base GUID", fs);
		rc = -ENOENT;
	}
	char base[POOL_SNAP_FULL_MAX + 1] = "";
	if (rc == 0) {
		snprintf(base, sizeof(base), "%s@%s", fs, ents[i].se_name);
		pool_lock(p);
		changed = btree_is_dirty(pool_ds_tree(ds)) ||
		          memcmp(&ds->ds_root, &ents[n - 1].se_root, sizeof(ds->ds_root)) != 0;
		/* held by another (an export): refused before -F changes anything, as the owner's
		 * take-over would refuse it after */
		bool busy = ds->ds_refs > 1;
		pool_unlock(p);
		if (busy) {
			snprintf(err, err_len, "%s is in use (exported): take it out of the exports and "
			                       "reload them first (SIGHUP)",
			         fs);
			rc = -EBUSY;
		} else if ((i + 1 < n || changed) && !force) {
			snprintf(err, err_len,
			         i + 1 < n ? "%s has snapshots after the stream's base %s: -F destroys them"
			                   : "%s has changed since its snapshot %s: -F rolls it back",
			         fs, base);
			rc = -EBUSY;
		}
	}
	mem_free(ents);
	pool_ds_close(ds);
	if (rc == 0 && (i + 1 < n || changed))
		rc = pool_fs_rollback(p, base, true, err, err_len);
	return rc;
}

int pool_fs_receive(struct pool *p, const char *fs, bool force, int fd,
                    struct pool_fs_recv_stats *st, char *err, size_t err_len)
{
	memset(st, 0, sizeof(*st));
	err[0] = '\0';
	if (strchr(fs, '@') || !pool_name_valid(fs, POOL_DS_NAME_MAX)) {
		snprintf(err, err_len, "'%s' is not a file system name", fs);
		return -EINVAL;
	}
	struct pfs_reader r = {.r_fd = fd};
	pfs_stream_pipe_grow(fd);
	enum pfs_send_type type;
	const uint8_t *pl;
	uint32_t n;
	struct pfs_begin b;
	int rc = pfs_reader_next(&r, &type, &pl, &n, err, err_len);
	if (rc == -ENODATA)
		snprintf(err, err_len, "no stream: the input is empty");
	if (rc == 0 && type != PFS_REC_BEGIN) {
		snprintf(err, err_len, "the stream does not begin with its first record");
		rc = -EPROTO;
	}
	if (rc == 0)
		rc = pfs_begin_parse(pl, n, &b, err, err_len);
	if (rc == 0)
		r.r_version = b.b_version;
	if (rc == 0 && b.b_kind == PFS_SEND_FULL) {
		struct pool_ds_props props = {.dp_record_bytes = b.b_record_bytes,
		                              .dp_compress = (enum pool_compress)(b.b_compress + 1),
		                              .dp_receiving = true};
		rc = pool_ds_create(p, fs, &props);
		if (rc != 0)
			snprintf(err, err_len, "%s: %s", fs,
			         rc == -EEXIST ? "exists: a full stream makes a new file system"
			                       : sh_strerror(rc));
	} else if (rc == 0) {
		rc = pfs_recv_incremental_target(p, fs, &b, force, err, err_len);
	}
	if (rc != 0) {
		pfs_reader_fini(&r);
		return rc == -ENODATA ? -EPROTO : rc;
	}
	/* From here on, a failure puts the file system back as it was. */
	struct pfs_recv *rv = mem_zalloc(sizeof(*rv));
	struct pool_ds *ds = NULL;
	if (!rv) {
		rc = -ENOMEM;
	} else {
		rv->rv_pool = p;
		VERIFY(pthread_mutex_init(&rv->rv_lock, NULL) == 0);
		VERIFY(pthread_cond_init(&rv->rv_cv, NULL) == 0);
		rv->rv_waiter.pw_done = pfs_recv_throttle_cb;
		rv->rv_waiter.pw_arg = rv;
		rc = pool_ds_open(p, fs, &ds);
	}
	/* the owner first (an export refuses it, nothing changed), then the mark (durable) */
	if (rc == 0 && (rc = pool_txg_wait_synced(p, 0)) == 0) {
		rv->rv_ds = ds;
		rc = pool_ds_take_owner(ds, &pfs_recv_ops, rv);
		if (rc == -EBUSY)
			snprintf(err, err_len, "%s is in use (exported): take it out of the exports and "
			                       "reload them first (SIGHUP)",
			         fs);
		if (rc == 0)
			rv = NULL; /* the dataset's now: freed by do_detach */
	}
	bool marked = b.b_kind == PFS_SEND_FULL; /* made marked */
	if (rc == 0 && !marked && (rc = pool_ds_set_receiving(ds, true)) == 0)
		marked = true;
	if (rc != 0 && b.b_kind != PFS_SEND_FULL && !marked && ds && pool_ds_owner(ds) && !rv)
		(void)!pool_ds_take_owner(ds, NULL, NULL); /* nothing was written: let go */
	if (rc == 0) {
		struct pfs_recv *owner = pool_ds_owner(ds);
		rc = pfs_recv_records(owner, &r, st, err, err_len);
		/* what is pending goes to disk either way: no entry may stay "being written" */
		int sync_rc = pool_txg_wait_synced(p, 0);
		if (rc == 0)
			rc = sync_rc;
		pool_lock(p);
		if (rc == 0 && (owner->rv_pending || owner->rv_sync_err != 0))
			rc = owner->rv_sync_err != 0 ? owner->rv_sync_err : -EIO;
		pool_unlock(p);
		/* what came must be a sound file system: a stream whose records all parse may still
		 * hold garbage, which no export or destroy of it could read */
		char report[256] = "";
		if (rc == 0 && (rc = pfs_tree_check(ds, report, sizeof(report))) != 0) {
			snprintf(err, err_len, "the stream's file system is not sound: %s", report);
			rc = rc == -ENOMEM ? rc : -EPROTO;
		}
		/* On success the receiver lets go (detached and freed); on a failure it stays the
		 * owner, so that the undo below reads the blocks of what came through it. */
		if (rc == 0)
			rc = pool_ds_take_owner(ds, NULL, NULL);
	}
	if (ds)
		pool_ds_close(ds);
	if (rv)
		pfs_recv_free(rv);
	if (rc == 0) {
		char full[POOL_SNAP_FULL_MAX + 1];
		snprintf(full, sizeof(full), "%s@%s", fs, b.b_snap.se_name);
		rc = pool_snapshot_create_received(p, full, &b.b_snap, err, err_len);
	}
	if (rc == 0 && (rc = pool_ds_open(p, fs, &ds)) == 0) {
		rc = pool_ds_set_receiving(ds, false);
		pool_ds_close(ds);
	}
	if (rc != 0 && (marked || b.b_kind == PFS_SEND_FULL)) {
		char undo_err[256] = "";
		if (err[0] == '\0')
			snprintf(err, err_len, "%s", sh_strerror(rc));
		int undo = pool_recv_undo(p, fs, undo_err, sizeof(undo_err));
		if (undo != 0)
			log_error("pool %s: a failed receive into %s could not be undone: %s (the next "
			          "import undoes it)",
			          pool_name(p), fs, undo_err);
	}
	pfs_reader_fini(&r);
	return rc;
}
