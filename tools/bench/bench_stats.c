/* bench_stats.c: latency histograms, the overall response time, and the text, JSON and SVG
 * reports of `shale bench`, plus the A/B ratios of a --vs comparison.
 *
 * Theory. A load thread owns one struct bench_hist per procedure and records into it without
 * locks; at the end of a load point the driver merges the histograms, turns them into a
 * struct bench_point, and hands the points of a run to this file, which never sees a thread.
 *
 * 1. Histogram. Log-linear buckets (layout in bench_stats.h): recording is a count-leading-zeros,
 *    a shift and an add; the relative error of any percentile is bounded (1/128 with the midpoint
 *    reported) whatever the range, 1 ns to 584 years, so no bounds have to be guessed up front.
 *    Counts are 32-bit per bucket: 4 billion operations of one latency in one point is more than a
 *    load point can issue.
 * 2. Valid points. An open-loop load point is VALID when it achieved at least 95% of its requested
 *    rate (BENCH_VALID_FRACTION_DEFAULT; `shale bench --valid-pct P` changes it). Past the
 *    server's capacity the generator keeps asking for the requested rate, the backlog grows for
 *    the whole point, and the mean latency from the intended start measures how long the run
 *    lasted rather than the server (seconds, not milliseconds); throughput may also fall from one such point to the
 *    next. SPECsfs2008 published only points at which the server delivered the requested load,
 *    and this is the same rule made explicit. Closed-loop points (no requested rate) are always
 *    valid. Invalid points are still reported: marked "saturated" in the text table, "valid":
 *    false in JSON, and not drawn in the SVG (whose legend counts them).
 * 3. Peak and overall response time (SPECsfs2008 run rules), over the valid points only: the peak
 *    is the valid point with the highest achieved throughput; the response-time curve starts at
 *    (0,0) and joins each valid point (achieved ops/s, mean response ms) in load order up to and
 *    including the peak; its area by the trapezoid rule, divided by the peak throughput, is the
 *    ORT in ms. It weights the response time at every load level, not only at the peak. The
 *    response time is SPECsfs2008's: from the moment a call was sent to its reply
 *    (bp_mean_sent_ms), which Little's law bounds by calls in flight / throughput. The latency
 *    from the intended start (bp_mean_ms, bp_p99_ms) also counts the client's backlog; near
 *    saturation that adds hundreds of ms, which would make the ORT of servers whose curves end
 *    at different loads incomparable, so it is reported beside the curve ("queued") but does
 *    not enter it. With no
 *    valid point there is no peak and no ORT: both are NAN, "not available" in text and null in
 *    JSON, and the ratios of a comparison leave that round out.
 * 4. Reports are written in one pass over the records; strings are escaped for JSON or XML and
 *    bytes that are not UTF-8 become U+FFFD (see text_put). Numbers that are unknown (0 by the
 *    records' convention where noted) or not finite are null in JSON and "-" in text.
 * 5. --vs: each figure's A/B ratio is taken per round (A and B measured back to back), and the
 *    median and range of those ratios are reported, so a drift of the machine between rounds
 *    widens the range instead of biasing the median.
 */
#include "bench_stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HIST_SUB ((uint64_t)1 << BENCH_HIST_SUB_BITS) /* sub-buckets per power of two */

/* ---- histogram ---- */

static inline unsigned hist_index(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v); /* >= BENCH_HIST_SUB_BITS */
	unsigned shift = msb - BENCH_HIST_SUB_BITS;
	return ((shift + 1u) << BENCH_HIST_SUB_BITS) + (unsigned)((v >> shift) - HIST_SUB);
}

/* Lowest value of bucket idx, and its width; both in ns. */
static void hist_bucket_range(unsigned idx, uint64_t *low_out, uint64_t *width_out)
{
	if (idx < HIST_SUB) {
		*low_out = idx;
		*width_out = 1;
		return;
	}
	unsigned shift = (idx >> BENCH_HIST_SUB_BITS) - 1u;
	uint64_t sub = idx & (HIST_SUB - 1);
	*low_out = (HIST_SUB + sub) << shift;
	*width_out = (uint64_t)1 << shift;
}

void bench_hist_reset(struct bench_hist *hist)
{
	memset(hist, 0, sizeof(*hist));
}

void bench_hist_record(struct bench_hist *hist, uint64_t latency_ns)
{
	unsigned idx = hist_index(latency_ns);
	ASSERT(idx < BENCH_HIST_BUCKETS);
	hist->bh_buckets[idx]++;
	hist->bh_count++;
	hist->bh_sum_ns += latency_ns;
	if (latency_ns > hist->bh_max_ns)
		hist->bh_max_ns = latency_ns;
}

void bench_hist_merge(struct bench_hist *into, const struct bench_hist *from)
{
	for (size_t i = 0; i < BENCH_HIST_BUCKETS; i++)
		into->bh_buckets[i] += from->bh_buckets[i];
	into->bh_count += from->bh_count;
	into->bh_sum_ns += from->bh_sum_ns;
	if (from->bh_max_ns > into->bh_max_ns)
		into->bh_max_ns = from->bh_max_ns;
}

double bench_hist_mean_ms(const struct bench_hist *hist)
{
	if (hist->bh_count == 0)
		return 0.0;
	return (double)hist->bh_sum_ns / (double)hist->bh_count / 1e6;
}

double bench_hist_percentile_ms(const struct bench_hist *hist, double pct)
{
	if (hist->bh_count == 0)
		return 0.0;
	if (!(pct >= 0.0)) /* also catches NaN */
		pct = 0.0;
	if (pct > 100.0)
		pct = 100.0;
	double want = ceil(pct / 100.0 * (double)hist->bh_count);
	uint64_t rank = want < 1.0 ? 1 : (uint64_t)want;
	if (rank >= hist->bh_count)
		return (double)hist->bh_max_ns / 1e6; /* the largest record is known exactly */
	uint64_t seen = 0;
	for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
		seen += hist->bh_buckets[i];
		if (seen >= rank) {
			uint64_t low, width;
			hist_bucket_range(i, &low, &width);
			uint64_t mid = low + (width - 1) / 2;
			if (mid > hist->bh_max_ns)
				mid = hist->bh_max_ns;
			return (double)mid / 1e6;
		}
	}
	/* Bucket counts disagree with bh_count (a histogram filled by hand): the maximum is the best
	 * answer left. */
	return (double)hist->bh_max_ns / 1e6;
}

/* ---- ORT and run summary ---- */

static bool usable(double v)
{
	return isfinite(v) && v >= 0.0;
}

static double valid_fraction(double min_fraction)
{
	return isfinite(min_fraction) && min_fraction > 0.0 ? min_fraction
							    : BENCH_VALID_FRACTION_DEFAULT;
}

bool bench_point_valid(const struct bench_point *p, double min_fraction)
{
	if (!usable(p->bp_achieved_ops))
		return false;
	if (!(p->bp_requested_ops > 0.0))
		return true; /* closed loop: nothing was asked for */
	return p->bp_achieved_ops >= valid_fraction(min_fraction) * p->bp_requested_ops;
}

