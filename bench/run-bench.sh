#!/bin/bash
# run-bench.sh: Shale (posix back end) and NFS-Ganesha (FSAL VFS) measured side by side with
# `shale bench`; what `make bench` runs.
#
# What one run does
#   1. Re-runs itself in a private network namespace and mount namespace (unshare -n -m): the
#      namespace's loopback is its only interface, so every server listens on loopback only and
#      the fixed ports below cannot clash with anything else on the machine; a tmpfs over /run
#      gives the namespace its own rpcbind socket and lock file. Ganesha refuses to start unless it
#      can register with a portmapper, so a private rpcbind runs there; Shale runs with
#      --no-portmap (it would otherwise register the same programs as Ganesha).
#   2. Makes two export directories on one file system (WORK/export-shale, WORK/export-ganesha)
#      and checks that they are on the same device.
#   3. Starts Shale (`shale serve --threads T --port 2049`, waits for its --ready-file) and Ganesha
#      (bench/ganesha.conf filled in, `ganesha.nfsd -F`, NFS on 20490 and MOUNT on 20491; waits
#      until an RPC NULL call to NFS v3 and to MOUNT v3 is answered). Each starts under
#      `taskset -c 0` and is pinned again with `taskset -a -p -c 0 PID`, so every thread, present
#      or started later, runs on CPU 0. The load generator runs under `taskset -c 1`. Every
#      thread in /proc/PID/task of both servers is checked with `taskset -p` after start and again
#      after the last workload.
#   4. Measures the loopback TCP limit: iperf3, server on CPU 0, client on CPU 1, one stream of
#      1 MiB writes, three times before the workloads and three times right after seq (the
#      median is used).
#   5. Runs `shale bench` in --vs mode (Shale as A, Ganesha as B, --rounds rounds: A B A B A B)
#      for sfs2008 (with --points), varmail, seq, meta and syncwrite (4 KiB FILE_SYNC WRITEs,
#      64 in flight), and for each of them again as W-pool (sfs2008-pool, varmail-pool, seq-pool,
#      meta-pool, syncwrite-pool): A = the same Shale serving a file system of its own pool
#      (tank/bench, in a file of BENCH_POOL_SIZE in WORK/pool that `shale pool create` writes
#      with zeros, exported by the same process beside the posix directory). The loopback TCP limit is measured again right after the
#      first of seq and seq-pool; both read/limit ratios use the median of all six runs. Each
#      workload's text report, JSON and SVG go to RESULTS (bench/results by default).
#      "memory-pool" is no comparison: it starts a second Shale (pinned the same way, port 2050,
#      --arc-max BENCH_ARC_MAX_MB, its own pool in a file in WORK/pool-mem) and runs
#      against it, one after another, (a) sfs2008 at its own peak, 3 points, (b) one sequential
#      UNSTABLE+COMMIT write of BENCH_MEM_WRITE_MB (seq --phases unstable) and (c) a directory
#      of BENCH_MEM_FILES files created then listed whole with READDIRPLUS (meta --phases
#      create,list). Before each phase the server's peak RSS is reset (echo 5 >
#      /proc/PID/clear_refs) and after it VmHWM is read from /proc/PID/status; the goal is
#      peak <= arc-max + 64 MiB. shale bench gets no --server-pid there, so that it does not
#      reset the peak itself in the middle of a phase. Writes RESULTS/memory-pool.txt and .json.
#      "snapshot" is no comparison with Ganesha either: bench/snapshot.sh --quick (snapshot
#      create latency at half sfs2008's peak, the destroy of a snapshot holding 1 GiB, the peak
#      with 200 snapshots against none, rollback; its own servers and pools in WORK/snapshot),
#      then bench/snapshot-zfs.sh --quick (snapshot create beside zfs-fuse's under the same
#      load). Their lines go to RESULTS/snapshot-summary.txt and snapshot-zfs.txt, and after
#      the summary table.
#      "sendrecv" is none either: bench/send_receive.sh --quick (`shale send` and `shale
#      receive` of a 256 MiB file system, offline from a cold cache, against fio's direct
#      sequential read of the sending pool's leaf and write beside the receiving one; its own
#      pools in WORK/sendrecv), then bench/send_receive-zfs.sh --quick (send and send | receive
#      beside zfs-fuse's on the same data). Their lines go to RESULTS/sendrecv-summary.txt and
#      sendrecv-zfs.txt, and after the summary table.
#   6. Prints the summary table (bench/summarize.py): each speed goal of the comparison, the
#      measured ratio Shale/Ganesha as median and range over the rounds, PASS or MISS, and each
#      memory-pool phase's peak RSS against its goal; saves it as RESULTS/summary.txt, stops the
#      servers and removes the file sets.
#
# Usage
#   bench/run-bench.sh [--shale PATH] [--results DIR] [--work DIR] [--quick] [--keep]
#                      [--servers-only] [--workloads "sfs2008 varmail-pool memory-pool ..."]
#   --shale PATH      the shale binary (default build/release/tools/shale)
#   --results DIR     where reports go (default bench/results)
#   --work DIR        export directories, server state and logs (default build/bench)
#   --quick           a short run (BENCH_QUICK=1): fewer points, shorter phases, smaller file sets
#   --keep            keep the file sets and logs in WORK afterwards
#   --servers-only    start and check both servers, pinning and the TCP limit; run no workload
#   --workloads LIST  a subset of the workloads, space-separated, run in that order; default
#                     "sfs2008 sfs2008-pool varmail varmail-pool seq seq-pool meta meta-pool
#                     syncwrite syncwrite-pool memory-pool snapshot sendrecv"
#   Environment, each overriding the default of the chosen mode:
#   BENCH_ROUNDS (3), BENCH_POINTS (10), BENCH_RATE (sfs2008 ops/s at 100%, or auto: each
#   server's own measured peak; default auto),
#   BENCH_WARMUP / BENCH_RUNTIME (seconds per sfs2008 point), BENCH_FILESET_MB,
#   BENCH_PROCS / BENCH_CONNS / BENCH_DEPTH (sfs2008 load shape), BENCH_PHASE_S and
#   BENCH_PHASE_WARMUP (varmail's and syncwrite's run and warm-up seconds), BENCH_SEQ_MB (seq file size),
#   BENCH_META_FILES (meta file count), BENCH_META_BEFORE (run before each meta run; default
#   "sync && echo 1 > /proc/sys/vm/drop_caches", empty: nothing), BENCH_IPERF_S (seconds per iperf3 run),
#   BENCH_POOL_SIZE (the pool's file; default 2 x BENCH_SEQ_MB + BENCH_FILESET_MB + 2 GiB),
#   BENCH_SHALE_ARC_MB (the compared Shale's --arc-max; the sfs2008 file set + seq's file + 512),
#   BENCH_ARC_MAX_MB (memory-pool's --arc-max; 256), BENCH_MEM_WRITE_MB (memory-pool's write;
#   10240, quick 1024), BENCH_MEM_FILES (memory-pool's directory; 1000000, quick 100000),
#   BENCH_SPIN_US (the load thread polls this long before it sleeps; default 1000; 0: off),
#   BENCH_SHALE_THREADS (event loops of Shale; 1: one loop on the one pinned core),
#   BENCH_TCP_CC (TCP congestion control inside the run's namespace; default cubic, Linux's own
#   default; "inherit" keeps the host's).
#
# Needs root (namespaces, pinning), two or more CPUs, and the Debian packages nfs-ganesha,
# nfs-ganesha-vfs, rpcbind and iperf3 (`make bench` installs whatever is missing); "snapshot"
# also nfs-cp, libnfs-dev and zfs-fuse (snapshot-zfs.sh installs it when it is missing);
# "sendrecv" nfs-cp, fio and zfs-fuse (send_receive-zfs.sh installs it when it is missing).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)

