/* blk_vdev.c: top-level vdevs (one leaf or an N-way mirror), their raw I/O, and checksummed block
 * reads and writes with read-around and self-healing.
 *
 * Theory of the blk layer
 *   The pool stores blocks on top-level vdevs. A top-level vdev is one leaf or a mirror of up to
 *   BLK_MIRROR_MAX leaves; every leaf of a mirror holds the same bytes at the same offsets. Blocks
 *   are named by block pointers that carry the XXH3-128 checksum of their physical bytes, so a
 *   reader can tell a good copy from a bad one and needs no other metadata to do so.
 *
 *   Leaf layout (size = the leaf's usable size, a multiple of BLK_LABEL_BYTES = 256 KiB):
 *
 *     offset              size              what
 *     0                   256 KiB           label L0 (see blk_label.c for its inside)
 *     256 KiB             256 KiB           label L1
 *     512 KiB             size - 1 MiB      the data area (blocks, intent log records)
 *     size - 512 KiB      256 KiB           label L2
 *     size - 256 KiB      256 KiB           label L3
 *
 *   A vdev's data area is [512 KiB, min child size - 512 KiB): a mirror of unequal leaves uses the
 *   smallest one's size. Every child must hold the four labels and at least 1 MiB of data.
 *
 *   Writes of a block go to every child that is not faulted and complete when all have. Reads go
 *   to one child, chosen round-robin (vd_next_read) to spread the load; the copy is read into a
 *   sector-aligned bounce buffer of asize bytes, its first psize bytes are checksummed, then
 *   decompressed into the caller's buffer. A read error, a checksum mismatch or a decompression
 *   failure (counted as a checksum error: the bytes cannot be what was written) moves on to the
 *   next child. Once a good copy is found, every child that failed (unless pulled or faulted) is
 *   rewritten with the good asize bytes before the caller hears of the result: self-healing
 *   (except on a leaf opened read only, blk_dev_open_file_read_only, which is never written).
 *
 *   Write-around. When a write or flush of a mirror fails on some children and succeeds on at
 *   least one, the failed children become faulted (vd_faulted) and the operation succeeds: the
 *   data is on the others, as it would be had the device been missing from the start. A faulted
 *   child is no longer written or flushed, and reads try it only after every other child, so
 *   nothing waits on a dying device and its stale copies are not read while a current one exists.
 *   It stays faulted for the vdev's life (until the pool is imported again). The vdev writes
 *   nothing about the fault to disk; the pool records it (its uberblocks list the leaves that
 *   missed writes) and, at the next import, marks such a child stale (vd_stale): written like any
 *   other, read after the current children and before faulted ones, until a check has rewritten
 *   its copies and the pool clears the mark. Even without the mark nothing wrong would be read:
 *   every block is found through a pointer that carries its checksum, so a stale copy is a
 *   checksum error, read around and repaired; the intent log's reader tries each child's copy
 *   until one continues the chain (ilog_replay.c); and import takes the newest uberblock of any
 *   leaf. When every child fails, the status is the first error and nothing is faulted: the
 *   caller (the pool) suspends.
 *
 *   Invariants
 *     1. A vdev never touches bytes outside [data start, data start + data bytes) of its children;
 *        block and raw I/O outside that range completes with -EINVAL. Labels are written by
 *        blk_label.c straight to the leaves.
 *     2. Every completion (raw, block) runs on the engine thread, never inside the submitting call,
 *        even for a bad argument or a failed allocation (blk_engine_defer_status).
 *     3. Nothing decoded from disk is trusted: sizes and enums are checked before use and
 *        decompression is bounded by lsize.
 *
 *   Concurrency: a vdev is immutable after creation except for vd_next_read, vd_faulted, vd_stale
 *   and the counters, which are atomics (updated on the engine thread, vd_stale by the pool; read
 *   by anyone; a submission reads vd_faulted once and keeps to what it read). Per-operation state
 *   lives in the caller's struct blk_vdev_io or in a context allocated for one block read or
 *   write, touched only by the engine thread once submitted. */
#include <errno.h>

#include "blk/blk_impl.h"

