#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# /init of the kvpool test VM (busybox ash, POSIX sh).  run-vm.sh copies this
# file into the initramfs together with busybox, loop.ko, kvpool.ko, the
# static selftests (/tests/*_test) and the tools (/kvbench, /kvpool-demo).
#
# The mode comes from the kernel command line (kvpool_mode=check|demo|bench);
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
# dmesg lines that fail a run.
SPLAT='BUG:|WARNING:|Call Trace|lockdep|KASAN|kmemleak|UBSAN|Oops|general protection fault|blocked for more than|self-detected stall|Kernel panic'

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

# Fail on kernel splats since the dmesg buffer was cleared after boot.
dmesg_clean() {
	if [ -w /sys/kernel/debug/kmemleak ]; then
		# Objects younger than 5 s are never reported.
		sleep 5
		echo scan >/sys/kernel/debug/kmemleak
		leaks=$(cat /sys/kernel/debug/kmemleak)
		if [ -n "$leaks" ]; then
			log "FAIL: kmemleak reports leaks:"
			echo "$leaks"
			return 1
		fi
	fi
	hits=$(dmesg | grep -E "$SPLAT")
	if [ -n "$hits" ]; then
		log "FAIL: kernel log has splats; full dmesg since module load:"
		dmesg
		log "matching lines:"
		echo "$hits"
		return 1
	fi
	log "dmesg clean"
	return 0
}

unload() {
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

mode_check() {
	set -- /tests/*_test
	if [ ! -x "$1" ]; then
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
check|demo|bench) ;;
*)	log "FAIL: unknown kvpool_mode '$mode'"; finish 2 ;;
esac

# Splats from here on fail the run; boot noise before this only gets a note.
if dmesg | grep -qE "$SPLAT"; then
	log "note: the kernel log has splats from before the module was loaded:"
	dmesg | grep -E "$SPLAT" | sed 's/^/vm:   /'
fi
dmesg -c >/dev/null

if [ -e /loop.ko ]; then
	insmod /loop.ko || log "warning: insmod loop.ko failed"
fi
# shellcheck disable=SC2086	# module arguments split on purpose
if ! insmod /kvpool.ko $KVPOOL_MODARGS; then
	log "FAIL: insmod kvpool.ko $KVPOOL_MODARGS"
	dmesg | tail -n 40
	[ "$mode" = check ] && echo "0 passed, 1 failed"
	finish 1
fi
log "insmod kvpool.ko $KVPOOL_MODARGS: ok"
if [ "$mode" = check ] && ! invariant_ok "insmod"; then
	failed=$((failed + 1))
fi

rc=0
"mode_$mode" || rc=1
finish $rc