size_t bench_peak_index(const struct bench_point *points, size_t npoints, double min_fraction)
{
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < npoints; i++)
		if (bench_point_valid(&points[i], min_fraction) &&
		    (best == SIZE_MAX || points[i].bp_achieved_ops > points[best].bp_achieved_ops))
			best = i;
	return best;
}

double bench_ort_ms(const struct bench_point *points, size_t npoints, double min_fraction)
{
	size_t pk = bench_peak_index(points, npoints, min_fraction);
	if (pk == SIZE_MAX || !(points[pk].bp_achieved_ops > 0.0))
		return NAN;
	double area = 0.0, prev_x = 0.0, prev_y = 0.0;
	for (size_t i = 0; i <= pk; i++) {
		double x = points[i].bp_achieved_ops, y = points[i].bp_mean_sent_ms;
		if (!bench_point_valid(&points[i], min_fraction) || !usable(y))
			continue;
		area += (x - prev_x) * (y + prev_y) / 2.0;
		prev_x = x;
		prev_y = y;
	}
	return area / points[pk].bp_achieved_ops;
}

void bench_run_finish(struct bench_run *run)
{
	double server_cpu = 0.0, client_cpu = 0.0, ops = 0.0;
	uint64_t failed = 0, unanswered = 0;
	size_t nvalid = 0;
	for (size_t i = 0; i < run->br_npoints; i++) {
		const struct bench_point *p = &run->br_points[i];
		if (bench_point_valid(p, run->br_valid_fraction))
			nvalid++;
		if (usable(p->bp_server_cpu_s))
			server_cpu += p->bp_server_cpu_s;
		if (usable(p->bp_client_cpu_s))
			client_cpu += p->bp_client_cpu_s;
		ops += (double)p->bp_ops;
		failed += p->bp_failed;
		unanswered += p->bp_unanswered;
	}
	run->br_nvalid = nvalid;
	run->br_peak_index = bench_peak_index(run->br_points, run->br_npoints, run->br_valid_fraction);
	run->br_peak_ops = run->br_peak_index != SIZE_MAX
				   ? run->br_points[run->br_peak_index].bp_achieved_ops
				   : NAN;
	run->br_ort_ms = bench_ort_ms(run->br_points, run->br_npoints, run->br_valid_fraction);
	run->br_server_cpu_us_per_op = ops > 0.0 ? server_cpu * 1e6 / ops : 0.0;
	run->br_client_cpu_us_per_op = ops > 0.0 ? client_cpu * 1e6 / ops : 0.0;
	run->br_failed = failed;
	run->br_unanswered = unanswered;
}

/* ---- escaping ---- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one; *cp_out
 * gets the code point. Overlong forms, surrogates and values past U+10FFFF are invalid. */
static size_t utf8_sequence(const unsigned char *s, uint32_t *cp_out)
{
	unsigned char c = s[0];
	if (c < 0x80) {
		*cp_out = c;
		return 1;
	}
	size_t len;
	uint32_t cp;
	unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
		cp = c & 0x1Fu;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		cp = c & 0x0Fu;
		if (c == 0xE0)
			lo = 0xA0;
		if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		cp = c & 0x07u;
		if (c == 0xF0)
			lo = 0x90;
		if (c == 0xF4)
			hi = 0x8F;
	} else {
		return 0;
	}
	for (size_t i = 1; i < len; i++) {
		unsigned char b = s[i]; /* a NUL here stops the loop: it is not a continuation byte */
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
			return 0;
		cp = (cp << 6) | (b & 0x3Fu);
	}
	*cp_out = cp;
	return len;
}

enum text_mode { TEXT_PLAIN, TEXT_JSON, TEXT_XML };

#define REPLACEMENT_CHAR "\xEF\xBF\xBD" /* U+FFFD in UTF-8 */

/* Writes s escaped for mode (without quotes). NULL writes nothing. */
static void text_put(FILE *out, const char *s, enum text_mode mode)
{
	if (s == NULL)
		return;
	const unsigned char *p = (const unsigned char *)s;
	while (*p != '\0') {
		uint32_t cp;
		size_t len = utf8_sequence(p, &cp);
		if (len == 0) {
			fputs(REPLACEMENT_CHAR, out);
			p++;
			continue;
		}
		if (mode == TEXT_JSON && (cp < 0x20 || cp == '"' || cp == '\\')) {
			switch (cp) {
			case '"': fputs("\\\"", out); break;
			case '\\': fputs("\\\\", out); break;
			case '\n': fputs("\\n", out); break;
			case '\r': fputs("\\r", out); break;
			case '\t': fputs("\\t", out); break;
			default: fprintf(out, "\\u%04x", (unsigned)cp); break;
			}
		} else if (mode == TEXT_XML) {
			switch (cp) {
			case '&': fputs("&amp;", out); break;
			case '<': fputs("&lt;", out); break;
			case '>': fputs("&gt;", out); break;
			case '"': fputs("&quot;", out); break;
			case '\'': fputs("&#39;", out); break;
			default:
				/* XML 1.0 allows no other C0 control and not U+FFFE/U+FFFF. */
				if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
				    cp == 0xFFFE || cp == 0xFFFF)
					fputs(REPLACEMENT_CHAR, out);
				else
					fwrite(p, 1, len, out);
				break;
			}
		} else if (mode == TEXT_PLAIN && cp < 0x20 && cp != '\t') {
			fputc('?', out); /* keep one report line one line */
		} else {
			fwrite(p, 1, len, out);
		}
		p += len;
	}
}

/* ---- output files ---- */

/* Opens path for writing ("-" is stdout). Returns 0 or -errno. */
static int out_open(const char *path, FILE **out)
{
	if (path == NULL)
		return -EINVAL;
	if (strcmp(path, "-") == 0) {
		*out = stdout;
		return 0;
	}
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return errno != 0 ? -errno : -EIO;
	*out = f;
	return 0;
}

/* Flushes and closes out (stdout is only flushed). Returns 0 or -errno; a write error anywhere
 * in the file's life is reported here. */
static int out_close(FILE *out)
{
	int rc = 0;
	errno = 0;
	if (fflush(out) != 0 || ferror(out))
		rc = errno != 0 ? -errno : -EIO;
	if (out != stdout && fclose(out) != 0 && rc == 0)
		rc = errno != 0 ? -errno : -EIO;
	return rc;
}

/* ---- text report ---- */

static const char *or_dash(const char *s)
{
	return s != NULL && s[0] != '\0' ? s : "-";
}

/* A number for a text column: "-" when not finite. */
static void text_num(FILE *out, int width, int decimals, double v)
{
	if (isfinite(v))
		fprintf(out, "%*.*f", width, decimals, v);
	else
		fprintf(out, "%*s", width, "-");
}

