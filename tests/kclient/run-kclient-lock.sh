#!/bin/bash
# run-kclient-lock.sh: two Linux kernel NFS clients lock one file through Shale's lock manager.
#
# What it proves
#   Two qemu guests running Debian's kernel mount the same export without `nolock`; their fcntl
#   and flock locks go through each kernel's lockd to the server's NLM. guest_lock.c runs in each
#   (roles a and b, turns taken through files on the export): a lock held by one client is seen
#   and refused to the other (also past 2 GiB), shared locks coexist, a second process of one
#   client is refused its sibling's range, an unlock splits a range, a blocked F_SETLKW on one
#   client is woken by the other's unlock through the server's GRANTED callback, and flock is
#   exclusive across clients.
#   With --recover: the server is killed (kill -9) while guest a holds a lock and started again
#   (--grace 15); a, the client that held a lock, is notified (SM_NOTIFY, to its rpc.statd) and
#   its kernel reclaims the lock in the grace period, b's request waits out grace and is then refused (the
#   lock came back), and b's F_SETLKW is woken by a's unlock after the restart.
#   With --reset: guest a is reset (its qemu killed) while it holds a lock b waits for, and boots
#   again; its sm-notify tells the server (its NSM state directory lives on a second export, so it
#   outlives the machine), the server releases what a held, and b is granted.
#
# How it works
#   The script re-runs itself in a private network namespace with a bridge (10.77.0.1/24, the
#   server's address) and two tap devices on it, one per guest (10.77.0.2 and 10.77.0.3): qemu's
#   user network cannot carry the server's callbacks to a guest. Nothing leaves the namespace.
#   The server runs with its built-in portmapper on 10.77.0.1:111. Each guest's initramfs (the
#   kclient image, prepare.sh) also holds Debian's rpcbind and rpc.statd with the libraries they
#   load, which the kernel's lockd needs on the client side; guest-lock-init.sh starts them.
#
# Usage: run-kclient-lock.sh --shale PATH [--backend posix|pool] [--recover | --reset]
#        [--cache DIR] [--work DIR]
# Needs root; installs nfs-common (rpc.statd) and rpcbind from Debian when missing.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)

shale=${SHALE:-}
backend=posix
recover=0
reset=0
cache=${KCLIENT_CACHE:-$top/build-cache/kclient}
work=
guest_timeout=420
in_netns=0
owned_work=0
orig_args=("$@")
while [ $# -gt 0 ]; do
	case "$1" in
	--shale) shale=$2; shift 2 ;;
	--backend) backend=$2; shift 2 ;;
	--recover) recover=1; shift ;;
	--reset) reset=1; shift ;;
	--cache) cache=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--timeout) guest_timeout=$2; shift 2 ;;
	--in-netns) in_netns=1; shift ;;
	--owned-work) owned_work=1; shift ;;
	*) echo "run-kclient-lock: unknown argument $1" >&2; exit 2 ;;
	esac
done

fail_count=0
pass_count=0
ok() { echo "ok - $*"; pass_count=$((pass_count + 1)); }
notok() { echo "not ok - $*"; fail_count=$((fail_count + 1)); }
note() { echo "# $*"; }
bail() { notok "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || bail "the lock test needs root (network namespace, tap devices, qemu)"
[ -n "$shale" ] && [ -x "$shale" ] || bail "no shale binary: pass --shale PATH"
shale=$(cd "$(dirname "$shale")" && pwd)/$(basename "$shale")
case "$backend" in posix | pool) ;; *) bail "unknown --backend $backend" ;; esac
if [ -z "$work" ]; then
	work=$(mktemp -d /tmp/kclient-lock.XXXXXX)
	owned_work=1
else
	mkdir -p "$work"
	work=$(cd "$work" && pwd)
fi

# ---- image (in the host namespace: it may need the package mirror) ----------------------------
if [ "$in_netns" -eq 0 ]; then
	note "work directory $work"
	for p in nfs-common rpcbind; do
		dpkg -s "$p" >/dev/null 2>&1 && continue
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p" >"$work/apt-$p.log" 2>&1 ||
			bail "apt-get install $p failed (see $work/apt-$p.log)"
	done
	gcc -std=c17 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -static -o "$work/guest_lock" \
		"$here/guest_lock.c" >"$work/gcc.log" 2>&1 ||
		{ sed 's/^/# /' "$work/gcc.log"; bail "building guest_lock (gcc -static)"; }
	# The client side of locking, with every library it loads and the files it reads.
	extra="$work/extra"
	mkdir -p "$extra/etc" "$extra/sbin"
	for bin in /usr/sbin/rpcbind /usr/sbin/rpc.statd /usr/sbin/sm-notify; do
		cp "$bin" "$extra/sbin/"
		for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
			mkdir -p "$extra$(dirname "$lib")"
			cp -L "$lib" "$extra$lib"
		done
	done
	cp /etc/netconfig /etc/services /etc/protocols /etc/passwd /etc/group "$extra/etc/" ||
		bail "copying rpcbind's configuration files"
	KCLIENT_EXTRA_ROOT="$extra" "$here/prepare.sh" "$cache" "$work/image" \
		"$here/guest-lock-init.sh" "$work/guest_lock" >"$work/prepare.log" 2>&1 ||
		{ sed 's/^/# /' "$work/prepare.log"; bail "prepare.sh failed"; }
	note "guest image: $(cat "$cache/package")"
	extra_args=(--in-netns --work "$work")
	[ "$owned_work" -eq 1 ] && extra_args+=(--owned-work)
	exec unshare -n "$0" "${orig_args[@]}" "${extra_args[@]}"
