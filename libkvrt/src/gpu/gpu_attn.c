// SPDX-License-Identifier: MIT
/*
 * gpu_attn.c: GPU attention (plan on the host, run on a stream).
 *
 * A plan's device workspace is one allocation:
 *   [hdr][work: work_cap][merge: merge_cap][partial_o][partial_ml]
 *   [merge_done: merge_cap]
 * sized at the plan's first kvrt_gpu_plan_decode/_prefill for its head
 * counts.  Runs launch the attention kernel once (prefill's grid:
 * min(work_cap, 65535)): the kernels read the counts from hdr, so a run
 * captured in a CUDA graph stays right after any later plan.  A split
 * decode is merged inside that launch, by the CTA that finishes a merge's
 * last partial (merge_done counts them and goes back to zeros), so no
 * second launch is needed whether the plan splits or not.  A decode
 * grid is the plan's tasks but never less than the CTAs the GPU holds at
 * once (sm_count * KVRT_PLAN_CTAS_PER_SM): a graph keeps the grid of its
 * capture, and the kernels stride, so a later, larger plan still runs
 * right and on every SM, only without the hardware's balancing past the
 * first wave.  Sizing to the tasks alone (32 CTAs for 1 x 1k) would leave
 * such a replay on a few SMs.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_plan.h"

#define PLAN_HEAD_DIM_MAX 256U

enum plan_kind { PLAN_NONE, PLAN_DECODE, PLAN_PREFILL };

struct kvrt_gpu_plan {
	struct kvrt_gpu *g;
	uint32_t max_seqs, max_q_tokens;

	/* Capacity, fixed at the first plan. */
	uint32_t items_per_seq;		/* KV heads x head slices */
	uint32_t work_cap, merge_cap, partial_cap;
	CUdeviceptr dev;
	size_t off_work, off_merge, off_po, off_pml, off_done;
	struct kvrt_gk_work *work;	/* host staging */
	struct kvrt_gk_merge *merge;

	/* The last plan. */
	enum plan_kind kind;
	bool wide;			/* a task of more than 4 query heads */
	struct kvrt_attn_params params;
	struct kvrt_layout layout;
	uint32_t num_seqs;
	struct gpu_plan_out out;
};

/* What the GPU kernels take, beyond what the CPU path checks. */
static int check_params(const struct kvrt_attn_params *p, const struct kvrt_layout *l)
{
	if (!p || !l)
		return -EINVAL;
	if (!l->num_kv_heads || !p->num_q_heads || p->num_q_heads % l->num_kv_heads)
		return -EINVAL;
	if (!gpu_qo_dtype_ok(p->q_dtype) || !gpu_qo_dtype_ok(p->o_dtype))
		return -EINVAL;
	if (!isfinite(p->sm_scale) || !isfinite(p->logit_softcap) || p->logit_softcap < 0 ||
	    p->window_left < -1)
		return -EINVAL;
	if (gpu_hd_index(l->head_dim) < 0 || gpu_kv_index(l->kv_dtype) < 0 ||
	    !l->block_tokens || l->block_tokens > 128 || !l->num_layers || !l->num_blocks)
		return -EINVAL;
	return 0;
}

int kvrt_gpu_plan_create(struct kvrt_gpu *g, uint32_t max_seqs, uint32_t max_q_tokens,
			 struct kvrt_gpu_plan **out)
{
	struct kvrt_gpu_plan *p;

	if (out)
		*out = NULL;
	if (!g || !out || !max_seqs || max_q_tokens > INT32_MAX || max_seqs > INT32_MAX)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->g = g;
	p->max_seqs = max_seqs;
	p->max_q_tokens = max_q_tokens;
	*out = p;
	return 0;
}

void kvrt_gpu_plan_destroy(struct kvrt_gpu_plan *p)
{
	if (!p)
		return;
	if (p->dev && !gpu_enter(p->g)) {
		p->g->cu.MemFree(p->dev);
		gpu_leave(p->g);
	}
	free(p->work);
	free(p->merge);
	free(p);
}

static size_t align_up(size_t v)
{
	return (v + 255) & ~(size_t)255;
}