shale=${SHALE:-$top/build/release/tools/shale}
results=$top/bench/results
work=$top/build/bench
quick=${BENCH_QUICK:-0}
keep=0
servers_only=0
workloads="sfs2008 sfs2008-pool varmail varmail-pool seq seq-pool meta meta-pool syncwrite syncwrite-pool memory-pool snapshot sendrecv"
inside=0
orig_args=("$@")
while [ $# -gt 0 ]; do
	case "$1" in
	--shale) shale=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	--keep) keep=1; shift ;;
	--servers-only) servers_only=1; shift ;;
	--workloads) workloads=$2; shift 2 ;;
	--inside) inside=1; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "run-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

die() { echo "run-bench: $*" >&2; exit 1; }
say() { echo "run-bench: $*" >&2; }

# Ports inside the private namespace. Shale serves NFS and MOUNT on one port.
SHALE_PORT=2049
SHALE_MEM_PORT=2050
GANESHA_NFS_PORT=20490
GANESHA_MNT_PORT=20491
GANESHA_NLM_PORT=20492
GANESHA_RQUOTA_PORT=20493
IPERF_PORT=5201
SERVER_CPU=0
LOAD_CPU=1

# Defaults of a full run and of a quick one. The sfs2008 rate is "auto": each server's peak is
# measured unpaced first and its ten points run at 10%..100% of its own peak, as each SPECsfs2008
# sponsor chose its load points; a common fixed rate would put all of the slower server's valid
# points at light load and compare its idle latency with the faster one's loaded curve. One load
# thread with 4 connections of depth 16 drives it from one core: several load threads on one core
# preempt one another and batch less (docs/performance.md). BENCH_RATE=N restores a fixed rate.
if [ "$quick" = 1 ]; then
	d_rounds=3 d_points=4 d_rate=auto d_warmup=1 d_runtime=3 d_fileset=64
	d_phase=3 d_phase_warmup=1 d_seq_mb=256 d_meta_files=2000 d_iperf_s=2
	d_mem_write_mb=1024 d_mem_files=100000
else
	d_rounds=3 d_points=10 d_rate=auto d_warmup=5 d_runtime=15 d_fileset=512
	d_phase=20 d_phase_warmup=5 d_seq_mb=1024 d_meta_files=10000 d_iperf_s=5
	d_mem_write_mb=10240 d_mem_files=1000000
