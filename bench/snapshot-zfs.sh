#!/bin/bash
# snapshot-zfs.sh: snapshot create latency of Shale beside zfs-fuse's, in one run, under the same
# load (docs/performance.md, "Snapshots").
#
# What one run does
#   1. Re-runs itself in a private mount namespace (unshare -m) with a tmpfs over /run, so that
#      zfs-fuse's control socket (/run/zfs/zfs_socket) and lock (/run/lock/zfs) and its FUSE mount
#      are this run's alone. Installs Debian's zfs-fuse with apt-get when it is missing.
#   2. Two pools on files of SNAPZ_POOL_SIZE (2G), both written with zeros first: Shale's "snap"
#      (`shale pool create`, file system snap/fs) and zfs-fuse's "zt" (`zpool create`, its root
#      file system mounted in WORK/zt). zfs-fuse's daemon runs pinned to CPU 0.
#   3. Two `shale serve` pinned to CPU 0: one serves snap/fs from the pool, the other serves the
#      zfs-fuse mount through Shale's posix back end, so the same NFS front end and the same
#      `shale bench sfs2008` (on CPU 1) drive both: the load is the same stream of calls.
#   4. Idle: SNAPZ_IDLE (10) `shale snapshot create` on the served pool and as many `zfs snapshot`
#      on zt, one after another.
#   5. The rate: half of the lower of the two peaks (short curves, --rate auto --points 4; the
#      zfs-fuse side's is the lower by far), or SNAPZ_RATE. Then SNAPZ_ROUNDS (2) rounds of
#      Shale then zfs-fuse: sfs2008 at that rate for SNAPZ_SECONDS (30) while a snapshot is taken
#      every SNAPZ_EVERY (2) seconds (`shale snapshot create snap/fs@zN`, `zfs snapshot zt@zN`),
#      each command timed whole (process start to exit, as a user would see it).
#   6. Stops everything, exports zt, checks Shale's pool (`shale pool check`).
# Prints the figures and the ratio Shale / zfs-fuse of the median create latency, and writes them
# to RESULTS/snapshot-zfs.txt. If zfs-fuse cannot run here (no /dev/fuse, no FUSE in the kernel,
# the daemon exits), that line says so with the daemon's own error, and the script exits 3.
#
# Usage: bench/snapshot-zfs.sh [--shale PATH] [--results DIR] [--work DIR] [--quick]
#   --quick: SNAPZ_FILESET_MB 64, SNAPZ_SECONDS 15, SNAPZ_ROUNDS 1.
# Needs root (the namespace, apt-get, FUSE).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$here/lib.sh"
inside=0 # 1 once re-run in zfs-fuse's namespace (zfs_fuse_namespace)
bench_own_opt() { [ "$1" = --inside ] && inside=1; }
bench_parse_common_opts snapshot-zfs.sh shale-snapshot-zfs "$@"
out=$results/snapshot-zfs.txt

zfs_fuse_namespace

if [ "$quick" = 1 ]; then
	d_fileset=64 d_seconds=15 d_rounds=1
else
	d_fileset=256 d_seconds=30 d_rounds=2
fi
pool_size=${SNAPZ_POOL_SIZE:-2G}
fileset_mb=${SNAPZ_FILESET_MB:-$d_fileset}
seconds=${SNAPZ_SECONDS:-$d_seconds}
rounds=${SNAPZ_ROUNDS:-$d_rounds}
every=${SNAPZ_EVERY:-2}
idle=${SNAPZ_IDLE:-10}
pin_server=() pin_load=()
if [ "$(nproc)" -ge 2 ]; then
	pin_server=(taskset -c 0)
	pin_load=(taskset -c 1)
fi

pids=() zfs_pid=
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	zfs_fuse_stop zt
	rm -rf "$work"
}
trap cleanup EXIT
zfs_fuse_own_run
rm -rf "$work"
mkdir -p "$work/pool" "$work/state" "$work/state-zfs" "$work/zt" || die "cannot create $work"
cd "$work" || die "cannot enter $work"

