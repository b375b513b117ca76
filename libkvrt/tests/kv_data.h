/* SPDX-License-Identifier: MIT */
/*
 * kv_data.h: what the attention tests (test_attn.c, test_gpu.c) use to make
 * and read K/V data without the library: a seeded random source, exact
 * decoders and truncating encoders for every KV dtype, NaN poison, and the
 * offsets of a layout from the formulas in kvrt.h.  Written independently
 * of libkvrt's own conversions (dtype.c), so the tests' float64
 * references do not share its mistakes.  Header-only: a program of several
 * files may include it in each (one rng_state, weak, as tap.h's state).
 */
#ifndef KVRT_TESTS_KV_DATA_H
#define KVRT_TESTS_KV_DATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvrt.h"

__attribute__((weak)) uint64_t rng_state;

/* splitmix64; rng_state is the seed */
static inline uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint32_t rnd_below(uint32_t n)
{
	return (uint32_t)(rnd() % n);
}

static inline double rnd_unit(void)	/* [-1, 1) */
{
	return (double)(rnd() >> 11) * 0x1p-52 - 1.0;
}

/*
 * Element codecs.  Decoders are exact; enc() truncates (rounds toward
 * zero), which is all the tests need to make data.
 */
static inline size_t esize(enum kvrt_dtype t)
{
	return t == KVRT_DTYPE_F32 ? 4 : t == KVRT_DTYPE_FP8_E4M3 ? 1 : 2;
}

static inline double dec_fp8(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	double v = (e == 15 && m == 7) ? NAN : e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);

	return (b & 0x80) ? -v : v;
}

static inline double dec(enum kvrt_dtype t, const void *base, size_t i)
{
	const uint8_t *p = base;
	uint32_t u32;
	uint16_t u16;
	float f;

	switch (t) {
	case KVRT_DTYPE_F32:
		memcpy(&f, p + 4 * i, 4);
		return f;
	case KVRT_DTYPE_BF16:
		memcpy(&u16, p + 2 * i, 2);
		u32 = (uint32_t)u16 << 16;
		memcpy(&f, &u32, 4);
		return f;
	case KVRT_DTYPE_F16: {
		int e, m;
		double v;

		memcpy(&u16, p + 2 * i, 2);
		e = (u16 >> 10) & 31;
		m = u16 & 1023;
		v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
		return (u16 & 0x8000) ? -v : v;
	}
	case KVRT_DTYPE_FP8_E4M3:
		return dec_fp8(p[i]);
	}
	return NAN;
}

static inline void enc(enum kvrt_dtype t, void *base, size_t i, double x)
{
	uint8_t *p = base;
	float f = (float)x;
	uint32_t u;
	uint16_t h;

	memcpy(&u, &f, 4);
	switch (t) {
	case KVRT_DTYPE_F32:
		memcpy(p + 4 * i, &f, 4);
		break;
	case KVRT_DTYPE_BF16:
		h = (uint16_t)(u >> 16);
		memcpy(p + 2 * i, &h, 2);
		break;
	case KVRT_DTYPE_F16: {
		double a = fabs(x);
		int e;

		if (a < 0x1p-14) {
			h = (uint16_t)(a * 0x1p24);
		} else {
			frexp(a, &e);
			h = (uint16_t)(((e - 1 + 15) << 10) | ((uint32_t)ldexp(a, 11 - e) & 1023));
		}
		h |= (u >> 16) & 0x8000;
		memcpy(p + 2 * i, &h, 2);
		break;
	}
	case KVRT_DTYPE_FP8_E4M3: {
		double a = fabs(x);
		uint8_t b;
		int e;

		if (a < 0x1p-6) {
			b = (uint8_t)(a * 0x1p9);
		} else {
			if (a > 448)
				a = 448;
			frexp(a, &e);
			b = (uint8_t)(((e - 1 + 7) << 3) | ((uint32_t)ldexp(a, 4 - e) & 7));
		}
		p[i] = b | (x < 0 ? 0x80 : 0);
		break;
	}
	}
}

/* A NaN of dtype t at element i. */
static inline void poison(enum kvrt_dtype t, void *base, size_t i)
{
	uint8_t *p = base;
	uint32_t f32 = 0x7fc00000;
	uint16_t f16 = 0x7e00, bf16 = 0x7fc0;

	switch (t) {
	case KVRT_DTYPE_F32:
		memcpy(p + 4 * i, &f32, 4);
		break;
	case KVRT_DTYPE_F16:
		memcpy(p + 2 * i, &f16, 2);
		break;
	case KVRT_DTYPE_BF16:
		memcpy(p + 2 * i, &bf16, 2);
		break;
	case KVRT_DTYPE_FP8_E4M3:
		p[i] = 0x7f;
		break;
	}
}

static inline const char *dtname(enum kvrt_dtype t)
{
	static const char *const n[] = { "f32", "f16", "bf16", "fp8" };

	return (unsigned int)t < 4 ? n[t] : "?";
}

/* Bytes, scales and offsets of a layout's cache (strides >= 0). */
static inline size_t layout_bytes(const struct kvrt_layout *lo)
{
	return (size_t)((lo->num_layers - 1) * lo->layer_stride + lo->kv_stride +
			(int64_t)(lo->num_blocks - 1) * lo->block_stride +
			(lo->block_tokens - 1) * lo->token_stride +
			(lo->num_kv_heads - 1) * lo->head_stride) +
	       lo->head_dim * esize(lo->kv_dtype);
}

static inline size_t scales_count(const struct kvrt_layout *lo)
{
	if (lo->kv_dtype != KVRT_DTYPE_FP8_E4M3)
		return 0;
	return (size_t)((lo->num_layers - 1) * lo->scale_layer_stride + lo->scale_kv_stride +
			(int64_t)(lo->num_blocks - 1) * lo->scale_block_stride) +
	       lo->num_kv_heads;
}

static inline size_t elem_off(const struct kvrt_layout *lo, uint32_t l, int kv, int64_t b,
			      int64_t t, uint32_t h)
{
	return (size_t)(l * lo->layer_stride + kv * lo->kv_stride + b * lo->block_stride +
			t * lo->token_stride + h * lo->head_stride);
}

static inline size_t scale_idx(const struct kvrt_layout *lo, uint32_t l, int kv, int64_t b,
			       uint32_t h)
{
	return (size_t)(l * lo->scale_layer_stride + kv * lo->scale_kv_stride +
			b * lo->scale_block_stride + h);
}

#endif /* KVRT_TESTS_KV_DATA_H */
