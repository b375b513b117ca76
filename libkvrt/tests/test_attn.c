// SPDX-License-Identifier: MIT
/*
 * test_attn: kvrt_attn_decode() and kvrt_attn_prefill(), both
 * implementations (and every fast kernel this CPU has: the best one, and
 * KVRT_CPU_ISA = avx512, avx2, generic), against a float64 attention written here from
 * scratch: K and V of each sequence are gathered from the paged cache into
 * dense arrays (decoded by the tests' own dtype decoders, kv_data.h), then attention
 * is computed in double.
 *
 * Random shapes: block sizes 1, 2, 16, 64, 128, 256; ragged sequence
 * lengths including 1 and exact block multiples; GQA ratios 1, 4, 8; head
 * dims 64, 128, 80 and 36 (vector tails); K/V in f32, f16, bf16, fp8 e4m3
 * with per-(layer, kv, block, head) scales; q and out in f32, f16, bf16;
 * sliding window; soft-cap; block-major, layer-major and a padded
 * head-major layout; layer 1 of 2 (layer 0 is NaN, as is every slot past a
 * sequence's length and, for decode, before its window).  Prefill runs
 * whole prompts in several chunks, each attending to the earlier ones.
 *
 * Tolerances, as a maximum over a row's dims of |out - ref| divided by the
 * largest |v| the row attends to (the scale of a convex combination of V):
 *
 *   out f32    1e-5   (f32 arithmetic: dot products, exp, sums)
 *   out f16    1e-5 + 2^-11   (plus half an ulp of the rounded output)
 *   out bf16   1e-5 + 2^-8
 *
 * K, V and q are compared as stored: the reference uses the same rounded
 * (f16, bf16) or dequantised (fp8 x scale) values, so input rounding is
 * not in the error.  A perturbation test checks that the comparison fails
 * when the output is off by a few tolerances.
 *
 * Every case also runs through kvrt_attn_decode_on() / _prefill_on() on
 * three kept worker threads ("fast/kept").
 *
 * Also: the fast path is bitwise identical for 1, 2, 3 and 16 threads,
 * created per call or kept (kvrt_workers), and when several threads share
 * one workers object each call still gets its own output; every
 * -EINVAL of the validation, each leaving the output untouched.
 *
 * Prints TAP (one line per group of checks, one per error case) and
 * "# test_attn: N passed, N failed, N skipped"; exits 1 on any failure.  KVRT_TEST_SEED
 * overrides the seed, KVRT_TEST_CASES the number of random cases.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"
#include "kv_data.h"

/*
 * TAP (selftests/tap.h): checks are gathered into groups, one result line
 * each (the error-path checks are one line each); a failed check prints a
 * "# FAIL" diagnostic with the case's shape at once.
 */
static int grp_pass, grp_fail;
static double worst[6][3];	/* [impl][out dtype]: largest error seen */

#define GROUP_CHECK(cond, ...)                                              \
	do {                                                                \
		if (cond) {                                                 \
			grp_pass++;                                         \
		} else {                                                    \
			grp_fail++;                                         \
			printf("# FAIL %s:%d: ", __FILE__, __LINE__);       \
			printf(__VA_ARGS__);                                \
			printf("\n");                                       \
		}                                                           \
	} while (0)

/* Ends a group of checks: one TAP line. */
__attribute__((format(printf, 1, 2)))
static void group_end(const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (grp_pass + grp_fail > 1)
		tap_result(!grp_fail, "%s (%d checks, %d failed)", what, grp_pass + grp_fail,
			   grp_fail);
	else
		tap_result(!grp_fail, "%s", what);
	grp_pass = grp_fail = 0;
}

/* Random numbers, element codecs, layout offsets: kv_data.h. */

/* ---- layouts, filled here from the formulas in kvrt.h -------------------- */

enum { LAYOUT_BLOCK_MAJOR, LAYOUT_LAYER_MAJOR, LAYOUT_PADDED, NR_LAYOUTS };
static const char *layout_name[] = { "block-major", "layer-major", "padded" };

static void fill_layout(struct kvrt_layout *lo, int kind, uint32_t layers, uint32_t heads,
			uint32_t hd, uint32_t bt, uint32_t nblocks, enum kvrt_dtype dt)
{
	int64_t es = (int64_t)esize(dt), row = hd * es;

	*lo = (struct kvrt_layout){ .num_layers = layers, .num_kv_heads = heads, .head_dim = hd,
				    .block_tokens = bt, .num_blocks = nblocks, .kv_dtype = dt };
	switch (kind) {
	case LAYOUT_BLOCK_MAJOR:	/* [block][layer][kv][token][head][dim] */
		lo->head_stride = row;
		lo->token_stride = heads * row;
		lo->kv_stride = bt * lo->token_stride;
		lo->layer_stride = 2 * lo->kv_stride;
		lo->block_stride = layers * lo->layer_stride;
		lo->scale_kv_stride = heads;
		lo->scale_layer_stride = 2 * heads;
		lo->scale_block_stride = 2 * heads * layers;
		break;
	case LAYOUT_LAYER_MAJOR:	/* [layer][kv][block][token][head][dim] */
		lo->head_stride = row;
		lo->token_stride = heads * row;
		lo->block_stride = bt * lo->token_stride;
		lo->kv_stride = nblocks * lo->block_stride;
		lo->layer_stride = 2 * lo->kv_stride;
		lo->scale_block_stride = heads;
		lo->scale_kv_stride = (int64_t)nblocks * heads;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride;
		break;
	default:	/* [block][layer][kv][head][token][dim], gaps everywhere */
		lo->token_stride = row + 24;
		lo->head_stride = bt * lo->token_stride + 8;
		lo->kv_stride = heads * lo->head_stride + 40;
		lo->layer_stride = 2 * lo->kv_stride + 16;
		lo->block_stride = layers * lo->layer_stride + 128;
		lo->scale_block_stride = heads + 3;
		lo->scale_kv_stride = (int64_t)nblocks * (heads + 3) + 1;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride + 5;
		break;
	}
}

/* ---- a test case ------------------------------------------------------------- */

struct tcase {
	uint32_t bt, nkv, group, hd, nseq;
	enum kvrt_dtype kv_dt, q_dt, o_dt;
	int layout;
	int32_t window;
	float softcap;
	double qamp;		/* query magnitude: larger = peakier softmax */
	uint32_t lens[8];	/* final sequence lengths */
	uint32_t extra[8];	/* unused blocks at the end of a sequence's list */
};

