#!/bin/bash
# snapshot.sh: `shale snapshot create|list|destroy` and `shale fs list -t` as an administrator
# uses them, on a pool nobody serves and on one `shale serve` holds (the server takes the
# snapshot on the live pool). Offline: snapshots of two file systems in one command share a txg;
# a bad, duplicate or second name for one file system is refused and nothing is made; a file
# system with snapshots is not destroyed; `fs destroy POOL/FS@SNAP` destroys a snapshot; a clone
# keeps its origin snapshot until it is destroyed itself; `fs promote` moves the origin's
# snapshots up to the clone's origin to the clone (refused on a name both have, and for a file
# system that is no clone), after which the former origin can be destroyed. Served:
# files copied in with nfs-cp before the command are in the snapshot's REFER, a file copied in
# after it is not (the next snapshot's REFER has it); a snapshot is destroyed while served; the
# server promotes a clone, not while its origin is exported; the
# exported file system is rolled back while served (a file written after the snapshot is gone at
# once, the others read byte-exact, new files go on); an exports line naming a snapshot serves
# it read only (its files byte-exact, writes refused, the snapshot not destroyed while exported);
# offline, `fs rollback` refuses without
# -r when a later snapshot exists, and with -r makes the file system its snapshot: served again,
# the snapshot's files are there byte-exact and a file written after it is not. The snapshots
# outlive the server, and `shale pool check` is clean. Prints TAP lines. Needs
# $SHALE_BIN and nfs-cp.
set -u
. "$(dirname "$0")/../lib/tap.sh"
. "$(dirname "$0")/../lib/serve.sh"

root=$(mktemp -d /tmp/shale-snapshot.XXXXXX)
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
# a snapshot's field from `snapshot list -p`: $1 POOL/FS@SNAP, $2 the column (2 USED, 3 REFER)
field() { S snapshot list "${1%@*}" -p | awk -v n="$1" -v c="$2" '$1 == n { print $c }'; }
export -f S field start url

mkdir -p var/pool var/state
"$SHALE_BIN" pool create tank var/pool/tank0.img --size 256M >/dev/null
S fs create tank/home >/dev/null
S fs create tank/other >/dev/null

# ---- offline ----
check "snapshots of two file systems in one command" \
	bash -c '"$0" snapshot create tank/home@a tank/other@a -d var/pool | grep -q "^took tank/home@a$"' "$SHALE_BIN"
check "both are listed, with one txg: the same creation second" bash -c '
	o=$("$0" snapshot list tank -p -d var/pool) &&
	[ "$(grep -c "^tank/home@a \|^tank/other@a " <<<"$o")" = 2 ] &&
	[ "$(awk "NR > 1 { print \$4 }" <<<"$o" | sort -u | wc -l)" = 1 ]' "$SHALE_BIN"
check "a duplicate name is refused, and the other name of the command is not made" bash -c '
	! "$0" snapshot create tank/home@b tank/other@a -d var/pool 2>err &&
	grep -q "tank/other@a\|other@a: a snapshot of that name exists" err &&
	! "$0" snapshot list tank -d var/pool | grep -q "@b "' "$SHALE_BIN"
check "two snapshots of one file system in one command are refused" bash -c '
	! "$0" snapshot create tank/home@c tank/home@d -d var/pool 2>err &&
	grep -q "one snapshot per file system" err' "$SHALE_BIN"
check "bad names are refused: a slash, an empty name, no file system" bash -c '
	! "$0" snapshot create "tank/home@x/y" -d var/pool 2>/dev/null &&
	! "$0" snapshot create "tank/home@" -d var/pool 2>/dev/null &&
	! "$0" snapshot create tank/nofs@x -d var/pool 2>err && grep -q "no such file system" err' "$SHALE_BIN"
check "fs list -t all shows each file system with its snapshots below it" bash -c '
	o=$("$0" fs list tank -t all -d var/pool) &&
	grep -A1 "^tank/home " <<<"$o" | grep -q "^tank/home@a " &&
	! "$0" fs list tank -d var/pool | grep -q @' "$SHALE_BIN"
check "a file system with snapshots is not destroyed" bash -c '
	! "$0" fs destroy tank/other -d var/pool 2>err && grep -q "has snapshots" err' "$SHALE_BIN"
