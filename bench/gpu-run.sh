#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# gpu-run.sh: the GPU checks and benchmarks, built here and run on a GPU
# machine that is lent rarely and briefly, so that one call returns results.
#
#   bench/gpu-run.sh bundle [DIR]        on the build machine (needs nvcc):
#       builds libkvrt with its fatbin, test_gpu, kvbench and kvrt-demo, and
#       copies what the run needs into DIR (default build/gpu-bundle): the
#       programs, libkvrt.so.0, libcrypto.so.3 as a fallback, the SDPA peer
#       script, the kvrt Python package with its tests, the wheels in
#       GPU_RUN_WHEELS if set (numpy, for a machine whose python lacks it),
#       and MANIFEST (commit, sha256, the glibc and sonames needed).
#   bench/gpu-run.sh run BUNDLE OUTDIR   on the GPU machine (builds nothing):
#       preflight (what the bundle needs and the machine lacks, said before
#       anything runs), then the steps, most important first, each writing
#       its files into OUTDIR as it ends:
#         test      test_gpu: attention, append and copies against float64
#                   and the CPU library                  (test_gpu.tap)
#         memcheck  compute-sanitizer --tool memcheck on a short test_gpu
#                                                        (memcheck.log)
#         python    the kvrt package's torch tests, GPU ones required, with
#                   the machine's python3 and torch       (python.log)
#         attn      kvbench gpu-attn, with the SDPA peer (gpu-attn.jsonl, .log):
#                   decode against a read-only stream of the same bytes
#                   (decode_read_*) and against the device copy (decode_*);
#                   chunked prefill against SDPA's flash (prefill_*)
#         copy      kvbench gpu-copy, AUTO's calibration (auto_calib_*,
#                   auto_threshold_kib) first  (gpu-copy.jsonl, .log)
#         demo      kvrt-demo --device gpu: its KV cache, append, attention
#                   and pool copies on the GPU, checked   (demo.json, .log)
#         profile   ncu on one decode call (batch 64 x 4096): speed of light,
#                   occupancy, stalls, and per-instruction samples
#                                     (decode-ncu.txt, decode-sass.csv)
#       and OUTDIR/README.md, the record: device, driver, date, command and
#       status of every step.
#   bench/gpu-run.sh dry-run [WORKDIR]   without a GPU: bundle, then run with
#       the tiny profile against the emulated driver (cuda/tests/emu_libcuda.cpp);
#       fails where the script or a step would fail on the GPU machine.
#
# Environment for run:
#   GPU_RUN_PROFILE  full (default) or tiny (the dry run's sizes)
#   GPU_RUN_DEADLINE seconds the whole run may take (default 420): a step
#                    gets at most what is left, and one that cannot get its
#                    minimum is skipped and says so
#   GPU_RUN_STEPS    comma-separated steps (default test,memcheck,python,attn,copy,demo,profile)
#   GPU_RUN_PACK     a .tar file rewritten after every step with all of OUTDIR
#                    (for a caller that brings back few files)
#   GPU_RUN_ATTN_ARGS  more kvbench gpu-attn options (e.g. --batches 1,8,32,64)
#   KVRT_LIBCUDA     passes on (the dry run points it at the emulated driver)
#
# FlashInfer on the same page table is staged apart, in two device calls:
# bench/flashinfer-stage.sh says how.
#
# Exit status: 0 when every step that ran passed; 1 when one failed or the
# preflight found something missing; 2 on a usage error.

set -u
here=$(cd "$(dirname "$0")/.." && pwd)

