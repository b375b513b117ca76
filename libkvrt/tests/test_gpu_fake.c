// SPDX-License-Identifier: MIT
/*
 * libkvrt's GPU host code against a fake driver (fake_libcuda.c, loaded
 * through $KVRT_LIBCUDA): why a GPU is refused, what open finds out, that
 * every kernel the host looks up is in the embedded fatbin, registration
 * in block-aligned pieces that grow with the space, and copies by every
 * method compared byte for byte with kvrt_copy_blocks(), each in one
 * driver call.  The fake's "device memory" is host memory, so this proves
 * the host side, not the GPU (test_gpu does that on a device).
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

static char fake_path[PATH_MAX], log_path[PATH_MAX];
static bool have_kernels;

static void reset_env(void)
{
	static const char *const vars[] = { "FAKE_CUDA_INIT", "FAKE_CUDA_VERSION",
					    "FAKE_CUDA_DEVICES", "FAKE_CUDA_CC",
					    "FAKE_CUDA_NO_BATCH", "FAKE_CUDA_ALLOC_FAIL",
					    "KVRT_GPU_KERNEL_COPY_MAX", "KVRT_GPU_PREFILL" };
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("KVRT_LIBCUDA", fake_path, 1);
	setenv("FAKE_CUDA_LOG", log_path, 1);
	unlink(log_path);
}

/*
 * The lines of the fake's log that start with prefix: their count, and
 * the sum of the numbers after prefix.
 */
static uint64_t log_scan(const char *prefix, int *count)
{
	FILE *f = fopen(log_path, "r");
	char line[256];
	uint64_t sum = 0;
	int n = 0;

	if (f) {
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, prefix, strlen(prefix))) {
				n++;
				sum += strtoull(line + strlen(prefix), NULL, 10);
			}
		fclose(f);
	}
	if (count)
		*count = n;
	return sum;
}

static int log_count(const char *prefix)
{
	int n;

	log_scan(prefix, &n);
	return n;
}

static uint64_t log_sum(const char *prefix)
{
	return log_scan(prefix, NULL);
}

static struct kvrt *open_embedded(void)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED };
	struct kvrt *k = NULL;

	if (kvrt_open(&k, &o))
		return NULL;
	return k;
}

/*
 * The embedded pool and a GPU on the fake driver, for the tests that need
 * kernels: NULL when the test is over (skipped without nvcc, or failed).
 */
static struct kvrt *open_with_gpu(struct kvrt_gpu **g)
{
	struct kvrt *k = open_embedded();

	if (!k) {
		tap_diag("%s:%d: the embedded pool did not open", __FILE__, __LINE__);
		tap_ok = false;
		return NULL;
	}
	if (!have_kernels) {
		kvrt_close(k);
		tap_skip("built without nvcc: no kernels to load");
		return NULL;
	}
	reset_env();
	if (kvrt_gpu_open(k, 0, g)) {
		tap_diag("%s:%d: kvrt_gpu_open on the fake driver failed", __FILE__, __LINE__);
		tap_ok = false;
		kvrt_close(k);
		return NULL;
	}
	return k;
}

