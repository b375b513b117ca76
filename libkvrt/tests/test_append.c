// SPDX-License-Identifier: MIT
/*
 * kvrt_append_kv against an independent float64 model.  The test decodes
 * f16/bf16/fp8 with its own formulas and defines round-to-nearest-even in
 * float64 (rint on the exact ulp grid), so nothing here shares code with
 * libkvrt's conversions.  fp8 is checked against the documented scale rule:
 * exact final scales, correctly rounded values for tokens whose block scale
 * did not grow afterwards, and a bound for requantized ones.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

#define SENTINEL 0x5a

#define XORSHIFT_SEED 0x9e3779b97f4a7c15ULL
#include "xorshift.h"

static double urand(void)
{
	return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* ---- independent formats -------------------------------------------------- */

static double dec_f16(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, -24);
	else
		v = ldexp(1024 + m, e - 25);
	return s ? -v : v;
}

static double dec_bf16(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static double dec_fp8(uint8_t q)
{
	int s = q >> 7, e = (q >> 3) & 15, m = q & 7;
	double v;

	if (e == 15 && m == 7)
		return NAN;
	v = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
	return s ? -v : v;
}

/* Round x to a binary format with mbits stored mantissa bits, minimum
 * normal exponent emin, largest finite maxv: ties to even; overflow goes
 * to infinity, or to +-maxv when sat. */
static double ref_round(double x, int mbits, int emin, double maxv, int sat)
{
	double ulp, q;
	int e;

	if (x == 0 || isnan(x))
		return x;
	frexp(x, &e);
	e -= 1;			/* x = 1.f * 2^e */
	if (e < emin)
		e = emin;
	ulp = ldexp(1.0, e - mbits);
	q = rint(x / ulp) * ulp;
	if (fabs(q) > maxv)
		q = sat ? copysign(maxv, x) : copysign(INFINITY, x);
	return q;
}

static double round_to(enum kvrt_dtype dt, double x)
{
	switch (dt) {
	case KVRT_DTYPE_F32:
		return (float)x;
	case KVRT_DTYPE_F16:
		return ref_round(x, 10, -14, 65504.0, 0);
	case KVRT_DTYPE_BF16:
		return ref_round(x, 7, -126, 0x1.fep127, 0);
	default:
		return ref_round(x, 3, -6, 448.0, 1);
	}
}

static double load(enum kvrt_dtype dt, const void *p, size_t i)
{
	switch (dt) {
	case KVRT_DTYPE_F32:
		return ((const float *)p)[i];
	case KVRT_DTYPE_F16:
		return dec_f16(((const uint16_t *)p)[i]);
	case KVRT_DTYPE_BF16:
		return dec_bf16(((const uint16_t *)p)[i]);
	default:
		return dec_fp8(((const uint8_t *)p)[i]);
	}
}

/* A random finite source value of dtype dt, with a spread of magnitudes. */
static void gen(enum kvrt_dtype dt, void *p, size_t i, double mag)
{
	double x = (urand() * 2 - 1) * mag * ldexp(1.0, (int)(rnd() % 9) - 4);

	if (rnd() % 16 == 0)
		x = 0;
	switch (dt) {
	case KVRT_DTYPE_F32:
		((float *)p)[i] = (float)x;
		break;
	case KVRT_DTYPE_F16: {
		uint16_t h;

		do
			h = (uint16_t)rnd();
		while (((h >> 10) & 31) == 31);
		if (mag < 1000)	/* 2^-5 .. 2^3, or 2^0 .. 2^8 for loud tokens */
			h = (uint16_t)((h & 0x83ff) | ((10 + (mag > 10 ? 5 : 0) + rnd() % 9) << 10));
		((uint16_t *)p)[i] = h;
		break;
	}
	default: {
		float f = (float)x;
		uint32_t u;

		memcpy(&u, &f, 4);
		((uint16_t *)p)[i] = (uint16_t)(u >> 16);
		break;
	}
	}
}

/* ---- geometry helpers -------------------------------------------------------- */

struct cache {
	struct kvrt_layout l;
	unsigned char *base;
	float *scales;
	size_t bytes, nscales;
};

static int cache_init(struct cache *c, enum kvrt_layout_kind kind, uint32_t L, uint32_t H,
		      uint32_t D, uint32_t T, uint32_t N, enum kvrt_dtype dt)
{
	memset(c, 0, sizeof(*c));
	if (kvrt_layout_init(&c->l, kind, L, H, D, T, N, dt))
		return -1;
	c->bytes = (size_t)L * 2 * N * T * H * D * kvrt_dtype_size(dt);
	c->base = malloc(c->bytes);
	memset(c->base, SENTINEL, c->bytes);
	if (dt == KVRT_DTYPE_FP8_E4M3) {
		c->nscales = (size_t)L * 2 * N * H;
		c->scales = malloc(c->nscales * sizeof(float));
		for (size_t i = 0; i < c->nscales; i++)
			c->scales[i] = 12345.0f;	/* stale scales from a former user */
	}
	return 0;
}

static void cache_fini(struct cache *c)
{
	free(c->base);
	free(c->scales);
}

static size_t row_off(const struct kvrt_layout *l, uint32_t layer, int kv, uint64_t b, uint32_t t,
		      uint32_t h)
{
	return (size_t)(layer * l->layer_stride + kv * l->kv_stride + (int64_t)b * l->block_stride +
			t * l->token_stride + h * l->head_stride);
}

static float *scale_at(struct cache *c, uint32_t layer, int kv, uint64_t b, uint32_t h)
{
	const struct kvrt_layout *l = &c->l;

	return c->scales + layer * l->scale_layer_stride + kv * l->scale_kv_stride +
	       (int64_t)b * l->scale_block_stride + h;
}

/* ---- non-fp8 ----------------------------------------------------------------- */

static void one_plain_case(enum kvrt_layout_kind kind, enum kvrt_dtype src, enum kvrt_dtype dst)
{
	const uint32_t L = 3, H = 2, D = 5, T = 4, N = 6, layer = 1, ntok = 17;
	size_t se = kvrt_dtype_size(src), de = kvrt_dtype_size(dst);
	unsigned char *k = malloc(ntok * H * D * se), *v = malloc(ntok * H * D * se);
	unsigned char *touched;
	int64_t slots[17];
	uint32_t perm[24], i, h, d;
	struct cache c;
	struct kvrt_kv_cache kv;
	int bad = 0;

	REQUIRE(cache_init(&c, kind, L, H, D, T, N, dst) == 0);
	touched = calloc(c.bytes, 1);
	for (i = 0; i < N * T; i++)
		perm[i] = i;
	for (i = N * T - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1)), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (i = 0; i < ntok; i++) {
		slots[i] = i % 5 == 3 ? -1 : (int64_t)perm[i];
		for (h = 0; h < H; h++)
			for (d = 0; d < D; d++) {
				gen(src, k, ((size_t)i * H + h) * D + d, dst == KVRT_DTYPE_F16 ? 1e5 : 3);
				gen(src, v, ((size_t)i * H + h) * D + d, 3);
			}
	}
	kv = (struct kvrt_kv_cache){ .layout = &c.l, .base = c.base, .layer = layer };
	CHECK_EQ(kvrt_append_kv(&kv, k, v, src, slots, ntok), 0);
	for (i = 0; i < ntok; i++) {
		if (slots[i] < 0)
			continue;
		for (int w = 0; w < 2; w++)
			for (h = 0; h < H; h++) {
				size_t off = row_off(&c.l, layer, w, (uint64_t)slots[i] / T,
						     (uint32_t)(slots[i] % T), h);

				memset(touched + off, 1, D * de);
				for (d = 0; d < D; d++) {
					double x = load(src, w ? v : k, ((size_t)i * H + h) * D + d);
					double want = round_to(dst, x);
					double got = load(dst, c.base + off, d);

					if (got != want && !(isnan(got) && isnan(want)) && bad++ < 5)
						tap_diag("kind %d %d->%d tok %u kv %d h %u d %u: x %.9g want %.9g got %.9g",
							 kind, src, dst, i, w, h, d, x, want, got);
				}
			}
	}
	for (size_t b = 0; b < c.bytes; b++)
		if (!touched[b] && c.base[b] != SENTINEL && bad++ < 5)
			tap_diag("kind %d %d->%d: byte %zu outside the slots changed", kind, src, dst, b);
	CHECK_EQ(bad, 0);
	free(touched);
	free(k);
	free(v);
	cache_fini(&c);
}

