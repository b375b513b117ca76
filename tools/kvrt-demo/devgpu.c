// SPDX-License-Identifier: GPL-2.0
/*
 * devgpu.c: the device KV cache on a GPU, and the check of every GPU
 * attention call against the CPU's (see devgpu.h).
 *
 * The check's tolerance, per (token, q head) row, in units of vscale (the
 * largest |v| of the sequence's K/V head, so that it bounds the row's
 * attended values), is test_gpu.c's bound for the GPU plus test_attn's for
 * the CPU, with what the demo cannot see made larger:
 *   u(o) + u_p + expm1(2 ds) + 8 sqrt(L) 2^-24 + 2^-18     the GPU (L keys)
 *   + 1e-5 + u(o)                                          the CPU
 * with u(o) = 2^-24 (f32 out), u_p = 2^-11 for f16 K/V, 2^-8 for bf16 (the
 * softmax weights rounded to the K/V type for P.V), and
 *   ds = (head_dim + 8) 2^-24 S + 2^-21,
 * S = sm_scale |q| max|k| (Cauchy-Schwarz bound of sum_d |q_d k_d| over the
 * sequence's keys).  q stays f32 in both kernels (load_f32 in cuda/decode.cu
 * and prefill.cu); a kernel that rounds q to the K/V type would add u_p S
 * to ds.  A wrong block, a key missed or attended twice moves rows by far
 * more (percent, not 0.1 per mille).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devgpu.h"
#include "model.h"

static void devgpu_free_scratch(struct devgpu *g)
{
	void **p[] = { &g->d_q, &g->d_k, &g->d_v, &g->d_out, &g->d_slots,
		       (void **)&g->d_q_indptr, (void **)&g->d_blk_indptr,
		       (void **)&g->d_blk_indices, (void **)&g->d_seq_lens };
	size_t i;

	for (i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		if (*p[i])
			kvrt_gpu_free(g->gpu, *p[i]);
		*p[i] = NULL;
	}
}

int devgpu_open(struct devgpu *g, struct kvrt *k, int device, const struct kvrt_attn_params *ap,
		uint32_t layers, uint32_t kv_heads, uint32_t head_dim, uint32_t max_tokens,
		uint32_t max_seqs, uint32_t blk_cap, int check, char *err, size_t errlen)
{
	size_t qb, kvb, ib;
	int ret;

	memset(g, 0, sizeof(*g));
	ret = kvrt_gpu_open(k, device, &g->gpu);
	if (ret) {
		char why[256] = "";

		kvrt_gpu_probe(why, sizeof(why));
		snprintf(err, errlen, "kvrt_gpu_open(%d): %s%s%s", device, strerror(-ret),
			 *why ? ": " : "", why);
		return ret;
	}
	kvrt_gpu_info(g->gpu, &g->info);
	g->ap = *ap;
	g->layers = layers;
	g->max_tokens = max_tokens;
	g->max_seqs = max_seqs;
	g->q_dim = ap->num_q_heads * head_dim;
	g->kv_dim = kv_heads * head_dim;
	g->blk_cap = blk_cap;
	g->check = check;
	qb = sizeof(float) * (size_t)max_tokens * g->q_dim;
	kvb = sizeof(float) * (size_t)max_tokens * g->kv_dim;
	ib = sizeof(int32_t) * ((size_t)max_seqs + 1);
	ret = kvrt_gpu_plan_create(g->gpu, max_seqs, max_tokens, &g->plan);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, qb, &g->d_q);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, qb, &g->d_out);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, kvb, &g->d_k);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, kvb, &g->d_v);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, sizeof(int64_t) * max_tokens, &g->d_slots);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, ib, (void **)&g->d_q_indptr);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, ib, (void **)&g->d_blk_indptr);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, sizeof(int32_t) * max_seqs, (void **)&g->d_seq_lens);
	if (!ret)
		ret = kvrt_gpu_alloc(g->gpu, sizeof(int32_t) * (size_t)blk_cap,
				     (void **)&g->d_blk_indices);
	if (!ret && check) {
		g->ref = malloc(qb);
		if (!g->ref)
			ret = -ENOMEM;
		else
			ret = kvrt_workers_create(ap->num_threads ? ap->num_threads : 1,
						  &g->workers);
	}
	if (ret) {
		snprintf(err, errlen, "GPU buffers for %u tokens and %u sequences: %s", max_tokens,
			 max_seqs, strerror(-ret));
		devgpu_close(g);
	}
	return ret;
}

void devgpu_close(struct devgpu *g)
{
	if (!g->gpu)
		return;
	devgpu_free_scratch(g);
	kvrt_gpu_plan_destroy(g->plan);
	kvrt_gpu_close(g->gpu);
	kvrt_workers_destroy(g->workers);
	free(g->shadow);
	free(g->ref);
	memset(g, 0, sizeof(*g));
}

int devgpu_alloc_cache(struct devgpu *g, uint64_t bytes, void **dptr)
{
	const size_t chunk = 8u << 20;
	void *zeros;
	uint64_t off;
	int ret;

	ret = kvrt_gpu_alloc(g->gpu, bytes, dptr);
	if (ret)
		return ret;
	/* zeroed, as the host cache is: unread slots stay defined */
	zeros = calloc(1, chunk);
	if (!zeros) {
		kvrt_gpu_free(g->gpu, *dptr);
		return -ENOMEM;
	}
	for (off = 0, ret = 0; off < bytes && !ret; off += chunk)
		ret = kvrt_gpu_memcpy(g->gpu, (char *)*dptr + off, zeros,
				      bytes - off < chunk ? bytes - off : chunk);
	free(zeros);
	if (!ret && g->check) {
		g->shadow = calloc(1, bytes);
		g->cache_bytes = bytes;
		if (!g->shadow)
			ret = -ENOMEM;
	}
	if (ret) {
		kvrt_gpu_free(g->gpu, *dptr);
		*dptr = NULL;
	}
	return ret;
}

