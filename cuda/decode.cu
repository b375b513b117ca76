// SPDX-License-Identifier: MIT
/*
 * decode.cu: paged decode attention, kvrt_decode_hd{64,128,256}_{f16,bf16,fp8}
 * (items of 1..4 query heads) and kvrt_decode_g8_hd* (up to 8).
 *
 * One CTA (4 warps) per work item at a time: one sequence, one KV head, up
 * to 8 query heads of its group, keys [tok_begin, tok_end) cut to the
 * causal and window limits.  Each K/V row is read from memory once and used
 * for every query head of the item.
 *
 * Thread mapping.  A head row is split into 8-element chunks, one per lane
 * (16-byte loads for f16/bf16, 8-byte for fp8), so a row takes LPT = hd/8
 * lanes and a warp covers TPW = 32/LPT tokens per load instruction.  A
 * warp step takes U such loads of K and of V per lane (CHUNK = U*TPW
 * tokens, all loads issued before any use), the 4 warps take interleaved
 * steps, and each warp keeps its own online-softmax state.
 *
 * Per step, a lane has N = U*G partial dot products (its 8 dims of U tokens
 * against G query heads).  A transposing reduction over the row's lanes
 * leaves each lane with one complete logit, (token u, head h) fixed by its
 * lane index, in N - 1 + log2(LPT/N) shuffles.  Then the softmax runs on
 * one value per lane, and the probabilities (and per-head rescale factors)
 * go back to all lanes through a small per-warp shared buffer, where each
 * lane accumulates o[h][its 8 dims] for its tokens.  The 4 warps' (m, l, o)
 * are combined through shared memory at the end of the item.
 *
 * K/V bytes in flight live in shared memory, not registers: each warp has
 * its own ring of S stages (KVRT_GK_DECODE_RING / 4 bytes; a stage is one
 * warp step of K and V, and fp8's scales), filled by cp.async S - 1 steps
 * ahead of the step being computed, block ids one step earlier still.  A
 * lane copies exactly the chunks it later reads, so its own
 * cp.async.wait_group orders them and no barrier is needed; a token past
 * the range is not copied and reads as zeros.  S = min(8, ring / stage):
 * 3 for f16/bf16 at U = 4 (12 KB per warp, 8 KB in flight), 5 for fp8,
 * 6-8 for the half-size steps of G >= 4.  When the item ends, the
 * ring is drained and the warp's o is written over its own ring.
 *
 * G, the query heads rounded up to a power of two (1, 2, 4, 8), is a
 * template parameter chosen per item; padding heads get q = 0 and are not
 * written.  U = min(4 (G <= 2) or 2 (G >= 4), LPT/G): 2 keeps G = 4 in
 * 128 registers.  q stays in registers for G <= 2 and is read from shared
 * memory (two float4 per head and step) for larger G.  kvrt_decode_hd*
 * (G <= 4) is capped at 128 registers, kvrt_decode_g8_hd* (G = 8, whose
 * o alone is 64 registers) at 168; shared memory is KVRT_GK_DECODE_SMEM(hd)
 * (dynamic: 53 KB at hd 128).  So 4 CTAs (16 warps) per SM on sm_90 at
 * hd <= 128 for G <= 4, else 3 (hd 256's 57 KB, sm_80's 164 KB, g8).
 *
 * A split item (partial >= 0) of a launch given merge items finishes with
 * finish_split(): the last of a merge's partials to be done merges them.
 *
 * Exactness: fp32 throughout; exp2 of (x - m) * log2(e); K is decoded
 * exactly (fp8 through f16, its scale applied to the logit, V's to p).
 */
#include "kvrt_async.cuh"
#include "kvrt_common.cuh"
#include "kvrt_merge.cuh"

