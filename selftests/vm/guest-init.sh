#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# /init of the kvpool test VM (busybox ash, POSIX sh).  run-vm.sh copies this
# file into the initramfs together with busybox, loop.ko (unless the loop
# driver is built in), kvpool.ko, kvpool_kunit.ko (only where the kernel has
# KUnit: the debug kernel), the static selftests (/tests/*_test) and the tools
# (/kvbench, /kvpool-demo).
#
# The mode comes from the kernel command line (kvpool_mode=check|demo|bench|
# exec); exec runs the shell command in /etc/kvpool-vm.exec (run-vm.sh exec).
# the rest of the settings from /etc/kvpool-vm.conf, written by run-vm.sh.
# Whatever happens, the last thing printed is the line
#	KVPOOL-VM-RESULT: <rc>
# which the host turns into its exit status; then the VM powers off.

/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/tmp TERM=dumb

KVPOOL_MODARGS="pool_mb_per_node=64"
KVPOOL_TEST_TIMEOUT=300
# shellcheck disable=SC1091
[ -r /etc/kvpool-vm.conf ] && . /etc/kvpool-vm.conf

CHECK=/sys/kernel/debug/kvpool/check
KMEMLEAK=/sys/kernel/debug/kmemleak
# dmesg lines that fail a run.  The debug kernel's checkers report as
# "BUG: KASAN: ...", "UBSAN: ...", "WARNING: possible circular locking
# dependency detected" (lockdep), "BUG: sleeping function called from invalid
# context", "kernel BUG at" (VM_BUG_ON), "INFO: trying to register non-static
# key", "kmemleak: N new suspected memory leaks".
SPLAT='BUG:|WARNING:|Call Trace|lockdep|KASAN|kmemleak|UBSAN|Oops|general protection fault|blocked for more than|self-detected stall|Kernel panic|kernel BUG at|INFO: |list_(add|del) corruption'

# Under fault injection the kernel dumps a stack for every allocation it was
# told to fail (warn_alloc), so there only real bugs count: no "Call Trace"
# or bare "lockdep" (a frame name), but every report kind that means a bug.
FAULT_SPLAT='BUG:|WARNING:|KASAN|UBSAN|Oops|general protection fault|possible circular locking|inconsistent lock state|possible recursive locking|DEBUG_LOCKS_WARN|blocked for more than|self-detected stall|Kernel panic|kernel BUG at|list_(add|del) corruption'

passed=0
failed=0
skipped=0

log() { echo "vm: $*"; }

# Centiseconds since boot, for per-step timings.
now_cs() {
	read -r up _ </proc/uptime
	echo "${up%.*}${up#*.}"
}

elapsed() {	# start_cs -> "1.23s"
	d=$(( $(now_cs) - $1 ))
	printf '%d.%02ds' $((d / 100)) $((d % 100))
}

finish() {	# rc
	echo "KVPOOL-VM-RESULT: $1"
	# Let the UART drain before the power goes.
	sync
	sleep 0.3 2>/dev/null || sleep 1
	poweroff -f
	# Not reached; keep init alive rather than panic if poweroff fails.
	while :; do sleep 60; done
}

# Print the accounting check; return 0 when it says exactly "ok".
invariant_ok() {	# context
	if [ ! -e "$CHECK" ]; then
		log "FAIL: $CHECK missing ($1)"
		return 1
	fi
	out=$(cat "$CHECK" 2>&1)
	if [ "$out" = ok ]; then
		return 0
	fi
	log "FAIL: accounting check after $1:"
	echo "$out" | sed 's/^/vm:   /'
	return 1
}

# Scan for leaks (kernels with kmemleak); sets LEAKS to the report.  An
# object is reported only when it is older than 5 s and its contents did
# not change since the previous scan, so it takes two scans.
kmemleak_scan() {
	echo scan >"$KMEMLEAK"
	echo scan >"$KMEMLEAK"
	LEAKS=$(cat "$KMEMLEAK")
}

