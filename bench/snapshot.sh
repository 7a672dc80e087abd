#!/bin/bash
# snapshot.sh: what snapshots cost on a served pool (docs/performance.md, "Snapshots").
#
# What one run does
#   1. Creates a pool "snap" on one file of SNAP_POOL_SIZE (4G) in WORK/pool with the file system
#      snap/fs and serves it (--port 0, --no-portmap), the server pinned to CPU 0 and the load to
#      CPU 1 when there are two CPUs, as `make bench` does.
#   2. sfs2008's peak: a short curve (`shale bench sfs2008 --rate auto --points 4`), which also
#      creates the file set (SNAP_FILESET_MB, 512).
#   Then the stages (SNAP_STAGES, default "latency destroy many rollback"), in that order:
#   latency  (goal: create median <= 100 ms at half the peak; the point's response within 10%)
#      a. On the idle served pool, 10 times each: `shale pool status` (the command and the
#         socket's round trip, no txg), `shale fs set snapdir=hidden` (a forced txg with nothing
#         but the file system's record in it) and `shale snapshot create`.
#      b. Half of the peak for SNAP_SECONDS (40) three times: alone; while `shale snapshot create`
#         runs every SNAP_EVERY (2) seconds (the goal's figure); while the three commands of (a)
#         run in turn, one every SNAP_EVERY seconds, under the same load: status is the
#         command's own time, fs set adds a forced txg carrying what the load dirtied, create
#         adds the snapshot to that txg. Reported: each command's wall time (median, p90,
#         max), the point's mean response time in each run (and in a fourth run alone after
#         the others: the response drifts over minutes, and the ratios are taken against the
#         mean of the two runs alone), and from the server's txg history
#         (`shale pool txgs`, kept in RESULTS/snapshot-txgs-creates.txt) the median size and
#         phase times of the txgs the creates waited for and of the dirty limit's.
#      The server's log level is SNAP_LOG_LEVEL (warn). At debug it writes a line per txg
#      with its sync time, but with the 512 MB file set that line came about 100 ms after the
#      txg's waiters were woken (the heap's figures, mallinfo2, and the trim before them, all on
#      the server's core), so it could not split a command's time and added work to what is
#      measured. SNAP_SERVE_ARGS adds options to every `shale serve` (--arc-max 64M: a smaller
#      dirty limit, a tenth of it); SNAP_HALF_RATE sets this stage's load in ops/s instead of
#      half the peak (to compare runs at one rate).
#   destroy  (goal: `shale snapshot destroy` of a snapshot holding SNAP_DESTROY_MB (1024) of its
#      own returns in <= 1 s) A file of SNAP_DESTROY_MB copied in with nfs-cp, snapshot @d1, the
#      file removed over NFS (bench/nfs-rm.c, built here with libnfs) and, once the server has
#      freed it in the background, snapshot @d2: @d1 alone holds the file. Its USED is read
#      (`snapshot list -p`), then the destroy, served, is timed, and so is the background
#      freeing of its blocks (until `pool status` no longer lists chains being freed).
#   many  (goal: sfs2008's peak with SNAP_MANY (1000) snapshots within 5% of the peak with none)
#      Two new pools of the same size, "many" and "plain", each served by a server of its own
#      pinned to CPU 0, with the same history: the same file set made the same way, then
#      sfs2008 at a quarter of the peak on both (the churn) while SNAP_MANY `shale snapshot
#      create` commands, one after another, take many/fs@m1.. on the first: every snapshot is
#      taken after some writes, creates and removes. The creates forced a txg each (1,000 in a
#      few minutes, against a few hundred on "plain"), and each txg's tree writes went through
#      the cache: it comes out of them colder than its twin's. So each server first serves
#      SNAP_SETTLE_S (60) seconds of sfs2008 asked for at the peak, alone, many then plain (its
#      ops/s printed: the first minute after the storm). Then `shale bench sfs2008 --vs`
#      measures the two side by side, SNAP_ROUNDS (3) rounds: A = with the snapshots, B =
#      without; the ratio of the peaks (the curve's highest valid point, in quarter steps), of
#      each round's unpaced probe, and of the servers' CPU per op (/proc/PID/stat over the
#      curve's points: the finest of the three on a shared machine, where the others move
#      with what the host gives the VM).
#   rollback  A file of SNAP_CHANGE_MB (1024) copied in with nfs-cp after a snapshot; the server
#      stops; `shale fs rollback -r` to that snapshot, offline (the command imports the pool,
#      rolls back in one txg, exports it: its wall time includes the import and the export).
#   Last, with every server stopped, `shale pool check` of each pool.
# Prints the figures, one per line, and writes them to RESULTS/snapshot-summary.txt.
# bench/snapshot-zfs.sh measures zfs-fuse's snapshot create beside Shale's.
#
# Usage: bench/snapshot.sh [--shale PATH] [--results DIR] [--work DIR] [--quick]
#   --quick: a short run for `make bench --quick` (SNAP_FILESET_MB 64, SNAP_SECONDS 15,
#   SNAP_MANY 200, SNAP_ROUNDS 2, SNAP_SETTLE_S 10, short curves); the environment still
#   overrides each.
# Needs nfs-cp, cc and libnfs-dev, two CPUs for meaningful figures; an idle machine.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$here/lib.sh"
bench_parse_common_opts snapshot.sh shale-snapshot-bench "$@"
if [ "$quick" = 1 ]; then
	d_fileset=64 d_seconds=15 d_many=200 d_rounds=2 d_warmup=1 d_runtime=4 d_change=256
	d_settle=10
