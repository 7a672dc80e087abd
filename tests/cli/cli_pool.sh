#!/bin/bash
# cli_pool.sh: the `shale pool` and `shale fs` commands, run as an administrator would: create a
# mirrored pool with a log device on files, create and list file systems, status, check, a
# refused import while another process holds the leaves, destroy, a log device made a mirror
# and back (attach, detach), the refused changes of vdevs, a lost log device replaced, a mirror
# added, the list of pools, a pool destroyed, and the argument errors.
# Prints TAP lines and a closing count. Needs $SHALE_BIN and flock(1) (util-linux).
set -u
. "$(dirname "$0")/../lib/tap.sh"

root=$(mktemp -d /tmp/shale-cli.XXXXXX)
trap 'rm -rf "$root"' EXIT
cd "$root" || exit 1
shale() { "$SHALE_BIN" "$@"; }
out_has() { # out_has PATTERN COMMAND...: COMMAND's stdout+stderr matches PATTERN (exit ignored)
	local pat=$1
	shift
	"$@" >"$root/out" 2>&1
	grep -q -- "$pat" "$root/out" || { echo "no '$pat' in:"; cat "$root/out"; return 1; }
}
fails_with() { # fails_with PATTERN COMMAND...: COMMAND exits non-zero and says PATTERN
	local pat=$1
	shift
	if "$@" >"$root/out" 2>&1; then
		echo "exited 0:"
		cat "$root/out"
		return 1
	fi
	grep -q -- "$pat" "$root/out" || { echo "no '$pat' in:"; cat "$root/out"; return 1; }
}

mkdir -p var/pool
check "pool create: a mirror of two files and a log file, created at --size" \
	out_has "created pool tank: 1 mirrors, a log vdev" \
	shale pool create tank mirror var/pool/a.img var/pool/b.img log var/pool/log.img --size 64M
check "pool create: the three leaves exist at the size asked" \
	test "$(stat -c %s var/pool/a.img var/pool/b.img var/pool/log.img | sort -u)" = 67108864
check "pool create: a missing leaf without --size is refused" \
	fails_with "does not exist" shale pool create other var/pool/missing.img
check "pool create: a leaf of another pool is refused without --force" \
	fails_with "belongs to a pool already" shale pool create other var/pool/a.img
check "fs create tank/home" out_has "created tank/home" shale fs create tank/home
check "fs create with zstd and a 64K record size" \
	out_has "created tank/src" shale fs create tank/src --compression zstd --recordsize 64K
check "fs create of an existing file system fails" fails_with "exists" shale fs create tank/home
check "fs list shows both with their properties" \
	bash -c '"$SHALE_BIN" fs list tank | grep -q "tank/home .* 131072  lz4" &&
		 "$SHALE_BIN" fs list tank | grep -q "tank/src .* 65536  zstd"'
check "fs set compression=zstd: fs list shows it" \
	bash -c '"$SHALE_BIN" fs set compression=zstd tank/home >/dev/null 2>&1 &&
		 "$SHALE_BIN" fs list tank | grep -q "tank/home .* 131072  zstd" &&
		 "$SHALE_BIN" fs set compression=lz4 tank/home >/dev/null 2>&1 &&
		 "$SHALE_BIN" fs list tank | grep -q "tank/home .* 131072  lz4"'
check "fs rename tank/home tank/house, and back" \
	bash -c '"$SHALE_BIN" fs rename tank/home tank/house 2>/dev/null | grep -q "renamed tank/home to tank/house" &&
		 "$SHALE_BIN" fs list tank | grep -q "^tank/house " && ! "$SHALE_BIN" fs list tank | grep -q "^tank/home " &&
		 "$SHALE_BIN" fs rename tank/house tank/home >/dev/null 2>&1 && "$SHALE_BIN" fs list tank | grep -q "^tank/home "'
check "fs rename onto an existing file system is refused" fails_with "File exists" shale fs rename tank/home tank/src
check "fs set quota=10M: fs list shows it in bytes; quota=none takes it away" \
	bash -c '"$SHALE_BIN" fs set quota=10M tank/home 2>/dev/null | grep -q "set quota=10M on tank/home" &&
		 "$SHALE_BIN" fs list tank | grep -Eq "^tank/home .* lz4 +10485760$" &&
		 "$SHALE_BIN" fs set quota=none tank/home >/dev/null 2>&1 &&
		 "$SHALE_BIN" fs list tank | grep -Eq "^tank/home .* lz4 +none$"'
