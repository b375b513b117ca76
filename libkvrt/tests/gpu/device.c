// SPDX-License-Identifier: MIT
/* test_gpu: with a GPU: the handle, device memory and plan validation. */
#define _GNU_SOURCE
#include "harness.h"

/* ---- with a GPU: handle, memory, plans ---------------------------------------------------- */

void open_and_info(void)
{
	const char *e = getenv("KVRT_GPU_DEVICE");
	int dev = e ? atoi(e) : 0, r;
	struct kvrt_gpu *g = (struct kvrt_gpu *)&g;

	r = kvrt_gpu_open(K, dev, &G);
	REQUIRE(r == 0 && G);
	r = kvrt_gpu_info(G, &GI);
	REQUIRE(r == 0);
	tap_diag("device %d: %s, compute %d.%d, %u SMs, %.1f GiB, driver %d, batch memcpy %u", GI.device,
		 GI.name, GI.cc_major, GI.cc_minor, GI.sm_count, GI.total_mem / 1073741824.0,
		 GI.driver_version, GI.batch_memcpy);
	CHECKF(GI.device == dev, "info.device %d, opened %d", GI.device, dev);
	CHECKF(GI.name[0] && memchr(GI.name, 0, sizeof(GI.name)), "info.name empty or unterminated");
	CHECKF(GI.cc_major >= 8, "compute %d.%d: open should have said -ENOTSUP", GI.cc_major,
	       GI.cc_minor);
	CHECKF(GI.driver_version >= 12000, "driver_version %d", GI.driver_version);
	CHECKF(GI.sm_count > 0 && GI.total_mem > 0, "sm_count %u, total_mem %llu", GI.sm_count,
	       (unsigned long long)GI.total_mem);
	CHECKF(GI.batch_memcpy <= 1, "batch_memcpy %u", GI.batch_memcpy);
	CHECKF(GI.registered_bytes == 0, "registered_bytes %llu on a fresh handle",
	       (unsigned long long)GI.registered_bytes);
	r = kvrt_gpu_open(K, 1 << 20, &g);
	CHECKF(r == -ENODEV && g == NULL, "kvrt_gpu_open(ordinal 2^20) = %d (want -ENODEV, *out NULL)",
	       r);
}

TEST(device_memory)
{
	size_t n = (4 << 20) + 123, i;
	uint8_t *h = xmalloc(n), *back = xmalloc(n);
	void *a = dev_alloc(n), *b = dev_alloc(n);
	int r;

	for (i = 0; i < n; i++)
		h[i] = (uint8_t)rnd();
	if (a && b) {
		CHECKF(!(r = kvrt_gpu_memcpy(G, a, h, n)), "memcpy host->device = %d", r);
		CHECKF(!(r = kvrt_gpu_memcpy(G, b, a, n)), "memcpy device->device = %d", r);
		memset(back, 0, n);
		CHECKF(!(r = kvrt_gpu_memcpy(G, back, b, n)), "memcpy device->host = %d", r);
		CHECKF(!memcmp(h, back, n), "device round trip changed the bytes");
		/* an unaligned piece */
		CHECKF(!(r = kvrt_gpu_memcpy(G, back + 1, (uint8_t *)a + 7, 1000)),
		       "unaligned memcpy = %d", r);
		CHECKF(!memcmp(back + 1, h + 7, 1000), "unaligned copy differs");
		CHECKF(!(r = kvrt_gpu_memcpy(G, b, a, 0)), "memcpy of 0 bytes = %d", r);
		CHECKF((r = kvrt_gpu_memcpy(G, NULL, a, 16)) == -EINVAL, "memcpy to NULL = %d", r);
		CHECKF((r = kvrt_gpu_alloc(G, 16, NULL)) == -EINVAL, "alloc into NULL = %d", r);
		CHECKF(!(r = kvrt_gpu_sync(G, NULL)), "sync = %d", r);
	}
	/* far more than any device has */
	{
		void *huge = NULL;

		r = kvrt_gpu_alloc(G, (size_t)1 << 50, &huge);
		CHECKF(r == -ENOMEM && !huge, "alloc of 1 PiB = %d (want -ENOMEM)", r);
	}
	dev_free(a);
	dev_free(b);
	free(h);
	free(back);
}