void devgpu_free(struct devgpu *g, void *dptr)
{
	if (g->gpu && dptr)
		kvrt_gpu_free(g->gpu, dptr);
}

static int upload(struct devgpu *g, void *d, const void *h, size_t bytes)
{
	g->st.up_bytes += bytes;
	return bytes ? kvrt_gpu_memcpy(g->gpu, d, h, bytes) : 0;
}

int devgpu_step(struct devgpu *g, const struct kvrt_layout *l, const struct fwd_batch *b)
{
	uint32_t nb = (uint32_t)b->blk_indptr[b->n_seqs];
	size_t ib = sizeof(int32_t) * ((size_t)b->n_seqs + 1);
	int ret;

	if (b->n_tokens > g->max_tokens || b->n_seqs > g->max_seqs || nb > g->blk_cap)
		return -E2BIG;
	/* the previous step's last run has finished: its output came down synchronously */
	ret = kvrt_gpu_plan_prefill(g->plan, &g->ap, l, b->n_seqs, b->q_indptr, b->seq_lens);
	if (!ret)
		ret = upload(g, g->d_slots, b->slots, sizeof(int64_t) * b->n_tokens);
	if (!ret)
		ret = upload(g, g->d_q_indptr, b->q_indptr, ib);
	if (!ret)
		ret = upload(g, g->d_blk_indptr, b->blk_indptr, ib);
	if (!ret)
		ret = upload(g, g->d_seq_lens, b->seq_lens, sizeof(int32_t) * b->n_seqs);
	if (!ret)
		ret = upload(g, g->d_blk_indices, b->blk_indices, sizeof(int32_t) * nb);
	g->st.steps += !ret;
	return ret;
}

/* ---- the check --------------------------------------------------------------------- */

static double f16_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(m + 1024, e - 25);

	return h & 0x8000 ? -v : v;
}

static double kv_value(const unsigned char *p, enum kvrt_dtype dt)
{
	uint16_t h;
	uint32_t w;
	float f;

	switch (dt) {
	case KVRT_DTYPE_F16:
		memcpy(&h, p, 2);
		return f16_value(h);
	case KVRT_DTYPE_BF16:
		memcpy(&h, p, 2);
		w = (uint32_t)h << 16;
		memcpy(&f, &w, 4);
		return f;
	default:
		memcpy(&f, p, 4);
		return f;
	}
}

static size_t dtype_bytes(enum kvrt_dtype dt)
{
	return dt == KVRT_DTYPE_F32 ? 4 : 2;
}

/* Largest |k| (L2 over the head) and |v| of sequence s's K/V head h. */
static void seq_scales(const struct devgpu *g, const struct kvrt_kv_cache *kv,
		       const struct fwd_batch *b, uint32_t s, uint32_t h, double *knorm,
		       double *vmax)
{
	const struct kvrt_layout *l = kv->layout;
	const unsigned char *layer = (const unsigned char *)g->shadow +
				     (size_t)kv->layer * l->layer_stride;
	size_t eb = dtype_bytes(l->kv_dtype);
	int32_t n = b->seq_lens[s], t;

	*knorm = 0;
	*vmax = 0;
	for (t = 0; t < n; t++) {
		int32_t blk = b->blk_indices[b->blk_indptr[s] + t / (int32_t)l->block_tokens];
		size_t off = (size_t)blk * l->block_stride +
			     (size_t)(t % (int32_t)l->block_tokens) * l->token_stride +
			     (size_t)h * l->head_stride;
		double kk = 0, x;
		uint32_t d;

		for (d = 0; d < l->head_dim; d++) {
			x = kv_value(layer + off + d * eb, l->kv_dtype);
			kk += x * x;
			x = fabs(kv_value(layer + l->kv_stride + off + d * eb, l->kv_dtype));
			if (x > *vmax)
				*vmax = x;
		}
		if (sqrt(kk) > *knorm)
			*knorm = sqrt(kk);
	}
}