usage() {
	sed -n '4,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
say() { echo "gpu-run: $*"; }

# ---- bundle ------------------------------------------------------------------

soname_path() {	# the file the loader would take for soname $1, or nothing
	ldconfig -p 2>/dev/null | awk -v s="$1" '$1 == s && /x86-64/ { print $NF; exit }'
}

bundle() {
	local dir=${1:-build/gpu-bundle} jobs f nvcc crypto
	cd "$here" || exit 2
	# only a bundle or an empty folder is replaced
	if [ -n "$(ls -A "$dir" 2>/dev/null)" ] && [ ! -f "$dir/MANIFEST" ]; then
		echo "gpu-run bundle: $dir holds other files; name a new or empty folder" >&2
		exit 2
	fi
	nvcc=$(make -s -C cuda print-nvcc)
	if [ -z "$nvcc" ]; then
		echo "gpu-run bundle: no nvcc (PATH or /usr/local/cuda/bin): libkvrt would have no kernels" >&2
		exit 1
	fi
	jobs=$(nproc 2>/dev/null || echo 2)
	say "building libkvrt (with the fatbin), test_gpu, kvbench and kvrt-demo"
	{ make -C libkvrt -j"$jobs" && make -C libkvrt -j"$jobs" build/plain/test_gpu &&
		make -C tools/kvbench -j"$jobs" && make -C tools/kvrt-demo -j"$jobs"; } \
		> /tmp/gpu-run-bundle.$$.log 2>&1 || {
		tail -30 /tmp/gpu-run-bundle.$$.log >&2
		echo "gpu-run bundle: the build failed (log: /tmp/gpu-run-bundle.$$.log)" >&2
		exit 1
	}
	rm -f /tmp/gpu-run-bundle.$$.log
	rm -rf "$dir"
	mkdir -p "$dir/bin" "$dir/lib" "$dir/fallback" || exit 1
	cp libkvrt/build/plain/test_gpu tools/kvbench/kvbench tools/kvrt-demo/kvrt-demo "$dir/bin/"
	cp -L libkvrt/build/libkvrt.so.0 "$dir/lib/libkvrt.so.0"
	cp bench/sdpa_peer.py "$dir/"
	mkdir -p "$dir/python" "$dir/wheels"
	cp -r libkvrt/python/pyproject.toml libkvrt/python/README.md libkvrt/python/src \
		libkvrt/python/tests "$dir/python/"
	find "$dir/python" -name __pycache__ -prune -exec rm -rf {} +
	[ -n "${GPU_RUN_WHEELS:-}" ] && cp "$GPU_RUN_WHEELS"/*.whl "$dir/wheels/"
	crypto=$(soname_path libcrypto.so.3)
	[ -n "$crypto" ] && cp -L "$crypto" "$dir/fallback/libcrypto.so.3"
	# debug info stays here; the copies travel (the call carries 64 MiB at most)
	strip --strip-debug "$dir"/bin/* "$dir"/lib/* "$dir"/fallback/* 2>/dev/null
	{
		echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+local-changes')"
		echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(. /etc/os-release; echo "$PRETTY_NAME"), $(getconf GNU_LIBC_VERSION)"
		echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
		# the newest glibc symbol version any program asks for
		echo "glibc-needed $(for f in "$dir"/bin/* "$dir"/lib/*; do objdump -T "$f"; done 2>/dev/null |
			grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
		for f in "$dir"/bin/* "$dir"/lib/*; do
			echo "needs $(basename "$f"): $(objdump -p "$f" | awk '/NEEDED/ { printf "%s ", $2 }')"
		done
		echo "fatbin $(tr -d '\0' < cuda/build/kvrt_kernels.fatbin | grep -ao 'sm_[0-9a]*\|compute_[0-9a]*' | sort -u | tr '\n' ' ')"
		(cd "$dir" && sha256sum bin/* lib/* fallback/* sdpa_peer.py wheels/* 2>/dev/null)
	} > "$dir/MANIFEST"
	say "bundle in $dir ($(du -sh "$dir" | cut -f1)):"
	sed 's/^/    /' "$dir/MANIFEST"
}

# ---- run ---------------------------------------------------------------------

run() {
	local b=$1 out=$2
	[ -f "$b/MANIFEST" ] || { echo "gpu-run run: $b has no MANIFEST: make it with 'bench/gpu-run.sh bundle $b'" >&2; exit 2; }
	b=$(cd "$b" && pwd)
	mkdir -p "$out" || exit 2
	out=$(cd "$out" && pwd)
	profile=${GPU_RUN_PROFILE:-full}
	case $profile in full|tiny) ;; *) echo "gpu-run: GPU_RUN_PROFILE is full or tiny, not '$profile'" >&2; exit 2;; esac
	steps=${GPU_RUN_STEPS:-test,memcheck,python,attn,copy,demo,profile}
	t0=$(date +%s)
	deadline=$((t0 + ${GPU_RUN_DEADLINE:-420}))
	status=0
	rows=()
	export LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export KVRT_TEST_SEED=${KVRT_TEST_SEED:-$t0}

	preflight
	record
	if [ "$pre_ok" != 1 ]; then
		say "FAILED in the preflight: nothing ran (see $out/preflight.txt)"
		exit 1
	fi
	for s in ${steps//,/ }; do
		case $s in
		test) step test 30 240 test_gpu.tap step_test ;;
		memcheck) step memcheck 30 150 memcheck.log step_memcheck ;;
		python) step python 20 150 python.log step_python ;;
		attn) step attn 30 200 gpu-attn.jsonl step_attn ;;
		copy) step copy 20 90 gpu-copy.jsonl step_copy ;;
		demo) step demo 20 150 demo.json step_demo ;;
		profile) step profile 40 120 decode-ncu.txt step_profile ;;
		*) echo "gpu-run: unknown step '$s' (test, memcheck, python, attn, copy, demo, profile)" >&2; exit 2 ;;
		esac
		record
	done
	say "$([ $status -eq 0 ] && echo 'all steps that ran passed' || echo 'FAILED (see the FAIL lines)') in $(( $(date +%s) - t0 )) s; record: $out/README.md"
	exit $status
}

pre_line() { echo "$*" >> "$out/preflight.txt"; }
missing() { pre_line "MISSING: $*"; say "FAIL: missing: $*"; pre_ok=0; status=1; }

preflight() {
	local f need have lc crypto nf
	pre_ok=1
	: > "$out/preflight.txt"
	pre_line "# preflight $(date -u +%Y-%m-%dT%H:%M:%SZ), profile $profile"
	pre_line "machine: $(uname -srm); $(nproc) CPUs; $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
	pre_line "os: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
	pre_line "bundle: $(head -2 "$b/MANIFEST" | tr '\n' ';')"
	have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
	need=$(awk '$1 == "glibc-needed" { print $2 }' "$b/MANIFEST")
	pre_line "glibc: here ${have:-unknown}, the bundle needs $need"
	if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
		missing "glibc $need or newer (here: ${have:-none}); build the bundle on an older distribution"
	fi
	crypto=$(soname_path libcrypto.so.3)
	if [ -n "$crypto" ]; then
		pre_line "libcrypto.so.3: $crypto"
	elif [ -f "$b/fallback/libcrypto.so.3" ]; then
		pre_line "libcrypto.so.3: not installed here; the bundle's copy is used"
		export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$b/fallback"
	else
		missing "libcrypto.so.3 (OpenSSL 3), neither installed nor in the bundle"
	fi
	for f in "$b"/bin/* "$b"/lib/*; do
		nf=$(ldd "$f" 2>&1 | grep 'not found')
		[ -z "$nf" ] || missing "$(basename "$f") cannot load: $(echo $nf)"
	done
	if [ -n "${KVRT_LIBCUDA:-}" ]; then
		pre_line "libcuda: KVRT_LIBCUDA=$KVRT_LIBCUDA"
		[ -f "$KVRT_LIBCUDA" ] || missing "KVRT_LIBCUDA=$KVRT_LIBCUDA does not exist"
	else
		lc=$(soname_path libcuda.so.1)
		pre_line "libcuda.so.1: ${lc:-none in the ldconfig cache}"
		[ -n "$lc" ] || missing "libcuda.so.1 (the NVIDIA driver's library)"
	fi
	if command -v nvidia-smi > /dev/null; then
		gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${KVRT_GPU_DEVICE:-0}" 2>/dev/null | head -1)
		driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i "${KVRT_GPU_DEVICE:-0}" 2>/dev/null | head -1)
		{ echo "--- nvidia-smi"; nvidia-smi 2>&1; } >> "$out/preflight.txt"
	else
		gpu_name="none"
		driver="none"
		[ "$profile" = full ] && missing "nvidia-smi: is this a GPU machine?"
	fi
	sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
	pre_line "compute-sanitizer: ${sanitizer:-none}"
	ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	pre_line "ncu: ${ncu:-none}"
	pre_line "python3: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
	say "$gpu_name, driver $driver; preflight $([ $pre_ok = 1 ] && echo passed || echo FAILED)"
	rows+=("| preflight | $([ $pre_ok = 1 ] && echo passed || echo FAILED) | 0 | \`preflight.txt\` | machine, glibc, sonames, driver, tools |")
}

# step NAME MIN_S MAX_S FILE FUNCTION: runs FUNCTION with $limit seconds
step() {
	local name=$1 min=$2 max=$3 file=$4 fn=$5 left start rc
	left=$((deadline - $(date +%s)))
	limit=$((left < max ? left : max))
	if [ "$limit" -lt "$min" ]; then
		say "$name: skipped, $left s left of the deadline (needs $min)"
		rows+=("| $name | skipped (deadline) | 0 | | $left s left, needs $min |")
		return
	fi
	say "$name: up to $limit s"
	start=$(date +%s)
	step_note=""
	step_cmd=""
	"$fn" "$out/$file"
	rc=$?
	local took=$(( $(date +%s) - start )) verdict=passed
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		verdict="FAILED: ran past $limit s"
	elif [ $rc = 77 ]; then
		verdict="not run: $step_note"
	elif [ $rc != 0 ]; then
		verdict="FAILED: $step_note (exit $rc)"
	fi
	case $verdict in FAILED*) status=1 ;; esac
	say "$name: $verdict in $took s"
	rows+=("| $name | $verdict | $took | \`$file\` | \`$step_cmd\` |")
}

# the step's command, run under its time limit, with its output in $1
limited() {	# file, command...
	local f=$1
	shift
	step_cmd="$*"
	timeout -k 5 "$limit" "$@" > "$f" 2> "${f%.*}.log"
}

step_test() {
	local rc cases=
	[ "$profile" = tiny ] && cases=1
	step_cmd="KVRT_TEST_SEED=$KVRT_TEST_SEED ${cases:+KVRT_TEST_CASES=$cases }$b/bin/test_gpu"
	KVRT_TEST_CASES=${cases:-${KVRT_TEST_CASES:-40}} timeout -k 5 "$limit" "$b/bin/test_gpu" > "$1" 2>&1
	rc=$?
	grep -E '^(not ok|# test_gpu:|# device|# GPU part|# largest|# calls)' "$1" | sed 's/^/    /'
	[ $rc = 0 ] || { step_note="test_gpu failed"; return $rc; }
	if grep -qE '^not ok' "$1"; then
		step_note="failing tests"; return 1
	elif grep -qE '^ok [0-9]+ - gpu_tests # SKIP' "$1"; then
		step_note="test_gpu skipped its GPU part: $(grep -m1 SKIP "$1" | sed 's/.*# SKIP //')"; return 1
	elif ! grep -qE '^ok [0-9]+ - copy_errors_match_cpu' "$1"; then
		step_note="test_gpu stopped before its last test"; return 1
	fi
}

step_memcheck() {
	local rc
	if [ -z "$sanitizer" ]; then
		step_note="no compute-sanitizer on this machine"
		echo "$step_note" > "$1"
		[ "$profile" = tiny ] && return 77
		return 1
	fi
	# API errors are not counted: test_gpu provokes them (an allocation too
	# large, a second registration) and checks the errnos itself
	step_cmd="KVRT_TEST_CASES=1 $sanitizer --tool memcheck --report-api-errors no --error-exitcode 86 $b/bin/test_gpu"
	KVRT_TEST_CASES=1 timeout -k 5 "$limit" "$sanitizer" --tool memcheck --report-api-errors no \
		--error-exitcode 86 --print-limit 20 "$b/bin/test_gpu" > "$1" 2>&1
	rc=$?
	grep -E '^(=========.*ERROR SUMMARY|not ok|# test_gpu:)' "$1" | sed 's/^/    /'
	[ $rc = 86 ] && step_note="memcheck found errors"
	[ $rc != 0 ] && [ $rc != 86 ] && step_note="test_gpu under memcheck failed"
	return $rc
}

# the machine's python3 and torch (nothing installed into it): the package
# from the bundle on PYTHONPATH, numpy from the bundle's wheels if missing
step_python() {
	local py=${GPU_RUN_PYTHON:-python3} deps=/tmp/gpu-run-pydeps.$$ rc
	if ! "$py" -c 'import torch' > /dev/null 2>&1; then
		step_note="$py has no torch"
		echo "$step_note" > "$1"
		[ "$profile" = tiny ] && return 77
		return 1
	fi
	if ! "$py" -c 'import numpy' > /dev/null 2>&1; then
		if ls "$b"/wheels/numpy-*.whl > /dev/null 2>&1; then
			# a wheel is a zip to unpack onto the path: no pip needed
			"$py" -m zipfile -e "$(ls "$b"/wheels/numpy-*.whl | head -1)" "$deps" >> "$1" 2>&1
			export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
		else
			step_note="$py has no numpy and the bundle no numpy wheel (GPU_RUN_WHEELS)"
			echo "$step_note" > "$1"
			return 1
		fi
	fi
	step_cmd="KVRT_REQUIRE_GPU=1 KVRT_TORCH_INSTALL=0 KVRT_LIBRARY=$b/lib/libkvrt.so.0 bash $b/python/tests/check-torch.sh $py"
	KVRT_REQUIRE_GPU=1 KVRT_TORCH_INSTALL=0 KVRT_LIBRARY="$b/lib/libkvrt.so.0" \
		timeout -k 5 "$limit" bash "$b/python/tests/check-torch.sh" "$py" >> "$1" 2>&1
	rc=$?
	grep -E '^(FAIL|ERROR):|passed, .* failed' "$1" | sed 's/^/    /'
	[ $rc = 0 ] || step_note="kvrt's torch tests failed"
	return $rc
}

kvbench_step() {	# file, subcommand, args...
	local f=$1 rc
	shift
	limited "$f" "$b/bin/kvbench" "$@" --json --progress
	rc=$?
	sed 's/^/    /' "$f"
	grep -v '\[[0-9]*/[0-9]*\]' "${f%.*}.log" | sed 's/^/    note: /'
	[ $rc = 0 ] || { step_note="kvbench $1 failed"; return $rc; }
	[ -s "$f" ] || { step_note="kvbench $1 printed no results"; return 1; }
}

