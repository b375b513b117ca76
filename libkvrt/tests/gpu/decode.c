// SPDX-License-Identifier: MIT
/* test_gpu: with a GPU: decode attention against the float64 and CPU references. */
#define _GNU_SOURCE
#include "harness.h"

/* ---- with a GPU: attention ---------------------------------------------------------------- */

TEST(decode_dtype_matrix)
{
	uint32_t a, b, c;
	char what[64];

	for (a = 0; a < 3; a++)
		for (b = 0; b < 3; b++)
			for (c = 0; c < 3; c++) {
				struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 4,
						    .kv_dt = kv_types[a], .q_dt = qo_types[b],
						    .o_dt = qo_types[c],
						    .layout = (int)((a + b + c) % NR_LAYOUTS),
						    .window = -1, .qamp = 2.0,
						    .lens = { 1, 16, 77, 200 } };

				snprintf(what, sizeof(what), "decode kv %s q %s out %s",
					 dtname(tc.kv_dt), dtname(tc.q_dt), dtname(tc.o_dt));
				run_decode(&tc, what, NULL);
			}
}

TEST(decode_shape_matrix)
{
	static const uint32_t hds[] = { 64, 128, 256 }, bts[] = { 1, 16, 17, 128 },
			      groups[] = { 1, 4, 8 };
	uint32_t i, j, k;
	char what[64];

	for (i = 0; i < 3; i++)
		for (j = 0; j < 4; j++)
			for (k = 0; k < 3; k++) {
				uint32_t bt = bts[j];
				struct tcase tc = {
					.bt = bt, .hd = hds[i], .group = groups[k],
					.nkv = groups[k] == 8 ? 1 + rnd_below(2) : 2,
					.nseq = 5, .kv_dt = kv_types[rnd_below(3)],
					.q_dt = qo_types[rnd_below(3)], .o_dt = qo_types[rnd_below(3)],
					.layout = (int)((i + j + k) % NR_LAYOUTS), .window = -1,
					.qamp = 1.0 + rnd_below(2) * 3.0,
					.lens = { 1, bt, bt + 1, 3 * bt - 1 > 0 ? 3 * bt - 1 : 1,
						  1 + rnd_below(400) },
					.extra = { 0, 1, 0, 0, 1 },
				};

				snprintf(what, sizeof(what), "decode hd %u bt %u group %u", tc.hd, bt,
					 tc.group);
				run_decode(&tc, what, NULL);
			}
}

TEST(decode_mqa_and_wide_groups)
{
	struct tcase mqa = { .bt = 16, .nkv = 1, .group = 32, .hd = 128, .nseq = 3,
			     .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			     .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1, .qamp = 2.0,
			     .lens = { 1, 300, 1024 } };
	struct tcase mqa8 = mqa, g16 = mqa;

	run_decode(&mqa, "decode MQA 32 q heads over 1 KV head, bf16", NULL);
	mqa8.kv_dt = KVRT_DTYPE_FP8_E4M3;
	mqa8.hd = 64;
	mqa8.bt = 128;
	mqa8.o_dt = KVRT_DTYPE_F32;
	mqa8.layout = L_BM;
	run_decode(&mqa8, "decode MQA 32/1, fp8 K/V, hd 64, block 128", NULL);
	g16.nkv = 2;
	g16.group = 16;
	g16.kv_dt = KVRT_DTYPE_F16;
	g16.q_dt = KVRT_DTYPE_F16;
	g16.hd = 256;
	g16.layout = L_HM;
	run_decode(&g16, "decode 32 q heads over 2 KV heads, f16, hd 256", NULL);
}