/* The point with the highest throughput, valid or not (0 when there are no points). */
static size_t highest_point_index(const struct bench_run *run)
{
	size_t best = 0;
	for (size_t i = 1; i < run->br_npoints; i++)
		if (usable(run->br_points[i].bp_achieved_ops) &&
		    !(run->br_points[i].bp_achieved_ops <= run->br_points[best].bp_achieved_ops))
			best = i;
	return best;
}

/* CPU seconds over a point's CPU window, as a percentage of one core; NAN when unknown (no
 * window, or a server CPU of 0, which means its pid was not given). The load generator's is
 * taken net of its idle polling (load_cpu_s). */
static double busy_pct(const struct bench_point *p, double cpu_s)
{
	if (!(p->bp_cpu_window_s > 0.0) || !(cpu_s > 0.0))
		return NAN;
	return 100.0 * cpu_s / p->bp_cpu_window_s;
}

/* Each point's busy server and load generator, so that a reader can tell which of the two
 * bounded it. */
static double load_cpu_s(const struct bench_point *p)
{
	return p->bp_client_cpu_s - p->bp_client_spin_s;
}

static void text_busy(FILE *out, const struct bench_run *run)
{
	bool any = false;
	for (size_t i = 0; i < run->br_npoints; i++)
		any = any || run->br_points[i].bp_cpu_window_s > 0.0;
	if (!any)
		return;
	fputs("\nCPU per point\n=============\n\n", out);
	fprintf(out, "%16s%14s%14s\n", "Throughput", "Server", "Load");
	fprintf(out, "%16s%14s%14s\n", "(ops/sec)", "(% of a core)", "(% of a core)");
	fprintf(out, "%16s%14s%14s\n", "--------------", "------------", "------------");
	for (size_t i = 0; i < run->br_npoints; i++) {
		const struct bench_point *p = &run->br_points[i];
		text_num(out, 16, 0, p->bp_achieved_ops);
		text_num(out, 14, 1, busy_pct(p, p->bp_server_cpu_s));
		text_num(out, 14, 1, busy_pct(p, load_cpu_s(p)));
		fputc('\n', out);
	}
	fputs("  CPU seconds (user and system, all threads) over each point's measured interval;\n"
	      "  the server's are counted in clock ticks (/proc/PID/stat), so a point shorter\n"
	      "  than a second may be off by a tick's share either way. The load generator's\n"
	      "  leave out its idle polling (--spin-us). Where it has one core and its column\n"
	      "  nears 100%, it, not only the server, bounded that point.\n",
	      out);
}

static const char RULE[] =
	"================================================================================\n";

