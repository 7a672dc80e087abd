/* test_pool_fs_crash.c: crash consistency of COMMIT through the intent log (pool_fs.c). Workers
 * run file workloads through pool_fs on fault-recording leaves: UNSTABLE writes followed by
 * COMMIT, interleaved with FILE_SYNC writes, truncating SETATTRs, overwrites of the same ranges,
 * removes (with and without pending writes), renames over files with pending writes, a file
 * large enough that its COMMIT takes a txg, and large FILE_SYNC writes (32 KiB to 1 MiB) whose data
 * the log names by block pointer (right after an acknowledged COMMIT, so their acknowledgement is
 * modelled as one more COMMIT); txgs run every few milliseconds, so COMMITs and writes straddle
 * syncs. Then, for many cut points and every fault mode, images of the leaves at one instant are
 * imported (replaying the log), checked with pool_check, and every file is compared with the model.
 * The cut machinery is pool_fs_fixture.h's (one global event counter over all fault leaves).
 *
 * What must hold for every cut and mode:
 *   - import succeeds and pool_check finds no problem;
 *   - for every file name, with i the last COMMIT of it acknowledged before the cut (its
 *     completion read the global number after the flush that made it durable): every byte of the
 *     file is the byte the file held when that COMMIT was issued, or a byte a later operation on
 *     the name wrote (zero for a later truncation or remove), i.e. the committed data or newer;
 *     its size is one the file had from that COMMIT on; the name may be missing only if a remove
 *     of it came after that COMMIT.
 * Each byte any write puts down is a function of that write's id and the offset (never zero), so
 * a byte identifies the write that produced it.
 * Two configurations (a single leaf; a leaf and a log vdev), 24 cut points each by default (three
 * quarters just before flush events, the rest at random instants), every cut in the 5 fault
 * modes: 240 images. SHALE_CRASH_CUTS=N sets the number of cut points per configuration. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_fs_fixture.h"
#include "zpl/zpl.h"
#include "pool/pool.h"
#include "poolfs/pool_fs.h"
#include "tap.h"

#define NWORKERS 3u
#define NAMES_PER_WORKER 4u /* small files; worker 0 also has the big one */
#define NNAMES (NWORKERS * NAMES_PER_WORKER + 1u)
#define BIG_NAME (NNAMES - 1u)
#define SMALL_SPAN 20000u /* small writes start below this */
#define SMALL_LEN 6000u   /* and are at most this long */
#define BIG_CHUNK (256u * 1024u)
#define BIG_CHUNKS 5u /* 1.25 MiB pending: the COMMIT takes a txg */
#define FILE_CAP (BIG_CHUNK * BIG_CHUNKS + 64u * 1024u)
/* Large FILE_SYNC writes: the big file's up to 1 MiB, the small files' up to 160 KiB. */
#define LARGE_SYNC_MIN (32u * 1024u)
#define LARGE_SYNC_BIG_MAX (1024u * 1024u)
#define LARGE_SYNC_SMALL_MAX (160u * 1024u)
#define FSID 77u

/* The byte write wid puts at offset b: never zero. */
static uint8_t wbyte(uint32_t wid, uint64_t b)
{
	return pattern_byte(wid, b);
}

static void wfill(uint8_t *buf, uint32_t wid, uint64_t off, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = wbyte(wid, off + i);
}

/* ---- the model: per name, the operations in the order they were made ---- */

enum fop_kind {
	K_WRITE = 1,   /* UNSTABLE or FILE_SYNC: bytes [off, off + len) of write wid */
	K_TRUNC = 2,   /* SETATTR size = off */
	K_COMMIT = 3,  /* ack: when durable */
	K_REMOVE = 4,  /* the name goes (and its file with it) */
	K_CREATE = 5,  /* an empty file under the name */
	K_REPLACE = 6, /* a file of bytes [0, len) of write wid renamed over the name */
};

struct fop {
	uint8_t f_kind;
	uint32_t f_wid;
	uint64_t f_off;
	uint32_t f_len;
	uint64_t f_ack; /* global number at completion (K_COMMIT), ACK_NONE before */
};

struct name_log {
	struct fop *nl_ops;
	size_t nl_n, nl_cap;
};

