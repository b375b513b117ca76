// SPDX-License-Identifier: MIT
/*
 * kvrt_prefill.cuh: what the prefill kernels (prefill.cu, SIMT, and
 * prefill_tc.cu, tensor cores) share, so that both decide the same keys
 * for the same work item:
 *
 *   - an item's (row, head) pairs (pair = row * nh + head) and their
 *     positions: row r of sequence s sits at seq_lens[s] - (q_indptr[s+1] - r);
 *   - the keys a pass over pairs [pbase, pend) reads, and the keys one
 *     pair sees (causal, window, the item's key range);
 *   - where a key's row of the paged cache is (the block table);
 *   - the kernel's loop over the plan's items.
 */
#ifndef KVRT_PREFILL_CUH
#define KVRT_PREFILL_CUH

#include "kvrt_common.cuh"

namespace kvgpu {

struct PrefillItem {
	int nh;			/* query heads of the item */
	int npairs;
	int seq_len, qend;
	int64_t idx0;		/* the sequence's first block-table entry */
	int64_t hoff;		/* the KV head's byte offset in a token row */
};

KVRT_DEV PrefillItem prefill_item_of(const AttnCtx &c, const kvrt_gk_work &w)
{
	PrefillItem it;

	it.nh = w.num_q_heads;
	it.npairs = (w.q_row_end - w.q_row0) * it.nh;
	it.seq_len = c.seq_lens[w.seq];
	it.qend = c.q_indptr[w.seq + 1];
	it.idx0 = c.indptr[w.seq];
	it.hoff = (int64_t)w.kv_head * c.head_stride;
	return it;
}

/* Position of pair pi's row. */
KVRT_DEV int pair_pos(const kvrt_gk_work &w, const PrefillItem &it, int pi)
{
	return it.seq_len - (it.qend - (w.q_row0 + pi / it.nh));
}

/* Keys [lo, hi) that some pair of [pbase, pend) sees. */
KVRT_DEV void pass_keys(const AttnCtx &c, const kvrt_gk_work &w, const PrefillItem &it, int pbase,
			int pend, int &lo, int &hi)
{
	lo = imax(w.tok_begin, 0);
	if (c.window_left >= 0)
		lo = imax(lo, pair_pos(w, it, pbase) - c.window_left);
	hi = imin(w.tok_end, pair_pos(w, it, pend - 1) + 1);
}

/* Keys [lo, hi] pair pi sees; none (lo > hi) for a padding pair (pi >= pend). */
KVRT_DEV void pair_keys(const AttnCtx &c, const kvrt_gk_work &w, const PrefillItem &it, int pi,
			int pend, int &lo, int &hi)
{
	lo = 1;
	hi = 0;
	if (pi < pend) {
		const int pos = pair_pos(w, it, pi);

		lo = imax(w.tok_begin, 0);
		if (c.window_left >= 0)
			lo = imax(lo, pos - c.window_left);
		hi = imin(pos, w.tok_end - 1);
	}
}

/* Block of key t, and the byte offset of its row (of the item's KV head) in K and V. */
KVRT_DEV int64_t key_row(const AttnCtx &c, const PrefillItem &it, int t, int64_t &block)
{
	const int bi = (int)fdiv(c.bdiv, (uint32_t)t);

	block = ldg(c.indices + it.idx0 + bi);
	return block * c.block_stride + (int64_t)(t - bi * c.bt) * c.token_stride + it.hoff;
}

/* Run item(c, w) for this CTA's share of the plan's items. */
template <class Item>
KVRT_DEV void for_each_prefill_item(const kvrt_gk_attn_args &a, Item &&item)
{
	const AttnCtx c = make_attn_ctx(a);
	const kvrt_gk_plan_hdr *hdr = reinterpret_cast<const kvrt_gk_plan_hdr *>(a.hdr);
	const kvrt_gk_work *work = reinterpret_cast<const kvrt_gk_work *>(a.work);
	const uint32_t nw = hdr->num_work;

	for (uint32_t wi = blockIdx.x; wi < nw; wi += gridDim.x) {
		const kvrt_gk_work w = work[wi];

		if (w.num_q_heads < 1 || w.num_q_heads > KVRT_GK_MAX_GROUP || w.q_row_end <= w.q_row0)
			continue;	/* not a plan the host makes */
		item(c, w);
	}
}

} /* namespace kvgpu */

#endif /* KVRT_PREFILL_CUH */
