// SPDX-License-Identifier: MIT
/*
 * gpu.c: a struct kvrt_gpu: the driver, the device's primary context, the
 * embedded kernels, and the small device-memory helpers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

static const uint32_t hd_values[GPU_HD_COUNT] = { 64, 128, 256 };
static const char *const kv_names[GPU_KV_COUNT] = { "f16", "bf16", "fp8" };

int gpu_hd_index(uint32_t head_dim)
{
	int i;

	for (i = 0; i < GPU_HD_COUNT; i++)
		if (hd_values[i] == head_dim)
			return i;
	return -1;
}

int gpu_kv_index(enum kvrt_dtype dtype)
{
	switch (dtype) {
	case KVRT_DTYPE_F16:
		return 0;
	case KVRT_DTYPE_BF16:
		return 1;
	case KVRT_DTYPE_FP8_E4M3:
		return 2;
	default:
		return -1;
	}
}

int gpu_check(struct kvrt_gpu *g, CUresult r, const char *what)
{
	char buf[64];

	if (r == KVRT_CUDA_SUCCESS)
		return 0;
	kvrt_log(g->k, KVRT_LOG_ERR, "gpu %d: %s: %s", g->ordinal, what,
		 cu_err_str(&g->cu, r, buf, sizeof(buf)));
	return cu_errno(r);
}

int gpu_enter(struct kvrt_gpu *g)
{
	return gpu_check(g, g->cu.CtxPushCurrent(g->ctx), "cuCtxPushCurrent");
}

void gpu_leave(struct kvrt_gpu *g)
{
	CUcontext popped;

	g->cu.CtxPopCurrent(&popped);
}

int gpu_launch_smem(struct kvrt_gpu *g, CUfunction fn, uint32_t grid, uint32_t threads,
		    uint32_t smem, void *args, CUstream stream, const char *what)
{
	void *params[] = { args };

	if (!grid)
		return 0;
	return gpu_check(g, g->cu.LaunchKernel(fn, grid, 1, 1, threads, 1, 1, smem, stream,
					       params, NULL), what);
}

int gpu_launch(struct kvrt_gpu *g, CUfunction fn, uint32_t grid, uint32_t threads, void *args,
	       CUstream stream, const char *what)
{
	return gpu_launch_smem(g, fn, grid, threads, 0, args, stream, what);
}

static int fatbin_missing(char *why, size_t len)
{
	if ((uintptr_t)kvrt_fatbin_end > (uintptr_t)kvrt_fatbin_start)
		return 0;
	snprintf(why, len, "libkvrt was built without nvcc: no GPU kernels");
	return -ENODEV;
}

int kvrt_gpu_probe(char *why, size_t len)
{
	char scratch[8], reason[256];
	struct cu_api cu;
	int ret, count = 0;
	CUresult r;

	if (!why || !len) {
		why = scratch;
		len = sizeof(scratch);
	}
	ret = fatbin_missing(reason, sizeof(reason));
	if (!ret)
		ret = cu_api_load(&cu, reason, sizeof(reason));
	if (ret) {
		snprintf(why, len, "%s", reason);
		return ret;
	}
	r = cu.DeviceGetCount(&count);
	if (r != KVRT_CUDA_SUCCESS || count < 1) {
		char err[64];

		snprintf(why, len, "cuDeviceGetCount: %s",
			 r ? cu_err_str(&cu, r, err, sizeof(err)) : "no devices");
		cu_api_unload(&cu);
		return -ENODEV;
	}
	snprintf(why, len, "%d device%s, driver %d.%d", count, count == 1 ? "" : "s",
		 cu.driver_version / 1000, cu.driver_version % 1000 / 10);
	cu_api_unload(&cu);
	return 0;
}

/* A decode kernel, allowed its dynamic shared memory (above the 48 KB default). */
static int load_decode(struct kvrt_gpu *g, CUfunction *fn, const char *prefix, int h, int kv)
{
	char name[64];
	int ret;

	snprintf(name, sizeof(name), "%s%u_%s", prefix, hd_values[h], kv_names[kv]);
	ret = gpu_check(g, g->cu.ModuleGetFunction(fn, g->mod, name), name);
	if (!ret)
		ret = gpu_check(g, g->cu.FuncSetAttribute(*fn, KVRT_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED,
							  KVRT_GK_DECODE_SMEM(hd_values[h])),
				name);
	return ret;
}

