// SPDX-License-Identifier: MIT
/*
 * test_gpu: libkvrt's GPU path (kvrt.h, "GPU (0.3)").
 *
 * Always, with or without a GPU (these never skip):
 *   - kvrt_gpu_probe() returns 0 or -ENODEV with a reason; anything else
 *     fails;
 *   - kvrt_gpu_open(): -EINVAL for a NULL handle, a NULL out and a
 *     negative ordinal; -ENODEV (and *out NULL) where the probe said
 *     -ENODEV; kvrt_gpu_close(NULL) and kvrt_gpu_plan_destroy(NULL) are
 *     no-ops;
 *   - every other kvrt_gpu_* call given a NULL gpu or plan handle returns
 *     -EINVAL;
 *   - the output comparison used below fails on a perturbed output and on
 *     NaN (a test of the test).
 * Without a usable GPU the rest is one "ok N - ... # SKIP no usable GPU:
 * <the probe's reason>" line and the program exits 0.
 *
 * With a GPU (device $KVRT_GPU_DEVICE, default 0), device memory through
 * kvrt_gpu_alloc/memcpy/free/sync only (no CUDA runtime):
 *
 *   attention: kvrt_gpu_plan_decode + kvrt_gpu_attn_decode and
 *   kvrt_gpu_plan_prefill + kvrt_gpu_attn_prefill against (1) a float64
 *   attention written here (K and V of each sequence gathered from the
 *   paged cache by this file's own decoders, then dense attention in
 *   double) and (2) libkvrt's CPU KVRT_ATTN_REFERENCE on the same inputs.
 *   Shapes: head_dim 64/128/256; block_tokens 1, 16, 17, 128; GQA 1, 4, 8
 *   and wide groups (32 q heads over 1 KV head: MQA, 16 over 2); ragged
 *   batches with lengths 1, block multiples and one past them, up to 64
 *   sequences; block-major, layer-major, head-major and a padded layout,
 *   layer 1 of 2; q f32/f16/bf16, out f32/f16/bf16, KV f16/bf16/fp8 e4m3
 *   (every cache is written by the CPU kvrt_append_kv, so fp8 scales
 *   follow the library's rule); sliding windows and soft-caps; batch 1
 *   at 32768+ tokens, which must be split along the keys
 *   (kvrt_gpu_plan_info().num_split > 0); chunked prefill.  Every slot
 *   the query may not see (past a sequence's length, before its window,
 *   the other layer, unused blocks) holds NaN, and 256 guard bytes after
 *   the output must stay as they were.  One plan object per head
 *   configuration serves every case of it (each plan replaces the last);
 *   the replan case checks batch A, then a different batch B, then A
 *   again on one plan object, and a CUDA graph captured once replays
 *   correctly after each later plan (the graph case loads libcuda itself
 *   for streams and graphs; it skips with the reason where it cannot).
 *
 *   append: kvrt_gpu_append_kv against the CPU kvrt_append_kv into
 *   identical caches: f16/bf16 bit-identical; fp8 (see below); slots < 0
 *   and >= num_blocks * block_tokens skipped, everything else untouched;
 *   argument errors as the CPU's.
 *
 *   read stream: kvrt_gpu_read_stream's sum of the words read equals the
 *   CPU's, around its tile sizes; misaligned arguments -EINVAL.
 *
 *   copies: kvrt_gpu_copy_blocks for each method (BATCH skips with the
 *   reason when the driver has no cuMemcpyBatchAsync, -ENOTSUP), between
 *   device memory, an embedded space registered with
 *   kvrt_gpu_register_space and a malloc'd buffer registered with
 *   kvrt_gpu_register_host, both directions, block-major <-> layer-major
 *   and block-major <-> block-major, fp8 with separate and inline scales:
 *   every byte as a CPU kvrt_copy_blocks of the same pairs leaves it;
 *   validation errnos as kvrt_copy_blocks's, nothing copied on error.
 *   Registration: registered_bytes, idempotence, -EBUSY from a second
 *   kvrt_gpu, kvrt_gpu_close unregistering.
 *
 * ---- attention tolerances ------------------------------------------------------
 *
 * An output row is compared with the reference as max over its dims of
 * |out - ref| / vscale, where vscale is the largest |v| the row attends to
 * (the output is a convex combination of those v).  K, V and q enter the
 * reference as stored (f16/bf16 values, fp8 byte x scale), so input
 * rounding by the test is not in the error.  What the GPU may still round,
 * with u(t) the unit roundoff of t (f32 2^-24, f16 2^-11, bf16 2^-8):
 *
 *   output           u(o_dtype): the result rounded to o_dtype;
 *   weights          u_p = 2^-11 for f16 K/V, else 2^-8: tensor-core P.V
 *                    takes the softmax weights rounded to the K/V's 16-bit
 *                    type (bf16 for fp8); each weight off by a relative
 *                    u_p moves the output by at most u_p * vscale;
 *   logits           ds = (head_dim + 8) 2^-24 S + 2^-21
 *                          (+ cap 2^-10.9 with a soft-cap)
 *                    where S = sm_scale * sum_d |q_d k_d| (largest over the
 *                    keys attended): an f32 dot product of head_dim terms,
 *                    the scale and log2(e) folded in, exp2 approximated to
 *                    2^-22; the hardware tanh.approx has a relative error of
 *                    2^-10.99, times the cap.  Logits off by ds move a
 *                    softmax average by at most expm1(2 ds) * vscale;
 *   sums             8 sqrt(L) 2^-24 + 2^-18 for L keys: f32 sums of random
 *                    terms (and the merge of split partials) whose rounding
 *                    errors grow like sqrt(L);
 *
 *   tol = u(o) + u_p + expm1(2 ds) + 8 sqrt(L) 2^-24 + 2^-18   (x vscale).
 *
 * Tensor cores take q and K in a 16-bit type too, so q of a finer type
 * than the K/V's (f32 q, or f16 q over bf16 K/V) may be rounded to it, and
 * fp8 K/V may be dequantised (byte x scale) into f16 or bf16.  Rather than
 * widen the tolerance by those roundings (2^-8 of every logit: far too
 * loose), the reference is also computed from q and K/V so rounded
 * (round-to-nearest-even here), and a case passes when every row is
 * within tol of one of these candidates; which one matched is counted and
 * printed.  Typical tol: bf16 K/V, q and out 0.8 %; f16 K/V and q, f32
 * out 0.05 %; a bug (a key missed or attended twice, a wrong scale, a
 * wrong block) moves outputs by several percent or makes them NaN.
 *
 * The CPU reference is held to test_attn's bound (1e-5 + u(o)); GPU
 * against CPU to the sum of both bounds plus the distance between the
 * matched candidate and the unrounded reference: a failure there with (1)
 * passing points at the test, not the GPU.
 *
 * fp8 append: the CPU computes scale = absmax / 448 and byte =
 * fp8(x / scale), requantising with fp8(old * old_scale / new_scale), all
 * in IEEE f32; a kernel that does the same is bit-identical.  A kernel may
 * multiply by a reciprocal instead of dividing (one f32 rounding more), so
 * scales may differ by 1 ulp and bytes by one fp8 code, in at most 1 % of
 * the bytes written; anything else fails.
 *
 * Environment: KVRT_TEST_SEED, KVRT_TEST_CASES (random attention cases,
 * default 40 decode and a third as many prefill), KVRT_GPU_DEVICE.  Aimed
 * at well under a minute on an H100 (the float64 reference and the CPU
 * reference dominate: about 13 s on a 2-core VM with a CPU stand-in for
 * the GPU, 19 s under ASan; long prompts check their last chunk only).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvrt.h"
#include "kv_data.h"
#include "../../selftests/tap.h"

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
static void pin_driver(void)
{
#if defined(__SANITIZE_ADDRESS__)
	static void *pinned;
	const char *path = getenv("KVRT_LIBCUDA");

	pinned = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	(void)pinned;
#endif
}

static struct kvrt *K;
static struct kvrt_gpu *G;
static struct kvrt_gpu_info GI;
/*
 * Plan objects, one per head configuration (q heads, KV heads), as an
 * engine keeps one per model: every case of that configuration re-plans
 * the same object.  (kvrt.h gives a plan's capacity as max_seqs and
 * max_q_tokens; the workspace also depends on the heads of the first
 * plan, so configurations do not share one.)
 */
static struct {
	uint32_t nq, nkv;
	struct kvrt_gpu_plan *p;
} plans[64];
static unsigned int nplans;
static int probe_ret;
static char probe_why[512];

#define PLAN_SEQS 64
#define PLAN_Q_TOKENS 8192
#define GUARD 256

/* ---- random helpers (rnd() and the codecs: kv_data.h) ------------------------- */

static void shuffle(uint32_t *v, uint32_t n)
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

static void *xmalloc(size_t n)
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

enum { L_BM, L_LM, L_HM, L_PAD, NR_LAYOUTS };
static const char *const layout_name[] = { "block-major", "layer-major", "head-major",
					   "padded" };

