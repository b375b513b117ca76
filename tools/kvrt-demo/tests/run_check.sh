#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# run_check.sh KVRT_DEMO: the host-side checks of `make check`: a small run
# on the embedded backend must pass the equivalence check and hit the
# prefix cache; a checkpoint written by --gen-checkpoint must load and give
# the same tokens as the same weights generated in memory; the documented
# exit statuses for bad options and a missing space; --speculative against
# the model decoding alone; --tier ssd across a restart and --tier redis
# across two processes and two tenants; --n and --beam runs (equivalence, sharing
# figures, an injected fault, bad input); kvrt-demo warm's counts and its
# refusals of bad prompt files (its in-process effect on a serving engine is
# tests/test_warm's).  TAP output.

set -u
DEMO=${1:-./kvrt-demo}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvrt-demo-check.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
n=0
failed=0

result() {	# result 0|1 description
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
	fi
}

# Runs the demo; its output goes to $TMP/out, its status to $rc.
run() {
	"$DEMO" --backend embedded --no-progress "$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
}

field() {	# the value of key=VALUE on the summary line
	sed -n "s/^summary: .*\\b$1=\\([^ ]*\\).*/\\1/p" "$TMP/out"
}

run --preset tiny --expect-hits
ok=1
if [ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" && [ "$(field hits)" -gt 0 ] &&
	[ "$(field offloaded_bytes)" -gt 0 ] && [ "$(field fetched_bytes)" -gt 0 ]; then
	ok=0
fi
result $ok "tiny run: equivalence PASS, $(field hits) prefix hits, $(field offloaded_bytes) bytes offloaded, $(field fetched_bytes) fetched"
[ $ok = 0 ] || cat "$TMP/out" "$TMP/err"
grep '^equivalence' "$TMP/out" | sed 's/^/# /'
tokens_mem=$(field tokens)

run --preset tiny --decode-kernel decode --batch-tokens 24 --block-tokens 8 --kv-dtype f32 \
	--workload-seed 5
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out"; echo $?) \
	"kvrt_attn_decode for decoding rows, 8-token blocks, f32 KV, small budget: PASS"

"$DEMO" --preset tiny --gen-checkpoint "$TMP/model.bin" >"$TMP/out" 2>"$TMP/err"
result $? "--gen-checkpoint writes $(stat -c %s "$TMP/model.bin" 2>/dev/null) bytes"
run --preset tiny --checkpoint "$TMP/model.bin" --expect-hits
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
	[ "$(field tokens)" = "$tokens_mem" ]; echo $?) \
	"the written checkpoint loads and generates the same tokens ($tokens_mem)"

run --preset tiny --inject-fault
result $([ $rc = 1 ] && grep -q '^equivalence: FAIL' "$TMP/out"; echo $?) \
	"a corrupted fetch is caught: exit 1, $(grep -o '^equivalence: FAIL: .*' "$TMP/out" | head -c 90)"
run --preset tiny --inject-fault --decode-kernel decode
result $([ $rc != 0 ] || ! grep -q 'logits were bitwise identical' "$TMP/out"; echo $?) \
	"with --decode-kernel decode (tokens only) the corruption still shows in the logits line"

# The GPU path on the emulated driver (cuda/tests/emu_libcuda.cpp): head dim
# 64, as the GPU kernels need.  The check must pass, and fail on a wrong output.
EMU=${KVRT_DEMO_EMU:-$(cd "$(dirname "$0")/../../../cuda" && pwd)/build/emu/libcuda-emu.so}
GPU_TINY=(--preset tiny --dim 128 --heads 2 --kv-heads 1 --device gpu)
if [ -f "$EMU" ]; then
	KVRT_LIBCUDA=$EMU run "${GPU_TINY[@]}" --expect-hits
	result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
		grep -q '^gpu check: PASS' "$TMP/out" && grep -q '^device    gpu' "$TMP/out"; echo $?) \
		"--device gpu (emulated driver): equivalence PASS, $(grep -o '^gpu check: PASS: [0-9]* rows' "$TMP/out")"
	KVRT_LIBCUDA=$EMU run "${GPU_TINY[@]}" --inject-gpu-fault
	result $([ $rc = 1 ] && grep -q '^gpu check: FAIL' "$TMP/out"; echo $?) \
		"a wrong GPU attention output is caught: exit 1, $(grep -o '^gpu check: FAIL: .*tolerance' "$TMP/out" | tail -c 60)"
	# beam search with the cache on the GPU: copy-on-write by kvrt_gpu_copy_blocks
	KVRT_LIBCUDA=$EMU run "${GPU_TINY[@]}" --beam 3 --system-tokens 20 --user-tokens 6 \
		--gen-tokens 4 --block-tokens 8
	result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
		grep -q '^gpu check: PASS' "$TMP/out" &&
		grep -q 'copy-on-write by kvrt_gpu_copy_blocks' "$TMP/out" &&
		[ "$(sed -n 's/^summary: .*cow_copies=\([0-9]*\).*/\1/p' "$TMP/out")" -gt 0 ]; echo $?) \
		"--beam 3 --device gpu (emulated driver): PASS, $(grep -o 'cow_copies=[0-9]*' "$TMP/out") by kvrt_gpu_copy_blocks"