static int check_call(struct devgpu *g, const struct kvrt_kv_cache *kv, const float *q,
		      const struct fwd_batch *b, const float *out)
{
	const struct kvrt_layout *l = kv->layout;
	uint32_t hd = l->head_dim, nq = g->ap.num_q_heads, group = nq / l->num_kv_heads;
	double u_o = ldexp(1, -24), u_p = l->kv_dtype == KVRT_DTYPE_F16 ? ldexp(1, -11) :
							       ldexp(1, -8);
	struct kvrt_kv_cache hk = *kv;
	struct kvrt_block_table t = { b->n_seqs, b->blk_indptr, b->blk_indices, b->seq_lens };
	struct kvrt_attn_params ap = g->ap;
	size_t lo = (size_t)kv->layer * l->layer_stride;
	uint32_t s, h, d;
	int32_t r;
	int ret;

	/* the layer's K/V as the GPU holds them (for the check only) */
	ret = kvrt_gpu_memcpy(g->gpu, (char *)g->shadow + lo, (const char *)kv->base + lo,
			      (size_t)l->layer_stride);
	if (ret)
		return ret;
	hk.base = g->shadow;
	ap.impl = KVRT_ATTN_FAST;
	ret = kvrt_attn_prefill_on(g->workers, &ap, q, b->q_indptr, &hk, &t, g->ref);
	if (ret)
		return ret;
	for (s = 0; s < b->n_seqs; s++) {
		for (h = 0; h < l->num_kv_heads; h++) {
			double knorm, vscale;

			seq_scales(g, kv, b, s, h, &knorm, &vscale);
			if (vscale == 0)
				vscale = 1;	/* all-zero V: any error shows against 1 */
			for (r = b->q_indptr[s]; r < b->q_indptr[s + 1]; r++) {
				int32_t keys = b->seq_lens[s] - (b->q_indptr[s + 1] - r) + 1;
				uint32_t qh;

				for (qh = h * group; qh < (h + 1) * group; qh++) {
					size_t row = ((size_t)r * nq + qh) * hd;
					double qn = 0, S, ds, tol, worst = 0;

					for (d = 0; d < hd; d++)
						qn += (double)q[row + d] * q[row + d];
					S = g->ap.sm_scale * sqrt(qn) * knorm;
					ds = (hd + 8) * ldexp(1, -24) * S + ldexp(1, -21);
					tol = u_o + u_p + expm1(2 * ds) + 8 * sqrt(keys) * ldexp(1, -24) +
					      ldexp(1, -18) + 1e-5 + u_o;
					for (d = 0; d < hd; d++) {
						double x = fabs((double)out[row + d] - g->ref[row + d]) /
							   vscale / tol;

						if (isnan(x))
							x = INFINITY;
						if (x > worst)
							worst = x;
					}
					g->st.rows_checked++;
					if (worst > g->st.worst) {
						g->st.worst = worst;
						g->st.worst_call = g->st.calls;
					}
				}
			}
		}
	}
	return 0;
}

int devgpu_layer(struct devgpu *g, const struct kvrt_kv_cache *kv, const float *k,
		 const float *v, const float *q, const struct fwd_batch *b, float *out)
{
	struct kvrt_block_table t = { b->n_seqs, g->d_blk_indptr, g->d_blk_indices, g->d_seq_lens };
	size_t T = b->n_tokens, qb = sizeof(float) * T * g->q_dim;
	int ret;

	ret = upload(g, g->d_k, k, sizeof(float) * T * g->kv_dim);
	if (!ret)
		ret = upload(g, g->d_v, v, sizeof(float) * T * g->kv_dim);
	if (!ret)
		ret = kvrt_gpu_append_kv(g->gpu, kv, g->d_k, g->d_v, KVRT_DTYPE_F32, g->d_slots,
					 b->n_tokens, NULL);
	if (!ret)
		ret = upload(g, g->d_q, q, qb);
	if (!ret)
		ret = kvrt_gpu_attn_prefill(g->plan, g->d_q, g->d_q_indptr, kv, &t, g->d_out, NULL);
	if (!ret)
		ret = kvrt_gpu_memcpy(g->gpu, out, g->d_out, qb);
	if (ret)
		return ret;
	if (g->inject_fault) {
		/* as a kernel bug would: the output is used, and the check must see it */
		g->inject_fault = 0;
		out[0] += (float)(0.01 * fabs(out[0]) + 0.01);
	}
	g->st.down_bytes += qb;
	g->st.calls++;
	return g->check ? check_call(g, kv, q, b, out) : 0;
}
