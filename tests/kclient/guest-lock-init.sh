#!/bin/sh
# guest-lock-init.sh: /init of the guests of the lock test (run-kclient-lock.sh). Each guest is an
# NFS client on the test's bridge (a tap device, not qemu's user network: the server must reach
# the guest for its GRANTED callbacks). It starts the client side that the kernel's lockd needs,
# Debian's rpcbind and rpc.statd, mounts the export without `nolock` and runs guest_lock in its
# role. Results are TAP lines on the console; "# kclient: guest done" ends them.
#
# Kernel command line parameters read here:
#   kcrole=a|b      the guest's role in guest_lock
#   kcaddr=A.B.C.D  its address on the bridge (/24)
#   kcserver=ADDR   the server's address
#   kcexport=PATH   the export to mount
#   kcmode=recover  guest_lock's recovery run (the host kills and restarts the server)
#   kcmode=reset    guest_lock's reset run: the client's NSM state directory (/var/lib/nfs) is
#                   kept on a second export, kccstate=PATH/ROLE (mounted nolock), so that it
#                   outlives the guest; the host kills guest a and boots it again with
#   kcmode=reboot   which sends SM_NOTIFY (sm-notify, as a booting client does) before its checks
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak /run/rpcbind
echo "3 4 1 3" >/proc/sys/kernel/printk

for m in $(cat /etc/kclient-modules); do
	insmod "/lib/modules/$m.ko" || echo "# kclient: insmod $m failed"
done

ROLE= ADDR= SERVER= EXPORT= MODE= CSTATE=
for w in $(cat /proc/cmdline); do
	case "$w" in
	kcrole=*) ROLE=${w#kcrole=} ;;
	kcaddr=*) ADDR=${w#kcaddr=} ;;
	kcserver=*) SERVER=${w#kcserver=} ;;
	kcexport=*) EXPORT=${w#kcexport=} ;;
	kcmode=*) MODE=${w#kcmode=} ;;
	kccstate=*) CSTATE=${w#kccstate=} ;;
	esac
done

finish() {
	echo "# kclient: guest done"
	sync
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}

hostname "guest-$ROLE"
echo "127.0.0.1 localhost" >/etc/hosts
echo "$ADDR guest-$ROLE" >>/etc/hosts
ip link set lo up
ip addr add "$ADDR/24" dev eth0
ip link set eth0 up
echo "# kclient: guest $ROLE up at $ADDR, kernel $(uname -r)"

# The client's own portmapper and status monitor: lockd registers its callback service with the
# first and asks the second to monitor the server (SM_MON) before its first lock.
rpcbind -w || echo "not ok - $ROLE: rpcbind starts"
if [ -n "$CSTATE" ]; then
	mount -t nfs -o vers=3,proto=tcp,nolock "$SERVER:$CSTATE/$ROLE" /var/lib/nfs ||
		echo "not ok - $ROLE: the client's state directory is mounted"
	mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak
fi
if [ "$MODE" = reboot ]; then
	# a booting client tells the servers it had locks with that it has rebooted
	sm-notify -f -d >/tmp/sm-notify.log 2>&1 &
	notify=$!
	sleep 3
	ls /var/lib/nfs/sm.bak | grep -q . && echo "not ok - $ROLE: sm-notify notified $SERVER" ||
		echo "ok - $ROLE: sm-notify notified $SERVER after the reset"
	kill "$notify" 2>/dev/null
fi
rpc.statd --no-notify || echo "not ok - $ROLE: rpc.statd starts"
sleep 1

if mount -t nfs -o "vers=3,proto=tcp,noac,lookupcache=none" "$SERVER:$EXPORT" /mnt; then
	echo "ok - $ROLE: mount without nolock"
	guest_lock "$ROLE" /mnt $MODE
	umount /mnt || echo "not ok - $ROLE: umount"
else
	echo "not ok - $ROLE: mount without nolock"
fi
finish