static int load_functions(struct kvrt_gpu *g)
{
	char name[64];
	int h, kv, ret;

	for (h = 0; h < GPU_HD_COUNT; h++) {
		for (kv = 0; kv < GPU_KV_COUNT; kv++) {
			ret = load_decode(g, &g->decode[h][kv], "kvrt_decode_hd", h, kv);
			if (!ret)
				ret = load_decode(g, &g->decode_g8[h][kv], "kvrt_decode_g8_hd", h, kv);
			if (ret)
				return ret;
			snprintf(name, sizeof(name), "kvrt_prefill_hd%u_%s", hd_values[h],
				 kv_names[kv]);
			ret = gpu_check(g, g->cu.ModuleGetFunction(&g->prefill[h][kv], g->mod,
								   name), name);
			if (ret)
				return ret;
			snprintf(name, sizeof(name), "kvrt_prefill_tc_hd%u_%s", hd_values[h],
				 kv_names[kv]);
			ret = gpu_check(g, g->cu.ModuleGetFunction(&g->prefill_tc[h][kv], g->mod,
								   name), name);
			if (ret)
				return ret;
		}
	}
	for (kv = 0; kv < GPU_KV_COUNT; kv++) {
		snprintf(name, sizeof(name), "kvrt_append_%s", kv_names[kv]);
		ret = gpu_check(g, g->cu.ModuleGetFunction(&g->append[kv], g->mod, name), name);
		if (ret)
			return ret;
	}
	ret = gpu_check(g, g->cu.ModuleGetFunction(&g->copy, g->mod, "kvrt_copy_runs"),
			"kvrt_copy_runs");
	if (!ret)
		ret = gpu_check(g, g->cu.ModuleGetFunction(&g->read, g->mod, "kvrt_read_stream"),
				"kvrt_read_stream");
	return ret;
}

/*
 * Prefill runs on tensor cores (every device the kernels take is sm_80+);
 * KVRT_GPU_PREFILL=simt picks the fp32 SIMT kernels, the GPU reference.
 */
static bool prefill_wants_simt(struct kvrt *k)
{
	const char *env = getenv("KVRT_GPU_PREFILL");

	if (!env || !*env || !strcmp(env, "tc"))
		return false;
	if (!strcmp(env, "simt"))
		return true;
	kvrt_log(k, KVRT_LOG_WARNING, "gpu: KVRT_GPU_PREFILL=%s: not tc or simt, using tc", env);
	return false;
}

static int query_device(struct kvrt_gpu *g)
{
	struct kvrt_gpu_info *in = &g->info;
	int sm = 0, host_ptr = 0, uva = 0;
	size_t mem = 0;
	CUresult r;

	r = g->cu.DeviceGetName(in->name, sizeof(in->name), g->dev);
	if (!r)
		r = g->cu.DeviceGetAttribute(&in->cc_major, KVRT_CU_ATTR_CC_MAJOR, g->dev);
	if (!r)
		r = g->cu.DeviceGetAttribute(&in->cc_minor, KVRT_CU_ATTR_CC_MINOR, g->dev);
	if (!r)
		r = g->cu.DeviceGetAttribute(&sm, KVRT_CU_ATTR_SM_COUNT, g->dev);
	if (!r)
		r = g->cu.DeviceGetAttribute(&uva, KVRT_CU_ATTR_UNIFIED_ADDRESSING, g->dev);
	if (!r)
		r = g->cu.DeviceGetAttribute(&host_ptr, KVRT_CU_ATTR_HOST_POINTER_FOR_REGISTERED,
					     g->dev);
	if (!r)
		r = g->cu.DeviceTotalMem(&mem, g->dev);
	if (r)
		return gpu_check(g, r, "device attributes");
	in->name[sizeof(in->name) - 1] = 0;
	in->device = g->ordinal;
	in->driver_version = g->cu.driver_version;
	in->sm_count = sm > 0 ? (uint32_t)sm : 1;
	in->total_mem = mem;
	in->batch_memcpy = g->cu.MemcpyBatchAsyncV1 || g->cu.MemcpyBatchAsyncV2;
	/* The copy kernel and the plain pointers of the API need both. */
	g->host_ptr_ok = uva && host_ptr;
	return 0;
}

