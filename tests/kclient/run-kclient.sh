#!/bin/bash
# run-kclient.sh: mounts a Shale export with the real Linux NFS client and checks what it sees.
#
# What it proves
#   Debian's own kernel, booted in qemu, mounts the server with `mount -t nfs -o vers=3,nolock`
#   and no port options: the kernel asks the portmapper on port 111 (Shale's built-in one) for
#   the MOUNT and NFS ports, gets a root handle through MOUNT v3 and then drives NFSv3 for a
#   battery of file operations (tests/kclient/guest_fsops.c): create, write, read, append,
#   truncate, renames, hard and symbolic links, mkdir/rmdir, a 2,000-entry readdir, chmod,
#   chown, utimes, statfs, a 64 MiB file with a hash compare after dropping caches, four
#   concurrent writers, and, after an unmount and a fresh mount, that everything is still
#   there. Every packet on the host loopback is captured and decoded by tshark: NFS, MOUNT and
#   portmap traffic must be present and not one packet may be malformed. Finally the host
#   reads the exported directory directly and compares the 64 MiB file's hash with the
#   guest's.
#
# How it works
#   1. prepare.sh builds (and caches under build-cache/kclient) the kernel and initramfs;
#      guest_fsops.c and guest_stress.c (the restart and fault workloads) are compiled
#      statically and added with guest-init.sh as /init.
#   2. Unless --no-netns, the script then re-runs itself in a private network namespace
#      (unshare -n): the server, the capture and qemu share a loopback of their own, so the fixed
#      ports 2049 and 111 cannot clash with anything else on the machine and nothing listens
#      beyond loopback.
#   3. The server starts on a fresh export directory (`DIR 127.0.0.1(rw,insecure,
#      no_root_squash)`: qemu's user network makes the guest's connections come from the host's
#      127.0.0.1 and from unprivileged ports) and the script waits for its --ready-file.
#   4. tshark captures `tcp port 2049 or udp port 2049 or port 111` on lo.
#   5. qemu (TCG; KVM does not work on this host) boots the guest; the guest's `ok -`/`not ok -`
#      lines are relayed to stdout as they arrive. The guest powers itself off; a timeout turns a
#      hang into a failure with the console's last lines shown.
#   6. Capture and host-side checks, each one more TAP line.
#
# Running it alone
#   tests/kclient/run-kclient.sh --shale BUILD/tools/shale         (or SHALE=... in the env)
#   meson test -C BUILD --suite kclient                             (what the build registers)
#   tests/kclient/run-kclient.sh --server ganesha                   (same checks against
#                                                                    NFS-Ganesha + rpcbind)
#   tests/kclient/run-kclient.sh --backend pool                    (Shale serving a file system
#                                                                    of its own pool, tank/home)
#   tests/kclient/run-kclient.sh --backend pool --crash            (the crash run: the guest runs
#                                                                    a workload of fsync'd creates,
#                                                                    renames and removes; the host
#                                                                    kills the server with kill -9
#                                                                    after 40 acknowledged ones and
#                                                                    restarts it; a fresh mount then
#                                                                    checks every acknowledged one)
#   tests/kclient/run-kclient.sh --restart                         (restart under load, on the pool:
#                                                                    the guest, mounted hard, runs
#                                                                    guest_stress restartload: an
#                                                                    fsx-style checker (random
#                                                                    writes, reads, truncates, mapped
#                                                                    reads, fsyncs on one file, each
#                                                                    read checked against a model), an
#                                                                    O_SYNC writer (FILE_SYNC) and a
#                                                                    buffered writer (UNSTABLE +
#                                                                    COMMIT, on a second mount with
#                                                                    write=eager); when the latter's
#                                                                    WRITEs are answered and their
#                                                                    COMMIT not yet sent, the host
#                                                                    kills the server with kill -9 and
#                                                                    starts it as `make run` does.
#                                                                    Asserts: no call in the guest
#                                                                    fails; every worker makes
#                                                                    progress after the restart; every
#                                                                    byte of the three files after a
#                                                                    fresh mount; the capture shows
#                                                                    the write verifier change once and
#                                                                    the uncommitted WRITEs sent again)
#   tests/kclient/run-kclient.sh --full                            (a 128 MiB pool with tank/home and
#                                                                    tank/quota, quota=24M: the guest
#                                                                    writes 4 MiB files until a write
#                                                                    fails, which must be EDQUOT in the
#                                                                    quota's and ENOSPC in the pool's;
#                                                                    listing, statfs and every file
#                                                                    written whole still work; removes
#                                                                    work and their space is reported
#                                                                    back; new writes then succeed and
#                                                                    read back; `shale pool check`
#                                                                    after the server stops: clean)
#   tests/kclient/run-kclient.sh --eio                             (leaves that fail reads: tank is a
#                                                                    mirror of a file and a faultfs
#                                                                    leaf (faultfs.c: FUSE, fails the
#                                                                    reads of byte ranges it is given),
#                                                                    solo one faultfs leaf. The guest
#                                                                    writes an 8 MiB victim file into
#                                                                    each; the host stops the server,
#                                                                    finds the victim's blocks in the
#                                                                    leaves by their pattern, makes
#                                                                    their reads fail with EIO and
#                                                                    restarts it. Asserts: the mirror
#                                                                    reads the victim whole; on solo
#                                                                    its reads fail with EIO
#                                                                    (NFS3ERR_IO) while attributes,
#                                                                    listing, other files, a new
#                                                                    file, rename and remove work;
#                                                                    the leaves did fail reads; the
#                                                                    server stops cleanly; both pools
#                                                                    check clean once the faults are
#                                                                    lifted)
#   tests/kclient/run-kclient.sh --backend pool --idle-conns 5000  (a hostile neighbour: 5,000 idle
#                                                                    connections held from 127.0.0.2
#                                                                    (tests/kclient/idle-conns.py)
#                                                                    before the guest mounts and while
#                                                                    it runs its whole battery; the
#                                                                    server keeps at most its
#                                                                    per-address cap of them)
#   Options: --server shale|ganesha|cmd, --backend posix|pool (shale only), --crash (shale only),
#   --restart, --full, --eio (shale, pool), --idle-conns N, --server-cmd 'CMD' (run with sh -c; it gets
#   KC_EXPORTS_FILE, KC_EXPORT_DIR, KC_STATE_DIR, KC_READY_FILE in its environment and must
#   serve NFSv3, MOUNT v3 and portmap on 2049/111), --cache DIR, --work DIR (kept afterwards),
#   --timeout SECONDS (guest run, default 480), --mount-opts OPTS, --no-netns.
#   Needs root (network namespace, packet capture); installs qemu-system-x86, busybox-static
#   and tshark from Debian when missing, and for --eio fuse3 and libfuse3-dev (this host's
#   kernel has no device-mapper, whose error target would otherwise be the leaf that fails).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)

