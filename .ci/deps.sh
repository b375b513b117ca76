#!/bin/bash
# Install the Debian packages the project needs when root; otherwise print
# the exact apt-get line.  Called by `make deps` (everything `make check`
# needs) and by `make demo` as `deps.sh demo`: only what building libkvrt and
# the tools takes (measured: every file the build opened, under strace,
# belongs to these packages or to what they depend on), so a newcomer's
# first command does not wait for QEMU, kernel images and Python.
#   deps.sh [demo] [--list]   --list: print the packages, install nothing
set -e
DEMO_PKGS="gcc make libc6-dev libssl-dev"
ALL_PKGS="$DEMO_PKGS clang libclang-rt-14-dev linux-headers-amd64 linux-image-amd64
qemu-system-x86 busybox-static cpio kmod
linux-source-6.1 sparse flex bison bc libelf-dev xz-utils pkgconf
python3 python3-venv python3-pip python3-setuptools python3-numpy"
PKGS=$ALL_PKGS
for a in "$@"; do
	case $a in
	demo) PKGS=$DEMO_PKGS ;;
	--list) list=1 ;;
	*) echo "deps.sh: unknown argument '$a' (usage: deps.sh [demo] [--list])" >&2; exit 2 ;;
	esac
done
if [ -n "${list:-}" ]; then
	echo $PKGS
	exit 0
fi
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
line="apt-get install -y$missing"
if [ "$(id -u)" -ne 0 ]; then
	echo "kvpool needs Debian packages that are not installed. As root, run:" >&2
	echo "  apt-get update && $line" >&2
	exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq $missing