void bench_report_text(FILE *out, const struct bench_run *run)
{
	bool sfs = run->br_workload != NULL && strcmp(run->br_workload, "sfs2008") == 0;
	bool valid = run->br_failed == 0 && run->br_unanswered == 0;

	/* Headline, as on a SPECsfs2008 result page, marked as this tool's own measurement. */
	if (sfs)
		fputs("SPECsfs2008_nfs.v3-style result (shale bench; not a SPEC-audited or "
		      "SPEC-reviewed result)\n",
		      out);
	else {
		fputs("shale bench ", out);
		text_put(out, or_dash(run->br_workload), TEXT_PLAIN);
		fputs(" result\n", out);
	}
	fputs(RULE, out);
	text_put(out, or_dash(run->br_label), TEXT_PLAIN);
	fputs(" : ", out);
	text_put(out, or_dash(run->br_server), TEXT_PLAIN);
	fputc(' ', out);
	text_put(out, or_dash(run->br_export), TEXT_PLAIN);
	fputc('\n', out);
	double frac = valid_fraction(run->br_valid_fraction);
	size_t pk = bench_peak_index(run->br_points, run->br_npoints, run->br_valid_fraction);
	bool have_peak = pk != SIZE_MAX && isfinite(run->br_peak_ops);
	if (have_peak && isfinite(run->br_ort_ms))
		fprintf(out, "%s = %.0f Ops/Sec (Overall Response Time = %.2f msec)\n",
			sfs ? "SPECsfs2008_nfs.v3-style" : "Peak throughput", run->br_peak_ops,
			run->br_ort_ms);
	else
		fprintf(out, "%s = not available (%s)\n",
			sfs ? "SPECsfs2008_nfs.v3-style" : "Peak throughput",
			run->br_npoints == 0 ? "no load points"
					     : "no load point achieved its requested rate");
	fputs(RULE, out);

	fputs("\nPerformance\n===========\n\n", out);
	/* Column widths: 16 16 12 13 13 12 12 (12), SPECsfs2008's two columns first. Response is
	 * from each call's send; the queued columns are from each op's intended start, backlog
	 * included; Durable, where the workload says which calls wait for stable storage. */
	bool durable = false;
	for (size_t i = 0; i < run->br_npoints; i++)
		durable = durable || isfinite(run->br_points[i].bp_durable_ms);
	fprintf(out, "%16s%16s%12s%13s%13s%12s%12s%s\n", "Throughput", "Response", "Requested",
		"Queued mean", "Queued p99", "Failed", "Unanswered", durable ? "     Durable" : "");
	fprintf(out, "%16s%16s%12s%13s%13s", "(ops/sec)", "(msec)", "(ops/sec)", "(msec)", "(msec)");
	fprintf(out, "%s\n", durable ? "                              (msec)" : "");
	fprintf(out, "%16s%16s%12s%13s%13s%12s%12s%s\n", "--------------", "--------------",
		"----------", "-----------", "-----------", "----------", "----------",
		durable ? "  ----------" : "");
	bool falls = false;
	double prev = 0.0;
	for (size_t i = 0; i < run->br_npoints; i++) {
		const struct bench_point *p = &run->br_points[i];
		text_num(out, 16, 0, p->bp_achieved_ops);
		text_num(out, 16, 2, p->bp_mean_sent_ms);
		if (p->bp_requested_ops > 0.0)
			text_num(out, 12, 0, p->bp_requested_ops);
		else
			fprintf(out, "%12s", "open");
		text_num(out, 13, 2, p->bp_mean_ms);
		text_num(out, 13, 2, p->bp_p99_ms);
		fprintf(out, " %11llu %11llu", (unsigned long long)p->bp_failed,
			(unsigned long long)p->bp_unanswered);
		if (durable)
			text_num(out, 12, 2, p->bp_durable_ms);
		if (!bench_point_valid(p, run->br_valid_fraction)) {
			if (usable(p->bp_achieved_ops) && p->bp_requested_ops > 0.0)
				fprintf(out, "  saturated (%.0f%% of requested)",
					100.0 * p->bp_achieved_ops / p->bp_requested_ops);
			else
				fputs("  not valid", out);
		} else if (i <= pk && usable(p->bp_mean_sent_ms)) {
			/* Only the points in the ORT's area matter for the note below. */
			if (p->bp_achieved_ops < prev)
				falls = true;
			prev = p->bp_achieved_ops;
		}
		fputc('\n', out);
	}
	if (run->br_npoints == 0)
		fputs("(no load points)\n", out);
	fputc('\n', out);
	if (have_peak)
		fprintf(out, "Peak throughput        %12.0f ops/sec\n", run->br_peak_ops);
	else
		fputs("Peak throughput         not available\n", out);
	if (have_peak && isfinite(run->br_ort_ms))
		fprintf(out, "Overall response time  %12.2f msec\n", run->br_ort_ms);
	else
		fputs("Overall response time   not available\n", out);
	size_t nvalid = 0;
	for (size_t i = 0; i < run->br_npoints; i++)
		if (bench_point_valid(&run->br_points[i], run->br_valid_fraction))
			nvalid++;
	fprintf(out, "Valid load points      %12zu of %zu", nvalid, run->br_npoints);
	fprintf(out, " (valid: achieved at least %.0f%% of the requested rate)\n", 100.0 * frac);
	if (!have_peak && run->br_npoints > 0)
		fprintf(out, "  No load point achieved %.0f%% of its requested rate: the server was\n"
			     "  saturated at every point, so there is no peak and no ORT to report.\n"
			     "  Run again with a lower --rate.\n",
			100.0 * frac);
	else
		fputs("  (area under the response-time curve from (0,0) through each valid point up\n"
		      "   to the peak, by the trapezoid rule, divided by the peak throughput, as\n"
		      "   SPECsfs2008 defines it; saturated points are shown but not counted)\n"
		      "  Response: from each call's send to its reply, as SPECsfs2008 measured it.\n"
		      "  Queued: from each operation's intended start, client backlog included.\n",
		      out);
	if (durable)
		fputs("  Durable: the response of the calls whose reply waits for stable storage\n"
		      "  (sfs2008: SETATTR, CREATE and REMOVE, and WRITE with --stable-writes).\n",
		      out);
	if (falls)
		fputs("  Note: throughput fell from one valid point to the next; the area is taken in\n"
		      "  load order, as SPECsfs2008 did.\n",
		      out);

	text_busy(out, run);

	fputs("\nConfiguration\n=============\n", out);
	fputs("Workload                  ", out);
	text_put(out, or_dash(run->br_workload), TEXT_PLAIN);
	fputs("\nServer under test         ", out);
	text_put(out, or_dash(run->br_label), TEXT_PLAIN);
	fputs(" at ", out);
	text_put(out, or_dash(run->br_server), TEXT_PLAIN);
	fputs("\nExport                    ", out);
	text_put(out, or_dash(run->br_export), TEXT_PLAIN);
	fputs("\nFile set                  ", out);
	text_put(out, or_dash(run->br_fileset), TEXT_PLAIN);
	if (run->br_load) {
		fputs("\nLoad points               ", out);
		text_put(out, run->br_load, TEXT_PLAIN);
	}
	if (run->br_before_run) {
		fputs("\nBefore the run            ", out);
		text_put(out, run->br_before_run, TEXT_PLAIN);
	}
	fprintf(out, "\nLoad processes            %u\n", run->br_processes);
	fprintf(out, "Connections per process   %u\n", run->br_connections);
	fprintf(out, "Outstanding per conn.     %u (biod)\n", run->br_depth);
	fprintf(out, "Warm-up per point         %.1f s\n", run->br_warmup_s);
	fprintf(out, "Run time per point        %.1f s\n", run->br_runtime_s);

	if (run->br_npoints > 0) {
		size_t shown = have_peak ? pk : highest_point_index(run);
		const struct bench_point *p = &run->br_points[shown];
		uint64_t total = 0;
		for (unsigned i = 0; i < p->bp_nprocs && i < BENCH_MAX_PROCS; i++)
			total += p->bp_procs[i].bpr_count;
		fprintf(out, "\nOperations at the %s point (point %zu of %zu, %.0f ops/sec)\n",
			have_peak ? "peak" : "busiest (not valid)", shown + 1, run->br_npoints,
			p->bp_achieved_ops);
		fputs("=============================================================\n", out);
		/* Column widths: 12, 1+11, 8, 11, 11, 13, 13, 12. */
		fprintf(out, "%-12s %11s%8s%11s%11s%13s%13s%12s\n", "Procedure", "Count", "%",
			"Resp. mean", "Resp. p99", "Queued mean", "Queued p99", "Failed");
		fprintf(out, "%-12s %11s%8s%11s%11s%13s%13s%12s\n", "------------", "-----------",
			"-------", "----------", "----------", "------------", "------------",
			"-----------");
		for (unsigned i = 0; i < p->bp_nprocs && i < BENCH_MAX_PROCS; i++) {
			const struct bench_proc_result *r = &p->bp_procs[i];
			fprintf(out, "%-12.12s %11llu", or_dash(r->bpr_name),
				(unsigned long long)r->bpr_count);
			text_num(out, 8, 1,
				 total > 0 ? 100.0 * (double)r->bpr_count / (double)total : 0.0);
			text_num(out, 11, 3, r->bpr_resp_mean_ms);
			text_num(out, 11, 3, r->bpr_resp_p99_ms);
			text_num(out, 13, 3, r->bpr_mean_ms);
			text_num(out, 13, 3, r->bpr_p99_ms);
			fprintf(out, " %11llu\n", (unsigned long long)r->bpr_failed);
		}
		fprintf(out, "%-12s %11llu\n", "total", (unsigned long long)total);
	}

	fputs("\nResources\n=========\n", out);
	if (run->br_server_cpu_us_per_op > 0.0)
		fprintf(out, "Server CPU per op         %.2f usec\n", run->br_server_cpu_us_per_op);
	else
		fputs("Server CPU per op         not measured (server pid not given)\n", out);
	if (run->br_server_peak_rss_kib > 0)
		fprintf(out, "Server peak RSS           %.1f MiB (%llu KiB)\n",
			(double)run->br_server_peak_rss_kib / 1024.0,
			(unsigned long long)run->br_server_peak_rss_kib);
	else
		fputs("Server peak RSS           not measured (server pid not given)\n", out);
	bool polled = false;
	for (size_t i = 0; i < run->br_npoints; i++)
		polled = polled || run->br_points[i].bp_client_spin_s > 0.0;
	fprintf(out, "Client CPU per op         %.2f usec%s\n", run->br_client_cpu_us_per_op,
		polled ? " (its idle polling included; CPU per point leaves it out)" : "");

	if (run->br_nfigures > 0) {
		fputs("\nWorkload figures\n================\n", out);
		for (size_t i = 0; i < run->br_nfigures && i < BENCH_MAX_FIGURES; i++) {
			const struct bench_figure *f = &run->br_figures[i];
			fputs("  ", out);
			text_put(out, or_dash(f->bf_name), TEXT_PLAIN);
			fputs("  ", out);
			text_num(out, 0, f->bf_value == floor(f->bf_value) ? 0 : 3, f->bf_value);
			fputc(' ', out);
			text_put(out, f->bf_unit, TEXT_PLAIN);
			fputc('\n', out);
		}
	}

	fputc('\n', out);
	if (valid)
		fputs("Result: VALID (every operation answered, none failed)\n", out);
	else
		fprintf(out, "Result: INVALID (%llu failed, %llu unanswered operations)\n",
			(unsigned long long)run->br_failed, (unsigned long long)run->br_unanswered);
}