else
	result 1 "the emulated driver $EMU is not built (make -C cuda build/emu/libcuda-emu.so)"
fi
KVRT_LIBCUDA=/nonexistent/libcuda.so.1 run "${GPU_TINY[@]}"
result $([ $rc = 3 ] && grep -q 'no usable GPU' "$TMP/err"; echo $?) \
	"--device gpu without a driver: exit 3, $(head -c 70 "$TMP/err")"
KVRT_LIBCUDA=/nonexistent/libcuda.so.1 run "${GPU_TINY[@]/gpu/auto}"
result $([ $rc = 0 ] && grep -q '^device    cpu.*auto: not the GPU' "$TMP/out"; echo $?) \
	"--device auto without a driver runs on the CPU and says why"
run --preset tiny --device gpu
result $([ $rc = 2 ] && grep -q 'head dim 64, 128 or 256' "$TMP/err"; echo $?) \
	"--device gpu with head dim 16: exit 2, $(head -c 80 "$TMP/err")"
run --preset tiny --kv-dtype fp4
result $([ $rc = 2 ]; echo $?) "bad --kv-dtype: exit 2"
run --preset tiny --role second --space "kvrt-demo-check-$$"
result $([ $rc = 3 ] && grep -q 'no such space' "$TMP/err"; echo $?) \
	"--role second without a first: exit 3, 'no such space'"
run --preset tiny --checkpoint "$TMP/missing.bin"
result $([ $rc = 3 ]; echo $?) "missing checkpoint: exit 3"
run --preset tiny --system-tokens 600
result $([ $rc = 2 ] && grep -q "seq_len" "$TMP/err"; echo $?) \
	"conversation longer than seq_len: exit 2"

# --tier ssd:DIR: the first run writes its published blocks through; a
# second process (an empty embedded pool) gets its prefixes back from the
# SSD tier, and generates exactly the tokens of a run without the tier.
# ${KVRT_TIER_DIR:-/var/tmp}: O_DIRECT needs a real file system (not tmpfs).
TIER=$(mktemp -d "${KVRT_TIER_DIR:-/var/tmp}/kvrt-demo-tier.XXXXXX")
run --preset tiny --tier "ssd:$TIER" --tier-mb 16
stores=$(sed -n 's/^tiers: .* \([0-9]*\) blocks written through$/\1/p' "$TMP/out")
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
	[ "$(field tokens)" = "$tokens_mem" ] && [ "${stores:-0}" -gt 0 ]; echo $?) \
	"--tier ssd: a first run writes ${stores:-no} blocks through, same tokens"
run --preset tiny --tier "ssd:$TIER" --tier-mb 16 --expect-tier-hits
tier_hits=$(sed -n 's/^tiers: \([0-9]*\) of .*/\1/p' "$TMP/out")
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
	[ "$(field tokens)" = "$tokens_mem" ] && [ "${tier_hits:-0}" -gt 0 ] &&
	grep -q '^first request: [1-9][0-9]* of its' "$TMP/out"; echo $?) \
	"--tier ssd, restarted: ${tier_hits:-no} block hits from the SSD tier, the first request's among them, same tokens"
# --tier-write-back: the same across a restart, the blocks queued and written
# by the tier's thread, all of them by the time the first run exits.
TIER_WB=$(mktemp -d "${KVRT_TIER_DIR:-/var/tmp}/kvrt-demo-tier.XXXXXX")
run --preset tiny --tier "ssd:$TIER_WB" --tier-mb 16 --tier-write-back
stores=$(sed -n 's/^tiers: .* \([0-9]*\) blocks queued for write-back$/\1/p' "$TMP/out")
result $([ $rc = 0 ] && [ "$(field tokens)" = "$tokens_mem" ] && [ "${stores:-0}" -gt 0 ]; echo $?) \
	"--tier ssd --tier-write-back: a first run queues ${stores:-no} blocks, same tokens"
