// SPDX-License-Identifier: MIT
/* test_gpu: without a GPU: probe, open and NULL-handle errors; the output comparison tested. */
#define _GNU_SOURCE
#include "harness.h"

/* ---- always: API behaviour without a GPU ----------------------------------------------- */

TEST(probe_result)
{
	char small[4];
	int r;

	CHECKF(probe_ret == 0 || probe_ret == -ENODEV,
	       "kvrt_gpu_probe = %d (%s): only 0 and -ENODEV are allowed", probe_ret, probe_why);
	if (probe_ret == -ENODEV) {
		CHECKF(probe_why[0], "kvrt_gpu_probe = -ENODEV without a reason");
		tap_diag("no usable GPU: %s", probe_why);
	}
	r = kvrt_gpu_probe(NULL, 0);
	CHECKF(r == probe_ret, "kvrt_gpu_probe(NULL, 0) = %d, with a buffer %d", r, probe_ret);
	memset(small, 'x', sizeof(small));
	r = kvrt_gpu_probe(small, sizeof(small));
	CHECKF(r == probe_ret, "kvrt_gpu_probe(4-byte buffer) = %d", r);
	CHECKF(r == 0 || memchr(small, 0, sizeof(small)),
	       "kvrt_gpu_probe: the reason overran or was not terminated in a 4-byte buffer");
}

TEST(open_argument_errors)
{
	struct kvrt_gpu *g = (struct kvrt_gpu *)&g;	/* not NULL: must be reset */
	int r;

	CHECKF((r = kvrt_gpu_open(NULL, 0, &g)) == -EINVAL, "kvrt_gpu_open(NULL k) = %d", r);
	CHECKF((r = kvrt_gpu_open(K, -1, &g)) == -EINVAL, "kvrt_gpu_open(device -1) = %d", r);
	CHECKF((r = kvrt_gpu_open(K, 0, NULL)) == -EINVAL, "kvrt_gpu_open(NULL out) = %d", r);
	if (probe_ret == -ENODEV) {
		g = (struct kvrt_gpu *)&g;
		r = kvrt_gpu_open(K, 0, &g);
		CHECKF(r == -ENODEV, "kvrt_gpu_open where the probe says -ENODEV = %d", r);
		CHECKF(g == NULL, "kvrt_gpu_open failed but left *out non-NULL");
		if (!r)
			kvrt_gpu_close(g);
	}
	kvrt_gpu_close(NULL);
	kvrt_gpu_plan_destroy(NULL);
}