fi
rounds=${BENCH_ROUNDS:-$d_rounds}
points=${BENCH_POINTS:-$d_points}
rate=${BENCH_RATE:-$d_rate}
warmup=${BENCH_WARMUP:-$d_warmup}
runtime=${BENCH_RUNTIME:-$d_runtime}
fileset_mb=${BENCH_FILESET_MB:-$d_fileset}
procs=${BENCH_PROCS:-1}
# The load thread polls rather than sleeps between its calls, so that waking its own idle vCPU
# (tens of microseconds here) is not counted in either server's response time.
spin_us=${BENCH_SPIN_US:-1000}
conns=${BENCH_CONNS:-4}
depth=${BENCH_DEPTH:-16}
phase_s=${BENCH_PHASE_S:-$d_phase}
phase_warmup=${BENCH_PHASE_WARMUP:-$d_phase_warmup}
seq_mb=${BENCH_SEQ_MB:-$d_seq_mb}
meta_files=${BENCH_META_FILES:-$d_meta_files}
# Before each meta run (every round, both servers): write back everything and drop the clean
# page cache. On ext4 without a journal, a new inode skips each free inode whose cached
# inode-table block says it was deleted in the last 30 s, or 330 s once that block is dirty
# again (the kernel's recently_deleted), and the first create into a block dirties it; so
# without this, each round's creates scanned past the files the rounds before it had removed
# (Shale 13,360 then 2,014 and 1,669 creates/s in one run, Ganesha 2,195, 4,698 and 2,969).
# Dropping the cache forgets those blocks; waiting does not help (the window is 330 s).
meta_before_default='sync && echo 1 > /proc/sys/vm/drop_caches'
meta_before=${BENCH_META_BEFORE-$meta_before_default}
iperf_s=${BENCH_IPERF_S:-$d_iperf_s}
shale_threads=${BENCH_SHALE_THREADS:-1}
# Congestion control inside the namespace (a per-namespace setting; the host's is untouched). A
# machine may set BBR by default; on one such machine BBR over loopback retransmitted hundreds of
# segments a second on a link that cannot lose one, and carried half of what cubic did (iperf3,
# 1 MiB writes: 36-43 against 73-75 Gbit/s), which made every bulk figure, seq above all, a
# measure of that instead of the servers (docs/performance.md). Every server and iperf3 share the
# namespace, so whichever is chosen applies to all of them alike.
tcp_cc=${BENCH_TCP_CC:-cubic}
# The pool holds seq's file written twice over (copy on write: the FILE_SYNC pass is new blocks
# until the old ones are freed), the sfs2008 file set, and room for everything else.
pool_size=${BENCH_POOL_SIZE:-$((2 * seq_mb + fileset_mb + 2048))M}
arc_max_mb=${BENCH_ARC_MAX_MB:-256}
# The compared Shale's pool cache: large enough for the sfs2008 file set and seq's file, as
# Ganesha has the whole page cache (the memory bound itself is memory-pool's test).
shale_arc_mb=${BENCH_SHALE_ARC_MB:-$((fileset_mb + seq_mb + 512))}
mem_write_mb=${BENCH_MEM_WRITE_MB:-$d_mem_write_mb}
mem_files=${BENCH_MEM_FILES:-$d_mem_files}

# ---- outside the namespace: checks, then re-run inside ------------------------------------------
if [ "$inside" -eq 0 ]; then
	[ "$(id -u)" -eq 0 ] || die "needs root (private network and mount namespaces, CPU pinning)"
	[ "$(nproc --all)" -ge 2 ] || die "needs two CPUs: servers on CPU $SERVER_CPU, load on CPU $LOAD_CPU"
	for tool in ganesha.nfsd rpcbind rpcinfo iperf3 taskset unshare python3 ss; do
		command -v "$tool" >/dev/null || die "$tool is not installed (scripts/install-deps.sh bench)"
	done
	[ -x "$shale" ] || die "no shale binary at $shale (make build-release, or --shale PATH)"
	if [ "$servers_only" -eq 0 ] && ! "$shale" bench --help >/dev/null 2>&1; then
		die "$shale has no working 'bench' command"
	fi
	for w in $workloads; do
		case "$w" in
		sfs2008 | varmail | seq | meta | syncwrite) ;;
		sfs2008-pool | varmail-pool | seq-pool | meta-pool | syncwrite-pool | memory-pool) ;;
		snapshot | sendrecv) ;;
		*) die "unknown workload $w" ;;
		esac
	done
	shale=$(cd "$(dirname "$shale")" && pwd)/$(basename "$shale")
	mkdir -p "$work" "$results" || die "cannot create $work or $results"
	work=$(cd "$work" && pwd)
	results=$(cd "$results" && pwd)
	# A namespace other than the host's may only choose congestion controls the host allows
	# (net.ipv4.tcp_allowed_congestion_control); add the run's to that list when the kernel
	# has it (the host's own default is not changed).
	if [ "$tcp_cc" != inherit ]; then
		allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control 2>/dev/null)
		if ! grep -qw -- "$tcp_cc" <<<"$allowed" &&
			grep -qw -- "$tcp_cc" /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null; then
			sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed $tcp_cc" ||
				die "cannot allow TCP congestion control $tcp_cc for the run's namespace"
		fi
	fi
	exec unshare -n -m --propagation private "$0" "${orig_args[@]}" --inside \
		--shale "$shale" --work "$work" --results "$results"
fi

# ---- inside the namespace ---------------------------------------------------------------------
# Other work on the machine competes with the pinned servers and the load for the same two cores.
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
psi_total() { sed -n 's/^some .*total=//p' /proc/pressure/cpu 2>/dev/null; }
psi_start=$(psi_total)
t_start=$(date +%s)
if awk -v l="${load_start%% *}" 'BEGIN {exit !(l > 0.5)}'; then
	say "warning: load average $load_start before the run; the figures need an idle machine"
