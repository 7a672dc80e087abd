/* ilog_replay.c: reading the intent log's chain back after a crash (format and theory: ilog.c).
 *
 * Replay follows the chain from a position the store kept. For each expected block it looks at the
 * copy of one mirror child after another until one continues the chain: the magic, pool guid, log
 * guid, sequence number and predecessor checksum are the ones expected and the size is sane (else
 * the copy is stale, garbage, or torn before its first sector was written), and the XXH3-128 of
 * the block matches (else it is torn or damaged). The first block no child has a good copy of ends
 * the chain: that is the normal end, not an error, unless no child could be read at all (then it
 * is -EIO: an unreadable block cannot be shown to be the end). Bytes are read through a window
 * (below), so a chain of small blocks costs few device round trips.
 *
 * Everything read is hostile. The checks before the checksum decide only whether the chain goes
 * on. A block whose checksum passes but whose contents are inconsistent (version, first LSN, byte
 * counts, record lengths, flags, LSNs, padding) was written by no correct writer: replay fails
 * with -EIO rather than guess. Every record of a block is checked before the first is visited, so
 * a visit never sees a record of a block that is later found bad. */
#include <errno.h>
#include <string.h>

#include "ilog/ilog_impl.h"

bool ilog_replay_header_ok(const uint8_t *buf, const struct ilog_position *pos,
                           uint64_t pool_guid, uint32_t *bytes_out)
{
	if (ilog_get64(buf + ILOG_BH_MAGIC) != ILOG_MAGIC ||
	    ilog_get64(buf + ILOG_BH_POOL_GUID) != pool_guid ||
	    ilog_get64(buf + ILOG_BH_LOG_GUID) != pos->ip_log_guid ||
	    ilog_get64(buf + ILOG_BH_SEQ) != pos->ip_seq ||
	    memcmp(buf + ILOG_BH_PREV_CKSUM, pos->ip_prev_cksum, 16) != 0)
		return false;
	uint32_t bytes = ilog_get32(buf + ILOG_BH_BYTES);
	if (bytes < BLK_SECTOR_BYTES || bytes > ILOG_BLOCK_MAX || bytes % BLK_SECTOR_BYTES != 0)
		return false;
	*bytes_out = bytes;
	return true;
}

/* Replay reads the region through a window of one child: blocks are contiguous along the chain,
 * so one read usually brings many of them. The window starts at ILOG_REPLAY_WINDOW_MIN bytes (a
 * short chain, the common case after a recent checkpoint, costs little) and doubles with every
 * read up to ILOG_BLOCK_MAX, so a long chain of small blocks costs one device round trip per
 * megabyte rather than two per block. */
#define ILOG_REPLAY_WINDOW_MIN (64u * 1024u)

struct ilog_replay_win {
	struct blk_engine *rw_engine;
	struct blk_vdev *rw_vdev;
	uint8_t *rw_buf;    /* ILOG_BLOCK_MAX bytes, sector-aligned */
	uint64_t rw_offset; /* device offset of rw_buf[0] */
	uint32_t rw_len;    /* bytes held; 0 when empty */
	uint32_t rw_size;   /* bytes the next read asks for, at least */
	unsigned rw_child;  /* whose bytes they are */
};

/* Makes [off, off + len) of child `child` available in the window and returns a pointer to it.
 * The caller guarantees off + ILOG_BLOCK_MAX is within the region (a position check). When the
 * whole window cannot be read (a bad sector further on), only the bytes asked for are. */
static int ilog_replay_win_load(struct ilog_replay_win *win, unsigned child, uint64_t off,
                                uint32_t len, const uint8_t **out)
{
	if (win->rw_len == 0 || win->rw_child != child || off < win->rw_offset ||
	    off + len > win->rw_offset + win->rw_len) {
		struct blk_dev *dev = blk_vdev_child(win->rw_vdev, child);
		uint32_t want = SH_MAX(len, win->rw_size);
		win->rw_size = SH_MIN(2 * win->rw_size, ILOG_BLOCK_MAX);
		int rc = blk_read_sync(win->rw_engine, dev, off, win->rw_buf, want);
		if (rc != 0 && len < want) {
			want = len;
			rc = blk_read_sync(win->rw_engine, dev, off, win->rw_buf, want);
		}
		if (rc != 0) {
			win->rw_len = 0;
			return rc;
		}
		win->rw_offset = off;
		win->rw_len = want;
		win->rw_child = child;
	}
	*out = win->rw_buf + (off - win->rw_offset);
	return 0;
}

/* Finds a copy of the block at pos that continues the chain, trying the window's child first and
 * then the others. Returns 1 (*block_out points at it in the window, *bytes_out is its size), 0
 * (no child has one: the chain ends here), or the read error when no child could be read. */
static int ilog_replay_read_block(struct ilog_replay_win *win, const struct ilog_position *pos,
                                  uint64_t pool_guid, uint8_t **block_out, uint32_t *bytes_out)
{
	unsigned nchildren = blk_vdev_children(win->rw_vdev);
	unsigned first = win->rw_len ? win->rw_child : 0;
	bool readable = false;
	int read_error = -EIO;
	for (unsigned i = 0; i < nchildren; i++) {
		unsigned child = (first + i) % nchildren;
		const uint8_t *block;
		int rc = ilog_replay_win_load(win, child, pos->ip_offset, BLK_SECTOR_BYTES, &block);
		if (rc != 0) {
			read_error = rc;
			continue;
		}
		readable = true;
		uint32_t bytes;
		if (!ilog_replay_header_ok(block, pos, pool_guid, &bytes))
			continue;
		if (ilog_replay_win_load(win, child, pos->ip_offset, bytes, &block) != 0)
			continue;
		/* The window is ours: the checksum field is zeroed and restored in place. */
		uint8_t *b = win->rw_buf + (block - win->rw_buf);
		uint8_t cksum[16];
		ilog_block_cksum(b, bytes, cksum);
		if (memcmp(cksum, b + ILOG_BH_CKSUM, 16) != 0)
			continue;
		*block_out = b;
		*bytes_out = bytes;
		return 1;
	}
	return readable ? 0 : read_error;
}

