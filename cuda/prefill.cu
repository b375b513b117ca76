// SPDX-License-Identifier: MIT
/*
 * prefill.cu: chunked paged prefill, kvrt_prefill_hd{64,128,256}_{f16,bf16,fp8}.
 *
 * A work item is up to 16 query rows of one sequence times up to 8 query
 * heads of one KV head's group: M <= 128 (row, head) pairs, all attending
 * to the same KV head, each with its own causal and window limits.  The
 * CTA walks the item's keys in tiles of KT, stages each K/V tile in shared
 * memory once (K converted to float with the fp8 scale applied, V kept as
 * 16-bit), and uses it for every pair.  Arithmetic is fp32 on the SIMT
 * cores (q and K as float, probabilities as float): the results agree with
 * the CPU reference to float rounding, like decode's: this kernel is the
 * GPU reference for prefill_tc.cu, which rounds q and the probabilities
 * to 16 bits for the tensor cores.
 *
 * The pairs' output accumulators live in registers, 4 pairs x 8 dims per
 * thread, which caps a pass at PB = 4096 / head_dim pairs (64, 32, 16);
 * larger items take several passes over the keys (each tile of a pass is
 * still read once for all of the pass's pairs).
 *
 * Per tile, with barriers between the phases:
 *   stage  K[KT][hd] (float, padded rows) and V[KT][hd] (16-bit);
 *   A      S = q K^T: thread (8 key lanes x 16 pair lanes) computes TM x TN
 *          logits from float4 reads (conflict-free: the K row pad puts 8
 *          consecutive keys on different banks, the q reads broadcast);
 *          soft-cap, mask (causal, window, tile end) -> S;
 *   B      online softmax per pair over the tile (TPP threads per pair):
 *          running max and sum, rescale factor alpha, S -> probabilities;
 *   C      O = alpha O + P V: thread owns 4 pairs x 8 dims.
 */
#include "kvrt_prefill.cuh"

