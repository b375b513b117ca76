#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# gpu-run.sh [OUTDIR]: the GPU checks and benchmarks, run on a machine with
# an NVIDIA GPU, from the repository root.  OUTDIR is $1, else $OUT.
#
#  1. builds libkvrt (with nvcc: the kernels must be in it) and kvbench;
#  2. runs libkvrt's test_gpu (the plain build, against the shared
#     library) and keeps its TAP output;
#  3. runs kvbench gpu-attn --json, kvbench gpu-copy --json and kvbench
#     copy --json, each output kept raw in its own file;
#  4. writes OUTDIR/README.md: device, driver, date and command per file.
#
# Files are named DEVICE-DATE-COMMAND.EXT, DEVICE from nvidia-smi (e.g.
# NVIDIA-H100-80GB-HBM3), DATE as YYYYMMDD-HHMMSS (UTC):
#   ...-test_gpu.tap         test_gpu's TAP output (stdout and stderr)
#   ...-kvbench-gpu-attn.jsonl, .stderr   (likewise gpu-copy, copy)
#   ...-nvidia-smi.txt       nvidia-smi's report
#   ...-build.log            the build
#
# Exit status: non-zero, with a FAIL line, when the build fails, when
# test_gpu fails or skips its GPU part (a GPU machine must run it), or when
# a kvbench command fails; every step runs regardless, so the results that
# could be had are kept.
#
# Environment: KVRT_TEST_SEED, KVRT_TEST_CASES, KVRT_GPU_DEVICE pass on to
# test_gpu; GPU_RUN_ASAN=1 also runs the sanitized test_gpu; GPU_RUN_BENCH=0
# skips the benchmarks; KVBENCH_ARGS are added to every kvbench command
# (e.g. "--reps 3"); GPU_RUN_TIMEOUT seconds per step (default 1200).

set -u
OUTDIR=${1:-${OUT:-}}
if [ -z "$OUTDIR" ]; then
	echo "usage: bench/gpu-run.sh OUTDIR (or set \$OUT)" >&2
	exit 2
fi
if [ ! -f libkvrt/Makefile ] || [ ! -f tools/kvbench/Makefile ]; then
	echo "gpu-run.sh: run it from the repository root" >&2
	exit 2
fi
mkdir -p "$OUTDIR" || exit 2
TIMEOUT=${GPU_RUN_TIMEOUT:-1200}
JOBS=$(nproc 2>/dev/null || echo 4)
status=0

say() { echo "gpu-run: $*"; }
failed() { echo "gpu-run: FAIL: $*"; status=1; }

# ---- the machine ---------------------------------------------------------------
dev=0
[ -n "${KVRT_GPU_DEVICE:-}" ] && dev=$KVRT_GPU_DEVICE
if command -v nvidia-smi >/dev/null; then
	gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$dev" 2>/dev/null | head -1)
	driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i "$dev" 2>/dev/null | head -1)
	cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
else
	gpu_name="no-nvidia-smi"
	driver="unknown"
	cuda="unknown"
	failed "nvidia-smi not found: is this a GPU machine?"
fi
[ -n "$gpu_name" ] || gpu_name="unknown-gpu"
tag=$(echo "$gpu_name" | tr -c 'A-Za-z0-9._\n-' '-' | sed 's/--*/-/g; s/-$//')
when=$(date -u +%Y%m%d-%H%M%S)
day=$(date -u +%Y-%m-%d)
base="$OUTDIR/$tag-$when"
say "device $dev: $gpu_name, driver $driver, CUDA $cuda; files: $base-*"
nvidia-smi > "$base-nvidia-smi.txt" 2>&1 || true
rows=()
row() {	# file, command
	rows+=("| \`$(basename "$1")\` | $gpu_name | $driver (CUDA $cuda) | $day | \`$2\` |")
}