TEST(probe_reasons)
{
	char why[256];

	reset_env();
	setenv("KVRT_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	CHECK_EQ(kvrt_gpu_probe(why, sizeof(why)), -ENODEV);
	if (!have_kernels) {
		CHECK(strstr(why, "without nvcc") != NULL);
		return;
	}
	CHECK(strstr(why, "/nonexistent/libcuda.so.1") != NULL);
	reset_env();
	setenv("FAKE_CUDA_INIT", "100", 1);
	CHECK_EQ(kvrt_gpu_probe(why, sizeof(why)), -ENODEV);
	CHECK(strstr(why, "cuInit: CUDA_ERROR_NO_DEVICE (100)") != NULL);
	reset_env();
	setenv("FAKE_CUDA_VERSION", "11080", 1);
	CHECK_EQ(kvrt_gpu_probe(why, sizeof(why)), -ENODEV);
	CHECK(strstr(why, "11080") && strstr(why, "12.0"));
	reset_env();
	setenv("FAKE_CUDA_DEVICES", "0", 1);
	CHECK_EQ(kvrt_gpu_probe(why, sizeof(why)), -ENODEV);
	CHECK(strstr(why, "no devices") != NULL);
	reset_env();
	CHECK_EQ(kvrt_gpu_probe(why, sizeof(why)), 0);
	CHECK(strstr(why, "1 device, driver 13.0") != NULL);
	CHECK_EQ(kvrt_gpu_probe(NULL, 0), 0);
}

TEST(open_and_info)
{
	struct kvrt_gpu_info info;
	struct kvrt_gpu *g = (void *)1;
	struct kvrt *k = open_embedded();

	REQUIRE(k);
	reset_env();
	if (!have_kernels) {
		CHECK_EQ(kvrt_gpu_open(k, 0, &g), -ENODEV);
		CHECK(g == NULL);
		kvrt_close(k);
		tap_skip("built without nvcc: no kernels to load");
		return;
	}
	CHECK_EQ(kvrt_gpu_open(k, 1, &g), -ENODEV);	/* one device */
	CHECK(g == NULL);
	setenv("FAKE_CUDA_CC", "7.5", 1);
	CHECK_EQ(kvrt_gpu_open(k, 0, &g), -ENOTSUP);
	reset_env();
	CHECK_EQ(kvrt_gpu_open(k, 0, &g), 0);
	REQUIRE(g);
	/* Each kernel looked up by name was found in the embedded fatbin. */
	CHECK_EQ(log_count("module "), 1);
	CHECK_EQ(kvrt_gpu_info(g, &info), 0);
	CHECK(!strcmp(info.name, "Fake GPU 0"));
	CHECK_EQ(info.cc_major, 9);
	CHECK_EQ(info.sm_count, 132);
	CHECK_EQ(info.driver_version, 13000);
	CHECK_EQ(info.batch_memcpy, 1);
	CHECK_EQ(info.total_mem, 80ULL << 30);
	CHECK_EQ(info.registered_bytes, 0);
	setenv("FAKE_CUDA_ALLOC_FAIL", "1", 1);
	{
		void *p = (void *)1;

		CHECK_EQ(kvrt_gpu_alloc(g, 4096, &p), -ENOMEM);
		CHECK(p == NULL);
	}
	kvrt_gpu_close(g);
	reset_env();
	setenv("FAKE_CUDA_NO_BATCH", "1", 1);
	CHECK_EQ(kvrt_gpu_open(k, 0, &g), 0);
	REQUIRE(g);
	CHECK_EQ(kvrt_gpu_info(g, &info), 0);
	CHECK_EQ(info.batch_memcpy, 0);
	kvrt_gpu_close(g);
	kvrt_close(k);
}

TEST(register_space_grows)
{
	struct kvrt_space_opts so = { .name = "gpu-reg", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = 64 << 10,
				      .quota_bytes = 4096ULL << 16 };
	struct kvrt_space_info si;
	struct kvrt_gpu_info info;
	struct kvrt_space *sp = NULL;
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_with_gpu(&g);
	uint32_t ids[600];
	uint64_t first;

	if (!k)
		return;
	REQUIRE(kvrt_space_open(k, &so, &sp) == 0);
	REQUIRE(kvrt_alloc_blocks(sp, 10, ids) == 0);
	REQUIRE(kvrt_space_info(sp, &si) == 0);
	CHECK_EQ(kvrt_gpu_register_space(g, sp), 0);
	first = si.backed_blocks * si.block_bytes;
	CHECK(first >= 10 * so.block_bytes);
	CHECK_EQ(log_sum("register "), first);
	/* Nothing new: nothing registered. */
	CHECK_EQ(kvrt_gpu_register_space(g, sp), 0);
	CHECK_EQ(log_count("register "), 1);
	/* Growth: only the new part. */
	REQUIRE(kvrt_alloc_blocks(sp, 590, ids + 10) == 0);
	REQUIRE(kvrt_space_info(sp, &si) == 0);
	CHECK_EQ(kvrt_gpu_register_space(g, sp), 0);
	CHECK_EQ(log_count("register "), 2);
	CHECK_EQ(log_sum("register "), si.backed_blocks * si.block_bytes);
	CHECK_EQ(kvrt_gpu_info(g, &info), 0);
	CHECK_EQ(info.registered_bytes, si.backed_blocks * si.block_bytes);
	CHECK_EQ(kvrt_gpu_unregister_space(g, sp), 0);
	CHECK_EQ(log_sum("unregister "), si.backed_blocks * si.block_bytes);
	CHECK_EQ(kvrt_gpu_unregister_space(g, sp), -ENOENT);
	/* Host ranges: page-aligned only; close unregisters what is left. */
	{
		void *buf = NULL;

		REQUIRE(posix_memalign(&buf, 4096, 1 << 20) == 0);
		CHECK_EQ(kvrt_gpu_register_host(g, (char *)buf + 1, 4096), -EINVAL);
		CHECK_EQ(kvrt_gpu_register_host(g, buf, 100), -EINVAL);
		CHECK_EQ(kvrt_gpu_register_host(g, buf, 1 << 20), 0);
		CHECK_EQ(kvrt_gpu_register_space(g, sp), 0);
		kvrt_gpu_close(g);
		CHECK_EQ(log_sum("unregister "), log_sum("register "));
		free(buf);
	}
	kvrt_space_close(sp);
	kvrt_close(k);
}

struct arr {
	struct kvrt_layout l;
	void *mem;
	float *scales;
	struct kvrt_block_array a;
};

static int arr_make(struct arr *x, enum kvrt_layout_kind kind, enum kvrt_dtype dt, uint32_t n)
{
	uint64_t bytes;
	size_t i, ns;

	memset(x, 0, sizeof(*x));
	if (kvrt_layout_init(&x->l, kind, 3, 2, 64, 16, n, dt))
		return -1;
	bytes = (uint64_t)n * 3 * 2 * 16 * 2 * 64 * kvrt_dtype_size(dt);
	x->mem = malloc(bytes);
	ns = (size_t)n * 3 * 2 * 2;
	x->scales = malloc(ns * sizeof(float));
	if (!x->mem || !x->scales)
		return -1;
	for (i = 0; i < bytes; i++)
		((unsigned char *)x->mem)[i] = (unsigned char)(rand() & 0xff);
	for (i = 0; i < ns; i++)
		x->scales[i] = (float)rand() / RAND_MAX;
	x->a = (struct kvrt_block_array){ &x->l, x->mem,
					  dt == KVRT_DTYPE_FP8_E4M3 ? x->scales : NULL };
	return 0;
}

static void arr_free(struct arr *x)
{
	free(x->mem);
	free(x->scales);
}

static size_t arr_bytes(const struct arr *x)
{
	return (size_t)x->l.num_blocks * 3 * 2 * 16 * 2 * 64 * kvrt_dtype_size(x->l.kv_dtype);
}

TEST(copies_match_cpu)
{
	static const enum kvrt_gpu_copy_method methods[] = {
		KVRT_GPU_COPY_BATCH, KVRT_GPU_COPY_KERNEL, KVRT_GPU_COPY_MEMCPY, KVRT_GPU_COPY_AUTO };
	static const enum kvrt_layout_kind kinds[][2] = {
		{ KVRT_LAYOUT_BLOCK_MAJOR, KVRT_LAYOUT_BLOCK_MAJOR },
		{ KVRT_LAYOUT_LAYER_MAJOR, KVRT_LAYOUT_BLOCK_MAJOR },
		{ KVRT_LAYOUT_BLOCK_MAJOR, KVRT_LAYOUT_LAYER_MAJOR } };
	static const enum kvrt_dtype dts[] = { KVRT_DTYPE_BF16, KVRT_DTYPE_FP8_E4M3 };
	struct kvrt_block_pair pairs[20];
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_with_gpu(&g);
	size_t m, kd, d, i;

	if (!k)
		return;
	/* Blocks 0..9 go to 5..14 in order (runs join), 10..19 scattered. */
	for (i = 0; i < 20; i++)
		pairs[i] = (struct kvrt_block_pair){ (uint32_t)i,
						     (uint32_t)(i < 10 ? i + 5 : 40 - i) };
	for (m = 0; m < 4; m++) {
		for (kd = 0; kd < 3; kd++) {
			for (d = 0; d < 2; d++) {
				struct arr src, dst, want;
				int ret;

				REQUIRE(!arr_make(&src, kinds[kd][0], dts[d], 32));
				REQUIRE(!arr_make(&dst, kinds[kd][1], dts[d], 32));
				REQUIRE(!arr_make(&want, kinds[kd][1], dts[d], 32));
				memcpy(want.mem, dst.mem, arr_bytes(&dst));
				memcpy(want.scales, dst.scales, 32 * 12 * sizeof(float));
				unlink(log_path);
				if (methods[m] == KVRT_GPU_COPY_AUTO)
					setenv("KVRT_GPU_KERNEL_COPY_MAX", "16384", 1);
				CHECK_EQ(kvrt_copy_blocks(k, &want.a, &src.a, pairs, 20, 0, NULL), 0);
				ret = kvrt_gpu_copy_blocks(g, &dst.a, &src.a, pairs, 20, methods[m],
							   NULL);
				CHECK_EQ(ret, 0);
				CHECK(!memcmp(dst.mem, want.mem, arr_bytes(&dst)));
				CHECK(!memcmp(dst.scales, want.scales, 32 * 12 * sizeof(float)));
				/* One driver call per copy, whatever the layouts. */
				if (methods[m] == KVRT_GPU_COPY_BATCH)
					CHECK_EQ(log_count("batch "), 1);
				if (methods[m] == KVRT_GPU_COPY_KERNEL)
					CHECK_EQ(log_count("launch kvrt_copy_runs "), 1);
				if (methods[m] == KVRT_GPU_COPY_MEMCPY)
					CHECK(log_count("memcpy ") > 0);
				/* Block-major both sides, bf16: the 10 in-order
				 * blocks are one run, the 10 scattered ones 10. */
				if (methods[m] == KVRT_GPU_COPY_BATCH && kd == 0 && d == 0)
					CHECK_EQ(log_sum("batch "), 11);
				arr_free(&src);
				arr_free(&dst);
				arr_free(&want);
			}
		}
	}
	kvrt_gpu_close(g);
	kvrt_close(k);
}

TEST(copy_errors)
{
	struct kvrt_block_pair pairs[2] = { { 0, 1 }, { 1, 1 } };
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_embedded();
	struct arr a, b;

	REQUIRE(k);
	if (!have_kernels) {
		kvrt_close(k);
		tap_skip("built without nvcc: no kernels to load");
		return;
	}
	reset_env();
	setenv("FAKE_CUDA_NO_BATCH", "1", 1);
	REQUIRE(kvrt_gpu_open(k, 0, &g) == 0);
	REQUIRE(!arr_make(&a, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_F16, 4));
	REQUIRE(!arr_make(&b, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_F16, 4));
	/* The CPU copy's validation, same errnos. */
	CHECK_EQ(kvrt_gpu_copy_blocks(g, &b.a, &a.a, pairs, 2, KVRT_GPU_COPY_MEMCPY, NULL),
		 kvrt_copy_blocks(k, &b.a, &a.a, pairs, 2, 0, NULL));
	CHECK_EQ(kvrt_gpu_copy_blocks(g, &b.a, &a.a, pairs, 2, KVRT_GPU_COPY_MEMCPY, NULL),
		 -EINVAL);
	pairs[1].dst = 9;
	CHECK_EQ(kvrt_gpu_copy_blocks(g, &b.a, &a.a, pairs, 2, KVRT_GPU_COPY_MEMCPY, NULL),
		 -EINVAL);
	pairs[1].dst = 2;
	CHECK_EQ(kvrt_gpu_copy_blocks(g, &b.a, &a.a, pairs, 2, (enum kvrt_gpu_copy_method)9,
				      NULL), -EINVAL);
	CHECK_EQ(kvrt_gpu_copy_blocks(g, &b.a, &a.a, pairs, 2, KVRT_GPU_COPY_BATCH, NULL),
		 -ENOTSUP);
	CHECK_EQ(kvrt_gpu_copy_blocks(g, &b.a, &a.a, pairs, 2, KVRT_GPU_COPY_AUTO, NULL), 0);
	CHECK_EQ(kvrt_gpu_copy_blocks(NULL, &b.a, &a.a, pairs, 2, KVRT_GPU_COPY_AUTO, NULL),
		 -EINVAL);
	arr_free(&a);
	arr_free(&b);
	kvrt_gpu_close(g);
	kvrt_close(k);
}

/* The read stream's sum comes back through its sums array; bad arguments first. */
TEST(read_stream_launch)
{
	static uint32_t words[1024] __attribute__((aligned(16)));
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_with_gpu(&g);
	uint64_t want = 0, got = 1;
	unsigned int i;

	if (!k)
		return;
	for (i = 0; i < 1024; i++)
		want += words[i] = 0x9e3779b9u * (i + 1);
	CHECK_EQ(kvrt_gpu_read_stream(g, words + 1, 16, NULL, NULL), -EINVAL);
	CHECK_EQ(kvrt_gpu_read_stream(g, words, 20, NULL, NULL), -EINVAL);
	CHECK_EQ(kvrt_gpu_read_stream(g, NULL, 16, NULL, NULL), -EINVAL);
	unlink(log_path);
	CHECK_EQ(kvrt_gpu_read_stream(g, words, sizeof(words), &got, NULL), 0);
	CHECK_EQ(got, want);
	CHECK_EQ(kvrt_gpu_read_stream(g, words, sizeof(words), NULL, NULL), 0);
	CHECK_EQ(log_count("launch kvrt_read_stream "), 2);
	kvrt_gpu_close(g);
	kvrt_close(k);
}

/*
 * The calibration's record: the sizes measured (the fake's events say 1 ms
 * for either method: no win, so 4 and 8 KiB settle it at 0), the
 * threshold in kvrt_gpu_info; the variable instead.
 */
TEST(copy_calibration_record)
{
	struct kvrt_gpu_copy_calib c;
	struct kvrt_gpu_info gi;
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_with_gpu(&g);
	uint32_t i;

	if (!k)
		return;
	CHECK_EQ(kvrt_gpu_copy_calibration(g, NULL), -EINVAL);
	CHECK_EQ(kvrt_gpu_copy_calibration(NULL, &c), -EINVAL);
	unlink(log_path);
	REQUIRE(kvrt_gpu_copy_calibration(g, &c) == 0);
	CHECK_EQ(c.source, KVRT_GPU_CALIB_MEASURED);
	CHECK_EQ(c.num_sizes, 2);
	CHECK_EQ(c.buffer_bytes, 16 << 20);
	for (i = 0; i < c.num_sizes; i++) {
		CHECK_EQ(c.sizes[i].run_bytes, 4096ULL << i);
		CHECK(c.sizes[i].kernel_gbps > 0 && c.sizes[i].kernel_gbps == c.sizes[i].large_gbps);
	}
	CHECK_EQ(c.kernel_copy_max, 0);
	CHECK_EQ(log_count("launch kvrt_copy_runs "), 2 * 4);
	REQUIRE(kvrt_gpu_info(g, &gi) == 0);
	CHECK_EQ(gi.kernel_copy_max, 0);
	kvrt_gpu_close(g);
	kvrt_close(k);

	k = open_with_gpu(&g);
	if (!k)
		return;
	setenv("KVRT_GPU_KERNEL_COPY_MAX", "65536", 1);	/* read at calibration */
	REQUIRE(kvrt_gpu_copy_calibration(g, &c) == 0);
	CHECK_EQ(c.source, KVRT_GPU_CALIB_ENV);
	CHECK_EQ(c.kernel_copy_max, 65536);
	CHECK_EQ(c.num_sizes, 0);
	kvrt_gpu_close(g);
	kvrt_close(k);
	unsetenv("KVRT_GPU_KERNEL_COPY_MAX");
}

TEST(plans_and_launches)
{
	struct kvrt_attn_params p = { .num_q_heads = 32, .sm_scale = 0.088f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_BF16, .o_dtype = KVRT_DTYPE_BF16 };
	struct kvrt_layout l;
	struct kvrt_gpu_plan_info pi;
	struct kvrt_gpu_plan *plan = NULL;
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_with_gpu(&g);
	int32_t lens[3] = { 32768, 5, 17 }, qi[4] = { 0, 16, 21, 38 }, dummy[64] = { 0 };
	struct kvrt_block_table t = { 1, dummy, dummy, dummy };
	struct kvrt_kv_cache kv = { &l, dummy, NULL, 0 };

	if (!k)
		return;
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_LAYER_MAJOR, 2, 8, 128, 16, 4096,
				 KVRT_DTYPE_BF16) == 0);
	CHECK_EQ(kvrt_gpu_plan_create(g, 0, 0, &plan), -EINVAL);
	REQUIRE(kvrt_gpu_plan_create(g, 2, 64, &plan) == 0);
	/* Not planned yet: nothing to run. */
	CHECK_EQ(kvrt_gpu_attn_decode(plan, dummy, &kv, &t, dummy, NULL), -EINVAL);
	CHECK_EQ(kvrt_gpu_plan_decode(plan, &p, &l, 3, lens), -E2BIG);
	CHECK_EQ(kvrt_gpu_plan_decode(plan, &p, &l, 1, lens), 0);
	CHECK_EQ(kvrt_gpu_plan_info(plan, &pi), 0);
	CHECK_EQ(pi.num_seqs, 1);
	CHECK_EQ(pi.num_split, 8);
	CHECK(pi.num_work > 8 && pi.split_tokens % 16 == 0);
	unlink(log_path);
	CHECK_EQ(kvrt_gpu_attn_decode(plan, dummy, &kv, &t, dummy, NULL), 0);
	/* one launch: the split's merge runs inside it */
	CHECK_EQ(log_count("launch kvrt_decode_hd128_bf16 "), 1);
	CHECK_EQ(log_count("launch kvrt_attn_merge "), 0);
	/* The run must match the plan. */
	t.num_seqs = 2;
	CHECK_EQ(kvrt_gpu_attn_decode(plan, dummy, &kv, &t, dummy, NULL), -EINVAL);
	t.num_seqs = 1;
	kv.layer = 2;
	CHECK_EQ(kvrt_gpu_attn_decode(plan, dummy, &kv, &t, dummy, NULL), -EINVAL);
	kv.layer = 1;
	CHECK_EQ(kvrt_gpu_attn_prefill(plan, dummy, dummy, &kv, &t, dummy, NULL), -EINVAL);
	/* What the GPU path does not take. */
	l.head_dim = 96;
	CHECK_EQ(kvrt_gpu_plan_decode(plan, &p, &l, 1, lens), -EINVAL);
	l.head_dim = 128;
	p.q_dtype = KVRT_DTYPE_FP8_E4M3;
	CHECK_EQ(kvrt_gpu_plan_decode(plan, &p, &l, 1, lens), -EINVAL);
	p.q_dtype = KVRT_DTYPE_BF16;
	/* Prefill: 38 rows > 64? no; 3 sequences > 2 max. */
	CHECK_EQ(kvrt_gpu_plan_prefill(plan, &p, &l, 3, qi, lens), -E2BIG);
	lens[0] = 20;
	CHECK_EQ(kvrt_gpu_plan_prefill(plan, &p, &l, 2, qi, lens), 0);
	CHECK_EQ(kvrt_gpu_plan_info(plan, &pi), 0);
	CHECK_EQ(pi.num_work, 2 * 8);	/* one 16-row tile each, 8 KV heads */
	unlink(log_path);
	t.num_seqs = 2;
	CHECK_EQ(kvrt_gpu_attn_prefill(plan, dummy, dummy, &kv, &t, dummy, NULL), 0);
	/* tensor cores by default; KVRT_GPU_PREFILL=simt the SIMT kernel */
	CHECK_EQ(log_count("launch kvrt_prefill_tc_hd128_bf16 "), 1);
	CHECK_EQ(kvrt_gpu_attn_decode(plan, dummy, &kv, &t, dummy, NULL), -EINVAL);
	kvrt_gpu_plan_destroy(plan);
	kvrt_gpu_close(g);
	setenv("KVRT_GPU_PREFILL", "simt", 1);
	REQUIRE(kvrt_gpu_open(k, 0, &g) == 0);
	REQUIRE(kvrt_gpu_plan_create(g, 2, 64, &plan) == 0);
	CHECK_EQ(kvrt_gpu_plan_prefill(plan, &p, &l, 2, qi, lens), 0);
	unlink(log_path);
	CHECK_EQ(kvrt_gpu_attn_prefill(plan, dummy, dummy, &kv, &t, dummy, NULL), 0);
	CHECK_EQ(log_count("launch kvrt_prefill_hd128_bf16 "), 1);
	CHECK_EQ(log_count("launch kvrt_prefill_tc_hd128_bf16 "), 0);
	unsetenv("KVRT_GPU_PREFILL");
	kvrt_gpu_plan_destroy(plan);
	kvrt_gpu_close(g);
	kvrt_close(k);
}

