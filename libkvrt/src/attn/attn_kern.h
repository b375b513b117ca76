/* SPDX-License-Identifier: MIT */
/*
 * attn_kern.h: the fast paged-attention kernel, written once with GCC
 * vector extensions and compiled per ISA by the attn_simd_*.c files, which
 * define before including it:
 *
 *   KERN_NAME   the function to define (an attn_kern_fn)
 *   VL          floats per vector: 16 (AVX-512), 8 (AVX2), 4 (generic)
 *   RT          the logit register tile: RT query rows x 4 keys
 *   CT          the P.V register tile: RT rows x CT vectors of head dims
 *   KERN_CVT_F16(const void *src) -> vf   (optional) hardware f16 -> f32
 *   KERN_CVT_BF16(const void *src) -> vf  (optional) one-instruction widening
 *   KERN_STORE_F16(void *dst, vf v)       (optional) hardware f32 -> f16, RNE
 *   KERN_DPBF16  (VL 16, AVX512-BF16) bf16 q . bf16 K logits by vdpbf16ps
 *
 * One call computes one work item (attn_item): for each of its KV heads,
 * the rows of that head's group (G query heads, times the item's query
 * tokens) against the keys those rows may see, in tiles of ws->tile
 * consecutive positions.  Per tile, for each head:
 *
 *   1. logits s = q . k for the head's rows x positions, RT x 4 at a time
 *      (q was scaled by sm_scale when loaded), K converted in registers
 *      straight from the cache (direct mode) or from the tile staged once
 *      in f32 (staged mode), then fp8 scale, soft-cap and the causal /
 *      window mask.  Each K/V element is read from the cache once per
 *      item, however many rows the group has.
 *   2. online softmax: m' = max(m, max s), acc *= exp(m - m'),
 *      l = l * exp(m - m') + sum exp(s - m'), p = exp(s - m').
 *   3. acc += p . V, RT rows x CT vectors at a time; bf16 V is widened
 *      as even and odd elements (one operation per vector), which leaves
 *      acc permuted until the end.
 *
 * Decode (one query row per head) keeps the logits key-major and runs
 * step 2 on VL rows at once (dec_softmax).  Meanwhile the K/V of the tile
 * ATTN_PF_TILES ahead, every head of the item, are prefetched at a steady
 * rate.  At the end out = acc / l, rounded to the output dtype.  An item covering all KV heads reads whole token
 * rows (all heads) per tile: long sequential runs the memory system
 * streams much faster than one head's slice of each row.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kv/dtype.h"
#include "attn_internal.h"

typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));
typedef uint32_t vu __attribute__((vector_size(VL * 4)));
typedef uint16_t vh __attribute__((vector_size(VL * 2)));
typedef uint8_t vb __attribute__((vector_size(VL)));

#define KERN_STR2(x) #x
#define KERN_STR(x) KERN_STR2(x)

static inline vf vset1(float x)	/* a broadcast; 0 + x would cost an add */
{
	vf v = { x };

	return __builtin_shuffle(v, (vi){});
}

/* Aligned vector load/store from workspace arrays (64-byte aligned rows). */
static inline vf vld(const float *p)
{
	return *(const vf *)p;
}

static inline void vst(float *p, vf v)
{
	*(vf *)p = v;
}

static inline vf vsel(vi mask, vf a, vf b)	/* mask ? a : b */
{
	return (vf)((mask & (vi)a) | (~mask & (vi)b));
}

static inline vf vmax(vf a, vf b)
{
	return vsel(a > b, a, b);
}

/* Horizontal sum and max: fold the vector in halves with shuffles. */
#if VL == 16
#define FOLD8 ((vi){ 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7 })
#define FOLD4 ((vi){ 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11 })
#define FOLD2 ((vi){ 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13 })
#define FOLD1 ((vi){ 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14 })
#elif VL == 8
#define FOLD4 ((vi){ 4, 5, 6, 7, 0, 1, 2, 3 })
#define FOLD2 ((vi){ 2, 3, 0, 1, 6, 7, 4, 5 })
#define FOLD1 ((vi){ 1, 0, 3, 2, 5, 4, 7, 6 })
#else
#define FOLD2 ((vi){ 2, 3, 0, 1 })
#define FOLD1 ((vi){ 1, 0, 3, 2 })
#endif

static inline float hsum(vf v)
{
#if VL == 16
	v += __builtin_shuffle(v, FOLD8);
#endif
#if VL >= 8
	v += __builtin_shuffle(v, FOLD4);
#endif
	v += __builtin_shuffle(v, FOLD2);
	v += __builtin_shuffle(v, FOLD1);
	return v[0];
}

static inline float hmax(vf v)
{
#if VL == 16
	v = vmax(v, __builtin_shuffle(v, FOLD8));
#endif
#if VL >= 8
	v = vmax(v, __builtin_shuffle(v, FOLD4));
#endif
	v = vmax(v, __builtin_shuffle(v, FOLD2));
	v = vmax(v, __builtin_shuffle(v, FOLD1));
	return v[0];
}

/*
 * Sums of four vectors, in four floats: a transpose-and-add tree inside
 * each group of 4 lanes, then the groups added together.
 */
static inline void hsum4(vf a, vf b, vf c, vf d, float *out)
{
#if VL == 16
	const vi lo = { 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29 };
	const vi hi = { 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31 };
	const vi l2 = { 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29 };
	const vi h2 = { 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31 };
	const vi up = { 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15 };
	const vi up2 = { 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7 };
#elif VL == 8
	const vi lo = { 0, 8, 1, 9, 4, 12, 5, 13 };
	const vi hi = { 2, 10, 3, 11, 6, 14, 7, 15 };
	const vi l2 = { 0, 1, 8, 9, 4, 5, 12, 13 };
	const vi h2 = { 2, 3, 10, 11, 6, 7, 14, 15 };
	const vi up2 = { 4, 5, 6, 7, 4, 5, 6, 7 };
#else
	const vi lo = { 0, 4, 1, 5 };
	const vi hi = { 2, 6, 3, 7 };
	const vi l2 = { 0, 1, 4, 5 };
	const vi h2 = { 2, 3, 6, 7 };
#endif
	vf ab = __builtin_shuffle(a, b, lo) + __builtin_shuffle(a, b, hi);
	vf cd = __builtin_shuffle(c, d, lo) + __builtin_shuffle(c, d, hi);
	vf x = __builtin_shuffle(ab, cd, l2) + __builtin_shuffle(ab, cd, h2);

#if VL == 16
	x = x + __builtin_shuffle(x, up);
#endif
#if VL >= 8
	x = x + __builtin_shuffle(x, up2);
#endif
	out[0] = x[0];
	out[1] = x[1];
	out[2] = x[2];
	out[3] = x[3];
}

/*
 * e^x for x <= 0 (results below e^-87 are 0): x = n ln2 + r, |r| <= ln2/2,
 * e^r by its Taylor polynomial to degree 7 (relative error ~ 5e-9 before
 * rounding), times 2^n built in the exponent bits.
 */
