#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot Debian's linux-image (or the debug kernel of `make check-debug`) in
# QEMU (2 vCPUs, 2 NUMA nodes) with a busybox initramfs that holds kvpool.ko,
# loop.ko (unless the loop driver is built in), kvpool_kunit.ko where it was
# built, the static selftests and the tools, and run one of:
#
#   run-vm.sh check   selftests, accounting check after each, dmesg scan, rmmod
#   run-vm.sh demo    tools/kvpool-demo, then the sysfs and debugfs files
#   run-vm.sh bench   kvbench pool --json; lines go to bench/results/
#   run-vm.sh accel   only print the accelerator that would be used
#   run-vm.sh exec 'CMD'   run the shell command CMD in the guest (busybox sh,
#                     module loaded, hostfs on: 'host-run python3 ...' runs
#                     the host's programs); its exit status is the result
#
# check runs the static selftests of selftests/kvpool and the host tests of
# selftests/vm/host-tests: guest scripts that run host programs (python3)
# through host-run, which needs the host's / exported to the guest (hostfs.sh).
#
# The console streams to stdout.  The exit status is the guest's verdict
# (its "KVPOOL-VM-RESULT: rc" line), or 1 when the guest never printed one.
#
# Environment:
#   KVER, KDIR               kernel release / headers (exported by the Makefile)
#   KVPOOL_VM_KERNEL         kernel image (default /boot/vmlinuz-$KVER)
#   KVPOOL_VM_ACCEL          auto (default), kvm or tcg
#   KVPOOL_VM_TIMEOUT        seconds before the VM is killed (default 900)
#   KVPOOL_VM_TEST_TIMEOUT   seconds per selftest binary in the guest (300)
#   KVPOOL_VM_MODARGS        insmod arguments (default pool_mb_per_node=64)
#   KVPOOL_VM_MODULE         module to load (default kmod/kvpool.ko)
#   KVPOOL_VM_KUNIT          KUnit module to load and check in check mode
#                            (default: kvpool_kunit.ko beside the module, when
#                            built: only against a kernel with CONFIG_KUNIT)
#   KVPOOL_VM_TESTDIR        where the *_test binaries are (selftests/kvpool)
#   KVPOOL_VM_DEMO, KVPOOL_VM_KVBENCH   the tool binaries (tools/*/); every
#                            static tools/NAME/NAME is also in the guest's /bin
#   KVPOOL_TESTS             run only these tests (names of selftests/kvpool or
#                            selftests/vm/host-tests, space-separated)
#   KVPOOL_VM_HOST_TESTS=0   leave the host tests out of the default set (a
#                            kernel without 9p modules: the debug lane)
#   KVPOOL_VM_HOSTFS=1       export the host's / even when no host test runs
#   KVPOOL_VM_MEM_MB         guest memory, split over its 2 nodes (default 2048)
#   KVPOOL_VM_DEBUG_TESTS=1  also run the *_dbgtest binaries (debug kernel only)
#   KVPOOL_VM_VLLM_PYTHON    python of the pinned vLLM venv, for the engine host
#                            tests (*_engtest: never in the default set; see
#                            check-engines-vm.sh)
#   KVPOOL_VM_VLLM_CACHE     a VLLM_CACHE_ROOT on the host whose model-info
#                            cache the guest starts from (check-engines-vm.sh)
#   KVPOOL_VM_SGLANG_PYTHON  python of the pinned SGLang venv, for the same
#   KVPOOL_VM_SGLANG_CACHE   a TORCH_EXTENSIONS_DIR on the host holding SGLang's
#                            built hash extension, for the guest to start from
#   KVPOOL_VM_APPEND         extra kernel command line
#   KVPOOL_VM_KEEP=1         keep the work directory (initramfs, console log)

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VMDIR=$ROOT/selftests/vm
MODE=${1:-}

die() {
	echo "run-vm: error: $*" >&2
	exit 1
}
say() { echo "run-vm: $*"; }

