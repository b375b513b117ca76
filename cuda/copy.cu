// SPDX-License-Identifier: MIT
/*
 * copy.cu: kvrt_copy_runs, the gather/scatter copy for block moves between
 * device memory and registered (mapped) host memory.  runs[i].bytes go
 * from runs[i].src to runs[i].dst; any sizes and alignments.
 *
 * One CTA per run at a time (grid-stride over runs): the host sends the
 * kernel the small runs (kvrt_gpu_info.kernel_copy_max) and batches large
 * ones, so a run rarely needs more than one CTA.  Within a run the copy
 * unit is the widest of 16, 8, 4, 2, 1 bytes that src and dst share an
 * alignment for; the bytes before src reaches that alignment and the tail
 * go one at a time.  Each thread has 4 units in flight (loads before
 * stores), which matters over PCIe.  Plain loads and stores: mapped host
 * memory must not go through the read-only path's assumptions.
 */
#include "kvrt_common.cuh"

namespace kvgpu {
namespace cpy {

constexpr int kThreads = KVRT_GK_COPY_THREADS;

template <class V>
KVRT_DEV void copy_units(V *__restrict__ dst, const V *__restrict__ src, uint64_t n)
{
	constexpr int kIn = 4;
	uint64_t i = threadIdx.x;

	for (; i + (kIn - 1) * kThreads < n; i += kIn * kThreads) {
		V x[kIn];

#pragma unroll
		for (int k = 0; k < kIn; k++)
			x[k] = src[i + k * kThreads];
#pragma unroll
		for (int k = 0; k < kIn; k++)
			dst[i + k * kThreads] = x[k];
	}
	for (; i < n; i += kThreads)
		dst[i] = src[i];
}

KVRT_DEV void copy_bytes(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src, uint64_t n)
{
	const uint64_t mis = (uint64_t)src ^ (uint64_t)dst;
	const uint64_t w = (mis & 15) == 0 ? 16 : (mis & 7) == 0 ? 8 : (mis & 3) == 0 ? 4 :
			   (mis & 1) == 0 ? 2 : 1;
	uint64_t head = (w - ((uint64_t)src & (w - 1))) & (w - 1);

	if (head > n)
		head = n;
	for (uint64_t i = threadIdx.x; i < head; i += kThreads)
		dst[i] = src[i];
	src += head;
	dst += head;
	n -= head;

	const uint64_t units = n / w, tail = n % w;

	switch (w) {
	case 16:
		copy_units(reinterpret_cast<uint4 *>(dst), reinterpret_cast<const uint4 *>(src), units);
		break;
	case 8:
		copy_units(reinterpret_cast<uint2 *>(dst), reinterpret_cast<const uint2 *>(src), units);
		break;
	case 4:
		copy_units(reinterpret_cast<uint32_t *>(dst), reinterpret_cast<const uint32_t *>(src),
			   units);
		break;
	case 2:
		copy_units(reinterpret_cast<uint16_t *>(dst), reinterpret_cast<const uint16_t *>(src),
			   units);
		break;
	default:
		copy_units(dst, src, units);
		return;
	}
	for (uint64_t i = threadIdx.x; i < tail; i += kThreads)
		dst[units * w + i] = src[units * w + i];
}

} /* namespace cpy */
} /* namespace kvgpu */

KVRT_KERNEL(KVRT_GK_COPY_THREADS, 4) kvrt_copy_runs(const kvrt_gk_copy_args a)
{
	const kvrt_gk_copy_run *runs = reinterpret_cast<const kvrt_gk_copy_run *>(a.runs);

	for (uint32_t r = blockIdx.x; r < a.num_runs; r += gridDim.x) {
		const kvrt_gk_copy_run run = runs[r];

		kvgpu::cpy::copy_bytes(reinterpret_cast<uint8_t *>(run.dst),
				 reinterpret_cast<const uint8_t *>(run.src), run.bytes);
	}
}
