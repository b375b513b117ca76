#!/bin/bash
# SPDX-License-Identifier: MIT
# The kvpool HiCache storage backend (kvrt.sglang) against SGLang's real
# classes, on the CPU: installs kvrt into SGLang's venv from a copy of
# libkvrt/python, then runs the tests beside this script from outside the
# source tree with the in-tree libkvrt.  Ends with one
# "N passed, N failed, N skipped" line.
#
#   check.sh [PYTHON]    (default: the pinned venv of engines/venv.sh sglang)
set -eo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)            # libkvrt/python/engines/sglang
PYDIR=$(cd "$HERE/../.." && pwd)               # libkvrt/python
LIB=$(cd "$PYDIR/.." && pwd)/build/libkvrt.so.0
PY=${1:-$("$PYDIR/engines/venv.sh" sglang)/bin/python}
[ -x "$PY" ] || { echo "sglang check: no python at $PY" >&2; exit 1; }
[ -e "$LIB" ] || { echo "sglang check: $LIB is not built (make lib)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-sglang.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# From a copy, so that the build's egg-info stays out of the source tree;
# --no-deps: the venv's pins stay as they are.
mkdir "$WORK/src" && cp -r "$PYDIR/pyproject.toml" "$PYDIR/README.md" "$PYDIR/src" "$WORK/src/"
"$PY" -m pip install -q --no-deps --no-build-isolation --force-reinstall \
	--disable-pip-version-check "$WORK/src" 2>&1 | grep -v "^$" || true
mkdir "$WORK/tests" && cp "$HERE"/test_*.py "$WORK/tests/" && touch "$WORK/tests/__init__.py"
cd "$WORK"
export KVRT_LIBRARY="$LIB" KVRT_BACKEND=embedded
# the test that every config key is documented reads it
export KVRT_PYTHON_RST="$PYDIR/../../Documentation/python.rst"
"$PY" -c 'import kvrt, sglang, sys; assert "site-packages" in kvrt.__file__, kvrt.__file__
print("kvrt", kvrt.__file__, "on", kvrt.LIBRARY, "| sglang", sglang.__version__)'
rc=0
"$PY" -m unittest discover -s tests -t . -v 2>&1 | tee "$WORK/log" || rc=1
# counts from unittest's summary: verbose lines can be split by warnings
ran=$(sed -n 's/^Ran \([0-9]*\) tests\? .*/\1/p' "$WORK/log")
sum=$(grep -E '^(OK|FAILED)' "$WORK/log" | tail -1)
num() { echo "$sum" | sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }
bad=$(( $(num failures || true) + $(num errors || true) + 0 ))
skipped=$(( $(num skipped || true) + 0 ))
# no test ran (the venv lacks SGLang, discovery broke): that is a failure
[ "${ran:-0}" -gt 0 ] || { rc=1; bad=$(( bad + 1 )); }
passed=$(( ${ran:-0} - bad - skipped ))
echo "$(( passed < 0 ? 0 : passed )) passed, $bad failed, $skipped skipped"
exit $rc
