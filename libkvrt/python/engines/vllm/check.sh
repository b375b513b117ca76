#!/bin/bash
# SPDX-License-Identifier: MIT
# The kvpool offloading backend against vLLM's real Scheduler, on CPU.
#
#   check.sh [PYTHON]
#
# PYTHON is a venv's python with the pinned vLLM (default: the venv that
# ../venv.sh vllm makes).  kvrt is installed into that venv from a copy of
# libkvrt/python (--no-deps --no-build-isolation: the venv's own setuptools,
# nothing fetched), and the tests run from outside the source tree against
# the installed copy, with KVRT_LIBRARY naming the in-tree build.
# Ends with one "N passed, N failed, N skipped" line.
set -eo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)            # libkvrt/python/engines/vllm
PYSRC=$(cd "$HERE/../.." && pwd)               # libkvrt/python
LIB=$(cd "$PYSRC/.." && pwd)/build/libkvrt.so.0
PY=${1:-$("$PYSRC/engines/venv.sh" vllm)/bin/python}
[ -x "$PY" ] || { echo "vllm check: no python at $PY" >&2; exit 1; }
[ -e "$LIB" ] || { echo "vllm check: $LIB is not built (make lib)" >&2; exit 1; }
"$PY" -c 'import setuptools' 2>/dev/null ||
	{ echo "vllm check: the venv has no setuptools: pip install setuptools into it" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-vllm.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/src" && cp -r "$PYSRC/pyproject.toml" "$PYSRC/README.md" "$PYSRC/src" "$WORK/src/"
"$PY" -m pip install -q --no-deps --no-build-isolation --force-reinstall \
	--disable-pip-version-check "$WORK/src" 2>&1 | grep -v "^$" || true
mkdir "$WORK/tests" && cp "$HERE"/*.py "$WORK/tests/"
cd "$WORK/tests"
export KVRT_LIBRARY="$LIB" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
"$PY" -c 'import kvrt, sys; assert "site-packages" in kvrt.__file__, kvrt.__file__; assert "vllm" not in sys.modules, "import kvrt imported vllm"; print("kvrt", kvrt.__file__, "on", kvrt.LIBRARY)'
rc=0
"$PY" -m unittest discover -s . -p 'test_*.py' -v 2>&1 | tee "$WORK/log" || rc=1
ran=$(sed -n 's/^Ran \([0-9]*\) tests\? .*/\1/p' "$WORK/log")
bad=$(grep -cE '\.\.\. (FAIL|ERROR)$' "$WORK/log" || true)
skipped=$(grep -cE '\.\.\. skipped' "$WORK/log" || true)
[ -n "$ran" ] || { rc=1; bad=$((bad + 1)); }
echo "$(( ${ran:-0} - bad - skipped )) passed, $bad failed, $skipped skipped"
exit $rc