struct crash_cfg {
	const char *cc_name;
	unsigned cc_nlog; /* 0 or 1 log leaf */
	uint32_t cc_txg_ms;
	unsigned cc_rounds;
};

struct crash_run {
	const struct crash_cfg *cr_cfg;
	struct blk_dev *cr_leaves[2];
	unsigned cr_nleaves;
	struct pool *cr_pool;
	struct fs *cr_fs;
	struct fs_obj_id cr_root;
	struct name_log cr_names[NNAMES];
	_Atomic uint32_t cr_next_wid;
	_Atomic unsigned cr_errors;
	_Atomic unsigned cr_large_syncs;
	uint64_t cr_start_seq;
	uint64_t cr_commits_log, cr_commits_txg;
};

static struct fop *nl_add(struct name_log *nl, uint8_t kind, uint32_t wid, uint64_t off,
                          uint32_t len)
{
	if (nl->nl_n == nl->nl_cap) {
		nl->nl_cap = nl->nl_cap ? nl->nl_cap * 2 : 64;
		nl->nl_ops = realloc(nl->nl_ops, nl->nl_cap * sizeof(*nl->nl_ops));
		VERIFY(nl->nl_ops != NULL);
	}
	struct fop *f = &nl->nl_ops[nl->nl_n++];
	*f = (struct fop){
	    .f_kind = kind, .f_wid = wid, .f_off = off, .f_len = len, .f_ack = ACK_NONE};
	return f;
}

static void name_of(unsigned n, char *buf, size_t cap)
{
	if (n == BIG_NAME)
		snprintf(buf, cap, "big");
	else
		snprintf(buf, cap, "w%uf%u", n / NAMES_PER_WORKER, n % NAMES_PER_WORKER);
}

/* ---- the workload ---- */

struct worker {
	struct crash_run *wk_run;
	unsigned wk_id;
};

static void wk_fail(struct crash_run *cr, const char *what, int rc)
{
	atomic_fetch_add(&cr->cr_errors, 1);
	printf("#   %s: %s\n", what, sh_strerror(rc));
}

/* A large FILE_SYNC write (its data goes to the log by block pointers) of LARGE_SYNC_MIN to max
 * bytes inside [0, span), made right after an acknowledged COMMIT of the file, so that nothing is
 * pending: its acknowledgement then says that the file as it is after it is durable, which the
 * model records as a COMMIT acknowledged when the write was. */
static void large_sync_write(struct crash_run *cr, struct name_log *nl, const struct fs_obj_id *id,
                             uint64_t *seed, uint8_t *buf, uint64_t span, uint32_t max)
{
	uint32_t len = LARGE_SYNC_MIN + (uint32_t)(rng_next(seed) % (max - LARGE_SYNC_MIN + 1));
	uint64_t off = rng_next(seed) % (span - len + 1);
	/* Half of those that can be: whole records at a record boundary, so that the txg adopts
	 * their blocks instead of writing the data again (pool_fs.c, F13). */
	if (len >= ZPL_RECORD_DEFAULT_BYTES && rng_next(seed) % 2 == 0) {
		len -= len % ZPL_RECORD_DEFAULT_BYTES;
		off -= off % ZPL_RECORD_DEFAULT_BYTES;
	}
	uint32_t wid = atomic_fetch_add(&cr->cr_next_wid, 1);
	wfill(buf, wid, off, len);
	nl_add(nl, K_WRITE, wid, off, len);
	struct fop *f = nl_add(nl, K_COMMIT, 0, 0, 0);
	enum fs_stable committed = FS_UNSTABLE;
	uint64_t ack;
	int rc = op_write_ack(cr->cr_fs, id, off, buf, len, FS_FILE_SYNC, &committed, &ack);
	if (rc == 0 && committed != FS_FILE_SYNC)
		rc = -EIO;
	if (rc != 0)
		return wk_fail(cr, "large FILE_SYNC write", rc);
	f->f_ack = ack;
	atomic_fetch_add(&cr->cr_large_syncs, 1);
}

/* One round on the big file: 1.25 MiB of UNSTABLE writes then COMMIT (a txg), or a truncation and
 * a small write then COMMIT (the log); then, two times in three, a large FILE_SYNC write of up to
 * 1 MiB. */