static inline vf vexp_neg(vf x)
{
	const vf magic = vset1(12582912.0f);	/* 1.5 * 2^23: rounds to integer */
	vi tiny = x < vset1(-87.0f);
	vf t, n, r, p;
	vi ni;

	x = vmax(x, vset1(-87.0f));
	t = x * 1.44269504088896341f + magic;
	n = t - magic;
	ni = (vi)t - (vi)magic;
	r = x - n * 0.693145751953125f;		/* ln2, high bits: n * hi is exact */
	r = r - n * 1.42860682030941723212e-6f;	/* ln2 - hi */
	p = vset1(1.0f / 5040);
	p = p * r + 1.0f / 720;
	p = p * r + 1.0f / 120;
	p = p * r + 1.0f / 24;
	p = p * r + 1.0f / 6;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	p = p * (vf)((ni + 127) << 23);
	return (vf)(~tiny & (vi)p);
}

/*
 * tanh: odd Taylor series to x^17 below |x| = 0.5 (error < 1e-8 relative),
 * (1 - e^-2|x|) / (1 + e^-2|x|) above, sign copied back.
 */
static inline vf vtanh(vf x)
{
	const vi signbit = (vi){} + INT32_MIN;
	vi sign = (vi)x & signbit;
	vf ax = (vf)((vi)x & ~signbit);
	vf x2 = ax * ax, p, e, big;

	p = vset1(6404582.0f / 10854718875.0f);
	p = p * x2 - 929569.0f / 638512875.0f;
	p = p * x2 + 21844.0f / 6081075.0f;
	p = p * x2 - 1382.0f / 155925.0f;
	p = p * x2 + 62.0f / 2835.0f;
	p = p * x2 - 17.0f / 315.0f;
	p = p * x2 + 2.0f / 15.0f;
	p = p * x2 - 1.0f / 3.0f;
	p = ax + ax * x2 * p;
	e = vexp_neg(-2.0f * ax);
	big = (1.0f - e) / (1.0f + e);
	p = vsel(ax < vset1(0.5f), p, big);
	return (vf)((vi)p | sign);
}

/* f16 -> f32 by bits, for VL halves (used when there is no KERN_CVT_F16). */
static inline vf cvt_f16_bits(const void *src)
{
	vh h;
	vu w, em, out;
	vi sub, inf;

	memcpy(&h, src, sizeof(h));
	w = __builtin_convertvector(h, vu);
	em = w & 0x7fff;
	out = (em << 13) + (112u << 23);			/* normal: rebias */
	inf = (vi)(em >= 0x7c00);
	out = (vu)((inf & (vi)(out + (112u << 23))) | (~inf & (vi)out));	/* inf/NaN */
	sub = (vi)(em < 0x400);
	out = (vu)((sub & (vi)(__builtin_convertvector((vi)em, vf) * 0x1p-24f)) |
		   (~sub & (vi)out));
	return (vf)(out | ((w & 0x8000) << 16));
}

static inline vf cvt_bf16(const void *src)
{
#ifdef KERN_CVT_BF16
	return KERN_CVT_BF16(src);
#else
	vh h;

	memcpy(&h, src, sizeof(h));
	return (vf)(__builtin_convertvector(h, vu) << 16);
#endif
}

/* OCP e4m3fn -> f32: normals by rebiasing, subnormals m * 2^-9, 0x7f NaN. */
static inline vf cvt_fp8(const void *src)
{
	vb b;
	vu w, em, out;
	vi sub, nan;

	memcpy(&b, src, sizeof(b));
	w = __builtin_convertvector(b, vu);
	em = w & 0x7f;
	out = (em << 20) + (120u << 23);
	sub = (vi)(em < 8);
	out = (vu)((sub & (vi)(__builtin_convertvector((vi)em, vf) * 0x1p-9f)) |
		   (~sub & (vi)out));
	nan = (vi)(em == 0x7f);
	out = (vu)((nan & 0x7fc00000) | (~nan & (vi)out));
	return (vf)(out | ((w & 0x80) << 24));
}

/* VL elements of dtype dt at src as floats; dt is a constant after inlining. */
static inline __attribute__((always_inline)) vf cvt_dt(enum kvrt_dtype dt, const uint8_t *src)
{
	vf v;

	switch ((int)dt) {
	case KVRT_DTYPE_BF16:
		return cvt_bf16(src);
	case KVRT_DTYPE_F16:
#ifdef KERN_CVT_F16
		return KERN_CVT_F16(src);
#else
		return cvt_f16_bits(src);
#endif
	case KVRT_DTYPE_FP8_E4M3:
		return cvt_fp8(src);
	default:
		memcpy(&v, src, sizeof(v));
		return v;
	}
}

/* dst[0..n) = src[0..n) * scale, from a row of dtype dt; dst is aligned. */
static inline void cvt_row(float *dst, const void *src, uint32_t n, enum kvrt_dtype dt,
			   float scale)
{
	const uint8_t *p = src;
	uint32_t d = 0;
	size_t es = kvrt_dtype_size(dt);

	if (scale == 1.0f) {
		switch ((int)dt) {
		case KVRT_DTYPE_F32:
			for (; d + VL <= n; d += VL)
				vst(dst + d, cvt_dt(KVRT_DTYPE_F32, p + 4 * d));
			break;
		case KVRT_DTYPE_BF16:
			for (; d + VL <= n; d += VL)
				vst(dst + d, cvt_dt(KVRT_DTYPE_BF16, p + 2 * d));
			break;
		case KVRT_DTYPE_F16:
			for (; d + VL <= n; d += VL)
				vst(dst + d, cvt_dt(KVRT_DTYPE_F16, p + 2 * d));
			break;
		case KVRT_DTYPE_FP8_E4M3:
			for (; d + VL <= n; d += VL)
				vst(dst + d, cvt_dt(KVRT_DTYPE_FP8_E4M3, p + d));
			break;
		}
	} else {
		for (; d + VL <= n; d += VL)
			vst(dst + d, cvt_dt(dt, p + es * d) * scale);
	}
	for (; d < n; d++)
		dst[d] = kvrt_load_f32(dt, src, d) * scale;
}

/*
 * dst[0..n) = src[0..n) * scale in the output dtype, rounded to nearest
 * even like kvrt_store_f32 (NaN stays NaN).
 */
static inline void store_row(void *dst, const float *src, uint32_t n, enum kvrt_dtype dt,
			     float scale)
{
	uint8_t *p = dst;
	uint32_t d = 0;

	switch ((int)dt) {
	case KVRT_DTYPE_F32:
		for (; d + VL <= n; d += VL) {
			vf v = vld(src + d) * scale;

			memcpy(p + 4 * d, &v, sizeof(v));
		}
		break;
	case KVRT_DTYPE_BF16:
		for (; d + VL <= n; d += VL) {
			vu x = (vu)(vld(src + d) * scale);
			vi nan = (vi)((x & 0x7fffffff) > 0x7f800000);
			vu r = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
			vh h;

			r = (vu)((nan & (vi)((x >> 16) | 0x40)) | (~nan & (vi)r));
			h = __builtin_convertvector(r, vh);
			memcpy(p + 2 * d, &h, sizeof(h));
		}
		break;
#ifdef KERN_STORE_F16
	case KVRT_DTYPE_F16:
		for (; d + VL <= n; d += VL)
			KERN_STORE_F16(p + 2 * d, vld(src + d) * scale);
		break;
#endif
	}
	for (; d < n; d++)
		kvrt_store_f32(dt, dst, d, src[d] * scale);
}

