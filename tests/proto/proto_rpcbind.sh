#!/bin/bash
# proto_rpcbind.sh: Shale with Debian's real rpcbind. In a private network namespace (so port 111
# is ours and nothing else is touched) and a private /run (rpcbind's lock file and local socket
# live there: an rpcbind the host runs would otherwise make ours refuse to start), start rpcbind, start `shale serve` with its portmapper
# enabled, and check with rpcinfo that NFS 100003 v3, MOUNT 100005 v3, NLM 100021 (v1, v4) and NSM
# 100024 v1 are registered for TCP
# and UDP at Shale's port and answer; mount and list through rpcbind with libnfs (no port
# given); then stop Shale and check that the registrations are gone. Prints TAP lines.
# Needs root (network and mount namespaces) and $SHALE_BIN.
set -u

if [ "${1:-}" != "--inside" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "not ok - proto_rpcbind needs root for its network namespace"
		exit 1
	fi
	exec unshare -n -m --propagation private "$0" --inside
fi

. "$(dirname "$0")/../lib/tap.sh"
root=$(mktemp -d /tmp/shale-rpcbind.XXXXXX)
cleanup() {
	[ -n "${shale_pid:-}" ] && kill -9 "$shale_pid" 2>/dev/null
	[ -n "${rpcbind_pid:-}" ] && kill "$rpcbind_pid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$root"
}
trap cleanup EXIT

for tool in rpcbind rpcinfo nfs-ls; do
	if ! command -v "$tool" >/dev/null; then
		echo "not ok - $tool is installed"
		exit 1
	fi
done

ip link set lo up
if ! mount -t tmpfs -o mode=0755 tmpfs /run; then
	echo "not ok - a private /run for rpcbind"
	exit 1
fi
rpcbind -f &
rpcbind_pid=$!
for _ in $(seq 100); do
	rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break
	sleep 0.05
done
check "rpcbind answers in the test's namespace" rpcinfo -p 127.0.0.1

mkdir -p "$root/export" "$root/state"
echo "registered through rpcbind" >"$root/export/file.txt"
echo "$root/export 127.0.0.1(rw,insecure,no_root_squash)" >"$root/exports"
"$SHALE_BIN" serve --exports "$root/exports" --state "$root/state" --port 0 \
	--ready-file "$root/ready" 2>"$root/server.log" &
shale_pid=$!
for _ in $(seq 200); do
	[ -f "$root/ready" ] && break
	sleep 0.05
done
port=$(sed -n 's/^port=//p' "$root/ready" 2>/dev/null)
mode=$(sed -n 's/^portmap=//p' "$root/ready" 2>/dev/null)
check "shale reports portmap=registered when rpcbind runs (got '$mode')" test "$mode" = registered

rpcinfo -p 127.0.0.1 >"$root/list" 2>&1
for entry in "100003 3 tcp" "100003 3 udp" "100005 3 tcp" "100005 3 udp" "100021 4 tcp" \
	"100021 4 udp" "100021 1 udp" "100024 1 udp" "100024 1 tcp"; do
	set -- $entry
	check "rpcbind lists program $1 version $2 $3 at port $port" \
		awk -v p="$1" -v v="$2" -v t="$3" -v port="$port" \
		'$1 == p && $2 == v && $3 == t && $4 == port { found = 1 } END { exit !found }' "$root/list"
done
check "rpcinfo reaches NFS v3 over TCP through rpcbind" rpcinfo -t 127.0.0.1 100003 3
check "rpcinfo reaches NFS v3 over UDP through rpcbind" rpcinfo -u 127.0.0.1 100003 3
check "rpcinfo reaches MOUNT v3 over TCP through rpcbind" rpcinfo -t 127.0.0.1 100005 3
check "rpcinfo reaches NLM v4 over UDP through rpcbind" rpcinfo -u 127.0.0.1 100021 4
check "rpcinfo reaches NSM v1 over TCP through rpcbind" rpcinfo -t 127.0.0.1 100024 1
check "libnfs mounts with no port given and lists the export" \
	sh -c "nfs-ls 'nfs://127.0.0.1$root/export' | grep -q file.txt"

kill -TERM "$shale_pid"
wait "$shale_pid"
status=$?
shale_pid=
check "shale exits cleanly on SIGTERM (status $status)" test "$status" -eq 0
rpcinfo -p 127.0.0.1 >"$root/list-after" 2>&1
check "registrations are removed on exit" \
	awk '$1 == 100003 || $1 == 100005 || $1 == 100021 || $1 == 100024 { left = 1 }
		END { exit left }' "$root/list-after"

tap_finish proto_rpcbind
