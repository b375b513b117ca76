#!/bin/bash
# SPDX-License-Identifier: MIT
# make check-python: install the kvrt package with pip, offline, into a
# throwaway venv that sees Debian's numpy (--system-site-packages), then
# run its unittests against the installed copy, from outside the source
# tree, with the library named by KVRT_LIBRARY (the in-tree build).
# Also checks that the documentation's example runs as written, and (plain
# pass) that pytest runs the same tests.
# Then the same again against libkvrt built with ASan+UBSan
# (libkvrt/build/asan/libkvrt.so.0, make -C libkvrt asan-so), the runtime
# preloaded into python; leak detection is off, as CPython keeps memory
# to the end by design.  KVRT_PYTHON_ASAN=0 leaves that pass out.
# Ends with one "N passed, N failed" line per pass (each after a "# NAME pass:"
# line: make check's summary adds up lines that start with the count).
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
export KVRT_BACKEND=embedded
# test_tiers starts a Redis Cluster with it (and fails, not skips, when it cannot)
export KVRT_REDIS_CLUSTER_SH="$TOP/selftests/redis/cluster.sh"
sed -n '/^.. python-example-begin/,/^.. python-example-end/p' "$TOP/Documentation/python.rst" |
	sed -n 's/^    //p' > "$WORK/example.py"

# run_pass LABEL LIBRARY [ENV...]: the unittests and the example; one summary line
run_pass() {
	local label=$1 lib=$2 log="$WORK/log.$1" prc=0 ex_bad=0 py_bad=0 ran bad skipped
	shift 2
	echo "== $label pass: $lib"
	env KVRT_LIBRARY="$lib" "$@" "$VPY" -c 'import kvrt, sys; assert "site-packages" in kvrt.__file__, kvrt.__file__; print("kvrt", kvrt.__file__, "on", kvrt.LIBRARY)' || return 1
	env KVRT_LIBRARY="$lib" "$@" "$VPY" -m unittest discover -s tests -t . -v 2>&1 | tee "$log" || prc=1
	env KVRT_LIBRARY="$lib" "$@" "$VPY" "$WORK/example.py" > "$WORK/example.out.$label" 2>&1 &&
		echo "doc example: ok" ||
		{ echo "doc example: FAILED"; cat "$WORK/example.out.$label"; ex_bad=1; prc=1; }
	# The same tests collected by pytest, plain pass only (about 11 s): its
	# discovery and imports must keep working; a failure counts as one.
	if [ "$label" = plain ]; then
		if env KVRT_LIBRARY="$lib" "$@" "$VPY" -m pytest -q -p no:cacheprovider tests \
			> "$WORK/pytest.out" 2>&1; then
			echo "pytest: ok, $(tail -n1 "$WORK/pytest.out")"
		else
			echo "pytest: FAILED"; cat "$WORK/pytest.out"; py_bad=1; prc=1
		fi
	fi
	ran=$(sed -n 's/^Ran \([0-9]*\) tests\? .*/\1/p' "$log")
	bad=$(grep -cE '\.\.\. (FAIL|ERROR)$' "$log" || true)
	skipped=$(grep -cE '\.\.\. skipped' "$log" || true)
	# a sanitizer report ends the process: no "Ran" line, count it as a failure
	[ -n "$ran" ] || { bad=$((bad + 1)); prc=1; }
	SUMMARY+="# $label pass:"$'\n'"$(( ${ran:-0} - bad - skipped + 1 - ex_bad )) passed, $(( bad + ex_bad + py_bad )) failed, $skipped skipped"$'\n'
	return $prc
}

# the installed copy, not the source tree
KVRT_LIBRARY="$LIB" "$VPY" -c 'import importlib.resources as r; assert r.files("kvrt").joinpath("py.typed").is_file()'
rc=0
SUMMARY=
run_pass plain "$LIB" || rc=1
if [ "${KVRT_PYTHON_ASAN:-1}" != 0 ]; then
	ASAN_LIB=$(cd "$HERE/.." && pwd)/build/asan/libkvrt.so.0
	ASAN_RT=$(${CC:-gcc} -print-file-name=libasan.so)
	UBSAN_RT=$(${CC:-gcc} -print-file-name=libubsan.so)
	if [ ! -e "$ASAN_LIB" ]; then
		echo "check-python: $ASAN_LIB is not built (make -C libkvrt asan-so)" >&2
		SUMMARY+="# asan pass:"$'\n'"0 passed, 1 failed, 0 skipped"$'\n'; rc=1
	else
		run_pass asan "$ASAN_LIB" LD_PRELOAD="$ASAN_RT $UBSAN_RT" \
			ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1 \
			UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 || rc=1
	fi
fi
printf '%s' "$SUMMARY"
exit $rc
