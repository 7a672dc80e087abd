#!/bin/sh
# guest-init.sh: /init of the kernel-client guest. Brings up the network, mounts the host's NFS
# export with the kernel's own client (no port options: the kernel asks the portmapper at
# 10.0.2.2:111, which qemu forwards to the host's 127.0.0.1:111), runs phase 1 of guest_fsops,
# unmounts, mounts again, runs phase 2, mounts a third time with MOUNT over UDP, and powers off. Every result is a TAP line on the console;
# "# kclient: guest done" tells the host runner the guest finished on its own.
#
# Kernel command line parameters read here:
#   kcexport=PATH   the exported directory on the host (required)
#   kcopts=OPTS     mount options (default vers=3,nolock)
#   kcmode=crash    instead of the phases: the crash workload (guest_fsops crashload), during
#                   which the host kills and restarts the server, then a fresh mount and
#                   guest_fsops crashcheck
#   kcmode=restart  guest_stress restartload (the export also at /mnt2 with write=eager, for the
#                   buffered writer), during which the host kills the server (kill -9) and starts it
#                   again, then a fresh mount and guest_stress restartcheck
#   kcmode=full     guest_stress fill: the pool filled through /mnt, the quota through /mnt2
#   kcmode=eio      guest_stress eiowrite, during which the host arms the faulty leaves, then
#                   guest_stress eiocheck: the mirror at /mnt, the single leaf at /mnt2
#   kcexport2=PATH  a second export, mounted at /mnt2 (kcmode full and eio)
#   kcspace=own     the space the file system reports is the server's alone (a pool): phase 1
#                   also checks that a removed large file's space comes back (KC_SPACE=own)
#   kcsnap=1        after phase 2, the snapshot checks (Shale's pool): the host takes and
#                   destroys snapshots and rolls the file system back when asked ("# snap host
#                   STEP COMMAND" on the console, answered by the file .kc-snap-STEP in the
#                   export's root) while the guest browses .zfs/snapshot and holds files open
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
# Keep kernel messages off the console unless they are errors: the console carries the TAP lines.
echo "3 4 1 3" >/proc/sys/kernel/printk

for m in $(cat /etc/kclient-modules); do
	insmod "/lib/modules/$m.ko" || echo "# kclient: insmod $m failed"
done

EXPORT=
EXPORT2=
OPTS=vers=3,nolock
MODE=phases
SNAP=
for w in $(cat /proc/cmdline); do
	case "$w" in
	kcexport=*) EXPORT=${w#kcexport=} ;;
	kcexport2=*) EXPORT2=${w#kcexport2=} ;;
	kcopts=*) OPTS=${w#kcopts=} ;;
	kcmode=*) MODE=${w#kcmode=} ;;
	kcspace=*) export KC_SPACE=${w#kcspace=} ;;
	kcsnap=*) SNAP=${w#kcsnap=} ;;
	esac
done

ip link set lo up
ip addr add 10.0.2.15/24 dev eth0
ip link set eth0 up
ip route add default via 10.0.2.2
echo "# kclient: guest up, kernel $(uname -r), export 10.0.2.2:$EXPORT, options $OPTS"

tap() { # $1: exit status, $2: name
	if [ "$1" -eq 0 ]; then echo "ok - $2"; else echo "not ok - $2"; fi
}

finish() {
	echo "# kclient: guest done"
	sync
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}

if [ -z "$EXPORT" ]; then
	echo "not ok - guest: no kcexport= on the kernel command line"
	finish
fi

mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT" /mnt
rc=$?
tap $rc "mount -t nfs -o $OPTS (no port options)"
if [ $rc -ne 0 ]; then
	dmesg | tail -n 20 | sed 's/^/# /'
	finish
fi
grep ' /mnt ' /proc/mounts | sed 's/^/# mounted: /'

if [ -n "$EXPORT2" ]; then
	mkdir -p /mnt2
	mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT2" /mnt2
	rc=$?
	tap $rc "mount -t nfs -o $OPTS 10.0.2.2:$EXPORT2 (the second export)"
	[ $rc -eq 0 ] || finish
fi

# Unmounts both exports, drops every cache and mounts them again: what is read next comes from
# the server. Says whether the mounts came back.
remount() {
	umount /mnt
	tap $? "umount after the $MODE workload"
	[ -z "$EXPORT2" ] || umount /mnt2
	echo 3 >/proc/sys/vm/drop_caches
	mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT" /mnt &&
		{ [ -z "$EXPORT2" ] || mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT2" /mnt2; }
	rc=$?
	tap $rc "mount again after the $MODE workload"
	return $rc
}

case "$MODE" in
restart)
	mkdir -p /mnt2
	mount -t nfs -o "$OPTS,write=eager" "10.0.2.2:$EXPORT" /mnt2
	tap $? "mount -t nfs -o $OPTS,write=eager (the buffered writer's)"
	guest_stress restartload /mnt /mnt2 /tmp/restart.state
	tap $? "restart workload ran to its end across the server's restart"
	umount /mnt2
	remount && guest_stress restartcheck /mnt /tmp/restart.state
	umount /mnt
	finish
	;;
full)
	guest_stress fill /mnt /mnt2
	umount /mnt /mnt2
	tap $? "umount after the full pool"
	finish
	;;
