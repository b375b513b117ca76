// SPDX-License-Identifier: MIT
/*
 * attn_api.c: kvrt_attn_decode() and kvrt_attn_prefill(), and their _on
 * variants (on kept worker threads).
 *
 * Everything the call is given is checked before any work is done, so a
 * call either fails (-EINVAL, -ERANGE) having written nothing, or computes
 * every output row.  The checks, in order:
 *
 *   - no NULL pointer among params, q, out, kv, kv->layout, kv->base, table
 *     and the table's arrays (and q_indptr for prefill);
 *   - the layout: non-zero sizes, a known kv dtype, kv->layer < num_layers,
 *     kv->scales non-NULL exactly when the kv dtype is fp8;
 *   - the params: num_q_heads a non-zero multiple of num_kv_heads, q and out
 *     dtypes f32, f16 or bf16, a known impl, a finite sm_scale, a finite
 *     logit_softcap >= 0, window_left >= -1;
 *   - the table: indptr[0] == 0 and non-decreasing, every index in
 *     [0, num_blocks), 1 <= seq_lens[s] <= blocks of s * block_tokens;
 *   - prefill: q_indptr[0] == 0, non-decreasing, each chunk no longer than
 *     its sequence (an empty chunk is allowed and computes nothing).
 *   - the table's blocks keep to the bounds rule (kvrt.h): -ERANGE.
 *
 * A call with num_seqs == 0 checks its pointers and returns 0.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "kv/dtype.h"
#include "attn_internal.h"

static int qo_dtype_ok(enum kvrt_dtype d)
{
	return d == KVRT_DTYPE_F32 || d == KVRT_DTYPE_F16 || d == KVRT_DTYPE_BF16;
}

static int check_table(const struct kvrt_layout *lo, const struct kvrt_block_table *t)
{
	uint32_t s;
	int32_t i;

	if (!t->indptr || !t->indices || !t->seq_lens)
		return -EINVAL;
	if (t->indptr[0] != 0)
		return -EINVAL;
	for (s = 0; s < t->num_seqs; s++) {
		int64_t nblk = (int64_t)t->indptr[s + 1] - t->indptr[s];

		if (nblk < 0)
			return -EINVAL;
		if (t->seq_lens[s] < 1 || t->seq_lens[s] > nblk * lo->block_tokens)
			return -EINVAL;
	}
	for (i = 0; i < t->indptr[t->num_seqs]; i++)
		if (t->indices[i] < 0 || (uint32_t)t->indices[i] >= lo->num_blocks)
			return -EINVAL;
	return 0;
}

static int64_t table_block(const void *indices, uint32_t i)
{
	return ((const int32_t *)indices)[i];
}

static int check_q_indptr(const struct kvrt_block_table *t, const int32_t *q_indptr)
{
	uint32_t s;

	if (q_indptr[0] != 0)
		return -EINVAL;
	for (s = 0; s < t->num_seqs; s++) {
		int64_t n = (int64_t)q_indptr[s + 1] - q_indptr[s];

		if (n < 0 || n > t->seq_lens[s])
			return -EINVAL;
	}
	return 0;
}

static int build_job(struct attn_job *job, const struct kvrt_attn_params *p, const void *q,
		     const int32_t *q_indptr, const struct kvrt_kv_cache *kv,
		     const struct kvrt_block_table *t, void *out)
{
	const struct kvrt_layout *lo;
	int64_t scale_off;
	int ret;

	if (!p || !q || !kv || !kv->layout || !kv->base || !t || !out)
		return -EINVAL;
	lo = kv->layout;
	if (!lo->num_layers || !lo->num_kv_heads || !lo->head_dim || !lo->block_tokens ||
	    !lo->num_blocks || !kvrt_dtype_size(lo->kv_dtype) || kv->layer >= lo->num_layers)
		return -EINVAL;
	if ((lo->kv_dtype == KVRT_DTYPE_FP8_E4M3) != (kv->scales != NULL))
		return -EINVAL;
	if (!p->num_q_heads || p->num_q_heads % lo->num_kv_heads)
		return -EINVAL;
	if (!qo_dtype_ok(p->q_dtype) || !qo_dtype_ok(p->o_dtype))
		return -EINVAL;
	if (p->impl != KVRT_ATTN_FAST && p->impl != KVRT_ATTN_REFERENCE)
		return -EINVAL;
	if (!isfinite(p->sm_scale) || !isfinite(p->logit_softcap) || p->logit_softcap < 0 ||
	    p->window_left < -1)
		return -EINVAL;
	ret = check_table(lo, t);
	if (ret)
		return ret;
	/* check_table() made indptr[num_seqs] >= 0 and every index < num_blocks. */
	ret = kvrt_bounds_check(lo, kv->base, kv->scales, (uint32_t)t->indptr[t->num_seqs],
				table_block, t->indices);
	if (ret)
		return ret;
	if (q_indptr) {
		ret = check_q_indptr(t, q_indptr);
		if (ret)
			return ret;
	}

	*job = (struct attn_job){
		.num_seqs = t->num_seqs,
		.num_q_heads = p->num_q_heads,
		.num_kv_heads = lo->num_kv_heads,
		.group = p->num_q_heads / lo->num_kv_heads,
		.head_dim = lo->head_dim,
		.block_tokens = lo->block_tokens,
		.q_dtype = p->q_dtype,
		.o_dtype = p->o_dtype,
		.kv_dtype = lo->kv_dtype,
		.q_esize = kvrt_dtype_size(p->q_dtype),
		.o_esize = kvrt_dtype_size(p->o_dtype),
		.kv_esize = kvrt_dtype_size(lo->kv_dtype),
		.k_base = (const uint8_t *)kv->base + (int64_t)kv->layer * lo->layer_stride,
		.v_base = (const uint8_t *)kv->base + (int64_t)kv->layer * lo->layer_stride +
			  lo->kv_stride,
		.block_stride = lo->block_stride,
		.token_stride = lo->token_stride,
		.head_stride = lo->head_stride,
		.scale_block_stride = lo->scale_block_stride,
		.sm_scale = p->sm_scale,
		.softcap = p->logit_softcap,
		.window_left = p->window_left,
		.num_threads = p->num_threads,
		.indptr = t->indptr,
		.indices = t->indices,
		.seq_lens = t->seq_lens,
		.q_indptr = q_indptr,
		.q = q,
		.out = out,
	};
	if (kv->scales) {
		scale_off = (int64_t)kv->layer * lo->scale_layer_stride;
		job->k_scales = kv->scales + scale_off;
		job->v_scales = kv->scales + scale_off + lo->scale_kv_stride;
	}
	return 0;
}

