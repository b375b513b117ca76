// SPDX-License-Identifier: MIT
/*
 * test_attn_dtype: the element conversions of src/kv/dtype.c, and the
 * attention kernels' own vectorised decoders.
 *
 * dtype.c (a copy of the source: its functions are not exported):
 *   - kvrt_dtype_size for every dtype and for unknown ones;
 *   - decoders: every f16, bf16 and fp8 e4m3 bit pattern against an exact
 *     formula evaluated here;
 *   - encoders: f32 inputs from a strided walk over all 2^32 bit patterns,
 *     plus every midpoint between neighbouring outputs and its f32
 *     neighbours, against round-to-nearest-even computed here in double
 *     (nearbyint on the exact quotient by the output's ulp); overflow to
 *     inf for f16/bf16, saturation to +-448 for fp8; NaN stays NaN with
 *     its sign.
 *
 * Kernels: a decode over one-token sequences returns V exactly (the single
 * softmax weight is 1), so every f16 and fp8 pattern (times a power-of-two
 * scale) and a sweep of bf16 patterns put in V must come back bit-exact in
 * an f32 output, for the reference and each fast kernel.
 *
 * One TAP result per check (selftests/tap.h's tap_result), then
 * "# test_attn_dtype: N passed, N failed, N skipped"; exits 1 on any failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fenv.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

/*
 * dtype.c's conversions are internal (hidden in the shared library), so
 * this test compiles its own copy of that source, under other names.  The
 * library's compiled conversions are checked too: through the kernels
 * below and the f16/bf16 outputs of test_attn.
 */
#define kvrt_dtype_size copy_kvrt_dtype_size
#define kvrt_f16_to_f32 copy_f16_to_f32
#define kvrt_f32_to_f16 copy_f32_to_f16
#define kvrt_bf16_to_f32 copy_bf16_to_f32
#define kvrt_f32_to_bf16 copy_f32_to_bf16
#define kvrt_fp8e4m3_to_f32 copy_fp8e4m3_to_f32
#define kvrt_f32_to_fp8e4m3 copy_f32_to_fp8e4m3
#define kvrt_load_f32 copy_load_f32
#define kvrt_store_f32 copy_store_f32
#include "../src/kv/dtype.c"
#undef kvrt_dtype_size

static float bits_f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t f_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* ---- exact decoders --------------------------------------------------------- */

static double f16_value(uint16_t h)
{
	int e = (h >> 10) & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);

	return (h & 0x8000) ? -v : v;
}

static double fp8_value(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	double v = (e == 15 && m == 7) ? NAN : e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);

	return (b & 0x80) ? -v : v;
}

/*
 * x rounded to nearest even on a grid with mant_bits of mantissa and
 * minimum normal exponent emin (subnormals below): the quotient by the ulp
 * is exact in double, nearbyint rounds it to even.
 */
static double rne(double x, int mant_bits, int emin)
{
	int e;
	double ulp;

	if (x == 0)
		return x;
	frexp(x, &e);		/* |x| in [2^(e-1), 2^e) */
	e -= 1;
	if (e < emin)
		e = emin;
	ulp = ldexp(1.0, e - mant_bits);
	return copysign(nearbyint(x / ulp) * ulp, x);
}

static int same(double a, double b)	/* equal, both NaN, or same-signed zeros */
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b && signbit(a) == signbit(b);
}

static long enc_checked, enc_bad[3];	/* f16, bf16, fp8 */

static void enc_fail(int which, double d, float x, unsigned got, double want)
{
	static const char *name[] = { "f16", "bf16", "fp8e4m3" };

	if (enc_bad[which]++ < 5)
		printf("# FAIL: f32_to_%s(%a = 0x%08x) = 0x%x, want %a\n", name[which], d, f_bits(x),
		       got, want);
}

static void check_encoders(float x)
{
	double d = x, want;
	uint16_t h = kvrt_f32_to_f16(x), b = kvrt_f32_to_bf16(x);
	uint8_t q = kvrt_f32_to_fp8e4m3(x);

	enc_checked++;
	/* f16: 10 mantissa bits, emin -14; >= 65520 (65504 + half ulp) is inf */
	want = fabs(d) >= 65520 ? copysign(INFINITY, d) : rne(d, 10, -14);
	if (!same(f16_value(h), want) || (isnan(d) && (h >> 15) != (f_bits(x) >> 31)))
		enc_fail(0, d, x, h, want);

	/* bf16: 7 mantissa bits, emin -126; the top half ulp rounds to inf */
	want = fabs(d) >= ldexp(2.0 - 0x1p-8, 127) ? copysign(INFINITY, d) : rne(d, 7, -126);
	if (!same(kvrt_bf16_to_f32(b), want) || (isnan(d) && (b >> 15) != (f_bits(x) >> 31)))
		enc_fail(1, d, x, b, want);

	/* fp8 e4m3fn: 3 mantissa bits, emin -6, saturating at 448 */
	want = isnan(d) ? NAN : fabs(d) >= 448 ? copysign(448, d) : rne(d, 3, -6);
	if (fabs(want) > 448)
		want = copysign(448, d);
	if (!same(fp8_value(q), want) || (isnan(d) && (q >> 7) != (f_bits(x) >> 31)))
		enc_fail(2, d, x, q, want);
}

