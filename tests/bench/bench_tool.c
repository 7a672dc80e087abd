/* bench_tool.c: `shale bench` against a private `shale serve`: each workload runs for a few
 * seconds and must exit 0 with zero failed and zero unanswered operations (read back from its
 * JSON report, which must parse), the SVG must be well-formed XML, varmail must print filebench's
 * "IO Summary:" line, syncwrite must report its figures from FILE_SYNC WRITEs only, meta's
 * READDIRPLUS listing must find every file over several calls, seq and meta must run only the
 * phases --phases names (and refuse sets that cannot run), --before-run's command must run before
 * each run (and a failing one stop the run), and a run that cannot succeed must exit non-zero.
 * The server exports a posix directory only (the test server has no pool). Needs $SHALE_BIN and
 * $PYTHON3. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testserver.h"

static struct ts_server srv;
static char port_arg[64];
static char pid_arg[32];

/* Runs argv with stdout+stderr into out_path (truncated); returns the exit status, or -1. */
static int run_cmd(char *const argv[], const char *out_path)
{
	return ts_run_cmd(argv, out_path, false);
}

static void dump(const char *path, unsigned max_lines)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char line[512];
	unsigned n = 0;
	while (fgets(line, sizeof(line), f) && n++ < max_lines)
		printf("#   %s", line);
	fclose(f);
}

static bool file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[1024];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* Runs a python3 check script with one argument; true if it exits 0. */
static bool py_check(const char *script, const char *arg, const char *out_path)
{
	const char *py = getenv("PYTHON3");
	char *argv[] = {(char *)(py ? py : "/usr/bin/python3"), "-c", (char *)script, (char *)arg, NULL};
	int rc = run_cmd(argv, out_path);
	if (rc != 0)
		dump(out_path, 20);
	return rc == 0;
}

/* The JSON must parse, hold `runs` of the workload, with zero failed and unanswered operations,
 * a valid flag, and at least min_points points each with completed operations. */
static const char json_script[] =
	"import json, sys\n"
	"d = json.load(open(sys.argv[1]))\n"
	"runs = d['runs'] if 'runs' in d else [d]\n"
	"assert len(runs) >= 1, 'no runs'\n"
	"for r in runs:\n"
	"    assert r['failed'] == 0, 'failed ops %s' % r['failed']\n"
	"    assert r['unanswered'] == 0, 'unanswered ops %s' % r['unanswered']\n"
	"    assert r['valid'] is True\n"
	"    assert len(r['points']) >= 1\n"
	"    assert r['peak_ops'] > 0, 'no throughput'\n"
	"print('ok')\n";

static const char svg_script[] =
	"import sys, xml.etree.ElementTree as E\n"
	"root = E.parse(sys.argv[1]).getroot()\n"
	"assert root.tag.endswith('svg'), root.tag\n"
	"assert len(list(root.iter())) > 10, 'empty plot'\n";

static const char points_script[] =
	"import json, sys\n"
	"r = json.load(open(sys.argv[1]))['runs'][0]\n"
	"pts = r['points']\n"
	"assert len(pts) == 2, len(pts)\n"
	"assert r['ort_ms'] > 0\n"
	"for p in pts:\n"
	"    # Open loop at a modest rate: the server must keep up with what was asked.\n"
	"    req = p['requested_ops']\n"
	"    ach = p['achieved_ops']\n"
	"    assert ach > 0.8 * req, (ach, req)\n"
	"    # SETATTR, CREATE and REMOVE (6% of the mix) wait for stable storage.\n"
	"    d = p['durable_mean_ms']\n"
	"    assert d is not None and d > 0, d\n"
	"    # Both sides' CPU over the point, the server's read through --server-pid.\n"
	"    assert p['cpu_window_s'] > 0, p['cpu_window_s']\n"
	"    assert p['server_busy_pct'] is not None and p['server_busy_pct'] > 0, p\n"
	"    assert 0 < p['load_busy_pct'] < 100 * 64, p['load_busy_pct']\n";

