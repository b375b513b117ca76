// SPDX-License-Identifier: MIT
/*
 * prefill_tc.cu: chunked paged prefill on tensor cores,
 * kvrt_prefill_tc_hd{64,128,256}_{f16,bf16,fp8}.  Same arguments, work
 * items and masking as prefill.cu (the SIMT kernel, kept as the GPU
 * reference); the host picks one of the two.
 *
 * An item's (row, head) pairs (pair = row * nh + head, up to 128) are cut
 * into passes of PB pairs; each warp owns one 16-pair m tile of a pass and
 * DW of its output dims (hd 256: two warps per tile, each half the dims,
 * both computing the tile's logits).  Per key tile of KT keys:
 *
 *   stage  K[KT][hd] and V^T[hd][KT] as 16-bit in shared memory, read
 *          through the block table; rows past the item's end are zeros
 *          (a NaN there would survive a zero weight in the product);
 *   S      = Q K^T with mma m16n8k16 (Q rounded to the MMA type once per
 *          pass), f32; times sm_scale (and the fp8 K scale), soft-cap,
 *          mask from the positions exactly as prefill.cu;
 *   softmax online per row in registers: a lane holds rows g and g + 8 of
 *          its tile (PTX's accumulator layout), the row's max over the
 *          four lanes of a group by two shuffles;
 *   O      = alpha O + P V with mma: the S accumulators of two key n tiles
 *          are exactly an A fragment, so P goes from registers to the MMA
 *          rounded to the 16-bit type, as every flash kernel does.
 *
 * MMA type: bf16 for bf16 caches, f16 for f16 and fp8.  fp8 K is
 * converted to f16 exactly (every e4m3 value is an f16) and its block
 * scale applied to the logits, in f32; fp8 V is dequantised (byte times
 * scale) and rounded to f16 when staged, since its scale varies along the
 * MMA's k dimension.  The row sum l adds the f32 weights before rounding.
 */
#include "kvrt_mma.cuh"
#include "kvrt_prefill.cuh"

