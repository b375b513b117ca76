#!/bin/bash
# SPDX-License-Identifier: MIT
#
# doc_examples.sh BUILD "NAME...": run the C examples of
# Documentation/libkvrt.rst that the Makefile extracted and built
# (BUILD/doc/plain/NAME against the shared library, BUILD/doc/asan/NAME
# with the ASan+UBSan objects) and compare what each prints with the
# output the page shows (BUILD/doc/NAME.expected).  Prints TAP lines and
# one "N passed, N failed" line; exits non-zero when anything failed.
set -u
B=$1
NAMES=$2
n=0 pass=0 fail=0
if [ -z "$NAMES" ]; then
	n=1 fail=1
	echo "not ok 1 - doc: no '.. example-c-begin NAME' block in Documentation/libkvrt.rst"
fi
for name in $NAMES; do
	for kind in plain asan; do
		n=$((n + 1))
		out=$(timeout 60 "$B/doc/$kind/$name" 2>&1)
		rc=$?
		if [ $rc -eq 0 ] && [ "$out" = "$(cat "$B/doc/$name.expected")" ]; then
			pass=$((pass + 1))
			echo "ok $n - doc/$kind/$name: runs and prints what Documentation/libkvrt.rst shows"
		else
			fail=$((fail + 1))
			echo "not ok $n - doc/$kind/$name: exit status $rc, output against the page's:"
			diff <(cat "$B/doc/$name.expected") <(echo "$out") | sed 's/^/# /'
		fi
	done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
