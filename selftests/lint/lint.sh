#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# lint.sh: what `make lint` runs.  Four checks, each passes or fails:
#
#   checkpatch  scripts/checkpatch.pl --strict --no-tree -f, from Debian's
#               linux-source-6.1, on every source file in kmod/ (core/ and
#               kunit/ included) and on include/uapi/linux/kvpool.h.  Any
#               ERROR, WARNING or CHECK fails, except the types ignored
#               below.
#   sparse      kvpool.ko built with C=2 CHECK=sparse W=1 in a scratch copy
#               of the tree (the source tree gets no objects).  Any warning
#               or error, from sparse or gcc, in one of our files fails.
#   userspace   tools/, selftests/core, selftests/kvpool and libkvrt/ (its
#               default target) built in a scratch copy; every command that
#               compiles C must carry -Wall -Wextra -Werror.
#   python      pyflakes on every tracked .py file; mypy on the kvrt
#               package (libkvrt/python/src/kvrt).
#
# The last line is "N passed, N failed"; the exit status is non-zero on any
# failure.  checkpatch and its data files are extracted once into
# $KVPOOL_LINT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kvpool/lint).
#
# Environment: KDIR (one kernel build dir; default: each series installed),
# LINUX_SOURCE_TAR (default /usr/src/linux-source-6.1.tar.xz), CC.

set -u

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TAR=${LINUX_SOURCE_TAR:-/usr/src/linux-source-6.1.tar.xz}
CACHE=${KVPOOL_LINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvpool/lint}
JOBS=$(nproc 2>/dev/null || echo 4)

# checkpatch types ignored, by path.  Fix the code rather than add here;
# each entry says why the code is right as it is.
cp_ignores()
{
	case $1 in
	kmod/core/*)
		# kvcore is portable C with no kernel headers: it is also
		# compiled into libkvrt and the userspace tests.  The userspace
		# half of kvc_shim.h has to name <stdint.h>'s uint8_t/uint32_t/
		# uint64_t (everything else uses kvc_u8/kvc_u32/kvc_u64), and
		# BIT_ULL() does not exist outside the kernel (KVC_MAX_BLOCKS
		# is a count, not a bit mask, anyway).  checkpatch reads the
		# pointer-to-array parameter "const kvc_u8 (*hashes)[32]" as
		# an unnamed argument.
		echo PREFER_KERNEL_TYPES,BIT_MACRO,FUNCTION_ARGUMENTS
		;;
	kmod/compat.h)
		# The module is built out of tree against Debian 12's 6.1 and
		# 6.12, so it needs the kernel APIs that changed in between
		# (compat.h names each release); this header holds the only
		# version checks.  checkpatch also reads "LINUX_VERSION_CODE >=
		# KERNEL_VERSION()" as a constant on the left of a comparison.
		echo LINUX_VERSION_CODE,CONSTANT_COMPARISON
		;;
	kmod/sysfs.c)
		# KVP_COUNTER_ATTR(name) pastes an identifier (name##_show,
		# kvp_pool.name, DEVICE_ATTR_RO(name)): it cannot have side
		# effects, which is what MACRO_ARG_REUSE is about.  This is the
		# DEVICE_ATTR idiom used throughout drivers/.
		echo MACRO_ARG_REUSE
		;;
	esac
}

passed=0
failed=0
result()	# result ok|fail NAME DETAIL
{
	if [ "$1" = ok ]; then
		echo "ok - $2${3:+: $3}"
		passed=$((passed + 1))
	else
		echo "not ok - $2${3:+: $3}"
		failed=$((failed + 1))
	fi
}

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-lint.XXXXXX") || exit 1
trap 'rm -rf "$SCRATCH"' EXIT

# The tree's sources (tracked and untracked, not ignored: no build outputs)
# copied to $1.
copy_tree()
{
	local dst=$1

	mkdir -p "$dst"
	if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$SRC" && git ls-files -z -co --exclude-standard |
			while IFS= read -r -d '' f; do
				[ -f "$f" ] && printf '%s\0' "$f"
			done | tar --null -T - -cf -) | tar -xf - -C "$dst"
	else
		(cd "$SRC" && tar --exclude-vcs --exclude=build --exclude='*.o' \
			--exclude='*.ko' --exclude='*.mod*' --exclude='*.cmd' \
			--exclude='*_test' -cf - .) | tar -xf - -C "$dst"
	fi
}

# kmod/ source files and the uAPI header, relative to $SRC.
lint_files()
{
	(cd "$SRC" &&
	if git rev-parse --git-dir >/dev/null 2>&1; then
		git ls-files -co --exclude-standard kmod
	else
		find kmod -type f \( -name '*.[ch]' -o -name Kbuild -o -name Makefile \) \
			! -name '*.mod.c'
	fi | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done
	echo include/uapi/linux/kvpool.h)
}

# checkpatch.pl and what it reads beside itself, extracted once per
# linux-source tarball.
checkpatch_setup()
{
	local stamp tmp

	[ -r "$TAR" ] || { echo "$TAR missing: run 'make deps' (linux-source-6.1)"; return 1; }
	stamp=$(stat -c '%n %s %Y' "$TAR")
	if [ -f "$CACHE/stamp" ] && [ "$(cat "$CACHE/stamp")" = "$stamp" ] &&
	   [ -f "$CACHE/scripts/checkpatch.pl" ]; then
		return 0
	fi
	mkdir -p "$(dirname "$CACHE")" || return 1
	tmp=$(mktemp -d "$(dirname "$CACHE")/.lint.XXXXXX") || return 1
	if ! tar -xJf "$TAR" -C "$tmp" --wildcards --strip-components=1 \
		'*/scripts/checkpatch.pl' '*/scripts/spelling.txt' \
		'*/scripts/const_structs.checkpatch' \
		'*/Documentation/dev-tools/checkpatch.rst'; then
		rm -rf "$tmp"
		return 1
	fi
	echo "$stamp" >"$tmp/stamp"
	rm -rf "$CACHE" && mv "$tmp" "$CACHE"
}