/*
 * A block of a space with no memory behind it is -EFAULT for the GPU copy
 * too, registered space or not, before anything is queued (the same check
 * as kvrt_copy_blocks').  Run in a child: the fake driver copies with
 * memcpy, so an unchecked copy would die of SIGSEGV.  The child exits 0
 * when every step was -EFAULT, else the number of the step that was not.
 */
static int gpu_unbacked_child(struct kvrt *k, struct kvrt_gpu *g)
{
	struct kvrt_space_opts so = { .name = "gpu-unbacked", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = 4096,
				      .quota_bytes = 1024 * 4096 };
	struct kvrt_layout sl, dl;
	struct kvrt_space *sp = NULL;
	struct kvrt_block_array sa, da;
	struct kvrt_block_pair in = { .src = 0, .dst = 1023 }, out = { .src = 1023, .dst = 0 };
	void *dev = NULL;
	uint32_t id;

	if (kvrt_space_open(k, &so, &sp) || kvrt_alloc_blocks(sp, 1, &id) ||
	    kvrt_layout_init(&sl, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 8, 1, KVRT_DTYPE_F32) ||
	    kvrt_layout_init(&dl, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 8, 2, KVRT_DTYPE_F32) ||
	    kvrt_layout_for_space(&sl, sp) || kvrt_gpu_alloc(g, 2 * 4096, &dev))
		return 10;
	sa = (struct kvrt_block_array){ .layout = &sl, .base = kvrt_space_base(sp) };
	da = (struct kvrt_block_array){ .layout = &dl, .base = dev };
	/* Not registered: the host side alone stands between the copy and the fault. */
	if (kvrt_gpu_copy_blocks(g, &sa, &da, &in, 1, KVRT_GPU_COPY_MEMCPY, NULL) != -EFAULT)
		return 1;
	if (kvrt_gpu_copy_blocks(g, &da, &sa, &out, 1, KVRT_GPU_COPY_MEMCPY, NULL) != -EFAULT)
		return 2;
	if (kvrt_gpu_register_space(g, sp) ||
	    kvrt_gpu_copy_blocks(g, &sa, &da, &in, 1, KVRT_GPU_COPY_AUTO, NULL) != -EFAULT)
		return 3;
	return 0;
}