server=shale
backend=posix
crash=0
mode=      # restart, full or eio: one of the fault runs (each on the pool)
crash_after=40 # acknowledged guest operations before the kill
idle_conns=0   # --idle-conns N: connections held idle from 127.0.0.2 while the guest runs
server_cmd=
shale=${SHALE:-}
cache=${KCLIENT_CACHE:-$top/build-cache/kclient}
work=
guest_timeout=480
mount_opts=vers=3,nolock
use_netns=1
in_netns=0
owned_work=0 # 1: the work directory is this run's own, removed after a clean pass
orig_args=("$@")
while [ $# -gt 0 ]; do
	case "$1" in
	--shale) shale=$2; shift 2 ;;
	--server) server=$2; shift 2 ;;
	--backend) backend=$2; shift 2 ;;
	--crash) crash=1; shift ;;
	--restart | --full | --eio) mode=${1#--}; backend=pool; shift ;;
	--server-cmd) server=cmd; server_cmd=$2; shift 2 ;;
	--cache) cache=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--timeout) guest_timeout=$2; shift 2 ;;
	--mount-opts) mount_opts=$2; shift 2 ;;
	--idle-conns) idle_conns=$2; shift 2 ;;
	--no-netns) use_netns=0; shift ;;
	--in-netns) in_netns=1; shift ;;
	--owned-work) owned_work=1; shift ;;
	*) echo "run-kclient: unknown argument $1" >&2; exit 2 ;;
	esac
done

fail_count=0
pass_count=0
ok() { echo "ok - $*"; pass_count=$((pass_count + 1)); }
notok() { echo "not ok - $*"; fail_count=$((fail_count + 1)); }
note() { echo "# $*"; }
bail() { # a setup step failed: one failing TAP line, then stop
	notok "$*"
	exit 1
}

if [ "$(id -u)" -ne 0 ]; then
	bail "kclient harness needs root (network namespace, packet capture, qemu)"
fi

case "$server" in
shale)
	[ -n "$shale" ] || bail "no shale binary: pass --shale PATH or set SHALE"
	[ -x "$shale" ] || bail "shale binary $shale is not executable"
	shale=$(cd "$(dirname "$shale")" && pwd)/$(basename "$shale")
	;;
ganesha | cmd) ;;
*) bail "unknown --server $server" ;;
esac
case "$backend" in
posix | pool) ;;
*) bail "unknown --backend $backend" ;;
esac
[ "$backend" = posix ] || [ "$server" = shale ] || bail "--backend pool needs --server shale"
[ "$crash" -eq 0 ] || [ "$server" = shale ] || bail "--crash needs --server shale"
[ -z "$mode" ] || [ "$server" = shale ] || bail "--$mode needs --server shale"
[ -z "$mode" ] || [ "$crash" -eq 0 ] || bail "--crash and --$mode are separate runs"

if [ -z "$work" ]; then
	work=$(mktemp -d /tmp/kclient.XXXXXX)
	owned_work=1
else
	mkdir -p "$work"
	work=$(cd "$work" && pwd)
fi

# ---- image (in the host namespace: it may need the package mirror) ----------------------------
if [ "$in_netns" -eq 0 ]; then
	note "work directory $work"
	need_pkgs=(tshark)
	[ "$mode" = eio ] && need_pkgs+=(fuse3 libfuse3-dev pkg-config)
	for p in "${need_pkgs[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 && continue
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p" >"$work/apt-$p.log" 2>&1 ||
			bail "apt-get install $p failed (see $work/apt-$p.log)"
	done
	cflags=(-std=c17 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
		-Wmissing-prototypes -Wformat=2 -Wvla -Wimplicit-fallthrough -Wno-missing-field-initializers)
	for prog in guest_fsops guest_stress; do
		gcc "${cflags[@]}" -I"$top/tests/lib" -static -o "$work/$prog" "$here/$prog.c" \
			>"$work/gcc.log" 2>&1 || { sed 's/^/# /' "$work/gcc.log"; bail "building $prog (gcc -static)"; }
	done
	if [ "$mode" = eio ]; then
		# shellcheck disable=SC2046 # pkg-config's words are separate options
		gcc "${cflags[@]}" $(pkg-config --cflags fuse3) -o "$work/faultfs" "$here/faultfs.c" \
			$(pkg-config --libs fuse3) >"$work/gcc.log" 2>&1 ||
			{ sed 's/^/# /' "$work/gcc.log"; bail "building faultfs (libfuse3)"; }
	fi
	"$here/prepare.sh" "$cache" "$work/image" "$here/guest-init.sh" "$work/guest_fsops" \
		"$work/guest_stress" >"$work/prepare.log" 2>&1 ||
		{ sed 's/^/# /' "$work/prepare.log"; bail "prepare.sh failed"; }
	note "guest image: $(cat "$cache/package")"

	if [ "$use_netns" -eq 1 ]; then
		if unshare -n true 2>/dev/null; then
			extra=(--in-netns --work "$work")
			[ "$owned_work" -eq 1 ] && extra+=(--owned-work)
			exec unshare -n "$0" "${orig_args[@]}" "${extra[@]}"
		fi
		note "unshare -n is not available: running in the host network namespace"
	fi
