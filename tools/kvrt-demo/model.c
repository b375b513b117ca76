// SPDX-License-Identifier: GPL-2.0
/*
 * model.c: the decoder's forward pass.
 *
 * Determinism is the point of most choices here: the equivalence check
 * compares a run with prefix caching, offload and chunked prefill against
 * a full recomputation, so every output row must be a function of its
 * token and of the K/V it attends to only, never of what else shares the
 * batch.  So: each matmul element is one dot product in a fixed order (8
 * lane partial sums, a fixed tree, then the tail), whatever the tile or
 * thread that computes it; the build uses -ffp-contract=off so that the
 * compiler cannot fuse some of those operations and not others; norms and
 * activations are per row; and the attention of every row is libkvrt's
 * kvrt_attn_prefill, whose rows do not depend on chunk boundaries
 * (kvrt_attn_decode rounds differently: see enum decode_kernel).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../common/carve.h"
#include "devgpu.h"
#include "model.h"

/* ---- a small persistent thread pool --------------------------------------- */

typedef void (*tpool_fn)(void *arg, uint32_t idx, uint32_t n);

struct tpool {
	uint32_t n;		/* threads including the caller */
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	uint64_t gen;
	uint32_t pending;
	int stop;
	tpool_fn fn;
	void *arg;
};

struct tpool_worker {
	struct tpool *p;
	uint32_t idx;
};

static void *tpool_main(void *a)
{
	struct tpool_worker *w = a;
	struct tpool *p = w->p;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->gen == seen && !p->stop)
			pthread_cond_wait(&p->work, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		p->fn(p->arg, w->idx, p->n);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	free(w);
	return NULL;
}

struct tpool *tpool_create(uint32_t threads)
{
	struct tpool *p = calloc(1, sizeof(*p));
	uint32_t i;

