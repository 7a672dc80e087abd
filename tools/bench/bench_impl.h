/* bench_impl.h: what the files of `shale bench` share: options, the target server, the load
 * engine (threads, connections, operation slots, pacing) and the workload entry points. Not for
 * other modules; tools/shale.c uses bench.h only. See bench.c for the design. */
#ifndef SHALE_BENCH_IMPL_H
#define SHALE_BENCH_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"
#include "bench_nfs3.h"
#include "bench_stats.h"
#include "loop/loop.h"
#include "rpc/rpc.h"

/* One server under test. */
struct bench_target {
	const char *bt_label;
	char bt_host[64];
	uint16_t bt_port;
	uint16_t bt_mount_port;
	const char *bt_export;
	pid_t bt_pid;          /* 0: unknown (no CPU or RSS figures) */
	char bt_server[96];    /* "host:port" for reports */
};

struct bench_opts {
	const char *bo_workload;
	struct bench_target bo_a;
	bool bo_vs;
	struct bench_target bo_b;
	unsigned bo_rounds;
	double bo_rate;         /* sfs2008: ops/s at 100% */
	bool bo_rate_auto;      /* sfs2008: measure the peak first and use it as bo_rate */
	double bo_valid_fraction; /* a point is valid at achieved >= this x requested (--valid-pct) */
	unsigned bo_points;
	unsigned bo_procs;
	unsigned bo_conns;
	unsigned bo_depth;
	double bo_warmup_s;
	double bo_runtime_s;
	double bo_fileset_mb;
	bool bo_fileset_spec;
	bool bo_stable_writes;  /* sfs2008 WRITEs as FILE_SYNC instead of UNSTABLE */
	unsigned bo_files;      /* meta, varmail, syncwrite: files */
	unsigned bo_flows;      /* varmail: concurrent flows (filebench threads) */
	double bo_size_mb;      /* seq: file size; syncwrite: all files together */
	uint32_t bo_xfer;       /* seq, syncwrite: transfer size */
	uint32_t bo_phases;     /* seq, meta: bit i runs phase i (bench_wl_phases) */
	uint32_t bo_timeout_ms; /* per call */
	uint32_t bo_spin_us;    /* load threads poll this long before sleeping */
	const char *bo_before_run; /* shell command run before each run (--before-run), or NULL */
	const char *bo_json;
	const char *bo_svg;
	bool bo_quiet;
};

/* A mounted export on one target, with what every workload needs. */
struct bench_ctx {
	const struct bench_opts *bc_opts;
	const struct bench_target *bc_target;
	struct bench_fh bc_root;      /* the export's root */
	struct bench_fh bc_work;      /* <export>/shale-bench */
	uint32_t bc_rtmax, bc_wtmax;  /* FSINFO, capped at 1 MiB */
	struct rpc_cred bc_cred;      /* AUTH_SYS with this process's uid and gid */
	uint64_t bc_run_id;           /* random, names this run's temporary files */
};

/* Mounts the target's export (MNT), reads FSINFO and makes <export>/shale-bench. */
SH_MUST_CHECK int bench_ctx_open(struct bench_ctx *ctx, const struct bench_opts *opts,
				 const struct bench_target *target);
/* Synchronous NFS call for setup: args already encoded; the result is decoded into res (which
 * must not keep pointers: nr_data is cleared). Returns 0 (res->nr_status may be an error) or
 * -errno. */
SH_MUST_CHECK int bench_sync_nfs(const struct bench_ctx *ctx, uint32_t proc, const void *args,
				 size_t args_len, struct bench_nfs3_res *res);
/* LOOKUP name in dir, or MKDIR it if absent; *fh_out receives its handle. */
SH_MUST_CHECK int bench_sync_mkdir(const struct bench_ctx *ctx, const struct bench_fh *dir,
				   const char *name, struct bench_fh *fh_out);

/* ---- the engine ---- */
struct bench_thread;
struct bench_op;
/* Completion of an operation, after the engine checked it: status 0 means the reply decoded and
 * had the expected status (res valid during the call), else negative (res may be NULL). */
typedef void (*bench_op_done_fn)(struct bench_thread *t, struct bench_op *op, int status,
				 const struct bench_nfs3_res *res);