run --preset tiny --tier "ssd:$TIER_WB" --tier-mb 16 --expect-tier-hits
wb_hits=$(sed -n 's/^tiers: \([0-9]*\) of .*/\1/p' "$TMP/out")
result $([ $rc = 0 ] && [ "$(field tokens)" = "$tokens_mem" ] && [ "${wb_hits:-0}" = "${tier_hits:-x}" ]; echo $?) \
	"--tier-write-back, restarted: ${wb_hits:-no} block hits from the SSD tier, as many as write-through gave"
run --preset tiny --tier-write-back
result $([ $rc = 2 ] && grep -q -- "--tier-write-back is a policy of the tiers: add --tier" "$TMP/err"; echo $?) \
	"--tier-write-back without a tier: exit 2, said how"
rm -rf "$TIER_WB"
run --preset tiny --expect-tier-hits
result $([ $rc = 4 ] && grep -q 'no hit came from a tier' "$TMP/err"; echo $?) \
	"--expect-tier-hits without a tier: exit 4"
run --preset tiny --tier "nvme:$TIER"
result $([ $rc = 2 ] && grep -q -- "--tier wants ssd:DIR or redis:HOST:PORT,... (each kind once), not 'nvme:" "$TMP/err"; echo $?) \
	"--tier of an unknown kind: exit 2, said how"
rm -rf "$TIER"

# --tier redis: a Redis Cluster (selftests/redis/cluster.sh: three masters,
# tenants alice and bob).  A second process, with its own embedded pool as a
# second host would have, gets alice's prefixes from Redis, and the same
# tokens; bob's credentials on alice's prefix get none (Redis refuses them).
RDIR="$TMP/redis"
CLUSTER="$(dirname "$0")/../../../selftests/redis/cluster.sh"
if SEEDS=$(bash "$CLUSTER" start "$RDIR"); then
	KVRT_REDIS_USER=alice KVRT_REDIS_PASSWORD=alice-pw \
		run --preset tiny --tier "redis:$SEEDS" --tier-prefix tenA:
	stores=$(sed -n 's/^tiers: .* \([0-9]*\) blocks written through$/\1/p' "$TMP/out")
	result $([ $rc = 0 ] && [ "$(field tokens)" = "$tokens_mem" ] && [ "${stores:-0}" -gt 0 ]; echo $?) \
		"--tier redis: the first host writes ${stores:-no} blocks to the cluster, same tokens"
	KVRT_REDIS_USER=alice KVRT_REDIS_PASSWORD=alice-pw \
		run --preset tiny --tier "redis:$SEEDS" --tier-prefix tenA: --expect-tier-hits
	tier_hits=$(sed -n 's/^tiers: \([0-9]*\) of .*/\1/p' "$TMP/out")
	result $([ $rc = 0 ] && [ "$(field tokens)" = "$tokens_mem" ] && [ "${tier_hits:-0}" -gt 0 ]; echo $?) \
		"--tier redis: a second host gets ${tier_hits:-no} block hits from Redis, same tokens"
	KVRT_REDIS_USER=bob KVRT_REDIS_PASSWORD=bob-pw \
		run --preset tiny --tier "redis:$SEEDS" --tier-prefix tenA: --expect-tier-hits
	result $([ $rc = 4 ] && [ "$(field tokens)" = "$tokens_mem" ]; echo $?) \
		"--tier redis: another tenant's credentials on alice's prefix find nothing (exit 4), same tokens"
	KVRT_REDIS_USER=alice KVRT_REDIS_PASSWORD=wrong run --preset tiny --tier "redis:$SEEDS"
	result $([ $rc != 0 ] && grep -q 'KVRT_REDIS_USER and KVRT_REDIS_PASSWORD name the ACL user' "$TMP/err"; echo $?) \
		"--tier redis with a wrong password: refused, says where the credentials come from"
	bash "$CLUSTER" stop "$RDIR"
else
	result 1 "a Redis Cluster for --tier redis started (selftests/redis/cluster.sh; logs in $RDIR)"
fi

