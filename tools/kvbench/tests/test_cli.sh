#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_cli.sh: kvbench attn's options (make -C tools/kvbench check).  Each
# bad value must exit 2 and name the option and what it accepts; a small
# valid run with --block-tokens must print one parsable JSON line per
# case, every decode and gather case named _btN, none failing.  A short
# kvbench pool --only core must print its alloc/free and prefix-lookup
# cases, each measured, and kvbench pool --spaces must refuse what is not
# a count of 0 to 1,000,000.  The shared option parser, through the
# other subcommands' tables: common options' errors, the usage after an
# unknown option, a checked pair of options, generated help lines, demo's
# own options and its "--"; gpu-attn --prefill's items (BxQxCTX, Q <= CTX,
# at most 8) refused with the rule they break.  kvbench tier, short, must print its four
# cases against fio, leave no file behind, and say how to get fio when it
# is missing; with --redis, four more against redis-benchmark.  (The ioctl cases need /dev/kvpool: `make bench-pool` runs
# them in the VM.)
#
# Output is TAP-like; the last line is "N passed, N failed".

set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KVBENCH=${KVBENCH:-$HERE/../kvbench}
[ -x "$KVBENCH" ] || { echo "test_cli.sh: $KVBENCH missing: run make -C tools/kvbench" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/kvbench-test.XXXXXX")
trap 'rm -rf "$T"' EXIT

n=0 passed=0 failed=0

# result NAME WHY: one TAP line; an empty WHY passes.
result() {
	n=$((n + 1))
	if [ -z "$2" ]; then
		passed=$((passed + 1))
		echo "ok $n - $1"
	else
		failed=$((failed + 1))
		echo "not ok $n - $1: $2"
	fi
}

# check NAME WANT_RC REGEX ARGS...: the exit status, and REGEX in stderr
# (for status 0: in stdout).
check() {
	local name=$1 want=$2 re=$3 rc file=err
	shift 3
	"$KVBENCH" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ "$want" = 0 ] && file=out
	if [ "$rc" = "$want" ] && grep -qE -- "$re" "$T/$file"; then
		result "$name" ""
	else
		result "$name" "exit $rc (wanted $want), $file: $(head -c 300 "$T/$file")"
	fi
}

