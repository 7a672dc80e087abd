#!/bin/bash
# posix_journal.sh: how the posix back end makes a new file durable depends on the host file
# system (src/posix/posix.c, Durability). On three loop-mounted file systems, ext4 with a
# journal, ext4 made without one and ext2, `shale serve` must say which kind it found, and files
# created through libnfs's nfs-cp must be fsynced themselves only where there is no journal, and
# their directory only where the file's fsync does not write its entry (everywhere but ext4
# without a journal; traced with strace -y, which names each fsync'd fd's path); on all three,
# every copy reads back byte-exact. Prints TAP lines. Needs root (loop devices, mount),
# $SHALE_BIN, mkfs.ext4, mkfs.ext2, strace and nfs-cp.
set -u
. "$(dirname "$0")/../lib/tap.sh"

root=$(mktemp -d /tmp/shale-journal.XXXXXX)
pid=
loops=()
cleanup() {
	[ -n "$pid" ] && pkill -9 -P "$pid" 2>/dev/null
	for m in "$root"/mnt-*; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
	for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
	[ -n "${KEEP:-}" ] || rm -rf "$root"
}
trap cleanup EXIT
cd "$root" || exit 1
mkdir -p state
head -c 20000 /dev/urandom >small.bin

mkfs_mount() { # $1: name, $2: type (ext4, ext2), then mkfs options; mounts it on mnt-$1
	local name=$1 type=$2
	shift 2
	truncate -s 64M "$name.img" && "mkfs.$type" -q -F "$@" "$name.img" || return 1
	local dev
	dev=$(losetup -f --show "$name.img") || return 1
	loops+=("$dev")
	mkdir -p "mnt-$name" && mount -t "$type" "$dev" "mnt-$name" && mkdir "mnt-$name/export"
}

serve() { # $1: name; serves mnt-$1/export under strace, on a free port
	rm -f ready
	echo "$root/mnt-$1/export 127.0.0.1(rw,insecure,no_root_squash)" >exports
	strace -f -y -qq -e trace=fsync,syncfs,ftruncate -o "strace-$1.txt" \
		"$SHALE_BIN" serve --exports exports --state state --port 0 --no-portmap \
		--ready-file ready --log-level info >"serve-$1.log" 2>&1 &
	pid=$!
	for _ in $(seq 400); do
		grep -q '^port=' ready 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	port=$(sed -n 's/^port=//p' ready 2>/dev/null)
	[ -n "$port" ] || { cat "serve-$1.log"; return 1; }
}

copy_files() { # $1: name; copies small.bin in as f1..f10 and reads each back
	local q="?nfsport=$port&mountport=$port&version=3"
	for i in $(seq 1 10); do
		nfs-cp small.bin "nfs://127.0.0.1$root/mnt-$1/export/f$i.bin$q" >/dev/null || return 1
		rm -f back.bin
		nfs-cp "nfs://127.0.0.1$root/mnt-$1/export/f$i.bin$q" back.bin >/dev/null || return 1
		cmp small.bin back.bin || return 1
	done
}

stop() { # stops the server (strace's child), then waits for strace to write its trace
	pkill -TERM -P "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
}

# Calls of $1 on the copied files in the trace of run $2. Besides its creation, a copied file is
# fsynced by the SETATTR (size 0) with which nfs-cp truncates it, which also shows as ftruncate.
file_calls() {
	grep -c "^[0-9]* *$1([0-9]*<[^>]*/export/f[0-9]*\\.bin>" "strace-$2.txt"
}
export -f file_calls
# Whether the export directory itself was fsynced in the trace of run $1.
dir_fsynced() {
	grep -q "fsync([0-9]*<[^>]*/export>" "strace-$1.txt"
}
export -f dir_fsynced

check "ext4 with a journal, loop-mounted" mkfs_mount journal ext4
check "ext4 without a journal, loop-mounted" mkfs_mount nojournal ext4 -O ^has_journal
check "ext2, loop-mounted" mkfs_mount ext2 ext2

check "serve on the journalled ext4" serve journal
check "it says the file system journals" grep -q 'journalling file system' serve-journal.log
check "10 files copied in and read back byte-exact" copy_files journal
stop
check "no copied file was fsynced at its creation (its directory's fsync commits it)" \
	bash -c "[ \$(file_calls fsync journal) -eq \$(file_calls ftruncate journal) ] && grep -q 'fsync([0-9]*<[^>]*/export>' strace-journal.txt"

check "serve on the ext4 without a journal" serve nojournal
check "it says new objects are fsynced with their directory entry" \
	grep -q 'ext4 without a journal: new objects fsynced with their directory entry' \
	serve-nojournal.log
check "10 files copied in and read back byte-exact" copy_files nojournal
stop
check "each copied file was fsynced itself at its creation" \
	bash -c "[ \$(file_calls fsync nojournal) -ge \$((\$(file_calls ftruncate nojournal) + 10)) ]"
check "the directory was not fsynced (each file's fsync wrote its entry)" \
	bash -c "! dir_fsynced nojournal"

check "serve on the ext2" serve ext2
check "it says new objects are fsynced before their directory" \
	grep -q 'new objects fsynced before their directory' serve-ext2.log
check "10 files copied in and read back byte-exact" copy_files ext2
stop
check "each copied file was fsynced itself at its creation" \
	bash -c "[ \$(file_calls fsync ext2) -ge \$((\$(file_calls ftruncate ext2) + 10)) ]"
check "and so was the directory" dir_fsynced ext2

tap_finish posix_journal