/*
 * A prefetch stream: the lines of the runs rows[0..n) and then rows2[0..n2)
 * (run bytes each: a token's row of every head of the item, contiguous),
 * in address order, at a steady rate of lines per step.  The kernel steps
 * it between its arithmetic, so prefetches trickle out at about the rate
 * memory delivers them (a burst fills the miss buffers and stalls the
 * loads behind it, and measured 30% slower from DRAM), while the runs are
 * still fetched sequentially, which this memory serves far faster than
 * the same lines in head order.
 */
struct pfs {
	const uint8_t *p, *end;	/* the current run */
	const uint8_t *const *rows, *const *rows2;
	uint32_t t, n, n2;	/* the next run */
	uint32_t run;
	uint32_t rate, credit;	/* lines per step, in 1/256 */
};

static inline __attribute__((always_inline)) void pf_line(const uint8_t *p)
{
	__builtin_prefetch(p, 0, 3);
}

/* rows2 may be NULL; steps: how often the kernel will step it (0: at once). */
static inline void pfs_init2(struct pfs *ps, const uint8_t *const *rows, uint32_t n,
			     const uint8_t *const *rows2, uint32_t n2, uint32_t bytes, uint32_t steps)
{
	uint64_t lines = ((uint64_t)n + (rows2 ? n2 : 0)) * ((bytes + 63) / 64);
	uint64_t rate = steps ? (lines * 256 + steps - 1) / steps : lines * 256;

	*ps = (struct pfs){ .rows = rows, .rows2 = rows2, .n = n, .n2 = n2,
			    .run = (bytes + 63) & ~63u,
			    .rate = rate > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)rate };
}

/* Move to the next run; 0 when there is none. */
static int pfs_next(struct pfs *ps)
{
	if (ps->t >= ps->n) {
		if (!ps->rows2)
			return 0;
		ps->rows = ps->rows2;
		ps->rows2 = NULL;
		ps->t = 0;
		ps->n = ps->n2;
		if (!ps->n)
			return 0;
	}
	ps->p = ps->rows[ps->t++];
	ps->end = ps->p + ps->run;
	return 1;
}

static inline void pfs_init(struct pfs *ps, const uint8_t *const *rows,
			    const uint8_t *const *rows2, uint32_t n, uint32_t bytes, uint32_t steps)
{
	pfs_init2(ps, rows, n, rows2, n, bytes, steps);
}

static inline __attribute__((always_inline)) void pfs_step(struct pfs *ps)
{
	ps->credit += ps->rate;
	while (ps->credit >= 256) {
		if (ps->p == ps->end && !pfs_next(ps)) {
			ps->credit = 0;
			return;
		}
		pf_line(ps->p);
		ps->p += 64;
		ps->credit -= 256;
	}
}

static inline void pfs_rest(struct pfs *ps)
{
	ps->rate = UINT32_MAX / 2;
	while (ps->p != ps->end || ps->t < ps->n || ps->rows2)
		pfs_step(ps);
}

/*
 * The RT x 4 logits in acc (rows x keys) to s: row-major (tr 0: s[i *
 * tile + j]) or key-major (s[j * tr + i], the decode layout).
 */
static inline __attribute__((always_inline)) void
logits_out(vf acc[RT][4], float *s, uint32_t tile, uint32_t tr)
{
	int i, j;

	if (!tr) {
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
			hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], s + (size_t)i * tile);
		return;
	}
#if RT == 4
	/* the four rows of key j are adjacent: one reduction writes them */
#pragma GCC unroll 4
	for (j = 0; j < 4; j++)
		hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], s + (size_t)j * tr);
#else
#pragma GCC unroll 16
	for (i = 0; i < RT; i++) {
		float x[4];

		hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], x);
#pragma GCC unroll 4
		for (j = 0; j < 4; j++)
			s[(size_t)j * tr + i] = x[j];
	}
#endif
}

/*
 * The micro-kernels read K and V rows through pointers kp[t] + hoff /
 * vp[t] + hoff and convert them in registers: from the cache itself
 * (direct mode; hoff selects the head), or from the f32 rows staged in
 * ws->k / ws->v (dt f32, n = dpad, hoff 0).  n is a multiple of VL.
 */

/* s[i][0..4) = q[i] . k[0..4) for RT rows i, over n dims. */
static inline __attribute__((always_inline)) void
logits_rt4(enum kvrt_dtype dt, const float *q, const uint8_t *const *kp, int64_t hoff,
	   uint32_t hd, uint32_t dp, float *s, uint32_t tile, uint32_t tr, struct pfs *ps)
{
	const size_t es = kvrt_dtype_size(dt);
	vf acc[RT][4];
	uint32_t c;
	int i, j;

#pragma GCC unroll 16
	for (i = 0; i < RT; i++)
#pragma GCC unroll 16
		for (j = 0; j < 4; j++)
			acc[i][j] = (vf){};
	for (c = 0; c < hd; c += VL) {
		vf kv[4], qv[RT];

		if (ps)
			pfs_step(ps);
#pragma GCC unroll 16
		for (j = 0; j < 4; j++)
			kv[j] = cvt_dt(dt, kp[j] + hoff + es * c);
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
			qv[i] = vld(q + (size_t)i * dp + c);
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
#pragma GCC unroll 16
			for (j = 0; j < 4; j++)
				acc[i][j] += qv[i] * kv[j];
	}
	logits_out(acc, s, tile, tr);
}

#ifdef KERN_DPBF16
/*
 * bf16 q and bf16 K: s[i][0..4) = q[i] . k[0..4) with vdpbf16ps, pairs of
 * bf16 products (exact in f32) accumulated in f32, 32 dims per instruction,
 * q kept unscaled in ws->qh (sm_scale is applied to the logits).  hd is a
 * multiple of 32.  The instruction treats bf16 subnormals (< 2^-126) as 0.
 */
static inline __attribute__((always_inline)) void
logits_dp(const uint16_t *q, const uint8_t *const *kp, int64_t hoff, uint32_t hd, uint32_t dp,
	  float *s, uint32_t tile, uint32_t tr, struct pfs *ps)
{
	vf acc[RT][4];
	uint32_t c;
	int i, j;

#pragma GCC unroll 16
	for (i = 0; i < RT; i++)
#pragma GCC unroll 16
		for (j = 0; j < 4; j++)
			acc[i][j] = (vf){};
	for (c = 0; c < hd; c += 32) {
		__m512bh kv[4], qv[RT];

		if (ps)
			pfs_step(ps);
#pragma GCC unroll 16
		for (j = 0; j < 4; j++)
			kv[j] = (__m512bh)_mm512_loadu_si512(kp[j] + hoff + 2 * c);
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
			qv[i] = (__m512bh)_mm512_load_si512(q + (size_t)i * dp + c);
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
#pragma GCC unroll 16
			for (j = 0; j < 4; j++)
				acc[i][j] = (vf)_mm512_dpbf16_ps((__m512)acc[i][j], qv[i], kv[j]);
	}
	logits_out(acc, s, tile, tr);
}
#endif