static void fill_layout(struct kvrt_layout *lo, int kind, uint32_t layers, uint32_t heads,
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
		lo->head_stride = row;
		lo->token_stride = heads * row;
		lo->block_stride = bt * lo->token_stride;
		lo->kv_stride = nblocks * lo->block_stride;
		lo->layer_stride = 2 * lo->kv_stride;
		lo->scale_block_stride = heads;
		lo->scale_kv_stride = (int64_t)nblocks * heads;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride;
		break;
	case L_HM:	/* [layer][kv][block][head][token][dim] */
		lo->token_stride = row;
		lo->head_stride = bt * row;
		lo->block_stride = heads * lo->head_stride;
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

static void *dev_alloc(size_t n)
{
	void *p = NULL;
	int r = kvrt_gpu_alloc(G, n ? n : 1, &p);

	if (r || !p) {
		tap_failf("kvrt_gpu_alloc(%zu) = %d", n, r);
		return NULL;
	}
	return p;
}

static void dev_free(void *p)
{
	int r;

	if (!p)
		return;
	r = kvrt_gpu_free(G, p);
	CHECKF(!r, "kvrt_gpu_free = %d", r);
}

static void *dev_dup(const void *h, size_t n)
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

static int dev_get(void *h, const void *d, size_t n)
{
	int r = n ? kvrt_gpu_memcpy(G, h, d, n) : 0;

	if (r)
		tap_failf("kvrt_gpu_memcpy(to host, %zu) = %d", n, r);
	return r;
}

static int dev_sync(void)
{
	int r = kvrt_gpu_sync(G, NULL);

	if (r)
		tap_failf("kvrt_gpu_sync = %d", r);
	return r;
}

/* ---- attention cases ------------------------------------------------------------- */

#define MAX_SEQS 64

struct tcase {
	uint32_t bt, nkv, group, hd, nseq;
	enum kvrt_dtype kv_dt, q_dt, o_dt;
	int layout;
	int32_t window;
	float softcap;
	double qamp;		/* query magnitude: larger = peakier softmax */
	uint32_t lens[MAX_SEQS];	/* tokens in the cache per sequence */
	uint32_t extra[MAX_SEQS];	/* unused blocks at the end of a block list */
};

struct world {
	struct tcase tc;
	struct kvrt_layout lo;
	uint8_t *cache;
	size_t cache_bytes;
	float *scales;
	size_t nscales;
	int32_t *indptr, *indices;
	uint32_t layer;
	void *d_cache, *d_scales, *d_indptr, *d_indices;
};

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

static void world_free(struct world *w)
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
static int world_make(struct world *w, const struct tcase *tc)
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

static int world_upload(struct world *w)
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

/* A candidate: q rounded to rq, dequantised K/V rounded to rkv (F32: not rounded). */
struct cand {
	enum kvrt_dtype rq, rkv;
};

static const char *cand_name(const struct cand *c, char *buf, size_t n)
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

/* What a row's tolerance depends on. */
struct rowinfo {
	double vscale;		/* largest |v| attended */
	double qk;		/* largest sm_scale * sum_d |q_d k_d| over the keys attended */
	uint32_t nkeys;
};

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

/*
 * The query rows of one call: token row j belongs to sequence seq[j] and
 * sits at position pos[j]; rows are (token, q head) pairs, token-major.
 */
struct qrows {
	uint32_t ntok;
	const uint32_t *seq;
	const int64_t *pos;
	const void *q;		/* host, [ntok][nq][hd] of q_dt */
};

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
static double gpu_tol(const struct tcase *tc, const struct rowinfo *ri)
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
static double worst_ratio(const struct tcase *tc, const void *out, size_t nrows, const double *ref,
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

static struct {
	double worst[4];	/* largest err / tol of a passing GPU case, by kv dtype */
	unsigned int matched[4][4];	/* calls per candidate: [rq][rkv] */
	unsigned int cases, splits;
} stats;

static struct kvrt_attn_params case_params(const struct tcase *tc, enum kvrt_attn_impl impl)
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
static void check_outputs(const struct world *w, const struct qrows *qr, const void *cpu_out,
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
static void *make_q(const struct tcase *tc, uint32_t ntok)
{
	size_t n = (size_t)ntok * tc->nkv * tc->group * tc->hd, i;
	void *q = xmalloc(n * esize(tc->q_dt));

	for (i = 0; i < n; i++)
		enc(tc->q_dt, q, i, tc->qamp * rnd_unit());
	return q;
}

/* A device output buffer of obytes followed by GUARD bytes of 0xa5. */
static void *dev_out(size_t obytes)
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

static void run_decode(const struct tcase *tc, const char *what, struct kvrt_gpu_plan_info *info)
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
static void run_prefill(const struct tcase *tc, uint32_t rounds, uint32_t last_chunk,
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
static uint32_t random_len(uint32_t bt, uint32_t max_len)
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

static const enum kvrt_dtype kv_types[] = { KVRT_DTYPE_F16, KVRT_DTYPE_BF16, KVRT_DTYPE_FP8_E4M3 };
static const enum kvrt_dtype qo_types[] = { KVRT_DTYPE_F32, KVRT_DTYPE_F16, KVRT_DTYPE_BF16 };

/* max_group 8 or 32 (32: also MQA-like wide groups) */
static void random_case(struct tcase *tc, uint32_t max_len, uint32_t max_seqs, uint32_t max_group)
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

/* ---- always: API behaviour without a GPU ----------------------------------------------- */

TEST(probe_result)
{
	char small[4];
	int r;

	CHECKF(probe_ret == 0 || probe_ret == -ENODEV,
	       "kvrt_gpu_probe = %d (%s): only 0 and -ENODEV are allowed", probe_ret, probe_why);
	if (probe_ret == -ENODEV) {
		CHECKF(probe_why[0], "kvrt_gpu_probe = -ENODEV without a reason");
		tap_diag("no usable GPU: %s", probe_why);
	}
	r = kvrt_gpu_probe(NULL, 0);
	CHECKF(r == probe_ret, "kvrt_gpu_probe(NULL, 0) = %d, with a buffer %d", r, probe_ret);
	memset(small, 'x', sizeof(small));
	r = kvrt_gpu_probe(small, sizeof(small));
	CHECKF(r == probe_ret, "kvrt_gpu_probe(4-byte buffer) = %d", r);
	CHECKF(r == 0 || memchr(small, 0, sizeof(small)),
	       "kvrt_gpu_probe: the reason overran or was not terminated in a 4-byte buffer");
}

TEST(open_argument_errors)
{
	struct kvrt_gpu *g = (struct kvrt_gpu *)&g;	/* not NULL: must be reset */
	int r;

	CHECKF((r = kvrt_gpu_open(NULL, 0, &g)) == -EINVAL, "kvrt_gpu_open(NULL k) = %d", r);
	CHECKF((r = kvrt_gpu_open(K, -1, &g)) == -EINVAL, "kvrt_gpu_open(device -1) = %d", r);
	CHECKF((r = kvrt_gpu_open(K, 0, NULL)) == -EINVAL, "kvrt_gpu_open(NULL out) = %d", r);
	if (probe_ret == -ENODEV) {
		g = (struct kvrt_gpu *)&g;
		r = kvrt_gpu_open(K, 0, &g);
		CHECKF(r == -ENODEV, "kvrt_gpu_open where the probe says -ENODEV = %d", r);
		CHECKF(g == NULL, "kvrt_gpu_open failed but left *out non-NULL");
		if (!r)
			kvrt_gpu_close(g);
	}
	kvrt_gpu_close(NULL);
	kvrt_gpu_plan_destroy(NULL);
}

TEST(null_handles_einval)
{
	static uint8_t page[8192] __attribute__((aligned(4096)));
	uint8_t host[64] = { 0 };
	struct kvrt_space_opts so = { .name = "test_gpu_null", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = 4096, .quota_bytes = 4 * 4096 };
	struct kvrt_space *sp = NULL;
	struct kvrt_layout lo;
	struct kvrt_block_array a = { &lo, page, NULL };
	struct kvrt_block_pair pair = { 0, 1 };
	struct kvrt_kv_cache kv = { &lo, page, NULL, 0 };
	int32_t indptr[2] = { 0, 1 }, indices[1] = { 0 }, lens[1] = { 1 }, qi[2] = { 0, 1 };
	struct kvrt_block_table bt = { 1, indptr, indices, lens };
	struct kvrt_attn_params p = { .num_q_heads = 1, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32 };
	struct kvrt_gpu_info info;
	struct kvrt_gpu_plan_info pinfo;
	struct kvrt_gpu_plan *plan = NULL;
	int64_t slot = 0;
	void *dp = NULL;
	int r;

	REQUIRE(kvrt_layout_init(&lo, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 1, 2, KVRT_DTYPE_F32) == 0);
	r = kvrt_space_open(K, &so, &sp);
	CHECKF(!r, "kvrt_space_open = %d", r);

#define NULL_EINVAL(call)                                                                  \
	do {                                                                               \
		int r_ = (call);                                                           \
		CHECKF(r_ == -EINVAL, "%s = %d, want -EINVAL", #call, r_);                 \
	} while (0)
	NULL_EINVAL(kvrt_gpu_info(NULL, &info));
	NULL_EINVAL(kvrt_gpu_alloc(NULL, 4096, &dp));
	NULL_EINVAL(kvrt_gpu_free(NULL, page));
	NULL_EINVAL(kvrt_gpu_memcpy(NULL, host, page, sizeof(host)));
	NULL_EINVAL(kvrt_gpu_sync(NULL, NULL));
	NULL_EINVAL(kvrt_gpu_read_stream(NULL, page, 16, NULL, NULL));
	if (sp) {
		NULL_EINVAL(kvrt_gpu_register_space(NULL, sp));
		NULL_EINVAL(kvrt_gpu_unregister_space(NULL, sp));
	}
	NULL_EINVAL(kvrt_gpu_register_host(NULL, page, 4096));
	NULL_EINVAL(kvrt_gpu_unregister_host(NULL, page));
	NULL_EINVAL(kvrt_gpu_copy_blocks(NULL, &a, &a, &pair, 1, KVRT_GPU_COPY_AUTO, NULL));
	NULL_EINVAL(kvrt_gpu_append_kv(NULL, &kv, host, host, KVRT_DTYPE_F32, &slot, 1, NULL));
	NULL_EINVAL(kvrt_gpu_plan_create(NULL, 1, 1, &plan));
	CHECKF(plan == NULL, "kvrt_gpu_plan_create(NULL gpu) set *out");
	NULL_EINVAL(kvrt_gpu_plan_decode(NULL, &p, &lo, 1, lens));
	NULL_EINVAL(kvrt_gpu_plan_prefill(NULL, &p, &lo, 1, qi, lens));
	NULL_EINVAL(kvrt_gpu_plan_info(NULL, &pinfo));
	NULL_EINVAL(kvrt_gpu_attn_decode(NULL, host, &kv, &bt, page, NULL));
	NULL_EINVAL(kvrt_gpu_attn_prefill(NULL, host, qi, &kv, &bt, page, NULL));
#undef NULL_EINVAL
	CHECKF(dp == NULL, "kvrt_gpu_alloc(NULL gpu) set *dptr");
	kvrt_space_close(sp);
}

/* The comparison fails on an output off by 3 tolerances, and on NaN. */
TEST(comparator_detects_errors)
{
	struct tcase tc = { .hd = 4, .nkv = 1, .group = 1, .kv_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_F32, .window = -1 };
	double ref[8] = { 0.5, -0.25, 0.125, 1.0, 0.3, 0.2, 0.1, 0.0 };
	struct rowinfo ri[2] = { { 1.0, 3.0, 100 }, { 2.0, 3.0, 100 } };
	float out[8];
	uint16_t b[8];
	size_t where = 0, i;
	double tol = gpu_tol(&tc, &ri[1]);

	for (i = 0; i < 8; i++)
		out[i] = (float)ref[i];
	CHECKF(worst_ratio(&tc, out, 2, ref, ri, true, &where) <= 1,
	       "an exact output was rejected");
	out[6] += (float)(3 * tol * ri[1].vscale);
	CHECKF(worst_ratio(&tc, out, 2, ref, ri, true, &where) > 1 && where == 1,
	       "an output off by 3 tolerances was not detected");
	out[6] = NAN;
	CHECKF(isnan(worst_ratio(&tc, out, 2, ref, ri, true, &where)),
	       "a NaN output was not detected");
	/* bf16 out: 4 ulps off fails (the bound is about 2 ulps of the row's scale) */
	tc.o_dt = KVRT_DTYPE_BF16;
	for (i = 0; i < 8; i++)
		enc(KVRT_DTYPE_BF16, b, i, ref[i]);
	enc(KVRT_DTYPE_BF16, b, 3, 1.0 + 4 * 0x1p-7);
	CHECKF(worst_ratio(&tc, b, 2, ref, ri, true, &where) > 1 && where == 0,
	       "a bf16 output 4 ulps off was not detected");
	/* a typical bound, for the record */
	tc = (struct tcase){ .hd = 128, .kv_dt = KVRT_DTYPE_BF16, .o_dt = KVRT_DTYPE_BF16 };
	tap_diag("tolerance, bf16 K/V and out, hd 128, S 3, 1000 keys: %.3g of vscale",
		 gpu_tol(&tc, &(struct rowinfo){ 1.0, 3.0, 1000 }));
	tc.kv_dt = KVRT_DTYPE_F16;
	tc.o_dt = KVRT_DTYPE_F32;
	tap_diag("tolerance, f16 K/V, f32 out, hd 128, S 3, 1000 keys: %.3g of vscale",
		 gpu_tol(&tc, &(struct rowinfo){ 1.0, 3.0, 1000 }));
}

static char skip_reason[600];

TEST(gpu_tests)
{
	snprintf(skip_reason, sizeof(skip_reason), "no usable GPU: %s", probe_why);
	tap_skip(skip_reason);
}

/* ---- with a GPU: handle, memory, plans ---------------------------------------------------- */

TEST(open_and_info)
{
	const char *e = getenv("KVRT_GPU_DEVICE");
	int dev = e ? atoi(e) : 0, r;
	struct kvrt_gpu *g = (struct kvrt_gpu *)&g;

	r = kvrt_gpu_open(K, dev, &G);
	REQUIRE(r == 0 && G);
	r = kvrt_gpu_info(G, &GI);
	REQUIRE(r == 0);
	tap_diag("device %d: %s, compute %d.%d, %u SMs, %.1f GiB, driver %d, batch memcpy %u", GI.device,
		 GI.name, GI.cc_major, GI.cc_minor, GI.sm_count, GI.total_mem / 1073741824.0,
		 GI.driver_version, GI.batch_memcpy);
	CHECKF(GI.device == dev, "info.device %d, opened %d", GI.device, dev);
	CHECKF(GI.name[0] && memchr(GI.name, 0, sizeof(GI.name)), "info.name empty or unterminated");
	CHECKF(GI.cc_major >= 8, "compute %d.%d: open should have said -ENOTSUP", GI.cc_major,
	       GI.cc_minor);
	CHECKF(GI.driver_version >= 12000, "driver_version %d", GI.driver_version);
	CHECKF(GI.sm_count > 0 && GI.total_mem > 0, "sm_count %u, total_mem %llu", GI.sm_count,
	       (unsigned long long)GI.total_mem);
	CHECKF(GI.batch_memcpy <= 1, "batch_memcpy %u", GI.batch_memcpy);
	CHECKF(GI.registered_bytes == 0, "registered_bytes %llu on a fresh handle",
	       (unsigned long long)GI.registered_bytes);
	r = kvrt_gpu_open(K, 1 << 20, &g);
	CHECKF(r == -ENODEV && g == NULL, "kvrt_gpu_open(ordinal 2^20) = %d (want -ENODEV, *out NULL)",
	       r);
}

TEST(device_memory)
{
	size_t n = (4 << 20) + 123, i;
	uint8_t *h = xmalloc(n), *back = xmalloc(n);
	void *a = dev_alloc(n), *b = dev_alloc(n);
	int r;

	for (i = 0; i < n; i++)
		h[i] = (uint8_t)rnd();
	if (a && b) {
		CHECKF(!(r = kvrt_gpu_memcpy(G, a, h, n)), "memcpy host->device = %d", r);
		CHECKF(!(r = kvrt_gpu_memcpy(G, b, a, n)), "memcpy device->device = %d", r);
		memset(back, 0, n);
		CHECKF(!(r = kvrt_gpu_memcpy(G, back, b, n)), "memcpy device->host = %d", r);
		CHECKF(!memcmp(h, back, n), "device round trip changed the bytes");
		/* an unaligned piece */
		CHECKF(!(r = kvrt_gpu_memcpy(G, back + 1, (uint8_t *)a + 7, 1000)),
		       "unaligned memcpy = %d", r);
		CHECKF(!memcmp(back + 1, h + 7, 1000), "unaligned copy differs");
		CHECKF(!(r = kvrt_gpu_memcpy(G, b, a, 0)), "memcpy of 0 bytes = %d", r);
		CHECKF((r = kvrt_gpu_memcpy(G, NULL, a, 16)) == -EINVAL, "memcpy to NULL = %d", r);
		CHECKF((r = kvrt_gpu_alloc(G, 16, NULL)) == -EINVAL, "alloc into NULL = %d", r);
		CHECKF(!(r = kvrt_gpu_sync(G, NULL)), "sync = %d", r);
	}
	/* far more than any device has */
	{
		void *huge = NULL;

		r = kvrt_gpu_alloc(G, (size_t)1 << 50, &huge);
		CHECKF(r == -ENOMEM && !huge, "alloc of 1 PiB = %d (want -ENOMEM)", r);
	}
	dev_free(a);
	dev_free(b);
	free(h);
	free(back);
}

/*
 * The read stream reads every byte: its sum equals the CPU's sum of the
 * 32-bit words, for sizes around its tiles (4096 bytes of 16 per thread);
 * misaligned pointers and sizes are -EINVAL.
 */
TEST(read_stream_sums)
{
	const size_t sizes[] = { 16, 4096 - 16, 4096 * 8 + 48, (3 << 20) + 4096 * 5 + 16 };
	size_t n = sizes[3], i, j;
	uint32_t *h = xmalloc(n);
	uint8_t *d = dev_alloc(n);
	uint64_t want, got;
	int r;

	for (i = 0; i < n / 4; i++)
		h[i] = (uint32_t)rnd() | 1;
	if (d && !kvrt_gpu_memcpy(G, d, h, n)) {
		for (j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
			for (want = 0, i = 0; i < sizes[j] / 4; i++)
				want += h[i];
			r = kvrt_gpu_read_stream(G, d, sizes[j], &got, NULL);
			CHECKF(!r && got == want, "read_stream(%zu bytes) = %d, sum %llx, CPU %llx",
			       sizes[j], r, (unsigned long long)got, (unsigned long long)want);
		}
		r = kvrt_gpu_read_stream(G, d, n, NULL, NULL);	/* timed form: queued */
		CHECKF(!r && !kvrt_gpu_sync(G, NULL), "read_stream without a sum = %d", r);
		CHECK_EQ(kvrt_gpu_read_stream(G, d + 8, 16, &got, NULL), -EINVAL);
		CHECK_EQ(kvrt_gpu_read_stream(G, d, 24, NULL, NULL), -EINVAL);
		CHECK_EQ(kvrt_gpu_read_stream(G, d, 0, &got, NULL), 0);
	}
	dev_free(d);
	free(h);
}

TEST(plan_validation)
{
	struct kvrt_gpu_plan *pl = NULL;
	struct kvrt_layout lo, bad;
	struct kvrt_attn_params p = { .num_q_heads = 8, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_BF16, .o_dtype = KVRT_DTYPE_BF16 }, p2;
	int32_t lens[5] = { 16, 1, 40, 3, 9 }, qi[6] = { 0, 16, 17, 57, 60, 69 };
	struct kvrt_gpu_plan_info info;
	int r;

	REQUIRE(kvrt_gpu_plan_create(G, 4, 64, &pl) == 0 && pl);
	REQUIRE(kvrt_layout_init(&lo, KVRT_LAYOUT_LAYER_MAJOR, 1, 2, 128, 16, 16,
				 KVRT_DTYPE_BF16) == 0);
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 4, lens)) == 0, "decode plan, 4 of 4 = %d", r);
	CHECKF((r = kvrt_gpu_plan_info(pl, &info)) == 0 && info.num_seqs == 4 && info.num_work > 0 &&
	       info.grid > 0, "plan_info = %d: seqs %u work %u grid %u", r, info.num_seqs,
	       info.num_work, info.grid);
	CHECKF((r = kvrt_gpu_plan_info(pl, NULL)) == -EINVAL, "plan_info(NULL) = %d", r);
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 5, lens)) == -E2BIG, "decode, 5 of 4 = %d", r);
	CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 4, qi, lens)) == 0, "prefill, 60 of 64 = %d",
	       r);
	CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 5, qi, lens)) == -E2BIG,
	       "prefill, 5 sequences of 4 = %d", r);
	qi[2] = 16;	/* 0, 16, 16, 57: sequence 2 (40 tokens) asks 41 */
	CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 3, qi, lens)) == -EINVAL,
	       "prefill, chunk longer than its sequence = %d", r);
	qi[2] = 17;
	{
		int32_t big[2] = { 0, 65 }, l1[1] = { 65 };

		CHECKF((r = kvrt_gpu_plan_prefill(pl, &p, &lo, 1, big, l1)) == -E2BIG,
		       "prefill, 65 of 64 query tokens = %d", r);
	}