# A module's frames have no symbols in a report made after it is unloaded:
# they show as bare addresses.  Its symbols are saved before each rmmod
# (save_syms) so that such an address can be named here: the nearest text
# symbol below it, if the module was loaded at the same address then.
MODSYMS=/tmp/kvpool-modsyms
save_syms() {	# module
	[ -w "$KMEMLEAK" ] || return 0
	grep "\[$1\]\$" /proc/kallsyms >>"$MODSYMS" 2>/dev/null
	return 0
}

symbolize() {
	while IFS= read -r line; do
		case $line in
		*"] 0x"*)
			a=${line##*] 0x}
			# String comparison: kernel addresses are 16 lowercase hex digits.
			best=$(awk -v a="$a" '$2 ~ /^[tT]$/ && ($1 "") <= (a "") && ($1 "") > (b "") {
				b = $1; s = $3 " " $4 } END { if (b != "") print b, s }' "$MODSYMS" 2>/dev/null)
			if [ -n "$best" ]; then
				# shellcheck disable=SC2086	# address, name, [module]
				set -- $best
				off=$((0x$(echo "$a" | cut -c9-16) - 0x$(echo "$1" | cut -c9-16)))
				line="$line = $2+$(printf '%#x' "$off") $3"
			fi ;;
		esac
		printf '%s\n' "$line"
	done
}

# After the modules are gone: any leak fails the run (those from boot were
# cleared before the first module was loaded).
kmemleak_clean() {
	[ -w "$KMEMLEAK" ] || return 0
	t0=$(now_cs)
	sleep 5
	kmemleak_scan
	if [ -z "$LEAKS" ]; then
		log "kmemleak: no leaks ($(elapsed "$t0"))"
		return 0
	fi
	n=$(echo "$LEAKS" | grep -c '^unreferenced object')
	if echo "$LEAKS" | grep -qE 'kvpool|kvc_|\] 0x[0-9a-f]+$'; then
		log "FAIL: kmemleak reports $n leaks, from the module (frames in kvpool or bare module addresses):"
	else
		log "FAIL: kmemleak reports $n leaks (none with a kvpool frame):"
	fi
	echo "$LEAKS" | symbolize
	return 1
}

# Fail on kernel splats since the dmesg buffer was cleared after boot.
dmesg_clean() {
	leak_rc=0
	kmemleak_clean || leak_rc=1
	hits=$(dmesg | grep -E "$SPLAT")
	if [ -n "$hits" ]; then
		log "FAIL: kernel log has splats; full dmesg since module load:"
		dmesg
		log "matching lines:"
		echo "$hits"
		return 1
	fi
	log "dmesg clean"
	return $leak_rc
}

unload() {
	save_syms kvpool
	if rmmod kvpool; then
		log "rmmod kvpool: ok"
		return 0
	fi
	log "FAIL: rmmod kvpool failed; refcount $(cat /sys/module/kvpool/refcnt 2>/dev/null)"
	return 1
}

summary() {
	if [ "$skipped" -gt 0 ]; then
		echo "$passed passed, $failed failed, $skipped skipped"
	else
		echo "$passed passed, $failed failed"
	fi
}

# Set STRAY to the user processes other than init: what a test left running.
# Only builtins here, so the scan does not see itself.  busybox timeout's
# watchdog is skipped; it notices within a second that its program is gone.
find_stray() {
	STRAY=
	for sd in /proc/[0-9]*; do
		[ "$sd" = /proc/1 ] && continue
		[ -e "$sd/exe" ] || continue	# kernel thread or zombie
		read -r scomm <"$sd/comm" 2>/dev/null || continue
		[ "$scomm" = timeout ] && continue
		STRAY="$STRAY ${sd#/proc/}($scomm)"
	done
}

# Kill what a test left behind; return 1 when there was something.
reap_stray() {	# test name
	find_stray
	[ -z "$STRAY" ] && return 0
	sleep 0.2	# let exiting processes finish
	find_stray
	[ -z "$STRAY" ] && return 0
	log "FAIL: $1 left processes running:$STRAY; killing them"
	for sx in $STRAY; do
		kill -9 "${sx%%(*}" 2>/dev/null
	done
	sleep 0.2
	return 1
}