case $MODE in
check | faults | demo | bench | accel) ;;
exec) [ -n "${2:-}" ] || die "usage: $0 exec 'shell command run in the guest'" ;;
*) die "usage: $0 check|faults|demo|bench|accel|exec CMD" ;;
esac
# shellcheck source=selftests/vm/modules.sh
. "$VMDIR/modules.sh"
# shellcheck source=selftests/vm/hostfs.sh
. "$VMDIR/hostfs.sh"
# shellcheck source=selftests/vm/tierfs.sh
. "$VMDIR/tierfs.sh"

# --- what to boot ------------------------------------------------------------

MODULE=${KVPOOL_VM_MODULE:-$ROOT/kmod/kvpool.ko}

# The release to boot must be the one the module was built for.  Candidates,
# in order: the module's vermagic, $KVER, the UTS_RELEASE of $KDIR's headers,
# the newest Debian headers.  ($KDIR/include/config/kernel.release is no
# help: Debian's says 6.1.192 where the kernel is 6.1.0-56-amd64.)
modver=
if [ -f "$MODULE" ]; then
	modver=$(LC_ALL=C strings "$MODULE" 2>/dev/null | grep -a '^vermagic=' || true)
	modver=${modver%%$'\n'*}
	modver=${modver#vermagic=}
	modver=${modver%% *}
fi
kver_candidates() {
	[ -z "$modver" ] || echo "$modver"
	[ -z "${KVER:-}" ] || echo "$KVER"
	if [ -n "${KDIR:-}" ]; then
		sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' "$KDIR/include/generated/utsrelease.h" 2>/dev/null || true
	fi
	local h
	h=$(printf '%s\n' /usr/src/linux-headers-*-amd64 | sort -V | tail -n1)
	[ ! -d "$h" ] || echo "${h#/usr/src/linux-headers-}"
}
if [ -n "${KVPOOL_VM_KERNEL:-}" ]; then
	KIMG=$KVPOOL_VM_KERNEL
	KVER=${KVER:-$modver}
else
	mapfile -t cands < <(kver_candidates)
	[ ${#cands[@]} -gt 0 ] || die "no kernel release: build the module ('make module') or set KVER; 'make deps' installs linux-headers-amd64"
	want=${cands[0]}
	for c in "${cands[@]}"; do
		if [ -r "/boot/vmlinuz-$c" ]; then
			[ "$c" = "${KVER:-$c}" ] || say "note: no /boot/vmlinuz-$KVER; booting $c"
			KVER=$c
			break
		fi
	done
	KIMG=/boot/vmlinuz-$KVER
	[ -r "$KIMG" ] || die "kernel image /boot/vmlinuz-$want missing or unreadable: install linux-image-$want ('make deps'), or set KVPOOL_VM_KERNEL"
fi
[ -r "$KIMG" ] || die "kernel image $KIMG missing or unreadable"
QEMU=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 not found: run 'make deps' (package qemu-system-x86)"
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] || die "busybox not found: run 'make deps' (package busybox-static)"
for tool in cpio gzip timeout sed; do
	command -v $tool >/dev/null || die "$tool not found: run 'make deps'"
done

# A dynamically linked binary cannot run in the initramfs: there is no libc.
is_static() {
	if command -v readelf >/dev/null; then
		# No grep -q after a pipe: with pipefail, an early exit reads as a failure.
		if LC_ALL=C readelf -lW "$1" 2>/dev/null | grep 'program interpreter' >/dev/null; then
			return 1
		fi
	elif LC_ALL=C grep -q 'ld-linux' "$1"; then
		return 1
	fi
	return 0
}

need_static() {	# file make-target
	[ -f "$1" ] || die "${1#"$ROOT"/} missing: run '$2' first"
	is_static "$1" || die "${1#"$ROOT"/} is dynamically linked; the VM has no libc: link it with -static"
}

is_static "$BUSYBOX" || die "$BUSYBOX is dynamically linked: install busybox-static ('make deps')"

# --- boot image ----------------------------------------------------------------
#
# A bzImage spends about 2 s of a TCG boot decompressing itself.  When the
# kernel has a PVH entry point (CONFIG_PVH, as Debian's has), QEMU can boot
# the uncompressed vmlinux directly; it is extracted once and cached in $TMPDIR.
# KVPOOL_VM_PVH=0 boots the bzImage as it is.

pvh_image() {	# prints the cached vmlinux, or nothing when there is none
	[ "${KVPOOL_VM_PVH:-1}" = 1 ] || return 0
	command -v readelf >/dev/null || return 0
	local cache tmp off magic dec
	cache=${TMPDIR:-/tmp}/kvpool-vm-vmlinux.$(id -u).$(basename "$KIMG").$(stat -c %Y.%s "$KIMG")
	if [ -s "$cache" ]; then
		echo "$cache"
		return 0
	fi
	for magic in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -qdc' \
		'\x1f\x8b\x08\x00:gzip -dc'; do
		dec=${magic#*:}
		command -v "${dec%% *}" >/dev/null || continue
		off=$({ LC_ALL=C grep -m1 -obUaP "${magic%%:*}" "$KIMG" 2>/dev/null || true; } | cut -d: -f1)
		off=${off%%$'\n'*}
		[ -n "$off" ] || continue
		tmp=$(mktemp "${TMPDIR:-/tmp}/kvpool-vm-vmlinux.XXXXXX")
		# Trailing data after the stream makes some decompressors complain.
		tail -c +$((off + 1)) "$KIMG" 2>/dev/null | $dec >"$tmp" 2>/dev/null || true
		# XEN_ELFNOTE_PHYS32_ENTRY (18) marks the PVH entry point.
		if LC_ALL=C readelf -nW "$tmp" 2>/dev/null | grep -E 'Xen.*(0x00000012|PHYS32_ENTRY)' >/dev/null; then
			mv -f "$tmp" "$cache"
			echo "$cache"
			return 0
		fi
		rm -f "$tmp"
	done
	return 0
}

# --- accelerator ---------------------------------------------------------------
#
# KVM is used only when a real guest boots under it: /dev/kvm may be there and
# open fine while vCPUs cannot run a stock kernel (nested or paravirtual KVM
# such as kvm_pvm, or a QEMU that rejects the host's MSRs).  The probe boots
# the same kernel with a one-line /init and waits for it; the verdict is cached
# per host boot in $TMPDIR.

PROBE_TIMEOUT=15

probe_boot() {	# dir cpu-model; 0 when the guest reached /init under KVM
	local dir=$1 cpu=$2 st=0
	rm -f "$dir/probe.log"
	# The subshell keeps bash's "Aborted" job notice off the terminal.
	(timeout -k 2 $PROBE_TIMEOUT "$QEMU" -machine pc -accel kvm -cpu "$cpu" -m 256M -smp 1 \
		-kernel "$BOOTIMG" -initrd "$dir/probe.cpio.gz" \
		-append "console=ttyS0 panic=-1 quiet cryptomgr.notests no_timer_check" \
		-nodefaults -display none -monitor none -no-reboot \
		-serial "file:$dir/probe.log" </dev/null >"$dir/probe.err" 2>&1
	exit $?) 2>/dev/null || st=$?
	grep -q KVPOOL-PROBE-OK "$dir/probe.log" 2>/dev/null && return 0
	if [ $st = 124 ] || [ $st = 137 ]; then
		PROBE_WHY="KVM with -cpu $cpu: no guest /init within ${PROBE_TIMEOUT}s"
	else
		PROBE_WHY="KVM with -cpu $cpu: $(grep -m1 -v '^$' "$dir/probe.err" || echo "qemu exit status $st")"
	fi
	return 1
}

detect_accel() {	# sets ACCEL, ACCEL_CPU, ACCEL_WHY
	ACCEL=tcg ACCEL_CPU=max
	case ${KVPOOL_VM_ACCEL:-auto} in
	tcg)
		ACCEL_WHY="KVPOOL_VM_ACCEL=tcg"
		return ;;
	kvm)
		ACCEL=kvm ACCEL_CPU=host ACCEL_WHY="KVPOOL_VM_ACCEL=kvm"
		return ;;
	auto) ;;
	*) die "KVPOOL_VM_ACCEL must be auto, kvm or tcg" ;;
	esac
	if [ ! -e /dev/kvm ]; then
		ACCEL_WHY="no /dev/kvm"
		return
	fi
	if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
		ACCEL_WHY="/dev/kvm not read-writable by $(id -un) (add the user to group kvm)"
		return
	fi
	if [ -d /sys/module/kvm_pvm ] && [ ! -d /sys/module/kvm_intel ] && [ ! -d /sys/module/kvm_amd ]; then
		ACCEL_WHY="/dev/kvm is kvm_pvm, which cannot run a stock kernel"
		return
	fi

	local cache key bootid
	bootid=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
	key="$bootid $BOOTIMG $(stat -c %Y "$BOOTIMG") $QEMU $(stat -c %Y "$QEMU")"
	cache=${TMPDIR:-/tmp}/kvpool-vm-accel.$(id -u)
	if [ -r "$cache" ] && [ "$(head -n1 "$cache")" = "$key" ]; then
		read -r ACCEL ACCEL_CPU < <(sed -n 2p "$cache")
		ACCEL_WHY="$(sed -n 3p "$cache") (cached in $cache)"
		return
	fi

	say "probing KVM with a test boot (once per host boot, up to $((2 * PROBE_TIMEOUT))s)"
	local dir cpu
	dir=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-probe.XXXXXX")
	mkdir -p "$dir/root/bin"
	cp "$BUSYBOX" "$dir/root/bin/busybox"
	printf '#!/bin/busybox sh\necho KVPOOL-PROBE-OK\n/bin/busybox poweroff -f\n' >"$dir/root/init"
	chmod 755 "$dir/root/init"
	(cd "$dir/root" && find . | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$dir/probe.cpio.gz"
	# QEMU 7.2 aborts on hosts that refuse its IA32_ARCH_CAPABILITIES value;
	# the second model leaves that MSR out.
	ACCEL_WHY=
	for cpu in host host,-arch-capabilities; do
		if probe_boot "$dir" "$cpu"; then
			ACCEL=kvm ACCEL_CPU=$cpu ACCEL_WHY="a KVM test boot reached /init"
			break
		fi
		ACCEL_WHY="${ACCEL_WHY:+$ACCEL_WHY; }$PROBE_WHY"
	done
	rm -rf "$dir"
	printf '%s\n%s %s\n%s\n' "$key" "$ACCEL" "$ACCEL_CPU" "$ACCEL_WHY" >"$cache" 2>/dev/null || true
}