else
	ip link set lo up || bail "cannot bring up lo in the private network namespace"
fi

pids=()
fuse_mounts=() # faultfs mount points: unmounted (which ends each faultfs) before anything is removed
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
	for m in "${fuse_mounts[@]}"; do
		umount "$m" 2>/dev/null
	done
	if [ "$owned_work" -eq 1 ] && [ "$fail_count" -eq 0 ]; then
		rm -rf "$work"
	elif [ "$fail_count" -ne 0 ]; then
		echo "# logs kept in $work" >&2
	fi
}
trap cleanup EXIT

# Ports the server must own in this namespace.
port_busy() { ss -Hltn "sport = :$1" | grep -q . || ss -Hlun "sport = :$1" | grep -q .; }
for p in 2049 111; do
	port_busy "$p" && bail "port $p is already in use (run without --no-netns, or stop that server)"
done

# ---- server ---------------------------------------------------------------------------------
export_dir="$work/export"
state_dir="$work/state"
pool_dir="$work/pool"
mkdir -p "$export_dir" "$state_dir"
exports_file="$work/exports"
guest_export2= # a second export, mounted by the guest at /mnt2 (--full, --eio)
pools=(tank)    # the pools `shale pool check` must find clean after the run
# --eio: a leaf served by faultfs from $work/fault/NAME.img: $pool_dir/NAME.img is a symbolic link
# to $work/fault/NAME/NAME.img, its FUSE mount, and $work/fault/NAME.rules names the ranges whose
# reads fail. Sets fault_pid_NAME.
start_faultfs() { # $1: NAME (tank1, solo0)
	local n=$1 i
	mkdir -p "$work/fault/$n"
	truncate -s 128M "$work/fault/$n.img"
	"$work/faultfs" "$work/fault/$n.img" "$work/fault/$n.rules" "$work/fault/$n" \
		>"$work/faultfs.$n.log" 2>&1 &
	pids+=($!)
	eval "fault_pid_$n=$!"
	for ((i = 0; i < 100; i++)); do
		[ -f "$work/fault/$n/$n.img" ] && break
		sleep 0.05
	done
	[ -f "$work/fault/$n/$n.img" ] || return 1
	fuse_mounts+=("$work/fault/$n")
	ln -s "$work/fault/$n/$n.img" "$pool_dir/$n.img"
}
if [ "$backend" = pool ]; then
	mkdir -p "$pool_dir"
	case "$mode" in
	full)
		# A small pool the guest fills, and a second file system with a quota.
		"$shale" pool create tank "$pool_dir/tank0.img" --size 128M >"$work/pool.log" 2>&1 &&
			"$shale" fs create tank/home -d "$pool_dir" >>"$work/pool.log" 2>&1 &&
			"$shale" fs create tank/quota -d "$pool_dir" >>"$work/pool.log" 2>&1 &&
			"$shale" fs set quota=24M tank/quota -d "$pool_dir" >>"$work/pool.log" 2>&1 ||
			{ sed 's/^/# /' "$work/pool.log"; bail "shale pool create / fs create / fs set quota"; }
		guest_export2=/tank/quota
		;;
	eio)
		# tank: a mirror of a plain file and a faultfs leaf; solo: one faultfs leaf.
		start_faultfs tank1 && start_faultfs solo0 || bail "faultfs mounted its leaves"
		"$shale" pool create tank mirror "$pool_dir/tank0.img" "$pool_dir/tank1.img" --size 128M \
			>"$work/pool.log" 2>&1 &&
			"$shale" pool create solo "$pool_dir/solo0.img" >>"$work/pool.log" 2>&1 &&
			"$shale" fs create tank/home -d "$pool_dir" >>"$work/pool.log" 2>&1 &&
			"$shale" fs create solo/home -d "$pool_dir" >>"$work/pool.log" 2>&1 ||
			{ sed 's/^/# /' "$work/pool.log"; bail "shale pool create (mirror, single) / fs create"; }
		guest_export2=/solo/home
		pools+=(solo)
		;;
	*)
		# A pool on a file with one file system; the guest mounts /tank/home.
		"$shale" pool create tank "$pool_dir/tank0.img" --size 512M >"$work/pool.log" 2>&1 &&
			"$shale" fs create tank/home -d "$pool_dir" >>"$work/pool.log" 2>&1 ||
			{ sed 's/^/# /' "$work/pool.log"; bail "shale pool create / fs create"; }
		;;
	esac
	guest_export=/tank/home
	echo "tank/home 127.0.0.1(rw,insecure,no_root_squash)" >"$exports_file"
	[ -z "$guest_export2" ] ||
		echo "${guest_export2#/} 127.0.0.1(rw,insecure,no_root_squash)" >>"$exports_file"
else
	guest_export=$export_dir
	echo "$export_dir 127.0.0.1(rw,insecure,no_root_squash)" >"$exports_file"
fi
ready_file="$work/ready"
rm -f "$ready_file"