# Run one selftest binary, echo its TAP, add its results to the totals.
# The output goes through a file, not a pipe: a child that the test leaves
# behind would hold a pipe open and stall the run.
run_test() {	# path
	t=$1
	name=${t##*/}
	out=/tmp/$name.tap
	echo "vm: ---- $name"
	t0=$(now_cs)
	timeout -s KILL "$KVPOOL_TEST_TIMEOUT" "$t" >"$out" 2>&1 </dev/null
	rc=$?
	cat "$out"
	p=$(grep -cE '^ok [0-9]+' "$out")
	s=$(grep -E '^ok [0-9]+' "$out" | grep -ciE '#[[:space:]]*skip')
	f=$(grep -cE '^not ok [0-9]+' "$out")
	p=$((p - s))
	case $rc in
	0) ;;
	4)	# KSFT_SKIP
		[ $((p + s + f)) -eq 0 ] && s=1 ;;
	137)
		log "FAIL: $name killed after ${KVPOOL_TEST_TIMEOUT}s (or by SIGKILL)"
		f=$((f + 1)) ;;
	*)
		if [ "$f" -eq 0 ]; then
			log "FAIL: $name exited with status $rc"
			f=1
		fi ;;
	esac
	# A binary that printed no results and exited 0 still counts once.
	[ $((p + s + f)) -eq 0 ] && p=1
	reap_stray "$name" || f=$((f + 1))
	invariant_ok "$name" || f=$((f + 1))
	log "$name: rc=$rc pass=$p fail=$f skip=$s ($(elapsed "$t0"))"
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
}

