/* bench_sfs.c: the sfs2008 workload: a SPECsfs2008-style NFSv3 file set and operation mix,
 * paced open-loop at 1/N .. N/N of a requested rate.
 *
 * File set (per load thread t, so threads never share a directory, as SPECsfs gave each load
 * process its own tree):
 *
 *   <export>/shale-bench/sfs-p<P>-m<MB>/t<t>/d<k>/f<j>   regular files, SFS_FILES_PER_DIR a dir
 *                                          /d<k>/l0     a symbolic link to "f000" (READLINK)
 *                                          /d<k>/s<run>-<seq>   CREATE/REMOVE spares
 *
 * Sizes follow a fixed distribution in the spirit of SPECsfs (most files small, a few large):
 *   1 KiB 33%, 2 KiB 21%, 4 KiB 13%, 8 KiB 10%, 16 KiB 8%, 32 KiB 5%, 64 KiB 4%, 128 KiB 3%,
 *   256 KiB 2%, 1 MiB 1%   (mean 26.7 KiB)
 * drawn from a generator seeded by the thread index, so a later run recomputes the same sizes and
 * can reuse the file set: set-up LOOKUPs every object and creates only what is missing (a file of
 * the wrong size is SETATTR'd to its size). 30% of the files (those with j % 10 < 3) form the
 * working set the mix touches, after SPECsfs2008's "30% of the file set accessed".
 *
 * Mix (SPECsfs2008 NFSv3): GETATTR 26, LOOKUP 24, READ 18, ACCESS 11, WRITE 10, SETATTR 4,
 * READDIRPLUS 2, READLINK 1, READDIR 1, CREATE 1, REMOVE 1, FSSTAT 1 (percent).
 *   LOOKUP: 90% a working-set name (expects OK), 10% a name that does not exist (expects NOENT).
 *   READ/WRITE: transfer 4 KiB 40%, 8 KiB 30%, 16 KiB 15%, 32 KiB 10%, 64 KiB 5%, at a random
 *     4 KiB-aligned offset inside the file, clipped to its end (so files keep their size); WRITE
 *     is UNSTABLE unless --stable-writes asks for FILE_SYNC.
 *   SETATTR: mode 0644 or 0640.  READDIR(PLUS): the first block of a random directory.
 *   CREATE/REMOVE: a ring of spare files per thread; CREATE adds one, REMOVE deletes the oldest,
 *     so the file set stays the same size (a REMOVE with no spare becomes a CREATE, a CREATE with
 *     a full ring a REMOVE). Spares left at the end are removed. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "bench_impl.h"

#define SFS_FILES_PER_DIR 30u
#define SFS_SPARE_CAP 1024u
#define SFS_SETUP_XFER 65536u
#define SFS_MAX_XFER 65536u
#define SFS_SPEC_MB_PER_OP 120.0 /* SPECsfs2008: 120 MB of file set per requested op/s */

enum sfs_stat {
	SFS_GETATTR, SFS_LOOKUP, SFS_READ, SFS_ACCESS, SFS_WRITE, SFS_SETATTR, SFS_READDIRPLUS,
	SFS_READLINK, SFS_READDIR, SFS_CREATE, SFS_REMOVE, SFS_FSSTAT, SFS_NSTATS
};
static const char *const sfs_stat_names[SFS_NSTATS] = {
	"GETATTR", "LOOKUP", "READ", "ACCESS", "WRITE", "SETATTR", "READDIRPLUS", "READLINK",
	"READDIR", "CREATE", "REMOVE", "FSSTAT",
};
/* Percentages of the mix, in enum sfs_stat order; they sum to 100. */
static const unsigned sfs_mix_pct[SFS_NSTATS] = {26, 24, 18, 11, 10, 4, 2, 1, 1, 1, 1, 1};

static const uint32_t sfs_size_kib[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024};
static const unsigned sfs_size_pct[] = {33, 21, 13, 10, 8, 5, 4, 3, 2, 1};
static const uint32_t sfs_xfer_kib[] = {4, 8, 16, 32, 64};
static const unsigned sfs_xfer_pct[] = {40, 30, 15, 10, 5};

enum setup_stat { SU_LOOKUP, SU_MKDIR, SU_CREATE, SU_WRITE, SU_SETATTR, SU_SYMLINK, SU_REMOVE, SU_NSTATS };
static const char *const setup_stat_names[SU_NSTATS] = {"LOOKUP", "MKDIR", "CREATE", "WRITE",
							  "SETATTR", "SYMLINK", "REMOVE"};