namespace kvgpu {
namespace dec {

constexpr int kWarps = KVRT_GK_DECODE_THREADS / 32;
constexpr int kMaxG = KVRT_GK_MAX_GROUP;
/* sm_80 decodes fp8 without cvt: g8's hd 128 step spills there at U = 2 */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
constexpr bool kFp8Slow = true;
#else
constexpr bool kFp8Slow = false;
#endif
constexpr int kRingWarp = KVRT_GK_DECODE_RING / kWarps;	/* one warp's ring, bytes */

template <int HD>
struct alignas(16) DecodeSmem {
	/* each warp's K/V stages; at the item's end its unnormalised o, [h][d] */
	unsigned char ring[kWarps][kRingWarp];
	/* q[h][d] as float; d = 8 * lane + j is stored at [j / 4][lane][j % 4],
	 * so a lane's 8 dims are two conflict-free float4 reads */
	float q[kMaxG * HD];
	/* per warp and step: p of each (token group, u, h), then alpha[h] */
	float p[kWarps][32 + kMaxG];
	float ml[kWarps][kMaxG][2];	/* each warp's (m, l) per head */
};

/* The host sizes the launch by the same formula (kvrt_gpu_abi.h). */
static_assert(sizeof(DecodeSmem<64>) == KVRT_GK_DECODE_SMEM(64), "decode: smem size");
static_assert(sizeof(DecodeSmem<128>) == KVRT_GK_DECODE_SMEM(128), "decode: smem size");
static_assert(sizeof(DecodeSmem<256>) == KVRT_GK_DECODE_SMEM(256), "decode: smem size");

/* K floats from shared memory at p, which is aligned to min(K, 4) floats. */
template <int K>
KVRT_DEV void ld_shared_vec(const float *p, float (&v)[K])
{
	if constexpr (K % 4 == 0) {
#pragma unroll
		for (int i = 0; i < K; i += 4) {
			const float4 x = *reinterpret_cast<const float4 *>(p + i);

			v[i] = x.x, v[i + 1] = x.y, v[i + 2] = x.z, v[i + 3] = x.w;
		}
	} else if constexpr (K == 2) {
		const float2 x = *reinterpret_cast<const float2 *>(p);

		v[0] = x.x, v[1] = x.y;
	} else {
		v[0] = p[0];
	}
}

template <int HD>
KVRT_DEV int q_index(int h, int d)
{
	return h * HD + ((d >> 2) & 1) * (HD / 2) + (d >> 3) * 4 + (d & 3);
}

/* W words from shared memory at p (16- or 8-byte aligned). */
template <int W>
KVRT_DEV void ld_shared_words(uint32_t (&r)[W], const unsigned char *p)
{
	if constexpr (W == 4) {
		const uint4 x = *reinterpret_cast<const uint4 *>(p);

		r[0] = x.x, r[1] = x.y, r[2] = x.z, r[3] = x.w;
	} else {
		const uint2 x = *reinterpret_cast<const uint2 *>(p);

		r[0] = x.x, r[1] = x.y;
	}
}

/* What every item of a launch shares, taken out of the argument struct. */
using Ctx = AttnCtx;

template <int HD, int KV, int G>
KVRT_DEV void decode_item(const Ctx &c, const kvrt_gk_work &w, DecodeSmem<HD> &sm)
{
	using T = KvType<KV>;
	constexpr int W = T::kWords;
	constexpr int LPT = HD / 8;		/* lanes per head row */
	constexpr int TPW = 32 / LPT;		/* token groups per warp */
	/* loads per lane per step, at most; see kFp8Slow */
	constexpr int UMAX = G <= 2 ? 4 : G == 8 && T::kFp8 && kFp8Slow ? 1 : 2;
	constexpr int U = cmin(UMAX, LPT / G);	/* K (and V) loads per lane per step */
	constexpr int N = U * G;		/* logits per token group per step */
	constexpr int CHUNK = U * TPW;		/* tokens per warp step */
	constexpr int STEP = CHUNK * kWarps;
	constexpr int LB = ilog2(LPT), NB = ilog2(N);
	constexpr int RB = LB - NB;		/* lanes holding copies of one logit: 2^RB */
	constexpr int UOFF = LPT / U;		/* lowest lane bit that selects u */
	constexpr bool QREG = G <= 2;		/* q in registers, else read from shared */

	/* N >= 4 keeps alpha[] (after TPW * N floats) float4-aligned */
	static_assert(N <= LPT && (N & (N - 1)) == 0 && N >= 4, "decode: bad N");

	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int grp = lane / LPT, lig = lane % LPT;
	/* the logit this lane ends up with: token u of its group, head h */
	const int my_i = lig >> RB, my_u = my_i / G, my_h = my_i % G;
	const bool rep0 = (lig & ((1 << RB) - 1)) == 0;
	const int nh = w.num_q_heads;

	const int q_pos = c.seq_lens[w.seq] - 1;
	int lo = imax(w.tok_begin, 0);
	if (c.window_left >= 0)
		lo = imax(lo, q_pos - c.window_left);
	const int hi = imin(w.tok_end, q_pos + 1);

	/* q: [seq][num_q_heads][HD]; the item's heads are consecutive */
	const int64_t qrow = ((int64_t)w.seq * c.num_q_heads + w.q_head0) * HD;
	for (int e = tid; e < G * HD; e += KVRT_GK_DECODE_THREADS) {
		const int h = e / HD, d = e % HD;

		sm.q[q_index<HD>(h, d)] = h < nh ? load_f32(c.q, qrow + e, c.q_dtype) : 0.0f;
	}
	__syncthreads();

	/* this lane's 8 dims of q row h */
	auto q8 = [&](int h, float (&qh)[8]) {
		const float4 a = *reinterpret_cast<const float4 *>(&sm.q[h * HD + lig * 4]);
		const float4 b = *reinterpret_cast<const float4 *>(&sm.q[h * HD + HD / 2 + lig * 4]);

		qh[0] = a.x, qh[1] = a.y, qh[2] = a.z, qh[3] = a.w;
		qh[4] = b.x, qh[5] = b.y, qh[6] = b.z, qh[7] = b.w;
	};
	float qr[QREG ? G : 1][8];
	if constexpr (QREG) {
#pragma unroll
		for (int h = 0; h < G; h++)
			q8(h, qr[h]);
	}

	float o[G][8];
#pragma unroll
	for (int h = 0; h < G; h++)
#pragma unroll
		for (int j = 0; j < 8; j++)
			o[h][j] = 0.0f;
	float m = -INFINITY, l = 0.0f;	/* for head my_h, over this lane's tokens */

	const int64_t idx0 = c.indptr[w.seq];
	const int64_t hoff = (int64_t)w.kv_head * c.head_stride + lig * T::kChunk;
	const char *kb = c.k + hoff;
	const char *vb = c.v + hoff;
	float *pb = sm.p[warp];

	/* block ids of this lane's U tokens of the step starting at ts */
	int blk[U];
	auto fetch_ids = [&](int ts) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int t = ts + u * TPW + grp;

			blk[u] = t < hi ? ldg(c.indices + idx0 + fdiv(c.bdiv, (uint32_t)t)) : 0;
		}
	};
	/*
	 * A warp's stage: K chunks [u][lane], V chunks [u][lane] (CB bytes
	 * each), fp8: the K and V scales of each lane's logit token [2][lane].
	 */
	constexpr int CB = T::kChunk;
	constexpr int SB = 2 * U * 32 * CB + (T::kFp8 ? 2 * 32 * 4 : 0);
	constexpr int S = cmin(8, kRingWarp / SB);
	static_assert(S >= 2 && SB % 16 == 0, "decode: ring too small");
	static_assert(G * HD * 4 <= kRingWarp, "decode: o does not fit the warp's ring");
	unsigned char *const ring = sm.ring[warp];
	auto kslot = [&](int st, int u) { return ring + st * SB + (u * 32 + lane) * CB; };
	auto vslot = [&](int st, int u) { return ring + st * SB + ((U + u) * 32 + lane) * CB; };
	auto sslot = [&](int st) { return reinterpret_cast<float *>(ring + st * SB + 2 * U * 32 * CB) + lane; };