/* The dtypes an append reads from and a plain cache holds. */
static const enum kvrt_dtype plain_dtypes[] = { KVRT_DTYPE_F32, KVRT_DTYPE_F16, KVRT_DTYPE_BF16 };

TEST(append_plain_dtypes_both_layouts)
{
	for (int kind = 0; kind < 2; kind++)
		for (int s = 0; s < 3; s++)
			for (int d = 0; d < 3; d++)
				for (int rep = 0; rep < 4; rep++)
					one_plain_case((enum kvrt_layout_kind)kind, plain_dtypes[s],
						       plain_dtypes[d]);
}

/* f32 -> f16 rounding at the edges, values chosen by hand. */
TEST(append_f16_rounding_by_hand)
{
	static const float x[8] = { 65504.0f, 65519.0f, 65520.0f, 1.0f + 0x1p-11f,
				    1.0f + 3 * 0x1p-11f, 0x1p-25f, 0x1.8p-24f, -0.0f };
	static const uint16_t want[8] = { 0x7bff, 0x7bff, 0x7c00, 0x3c00, 0x3c02, 0x0000, 0x0002,
					  0x8000 };
	struct cache c;
	struct kvrt_kv_cache kv;
	float v[8] = { 0 };
	int64_t slots[1] = { 0 };

	REQUIRE(cache_init(&c, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 8, 1, 1, KVRT_DTYPE_F16) == 0);
	kv = (struct kvrt_kv_cache){ .layout = &c.l, .base = c.base };
	CHECK_EQ(kvrt_append_kv(&kv, x, v, KVRT_DTYPE_F32, slots, 1), 0);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(((uint16_t *)c.base)[i], want[i]);
	cache_fini(&c);
}

