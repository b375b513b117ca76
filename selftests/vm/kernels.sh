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