check_checkpatch()
{
	local f out rc n=0 nfiles=0 bad=0

	if ! checkpatch_setup; then
		result fail checkpatch "cannot extract checkpatch.pl from $TAR"
		return
	fi
	while read -r f; do
		nfiles=$((nfiles + 1))
		out=$(cd "$SRC" && perl "$CACHE/scripts/checkpatch.pl" --strict --no-tree \
			--show-types --quiet --no-summary --color=never \
			--ignore "$(cp_ignores "$f")" -f "$f" 2>&1)
		rc=$?
		n=$((n + $(grep -cE '^(ERROR|WARNING|CHECK):' <<<"$out")))
		if [ $rc -ne 0 ] || [ -n "$out" ]; then
			bad=$((bad + 1))
			echo "$out"
		fi
	done < <(lint_files)
	if [ $bad -eq 0 ]; then
		result ok checkpatch "$nfiles files clean (--strict)"
	else
		result fail checkpatch "$n findings in $bad of $nfiles files"
	fi
}

# shellcheck source=selftests/vm/kernels.sh
. "$SRC/selftests/vm/kernels.sh"

# The kernel trees sparse builds against: KDIR when set, else each kernel
# series installed with headers (Debian 12: 6.1 and 6.12), else the
# running kernel's build dir.
kdirs()
{
	local v

	if [ -n "${KDIR:-}" ]; then
		echo "$KDIR"
		return
	fi
	for v in $(kvpool_kernels); do
		echo "/usr/src/linux-headers-$v"
	done | grep . || echo "/lib/modules/$(uname -r)/build"
}

check_sparse()
{
	local k rc b=$SCRATCH/sparse log=$SCRATCH/sparse.log n

	if ! command -v sparse >/dev/null; then
		result fail sparse "sparse is not installed: run 'make deps'"
		return
	fi
	for k in $(kdirs); do
		if [ ! -d "$k" ]; then
			result fail sparse "no kernel headers at $k: run 'make deps' or set KDIR"
			continue
		fi
		rm -rf "$b"
		copy_tree "$b"
		make -C "$k" M="$b" C=2 CHECK=sparse W=1 -j"$JOBS" modules >"$log" 2>&1
		rc=$?
		# Our diagnostics name a file in the copy; the kernel's headers' own
		# are not ours to fix.
		n=$(grep -cE "^$b/[^:]+:[0-9]+:([0-9]+:)? (warning|error):" "$log")
		if [ $rc -ne 0 ] || [ "$n" -ne 0 ]; then
			sed "s|$b/||g" "$log" | grep -vE '^  [A-Z]+ |^make(\[[0-9]+\])?: (Entering|Leaving)'
			result fail sparse "${k##*/}: $n diagnostics, make exit $rc"
		else
			result ok sparse "kvpool.ko clean against ${k##*/} (C=2 W=1)"
		fi
	done
}

