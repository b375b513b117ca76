/* SPDX-License-Identifier: MIT */
/*
 * attn_internal.h: what the CPU paged-attention files share.
 *
 *   attn_api.c            kvrt_attn_decode/prefill: validation, then dispatch
 *   attn_ref.c            the reference implementation
 *   attn_fast.c           the fast one: ISA choice, work items, threads
 *   attn_simd_*.c         the fast kernel (attn_kern.h) built per ISA
 *   dtype.c               element conversions
 *
 * Semantics shared by both implementations, per query row (a query token j
 * of sequence s and a query head h, at position pos = seq_len - q_len + j):
 *
 *   kv head   h / (num_q_heads / num_kv_heads)
 *   keys      positions p with lo <= p <= pos, lo = 0 or, with a window,
 *             max(0, pos - window_left)
 *   logit     x = sm_scale * (q . k_p); with a soft-cap c > 0,
 *             x = c * tanh(x / c)
 *   output    sum_p softmax(x)_p * v_p
 *
 * K and V elements are dequantised as element * scale for fp8.  Every row
 * has at least one key (its own position), so the softmax is never empty.
 */
#ifndef KVRT_ATTN_INTERNAL_H
#define KVRT_ATTN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvrt.h"

/* A validated call, flattened: pointers already offset to the layer. */
struct attn_job {
	uint32_t num_seqs;
	uint32_t num_q_heads;
	uint32_t num_kv_heads;
	uint32_t group;		/* num_q_heads / num_kv_heads */
	uint32_t head_dim;
	uint32_t block_tokens;
	enum kvrt_dtype q_dtype, o_dtype, kv_dtype;
	size_t q_esize, o_esize, kv_esize;

	const uint8_t *k_base;	/* cache base + layer and kv offsets */
	const uint8_t *v_base;
	int64_t block_stride;	/* bytes */
	int64_t token_stride;
	int64_t head_stride;
	const float *k_scales;	/* fp8: scales + layer and kv offsets; else NULL */
	const float *v_scales;
	int64_t scale_block_stride;	/* floats */

	float sm_scale;
	float softcap;		/* 0: none */
	int32_t window_left;	/* -1: none */
	uint32_t num_threads;	/* as asked: 0 means online CPUs */

	const int32_t *indptr;
	const int32_t *indices;
	const int32_t *seq_lens;
	const int32_t *q_indptr;	/* NULL for decode: one query per sequence */

	const void *q;		/* [q tokens][num_q_heads][head_dim] */
	void *out;		/* same shape */
};

/* First query token (row of q) of sequence s and how many it has. */
static inline int64_t attn_q_start(const struct attn_job *job, uint32_t s)
{
	return job->q_indptr ? job->q_indptr[s] : (int64_t)s;
}

static inline int64_t attn_q_len(const struct attn_job *job, uint32_t s)
{
	return job->q_indptr ? (int64_t)job->q_indptr[s + 1] - job->q_indptr[s] : 1;
}

/* Lowest key position that query position pos may attend to. */
static inline int64_t attn_key_lo(const struct attn_job *job, int64_t pos)
{
	int64_t lo;

	if (job->window_left < 0)
		return 0;
	lo = pos - job->window_left;
	return lo > 0 ? lo : 0;
}

/* Offset in bytes of K or V of sequence s, position p, kv head h. */
static inline int64_t attn_kv_offset(const struct attn_job *job, uint32_t s, int64_t p,
				     uint32_t h)
{
	int64_t blk = job->indices[job->indptr[s] + p / job->block_tokens];

	return blk * job->block_stride + (p % job->block_tokens) * job->token_stride +
	       (int64_t)h * job->head_stride;
}

/* Scale of K (kv = 0) or V of the block holding position p, or 1. */
static inline float attn_kv_scale(const struct attn_job *job, int kv, uint32_t s, int64_t p,
				  uint32_t h)
{
	const float *sc = kv ? job->v_scales : job->k_scales;
	int64_t blk;

	if (!sc)
		return 1.0f;
	blk = job->indices[job->indptr[s] + p / job->block_tokens];
	return sc[blk * job->scale_block_stride + h];
}

int kvrt_attn_ref_run(const struct attn_job *job);
struct kvrt_workers;
/* workers: the kept threads to run on, NULL to create them for this call */
int kvrt_attn_fast_run(const struct attn_job *job, struct kvrt_workers *workers);

/* ---- the fast kernel, one build per ISA ------------------------------------ */

/*
 * A unit of fast-path work: query tokens [j0, j1) of sequence seq, kv heads
 * [kv_head, kv_head + kv_heads).
 */
struct attn_item {
	uint32_t seq;
	uint32_t kv_head, kv_heads;
	uint32_t j0, j1;
	uint64_t cost;		/* for ordering: rows times keys */
};

/* How many tiles ahead of the one computing the fast kernel prefetches. */
#ifndef ATTN_PF_TILES
#define ATTN_PF_TILES 1
#endif

/*
 * Per-thread scratch for the fast kernel, laid out by ws_layout() in
 * attn_fast.c: every array is 64-byte aligned, rows are padded to a
 * multiple of 4 and dims to dpad (a multiple of the widest vector).
 */
struct attn_ws {
	uint32_t dpad;		/* head_dim rounded up to 16 */
	uint32_t tile;		/* keys per tile, a multiple of 16 */
	uint32_t max_rows;	/* heads per item x rows per head (a multiple of 4) */
	float *q;		/* [max_rows][dpad], pre-scaled by sm_scale */
	uint16_t *qh;		/* [max_rows][dpad] bf16 q, unscaled (vdpbf16ps kernel) */
	float *acc;		/* [max_rows rounded up to 16][dpad] */
	float *m;		/* [same] running max */
	float *l;		/* [same] running sum */
	float *k;		/* [tile][dpad] staged K (staged mode) */
	float *v;		/* [tile][dpad] staged V */
	float *s;		/* [max_rows][tile] logits, then probabilities;
				 * decode: [tile][rows rounded up to 16] */
	int64_t *lo, *hi;	/* [max_rows] key range per row */
	/* [ATTN_PF_TILES + 1][tile]: this tile's and the prefetched ones' */
	const uint8_t **kp;	/* K row of each key, at the item's first head */
	const uint8_t **vp;	/* V row of each key */
	int64_t *blk;		/* block of each key */
	float *ks, *vs;		/* [heads][tile] fp8 scales of each key and head */
	const uint8_t **skp;	/* [tile] rows of ws->k (staged mode) */
	const uint8_t **svp;	/* [tile] rows of ws->v */
};

typedef void (*attn_kern_fn)(const struct attn_job *job, struct attn_ws *ws,
			     const struct attn_item *item);

void kvrt_attn_kern_generic(const struct attn_job *job, struct attn_ws *ws,
			    const struct attn_item *item);
#if defined(__x86_64__)
void kvrt_attn_kern_avx2(const struct attn_job *job, struct attn_ws *ws,
			 const struct attn_item *item);
void kvrt_attn_kern_avx512(const struct attn_job *job, struct attn_ws *ws,
			   const struct attn_item *item);
void kvrt_attn_kern_avx512bf16(const struct attn_job *job, struct attn_ws *ws,
			       const struct attn_item *item);
#endif

#endif /* KVRT_ATTN_INTERNAL_H */