struct sfs_file {
	struct bench_fh sf_fh;
	uint32_t sf_size;
	uint32_t sf_dir;
	uint32_t sf_idx; /* j of f<j> */
};
struct sfs_dir {
	struct bench_fh sd_fh;
	struct bench_fh sd_link;
};
struct sfs_spare {
	uint32_t sp_dir;
	uint32_t sp_seq;
	bool sp_ready; /* created (REMOVE may take it) */
	bool sp_dead;  /* its CREATE failed: skip */
};

struct sfs_thread {
	unsigned st_index;
	struct bench_fh st_tdir;
	unsigned st_nfiles, st_ndirs;
	struct sfs_file *st_files;
	struct sfs_dir *st_dirs;
	uint32_t *st_work;
	unsigned st_nwork;
	/* set-up progress */
	unsigned st_next;
	uint64_t st_created, st_created_bytes, st_reused;
	/* spares */
	struct sfs_spare st_ring[SFS_SPARE_CAP];
	unsigned st_ring_head, st_ring_len;
	uint32_t st_next_seq;
	uint32_t st_run;
	/* shared settings */
	const struct bench_ctx *st_ctx;
	uint32_t st_rtmax, st_wtmax;
	enum bench_stable st_stable;
	uint8_t *st_wbuf; /* SFS_MAX_XFER bytes of write data */
};

static uint32_t sfs_pick(const unsigned *pct, size_t n, uint32_t roll100)
{
	unsigned acc = 0;
	for (size_t i = 0; i < n; i++) {
		acc += pct[i];
		if (roll100 < acc)
			return (uint32_t)i;
	}
	return (uint32_t)(n - 1);
}

static uint64_t sfs_lcg(uint64_t *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return *state >> 33;
}

/* Builds thread t's file list: sizes until its share of the bytes is reached. */
static int sfs_thread_layout(struct sfs_thread *st, uint64_t share_bytes)
{
	uint64_t rng = 0x5f5f0000ull + st->st_index;
	uint64_t total = 0;
	unsigned cap = 1024, n = 0;
	struct sfs_file *files = mem_zalloc(sizeof(*files) * cap);
	if (!files)
		return -ENOMEM;
	while (total < share_bytes || n < SFS_FILES_PER_DIR) {
		if (n == cap) {
			struct sfs_file *bigger = mem_realloc(files, sizeof(*files) * cap * 2);
			if (!bigger) {
				mem_free(files);
				return -ENOMEM;
			}
			memset(bigger + cap, 0, sizeof(*files) * cap);
			files = bigger;
			cap *= 2;
		}
		uint32_t size = sfs_size_kib[sfs_pick(sfs_size_pct, SH_ARRAY_SIZE(sfs_size_pct),
						      (uint32_t)(sfs_lcg(&rng) % 100))] * 1024u;
		files[n].sf_size = size;
		files[n].sf_dir = n / SFS_FILES_PER_DIR;
		files[n].sf_idx = n % SFS_FILES_PER_DIR;
		total += size;
		n++;
	}
	st->st_files = files;
	st->st_nfiles = n;
	st->st_ndirs = (n + SFS_FILES_PER_DIR - 1) / SFS_FILES_PER_DIR;
	st->st_dirs = mem_zalloc(sizeof(*st->st_dirs) * st->st_ndirs);
	st->st_work = mem_alloc(sizeof(*st->st_work) * n);
	if (!st->st_dirs || !st->st_work)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		if (files[i].sf_idx % 10 < 3)
			st->st_work[st->st_nwork++] = i;
	return 0;
}

/* ---- set-up: LOOKUP each object, create what is missing ---- */

/* Set-up steps beyond plain procedure numbers (which are below 22). */
enum sfs_setup_step { STEP_DIR_LOOKUP = 100, STEP_FILE_LOOKUP, STEP_LINK_LOOKUP, STEP_WRITE };

static int sfs_setup_issue(struct bench_thread *t, unsigned obj, unsigned step, uint64_t off);