fi
ip link set lo up || die "cannot bring up loopback in the private namespace"
tcp_cc_host=$(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo unknown)
if [ "$tcp_cc" != inherit ]; then
	sysctl -qw net.ipv4.tcp_congestion_control="$tcp_cc" ||
		die "cannot set TCP congestion control $tcp_cc in the private namespace"
fi
tcp_cc_now=$(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo unknown)
mount -t tmpfs -o mode=0755 bench-run /run || die "cannot mount a private /run"

logs=$work/logs
rm -rf "$logs" "$work/state" "$work/ganesha"
mkdir -p "$logs" "$work/state" "$work/ganesha" || die "cannot create $work"
shale_export=$work/export-shale
ganesha_export=$work/export-ganesha

pids=()
shale_pid=
ganesha_pid=
status=0
cleanup() {
	local p i
	# Newest first (the servers, then rpcbind, which Ganesha unregisters from as it stops), each
	# with SIGTERM, on which both servers stop cleanly; one still there after 10 s is killed.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		p=${pids[i]}
		kill -TERM "$p" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ "$keep" -eq 0 ]; then
		rm -rf "$shale_export" "$ganesha_export" "$work/state" "$work/ganesha" "$work/state-mem" \
			"$work/pool" "$work/pool-mem"
		[ "$status" -eq 0 ] && rm -rf "$logs"
	fi
	[ "$status" -ne 0 ] && [ -d "$logs" ] && say "logs kept in $logs"
}
trap cleanup EXIT
trap 'status=130; exit 130' INT TERM
fail() { status=1; die "$*"; }

rpcbind -f >"$logs/rpcbind.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.05; done
rpcinfo -p 127.0.0.1 >/dev/null 2>&1 || fail "the private rpcbind does not answer"

# File sets persist across workloads within the run; a previous run's are removed first so both
# servers start from the same empty directory.
rm -rf "$shale_export" "$ganesha_export"
mkdir -p "$shale_export" "$ganesha_export" || fail "cannot create the export directories"
[ "$(stat -c %d "$shale_export")" = "$(stat -c %d "$ganesha_export")" ] ||
	fail "$shale_export and $ganesha_export are not on one file system"
fs_desc=$(findmnt -n -o FSTYPE,SOURCE -T "$work" | tr -s " ")

# Every thread of PID must be allowed on CPU SERVER_CPU only. Prints "N threads" or fails.
check_pinned() { # $1: pid, $2: name
	local t n=0 bad=0 mask want
	want=$(printf '%x' $((1 << SERVER_CPU)))
	for t in /proc/"$1"/task/*; do
		mask=$(taskset -p "${t##*/}" 2>/dev/null | awk '{print $NF}') || continue
		[ -n "$mask" ] || continue
		n=$((n + 1))
		[ "$mask" = "$want" ] || { bad=$((bad + 1)); say "$2 thread ${t##*/} has affinity mask $mask"; }
	done
	[ "$n" -gt 0 ] && [ "$bad" -eq 0 ] || fail "$2 (pid $1): $bad of $n threads not pinned to CPU $SERVER_CPU"
	echo "$n"
}
pin() { # $1: pid, $2: name
	taskset -a -p -c "$SERVER_CPU" "$1" >/dev/null || fail "taskset -a -p -c $SERVER_CPU $1 ($2)"
}

# ---- Shale ------------------------------------------------------------------------------------
# The pool for the W-pool workloads: a file in WORK/pool, made fresh each run, one file system.
rm -rf "$work/pool"
mkdir -p "$work/pool" || die "cannot create $work/pool"
"$shale" pool create tank "$work/pool/tank0.img" --size "$pool_size" >"$logs/pool.log" 2>&1 &&
	"$shale" fs create tank/bench -d "$work/pool" >>"$logs/pool.log" 2>&1 ||
	{ cat "$logs/pool.log" >&2; fail "shale pool create / fs create"; }
{
	echo "$shale_export 127.0.0.1(rw,insecure,no_root_squash)"
	echo "tank/bench 127.0.0.1(rw,insecure,no_root_squash)"
} >"$work/state/exports"
# Starts `shale serve` on CPU SERVER_CPU and waits for its ready file; sets started_pid.
# $1: state directory (exports file and ready file in it), $2: pool directory, $3: port, $4: log
# file; further arguments go to shale serve. Fails (returns 1) if it did not report the port.
start_shale() {
	local state=$1 pooldir=$2 port=$3 log=$4
	shift 4
	taskset -c "$SERVER_CPU" "$shale" serve --exports "$state/exports" --state "$state" \
		--pool-dir "$pooldir" "$@" --port "$port" --no-portmap --threads "$shale_threads" \
		--ready-file "$state/ready" --log-level warn >"$log" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
	for _ in $(seq 300); do
		grep -q '^port=' "$state/ready" 2>/dev/null && break
		kill -0 "$started_pid" 2>/dev/null || break
		sleep 0.05
	done
	grep -q "^port=$port\$" "$state/ready" 2>/dev/null && return 0
	tail -n 20 "$log" >&2
	say "shale serve did not report port=$port"
	return 1
}
start_shale "$work/state" "$work/pool" "$SHALE_PORT" "$logs/shale.log" --arc-max "${shale_arc_mb}M" ||
	fail "shale serve failed to start"