int64_t ilog_replay_check_block(const uint8_t *buf, uint32_t bytes,
                                const struct ilog_position *pos)
{
	uint32_t used = ilog_get32(buf + ILOG_BH_USED);
	uint32_t nrecords = ilog_get32(buf + ILOG_BH_NRECORDS);
	if (ilog_get32(buf + ILOG_BH_VERSION) != ILOG_VERSION ||
	    ilog_get64(buf + ILOG_BH_FIRST_LSN) != pos->ip_next_lsn ||
	    used < ILOG_BLOCK_HEADER_BYTES || used > bytes || bytes - used >= BLK_SECTOR_BYTES ||
	    nrecords == 0 || nrecords > (used - ILOG_BLOCK_HEADER_BYTES) / ILOG_RECORD_HEADER_BYTES)
		return -EIO;
	uint64_t off = ILOG_BLOCK_HEADER_BYTES;
	for (uint32_t i = 0; i < nrecords; i++) {
		if (used - off < ILOG_RECORD_HEADER_BYTES)
			return -EIO;
		const uint8_t *r = buf + off;
		uint32_t len = ilog_get32(r + ILOG_RH_LEN);
		uint64_t rec_bytes =
		    ILOG_RECORD_HEADER_BYTES + (((uint64_t)len + 7) & ~(uint64_t)7);
		if (ilog_get16(r + ILOG_RH_FLAGS) != 0 ||
		    ilog_get64(r + ILOG_RH_LSN) != pos->ip_next_lsn + i || rec_bytes > used - off)
			return -EIO;
		for (uint64_t p = ILOG_RECORD_HEADER_BYTES + len; p < rec_bytes; p++)
			if (r[p] != 0)
				return -EIO;
		off += rec_bytes;
	}
	if (off != used)
		return -EIO;
	for (uint32_t p = used; p < bytes; p++)
		if (buf[p] != 0)
			return -EIO;
	return nrecords;
}

int64_t ilog_replay(struct blk_engine *engine, struct blk_vdev *vdev, uint64_t start,
                    uint64_t bytes, uint64_t pool_guid, const struct ilog_position *from,
                    ilog_visit_fn visit, void *arg, struct ilog_position *end_out)
{
	if (!engine || !visit)
		return -EINVAL;
	int rc = ilog_region_check(vdev, start, bytes);
	if (rc == 0)
		rc = ilog_position_check(from, start, bytes);
	if (rc != 0)
		return rc;
	struct ilog_replay_win win = {
	    .rw_engine = engine, .rw_vdev = vdev, .rw_size = ILOG_REPLAY_WINDOW_MIN};
	/* Not zeroed: only bytes a read has filled are ever looked at. */
	win.rw_buf = mem_aligned_alloc(BLK_SECTOR_BYTES, ILOG_BLOCK_MAX);
	if (!win.rw_buf)
		return -ENOMEM;
	struct ilog_position pos = *from;
	int64_t count = 0;
	/* A chain visits each block offset at most once (a revisited offset would need a second
	 * sequence number in the same bytes), so it ends within region/sector blocks. */
	for (;;) {
		uint32_t block_bytes = 0;
		uint8_t *buf = NULL;
		rc = ilog_replay_read_block(&win, &pos, pool_guid, &buf, &block_bytes);
		if (rc <= 0)
			break;
		int64_t nrecords = ilog_replay_check_block(buf, block_bytes, &pos);
		if (nrecords < 0) {
			log_ratelimited(LOG_WARN,
			                "ilog: replay: block %llu at offset %llu passes its "
			                "checksum but is inconsistent",
			                (unsigned long long)pos.ip_seq,
			                (unsigned long long)pos.ip_offset);
			rc = (int)nrecords;
			break;
		}
		uint64_t off = ILOG_BLOCK_HEADER_BYTES;
		for (int64_t i = 0; i < nrecords; i++) {
			const uint8_t *r = buf + off;
			uint32_t len = ilog_get32(r + ILOG_RH_LEN);
			rc = visit(arg, ilog_get16(r + ILOG_RH_TYPE), ilog_get64(r + ILOG_RH_TXG),
			           ilog_get64(r + ILOG_RH_LSN), r + ILOG_RECORD_HEADER_BYTES, len);
			if (rc < 0)
				goto out;
			off += ilog_record_bytes(len);
		}
		count += nrecords;
		memcpy(pos.ip_prev_cksum, buf + ILOG_BH_CKSUM, 16);
		pos.ip_seq++;
		pos.ip_next_lsn += (uint64_t)nrecords;
		pos.ip_offset = ilog_next_offset(start, start + bytes, pos.ip_offset + block_bytes);
	}
	if (rc == 0 && end_out)
		*end_out = pos;
out:
	mem_free(win.rw_buf);
	return rc < 0 ? rc : count;
}
