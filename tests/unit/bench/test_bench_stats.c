/* test_bench_stats.c: the bench tool's statistics and reports: histogram percentiles against a
 * sorted reference, the overall response time against published SPECsfs2008 results, the text
 * report's headline and tables, JSON that parses, SVG that is well-formed XML, and --vs ratios.
 *
 * The JSON and SVG checks run python3 (json, xml.etree) on the files written; the python3 path
 * comes from the PYTHON3 environment variable (set by meson), else "python3" on PATH. */
#include "bench_stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

/* ---- helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* xorshift64*: a fixed sequence, so a failure reproduces. */
static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1Dull;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static bool close_rel(double got, double want, double rel)
{
	if (want == 0.0)
		return got == 0.0;
	return fabs(got - want) <= rel * fabs(want);
}

/* The whole of a file, NUL-terminated; NULL on failure. Freed with mem_free. */
static char *slurp(const char *path)
{
	char *content = NULL;
	size_t len = 0;
	if (sh_read_file(path, &content, &len, 1 << 24) != 0)
		return NULL;
	return content;
}

static char tmpdir[] = "/tmp/shale-bench-test-XXXXXX";

static void tmp_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
}

/* Runs python3 -c script with args; true when it exits 0. quiet silences its stderr, for runs
 * that are meant to fail. */