static void big_round(struct crash_run *cr, struct fs_obj_id *id, bool *exists, uint64_t *seed,
                      uint8_t *buf)
{
	struct fs *fs = cr->cr_fs;
	struct name_log *nl = &cr->cr_names[BIG_NAME];
	int rc;
	if (!*exists) {
		if ((rc = op_create(fs, FS_OP_CREATE, &cr->cr_root, "big", NULL, 0, id)) != 0)
			return wk_fail(cr, "create big", rc);
		nl_add(nl, K_CREATE, 0, 0, 0);
		*exists = true;
	}
	if (rng_next(seed) % 2 == 0) {
		for (uint32_t k = 0; k < BIG_CHUNKS; k++) {
			uint32_t wid = atomic_fetch_add(&cr->cr_next_wid, 1);
			uint64_t off = (uint64_t)k * BIG_CHUNK;
			wfill(buf, wid, off, BIG_CHUNK);
			nl_add(nl, K_WRITE, wid, off, BIG_CHUNK);
			if ((rc = op_write(fs, id, off, buf, BIG_CHUNK, FS_UNSTABLE, NULL)) != 0)
				return wk_fail(cr, "big write", rc);
		}
	} else {
		uint64_t size = rng_next(seed) % ((uint64_t)BIG_CHUNK * BIG_CHUNKS);
		nl_add(nl, K_TRUNC, 0, size, 0);
		if ((rc = op_setattr(fs, id, (int64_t)size, -1, NULL)) != 0)
			return wk_fail(cr, "big truncate", rc);
		uint32_t wid = atomic_fetch_add(&cr->cr_next_wid, 1);
		uint64_t off = rng_next(seed) % ((uint64_t)BIG_CHUNK * BIG_CHUNKS);
		uint32_t len = 1 + (uint32_t)(rng_next(seed) % 20000);
		wfill(buf, wid, off, len);
		nl_add(nl, K_WRITE, wid, off, len);
		if ((rc = op_write(fs, id, off, buf, len, FS_UNSTABLE, NULL)) != 0)
			return wk_fail(cr, "big write", rc);
	}
	struct fop *f = nl_add(nl, K_COMMIT, 0, 0, 0);
	uint64_t ack;
	if ((rc = op_commit_ack(fs, id, &ack)) != 0)
		return wk_fail(cr, "big commit", rc);
	f->f_ack = ack;
	if (rng_next(seed) % 3 != 0)
		large_sync_write(cr, nl, id, seed, buf, (uint64_t)BIG_CHUNK * BIG_CHUNKS,
		                 LARGE_SYNC_BIG_MAX);
}

