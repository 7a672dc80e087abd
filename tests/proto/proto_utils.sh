#!/bin/bash
# proto_utils.sh: libnfs's own command-line clients (nfs-ls, nfs-cp from libnfs-utils) against a
# private `shale serve`, as independent clients: copy a file in and out and compare, list the
# export. Prints TAP lines. Needs $SHALE_BIN.
set -u

. "$(dirname "$0")/../lib/tap.sh"
finish() {
	tap_finish proto_utils
	exit $?
}

if [ -z "${SHALE_BIN:-}" ] || [ ! -x "$SHALE_BIN" ]; then
	echo "not ok - SHALE_BIN is set to an executable"
	fail=1
	finish
fi
for tool in nfs-ls nfs-cp; do
	if ! command -v "$tool" >/dev/null; then
		echo "not ok - $tool is installed (Debian package libnfs-utils)"
		fail=$((fail + 1))
	fi
done
[ "$fail" -eq 0 ] || finish

root=$(mktemp -d /tmp/shale-test-XXXXXX)
chmod 755 "$root"
export_dir=$root/exp0
mkdir -m 0777 "$export_dir"
mkdir -m 0700 "$root/state"
echo "$export_dir *(rw,insecure,no_root_squash)" >"$root/exports"

"$SHALE_BIN" serve --exports "$root/exports" --state "$root/state" --listen 127.0.0.1 --port 0 \
	--no-portmap --ready-file "$root/ready" >"$root/server.log" 2>&1 &
server_pid=$!

cleanup() {
	if [ -n "${server_pid:-}" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -KILL "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
	fi
	case $root in /tmp/shale-test-*) rm -rf -- "$root" ;; esac
}
trap cleanup EXIT

# Wait for the ready file (written once the server listens), at most 20 s.
port=
for _ in $(seq 1 1000); do
	if [ -f "$root/ready" ]; then
		port=$(sed -n 's/^port=\([0-9][0-9]*\)$/\1/p' "$root/ready" | head -n 1)
		[ -n "$port" ] && break
	fi
	kill -0 "$server_pid" 2>/dev/null || break
	sleep 0.02
done
check "server starts and reports its port" test -n "$port"
if [ -z "$port" ]; then
	sed 's/^/#   server: /' "$root/server.log" | tail -n 30
	finish
fi

url() { echo "nfs://127.0.0.1$export_dir/$1?version=3&nfsport=$port&mountport=$port"; }
dir_url="nfs://127.0.0.1$export_dir?version=3&nfsport=$port&mountport=$port"

# A file of pseudo-random content larger than one 1 MiB transfer, so the copy takes several.
head -c 3000000 /dev/urandom >"$root/src.bin"
check "nfs-cp copies a local file in" timeout 60 nfs-cp "$root/src.bin" "$(url copied.bin)"
check "the copy on the server side is identical" cmp -s "$root/src.bin" "$export_dir/copied.bin"
check "nfs-cp copies it back out" timeout 60 nfs-cp "$(url copied.bin)" "$root/back.bin"
check "the file copied out is identical" cmp -s "$root/src.bin" "$root/back.bin"

# A file created on the host side is readable through the server.
printf 'made on the host\n' >"$export_dir/host.txt"
check "nfs-cp reads a host-created file" timeout 30 nfs-cp "$(url host.txt)" "$root/host.out"
check "its content matches" cmp -s "$export_dir/host.txt" "$root/host.out"

mkdir "$export_dir/subdir"
timeout 30 nfs-ls "$dir_url" >"$root/ls.out" 2>"$root/ls.err"
check "nfs-ls lists the export" test $? -eq 0
check "the listing names copied.bin" grep -q 'copied\.bin' "$root/ls.out"
check "the listing names host.txt" grep -q 'host\.txt' "$root/ls.out"
check "the listing names subdir" grep -q 'subdir' "$root/ls.out"
check "the listing shows copied.bin's size" grep -Eq '\b3000000\b.*copied\.bin' "$root/ls.out"
[ "$fail" -eq 0 ] || sed 's/^/#   ls: /' "$root/ls.out" "$root/ls.err"

kill -TERM "$server_pid"
stopped=no
for _ in $(seq 1 500); do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		stopped=yes
		break
	fi
	sleep 0.02
done
wait "$server_pid" 2>/dev/null
status=$?
check "server exits on SIGTERM" test "$stopped" = yes
check "server exit status is 0" test "$status" -eq 0
server_pid=
finish