# The KUnit suites of kvpool_kunit.ko run when it is loaded; each suite's
# KTAP is in /sys/kernel/debug/kunit/<suite>/results.  A suite's own
# "ok 1 <suite>" line decides; the case lines give the counts (a case's log
# is capped at 512 bytes, so a failing case may lose its line: the cases
# that the suite says it has and that printed no "ok" count as failed).
run_kunit() {
	echo "vm: ---- kvpool_kunit.ko (KUnit)"
	t0=$(now_cs)
	kp=0
	kf=0
	ks=0
	if ! insmod /kvpool_kunit.ko; then
		log "FAIL: insmod kvpool_kunit.ko"
		failed=$((failed + 1))
		return
	fi
	nsuites=0
	for f in /sys/kernel/debug/kunit/kvcore_*/results; do
		[ -r "$f" ] || continue
		nsuites=$((nsuites + 1))
		suite=${f%/results}
		suite=${suite##*/}
		cat "$f" >/tmp/kunit.tap
		cat /tmp/kunit.tap
		total=$(sed -n 's/^    1\.\.\([0-9]*\)$/\1/p' /tmp/kunit.tap | head -n1)
		sp=$(grep -cE '^    ok [0-9]+ ' /tmp/kunit.tap)
		ss=$(grep -E '^    ok [0-9]+ ' /tmp/kunit.tap | grep -c '# SKIP')
		sp=$((sp - ss))
		if grep -qE "^ok 1 $suite( |\$)" /tmp/kunit.tap; then
			sf=$(grep -cE '^    not ok [0-9]+ ' /tmp/kunit.tap)
		else
			sf=$((${total:-1} - sp - ss))
			[ "$sf" -gt 0 ] || sf=1
			log "FAIL: KUnit suite $suite"
		fi
		kp=$((kp + sp))
		kf=$((kf + sf))
		ks=$((ks + ss))
	done
	if [ "$nsuites" -eq 0 ]; then
		log "FAIL: kvpool_kunit.ko left no results in /sys/kernel/debug/kunit"
		kf=$((kf + 1))
	fi
	save_syms kvpool_kunit
	rmmod kvpool_kunit || { log "FAIL: rmmod kvpool_kunit"; kf=$((kf + 1)); }
	log "kvpool_kunit: $nsuites suites, pass=$kp fail=$kf skip=$ks ($(elapsed "$t0"))"
	passed=$((passed + kp))
	failed=$((failed + kf))
	skipped=$((skipped + ks))
}

mode_check() {
	[ -e /kvpool_kunit.ko ] && run_kunit
	set --
	# lock_order_test's hog mlocks memory that kswapd cannot balance, and
	# after 16 such runs kswapd gives a node up for the rest of the boot:
	# it runs last, so that reclaim_test still finds kswapd at work.
	# run-vm.sh chose the set: *_dbgtest and *_engtest only when asked for
	for t in /tests/*_test /tests/*_dbgtest /tests/*_engtest; do
		[ "${t##*/}" = lock_order_test ] && continue
		[ -x "$t" ] && set -- "$@" "$t"
	done
	[ -x /tests/lock_order_test ] && set -- "$@" /tests/lock_order_test
	if [ $# -eq 0 ]; then
		log "FAIL: no selftests in the initramfs"
		failed=$((failed + 1))
	else
		log "running $# selftest binaries"
		for t in "$@"; do
			cd /tmp && run_test "$t"
		done
	fi
	unload || failed=$((failed + 1))
	dmesg_clean || failed=$((failed + 1))
	summary
	[ "$failed" -eq 0 ]
}

# fault_inject fails allocations on every path of the module, itself
# reloading it; then the usual unload, leak and splat checks follow.
mode_faults() {
	if [ ! -x /tests/fault_inject ]; then
		log "FAIL: /tests/fault_inject missing"
		failed=$((failed + 1))
	else
		cd /tmp && run_test /tests/fault_inject
	fi
	unload || failed=$((failed + 1))
	SPLAT=$FAULT_SPLAT
	dmesg_clean || failed=$((failed + 1))
	summary
	[ "$failed" -eq 0 ]
}

# Print every readable sysfs attribute of the device, node*/ included.
show_sysfs() {
	d=/sys/class/misc/kvpool
	if [ ! -d "$d/" ]; then
		log "no $d"
		return 0
	fi
	echo "==== $d"
	for f in "$d"/* "$d"/node*/*; do
		if [ ! -f "$f" ] || [ -L "$f" ]; then
			continue
		fi
		rel=${f#"$d"/}
		case $rel in uevent) continue ;; esac
		if ! v=$(cat "$f" 2>/dev/null); then
			printf '%-32s (not readable)\n' "$rel"
		elif [ "$(echo "$v" | wc -l)" -le 1 ]; then
			printf '%-32s %s\n' "$rel" "$v"
		else
			echo "$rel:"
			echo "$v" | sed 's/^/    /'
		fi
	done
}

show_debugfs() {
	for f in nodes spaces check; do
		echo "==== /sys/kernel/debug/kvpool/$f"
		cat "/sys/kernel/debug/kvpool/$f" 2>&1
	done
}

mode_demo() {
	rc=0
	if [ ! -x /kvpool-demo ]; then
		log "FAIL: /kvpool-demo missing"
		rc=1
	else
		t0=$(now_cs)
		/kvpool-demo
		st=$?
		[ $st -eq 0 ] || { rc=1; log "FAIL: kvpool-demo exited with status $st"; }
		log "kvpool-demo took $(elapsed "$t0")"
	fi
	show_sysfs
	show_debugfs
	invariant_ok "the demo" || rc=1
	unload || rc=1
	dmesg_clean || rc=1
	return $rc
}

mode_bench() {
	rc=0
	if [ ! -x /kvbench ]; then
		log "FAIL: /kvbench missing"
		return 1
	fi
	t0=$(now_cs)
	cd /tmp || return 1
	/kvbench pool --json >/tmp/bench.json
	st=$?
	[ $st -eq 0 ] || { rc=1; log "FAIL: kvbench exited with status $st"; }
	log "kvbench took $(elapsed "$t0")"
	echo "KVBENCH-BEGIN"
	cat /tmp/bench.json
	echo "KVBENCH-END"
	invariant_ok "kvbench" || rc=1
	unload || rc=1
	dmesg_clean || rc=1
	return $rc
}

# run-vm.sh exec: the caller's command, with the module loaded and /bin/host-run
# there to start host programs; its status is the result.
mode_exec() {
	t0=$(now_cs)
	cd /tmp && sh /etc/kvpool-vm.exec
	st=$?
	log "exec: status $st ($(elapsed "$t0"))"
	unload || st=1
	return $st
}

# --- main ------------------------------------------------------------------

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
exec </dev/console >/dev/console 2>&1

mode=
read -r cmdline </proc/cmdline
for arg in $cmdline; do
	case $arg in kvpool_mode=*) mode=${arg#kvpool_mode=} ;; esac
done
log "init reached at $(cut -d' ' -f1 /proc/uptime)s, mode ${mode:-unset}"
log "kernel $(uname -r), $(nproc) cpus"
grep -h MemTotal /sys/devices/system/node/node*/meminfo | sed 's/^/vm: /'

case $mode in
check|faults|demo|bench|exec) ;;
*)	log "FAIL: unknown kvpool_mode '$mode'"; finish 2 ;;
esac