#define PLAN_EINVAL(what, LO, PP)                                                          \
	do {                                                                               \
		int r_ = kvrt_gpu_plan_decode(pl, PP, LO, 2, lens);                        \
		CHECKF(r_ == -EINVAL, "decode plan with %s = %d, want -EINVAL", what, r_); \
	} while (0)
	bad = lo;
	bad.head_dim = 80;
	PLAN_EINVAL("head_dim 80", &bad, &p);
	bad = lo;
	bad.block_tokens = 129;
	PLAN_EINVAL("block_tokens 129", &bad, &p);
	bad = lo;
	bad.kv_dtype = KVRT_DTYPE_F32;
	PLAN_EINVAL("an f32 cache", &bad, &p);
	p2 = p;
	p2.q_dtype = KVRT_DTYPE_FP8_E4M3;
	PLAN_EINVAL("fp8 q", &lo, &p2);
	p2 = p;
	p2.o_dtype = KVRT_DTYPE_FP8_E4M3;
	PLAN_EINVAL("fp8 out", &lo, &p2);
	p2 = p;
	p2.num_q_heads = 7;
	PLAN_EINVAL("7 q heads over 2 KV heads", &lo, &p2);
	p2 = p;
	p2.window_left = -2;
	PLAN_EINVAL("window_left -2", &lo, &p2);
	p2 = p;
	p2.logit_softcap = -1;
	PLAN_EINVAL("a negative soft-cap", &lo, &p2);
	PLAN_EINVAL("NULL params", &lo, (const struct kvrt_attn_params *)NULL);
	PLAN_EINVAL("NULL layout", (const struct kvrt_layout *)NULL, &p);
#undef PLAN_EINVAL
	lens[0] = 0;
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 2, lens)) == -EINVAL,
	       "decode plan with a 0-token sequence = %d", r);
	lens[0] = 16;
	CHECKF((r = kvrt_gpu_plan_decode(pl, &p, &lo, 2, NULL)) == -EINVAL,
	       "decode plan with NULL seq_lens = %d", r);

	/* runs: table->num_seqs and layout must be the plan's */
	{
		size_t cache = (size_t)16 * 2 * 16 * 2 * 128 * 2;
		void *dc = dev_alloc(cache), *dq = dev_alloc(4 * 8 * 128 * 2), *dout = dev_alloc(4 * 8 * 128 * 2);
		int32_t indptr[5] = { 0, 1, 2, 5, 6 }, indices[6] = { 0, 1, 2, 3, 4, 5 };
		void *dip = dev_dup(indptr, sizeof(indptr)), *dix = dev_dup(indices, sizeof(indices));
		void *dl = dev_dup(lens, sizeof(int32_t) * 4);
		struct kvrt_kv_cache kv = { &lo, dc, NULL, 0 };
		struct kvrt_block_table bt = { 4, dip, dix, dl };

		if (dc && dq && dout && dip && dix && dl) {
			CHECKF(!(r = kvrt_gpu_plan_decode(pl, &p, &lo, 4, lens)), "plan = %d", r);
			bt.num_seqs = 3;
			CHECKF((r = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL)) == -EINVAL,
			       "decode run with 3 sequences on a plan of 4 = %d", r);
			bt.num_seqs = 4;
			bad = lo;
			bad.head_dim = 64;
			kv.layout = &bad;
			CHECKF((r = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL)) == -EINVAL,
			       "decode run with another layout than planned = %d", r);
			kv.layout = &lo;
			CHECKF((r = kvrt_gpu_attn_decode(pl, NULL, &kv, &bt, dout, NULL)) == -EINVAL,
			       "decode run with NULL q = %d", r);
			CHECKF((r = kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, NULL)) == 0,
			       "the valid decode run = %d", r);
			/* a decode plan is not a prefill plan */
			CHECKF((r = kvrt_gpu_attn_prefill(pl, dq, dip, &kv, &bt, dout, NULL)) < 0,
			       "prefill run of a decode plan = %d, want an error", r);
			dev_sync();
		}
		dev_free(dc);
		dev_free(dq);
		dev_free(dout);
		dev_free(dip);
		dev_free(dix);
		dev_free(dl);
	}
	kvrt_gpu_plan_destroy(pl);
	/* a plan that was never planned has nothing to run */
	REQUIRE(kvrt_gpu_plan_create(G, 4, 64, &pl) == 0);
	{
		struct kvrt_kv_cache kv = { &lo, (void *)1, NULL, 0 };
		int32_t z[2] = { 0, 1 };
		struct kvrt_block_table bt = { 1, z, z, z };

		r = kvrt_gpu_attn_decode(pl, (void *)1, &kv, &bt, (void *)1, NULL);
		CHECKF(r < 0, "decode run before any plan = %d, want an error", r);
	}
	kvrt_gpu_plan_destroy(pl);
}

/* ---- with a GPU: attention ---------------------------------------------------------------- */

TEST(decode_dtype_matrix)
{
	uint32_t a, b, c;
	char what[64];

	for (a = 0; a < 3; a++)
		for (b = 0; b < 3; b++)
			for (c = 0; c < 3; c++) {
				struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 4,
						    .kv_dt = kv_types[a], .q_dt = qo_types[b],
						    .o_dt = qo_types[c],
						    .layout = (int)((a + b + c) % NR_LAYOUTS),
						    .window = -1, .qamp = 2.0,
						    .lens = { 1, 16, 77, 200 } };

				snprintf(what, sizeof(what), "decode kv %s q %s out %s",
					 dtname(tc.kv_dt), dtname(tc.q_dt), dtname(tc.o_dt));
				run_decode(&tc, what, NULL);
			}
}

TEST(decode_shape_matrix)
{
	static const uint32_t hds[] = { 64, 128, 256 }, bts[] = { 1, 16, 17, 128 },
			      groups[] = { 1, 4, 8 };
	uint32_t i, j, k;
	char what[64];

	for (i = 0; i < 3; i++)
		for (j = 0; j < 4; j++)
			for (k = 0; k < 3; k++) {
				uint32_t bt = bts[j];
				struct tcase tc = {
					.bt = bt, .hd = hds[i], .group = groups[k],
					.nkv = groups[k] == 8 ? 1 + rnd_below(2) : 2,
					.nseq = 5, .kv_dt = kv_types[rnd_below(3)],
					.q_dt = qo_types[rnd_below(3)], .o_dt = qo_types[rnd_below(3)],
					.layout = (int)((i + j + k) % NR_LAYOUTS), .window = -1,
					.qamp = 1.0 + rnd_below(2) * 3.0,
					.lens = { 1, bt, bt + 1, 3 * bt - 1 > 0 ? 3 * bt - 1 : 1,
						  1 + rnd_below(400) },
					.extra = { 0, 1, 0, 0, 1 },
				};

				snprintf(what, sizeof(what), "decode hd %u bt %u group %u", tc.hd, bt,
					 tc.group);
				run_decode(&tc, what, NULL);
			}
}

TEST(decode_mqa_and_wide_groups)
{
	struct tcase mqa = { .bt = 16, .nkv = 1, .group = 32, .hd = 128, .nseq = 3,
			     .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			     .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1, .qamp = 2.0,
			     .lens = { 1, 300, 1024 } };
	struct tcase mqa8 = mqa, g16 = mqa;

	run_decode(&mqa, "decode MQA 32 q heads over 1 KV head, bf16", NULL);
	mqa8.kv_dt = KVRT_DTYPE_FP8_E4M3;
	mqa8.hd = 64;
	mqa8.bt = 128;
	mqa8.o_dt = KVRT_DTYPE_F32;
	mqa8.layout = L_BM;
	run_decode(&mqa8, "decode MQA 32/1, fp8 K/V, hd 64, block 128", NULL);
	g16.nkv = 2;
	g16.group = 16;
	g16.kv_dt = KVRT_DTYPE_F16;
	g16.q_dt = KVRT_DTYPE_F16;
	g16.hd = 256;
	g16.layout = L_HM;
	run_decode(&g16, "decode 32 q heads over 2 KV heads, f16, hd 256", NULL);
}