fi

# ---- the namespace: a bridge for the server, a tap device for each guest ----------------------
server_addr=10.77.0.1
ip link set lo up &&
	ip link add br0 type bridge &&
	ip addr add "$server_addr/24" dev br0 &&
	ip link set br0 up &&
	ip tuntap add tap0 mode tap &&
	ip tuntap add tap1 mode tap &&
	ip link set tap0 master br0 && ip link set tap0 up &&
	ip link set tap1 master br0 && ip link set tap1 up ||
	bail "the bridge and tap devices of the test's network namespace"

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	if [ "$owned_work" -eq 1 ] && [ "$fail_count" -eq 0 ]; then
		rm -rf "$work"
	elif [ "$fail_count" -ne 0 ]; then
		echo "# logs kept in $work" >&2
	fi
}
trap cleanup EXIT

# ---- server -------------------------------------------------------------------------------------
exports_file="$work/exports"
if [ "$backend" = pool ]; then
	mkdir -p "$work/pool"
	"$shale" pool create tank "$work/pool/tank0.img" --size 256M >"$work/pool.log" 2>&1 &&
		"$shale" fs create tank/home -d "$work/pool" >>"$work/pool.log" 2>&1 ||
		{ sed 's/^/# /' "$work/pool.log"; bail "shale pool create / fs create"; }
	guest_export=/tank/home
	echo "tank/home 10.77.0.0/24(rw,no_root_squash,insecure)" >"$exports_file"
else
	mkdir -p "$work/export"
	chmod 0777 "$work/export"
	guest_export=$work/export
	echo "$work/export 10.77.0.0/24(rw,no_root_squash,insecure)" >"$exports_file"
fi
cstate_arg=
if [ "$reset" -eq 1 ]; then
	# each client's NSM state directory, on an export of its own, so that it outlives a reset
	mkdir -p "$work/cstate/a" "$work/cstate/b"
	echo "$work/cstate 10.77.0.0/24(rw,no_root_squash,insecure)" >>"$exports_file"
	cstate_arg=kccstate=$work/cstate
fi
serve_args=()
[ "$recover" -eq 1 ] && serve_args=(--grace 15)
start_server() { # the pid goes to $work/server.pid; 0 once it is ready
	local i pid
	rm -f "$work/ready"
	"$shale" serve --exports "$exports_file" --state "$work/state" --listen "$server_addr" \
		--pool-dir "$work/pool" --ready-file "$work/ready" --log-level info "${serve_args[@]}" \
		>>"$work/server.log" 2>&1 &
	pid=$!
	echo "$pid" >"$work/server.pid"
	for ((i = 0; i < 200; i++)); do
		[ -s "$work/ready" ] && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}
start_server ||
	{ tail -n 20 "$work/server.log" | sed 's/^/# server: /'; bail "shale serve started"; }
server_pid=$(cat "$work/server.pid")
pids+=("$server_pid")
ok "shale serve on $server_addr with NLM and NSM ($(grep -o 'portmap=[a-z]*' "$work/ready"))"

