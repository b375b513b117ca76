// SPDX-License-Identifier: MIT
/*
 * merge.cu: kvrt_attn_merge, the second half of split (flash-decoding)
 * attention as a launch of its own: one CTA per merge item at a time
 * (grid-stride over hdr->num_merge); the arithmetic is kvrt_merge.cuh's.
 * libkvrt's decode merges inside the decode launch instead
 * (kvrt_gk_attn_args.merge); this kernel serves callers that do not.
 */
#include "kvrt_merge.cuh"

KVRT_KERNEL(KVRT_GK_MERGE_THREADS, 4) kvrt_attn_merge(const kvrt_gk_merge_args a)
{
	using namespace kvgpu;
	const kvrt_gk_plan_hdr *hdr = reinterpret_cast<const kvrt_gk_plan_hdr *>(a.hdr);
	const kvrt_gk_merge *items = reinterpret_cast<const kvrt_gk_merge *>(a.merge);
	const uint32_t nm = hdr->num_merge;

	for (uint32_t mi = blockIdx.x; mi < nm; mi += gridDim.x)
		merge_item(items[mi], reinterpret_cast<void *>(a.out),
			   reinterpret_cast<const float *>(a.partial_o),
			   reinterpret_cast<const float *>(a.partial_ml), (int)a.num_q_heads,
			   (int)a.head_dim, a.o_dtype, threadIdx.x, KVRT_GK_MERGE_THREADS);
}
