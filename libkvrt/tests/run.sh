#!/bin/bash
# SPDX-License-Identifier: MIT
#
# run.sh BUILD MAP "TEST..." : libkvrt's `make check`.
#
#  1. ABI: the shared library's soname, exactly the kvrt_* symbols that MAP
#     lists exported (each with a version), the static library's globals
#     the same set, kvrt.h compiling alone as C99 and C++, kvrt.pc usable;
#  2. every test program, first the plain build (BUILD/plain/, linked
#     against the shared library), then the ASan+UBSan build (BUILD/asan/),
#     then, for $TSAN_TESTS, the ThreadSanitizer build (BUILD/tsan/: a race
#     report ends the program with status 66);
#  3. the C examples of Documentation/libkvrt.rst, $DOC_EXAMPLES, that the
#     Makefile extracted and built (tests/doc_examples.sh);
#  4. the libFuzzer target, FUZZ_SECONDS long (tests/fuzz.sh), when built.
#
# A program passes the TAP lines it prints ("ok N" / "not ok N", "# SKIP");
# one that exits non-zero or dies without a "not ok" line counts one more
# failure.  Ends with one "N passed, N failed" line (", N skipped" when any
# were skipped) and exits non-zero when anything failed.
#
# Environment: KVRT_TEST_TIMEOUT seconds per program (default 600).

set -u
B=$1
MAP=$2
TESTS=$3
TIMEOUT=${KVRT_TEST_TIMEOUT:-600}
tp=0 tf=0 ts=0 n=0

ok() {
	n=$((n + 1)) tp=$((tp + 1))
	echo "ok $n - $1"
}
notok() {
	n=$((n + 1)) tf=$((tf + 1))
	echo "not ok $n - $1"
	[ -z "${2:-}" ] || echo "$2" | sed 's/^/# /'
}

# ---- ABI ------------------------------------------------------------------
echo "# abi: $B/libkvrt.so.0 against $MAP"
soname=$(readelf -d "$B/libkvrt.so.0" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libkvrt.so.0 ]; then ok "abi: soname libkvrt.so.0"; else notok "abi: soname is '$soname'"; fi

want=$(sed -e 's|/\*.*\*/||' "$MAP" | grep -oE '^[[:space:]]+kvrt_[a-z0-9_]+;' | tr -d ' \t;' | sort)
have=$(nm -D --defined-only "$B/libkvrt.so.0" | awk '$2 != "A" { print $3 }' | sort)
have_plain=$(echo "$have" | sed 's/@.*//' | sort)
if [ "$have_plain" = "$want" ]; then
	ok "abi: exports exactly the $(echo "$want" | wc -l) symbols kvrt.map lists"
else
	notok "abi: exports differ from kvrt.map" "$(diff <(echo "$want") <(echo "$have_plain"))"