# ---- build ---------------------------------------------------------------------
say "building libkvrt, test_gpu and kvbench"
# no stale programs: what runs below was built now, or nothing runs
rm -f libkvrt/build/plain/test_gpu libkvrt/build/asan/test_gpu tools/kvbench/kvbench
{
	echo "# $(uname -a)"
	echo "# $(gcc --version | head -1)"
	echo "# nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none)"
	make -C libkvrt -j"$JOBS" &&
		make -C libkvrt -j"$JOBS" build/plain/test_gpu &&
		{ [ "${GPU_RUN_ASAN:-0}" != 1 ] || make -C libkvrt -j"$JOBS" build/asan/test_gpu; } &&
		make -C tools/kvbench
} > "$base-build.log" 2>&1
build=$?
if [ $build -ne 0 ]; then
	tail -30 "$base-build.log"
	failed "the build failed (exit $build); $base-build.log"
fi
if grep -q "GPU backend is compiled out" "$base-build.log"; then
	failed "libkvrt was built without nvcc: no kernels to test ($base-build.log)"
fi

# ---- test_gpu --------------------------------------------------------------------
run_test() {	# kind (plain, asan)
	local kind=$1 bin=libkvrt/build/$1/test_gpu out="$base-test_gpu${2:-}.tap" rc
	if [ ! -x "$bin" ]; then
		failed "$bin was not built"
		return
	fi
	say "running $kind test_gpu"
	(cd libkvrt && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		timeout "$TIMEOUT" "build/$kind/test_gpu") > "$out" 2>&1
	rc=$?
	row "$out" "libkvrt/build/$kind/test_gpu (make -C libkvrt build/$kind/test_gpu)"
	grep -E '^(not ok|# test_gpu:|# device|# GPU part|# largest|# calls)' "$out" | sed 's/^/    /'
	if [ $rc -ne 0 ]; then
		failed "$kind test_gpu exited with status $rc; $out"
	elif grep -qE '^not ok' "$out"; then
		failed "$kind test_gpu has failing tests; $out"
	elif grep -qE '^ok [0-9]+ - gpu_tests # SKIP' "$out"; then
		failed "$kind test_gpu skipped its GPU part: $(grep -m1 'SKIP' "$out" | sed 's/.*# SKIP //')"
	elif ! grep -qE '^ok [0-9]+ - decode_long_split_kv' "$out"; then
		failed "$kind test_gpu did not get to the attention tests; $out"
	fi
}
run_test plain
[ "${GPU_RUN_ASAN:-0}" = 1 ] && run_test asan -asan

# ---- kvbench -------------------------------------------------------------------------
bench() {	# subcommand
	local sub=$1 out="$base-kvbench-$1.jsonl" err="$base-kvbench-$1.stderr" rc
	# shellcheck disable=SC2086
	local cmd="tools/kvbench/kvbench $sub --json --progress ${KVBENCH_ARGS:-}"
	if [ ! -x tools/kvbench/kvbench ]; then
		failed "tools/kvbench/kvbench was not built"
		return
	fi
	say "running $cmd"
	# shellcheck disable=SC2086
	timeout "$TIMEOUT" $cmd > "$out" 2> "$err"
	rc=$?
	row "$out" "$cmd > $(basename "$out") 2> $(basename "$err")"
	sed 's/^/    /' "$out"
	grep -v '\[[0-9]*/[0-9]*\]' "$err" | sed 's/^/    stderr: /'
	if [ $rc -ne 0 ]; then
		failed "$cmd exited with status $rc; $err"
	elif [ ! -s "$out" ]; then
		failed "$cmd printed no result lines"
	fi
}
if [ "${GPU_RUN_BENCH:-1}" != 0 ]; then
	bench gpu-attn
	bench gpu-copy
	bench copy
fi

# ---- the record ------------------------------------------------------------------------
{
	echo "# GPU run $when"
	echo
	echo "Machine: $gpu_name (device $dev), driver $driver, CUDA $cuda;"
	echo "$(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory,"
	echo "kernel $(uname -r); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')."
	echo "Command: \`bench/gpu-run.sh\` from the repository root (status: $([ $status -eq 0 ] && echo passed || echo FAILED))."
	echo
	echo "| file | device | driver | date | command |"
	echo "|---|---|---|---|---|"
	for r in ${rows[@]+"${rows[@]}"}; do echo "$r"; done
} > "$OUTDIR/README.md"
say "wrote $OUTDIR/README.md"
if [ $status -ne 0 ]; then
	say "FAILED (see the FAIL lines above)"
else
	say "all passed"
fi
exit $status