/* ---- fp8 ----------------------------------------------------------------------- */

TEST(append_fp8_scale_rule_by_hand)
{
	struct cache c;
	struct kvrt_kv_cache kv;
	/* 1 layer, 1 head, dim 4, 4-token blocks, 2 blocks. */
	float k0[4] = { 448, 1, -2, 0.5f }, k1[4] = { 896, 0, 0, 0 }, k2[4] = { 0.25f, 0, 0, 0 };
	float z[4] = { 0 };
	int64_t s0 = 4, s1 = 5, s2 = 6;
	uint8_t *blk;

	REQUIRE(cache_init(&c, KVRT_LAYOUT_LAYER_MAJOR, 1, 1, 4, 4, 2, KVRT_DTYPE_FP8_E4M3) == 0);
	kv = (struct kvrt_kv_cache){ .layout = &c.l, .base = c.base, .scales = c.scales };
	blk = c.base + 4 * 4;	/* K of block 1 */

	/* Offset 0: scale = 448 / 448 = 1; every value exact. */
	CHECK_EQ(kvrt_append_kv(&kv, k0, z, KVRT_DTYPE_F32, &s0, 1), 0);
	CHECK(*scale_at(&c, 0, 0, 1, 0) == 1.0f);
	CHECK(*scale_at(&c, 0, 1, 1, 0) == 0.0f);	/* V all zero: scale 0 */
	CHECK_EQ(blk[0], 0x7e);	/* 448 = 1.75 * 2^8: e 15, m 6 */
	CHECK_EQ(blk[1], 0x38);	/* 1 */
	CHECK_EQ(blk[2], 0xc0);	/* -2 */
	CHECK_EQ(blk[3], 0x30);	/* 0.5 */
	CHECK_EQ(c.base[4 * 4 * 2 + 4 * 4], 0);		/* V row of block 1, offset 0 */

	/* Offset 1 with absmax 896: scale 2, offset 0 requantized, halves exact. */
	CHECK_EQ(kvrt_append_kv(&kv, k1, z, KVRT_DTYPE_F32, &s1, 1), 0);
	CHECK(*scale_at(&c, 0, 0, 1, 0) == 2.0f);
	CHECK_EQ(blk[0], 0x76);	/* 224 = 1.75 * 2^7 */
	CHECK_EQ(blk[1], 0x30);	/* 0.5 */
	CHECK_EQ(blk[2], 0xb8);	/* -1 */
	CHECK_EQ(blk[3], 0x28);	/* 0.25 */
	CHECK_EQ(blk[4], 0x7e);	/* 896 / 2 = 448 */

	/* Offset 2, smaller: the scale stays, 0.25 / 2 = 0.125 exact. */
	CHECK_EQ(kvrt_append_kv(&kv, k2, z, KVRT_DTYPE_F32, &s2, 1), 0);
	CHECK(*scale_at(&c, 0, 0, 1, 0) == 2.0f);
	CHECK_EQ(blk[8], 0x20);	/* 0.125 = 2^-3: e 4 */
	CHECK_EQ(blk[4], 0x7e);

	/* Reusing the block: offset 0 starts afresh with its own absmax. */
	CHECK_EQ(kvrt_append_kv(&kv, k2, z, KVRT_DTYPE_F32, &s0, 1), 0);
	CHECK(*scale_at(&c, 0, 0, 1, 0) == 0.25f / 448.0f);
	CHECK_EQ(blk[0], 0x7e);	/* 0.25 / (0.25 / 448) = 448 */
	/* Block 0 never written: its stale scale untouched. */
	CHECK(*scale_at(&c, 0, 0, 0, 0) == 12345.0f);
	cache_fini(&c);
}