BOOTIMG=$(pvh_image)
if [ -n "$BOOTIMG" ]; then
	say "boot image: $BOOTIMG (vmlinux from $KIMG, PVH entry)"
else
	BOOTIMG=$KIMG
fi

detect_accel
if [ "$ACCEL" = kvm ]; then
	say "accelerator: KVM (-enable-kvm -cpu $ACCEL_CPU): $ACCEL_WHY"
	ACCEL_ARGS=(-enable-kvm -cpu "$ACCEL_CPU")
else
	say "accelerator: TCG (-accel tcg -cpu max), slower: $ACCEL_WHY"
	ACCEL_ARGS=(-accel tcg -cpu max)
fi
[ "$MODE" = accel ] && exit 0

# --- inputs ------------------------------------------------------------------------

TESTDIR=${KVPOOL_VM_TESTDIR:-$ROOT/selftests/kvpool}
MODARGS=${KVPOOL_VM_MODARGS:-pool_mb_per_node=64}
TEST_TIMEOUT=${KVPOOL_VM_TEST_TIMEOUT:-300}
VM_TIMEOUT=${KVPOOL_VM_TIMEOUT:-900}
MEM_MB=${KVPOOL_VM_MEM_MB:-2048}
HOSTTESTDIR=$VMDIR/host-tests
HOSTFS=${KVPOOL_VM_HOSTFS:-0}
[ "$MODE" = exec ] && HOSTFS=1