	if (!p)
		return NULL;
	p->n = threads ? threads : 1;
	p->th = calloc(p->n, sizeof(*p->th));
	if (!p->th) {
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	for (i = 1; i < p->n; i++) {
		struct tpool_worker *w = malloc(sizeof(*w));

		if (!w)
			break;
		w->p = p;
		w->idx = i;
		if (pthread_create(&p->th[i], NULL, tpool_main, w)) {
			free(w);
			break;
		}
	}
	p->n = i;	/* fewer threads if some could not start */
	return p;
}

void tpool_destroy(struct tpool *p)
{
	uint32_t i;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (i = 1; i < p->n; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p->th);
	free(p);
}

/*
 * Run fn(arg, i, n) for every thread i of the pool (the caller is thread
 * 0), or only fn(arg, 0, 1) in the caller when not parallel.
 */
static void tpool_run(struct tpool *p, int parallel, tpool_fn fn, void *arg)
{
	if (!p || p->n < 2 || !parallel) {
		fn(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->pending = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	fn(arg, 0, p->n);
	pthread_mutex_lock(&p->mu);
	while (p->pending)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* ---- matmul ---------------------------------------------------------------- */

typedef float v8f __attribute__((vector_size(32)));

/*
 * Macros, not functions: a function taking or returning a 32-byte vector
 * draws GCC's ABI notes when the file is built without AVX.
 */
#define LD8(p) ({ v8f _v; memcpy(&_v, (p), sizeof(_v)); _v; })
/* a fixed tree: lanes 0+4, 1+5, 2+6, 3+7, then pairs */
#define HSUM8(v) \
	((((v)[0] + (v)[4]) + ((v)[2] + (v)[6])) + (((v)[1] + (v)[5]) + ((v)[3] + (v)[7])))

/*
 * An R x C tile of y: rows of x against rows of w.  Every element gets the
 * same sequence of operations whatever R and C, so a token's results do
 * not depend on the batch around it.
 */
static inline __attribute__((always_inline)) void
mm_tile(float *y, uint32_t ldy, const float *x, const float *w, uint32_t K, const int R,
	const int C)
{
	v8f acc[6][4];
	uint32_t k, K8 = K & ~7u;
	int r, c;

	for (r = 0; r < R; r++)
		for (c = 0; c < C; c++)
			acc[r][c] = (v8f){ 0 };
	for (k = 0; k < K8; k += 8) {
		v8f wv[4];

		for (c = 0; c < C; c++)
			wv[c] = LD8(w + (size_t)c * K + k);
		for (r = 0; r < R; r++) {
			v8f xv = LD8(x + (size_t)r * K + k);

			for (c = 0; c < C; c++)
				acc[r][c] += xv * wv[c];
		}
	}
	for (r = 0; r < R; r++) {
		for (c = 0; c < C; c++) {
			float s = HSUM8(acc[r][c]);

			for (k = K8; k < K; k++)
				s += x[(size_t)r * K + k] * w[(size_t)c * K + k];
			y[(size_t)r * ldy + c] = s;
		}
	}
}

/* Rows of x per block: a block of x stays in L2 while w streams past it. */
#define MM_ROW_BLOCK 64

/* Tiles of RT rows x CT outputs, with 1-wide edges; the same per-element
 * arithmetic whatever the tile, so the tile shape is only about speed. */
#define MM_RANGE_BODY(RT, CT)                                                       \
	uint32_t t0, t, o;                                                          \
	for (t0 = 0; t0 < T; t0 += MM_ROW_BLOCK) {                                  \
		uint32_t t1 = t0 + MM_ROW_BLOCK < T ? t0 + MM_ROW_BLOCK : T;        \
		for (o = o0; o + CT <= o1; o += CT) {                               \
			const float *wr = w + (size_t)o * K;                        \
			for (t = t0; t + RT <= t1; t += RT)                         \
				mm_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, wr, K, RT, CT); \
			for (; t < t1; t++)                                         \
				mm_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, wr, K, 1, CT); \
		}                                                                   \
		for (; o < o1; o++) {                                               \
			const float *wr = w + (size_t)o * K;                        \
			for (t = t0; t + RT <= t1; t += RT)                         \
				mm_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, wr, K, RT, 1); \
			for (; t < t1; t++)                                         \
				mm_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, wr, K, 1, 1); \
		}                                                                   \
	}

/*
 * The same code three times: AVX-512VL gives 32 vector registers for
 * bigger tiles (still 8-float vectors), AVX2 16, and SSE2 pairs elsewhere.
 * Without FMA all three give the same bits.
 */
__attribute__((target("avx512f,avx512vl"))) static void
mm_range_avx512(float *y, const float *x, const float *w, uint32_t T, uint32_t N, uint32_t K,
		uint32_t o0, uint32_t o1)
{
	MM_RANGE_BODY(6, 4)
}

__attribute__((target("avx2"))) static void
mm_range_avx2(float *y, const float *x, const float *w, uint32_t T, uint32_t N, uint32_t K,
	      uint32_t o0, uint32_t o1)
{
	MM_RANGE_BODY(4, 2)
}

static void mm_range_generic(float *y, const float *x, const float *w, uint32_t T, uint32_t N,
			     uint32_t K, uint32_t o0, uint32_t o1)
{
	MM_RANGE_BODY(4, 2)
}

struct mm_job {
	float *y;
	const float *x, *w;
	uint32_t T, N, K;
	int isa;	/* 2: AVX-512VL, 1: AVX2, 0: generic */
};

static void mm_worker(void *arg, uint32_t idx, uint32_t n)
{
	struct mm_job *j = arg;
	/* split the outputs in runs of a multiple of 4 so tiles stay whole */
	uint32_t per = ((j->N + n - 1) / n + 3) & ~3u;
	uint32_t o0 = idx * per, o1 = o0 + per < j->N ? o0 + per : j->N;

	if (o0 >= j->N)
		return;
	if (j->isa == 2)
		mm_range_avx512(j->y, j->x, j->w, j->T, j->N, j->K, o0, o1);
	else if (j->isa == 1)
		mm_range_avx2(j->y, j->x, j->w, j->T, j->N, j->K, o0, o1);
	else
		mm_range_generic(j->y, j->x, j->w, j->T, j->N, j->K, o0, o1);
}

