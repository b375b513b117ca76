// SPDX-License-Identifier: MIT
/*
 * fake_libcuda.c: a stand-in for libcuda.so.1, so that test_gpu_fake can
 * drive libkvrt's GPU host code (loading, errors, registration, plans,
 * copies) on machines without a GPU.  "Device memory" is host memory;
 * copies are memcpy; the copy kernel is executed here on the CPU from its
 * argument struct (kvrt_gpu_abi.h), other kernels are only recorded.
 * This checks libkvrt's side of the driver contract, not the GPU.
 *
 * Behaviour from the environment, read at each call:
 *   FAKE_CUDA_INIT=N        cuInit returns N
 *   FAKE_CUDA_VERSION=N     cuDriverGetVersion (default 13000)
 *   FAKE_CUDA_DEVICES=N     device count (default 1)
 *   FAKE_CUDA_CC=MAJ.MIN    compute capability (default 9.0)
 *   FAKE_CUDA_NO_BATCH=1    no cuMemcpyBatchAsync
 *   FAKE_CUDA_ALLOC_FAIL=1  cuMemAlloc returns CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_LOG=PATH      one line per registration, launch and copy call
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt_gpu_abi.h"

typedef int CUresult;

#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OUT_OF_MEMORY 2
#define ERR_INVALID_IMAGE 200
#define ERR_NOT_FOUND 500
#define ERR_ALREADY_REGISTERED 712

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : def;
}

static void logf_(const char *fmt, ...)
{
	const char *path = getenv("FAKE_CUDA_LOG");
	va_list ap;
	FILE *f;

	if (!path || !*path)
		return;
	f = fopen(path, "a");
	if (!f)
		return;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

static CUresult GetErrorName(CUresult r, const char **s)
{
	switch (r) {
	case OK: *s = "CUDA_SUCCESS"; break;
	case ERR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; break;
	case 999: *s = "CUDA_ERROR_UNKNOWN"; break;
	default: *s = "CUDA_ERROR_FAKE"; break;
	}
	return OK;
}

static CUresult Init(unsigned int flags)
{
	(void)flags;
	return env_int("FAKE_CUDA_INIT", 0);
}

static CUresult DriverGetVersion(int *v)
{
	*v = env_int("FAKE_CUDA_VERSION", 13000);
	return OK;
}

static CUresult DeviceGetCount(int *n)
{
	*n = env_int("FAKE_CUDA_DEVICES", 1);
	return OK;
}

static CUresult DeviceGet(int *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_DEVICES", 1))
		return 101;
	*d = ordinal;
	return OK;
}

static CUresult DeviceGetName(char *name, int len, int dev)
{
	snprintf(name, (size_t)len, "Fake GPU %d", dev);
	return OK;
}

static CUresult DeviceGetAttribute(int *v, int attr, int dev)
{
	const char *cc = getenv("FAKE_CUDA_CC");
	int maj = 9, min = 0;

	(void)dev;
	if (cc && *cc)
		sscanf(cc, "%d.%d", &maj, &min);
	switch (attr) {
	case 16: *v = 132; break;		/* SMs */
	case 75: *v = maj; break;
	case 76: *v = min; break;
	default: *v = 1; break;			/* UVA, host pointers */
	}
	return OK;
}

static CUresult DeviceTotalMem(size_t *b, int dev)
{
	(void)dev;
	*b = 80ULL << 30;
	return OK;
}

static int ctx_token;
static CUresult PrimaryCtxRetain(void **ctx, int dev)
{
	(void)dev;
	*ctx = &ctx_token;
	return OK;
}

static CUresult PrimaryCtxRelease(int dev)
{
	(void)dev;
	return OK;
}

static CUresult CtxPush(void *ctx)
{
	return ctx == &ctx_token ? OK : ERR_INVALID_VALUE;
}

static CUresult CtxPop(void **ctx)
{
	*ctx = &ctx_token;
	return OK;
}


struct fake_func {
	struct fake_func *next;
	char name[64];
	int max_dyn_smem;	/* cuFuncSetAttribute's; the driver's default is 48 KB */
};

struct fake_module {
	const unsigned char *image;
	size_t len;
	struct fake_func *funcs;	/* die with the module */
};

/* A fatbin header: magic, version (2 bytes), header size (2), payload size (8). */
#define FATBIN_MAGIC 0xBA55ED50u
static CUresult ModuleLoadData(void **mod, const void *image)
{
	const unsigned char *p = image;
	struct fake_module *m;
	uint16_t hdr;
	uint32_t magic;
	uint64_t size;

	memcpy(&magic, p, 4);
	if (magic != FATBIN_MAGIC)
		return ERR_INVALID_IMAGE;
	memcpy(&hdr, p + 6, 2);
	memcpy(&size, p + 8, 8);
	m = calloc(1, sizeof(*m));
	m->image = p;
	m->len = hdr + size;
	*mod = m;
	logf_("module %zu", m->len);
	return OK;
}

