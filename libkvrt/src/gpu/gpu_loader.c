// SPDX-License-Identifier: MIT
/*
 * gpu_loader.c: find the CUDA driver at run time.  libcuda.so.1 is
 * dlopen'ed (so libkvrt links and runs where there is none) and every
 * entry point comes from cuGetProcAddress_v2 at a fixed ABI version, so a
 * newer driver's changed signatures never reach us.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_drv.h"

/* Absent from a static (non-PIE) program: it cannot load libcuda. */
extern char _DYNAMIC[] __attribute__((weak));

typedef CUresult (*get_proc_fn)(const char *, void **, int, uint64_t, int *);

static int resolve(get_proc_fn get_proc, const char *name, int version, void **fn)
{
	int status = 0;

	*fn = NULL;
	if (get_proc(name, fn, version, 0, &status) != KVRT_CUDA_SUCCESS || status != 0 || !*fn) {
		*fn = NULL;
		return -1;
	}
	return 0;
}

const char *cu_err_str(const struct cu_api *api, CUresult r, char *buf, size_t len)
{
	const char *name = NULL;

	if (!api->GetErrorName || api->GetErrorName(r, &name) != KVRT_CUDA_SUCCESS || !name)
		name = "CUDA_ERROR";
	snprintf(buf, len, "%s (%d)", name, r);
	return buf;
}

int cu_errno(CUresult r)
{
	switch (r) {
	case KVRT_CUDA_SUCCESS:
		return 0;
	case KVRT_CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case KVRT_CUDA_ERROR_INVALID_VALUE:
		return -EINVAL;
	case KVRT_CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	case KVRT_CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return -EBUSY;
	case KVRT_CUDA_ERROR_NO_DEVICE:
	case KVRT_CUDA_ERROR_INVALID_DEVICE:
	case KVRT_CUDA_ERROR_NOT_INITIALIZED:
		return -ENODEV;
	default:
		return -EIO;
	}
}

void cu_api_unload(struct cu_api *api)
{
	if (api->lib)
		dlclose(api->lib);
	memset(api, 0, sizeof(*api));
}

#define ENTRY(field, name) { offsetof(struct cu_api, field), name }

int cu_api_load(struct cu_api *api, char *why, size_t len)
{
	static const struct {
		size_t offset;
		const char *name;
	} entries[] = {
		ENTRY(Init, "cuInit"),
		ENTRY(DriverGetVersion, "cuDriverGetVersion"),
		ENTRY(DeviceGetCount, "cuDeviceGetCount"),
		ENTRY(DeviceGet, "cuDeviceGet"),
		ENTRY(DeviceGetName, "cuDeviceGetName"),
		ENTRY(DeviceGetAttribute, "cuDeviceGetAttribute"),
		ENTRY(DeviceTotalMem, "cuDeviceTotalMem"),
		ENTRY(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		ENTRY(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease"),
		ENTRY(CtxPushCurrent, "cuCtxPushCurrent"),
		ENTRY(CtxPopCurrent, "cuCtxPopCurrent"),
		ENTRY(ModuleLoadData, "cuModuleLoadData"),
		ENTRY(ModuleUnload, "cuModuleUnload"),
		ENTRY(ModuleGetFunction, "cuModuleGetFunction"),
		ENTRY(FuncSetAttribute, "cuFuncSetAttribute"),
		ENTRY(LaunchKernel, "cuLaunchKernel"),
		ENTRY(MemAlloc, "cuMemAlloc"),
		ENTRY(MemFree, "cuMemFree"),
		ENTRY(Memcpy, "cuMemcpy"),
		ENTRY(MemcpyAsync, "cuMemcpyAsync"),
		ENTRY(MemcpyHtoD, "cuMemcpyHtoD"),
		ENTRY(MemcpyHtoDAsync, "cuMemcpyHtoDAsync"),
		ENTRY(MemAllocAsync, "cuMemAllocAsync"),
		ENTRY(MemFreeAsync, "cuMemFreeAsync"),
		ENTRY(MemHostRegister, "cuMemHostRegister"),
		ENTRY(MemHostUnregister, "cuMemHostUnregister"),
		ENTRY(StreamSynchronize, "cuStreamSynchronize"),
		ENTRY(StreamCreate, "cuStreamCreate"),
		ENTRY(StreamDestroy, "cuStreamDestroy"),
		ENTRY(EventCreate, "cuEventCreate"),
		ENTRY(EventDestroy, "cuEventDestroy"),
		ENTRY(EventRecord, "cuEventRecord"),
		ENTRY(StreamWaitEvent, "cuStreamWaitEvent"),
		ENTRY(EventSynchronize, "cuEventSynchronize"),
		ENTRY(EventElapsedTime, "cuEventElapsedTime"),
	};
	const char *path = getenv("KVRT_LIBCUDA");
	get_proc_fn get_proc;
	char err[64];
	CUresult r;
	size_t i;

	memset(api, 0, sizeof(*api));
	if (!path || !*path)
		path = "libcuda.so.1";
	if (!_DYNAMIC) {
		snprintf(why, len, "a statically linked program cannot load %s", path);
		return -ENODEV;
	}
	api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!api->lib) {
		snprintf(why, len, "%s", dlerror());
		return -ENODEV;
	}
	get_proc = (get_proc_fn)dlsym(api->lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		snprintf(why, len, "%s has no cuGetProcAddress_v2: a driver older than CUDA 12.0",
			 path);
		goto out_unload;
	}
	if (resolve(get_proc, "cuGetErrorName", KVRT_CU_ABI, (void **)&api->GetErrorName)) {
		snprintf(why, len, "%s: cuGetErrorName not found", path);
		goto out_unload;
	}
	for (i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		void **fn = (void **)((char *)api + entries[i].offset);

		if (resolve(get_proc, entries[i].name, KVRT_CU_ABI, fn)) {
			snprintf(why, len, "%s: %s not found", path, entries[i].name);
			goto out_unload;
		}
	}
	r = api->Init(0);
	if (r != KVRT_CUDA_SUCCESS) {
		snprintf(why, len, "cuInit: %s", cu_err_str(api, r, err, sizeof(err)));
		goto out_unload;
	}
	r = api->DriverGetVersion(&api->driver_version);
	if (r != KVRT_CUDA_SUCCESS || api->driver_version < KVRT_CU_ABI) {
		snprintf(why, len, "driver version %d: CUDA 12.0 (12000) or newer is needed",
			 api->driver_version);
		goto out_unload;
	}
	/* The batch copy: 13.0 dropped failIdx; ask for the ABI the driver has. */
	if (api->driver_version >= KVRT_CU_BATCH_V2)
		resolve(get_proc, "cuMemcpyBatchAsync", KVRT_CU_BATCH_V2,
			(void **)&api->MemcpyBatchAsyncV2);
	else if (api->driver_version >= KVRT_CU_BATCH_V1)
		resolve(get_proc, "cuMemcpyBatchAsync", KVRT_CU_BATCH_V1,
			(void **)&api->MemcpyBatchAsyncV1);
	return 0;

out_unload:
	cu_api_unload(api);
	return -ENODEV;
}
