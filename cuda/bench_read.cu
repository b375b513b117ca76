// SPDX-License-Identifier: MIT
/*
 * bench_read.cu: kvrt_read_stream, a read-only stream of device memory:
 * the limit that decode attention, which only reads K/V, is measured
 * against (kvbench gpu-attn).  A device-to-device copy also writes, so
 * its rate is not what a reader can reach.
 *
 * src[0, units) of 16-byte vectors.  Each thread keeps kInFlight vectors
 * in flight (loads issued before any is used), tiles of kThreads x
 * kInFlight vectors go to the CTAs in turn, and the vectors past the last
 * whole tile go one per thread.  Every 32-bit word is added into a 64-bit
 * sum that the CTA writes once, to sums[blockIdx.x]: the loads have a use,
 * so the compiler keeps them, and the host can check that every byte was
 * read (the sum of the CTAs' sums is the sum of all the words, mod 2^64).
 */
#include "kvrt_common.cuh"

namespace kvgpu {
namespace rd {

constexpr int kThreads = KVRT_GK_READ_THREADS;
constexpr int kInFlight = 8;
constexpr int kWarps = kThreads / 32;

struct ReadSmem {
	uint64_t warp_sums[kWarps];
};

KVRT_DEV uint64_t fold(uint4 x)
{
	return (uint64_t)x.x + x.y + x.z + x.w;
}

KVRT_DEV uint64_t read_sum(const uint4 *__restrict__ src, uint64_t units)
{
	constexpr uint64_t kTile = (uint64_t)kThreads * kInFlight;
	const uint64_t tiles = units / kTile;
	uint64_t sum = 0, i;

	for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
		const uint4 *p = src + t * kTile + threadIdx.x;
		uint4 x[kInFlight];

#pragma unroll
		for (int k = 0; k < kInFlight; k++)
			x[k] = p[k * kThreads];
#pragma unroll
		for (int k = 0; k < kInFlight; k++)
			sum += fold(x[k]);
	}
	for (i = tiles * kTile + (uint64_t)blockIdx.x * kThreads + threadIdx.x; i < units;
	     i += (uint64_t)gridDim.x * kThreads)
		sum += fold(src[i]);
	return sum;
}

} /* namespace rd */
} /* namespace kvgpu */

KVRT_KERNEL(KVRT_GK_READ_THREADS, 2) kvrt_read_stream(const kvrt_gk_read_args a)
{
	using namespace kvgpu::rd;
	KVRT_SHARED(ReadSmem, sm);
	uint64_t s = read_sum(reinterpret_cast<const uint4 *>(a.src), a.units);

#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	if ((threadIdx.x & 31) == 0)
		sm.warp_sums[threadIdx.x / 32] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int w = 1; w < kWarps; w++)
			s += sm.warp_sums[w];
		reinterpret_cast<uint64_t *>(a.sums)[blockIdx.x] = s;
	}
}
