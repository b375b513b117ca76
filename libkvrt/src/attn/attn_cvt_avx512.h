/* SPDX-License-Identifier: MIT */
/*
 * attn_cvt_avx512.h: the 16-wide conversions between f16/bf16 in memory and
 * f32 vectors that both AVX-512 kernels (attn_simd_avx512.c and
 * attn_simd_avx512bf16.c) hand to attn_kern.h.
 */
#define KERN_CVT_F16(src) ((vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src))))
#define KERN_CVT_BF16(src) \
	((vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src))), 16))
#define KERN_STORE_F16(dst, v) \
	_mm256_storeu_si256((__m256i *)(dst), _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT))
