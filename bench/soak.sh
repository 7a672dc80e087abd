#!/bin/bash
# soak.sh: an hour of sfs2008 at 70% of the pool's own peak, with an online scrub and an exports
# reload (SIGHUP) every ten minutes, while the server's resident memory and open fds are sampled;
# what `make soak` runs.
#
# What one run does
#   1. Creates a pool "soak" on one file of SOAK_POOL_SIZE in WORK/pool (`shale pool create
#      --size`, written with zeros) with two file systems, soak/fs (the load's) and soak/spare
#      (the one the reloads add and remove), and starts `shale serve` exporting soak/fs on a port
#      it picks (--port 0, --ready-file, --no-portmap, --threads SOAK_THREADS, the default
#      --arc-max unless SOAK_ARC_MAX, --log-level info so that each reload and scrub is logged).
#      With two or more CPUs the server is pinned to CPU 0 and the load to CPU 1, as `make bench`
#      does (SOAK_PIN=0: no pinning).
#   2. The peak: a short sfs2008 curve, `shale bench sfs2008 --rate auto --points
#      SOAK_PEAK_POINTS --warmup 3 --runtime 10` (an unpaced probe, then the points up to it);
#      the peak is the curve's peak_ops, the highest throughput of a valid point (one that
#      achieved 95% of its requested rate), as a SPECsfs2008 report's peak. It also creates the
#      file set (SOAK_FILESET_MB) that the soak then reuses. SOAK_RATE=N skips it: N is the target.
#   3. The soak: `shale bench sfs2008 --rate TARGET --points 1 --warmup 0 --runtime SOAK_SECONDS`,
#      TARGET = SOAK_LOAD_PCT (70) % of the peak: one open-loop point at a fixed rate, every reply
#      decoded and its status checked. Its clock (t = 0) starts when the bench reports its load
#      points, after the file set's set-up.
#   4. At t = 0, SOAK_INTERVAL, 2 x SOAK_INTERVAL, ... (while t < SOAK_SECONDS): `shale pool scrub
#      soak --wait` is started in the background (the server reads and verifies every copy of
#      every block while it serves; a scrub still running at the next turn is counted, not
#      restarted), and right after it the exports file is rewritten and the server gets SIGHUP:
#      odd reloads add soak/spare, even ones remove it, so that every reload changes the exports
#      (a reload of an unchanged file would run the parse alone) and happens while a scrub runs.
#   5. Every SOAK_SAMPLE_S (5) seconds: VmRSS and Threads from /proc/PID/status, the number of
#      entries in /proc/PID/fd, the server's CPU seconds and the machine's CPU pressure (PSI), to
#      RESULTS/soak-samples.csv; the scrubs and reloads go to RESULTS/soak-events.csv. The CPU
#      figures are reported beside the checks: on a shared machine they tell a stall of the
#      server's own from one where other work held the cores.
#   6. After the load: NULL calls to NFS v3 and MOUNT v3 (rpcinfo) and `shale pool status`
#      through the server's socket; SIGTERM, on which the server must exit 0 within 60 s; then
#      `shale pool check` of the pool, offline.
#   7. The verdict (bench/soak-summary.py), one PASS or FAIL line each:
#      calls     the bench exited 0 with 0 failed and 0 unanswered calls;
#      rate      the soak's point is valid: achieved >= 95% of TARGET;
#      rss, fds  flat after the warm-up: the samples from t = SOAK_WARMUP (default one interval,
#                so that the first scrub and reload are in it) to the end are cut into windows of
#                SOAK_INTERVAL (a last window shorter than half an interval joins the one before
#                it); the level of a window is the median of its samples; every window's level
#                must be within SOAK_FLAT_PCT (5) % of the first window's (for fds, or within
#                one fd when that is more: about 20 are open). A median, so that a transient (a
#                scrub's status connection is one fd for a few seconds) is not counted as
#                growth, while a leak, which persists, moves every later window; the single
#                highest and lowest samples are reported beside it. The server closes the
#                bench's idle set-up connection after its 300 s idle timeout: one fd less from
#                then on, inside the hour's warm-up;
#      scrubs    every scrub started, finished, and found 0 problems (exit 0 of --wait);
#      reloads   the server logged each reload, in order, with the change it was sent;
#      answers   NFS and MOUNT answer NULL after the load, and the status socket answers;
#      stop      SIGTERM stops the server, exit 0; check: `shale pool check` finds no problem;
#      log       no line at level error in the server's log.
#      It writes RESULTS/soak-summary.txt (the lines and a table to paste into
#      docs/performance.md) and RESULTS/soak-summary.json.
#
# Usage
#   bench/soak.sh [--shale PATH] [--results DIR] [--work DIR] [--keep]
#   --shale PATH      the shale binary (default build/release/tools/shale)
#   --results DIR     where reports go (default bench/results; every file is named soak*)
#   --work DIR        the pool, server state and logs (default build/soak-run)
#   --keep            keep the pool and logs in WORK afterwards (logs are kept on failure anyway)
#   Environment:
#   SOAK_SECONDS (3600), SOAK_INTERVAL (600: seconds between scrub + reload turns),
#   SOAK_WARMUP (SOAK_INTERVAL: seconds left out of the flatness checks), SOAK_SAMPLE_S (5),
#   SOAK_LOAD_PCT (70), SOAK_RATE (a fixed target in ops/s instead of a percentage of the peak),
#   SOAK_PEAK_POINTS (5), SOAK_FLAT_PCT (5), SOAK_FILESET_MB (512, twice the default cache, so
#   that it turns over), SOAK_POOL_SIZE (the file set + 2 GiB), SOAK_ARC_MAX (shale serve's
#   --arc-max; default: its own default), SOAK_THREADS (1), SOAK_PROCS / SOAK_CONNS / SOAK_DEPTH
#   (1 / 4 / 16, the load's shape, as `make bench`), SOAK_SPIN_US (0: the load sleeps between
#   calls; an hour of polling would only burn a core), SOAK_PIN (1).
#
# Exit status 0 when every line is PASS, 1 otherwise, 2 on a usage error. Needs no root; needs
# python3, and rpcinfo for the NULL calls (without it that check says so and fails).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)

