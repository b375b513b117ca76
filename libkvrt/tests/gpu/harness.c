// SPDX-License-Identifier: MIT
/* test_gpu's harness: set-up, device memory, attention cases, the float64 reference. */
#define _GNU_SOURCE
#include "harness.h"

/*
 * Sanitized builds: the CUDA driver maps memory where ASan keeps its
 * shadow gap unless protect_shadow_gap=0, and keeps allocations until it
 * is unloaded (not leaks of ours); a stand-in driver that allocates
 * "device memory" with malloc must be able to fail the 1 PiB allocation
 * below (allocator_may_return_null).  $ASAN_OPTIONS still applies on top.
 */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((used, visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "protect_shadow_gap=0:allocator_may_return_null=1";
}

__attribute__((used, visibility("default"))) const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libcuda\nleak:libnvidia-\n";
}
#endif

/*
 * The driver's allocations can only be told apart while its module is
 * mapped: libkvrt dlcloses libcuda in kvrt_gpu_close, so sanitized builds
 * pin it (RTLD_NODELETE) for the whole run.
 */
void pin_driver(void)
{
#if defined(__SANITIZE_ADDRESS__)
	static void *pinned;
	const char *path = getenv("KVRT_LIBCUDA");

	pinned = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	(void)pinned;
#endif
}

struct kvrt *K;
struct kvrt_gpu *G;
struct kvrt_gpu_info GI;
/*
 * Plan objects, one per head configuration (q heads, KV heads), as an
 * engine keeps one per model: every case of that configuration re-plans
 * the same object.  (kvrt.h gives a plan's capacity as max_seqs and
 * max_q_tokens; the workspace also depends on the heads of the first
 * plan, so configurations do not share one.)
 */
struct gpu_plan_slot plans[64];
unsigned int nplans;
int probe_ret;
char probe_why[512];

#define PLAN_SEQS 64
#define PLAN_Q_TOKENS 8192

/* ---- random helpers (rnd() and the codecs: kv_data.h) ------------------------- */

void shuffle(uint32_t *v, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		v[i] = i;
	for (i = n ? n - 1 : 0; i > 0; i--) {
		uint32_t j = rnd_below(i + 1), t = v[i];

		v[i] = v[j];
		v[j] = t;
	}
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "test_gpu: out of memory (%zu bytes)\n", n);
		exit(2);
	}
	return p;
}

/* x rounded to nearest even in t (F32 for "not rounded": values are f32 already). */
static double round_to(enum kvrt_dtype t, double x)
{
	int mbits, emin, e;
	double ulp;

	switch (t) {
	case KVRT_DTYPE_F16:
		mbits = 10, emin = -14;
		break;
	case KVRT_DTYPE_BF16:
		mbits = 7, emin = -126;
		break;
	default:
		return x;
	}
	if (x == 0 || !isfinite(x))
		return x;
	frexp(x, &e);
	e -= 1;
	if (e < emin)
		e = emin;
	ulp = ldexp(1.0, e - mbits);
	return rint(x / ulp) * ulp;	/* the values here are far from overflow */
}

/* ---- layouts ------------------------------------------------------------------ */

static const char *const layout_name[] = { "block-major", "layer-major", "head-major",
					   "padded" };

void fill_layout(struct kvrt_layout *lo, int kind, uint32_t layers, uint32_t heads,
		 uint32_t hd, uint32_t bt, uint32_t nblocks, enum kvrt_dtype dt)
{
	int64_t row = (int64_t)hd * (int64_t)esize(dt);

	*lo = (struct kvrt_layout){ .num_layers = layers, .num_kv_heads = heads, .head_dim = hd,
				    .block_tokens = bt, .num_blocks = nblocks, .kv_dtype = dt };
	switch (kind) {
	case L_BM:	/* [block][layer][kv][token][head][dim] */
		lo->head_stride = row;
		lo->token_stride = heads * row;
		lo->kv_stride = bt * lo->token_stride;
		lo->layer_stride = 2 * lo->kv_stride;
		lo->block_stride = layers * lo->layer_stride;
		lo->scale_kv_stride = heads;
		lo->scale_layer_stride = 2 * heads;
		lo->scale_block_stride = 2LL * heads * layers;
		break;
	case L_LM:	/* [layer][kv][block][token][head][dim] */
	case L_HM:	/* [layer][kv][block][head][token][dim] */
		lo->head_stride = kind == L_LM ? row : bt * row;
		lo->token_stride = kind == L_LM ? heads * row : row;
		lo->block_stride = (int64_t)bt * heads * row;
		lo->kv_stride = nblocks * lo->block_stride;
		lo->layer_stride = 2 * lo->kv_stride;
		lo->scale_block_stride = heads;
		lo->scale_kv_stride = (int64_t)nblocks * heads;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride;
		break;
	default:	/* [block][layer][kv][head][token][dim], 16-byte-aligned gaps */
		lo->token_stride = row + 16;
		lo->head_stride = bt * lo->token_stride + 32;
		lo->kv_stride = heads * lo->head_stride + 64;
		lo->layer_stride = 2 * lo->kv_stride + 16;
		lo->block_stride = layers * lo->layer_stride + 128;
		lo->scale_block_stride = heads + 3;
		lo->scale_kv_stride = (int64_t)nblocks * (heads + 3) + 1;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride + 5;
		break;
	}
}