eio)
	guest_stress eiowrite /mnt /mnt2 && remount && guest_stress eiocheck /mnt /mnt2
	umount /mnt /mnt2
	finish
	;;
esac

if [ "$MODE" = crash ]; then
	guest_fsops crashload /mnt /tmp/crash.state
	tap $? "crash workload ran to its end across the server's restart"
	umount /mnt
	tap $? "umount after the crash workload"
	echo 3 >/proc/sys/vm/drop_caches
	mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT" /mnt
	rc=$?
	tap $rc "mount again after the crash workload"
	if [ $rc -eq 0 ]; then
		guest_fsops crashcheck /mnt /tmp/crash.state
		umount /mnt
	fi
	finish
fi

guest_fsops phase1 /mnt
echo "# kclient: phase1 exit $?"

umount /mnt
tap $? "umount after phase 1"
mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT" /mnt
rc=$?
tap $rc "remount"
if [ $rc -eq 0 ]; then
	guest_fsops phase2 /mnt
	echo "# kclient: phase2 exit $?"
	umount /mnt
	tap $? "umount after phase 2"
fi

# ---- snapshots: .zfs/snapshot as users browse it (kcsnap=1) ----
# Asks the host to run `shale COMMAND` on the served pool and waits for its marker, looked for
# through /mnt3, a mount without a lookup cache (a name looked up on /mnt would be remembered as
# missing; /mnt's caches are what the checks below are about).
snap_host() { # $1: step, the rest: the command
	step=$1
	shift
	echo "# snap host $step $*"
	i=0
	while [ $i -lt 120 ]; do
		[ -e "/mnt3/.kc-snap-$step" ] && return 0
		sleep 1
		i=$((i + 1))
	done
	return 1
}

# Waits up to 90 s for `ls DIR` to show (want=1) or not show (want=0) NAME; says how long.
snap_wait_listed() { # $1: dir, $2: name, $3: want
	i=0
	while [ $i -lt 90 ]; do
		if ls "$1" | grep -qx "$2"; then got=1; else got=0; fi
		[ "$got" = "$3" ] && return 0
		sleep 1
		i=$((i + 1))
	done
	return 1
}

