/* blk.h: checksummed block I/O for the pool: leaf devices (file, block device, memory, and a
 * fault-injecting recorder for crash tests), an asynchronous I/O engine over io_uring, top-level
 * vdevs (one leaf or an N-way mirror), vdev labels with the uberblock ring, and block pointers.
 *
 * Model (the full theory and the on-disk tables are at the top of blk_vdev.c and blk_label.c):
 *   - A leaf (struct blk_dev) is a byte range with read, write and flush. Every offset and length
 *     is a multiple of BLK_SECTOR_BYTES and every buffer is aligned to it, on every kind of leaf
 *     (the memory leaf checks it too, so a misaligned caller fails in tests, not only in
 *     production with O_DIRECT).
 *   - An engine (struct blk_engine) owns one completion thread and one io_uring. blk_submit may be
 *     called from any thread; bi_done always runs on the engine's thread, never inside blk_submit,
 *     so a callback may submit more I/O without recursion. Memory and fault leaves are served by
 *     the same thread, so their completions are ordered and deterministic.
 *   - Flush semantics: a FLUSH completes after every write that had completed before the flush was
 *     submitted is on stable storage. Writes in flight together are unordered.
 *   - A top-level vdev (struct blk_vdev) is one leaf or a mirror of N leaves of (at least) the same
 *     usable size. Block writes go to every child; block reads go to one child, and a child whose
 *     copy fails its checksum is read around and rewritten from a good copy (self-healing).
 *   - A block pointer (struct blk_ptr, 64 bytes on disk) names a block: where it is (vdev index,
 *     byte offset, allocated size), its physical and logical size, compression, type, level, the
 *     txg it was born in, and the XXH3-128 checksum of its physical bytes. An all-zero pointer is a
 *     hole.
 *
 * Ownership: the caller owns every struct blk_io and buffer it passes until bi_done (or the
 * synchronous wrapper) returns. Devices are owned by whoever created them; a vdev does not own its
 * leaves. */
#ifndef SHALE_BLK_H
#define SHALE_BLK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define BLK_SECTOR_BYTES 4096u                 /* every I/O unit; ashift 12 */
#define BLK_LABEL_BYTES (256u * 1024u)         /* each of the 4 labels per leaf */
#define BLK_LABEL_AREA_BYTES (2u * BLK_LABEL_BYTES) /* 2 labels at each end */
#define BLK_UB_SLOT_BYTES 4096u                /* one uberblock per slot, one sector: atomic */
#define BLK_UB_RING_SLOTS 32u                  /* uberblock for txg T lives in slot T % 32 */
#define BLK_CONFIG_MAX_BYTES (12u * 1024u)     /* the label's pool configuration text */
#define BLK_MAX_BLOCK_BYTES (1024u * 1024u)    /* largest logical block */
#define BLK_MIRROR_MAX 8u                      /* children of a mirror */
#define BLK_UB_ROOTS 8u                        /* block pointers an uberblock carries */
#define BLK_UB_PAYLOAD_BYTES 1024u             /* opaque bytes an uberblock carries */

/* ---------------------------------------------------------------------------------------------
 * Leaf devices */

struct blk_dev;

/* Opens a file or block device for pool I/O (O_DIRECT when the file system allows it, buffered
 * otherwise). create_bytes > 0 creates the file at that size (it must not exist); 0 opens an
 * existing one. The usable size is rounded down to a multiple of BLK_LABEL_BYTES. The leaf is
 * locked (flock) for as long as it is open: another open of it, by this or another process, gets
 * -EBUSY. Returns 0 or -errno; destroy with blk_dev_close. */
SH_MUST_CHECK int blk_dev_open_file(const char *path, uint64_t create_bytes, struct blk_dev **dev_out);
/* The same for reading only: O_RDONLY, under a shared lock (other read-only opens may hold it
 * too; blk_dev_open_file of the leaf meanwhile gets -EBUSY, and this gets -EBUSY while a writer
 * holds it). Every write or flush submitted to the leaf fails with -EROFS, and a mirror's read
 * does not rewrite a bad copy on it. */