else
	d_fileset=512 d_seconds=40 d_many=1000 d_rounds=3 d_warmup=3 d_runtime=10 d_change=1024
	d_settle=60
fi
pool_size=${SNAP_POOL_SIZE:-4G}
fileset_mb=${SNAP_FILESET_MB:-$d_fileset}
seconds=${SNAP_SECONDS:-$d_seconds}
every=${SNAP_EVERY:-2}
change_mb=${SNAP_CHANGE_MB:-$d_change}
destroy_mb=${SNAP_DESTROY_MB:-1024}
many=${SNAP_MANY:-$d_many}
rounds=${SNAP_ROUNDS:-$d_rounds}
warmup=${SNAP_WARMUP:-$d_warmup}
runtime=${SNAP_RUNTIME:-$d_runtime}
settle=${SNAP_SETTLE_S:-$d_settle}
stages=${SNAP_STAGES:-latency destroy many rollback}
log_level=${SNAP_LOG_LEVEL:-warn}
read -r -a serve_args <<<"${SNAP_SERVE_ARGS:-}" # more `shale serve` options, e.g. --arc-max 64M

has_stage() { case " $stages " in *" $1 "*) return 0 ;; esac; return 1; }
pin_server=() pin_load=()
if [ "$(nproc)" -ge 2 ]; then
	pin_server=(taskset -c 0)
	pin_load=(taskset -c 1)
fi
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work/pool" "$work/state" || die "cannot create $work"
cd "$work" || die "cannot enter $work"