static CUresult ModuleUnload(void *mod)
{
	struct fake_module *m = mod;
	struct fake_func *f;

	while ((f = m->funcs)) {
		m->funcs = f->next;
		free(f);
	}
	free(m);
	return OK;
}

static CUresult ModuleGetFunction(void **fn, void *mod, const char *name)
{
	struct fake_module *m = mod;
	struct fake_func *f;

	if (!memmem(m->image, m->len, name, strlen(name) + 1))
		return ERR_NOT_FOUND;
	for (f = m->funcs; f; f = f->next)
		if (!strcmp(f->name, name))
			break;
	if (!f) {
		f = calloc(1, sizeof(*f));
		snprintf(f->name, sizeof(f->name), "%s", name);
		f->next = m->funcs;
		m->funcs = f;
	}
	*fn = f;
	return OK;
}

/* Only the attribute libkvrt sets: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES. */
static CUresult FuncSetAttribute(void *fn, int attr, int v)
{
	struct fake_func *f = fn;

	if (attr != 8 || v < 0 || v > 227 * 1024)
		return ERR_INVALID_VALUE;
	f->max_dyn_smem = v;
	return OK;
}

static CUresult LaunchKernel(void *fn, unsigned int gx, unsigned int gy, unsigned int gz,
			     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
			     void *stream, void **params, void **extra)
{
	struct fake_func *f = fn;

	(void)gy; (void)gz; (void)by; (void)bz; (void)stream; (void)extra;
	if (shm > 48 * 1024 && (int)shm > f->max_dyn_smem)
		return ERR_INVALID_VALUE;
	logf_("launch %s %u %u", f->name, gx, bx);
	if (!strcmp(f->name, "kvrt_copy_runs")) {
		const struct kvrt_gk_copy_args *a = params[0];
		const struct kvrt_gk_copy_run *r = (const void *)(uintptr_t)a->runs;
		uint32_t i;

		for (i = 0; i < a->num_runs; i++)
			memcpy((void *)(uintptr_t)r[i].dst, (const void *)(uintptr_t)r[i].src,
			       r[i].bytes);
	}
	if (!strcmp(f->name, "kvrt_read_stream")) {	/* every word in CTA 0's sum */
		const struct kvrt_gk_read_args *a = params[0];
		const uint32_t *w = (const void *)(uintptr_t)a->src;
		uint64_t *sums = (void *)(uintptr_t)a->sums, i;

		memset(sums, 0, gx * sizeof(*sums));
		for (i = 0; i < a->units * 4; i++)
			sums[0] += w[i];
	}
	return OK;
}

static CUresult MemAlloc(uint64_t *p, size_t n)
{
	void *m;

	if (env_int("FAKE_CUDA_ALLOC_FAIL", 0) || posix_memalign(&m, 256, n ? n : 1))
		return ERR_OUT_OF_MEMORY;
	*p = (uintptr_t)m;
	return OK;
}

static CUresult MemFree(uint64_t p)
{
	free((void *)(uintptr_t)p);
	return OK;
}

static CUresult MemAllocAsync(uint64_t *p, size_t n, void *s)
{
	(void)s;
	return MemAlloc(p, n);
}

static CUresult MemFreeAsync(uint64_t p, void *s)
{
	(void)s;
	return MemFree(p);
}

