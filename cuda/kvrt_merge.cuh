// SPDX-License-Identifier: MIT
/*
 * kvrt_merge.cuh: one merge item of split (flash-decoding) attention, for
 * kvrt_attn_merge (merge.cu) and for the decode CTA that finishes a
 * split's last partial (decode.cu).  It combines the partial states
 * (o, m, l) of slots [partial0, partial0 + num_partials) of one query row:
 *
 *   out = sum_i exp(m_i - M) o_i / sum_i exp(m_i - M) l_i,   M = max_i m_i
 *
 * one thread per output element; the m/l reads repeat per element but hit
 * cache.  Partials are read from L2 (other CTAs of the same launch wrote
 * them).  A row whose partials saw no key (every m_i = -inf) is zeros.
 */
#ifndef KVRT_MERGE_CUH
#define KVRT_MERGE_CUH

#include "kvrt_common.cuh"

namespace kvgpu {

/* out: [rows][num_q_heads][hd], the item's heads consecutive; threads tid of nthreads. */
KVRT_DEV void merge_item(const kvrt_gk_merge &mg, void *out, const float *po, const float *pml,
			 int num_q_heads, int hd, uint32_t o_dtype, int tid, int nthreads)
{
	const int64_t orow = ((int64_t)mg.row * num_q_heads + mg.q_head0) * hd;

	for (int e = tid; e < mg.num_q_heads * hd; e += nthreads) {
		const int h = e / hd, d = e % hd;
		float mx = -INFINITY, so = 0.0f, sl = 0.0f;

		for (int i = 0; i < mg.num_partials; i++) {
			const int64_t slot = ((int64_t)(mg.partial0 + i) * KVRT_GK_MAX_GROUP + h);

			mx = fmaxf(mx, ld_cg_f32(pml + slot * 2));
		}
		for (int i = 0; i < mg.num_partials; i++) {
			const int64_t slot = ((int64_t)(mg.partial0 + i) * KVRT_GK_MAX_GROUP + h);
			const float m = ld_cg_f32(pml + slot * 2);
			/* an empty partial (m = -inf) adds nothing, even where M is -inf */
			const float f = m == -INFINITY ? 0.0f : exp2f((m - mx) * kLog2e);

			so += f * ld_cg_f32(po + slot * hd + d);
			sl += f * ld_cg_f32(pml + slot * 2 + 1);
		}
		store_f32(out, orow + e, o_dtype, sl > 0.0f ? so / sl : 0.0f);
	}
}

} /* namespace kvgpu */

#endif /* KVRT_MERGE_CUH */
