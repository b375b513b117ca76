// SPDX-License-Identifier: MIT
/*
 * emu.h: enough of the CUDA execution model to run the kernels (../decode.cu etc.) on
 * the CPU, for tests on machines without a GPU (g++ -DKVRT_EMU -x c++).
 *
 * Each CTA runs as one fiber per thread (ucontext), one CTA at a time.  A
 * fiber runs until it reaches a barrier (__syncthreads, __syncwarp, or a
 * shuffle, which is a warp barrier on each side of the exchange); the
 * scheduler picks runnable fibers in a seeded random order, so a missing
 * barrier shows up as a wrong result.  A barrier that cannot complete
 * (divergent __syncthreads, a shuffle with exited lanes) aborts with a
 * message.  Shared memory (KVRT_SHARED) is filled with NaN bytes before
 * each CTA, so reading what no thread wrote is visible too.
 *
 * Asynchronous copies (cp.async) land only at their wait: emu_async.h.
 * atomicAdd and __threadfence: emu_atomic.h.  Warp MMA (mma.sync
 * m16n8k16, for ../kvrt_mma.cuh): emu_mma.h.
 *
 * Not emulated: the memory model beyond barriers, inline PTX (the
 * headers keep a portable path for everything they do in PTX).
 */
#ifndef KVRT_EMU_H
#define KVRT_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __device__
#define __global__
#define __host__
#define __forceinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct alignas(16) float4 {
	float x, y, z, w;
};

struct alignas(8) float2 {
	float x, y;
};

struct alignas(16) uint4 {
	unsigned x, y, z, w;
};

struct alignas(8) uint2 {
	unsigned x, y;
};

static inline float4 make_float4(float x, float y, float z, float w)
{
	return float4{ x, y, z, w };
}

static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
	return uint4{ x, y, z, w };
}

static inline uint2 make_uint2(unsigned x, unsigned y)
{
	return uint2{ x, y };
}

namespace kvrt_emu {

struct Idx {
	unsigned x, y, z;
};

unsigned thread_index();
unsigned block_index();
unsigned grid_size();
unsigned block_size();
void sync_cta();
void sync_warp();
uint64_t exchange(uint64_t v, unsigned src_lane);
void *shared_mem(size_t bytes);

/* Run fn as grid CTAs of block threads; seed orders the fibers. */
void launch(const std::function<void()> &fn, unsigned grid, unsigned block, unsigned seed);

} /* namespace kvrt_emu */

#include "emu_async.h"
#include "emu_atomic.h"

#define threadIdx (kvrt_emu::Idx{ kvrt_emu::thread_index(), 0, 0 })
#define blockIdx (kvrt_emu::Idx{ kvrt_emu::block_index(), 0, 0 })
#define gridDim (kvrt_emu::Idx{ kvrt_emu::grid_size(), 1, 1 })
#define blockDim (kvrt_emu::Idx{ kvrt_emu::block_size(), 1, 1 })

static inline void __syncthreads()
{
	kvrt_emu::sync_cta();
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	(void)mask;
	kvrt_emu::sync_warp();
}

template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	uint64_t b = 0, r;
	T out;

	(void)mask;
	(void)width;
	memcpy(&b, &v, sizeof(v));
	r = kvrt_emu::exchange(b, (unsigned)src & 31);
	memcpy(&out, &r, sizeof(out));
	return out;
}

template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
	return __shfl_sync(mask, v, (int)((kvrt_emu::thread_index() & 31) ^ (unsigned)lane_mask),
			   width);
}

static inline unsigned __float_as_uint(float f)
{
	unsigned u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float __uint_as_float(unsigned u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline unsigned __umulhi(unsigned a, unsigned b)
{
	return (unsigned)(((uint64_t)a * b) >> 32);
}

static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
	uint64_t v = ((uint64_t)y << 32) | x;
	unsigned r = 0;

	for (int i = 0; i < 4; i++)
		r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
	return r;
}

static inline float __fdiv_rn(float a, float b)
{
	return a / b;
}

static inline float __fmul_rn(float a, float b)
{
	return a * b;
}

#include "emu_mma.h"

#endif /* KVRT_EMU_H */