TEST(decode_window_softcap)
{
	static const int32_t windows[] = { 0, 1, 15, 16, 100, 1000 };
	unsigned int i;

	for (i = 0; i < 8; i++) {
		struct tcase tc = { .bt = i % 2 ? 16 : 17, .nkv = 2, .group = 4, .hd = 128, .nseq = 4,
				    .kv_dt = kv_types[i % 3], .q_dt = KVRT_DTYPE_BF16,
				    .o_dt = KVRT_DTYPE_F32, .layout = (int)(i % NR_LAYOUTS),
				    .window = i < 6 ? windows[i] : -1,
				    .softcap = i >= 4 ? 30.0f - 4 * i : 0.0f, .qamp = 4.0,
				    .lens = { 1, 17, 333, 1200 } };
		char what[80];

		snprintf(what, sizeof(what), "decode window %d soft-cap %g", tc.window, tc.softcap);
		run_decode(&tc, what, NULL);
	}
}

TEST(decode_ragged_batch64)
{
	struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 64,
			    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1, .qamp = 2.0 };
	uint32_t s;

	for (s = 0; s < 64; s++)
		tc.lens[s] = random_len(16, 700);
	tc.lens[7] = 5000;	/* one long among short ones */
	run_decode(&tc, "decode 64 ragged sequences", NULL);
}

TEST(decode_long_split_kv)
{
	struct kvrt_gpu_plan_info info;
	struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 1,
			    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1, .qamp = 2.0,
			    .lens = { 32768 } };

	memset(&info, 0, sizeof(info));
	run_decode(&tc, "decode batch 1 x 32768 tokens, bf16", &info);
	tap_diag("plan, batch 1 x 32768: %u tasks, %u split, %u keys per split, grid %u",
		 info.num_work, info.num_split, info.split_tokens, info.grid);
	CHECKF(info.num_split > 0, "batch 1 x 32768 tokens was not split along the keys");
	CHECKF(info.split_tokens > 0 && info.split_tokens % tc.bt == 0,
	       "split_tokens %u is not a multiple of block_tokens %u", info.split_tokens, tc.bt);
	stats.splits += info.num_split > 0;

	tc.kv_dt = KVRT_DTYPE_FP8_E4M3;
	tc.bt = 128;
	tc.lens[0] = 40000 + 37;
	tc.window = 5000;
	tc.softcap = 30.0f;
	tc.layout = L_BM;
	tc.o_dt = KVRT_DTYPE_F32;
	memset(&info, 0, sizeof(info));
	run_decode(&tc, "decode batch 1 x 40037 tokens, fp8, window 5000, soft-cap 30", &info);
	tap_diag("plan, batch 1 x 40037, window 5000: %u tasks, %u split, %u keys per split",
		 info.num_work, info.num_split, info.split_tokens);

	/* one long sequence among short ones */
	tc = (struct tcase){ .bt = 17, .nkv = 1, .group = 8, .hd = 64, .nseq = 4,
			     .kv_dt = KVRT_DTYPE_F16, .q_dt = KVRT_DTYPE_F16, .o_dt = KVRT_DTYPE_F16,
			     .layout = L_PAD, .window = -1, .qamp = 4.0,
			     .lens = { 1, 35000, 17, 18 } };
	memset(&info, 0, sizeof(info));
	run_decode(&tc, "decode 35000 tokens beside three short sequences", &info);
	tap_diag("plan, 35000 + 3 short: %u tasks, %u split, %u keys per split", info.num_work,
		 info.num_split, info.split_tokens);
}

TEST(decode_random)
{
	const char *e = getenv("KVRT_TEST_CASES");
	uint32_t n = e ? (uint32_t)strtoul(e, NULL, 0) : 40, i;
	struct tcase tc;
	char what[48];

	for (i = 0; i < n; i++) {
		random_case(&tc, i % 4 ? 400 : 3000, i % 4 ? 12 : 3, 32);
		snprintf(what, sizeof(what), "decode random %u", i);
		run_decode(&tc, what, NULL);
	}
}

GPU_TESTS(gpu_decode_tests,
	T(decode_dtype_matrix),
	T(decode_shape_matrix),
	T(decode_mqa_and_wide_groups),
	T(decode_window_softcap),
	T(decode_ragged_batch64),
	T(decode_long_split_kv),
	T(decode_random));