TEST(decode_window_softcap)
{
	static const int32_t windows[] = { 0, 1, 15, 16, 100, 1000 };
	unsigned int i;

	for (i = 0; i < 8; i++) {
		struct tcase tc = { .bt = i % 2 ? 16 : 17, .nkv = 2, .group = 4, .hd = 128, .nseq = 4,
				    .kv_dt = kv_types[i % 3], .q_dt = KVRT_DTYPE_BF16,
				    .o_dt = KVRT_DTYPE_F32, .layout = (int)(i % NR_LAYOUTS),
				    .window = i < 6 ? windows[i] : -1,
				    .softcap = i >= 4 ? 30.0f - 4 * i : 0.0f, .qamp = 4.0,
				    .lens = { 1, 17, 333, 1200 } };
		char what[80];

		snprintf(what, sizeof(what), "decode window %d soft-cap %g", tc.window, tc.softcap);
		run_decode(&tc, what, NULL);
	}
}

TEST(decode_ragged_batch64)
{
	struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 64,
			    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1, .qamp = 2.0 };
	uint32_t s;

	for (s = 0; s < 64; s++)
		tc.lens[s] = random_len(16, 700);
	tc.lens[7] = 5000;	/* one long among short ones */
	run_decode(&tc, "decode 64 ragged sequences", NULL);
}

TEST(decode_long_split_kv)
{
	struct kvrt_gpu_plan_info info;
	struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 1,
			    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1, .qamp = 2.0,
			    .lens = { 32768 } };

	memset(&info, 0, sizeof(info));
	run_decode(&tc, "decode batch 1 x 32768 tokens, bf16", &info);
	tap_diag("plan, batch 1 x 32768: %u tasks, %u split, %u keys per split, grid %u",
		 info.num_work, info.num_split, info.split_tokens, info.grid);
	CHECKF(info.num_split > 0, "batch 1 x 32768 tokens was not split along the keys");
	CHECKF(info.split_tokens > 0 && info.split_tokens % tc.bt == 0,
	       "split_tokens %u is not a multiple of block_tokens %u", info.split_tokens, tc.bt);
	stats.splits += info.num_split > 0;

	tc.kv_dt = KVRT_DTYPE_FP8_E4M3;
	tc.bt = 128;
	tc.lens[0] = 40000 + 37;
	tc.window = 5000;
	tc.softcap = 30.0f;
	tc.layout = L_BM;
	tc.o_dt = KVRT_DTYPE_F32;
	memset(&info, 0, sizeof(info));
	run_decode(&tc, "decode batch 1 x 40037 tokens, fp8, window 5000, soft-cap 30", &info);
	tap_diag("plan, batch 1 x 40037, window 5000: %u tasks, %u split, %u keys per split",
		 info.num_work, info.num_split, info.split_tokens);

	/* one long sequence among short ones */
	tc = (struct tcase){ .bt = 17, .nkv = 1, .group = 8, .hd = 64, .nseq = 4,
			     .kv_dt = KVRT_DTYPE_F16, .q_dt = KVRT_DTYPE_F16, .o_dt = KVRT_DTYPE_F16,
			     .layout = L_PAD, .window = -1, .qamp = 4.0,
			     .lens = { 1, 35000, 17, 18 } };
	memset(&info, 0, sizeof(info));
	run_decode(&tc, "decode 35000 tokens beside three short sequences", &info);
	tap_diag("plan, 35000 + 3 short: %u tasks, %u split, %u keys per split", info.num_work,
		 info.num_split, info.split_tokens);
}

TEST(decode_random)
{
	const char *e = getenv("KVRT_TEST_CASES");
	uint32_t n = e ? (uint32_t)strtoul(e, NULL, 0) : 40, i;
	struct tcase tc;
	char what[48];

	for (i = 0; i < n; i++) {
		random_case(&tc, i % 4 ? 400 : 3000, i % 4 ? 12 : 3, 32);
		snprintf(what, sizeof(what), "decode random %u", i);
		run_decode(&tc, what, NULL);
	}
}

TEST(prefill_random)
{
	const char *e = getenv("KVRT_TEST_CASES");
	uint32_t n = (e ? (uint32_t)strtoul(e, NULL, 0) : 40) / 3, i;
	struct tcase tc;
	char what[48];

	for (i = 0; i < n; i++) {
		random_case(&tc, 160, 3, 8);
		snprintf(what, sizeof(what), "prefill random %u", i);
		run_prefill(&tc, 1 + rnd_below(4), 0, what);
	}
}

TEST(prefill_shapes)
{
	static const uint32_t hds[] = { 64, 128, 256 }, bts[] = { 1, 16, 17, 128 };
	uint32_t i;

	for (i = 0; i < 6; i++) {
		struct tcase tc = { .bt = bts[i % 4], .hd = hds[i % 3], .nkv = 2,
				    .group = i % 2 ? 4 : 8, .nseq = 3,
				    .kv_dt = kv_types[i % 3], .q_dt = qo_types[(i + 1) % 3],
				    .o_dt = qo_types[i % 3], .layout = (int)(i % NR_LAYOUTS),
				    .window = i == 3 ? 40 : -1, .softcap = i == 4 ? 20.0f : 0.0f,
				    .qamp = 2.0, .lens = { 1, 64 + i, 250 } };
		char what[64];

		snprintf(what, sizeof(what), "prefill hd %u bt %u group %u", tc.hd, tc.bt, tc.group);
		run_prefill(&tc, 1 + i % 3, 0, what);
	}
	{
		/* MQA, and a long prompt whose last 100 tokens are the chunk */
		struct tcase tc = { .bt = 16, .nkv = 1, .group = 32, .hd = 128, .nseq = 2,
				    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
				    .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1,
				    .qamp = 2.0, .lens = { 40, 90 } };

		run_prefill(&tc, 2, 0, "prefill MQA 32 q heads over 1 KV head");
		tc = (struct tcase){ .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 2,
				     .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
				     .o_dt = KVRT_DTYPE_BF16, .layout = L_LM, .window = -1,
				     .qamp = 2.0, .lens = { 2500, 700 } };
		run_prefill(&tc, 2, 100, "prefill 2500 and 700 tokens, last 100 of each");
	}
}

/*
 * One plan object: batch A, then a different batch B (other sequence
 * count, other lengths), then A again, each checked.  The worlds are
 * separate caches; only the plan is shared.
 */
TEST(replan_same_plan_object)
{
	struct tcase a = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 3,
			   .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16, .o_dt = KVRT_DTYPE_F32,
			   .layout = L_LM, .window = -1, .qamp = 2.0, .lens = { 5, 100, 17 } };
	struct tcase b = a;
	uint32_t s;

	b.nseq = 7;
	for (s = 0; s < 7; s++)
		b.lens[s] = 1 + 1000 * s;
	b.lens[6] = 33000;	/* split in B, not in A */
	run_decode(&a, "replan: batch A", NULL);
	run_decode(&b, "replan: batch B on the same plan", NULL);
	run_decode(&a, "replan: batch A again", NULL);
}

/* ---- CUDA graphs, through the driver (for streams and graphs only) --------------------------- */

typedef int cures;
struct drv {
	void *lib;
	cures (*DeviceGet)(int *, int);
	cures (*PrimaryCtxRetain)(void **, int);
	cures (*PrimaryCtxRelease)(int);
	cures (*CtxPushCurrent)(void *);
	cures (*CtxPopCurrent)(void **);
	cures (*StreamCreate)(void **, unsigned int);
	cures (*StreamDestroy)(void *);
	cures (*StreamBeginCapture)(void *, int);
	cures (*StreamEndCapture)(void *, void **);
	cures (*GraphInstantiate)(void **, void *, unsigned long long);
	cures (*GraphLaunch)(void *, void *);
	cures (*GraphExecDestroy)(void *);
	cures (*GraphDestroy)(void *);
	cures (*StreamSynchronize)(void *);
	int dev;
	void *ctx;
};

/* 0, or why not into why. */
static int drv_load(struct drv *d, char *why, size_t len)
{
	typedef cures (*gpa_fn)(const char *, void **, int, unsigned long long, int *);
	static const struct {
		size_t off;
		const char *name;
	} fns[] = {
#define F(field, name) { offsetof(struct drv, field), name }
		F(DeviceGet, "cuDeviceGet"), F(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		F(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease"),
		F(CtxPushCurrent, "cuCtxPushCurrent"), F(CtxPopCurrent, "cuCtxPopCurrent"),
		F(StreamCreate, "cuStreamCreate"), F(StreamDestroy, "cuStreamDestroy"),
		F(StreamBeginCapture, "cuStreamBeginCapture"),
		F(StreamEndCapture, "cuStreamEndCapture"),
		F(GraphInstantiate, "cuGraphInstantiateWithFlags"),
		F(GraphLaunch, "cuGraphLaunch"), F(GraphExecDestroy, "cuGraphExecDestroy"),
		F(GraphDestroy, "cuGraphDestroy"), F(StreamSynchronize, "cuStreamSynchronize"),
#undef F
	};
	const char *path = getenv("KVRT_LIBCUDA");
	gpa_fn gpa;
	size_t i;
	int st, r;

	memset(d, 0, sizeof(*d));
	if (!path || !*path)
		path = "libcuda.so.1";
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		snprintf(why, len, "%s", dlerror());
		return -1;
	}
	gpa = (gpa_fn)dlsym(d->lib, "cuGetProcAddress_v2");
	if (!gpa) {
		snprintf(why, len, "%s has no cuGetProcAddress_v2", path);
		goto out;
	}
	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		void **fn = (void **)((char *)d + fns[i].off);

		st = 0;
		if (gpa(fns[i].name, fn, 12000, 0, &st) || st || !*fn) {
			snprintf(why, len, "%s: %s not found", path, fns[i].name);
			goto out;
		}
	}
	/* cuInit was called by libkvrt in this process; the same driver is loaded */
	if ((r = d->DeviceGet(&d->dev, GI.device)) || (r = d->PrimaryCtxRetain(&d->ctx, d->dev))) {
		snprintf(why, len, "cuDeviceGet/cuDevicePrimaryCtxRetain: CUDA error %d", r);
		goto out;
	}
	return 0;
out:
	dlclose(d->lib);
	d->lib = NULL;
	return -1;
}

static void drv_unload(struct drv *d)
{
	if (d->ctx)
		d->PrimaryCtxRelease(d->dev);
	if (d->lib)
		dlclose(d->lib);
	memset(d, 0, sizeof(*d));
}

/*
 * The batch's data lives in one cache (the B lengths); batch A reads
 * prefixes of the same sequences.  The graph captures one
 * kvrt_gpu_attn_decode call with fixed buffers: q, out and seq_lens are
 * rewritten in place between replays, and the plan object is re-planned.
 */
TEST(graph_replay_after_replan)
{
	static char why[256];
	struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 4,
			    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_F32, .layout = L_LM, .window = -1, .qamp = 2.0,
			    .lens = { 20000, 1, 333, 4096 } };
	static const int32_t lens_a[4] = { 17, 1, 100, 64 };
	const int32_t *lens_b = NULL;
	int32_t lb[4];
	struct kvrt_gpu_plan *pl = NULL;
	struct kvrt_gpu_plan_info ia, ib;
	void *stream = NULL, *graph = NULL, *exec = NULL, *popped;
	void *dq = NULL, *dout = NULL, *dlens = NULL;
	size_t qbytes, obytes;
	uint8_t *gout = NULL;
	struct world w;
	struct drv d;
	int r, round;
	uint32_t s;

	if (drv_load(&d, why, sizeof(why))) {
		tap_skip(why);
		return;
	}
	for (s = 0; s < 4; s++)
		lb[s] = (int32_t)tc.lens[s];
	lens_b = lb;
	memset(&w, 0, sizeof(w));
	REQUIRE(d.CtxPushCurrent(d.ctx) == 0);
	if (world_make(&w, &tc) || world_upload(&w))
		goto out;
	qbytes = (size_t)4 * 8 * 128 * esize(tc.q_dt);
	obytes = (size_t)4 * 8 * 128 * esize(tc.o_dt);
	gout = xmalloc(obytes + GUARD);
	dq = dev_alloc(qbytes);
	dout = dev_out(obytes);
	dlens = dev_dup(lens_a, sizeof(lens_a));
	if (!dq || !dout || !dlens)
		goto out;
	r = kvrt_gpu_plan_create(G, 8, 64, &pl);
	CHECKF(!r, "kvrt_gpu_plan_create = %d", r);
	if (r || (r = d.StreamCreate(&stream, 1 /* non-blocking */))) {
		CHECKF(!r, "cuStreamCreate = %d", r);
		goto out;
	}
	/* rounds: A (capture), B, A, B: plan, rewrite the inputs, replay, check */
	for (round = 0; round < 4; round++) {
		const int32_t *lens = round % 2 ? lens_b : lens_a;
		struct kvrt_attn_params p = case_params(&tc, KVRT_ATTN_FAST);
		void *q = make_q(&tc, 4), *cpu_out = xmalloc(obytes);
		uint32_t seqs[4] = { 0, 1, 2, 3 };
		int64_t pos[4];
		char what[128];

		for (s = 0; s < 4; s++)
			pos[s] = lens[s] - 1;
		r = kvrt_gpu_plan_decode(pl, &p, &w.lo, 4, lens);
		CHECKF(!r, "round %d: kvrt_gpu_plan_decode = %d", round, r);
		kvrt_gpu_plan_info(pl, round % 2 ? &ib : &ia);
		if (!r && (kvrt_gpu_memcpy(G, dq, q, qbytes) ||
			   kvrt_gpu_memcpy(G, dlens, lens, sizeof(lens_a))))
			r = -EIO;
		if (!r && round == 0) {
			struct kvrt_kv_cache kv = { &w.lo, w.d_cache, w.d_scales, w.layer };
			struct kvrt_block_table bt = { 4, w.d_indptr, w.d_indices, dlens };
			int rc, re;

			rc = d.StreamBeginCapture(stream, 0 /* global, as PyTorch's default */);
			r = rc ? -EIO : kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, stream);
			re = rc ? 0 : d.StreamEndCapture(stream, &graph);
			CHECKF(!rc && !r && !re && graph,
			       "capture: cuStreamBeginCapture %d, kvrt_gpu_attn_decode %d, "
			       "cuStreamEndCapture %d (the run must be capturable)", rc, r, re);
			if (!r && (rc || re || !graph))
				r = -EIO;
			if (!r && (re = d.GraphInstantiate(&exec, graph, 0))) {
				tap_failf("cuGraphInstantiateWithFlags = %d", re);
				r = -EIO;
			}
		}
		if (!r && ((r = d.GraphLaunch(exec, stream)) || (r = d.StreamSynchronize(stream))))
			tap_failf("round %d: cuGraphLaunch/cuStreamSynchronize = %d", round, r);
		if (!r)
			r = dev_get(gout, dout, obytes + GUARD);
		if (!r) {
			struct kvrt_kv_cache kv = { &w.lo, w.cache, w.scales, w.layer };
			struct kvrt_block_table bt = { 4, w.indptr, w.indices, lens };
			struct qrows qr = { 4, seqs, pos, q };

			p.impl = KVRT_ATTN_REFERENCE;
			r = kvrt_attn_decode(&p, q, &kv, &bt, cpu_out);
			CHECKF(!r, "CPU kvrt_attn_decode = %d", r);
			snprintf(what, sizeof(what), "graph replay %d (batch %c: lens %d,%d,%d,%d; the "
				 "cache below holds B's)", round, round % 2 ? 'B' : 'A', lens[0], lens[1],
				 lens[2], lens[3]);
			if (!r)
				check_outputs(&w, &qr, cpu_out, gout, what);
		}
		free(q);
		free(cpu_out);
		if (r)
			break;
	}
	tap_diag("graph: plan A %u tasks %u split, plan B %u tasks %u split", ia.num_work,
		 ia.num_split, ib.num_work, ib.num_split);