check "fs set quota=lots is refused" fails_with "quota is a size" shale fs set quota=lots tank/home
check "fs set recordsize is refused: fixed at creation" \
	fails_with "fixed when a file system is created" shale fs set recordsize=64K tank/home
check "pool status: online, a mirror of the two leaves and the log" \
	bash -c 'o=$("$SHALE_BIN" pool status tank) && grep -q "state: ONLINE" <<<"$o" &&
		 grep -q "mirror-0" <<<"$o" && grep -q "var/pool/b.img" <<<"$o" &&
		 grep -q "logs" <<<"$o" && grep -q "datasets: 2" <<<"$o"'
check "pool check: no problems, exit 0" out_has "pool tank: 0 problems" shale pool check tank
check "pool status: the last check's outcome, as a scan line" \
	bash -c '"$SHALE_BIN" pool status tank | grep -Eq "^  scan: last check [0-9-]+ [0-9:]+ UTC, .* 0 problems$"'
check "pool import and export" bash -c '"$SHALE_BIN" pool import tank >/dev/null && "$SHALE_BIN" pool export tank'
check "pool status, pool list and fs list of a pool no server holds write nothing to its leaves" \
	bash -c 'sum() { md5sum var/pool/a.img var/pool/b.img var/pool/log.img; }; before=$(sum) &&
		 "$SHALE_BIN" pool status tank | grep -q "log: 0 records newer than the last txg" &&
		 "$SHALE_BIN" pool list | grep -q "^tank " && "$SHALE_BIN" fs list tank | grep -q "^tank/home " &&
		 [ "$(sum)" = "$before" ]'
check "pool status while another reader holds the leaves (shared locks, as a second status)" \
	bash -c 'flock -s var/pool/a.img flock -s var/pool/b.img flock -s var/pool/log.img \
		"$SHALE_BIN" pool status tank | grep -q "state: ONLINE"'
check "but no change to the pool meanwhile: fs create is refused as in use" \
	bash -c '! flock -s var/pool/a.img flock -s var/pool/b.img flock -s var/pool/log.img \
		"$SHALE_BIN" fs create tank/other 2>err.txt && grep -q "in use" err.txt && ! "$SHALE_BIN" fs list tank | grep -q tank/other'
check "pool status of a pool no server holds says it read it only" \
	out_has "durable (imported read only: nothing written)" shale pool status tank
check "and prints no log lines of its own, as zpool" \
	bash -c '[ -z "$("$SHALE_BIN" pool status tank 2>&1 >/dev/null)" ] && [ -z "$("$SHALE_BIN" fs list tank 2>&1 >/dev/null)" ]' 
check "a pool whose leaves another process holds is refused as in use" \
	fails_with "in use by another process" \
	flock var/pool/a.img flock var/pool/b.img flock var/pool/log.img "$SHALE_BIN" pool status tank
check "fs destroy of an empty file system" out_has "destroyed tank/src" shale fs destroy tank/src
check "fs list no longer shows it" bash -c '! "$SHALE_BIN" fs list tank | grep -q tank/src'
check "a pool that does not exist" fails_with "no leaf of pool 'nope'" shale pool status nope
check "-d finds leaves elsewhere" bash -c 'mv var/pool alt && "$SHALE_BIN" pool status -d alt tank >/dev/null &&
		 mv alt var/pool'
check "fs create needs POOL/FS" fails_with "POOL/FS" shale fs create tank
check "pool create: mirrors of different widths are refused" \
	fails_with "same number" shale pool create m2 mirror x1 x2 mirror y1 --size 64M
check "pool attach: the log device becomes a mirror" \
	bash -c 'o=$("$SHALE_BIN" pool attach tank var/pool/log.img var/pool/log2.img --size 64M 2>&1) &&
		grep -q "pool tank: 0 problems" <<<"$o" && grep -A3 "^	logs" <<<"$o" | grep -q "mirror" &&
		grep -q "var/pool/log2.img  *ONLINE" <<<"$o"'
