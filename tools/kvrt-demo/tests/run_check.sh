#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# run_check.sh KVRT_DEMO: the host-side checks of `make check`: a small run
# on the embedded backend must pass the equivalence check and hit the
# prefix cache; a checkpoint written by --gen-checkpoint must load and give
# the same tokens as the same weights generated in memory; the documented
# exit statuses for bad options and a missing space.  TAP output.

set -u
DEMO=${1:-./kvrt-demo}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-demo-check.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
n=0
failed=0

result() {	# result 0|1 description
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
	fi
}

# Runs the demo; its output goes to $TMP/out, its status to $rc.
run() {
	"$DEMO" --backend embedded --no-progress "$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
}

field() {	# the value of key=VALUE on the summary line
	sed -n "s/^summary: .*\\b$1=\\([^ ]*\\).*/\\1/p" "$TMP/out"
}

run --preset tiny --expect-hits
ok=1
if [ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" && [ "$(field hits)" -gt 0 ] &&
	[ "$(field offloaded_bytes)" -gt 0 ] && [ "$(field fetched_bytes)" -gt 0 ]; then
	ok=0
fi
result $ok "tiny run: equivalence PASS, $(field hits) prefix hits, $(field offloaded_bytes) bytes offloaded, $(field fetched_bytes) fetched"
[ $ok = 0 ] || cat "$TMP/out" "$TMP/err"
grep '^equivalence' "$TMP/out" | sed 's/^/# /'
tokens_mem=$(field tokens)

run --preset tiny --decode-kernel decode --batch-tokens 24 --block-tokens 8 --kv-dtype f32 \
	--workload-seed 5
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out"; echo $?) \
	"kvrt_attn_decode for decoding rows, 8-token blocks, f32 KV, small budget: PASS"

"$DEMO" --preset tiny --gen-checkpoint "$TMP/model.bin" >"$TMP/out" 2>"$TMP/err"
result $? "--gen-checkpoint writes $(stat -c %s "$TMP/model.bin" 2>/dev/null) bytes"
run --preset tiny --checkpoint "$TMP/model.bin" --expect-hits
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
	[ "$(field tokens)" = "$tokens_mem" ]; echo $?) \
	"the written checkpoint loads and generates the same tokens ($tokens_mem)"

run --preset tiny --inject-fault
result $([ $rc = 1 ] && grep -q '^equivalence: FAIL' "$TMP/out"; echo $?) \
	"a corrupted fetch is caught: exit 1, $(grep -o '^equivalence: FAIL: .*' "$TMP/out" | head -c 90)"
run --preset tiny --inject-fault --decode-kernel decode
result $([ $rc != 0 ] || ! grep -q 'logits were bitwise identical' "$TMP/out"; echo $?) \
	"with --decode-kernel decode (tokens only) the corruption still shows in the logits line"

# The GPU path on the emulated driver (cuda/tests/emu_libcuda.cpp): head dim
# 64, as the GPU kernels need.  The check must pass, and fail on a wrong output.
EMU=${KVRT_DEMO_EMU:-$(cd "$(dirname "$0")/../../../cuda" && pwd)/build/emu/libcuda-emu.so}
GPU_TINY=(--preset tiny --dim 128 --heads 2 --kv-heads 1 --device gpu)
if [ -f "$EMU" ]; then
	KVRT_LIBCUDA=$EMU run "${GPU_TINY[@]}" --expect-hits
	result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
		grep -q '^gpu check: PASS' "$TMP/out" && grep -q '^device    gpu' "$TMP/out"; echo $?) \
		"--device gpu (emulated driver): equivalence PASS, $(grep -o '^gpu check: PASS: [0-9]* rows' "$TMP/out")"
	KVRT_LIBCUDA=$EMU run "${GPU_TINY[@]}" --inject-gpu-fault
	result $([ $rc = 1 ] && grep -q '^gpu check: FAIL' "$TMP/out"; echo $?) \
		"a wrong GPU attention output is caught: exit 1, $(grep -o '^gpu check: FAIL: .*tolerance' "$TMP/out" | tail -c 60)"
else
	result 1 "the emulated driver $EMU is not built (make -C cuda build/emu/libcuda-emu.so)"
fi
KVRT_LIBCUDA=/nonexistent/libcuda.so.1 run "${GPU_TINY[@]}"
result $([ $rc = 3 ] && grep -q 'no usable GPU' "$TMP/err"; echo $?) \
	"--device gpu without a driver: exit 3, $(head -c 70 "$TMP/err")"
KVRT_LIBCUDA=/nonexistent/libcuda.so.1 run "${GPU_TINY[@]/gpu/auto}"
result $([ $rc = 0 ] && grep -q '^device    cpu.*auto: not the GPU' "$TMP/out"; echo $?) \
	"--device auto without a driver runs on the CPU and says why"
run --preset tiny --device gpu
result $([ $rc = 2 ] && grep -q 'head dim 64, 128 or 256' "$TMP/err"; echo $?) \
	"--device gpu with head dim 16: exit 2, $(head -c 80 "$TMP/err")"
run --preset tiny --kv-dtype fp4
result $([ $rc = 2 ]; echo $?) "bad --kv-dtype: exit 2"
run --preset tiny --role second --space "kvrt-demo-check-$$"
result $([ $rc = 3 ] && grep -q 'no such space' "$TMP/err"; echo $?) \
	"--role second without a first: exit 3, 'no such space'"
run --preset tiny --checkpoint "$TMP/missing.bin"
result $([ $rc = 3 ]; echo $?) "missing checkpoint: exit 3"
run --preset tiny --system-tokens 600
result $([ $rc = 2 ] && grep -q "seq_len" "$TMP/err"; echo $?) \
	"conversation longer than seq_len: exit 2"

echo "1..$n"
echo "$((n - failed)) passed, $failed failed"
[ $failed = 0 ]