/*
 * The read stream reads every byte: its sum equals the CPU's sum of the
 * 32-bit words, for sizes around its tiles (4096 bytes of 16 per thread);
 * misaligned pointers and sizes are -EINVAL.
 */
TEST(read_stream_sums)
{
	const size_t sizes[] = { 16, 4096 - 16, 4096 * 8 + 48, (3 << 20) + 4096 * 5 + 16 };
	size_t n = sizes[3], i, j;
	uint32_t *h = xmalloc(n);
	uint8_t *d = dev_alloc(n);
	uint64_t want, got;
	int r;

	for (i = 0; i < n / 4; i++)
		h[i] = (uint32_t)rnd() | 1;
	if (d && !kvrt_gpu_memcpy(G, d, h, n)) {
		for (j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
			for (want = 0, i = 0; i < sizes[j] / 4; i++)
				want += h[i];
			r = kvrt_gpu_read_stream(G, d, sizes[j], &got, NULL);
			CHECKF(!r && got == want, "read_stream(%zu bytes) = %d, sum %llx, CPU %llx",
			       sizes[j], r, (unsigned long long)got, (unsigned long long)want);
		}
		r = kvrt_gpu_read_stream(G, d, n, NULL, NULL);	/* timed form: queued */
		CHECKF(!r && !kvrt_gpu_sync(G, NULL), "read_stream without a sum = %d", r);
		CHECK_EQ(kvrt_gpu_read_stream(G, d + 8, 16, &got, NULL), -EINVAL);
		CHECK_EQ(kvrt_gpu_read_stream(G, d, 24, NULL, NULL), -EINVAL);
		CHECK_EQ(kvrt_gpu_read_stream(G, d, 0, &got, NULL), 0);
	}
	dev_free(d);
	free(h);
}

TEST(plan_validation)
{
	struct kvrt_gpu_plan *pl = NULL;
	struct kvrt_layout lo, bad;
	struct kvrt_attn_params p = { .num_q_heads = 8, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_BF16, .o_dtype = KVRT_DTYPE_BF16 }, p2;
	int32_t lens[5] = { 16, 1, 40, 3, 9 }, qi[6] = { 0, 16, 17, 57, 60, 69 };
	struct kvrt_gpu_plan_info info;
	int r;

	REQUIRE(kvrt_gpu_plan_create(G, 4, 64, &pl) == 0 && pl);
	REQUIRE(kvrt_layout_init(&lo, KVRT_LAYOUT_LAYER_MAJOR, 1, 2, 128, 16, 16,
				 KVRT_DTYPE_BF16) == 0);
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 4, lens)) == 0, "decode plan, 4 of 4 = %d", r);
	CHECKF((r = kvrt_gpu_plan_info(pl, &info)) == 0 && info.num_seqs == 4 && info.num_work > 0 &&
	       info.grid > 0, "plan_info = %d: seqs %u work %u grid %u", r, info.num_seqs,
	       info.num_work, info.grid);
	CHECKF((r = kvrt_gpu_plan_info(pl, NULL)) == -EINVAL, "plan_info(NULL) = %d", r);
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 5, lens)) == -E2BIG, "decode, 5 of 4 = %d", r);
	CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 4, qi, lens)) == 0, "prefill, 60 of 64 = %d",
	       r);
	CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 5, qi, lens)) == -E2BIG,
	       "prefill, 5 sequences of 4 = %d", r);
	qi[2] = 16;	/* 0, 16, 16, 57: sequence 2 (40 tokens) asks 41 */
	CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 3, qi, lens)) == -EINVAL,
	       "prefill, chunk longer than its sequence = %d", r);
	qi[2] = 17;
	{
		int32_t big[2] = { 0, 65 }, l1[1] = { 65 };

		CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 1, big, l1)) == -E2BIG,
		       "prefill, 65 of 64 query tokens = %d", r);
	}
