#!/bin/bash
# send_receive-zfs.sh: `shale send` and `shale receive` beside zfs-fuse's `zfs send` and `zfs
# receive`, in one run, on the same data (docs/performance.md, "Send and receive").
#
# What one run does
#   1. Re-runs itself in a private mount namespace (unshare -m) with a tmpfs over /run, as
#      snapshot-zfs.sh does, so that zfs-fuse's socket, lock and FUSE mounts are this run's
#      alone; installs Debian's zfs-fuse with apt-get when it is missing.
#   2. SRZ_DATA_MB (1024) of random bytes in SRZ_FILES (4) files, made once in WORK. Shale: pool
#      "src" (file system src/fs) and pool "dst", each on a file of SRZ_POOL_SIZE (3G); the files
#      copied in through `shale serve` with nfs-cp, snapshot src/fs@s1, the server stopped.
#      zfs-fuse (its daemon running meanwhile): pools "zsrc" and "zdst" on files of the same
#      size, the files copied into zsrc's mount with cp, `zfs snapshot zsrc@s1`.
#   3. SRZ_ROUNDS (2) rounds, each step from a cold cache (`sync; echo 3 >
#      /proc/sys/vm/drop_caches`), Shale then zfs-fuse, each side's pools imported for the step
#      and exported after it, inside its time: Shale's commands run offline (each imports its
#      pool, works, exports it), and zfs-fuse's pools are imported (`zpool import -d WORK`) and
#      exported around its commands, since its daemon would otherwise keep the data in its own
#      cache, which dropping the page cache does not empty:
#      send     `shale send src/fs@s1 > /dev/null`; `zfs send zsrc@s1 > /dev/null`
#      pipe     `shale send ... | shale receive dst/copy`; `zfs send ... | zfs receive
#               zdst/copy`; the copy destroyed after the step
#   4. `shale pool check` of both of Shale's pools.
# Prints each step's MB/s (MB = 2^20 bytes of file data over the wall time; the best of the
# rounds) and the ratios Shale / zfs-fuse, and writes them to RESULTS/sendrecv-zfs.txt. If
# zfs-fuse cannot run here, that line says why and the script exits 3.
#
# Usage: bench/send_receive-zfs.sh [--shale PATH] [--results DIR] [--work DIR] [--quick]
#   --quick: SRZ_DATA_MB 128, SRZ_ROUNDS 1.
# Needs root (the namespace, apt-get, FUSE, dropping the page cache) and nfs-cp.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/lib.sh
. "$here/lib.sh"
inside=0 # 1 once re-run in zfs-fuse's namespace (zfs_fuse_namespace)
bench_own_opt() { [ "$1" = --inside ] && inside=1; }
bench_parse_common_opts send_receive-zfs.sh shale-sendrecv-zfs "$@"
out=$results/sendrecv-zfs.txt

zfs_fuse_namespace

if [ "$quick" = 1 ]; then
	d_data=128 d_rounds=1
else
	d_data=1024 d_rounds=2
fi
data_mb=${SRZ_DATA_MB:-$d_data}
files=${SRZ_FILES:-4}
rounds=${SRZ_ROUNDS:-$d_rounds}
pool_size=${SRZ_POOL_SIZE:-3G}

zfs_pid= serve_pid=
cleanup() {
	[ -n "$serve_pid" ] && kill -9 "$serve_pid" 2>/dev/null
	zfs_fuse_stop zsrc zdst
	rm -rf "$work"
}
trap cleanup EXIT
zfs_fuse_own_run
rm -rf "$work"
mkdir -p "$work/pool" "$work/state" "$work/zsrc" "$work/zdst" "$work/data" ||
	die "cannot create $work"
cd "$work" || die "cannot enter $work"
cold() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }

# ---- zfs-fuse ---------------------------------------------------------------------------------
zfs_version=$(dpkg-query -W -f='${Version}' zfs-fuse 2>/dev/null)
why=
[ -c /dev/fuse ] || why="no /dev/fuse"
grep -qw fuse /proc/filesystems || why="${why:+$why; }no fuse in /proc/filesystems"
if [ -z "$why" ]; then
	# shellcheck disable=SC2119 # no command prefix: the daemon runs unpinned here
	zfs_fuse_start
fi
size_mb=$(numfmt --from=iec "$pool_size" | awk '{print int($1 / 1048576)}')
for z in zsrc zdst; do
	[ -n "$why" ] && break
	dd if=/dev/zero of="$z.img" bs=1M count="$size_mb" status=none || die "cannot write $z.img"
	zerr=$(zpool create -f -m "$work/$z" "$z" "$work/$z.img" 2>&1) || why="zpool create $z: $zerr"