/* Size the workspace for these head counts (first plan), or check them. */
static int plan_size(struct kvrt_gpu_plan *p, const struct gpu_plan_shape *s)
{
	uint64_t ipq = (uint64_t)s->num_kv_heads * gpu_plan_slices(s);
	uint64_t target = (uint64_t)s->sm_count * KVRT_PLAN_CTAS_PER_SM;
	uint64_t dec, pre, work, merge, partial, bytes;
	int ret;

	if (p->dev)
		return ipq <= p->items_per_seq ? 0 : -E2BIG;
	/* A split decode makes at most target + 2 tasks per (sequence, slice). */
	dec = p->max_seqs * ipq;
	if (dec < 3 * target)
		dec = 3 * target;
	pre = ((uint64_t)p->max_q_tokens / KVRT_GK_PREFILL_QTILE + p->max_seqs) * ipq;
	work = dec > pre ? dec : pre;
	/* a wave split (gpu_plan_wave_split) cuts up to partial / 2 ranges */
	partial = 3 * target;
	merge = p->max_seqs * ipq < partial / 2 ? p->max_seqs * ipq : partial / 2;
	if (work > INT32_MAX || partial > INT32_MAX)
		return -E2BIG;
	p->off_work = align_up(sizeof(struct kvrt_gk_plan_hdr));
	p->off_merge = align_up(p->off_work + work * sizeof(struct kvrt_gk_work));
	p->off_po = align_up(p->off_merge + merge * sizeof(struct kvrt_gk_merge));
	p->off_pml = align_up(p->off_po + partial * KVRT_GK_MAX_GROUP * PLAN_HEAD_DIM_MAX *
					      sizeof(float));
	p->off_done = align_up(p->off_pml + partial * KVRT_GK_MAX_GROUP * 2 * sizeof(float));
	bytes = p->off_done + (merge ? merge : 1) * sizeof(uint32_t);
	p->work = calloc(work, sizeof(*p->work));
	/* also the zeros merge_done starts from */
	p->merge = calloc(merge ? merge : 1, sizeof(*p->merge));
	if (!p->work || !p->merge)
		goto out_nomem;
	ret = gpu_enter(p->g);
	if (ret)
		goto out_free;
	ret = gpu_check(p->g, p->g->cu.MemAlloc(&p->dev, bytes), "plan workspace");
	if (!ret) {
		ret = gpu_check(p->g, p->g->cu.MemcpyHtoD(p->dev + p->off_done, p->merge,
							  (merge ? merge : 1) * sizeof(uint32_t)),
				"plan workspace");
		if (ret) {
			p->g->cu.MemFree(p->dev);
			p->dev = 0;
		}
	}
	gpu_leave(p->g);
	if (ret)
		goto out_free;
	p->items_per_seq = (uint32_t)ipq;
	p->work_cap = (uint32_t)work;
	p->merge_cap = (uint32_t)merge;
	p->partial_cap = (uint32_t)partial;
	return 0;

out_nomem:
	ret = -ENOMEM;
out_free:
	free(p->work);
	free(p->merge);
	p->work = NULL;
	p->merge = NULL;
	p->dev = 0;
	return ret;
}

static int plan_upload(struct kvrt_gpu_plan *p)
{
	struct kvrt_gk_plan_hdr hdr = { p->out.num_work, p->out.num_merge };
	struct kvrt_gpu *g = p->g;
	int ret;

	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_check(g, g->cu.MemcpyHtoD(p->dev, &hdr, sizeof(hdr)), "plan upload");
	if (!ret && p->out.num_work)
		ret = gpu_check(g, g->cu.MemcpyHtoD(p->dev + p->off_work, p->work,
						    p->out.num_work * sizeof(*p->work)),
				"plan upload");
	if (!ret && p->out.num_merge)
		ret = gpu_check(g, g->cu.MemcpyHtoD(p->dev + p->off_merge, p->merge,
						    p->out.num_merge * sizeof(*p->merge)),
				"plan upload");
	gpu_leave(g);
	return ret;
}

