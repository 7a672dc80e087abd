# lib.sh: what the snapshot and send/receive benches share, sourced by snapshot.sh,
# snapshot-zfs.sh, send_receive.sh and send_receive-zfs.sh: their common options, their messages
# and summary, the wait for `shale serve`, and zfs-fuse's namespace and daemon.
#
# A script sources it first, then calls bench_parse_common_opts; the functions below use the
# variables that call sets (bench_name, shale, results, work, quick).
# shellcheck shell=bash disable=SC2034,SC2154 # variables set here for the script, or by it

# bench_parse_common_opts NAME WORK ARGS...: parses the options every one of these benches takes,
#   --shale PATH   the shale binary (default build/release/tools/shale)
#   --results DIR  where the summary goes (default bench/results)
#   --work DIR     the run's scratch directory (default WORK, a name in ${TMPDIR:-/tmp})
#   --quick        the short run (sets quick=1)
# NAME is the script's name in its messages (die, say, bench_finish). A script with a flag of its
# own (no value) defines bench_own_opt FLAG, which returns 0 when it took the flag, before the
# call. Anything else prints the usage and exits 2. Sets bench_name, bench_args (ARGS, for a
# re-run), shale and results (both absolute; RESULTS is created), work and quick.
bench_parse_common_opts() {
	local top
	bench_name=$1
	top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	shale=$top/build/release/tools/shale
	results=$top/bench/results
	work=${TMPDIR:-/tmp}/$2
	quick=0
	shift 2
	bench_args=("$@")
	while [ $# -gt 0 ]; do
		case "$1" in
		--shale) shale=$2; shift 2 ;;
		--results) results=$2; shift 2 ;;
		--work) work=$2; shift 2 ;;
		--quick) quick=1; shift ;;
		*)
			if declare -F bench_own_opt >/dev/null && bench_own_opt "$1"; then
				shift
			else
				echo "usage: $0 [--shale PATH] [--results DIR] [--work DIR] [--quick]" >&2
				exit 2
			fi
			;;
		esac
	done
	shale=$(cd "$(dirname "$shale")" && pwd)/$(basename "$shale")
	mkdir -p "$results" || die "cannot create $results"
	results=$(cd "$results" && pwd)
}

die() { echo "$bench_name: $*" >&2; exit 1; }
say() { echo "$bench_name: $*" >&2; }
now_ns() { date +%s%N; }
# A figure of the run: kept for the summary (bench_finish) and said at once.
summary=()
note() { summary+=("$*"); say "$*"; }
# bench_finish FILE: writes the run's figures to FILE and prints them under a header line.
bench_finish() {
	printf '%s\n' "${summary[@]}" >"$1"
	echo "---- $bench_name summary"
	cat "$1"
}

# serve_wait PID READY: waits until `shale serve` (PID, started with --port 0 --ready-file READY)
# writes its port into READY, or exits, or 20 s (400 checks 50 ms apart) pass. Prints the port;
# prints nothing when it did not come up.
serve_wait() {
	local pid=$1 ready=$2
	for _ in $(seq 400); do
		grep -q '^port=' "$ready" 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	sed -n 's/^port=//p' "$ready" 2>/dev/null
}

# ---- zfs-fuse ---------------------------------------------------------------------------------
# zfs-fuse's daemon has one control socket (/run/zfs/zfs_socket) and one lock (/run/lock/zfs) per
# machine, so a run gives it a /run of its own: the script re-runs itself in a private mount
# namespace (zfs_fuse_namespace) and mounts a tmpfs over /run there (zfs_fuse_own_run), so that
# the socket, the lock and the daemon's FUSE mounts are the run's alone. The script takes the
# flag --inside (bench_own_opt) and sets inside=1 with it.

# zfs_fuse_namespace: outside the namespace (inside=0), installs Debian's zfs-fuse with apt-get
# when it is missing and re-runs the script in a private mount namespace with its arguments and
# --inside; it does not return. Inside, returns at once.
zfs_fuse_namespace() {
	[ "$inside" = 0 ] || return 0
	if ! command -v zfs-fuse >/dev/null; then
		say "installing zfs-fuse"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zfs-fuse \
			>/dev/null || die "apt-get install zfs-fuse failed"
	fi
	exec unshare -m --propagation private "$0" "${bench_args[@]}" --inside
}

# zfs_fuse_own_run: inside the namespace, a tmpfs over /run (and /run/lock in it).
zfs_fuse_own_run() {
	mount -t tmpfs tmpfs /run || die "cannot mount a tmpfs over /run in the namespace"
	mkdir -p /run/lock
}

# zfs_fuse_start [PREFIX...]: starts zfs-fuse's daemon in the background (under PREFIX, e.g.
# taskset -c 0), its output in ./zfs-fuse.log, and waits up to 10 s for its control socket. Sets
# zfs_pid and returns 0; if the daemon exits or makes no socket, sets why (its exit status and
# log) and an empty zfs_pid, and returns 1. zfs_fuse_stop stops it.
zfs_fuse_start() {
	"$@" zfs-fuse --no-daemon --no-kstat-mount -p /run/zfs-fuse.pid >zfs-fuse.log 2>&1 &
	zfs_pid=$!
	for _ in $(seq 100); do
		[ -S /run/zfs/zfs_socket ] && break
		kill -0 "$zfs_pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -S /run/zfs/zfs_socket ] && return 0
	wait "$zfs_pid" 2>/dev/null
	why="zfs-fuse exited with status $? before it made its socket: $(tr '\n' ' ' <zfs-fuse.log)"
	zfs_pid=
	return 1
}

# zfs_fuse_stop POOL...: when zfs_fuse_start's daemon runs, exports each POOL (forced, errors
# ignored: a pool may not be imported) and stops the daemon.
zfs_fuse_stop() {
	local z
	[ -n "$zfs_pid" ] || return 0
	for z in "$@"; do zpool export -f "$z" >/dev/null 2>&1; done
	kill "$zfs_pid" 2>/dev/null
	wait "$zfs_pid" 2>/dev/null
}
