#!/bin/bash
# SPDX-License-Identifier: MIT
# make check-python: install the kvrt package with pip, offline, into a
# throwaway venv that sees Debian's numpy (--system-site-packages), then
# run its unittests against the installed copy, from outside the source
# tree, with the library named by KVRT_LIBRARY (the in-tree build).
# Also checks that the documentation's example runs as written.
# Ends with one "N passed, N failed" line.
set -eo pipefail
PY=${1:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)        # libkvrt/python
LIB=$(cd "$HERE/.." && pwd)/build/libkvrt.so.0
TOP=$(cd "$HERE/../.." && pwd)
[ -e "$LIB" ] || { echo "check-python: $LIB is not built (make lib)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-python.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

"$PY" -m venv --system-site-packages "$WORK/venv"
VPY="$WORK/venv/bin/python"
# --no-build-isolation: build with the system setuptools (nothing fetched);
# --no-index: never ask PyPI, numpy is Debian's.
# From a copy, so that the build's egg-info stays out of the source tree.
mkdir "$WORK/src" && cp -r "$HERE/pyproject.toml" "$HERE/README.md" "$HERE/src" "$WORK/src/"
"$VPY" -m pip install -q --no-index --no-build-isolation --disable-pip-version-check \
	"$WORK/src" 2>&1 | grep -v "^$" || true
cp -r "$HERE/tests" "$WORK/tests"
cd "$WORK"
export KVRT_LIBRARY="$LIB" KVRT_BACKEND=embedded
# the installed copy, not the source tree
"$VPY" -c 'import kvrt, sys; assert "site-packages" in kvrt.__file__, kvrt.__file__; print("kvrt", kvrt.__file__, "on", kvrt.LIBRARY)'
"$VPY" -c 'import importlib.resources as r; assert r.files("kvrt").joinpath("py.typed").is_file()'
rc=0
"$VPY" -m unittest discover -s tests -t . -v 2>&1 | tee "$WORK/log" || rc=1
# the documentation's example, as written
sed -n '/^.. python-example-begin/,/^.. python-example-end/p' "$TOP/Documentation/python.rst" |
	sed -n 's/^    //p' > "$WORK/example.py"
ex_bad=0
"$VPY" "$WORK/example.py" > "$WORK/example.out" && echo "doc example: ok" ||
	{ echo "doc example: FAILED"; ex_bad=1; rc=1; }
ran=$(sed -n 's/^Ran \([0-9]*\) tests\? .*/\1/p' "$WORK/log")
bad=$(grep -cE '\.\.\. (FAIL|ERROR)$' "$WORK/log" || true)
skipped=$(grep -cE '\.\.\. skipped' "$WORK/log" || true)
echo "$(( ${ran:-0} - bad - skipped + 1 - ex_bad )) passed, $(( bad + ex_bad )) failed, $skipped skipped"
exit $rc
