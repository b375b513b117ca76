#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# packaging/test-install.sh: `make install` and `make install-dkms` into
# scratch DESTDIRs, then check what landed there:
#
#   - exactly the expected files (no more, no fewer), the soname links and
#     the library's SONAME;
#   - kvrt.pc: pkg-config --cflags --libs kvrt (and --static) give the
#     install paths; a tiny program built with those flags (pointed at the
#     DESTDIR with --define-variable=prefix=...) links against the installed
#     library, shared and static, and runs: kvrt_version() matches kvrt.h;
#   - PREFIX=/usr puts the udev rule and the sysusers file where udev and
#     systemd-sysusers read them;
#   - the DKMS tree: the module's sources and nothing built; dkms.conf parses
#     in bash and sets what DKMS needs; with dkms installed (Debian: dkms),
#     as root and with kernel headers, `dkms add`, then `dkms build` in a
#     scratch DKMS tree for each installed kernel series (Debian 12: 6.1
#     and 6.12) builds kvpool.ko with that kernel's vermagic
#     (KVPOOL_TEST_DKMS_BUILD=0 skips it);
#   - make uninstall leaves no file behind;
#   - make demo's short package list (.ci/deps.sh demo) holds every library
#     libkvrt and the tools link.
#
# Nothing outside the scratch directories is touched.  Prints TAP-style
# lines and ends with "N passed, N failed"; exits non-zero on any failure.
#
#   bash packaging/test-install.sh            # from anywhere

# SC2016: the bash -c snippets expand their own "$1"; SC2086: pkg-config's
# flags are meant to split into words.
# shellcheck disable=SC2016,SC2086

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-install-test.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

# Before the top Makefile includes install.mk, read both.
if grep -qE '^[[:space:]]*-?include[[:space:]].*install\.mk' "$ROOT/Makefile"; then
	MAKE_INSTALL=(make --no-print-directory -C "$ROOT")
else
	MAKE_INSTALL=(make --no-print-directory -C "$ROOT" -f Makefile -f install.mk)
fi

pass=0
fail=0
n=0
ok() {
	n=$((n + 1)); pass=$((pass + 1))
	echo "ok $n - $*"
}
not_ok() {
	n=$((n + 1)); fail=$((fail + 1))
	echo "not ok $n - $*"
}
check() {	# check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then ok "$what"; else not_ok "$what"; fi
}
skip() {
	n=$((n + 1))
	echo "ok $n - # SKIP $*"
}

VERSION=$(sed -n 's/^#define KVRT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
	"$ROOT/libkvrt/include/kvrt.h" | paste -sd.)
MAJOR=${VERSION%%.*}

# ---- make install, default PREFIX ---------------------------------------------

D=$SCRATCH/dest
P=/usr/local
if "${MAKE_INSTALL[@]}" install DESTDIR="$D" > "$SCRATCH/install.log" 2>&1; then
	ok "make install DESTDIR=... (PREFIX=$P)"
else
	not_ok "make install DESTDIR=... (PREFIX=$P)"
	sed 's/^/# /' "$SCRATCH/install.log"
fi

# What must be there.
expected() {	# expected DESTDIR PREFIX UDEVDIR SYSUSERSDIR
	local d=$1 p=$2 t m s
	echo "$d$p/lib/libkvrt.so.$VERSION"
	echo "$d$p/lib/libkvrt.so.$MAJOR"
	echo "$d$p/lib/libkvrt.so"
	echo "$d$p/lib/libkvrt.a"
	echo "$d$p/include/kvrt.h"
	echo "$d$p/lib/pkgconfig/kvrt.pc"
	for t in tools/kvctl/kvctl tools/kvbench/kvbench tools/kvrt-demo/kvrt-demo; do
		[ -x "$ROOT/$t" ] && echo "$d$p/bin/${t##*/}"
	done
	for m in "$ROOT"/Documentation/man/*.[0-9]; do
		[ -e "$m" ] || continue
		s=${m##*.}
		echo "$d$p/share/man/man$s/${m##*/}"
	done
	echo "$d$3/60-kvpool.rules"
	echo "$d$4/kvpool.conf"
	echo "$d$p/share/doc/kvpool/modprobe.d-kvpool.conf"
	echo "$d$p/share/doc/kvpool/modules-load.d-kvpool.conf"
	echo "$d$p/share/doc/kvpool/sysfs-class-misc-kvpool"
	for m in "$ROOT"/Documentation/*.rst; do
		echo "$d$p/share/doc/kvpool/${m##*/}"
	done
}

