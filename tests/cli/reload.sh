#!/bin/bash
# reload.sh: `kill -HUP` of `shale serve` reloads its exports file while it serves (exportfs -r),
# used through libnfs's nfs-cp and nfs-ls: an export added is served at once (a host directory,
# then a pool's file system whose pool the reload imports, then one `shale fs create` made on the
# served pool); an export removed is no longer mounted while the others go on, also while a copy
# into one runs through several reloads; a malformed file
# changes nothing; the server stops cleanly and the pool checks clean; a damaged handle key stops
# the start, with the exports freed. Prints TAP lines. Needs
# $SHALE_BIN, nfs-cp and nfs-ls.
set -u
. "$(dirname "$0")/../lib/tap.sh"

root=$(mktemp -d /tmp/shale-reload.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	rm -rf "$root"
}
trap cleanup EXIT
cd "$root" || exit 1
mkdir -p var/pool var/state a b
line() { echo "$1 127.0.0.1(rw,insecure,no_root_squash)"; }
# Sends SIGHUP and waits for the server to log the reload's outcome (the nth since the start).
reloads=0
reload() {
	reloads=$((reloads + 1))
	kill -HUP "$pid" || return 1
	for _ in $(seq 200); do
		[ "$(grep -Ec 'reload: (serving|exports file|the exports stay)' serve.log)" -ge "$reloads" ] &&
			return 0
		sleep 0.05
	done
	return 1
}
nfs() { echo "nfs://127.0.0.1$1?nfsport=$port&mountport=$port&version=3"; }
ls_ok() { nfs-ls "$(nfs "$1")" >/dev/null 2>&1; }

line "$root/a" >var/exports
"$SHALE_BIN" serve --exports var/exports --state var/state --pool-dir var/pool --port 0 \
	--no-portmap --ready-file var/ready --log-level info >serve.log 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q '^port=' var/ready 2>/dev/null && break; sleep 0.05; done
port=$(sed -n 's/^port=//p' var/ready 2>/dev/null)
check "serve starts with one export" test -n "$port"
head -c 100000 /dev/urandom >data.bin
check "a file copied into it" nfs-cp data.bin "$(nfs "$root/a/one.bin")"
check "b is not exported yet" bash -c "! nfs-ls '$(nfs "$root/b")' >/dev/null 2>&1"

{ line "$root/a"; line "$root/b"; } >var/exports
reload
check "SIGHUP with b added: logged as 1 kept, 1 new, 0 gone" \
	grep -q "reload: serving 2 exports (1 kept, 1 new, 0 gone)" serve.log
check "b is served at once" nfs-cp data.bin "$(nfs "$root/b/two.bin")"
check "a still serves its file, byte-exact" \
	bash -c "rm -f got.bin; nfs-cp '$(nfs "$root/a/one.bin")' got.bin >/dev/null && cmp data.bin got.bin"

line "$root/b" >var/exports
reload
check "SIGHUP with a removed: a no longer mounts" bash -c "! nfs-ls '$(nfs "$root/a")' >/dev/null 2>&1"
check "b goes on" bash -c "nfs-ls '$(nfs "$root/b")' | grep -q two.bin"
head -c 40000000 /dev/urandom >big.bin
nfs-cp big.bin "$(nfs "$root/b/big.bin")" >cp.out 2>&1 &
cp_pid=$!
for i in 1 2 3 4 5 6; do
	if [ $((i % 2)) = 1 ]; then { line "$root/b"; line "$root/a"; } >var/exports; else line "$root/b" >var/exports; fi
	reload
done
wait "$cp_pid"
cp_rc=$?
check "six reloads while a 40 MB copy into b runs: the copy completes" test "$cp_rc" -eq 0
check "  byte-exact" bash -c "rm -f got.bin; nfs-cp '$(nfs "$root/b/big.bin")' got.bin >/dev/null && cmp big.bin got.bin"

echo "this is not an exports line" >var/exports
reload
check "a malformed exports file is refused, and says where" \
	grep -q "reload: exports file var/exports refused, the exports stay as they were: line 1" serve.log
check "  and b is still served" ls_ok "$root/b"

"$SHALE_BIN" pool create tank var/pool/tank0.img --size 128M >/dev/null 2>&1
"$SHALE_BIN" fs create tank/home -d var/pool >/dev/null 2>&1
{ line "$root/b"; line tank/home; } >var/exports
reload
check "SIGHUP with a pool's file system added: its pool is imported and it is served" \
	nfs-cp data.bin "$(nfs /tank/home/three.bin)"
check "fs create on the pool the server now holds" \
	bash -c '"$SHALE_BIN" fs create tank/new -d var/pool | grep -q "^created tank/new$"'
{ line "$root/b"; line tank/home; line tank/new; } >var/exports
reload
check "and, exported by a reload, it is served" nfs-cp data.bin "$(nfs /tank/new/four.bin)"
check "tank/home still serves its file, byte-exact" \
	bash -c "rm -f got.bin; nfs-cp '$(nfs /tank/home/three.bin)' got.bin >/dev/null && cmp data.bin got.bin"
{ line "$root/b"; line tank/new; } >var/exports
reload
check "tank/home taken out of the exports: once unused it is closed, and may be renamed" bash -c '
	for _ in $(seq 50); do "$SHALE_BIN" fs rename tank/home tank/old -d var/pool 2>/dev/null |
		grep -q "^renamed tank/home to tank/old$" && exit 0; sleep 0.1; done; exit 1'
kill "$pid"
wait "$pid"
rc=$?
pid=
check "SIGTERM stops it cleanly" test "$rc" -eq 0
check "the pool checks clean" bash -c '"$SHALE_BIN" pool check tank -d var/pool 2>&1 | grep -q "pool tank: 0 problems"'
check "every file is where it was written" bash -c "cmp data.bin a/one.bin && cmp data.bin b/two.bin"
mkdir -p bad
printf 'short' >bad/handle.key
line "$root/b" >bad/exports
check "with a damaged handle key the server refuses to start, says why, and leaks nothing" bash -c '
	o=$("$SHALE_BIN" serve --exports bad/exports --state bad --port 0 --no-portmap 2>&1) && exit 1
	grep -q "handle key in bad" <<<"$o" && ! grep -q "LeakSanitizer" <<<"$o" || { echo "$o"; exit 1; }'
tap_finish reload
