// SPDX-License-Identifier: MIT
/*
 * dtype.c: element sizes and scalar conversions between f32 and the narrow
 * types libkvrt stores (f16, bf16, fp8 e4m3).  Bit manipulation only, so the
 * results do not depend on the CPU having F16C or AVX-512 BF16; the
 * vectorised attention path uses those instructions where present and is
 * tested against these.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvrt.h"
#include "dtype.h"

size_t kvrt_dtype_size(enum kvrt_dtype dtype)
{
	switch ((int)dtype) {
	case KVRT_DTYPE_F32:
		return 4;
	case KVRT_DTYPE_F16:
	case KVRT_DTYPE_BF16:
		return 2;
	case KVRT_DTYPE_FP8_E4M3:
		return 1;
	default:
		return 0;
	}
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

float kvrt_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff;

	if (exp == 0x1f)	/* inf or NaN: payload moves up 13 bits */
		return bits_f32(sign | 0x7f800000 | (mant << 13));
	if (exp == 0) {		/* zero or subnormal: mant * 2^-24, exact */
		float v = (float)mant * 0x1p-24f;

		return sign ? -v : v;
	}
	return bits_f32(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t kvrt_f32_to_f16(float f)
{
	uint32_t x = f32_bits(f);
	uint16_t sign = (x >> 16) & 0x8000;
	uint32_t ax = x & 0x7fffffff;

	if (ax > 0x7f800000)	/* NaN: keep the top payload bits, force quiet */
		return sign | 0x7e00 | ((ax >> 13) & 0x3ff);
	/* 65520 = 65504 + half an ulp; the tie rounds to the even 65536 = inf */
	if (ax >= 0x477ff000)
		return sign | 0x7c00;
	if (ax < 0x38800000) {
		/*
		 * Below 2^-14 the result is subnormal (ulp 2^-24).  Adding 0.5
		 * (ulp 2^-24 in f32) lets the FPU do the rounding to nearest
		 * even; the low mantissa bits are then the f16 mantissa.
		 */
		float r = bits_f32(ax) + 0.5f;

		return sign | (uint16_t)(f32_bits(r) - f32_bits(0.5f));
	}
	/* Normal: rebias and round off 13 mantissa bits, ties to even. */
	ax += ((uint32_t)(15 - 127) << 23) + 0xfff + ((ax >> 13) & 1);
	return sign | (uint16_t)(ax >> 13);
}

float kvrt_bf16_to_f32(uint16_t b)
{
	return bits_f32((uint32_t)b << 16);
}

uint16_t kvrt_f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);

	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x0040);
	/* Overflow past the largest bf16 carries into the exponent: inf. */
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

float kvrt_fp8e4m3_to_f32(uint8_t v)
{
	uint32_t sign = (uint32_t)(v & 0x80) << 24;
	uint32_t exp = (v >> 3) & 0xf;
	uint32_t mant = v & 0x7;

	if (exp == 0xf && mant == 0x7)
		return bits_f32(sign | 0x7fc00000);
	if (exp == 0) {		/* zero or subnormal: mant * 2^-9 */
		float r = (float)mant * 0x1p-9f;

		return sign ? -r : r;
	}
	return bits_f32(sign | ((exp + 127 - 7) << 23) | (mant << 20));
}

uint8_t kvrt_f32_to_fp8e4m3(float f)
{
	uint32_t x = f32_bits(f);
	uint8_t sign = (x >> 24) & 0x80;
	uint32_t ax = x & 0x7fffffff;

	if (ax > 0x7f800000)
		return sign | 0x7f;
	if (ax >= f32_bits(KVRT_FP8E4M3_MAX))	/* saturate, inf included */
		return sign | 0x7e;
	if (ax < 0x3c800000) {
		/*
		 * Below 2^-6 the result is subnormal (ulp 2^-9): 2^14 has an
		 * ulp of 2^-9 in f32, so the sum is rounded by the FPU and its
		 * low bits are the fp8 mantissa (8 means the smallest normal,
		 * which is also its encoding).
		 */
		float r = bits_f32(ax) + 0x1p14f;

		return sign | (uint8_t)(f32_bits(r) - f32_bits(0x1p14f));
	}
	/* Normal: rebias and round off 20 mantissa bits, ties to even.  No
	 * overflow: the input is at most 448, which is representable. */
	ax += ((uint32_t)(7 - 127) << 23) + 0x7ffff + ((ax >> 20) & 1);
	return sign | (uint8_t)(ax >> 20);
}

/*
 * Elements are read and written with memcpy: a layout's strides need only
 * be whole bytes, so an f32 or f16 element may sit at any address (a
 * typed access there is undefined; memcpy compiles to the same move).
 */
float kvrt_load_f32(enum kvrt_dtype dtype, const void *p, size_t i)
{
	uint16_t h;
	float f;

	switch ((int)dtype) {
	case KVRT_DTYPE_F32:
		memcpy(&f, (const char *)p + i * sizeof(f), sizeof(f));
		return f;
	case KVRT_DTYPE_F16:
		memcpy(&h, (const char *)p + i * sizeof(h), sizeof(h));
		return kvrt_f16_to_f32(h);
	case KVRT_DTYPE_BF16:
		memcpy(&h, (const char *)p + i * sizeof(h), sizeof(h));
		return kvrt_bf16_to_f32(h);
	case KVRT_DTYPE_FP8_E4M3:
		return kvrt_fp8e4m3_to_f32(((const uint8_t *)p)[i]);
	default:
		return 0.0f;
	}
}

void kvrt_store_f32(enum kvrt_dtype dtype, void *p, size_t i, float f)
{
	uint16_t h;

	switch ((int)dtype) {
	case KVRT_DTYPE_F32:
		memcpy((char *)p + i * sizeof(f), &f, sizeof(f));
		break;
	case KVRT_DTYPE_F16:
		h = kvrt_f32_to_f16(f);
		memcpy((char *)p + i * sizeof(h), &h, sizeof(h));
		break;
	case KVRT_DTYPE_BF16:
		h = kvrt_f32_to_bf16(f);
		memcpy((char *)p + i * sizeof(h), &h, sizeof(h));
		break;
	case KVRT_DTYPE_FP8_E4M3:
		((uint8_t *)p)[i] = kvrt_f32_to_fp8e4m3(f);
		break;
	default:
		break;
	}
}