struct blk_vdev_counters {
	_Atomic uint64_t vc_reads, vc_writes, vc_flushes;
	_Atomic uint64_t vc_read_bytes, vc_write_bytes;
	_Atomic uint64_t vc_checksum_errors, vc_io_errors, vc_repairs;
};

struct blk_vdev {
	struct blk_engine *vd_engine;
	unsigned vd_nchildren;
	struct blk_dev *vd_children[BLK_MIRROR_MAX];
	uint64_t vd_data_start;
	uint64_t vd_data_bytes;
	atomic_uint vd_next_read;
	atomic_bool vd_faulted[BLK_MIRROR_MAX];
	atomic_bool vd_stale[BLK_MIRROR_MAX]; /* may hold stale copies: read after the others */
	struct blk_vdev_counters vd_counters[BLK_MIRROR_MAX];
};

#define BLK_COUNT(counter, n) atomic_fetch_add_explicit(&(counter), (n), memory_order_relaxed)

int blk_vdev_create(struct blk_engine *engine, struct blk_dev *const *children, unsigned nchildren,
                    struct blk_vdev **vdev_out)
{
	*vdev_out = NULL;
	if (!engine || !children || nchildren == 0 || nchildren > BLK_MIRROR_MAX)
		return -EINVAL;
	uint64_t min_bytes = UINT64_MAX;
	for (unsigned i = 0; i < nchildren; i++) {
		if (!children[i] || children[i]->bd_size < BLK_MIN_LEAF_BYTES)
			return -EINVAL;
		for (unsigned j = 0; j < i; j++) {
			if (children[j] == children[i])
				return -EINVAL; /* a leaf mirrored with itself protects nothing */
		}
		min_bytes = SH_MIN(min_bytes, children[i]->bd_size);
	}
	struct blk_vdev *vdev = mem_zalloc(sizeof(*vdev));
	if (!vdev)
		return -ENOMEM;
	vdev->vd_engine = engine;
	vdev->vd_nchildren = nchildren;
	for (unsigned i = 0; i < nchildren; i++)
		vdev->vd_children[i] = children[i];
	vdev->vd_data_start = BLK_DATA_START_BYTES;
	vdev->vd_data_bytes = min_bytes - 2ull * BLK_LABEL_AREA_BYTES;
	atomic_init(&vdev->vd_next_read, 0);
	for (unsigned i = 0; i < BLK_MIRROR_MAX; i++) {
		atomic_init(&vdev->vd_faulted[i], false);
		atomic_init(&vdev->vd_stale[i], false);
	}
	*vdev_out = vdev;
	return 0;
}

void blk_vdev_destroy(struct blk_vdev *vdev)
{
	mem_free(vdev);
}

unsigned blk_vdev_children(const struct blk_vdev *vdev)
{
	return vdev->vd_nchildren;
}

struct blk_dev *blk_vdev_child(const struct blk_vdev *vdev, unsigned index)
{
	return index < vdev->vd_nchildren ? vdev->vd_children[index] : NULL;
}

uint64_t blk_vdev_data_start(const struct blk_vdev *vdev)
{
	return vdev->vd_data_start;
}

uint64_t blk_vdev_data_bytes(const struct blk_vdev *vdev)
{
	return vdev->vd_data_bytes;
}

struct blk_engine *blk_vdev_engine(const struct blk_vdev *vdev)
{
	return vdev->vd_engine;
}

void blk_vdev_stats(const struct blk_vdev *vdev, unsigned child, struct blk_vdev_stats *stats_out)
{
	memset(stats_out, 0, sizeof(*stats_out));
	if (child >= vdev->vd_nchildren)
		return;
	const struct blk_vdev_counters *c = &vdev->vd_counters[child];
	stats_out->vs_reads = atomic_load(&c->vc_reads);
	stats_out->vs_writes = atomic_load(&c->vc_writes);
	stats_out->vs_flushes = atomic_load(&c->vc_flushes);
	stats_out->vs_read_bytes = atomic_load(&c->vc_read_bytes);
	stats_out->vs_write_bytes = atomic_load(&c->vc_write_bytes);
	stats_out->vs_checksum_errors = atomic_load(&c->vc_checksum_errors);
	stats_out->vs_io_errors = atomic_load(&c->vc_io_errors);
	stats_out->vs_repairs = atomic_load(&c->vc_repairs);
	stats_out->vs_faulted = atomic_load(&vdev->vd_faulted[child]);
	stats_out->vs_stale = atomic_load(&vdev->vd_stale[child]);
}

