// SPDX-License-Identifier: MIT
/*
 * decode.cu: paged decode attention, kvrt_decode_hd{64,128,256}_{f16,bf16,fp8}.
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
 * Loads are software-pipelined: a step's K/V loads are issued while the
 * previous step computes, its block ids one step earlier still, so a warp
 * always has U*TPW rows of K and of V in flight (4 KB per warp for hd 128
 * f16/bf16 with G <= 4).  That alone left the H200 at 40% of its DRAM
 * bandwidth, every step waiting a DRAM latency: the rows kPfSteps steps
 * ahead are also asked of L2 (one 128-byte line per lane, no register
 * held), so the loads that wait mostly hit L2.
 *
 * G, the query heads rounded up to a power of two (1, 2, 4, 8), is a
 * template parameter chosen per item; padding heads get q = 0 and are not
 * written.  U = min(4 (G <= 4) or 2 (G = 8), LPT/G).  q stays in registers
 * for G <= 2 and is read from shared memory (two float4 per head and step)
 * for larger G, and the kernels are capped at 168 registers: 3 CTAs (12
 * warps) per SM.
 *
 * Exactness: fp32 throughout; exp2 of (x - m) * log2(e); K is decoded
 * exactly (fp8 through f16, its scale applied to the logit, V's to p).
 */
#include "kvrt_common.cuh"

namespace kvgpu {
namespace dec {

constexpr int kWarps = KVRT_GK_DECODE_THREADS / 32;
constexpr int kMaxG = KVRT_GK_MAX_GROUP;
constexpr int kPfSteps = 3;	/* warp steps between the L2 prefetch and the load */
/* sm_80's code spills with the prefetch's registers (and no A100 has measured it) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kPrefetch = false;
#else
constexpr bool kPrefetch = true;
#endif

template <int HD>
struct alignas(16) DecodeSmem {
	/* q[h][d] as float; d = 8 * lane + j is stored at [j / 4][lane][j % 4],
	 * so a lane's 8 dims are two conflict-free float4 reads */
	float q[kMaxG * HD];
	float o[kWarps][kMaxG * HD];	/* each warp's unnormalised o, [h][d] */
	float ml[kWarps][kMaxG][2];	/* each warp's (m, l) per head */
	/* per warp and step: p of each (token group, u, h), then alpha[h] */
	float p[kWarps][32 + kMaxG];
};

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

/* What every item of a launch shares, taken out of the argument struct. */
using Ctx = AttnCtx;

template <int HD, int KV, int G>
KVRT_DEV void decode_item(const Ctx &c, const kvrt_gk_work &w, DecodeSmem<HD> &sm)
{
	using T = KvType<KV>;
	constexpr int W = T::kWords;
	constexpr int LPT = HD / 8;		/* lanes per head row */
	constexpr int TPW = 32 / LPT;		/* token groups per warp */
	constexpr int UMAX = G <= 4 ? 4 : 2;	/* loads per lane per step, at most */
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
	/* issue the step's K/V loads (blk holds its ids); fp8: its scales */
	auto issue = [&](int ts, uint32_t (&kr)[U][W], uint32_t (&vr)[U][W], float &ksc,
			 float &vsc) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int t = ts + u * TPW + grp;

			if (t < hi) {
				const int slot = t - (int)fdiv(c.bdiv, (uint32_t)t) * c.bt;
				const int64_t off = (int64_t)blk[u] * c.block_stride + (int64_t)slot * c.token_stride;

				ld_chunk<T::kChunk>(kr[u], kb + off, c.al);
				ld_chunk<T::kChunk>(vr[u], vb + off, c.al);
			} else {
#pragma unroll
				for (int i = 0; i < W; i++)
					kr[u][i] = vr[u][i] = 0;
			}
		}
		ksc = vsc = 1.0f;
		if constexpr (T::kFp8) {
			/* the scales of this lane's logit's token; the unit folds in */
			int bm = blk[0];

#pragma unroll
			for (int u = 1; u < U; u++)
				if (my_u == u)
					bm = blk[u];
			if (ts + my_u * TPW + grp < hi) {
				const int64_t so = (int64_t)bm * c.scale_block_stride + w.kv_head;

				ksc = ldg(c.ks + so) * fp8_unit();
				vsc = ldg(c.vs + so) * fp8_unit();
			} else {
				vsc = 0.0f;
			}
		}
	};

	/*
	 * The L2 prefetch of a step: lane l < PL takes line l % RL of the K
	 * (or V) row of token l / (2 RL).  Its block id is loaded one step
	 * before, so the prefetch waits for nothing.
	 */
	constexpr int RL = (LPT * T::kChunk + 127) / 128;	/* 128-byte lines per row */
	constexpr int PL = CHUNK * 2 * RL;			/* lines per warp step */
	static_assert(PL <= 32, "decode: a step's lines exceed the warp's lanes");
	/* recomputed at each use: registers are at the kernel's cap */
	int pf_blk = 0;
	auto pf_id = [&](int ts) {
		const int t = ts + lane / (2 * RL);

		pf_blk = lane < PL && t < hi ? ldg(c.indices + idx0 + fdiv(c.bdiv, (uint32_t)t)) : -1;
	};
	auto pf_issue = [&](int ts) {
		const int t = ts + lane / (2 * RL);

		if (pf_blk >= 0 && t < hi) {
			const int slot = t - (int)fdiv(c.bdiv, (uint32_t)t) * c.bt;
			const char *row = ((lane / RL) & 1 ? c.v : c.k) + (int64_t)w.kv_head * c.head_stride;

			prefetch_l2(row + (int64_t)pf_blk * c.block_stride + (int64_t)slot * c.token_stride +
				    (lane % RL) * 128);
		}
	};

	/*
	 * Software pipeline: a step's K/V loads are issued one step ahead (so
	 * a warp always has a step's worth in flight) and its block ids two;
	 * its L2 prefetch kPfSteps ahead and the prefetch's block ids one more.
	 */
	int t0 = lo + warp * CHUNK;
	uint32_t kr[U][W], vr[U][W];
	float ksc, vsc;

	if constexpr (kPrefetch) {
		for (int s = 2; s <= kPfSteps; s++) {
			pf_id(t0 + s * STEP);
			pf_issue(t0 + s * STEP);
		}
		pf_id(t0 + (kPfSteps + 1) * STEP);
	}
	fetch_ids(t0);
	issue(t0, kr, vr, ksc, vsc);
	fetch_ids(t0 + STEP);
	for (; t0 < hi; t0 += STEP) {
		uint32_t nkr[U][W], nvr[U][W];
		float nksc, nvsc;

		issue(t0 + STEP, nkr, nvr, nksc, nvsc);
		fetch_ids(t0 + 2 * STEP);
		if constexpr (kPrefetch) {
			pf_issue(t0 + (kPfSteps + 1) * STEP);
			pf_id(t0 + (kPfSteps + 2) * STEP);
		}

		/* partial dots of this lane's 8 dims: acc[u * G + h] */
		float acc[N];
		{
			float kf[U][8];

#pragma unroll
			for (int u = 0; u < U; u++)
				chunk_to_f32<KV>(kr[u], kf[u]);
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

			chunk_to_f32<KV>(vr[u], vf);
			ld_shared_vec<G>(pb + grp * N + u * G, pp);
#pragma unroll
			for (int h = 0; h < G; h++)
#pragma unroll
				for (int j = 0; j < 8; j++)
					o[h][j] = fmaf(pp[h], vf[j], o[h][j]);
		}
		__syncwarp();	/* pb is rewritten next step */

#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int i = 0; i < W; i++)
				kr[u][i] = nkr[u][i], vr[u][i] = nvr[u][i];
		ksc = nksc;
		vsc = nvsc;
	}

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
			float4 *dst = reinterpret_cast<float4 *>(&sm.o[warp][h * HD + lig * 8]);

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

			so += f * sm.o[i][e];
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

