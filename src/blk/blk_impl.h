/* blk_impl.h: what the blk layer's own files share: the leaf structure, the engine's internal
 * entry points, little-endian helpers and a small fan-out waiter for synchronous batches. Not for
 * use outside src/blk. */
#ifndef SHALE_BLK_IMPL_H
#define SHALE_BLK_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "blk/blk.h"

/* An internal operation: completes with status 0 on the engine thread without touching a device.
 * Used to run a completion on the engine thread when there is nothing to read or write (a block
 * read of a bad pointer, for instance). Never visible to callers of blk.h. */
#define BLK_IO_NOP ((enum blk_io_op)3)

/* The data area starts after the two front labels and ends before the two back labels. */
#define BLK_DATA_START_BYTES ((uint64_t)BLK_LABEL_AREA_BYTES)
/* The smallest leaf a vdev accepts: four labels and at least 1 MiB of data. */
#define BLK_MIN_LEAF_BYTES (4ull * BLK_LABEL_BYTES + 1024ull * 1024ull)

enum blk_dev_kind { BLK_DEV_FILE = 0, BLK_DEV_MEM = 1, BLK_DEV_FAULT = 2 };

/* One recorded event of a fault leaf: a completed write (fe_data holds a copy of its bytes) or a
 * flush (fe_data NULL, fe_len 0). */
struct blk_fault_event {
	uint64_t fe_offset;
	uint32_t fe_len;
	bool fe_flush;
	uint8_t *fe_data;
	uint64_t fe_seq; /* process-wide order of recorded events (blk_fault_global_seq) */
};

struct blk_dev {
	enum blk_dev_kind bd_kind;
	uint64_t bd_size;        /* usable bytes, a multiple of BLK_LABEL_BYTES */
	char *bd_path;           /* file: the path; "" for memory leaves */
	int bd_fd;               /* file: the descriptor; -1 otherwise */
	bool bd_direct;          /* file: opened with O_DIRECT */
	bool bd_read_only;       /* writes and flushes fail with -EROFS: a file opened O_RDONLY,
	                          * or a memory leaf by blk_dev_set_read_only */
	uint8_t *bd_bytes;       /* mem and fault: the current contents */
	atomic_bool bd_pulled;   /* test hook: refuse all I/O */
	pthread_mutex_t bd_lock; /* guards the fields below */
	int bd_fail_reads;       /* test hook: reads still to fail */
	int bd_fail_writes;      /* test hook: writes still to fail */
	/* fault leaf only: the flushed image as of the last trim, and the events since */
	uint8_t *bd_base;
	struct blk_fault_event *bd_events;
	size_t bd_nevents;
	size_t bd_events_cap;
};

/* blk_dev.c: served by the engine thread. */
/* The test hooks: -EIO when the leaf is pulled or an injected failure is due (and consumes it);
 * and -EROFS for a write or flush to a leaf opened read only. */
int blk_dev_hook_status(struct blk_dev *dev, enum blk_io_op op);
/* Performs io on a memory or fault leaf (memcpy, recording for the fault leaf). */
int blk_dev_mem_execute(struct blk_dev *dev, const struct blk_io *io);
/* Performs io on a file leaf with pread/pwrite/fdatasync (the engine's fallback path), at most
 * max_chunk bytes per call. */
int blk_dev_file_execute(struct blk_dev *dev, const struct blk_io *io, uint32_t max_chunk);

/* blk_engine.c */
/* 0 when io's arguments are acceptable for its device, else -EINVAL. */
int blk_io_check(const struct blk_io *io);
/* True when engine serves file leaves through io_uring, false on the pread/pwrite fallback. */
bool blk_engine_uses_uring(const struct blk_engine *engine);
/* Test hook: split every file read and write into requests of at most bytes (a sector multiple),
 * so the engine's continuation of short transfers runs. Call while the engine is idle. */
void blk_engine_set_max_transfer(struct blk_engine *engine, uint32_t bytes);
/* Test hooks for rule 8: how many background writes have joined another's group, and failing
 * the next n groups as if the kernel had (their members are then written one by one). */
uint64_t blk_engine_aggregated(const struct blk_engine *engine);
void blk_engine_fail_groups(struct blk_engine *engine, unsigned n);
/* True when the calling thread is engine's completion thread. */
bool blk_engine_on_thread(const struct blk_engine *engine);
/* Runs fn(arg, status) on the engine thread without allocating (for reporting a failure to
 * allocate). If too many are pending at once it runs fn inline and logs it. */
void blk_engine_defer_status(struct blk_engine *engine, void (*fn)(void *arg, int status),
                             void *arg, int status);
/* blk_bp.c: turns the psize physical bytes of a block into its lsize logical bytes in out. 0, or
 * -EIO when they do not decompress to exactly lsize bytes. */
int blk_decompress(uint8_t compress, const void *phys, uint32_t psize, void *out, uint32_t lsize);
/* The engine a vdev was created with (blk_vdev.c). */
struct blk_engine *blk_vdev_engine(const struct blk_vdev *vdev);

/* ---- little-endian helpers for the on-disk formats ---- */
static inline void blk_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void blk_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t blk_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t blk_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* blk_label.c: the codecs of a label's header area and of an uberblock slot (formats in
 * blk_label.c's theory comment). The decoders take bytes read from a device: hostile. */
#define BLK_LABEL_HEADER_BYTES (16u * 1024u)
/* Encodes label into out (BLK_LABEL_HEADER_BYTES, checksum included). */
void blk_label_encode(const struct blk_label *label, uint8_t *out);
/* Decodes BLK_LABEL_HEADER_BYTES at in (zeroes the checksum field while checking it, then puts
 * it back): 0 for a valid label, -ENOENT for one that is not a label, -EINVAL for checksummed
 * nonsense. */
SH_MUST_CHECK int blk_label_decode(uint8_t *in, struct blk_label *out);
/* Encodes ub into out (one BLK_UB_SLOT_BYTES slot, checksum included). */
void blk_ub_encode(const struct blk_uberblock *ub, uint8_t *out);
/* True when the slot at in (BLK_UB_SLOT_BYTES) holds a valid uberblock of pool_guid, decoded
 * into out. */
bool blk_ub_decode(const uint8_t *in, uint64_t pool_guid, struct blk_uberblock *out);

static inline uint64_t blk_round_up(uint64_t v, uint64_t unit)
{
	return (v + unit - 1) / unit * unit;
}

#endif