bool blk_vdev_child_faulted(const struct blk_vdev *vdev, unsigned child)
{
	return child < vdev->vd_nchildren && atomic_load(&vdev->vd_faulted[child]);
}

void blk_vdev_set_stale(struct blk_vdev *vdev, unsigned child, bool stale)
{
	if (child < vdev->vd_nchildren && vdev->vd_nchildren > 1)
		atomic_store(&vdev->vd_stale[child], stale);
}

bool blk_vdev_child_stale(const struct blk_vdev *vdev, unsigned child)
{
	return child < vdev->vd_nchildren && atomic_load(&vdev->vd_stale[child]);
}

/* The children not faulted, as a bit mask. */
static uint32_t blk_vdev_live_mask(const struct blk_vdev *vdev)
{
	uint32_t mask = 0;
	for (unsigned i = 0; i < vdev->vd_nchildren; i++) {
		if (!atomic_load(&vdev->vd_faulted[i]))
			mask |= 1u << i;
	}
	return mask;
}

/* The order in which reads try child c: 0 for a current child, 1 for a stale one, 2 for a
 * faulted one. */
static unsigned blk_vdev_read_rank(const struct blk_vdev *vdev, unsigned c)
{
	return atomic_load(&vdev->vd_faulted[c]) ? 2u : atomic_load(&vdev->vd_stale[c]) ? 1u : 0u;
}

/* Counts one finished child io. */
static void blk_vdev_count(struct blk_vdev *vdev, unsigned child, const struct blk_io *io)
{
	struct blk_vdev_counters *c = &vdev->vd_counters[child];
	switch (io->bi_op) {
	case BLK_IO_READ:
		BLK_COUNT(c->vc_reads, 1);
		if (io->bi_status == 0)
			BLK_COUNT(c->vc_read_bytes, io->bi_len);
		break;
	case BLK_IO_WRITE:
		BLK_COUNT(c->vc_writes, 1);
		if (io->bi_status == 0)
			BLK_COUNT(c->vc_write_bytes, io->bi_len);
		break;
	case BLK_IO_FLUSH: BLK_COUNT(c->vc_flushes, 1); break;
	default: return;
	}
	if (io->bi_status != 0 && io->bi_status != -EINVAL)
		BLK_COUNT(c->vc_io_errors, 1);
}

/* True when [offset, offset + len) lies inside the vdev's data area. */
static bool blk_vdev_in_range(const struct blk_vdev *vdev, uint64_t offset, uint64_t len)
{
	uint64_t end = vdev->vd_data_start + vdev->vd_data_bytes;
	return offset >= vdev->vd_data_start && offset <= end && len <= end - offset;
}

/* ---- raw vdev I/O ---- */

/* A mirror write or flush has ended on every child it was sent to: it succeeded if one child's
 * did, and the children whose failed are faulted (write-around, theory above). */
static void blk_vdev_settle(struct blk_vdev_io *vio)
{
	struct blk_vdev *vdev = vio->vi_vdev;
	unsigned ok = 0;
	int first_error = 0;
	for (unsigned i = 0; i < vdev->vd_nchildren; i++) {
		if (!(vio->vi_sent & (1u << i)))
			continue;
		int st = vio->vi_ios[i].bi_status;
		if (st == 0)
			ok++;
		else if (first_error == 0)
			first_error = st;
	}
	if (ok == 0 || first_error == -EINVAL) {
		vio->vi_status = first_error != 0 ? first_error : -EIO;
		return;
	}
	for (unsigned i = 0; i < vdev->vd_nchildren; i++) {
		int st = vio->vi_ios[i].bi_status;
		if (!(vio->vi_sent & (1u << i)) || st == 0)
			continue;
		if (!atomic_exchange(&vdev->vd_faulted[i], true))
			log_error("blk: %s of mirror child %u (%s) failed (%s): the child is faulted and "
			          "written around; check the pool after its next import",
			          vio->vi_op == BLK_IO_FLUSH ? "a flush" : "a write", i,
			          blk_dev_path(vdev->vd_children[i]), sh_strerror(st));
	}
	vio->vi_status = 0;
}

