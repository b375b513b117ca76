// SPDX-License-Identifier: MIT
/*
 * attn_simd_avx512bf16.c: the AVX-512 kernel plus AVX512_BF16: when q and
 * K are both bf16, the logits are vdpbf16ps dot products (no conversion of
 * K, half the multiply-adds).  Only the functions of this file are compiled
 * for that ISA (target pragma); attn_fast.c calls them only on a CPU that
 * has it.  The kernel itself is in attn_kern.h.
 */
#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")

#define KERN_NAME kvrt_attn_kern_avx512bf16
#define VL 16
#define RT 4
#define CT 4
#define KERN_DPBF16 1
#include "attn_cvt_avx512.h"
#include "attn_kern.h"

#pragma GCC pop_options
#endif