[ -f "$MODULE" ] || die "${MODULE#"$ROOT"/} missing: run 'make module' first"
if [ -n "$modver" ] && [ -z "${KVPOOL_VM_KERNEL:-}" ] && [ "$modver" != "$KVER" ]; then
	die "${MODULE#"$ROOT"/} was built for $modver, which has no /boot/vmlinuz-$modver: install linux-image-$modver, or rebuild with 'make module KDIR=/usr/src/linux-headers-$KVER'"
fi
case $MODARGS in *[!A-Za-z0-9_=,.\ -]*) die "KVPOOL_VM_MODARGS has unexpected characters" ;; esac
case ${KVPOOL_VM_VLLM_PYTHON:-}${KVPOOL_VM_VLLM_CACHE:-}${KVPOOL_VM_SGLANG_PYTHON:-}${KVPOOL_VM_SGLANG_CACHE:-} in
*[!A-Za-z0-9_/.+-]*) die "KVPOOL_VM_VLLM_PYTHON, KVPOOL_VM_VLLM_CACHE, KVPOOL_VM_SGLANG_PYTHON, KVPOOL_VM_SGLANG_CACHE: pass plain paths (letters, digits, _/.+-)" ;;
esac
[[ $TEST_TIMEOUT =~ ^[0-9]+$ ]] || die "KVPOOL_VM_TEST_TIMEOUT must be seconds"
[[ $VM_TIMEOUT =~ ^[0-9]+$ ]] || die "KVPOOL_VM_TIMEOUT must be seconds"
{ [[ $MEM_MB =~ ^[0-9]+$ ]] && [ "$MEM_MB" -ge 512 ] && [ $((MEM_MB % 2)) = 0 ]; } ||
	die "KVPOOL_VM_MEM_MB must be an even number of MiB, at least 512"

