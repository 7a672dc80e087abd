#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages Shale needs to build, run and test, and only those
# that are missing (checked with dpkg first, so a machine that has them all makes no apt call).
# Usage: scripts/install-deps.sh build|test|bench
set -euo pipefail

build_pkgs=(gcc make pkg-config meson ninja-build libxxhash-dev libssl-dev liburing-dev libzstd-dev liblz4-dev)
test_pkgs=(libnfs-dev libnfs-utils rpcbind nfs-common iproute2 util-linux qemu-system-x86 busybox-static tshark cpio xz-utils zstd gzip
	   libc6-dev python3 clang libclang-rt-14-dev strace e2fsprogs mount)
bench_pkgs=(nfs-ganesha nfs-ganesha-vfs iperf3 fio)

want=("${build_pkgs[@]}")
case "${1:-build}" in
build) ;;
test) want+=("${test_pkgs[@]}") ;;
bench) want+=("${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
*) echo "usage: $0 build|test|bench" >&2; exit 2 ;;
esac

missing=()
for pkg in "${want[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	[[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "installing missing packages: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
	echo "these packages are missing and installing them needs root: ${missing[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer no without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