SH_MUST_CHECK int blk_dev_open_file_read_only(const char *path, struct blk_dev **dev_out);
bool blk_dev_read_only(const struct blk_dev *dev);
/* A zero-filled leaf in memory of size_bytes (a multiple of BLK_LABEL_BYTES). */
SH_MUST_CHECK int blk_dev_create_mem(uint64_t size_bytes, struct blk_dev **dev_out);
/* A memory leaf that records every completed write and flush, in completion order, for crash
 * simulation (blk_fault_*). Its reads see every completed write. */
SH_MUST_CHECK int blk_dev_create_fault(uint64_t size_bytes, struct blk_dev **dev_out);
void blk_dev_close(struct blk_dev *dev);
uint64_t blk_dev_size(const struct blk_dev *dev);
const char *blk_dev_path(const struct blk_dev *dev); /* "" for memory leaves */

/* Test hooks on any leaf: fail the next n reads or writes with -EIO (n < 0: off), and make the
 * leaf refuse all I/O with -EIO as if pulled (pulled = true). */
void blk_dev_inject_errors(struct blk_dev *dev, int fail_reads, int fail_writes);
void blk_dev_set_pulled(struct blk_dev *dev, bool pulled);
/* Test hook: a memory or fault leaf behaves as if opened read only (blk_dev_open_file_read_only)
 * while read_only is set. Change it only while no engine serves the leaf. */
void blk_dev_set_read_only(struct blk_dev *dev, bool read_only);
/* Test hook: direct access to a memory or fault leaf's bytes (NULL for others), e.g. to corrupt a
 * block behind the pool's back. */
uint8_t *blk_dev_mem_bytes(struct blk_dev *dev);

/* ---- crash simulation on a fault leaf ----
 * The recorder holds the sequence of events: write(offset, bytes) and flush. A cut at event index
 * k (0 <= k <= blk_fault_event_count) simulates power loss just before event k: every write
 * before the last flush preceding k is kept; the writes after that flush and before k were in the
 * drive's volatile cache and are kept, dropped or torn according to the mode and seed. */
enum blk_fault_mode {
	BLK_FAULT_KEEP_ALL = 0,    /* all unflushed writes reached the media */
	BLK_FAULT_DROP_ALL = 1,    /* none did */
	BLK_FAULT_DROP_RANDOM = 2, /* a random subset did (seeded) */
	BLK_FAULT_TEAR = 3,        /* a random subset did, and one of them only in part: a random
	                            * prefix of its sectors */
	BLK_FAULT_REORDER = 4,     /* a random subset, applied in a random order (overlaps resolve
	                            * to the last applied) */
};
size_t blk_fault_event_count(const struct blk_dev *dev);
bool blk_fault_event_is_flush(const struct blk_dev *dev, size_t index);
/* Builds the device image after a cut as a new memory leaf of the same size. Returns 0 or -errno. */
SH_MUST_CHECK int blk_fault_image(const struct blk_dev *dev, size_t cut_index, enum blk_fault_mode mode,
				  uint64_t seed, struct blk_dev **image_out);
/* Forgets recorded events up to the last flush (keeps memory bounded in long tests). */
void blk_fault_trim(struct blk_dev *dev);
/* Cutting several fault leaves at one instant. Every recorded event of every fault leaf in the
 * process is stamped with a number from one process-wide counter, taken when the event is
 * recorded. All leaves of one engine are served by its single thread, so these numbers order
 * their events exactly as they happened. blk_fault_global_seq returns the number the next
 * recorded event will get (= the events recorded so far, process-wide); a caller that reads it
 * on the engine thread, e.g. in a completion callback, learns a bound on everything recorded
 * before. blk_fault_events_before returns the index of dev's first event (counting from the last
 * trim, as blk_fault_image's cut_index does) whose number is >= global_seq: the cut of dev at
 * the instant global_seq was handed out. Cutting every leaf at blk_fault_events_before(leaf, g)
 * gives images of one single moment across leaves. */
uint64_t blk_fault_global_seq(void);
size_t blk_fault_events_before(const struct blk_dev *dev, uint64_t global_seq);

/* ---------------------------------------------------------------------------------------------
 * The engine and raw I/O */

struct blk_engine;

/* Starts the completion thread and its io_uring (queue_depth entries). When io_uring is not
 * available (old kernel, seccomp) it logs once and serves file leaves with pread/pwrite/fdatasync
 * on its own thread instead. Returns 0 or -errno; stop with blk_engine_destroy, which waits for
 * every submitted I/O to complete first. */
