#!/bin/bash
# snapshot.sh: what snapshots cost on a served pool (docs/performance.md, "Snapshots").
#
# What one run does
#   1. Creates a pool "snap" on one file of SNAP_POOL_SIZE (4G) in WORK/pool with the file system
#      snap/fs and serves it (--port 0, --no-portmap), the server pinned to CPU 0 and the load to
#      CPU 1 when there are two CPUs, as `make bench` does.
#   2. sfs2008's peak: a short curve (`shale bench sfs2008 --rate auto --points 4`), which also
#      creates the file set (SNAP_FILESET_MB, 512).
#   3. Half of that peak for SNAP_SECONDS (40) twice: once alone, once while `shale snapshot
#      create` runs every SNAP_EVERY (2) seconds (the server takes each one in the txg it forces).
#      Reported: each create's wall time (median, p90, max: the command connects to the server,
#      which forces a txg and waits for it) and the point's response time in both runs, and their
#      ratio (the goal: within 10%).
#   4. A file of SNAP_CHANGE_MB (1024) copied in with nfs-cp after a snapshot; the server stops;
#      `shale fs rollback -r` to that snapshot, offline (the command imports the pool, rolls back
#      in one txg, exports it: its wall time includes the import and the export), then `shale
#      pool check` (the freeing of the changed blocks is in the background and finishes before the
#      export returns).
# Prints the figures, one per line, and writes them to RESULTS/snapshot-summary.txt.
#
# Usage: bench/snapshot.sh [--shale PATH] [--results DIR] [--work DIR]
# Needs nfs-cp and two CPUs for meaningful figures; an idle machine.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
shale=$top/build/release/tools/shale
results=$top/bench/results
work=${TMPDIR:-/tmp}/shale-snapshot-bench
while [ $# -gt 0 ]; do
	case "$1" in
	--shale) shale=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	*) echo "usage: $0 [--shale PATH] [--results DIR] [--work DIR]" >&2; exit 2 ;;
	esac
done
pool_size=${SNAP_POOL_SIZE:-4G}
fileset_mb=${SNAP_FILESET_MB:-512}
seconds=${SNAP_SECONDS:-40}
every=${SNAP_EVERY:-2}
change_mb=${SNAP_CHANGE_MB:-1024}

die() { echo "snapshot.sh: $*" >&2; exit 1; }
pin_server=() pin_load=()
if [ "$(nproc)" -ge 2 ]; then
	pin_server=(taskset -c 0)
	pin_load=(taskset -c 1)
fi
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work/pool" "$work/state" "$results" || die "cannot create $work"
cd "$work" || die "cannot enter $work"
"$shale" pool create snap pool/snap0.img --size "$pool_size" >/dev/null || die "pool create"
"$shale" fs create snap/fs -d pool >/dev/null || die "fs create"
echo "snap/fs 127.0.0.1(rw,insecure,no_root_squash)" >exports
"${pin_server[@]}" "$shale" serve --exports exports --state state --pool-dir pool --port 0 \
	--no-portmap --ready-file ready --log-level warn >serve.log 2>&1 &
pid=$!
for _ in $(seq 400); do grep -q '^port=' ready 2>/dev/null && break; sleep 0.05; done
port=$(sed -n 's/^port=//p' ready)
[ -n "$port" ] || die "the server did not start: $(cat serve.log)"
bench() { "${pin_load[@]}" "$shale" bench sfs2008 --server "127.0.0.1:$port" --export /snap/fs \
	--fileset-mb "$fileset_mb" --quiet "$@"; }
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0]$2)" "$1"; }

# 2. the peak
bench --rate auto --points 4 --warmup 3 --runtime 10 --json peak.json >peak.txt 2>&1 ||
	die "the peak's curve failed: $(tail -5 peak.txt)"
peak=$(field peak.json "['peak_ops']")
half=$(python3 -c "print(int($peak / 2))")

# 3. half the peak, without and with snapshots
bench --rate "$half" --points 1 --warmup 3 --runtime "$seconds" --json plain.json >plain.txt 2>&1 ||
	die "the point without snapshots failed: $(tail -5 plain.txt)"
bench --rate "$half" --points 1 --warmup 3 --runtime "$seconds" --json snaps.json >snaps.txt 2>&1 &
load=$!
sleep 3
n=0
: >creates.txt
while kill -0 "$load" 2>/dev/null; do
	t0=$(date +%s%N)
	"$shale" snapshot create "snap/fs@s$n" -d pool >/dev/null 2>>creates.err || echo "failed" >>creates.txt
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000)) >>creates.txt
	n=$((n + 1))
	sleep "$every"
done
wait "$load" || die "the point with snapshots failed: $(tail -5 snaps.txt)"
ort() { field "$1" "['points'][0]['mean_ms']"; }
plain_ms=$(ort plain.json)
snaps_ms=$(ort snaps.json)
create_stats=$(python3 - creates.txt <<'EOF'
import statistics, sys
us = [int(l) for l in open(sys.argv[1]) if l.strip().isdigit()]
fails = sum(1 for l in open(sys.argv[1]) if l.strip() == "failed")
us.sort()
p90 = us[max(0, int(len(us) * 0.9) - 1)] if us else 0
print(f"{len(us)} creates, {fails} failed: median {statistics.median(us) / 1000:.1f} ms, "
      f"p90 {p90 / 1000:.1f} ms, max {max(us) / 1000:.1f} ms" if us else "no create ran")
EOF
)

# 4. rollback of a file system with change_mb changed since its snapshot
"$shale" snapshot create snap/fs@before -d pool >/dev/null || die "snapshot before the change"
head -c "$((change_mb * 1048576))" /dev/urandom >change.bin
nfs-cp change.bin "nfs://127.0.0.1/snap/fs/change.bin?nfsport=$port&mountport=$port&version=3" \
	>/dev/null || die "nfs-cp of the change failed"
rm -f change.bin
kill "$pid" && wait "$pid"
pid=
t0=$(date +%s%N)
"$shale" fs rollback -r snap/fs@before -d pool >/dev/null || die "rollback failed"
t1=$(date +%s%N)
rollback_ms=$(((t1 - t0) / 1000000))
check=$("$shale" pool check snap -d pool 2>&1 | tail -1)

{
	echo "sfs2008 peak: $peak ops/s; half: $half ops/s for $seconds s"
	echo "snapshot create every $every s while served at half the peak: $create_stats"
	echo "mean response at half the peak: $plain_ms ms without snapshots, $snaps_ms ms with" \
		"(ratio $(python3 -c "print(f'{$snaps_ms / $plain_ms:.2f}')"))"
	echo "rollback of $change_mb MiB changed since the snapshot (offline, import and export" \
		"included): $rollback_ms ms"
	echo "check after it: $check"
} | tee "$results/snapshot-summary.txt"