static int plan_common(struct kvrt_gpu_plan *p, const struct kvrt_attn_params *params,
		       const struct kvrt_layout *layout, uint32_t num_seqs, const int32_t *seq_lens,
		       struct gpu_plan_shape *s)
{
	int ret;

	if (!p)
		return -EINVAL;
	p->kind = PLAN_NONE;
	ret = check_params(params, layout);
	if (ret)
		return ret;
	if (num_seqs && !seq_lens)
		return -EINVAL;
	if (num_seqs > p->max_seqs)
		return -E2BIG;
	*s = (struct gpu_plan_shape){
		.num_q_heads = params->num_q_heads,
		.num_kv_heads = layout->num_kv_heads,
		.block_tokens = layout->block_tokens,
		.window_left = params->window_left,
		.sm_count = p->g->info.sm_count,
	};
	ret = plan_size(p, s);
	if (ret)
		return ret;
	p->out = (struct gpu_plan_out){
		.work = p->work, .work_cap = p->work_cap,
		.merge = p->merge, .merge_cap = p->merge_cap,
		.partial_cap = p->partial_cap,
	};
	return 0;
}

static void plan_done(struct kvrt_gpu_plan *p, enum plan_kind kind,
		      const struct kvrt_attn_params *params, const struct kvrt_layout *layout,
		      uint32_t num_seqs)
{
	struct gpu_plan_shape s = {
		.num_q_heads = params->num_q_heads, .num_kv_heads = layout->num_kv_heads,
	};

	p->kind = kind;
	p->wide = gpu_plan_widest_slice(&s) > 4;
	p->params = *params;
	p->layout = *layout;
	p->num_seqs = num_seqs;
}

int kvrt_gpu_plan_decode(struct kvrt_gpu_plan *p, const struct kvrt_attn_params *params,
			 const struct kvrt_layout *layout, uint32_t num_seqs,
			 const int32_t *seq_lens)
{
	struct gpu_plan_shape s;
	int ret;

	ret = plan_common(p, params, layout, num_seqs, seq_lens, &s);
	if (!ret)
		ret = gpu_plan_decode(&s, num_seqs, seq_lens, &p->out);
	if (!ret)
		ret = plan_upload(p);
	if (!ret)
		plan_done(p, PLAN_DECODE, params, layout, num_seqs);
	return ret;
}

int kvrt_gpu_plan_prefill(struct kvrt_gpu_plan *p, const struct kvrt_attn_params *params,
			  const struct kvrt_layout *layout, uint32_t num_seqs,
			  const int32_t *q_indptr, const int32_t *seq_lens)
{
	struct gpu_plan_shape s;
	int ret;

	ret = plan_common(p, params, layout, num_seqs, seq_lens, &s);
	if (ret)
		return ret;
	if (!q_indptr)
		return -EINVAL;
	if ((uint32_t)q_indptr[num_seqs] > p->max_q_tokens)
		return -E2BIG;
	ret = gpu_plan_prefill(&s, num_seqs, q_indptr, seq_lens, &p->out);
	if (!ret)
		ret = plan_upload(p);
	if (!ret)
		plan_done(p, PLAN_PREFILL, params, layout, num_seqs);
	return ret;
}

static uint32_t grid_of(uint32_t cap)
{
	return cap < GPU_GRID_MAX ? cap : GPU_GRID_MAX;
}

/* The decode plan's tasks, at least one wave of resident CTAs (see the top). */
static uint32_t decode_grid(const struct kvrt_gpu_plan *p)
{
	uint64_t wave = (uint64_t)p->g->info.sm_count * KVRT_PLAN_CTAS_PER_SM;
	uint64_t n = p->out.num_work > wave ? p->out.num_work : wave;

	return grid_of(n < p->work_cap ? (uint32_t)n : p->work_cap);
}