enum {
	BENCH_NOENT_FAILS = 0,   /* only NFS3_OK is right */
	BENCH_NOENT_EXPECTED = 1, /* only NOENT is right (a deliberate LOOKUP miss) */
	BENCH_NOENT_ALLOWED = 2,  /* OK or NOENT (set-up probing what exists) */
};
struct bench_op {
	struct bench_conn *op_conn;
	uint32_t op_proc;
	uint16_t op_stat;        /* index into the workload's statistics */
	uint8_t op_noent;        /* BENCH_NOENT_*: what a NOENT status means */
	uint64_t op_start_ns;    /* intended start (latency is measured from here) */
	uint64_t op_sent_ns;     /* when the call was handed to the connection (response time) */
	bench_op_done_fn op_done;
	void *op_ptr;            /* the workload's own */
	uint64_t op_u64[2];
	uint32_t op_u32[2];
};

struct bench_conn {
	struct bench_thread *bc_thread;
	struct rpc_aclnt *bc_clnt;
	struct bench_op *bc_ops;
	struct bench_op **bc_free;
	unsigned bc_nfree;
	bool bc_dirty;           /* calls queued outside its own reply batch: flush */
};

struct bench_stat {
	struct bench_hist bs_hist;     /* latency from the intended start */
	struct bench_hist bs_sent_hist; /* response time, from the send */
	uint64_t bs_failed;
	uint64_t bs_unanswered;
};

#define BENCH_BACKLOG_RING 4096u
struct bench_thread {
	unsigned bt_index;
	struct bench_engine *bt_eng;
	pthread_t bt_tid;
	struct loop *bt_loop;
	struct bench_conn *bt_conns;
	unsigned bt_nconns;
	unsigned bt_rr;
	struct bench_conn *bt_cur;   /* connection whose reply is being handled, or NULL */
	struct bench_stat *bt_stats; /* be_nstats entries */
	uint64_t bt_in_flight;
	uint64_t bt_failed_outside;  /* failed outside the measured window (still a failed run) */
	uint64_t bt_unanswered_outside;
	uint64_t bt_bytes_read;      /* measured READ / WRITE payload bytes */
	uint64_t bt_bytes_written;
	bool bt_measuring;           /* the completion being handled falls in the window */
	int bt_error;                /* first engine-level error (connection failed...) */
	uint64_t bt_rng;
	void *bt_wl;                 /* the workload's per-thread state */
	/* open-loop pacing */
	struct loop_timer bt_timer;
	bool bt_timer_on;
	double bt_rate;              /* ops/s of this thread */
	uint64_t bt_generated;
	uint64_t bt_backlog;
	uint64_t bt_ring_time[BENCH_BACKLOG_RING];
	uint64_t bt_ring_count[BENCH_BACKLOG_RING];
	unsigned bt_ring_head, bt_ring_len;
	bool bt_stopping;
	_Atomic uint64_t bt_spin_idle_ns; /* the loop's idle polling (loop_count_spin_idle) */
};

struct bench_engine {
	/* ---- set by the workload ---- */
	const struct bench_ctx *be_ctx;
	unsigned be_nthreads;
	unsigned be_nconns;          /* per thread */
	unsigned be_depth;           /* per connection */
	const char *const *be_stat_names;
	unsigned be_nstats;
	bool be_open;                /* open-loop paced at be_rate (be_mix) or closed (be_next) */
	double be_rate;              /* total ops/s */
	double be_warmup_s;          /* measured window: [warmup, warmup + runtime); runtime 0 = */
	double be_runtime_s;         /* everything is measured, until the threads finish */
	int (*be_next)(struct bench_thread *t);  /* closed: start one op; 1, 0 (none now) or -errno */
	int (*be_mix)(struct bench_thread *t, uint64_t intended_ns); /* open: same, one op of the mix */
	void **be_thread_wl;         /* per-thread workload state (may be NULL) */
	/* ---- results ---- */
	struct bench_thread *be_threads;
	uint64_t be_start_ns;
	uint64_t be_measure_start_ns;
	uint64_t be_measure_end_ns;  /* 0 while running closed without a window */
	double be_elapsed_s;         /* measured interval */
	double be_server_cpu_s;
	double be_client_cpu_s;
	double be_client_spin_s; /* of it, the load loops' idle polling (--spin-us) */
	struct bench_stat *be_total; /* merged per-stat results, be_nstats entries */
	uint64_t be_failed, be_unanswered, be_ops;
	uint64_t be_bytes_read, be_bytes_written;
	int be_error;
	/* ---- private: the start gate ---- */
	pthread_mutex_t be_mutex;
	pthread_cond_t be_cond;
	unsigned be_ready;           /* threads set up */
	int be_go;                   /* 0: wait; 1: run; -1: abandon */
};

