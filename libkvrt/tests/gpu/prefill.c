// SPDX-License-Identifier: MIT
/* test_gpu: with a GPU: chunked prefill attention against the float64 and CPU references. */
#define _GNU_SOURCE
#include "harness.h"

TEST(prefill_random)
{
	const char *e = getenv("KVRT_TEST_CASES");
	uint32_t n = (e ? (uint32_t)strtoul(e, NULL, 0) : 40) / 3, i;
	struct tcase tc;
	char what[48];

	for (i = 0; i < n; i++) {
		random_case(&tc, 160, 3, 8);
		snprintf(what, sizeof(what), "prefill random %u", i);
		run_prefill(&tc, 1 + rnd_below(4), 0, what);
	}
}

TEST(prefill_shapes)
{
	static const uint32_t hds[] = { 64, 128, 256 }, bts[] = { 1, 16, 17, 128 };
	uint32_t i;

	for (i = 0; i < 6; i++) {
		struct tcase tc = { .bt = bts[i % 4], .hd = hds[i % 3], .nkv = 2,
				    .group = i % 2 ? 4 : 8, .nseq = 3,
				    .kv_dt = kv_types[i % 3], .q_dt = qo_types[(i + 1) % 3],
				    .o_dt = qo_types[i % 3], .layout = (int)(i % NR_LAYOUTS),
				    .window = i == 3 ? 40 : -1, .softcap = i == 4 ? 20.0f : 0.0f,
				    .qamp = 2.0, .lens = { 1, 64 + i, 250 } };
		char what[64];

		snprintf(what, sizeof(what), "prefill hd %u bt %u group %u", tc.hd, tc.bt, tc.group);
		run_prefill(&tc, 1 + i % 3, 0, what);
	}
	{
		/* MQA, and a long prompt whose last 100 tokens are the chunk */
		struct tcase tc = { .bt = 16, .nkv = 1, .group = 32, .hd = 128, .nseq = 2,
				    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
				    .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1,
				    .qamp = 2.0, .lens = { 40, 90 } };

		run_prefill(&tc, 2, 0, "prefill MQA 32 q heads over 1 KV head");
		tc = (struct tcase){ .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 2,
				     .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
				     .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1,
				     .qamp = 2.0, .lens = { 2500, 700 } };
		run_prefill(&tc, 2, 100, "prefill 2500 and 700 tokens, last 100 of each");
	}
}

GPU_TESTS(gpu_prefill_tests,
	T(prefill_shapes),
	T(prefill_random));