check "fs destroy POOL/FS@SNAP destroys the snapshot; then the file system goes" bash -c '
	"$0" fs destroy tank/other@a -d var/pool | grep -q "^destroyed tank/other@a$" &&
	"$0" fs destroy tank/other -d var/pool >/dev/null' "$SHALE_BIN"

check "fs clone makes a writable file system from a snapshot" bash -c '
	"$0" fs clone tank/home@a tank/copy -d var/pool | grep -q "^cloned tank/copy from tank/home@a$" &&
	"$0" fs list tank -d var/pool | grep -q "^tank/copy "' "$SHALE_BIN"
check "the snapshot a clone depends on is not destroyed, and the error names the clone" bash -c '
	! "$0" snapshot destroy tank/home@a -d var/pool 2>err && grep -q "dependent clones: copy" err' "$SHALE_BIN"
check "fs clone refuses a missing snapshot, a taken name, another pool" bash -c '
	! "$0" fs clone tank/home@zz tank/c2 -d var/pool 2>/dev/null &&
	! "$0" fs clone tank/home@a tank/copy -d var/pool 2>/dev/null &&
	! "$0" fs clone tank/home@a other/c3 -d var/pool 2>/dev/null' "$SHALE_BIN"
check "the clone destroyed, its origin can go; a check is clean" bash -c '
	"$0" fs destroy tank/copy -d var/pool >/dev/null &&
	"$0" snapshot destroy tank/home@a -d var/pool >/dev/null &&
	"$0" pool check tank -d var/pool | grep -q " 0 problems"' "$SHALE_BIN"
check "fs promote refuses a snapshot name both file systems have, naming it" bash -c '
	"$0" snapshot create tank/home@p1 -d var/pool >/dev/null &&
	"$0" snapshot create tank/home@p2 -d var/pool >/dev/null &&
	"$0" fs clone tank/home@p1 tank/pc -d var/pool >/dev/null &&
	"$0" snapshot create tank/pc@p1 -d var/pool >/dev/null &&
	! "$0" fs promote tank/pc -d var/pool 2>err && grep -q "home@p1.*pc@p1" err &&
	"$0" snapshot destroy tank/pc@p1 -d var/pool >/dev/null' "$SHALE_BIN"
check "fs promote: the clone takes the origin's snapshots up to its origin, the rest stay" bash -c '
	"$0" fs promote tank/pc -d var/pool | grep -q "^promoted tank/pc$" &&
	o=$("$0" snapshot list tank -d var/pool) && grep -q "^tank/pc@p1 " <<<"$o" &&
	grep -q "^tank/home@p2 " <<<"$o" && ! grep -q "^tank/home@p1 " <<<"$o"' "$SHALE_BIN"
check "fs promote refuses a file system that is no clone, and a missing one" bash -c '
	! "$0" fs promote tank/pc -d var/pool 2>err && grep -q "not a clone" err &&
	! "$0" fs promote tank/nosuch -d var/pool 2>err && grep -q "no such file system" err' "$SHALE_BIN"
check "the origin it depends on stays; the former origin goes after its own snapshot; check clean" bash -c '
	! "$0" snapshot destroy tank/pc@p1 -d var/pool 2>err && grep -q "dependent clones: home" err &&
	! "$0" fs destroy tank/home -d var/pool 2>/dev/null &&
	"$0" snapshot destroy tank/home@p2 -d var/pool >/dev/null &&
	"$0" fs destroy tank/home -d var/pool >/dev/null &&
	"$0" fs rename tank/pc tank/home -d var/pool >/dev/null &&
	"$0" snapshot destroy tank/home@p1 -d var/pool >/dev/null &&
	"$0" pool check tank -d var/pool | grep -q " 0 problems"' "$SHALE_BIN"

# ---- served ----
echo "tank/home 127.0.0.1(rw,insecure,no_root_squash)" >var/exports
check "serve starts with tank/home exported" start
head -c 3000000 /dev/urandom >one.bin
head -c 3000000 /dev/urandom >two.bin
check "nfs-cp writes two 3 MB files" bash -c "nfs-cp one.bin '$(url one.bin)' && nfs-cp two.bin '$(url two.bin)'"
check "snapshot create on the served pool (the server takes it)" \
	bash -c '"$0" snapshot create tank/home@served -d var/pool | grep -q "^took tank/home@served$"' "$SHALE_BIN"
check "its REFER holds the files written before the command" \
	bash -c '[ "$(field tank/home@served 3)" -ge 6000000 ]'