static void blk_vdev_child_done(struct blk_io *io)
{
	struct blk_vdev_io *vio = io->bi_arg;
	unsigned child = (unsigned)(io - vio->vi_ios);
	if (io->bi_op != BLK_IO_NOP)
		blk_vdev_count(vio->vi_vdev, child, io);
	if (io->bi_status != 0 && vio->vi_status == 0)
		vio->vi_status = io->bi_status;
	if (--vio->vi_pending > 0)
		return;
	if (vio->vi_sent != 0 && vio->vi_vdev->vd_nchildren > 1)
		blk_vdev_settle(vio);
	vio->vi_done(vio);
}

static void blk_vdev_child_io(struct blk_vdev_io *vio, unsigned child, enum blk_io_op op)
{
	struct blk_io *io = &vio->vi_ios[child];
	*io = (struct blk_io){
	    .bi_op = op,
	    .bi_dev = vio->vi_vdev->vd_children[child],
	    .bi_offset = op == BLK_IO_FLUSH ? 0 : vio->vi_offset,
	    .bi_buf = op == BLK_IO_FLUSH ? NULL : vio->vi_buf,
	    .bi_len = op == BLK_IO_FLUSH ? 0 : vio->vi_len,
	    .bi_done = blk_vdev_child_done,
	    .bi_arg = vio,
	    .bi_background = op == BLK_IO_WRITE && vio->vi_background,
	};
}

/* Completes vio with status on the engine thread, as every completion does. */
static void blk_vdev_fail(struct blk_vdev_io *vio, int status)
{
	vio->vi_status = status;
	vio->vi_pending = 1;
	vio->vi_ios[0] =
	    (struct blk_io){.bi_op = BLK_IO_NOP, .bi_done = blk_vdev_child_done, .bi_arg = vio};
	blk_submit(vio->vi_vdev->vd_engine, &vio->vi_ios[0]);
}

void blk_vdev_submit(struct blk_vdev_io *vio)
{
	struct blk_vdev *vdev = vio->vi_vdev;
	VERIFY(vdev != NULL && vio->vi_done != NULL);
	struct blk_engine *engine = vdev->vd_engine;
	unsigned n = vdev->vd_nchildren;
	vio->vi_status = 0;
	vio->vi_sent = 0;
	bool valid = vio->vi_op == BLK_IO_FLUSH ||
	             ((vio->vi_op == BLK_IO_READ || vio->vi_op == BLK_IO_WRITE) &&
	              blk_vdev_in_range(vdev, vio->vi_offset, vio->vi_len));
	if (!valid) {
		blk_vdev_fail(vio, -EINVAL);
		return;
	}
	if (vio->vi_op == BLK_IO_READ) {
		unsigned child = vio->vi_child % n;
		vio->vi_pending = 1;
		blk_vdev_child_io(vio, child, BLK_IO_READ);
		blk_submit(engine, &vio->vi_ios[child]);
		return;
	}
	uint32_t live = blk_vdev_live_mask(vdev);
	if (live == 0) {
		blk_vdev_fail(vio, -EIO); /* never: the last child standing is not faulted */
		return;
	}
	/* Set the count before the first submission: completions may start at once. */
	vio->vi_sent = live;
	vio->vi_pending = (unsigned)__builtin_popcount(live);
	for (unsigned i = 0; i < n; i++) {
		if (live & (1u << i))
			blk_vdev_child_io(vio, i, vio->vi_op);
	}
	for (unsigned i = 0; i < n; i++) {
		if (live & (1u << i))
			blk_submit(engine, &vio->vi_ios[i]);
	}
}

/* A waiter for the synchronous wrappers. */
struct blk_vdev_wait {
	pthread_mutex_t vw_lock;
	pthread_cond_t vw_cond;
	bool vw_done;
	int vw_status;
};

