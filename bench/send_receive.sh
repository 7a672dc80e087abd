#!/bin/bash
# send_receive.sh: how fast `shale send` and `shale receive` move a file system, against what the
# disk under the pool gives fio in the same run (docs/performance.md, "Send and receive").
#
# What one run does
#   1. Creates a pool "src" on one file of SENDRECV_POOL_SIZE in WORK/pool-src with the file
#      system src/fs, serves it (--port 0, --no-portmap, loopback) and copies SENDRECV_DATA_MB
#      (4096) into it with nfs-cp, as files of SENDRECV_FILE_MB (1024; the last one smaller when
#      it does not divide): one file of random bytes made in the stream directory and copied
#      under a new name each time (the pool keeps every copy's blocks apart, and random bytes
#      do not compress). Takes the snapshot src/fs@s1 through the server, stops it, and creates
#      the second pool "dst" of the same size in WORK/pool-dst, on the same file system.
#   2. The peers, before and after the Shale steps (fio, one job, psync, 1 MiB blocks,
#      --direct=1 as the pool's leaves are opened O_DIRECT, at most SENDRECV_FIO_S (20) seconds):
#      read  sequential read of the first SENDRECV_DATA_MB of the leaf WORK/pool-src/src0.img
#            (--readonly), the file the send reads;
#      write sequential write of SENDRECV_DATA_MB to a new file beside the leaf of "dst"
#            (--end_fsync=1), removed afterwards.
#   3. Each step below starts from a cold cache: `sync; echo 3 > /proc/sys/vm/drop_caches`
#      (root; without it the run says so) and a fresh import, since both commands run offline
#      (each imports its pool, works and exports it: the wall time includes both).
#      send       `shale send src/fs@s1 -d WORK/pool-src > /dev/null`
#      pipe       `shale send ... | shale receive dst/copy -d WORK/pool-dst`
#      file       `shale send ... > STREAM`, STREAM in the stream directory: SENDRECV_STREAM_DIR,
#                 default /dev/shm (a tmpfs, so neither the write nor the later read of the
#                 stream touches the disk) when it has room for it, else WORK
#      receive    "dst" created again (empty), then `shale receive dst/copy < STREAM`
#   4. `shale pool check` of both pools.
#   The machine's state goes with the figures: the load average at the start and the end, and the
#   share of the run's wall time in which some task waited for a CPU (PSI), as run-bench.sh's.
# Prints each step's MB/s (MB = 2^20 bytes of file data, SENDRECV_DATA_MB over the wall time;
# the stream's own size is printed beside it), the ratios send / fio read (goal >= 0.8) and
# receive / fio write (goal >= 0.5), each against the mean of the two fio runs, and writes the
# lines to RESULTS/sendrecv-summary.txt.
#
# Usage: bench/send_receive.sh [--shale PATH] [--results DIR] [--work DIR] [--quick]
#   --quick: a short run for `make bench` (SENDRECV_DATA_MB 256, files of 64 MB); the
#   environment still overrides each.
#   SENDRECV_POOL_SIZE: each pool's file (default SENDRECV_DATA_MB plus half of it, at least
#   1 GiB more, in MB).
# Needs fio and nfs-cp (scripts/install-deps.sh bench), root to drop the page cache, and
# 2 x SENDRECV_POOL_SIZE + SENDRECV_DATA_MB free in WORK; an idle machine.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$here/lib.sh"
bench_parse_common_opts send_receive.sh shale-sendrecv-bench "$@"
if [ "$quick" = 1 ]; then
	d_data=256 d_file=64
else
	d_data=4096 d_file=1024
fi
data_mb=${SENDRECV_DATA_MB:-$d_data}
file_mb=${SENDRECV_FILE_MB:-$d_file}
[ "$file_mb" -gt "$data_mb" ] && file_mb=$data_mb
extra_mb=$((data_mb / 2 > 1024 ? data_mb / 2 : 1024))
pool_size=${SENDRECV_POOL_SIZE:-$((data_mb + extra_mb))M}
fio_s=${SENDRECV_FIO_S:-20}

for tool in fio nfs-cp python3; do
	command -v "$tool" >/dev/null || die "$tool is not installed (scripts/install-deps.sh bench)"
