#!/bin/bash
# SPDX-License-Identifier: MIT
#
# check.sh FATBIN PTXAS_LOG ABI_HEADER [CUOBJDUMP]: what `make check` checks.
#
#   - the fatbin holds sm_80 and sm_90a ELF and compute_90 PTX;
#   - every kernel the ABI header's comment names (brace lists expanded) is
#     in each ELF and in the PTX;
#   - ptxas compiled every kernel for both ELF targets with 0 spill bytes
#     and no stack frame (from the -Xptxas -v log of the build).
#
# The fatbin is read with cuobjdump when there is one, else with
# tools/fatbin.py.  Prints "ok N - ..." / "not ok N - ..." and a final
# "N passed, N failed" line; exits 1 on any failure.
set -u

fatbin=$1 log=$2 abi=$3 cuobjdump=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
n=0 pass=0 fail=0

tap() {	# tap OK|FAIL message
	n=$((n + 1))
	if [ "$1" = OK ]; then
		pass=$((pass + 1))
		echo "ok $n - $2"
	else
		fail=$((fail + 1))
		echo "not ok $n - $2"
	fi
}

# Images as "elf sm_80" / "ptx compute_90" lines.
list_images() {
	local out=""

	if [ -n "$cuobjdump" ]; then
		out=$({ "$cuobjdump" --list-elf "$fatbin" 2>/dev/null |
			grep -o 'sm_[0-9]*a\?\.cubin' | sed 's/\.cubin$//; s/^/elf /'
			"$cuobjdump" --list-ptx "$fatbin" 2>/dev/null |
			grep -o 'sm_[0-9]*a\?\.ptx' | sed 's/\.ptx$//; s/^sm_/ptx compute_/'; })
		[ -n "$out" ] || echo "# cuobjdump --list-elf/--list-ptx: nothing understood, using tools/fatbin.py" >&2
	fi
	if [ -z "$out" ]; then
		out=$(python3 "$here/fatbin.py" list "$fatbin")
	fi
	echo "$out"
}

# Kernels of one image, one per line.
kernels_of() {	# kind arch
	local out=""

	if [ -n "$cuobjdump" ]; then
		if [ "$1" = elf ]; then
			# "arch = sm_80" heads each ELF of the dump; kernels are .text.NAME
			out=$("$cuobjdump" -elf "$fatbin" 2>/dev/null | awk -v want="$2" '
				/^arch = / { a = $3 }
				a == want && match($0, /\.text\.[A-Za-z0-9_]+/) {
					print substr($0, RSTART + 6, RLENGTH - 6)
				}' | sort -u)
		else
			out=$("$cuobjdump" -ptx "$fatbin" 2>/dev/null |
				sed -n 's/^[[:space:]]*\(\.visible[[:space:]]\+\)\?\.entry[[:space:]]\+\([A-Za-z0-9_]*\).*/\2/p' |
				sort -u)
		fi
		[ -n "$out" ] || echo "# cuobjdump: no kernels understood for $1 $2, using tools/fatbin.py" >&2
	fi
	if [ -z "$out" ]; then
		out=$(python3 "$here/fatbin.py" kernels "$fatbin" "$2")
	fi
	echo "$out"
}

if [ -n "$cuobjdump" ]; then
	echo "# reading $fatbin with $cuobjdump"
else
	echo "# no cuobjdump: reading $fatbin with tools/fatbin.py"
fi

if [ ! -s "$fatbin" ]; then
	tap FAIL "$fatbin exists"
	echo "$pass passed, $fail failed"
	exit 1
fi
tap OK "$fatbin exists ($(stat -c %s "$fatbin") bytes)"

images=$(list_images)
for want in "elf sm_80" "elf sm_90a" "ptx compute_90"; do
	if grep -qx "$want" <<<"$images"; then
		tap OK "fatbin holds $want"
	else
		tap FAIL "fatbin holds $want (it has: $(echo $images | tr '\n' ' '))"
	fi
done

# The kernel names of the header's comment: " *   kvrt_decode_hd{64,128,256}_{f16,bf16,fp8}  struct ..."
names=$(sed -n 's/^ \*[[:space:]]\+\(kvrt_[A-Za-z0-9_{},]*\)[[:space:]]\+struct kvrt_gk_.*/\1/p' "$abi")
names=$(for pat in $names; do eval "printf '%s\n' $pat"; done)
count=$(wc -l <<<"$names")
if [ "$count" -ge 20 ]; then
	tap OK "$abi names $count kernels"
else
	tap FAIL "$abi names $count kernels (expected 23; parse failed?)"
fi

for img in "elf sm_80" "elf sm_90a" "ptx compute_90"; do
	have=$(kernels_of $img)
	for k in $names; do
		if grep -qx "$k" <<<"$have"; then
			tap OK "$k in $img"
		else
			tap FAIL "$k in $img"
		fi
	done
done

# ptxas -v: "Compiling entry function 'K' for 'sm_80'", then "N bytes stack
# frame, N bytes spill stores, N bytes spill loads", "Used N registers".
usage=$(awk '
	/Compiling entry function/ {
		split($0, q, "\047"); k = q[2]; a = q[4]; cur = k " " a; seen[cur] = 1
	}
	/bytes stack frame/ && cur != "" {
		frame[cur] = $1; st[cur] = $5; ld[cur] = $9
	}
	/Used [0-9]+ registers/ && cur != "" {
		for (i = 1; i <= NF; i++) if ($i == "Used") regs[cur] = $(i + 1)
		print cur, regs[cur], frame[cur] + 0, st[cur] + 0, ld[cur] + 0
		cur = ""
	}' "$log" 2>/dev/null)
for k in $names; do
	msg="" bad=0
	for a in sm_80 sm_90a; do
		line=$(grep "^$k $a " <<<"$usage" | tail -1)
		if [ -z "$line" ]; then
			msg="$msg $a: not in $log;"
			bad=1
			continue
		fi
		read -r _ _ regs frame st ld <<<"$line"
		msg="$msg $a: $regs regs, $st/$ld spill bytes, $frame stack;"
		if [ "$st" != 0 ] || [ "$ld" != 0 ] || [ "$frame" != 0 ]; then
			bad=1
		fi
	done
	if [ $bad = 0 ]; then
		tap OK "ptxas: $k:${msg%;}"
	else
		tap FAIL "ptxas: $k:${msg%;}"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