out:
	if (exec)
		d.GraphExecDestroy(exec);
	if (graph)
		d.GraphDestroy(graph);
	if (stream)
		d.StreamDestroy(stream);
	kvrt_gpu_plan_destroy(pl);
	dev_free(dq);
	dev_free(dout);
	dev_free(dlens);
	free(gout);
	world_free(&w);
	d.CtxPopCurrent(&popped);
	drv_unload(&d);
}

/* ---- with a GPU: append ----------------------------------------------------------------- */

struct acache {
	struct kvrt_layout lo;
	uint8_t *host;		/* the CPU's cache */
	size_t bytes;
	float *hscales;		/* separate scales (fp8, not inline), else NULL */
	size_t nscales;
	uint64_t scales_off;	/* inline scales: offset into the cache, else 0 */
	void *dev, *dscales;
};

enum { A_BM, A_LM, A_PAD, A_INLINE };
static const char *const akind_name[] = { "block-major", "layer-major", "padded",
					  "block-major inline scales" };

static void acache_free(struct acache *c)
{
	free(c->host);
	free(c->hscales);
	dev_free(c->dev);
	dev_free(c->dscales);
	memset(c, 0, sizeof(*c));
}

/* Identical random contents on both sides: fp8 holds finite codes and scales. */
static int acache_make(struct acache *c, int kind, uint32_t nkv, uint32_t hd, uint32_t bt,
		       uint32_t nblocks, enum kvrt_dtype dt)
{
	size_t i;

	memset(c, 0, sizeof(*c));
	if (kind == A_INLINE) {
		if (kvrt_layout_init(&c->lo, KVRT_LAYOUT_BLOCK_MAJOR, 2, nkv, hd, bt, nblocks, dt) ||
		    kvrt_layout_inline_scales(&c->lo, &c->scales_off))
			return -1;
		c->bytes = (size_t)c->lo.block_stride * nblocks;
	} else {
		fill_layout(&c->lo, kind == A_BM ? L_BM : kind == A_LM ? L_LM : L_PAD, 2, nkv, hd, bt,
			    nblocks, dt);
		c->bytes = layout_bytes(&c->lo);
		c->nscales = scales_count(&c->lo);
	}
	c->host = xmalloc(c->bytes);
	for (i = 0; i < c->bytes; i++) {
		uint8_t b = (uint8_t)rnd();

		if (dt == KVRT_DTYPE_FP8_E4M3 && (b & 0x7f) == 0x7f)
			b ^= 1;
		c->host[i] = b;
	}
	if (c->nscales) {
		c->hscales = xmalloc(sizeof(float) * c->nscales);
		for (i = 0; i < c->nscales; i++)
			c->hscales[i] = (float)ldexp(1.0 + rnd_below(64) / 64.0, -9 - (int)rnd_below(3));
	}
	if (kind == A_INLINE) {
		for (i = 0; i < nblocks; i++) {
			float *s = (float *)(c->host + c->scales_off + i * (size_t)c->lo.block_stride);
			uint32_t j;

			for (j = 0; j < 2 * 2 * nkv; j++)
				s[j] = (float)ldexp(1.0 + rnd_below(64) / 64.0, -9 - (int)rnd_below(3));
		}
	}
	c->dev = dev_dup(c->host, c->bytes);
	if (c->nscales)
		c->dscales = dev_dup(c->hscales, sizeof(float) * c->nscales);
	return c->dev && (!c->nscales || c->dscales) ? 0 : -1;
}

static float *acache_scales(struct acache *c, bool dev)
{
	if (c->lo.kv_dtype != KVRT_DTYPE_FP8_E4M3)
		return NULL;
	if (c->scales_off)
		return (float *)((uint8_t *)(dev ? c->dev : c->host) + c->scales_off);
	return dev ? c->dscales : c->hscales;
}

/* fp8 codes a and b are the same or neighbours on the number line. */
static bool fp8_near(uint8_t a, uint8_t b)
{
	int x = a & 0x80 ? -(int)(a & 0x7f) : (int)a, y = b & 0x80 ? -(int)(b & 0x7f) : (int)b;

	return abs(x - y) <= 1;
}

/*
 * The device cache against the CPU's: f16/bf16 every byte; fp8 within the
 * documented tolerance (written: bytes the calls wrote, for the 1 %).
 */
static void acache_compare(struct acache *c, const char *what, size_t written)
{
	uint8_t *got = xmalloc(c->bytes);
	float *gs = NULL;
	size_t i, diff = 0, far = 0, first = (size_t)-1, sdiff = 0;

	if (dev_get(got, c->dev, c->bytes))
		goto out;
	if (c->nscales) {
		gs = xmalloc(sizeof(float) * c->nscales);
		if (dev_get(gs, c->dscales, sizeof(float) * c->nscales))
			goto out;
	}
	if (c->lo.kv_dtype != KVRT_DTYPE_FP8_E4M3) {
		for (i = 0; i < c->bytes && first == (size_t)-1; i++)
			if (got[i] != c->host[i])
				first = i;
		CHECKF(first == (size_t)-1, "%s: the GPU cache differs from the CPU's at byte %zu "
		       "(0x%02x, CPU 0x%02x); f16/bf16 must be bit-identical", what, first,
		       first < c->bytes ? got[first] : 0, first < c->bytes ? c->host[first] : 0);
		goto out;
	}
	/* fp8: scales (inline ones sit in the byte range: compare them as floats) */
	{
		size_t ns = c->scales_off ? (size_t)c->lo.num_blocks * 4 * c->lo.num_kv_heads : c->nscales;

		for (i = 0; i < ns; i++) {
			float a, b;
			size_t at = c->scales_off ? c->scales_off + (i / (4 * c->lo.num_kv_heads)) *
							(size_t)c->lo.block_stride +
							(i % (4 * c->lo.num_kv_heads)) * 4 : 0;

			if (c->scales_off) {
				memcpy(&a, got + at, 4);
				memcpy(&b, c->host + at, 4);
			} else {
				a = gs[i];
				b = c->hscales[i];
			}
			if (a != b) {
				sdiff++;
				CHECKF(fabsf(a - b) <= 0x1p-23f * fmaxf(fabsf(a), fabsf(b)),
				       "%s: scale %zu is %a, CPU %a (more than 1 ulp)", what, i, a, b);
			}
		}
	}
	for (i = 0; i < c->bytes; i++) {
		if (c->scales_off) {
			size_t in = i % (size_t)c->lo.block_stride;

			if (in >= c->scales_off && in < c->scales_off + 16ULL * c->lo.num_kv_heads)
				continue;	/* a scale: compared above */
		}
		if (got[i] != c->host[i]) {
			diff++;
			if (!fp8_near(got[i], c->host[i]) && far++ == 0)
				first = i;
		}
	}
	CHECKF(!far, "%s: %zu fp8 bytes differ by more than one code (first at %zu: 0x%02x, CPU "
	       "0x%02x)", what, far, first, far ? got[first] : 0, far ? c->host[first] : 0);
	CHECKF(diff <= 4 + written / 100, "%s: %zu of %zu written fp8 bytes differ from the CPU's",
	       what, diff, written);
	if ((diff || sdiff) && !far)
		tap_diag("%s: %zu fp8 bytes and %zu scales off by one code / ulp", what, diff, sdiff);
out:
	free(got);
	free(gs);
}

/* k, v: [n][nkv][hd] of src; magnitude per token amp[t] (NULL: 1). */
static void *make_rows(enum kvrt_dtype src, uint32_t n, uint32_t nkv, uint32_t hd,
		       const double *amp)
{
	size_t cnt = (size_t)n * nkv * hd, i;
	void *p = xmalloc(cnt * esize(src));

	for (i = 0; i < cnt; i++)
		enc(src, p, i, (amp ? amp[i / ((size_t)nkv * hd)] : 1.0) * rnd_unit());
	return p;
}

/* Append the same tokens on both sides (cpu_slots: what the CPU gets) and compare. */
static void append_both(struct acache *c, uint32_t layer, enum kvrt_dtype src, uint32_t n,
			const int64_t *gpu_slots, const int64_t *cpu_slots, const double *amp,
			const char *what)
{
	uint32_t nkv = c->lo.num_kv_heads, hd = c->lo.head_dim;
	void *k = make_rows(src, n, nkv, hd, amp), *v = make_rows(src, n, nkv, hd, amp);
	size_t rb = (size_t)n * nkv * hd * esize(src), written = 0;
	struct kvrt_kv_cache hkv = { &c->lo, c->host, acache_scales(c, false), layer };
	struct kvrt_kv_cache dkv = { &c->lo, c->dev, acache_scales(c, true), layer };
	void *dk = dev_dup(k, rb), *dv = dev_dup(v, rb), *ds = dev_dup(gpu_slots, 8 * (size_t)n);
	uint32_t i;
	int r;

	r = kvrt_append_kv(&hkv, k, v, src, cpu_slots, n);
	CHECKF(!r, "%s: CPU kvrt_append_kv = %d", what, r);
	for (i = 0; i < n; i++)
		written += cpu_slots[i] >= 0 ? 2 * (size_t)nkv * hd : 0;
	if (!r && dk && dv && ds) {
		r = kvrt_gpu_append_kv(G, &dkv, dk, dv, src, ds, n, NULL);
		CHECKF(!r, "%s: kvrt_gpu_append_kv = %d", what, r);
		if (!r && !dev_sync())
			acache_compare(c, what, written);
	}
	dev_free(dk);
	dev_free(dv);
	dev_free(ds);
	free(k);
	free(v);
}

/* f16/bf16: random distinct slots in random order, some padding (< 0). */
TEST(append_f16_bf16_bit_identical)
{
	static const uint32_t hds[] = { 64, 128, 256, 80 };
	int kind, i;

	for (i = 0; i < 12; i++) {
		enum kvrt_dtype dt = i % 2 ? KVRT_DTYPE_BF16 : KVRT_DTYPE_F16;
		enum kvrt_dtype src = qo_types[i % 3];
		uint32_t hd = hds[i % 4], bt = i % 3 ? 16 : 1 + rnd_below(40), nkv = 1 + rnd_below(4);
		uint32_t nb = 20, nslots = nb * bt, n = nslots * 3 / 5 + 1, j, *perm;
		int64_t *slots;
		struct acache c;
		char what[128];

		kind = i % 3;	/* block-major, layer-major, padded */
		if (acache_make(&c, kind, nkv, hd, bt, nb, dt)) {
			tap_failf("append: cache setup");
			acache_free(&c);
			continue;
		}
		perm = xmalloc(sizeof(*perm) * nslots);
		shuffle(perm, nslots);
		slots = xmalloc(sizeof(*slots) * n);
		for (j = 0; j < n; j++)
			slots[j] = rnd_below(10) ? (int64_t)perm[j] : -1 - (int64_t)rnd_below(100);
		snprintf(what, sizeof(what), "append %s from %s, %s, hd %u, block %u, %u heads, layer %d",
			 dtname(dt), dtname(src), akind_name[kind], hd, bt, nkv, i % 2);
		append_both(&c, (uint32_t)(i % 2), src, n, slots, slots, NULL, what);
		/* again over some of the same slots: overwrites */
		for (j = 0; j < n; j++)
			slots[j] = (int64_t)perm[(j + n / 3) % nslots];
		append_both(&c, (uint32_t)(i % 2), src, n / 2, slots, slots, NULL, what);
		free(perm);
		free(slots);
		acache_free(&c);
	}
}