done
# the stream directory: a tmpfs with room for the stream (the data and a margin), else WORK
stream_dir=${SENDRECV_STREAM_DIR:-}
if [ -z "$stream_dir" ]; then
	stream_dir=$work
	shm_free_mb=$(df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
	[ "${shm_free_mb:-0}" -gt $((data_mb + data_mb / 4 + 512)) ] && stream_dir=/dev/shm
fi
stream_dir=$stream_dir/shale-sendrecv.$$
stream_fs=$(stat -f -c %T "$(dirname "$stream_dir")" 2>/dev/null)

pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$work" "$stream_dir"
}
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work/pool-src" "$work/pool-dst" "$work/state" "$stream_dir" || die "cannot create $work"
cd "$work" || die "cannot enter $work"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
psi_total() { sed -n 's/^some .*total=//p' /proc/pressure/cpu 2>/dev/null; }
psi_start=$(psi_total)
t_start=$(date +%s)
mbs() { python3 -c "import sys; print(f'{$1 / 1048576 / ($2 / 1e9):.1f}')"; } # bytes, ns
dropped=1
drop_caches() {
	sync
	echo 3 2>/dev/null >/proc/sys/vm/drop_caches || dropped=0
}
stop() { # $1: pid
	kill "$1" 2>/dev/null && wait "$1"
	local p rest=()
	for p in "${pids[@]}"; do [ "$p" = "$1" ] || rest+=("$p"); done
	pids=("${rest[@]}")
}
data_bytes=$((data_mb * 1048576))

# ---- the file system to send ------------------------------------------------------------------
"$shale" pool create src pool-src/src0.img --size "$pool_size" >/dev/null || die "pool create src"
"$shale" fs create src/fs -d pool-src >/dev/null || die "fs create src/fs"
echo "src/fs 127.0.0.1(rw,insecure,no_root_squash)" >state/exports
"$shale" serve --exports state/exports --state state --pool-dir pool-src --port 0 --no-portmap \
	--ready-file state/ready --log-level warn >serve.log 2>&1 &
pid=$!
pids+=("$pid")
port=$(serve_wait "$pid" state/ready)
[ -n "$port" ] || die "the server did not start: $(tail -5 serve.log)"
url() { echo "nfs://127.0.0.1/src/fs/$1?nfsport=$port&mountport=$port&version=3"; }
head -c "$((file_mb * 1048576))" /dev/urandom >"$stream_dir/fill.bin" || die "cannot make the file to copy"
left=$data_mb n=0
t0=$(now_ns)
while [ "$left" -gt 0 ]; do
	n=$((n + 1))
	if [ "$left" -lt "$file_mb" ]; then
		head -c "$((left * 1048576))" "$stream_dir/fill.bin" >"$stream_dir/last.bin"
		nfs-cp "$stream_dir/last.bin" "$(url "f$n.bin")" >/dev/null || die "nfs-cp of f$n.bin failed"
		left=0
	else
		nfs-cp "$stream_dir/fill.bin" "$(url "f$n.bin")" >/dev/null || die "nfs-cp of f$n.bin failed"
		left=$((left - file_mb))
	fi
done
"$shale" snapshot create src/fs@s1 -d pool-src >/dev/null || die "snapshot src/fs@s1"
t1=$(now_ns)
rm -f "$stream_dir/fill.bin" "$stream_dir/last.bin"
stop "$pid"
note "filled: $data_mb MiB in $n files copied in with nfs-cp (served, loopback) and snapshot" \
	"src/fs@s1 in $(((t1 - t0) / 1000000)) ms ($(mbs "$data_bytes" $((t1 - t0))) MB/s); pools of $pool_size"
"$shale" pool create dst pool-dst/dst0.img --size "$pool_size" >/dev/null || die "pool create dst"

# ---- the peers --------------------------------------------------------------------------------
# fio's figure in MB/s (2^20), one run. $1: read or write, $2: file, $3: output file.
fio_rate() {
	local extra=()
	[ "$1" = read ] && extra=(--readonly) || extra=(--end_fsync=1)
	fio --name="seq$1" --filename="$2" --rw="$1" --bs=1M --direct=1 --ioengine=psync \
		--size="${data_mb}M" --runtime="$fio_s" "${extra[@]}" --output-format=json \
		--output="$3" >/dev/null 2>"$3.err" || { say "fio $1 failed: $(tail -3 "$3.err")"; echo 0; return; }
	python3 -c "import json, sys; print(f\"{json.load(open(sys.argv[1]))['jobs'][0]['$1']['bw_bytes'] / 1048576:.1f}\")" "$3"
}
peers() { # $1: tag; sets fio_read_$1 and fio_write_$1
	drop_caches
	local r w
	r=$(fio_rate read pool-src/src0.img "fio-read-$1.json")
	w=$(fio_rate write pool-dst/fio-write.tmp "fio-write-$1.json")
	rm -f pool-dst/fio-write.tmp
	printf -v "fio_read_$1" %s "$r"
	printf -v "fio_write_$1" %s "$w"
}
peers before