wait_listening() { # $1: port, $2: seconds, $3: pid that must stay alive
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# Starts `shale serve` in the background under a small watcher that records its exit status in
# $work/server.rc.PID (the crash run restarts the server from inside the console loop, a subshell
# that cannot wait for it); the server's pid goes to $work/server.pid.
start_shale() {
	rm -f "$work/server.pid"
	(
		"$shale" serve --exports "$exports_file" --state "$state_dir" --ready-file "$ready_file" \
			--pool-dir "$pool_dir" >>"$work/server.log" 2>&1 &
		p=$!
		echo "$p" >"$work/server.pid.tmp" && mv "$work/server.pid.tmp" "$work/server.pid"
		wait "$p"
		echo $? >"$work/server.rc.$p"
	) </dev/null >>"$work/server.log" 2>&1 & # not the caller's stdout: a pipe it holds would never close
	local i
	for ((i = 0; i < 100; i++)); do
		[ -s "$work/server.pid" ] && return 0
		sleep 0.05
	done
	return 1
}
# Stops the server with SIGTERM and returns its exit status (124 when it did not stop in 60 s).
stop_shale() {
	local p=$1 i
	kill "$p" 2>/dev/null
	for ((i = 0; i < 1200; i++)); do
		[ -s "$work/server.rc.$p" ] && return "$(cat "$work/server.rc.$p")"
		sleep 0.05
	done
	return 124
}

case "$server" in
shale)
	start_shale
	server_pid=$(cat "$work/server.pid")
	pids+=("$server_pid")
	for ((i = 0; i < 300; i++)); do
		[ -s "$ready_file" ] && grep -q '^port=' "$ready_file" && break
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	if ! [ -s "$ready_file" ]; then
		sed 's/^/# server: /' "$work/server.log" | tail -n 20
		bail "shale serve wrote its ready file"
	fi
	note "ready file: $(tr '\n' ' ' <"$ready_file")"
	grep -q '^port=2049$' "$ready_file" || bail "shale serve listens on 2049 ($(cat "$ready_file"))"
	# In the private namespace no rpcbind can run, so the server must answer port 111 itself.
	if [ "$in_netns" -eq 1 ]; then
		if grep -q '^portmap=builtin$' "$ready_file" && wait_listening 111 5 "$server_pid"; then
			ok "shale serve answers the portmapper on 111 itself (portmap=builtin)"
		else
			notok "shale serve answers the portmapper on 111 itself ($(grep portmap "$ready_file"))"
		fi
	fi
	;;
ganesha)
	# Development comparison only: NFS-Ganesha registers with rpcbind, so rpcbind runs too. Both
	# listen on the wildcard address, which in the private namespace is only its loopback
	# (Ganesha cannot resolve Bind_addr there: with no configured non-loopback address,
	# getaddrinfo's AI_ADDRCONFIG finds no IPv4 at all).
	for p in nfs-ganesha nfs-ganesha-vfs rpcbind; do
		dpkg -s "$p" >/dev/null 2>&1 || bail "$p is not installed"
	done
	[ "$in_netns" -eq 1 ] || bail "--server ganesha runs rpcbind and needs the private namespace"
	mkdir -p "$work/rpcbind"
	rpcbind -f -w >"$work/rpcbind.log" 2>&1 &
	pids+=($!)
	sleep 0.5
	cat >"$work/ganesha.conf" <<-EOF
		NFS_CORE_PARAM {
			NFS_Port = 2049;
			MNT_Port = 20048;
			Protocols = 3;
			Enable_NLM = false;
			Enable_RQUOTA = false;
		}
		EXPORT {
			Export_Id = 1;
			Path = $export_dir;
			Pseudo = $export_dir;
			Access_Type = RW;
			Squash = No_Root_Squash;
			Protocols = 3;
			Transports = TCP, UDP;
			SecType = sys;
			FSAL { Name = VFS; }
		}
	EOF
	ganesha.nfsd -F -f "$work/ganesha.conf" -L "$work/server.log" -p "$work/ganesha.pid" \
		>"$work/ganesha.out" 2>&1 &
	server_pid=$!
	pids+=("$server_pid")
	wait_listening 2049 30 "$server_pid" || bail "ganesha.nfsd listens on 2049"
	;;
cmd)
	KC_EXPORTS_FILE=$exports_file KC_EXPORT_DIR=$export_dir KC_STATE_DIR=$state_dir \
		KC_READY_FILE=$ready_file sh -c "$server_cmd" >"$work/server.log" 2>&1 &
	server_pid=$!
	pids+=("$server_pid")
	wait_listening 2049 30 "$server_pid" || bail "server command listens on 2049"
	;;
esac
ok "$server server is up on port 2049"
# Shale serves MOUNT on the NFS port; Ganesha has its own MOUNT port.
capture_filter="tcp port 2049 or udp port 2049 or port 111"
[ "$server" = ganesha ] && capture_filter="$capture_filter or port 20048"

# ---- capture --------------------------------------------------------------------------------
capture="$work/capture.pcapng"
tshark -i lo -w "$capture" -f "$capture_filter" \
	>"$work/tshark.log" 2>&1 &
tshark_pid=$!
pids+=("$tshark_pid")
for ((i = 0; i < 200; i++)); do
	grep -q "Capturing on" "$work/tshark.log" && break
	kill -0 "$tshark_pid" 2>/dev/null || break
	sleep 0.1
done
grep -q "Capturing on" "$work/tshark.log" || { sed 's/^/# /' "$work/tshark.log"; bail "tshark capture started"; }

