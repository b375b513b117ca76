#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# flashinfer-stage.sh: FlashInfer beside libkvrt on a GPU machine that
# reaches no package registry and takes at most 64 MiB per call (the
# working tree included), in two steps.
#
#   Here (the build machine, with PyPI):
#     bench/flashinfer-stage.sh fetch      pip download the pinned wheels below
#                                          into $FI_CACHE and check their sha256
#     bench/flashinfer-stage.sh pack       cut them (one tar) into parts of at
#                                          most $FI_PART_MIB MiB in $FI_CACHE/parts;
#                                          says how many device calls step 1 takes
#     bench/flashinfer-stage.sh stage N    put part N alone into .fi-stage/ (ignored
#                                          by git), which that call carries
#   On the GPU machine, from the repository root:
#     step 1, once per part (carry .fi-stage):
#       bash bench/flashinfer-stage.sh receive
#         keeps the part in $FI_DEVICE_DIR (kept while the machine is warm);
#         after the last, checks the tar's sha256 and installs the wheels with
#         pip install --no-index --no-deps --target $FI_DEVICE_DIR/site
#     step 2:
#       bash bench/flashinfer-stage.sh run [flashinfer_peer.py options]
#         imports flashinfer from there and runs bench/flashinfer_peer.py
#         (kvbench JSON lines on stdout); with FI_OUT=DIR also writes
#         DIR/flashinfer-peer.jsonl and .log
#
# Pinned (PyPI, 2026-12-07): flashinfer-python 0.6.13, the release that
# matches the newest flashinfer-cubin (0.6.13), 14.2 MB, with the sources
# its JIT compiles (csrc, cutlass, cccl headers); and apache-tvm-ffi, which
# it imports and the machine lacks.  Everything else it imports at load
# (torch, numpy, jinja2, filelock, packaging, requests, tqdm, pynvml,
# cuda-bindings, ninja) is in the machine's image; nvcc 13 there builds the
# decode and prefill kernels at their first call.  Not carried:
# flashinfer-cubin (458 MB of trtllm-gen/cuBLASLt cubins, none used by
# the FA2 paged decode and prefill on sm_90) and flashinfer-python 0.7.4
# (101.3 MB, three parts; FI_VERSION=0.7.4 with its pins below).
#
# Environment: FI_CACHE (default ~/.cache/kvpool/flashinfer, outside the
# repository), FI_PART_MIB (default 48: 64 MiB less the ~5 MiB tree and a
# margin), FI_DEVICE_DIR (default /root/kvpool-fi), FI_VERSION (0.6.13).
#
# Exit status: 0; 1 a failure said on stderr; 2 usage; 3 (receive) more parts
# to come, nothing installed yet.

set -u
here=$(cd "$(dirname "$0")/.." && pwd)
FI_CACHE=${FI_CACHE:-$HOME/.cache/kvpool/flashinfer}
FI_PART_MIB=${FI_PART_MIB:-48}
FI_DEVICE_DIR=${FI_DEVICE_DIR:-/root/kvpool-fi}
FI_VERSION=${FI_VERSION:-0.6.13}
STAGE=$here/.fi-stage

# name==version  file  sha256 (as downloaded on 2026-12-07)
pins() {
	case $FI_VERSION in
	0.6.13) echo "flashinfer-python==0.6.13 flashinfer_python-0.6.13-py3-none-any.whl 239e6ddc3cbbaf0bee251861a8c7c69438b1171830d69ddfa133ddea4494850d" ;;
	0.7.4) echo "flashinfer-python==0.7.4 flashinfer_python-0.7.4-py3-none-any.whl a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32" ;;
	*) echo "flashinfer-stage: FI_VERSION is 0.6.13 or 0.7.4, not '$FI_VERSION'" >&2; exit 2 ;;
	esac
	echo "apache-tvm-ffi==0.1.15.post2 apache_tvm_ffi-0.1.15.post2-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl 059eed9bfc94bcd41650fb8eefde74040a1bc7e7b1a6f0a8ff897b02b118875b"
}