# ---- send and receive -------------------------------------------------------------------------
# Times pipeline $2 (a string) from a cold cache into variable $1 (nanoseconds), or fails.
timed() {
	local t0 t1
	drop_caches
	t0=$(now_ns)
	bash -o pipefail -c "$2" >>steps.log 2>&1 || { say "failed: $2 ($(tail -3 steps.log))"; return 1; }
	t1=$(now_ns)
	printf -v "$1" %s $((t1 - t0))
}
send="'$shale' send src/fs@s1 -d pool-src"
recv="'$shale' receive dst/copy -d pool-dst"
timed ns_send "$send >/dev/null" || die "the send failed"
timed ns_pipe "$send | $recv" || die "the send piped into a receive failed"
"$shale" pool check dst -d pool-dst >check-dst-pipe.txt 2>&1
check_pipe=$(tail -1 check-dst-pipe.txt)
timed ns_tofile "$send >'$stream_dir/stream'" || die "the send into a file failed"
stream_bytes=$(stat -c %s "$stream_dir/stream")
rm -rf pool-dst
mkdir -p pool-dst
"$shale" pool create dst pool-dst/dst0.img --size "$pool_size" >/dev/null || die "pool create dst again"
timed ns_recv "$recv <'$stream_dir/stream'" || die "the receive from the file failed"
rm -f "$stream_dir/stream"
peers after

# ---- the figures ------------------------------------------------------------------------------
"$shale" pool check src -d pool-src >check-src.txt 2>&1
"$shale" pool check dst -d pool-dst >check-dst.txt 2>&1
[ "$dropped" = 1 ] && cold="the page cache dropped before each step" ||
	cold="the page cache NOT dropped (not root?): the steps after the first may read cached blocks"
note "data: $data_mb MiB in src/fs@s1; stream $stream_bytes bytes" \
	"($(python3 -c "print(f'{$stream_bytes / $data_bytes:.4f}')") x the data); $cold; offline commands (import and export included)"
note "fio read of the leaf (direct, 1 MiB, psync): $fio_read_before MB/s before, $fio_read_after after"
note "fio write beside the second leaf (direct, 1 MiB, psync, end fsync): $fio_write_before MB/s before, $fio_write_after after"
python3 - "$data_bytes" "$ns_send" "$ns_pipe" "$ns_tofile" "$ns_recv" "$fio_read_before" \
	"$fio_read_after" "$fio_write_before" "$fio_write_after" "$stream_fs" >figures.txt <<-'EOF'
	import sys
	data = int(sys.argv[1])
	send, pipe, tofile, recv = (int(x) for x in sys.argv[2:6])
	rb, ra, wb, wa = (float(x) for x in sys.argv[6:10])
	fs = sys.argv[10]
	rate = lambda ns: data / 1048576 / (ns / 1e9)
	read, write = (rb + ra) / 2, (wb + wa) / 2
	def verdict(ratio, goal):
	    return "%.2f (goal >= %.1f: %s)" % (ratio, goal, "PASS" if ratio >= goal else "MISS")
	print("send > /dev/null: %.1f s, %.1f MB/s; / fio read %.1f MB/s = %s"
	      % (send / 1e9, rate(send), read, verdict(rate(send) / read if read else 0, 0.8)))
	print("send | receive (into the second pool): %.1f s, %.1f MB/s; / fio write %.1f MB/s = %.2f"
	      % (pipe / 1e9, rate(pipe), write, rate(pipe) / write if write else 0))
	print("send > stream file (%s): %.1f s, %.1f MB/s" % (fs, tofile / 1e9, rate(tofile)))
	print("receive < stream file (%s; into the second pool, made again): %.1f s, %.1f MB/s;"
	      " / fio write %.1f MB/s = %s"
	      % (fs, recv / 1e9, rate(recv), write, verdict(rate(recv) / write if write else 0, 0.5)))
	EOF
while read -r line; do note "$line"; done <figures.txt
psi_end=$(psi_total)
psi=unknown
[ -n "$psi_start" ] && [ -n "$psi_end" ] && psi=$(awk -v a="$psi_start" -v b="$psi_end" \
	-v s="$(($(date +%s) - t_start))" 'BEGIN {printf "%.0f%%", (s > 0) ? (b - a) / 1e6 / s * 100 : 0}')
note "machine: $(nproc) CPUs; load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg)" \
	"at the end; some task waited for a CPU $psi of the run's $(($(date +%s) - t_start)) s (PSI)"
note "check of src: $(tail -1 check-src.txt)"
note "check of dst after the piped receive: $check_pipe"
note "check of dst after the receive from the file: $(tail -1 check-dst.txt)"
bench_finish "$results/sendrecv-summary.txt"