/* The half ulp of an e4m3 value y (no scale). */
static double fp8_half_ulp(double y)
{
	int e;

	if (y == 0)
		return ldexp(1.0, -10);
	frexp(y, &e);
	e -= 1;
	if (e < -6)
		e = -6;
	return ldexp(1.0, e - 4);
}

/*
 * Sequences appended token by token and in prefill chunks over several
 * calls, into both layouts, from every source dtype.  The model keeps, per
 * (kv, block, head), the absmax since the block's offset 0, and per row
 * how many times its block's scale rose after the row was written.  Rows
 * written by a call are checked right after it: exact scales; rows whose
 * scale did not rise since are correctly rounded (within half an e4m3 ulp
 * of x / scale); requantized ones within (raises + 1) roundings.
 */
static void one_fp8_case(enum kvrt_layout_kind kind, enum kvrt_dtype src)
{
	enum { L = 2, H = 3, D = 8, T = 4, N = 12, SEQS = 3, MAXTOK = 14 };
	const uint32_t layer = 1;
	static int raises[2][N * T][H];
	double amax[2][N][H];
	int lens[SEQS] = { 0 }, blocks[SEQS][4], bad = 0;
	uint32_t nb = 0, s, i, h, d;
	struct cache c;
	struct kvrt_kv_cache kv;

	memset(raises, 0, sizeof(raises));
	memset(amax, 0, sizeof(amax));
	REQUIRE(cache_init(&c, kind, L, H, D, T, N, KVRT_DTYPE_FP8_E4M3) == 0);
	kv = (struct kvrt_kv_cache){ .layout = &c.l, .base = c.base, .scales = c.scales,
				     .layer = layer };
	/* Blocks handed out in a scrambled order, 4 per sequence. */
	for (s = 0; s < SEQS; s++)
		for (i = 0; i < 4; i++)
			blocks[s][i] = (int)((7 * nb++ + 3) % N);

	for (int call = 0; call < 12; call++) {
		static unsigned char k[SEQS * 6 * H * D * 4], v[SEQS * 6 * H * D * 4];
		int64_t slots[SEQS * 6];
		uint32_t n = 0;

		/* Each call: every sequence gets 1 token, or a chunk of up to 6. */
		for (s = 0; s < SEQS; s++) {
			int add = call == 0 || rnd() % 3 == 0 ? 1 + (int)(rnd() % 6) : 1;

			for (int a = 0; a < add && lens[s] < MAXTOK; a++, lens[s]++, n++) {
				int p = lens[s];
				/* Now and then a loud token, to raise the scale. */
				double mag = rnd() % 5 == 0 ? 40.0 : 1.0;

				slots[n] = (int64_t)blocks[s][p / T] * T + p % T;
				for (h = 0; h < H; h++)
					for (d = 0; d < D; d++) {
						gen(src, k, ((size_t)n * H + h) * D + d, mag);
						gen(src, v, ((size_t)n * H + h) * D + d, mag);
					}
			}
		}
		if (!n)
			break;
		CHECK_EQ(kvrt_append_kv(&kv, k, v, src, slots, n), 0);
		/* The model, token by token in order. */
		for (i = 0; i < n; i++) {
			uint32_t b = (uint32_t)(slots[i] / T), t = (uint32_t)(slots[i] % T);

			for (int w = 0; w < 2; w++)
				for (h = 0; h < H; h++) {
					double a = 0;

					for (d = 0; d < D; d++)
						a = fmax(a, fabs(load(src, w ? v : k,
								      ((size_t)i * H + h) * D + d)));
					if (t == 0) {
						amax[w][b][h] = a;
					} else if (a > amax[w][b][h]) {
						amax[w][b][h] = a;
						for (uint32_t u = 0; u < T; u++)
							raises[w][b * T + u][h]++;
					}
					raises[w][b * T + t][h] = 0;
				}
		}
		for (i = 0; i < n; i++) {
			uint32_t b = (uint32_t)(slots[i] / T), t = (uint32_t)(slots[i] % T);

			for (int w = 0; w < 2; w++)
				for (h = 0; h < H; h++) {
					float sc = *scale_at(&c, layer, w, b, h);
					double want = (float)((float)amax[w][b][h] / 448.0f);
					const uint8_t *row = c.base + row_off(&c.l, layer, w, b, t, h);
					int r = raises[w][b * T + t][h];

					if (fabs(sc - want) > 1e-6 * want && bad++ < 5)
						tap_diag("scale kv %d block %u head %u: %.9g, want %.9g",
							 w, b, h, sc, want);
					for (d = 0; d < D; d++) {
						double x = load(src, w ? v : k, ((size_t)i * H + h) * D + d);
						double q = dec_fp8(row[d]);
						bool ok;

						if (sc == 0)
							ok = q == 0;
						else if (!r)
							ok = fabs(q - x / sc) <= fp8_half_ulp(x / sc) * 1.0001;
						else
							ok = fabs(q * sc - x) <=
							     (r + 1) * (0x1p-4 * fabs(x) * 1.01 + 0x1p-10 * sc);
						if (!ok && bad++ < 5)
							tap_diag("kind %d src %d kv %d b %u t %u h %u d %u raises %d: x %.6g q %.6g scale %.6g",
								 kind, src, w, b, t, h, d, r, x, q, sc);
					}
				}
		}
	}
	CHECK_EQ(bad, 0);
	cache_fini(&c);
}