/* ---- JSON ---- */

static void json_str(FILE *out, const char *s)
{
	if (s == NULL) {
		fputs("null", out);
		return;
	}
	fputc('"', out);
	text_put(out, s, TEXT_JSON);
	fputc('"', out);
}

static void json_num(FILE *out, double v)
{
	if (isfinite(v))
		fprintf(out, "%.10g", v);
	else
		fputs("null", out);
}

/* A figure whose 0 means "not measured". */
static void json_known(FILE *out, double v)
{
	if (v > 0.0)
		json_num(out, v);
	else
		fputs("null", out);
}

static void json_u64(FILE *out, uint64_t v)
{
	fprintf(out, "%llu", (unsigned long long)v);
}

static void json_point(FILE *out, const struct bench_point *p, double min_fraction)
{
	fputs("{\"requested_ops\":", out);
	json_num(out, p->bp_requested_ops);
	fprintf(out, ",\"valid\":%s", bench_point_valid(p, min_fraction) ? "true" : "false");
	fputs(",\"achieved_ops\":", out);
	json_num(out, p->bp_achieved_ops);
	fputs(",\"mean_sent_ms\":", out);
	json_num(out, p->bp_mean_sent_ms);
	fputs(",\"mean_ms\":", out);
	json_num(out, p->bp_mean_ms);
	fputs(",\"p99_ms\":", out);
	json_num(out, p->bp_p99_ms);
	fputs(",\"durable_mean_ms\":", out);
	json_num(out, p->bp_durable_ms);
	fputs(",\"ops\":", out);
	json_u64(out, p->bp_ops);
	fputs(",\"failed\":", out);
	json_u64(out, p->bp_failed);
	fputs(",\"unanswered\":", out);
	json_u64(out, p->bp_unanswered);
	fputs(",\"seconds\":", out);
	json_num(out, p->bp_seconds);
	fputs(",\"server_cpu_s\":", out);
	json_known(out, p->bp_server_cpu_s);
	fputs(",\"client_cpu_s\":", out);
	json_num(out, p->bp_client_cpu_s);
	fputs(",\"cpu_window_s\":", out);
	json_known(out, p->bp_cpu_window_s);
	fputs(",\"server_busy_pct\":", out);
	json_num(out, busy_pct(p, p->bp_server_cpu_s));
	fputs(",\"client_spin_s\":", out);
	json_num(out, p->bp_client_spin_s);
	fputs(",\"load_busy_pct\":", out);
	json_num(out, busy_pct(p, load_cpu_s(p)));
	fputs(",\"procs\":[", out);
	for (unsigned i = 0; i < p->bp_nprocs && i < BENCH_MAX_PROCS; i++) {
		const struct bench_proc_result *r = &p->bp_procs[i];
		fputs(i == 0 ? "\n      {\"name\":" : ",\n      {\"name\":", out);
		json_str(out, r->bpr_name);
		fputs(",\"count\":", out);
		json_u64(out, r->bpr_count);
		fputs(",\"failed\":", out);
		json_u64(out, r->bpr_failed);
		fputs(",\"mean_ms\":", out);
		json_num(out, r->bpr_mean_ms);
		fputs(",\"p99_ms\":", out);
		json_num(out, r->bpr_p99_ms);
		fputs(",\"response_mean_ms\":", out);
		json_num(out, r->bpr_resp_mean_ms);
		fputs(",\"response_p99_ms\":", out);
		json_num(out, r->bpr_resp_p99_ms);
		fputc('}', out);
	}
	fputs("]}", out);
}

static void json_run(FILE *out, const struct bench_run *run)
{
	fputs("{\n   \"workload\":", out);
	json_str(out, run->br_workload);
	fputs(",\n   \"label\":", out);
	json_str(out, run->br_label);
	fputs(",\n   \"server\":", out);
	json_str(out, run->br_server);
	fputs(",\n   \"export\":", out);
	json_str(out, run->br_export);
	fputs(",\n   \"fileset\":", out);
	json_str(out, run->br_fileset);
	fputs(",\n   \"load_points\":", out);
	json_str(out, run->br_load);
	fputs(",\n   \"before_run\":", out);
	json_str(out, run->br_before_run);
	fprintf(out, ",\n   \"processes\":%u,\"connections_per_process\":%u,\"depth\":%u",
		run->br_processes, run->br_connections, run->br_depth);
	fputs(",\n   \"warmup_s\":", out);
	json_num(out, run->br_warmup_s);
	fputs(",\"runtime_s\":", out);
	json_num(out, run->br_runtime_s);
	fputs(",\n   \"peak_ops\":", out);
	json_num(out, run->br_peak_ops);
	fputs(",\"ort_ms\":", out);
	json_num(out, run->br_ort_ms);
	size_t pk = bench_peak_index(run->br_points, run->br_npoints, run->br_valid_fraction);
	size_t nvalid = 0;
	for (size_t i = 0; i < run->br_npoints; i++)
		if (bench_point_valid(&run->br_points[i], run->br_valid_fraction))
			nvalid++;
	fputs(",\n   \"valid_fraction\":", out);
	json_num(out, valid_fraction(run->br_valid_fraction));
	fprintf(out, ",\"valid_points\":%zu,\"peak_point\":", nvalid);
	if (pk != SIZE_MAX)
		fprintf(out, "%zu", pk + 1);
	else
		fputs("null", out);
	fputs(",\n   \"server_cpu_us_per_op\":", out);
	json_known(out, run->br_server_cpu_us_per_op);
	fputs(",\"client_cpu_us_per_op\":", out);
	json_num(out, run->br_client_cpu_us_per_op);
	fputs(",\"server_peak_rss_kib\":", out);
	if (run->br_server_peak_rss_kib > 0)
		json_u64(out, run->br_server_peak_rss_kib);
	else
		fputs("null", out);
	fputs(",\n   \"failed\":", out);
	json_u64(out, run->br_failed);
	fputs(",\"unanswered\":", out);
	json_u64(out, run->br_unanswered);
	fprintf(out, ",\"valid\":%s",
		run->br_failed == 0 && run->br_unanswered == 0 ? "true" : "false");
	fputs(",\n   \"points\":[", out);
	for (size_t i = 0; i < run->br_npoints; i++) {
		fputs(i == 0 ? "\n    " : ",\n    ", out);
		json_point(out, &run->br_points[i], run->br_valid_fraction);
	}
	fputs("],\n   \"figures\":[", out);
	for (size_t i = 0; i < run->br_nfigures && i < BENCH_MAX_FIGURES; i++) {
		const struct bench_figure *f = &run->br_figures[i];
		fputs(i == 0 ? "\n    {\"name\":" : ",\n    {\"name\":", out);
		json_str(out, f->bf_name);
		fputs(",\"value\":", out);
		json_num(out, f->bf_value);
		fputs(",\"unit\":", out);
		json_str(out, f->bf_unit);
		fputc('}', out);
	}
	fputs("]}", out);
}

