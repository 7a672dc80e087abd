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
#      for sfs2008 (with --points), varmail, seq and meta, and for "sfs2008-pool": sfs2008 with A
#      = the same Shale serving a file system of its own pool (tank/bench, on a file in WORK/pool,
#      exported by the same process beside the posix directory). Each workload's text report, JSON and
#      SVG go to RESULTS (bench/results by default).
#   6. Prints the summary table (bench/summarize.py): each speed goal of the comparison, the
#      measured ratio Shale/Ganesha as median and range over the rounds, PASS or MISS; saves it
#      as RESULTS/summary.txt, stops both servers and removes the file sets.
#
# Usage
#   bench/run-bench.sh [--shale PATH] [--results DIR] [--work DIR] [--quick] [--keep]
#                      [--servers-only] [--workloads "sfs2008 varmail seq meta"]
#   --shale PATH      the shale binary (default build/release/tools/shale)
#   --results DIR     where reports go (default bench/results)
#   --work DIR        export directories, server state and logs (default build/bench)
#   --quick           a short run (BENCH_QUICK=1): fewer points, shorter phases, smaller file sets
#   --keep            keep the file sets and logs in WORK afterwards
#   --servers-only    start and check both servers, pinning and the TCP limit; run no workload
#   --workloads LIST  a subset of the workloads, space-separated
#   Environment, each overriding the default of the chosen mode:
#   BENCH_ROUNDS (3), BENCH_POINTS (10), BENCH_RATE (sfs2008 ops/s at 100%, or auto: each
#   server's own measured peak; default auto),
#   BENCH_WARMUP / BENCH_RUNTIME (seconds per sfs2008 point), BENCH_FILESET_MB,
#   BENCH_PROCS / BENCH_CONNS / BENCH_DEPTH (sfs2008 load shape), BENCH_PHASE_S and
#   BENCH_PHASE_WARMUP (varmail run and warm-up seconds), BENCH_SEQ_MB (seq file size),
#   BENCH_META_FILES (meta file count), BENCH_IPERF_S (seconds per iperf3 run),
#   BENCH_SPIN_US (the load thread polls this long before it sleeps; default 1000; 0: off),
#   BENCH_SHALE_THREADS (event loops of Shale; 1: one loop on the one pinned core).
#
# Needs root (namespaces, pinning), two or more CPUs, and the Debian packages nfs-ganesha,
# nfs-ganesha-vfs, rpcbind and iperf3 (`make bench` installs whatever is missing).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)

shale=${SHALE:-$top/build/release/tools/shale}
results=$top/bench/results
work=$top/build/bench
quick=${BENCH_QUICK:-0}
keep=0
servers_only=0
workloads="sfs2008 sfs2008-pool varmail seq meta"
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
else
	d_rounds=3 d_points=10 d_rate=auto d_warmup=5 d_runtime=15 d_fileset=512
	d_phase=20 d_phase_warmup=5 d_seq_mb=1024 d_meta_files=10000 d_iperf_s=5
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
iperf_s=${BENCH_IPERF_S:-$d_iperf_s}
shale_threads=${BENCH_SHALE_THREADS:-1}

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
		case "$w" in sfs2008 | sfs2008-pool | varmail | seq | meta) ;; *) die "unknown workload $w" ;; esac
	done
	shale=$(cd "$(dirname "$shale")" && pwd)/$(basename "$shale")
	mkdir -p "$work" "$results" || die "cannot create $work or $results"
	work=$(cd "$work" && pwd)
	results=$(cd "$results" && pwd)
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
		rm -rf "$shale_export" "$ganesha_export" "$work/state" "$work/ganesha"
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
# The pool for sfs2008-pool: a file in WORK/pool, made fresh each run, one file system.
rm -rf "$work/pool"
mkdir -p "$work/pool" || die "cannot create $work/pool"
"$shale" pool create tank "$work/pool/tank0.img" --size "${BENCH_POOL_SIZE:-4G}" >"$logs/pool.log" 2>&1 &&
	"$shale" fs create tank/bench -d "$work/pool" >>"$logs/pool.log" 2>&1 ||
	{ cat "$logs/pool.log" >&2; fail "shale pool create / fs create"; }
{
	echo "$shale_export 127.0.0.1(rw,insecure,no_root_squash)"
	echo "tank/bench 127.0.0.1(rw,insecure,no_root_squash)"
} >"$work/state/exports"
taskset -c "$SERVER_CPU" "$shale" serve --exports "$work/state/exports" --state "$work/state" \
	--pool-dir "$work/pool" \
	--port "$SHALE_PORT" --no-portmap --threads "$shale_threads" \
	--ready-file "$work/state/ready" --log-level warn >"$logs/shale.log" 2>&1 &
shale_pid=$!
pids+=("$shale_pid")
for _ in $(seq 300); do
	grep -q '^port=' "$work/state/ready" 2>/dev/null && break
	kill -0 "$shale_pid" 2>/dev/null || break
	sleep 0.05
done
grep -q "^port=$SHALE_PORT\$" "$work/state/ready" 2>/dev/null ||
	{ tail -n 20 "$logs/shale.log" >&2; fail "shale serve did not report port=$SHALE_PORT"; }
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
	meta              $meta_files files in one directory
	load average      $load_start at the start
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
for w in $workloads; do
	w_vs=("${vs_args[@]}")
	w_tool=$w
	case "$w" in
	sfs2008 | sfs2008-pool)
		w_tool=sfs2008
		w_args=(--rate "$rate" --points "$points" --warmup "$warmup" --runtime "$runtime"
			--procs "$procs" --conns "$conns" --depth "$depth" --fileset-mb "$fileset_mb")
		[ "$w" = sfs2008-pool ] && w_vs=("${pool_vs_args[@]}")
		;;
	varmail) w_args=(--runtime "$phase_s" --warmup "$phase_warmup") ;;
	seq) w_args=(--size-mb "$seq_mb") ;;
	meta) w_args=(--files "$meta_files") ;;
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
	if [ "$w" = seq ]; then
		measure_tcp after-seq
		say "loopback TCP after seq (MB/s): ${tcp_list[*]:3}"
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
	--workloads "$workloads" | tee "$results/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ "${#bench_failed[@]}" -gt 0 ]; then
	say "shale bench reported failed or unanswered operations, or failed, in: ${bench_failed[*]}"
	status=1
fi
exit "$status"
