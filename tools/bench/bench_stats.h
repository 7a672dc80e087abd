/* bench_stats.h: latency histograms and result records for `shale bench`, and the reports made
 * from them (text in the SPECsfs2008 layout, JSON, SVG), plus the overall response time.
 *
 * Model: every load thread records each operation's latency into its own struct bench_hist (no
 * sharing, no locks); histograms are merged at the end of a load point. A histogram is
 * log-linear: 64 linear sub-buckets per power of two of nanoseconds, so any percentile is within
 * 1.6% of the true value, in fixed memory (~15 KiB), recorded in a few instructions.
 *
 * Bucket layout: values below 64 ns have a bucket each (exact); a value v >= 64 with its highest
 * set bit at position m falls in group m-5 (groups of 64 buckets), sub-bucket (v >> (m-6)) - 64,
 * so a bucket is 2^(m-6) ns wide: 1/64 of its lower bound. A percentile reports the middle of its
 * bucket (error at most 1/128, under 0.8%), never more than the largest value recorded.
 *
 * Reports: all strings in the records are printed escaped for their format (JSON, XML), and bytes
 * that are not valid UTF-8 become U+FFFD, so a label from the command line cannot break a file. */
#ifndef SHALE_BENCH_STATS_H
#define SHALE_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

#define BENCH_HIST_SUB_BITS 6 /* 64 sub-buckets per power of two */
#define BENCH_HIST_BUCKETS ((64 - BENCH_HIST_SUB_BITS + 1) << BENCH_HIST_SUB_BITS)

struct bench_hist {
	uint64_t bh_count;
	uint64_t bh_sum_ns;
	uint64_t bh_max_ns;
	uint32_t bh_buckets[BENCH_HIST_BUCKETS];
};

/* Empties hist (all counts zero). A zero-filled struct bench_hist is also empty. */
void bench_hist_reset(struct bench_hist *hist);
void bench_hist_record(struct bench_hist *hist, uint64_t latency_ns);
void bench_hist_merge(struct bench_hist *into, const struct bench_hist *from);
double bench_hist_mean_ms(const struct bench_hist *hist);            /* 0 when empty */
/* Nearest-rank percentile: the smallest recorded latency (to the bucket's precision) such that at
 * least pct% of the records are at or below it; pct is clamped to [0,100]. 0 when empty. */
double bench_hist_percentile_ms(const struct bench_hist *hist, double pct); /* pct in [0,100] */

/* Per-procedure results of one load point or of a whole run. */
#define BENCH_MAX_PROCS 24
struct bench_proc_result {
	const char *bpr_name;   /* "GETATTR", ...; static string */
	uint64_t bpr_count;     /* completed operations (including failed ones) */
	uint64_t bpr_failed;    /* replies with an error the workload did not expect */
	double bpr_mean_ms;      /* latency from each call's intended start (client backlog included) */
	double bpr_p99_ms;
	double bpr_resp_mean_ms; /* response time, from each call's send to its reply */
	double bpr_resp_p99_ms;
};

/* A load point of an open-loop run is valid when it achieved at least this fraction of its
 * requested rate (the default of struct bench_run's br_valid_fraction; rule in bench_stats.c). */
#define BENCH_VALID_FRACTION_DEFAULT 0.95

/* One load point: requested rate, what was achieved, and what it cost. */
struct bench_point {
	double bp_requested_ops;  /* ops/s asked for (0 for closed-loop workloads) */
	double bp_achieved_ops;   /* completed ops/s over the measured interval */
	double bp_mean_sent_ms;   /* mean response time from each call's send to its reply
				   * (SPECsfs2008's response time: the curve and the ORT) */
	double bp_mean_ms;        /* mean latency from each op's intended start, client backlog
				   * included (open loop, coordinated-omission-correct): "queued" */
	double bp_p99_ms;         /* p99 of the same intended-start latency */
	double bp_durable_ms;     /* mean response (from the send) of the calls whose reply waits
				   * for stable storage; NAN where the workload does not say which
				   * those are (sfs2008 sets it) */
	uint64_t bp_ops;          /* operations completed in the measured interval */
	uint64_t bp_failed;       /* unexpected error replies */
	uint64_t bp_unanswered;   /* requests without a reply at the end of the interval */
	double bp_seconds;        /* measured interval */
	double bp_server_cpu_s;   /* server CPU seconds in the interval (0 if unknown) */
	double bp_client_cpu_s;   /* the load generator's own CPU seconds in the interval */
	double bp_cpu_window_s;   /* the interval both CPU figures were read over: bp_seconds,
				   * except where a workload adds to bp_seconds afterwards (seq's
				   * COMMIT); 0 if unknown */
	double bp_client_spin_s;  /* of bp_client_cpu_s, the load loops' idle polling (--spin-us) */
	unsigned bp_nprocs;
	struct bench_proc_result bp_procs[BENCH_MAX_PROCS];
};

