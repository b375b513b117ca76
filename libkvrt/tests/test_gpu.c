// SPDX-License-Identifier: MIT
/*
 * test_gpu: libkvrt's GPU path (kvrt.h, "GPU (since 0.3)").  This file has the
 * overview, the tolerances and main; the tests are in gpu/, a file a topic
 * on one harness (gpu/harness.h lists them).
 *
 * Always, with or without a GPU (these never skip):
 *   - kvrt_gpu_probe() returns 0 or -ENODEV with a reason; anything else
 *     fails;
 *   - kvrt_gpu_open(): -EINVAL for a NULL handle, a NULL out and a
 *     negative ordinal; -ENODEV (and *out NULL) where the probe said
 *     -ENODEV; kvrt_gpu_close(NULL) and kvrt_gpu_plan_destroy(NULL) are
 *     no-ops;
 *   - every other kvrt_gpu_* call given a NULL gpu or plan handle returns
 *     -EINVAL;
 *   - the output comparison used below fails on a perturbed output and on
 *     NaN (a test of the test).
 * Without a usable GPU the rest is one "ok N - ... # SKIP no usable GPU:
 * <the probe's reason>" line and the program exits 0.
 *
 * With a GPU (device $KVRT_GPU_DEVICE, default 0), device memory through
 * kvrt_gpu_alloc/memcpy/free/sync only (no CUDA runtime):
 *
 *   attention: kvrt_gpu_plan_decode + kvrt_gpu_attn_decode and
 *   kvrt_gpu_plan_prefill + kvrt_gpu_attn_prefill against (1) a float64
 *   attention written here (K and V of each sequence gathered from the
 *   paged cache by this file's own decoders, then dense attention in
 *   double) and (2) libkvrt's CPU KVRT_ATTN_REFERENCE on the same inputs.
 *   Shapes: head_dim 64/128/256; block_tokens 1, 16, 17, 128; GQA 1, 4, 8
 *   and wide groups (32 q heads over 1 KV head: MQA, 16 over 2); ragged
 *   batches with lengths 1, block multiples and one past them, up to 64
 *   sequences; block-major, layer-major, head-major and a padded layout,
 *   layer 1 of 2; q f32/f16/bf16, out f32/f16/bf16, KV f16/bf16/fp8 e4m3
 *   (every cache is written by the CPU kvrt_append_kv, so fp8 scales
 *   follow the library's rule); sliding windows and soft-caps; batch 1
 *   at 32768+ tokens, which must be split along the keys
 *   (kvrt_gpu_plan_info().num_split > 0); chunked prefill.  Every slot
 *   the query may not see (past a sequence's length, before its window,
 *   the other layer, unused blocks) holds NaN, and 256 guard bytes after
 *   the output must stay as they were.  One plan object per head
 *   configuration serves every case of it (each plan replaces the last);
 *   the replan case checks batch A, then a different batch B, then A
 *   again on one plan object, and a CUDA graph captured once replays
 *   correctly after each later plan (the graph case loads libcuda itself
 *   for streams and graphs; it skips with the reason where it cannot).
 *
 *   append: kvrt_gpu_append_kv against the CPU kvrt_append_kv into
 *   identical caches: f16/bf16 bit-identical; fp8 (see below); slots < 0
 *   and >= num_blocks * block_tokens skipped, everything else untouched;
 *   argument errors as the CPU's.
 *
 *   read stream: kvrt_gpu_read_stream's sum of the words read equals the
 *   CPU's, around its tile sizes; misaligned arguments -EINVAL.
 *
 *   copies: kvrt_gpu_copy_blocks for each method (BATCH skips with the
 *   reason when the driver has no cuMemcpyBatchAsync, -ENOTSUP), between
 *   device memory, an embedded space registered with
 *   kvrt_gpu_register_space and a malloc'd buffer registered with
 *   kvrt_gpu_register_host, both directions, block-major <-> layer-major
 *   and block-major <-> block-major, fp8 with separate and inline scales:
 *   every byte as a CPU kvrt_copy_blocks of the same pairs leaves it;
 *   validation errnos as kvrt_copy_blocks's, nothing copied on error.
 *   Registration: registered_bytes, idempotence, -EBUSY from a second
 *   kvrt_gpu, kvrt_gpu_close unregistering.
 *
 * ---- attention tolerances ------------------------------------------------------
 *
 * An output row is compared with the reference as max over its dims of
 * |out - ref| / vscale, where vscale is the largest |v| the row attends to
 * (the output is a convex combination of those v).  K, V and q enter the
 * reference as stored (f16/bf16 values, fp8 byte x scale), so input
 * rounding by the test is not in the error.  What the GPU may still round,
 * with u(t) the unit roundoff of t (f32 2^-24, f16 2^-11, bf16 2^-8):
 *
 *   output           u(o_dtype): the result rounded to o_dtype;
 *   weights          u_p = 2^-11 for f16 K/V, else 2^-8: tensor-core P.V
 *                    takes the softmax weights rounded to the K/V's 16-bit
 *                    type (bf16 for fp8); each weight off by a relative
 *                    u_p moves the output by at most u_p * vscale;
 *   logits           ds = (head_dim + 8) 2^-24 S + 2^-21
 *                          (+ cap 2^-10.9 with a soft-cap)
 *                    where S = sm_scale * sum_d |q_d k_d| (largest over the
 *                    keys attended): an f32 dot product of head_dim terms,
 *                    the scale and log2(e) folded in, exp2 approximated to
 *                    2^-22; the hardware tanh.approx has a relative error of
 *                    2^-10.99, times the cap.  Logits off by ds move a
 *                    softmax average by at most expm1(2 ds) * vscale;
 *   sums             8 sqrt(L) 2^-24 + 2^-18 for L keys: f32 sums of random
 *                    terms (and the merge of split partials) whose rounding
 *                    errors grow like sqrt(L);
 *
 *   tol = u(o) + u_p + expm1(2 ds) + 8 sqrt(L) 2^-24 + 2^-18   (x vscale).
 *
 * Tensor cores take q and K in a 16-bit type too, so q of a finer type
 * than the K/V's (f32 q, or f16 q over bf16 K/V) may be rounded to it, and
 * fp8 K/V may be dequantised (byte x scale) into f16 or bf16.  Rather than
 * widen the tolerance by those roundings (2^-8 of every logit: far too
 * loose), the reference is also computed from q and K/V so rounded
 * (round-to-nearest-even here), and a case passes when every row is
 * within tol of one of these candidates; which one matched is counted and
 * printed.  Typical tol: bf16 K/V, q and out 0.8 %; f16 K/V and q, f32
 * out 0.05 %; a bug (a key missed or attended twice, a wrong scale, a
 * wrong block) moves outputs by several percent or makes them NaN.
 *
 * The CPU reference is held to test_attn's bound (1e-5 + u(o)); GPU
 * against CPU to the sum of both bounds plus the distance between the
 * matched candidate and the unrounded reference: a failure there with (1)
 * passing points at the test, not the GPU.
 *
 * fp8 append: the CPU computes scale = absmax / 448 and byte =
 * fp8(x / scale), requantising with fp8(old * old_scale / new_scale), all
 * in IEEE f32; a kernel that does the same is bit-identical.  A kernel may
 * multiply by a reciprocal instead of dividing (one f32 rounding more), so
 * scales may differ by 1 ulp and bytes by one fp8 code, in at most 1 % of
 * the bytes written; anything else fails.
 *
 * Environment: KVRT_TEST_SEED, KVRT_TEST_CASES (random attention cases,
 * default 40 decode and a third as many prefill), KVRT_GPU_DEVICE.  Aimed
 * at well under a minute on an H100 (the float64 reference and the CPU
 * reference dominate: about 13 s on a 2-core VM with a CPU stand-in for
 * the GPU, 19 s under ASan; long prompts check their last chunk only).
 */