# ---- idle connections (--idle-conns) -----------------------------------------------------------
# Held from 127.0.0.2 (inside this network namespace, every 127.x address is the loopback's)
# before the guest mounts, and for its whole run: the guest, whose connections come from
# 127.0.0.1, must mount, list and read as usual while one other address holds more connections
# than the server's per-address cap lets it keep.
idle_pid=
if [ "$idle_conns" -gt 0 ]; then
	python3 "$here/idle-conns.py" 127.0.0.1 2049 127.0.0.2 "$idle_conns" "$work/idle.ready" \
		>"$work/idle.log" 2>&1 &
	idle_pid=$!
	pids+=("$idle_pid")
	for ((i = 0; i < 600; i++)); do
		[ -s "$work/idle.ready" ] && break
		kill -0 "$idle_pid" 2>/dev/null || break
		sleep 0.1
	done
	idle_connected=$(sed -n 's/^connected=//p' "$work/idle.ready" 2>/dev/null)
	if [ "${idle_connected:-0}" -eq "$idle_conns" ]; then
		ok "$idle_conns idle connections from 127.0.0.2 opened before the guest mounts"
	else
		notok "$idle_conns idle connections from 127.0.0.2 opened (${idle_connected:-none})"
		sed 's/^/# idle-conns: /' "$work/idle.log" | tail -n 5
	fi
	sleep 1
	server_fds=$(ls "/proc/$(cat "$work/server.pid")/fd" 2>/dev/null | wc -l)
	note "the server holds $server_fds descriptors beside them"
fi

# ---- guest ----------------------------------------------------------------------------------
kcmode=
[ "$crash" -eq 1 ] && kcmode=kcmode=crash
[ -n "$mode" ] && kcmode="kcmode=$mode"
[ -n "$guest_export2" ] && kcmode="$kcmode kcexport2=$guest_export2"
# On a pool the space FSSTAT reports is the pool's alone (on a host directory, this run's own
# packet capture grows on the same file system), so the guest also checks that a removed large
# file's space comes back.
[ "$backend" = pool ] && kcmode="$kcmode kcspace=own"
# The pool's ordinary run also browses snapshots the host takes meanwhile (snap_host_step).
[ "$backend" = pool ] && [ "$crash" -eq 0 ] && [ -z "$mode" ] && kcmode="$kcmode kcsnap=1"
# The crash run: once the guest has seen crash_after operations complete, the server is killed
# with SIGKILL (no chance to write anything more) and started again at once, on the same pool;
# the guest's hard mount retries what was in flight. Called from the console loop below.
# The restart run (--restart) does the same when the guest says its UNSTABLE WRITEs are answered
# and their COMMIT not yet sent. $1: what the guest had done, for the log.
crash_server() {
	local old
	old=$(cat "$work/server.pid")
	kill -9 "$old" 2>/dev/null
	while kill -0 "$old" 2>/dev/null; do sleep 0.05; done
	echo "# host: killed shale serve (pid $old) with SIGKILL $1"
	restart_shale "after kill -9 (log replayed)"
}
# Starts the server again on the same pool, state directory and command line, as `make run`
# does, and says whether it came up. $1: the TAP line's end.
restart_shale() {
	rm -f "$ready_file"
	start_shale
	local i
	for ((i = 0; i < 600; i++)); do
		grep -q '^port=' "$ready_file" 2>/dev/null && break
		sleep 0.05
	done
	if grep -q '^port=2049$' "$ready_file" 2>/dev/null; then
		echo "ok - shale serve restarted on the same pool $1"
	else
		echo "not ok - shale serve restarted on the same pool $1"
		tail -n 20 "$work/server.log" | sed 's/^/# server: /'
	fi
}
# The eio run: once the guest has written its victim files, the server is stopped (SIGTERM, so no
# block of them stays only in its cache), the faultfs leaves are told to fail reads of every
# block of the victim (found by its pattern in the backing files: guest_stress sectors), on
# tank1 (one side of tank's mirror) and solo0 (solo's only leaf), the server is started again and
# a marker file tells the guest to go on.
arm_faults() {
	local old n ranges
	old=$(cat "$work/server.pid")
	if stop_shale "$old"; then
		echo "ok - shale serve stopped on SIGTERM to arm the faults"
	else
		echo "not ok - shale serve stopped on SIGTERM to arm the faults"
	fi
	for n in tank1 solo0; do
		"$work/guest_stress" sectors "$work/fault/$n.img" >"$work/fault/$n.victim"
		ranges=$(wc -l <"$work/fault/$n.victim")
		bytes=$(awk '{s += $2} END {print s + 0}' "$work/fault/$n.victim")
		if [ "$bytes" -eq $((8 << 20)) ]; then
			echo "ok - the victim's 8 MiB found on leaf $n in $ranges ranges: their reads fail from now on"
		else
			echo "not ok - the victim's 8 MiB found on leaf $n ($bytes bytes in $ranges ranges)"
		fi
		cp "$work/fault/$n.victim" "$work/fault/$n.rules"
	done
	restart_shale "with the faults armed"
	echo marker >"$work/armed"
	nfs-cp "$work/armed" "nfs://127.0.0.1${guest_export2}/armed" >"$work/armed.log" 2>&1 ||
		sed 's/^/# nfs-cp: /' "$work/armed.log"
}
# The snapshot checks (guest-init.sh, kcsnap=1): "STEP COMMAND" from the guest's "# snap host"
# line; runs `shale COMMAND` on the served pool (through its status socket), says how it went,
# then writes the marker .kc-snap-STEP into the export's root for the guest to find.
snap_host_step() {
	local step=${1%% *} cmd=${1#* }
	# shellcheck disable=SC2086 # the command's words
	if "$shale" $cmd -d "$pool_dir" >"$work/snap-$step.log" 2>&1; then
		echo "ok - host: shale $cmd"
	else
		echo "not ok - host: shale $cmd"
		sed 's/^/# /' "$work/snap-$step.log"
	fi
	echo "$step" >"$work/snap-marker"
	nfs-cp "$work/snap-marker" "nfs://127.0.0.1${guest_export}/.kc-snap-$step" \
		>"$work/snap-marker.log" 2>&1 || sed 's/^/# nfs-cp: /' "$work/snap-marker.log"
}
console="$work/console.log"
start=$(date +%s)
# A kernel that panics while booting under TCG, before the guest has run a single check, is an
# emulation flake (seen rarely, in early boot code), not a result: it is booted once more, and said.
for attempt in 1 2; do
	: >"$console"
	note "booting the guest (TCG), timeout ${guest_timeout}s"
	timeout --kill-after=10 "$guest_timeout" qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 \
		-nographic -no-reboot -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
		-kernel "$work/image/vmlinuz" -initrd "$work/image/initrd.img" \
		-append "console=ttyS0 quiet panic=-1 kcexport=$guest_export kcopts=$mount_opts $kcmode" \
		</dev/null 2>"$work/qemu.err" |
		while IFS= read -r line; do
			line=${line%$'\r'}
			printf '%s\n' "$line" >>"$console"
			case "$line" in
			"ok - "* | "not ok - "*) printf '%s\n' "$line" ;;
			"# crash acked "*)
				acked=$((${acked:-0} + 1))
				if [ "$acked" -eq "$crash_after" ]; then
					crash_server "after $crash_after acknowledged operations" | tee -a "$console"
				fi
				;;
			"# crash "* | "# restart progress "*) ;; # many: kept in the console log only
			"# restart kill"*)
				printf '%s\n' "$line"
				crash_server "while its UNSTABLE WRITEs wait for their COMMIT" | tee -a "$console"
				;;
			"# eio arm"*) arm_faults | tee -a "$console" ;;
			"# snap host "*) snap_host_step "${line#\# snap host }" | tee -a "$console" ;;
			"# "*) printf '%s\n' "$line" ;;
			esac
		done
	qemu_rc=${PIPESTATUS[0]}
	if [ "$attempt" -eq 1 ] && grep -q 'Kernel panic' "$console" &&
		! grep -qE '^(not )?ok - ' "$console"; then
		cp "$console" "$work/console.panic.log"
		note "the guest kernel panicked while booting, before any check ran (kept in console.panic.log); booting it again"
		continue
	fi
	break