step_attn() {
	if [ "$profile" = tiny ]; then
		kvbench_step "$1" gpu-attn --batches 1,2 --contexts 64 --prefill 2x8x48 --copy-mib 16 \
			--reps 1 --rep-time 0.001 --no-peer
	else
		# shellcheck disable=SC2086
		kvbench_step "$1" gpu-attn --peer-script "$b/sdpa_peer.py" --reps 5 --rep-time 0.1 \
			${GPU_RUN_ATTN_ARGS:-}
	fi
}

step_copy() {
	if [ "$profile" = tiny ]; then
		kvbench_step "$1" gpu-copy --mib 4 --batch-mib 2 --reg-gib 0 --reps 1 --rep-time 0.001
	else
		kvbench_step "$1" gpu-copy --mib 1024 --batch-mib 256 --reg-gib 4 --reps 5 --rep-time 0.1
	fi
}

step_demo() {
	local rc args=
	# the tiny model with head dim 64, which the GPU kernels take
	[ "$profile" = tiny ] && args="--preset tiny --dim 128 --heads 2 --kv-heads 1"
	# shellcheck disable=SC2086
	limited "$1" "$b/bin/kvrt-demo" --device gpu --json --no-progress $args
	rc=$?
	tail -5 "${1%.*}.log" | sed 's/^/    /'
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); g = d["gpu"]; e = d["equivalence"]
print("    equivalence", e["result"], e["tokens"], "tokens; gpu check worst", g["worst_in_tolerances"], "of the tolerance over", g["rows_checked"], "rows;", g["name"])' \
		"$1" 2>/dev/null
	[ $rc = 0 ] || step_note="kvrt-demo failed (exit $rc: 1 is a failed check)"
	return $rc
}