static void sfs_setup_done(struct bench_thread *t, struct bench_op *op, int status,
			   const struct bench_nfs3_res *res)
{
	struct sfs_thread *st = t->bt_wl;
	unsigned obj = op->op_u32[0];
	if (status < 0)
		return; /* counted as failed by the engine; the set-up then fails as a whole */
	int rc = 0;
	switch (op->op_proc) {
	case BENCH_NFS3_LOOKUP:
		if (op->op_u32[1] == STEP_DIR_LOOKUP) {
			if (res->nr_status == BENCH_NFS3_OK)
				st->st_dirs[obj].sd_fh = res->nr_fh;
			else
				rc = sfs_setup_issue(t, obj, BENCH_NFS3_MKDIR, 0);
		} else if (op->op_u32[1] == STEP_LINK_LOOKUP) {
			if (res->nr_status == BENCH_NFS3_OK)
				st->st_dirs[obj].sd_link = res->nr_fh;
			else
				rc = sfs_setup_issue(t, obj, BENCH_NFS3_SYMLINK, 0);
		} else {
			struct sfs_file *f = &st->st_files[obj];
			if (res->nr_status != BENCH_NFS3_OK) {
				rc = sfs_setup_issue(t, obj, BENCH_NFS3_CREATE, 0);
			} else {
				f->sf_fh = res->nr_fh;
				if (res->nr_has_attr && res->nr_attr.fa_size == f->sf_size)
					st->st_reused++;
				else
					rc = sfs_setup_issue(t, obj, BENCH_NFS3_SETATTR, 0);
			}
		}
		break;
	case BENCH_NFS3_MKDIR:
	case BENCH_NFS3_SYMLINK:
	case BENCH_NFS3_CREATE:
		if (!res->nr_has_fh) {
			log_error("bench: %s returned no file handle", bench_nfs3_proc_name(op->op_proc));
			t->bt_error = -EPROTO;
			return;
		}
		if (op->op_proc == BENCH_NFS3_MKDIR) {
			st->st_dirs[obj].sd_fh = res->nr_fh;
		} else if (op->op_proc == BENCH_NFS3_SYMLINK) {
			st->st_dirs[obj].sd_link = res->nr_fh;
		} else {
			st->st_files[obj].sf_fh = res->nr_fh;
			st->st_created++;
			rc = sfs_setup_issue(t, obj, STEP_WRITE, 0);
		}
		break;
	case BENCH_NFS3_WRITE: {
		uint64_t next = op->op_u64[0] + res->nr_count;
		st->st_created_bytes += res->nr_count;
		if (res->nr_count == 0) {
			t->bt_error = -EIO; /* a server that writes nothing would loop forever */
			return;
		}
		if (next < st->st_files[obj].sf_size)
			rc = sfs_setup_issue(t, obj, STEP_WRITE, next);
		break;
	}
	default:
		break;
	}
	if (rc < 0 && t->bt_error == 0)
		t->bt_error = rc;
}

static void sfs_name(char *buf, size_t cap, char kind, unsigned n)
{
	snprintf(buf, cap, "%c%03u", kind, n);
}

