# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# tierfs: an ext4 file system in the test VM for libkvrt's SSD tier, whose
# O_DIRECT reads and writes must go from a block device's file straight to
# the module's pages (through get_user_pages on the space's mapping).  The
# guest's /tmp is tmpfs, which takes O_DIRECT only from 6.6, and there as a
# copy through the page cache: it tests nothing of that path.
#
# Sourced by run-vm.sh (after modules.sh).  The initramfs gets ext4 and
# what it needs, and a small ext4 image made here; guest-init.sh attaches
# it to a loop device, mounts it at /tierfs and exports KVRT_TIER_DIR.

TIERFS_MB=16

# tierfs_install ROOT: 0 when the image and modules are in the initramfs;
# else 1, with why on stdout (the tests that need it then skip, saying so).
tierfs_install() {
	local r=$1 list
	command -v mkfs.ext4 >/dev/null || { echo "no mkfs.ext4 here (e2fsprogs)"; return 1; }
	# ext4 asks the crypto API for crc32c by name at every mount, and no
	# modules.dep line says so: crc32c_generic goes first.
	list=$(vm_module_closure "$KVER" crc32c_generic ext4 2>&1) || { echo "$list"; return 1; }
	printf '%s\n' "$list" | vm_modules_copy "$r/tierfs"
	truncate -s "${TIERFS_MB}M" "$r/tierfs.img"
	mkfs.ext4 -q -F "$r/tierfs.img" >/dev/null 2>&1 ||
		{ echo "mkfs.ext4 failed"; return 1; }
}