TEST(append_fp8_sequences_vs_model)
{
	for (int kind = 0; kind < 2; kind++)
		for (int s = 0; s < 3; s++)
			for (int rep = 0; rep < 6; rep++)
				one_fp8_case((enum kvrt_layout_kind)kind, plain_dtypes[s]);
}

/*
 * Requantization bound: a block filled token by token with growing
 * magnitudes; every earlier value stays within (raises + 1) half-ulps
 * (relative 2^-4, or 2^-10 of the scale near zero) of what was written.
 */
TEST(append_fp8_requantized_values_bounded)
{
	enum { D = 16, T = 16 };
	float x[T][D];
	int raises[T] = { 0 }, bad = 0;
	float amax = 0;
	struct cache c;
	struct kvrt_kv_cache kv;

	REQUIRE(cache_init(&c, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, D, T, 1, KVRT_DTYPE_FP8_E4M3) == 0);
	kv = (struct kvrt_kv_cache){ .layout = &c.l, .base = c.base, .scales = c.scales };
	for (int t = 0; t < T; t++) {
		float a = 0;
		int64_t slot = t;

		for (int d = 0; d < D; d++) {
			x[t][d] = (float)((urand() * 2 - 1) * pow(1.6, t));
			a = fmaxf(a, fabsf(x[t][d]));
		}
		if (t && a > amax)
			for (int u = 0; u < t; u++)
				raises[u]++;
		if (!t || a > amax)
			amax = a;
		CHECK_EQ(kvrt_append_kv(&kv, x[t], x[t], KVRT_DTYPE_F32, &slot, 1), 0);
	}
	CHECK(fabsf(c.scales[0] - amax / 448.0f) <= 1e-6f * amax);
	for (int t = 0; t < T; t++)
		for (int d = 0; d < D; d++) {
			double got = dec_fp8(c.base[t * D + d]) * c.scales[0];
			double tol = (raises[t] + 1) * (0x1p-4 * fabs(x[t][d]) * 1.01 +
							0x1p-10 * c.scales[0]);

			if (fabs(got - x[t][d]) > tol && bad++ < 5)
				tap_diag("t %d d %d raises %d: %.6g for %.6g (tol %.3g)", t, d,
					 raises[t], got, x[t][d], tol);
		}
	CHECK_EQ(bad, 0);
	cache_fini(&c);
}

/* ---- errors ---------------------------------------------------------------------- */