/* ---- device memory ------------------------------------------------------------- */

void *dev_alloc(size_t n)
{
	void *p = NULL;
	int r = kvrt_gpu_alloc(G, n ? n : 1, &p);

	if (r || !p) {
		tap_failf("kvrt_gpu_alloc(%zu) = %d", n, r);
		return NULL;
	}
	return p;
}

void dev_free(void *p)
{
	int r;

	if (!p)
		return;
	r = kvrt_gpu_free(G, p);
	CHECKF(!r, "kvrt_gpu_free = %d", r);
}

void *dev_dup(const void *h, size_t n)
{
	void *p = dev_alloc(n);
	int r;

	if (p && n && (r = kvrt_gpu_memcpy(G, p, h, n))) {
		tap_failf("kvrt_gpu_memcpy(to device, %zu) = %d", n, r);
		dev_free(p);
		return NULL;
	}
	return p;
}

int dev_get(void *h, const void *d, size_t n)
{
	int r = n ? kvrt_gpu_memcpy(G, h, d, n) : 0;

	if (r)
		tap_failf("kvrt_gpu_memcpy(to host, %zu) = %d", n, r);
	return r;
}

int dev_sync(void)
{
	int r = kvrt_gpu_sync(G, NULL);

	if (r)
		tap_failf("kvrt_gpu_sync = %d", r);
	return r;
}

/* ---- attention cases ------------------------------------------------------------- */

static void describe(char *buf, size_t n, const struct tcase *tc)
{
	int o = snprintf(buf, n, "bt=%u kv_heads=%u group=%u hd=%u kv=%s q=%s out=%s %s window=%d "
			 "cap=%g qamp=%g lens=", tc->bt, tc->nkv, tc->group, tc->hd,
			 dtname(tc->kv_dt), dtname(tc->q_dt), dtname(tc->o_dt),
			 layout_name[tc->layout], tc->window, tc->softcap, tc->qamp);
	uint32_t s;

	for (s = 0; s < tc->nseq && o > 0 && o < (int)n - 16; s++)
		o += snprintf(buf + o, n - o, "%u%s", tc->lens[s], s + 1 < tc->nseq ? "," : "");
	if (s < tc->nseq && o > 0 && o < (int)n - 4)
		snprintf(buf + o, n - o, "...");
}

void world_free(struct world *w)
{
	dev_free(w->d_cache);
	dev_free(w->d_scales);
	dev_free(w->d_indptr);
	dev_free(w->d_indices);
	free(w->cache);
	free(w->scales);
	free(w->indptr);
	free(w->indices);
	memset(w, 0, sizeof(*w));
}

/*
 * A cache of 2 layers (layer 1 used): every sequence's blocks at random
 * places, K/V written by the CPU kvrt_append_kv from random f32 rows in
 * position order (so offset 0 of a block comes first, as fp8 needs), NaN
 * everywhere else.  Uploaded to the device.  0 or -1 (reported).
 */
int world_make(struct world *w, const struct tcase *tc)
{
	uint32_t s, nblocks = 3, i, *perm;
	uint32_t nkv = tc->nkv, hd = tc->hd;
	int ret;

	memset(w, 0, sizeof(*w));
	w->tc = *tc;
	w->layer = 1;
	for (s = 0; s < tc->nseq; s++)
		nblocks += (tc->lens[s] + tc->bt - 1) / tc->bt + tc->extra[s];
	fill_layout(&w->lo, tc->layout, 2, nkv, hd, tc->bt, nblocks, tc->kv_dt);
	w->cache_bytes = layout_bytes(&w->lo);
	w->cache = xmalloc(w->cache_bytes);
	for (i = 0; i < w->cache_bytes / esize(tc->kv_dt); i++)
		poison(tc->kv_dt, w->cache, i);
	w->nscales = scales_count(&w->lo);
	if (w->nscales) {
		w->scales = xmalloc(sizeof(float) * w->nscales);
		for (i = 0; i < w->nscales; i++)
			w->scales[i] = NAN;
	}
	perm = xmalloc(sizeof(*perm) * nblocks);
	shuffle(perm, nblocks);
	w->indptr = xmalloc(sizeof(int32_t) * (tc->nseq + 1));
	w->indices = xmalloc(sizeof(int32_t) * nblocks);
	w->indptr[0] = 0;
	for (s = 0, i = 0; s < tc->nseq; s++) {
		uint32_t nb = (tc->lens[s] + tc->bt - 1) / tc->bt + tc->extra[s], b;

		for (b = 0; b < nb; b++)
			w->indices[w->indptr[s] + b] = (int32_t)perm[i++];
		w->indptr[s + 1] = w->indptr[s] + (int32_t)nb;
	}
	free(perm);

	for (s = 0; s < tc->nseq; s++) {
		uint32_t len = tc->lens[s], p;
		size_t n = (size_t)len * nkv * hd, j;
		float *k = xmalloc(sizeof(float) * n), *v = xmalloc(sizeof(float) * n);
		int64_t *slots = xmalloc(sizeof(int64_t) * len);
		struct kvrt_kv_cache kv = { &w->lo, w->cache, w->scales, w->layer };

		for (p = 0; p < len; p++) {
			/* a magnitude per token: fp8 blocks raise their scales now and then */
			double amp = 0.25 + 1.75 * (double)rnd_below(8) / 7;

			for (j = (size_t)p * nkv * hd; j < (size_t)(p + 1) * nkv * hd; j++) {
				k[j] = (float)(amp * rnd_unit());
				v[j] = (float)(amp * rnd_unit());
			}
			slots[p] = (int64_t)w->indices[w->indptr[s] + p / tc->bt] * tc->bt + p % tc->bt;
		}
		ret = kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, slots, len);
		free(k);
		free(v);
		free(slots);
		if (ret) {
			tap_failf("world: CPU kvrt_append_kv = %d", ret);
			return -1;
		}
	}
	return 0;
}

