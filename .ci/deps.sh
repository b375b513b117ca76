#!/bin/bash
# Install the Debian packages the project needs when root; otherwise print
# the exact apt-get line.  Called by `make deps` (everything `make check`
# needs) and by `make demo` as `deps.sh demo`: only what building libkvrt and
# the tools takes (measured: every file the build opened, under strace,
# belongs to these packages or to what they depend on), so a newcomer's
# first command does not wait for QEMU, kernel images and Python.
#   deps.sh [demo] [--list]   --list: print the packages, install nothing
set -e
DEMO_PKGS="gcc make libc6-dev libssl-dev liburing-dev libxxhash-dev libhiredis-dev"
ALL_PKGS="$DEMO_PKGS clang libclang-rt-14-dev linux-headers-amd64 linux-image-amd64
qemu-system-x86 busybox-static cpio kmod rsync dkms
linux-source-6.1 sparse flex bison bc libelf-dev xz-utils pkgconf
python3 python3-venv python3-pip python3-setuptools python3-numpy python3-pytest pyflakes3 mypy fio
redis-server redis-tools"
# Debian 12's second kernel, 6.12 (in its own archive, with no
# metapackage): the VM suite runs on it too (selftests/vm/check-kernels.sh).
# An installed 6.12 with its headers will do; else the newest the archive
# has, named after apt-get update has read the archive.
have_612() {
	local v
	for v in /boot/vmlinuz-6.12.*+deb12-amd64; do
		v=${v#/boot/vmlinuz-}
		[ -f "/usr/src/linux-headers-$v/Makefile" ] && return 0
	done
	return 1
}
newest_612() {
	local v
	v=$(apt-cache pkgnames linux-image-6.12. 2>/dev/null |
		grep -E '^linux-image-6\.12\.[0-9]+\+deb12-amd64$' | sort -V | tail -n1)
	v=${v#linux-image-}
	[ -n "$v" ] && echo "linux-image-$v linux-headers-$v"
}
PKGS=$ALL_PKGS
want_612=1
for a in "$@"; do
	case $a in
	demo) PKGS=$DEMO_PKGS; want_612= ;;
	--list) list=1 ;;
	*) echo "deps.sh: unknown argument '$a' (usage: deps.sh [demo] [--list])" >&2; exit 2 ;;
	esac
done
if [ -n "${list:-}" ]; then
	echo $PKGS${want_612:+ linux-image-6.12.*+deb12-amd64 linux-headers-6.12.*+deb12-amd64}
	exit 0
fi
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -n "$want_612" ] && ! have_612 && k612=1
[ -z "$missing" ] && [ -z "${k612:-}" ] && exit 0
line="apt-get install -y$missing${k612:+ $(newest_612 || echo 'linux-image-6.12.N+deb12-amd64 linux-headers-6.12.N+deb12-amd64')}"
if [ "$(id -u)" -ne 0 ]; then
	echo "kvpool needs Debian packages that are not installed. As root, run:" >&2
	echo "  apt-get update && $line" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ -n "${k612:-}" ]; then
	k=$(newest_612) || { echo "deps.sh: Debian's archive has no linux-image-6.12.*+deb12-amd64" >&2; exit 1; }
	missing="$missing $k"
fi
echo "installing:$missing"
apt-get install -y -qq $missing
