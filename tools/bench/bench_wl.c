/* bench_wl.c: the workloads besides sfs2008: seq (large sequential transfers), meta (metadata
 * operations on many files of one directory), syncwrite (small stable writes from many requests
 * in flight) and varmail (filebench's mail-server flow).
 *
 * seq: one file of --size-mb written with --xfer transfers as UNSTABLE WRITEs then one COMMIT,
 *   written again with FILE_SYNC WRITEs, then read back; every 4 KiB block carries its own file
 *   offset in its first 8 bytes and a fixed pattern after it, so a READ is verified in place (a
 *   misplaced or stale block fails). --conns x --depth transfers are in flight per thread;
 *   --procs threads share the file in interleaved chunks. MB/s per phase (MB = 2^20 bytes),
 *   the COMMIT included in the UNSTABLE phase. A COMMIT verifier different from the WRITEs'
 *   (the server restarted) fails the run. --phases unstable,filesync,read picks phases (a read
 *   needs a write before it); a file too large to write twice is written once that way.
 *
 * meta: --files N files in one fresh directory: CREATE (GUARDED) all, GETATTR all, LOOKUP all,
 *   REMOVE all, each phase closed-loop with every slot busy; ops/s per phase. The list phase,
 *   run only when --phases names it (between lookup and remove), lists the whole directory
 *   with READDIRPLUS, one call after another from the previous reply's last cookie (dircount
 *   64 KiB, maxcount 256 KiB), and fails unless it saw each of the N names exactly once, "."
 *   and ".." once each, and nothing else; its figure is entries/s. Without the remove phase the
 *   directory and its files stay (the server's file system is thrown away afterwards).
 *
 * syncwrite: group commit under load. --files (64) files, each --size-mb/--files long, written
 *   with --xfer (4 KiB) FILE_SYNC WRITEs: --conns x --depth (4 x 16) calls in flight per thread,
 *   closed loop, for --warmup then --runtime seconds. A thread owns the files t, t+P, t+2P...
 *   and sends each write to the next of them in turn, at that file's next offset, wrapping to 0
 *   at its end; so with as many files as slots each file sees about one write at a time. Every
 *   reply must say NFS3_OK, count = the transfer and committed = FILE_SYNC, else the operation
 *   failed. The payload is pseudo-random, so that neither compression nor hole detection makes
 *   the writes cheaper. Figures: ops/s, MB/s, mean and p99 latency (from the send).
 *
 * varmail: filebench's varmail personality over NFS. --files (1,000) files with sizes uniform
 *   in 1..32 KiB (mean 16 KiB) in one directory, 80% of them present at the start, and --flows
 *   (16) flows each repeating filebench's sequence:
 *     deletefile; createfile, appendfilerand, fsync, closefile;
 *     openfile, readwholefile, appendfilerand, fsync, closefile;
 *     openfile, readwholefile, closefile
 *   as REMOVE; CREATE, WRITE (UNSTABLE, 1..16 KiB at the end of file), COMMIT; LOOKUP, READs of
 *   up to 1 MiB (rtmax) to EOF, WRITE, COMMIT; LOOKUP, READs. NFSv3 has no open or close, so
 *   open is the LOOKUP and close sends nothing; the figures count NFS operations. The summary line
 *   follows filebench's "IO Summary:" format. */
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench_impl.h"

#define WL_BLOCK 4096u

/* ---- shared helpers ---- */

static int wl_sync_simple(const struct bench_ctx *ctx, uint32_t proc, const struct bench_fh *fh,
			  const char *name, uint32_t expect_status)
{
	uint8_t args[512];
	struct xdr_enc enc;
	xdr_enc_init(&enc, args, sizeof(args));
	if (name)
		bench_nfs3_enc_dirop(&enc, fh, name, strlen(name));
	else
		bench_nfs3_enc_commit(&enc, fh, 0, 0);
	struct bench_nfs3_res res;
	int rc = bench_sync_nfs(ctx, proc, args, xdr_enc_len(&enc), &res);
	if (rc == 0 && res.nr_status != expect_status)
		rc = -EREMOTEIO;
	return rc;
}

/* CREATE of name in dir, waited for; *fh gets the new file's handle. */
static int wl_sync_create(const struct bench_ctx *ctx, const struct bench_fh *dir, const char *name,
			  bool guarded, struct bench_fh *fh)
{
	uint8_t args[512];
	struct xdr_enc enc;
	xdr_enc_init(&enc, args, sizeof(args));
	bench_nfs3_enc_create(&enc, dir, name, strlen(name), guarded, 0644);
	struct bench_nfs3_res res;
	int rc = bench_sync_nfs(ctx, BENCH_NFS3_CREATE, args, xdr_enc_len(&enc), &res);
	if (rc == 0 && (res.nr_status != BENCH_NFS3_OK || !res.nr_has_fh))
		rc = -EREMOTEIO;
	if (rc == 0)
		*fh = res.nr_fh;
	return rc;
}

/* Adds the engine's one measured phase to run as its next point; returns the point and sets
 * *secs to the phase's elapsed seconds (never 0). */
static struct bench_point *wl_add_point(const struct bench_engine *eng, struct bench_run *run, double *secs)
{
	struct bench_point *pt = &run->br_points[run->br_npoints++];
	bench_engine_point(eng, 0, pt);
	*secs = eng->be_elapsed_s > 0 ? eng->be_elapsed_s : 1e-9;
	return pt;
}

static void wl_point_from(const struct bench_engine *eng, struct bench_run *run, double ops_s_fig,
			  const char *fig_name, const char *unit)
{
	double secs;
	(void)wl_add_point(eng, run, &secs);
	if (fig_name)
		bench_run_add_figure(run, fig_name, ops_s_fig, unit);
}

static int wl_run_engine(const struct bench_ctx *ctx, struct bench_engine *eng, void **wl,
			 const char *const *names, unsigned nstats, int (*next)(struct bench_thread *t))
{
	const struct bench_opts *o = ctx->bc_opts;
	eng->be_ctx = ctx;
	if (eng->be_nthreads == 0)
		eng->be_nthreads = o->bo_procs;
	if (eng->be_nconns == 0)
		eng->be_nconns = o->bo_conns;
	if (eng->be_depth == 0)
		eng->be_depth = o->bo_depth;
	eng->be_stat_names = names;
	eng->be_nstats = nstats;
	eng->be_next = next;
	eng->be_thread_wl = wl;
	return bench_engine_run(eng);
}

/* "phases: a, b" from a phase mask, for the file set description. */
static void wl_phase_list(const char *const *names, unsigned n, uint32_t mask, char *buf, size_t cap)
{
	size_t len = (size_t)snprintf(buf, cap, "phases:");
	for (unsigned i = 0; i < n && len < cap; i++)
		if (mask & (1u << i))
			len += (size_t)snprintf(buf + len, cap - len, "%s %s", len > 7 ? "," : "", names[i]);
}

/* ================================ seq ================================ */

enum { SEQ_WRITE_UNSTABLE, SEQ_WRITE_FILESYNC, SEQ_READ, SEQ_NPHASES };
static const char *const seq_stat_names[SEQ_NPHASES] = {"WRITE-UNSTABLE", "WRITE-FILE_SYNC", "READ"};
/* --phases names, in the order the phases run. */
static const char *const seq_phase_names[SEQ_NPHASES] = {"unstable", "filesync", "read"};