static int mm_isa(void)
{
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
		return 2;
	return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/* Multiply-adds below which a second thread costs more than it saves. */
#define MM_PARALLEL_MACS (1u << 18)

void matmul(struct tpool *pool, float *y, const float *x, const float *w, uint32_t T,
	    uint32_t N, uint32_t K)
{
	struct mm_job j = { y, x, w, T, N, K, mm_isa() };
	uint64_t macs = (uint64_t)T * N * K;

	tpool_run(pool, macs >= MM_PARALLEL_MACS, mm_worker, &j);
}

/* ---- the other building blocks ------------------------------------------------ */

void rmsnorm(float *out, const float *x, const float *w, uint32_t n)
{
	float ss = 0.0f, scale;
	uint32_t i;

	for (i = 0; i < n; i++)
		ss += x[i] * x[i];
	scale = 1.0f / sqrtf(ss / (float)n + MODEL_RMS_EPS);
	for (i = 0; i < n; i++)
		out[i] = w[i] * (x[i] * scale);
}

void rope_tables(float *cos_t, float *sin_t, uint32_t seq_len, uint32_t head_dim)
{
	uint32_t p, i, half = head_dim / 2;

	/* in double, then rounded once: the tables are exact to half an ulp */
	for (p = 0; p < seq_len; p++) {
		for (i = 0; i < half; i++) {
			double freq = pow(10000.0, -(double)(2 * i) / (double)head_dim);

			cos_t[(size_t)p * half + i] = (float)cos((double)p * freq);
			sin_t[(size_t)p * half + i] = (float)sin((double)p * freq);
		}
	}
}

void rope_apply(float *vec, uint32_t n, uint32_t head_dim, const float *cos_row,
		const float *sin_row)
{
	uint32_t i;

	for (i = 0; i < n; i += 2) {
		uint32_t f = (i % head_dim) / 2;
		float a = vec[i], b = vec[i + 1], c = cos_row[f], s = sin_row[f];

		vec[i] = a * c - b * s;
		vec[i + 1] = a * s + b * c;
	}
}

void swiglu(float *gate, const float *up, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		float g = gate[i];

		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

uint32_t argmax(const float *logits, uint32_t n)
{
	uint32_t i, best = 0;

	for (i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* ---- the model ------------------------------------------------------------------ */

/* The rope tables and the activations, one allocation (../common/carve.h). */
static void *scratch_carve(struct model *m, size_t seq_len, size_t T, size_t D, size_t H)
{
	const struct carve_part part[] = {
		{ (void **)&m->rope_cos, sizeof(float) * seq_len * m->head_dim / 2 },
		{ (void **)&m->rope_sin, sizeof(float) * seq_len * m->head_dim / 2 },
		{ (void **)&m->x, sizeof(float) * T * D },
		{ (void **)&m->xb, sizeof(float) * T * D },
		{ (void **)&m->q, sizeof(float) * T * D },
		{ (void **)&m->k, sizeof(float) * T * m->kv_dim },
		{ (void **)&m->v, sizeof(float) * T * m->kv_dim },
		{ (void **)&m->att, sizeof(float) * T * D },
		{ (void **)&m->hb, sizeof(float) * T * H },
		{ (void **)&m->hb2, sizeof(float) * T * H },
		{ (void **)&m->xo, sizeof(float) * T * D },
		{ (void **)&m->tmp_i32, sizeof(int32_t) * (4 * T + 8) },
	};

	return carve(part, sizeof(part) / sizeof(part[0]));
}

int model_init(struct model *m, const struct checkpoint *ck, uint32_t max_tokens,
	       uint32_t threads, enum decode_kernel dk)
{
	const struct model_config *c = &ck->cfg;
	size_t D = (size_t)c->dim, H = (size_t)c->hidden_dim, T = max_tokens;
	int ret;

	memset(m, 0, sizeof(*m));
	m->ck = ck;
	m->cfg = *c;
	m->head_dim = (uint32_t)(c->dim / c->n_heads);
	m->kv_dim = m->head_dim * (uint32_t)c->n_kv_heads;
	m->max_tokens = max_tokens;
	m->threads = threads;
	m->decode_kernel = dk;
	m->scratch = scratch_carve(m, (size_t)c->seq_len, T, D, H);
	m->pool = tpool_create(threads);
	if (!m->scratch || !m->pool) {
		model_fini(m);
		return -ENOMEM;
	}
	ret = kvrt_workers_create(threads, &m->attn_workers);
	if (ret) {
		model_fini(m);
		return ret;
	}
	rope_tables(m->rope_cos, m->rope_sin, (uint32_t)c->seq_len, m->head_dim);
	return 0;
}

void model_fini(struct model *m)
{
	kvrt_workers_destroy(m->attn_workers);
	tpool_destroy(m->pool);
	free(m->scratch);
	memset(m, 0, sizeof(*m));
}

/*
 * Attention of one layer, on the model's kept libkvrt worker threads (the
 * _on calls: no thread creation per layer).  Default: one
 * kvrt_attn_prefill over the whole mixed batch (a decoding sequence is a
 * chunk of one token), as engines
 * with chunked prefill run a varlen kernel.  With DECODE_WITH_DECODE the
 * first n_decode sequences go through kvrt_attn_decode and the rest
 * through kvrt_attn_prefill, each with its own rebased block table.
 */
static int attention(struct model *m, const struct kvrt_kv_cache *kv, const struct fwd_batch *b)
{
	struct kvrt_attn_params ap = {
		.num_q_heads = (uint32_t)m->cfg.n_heads,
		.sm_scale = 1.0f / sqrtf((float)m->head_dim),
		.window_left = -1,
		.q_dtype = KVRT_DTYPE_F32,
		.o_dtype = KVRT_DTYPE_F32,
		.impl = KVRT_ATTN_FAST,
		.num_threads = m->threads,
	};
	struct kvrt_block_table t;
	uint32_t nd = m->decode_kernel == DECODE_WITH_DECODE ? b->n_decode : 0, np, i;
	int32_t *qi, *bi, base_q, base_b;
	size_t row = (size_t)m->cfg.dim;
	int ret;

	if (!nd) {
		t = (struct kvrt_block_table){ b->n_seqs, b->blk_indptr, b->blk_indices,
					       b->seq_lens };
		return kvrt_attn_prefill_on(m->attn_workers, &ap, m->q, b->q_indptr, kv, &t,
					    m->att);
	}
	/* decoding sequences: rows 0 .. nd, one each */
	t = (struct kvrt_block_table){ nd, b->blk_indptr, b->blk_indices, b->seq_lens };
	ret = kvrt_attn_decode_on(m->attn_workers, &ap, m->q, kv, &t, m->att);
	if (ret || nd == b->n_seqs)
		return ret;
	/* the rest: CSR arrays must start at 0, so rebase them */
	np = b->n_seqs - nd;
	qi = m->tmp_i32;
	bi = m->tmp_i32 + np + 1;
	base_q = b->q_indptr[nd];
	base_b = b->blk_indptr[nd];
	for (i = 0; i <= np; i++) {
		qi[i] = b->q_indptr[nd + i] - base_q;
		bi[i] = b->blk_indptr[nd + i] - base_b;
	}
	t = (struct kvrt_block_table){ np, bi, b->blk_indices + base_b, b->seq_lens + nd };
	return kvrt_attn_prefill_on(m->attn_workers, &ap, m->q + (size_t)base_q * row, qi, kv,
				    &t, m->att + (size_t)base_q * row);
}

int model_forward(struct model *m, const struct kvrt_layout *cache_layout, void *cache_base,
		  const struct fwd_batch *b)
{
	const struct checkpoint *ck = m->ck;
	uint32_t D = (uint32_t)m->cfg.dim, H = (uint32_t)m->cfg.hidden_dim, KV = m->kv_dim;
	uint32_t V = (uint32_t)m->cfg.vocab_size, T = b->n_tokens, half = m->head_dim / 2;
	uint32_t l, t, i;
	int ret;

	if (T > m->max_tokens || b->n_out > T)
		return -EINVAL;
	for (t = 0; t < T; t++) {
		if (b->tokens[t] >= V || b->pos[t] < 0 || b->pos[t] >= m->cfg.seq_len)
			return -EINVAL;
		memcpy(m->x + (size_t)t * D, ck->tok_emb + (size_t)b->tokens[t] * D,
		       sizeof(float) * D);
	}
	if (m->gpu) {
		ret = devgpu_step(m->gpu, cache_layout, b);
		if (ret)
			return ret;
	}
	for (l = 0; l < (uint32_t)m->cfg.n_layers; l++) {
		struct kvrt_kv_cache kv = { .layout = cache_layout, .base = cache_base,
					    .layer = l };

		for (t = 0; t < T; t++)
			rmsnorm(m->xb + (size_t)t * D, m->x + (size_t)t * D, ck->rms_att + (size_t)l * D,
				D);
		matmul(m->pool, m->q, m->xb, ck->wq + (size_t)l * D * D, T, D, D);
		matmul(m->pool, m->k, m->xb, ck->wk + (size_t)l * KV * D, T, KV, D);
		matmul(m->pool, m->v, m->xb, ck->wv + (size_t)l * KV * D, T, KV, D);
		for (t = 0; t < T; t++) {
			const float *c = m->rope_cos + (size_t)b->pos[t] * half;
			const float *s = m->rope_sin + (size_t)b->pos[t] * half;

			rope_apply(m->q + (size_t)t * D, D, m->head_dim, c, s);
			rope_apply(m->k + (size_t)t * KV, KV, m->head_dim, c, s);
		}
		if (m->gpu) {
			ret = devgpu_layer(m->gpu, &kv, m->k, m->v, m->q, b, m->att);
		} else {
			ret = kvrt_append_kv(&kv, m->k, m->v, KVRT_DTYPE_F32, b->slots, T);
			if (!ret)
				ret = attention(m, &kv, b);
		}
		if (ret)
			return ret;
		matmul(m->pool, m->xo, m->att, ck->wo + (size_t)l * D * D, T, D, D);
		for (i = 0; i < T * D; i++)
			m->x[i] += m->xo[i];

		for (t = 0; t < T; t++)
			rmsnorm(m->xb + (size_t)t * D, m->x + (size_t)t * D, ck->rms_ffn + (size_t)l * D,
				D);
		matmul(m->pool, m->hb, m->xb, ck->w1 + (size_t)l * H * D, T, H, D);
		matmul(m->pool, m->hb2, m->xb, ck->w3 + (size_t)l * H * D, T, H, D);
		swiglu(m->hb, m->hb2, T * H);
		matmul(m->pool, m->xo, m->hb, ck->w2 + (size_t)l * D * H, T, D, H);
		for (i = 0; i < T * D; i++)
			m->x[i] += m->xo[i];
	}
	/* the classifier only for the rows that sample a token */
	for (i = 0; i < b->n_out; i++)
		rmsnorm(m->xb + (size_t)i * D, m->x + (size_t)b->out_rows[i] * D, ck->rms_final, D);
	matmul(m->pool, b->logits, m->xb, ck->wcls, b->n_out, V, D);
	return 0;
}