static bool run_python_opt(const char *script, const char *const *args, size_t nargs, bool quiet)
{
	const char *py = getenv("PYTHON3");
	if (py == NULL || py[0] == '\0')
		py = "python3";
	const char *argv[16];
	size_t n = 0;
	argv[n++] = py;
	argv[n++] = "-c";
	argv[n++] = script;
	for (size_t i = 0; i < nargs && n < SH_ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		if (quiet && freopen("/dev/null", "w", stderr) == NULL)
			_exit(126);
		execvp(py, (char *const *)argv);
		_exit(127);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return false;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static bool run_python(const char *script, const char *const *args, size_t nargs)
{
	return run_python_opt(script, args, nargs, false);
}

/* True when python3 runs but the script fails (exit status 1, an uncaught exception). */
static bool python_rejects(const char *script, const char *const *args, size_t nargs)
{
	return !run_python_opt(script, args, nargs, true) && run_python("pass\n", NULL, 0);
}

/* Replaces the file at path by text: true when written. */
static bool write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return false;
	fputs(text, f);
	fclose(f);
	return true;
}

/* Pieces of the python3 checks: the file in argv[1] parses; an SVG check starts with the parsed
 * picture (root) and its namespace (ns), and often collects its texts. */
#define JSON_PARSES "import json,sys\njson.load(open(sys.argv[1]))\n"
#define XML_PARSES "import sys, xml.etree.ElementTree as ET\nET.parse(sys.argv[1])\n"
#define SVG_ROOT                                                                                   \
	"import sys, xml.etree.ElementTree as ET\n"                                                \
	"ns='{http://www.w3.org/2000/svg}'\n"                                                      \
	"root=ET.parse(sys.argv[1]).getroot()\n"
#define SVG_TEXTS "texts=[''.join(t.itertext()) for t in root.iter(ns+'text')]\n"

enum report_kind { REPORT_JSON, REPORT_SVG };

/* Writes the JSON report (run.json) or the SVG curve (curve.svg) of the nruns runs into the test
 * directory and runs the python3 script on it (argv[1]); both must succeed. what names the case
 * in a failure. */
static void check_report(enum report_kind kind, const struct bench_run *runs, size_t nruns,
			 const char *script, const char *what)
{
	char path[256];
	tmp_path(path, sizeof(path), kind == REPORT_JSON ? "run.json" : "curve.svg");
	int rc = kind == REPORT_JSON ? bench_report_json(path, runs, nruns)
				     : bench_report_svg(path, runs, nruns);
	CHECKF(rc == 0, "%s: writing %s: %d", what, path, rc);
	const char *args[] = { path };
	CHECKF(run_python(script, args, 1), "%s: the check of %s failed", what, path);
}

/* ---- histogram ---- */

static void test_hist_small_values_exact(void)
{
	struct bench_hist h;
	bench_hist_reset(&h);
	for (uint64_t v = 1; v <= 50; v++)
		bench_hist_record(&h, v);
	/* Below 64 ns every value has its own bucket: percentiles are exact. */
	CHECK(h.bh_count == 50);
	CHECK(h.bh_max_ns == 50);
	CHECK(bench_hist_percentile_ms(&h, 50.0) == 25e-6);
	CHECK(bench_hist_percentile_ms(&h, 100.0) == 50e-6);
	CHECK(bench_hist_percentile_ms(&h, 0.0) == 1e-6);
	CHECK(bench_hist_percentile_ms(&h, 2.0) == 1e-6);
	CHECK(bench_hist_percentile_ms(&h, 2.1) == 2e-6);
	CHECK(close_rel(bench_hist_mean_ms(&h), 25.5e-6, 1e-12));
}

static void test_hist_empty(void)
{
	struct bench_hist h;
	bench_hist_reset(&h);
	CHECK(bench_hist_mean_ms(&h) == 0.0);
	CHECK(bench_hist_percentile_ms(&h, 99.0) == 0.0);
	CHECK(bench_hist_percentile_ms(&h, 0.0) == 0.0);
}

/* Log-uniform latencies from 1 us to 10 s, compared with the same nearest-rank percentile taken
 * on the sorted values. */
static void test_hist_percentiles_vs_sorted(void)
{
	enum { N = 200000 };
	uint64_t *vals = mem_alloc(N * sizeof(uint64_t));
	struct bench_hist *h = mem_alloc(sizeof(*h));
	CHECK(vals != NULL && h != NULL);
	if (vals == NULL || h == NULL)
		goto out;
	bench_hist_reset(h);
	long double sum = 0;
	for (size_t i = 0; i < N; i++) {
		double u = (double)(rng_next() >> 11) / 9007199254740992.0; /* [0,1) */
		uint64_t v = (uint64_t)(1000.0 * pow(1e7, u));
		vals[i] = v;
		sum += v;
		bench_hist_record(h, v);
	}
	qsort(vals, N, sizeof(uint64_t), cmp_u64);
	static const double pcts[] = { 0.0, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0 };
	for (size_t i = 0; i < SH_ARRAY_SIZE(pcts); i++) {
		double rank = ceil(pcts[i] / 100.0 * N);
		size_t k = rank < 1.0 ? 0 : (size_t)rank - 1;
		double want = (double)vals[k] / 1e6;
		double got = bench_hist_percentile_ms(h, pcts[i]);
		CHECKF(close_rel(got, want, 1.0 / 64.0), "p%g: histogram %.6f ms, sorted %.6f ms",
		       pcts[i], got, want);
	}
	CHECK(bench_hist_percentile_ms(h, 100.0) == (double)vals[N - 1] / 1e6);
	CHECK(h->bh_max_ns == vals[N - 1]);
	CHECK(close_rel(bench_hist_mean_ms(h), (double)(sum / N) / 1e6, 1e-9));
out:
	mem_free(vals);
	mem_free(h);
}

static void test_hist_merge_and_extremes(void)
{
	struct bench_hist *all = mem_alloc(sizeof(*all));
	struct bench_hist *a = mem_alloc(sizeof(*a));
	struct bench_hist *b = mem_alloc(sizeof(*b));
	CHECK(all != NULL && a != NULL && b != NULL);
	if (all == NULL || a == NULL || b == NULL)
		goto out;
	bench_hist_reset(all);
	bench_hist_reset(a);
	bench_hist_reset(b);
	for (int i = 0; i < 5000; i++) {
		uint64_t v = rng_next() >> (rng_next() % 64);
		bench_hist_record(all, v);
		bench_hist_record(i % 3 == 0 ? a : b, v);
	}
	bench_hist_merge(a, b);
	CHECK(memcmp(a, all, sizeof(*a)) == 0);

	/* The largest value lands in the last bucket and is reported exactly by p100. */
	bench_hist_reset(a);
	bench_hist_record(a, UINT64_MAX);
	bench_hist_record(a, 0);
	CHECK(a->bh_buckets[BENCH_HIST_BUCKETS - 1] == 1);
	CHECK(a->bh_buckets[0] == 1);
	CHECK(bench_hist_percentile_ms(a, 100.0) == (double)UINT64_MAX / 1e6);
	CHECK(bench_hist_percentile_ms(a, 50.0) == 0.0);
	CHECK(bench_hist_percentile_ms(a, 250.0) == (double)UINT64_MAX / 1e6); /* clamped */
	CHECK(bench_hist_percentile_ms(a, -3.0) == 0.0);
out:
	mem_free(all);
	mem_free(a);
	mem_free(b);
}

/* ---- overall response time ---- */

/* Published SPECsfs2008_nfs.v3 results: ten (throughput ops/s, response ms) points and the
 * published overall response time, from the result pages on spec.org (numbers only). */
struct published_curve {
	const char *what;
	double ops[10];
	double ms[10];
	double ort_ms;
};

static const struct published_curve published[] = {
	{ "Apple 3.0 GHz 8-Core Xserve, 8053 ops/s, ORT 1.37 ms (sfs2008-20080222-00087)",
	  { 798, 1597, 2403, 3203, 4006, 4810, 5609, 6417, 7219, 8053 },
	  { 0.8, 0.8, 0.9, 1.0, 1.0, 1.2, 1.3, 1.9, 2.4, 4.7 },
	  1.37 },
	{ "Apple Xserve (Early 2009) with Snow Leopard Server, 18784 ops/s, ORT 2.67 ms "
	  "(sfs2008-20090518-00123)",
	  { 1896, 3795, 5702, 7604, 9509, 11419, 13316, 15230, 17127, 18784 },
	  { 1.0, 1.2, 1.4, 1.7, 1.8, 2.0, 2.2, 3.9, 5.7, 13.4 },
	  2.67 },
	{ "Avere FXT 2500 (6 Node Cluster), 131591 ops/s, ORT 1.38 ms (sfs2008-20090907-00132)",
	  { 13082, 26185, 39341, 52474, 65602, 78844, 91961, 105042, 118413, 131591 },
	  { 0.5, 0.7, 0.9, 1.0, 1.1, 1.3, 1.5, 1.8, 2.7, 4.6 },
	  1.38 },
	{ "Avere FXT 3500 (44 Node Cluster), 1564404 ops/s, ORT 0.99 ms (sfs2008-20111031-00204)",
	  { 158669, 317906, 477508, 637151, 797347, 964648, 1150533, 1304474, 1423859, 1564404 },
	  { 0.6, 0.7, 0.6, 0.7, 1.0, 1.1, 1.0, 1.4, 2.0, 2.2 },
	  0.99 },
	{ "Avere FXT 3800 (32 Node Cluster, Cloud Storage Config), 1592334 ops/s, ORT 1.24 ms "
	  "(sfs2008-20130318-00218)",
	  { 165131, 330450, 495831, 661422, 828151, 993323, 1160562, 1328345, 1476954, 1592334 },
	  { 0.3, 0.4, 0.5, 0.7, 0.8, 1.1, 1.3, 2.0, 3.6, 5.8 },
	  1.24 },
	{ "Avere FXT 3800 (3 Node Cluster, Amplidata AmpliStor Cloud Storage Config), 180229 ops/s, "
	  "ORT 0.95 ms (sfs2008-20140303-00241)",
	  { 17807, 35659, 53529, 71387, 89262, 107172, 125280, 143069, 160721, 180229 },
	  { 0.3, 0.4, 0.5, 0.6, 0.8, 0.9, 1.1, 1.4, 1.9, 3.0 },
	  0.95 },
	{ "Avere FXT 3800 (3 Node Cluster, ZFS Storage Config), 180043 ops/s, ORT 0.87 ms "
	  "(sfs2008-20140317-00244)",
	  { 17808, 35658, 53519, 71383, 89274, 107189, 125289, 143053, 160709, 180043 },
	  { 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.2, 1.7, 2.7 },
	  0.87 },
	{ "Avere FXT 3800 (3 Node Cluster, FlashCloud for Amazon S3 Service), 180141 ops/s, ORT "
	  "0.86 ms (sfs2008-20140314-00242)",
	  { 17807, 35659, 53527, 71390, 89240, 107177, 125280, 143070, 160697, 180141 },
	  { 0.3, 0.4, 0.5, 0.6, 0.7, 0.9, 1.0, 1.3, 1.8, 2.1 },
	  0.86 },
	{ "Avere FXT 3800 (3 Node Cluster, Local ZFS Storage Config), 180538 ops/s, ORT 0.88 ms "
	  "(sfs2008-20140428-00246)",
	  { 17859, 35758, 53680, 71595, 89506, 107481, 125649, 143458, 161102, 180538 },
	  { 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.3, 1.7, 2.7 },
	  0.88 },
};

static void test_ort_published_results(void)
{
	for (size_t c = 0; c < SH_ARRAY_SIZE(published); c++) {
		struct bench_point pts[10];
		memset(pts, 0, sizeof(pts));
		for (int i = 0; i < 10; i++) {
			pts[i].bp_achieved_ops = published[c].ops[i];
			pts[i].bp_mean_sent_ms = published[c].ms[i];
			/* The intended-start latency is not the curve's: far off, it changes nothing. */
			pts[i].bp_mean_ms = 1000.0 * published[c].ms[i] + 50.0;
		}
		/* Published curves carry no requested rate (every point valid) and peak at their
		 * last point, so the valid-point rule leaves SPECsfs2008's own ORT unchanged. */
		double ort = bench_ort_ms(pts, 10, BENCH_VALID_FRACTION_DEFAULT);
		/* The published points are rounded to 0.1 ms and the ORT to 0.01 ms. */
		tap_check(fabs(ort - published[c].ort_ms) <= 0.01, "ort %s: computed %.4f ms",
			  published[c].what, ort);
	}
}

/* Sets a point's throughput and its response time from the send, the two the ORT is made of. */
static void point_at(struct bench_point *p, double achieved_ops, double mean_sent_ms)
{
	p->bp_achieved_ops = achieved_ops;
	p->bp_mean_sent_ms = mean_sent_ms;
}

static void test_ort_by_hand(void)
{
	struct bench_point p[4];
	memset(p, 0, sizeof(p));
	/* No points, or only a point without throughput: no ORT (not 0). */
	CHECK(isnan(bench_ort_ms(p, 0, 0.95)));
	CHECK(isnan(bench_ort_ms(p, 1, 0.95)));
	/* One point: a triangle from (0,0), half the response time. */
	point_at(&p[0], 1000, 2.0);
	CHECK(close_rel(bench_ort_ms(p, 1, 0.95), 1.0, 1e-12));
	/* (100,1) (200,1) (400,3): areas 50 + 100 + 400 = 550, / 400. */
	point_at(&p[0], 100, 1.0);
	point_at(&p[1], 200, 1.0);
	point_at(&p[2], 400, 3.0);
	CHECK(close_rel(bench_ort_ms(p, 3, 0.95), 550.0 / 400.0, 1e-12));
	/* A point that is not a number is left out: (100,1) (400,3) = 50 + 600 = 650, / 400. */
	p[1].bp_mean_sent_ms = NAN;
	CHECK(close_rel(bench_ort_ms(p, 3, 0.95), 650.0 / 400.0, 1e-12));
	/* Throughput that falls before the peak takes area away, in load order:
	 * (100,1) (300,2) (250,2) (400,3): 50 + 300 - 100 + 375 = 625, / 400. */
	point_at(&p[1], 300, 2.0);
	point_at(&p[2], 250, 2.0);
	point_at(&p[3], 400, 3.0);
	CHECK(close_rel(bench_ort_ms(p, 4, 0.95), 625.0 / 400.0, 1e-12));
	/* A valid point after the peak is left out: (100,1) (400,3) (300,5) ends at the peak:
	 * 50 + 600 = 650, / 400 (SPECsfs2008's load-order area would be (650 - 400) / 400). */
	point_at(&p[1], 400, 3.0);
	point_at(&p[2], 300, 5.0);
	CHECK(close_rel(bench_ort_ms(p, 3, 0.95), 650.0 / 400.0, 1e-12));
	CHECK(bench_peak_index(p, 3, 0.95) == 1);
	/* The curve is the response time from the send; the intended-start latency (client
	 * backlog included) does not enter the ORT, not even for a point without a sent mean. */
	double before = bench_ort_ms(p, 3, 0.95);
	p[0].bp_mean_ms = 100.0;
	p[1].bp_mean_ms = 700.0;
	p[2].bp_mean_ms = 900.0;
	CHECK(bench_ort_ms(p, 3, 0.95) == before);
	p[1].bp_mean_sent_ms = NAN; /* the peak (400) has no curve point: area 50, / 400 */
	CHECK(bench_peak_index(p, 3, 0.95) == 1);
	CHECK(close_rel(bench_ort_ms(p, 3, 0.95), 50.0 / 400.0, 1e-12));
}

/* ---- a run to report on ---- */

static struct bench_point sample_points[10];

static void fill_sample_run(struct bench_run *run, const char *label, double scale)
{
	static const char *const procs[] = { "GETATTR", "LOOKUP", "READ", "ACCESS", "WRITE" };
	static const double mix[] = { 0.26, 0.24, 0.18, 0.11, 0.10 };
	memset(run, 0, sizeof(*run));
	memset(sample_points, 0, sizeof(sample_points));
	for (int i = 0; i < 10; i++) {
		struct bench_point *p = &sample_points[i];
		p->bp_requested_ops = 1000.0 * (i + 1) * scale;
		p->bp_achieved_ops = 998.0 * (i + 1) * scale;
		p->bp_mean_sent_ms = 0.2 + 0.05 * i * i;
		p->bp_mean_ms = p->bp_mean_sent_ms + 0.01 * i * i * i; /* backlog grows with load */
		p->bp_p99_ms = 3.0 * p->bp_mean_ms;
		p->bp_seconds = 10.0;
		p->bp_ops = (uint64_t)(p->bp_achieved_ops * p->bp_seconds);
		p->bp_server_cpu_s = 0.5 * (i + 1);
		p->bp_client_cpu_s = 0.25 * (i + 1);
		p->bp_cpu_window_s = 10.0;
		p->bp_client_spin_s = 0.05 * (i + 1); /* idle polling: not in the load's share */
		p->bp_nprocs = 5;
		for (int k = 0; k < 5; k++) {
			p->bp_procs[k].bpr_name = procs[k];
			p->bp_procs[k].bpr_count = (uint64_t)(mix[k] * (double)p->bp_ops);
			p->bp_procs[k].bpr_mean_ms = p->bp_mean_ms * (0.5 + 0.25 * k);
			p->bp_procs[k].bpr_p99_ms = 4.0 * p->bp_mean_ms;
			p->bp_procs[k].bpr_resp_mean_ms = 0.125 * (k + 1);
			p->bp_procs[k].bpr_resp_p99_ms = 0.5 * (k + 1);
		}
	}
	run->br_workload = "sfs2008";
	run->br_label = label;
	run->br_server = "127.0.0.1:2049";
	run->br_export = "/srv/export";
	run->br_fileset = "fileset-mb 64: 64 MB, 30% accessed";
	run->br_processes = 2;
	run->br_connections = 4;
	run->br_depth = 8;
	run->br_warmup_s = 5;
	run->br_runtime_s = 10;
	run->br_npoints = 10;
	run->br_points = sample_points;
	run->br_server_peak_rss_kib = 20480;
	run->br_nfigures = 2;
	run->br_figures[0] = (struct bench_figure){ "read", 512.5, "MB/s" };
	run->br_figures[1] = (struct bench_figure){ "create", 4000, "ops/s" };
}

static void test_run_finish(void)
{
	struct bench_run run;
	fill_sample_run(&run, "shale-posix", 1.0);
	sample_points[3].bp_failed = 2;
	sample_points[9].bp_unanswered = 1;
	bench_run_finish(&run);
	CHECK(run.br_peak_ops == 9980.0);
	CHECK(run.br_nvalid == 10 && run.br_peak_index == 9);
	CHECK(close_rel(run.br_ort_ms, bench_ort_ms(run.br_points, run.br_npoints, 0.95), 1e-15));
	CHECK(run.br_failed == 2);
	CHECK(run.br_unanswered == 1);
	double ops = 0, scpu = 0, ccpu = 0;
	for (int i = 0; i < 10; i++) {
		ops += (double)sample_points[i].bp_ops;
		scpu += sample_points[i].bp_server_cpu_s;
		ccpu += sample_points[i].bp_client_cpu_s;
	}
	CHECK(close_rel(run.br_server_cpu_us_per_op, scpu * 1e6 / ops, 1e-12));
	CHECK(close_rel(run.br_client_cpu_us_per_op, ccpu * 1e6 / ops, 1e-12));
	CHECK(run.br_server_peak_rss_kib == 20480); /* the caller's, left alone */

	/* Server CPU unknown everywhere: 0, which the reports print as "not measured". */
	for (int i = 0; i < 10; i++)
		sample_points[i].bp_server_cpu_s = 0;
	bench_run_finish(&run);
	CHECK(run.br_server_cpu_us_per_op == 0.0);
}

/* ---- text report ---- */

static char *report_to_string(const struct bench_run *run)
{
	char path[256];
	tmp_path(path, sizeof(path), "report.txt");
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return NULL;
	bench_report_text(f, run);
	fclose(f);
	return slurp(path);
}

static void test_report_text(void)
{
	struct bench_run run;
	fill_sample_run(&run, "shale-posix", 1.0);
	bench_run_finish(&run);
	char *text = report_to_string(&run);
	CHECK(text != NULL);
	if (text == NULL)
		return;
	char line[160];
	snprintf(line, sizeof(line),
		 "SPECsfs2008_nfs.v3-style = %.0f Ops/Sec (Overall Response Time = %.2f msec)\n",
		 run.br_peak_ops, run.br_ort_ms);
	CHECKF(strstr(text, line) != NULL, "no headline %s", line);
	CHECK(strstr(text, "not a SPEC-audited") != NULL);
	CHECK(strstr(text, "(ops/sec)") != NULL && strstr(text, "(msec)") != NULL);
	snprintf(line, sizeof(line), "Peak throughput        %12.0f ops/sec\n", run.br_peak_ops);
	CHECK(strstr(text, line) != NULL);
	snprintf(line, sizeof(line), "Overall response time  %12.2f msec\n", run.br_ort_ms);
	CHECK(strstr(text, line) != NULL);
	/* Each point's throughput and response, in the SPECsfs2008 column order. */
	for (int i = 0; i < 10; i++) {
		snprintf(line, sizeof(line), "%16.0f%16.2f%12.0f%13.2f%13.2f",
			 sample_points[i].bp_achieved_ops, sample_points[i].bp_mean_sent_ms,
			 sample_points[i].bp_requested_ops, sample_points[i].bp_mean_ms,
			 sample_points[i].bp_p99_ms);
		CHECKF(strstr(text, line) != NULL, "point %d missing", i);
	}
	CHECK(strstr(text, "GETATTR") != NULL && strstr(text, "WRITE") != NULL);
	CHECK(strstr(text, "point 10 of 10") != NULL);
	CHECK(strstr(text, "Server peak RSS           20.0 MiB") != NULL);
	CHECK(strstr(text, "Server CPU per op ") != NULL && strstr(text, "not measured") == NULL);
	CHECK(strstr(text, "Outstanding per conn.     8") != NULL);
	CHECK(strstr(text, "fileset-mb 64") != NULL);
	CHECK(strstr(text, "read  512.500 MB/s") != NULL);
	CHECK(strstr(text, "Result: VALID") != NULL);
	/* Each point's busy server and load generator, in percent of a core (over 10 s: server
	 * 0.5 (i + 1) s, load 0.25 (i + 1) s less 0.05 (i + 1) s of idle polling). */
	CHECK(strstr(text, "\nCPU per point\n") != NULL);
	CHECK(strstr(text, "(its idle polling included; CPU per point leaves it out)") != NULL);
	for (int i = 0; i < 10; i++) {
		snprintf(line, sizeof(line), "\n%16.0f%14.1f%14.1f\n",
			 sample_points[i].bp_achieved_ops, 5.0 * (i + 1), 2.0 * (i + 1));
		CHECKF(strstr(text, line) != NULL, "CPU of point %d missing", i);
	}
	mem_free(text);

	/* The server's CPU unknown (no pid): a dash, the load's shown. No window: no table. */
	sample_points[0].bp_server_cpu_s = 0.0;
	text = report_to_string(&run);
	snprintf(line, sizeof(line), "\n%16.0f%14s%14.1f\n", sample_points[0].bp_achieved_ops, "-",
		 2.0);
	CHECK(text != NULL && strstr(text, line) != NULL);
	mem_free(text);
	for (int i = 0; i < 10; i++)
		sample_points[i].bp_cpu_window_s = 0.0;
	text = report_to_string(&run);
	CHECK(text != NULL && strstr(text, "\nCPU per point\n") == NULL);
	mem_free(text);
	sample_points[0].bp_server_cpu_s = 0.5;
	for (int i = 0; i < 10; i++)
		sample_points[i].bp_cpu_window_s = 10.0;

	sample_points[4].bp_failed = 3;
	bench_run_finish(&run);
	text = report_to_string(&run);
	CHECK(text != NULL && strstr(text, "Result: INVALID (3 failed, 0 unanswered") != NULL);
	mem_free(text);

	/* Another workload: no SPECsfs2008 headline. */
	run.br_workload = "varmail";
	text = report_to_string(&run);
	CHECK(text != NULL && strstr(text, "SPECsfs2008_nfs.v3-style =") == NULL &&
	      strstr(text, "shale bench varmail result") != NULL);
	mem_free(text);
}

/* ---- JSON ---- */

static const char nasty_label[] = "sh\"ale\\ \n\t\x01 <&> caf\xC3\xA9 \xFF\xFE end";

/* runs[0]: the sample run labelled nasty_label, its points in sample_points; runs[1]: the sample
 * run at scale labelled "ganesha", its points copied to second. Neither is finished. */
static void fill_two_runs(struct bench_run *runs, struct bench_point second[10], double scale)
{
	fill_sample_run(&runs[1], "ganesha", scale);
	memcpy(second, sample_points, 10 * sizeof(*second));
	runs[1].br_points = second;
	fill_sample_run(&runs[0], nasty_label, 1.0);
}

static void test_report_json(void)
{
	struct bench_run runs[2];
	struct bench_point second[10];
	fill_two_runs(runs, second, 0.5);
	sample_points[2].bp_mean_ms = NAN;
	sample_points[3].bp_p99_ms = INFINITY;
	runs[0].br_figures[1].bf_value = -INFINITY;
	runs[0].br_fileset = NULL;
	bench_run_finish(&runs[0]);
	bench_run_finish(&runs[1]);

	char path[256], peak[64], nvalue[64];
	tmp_path(path, sizeof(path), "run.json");
	CHECK(bench_report_json(path, runs, 2) == 0);
	snprintf(peak, sizeof(peak), "%.10g", runs[0].br_peak_ops);
	snprintf(nvalue, sizeof(nvalue), "%llu", (unsigned long long)sample_points[9].bp_ops);
	static const char script[] =
		"import json,sys\n"
		"d=json.load(open(sys.argv[1],encoding='utf-8'))\n"
		"r=d['runs']\n"
		"assert d['format']=='shale-bench/1' and len(r)==2, 'shape'\n"
		"assert r[0]['label']=='sh\"ale\\\\ \\n\\t\\x01 <&> caf\\u00e9 \\ufffd\\ufffd end', "
		"repr(r[0]['label'])\n"
		"assert r[1]['label']=='ganesha'\n"
		"assert abs(r[0]['peak_ops']-float(sys.argv[2]))<1e-6, 'peak'\n"
		"assert r[0]['fileset'] is None\n"
		"assert r[0]['points'][2]['mean_ms'] is None and r[0]['points'][3]['p99_ms'] is None\n"
		"assert r[0]['points'][2]['mean_sent_ms']==0.4 and r[0]['points'][9]['mean_sent_ms']==4.25\n"
		"assert abs(r[0]['points'][9]['mean_ms']-11.54)<1e-9, r[0]['points'][9]\n"
		"assert r[0]['figures'][1]['value'] is None and r[0]['figures'][0]['unit']=='MB/s'\n"
		"assert r[0]['points'][9]['ops']==int(sys.argv[3])\n"
		"assert [p['name'] for p in r[0]['points'][0]['procs']]=="
		"['GETATTR','LOOKUP','READ','ACCESS','WRITE']\n"
		"assert [p['response_mean_ms'] for p in r[0]['points'][0]['procs']]=="
		"[0.125,0.25,0.375,0.5,0.625]\n"
		"assert r[0]['points'][0]['procs'][4]['response_p99_ms']==2.5\n"
		"assert r[0]['server_peak_rss_kib']==20480 and r[0]['valid'] is True\n"
		"p=r[0]['points'][3]\n"
		"assert p['cpu_window_s']==10 and abs(p['server_busy_pct']-20)<1e-9 and "
		"abs(p['load_busy_pct']-8)<1e-9 and abs(p['client_spin_s']-0.2)<1e-12, p\n"
		"assert 'comparison' not in d\n";
	const char *args[] = { path, peak, nvalue };
	CHECK(run_python(script, args, 3));

	/* With a comparison. */
	struct bench_ratio ratios[8];
	size_t n = bench_compare(&runs[0], &runs[1], 1, ratios, SH_ARRAY_SIZE(ratios));
	CHECK(n >= 3);
	CHECK(bench_report_json_vs(path, runs, 2, nasty_label, "ganesha", ratios, n) == 0);
	static const char script_vs[] =
		"import json,sys\n"
		"d=json.load(open(sys.argv[1],encoding='utf-8'))\n"
		"c=d['comparison']\n"
		"assert c['b']=='ganesha'\n"
		"x=[q for q in c['ratios'] if q['name']=='peak throughput'][0]\n"
		"assert abs(x['median']-2.0)<1e-9 and x['rounds']==1 and x['lower_is_better'] is False\n";
	const char *args_vs[] = { path };
	CHECK(run_python(script_vs, args_vs, 1));

	/* A path that cannot be written: an error, not a crash. */
	CHECK(bench_report_json("/nonexistent-dir/x.json", runs, 2) == -ENOENT);
	/* The checker really fails on broken JSON. */
	CHECK(write_text(path, "{\"runs\":[1,]}"));
	CHECK(python_rejects(JSON_PARSES, args_vs, 1));
}

/* ---- SVG ---- */

static void test_report_svg(void)
{
	struct bench_run runs[3];
	struct bench_point second[10];
	fill_two_runs(runs, second, 1.6); /* 15,968 ops/s at the peak */
	bench_run_finish(&runs[0]);
	bench_run_finish(&runs[1]);
	memset(&runs[2], 0, sizeof(runs[2])); /* a run with no points: legend only */
	runs[2].br_label = "empty";

	static const char script[] =
		SVG_ROOT
		"assert root.tag==ns+'svg', root.tag\n"
		"lines=root.findall('.//'+ns+'polyline')\n"
		"assert len(lines)==2, len(lines)\n"
		"assert all(len(l.get('points').split())==10 for l in lines)\n"
		"assert len({l.get('stroke') for l in lines})==2, 'colours'\n"
		SVG_TEXTS
		"assert 'Throughput (ops/sec)' in texts and 'Response time (msec)' in texts\n"
		"assert any(t.startswith('sh\"ale') and 'ORT' in t and 'peak' in t for t in texts)\n"
		"assert any('ganesha: peak' in t for t in texts)\n"
		"assert any(t=='empty (no data)' for t in texts)\n"
		"assert sum(1 for t in texts if t.replace(',','').strip().isdigit())>=8, 'ticks'\n"
		"assert '10,000' in texts, 'grouped x ticks'\n";
	check_report(REPORT_SVG, runs, 3, script, "three runs");

	/* No runs at all: still a well-formed picture with axes. */
	check_report(REPORT_SVG, runs, 0, XML_PARSES, "no runs");
	/* The checker really fails on broken XML. */
	char path[256];
	tmp_path(path, sizeof(path), "curve.svg");
	const char *args[] = { path };
	CHECK(write_text(path, "<svg><text>a & b</text></svg>"));
	CHECK(python_rejects(XML_PARSES, args, 1));
}

/* ---- valid points: the saturation rule ---- */

static void test_point_valid(void)
{
	struct bench_point p;
	memset(&p, 0, sizeof(p));
	/* Closed loop (nothing requested): valid whenever the throughput is a number >= 0. */
	p.bp_achieved_ops = 123;
	CHECK(bench_point_valid(&p, 0.95));
	p.bp_achieved_ops = NAN;
	CHECK(!bench_point_valid(&p, 0.95));
	p.bp_achieved_ops = -1;
	CHECK(!bench_point_valid(&p, 0.95));
	/* Open loop: at least the fraction of the requested rate. */
	p.bp_requested_ops = 10000;
	p.bp_achieved_ops = 9500;
	CHECK(bench_point_valid(&p, 0.95));
	p.bp_achieved_ops = 9499;
	CHECK(!bench_point_valid(&p, 0.95));
	CHECK(bench_point_valid(&p, 0.9));
	/* More than requested (a tick's rounding) is valid. */
	p.bp_achieved_ops = 10090;
	CHECK(bench_point_valid(&p, 0.95));
	/* 0 or a non-number means the default, 95%. */
	p.bp_achieved_ops = 9499;
	CHECK(!bench_point_valid(&p, 0.0) && !bench_point_valid(&p, NAN));
	p.bp_achieved_ops = 9500;
	CHECK(bench_point_valid(&p, 0.0) && bench_point_valid(&p, NAN));
}

/* Two curves measured with shale bench (make bench, shale and ganesha, one round): past the
 * server's capacity the backlog grows, the mean response time reaches seconds and throughput
 * falls from point to point, which made SPECsfs2008's load-order ORT negative (-38.17 ms and
 * -1924.19 ms). */
static const double sat_req[10] = { 6000, 12000, 18000, 24000, 30000,
				     36000, 42000, 48000, 54000, 60000 };
static const double sat_shale_ops[10] = { 6000, 12000, 17996, 23997, 29991,
					   36002, 39315, 44920, 42919, 42163 };
static const double sat_shale_ms[10] = { 0.19, 0.28, 0.48, 0.45, 1.30,
					 1.81, 285.67, 1052.51, 2678.13, 3219.30 };
static const double sat_ganesha_ops[10] = { 6000, 12000, 18000, 24215, 21776,
					    26769, 24927, 27346, 22097, 17966 };
static const double sat_ganesha_ms[10] = { 1.59, 0.50, 2.93, 177.10, 2091.08,
					   4039.24, 4618.64, 5708.51, 7626.77, 9443.71 };

static void fill_points(struct bench_point *pts, const double *req, const double *ops,
			const double *ms, size_t n)
{
	memset(pts, 0, sizeof(*pts) * n);
	for (size_t i = 0; i < n; i++) {
		pts[i].bp_requested_ops = req[i];
		pts[i].bp_achieved_ops = ops[i];
		pts[i].bp_mean_sent_ms = ms[i];
		pts[i].bp_mean_ms = ms[i] + 250.0; /* queued: must not change the ORT */
		pts[i].bp_p99_ms = 2 * pts[i].bp_mean_ms;
		pts[i].bp_seconds = 15;
		pts[i].bp_ops = (uint64_t)(ops[i] * 15);
	}
}

/* A finished sfs2008 run of the n points pts, with nothing else measured. */
static void run_of_points(struct bench_run *run, const char *label, struct bench_point *pts,
			  size_t n)
{
	memset(run, 0, sizeof(*run));
	run->br_workload = "sfs2008";
	run->br_label = label;
	run->br_points = pts;
	run->br_npoints = n;
	bench_run_finish(run);
}

static void test_saturated_points(void)
{
	struct bench_point pts[10];
	fill_points(pts, sat_req, sat_shale_ops, sat_shale_ms, 10);
	/* 39,315 of 42,000 (93.6%) is the first saturated point: the peak is 36,002 ops/s, and the
	 * ORT is the area through the six valid points: 21,640.8 / 36,002. */
	CHECK(bench_peak_index(pts, 10, 0.95) == 5);
	double ort = bench_ort_ms(pts, 10, 0.95);
	CHECKF(close_rel(ort, 21640.8 / 36002.0, 1e-9), "shale ORT %.6f", ort);
	CHECK(ort > 0.0);
	/* A looser threshold lets 93.6% in: peak 44,920 at point 8, ORT through point 8. */
	CHECK(bench_peak_index(pts, 10, 0.9) == 7);
	double area = 21640.8 + (39315.0 - 36002.0) * (285.67 + 1.81) / 2.0 +
		      (44920.0 - 39315.0) * (1052.51 + 285.67) / 2.0;
	CHECK(close_rel(bench_ort_ms(pts, 10, 0.9), area / 44920.0, 1e-9));

	fill_points(pts, sat_req, sat_ganesha_ops, sat_ganesha_ms, 10);
	/* 24,215 of 24,000 is valid and the peak; everything after is saturated. */
	CHECK(bench_peak_index(pts, 10, 0.95) == 3);
	CHECK(close_rel(bench_ort_ms(pts, 10, 0.95), 580773.225 / 24215.0, 1e-9));

	struct bench_run run;
	run_of_points(&run, "ganesha", pts, 10); /* br_valid_fraction 0: the default */
	CHECK(run.br_nvalid == 4 && run.br_peak_index == 3 && run.br_peak_ops == 24215.0);
	CHECK(close_rel(run.br_ort_ms, 580773.225 / 24215.0, 1e-9));
	run.br_valid_fraction = 0.5; /* 26,769 of 36,000, 24,927 of 42,000, 27,346 of 48,000 in */
	bench_run_finish(&run);
	CHECK(run.br_nvalid == 8 && run.br_peak_index == 7 && run.br_peak_ops == 27346.0);
	run.br_valid_fraction = 0.95;
	bench_run_finish(&run);

	/* The text report keeps every point, marks the saturated ones, and names the peak. */
	char *text = report_to_string(&run);
	CHECK(text != NULL);
	if (text != NULL) {
		CHECK(strstr(text, "SPECsfs2008_nfs.v3-style = 24215 Ops/Sec (Overall Response "
				   "Time = 23.98 msec)") != NULL);
		char line[160];
		snprintf(line, sizeof(line), "%16.0f%16.2f%12.0f", 26769.0, 4039.24, 36000.0);
		CHECKF(strstr(text, line) != NULL, "saturated point missing: %s", line);
		size_t marks = 0;
		for (const char *q = text; (q = strstr(q, "  saturated (")) != NULL; q++)
			marks++;
		CHECKF(marks == 6, "%zu points marked saturated", marks);
		CHECK(strstr(text, "saturated (74% of requested)") != NULL);
		CHECK(strstr(text, "Valid load points                 4 of 10") != NULL);
		CHECK(strstr(text, "peak point (point 4 of 10, 24215 ops/sec)") != NULL);
		mem_free(text);
	}

	/* JSON: each point says whether it is valid; peak and ORT are the valid ones'. */
	check_report(REPORT_JSON, &run, 1,
		     "import json,sys\n"
		     "r=json.load(open(sys.argv[1]))['runs'][0]\n"
		     "assert [p['valid'] for p in r['points']]==[True]*4+[False]*6, r['points']\n"
		     "assert r['peak_ops']==24215 and r['peak_point']==4 and r['valid_points']==4\n"
		     "assert abs(r['ort_ms']-580773.225/24215)<1e-6 and r['valid_fraction']==0.95\n",
		     "saturated");

	/* SVG: saturated points are not drawn, and the legend says so. */
	check_report(REPORT_SVG, &run, 1,
		     SVG_ROOT
		     "lines=root.findall('.//'+ns+'polyline')\n"
		     "assert len(lines)==1 and len(lines[0].get('points').split())==4\n"
		     SVG_TEXTS
		     "assert any('6 saturated points not drawn' in t for t in texts), texts\n"
		     "assert '200' in texts and '5000' not in texts, 'axis scaled to the valid points'\n",
		     "saturated");
}

static void test_no_valid_point(void)
{
	struct bench_point pts[3];
	static const double req[3] = { 20000, 40000, 60000 };
	static const double ops[3] = { 18000, 18500, 17000 }; /* 90%, 46%, 28% */
	static const double ms[3] = { 400, 2000, 4000 };
	fill_points(pts, req, ops, ms, 3);
	CHECK(bench_peak_index(pts, 3, 0.95) == SIZE_MAX);
	CHECK(isnan(bench_ort_ms(pts, 3, 0.95)));
	struct bench_run run;
	run_of_points(&run, "slow", pts, 3);
	CHECK(run.br_nvalid == 0 && run.br_peak_index == SIZE_MAX);
	CHECK(isnan(run.br_peak_ops) && isnan(run.br_ort_ms));
	CHECK(run.br_client_cpu_us_per_op == 0.0 && run.br_failed == 0);

	char *text = report_to_string(&run);
	CHECK(text != NULL);
	if (text != NULL) {
		CHECK(strstr(text, "SPECsfs2008_nfs.v3-style = not available (no load point achieved "
				   "its requested rate)") != NULL);
		CHECK(strstr(text, "Peak throughput         not available") != NULL);
		CHECK(strstr(text, "Overall response time   not available") != NULL);
		CHECK(strstr(text, "No load point achieved 95% of its requested rate") != NULL);
		CHECK(strstr(text, "busiest (not valid) point (point 2 of 3, 18500 ops/sec)") != NULL);
		/* printf's spelling of a non-number, after its padding ("Unanswered" has "nan"). */
		const char *bad = strstr(text, " nan") != NULL	 ? strstr(text, " nan")
				  : strstr(text, "-nan") != NULL ? strstr(text, "-nan")
								 : strstr(text, " inf");
		CHECKF(bad == NULL, "a non-number printed: %.40s", bad);
		mem_free(text);
	}
	check_report(REPORT_JSON, &run, 1,
		     "import json,sys\n"
		     "r=json.load(open(sys.argv[1]))['runs'][0]\n"
		     "assert r['peak_ops'] is None and r['ort_ms'] is None\n"
		     "assert r['peak_point'] is None and r['valid_points']==0\n"
		     "assert not any(p['valid'] for p in r['points'])\n",
		     "no valid point");
	check_report(REPORT_SVG, &run, 1,
		     SVG_ROOT
		     "assert not root.findall('.//'+ns+'polyline')\n"
		     SVG_TEXTS
		     "assert any('no valid point' in t and '3 saturated' in t for t in texts)\n",
		     "no valid point");

	/* A comparison leaves the round without a peak out of the peak and ORT ratios. */
	struct bench_run a[2], b[2];
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	for (int r = 0; r < 2; r++) {
		a[r].br_peak_ops = 300;
		a[r].br_ort_ms = 1.0;
		b[r].br_peak_ops = r == 0 ? NAN : 100;
		b[r].br_ort_ms = r == 0 ? NAN : 2.0;
	}
	struct bench_ratio out[8];
	size_t n = bench_compare(a, b, 2, out, SH_ARRAY_SIZE(out));
	CHECK(n == 2);
	CHECK(n == 2 && out[0].brt_rounds == 1 && out[0].brt_median == 3.0);
	CHECK(n == 2 && out[1].brt_rounds == 1 && out[1].brt_median == 0.5);
}

/* ---- --vs ---- */

static void test_compare(void)
{
	enum { R = 4 };
	struct bench_run a[R], b[R];
	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	static const double a_peak[R] = { 210, 190, 200, 205 };
	static const double b_peak[R] = { 100, 100, 100, 100 };
	for (int r = 0; r < R; r++) {
		a[r].br_workload = b[r].br_workload = "seq";
		a[r].br_peak_ops = a_peak[r];
		b[r].br_peak_ops = b_peak[r];
		a[r].br_ort_ms = 0.5;
		b[r].br_ort_ms = 1.0;
		/* Server CPU known for A only in round 0, for B everywhere: one round. */
		a[r].br_server_cpu_us_per_op = r == 0 ? 30.0 : 0.0;
		b[r].br_server_cpu_us_per_op = 60.0;
		/* RSS unknown for B: no ratio at all. */
		a[r].br_server_peak_rss_kib = 1000;
		a[r].br_nfigures = 3;
		a[r].br_figures[0] = (struct bench_figure){ "read", 900.0 + r, "MB/s" };
		a[r].br_figures[1] = (struct bench_figure){ "write latency", 2.0, "ms" };
		a[r].br_figures[2] = (struct bench_figure){ "only in A", 1.0, "x" };
		b[r].br_nfigures = 2;
		b[r].br_figures[0] = (struct bench_figure){ "write latency", 4.0, "ms" };
		b[r].br_figures[1] = (struct bench_figure){ "read", r == 2 ? 0.0 : 450.0, "MB/s" };
	}
	struct bench_ratio out[16];
	size_t n = bench_compare(a, b, R, out, SH_ARRAY_SIZE(out));
	CHECK(n == 5);
	const struct bench_ratio *peak = NULL, *ort = NULL, *cpu = NULL, *rd = NULL, *wl = NULL;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(out[i].brt_name, "peak throughput") == 0)
			peak = &out[i];
		else if (strcmp(out[i].brt_name, "overall response time") == 0)
			ort = &out[i];
		else if (strcmp(out[i].brt_name, "server CPU per op") == 0)
			cpu = &out[i];
		else if (strcmp(out[i].brt_name, "read") == 0)
			rd = &out[i];
		else if (strcmp(out[i].brt_name, "write latency") == 0)
			wl = &out[i];
		CHECK(strcmp(out[i].brt_name, "server peak RSS") != 0);
		CHECK(strcmp(out[i].brt_name, "only in A") != 0);
	}
	CHECK(peak != NULL && ort != NULL && cpu != NULL && rd != NULL && wl != NULL);
	if (peak == NULL || ort == NULL || cpu == NULL || rd == NULL || wl == NULL)
		return;
	/* Ratios 2.1 1.9 2.0 2.05: even count, median of the middle two. */
	CHECK(close_rel(peak->brt_median, (2.0 + 2.05) / 2.0, 1e-12));
	CHECK(close_rel(peak->brt_min, 1.9, 1e-12) && close_rel(peak->brt_max, 2.1, 1e-12));
	CHECK(close_rel(peak->brt_a_median, 202.5, 1e-12) && peak->brt_b_median == 100.0);
	CHECK(peak->brt_rounds == 4 && !peak->brt_lower_is_better);
	CHECK(strcmp(peak->brt_unit, "ops/s") == 0);
	CHECK(ort->brt_median == 0.5 && ort->brt_lower_is_better);
	CHECK(cpu->brt_rounds == 1 && cpu->brt_median == 0.5);
	/* The round where B's read is 0 is left out: ratios (900 901 903)/450. */
	CHECK(rd->brt_rounds == 3);
	CHECK(close_rel(rd->brt_median, 901.0 / 450.0, 1e-12));
	CHECK(close_rel(rd->brt_min, 900.0 / 450.0, 1e-12) &&
	      close_rel(rd->brt_max, 903.0 / 450.0, 1e-12));
	CHECK(wl->brt_median == 0.5 && wl->brt_lower_is_better);
	/* max bounds what is written. */
	CHECK(bench_compare(a, b, R, out, 2) == 2);
	CHECK(bench_compare(a, b, 0, out, 16) == 0);

	char path[256];
	tmp_path(path, sizeof(path), "compare.txt");
	n = bench_compare(a, b, R, out, SH_ARRAY_SIZE(out));
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f == NULL)
		return;
	bench_report_compare(f, "shale", "ganesha", out, n);
	fclose(f);
	char *text = slurp(path);
	CHECK(text != NULL);
	if (text == NULL)
		return;
	CHECK(strstr(text, "A = shale, B = ganesha") != NULL);
	CHECK(strstr(text, "peak throughput (ops/s)") != NULL);
	char row[128];
	snprintf(row, sizeof(row), "%15.2f%15.2f%11.2f  %6.2f -%6.2f %6d", 202.5, 100.0, 2.025, 1.9,
		 2.1, 4);
	CHECKF(strstr(text, row) != NULL, "row '%s' missing", row);
	CHECK(strstr(text, "(lower is better)") != NULL);
	mem_free(text);
}

int main(void)
{
	if (mkdtemp(tmpdir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	TAP_RUN(test_hist_small_values_exact);
	TAP_RUN(test_hist_empty);
	TAP_RUN(test_hist_percentiles_vs_sorted);
	TAP_RUN(test_hist_merge_and_extremes);
	test_ort_published_results();
	TAP_RUN(test_ort_by_hand);
	TAP_RUN(test_run_finish);
	TAP_RUN(test_report_text);
	TAP_RUN(test_report_json);
	TAP_RUN(test_report_svg);
	TAP_RUN(test_compare);
	TAP_RUN(test_point_valid);
	TAP_RUN(test_saturated_points);
	TAP_RUN(test_no_valid_point);

	static const char *const files[] = { "report.txt", "run.json", "curve.svg", "compare.txt" };
	for (size_t i = 0; i < SH_ARRAY_SIZE(files); i++) {
		char path[256];
		tmp_path(path, sizeof(path), files[i]);
		unlink(path);
	}
	rmdir(tmpdir);
	return tap_finish();
}