struct seq_state {
	const struct bench_ctx *sq_ctx;
	struct bench_fh sq_fh;
	uint64_t sq_size;
	uint32_t sq_xfer;
	unsigned sq_nthreads;
	unsigned sq_phase;
	uint64_t sq_verf;
	bool sq_verf_set;
	uint8_t *sq_template; /* WL_BLOCK bytes: the pattern after each block's stamp */
	uint64_t sq_verify_failed;
	uint64_t sq_verf_changed;
};
struct seq_thread {
	struct seq_state *sqt_s;
	uint64_t sqt_next_chunk;  /* chunk index (of sq_xfer bytes) */
	uint8_t *sqt_bufs;        /* conns * depth buffers of sq_xfer bytes */
	unsigned sqt_depth;
	uint64_t sqt_verf;
	bool sqt_verf_set;
	bool sqt_verf_changed;
};

/* Each slot buffer holds the template in every block from the start (seq_slots_init), so a WRITE
 * only stamps its blocks' offsets: no 1 MiB copy per call, which was a tenth of the load core. */
static void seq_slots_init(const struct seq_state *s, uint8_t *bufs, size_t bytes)
{
	for (size_t b = 0; b < bytes; b += WL_BLOCK)
		memcpy(bufs + b, s->sq_template, SH_MIN((size_t)WL_BLOCK, bytes - b));
}

/* Stamps each block of a slot buffer with its file offset (the buffer's data is then exactly
 * what seq_verify expects at off). */
static void seq_stamp(uint8_t *buf, uint64_t off, uint32_t len)
{
	for (uint32_t b = 0; b + 8 <= len; b += WL_BLOCK) {
		uint64_t stamp = off + b;
		memcpy(buf + b, &stamp, 8);
	}
}

static bool seq_verify(const struct seq_state *s, const uint8_t *data, uint64_t off, uint32_t len)
{
	for (uint32_t b = 0; b < len; b += WL_BLOCK) {
		uint32_t n = SH_MIN(WL_BLOCK, len - b);
		uint64_t stamp = off + b;
		if (n >= 8 && memcmp(data + b, &stamp, 8) != 0)
			return false;
		if (n > 8 && memcmp(data + b + 8, s->sq_template + 8, n - 8) != 0)
			return false;
	}
	return true;
}

static void seq_done(struct bench_thread *t, struct bench_op *op, int status,
		     const struct bench_nfs3_res *res)
{
	struct seq_thread *sqt = t->bt_wl;
	struct seq_state *s = sqt->sqt_s;
	if (status < 0)
		return;
	uint32_t want = op->op_u32[0];
	uint64_t off = op->op_u64[0];
	if (res->nr_count != want) {
		/* Short transfers are legal but this workload does not resend the rest; count it. */
		log_ratelimited(LOG_WARN, "bench: seq: short %s at %" PRIu64 ": %u of %u bytes",
				bench_nfs3_proc_name(op->op_proc), off, res->nr_count, want);
		t->bt_stats[op->op_stat].bs_failed++;
		return;
	}
	if (op->op_proc == BENCH_NFS3_READ) {
		if (!seq_verify(s, res->nr_data, off, res->nr_count)) {
			log_ratelimited(LOG_ERROR, "bench: seq: data read at %" PRIu64 " is not what was written", off);
			t->bt_stats[op->op_stat].bs_failed++;
			return;
		}
		t->bt_bytes_read += res->nr_count;
	} else {
		if (s->sq_phase == SEQ_WRITE_FILESYNC && res->nr_committed != BENCH_FILE_SYNC) {
			log_ratelimited(LOG_ERROR, "bench: seq: FILE_SYNC write answered committed=%u",
					res->nr_committed);
			t->bt_stats[op->op_stat].bs_failed++;
		}
		if (s->sq_phase == SEQ_WRITE_UNSTABLE) {
			if (sqt->sqt_verf_set && sqt->sqt_verf != res->nr_verf)
				sqt->sqt_verf_changed = true;
			sqt->sqt_verf = res->nr_verf;
			sqt->sqt_verf_set = true;
		}
		t->bt_bytes_written += res->nr_count;
	}
}