fi
unversioned=$(echo "$have" | grep -v '@@KVRT_' || true)
if [ -z "$unversioned" ]; then ok "abi: every export is versioned"; else notok "abi: unversioned exports" "$unversioned"; fi
# Each symbol bound to the node that lists it; the newest node is the header's minor.
want_nodes=$(sed -e 's|/\*.*\*/||' "$MAP" | awk '
	/^KVRT_[0-9.]+[[:space:]]*\{/ { node = $1; sub(/\{.*/, "", node) }
	/^[[:space:]]+kvrt_[a-z0-9_]+;/ { s = $1; sub(/;/, "", s); print s "@@" node }' | sort)
have_nodes=$(echo "$have" | grep '@@' | sort)
if [ "$have_nodes" = "$want_nodes" ]; then
	ok "abi: every symbol carries the version node that lists it"
else
	notok "abi: symbol versions differ from kvrt.map's nodes" \
		"$(diff <(echo "$want_nodes") <(echo "$have_nodes"))"
fi
last_node=$(grep -oE '^KVRT_[0-9.]+' "$MAP" | tail -1)
minor=$(sed -n 's/^#define KVRT_VERSION_MINOR \([0-9]*\)$/\1/p' include/kvrt.h)
major=$(sed -n 's/^#define KVRT_VERSION_MAJOR \([0-9]*\)$/\1/p' include/kvrt.h)
if [ "$last_node" = "KVRT_$major.$minor" ]; then
	ok "abi: the newest node $last_node is the header's version $major.$minor"
else
	notok "abi: newest node $last_node, header says $major.$minor"
fi
static=$(nm --defined-only "$B/libkvrt.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBRVW]$/ { print $3 }' | sort)
if [ "$static" = "$want" ]; then
	ok "abi: libkvrt.a's globals are the same set"
else
	notok "abi: libkvrt.a's globals differ" "$(diff <(echo "$want") <(echo "$static"))"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include "kvrt.h"\nint main(void) { return kvrt_version_number() != KVRT_VERSION_NUMBER; }\n' > "$tmp/h.c"
if out=$(${CC:-gcc} -std=c99 -pedantic -Wall -Wextra -Werror -Iinclude -o "$tmp/h" "$tmp/h.c" \
	-L"$B" -Wl,-rpath,"$PWD/$B" -lkvrt 2>&1) && "$tmp/h"; then
	ok "abi: kvrt.h alone as C99 -pedantic; header and library versions agree"
else
	notok "abi: kvrt.h as C99" "$out"
fi
if command -v g++ >/dev/null; then
	cp "$tmp/h.c" "$tmp/h.cc"
	if out=$(g++ -Wall -Wextra -Werror -Iinclude -c -o "$tmp/hcc.o" "$tmp/h.cc" 2>&1); then
		ok "abi: kvrt.h compiles as C++"
	else
		notok "abi: kvrt.h as C++" "$out"
	fi
fi
if command -v pkg-config >/dev/null; then
	if out=$(PKG_CONFIG_PATH=$B pkg-config --static --cflags --libs kvrt 2>&1) &&
		echo "$out" | grep -q -- '-lkvrt' && echo "$out" | grep -q -- '-lcrypto'; then
		ok "abi: pkg-config --static --libs kvrt: $out"
	else
		notok "abi: kvrt.pc" "$out"
	fi
fi

# ---- test programs ---------------------------------------------------------
ms() { echo $(( $(date +%s%N) / 1000000 )); }
total_start=$(ms)
for kind in plain asan tsan; do
	list=$TESTS
	[ "$kind" != tsan ] || list=${TSAN_TESTS:-}
	for t in $list; do
		bin=$B/$kind/$t
		log=$B/$kind/$t.log
		start=$(ms)
		# Without the module the kmod backend is covered in the VM
		# (selftests/kvpool/libkvrt_backend_test), not skipped here.
		backend=${KVRT_BACKEND:-}
		if [ "$t" = test_backend ] && [ -z "$backend" ] && [ ! -e /dev/kvpool ]; then
			backend=embedded
		fi
		KVRT_BACKEND=$backend timeout "$TIMEOUT" "$bin" > "$log" 2>&1
		rc=$?
		el=$(( $(ms) - start ))
		p=$(grep -cE '^ok [0-9]+' "$log")
		s=$(grep -E '^ok [0-9]+' "$log" | grep -ciE '#[[:space:]]*skip')
		f=$(grep -cE '^not ok [0-9]+' "$log")
		p=$((p - s))
		# Renumber into one TAP stream.
		while IFS= read -r line; do
			case $line in
			"ok "[0-9]*) n=$((n + 1)); echo "ok $n - $kind/$t: ${line#* - }" ;;
			"not ok "[0-9]*) n=$((n + 1)); echo "not ok $n - $kind/$t: ${line#* - }" ;;
			"1.."*) ;;
			*) echo "# $line" | sed 's/^# # /# /' ;;
			esac
		done < "$log"
		if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
			n=$((n + 1)) f=1
			echo "not ok $n - $kind/$t exited with status $rc"
		fi
		tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
		printf '# %s/%s: %d passed, %d failed, %d skipped in %d.%03d s\n' "$kind" "$t" "$p" "$f" "$s" \
			$((el / 1000)) $((el % 1000))
	done
done
el=$(( $(ms) - total_start ))
printf '# test programs took %d.%03d s\n' $((el / 1000)) $((el % 1000))

# ---- the C examples of Documentation/libkvrt.rst (tests/doc_examples.sh) ----
while IFS= read -r line; do
	case $line in
	"ok "[0-9]*) n=$((n + 1)) tp=$((tp + 1)); echo "ok $n - ${line#* - }" ;;
	"not ok "[0-9]*) n=$((n + 1)) tf=$((tf + 1)); echo "not ok $n - ${line#* - }" ;;
	*" passed, "*" failed") ;;
	*) echo "$line" ;;
	esac
done < <(bash tests/doc_examples.sh "$B" "${DOC_EXAMPLES:-}")

# ---- the fuzzer (tests/fuzz.sh), FUZZ_SECONDS long -------------------------
if [ -x "$B/fuzz/fuzz_api" ]; then
	line=$(bash tests/fuzz.sh "$B" | tail -n 1)
	case $line in
	"ok "*) n=$((n + 1)) tp=$((tp + 1)); echo "ok $n - ${line#ok - }" ;;
	*) n=$((n + 1)) tf=$((tf + 1)); echo "not ok $n - ${line#not ok - }"
	   tail -n 40 "$B/fuzz/fuzz.log" | sed 's/^/# /' ;;
	esac
else
	n=$((n + 1)) ts=$((ts + 1)) tp=$((tp + 1))
	echo "ok $n - fuzz_api # SKIP no clang to build it"
fi

if [ "$ts" -gt 0 ]; then
	echo "$tp passed, $tf failed, $ts skipped"
else
	echo "$tp passed, $tf failed"
fi
[ "$tf" -eq 0 ]