/*
 * bf16 pairs: the 2 VL bf16 at src as two exact f32 vectors, the even
 * elements (low halves of each 32-bit lane, shifted up) and the odd ones
 * (high halves, masked): one operation per vector, against two for a
 * widening conversion.  Accumulators filled this way hold each block of
 * 2 VL dims permuted, even dims first; unpair_row() puts them back.
 */
static inline __attribute__((always_inline)) void cvt_bf16_pairs(const uint8_t *src, vf *even,
								 vf *odd)
{
	vu w;

	memcpy(&w, src, sizeof(w));
	*even = (vf)(w << 16);
	*odd = (vf)(w & 0xffff0000u);
}

/* Undo the bf16-pair permutation of an accumulator row of n dims. */
static inline void unpair_row(float *acc, uint32_t n)
{
	float tmp[2 * VL];
	uint32_t b, k;

	for (b = 0; b < n; b += 2 * VL) {
		memcpy(tmp, acc + b, sizeof(tmp));
		for (k = 0; k < VL; k++) {
			acc[b + 2 * k] = tmp[k];
			acc[b + 2 * k + 1] = tmp[VL + k];
		}
	}
}

/* How often pv_rt steps its prefetch stream per key. */
static inline uint32_t pv_steps(uint32_t dims, int pairs)
{
	uint32_t rest = dims % (CT * VL);

	return dims / (CT * VL) + (pairs ? rest / (2 * VL) : rest / VL);
}

/*
 * acc[i] += sum_t p(i, t) * v[t] over t in [t0, t1], RT rows, n dims;
 * p(i, t) = p[i * pis + t * pts].  pairs (bf16, n a multiple of 2 VL):
 * acc is in the bf16-pair order.
 */
static inline __attribute__((always_inline)) void
pv_rt(enum kvrt_dtype dt, int pairs, float *acc, const float *p, size_t pis, size_t pts,
      const uint8_t *const *vp, int64_t hoff, uint32_t hd, uint32_t dp, uint32_t t0,
      uint32_t t1, struct pfs *ps)
{
	const size_t es = kvrt_dtype_size(dt);
	uint32_t c = 0, t;
	int i, j;

	for (; c + CT * VL <= hd; c += CT * VL) {
		vf a[RT][CT];

#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
#pragma GCC unroll 16
			for (j = 0; j < CT; j++)
				a[i][j] = vld(acc + (size_t)i * dp + c + j * VL);
		for (t = t0; t <= t1; t++) {
			const uint8_t *vr = vp[t] + hoff + es * c;
			vf vv[CT];

			if (ps)
				pfs_step(ps);
			if (pairs) {
#pragma GCC unroll 16
				for (j = 0; j < CT; j += 2)
					cvt_bf16_pairs(vr + es * j * VL, &vv[j], &vv[j + 1]);
			} else {
#pragma GCC unroll 16
				for (j = 0; j < CT; j++)
					vv[j] = cvt_dt(dt, vr + es * j * VL);
			}
#pragma GCC unroll 16
			for (i = 0; i < RT; i++) {
				vf pi = vset1(p[i * pis + t * pts]);

#pragma GCC unroll 16
				for (j = 0; j < CT; j++)
					a[i][j] += pi * vv[j];
			}
		}
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
#pragma GCC unroll 16
			for (j = 0; j < CT; j++)
				vst(acc + (size_t)i * dp + c + j * VL, a[i][j]);
	}
	for (; pairs && c < hd; c += 2 * VL) {
		vf a[RT][2];

#pragma GCC unroll 16
		for (i = 0; i < RT; i++) {
			a[i][0] = vld(acc + (size_t)i * dp + c);
			a[i][1] = vld(acc + (size_t)i * dp + c + VL);
		}
		for (t = t0; t <= t1; t++) {
			vf ev, od;

			cvt_bf16_pairs(vp[t] + hoff + es * c, &ev, &od);
			if (ps)
				pfs_step(ps);
#pragma GCC unroll 16
			for (i = 0; i < RT; i++) {
				vf pi = vset1(p[i * pis + t * pts]);

				a[i][0] += pi * ev;
				a[i][1] += pi * od;
			}
		}
#pragma GCC unroll 16
		for (i = 0; i < RT; i++) {
			vst(acc + (size_t)i * dp + c, a[i][0]);
			vst(acc + (size_t)i * dp + c + VL, a[i][1]);
		}
	}
	for (; c < hd; c += VL) {
		vf a[RT];

#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
			a[i] = vld(acc + (size_t)i * dp + c);
		for (t = t0; t <= t1; t++) {
			vf vv = cvt_dt(dt, vp[t] + hoff + es * c);

			if (ps)
				pfs_step(ps);
#pragma GCC unroll 16
			for (i = 0; i < RT; i++)
				a[i] += vset1(p[i * pis + t * pts]) * vv;
		}
#pragma GCC unroll 16
		for (i = 0; i < RT; i++)
			vst(acc + (size_t)i * dp + c, a[i]);
	}
}

/*
 * Soft-cap, mask and the online-softmax update of one row over a tile;
 * keys [a, b] (tile-relative) are the row's.  Leaves the weights in s.
 * ks (fp8, direct mode): per-key K scales, applied to the logits first,
 * then lscale (sm_scale when q was not pre-scaled);
 * vs: per-key V scales, applied to the weights left in s (not to l).
 */
static inline void softmax_row(const struct attn_job *job, struct attn_ws *ws, uint32_t r,
			       uint32_t a, uint32_t b, const float *ks, const float *vs,
			       float lscale)
{
	float *s = ws->s + (size_t)r * ws->tile;
	float *acc = ws->acc + (size_t)r * ws->dpad;
	uint32_t t0 = a / VL * VL, t1 = (b / VL + 1) * VL;	/* whole vectors */
	vf mx = vset1(-INFINITY), sum = (vf){};
	vi lane = { 0 };
	float m_new, alpha, l;
	uint32_t t, d;
	int i;

	for (i = 0; i < VL; i++)
		lane[i] = i;
	for (t = t0; t < t1; t += VL) {
		vf x = vld(s + t);
		vi idx = lane + (int32_t)t;

		if (ks)
			x *= vld(ks + t);
		if (lscale != 1.0f)
			x *= lscale;
		if (job->softcap > 0.0f)
			x = job->softcap * vtanh(x * (1.0f / job->softcap));
		x = vsel((idx >= (int32_t)a) & (idx <= (int32_t)b), x, vset1(-INFINITY));
		vst(s + t, x);
		mx = vmax(mx, x);
	}
	m_new = hmax(mx);
	if (m_new > ws->m[r])
		alpha = expf(ws->m[r] - m_new);	/* 0 on the first tile: m = -inf */
	else
		m_new = ws->m[r], alpha = 1.0f;
	for (t = t0; t < t1; t += VL) {
		vf e = vexp_neg(vld(s + t) - m_new);

		sum += e;
		vst(s + t, vs ? e * vld(vs + t) : e);
	}
	l = hsum(sum);
	if (alpha != 1.0f) {
		for (d = 0; d < ws->dpad; d += VL)
			vst(acc + d, vld(acc + d) * alpha);
	}
	ws->l[r] = ws->l[r] * alpha + l;
	ws->m[r] = m_new;
}