static int seq_next(struct bench_thread *t)
{
	struct seq_thread *sqt = t->bt_wl;
	struct seq_state *s = sqt->sqt_s;
	uint64_t chunk = sqt->sqt_next_chunk;
	uint64_t off = chunk * s->sq_xfer;
	if (off >= s->sq_size)
		return 0;
	uint32_t len = (uint32_t)SH_MIN((uint64_t)s->sq_xfer, s->sq_size - off);
	uint32_t proc = s->sq_phase == SEQ_READ ? BENCH_NFS3_READ : BENCH_NFS3_WRITE;
	struct xdr_enc *enc;
	struct bench_op *op = bench_op_begin(t, proc, (uint16_t)s->sq_phase, 256, 0, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : 0;
	op->op_u32[0] = len;
	op->op_u64[0] = off;
	op->op_done = seq_done;
	const void *bulk = NULL;
	if (proc == BENCH_NFS3_READ) {
		bench_nfs3_enc_read(enc, &s->sq_fh, off, len);
	} else {
		uint8_t *buf = sqt->sqt_bufs + (size_t)bench_op_index(t, op, sqt->sqt_depth) * s->sq_xfer;
		seq_stamp(buf, off, len);
		bench_nfs3_enc_write(enc, &s->sq_fh, off, len,
				     s->sq_phase == SEQ_WRITE_UNSTABLE ? BENCH_UNSTABLE : BENCH_FILE_SYNC);
		bulk = buf;
	}
	int rc = bench_op_send(t, op, bulk, proc == BENCH_NFS3_READ ? 0 : len);
	if (rc < 0)
		return rc;
	sqt->sqt_next_chunk += s->sq_nthreads;
	return 1;
}

int bench_seq(const struct bench_ctx *ctx, struct bench_run *run)
{
	const struct bench_opts *o = ctx->bc_opts;
	struct seq_state s = {
		.sq_ctx = ctx,
		.sq_size = (uint64_t)(o->bo_size_mb * 1048576.0),
		.sq_xfer = SH_MIN(o->bo_xfer, SH_MIN(ctx->bc_rtmax, ctx->bc_wtmax)),
		.sq_nthreads = o->bo_procs,
	};
	char name[64], text[256];
	int rc;
	unsigned P = o->bo_procs;
	struct seq_thread *sqts = mem_zalloc(sizeof(*sqts) * P);
	void **wl = mem_zalloc(sizeof(*wl) * P);
	s.sq_template = mem_alloc(WL_BLOCK);
	run->br_points = mem_zalloc(sizeof(*run->br_points) * SEQ_NPHASES);
	if (!sqts || !wl || !s.sq_template || !run->br_points) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < WL_BLOCK; i++)
		s.sq_template[i] = (uint8_t)(i * 131u + 17u);
	for (unsigned i = 0; i < P; i++) {
		sqts[i].sqt_s = &s;
		sqts[i].sqt_depth = o->bo_depth;
		sqts[i].sqt_bufs = mem_alloc((size_t)o->bo_conns * o->bo_depth * s.sq_xfer);
		if (!sqts[i].sqt_bufs) {
			rc = -ENOMEM;
			goto out;
		}
		seq_slots_init(&s, sqts[i].sqt_bufs, (size_t)o->bo_conns * o->bo_depth * s.sq_xfer);
		wl[i] = &sqts[i];
	}
	snprintf(name, sizeof(name), "seq-%016" PRIx64 ".dat", ctx->bc_run_id);
	rc = wl_sync_create(ctx, &ctx->bc_work, name, false, &s.sq_fh);
	if (rc < 0) {
		log_error("bench: seq: cannot create %s: %s", name, sh_strerror(rc));
		goto out;
	}
	char phases[64];
	wl_phase_list(seq_phase_names, SEQ_NPHASES, o->bo_phases, phases, sizeof(phases));
	snprintf(text, sizeof(text), "one file of %.0f MB, %u KiB transfers, %u x %u x %u in flight; %s",
		 o->bo_size_mb, s.sq_xfer / 1024, P, o->bo_conns, o->bo_depth, phases);
	run->br_fileset = bench_keep(text);
	static const char *const fig_names[SEQ_NPHASES] = {"write UNSTABLE+COMMIT", "write FILE_SYNC", "read"};
	for (unsigned phase = 0; phase < SEQ_NPHASES; phase++) {
		if (!(o->bo_phases & (1u << phase)))
			continue;
		s.sq_phase = phase;
		for (unsigned i = 0; i < P; i++)
			sqts[i].sqt_next_chunk = i;
		struct bench_engine eng = {0};
		rc = wl_run_engine(ctx, &eng, wl, seq_stat_names, SEQ_NPHASES, seq_next);
		if (rc < 0)
			goto out;
		if (phase == SEQ_WRITE_UNSTABLE && eng.be_error == 0) {
			uint64_t c0 = clock_monotonic_ns();
			uint8_t args[256];
			struct xdr_enc enc;
			xdr_enc_init(&enc, args, sizeof(args));
			bench_nfs3_enc_commit(&enc, &s.sq_fh, 0, 0);
			struct bench_nfs3_res res;
			int crc = bench_sync_nfs(ctx, BENCH_NFS3_COMMIT, args, xdr_enc_len(&enc), &res);
			if (crc < 0 || res.nr_status != BENCH_NFS3_OK) {
				log_error("bench: seq: COMMIT failed");
				eng.be_failed++;
			} else {
				for (unsigned i = 0; i < P; i++)
					if (sqts[i].sqt_verf_changed ||
					    (sqts[i].sqt_verf_set && sqts[i].sqt_verf != res.nr_verf)) {
						log_error("bench: seq: write verifier changed (server restarted?)");
						eng.be_failed++;
						break;
					}
			}
			/* COMMIT time is part of the UNSTABLE phase. */
			double commit_s = (double)(clock_monotonic_ns() - c0) / 1e9;
			if (!o->bo_quiet)
				fprintf(stderr, "seq: WRITEs took %.3f s, the COMMIT after them %.3f s\n",
					eng.be_elapsed_s, commit_s);
			eng.be_elapsed_s += commit_s;
		}
		double secs = eng.be_elapsed_s > 0 ? eng.be_elapsed_s : 1e-9;
		uint64_t bytes = phase == SEQ_READ ? eng.be_bytes_read : eng.be_bytes_written;
		double mbs = (double)bytes / 1048576.0 / secs;
		wl_point_from(&eng, run, mbs, fig_names[phase], "MB/s");
		run->br_points[run->br_npoints - 1].bp_seconds = secs;
		run->br_points[run->br_npoints - 1].bp_achieved_ops = (double)eng.be_ops / secs;
		if (!o->bo_quiet)
			fprintf(stderr, "seq: %-22s %8.1f MB/s (%" PRIu64 " ops, %" PRIu64 " failed)\n",
				fig_names[phase], mbs, eng.be_ops, eng.be_failed + eng.be_unanswered);
		if (bytes != s.sq_size && eng.be_failed == 0) {
			log_error("bench: seq: %s moved %" PRIu64 " bytes of %" PRIu64, fig_names[phase],
				  bytes, s.sq_size);
			run->br_points[run->br_npoints - 1].bp_failed++;
		}
		rc = eng.be_error;
		bench_engine_fini(&eng);
		if (rc < 0)
			goto out;
	}
	rc = wl_sync_simple(ctx, BENCH_NFS3_REMOVE, &ctx->bc_work, name, BENCH_NFS3_OK);
	if (rc < 0)
		log_error("bench: seq: cannot remove %s: %s", name, sh_strerror(rc));
out:
	if (sqts)
		for (unsigned i = 0; i < P; i++)
			mem_free(sqts[i].sqt_bufs);
	mem_free(sqts);
	mem_free(wl);
	mem_free(s.sq_template);
	return rc;
}

/* ================================ meta ================================ */

enum { META_CREATE, META_GETATTR, META_LOOKUP, META_LIST, META_REMOVE, META_NPHASES };
static const char *const meta_stat_names[META_NPHASES] = {"CREATE", "GETATTR", "LOOKUP",
							  "READDIRPLUS", "REMOVE"};
static const char *const meta_phase_names[META_NPHASES] = {"create", "getattr", "lookup", "list",
							   "remove"};
static const uint32_t meta_procs[META_NPHASES] = {BENCH_NFS3_CREATE, BENCH_NFS3_GETATTR,
						  BENCH_NFS3_LOOKUP, BENCH_NFS3_READDIRPLUS,
						  BENCH_NFS3_REMOVE};
/* The list phase's READDIRPLUS sizes: 64 KiB of directory part and 256 KiB of reply, so that
 * one reply carries over a thousand entries with their attributes and handles, as a client
 * listing a large directory with big buffers asks for. */
#define META_LIST_DIRCOUNT 65536u
#define META_LIST_MAXCOUNT 262144u

struct meta_state {
	struct bench_fh ms_dir;
	struct bench_fh *ms_fhs;
	unsigned ms_files;
	unsigned ms_phase;
	unsigned ms_nthreads;
	/* list phase (one thread, one call in flight: each call continues from the last cookie) */
	uint64_t ms_cookie;
	uint64_t ms_cookieverf;
	bool ms_eof;
	uint8_t *ms_seen;         /* one bit per file: its name came back */
	uint64_t ms_listed;       /* distinct file names seen */
	uint64_t ms_dot, ms_dotdot;
	uint64_t ms_dups;         /* a file name seen twice */
	uint64_t ms_strangers;    /* a name that is none of ours */
	uint64_t ms_no_fh;        /* entries without a handle */
};
struct meta_thread {
	struct meta_state *mt_s;
	unsigned mt_next;
};

/* A name this run created: "m" and seven digits below the file count; its index or -1. */
static long meta_name_index(const struct meta_state *s, const uint8_t *name, uint32_t len)
{
	if (len != 8 || name[0] != 'm')
		return -1;
	unsigned long v = 0;
	for (uint32_t i = 1; i < len; i++) {
		if (name[i] < '0' || name[i] > '9')
			return -1;
		v = v * 10 + (unsigned long)(name[i] - '0');
	}
	return v < s->ms_files ? (long)v : -1;
}

static void meta_list_done(struct bench_thread *t, struct bench_op *op, const struct bench_nfs3_res *res)
{
	struct meta_thread *mt = t->bt_wl;
	struct meta_state *s = mt->mt_s;
	struct xdr_dec dec;
	struct bench_dirent de;
	int rc;
	xdr_dec_init(&dec, res->nr_entries, res->nr_entries_len);
	while ((rc = bench_nfs3_dirent_next(&dec, true, &de)) > 0) {
		if (de.de_name_len == 1 && de.de_name[0] == '.') {
			s->ms_dot++;
			continue;
		}
		if (de.de_name_len == 2 && de.de_name[0] == '.' && de.de_name[1] == '.') {
			s->ms_dotdot++;
			continue;
		}
		if (!de.de_has_fh)
			s->ms_no_fh++;
		long i = meta_name_index(s, de.de_name, de.de_name_len);
		if (i < 0) {
			s->ms_strangers++;
		} else if (s->ms_seen[i / 8] & (1u << (i % 8))) {
			s->ms_dups++;
		} else {
			s->ms_seen[i / 8] |= (uint8_t)(1u << (i % 8));
			s->ms_listed++;
		}
	}
	if (rc < 0 || (res->nr_count == 0 && !res->nr_eof)) {
		/* A reply that cannot be walked, or one that neither ends the listing nor moves it
		 * on (the next call would ask for the same again): the listing cannot finish. */
		log_ratelimited(LOG_ERROR, "bench: meta: READDIRPLUS %s",
				rc < 0 ? "entries do not decode" : "returned no entry before the end");
		t->bt_stats[op->op_stat].bs_failed++;
		s->ms_eof = true;
		return;
	}
	if (res->nr_count > 0)
		s->ms_cookie = res->nr_cookie;
	s->ms_cookieverf = res->nr_verf;
	s->ms_eof = res->nr_eof;
}