static void test_sizes(void)
{
	tap_result(kvrt_dtype_size(KVRT_DTYPE_F32) == 4, "size f32");
	tap_result(kvrt_dtype_size(KVRT_DTYPE_F16) == 2, "size f16");
	tap_result(kvrt_dtype_size(KVRT_DTYPE_BF16) == 2, "size bf16");
	tap_result(kvrt_dtype_size(KVRT_DTYPE_FP8_E4M3) == 1, "size fp8");
	tap_result(kvrt_dtype_size((enum kvrt_dtype)4) == 0, "size of dtype 4");
	tap_result(kvrt_dtype_size((enum kvrt_dtype)-1) == 0, "size of dtype -1");
}

static void test_decoders(void)
{
	uint32_t i;
	int bad16 = 0, badb = 0, bad8 = 0;

	for (i = 0; i < 65536; i++) {
		float f = kvrt_f16_to_f32((uint16_t)i);

		bad16 += !same(f, f16_value((uint16_t)i)) ||
			 (isnan(f) && (f_bits(f) >> 31) != (i >> 15));
		badb += f_bits(kvrt_bf16_to_f32((uint16_t)i)) != i << 16;
	}
	for (i = 0; i < 256; i++)
		bad8 += !same(kvrt_fp8e4m3_to_f32((uint8_t)i), fp8_value((uint8_t)i));
	tap_result(!bad16, "%d f16 patterns decoded wrong", bad16);
	tap_result(!badb, "%d bf16 patterns decoded wrong", badb);
	tap_result(!bad8, "%d fp8 patterns decoded wrong", bad8);
	tap_result(isnan(kvrt_fp8e4m3_to_f32(0x7f)) && isnan(kvrt_fp8e4m3_to_f32(0xff)),
	      "fp8 NaN patterns");
	tap_result(kvrt_fp8e4m3_to_f32(0x7e) == 448 && kvrt_fp8e4m3_to_f32(0x01) == 0x1p-9f,
	      "fp8 max and min");
}

static void test_encoders(void)
{
	uint64_t u;
	uint32_t i;

	/* a strided walk over every f32 pattern (stride odd: all exponents) */
	for (u = 0; u < (1ULL << 32); u += 997)
		check_encoders(bits_f((uint32_t)u));
	/* every output's neighbourhood: midpoints, and one f32 ulp each side */
	for (i = 0; i < 65536; i++) {
		double a = f16_value((uint16_t)i), b = f16_value((uint16_t)(i + 1));
		float mid;

		if (!isfinite(a) || !isfinite(b) || (i & 0x7fff) == 0x7fff)
			continue;
		mid = (float)((a + b) / 2);
		check_encoders(mid);
		check_encoders(nextafterf(mid, INFINITY));
		check_encoders(nextafterf(mid, -INFINITY));
		/* bf16 midpoints: i and i + 1 as bf16 */
		mid = (float)(((double)kvrt_bf16_to_f32((uint16_t)i) +
			       (double)kvrt_bf16_to_f32((uint16_t)(i + 1))) / 2);
		if (isfinite(mid)) {
			check_encoders(mid);
			check_encoders(nextafterf(mid, INFINITY));
			check_encoders(nextafterf(mid, -INFINITY));
		}
	}
	for (i = 0; i < 255; i++) {
		double a = fp8_value((uint8_t)i), b = fp8_value((uint8_t)(i + 1));
		float mid;

		if (isnan(a) || isnan(b) || i == 0x7f)
			continue;
		mid = (float)((a + b) / 2);
		check_encoders(mid);
		check_encoders(nextafterf(mid, INFINITY));
		check_encoders(nextafterf(mid, -INFINITY));
	}
	/* specials */
	check_encoders(INFINITY);
	check_encoders(-INFINITY);
	check_encoders(NAN);
	check_encoders(-NAN);
	check_encoders(0.0f);
	check_encoders(-0.0f);
	check_encoders(65504.0f);
	check_encoders(65519.99f);
	check_encoders(65520.0f);
	check_encoders(448.0f);
	check_encoders(464.0f);
	check_encoders(1e30f);
	check_encoders(0x1p-149f);
	tap_result(kvrt_f32_to_fp8e4m3(INFINITY) == 0x7e && kvrt_f32_to_fp8e4m3(-INFINITY) == 0xfe,
	      "fp8 saturates infinities");
	tap_result(kvrt_f32_to_f16(65520.0f) == 0x7c00 && kvrt_f32_to_f16(65519.99f) == 0x7bff,
	      "f16 overflow threshold");
	tap_result((kvrt_f32_to_bf16(bits_f(0x7f800001)) & 0x7fc0) == 0x7fc0,
	      "bf16 keeps a signalling NaN a NaN");
	tap_result(!enc_bad[0], "f32_to_f16: %ld of %ld inputs wrong", enc_bad[0], enc_checked);
	tap_result(!enc_bad[1], "f32_to_bf16: %ld of %ld inputs wrong", enc_bad[1], enc_checked);
	tap_result(!enc_bad[2], "f32_to_fp8e4m3: %ld of %ld inputs wrong", enc_bad[2], enc_checked);
	printf("# encoders: %ld inputs each\n", enc_checked);
}