struct wl_case {
	const char *name;
	const char *extra[12];
	const char *check;      /* a further python check of the JSON, or NULL */
	const char *check_what;
	const char *out_has;    /* a line the output must contain, or NULL */
};

static void run_workload(const struct wl_case *wc)
{
	char json[400], svg[400], out[400], pyout[400];
	snprintf(json, sizeof(json), "%s/%s.json", srv.ts_root, wc->name);
	snprintf(svg, sizeof(svg), "%s/%s.svg", srv.ts_root, wc->name);
	snprintf(out, sizeof(out), "%s/%s.out", srv.ts_root, wc->name);
	snprintf(pyout, sizeof(pyout), "%s/%s.py.out", srv.ts_root, wc->name);
	char *argv[40];
	int n = 0;
	argv[n++] = getenv("SHALE_BIN");
	argv[n++] = "bench";
	argv[n++] = (char *)wc->name;
	argv[n++] = "--server";
	argv[n++] = port_arg;
	argv[n++] = "--export";
	argv[n++] = srv.ts_export_path[0];
	argv[n++] = "--server-pid";
	argv[n++] = pid_arg;
	argv[n++] = "--json";
	argv[n++] = json;
	argv[n++] = "--svg";
	argv[n++] = svg;
	for (int i = 0; wc->extra[i]; i++)
		argv[n++] = (char *)wc->extra[i];
	argv[n] = NULL;
	int rc = run_cmd(argv, out);
	if (!tap_check(rc == 0, "%s: exits 0", wc->name))
		dump(out, 60);
	tap_check(py_check(json_script, json, pyout), "%s: JSON parses, zero failed and unanswered ops",
		  wc->name);
	tap_check(py_check(svg_script, svg, pyout), "%s: SVG is well-formed XML", wc->name);
	if (strcmp(wc->name, "sfs2008") == 0)
		tap_check(py_check(points_script, json, pyout),
			  "sfs2008: two points, each at its requested rate, with both sides' CPU");
	if (strcmp(wc->name, "varmail") == 0)
		tap_check(file_has(out, "IO Summary: ") && file_has(out, " ops/s ") &&
			  file_has(out, " rd/wr ") && file_has(out, "ms/op"),
			  "varmail: prints filebench's IO Summary line");
	if (strcmp(wc->name, "seq") == 0)
		tap_check(file_has(out, "read") && file_has(out, "MB/s"), "seq: reports MB/s");
	if (wc->check)
		tap_check(py_check(wc->check, json, pyout), "%s: %s", wc->name, wc->check_what);
	if (wc->out_has)
		tap_check(file_has(out, wc->out_has), "%s: prints \"%s\"", wc->name, wc->out_has);
	tap_check(ts_alive(&srv), "%s: server still running", wc->name);
}

/* syncwrite: the four figures, all operations FILE_SYNC WRITEs, as many as ops/s says. */
static const char syncwrite_script[] =
	"import json, sys\n"
	"r = json.load(open(sys.argv[1]))['runs'][0]\n"
	"f = {x['name']: x for x in r['figures']}\n"
	"assert set(f) == {'ops/s', 'MB/s', 'mean latency', 'p99 latency'}, f\n"
	"assert f['ops/s']['value'] > 0 and f['MB/s']['unit'] == 'MB/s', f\n"
	"assert 0 < f['mean latency']['value'] <= f['p99 latency']['value'] * 1.02, f\n"
	"p = r['points'][0]\n"
	"assert [q['name'] for q in p['procs']] == ['WRITE-FILE_SYNC'], p['procs']\n"
	"n = p['procs'][0]['count']\n"
	"# the response (from the send) is part of the latency from the intended start\n"
	"q = p['procs'][0]\n"
	"assert 0 < q['response_mean_ms'] <= q['mean_ms'] * 1.000001, q\n"
	"assert 0 < q['response_p99_ms'] <= q['p99_ms'] * 1.000001, q\n"
	"assert n > 0 and abs(n / p['seconds'] - f['ops/s']['value']) < 0.01 * n, (n, p['seconds'])\n"
	"# 4 KiB each: MB/s is ops/s x 4096 / 2^20\n"
	"assert abs(f['MB/s']['value'] - f['ops/s']['value'] / 256) < 0.01 * f['MB/s']['value'], f\n"
	"assert r['connections_per_process'] == 4 and r['depth'] == 16, r\n"
	"assert r['warmup_s'] == 0.5 and r['runtime_s'] == 2, r\n";