static void meta_done(struct bench_thread *t, struct bench_op *op, int status,
		      const struct bench_nfs3_res *res)
{
	struct meta_thread *mt = t->bt_wl;
	if (status < 0) {
		if (op->op_proc == BENCH_NFS3_READDIRPLUS)
			mt->mt_s->ms_eof = true; /* cannot continue without the reply's cookie */
		return;
	}
	if (op->op_proc == BENCH_NFS3_READDIRPLUS) {
		meta_list_done(t, op, res);
		return;
	}
	if (op->op_proc == BENCH_NFS3_CREATE || op->op_proc == BENCH_NFS3_LOOKUP) {
		if (!res->nr_has_fh) {
			log_ratelimited(LOG_ERROR, "bench: meta: %s returned no handle",
					bench_nfs3_proc_name(op->op_proc));
			t->bt_stats[op->op_stat].bs_failed++;
			return;
		}
		if (op->op_proc == BENCH_NFS3_CREATE)
			mt->mt_s->ms_fhs[op->op_u32[0]] = res->nr_fh;
	}
}

static int meta_next(struct bench_thread *t)
{
	struct meta_thread *mt = t->bt_wl;
	struct meta_state *s = mt->mt_s;
	struct xdr_enc *enc;
	if (s->ms_phase == META_LIST) {
		if (s->ms_eof)
			return 0;
		/* The one slot is busy until the reply, whose completion calls here again. */
		struct bench_op *op = bench_op_begin(t, BENCH_NFS3_READDIRPLUS, META_LIST, 256, 0, &enc);
		if (!op)
			return t->bt_error ? t->bt_error : 0;
		op->op_done = meta_done;
		bench_nfs3_enc_readdirplus(enc, &s->ms_dir, s->ms_cookie, s->ms_cookieverf,
					   META_LIST_DIRCOUNT, META_LIST_MAXCOUNT);
		int rc = bench_op_send(t, op, NULL, 0);
		return rc < 0 ? rc : 1;
	}
	if (mt->mt_next >= s->ms_files)
		return 0;
	unsigned i = mt->mt_next;
	struct bench_op *op = bench_op_begin(t, meta_procs[s->ms_phase], (uint16_t)s->ms_phase, 512, 0, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : 0;
	op->op_u32[0] = i;
	op->op_done = meta_done;
	char name[32];
	snprintf(name, sizeof(name), "m%07u", i);
	switch (s->ms_phase) {
	case META_CREATE:
		bench_nfs3_enc_create(enc, &s->ms_dir, name, strlen(name), true, 0644);
		break;
	case META_GETATTR:
		bench_nfs3_enc_fh(enc, &s->ms_fhs[i]);
		break;
	default:
		bench_nfs3_enc_dirop(enc, &s->ms_dir, name, strlen(name));
		break;
	}
	int rc = bench_op_send(t, op, NULL, 0);
	if (rc < 0)
		return rc;
	mt->mt_next += s->ms_nthreads;
	return 1;
}

/* After the list phase: whether the listing held exactly this run's files, each once, and "."
 * and ".." once each. Returns the number of problems found (each logged). */
static uint64_t meta_list_check(const struct meta_state *s)
{
	uint64_t bad = 0;
	if (s->ms_listed != s->ms_files) {
		log_error("bench: meta: the listing held %" PRIu64 " of the %u files", s->ms_listed,
			  s->ms_files);
		bad++;
	}
	if (s->ms_dups || s->ms_strangers) {
		log_error("bench: meta: the listing held %" PRIu64 " names twice and %" PRIu64
			  " names this run did not create", s->ms_dups, s->ms_strangers);
		bad++;
	}
	if (s->ms_dot != 1 || s->ms_dotdot != 1) {
		log_error("bench: meta: the listing held \".\" %" PRIu64 " times and \"..\" %" PRIu64
			  " times, not once each", s->ms_dot, s->ms_dotdot);
		bad++;
	}
	return bad;
}

int bench_meta(const struct bench_ctx *ctx, struct bench_run *run)
{
	const struct bench_opts *o = ctx->bc_opts;
	unsigned P = o->bo_procs;
	struct meta_state s = {.ms_files = o->bo_files, .ms_nthreads = P};
	struct meta_thread *mts = mem_zalloc(sizeof(*mts) * P);
	void **wl = mem_zalloc(sizeof(*wl) * P);
	s.ms_fhs = mem_zalloc(sizeof(*s.ms_fhs) * s.ms_files);
	s.ms_seen = mem_zalloc((s.ms_files + 7) / 8);
	run->br_points = mem_zalloc(sizeof(*run->br_points) * META_NPHASES);
	char dname[64], text[160], phases[80];
	int rc;
	if (!mts || !wl || !s.ms_fhs || !s.ms_seen || !run->br_points) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < P; i++) {
		mts[i].mt_s = &s;
		wl[i] = &mts[i];
	}
	snprintf(dname, sizeof(dname), "meta-%016" PRIx64, ctx->bc_run_id);
	rc = bench_sync_mkdir(ctx, &ctx->bc_work, dname, &s.ms_dir);
	if (rc < 0) {
		log_error("bench: meta: cannot create %s: %s", dname, sh_strerror(rc));
		goto out;
	}
	wl_phase_list(meta_phase_names, META_NPHASES, o->bo_phases, phases, sizeof(phases));
	snprintf(text, sizeof(text), "%u files in one directory; %s", s.ms_files, phases);
	run->br_fileset = bench_keep(text);
	static const char *const figs[META_NPHASES] = {"create", "getattr", "lookup", "list", "remove"};
	bool failed = false;
	for (unsigned phase = 0; phase < META_NPHASES && !failed; phase++) {
		if (!(o->bo_phases & (1u << phase)))
			continue;
		s.ms_phase = phase;
		for (unsigned i = 0; i < P; i++)
			mts[i].mt_next = i;
		struct bench_engine eng = {0};
		if (phase == META_LIST) {
			/* One listing, call after call: one thread, one connection, one slot. */
			eng.be_nthreads = 1;
			eng.be_nconns = 1;
			eng.be_depth = 1;
		}
		rc = wl_run_engine(ctx, &eng, wl, meta_stat_names, META_NPHASES, meta_next);
		if (rc < 0)
			goto out;
		uint64_t done = eng.be_ops;
		const char *unit = "ops/s";
		if (phase == META_LIST) {
			eng.be_failed += meta_list_check(&s);
			done = s.ms_listed + s.ms_dot + s.ms_dotdot;
			unit = "entries/s";
		}
		double rate = eng.be_elapsed_s > 0 ? (double)done / eng.be_elapsed_s : 0;
		wl_point_from(&eng, run, rate, figs[phase], unit);
		if (!o->bo_quiet) {
			fprintf(stderr, "meta: %-8s %10.0f %s (%" PRIu64 " ops, %" PRIu64 " failed)\n",
				figs[phase], rate, unit, eng.be_ops, eng.be_failed + eng.be_unanswered);
			if (phase == META_LIST)
				fprintf(stderr, "meta: list: %" PRIu64 " of %u files, \".\" %" PRIu64
					" and \"..\" %" PRIu64 " times, %" PRIu64 " entries without a handle,"
					" in %" PRIu64 " READDIRPLUS calls\n", s.ms_listed, s.ms_files,
					s.ms_dot, s.ms_dotdot, s.ms_no_fh, eng.be_ops);
		}
		failed = eng.be_failed + eng.be_unanswered > 0;
		rc = eng.be_error;
		bench_engine_fini(&eng);
		if (rc < 0)
			goto out;
	}
	if (!failed && (o->bo_phases & (1u << META_REMOVE))) {
		rc = wl_sync_simple(ctx, BENCH_NFS3_RMDIR, &ctx->bc_work, dname, BENCH_NFS3_OK);
		if (rc < 0)
			log_error("bench: meta: cannot remove %s: %s", dname, sh_strerror(rc));
	} else if (!failed && !o->bo_quiet) {
		fprintf(stderr, "meta: without the remove phase, shale-bench/%s and its %u files stay\n",
			dname, s.ms_files);
	}
out:
	mem_free(mts);
	mem_free(wl);
	mem_free(s.ms_fhs);
	mem_free(s.ms_seen);
	return rc;
}