check_userspace()
{
	local b=$SCRATCH/user log=$SCRATCH/user.log dirs d rc=0 n total

	copy_tree "$b"
	# What the top Makefile exports to tools/.
	export CFLAGS_USER="-O2 -g -Wall -Wextra -Werror -I$b/include/uapi -I$b/kmod/core"
	dirs="tools selftests/kvpool"
	[ -f "$b/libkvrt/Makefile" ] && dirs="$dirs libkvrt"
	: >"$log"
	# KVRT_GPU=0: the same C files, without nvcc building the GPU kernels
	# again (minutes, and no C compiler command in it to check).
	for d in $dirs; do
		make -B -C "$b/$d" -j"$JOBS" KVRT_GPU=0 >>"$log" 2>&1 ||
			{ rc=1; echo "$d: build failed" >>"$log"; }
	done
	# selftests/core: the binaries only; `make check-core` runs them.
	make -B -C "$b/selftests/core" -j"$JOBS" build/test_kvcore build/fuzz_kvcore \
		build/gen_corpus >>"$log" 2>&1 || { rc=1; echo "selftests/core: build failed" >>"$log"; }
	# Every compiler command that compiles C must carry all three flags
	# (make -B above rebuilt everything, so every command is in the log;
	# link-only commands are not checked).
	read -r total n < <(awk -v cc="${CC:-cc}" '
		{ base = $1; sub(/.*\//, "", base) }
		(base ~ /^(cc|gcc|clang)(-[0-9]+)?$/ || $1 == cc) && / -[co] / {
			w = x = e = c = 0
			for (i = 2; i <= NF; i++) {
				if ($i == "-Wall") w = 1
				if ($i == "-Wextra") x = 1
				if ($i == "-Werror") e = 1
				if ($i ~ /\.c$/) c = 1
			}
			if (!c)
				next
			total++
			if (!(w && x && e)) {
				print "lacks -Wall -Wextra -Werror: " $0 > "/dev/stderr"
				bad++
			}
		}
		END { print total + 0, bad + 0 }' "$log" 2>"$SCRATCH/flags.log")
	cat "$SCRATCH/flags.log" >>"$log"
	dirs="${dirs// /, }, selftests/core"
	if [ $rc -ne 0 ] || [ "$n" -ne 0 ] || [ "$total" -eq 0 ]; then
		sed "s|$b/||g" "$log" | grep -vE '^make(\[[0-9]+\])?: (Entering|Leaving)'
		result fail userspace "$dirs: build failed, or $n of $total compiler commands lack -Werror"
	else
		result ok userspace "$dirs: $total compiler commands, all -Wall -Wextra -Werror"
	fi
}

# Python: pyflakes on every tracked .py file (undefined names, unused
# imports), and mypy on the kvrt package, whose hints are its API's
# documentation (the engines it imports need not be installed).
check_python()
{
	local files n out
	if ! command -v pyflakes3 >/dev/null || ! command -v mypy >/dev/null; then
		result fail python "pyflakes3 or mypy is not installed: run 'make deps'"
		return
	fi
	mapfile -t files < <(git -C "$SRC" ls-files '*.py')
	out=$(cd "$SRC" && pyflakes3 "${files[@]}" 2>&1)
	n=$(printf '%s' "$out" | grep -c .)
	if [ "$n" -ne 0 ]; then
		echo "$out"
		result fail python "pyflakes: $n findings in ${#files[@]} files"
		return
	fi
	if ! out=$(cd "$SRC/libkvrt/python" && mypy --ignore-missing-imports \
		--cache-dir "$SCRATCH/mypy" src/kvrt 2>&1); then
		echo "$out"
		result fail python "mypy libkvrt/python/src/kvrt: $(echo "$out" | tail -1)"
		return
	fi
	result ok python "pyflakes: ${#files[@]} files clean; mypy: $(echo "$out" | tail -1)"
}

start=$(date +%s)
for c in checkpatch sparse userspace python; do
	t=$(date +%s)
	"check_$c"
	echo "# $c: $(($(date +%s) - t)) s"
done
echo "# lint: $(($(date +%s) - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
