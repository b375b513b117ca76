// SPDX-License-Identifier: MIT
/*
 * emu_mma.h: the emulator's warp-level matrix multiply-accumulate,
 * mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, for
 * ../kvrt_mma.cuh.  Included by emu.h; apart from it so that other
 * emulator work merges without touching this.
 *
 * Fragments are PTX's ("Matrix Fragments for mma.m16n8k16"), with
 * g = lane / 4 and t = lane % 4; a .b32 register holds two 16-bit
 * elements, the lower-numbered one in the low half:
 *   A (16x16, row-major) a[0]: row g,   cols 2t, 2t+1
 *                        a[1]: row g+8, cols 2t, 2t+1
 *                        a[2]: row g,   cols 2t+8, 2t+9
 *                        a[3]: row g+8, cols 2t+8, 2t+9
 *   B (16x8, col-major)  b[0]: rows 2t, 2t+1,   col g
 *                        b[1]: rows 2t+8, 2t+9, col g
 *   C, D (16x8 floats)   c[i]: row g + 8 (i / 2), col 2t + i % 2
 *
 * Every lane publishes its fragments, the warp meets at a barrier, and
 * each lane computes its four D elements from all 32 lanes' A and B.  The
 * fragments alternate between two buffers, so one barrier per MMA does:
 * a lane writes a buffer again two MMAs later, past the barrier of the
 * MMA between, which every lane reaches only after reading it.  Products of f16 or bf16
 * values are exact in f32; they are added to c in k order in f32 (the
 * hardware's order and internal width differ, within f32 rounding).
 */
#ifndef KVRT_EMU_MMA_H
#define KVRT_EMU_MMA_H

#include <stdint.h>
#include <string.h>

namespace kvrt_emu {

unsigned thread_index();
void sync_warp();

struct MmaFrag {
	uint32_t a[4], b[2];
};

inline MmaFrag mma_frags[2][1024];	/* [buffer][thread]: the fragments it offers */
inline unsigned mma_count[1024];	/* per thread: MMAs so far; the warp's agree */

/* A 16-bit element as float: bf16 or f16 (subnormals, inf and NaN too). */
static inline float mma_half(uint32_t h, bool bf16)
{
	uint32_t u;
	float f;

	if (bf16) {
		u = h << 16;
	} else {
		uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;

		if (exp == 0x1f) {
			u = sign | 0x7f800000u | (mant << 13);
		} else if (exp == 0) {
			f = (float)mant * 0x1p-24f;
			return sign ? -f : f;
		} else {
			u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
		}
	}
	memcpy(&f, &u, 4);
	return f;
}

/* Element (row, col) of the warp's A, B from the published fragments. */
static inline float mma_a(const MmaFrag *buf, unsigned base, int row, int col, bool bf16)
{
	const MmaFrag &f = buf[base + (row % 8) * 4 + (col % 8) / 2];
	uint32_t w = f.a[row / 8 + 2 * (col / 8)];

	return mma_half(col % 2 ? w >> 16 : w & 0xffffu, bf16);
}

static inline float mma_b(const MmaFrag *buf, unsigned base, int row, int col, bool bf16)
{
	const MmaFrag &f = buf[base + col * 4 + (row % 8) / 2];
	uint32_t w = f.b[row / 8];

	return mma_half(row % 2 ? w >> 16 : w & 0xffffu, bf16);
}

static inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
				const float (&c)[4], bool bf16)
{
	const unsigned me = thread_index(), base = me & ~31u, lane = me & 31;
	MmaFrag *buf = mma_frags[mma_count[me]++ & 1];
	float out[4];

	memcpy(buf[me].a, a, sizeof(a));
	memcpy(buf[me].b, b, sizeof(b));
	sync_warp();
	for (int i = 0; i < 4; i++) {
		const int row = (int)(lane / 4) + 8 * (i / 2), col = (int)(lane % 4) * 2 + i % 2;
		float acc = c[i];

		for (int k = 0; k < 16; k++)
			acc += mma_a(buf, base, row, k, bf16) * mma_b(buf, base, k, col, bf16);
		out[i] = acc;
	}
	for (int i = 0; i < 4; i++)
		d[i] = out[i];
}

} /* namespace kvrt_emu */

#endif /* KVRT_EMU_MMA_H */