# Leaks from boot are the base kernel's: show them, then make kmemleak
# forget them, so that any leak it reports later is one from this run.
if [ -w "$KMEMLEAK" ]; then
	t0=$(now_cs)
	kmemleak_scan
	if [ -n "$LEAKS" ]; then
		log "note: kmemleak reports leaks from boot (not counted):"
		echo "$LEAKS" | head -n 60 | sed 's/^/vm:   /'
	fi
	echo clear >"$KMEMLEAK"
	log "kmemleak: boot baseline taken ($(elapsed "$t0"))"
fi

# Splats from here on fail the run; boot noise before this only gets a note.
# The debug kernel's banners match the pattern and are no splats.
BANNERS='RCU lockdep checking is enabled|kmemleak: Kernel memory leak detector initialized'
if dmesg | grep -E "$SPLAT" | grep -qvE "$BANNERS"; then
	log "note: the kernel log has splats from before the module was loaded:"
	dmesg | grep -E "$SPLAT" | grep -vE "$BANNERS" | sed 's/^/vm:   /'
fi
dmesg -c >/dev/null

if [ -e /loop.ko ] && [ ! -d /sys/module/loop ]; then
	insmod /loop.ko || log "warning: insmod loop.ko failed"
fi
# tierfs.sh's ext4 image: the SSD tier's tests do O_DIRECT there, not on tmpfs.
if [ -e /tierfs.img ]; then
	for m in /tierfs/*.ko; do
		[ -e "$m" ] || continue
		n=${m##*/[0-9][0-9]-}
		[ -d "/sys/module/${n%.ko}" ] || insmod "$m" || log "warning: insmod $m failed"
	done
	mkdir -p /tierfs-mnt
	if dev=$(losetup -f) && losetup "$dev" /tierfs.img && mount -t ext4 "$dev" /tierfs-mnt; then
		chmod 1777 /tierfs-mnt
		export KVRT_TIER_DIR=/tierfs-mnt
		log "tierfs: ext4 on $dev at $KVRT_TIER_DIR"
	else
		log "warning: tierfs: could not mount /tierfs.img: the SSD tier's tests use /tmp"
	fi
fi
# shellcheck disable=SC2086	# module arguments split on purpose
if ! insmod /kvpool.ko $KVPOOL_MODARGS; then
	log "FAIL: insmod kvpool.ko $KVPOOL_MODARGS"
	dmesg | tail -n 40
	case $mode in check|faults) echo "0 passed, 1 failed" ;; esac
	finish 1
fi
log "insmod kvpool.ko $KVPOOL_MODARGS: ok"
if [ "$mode" != demo ] && [ "$mode" != bench ] && [ "$mode" != exec ] && ! invariant_ok "insmod"; then
	failed=$((failed + 1))
fi

rc=0
"mode_$mode" || rc=1
finish $rc