namespace kvgpu {
namespace pre {

constexpr int kThreads = KVRT_GK_PREFILL_THREADS;

template <int HD>
struct Cfg {
	static constexpr int PB = 4096 / HD;		/* pairs per pass */
	static constexpr int KT = HD == 256 ? 16 : 32;	/* keys per tile */
	static constexpr int KSTR = HD + 4;		/* K row stride, floats */
	static constexpr int SSTR = KT + 1;		/* S row stride, floats */
	static constexpr int TM = PB / 16, TN = KT / 8;	/* phase A tile per thread */
	static constexpr int TPP = kThreads / PB;	/* phase B threads per pair */
	static constexpr int KPT = KT / TPP;		/* phase B keys per thread */
	static constexpr int DQ = HD / 8;		/* phase C: 8-dim chunks per row */
	static constexpr int PQ = kThreads / DQ;	/* phase C: pair lanes */
	static constexpr int TMO = PB / PQ;		/* phase C pairs per thread */
	static constexpr int NCH = KT * DQ / kThreads;	/* staging chunks per thread */
	static_assert(TM * 16 == PB && TN * 8 == KT && TMO == 4 && NCH * kThreads == KT * DQ,
		      "prefill: tile shapes");
};

template <int HD>
struct alignas(16) PrefillSmem {
	using C = Cfg<HD>;
	float q[C::PB * HD];		/* the pass's q rows, times sm_scale */
	float k[C::KT * C::KSTR];	/* K tile, dequantised */
	uint32_t v[C::KT * HD / 2];	/* V tile: bf16, or f16 (f16 and fp8 caches) */
	float s[C::PB * C::SSTR];	/* logits, then probabilities (times fp8 V scale) */
	float alpha[C::PB];		/* per pair: this tile's rescale of O */
	float lsum[C::PB], mmax[C::PB];	/* per pair at the end of a pass */
	int lo[C::PB], hi[C::PB];	/* per pair: visible keys [lo, hi] */
	float vsc[C::KT];		/* fp8: V scale of each key (times the unit) */
};

using Ctx = AttnCtx;

template <int HD, int KV>
KVRT_DEV void prefill_item(const Ctx &c, const kvrt_gk_work &w, PrefillSmem<HD> &sm)
{
	using C = Cfg<HD>;
	using T = KvType<KV>;
	constexpr int W = T::kWords;
	/* the V tile's 16-bit type */
	constexpr int VS = KV == KVRT_GK_BF16 ? KVRT_GK_BF16 : KVRT_GK_F16;

	const int tid = threadIdx.x;
	const int kq = tid & 7, pq = tid >> 3;			/* phase A */
	const int pb = tid / C::TPP, part = tid % C::TPP;	/* phase B */
	const int dq = tid % C::DQ, pc = tid / C::DQ;		/* phase C */

	const PrefillItem it = prefill_item_of(c, w);
	const int nh = it.nh, npairs = it.npairs;

	for (int pbase = 0; pbase < npairs; pbase += C::PB) {
		const int pend = imin(npairs, pbase + C::PB);
		int kv_lo, kv_hi;

		pass_keys(c, w, it, pbase, pend, kv_lo, kv_hi);

		/* q rows of the pass's pairs (pair = row * nh + head), and their keys */
		for (int e = tid; e < C::PB * HD; e += kThreads) {
			const int pi = pbase + e / HD, d = e % HD;
			float x = 0.0f;

			if (pi < pend) {
				const int64_t r = w.q_row0 + pi / nh, h = pi % nh;

				x = load_f32(c.q, (r * c.num_q_heads + w.q_head0 + h) * HD + d, c.q_dtype) *
				    c.sm_scale;
			}
			sm.q[e] = x;
		}
		for (int pp = tid; pp < C::PB; pp += kThreads)
			pair_keys(c, w, it, pbase + pp, pend, sm.lo[pp], sm.hi[pp]);

		float o[C::TMO][8];
#pragma unroll
		for (int i = 0; i < C::TMO; i++)
#pragma unroll
			for (int j = 0; j < 8; j++)
				o[i][j] = 0.0f;
		float m_run = -INFINITY, l_run = 0.0f;	/* of pair pb (phase B's) */

		for (int t0 = kv_lo; t0 < kv_hi; t0 += C::KT) {
			const int kn = imin(C::KT, kv_hi - t0);

			__syncthreads();	/* the last tile's phase C is done; q is staged */

			/* ---- stage: chunk ci is key ci / DQ, dims (ci % DQ) * 8 ---- */
			{
				uint32_t kr[C::NCH][W], vr[C::NCH][W];
				float ksc[C::NCH];

#pragma unroll
				for (int n = 0; n < C::NCH; n++) {
					const int ci = tid + n * kThreads, key = ci / C::DQ, cp = ci % C::DQ;
					const int t = t0 + key;

					ksc[n] = 1.0f;
					if (key < kn) {
						int64_t b;
						const int64_t off = key_row(c, it, t, b) + cp * T::kChunk;

						ld_chunk<T::kChunk>(kr[n], c.k + off, c.al);
						ld_chunk<T::kChunk>(vr[n], c.v + off, c.al);
						if constexpr (T::kFp8)
							ksc[n] = ldg(c.ks + b * c.scale_block_stride + w.kv_head) * fp8_unit();
					} else {
#pragma unroll
						for (int i = 0; i < W; i++)
							kr[n][i] = vr[n][i] = 0;
					}
				}
				if constexpr (T::kFp8) {
					for (int key = tid; key < C::KT; key += kThreads) {
						float f = 0.0f;

						if (key < kn) {
							int64_t b;

							key_row(c, it, t0 + key, b);
							f = ldg(c.vs + b * c.scale_block_stride + w.kv_head) * fp8_unit();
						}
						sm.vsc[key] = f;
					}
				}
#pragma unroll
				for (int n = 0; n < C::NCH; n++) {
					const int ci = tid + n * kThreads, key = ci / C::DQ, cp = ci % C::DQ;
					float kf[8];

					chunk_to_f32<KV>(kr[n], kf);
					float4 *kd = reinterpret_cast<float4 *>(&sm.k[key * C::KSTR + cp * 8]);

					kd[0] = make_float4(kf[0] * ksc[n], kf[1] * ksc[n], kf[2] * ksc[n],
							    kf[3] * ksc[n]);
					kd[1] = make_float4(kf[4] * ksc[n], kf[5] * ksc[n], kf[6] * ksc[n],
							    kf[7] * ksc[n]);

					uint4 vw;
					if constexpr (T::kFp8) {
						fp8x4_to_f16x4(vr[n][0], vw.x, vw.y);
						fp8x4_to_f16x4(vr[n][1], vw.z, vw.w);
					} else {
						vw = make_uint4(vr[n][0], vr[n][1], vr[n][2], vr[n][3]);
					}
					*reinterpret_cast<uint4 *>(&sm.v[(key * HD + cp * 8) / 2]) = vw;
				}
			}
			__syncthreads();

			/* ---- A: logits of pairs pq + 16 im, keys kq + 8 jn ---- */
			{
				float acc[C::TM][C::TN];

#pragma unroll
				for (int im = 0; im < C::TM; im++)
#pragma unroll
					for (int jn = 0; jn < C::TN; jn++)
						acc[im][jn] = 0.0f;
#pragma unroll 1
				for (int d = 0; d < HD; d += 4) {
					float4 kk[C::TN];

#pragma unroll
					for (int jn = 0; jn < C::TN; jn++)
						kk[jn] = *reinterpret_cast<const float4 *>(
							&sm.k[(kq + 8 * jn) * C::KSTR + d]);
#pragma unroll
					for (int im = 0; im < C::TM; im++) {
						const float4 qq = *reinterpret_cast<const float4 *>(
							&sm.q[(pq + 16 * im) * HD + d]);

#pragma unroll
						for (int jn = 0; jn < C::TN; jn++) {
							float a = acc[im][jn];

							a = fmaf(qq.x, kk[jn].x, a);
							a = fmaf(qq.y, kk[jn].y, a);
							a = fmaf(qq.z, kk[jn].z, a);
							a = fmaf(qq.w, kk[jn].w, a);
							acc[im][jn] = a;
						}
					}
				}
#pragma unroll
				for (int im = 0; im < C::TM; im++) {
					const int pp = pq + 16 * im;
					const int lo = sm.lo[pp], hi = sm.hi[pp];

#pragma unroll
					for (int jn = 0; jn < C::TN; jn++) {
						const int key = kq + 8 * jn, t = t0 + key;
						float x = acc[im][jn];

						if (c.softcap > 0.0f)
							x = c.softcap * tanhf(x / c.softcap);
						if (key >= kn || t < lo || t > hi)
							x = -INFINITY;
						sm.s[pp * C::SSTR + key] = x;
					}
				}
			}
			__syncthreads();

			/* ---- B: online softmax of pair pb over the tile ---- */
			{
				float mx = -INFINITY;

#pragma unroll
				for (int k = 0; k < C::KPT; k++)
					mx = fmaxf(mx, sm.s[pb * C::SSTR + part + C::TPP * k]);
				mx = xor_max<1, C::TPP>(mx);

				const float mnew = fmaxf(m_run, mx);
				const float mref = mnew == -INFINITY ? 0.0f : mnew;
				const float alpha = exp2f((m_run - mref) * kLog2e);
				float ps = 0.0f;

#pragma unroll
				for (int k = 0; k < C::KPT; k++) {
					const int key = part + C::TPP * k;
					float *sp = &sm.s[pb * C::SSTR + key];
					const float p = exp2f((*sp - mref) * kLog2e);

					ps += p;
					*sp = T::kFp8 ? p * sm.vsc[key] : p;
				}
				ps = xor_sum<1, C::TPP>(ps);
				l_run = l_run * alpha + ps;
				m_run = mnew;
				if (part == 0)
					sm.alpha[pb] = alpha;
			}
			__syncthreads();

			/* ---- C: O = alpha O + P V, pairs pc + PQ i, dims dq * 8 .. +8 ---- */
			{
#pragma unroll
				for (int i = 0; i < C::TMO; i++) {
					const float a = sm.alpha[pc + C::PQ * i];

#pragma unroll
					for (int j = 0; j < 8; j++)
						o[i][j] *= a;
				}
#pragma unroll 2
				for (int key = 0; key < kn; key++) {
					const uint4 raw = *reinterpret_cast<const uint4 *>(
						&sm.v[(key * HD + dq * 8) / 2]);
					const uint32_t rw[4] = { raw.x, raw.y, raw.z, raw.w };
					float vf[8];

					chunk_to_f32<VS>(rw, vf);
#pragma unroll
					for (int i = 0; i < C::TMO; i++) {
						const float p = sm.s[(pc + C::PQ * i) * C::SSTR + key];

#pragma unroll
						for (int j = 0; j < 8; j++)
							o[i][j] = fmaf(p, vf[j], o[i][j]);
					}
				}
			}
		}

		if (part == 0) {
			sm.lsum[pb] = l_run;
			sm.mmax[pb] = m_run;
		}
		__syncthreads();

#pragma unroll
		for (int i = 0; i < C::TMO; i++) {
			const int pp = pc + C::PQ * i, pi = pbase + pp;

			if (pi >= pend)
				continue;
			const int rr = pi / nh, h = pi % nh;
			const float l = sm.lsum[pp];

			if (w.partial < 0) {
				/* out: [rows][num_q_heads][HD] */
				const int64_t at =
					((int64_t)(w.q_row0 + rr) * c.num_q_heads + w.q_head0 + h) * HD + dq * 8;

#pragma unroll
				for (int j = 0; j < 8; j++)
					store_f32(c.out, at + j, c.o_dtype, l > 0.0f ? o[i][j] / l : 0.0f);
			} else {
				/* not planned for prefill; one slot per row, as decode's */
				const int64_t slot = (int64_t)(w.partial + rr) * KVRT_GK_MAX_GROUP + h;

#pragma unroll
				for (int j = 0; j < 8; j++)
					c.po[slot * HD + dq * 8 + j] = o[i][j];
				if (dq == 0) {
					c.pml[slot * 2] = sm.mmax[pp];
					c.pml[slot * 2 + 1] = l;
				}
			}
		}
		__syncthreads();	/* lsum, q, lo/hi are rewritten next pass or item */
	}
}

template <int HD, int KV>
KVRT_DEV void prefill_kernel(const kvrt_gk_attn_args &a)
{
	KVRT_SHARED(PrefillSmem<HD>, sm);

	for_each_prefill_item(a, [&](const Ctx &c, const kvrt_gk_work &w) { prefill_item<HD, KV>(c, w, sm); });
}

} /* namespace pre */
} /* namespace kvgpu */

#define KVRT_PREFILL(hd, name, kv)                                                      \
	KVRT_KERNEL(KVRT_GK_PREFILL_THREADS, 4)                                        \
	kvrt_prefill_hd##hd##_##name(const kvrt_gk_attn_args a)                         \
	{                                                                               \
		kvgpu::pre::prefill_kernel<hd, kv>(a);                                        \
	}

KVRT_GK_ATTN_VARIANTS(KVRT_PREFILL)
