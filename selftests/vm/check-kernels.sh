#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# `make check-kmod`: the VM suite (run-vm.sh check) on every kernel the
# module is tested on that this machine has: for each series (6.1, 6.12,
# ...) the newest Debian kernel whose headers (/usr/src/linux-headers-KVER)
# and image (/boot/vmlinuz-KVER) are both installed.  `make deps` installs
# Debian 12's 6.1 and 6.12.  Each kernel gets its own build of kvpool.ko
# (and kvpool_kunit.ko where CONFIG_KUNIT is set) in build/kmod-KVER, from
# a copy of the sources (kbuild writes its objects beside them); a build
# warning fails that kernel.  The suites' "N passed, N failed" lines follow
# one another; make check adds them up.
#
# Environment: KVPOOL_KERNELS="KVER..." tests exactly these; with no kernel
# found, the one the Makefile names (KDIR, KVER) is tested as before.
# KVPOOL_VM_APPEND (see below) and the other knobs of run-vm.sh pass
# through.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { echo "check-kernels: $*"; }

# shellcheck source=selftests/vm/kernels.sh
. "$ROOT/selftests/vm/kernels.sh"

read -r -a kernels <<<"${KVPOOL_KERNELS:-$(kvpool_kernels image | tr '\n' ' ')}"
if [ ${#kernels[@]} -eq 0 ]; then
	say "no kernel with both headers and image under /usr/src and /boot: the Makefile's KDIR ${KDIR:-?}"
	make -s -C "$ROOT" module || { echo "0 passed, 1 failed"; exit 1; }
	exec bash "$ROOT/selftests/vm/run-vm.sh" check
fi
say "kernels: ${kernels[*]}"

# The campaign tests (fuzzing, kill campaigns, stress) are random searches
# whose length is a budget: the first kernel (Debian's default) gets the
# long one, the others the short one the debug lane uses, so that both
# kernels run every test and make check stays within its time.  Setting
# KVPOOL_VM_APPEND gives every kernel that instead.
LONG_RUN="kvpool_fuzz_seconds=60"
SHORT_RUN="kvpool_kills=300 kvpool_fuzz_seconds=30 kvpool_stress_seconds=15 kvpool_reload_cycles=8 kvpool_prefix_kills=200 kvpool_prefix_stress_seconds=10 kvpool_race_rounds=80"
rc=0
times=
first=1
for kver in "${kernels[@]}"; do
	t0=$(date +%s)
	kdir=/usr/src/linux-headers-$kver
	b=$ROOT/build/kmod-$kver
	brc=0
	kvpool_build_module "$ROOT" "$kdir" "$b" || brc=$?
	case $brc in
	1)
		cat "$b/build.log"
		say "FAIL: kvpool.ko did not build against $kver"
		echo "0 passed, 1 failed"
		rc=1
		continue
		;;
	2)
		say "FAIL: building against $kver gave warnings (above)"
		echo "0 passed, 1 failed"
		rc=1
		continue
		;;
	esac
	say "$kver: built $(cd "$b" && ls kmod/*.ko | tr '\n' ' ')"
	if [ -n "$first" ]; then append=$LONG_RUN; else append=$SHORT_RUN; fi
	first=
	say "$kver: campaigns: ${KVPOOL_VM_APPEND-$append}"
	KVER=$kver KDIR=$kdir KVPOOL_VM_MODULE=$b/kmod/kvpool.ko \
		KVPOOL_VM_APPEND=${KVPOOL_VM_APPEND-$append} \
		bash "$ROOT/selftests/vm/run-vm.sh" check || rc=1
	times="$times $kver $(($(date +%s) - t0))s,"
done
say "times:${times%,}"
exit $rc