# json_cases AWK ARGS...: run kvbench ARGS (JSON lines expected) and set
# why: the exit status and stderr when it failed, else what AWK prints.
# Before AWK runs on a line, every line must be a result line of that
# subcommand, with name (the case), value and limit set; both must be > 0.
json_cases() {
	local check=$1 rc
	shift
	"$KVBENCH" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	if [ "$rc" != 0 ]; then
		why="exit $rc: $(head -c 300 "$T/err")"
		return
	fi
	why=$(awk -v bench="$1" '
		{
			head = "{\"bench\":\"" bench "\",\"case\":\""
			if (index($0, head) != 1 || !match($0, /"case":"[a-z0-9_]+"/)) {
				print "not a result line: " $0; next
			}
			name = substr($0, RSTART + 8, RLENGTH - 9)
			value = $0; sub(/.*"value":/, "", value); value += 0
			limit = $0; sub(/.*"limit":/, "", limit); limit += 0
			if (!(value > 0) || !(limit > 0))
				print "case " name ": value " value ", limit " limit
		}
		'"$check" "$T/out")
}

# want_cases "NAME ...": an awk END rule naming each case that never came.
want_cases() {
	echo "END { n = split(\"$1\", want, \" \"); for (i = 1; i <= n; i++) if (!(want[i] in seen)) print \"no case \" want[i] }"
}

check "--block-tokens 3 (not a power of two)" 2 \
	"--block-tokens wants a power of two from 1 to 256, not '3'" attn --block-tokens 3
check "--block-tokens 0" 2 "--block-tokens wants a power of two from 1 to 256, not '0'" attn --block-tokens 0
check "--block-tokens 512 (too large)" 2 "--block-tokens wants a power of two from 1 to 256, not '512'" \
	attn --block-tokens 512
check "--block-tokens x (not a number)" 2 "--block-tokens wants a power of two from 1 to 256, not 'x'" attn --block-tokens x
check "--block-tokens without a value" 2 "--block-tokens needs a value \(--block-tokens N\)" \
	attn --block-tokens
check "--block-tokens 256 with --gib 0.1 (no block fits the shortest case)" 2 \
	"--block-tokens 256 needs --gib 0.5 or more" attn --block-tokens 256 --gib 0.1
check "--gib 0.01 (below the range)" 2 "--gib wants a size in \[0.05, 64\], not '0.01'" \
	attn --gib 0.01
check "--threads 300 (above the range)" 2 "--threads wants a number from 0 to 256, not '300'" \
	attn --threads 300
check "unknown option" 2 "unknown option '--block'" attn --block 64
check "usage names --block-tokens" 0 "--block-tokens N" attn --help

# The shared option parser (report.c), through other subcommands' tables:
# a common option's bad value, an unknown option listing the valid ones,
# --help generated from the table, demo's own table and its "--".
check "hash --reps 0 (a common option)" 2 "--reps wants a number from 1 to 99, not '0'" \
	hash --reps 0
check "hash --plot (no sweep to plot)" 2 "--plot: hash has no sweep to plot" hash --plot x.svg
check "copy --bogus: the usage after it lists copy's own options" 2 \
	"^  --mib M +bytes per array in MiB" copy --bogus
check "gpu-copy --batch-mib 16 --mib 8 (options checked together)" 2 \
	"--batch-mib 16 is more than --mib 8" gpu-copy --mib 8 --batch-mib 16
check "gpu-attn --kv-dtype x" 2 "--kv-dtype wants bf16, f16 or fp8, not 'x'" gpu-attn --kv-dtype x
check "gpu-attn --prefill 8x513x512 (Q > CTX)" 2 \
	"--prefill 8x513x512: Q \(513 new tokens\) is more than CTX \(512 tokens in all\)" \
	gpu-attn --prefill 8x513x512
for v in 0 8x0x512 8x512 8x512x4096x1 8xAx512 x512x4096 8x-5x512 \
	1x1x1,1x1x1,1x1x1,1x1x1,1x1x1,1x1x1,1x1x1,1x1x1,1x1x1 5000x1x16; do
	check "gpu-attn --prefill $v" 2 \
		"--prefill wants a list of 1 to 8 BxQxCTX items \(e.g. 8x512x4096\), not '$v'" \
		gpu-attn --prefill "$v"
done
check "gpu-attn --prefill 4096x512x4096 (too many query tokens)" 2 \
	"--prefill 4096x512x4096: B x Q is more than 1048576 query tokens" \
	gpu-attn --prefill 4096x512x4096
check "gpu-attn usage names --prefill and --no-prefill" 0 "--no-prefill" gpu-attn --help
check "gpu-attn usage: a continued help line" 0 \
	"^                    source tree, else ./bench/sdpa_peer.py\)$" gpu-attn --help
check "demo --reps (not one of demo's options)" 2 \
	"unknown option '--reps' \(kvrt-demo's own options go after --\)" demo --reps 3
check "demo usage names --" 0 "^  -- +the arguments after it go to kvrt-demo" demo --help
check "demo --modes without --json" 2 "--modes adds JSON lines: give it with --json" demo --modes

# kvbench demo --modes: beam search's K/V against independent copies and
# speculative decoding's target passes per token against plain decoding,
# from kvrt-demo runs that passed their own equivalence checks.  Beams of
# width 4 over shared prompts must need less K/V than 4 copies, and a draft
# whose tokens are ever accepted saves target passes (ratio > 1).
json_cases '
	name == "beam4_kv_bytes" { b = 1; r = $0; sub(/.*"ratio":/, "", r); if (!(r + 0 > 1)) print "beam ratio " r }
	name == "spec4_passes_per_token" { s = 1; r = $0; sub(/.*"ratio":/, "", r); if (!(r + 0 > 1)) print "spec ratio " r }
	END { if (!b) print "no beam4_kv_bytes line"; if (!s) print "no spec4_passes_per_token line" }' \
	demo --json --modes --quiet -- --preset tiny
result "demo --json --modes: beam K/V and speculative passes per token, both ratios > 1" "$why"

# A real run, small and short: 64-token blocks over 128 MiB.
json_cases '
	name ~ /^(decode_b|gather_read_b)/ {
		pat++
		if (name !~ /_bt64$/)
			print "case " name " lacks _bt64"
	}
	END { if (pat != 6) print pat + 0 " decode/gather cases, wanted 6" }' \
	attn --json --quiet --gib 0.125 --block-tokens 64 --reps 1 --rep-time 0.01
result "attn --block-tokens 64: 6 decode/gather cases named _bt64, all measured" "$why"

check "pool usage names the prefix lookup" 0 "1,000-block prefix" pool --help
check "pool usage names the SPACE_OPEN case and --spaces" 0 \
	"ioctl_space_open_spacesN: open \+ SPACE_OPEN" pool --help
check "pool --spaces 1000001 (above the range)" 2 \
	"--spaces wants a count of 0 to 1000000, not '1000001'" pool --spaces 1000001
check "pool --spaces x (not a number)" 2 "--spaces wants a count of 0 to 1000000, not 'x'" pool --spaces x
check "pool --spaces without a value" 2 "--spaces needs a value \(--spaces N\)" pool --spaces

# kvbench pool, in-process only (no device here), as short as it goes.
json_cases '
	{ seen[name] = 1 }
	'"$(want_cases "core_alloc_free_batch1 core_alloc_free_batch4096 core_lookup_prefix1000 core_lookup_prefix1000_colliding")" \
	pool --json --quiet --only core --reps 1 --rep-time 0.001
result "pool --only core: alloc/free and prefix lookup cases, all measured" "$why"

# kvbench tier: the SSD tier's store and fetch against fio, as short as it
# goes (4 MiB per block size, one repetition), in a scratch directory of
# ${KVRT_TIER_DIR:-/var/tmp} (O_DIRECT: not tmpfs).
TD=$(mktemp -d "${KVRT_TIER_DIR:-/var/tmp}/kvbench-tier-test.XXXXXX")
json_cases '
	{ seen[name] = 1 }
	name !~ /_wb_/ && $0 !~ /"limit_unit":"GB\/s fio O_DIRECT (read|write), io_uring/ { print "limit not fio: " $0 }
	name ~ /_wb_/ && $0 !~ /"limit_unit":"GB\/s write-through store, same run"/ { print "limit not write-through: " $0 }
	'"$(want_cases "ssd_store_256k ssd_fetch_256k ssd_store_wb_256k ssd_store_2048k ssd_fetch_2048k ssd_store_wb_2048k")" \
	tier --json --quiet --dir "$TD" --mib 4 --reps 1
result "tier: store and fetch at 256 KiB and 2 MiB against fio, write-back against write-through" "$why"
left=$(ls -A "$TD")
result "tier: its scratch files are gone afterwards" "${left:+left: $left}"
mkdir "$TD/bin" && printf '#!/bin/sh\nexit 127\n' > "$TD/bin/fio" && chmod +x "$TD/bin/fio"
PATH="$TD/bin:$PATH" check "tier without fio: exit 1, says how to get it" 1 "fio is not on \\\$PATH \\(Debian: apt-get install fio\\)" \
	tier --dir "$TD" --mib 4 --reps 1
# --redis: the Redis Cluster tier against redis-benchmark, on a cluster of
# selftests/redis/cluster.sh's.
if SEEDS=$(bash "$HERE/../../../selftests/redis/cluster.sh" start "$TD/redis"); then
	json_cases '
		$0 ~ /"case":"redis_/ { seen[name] = 1 }
		$0 ~ /"case":"redis_/ && name !~ /_wb_/ && $0 !~ /"limit_unit":"GB\/s redis-benchmark (SET|GET), same cluster/ { print "limit not redis-benchmark: " $0 }
		'"$(want_cases "redis_store_256k redis_fetch_256k redis_store_wb_256k redis_store_2048k redis_fetch_2048k redis_store_wb_2048k")" \
		tier --json --quiet --dir "$TD" --mib 4 --redis "$SEEDS" --redis-mib 4 --reps 1
	result "tier --redis: store and fetch at 256 KiB and 2 MiB, each against redis-benchmark" "$why"
	bash "$HERE/../../../selftests/redis/cluster.sh" stop "$TD/redis"
else
	result "tier --redis: a Redis Cluster started (selftests/redis/cluster.sh)" "no cluster"
fi
rm -rf "$TD"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
