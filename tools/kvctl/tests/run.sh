#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# run.sh: kvctl's host-side tests (make -C tools/kvctl check).  Every
# subcommand and every error path runs against the fake sysfs/debugfs tree
# of fake-tree.sh in a temporary directory; the module is not needed.
# JSON is validated with tests/jsoncheck (the validator the VM selftest
# uses) and, where python3 exists, with python's json module as well.
#
# "No permission" needs a caller the files refuse: root passes every mode
# check (CAP_DAC_OVERRIDE), so as root the permission tests run kvctl as
# nobody through setpriv(1) (util-linux) and skip, saying so, without it;
# as a non-root user they run as that user.
#
# Output is TAP-like; the last line is "N passed, N failed".

set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KVCTL=${KVCTL:-$HERE/../kvctl}
JSONCHECK=$HERE/jsoncheck
[ -x "$KVCTL" ] || { echo "run.sh: $KVCTL missing: run make -C tools/kvctl" >&2; exit 1; }
[ -x "$JSONCHECK" ] || { echo "run.sh: $JSONCHECK missing: run make -C tools/kvctl tests/jsoncheck" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/kvctl-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
chmod 755 "$T"
PY=$(command -v python3 || true)

export KVCTL_SYSFS=$T/sys/kvpool KVCTL_DEBUGFS=$T/dbg/kvpool KVCTL_DEV=$T/no-device
S=$KVCTL_SYSFS
G=$KVCTL_DEBUGFS
fresh() { bash "$HERE/fake-tree.sh" "$T"; }
fresh

n=0 passed=0 failed=0 skipped=0 WHY=

# run ARGS...: kvctl's stdout in $T/out, stderr in $T/err, status in $RC.
run() {
	"$KVCTL" "$@" >"$T/out" 2>"$T/err"
	RC=$?
}
# As `run`, as user nobody (setpriv) or as this non-root user.
run_unpriv() {
	if [ "$(id -u)" = 0 ]; then
		# A copy in $T: nobody may not be able to reach the build tree.
		[ -x "$T/kvctl" ] || install -m 755 "$KVCTL" "$T/kvctl"
		setpriv --reuid=65534 --regid=65534 --clear-groups -- "$T/kvctl" "$@" >"$T/out" 2>"$T/err"
	else
		"$KVCTL" "$@" >"$T/out" 2>"$T/err"
	fi
	RC=$?
}
unpriv_ok() { [ "$(id -u)" != 0 ] || command -v setpriv >/dev/null; }

begin() { NAME=$1; WHY=; }
fail() { WHY="${WHY:+$WHY; }$*"; }
want_rc() { [ "$RC" = "$1" ] || fail "exit status $RC, wanted $1"; }
want_out() { grep -qE -- "$1" "$T/out" || fail "stdout lacks /$1/"; }
want_err() { grep -qE -- "$1" "$T/err" || fail "stderr lacks /$1/"; }
no_out() { ! grep -qE -- "$1" "$T/out" || fail "stdout has /$1/"; }
want_file() {	# file content
	local got
	got=$(cat "$1" 2>/dev/null)
	[ "$got" = "$2" ] || fail "${1#"$T"/} holds '$got', wanted '$2'"
}
want_json() {	# stdout is JSON (--lines: JSON lines)
	"$JSONCHECK" "$@" <"$T/out" 2>/dev/null || fail "stdout is not valid JSON (jsoncheck)"
	if [ -n "$PY" ] && [ "${1:-}" != --lines ]; then
		"$PY" -c 'import json,sys; json.load(sys.stdin)' <"$T/out" 2>/dev/null ||
			fail "python3 json.load refuses stdout"
	fi
}
want_key() {	# key value: the first "key" in stdout's JSON has this value
	local got
	got=$("$JSONCHECK" --get "$1" <"$T/out" 2>/dev/null)
	[ "$got" = "$2" ] || fail "\"$1\" is '$got', wanted '$2'"
}
end() {
	n=$((n + 1))
	if [ -z "$WHY" ]; then
		echo "ok $n - $NAME"
		passed=$((passed + 1))
	else
		echo "not ok $n - $NAME: $WHY"
		sed 's/^/#   stdout: /' "$T/out" | head -n 20
		sed 's/^/#   stderr: /' "$T/err" | head -n 10
		failed=$((failed + 1))
	fi
}
skip() {
	n=$((n + 1))
	echo "ok $n - $1 # SKIP $2"
	skipped=$((skipped + 1))
}

# ---- help and usage ----------------------------------------------------------

begin "kvctl --help lists every command"
run --help
want_rc 0
for c in status spaces space blocks top set check stats destroy drop-cached size tiers; do
	want_out "^  $c "
done
end

for c in status spaces space blocks top set check stats destroy drop-cached size tiers; do
	begin "kvctl $c --help"
	run "$c" --help
	want_rc 0
	want_out "^usage: kvctl $c"
	end
done

begin "no command: usage, status 2"
run
want_rc 2
want_err "no command given"
end

begin "unknown command: says so and lists the commands"
run frobnicate
want_rc 2
want_err "unknown command 'frobnicate'"
want_err "commands: status"
end

begin "unknown option: says so with the command's options"
run status --verbose
want_rc 2
want_err "kvctl status: unknown option '--verbose'"
want_err "usage: kvctl status"
end

begin "unexpected argument"
run spaces extra
want_rc 2
want_err "unexpected argument 'extra'"
end

begin "--version"
run --version
want_rc 0
want_out "^kvctl [0-9.]+ \(kvpool API 4\)"
end

# ---- read commands -------------------------------------------------------------

begin "status: pool, nodes, prefix, evictions, tenants"
run status
want_rc 0
want_out "^pool +256.0 MiB reserved: 192.0 MiB free, 64.0 MiB in spaces, 0 B held; chunk 2.0 MiB"
want_out "^node0 +128.0 MiB reserved"
want_out "^node1 "
want_out "hit rate 75.0% \(300 hits, 100 misses\)"
want_out "^evictions +15 \(quota 1, pool 2, tenant 3, reclaim 4, admin 5\)"
want_out "uid 1000: limit 1.0 GiB, used 16.0 MiB, 1 space"
want_out "no-device: No such file"
end

begin "status --json"
run status --json
want_rc 0
want_json
want_key pool_bytes 268435456
want_key in_spaces_bytes 67108864
want_key hit_rate 0.75
want_key total 15
want_key ok false
end

begin "--json before the command"
run --json status
want_rc 0
want_json
want_key free_bytes 201326592
end

begin "spaces: a table of every space"
run spaces
want_rc 0
want_out "^ +ID NAME"
want_out "^ +1 llama70b.tp0 +0 +2 +yes +2.0 MiB +64.0 MiB +32.0 MiB +4 +6 +2 +4 +0 +80.0%"
want_out "^ +2 qwen7b +1000"
end

begin "spaces --json"
run spaces --json
want_rc 0
want_json
want_key name '"llama70b.tp0"'
want_key cached_blocks 4
want_key backed_blocks 16
[ "$(grep -c '"id":' "$T/out")" = 4 ] || fail "not 4 spaces"
end

begin "space NAME: detail with debugfs extras"
run space llama70b.tp0
want_rc 0
want_out "^space 1 llama70b.tp0"
want_out "uid 0, gid 100, mode 0660"
want_out "quota 64.0 MiB = 32 blocks"
want_out "16 blocks: 4 free, 6 owned, 2 published, 4 cached, 0 holes; 16 not backed yet"
want_out "interleave, mask 0x3; node0 16.0 MiB node1 16.0 MiB"
want_out "hit rate 80.0% \(200 hits, 50 misses\)"
end

begin "space NAME --json"
run space qwen7b --json
want_rc 0
want_json
want_key id 2
want_key uid 1000
want_key hole_blocks 1
want_key numa_policy '"preferred"'
want_key mode '"0600"'
end

begin "space: no such space, status 5"
run space nosuch
want_rc 5
want_err "no space named 'nosuch'; 'kvctl spaces' lists them"
end

begin "space: invalid name, status 2"
run space 'bad name!'
want_rc 2
want_err "is not a space name"
end

begin "space: no NAME"
run space
want_rc 2
want_err "which space\?"
end

begin "space: a shared name resolves to the live space through debugfs"
run space dup --json
want_rc 0
want_key id 6
want_key unlinked false
end

begin "space: a shared name without debugfs asks for --id"
KVCTL_DEBUGFS=$T/nowhere run space dup
want_rc 2
want_err "2 spaces are named 'dup'.*pick one with --id: 5 6"
end

begin "space --id"
run space --id 5 --json
want_rc 0
want_key name '"dup"'
want_key unlinked true
end

begin "space --id: no such id"
run space --id 77
want_rc 5
want_err "no space with id 77"
end

begin "space --id: not a number"
run space --id x
want_rc 2
want_err "--id wants a whole number"
end

begin "blocks: states per space and the total"
run blocks
want_rc 0
want_out "^ +1 llama70b.tp0 +4 +6 +2 +4 +0 +16 +16$"
want_out "^ +2 qwen7b +10 +4 +0 +1 +1 +16 +16$"
want_out "^ +total +270 +10 +2 +5 +1 +288 +288$"
end

begin "blocks --json"
run blocks --json
want_rc 0
want_json
want_key free 4
want_key unbacked 16
end

begin "blocks --space: hash index and LRU of one space"
run blocks --space llama70b.tp0
want_rc 0
want_out "^ +3 published +2 +50 a1000000"
want_out "^ +12 cached +0 +50 a6000000"
no_out "b1000000"
[ "$(sed -n '/eviction order/,$p' "$T/out" | awk 'NR > 2 { print $1 }' | paste -sd,)" = "8,7,12,9" ] ||
	fail "LRU order is not 8,7,12,9"
end

begin "blocks --space --json"
run blocks --space qwen7b --json
want_rc 0
want_json
[ "$(grep -c '"hash":' "$T/out")" = 1 ] || fail "not 1 hash entry"
[ "$(grep -c '"block":' "$T/out")" = 2 ] || fail "not 1 hash + 1 lru entry"
want_key hash '"b100000000000000000000000000000000000000000000000000000000000000"'
end

begin "blocks --space: debugfs not mounted"
KVCTL_DEBUGFS=$T/nowhere run blocks --space qwen7b
want_rc 1
want_err "debugfs is not mounted \(mount -t debugfs none /sys/kernel/debug\)"
end

begin "blocks: a positional is refused (--space NAME)"
run blocks qwen7b
want_rc 2
want_err "a space goes with --space NAME"
end

begin "stats: name value lines"
run stats
want_rc 0
want_out "^pool.pool_bytes 268435456$"
want_out "^pool.evictions.tenant 3$"
want_out "^node1.in_spaces_bytes 33554432$"
want_out "^uid.1000.limit_bytes 1073741824$"
want_out "^space.1.name llama70b.tp0$"
want_out "^space.2.hit_rate_permille 666$"
end

begin "stats --json"
run stats --json
want_rc 0
want_json
want_key allocs 1000
want_key reclaimed_bytes 4194304
end

begin "stats --prometheus: names, labels, HELP/TYPE before samples"
run stats --prometheus
want_rc 0
want_out '^# TYPE kvpool_pool_bytes gauge$'
want_out '^kvpool_pool_bytes 268435456$'
want_out '^kvpool_up 1$'
want_out '^kvpool_evictions_total\{cause="quota"\} 1$'
want_out '^kvpool_evictions_total\{cause="admin"\} 5$'
want_out '^kvpool_space_cached_blocks\{space="llama70b.tp0",id="1"\} 4$'
want_out '^kvpool_space_evictions_total\{space="qwen7b",id="2",cause="tenant"\} 3$'
want_out '^kvpool_node_free_bytes\{node="1"\} 100663296$'
want_out '^kvpool_uid_limit_bytes\{uid="1000"\} 1073741824$'
want_out '^kvpool_space_info\{space="dup",id="6",uid="0"\} 1$'
# Every sample line well-formed; every family typed once, before its samples,
# and its samples together.
bad=$(awk '
	/^# HELP / { next }
	/^# TYPE / { if ($3 in typed) { print "twice: " $3 } typed[$3] = 1; cur = $3; next }
	{
		if ($0 !~ /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? [0-9]+(\.[0-9]+)?$/) { print "malformed: " $0 }
		name = $0; sub(/[{ ].*/, "", name)
		if (!(name in typed)) print "untyped: " name
		if (name != cur) print "not with its family: " name
	}' "$T/out")
[ -z "$bad" ] || fail "$bad"
if command -v promtool >/dev/null; then
	promtool check metrics <"$T/out" >/dev/null 2>&1 || fail "promtool check metrics"
fi
end

begin "stats: --json and --prometheus together"
run stats --json --prometheus
want_rc 2
want_err "pick one"
end

begin "check: ok, status 0"
run check
want_rc 0
want_out "^ok$"
end

begin "check --json"
run check --json
want_rc 0
want_json
want_key ok true
end

chmod 600 "$G/check"
printf 'space 1 (llama70b.tp0): free 3 + owned 6 != 9\nnode0: free 1 + in_spaces 2 + held 0 != reserved 4\n' >"$G/check"
chmod 400 "$G/check"
begin "check: violations, status 1"
run check
want_rc 1
want_out "^space 1 \(llama70b.tp0\): free 3"
want_out "^node0: free 1"
want_err "check: 2 violations"
end

begin "check --json with violations"
run check --json
want_rc 1
want_json
want_key ok false
[ "$(grep -c '^    "' "$T/out")" = 2 ] || fail "not 2 violations"
end
fresh

begin "check: debugfs missing"
KVCTL_DEBUGFS=$T/nowhere run check
want_rc 1
want_err "not mounted"
end

# ---- top ---------------------------------------------------------------------------

begin "top --count 2: two frames, rates from the second"
run top --count 2 --interval 0.05
want_rc 0
want_out "sample 1/2"
want_out "sample 2/2"
want_out "evictions/s 0.0"
want_out "^node0 "
want_out "^ +1 llama70b.tp0 "
no_out $'\033'
end

begin "top --json: evictions/s from successive samples"
"$KVCTL" top --json --count 2 --interval 0.7 >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do
	[ -s "$T/out" ] && break
	sleep 0.02
done
chmod 644 "$S/evictions"
echo "quota=11 pool=2 tenant=3 reclaim=4 admin=5" >"$S/evictions"
wait $pid
RC=$?
want_rc 0
want_json --lines
[ "$(wc -l <"$T/out")" = 2 ] || fail "not 2 lines"
line2=$(sed -n 2p "$T/out")
echo "$line2" >"$T/out"
want_key evictions_delta 10
want_key evictions_total 25
dt=$("$JSONCHECK" --get dt <"$T/out")
eps=$("$JSONCHECK" --get evictions_per_s <"$T/out")
awk -v dt="$dt" -v e="$eps" 'BEGIN { exit !(dt > 0.6 && e > 0 && (e * dt > 9.99 && e * dt < 10.01)) }' ||
	fail "evictions_per_s $eps x dt $dt is not 10"
end
fresh

begin "top: bad --interval, bad --count"
run top --interval 0
want_rc 2
want_err "--interval wants a number of seconds"
run top --count many
want_rc 2
want_err "--count wants a whole number"
end

# ---- set ---------------------------------------------------------------------------

begin "set pool_bytes=512M writes bytes, shows old -> new"
run set pool_bytes=512M
want_rc 0
want_file "$S/pool_bytes" 536870912
want_out "^pool_bytes: 268435456 \(256.0 MiB\) -> 536870912 \(512.0 MiB\)$"
end

begin "set several pairs at once"
run set min_cached_bytes=64M event_queue_max=1024 shrinker_enabled=off uid_limit_default_bytes=2G
want_rc 0
want_file "$S/min_cached_bytes" 67108864
want_file "$S/event_queue_max" 1024
want_file "$S/shrinker_enabled" 0
want_file "$S/uid_limit_default_bytes" 2147483648
want_out "^event_queue_max: 65536 -> 1024$"
end

begin "set shrinker_enabled=yes, 64KiB sizes"
run set shrinker_enabled=yes min_cached_bytes=64KiB
want_rc 0
want_file "$S/shrinker_enabled" 1
want_file "$S/min_cached_bytes" 65536
end

begin "set uid_limit=UID:SIZE and uid_limit.UID=SIZE"
run set uid_limit=1000:8G
want_rc 0
want_file "$S/uid_limit" "1000 8589934592"
want_out "uid 1000 limited to 8.0 GiB"
run set uid_limit.2000=0
want_rc 0
want_file "$S/uid_limit" "2000 0"
want_out "uid 2000 has no limit of its own"
end
fresh

begin "set: refs_per_fd_max in range, and refused at 0 or 2^31"
run set refs_per_fd_max=1000
want_rc 0
want_file "$S/refs_per_fd_max" 1000
for v in 0 2147483648 1k; do
	run set "refs_per_fd_max=$v"
	want_rc 2
	want_err "refs_per_fd_max wants a whole number from 1 to 2147483647"
done
want_file "$S/refs_per_fd_max" 1000
end
fresh

begin "set: unknown key lists the valid keys, writes nothing"
run set pool_size=1G
want_rc 2
want_err "unknown key 'pool_size'"
want_err "valid keys: pool_bytes min_cached_bytes uid_limit_default_bytes uid_limit event_queue_max refs_per_fd_max spaces_per_uid_max shrinker_enabled"
want_file "$S/pool_bytes" 268435456
end

begin "set: bad size says the expected form"
run set pool_bytes=lots
want_rc 2
want_err "pool_bytes wants a size like 512M or 2G, not 'lots'"
want_err "whole bytes with an optional K, M, G or T suffix"
want_file "$S/pool_bytes" 268435456
end

for bad in 2GB 1.5G -1 "" 12X 0x100; do
	begin "set: pool_bytes='$bad' refused"
	run set "pool_bytes=$bad"
	want_rc 2
	want_err "pool_bytes wants a size like 512M or 2G"
	want_file "$S/pool_bytes" 268435456
	end
done

begin "set: a size past 2^64 is refused, not wrapped"
run set min_cached_bytes=99999999999999999999
want_rc 2
want_err "too large"
run set min_cached_bytes=17179869184G
want_rc 2
want_err "too large"
want_file "$S/min_cached_bytes" 0
end

# A fake meminfo: 4 GiB of memory, 2 GiB available; the fake pool is 256 MiB.
printf 'MemTotal:        4194304 kB\nMemFree:         1048576 kB\nMemAvailable:    2097152 kB\n' >"$T/meminfo"
export KVCTL_MEMINFO=$T/meminfo

begin "set: pool_bytes beyond MemTotal is refused, even with --force"
run set pool_bytes=5G
want_rc 2
want_err "pool_bytes=5.0 GiB is more than this host's memory \(MemTotal 4.0 GiB\).*--force does not override"
run set --force pool_bytes=5G
want_rc 2
want_file "$S/pool_bytes" 268435456
end

begin "set: growing the pool past MemAvailable needs --force"
run set pool_bytes=3G
want_rc 2
want_err "growing the pool by 2.8 GiB is more than MemAvailable \(2.0 GiB\).*add --force"
want_file "$S/pool_bytes" 268435456
run set pool_bytes=2G
want_rc 0
want_file "$S/pool_bytes" 2147483648
run set --force pool_bytes=3G
want_rc 0
want_file "$S/pool_bytes" 3221225472
end
fresh

begin "set: event_queue_max out of range or with a suffix"
for v in 8 2000000 64K abc; do
	run set "event_queue_max=$v"
	want_rc 2
	want_err "event_queue_max wants a whole number from 16 to 1048576"
done
want_file "$S/event_queue_max" 65536
end

begin "set: shrinker_enabled=maybe"
run set shrinker_enabled=maybe
want_rc 2
want_err "shrinker_enabled wants 1 or 0"
end

begin "set: bad uid_limit values"
for v in abc 1000 1000: :8G 4294967295:1G -1:1G 1000:lots; do
	run set "uid_limit=$v"
	want_rc 2
	want_err "uid_limit"
done
run set uid_limit=4294967295:1G
want_err "UID must be 0 to 4294967294"
end

begin "set: validated before writing: a bad pair writes nothing"
run set event_queue_max=2048 pool_bytes=bad
want_rc 2
want_file "$S/event_queue_max" 65536
end

begin "set: not KEY=VALUE"
run set pool_bytes
want_rc 2
want_err "'pool_bytes' is not KEY=VALUE"
run set =5
want_rc 2
end

begin "set: nothing to set"
run set
want_rc 2
want_err "nothing to set"
end

begin "set: a directory where a file should be (EISDIR)"
chmod 755 "$S"
rm -f "$S/min_cached_bytes"
mkdir "$S/min_cached_bytes"
run set min_cached_bytes=1M
want_rc 1
want_err "min_cached_bytes failed: it is a directory"
end
fresh

if unpriv_ok; then
	begin "set without root: permission denied names the file, status 4"
	run_unpriv set event_queue_max=1024
	want_rc 4
	want_err "permission denied writing $S/event_queue_max: the kvpool tunables are writable by root only; run kvctl as root"
	want_file "$S/event_queue_max" 65536
	end

	begin "check without root: debugfs is root's, status 4"
	run_unpriv check
	want_rc 4
	want_err "permission denied reading $G/check"
	end

	begin "destroy and drop-cached without root: status 4"
	run_unpriv destroy qwen7b
	want_rc 4
	want_err "permission denied writing $S/destroy_space"
	run_unpriv drop-cached '*'
	want_rc 4
	want_err "permission denied writing $S/drop_cached"
	end

	begin "read commands work without root (no debugfs extras)"
	run_unpriv space llama70b.tp0
	want_rc 0
	want_out "as root, debugfs adds"
	end
else
	skip "permission tests" "running as root without setpriv(1): root passes every mode check"
fi

# ---- destroy, drop-cached ------------------------------------------------------------

begin "destroy NAME writes the name"
run destroy llama70b.tp0
want_rc 0
want_file "$S/destroy_space" llama70b.tp0
want_out "destroyed space 'llama70b.tp0'; its 2 joined descriptors keep it alive"
end

begin "destroy: bad or missing name"
run destroy 'a/b'
want_rc 2
want_err "'a/b' is not a space name"
run destroy
want_rc 2
want_err "which space"
run destroy '*'
want_rc 2
run destroy a b
want_rc 2
want_err "one space at a time"
end

begin "drop-cached NAME and '*'"
run drop-cached qwen7b
want_rc 0
want_file "$S/drop_cached" qwen7b
want_out "dropped the cached blocks of qwen7b"
run drop-cached '*'
want_rc 0
want_file "$S/drop_cached" '*'
want_out "of every space"
end
fresh

# ---- module not loaded ----------------------------------------------------------------

for c in status spaces "space x" blocks "blocks --space x" stats "stats --json" check \
	"set pool_bytes=1G" "destroy x" "drop-cached x" "top --count 1"; do
	begin "no module: kvctl $c, status 3"
	# shellcheck disable=SC2086	# the command's words
	KVCTL_SYSFS=$T/missing run $c
	want_rc 3
	want_err "kvpool module not loaded: $T/missing missing; load it with 'modprobe kvpool' \(or insmod kmod/kvpool.ko\)"
	end
done

begin "no module via --sysfs-root"
run status --sysfs-root "$T/empty/kvpool"
want_rc 3
want_err "kvpool module not loaded: $T/empty/kvpool missing.*--sysfs-root"
run --sysfs-root="$T/empty/kvpool" spaces
want_rc 3
end

begin "no module: --sysfs-root is an empty directory"
mkdir -p "$T/empty"
run status --sysfs-root "$T/empty"
want_rc 3
want_err "kvpool module not loaded: $T/empty/pool_bytes missing"
run --sysfs-root "$T/empty" set event_queue_max=64
want_rc 3
end

begin "no module: stats --prometheus still says kvpool_up 0"
KVCTL_SYSFS=$T/missing run stats --prometheus
want_rc 3
want_out "^kvpool_up 0$"
end

begin "--debugfs-root and --sysfs-root options override the environment"
env -u KVCTL_SYSFS -u KVCTL_DEBUGFS "$KVCTL" --sysfs-root "$S" --debugfs-root "$G" check >"$T/out" 2>"$T/err"
RC=$?
want_rc 0
want_out "^ok$"
end

begin "a sysfs file with garbage: named, status 1"
chmod 644 "$S/allocs"
echo lots >"$S/allocs"
run status
want_rc 1
want_err "$S/allocs: unexpected contents"
end
fresh

begin "a missing sysfs file: named, status 1"
rm -f "$S/prefix_hits"
run status
want_rc 1
want_err "reading $S/prefix_hits failed: no such file"
end
fresh

# ---- size --------------------------------------------------------------------------------
#
# Expected bytes, computed by hand (2 x batch x tokens x layers x kv_heads x
# head_dim x bytes per element, plus scales per vector of head_dim elements):
#   Llama-3-8B fp16, 8192 tok: 2*32*8*128*2 = 131072 B/token; x8192 = 1073741824
#   Llama-3-70B fp16, 4096 tok, batch 8, tp 4: 2*80*8*128*2 = 327680 B/token;
#     x32768 = 10737418240; per rank 2 heads: 2684354560
#   Qwen2.5-7B fp8 (+fp32 scale per token per head): (128+4) B/vector;
#     28*2*4*132 = 29568 B/token; x32768 = 968884224
#   Gemma-2-9B bf16, 8192 tok: 2*42*8*256*2 = 344064 B/token; x8192 = 2818572288
#   Llama-3.1-405B fp4 (NVFP4, fp8 scale per 16): 64+8 = 72 B/vector;
#     126*2*8*72 = 145152 B/token; x131072 = 19025362944; tp 16 > 8 heads:
#     1 head per rank, 126*2*72 = 18144 B/token/rank, x131072 = 2378170368
#   Mistral-7B int4 (fp16 scale per 32): 64+4*2 = 72 B/vector; 32*2*8*72 =
#     36864 B/token; x1000 tokens x batch 2 = 73728000
#   Qwen2.5-72B mxfp4 (E8M0 per 32): 64+4 = 68; 80*2*8*68 = 87040; x1024 = 89128960
#   Mixtral-8x7B int8 --no-scales, 2048 tok: 32*2*8*128 = 65536; x2048 = 134217728
#   custom fp32: 2*2*3*5*4 = 240 B/token (2 layers, 3 heads, dim 5); x7 x11 = 18480
#   DeepSeek-V3 (MLA, 512+64 latent) fp16, 4096 tok: 61*576*2 = 70272 B/token;
#     x4096 = 287834112, the same on every one of 8 ranks
#   Llama-3-8B fp16 tp 2, 16-token blocks: 32*2*4*128*2*16 = 1048576 B/block/rank

size_case() {	# name expected-bytes expected-bytes_per_token expected-bytes_per_rank args...
	local name=$1 b=$2 bpt=$3 bpr=$4
	shift 4
	begin "size $name"
	run size --json "$@"
	want_rc 0
	want_json
	want_key bytes "$b"
	want_key bytes_per_token "$bpt"
	want_key bytes_per_rank "$bpr"
	end
}
size_case "Llama-3-8B fp16" 1073741824 131072 1073741824 --model llama-3-8b --tokens 8192
size_case "Llama-3-70B fp16 batch 8 tp 4" 10737418240 327680 2684354560 \
	--model Llama-3-70B --tokens 4096 --batch 8 --tp 4
size_case "Qwen2.5-7B fp8" 968884224 29568 968884224 --model qwen2.5-7b --tokens 32k --dtype fp8
size_case "Gemma-2-9B bf16" 2818572288 344064 2818572288 --model gemma-2-9b --tokens 8192 --dtype bf16
size_case "Llama-3.1-405B fp4 tp 16" 19025362944 145152 2378170368 \
	--model meta-llama/Meta-Llama-3.1-405B-Instruct --tokens 128k --dtype fp4 --tp 16
size_case "Mistral-7B int4 batch 2" 73728000 36864 73728000 \
	--model mistral-7b-instruct-v0.3 --tokens 1000 --batch 2 --dtype int4
size_case "Qwen2.5-72B mxfp4" 89128960 87040 89128960 --model qwen2.5-72b --tokens 1024 --dtype mxfp4
size_case "Mixtral-8x7B int8 without scales" 134217728 65536 134217728 \
	--model mixtral-8x7b --tokens 2048 --dtype int8 --no-scales
size_case "custom fp32" 18480 240 18480 --layers 2 --kv-heads 3 --head-dim 5 --tokens 7 --batch 11 --dtype fp32
size_case "DeepSeek-V3 MLA tp 8" 287834112 70272 287834112 --model deepseek-v3 --tokens 4096 --tp 8

begin "size: tp replication and block bytes in JSON"
run size --json --model llama-3.1-405b --tokens 16 --dtype fp4 --tp 16
want_key replicated true
want_key ranks_per_head 2
want_key kv_heads_per_rank 1
want_key bytes_all_ranks 4644864
run size --json --model llama-3-8b --tokens 8192 --tp 2 --block-tokens 16
want_key block_bytes_per_rank 1048576
want_key blocks_per_rank 512
want_key kv_heads_per_rank 4
want_key replicated false
end

begin "size: text says replication and the formula"
run size --model llama-3.1-405b --tokens 128k --dtype fp4 --tp 16
want_rc 0
want_out "^per token +141.8 KiB \(145152 B\) = 126 layers x 2 \(K, V\) x 8 heads x 72 B"
want_out "8 KV heads < tp 16, so each head is replicated on 2 ranks"
want_out "scales: one fp8 \(E4M3\) scale per 16 elements \(NVFP4\)"
run size --model deepseek-v2-lite --tokens 1000 --tp 2
want_out "MLA latent is replicated"
end

begin "size: overrides of a preset"
run size --json --model llama-3-8b --layers 16 --tokens 8192
want_key bytes 536870912
want_key model_overridden true
end

begin "size --list-models (text and JSON)"
run size --list-models
want_rc 0
want_out "^Llama-3-70B +80 +8 +128 +320.0 KiB"
want_out "^Qwen2.5-7B +28 +4 +128"
want_out "^Gemma-2-9B +42 +8 +256"
want_out "^DeepSeek-V3 +61 +MLA"
run size --list-models --json
want_rc 0
want_json
want_key name '"Llama-2-7B"'
end

begin "size: errors say what is wrong and how"
run size --model llama-3-8b --tokens 8192 --tp 3
want_rc 2
want_err "8 KV heads do not split evenly over --tp 3"
run size --model llama-3-8b --tokens 8192 --tp 12
want_rc 2
want_err "--tp 12 is more than the 8 KV heads but not a multiple"
run size --model gpt-9 --tokens 1
want_rc 2
want_err "unknown --model 'gpt-9'"
want_err "list-models"
run size --model llama-3-8b --tokens 1 --dtype fp6
want_rc 2
want_err "unknown --dtype 'fp6'"
want_err "dtypes: fp32 fp16 bf16 fp8 int8 fp4 mxfp4 int4"
run size --model llama-3-8b
want_rc 2
want_err "give --tokens N"
run size --layers 32 --kv-heads 8 --tokens 5
want_rc 2
want_err "missing: --head-dim"
run size --model deepseek-v3 --kv-heads 8 --tokens 5
want_rc 2
want_err "uses MLA"
run size --model llama-3-8b --tokens 0
want_rc 2
want_err "--tokens wants a whole number from 1"
run size --layers x --kv-heads 8 --head-dim 128 --tokens 5
want_rc 2
want_err "--layers wants a whole number"
run size --layers 100000 --kv-heads 65536 --head-dim 65536 --tokens 1048576M --batch 4294967296
want_rc 2
want_err "does not fit in 64 bits"
run size llama
want_rc 2
want_err "--model NAME"
end

begin "size needs no module"
KVCTL_SYSFS=$T/missing run size --model qwen2.5-7b --tokens 1
want_rc 0
end

# ---- the man page covers every command and key ---------------------------------------

MAN=$HERE/../../../Documentation/man/kvctl.8
# ---- tiers: the SSD tiers below a directory, from their stats files --------
# run, for at most 10 s: a reader that loops must fail, not hang the suite
run_bounded() {
	timeout 10 "$KVCTL" "$@" >"$T/out" 2>"$T/err"
	RC=$?
}
TD="$T/tiers"
ID1=106aae1805aa70e9f7b0f851fd66440ca4ba3d69c9f3afe16017dc58a82a8f63
ID2=ffffae1805aa70e9f7b0f851fd66440ca4ba3d69c9f3afe16017dc58a82a8f63
ID3=3333ae1805aa70e9f7b0f851fd66440ca4ba3d69c9f3afe16017dc58a82a8f63
mkdir -p "$TD/$ID1" "$TD/$ID2" "$TD/$ID3" "$TD/not-an-identity"
# libkvrt's layout of the file: key=value lines (tier_ssd.c); ID1 as 0.6
# wrote it, ID3 as 0.7 does, with the write-back queue
printf 'kind=ssd\npid=%d\nopen=1\nupdated=%d\ncapacity_bytes=16777216\nused_bytes=65536\nblocks=16\nhits=30\nmisses=10\nstores=16\nstore_skips=2\nread_bytes=122880\nwrite_bytes=65536\nevictions=3\nchecksum_errors=1\nio_errors=2\n' \
	$$ "$(date +%s)" > "$TD/$ID1/stats"
printf 'kind=ssd\npid=%d\nopen=1\nupdated=%d\ncapacity_bytes=16777216\nused_bytes=32768\nblocks=8\nhits=0\nmisses=0\nstores=8\nstore_skips=0\nread_bytes=0\nwrite_bytes=32768\nevictions=0\nchecksum_errors=0\nio_errors=0\nqueued=5\ndeferred=13\n' \
	$$ "$(date +%s)" > "$TD/$ID3/stats"

begin "tiers DIR: one line per identity, figures from its stats file"
run_bounded tiers "$TD"
want_rc 0
want_out "^3 SSD tiers below $TD\$"
want_out "^106aae1805aa  open by $$ +16  64.0 KiB / 16.0 MiB +75.0% +16 +3 +1 +2 +0  [0-9]+s ago\$"
want_out "^3333ae1805aa  open by $$ +8  32.0 KiB / 16.0 MiB +0.0% +8 +0 +0 +0 +5  [0-9]+s ago\$"
want_out "^ffffae1805aa  \? +\(no stats file yet"
no_out "not-an-identity"
end

begin "tiers DIR --json: every field, per identity"
run_bounded tiers "$TD" --json
want_rc 0
want_json
want_key identity "\"$ID1\""
want_key checksum_errors 1
want_key capacity_bytes 16777216
want_out '"have_stats": false'
end

begin "tiers DIR --prometheus: kvpool_tier_* labelled by dir and identity"
run_bounded tiers "$TD" --prometheus
want_rc 0
want_out "^# TYPE kvpool_tier_hits_total counter\$"
want_out "^kvpool_tier_evictions_total\\{dir=\"$TD\",identity=\"$ID1\"\\} 3\$"
want_out "^kvpool_tier_blocks\\{dir=\"$TD\",identity=\"$ID1\"\\} 16\$"
want_out "^# TYPE kvpool_tier_queued gauge\$"
want_out "^kvpool_tier_queued\\{dir=\"$TD\",identity=\"$ID3\"\\} 5\$"
want_out "^kvpool_tier_deferred_total\\{dir=\"$TD\",identity=\"$ID3\"\\} 13\$"
want_out "^kvpool_tier_queued\\{dir=\"$TD\",identity=\"$ID1\"\\} 0\$"
no_out "identity=\"$ID2\""
end

begin "stats --tiers DIR: the pool's figures, then the tiers', in each format"
run_bounded stats --prometheus --tiers "$TD"
want_rc 0
want_out "^kvpool_up 1\$"
want_out "^kvpool_tier_queued\\{dir=\"$TD\",identity=\"$ID3\"\\} 5\$"
run_bounded stats --tiers "$TD" --json
want_rc 0
want_json
want_key pool_bytes 268435456
want_out "\"deferred\": 13"
want_out '"ssd_tiers": \{'
run_bounded stats --tiers "$TD"
want_rc 0
want_out "^pool.pool_bytes 268435456\$"
want_out "^3 SSD tiers below $TD\$"
end

begin "stats --tiers: without the module the tiers still reach a scrape; errors"
KVCTL_SYSFS=$T/missing run_bounded stats --prometheus --tiers "$TD"
want_rc 3
want_out "^kvpool_up 0\$"
want_out "^kvpool_tier_blocks\\{dir=\"$TD\",identity=\"$ID1\"\\} 16\$"
run stats --tiers "$T/nowhere"
want_rc 1
want_err "stats: cannot read the tiers' directory $T/nowhere: No such file or directory"
no_out .
run stats --tiers "$TD" --tiers "$TD"
want_rc 2
want_err "--tiers names one directory: give it once"
run spaces --tiers "$TD"
want_rc 2
end

begin "tiers: a directory that is not there, no directory, two formats"
run tiers "$T/nowhere"
want_rc 1
want_err "tiers: cannot read $T/nowhere: No such file or directory"
run tiers
want_rc 2
want_err "name the directory the tiers were opened in"
run tiers "$TD" --json --prometheus
want_rc 2
want_err "two formats: pick one"
end

begin "kvctl.8 names every command and set key, and renders cleanly"
if [ -f "$MAN" ]; then
	for w in status spaces space blocks top set check stats destroy drop-cached size tiers \
		pool_bytes min_cached_bytes uid_limit_default_bytes uid_limit event_queue_max \
		shrinker_enabled --list-models --prometheus --sysfs-root --debugfs-root --tiers; do
		grep -q -- "$(printf '%s' "$w" | sed 's/-/\\\\-/g')" "$MAN" || fail "kvctl.8 lacks $w"
	done
	if command -v groff >/dev/null; then
		w=$(LC_ALL=C groff -man -Tutf8 -ww -z "$MAN" 2>&1)
		[ -z "$w" ] || fail "groff: $w"
	fi
else
	fail "$MAN missing"
fi
end

if [ -z "$PY" ]; then
	echo "# python3 not found: JSON checked with jsoncheck only"
fi
echo "$passed passed, $failed failed${skipped:+, $skipped skipped}" | sed 's/, 0 skipped$//'
[ "$failed" -eq 0 ]
