#!/bin/bash
# fs_diff.sh: `shale fs diff` as an administrator uses it, on a pool nobody serves and on one
# `shale serve` holds (the server compares, through its status socket). Offline: a snapshot
# against itself and against the unchanged file system prints nothing; usage errors exit 2
# (no snapshot named, too many names, a file system where the snapshot goes); a missing
# snapshot, snapshots of two file systems or of two pools exit 1 saying why. Served: files
# copied in with nfs-cp after a snapshot are created ("+") and the root modified ("M"),
# exactly those lines in path order, for snapshot against snapshot and snapshot against the
# file system as it is; the refusals say the same through the server (the server holds the
# leaves locked: nothing else could have answered).
# Offline again, the same diffs give the same lines, and `shale pool check` is clean. (The
# kinds of change nfs-cp cannot make, overwrites, renames, links and removes, are
# tests/unit/poolfs/test_pool_fs_diff.c's.) Prints TAP lines. Needs $SHALE_BIN and nfs-cp.
set -u
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/../lib/serve.sh"

root=$(mktemp -d /tmp/shale-fs-diff.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$root"
}
trap cleanup EXIT
cd "$root" || exit 1
S() { "$SHALE_BIN" "$@" -d var/pool; }
stop() { kill "$pid" && wait "$pid"; pid=; }
url() { echo "nfs://127.0.0.1/tank/home/$1$url_q"; }
# diff_is WANT ARGS...: the diff's output is exactly WANT (printf's escapes), and it exits 0
diff_is() {
	local want
	want=$(printf "$1")
	shift
	local got
	got=$(S fs diff "$@") || return 1
	[ "$got" = "$want" ] || { printf 'got:\n%s\nwant:\n%s\n' "$got" "$want"; return 1; }
}
# fails_with STATUS TEXT ARGS...: the diff exits STATUS and its error says TEXT
fails_with() {
	local status=$1 text=$2
	shift 2
	S fs diff "$@" >out 2>err
	local rc=$?
	[ "$rc" = "$status" ] && [ ! -s out ] && grep -q -- "$text" err ||
		{ echo "exit $rc"; cat out err; return 1; }
}
export -f S diff_is fails_with

mkdir -p var/pool var/state
"$SHALE_BIN" pool create tank var/pool/tank0.img --size 256M >/dev/null
"$SHALE_BIN" pool create pail var/pool/pail0.img --size 64M >/dev/null
S fs create tank/home >/dev/null
S fs create tank/other >/dev/null
S fs create pail/home >/dev/null
S snapshot create tank/home@empty tank/other@a >/dev/null
S snapshot create pail/home@a >/dev/null

# ---- offline ----
check "a snapshot against itself: nothing, exit 0" diff_is "" tank/home@empty tank/home@empty
check "against the unchanged file system, named or not: nothing" bash -c '
	diff_is "" tank/home@empty tank/home && diff_is "" tank/home@empty'
check "usage errors exit 2: no name, three names, no snapshot first, no pool" bash -c '
	fails_with 2 usage && fails_with 2 usage tank/home@empty tank/home tank/home &&
	fails_with 2 usage tank/home && fails_with 2 usage home@empty'
check "a missing snapshot exits 1 naming it" fails_with 1 "tank/home@nosuch: no such snapshot" \
	tank/home@nosuch
check "a missing later snapshot too" fails_with 1 "tank/home@nosuch: no such snapshot" \
	tank/home@empty tank/home@nosuch
check "snapshots of two file systems are refused" fails_with 1 "not of one file system" \
	tank/home@empty tank/other@a
check "and of two pools" fails_with 1 "not of one file system" tank/home@empty pail/home@a

# ---- served ----
echo "tank/home 127.0.0.1(rw,insecure,no_root_squash)" >var/exports
check "serve starts with tank/home exported" start
head -c 300000 /dev/urandom >one.bin
head -c 200000 /dev/urandom >two.bin
check "nfs-cp writes two files" bash -c "nfs-cp one.bin '$(url one.bin)' && nfs-cp two.bin '$(url two.bin)'"
check "snapshot tank/home@one on the served pool" bash -c 'S snapshot create tank/home@one >/dev/null'
check "diff of two snapshots on the served pool: the root and the two new files" \
	diff_is 'M\t/\n+\t/one.bin\n+\t/two.bin' tank/home@empty tank/home@one
head -c 100000 /dev/urandom >three.bin
check "nfs-cp writes a third file" nfs-cp three.bin "$(url three.bin)"
check "against the served file system as it is: the root modified, the new file created" \
	diff_is 'M\t/\n+\t/three.bin' tank/home@one
check "from the first snapshot to the live file system: three files created" \
	diff_is 'M\t/\n+\t/one.bin\n+\t/three.bin\n+\t/two.bin' tank/home@empty tank/home
check "the server answers the refusals too" bash -c '
	fails_with 1 "tank/home@nosuch: no such snapshot" tank/home@nosuch &&
	fails_with 1 "not of one file system" tank/home@one tank/other@a'
check "snapshot tank/home@two on the served pool" bash -c 'S snapshot create tank/home@two >/dev/null'
check "the server stops" stop

# ---- offline again ----
check "offline, the same diffs give the same lines" bash -c '
	diff_is "M\t/\n+\t/one.bin\n+\t/two.bin" tank/home@empty tank/home@one &&
	diff_is "M\t/\n+\t/three.bin" tank/home@one tank/home@two &&
	diff_is "M\t/\n+\t/three.bin" tank/home@one &&
	diff_is "" tank/home@two'
check "both ways: the later snapshot first reads as the changes undone" \
	diff_is 'M\t/\n-\t/one.bin\n-\t/two.bin' tank/home@one tank/home@empty
check "shale pool check is clean" bash -c '"$0" pool check tank -d var/pool | grep -q " 0 problems"' "$SHALE_BIN"
tap_finish fs_diff