#define _GNU_SOURCE
#include "gpu/harness.h"

static char skip_reason[600];

TEST(gpu_tests)
{
	snprintf(skip_reason, sizeof(skip_reason), "no usable GPU: %s", probe_why);
	tap_skip(skip_reason);
}

static void run_tests(const struct tap_test *t, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		tap_run(t[i].name, t[i].fn);
}

/* ---- main ------------------------------------------------------------------------------- */

int main(void)
{
	const char *e = getenv("KVRT_TEST_SEED");
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	uint64_t seed = e ? strtoull(e, NULL, 0) : 20261122;
	int r, i;

	rng_state = seed;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# test_gpu: seed %llu (KVRT_TEST_SEED)\n", (unsigned long long)seed);
	pin_driver();
	probe_ret = kvrt_gpu_probe(probe_why, sizeof(probe_why));
	r = kvrt_open(&K, &oo);
	if (r) {
		tap_result(false, "kvrt_open(embedded) = %d", r);
		return tap_done("test_gpu");
	}
	run_tests(gpu_api_tests, nr_gpu_api_tests);
	if (probe_ret == -ENODEV) {
		RUN(gpu_tests);
		kvrt_close(K);
		return tap_done("test_gpu");
	}
	if (probe_ret == 0) {
		RUN(open_and_info);
	}
	if (probe_ret == 0 && G) {
		double t0;
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = ts.tv_sec + ts.tv_nsec * 1e-9;
		run_tests(gpu_device_tests, nr_gpu_device_tests);
		run_tests(gpu_decode_tests, nr_gpu_decode_tests);
		run_tests(gpu_prefill_tests, nr_gpu_prefill_tests);
		run_tests(gpu_graphs_tests, nr_gpu_graphs_tests);
		run_tests(gpu_append_tests, nr_gpu_append_tests);
		run_tests(gpu_copy_tests, nr_gpu_copy_tests);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		tap_diag("GPU part took %.1f s; %u attention calls checked", ts.tv_sec + ts.tv_nsec * 1e-9 - t0,
			 stats.cases);
		for (i = 1; i < 4; i++)
			tap_diag("largest GPU error, passing cases, kv %s: %.3f of the tolerance", dtname(i),
				 stats.worst[i]);
		for (i = 0; i < 16; i++)
			if (stats.matched[i / 4][i % 4]) {
				struct cand c = { (enum kvrt_dtype)(i / 4), (enum kvrt_dtype)(i % 4) };
				char cn[64];

				tap_diag("calls matching the %s reference: %u",
					 cand_name(&c, cn, sizeof(cn)), stats.matched[i / 4][i % 4]);
			}
	}
	copy_teardown();
	for (i = 0; i < (int)nplans; i++)
		kvrt_gpu_plan_destroy(plans[i].p);
	kvrt_gpu_close(G);
	kvrt_close(K);
	return tap_done("test_gpu");
}