/*
 * fp8: blocks in random order, each block's tokens one run from offset 0
 * (growing magnitudes in some blocks: scales rise, earlier slots are
 * requantised), padding between runs; then a decode-like step: one more
 * token at the next offset of each block (some larger), then a second step.
 */
TEST(append_fp8_matches_cpu)
{
	int i;

	for (i = 0; i < 8; i++) {
		int kind = i % 4;	/* bm, lm, padded, inline */
		enum kvrt_dtype src = qo_types[i % 3];
		uint32_t hd = i % 2 ? 128 : 64, bt = i % 3 ? 16 : 7, nkv = 1 + rnd_below(3), nb = 24;
		uint32_t *perm = xmalloc(sizeof(*perm) * nb), *fill = calloc(nb, sizeof(uint32_t));
		int64_t *slots = xmalloc(sizeof(*slots) * (nb * (bt + 1) + nb));
		double *amp = xmalloc(sizeof(double) * (nb * (bt + 1) + nb));
		uint32_t n = 0, b, t, step;
		struct acache c;
		char what[128];

		if (acache_make(&c, kind, nkv, hd, bt, nb, KVRT_DTYPE_FP8_E4M3)) {
			tap_failf("append fp8: cache setup");
			goto next;
		}
		shuffle(perm, nb);
		for (b = 0; b < nb * 3 / 4; b++) {
			uint32_t blk = perm[b], len = 1 + rnd_below(bt - 1), mode = rnd_below(3);

			for (t = 0; t < len; t++) {
				slots[n] = (int64_t)blk * bt + t;
				/* rising, falling or random magnitudes */
				amp[n++] = mode == 0 ? 0.1 * (t + 1) : mode == 1 ? 2.0 / (t + 1) :
					   0.05 + 3.0 * rnd_below(16) / 15;
			}
			fill[blk] = len;
			if (!rnd_below(4)) {
				slots[n] = -1;
				amp[n++] = 1;
			}
		}
		snprintf(what, sizeof(what), "append fp8 from %s, %s, hd %u, block %u, %u heads",
			 dtname(src), akind_name[kind], hd, bt, nkv);
		append_both(&c, 1, src, n, slots, slots, amp, what);
		for (step = 0; step < 2; step++) {
			n = 0;
			for (b = 0; b < nb; b++) {
				uint32_t blk = perm[b];

				if (!fill[blk] || fill[blk] >= bt)
					continue;
				slots[n] = (int64_t)blk * bt + fill[blk]++;
				amp[n++] = rnd_below(3) ? 0.3 : 5.0;	/* some raise the scale */
			}
			snprintf(what, sizeof(what), "append fp8 decode step %u, %s, hd %u, block %u",
				 step + 1, akind_name[kind], hd, bt);
			if (n)
				append_both(&c, 1, src, n, slots, slots, amp, what);
		}
next:
		acache_free(&c);
		free(perm);
		free(fill);
		free(slots);
		free(amp);
	}
}

/* Slots >= num_blocks * block_tokens and < 0 are skipped on the GPU; nothing else moves. */
TEST(append_out_of_range_slots_skipped)
{
	int i;

	for (i = 0; i < 3; i++) {
		enum kvrt_dtype dt = i == 0 ? KVRT_DTYPE_BF16 : i == 1 ? KVRT_DTYPE_F16 :
				     KVRT_DTYPE_FP8_E4M3;
		uint32_t bt = 16, nb = 8, n = 0, b, t, k = 0;
		int64_t gs[64], cs[64], ns = (int64_t)nb * bt;
		/* num_blocks * block_tokens is 128 */
		static const int64_t bad[] = { 128, 129, 1000000, INT64_MAX, -1, INT64_MIN, -2 };
		struct acache c;
		char what[96];

		if (acache_make(&c, i == 2 ? A_INLINE : A_LM, 2, 128, bt, nb, dt)) {
			tap_failf("append oob: cache setup");
			acache_free(&c);
			continue;
		}
		for (b = 0; b < nb; b += 2) {	/* runs of 5 from offset 0, a bad slot after each */
			for (t = 0; t < 5; t++) {
				gs[n] = cs[n] = (int64_t)b * bt + t;
				n++;
			}
			gs[n] = bad[k++];
			cs[n++] = -1;
		}
		while (k < sizeof(bad) / sizeof(bad[0])) {
			gs[n] = bad[k++];
			cs[n++] = -1;
		}
		snprintf(what, sizeof(what), "append %s with slots >= %lld and < 0", dtname(dt),
			 (long long)ns);
		append_both(&c, 0, KVRT_DTYPE_F32, n, gs, cs, NULL, what);
		acache_free(&c);
	}
}

TEST(append_errors_match_cpu)
{
	struct acache c, c8;
	int64_t slot = 3, *dslot = NULL;
	float k[2 * 128] = { 0 };
	void *dk = NULL;
	int rc, rg;

	REQUIRE(acache_make(&c, A_LM, 2, 128, 16, 4, KVRT_DTYPE_BF16) == 0);
	REQUIRE(acache_make(&c8, A_LM, 2, 128, 16, 4, KVRT_DTYPE_FP8_E4M3) == 0);
	dk = dev_dup(k, sizeof(k));
	dslot = dev_dup(&slot, sizeof(slot));
	if (dk && dslot) {
		struct kvrt_kv_cache h = { &c.lo, c.host, NULL, 0 }, d = { &c.lo, c.dev, NULL, 0 };
		struct kvrt_kv_cache h8 = { &c8.lo, c8.host, c8.hscales, 0 };
		struct kvrt_kv_cache d8 = { &c8.lo, c8.dev, c8.dscales, 0 };
		struct kvrt_layout bad = c.lo;

#define SAME(what, HKV, DKV, src, n)                                                           \
	do {                                                                                   \
		rc = kvrt_append_kv(HKV, k, k, src, &slot, n);                                 \
		rg = kvrt_gpu_append_kv(G, DKV, dk, dk, src, dslot, n, NULL);                  \
		CHECKF(rc == rg, "append %s: GPU %d, CPU %d", what, rg, rc);                   \
	} while (0)
		SAME("NULL kv", NULL, NULL, KVRT_DTYPE_F32, 1);
		h.layer = d.layer = 2;
		SAME("layer == num_layers", &h, &d, KVRT_DTYPE_F32, 1);
		h.layer = d.layer = 0;
		SAME("src fp8", &h, &d, KVRT_DTYPE_FP8_E4M3, 1);
		SAME("src 9", &h, &d, (enum kvrt_dtype)9, 1);
		h8.scales = d8.scales = NULL;
		SAME("fp8 without scales", &h8, &d8, KVRT_DTYPE_F32, 1);
		SAME("0 tokens", &h, &d, KVRT_DTYPE_F32, 0);
		CHECKF(rc == 0, "append of 0 tokens = %d", rc);
		bad.head_dim = 0;
		h.layout = d.layout = &bad;
		SAME("head_dim 0", &h, &d, KVRT_DTYPE_F32, 1);
		h.layout = d.layout = &c.lo;
		h.base = d.base = NULL;
		SAME("NULL base", &h, &d, KVRT_DTYPE_F32, 1);
#undef SAME
		rg = kvrt_gpu_append_kv(G, &d, NULL, dk, KVRT_DTYPE_F32, dslot, 1, NULL);
		CHECKF(rg == -EINVAL, "GPU append with NULL k = %d", rg);
		rg = kvrt_gpu_append_kv(G, &d, dk, dk, KVRT_DTYPE_F32, NULL, 1, NULL);
		CHECKF(rg == -EINVAL, "GPU append with NULL slots = %d", rg);
		dev_sync();
		/* nothing was written by the failures */
		acache_compare(&c, "append errors leave the bf16 cache", 0);
	}
	dev_free(dk);
	dev_free(dslot);
	acache_free(&c);
	acache_free(&c8);
}

/* ---- with a GPU: registration and copies ---------------------------------------------------- */

#define CP_LAYERS 3
#define CP_HEADS 2
#define CP_DIM 64
#define CP_TOKENS 16
#define CP_DEV_BLOCKS 40
#define CP_POOL_BLOCKS 48

struct pool {
	struct kvrt_space *sp;
	struct kvrt_layout lo;	/* block-major over the space */
	struct kvrt_block_array a;
	uint32_t ids[CP_POOL_BLOCKS];
	uint32_t nids;
	uint64_t block_bytes;
};

static int pool_open(struct pool *p, const char *name, enum kvrt_dtype dt, uint32_t nalloc)
{
	struct kvrt_layout lo;
	uint64_t bb, off = 0, i;
	int r;

	memset(p, 0, sizeof(*p));
	if (kvrt_layout_init(&lo, KVRT_LAYOUT_BLOCK_MAJOR, CP_LAYERS, CP_HEADS, CP_DIM, CP_TOKENS,
			     CP_POOL_BLOCKS, dt) ||
	    (dt == KVRT_DTYPE_FP8_E4M3 && kvrt_layout_inline_scales(&lo, &off)) ||
	    kvrt_layout_block_bytes(&lo, &bb))
		return -EINVAL;
	{
		struct kvrt_space_opts so = {
			.name = name, .flags = KVRT_SPACE_CREATE | KVRT_SPACE_EXCL, .mode = 0600,
			.block_bytes = (bb + 4095) / 4096 * 4096,
			.quota_bytes = (bb + 4095) / 4096 * 4096 * CP_POOL_BLOCKS,
		};

		r = kvrt_space_open(K, &so, &p->sp);
		if (r)
			return r;
		p->block_bytes = so.block_bytes;
	}
	p->lo = lo;
	r = kvrt_layout_for_space(&p->lo, p->sp);
	if (r)
		return r;
	r = nalloc ? kvrt_alloc_blocks(p->sp, nalloc, p->ids) : 0;
	if (r)
		return r;
	p->nids = nalloc;
	p->a = (struct kvrt_block_array){ &p->lo, kvrt_space_base(p->sp), NULL };
	if (dt == KVRT_DTYPE_FP8_E4M3)
		p->a.scales = (float *)((uint8_t *)p->a.base + off);
	for (i = 0; i < p->nids; i++) {
		uint8_t *blk = kvrt_block_addr(p->sp, p->ids[i]);
		uint64_t j;

		for (j = 0; j < p->block_bytes; j++)
			blk[j] = (uint8_t)rnd();
		if (dt == KVRT_DTYPE_FP8_E4M3)	/* finite scales (a NaN's payload could be quieted) */
			for (j = 0; j < 2 * CP_LAYERS * CP_HEADS; j++)
				((float *)(blk + off))[j] = (float)rnd_below(1000) / 64;
	}
	return 0;
}

static void pool_close(struct pool *p)
{
	kvrt_space_close(p->sp);
	memset(p, 0, sizeof(*p));
}

/* A host mirror of the pool's allocated blocks, laid out like the space. */
static uint8_t *pool_snapshot(const struct pool *p)
{
	uint8_t *m = calloc(CP_POOL_BLOCKS, p->block_bytes);
	uint32_t i;

	if (!m)
		exit(2);
	for (i = 0; i < p->nids; i++)
		memcpy(m + p->ids[i] * p->block_bytes, kvrt_block_addr(p->sp, p->ids[i]),
		       p->block_bytes);
	return m;
}

static size_t pool_diff(const struct pool *p, const uint8_t *m)
{
	uint32_t i;

	for (i = 0; i < p->nids; i++)
		if (memcmp(m + p->ids[i] * p->block_bytes, kvrt_block_addr(p->sp, p->ids[i]),
			   p->block_bytes))
			return i + 1;
	return 0;
}

/* An array in device memory (with a host twin of the same layout and bytes). */
struct darr {
	struct kvrt_layout lo;
	size_t bytes, sbytes;
	uint8_t *h;		/* host twin */
	float *hs;
	void *d, *ds;
	struct kvrt_block_array ha, da;
};