/* ---- the kernels' decoders, through decode over one-token sequences ---------- */

static const char *isas[] = { NULL, NULL, "avx512", "avx2", "generic" };

static void kernel_roundtrip(enum kvrt_dtype dt, uint32_t count, uint32_t (*pattern)(uint32_t))
{
	const uint32_t hd = 128, es = (uint32_t)kvrt_dtype_size(dt);
	uint32_t nseq = (count + hd - 1) / hd, s, d, i;
	struct kvrt_layout lo = {
		.num_layers = 1, .num_kv_heads = 1, .head_dim = hd, .block_tokens = 1,
		.num_blocks = nseq, .kv_dtype = dt,
		.head_stride = hd * es, .token_stride = hd * es, .kv_stride = (int64_t)hd * es * nseq,
		.block_stride = hd * es, .layer_stride = 2LL * hd * es * nseq,
		.scale_block_stride = 1, .scale_kv_stride = nseq, .scale_layer_stride = 2LL * nseq,
	};
	uint8_t *cache = calloc(2, (size_t)hd * es * nseq);	/* K = 0 */
	float *scales = NULL, *q = calloc((size_t)nseq * hd, 4), *out = malloc((size_t)nseq * hd * 4);
	int32_t *indptr = malloc(4 * (nseq + 1)), *indices = malloc(4 * nseq), *lens = malloc(4 * nseq);

	if (dt == KVRT_DTYPE_FP8_E4M3) {
		scales = malloc(sizeof(float) * 2 * nseq);
		for (s = 0; s < 2 * nseq; s++)	/* powers of two: exact */
			scales[s] = ldexpf(1.0f, (int)(s % 7) - 3);
	}
	for (s = 0; s <= nseq; s++)
		indptr[s] = (int32_t)s;
	for (s = 0; s < nseq; s++) {
		indices[s] = (int32_t)s;
		lens[s] = 1;
	}
	for (i = 0; i < nseq * hd; i++) {
		uint32_t v = pattern(i < count ? i : 0);

		memcpy(cache + lo.kv_stride + (size_t)i * es, &v, es);	/* little-endian */
	}
	for (i = 0; i < 5; i++) {
		struct kvrt_kv_cache kv = { &lo, cache, scales, 0 };
		struct kvrt_block_table bt = { nseq, indptr, indices, lens };
		struct kvrt_attn_params p = { .num_q_heads = 1, .sm_scale = 1.0f, .window_left = -1,
					      .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32,
					      .impl = i ? KVRT_ATTN_FAST : KVRT_ATTN_REFERENCE,
					      .num_threads = 2 };
		int bad = 0, ret;
		uint32_t first = 0;

		if (isas[i])
			setenv("KVRT_CPU_ISA", isas[i], 1);
		ret = kvrt_attn_decode(&p, q, &kv, &bt, out);
		unsetenv("KVRT_CPU_ISA");
		for (s = 0; s < nseq && !ret; s++)
			for (d = 0; d < hd; d++) {
				uint32_t idx = s * hd + d, v = pattern(idx < count ? idx : 0);
				double want = dt == KVRT_DTYPE_F16 ? f16_value((uint16_t)v)
					      : dt == KVRT_DTYPE_BF16 ? (double)bits_f(v << 16)
					      : fp8_value((uint8_t)v);

				if (scales)
					want *= scales[nseq + s];
				/* 0 + -0 is +0: the sign of a zero output is free */
				if (!(same(out[idx], want) || (want == 0 && out[idx] == 0)) && !bad++)
					first = v;
			}
		tap_result(!ret && !bad, "V through the %s kernel (%s): ret %d, %d of %u %s patterns wrong (first 0x%x)",
		      i ? "fast" : "reference", isas[i] ? isas[i] : i ? "best" : "-", ret, bad, count,
		      dt == KVRT_DTYPE_F16 ? "f16" : dt == KVRT_DTYPE_BF16 ? "bf16" : "fp8", first);
	}
	free(cache);
	free(scales);
	free(q);
	free(out);
	free(indptr);
	free(indices);
	free(lens);
}

static uint32_t all_patterns(uint32_t i)
{
	return i;
}

static uint32_t bf16_patterns(uint32_t i)	/* every exponent, sign, some mantissas */
{
	return (i * 37u) & 0xffff;
}

int main(void)
{
	test_sizes();
	test_decoders();
	test_encoders();
	kernel_roundtrip(KVRT_DTYPE_F16, 65536, all_patterns);
	kernel_roundtrip(KVRT_DTYPE_FP8_E4M3, 256, all_patterns);
	kernel_roundtrip(KVRT_DTYPE_BF16, 65536, bf16_patterns);
	return tap_done("test_attn_dtype");
}