step_profile() {
	local rep=/tmp/gpu-run-decode.$$ rc
	if [ -z "$ncu" ]; then
		step_note="no ncu on this machine"
		echo "$step_note" > "$1"
		return 77
	fi
	# the 4th decode launch (past the warm-up); clocks left as they are
	step_cmd="$ncu --clock-control none --set full -k regex:kvrt_decode -s 3 -c 1 -o $rep $b/bin/kvbench gpu-attn --batches 64 --contexts 4096 --no-prefill --reps 1 --rep-time 0.01 --no-peer"
	timeout -k 5 "$limit" $step_cmd > "${1%.*}.log" 2>&1
	rc=$?
	[ $rc = 0 ] || { step_note="ncu failed"; tail -5 "${1%.*}.log"; return $rc; }
	"$ncu" -i "$rep.ncu-rep" --page details > "$1" 2>&1 &&
		"$ncu" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$out/decode-sass.csv" 2>&1
	rc=$?
	rm -f "$rep.ncu-rep"
	grep -E 'Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|One or More Eligible' "$1" | sed 's/^/    /'
	[ $rc = 0 ] || step_note="ncu could not print its report"
	return $rc
}

record() {
	{
		echo "# GPU run, $(date -u +%Y-%m-%d) ($profile profile)"
		echo
		echo "Device: $gpu_name (ordinal ${KVRT_GPU_DEVICE:-0}), driver $driver;"
		echo "$(nproc) CPUs, kernel $(uname -r). Bundle: $(head -1 "$b/MANIFEST")."
		echo "Command: \`bench/gpu-run.sh run BUNDLE OUTDIR\` (GPU_RUN_DEADLINE=${GPU_RUN_DEADLINE:-420});"
		echo "test seed $KVRT_TEST_SEED; $(( $(date +%s) - t0 )) s so far."
		echo
		echo "| step | status | seconds | file | command |"
		echo "|---|---|---|---|---|"
		for r in "${rows[@]}"; do echo "$r"; done
	} > "$out/README.md"
	if [ -n "${GPU_RUN_PACK:-}" ]; then
		tar -C "$out" -cf "$GPU_RUN_PACK.tmp" . && mv "$GPU_RUN_PACK.tmp" "$GPU_RUN_PACK"
	fi
}

# ---- dry run -----------------------------------------------------------------

dry_run() {
	local work=${1:-build/gpu-dry-run} emu
	cd "$here" || exit 2
	make -s -C cuda build/emu/libcuda-emu.so > /dev/null || exit 1
	emu=$here/cuda/build/emu/libcuda-emu.so
	rm -rf "$work/bundle" "$work/out"	# the dry run's own folders
	bundle "$work/bundle" || exit 1
	GPU_RUN_PROFILE=tiny GPU_RUN_DEADLINE=${GPU_RUN_DEADLINE:-900} KVRT_LIBCUDA=$emu \
		GPU_RUN_PACK="$work/out.tar" bash "$0" run "$work/bundle" "$work/out"
}

case ${1:-} in
bundle) shift; bundle "$@" ;;
run) [ $# = 3 ] || usage; run "$2" "$3" ;;
dry-run) shift; dry_run "$@" ;;
*) usage ;;
esac