static int darr_make(struct darr *x, enum kvrt_layout_kind kind, enum kvrt_dtype dt)
{
	size_t i;

	memset(x, 0, sizeof(*x));
	if (kvrt_layout_init(&x->lo, kind, CP_LAYERS, CP_HEADS, CP_DIM, CP_TOKENS, CP_DEV_BLOCKS, dt))
		return -1;
	x->bytes = (size_t)CP_LAYERS * 2 * CP_DEV_BLOCKS * CP_TOKENS * CP_HEADS * CP_DIM *
		   kvrt_dtype_size(dt);
	x->h = xmalloc(x->bytes);
	for (i = 0; i < x->bytes; i++)
		x->h[i] = (uint8_t)rnd();
	if (dt == KVRT_DTYPE_FP8_E4M3) {
		x->sbytes = sizeof(float) * CP_LAYERS * 2 * CP_DEV_BLOCKS * CP_HEADS;
		x->hs = xmalloc(x->sbytes);
		for (i = 0; i < x->sbytes / 4; i++)
			x->hs[i] = (float)rnd_below(1000) / 64;
	}
	x->d = dev_dup(x->h, x->bytes);
	x->ds = x->sbytes ? dev_dup(x->hs, x->sbytes) : NULL;
	x->ha = (struct kvrt_block_array){ &x->lo, x->h, x->hs };
	x->da = (struct kvrt_block_array){ &x->lo, x->d, x->ds };
	return x->d && (!x->sbytes || x->ds) ? 0 : -1;
}

/* Refresh the host twin from the device. */
static int darr_pull(struct darr *x)
{
	if (dev_get(x->h, x->d, x->bytes))
		return -1;
	return x->sbytes ? dev_get(x->hs, x->ds, x->sbytes) : 0;
}

/* The device bytes equal the twin's (which the caller updated with the CPU). */
static bool darr_same(const struct darr *x, const char *what)
{
	uint8_t *g = xmalloc(x->bytes);
	float *gs = x->sbytes ? xmalloc(x->sbytes) : NULL;
	bool ok = !dev_get(g, x->d, x->bytes) && (!gs || !dev_get(gs, x->ds, x->sbytes));

	if (ok && memcmp(g, x->h, x->bytes)) {
		size_t i = 0;

		while (g[i] == x->h[i])
			i++;
		tap_failf("%s: device bytes differ from the CPU copy's at %zu", what, i);
		ok = false;
	}
	if (ok && gs && memcmp(gs, x->hs, x->sbytes)) {
		tap_failf("%s: device scales differ from the CPU copy's", what);
		ok = false;
	}
	free(g);
	free(gs);
	return ok;
}

static void darr_free(struct darr *x)
{
	free(x->h);
	free(x->hs);
	dev_free(x->d);
	dev_free(x->ds);
	memset(x, 0, sizeof(*x));
}

/* count random pairs: sources from src ids, distinct destinations from dst ids. */
static uint32_t make_pairs(struct kvrt_block_pair *pr, const uint32_t *sids, uint32_t ns,
			   const uint32_t *dids, uint32_t nd, uint32_t count)
{
	uint32_t *perm = xmalloc(sizeof(*perm) * nd), i;

	shuffle(perm, nd);
	if (count > nd)
		count = nd;
	for (i = 0; i < count; i++)
		pr[i] = (struct kvrt_block_pair){ .src = sids[rnd_below(ns)], .dst = dids[perm[i]] };
	free(perm);
	return count;
}

static const char *const method_name[] = { "AUTO", "BATCH", "KERNEL", "MEMCPY" };

/*
 * One GPU copy against the CPU's: dst is a pool (host) or a device array;
 * src the other or a device array.  Returns the GPU's errno.
 */
static int copy_check(enum kvrt_gpu_copy_method m, struct pool *dp, struct darr *dd,
		      struct pool *sp, struct darr *sd, uint32_t count, const char *what)
{
	static uint32_t devids[CP_DEV_BLOCKS];
	struct kvrt_block_pair pr[CP_DEV_BLOCKS];
	const struct kvrt_block_array *gdst = dp ? &dp->a : &dd->da, *gsrc = sp ? &sp->a : &sd->da;
	struct kvrt_block_array cdst, csrc;
	uint8_t *mirror = NULL;
	struct kvrt_layout mlo;
	uint32_t i, n;
	int rc, rg;

	for (i = 0; i < CP_DEV_BLOCKS; i++)
		devids[i] = i;
	n = make_pairs(pr, sp ? sp->ids : devids, sp ? sp->nids : CP_DEV_BLOCKS,
		       dp ? dp->ids : devids, dp ? dp->nids : CP_DEV_BLOCKS, count);
	/* the CPU's side: host twins; a pool destination gets a mirror */
	if (sd && darr_pull(sd))
		return -EIO;
	if (dd && darr_pull(dd))
		return -EIO;
	csrc = sp ? sp->a : sd->ha;
	if (dp) {
		mirror = pool_snapshot(dp);
		mlo = dp->lo;
		cdst = dp->a;
		cdst.layout = &mlo;
		cdst.base = mirror;
		if (dp->a.scales)
			cdst.scales = (float *)(mirror + ((uint8_t *)dp->a.scales -
							  (uint8_t *)dp->a.base));
	} else {
		cdst = dd->ha;
	}
	rc = kvrt_copy_blocks(K, &cdst, &csrc, pr, n, 0, NULL);
	CHECKF(!rc, "%s: CPU kvrt_copy_blocks = %d", what, rc);
	rg = kvrt_gpu_copy_blocks(G, gdst, gsrc, pr, n, m, NULL);
	if (rg == -ENOTSUP && m == KVRT_GPU_COPY_BATCH) {
		free(mirror);
		return rg;
	}
	CHECKF(!rg, "%s: kvrt_gpu_copy_blocks(%s) = %d", what, method_name[m], rg);
	if (!rg && !rc && !dev_sync()) {
		if (dp) {
			size_t bad = pool_diff(dp, mirror);

			CHECKF(!bad, "%s (%s): pool block %u differs from the CPU copy's", what,
			       method_name[m], bad ? dp->ids[bad - 1] : 0);
		} else {
			char w2[160];

			snprintf(w2, sizeof(w2), "%s (%s)", what, method_name[m]);
			darr_same(dd, w2);
		}
	}
	free(mirror);
	return rg;
}

static bool pools_registered;
static struct pool pool16, pool8;

static int copy_setup(void)
{
	int r;

	if (pools_registered)
		return 0;
	r = pool_open(&pool16, "test_gpu_bf16", KVRT_DTYPE_BF16, 32);
	if (!r)
		r = pool_open(&pool8, "test_gpu_fp8", KVRT_DTYPE_FP8_E4M3, 32);
	if (r) {
		tap_failf("copy pools: %d", r);
		return r;
	}
	if ((r = kvrt_gpu_register_space(G, pool16.sp)) ||
	    (r = kvrt_gpu_register_space(G, pool8.sp))) {
		tap_failf("kvrt_gpu_register_space = %d", r);
		return r;
	}
	pools_registered = true;
	return 0;
}

TEST(register_space_and_host)
{
	struct kvrt_gpu_info a, b;
	struct kvrt_gpu *g2 = NULL;
	struct pool p;
	size_t hb = 3 << 20;
	uint8_t *h = aligned_alloc(4096, hb);
	int r;

	REQUIRE(h);
	memset(h, 1, hb);
	REQUIRE(pool_open(&p, "test_gpu_reg", KVRT_DTYPE_BF16, 8) == 0);
	REQUIRE(kvrt_gpu_info(G, &a) == 0);
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space = %d", r);
	kvrt_gpu_info(G, &b);
	CHECKF(b.registered_bytes > a.registered_bytes, "registered_bytes %llu -> %llu",
	       (unsigned long long)a.registered_bytes, (unsigned long long)b.registered_bytes);
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space again = %d", r);
	/* the space grows: registering again takes the rest */
	r = kvrt_alloc_blocks(p.sp, 16, p.ids + 8);
	CHECKF(!r, "kvrt_alloc_blocks = %d", r);
	if (!r)
		p.nids = 24;
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space after growth = %d", r);
	/* another kvrt_gpu may not register it too */
	r = kvrt_gpu_open(K, GI.device, &g2);
	CHECKF(!r, "second kvrt_gpu_open = %d", r);
	if (!r) {
		CHECKF((r = kvrt_gpu_register_space(g2, p.sp)) == -EBUSY,
		       "register_space from a second kvrt_gpu = %d, want -EBUSY", r);
	}
	/* host ranges */
	CHECKF((r = kvrt_gpu_register_host(G, h + 1, 4096)) == -EINVAL,
	       "register_host(unaligned addr) = %d", r);
	CHECKF((r = kvrt_gpu_register_host(G, h, 4095)) == -EINVAL,
	       "register_host(unaligned size) = %d", r);
	CHECKF((r = kvrt_gpu_register_host(G, h, hb)) == 0, "register_host = %d", r);
	CHECKF((r = kvrt_gpu_unregister_host(G, h)) == 0, "unregister_host = %d", r);
	CHECKF((r = kvrt_gpu_unregister_host(G, h)) < 0, "unregister_host twice = %d", r);
	CHECKF((r = kvrt_gpu_unregister_space(G, p.sp)) == 0, "unregister_space = %d", r);
	kvrt_gpu_info(G, &b);
	CHECKF(b.registered_bytes == a.registered_bytes, "registered_bytes %llu after unregistering "
	       "everything, %llu before", (unsigned long long)b.registered_bytes,
	       (unsigned long long)a.registered_bytes);
	/* kvrt_gpu_close unregisters what is left */
	if (g2) {
		CHECKF((r = kvrt_gpu_register_space(g2, p.sp)) == 0,
		       "register_space from the second kvrt_gpu once free = %d", r);
		kvrt_gpu_close(g2);
		CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0,
		       "register_space after the other kvrt_gpu closed = %d", r);
		CHECKF((r = kvrt_gpu_unregister_space(G, p.sp)) == 0, "unregister_space = %d", r);
	}
	pool_close(&p);
	free(h);
}

static void copy_method(enum kvrt_gpu_copy_method m)
{
	struct darr lm16, bm16, lm8;
	size_t hb;
	uint8_t *h = NULL;
	char what[96];
	int r, i;

	memset(&lm16, 0, sizeof(lm16));
	memset(&bm16, 0, sizeof(bm16));
	memset(&lm8, 0, sizeof(lm8));
	if (copy_setup())
		return;
	if (darr_make(&lm16, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_BF16) ||
	    darr_make(&bm16, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_BF16) ||
	    darr_make(&lm8, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_FP8_E4M3))
		goto out;

	r = copy_check(m, &pool16, NULL, NULL, &lm16, 20, "offload layer-major device -> pool");
	if (r == -ENOTSUP && m == KVRT_GPU_COPY_BATCH) {
		static char why[160];

		CHECKF(!GI.batch_memcpy, "BATCH: -ENOTSUP, but info.batch_memcpy is 1");
		snprintf(why, sizeof(why), "BATCH: -ENOTSUP, driver %d has no cuMemcpyBatchAsync "
			 "(12.8+)", GI.driver_version);
		tap_skip(why);
		goto out;
	}
	if (m == KVRT_GPU_COPY_BATCH)
		CHECKF(GI.batch_memcpy, "BATCH worked, but info.batch_memcpy is 0");
	for (i = 0; i < 2; i++) {
		copy_check(m, NULL, &lm16, &pool16, NULL, 25, "fetch pool -> layer-major device");
		copy_check(m, &pool16, NULL, NULL, &bm16, 17, "offload block-major device -> pool");
		copy_check(m, NULL, &bm16, &pool16, NULL, 30, "fetch pool -> block-major device");
		copy_check(m, &pool8, NULL, NULL, &lm8, 20,
			   "offload fp8 layer-major (scales apart) -> pool (inline scales)");
		copy_check(m, NULL, &lm8, &pool8, NULL, 20, "fetch fp8 pool -> layer-major device");
		copy_check(m, NULL, &lm16, NULL, &bm16, 15, "device block-major -> layer-major");
		copy_check(m, NULL, &bm16, NULL, &lm16, 1, "device layer-major -> block-major, 1 block");
	}
	/* a malloc'd host array registered with kvrt_gpu_register_host, both ways */
	{
		struct kvrt_layout lo;
		struct kvrt_block_array ha, md;
		struct kvrt_block_pair pr[CP_DEV_BLOCKS];
		uint32_t ids[CP_DEV_BLOCKS], n, j;
		uint8_t *mirror;
		int rc;

		kvrt_layout_init(&lo, KVRT_LAYOUT_BLOCK_MAJOR, CP_LAYERS, CP_HEADS, CP_DIM, CP_TOKENS,
				 CP_DEV_BLOCKS, KVRT_DTYPE_BF16);
		hb = ((size_t)lo.block_stride * CP_DEV_BLOCKS + 4095) / 4096 * 4096;
		h = aligned_alloc(4096, hb);
		if (!h)
			goto out;
		for (j = 0; j < hb; j++)
			h[j] = (uint8_t)rnd();
		r = kvrt_gpu_register_host(G, h, hb);
		CHECKF(!r, "register_host = %d", r);
		if (r)
			goto out;
		for (j = 0; j < CP_DEV_BLOCKS; j++)
			ids[j] = j;
		ha = (struct kvrt_block_array){ &lo, h, NULL };
		mirror = xmalloc(hb);
		md = (struct kvrt_block_array){ &lo, mirror, NULL };
		n = make_pairs(pr, ids, CP_DEV_BLOCKS, ids, CP_DEV_BLOCKS, 22);
		if (!darr_pull(&lm16)) {
			memcpy(mirror, h, hb);
			rc = kvrt_copy_blocks(K, &md, &lm16.ha, pr, n, 0, NULL);
			r = kvrt_gpu_copy_blocks(G, &ha, &lm16.da, pr, n, m, NULL);
			CHECKF(!rc && !r, "device -> registered host array (%s): GPU %d, CPU %d",
			       method_name[m], r, rc);
			if (!r && !rc && !dev_sync())
				CHECKF(!memcmp(mirror, h, hb), "device -> registered host array (%s): "
				       "host bytes differ from the CPU copy's", method_name[m]);
		}
		n = make_pairs(pr, ids, CP_DEV_BLOCKS, ids, CP_DEV_BLOCKS, 22);
		if (!darr_pull(&lm16)) {
			rc = kvrt_copy_blocks(K, &lm16.ha, &ha, pr, n, 0, NULL);
			r = kvrt_gpu_copy_blocks(G, &lm16.da, &ha, pr, n, m, NULL);
			CHECKF(!rc && !r, "registered host array -> device (%s): GPU %d, CPU %d",
			       method_name[m], r, rc);
			snprintf(what, sizeof(what), "registered host array -> device (%s)",
				 method_name[m]);
			if (!r && !rc && !dev_sync())
				darr_same(&lm16, what);
		}
		free(mirror);
		r = kvrt_gpu_unregister_host(G, h);
		CHECKF(!r, "unregister_host = %d", r);
	}
out:
	darr_free(&lm16);
	darr_free(&bm16);
	darr_free(&lm8);
	free(h);
}