check_tree() {	# check_tree DESTDIR PREFIX UDEVDIR SYSUSERSDIR
	local want=$SCRATCH/want got=$SCRATCH/got
	expected "$@" | sort > "$want"
	find "$1" \( -type f -o -type l \) | sort > "$got"
	if diff -u "$want" "$got" > "$SCRATCH/tree.diff"; then
		ok "PREFIX=$2: exactly the expected $(wc -l < "$want") files"
	else
		not_ok "PREFIX=$2: installed files differ from the expected ones (- missing, + extra)"
		sed 's/^/# /' "$SCRATCH/tree.diff"
	fi
}
check_tree "$D" "$P" "$P/lib/udev/rules.d" /etc/sysusers.d

L=$D$P/lib
check "libkvrt.so.$MAJOR -> libkvrt.so.$VERSION" \
	test "$(readlink "$L/libkvrt.so.$MAJOR")" = "libkvrt.so.$VERSION"
check "libkvrt.so -> libkvrt.so.$MAJOR" test "$(readlink "$L/libkvrt.so")" = "libkvrt.so.$MAJOR"
soname=$(readelf -d "$L/libkvrt.so.$VERSION" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "SONAME is libkvrt.so.$MAJOR ($soname)" test "$soname" = "libkvrt.so.$MAJOR"
check "the installed kvrt.h is the tree's" cmp -s "$D$P/include/kvrt.h" "$ROOT/libkvrt/include/kvrt.h"
check "the udev rule gives /dev/kvpool to group kvpool, mode 0660" \
	grep -qE '^KERNEL=="kvpool",.*GROUP="kvpool", MODE="0660"' "$D$P/lib/udev/rules.d/60-kvpool.rules"
check "sysusers.d declares group kvpool" grep -qE '^g[[:space:]]+kvpool[[:space:]]+-' \
	"$D/etc/sysusers.d/kvpool.conf"
check "the modprobe.d example is not live config (doc dir only)" \
	test ! -e "$D/etc/modprobe.d/kvpool.conf" -a -e "$D$P/share/doc/kvpool/modprobe.d-kvpool.conf"
check "the modprobe.d example sets pool_mb_per_node" \
	grep -qE '^options kvpool pool_mb_per_node=[0-9]+$' "$D$P/share/doc/kvpool/modprobe.d-kvpool.conf"
for m in "$D$P"/share/man/man*/*; do
	[ -e "$m" ] || continue
	check "man page ${m##*/} renders without warnings" \
		bash -c 'out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$1" 2>&1 >/dev/null); [ -z "$out" ] || { echo "$out" | sed "s/^/# /"; false; }' _ "$m"
done

# ---- pkg-config ------------------------------------------------------------------

