#!/bin/bash
# SPDX-License-Identifier: MIT
#
# check-engines-vm.sh: the engine host tests in the test VM, against the real
# module: two vLLM engine processes sharing a prefix through kvrt.vllm
# (host-tests/vllm_share_engtest).  Kept out of `run-vm.sh check` (check-kmod):
# importing vLLM takes about 6 minutes under TCG.  Needs `make module lib`
# and the pinned vLLM venv (libkvrt/python/engines/venv.sh vllm).  Ends with
# the suite's "N passed, N failed" line; the exit status is the guest's.
#
# Environment: KVPOOL_VM_MEM_MB (default 4096 here), KVPOOL_VM_TEST_TIMEOUT
# (2700), KVPOOL_VM_TIMEOUT (3300), and the others of run-vm.sh.
set -eo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=$(bash "$ROOT/libkvrt/python/engines/venv.sh" vllm) ||
	{ echo "check-engines-vm: no vLLM venv (libkvrt/python/engines/venv.sh vllm failed)"; echo "0 passed, 1 failed"; exit 1; }
[ -x "$venv/bin/python" ] ||
	{ echo "check-engines-vm: $venv/bin/python missing"; echo "0 passed, 1 failed"; exit 1; }
export KVPOOL_VM_VLLM_PYTHON=$venv/bin/python
# vLLM's model-info cache for the test's tiny Llama, made here (seconds) so
# that the guest need not inspect the model in a second interpreter (minutes).
# Not under /tmp: the guest mounts its own tmpfs over the host's /tmp.
KVPOOL_VM_VLLM_CACHE=${KVPOOL_CACHE:-$HOME/.cache/kvpool}/vm-vllm-cache
export KVPOOL_VM_VLLM_CACHE
VLLM_CACHE_ROOT=$KVPOOL_VM_VLLM_CACHE PYTHONPATH="$ROOT/libkvrt/python/src" \
	KVRT_LIBRARY="$ROOT/libkvrt/build/libkvrt.so.0" "$KVPOOL_VM_VLLM_PYTHON" -c '
import sys; sys.path.insert(0, sys.argv[1])
import vllm_util as vu; vu.make_vllm_config(vu.kvpool_extra())' \
	"$ROOT/libkvrt/python/engines/vllm" >/dev/null 2>&1 ||
	echo "check-engines-vm: could not warm vLLM's model-info cache; the guest will inspect the model itself (slower)"
export KVPOOL_TESTS=${KVPOOL_TESTS:-vllm_share_engtest}
export KVPOOL_VM_MEM_MB=${KVPOOL_VM_MEM_MB:-4096}
# import ~6 min, each engine's set-up and run a minute or more, on a loaded host
export KVPOOL_VM_TEST_TIMEOUT=${KVPOOL_VM_TEST_TIMEOUT:-2700}
export KVPOOL_VM_TIMEOUT=${KVPOOL_VM_TIMEOUT:-3300}
exec bash "$ROOT/selftests/vm/run-vm.sh" check