/* A whole run of one workload against one server. Strings are owned by the caller. */
#define BENCH_MAX_FIGURES 32
struct bench_run {
	const char *br_workload;  /* "sfs2008", "varmail", "seq", "meta", "syncwrite" */
	const char *br_label;     /* e.g. "shale-posix" or "ganesha" */
	const char *br_server;    /* host:port */
	const char *br_export;
	const char *br_fileset;   /* description, e.g. "120 MB per op/s rule: 2400 MB, 30% accessed" */
	const char *br_load;      /* how the load points were chosen (sfs2008), or NULL */
	const char *br_before_run; /* the command run before the run (--before-run), or NULL */
	unsigned br_processes;
	unsigned br_connections;  /* per process */
	unsigned br_depth;        /* outstanding requests per connection */
	double br_warmup_s;
	double br_runtime_s;
	size_t br_npoints;
	struct bench_point *br_points;
	double br_valid_fraction;       /* a point is valid at achieved >= this x requested; 0 means
					 * BENCH_VALID_FRACTION_DEFAULT (see bench_point_valid) */
	/* Derived by bench_run_finish: */
	double br_peak_ops;             /* highest achieved ops/s of a valid point; NAN if none */
	double br_ort_ms;               /* overall response time (bench_ort_ms); NAN if no peak */
	size_t br_nvalid;               /* valid points */
	size_t br_peak_index;           /* the peak's point, or SIZE_MAX when no point is valid */
	double br_server_cpu_us_per_op; /* server CPU per op over all points, 0 if unknown */
	double br_client_cpu_us_per_op;
	uint64_t br_server_peak_rss_kib; /* set by the caller, 0 if unknown */
	uint64_t br_failed;             /* sum over points */
	uint64_t br_unanswered;
	/* Workload-specific figures for text/JSON, e.g. varmail's "IO Summary" or seq's MB/s:
	 * name/value/unit triples, up to BENCH_MAX_FIGURES. */
	size_t br_nfigures;
	struct bench_figure {
		const char *bf_name;
		double bf_value;
		const char *bf_unit;
	} br_figures[BENCH_MAX_FIGURES];
};

/* Whether point p counts for the peak and the ORT: its throughput is a finite number >= 0 and,
 * when it had a requested rate (open loop), it achieved at least min_fraction of that rate. A
 * closed-loop point (requested 0) is valid whenever its throughput is usable. min_fraction <= 0
 * or not finite means BENCH_VALID_FRACTION_DEFAULT. */
bool bench_point_valid(const struct bench_point *p, double min_fraction);

/* Index of the peak: the valid point with the highest achieved throughput (the first of equals),
 * or SIZE_MAX when no point is valid. */
size_t bench_peak_index(const struct bench_point *points, size_t npoints, double min_fraction);

/* SPECsfs2008's overall response time over the valid points (bench_point_valid): the area under
 * the response-time curve drawn from (0,0) through each valid point (achieved ops/s,
 * bp_mean_sent_ms: response time from the send, as SPECsfs2008 measured it) in
 * load order up to and including the peak, by the trapezoid rule, divided by the peak's
 * throughput. Invalid points, and valid ones after the peak, are left out; a valid point before
 * the peak whose throughput fell below the previous one's takes area away, as in SPECsfs2008.
 * A valid point with a non-finite or negative response is skipped. Returns NAN when there is no
 * valid point with throughput above zero. */
