#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# `make check-debug`: the VM suite on a debug kernel.
#
#  1. build-kernel.sh builds (once; then cached outside the repository) a
#     tinyconfig kernel from Debian's linux-source-6.1 with KASAN, lockdep,
#     kmemleak, UBSAN, KUnit and fault injection (kvpool-debug.config);
#  2. kvpool.ko and the KUnit module kvpool_kunit.ko are built against it in
#     a build directory next to the cached kernel (kbuild writes its objects
#     beside the sources, so the sources are copied there first);
#  3. selftests/vm/run-vm.sh check boots it: KUnit suites of kvcore, every
#     selftest, the debugfs check after each, rmmod, a kmemleak scan and a
#     dmesg scan for KASAN/UBSAN/lockdep/BUG/WARNING splats.
#
# The last line is run-vm.sh's "N passed, N failed", or "0 passed, 1 failed"
# when it never got that far.
#
# Environment: KVPOOL_CACHE, KVPOOL_DEBUG_JOBS (see build-kernel.sh);
# KVPOOL_DEBUG_BOOTS ("check faults": which boots run), KVPOOL_TESTS,
# KVPOOL_VM_MODARGS, KVPOOL_VM_APPEND, KVPOOL_VM_KEEP and the
# other knobs of run-vm.sh pass through.  KVPOOL_DEBUG_SRC=dir builds the
# module from dir (a tree with Kbuild, kmod/ and include/) instead of this
# checkout: a scratch copy with a planted bug shows that the lane catches it.
# Timeouts under the debug kernel (TCG, KASAN) default to
# KVPOOL_VM_TIMEOUT=1500 for the whole VM and KVPOOL_VM_TEST_TIMEOUT=400
# per test binary (KVPOOL_VM_FAULTS_TEST_TIMEOUT=1200 for fault_inject).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/selftests/debug
SRC=${KVPOOL_DEBUG_SRC:-$ROOT}
t0=$(date +%s)

say() { echo "check-debug: $*"; }
fail() {
	echo "check-debug: FAIL: $*" >&2
	echo "0 passed, 1 failed"
	exit 1
}

# --- 1. the kernel -----------------------------------------------------------

tk=$(date +%s)
TREE=$(bash "$HERE/build-kernel.sh" | tail -n1) || fail "the debug kernel did not build"
[ -d "$TREE" ] || fail "build-kernel.sh printed no tree"
RELEASE=$(cat "$TREE/include/config/kernel.release")
IMAGE=$TREE/arch/x86/boot/bzImage
say "kernel $RELEASE: $IMAGE ($(($(date +%s) - tk))s)"

# --- 2. the modules -------------------------------------------------------------

BUILD=$(dirname "$TREE")/kvpool-build
for p in Kbuild kmod/Kbuild include/uapi/linux/kvpool.h; do
	[ -f "$SRC/$p" ] || fail "$SRC has no $p"
done
tm=$(date +%s)
# shellcheck source=selftests/vm/kernels.sh
. "$ROOT/selftests/vm/kernels.sh"
brc=0
KVPOOL_BUILD_JOBS=${KVPOOL_DEBUG_JOBS:-$(nproc)} kvpool_build_module "$SRC" "$TREE" "$BUILD" || brc=$?
case $brc in
1)
	cat "$BUILD/build.log" >&2
	fail "kvpool.ko did not build against $RELEASE (log: $BUILD/build.log)"
	;;
2) fail "building against $RELEASE gave warnings (above)" ;;
esac
for ko in kvpool kvpool_kunit; do
	[ -f "$BUILD/kmod/$ko.ko" ] || fail "no $ko.ko after the build (log: $BUILD/build.log)"
done
say "built kvpool.ko and kvpool_kunit.ko in $BUILD ($(($(date +%s) - tm))s)"

# --- 3. the selftests in the VM ----------------------------------------------------

make -s -C "$ROOT/selftests/kvpool" || fail "the selftests did not build"

export KDIR=$TREE KVER=$RELEASE
export KVPOOL_VM_KERNEL=$IMAGE
export KVPOOL_VM_MODULE=$BUILD/kmod/kvpool.ko
export KVPOOL_VM_KUNIT=$BUILD/kmod/kvpool_kunit.ko
export KVPOOL_VM_TIMEOUT=${KVPOOL_VM_TIMEOUT:-1500}
export KVPOOL_VM_TEST_TIMEOUT=${KVPOOL_VM_TEST_TIMEOUT:-400}
# The kernel has no PVH entry (see kvpool-debug.config): boot the bzImage.
export KVPOOL_VM_PVH=0
# CONFIG_GUP_TEST is here: pin the mapping with FOLL_LONGTERM as CUDA does.
export KVPOOL_VM_DEBUG_TESTS=1
# The host tests (selftests/vm/host-tests) mount the host over 9p, and this
# kernel has no 9p: check-kmod runs them.
export KVPOOL_VM_HOST_TESTS=0
# The campaign tests are sized for Debian's kernel; under KASAN and lockdep
# in TCG everything runs 3-5 times slower, so the lane runs them shorter
# (a 1000-kill campaign took 262 s of its 280 s limit; 300 kills 158 s).
# The regular lane (check-kmod) runs them at full length; this one is for
# what KASAN, lockdep and kmemleak see on each path, which a shorter run
# still walks.  Setting KVPOOL_VM_APPEND replaces these.
export KVPOOL_VM_APPEND=${KVPOOL_VM_APPEND-kvpool_kills=150 kvpool_fuzz_seconds=30 kvpool_stress_seconds=15 kvpool_reload_cycles=8 kvpool_prefix_kills=200 kvpool_prefix_stress_seconds=10 kvpool_index_spaces=300 kvpool_race_rounds=80}
# KVPOOL_DEBUG_BOOTS: which boots run, "check faults" by default.
BOOTS=" ${KVPOOL_DEBUG_BOOTS:-check faults} "
tv=$(date +%s)
rc=0
if [[ $BOOTS == *" check "* ]]; then
	bash "$ROOT/selftests/vm/run-vm.sh" check || rc=$?
	say "VM suite on $RELEASE: $(($(date +%s) - tv))s"
fi
# Fault injection gets a boot of its own: its deliberate allocation failures
# dump stacks that the suite's splat scan would rightly refuse.
# Its sweep alone is one binary: ALLOC of 4096 blocks took 204-233 s of it
# on a loaded machine once allocations were memcg-accounted (more fault
# points), so it gets 1200 s where a suite's binary gets 400.
tf=$(date +%s)
if [[ $BOOTS == *" faults "* ]]; then
	KVPOOL_VM_TEST_TIMEOUT=${KVPOOL_VM_FAULTS_TEST_TIMEOUT:-1200} \
		bash "$ROOT/selftests/vm/run-vm.sh" faults || rc=$?
	say "fault injection on $RELEASE: $(($(date +%s) - tf))s"
fi
say "lane total $(($(date +%s) - t0))s"
exit $rc