/* meta with its list phase: the phases asked for, in order, and several READDIRPLUS calls. */
static const char meta_list_script[] =
	"import json, sys\n"
	"r = json.load(open(sys.argv[1]))['runs'][0]\n"
	"names = [x['name'] for x in r['figures']]\n"
	"assert names == ['create', 'list', 'remove'], names\n"
	"lst = [x for x in r['figures'] if x['name'] == 'list'][0]\n"
	"assert lst['unit'] == 'entries/s' and lst['value'] > 0, lst\n"
	"calls = r['points'][1]['procs'][0]\n"
	"assert calls['name'] == 'READDIRPLUS' and calls['count'] >= 2, calls\n";

/* seq --phases unstable,read: no FILE_SYNC phase. */
static const char seq_phases_script[] =
	"import json, sys\n"
	"r = json.load(open(sys.argv[1]))['runs'][0]\n"
	"names = [x['name'] for x in r['figures']]\n"
	"assert names == ['write UNSTABLE+COMMIT', 'read'], names\n"
	"assert len(r['points']) == 2, len(r['points'])\n";

int main(void)
{
	const char *lines[] = {"%s *(rw,insecure,no_root_squash)"};
	if (ts_start(&srv, lines, 1) != 0) {
		tap_check(false, "server starts");
		return tap_finish();
	}
	snprintf(port_arg, sizeof(port_arg), "127.0.0.1:%u", srv.ts_port);
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)srv.ts_pid);

	static const struct wl_case cases[] = {
		{"sfs2008", {"--points", "2", "--rate", "1000", "--warmup", "0.5", "--runtime", "1.5",
			     "--fileset-mb", "4", NULL}},
		{"varmail", {"--warmup", "0.5", "--runtime", "2", "--files", "200", NULL}},
		{"seq", {"--size-mb", "16", "--xfer", "256K", NULL}},
		{"meta", {"--files", "300", NULL}},
		{"syncwrite", {"--warmup", "0.5", "--runtime", "2", "--files", "16", "--size-mb", "4",
			       NULL},
		 syncwrite_script, "figures from 4 KiB FILE_SYNC WRITEs, 4 x 16 in flight", NULL},
		/* More files than one 256 KiB reply holds: the listing continues from cookies. */
		{"meta", {"--files", "2500", "--phases", "remove,list,create", NULL},
		 meta_list_script, "create, list over several READDIRPLUS calls, remove",
		 "list: 2500 of 2500 files, \".\" 1 and \"..\" 1 times"},
		{"seq", {"--size-mb", "8", "--xfer", "256K", "--phases", "read,unstable", NULL},
		 seq_phases_script, "--phases unstable,read runs those two only", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_workload(&cases[i]);

	/* sfs2008 again: the file set is reused, not recreated. */
	{
		char out[400];
		snprintf(out, sizeof(out), "%s/reuse.out", srv.ts_root);
		char *argv[] = {getenv("SHALE_BIN"), "bench", "sfs2008", "--server", port_arg,
				"--export", srv.ts_export_path[0], "--points", "1", "--rate", "500",
				"--warmup", "0", "--runtime", "0.5", "--fileset-mb", "4", NULL};
		int rc = run_cmd(argv, out);
		tap_check(rc == 0 && file_has(out, " 0 created") && file_has(out, "reused"),
			  "sfs2008: a second run reuses the file set");
		if (rc != 0)
			dump(out, 40);
	}
	/* --vs: the JSON carries the comparison that the text table shows. */
	{
		char out[400], json[400], pyout[400];
		snprintf(out, sizeof(out), "%s/vs.out", srv.ts_root);
		snprintf(json, sizeof(json), "%s/vs.json", srv.ts_root);
		snprintf(pyout, sizeof(pyout), "%s/vs.py.out", srv.ts_root);
		char before_log[400], before_cmd[600];
		snprintf(before_log, sizeof(before_log), "%s/before.log", srv.ts_root);
		snprintf(before_cmd, sizeof(before_cmd), "echo ran >> %s", before_log);
		char *argv[] = {getenv("SHALE_BIN"), "bench", "meta", "--server", port_arg,
				"--export", srv.ts_export_path[0], "--label", "first", "--vs", port_arg,
				"--vs-export", srv.ts_export_path[0], "--vs-label", "second",
				"--rounds", "2", "--files", "100", "--json", json,
				"--before-run", before_cmd, NULL};
		int rc = run_cmd(argv, out);
		tap_check(rc == 0 && file_has(out, "A = first, B = second"), "--vs: exits 0 with a "
			  "comparison table");
		unsigned before_runs = 0;
		FILE *bf = fopen(before_log, "r");
		char bline[64];
		while (bf && fgets(bline, sizeof(bline), bf))
			before_runs += strcmp(bline, "ran\n") == 0;
		if (bf)
			fclose(bf);
		tap_check(before_runs == 4 && file_has(out, "Before the run            echo ran"),
			  "--before-run: the command ran before each of the 4 runs (%u) and is reported",
			  before_runs);
		static const char vs_script[] =
			"import json, sys\n"
			"d = json.load(open(sys.argv[1]))\n"
			"assert [r['label'] for r in d['runs']] == ['first', 'second'] * 2\n"
			"c = d['comparison']\n"
			"assert c['a'] == 'first' and c['b'] == 'second'\n"
			"x = [q for q in c['ratios'] if q['name'] == 'peak throughput'][0]\n"
			"assert x['rounds'] == 2 and x['median'] > 0, x\n"
			"assert all(r['before_run'].startswith('echo ran') for r in d['runs'])\n";
		tap_check(py_check(vs_script, json, pyout), "--vs: the JSON holds runs and ratios");
	}
	/* --rate auto: the peak is measured first and the points are fractions of it. */
	{
		char out[400], json[400], pyout[400];
		snprintf(out, sizeof(out), "%s/auto.out", srv.ts_root);
		snprintf(json, sizeof(json), "%s/auto.json", srv.ts_root);
		snprintf(pyout, sizeof(pyout), "%s/auto.py.out", srv.ts_root);
		char *argv[] = {getenv("SHALE_BIN"), "bench", "sfs2008", "--server", port_arg,
				"--export", srv.ts_export_path[0], "--points", "2", "--rate", "auto",
				"--warmup", "0.3", "--runtime", "1", "--fileset-mb", "4", "--spin-us", "200",
				"--json", json, NULL};
		int rc = run_cmd(argv, out);
		tap_check(rc == 0 && file_has(out, "peak probe: ") && file_has(out, "of this server's own peak"),
			  "sfs2008 --rate auto: measures the peak, then runs the points");
		if (rc != 0)
			dump(out, 40);
		static const char auto_script[] =
			"import json, sys\n"
			"r = json.load(open(sys.argv[1]))['runs'][0]\n"
			"assert \"own peak\" in r['load_points'], r['load_points']\n"
			"p = r['points']\n"
			"assert len(p) == 2 and p[0]['requested_ops'] > 0, p\n"
			"assert abs(p[1]['requested_ops'] - 2 * p[0]['requested_ops']) < 1, p\n"
			"assert p[0]['achieved_ops'] > 0 and p[1]['achieved_ops'] > 0, p\n";
		tap_check(py_check(auto_script, json, pyout), "sfs2008 --rate auto: the JSON says how the "
			  "points were chosen, the top point is twice the first");
		char *bad_argv[] = {getenv("SHALE_BIN"), "bench", "sfs2008", "--server", port_arg,
				    "--export", srv.ts_export_path[0], "--rate", "auto", "--fileset-spec", NULL};
		snprintf(out, sizeof(out), "%s/auto-spec.out", srv.ts_root);
		rc = run_cmd(bad_argv, out);
		tap_check(rc != 0 && file_has(out, "needs a number"),
			  "sfs2008: --rate auto with --fileset-spec is refused");
	}
	/* Asked for far more than the server can do: every point saturated, no peak, no ORT, and
	 * the report says so instead of printing a number. */
	{
		char out[400], json[400], pyout[400];
		snprintf(out, sizeof(out), "%s/sat.out", srv.ts_root);
		snprintf(json, sizeof(json), "%s/sat.json", srv.ts_root);
		snprintf(pyout, sizeof(pyout), "%s/sat.py.out", srv.ts_root);
		char *argv[] = {getenv("SHALE_BIN"), "bench", "sfs2008", "--server", port_arg,
				"--export", srv.ts_export_path[0], "--points", "1", "--rate", "5000000",
				"--warmup", "0", "--runtime", "1", "--fileset-mb", "4", "--json", json,
				NULL};
		int rc = run_cmd(argv, out);
		tap_check(rc == 0 && file_has(out, "= not available (no load point achieved") &&
				  file_has(out, "saturated ("),
			  "sfs2008: a saturated point is marked, peak and ORT not available");
		if (rc != 0)
			dump(out, 40);
		static const char sat_script[] =
			"import json, sys\n"
			"r = json.load(open(sys.argv[1]))['runs'][0]\n"
			"assert r['peak_ops'] is None and r['ort_ms'] is None, r\n"
			"assert r['valid_points'] == 0 and r['points'][0]['valid'] is False\n"
			"assert r['points'][0]['achieved_ops'] > 0\n";
		tap_check(py_check(sat_script, json, pyout), "sfs2008: saturated JSON has null peak");
	}
	/* --phases sets that cannot run, or for a workload without phases, are refused. */
	{
		static const char *const bad[][2] = {
			{"seq", "read"}, {"meta", "list"}, {"meta", "create,nosuch"}, {"syncwrite", "create"},
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			char out[400];
			snprintf(out, sizeof(out), "%s/phases-%zu.out", srv.ts_root, i);
			char *argv[] = {getenv("SHALE_BIN"), "bench", (char *)bad[i][0], "--server",
					port_arg, "--export", srv.ts_export_path[0], "--phases",
					(char *)bad[i][1], NULL};
			int rc = run_cmd(argv, out);
			tap_check(rc == 2, "%s --phases %s is refused (exit %d)", bad[i][0], bad[i][1], rc);
		}
	}
	/* A failing --before-run command stops the run before it starts. */
	{
		char out[400];
		snprintf(out, sizeof(out), "%s/before-fail.out", srv.ts_root);
		char *argv[] = {getenv("SHALE_BIN"), "bench", "meta", "--server", port_arg,
				"--export", srv.ts_export_path[0], "--files", "10", "--before-run",
				"exit 3", NULL};
		int rc = run_cmd(argv, out);
		tap_check(rc != 0 && rc != -1 && file_has(out, "--before-run command failed") &&
				  !file_has(out, "Throughput"),
			  "--before-run: a failing command stops the run (exit %d)", rc);
	}
	/* A run that cannot succeed says so. */
	{
		char out[400];
		snprintf(out, sizeof(out), "%s/bad.out", srv.ts_root);
		char *argv[] = {getenv("SHALE_BIN"), "bench", "meta", "--server", port_arg,
				"--export", "/no/such/export", "--files", "10", NULL};
		int rc = run_cmd(argv, out);
		tap_check(rc != 0 && rc != -1, "an unmountable export exits non-zero (%d)", rc);
	}
	tap_check(ts_stop(&srv) == 0, "server stops cleanly");
	return tap_finish();
}
