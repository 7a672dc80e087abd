#!/bin/bash
# posix_full.sh: the posix back end on a full file system, as an administrator meets it. A 4 MiB
# tmpfs (in a private mount namespace) is exported through libnfs's nfs-cp: a file larger than it
# fails partway and the server goes on serving; a file removed on the host gives its space back
# once the server's cached fds for it are idle (posix_fdcache.c, rule 7), and writes work again,
# byte-exact. Prints TAP lines. Needs root (a mount namespace), $SHALE_BIN, nfs-cp and nfs-ls.
set -u

if [ "${1:-}" != "--inside" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "not ok - posix_full needs root for its mount namespace"
		exit 1
	fi
	exec unshare -m --propagation private "$0" --inside
fi

. "$(dirname "$0")/../lib/tap.sh"
root=$(mktemp -d /tmp/shale-full.XXXXXX)
chmod 755 "$root"
cleanup() {
	[ -n "${pid:-}" ] && kill -9 "$pid" 2>/dev/null
	wait 2>/dev/null
	umount "$root/exp" 2>/dev/null
	rm -rf "$root"
}
trap cleanup EXIT

avail_kib() { df --output=avail -k "$root/exp" | tail -n 1 | tr -d ' '; }

mkdir -m 0777 "$root/exp"
mkdir -m 0700 "$root/state"
check "a 4 MiB tmpfs to export" mount -t tmpfs -o size=4m,mode=0777 tmpfs "$root/exp"
echo "$root/exp *(rw,insecure,no_root_squash)" >"$root/exports"
"$SHALE_BIN" serve --exports "$root/exports" --state "$root/state" --listen 127.0.0.1 --port 0 \
	--no-portmap --ready-file "$root/ready" >"$root/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
	grep -q '^port=' "$root/ready" 2>/dev/null && break
	sleep 0.1
done
port=$(sed -n 's/^port=//p' "$root/ready" 2>/dev/null)
check "shale serve starts on it" test -n "$port"
query="?version=3&nfsport=$port&mountport=$port"
url() { echo "nfs://127.0.0.1$root/exp/$1$query"; }

head -c 1000000 /dev/urandom >"$root/small.bin"
head -c 8000000 /dev/urandom >"$root/big.bin"
check "a 1 MB file is written" nfs-cp "$root/small.bin" "$(url small.bin)"
check "an 8 MB file does not fit: the copy fails" \
	bash -c '! nfs-cp "$1" "$2"' _ "$root/big.bin" "$(url big.bin)"
check "the file system is full" test "$(avail_kib)" -lt 64
check "the server still runs and lists the export" \
	bash -c 'kill -0 "$1" && nfs-ls "$2" | grep -q small.bin' _ "$pid" "nfs://127.0.0.1$root/exp$query"
check "the 1 MB file reads back byte-exact" \
	bash -c 'nfs-cp "$1" "$2" >/dev/null && cmp "$3" "$2"' _ "$(url small.bin)" "$root/back1.bin" \
	"$root/small.bin"
rm -f "$root/exp/big.bin"
# The server's fds of big.bin keep its blocks until they have been idle for about 5 seconds.
for _ in $(seq 1 150); do
	[ "$(avail_kib)" -gt 2000 ] && break
	sleep 0.1
done
check "the space of the file removed on the host comes back (the server closed its idle fds)" \
	test "$(avail_kib)" -gt 2000
check "a 1 MB file is written again" nfs-cp "$root/small.bin" "$(url again.bin)"
check "and reads back byte-exact" \
	bash -c 'nfs-cp "$1" "$2" >/dev/null && cmp "$3" "$2"' _ "$(url again.bin)" "$root/back2.bin" \
	"$root/small.bin"
kill "$pid"
wait "$pid"
stopped=$?
pid=
check "the server stops cleanly on SIGTERM" test "$stopped" -eq 0
tap_finish posix_full
