#!/bin/bash
# SPDX-License-Identifier: MIT
# check-torch.sh VENV_PYTHON: the kvrt package's torch tests, in a venv that
# has torch (an engine venv: libkvrt/python/engines/venv.sh prints one).
# Installs the package into that venv from a copy (no dependencies, no
# build isolation: nothing is fetched), then runs tests/torch_test*.py
# against the installed copy and the in-tree libkvrt build.  Without torch
# in the venv it FAILS: it is not a check that can pass by skipping.
#
# The GPU module (tests/gpu_test*.py) runs when kvrt.gpu.probe() finds a
# usable GPU, or when KVRT_REQUIRE_GPU=1, which makes a host without one
# fail instead of leaving the GPU tests out: use it on a GPU machine.
# KVRT_TORCH_INSTALL=0 imports the package from a copy on PYTHONPATH
# instead of installing it (a machine whose python refuses pip installs,
# such as the GPU machine's system python).
# Ends with one "N passed, N failed, N skipped" line.
set -eo pipefail
VPY=${1:?usage: check-torch.sh VENV_PYTHON}
HERE=$(cd "$(dirname "$0")/.." && pwd)        # libkvrt/python
LIB=${KVRT_LIBRARY:-$(cd "$HERE/.." && pwd)/build/libkvrt.so.0}
[ -e "$LIB" ] || { echo "check-torch: $LIB is not built (make lib)" >&2; exit 1; }
"$VPY" -c 'import torch, numpy' 2>/dev/null || {
	echo "check-torch: $VPY has no torch (or numpy): pass an engine venv's python" \
		"(libkvrt/python/engines/venv.sh vllm)" >&2
	echo "0 passed, 1 failed, 0 skipped"; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-torch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

mkdir "$WORK/src" && cp -r "$HERE/pyproject.toml" "$HERE/README.md" "$HERE/src" "$WORK/src/"
where=site-packages
if [ "${KVRT_TORCH_INSTALL:-1}" = 0 ]; then
	export PYTHONPATH="$WORK/src/src${PYTHONPATH:+:$PYTHONPATH}"
	where=$WORK/src/src
else
	# As engines/check.sh installs it: the venv's own setuptools (the engine
	# locks pin one that builds wheels), nothing fetched.
	"$VPY" -m pip install -q --no-deps --no-build-isolation --force-reinstall \
		--disable-pip-version-check "$WORK/src" 2>&1 | grep -v "^$" || true
fi
cp -r "$HERE/tests" "$WORK/tests"
cd "$WORK"
export KVRT_LIBRARY="$LIB" KVRT_BACKEND=embedded
KVRT_WHERE=$where "$VPY" -c 'import os, kvrt, torch; assert os.environ["KVRT_WHERE"] in kvrt.__file__, kvrt.__file__; print("kvrt", kvrt.__file__, "on", kvrt.LIBRARY, "torch", torch.__version__)'
pattern='torch_test*.py'
gpu=$("$VPY" -c 'import kvrt; ok, why = kvrt.gpu.probe(); print("ok" if ok else why)')
if [ "$gpu" = ok ] || [ "${KVRT_REQUIRE_GPU:-0}" = 1 ]; then
	echo "gpu tests: selected (probe: $gpu${KVRT_REQUIRE_GPU:+, KVRT_REQUIRE_GPU=$KVRT_REQUIRE_GPU})"
	pattern='*_test*.py'
else
	echo "gpu tests: not selected: $gpu (KVRT_REQUIRE_GPU=1 makes that a failure)"
fi
rc=0
"$VPY" -m unittest discover -s tests -t . -p "$pattern" -v 2>&1 | tee "$WORK/log" || rc=1
ran=$(sed -n 's/^Ran \([0-9]*\) tests\? .*/\1/p' "$WORK/log")
# failed tests, plus modules whose setUpModule failed (KVRT_REQUIRE_GPU=1
# without a GPU): those count as one failure each and ran no test
bad=$(grep -E '\.\.\. (FAIL|ERROR)$' "$WORK/log" | grep -vc '^setUpModule' || true)
modbad=$(grep -cE '^(ERROR|FAIL): setUpModule' "$WORK/log" || true)
skipped=$(grep -cE '\.\.\. skipped' "$WORK/log" || true)
[ -n "$ran" ] && [ "$ran" -gt 0 ] || { rc=1; modbad=$((modbad + 1)); }
echo "$(( ${ran:-0} - bad - skipped )) passed, $(( bad + modbad )) failed, $skipped skipped"
exit $rc