/*
 * A space registered before its blocks had pages (an engine registers it
 * once, at start): the first copy into blocks backed later registers them
 * (the copy kernel would fault on unregistered memory and end the
 * context), and the blocks hold what the CPU's copy gives.
 */
TEST(copy_into_blocks_backed_after_registration)
{
	struct kvrt_gpu_info a, b;
	struct darr s;
	struct pool p;
	uint64_t i, j;
	int r;

	REQUIRE(pool_open(&p, "test_gpu_late", KVRT_DTYPE_BF16, 0) == 0);
	REQUIRE(darr_make(&s, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_BF16) == 0);
	REQUIRE(kvrt_gpu_info(G, &a) == 0);
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space, no block backed = %d",
	       r);
	r = kvrt_alloc_blocks(p.sp, 8, p.ids);
	CHECKF(!r, "kvrt_alloc_blocks = %d", r);
	if (!r) {
		p.nids = 8;
		for (i = 0; i < p.nids; i++) {
			uint8_t *blk = kvrt_block_addr(p.sp, p.ids[i]);

			for (j = 0; j < p.block_bytes; j++)
				blk[j] = (uint8_t)rnd();
		}
		r = copy_check(KVRT_GPU_COPY_KERNEL, &p, NULL, NULL, &s, 8, "late blocks");
		CHECKF(!r, "kernel copy into blocks backed after registration = %d", r);
		kvrt_gpu_info(G, &b);
		CHECKF(b.registered_bytes >= a.registered_bytes + 8 * p.block_bytes,
		       "registered_bytes %llu -> %llu: the copy did not register the new blocks",
		       (unsigned long long)a.registered_bytes,
		       (unsigned long long)b.registered_bytes);
	}
	CHECKF((r = kvrt_gpu_unregister_space(G, p.sp)) == 0, "unregister_space = %d", r);
	darr_free(&s);
	pool_close(&p);
}

TEST(copy_method_auto)
{
	struct kvrt_gpu_copy_calib c;
	uint32_t i;
	int r;

	copy_method(KVRT_GPU_COPY_AUTO);
	r = kvrt_gpu_copy_calibration(G, &c);
	CHECKF(!r, "kvrt_gpu_copy_calibration = %d", r);
	if (r)
		return;
	tap_diag("AUTO: kernel_copy_max %llu bytes (source %u; buffer %llu bytes, %lld on huge "
		 "pages)", (unsigned long long)c.kernel_copy_max, c.source,
		 (unsigned long long)c.buffer_bytes, (long long)c.buffer_thp_bytes);
	for (i = 0; i < c.num_sizes; i++)
		tap_diag("AUTO calibration: %llu-byte runs: kernel %.2f GB/s, large %.2f GB/s",
			 (unsigned long long)c.sizes[i].run_bytes, c.sizes[i].kernel_gbps,
			 c.sizes[i].large_gbps);
}

TEST(copy_method_batch)
{
	copy_method(KVRT_GPU_COPY_BATCH);
}

TEST(copy_method_kernel)
{
	copy_method(KVRT_GPU_COPY_KERNEL);
}

TEST(copy_method_memcpy)
{
	copy_method(KVRT_GPU_COPY_MEMCPY);
}

/* Every invalid copy: the GPU's errno is the CPU's, and nothing moves. */
TEST(copy_errors_match_cpu)
{
	struct darr s, d, s8, d8;
	struct kvrt_block_pair p[2] = { { 0, 1 }, { 1, 2 } }, dup[2] = { { 0, 1 }, { 1, 1 } };
	struct kvrt_block_pair oobs = { CP_DEV_BLOCKS, 0 }, oobd = { 0, CP_DEV_BLOCKS };
	struct kvrt_block_pair self[2] = { { 0, 1 }, { 1, 2 } };
	struct kvrt_layout bad;
	struct kvrt_block_array hs, hd, gs, gd;
	int rc, rg, f;

	memset(&s, 0, sizeof(s));
	memset(&d, 0, sizeof(d));
	memset(&s8, 0, sizeof(s8));
	memset(&d8, 0, sizeof(d8));
	if (darr_make(&s, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_F16) ||
	    darr_make(&d, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_F16) ||
	    darr_make(&s8, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_FP8_E4M3) ||
	    darr_make(&d8, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_FP8_E4M3))
		goto out;

#define SAME(what, HD, HS, GD, GS, PAIRS, N, M)                                                \
	do {                                                                                   \
		rc = kvrt_copy_blocks(K, HD, HS, PAIRS, N, 0, NULL);                           \
		rg = kvrt_gpu_copy_blocks(G, GD, GS, PAIRS, N, M, NULL);                       \
		CHECKF(rc == rg, "copy %s: GPU %d, CPU %d", what, rg, rc);                     \
	} while (0)
	for (int m = 0; m < 4; m++) {
		if (m == KVRT_GPU_COPY_BATCH && !GI.batch_memcpy)
			continue;
		SAME("valid", &d.ha, &s.ha, &d.da, &s.da, p, 2, m);
		SAME("NULL dst", NULL, &s.ha, NULL, &s.da, p, 2, m);
		SAME("NULL src", &d.ha, NULL, &d.da, NULL, p, 2, m);
		SAME("NULL pairs", &d.ha, &s.ha, &d.da, &s.da, NULL, 2, m);
		SAME("count 0", &d.ha, &s.ha, &d.da, &s.da, NULL, 0, m);
		hd = d.ha, gd = d.da;
		hd.layout = gd.layout = NULL;
		SAME("NULL layout", &hd, &s.ha, &gd, &s.da, p, 2, m);
		hd = d.ha, gd = d.da;
		hd.base = gd.base = NULL;
		SAME("NULL base", &hd, &s.ha, &gd, &s.da, p, 2, m);
		for (f = 0; f < 5; f++) {
			bad = d.lo;
			switch (f) {
			case 0: bad.num_layers = 1; break;
			case 1: bad.num_kv_heads = 1; break;
			case 2: bad.head_dim = 32; break;
			case 3: bad.block_tokens = 8; break;
			default: bad.kv_dtype = KVRT_DTYPE_BF16; break;
			}
			hd = d.ha, gd = d.da;
			hd.layout = gd.layout = &bad;
			SAME("geometry mismatch", &hd, &s.ha, &gd, &s.da, p, 2, m);
		}
		bad = d.lo;
		bad.layer_stride = INT64_MAX;
		hd = d.ha, gd = d.da;
		hd.layout = gd.layout = &bad;
		SAME("layout extent overflows", &hd, &s.ha, &gd, &s.da, p, 2, m);
		SAME("src id >= num_blocks", &d.ha, &s.ha, &d.da, &s.da, &oobs, 1, m);
		SAME("dst id >= num_blocks", &d.ha, &s.ha, &d.da, &s.da, &oobd, 1, m);
		SAME("a destination twice", &d.ha, &s.ha, &d.da, &s.da, dup, 2, m);
		SAME("a block both source and destination", &d.ha, &d.ha, &d.da, &d.da, self, 2, m);
		hd = d8.ha, gd = d8.da;
		hd.scales = gd.scales = NULL;
		SAME("fp8 dst without scales", &hd, &s8.ha, &gd, &s8.da, p, 2, m);
		hs = s8.ha, gs = s8.da;
		hs.scales = gs.scales = NULL;
		SAME("fp8 src without scales", &d8.ha, &hs, &d8.da, &gs, p, 2, m);
	}
#undef SAME
	rg = kvrt_gpu_copy_blocks(G, &d.da, &s.da, p, 2, (enum kvrt_gpu_copy_method)7, NULL);
	CHECKF(rg == -EINVAL, "copy with method 7 = %d, want -EINVAL", rg);
	dev_sync();
	/* the valid copies went through the twins too: the device must match them */
	darr_same(&d, "device array after the error cases");
	darr_same(&d8, "fp8 device array after the error cases");
out:
	darr_free(&s);
	darr_free(&d);
	darr_free(&s8);
	darr_free(&d8);
}

/* ---- main ------------------------------------------------------------------------------- */

int main(void)
{
	const char *e = getenv("KVRT_TEST_SEED");
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	uint64_t seed = e ? strtoull(e, NULL, 0) : 20261122;
	int r, i;

	rng_state = seed;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# test_gpu: seed %llu (KVRT_TEST_SEED)\n", (unsigned long long)seed);
	pin_driver();
	probe_ret = kvrt_gpu_probe(probe_why, sizeof(probe_why));
	r = kvrt_open(&K, &oo);
	if (r) {
		tap_result(false, "kvrt_open(embedded) = %d", r);
		return tap_done("test_gpu");
	}
	RUN(probe_result);
	RUN(open_argument_errors);
	RUN(null_handles_einval);
	RUN(comparator_detects_errors);
	if (probe_ret == -ENODEV) {
		RUN(gpu_tests);
		kvrt_close(K);
		return tap_done("test_gpu");
	}
	if (probe_ret == 0) {
		RUN(open_and_info);
	}
	if (probe_ret == 0 && G) {
		double t0;
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = ts.tv_sec + ts.tv_nsec * 1e-9;
		RUN(device_memory);
		RUN(read_stream_sums);
		RUN(plan_validation);
		RUN(decode_dtype_matrix);
		RUN(decode_shape_matrix);
		RUN(decode_mqa_and_wide_groups);
		RUN(decode_window_softcap);
		RUN(decode_ragged_batch64);
		RUN(decode_long_split_kv);
		RUN(decode_random);
		RUN(prefill_shapes);
		RUN(prefill_random);
		RUN(replan_same_plan_object);
		RUN(graph_replay_after_replan);
		RUN(append_f16_bf16_bit_identical);
		RUN(append_fp8_matches_cpu);
		RUN(append_out_of_range_slots_skipped);
		RUN(append_errors_match_cpu);
		RUN(register_space_and_host);
		RUN(copy_into_blocks_backed_after_registration);
		RUN(copy_method_auto);
		RUN(copy_method_batch);
		RUN(copy_method_kernel);
		RUN(copy_method_memcpy);
		RUN(copy_errors_match_cpu);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		tap_diag("GPU part took %.1f s; %u attention calls checked", ts.tv_sec + ts.tv_nsec * 1e-9 - t0,
			 stats.cases);
		for (i = 1; i < 4; i++)
			tap_diag("largest GPU error, passing cases, kv %s: %.3f of the tolerance", dtname(i),
				 stats.worst[i]);
		for (i = 0; i < 16; i++)
			if (stats.matched[i / 4][i % 4]) {
				struct cand c = { (enum kvrt_dtype)(i / 4), (enum kvrt_dtype)(i % 4) };
				char cn[64];

				tap_diag("calls matching the %s reference: %u",
					 cand_name(&c, cn, sizeof(cn)), stats.matched[i / 4][i % 4]);
			}
	}
	if (pools_registered) {
		kvrt_gpu_unregister_space(G, pool16.sp);
		kvrt_gpu_unregister_space(G, pool8.sp);
	}
	pool_close(&pool16);
	pool_close(&pool8);
	for (i = 0; i < (int)nplans; i++)
		kvrt_gpu_plan_destroy(plans[i].p);
	kvrt_gpu_close(G);
	kvrt_close(K);
	return tap_done("test_gpu");
}