struct world {
	struct tcase tc;
	struct kvrt_layout lo;
	uint8_t *cache;
	float *scales;
	int32_t *indptr, *indices;
	uint32_t layer;
};

static void world_free(struct world *w)
{
	free(w->cache);
	free(w->scales);
	free(w->indptr);
	free(w->indices);
}

/*
 * Random blocks for every sequence, K/V data in every slot below its
 * length, NaN in every other slot and in every other layer.
 */
static void world_make(struct world *w, const struct tcase *tc)
{
	uint32_t s, nblocks = 0, i, l = 1, h, d;
	uint32_t *perm;
	size_t bytes;

	memset(w, 0, sizeof(*w));
	w->tc = *tc;
	w->layer = l;
	for (s = 0; s < tc->nseq; s++)
		nblocks += (tc->lens[s] + tc->bt - 1) / tc->bt + tc->extra[s];
	nblocks += 3;	/* never used: more NaN */
	fill_layout(&w->lo, tc->layout, 2, tc->nkv, tc->hd, tc->bt, nblocks, tc->kv_dt);
	bytes = layout_bytes(&w->lo);
	w->cache = malloc(bytes);
	for (i = 0; i < bytes / esize(tc->kv_dt); i++)
		poison(tc->kv_dt, w->cache, i);
	if (tc->kv_dt == KVRT_DTYPE_FP8_E4M3) {
		size_t n = scales_count(&w->lo);

		w->scales = malloc(sizeof(float) * n);
		for (i = 0; i < n; i++)
			w->scales[i] = NAN;
	}

	perm = malloc(sizeof(*perm) * nblocks);
	for (i = 0; i < nblocks; i++)
		perm[i] = i;
	for (i = nblocks - 1; i > 0; i--) {
		uint32_t j = rnd_below(i + 1), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	w->indptr = malloc(sizeof(int32_t) * (tc->nseq + 1));
	w->indices = malloc(sizeof(int32_t) * nblocks);
	w->indptr[0] = 0;
	for (s = 0, i = 0; s < tc->nseq; s++) {
		uint32_t nb = (tc->lens[s] + tc->bt - 1) / tc->bt + tc->extra[s], b;

		for (b = 0; b < nb; b++)
			w->indices[w->indptr[s] + b] = (int32_t)perm[i++];
		w->indptr[s + 1] = w->indptr[s] + (int32_t)nb;
	}
	free(perm);

	for (s = 0; s < tc->nseq; s++) {
		uint32_t p;

		for (p = 0; p < tc->lens[s]; p++) {
			int64_t blk = w->indices[w->indptr[s] + p / tc->bt];
			int kv;

			for (kv = 0; kv < 2; kv++) {
				for (h = 0; h < tc->nkv; h++) {
					uint8_t *row = w->cache + elem_off(&w->lo, l, kv, blk,
									   p % tc->bt, h);
					double sc = 1.0;

					if (w->scales) {
						float *scp = &w->scales[scale_idx(&w->lo, l, kv, blk, h)];

						if (isnan(*scp))	/* 2^-6 .. 2^-3 */
							*scp = (float)ldexp(1.0 + rnd_below(64) / 64.0,
									    -6 + (int)rnd_below(3));
						sc = *scp;
					}
					for (d = 0; d < tc->hd; d++)
						enc(tc->kv_dt, row, d, 2.0 * rnd_unit() / sc);
				}
			}
		}
	}
}

/* Dequantised K or V element, read from the cache as the test lays it out. */
static double kv_at(const struct world *w, uint32_t s, int kv, int64_t p, uint32_t h, uint32_t d)
{
	int64_t blk = w->indices[w->indptr[s] + p / w->tc.bt];
	double v = dec(w->tc.kv_dt, w->cache + elem_off(&w->lo, w->layer, kv, blk, p % w->tc.bt, h),
		       d);

	if (w->scales)
		v *= w->scales[scale_idx(&w->lo, w->layer, kv, blk, h)];
	return v;
}

/* NaN into K and V of positions [p0, p1) of sequence s (all heads). */
static void poison_range(struct world *w, uint32_t s, int64_t p0, int64_t p1)
{
	int64_t p;
	uint32_t h, d;
	int kv;

	for (p = p0; p < p1; p++) {
		int64_t blk = w->indices[w->indptr[s] + p / w->tc.bt];

		for (kv = 0; kv < 2; kv++)
			for (h = 0; h < w->tc.nkv; h++)
				for (d = 0; d < w->tc.hd; d++)
					poison(w->tc.kv_dt, w->cache + elem_off(&w->lo, w->layer, kv,
										blk, p % w->tc.bt, h), d);
	}
}

/* ---- the float64 attention -------------------------------------------------- */

struct dense {
	uint32_t len, nkv, hd;
	double *k, *v;		/* [len][nkv][hd] */
};

static void dense_gather(struct dense *dn, const struct world *w, uint32_t s, uint32_t len)
{
	uint32_t p, h, d;

	dn->len = len;
	dn->nkv = w->tc.nkv;
	dn->hd = w->tc.hd;
	dn->k = malloc(sizeof(double) * len * dn->nkv * dn->hd);
	dn->v = malloc(sizeof(double) * len * dn->nkv * dn->hd);
	for (p = 0; p < len; p++)
		for (h = 0; h < dn->nkv; h++)
			for (d = 0; d < dn->hd; d++) {
				size_t i = ((size_t)p * dn->nkv + h) * dn->hd + d;

				dn->k[i] = kv_at(w, s, 0, p, h, d);
				dn->v[i] = kv_at(w, s, 1, p, h, d);
			}
}

static void dense_free(struct dense *dn)
{
	free(dn->k);
	free(dn->v);
}

/*
 * out[hd] = attention of query q[hd] (head h) at position pos over dn;
 * *vscale = the largest |v| among the keys it attends to.
 */
static void dense_attend(const struct dense *dn, const struct tcase *tc, float sm_scale,
			 const double *q, uint32_t h, int64_t pos, double *out, double *vscale)
{
	uint32_t kvh = h / tc->group, d;
	int64_t lo = tc->window >= 0 && pos - tc->window > 0 ? pos - tc->window : 0, p;
	double *x = malloc(sizeof(double) * (size_t)(pos - lo + 1)), mx = -INFINITY, sum = 0;

	for (p = lo; p <= pos; p++) {
		const double *k = dn->k + ((size_t)p * dn->nkv + kvh) * dn->hd;
		double dot = 0;

		for (d = 0; d < dn->hd; d++)
			dot += q[d] * k[d];
		dot *= sm_scale;
		if (tc->softcap > 0)
			dot = tc->softcap * tanh(dot / tc->softcap);
		x[p - lo] = dot;
		if (dot > mx)
			mx = dot;
	}
	for (d = 0; d < dn->hd; d++)
		out[d] = 0;
	*vscale = 0;
	for (p = lo; p <= pos; p++) {
		const double *v = dn->v + ((size_t)p * dn->nkv + kvh) * dn->hd;
		double e = exp(x[p - lo] - mx);

		sum += e;
		for (d = 0; d < dn->hd; d++) {
			out[d] += e * v[d];
			if (fabs(v[d]) > *vscale)
				*vscale = fabs(v[d]);
		}
	}
	for (d = 0; d < dn->hd; d++)
		out[d] /= sum;
	free(x);
}

static double tolerance(enum kvrt_dtype o)
{
	return 1e-5 + (o == KVRT_DTYPE_F16 ? 0x1p-11 : o == KVRT_DTYPE_BF16 ? 0x1p-8 : 0);
}

/* Largest scaled error of out rows [row0, row0 + nrows) against expected. */
struct expect {
	double *ref;		/* [rows][hd] */
	double *vscale;		/* [rows] */
};

static double max_err(const struct tcase *tc, const void *out, const struct expect *ex,
		      size_t nrows, size_t *where)
{
	double worst = 0;
	size_t r, d;

	for (r = 0; r < nrows; r++)
		for (d = 0; d < tc->hd; d++) {
			double o = dec(tc->o_dt, out, r * tc->hd + d);
			double e = fabs(o - ex->ref[r * tc->hd + d]) / ex->vscale[r];

			if (!(e <= worst)) {	/* NaN wins */
				worst = e;
				*where = r;
				if (isnan(e))
					return e;
			}
		}
	return worst;
}

/* ---- implementations under test ------------------------------------------ */

struct impl {
	const char *name;
	enum kvrt_attn_impl impl;
	const char *isa;	/* KVRT_CPU_ISA, NULL to unset */
	uint32_t threads;
	bool kept;		/* through the _on calls, on the kept workers */
};

static const struct impl impls[] = {
	{ "reference", KVRT_ATTN_REFERENCE, NULL, 1, false },
	{ "fast/best", KVRT_ATTN_FAST, NULL, 0, false },	/* avx512bf16 where the CPU has it */
	{ "fast/avx512", KVRT_ATTN_FAST, "avx512", 1, false },
	{ "fast/avx2", KVRT_ATTN_FAST, "avx2", 2, false },
	{ "fast/generic", KVRT_ATTN_FAST, "generic", 3, false },
	{ "fast/kept", KVRT_ATTN_FAST, NULL, 0, true },
};
#define NR_IMPLS (sizeof(impls) / sizeof(impls[0]))

/* 3 threads kept for the "fast/kept" runs, created in main() */
static struct kvrt_workers *kept;

static void set_isa(const char *isa)
{
	if (isa)
		setenv("KVRT_CPU_ISA", isa, 1);
	else
		unsetenv("KVRT_CPU_ISA");
}

static void describe(char *buf, size_t n, const struct tcase *tc, const char *what)
{
	int o = snprintf(buf, n,
			 "%s bt=%u nkv=%u group=%u hd=%u kv=%s q=%s o=%s %s window=%d cap=%g qamp=%g lens=",
			 what, tc->bt, tc->nkv, tc->group, tc->hd, dtname(tc->kv_dt), dtname(tc->q_dt),
			 dtname(tc->o_dt), layout_name[tc->layout], tc->window, tc->softcap,
			 tc->qamp);
	uint32_t s;

	for (s = 0; s < tc->nseq && o < (int)n; s++)
		o += snprintf(buf + o, n - o, "%u%s", tc->lens[s], s + 1 < tc->nseq ? "," : "");
}

/* ---- decode ------------------------------------------------------------------- */

/*
 * Run implementation i over the world w of case tc: decode where q_indptr
 * is NULL, else prefill of the chunks it gives.  The output is poisoned
 * first.  Returns the call's result; *err is the output's error against
 * ex (NaN where the call failed, row in *where), also kept in worst[][].
 */
static int attend_impl(uint32_t i, const struct tcase *tc, const struct world *w,
		       int32_t *seq_lens, const void *q, const int32_t *q_indptr, void *out,
		       const struct expect *ex, size_t nrows, double *err, size_t *where)
{
	struct kvrt_kv_cache kv = { &w->lo, w->cache, w->scales, w->layer };
	struct kvrt_block_table bt = { tc->nseq, w->indptr, w->indices, seq_lens };
	struct kvrt_attn_params p = {
		.num_q_heads = tc->nkv * tc->group, .sm_scale = 1.0f / sqrtf((float)tc->hd),
		.window_left = tc->window, .logit_softcap = tc->softcap, .q_dtype = tc->q_dt,
		.o_dtype = tc->o_dt, .impl = impls[i].impl, .num_threads = impls[i].threads,
	};
	int ret;

	set_isa(impls[i].isa);
	memset(out, 0xff, nrows * tc->hd * esize(tc->o_dt));
	if (!q_indptr)
		ret = impls[i].kept ? kvrt_attn_decode_on(kept, &p, q, &kv, &bt, out) :
				      kvrt_attn_decode(&p, q, &kv, &bt, out);
	else
		ret = impls[i].kept ? kvrt_attn_prefill_on(kept, &p, q, q_indptr, &kv, &bt, out) :
				      kvrt_attn_prefill(&p, q, q_indptr, &kv, &bt, out);
	set_isa(NULL);
	*err = ret ? NAN : max_err(tc, out, ex, nrows, where);
	if (*err > worst[i][tc->o_dt])
		worst[i][tc->o_dt] = *err;
	return ret;
}

static void run_decode(const struct tcase *tc)
{
	uint32_t nq = tc->nkv * tc->group, s, h, d, i;
	size_t nrows = (size_t)tc->nseq * nq;
	float sm = 1.0f / sqrtf((float)tc->hd);
	struct world w;
	struct expect ex;
	void *q, *out;
	int32_t seq_lens[8];
	char desc[512];

	world_make(&w, tc);
	for (s = 0; s < tc->nseq; s++) {
		seq_lens[s] = (int32_t)tc->lens[s];
		if (tc->window >= 0 && (int64_t)tc->lens[s] - 1 - tc->window > 0)
			poison_range(&w, s, 0, tc->lens[s] - 1 - tc->window);
	}
	q = malloc(nrows * tc->hd * esize(tc->q_dt));
	out = malloc(nrows * tc->hd * esize(tc->o_dt));
	for (i = 0; i < nrows * tc->hd; i++)
		enc(tc->q_dt, q, i, tc->qamp * rnd_unit());

	ex.ref = malloc(sizeof(double) * nrows * tc->hd);
	ex.vscale = malloc(sizeof(double) * nrows);
	for (s = 0; s < tc->nseq; s++) {
		struct dense dn;
		double *qd = malloc(sizeof(double) * tc->hd);

		/* gather only what the query may see: poisoned slots stay out */
		dense_gather(&dn, &w, s, tc->lens[s]);
		for (h = 0; h < nq; h++) {
			size_t r = (size_t)s * nq + h;

			for (d = 0; d < tc->hd; d++)
				qd[d] = dec(tc->q_dt, q, r * tc->hd + d);
			dense_attend(&dn, tc, sm, qd, h, tc->lens[s] - 1, ex.ref + r * tc->hd,
				     &ex.vscale[r]);
		}
		free(qd);
		dense_free(&dn);
	}

	for (i = 0; i < NR_IMPLS; i++) {
		size_t where = 0;
		double err;
		int ret = attend_impl(i, tc, &w, seq_lens, q, NULL, out, &ex, nrows, &err, &where);

		describe(desc, sizeof(desc), tc, impls[i].name);
		GROUP_CHECK(!ret && err <= tolerance(tc->o_dt),
		      "decode %s: ret %d, err %.3g (tol %.3g) at seq %zu head %zu", desc, ret, err,
		      tolerance(tc->o_dt), where / nq, where % nq);
	}

	free(ex.ref);
	free(ex.vscale);
	free(q);
	free(out);
	world_free(&w);
}

/* ---- prefill in chunks ------------------------------------------------------- */

/*
 * Every sequence's prompt goes through in rounds; in round c, sequence s
 * runs its chunk c (possibly empty) with seq_lens = the tokens so far, and
 * the chunk's rows are checked against attention over the dense prefix.
 */
static void run_prefill(const struct tcase *tc, uint32_t rounds)
{
	uint32_t nq = tc->nkv * tc->group, s, h, d, i, c, j;
	float sm = 1.0f / sqrtf((float)tc->hd);
	uint32_t cut[8][9];	/* sequence s, chunk c: tokens [cut[c], cut[c + 1]) */
	struct dense dn[8];
	struct world w;
	char desc[512];

	world_make(&w, tc);
	for (s = 0; s < tc->nseq; s++) {
		cut[s][0] = 0;
		cut[s][rounds] = tc->lens[s];
		for (c = 1; c < rounds; c++) {	/* sorted random cuts */
			uint32_t x = rnd_below(tc->lens[s] + 1);

			for (j = c; j > 1 && cut[s][j - 1] > x; j--)
				cut[s][j] = cut[s][j - 1];
			cut[s][j] = x;
		}
		dense_gather(&dn[s], &w, s, tc->lens[s]);
	}

	for (c = 0; c < rounds; c++) {
		int32_t seq_lens[8], q_indptr[9];
		struct expect ex;
		size_t nrows;
		void *q, *out;

		q_indptr[0] = 0;
		for (s = 0; s < tc->nseq; s++) {
			uint32_t len = cut[s][c + 1];

			/* an empty chunk still needs seq_lens >= 1 */
			seq_lens[s] = len ? (int32_t)len : 1;
			q_indptr[s + 1] = q_indptr[s] + (int32_t)(cut[s][c + 1] - cut[s][c]);
		}
		nrows = (size_t)q_indptr[tc->nseq] * nq;
		if (!nrows)
			continue;
		q = malloc(nrows * tc->hd * esize(tc->q_dt));
		out = malloc(nrows * tc->hd * esize(tc->o_dt));
		ex.ref = malloc(sizeof(double) * nrows * tc->hd);
		ex.vscale = malloc(sizeof(double) * nrows);
		for (i = 0; i < nrows * tc->hd; i++)
			enc(tc->q_dt, q, i, tc->qamp * rnd_unit());
		for (s = 0; s < tc->nseq; s++) {
			double *qd = malloc(sizeof(double) * tc->hd);

			for (j = (uint32_t)q_indptr[s]; j < (uint32_t)q_indptr[s + 1]; j++) {
				int64_t pos = cut[s][c] + (j - q_indptr[s]);

				for (h = 0; h < nq; h++) {
					size_t r = (size_t)j * nq + h;

					for (d = 0; d < tc->hd; d++)
						qd[d] = dec(tc->q_dt, q, r * tc->hd + d);
					dense_attend(&dn[s], tc, sm, qd, h, pos, ex.ref + r * tc->hd,
						     &ex.vscale[r]);
				}
			}
			free(qd);
		}

		for (i = 0; i < NR_IMPLS; i++) {
			size_t where = 0;
			double err;
			int ret = attend_impl(i, tc, &w, seq_lens, q, q_indptr, out, &ex, nrows, &err,
					      &where);

			describe(desc, sizeof(desc), tc, impls[i].name);
			GROUP_CHECK(!ret && err <= tolerance(tc->o_dt),
			      "prefill round %u/%u %s: ret %d, err %.3g (tol %.3g) at row %zu", c,
			      rounds, desc, ret, err, tolerance(tc->o_dt), where);
		}
		free(ex.ref);
		free(ex.vscale);
		free(q);
		free(out);
	}
	for (s = 0; s < tc->nseq; s++)
		dense_free(&dn[s]);
	world_free(&w);
}

/* ---- random cases ------------------------------------------------------------ */

static void random_case(struct tcase *tc, uint32_t max_len, uint32_t max_seqs)
{
	static const uint32_t bts[] = { 1, 2, 16, 16, 64, 128, 256 };
	static const uint32_t groups[] = { 1, 4, 8 };
	static const uint32_t hds[] = { 64, 128, 80, 36 };
	uint32_t s;

	memset(tc, 0, sizeof(*tc));
	tc->bt = bts[rnd_below(7)];
	tc->group = groups[rnd_below(3)];
	tc->nkv = 1 + rnd_below(tc->group == 8 ? 2 : 3);
	tc->hd = hds[rnd_below(4)];
	tc->kv_dt = (enum kvrt_dtype)rnd_below(4);
	tc->q_dt = (enum kvrt_dtype)rnd_below(3);
	tc->o_dt = (enum kvrt_dtype)rnd_below(3);
	tc->layout = (int)rnd_below(NR_LAYOUTS);
	tc->window = rnd_below(3) ? -1 : (int32_t)rnd_below(max_len / 2 + 1);
	tc->softcap = rnd_below(4) ? 0.0f : 5.0f + (float)rnd_below(30);
	tc->qamp = rnd_below(2) ? 1.0 : 6.0;
	tc->nseq = 1 + rnd_below(max_seqs);
	for (s = 0; s < tc->nseq; s++) {
		switch (rnd_below(5)) {
		case 0:
			tc->lens[s] = 1;
			break;
		case 1:	/* exactly a number of blocks */
			tc->lens[s] = tc->bt * (1 + rnd_below((max_len + tc->bt - 1) / tc->bt));
			break;
		case 2:	/* one past a block boundary */
			tc->lens[s] = tc->bt * rnd_below((max_len + tc->bt - 1) / tc->bt) + 1;
			break;
		default:
			tc->lens[s] = 1 + rnd_below(max_len);
		}
		tc->extra[s] = rnd_below(4) ? 0 : 1;
	}
}

/* ---- determinism across thread counts ---------------------------------------- */

struct threads_case {
	struct tcase tc;
	struct world w;
	int32_t lens[8];
	uint32_t nq;
	size_t n;		/* output floats */
	uint16_t *q;
};

static void threads_case_make(struct threads_case *c)
{
	uint32_t s;

	c->tc = (struct tcase){ .bt = 16, .nkv = 4, .group = 4, .hd = 128, .nseq = 8,
				.kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
				.o_dt = KVRT_DTYPE_F32, .layout = LAYOUT_LAYER_MAJOR, .window = -1,
				.qamp = 1.0 };
	c->nq = c->tc.nkv * c->tc.group;
	for (s = 0; s < c->tc.nseq; s++)	/* enough work for 3 threads */
		c->lens[s] = (int32_t)(c->tc.lens[s] = 2500 + 97 * s);
	world_make(&c->w, &c->tc);
	c->n = (size_t)c->tc.nseq * c->nq * c->tc.hd;
	c->q = malloc(c->n * 2);
	for (s = 0; s < c->n; s++)
		enc(KVRT_DTYPE_BF16, c->q, s, rnd_unit());
}

/* Fast decode of the case into out: on workers (when not NULL) or not. */
static int threads_case_decode(struct threads_case *c, struct kvrt_workers *workers,
			       uint32_t nthreads, const uint16_t *q, float *out)
{
	struct kvrt_kv_cache kv = { &c->w.lo, c->w.cache, NULL, c->w.layer };
	struct kvrt_block_table bt = { c->tc.nseq, c->w.indptr, c->w.indices, c->lens };
	struct kvrt_attn_params p = { .num_q_heads = c->nq, .sm_scale = 0.088f,
				      .window_left = -1, .q_dtype = KVRT_DTYPE_BF16,
				      .o_dtype = KVRT_DTYPE_F32, .impl = KVRT_ATTN_FAST,
				      .num_threads = nthreads };

	return workers ? kvrt_attn_decode_on(workers, &p, q, &kv, &bt, out) :
			 kvrt_attn_decode(&p, q, &kv, &bt, out);
}

static void threads_case_free(struct threads_case *c)
{
	free(c->q);
	world_free(&c->w);
}

/*
 * The same output, bit for bit, with 1, 2, 3 and 16 threads created per
 * call, and on kept workers of 1, 2, 3 and 16 threads (twice each: a kept
 * thread serves several calls), and with num_threads capping kept ones.
 */
static void test_threads_identical(void)
{
	static const uint32_t nthr[] = { 1, 2, 3, 16 };	/* 16: items of one head */
	struct threads_case c;
	float *ref, *o;
	uint32_t t, k;

	threads_case_make(&c);
	ref = malloc(c.n * 4);
	o = malloc(c.n * 4);
	GROUP_CHECK(threads_case_decode(&c, NULL, 1, c.q, ref) == 0, "decode, 1 thread");
	for (t = 1; t < 4; t++) {
		memset(o, 0xff, c.n * 4);
		GROUP_CHECK(threads_case_decode(&c, NULL, nthr[t], c.q, o) == 0 &&
		      !memcmp(ref, o, c.n * 4),
		      "fast decode differs between 1 and %u threads", nthr[t]);
	}
	for (t = 0; t < 4; t++) {
		struct kvrt_workers *w = NULL;

		GROUP_CHECK(kvrt_workers_create(nthr[t], &w) == 0 && w, "workers of %u threads",
		      nthr[t]);
		if (!w)
			continue;
		for (k = 0; k < 2; k++) {
			memset(o, 0xff, c.n * 4);
			GROUP_CHECK(threads_case_decode(&c, w, 0, c.q, o) == 0 &&
			      !memcmp(ref, o, c.n * 4),
			      "decode on %u kept threads (call %u) differs from 1 thread", nthr[t],
			      k + 1);
		}
		memset(o, 0xff, c.n * 4);
		GROUP_CHECK(threads_case_decode(&c, w, 2, c.q, o) == 0 && !memcmp(ref, o, c.n * 4),
		      "decode on %u kept threads capped at 2 differs from 1 thread", nthr[t]);
		kvrt_workers_destroy(w);
	}
	free(ref);
	free(o);
	threads_case_free(&c);
}

/* ---- one workers object, calls from several threads ------------------------ */

#define CALLERS 3
#define CALLS_EACH 8

struct caller {
	struct threads_case *c;
	struct kvrt_workers *w;
	const uint16_t *q;
	const float *want;
	int bad;		/* calls that failed or differed */
	pthread_t tid;
};

static void *caller_main(void *arg)
{
	struct caller *cl = arg;
	float *o = malloc(cl->c->n * 4);
	int i;

	for (i = 0; i < CALLS_EACH; i++) {
		memset(o, 0xff, cl->c->n * 4);
		if (threads_case_decode(cl->c, cl->w, 0, cl->q, o) ||
		    memcmp(o, cl->want, cl->c->n * 4))
			cl->bad++;
	}
	free(o);
	return NULL;
}

/*
 * CALLERS threads share one workers object, each with its own queries:
 * the calls take turns, and each output is the one its own queries give
 * without workers.
 */
static void test_workers_shared(void)
{
	struct caller cl[CALLERS];
	struct kvrt_workers *w = NULL;
	struct threads_case c;
	uint16_t *q[CALLERS];
	float *want[CALLERS];
	size_t j;
	int i;

	threads_case_make(&c);
	GROUP_CHECK(kvrt_workers_create(2, &w) == 0, "workers of 2 threads");
	for (i = 0; i < CALLERS; i++) {
		q[i] = malloc(c.n * 2);
		want[i] = malloc(c.n * 4);
		for (j = 0; j < c.n; j++)
			enc(KVRT_DTYPE_BF16, q[i], j, rnd_unit());
		GROUP_CHECK(threads_case_decode(&c, NULL, 2, q[i], want[i]) == 0, "decode, caller %d",
		      i);
	}
	for (i = 0; i < CALLERS && w; i++) {
		cl[i] = (struct caller){ .c = &c, .w = w, .q = q[i], .want = want[i] };
		GROUP_CHECK(pthread_create(&cl[i].tid, NULL, caller_main, &cl[i]) == 0,
		      "caller thread %d", i);
	}
	for (i = 0; i < CALLERS && w; i++) {
		pthread_join(cl[i].tid, NULL);
		GROUP_CHECK(!cl[i].bad, "caller %d: %d of %d calls on the shared workers failed or "
		      "differed", i, cl[i].bad, CALLS_EACH);
	}
	kvrt_workers_destroy(w);
	for (i = 0; i < CALLERS; i++) {
		free(q[i]);
		free(want[i]);
	}
	threads_case_free(&c);
}

/* ---- the comparison can fail ----------------------------------------------------- */

static void test_perturbation_detected(void)
{
	struct tcase tc = { .hd = 4, .o_dt = KVRT_DTYPE_F32 };
	double ref[8] = { 0.5, -0.25, 0.125, 1.0, 0.3, 0.2, 0.1, 0.0 };
	double vs[2] = { 1.0, 2.0 };
	struct expect ex = { ref, vs };
	float out[8];
	size_t where = 0, i;

	for (i = 0; i < 8; i++)
		out[i] = (float)ref[i];
	GROUP_CHECK(max_err(&tc, out, &ex, 2, &where) <= tolerance(tc.o_dt), "exact output rejected");
	out[6] += (float)(3 * tolerance(tc.o_dt) * vs[1]);
	GROUP_CHECK(max_err(&tc, out, &ex, 2, &where) > tolerance(tc.o_dt) && where == 1,
	      "an output off by 3 tolerances was not detected");
	out[6] = NAN;
	GROUP_CHECK(isnan(max_err(&tc, out, &ex, 2, &where)), "a NaN output was not detected");
	tc.o_dt = KVRT_DTYPE_BF16;
	{
		uint16_t b[8];

		for (i = 0; i < 8; i++)
			enc(KVRT_DTYPE_BF16, b, i, ref[i]);
		/* truncation costs < 1 ulp: 2^-7 relative, above the bf16 tolerance */
		enc(KVRT_DTYPE_BF16, b, 0, 0.5 * (1 + 0x1p-7) + 0x1p-7);
		GROUP_CHECK(max_err(&tc, b, &ex, 2, &where) > tolerance(tc.o_dt) && where == 0,
		      "a bf16 output off by one ulp was not detected");
	}
}

/* ---- validation --------------------------------------------------------------- */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* A case of an error table: what it is, and the value it passes. */
#define NAMED(type)               \
	struct {                  \
		const char *what; \
		type v;           \
	}
/* A copy of the struct base with one field set: a case of an error table. */
#define WITH(base, field, value)             \
	({                                   \
		__typeof__(base) with_ = (base); \
		with_.field = (value);       \
		with_;                       \
	})

static void test_errors(void)
{
	struct kvrt_layout lo, lo8;
	int32_t indptr[3] = { 0, 2, 3 }, indices[3] = { 0, 1, 2 }, lens[2] = { 20, 16 };
	int32_t q_indptr[3] = { 0, 4, 6 };
	static float q[2 * 8 * 64], out[20 * 8 * 64], sentinel[20 * 8 * 64];
	float scales[64];
	uint8_t *cache;
	struct kvrt_kv_cache kv, kv8;
	struct kvrt_block_table bt = { 2, indptr, indices, lens }, b2;
	struct kvrt_attn_params p = { .num_q_heads = 8, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32 };
	static float qp[20 * 8 * 64];
	int32_t bad[3];
	int i;

	fill_layout(&lo, LAYOUT_BLOCK_MAJOR, 2, 2, 64, 16, 4, KVRT_DTYPE_F32);
	fill_layout(&lo8, LAYOUT_BLOCK_MAJOR, 2, 2, 64, 16, 4, KVRT_DTYPE_FP8_E4M3);
	cache = calloc(1, layout_bytes(&lo));
	for (i = 0; i < 64; i++)
		scales[i] = 1.0f;
	kv = (struct kvrt_kv_cache){ &lo, cache, NULL, 1 };
	kv8 = (struct kvrt_kv_cache){ &lo8, cache, scales, 1 };
	memset(sentinel, 0x5a, sizeof(sentinel));

#define EXPECT_DECODE(want, P, Q, KV, BT, O, what)                                  \
	do {                                                                        \
		int r_;                                                             \
		memcpy(out, sentinel, sizeof(out));                                 \
		r_ = kvrt_attn_decode(P, Q, KV, BT, O);                             \
		GROUP_CHECK(r_ == (want) && (!(want) || !memcmp(out, sentinel, sizeof(out))), \
		      "decode %s: got %d, want %d%s", what, r_, want,                \
		      r_ == (want) ? " (output written)" : "");                     \
		group_end("errors: decode, %s: %s", what, #want);                   \
	} while (0)
#define EXPECT_PREFILL(want, P, Q, QI, KV, BT, O, what)                             \
	do {                                                                        \
		int r_;                                                             \
		memcpy(out, sentinel, sizeof(out));                                 \
		r_ = kvrt_attn_prefill(P, Q, QI, KV, BT, O);                        \
		GROUP_CHECK(r_ == (want) && (!(want) || !memcmp(out, sentinel, sizeof(out))), \
		      "prefill %s: got %d, want %d%s", what, r_, want,               \
		      r_ == (want) ? " (output written)" : "");                     \
		group_end("errors: prefill, %s: %s", what, #want);                  \
	} while (0)

	for (i = 0; i < 2; i++) {
		p.impl = i ? KVRT_ATTN_REFERENCE : KVRT_ATTN_FAST;
		EXPECT_DECODE(0, &p, q, &kv, &bt, out, "valid");
		EXPECT_PREFILL(0, &p, qp, q_indptr, &kv, &bt, out, "valid");
		EXPECT_DECODE(0, &p, q, &kv8, &bt, out, "valid fp8");
	}
	p.impl = KVRT_ATTN_FAST;

	EXPECT_DECODE(-EINVAL, NULL, q, &kv, &bt, out, "NULL params");
	EXPECT_DECODE(-EINVAL, &p, NULL, &kv, &bt, out, "NULL q");
	EXPECT_DECODE(-EINVAL, &p, q, NULL, &bt, out, "NULL kv");
	EXPECT_DECODE(-EINVAL, &p, q, &kv, NULL, out, "NULL table");
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &bt, NULL, "NULL out");
	EXPECT_PREFILL(-EINVAL, &p, qp, NULL, &kv, &bt, out, "NULL q_indptr");
	{
		/* One argument made invalid at a time: a case a line. */
		const NAMED(struct kvrt_kv_cache) bad_kv[] = {
			{ "NULL layout", WITH(kv, layout, NULL) },
			{ "NULL base", WITH(kv, base, NULL) },
			{ "layer == num_layers", WITH(kv, layer, 2) },
			{ "scales with an f32 cache", WITH(kv, scales, scales) },
			{ "fp8 without scales", WITH(kv8, scales, NULL) },
		};
		const NAMED(struct kvrt_layout) bad_layout[] = {
			{ "unknown kv dtype", WITH(lo, kv_dtype, (enum kvrt_dtype)4) },
			{ "head_dim 0", WITH(lo, head_dim, 0) },
			{ "block_tokens 0", WITH(lo, block_tokens, 0) },
			{ "num_kv_heads 0", WITH(lo, num_kv_heads, 0) },
			{ "8 q heads over 3 kv heads", WITH(lo, num_kv_heads, 3) },
		};
		const NAMED(struct kvrt_attn_params) bad_params[] = {
			{ "num_q_heads % num_kv_heads", WITH(p, num_q_heads, 7) },
			{ "num_q_heads 0", WITH(p, num_q_heads, 0) },
			{ "fp8 q", WITH(p, q_dtype, KVRT_DTYPE_FP8_E4M3) },
			{ "fp8 out", WITH(p, o_dtype, KVRT_DTYPE_FP8_E4M3) },
			{ "unknown out dtype", WITH(p, o_dtype, (enum kvrt_dtype)9) },
			{ "unknown impl", WITH(p, impl, (enum kvrt_attn_impl)2) },
			{ "NaN sm_scale", WITH(p, sm_scale, NAN) },
			{ "negative soft-cap", WITH(p, logit_softcap, -1.0f) },
			{ "infinite soft-cap", WITH(p, logit_softcap, INFINITY) },
			{ "window_left -2", WITH(p, window_left, -2) },
		};
		const NAMED(struct kvrt_block_table) bad_table[] = {
			{ "NULL indptr", WITH(bt, indptr, NULL) },
			{ "NULL indices", WITH(bt, indices, NULL) },
			{ "NULL seq_lens", WITH(bt, seq_lens, NULL) },
		};
		struct kvrt_kv_cache k2 = kv;

		for (size_t c = 0; c < ARRAY_SIZE(bad_kv); c++)
			EXPECT_DECODE(-EINVAL, &p, q, &bad_kv[c].v, &bt, out, bad_kv[c].what);
		for (size_t c = 0; c < ARRAY_SIZE(bad_layout); c++) {
			k2.layout = &bad_layout[c].v;
			EXPECT_DECODE(-EINVAL, &p, q, &k2, &bt, out, bad_layout[c].what);
		}
		for (size_t c = 0; c < ARRAY_SIZE(bad_params); c++)
			EXPECT_DECODE(-EINVAL, &bad_params[c].v, q, &kv, &bt, out, bad_params[c].what);
		for (size_t c = 0; c < ARRAY_SIZE(bad_table); c++)
			EXPECT_DECODE(-EINVAL, &p, q, &kv, &bad_table[c].v, out, bad_table[c].what);
	}

	b2 = bt;
	memcpy(bad, lens, sizeof(lens));
	bad[0] = 33;	/* 2 blocks of 16 */
	b2.seq_lens = bad;
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "seq_len > blocks * block_tokens");
	bad[0] = 32;
	EXPECT_DECODE(0, &p, q, &kv, &b2, out, "seq_len == blocks * block_tokens");
	bad[0] = 0;
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "seq_len 0");
	bad[0] = -5;
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "negative seq_len");
	b2 = bt;
	memcpy(bad, indices, sizeof(indices));
	bad[2] = 4;	/* num_blocks */
	b2.indices = bad;
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "index == num_blocks");
	bad[2] = -1;
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "negative index");
	b2 = bt;
	memcpy(bad, indptr, sizeof(indptr));
	bad[0] = 1;
	b2.indptr = bad;
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "indptr[0] != 0");
	bad[0] = 0;
	bad[1] = 4;	/* > indptr[2]: decreasing */
	EXPECT_DECODE(-EINVAL, &p, q, &kv, &b2, out, "decreasing indptr");

	memcpy(bad, q_indptr, sizeof(q_indptr));
	bad[1] = 21;	/* longer than seq_lens[0] = 20 */
	bad[2] = 23;
	EXPECT_PREFILL(-EINVAL, &p, qp, bad, &kv, &bt, out, "chunk longer than its sequence");
	bad[1] = 20;
	bad[2] = 20;
	EXPECT_PREFILL(0, &p, qp, bad, &kv, &bt, out, "chunk == sequence, empty chunk");
	bad[1] = 0;
	bad[2] = 0;
	for (i = 0; i < 2; i++) {
		/* every chunk empty: nothing to compute, nothing written */
		p.impl = i ? KVRT_ATTN_REFERENCE : KVRT_ATTN_FAST;
		EXPECT_PREFILL(0, &p, qp, bad, &kv, &bt, out, "every chunk empty");
		GROUP_CHECK(!memcmp(out, sentinel, sizeof(out)), "prefill, every chunk empty, %s: "
		      "output written", i ? "reference" : "fast");
		group_end("errors: prefill, every chunk empty leaves the output");
	}
	p.impl = KVRT_ATTN_FAST;
	bad[0] = 1;
	EXPECT_PREFILL(-EINVAL, &p, qp, bad, &kv, &bt, out, "q_indptr[0] != 0");
	bad[0] = 0;
	bad[1] = 5;
	bad[2] = 3;
	EXPECT_PREFILL(-EINVAL, &p, qp, bad, &kv, &bt, out, "decreasing q_indptr");

	b2 = bt;
	b2.num_seqs = 0;
	memcpy(out, sentinel, sizeof(out));
	GROUP_CHECK(kvrt_attn_decode(&p, q, &kv, &b2, out) == 0 && !memcmp(out, sentinel, sizeof(out)),
	      "no sequences: not 0, or output written");
	group_end("errors: decode, no sequences: 0, nothing written");

	/* kept workers: the same checks, and the workers' own */
	{
		struct kvrt_workers *w = (struct kvrt_workers *)&lo;	/* a marker */
		struct kvrt_attn_params p7 = p;

		GROUP_CHECK(kvrt_workers_create(KVRT_WORKERS_MAX + 1, &w) == -EINVAL &&
		      w == (struct kvrt_workers *)&lo,
		      "workers_create(KVRT_WORKERS_MAX + 1): not -EINVAL, or *workers written");
		GROUP_CHECK(kvrt_workers_create(2, NULL) == -EINVAL, "workers_create(2, NULL): not -EINVAL");
		kvrt_workers_destroy(NULL);
		group_end("errors: workers_create, too many threads or NULL: -EINVAL");
		p7.num_q_heads = 7;
		for (i = 0; i < 2; i++) {
			int r1, r2, r3, r4, r5;

			p.impl = p7.impl = i ? KVRT_ATTN_REFERENCE : KVRT_ATTN_FAST;
			memcpy(out, sentinel, sizeof(out));
			r1 = kvrt_attn_decode_on(NULL, &p, q, &kv, &bt, out);
			r2 = kvrt_attn_prefill_on(NULL, &p, qp, q_indptr, &kv, &bt, out);
			r3 = kvrt_attn_decode_on(kept, &p7, q, &kv, &bt, out);
			r4 = kvrt_attn_prefill_on(kept, &p, qp, NULL, &kv, &bt, out);
			r5 = kvrt_attn_prefill_on(kept, &p7, qp, q_indptr, &kv, &bt, out);
			GROUP_CHECK(r1 == -EINVAL && r2 == -EINVAL && r3 == -EINVAL && r4 == -EINVAL &&
			      r5 == -EINVAL && !memcmp(out, sentinel, sizeof(out)),
			      "%s on workers: NULL workers %d/%d, bad params %d/%d/%d (want -EINVAL "
			      "and nothing written)", i ? "reference" : "fast", r1, r2, r3, r4, r5);
			GROUP_CHECK(kvrt_attn_decode_on(kept, &p, q, &kv, &bt, out) == 0 &&
			      kvrt_attn_prefill_on(kept, &p, qp, q_indptr, &kv, &bt, out) == 0,
			      "%s on workers: a valid call failed", i ? "reference" : "fast");
			group_end("errors: %s on workers: NULL workers or bad params: -EINVAL",
				  i ? "reference" : "fast");
		}
		p.impl = KVRT_ATTN_FAST;
	}
