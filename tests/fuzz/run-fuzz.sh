#!/usr/bin/env bash
# run-fuzz.sh: runs one libFuzzer target as a test and prints TAP lines: first every input of its
# corpus, once each (the regression test: bugs found before stay fixed), then SECONDS of fuzzing
# that starts from the corpus.
#
# Usage: tests/fuzz/run-fuzz.sh TARGET CORPUS_DIR SECONDS WORK_DIR
#
# The corpus in the tree is only read: inputs the run finds that reach new code go to
# WORK_DIR/new, and a crashing input (crash, sanitizer report, leak, a run over 10 s, memory
# over 2 GiB) to WORK_DIR/artifacts, whose path is printed. With FUZZ_MERGE=1 in the environment
# the new inputs that add coverage are merged into CORPUS_DIR afterwards (libFuzzer's -merge=1,
# which keeps the corpus minimal). `make fuzz` runs this for every target (see README.md).
set -uo pipefail
if [[ $# -ne 4 ]]; then
	echo "usage: $0 TARGET CORPUS_DIR SECONDS WORK_DIR" >&2
	exit 2
fi
target=$1 corpus=$2 seconds=$3 work=$4
name=$(basename "$target")
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rm -rf "$work"
mkdir -p "$work/new" "$work/artifacts"
fail=0

# Prints the head of a failed run's report, indented as TAP diagnostics.
report() {
	grep -v '^\(Running\|Executed\|INFO\):\|^#[0-9]' "$1" | head -n 40 | sed 's/^/#   /'
}

shopt -s nullglob
inputs=("$corpus"/*)
if [[ ${#inputs[@]} -eq 0 ]]; then
	echo "not ok - $name: corpus $corpus is empty or missing"
	fail=1
elif "$target" -timeout=10 -rss_limit_mb=2048 "${inputs[@]}" >"$work/replay.log" 2>&1; then
	echo "ok - $name: replays its ${#inputs[@]} corpus inputs"
else
	bad=$(grep '^Running: ' "$work/replay.log" | tail -n 1 | cut -d' ' -f2-)
	echo "not ok - $name: corpus input ${bad:-?} fails"
	report "$work/replay.log"
	fail=1
fi

if "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/artifacts/" "$work/new" "$corpus" >"$work/fuzz.log" 2>&1; then
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
	echo "ok - $name: ${seconds} s of fuzzing, ${runs:-?} runs, no crash"
else
	saved=$(sed -n 's/.*Test unit written to //p' "$work/fuzz.log" | head -n 1)
	echo "not ok - $name: fuzzing found a failing input, saved as ${saved:-? (see $work/fuzz.log)}"
	report "$work/fuzz.log"
	fail=1
fi

if [[ ${FUZZ_MERGE:-0} == 1 && $fail -eq 0 ]]; then
	"$target" -merge=1 "$corpus" "$work/new" >"$work/merge.log" 2>&1 ||
		{ echo "not ok - $name: merging the new inputs into $corpus failed"; fail=1; }
fi
exit "$fail"