die() { echo "flashinfer-stage: $*" >&2; exit 1; }
usage() { sed -n '4,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

fetch() {
	local spec file sum
	mkdir -p "$FI_CACHE" || die "cannot make $FI_CACHE"
	while read -r spec file sum; do
		if [ ! -f "$FI_CACHE/$file" ]; then
			# the GPU machine's python is CPython 3.12 on x86-64 (KINDS.md)
			python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
				--implementation cp --platform manylinux_2_28_x86_64 \
				--platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
				-d "$FI_CACHE" "$spec" || die "pip download $spec failed"
		fi
		echo "$sum  $FI_CACHE/$file" | sha256sum -c --quiet - || die "$file: sha256 differs from the pin"
		echo "$spec  $(stat -c %s "$FI_CACHE/$file") bytes  $file"
	done < <(pins)
}

pack() {
	local files=() spec file sum n
	while read -r spec file sum; do
		[ -f "$FI_CACHE/$file" ] || die "$file is not in $FI_CACHE: run fetch first"
		files+=("$file")
	done < <(pins)
	rm -rf "$FI_CACHE/parts" && mkdir -p "$FI_CACHE/parts" || exit 1
	tar -C "$FI_CACHE" -cf "$FI_CACHE/parts/wheels.tar" "${files[@]}" || exit 1
	(cd "$FI_CACHE/parts" && split -b "${FI_PART_MIB}M" -d -a 2 wheels.tar part- &&
		sha256sum wheels.tar > wheels.tar.sha256 && rm wheels.tar) || exit 1
	n=$(ls "$FI_CACHE/parts"/part-* | wc -l)
	echo "$n" > "$FI_CACHE/parts/COUNT"
	echo "flashinfer-stage: $(du -cb "$FI_CACHE/parts"/part-* | tail -1 | cut -f1) bytes" \
		"in $n part(s) of at most $FI_PART_MIB MiB: step 1 takes $n device call(s)"
}

stage() {
	local n=${1:-} part exclude
	[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || usage
	[ -f "$FI_CACHE/parts/COUNT" ] || die "no parts in $FI_CACHE/parts: run pack first"
	[ "$n" -le "$(cat "$FI_CACHE/parts/COUNT")" ] || die "there are $(cat "$FI_CACHE/parts/COUNT") parts, not $n"
	part=$(printf 'part-%02d' $((n - 1)))
	exclude=$(git -C "$here" rev-parse --git-path info/exclude)
	case $exclude in /*) ;; *) exclude=$here/$exclude ;; esac
	grep -qx '/.fi-stage/' "$exclude" 2>/dev/null || echo '/.fi-stage/' >> "$exclude"
	rm -rf "$STAGE" && mkdir -p "$STAGE" || exit 1
	cp "$FI_CACHE/parts/$part" "$FI_CACHE/parts/COUNT" "$FI_CACHE/parts/wheels.tar.sha256" "$STAGE/"
	echo "flashinfer-stage: $STAGE holds $part of $(cat "$FI_CACHE/parts/COUNT"); the call carries .fi-stage"
}

receive() {
	local d=$FI_DEVICE_DIR count have
	[ -f "$STAGE/COUNT" ] || die "no .fi-stage here: carry it (bench/flashinfer-stage.sh stage N first)"
	mkdir -p "$d/parts" || exit 1
	cp "$STAGE"/part-* "$STAGE/COUNT" "$STAGE/wheels.tar.sha256" "$d/parts/" || exit 1
	count=$(cat "$d/parts/COUNT")
	have=$(ls "$d/parts"/part-* | wc -l)
	if [ "$have" -lt "$count" ]; then
		echo "flashinfer-stage: $have of $count parts in $d/parts; the next call brings the next"
		exit 3
	fi
	(cd "$d/parts" && cat part-* > wheels.tar && sha256sum -c --quiet wheels.tar.sha256) ||
		die "the parts do not make the tar that was packed (a part missing or from another pack)"
	rm -rf "$d/wheels" "$d/site" && mkdir -p "$d/wheels" &&
		tar -C "$d/wheels" -xf "$d/parts/wheels.tar" || exit 1
	python3 -m pip install -q --no-index --no-deps --no-compile --target "$d/site" "$d"/wheels/*.whl ||
		die "pip install into $d/site failed"
	PYTHONPATH=$d/site python3 -c 'import flashinfer, tvm_ffi; print("flashinfer-stage: flashinfer", flashinfer.__version__, "installed in", flashinfer.__file__.rsplit("/", 2)[0])' ||
		die "flashinfer does not import (above: what it lacks)"
}

run_peer() {
	local d=$FI_DEVICE_DIR rc
	[ -d "$d/site/flashinfer" ] || die "flashinfer is not installed in $d/site: step 1 first (receive)"
	export PYTHONPATH=$d/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
	if [ -n "${FI_OUT:-}" ]; then
		mkdir -p "$FI_OUT" || exit 1
		python3 "$here/bench/flashinfer_peer.py" "$@" > "$FI_OUT/flashinfer-peer.jsonl" \
			2> >(tee "$FI_OUT/flashinfer-peer.log" >&2)
		rc=$?
		cat "$FI_OUT/flashinfer-peer.jsonl"
		return $rc
	fi
	python3 "$here/bench/flashinfer_peer.py" "$@"
}

case ${1:-} in
fetch) fetch ;;
pack) pack ;;
stage) stage "${2:-}" ;;
receive) receive ;;
run) shift; run_peer "$@" ;;
*) usage ;;
esac