shale=${SHALE:-$top/build/release/tools/shale}
results=$top/bench/results
work=$top/build/soak-run
keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	--shale) shale=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "soak: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

die() { echo "soak: $*" >&2; exit 1; }
say() { echo "soak: $(date -u +%H:%M:%S) $*" >&2; }

soak_s=${SOAK_SECONDS:-3600}
interval=${SOAK_INTERVAL:-600}
warmup=${SOAK_WARMUP:-$interval}
sample_s=${SOAK_SAMPLE_S:-5}
load_pct=${SOAK_LOAD_PCT:-70}
fixed_rate=${SOAK_RATE:-}
peak_points=${SOAK_PEAK_POINTS:-5}
flat_pct=${SOAK_FLAT_PCT:-5}
fileset_mb=${SOAK_FILESET_MB:-512}
pool_size=${SOAK_POOL_SIZE:-$((fileset_mb + 2048))M}
arc_max=${SOAK_ARC_MAX:-}
threads=${SOAK_THREADS:-1}
procs=${SOAK_PROCS:-1}
conns=${SOAK_CONNS:-4}
depth=${SOAK_DEPTH:-16}
spin_us=${SOAK_SPIN_US:-0}
pin=${SOAK_PIN:-1}
SERVER_CPU=0
LOAD_CPU=1