LOOP=
for f in /lib/modules/"$KVER"/kernel/drivers/block/loop.ko{,.xz,.zst,.gz}; do
	[ -f "$f" ] && { LOOP=$f; break; }
done
# A kernel with the loop driver built in (the debug kernel) needs no loop.ko.
if grep -qs '^CONFIG_BLK_DEV_LOOP=y' "${KDIR:-/nonexistent}/include/config/auto.conf"; then
	LOOP=
elif [ -z "$LOOP" ] && ! grep -qs 'drivers/block/loop.ko' "/lib/modules/$KVER/modules.builtin"; then
	say "warning: no loop.ko for $KVER: tests that need a loop device will skip"
fi

if [ -n "${KVPOOL_VM_KUNIT:-}" ]; then
	KUNIT=$KVPOOL_VM_KUNIT
	[ -f "$KUNIT" ] || die "KVPOOL_VM_KUNIT names $KUNIT, which is missing"
else
	KUNIT=$(dirname "$MODULE")/kvpool_kunit.ko
	[ -f "$KUNIT" ] || KUNIT=
fi

TESTS=()
if [ "$MODE" = check ]; then
	[ -d "$TESTDIR" ] || die "${TESTDIR#"$ROOT"/} missing: run 'make selftests' first"
	if [ -n "${KVPOOL_TESTS:-}" ]; then
		for n in $KVPOOL_TESTS; do
			if [ -x "$TESTDIR/$n" ]; then
				TESTS+=("$TESTDIR/$n")
			elif [ -x "$HOSTTESTDIR/$n" ]; then
				TESTS+=("$HOSTTESTDIR/$n")
			else
				die "KVPOOL_TESTS names $n, which is in neither ${TESTDIR#"$ROOT"/} nor ${HOSTTESTDIR#"$ROOT"/}"
			fi
		done
	else
		for f in "$TESTDIR"/*_test; do
			[ -f "$f" ] && [ -x "$f" ] && TESTS+=("$f")
		done
		if [ "${KVPOOL_VM_HOST_TESTS:-1}" = 1 ]; then
			for f in "$HOSTTESTDIR"/*_test; do
				[ -f "$f" ] && [ -x "$f" ] && TESTS+=("$f")
			done
		fi
		# *_dbgtest need debug-kernel features; the debug lane asks for them.
		if [ "${KVPOOL_VM_DEBUG_TESTS:-0}" = 1 ]; then
			for f in "$TESTDIR"/*_dbgtest; do
				[ -f "$f" ] && [ -x "$f" ] && TESTS+=("$f")
			done
		fi
	fi
	[ ${#TESTS[@]} -gt 0 ] || die "no *_test binaries in ${TESTDIR#"$ROOT"/}: run 'make selftests' first"
	for f in "${TESTS[@]}"; do
		case $f in
		"$HOSTTESTDIR"/*) HOSTFS=1 ;;
		*) need_static "$f" "make selftests" ;;
		esac
	done
elif [ "$MODE" = faults ]; then
	# Needs a FAULT_INJECTION kernel: selftests/debug/check-debug.sh runs it.
	TESTS=("$TESTDIR/fault_inject")
	need_static "${TESTS[0]}" "make selftests"
fi

# The host tests import kvrt from the tree, over the in-tree libkvrt.
if [ "$HOSTFS" = 1 ] && [ "$MODE" = check ]; then
	[ -f "$ROOT/libkvrt/build/libkvrt.so.0" ] || die "libkvrt/build/libkvrt.so.0 missing (the host tests load it): run 'make lib' first"
fi

DEMO=${KVPOOL_VM_DEMO:-$ROOT/tools/kvpool-demo/kvpool-demo}
BENCH=${KVPOOL_VM_KVBENCH:-$ROOT/tools/kvbench/kvbench-static}
case $MODE in
demo) need_static "$DEMO" "make tools" ;;
bench) need_static "$BENCH" "make tools" ;;
esac

# --- initramfs -------------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-vm.XXXXXX")
# shellcheck disable=SC2317	# called from the trap
cleanup() {
	if [ "${KVPOOL_VM_KEEP:-0}" = 1 ]; then
		say "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
# QEMU runs in the background so that a signal here can stop it: its pidfile
# names it, and it is killed only while that pid is still a QEMU.
# shellcheck disable=SC2317	# called from the traps
stop_qemu() {
	local pid
	pid=$(cat "$WORK/qemu.pid" 2>/dev/null) || return 0
	case $(cat "/proc/$pid/comm" 2>/dev/null) in
	qemu*) kill "$pid" 2>/dev/null || true ;;
	esac
}
VMPIPE=
trap 'stop_qemu; [ -z "$VMPIPE" ] || wait "$VMPIPE" 2>/dev/null; cleanup' EXIT
trap 'say "interrupted"; exit 130' INT TERM HUP

t_start=$(date +%s%N)
R=$WORK/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,tests}
cp "$BUSYBOX" "$R/bin/busybox"
ln -s busybox "$R/bin/sh"	# /init installs the other applet links
install -m 755 "$VMDIR/guest-init.sh" "$R/init"
install -m 644 "$MODULE" "$R/kvpool.ko"
[ -z "$KUNIT" ] || [ "$MODE" != check ] || install -m 644 "$KUNIT" "$R/kvpool_kunit.ko"
case $LOOP in
*.xz) xz -dc "$LOOP" >"$R/loop.ko" ;;
*.zst) zstd -qdc "$LOOP" >"$R/loop.ko" ;;
*.gz) gzip -dc "$LOOP" >"$R/loop.ko" ;;
?*) cp "$LOOP" "$R/loop.ko" ;;
esac
for f in "${TESTS[@]}"; do install -m 755 "$f" "$R/tests/"; done
if [ "$MODE" = check ]; then
	if why=$(tierfs_install "$R"); then
		say "tierfs: a ${TIERFS_MB} MiB ext4 image for the SSD tier's O_DIRECT tests"
	else
		say "tierfs: none ($why): the SSD tier's tests use /tmp (tmpfs)"
	fi
fi
# The tools go in whenever they are built and static; demo and bench need theirs.
# Every tools/NAME/NAME binary also goes to /bin, so tests can run them by name.
if [ -f "$DEMO" ] && is_static "$DEMO"; then install -m 755 "$DEMO" "$R/"; fi
# kvbench itself is dynamic (it loads libcuda); the VM gets its static twin.
if [ -f "$BENCH" ] && is_static "$BENCH"; then install -m 755 "$BENCH" "$R/kvbench"; fi
# kvrt-demo too (it loads libcuda for --device gpu): its static twin, by its name.
DEMO_STATIC=$ROOT/tools/kvrt-demo/kvrt-demo-static
if [ -f "$DEMO_STATIC" ] && is_static "$DEMO_STATIC"; then install -m 755 "$DEMO_STATIC" "$R/bin/kvrt-demo"; fi
for d in "$ROOT"/tools/*/; do
	f=$d$(basename "$d")
	if [ -f "$f" ] && [ -x "$f" ] && is_static "$f"; then install -m 755 "$f" "$R/bin/"; fi
