#!/bin/bash
# SPDX-License-Identifier: MIT
#
# check-engines-vm.sh: the engine host tests in the test VM, against the real
# module: two vLLM engine processes sharing a prefix through kvrt.vllm
# (host-tests/vllm_share_engtest), and two SGLang storage processes sharing
# pages through kvrt.sglang (host-tests/sglang_share_engtest).  Kept out of
# `run-vm.sh check` (check-kmod): importing an engine takes minutes under
# TCG.  Needs `make module lib` and the pinned venv of each engine it runs
# (libkvrt/python/engines/venv.sh vllm|sglang).  Ends with the suite's
# "N passed, N failed" line; the exit status is the guest's.
#
# Environment: KVPOOL_TESTS (default: both engtests), KVPOOL_VM_MEM_MB
# (default 4096 here), KVPOOL_VM_TEST_TIMEOUT (2700 per test),
# KVPOOL_VM_TIMEOUT (600 + 2700 per test), and the others of run-vm.sh.
set -eo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${KVPOOL_CACHE:-$HOME/.cache/kvpool}
export KVPOOL_TESTS=${KVPOOL_TESTS:-vllm_share_engtest sglang_share_engtest}

fail() {
	echo "check-engines-vm: $*"
	echo "0 passed, 1 failed"
	exit 1
}

# venv_python ENGINE: the pinned venv's python, in $PY
venv_python() {
	local venv
	venv=$(bash "$ROOT/libkvrt/python/engines/venv.sh" "$1") ||
		fail "no $1 venv (libkvrt/python/engines/venv.sh $1 failed)"
	PY=$venv/bin/python
	[ -x "$PY" ] || fail "$PY missing"
}

runs() { case " $KVPOOL_TESTS " in *" $1 "*) return 0 ;; esac; return 1; }

if runs vllm_share_engtest; then
	venv_python vllm
	export KVPOOL_VM_VLLM_PYTHON=$PY
	# vLLM's model-info cache for the test's tiny Llama, made here (seconds) so
	# that the guest need not inspect the model in a second interpreter (minutes).
	# Not under /tmp: the guest mounts its own tmpfs over the host's /tmp.
	export KVPOOL_VM_VLLM_CACHE=$CACHE/vm-vllm-cache
	VLLM_CACHE_ROOT=$KVPOOL_VM_VLLM_CACHE PYTHONPATH="$ROOT/libkvrt/python/src" \
		KVRT_LIBRARY="$ROOT/libkvrt/build/libkvrt.so.0" "$KVPOOL_VM_VLLM_PYTHON" -c '
import sys; sys.path.insert(0, sys.argv[1])
import vllm_util as vu; vu.make_vllm_config(vu.kvpool_extra())' \
		"$ROOT/libkvrt/python/engines/vllm" >/dev/null 2>&1 ||
		echo "check-engines-vm: could not warm vLLM's model-info cache; the guest will inspect the model itself (slower)"
fi
if runs sglang_share_engtest; then
	venv_python sglang
	export KVPOOL_VM_SGLANG_PYTHON=$PY
	# SGLang's page hash is a C++ extension torch builds on first use: built
	# here (half a minute, once) so that the guest, which starts from a copy,
	# need not compile it under TCG.  Not under /tmp, as above.
	export KVPOOL_VM_SGLANG_CACHE=$CACHE/vm-sglang-ext
	TORCH_EXTENSIONS_DIR=$KVPOOL_VM_SGLANG_CACHE "$KVPOOL_VM_SGLANG_PYTHON" -c '
from sglang.srt.mem_cache.cpp_utils.native_hash import get_native_hash
get_native_hash([1, 2], None, 2)' >/dev/null 2>&1 ||
		echo "check-engines-vm: could not build SGLang's hash extension; the guest will build it itself (many minutes)"
fi

n=$(wc -w <<<"$KVPOOL_TESTS")
export KVPOOL_VM_MEM_MB=${KVPOOL_VM_MEM_MB:-4096}
# an import ~6 min, each engine's set-up and run a minute or more, on a loaded host
export KVPOOL_VM_TEST_TIMEOUT=${KVPOOL_VM_TEST_TIMEOUT:-2700}
export KVPOOL_VM_TIMEOUT=${KVPOOL_VM_TIMEOUT:-$((600 + 2700 * n))}
exec bash "$ROOT/selftests/vm/run-vm.sh" check
