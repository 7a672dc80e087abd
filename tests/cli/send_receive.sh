#!/bin/bash
# send_receive.sh: `shale send` and `shale receive` as an administrator replicates with them.
#
# Two pools, src and dst, on files. Served by one server (src/home exported, dst held through
# dst/keep): files copied into src/home with nfs-cp (libnfs), snapshot s1, `shale send` of it
# through the server into `shale receive dst/copy` through the server; dst/copy exported by a
# reload and every file read back through NFS, byte-exact; then a second snapshot with two new
# files (nfs-cp only creates; the unit test covers overwrites, removes and renames), sent incrementally (-i @s1) and read back the same way, and its
# .zfs/snapshot/s1 still the first state; the same stream again refused; the server stopped, an
# offline full send and receive into dst/copy2; a stream cut short or damaged refused with
# nothing left behind; an incremental stream into a file system changed since its base refused,
# then taken with -F; send -c of compressible data (a quarter of the plain stream), received
# through the server and read back through NFS, and offline the same stream; both pools
# checked clean. Needs $SHALE_BIN, nfs-cp and nfs-ls.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../lib/tap.sh"
. "$here/../lib/serve.sh"

root=$(mktemp -d /tmp/shale-send.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$root"
}
trap cleanup EXIT
cd "$root" || exit 1
S() { "$SHALE_BIN" "$@" -d var/pool; }
stop() { kill "$pid" && wait "$pid"; pid=; }
url() { echo "nfs://127.0.0.1/$1$url_q"; }
export -f S

mkdir -p var/pool var/state
"$SHALE_BIN" pool create src var/pool/src0.img --size 256M >/dev/null
"$SHALE_BIN" pool create dst var/pool/dst0.img --size 256M >/dev/null
S fs create src/home >/dev/null
S fs create dst/keep >/dev/null
head -c 3000000 /dev/urandom >one.bin
head -c 700000 /dev/urandom >two.bin
head -c 5000 /dev/urandom >three.bin
head -c 2000000 /dev/urandom >four.bin

printf '%s\n' "src/home 127.0.0.1(rw,insecure,no_root_squash)" \
	"dst/keep 127.0.0.1(rw,insecure,no_root_squash)" >var/exports
check "serve starts with src/home and dst/keep exported" start
check "nfs-cp writes three files into src/home" bash -c "nfs-cp one.bin '$(url src/home/one.bin)' &&
	nfs-cp two.bin '$(url src/home/two.bin)' && nfs-cp three.bin '$(url src/home/three.bin)'"
check "snapshot src/home@s1 on the served pool" bash -c 'S snapshot create src/home@s1 >/dev/null'
check "shale send of a served pool's snapshot writes a stream" bash -c '
	S send src/home@s1 >full.stream && [ "$(stat -c %s full.stream)" -gt 3700000 ]'
check "send refuses a missing snapshot" bash -c '
	! S send src/home@nope >x.stream 2>err && grep -q "no such snapshot" err'
check "shale receive into a served pool makes dst/copy" bash -c '
	S receive dst/copy <full.stream | grep -q "^received dst/copy$" &&
	S snapshot list dst | grep -q "^dst/copy@s1 "'
check "the same stream again is refused (dst/copy exists)" bash -c '
	! S receive dst/copy <full.stream 2>err && grep -q "exists" err'
printf '%s\n' "dst/copy 127.0.0.1(rw,insecure,no_root_squash)" >>var/exports
kill -HUP "$pid"
sleep 1
check "its files read back through NFS, byte-exact" bash -c "
	nfs-cp '$(url dst/copy/one.bin)' b1 && cmp one.bin b1 && nfs-cp '$(url dst/copy/two.bin)' b2 &&
	cmp two.bin b2 && nfs-cp '$(url dst/copy/three.bin)' b3 && cmp three.bin b3"
check "an exported target is not received into" bash -c '
	S snapshot create src/home@s1b >/dev/null && S send src/home@s1b -i @s1 >busy.stream &&
	! S receive dst/copy <busy.stream 2>err && grep -q "in use" err &&
	S snapshot destroy src/home@s1b >/dev/null'
# dst/copy out of the exports again
printf '%s\n' "src/home 127.0.0.1(rw,insecure,no_root_squash)" \
	"dst/keep 127.0.0.1(rw,insecure,no_root_squash)" >var/exports
kill -HUP "$pid"
sleep 1
check "two new files in src/home, then src/home@s2" bash -c "
	nfs-cp four.bin '$(url src/home/four.bin)' && nfs-cp three.bin '$(url src/home/five.bin)' &&
	S snapshot create src/home@s2 >/dev/null"
