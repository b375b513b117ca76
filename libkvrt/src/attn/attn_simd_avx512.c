// SPDX-License-Identifier: MIT
/*
 * attn_simd_avx512.c: the fast attention kernel for AVX-512 (F, BW, VL,
 * DQ), in 16-wide vectors.  Only the functions of this file are compiled
 * for that ISA (target pragma); attn_fast.c calls them only on a CPU that
 * has it.  The kernel itself is in attn_kern.h.
 */
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#define KERN_NAME kvrt_attn_kern_avx512
#define VL 16
#define RT 4
#define CT 4
#include "attn_cvt_avx512.h"
#include "attn_kern.h"

#pragma GCC pop_options
#endif