static void blk_vdev_wait_init(struct blk_vdev_wait *w)
{
	VERIFY(pthread_mutex_init(&w->vw_lock, NULL) == 0);
	VERIFY(pthread_cond_init(&w->vw_cond, NULL) == 0);
	w->vw_done = false;
	w->vw_status = 0;
}

static void blk_vdev_wait_signal(struct blk_vdev_wait *w, int status)
{
	pthread_mutex_lock(&w->vw_lock);
	w->vw_status = status;
	w->vw_done = true;
	pthread_cond_signal(&w->vw_cond);
	pthread_mutex_unlock(&w->vw_lock);
}

static int blk_vdev_wait_finish(struct blk_vdev_wait *w)
{
	pthread_mutex_lock(&w->vw_lock);
	while (!w->vw_done)
		pthread_cond_wait(&w->vw_cond, &w->vw_lock);
	int status = w->vw_status;
	pthread_mutex_unlock(&w->vw_lock);
	pthread_cond_destroy(&w->vw_cond);
	pthread_mutex_destroy(&w->vw_lock);
	return status;
}

static void blk_vdev_sync_done(struct blk_vdev_io *vio)
{
	blk_vdev_wait_signal(vio->vi_arg, vio->vi_status);
}

int blk_vdev_io_sync(struct blk_vdev_io *vio)
{
	VERIFY(vio->vi_vdev != NULL);
	if (blk_engine_on_thread(vio->vi_vdev->vd_engine)) {
		vio->vi_status = -EDEADLK;
		return vio->vi_status;
	}
	struct blk_vdev_wait w;
	blk_vdev_wait_init(&w);
	vio->vi_done = blk_vdev_sync_done;
	vio->vi_arg = &w;
	blk_vdev_submit(vio);
	return blk_vdev_wait_finish(&w);
}

/* ---- block writes ---- */

struct blk_block_write_ctx {
	struct blk_vdev_io bw_vio;
	void (*bw_done)(void *arg, int status);
	void *bw_arg;
};

static void blk_block_write_done(struct blk_vdev_io *vio)
{
	struct blk_block_write_ctx *ctx = SH_CONTAINER_OF(vio, struct blk_block_write_ctx, bw_vio);
	void (*done)(void *arg, int status) = ctx->bw_done;
	void *arg = ctx->bw_arg;
	int status = vio->vi_status;
	mem_free(ctx);
	done(arg, status);
}

void blk_block_write(struct blk_vdev *vdev, const struct blk_ptr *bp,
                     const struct blk_prepared *prepared, bool background,
                     void (*done)(void *arg, int status), void *arg)
{
	struct blk_block_write_ctx *ctx = mem_alloc(sizeof(*ctx));
	if (!ctx) {
		blk_engine_defer_status(vdev->vd_engine, done, arg, -ENOMEM);
		return;
	}
	ctx->bw_done = done;
	ctx->bw_arg = arg;
	bool valid = !blk_ptr_is_hole(bp) && prepared->bw_buf &&
	             bp->bp_asize == prepared->bw_asize && bp->bp_asize > 0 &&
	             bp->bp_asize % BLK_SECTOR_BYTES == 0;
	ctx->bw_vio = (struct blk_vdev_io){
	    .vi_op = BLK_IO_WRITE,
	    .vi_vdev = vdev,
	    /* An offset outside the data area makes blk_vdev_submit fail the write with -EINVAL. */
	    .vi_offset = valid ? bp->bp_offset : 0,
	    .vi_buf = prepared->bw_buf,
	    .vi_len = bp->bp_asize,
	    .vi_background = background,
	    .vi_done = blk_block_write_done,
	};
	blk_vdev_submit(&ctx->bw_vio);
}

/* ---- block reads ---- */