done
elapsed=$(($(date +%s) - start))
if [ "$server" = shale ]; then
	server_pid=$(cat "$work/server.pid") # a new one after a crash run's restart
	pids+=("$server_pid")
fi
guest_ok=$(grep -c '^ok - ' "$console")
guest_notok=$(grep -c '^not ok - ' "$console")
pass_count=$((pass_count + guest_ok))
fail_count=$((fail_count + guest_notok))
note "guest ran ${elapsed}s (qemu exit $qemu_rc): $guest_ok ok, $guest_notok not ok"
if grep -q '^# kclient: guest done' "$console" && [ "$guest_ok" -gt 0 ]; then
	ok "guest ran to completion and reported"
else
	if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
		why="timed out after ${guest_timeout}s"
	else
		why="qemu exited $qemu_rc without the guest's completion line"
	fi
	notok "guest ran to completion and reported ($why)"
	tail -n 30 "$console" | sed 's/^/# console: /'
	sed 's/^/# qemu: /' "$work/qemu.err" | tail -n 5
fi

if [ -n "$idle_pid" ]; then
	# The per-address cap (1,024 by default) held all along: no more than that many of the idle
	# ones, plus the guest's and the listeners, are the server's descriptors now.
	server_fds=$(ls "/proc/$(cat "$work/server.pid")/fd" 2>/dev/null | wc -l)
	if kill -0 "$idle_pid" 2>/dev/null && [ "$server_fds" -gt 0 ] && [ "$server_fds" -le 1124 ]; then
		ok "the idle connections stayed within the per-address cap (server fds $server_fds)"
	else
		notok "the idle connections stayed within the per-address cap (server fds $server_fds)"
	fi
	kill "$idle_pid" 2>/dev/null
	wait "$idle_pid" 2>/dev/null
fi

# ---- host-side view of a pool's file system, through libnfs while the server still runs -------
# (a pool's files cannot be read beside the server; the posix export is read directly below)
if [ "$backend" = pool ] && [ "$crash" -eq 0 ] && [ -z "$mode" ]; then
	view="$work/view"
	mkdir -p "$view"
	nfs_url="nfs://127.0.0.1/tank/home/kc"
	nfs-cp "$nfs_url/big" "$view/big" >"$view/cp.log" 2>&1 || sed 's/^/# nfs-cp: /' "$view/cp.log"
	nfs-ls "$nfs_url/many" >"$view/many.ls" 2>&1
	nfs-ls "$nfs_url" >"$view/kc.ls" 2>&1
fi

# ---- capture decode -------------------------------------------------------------------------
sleep 1 # let the last packets reach the capture file
kill -INT "$tshark_pid" 2>/dev/null
wait "$tshark_pid" 2>/dev/null
if [ "$server" = shale ]; then
	stop_shale "$server_pid"
	server_rc=$?
else
	kill "$server_pid" 2>/dev/null
	wait "$server_pid" 2>/dev/null
	server_rc=$?