for v in soak_s interval warmup sample_s load_pct peak_points flat_pct threads procs conns depth spin_us; do
	[[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -gt 0 -o "$v" = spin_us ] || die "$v must be a positive integer (${!v})"
done
[ -z "$fixed_rate" ] || [[ $fixed_rate =~ ^[0-9]+$ ]] || die "SOAK_RATE must be a number of ops/s"
[ "$warmup" -lt "$soak_s" ] || die "SOAK_WARMUP ($warmup s) leaves nothing of SOAK_SECONDS ($soak_s s) to check"
[ -x "$shale" ] || die "no shale binary at $shale (make build-release, or --shale PATH)"
"$shale" bench --help >/dev/null 2>&1 || die "$shale has no working 'bench' command"
command -v python3 >/dev/null || die "python3 is not installed (scripts/install-deps.sh test)"
[ "$(nproc)" -ge 2 ] || pin=0
# Command prefixes (taskset execs the command, so $! is the command's own pid).
on_server=()
on_load=()
if [ "$pin" = 1 ]; then
	command -v taskset >/dev/null || die "taskset is not installed (util-linux), or SOAK_PIN=0"
	on_server=(taskset -c "$SERVER_CPU")
	on_load=(taskset -c "$LOAD_CPU")
fi

shale=$(cd "$(dirname "$shale")" && pwd)/$(basename "$shale")
head_rev=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo "?")
start_utc=$(date -u '+%H:%M')
mkdir -p "$work" "$results" || die "cannot create $work or $results"
work=$(cd "$work" && pwd)
results=$(cd "$results" && pwd)
pooldir=$work/pool
state=$work/state
logs=$work/logs
rm -rf "$pooldir" "$state" "$logs"
rm -f "$results"/soak.* "$results"/soak-*
mkdir -p "$pooldir" "$state" "$logs" || die "cannot create $work"

server_pid=
bench_pid=
scrub_pid=
status=0
cleanup() {
	local p
	for p in $scrub_pid $bench_pid $server_pid; do
		kill -0 "$p" 2>/dev/null || continue
		kill -TERM "$p" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ "$keep" -eq 0 ]; then
		rm -rf "$pooldir" "$state"
		[ "$status" -eq 0 ] && rm -rf "$logs"
	fi
	[ "$status" -ne 0 ] && [ -d "$logs" ] && say "logs kept in $logs"
}
trap cleanup EXIT
trap 'status=130; exit 130' INT TERM
fail() { status=1; die "$*"; }

# ---- pool and server --------------------------------------------------------------------------
say "pool soak: one file of $pool_size in $pooldir"
"$shale" pool create soak "$pooldir/soak0.img" --size "$pool_size" >"$logs/pool.log" 2>&1 &&
	"$shale" fs create soak/fs -d "$pooldir" >>"$logs/pool.log" 2>&1 &&
	"$shale" fs create soak/spare -d "$pooldir" >>"$logs/pool.log" 2>&1 ||
	{ cat "$logs/pool.log" >&2; fail "shale pool create / fs create"; }
line() { echo "$1 127.0.0.1(rw,insecure,no_root_squash)"; }
write_exports() { # $@: the file systems to export; replaced whole, so a reload never reads half
	local f
	for f in "$@"; do line "$f"; done >"$state/exports.new" && mv "$state/exports.new" "$state/exports"
}
write_exports soak/fs
serve_args=(--exports "$state/exports" --state "$state" --pool-dir "$pooldir" --port 0 --no-portmap
	--threads "$threads" --ready-file "$state/ready" --log-level info)
[ -n "$arc_max" ] && serve_args+=(--arc-max "$arc_max")
"${on_server[@]}" "$shale" serve "${serve_args[@]}" >"$logs/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
	grep -q '^port=' "$state/ready" 2>/dev/null && break
	kill -0 "$server_pid" 2>/dev/null || break
	sleep 0.05
done
port=$(sed -n 's/^port=//p' "$state/ready" 2>/dev/null)
[ -n "$port" ] || { tail -n 20 "$logs/serve.log" >&2; fail "shale serve did not report its port"; }
# The server restarts itself in place (exec) to set its heap's tunables, so the pid stays $!.
[ "$(sed -n 's/^pid=//p' "$state/ready")" = "$server_pid" ] ||
	fail "the ready file names pid $(sed -n 's/^pid=//p' "$state/ready"), not $server_pid"
