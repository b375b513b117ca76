/* SPDX-License-Identifier: GPL-2.0 */
/*
 * model.h: a Llama-architecture decoder (RMSNorm, RoPE, grouped-query
 * attention through libkvrt's paged attention, SwiGLU MLP) over a batch of
 * tokens from many sequences at once.
 */
#ifndef KVRT_DEMO_MODEL_H
#define KVRT_DEMO_MODEL_H

#include <stdint.h>

#include <kvrt.h>

#include "checkpoint.h"

#define MODEL_RMS_EPS 1e-5f

struct tpool;
struct devgpu;

/*
 * Which libkvrt call computes the attention of a decoding sequence.
 * kvrt_attn_decode folds the keys in other tiles than kvrt_attn_prefill,
 * so its rows can differ in the last bit from a recomputation by prefill;
 * the default keeps every row on the prefill kernel, which makes a cached
 * run reproduce a full recomputation exactly.
 */
enum decode_kernel {
	DECODE_WITH_PREFILL = 0,	/* kvrt_attn_prefill, a 1-token chunk */
	DECODE_WITH_DECODE = 1,		/* kvrt_attn_decode */
};

struct model {
	const struct checkpoint *ck;
	struct model_config cfg;
	uint32_t head_dim, kv_dim, max_tokens, threads;
	enum decode_kernel decode_kernel;
	float *rope_cos, *rope_sin;	/* [seq_len][head_dim / 2] */
	struct tpool *pool;
	struct kvrt_workers *attn_workers;	/* libkvrt's kept threads for attention */
	struct devgpu *gpu;		/* set: the KV cache and attention are on the GPU */
	/* scratch for max_tokens rows */
	float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *xo;
	int32_t *tmp_i32;		/* rebased CSR arrays for split attention */
	void *scratch;			/* rope tables and scratch: one allocation */
};

/*
 * One step's batch.  Sequences are contiguous runs of tokens (q_indptr);
 * the first n_decode sequences have one token each and are decoding.
 * Every token's K/V goes to its device cache slot (block * block_tokens +
 * offset); the block table lists each sequence's device blocks and its
 * length including the new tokens.  Logits are computed only for the rows
 * in out_rows.
 */
struct fwd_batch {
	uint32_t n_tokens;
	const uint32_t *tokens;
	const int32_t *pos;
	const int64_t *slots;
	uint32_t n_seqs, n_decode;
	const int32_t *q_indptr;	/* [n_seqs + 1] */
	const int32_t *blk_indptr;	/* [n_seqs + 1] */
	const int32_t *blk_indices;
	const int32_t *seq_lens;	/* [n_seqs] */
	uint32_t n_out;
	const uint32_t *out_rows;
	float *logits;			/* [n_out][vocab] */
};

int model_init(struct model *m, const struct checkpoint *ck, uint32_t max_tokens,
	       uint32_t threads, enum decode_kernel dk);
void model_fini(struct model *m);

/* 0 or the negative errno of the libkvrt call that failed. */
int model_forward(struct model *m, const struct kvrt_layout *cache_layout, void *cache_base,
		  const struct fwd_batch *b);

/* Building blocks, exported for the unit tests. */
void rmsnorm(float *out, const float *x, const float *w, uint32_t n);
void rope_tables(float *cos_t, float *sin_t, uint32_t seq_len, uint32_t head_dim);
/* Rotate the pairs (2i, 2i + 1) of each head of vec[0..n) for position pos. */
void rope_apply(float *vec, uint32_t n, uint32_t head_dim, const float *cos_row,
		const float *sin_row);
void swiglu(float *gate, const float *up, uint32_t n);
/* y[t][o] = sum_i x[t][i] w[o][i]; pool may be NULL.  Each y element is
 * computed in the same order whatever T and the thread count. */
void matmul(struct tpool *pool, float *y, const float *x, const float *w, uint32_t T,
	    uint32_t N, uint32_t K);

struct tpool *tpool_create(uint32_t threads);
void tpool_destroy(struct tpool *p);

/* Greedy sampling: the largest logit, the lowest id on ties. */
uint32_t argmax(const float *logits, uint32_t n);

#endif
