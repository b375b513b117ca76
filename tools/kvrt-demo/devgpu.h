/* SPDX-License-Identifier: GPL-2.0 */
/*
 * devgpu.h: the demo's GPU side (--device gpu).  The device KV cache is GPU
 * memory; K/V are appended and attention runs there, through libkvrt's GPU
 * calls: one plan per step, one run per layer.  The model's dense math
 * stays on the CPU, so each layer's new K/V rows and queries go up and its
 * attention output comes down; cached K/V never pass through host memory
 * (offload and fetch are kvrt_gpu_copy_blocks against the registered pool).
 *
 * The check (on unless --no-gpu-check) holds every GPU attention call to
 * the CPU attention over a host copy of the layer, row by row, within the
 * tolerance devgpu.c derives.  The copy is for checking only.
 */
#ifndef KVRT_DEMO_DEVGPU_H
#define KVRT_DEMO_DEVGPU_H

#include <stdint.h>

#include <kvrt.h>

struct fwd_batch;

struct devgpu_stats {
	uint64_t steps, calls;		/* plans, attention runs */
	uint64_t rows_checked;		/* (token, q head) rows held to the tolerance */
	double worst;			/* largest row error in tolerances */
	uint64_t worst_call;		/* the call it was in (1-based) */
	uint64_t up_bytes, down_bytes;	/* activations moved per layer */
};

struct devgpu {
	struct kvrt_gpu *gpu;
	struct kvrt_gpu_plan *plan;
	struct kvrt_gpu_info info;
	struct kvrt_attn_params ap;
	uint32_t layers, max_tokens, max_seqs, q_dim, kv_dim, blk_cap;
	void *d_q, *d_k, *d_v, *d_out, *d_slots;
	int32_t *d_q_indptr, *d_blk_indptr, *d_blk_indices, *d_seq_lens;
	int check;
	int inject_fault;		/* test: move one output of the next call */
	void *shadow;			/* host copy of the cache (the check) */
	uint64_t cache_bytes;
	float *ref;			/* CPU attention of the same call */
	double *knorm, *vmax;		/* per layer: largest |k head| (L2), |v| appended */
	struct kvrt_workers *workers;	/* the model's, for the CPU side of the check */
	struct devgpu_stats st;
};

/*
 * Open GPU `device` for a model of these shapes; err gets a sentence.
 * ap: the attention parameters (q and out f32).  blk_cap: most block-table
 * entries in one step (the device cache's block count).
 */
int devgpu_open(struct devgpu *g, struct kvrt *k, int device, const struct kvrt_attn_params *ap,
		uint32_t layers, uint32_t kv_heads, uint32_t head_dim, uint32_t max_tokens,
		uint32_t max_seqs, uint32_t blk_cap, int check, char *err, size_t errlen);
void devgpu_close(struct devgpu *g);

/* Device memory for the KV cache, zeroed; freed by devgpu_free. */
int devgpu_alloc_cache(struct devgpu *g, uint64_t bytes, void **dptr);
void devgpu_free(struct devgpu *g, void *dptr);

/* A step: its batch arrays up, one plan for every layer. */
int devgpu_step(struct devgpu *g, const struct kvrt_layout *l, const struct fwd_batch *b);

/* A layer: append the step's K/V (f32 rows on the host), run attention of q
 * (host, f32) and bring the output down to out.  -EDOM: the check failed. */
int devgpu_layer(struct devgpu *g, const struct kvrt_kv_cache *kv, const float *k,
		 const float *v, const float *q, const struct fwd_batch *b, float *out);

#endif