TEST(a_gpu_copy_of_an_unbacked_block_is_efault_not_a_signal)
{
	struct kvrt_gpu *g = NULL;
	struct kvrt *k = open_with_gpu(&g);
	int st = 0;
	pid_t pid;

	if (!k)
		return;
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0);
	if (!pid)
		_exit(gpu_unbacked_child(k, g));
	REQUIRE(waitpid(pid, &st, 0) == pid);
	if (WIFSIGNALED(st))
		tap_failf("the copy was killed by signal %d (%s)", WTERMSIG(st),
			  strsignal(WTERMSIG(st)));
	else
		CHECKF(WEXITSTATUS(st) == 0,
		       "step %d did not return -EFAULT (1: into, unregistered; 2: from, "
		       "unregistered; 3: into, registered; 10: setup)", WEXITSTATUS(st));
	kvrt_gpu_close(g);
	kvrt_close(k);
}

int main(void)
{
	char exe[PATH_MAX], why[256];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return 1;
	exe[n] = 0;
	/* BUILD/plain/test_gpu_fake -> BUILD/fake/libcuda-fake.so */
	snprintf(fake_path, sizeof(fake_path), "%s/../fake/libcuda-fake.so", dirname(exe));
	snprintf(log_path, sizeof(log_path), "/tmp/kvrt-fake-cuda-%d.log", (int)getpid());
	setenv("KVRT_LIBCUDA", "/nonexistent", 1);
	have_kernels = !strstr((kvrt_gpu_probe(why, sizeof(why)), why), "without nvcc");
	RUN(probe_reasons);
	RUN(open_and_info);
	RUN(register_space_grows);
	RUN(copies_match_cpu);
	RUN(copy_errors);
	RUN(a_gpu_copy_of_an_unbacked_block_is_efault_not_a_signal);
	RUN(read_stream_launch);
	RUN(copy_calibration_record);
	RUN(plans_and_launches);
	unlink(log_path);
	return tap_done("test_gpu_fake");
}