SH_MUST_CHECK int blk_engine_create(unsigned queue_depth, struct blk_engine **engine_out);
void blk_engine_destroy(struct blk_engine *engine);

enum blk_io_op { BLK_IO_READ = 0, BLK_IO_WRITE = 1, BLK_IO_FLUSH = 2 };

struct blk_io;
typedef void (*blk_io_done_fn)(struct blk_io *io);

struct blk_io {
	enum blk_io_op bi_op;      /* (in) */
	struct blk_dev *bi_dev;    /* (in) */
	uint64_t bi_offset;        /* (in) bytes, sector-aligned (ignored for FLUSH) */
	void *bi_buf;              /* (in) sector-aligned (ignored for FLUSH) */
	uint32_t bi_len;           /* (in) bytes, a multiple of the sector (0 for FLUSH) */
	blk_io_done_fn bi_done;    /* (in) runs on the engine thread */
	void *bi_arg;              /* (in) the caller's own pointer */
	int bi_status;             /* (out) 0 or -errno; a short transfer is -EIO */
	bool bi_background;        /* (in) yields to every other io (blk_engine.c, rule 6) */
	struct blk_io *bi_next;    /* private to the engine */
	bool bi_alone;             /* private to the engine: never aggregated (rule 8) */
};

/* Starts io. Never fails synchronously: a bad argument completes with -EINVAL. */
void blk_submit(struct blk_engine *engine, struct blk_io *io);
/* Submits and waits (for tools, tests and the sync thread; never on an event-loop thread).
 * Returns io->bi_status. */
SH_MUST_CHECK int blk_io_sync(struct blk_engine *engine, struct blk_io *io);
/* Convenience wrappers over blk_io_sync. */
SH_MUST_CHECK int blk_read_sync(struct blk_engine *engine, struct blk_dev *dev, uint64_t offset, void *buf,
				uint32_t len);
SH_MUST_CHECK int blk_write_sync(struct blk_engine *engine, struct blk_dev *dev, uint64_t offset,
				 const void *buf, uint32_t len);
SH_MUST_CHECK int blk_flush_sync(struct blk_engine *engine, struct blk_dev *dev);

/* A synchronous batch: any number of ios submitted together, waited for together (never on an
 * event-loop thread). Each io's bi_done and bi_arg are taken over by the batch; each io's
 * bi_status is its own outcome once blk_batch_wait returns. */
struct blk_batch {
	pthread_mutex_t bb_lock;
	pthread_cond_t bb_cond;
	unsigned bb_pending;
	int bb_status; /* the first error */
};
void blk_batch_init(struct blk_batch *batch);
void blk_batch_submit(struct blk_batch *batch, struct blk_engine *engine, struct blk_io *io);
/* Waits for every submitted io; returns the first error or 0. Destroys the batch. */
SH_MUST_CHECK int blk_batch_wait(struct blk_batch *batch);