# Starts `shale serve` for pool directory $1 and state directory $2 (exports file in it), log $3;
# sets started_pid and started_port.
serve() {
	"${pin_server[@]}" "$shale" serve --exports "$2/exports" --state "$2" --pool-dir "$1" \
		--port 0 --no-portmap --ready-file "$2/ready" --log-level "$log_level" "${serve_args[@]}" >"$3" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
	started_port=$(serve_wait "$started_pid" "$2/ready")
	[ -n "$started_port" ] || die "the server did not start: $(tail -5 "$3")"
}
stop() { # $1: pid
	kill "$1" 2>/dev/null && wait "$1"
	local p rest=()
	for p in "${pids[@]}"; do [ "$p" = "$1" ] || rest+=("$p"); done
	pids=("${rest[@]}")
}
"$shale" pool create snap pool/snap0.img --size "$pool_size" >/dev/null || die "pool create"
"$shale" fs create snap/fs -d pool >/dev/null || die "fs create"
echo "snap/fs 127.0.0.1(rw,insecure,no_root_squash)" >state/exports
serve pool state serve.log
pid=$started_pid port=$started_port
url() { echo "nfs://127.0.0.1/snap/fs/$1?nfsport=$port&mountport=$port&version=3"; }
bench_on() { # $1: port, $2: export, then shale bench sfs2008 options
	local p=$1 e=$2
	shift 2
	"${pin_load[@]}" "$shale" bench sfs2008 --server "127.0.0.1:$p" --export "$e" \
		--fileset-mb "$fileset_mb" --quiet "$@"
}
bench() { bench_on "$port" /snap/fs "$@"; }
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['runs'][0]$2)" "$1"; }
# Times a command ($2...) into file $1 as "start_ns end_ns" (or "failed"), its output to $1.err.
timed() {
	local out=$1 t0 t1
	shift
	t0=$(now_ns)
	if "$@" >/dev/null 2>>"$out.err"; then
		t1=$(now_ns)
		echo "$t0 $t1" >>"$out"
	else
		echo "failed" >>"$out"
	fi
}
# The statistics of a file of timed commands, one line.
stats() {
	python3 - "$1" <<-'EOF'
	import statistics, sys
	lines = [l.split() for l in open(sys.argv[1])]
	ms = sorted((int(l[1]) - int(l[0])) / 1e6 for l in lines if len(l) == 2)
	fails = sum(1 for l in lines if l == ["failed"])
	if not ms:
	    print("none ran, %d failed" % fails)
	else:
	    p90 = ms[max(0, -(-len(ms) * 9 // 10) - 1)]  # nearest rank
	    print("%d, %d failed: median %.1f ms, p90 %.1f ms, max %.1f ms"
	          % (len(ms), fails, statistics.median(ms), p90, max(ms)))
	EOF
}

# the peak
bench --rate auto --points 4 --warmup "$warmup" --runtime "$runtime" --json peak.json >peak.txt 2>&1 ||
	die "the peak's curve failed: $(tail -5 peak.txt)"
peak=$(field peak.json "['peak_ops']")
half=${SNAP_HALF_RATE:-$(python3 -c "print(int($peak / 2))")}
note "sfs2008 peak: $peak ops/s (file set $fileset_mb MB); half: $half ops/s"

# ---- latency ----------------------------------------------------------------------------------
if has_stage latency; then
	: >idle-status.txt
	: >idle-set.txt
	: >idle-create.txt
	for i in $(seq 10); do
		timed idle-status.txt "$shale" pool status snap -d pool
		timed idle-set.txt "$shale" fs set snapdir=hidden snap/fs -d pool
		timed idle-create.txt "$shale" snapshot create "snap/fs@i$i" -d pool
		sleep 0.2
	done
	note "idle served pool, pool status (no txg): $(stats idle-status.txt)"
	note "idle served pool, fs set snapdir=hidden (a forced txg): $(stats idle-set.txt)"
	note "idle served pool, snapshot create: $(stats idle-create.txt)"
	bench --rate "$half" --points 1 --warmup 3 --runtime "$seconds" --json plain.json >plain.txt 2>&1 ||
		die "the point without snapshots failed: $(tail -5 plain.txt)"
	n=0
	# Runs the point at half the peak while $1 (a function) runs every $every s.
	point_with() {
		local load
		bench --rate "$half" --points 1 --warmup 3 --runtime "$seconds" --json "$2" >"$2.txt" 2>&1 &
		load=$!
		sleep 3
		while kill -0 "$load" 2>/dev/null; do
			"$1"
			sleep "$every"
		done
		wait "$load" || die "the point $2 failed: $(tail -5 "$2.txt")"
	}
	create_one() { n=$((n + 1)); timed "$1" "$shale" snapshot create "snap/fs@s$n" -d pool; }
	: >creates.txt
	creates() { create_one creates.txt; }
	point_with creates snaps.json
	# the server's history of the txgs of that run (64: the whole run at this load), and the
	# phases of the ones the creates waited for
	"$shale" pool txgs snap -d pool >txgs-creates.txt 2>&1
	cp txgs-creates.txt "$results/snapshot-txgs-creates.txt"
	txg_phases() { # $1: cause; the medians of that cause's rows
		python3 - "$1" txgs-creates.txt <<-'EOF'
		import statistics, sys
		units = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
		rows = [l.split() for l in open(sys.argv[2]).readlines()[2:]]
		rows = [r for r in rows if len(r) == 13 and r[2] == sys.argv[1]]
		if not rows:
		    print("none"); sys.exit()
		mib = lambda v: float(v[:-1]) * units[v[-1]] / (1 << 20)
		med = lambda i, f=float: statistics.median(f(r[i]) for r in rows)
		print("%d txgs, medians: dirty %.1f MiB, written %.1f MiB; ms: queued %.1f, seal %.1f,"
		      " locked %.1f, write %.1f, flush %.1f, commit %.1f, total %.1f"
		      % (len(rows), med(3, mib), med(4, mib), med(6), med(7), med(8), med(9), med(10),
		         med(11), med(12)))
		EOF
	}
	: >turn-status.txt
	: >turn-set.txt
	: >turn-create.txt
	turn=0
	in_turn() {
		case $((turn % 3)) in
		0) timed turn-status.txt "$shale" pool status snap -d pool ;;
		1) timed turn-set.txt "$shale" fs set snapdir=hidden snap/fs -d pool ;;
		2) create_one turn-create.txt ;;
		esac
		turn=$((turn + 1))
	}
	point_with in_turn turns.json
	# alone again: the three points above ran in that order, and a server's response at a
	# fixed load drifts over minutes (the file set ages); the ratios are taken against the
	# mean of the point alone before and after
	bench --rate "$half" --points 1 --warmup 3 --runtime "$seconds" --json plain2.json >plain2.txt 2>&1 ||
		die "the second point without snapshots failed: $(tail -5 plain2.txt)"
	ort() { field "$1" "['points'][0]['mean_ms']"; }
	plain1_ms=$(ort plain.json) plain2_ms=$(ort plain2.json)
	plain_ms=$(python3 -c "print(($plain1_ms + $plain2_ms) / 2)")
	snaps_ms=$(ort snaps.json) turns_ms=$(ort turns.json)
	note "snapshot create every $every s at half the peak ($seconds s): $(stats creates.txt)"
	note "  the txgs the creates waited for: $(txg_phases waiter)"
	note "  the txgs of the dirty limit meanwhile: $(txg_phases dirty)"
	note "in turn at half the peak, one every $every s: pool status $(stats turn-status.txt)"
	note "  fs set snapdir=hidden (a forced txg) $(stats turn-set.txt)"
	note "  snapshot create $(stats turn-create.txt)"
	note "mean response at half the peak: $plain1_ms ms alone before, $plain2_ms ms alone after"
	note "  (their mean $plain_ms ms), $snaps_ms ms with creates" \
		"(ratio $(python3 -c "print(f'{$snaps_ms / $plain_ms:.2f}')")), $turns_ms ms with the" \
		"commands in turn (ratio $(python3 -c "print(f'{$turns_ms / $plain_ms:.2f}')"))"
