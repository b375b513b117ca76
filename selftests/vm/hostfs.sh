# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# hostfs: run HOST programs (python3, a venv, ...) in the test VM.
#
# Sourced by run-vm.sh.  The host's / is exported read-only over 9p
# (virtio-9p-pci, no daemon needed); the initramfs gets the 9p and virtio
# modules of the booted kernel and /bin/host-run (guest-hostrun.sh), which
# mounts the export at /host on first use and runs its arguments chrooted
# there, with /dev (so /dev/kvpool), /proc, /sys and tmpfs on /tmp.
#
# Opt-in: only a run that selects a test of selftests/vm/host-tests/ (or
# sets KVPOOL_VM_HOSTFS=1) pays for the device and the modules.

# Modules to load, each after the ones it needs; 9pnet_virtio pulls virtio.
HOSTFS_WANT="virtio_pci 9pnet_virtio 9p"

# Print the .ko files (paths under /lib/modules/$KVER) that the guest must
# insmod, dependencies first; modules built into the kernel are left out.
hostfs_modules() {
	local mdir=/lib/modules/$KVER m d rel seen=" " kos=() deps i
	[ -r "$mdir/modules.dep" ] || die "hostfs: no $mdir/modules.dep: install linux-image-$KVER (its 9p and virtio modules), or leave out the tests of selftests/vm/host-tests"
	for m in $HOSTFS_WANT; do
		rel=$(grep -E "^([^:]*/)?$m\.ko(\.[a-z]+)?:" "$mdir/modules.dep" || true)
		if [ -z "$rel" ]; then
			grep -qE "/$m\.ko\$" "$mdir/modules.builtin" 2>/dev/null && continue
			die "hostfs: $KVER has no module $m (modules.dep) and does not build it in: the guest cannot mount the host over 9p"
		fi
		# modules.dep lists the whole closure; loaded last to first, each
		# module finds what it needs already there.
		read -ra deps <<<"${rel#*:}"
		for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
			d=${deps[i]}
			case $seen in *" $d "*) continue ;; esac
			seen="$seen$d "
			kos+=("$mdir/$d")
		done
		d=${rel%%:*}
		case $seen in *" $d "*) continue ;; esac
		seen="$seen$d "
		kos+=("$mdir/$d")
	done
	printf '%s\n' "${kos[@]}"
}

# Put the modules (decompressed, numbered in load order) and host-run into
# the initramfs rooted at $1.
hostfs_install() {	# initramfs-root
	local r=$1 n=0 f base
	mkdir -p "$r/hostfs"
	while IFS= read -r f; do
		[ -n "$f" ] || continue
		n=$((n + 1))
		base=$(printf '%02d-%s' "$n" "$(basename "${f%%.ko*}").ko")
		case $f in
		*.xz) xz -dc "$f" >"$r/hostfs/$base" ;;
		*.zst) zstd -qdc "$f" >"$r/hostfs/$base" ;;
		*.gz) gzip -dc "$f" >"$r/hostfs/$base" ;;
		*) cp "$f" "$r/hostfs/$base" ;;
		esac
	done < <(hostfs_modules)
	install -m 755 "$VMDIR/guest-hostrun.sh" "$r/bin/host-run"
}

# QEMU arguments of the export.  multidevs=remap keeps inode numbers unique
# across the host's mounts (/work, /dev/shm, ...) that the export crosses.
hostfs_qemu_args() {
	echo "-virtfs"
	echo "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
}