TEST(append_errors_write_nothing)
{
	struct cache c, f8;
	struct kvrt_kv_cache kv, kv8;
	struct kvrt_layout bad;
	float k[2 * 2 * 4] = { 1, 2, 3, 4 }, v[2 * 2 * 4] = { 5, 6, 7, 8 };
	int64_t slots[2] = { 0, 1 }, oob[2] = { 3, 4 * 5 }, neg[2] = { -1, -7 };
	unsigned char *snap;

	/* L 2, H 2, D 4, T 4, N 5, f16. */
	REQUIRE(cache_init(&c, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 4, 4, 5, KVRT_DTYPE_F16) == 0);
	REQUIRE(cache_init(&f8, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 4, 4, 5, KVRT_DTYPE_FP8_E4M3) == 0);
	snap = malloc(c.bytes);
	memcpy(snap, c.base, c.bytes);
	kv = (struct kvrt_kv_cache){ .layout = &c.l, .base = c.base, .layer = 1 };

	CHECK_EQ(kvrt_append_kv(NULL, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	kv.layout = NULL;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	kv.layout = &c.l;
	kv.base = NULL;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	kv.base = c.base;
	kv.layer = 2;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	kv.layer = 1;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_FP8_E4M3, slots, 2), -EINVAL);
	CHECK_EQ(kvrt_append_kv(&kv, k, v, (enum kvrt_dtype)7, slots, 2), -EINVAL);
	CHECK_EQ(kvrt_append_kv(&kv, NULL, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	CHECK_EQ(kvrt_append_kv(&kv, k, NULL, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, NULL, 2), -EINVAL);
	/* A bad slot after a good one: nothing is written, not even the first. */
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, oob, 2), -EINVAL);
	/* A layout whose strides overflow. */
	bad = c.l;
	bad.block_stride = INT64_MAX / 2;
	kv.layout = &bad;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	bad = c.l;
	bad.head_dim = 0;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	kv.layout = &c.l;
	/* Nothing to do: fine with NULL arrays; negative slots are skipped. */
	CHECK_EQ(kvrt_append_kv(&kv, NULL, NULL, KVRT_DTYPE_F32, NULL, 0), 0);
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, neg, 2), 0);
	CHECK(!memcmp(snap, c.base, c.bytes));
	/* fp8 needs its scales. */
	kv8 = (struct kvrt_kv_cache){ .layout = &f8.l, .base = f8.base };
	CHECK_EQ(kvrt_append_kv(&kv8, k, v, KVRT_DTYPE_F32, slots, 2), -EINVAL);
	kv8.scales = f8.scales;
	CHECK_EQ(kvrt_append_kv(&kv8, k, v, KVRT_DTYPE_F32, slots, 2), 0);
	/* The last slot of the cache is valid. */
	slots[0] = 4 * 5 - 1;
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, 1), 0);
	free(snap);
	cache_fini(&c);
	cache_fini(&f8);
}

/*
 * Strides need only be whole bytes: an f32 cache at odd offsets, appended
 * from bf16 (so each element is converted and stored one by one), must
 * hold the exact values.  (The fuzzer found the stores were typed float
 * accesses at misaligned addresses: undefined, caught by -fsanitize=alignment.)
 */
TEST(append_misaligned_strides)
{
	enum { D = 8, T = 2 };
	struct kvrt_layout l;
	struct kvrt_kv_cache kv;
	uint16_t k[D], v[D];	/* bf16: 1 + d/4 and -(1 + d/4), exact in f32 */
	int64_t slot = 1;
	unsigned char *mem;
	float got;

	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, D, T, 1, KVRT_DTYPE_F32) == 0);
	l.token_stride += 1;	/* tokens 33 bytes apart */
	l.kv_stride = 2 * l.token_stride + 3;
	l.layer_stride = l.block_stride = 2 * l.kv_stride;
	mem = calloc(1, (size_t)l.block_stride + 8);
	REQUIRE(mem != NULL);
	for (int d = 0; d < D; d++) {
		float f = 1.0f + (float)d / 4, g = -f;
		uint32_t b;

		memcpy(&b, &f, 4);
		k[d] = (uint16_t)(b >> 16);
		memcpy(&b, &g, 4);
		v[d] = (uint16_t)(b >> 16);
	}
	kv = (struct kvrt_kv_cache){ .layout = &l, .base = mem + 1 };
	CHECK_EQ(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_BF16, &slot, 1), 0);
	for (int d = 0; d < D; d++) {
		memcpy(&got, mem + 1 + l.token_stride + 4 * d, 4);
		CHECK(got == 1.0f + (float)d / 4);
		memcpy(&got, mem + 1 + l.kv_stride + l.token_stride + 4 * d, 4);
		CHECK(got == -(1.0f + (float)d / 4));
	}
	free(mem);
}

int main(void)
{
	RUN(append_plain_dtypes_both_layouts);
	RUN(append_f16_rounding_by_hand);
	RUN(append_fp8_scale_rule_by_hand);
	RUN(append_fp8_sequences_vs_model);
	RUN(append_fp8_requantized_values_bounded);
	RUN(append_errors_write_nothing);
	RUN(append_misaligned_strides);
	return tap_done("test_append");
}
