#!/usr/bin/env python3
"""soak-summary.py: the verdict of a soak run (bench/soak.sh): one PASS or FAIL line per check and
a table to paste into docs/performance.md; writes RESULTS/soak-summary.json. Exit 1 on any FAIL.

Reads from RESULTS: soak.json (the soak's shale bench report), soak-peak.json (the peak curve, if
one was run), soak-samples.csv (t_s, rss_kib, fds, threads, scrub_running), soak-events.csv
(t_s, event, detail), soak-checks.txt (checks soak.sh made itself: PASS|FAIL, name, detail, tab
separated), soak-serve-events.txt (the server's log lines about reloads and scrubs) and
soak-config.txt. The flatness rule is in soak.sh's header."""
import argparse
import csv
import json
import os
import re
import statistics
import sys


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)["runs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def windows(samples, warmup, interval):
    """The samples from t >= warmup in windows of `interval` seconds; a last window shorter than
    half an interval joins the one before it."""
    out = []
    for s in samples:
        if s["t"] < warmup:
            continue
        i = int((s["t"] - warmup) // interval)
        while len(out) <= i:
            out.append([])
        out[i].append(s)
    out = [w for w in out if w]
    if len(out) >= 2 and out[-1][-1]["t"] - out[-1][0]["t"] < interval / 2:
        out[-2].extend(out.pop())
    return out


def flat(name, key, samples, warmup, interval, pct, unit, scale, min_abs=0.0):
    """The flatness check (soak.sh's header): PASS when every window's median is within pct % of
    the first window's, or within min_abs of it when that is more (fds are few and whole: with
    20 open, 5% is one)."""
    ws = windows(samples, warmup, interval)
    if not ws:
        return ("FAIL", name, "no sample after the %d s warm-up" % warmup), {}
    levels = [statistics.median(s[key] for s in w) for w in ws]
    base = levels[0]
    after = [s[key] for w in ws for s in w]
    dev = [(lv - base) / base * 100 if base else 0.0 for lv in levels]
    worst = max(dev, key=abs)
    limit = max(pct, min_abs / base * 100) if base else pct
    ok = base > 0 and all(abs(d) <= limit + 1e-9 for d in dev)
    detail = ("%d window%s of %d s after %d s: levels (medians) %s%s, the furthest %+.1f%% from the first "
              "(limit %s); samples after warm-up %s..%s, under load %s..%s" % (
                  len(ws), "" if len(ws) == 1 else "s", interval, warmup, " ".join(fmt(lv / scale) for lv in levels), unit and " " + unit, worst,
                  "%g%%" % pct if limit == pct else "%g%% or %g %s: %.1f%%" % (pct, min_abs, unit, limit),
                  fmt(min(after) / scale), fmt(max(after) / scale),
                  fmt(min(s[key] for s in samples) / scale), fmt(max(s[key] for s in samples) / scale)))
    fig = {"levels": [lv / scale for lv in levels], "level_pct": dev, "after_min": min(after) / scale,
           "after_max": max(after) / scale, "run_min": min(s[key] for s in samples) / scale,
           "run_max": max(s[key] for s in samples) / scale, "unit": unit.strip()}
    return ("PASS" if ok else "FAIL", name, detail), fig


def cpu_figures(samples):
    """The server's share of a core and the machine's CPU pressure (PSI "some": the share of the
    time in which some runnable task waited for a CPU) over the load, and their extremes over the
    sampling steps: information beside the checks, to tell the server's own stalls from other
    work's."""
    steps = []
    for p, q in zip(samples, samples[1:]):
        dt = q["t"] - p["t"]
        if dt > 0:
            steps.append(((q["cpu"] - p["cpu"]) / dt * 100, (q["psi"] - p["psi"]) / 1e4 / dt))
    if not steps:
        return None
    dt = samples[-1]["t"] - samples[0]["t"]
    f = {"server_pct": (samples[-1]["cpu"] - samples[0]["cpu"]) / dt * 100,
         "server_pct_min": min(x for x, _ in steps), "server_pct_max": max(x for x, _ in steps),
         "psi_pct": (samples[-1]["psi"] - samples[0]["psi"]) / 1e4 / dt,
         "psi_pct_max": max(y for _, y in steps)}
    return f if all(v == v for v in f.values()) else None


def fmt(v):
    return "%.0f" % v if abs(v - round(v)) < 0.05 or abs(v) >= 100 else "%.1f" % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--interval", type=int, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--flat-pct", type=float, required=True)
    ap.add_argument("--load-pct", type=float, required=True)
    ap.add_argument("--reloads", type=int, required=True)
    ap.add_argument("--peak", type=float)
    ap.add_argument("--target", type=float, required=True)
    a = ap.parse_args()
    r = lambda name: os.path.join(a.results, name)
    lines = []
    fig = {}

    # Checks made by soak.sh.
    shell = {}
    with open(r("soak-checks.txt")) as f:
        for row in f:
            verdict, name, detail = row.rstrip("\n").split("\t", 2)
            shell[name] = (verdict, name, detail)
    bench_exit = shell.pop("bench exit", ("FAIL", "bench exit", "no exit status recorded"))

    # calls and rate, from the bench's report.
    run = load_json(r("soak.json"))
    pt = run["points"][0] if run and run.get("points") else None
    if pt is None:
        lines.append(("FAIL", "calls", "no report from the soak's bench (%s)" % bench_exit[2]))
        lines.append(("FAIL", "rate", "no report from the soak's bench"))
    else:
        ok = bench_exit[0] == "PASS" and run["failed"] == 0 and run["unanswered"] == 0
        lines.append(("PASS" if ok else "FAIL", "calls", "%d failed and %d unanswered of %d calls; %s" % (
            run["failed"], run["unanswered"], pt["ops"], bench_exit[2])))
        lines.append(("PASS" if pt["valid"] else "FAIL", "rate",
                      "achieved %.0f of %.0f ops/s requested (%.1f%%; a valid point needs %.0f%%) over %.0f s" % (
                          pt["achieved_ops"], pt["requested_ops"], pt["achieved_ops"] / pt["requested_ops"] * 100,
                          run["valid_fraction"] * 100, pt["seconds"])))
        fig.update({"target_ops": pt["requested_ops"], "achieved_ops": pt["achieved_ops"], "calls": pt["ops"],
                    "seconds": pt["seconds"], "failed": run["failed"], "unanswered": run["unanswered"],
                    "response_mean_ms": pt["mean_sent_ms"], "queued_mean_ms": pt["mean_ms"],
                    "queued_p99_ms": pt["p99_ms"], "server_cpu_us_per_op": run.get("server_cpu_us_per_op"),
                    "server_peak_rss_kib": run.get("server_peak_rss_kib")})
    fig["peak_ops"] = a.peak
    fig["load_pct"] = a.load_pct if a.peak else None

    # rss and fds.
    samples, after_load = [], []
    with open(r("soak-samples.csv")) as f:
        for row in csv.DictReader(f):
            (samples if row["phase"] == "load" else after_load).append(
                {"t": float(row["t_s"]), "rss": int(row["rss_kib"]), "fds": int(row["fds"]),
                 "threads": int(row["threads"] or 0), "cpu": float(row.get("server_cpu_s") or "nan"),
                 "psi": float(row.get("cpu_psi_us") or "nan")})
    if samples:
        line, fig["rss_mib"] = flat("rss", "rss", samples, a.warmup, a.interval, a.flat_pct, "MiB", 1024.0)
        lines.append(line)
        line, fig["fds"] = flat("fds", "fds", samples, a.warmup, a.interval, a.flat_pct, "fds", 1.0, 1.0)
        lines.append(line)
        fig["threads"] = [min(s["threads"] for s in samples), max(s["threads"] for s in samples)]
        fig["samples"] = len(samples)
        fig["cpu"] = cpu_figures(samples)
        if after_load:
            fig["after_load"] = {"rss_mib": after_load[-1]["rss"] / 1024.0, "fds": after_load[-1]["fds"],
                                 "threads": after_load[-1]["threads"]}
    else:
        lines.append(("FAIL", "rss", "no sample"))
        lines.append(("FAIL", "fds", "no sample"))

    # scrubs, from the events.
    started = done_ok = 0
    busy, bad, secs = [], [], []
    with open(r("soak-events.csv")) as f:
        for row in csv.DictReader(f):
            ev, detail = row["event"], row["detail"]
            if ev == "scrub":
                started += 1
            elif ev == "scrub_busy":
                busy.append(detail)
            elif ev == "scrub_done":
                m = re.match(r"rc=(\d+) after (\d+)s: (.*)", detail)
                if m and m.group(1) == "0" and re.search(r"\b0 problems?\b", m.group(3)):
                    done_ok += 1
                    secs.append(int(m.group(2)))
                else:
                    bad.append(detail)
    ok = started > 0 and done_ok == started and not busy and not bad
    detail = "%d started, %d finished clean%s" % (started, done_ok,
                                                   ", %d-%d s each" % (min(secs), max(secs)) if secs else "")
    if busy:
        detail += "; still running at a turn or at the end: " + "; ".join(busy)
    if bad:
        detail += "; not clean: " + "; ".join(bad)
    lines.append(("PASS" if ok else "FAIL", "scrubs", detail))
    fig["scrubs"] = {"started": started, "clean": done_ok, "seconds": secs}

    # reloads: the server's log must show each one, in order, with the change it was sent (odd
    # reloads add soak/spare, even ones remove it).
    logged = []
    with open(r("soak-serve-events.txt")) as f:
        logged = [ln for ln in f if "reload: " in ln]
    want = ["reload: serving 2 exports (1 kept, 1 new, 0 gone)" if i % 2 == 1
            else "reload: serving 1 export (1 kept, 0 new, 1 gone)" for i in range(1, a.reloads + 1)]
    wrong = [i + 1 for i, w in enumerate(want) if i >= len(logged) or w not in logged[i]]
    ok = a.reloads > 0 and not wrong and len(logged) == a.reloads
    lines.append(("PASS" if ok else "FAIL", "reloads",
                  "%d sent, %d logged%s" % (a.reloads, len(logged),
                                            ", each with the change it was sent" if ok else
                                            "; not as expected: reload %s" % ", ".join(map(str, wrong[:5])))))
    fig["reloads"] = {"sent": a.reloads, "logged": len(logged)}

    for name in ("answers", "status", "stop", "check", "log"):
        lines.append(shell.pop(name, ("FAIL", name, "not checked (the run stopped before)")))
    lines.extend(shell.values())

    try:
        with open(r("soak-config.txt")) as f:
            print(f.read().rstrip())
    except OSError:
        pass
    print()
    for verdict, name, detail in lines:
        print("soak: %s %-8s %s" % (verdict, name, detail))
    cpu = fig.get("cpu")
    if cpu:
        print("soak: (cpu)    the server used %.0f%% of a core (%.0f..%.0f%% between samples); some task "
              "waited for a CPU %.0f%% of the time (PSI; up to %.0f%% between samples)" % (
                  cpu["server_pct"], cpu["server_pct_min"], cpu["server_pct_max"], cpu["psi_pct"],
                  cpu["psi_pct_max"]))
    failed = [name for verdict, name, _ in lines if verdict != "PASS"]
    print("soak: %s" % ("PASS: every check passed" if not failed else "FAIL: " + ", ".join(failed)))

    # The table for docs/performance.md.
    if pt is not None and fig.get("rss_mib") and fig.get("fds"):
        rss, fds = fig["rss_mib"], fig["fds"]
        tgt = "%s ops/s" % format(round(fig["target_ops"]), ",")
        if a.peak:
            tgt += " (%g%% of the peak, %s ops/s)" % (a.load_pct, format(round(a.peak), ","))

        def span(f, unit):
            return "%s..%s%s after warm-up (window levels %s, at most %+.1f%% from the first); %s..%s under load" % (
                fmt(f["after_min"]), fmt(f["after_max"]), unit and " " + unit, " ".join(fmt(v) for v in f["levels"]),
                max(f["level_pct"], key=abs), fmt(f["run_min"]), fmt(f["run_max"]))
        print()
        print("| figure | value |")
        print("| --- | --- |")
        print("| target | %s |" % tgt)
        print("| achieved | %s ops/s over %.0f s, %s calls |" % (
            format(round(fig["achieved_ops"]), ","), fig["seconds"], format(fig["calls"], ",")))
        print("| response time | %.2f ms mean (from the send); queued %.2f ms mean, %.2f ms p99 |" % (
            fig["response_mean_ms"], fig["queued_mean_ms"], fig["queued_p99_ms"]))
        if fig.get("server_cpu_us_per_op"):
            print("| server CPU per op | %.1f us |" % fig["server_cpu_us_per_op"])
        print("| failed calls | %d failed, %d unanswered |" % (fig["failed"], fig["unanswered"]))
        al = fig.get("after_load")
        print("| resident memory (VmRSS) | %s%s |" % (span(rss, "MiB"),
                                                     "; %s MiB after it" % fmt(al["rss_mib"]) if al else ""))
        print("| open fds | %s%s |" % (span(fds, ""), "; %d after it" % al["fds"] if al else ""))
        print("| threads | %d..%d |" % tuple(fig["threads"]))
        if cpu:
            print("| server CPU, CPU pressure | %.0f%% of a core (%.0f..%.0f%% between samples); some task waited "
                  "for a CPU %.0f%% of the time (up to %.0f%%) |" % (
                      cpu["server_pct"], cpu["server_pct_min"], cpu["server_pct_max"], cpu["psi_pct"],
                      cpu["psi_pct_max"]))
        sc = fig["scrubs"]
        print("| scrubs | %d started, %d clean%s |" % (
            sc["started"], sc["clean"], ", %d-%d s each" % (min(sc["seconds"]), max(sc["seconds"]))
            if sc["seconds"] else ""))
        print("| reloads | %d sent, %d logged |" % (fig["reloads"]["sent"], fig["reloads"]["logged"]))

    with open(r("soak-summary.json"), "w") as f:
        json.dump({"format": "shale-soak/1", "checks": [{"result": v, "name": n, "detail": d}
                                                         for v, n, d in lines],
                   "figures": fig, "pass": not failed}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
