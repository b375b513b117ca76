// SPDX-License-Identifier: MIT
/*
 * gpu_append.c: kvrt_gpu_append_kv, new tokens' K and V written into their
 * slots of a GPU cache (and fp8 scales), one kernel launch per layer.
 */
#include <errno.h>

#include "gpu_internal.h"

int kvrt_gpu_append_kv(struct kvrt_gpu *g, const struct kvrt_kv_cache *kv, const void *k,
		       const void *v, enum kvrt_dtype src_dtype, const int64_t *slots,
		       uint32_t num_tokens, void *stream)
{
	struct kvrt_gk_append_args a;
	const struct kvrt_layout *l;
	struct gpu_layer_planes lp;
	uint64_t rows;
	uint32_t grid;
	bool fp8;
	int kvi, ret;

	if (!g || !kv || !kv->layout || !kv->base || !k || !v || !slots || !gpu_qo_dtype_ok(src_dtype))
		return -EINVAL;
	l = kv->layout;
	kvi = gpu_kv_index(l->kv_dtype);
	fp8 = l->kv_dtype == KVRT_DTYPE_FP8_E4M3;
	if (kvi < 0 || kv->layer >= l->num_layers || fp8 != !!kv->scales || !l->num_kv_heads ||
	    !l->head_dim || !l->block_tokens || l->head_dim > 1024)
		return -EINVAL;
	if (!num_tokens)
		return 0;
	lp = gpu_layer_planes(kv);
	a = (struct kvrt_gk_append_args){
		.k_src = (uintptr_t)k,
		.v_src = (uintptr_t)v,
		.slots = (uintptr_t)slots,
		GPU_CACHE_ARGS(lp, l),
		.num_slots = (int64_t)l->num_blocks * l->block_tokens,
		.num_tokens = num_tokens,
		.num_kv_heads = l->num_kv_heads,
		.head_dim = l->head_dim,
		.block_tokens = l->block_tokens,
		.src_dtype = src_dtype,
	};
	/* A warp per (token, KV head, K or V) row, bounded; the kernel strides. */
	rows = (uint64_t)num_tokens * l->num_kv_heads * 2;
	grid = (uint32_t)((rows + KVRT_GK_APPEND_THREADS / 32 - 1) / (KVRT_GK_APPEND_THREADS / 32));
	if (grid > GPU_GRID_MAX)
		grid = GPU_GRID_MAX;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_launch(g, g->append[kvi], grid, KVRT_GK_APPEND_THREADS, &a, (CUstream)stream,
			 "append launch");
	gpu_leave(g);
	return ret;
}