shale_pid=$started_pid
pin "$shale_pid" shale

# ---- NFS-Ganesha ------------------------------------------------------------------------------
sed -e "s|@EXPORT_DIR@|$ganesha_export|g" -e "s|@NFS_PORT@|$GANESHA_NFS_PORT|" \
	-e "s|@MNT_PORT@|$GANESHA_MNT_PORT|" -e "s|@NLM_PORT@|$GANESHA_NLM_PORT|" \
	-e "s|@RQUOTA_PORT@|$GANESHA_RQUOTA_PORT|" "$here/ganesha.conf" >"$work/ganesha/ganesha.conf"
grep -v '^[[:space:]]*#' "$work/ganesha/ganesha.conf" | grep -q '@[A-Z_]*@' && fail "unfilled placeholder in ganesha.conf"
taskset -c "$SERVER_CPU" ganesha.nfsd -F -f "$work/ganesha/ganesha.conf" -L "$logs/ganesha.log" \
	-p "$work/ganesha/ganesha.pid" >"$logs/ganesha.out" 2>&1 &
ganesha_pid=$!
pids+=("$ganesha_pid")
# Ready when an RPC NULL call to NFS v3 and to MOUNT v3 is answered on their ports.
ganesha_ready=0
for _ in $(seq 600); do
	if rpcinfo -t 127.0.0.1 -n "$GANESHA_NFS_PORT" 100003 3 >/dev/null 2>&1 &&
		rpcinfo -t 127.0.0.1 -n "$GANESHA_MNT_PORT" 100005 3 >/dev/null 2>&1; then
		ganesha_ready=1
		break
	fi
	kill -0 "$ganesha_pid" 2>/dev/null || break
	sleep 0.1
done
[ "$ganesha_ready" -eq 1 ] ||
	{ grep -E 'CRIT|MAJ|FATAL' "$logs/ganesha.log" | grep -v DBUS | tail -n 10 >&2
	  fail "ganesha.nfsd did not answer NULL on NFS $GANESHA_NFS_PORT and MOUNT $GANESHA_MNT_PORT"; }
pin "$ganesha_pid" ganesha

shale_threads_n=$(check_pinned "$shale_pid" shale) || fail "pinning check failed"
ganesha_threads_n=$(check_pinned "$ganesha_pid" ganesha) || fail "pinning check failed"
ganesha_version=$(ganesha.nfsd -v 2>&1 | sed -n 's/.*Release = *//p' | head -n 1)
shale_version=$("$shale" version 2>/dev/null | head -n 1)
say "shale pid $shale_pid ($shale_threads_n threads) and ganesha pid $ganesha_pid" \
	"($ganesha_threads_n threads) pinned to CPU $SERVER_CPU; load on CPU $LOAD_CPU"