done
cat >"$R/etc/kvpool-vm.conf" <<EOF
KVPOOL_MODARGS='$MODARGS'
KVPOOL_TEST_TIMEOUT=$TEST_TIMEOUT
KVPOOL_HOST_ROOT='$ROOT'
KVPOOL_VLLM_PYTHON='${KVPOOL_VM_VLLM_PYTHON:-}'
KVPOOL_VLLM_CACHE='${KVPOOL_VM_VLLM_CACHE:-}'
KVPOOL_SGLANG_PYTHON='${KVPOOL_VM_SGLANG_PYTHON:-}'
KVPOOL_SGLANG_CACHE='${KVPOOL_VM_SGLANG_CACHE:-}'
EOF
[ "$MODE" != exec ] || printf '%s\n' "$2" >"$R/etc/kvpool-vm.exec"
HOSTFS_ARGS=()
if [ "$HOSTFS" = 1 ]; then
	case $ROOT in *\'*) die "hostfs: the tree's path $ROOT has a quote" ;; esac
	hostfs_install "$R"
	mapfile -t HOSTFS_ARGS < <(hostfs_qemu_args)
	say "hostfs: the host's / goes to the guest read-only (9p; $(find "$R/hostfs" -name '*.ko' | wc -l) modules)"
fi
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$WORK/initrd.gz"
t_built=$(date +%s%N)
say "initramfs: $(du -h "$WORK/initrd.gz" | cut -f1) (${#TESTS[@]} tests) in $(((t_built - t_start) / 1000000)) ms"

