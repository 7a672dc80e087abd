#!/usr/bin/env python3
"""run.py: runs every test registered in a meson build directory and prints the closing line.

Each registered test prints TAP-style lines ("ok - NAME" / "not ok - NAME"). This runner runs the
tests suite by suite, echoes their output, counts those lines, and counts a test program that
exits non-zero (or times out) without reporting a failure as one failure of its own, so a crash is
never lost. It ends with the line "N passed, N failed" and exits non-zero if anything failed.

The suite `fuzz` (the libFuzzer targets of tests/fuzz) is registered in its own clang build, the
directory `fuzz` beside BUILD_DIR (build/fuzz; see the Makefile), and is run from there.

Usage: tests/run.py BUILD_DIR [SUITE...]   (default suites: unit proto malformed kclient fuzz hostile)
"""
import json
import os
import re
import subprocess
import sys
import time

DEFAULT_SUITES = ["unit", "proto", "malformed", "kclient", "fuzz", "hostile"]
# Suites built in a build directory of their own, named relative to BUILD_DIR's parent.
SUITE_BUILD_DIRS = {"fuzz": "fuzz", "hostile": "release"}
OK_RE = re.compile(r"^ok\b")
NOT_OK_RE = re.compile(r"^not ok\b")


def test_suites(test):
    # meson prefixes suite names with the project name ("shale:unit").
    return {s.split(":")[-1] for s in test.get("suite", [])}


def run_one(test):
    env = dict(os.environ)
    env.update(test.get("env") or {})
    timeout = test.get("timeout") or 60
    started = time.monotonic()
    proc = subprocess.Popen(test["cmd"], cwd=test.get("workdir") or None, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace",
                            start_new_session=True)
    passed = failed = 0
    deadline = started + timeout
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
    for line in out.splitlines():
        print("  " + line)
        if NOT_OK_RE.match(line):
            failed += 1
        elif OK_RE.match(line):
            passed += 1
    elapsed = time.monotonic() - started
    if timed_out:
        print(f"not ok - {test['name']}: timed out after {timeout} s")
        failed += 1
    elif proc.returncode != 0 and failed == 0:
        print(f"not ok - {test['name']}: exited with status {proc.returncode} without reporting a failure")
        failed += 1
    elif passed + failed == 0:
        print(f"not ok - {test['name']}: reported no results")
        failed += 1
    print(f"# {test['name']}: {passed} passed, {failed} failed ({elapsed:.1f} s)", flush=True)
    del deadline
    return passed, failed


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    build_dir = sys.argv[1]
    suites = sys.argv[2:] or DEFAULT_SUITES
    tests_of = {}

    def tests_in(directory):
        if directory not in tests_of:
            tests_of[directory] = json.loads(subprocess.check_output(
                ["meson", "introspect", "--tests", directory]))
        return tests_of[directory]

    total_passed = total_failed = 0
    for suite in suites:
        directory = build_dir
        if suite in SUITE_BUILD_DIRS:
            directory = os.path.join(os.path.dirname(os.path.normpath(build_dir)),
                                     SUITE_BUILD_DIRS[suite])
        chosen = [t for t in tests_in(directory) if suite in test_suites(t)]
        print(f"=== suite {suite}: {len(chosen)} test programs", flush=True)
        for test in chosen:
            print(f"--- {test['name']}", flush=True)
            passed, failed = run_one(test)
            total_passed += passed
            total_failed += failed
    print(f"{total_passed} passed, {total_failed} failed")
    return 0 if total_failed == 0 and total_passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