export PKG_CONFIG_PATH=$L/pkgconfig
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
if command -v pkg-config > /dev/null; then
	flags=$(pkg-config --cflags --libs kvrt 2>&1 | sed 's/ *$//')
	check "pkg-config --cflags --libs kvrt: '$flags'" \
		test "$flags" = "-I$P/include -L$P/lib -lkvrt"
	sflags=$(pkg-config --static --libs kvrt 2>&1 | sed 's/ *$//')
	check "pkg-config --static --libs kvrt has -lkvrt -lpthread -lm -lcrypto -luring -lxxhash -lhiredis: '$sflags'" \
		bash -c '[[ " $1 " == *" -L'"$P"'/lib -lkvrt "* && " $1 " == *" -lpthread "* &&
			   " $1 " == *" -lm "* && " $1 " == *" -lcrypto "* &&
			   " $1 " == *" -luring "* && " $1 " == *" -lxxhash "* &&
			   " $1 " == *" -lhiredis "* ]]' _ "$sflags"
	check "pkg-config --modversion kvrt is $VERSION" test "$(pkg-config --modversion kvrt)" = "$VERSION"

	# The same .pc pointed at the DESTDIR: the flags a real install would give.
	cflags=$(pkg-config --define-variable=prefix="$D$P" --cflags kvrt)
	libs=$(pkg-config --define-variable=prefix="$D$P" --libs kvrt)
	slibs=$(pkg-config --define-variable=prefix="$D$P" --static --libs kvrt)
	cat > "$SCRATCH/t.c" <<-'EOF'
	#include <stdio.h>
	#include <string.h>
	#include <kvrt.h>

	#define STR2(x) #x
	#define STR(x) STR2(x)

	int main(void)
	{
		const char *want = STR(KVRT_VERSION_MAJOR) "." STR(KVRT_VERSION_MINOR) "."
				   STR(KVRT_VERSION_PATCH);
		struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED };
		struct kvrt *k;
		int ret;

		printf("kvrt_version() = %s (kvrt.h %s)\n", kvrt_version(), want);
		if (strcmp(kvrt_version(), want) || kvrt_version_number() != KVRT_VERSION_NUMBER)
			return 1;
		ret = kvrt_open(&k, &o);
		if (ret)
			return 2;
		printf("%s\n", kvrt_backend_info(k));
		kvrt_close(k);
		return 0;
	}
	EOF
	if cc -Wall -Wextra -Werror -o "$SCRATCH/t" "$SCRATCH/t.c" $cflags $libs \
		2> "$SCRATCH/cc.log"; then
		ok "a program compiles and links with \$(pkg-config --cflags --libs kvrt)"
		lib=$(LD_LIBRARY_PATH=$L ldd "$SCRATCH/t" | awk '/libkvrt/ { print $3 }')
		check "it loads the installed libkvrt ($lib)" test "$lib" = "$L/libkvrt.so.$MAJOR"
		if out=$(LD_LIBRARY_PATH=$L "$SCRATCH/t" 2>&1); then
			ok "it runs: $(echo "$out" | head -1)"
		else
			not_ok "it runs"
			echo "$out" | sed 's/^/# /'
		fi
	else
		not_ok "a program compiles and links with \$(pkg-config --cflags --libs kvrt)"
		sed 's/^/# /' "$SCRATCH/cc.log"
	fi
	if cc -static -o "$SCRATCH/ts" "$SCRATCH/t.c" $cflags $slibs > "$SCRATCH/ccs.log" 2>&1 &&
	   "$SCRATCH/ts" > /dev/null; then
		ok "static: links with \$(pkg-config --static --cflags --libs kvrt) and runs"
	else
		not_ok "static: links with \$(pkg-config --static --cflags --libs kvrt) and runs"
		grep -v 'statically linked applications requires at runtime' "$SCRATCH/ccs.log" |
			sed 's/^/# /'
	fi
else
	skip "pkg-config is not installed (Debian: apt-get install pkgconf)"
fi

# ---- PREFIX=/usr: the system locations -------------------------------------------

D2=$SCRATCH/dest-usr
if "${MAKE_INSTALL[@]}" install DESTDIR="$D2" PREFIX=/usr > "$SCRATCH/install2.log" 2>&1; then
	ok "make install DESTDIR=... PREFIX=/usr"
	check_tree "$D2" /usr /usr/lib/udev/rules.d /usr/lib/sysusers.d
	check "PREFIX=/usr: kvrt.pc says prefix=/usr" grep -qx 'prefix=/usr' "$D2/usr/lib/pkgconfig/kvrt.pc"
else
	not_ok "make install DESTDIR=... PREFIX=/usr"
	sed 's/^/# /' "$SCRATCH/install2.log"
fi
D3=$SCRATCH/dest-opt
"${MAKE_INSTALL[@]}" install DESTDIR="$D3" PREFIX=/opt/kvpool > /dev/null 2>&1
check "PREFIX=/opt/kvpool: the udev rule goes to /etc/udev/rules.d (udev reads no /opt)" \
	test -e "$D3/etc/udev/rules.d/60-kvpool.rules"

# ---- make uninstall ------------------------------------------------------------

"${MAKE_INSTALL[@]}" uninstall DESTDIR="$D" > /dev/null 2>&1
left=$(find "$D" \( -type f -o -type l \) | sed "s|^$D||")
check "make uninstall removes every file${left:+ (left: ${left//$'\n'/ })}" test -z "$left"