int bench_report_json_vs(const char *path, const struct bench_run *runs, size_t nruns,
			 const char *a_label, const char *b_label, const struct bench_ratio *ratios,
			 size_t nratios)
{
	FILE *out = NULL;
	int rc = out_open(path, &out);
	if (rc != 0)
		return rc;
	fputs("{\"format\":\"shale-bench/1\",\n"
	      " \"note\":\"SPECsfs2008-style measurement by shale bench; not a SPEC-audited "
	      "result\",\n \"runs\":[",
	      out);
	for (size_t i = 0; i < nruns; i++) {
		fputs(i == 0 ? "\n  " : ",\n  ", out);
		json_run(out, &runs[i]);
	}
	fputs("]", out);
	if (ratios != NULL) {
		fputs(",\n \"comparison\":{\"a\":", out);
		json_str(out, a_label);
		fputs(",\"b\":", out);
		json_str(out, b_label);
		fputs(",\"ratios\":[", out);
		for (size_t i = 0; i < nratios; i++) {
			const struct bench_ratio *r = &ratios[i];
			fputs(i == 0 ? "\n  {\"name\":" : ",\n  {\"name\":", out);
			json_str(out, r->brt_name);
			fputs(",\"unit\":", out);
			json_str(out, r->brt_unit);
			fputs(",\"median\":", out);
			json_num(out, r->brt_median);
			fputs(",\"min\":", out);
			json_num(out, r->brt_min);
			fputs(",\"max\":", out);
			json_num(out, r->brt_max);
			fputs(",\"a_median\":", out);
			json_num(out, r->brt_a_median);
			fputs(",\"b_median\":", out);
			json_num(out, r->brt_b_median);
			fprintf(out, ",\"rounds\":%zu,\"lower_is_better\":%s}", r->brt_rounds,
				r->brt_lower_is_better ? "true" : "false");
		}
		fputs("]}", out);
	}
	fputs("}\n", out);
	return out_close(out);
}

int bench_report_json(const char *path, const struct bench_run *runs, size_t nruns)
{
	return bench_report_json_vs(path, runs, nruns, NULL, NULL, NULL, 0);
}

/* ---- SVG ---- */

/* Canvas and plot area in px: 16:9, the shape of a slide. */
#define SVG_W 960.0
#define SVG_H 540.0
#define SVG_LEFT 96.0
#define SVG_RIGHT 40.0
#define SVG_TOP 64.0
#define SVG_BOTTOM 76.0

/* Okabe-Ito colours: distinguishable with the common colour-vision deficiencies. */
static const char *const svg_colours[] = {
	"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B",
};

/* The 1-2-5 number at or above x > 0. */
static double nice_step(double x)
{
	double mag = pow(10.0, floor(log10(x)));
	double f = x / mag;
	double nf = f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0;
	return nf * mag;
}

/* v rounded to an integer with thousands separators ("1,564,404"), into buf. */
static const char *fmt_grouped(char *buf, size_t len, double v)
{
	char digits[32];
	if (!isfinite(v) || fabs(v) >= 1e18) {
		snprintf(buf, len, "%g", v);
		return buf;
	}
	snprintf(digits, sizeof(digits), "%.0f", fabs(v));
	size_t nd = strlen(digits), o = 0;
	if (v <= -0.5 && o + 1 < len)
		buf[o++] = '-';
	for (size_t i = 0; i < nd && o + 1 < len; i++) {
		if (i > 0 && (nd - i) % 3 == 0 && o + 2 < len)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
	return buf;
}

/* Code points in a UTF-8 string (invalid bytes count one each), to size the legend. */
static size_t text_width_chars(const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; p != NULL && *p != '\0'; p++)
		if ((*p & 0xC0) != 0x80)
			n++;
	return n;
}

struct svg_axis {
	double max, step;
	int decimals;
};

static struct svg_axis svg_axis_for(double data_max)
{
	struct svg_axis a;
	if (!(data_max > 0.0) || !isfinite(data_max))
		data_max = 1.0;
	a.step = nice_step(data_max * 1.05 / 5.0); /* about five ticks */
	a.max = ceil(data_max * 1.05 / a.step) * a.step;
	a.decimals = a.step >= 1.0 ? 0 : (int)ceil(-log10(a.step) - 1e-9);
	if (a.decimals > 6)
		a.decimals = 6;
	return a;
}

static void svg_marker(FILE *out, unsigned shape, double x, double y, const char *colour)
{
	switch (shape % 4) {
	case 0:
		fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>", x, y, colour);
		break;
	case 1:
		fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\"/>",
			x - 4.5, y - 4.5, colour);
		break;
	case 2:
		fprintf(out, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>", x,
			y - 6.0, x - 5.5, y + 4.0, x + 5.5, y + 4.0, colour);
		break;
	default:
		fprintf(out,
			"<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>",
			x, y - 6.0, x + 6.0, y, x, y + 6.0, x - 6.0, y, colour);
		break;
	}
}

/* Whether point p of run is drawn: valid points only (saturated ones would stretch the response
 * axis to seconds and flatten the curve that matters), with a usable response time. */
static bool svg_drawn(const struct bench_run *run, const struct bench_point *p)
{
	return bench_point_valid(p, run->br_valid_fraction) && usable(p->bp_mean_sent_ms);
}