static void *crash_worker(void *arg)
{
	struct worker *wk = arg;
	struct crash_run *cr = wk->wk_run;
	struct fs *fs = cr->cr_fs;
	uint64_t seed = 0xfeed + wk->wk_id * 7919u;
	struct fs_obj_id ids[NAMES_PER_WORKER + 1];
	bool exists[NAMES_PER_WORKER + 1] = {false};
	uint64_t last_off[NAMES_PER_WORKER] = {0};
	uint32_t last_len[NAMES_PER_WORKER] = {0};
	uint8_t *buf = malloc(LARGE_SYNC_BIG_MAX);
	VERIFY(buf != NULL);
	char name[32], tmp[32];
	snprintf(tmp, sizeof(tmp), "w%utmp", wk->wk_id);
	for (unsigned round = 0; round < cr->cr_cfg->cc_rounds && atomic_load(&cr->cr_errors) == 0;
	     round++) {
		if (wk->wk_id == 0 && round % 9 == 4) {
			big_round(cr, &ids[NAMES_PER_WORKER], &exists[NAMES_PER_WORKER], &seed,
			          buf);
			continue;
		}
		unsigned k = (unsigned)(rng_next(&seed) % NAMES_PER_WORKER);
		unsigned n = wk->wk_id * NAMES_PER_WORKER + k;
		struct name_log *nl = &cr->cr_names[n];
		name_of(n, name, sizeof(name));
		int rc = 0;
		if (!exists[k]) {
			if ((rc = op_create(fs, FS_OP_CREATE, &cr->cr_root, name, NULL, 0,
			                    &ids[k])) != 0) {
				wk_fail(cr, "create", rc);
				break;
			}
			nl_add(nl, K_CREATE, 0, 0, 0);
			exists[k] = true;
		}
		unsigned nops = 1 + (unsigned)(rng_next(&seed) % 4);
		for (unsigned i = 0; i < nops && rc == 0; i++) {
			unsigned r = (unsigned)(rng_next(&seed) % 100);
			if (r < 70) {
				/* a write (1 in 7 FILE_SYNC); 1 in 4 rewrites the last range */
				uint64_t off = rng_next(&seed) % SMALL_SPAN;
				uint32_t len = 1 + (uint32_t)(rng_next(&seed) % SMALL_LEN);
				if (r < 18 && last_len[k] != 0) {
					off = last_off[k];
					len = last_len[k];
				}
				last_off[k] = off;
				last_len[k] = len;
				uint32_t wid = atomic_fetch_add(&cr->cr_next_wid, 1);
				wfill(buf, wid, off, len);
				nl_add(nl, K_WRITE, wid, off, len);
				rc = op_write(fs, &ids[k], off, buf, len,
				              r >= 60 ? FS_FILE_SYNC : FS_UNSTABLE, NULL);
			} else {
				uint64_t size = rng_next(&seed) % (SMALL_SPAN + SMALL_LEN);
				nl_add(nl, K_TRUNC, 0, size, 0);
				rc = op_setattr(fs, &ids[k], (int64_t)size, -1, NULL);
			}
		}
		if (rc != 0) {
			wk_fail(cr, "write or truncate", rc);
			break;
		}
		unsigned r = (unsigned)(rng_next(&seed) % 100);
		uint64_t ack;
		if (r < 70 || (r >= 80 && r < 88)) {
			/* Often a txg starts to sync just before the COMMIT: the writes are in the
			 * syncing txg, not durable yet, and must still go through the log. */
			if (rng_next(&seed) % 3 == 0)
				pool_txg_request_sync(cr->cr_pool);
			struct fop *f = nl_add(nl, K_COMMIT, 0, 0, 0);
			if ((rc = op_commit_ack(fs, &ids[k], &ack)) != 0) {
				wk_fail(cr, "commit", rc);
				break;
			}
			f->f_ack = ack;
			if (r < 20) {
				large_sync_write(cr, nl, &ids[k], &seed, buf,
				                 SMALL_SPAN + LARGE_SYNC_SMALL_MAX,
				                 LARGE_SYNC_SMALL_MAX);
				if (atomic_load(&cr->cr_errors) != 0)
					break;
			}
		}
		if (r >= 70 && r < 88) {
			/* remove, with pending writes (r < 80) or just committed */
			nl_add(nl, K_REMOVE, 0, 0, 0);
			if ((rc = op_remove(fs, FS_OP_REMOVE, &cr->cr_root, name)) != 0) {
				wk_fail(cr, "remove", rc);
				break;
			}
			exists[k] = false;
			last_len[k] = 0;
		} else if (r >= 88) {
			/* a committed file renamed over this one (whose last writes are pending) */
			struct fs_obj_id t;
			uint32_t wid = atomic_fetch_add(&cr->cr_next_wid, 1);
			uint32_t len = 1 + (uint32_t)(rng_next(&seed) % SMALL_LEN);
			wfill(buf, wid, 0, len);
			rc = op_create(fs, FS_OP_CREATE, &cr->cr_root, tmp, NULL, 0, &t);
			if (rc == 0)
				rc = op_write(fs, &t, 0, buf, len, FS_UNSTABLE, NULL);
			if (rc == 0)
				rc = op_commit_ack(fs, &t, &ack);
			if (rc != 0) {
				wk_fail(cr, "the file to rename", rc);
				break;
			}
			nl_add(nl, K_REPLACE, wid, 0, len);
			if ((rc = op_rename(fs, &cr->cr_root, tmp, &cr->cr_root, name)) != 0) {
				wk_fail(cr, "rename", rc);
				break;
			}
			ids[k] = t;
			last_len[k] = 0;
		}
		if (wk->wk_id == 0 && round % 5 == 2)
			pool_txg_request_sync(cr->cr_pool);
	}
	free(buf);
	return NULL;
}

static struct pool_open_opts crash_opts(void)
{
	struct pool_open_opts o = {0};
	o.po_attach = pool_fs_attach;
	o.po_txg_interval_ms = 60000;
	o.po_arc_max_bytes = 16 * MIB;
	o.po_log_region_bytes = 4 * MIB;
	return o;
}