# ---- loopback TCP limit -----------------------------------------------------------------------
# iperf3 with 1 MiB writes, the size of seq's READ replies (with iperf3's default 128 KiB writes
# this machine's loopback carries about half as much, which would understate the ceiling; one such
# run is recorded for reference). Loopback throughput here varies from run to run, so the limit is
# measured three times now and three times right after seq; the summary uses the median.
# MB/s with MB = 2^20 bytes, as shale bench reports seq.
tcp_list=()
iperf_once() { # $1: output file, then iperf3 client options; prints MB/s
	taskset -c "$SERVER_CPU" iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" -1 >"$logs/iperf3-server.log" 2>&1 &
	local iperf_pid=$! out=$1
	shift
	for _ in $(seq 100); do
		ss -Hltn "sport = :$IPERF_PORT" | grep -q . && break
		sleep 0.05
	done
	taskset -c "$LOAD_CPU" iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -t "$iperf_s" "$@" -J >"$out" \
		2>"$logs/iperf3-client.log" || { kill "$iperf_pid" 2>/dev/null; return 1; }
	wait "$iperf_pid"
	python3 -c 'import json, sys
print("%.0f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8 / 1048576))' "$out"
}
measure_tcp() { # $1: tag for the file names
	local i mbs
	for i in 1 2 3; do
		mbs=$(iperf_once "$results/iperf3-$1-$i.json" -l 1M) || fail "iperf3 failed (see $logs)"
		tcp_list+=("$mbs")
	done
}
rm -f "$results"/iperf3-*.json
measure_tcp before
tcp_128k=$(iperf_once "$results/iperf3-128k.json") || fail "iperf3 failed (see $logs)"
say "loopback TCP (iperf3, one stream, 1 MiB writes, ${iperf_s}s, MB/s): ${tcp_list[*]};" \
	"with 128 KiB writes: $tcp_128k"
tcp_median() { printf '%s\n' "${tcp_list[@]}" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# ---- configuration record ---------------------------------------------------------------------
cat >"$results/config.txt" <<-EOF
	date              $(date -u '+%Y-%m-%d %H:%M UTC')
	machine           $(nproc --all) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, Linux $(uname -r)
	file system       $fs_desc, both exports in $work
	shale             ${shale_version:-shale} --threads $shale_threads, pinned to CPU $SERVER_CPU ($shale_threads_n threads)
	ganesha           NFS-Ganesha ${ganesha_version:-?} FSAL VFS (bench/ganesha.conf), pinned to CPU $SERVER_CPU ($ganesha_threads_n threads)
	load              shale bench on CPU $LOAD_CPU, polling ${spin_us} us before it sleeps; A = shale, B = ganesha, $rounds rounds
	sfs2008           rate $rate (ops/s at 100%), $points points, warm-up ${warmup}s, run ${runtime}s, $procs procs x $conns conns x depth $depth, file set $fileset_mb MB
	varmail           warm-up ${phase_warmup}s, run ${phase_s}s, shale bench's defaults (1,000 files, 16 flows)
	seq               one file of $seq_mb MB, 1 MiB transfers
	meta              $meta_files files in one directory; before each run: ${meta_before:-nothing}
	syncwrite         4 KiB FILE_SYNC WRITEs, 4 conns x depth 16, 64 files of 4 MB, warm-up ${phase_warmup}s, run ${phase_s}s
	pool              W-pool: tank/bench in a file of $pool_size in $work/pool, served by the same shale (--arc-max ${shale_arc_mb}M)
	memory-pool       a second shale (--arc-max ${arc_max_mb}M, pool in a file in $work/pool-mem): sfs2008 at its own peak (3 points), a $mem_write_mb MB write, $mem_files files created and listed; goal peak RSS <= $((arc_max_mb + 64)) MiB
	load average      $load_start at the start
	TCP congestion    $tcp_cc_now in the run's namespace (the host's: $tcp_cc_host)
	loopback TCP      iperf3, one stream, 1 MiB writes, ${iperf_s}s, server CPU $SERVER_CPU, client CPU $LOAD_CPU: $(tcp_median) MB/s median of ${tcp_list[*]} before the workloads; $tcp_128k MB/s with iperf3's default 128 KiB writes
EOF

if [ "$servers_only" -eq 1 ]; then
	cat "$results/config.txt"
	exit 0
fi

# ---- workloads --------------------------------------------------------------------------------
ganesha_args=(--vs "127.0.0.1:$GANESHA_NFS_PORT" --vs-mount-port "$GANESHA_MNT_PORT" --vs-export "$ganesha_export"
	--vs-pid "$ganesha_pid" --vs-label ganesha --rounds "$rounds" --spin-us "$spin_us")
vs_args=(--server "127.0.0.1:$SHALE_PORT" --mount-port "$SHALE_PORT" --export "$shale_export"
	--server-pid "$shale_pid" --label shale "${ganesha_args[@]}")
pool_vs_args=(--server "127.0.0.1:$SHALE_PORT" --mount-port "$SHALE_PORT" --export /tank/bench
	--server-pid "$shale_pid" --label shale-pool "${ganesha_args[@]}")
bench_failed=()

# ---- memory-pool ------------------------------------------------------------------------------
# A second Shale with its own small ARC limit and its own pool; each phase runs with the server's
# peak RSS reset before it and read after it. Appends to RESULTS/memory-pool.txt, writes
# RESULTS/memory-pool.json; returns non-zero if the server could not be run or a phase failed
# (a peak above the goal is a MISS, not a failure).
vm_kib() { sed -n "s/^$2:[[:space:]]*\([0-9]*\) kB/\1/p" /proc/"$1"/status 2>/dev/null; } # $1 pid, $2 field
run_memory_pool() {
	local mdir=$work/pool-mem mstate=$work/state-mem out=$results/memory-pool.txt
	local msize=$((mem_write_mb + fileset_mb + 3072)) mpid rc=0 phase t0 secs before peak after brc
	local goal_kib=$(((arc_max_mb + 64) * 1024)) rows=() mrc=0
	rm -rf "$mdir" "$mstate"
	mkdir -p "$mdir" "$mstate" || { say "memory-pool: cannot create $mdir"; return 1; }
	"$shale" pool create mem "$mdir/mem0.img" --size "${msize}M" >"$logs/pool-mem.log" 2>&1 &&
		"$shale" fs create mem/bench -d "$mdir" >>"$logs/pool-mem.log" 2>&1 ||
		{ cat "$logs/pool-mem.log" >&2; say "memory-pool: shale pool create / fs create failed"; return 1; }
	echo "mem/bench 127.0.0.1(rw,insecure,no_root_squash)" >"$mstate/exports"
	start_shale "$mstate" "$mdir" "$SHALE_MEM_PORT" "$logs/shale-mem.log" --arc-max "${arc_max_mb}M" ||
		{ say "memory-pool: the second shale did not start"; return 1; }
	mpid=$started_pid
	pin "$mpid" shale-mem
	check_pinned "$mpid" shale-mem >/dev/null || return 1
	local base=(--server "127.0.0.1:$SHALE_MEM_PORT" --export /mem/bench --label shale-pool-mem
		--spin-us "$spin_us")
	{
		echo "memory-pool: shale serve --arc-max ${arc_max_mb}M (pid $mpid, pinned to CPU $SERVER_CPU), pool mem in a file of ${msize} MB"
		echo "goal: peak RSS (VmHWM, reset before each phase) <= arc-max + 64 MiB = $((goal_kib / 1024)) MiB"
	} >"$out"
	for phase in sfs2008 write list; do
		local cmd=("$shale" bench)
		case "$phase" in
		sfs2008) cmd+=(sfs2008 "${base[@]}" --rate auto --points 3 --warmup "$warmup"
			--runtime "$runtime" --procs "$procs" --conns "$conns" --depth "$depth"
			--fileset-mb "$fileset_mb") ;;
		write) cmd+=(seq "${base[@]}" --size-mb "$mem_write_mb" --phases unstable) ;;
		list) cmd+=(meta "${base[@]}" --files "$mem_files" --phases create,list) ;;
		esac
		cmd+=(--json "$results/memory-pool-$phase.json")
		echo 5 >"/proc/$mpid/clear_refs" || { say "memory-pool: cannot reset the peak RSS of $mpid"; mrc=1; break; }
		before=$(vm_kib "$mpid" VmRSS)
		say "memory-pool $phase: taskset -c $LOAD_CPU ${cmd[*]}"
		echo "" >>"$out"
		echo "# taskset -c $LOAD_CPU ${cmd[*]}" >>"$out"
		t0=$(date +%s)
		taskset -c "$LOAD_CPU" "${cmd[@]}" >>"$out" 2>"$logs/bench-memory-pool-$phase.err"
		brc=$?
		secs=$(($(date +%s) - t0))
		peak=$(vm_kib "$mpid" VmHWM)
		after=$(vm_kib "$mpid" VmRSS)
		kill -0 "$mpid" 2>/dev/null || { say "memory-pool: shale serve died during $phase"; brc=99; }
		say "memory-pool $phase: exit $brc after ${secs}s; peak RSS ${peak:-?} KiB (goal $goal_kib KiB)"
		if [ "$brc" -ne 0 ]; then
			mrc=1
			tail -n 5 "$logs/bench-memory-pool-$phase.err" >&2
			cp "$logs/bench-memory-pool-$phase.err" "$results/memory-pool-$phase.err"
		fi
		rows+=("$phase ${before:-0} ${peak:-0} ${after:-0} $secs $brc")
		[ "$brc" -eq 99 ] && break
	done
	python3 - "$results/memory-pool.json" "$arc_max_mb" "$goal_kib" "$mem_write_mb" "$mem_files" \
		"$fileset_mb" "${rows[@]}" >>"$out" <<-'PY' || mrc=1
	import json, sys
	path, arc_mb, goal, write_mb, files, fileset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
	what = {"sfs2008": "sfs2008 at its own peak, 3 points, %s MB file set" % fileset,
	        "write": "one %s MB sequential write (UNSTABLE+COMMIT)" % write_mb,
	        "list": "%s files created in one directory, then listed with READDIRPLUS" % files}
	phases = []
	# "before" is the RSS the phase starts from (the reset sets the peak to it): what earlier
	# phases left resident counts against the later ones.
	print("\nphase      RSS before    peak RSS      goal  result  seconds  what")
	for row in sys.argv[7:]:
	    name, before, peak, after, secs, rc = row.split()
	    peak = int(peak)
	    ok = int(rc) == 0 and peak > 0
	    res = ("PASS" if peak <= goal else "MISS") if ok else "FAILED"
	    phases.append({"phase": name, "what": what[name], "rss_before_kib": int(before),
	                   "peak_rss_kib": peak or None, "rss_after_kib": int(after), "goal_kib": goal,
	                   "seconds": int(secs), "bench_exit": int(rc), "result": res})
	    print("%-9s %8.1f MiB %8.1f MiB %5d MiB  %-6s %8s  %s" % (
	        name, int(before) / 1024, peak / 1024, goal // 1024, res, secs, what[name]))
	json.dump({"format": "shale-bench-memory/1", "arc_max_mib": arc_mb, "goal_kib": goal,
	           "phases": phases}, open(path, "w"), indent=1)
	PY
	# Stop it now: the next workloads measure the other two servers.
	kill -TERM "$mpid" 2>/dev/null
	for _ in $(seq 600); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$mpid" 2>/dev/null; then
		say "memory-pool: shale serve (pid $mpid) did not stop in 60 s after SIGTERM"
		kill -KILL "$mpid" 2>/dev/null
		mrc=1
	fi
	wait "$mpid" 2>/dev/null
	local p rest=()
	for p in "${pids[@]}"; do [ "$p" = "$mpid" ] || rest+=("$p"); done
	pids=("${rest[@]}")
	[ "$keep" -eq 0 ] && rm -rf "$mdir"
	return "$mrc"
}

tcp_after=0
for w in $workloads; do
	w_vs=("${vs_args[@]}")
	w_tool=${w%-pool}
	case "$w" in *-pool) w_vs=("${pool_vs_args[@]}") ;; esac
	case "$w" in
	snapshot)
		rm -f "$results/snapshot-summary.txt" "$results/snapshot-zfs.txt"
		start=$(date +%s)
		for s in snapshot.sh snapshot-zfs.sh; do
			say "$w: $here/$s --quick"
			"$here/$s" --quick --shale "$shale" --results "$results" --work "$work/snapshot" \
				>"$logs/$s.out" 2>&1 || { bench_failed+=("$w ($s)"); tail -n 5 "$logs/$s.out" >&2; }
		done
		say "$w: done after $(($(date +%s) - start))s"
		kill -0 "$shale_pid" 2>/dev/null || fail "shale serve died during $w"
		continue
		;;
	sendrecv)
		rm -f "$results/sendrecv-summary.txt" "$results/sendrecv-zfs.txt"
		start=$(date +%s)
		for s in send_receive.sh send_receive-zfs.sh; do
			say "$w: $here/$s --quick"
			"$here/$s" --quick --shale "$shale" --results "$results" --work "$work/sendrecv" \
				>"$logs/$s.out" 2>&1 || { bench_failed+=("$w ($s)"); tail -n 5 "$logs/$s.out" >&2; }
		done
		say "$w: done after $(($(date +%s) - start))s"
		kill -0 "$shale_pid" 2>/dev/null || fail "shale serve died during $w"
		continue
		;;
	memory-pool)
		rm -f "$results/memory-pool".* "$results/memory-pool-"*
		start=$(date +%s)
		run_memory_pool || bench_failed+=("$w")
		say "$w: done after $(($(date +%s) - start))s"
		kill -0 "$shale_pid" 2>/dev/null || fail "shale serve died during $w"
		continue
		;;
	sfs2008 | sfs2008-pool)
		w_args=(--rate "$rate" --points "$points" --warmup "$warmup" --runtime "$runtime"
			--procs "$procs" --conns "$conns" --depth "$depth" --fileset-mb "$fileset_mb")
		;;
	varmail | varmail-pool) w_args=(--runtime "$phase_s" --warmup "$phase_warmup") ;;
	syncwrite | syncwrite-pool) w_args=(--runtime "$phase_s" --warmup "$phase_warmup") ;;
	seq | seq-pool) w_args=(--size-mb "$seq_mb") ;;
	meta | meta-pool) w_args=(--files "$meta_files")
		[ -n "$meta_before" ] && w_args+=(--before-run "$meta_before") ;;
	esac
	cmd=("$shale" bench "$w_tool" "${w_vs[@]}" "${w_args[@]}"
		--json "$results/$w.json" --svg "$results/$w.svg")
	rm -f "$results/$w.json" "$results/$w.svg" "$results/$w.txt" "$results/$w.err"
	say "$w: taskset -c $LOAD_CPU ${cmd[*]}"
	echo "# taskset -c $LOAD_CPU ${cmd[*]}" >"$results/$w.txt"
	start=$(date +%s)
	taskset -c "$LOAD_CPU" "${cmd[@]}" >>"$results/$w.txt" 2>"$logs/bench-$w.err"
	rc=$?
	say "$w: exit $rc after $(($(date +%s) - start))s"
	if [ "$rc" -ne 0 ]; then
		bench_failed+=("$w")
		tail -n 5 "$logs/bench-$w.err" >&2
		cp "$logs/bench-$w.err" "$results/$w.err"
	fi
	if [ "$w_tool" = seq ] && [ "$tcp_after" -eq 0 ]; then
		tcp_after=1
		measure_tcp "after-$w"
		say "loopback TCP after $w (MB/s): ${tcp_list[*]:3}"
	fi
	kill -0 "$shale_pid" 2>/dev/null || fail "shale serve died during $w"
	kill -0 "$ganesha_pid" 2>/dev/null || fail "ganesha.nfsd died during $w"