check "its USED is 0 while the file system still holds everything" \
	bash -c '[ "$(field tank/home@served 2)" -lt 1000000 ]'
head -c 3000000 /dev/urandom >three.bin
check "nfs-cp writes a third file after the snapshot" nfs-cp three.bin "$(url three.bin)"
check "a second snapshot holds it: its REFER is the first's plus 3 MB" bash -c '
	"$0" snapshot create tank/home@later -d var/pool >/dev/null &&
	a=$(field tank/home@served 3) && b=$(field tank/home@later 3) &&
	[ "$b" -ge $((a + 2900000)) ] && [ "$b" -le $((a + 3300000)) ]' "$SHALE_BIN"
check "fs list's USED of tank/home is its REFER plus what only its snapshots hold" bash -c '
	read -r used refer < <("$0" fs list tank -d var/pool | awk "\$1 == \"tank/home\" { print \$2, \$4 }") &&
	[ "$used" -ge "$refer" ] && [ "$refer" -ge 9000000 ]' "$SHALE_BIN"
check "fs clone on the served pool (the server makes it)" bash -c '
	"$0" fs clone tank/home@served tank/served-copy -d var/pool | grep -q "^cloned " &&
	"$0" fs list tank -t all -d var/pool | grep -q "^tank/served-copy "' "$SHALE_BIN"
check "its origin is not destroyed while served, then the clone is" bash -c '
	! "$0" snapshot destroy tank/home@served -d var/pool 2>/dev/null &&
	"$0" fs destroy tank/served-copy -d var/pool >/dev/null' "$SHALE_BIN"
check "fs promote on the served pool: refused while the origin is exported, saying so" bash -c '
	"$0" fs clone tank/home@later tank/hc -d var/pool >/dev/null &&
	! "$0" fs promote tank/hc -d var/pool 2>err && grep -q "home is in use" err &&
	"$0" fs destroy tank/hc -d var/pool >/dev/null' "$SHALE_BIN"
check "fs promote on the served pool (the server makes it); the former origin then goes" bash -c '
	"$0" fs create tank/srv -d var/pool >/dev/null &&
	"$0" snapshot create tank/srv@o -d var/pool >/dev/null &&
	"$0" fs clone tank/srv@o tank/srvc -d var/pool >/dev/null &&
	"$0" fs promote tank/srvc -d var/pool | grep -q "^promoted tank/srvc$" &&
	"$0" snapshot list tank -d var/pool | grep -q "^tank/srvc@o " &&
	"$0" fs destroy tank/srv -d var/pool >/dev/null' "$SHALE_BIN"
check "destroy of the first while served" bash -c '
	"$0" snapshot destroy tank/home@served -d var/pool | grep -q "^destroyed tank/home@served$"' "$SHALE_BIN"
check "the files read back through NFS are whole" \
	bash -c "nfs-cp '$(url one.bin)' back.bin && cmp one.bin back.bin && nfs-cp '$(url three.bin)' back3.bin && cmp three.bin back3.bin"
head -c 1000000 /dev/urandom >four.bin
check "nfs-cp writes a fourth file after tank/home@later" nfs-cp four.bin "$(url four.bin)"
check ".zfs/snapshot lists the snapshots through NFS (libnfs)" bash -c "
	nfs-ls '$(url .zfs/snapshot)' >ls.out && grep -q ' later\$' ls.out && ! grep -q ' served\$' ls.out"
check "a file of .zfs/snapshot/later reads byte-exact, one written after it is not there" bash -c "
	nfs-cp '$(url .zfs/snapshot/later/three.bin)' z3.bin && cmp three.bin z3.bin &&
	! nfs-cp '$(url .zfs/snapshot/later/four.bin)' z4.bin 2>/dev/null"
check "a write into .zfs/snapshot/later is refused (read only)" bash -c "
	! nfs-cp one.bin '$(url .zfs/snapshot/later/new.bin)' 2>err && grep -qi 'read-only\|ROFS' err"
check "the root lists .zfs only with snapdir=visible" bash -c '
	nfs-ls "$1" >ls0 && ! grep -q " \.zfs\$" ls0 &&
	"$0" fs set snapdir=visible tank/home -d var/pool | grep -q "^set snapdir=visible" &&
	nfs-ls "$1" >ls1 && grep -q " \.zfs\$" ls1 &&
	"$0" fs set snapdir=hidden tank/home -d var/pool >/dev/null &&
	nfs-ls "$1" >ls2 && ! grep -q " \.zfs\$" ls2' "$SHALE_BIN" "nfs://127.0.0.1/tank/home$url_q"