static CUresult Memcpy(uint64_t d, uint64_t s, size_t n)
{
	memcpy((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
	return OK;
}

static CUresult MemcpyAsync(uint64_t d, uint64_t s, size_t n, void *st)
{
	(void)st;
	logf_("memcpy %zu", n);
	return Memcpy(d, s, n);
}

static CUresult MemcpyHtoD(uint64_t d, const void *s, size_t n)
{
	return Memcpy(d, (uintptr_t)s, n);
}

static CUresult MemcpyHtoDAsync(uint64_t d, const void *s, size_t n, void *st)
{
	(void)st;
	return Memcpy(d, (uintptr_t)s, n);
}

static CUresult BatchV2(uint64_t *d, uint64_t *s, size_t *n, size_t count, void *attrs,
			size_t *idx, size_t nattrs, void *st)
{
	size_t i;

	(void)attrs;
	if (!st || nattrs < 1 || idx[0] != 0)
		return ERR_INVALID_VALUE;	/* the legacy stream is refused */
	logf_("batch %zu", count);
	for (i = 0; i < count; i++)
		Memcpy(d[i], s[i], n[i]);
	return OK;
}

struct reg {
	struct reg *next;
	uintptr_t a, len;
};
static struct reg *regs;

static CUresult HostRegister(void *p, size_t len, unsigned int flags)
{
	uintptr_t a = (uintptr_t)p;
	struct reg *r;

	(void)flags;
	for (r = regs; r; r = r->next)
		if (a < r->a + r->len && r->a < a + len)
			return ERR_ALREADY_REGISTERED;
	r = malloc(sizeof(*r));
	r->a = a;
	r->len = len;
	r->next = regs;
	regs = r;
	logf_("register %zu", len);
	return OK;
}

static CUresult HostUnregister(void *p)
{
	struct reg **pp, *r;

	for (pp = &regs; (r = *pp); pp = &r->next)
		if (r->a == (uintptr_t)p) {
			*pp = r->next;
			logf_("unregister %zu", (size_t)r->len);
			free(r);
			return OK;
		}
	return ERR_INVALID_VALUE;
}

static CUresult Nop1(void *a)
{
	(void)a;
	return OK;
}

static CUresult Nop2(void *a, unsigned int b)
{
	(void)a; (void)b;
	return OK;
}

static CUresult Nop3(void *a, void *b, unsigned int c)
{
	(void)a; (void)b; (void)c;
	return OK;
}

static int event_token;
static CUresult EventCreate(void **e, unsigned int f)
{
	(void)f;
	*e = &event_token;
	return OK;
}

static CUresult EventRecord(void *e, void *s)
{
	(void)e; (void)s;
	return OK;
}

static CUresult Elapsed(float *ms, void *a, void *b)
{
	(void)a; (void)b;
	*ms = 1.0f;
	return OK;
}

static int stream_token;
static CUresult StreamCreate(void **s, unsigned int f)
{
	(void)f;
	*s = &stream_token;
	return OK;
}

static const struct {
	const char *name;
	void *fn;
} table[] = {
	{ "cuGetErrorName", GetErrorName },
	{ "cuInit", Init },
	{ "cuDriverGetVersion", DriverGetVersion },
	{ "cuDeviceGetCount", DeviceGetCount },
	{ "cuDeviceGet", DeviceGet },
	{ "cuDeviceGetName", DeviceGetName },
	{ "cuDeviceGetAttribute", DeviceGetAttribute },
	{ "cuDeviceTotalMem", DeviceTotalMem },
	{ "cuDevicePrimaryCtxRetain", PrimaryCtxRetain },
	{ "cuDevicePrimaryCtxRelease", PrimaryCtxRelease },
	{ "cuCtxPushCurrent", CtxPush },
	{ "cuCtxPopCurrent", CtxPop },
	{ "cuModuleLoadData", ModuleLoadData },
	{ "cuModuleUnload", ModuleUnload },
	{ "cuModuleGetFunction", ModuleGetFunction },
	{ "cuFuncSetAttribute", FuncSetAttribute },
	{ "cuLaunchKernel", LaunchKernel },
	{ "cuMemAlloc", MemAlloc },
	{ "cuMemFree", MemFree },
	{ "cuMemAllocAsync", MemAllocAsync },
	{ "cuMemFreeAsync", MemFreeAsync },
	{ "cuMemcpy", Memcpy },
	{ "cuMemcpyAsync", MemcpyAsync },
	{ "cuMemcpyHtoD", MemcpyHtoD },
	{ "cuMemcpyHtoDAsync", MemcpyHtoDAsync },
	{ "cuMemHostRegister", HostRegister },
	{ "cuMemHostUnregister", HostUnregister },
	{ "cuStreamSynchronize", Nop1 },
	{ "cuStreamCreate", StreamCreate },
	{ "cuStreamDestroy", Nop1 },
	{ "cuStreamWaitEvent", Nop3 },
	{ "cuEventCreate", EventCreate },
	{ "cuEventDestroy", Nop1 },
	{ "cuEventRecord", EventRecord },
	{ "cuEventSynchronize", Nop1 },
	{ "cuEventElapsedTime", Elapsed },
	{ "cuMemcpyBatchAsync", BatchV2 },
};

/* The one symbol libkvrt looks up by name. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
			     int *status)
{
	size_t i;

	(void)flags;
	(void)Nop2;
	*pfn = NULL;
	*status = 1;
	if (!strcmp(symbol, "cuMemcpyBatchAsync") &&
	    (env_int("FAKE_CUDA_NO_BATCH", 0) || version < 13000))
		return ERR_NOT_FOUND;
	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (!strcmp(table[i].name, symbol)) {
			*pfn = table[i].fn;
			*status = 0;
			return OK;
		}
	}
	return ERR_NOT_FOUND;
}