# ---- make install-dkms -------------------------------------------------------------

K=$SCRATCH/dkms-dest
T=$K/usr/src/kvpool-$VERSION
if "${MAKE_INSTALL[@]}" install-dkms DESTDIR="$K" > "$SCRATCH/dkms-install.log" 2>&1; then
	ok "make install-dkms DESTDIR=... -> /usr/src/kvpool-$VERSION"
else
	not_ok "make install-dkms DESTDIR=..."
	sed 's/^/# /' "$SCRATCH/dkms-install.log"
fi
missing=""
for f in dkms.conf Kbuild kmod/Kbuild kmod/main.c kmod/kvpool_internal.h kmod/core/kvcore.c \
	kmod/core/kvcore.h kmod/core/kvc_shim.h kmod/core/kvrules.c kmod/core/kvrules.h \
	include/uapi/linux/kvpool.h; do
	[ -f "$T/$f" ] || missing="$missing $f"
done
for f in $(cd "$ROOT" && git ls-files kmod 2>/dev/null); do
	[ -f "$T/$f" ] || missing="$missing $f"
done
check "the DKMS tree has the module's sources${missing:+ (missing:$missing)}" test -z "$missing"
built=$(cd "$T" 2>/dev/null && find . \( -name '*.o' -o -name '*.ko' -o -name '*.mod*' -o -name '*.cmd' \
	-o -name Module.symvers -o -name modules.order \) | head -5)
check "the DKMS tree holds nothing built${built:+ ($built)}" test -z "$built"
check "dkms.conf parses (bash -n)" bash -n "$T/dkms.conf"
# DKMS sources dkms.conf in bash with these set; check what it needs.
dkms_vars=$(
	# shellcheck disable=SC2034  # read by dkms.conf
	kernel_source_dir=/KSRC dkms_tree=/DTREE kernelver=6.1.0-test
	set -u
	# shellcheck disable=SC1091
	. "$T/dkms.conf" || exit 1
	echo "PACKAGE_NAME=$PACKAGE_NAME"
	echo "PACKAGE_VERSION=$PACKAGE_VERSION"
	echo "BUILT_MODULE_NAME=${BUILT_MODULE_NAME[0]}"
	echo "BUILT_MODULE_LOCATION=${BUILT_MODULE_LOCATION[0]}"
	echo "DEST_MODULE_LOCATION=${DEST_MODULE_LOCATION[0]}"
	echo "MAKE=${MAKE[0]}"
	echo "AUTOINSTALL=$AUTOINSTALL"
) 2>&1
want_vars="PACKAGE_NAME=kvpool
PACKAGE_VERSION=$VERSION
BUILT_MODULE_NAME=kvpool
BUILT_MODULE_LOCATION=kmod/
DEST_MODULE_LOCATION=/updates/dkms
MAKE=make -C /KSRC M=/DTREE/kvpool/$VERSION/build modules
AUTOINSTALL=yes"
if [ "$dkms_vars" = "$want_vars" ]; then
	ok "dkms.conf sets PACKAGE_NAME, PACKAGE_VERSION, BUILT_MODULE_*, MAKE against \$kernel_source_dir, AUTOINSTALL=yes"
else
	not_ok "dkms.conf variables"
	diff <(echo "$want_vars") <(echo "$dkms_vars") | sed 's/^/# /'
fi
check "BUILT_MODULE_LOCATION holds a Kbuild that builds kvpool.o" \
	grep -qE '^obj-m[[:space:]]*[:+]?=[[:space:]]*kvpool\.o' "$T/kmod/Kbuild"
check "the top Kbuild descends into kmod/" grep -qE '^obj-m[[:space:]]*\+?=[[:space:]]*kmod/' "$T/Kbuild"

if ! command -v dkms > /dev/null; then
	skip "dkms is not installed (Debian: apt-get install dkms): no dkms add/build"
elif [ "${KVPOOL_TEST_DKMS_BUILD:-1}" = 0 ]; then
	skip "KVPOOL_TEST_DKMS_BUILD=0: no dkms add/build"
elif [ "$(id -u)" -ne 0 ]; then
	skip "not root: no dkms add/build"
