#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build (once) the debug kernel of `make check-debug`: Debian's linux-source-6.1
# on a tinyconfig base with selftests/debug/kvpool-debug.config merged in
# (KASAN, lockdep, kmemleak, UBSAN, KUnit, fault injection, NUMA, ...).
#
# The tree is built in place in a cache directory outside the repository,
#   ${KVPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvpool}/debug-kernel/<key>
# where <key> hashes the fragment, the source package's version and the
# compiler.  A tree is reused when its stamp file (.kvpool-complete, written
# last) is there; an unfinished one is resumed (make is incremental).
#
# On success the last line on stdout is the tree's path: its
# arch/x86/boot/bzImage boots in run-vm.sh, and it is the KDIR to build
# modules against.  Progress goes to stderr; make's output to <tree>/../build.log.
#
# Environment:
#   KVPOOL_CACHE         cache root (see above)
#   KVPOOL_KSRC_TARBALL  kernel source (default /usr/src/linux-source-6.1.tar.xz)
#   KVPOOL_DEBUG_JOBS    make -j (default: nproc)

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FRAG=$HERE/kvpool-debug.config
TARBALL=${KVPOOL_KSRC_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
JOBS=${KVPOOL_DEBUG_JOBS:-$(nproc)}
CACHE_ROOT=${KVPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvpool}

say() { echo "build-kernel: $*" >&2; }
die() {
	echo "build-kernel: error: $*" >&2
	exit 1
}

[ -r "$FRAG" ] || die "$FRAG missing"
[ -r "$TARBALL" ] || die "$TARBALL missing: install linux-source-6.1 ('make deps')"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "KVPOOL_DEBUG_JOBS must be a positive number"
for tool in make gcc flex bison bc xz tar sha256sum flock; do
	command -v $tool >/dev/null || die "$tool not found: run 'make deps'"
done
[ -e /usr/include/libelf.h ] || die "libelf.h missing (objtool needs it): run 'make deps' (libelf-dev)"

# The source's version: the Debian package's when it is installed, else the
# tarball's size and time.
srcver=$(dpkg-query -S "$TARBALL" 2>/dev/null | cut -d: -f1 | head -n1 || true)
if [ -n "$srcver" ]; then
	srcver="$srcver $(dpkg-query -W -f='${Version}' "$srcver" 2>/dev/null || true)"
else
	srcver="$(basename "$TARBALL") $(stat -c '%s %Y' "$TARBALL")"
fi
key=$({
	cat "$FRAG"
	echo "source: $srcver"
	echo "compiler: $(gcc --version | head -n1)"
} | sha256sum | cut -c1-16)

DIR=$CACHE_ROOT/debug-kernel/$key
STAMP=$DIR/.kvpool-complete
LOG=$DIR/build.log
mkdir -p "$DIR"

# One build per tree at a time; a second caller waits, then finds it done.
exec 9>"$DIR/.lock"
if ! flock -n 9; then
	say "another build of $DIR is running; waiting for it"
	flock 9
fi

if [ -f "$STAMP" ]; then
	TREE=$(sed -n 's/^tree: //p' "$STAMP")
	if [ -n "$TREE" ] && [ -f "$TREE/arch/x86/boot/bzImage" ] && [ -f "$TREE/Module.symvers" ]; then
		say "reusing $TREE ($(sed -n 's/^release: //p' "$STAMP"), built $(sed -n 's/^built: //p' "$STAMP"))"
		echo "$TREE"
		exit 0
	fi
	say "$STAMP names an incomplete tree; rebuilding"
	rm -f "$STAMP"
fi

top=$(tar tJf "$TARBALL" 2>/dev/null | head -n1 || true)
top=${top%%/*}
[ -n "$top" ] || die "cannot list $TARBALL"
TREE=$DIR/$top
t0=$(date +%s)

if [ ! -f "$DIR/.extracted" ]; then
	rm -rf "$TREE"
	say "extracting $TARBALL ($srcver) into $DIR"
	tar xJf "$TARBALL" -C "$DIR"
	[ -f "$TREE/Makefile" ] || die "$TARBALL has no $top/Makefile"
	touch "$DIR/.extracted"
fi

# --- configure -------------------------------------------------------------
#
# tinyconfig, then the fragment, then olddefconfig.  Running this again on a
# configured tree leaves .config and the build as they are.

say "configuring: tinyconfig + ${FRAG#"$HERE"/}"
{
	make -C "$TREE" tinyconfig
	(cd "$TREE" && scripts/kconfig/merge_config.sh -m .config "$FRAG")
	make -C "$TREE" olddefconfig
} >"$LOG" 2>&1 || {
	tail -n 30 "$LOG" >&2
	die "configuring failed (log: $LOG)"
}

# Every line of the fragment must have survived: a dependency that is not
# met makes Kconfig drop an option without a word.
missing=()
while IFS= read -r line; do
	case $line in
	CONFIG_*=*)
		opt=${line%%=*}
		grep -qxF -- "$line" "$TREE/.config" && continue
		got=$(grep -E "^$opt=|^# $opt is not set" "$TREE/.config" || true)
		missing+=("$line (got: ${got:-absent})")
		;;
	"# CONFIG_"*" is not set")
		opt=${line#\# }
		opt=${opt%% *}
		got=$(grep -E "^$opt=" "$TREE/.config" || true)
		[ -z "$got" ] || missing+=("$line (got: $got)")
		;;
	esac
done <"$FRAG"
if [ ${#missing[@]} -gt 0 ]; then
	say "these options of ${FRAG#"$HERE"/} did not end up in $TREE/.config as asked:"
	printf '  %s\n' "${missing[@]}" >&2
	die "fix the fragment (a dependency is missing or a choice conflicts)"
fi

# --- build ------------------------------------------------------------------
#
# bzImage (which builds vmlinux) and modules: the latter writes the
# Module.symvers that lets modpost check an external module's symbols.

say "building bzImage and modules with -j$JOBS (log: $LOG); a first build takes minutes"
tb=$(date +%s)
if ! make -C "$TREE" -j"$JOBS" bzImage modules >>"$LOG" 2>&1; then
	grep -E 'error|Error' "$LOG" | tail -n 20 >&2 || true
	tail -n 20 "$LOG" >&2
	die "kernel build failed (log: $LOG)"
fi
te=$(date +%s)
release=$(cat "$TREE/include/config/kernel.release")
[ -f "$TREE/arch/x86/boot/bzImage" ] || die "no bzImage after the build (log: $LOG)"
[ -f "$TREE/Module.symvers" ] || die "no Module.symvers after the build (log: $LOG)"
printf 'tree: %s\nrelease: %s\nbuilt: %s\nbuild seconds: %s\njobs: %s\nsource: %s\n' \
	"$TREE" "$release" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((te - tb))" "$JOBS" "$srcver" \
	>"$STAMP.tmp"
mv -f "$STAMP.tmp" "$STAMP"
say "built $release in $((te - tb))s with -j$JOBS ($((te - t0))s with extraction and config)"

# Trees of other keys (an older fragment or source) are stale: a few GiB
# each.  Remove those that no build holds now.
for old in "$CACHE_ROOT"/debug-kernel/*/; do
	old=${old%/}
	if [ "$old" = "$DIR" ] || [ ! -f "$old/.lock" ]; then
		continue
	fi
	(
		flock -n 9 || exit 0
		say "removing the stale tree $old"
		rm -rf "$old"
	) 9<"$old/.lock"
done
echo "$TREE"
