#!/usr/bin/env python3
"""summarize.py: the summary table of a `make bench` run: each speed goal, the measured ratio, PASS/MISS.

Reads the JSON reports that `shale bench ... --vs` wrote into the results directory (one file per
workload: sfs2008.json, varmail.json, seq.json, meta.json, syncwrite.json and the same with -pool,
sfs2008-pool.json...; format "shale-bench/1": "runs" in the order they ran, A B A B ...), the
loopback TCP limit measured in the same run (iperf3), in MB/s with MB = 2^20 bytes as shale bench
counts them, and memory-pool.json (format "shale-bench-memory/1", written by run-bench.sh: per
phase the server's peak RSS and the goal, arc-max + 64 MiB), whose rows compare a peak with its
goal instead of a ratio.

The ratios A/B are the ones shale bench wrote into the report's "comparison" section (median,
min and max over the rounds of the per-round ratio); a report without that section (written by
an older shale bench) has them computed here from its runs by the same rule. Peak throughput and
ORT are those of each run's valid points (points that achieved at least the run's
"valid_fraction", 95% by default, of their requested rate); a run with no valid point has them
null, and that round is left out of those two ratios. Each goal compares one ratio's
median with its target; the range (min..max over rounds) is shown
so a reader can see how much the rounds agreed. A goal whose figure is missing is MISSING, which
counts as not reached. Every other ratio is listed below the goals for
information. A row whose comparison has no goal (the posix back end's syncwrite) shows its ratio
with "-" as target and result and is not counted. Also writes RESULTS/summary.json.

Exit status: 0 when every report was found and valid (no failed or unanswered operation in any
run, every memory-pool phase completed), 1 otherwise. Reaching the goals does not change the status: a MISS is a result, not an error.

Usage: bench/summarize.py --results DIR --tcp-mbs N[,N...] [--config FILE] [--workloads "W ..."]
"""
import argparse
import json
import os
import re
import statistics
import sys

# (workload, label, how to find the ratio, comparison, target). A ratio is found by its name in
# the comparison: exact for the fixed ones and for figures named exactly, a (pattern, pattern to
# exclude) pair over figure names otherwise. Comparison None: shown for information, no goal.
SEQ_READ = (r"\bread\b", r"write")
GOALS = [
    ("sfs2008", "peak throughput", "peak throughput", ">=", 2.0),
    ("sfs2008", "overall response time", "overall response time", "<=", 0.5),
    ("sfs2008", "server CPU per op", "server CPU per op", "<=", 0.5),
    ("sfs2008", "server peak RSS", "server peak RSS", "<=", 0.5),
    # The pool back end against Ganesha (issue 4's goals).
    ("sfs2008-pool", "peak throughput", "peak throughput", ">=", 6.0),
    ("sfs2008-pool", "overall response time", "overall response time", "<=", 0.2),
    ("sfs2008-pool", "server CPU per op", "server CPU per op", "<=", 0.12),
    ("varmail-pool", "ops/s", "ops/s", ">=", 3.0),
    ("seq", "read vs Ganesha", SEQ_READ, ">=", 1.0),
    ("seq", "write UNSTABLE+COMMIT", (r"unstable", None), ">=", 1.3),
    ("seq-pool", "read vs Ganesha", SEQ_READ, ">=", 1.0),
    ("meta", "create", (r"\bcreate\b", None), ">=", 1.5),
    ("meta", "remove", (r"\bremove\b", None), ">=", 1.5),
    # 4 KiB FILE_SYNC WRITEs, 64 in flight: group commit. The posix back end has no goal here.
    ("syncwrite", "4 KiB FILE_SYNC writes", "ops/s", None, None),
    ("syncwrite-pool", "4 KiB FILE_SYNC writes", "ops/s", ">=", 5.0),
]
# seq's and seq-pool's read, each against the same loopback TCP limit.
READ_OF_TCP = ("seq", "seq-pool")
MEMORY = "memory-pool"
SEQ_READ_OF_TCP_TARGET = 0.90
# shale bench counts MB as 2^20 bytes; the TCP limit is passed in the same unit.
UNIT_SCALE_TO_MB = {"MB/s": 1.0, "MiB/s": 1.0, "GB/s": 1024.0, "GiB/s": 1024.0, "KiB/s": 1 / 1024}