/*
 * Token rows of positions [p0, p1) at the item's first head: kp[t], vp[t]
 * and the block of each (for fp8 scales); entries up to the next multiple
 * of 4 repeat the last row.
 */
static void tile_rows(const struct attn_job *job, uint32_t s, uint32_t h0,
		      int64_t p0, int64_t p1, const uint8_t **kp, const uint8_t **vp,
		      int64_t *blk_of)
{
	uint32_t bt = job->block_tokens, n = (uint32_t)(p1 - p0), t;
	int64_t p = p0;

	while (p < p1) {
		int64_t blk = job->indices[job->indptr[s] + p / bt];
		int64_t slot = p % bt, end = p + (bt - slot);
		int64_t off = blk * job->block_stride + (int64_t)h0 * job->head_stride;

		if (end > p1)
			end = p1;
		for (; p < end; p++, slot++) {
			t = (uint32_t)(p - p0);
			kp[t] = job->k_base + off + slot * job->token_stride;
			vp[t] = job->v_base + off + slot * job->token_stride;
			blk_of[t] = blk;
		}
	}
	for (t = n; t & 3; t++) {	/* padding keys: logits computed, then masked */
		kp[t] = kp[n - 1];
		vp[t] = vp[n - 1];
		blk_of[t] = blk_of[n - 1];
	}
}

/*
 * Softmax of the RT rows from r over tile [t0, t1) (ks, vs: the head's fp8
 * scales in direct mode, else NULL), then zero each row's weights outside
 * its own keys within the group's union of keys.  Returns 0 and that union
 * (tile-relative, inclusive) in *a, *b, or -1 when no row has a key here.
 */
static inline int group_softmax(const struct attn_job *job, struct attn_ws *ws, uint32_t r,
				int64_t t0, int64_t t1, const float *ks, const float *vs,
				float lscale, uint32_t *a, uint32_t *b)
{
	const uint32_t T = ws->tile;
	int64_t ua = INT64_MAX, ub = -1;
	int k;

	for (k = 0; k < RT; k++) {
		int64_t lo = ws->lo[r + k] > t0 ? ws->lo[r + k] : t0;
		int64_t hi = ws->hi[r + k] < t1 - 1 ? ws->hi[r + k] : t1 - 1;

		if (lo > hi) {
			memset(ws->s + (size_t)(r + k) * T, 0, sizeof(float) * T);
			continue;
		}
		softmax_row(job, ws, r + k, (uint32_t)(lo - t0), (uint32_t)(hi - t0), ks, vs,
			    lscale);
		if (lo < ua)
			ua = lo;
		if (hi > ub)
			ub = hi;
	}
	if (ua > ub)
		return -1;
	for (k = 0; k < RT; k++) {
		int64_t lo = ws->lo[r + k] > t0 ? ws->lo[r + k] : t0;
		int64_t hi = ws->hi[r + k] < t1 - 1 ? ws->hi[r + k] : t1 - 1;
		float *srow = ws->s + (size_t)(r + k) * T;

		if (lo > hi)
			continue;
		if (lo > ua)
			memset(srow + (ua - t0), 0, sizeof(float) * (size_t)(lo - ua));
		if (hi < ub)
			memset(srow + (hi + 1 - t0), 0, sizeof(float) * (size_t)(ub - hi));
	}
	*a = (uint32_t)(ua - t0);
	*b = (uint32_t)(ub - t0);
	return 0;
}

/*
 * Direct mode, logits of every head's rows over the tile, in token-major
 * order: for each 4 keys, every head.  The first touch of the tile's K
 * then walks each key's row of all heads in address order, which this
 * memory serves much faster than one head's slice of every row after the
 * other (and it is no slower from cache).
 */
static inline __attribute__((always_inline)) void
tile_logits_tm(enum kvrt_dtype dt, struct attn_ws *ws, const uint8_t *const *kp, uint32_t nh,
	       int64_t hstride, uint32_t rows4, uint32_t n, uint32_t dims, struct pfs *ps)
{
	uint32_t r, t, hh;

	for (t = 0; t < n; t += 4)
		for (hh = 0; hh < nh; hh++)
			for (r = hh * rows4; r < (hh + 1) * rows4; r += RT)
				logits_rt4(dt, ws->q + (size_t)r * ws->dpad, kp + t, hh * hstride,
					   dims, ws->dpad, ws->s + (size_t)r * ws->tile + t,
					   ws->tile, 0, r == hh * rows4 ? ps : NULL);
}

/*
 * Direct mode, softmax and acc += p . V of every head's row groups over the
 * tile, head after head.  ks, vs: the heads' fp8 scales ([head][tile]) or
 * NULL.  (Chunking this token-major like the logits measured no faster:
 * the logits pass has already brought the tile's V lines near.)
 */
static inline __attribute__((always_inline)) void
tile_softmax_pv(enum kvrt_dtype dt, int pairs, const struct attn_job *job, struct attn_ws *ws,
		const uint8_t *const *vp, uint32_t nh, uint32_t rows4, int64_t t0, int64_t t1,
		uint32_t dims, const float *ks, const float *vs, float lscale, struct pfs *ps)
{
	const uint32_t T = ws->tile;
	uint32_t hh, r, a, b;

	for (hh = 0; hh < nh; hh++)
		for (r = hh * rows4; r < (hh + 1) * rows4; r += RT) {
			if (group_softmax(job, ws, r, t0, t1, ks ? ks + (size_t)hh * T : NULL,
					  vs ? vs + (size_t)hh * T : NULL, lscale, &a, &b))
				continue;
			pv_rt(dt, pairs, ws->acc + (size_t)r * ws->dpad, ws->s + (size_t)r * T, T, 1,
			      vp, hh * job->head_stride, dims, ws->dpad, a, b,
			      r == hh * rows4 ? ps : NULL);
		}
}

/*
 * Decode (one query token per sequence): every row of the item sees the
 * same keys, and a tile holds only keys in range, so the tile's logits are
 * kept key-major, s[t * R + row] (R: the rows rounded up to whole vectors),
 * and the online softmax runs on VL rows at once with no masks and no
 * horizontal reductions.  Rows past the item's (padding) compute harmless
 * finite values that are never stored.
 */