namespace kvgpu {
namespace ptc {

constexpr int kThreads = KVRT_GK_PREFILL_THREADS;

template <int HD>
struct Cfg {
	static constexpr int DS = HD == 256 ? 2 : 1;	/* warps sharing an m tile */
	static constexpr int MT = kThreads / 32 / DS;	/* m tiles per pass */
	static constexpr int PB = 16 * MT;		/* pairs per pass */
	static constexpr int DW = HD / DS;		/* output dims per warp */
	static constexpr int KT = HD == 256 ? 16 : 32;	/* keys per tile */
	static constexpr int NT = KT / 8;		/* key n tiles of S */
	static constexpr int ON = DW / 8;		/* dim n tiles of O per warp */
	/* row strides in halves: +8 puts the 8 rows of a fragment load on distinct banks */
	static constexpr int QSTR = HD + 8;
	static constexpr int VSTR = KT + 8;
	static constexpr int DQ = HD / 8;		/* 8-dim chunks per row */
	static constexpr int NCH = KT * DQ / kThreads;	/* staging chunks per thread */
	static_assert(NCH * kThreads == KT * DQ && KT % 16 == 0 && DQ % 2 == 0,
		      "prefill_tc: tile shapes");
};

template <int HD>
struct alignas(16) TcSmem {
	using C = Cfg<HD>;
	uint16_t q[C::PB * C::QSTR];	/* the pass's q rows, MMA type */
	uint16_t k[C::KT * C::QSTR];	/* K tile */
	uint16_t vt[HD * C::VSTR];	/* V tile, transposed: [dim][key] */
	float ksc[C::KT];		/* fp8: each key's K scale (times the unit) */
};

using Ctx = AttnCtx;

/* Word and 16-byte accesses of the 16-bit tiles (memcpy on the CPU: strict aliasing). */
KVRT_DEV uint32_t ld32(const uint16_t *p)
{
#ifdef KVRT_EMU
	uint32_t r;

	memcpy(&r, p, 4);
	return r;
#else
	return *reinterpret_cast<const uint32_t *>(p);
#endif
}

KVRT_DEV void st32(uint16_t *p, uint32_t v)
{
#ifdef KVRT_EMU
	memcpy(p, &v, 4);
#else
	*reinterpret_cast<uint32_t *>(p) = v;
#endif
}

KVRT_DEV void st128(uint16_t *p, const uint32_t (&v)[4])
{
#ifdef KVRT_EMU
	memcpy(p, v, 16);
#else
	*reinterpret_cast<uint4 *>(p) = make_uint4(v[0], v[1], v[2], v[3]);
#endif
}

template <int HD, int KV>
KVRT_DEV void prefill_tc_item(const Ctx &c, const kvrt_gk_work &w, TcSmem<HD> &sm)
{
	using C = Cfg<HD>;
	using T = KvType<KV>;
	constexpr int W = T::kWords;
	constexpr int MM = KV == KVRT_GK_BF16 ? KVRT_GK_BF16 : KVRT_GK_F16;

	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, tq = lane & 3;		/* PTX's groupID, thread in group */
	const int mt = warp % C::MT, dbase = (warp / C::MT) * C::DW;

	const PrefillItem it = prefill_item_of(c, w);
	const int nh = it.nh, npairs = it.npairs;

	for (int pbase = 0; pbase < npairs; pbase += C::PB) {
		const int pend = imin(npairs, pbase + C::PB);
		int kv_lo, kv_hi;

		pass_keys(c, w, it, pbase, pend, kv_lo, kv_hi);

		for (int e = tid; e < C::PB * HD / 2; e += kThreads) {
			const int pp = e / (HD / 2), d = e % (HD / 2) * 2, pi = pbase + pp;
			float x0 = 0.0f, x1 = 0.0f;

			if (pi < pend) {
				const int64_t r = w.q_row0 + pi / nh, h = pi % nh;
				const int64_t at = (r * c.num_q_heads + w.q_head0 + h) * HD + d;

				x0 = load_f32(c.q, at, c.q_dtype);
				x1 = load_f32(c.q, at + 1, c.q_dtype);
			}
			st32(&sm.q[pp * C::QSTR + d], pack2<MM>(x0, x1));
		}

		/* this lane's rows g and g + 8 of its tile: visible keys [lo, hi] */
		int lo[2], hi[2];
#pragma unroll
		for (int r = 0; r < 2; r++)
			pair_keys(c, w, it, pbase + mt * 16 + g + 8 * r, pend, lo[r], hi[r]);

		float o[C::ON][4];
#pragma unroll
		for (int n = 0; n < C::ON; n++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				o[n][i] = 0.0f;
		float m_run[2] = { -INFINITY, -INFINITY };
		float l_run[2] = { 0.0f, 0.0f };	/* this lane's share of the row sums */

		for (int t0 = kv_lo; t0 < kv_hi; t0 += C::KT) {
			const int kn = imin(C::KT, kv_hi - t0);

			__syncthreads();	/* the last tile is read; q is staged */

			/*
			 * stage: chunk ci is 8 dims of one key; lane pairs read 32
			 * contiguous bytes of a row, consecutive pairs the next keys
			 */
			{
				uint32_t kr[C::NCH][W], vr[C::NCH][W];
				float vsc[C::NCH];

#pragma unroll
				for (int n = 0; n < C::NCH; n++) {
					const int ci = tid + n * kThreads, rest = ci >> 1;
					const int key = rest % C::KT, cp = rest / C::KT * 2 + (ci & 1);
					const int t = t0 + key;

					vsc[n] = 1.0f;
					if (key < kn) {
						int64_t b;
						const int64_t off = key_row(c, it, t, b) + cp * T::kChunk;

						ld_chunk<T::kChunk>(kr[n], c.k + off, c.al);
						ld_chunk<T::kChunk>(vr[n], c.v + off, c.al);
						if constexpr (T::kFp8)
							vsc[n] = ldg(c.vs + b * c.scale_block_stride + w.kv_head) *
								 fp8_unit();
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
							f = ldg(c.ks + b * c.scale_block_stride + w.kv_head) * fp8_unit();
						}
						sm.ksc[key] = f;
					}
				}
#pragma unroll
				for (int n = 0; n < C::NCH; n++) {
					const int ci = tid + n * kThreads, rest = ci >> 1;
					const int key = rest % C::KT, cp = rest / C::KT * 2 + (ci & 1);
					uint32_t kw[4], vw[4];

					if constexpr (T::kFp8) {
						fp8x4_to_f16x4(kr[n][0], kw[0], kw[1]);
						fp8x4_to_f16x4(kr[n][1], kw[2], kw[3]);
						fp8x4_to_f16x4(vr[n][0], vw[0], vw[1]);
						fp8x4_to_f16x4(vr[n][1], vw[2], vw[3]);
#pragma unroll
						for (int i = 0; i < 4; i++) {
							float a, b;

							f16x2_to_f32(vw[i], a, b);
							vw[i] = pack2<KVRT_GK_F16>(a * vsc[n], b * vsc[n]);
						}
					} else {
#pragma unroll
						for (int i = 0; i < 4; i++) {
							kw[i] = kr[n][i];
							vw[i] = vr[n][i];
						}
					}
					st128(&sm.k[key * C::QSTR + cp * 8], kw);
#pragma unroll
					for (int j = 0; j < 8; j++)
						sm.vt[(cp * 8 + j) * C::VSTR + key] =
							(uint16_t)(vw[j / 2] >> (16 * (j % 2)));
				}
			}
			__syncthreads();

			/* ---- S = Q K^T for this warp's 16 pairs, KT keys ---- */
			float s[C::NT][4];
#pragma unroll
			for (int n = 0; n < C::NT; n++)
#pragma unroll
				for (int i = 0; i < 4; i++)
					s[n][i] = 0.0f;
#pragma unroll 4
			for (int ks = 0; ks < HD / 16; ks++) {
				const uint16_t *qa = &sm.q[(mt * 16 + g) * C::QSTR + ks * 16 + tq * 2];
				const uint32_t a[4] = { ld32(qa), ld32(qa + 8 * C::QSTR), ld32(qa + 8),
							ld32(qa + 8 * C::QSTR + 8) };

#pragma unroll
				for (int n = 0; n < C::NT; n++) {
					const uint16_t *kb = &sm.k[(n * 8 + g) * C::QSTR + ks * 16 + tq * 2];
					const uint32_t b[2] = { ld32(kb), ld32(kb + 8) };

					mma16816<MM>(s[n], a, b);
				}
			}

			/* ---- scale, cap, mask; online softmax of rows g, g + 8 ---- */
			float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
			for (int n = 0; n < C::NT; n++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const int key = n * 8 + tq * 2 + (i & 1), t = t0 + key, r = i >> 1;
					float x = s[n][i] * c.sm_scale;

					if constexpr (T::kFp8)
						x *= sm.ksc[key];
					if (c.softcap > 0.0f)
						x = c.softcap * tanhf(x / c.softcap);
					if (key >= kn || t < lo[r] || t > hi[r])
						x = -INFINITY;
					s[n][i] = x;
					mx[r] = fmaxf(mx[r], x);
				}
			float alpha[2], mref[2];
#pragma unroll
			for (int r = 0; r < 2; r++) {
				const float mnew = fmaxf(m_run[r], xor_max<1, 4>(mx[r]));

				mref[r] = mnew == -INFINITY ? 0.0f : mnew;
				alpha[r] = exp2f((m_run[r] - mref[r]) * kLog2e);
				m_run[r] = mnew;
				l_run[r] *= alpha[r];
			}
#pragma unroll
			for (int n = 0; n < C::NT; n++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const float p = exp2f((s[n][i] - mref[i >> 1]) * kLog2e);

					l_run[i >> 1] += p;
					s[n][i] = p;
				}
#pragma unroll
			for (int n = 0; n < C::ON; n++) {
				o[n][0] *= alpha[0];
				o[n][1] *= alpha[0];
				o[n][2] *= alpha[1];
				o[n][3] *= alpha[1];
			}

			/* ---- O += P V: key n tiles 2kk, 2kk + 1 are one A fragment ---- */
#pragma unroll
			for (int kk = 0; kk < C::KT / 16; kk++) {
				const uint32_t a[4] = {
					pack2<MM>(s[2 * kk][0], s[2 * kk][1]),
					pack2<MM>(s[2 * kk][2], s[2 * kk][3]),
					pack2<MM>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
					pack2<MM>(s[2 * kk + 1][2], s[2 * kk + 1][3]),
				};

#pragma unroll
				for (int n = 0; n < C::ON; n++) {
					const uint16_t *vb = &sm.vt[(dbase + n * 8 + g) * C::VSTR + kk * 16 + tq * 2];
					const uint32_t b[2] = { ld32(vb), ld32(vb + 8) };

					mma16816<MM>(o[n], a, b);
				}
			}
		}

#pragma unroll
		for (int r = 0; r < 2; r++) {
			const float l = xor_sum<1, 4>(l_run[r]);
			const int pi = pbase + mt * 16 + g + 8 * r;

			if (pi >= pend)
				continue;
			const int rr = pi / nh, h = pi % nh;
			const int d0 = dbase + tq * 2;

			if (w.partial < 0) {
				const int64_t at =
					((int64_t)(w.q_row0 + rr) * c.num_q_heads + w.q_head0 + h) * HD + d0;

#pragma unroll
				for (int n = 0; n < C::ON; n++)
#pragma unroll
					for (int j = 0; j < 2; j++)
						store_f32(c.out, at + n * 8 + j, c.o_dtype,
							  l > 0.0f ? o[n][2 * r + j] / l : 0.0f);
			} else {
				/* not planned for prefill; one slot per row, as prefill.cu */
				const int64_t slot = (int64_t)(w.partial + rr) * KVRT_GK_MAX_GROUP + h;

#pragma unroll
				for (int n = 0; n < C::ON; n++)
#pragma unroll
					for (int j = 0; j < 2; j++)
						c.po[slot * HD + d0 + n * 8 + j] = o[n][2 * r + j];
				if (d0 == 0) {
					c.pml[slot * 2] = m_run[r];
					c.pml[slot * 2 + 1] = l;
				}
			}
		}
		__syncthreads();	/* q is rewritten next pass or item */
	}
}

template <int HD, int KV>
KVRT_DEV void prefill_tc_kernel(const kvrt_gk_attn_args &a)
{
	KVRT_SHARED(TcSmem<HD>, sm);

	for_each_prefill_item(a, [&](const Ctx &c, const kvrt_gk_work &w) { prefill_tc_item<HD, KV>(c, w, sm); });
}

} /* namespace ptc */
} /* namespace kvgpu */

#define KVRT_PREFILL_TC(hd, name, kv)                                                   \
	KVRT_KERNEL(KVRT_GK_PREFILL_THREADS, 2)                                        \
	kvrt_prefill_tc_hd##hd##_##name(const kvrt_gk_attn_args a)                      \
	{                                                                               \
		kvgpu::ptc::prefill_tc_kernel<hd, kv>(a);                                     \
	}

KVRT_GK_ATTN_VARIANTS(KVRT_PREFILL_TC)