def load(results, workload):
    path = os.path.join(results, workload + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, "no %s" % path
    except (OSError, ValueError) as e:
        return None, "%s: %s" % (path, e)


def name_matches(name, key):
    if isinstance(key, str):
        return name == key
    want, avoid = key
    return re.search(want, name, re.I) is not None and (
        avoid is None or re.search(avoid, name, re.I) is None)


FIXED = [("peak throughput", "peak_ops", "ops/s", False),
         ("overall response time", "ort_ms", "ms", True),
         ("server CPU per op", "server_cpu_us_per_op", "us", True),
         ("server peak RSS", "server_peak_rss_kib", "KiB", True)]


def known(v):
    return isinstance(v, (int, float)) and v == v and v not in (float("inf"), float("-inf"))


def labels_of(doc):
    """(A label, B label): the comparison's, else the first two labels in the order runs ran."""
    comp = doc.get("comparison") or {}
    if comp.get("a") and comp.get("b"):
        return comp["a"], comp["b"]
    seen = []
    for run in doc.get("runs", []):
        if run.get("label") not in seen:
            seen.append(run.get("label"))
    return (seen + [None, None])[0], (seen + [None, None])[1]


def ratios_of(doc):
    """The A/B ratios of a --vs report: its comparison section when it has one, else computed."""
    comp = doc.get("comparison") or {}
    if isinstance(comp.get("ratios"), list):
        return [r for r in comp["ratios"] if isinstance(r, dict) and r.get("name")]
    return derive_ratios(doc)


def derive_ratios(doc):
    """The A/B ratios of a --vs report, computed from its runs (round i = the i-th run of A and
    the i-th run of B): peak throughput, ORT, server CPU per op, server peak RSS, then each figure
    of A's first run. A round where either value is unknown (null, not above zero for the fixed
    figures, B zero) is left out, as shale bench does in its own comparison table."""
    a_label, b_label = labels_of(doc)
    a_runs = [r for r in doc.get("runs", []) if r.get("label") == a_label]
    b_runs = [r for r in doc.get("runs", []) if r.get("label") == b_label]
    rounds = list(zip(a_runs, b_runs))
    if not rounds or b_label is None:
        return []

    def figure(run, name):
        for f in run.get("figures", []):
            if f.get("name") == name:
                return f.get("value")
        return None

    cands = [(name, unit, lower, lambda run, k=key: run.get(k), True)
             for name, key, unit, lower in FIXED]
    for f in a_runs[0].get("figures", []):
        name, unit = f.get("name"), f.get("unit") or ""
        lower = unit in ("ms", "us", "msec", "usec")
        cands.append((name, unit, lower, lambda run, n=name: figure(run, n), False))
    out = []
    for name, unit, lower, get, positive in cands:
        av, bv, ratio = [], [], []
        for a, b in rounds:
            x, y = get(a), get(b)
            ok_x = known(x) and (x > 0 or not positive)
            ok_y = known(y) and (y > 0 or not positive)
            if ok_x:
                av.append(x)
            if ok_y:
                bv.append(y)
            if ok_x and ok_y and y != 0:
                ratio.append(x / y)
        if not ratio:
            continue
        out.append({"name": name, "unit": unit, "lower_is_better": lower, "rounds": len(ratio),
                    "median": statistics.median(ratio), "min": min(ratio), "max": max(ratio),
                    "a_median": statistics.median(av) if av else None,
                    "b_median": statistics.median(bv) if bv else None})
    return out


def find_ratio(ratios, key):
    for r in ratios or []:
        if name_matches(r.get("name") or "", key):
            return r
    return None


def verdict(value, op, target):
    if op is None:
        return "-"
    if value is None:
        return "MISSING"
    return "PASS" if (value >= target if op == ">=" else value <= target) else "MISS"


def fmt(v, digits=None):
    if v is None:
        return "-"
    if digits is None:
        digits = 2 if abs(v) < 10 else (1 if abs(v) < 1000 else 0)
    return "%.*f" % (digits, v)


def seq_read_of_tcp(doc, tcp_mbs):
    """Per round of A: its seq read MB/s divided by the median TCP limit."""
    a_label = labels_of(doc or {})[0]
    out = []
    for run in (doc or {}).get("runs", []):
        if a_label is not None and run.get("label") != a_label:
            continue
        for fig in run.get("figures", []):
            if name_matches(fig.get("name") or "", SEQ_READ):
                scale = UNIT_SCALE_TO_MB.get(fig.get("unit"))
                if scale is not None and fig.get("value") is not None:
                    out.append(fig["value"] * scale / tcp_mbs)
                break
    return out


def seq_read_cpu(doc):
    """Per label: the median over rounds of the read point's server and load-generator CPU, each
    as a percentage of one core (the read is seq's last phase, so its run's last point)."""
    per = {}
    for run in (doc or {}).get("runs", []):
        if not any(name_matches(f.get("name") or "", SEQ_READ) for f in run.get("figures", [])):
            continue
        points = run.get("points") or []
        if points:
            per.setdefault(run.get("label"), []).append(points[-1])
    out = {}
    for label, points in per.items():
        srv = [p["server_busy_pct"] for p in points if known(p.get("server_busy_pct"))]
        load = [p["load_busy_pct"] for p in points if known(p.get("load_busy_pct"))]
        out[label] = {"server_pct": statistics.median(srv) if srv else None,
                      "load_pct": statistics.median(load) if load else None}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--tcp-mbs", required=True, help="loopback TCP limit(s) in MB/s, comma-separated")
    ap.add_argument("--config")
    ap.add_argument("--workloads", default="sfs2008 sfs2008-pool varmail varmail-pool seq seq-pool "
                    "meta meta-pool syncwrite syncwrite-pool memory-pool")
    args = ap.parse_args()

    tcp_all = [float(x) for x in args.tcp_mbs.split(",") if x]
    tcp = statistics.median(tcp_all)
    workloads = args.workloads.split()
    docs, problems = {}, []
    memory = None
    if MEMORY in workloads:
        memory, err = load(args.results, MEMORY)
        if err:
            problems.append(err)
        else:
            for ph in memory.get("phases", []):
                if ph.get("result") not in ("PASS", "MISS"):
                    problems.append("memory-pool %s: shale bench exited %s" % (
                        ph.get("phase"), ph.get("bench_exit")))
    for w in workloads:
        if w == MEMORY:
            continue
        doc, err = load(args.results, w)
        docs[w] = doc
        if err:
            problems.append(err)
            continue
        for run in doc.get("runs", []):
            if not run.get("valid", False):
                problems.append("%s against %s: %s failed and %s unanswered operations" % (
                    w, run.get("label"), run.get("failed"), run.get("unanswered")))
    ratios = {w: ratios_of(d) for w, d in docs.items() if d}
    for w, d in docs.items():
        if d and not ratios[w]:
            problems.append("%s.json: no A/B rounds to compare (not a --vs run?)" % w)

    a_label = b_label = None
    for doc in docs.values():
        if doc:
            a_label, b_label = labels_of(doc)
            break
    a_label, b_label = a_label or "A", b_label or "B"

    if args.config:
        with open(args.config, encoding="utf-8") as f:
            print(f.read().rstrip())
        print()

    head = "%-14s %-34s %10s %10s %7s %13s %8s %s" % (
        "workload", "goal: %s/%s" % (a_label, b_label), a_label, b_label, "ratio",
        "range", "target", "result")
    print(head)
    print("-" * len(head))
    summary = {"a": a_label, "b": b_label, "tcp_mbs": tcp, "tcp_mbs_all": tcp_all, "goals": [],
               "ratios": {}, "problems": problems}
    counts = {"PASS": 0, "MISS": 0, "MISSING": 0}

    def row(workload, label, unit, a, b, med, lo, hi, op, target):
        res = verdict(med, op, target) if workload in workloads else "SKIPPED"
        if res in counts:
            counts[res] += 1
        rng = "%s..%s" % (fmt(lo), fmt(hi)) if lo is not None else "-"
        print("%-14s %-34s %10s %10s %7s %13s %8s %s" % (
            workload, "%s (%s)" % (label, unit) if unit else label, fmt(a), fmt(b), fmt(med),
            rng, "%s %g" % (op, target) if op else "-", res))
        summary["goals"].append({"workload": workload, "goal": label, "unit": unit, "a": a,
                                 "b": b, "ratio_median": med, "ratio_min": lo, "ratio_max": hi,
                                 "op": op, "target": target, "result": res})

    for workload, label, key, op, target in GOALS:
        r = find_ratio(ratios.get(workload), key)
        if r is None:
            row(workload, label, None, None, None, None, None, None, op, target)
        else:
            row(workload, label, r.get("unit"), r.get("a_median"), r.get("b_median"),
                r.get("median"), r.get("min"), r.get("max"), op, target)
        if workload in READ_OF_TCP and label == "read vs Ganesha":
            fr = seq_read_of_tcp(docs.get(workload), tcp)
            a_read = r.get("a_median") if r else None
            row(workload, "read / loopback TCP limit", "MB/s", a_read, tcp,
                statistics.median(fr) if fr else None, min(fr) if fr else None,
                max(fr) if fr else None, ">=", SEQ_READ_OF_TCP_TARGET)

    # memory-pool: each phase's peak RSS (in the A column, MiB) against arc-max + 64 MiB.
    if MEMORY in workloads:
        phases = (memory or {}).get("phases") or [{"phase": p} for p in ("sfs2008", "write", "list")]
        for ph in phases:
            peak, goal = ph.get("peak_rss_kib"), ph.get("goal_kib")
            res = ph.get("result") if ph.get("result") in ("PASS", "MISS") else "MISSING"
            counts[res] += 1
            peak_mib = peak / 1024 if known(peak) else None
            goal_mib = goal / 1024 if known(goal) else None
            label = "peak RSS, %s" % ph.get("phase")
            print("%-14s %-34s %10s %10s %7s %13s %8s %s" % (
                MEMORY, label + " (MiB)", fmt(peak_mib), "-", "-", "-",
                "<= %s" % fmt(goal_mib, 0), res))
            summary["goals"].append({"workload": MEMORY, "goal": label, "unit": "MiB",
                                     "a": peak_mib, "b": None, "ratio_median": None,
                                     "ratio_min": None, "ratio_max": None, "op": "<=",
                                     "target": goal_mib, "result": res,
                                     "what": ph.get("what"), "seconds": ph.get("seconds")})

    print()
    print("loopback TCP limit (the %s column of the read / limit row): %s MB/s, median of %d iperf3 runs: %s" % (
        b_label,
        fmt(tcp, 0), len(tcp_all), ", ".join(fmt(x, 0) for x in tcp_all)))
    print("goals: %d PASS, %d MISS, %d MISSING (ratio = median over rounds of %s/%s)" % (
        counts["PASS"], counts["MISS"], counts["MISSING"], a_label, b_label))
    # Which core bounded each read: a load core near 100% means the load generator did.
    for w in READ_OF_TCP:
        cpu = seq_read_cpu(docs.get(w)) if w in workloads else {}
        if not cpu:
            continue
        summary.setdefault("seq_read_cpu", {})[w] = cpu
        print("%s read, CPU as a share of one core (median over rounds): %s" % (w, "; ".join(
            "%s: server %s%%, load %s%%" % (label, fmt(c["server_pct"], 0),
                                            fmt(c["load_pct"], 0))
            for label, c in cpu.items())))
    if MEMORY in workloads:
        print("memory-pool: a second Shale (pool only, --arc-max %s MiB, no comparison); the %s "
              "column is its peak RSS (VmHWM) over each phase, the target arc-max + 64 MiB" % (
                  (memory or {}).get("arc_max_mib", "?"), a_label))

    print()
    print("all ratios %s/%s (median, min..max over rounds):" % (a_label, b_label))
    for w in workloads:
        for r in ratios.get(w, []):
            better = "lower is better" if r.get("lower_is_better") else "higher is better"
            print("  %-14s %-34s %12s %12s %8s  %s..%s  (%s, %s rounds)" % (
                w, "%s (%s)" % (r.get("name"), r.get("unit")), fmt(r.get("a_median")),
                fmt(r.get("b_median")), fmt(r.get("median")), fmt(r.get("min")),
                fmt(r.get("max")), better, r.get("rounds")))
            summary["ratios"].setdefault(w, []).append(r)

    for p in problems:
        print("problem: %s" % p)
    with open(os.path.join(args.results, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