head -c 500000 /dev/urandom >five.bin
check "fs rollback of the exported file system on the served pool (the server makes it)" bash -c '
	"$0" snapshot create tank/home@before5 -d var/pool >/dev/null && nfs-cp five.bin "$1" &&
	"$0" fs rollback tank/home@before5 -d var/pool |
		grep -q "^rolled tank/home back to tank/home@before5$"' "$SHALE_BIN" "$(url five.bin)"
check "served on at once: the file written after the snapshot is gone, the others read byte-exact" bash -c "
	! nfs-cp '$(url five.bin)' r5.bin 2>/dev/null &&
	nfs-cp '$(url four.bin)' r4.bin && cmp four.bin r4.bin &&
	nfs-cp '$(url one.bin)' r1.bin && cmp one.bin r1.bin"
check "the rolled-back file system takes a new file, and its snapshot goes" bash -c '
	nfs-cp five.bin "$1" && nfs-cp "$1" r6.bin && cmp five.bin r6.bin &&
	"$0" snapshot destroy tank/home@before5 -d var/pool >/dev/null' "$SHALE_BIN" "$(url six.bin)"
check "the server stops" stop
# a snapshot exported on its own line: served read only
echo "tank/home@later 127.0.0.1(rw,insecure,no_root_squash)" >var/exports
check "serve starts with the snapshot tank/home@later exported" start
surl() { echo "nfs://127.0.0.1/tank/home@later/$1$url_q"; }
check "its files read byte-exact through NFS" bash -c "nfs-cp '$(surl one.bin)' s1.bin && cmp one.bin s1.bin &&
	nfs-cp '$(surl three.bin)' s3.bin && cmp three.bin s3.bin"
check "a file written after it is not in it" bash -c "! nfs-cp '$(surl four.bin)' s4.bin 2>/dev/null"
check "a write into it is refused (read only)" bash -c "! nfs-cp one.bin '$(surl new.bin)' 2>err && grep -qi 'read-only\|ROFS' err"
check "an exported snapshot is not destroyed, saying why" bash -c '
	! "$0" snapshot destroy tank/home@later -d var/pool 2>err && grep -q "in use" err' "$SHALE_BIN"
check "the server stops again" stop
echo "tank/home 127.0.0.1(rw,insecure,no_root_squash)" >var/exports
check "the snapshot outlives the server; the destroyed one is gone" bash -c '
	"$0" snapshot list tank/home -d var/pool | grep -q "^tank/home@later " &&
	! "$0" snapshot list tank/home -d var/pool | grep -q "@served "' "$SHALE_BIN"
check "fs rollback refuses a missing snapshot and names a later one without -r" bash -c '
	"$0" snapshot create tank/home@latest -d var/pool >/dev/null &&
	! "$0" fs rollback tank/home@nosuch -d var/pool 2>/dev/null &&
	! "$0" fs rollback tank/home@later -d var/pool 2>err && grep -q "tank/home@latest\|home@latest" err' "$SHALE_BIN"
check "fs rollback -r: the file system is the snapshot again (its REFER), the later one gone" bash -c '
	"$0" fs rollback -r tank/home@later -d var/pool | grep -q "^rolled tank/home back to tank/home@later$" &&
	! "$0" snapshot list tank/home -d var/pool | grep -q "@latest " &&
	[ "$("$0" fs list tank -d var/pool | awk "\$1 == \"tank/home\" { print \$4 }")" = "$(field tank/home@later 3)" ]' "$SHALE_BIN"
check "served again: the files of the snapshot are there byte-exact, the later one is not" bash -c '
	start || exit 1
	nfs-cp "$(url one.bin)" b1.bin && cmp one.bin b1.bin && nfs-cp "$(url three.bin)" b3.bin && cmp three.bin b3.bin &&
	! nfs-cp "$(url four.bin)" b4.bin 2>/dev/null; rc=$?; kill "$pid"; wait "$pid"; exit $rc'
check "shale pool check is clean" bash -c '"$0" pool check tank -d var/pool | grep -q " 0 problems"' "$SHALE_BIN"
tap_finish snapshot
