/* SPDX-License-Identifier: MIT */
/*
 * cuda_drv.h: the few CUDA driver API types, values and entry points
 * libkvrt uses, declared here so that the library builds without a CUDA
 * toolkit.  Values are the driver's documented ABI (cuda.h); the entry
 * points are resolved at run time with cuGetProcAddress_v2, asking for
 * the ABI of CUDA 12.0 (KVRT_CU_ABI), except cuMemcpyBatchAsync whose
 * signature changed in 13.0.
 */
#ifndef KVRT_CUDA_DRV_H
#define KVRT_CUDA_DRV_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define KVRT_CU_ABI 12000	/* the driver ABI asked for */
#define KVRT_CU_BATCH_V1 12080	/* cuMemcpyBatchAsync with failIdx */
#define KVRT_CU_BATCH_V2 13000	/* without */

enum {
	KVRT_CUDA_SUCCESS = 0,
	KVRT_CUDA_ERROR_INVALID_VALUE = 1,
	KVRT_CUDA_ERROR_OUT_OF_MEMORY = 2,
	KVRT_CUDA_ERROR_NOT_INITIALIZED = 3,
	KVRT_CUDA_ERROR_NO_DEVICE = 100,
	KVRT_CUDA_ERROR_INVALID_DEVICE = 101,
	KVRT_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
	KVRT_CUDA_ERROR_NOT_FOUND = 500,
	KVRT_CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	KVRT_CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum {
	KVRT_CU_ATTR_SM_COUNT = 16,
	KVRT_CU_ATTR_UNIFIED_ADDRESSING = 41,
	KVRT_CU_ATTR_CC_MAJOR = 75,
	KVRT_CU_ATTR_CC_MINOR = 76,
	KVRT_CU_ATTR_HOST_POINTER_FOR_REGISTERED = 91,
};

/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define KVRT_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED 8
#define KVRT_CU_MEMHOSTREGISTER_PORTABLE 0x01
#define KVRT_CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define KVRT_CU_STREAM_NON_BLOCKING 0x1
#define KVRT_CU_EVENT_DEFAULT 0x0

/* cuMemcpyBatchAsync's per-copy attributes (CUmemcpyAttributes). */
struct kvrt_cu_mem_location {
	int type;		/* CUmemLocationType; 0: none */
	int id;
};

struct kvrt_cu_memcpy_attrs {
	int src_access_order;	/* CUmemcpySrcAccessOrder */
	struct kvrt_cu_mem_location src_loc_hint;
	struct kvrt_cu_mem_location dst_loc_hint;
	unsigned int flags;
};

#define KVRT_CU_SRC_ACCESS_ORDER_STREAM 0x1

/* The entry points, resolved per struct kvrt_gpu. */
struct cu_api {
	void *lib;		/* dlopen handle */
	int driver_version;
	CUresult (*GetErrorName)(CUresult, const char **);
	CUresult (*Init)(unsigned int);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*DeviceTotalMem)(size_t *, CUdevice);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice);
	CUresult (*CtxPushCurrent)(CUcontext);
	CUresult (*CtxPopCurrent)(CUcontext *);
	CUresult (*ModuleLoadData)(CUmodule *, const void *);
	CUresult (*ModuleUnload)(CUmodule);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*FuncSetAttribute)(CUfunction, int, int);
	CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
				 unsigned int, unsigned int, unsigned int, unsigned int,
				 CUstream, void **, void **);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*MemHostRegister)(void *, size_t, unsigned int);
	CUresult (*MemHostUnregister)(void *);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*StreamCreate)(CUstream *, unsigned int);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*EventCreate)(CUevent *, unsigned int);
	CUresult (*EventDestroy)(CUevent);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
	CUresult (*EventSynchronize)(CUevent);
	CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
	/* Optional: NULL where the driver lacks it. */
	CUresult (*MemcpyBatchAsyncV1)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
				       struct kvrt_cu_memcpy_attrs *, size_t *, size_t, size_t *,
				       CUstream);
	CUresult (*MemcpyBatchAsyncV2)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t,
				       struct kvrt_cu_memcpy_attrs *, size_t *, size_t, CUstream);
};

/*
 * Load the driver into api and cuInit it.  0, or -ENODEV with the reason
 * in why[len].  cu_api_unload() undoes it (api zeroed).
 */
int cu_api_load(struct cu_api *api, char *why, size_t len);
void cu_api_unload(struct cu_api *api);

/* "CUDA_ERROR_OUT_OF_MEMORY (2)" into buf, for logs. */
const char *cu_err_str(const struct cu_api *api, CUresult r, char *buf, size_t len);

/* A CUDA error as an errno: -ENOMEM, -EINVAL, -ENOTSUP, -ENODEV, -EBUSY
 * (host memory already registered), else -EIO. */
int cu_errno(CUresult r);

#endif /* KVRT_CUDA_DRV_H */