# --- boot ------------------------------------------------------------------------------

# no_timer_check: on a loaded host, TCG can miss the boot's IO-APIC timer
# check, and the kernel panics ("IO-APIC + timer doesn't work").
APPEND="console=ttyS0 panic=-1 quiet cryptomgr.notests no_timer_check kvpool_mode=$MODE ${KVPOOL_VM_APPEND:-}"
# shellcheck disable=SC2054	# the commas are QEMU's
QARGS=(-name kvpool-vm -machine pc "${ACCEL_ARGS[@]}" -m "${MEM_MB}M" -smp 2,sockets=2,cores=1,threads=1
	-object memory-backend-ram,id=m0,size=$((MEM_MB / 2))M -numa node,nodeid=0,cpus=0,memdev=m0
	-object memory-backend-ram,id=m1,size=$((MEM_MB / 2))M -numa node,nodeid=1,cpus=1,memdev=m1
	-kernel "$BOOTIMG" -initrd "$WORK/initrd.gz" -append "$APPEND" "${HOSTFS_ARGS[@]}"
	# Like -nographic, minus the firmware's escape codes on the serial line.
	-nodefaults -display none -monitor none -serial stdio -no-reboot)
LOG=$WORK/console.log
say "booting $KIMG ($KVER), mode $MODE, timeout ${VM_TIMEOUT}s"

