/* SPDX-License-Identifier: MIT */
/*
 * dtype.h: scalar element conversions used inside libkvrt (not exported).
 *
 * All conversions to a narrower type round to nearest, ties to even, and
 * keep NaN a NaN (sign kept, quiet bit set).  f16 and bf16 overflow to
 * infinity as IEEE does; fp8 e4m3 is the OCP E4M3FN format (bias 7, no
 * infinities, one NaN pattern per sign: S.1111.111, largest finite 448) and
 * saturates: anything of magnitude above 448, infinities included, becomes
 * +-448.
 */
#ifndef KVRT_DTYPE_H
#define KVRT_DTYPE_H

#include <stdint.h>

#include "kvrt.h"

#define KVRT_FP8E4M3_MAX 448.0f

float kvrt_f16_to_f32(uint16_t h);
uint16_t kvrt_f32_to_f16(float f);
float kvrt_bf16_to_f32(uint16_t b);
uint16_t kvrt_f32_to_bf16(float f);
float kvrt_fp8e4m3_to_f32(uint8_t v);
uint8_t kvrt_f32_to_fp8e4m3(float f);

/* Load element i of an array of @dtype as float; 0 for an unknown dtype. */
float kvrt_load_f32(enum kvrt_dtype dtype, const void *p, size_t i);
/* Store @f as element i of an array of @dtype (fp8: no scaling applied). */
void kvrt_store_f32(enum kvrt_dtype dtype, void *p, size_t i, float f);

#endif /* KVRT_DTYPE_H */