else
	# Every kernel series installed with headers (Debian 12: 6.1 and 6.12),
	# each built the way DKMS builds it, in one scratch DKMS tree.
	# shellcheck source=selftests/vm/kernels.sh
	. "$ROOT/selftests/vm/kernels.sh"
	kvers=$(kvpool_kernels)
	if [ -z "$kvers" ]; then
		skip "no kernel headers under /usr/src (Debian: linux-headers-amd64): no dkms build"
	else
		DT=$SCRATCH/dkms-tree
		mkdir -p "$DT"
		dk=(dkms --dkmstree "$DT" --sourcetree "$K/usr/src" -m kvpool -v "$VERSION")
		if "${dk[@]}" add > "$SCRATCH/dkms-add.log" 2>&1; then
			ok "dkms add (scratch DKMS tree)"
		else
			not_ok "dkms add (scratch DKMS tree)"
			sed 's/^/# /' "$SCRATCH/dkms-add.log"
		fi
		for kver in $kvers; do
			ksrc=/usr/src/linux-headers-$kver
			start=$(date +%s)
			# dkms signs what it builds, creating /var/lib/dkms/mok.{key,pub}
			# when absent: keep that key in the scratch directory too.
			if mok_signing_key=$SCRATCH/mok.key mok_certificate=$SCRATCH/mok.pub \
				"${dk[@]}" build -k "$kver" --kernelsourcedir "$ksrc" \
				> "$SCRATCH/dkms-build.log" 2>&1; then
				# 6.12's kbuild compresses modules (kvpool.ko.xz)
				ko=$(find "$DT/kvpool/$VERSION/$kver" -name 'kvpool.ko*' 2>/dev/null | head -1)
				vermagic=$(modinfo -F vermagic "$ko" 2>/dev/null | awk '{ print $1 }')
				check "dkms build -k $kver: ${ko##*/}, vermagic $vermagic ($(( $(date +%s) - start )) s)" \
					test -n "$ko" -a "$vermagic" = "$kver"
				# dkms 3 prints readelf's warnings before its status lines
				status=$("${dk[@]}" status -k "$kver" 2>/dev/null | grep '^kvpool/' | head -1)
				check "dkms status -k $kver: $status" bash -c '[[ "$1" == *built* ]]' _ "$status"
			else
				not_ok "dkms build -k $kver"
				tail -30 "$SCRATCH/dkms-build.log" | sed 's/^/# /'
				mk=$(find "$DT/kvpool/$VERSION" -name make.log | head -1)
				[ -n "$mk" ] && tail -30 "$mk" | sed 's/^/# make.log: /'
			fi
		done
	fi
fi

"${MAKE_INSTALL[@]}" uninstall-dkms DESTDIR="$K" > /dev/null 2>&1
check "make uninstall-dkms removes the DKMS tree" test ! -e "$T"

# make demo installs only `.ci/deps.sh demo --list`: every library that
# libkvrt and the tools link (-lX in their Makefiles) must come from one
# of those packages, or a fresh machine's `make demo` fails to link.
demo_pkgs=" $(bash "$ROOT/.ci/deps.sh" demo --list) "
libs=$(grep -h '^[A-Z_]*LIBS[[:space:]]*[:+]\?=' "$ROOT"/libkvrt/Makefile "$ROOT"/tools/*/Makefile |
	grep -o -- ' -l[a-z0-9_]\+' | grep -v -- '-lkvrt$' | sort -u)
outside=
for l in $libs; do
	f=
	for ext in a so; do
		p=$(gcc -print-file-name="lib${l#-l}.$ext")
		[ "$p" != "lib${l#-l}.$ext" ] && f=$(readlink -f "$p") && break
	done
	owner=$( { [ -n "$f" ] && dpkg -S "$f" 2>/dev/null; } | head -1 | cut -d: -f1)
	case "$demo_pkgs" in *" $owner "*) ;; *) outside="$outside $l(${owner:-no package})" ;; esac
done
check "make demo's packages hold every library libkvrt and the tools link ($(echo $libs))" \
	test -z "$outside"
[ -z "$outside" ] || echo "# outside .ci/deps.sh's DEMO_PKGS:$outside"

echo "1..$n"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
