// SPDX-License-Identifier: MIT
/*
 * merge.cu: kvrt_attn_merge, the second half of split (flash-decoding)
 * attention.  Each merge item combines the partial states (o, m, l) of
 * slots [partial0, partial0 + num_partials) of one query row and its heads:
 *
 *   out = sum_i exp(m_i - M) o_i / sum_i exp(m_i - M) l_i,   M = max_i m_i
 *
 * One CTA per item at a time (grid-stride over hdr->num_merge), one thread
 * per output element; the m/l reads repeat per element but hit L1.  A row
 * whose partials saw no key (every m_i = -inf) is written as zeros.
 */
#include "kvrt_common.cuh"

KVRT_KERNEL(KVRT_GK_MERGE_THREADS, 4) kvrt_attn_merge(const kvrt_gk_merge_args a)
{
	using namespace kvgpu;
	const kvrt_gk_plan_hdr *hdr = reinterpret_cast<const kvrt_gk_plan_hdr *>(a.hdr);
	const kvrt_gk_merge *items = reinterpret_cast<const kvrt_gk_merge *>(a.merge);
	const float *po = reinterpret_cast<const float *>(a.partial_o);
	const float *pml = reinterpret_cast<const float *>(a.partial_ml);
	const int hd = (int)a.head_dim;
	const uint32_t nm = hdr->num_merge;

	for (uint32_t mi = blockIdx.x; mi < nm; mi += gridDim.x) {
		const kvrt_gk_merge mg = items[mi];
		/* out: [rows][num_q_heads][head_dim]; the item's heads are consecutive */
		const int64_t orow = ((int64_t)mg.row * a.num_q_heads + mg.q_head0) * hd;

		for (int e = threadIdx.x; e < mg.num_q_heads * hd; e += KVRT_GK_MERGE_THREADS) {
			const int h = e / hd, d = e % hd;
			float mx = -INFINITY, so = 0.0f, sl = 0.0f;

			for (int i = 0; i < mg.num_partials; i++) {
				const int64_t slot = ((int64_t)(mg.partial0 + i) * KVRT_GK_MAX_GROUP + h);

				mx = fmaxf(mx, pml[slot * 2]);
			}
			for (int i = 0; i < mg.num_partials; i++) {
				const int64_t slot = ((int64_t)(mg.partial0 + i) * KVRT_GK_MAX_GROUP + h);
				const float m = pml[slot * 2];
				/* an empty partial (m = -inf) adds nothing, even where M is -inf */
				const float f = m == -INFINITY ? 0.0f : exp2f((m - mx) * kLog2e);

				so += f * po[slot * hd + d];
				sl += f * pml[slot * 2 + 1];
			}
			store_f32(reinterpret_cast<void *>(a.out), orow + e, a.o_dtype,
				  sl > 0.0f ? so / sl : 0.0f);
		}
	}
}