template <int HD, int KV>
KVRT_DEV void decode_kernel(const kvrt_gk_attn_args &a)
{
	KVRT_SHARED(DecodeSmem<HD>, sm);
	const Ctx c = make_attn_ctx(a);

	const kvrt_gk_plan_hdr *hdr = reinterpret_cast<const kvrt_gk_plan_hdr *>(a.hdr);
	const kvrt_gk_work *work = reinterpret_cast<const kvrt_gk_work *>(a.work);
	const uint32_t nw = hdr->num_work;

	for (uint32_t wi = blockIdx.x; wi < nw; wi += gridDim.x) {
		const kvrt_gk_work w = work[wi];

		if (w.num_q_heads < 1 || w.num_q_heads > kMaxG)
			continue;	/* not a plan the host makes */
		if (w.num_q_heads == 1)
			decode_item<HD, KV, 1>(c, w, sm);
		else if (w.num_q_heads <= 2)
			decode_item<HD, KV, 2>(c, w, sm);
		else if (w.num_q_heads <= 4)
			decode_item<HD, KV, 4>(c, w, sm);
		else
			decode_item<HD, KV, 8>(c, w, sm);
	}
}

} /* namespace dec */
} /* namespace kvgpu */

#define KVRT_DECODE(hd, name, kv)                                                        \
	KVRT_KERNEL(KVRT_GK_DECODE_THREADS, 3) kvrt_decode_hd##hd##_##name(const kvrt_gk_attn_args a) \
	{                                                                                \
		kvgpu::dec::decode_kernel<hd, kv>(a);                                          \
	}

KVRT_GK_ATTN_VARIANTS(KVRT_DECODE)
