// SPDX-License-Identifier: MIT
/*
 * attn_simd_generic.c: the fast attention kernel for any CPU, in 4-wide
 * vectors of the baseline ISA (SSE2 on x86-64), f16 converted by bits.
 * The kernel itself is in attn_kern.h.
 */
#define KERN_NAME kvrt_attn_kern_generic
#define VL 4
#define RT 2
#define CT 4
#include "attn_kern.h"
