#!/bin/bash
# SPDX-License-Identifier: MIT
#
# packaging/test-python-install.sh: README's Python install, as a new user
# runs it.  In a fresh plain venv (Debian's `python3 -m venv`, nothing from
# the system's site-packages), `make lib && pip install ./libkvrt/python`
# exactly as README.md writes it, then, from outside the tree and with no
# KVRT_LIBRARY or LD_LIBRARY_PATH set:
#
#   - `import kvrt` loads the library copy bundled into the installed
#     package, and its version is the package's;
#   - an embedded pool opens, a space is created, a block is allocated,
#     written, published and found again by its hash;
#   - the wheel pip built is tagged for this platform (it holds a .so);
#   - built without the library (KVRT_BUNDLE_LIBRARY=0) and with nothing
#     on the loader's path, the import fails saying what to run.
#
# pip fetches numpy and the build's setuptools from the package index (its
# cache outside the clone keeps them).  TAP-style lines, then "N passed, N
# failed"; exits non-zero on any failure.
# SC2016: awk's program is in single quotes on purpose.
# shellcheck disable=SC2016
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
S=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-py-install.XXXXXX")
trap 'rm -rf "$S"' EXIT
unset KVRT_LIBRARY LD_LIBRARY_PATH PYTHONPATH
pass=0 fail=0 skip=0 n=0
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }

# The command, as README.md has it (the line that installs into the venv).
line=$(grep -m1 -E '^make lib && pip install ' "$ROOT/README.md" | sed 's/[[:space:]]*#.*//')
check "README.md has the install line: ${line:-none}" test "$line" = \
	"make lib && pip install ./libkvrt/python"

"$PY" -m venv "$S/venv" || { not_ok "python3 -m venv"; echo "$pass passed, $fail failed"; exit 1; }
if (cd "$ROOT" && PATH="$S/venv/bin:$PATH" && eval "$line") >"$S/install.log" 2>&1; then
	ok "in a fresh venv, from the top of the tree: $line"
else
	not_ok "in a fresh venv, from the top of the tree: $line"
	sed 's/^/# /' "$S/install.log" | tail -20
fi

cd "$S" || exit 1
cat >"$S/use.py" <<'PY'
import os, sys
import kvrt
assert "site-packages" in kvrt.__file__, kvrt.__file__
print("where", kvrt.LIBRARY)
print("versions", kvrt.__version__, kvrt.library_version())
pool = kvrt.Pool("embedded", no_hugetlb=True)
sp = pool.create_space("readme-install", block_bytes=4096, quota_bytes=1 << 20)
ids = sp.alloc(1)
sp.block_view(int(ids[0]))[:5] = list(b"hello")
h = bytes(range(32))
sp.publish(ids, [h], [50])
sp.release(ids)
got = sp.lookup([h])
print("found", len(got), bytes(sp.block_view(int(got[0]))[:5]).decode())
sp.release(got)
sp.close()
pool.close()
PY
out=$("$S/venv/bin/python" "$S/use.py" 2>&1)
printf '# %s\n' "${out//$'\n'/$'\n'# }"
check "import kvrt outside the tree loads the bundled library" \
	grep -qE '^where bundled .*/site-packages/kvrt/_bundled/libkvrt\.so\.0$' <<<"$out"
v=$(sed -n 's/^versions //p' <<<"$out")
check "package and library are one version (${v:-none})" \
	awk '{ split($1, a, "."); split($2, b, "."); exit !(NF == 2 && a[1] "." a[2] == b[1] "." b[2]) }' <<<"${v:-x}"
check "a pool opens, a block is stored and found by its hash" \
	grep -qx 'found 1 hello' <<<"$out"
wheel=$(find "$S"/venv/lib -maxdepth 3 -type d -name 'kvrt-*.dist-info' | head -1)
check "the installed wheel is not pure Python (Root-Is-Purelib: false)" \
	grep -qx 'Root-Is-Purelib: false' "$wheel/WHEEL"
check "the wheel's tag is this platform's (linux_x86_64)" \
	grep -q '^Tag: .*linux_x86_64$' "$wheel/WHEEL"

# Without the bundled copy, nothing else on the loader's path: a clear error.
if ! "$PY" -c 'import ctypes; ctypes.CDLL("libkvrt.so.0")' 2>/dev/null; then
	"$PY" -m venv "$S/bare"
	(cd "$ROOT" && KVRT_BUNDLE_LIBRARY=0 "$S/bare/bin/pip" install -q ./libkvrt/python) \
		>"$S/bare.log" 2>&1
	msg=$("$S/bare/bin/python" -c 'import kvrt' 2>&1)
	check "without the bundle, import says what to run" \
		grep -q 'make lib.*pip install ./libkvrt/python' <<<"$msg"
else
	n=$((n + 1)); skip=$((skip + 1))
	echo "ok $n - # SKIP libkvrt.so.0 is on the loader's path here (make install?)"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