/* ================================ syncwrite ================================ */

/* One statistic: the FILE_SYNC WRITEs. */
static const char *const sw_stat_names[1] = {"WRITE-FILE_SYNC"};

struct sw_file {
	struct bench_fh swf_fh;
	uint64_t swf_next_off;    /* where its next write goes; wraps at sws_file_size */
};
struct sw_state {
	struct sw_file *sws_files;
	unsigned sws_nfiles;
	unsigned sws_nthreads;
	uint64_t sws_file_size;   /* a multiple of sws_xfer */
	uint32_t sws_xfer;
	uint8_t *sws_buf;         /* sws_xfer bytes, the payload of every write (only read) */
};
struct sw_thread {
	struct sw_state *swt_s;
	unsigned swt_nmine;       /* files t, t + P, t + 2P ... are this thread's */
	unsigned swt_turn;        /* which of them the next write goes to */
};

static void sw_done(struct bench_thread *t, struct bench_op *op, int status,
		    const struct bench_nfs3_res *res)
{
	if (status < 0)
		return;
	if (res->nr_count != op->op_u32[0] || res->nr_committed != BENCH_FILE_SYNC) {
		log_ratelimited(LOG_ERROR, "bench: syncwrite: WRITE at %" PRIu64 " answered count %u of"
				" %u, committed %u (FILE_SYNC is %u)", op->op_u64[0], res->nr_count,
				op->op_u32[0], res->nr_committed, (unsigned)BENCH_FILE_SYNC);
		t->bt_stats[op->op_stat].bs_failed++;
		return;
	}
	if (t->bt_measuring)
		t->bt_bytes_written += res->nr_count;
}