struct blk_block_read_ctx {
	struct blk_vdev *rd_vdev;
	struct blk_ptr rd_bp;
	void *rd_out;
	bool rd_raw;                 /* blk_block_read_raw: rd_out takes the psize stored bytes */
	uint8_t *rd_io_buf;          /* what the leaves read into: rd_bounce, or rd_out itself when
	                              * it is aligned and takes the stored bytes as they are */
	void (*rd_done)(void *arg, int status);
	void *rd_arg;
	uint8_t *rd_bounce;          /* asize bytes, sector-aligned */
	unsigned rd_order[BLK_MIRROR_MAX]; /* the children in the order tried: current ones, then
	                                    * stale ones, faulted ones last */
	unsigned rd_tries;                 /* children tried so far */
	int rd_status;               /* for a read that ends before any device io */
	int rd_read_error;           /* the first read error */
	bool rd_bad_checksum;        /* some copy failed its checksum */
	bool rd_bad[BLK_MIRROR_MAX]; /* children whose copy failed */
	unsigned rd_repairs_pending;
	struct blk_io rd_io; /* the current read */
	struct blk_io rd_repairs[BLK_MIRROR_MAX];
};

static void blk_block_read_finish(struct blk_block_read_ctx *ctx, int status)
{
	void (*done)(void *arg, int status) = ctx->rd_done;
	void *arg = ctx->rd_arg;
	mem_free(ctx->rd_bounce);
	mem_free(ctx);
	done(arg, status);
}

static void blk_block_read_nop_done(struct blk_io *io)
{
	struct blk_block_read_ctx *ctx = io->bi_arg;
	blk_block_read_finish(ctx, ctx->rd_status);
}

static void blk_block_read_io_done(struct blk_io *io);

static void blk_block_read_next(struct blk_block_read_ctx *ctx)
{
	struct blk_vdev *vdev = ctx->rd_vdev;
	unsigned child = ctx->rd_order[ctx->rd_tries];
	ctx->rd_tries++;
	ctx->rd_io = (struct blk_io){
	    .bi_op = BLK_IO_READ,
	    .bi_dev = vdev->vd_children[child],
	    .bi_offset = ctx->rd_bp.bp_offset,
	    .bi_buf = ctx->rd_io_buf,
	    .bi_len = ctx->rd_bp.bp_asize,
	    .bi_done = blk_block_read_io_done,
	    .bi_arg = ctx,
	};
	blk_submit(vdev->vd_engine, &ctx->rd_io);
}

static void blk_block_repair_done(struct blk_io *io)
{
	struct blk_block_read_ctx *ctx = io->bi_arg;
	unsigned child = (unsigned)(io - ctx->rd_repairs);
	blk_vdev_count(ctx->rd_vdev, child, io);
	if (io->bi_status == 0)
		BLK_COUNT(ctx->rd_vdev->vd_counters[child].vc_repairs, 1);
	else
		log_ratelimited(LOG_WARN, "blk: repairing %s at %llu: %s", blk_dev_path(io->bi_dev),
		                (unsigned long long)io->bi_offset, sh_strerror(io->bi_status));
	if (--ctx->rd_repairs_pending == 0)
		blk_block_read_finish(ctx, 0);
}

/* Whether a bad copy on child i may be rewritten: not on a leaf that is pulled, faulted or open
 * read only. */
static bool blk_block_repairable(struct blk_vdev *vdev, unsigned i)
{
	const struct blk_dev *dev = vdev->vd_children[i];
	return !atomic_load(&dev->bd_pulled) && !atomic_load(&vdev->vd_faulted[i]) &&
	       !dev->bd_read_only;
}

/* A good copy is in rd_io_buf: rewrite each child that failed, then finish. */
static void blk_block_read_repair(struct blk_block_read_ctx *ctx)
{
	struct blk_vdev *vdev = ctx->rd_vdev;
	unsigned n = 0;
	for (unsigned i = 0; i < vdev->vd_nchildren; i++) {
		if (ctx->rd_bad[i] && blk_block_repairable(vdev, i))
			n++;
	}
	if (n == 0) {
		blk_block_read_finish(ctx, 0);
		return;
	}
	/* All on the engine thread: the count cannot drop before every rewrite is submitted. */
	ctx->rd_repairs_pending = n;
	for (unsigned i = 0; i < vdev->vd_nchildren; i++) {
		if (!ctx->rd_bad[i] || !blk_block_repairable(vdev, i))
			continue;
		ctx->rd_repairs[i] = (struct blk_io){
		    .bi_op = BLK_IO_WRITE,
		    .bi_dev = vdev->vd_children[i],
		    .bi_offset = ctx->rd_bp.bp_offset,
		    .bi_buf = ctx->rd_io_buf,
		    .bi_len = ctx->rd_bp.bp_asize,
		    .bi_done = blk_block_repair_done,
		    .bi_arg = ctx,
		};
		blk_submit(vdev->vd_engine, &ctx->rd_repairs[i]);
	}
}