snapshots() {
	mkdir -p /mnt3
	mount -t nfs -o "$OPTS,nosharecache,lookupcache=none" "10.0.2.2:$EXPORT" /mnt3
	tap $? "snapshots: a second mount without a lookup cache, for the host's markers"
	mount -t nfs -o "$OPTS" "10.0.2.2:$EXPORT" /mnt
	tap $? "snapshots: mount"
	S=/mnt/st
	mkdir -p $S/sub/deeper && dd if=/dev/urandom of=$S/big bs=1M count=6 2>/dev/null &&
		echo hello >$S/small && chmod 0640 $S/small && ln -s small $S/link &&
		ln $S/small $S/hard && echo deep >$S/sub/deeper/file && touch $S/sub/empty &&
		chown 1234:567 $S/sub/empty && truncate -s 3M $S/sparse
	rc=$?
	i=0
	while [ $i -lt 300 ]; do
		echo "$i" >$S/sub/f$i || rc=1
		i=$((i + 1))
	done
	sync
	tap $rc "snapshots: a tree of files, a symlink, a hard link, a sparse file, 300 small files"
	(cd /mnt && find st | sort) >/tmp/snap.list
	(cd /mnt && find st -type f | sort | xargs sha256sum) >/tmp/snap.sums
	snap_host 1 snapshot create tank/home@kc1
	tap $? "snapshots: the host took tank/home@kc1 (shale snapshot create on the served pool)"
	# the file system changes on after it
	dd if=/dev/urandom of=$S/big bs=1M count=2 conv=notrunc 2>/dev/null &&
		rm $S/small $S/hard && rm -r $S/sub/deeper && echo new >$S/added
	tap $? "snapshots: the file system changed after the snapshot"
	sync
	if ls -a /mnt | grep -qx .zfs; then rc=1; else rc=0; fi
	tap $rc "snapshots: .zfs is not in the root's listing (snapdir=hidden)"
	[ -d /mnt/.zfs/snapshot ]
	tap $? "snapshots: .zfs/snapshot is there by name"
	[ "$(ls /mnt/.zfs/snapshot)" = kc1 ]
	tap $? "snapshots: ls .zfs/snapshot says kc1"
	(cd /mnt/.zfs/snapshot/kc1 && find st | sort) >/tmp/snap.list2
	cmp -s /tmp/snap.list /tmp/snap.list2
	tap $? "snapshots: find in kc1 lists every path as it was ($(wc -l </tmp/snap.list) paths)"
	(cd /mnt/.zfs/snapshot/kc1 && sha256sum -c /tmp/snap.sums >/tmp/snap.c1 2>&1)
	tap $? "snapshots: every file of kc1 reads back byte-exact"
	cp -a /mnt/.zfs/snapshot/kc1/st /tmp/ && (cd /tmp && sha256sum -c /tmp/snap.sums >/dev/null)
	tap $? "snapshots: cp -a out of kc1, every copied file byte-exact"
	[ "$(stat -c %a /tmp/st/small)" = 640 ] && [ "$(readlink /tmp/st/link)" = small ] &&
		[ "$(stat -c %h /mnt/.zfs/snapshot/kc1/st/small)" = 2 ] &&
		[ "$(stat -c %u:%g /tmp/st/sub/empty)" = 1234:567 ] &&
		[ "$(stat -c %s /tmp/st/sparse)" = 3145728 ]
	tap $? "snapshots: modes, owners, sizes, a symlink and a hard link as they were"
	rm -rf /tmp/st
	if touch /mnt/.zfs/snapshot/kc1/st/new 2>/tmp/snap.err; then rc=1; else rc=0; fi
	[ $rc -eq 0 ] && grep -qi "read-only" /tmp/snap.err
	tap $? "snapshots: a change inside kc1 fails: $(cat /tmp/snap.err)"
	[ "$(stat -c %d /mnt)" != "$(stat -c %d /mnt/.zfs/snapshot/kc1)" ]
	tap $? "snapshots: kc1 is a file system of its own (the client mounted it by itself)"
	[ ! -e $S/small ] && [ "$(cat $S/added)" = new ]
	tap $? "snapshots: the file system itself is as changed"
	# A snapshot taken after the directory was listed shows in the next listing.
	snap_host 2 snapshot create tank/home@kc2
	tap $? "snapshots: the host took tank/home@kc2"
	snap_wait_listed /mnt/.zfs/snapshot kc2 1
	tap $? "snapshots: kc2 shows in .zfs/snapshot, listed before it was taken (${i}s)"
	[ "$(cat /mnt/.zfs/snapshot/kc2/st/added)" = new ] && [ ! -e /mnt/.zfs/snapshot/kc2/st/small ]
	tap $? "snapshots: kc2 holds the changes made after kc1"
	# Destroyed while a file of it is open: its reads say the handle is stale.
	exec 3</mnt/.zfs/snapshot/kc1/st/big
	snap_host 3 snapshot destroy tank/home@kc1
	tap $? "snapshots: the host destroyed kc1 while a file of it was open here"
	echo 3 >/proc/sys/vm/drop_caches
	if cat <&3 >/dev/null 2>/tmp/snap.err; then rc=1; else rc=0; fi
	exec 3<&-
	[ $rc -eq 0 ] && grep -qi "stale" /tmp/snap.err
	tap $? "snapshots: a read of kc1's open file after its destroy: $(cat /tmp/snap.err)"
	snap_wait_listed /mnt/.zfs/snapshot kc1 0
	tap $? "snapshots: kc1 leaves the listing of .zfs/snapshot (${i}s)"
	# Rolled back while mounted, with files open: one the snapshot holds reads as it was, one
	# made after it is stale, and the file system goes on.
	want=$(sha256sum </mnt/.zfs/snapshot/kc2/st/big)
	dd if=/dev/urandom of=$S/big bs=1M count=1 conv=notrunc 2>/dev/null &&
		echo later >$S/after2 && rm $S/added && sync
	tap $? "snapshots: the file system changed after kc2"
	exec 4<$S/after2 5<$S/big
	snap_host 4 fs rollback tank/home@kc2
	tap $? "snapshots: the host rolled tank/home back to kc2 while it was mounted here"
	echo 3 >/proc/sys/vm/drop_caches
	[ "$(sha256sum <&5)" = "$want" ]
	tap $? "snapshots: a file open across the rollback reads as kc2 holds it"
	if cat <&4 >/dev/null 2>/tmp/snap.err; then rc=1; else rc=0; fi
	exec 4<&- 5<&-
	[ $rc -eq 0 ] && grep -qi "stale" /tmp/snap.err
	tap $? "snapshots: a file made after kc2, open across the rollback: $(cat /tmp/snap.err)"
	[ ! -e /mnt3/st/after2 ] && [ "$(cat /mnt3/st/added)" = new ] && [ ! -e /mnt3/st/small ]
	tap $? "snapshots: looked up again, the tree is kc2's"
	snap_wait_listed $S after2 0
	tap $? "snapshots: after2 leaves the listing of a directory listed before the rollback (${i}s)"
	echo post >$S/post && [ "$(cat $S/post)" = post ] && sync
	tap $? "snapshots: the rolled-back file system takes new files"
	# The snapshots' mounts go first (the client made them), then the file system's.
	for m in $(grep ' /mnt/.zfs/snapshot/' /proc/mounts | cut -d' ' -f2); do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
	umount /mnt
	tap $? "snapshots: umount"
	umount /mnt3
}

if [ "$SNAP" = 1 ]; then
	snapshots
fi

# The same export once more with the portmapper and MOUNT asked over UDP (this kernel refuses
# NFS itself over UDP: CONFIG_NFS_DISABLE_UDP_SUPPORT), then a read of the large file.
mount -t nfs -o "$OPTS,mountproto=udp" "10.0.2.2:$EXPORT" /mnt
rc=$?
tap $rc "mount with mountproto=udp (portmap and MOUNT over UDP)"
if [ $rc -eq 0 ]; then
	want=$(guest_fsops big-hash)
	got=$(guest_fsops hash /mnt/kc/big)
	[ -n "$want" ] && [ "$got" = "$want" ]
	tap $? "64 MiB file read through the UDP-negotiated mount ($got)"
	umount /mnt
	tap $? "final umount"
fi
finish