{
	timeout -k 10 "$VM_TIMEOUT" "$QEMU" "${QARGS[@]}" -pidfile "$WORK/qemu.pid" </dev/null 2>&1
	echo $? >"$WORK/qemu.rc"
} | sed -u 's/\r$//' | tee "$LOG" &
VMPIPE=$!
wait $VMPIPE || true
VMPIPE=
qrc=$(cat "$WORK/qemu.rc" 2>/dev/null || echo unknown)
t_end=$(date +%s%N)
secs=$(((t_end - t_built) / 1000000))
say "VM ran $((secs / 1000)).$(printf '%03d' $((secs % 1000)))s ($ACCEL)"
LASTLOG=${TMPDIR:-/tmp}/kvpool-vm-$MODE.log
cp "$LOG" "$LASTLOG" 2>/dev/null && say "console log: $LASTLOG"

rc=$(grep -ao 'KVPOOL-VM-RESULT: [0-9]\+' "$LOG" | tail -n1 | sed 's/.*: //' || true)
if [ -z "$rc" ]; then
	if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
		say "FAIL: the VM did not finish within ${VM_TIMEOUT}s and was killed (KVPOOL_VM_TIMEOUT)"
	elif grep -q 'Kernel panic' "$LOG"; then
		say "FAIL: the guest kernel panicked:"
		grep -a -m1 -A3 'Kernel panic' "$LOG" || true
	else
		say "FAIL: the guest stopped without a result line (qemu exit status $qrc)"
	fi
	case $MODE in check | faults) echo "0 passed, 1 failed" ;; esac
	exit 1
fi

if [ "$MODE" = bench ]; then
	out=$ROOT/bench/results/pool-vm-$(date +%Y%m%d).jsonl
	mkdir -p "${out%/*}"
	sed -n '/^KVBENCH-BEGIN$/,/^KVBENCH-END$/p' "$LOG" | grep -a '^{' >"$WORK/bench.jsonl" || true
	if [ -s "$WORK/bench.jsonl" ]; then
		# Only kvbench's lines, as bench/results/README.md wants; the entry
		# that README needs (machine, date, command) is printed here.
		cp "$WORK/bench.jsonl" "$out"
		hostcpu=$(sed -n '/^model name/{s/^[^:]*: //p;q}' /proc/cpuinfo)
		say "wrote $(wc -l <"$out") result lines to ${out#"$ROOT"/}; its bench/results/README.md entry:"
		echo "- \`${out##*/}\`: machine: QEMU ${ACCEL^^} guest (-cpu ${ACCEL_ARGS[-1]}, 2 vCPUs,"
		echo "  2 NUMA nodes, 2 GiB, kernel $KVER, kvpool.ko $MODARGS) on $(nproc)-core \`$hostcpu\`;"
		echo "  date: $(date +%Y-%m-%d); command: \`make bench-pool\` (\`/kvbench pool --json\` in the VM)"
	else
		say "FAIL: kvbench printed no JSON lines"
		[ "$rc" = 0 ] && rc=1
	fi
fi

if [ "$rc" = 0 ]; then
	say "guest result: PASS"
else
	say "guest result: FAIL (rc $rc)"
fi
exit "$rc"