double bench_ort_ms(const struct bench_point *points, size_t npoints, double min_fraction);

/* Fills the derived fields of run from its points: valid points, peak (over the valid points
 * only), ORT, failed and unanswered sums, server and client CPU per op (server: 0 unless some
 * point has bp_server_cpu_s > 0; both over all points, valid or not). Leaves br_valid_fraction,
 * br_server_peak_rss_kib and the figures alone. */
void bench_run_finish(struct bench_run *run);

/* Text report in the SPECsfs2008 layout: the headline ("SPECsfs2008_nfs.v3-style = N Ops/Sec
 * (Overall Response Time = X msec)" for sfs2008, marked as not a SPEC-audited result), the
 * "Throughput (ops/sec) / Response (msec)" table (Response: bp_mean_sent_ms; then the requested
 * rate and the intended-start "queued" mean and p99), peak and overall response time, configuration,
 * per-procedure counts with mean and p99 (at the peak point), server CPU per op and peak RSS when
 * known, client CPU per op, the workload's figures, and whether the run is valid (no failed and no
 * unanswered operations). Invalid load points stay in the table, marked "saturated"; with no valid
 * point the peak and ORT read "not available" with the reason. */
void bench_report_text(FILE *out, const struct bench_run *run);
/* JSON: {"format":"shale-bench/1", "runs":[one object per run, with its points (each with
 * "valid", "mean_sent_ms" from the send, and "mean_ms" and "p99_ms" from the intended start),
 * per-procedure results and figures]}; bench_report_json_vs adds
 * "comparison":{"a":..., "b":..., "ratios":[...]}. A run's peak_ops and ort_ms are null when no
 * point is valid.
 * Unknown or non-finite numbers are written as null. path "-" means stdout. Returns 0 or -errno. */
SH_MUST_CHECK int bench_report_json(const char *path, const struct bench_run *runs, size_t nruns);
/* SVG: the throughput/response-time curves (bp_mean_sent_ms, the curve whose area is the ORT)
 * of one or more runs on shared axes, labelled, with
 * the ORT of each in the legend. Only valid points are drawn (and scale the axes); the legend
 * says how many saturated points of each run were left out. Returns 0 or -errno. */
SH_MUST_CHECK int bench_report_svg(const char *path, const struct bench_run *runs, size_t nruns);

/* Ratio summary for --vs: per figure, the A/B ratio over rounds as median, min and max. */
struct bench_ratio {
	const char *brt_name;      /* static, or a figure's bf_name (lives as long as the runs) */
	double brt_median, brt_min, brt_max;
	double brt_a_median, brt_b_median;
	const char *brt_unit;      /* of the A and B values, e.g. "ops/s"; never NULL */
	size_t brt_rounds;         /* rounds in which both values were known and B was non-zero */
	bool brt_lower_is_better;  /* ORT, CPU per op, RSS: a ratio below 1 favours A */
};
/* a_rounds[i] and b_rounds[i] are round i of servers A and B (same workload). Computes the
 * ratios of peak ops, ORT, server CPU per op, peak RSS and each figure that A's first round has
 * and every round of both has by the same name. A round whose A or B value is unknown (0 or not
 * finite; for a figure: not finite or B = 0) is left out of that ratio; a ratio with no round
 * left is not written. The median of an even count is the mean of the middle two. Returns the
 * number of ratios written (at most max). */
size_t bench_compare(const struct bench_run *a_rounds, const struct bench_run *b_rounds,
		     size_t nrounds, struct bench_ratio *out, size_t max);
void bench_report_compare(FILE *out, const char *a_label, const char *b_label,
			  const struct bench_ratio *ratios, size_t n);
/* bench_report_json plus the ratios of a --vs run (runs in the order they ran, e.g. A B A B A B). */
SH_MUST_CHECK int bench_report_json_vs(const char *path, const struct bench_run *runs, size_t nruns,
				       const char *a_label, const char *b_label,
				       const struct bench_ratio *ratios, size_t nratios);

#endif