int kvrt_gpu_plan_info(const struct kvrt_gpu_plan *p, struct kvrt_gpu_plan_info *info)
{
	if (!p || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	if (p->kind == PLAN_NONE)
		return 0;
	info->num_seqs = p->num_seqs;
	info->num_work = p->out.num_work;
	info->num_split = p->out.num_split;
	info->split_tokens = p->out.split_tokens;
	info->grid = p->kind == PLAN_DECODE ? decode_grid(p) : grid_of(p->work_cap);
	return 0;
}

static bool same_layout(const struct kvrt_layout *a, const struct kvrt_layout *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* Fill the kernel arguments from a run's pointers; -EINVAL if they do not fit the plan. */
static int attn_args(const struct kvrt_gpu_plan *p, enum plan_kind kind, const void *q,
		     const struct kvrt_kv_cache *kv, const struct kvrt_block_table *t, void *out,
		     struct kvrt_gk_attn_args *a)
{
	const struct kvrt_layout *l;
	struct gpu_layer_planes lp;
	bool fp8;

	if (!p || p->kind != kind || !q || !out || !kv || !kv->layout || !kv->base || !t)
		return -EINVAL;
	l = kv->layout;
	fp8 = l->kv_dtype == KVRT_DTYPE_FP8_E4M3;
	if (!same_layout(l, &p->layout) || kv->layer >= l->num_layers || fp8 != !!kv->scales)
		return -EINVAL;
	if (t->num_seqs != p->num_seqs ||
	    (t->num_seqs && (!t->indptr || !t->indices || !t->seq_lens)))
		return -EINVAL;
	lp = gpu_layer_planes(kv);
	*a = (struct kvrt_gk_attn_args){
		.q = (uintptr_t)q,
		.out = (uintptr_t)out,
		GPU_CACHE_ARGS(lp, l),
		.indices = (uintptr_t)t->indices,
		.indptr = (uintptr_t)t->indptr,
		.seq_lens = (uintptr_t)t->seq_lens,
		.work = p->dev + p->off_work,
		.hdr = p->dev,
		.partial_o = p->dev + p->off_po,
		.partial_ml = p->dev + p->off_pml,
		.num_q_heads = p->params.num_q_heads,
		.block_tokens = l->block_tokens,
		.sm_scale = p->params.sm_scale,
		.logit_softcap = p->params.logit_softcap,
		.window_left = p->params.window_left,
		.q_dtype = p->params.q_dtype,
		.o_dtype = p->params.o_dtype,
	};
	return 0;
}

int kvrt_gpu_attn_decode(struct kvrt_gpu_plan *p, const void *q, const struct kvrt_kv_cache *kv,
			 const struct kvrt_block_table *t, void *out, void *stream)
{
	struct kvrt_gk_attn_args a;
	struct kvrt_gpu *g;
	int ret, hd, kvi;

	ret = attn_args(p, PLAN_DECODE, q, kv, t, out, &a);
	if (ret)
		return ret;
	g = p->g;
	hd = gpu_hd_index(p->layout.head_dim);
	kvi = gpu_kv_index(p->layout.kv_dtype);
	a.merge = p->dev + p->off_merge;
	a.merge_done = p->dev + p->off_done;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_launch_smem(g, p->wide ? g->decode_g8[hd][kvi] : g->decode[hd][kvi],
			      decode_grid(p), KVRT_GK_DECODE_THREADS,
			      KVRT_GK_DECODE_SMEM(p->layout.head_dim), &a, (CUstream)stream,
			      "decode launch");
	gpu_leave(g);
	return ret;
}

int kvrt_gpu_attn_prefill(struct kvrt_gpu_plan *p, const void *q, const int32_t *q_indptr,
			  const struct kvrt_kv_cache *kv, const struct kvrt_block_table *t,
			  void *out, void *stream)
{
	struct kvrt_gk_attn_args a;
	struct kvrt_gpu *g;
	int ret;

	if (!q_indptr)
		return -EINVAL;
	ret = attn_args(p, PLAN_PREFILL, q, kv, t, out, &a);
	if (ret)
		return ret;
	a.q_indptr = (uintptr_t)q_indptr;
	g = p->g;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_launch(g, (g->prefill_simt ? g->prefill : g->prefill_tc)
				    [gpu_hd_index(p->layout.head_dim)][gpu_kv_index(p->layout.kv_dtype)],
			 grid_of(p->work_cap), KVRT_GK_PREFILL_THREADS, &a, (CUstream)stream,
			 "prefill launch");
	gpu_leave(g);
	return ret;
}