	/* copy the step starting at ts into stage st (blk holds its ids), one group */
	auto issue = [&](int ts, int st) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int t = ts + u * TPW + grp;

			if (t < hi) {
				const int slot = t - (int)fdiv(c.bdiv, (uint32_t)t) * c.bt;
				const int64_t off = (int64_t)blk[u] * c.block_stride + (int64_t)slot * c.token_stride;

				copy_chunk_async<CB>(kslot(st, u), kb + off, c.al);
				copy_chunk_async<CB>(vslot(st, u), vb + off, c.al);
			}
		}
		if constexpr (T::kFp8) {
			int bm = blk[0];

#pragma unroll
			for (int u = 1; u < U; u++)
				if (my_u == u)
					bm = blk[u];
			if (ts + my_u * TPW + grp < hi) {
				const int64_t so = (int64_t)bm * c.scale_block_stride + w.kv_head;

				cp_async_4(sslot(st), c.ks + so);
				cp_async_4(sslot(st) + 32, c.vs + so);
			}
		}
		cp_async_commit();
	};
	/* chunk u of stage st (zeros past the range: padding keys' V meets p = 0) */
	auto chunk = [&](const unsigned char *p, int ts, int u, uint32_t (&r)[W]) {
		if (ts + u * TPW + grp < hi) {
			ld_shared_words<W>(r, p);
		} else {
#pragma unroll
			for (int i = 0; i < W; i++)
				r[i] = 0;
		}
	};

	/*
	 * Stage st holds the step at t0; steps t0 + STEP .. t0 + (S - 1) STEP
	 * are in flight in the next stages, and the ids of the one after.
	 */
	int t0 = lo + warp * CHUNK;
	int st = 0;

	fetch_ids(t0);
	for (int i = 0; i < S - 1; i++) {
		issue(t0 + i * STEP, i);
		fetch_ids(t0 + (i + 1) * STEP);
	}
	for (; t0 < hi; t0 += STEP, st = st + 1 == S ? 0 : st + 1) {
		/* the stage refilled is the one this lane read last step */
		issue(t0 + (S - 1) * STEP, st == 0 ? S - 1 : st - 1);
		fetch_ids(t0 + S * STEP);
		cp_async_wait<S - 1>();

		float ksc = 1.0f, vsc = 1.0f;
		if constexpr (T::kFp8) {
			const bool mine = t0 + my_u * TPW + grp < hi;

			/* the unit folds into the scales */
			ksc = mine ? sslot(st)[0] * fp8_unit() : 1.0f;
			vsc = mine ? sslot(st)[32] * fp8_unit() : 0.0f;
		}

		/* partial dots of this lane's 8 dims: acc[u * G + h] */
		float acc[N];
		{
			float kf[U][8];

#pragma unroll
			for (int u = 0; u < U; u++) {
				uint32_t kr[W];

				chunk(kslot(st, u), t0, u, kr);
				chunk_to_f32<KV>(kr, kf[u]);
			}
#pragma unroll
			for (int h = 0; h < G; h++) {
				float qh[8];

				if constexpr (QREG) {
#pragma unroll
					for (int j = 0; j < 8; j++)
						qh[j] = qr[h][j];
				} else {
					q8(h, qh);
				}
#pragma unroll
				for (int u = 0; u < U; u++) {
					float s = 0.0f;

#pragma unroll
					for (int j = 0; j < 8; j++)
						s = fmaf(qh[j], kf[u][j], s);
					acc[u * G + h] = s;
				}
			}
		}

		float s = ReduceScatter<N, LPT / 2>::run(acc, lane);
		s *= c.sm_scale * ksc;
		if (c.softcap > 0.0f)
			s = c.softcap * tanhf(s / c.softcap);
		if (t0 + my_u * TPW + grp >= hi)
			s = -INFINITY;

		/* the step's max per head: over u and token groups */
		const float mnew = fmaxf(m, xor_max<UOFF, 32>(s));
		const float mref = mnew == -INFINITY ? 0.0f : mnew;
		const float alpha = exp2f((m - mref) * kLog2e);
		const float p = exp2f((s - mref) * kLog2e);

		l = l * alpha + p;
		m = mnew;
		if (rep0)
			pb[grp * N + my_i] = p * vsc;
		if (rep0 && grp == 0 && my_u == 0)
			pb[TPW * N + my_h] = alpha;
		__syncwarp();

		{
			float al[G];

			ld_shared_vec<G>(pb + TPW * N, al);
#pragma unroll
			for (int h = 0; h < G; h++)
#pragma unroll
				for (int j = 0; j < 8; j++)
					o[h][j] *= al[h];
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			float vf[8], pp[G];
			uint32_t vr[W];

			chunk(vslot(st, u), t0, u, vr);
			chunk_to_f32<KV>(vr, vf);
			ld_shared_vec<G>(pb + grp * N + u * G, pp);
#pragma unroll
			for (int h = 0; h < G; h++)
#pragma unroll
				for (int j = 0; j < 8; j++)
					o[h][j] = fmaf(pp[h], vf[j], o[h][j]);
		}
		__syncwarp();	/* pb is rewritten next step */
	}
	/* the copies past the range are empty groups; o goes over the ring */
	cp_async_wait_all();
	__syncwarp();

	/* the warp's state: l over its distinct tokens, o over token groups */
	l = xor_sum<UOFF, 32>(l);
