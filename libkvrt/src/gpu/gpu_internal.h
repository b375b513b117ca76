/* SPDX-License-Identifier: MIT */
/*
 * gpu_internal.h: what libkvrt's GPU files share: gpu.c (the handle),
 * gpu_loader.c (libcuda), gpu_register.c (host registration), gpu_copy.c
 * (block copies), gpu_attn.c (attention), gpu_append.c (append) and
 * gpu_read.c (the read stream, a benchmark's limit).
 *
 * Locking: kvrt_gpu.lock guards the registration list, the copy
 * calibration and the read stream's sums array; it is taken alone and never held across a kernel launch.
 * Every driver call runs with the device's primary context pushed on the
 * calling thread (gpu_enter/gpu_leave), so callers keep whatever context
 * they had.
 */
#ifndef KVRT_GPU_INTERNAL_H
#define KVRT_GPU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "cuda_drv.h"
#include "internal.h"
#include "kvrt_gpu_abi.h"

#define GPU_HD_COUNT 3		/* head dims 64, 128, 256 */
#define GPU_KV_COUNT 3		/* f16, bf16, fp8 */
#define GPU_REG_PIECE_MAX (64ULL << 30)	/* one cuMemHostRegister at most */

/* One registered host range, in pieces of at most GPU_REG_PIECE_MAX. */
struct gpu_reg {
	struct gpu_reg *next;
	struct kvrt_space *space;	/* NULL: kvrt_gpu_register_host() */
	char *addr;
	uint64_t bytes;			/* registered so far */
	uint32_t num_pieces;
	uint32_t cap_pieces;
	uint64_t *piece_bytes;		/* piece i starts at addr + sum of earlier */
};

struct kvrt_gpu {
	struct kvrt *k;
	struct cu_api cu;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	int ordinal;
	struct kvrt_gpu_info info;
	bool host_ptr_ok;		/* registered host memory at the same address */

	CUfunction decode[GPU_HD_COUNT][GPU_KV_COUNT];		/* items of 1..4 heads */
	CUfunction decode_g8[GPU_HD_COUNT][GPU_KV_COUNT];	/* items of up to 8 */
	CUfunction prefill[GPU_HD_COUNT][GPU_KV_COUNT];		/* SIMT */
	CUfunction prefill_tc[GPU_HD_COUNT][GPU_KV_COUNT];	/* tensor cores */
	bool prefill_simt;		/* KVRT_GPU_PREFILL=simt: the SIMT kernels */
	CUfunction append[GPU_KV_COUNT];
	CUfunction copy;
	CUfunction read;

	/* Batched copies may not run on the legacy stream: they run here,
	 * fenced by events on both sides (gpu_copy.c). */
	CUstream own_stream;
	CUevent fence_in, fence_out;

	pthread_mutex_t lock;
	struct gpu_reg *regs;
	bool calibrated;
	struct kvrt_gpu_copy_calib calib;	/* what calibrated measured */
	CUdeviceptr read_sums;		/* gpu_read.c: timed calls' CTA sums */
};

/* The embedded fatbin (gpu_fatbin.S); empty when built without nvcc. */
extern const unsigned char kvrt_fatbin_start[];
extern const unsigned char kvrt_fatbin_end[];

int gpu_enter(struct kvrt_gpu *g);
void gpu_leave(struct kvrt_gpu *g);

/* Map a CUDA result to an errno, logging a failure with what failed. */
int gpu_check(struct kvrt_gpu *g, CUresult r, const char *what);

/* Launch fn with one by-value argument struct (and smem bytes of dynamic shared memory). */
int gpu_launch(struct kvrt_gpu *g, CUfunction fn, uint32_t grid, uint32_t threads, void *args,
	       CUstream stream, const char *what);
int gpu_launch_smem(struct kvrt_gpu *g, CUfunction fn, uint32_t grid, uint32_t threads,
		    uint32_t smem, void *args, CUstream stream, const char *what);

/* Index of a head dim / KV dtype in the kernel tables, or -1. */
int gpu_hd_index(uint32_t head_dim);
int gpu_kv_index(enum kvrt_dtype dtype);

/* gpu_copy.c: the copy stream and fences (open, close). */
int gpu_copy_init(struct kvrt_gpu *g);
void gpu_copy_fini(struct kvrt_gpu *g);

/*
 * gpu_register.c: drop every registration (close, with the context
 * pushed); register a space's blocks backed since its registration before
 * a copy reaches [base, end) (-EFAULT: a block with no pages).
 */
void gpu_reg_free_all(struct kvrt_gpu *g);
int gpu_reg_cover(struct kvrt_gpu *g, const void *base, uint64_t end);

/* The most blocks or rows one launch's grid takes; kernels stride past it. */
#define GPU_GRID_MAX 65535U

/* Query and output dtypes the kernels take. */
static inline bool gpu_qo_dtype_ok(enum kvrt_dtype d)
{
	return d == KVRT_DTYPE_F32 || d == KVRT_DTYPE_F16 || d == KVRT_DTYPE_BF16;
}

/* A layer's K and V planes (and fp8 scales) as the kernels address them. */
struct gpu_layer_planes {
	uint64_t k, v, k_scales, v_scales;
};

static inline struct gpu_layer_planes gpu_layer_planes(const struct kvrt_kv_cache *kv)
{
	const struct kvrt_layout *l = kv->layout;
	uint64_t base = (uintptr_t)kv->base + (uint64_t)(kv->layer * l->layer_stride);
	struct gpu_layer_planes lp = { base, base + (uint64_t)l->kv_stride, 0, 0 };

	if (l->kv_dtype == KVRT_DTYPE_FP8_E4M3) {
		const float *ks = kv->scales + kv->layer * l->scale_layer_stride;

		lp.k_scales = (uintptr_t)ks;
		lp.v_scales = (uintptr_t)(ks + l->scale_kv_stride);
	}
	return lp;
}

/* The fields of a layer's cache that the append and attention kernels both take. */
#define GPU_CACHE_ARGS(lp, l)                                                        \
	.k = (lp).k, .v = (lp).v, .k_scales = (lp).k_scales, .v_scales = (lp).v_scales, \
	.block_stride = (l)->block_stride, .token_stride = (l)->token_stride,        \
	.head_stride = (l)->head_stride, .scale_block_stride = (l)->scale_block_stride

#endif /* KVRT_GPU_INTERNAL_H */