int bench_report_svg(const char *path, const struct bench_run *runs, size_t nruns)
{
	double xmax = 0.0, ymax = 0.0;
	for (size_t r = 0; r < nruns; r++)
		for (size_t i = 0; i < runs[r].br_npoints; i++) {
			const struct bench_point *p = &runs[r].br_points[i];
			if (svg_drawn(&runs[r], p)) {
				xmax = SH_MAX(xmax, p->bp_achieved_ops);
				ymax = SH_MAX(ymax, p->bp_mean_sent_ms);
			}
		}
	struct svg_axis ax = svg_axis_for(xmax), ay = svg_axis_for(ymax);
	const double pw = SVG_W - SVG_LEFT - SVG_RIGHT, ph = SVG_H - SVG_TOP - SVG_BOTTOM;
	const double x0 = SVG_LEFT, y0 = SVG_TOP + ph; /* pixel position of (0,0) */

	FILE *out = NULL;
	int rc = out_open(path, &out);
	if (rc != 0)
		return rc;
	const char *workload = nruns > 0 && runs[0].br_workload != NULL ? runs[0].br_workload : "";
	bool sfs = strcmp(workload, "sfs2008") == 0;

	fprintf(out,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		"viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n",
		SVG_W, SVG_H, SVG_W, SVG_H);
	fputs("<title>", out);
	if (sfs)
		fputs("SPECsfs2008-style response time against throughput", out);
	else {
		text_put(out, workload, TEXT_XML);
		fputs(" response time against throughput", out);
	}
	fputs("</title>\n", out);
	fprintf(out, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", SVG_W, SVG_H);
	fprintf(out, "<text x=\"%.1f\" y=\"36\" font-size=\"22\" font-weight=\"bold\" "
		"fill=\"#222222\">", SVG_LEFT);
	if (sfs)
		fputs("SPECsfs2008-style NFSv3 load curve", out);
	else {
		text_put(out, workload, TEXT_XML);
		fputs(": response time against throughput", out);
	}
	fputs("</text>\n", out);

	/* Grid, ticks and tick labels. */
	fputs("<g font-size=\"13\" fill=\"#444444\">\n", out);
	for (int i = 0;; i++) {
		double v = ax.step * i;
		if (v > ax.max * (1.0 + 1e-9))
			break;
		double x = x0 + v / ax.max * pw;
		char label[48];
		if (ax.decimals == 0)
			fmt_grouped(label, sizeof(label), v);
		else
			snprintf(label, sizeof(label), "%.*f", ax.decimals, v);
		fprintf(out,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444444\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
			x, SVG_TOP, x, y0, x, y0, x, y0 + 6.0, x, y0 + 22.0, label);
	}
	for (int i = 0;; i++) {
		double v = ay.step * i;
		if (v > ay.max * (1.0 + 1e-9))
			break;
		double y = y0 - v / ay.max * ph;
		fprintf(out,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444444\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n",
			x0, y, x0 + pw, y, x0 - 6.0, y, x0, y, x0 - 10.0, y + 4.5, ay.decimals, v);
	}
	fputs("</g>\n", out);
	fprintf(out,
		"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222222\" "
		"stroke-width=\"1.5\"/>\n"
		"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222222\" "
		"stroke-width=\"1.5\"/>\n",
		x0, y0, x0 + pw, y0, x0, y0, x0, SVG_TOP);
	fprintf(out,
		"<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" text-anchor=\"middle\" "
		"fill=\"#222222\">Throughput (ops/sec)</text>\n",
		x0 + pw / 2.0, SVG_H - 22.0);
	fprintf(out,
		"<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" text-anchor=\"middle\" "
		"fill=\"#222222\" transform=\"rotate(-90 %.1f %.1f)\">Response time (msec)</text>\n",
		28.0, SVG_TOP + ph / 2.0, 28.0, SVG_TOP + ph / 2.0);

	/* One curve per run. */
	for (size_t r = 0; r < nruns; r++) {
		const char *colour = svg_colours[r % SH_ARRAY_SIZE(svg_colours)];
		bool dashed = r >= SH_ARRAY_SIZE(svg_colours);
		size_t n = 0;
		for (size_t i = 0; i < runs[r].br_npoints; i++)
			if (svg_drawn(&runs[r], &runs[r].br_points[i]))
				n++;
		if (n == 0)
			continue;
		fprintf(out, "<g class=\"run\">\n<polyline fill=\"none\" stroke=\"%s\" "
			"stroke-width=\"2.5\" stroke-linejoin=\"round\"%s points=\"",
			colour, dashed ? " stroke-dasharray=\"8 4\"" : "");
		bool first = true;
		for (size_t i = 0; i < runs[r].br_npoints; i++) {
			const struct bench_point *p = &runs[r].br_points[i];
			if (!svg_drawn(&runs[r], p))
				continue;
			fprintf(out, "%s%.1f,%.1f", first ? "" : " ",
				x0 + p->bp_achieved_ops / ax.max * pw,
				y0 - p->bp_mean_sent_ms / ay.max * ph);
			first = false;
		}
		fputs("\"/>\n", out);
		for (size_t i = 0; i < runs[r].br_npoints; i++) {
			const struct bench_point *p = &runs[r].br_points[i];
			if (!svg_drawn(&runs[r], p))
				continue;
			svg_marker(out, (unsigned)r, x0 + p->bp_achieved_ops / ax.max * pw,
				   y0 - p->bp_mean_sent_ms / ay.max * ph, colour);
		}
		fputs("\n</g>\n", out);
	}

	/* Legend, top left inside the plot where curves rising to the right leave room. */
	if (nruns > 0) {
		const double lx = x0 + 16.0, ly = SVG_TOP + 12.0, row = 22.0;
		/* Box width from the longest entry, at about 7.6 px per character of 14 px text. */
		size_t chars = 0;
		for (size_t r = 0; r < nruns; r++) {
			const char *label = runs[r].br_label;
			size_t c = label != NULL && label[0] != '\0' ? text_width_chars(label) : 8;
			c += runs[r].br_npoints == 0 ? 10 : 72;
			chars = SH_MAX(chars, c);
		}
		double box_w = SH_MIN(46.0 + 7.6 * (double)chars, pw - 16.0);
		fprintf(out,
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" "
			"fill-opacity=\"0.9\" stroke=\"#cccccc\"/>\n",
			lx - 8.0, ly - 4.0, box_w, row * (double)nruns + 8.0);
		for (size_t r = 0; r < nruns; r++) {
			const char *colour = svg_colours[r % SH_ARRAY_SIZE(svg_colours)];
			double y = ly + row * (double)r + row / 2.0;
			fprintf(out,
				"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
				"stroke-width=\"2.5\"%s/>",
				lx, y, lx + 28.0, y, colour,
				r >= SH_ARRAY_SIZE(svg_colours) ? " stroke-dasharray=\"8 4\"" : "");
			svg_marker(out, (unsigned)r, lx + 14.0, y, colour);
			fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" fill=\"#222222\">",
				lx + 38.0, y + 5.0);
			if (runs[r].br_label != NULL && runs[r].br_label[0] != '\0')
				text_put(out, runs[r].br_label, TEXT_XML);
			else
				fprintf(out, "run %zu", r + 1);
			char peak[48];
			size_t hidden = 0;
			for (size_t i = 0; i < runs[r].br_npoints; i++)
				if (!bench_point_valid(&runs[r].br_points[i], runs[r].br_valid_fraction))
					hidden++;
			if (runs[r].br_npoints == 0)
				fputs(" (no data)", out);
			else if (!isfinite(runs[r].br_peak_ops) || !isfinite(runs[r].br_ort_ms))
				fputs(": no valid point, peak and ORT not available", out);
			else
				fprintf(out, ": peak %s ops/sec, ORT %.2f msec",
					fmt_grouped(peak, sizeof(peak), runs[r].br_peak_ops),
					runs[r].br_ort_ms);
			if (hidden > 0)
				fprintf(out, " (%zu saturated point%s not drawn)", hidden,
					hidden == 1 ? "" : "s");
			fputs("</text>\n", out);
		}
	}
	if (sfs)
		fprintf(out,
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
			"fill=\"#888888\">Measured with shale bench in the SPECsfs2008 style; not a "
			"SPEC result</text>\n",
			SVG_W - 8.0, SVG_H - 6.0);
	fputs("</svg>\n", out);
	return out_close(out);
}