static int sfs_setup_issue(struct bench_thread *t, unsigned obj, unsigned step, uint64_t off)
{
	struct sfs_thread *st = t->bt_wl;
	struct xdr_enc *enc;
	char name[32];
	struct bench_op *op;
	uint32_t proc = step == STEP_WRITE ? BENCH_NFS3_WRITE
		      : step >= STEP_DIR_LOOKUP && step <= STEP_LINK_LOOKUP ? BENCH_NFS3_LOOKUP
									      : step;
	static const uint16_t stat_of[BENCH_NFS3_NPROCS] = {
		[BENCH_NFS3_LOOKUP] = SU_LOOKUP, [BENCH_NFS3_MKDIR] = SU_MKDIR,
		[BENCH_NFS3_CREATE] = SU_CREATE, [BENCH_NFS3_WRITE] = SU_WRITE,
		[BENCH_NFS3_SETATTR] = SU_SETATTR, [BENCH_NFS3_SYMLINK] = SU_SYMLINK,
	};
	op = bench_op_begin(t, proc, stat_of[proc], 512, 0, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : -EAGAIN;
	op->op_u32[0] = obj;
	op->op_u32[1] = step;
	op->op_u64[0] = off;
	op->op_done = sfs_setup_done;
	const void *bulk = NULL;
	size_t bulk_len = 0;
	switch (step) {
	case STEP_DIR_LOOKUP:
	case BENCH_NFS3_MKDIR:
		sfs_name(name, sizeof(name), 'd', obj);
		if (step == STEP_DIR_LOOKUP) {
			op->op_noent = BENCH_NOENT_ALLOWED;
			bench_nfs3_enc_dirop(enc, &st->st_tdir, name, strlen(name));
		} else {
			bench_nfs3_enc_mkdir(enc, &st->st_tdir, name, strlen(name), 0755);
		}
		break;
	case STEP_LINK_LOOKUP:
		op->op_noent = BENCH_NOENT_ALLOWED;
		bench_nfs3_enc_dirop(enc, &st->st_dirs[obj].sd_fh, "l0", 2);
		break;
	case BENCH_NFS3_SYMLINK:
		bench_nfs3_enc_symlink(enc, &st->st_dirs[obj].sd_fh, "l0", 2, "f000");
		break;
	case STEP_FILE_LOOKUP:
	case BENCH_NFS3_CREATE: {
		const struct sfs_file *f = &st->st_files[obj];
		sfs_name(name, sizeof(name), 'f', f->sf_idx);
		if (step == STEP_FILE_LOOKUP) {
			op->op_noent = BENCH_NOENT_ALLOWED;
			bench_nfs3_enc_dirop(enc, &st->st_dirs[f->sf_dir].sd_fh, name, strlen(name));
		} else {
			bench_nfs3_enc_create(enc, &st->st_dirs[f->sf_dir].sd_fh, name, strlen(name),
					      false, 0644);
		}
		break;
	}
	case BENCH_NFS3_SETATTR:
		bench_nfs3_enc_setattr(enc, &st->st_files[obj].sf_fh, true, 0644, true,
				       st->st_files[obj].sf_size, false);
		break;
	case STEP_WRITE: {
		const struct sfs_file *f = &st->st_files[obj];
		uint32_t n = (uint32_t)SH_MIN((uint64_t)SH_MIN(SFS_SETUP_XFER, st->st_wtmax),
					      f->sf_size - off);
		bench_nfs3_enc_write(enc, &f->sf_fh, off, n, BENCH_UNSTABLE);
		bulk = st->st_wbuf;
		bulk_len = n;
		break;
	}
	default:
		break;
	}
	return bench_op_send(t, op, bulk, bulk_len);
}

/* Phase 1 issues directory LOOKUPs, phase 2 file and link LOOKUPs (one chain per object). */
static int sfs_setup_next_dirs(struct bench_thread *t)
{
	struct sfs_thread *st = t->bt_wl;
	if (st->st_next >= st->st_ndirs)
		return 0;
	int rc = sfs_setup_issue(t, st->st_next, STEP_DIR_LOOKUP, 0);
	if (rc == -EAGAIN)
		return 0;
	if (rc < 0)
		return rc;
	st->st_next++;
	return 1;
}

static int sfs_setup_next_files(struct bench_thread *t)
{
	struct sfs_thread *st = t->bt_wl;
	unsigned total = st->st_nfiles + st->st_ndirs;
	if (st->st_next >= total)
		return 0;
	unsigned k = st->st_next;
	int rc = k < st->st_nfiles ? sfs_setup_issue(t, k, STEP_FILE_LOOKUP, 0)
				   : sfs_setup_issue(t, k - st->st_nfiles, STEP_LINK_LOOKUP, 0);
	if (rc == -EAGAIN)
		return 0;
	if (rc < 0)
		return rc;
	st->st_next++;
	return 1;
}

/* ---- the mix ---- */

static void sfs_spare_name(const struct sfs_thread *st, const struct sfs_spare *sp, char *buf, size_t cap)
{
	snprintf(buf, cap, "s%08x-%u", st->st_run, sp->sp_seq);
}

static void sfs_mix_done(struct bench_thread *t, struct bench_op *op, int status,
			 const struct bench_nfs3_res *res)
{
	struct sfs_thread *st = t->bt_wl;
	if (op->op_proc == BENCH_NFS3_CREATE) {
		struct sfs_spare *sp = &st->st_ring[op->op_u32[0]];
		sp->sp_ready = true;
		sp->sp_dead = status < 0;
	}
	if (status == 0 && t->bt_measuring) {
		if (op->op_proc == BENCH_NFS3_READ)
			t->bt_bytes_read += res->nr_count;
		else if (op->op_proc == BENCH_NFS3_WRITE)
			t->bt_bytes_written += res->nr_count;
	}
}

static uint32_t sfs_xfer(struct bench_thread *t, const struct sfs_file *f, uint32_t max, uint64_t *off_out)
{
	uint32_t n = sfs_xfer_kib[sfs_pick(sfs_xfer_pct, SH_ARRAY_SIZE(sfs_xfer_pct),
					   bench_rand_below(t, 100))] * 1024u;
	n = SH_MIN(n, max);
	uint32_t blocks = (f->sf_size + 4095u) / 4096u;
	uint64_t off = (uint64_t)bench_rand_below(t, blocks) * 4096u;
	*off_out = off;
	return (uint32_t)SH_MIN((uint64_t)n, f->sf_size - off);
}

/* Pops dead spares off the ring head; true if a ready one is at the head. */
static bool sfs_spare_head_ready(struct sfs_thread *st)
{
	while (st->st_ring_len > 0 && st->st_ring[st->st_ring_head].sp_ready &&
	       st->st_ring[st->st_ring_head].sp_dead) {
		st->st_ring_head = (st->st_ring_head + 1) % SFS_SPARE_CAP;
		st->st_ring_len--;
	}
	return st->st_ring_len > 0 && st->st_ring[st->st_ring_head].sp_ready;
}

static int sfs_mix(struct bench_thread *t, uint64_t intended_ns)
{
	struct sfs_thread *st = t->bt_wl;
	uint32_t kind = sfs_pick(sfs_mix_pct, SFS_NSTATS, bench_rand_below(t, 100));
	if (kind == SFS_REMOVE && !sfs_spare_head_ready(st))
		kind = SFS_CREATE;
	if (kind == SFS_CREATE && st->st_ring_len == SFS_SPARE_CAP)
		kind = sfs_spare_head_ready(st) ? SFS_REMOVE : SFS_GETATTR;
	static const uint32_t proc_of[SFS_NSTATS] = {
		BENCH_NFS3_GETATTR, BENCH_NFS3_LOOKUP, BENCH_NFS3_READ, BENCH_NFS3_ACCESS,
		BENCH_NFS3_WRITE, BENCH_NFS3_SETATTR, BENCH_NFS3_READDIRPLUS, BENCH_NFS3_READLINK,
		BENCH_NFS3_READDIR, BENCH_NFS3_CREATE, BENCH_NFS3_REMOVE, BENCH_NFS3_FSSTAT,
	};
	struct xdr_enc *enc;
	struct bench_op *op = bench_op_begin(t, proc_of[kind], (uint16_t)kind, 512, intended_ns, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : 0;
	op->op_done = sfs_mix_done;
	const struct sfs_file *f = &st->st_files[st->st_work[bench_rand_below(t, st->st_nwork)]];
	const struct sfs_dir *d = &st->st_dirs[bench_rand_below(t, st->st_ndirs)];
	char name[48];
	const void *bulk = NULL;
	size_t bulk_len = 0;
	uint64_t off;
	uint32_t n;
	switch (kind) {
	case SFS_GETATTR:
		bench_nfs3_enc_fh(enc, &f->sf_fh);
		break;
	case SFS_LOOKUP:
		if (bench_rand_below(t, 10) == 0) {
			snprintf(name, sizeof(name), "nx%u", bench_rand_below(t, 1000000));
			op->op_noent = BENCH_NOENT_EXPECTED;
		} else {
			sfs_name(name, sizeof(name), 'f', f->sf_idx);
		}
		bench_nfs3_enc_dirop(enc, &st->st_dirs[f->sf_dir].sd_fh, name, strlen(name));
		break;
	case SFS_READ:
		n = sfs_xfer(t, f, st->st_rtmax, &off);
		bench_nfs3_enc_read(enc, &f->sf_fh, off, n);
		break;
	case SFS_ACCESS:
		bench_nfs3_enc_access(enc, &f->sf_fh, 0x3f);
		break;
	case SFS_WRITE:
		n = sfs_xfer(t, f, st->st_wtmax, &off);
		bench_nfs3_enc_write(enc, &f->sf_fh, off, n, st->st_stable);
		bulk = st->st_wbuf;
		bulk_len = n;
		break;
	case SFS_SETATTR:
		bench_nfs3_enc_setattr(enc, &f->sf_fh, true, bench_rand_below(t, 2) ? 0644 : 0640,
				       false, 0, false);
		break;
	case SFS_READDIRPLUS:
		bench_nfs3_enc_readdirplus(enc, &d->sd_fh, 0, 0, 4096, 16384);
		break;
	case SFS_READLINK:
		bench_nfs3_enc_fh(enc, &d->sd_link);
		break;
	case SFS_READDIR:
		bench_nfs3_enc_readdir(enc, &d->sd_fh, 0, 0, 8192);
		break;
	case SFS_CREATE: {
		unsigned slot = (st->st_ring_head + st->st_ring_len) % SFS_SPARE_CAP;
		struct sfs_spare *sp = &st->st_ring[slot];
		sp->sp_dir = (uint32_t)(d - st->st_dirs);
		sp->sp_seq = st->st_next_seq++;
		sp->sp_ready = false;
		sp->sp_dead = false;
		st->st_ring_len++;
		op->op_u32[0] = slot;
		sfs_spare_name(st, sp, name, sizeof(name));
		bench_nfs3_enc_create(enc, &d->sd_fh, name, strlen(name), true, 0644);
		break;
	}
	case SFS_REMOVE: {
		struct sfs_spare *sp = &st->st_ring[st->st_ring_head];
		st->st_ring_head = (st->st_ring_head + 1) % SFS_SPARE_CAP;
		st->st_ring_len--;
		sfs_spare_name(st, sp, name, sizeof(name));
		bench_nfs3_enc_dirop(enc, &st->st_dirs[sp->sp_dir].sd_fh, name, strlen(name));
		break;
	}
	case SFS_FSSTAT:
	default:
		bench_nfs3_enc_fh(enc, &st->st_ctx->bc_root);
		break;
	}
	int rc = bench_op_send(t, op, bulk, bulk_len);
	return rc < 0 ? rc : 1;
}

/* Removes the spares left at the end (closed loop). */
static int sfs_cleanup_next(struct bench_thread *t)
{
	struct sfs_thread *st = t->bt_wl;
	if (!sfs_spare_head_ready(st))
		return 0;
	struct xdr_enc *enc;
	struct bench_op *op = bench_op_begin(t, BENCH_NFS3_REMOVE, SU_REMOVE, 512, 0, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : 0;
	struct sfs_spare *sp = &st->st_ring[st->st_ring_head];
	st->st_ring_head = (st->st_ring_head + 1) % SFS_SPARE_CAP;
	st->st_ring_len--;
	char name[48];
	sfs_spare_name(st, sp, name, sizeof(name));
	bench_nfs3_enc_dirop(enc, &st->st_dirs[sp->sp_dir].sd_fh, name, strlen(name));
	int rc = bench_op_send(t, op, NULL, 0);
	return rc < 0 ? rc : 1;
}

static int sfs_run_closed(const struct bench_ctx *ctx, struct sfs_thread **sts, unsigned nthreads,
			  int (*next)(struct bench_thread *t), uint64_t *failed_out)
{
	const struct bench_opts *o = ctx->bc_opts;
	struct bench_engine eng = {
		.be_ctx = ctx,
		.be_nthreads = nthreads,
		.be_nconns = o->bo_conns,
		.be_depth = o->bo_depth,
		.be_stat_names = setup_stat_names,
		.be_nstats = SU_NSTATS,
		.be_next = next,
		.be_thread_wl = (void **)sts,
	};
	int rc = bench_engine_run(&eng);
	if (rc == 0)
		rc = eng.be_error;
	*failed_out = eng.be_failed + eng.be_unanswered;
	bench_engine_fini(&eng);
	return rc;
}

static void sfs_free(struct sfs_thread **sts, unsigned n)
{
	if (!sts)
		return;
	for (unsigned i = 0; i < n; i++) {
		if (!sts[i])
			continue;
		mem_free(sts[i]->st_files);
		mem_free(sts[i]->st_dirs);
		mem_free(sts[i]->st_work);
		mem_free(sts[i]->st_wbuf);
		mem_free(sts[i]);
	}
	mem_free(sts);
}

/* The rate offered while measuring the peak: far above what one load thread can issue, so the
 * calls in flight (P x C x B), not the pacing, set the pace. */
#define SFS_PROBE_RATE 1e7

/* --rate auto: runs the mix unpaced for --warmup + --runtime and returns the throughput achieved,
 * which becomes the 100% point. A SPECsfs2008 sponsor chose the requested loads so that the last
 * point sat at the server's peak; this does the same for any server, so that two servers'
 * curves (and so their overall response times) each span their own range. */
static int sfs_probe_peak(const struct bench_ctx *ctx, struct sfs_thread **sts, double *peak_out)
{
	const struct bench_opts *o = ctx->bc_opts;
	struct bench_engine eng = {
		.be_ctx = ctx,
		.be_nthreads = o->bo_procs,
		.be_nconns = o->bo_conns,
		.be_depth = o->bo_depth,
		.be_stat_names = sfs_stat_names,
		.be_nstats = SFS_NSTATS,
		.be_open = true,
		.be_rate = SFS_PROBE_RATE,
		.be_warmup_s = o->bo_warmup_s,
		.be_runtime_s = o->bo_runtime_s,
		.be_mix = sfs_mix,
		.be_thread_wl = (void **)sts,
	};
	int rc = bench_engine_run(&eng);
	if (rc < 0)
		return rc;
	struct bench_point pt;
	memset(&pt, 0, sizeof(pt));
	bench_engine_point(&eng, SFS_PROBE_RATE, &pt);
	rc = eng.be_error;
	bench_engine_fini(&eng);
	if (rc < 0) {
		log_error("bench: the peak probe stopped: %s", sh_strerror(rc));
		return rc;
	}
	if (pt.bp_failed > 0) {
		log_error("bench: %" PRIu64 " operations failed while measuring the peak", pt.bp_failed);
		return -EIO;
	}
	if (!(pt.bp_achieved_ops >= 1.0)) {
		log_error("bench: the server completed no operations while its peak was measured");
		return -EIO;
	}
	if (!o->bo_quiet)
		fprintf(stderr, "sfs2008: peak probe: %.0f ops/s unpaced, response %.3f ms\n", pt.bp_achieved_ops,
			pt.bp_mean_sent_ms);
	*peak_out = pt.bp_achieved_ops;
	return 0;
}

/* Sets the point's bp_durable_ms: the mean response of its calls whose reply NFSv3 makes wait
 * for stable storage (SETATTR, CREATE and REMOVE; WRITE too when they are FILE_SYNC), so that a
 * reader can tell the cost of durability from the rest of the curve. */
static void sfs_point_durable(struct bench_point *pt, bool stable_writes)
{
	double sum = 0.0;
	uint64_t count = 0;
	for (unsigned i = 0; i < pt->bp_nprocs; i++) {
		const struct bench_proc_result *r = &pt->bp_procs[i];
		/* The engine names each procedure by the very string of sfs_stat_names. */
		bool durable = r->bpr_name == sfs_stat_names[SFS_SETATTR] ||
			       r->bpr_name == sfs_stat_names[SFS_CREATE] ||
			       r->bpr_name == sfs_stat_names[SFS_REMOVE] ||
			       (stable_writes && r->bpr_name == sfs_stat_names[SFS_WRITE]);
		if (!durable || r->bpr_count == 0 || !isfinite(r->bpr_resp_mean_ms))
			continue;
		sum += r->bpr_resp_mean_ms * (double)r->bpr_count;
		count += r->bpr_count;
	}
	pt->bp_durable_ms = count > 0 ? sum / (double)count : NAN;
}

int bench_sfs2008(const struct bench_ctx *ctx, struct bench_run *run)
{
	const struct bench_opts *o = ctx->bc_opts;
	unsigned P = o->bo_procs;
	double mb = o->bo_fileset_spec ? SFS_SPEC_MB_PER_OP * o->bo_rate : o->bo_fileset_mb;
	uint64_t total_bytes = (uint64_t)(mb * 1048576.0);
	char text[256];
	int rc;
	uint64_t failed = 0;

	/* Directories above the per-thread trees, synchronously. */
	struct bench_fh set_dir;
	snprintf(text, sizeof(text), "sfs-p%u-m%.0f", P, mb);
	rc = bench_sync_mkdir(ctx, &ctx->bc_work, text, &set_dir);
	if (rc < 0) {
		log_error("bench: cannot create the file set directory %s: %s", text, sh_strerror(rc));
		return rc;
	}
	struct sfs_thread **sts = mem_zalloc(sizeof(*sts) * P);
	if (!sts)
		return -ENOMEM;
	uint32_t run_tag = (uint32_t)ctx->bc_run_id;
	for (unsigned i = 0; i < P; i++) {
		struct sfs_thread *st = mem_zalloc(sizeof(*st));
		sts[i] = st;
		if (!st) {
			rc = -ENOMEM;
			goto out;
		}
		st->st_index = i;
		st->st_ctx = ctx;
		st->st_rtmax = SH_MIN(ctx->bc_rtmax, SFS_MAX_XFER);
		st->st_wtmax = SH_MIN(ctx->bc_wtmax, SFS_MAX_XFER);
		st->st_stable = o->bo_stable_writes ? BENCH_FILE_SYNC : BENCH_UNSTABLE;
		st->st_run = run_tag;
		st->st_wbuf = mem_alloc(SFS_MAX_XFER);
		if (!st->st_wbuf) {
			rc = -ENOMEM;
			goto out;
		}
		for (unsigned b = 0; b < SFS_MAX_XFER; b++)
			st->st_wbuf[b] = (uint8_t)(b * 7u + i);
		rc = sfs_thread_layout(st, total_bytes / P);
		if (rc < 0)
			goto out;
		char tname[32];
		snprintf(tname, sizeof(tname), "t%u", i);
		rc = bench_sync_mkdir(ctx, &set_dir, tname, &st->st_tdir);
		if (rc < 0)
			goto out;
	}
	uint64_t t0 = clock_monotonic_ns();
	rc = sfs_run_closed(ctx, sts, P, sfs_setup_next_dirs, &failed);
	if (rc == 0 && failed == 0) {
		for (unsigned i = 0; i < P; i++)
			sts[i]->st_next = 0;
		rc = sfs_run_closed(ctx, sts, P, sfs_setup_next_files, &failed);
	}
	if (rc < 0 || failed > 0) {
		log_error("bench: file set set-up failed (%" PRIu64 " failed operations%s%s)", failed,
			  rc < 0 ? ", " : "", rc < 0 ? sh_strerror(rc) : "");
		if (rc == 0)
			rc = -EIO;
		goto out;
	}
	uint64_t nfiles = 0, nwork = 0, created = 0, reused = 0, cbytes = 0;
	for (unsigned i = 0; i < P; i++) {
		nfiles += sts[i]->st_nfiles;
		nwork += sts[i]->st_nwork;
		created += sts[i]->st_created;
		reused += sts[i]->st_reused;
		cbytes += sts[i]->st_created_bytes;
	}
	snprintf(text, sizeof(text),
		 "%s: %.0f MB, %" PRIu64 " files (%" PRIu64 " accessed, 30%%) in %u dirs of %u; "
		 "%" PRIu64 " created (%.1f MB) and %" PRIu64 " reused in %.1f s",
		 o->bo_fileset_spec ? "SPECsfs2008 rule, 120 MB per requested op/s" : "--fileset-mb",
		 mb, nfiles, nwork, sts[0]->st_ndirs * P, SFS_FILES_PER_DIR, created,
		 (double)cbytes / 1048576.0, reused, (double)(clock_monotonic_ns() - t0) / 1e9);
	run->br_fileset = bench_keep(text);
	if (!o->bo_quiet)
		fprintf(stderr, "sfs2008: file set: %s\n", text);

	/* The load points. */
	if (ctx->bc_target->bt_pid > 0 && bench_proc_reset_hwm(ctx->bc_target->bt_pid) < 0)
		log_warn("bench: cannot reset the server's peak RSS; it covers the server's whole life");
	run->br_points = mem_zalloc(sizeof(*run->br_points) * o->bo_points);
	if (!run->br_points) {
		rc = -ENOMEM;
		goto out;
	}
	double top_rate = o->bo_rate;
	if (o->bo_rate_auto) {
		rc = sfs_probe_peak(ctx, sts, &top_rate);
		if (rc < 0)
			goto out;
		snprintf(text, sizeof(text),
			 "1/%u .. %u/%u of this server's own peak, %.0f ops/s, measured unpaced first", o->bo_points,
			 o->bo_points, o->bo_points, top_rate);
	} else {
		snprintf(text, sizeof(text), "1/%u .. %u/%u of --rate %.0f ops/s", o->bo_points, o->bo_points,
			 o->bo_points, top_rate);
	}
	run->br_load = bench_keep(text);
	if (!o->bo_quiet)
		fprintf(stderr, "sfs2008: load points: %s\n", text);
	for (unsigned p = 0; p < o->bo_points; p++) {
		double rate = top_rate * (double)(p + 1) / (double)o->bo_points;
		struct bench_engine eng = {
			.be_ctx = ctx,
			.be_nthreads = P,
			.be_nconns = o->bo_conns,
			.be_depth = o->bo_depth,
			.be_stat_names = sfs_stat_names,
			.be_nstats = SFS_NSTATS,
			.be_open = true,
			.be_rate = rate,
			.be_warmup_s = o->bo_warmup_s,
			.be_runtime_s = o->bo_runtime_s,
			.be_mix = sfs_mix,
			.be_thread_wl = (void **)sts,
		};
		rc = bench_engine_run(&eng);
		if (rc < 0)
			goto out;
		struct bench_point *pt = &run->br_points[run->br_npoints++];
		bench_engine_point(&eng, rate, pt);
		sfs_point_durable(pt, o->bo_stable_writes);
		if (!o->bo_quiet)
			fprintf(stderr,
				"sfs2008: point %u/%u: requested %.0f ops/s, achieved %.0f ops/s, "
				"response %.3f ms (queued %.3f ms), %" PRIu64 " failed, %" PRIu64
				" unanswered\n",
				p + 1, o->bo_points, rate, pt->bp_achieved_ops, pt->bp_mean_sent_ms,
				pt->bp_mean_ms,
				pt->bp_failed, pt->bp_unanswered);
		rc = eng.be_error;
		bench_engine_fini(&eng);
		if (rc < 0) {
			log_error("bench: load point %u stopped: %s", p + 1, sh_strerror(rc));
			goto out;
		}
	}
	if (ctx->bc_target->bt_pid > 0)
		run->br_server_peak_rss_kib = bench_proc_hwm_kib(ctx->bc_target->bt_pid);
	rc = sfs_run_closed(ctx, sts, P, sfs_cleanup_next, &failed);
	if (rc == 0 && failed > 0) {
		log_error("bench: %" PRIu64 " spare files could not be removed", failed);
		rc = -EIO;
	}
out:
	sfs_free(sts, P);
	return rc;
}