static inline __attribute__((always_inline)) void
dec_logits(enum kvrt_dtype dt, int dot16, struct attn_ws *ws, const uint8_t *const *kp,
	   uint32_t nh, int64_t hstride, uint32_t rows4, uint32_t R, uint32_t n, uint32_t dims,
	   struct pfs *ps)
{
	uint32_t r, t, hh;

#ifndef KERN_DPBF16
	(void)dot16;
#endif
	for (t = 0; t < n; t += 4)
		for (hh = 0; hh < nh; hh++)
			for (r = hh * rows4; r < (hh + 1) * rows4; r += RT) {
#ifdef KERN_DPBF16
				if (dot16) {
					logits_dp(ws->qh + (size_t)r * ws->dpad, kp + t, hh * hstride,
						  dims, ws->dpad, ws->s + (size_t)t * R + r, 0, R,
						  r == hh * rows4 ? ps : NULL);
					continue;
				}
#endif
				logits_rt4(dt, ws->q + (size_t)r * ws->dpad, kp + t, hh * hstride, dims,
					   ws->dpad, ws->s + (size_t)t * R + r, 0, R,
					   r == hh * rows4 ? ps : NULL);
			}
}


/* fp8: s[t][rows of head hh] *= sc[hh][t] over the tile's n keys. */
static inline void dec_scale(struct attn_ws *ws, const float *sc, uint32_t nh, uint32_t rows4,
			     uint32_t R, uint32_t n)
{
	uint32_t hh, t, r;

	for (t = 0; t < n; t++)
		for (hh = 0; hh < nh; hh++)
			for (r = hh * rows4; r < (hh + 1) * rows4; r++)
				ws->s[(size_t)t * R + r] *= sc[(size_t)hh * ws->tile + t];
}

/* Soft-cap and the online-softmax update over n keys, VL rows at a time. */
static inline void dec_softmax(const struct attn_job *job, struct attn_ws *ws, uint32_t R,
			       uint32_t n, float lscale, struct pfs *ps)
{
	const float cap = job->softcap;
	uint32_t rv, t, k, d;

	for (rv = 0; rv < R; rv += VL) {
		float *s = ws->s + rv;
		vf m_old = vld(ws->m + rv), mx = m_old, sum = (vf){}, alpha;

		for (t = 0; t < n; t++) {
			vf x = vld(s + (size_t)t * R);

			pfs_step(ps);
			if (lscale != 1.0f)
				x *= lscale;
			if (cap > 0.0f)
				x = cap * vtanh(x * (1.0f / cap));
			vst(s + (size_t)t * R, x);
			mx = vmax(mx, x);
		}
		/* exactly 1 where the max stayed, 0 on the first tile (m = -inf) */
		alpha = vexp_neg(m_old - mx);
		for (t = 0; t < n; t++) {
			vf e = vexp_neg(vld(s + (size_t)t * R) - mx);

			pfs_step(ps);
			sum += e;
			vst(s + (size_t)t * R, e);
		}
		vst(ws->l + rv, vld(ws->l + rv) * alpha + sum);
		vst(ws->m + rv, mx);
		for (k = 0; k < VL; k++) {
			float *acc = ws->acc + (size_t)(rv + k) * ws->dpad;

			if (alpha[k] == 1.0f)
				continue;
			for (d = 0; d < ws->dpad; d += VL)
				vst(acc + d, vld(acc + d) * alpha[k]);
		}
	}
}

/*
 * Keys per P.V pass in decode: every head's rows over DEC_PV_KEYS keys,
 * then the next keys, so V is read in near address order (all heads of a
 * few token rows), the order the prefetch stream fetches it in.  Whole
 * tiles head by head measured 6-10% slower from DRAM (the first heads
 * wait on lines the stream brings last); 4 keys costs too many
 * accumulator loads and stores.
 */
#define DEC_PV_KEYS 8

static inline __attribute__((always_inline)) void
dec_pv(enum kvrt_dtype dt, int pairs, struct attn_ws *ws, const uint8_t *const *vp, uint32_t nh,
       int64_t hstride, uint32_t rows4, uint32_t R, uint32_t n, uint32_t dims, struct pfs *ps)
{
	uint32_t hh, r, t0, t1;

	for (t0 = 0; t0 < n; t0 += DEC_PV_KEYS) {
		t1 = t0 + DEC_PV_KEYS < n ? t0 + DEC_PV_KEYS - 1 : n - 1;
		for (hh = 0; hh < nh; hh++)
			for (r = hh * rows4; r < (hh + 1) * rows4; r += RT)
				pv_rt(dt, pairs, ws->acc + (size_t)r * ws->dpad, ws->s + r, 1, R, vp,
				      hh * hstride, dims, ws->dpad, t0, t1,
				      r == hh * rows4 ? ps : NULL);
	}
}

/* A decode tile: logits, fp8 K scales, softmax, fp8 V scales, P.V. */
static inline __attribute__((always_inline)) void
dec_tile(enum kvrt_dtype dt, int dot16, int pairs, const struct attn_job *job,
	 struct attn_ws *ws, const uint8_t *const *kp, const uint8_t *const *vp, uint32_t nh,
	 uint32_t rows4, uint32_t R, uint32_t n, uint32_t dims, float lscale, struct pfs *ps)
{
	dec_logits(dt, dot16, ws, kp, nh, job->head_stride, rows4, R, n, dims, ps);
	if (job->k_scales)
		dec_scale(ws, ws->ks, nh, rows4, R, n);
	dec_softmax(job, ws, R, n, lscale, ps);
	if (job->v_scales)
		dec_scale(ws, ws->vs, nh, rows4, R, n);
	dec_pv(dt, pairs, ws, vp, nh, job->head_stride, rows4, R, n, dims, ps);
}

/* Positions [*a, *b) of tile i of [klo, khi]: cut at multiples of T. */
static inline void tile_span(int64_t klo, int64_t khi, uint32_t T, int64_t i, int64_t *a,
			     int64_t *b)
{
	*a = i ? (klo / T + i) * T : klo;
	*b = (klo / T + i + 1) * T < khi + 1 ? (klo / T + i + 1) * T : khi + 1;
}

/* One head's logits over a tile (rows r0 .. r0 + rows4), one K dtype. */
static inline __attribute__((always_inline)) void
head_logits(enum kvrt_dtype dt, struct attn_ws *ws, uint32_t r0, uint32_t rows4,
	    const uint8_t *const *kp, int64_t hoff, uint32_t n, uint32_t dims,
	    struct pfs *ps)
{
	uint32_t r, t;

	for (r = r0; r < r0 + rows4; r += RT)
		for (t = 0; t < n; t += 4)
			logits_rt4(dt, ws->q + (size_t)r * ws->dpad, kp + t, hoff, dims, ws->dpad,
				   ws->s + (size_t)r * ws->tile + t, ws->tile, 0,
				   r == r0 ? ps : NULL);
}

static inline __attribute__((always_inline)) void
head_pv(enum kvrt_dtype dt, struct attn_ws *ws, uint32_t r, const uint8_t *const *vp,
	int64_t hoff, uint32_t dims, uint32_t a, uint32_t b, struct pfs *ps)
{
	pv_rt(dt, 0, ws->acc + (size_t)r * ws->dpad, ws->s + (size_t)r * ws->tile, ws->tile, 1, vp,
	      hoff, dims, ws->dpad, a, b, ps);
}

void KERN_NAME(const struct attn_job *job, struct attn_ws *ws, const struct attn_item *it);