#undef EXPECT_DECODE
#undef EXPECT_PREFILL
	free(cache);
}

int main(void)
{
	const char *e = getenv("KVRT_TEST_SEED");
	uint64_t seed = e ? strtoull(e, NULL, 0) : 20250611;
	uint32_t ncases, i, rounds = 0, r;
	struct tcase tc;

	e = getenv("KVRT_TEST_CASES");
	ncases = e ? (uint32_t)strtoul(e, NULL, 0) : 120;
	rng_state = seed;
	printf("# test_attn: seed %llu (KVRT_TEST_SEED), %u random cases (KVRT_TEST_CASES)\n",
	       (unsigned long long)seed, ncases);
	printf("# each case runs: reference; fast with the best kernel, and with KVRT_CPU_ISA=avx512, avx2, generic; fast on 3 kept worker threads\n");

	if (kvrt_workers_create(3, &kept)) {
		printf("Bail out! kvrt_workers_create(3) failed\n");
		return 1;
	}
	test_perturbation_detected();
	group_end("the comparison detects a perturbed output and NaN");
	test_errors();
	test_threads_identical();
	group_end("fast decode is bitwise identical with 1, 2, 3 and 16 threads, created per "
		  "call or kept");
	test_workers_shared();
	group_end("%d threads share kept workers, %d calls each: every output its own",
		  CALLERS, CALLS_EACH);

	/* fixed: every dtype combination once, on the common shape */
	for (i = 0; i < 4 * 3 * 3; i++) {
		tc = (struct tcase){ .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 3,
				     .kv_dt = (enum kvrt_dtype)(i / 9), .q_dt = (enum kvrt_dtype)(i / 3 % 3),
				     .o_dt = (enum kvrt_dtype)(i % 3), .layout = (int)(i % NR_LAYOUTS),
				     .window = -1, .qamp = 2.0, .lens = { 1, 16, 77 } };
		run_decode(&tc);
	}
	group_end("decode, all 36 kv x q x out dtype combinations, GQA 8/2, hd 128, block 16");
	/* 8 sequences: fast-path items span several KV heads (whole token rows) */
	for (i = 0; i < 8; i++) {
		tc = (struct tcase){ .bt = 16, .nkv = 4, .group = 4, .hd = 128, .nseq = 8,
				     .kv_dt = (enum kvrt_dtype)(i % 4),
				     .q_dt = i < 4 ? KVRT_DTYPE_BF16 : KVRT_DTYPE_F32,
				     .o_dt = KVRT_DTYPE_F32, .layout = (int)(i % 2),
				     .window = i == 5 ? 50 : -1, .softcap = i == 6 ? 20.0f : 0.0f,
				     .qamp = 3.0, .lens = { 1, 15, 16, 17, 100, 160, 33, 250 } };
		run_decode(&tc);
	}
	group_end("decode, 8 sequences x 4 KV heads (items of several heads), every kv dtype");
	for (i = 0; i < ncases; i++) {
		random_case(&tc, 300, 5);
		run_decode(&tc);
	}
	group_end("decode, %u random shapes, sequences up to 300 tokens", ncases);
	for (i = 0; i < ncases / 10; i++) {
		random_case(&tc, 2000, 2);
		run_decode(&tc);
	}
	group_end("decode, %u random shapes, sequences up to 2000 tokens", ncases / 10);
	for (i = 0; i < ncases / 2; i++) {
		random_case(&tc, 160, 3);
		r = 1 + rnd_below(4);
		rounds += r;
		run_prefill(&tc, r);
	}
	group_end("prefill, %u random shapes in %u chunked rounds", ncases / 2, rounds);

	for (i = 0; i < NR_IMPLS; i++)
		printf("# largest error, %-12s  out f32 %.2e  f16 %.2e  bf16 %.2e\n", impls[i].name,
		       worst[i][0], worst[i][1], worst[i][2]);
	printf("# tolerances: out f32 %.1e, f16 %.2e, bf16 %.2e (of the largest |v| attended)\n",
	       tolerance(KVRT_DTYPE_F32), tolerance(KVRT_DTYPE_F16), tolerance(KVRT_DTYPE_BF16));
	kvrt_workers_destroy(kept);
	return tap_done("test_attn");
}