fi
if [ "$server" = shale ]; then
	# SIGTERM is the documented way to stop the server: it must exit 0, and a sanitizer build
	# must have nothing to report about the whole run.
	sanitizer=$(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/server.log")
	if [ "$server_rc" -eq 0 ] && [ "$sanitizer" -eq 0 ]; then
		ok "shale serve stopped cleanly on SIGTERM (exit 0, no sanitizer reports)"
	else
		notok "shale serve stopped cleanly on SIGTERM (exit $server_rc, $sanitizer sanitizer reports)"
		grep -E -A12 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work/server.log" |
			head -n 40 | sed 's/^/# server: /'
	fi
fi

# The kernel client talks from a reserved port (665..1023); tshark decodes a TCP or UDP
# conversation by its lower port first, so a client port that another protocol owns (862 is
# TWAMP-Control, 873 rsync, 993 TLS ...) would be dissected as that protocol and reported
# malformed. The capture holds only NFS, MOUNT and portmap traffic (its filter), so every such
# port is decoded as RPC.
decode_as=()
while read -r table port; do
	decode_as+=(-d "$table==$port,rpc")
done < <(tshark -G decodes 2>/dev/null |
	awk -F'\t' '($1 == "tcp.port" || $1 == "udp.port") && $2 >= 512 && $2 < 1024 {print $1, $2}')
tshark_read() { # tshark options: reads the capture
	tshark "${decode_as[@]}" -r "$capture" "$@"
}
count_frames() { # $1: display filter
	tshark_read -Y "$1" -T fields -e frame.number 2>/dev/null | wc -l
}
nfs_n=$(count_frames nfs)
mount_n=$(count_frames mount)
portmap_n=$(count_frames portmap)
# A segment the capture saw twice (a TCP retransmission or out-of-order copy, which the guest's
# user-mode network sends now and then) can fail tshark's TCP reassembly ("new fragment overlaps
# old data") and be flagged malformed, though its bytes were decoded from their first copy: such
# frames are counted apart, and every other malformed frame fails the check.
resent='tcp.analysis.retransmission || tcp.analysis.out_of_order || tcp.analysis.spurious_retransmission'
malformed=$(tshark_read -Y "_ws.malformed && !($resent)" 2>/dev/null)
malformed_n=$(printf '%s' "$malformed" | grep -c .)
malformed_resent_n=$(count_frames "_ws.malformed && ($resent)")
[ "$malformed_resent_n" -eq 0 ] ||
	note "$malformed_resent_n resent TCP segments flagged by tshark's reassembly, not counted as malformed"
expert_errors=$(count_frames '_ws.expert.severity == error')
udp_n=$(count_frames 'udp && (portmap || mount)')
note "capture: $nfs_n NFS, $mount_n MOUNT, $portmap_n portmap frames ($udp_n of the MOUNT/portmap ones over UDP), $expert_errors expert errors"
if [ "$nfs_n" -gt 0 ] && [ "$mount_n" -gt 0 ] && [ "$portmap_n" -gt 0 ] && [ "$malformed_n" -eq 0 ]; then
	ok "capture decoded by tshark with zero malformed packets ($nfs_n NFS packets)"
else
	notok "capture decoded by tshark with zero malformed packets ($nfs_n NFS, $mount_n MOUNT, $portmap_n portmap, $malformed_n malformed)"
	printf '%s\n' "$malformed" | head -n 20 | sed 's/^/# malformed: /'
fi
if [ "$expert_errors" -gt 0 ]; then
	tshark_read -Y '_ws.expert.severity == error' 2>/dev/null | head -n 10 | sed 's/^/# expert error: /'
fi
# Which procedures the kernel used, for the log.
procs=$(tshark_read -Y 'nfs && rpc.msgtyp == 0' -T fields -e nfs.procedure_v3 2>/dev/null |
	tr ',' '\n' | sort -n | uniq -c | awk '{printf "%s:%s ", $2, $1}')
note "NFSv3 procedures called (number:count): $procs"
errs=$(tshark_read -Y 'nfs && rpc.msgtyp == 1 && nfs.status3 != 0' -T fields \
	-e rpc.procedure -e nfs.status3 2>/dev/null | sort | uniq -c | awk '{printf "%s:%s:%s ", $2, $3, $1}')
note "NFSv3 error replies (procedure:nfsstat3:count): ${errs:-none}"

# ---- the restart run: work went on after the restart, and the client sent WRITEs again ---------
if [ "$mode" = restart ]; then
	# The guest's workers print progress lines as they go; the host's restart line is in the
	# console log between them.
	for w in fsx sync unstable; do
		after=$(awk -v w="$w" '/^ok - shale serve restarted/ {seen = 1}
			seen && $1 == "#" && $2 == "restart" && $3 == "progress" && $4 == w {n++}
			END {print n + 0}' "$console")
		if [ "$after" -gt 0 ]; then
			ok "the guest's $w worker made progress after the restart ($after progress lines)"
		else
			notok "the guest's $w worker made progress after the restart"
		fi
	done
	# The write verifier of every WRITE and COMMIT reply: one before the kill, another after.
	# (A frame may carry several RPC messages: tshark lists each one's fields, comma separated.)
	verfs=$(tshark_read -Y 'nfs && rpc.msgtyp == 1 && (nfs.procedure_v3 == 7 || nfs.procedure_v3 == 21)' \
		-T fields -e nfs.verifier 2>/dev/null | tr ',' '\n' | grep -v '^$' | sort -u | wc -l)
	if [ "$verfs" -eq 2 ]; then
		ok "the client saw the write verifier change at the restart, and only then"
	else
		notok "the client saw the write verifier change at the restart, and only then ($verfs verifiers)"
	fi
	# WRITEs past 1 MiB are the two writers' (the fsx file stays below), which write each offset
	# once: an offset first written UNSTABLE and written again was re-sent after the COMMIT met
	# the new verifier. Each call's fields are picked out of the frame's lists by its procedure:
	# RENAME (14) and LINK (15) carry two handles, NULL none; READ, WRITE and COMMIT (6, 7, 21)
	# an offset; WRITE a stable_how.
	resent=$(tshark_read -Y 'nfs && rpc.msgtyp == 0' -T fields -e nfs.procedure_v3 -e nfs.fh.hash \
		-e nfs.offset3 -e nfs.write.stable 2>/dev/null | awk -F'\t' '
		{
			np = split($1, P, ","); split($2, F, ","); split($3, O, ","); split($4, S, ",")
			fi = 1; oi = 1; si = 1
			for (i = 1; i <= np; i++) {
				p = P[i]; fh = F[fi]
				fi += p == 0 ? 0 : (p == 14 || p == 15) ? 2 : 1
				if (p == 6 || p == 7 || p == 21) off = O[oi++]
				if (p != 7) continue
				st = S[si++]
				if (off + 0 < 1048576) continue
				k = fh " " off
				if (n[k]++ == 0) first[k] = st
			}
		}
		END { c = 0; for (k in n) if (n[k] >= 2 && first[k] == 0) c++; print c }')
	if [ "$resent" -gt 0 ]; then
		ok "the client sent its uncommitted UNSTABLE WRITEs again ($resent re-sent)"
	else
		notok "the client sent its uncommitted UNSTABLE WRITEs again (none was)"
	fi
fi

# ---- the eio run: the faults were met ---------------------------------------------------------
if [ "$mode" = eio ]; then
	for n in tank1 solo0; do
		failed=$(grep -c '^faultfs: EIO read' "$work/faultfs.$n.log")
		if [ "$failed" -gt 0 ]; then
			ok "leaf $n failed $failed reads with EIO"
		else
			notok "leaf $n failed reads with EIO (none failed)"
		fi
		rm -f "$work/fault/$n.rules" # no more faults, for the check below
	done
fi

# ---- host-side view of the export -------------------------------------------------------------
# (the crash and fault runs check their own state in the guest; the phases' files are not there)
if [ "$crash" -eq 0 ] && [ -z "$mode" ]; then
guest_hash=$(sed -n 's/^# kclient-hash big \([0-9a-f]*\).*/\1/p' "$console" | head -n 1)
want_line=$("$work/guest_fsops" big-hash)
if [ "$backend" = pool ]; then
	host_line=$("$work/guest_fsops" hash "$view/big" 2>&1)
	many_left=$(awk '{print $NF}' "$view/many.ls" | grep -c '^f')
	ls_field() { # $1: name, $2: field of nfs-ls's line (1 mode, 2 nlink, 3 uid, 4 gid)
		awk -v n="$1" -v f="$2" '$NF == n {print $f}' "$view/kc.ls"
	}
	if [ "$(ls_field link_orig 2)" = 2 ] && [ "$(ls_field link_other 2)" = 2 ] &&
		[ "$(ls_field sym_rel 1 | cut -c1)" = l ] &&
		[ "$(ls_field owned 3):$(ls_field owned 4) $(ls_field owned 1)" = "4321:8765 -rw-r--r--" ] &&
		[ "$(ls_field modes 1)" = -rwxr-x--x ]; then
		attrs_ok=1
	else
		attrs_ok=0
		sed 's/^/# nfs-ls: /' "$view/kc.ls" | head -n 30
	fi
else
	host_line=$("$work/guest_fsops" hash "$export_dir/kc/big" 2>&1)
	many_left=$(find "$export_dir/kc/many" -mindepth 1 -maxdepth 1 -name 'f*' 2>/dev/null | wc -l)
	if [ "$(stat -c '%h %i' "$export_dir/kc/link_orig" 2>/dev/null)" = \
		"$(stat -c '%h %i' "$export_dir/kc/link_other" 2>/dev/null)" ] &&
		[ "$(stat -c %h "$export_dir/kc/link_orig" 2>/dev/null)" = 2 ] &&
		[ "$(readlink "$export_dir/kc/sym_rel")" = link_orig ] &&
		[ "$(stat -c '%u:%g %a' "$export_dir/kc/owned" 2>/dev/null)" = "4321:8765 644" ] &&
		[ "$(stat -c '%a' "$export_dir/kc/modes" 2>/dev/null)" = 751 ]; then
		attrs_ok=1
	else
		attrs_ok=0
		ls -la "$export_dir/kc" 2>&1 | head -n 30 | sed 's/^/# /'
	fi
fi
host_hash=${host_line%% *}
if [ -n "$guest_hash" ] && [ "$host_line" = "$want_line" ] && [ "$host_hash" = "$guest_hash" ]; then
	ok "host reads the 64 MiB file with the guest's hash ($host_hash)"
else
	notok "host reads the 64 MiB file with the guest's hash (guest '${guest_hash}', host '$host_line', expected '$want_line')"
fi
if [ "$many_left" -eq 1000 ]; then
	ok "host sees the 2000-entry directory reduced to 1000 entries"
else
	notok "host sees the 2000-entry directory reduced to 1000 entries (found $many_left)"
fi
if [ "$attrs_ok" -eq 1 ]; then
	ok "host sees the links, symlink, owner and mode the guest set"
else
	notok "host sees the links, symlink, owner and mode the guest set"
fi
fi
if [ "$backend" = pool ]; then
	for p in "${pools[@]}"; do
		if "$shale" pool check "$p" -d "$pool_dir" >"$work/check.$p.log" 2>&1 &&
			grep -q "pool $p: 0 problems" "$work/check.$p.log"; then
			ok "shale pool check $p after the run: every block verified, 0 problems"
		else
			notok "shale pool check $p after the run"
			sed 's/^/# check: /' "$work/check.$p.log" | tail -n 20
		fi
	done
fi

note "kclient: $pass_count passed, $fail_count failed"
[ "$fail_count" -eq 0 ]
