#!/bin/bash
# SPDX-License-Identifier: MIT
#
# fuzz.sh BUILD: run BUILD/fuzz/fuzz_api for $FUZZ_SECONDS seconds (0: only
# replay the seeds and the corpus), growing BUILD/fuzz/corpus from
# BUILD/fuzz/seeds.  The log is BUILD/fuzz/fuzz.log; a crash, leak or
# sanitizer report fails the run and its input is saved in BUILD/.  The
# last line is "ok - ..." or "not ok - ..." (tests/run.sh counts it).

set -u
B=$1
secs=${FUZZ_SECONDS:-30}
mkdir -p "$B/fuzz/corpus"
if [ "$secs" -gt 0 ] 2>/dev/null; then time_arg=-max_total_time=$secs; else time_arg=-runs=0; fi
echo "# fuzz_api: $time_arg, log in $B/fuzz/fuzz.log"
if "$B/fuzz/fuzz_api" "$time_arg" -timeout=20 -rss_limit_mb=2048 -max_len=4096 \
	-print_final_stats=1 -artifact_prefix="$B/" "$B/fuzz/corpus" "$B/fuzz/seeds" \
	> "$B/fuzz/fuzz.log" 2>&1; then
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$B/fuzz/fuzz.log")
	cov=$(grep -o 'cov: [0-9]*' "$B/fuzz/fuzz.log" | tail -1)
	echo "ok - fuzz_api: ${runs:-?} inputs, $cov, corpus $(ls "$B/fuzz/corpus" | wc -l) files, no crash"
else
	tail -n 40 "$B/fuzz/fuzz.log"
	echo "not ok - fuzz_api failed; input saved as $(ls -t "$B"/crash-* "$B"/leak-* \
		"$B"/timeout-* "$B"/oom-* 2>/dev/null | head -1)"
	exit 1
fi
