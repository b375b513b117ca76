# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# hostfs: run HOST programs (python3, a venv, ...) in the test VM.
#
# Sourced by run-vm.sh (after modules.sh).  The host's / is exported
# read-only over 9p (virtio-9p-pci, no daemon needed); the initramfs gets
# the 9p and virtio modules of the booted kernel and /bin/host-run
# (guest-hostrun.sh), which mounts the export at /host on first use and
# runs its arguments chrooted there, with /dev (so /dev/kvpool), /proc,
# /sys and tmpfs on /tmp.
#
# Opt-in: only a run that selects a test of selftests/vm/host-tests/ (or
# sets KVPOOL_VM_HOSTFS=1) pays for the device and the modules.

# Modules to load, each after the ones it needs; 9pnet_virtio pulls virtio.
HOSTFS_WANT="virtio_pci 9pnet_virtio 9p"

# Put the modules of the booted kernel (modules.sh) and host-run into the
# initramfs rooted at $1.
hostfs_install() {	# initramfs-root
	local r=$1 list
	# shellcheck disable=SC2086	# a list of names, split on purpose
	list=$(vm_module_closure "$KVER" $HOSTFS_WANT) ||
		die "hostfs: the guest cannot mount the host over 9p (see above): install linux-image-$KVER (its 9p and virtio modules), or leave out the tests of selftests/vm/host-tests"
	printf '%s\n' "$list" | vm_modules_copy "$r/hostfs"
	install -m 755 "$VMDIR/guest-hostrun.sh" "$r/bin/host-run"
}

# QEMU arguments of the export.  multidevs=remap keeps inode numbers unique
# across the host's mounts (/work, /dev/shm, ...) that the export crosses.
hostfs_qemu_args() {
	echo "-virtfs"
	echo "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
}