#pragma unroll
	for (int h = 0; h < G; h++)
#pragma unroll
		for (int j = 0; j < 8; j++)
			o[h][j] = xor_sum<LPT, 32>(o[h][j]);
	if (rep0 && grp == 0 && my_u == 0) {
		sm.ml[warp][my_h][0] = m;
		sm.ml[warp][my_h][1] = l;
	}
	if (grp == 0) {
#pragma unroll
		for (int h = 0; h < G; h++) {
			float4 *dst = reinterpret_cast<float4 *>(ring) + (h * HD + lig * 8) / 4;

			dst[0] = make_float4(o[h][0], o[h][1], o[h][2], o[h][3]);
			dst[1] = make_float4(o[h][4], o[h][5], o[h][6], o[h][7]);
		}
	}
	__syncthreads();

	/* combine the warps; out: [seq][num_q_heads][HD] */
	const int64_t orow = ((int64_t)w.seq * c.num_q_heads + w.q_head0) * HD;
	const int64_t prow = (int64_t)w.partial * kMaxG;
	for (int e = tid; e < nh * HD; e += KVRT_GK_DECODE_THREADS) {
		const int h = e / HD, d = e % HD;
		float mx = -INFINITY, so = 0.0f, sl = 0.0f;

#pragma unroll
		for (int i = 0; i < kWarps; i++)
			mx = fmaxf(mx, sm.ml[i][h][0]);
#pragma unroll
		for (int i = 0; i < kWarps; i++) {
			const float mi = sm.ml[i][h][0];
			const float f = mi == -INFINITY ? 0.0f : exp2f((mi - mx) * kLog2e);

			so += f * reinterpret_cast<const float *>(sm.ring[i])[e];
			sl += f * sm.ml[i][h][1];
		}
		if (w.partial >= 0) {
			c.po[(prow + h) * HD + d] = so;
			if (d == 0) {
				c.pml[(prow + h) * 2] = mx;
				c.pml[(prow + h) * 2 + 1] = sl;
			}
		} else {
			store_f32(c.out, orow + e, c.o_dtype, sl > 0.0f ? so / sl : 0.0f);
		}
	}
	__syncthreads();	/* sm is reused by the next item */
}