TEST(null_handles_einval)
{
	static uint8_t page[8192] __attribute__((aligned(4096)));
	uint8_t host[64] = { 0 };
	struct kvrt_space_opts so = { .name = "test_gpu_null", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = 4096, .quota_bytes = 4 * 4096 };
	struct kvrt_space *sp = NULL;
	struct kvrt_layout lo;
	struct kvrt_block_array a = { &lo, page, NULL };
	struct kvrt_block_pair pair = { 0, 1 };
	struct kvrt_kv_cache kv = { &lo, page, NULL, 0 };
	int32_t indptr[2] = { 0, 1 }, indices[1] = { 0 }, lens[1] = { 1 }, qi[2] = { 0, 1 };
	struct kvrt_block_table bt = { 1, indptr, indices, lens };
	struct kvrt_attn_params p = { .num_q_heads = 1, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32 };
	struct kvrt_gpu_info info;
	struct kvrt_gpu_plan_info pinfo;
	struct kvrt_gpu_plan *plan = NULL;
	int64_t slot = 0;
	void *dp = NULL;
	int r;

	REQUIRE(kvrt_layout_init(&lo, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 1, 2, KVRT_DTYPE_F32) == 0);
	r = kvrt_space_open(K, &so, &sp);
	CHECKF(!r, "kvrt_space_open = %d", r);

#define NULL_EINVAL(call)                                                                  \
	do {                                                                               \
		int r_ = (call);                                                           \
		CHECKF(r_ == -EINVAL, "%s = %d, want -EINVAL", #call, r_);                 \
	} while (0)
	NULL_EINVAL(kvrt_gpu_info(NULL, &info));
	NULL_EINVAL(kvrt_gpu_alloc(NULL, 4096, &dp));
	NULL_EINVAL(kvrt_gpu_free(NULL, page));
	NULL_EINVAL(kvrt_gpu_memcpy(NULL, host, page, sizeof(host)));
	NULL_EINVAL(kvrt_gpu_sync(NULL, NULL));
	NULL_EINVAL(kvrt_gpu_read_stream(NULL, page, 16, NULL, NULL));
	if (sp) {
		NULL_EINVAL(kvrt_gpu_register_space(NULL, sp));
		NULL_EINVAL(kvrt_gpu_unregister_space(NULL, sp));
	}
	NULL_EINVAL(kvrt_gpu_register_host(NULL, page, 4096));
	NULL_EINVAL(kvrt_gpu_unregister_host(NULL, page));
	NULL_EINVAL(kvrt_gpu_copy_blocks(NULL, &a, &a, &pair, 1, KVRT_GPU_COPY_AUTO, NULL));
	NULL_EINVAL(kvrt_gpu_append_kv(NULL, &kv, host, host, KVRT_DTYPE_F32, &slot, 1, NULL));
	NULL_EINVAL(kvrt_gpu_plan_create(NULL, 1, 1, &plan));
	CHECKF(plan == NULL, "kvrt_gpu_plan_create(NULL gpu) set *out");
	NULL_EINVAL(kvrt_gpu_plan_decode(NULL, &p, &lo, 1, lens));
	NULL_EINVAL(kvrt_gpu_plan_prefill(NULL, &p, &lo, 1, qi, lens));
	NULL_EINVAL(kvrt_gpu_plan_info(NULL, &pinfo));
	NULL_EINVAL(kvrt_gpu_attn_decode(NULL, host, &kv, &bt, page, NULL));
	NULL_EINVAL(kvrt_gpu_attn_prefill(NULL, host, qi, &kv, &bt, page, NULL));
#undef NULL_EINVAL
	CHECKF(dp == NULL, "kvrt_gpu_alloc(NULL gpu) set *dptr");
	kvrt_space_close(sp);
}

/* The comparison fails on an output off by 3 tolerances, and on NaN. */
TEST(comparator_detects_errors)
{
	struct tcase tc = { .hd = 4, .nkv = 1, .group = 1, .kv_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_F32, .window = -1 };
	double ref[8] = { 0.5, -0.25, 0.125, 1.0, 0.3, 0.2, 0.1, 0.0 };
	struct rowinfo ri[2] = { { 1.0, 3.0, 100 }, { 2.0, 3.0, 100 } };
	float out[8];
	uint16_t b[8];
	size_t where = 0, i;
	double tol = gpu_tol(&tc, &ri[1]);

	for (i = 0; i < 8; i++)
		out[i] = (float)ref[i];
	CHECKF(worst_ratio(&tc, out, 2, ref, ri, true, &where) <= 1,
	       "an exact output was rejected");
	out[6] += (float)(3 * tol * ri[1].vscale);
	CHECKF(worst_ratio(&tc, out, 2, ref, ri, true, &where) > 1 && where == 1,
	       "an output off by 3 tolerances was not detected");
	out[6] = NAN;
	CHECKF(isnan(worst_ratio(&tc, out, 2, ref, ri, true, &where)),
	       "a NaN output was not detected");
	/* bf16 out: 4 ulps off fails (the bound is about 2 ulps of the row's scale) */
	tc.o_dt = KVRT_DTYPE_BF16;
	for (i = 0; i < 8; i++)
		enc(KVRT_DTYPE_BF16, b, i, ref[i]);
	enc(KVRT_DTYPE_BF16, b, 3, 1.0 + 4 * 0x1p-7);
	CHECKF(worst_ratio(&tc, b, 2, ref, ri, true, &where) > 1 && where == 0,
	       "a bf16 output 4 ulps off was not detected");
	/* a typical bound, for the record */
	tc = (struct tcase){ .hd = 128, .kv_dt = KVRT_DTYPE_BF16, .o_dt = KVRT_DTYPE_BF16 };
	tap_diag("tolerance, bf16 K/V and out, hd 128, S 3, 1000 keys: %.3g of vscale",
		 gpu_tol(&tc, &(struct rowinfo){ 1.0, 3.0, 1000 }));
	tc.kv_dt = KVRT_DTYPE_F16;
	tc.o_dt = KVRT_DTYPE_F32;
	tap_diag("tolerance, f16 K/V, f32 out, hd 128, S 3, 1000 keys: %.3g of vscale",
		 gpu_tol(&tc, &(struct rowinfo){ 1.0, 3.0, 1000 }));
}

GPU_TESTS(gpu_api_tests,
	T(probe_result),
	T(open_argument_errors),
	T(null_handles_einval),
	T(comparator_detects_errors));