# ---- zfs-fuse ---------------------------------------------------------------------------------
zfs_version=$(dpkg-query -W -f='${Version}' zfs-fuse 2>/dev/null)
why=
[ -c /dev/fuse ] || why="no /dev/fuse: $(ls -l /dev/fuse 2>&1)"
grep -qw fuse /proc/filesystems || why="${why:+$why; }no fuse in /proc/filesystems (the kernel's FUSE module is not loaded)"
if [ -z "$why" ]; then
	zfs_fuse_start "${pin_server[@]}"
fi
if [ -z "$why" ]; then
	dd if=/dev/zero of=zt0.img bs=1M count="$(numfmt --from=iec "$pool_size" | awk '{print int($1 / 1048576)}')" \
		status=none || die "cannot write zt0.img"
	zerr=$(zpool create -f -m "$work/zt" zt "$work/zt0.img" 2>&1) || why="zpool create: $zerr"
fi
if [ -n "$why" ]; then
	note "zfs-fuse $zfs_version cannot run here: $why"
	bench_finish "$out"
	exit 3
fi

# ---- Shale ------------------------------------------------------------------------------------
"$shale" pool create snap pool/snap0.img --size "$pool_size" >/dev/null || die "pool create"
"$shale" fs create snap/fs -d pool >/dev/null || die "fs create"
echo "snap/fs 127.0.0.1(rw,insecure,no_root_squash)" >state/exports
echo "$work/zt 127.0.0.1(rw,insecure,no_root_squash)" >state-zfs/exports
serve() { # $1: state directory, then shale serve options; sets started_pid, started_port
	local st=$1
	shift
	"${pin_server[@]}" "$shale" serve --exports "$st/exports" --state "$st" "$@" --port 0 \
		--no-portmap --ready-file "$st/ready" --log-level warn >"$st/serve.log" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
	started_port=$(serve_wait "$started_pid" "$st/ready")
	[ -n "$started_port" ] || die "shale serve did not start: $(tail -5 "$st/serve.log")"
}
serve state --pool-dir pool
spid=$started_pid sport=$started_port
serve state-zfs
zport=$started_port
bench() { # $1: port, $2: export, then options
	local p=$1 e=$2
	shift 2
	"${pin_load[@]}" "$shale" bench sfs2008 --server "127.0.0.1:$p" --export "$e" \
		--fileset-mb "$fileset_mb" --quiet "$@"
}
timed() { # $1: file of "start_ns end_ns" lines (or "failed"), then the command
	local f=$1 t0 t1
	shift
	t0=$(now_ns)
	if "$@" >/dev/null 2>>"$f.err"; then
		t1=$(now_ns)
		echo "$t0 $t1" >>"$f"
	else
		echo "failed" >>"$f"
	fi
}
median_ms() { # $1: a file of timed commands; prints "median p90 max count failed"
	python3 - "$1" <<-'EOF'
	import statistics, sys
	lines = [l.split() for l in open(sys.argv[1])]
	ms = sorted((int(l[1]) - int(l[0])) / 1e6 for l in lines if len(l) == 2)
	fails = sum(1 for l in lines if l == ["failed"])
	if ms:
	    print("%.1f %.1f %.1f %d %d" % (statistics.median(ms), ms[max(0, -(-len(ms) * 9 // 10) - 1)],
	                                    max(ms), len(ms), fails))
	else:
	    print("0 0 0 0 %d" % fails)
	EOF
}
describe() { # $1: a file of timed commands
	median_ms "$1" | awk '{printf "median %s ms, p90 %s ms, max %s ms (%d, %d failed)", $1, $2, $3, $4, $5}'
}
zs=0 ss=0
shale_snap() { ss=$((ss + 1)); timed "$1" "$shale" snapshot create "snap/fs@z$ss" -d pool; }
zfs_snap() { zs=$((zs + 1)); timed "$1" zfs snapshot "zt@z$zs"; }

note "zfs-fuse $zfs_version (daemon pinned to CPU 0, pool zt on a file of $pool_size, served by" \
	"Shale's posix back end) beside Shale's pool (a file of $pool_size); both servers on CPU 0," \
	"the load on CPU 1"
: >idle-shale.txt
: >idle-zfs.txt
for _ in $(seq "$idle"); do
	shale_snap idle-shale.txt
	zfs_snap idle-zfs.txt
	sleep 0.2
done
note "idle, shale snapshot create: $(describe idle-shale.txt)"
note "idle, zfs snapshot: $(describe idle-zfs.txt)"

# the rate: half of the lower peak
peak_of() { # $1: port, $2: export, $3: json
	bench "$1" "$2" --rate auto --points 4 --warmup 2 --runtime 5 --json "$3" >"$3.txt" 2>&1 ||
		die "the peak's curve on $2 failed: $(tail -5 "$3.txt")"
	python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0]['peak_ops'])" "$3"
}
shale_peak=$(peak_of "$sport" /snap/fs peak-shale.json)
zfs_peak=$(peak_of "$zport" "$work/zt" peak-zfs.json)
if [ -z "$shale_peak" ] || { [ -z "$zfs_peak" ] && [ -z "${SNAPZ_RATE:-}" ]; }; then
	# the posix back end over zfs-fuse has answered NFS3ERR_STALE while making the file set
	note "a peak's curve failed (Shale's pool: ${shale_peak:-failed}, zfs-fuse: ${zfs_peak:-failed})"
	bench_finish "$out"
	exit 1
fi
rate=${SNAPZ_RATE:-$(python3 -c "print(int(min($shale_peak, $zfs_peak) / 2))")}
note "sfs2008 peaks (short curves, file set $fileset_mb MB): Shale's pool $shale_peak ops/s," \
	"zfs-fuse through the posix back end $zfs_peak ops/s; both loaded at $rate ops/s"

: >load-shale.txt
: >load-zfs.txt
for r in $(seq "$rounds"); do
	for side in shale zfs; do
		if [ "$side" = shale ]; then port=$sport export=/snap/fs; else port=$zport export=$work/zt; fi
		bench "$port" "$export" --rate "$rate" --points 1 --warmup 3 --runtime "$seconds" \
			--json "load-$side-$r.json" >"load-$side-$r.txt" 2>&1 &
		load=$!
		sleep 3
		while kill -0 "$load" 2>/dev/null; do
			"${side}_snap" "load-$side.txt"
			sleep "$every"
		done
		# zfs-fuse has left calls unanswered past shale bench's 30 s timeout here: say so,
		# and keep the snapshots' timings
		wait "$load" || note "the load on $side, round $r: $(grep -m1 -e 'RUN FAILED' -e 'unanswered' \
			"load-$side-$r.txt" || tail -n 1 "load-$side-$r.txt")"
	done
done
read -r s_med _ <<<"$(median_ms load-shale.txt)"
read -r z_med _ <<<"$(median_ms load-zfs.txt)"
note "under sfs2008 at $rate ops/s, a snapshot every $every s, $rounds rounds of $seconds s:"
note "  shale snapshot create: $(describe load-shale.txt)"
note "  zfs snapshot (zfs-fuse): $(describe load-zfs.txt)"
note "  ratio shale / zfs-fuse of the median: $(python3 -c "print(f'{$s_med / $z_med:.3g}' if $z_med > 0 else '-')")"

kill "$spid" && wait "$spid"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p"; done
pids=()
note "zfs-fuse's snapshots: $(zfs list -H -t snapshot -o name 2>/dev/null | wc -l); zpool status:" \
	"$(zpool status -x zt 2>&1 | tr '\n' ' ' | cut -c1-120)"
note "check of Shale's pool: $("$shale" pool check snap -d pool 2>&1 | tail -1)"
bench_finish "$out"