/*
 * After a partial item: count it done; the CTA that counts its merge's
 * last partial runs the merge and puts the count back to 0 for the next
 * launch.  The fences order every thread's partial writes before the count
 * and the last CTA's reads after it (CUDA's threadFenceReduction pattern);
 * flag is shared memory free at this point (the next item writes it only
 * after its first barrier).
 */
KVRT_DEV void finish_split(const Ctx &c, const kvrt_gk_work &w, int hd, float *flag)
{
	const kvrt_gk_merge mg = c.merge[w.merge];

	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) {
		const bool last = atomicAdd(&c.merge_done[w.merge], 1u) + 1 == (uint32_t)mg.num_partials;

		if (last)
			c.merge_done[w.merge] = 0;
		*flag = last ? 1.0f : 0.0f;
	}
	__syncthreads();
	if (*flag != 0.0f) {
		__threadfence();
		merge_item(mg, c.out, c.po, c.pml, c.num_q_heads, hd, c.o_dtype, threadIdx.x,
			   KVRT_GK_DECODE_THREADS);
	}
}

/*
 * WIDE: items of 5..8 query heads (G = 8), whose o accumulators need more
 * than 128 registers; else items of 1..4 heads.  The host picks by the
 * plan's largest head slice; an item the kernel does not take is skipped.
 */
template <int HD, int KV, bool WIDE>
KVRT_DEV void decode_kernel(const kvrt_gk_attn_args &a)
{
	KVRT_DYN_SHARED(DecodeSmem<HD>, sm);
	const Ctx c = make_attn_ctx(a);

	const kvrt_gk_plan_hdr *hdr = reinterpret_cast<const kvrt_gk_plan_hdr *>(a.hdr);
	const kvrt_gk_work *work = reinterpret_cast<const kvrt_gk_work *>(a.work);
	const uint32_t nw = hdr->num_work;

	for (uint32_t wi = blockIdx.x; wi < nw; wi += gridDim.x) {
		const kvrt_gk_work w = work[wi];

		if (w.num_q_heads < 1 || w.num_q_heads > (WIDE ? kMaxG : 4))
			continue;	/* not a plan the host makes */
		if constexpr (WIDE)
			decode_item<HD, KV, 8>(c, w, sm);
		else if (w.num_q_heads == 1)
			decode_item<HD, KV, 1>(c, w, sm);
		else if (w.num_q_heads <= 2)
			decode_item<HD, KV, 2>(c, w, sm);
		else
			decode_item<HD, KV, 4>(c, w, sm);
		if (w.partial >= 0 && c.merge)
			finish_split(c, w, HD, &sm.p[0][0]);
	}
}

} /* namespace dec */
} /* namespace kvgpu */

/* 128 registers (4 CTAs per SM) for groups up to 4; 168 (3) for wider ones */
#define KVRT_DECODE(hd, name, kv)                                                            \
	KVRT_KERNEL(KVRT_GK_DECODE_THREADS, 4) kvrt_decode_hd##hd##_##name(const kvrt_gk_attn_args a) \
	{                                                                                    \
		kvgpu::dec::decode_kernel<hd, kv, false>(a);                                       \
	}                                                                                    \
	KVRT_KERNEL(KVRT_GK_DECODE_THREADS, 3)                                               \
	kvrt_decode_g8_hd##hd##_##name(const kvrt_gk_attn_args a)                            \
	{                                                                                    \
		kvgpu::dec::decode_kernel<hd, kv, true>(a);                                        \
	}

KVRT_GK_ATTN_VARIANTS(KVRT_DECODE)