check "an incremental stream (-i @s1) is smaller than the full one" bash -c '
	S send src/home@s2 -i @s1 >inc.stream &&
	[ "$(stat -c %s inc.stream)" -lt "$(stat -c %s full.stream)" ]'
check "shale receive of the incremental stream into dst/copy" bash -c '
	S receive dst/copy <inc.stream | grep -q "^received dst/copy$"'
printf '%s\n' "dst/copy 127.0.0.1(rw,insecure,no_root_squash)" >>var/exports
kill -HUP "$pid"
sleep 1
check "dst/copy holds s2: the new files and the old ones, through NFS" bash -c "
	nfs-cp '$(url dst/copy/four.bin)' c4 && cmp four.bin c4 &&
	nfs-cp '$(url dst/copy/five.bin)' c5 && cmp three.bin c5 &&
	nfs-cp '$(url dst/copy/two.bin)' c2 && cmp two.bin c2 &&
	nfs-cp '$(url dst/copy/one.bin)' c1 && cmp one.bin c1"
check "and its .zfs/snapshot/s1 is still the first state" bash -c "
	nfs-cp '$(url dst/copy/.zfs/snapshot/s1/one.bin)' d1 && cmp one.bin d1 &&
	! nfs-cp '$(url dst/copy/.zfs/snapshot/s1/four.bin)' d4 2>/dev/null"
yes "shale send -c sends compressed blocks as they are stored" | head -c 3000000 >text.bin
check "send -c of a served pool: compressed blocks as stored, a stream a quarter the size" bash -c "
	nfs-cp text.bin '$(url src/home/text.bin)' && S snapshot create src/home@t >/dev/null &&
	S send src/home@t -i @s2 >t.stream && S send -c src/home@t -i @s2 >tc.stream &&
	[ \$(stat -c %s tc.stream) -lt \$((\$(stat -c %s t.stream) / 4)) ]"
check "a full send -c received through the server, its files byte-exact through NFS" bash -c '
	S send -c src/home@t >tcfull.stream && S receive dst/tcopy <tcfull.stream >/dev/null &&
	echo "dst/tcopy 127.0.0.1(rw,insecure,no_root_squash)" >>var/exports &&
	kill -HUP "$0" && sleep 1 &&
	nfs-cp "$1/text.bin$2" t1 && cmp text.bin t1 && nfs-cp "$1/one.bin$2" t2 && cmp one.bin t2
' "$pid" "nfs://127.0.0.1/dst/tcopy" "$url_q"
check "the server stops" stop

# ---- offline ----
check "offline: a full send and receive into dst/copy2" bash -c '
	S send src/home@s2 >full2.stream && S receive dst/copy2 <full2.stream >/dev/null &&
	S snapshot list dst | grep -q "^dst/copy2@s2 "'
check "a stream cut short is refused and nothing is left" bash -c '
	head -c 2000000 full.stream >cut.stream &&
	! S receive dst/copy3 <cut.stream 2>err && grep -q "ends" err &&
	! S fs list dst | grep -q "^dst/copy3 "'
check "a damaged stream is refused and nothing is left" bash -c '
	cp full.stream bad.stream &&
	printf "\xff" | dd of=bad.stream bs=1 seek=1500000 conv=notrunc 2>/dev/null &&
	! S receive dst/copy3 <bad.stream 2>err && grep -q "damaged" err &&
	! S fs list dst | grep -q "^dst/copy3 "'
check "an empty input is refused" bash -c '! S receive dst/copy3 </dev/null 2>err && grep -q "empty" err'
check "a target changed since its base is refused, then taken with -F" bash -c '
	S snapshot create dst/copy2@mine >/dev/null &&
	S snapshot create src/home@s3 >/dev/null && S send src/home@s3 -i @s2 >inc3.stream &&
	! S receive dst/copy2 <inc3.stream 2>err && grep -q "after the stream" err &&
	S receive -F dst/copy2 <inc3.stream >/dev/null &&
	S snapshot list dst | grep -q "^dst/copy2@s3 " && ! S snapshot list dst | grep -q "@mine "'
check "offline: send -c and receive, the same stream as the server sent" bash -c '
	S send -c src/home@t >tcoff.stream && cmp tcfull.stream tcoff.stream &&
	S receive dst/tcopy2 <tcoff.stream >/dev/null && S snapshot list dst | grep -q "^dst/tcopy2@t "'
check "both pools check clean" bash -c '
	S pool check src | grep -q " 0 problems" && S pool check dst | grep -q " 0 problems"'
tap_finish send_receive