#define PLAN_EINVAL(what, LO, PP)                                                          \
	do {                                                                               \
		int r_ = kvrt_gpu_plan_decode(pl, PP, LO, 2, lens);                        \
		CHECKF(r_ == -EINVAL, "decode plan with %s = %d, want -EINVAL", what, r_); \
	} while (0)
	bad = lo;
	bad.head_dim = 80;
	PLAN_EINVAL("head_dim 80", &bad, &p);
	bad = lo;
	bad.block_tokens = 129;
	PLAN_EINVAL("block_tokens 129", &bad, &p);
	bad = lo;
	bad.kv_dtype = KVRT_DTYPE_F32;
	PLAN_EINVAL("an f32 cache", &bad, &p);
	p2 = p;
	p2.q_dtype = KVRT_DTYPE_FP8_E4M3;
	PLAN_EINVAL("fp8 q", &lo, &p2);
	p2 = p;
	p2.o_dtype = KVRT_DTYPE_FP8_E4M3;
	PLAN_EINVAL("fp8 out", &lo, &p2);
	p2 = p;
	p2.num_q_heads = 7;
	PLAN_EINVAL("7 q heads over 2 KV heads", &lo, &p2);
	p2 = p;
	p2.window_left = -2;
	PLAN_EINVAL("window_left -2", &lo, &p2);
	p2 = p;
	p2.logit_softcap = -1;
	PLAN_EINVAL("a negative soft-cap", &lo, &p2);
	PLAN_EINVAL("NULL params", &lo, (const struct kvrt_attn_params *)NULL);
	PLAN_EINVAL("NULL layout", (const struct kvrt_layout *)NULL, &p);
#undef PLAN_EINVAL
	lens[0] = 0;
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 2, lens)) == -EINVAL,
	       "decode plan with a 0-token sequence = %d", r);
	lens[0] = 16;
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 2, NULL)) == -EINVAL,
	       "decode plan with NULL seq_lens = %d", r);

	/* runs: table->num_seqs and layout must be the plan's */
	{
		size_t cache = (size_t)16 * 2 * 16 * 2 * 128 * 2;
		void *dc = dev_alloc(cache), *dq = dev_alloc(4 * 8 * 128 * 2), *dout = dev_alloc(4 * 8 * 128 * 2);
		int32_t indptr[5] = { 0, 1, 2, 5, 6 }, indices[6] = { 0, 1, 2, 3, 4, 5 };
		void *dip = dev_dup(indptr, sizeof(indptr)), *dix = dev_dup(indices, sizeof(indices));
		void *dl = dev_dup(lens, sizeof(int32_t) * 4);
		struct kvrt_kv_cache kv = { &lo, dc, NULL, 0 };
		struct kvrt_block_table bt = { 4, dip, dix, dl };

		if (dc && dq && dout && dip && dix && dl) {
			CHECKF(!(r = kvrt_gpu_plan_decode(pl, &p, &lo, 4, lens)), "plan = %d", r);
			bt.num_seqs = 3;
			CHECKF((r = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL)) == -EINVAL,
			       "decode run with 3 sequences on a plan of 4 = %d", r);
			bt.num_seqs = 4;
			bad = lo;
			bad.head_dim = 64;
			kv.layout = &bad;
			CHECKF((r = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL)) == -EINVAL,
			       "decode run with another layout than planned = %d", r);
			kv.layout = &lo;
			CHECKF((r = kvrt_gpu_attn_decode(pl, NULL, &kv, &bt, dout, NULL)) == -EINVAL,
			       "decode run with NULL q = %d", r);
			CHECKF((r = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL)) == 0,
			       "the valid decode run = %d", r);
			/* a decode plan is not a prefill plan */
			CHECKF((r = kvrt_gpu_attn_prefill(pl, dq, dip, &kv, &bt, dout, NULL)) < 0,
			       "prefill run of a decode plan = %d, want an error", r);
			dev_sync();
		}
		dev_free(dc);
		dev_free(dq);
		dev_free(dout);
		dev_free(dip);
		dev_free(dix);
		dev_free(dl);
	}
	kvrt_gpu_plan_destroy(pl);
	/* a plan that was never planned has nothing to run */
	REQUIRE(kvrt_gpu_plan_create(G, 4, 64, &pl) == 0);
	{
		struct kvrt_kv_cache kv = { &lo, (void *)1, NULL, 0 };
		int32_t z[2] = { 0, 1 };
		struct kvrt_block_table bt = { 1, z, z, z };

		r = kvrt_gpu_attn_decode(pl, (void *)1, &kv, &bt, (void *)1, NULL);
		CHECKF(r < 0, "decode run before any plan = %d, want an error", r);
	}
	kvrt_gpu_plan_destroy(pl);
}

GPU_TESTS(gpu_device_tests,
	T(device_memory),
	T(read_stream_sums),
	T(plan_validation));