static int run(const struct kvrt_attn_params *params, const struct attn_job *job,
	       struct kvrt_workers *workers)
{
	if (!job->num_seqs)
		return 0;
	if (params->impl == KVRT_ATTN_REFERENCE)
		return kvrt_attn_ref_run(job);
	return kvrt_attn_fast_run(job, workers);
}

static int decode(struct kvrt_workers *workers, const struct kvrt_attn_params *params,
		  const void *q, const struct kvrt_kv_cache *kv,
		  const struct kvrt_block_table *table, void *out)
{
	struct attn_job job;
	int ret;

	ret = build_job(&job, params, q, NULL, kv, table, out);
	if (ret)
		return ret;
	return run(params, &job, workers);
}

static int prefill(struct kvrt_workers *workers, const struct kvrt_attn_params *params,
		   const void *q, const int32_t *q_indptr, const struct kvrt_kv_cache *kv,
		   const struct kvrt_block_table *table, void *out)
{
	struct attn_job job;
	int ret;

	if (!q_indptr)
		return -EINVAL;
	ret = build_job(&job, params, q, q_indptr, kv, table, out);
	if (ret)
		return ret;
	return run(params, &job, workers);
}

int kvrt_attn_decode(const struct kvrt_attn_params *params, const void *q,
		     const struct kvrt_kv_cache *kv, const struct kvrt_block_table *table,
		     void *out)
{
	return decode(NULL, params, q, kv, table, out);
}

int kvrt_attn_prefill(const struct kvrt_attn_params *params, const void *q,
		      const int32_t *q_indptr, const struct kvrt_kv_cache *kv,
		      const struct kvrt_block_table *table, void *out)
{
	return prefill(NULL, params, q, q_indptr, kv, table, out);
}

int kvrt_attn_decode_on(struct kvrt_workers *workers, const struct kvrt_attn_params *params,
			const void *q, const struct kvrt_kv_cache *kv,
			const struct kvrt_block_table *table, void *out)
{
	if (!workers)
		return -EINVAL;
	return decode(workers, params, q, kv, table, out);
}

int kvrt_attn_prefill_on(struct kvrt_workers *workers, const struct kvrt_attn_params *params,
			 const void *q, const int32_t *q_indptr,
			 const struct kvrt_kv_cache *kv, const struct kvrt_block_table *table,
			 void *out)
{
	if (!workers)
		return -EINVAL;
	return prefill(workers, params, q, q_indptr, kv, table, out);
}
