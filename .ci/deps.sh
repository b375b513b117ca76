#!/bin/bash
# Install the Debian packages the project needs when root; otherwise print
# the exact apt-get line.  Called by `make deps`, `make check`, `make demo`.
set -e
PKGS="gcc make libc6-dev clang libclang-rt-14-dev linux-headers-amd64 linux-image-amd64
qemu-system-x86 busybox-static cpio kmod
linux-source-6.1 sparse flex bison bc libelf-dev libssl-dev xz-utils pkgconf
python3 python3-venv python3-pip python3-setuptools python3-numpy"
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