/*
 * Rows: head hh of the item (kv head h0 + hh), query token jj, group member
 * g is row hh * rows4 + jj * G + g; each head's rows are padded to rows4, a
 * multiple of 4, with rows that see no keys.
 */
void KERN_NAME(const struct attn_job *job, struct attn_ws *ws, const struct attn_item *it)
{
	const uint32_t G = job->group, dp = ws->dpad, T = ws->tile, B = ATTN_PF_TILES + 1;
	const uint32_t s = it->seq, h0 = it->kv_head, nh = it->kv_heads;
	const int64_t qlen = attn_q_len(job, s), q0 = attn_q_start(job, s);
	const int64_t slen = job->seq_lens[s], hstride = job->head_stride;
	const uint32_t qn = it->j1 - it->j0, rows4 = (qn * G + 3) & ~3u;
	const uint32_t row_bytes = job->head_dim * (uint32_t)job->kv_esize;
	/* the item's heads are contiguous in a token's row (attn_fast.c) */
	const uint32_t run_bytes = nh * row_bytes;
	/*
	 * Direct mode (K/V converted in registers from the cache) when a head
	 * has at most two row groups, so each element is converted at most
	 * twice, and head_dim is whole vectors; else each head's K/V tile is
	 * converted once into ws->k / ws->v (staged mode: prefill, MQA).
	 */
	const int direct = rows4 <= 2 * RT && job->head_dim % VL == 0;
	const enum kvrt_dtype dt = direct ? job->kv_dtype : KVRT_DTYPE_F32;
	const uint32_t dims = direct ? job->head_dim : dp;
#ifdef KERN_DPBF16
	/* bf16 q . bf16 K by vdpbf16ps: q stays unscaled, in bf16 */
	const int dot16 = direct && job->kv_dtype == KVRT_DTYPE_BF16 &&
			  job->q_dtype == KVRT_DTYPE_BF16 && job->head_dim % 32 == 0;
#else
	const int dot16 = 0;
#endif
	const float lscale = dot16 ? job->sm_scale : 1.0f;
	/* decode in direct mode: key-major logits, softmax VL rows at a time */
	const int dec = direct && !job->q_indptr;
	const uint32_t R = dec ? (nh * rows4 + VL - 1) / VL * VL : 0;
	/* bf16 V through bf16 pairs (acc permuted, put back before the store) */
	const int pairs = direct && job->kv_dtype == KVRT_DTYPE_BF16 &&
			  job->head_dim % (2 * VL) == 0;
	const uint8_t **skp = ws->skp, **svp = ws->svp;
	int64_t klo = INT64_MAX, khi = -1, t0, t1, n0, n1, i, ntiles;
	uint32_t r, jj, g, t, hh, cur, nxt;
	struct pfs kps, vps;

	for (hh = 0; hh < nh; hh++) {
		for (jj = 0; jj < qn; jj++) {
			int64_t pos = slen - qlen + it->j0 + jj, lo = attn_key_lo(job, pos);

			for (g = 0; g < G; g++) {
				uint32_t h = (h0 + hh) * G + g;
				size_t qrow = ((size_t)(q0 + it->j0 + jj) * job->num_q_heads + h) *
					      job->head_dim;
				const uint8_t *src = (const uint8_t *)job->q + qrow * job->q_esize;

				r = hh * rows4 + jj * G + g;
				if (dot16)
					memcpy(ws->qh + (size_t)r * dp, src, job->head_dim * 2);
				else
					cvt_row(ws->q + (size_t)r * dp, src, job->head_dim, job->q_dtype,
						job->sm_scale);
				ws->lo[r] = lo;
				ws->hi[r] = pos;
			}
			if (lo < klo)
				klo = lo;
			if (pos > khi)
				khi = pos;
		}
		for (r = hh * rows4; r < (hh + 1) * rows4; r++) {
			if (r >= hh * rows4 + qn * G) {	/* padding rows: no keys */
				ws->lo[r] = 1;
				ws->hi[r] = 0;
			}
			ws->m[r] = -INFINITY;
			ws->l[r] = 0.0f;
			memset(ws->acc + (size_t)r * dp, 0, sizeof(float) * dp);
		}
	}
	for (r = nh * rows4; r < R; r++) {	/* decode: the lanes past the rows */
		ws->m[r] = -INFINITY;
		ws->l[r] = 0.0f;
		for (t = 0; t < T; t++)
			ws->s[(size_t)t * R + r] = 0.0f;
	}
	if (!direct)
		for (t = 0; t < T; t++) {
			skp[t] = (const uint8_t *)(ws->k + (size_t)t * dp);
			svp[t] = (const uint8_t *)(ws->v + (size_t)t * dp);
		}

	/*
	 * Tiles: [klo, khi] cut at multiples of T.  The rows of tile i +
	 * ATTN_PF_TILES are looked up while tile i computes, and prefetched
	 * (every head of the item) spread over its logits (K) and P.V (V)
	 * passes.
	 */
	ntiles = khi / T - klo / T + 1;
	for (i = 0; i < ATTN_PF_TILES && i < ntiles; i++) {
		tile_span(klo, khi, T, i, &n0, &n1);
		tile_rows(job, s, h0, n0, n1, ws->kp + i * T, ws->vp + i * T, ws->blk + i * T);
		if (i) {
			pfs_init(&kps, ws->kp + i * T, ws->vp + i * T, (uint32_t)(n1 - n0), run_bytes,
				 0);
			pfs_rest(&kps);
		}
	}
	for (i = 0; i < ntiles; i++) {
		const uint32_t lsteps = dims / (dot16 ? 32 : VL), psteps = pv_steps(dims, pairs);
		uint32_t n, nn = 0;

		cur = (uint32_t)(i % B) * T;
		nxt = (uint32_t)((i + ATTN_PF_TILES) % B) * T;
		tile_span(klo, khi, T, i, &t0, &t1);
		n = (uint32_t)(t1 - t0);
		if (i + ATTN_PF_TILES < ntiles) {
			tile_span(klo, khi, T, i + ATTN_PF_TILES, &n0, &n1);
			nn = (uint32_t)(n1 - n0);
			tile_rows(job, s, h0, n0, n1, ws->kp + nxt, ws->vp + nxt, ws->blk + nxt);
		}
		if (dec) {
			/*
			 * This tile's V, then the next tile's K, evenly over this
			 * tile's logits, softmax and P.V steps: each line about half
			 * a tile before its use.  A whole tile ahead (the next K
			 * and V) measured 12% slower from DRAM, two tiles 20%.
			 */
			pfs_init2(&kps, ws->vp + cur, n, ws->kp + nxt, nn, run_bytes,
				  nh * ((n + 3) / 4) * lsteps + 2 * n * (R / VL) + nh * n * psteps);
		} else {
			/* the next tile's K over this one's logits steps (first row
			 * group of each head), its V over the first P.V pass of each */
			pfs_init(&kps, ws->kp + nxt, NULL, nn, run_bytes, nh * ((n + 3) / 4) * lsteps);
			pfs_init(&vps, ws->vp + nxt, NULL, nn, run_bytes, nh * n * psteps);
		}

		/* fp8: every head's block scales of the tile's keys */
		if (job->k_scales) {
			for (hh = 0; hh < nh; hh++) {
				float *ks = ws->ks + (size_t)hh * T, *vs = ws->vs + (size_t)hh * T;

				for (t = 0; t < n; t++) {
					int64_t si = ws->blk[cur + t] * job->scale_block_stride + h0 + hh;

					ks[t] = job->k_scales[si];
					vs[t] = job->v_scales[si];
				}
				for (; t & 3; t++)
					ks[t] = vs[t] = 0.0f;
			}
		}

		if (dec) {
			const uint8_t *const *tkp = ws->kp + cur, *const *tvp = ws->vp + cur;

			switch ((int)dt) {
			case KVRT_DTYPE_F32:
				dec_tile(KVRT_DTYPE_F32, 0, 0, job, ws, tkp, tvp, nh, rows4, R, n, dims,
					 lscale, &kps);
				break;
			case KVRT_DTYPE_F16:
				dec_tile(KVRT_DTYPE_F16, 0, 0, job, ws, tkp, tvp, nh, rows4, R, n, dims,
					 lscale, &kps);
				break;
			case KVRT_DTYPE_BF16:	/* dot16 implies pairs (head_dim % 32 == 0) */
				if (dot16)
					dec_tile(KVRT_DTYPE_BF16, 1, 1, job, ws, tkp, tvp, nh, rows4, R, n,
						 dims, lscale, &kps);
				else if (pairs)
					dec_tile(KVRT_DTYPE_BF16, 0, 1, job, ws, tkp, tvp, nh, rows4, R, n,
						 dims, lscale, &kps);
				else
					dec_tile(KVRT_DTYPE_BF16, 0, 0, job, ws, tkp, tvp, nh, rows4, R, n,
						 dims, lscale, &kps);
				break;
			case KVRT_DTYPE_FP8_E4M3:
				dec_tile(KVRT_DTYPE_FP8_E4M3, 0, 0, job, ws, tkp, tvp, nh, rows4, R, n,
					 dims, lscale, &kps);
				break;
			}
		} else if (direct) {
			const uint8_t *const *tkp = ws->kp + cur, *const *tvp = ws->vp + cur;
			const float *ks, *vs;

#ifdef KERN_DPBF16
			if (dot16) {
				uint32_t hh2;

				for (t = 0; t < n; t += 4)
					for (hh2 = 0; hh2 < nh; hh2++)
						for (r = hh2 * rows4; r < (hh2 + 1) * rows4; r += RT)
							logits_dp(ws->qh + (size_t)r * dp, tkp + t,
								  hh2 * hstride, dims, dp,
								  ws->s + (size_t)r * T + t, T, 0,
								  r == hh2 * rows4 ? &kps : NULL);
			} else
#endif
			switch ((int)dt) {
			case KVRT_DTYPE_F32:
				tile_logits_tm(KVRT_DTYPE_F32, ws, tkp, nh, hstride, rows4, n, dims, &kps);
				break;
			case KVRT_DTYPE_F16:
				tile_logits_tm(KVRT_DTYPE_F16, ws, tkp, nh, hstride, rows4, n, dims, &kps);
				break;
			case KVRT_DTYPE_BF16:
				tile_logits_tm(KVRT_DTYPE_BF16, ws, tkp, nh, hstride, rows4, n, dims, &kps);
				break;
			case KVRT_DTYPE_FP8_E4M3:
				tile_logits_tm(KVRT_DTYPE_FP8_E4M3, ws, tkp, nh, hstride, rows4, n, dims,
					       &kps);
				break;
			}
			ks = job->k_scales ? ws->ks : NULL;
			vs = job->k_scales ? ws->vs : NULL;
			switch ((int)dt) {
			case KVRT_DTYPE_F32:
				tile_softmax_pv(KVRT_DTYPE_F32, 0, job, ws, tvp, nh, rows4, t0, t1, dims, ks,
						vs, lscale, &vps);
				break;
			case KVRT_DTYPE_F16:
				tile_softmax_pv(KVRT_DTYPE_F16, 0, job, ws, tvp, nh, rows4, t0, t1, dims, ks,
						vs, lscale, &vps);
				break;
			case KVRT_DTYPE_BF16:
				if (pairs)
					tile_softmax_pv(KVRT_DTYPE_BF16, 1, job, ws, tvp, nh, rows4, t0, t1,
							dims, ks, vs, lscale, &vps);
				else
					tile_softmax_pv(KVRT_DTYPE_BF16, 0, job, ws, tvp, nh, rows4, t0, t1,
							dims, ks, vs, lscale, &vps);
				break;
			case KVRT_DTYPE_FP8_E4M3:
				tile_softmax_pv(KVRT_DTYPE_FP8_E4M3, 0, job, ws, tvp, nh, rows4, t0, t1, dims,
						ks, vs, lscale, &vps);
				break;
			}
		} else {
			/* staged: one head at a time, its tile converted to f32 once */
			for (hh = 0; hh < nh; hh++) {
				const uint32_t r0 = hh * rows4;
				const float *ks = ws->ks + (size_t)hh * T, *vs = ws->vs + (size_t)hh * T;
				int64_t hoff = (int64_t)hh * hstride;
				int first = 1;

				for (t = 0; t < n; t++) {
					cvt_row(ws->k + (size_t)t * dp, ws->kp[cur + t] + hoff,
						job->head_dim, job->kv_dtype, job->k_scales ? ks[t] : 1.0f);
					cvt_row(ws->v + (size_t)t * dp, ws->vp[cur + t] + hoff,
						job->head_dim, job->kv_dtype, job->v_scales ? vs[t] : 1.0f);
				}
				head_logits(KVRT_DTYPE_F32, ws, r0, rows4, skp, 0, n, dims, &kps);
				for (r = r0; r < r0 + rows4; r += RT) {
					uint32_t a, b;

					if (group_softmax(job, ws, r, t0, t1, NULL, NULL, 1.0f, &a, &b))
						continue;
					/* the first group's pass prefetches V */
					head_pv(KVRT_DTYPE_F32, ws, r, svp, 0, dims, a, b,
						first ? &vps : NULL);
					first = 0;
				}
			}
		}
		pfs_rest(&kps);
		if (!dec)
			pfs_rest(&vps);
	}

	for (hh = 0; hh < nh; hh++) {
		for (jj = 0; jj < qn; jj++) {
			for (g = 0; g < G; g++) {
				uint32_t h = (h0 + hh) * G + g;
				size_t orow = ((size_t)(q0 + it->j0 + jj) * job->num_q_heads + h) *
					      job->head_dim;

				r = hh * rows4 + jj * G + g;
				if (pairs)
					unpair_row(ws->acc + (size_t)r * dp, job->head_dim);
				store_row((uint8_t *)job->out + orow * job->o_esize,
					  ws->acc + (size_t)r * dp, job->head_dim, job->o_dtype,
					  1.0f / ws->l[r]);
			}
		}
	}
}