# --speculative: a draft proposes, the model verifies, rejections are cut
# by kvrt_seq_truncate; the output must equal the model decoding alone.
# --classifier separate: a random model with a shared one repeats its input
# token, so every draft would agree and nothing would be rolled back.
jnum() {	# the number after "KEY": in the JSON output
	grep -o "\"$1\": [0-9.]*" "$TMP/out" | head -1 | sed 's/.*: //'
}
SPEC=(--preset tiny --classifier separate)
run "${SPEC[@]}" --json
tokens_serving=$(grep -o '"tokens_digest": "[0-9a-f]*"' "$TMP/out")
run "${SPEC[@]}" --speculative 3 --json
ok=1
if [ $rc = 0 ] && grep -q '"mode": "speculative"' "$TMP/out" &&
	grep -q '"equivalence": {"result": "pass"' "$TMP/out" &&
	[ "$(jnum logits_identical)" = "$(jnum tokens)" ] && [ "$(jnum tokens)" -gt 0 ] &&
	[ "$(jnum truncates)" -gt 0 ] && [ "$(jnum rolled_back_tokens)" -gt 0 ] &&
	[ "$(jnum accepted)" -gt 0 ] && [ "$(jnum accepted)" -lt "$(jnum proposed)" ] &&
	[ "$(jnum draft_passes)" -gt 0 ] && [ "$(jnum target_passes_saved)" -gt 0 ] &&
	[ -n "$(jnum acceptance_rate)" ] && [ -n "$(jnum tokens_per_target_pass)" ] &&
	[ "$(jnum plain_tokens_per_target_pass)" = 1.000000 ] &&
	[ "$(grep -o '"tokens_digest": "[0-9a-f]*"' "$TMP/out")" = "$tokens_serving" ]; then
	ok=0
fi
result $ok "--speculative 3: PASS, logits bitwise, acceptance $(jnum acceptance_rate), $(jnum tokens_per_target_pass) tokens per target pass, $(jnum truncates) truncates, same tokens as the serving engine"
[ $ok = 0 ] || cat "$TMP/out" "$TMP/err"
acc3=$(jnum accepted)

run "${SPEC[@]}" --speculative 3 --gen-draft-checkpoint "$TMP/draft.bin"
run "${SPEC[@]}" --speculative 3 --draft-checkpoint "$TMP/draft.bin" --json
result $([ $rc = 0 ] && grep -q '"result": "pass"' "$TMP/out" && [ "$(jnum accepted)" = "$acc3" ]; echo $?) \
	"--gen-draft-checkpoint writes the draft, --draft-checkpoint loads it: $acc3 accepted again"
run "${SPEC[@]}" --speculative 3 --draft-layers 2 --json
result $([ $rc = 0 ] && [ "$(jnum accepted)" = "$(jnum proposed)" ] && [ "$(jnum truncates)" = 0 ]; echo $?) \
	"a draft of all the model's layers: every one of $(jnum proposed) tokens accepted, nothing rolled back"
run "${SPEC[@]}" --speculative 4 --decode-kernel decode --block-tokens 8 --kv-dtype f32
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" && grep -q 'not required' "$TMP/out"; echo $?) \
	"--decode-kernel decode: tokens identical; $(grep -o 'bitwise identical at .*' "$TMP/out")"
run "${SPEC[@]}" --speculative 3 --inject-spec-fault
result $([ $rc = 1 ] && grep -q '^equivalence: FAIL: request .* speculative' "$TMP/out"; echo $?) \
	"one accepted token reported wrong is caught: exit 1, $(grep -o '^equivalence: FAIL: .*' "$TMP/out" | head -c 80)"
run "${SPEC[@]}" --speculative 0
result $([ $rc = 2 ] && grep -q -- '--speculative wants' "$TMP/err"; echo $?) "--speculative 0: exit 2, $(head -1 "$TMP/err")"
run "${SPEC[@]}" --speculative 1000
result $([ $rc = 2 ] && grep -q -- '--speculative wants' "$TMP/err"; echo $?) "--speculative 1000: exit 2"
run "${SPEC[@]}" --speculative 8 --batch-tokens 8
result $([ $rc = 2 ] && grep -q 'batch-tokens' "$TMP/err"; echo $?) "--speculative 8 with an 8-token budget: exit 2"
"$DEMO" --preset tiny --vocab 256 --gen-checkpoint "$TMP/v256.bin" >/dev/null 2>&1
run "${SPEC[@]}" --speculative 3 --draft-checkpoint "$TMP/v256.bin"
result $([ $rc = 2 ] && grep -q 'vocabulary of 256 tokens, the model 512' "$TMP/err"; echo $?) \
	"a draft with another vocabulary: exit 2, $(head -c 80 "$TMP/err")"