int kvrt_gpu_open(struct kvrt *k, int device, struct kvrt_gpu **out)
{
	char why[256];
	struct kvrt_gpu *g;
	int ret, count = 0;

	if (out)
		*out = NULL;
	if (!k || !out || device < 0)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->k = k;
	g->ordinal = device;
	ret = fatbin_missing(why, sizeof(why));
	if (!ret)
		ret = cu_api_load(&g->cu, why, sizeof(why));
	if (ret) {
		kvrt_log(k, KVRT_LOG_INFO, "gpu: %s", why);
		free(g);
		return ret;
	}
	ret = gpu_check(g, g->cu.DeviceGetCount(&count), "cuDeviceGetCount");
	if (!ret && device >= count) {
		kvrt_log(k, KVRT_LOG_INFO, "gpu: no device %d (%d present)", device, count);
		ret = -ENODEV;
	}
	if (!ret)
		ret = gpu_check(g, g->cu.DeviceGet(&g->dev, device), "cuDeviceGet");
	if (!ret)
		ret = query_device(g);
	if (ret)
		goto out_unload;
	if (g->info.cc_major < 8) {
		kvrt_log(k, KVRT_LOG_ERR, "gpu %d: %s is compute %d.%d; the kernels need 8.0",
			 device, g->info.name, g->info.cc_major, g->info.cc_minor);
		ret = -ENOTSUP;
		goto out_unload;
	}
	ret = gpu_check(g, g->cu.DevicePrimaryCtxRetain(&g->ctx, g->dev),
			"cuDevicePrimaryCtxRetain");
	if (ret)
		goto out_unload;
	ret = gpu_enter(g);
	if (ret)
		goto out_release_ctx;
	ret = gpu_check(g, g->cu.ModuleLoadData(&g->mod, kvrt_fatbin_start), "cuModuleLoadData");
	if (!ret) {
		ret = load_functions(g);
		if (!ret)
			ret = gpu_copy_init(g);
		if (ret)
			g->cu.ModuleUnload(g->mod);
	}
	gpu_leave(g);
	if (ret)
		goto out_release_ctx;
	g->prefill_simt = prefill_wants_simt(k);
	kvrt_log(k, KVRT_LOG_INFO, "gpu %d: %s, compute %d.%d, %u SMs, driver %d, %s prefill",
		 device, g->info.name, g->info.cc_major, g->info.cc_minor, g->info.sm_count,
		 g->info.driver_version, g->prefill_simt ? "SIMT" : "tensor-core");
	*out = g;
	return 0;

out_release_ctx:
	g->cu.DevicePrimaryCtxRelease(g->dev);
out_unload:
	cu_api_unload(&g->cu);
	free(g);
	return ret;
}

void kvrt_gpu_close(struct kvrt_gpu *g)
{
	if (!g)
		return;
	if (!gpu_enter(g)) {
		gpu_copy_fini(g);
		if (g->read_sums)
			g->cu.MemFree(g->read_sums);
		g->cu.ModuleUnload(g->mod);
		gpu_leave(g);
	}
	g->cu.DevicePrimaryCtxRelease(g->dev);
	cu_api_unload(&g->cu);
	free(g);
}

int kvrt_gpu_info(struct kvrt_gpu *g, struct kvrt_gpu_info *info)
{
	struct gpu_reg *r;

	if (!g || !info)
		return -EINVAL;
	pthread_mutex_lock(&g->lock);
	*info = g->info;
	info->registered_bytes = 0;
	for (r = g->regs; r; r = r->next)
		info->registered_bytes += r->bytes;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int kvrt_gpu_alloc(struct kvrt_gpu *g, size_t bytes, void **dptr)
{
	CUdeviceptr p = 0;
	int ret;

	if (dptr)
		*dptr = NULL;
	if (!g || !dptr || !bytes)
		return -EINVAL;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_check(g, g->cu.MemAlloc(&p, bytes), "cuMemAlloc");
	gpu_leave(g);
	if (!ret)
		*dptr = (void *)(uintptr_t)p;
	return ret;
}

int kvrt_gpu_free(struct kvrt_gpu *g, void *dptr)
{
	int ret;

	if (!g)
		return -EINVAL;
	if (!dptr)
		return 0;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_check(g, g->cu.MemFree((CUdeviceptr)(uintptr_t)dptr), "cuMemFree");
	gpu_leave(g);
	return ret;
}

int kvrt_gpu_memcpy(struct kvrt_gpu *g, void *dst, const void *src, size_t bytes)
{
	int ret;

	if (!g || ((!dst || !src) && bytes))
		return -EINVAL;
	if (!bytes)
		return 0;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_check(g, g->cu.Memcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
					bytes), "cuMemcpy");
	gpu_leave(g);
	return ret;
}

int kvrt_gpu_sync(struct kvrt_gpu *g, void *stream)
{
	int ret;

	if (!g)
		return -EINVAL;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	ret = gpu_check(g, g->cu.StreamSynchronize((CUstream)stream), "cuStreamSynchronize");
	gpu_leave(g);
	return ret;
}