done

# Threads started during the run inherit CPU 0; check that nothing escaped.
check_pinned "$shale_pid" shale >/dev/null || fail "pinning check failed after the workloads"
check_pinned "$ganesha_pid" ganesha >/dev/null || fail "pinning check failed after the workloads"

echo "load average      $(cut -d' ' -f1-3 /proc/loadavg) at the end" >>"$results/config.txt"
psi_end=$(psi_total)
if [ -n "$psi_start" ] && [ -n "$psi_end" ]; then
	# PSI "some": the share of the run's wall time in which a runnable task waited for a CPU.
	# The run itself keeps both cores busy, so a few percent are its own; much more means other
	# work competed with the servers and the load.
	echo "CPU pressure      $(awk -v a="$psi_start" -v b="$psi_end" -v s="$(($(date +%s) - t_start))" \
		'BEGIN {printf "%.0f%%", (s > 0) ? (b - a) / 1e6 / s * 100 : 0}') of the run's wall time some task waited for a CPU (PSI)" \
		>>"$results/config.txt"
fi
python3 "$here/summarize.py" --results "$results" --tcp-mbs "$(IFS=,; echo "${tcp_list[*]}")" --config "$results/config.txt" \
	--workloads "$(echo " $workloads " | sed 's/ snapshot / /; s/ sendrecv / /')" | tee "$results/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
case " $workloads " in *" snapshot "*)
	for f in snapshot-summary.txt snapshot-zfs.txt; do
		[ -f "$results/$f" ] && { echo; echo "$f:"; cat "$results/$f"; }
	done | tee -a "$results/summary.txt" ;;
esac
case " $workloads " in *" sendrecv "*)
	for f in sendrecv-summary.txt sendrecv-zfs.txt; do
		[ -f "$results/$f" ] && { echo; echo "$f:"; cat "$results/$f"; }
	done | tee -a "$results/summary.txt" ;;
esac
if [ "${#bench_failed[@]}" -gt 0 ]; then
	say "shale bench reported failed or unanswered operations, or failed, in: ${bench_failed[*]}"
	status=1
fi
exit "$status"
