// SPDX-License-Identifier: MIT
/*
 * kvrt_mma.cuh: the tensor-core operations of the kernels.
 *
 *   - mma16816<T>: D = A B + C, mma.sync.aligned.m16n8k16 with f16 or bf16
 *     inputs (T: KVRT_GK_F16 or KVRT_GK_BF16) and f32 accumulators (sm_80+).
 *     Fragment layouts are PTX's; tests/emu_mma.h spells them out and
 *     emulates the instruction for the CPU build;
 *   - pack2<T>: two floats to one .b32 of two T (round to nearest even,
 *     the low half first), the form A and B fragments take.
 */
#ifndef KVRT_MMA_CUH
#define KVRT_MMA_CUH

#include "kvrt_common.cuh"

namespace kvgpu {

template <int T>
KVRT_DEV void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
	static_assert(T == KVRT_GK_F16 || T == KVRT_GK_BF16, "mma16816: f16 or bf16");
#ifdef KVRT_EMU
	const float c[4] = { d[0], d[1], d[2], d[3] };

	kvrt_emu::mma_m16n8k16(d, a, b, c, T == KVRT_GK_BF16);
#else
	if constexpr (T == KVRT_GK_BF16)
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
		    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
		    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
	else
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
		    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
		    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

template <int T>
KVRT_DEV uint32_t pack2(float lo, float hi)
{
#ifdef KVRT_EMU
	if constexpr (T == KVRT_GK_BF16)
		return f32_to_bf16(lo) | f32_to_bf16(hi) << 16;
	else
		return f32_to_f16(lo) | f32_to_f16(hi) << 16;
#else
	uint32_t r;

	/* cvt's first source goes to the upper half */
	if constexpr (T == KVRT_GK_BF16)
		asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	else
		asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
#endif
}

/* A 16-bit T (the low half of h) as float. */
template <int T>
KVRT_DEV float half_to_f32(uint32_t h)
{
	if constexpr (T == KVRT_GK_BF16)
		return bf16_to_f32(h & 0xffffu);
	else
		return f16_to_f32(h & 0xffffu);
}

} /* namespace kvgpu */

#endif /* KVRT_MMA_CUH */