/* ---- --vs comparison ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v); n > 0. */
static double median_of(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static const struct bench_figure *figure_named(const struct bench_run *run, const char *name)
{
	for (size_t i = 0; i < run->br_nfigures && i < BENCH_MAX_FIGURES; i++)
		if (run->br_figures[i].bf_name != NULL && strcmp(run->br_figures[i].bf_name, name) == 0)
			return &run->br_figures[i];
	return NULL;
}

/* Which value of a run a ratio is about. */
enum cmp_kind { CMP_PEAK, CMP_ORT, CMP_SERVER_CPU, CMP_RSS, CMP_FIGURE };

/* The value, and whether it is known (run-level figures: 0 means unknown). */
static bool cmp_value(const struct bench_run *run, enum cmp_kind kind, const char *fig,
		      double *v_out)
{
	double v;
	switch (kind) {
	case CMP_PEAK: v = run->br_peak_ops; break;
	case CMP_ORT: v = run->br_ort_ms; break;
	case CMP_SERVER_CPU: v = run->br_server_cpu_us_per_op; break;
	case CMP_RSS: v = (double)run->br_server_peak_rss_kib; break;
	default: {
		const struct bench_figure *f = figure_named(run, fig);
		if (f == NULL || !isfinite(f->bf_value))
			return false;
		*v_out = f->bf_value;
		return true;
	}
	}
	if (!isfinite(v) || v <= 0.0)
		return false;
	*v_out = v;
	return true;
}

/* Lower-is-better guess for a workload figure, from its unit: times and costs. */
static bool unit_lower_is_better(const char *unit)
{
	if (unit == NULL)
		return false;
	static const char *const lower[] = { "ms", "msec", "us", "usec", "ns", "s", "us/op", "KiB",
					     "MiB", "ms/op" };
	for (size_t i = 0; i < SH_ARRAY_SIZE(lower); i++)
		if (strcmp(unit, lower[i]) == 0)
			return true;
	return false;
}

size_t bench_compare(const struct bench_run *a_rounds, const struct bench_run *b_rounds,
		     size_t nrounds, struct bench_ratio *out, size_t max)
{
	if (nrounds == 0 || max == 0)
		return 0;
	double *buf = mem_alloc(3 * nrounds * sizeof(double));
	if (buf == NULL) {
		log_error("bench: out of memory comparing %zu rounds", nrounds);
		return 0;
	}
	double *ratio = buf, *av = buf + nrounds, *bv = buf + 2 * nrounds;

	static const struct {
		enum cmp_kind kind;
		const char *name, *unit;
		bool lower;
	} fixed[] = {
		{ CMP_PEAK, "peak throughput", "ops/s", false },
		{ CMP_ORT, "overall response time", "ms", true },
		{ CMP_SERVER_CPU, "server CPU per op", "us", true },
		{ CMP_RSS, "server peak RSS", "KiB", true },
	};
	size_t nfixed = SH_ARRAY_SIZE(fixed);
	size_t ncand = nfixed + SH_MIN(a_rounds[0].br_nfigures, (size_t)BENCH_MAX_FIGURES);
	size_t written = 0;
	for (size_t c = 0; c < ncand && written < max; c++) {
		enum cmp_kind kind;
		const char *name, *unit;
		bool lower;
		if (c < nfixed) {
			kind = fixed[c].kind;
			name = fixed[c].name;
			unit = fixed[c].unit;
			lower = fixed[c].lower;
		} else {
			const struct bench_figure *f = &a_rounds[0].br_figures[c - nfixed];
			if (f->bf_name == NULL || figure_named(&a_rounds[0], f->bf_name) != f)
				continue; /* unnamed, or a repeated name already compared */
			kind = CMP_FIGURE;
			name = f->bf_name;
			unit = f->bf_unit != NULL ? f->bf_unit : "";
			lower = unit_lower_is_better(f->bf_unit);
			bool everywhere = true;
			for (size_t r = 0; r < nrounds && everywhere; r++)
				everywhere = figure_named(&a_rounds[r], name) != NULL &&
					     figure_named(&b_rounds[r], name) != NULL;
			if (!everywhere)
				continue;
		}
		size_t n = 0, na = 0, nb = 0;
		for (size_t r = 0; r < nrounds; r++) {
			double a = 0.0, b = 0.0;
			bool ka = cmp_value(&a_rounds[r], kind, name, &a);
			bool kb = cmp_value(&b_rounds[r], kind, name, &b);
			if (ka)
				av[na++] = a;
			if (kb)
				bv[nb++] = b;
			if (ka && kb && b != 0.0 && isfinite(a / b))
				ratio[n++] = a / b;
		}
		if (n == 0)
			continue;
		struct bench_ratio *o = &out[written++];
		memset(o, 0, sizeof(*o));
		o->brt_name = name;
		o->brt_unit = unit;
		o->brt_lower_is_better = lower;
		o->brt_rounds = n;
		o->brt_median = median_of(ratio, n); /* sorts ratio: min and max are its ends */
		o->brt_min = ratio[0];
		o->brt_max = ratio[n - 1];
		o->brt_a_median = median_of(av, na);
		o->brt_b_median = median_of(bv, nb);
	}
	mem_free(buf);
	return written;
}

void bench_report_compare(FILE *out, const char *a_label, const char *b_label,
			  const struct bench_ratio *ratios, size_t n)
{
	fputs("Comparison: A = ", out);
	text_put(out, or_dash(a_label), TEXT_PLAIN);
	fputs(", B = ", out);
	text_put(out, or_dash(b_label), TEXT_PLAIN);
	fputs(" (ratios taken per round, A and B run back to back)\n", out);
	/* Column widths: 30, 15, 15, 11, 2+14, 1+6. */
	fprintf(out, "%-30s%15s%15s%11s  %-14s %6s\n", "Figure", "A (median)", "B (median)",
		"A/B median", "A/B range", "Rounds");
	fprintf(out, "%-30s%15s%15s%11s  %-14s %6s\n", "------------------------------",
		"--------------", "--------------", "----------", "--------------", "------");
	for (size_t i = 0; i < n; i++) {
		const struct bench_ratio *r = &ratios[i];
		char name[64];
		snprintf(name, sizeof(name), "%s (%s)", or_dash(r->brt_name),
			 r->brt_unit != NULL && r->brt_unit[0] != '\0' ? r->brt_unit : "-");
		fprintf(out, "%-30.30s", name);
		text_num(out, 15, 2, r->brt_a_median);
		text_num(out, 15, 2, r->brt_b_median);
		text_num(out, 11, 2, r->brt_median);
		fputs("  ", out);
		text_num(out, 6, 2, r->brt_min);
		fputs(" -", out);
		text_num(out, 6, 2, r->brt_max);
		fprintf(out, " %6zu%s\n", r->brt_rounds,
			r->brt_lower_is_better ? "  (lower is better)" : "");
	}
	if (n == 0)
		fputs("(no figure known for both servers)\n", out);
}
