#!/bin/bash
# prepare.sh: builds the guest image for the kernel-client test: Debian's cloud kernel plus an
# initramfs holding busybox, the NFS client modules, an /init script and the test programs.
#
# Usage: prepare.sh CACHE_DIR [OUT_DIR INIT_SCRIPT [PROGRAM...]]
#
#   CACHE_DIR    where the downloaded kernel package and the base initramfs are kept between runs
#                (build-cache/kclient under the source tree, git-ignored). Idempotent: a second run
#                with the same newest kernel version reuses everything.
#   OUT_DIR      when given, receives vmlinuz and initrd.img: the cached base archive followed by a
#                second cpio archive with INIT_SCRIPT as /init and each PROGRAM in /bin. The kernel
#                unpacks concatenated archives in order, so the programs never force a rebuild of
#                the (slow to build) module part.
#
# With KCLIENT_EXTRA_ROOT=DIR in the environment, the tree under DIR is also copied into the second
# archive (run-kclient-lock.sh: rpcbind and rpc.statd with their libraries and configuration).
#
# The base archive holds: /bin/busybox (static) and a link for each applet, the modules listed in
# MODULES below together with everything modules.dep says they need (decompressed, because
# busybox insmod loads only plain ELF objects), and /etc/kclient-modules, the load order.
# Modules the kernel has built in (modules.builtin) are skipped. Prints progress on stderr only.
set -euo pipefail

MODULES="virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover
net_failover virtio_net sunrpc grace nfs_acl lockd netfs fscache nfs nfsv3"

say() { echo "prepare: $*" >&2; }
die() { echo "prepare: error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: prepare.sh CACHE_DIR [OUT_DIR INIT_SCRIPT [PROGRAM...]]"
CACHE=$1
shift
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

# Host tools, installed from Debian only when dpkg says they are missing.
need_pkgs=()
for p in qemu-system-x86 busybox-static cpio kmod xz-utils; do
	dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
	say "installing ${need_pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >&2 ||
		die "apt-get install ${need_pkgs[*]} failed"
fi

# The newest versioned cloud kernel apt knows. Package names sort by kernel version under sort -V
# (6.1.0-57 < 6.12.117+deb12). Without apt data, fall back to what the cache already holds.
pkg=$(apt-cache pkgnames linux-image- 2>/dev/null |
	grep -E '^linux-image-[0-9][^ ]*-cloud-amd64-unsigned$' | sort -V | tail -n 1 || true)
if [ -z "$pkg" ] && [ -f "$CACHE/package" ]; then
	pkg=$(cat "$CACHE/package")
	say "apt-cache offers no cloud kernel; using cached $pkg"
fi
[ -n "$pkg" ] || die "no linux-image-*-cloud-amd64-unsigned package known to apt-cache"

base="$CACHE/base.cpio.gz"
if [ -f "$CACHE/package" ] && [ "$(cat "$CACHE/package")" = "$pkg" ] && [ -f "$base" ] &&
	[ -f "$CACHE/vmlinuz" ]; then
	say "cached: $pkg"
else
	say "building base image from $pkg"
	rm -rf "$CACHE/deb" "$CACHE/root" "$CACHE"/*.deb "$base" "$CACHE/vmlinuz" "$CACHE/package"
	(cd "$CACHE" && apt-get download -q "$pkg") >&2 || die "apt-get download $pkg failed"
	deb=$(ls "$CACHE"/*.deb | head -n 1)
	dpkg -x "$deb" "$CACHE/deb"
	kver=$(ls "$CACHE/deb/lib/modules" | head -n 1)
	[ -n "$kver" ] || die "no modules directory in $deb"
	moddir="$CACHE/deb/lib/modules/$kver"
	cp "$CACHE/deb/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
	# The package ships no modules.dep (depmod runs at install time): generate it here.
	[ -f "$moddir/modules.dep" ] || depmod -b "$CACHE/deb" "$kver"

	root="$CACHE/root"
	mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,mnt,tmp,etc,lib/modules,root}
	cp /bin/busybox "$root/bin/busybox"
	for applet in $("$root/bin/busybox" --list-full); do
		[ "$applet" = bin/busybox ] && continue
		mkdir -p "$root/$(dirname "$applet")"
		ln -sf /bin/busybox "$root/$applet"
	done

	# Resolve dependencies depth first so every module follows the ones it needs.
	declare -A seen=()
	order=()
	resolve() { # $1: path relative to $moddir, as modules.dep writes it
		local rel=$1 deps d
		[ -n "${seen[$rel]:-}" ] && return 0
		seen[$rel]=1
		deps=$(grep -E "^${rel//./\\.}:" "$moddir/modules.dep" | cut -d: -f2-)
		for d in $deps; do resolve "$d"; done
		order+=("$rel")
	}
	for m in $MODULES; do
		pat="/${m}\\.ko(\\.xz|\\.zst|\\.gz)?"
		if grep -Eq "${pat}\$" "$moddir/modules.builtin"; then
			say "$m: built in"
			continue
		fi
		rel=$(grep -Eo "^[^:]*${pat}:" "$moddir/modules.dep" | head -n 1 | tr -d : || true)
		if [ -z "$rel" ]; then
			# fscache became part of netfs in 6.x kernels; other absences are errors.
			if [ "$m" = fscache ]; then
				say "$m: not a separate module in $kver"
				continue
			fi
			die "module $m is neither built in nor in modules.dep of $kver"
		fi
		resolve "$rel"
	done
	: >"$root/etc/kclient-modules"
	for rel in "${order[@]}"; do
		name=$(basename "$rel")
		name=${name%.xz}; name=${name%.zst}; name=${name%.gz}
		case "$rel" in
		*.xz) xz -dc "$moddir/$rel" >"$root/lib/modules/$name" ;;
		*.zst) zstd -qdc "$moddir/$rel" >"$root/lib/modules/$name" ;;
		*.gz) gzip -dc "$moddir/$rel" >"$root/lib/modules/$name" ;;
		*) cp "$moddir/$rel" "$root/lib/modules/$name" ;;
		esac
		echo "${name%.ko}" >>"$root/etc/kclient-modules"
	done
	say "modules: $(tr '\n' ' ' <"$root/etc/kclient-modules")"
	(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) |
		gzip -6 >"$base.tmp"
	mv "$base.tmp" "$base"
	rm -rf "$CACHE/deb" "$root" "$deb"
	echo "$pkg" >"$CACHE/package"
	say "base image ready: $base"
fi

[ $# -ge 1 ] || exit 0
[ $# -ge 2 ] || die "OUT_DIR needs INIT_SCRIPT"
OUT=$1
INIT=$2
shift 2
mkdir -p "$OUT"
overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
mkdir -p "$overlay/bin"
install -m 0755 "$INIT" "$overlay/init"
for prog in "$@"; do
	install -m 0755 "$prog" "$overlay/bin/$(basename "$prog")"
done
if [ -n "${KCLIENT_EXTRA_ROOT:-}" ]; then
	cp -a "$KCLIENT_EXTRA_ROOT/." "$overlay/"
fi
(cd "$overlay" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) |
	gzip -1 >"$OUT/overlay.cpio.gz"
cat "$base" "$OUT/overlay.cpio.gz" >"$OUT/initrd.img"
rm -f "$OUT/overlay.cpio.gz"
cp "$CACHE/vmlinuz" "$OUT/vmlinuz"
say "image ready: $OUT/vmlinuz $OUT/initrd.img"