fi

# ---- destroy ----------------------------------------------------------------------------------
free_wait() { # waits until the server frees no destroyed snapshot's chains; prints the seconds
	local t0 t1
	t0=$(now_ns)
	for _ in $(seq 1200); do
		"$shale" pool status snap -d pool 2>/dev/null | grep -q "being freed" || break
		sleep 0.05
	done
	t1=$(now_ns)
	python3 -c "print(f'{($t1 - $t0) / 1e9:.2f}')"
}
if has_stage destroy; then
	cc -O2 -o nfs-rm "$here/nfs-rm.c" -lnfs || die "cannot build bench/nfs-rm.c (libnfs-dev)"
	head -c "$((destroy_mb * 1048576))" /dev/urandom >big.bin
	nfs-cp big.bin "$(url big.bin)" >/dev/null || die "nfs-cp of the file failed"
	rm -f big.bin
	"$shale" snapshot create snap/fs@d1 -d pool >/dev/null || die "snapshot @d1"
	reaped() { "$shale" pool status snap -d pool | sed -n 's/.*snap\/fs: .* \([0-9]*\) removed files freed.*/\1/p'; }
	before=$(reaped)
	./nfs-rm "$(url big.bin)" || die "removing the file failed"
	for _ in $(seq 600); do
		now=$(reaped)
		[ "${now:-0}" -gt "${before:-0}" ] && ! "$shale" pool status snap -d pool | grep -q "freeing more now" && break
		sleep 0.1
	done
	"$shale" snapshot create snap/fs@d2 -d pool >/dev/null || die "snapshot @d2"
	d1_used=$("$shale" snapshot list -p snap/fs -d pool | awk '$1 == "snap/fs@d1" {print $2}')
	t0=$(now_ns)
	"$shale" snapshot destroy snap/fs@d1 -d pool >/dev/null || die "destroy of @d1 failed"
	t1=$(now_ns)
	freed_s=$(free_wait)
	note "snapshot destroy of @d1 holding $((d1_used / 1048576)) MiB of its own (USED" \
		"$d1_used bytes), served: $(((t1 - t0) / 1000000)) ms; its blocks freed in the" \
		"background in $freed_s s more"