run "${SPEC[@]}" --draft-layers 1
result $([ $rc = 2 ] && grep -q 'belong to --speculative' "$TMP/err"; echo $?) "--draft-layers without --speculative: exit 2"
run "${SPEC[@]}" --speculative 3 --draft-layers 3
result $([ $rc = 2 ] && grep -q 'no first 3 layers' "$TMP/err"; echo $?) "--draft-layers past the model's: exit 2"
# --n and --beam: continuations sharing their prompt's blocks through libkvrt's
# sequence tables, each recomputed alone and required to match bit for bit.
jq_py() {	# jq_py EXPR: python's verdict on the JSON in $TMP/out (0 true)
	python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); b = j["branch"]; e = j["equivalence"]
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$TMP/out" "$1"
}
run --preset tiny --n 4 --temperature 4 --json
result $([ $rc = 0 ] && jq_py 'e["result"] == "pass" and e["strict"] and e["sequences"] == 8 and
	e["tokens"] == 64 and e["logits_identical"] == 64 and b["tokens_generated"] == 64 and
	b["forks"] == 6 and b["cow_copies"] > 0 and b["blocks_shared"] > 0 and
	b["peak_used_blocks"] < b["peak_block_refs"] and
	b["independent_bytes"] == b["peak_block_refs"] * b["block_bytes"] and
	len({tuple(c["tokens"]) for c in b["continuations"]}) > 2'; echo $?) \
	"--n 4: equivalence PASS with the logits bitwise, $(grep -o '"cow_copies": [0-9]*' "$TMP/out"), $(grep -o '"peak_used_blocks": [0-9]*, "peak_block_refs": [0-9]*' "$TMP/out")"
[ $rc = 0 ] || cat "$TMP/out" "$TMP/err"
digest=$(grep -o '"tokens_digest": "[0-9a-f]*"' "$TMP/out")
run --preset tiny --n 4 --temperature 4 --json
same=$(grep -o '"tokens_digest": "[0-9a-f]*"' "$TMP/out")
run --preset tiny --n 4 --temperature 4 --sample-seed 2 --json
other=$(grep -o '"tokens_digest": "[0-9a-f]*"' "$TMP/out")
result $([ -n "$digest" ] && [ "$digest" = "$same" ] && [ "$digest" != "$other" ]; echo $?) \
	"--n: the same seed samples the same tokens, another seed others"
run --preset tiny --beam 4 --json
result $([ $rc = 0 ] && jq_py 'e["result"] == "pass" and e["strict"] and e["sequences"] == 8 and
	e["logits_identical"] == 64 and e["log_probs_identical"] == 8 and
	e["log_prob_max_diff"] == 0 and b["forks"] > 0 and b["freed"] > 0 and
	b["cow_copies"] > 0 and b["peak_used_blocks"] < b["peak_block_refs"] and
	all(b["continuations"][i]["log_prob"] >= b["continuations"][i + 1]["log_prob"]
	    for i in range(len(b["continuations"]) - 1) if i % 4 != 3)'; echo $?) \
	"--beam 4: equivalence PASS, log-probs recomputed bitwise, $(grep -o '"forks": [0-9]*, "freed": [0-9]*' "$TMP/out")"
[ $rc = 0 ] || cat "$TMP/out" "$TMP/err"
run --preset tiny --beam 3 --decode-kernel decode --block-tokens 8
result $([ $rc = 0 ] && grep -q '^equivalence: PASS' "$TMP/out" &&
	grep -q '^summary: mode=beam width=3 ' "$TMP/out"; echo $?) \
	"--beam 3 with kvrt_attn_decode and 8-token blocks: PASS"
for mode in "--n 4" "--beam 4"; do
	run --preset tiny $mode --inject-fault
	result $([ $rc = 1 ] && grep -q '^equivalence: FAIL' "$TMP/out"; echo $?) \
		"$mode: a shared block corrupted after the fork is caught: exit 1, $(grep -o '^equivalence: FAIL: .*' "$TMP/out" | head -c 80)"
done
for bad in "--n 0" "--beam 0" "--n 2 --beam 2" "--beam 2 --temperature 2" "--temperature 2" \
	"--vocab 16 --beam 20" "--n 2 --inject-fault --gen-tokens 1"; do
	run --preset tiny $bad
	result $([ $rc = 2 ] && [ -s "$TMP/err" ] && [ ! -s "$TMP/out" ]; echo $?) \
		"$bad: exit 2, $(head -n 1 "$TMP/err" | head -c 80)"
done

# kvrt-demo warm: the counts, and bad prompt files refused before anything is published
warm() {
	"$DEMO" warm --backend embedded --preset tiny "$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
}
jnum() {	# the number after "KEY": in $TMP/out
	sed -n "s/.*\"$1\": \\([0-9]*\\).*/\\1/p" "$TMP/out"
}
warm --print-workload-prompt
cp "$TMP/out" "$TMP/system.txt"
result $([ $rc = 0 ] && [ "$(grep -v '^#' "$TMP/system.txt" | wc -w)" = 96 ]; echo $?) \
	"warm --print-workload-prompt: the tiny workload's 96-token system prompt"
warm --space warm-check --prompts "$TMP/system.txt" --json
result $([ $rc = 0 ] && [ "$(jnum prompts)" = 1 ] && [ "$(jnum blocks)" = 6 ] &&
	[ "$(jnum computed)" = 6 ] && [ "$(jnum published)" = 6 ] && [ "$(jnum present)" = 0 ] &&
	[ "$(jnum priority)" = 75 ] && [ "$(jnum published_bytes)" -gt 0 ] &&
	grep -q '"persistent": true' "$TMP/out" && grep -q 'embedded space ends with this process' "$TMP/err"; echo $?) \
	"warm: 1 prompt, 6 blocks computed and published at priority 75, $(jnum published_bytes) bytes; the embedded backend is noted"
[ $rc = 0 ] || cat "$TMP/out" "$TMP/err"
{ cat "$TMP/system.txt"; echo "1 2 3   # shorter than a block"; grep -v '^#' "$TMP/system.txt"; } >"$TMP/twice.txt"
warm --space warm-check --prompts "$TMP/twice.txt" --priority 0
result $([ $rc = 0 ] && [ "$(field prompts)" = 3 ] && [ "$(field blocks)" = 12 ] &&
	[ "$(field computed)" = 6 ] && [ "$(field present)" = 6 ] && [ "$(field published)" = 6 ] &&
	[ "$(field priority)" = 0 ] && grep -q 'shorter than one block' "$TMP/out"; echo $?) \
	"warm: a prompt given twice is computed once ($(field present) blocks present), a short one is noted"
[ $rc = 0 ] || cat "$TMP/out" "$TMP/err"

warm --space warm-check --prompts "$TMP/missing.txt"
result $([ $rc = 2 ] && grep -q 'cannot open .*missing.txt' "$TMP/err" && ! grep -q . "$TMP/out"; echo $?) \
	"warm, missing file: exit 2, $(head -c 70 "$TMP/err")"
printf '# nothing but a comment\n\n' >"$TMP/empty.txt"
warm --space warm-check --prompts "$TMP/empty.txt"
result $([ $rc = 2 ] && grep -q 'has no prompt' "$TMP/err" && ! grep -q . "$TMP/out"; echo $?) \
	"warm, empty file: exit 2, 'has no prompt'"
yes 7 | head -n 513 | tr '\n' ' ' >"$TMP/long.txt"
warm --space warm-check --prompts "$TMP/long.txt"
result $([ $rc = 2 ] && grep -q "long.txt:1: .*seq_len, 512" "$TMP/err" && ! grep -q . "$TMP/out"; echo $?) \
	"warm, a 513-token prompt for seq_len 512: exit 2, nothing published"
printf '1 2 3\n4 512\n' >"$TMP/vocab.txt"
warm --space warm-check --prompts "$TMP/vocab.txt"
result $([ $rc = 2 ] && grep -q "vocab.txt:2: token id 512 is not below the model's vocab" "$TMP/err"; echo $?) \
	"warm, an id past the vocab: exit 2, the line named"
warm --prompts "$TMP/system.txt"
result $([ $rc = 2 ] && grep -q -- '--space NAME is needed' "$TMP/err"; echo $?) "warm without --space: exit 2"
warm --space warm-check
result $([ $rc = 2 ] && grep -q -- '--prompts FILE is needed' "$TMP/err"; echo $?) "warm without --prompts: exit 2"
warm --space warm-check --prompts "$TMP/system.txt" --requests 4
result $([ $rc = 2 ] && grep -q "unknown option '--requests'" "$TMP/err"; echo $?) \
	"warm refuses a serving-only option: exit 2"
warm --space warm-check --prompts "$TMP/system.txt" --priority 101
result $([ $rc = 2 ] && grep -q -- "--priority wants an eviction priority from 0" "$TMP/err"; echo $?) \
	"warm --priority 101: exit 2"

echo "1..$n"
echo "$((n - failed)) passed, $failed failed"
[ $failed = 0 ]