static bool crash_run_workload(struct crash_run *cr)
{
	const struct crash_cfg *cfg = cr->cr_cfg;
	cr->cr_nleaves = 1 + cfg->cc_nlog;
	for (unsigned i = 0; i < cr->cr_nleaves; i++)
		VERIFY(blk_dev_create_fault(i == 0 ? 24 * MIB : 8 * MIB, &cr->cr_leaves[i]) == 0);
	struct pool_open_opts o = crash_opts();
	o.po_txg_interval_ms = cfg->cc_txg_ms;
	struct pool_create_args a = {.pc_name = "fscrash", .pc_opts = &o};
	int rc = pool_create_on_devs(&a, cr->cr_leaves, 1, cr->cr_leaves + 1, cfg->cc_nlog,
	                             &cr->cr_pool);
	if (rc != 0) {
		printf("#   create: %s\n", sh_strerror(rc));
		return false;
	}
	if ((rc = pool_ds_create(cr->cr_pool, "fs", NULL)) != 0 ||
	    (rc = pool_fs_open(cr->cr_pool, "fs", FSID, &cr->cr_fs)) != 0 ||
	    (rc = fs_root(cr->cr_fs, &cr->cr_root)) != 0) {
		printf("#   file system: %s\n", sh_strerror(rc));
		pool_close(cr->cr_pool);
		return false;
	}
	cr->cr_start_seq = blk_fault_global_seq();
	atomic_init(&cr->cr_next_wid, 1);
	struct worker wk[NWORKERS];
	pthread_t th[NWORKERS];
	for (unsigned t = 0; t < NWORKERS; t++) {
		wk[t] = (struct worker){.wk_run = cr, .wk_id = t};
		VERIFY(pthread_create(&th[t], NULL, crash_worker, &wk[t]) == 0);
	}
	for (unsigned t = 0; t < NWORKERS; t++)
		VERIFY(pthread_join(th[t], NULL) == 0);
	struct pool_fs_stats st;
	pool_fs_stats(cr->cr_fs, &st);
	fs_destroy(cr->cr_fs);
	cr->cr_fs = NULL;
	struct pool_status *ps = malloc(sizeof(*ps));
	VERIFY(ps != NULL);
	pool_status(cr->cr_pool, ps);
	uint64_t commits = 0;
	for (unsigned n = 0; n < NNAMES; n++)
		for (size_t i = 0; i < cr->cr_names[n].nl_n; i++)
			commits += cr->cr_names[n].nl_ops[i].f_kind == K_COMMIT;
	printf("#   %s: %u writes (%u large FILE_SYNC, %" PRIu64 " blocks adopted), %" PRIu64
	       " COMMITs of the names, %" PRIu64 " log commits, %" PRIu64 " txg waits, %" PRIu64
	       " txgs\n",
	       cfg->cc_name, atomic_load(&cr->cr_next_wid) - 1, atomic_load(&cr->cr_large_syncs),
	       st.ps_adopted_blocks, commits, st.ps_log_commits, st.ps_txg_waits, ps->ps_syncs);
	/* some cuts then fall between an adoption and the txg that makes it durable */
	CHECKF(st.ps_adopted_blocks > 0, "%s: no block adopted", cfg->cc_name);
	cr->cr_commits_txg = st.ps_txg_waits;
	free(ps);
	pool_close(cr->cr_pool); /* the crash */
	cr->cr_pool = NULL;
	return atomic_load(&cr->cr_errors) == 0;
}

/* ---- verifying ---- */

/* Applies op f to the model (content cap FILE_CAP, *size). */
static void model_apply(const struct fop *f, uint8_t *m, uint64_t *size)
{
	switch (f->f_kind) {
	case K_WRITE:
		wfill(m + f->f_off, f->f_wid, f->f_off, f->f_len);
		*size = SH_MAX(*size, f->f_off + f->f_len);
		break;
	case K_TRUNC:
		if (f->f_off < *size)
			memset(m + f->f_off, 0, *size - f->f_off);
		*size = f->f_off;
		break;
	case K_REMOVE:
	case K_CREATE:
		memset(m, 0, *size);
		*size = 0;
		break;
	case K_REPLACE:
		memset(m, 0, *size);
		wfill(m, f->f_wid, 0, f->f_len);
		*size = f->f_len;
		break;
	default: break;
	}
}

