#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# summarize.sh LOG...: add up the "N passed, N failed[, N skipped]" lines that
# the suites print (check-core's closing line, the VM runner's line) and print
# the totals as one final line:
#
#	N passed, N failed, N skipped
#
# A log that is missing or holds no such line counts as one failed suite.
# Exit status: 0 when nothing failed, 1 otherwise.

set -u

if [ $# -eq 0 ]; then
	echo "usage: $0 LOG..." >&2
	exit 2
fi

tp=0 tf=0 ts=0
for log in "$@"; do
	name=${log##*/}
	if [ ! -r "$log" ]; then
		echo "  $name: missing, counted as 1 failed"
		tf=$((tf + 1))
		continue
	fi
	# Serial consoles end lines with CR; summary lines stand alone.
	read -r p f s n < <(tr -d '\r' <"$log" | awk '
		/^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?[[:space:]]*$/ {
			p += $1; f += $3; if (NF >= 6) s += $5; n++
		}
		END { printf "%d %d %d %d\n", p, f, s, n }')
	if [ "$n" -eq 0 ]; then
		echo "  $name: no result line, counted as 1 failed"
		tf=$((tf + 1))
		continue
	fi
	echo "  $name: $p passed, $f failed, $s skipped"
	tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
done

echo "$tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]
