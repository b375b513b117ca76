#!/bin/sh
# SPDX-License-Identifier: MIT
#
# host-run CMD [ARG...]: run a HOST program in the test VM (busybox sh).
#
# run-vm.sh (hostfs.sh) exports the host's / read-only over 9p with the tag
# "hostroot" and puts its modules in /hostfs.  The first call loads them and
# mounts the export at /host, with the guest's /dev bound over /host/dev
# (so /dev/kvpool is there), a fresh proc and sysfs, and tmpfs on the dirs
# a program may write (/tmp, /var/tmp, /run, /dev/shm; a source tree under
# one of them, KVPOOL_HOST_ROOT, stays visible).  Then CMD runs
# chrooted in /host with a clean environment; arguments VAR=value before
# CMD are added to it, as env(1) does.  The exit status is CMD's, or 125
# when /host cannot be set up.

H=/host

hostrun_fail() {
	echo "host-run: $*" >&2
	exit 125
}

hostrun_setup() {
	grep -q " $H 9p " /proc/mounts && return 0
	[ -d /hostfs ] || hostrun_fail "no /hostfs: the VM was booted without hostfs (run-vm.sh enables it for the tests of selftests/vm/host-tests, or KVPOOL_VM_HOSTFS=1)"
	for m in /hostfs/*.ko; do
		[ -e "$m" ] || continue
		n=${m##*/[0-9][0-9]-}
		[ -d "/sys/module/${n%.ko}" ] && continue
		insmod "$m" || hostrun_fail "insmod $m failed"
	done
	mkdir -p "$H"
	# The export is read-only, so cache=loose cannot serve stale data; it
	# saves most of the 9p round trips of a Python start.
	mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=524288 hostroot "$H" ||
		hostrun_fail "mount -t 9p hostroot $H failed (is QEMU's -virtfs there?)"
	[ -x "$H/bin/sh" ] || hostrun_fail "$H has no /bin/sh: the export is not the host's root"
	mount -o bind /dev "$H/dev" || hostrun_fail "bind /dev"
	mount -t tmpfs -o mode=1777 tmpfs "$H/dev/shm" || hostrun_fail "tmpfs on $H/dev/shm"
	mount -t proc proc "$H/proc" || hostrun_fail "proc on $H/proc"
	mount -t sysfs sysfs "$H/sys" || hostrun_fail "sysfs on $H/sys"
	# A checkout under one of these (a clone in /tmp) must stay visible
	# through the fresh tmpfs: bind it back at its own path.
	root=
	# shellcheck disable=SC1091
	[ -r /etc/kvpool-vm.conf ] && . /etc/kvpool-vm.conf && root=${KVPOOL_HOST_ROOT:-}
	for d in tmp var/tmp run; do
		[ -d "$H/$d" ] || continue
		keep=
		case $root in "/$d/"*)
			keep=/hostrun-keep
			mkdir -p "$keep" && mount -o bind "$H$root" "$keep" ||
				hostrun_fail "bind $root aside" ;;
		esac
		mount -t tmpfs -o mode=1777 tmpfs "$H/$d" || hostrun_fail "tmpfs on $H/$d"
		if [ -n "$keep" ]; then
			mkdir -p "$H$root" && mount -o bind "$keep" "$H$root" ||
				hostrun_fail "bind $root back over the tmpfs on /$d"
			umount "$keep"
		fi
	done
}

[ $# -gt 0 ] || hostrun_fail "usage: host-run [VAR=value...] CMD [ARG...]"
hostrun_setup
exec chroot "$H" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
	HOME=/tmp TMPDIR=/tmp LANG=C.UTF-8 TERM=dumb PYTHONDONTWRITEBYTECODE=1 "$@"
