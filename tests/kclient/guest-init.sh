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
for w in $(cat /proc/cmdline); do
	case "$w" in
	kcexport=*) EXPORT=${w#kcexport=} ;;
	kcexport2=*) EXPORT2=${w#kcexport2=} ;;
	kcopts=*) OPTS=${w#kcopts=} ;;
	kcmode=*) MODE=${w#kcmode=} ;;
	kcspace=*) export KC_SPACE=${w#kcspace=} ;;
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