static void blk_block_read_io_done(struct blk_io *io)
{
	struct blk_block_read_ctx *ctx = io->bi_arg;
	struct blk_vdev *vdev = ctx->rd_vdev;
	unsigned child = ctx->rd_order[ctx->rd_tries - 1];
	const struct blk_ptr *bp = &ctx->rd_bp;
	blk_vdev_count(vdev, child, io);
	if (io->bi_status != 0) {
		if (ctx->rd_read_error == 0)
			ctx->rd_read_error = io->bi_status;
		ctx->rd_bad[child] = true;
	} else {
		uint8_t cksum[16];
		blk_checksum(ctx->rd_io_buf, bp->bp_psize, cksum);
		bool good = memcmp(cksum, bp->bp_cksum, sizeof(cksum)) == 0;
		if (good && ctx->rd_io_buf == ctx->rd_bounce)
			good = ctx->rd_raw ? (memcpy(ctx->rd_out, ctx->rd_bounce, bp->bp_psize), true)
			                   : blk_decompress(bp->bp_compress, ctx->rd_bounce,
			                                    bp->bp_psize, ctx->rd_out, bp->bp_lsize) == 0;
		if (good) {
			blk_block_read_repair(ctx);
			return;
		}
		BLK_COUNT(vdev->vd_counters[child].vc_checksum_errors, 1);
		log_ratelimited(LOG_WARN, "blk: checksum error on %s at %llu (%u bytes)",
		                blk_dev_path(io->bi_dev), (unsigned long long)bp->bp_offset,
		                bp->bp_asize);
		ctx->rd_bad_checksum = true;
		ctx->rd_bad[child] = true;
	}
	if (ctx->rd_tries < vdev->vd_nchildren) {
		blk_block_read_next(ctx);
		return;
	}
	blk_block_read_finish(ctx, ctx->rd_bad_checksum ? -EIO : ctx->rd_read_error);
}

/* The checks a block pointer must pass before its block is read (hostile-input safe). */
static bool blk_block_ptr_readable(const struct blk_vdev *vdev, const struct blk_ptr *bp)
{
	if (bp->bp_checksum != BLK_CHECKSUM_XXH3_128 || bp->bp_compress > BLK_COMPRESS_ZSTD)
		return false;
	if (bp->bp_asize == 0 || bp->bp_asize % BLK_SECTOR_BYTES != 0 ||
	    bp->bp_asize > BLK_MAX_BLOCK_BYTES)
		return false;
	if (bp->bp_psize == 0 || bp->bp_psize > bp->bp_asize)
		return false;
	if (bp->bp_lsize == 0 || bp->bp_lsize > BLK_MAX_BLOCK_BYTES)
		return false;
	if (bp->bp_compress == BLK_COMPRESS_OFF ? bp->bp_psize != bp->bp_lsize
	                                        : bp->bp_psize > bp->bp_lsize)
		return false;
	return bp->bp_offset % BLK_SECTOR_BYTES == 0 &&
	       blk_vdev_in_range(vdev, bp->bp_offset, bp->bp_asize);
}

/* Whether the leaves may read bp's block straight into out: out is sector-aligned and takes the
 * stored bytes as they are, every one of the asize bytes read (raw: the stored bytes; else an
 * uncompressed block, whose logical bytes are its stored ones). */
static bool blk_block_read_direct(const struct blk_ptr *bp, const void *out, bool raw)
{
	return (uintptr_t)out % BLK_SECTOR_BYTES == 0 && bp->bp_psize == bp->bp_asize &&
	       (raw || bp->bp_compress == BLK_COMPRESS_OFF);
}

