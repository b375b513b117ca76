// SPDX-License-Identifier: MIT
/*
 * append.cu: reshape-and-cache, kvrt_append_{f16,bf16,fp8}.  Token i of
 * k_src/v_src ([num_tokens][num_kv_heads][head_dim], src_dtype) goes to
 * block slots[i] / block_tokens, offset slots[i] % block_tokens; a slot < 0
 * or >= num_slots is skipped.  The bytes written are kvrt_append_kv()'s:
 * the same conversions (kvrt_common.cuh mirrors dtype.c) and, for fp8, the
 * same float operations in the same order.
 *
 * f16/bf16: one warp per (token, K or V, head) row, grid-stride; rows are
 * independent.
 *
 * fp8: kvrt_append_kv()'s scale rule is sequential per (block, head, K or
 * V): offset 0 sets the scale afresh, a later offset with a larger absmax
 * raises it and requantizes the block's other slots.  The host promises
 * that a block's tokens are consecutive in the list (padding slots may sit
 * between them).  So one warp owns each (run, head, K or V): the warp of
 * token i works only if i starts a run (it is valid and the nearest valid
 * token before it is in another block, or there is none) and then applies
 * the run's tokens in order; warps of other tokens do nothing.  Within a
 * warp, lane l always handles dims l, l + 32, ... of every row, so the
 * lane that requantizes a byte is the one that wrote it.  If the promise
 * is broken (a block's tokens in two runs), two warps race on that block.
 */
#include "kvrt_common.cuh"

namespace kvgpu {
namespace app {

constexpr int kWarps = KVRT_GK_APPEND_THREADS / 32;

KVRT_DEV size_t src_size(uint32_t dt)
{
	return dt == KVRT_GK_F32 ? 4 : 2;
}

KVRT_DEV bool slot_ok(int64_t s, int64_t num_slots)
{
	return s >= 0 && s < num_slots;
}

template <int KV>
KVRT_DEV void append_plain(const kvrt_gk_append_args &a)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t *slots = reinterpret_cast<const int64_t *>(a.slots);
	const uint32_t nh = a.num_kv_heads, hd = a.head_dim;
	const uint64_t rows = (uint64_t)a.num_tokens * nh * 2;
	const size_t es = src_size(a.src_dtype);

	for (uint64_t r = (uint64_t)blockIdx.x * kWarps + warp; r < rows;
	     r += (uint64_t)gridDim.x * kWarps) {
		const uint32_t kv = (uint32_t)(r & 1), h = (uint32_t)((r >> 1) % nh);
		const uint64_t i = (r >> 1) / nh;
		const int64_t s = slots[i];

		if (!slot_ok(s, a.num_slots))
			continue;
		const int64_t b = s / a.block_tokens, t = s % a.block_tokens;
		uint16_t *dst = reinterpret_cast<uint16_t *>((kv ? a.v : a.k) + b * a.block_stride +
							     t * a.token_stride + h * a.head_stride);
		const char *src = reinterpret_cast<const char *>(kv ? a.v_src : a.k_src) +
				  (i * nh + h) * hd * es;

		for (uint32_t d = lane; d < hd; d += 32) {
			if (a.src_dtype == (uint32_t)KV) {	/* same type: the bits */
				dst[d] = reinterpret_cast<const uint16_t *>(src)[d];
			} else {
				const float x = load_f32(src, d, a.src_dtype);

				dst[d] = (uint16_t)(KV == KVRT_GK_F16 ? f32_to_f16(x) : f32_to_bf16(x));
			}
		}
	}
}

KVRT_DEV void append_fp8(const kvrt_gk_append_args &a)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t *slots = reinterpret_cast<const int64_t *>(a.slots);
	const uint32_t nh = a.num_kv_heads, hd = a.head_dim;
	const int64_t bt = a.block_tokens, ntok = a.num_tokens;
	const uint64_t units = (uint64_t)ntok * nh * 2;
	const size_t es = src_size(a.src_dtype);

	for (uint64_t u = (uint64_t)blockIdx.x * kWarps + warp; u < units;
	     u += (uint64_t)gridDim.x * kWarps) {
		const uint32_t kv = (uint32_t)(u & 1), h = (uint32_t)((u >> 1) % nh);
		const int64_t i = (int64_t)((u >> 1) / nh);
		int64_t s = slots[i], j;

		if (!slot_ok(s, a.num_slots))
			continue;
		const int64_t b = s / bt;

		for (j = i - 1; j >= 0 && !slot_ok(slots[j], a.num_slots); j--)
			;
		if (j >= 0 && slots[j] / bt == b)
			continue;	/* not the start of b's run */

		uint8_t *plane = reinterpret_cast<uint8_t *>(kv ? a.v : a.k) + b * a.block_stride +
				 (int64_t)h * a.head_stride;
		float *sp = reinterpret_cast<float *>(kv ? a.v_scales : a.k_scales) +
			    b * a.scale_block_stride + h;
		const char *srcb = reinterpret_cast<const char *>(kv ? a.v_src : a.k_src);
		float scale = *sp;

		for (j = i; j < ntok; j++) {
			s = slots[j];
			if (!slot_ok(s, a.num_slots))
				continue;
			if (s / bt != b)
				break;
			const int64_t t = s % bt;
			const char *src = srcb + ((uint64_t)j * nh + h) * hd * es;
			float mx = 0.0f;

			for (uint32_t d = lane; d < hd; d += 32)
				mx = fmaxf(mx, fabsf(load_f32(src, d, a.src_dtype)));
			mx = xor_max<1, 32>(mx);
			const float want = mx / kFp8Max;

			if (t == 0) {
				scale = want;	/* the block starts afresh */
			} else if (want > scale) {
				/* raise: re-encode the other slots, old scale to new */
				for (int64_t o = 0; o < bt; o++) {
					if (o == t)
						continue;
					uint8_t *row = plane + o * a.token_stride;

					for (uint32_t d = lane; d < hd; d += 32)
						row[d] = (uint8_t)f32_to_fp8(
							__fdiv_rn(__fmul_rn(fp8_to_f32(row[d]), scale), want));
				}
				scale = want;
			}
			uint8_t *row = plane + t * a.token_stride;

			for (uint32_t d = lane; d < hd; d += 32)
				row[d] = scale > 0.0f ?
					 (uint8_t)f32_to_fp8(__fdiv_rn(load_f32(src, d, a.src_dtype), scale)) :
					 0;
			__syncwarp();
		}
		if (lane == 0)
			*sp = scale;
	}
}

} /* namespace app */
} /* namespace kvgpu */

KVRT_KERNEL(KVRT_GK_APPEND_THREADS, 4) kvrt_append_f16(const kvrt_gk_append_args a)
{
	kvgpu::app::append_plain<KVRT_GK_F16>(a);
}

KVRT_KERNEL(KVRT_GK_APPEND_THREADS, 4) kvrt_append_bf16(const kvrt_gk_append_args a)
{
	kvgpu::app::append_plain<KVRT_GK_BF16>(a);
}

KVRT_KERNEL(KVRT_GK_APPEND_THREADS, 4) kvrt_append_fp8(const kvrt_gk_append_args a)
{
	kvgpu::app::append_fp8(a);
}