fi

# ---- many -------------------------------------------------------------------------------------
if has_stage many; then
	for name in many plain; do
		mkdir -p "pool-$name" "state-$name"
		"$shale" pool create "$name" "pool-$name/${name}0.img" --size "$pool_size" >/dev/null ||
			die "pool create $name"
		"$shale" fs create "$name/fs" -d "pool-$name" >/dev/null || die "fs create $name/fs"
		echo "$name/fs 127.0.0.1(rw,insecure,no_root_squash)" >"state-$name/exports"
	done
	serve pool-many state-many serve-many.log
	mpid=$started_pid mport=$started_port
	serve pool-plain state-plain serve-plain.log
	ppid=$started_pid pport=$started_port
	quarter=$(python3 -c "print(int($peak / 4))")
	for p in "$mport many" "$pport plain"; do
		set -- $p
		bench_on "$1" "/$2/fs" --rate "$quarter" --points 1 --warmup 0 --runtime 2 >"set-$2.txt" 2>&1 ||
			die "the file set of $2/fs failed: $(tail -5 "set-$2.txt")"
	done
	# the churn: a quarter of the peak on both for as long as the snapshots take
	bench_on "$mport" /many/fs --rate "$quarter" --points 1 --warmup 0 --runtime 3600 >churn-a.txt 2>&1 &
	churn_a=$!
	bench_on "$pport" /plain/fs --rate "$quarter" --points 1 --warmup 0 --runtime 3600 >churn-b.txt 2>&1 &
	churn_b=$!
	sleep 5
	: >many.txt
	t_many=$(now_ns)
	for i in $(seq "$many"); do
		timed many.txt "$shale" snapshot create "many/fs@m$i" -d pool-many
	done
	t_many_end=$(now_ns)
	# each is a subshell running the function: its shale bench is a child of its own
	kill $(ps -o pid= --ppid "$churn_a") $(ps -o pid= --ppid "$churn_b") "$churn_a" "$churn_b" 2>/dev/null
	wait "$churn_a" "$churn_b" 2>/dev/null
	kill -0 "$mpid" 2>/dev/null || die "the server died during the snapshots"
	nsnap=$("$shale" snapshot list many/fs -d pool-many | grep -c '@m')
	note "$many snapshot creates with a quarter of the peak ($quarter ops/s) on both pools:" \
		"$(stats many.txt) in $(((t_many_end - t_many) / 1000000000)) s; $nsnap listed"
	for p in "$mport many" "$pport plain"; do
		set -- $p
		bench_on "$1" "/$2/fs" --rate "$peak" --points 1 --warmup 0 --runtime "$settle" \
			>"settle-$2.txt" 2>&1 || die "the settling run on $2 failed: $(tail -5 "settle-$2.txt")"
		note "settling run on $2/fs right after the creates ($settle s, $peak ops/s asked):" \
			"$(awk '/^  ---/ { getline; print $1; exit }' "settle-$2.txt") ops/s"
	done
	"${pin_load[@]}" "$shale" bench sfs2008 --server "127.0.0.1:$mport" --export /many/fs \
		--label "shale-$nsnap-snapshots" --server-pid "$mpid" --vs "127.0.0.1:$pport" \
		--vs-export /plain/fs --vs-pid "$ppid" --vs-label shale-no-snapshots \
		--rounds "$rounds" --rate auto --points 4 \
		--warmup "$warmup" --runtime "$runtime" --fileset-mb "$fileset_mb" \
		--json many-vs.json >many-vs.txt 2>&1 || die "the comparison failed: $(tail -5 many-vs.txt)"
	cp many-vs.txt "$results/snapshot-many-vs.txt"
	# The comparison's peak is its highest valid point (a quarter step of the curve); the probe
	# before each curve (the mix unpaced) measures the most each server does, finer.
	note "sfs2008 with $nsnap snapshots against none, side by side, $rounds rounds: $(python3 - many-vs.json many-vs.txt <<-'EOF'
	import json, re, statistics, sys
	d = json.load(open(sys.argv[1]))
	out = []
	for r in d["comparison"]["ratios"]:
	    if r["name"].startswith("peak"):
	        out.append("peak %.0f / %.0f ops/s, ratio %.3f (%.3f..%.3f)"
	                   % (r["a_median"], r["b_median"], r["median"], r["min"], r["max"]))
	    elif r["name"].startswith("server CPU per op"):
	        out.append("server CPU per op %.2f / %.2f us, ratio %.3f (%.3f..%.3f)"
	                   % (r["a_median"], r["b_median"], r["median"], r["min"], r["max"]))
	probes = {"A": [], "B": []}
	side = None
	for line in open(sys.argv[2]):
	    m = re.match(r"== sfs2008 against .*, ([AB])$", line.strip())
	    if m:
	        side = m.group(1)
	    m = re.match(r"sfs2008: peak probe: ([0-9.]+) ops/s unpaced", line)
	    if m and side:
	        probes[side].append(float(m.group(1)))
	ratios = [a / b for a, b in zip(probes["A"], probes["B"]) if b > 0]
	if ratios:
	    out.append("unpaced probe %.0f / %.0f ops/s, ratio %.3f (%s)"
	               % (statistics.median(probes["A"]), statistics.median(probes["B"]),
	                  statistics.median(ratios), ", ".join("%.3f" % x for x in ratios)))
	print("; ".join(out) if out else "no figures")
	EOF
	)"
	stop "$mpid"
	stop "$ppid"
	for name in many plain; do
		"$shale" pool check "$name" -d "pool-$name" >"check-$name.txt" 2>&1
		note "check of pool $name: $(tail -1 "check-$name.txt")"
	done
fi

# ---- rollback ---------------------------------------------------------------------------------
if has_stage rollback; then
	"$shale" snapshot create snap/fs@before -d pool >/dev/null || die "snapshot before the change"
	head -c "$((change_mb * 1048576))" /dev/urandom >change.bin
	nfs-cp change.bin "$(url change.bin)" >/dev/null || die "nfs-cp of the change failed"
	rm -f change.bin
fi
stop "$pid"
if has_stage rollback; then
	t0=$(now_ns)
	"$shale" fs rollback -r snap/fs@before -d pool >/dev/null || die "rollback failed"
	t1=$(now_ns)
	note "rollback of $change_mb MiB changed since the snapshot (offline, import and export" \
		"included): $(((t1 - t0) / 1000000)) ms"
fi
"$shale" pool check snap -d pool >check.txt 2>&1
note "check after it all: $(tail -1 check.txt)"
bench_finish "$results/snapshot-summary.txt"