/* Whether byte b may read v given operations from..n-1 of the name came after the commit. */
static bool byte_newer_ok(const struct name_log *nl, size_t from, uint64_t b, uint8_t v)
{
	for (size_t j = from; j < nl->nl_n; j++) {
		const struct fop *f = &nl->nl_ops[j];
		switch (f->f_kind) {
		case K_WRITE:
			if (b >= f->f_off && b < f->f_off + f->f_len && wbyte(f->f_wid, b) == v)
				return true;
			break;
		case K_TRUNC:
			if (v == 0 && f->f_off <= b)
				return true;
			break;
		case K_REMOVE:
		case K_CREATE:
			if (v == 0)
				return true;
			break;
		case K_REPLACE:
			if (b < f->f_len ? wbyte(f->f_wid, b) == v : v == 0)
				return true;
			break;
		default: break;
		}
	}
	return false;
}

/* Checks one name in the recovered file system; returns true when it holds. */
static bool verify_name(struct crash_run *cr, struct fs *fs, const struct fs_obj_id *root,
                        unsigned n, uint64_t g, uint8_t *model, uint8_t *got)
{
	const struct name_log *nl = &cr->cr_names[n];
	char name[32];
	name_of(n, name, sizeof(name));
	/* the last COMMIT acknowledged before the cut */
	size_t ci = SIZE_MAX;
	for (size_t j = 0; j < nl->nl_n; j++)
		if (nl->nl_ops[j].f_kind == K_COMMIT && nl->nl_ops[j].f_ack <= g)
			ci = j;
	uint64_t msize = 0;
	memset(model, 0, FILE_CAP);
	size_t from = 0;
	if (ci != SIZE_MAX) {
		for (size_t j = 0; j < ci; j++)
			model_apply(&nl->nl_ops[j], model, &msize);
		from = ci + 1;
	}
	bool may_miss = ci == SIZE_MAX;
	uint64_t min_size = msize, max_size = msize, s = msize;
	for (size_t j = from; j < nl->nl_n; j++) {
		may_miss |= nl->nl_ops[j].f_kind == K_REMOVE;
		/* the size each later operation leaves */
		const struct fop *f = &nl->nl_ops[j];
		if (f->f_kind == K_WRITE)
			s = SH_MAX(s, f->f_off + f->f_len);
		else if (f->f_kind == K_TRUNC)
			s = f->f_off;
		else if (f->f_kind == K_REMOVE || f->f_kind == K_CREATE)
			s = 0;
		else if (f->f_kind == K_REPLACE)
			s = f->f_len;
		min_size = SH_MIN(min_size, s);
		max_size = SH_MAX(max_size, s);
	}
	struct fs_obj_id id;
	struct fs_attr attr = {0};
	int rc = op_lookup(fs, root, name, &id, &attr);
	uint64_t size = attr.fa_size;
	if (rc == -ENOENT) {
		if (may_miss)
			return true;
		printf("#   %s: missing after its COMMIT %zu\n", name, ci);
		return false;
	}
	if (rc != 0) {
		printf("#   %s: lookup: %s\n", name, sh_strerror(rc));
		return false;
	}
	if (size < min_size || size > max_size || size > FILE_CAP) {
		printf("#   %s: size %" PRIu64 " outside [%" PRIu64 ", %" PRIu64
		       "] (COMMIT %zu of %zu operations)\n",
		       name, size, min_size, max_size, ci, nl->nl_n);
		return false;
	}
	uint32_t got_bytes = 0;
	rc = op_read(fs, &id, 0, (uint32_t)size, got, &got_bytes, NULL);
	if (rc == 0 && got_bytes != size)
		rc = -EIO; /* shorter than its size */
	if (rc != 0) {
		printf("#   %s: read: %s\n", name, sh_strerror(rc));
		return false;
	}
	for (uint64_t b = 0; b < size; b++) {
		if (got[b] == model[b] || byte_newer_ok(nl, from, b, got[b]))
			continue;
		printf("#   %s: byte %" PRIu64
		       " is %u, committed %u, and no later operation wrote it (COMMIT %zu of "
		       "%zu operations, size %" PRIu64 ")\n",
		       name, b, got[b], model[b], ci, nl->nl_n, size);
		return false;
	}
	return true;
}

