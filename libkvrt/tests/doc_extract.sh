#!/bin/bash
# SPDX-License-Identifier: MIT
#
# doc_extract.sh DOC KIND NAME: print the literal block of DOC (an .rst page)
# between ".. example-KIND-begin NAME" and ".. example-KIND-end NAME", without
# the rst indentation and the blank lines around it.  KIND is "c" (a
# program) or "output" (what it prints).  Fails when there is no such block,
# so that a renamed marker cannot turn a test into nothing.
set -eo pipefail
doc=$1 kind=$2 name=$3
awk -v b=".. example-$kind-begin $name" -v e=".. example-$kind-end $name" '
	$0 == b { on = 1; lit = 0; next }
	$0 == e { on = 0; next }
	on && !lit { if ($0 == "::") lit = 1; next }
	on { line[n++] = $0 }
	END {
		s = 0; while (s < n && line[s] == "") s++
		t = n - 1; while (t >= s && line[t] == "") t--
		if (s > t) { print "doc_extract: no " b " block with a literal in " FILENAME > "/dev/stderr"; exit 1 }
		for (i = s; i <= t; i++) { l = line[i]; sub(/^    /, "", l); print l }
	}' "$doc"