check "pool detach: and back to a single log device" \
	bash -c 'o=$("$SHALE_BIN" pool detach tank var/pool/log.img 2>&1) && grep -q "state: ONLINE" <<<"$o" &&
		grep -q "detached var/pool/log.img" <<<"$o" && ! grep -q "^	.*var/pool/log.img " <<<"$o" &&
		grep -q "^	  var/pool/log2.img  *ONLINE" <<<"$o"'
check "pool detach: the only leaf of a vdev is refused" \
	fails_with "only leaf of its vdev" shale pool detach tank var/pool/log2.img
check "pool attach: a leaf of another pool is refused without --force" \
	bash -c '"$SHALE_BIN" pool create other var/pool/o.img --size 64M >/dev/null 2>&1 &&
		! "$SHALE_BIN" pool attach tank var/pool/a.img var/pool/o.img 2>"$0/err" && grep -q "labels of pool other" "$0/err"' "$root"
check "pool attach: a leaf name that is not the pool's lists the leaves" \
	fails_with "its leaves: var/pool/a.img (guid" shale pool attach tank var/pool/nope.img var/pool/n.img --size 64M
check "pool attach: a new leaf created for a refused attach is removed again" test ! -e var/pool/n.img
rm var/pool/log2.img
check "a pool whose only log device is lost does not import" \
	fails_with "the log vdev has none of its 1 leaves" shale pool status tank
check "pool replace of the lost log device: refused without --discard-log, with a hint" \
	fails_with "replace --discard-log" shale pool replace tank var/pool/log2.img var/pool/log3.img --size 64M
check "pool replace --discard-log: a new log device, the pool back" \
	bash -c 'o=$("$SHALE_BIN" pool replace tank var/pool/log2.img var/pool/log3.img --size 64M --discard-log 2>&1) &&
		grep -q "replaced the lost log device" <<<"$o" && grep -q "pool tank: 0 problems" <<<"$o" &&
		grep -q "state: ONLINE" <<<"$o" && grep -q "^	  var/pool/log3.img  *ONLINE" <<<"$o"'
check "pool add: a plain vdev beside mirrors is refused (redundancy), its file removed" \
	bash -c '! "$SHALE_BIN" pool add tank var/pool/x.img --size 64M 2>"$0/err" && grep -q "redundancy would differ" "$0/err" &&
		test ! -e var/pool/x.img' "$root"
check "pool add: a second mirror, more space" \
	bash -c 'before=$("$SHALE_BIN" pool status tank 2>/dev/null | sed -n "s/^ space: \([0-9.]*\)M total.*/\1/p") &&
		o=$("$SHALE_BIN" pool add tank mirror var/pool/c.img var/pool/d.img --size 64M 2>&1) &&
		grep -q "added a mirror of var/pool/c.img" <<<"$o" && grep -q "^	  mirror-1 " <<<"$o" &&
		after=$(sed -n "s/^ space: \([0-9.]*\)M total.*/\1/p" <<<"$o") &&
		awk -v a="$after" -v b="$before" "BEGIN { exit !(a > b + 60) }"'
check "pool list: every pool in the directory, with its size and health" \
	bash -c 'o=$("$SHALE_BIN" pool list 2>/dev/null) && grep -Eq "^tank +[0-9.]+M +[0-9.]+[KM] +[0-9.]+M +ONLINE +-$" <<<"$o" &&
		grep -Eq "^other +[0-9.]+M .* ONLINE" <<<"$o"'
check "pool destroy: the pool is gone, its leaves no longer any pool's" \
	bash -c '"$SHALE_BIN" pool destroy other 2>/dev/null | grep -q "destroyed pool other: the labels of 1 leaf wiped" &&
		! "$SHALE_BIN" pool list 2>/dev/null | grep -q "^other " && test -e var/pool/o.img &&
		! "$SHALE_BIN" pool status other >/dev/null 2>&1 &&
		"$SHALE_BIN" pool create again var/pool/o.img >/dev/null 2>&1 && "$SHALE_BIN" pool destroy again >/dev/null 2>&1'
check "pool check still clean after everything" out_has "0 problems" shale pool check tank

tap_finish cli_pool
