# SPDX-License-Identifier: GPL-2.0
# Sourced by check-kernels.sh and selftests/lint/lint.sh: which installed
# kernels the module is built and tested against.
#
# kvpool_kernels [image]: for each series (6.1, 6.12, ...) the newest kernel
# release whose headers are in /usr/src/linux-headers-KVER (and, with
# "image", whose image is /boot/vmlinuz-KVER), oldest series first, one a
# line.  Flavours other than the plain one (-cloud, -rt) are left out: the
# VM boots the plain image, and the headers are the same code.
kvpool_kernels() {
	local d v
	for d in /usr/src/linux-headers-*; do
		v=${d#/usr/src/linux-headers-}
		case $v in *-common | *-common-rt | *-cloud-amd64 | *-rt-amd64 | '*') continue ;; esac
		[ -f "$d/Makefile" ] || continue
		[ "${1:-}" != image ] || [ -f "/boot/vmlinuz-$v" ] || continue
		echo "$v"
	done | sort -V | awk '{
		split($0, a, "."); s = a[1] "." a[2]
		last[s] = $0
		if (!(s in seen)) { seen[s] = 1; order[++n] = s }
	} END { for (i = 1; i <= n; i++) print last[order[i]] }'
}

# kvpool_build_module SRC KDIR BUILD: kvpool.ko (and kvpool_kunit.ko where
# CONFIG_KUNIT is set) built against KDIR in BUILD/kmod, from a copy of
# SRC's sources (kbuild writes its objects beside them); the log is
# BUILD/build.log.  Only the sources are copied: objects built for another
# kernel must not come along, and objects already built there stay; a file
# whose contents changed is written anew (no -t: it gets the time of the
# copy, newer than its object), so kbuild rebuilds exactly what changed.
# A source tree built in place for another kernel holds kbuild's generated
# kvpool.mod.c: it must not come along (6.12's has no vermagic, and a 6.1
# module linked with it is an "invalid module format").
# Returns 0; 1 when the build failed; 2 when it gave warnings (printed).
kvpool_build_module() {
	local src=$1 kdir=$2 b=$3
	mkdir -p "$b"
	if command -v rsync >/dev/null; then
		rsync -rc --delete --exclude='*.mod.c' --include='*/' --include='*.[ch]' \
			--include=Kbuild --exclude='*' "$src/Kbuild" "$src/kmod" "$src/include" "$b/"
	else
		rm -rf "$b"
		mkdir -p "$b"
		(cd "$src" && find Kbuild kmod include \( -name '*.[ch]' -o -name Kbuild \) \
			! -name '*.mod.c' -print0 |
			cpio -0pdm --quiet "$b")
	fi
	make -C "$kdir" M="$b" -j"${KVPOOL_BUILD_JOBS:-$(nproc)}" modules >"$b/build.log" 2>&1 ||
		return 1
	! grep -E 'warning:|WARNING:' "$b/build.log" || return 2
}
