# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# modules.sh: kernel modules of the booted kernel for the test VM's
# initramfs, which has no modprobe.  Sourced by run-vm.sh (for hostfs.sh
# and tierfs.sh).

# vm_module_closure KVER NAME...: the .ko files (under /lib/modules/KVER)
# to insmod for NAMEs, dependencies first, each once; modules built into
# the kernel are left out.  Returns 1 and says why on stderr when KVER has
# no modules.dep or neither has nor builds in a NAME.
vm_module_closure() {
	local kver=$1 mdir=/lib/modules/$1 m d rel seen=" " kos=() deps i
	shift
	if [ ! -r "$mdir/modules.dep" ]; then
		echo "no $mdir/modules.dep (linux-image-$kver is not installed)" >&2
		return 1
	fi
	for m in "$@"; do
		rel=$(grep -E "^([^:]*/)?$m\.ko(\.[a-z]+)?:" "$mdir/modules.dep" || true)
		if [ -z "$rel" ]; then
			grep -qE "/$m\.ko\$" "$mdir/modules.builtin" 2>/dev/null && continue
			echo "$kver has no module $m (modules.dep) and does not build it in" >&2
			return 1
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
	[ ${#kos[@]} = 0 ] || printf '%s\n' "${kos[@]}"
}

# vm_modules_copy DIR: the .ko files listed on stdin, decompressed into DIR
# and numbered in load order (NN-name.ko), for the guest to insmod in turn.
vm_modules_copy() {
	local dir=$1 n=0 f base
	mkdir -p "$dir"
	while IFS= read -r f; do
		[ -n "$f" ] || continue
		n=$((n + 1))
		base=$(printf '%02d-%s' "$n" "$(basename "${f%%.ko*}").ko")
		case $f in
		*.xz) xz -dc "$f" >"$dir/$base" ;;
		*.zst) zstd -qdc "$f" >"$dir/$base" ;;
		*.gz) gzip -dc "$f" >"$dir/$base" ;;
		*) cp "$f" "$dir/$base" ;;
		esac
	done
}