# ---- the guests ---------------------------------------------------------------------------------
boot() { # $1: role, $2: tap, $3: address, $4: mac, $5: console name (default the role)
	local name=${5:-$1}
	timeout --kill-after=10 "$guest_timeout" qemu-system-x86_64 -accel tcg -cpu max -m 512 -smp 1 \
		-nographic -no-reboot -pidfile "$work/qemu-$name.pid" \
		-netdev "tap,id=n0,ifname=$2,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=n0,mac=$4" \
		-kernel "$work/image/vmlinuz" -initrd "$work/image/initrd.img" \
		-append "console=ttyS0 quiet panic=-1 kcrole=$1 kcaddr=$3 kcserver=$server_addr kcexport=$guest_export $kcmode $cstate_arg" \
		</dev/null >"$work/console-$name.log" 2>"$work/qemu-$name.err"
}
kcmode=
[ "$recover" -eq 1 ] && kcmode=kcmode=recover
[ "$reset" -eq 1 ] && kcmode=kcmode=reset
# --reset: guest a says when to reset it (it holds its lock, b waits); its qemu is killed, as a
# power cut would, and it boots again (console a2).
reset_when_asked() { # $1: guest a's boot pid
	while kill -0 "$1" 2>/dev/null; do
		if [ -f "$work/console-a.log" ] &&
			tr -d '\r' <"$work/console-a.log" | grep -q '^# lock host reset'; then
			kill -9 "$(cat "$work/qemu-a.pid")"
			wait "$1" 2>/dev/null
			echo "# reset guest a (its qemu killed) while it holds its lock; booting it again"
			kcmode=kcmode=reboot
			boot a tap0 10.77.0.2 52:54:00:77:00:02 a2
			return
		fi
		sleep 0.1
	done
}
# --recover: guest a says when to kill the server (it holds its lock then); the server is killed
# and started again on the same state directory.
crash_when_asked() { # in this shell, so that the new server is its child; $1: guest a's pid
	local old
	while kill -0 "$1" 2>/dev/null; do
		if [ -f "$work/console-a.log" ] &&
			tr -d '\r' <"$work/console-a.log" | grep -q '^# lock host kill'; then
			old=$(cat "$work/server.pid")
			kill -9 "$old"
			echo "# killed the server (pid $old) while guest a holds its lock" >"$work/crash.log"
			start_server && echo "# restarted: pid $(cat "$work/server.pid")" >>"$work/crash.log"
			return
		fi
		sleep 0.1
	done
}
note "booting two guests (TCG), timeout ${guest_timeout}s"
start=$(date +%s)
boot a tap0 10.77.0.2 52:54:00:77:00:02 2>/dev/null & # (with --reset, bash would report its kill)
qa=$!
boot b tap1 10.77.0.3 52:54:00:77:00:03 &
qb=$!
pids+=("$qa" "$qb")
[ "$recover" -eq 1 ] && crash_when_asked "$qa"
if [ "$reset" -eq 1 ]; then
	reset_when_asked "$qa"
	rc_a=$?
else
	wait "$qa"
	rc_a=$?
fi
wait "$qb"
rc_b=$?
note "guests ran $(($(date +%s) - start))s (qemu exits $rc_a, $rc_b)"
roles=(a b)
[ "$reset" -eq 1 ] && roles=(a a2 b)
for role in "${roles[@]}"; do
	console="$work/console-$role.log"
	tr -d '\r' <"$console" | grep -E '^(ok|not ok) - ' | while IFS= read -r line; do
		echo "$line"
	done
	pass_count=$((pass_count + $(tr -d '\r' <"$console" | grep -c '^ok - ')))
	fail_count=$((fail_count + $(tr -d '\r' <"$console" | grep -c '^not ok - ')))
	if [ "$role" = a ] && [ "$reset" -eq 1 ]; then
		: # reset on purpose: it never completes
	elif tr -d '\r' <"$console" | grep -q '^# kclient: guest done'; then
		ok "guest $role ran to completion"
	else
		notok "guest $role ran to completion"
		tr -d '\r' <"$console" | tail -n 25 | sed "s/^/# console $role: /"
	fi
done

# ---- the server's side --------------------------------------------------------------------------
if [ "$recover" -eq 1 ]; then
	[ -f "$work/crash.log" ] && cat "$work/crash.log"
	server_pid=$(cat "$work/server.pid")
	pids+=("$server_pid")
	grep -q 'restarted' "$work/crash.log" 2>/dev/null && ok "the server was killed and started again" ||
		notok "the server was killed and started again"
	grep -q '1 client to notify' "$work/server.log" &&
		ok "after the restart it notified the client that held a lock" ||
		notok "after the restart it notified the client that held a lock"
fi
kill -0 "$server_pid" 2>/dev/null && ok "the server is alive after both guests" ||
	notok "the server is alive after both guests"
if [ -s "$work/state/nsm/state" ] && ls "$work/state/nsm/hosts" | grep -q .; then
	ok "the clients that locked are recorded for recovery ($(ls "$work/state/nsm/hosts" | wc -l) in nsm/hosts)"
else
	notok "the clients that locked are recorded for recovery"
fi
kill -TERM "$server_pid"
wait "$server_pid"
rc=$?
pids=()
[ "$rc" -eq 0 ] && ok "shale serve exits cleanly (status 0)" || notok "shale serve exits cleanly (status $rc)"
if [ "$fail_count" -ne 0 ]; then
	grep -iE 'lock manager|error|warn' "$work/server.log" | tail -n 15 | sed 's/^/# server: /'
fi
echo "1..$((pass_count + fail_count))"
echo "# kclient_lock: $pass_count passed, $fail_count failed"
[ "$fail_count" -eq 0 ]