static void blk_block_read_any(struct blk_vdev *vdev, const struct blk_ptr *bp, void *out,
                               bool raw, void (*done)(void *arg, int status), void *arg)
{
	struct blk_block_read_ctx *ctx = mem_zalloc(sizeof(*ctx));
	if (!ctx) {
		blk_engine_defer_status(vdev->vd_engine, done, arg, -ENOMEM);
		return;
	}
	ctx->rd_vdev = vdev;
	ctx->rd_bp = *bp;
	ctx->rd_out = out;
	ctx->rd_raw = raw;
	ctx->rd_done = done;
	ctx->rd_arg = arg;
	if (blk_ptr_is_hole(bp))
		ctx->rd_status = 0; /* a hole has no bytes to read: lsize is 0 */
	else if (!blk_block_ptr_readable(vdev, bp))
		ctx->rd_status = -EINVAL;
	else if (blk_block_read_direct(bp, out, raw))
		ctx->rd_io_buf = out; /* the stored bytes are what out takes: no copy */
	/* not zeroed (blk_buf_alloc would): a read that succeeds fills every byte, and nothing
	 * of a failed one is used; zeroing cost a send a third of its CPU */
	else if (!(ctx->rd_io_buf = ctx->rd_bounce =
	               mem_aligned_alloc(BLK_SECTOR_BYTES, bp->bp_asize)))
		ctx->rd_status = -ENOMEM;
	if (ctx->rd_io_buf) {
		unsigned n = vdev->vd_nchildren, first = atomic_fetch_add(&vdev->vd_next_read, 1) % n;
		unsigned rank[BLK_MIRROR_MAX];
		for (unsigned c = 0; c < n; c++)
			rank[c] = blk_vdev_read_rank(vdev, c);
		unsigned k = 0;
		for (unsigned pass = 0; pass < 3; pass++) {
			for (unsigned i = 0; i < n; i++) {
				unsigned c = (first + i) % n;
				if (rank[c] == pass)
					ctx->rd_order[k++] = c;
			}
		}
		blk_block_read_next(ctx);
		return;
	}
	ctx->rd_io =
	    (struct blk_io){.bi_op = BLK_IO_NOP, .bi_done = blk_block_read_nop_done, .bi_arg = ctx};
	blk_submit(vdev->vd_engine, &ctx->rd_io);
}

void blk_block_read(struct blk_vdev *vdev, const struct blk_ptr *bp, void *out,
                    void (*done)(void *arg, int status), void *arg)
{
	blk_block_read_any(vdev, bp, out, false, done, arg);
}

static void blk_block_sync_done(void *arg, int status)
{
	blk_vdev_wait_signal(arg, status);
}

int blk_block_read_raw_sync(struct blk_vdev *vdev, const struct blk_ptr *bp, void *out)
{
	if (blk_engine_on_thread(vdev->vd_engine))
		return -EDEADLK;
	if (blk_ptr_is_hole(bp))
		return -EINVAL;
	struct blk_vdev_wait w;
	blk_vdev_wait_init(&w);
	blk_block_read_any(vdev, bp, out, true, blk_block_sync_done, &w);
	return blk_vdev_wait_finish(&w);
}

int blk_block_read_sync(struct blk_vdev *vdev, const struct blk_ptr *bp, void *out)
{
	if (blk_engine_on_thread(vdev->vd_engine))
		return -EDEADLK;
	struct blk_vdev_wait w;
	blk_vdev_wait_init(&w);
	blk_block_read(vdev, bp, out, blk_block_sync_done, &w);
	return blk_vdev_wait_finish(&w);
}

int blk_block_write_sync(struct blk_vdev *vdev, const struct blk_ptr *bp,
                         const struct blk_prepared *prepared)
{
	if (blk_engine_on_thread(vdev->vd_engine))
		return -EDEADLK;
	struct blk_vdev_wait w;
	blk_vdev_wait_init(&w);
	blk_block_write(vdev, bp, prepared, false, blk_block_sync_done, &w);
	return blk_vdev_wait_finish(&w);
}