int world_upload(struct world *w)
{
	w->d_cache = dev_dup(w->cache, w->cache_bytes);
	w->d_scales = w->nscales ? dev_dup(w->scales, sizeof(float) * w->nscales) : NULL;
	w->d_indptr = dev_dup(w->indptr, sizeof(int32_t) * (w->tc.nseq + 1));
	w->d_indices = dev_dup(w->indices, sizeof(int32_t) * (w->indptr[w->tc.nseq] + 1));
	return w->d_cache && (!w->nscales || w->d_scales) && w->d_indptr && w->d_indices ? 0 : -1;
}

/* NaN into K and V of positions [p0, p1) of sequence s, all heads (not the scales). */
static void poison_range(struct world *w, uint32_t s, int64_t p0, int64_t p1)
{
	uint32_t h, d;
	int64_t p;
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

/* ---- the float64 reference ------------------------------------------------------ */

const char *cand_name(const struct cand *c, char *buf, size_t n)
{
	if (c->rq == KVRT_DTYPE_F32 && c->rkv == KVRT_DTYPE_F32)
		snprintf(buf, n, "exact");
	else
		snprintf(buf, n, "q->%s kv->%s", c->rq == KVRT_DTYPE_F32 ? "-" : dtname(c->rq),
			 c->rkv == KVRT_DTYPE_F32 ? "-" : dtname(c->rkv));
	return buf;
}

/* The candidates for a case, exact first. */
static int candidates(const struct tcase *tc, struct cand *c)
{
	enum kvrt_dtype ts[2];
	int nt = 0, n = 0, i, j, k;

	c[n++] = (struct cand){ KVRT_DTYPE_F32, KVRT_DTYPE_F32 };
	if (tc->kv_dt == KVRT_DTYPE_F16) {
		ts[nt++] = KVRT_DTYPE_F16;
	} else if (tc->kv_dt == KVRT_DTYPE_BF16) {
		ts[nt++] = KVRT_DTYPE_BF16;
	} else {
		ts[nt++] = KVRT_DTYPE_F16;
		ts[nt++] = KVRT_DTYPE_BF16;
	}
	for (i = 0; i < nt; i++) {
		enum kvrt_dtype t = ts[i];
		/* bf16 q is exact in f16 at these magnitudes; f16 q is not in bf16 */
		bool qr = tc->q_dt == KVRT_DTYPE_F32 ||
			  (tc->q_dt == KVRT_DTYPE_F16 && t == KVRT_DTYPE_BF16);
		bool kr = tc->kv_dt == KVRT_DTYPE_FP8_E4M3;
		struct cand opts[3] = {
			{ qr ? t : KVRT_DTYPE_F32, KVRT_DTYPE_F32 },
			{ KVRT_DTYPE_F32, kr ? t : KVRT_DTYPE_F32 },
			{ qr ? t : KVRT_DTYPE_F32, kr ? t : KVRT_DTYPE_F32 },
		};

		for (j = 0; j < 3; j++) {
			for (k = 0; k < n; k++)
				if (c[k].rq == opts[j].rq && c[k].rkv == opts[j].rkv)
					break;
			if (k == n)
				c[n++] = opts[j];
		}
	}
	return n;
}

/* Dequantised K or V, rounded per the candidate. */
static double kv_at(const struct world *w, uint32_t s, int kv, int64_t p, uint32_t h, uint32_t d,
		    enum kvrt_dtype rkv)
{
	int64_t blk = w->indices[w->indptr[s] + p / w->tc.bt];
	double v = dec(w->tc.kv_dt, w->cache + elem_off(&w->lo, w->layer, kv, blk, p % w->tc.bt, h),
		       d);

	if (w->scales)
		v *= w->scales[scale_idx(&w->lo, w->layer, kv, blk, h)];
	return round_to(rkv, v);
}

struct dense {
	uint32_t len, nkv, hd;
	double *k, *v;		/* [len][nkv][hd] */
};

static void dense_gather(struct dense *dn, const struct world *w, uint32_t s, uint32_t len,
			 enum kvrt_dtype rkv)
{
	uint32_t p, h, d;

	dn->len = len;
	dn->nkv = w->tc.nkv;
	dn->hd = w->tc.hd;
	dn->k = xmalloc(sizeof(double) * len * dn->nkv * dn->hd);
	dn->v = xmalloc(sizeof(double) * len * dn->nkv * dn->hd);
	for (p = 0; p < len; p++)
		for (h = 0; h < dn->nkv; h++)
			for (d = 0; d < dn->hd; d++) {
				size_t i = ((size_t)p * dn->nkv + h) * dn->hd + d;

				dn->k[i] = kv_at(w, s, 0, p, h, d, rkv);
				dn->v[i] = kv_at(w, s, 1, p, h, d, rkv);
			}
}

static void dense_free(struct dense *dn)
{
	free(dn->k);
	free(dn->v);
}

/* out[hd] = attention of q[hd] (q head h) at position pos over dn. */
static void dense_attend(const struct dense *dn, const struct tcase *tc, double sm,
			 const double *q, uint32_t h, int64_t pos, double *out, struct rowinfo *ri)
{
	uint32_t kvh = h / tc->group, d;
	int64_t lo = tc->window >= 0 && pos - tc->window > 0 ? pos - tc->window : 0, p;
	double *x = xmalloc(sizeof(double) * (size_t)(pos - lo + 1)), mx = -INFINITY, sum = 0;

	ri->qk = 0;
	ri->vscale = 0;
	ri->nkeys = (uint32_t)(pos - lo + 1);
	for (p = lo; p <= pos; p++) {
		const double *k = dn->k + ((size_t)p * dn->nkv + kvh) * dn->hd;
		double dot = 0, absdot = 0;

		for (d = 0; d < dn->hd; d++) {
			dot += q[d] * k[d];
			absdot += fabs(q[d] * k[d]);
		}
		dot *= sm;
		if (absdot * sm > ri->qk)
			ri->qk = absdot * sm;
		if (tc->softcap > 0)
			dot = tc->softcap * tanh(dot / tc->softcap);
		x[p - lo] = dot;
		if (dot > mx)
			mx = dot;
	}
	for (d = 0; d < dn->hd; d++)
		out[d] = 0;
	for (p = lo; p <= pos; p++) {
		const double *v = dn->v + ((size_t)p * dn->nkv + kvh) * dn->hd;
		double e = exp(x[p - lo] - mx);

		sum += e;
		for (d = 0; d < dn->hd; d++) {
			out[d] += e * v[d];
			if (fabs(v[d]) > ri->vscale)
				ri->vscale = fabs(v[d]);
		}
	}
	for (d = 0; d < dn->hd; d++)
		out[d] /= sum;
	free(x);
}

static void compute_ref(const struct world *w, const struct qrows *qr, const struct cand *c,
			double *ref, struct rowinfo *ri)
{
	const struct tcase *tc = &w->tc;
	uint32_t nq = tc->nkv * tc->group, s, j, h, d;
	double sm = 1.0f / sqrtf((float)tc->hd);	/* the f32 value the library gets */
	double *qd = xmalloc(sizeof(double) * tc->hd);
	for (s = 0; s < tc->nseq; s++) {
		int64_t maxpos = -1;
		struct dense dn;

		for (j = 0; j < qr->ntok; j++)
			if (qr->seq[j] == s && qr->pos[j] > maxpos)
				maxpos = qr->pos[j];
		if (maxpos < 0)
			continue;
		dense_gather(&dn, w, s, (uint32_t)maxpos + 1, c->rkv);
		for (j = 0; j < qr->ntok; j++) {
			if (qr->seq[j] != s)
				continue;
			for (h = 0; h < nq; h++) {
				size_t r = (size_t)j * nq + h;

				for (d = 0; d < tc->hd; d++)
					qd[d] = round_to(c->rq, dec(tc->q_dt, qr->q, r * tc->hd + d));
				dense_attend(&dn, tc, sm, qd, h, qr->pos[j], ref + r * tc->hd, &ri[r]);
			}
		}
		dense_free(&dn);
	}
	free(qd);
}

static double unit_roundoff(enum kvrt_dtype t)
{
	return t == KVRT_DTYPE_F32 ? 0x1p-24 : t == KVRT_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

/* The GPU's bound, relative to vscale (see the top of the file). */
double gpu_tol(const struct tcase *tc, const struct rowinfo *ri)
{
	double u_p = tc->kv_dt == KVRT_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
	double ds = (tc->hd + 8) * 0x1p-24 * ri->qk + 0x1p-21;

	if (tc->softcap > 0)
		ds += tc->softcap * 5.2e-4;	/* 2^-10.9 */
	return unit_roundoff(tc->o_dt) + u_p + expm1(2 * ds) + 8 * sqrt((double)ri->nkeys) * 0x1p-24 +
	       0x1p-18;
}

/* test_attn's bound for the CPU implementations. */
static double cpu_tol(const struct tcase *tc)
{
	return 1e-5 + (tc->o_dt == KVRT_DTYPE_F32 ? 0 : unit_roundoff(tc->o_dt));
}

/*
 * Largest error of out against ref in units of each row's tolerance (the
 * GPU's bound, or the CPU's); NaN wins.
 */
double worst_ratio(const struct tcase *tc, const void *out, size_t nrows, const double *ref,
		   const struct rowinfo *ri, bool gpu, size_t *where)
{
	double worst = 0;
	size_t r, d;

	for (r = 0; r < nrows; r++) {
		double tol = gpu ? gpu_tol(tc, &ri[r]) : cpu_tol(tc);

		for (d = 0; d < tc->hd; d++) {
			size_t i = r * tc->hd + d;
			double o = dec(tc->o_dt, out, i);
			double e = fabs(o - ref[i]) / ri[r].vscale / tol;

			if (!(e <= worst)) {
				worst = e;
				*where = r;
				if (isnan(e))
					return e;
			}
		}
	}
	return worst;
}

/* ---- running a case ---------------------------------------------------------------- */

struct gpu_stats stats;

struct kvrt_attn_params case_params(const struct tcase *tc, enum kvrt_attn_impl impl)
{
	return (struct kvrt_attn_params){
		.num_q_heads = tc->nkv * tc->group, .sm_scale = 1.0f / sqrtf((float)tc->hd),
		.window_left = tc->window, .logit_softcap = tc->softcap, .q_dtype = tc->q_dt,
		.o_dtype = tc->o_dt, .impl = impl, .num_threads = 1,
	};
}

/*
 * Check one call's outputs: the CPU reference's (cpu_out) and the GPU's
 * (gpu_out, from a buffer that had GUARD bytes of 0xa5 after it).
 */
void check_outputs(const struct world *w, const struct qrows *qr, const void *cpu_out,
		   const uint8_t *gpu_out, const char *what)
{
	const struct tcase *tc = &w->tc;
	uint32_t nq = tc->nkv * tc->group;
	size_t nrows = (size_t)qr->ntok * nq, obytes = nrows * tc->hd * esize(tc->o_dt), where = 0;
	double *ref0 = xmalloc(sizeof(double) * nrows * tc->hd);
	double *refc = xmalloc(sizeof(double) * nrows * tc->hd);
	struct rowinfo *ri0 = xmalloc(sizeof(*ri0) * nrows), *ric = xmalloc(sizeof(*ric) * nrows);
	struct cand c[8];
	double e, best = NAN;
	int nc = candidates(tc, c), i, matched = -1;
	char desc[600], cn[64];
	size_t g;

	describe(desc, sizeof(desc), tc);
	for (g = 0; g < GUARD; g++)
		if (gpu_out[obytes + g] != 0xa5)
			break;
	CHECKF(g == GUARD, "%s %s: the GPU wrote past the output (guard byte %zu)", what, desc, g);

	compute_ref(w, qr, &c[0], ref0, ri0);
	e = worst_ratio(tc, cpu_out, nrows, ref0, ri0, false, &where);
	CHECKF(e <= 1, "%s %s: CPU reference vs float64: %.3g tolerances at row %zu (token %zu "
	       "head %zu): the test's reference disagrees with libkvrt's", what, desc, e, where,
	       where / nq, where % nq);

	for (i = 0; i < nc && matched < 0; i++) {
		if (i)
			compute_ref(w, qr, &c[i], refc, ric);
		e = worst_ratio(tc, gpu_out, nrows, i ? refc : ref0, i ? ric : ri0, true, &where);
		if (!isnan(e) && (isnan(best) || e < best))
			best = e;
		if (e <= 1)
			matched = i;
	}
	if (matched < 0) {
		tap_failf("%s %s: GPU vs float64: %.3g tolerances (best of %d candidates; exact: "
		     "%.3g at row %zu = token %zu head %zu)", what, desc, best, nc,
		     worst_ratio(tc, gpu_out, nrows, ref0, ri0, true, &where),
		     where, where / nq, where % nq);
	} else {
		stats.matched[c[matched].rq][c[matched].rkv]++;
		if (best > stats.worst[tc->kv_dt])
			stats.worst[tc->kv_dt] = best;
		if (matched)
			tap_diag("%s: matched candidate %s (%.2f of tol)", what,
				 cand_name(&c[matched], cn, sizeof(cn)), best);
		/* GPU against the CPU: both bounds, plus how far the candidate moved */
		{
			double worst = 0;
			size_t r, d, wr = 0;

			for (r = 0; r < nrows; r++) {
				const struct rowinfo *rr = matched ? &ric[r] : &ri0[r];
				double tol = gpu_tol(tc, rr) + cpu_tol(tc);

				for (d = 0; d < tc->hd; d++) {
					size_t k = r * tc->hd + d;
					double slack = matched ? fabs(refc[k] - ref0[k]) / ri0[r].vscale : 0;
					double x = fabs(dec(tc->o_dt, gpu_out, k) - dec(tc->o_dt, cpu_out, k)) /
						   ri0[r].vscale / (tol + slack);

					if (!(x <= worst)) {
						worst = x;
						wr = r;
					}
				}
			}
			CHECKF(worst <= 1, "%s %s: GPU vs CPU reference: %.3g tolerances at row %zu",
			       what, desc, worst, wr);
		}
	}
	stats.cases++;
	free(ref0);
	free(refc);
	free(ri0);
	free(ric);
}

static struct kvrt_gpu_plan *plan_for(const struct tcase *tc)
{
	uint32_t nq = tc->nkv * tc->group;
	unsigned int i;
	int r;

	for (i = 0; i < nplans; i++)
		if (plans[i].nq == nq && plans[i].nkv == tc->nkv)
			return plans[i].p;
	if (nplans == sizeof(plans) / sizeof(plans[0])) {
		tap_failf("more than %u head configurations", nplans);
		return NULL;
	}
	r = kvrt_gpu_plan_create(G, PLAN_SEQS, PLAN_Q_TOKENS, &plans[nplans].p);
	if (r || !plans[nplans].p) {
		tap_failf("kvrt_gpu_plan_create(%d, %d) = %d", PLAN_SEQS, PLAN_Q_TOKENS, r);
		return NULL;
	}
	plans[nplans].nq = nq;
	plans[nplans].nkv = tc->nkv;
	return plans[nplans++].p;
}

/* Random q of the case's dtype for ntok tokens. */
void *make_q(const struct tcase *tc, uint32_t ntok)
{
	size_t n = (size_t)ntok * tc->nkv * tc->group * tc->hd, i;
	void *q = xmalloc(n * esize(tc->q_dt));

	for (i = 0; i < n; i++)
		enc(tc->q_dt, q, i, tc->qamp * rnd_unit());
	return q;
}

/* A device output buffer of obytes followed by GUARD bytes of 0xa5. */
void *dev_out(size_t obytes)
{
	uint8_t *h = xmalloc(obytes + GUARD);
	void *d;

	memset(h, 0xa5, obytes + GUARD);
	d = dev_dup(h, obytes + GUARD);
	free(h);
	return d;
}

/*
 * Decode on the GPU with plan pl, for seq_lens (host) over world w; the
 * output (with its guard) into host gout.  0 or the failing call's errno.
 */
static int gpu_decode(struct kvrt_gpu_plan *pl, const struct world *w, const int32_t *seq_lens,
		      const void *q, uint8_t *gout, struct kvrt_gpu_plan_info *info)
{
	const struct tcase *tc = &w->tc;
	struct kvrt_attn_params p = case_params(tc, KVRT_ATTN_FAST);
	size_t qbytes = (size_t)tc->nseq * p.num_q_heads * tc->hd * esize(tc->q_dt);
	size_t obytes = (size_t)tc->nseq * p.num_q_heads * tc->hd * esize(tc->o_dt);
	void *dq = NULL, *dout = NULL, *dlens = NULL;
	int ret;

	ret = kvrt_gpu_plan_decode(pl, &p, &w->lo, tc->nseq, seq_lens);
	if (ret) {
		char desc[600];

		describe(desc, sizeof(desc), tc);
		tap_failf("kvrt_gpu_plan_decode = %d: %s", ret, desc);
		return ret;
	}
	if (info) {
		ret = kvrt_gpu_plan_info(pl, info);
		CHECKF(!ret && info->num_seqs == tc->nseq, "kvrt_gpu_plan_info = %d, num_seqs %u", ret,
		       info->num_seqs);
	}
	dq = dev_dup(q, qbytes);
	dout = dev_out(obytes);
	dlens = dev_dup(seq_lens, sizeof(int32_t) * tc->nseq);
	ret = -ENOMEM;
	if (dq && dout && dlens) {
		struct kvrt_kv_cache kv = { &w->lo, w->d_cache, w->d_scales, w->layer };
		struct kvrt_block_table bt = { tc->nseq, w->d_indptr, w->d_indices, dlens };

		ret = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL);
		if (ret)
			tap_failf("kvrt_gpu_attn_decode = %d", ret);
		else if (!(ret = dev_sync()))
			ret = dev_get(gout, dout, obytes + GUARD);
	}
	dev_free(dq);
	dev_free(dout);
	dev_free(dlens);
	return ret;
}

void run_decode(const struct tcase *tc, const char *what, struct kvrt_gpu_plan_info *info)
{
	uint32_t nq = tc->nkv * tc->group, s;
	size_t nrows = (size_t)tc->nseq * nq, obytes = nrows * tc->hd * esize(tc->o_dt);
	int32_t seq_lens[MAX_SEQS];
	uint32_t seqs[MAX_SEQS];
	int64_t pos[MAX_SEQS];
	struct world w;
	void *q, *cpu_out;
	uint8_t *gout;
	int ret;

	if (world_make(&w, tc)) {
		world_free(&w);
		return;
	}
	for (s = 0; s < tc->nseq; s++) {
		seq_lens[s] = (int32_t)tc->lens[s];
		seqs[s] = s;
		pos[s] = tc->lens[s] - 1;
		if (tc->window >= 0 && (int64_t)tc->lens[s] - 1 - tc->window > 0)
			poison_range(&w, s, 0, tc->lens[s] - 1 - tc->window);
	}
	if (world_upload(&w)) {
		world_free(&w);
		return;
	}
	q = make_q(tc, tc->nseq);
	cpu_out = xmalloc(obytes);
	gout = xmalloc(obytes + GUARD);
	{
		struct kvrt_attn_params p = case_params(tc, KVRT_ATTN_REFERENCE);
		struct kvrt_kv_cache kv = { &w.lo, w.cache, w.scales, w.layer };
		struct kvrt_block_table bt = { tc->nseq, w.indptr, w.indices, seq_lens };

		ret = kvrt_attn_decode(&p, q, &kv, &bt, cpu_out);
		CHECKF(!ret, "%s: CPU kvrt_attn_decode = %d", what, ret);
	}
	if (!ret && plan_for(tc) && !gpu_decode(plan_for(tc), &w, seq_lens, q, gout, info)) {
		struct qrows qr = { tc->nseq, seqs, pos, q };

		check_outputs(&w, &qr, cpu_out, gout, what);
	}
	free(q);
	free(cpu_out);
	free(gout);
	world_free(&w);
}

/*
 * Chunked prefill: each sequence's prompt in rounds; in round c sequence s
 * runs its chunk c (maybe empty) with seq_lens = the tokens so far.
 * last_chunk > 0: two rounds, the second the last last_chunk tokens of
 * every sequence, and only that one is run (the float64 reference is
 * quadratic: long prompts check their last chunk only).
 */
void run_prefill(const struct tcase *tc, uint32_t rounds, uint32_t last_chunk,
		 const char *what)
{
	uint32_t nq = tc->nkv * tc->group, s, c, j;
	uint32_t (*cut)[9] = xmalloc(sizeof(*cut) * tc->nseq);
	struct world w;

	if (world_make(&w, tc) || world_upload(&w)) {
		world_free(&w);
		free(cut);
		return;
	}
	if (last_chunk)
		rounds = 2;
	for (s = 0; s < tc->nseq; s++) {
		cut[s][0] = 0;
		cut[s][rounds] = tc->lens[s];
		if (last_chunk) {
			cut[s][1] = tc->lens[s] > last_chunk ? tc->lens[s] - last_chunk : 0;
			continue;
		}
		for (c = 1; c < rounds; c++) {	/* sorted random cuts */
			uint32_t x = rnd_below(tc->lens[s] + 1);

			for (j = c; j > 1 && cut[s][j - 1] > x; j--)
				cut[s][j] = cut[s][j - 1];
			cut[s][j] = x;
		}
	}
	for (c = last_chunk ? 1 : 0; c < rounds; c++) {
		int32_t seq_lens[MAX_SEQS], q_indptr[MAX_SEQS + 1];
		uint32_t *tseq;
		int64_t *tpos;
		size_t nrows, obytes, qbytes;
		struct kvrt_attn_params p = case_params(tc, KVRT_ATTN_REFERENCE);
		void *q, *cpu_out, *dq = NULL, *dout = NULL, *dlens = NULL, *dqi = NULL;
		uint8_t *gout;
		uint32_t ntok;
		int ret;

		q_indptr[0] = 0;
		for (s = 0; s < tc->nseq; s++) {
			uint32_t len = cut[s][c + 1];

			seq_lens[s] = len ? (int32_t)len : 1;	/* an empty chunk still needs >= 1 */
			q_indptr[s + 1] = q_indptr[s] + (int32_t)(cut[s][c + 1] - cut[s][c]);
		}
		ntok = (uint32_t)q_indptr[tc->nseq];
		if (!ntok)
			continue;
		nrows = (size_t)ntok * nq;
		obytes = nrows * tc->hd * esize(tc->o_dt);
		qbytes = nrows * tc->hd * esize(tc->q_dt);
		tseq = xmalloc(sizeof(*tseq) * ntok);
		tpos = xmalloc(sizeof(*tpos) * ntok);
		for (s = 0; s < tc->nseq; s++)
			for (j = (uint32_t)q_indptr[s]; j < (uint32_t)q_indptr[s + 1]; j++) {
				tseq[j] = s;
				tpos[j] = cut[s][c] + (j - q_indptr[s]);
			}
		q = make_q(tc, ntok);
		cpu_out = xmalloc(obytes);
		gout = xmalloc(obytes + GUARD);
		{
			struct kvrt_kv_cache kv = { &w.lo, w.cache, w.scales, w.layer };
			struct kvrt_block_table bt = { tc->nseq, w.indptr, w.indices, seq_lens };

			ret = kvrt_attn_prefill(&p, q, q_indptr, &kv, &bt, cpu_out);
			CHECKF(!ret, "%s: CPU kvrt_attn_prefill = %d", what, ret);
		}
		if (!ret) {
			p.impl = KVRT_ATTN_FAST;
			ret = plan_for(tc) ? kvrt_gpu_plan_prefill(plan_for(tc), &p, &w.lo, tc->nseq,
								   q_indptr, seq_lens) : -ENOMEM;
			CHECKF(!ret, "%s: kvrt_gpu_plan_prefill = %d (%u query tokens)", what, ret, ntok);
		}
		if (!ret) {
			dq = dev_dup(q, qbytes);
			dout = dev_out(obytes);
			dlens = dev_dup(seq_lens, sizeof(int32_t) * tc->nseq);
			dqi = dev_dup(q_indptr, sizeof(int32_t) * (tc->nseq + 1));
			ret = dq && dout && dlens && dqi ? 0 : -ENOMEM;
		}
		if (!ret) {
			struct kvrt_kv_cache kv = { &w.lo, w.d_cache, w.d_scales, w.layer };
			struct kvrt_block_table bt = { tc->nseq, w.d_indptr, w.d_indices, dlens };

			ret = kvrt_gpu_attn_prefill(plan_for(tc), dq, dqi, &kv, &bt, dout, NULL);
			CHECKF(!ret, "%s: kvrt_gpu_attn_prefill = %d", what, ret);
			if (!ret && !(ret = dev_sync()))
				ret = dev_get(gout, dout, obytes + GUARD);
		}
		if (!ret) {
			struct qrows qr = { ntok, tseq, tpos, q };
			char rw[96];

			snprintf(rw, sizeof(rw), "%s, round %u/%u", what, c + 1, rounds);
			check_outputs(&w, &qr, cpu_out, gout, rw);
		}
		dev_free(dq);
		dev_free(dout);
		dev_free(dlens);
		dev_free(dqi);
		free(tseq);
		free(tpos);
		free(q);
		free(cpu_out);
		free(gout);
	}
	world_free(&w);
	free(cut);
}

/* Lengths: 1, a block multiple, one past one, or anything up to max_len. */
uint32_t random_len(uint32_t bt, uint32_t max_len)
{
	switch (rnd_below(5)) {
	case 0:
		return 1;
	case 1:
		return bt * (1 + rnd_below((max_len + bt - 1) / bt));
	case 2:
		return bt * rnd_below((max_len + bt - 1) / bt) + 1;
	default:
		return 1 + rnd_below(max_len);
	}
}

const enum kvrt_dtype kv_types[] = { KVRT_DTYPE_F16, KVRT_DTYPE_BF16, KVRT_DTYPE_FP8_E4M3 };
const enum kvrt_dtype qo_types[] = { KVRT_DTYPE_F32, KVRT_DTYPE_F16, KVRT_DTYPE_BF16 };

/* max_group 8 or 32 (32: also MQA-like wide groups) */
void random_case(struct tcase *tc, uint32_t max_len, uint32_t max_seqs, uint32_t max_group)
{
	static const uint32_t bts[] = { 1, 16, 16, 17, 128 };
	static const uint32_t hds[] = { 64, 128, 256 };
	static const uint32_t groups[] = { 1, 4, 8, 32 };
	uint32_t s;

	memset(tc, 0, sizeof(*tc));
	tc->bt = bts[rnd_below(5)];
	tc->hd = hds[rnd_below(3)];
	tc->group = groups[rnd_below(max_group >= 32 ? 4 : 3)];
	tc->nkv = tc->group >= 8 ? 1 + rnd_below(2) : 1 + rnd_below(4);
	tc->kv_dt = kv_types[rnd_below(3)];
	tc->q_dt = qo_types[rnd_below(3)];
	tc->o_dt = qo_types[rnd_below(3)];
	tc->layout = (int)rnd_below(NR_LAYOUTS);
	tc->window = rnd_below(3) ? -1 : (int32_t)rnd_below(max_len / 2 + 1);
	tc->softcap = rnd_below(4) ? 0.0f : 5.0f + (float)rnd_below(25);
	tc->qamp = rnd_below(2) ? 1.0 : 4.0;
	tc->nseq = 1 + rnd_below(max_seqs);
	for (s = 0; s < tc->nseq; s++) {
		tc->lens[s] = random_len(tc->bt, max_len);
		tc->extra[s] = rnd_below(4) ? 0 : 1;
	}
}