struct verify_stats {
	unsigned vs_images, vs_failed;
};

static bool crash_verify_cut(struct crash_run *cr, uint64_t g, enum blk_fault_mode mode,
                             uint64_t seed, struct verify_stats *vs, uint8_t *model, uint8_t *got)
{
	struct blk_dev *img[2] = {NULL, NULL};
	vs->vs_images++;
	struct pool_open_opts o = crash_opts();
	struct pool *p = NULL;
	bool ok = crash_cut_import(cr->cr_leaves, cr->cr_nleaves, g, mode, seed, &o, img, &p);
	if (p == NULL)
		goto out;
	int rc;
	struct fs *fs = NULL;
	struct fs_obj_id root;
	if ((rc = pool_fs_open(p, "fs", FSID, &fs)) != 0 || (rc = fs_root(fs, &root)) != 0) {
		printf("#   cut %" PRIu64 " mode %d: file system: %s\n", g, mode, sh_strerror(rc));
		ok = false;
		goto out_close;
	}
	for (unsigned n = 0; n < NNAMES; n++) {
		if (!verify_name(cr, fs, &root, n, g, model, got)) {
			printf("#   (cut %" PRIu64 " mode %d seed %" PRIu64 ")\n", g, mode, seed);
			ok = false;
		}
	}
	fs_destroy(fs);
out_close:
	pool_close(p);
out:
	for (unsigned i = 0; i < cr->cr_nleaves; i++)
		blk_dev_close(img[i]);
	if (!ok)
		vs->vs_failed++;
	return ok;
}

static void crash_config(const struct crash_cfg *cfg, unsigned default_cuts)
{
	struct crash_run *cr = calloc(1, sizeof(*cr));
	VERIFY(cr != NULL);
	cr->cr_cfg = cfg;
	bool ok = crash_run_workload(cr);
	CHECKF(ok, "%s: the workload failed", cfg->cc_name);
	CHECKF(cr->cr_commits_txg > 0, "%s: no COMMIT fell back to a txg", cfg->cc_name);
	uint8_t *model = malloc(FILE_CAP), *got = malloc(FILE_CAP);
	VERIFY(model != NULL && got != NULL);
	if (!ok)
		goto out;
	/* Cut points: three quarters just before flush events, the rest at random instants. */
	struct crash_plan plan;
	crash_plan_init(&plan, cr->cr_leaves, cr->cr_nleaves, cr->cr_start_seq, default_cuts,
	                0x5158);
	struct verify_stats vs = {0};
	unsigned cuts = 0;
	for (unsigned c = 0; c < plan.cp_ncuts && vs.vs_failed <= 4; c++) {
		uint64_t g = crash_plan_cut(&plan, c);
		cuts++;
		for (int mode = BLK_FAULT_KEEP_ALL; mode <= BLK_FAULT_REORDER && vs.vs_failed <= 4;
		     mode++)
			(void)crash_verify_cut(cr, g, (enum blk_fault_mode)mode,
			                       c * 7 + (uint64_t)mode, &vs, model, got);
	}
	CHECKF(vs.vs_failed == 0, "%s: %u of %u crash images failed", cfg->cc_name, vs.vs_failed,
	       vs.vs_images);
	printf(
	    "#   %s: %u cut points (%zu flush events available), %u images, 5 fault modes each\n",
	    cfg->cc_name, cuts, plan.cp_nflush, vs.vs_images);
	crash_plan_fini(&plan);
out:
	free(model);
	free(got);
	for (unsigned i = 0; i < cr->cr_nleaves; i++)
		blk_dev_close(cr->cr_leaves[i]);
	for (unsigned n = 0; n < NNAMES; n++)
		free(cr->cr_names[n].nl_ops);
	free(cr);
}

static void test_fs_crash_single_leaf(void)
{
	static const struct crash_cfg cfg = {"single leaf", 0, 15, 90};
	crash_config(&cfg, 24);
}

static void test_fs_crash_log_vdev(void)
{
	static const struct crash_cfg cfg = {"leaf and log vdev", 1, 40, 90};
	crash_config(&cfg, 24);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	TAP_RUN(test_fs_crash_single_leaf);
	TAP_RUN(test_fs_crash_log_vdev);
	return tap_finish();
}
