// SPDX-License-Identifier: MIT
/*
 * attn_simd_avx2.c: the fast attention kernel for AVX2 + FMA + F16C, in
 * 8-wide vectors.  Only the functions of this file are compiled for that
 * ISA (target pragma); attn_fast.c calls them only on a CPU that has it.
 * The kernel itself is in attn_kern.h.
 */
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define KERN_NAME kvrt_attn_kern_avx2
#define VL 8
#define RT 2
#define CT 4
#define KERN_CVT_F16(src) ((vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src))))
#define KERN_CVT_BF16(src) \
	((vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src))), 16))
#define KERN_STORE_F16(dst, v) \
	_mm_storeu_si128((__m128i *)(dst), _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT))
#include "attn_kern.h"

#pragma GCC pop_options
#endif