/* A sector-aligned, zeroed buffer of bytes rounded up to the sector; free with mem_free. */
void *blk_buf_alloc(size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * Top-level vdevs */

struct blk_vdev;

/* A top-level vdev over nchildren leaves (1 = a plain leaf, 2..BLK_MIRROR_MAX = a mirror). Its
 * data area is the smallest child's size less the label areas at both ends. The vdev does not own
 * the leaves. Returns 0 or -errno; destroy with blk_vdev_destroy. */
SH_MUST_CHECK int blk_vdev_create(struct blk_engine *engine, struct blk_dev *const *children, unsigned nchildren,
				  struct blk_vdev **vdev_out);
void blk_vdev_destroy(struct blk_vdev *vdev);
unsigned blk_vdev_children(const struct blk_vdev *vdev);
struct blk_dev *blk_vdev_child(const struct blk_vdev *vdev, unsigned index);
/* The data area: [blk_vdev_data_start, blk_vdev_data_start + blk_vdev_data_bytes). Block and raw
 * offsets below are absolute device offsets inside that range. */
uint64_t blk_vdev_data_start(const struct blk_vdev *vdev);
uint64_t blk_vdev_data_bytes(const struct blk_vdev *vdev);

/* Raw vdev I/O (the intent log's own records, which carry their own checksums): a write goes to
 * every child that is not faulted and completes when all have; a flush flushes each of them. On a
 * mirror, a write or flush succeeds when at least one child's did, and every child whose failed is
 * faulted (written around from then on: blk_vdev_child_faulted); when every child fails, the
 * status is the first error. A read is served by one child, chosen by `child` (modulo the child
 * count) so a caller that finds a bad copy can ask the next one. Same alignment rules as blk_io. */
struct blk_vdev_io {
	enum blk_io_op vi_op;     /* (in) */
	struct blk_vdev *vi_vdev; /* (in) */
	uint64_t vi_offset;       /* (in) */
	void *vi_buf;             /* (in) */
	uint32_t vi_len;          /* (in) */
	unsigned vi_child;        /* (in) READ only */
	bool vi_background;       /* (in) WRITE only: the children's ios are background ones */
	void (*vi_done)(struct blk_vdev_io *vio); /* (in) runs on the engine thread */
	void *vi_arg;             /* (in) */
	int vi_status;            /* (out) */
	/* private */
	struct blk_io vi_ios[BLK_MIRROR_MAX];
	unsigned vi_pending;
	uint32_t vi_sent; /* children written or flushed (bit i: child i) */
};
void blk_vdev_submit(struct blk_vdev_io *vio);
SH_MUST_CHECK int blk_vdev_io_sync(struct blk_vdev_io *vio);

/* Per-vdev counters, for `shale pool status`. */
struct blk_vdev_stats {
	uint64_t vs_reads, vs_writes, vs_flushes;
	uint64_t vs_read_bytes, vs_write_bytes;
	uint64_t vs_checksum_errors; /* copies that failed their checksum */
	uint64_t vs_io_errors;       /* reads or writes that failed */
	uint64_t vs_repairs;         /* bad copies rewritten from a good one */
	bool vs_faulted;             /* written around since a write or flush of it failed */
	bool vs_stale;               /* may hold stale copies (blk_vdev_set_stale) */
};
/* True once a write or flush of child `child` failed while another child's succeeded: the child
 * is then neither written, flushed, read nor repaired (unless no other child is left to read), so
 * its copies may be stale until the pool is imported again and checked. Only a mirror child is
 * ever faulted; a vdev keeps the state for its life. */
bool blk_vdev_child_faulted(const struct blk_vdev *vdev, unsigned child);
/* Marks child `child` of a mirror as one that may hold stale copies (it missed writes while the
 * pool ran without it, as the pool's record says at import), or clears the mark (a check has
 * rewritten its copies). A stale child is written and repaired like any other, but a read tries
 * it only after the children that are current (and before faulted ones). No-op on a single
 * leaf. */
void blk_vdev_set_stale(struct blk_vdev *vdev, unsigned child, bool stale);
bool blk_vdev_child_stale(const struct blk_vdev *vdev, unsigned child);
/* Counters of child `child` of vdev. */
void blk_vdev_stats(const struct blk_vdev *vdev, unsigned child, struct blk_vdev_stats *stats_out);

/* ---------------------------------------------------------------------------------------------
 * Block pointers and checksummed blocks */

enum blk_compress { BLK_COMPRESS_OFF = 0, BLK_COMPRESS_LZ4 = 1, BLK_COMPRESS_ZSTD = 2 };
enum blk_checksum { BLK_CHECKSUM_XXH3_128 = 1 };

/* In memory. On disk it is the 64-byte little-endian layout in the table at the top of blk_bp.c. */
struct blk_ptr {
	uint32_t bp_vdev;        /* top-level vdev index */
	uint64_t bp_offset;      /* absolute byte offset on that vdev's children, sector-aligned */
	uint32_t bp_asize;       /* allocated bytes (psize rounded up to the sector) */
	uint32_t bp_psize;       /* physical bytes (after compression) */
	uint32_t bp_lsize;       /* logical bytes */
	uint8_t bp_compress;     /* enum blk_compress */
	uint8_t bp_checksum;     /* enum blk_checksum */
	uint8_t bp_type;         /* the store's block type; blk does not interpret it */
	uint8_t bp_level;        /* 0 for data and leaves; the store's meaning above */
	uint64_t bp_birth_txg;   /* 0 only for a hole */
	uint8_t bp_cksum[16];    /* XXH3-128 of the bp_psize physical bytes */
	uint64_t bp_fill;        /* the store's count (entries, objects); blk does not interpret it */
};
#define BLK_PTR_DISK_BYTES 64u

bool blk_ptr_is_hole(const struct blk_ptr *bp);
/* Whether a and b name the same block: the same place, written in the same txg (the identity
 * the cache and the pool's maps key by; a block's place is reused only in a later txg). */
bool blk_ptr_same_block(const struct blk_ptr *a, const struct blk_ptr *b);
/* Encodes bp into exactly BLK_PTR_DISK_BYTES bytes. */
void blk_ptr_encode(const struct blk_ptr *bp, uint8_t out[BLK_PTR_DISK_BYTES]);
/* Decodes and sanity-checks (sizes, alignment, known enums); -EINVAL for nonsense. A hole decodes
 * to an all-zero pointer. */
SH_MUST_CHECK int blk_ptr_decode(const uint8_t in[BLK_PTR_DISK_BYTES], struct blk_ptr *bp_out);

/* A block made ready to write: compressed (when that saves at least 1/8), padded with zeros to the
 * sector, and checksummed. bw_psize and bw_asize tell the allocator how much space to find. */
struct blk_prepared {
	void *bw_buf;        /* sector-aligned, bw_asize bytes: owned, or lent when bw_lent */
	uint32_t bw_lsize;
	uint32_t bw_psize;
	uint32_t bw_asize;
	uint8_t bw_compress; /* what was actually used */
	bool bw_lent;        /* bw_buf is the caller's data itself (blk_prepare_lend), not owned */
	uint8_t bw_cksum[16];
};
/* Prepares lsize bytes of data (1 <= lsize <= BLK_MAX_BLOCK_BYTES) with the wanted compression.
 * Returns 0 or -ENOMEM; release with blk_prepared_fini. */
SH_MUST_CHECK int blk_prepare(const void *data, uint32_t lsize, enum blk_compress compress,
			      struct blk_prepared *out);
/* blk_prepare, except that a block stored uncompressed (compress OFF, or compression saved too
 * little) whose data is sector-aligned and whose lsize is a multiple of the sector is not copied:
 * bw_buf is data itself and bw_lent is set. The caller then keeps data alive and unchanged until
 * the write is done or the prepared block finished (blk_prepared_fini leaves it alone), or
 * makes the block own a copy first (blk_prepared_own). */
SH_MUST_CHECK int blk_prepare_lend(const void *data, uint32_t lsize, enum blk_compress compress,
                                   struct blk_prepared *out);
/* A lent prepared block takes a copy of its bytes of its own: 0 or -ENOMEM (still lent). */
SH_MUST_CHECK int blk_prepared_own(struct blk_prepared *prepared);
/* Prepares a block from bytes as another pool stored them (psize bytes compressed with compress,
 * lsize logical; a `send -c` stream's), without compressing again: they are first decompressed
 * into logical_out (lsize bytes), and -EINVAL is returned unless that gives exactly lsize bytes,
 * so that nothing unreadable is ever written. Returns 0, -EINVAL, or -ENOMEM. */
SH_MUST_CHECK int blk_prepare_stored(const void *phys, uint32_t psize, uint32_t lsize,
                                     enum blk_compress compress, void *logical_out,
                                     struct blk_prepared *out);
void blk_prepared_fini(struct blk_prepared *prepared);
/* Fills bp for a prepared block placed at (vdev_index, offset) with the given type, level, birth
 * and fill. */
void blk_ptr_fill(struct blk_ptr *bp, const struct blk_prepared *prepared, uint32_t vdev_index,
		  uint64_t offset, uint8_t type, uint8_t level, uint64_t birth_txg, uint64_t fill);

/* Writes a prepared block to every child of vdev at bp->bp_offset. The prepared buffer must stay
 * alive until done runs. done(arg, status) runs on the engine thread. A background write (a
 * transaction group's blocks) yields to every other io: few of them are in flight at once, so
 * that a log write or a read never queues behind a whole txg in the device (blk_engine.c). */
void blk_block_write(struct blk_vdev *vdev, const struct blk_ptr *bp, const struct blk_prepared *prepared,
		     bool background, void (*done)(void *arg, int status), void *arg);
/* Reads the block bp names from vdev into out (bp->bp_lsize bytes, any alignment), verifying the
 * checksum and decompressing. A copy that fails its checksum or read is counted and read around;
 * once a good copy is found, each bad child is rewritten from it before done runs. No good copy:
 * -EIO (checksum) or the read error, and out's bytes are undefined. done(arg, status) runs on the
 * engine thread. A block stored uncompressed in whole sectors (lsize == asize) is read straight
 * into out when out is sector-aligned (BLK_SECTOR_BYTES): no bounce buffer, no copy. */
void blk_block_read(struct blk_vdev *vdev, const struct blk_ptr *bp, void *out,
		    void (*done)(void *arg, int status), void *arg);
SH_MUST_CHECK int blk_block_read_sync(struct blk_vdev *vdev, const struct blk_ptr *bp, void *out);
/* The same without decompressing: out receives the bp->bp_psize bytes as stored (compressed
 * with bp->bp_compress), once they match the checksum; bad copies are read around and repaired
 * as above. Not a hole. Blocks; not on the engine thread (-EDEADLK). */
SH_MUST_CHECK int blk_block_read_raw_sync(struct blk_vdev *vdev, const struct blk_ptr *bp,
                                          void *out);
SH_MUST_CHECK int blk_block_write_sync(struct blk_vdev *vdev, const struct blk_ptr *bp,
				       const struct blk_prepared *prepared);

/* XXH3-128 of bytes, as stored in block pointers, labels, uberblocks and log records. */
void blk_checksum(const void *data, size_t len, uint8_t out[16]);

/* ---------------------------------------------------------------------------------------------
 * Labels and the uberblock ring */

/* What each leaf's four labels say. The configuration is the pool's text (key=value lines, see
 * the store); blk stores and checks it but does not parse it. */
struct blk_label {
	uint64_t lb_pool_guid;
	uint64_t lb_leaf_guid;
	uint64_t lb_top_guid;      /* the top-level vdev this leaf belongs to */
	uint32_t lb_top_index;     /* its index in the pool; UINT32_MAX for a log vdev's leaves */
	uint64_t lb_config_txg;    /* txg at which this configuration was written */
	uint64_t lb_leaf_bytes;    /* the leaf's usable size when labelled */
	char lb_pool_name[64];     /* NUL-terminated */
	uint32_t lb_config_len;
	char lb_config[BLK_CONFIG_MAX_BYTES]; /* lb_config_len bytes, not NUL-terminated */
};

/* Writes all four labels of dev (label areas only; the uberblock rings are not touched) and
 * flushes. Returns 0 or -errno. */
SH_MUST_CHECK int blk_label_write(struct blk_engine *engine, struct blk_dev *dev, const struct blk_label *label);
/* Zeroes all four labels of dev, uberblock rings included, and flushes: dev is no longer any
 * pool's leaf (a detached one). Returns 0 or -errno. */
SH_MUST_CHECK int blk_label_wipe(struct blk_engine *engine, struct blk_dev *dev);
/* Reads the labels of dev and returns the valid one with the highest lb_config_txg; -ENOENT when
 * none is valid (not a pool device), -EINVAL on nonsense that passes the checksum. */
SH_MUST_CHECK int blk_label_read(struct blk_engine *engine, struct blk_dev *dev, struct blk_label *label_out);

struct blk_uberblock {
	uint64_t ub_txg;
	uint64_t ub_pool_guid;
	uint64_t ub_timestamp_ns;   /* CLOCK_REALTIME when written */
	uint32_t ub_nroots;         /* how many of ub_roots are meaningful */
	struct blk_ptr ub_roots[BLK_UB_ROOTS]; /* the store's roots */
	uint8_t ub_payload[BLK_UB_PAYLOAD_BYTES]; /* the store's own fields */
};

/* Writes ub into slot ub_txg % BLK_UB_RING_SLOTS of all four labels of every leaf of every vdev
 * (top-level and log vdevs alike) but the faulted ones, then flushes them. The caller has flushed
 * the blocks ub refers to beforehand; the uberblock write is the commit point of the txg. Returns 0 or the first
 * error (the txg is durable when at least one copy is: import picks the best valid copy). */
SH_MUST_CHECK int blk_uberblock_write(struct blk_engine *engine, struct blk_vdev *const *vdevs, unsigned nvdevs,
				      const struct blk_uberblock *ub);
/* Scans every ring slot of every label of dev and returns the valid uberblock of pool_guid with the
 * highest txg; -ENOENT when there is none. */
SH_MUST_CHECK int blk_uberblock_find_best(struct blk_engine *engine, struct blk_dev *dev, uint64_t pool_guid,
					  struct blk_uberblock *ub_out);

#endif