static int sw_next(struct bench_thread *t)
{
	struct sw_thread *swt = t->bt_wl;
	struct sw_state *s = swt->swt_s;
	/* Closed loop until the measured window ends; the calls in flight then drain. */
	if (clock_monotonic_ns() >= t->bt_eng->be_measure_end_ns)
		return 0;
	struct xdr_enc *enc;
	struct bench_op *op = bench_op_begin(t, BENCH_NFS3_WRITE, 0, 256, 0, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : 0;
	struct sw_file *f = &s->sws_files[t->bt_index + swt->swt_turn * s->sws_nthreads];
	swt->swt_turn = (swt->swt_turn + 1) % swt->swt_nmine;
	uint64_t off = f->swf_next_off;
	f->swf_next_off = (off + s->sws_xfer) % s->sws_file_size;
	op->op_u32[0] = s->sws_xfer;
	op->op_u64[0] = off;
	op->op_done = sw_done;
	bench_nfs3_enc_write(enc, &f->swf_fh, off, s->sws_xfer, BENCH_FILE_SYNC);
	int rc = bench_op_send(t, op, s->sws_buf, s->sws_xfer);
	return rc < 0 ? rc : 1;
}

int bench_syncwrite(const struct bench_ctx *ctx, struct bench_run *run)
{
	const struct bench_opts *o = ctx->bc_opts;
	unsigned P = o->bo_procs;
	/* Every thread needs a file of its own; files are never shared between threads. */
	struct sw_state s = {.sws_nfiles = SH_MAX(o->bo_files, P), .sws_nthreads = P,
			     .sws_xfer = SH_MIN(o->bo_xfer, ctx->bc_wtmax)};
	uint64_t total = (uint64_t)(o->bo_size_mb * 1048576.0);
	s.sws_file_size = total / s.sws_nfiles / s.sws_xfer * s.sws_xfer;
	struct sw_thread *swts = mem_zalloc(sizeof(*swts) * P);
	void **wl = mem_zalloc(sizeof(*wl) * P);
	s.sws_files = mem_zalloc(sizeof(*s.sws_files) * s.sws_nfiles);
	s.sws_buf = mem_alloc(s.sws_xfer);
	run->br_points = mem_zalloc(sizeof(*run->br_points));
	char dname[64], name[32], text[200];
	unsigned created = 0;
	int rc;
	if (!swts || !wl || !s.sws_files || !s.sws_buf || !run->br_points) {
		rc = -ENOMEM;
		goto out;
	}
	if (s.sws_file_size == 0) {
		log_error("bench: syncwrite: --size-mb %.2f over %u files leaves less than one %u-byte "
			  "transfer per file", o->bo_size_mb, s.sws_nfiles, s.sws_xfer);
		rc = -EINVAL;
		goto out;
	}
	/* Data that neither compresses nor reads as a hole. */
	uint64_t x = 0x9E3779B97F4A7C15ull ^ ctx->bc_run_id;
	for (uint32_t i = 0; i < s.sws_xfer; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		s.sws_buf[i] = (uint8_t)(x >> 24);
	}
	for (unsigned i = 0; i < P; i++) {
		swts[i].swt_s = &s;
		swts[i].swt_nmine = (s.sws_nfiles - i + P - 1) / P;
		wl[i] = &swts[i];
	}
	snprintf(dname, sizeof(dname), "syncwrite-%016" PRIx64, ctx->bc_run_id);
	struct bench_fh dir;
	rc = bench_sync_mkdir(ctx, &ctx->bc_work, dname, &dir);
	if (rc < 0) {
		log_error("bench: syncwrite: cannot create %s: %s", dname, sh_strerror(rc));
		goto out;
	}
	for (; created < s.sws_nfiles; created++) {
		snprintf(name, sizeof(name), "sw%05u", created);
		rc = wl_sync_create(ctx, &dir, name, true, &s.sws_files[created].swf_fh);
		if (rc < 0) {
			log_error("bench: syncwrite: cannot create %s: %s", name, sh_strerror(rc));
			goto out;
		}
	}
	snprintf(text, sizeof(text), "%u files of %.2f MB written in turn, each sequentially and "
		 "wrapping; %u KiB FILE_SYNC WRITEs, %u x %u x %u in flight", s.sws_nfiles,
		 (double)s.sws_file_size / 1048576.0, s.sws_xfer / 1024, P, o->bo_conns, o->bo_depth);
	run->br_fileset = bench_keep(text);

	struct bench_engine eng = {
		.be_warmup_s = o->bo_warmup_s,
		.be_runtime_s = o->bo_runtime_s,
	};
	rc = wl_run_engine(ctx, &eng, wl, sw_stat_names, 1, sw_next);
	if (rc < 0)
		goto out;
	double secs;
	struct bench_point *pt = wl_add_point(&eng, run, &secs);
	double ops_s = (double)eng.be_ops / secs;
	double mbs = (double)eng.be_bytes_written / 1048576.0 / secs;
	bench_run_add_figure(run, "ops/s", ops_s, "ops/s");
	bench_run_add_figure(run, "MB/s", mbs, "MB/s");
	bench_run_add_figure(run, "mean latency", pt->bp_mean_ms, "ms");
	bench_run_add_figure(run, "p99 latency", pt->bp_p99_ms, "ms");
	if (!o->bo_quiet)
		fprintf(stderr, "syncwrite: %.0f ops/s, %.1f MB/s, latency mean %.3f ms, p99 %.3f ms "
			"(%" PRIu64 " ops, %" PRIu64 " failed)\n", ops_s, mbs, pt->bp_mean_ms,
			pt->bp_p99_ms, eng.be_ops, eng.be_failed + eng.be_unanswered);
	bool failed = eng.be_failed + eng.be_unanswered > 0;
	rc = eng.be_error;
	bench_engine_fini(&eng);
	if (rc < 0 || failed)
		goto out;
	/* Clean-up: the files, then the directory. */
	for (unsigned i = 0; i < created && rc == 0; i++) {
		snprintf(name, sizeof(name), "sw%05u", i);
		rc = wl_sync_simple(ctx, BENCH_NFS3_REMOVE, &dir, name, BENCH_NFS3_OK);
	}
	if (rc == 0)
		rc = wl_sync_simple(ctx, BENCH_NFS3_RMDIR, &ctx->bc_work, dname, BENCH_NFS3_OK);
	if (rc < 0)
		log_error("bench: syncwrite: clean-up of %s failed: %s", dname, sh_strerror(rc));
out:
	mem_free(swts);
	mem_free(wl);
	mem_free(s.sws_files);
	mem_free(s.sws_buf);
	return rc;
}

/* ================================ --phases ================================ */

int bench_wl_phases(const char *workload, const char *list, uint32_t *mask)
{
	const char *const *names;
	unsigned n;
	uint32_t dflt;
	if (strcmp(workload, "seq") == 0) {
		names = seq_phase_names;
		n = SEQ_NPHASES;
		dflt = (1u << SEQ_NPHASES) - 1;
	} else if (strcmp(workload, "meta") == 0) {
		names = meta_phase_names;
		n = META_NPHASES;
		dflt = (1u << META_NPHASES) - 1 - (1u << META_LIST); /* the listing is asked for */
	} else {
		if (list) {
			fprintf(stderr, "shale bench: %s has no --phases\n", workload);
			return -EINVAL;
		}
		*mask = 0;
		return 0;
	}
	if (!list) {
		*mask = dflt;
		return 0;
	}
	uint32_t m = 0;
	const char *p = list;
	while (*p) {
		size_t len = strcspn(p, ",");
		unsigned i = 0;
		while (i < n && !(strlen(names[i]) == len && strncmp(p, names[i], len) == 0))
			i++;
		if (i == n) {
			fprintf(stderr, "shale bench: %s has no phase '%.*s' (phases:", workload, (int)len, p);
			for (unsigned j = 0; j < n; j++)
				fprintf(stderr, " %s", names[j]);
			fprintf(stderr, ")\n");
			return -EINVAL;
		}
		m |= 1u << i;
		p += len;
		if (*p == ',')
			p++;
	}
	if (m == 0) {
		fprintf(stderr, "shale bench: --phases names no phase\n");
		return -EINVAL;
	}
	/* seq reads back what it wrote; meta's other phases work on the files it creates. */
	if (names == seq_phase_names && (m & (1u << SEQ_READ)) &&
	    !(m & ((1u << SEQ_WRITE_UNSTABLE) | (1u << SEQ_WRITE_FILESYNC)))) {
		fprintf(stderr, "shale bench: seq's read phase needs a write phase before it\n");
		return -EINVAL;
	}
	if (names == meta_phase_names && !(m & (1u << META_CREATE))) {
		fprintf(stderr, "shale bench: meta's phases need its create phase\n");
		return -EINVAL;
	}
	*mask = m;
	return 0;
}

/* ================================ varmail ================================ */

enum vm_stat { VM_REMOVE, VM_CREATE, VM_WRITE, VM_COMMIT, VM_LOOKUP, VM_READ, VM_NSTATS };
/* deletefile, createfile, appendfilerand, fsync, openfile, readwholefile */
static const char *const vm_stat_names[VM_NSTATS] = {"REMOVE", "CREATE", "WRITE", "COMMIT",
						     "LOOKUP", "READ"};
#define VM_MAX_APPEND 16384u /* filebench's meaniosize: appendfilerand writes 1..16 KiB */
#define VM_MAX_FILE 32768u

struct vm_file {
	struct bench_fh vf_fh;
	uint64_t vf_size;
	bool vf_present;
	bool vf_busy;
};
struct vm_state {
	struct bench_fh vs_dir;
	struct vm_file *vs_files;
	unsigned vs_nfiles;
	unsigned vs_nthreads;
	uint32_t vs_rtmax;
	uint8_t *vs_wbuf;
	bool vs_cleanup; /* vm_next removes the files instead of running flows */
};
/* Steps of a flow, in filebench's order. */
enum vm_step {
	VS_DELETE, VS_CREATE, VS_APPEND1, VS_FSYNC1, VS_OPEN2, VS_READ2, VS_APPEND2, VS_FSYNC2,
	VS_OPEN3, VS_READ3, VS_NSTEPS
};
struct vm_flow {
	unsigned vf_step;
	int vf_file;         /* index held by the flow, or -1 */
	uint64_t vf_read_off;
};
struct vm_thread {
	struct vm_state *vt_s;
	struct vm_flow *vt_flows;
	unsigned vt_nflows;
	unsigned vt_started;
	unsigned vt_next_file; /* set-up and cleanup cursor */
	uint64_t vt_rng;
};

static void vm_name(char *buf, size_t cap, unsigned i)
{
	snprintf(buf, cap, "vm%05u", i);
}

/* Files of thread t are those with index % nthreads == t (flows of one thread share them). */
static int vm_pick(struct bench_thread *t, bool present)
{
	struct vm_thread *vt = t->bt_wl;
	struct vm_state *s = vt->vt_s;
	unsigned mine = (s->vs_nfiles - t->bt_index + s->vs_nthreads - 1) / s->vs_nthreads;
	if (mine == 0)
		return -1;
	for (int tries = 0; tries < 64; tries++) {
		unsigned i = t->bt_index + bench_rand_below(t, mine) * s->vs_nthreads;
		if (i < s->vs_nfiles && s->vs_files[i].vf_present == present && !s->vs_files[i].vf_busy)
			return (int)i;
	}
	for (unsigned i = t->bt_index; i < s->vs_nfiles; i += s->vs_nthreads)
		if (s->vs_files[i].vf_present == present && !s->vs_files[i].vf_busy)
			return (int)i;
	return -1;
}

static int vm_issue(struct bench_thread *t, struct vm_flow *flow);

static void vm_release(struct vm_state *s, struct vm_flow *flow)
{
	if (flow->vf_file >= 0)
		s->vs_files[flow->vf_file].vf_busy = false;
	flow->vf_file = -1;
}

static void vm_done(struct bench_thread *t, struct bench_op *op, int status,
		    const struct bench_nfs3_res *res)
{
	struct vm_thread *vt = t->bt_wl;
	struct vm_state *s = vt->vt_s;
	struct vm_flow *flow = op->op_ptr;
	struct vm_file *f = flow->vf_file >= 0 ? &s->vs_files[flow->vf_file] : NULL;
	if (status < 0) {
		/* Give the file up and start the flow over; the engine counted the failure. */
		vm_release(s, flow);
		flow->vf_step = VS_DELETE;
	} else {
		switch (flow->vf_step) {
		case VS_DELETE:
			f->vf_present = false;
			vm_release(s, flow);
			flow->vf_step++;
			break;
		case VS_CREATE:
			if (!res->nr_has_fh) {
				t->bt_stats[op->op_stat].bs_failed++;
				vm_release(s, flow);
				flow->vf_step = VS_DELETE;
				break;
			}
			f->vf_fh = res->nr_fh;
			f->vf_size = 0;
			f->vf_present = true;
			flow->vf_step++;
			break;
		case VS_APPEND1:
		case VS_APPEND2:
			f->vf_size += res->nr_count;
			if (t->bt_measuring)
				t->bt_bytes_written += res->nr_count;
			flow->vf_step++;
			break;
		case VS_FSYNC1:
		case VS_FSYNC2:
			vm_release(s, flow); /* closefile */
			flow->vf_step++;
			break;
		case VS_OPEN2:
		case VS_OPEN3:
			f->vf_fh = res->nr_fh;
			flow->vf_read_off = 0;
			flow->vf_step++;
			break;
		case VS_READ2:
		case VS_READ3:
			if (t->bt_measuring)
				t->bt_bytes_read += res->nr_count;
			flow->vf_read_off += res->nr_count;
			if (res->nr_eof || res->nr_count == 0) {
				if (flow->vf_step == VS_READ3)
					vm_release(s, flow); /* closefile */
				flow->vf_step++;
			}
			break;
		default:
			break;
		}
		if (flow->vf_step == VS_NSTEPS)
			flow->vf_step = VS_DELETE;
	}
	const struct bench_engine *eng = t->bt_eng;
	if (clock_monotonic_ns() >= eng->be_measure_end_ns) {
		vm_release(s, flow);
		return;
	}
	int rc = vm_issue(t, flow);
	if (rc < 0 && t->bt_error == 0)
		t->bt_error = rc;
}

/* Issues the flow's current step (skipping steps with no file to work on). */
static int vm_issue(struct bench_thread *t, struct vm_flow *flow)
{
	struct vm_thread *vt = t->bt_wl;
	struct vm_state *s = vt->vt_s;
	char name[32];
	for (int guard = 0; guard < VS_NSTEPS; guard++) {
		unsigned step = flow->vf_step;
		if (step == VS_DELETE || step == VS_CREATE || step == VS_OPEN2 || step == VS_OPEN3) {
			int i = vm_pick(t, step != VS_CREATE);
			if (i < 0) {
				/* No file for this step: skip to the next step that picks one. */
				flow->vf_step = step == VS_DELETE ? VS_CREATE
					      : step == VS_CREATE ? VS_OPEN2
					      : step == VS_OPEN2  ? VS_OPEN3
								  : VS_DELETE;
				continue;
			}
			flow->vf_file = i;
			s->vs_files[i].vf_busy = true;
		}
		struct vm_file *f = &s->vs_files[flow->vf_file];
		static const uint32_t procs[VS_NSTEPS] = {
			BENCH_NFS3_REMOVE, BENCH_NFS3_CREATE, BENCH_NFS3_WRITE, BENCH_NFS3_COMMIT,
			BENCH_NFS3_LOOKUP, BENCH_NFS3_READ, BENCH_NFS3_WRITE, BENCH_NFS3_COMMIT,
			BENCH_NFS3_LOOKUP, BENCH_NFS3_READ,
		};
		static const uint16_t stats[VS_NSTEPS] = {
			VM_REMOVE, VM_CREATE, VM_WRITE, VM_COMMIT, VM_LOOKUP, VM_READ, VM_WRITE,
			VM_COMMIT, VM_LOOKUP, VM_READ,
		};
		struct xdr_enc *enc;
		struct bench_op *op = bench_op_begin(t, procs[step], stats[step], 512, 0, &enc);
		if (!op)
			return t->bt_error ? t->bt_error : -EAGAIN;
		op->op_ptr = flow;
		op->op_done = vm_done;
		const void *bulk = NULL;
		size_t bulk_len = 0;
		vm_name(name, sizeof(name), (unsigned)flow->vf_file);
		switch (step) {
		case VS_DELETE:
			bench_nfs3_enc_dirop(enc, &s->vs_dir, name, strlen(name));
			break;
		case VS_CREATE:
			bench_nfs3_enc_create(enc, &s->vs_dir, name, strlen(name), false, 0644);
			break;
		case VS_APPEND1:
		case VS_APPEND2: {
			uint32_t n = 1 + bench_rand_below(t, VM_MAX_APPEND);
			bench_nfs3_enc_write(enc, &f->vf_fh, f->vf_size, n, BENCH_UNSTABLE);
			bulk = s->vs_wbuf;
			bulk_len = n;
			break;
		}
		case VS_FSYNC1:
		case VS_FSYNC2:
			bench_nfs3_enc_commit(enc, &f->vf_fh, 0, 0);
			break;
		case VS_OPEN2:
		case VS_OPEN3:
			bench_nfs3_enc_dirop(enc, &s->vs_dir, name, strlen(name));
			break;
		default: /* reads */
			bench_nfs3_enc_read(enc, &f->vf_fh, flow->vf_read_off, s->vs_rtmax);
			break;
		}
		return bench_op_send(t, op, bulk, bulk_len);
	}
	return 0; /* nothing to do at all: the flow rests */
}

static int vm_next(struct bench_thread *t)
{
	struct vm_thread *vt = t->bt_wl;
	struct vm_state *s = vt->vt_s;
	struct xdr_enc *enc;
	char name[32];
	if (s->vs_cleanup) {
		unsigned i = vt->vt_next_file;
		while (i < s->vs_nfiles && !s->vs_files[i].vf_present)
			i += s->vs_nthreads;
		if (i >= s->vs_nfiles)
			return 0;
		struct bench_op *op = bench_op_begin(t, BENCH_NFS3_REMOVE, VM_REMOVE, 512, 0, &enc);
		if (!op)
			return t->bt_error ? t->bt_error : 0;
		vm_name(name, sizeof(name), i);
		bench_nfs3_enc_dirop(enc, &s->vs_dir, name, strlen(name));
		int rc = bench_op_send(t, op, NULL, 0);
		if (rc < 0)
			return rc;
		vt->vt_next_file = i + s->vs_nthreads;
		return 1;
	}
	if (vt->vt_started >= vt->vt_nflows)
		return 0;
	struct vm_flow *flow = &vt->vt_flows[vt->vt_started];
	flow->vf_file = -1;
	flow->vf_step = VS_DELETE;
	int rc = vm_issue(t, flow);
	if (rc == -EAGAIN)
		return 0;
	if (rc < 0)
		return rc;
	vt->vt_started++;
	return 1;
}

/* Set-up op completions: created files get their handle, then one WRITE of their size. */
static void vm_setup_done(struct bench_thread *t, struct bench_op *op, int status,
			  const struct bench_nfs3_res *res);

static int vm_setup_next(struct bench_thread *t)
{
	struct vm_thread *vt = t->bt_wl;
	struct vm_state *s = vt->vt_s;
	unsigned i = vt->vt_next_file;
	if (i >= s->vs_nfiles)
		return 0;
	/* 80% preallocated (filebench's prealloc=80): the others start absent. */
	if (i % 5 == 4) {
		vt->vt_next_file += s->vs_nthreads;
		return 1;
	}
	struct xdr_enc *enc;
	struct bench_op *op = bench_op_begin(t, BENCH_NFS3_CREATE, VM_CREATE, 512, 0, &enc);
	if (!op)
		return t->bt_error ? t->bt_error : 0;
	char name[32];
	vm_name(name, sizeof(name), i);
	op->op_u32[0] = i;
	op->op_done = vm_setup_done;
	bench_nfs3_enc_create(enc, &s->vs_dir, name, strlen(name), true, 0644);
	int rc = bench_op_send(t, op, NULL, 0);
	if (rc < 0)
		return rc;
	vt->vt_next_file += s->vs_nthreads;
	return 1;
}

static void vm_setup_done(struct bench_thread *t, struct bench_op *op, int status,
			  const struct bench_nfs3_res *res)
{
	struct vm_thread *vt = t->bt_wl;
	struct vm_state *s = vt->vt_s;
	struct vm_file *f = &s->vs_files[op->op_u32[0]];
	if (status < 0)
		return;
	if (op->op_proc == BENCH_NFS3_CREATE) {
		if (!res->nr_has_fh) {
			t->bt_stats[op->op_stat].bs_failed++;
			return;
		}
		f->vf_fh = res->nr_fh;
		f->vf_present = true;
		uint32_t size = 1024u + bench_rand_below(t, VM_MAX_FILE - 1024u);
		struct xdr_enc *enc;
		struct bench_op *w = bench_op_begin(t, BENCH_NFS3_WRITE, VM_WRITE, 256, 0, &enc);
		if (!w) {
			if (t->bt_error == 0)
				t->bt_error = -EAGAIN;
			return;
		}
		w->op_u32[0] = op->op_u32[0];
		w->op_done = vm_setup_done;
		bench_nfs3_enc_write(enc, &f->vf_fh, 0, size, BENCH_UNSTABLE);
		int rc = bench_op_send(t, w, s->vs_wbuf, size);
		if (rc < 0 && t->bt_error == 0)
			t->bt_error = rc;
	} else {
		f->vf_size = res->nr_count;
	}
}

int bench_varmail(const struct bench_ctx *ctx, struct bench_run *run)
{
	const struct bench_opts *o = ctx->bc_opts;
	unsigned P = o->bo_procs;
	unsigned nflows = SH_MAX(o->bo_flows, P);
	struct vm_state s = {.vs_nfiles = o->bo_files, .vs_nthreads = P,
			     .vs_rtmax = SH_MIN(ctx->bc_rtmax, (uint32_t)1 << 20)};
	struct vm_thread *vts = mem_zalloc(sizeof(*vts) * P);
	struct vm_flow *flows = mem_zalloc(sizeof(*flows) * nflows);
	void **wl = mem_zalloc(sizeof(*wl) * P);
	s.vs_files = mem_zalloc(sizeof(*s.vs_files) * s.vs_nfiles);
	s.vs_wbuf = mem_alloc(VM_MAX_FILE);
	run->br_points = mem_zalloc(sizeof(*run->br_points));
	char dname[64], text[160];
	int rc;
	if (!vts || !flows || !wl || !s.vs_files || !s.vs_wbuf || !run->br_points) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < VM_MAX_FILE; i++)
		s.vs_wbuf[i] = (uint8_t)(i * 13u + 5u);
	unsigned given = 0;
	for (unsigned i = 0; i < P; i++) {
		vts[i].vt_s = &s;
		vts[i].vt_next_file = i;
		vts[i].vt_flows = flows + given;
		vts[i].vt_nflows = nflows / P + (i < nflows % P ? 1 : 0);
		given += vts[i].vt_nflows;
		wl[i] = &vts[i];
	}
	snprintf(dname, sizeof(dname), "varmail-%016" PRIx64, ctx->bc_run_id);
	rc = bench_sync_mkdir(ctx, &ctx->bc_work, dname, &s.vs_dir);
	if (rc < 0) {
		log_error("bench: varmail: cannot create %s: %s", dname, sh_strerror(rc));
		goto out;
	}
	snprintf(text, sizeof(text), "%u files of 16 KiB mean (1..32 KiB), 80%% preallocated, one directory; %u flows",
		 s.vs_nfiles, nflows);
	run->br_fileset = bench_keep(text);

	/* Set-up. */
	struct bench_engine eng = {0};
	rc = wl_run_engine(ctx, &eng, wl, vm_stat_names, VM_NSTATS, vm_setup_next);
	if (rc < 0)
		goto out;
	uint64_t bad = eng.be_failed + eng.be_unanswered;
	rc = eng.be_error;
	bench_engine_fini(&eng);
	if (rc < 0 || bad > 0) {
		log_error("bench: varmail: file set creation failed");
		rc = rc < 0 ? rc : -EIO;
		goto out;
	}

	/* The flows: closed loop, each flow one op at a time; slots for all of them. */
	unsigned per_thread = (nflows + P - 1) / P;
	struct bench_engine feng = {
		.be_nconns = o->bo_conns,
		.be_depth = (per_thread + o->bo_conns - 1) / o->bo_conns + 1,
		.be_warmup_s = o->bo_warmup_s,
		.be_runtime_s = o->bo_runtime_s,
	};
	rc = wl_run_engine(ctx, &feng, wl, vm_stat_names, VM_NSTATS, vm_next);
	if (rc < 0)
		goto out;
	double secs;
	struct bench_point *pt = wl_add_point(&feng, run, &secs);
	double ops_s = (double)feng.be_ops / secs;
	double rd = (double)feng.be_total[VM_READ].bs_hist.bh_count / secs;
	double wr = (double)feng.be_total[VM_WRITE].bs_hist.bh_count / secs;
	double mbs = (double)(feng.be_bytes_read + feng.be_bytes_written) / 1048576.0 / secs;
	char summary[200];
	snprintf(summary, sizeof(summary),
		 "IO Summary: %" PRIu64 " ops %.3f ops/s %.0f/%.0f rd/wr %.1fmb/s %.3fms/op",
		 feng.be_ops, ops_s, rd, wr, mbs, pt->bp_mean_ms);
	printf("%s\n", summary);
	fflush(stdout);
	bench_run_add_figure(run, "ops/s", ops_s, "ops/s");
	bench_run_add_figure(run, "read ops/s", rd, "ops/s");
	bench_run_add_figure(run, "write ops/s", wr, "ops/s");
	bench_run_add_figure(run, "MB/s", mbs, "MB/s");
	bench_run_add_figure(run, "ms/op", pt->bp_mean_ms, "ms");
	rc = feng.be_error;
	bench_engine_fini(&feng);
	if (rc < 0)
		goto out;

	/* Clean-up. */
	for (unsigned i = 0; i < P; i++)
		vts[i].vt_next_file = i;
	s.vs_cleanup = true;
	struct bench_engine ceng = {0};
	rc = wl_run_engine(ctx, &ceng, wl, vm_stat_names, VM_NSTATS, vm_next);
	if (rc == 0) {
		bad = ceng.be_failed + ceng.be_unanswered;
		rc = ceng.be_error;
		bench_engine_fini(&ceng);
		if (rc == 0 && bad == 0)
			rc = wl_sync_simple(ctx, BENCH_NFS3_RMDIR, &ctx->bc_work, dname, BENCH_NFS3_OK);
		if (rc == 0 && bad > 0)
			rc = -EIO;
		if (rc < 0)
			log_error("bench: varmail: clean-up failed: %s", sh_strerror(rc));
	}
out:
	mem_free(vts);
	mem_free(flows);
	mem_free(wl);
	mem_free(s.vs_files);
	mem_free(s.vs_wbuf);
	return rc;
}