/* Runs the engine: starts the threads (each connects be_nconns clients), starts the load at one
 * moment on all threads, samples server and client CPU at the edges of the measured window, and
 * joins. Results are merged into the be_* result fields; free them with bench_engine_fini.
 * Returns 0 (the run may still have failed ops: check be_failed/be_unanswered) or -errno. */
SH_MUST_CHECK int bench_engine_run(struct bench_engine *eng);
void bench_engine_fini(struct bench_engine *eng);
/* Fills a bench_point (ops, rates, latencies, per-stat results) from a finished engine. */
void bench_engine_point(const struct bench_engine *eng, double requested_ops, struct bench_point *pt);

/* Starts an operation on a connection with a free slot (the one whose reply is being handled
 * when there is one). Returns the op with *enc_out ready for the arguments, or NULL when every
 * slot is busy or the connection failed (then t->bt_error is set). start_ns 0: now. */
struct bench_op *bench_op_begin(struct bench_thread *t, uint32_t proc, uint16_t stat,
				size_t max_args, uint64_t start_ns, struct xdr_enc **enc_out);
/* Sends the op begun last (bulk: WRITE data, kept valid by the caller until done runs).
 * Returns 0 or -errno (then the op was withdrawn). */
SH_MUST_CHECK int bench_op_send(struct bench_thread *t, struct bench_op *op, const void *bulk,
				size_t bulk_len);
/* A number in [0, be_nconns * be_depth) unique among the thread's ops in flight (to give each
 * op its own buffer). */
static inline unsigned bench_op_index(const struct bench_thread *t, const struct bench_op *op,
				      unsigned depth)
{
	const struct bench_conn *c = op->op_conn;
	return (unsigned)(c - t->bt_conns) * depth + (unsigned)(op - c->bc_ops);
}
/* Per-thread random numbers (xorshift64*). */
uint64_t bench_rand(struct bench_thread *t);
static inline uint32_t bench_rand_below(struct bench_thread *t, uint32_t n)
{
	return (uint32_t)(((bench_rand(t) >> 32) * (uint64_t)n) >> 32);
}

/* ---- measurement of the server process ---- */
/* CPU seconds (utime + stime of all threads) of pid, or a negative value. */
double bench_proc_cpu_s(pid_t pid);
/* Resets pid's peak RSS (clear_refs 5). Returns 0 or -errno. */
int bench_proc_reset_hwm(pid_t pid);
/* Peak RSS in KiB (VmHWM), 0 if unknown. */
uint64_t bench_proc_hwm_kib(pid_t pid);
/* CPU seconds (user + system) of this process. */
double bench_self_cpu_s(void);

/* ---- workloads: each runs once against ctx and fills run (points, figures, configuration).
 * Strings put into run are static or owned by the workload's storage that lives until the
 * process exits. Return 0 or -errno (a run with failed ops still returns 0; the caller checks
 * run->br_failed / br_unanswered after bench_run_finish). ---- */
SH_MUST_CHECK int bench_sfs2008(const struct bench_ctx *ctx, struct bench_run *run);
SH_MUST_CHECK int bench_varmail(const struct bench_ctx *ctx, struct bench_run *run);
SH_MUST_CHECK int bench_seq(const struct bench_ctx *ctx, struct bench_run *run);
SH_MUST_CHECK int bench_meta(const struct bench_ctx *ctx, struct bench_run *run);
SH_MUST_CHECK int bench_syncwrite(const struct bench_ctx *ctx, struct bench_run *run);

/* --phases of seq and meta: list is a comma-separated list of the workload's phase names (in any
 * order; they run in the workload's own order), or NULL for the workload's default. Sets *mask
 * (bit i: phase i) and returns 0, or prints why and returns -EINVAL (an unknown name, a workload
 * without phases, or a set that cannot run, such as a read without a write). */
SH_MUST_CHECK int bench_wl_phases(const char *workload, const char *list, uint32_t *mask);

/* Adds a workload figure to run (name and unit static). */
void bench_run_add_figure(struct bench_run *run, const char *name, double value, const char *unit);
/* A copy of text that lives until the process exits (for strings in struct bench_run). */
const char *bench_keep(const char *text);

#endif