done
if [ -n "$why" ]; then
	note "zfs-fuse $zfs_version cannot run here: $why"
	bench_finish "$out"
	exit 3
fi

# ---- the data, in both ------------------------------------------------------------------------
per=$((data_mb / files))
for i in $(seq "$files"); do
	head -c $((per * 1048576)) /dev/urandom >"data/f$i" || die "cannot make the data"
done
data_mb=$((per * files))
"$shale" pool create src pool/src0.img --size "$pool_size" >/dev/null || die "pool create src"
"$shale" pool create dst pool/dst0.img --size "$pool_size" >/dev/null || die "pool create dst"
"$shale" fs create src/fs -d pool >/dev/null || die "fs create"
echo "src/fs 127.0.0.1(rw,insecure,no_root_squash)" >state/exports
"$shale" serve --exports state/exports --state state --pool-dir pool --port 0 --no-portmap \
	--ready-file state/ready --log-level warn >serve.log 2>&1 &
serve_pid=$!
port=$(serve_wait "$serve_pid" state/ready)
[ -n "$port" ] || die "shale serve did not start: $(cat serve.log)"
for i in $(seq "$files"); do
	nfs-cp "data/f$i" "nfs://127.0.0.1/src/fs/f$i?nfsport=$port&mountport=$port&version=3" \
		>/dev/null || die "nfs-cp f$i"
	cp "data/f$i" "zsrc/f$i" || die "cp f$i into zfs-fuse"
done
"$shale" snapshot create src/fs@s1 -d pool >/dev/null || die "snapshot create"
kill "$serve_pid" && wait "$serve_pid"
serve_pid=
sync
zfs snapshot zsrc@s1 || die "zfs snapshot"
zpool export zsrc && zpool export zdst || die "zpool export"
rm -rf data
note "zfs-fuse $zfs_version and Shale, $data_mb MB of random bytes in $files files each, pools" \
	"of $pool_size on files in $work; $rounds round(s), each step from a cold cache"

# ---- the steps --------------------------------------------------------------------------------
declare -A best
timed() { # $1: key; the rest: a shell command
	local key=$1
	shift
	cold
	local t0 t1
	t0=$(now_ns)
	if ! bash -c "$*" >/dev/null 2>>steps.err; then
		say "$key failed: $(tail -3 steps.err | tr '\n' ' ')"
		return 1
	fi
	t1=$(now_ns)
	local s
	s=$(python3 -c "print(($t1 - $t0) / 1e9)")
	if [ -z "${best[$key]:-}" ] || python3 -c "import sys; sys.exit(0 if $s < ${best[$key]} else 1)"; then
		best[$key]=$s
	fi
}
for r in $(seq "$rounds"); do
	timed shale-send "'$shale' send src/fs@s1 -d pool >/dev/null"
	timed zfs-send "zpool import -d '$work' zsrc && zfs send zsrc@s1 >/dev/null && zpool export zsrc"
	timed shale-pipe "'$shale' send src/fs@s1 -d pool | '$shale' receive dst/copy -d pool"
	"$shale" snapshot destroy dst/copy@s1 -d pool >/dev/null 2>&1
	"$shale" fs destroy dst/copy -d pool >/dev/null 2>&1
	timed zfs-pipe "zpool import -d '$work' zsrc && zpool import -d '$work' zdst &&
		zfs send zsrc@s1 | zfs receive zdst/copy && zpool export zsrc && zpool export zdst"
	zpool import -d "$work" zdst >/dev/null 2>&1 && zfs destroy -r zdst/copy >/dev/null 2>&1
	zpool export zdst >/dev/null 2>&1
	say "round $r done"
done
rate() { [ -n "${best[$1]:-}" ] && python3 -c "print(f'{$data_mb / ${best[$1]}:.1f}')" || echo -; }
ratio() {
	[ -n "${best[$1]:-}" ] && [ -n "${best[$2]:-}" ] &&
		python3 -c "print(f'{${best[$2]} / ${best[$1]}:.2f}')" || echo -
}
note "send > /dev/null: Shale $(rate shale-send) MB/s, zfs-fuse $(rate zfs-send) MB/s;" \
	"Shale / zfs-fuse = $(ratio shale-send zfs-send)"
note "send | receive: Shale $(rate shale-pipe) MB/s, zfs-fuse $(rate zfs-pipe) MB/s;" \
	"Shale / zfs-fuse = $(ratio shale-pipe zfs-pipe)"
note "check of src: $("$shale" pool check src -d pool 2>&1 | tail -1)"
note "check of dst: $("$shale" pool check dst -d pool 2>&1 | tail -1)"
bench_finish "$out"