[ "$pin" = 1 ] && { taskset -a -p -c "$SERVER_CPU" "$server_pid" >/dev/null || fail "cannot pin the server"; }
say "shale serve pid $server_pid on port $port${arc_max:+, --arc-max $arc_max}$([ "$pin" = 1 ] &&
	echo ", pinned to CPU $SERVER_CPU; load on CPU $LOAD_CPU")"

bench_base=("$shale" bench sfs2008 --server "127.0.0.1:$port" --mount-port "$port" --export /soak/fs
	--server-pid "$server_pid" --label shale-pool --procs "$procs" --conns "$conns" --depth "$depth"
	--spin-us "$spin_us" --fileset-mb "$fileset_mb")

# ---- the peak ---------------------------------------------------------------------------------
if [ -n "$fixed_rate" ]; then
	target=$fixed_rate
	peak=
	say "SOAK_RATE=$fixed_rate: no peak measured"
else
	cmd=("${bench_base[@]}" --rate auto --points "$peak_points" --warmup 3 --runtime 10
		--json "$results/soak-peak.json")
	say "peak: ${cmd[*]}"
	echo "# ${cmd[*]}" >"$results/soak-peak.txt"
	"${on_load[@]}" "${cmd[@]}" >>"$results/soak-peak.txt" 2>"$logs/bench-peak.err" ||
		{ tail -n 5 "$logs/bench-peak.err" >&2; fail "the peak curve failed (see $results/soak-peak.txt)"; }
	peak=$(python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["runs"][0]["peak_ops"]
print("%.0f" % p if p else "")' "$results/soak-peak.json")
	[ -n "$peak" ] || fail "the peak curve has no valid point (see $results/soak-peak.txt)"
	target=$((peak * load_pct / 100))
	say "peak $peak ops/s; the soak runs at $load_pct%: $target ops/s"
fi

# ---- the soak ---------------------------------------------------------------------------------
samples=$results/soak-samples.csv
events=$results/soak-events.csv
echo "t_s,rss_kib,fds,threads,server_cpu_s,cpu_psi_us,scrub_running,phase" >"$samples"
echo "t_s,event,detail" >"$events"
cmd=("${bench_base[@]}" --rate "$target" --points 1 --warmup 0 --runtime "$soak_s"
	--json "$results/soak.json")
say "soak: ${cmd[*]}"
echo "# ${cmd[*]}" >"$results/soak.txt"
"${on_load[@]}" "${cmd[@]}" >>"$results/soak.txt" 2>"$logs/bench-soak.err" &
bench_pid=$!
# t = 0 when the bench starts its load point, after the file set's set-up.
while kill -0 "$bench_pid" 2>/dev/null && ! grep -q '^sfs2008: load points' "$logs/bench-soak.err"; do
	sleep 0.2
done
t0=$(date +%s)

now_s() { echo $(($(date +%s) - t0)); }
vm_field() { sed -n "s/^$1:[[:space:]]*\([0-9]*\).*/\1/p" "/proc/$server_pid/status" 2>/dev/null; }
clk_tck=$(getconf CLK_TCK)
# The server's CPU seconds so far (utime + stime of all its threads: fields 14 and 15 of
# /proc/PID/stat, counted after the ")" that ends its name) and the machine's CPU pressure (PSI
# "some" total, microseconds in which a runnable task waited for a CPU): between two samples they
# tell a stall of the server's own from one where other work held the cores.
server_cpu_s() { sed 's/.*) //' "/proc/$server_pid/stat" 2>/dev/null | awk -v hz="$clk_tck" '{printf "%.2f", ($12 + $13) / hz}'; }
cpu_psi_us() { sed -n 's/^some .*total=//p' /proc/pressure/cpu 2>/dev/null; }
sample() { # $2: phase (load, or after: once the bench has ended); t to a tenth of a second
	local rss fds thr cpu psi running=0 us
	us=$((${EPOCHREALTIME/./} - t0 * 1000000))
	set -- "$((us / 1000000)).$((us % 1000000 / 100000))" "$2"
	rss=$(vm_field VmRSS)
	thr=$(vm_field Threads)
	fds=$(ls -U "/proc/$server_pid/fd" 2>/dev/null | wc -l)
	cpu=$(server_cpu_s)
	psi=$(cpu_psi_us)
	[ -n "$scrub_pid" ] && kill -0 "$scrub_pid" 2>/dev/null && running=1
	[ -n "$rss" ] && echo "$1,$rss,$fds,$thr,$cpu,$psi,$running,$2" >>"$samples"
}
scrubs=0
scrub_t=0
reap_scrub() { # records a finished scrub's outcome: "scrub_done" with its exit status and last line
	[ -n "$scrub_pid" ] || return 0
	kill -0 "$scrub_pid" 2>/dev/null && return 0
	local rc last
	wait "$scrub_pid"
	rc=$?
	last=$(tail -n 1 "$logs/scrub-$scrubs.log" | tr -d ',')
	echo "$(now_s),scrub_done,rc=$rc after $(($(now_s) - scrub_t))s: $last" >>"$events"
	say "scrub $scrubs: exit $rc after $(($(now_s) - scrub_t)) s: $last"
	scrub_pid=
}
start_scrub() {
	reap_scrub
	if [ -n "$scrub_pid" ]; then
		echo "$(now_s),scrub_busy,scrub $scrubs still running" >>"$events"
		say "scrub $scrubs is still running at the next turn"
		return
	fi
	scrubs=$((scrubs + 1))
	scrub_t=$(now_s)
	"$shale" pool scrub soak -d "$pooldir" --wait >"$logs/scrub-$scrubs.log" 2>&1 &
	scrub_pid=$!
	echo "$scrub_t,scrub,$scrubs" >>"$events"
}
reloads=0
reload() {
	reloads=$((reloads + 1))
	if [ $((reloads % 2)) -eq 1 ]; then write_exports soak/fs soak/spare; else write_exports soak/fs; fi
	kill -HUP "$server_pid"
	echo "$(now_s),reload,$reloads" >>"$events"
}

next_sample=0
next_turn=0
while kill -0 "$bench_pid" 2>/dev/null; do
	t=$(now_s)
	if [ "$t" -ge "$next_sample" ]; then
		sample - load
		next_sample=$((next_sample + sample_s))
	fi
	if [ "$next_turn" -lt "$soak_s" ] && [ "$t" -ge "$next_turn" ]; then
		say "t=${t}s: scrub and reload"
		start_scrub
		reload
		next_turn=$((next_turn + interval))
	fi
	reap_scrub
	kill -0 "$server_pid" 2>/dev/null || break
	sleep 1
done
wait "$bench_pid"
bench_rc=$?
bench_pid=
say "soak: the bench exited $bench_rc after $(now_s) s"
tail -n 3 "$logs/bench-soak.err" >&2
checks=$results/soak-checks.txt
: >"$checks"
check() { # $1: PASS or FAIL, $2: name, $3: detail
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$checks"
}
check "$([ "$bench_rc" -eq 0 ] && echo PASS || echo FAIL)" "bench exit" "shale bench exited $bench_rc"
# A scrub still running gets up to 10 minutes more; one that takes longer fails the scrubs check.
for _ in $(seq 3000); do
	[ -n "$scrub_pid" ] || break
	reap_scrub
	[ -n "$scrub_pid" ] && sleep 0.2
done
[ -n "$scrub_pid" ] && echo "$(now_s),scrub_busy,scrub $scrubs did not finish 10 minutes after the load" >>"$events"
sample - after

# ---- after the load ---------------------------------------------------------------------------
if ! kill -0 "$server_pid" 2>/dev/null; then
	check FAIL "answers" "the server is gone"
elif command -v rpcinfo >/dev/null; then
	# The port as a universal address (rpcinfo's -n asks a portmapper first; none runs here).
	uaddr=127.0.0.1.$((port / 256)).$((port % 256))
	if rpcinfo -T tcp -a "$uaddr" 100003 3 >/dev/null 2>&1 &&
		rpcinfo -T tcp -a "$uaddr" 100005 3 >/dev/null 2>&1; then
		check PASS "answers" "NULL answered by NFS v3 and MOUNT v3 on port $port"
	else
		check FAIL "answers" "NULL to NFS v3 or MOUNT v3 on port $port was not answered"
	fi
else
	check FAIL "answers" "rpcinfo is not installed (rpcbind): the NULL calls were not made"
fi
if "$shale" pool status soak -d "$pooldir" >"$results/soak-status.txt" 2>&1; then
	check PASS "status" "shale pool status answered through the server's socket"
else
	check FAIL "status" "shale pool status failed (see $results/soak-status.txt)"
fi
stop_s=
kill -TERM "$server_pid" 2>/dev/null
for i in $(seq 600); do
	kill -0 "$server_pid" 2>/dev/null || { stop_s=$((i / 10)); break; }
	sleep 0.1
done
[ -n "$stop_s" ] || kill -KILL "$server_pid" 2>/dev/null
wait "$server_pid" 2>/dev/null
server_rc=$?
server_pid=
if [ -z "$stop_s" ]; then
	check FAIL "stop" "the server did not stop within 60 s of SIGTERM"
elif [ "$server_rc" -ne 0 ]; then
	check FAIL "stop" "SIGTERM: the server exited $server_rc"
else
	check PASS "stop" "SIGTERM: the server stopped within $((stop_s + 1)) s, exit 0"
fi
if "$shale" pool check soak -d "$pooldir" >"$logs/check.log" 2>&1; then
	check PASS "check" "shale pool check: no problem"
else
	cp "$logs/check.log" "$results/soak-check.txt"
	check FAIL "check" "shale pool check failed (see $results/soak-check.txt)"
fi
errors=$(grep -c ' shale error: ' "$logs/serve.log")
warns=$(grep -c ' shale warn: ' "$logs/serve.log")
if [ "$errors" -eq 0 ]; then
	check PASS "log" "no error in the server's log ($warns warnings)"
else
	check FAIL "log" "$errors errors in the server's log, e.g. $(grep -m 1 ' shale error: ' "$logs/serve.log" | cut -c1-160)"
fi
grep -E ' shale (warn|error): ' "$logs/serve.log" | head -n 50 >"$results/soak-serve-warnings.txt"
grep -E 'reload: |scrub' "$logs/serve.log" >"$results/soak-serve-events.txt"

cat >"$results/soak-config.txt" <<-EOF
	date              $(date -u '+%Y-%m-%d %H:%M UTC'), ${soak_s}s from $start_utc; $top at commit $head_rev at the start
	binary            $shale ($("$shale" version 2>/dev/null | head -n 1))
	machine           $(nproc --all) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, Linux $(uname -r)
	shale serve       --threads $threads${arc_max:+ --arc-max $arc_max}$([ "$pin" = 1 ] && echo ", pinned to CPU $SERVER_CPU, load on CPU $LOAD_CPU")
	pool              one file of $pool_size in $pooldir, file systems soak/fs and soak/spare
	load              sfs2008, $procs procs x $conns conns x depth $depth, file set $fileset_mb MB, spin $spin_us us
	soak              ${soak_s}s at ${fixed_rate:-$load_pct% of the peak}; scrub + reload every ${interval}s; warm-up ${warmup}s; samples every ${sample_s}s
	load average      $(cut -d' ' -f1-3 /proc/loadavg) at the end
EOF

python3 "$here/soak-summary.py" --results "$results" --interval "$interval" --warmup "$warmup" \
	--flat-pct "$flat_pct" --load-pct "$load_pct" --reloads "$reloads" ${peak:+--peak "$peak"} \
	--target "$target" | tee "$results/soak-summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit "$status"
