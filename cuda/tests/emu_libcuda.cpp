// SPDX-License-Identifier: MIT
/*
 * emu_libcuda.cpp: a libcuda.so.1 stand-in that runs libkvrt's kernels on
 * the CPU through the emulator (emu.h), so libkvrt's own GPU test
 * (libkvrt/tests/test_gpu.c) runs end to end on machines without a GPU:
 * host planning, argument structs, launches, copies, registration and
 * CUDA-graph capture and replay (captured launches and copies are
 * recorded and replayed in order).  Device memory is host memory.  It
 * proves the host code and the kernels' logic together, not the GPU:
 * timing, the memory model and the inline PTX are the device run's.
 *
 * EMU_DRIVER=N sets the driver version (13000); EMU_NO_BATCH hides
 * cuMemcpyBatchAsync.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <vector>
#include <map>
#include <mutex>
#include "kvrt_gpu_abi.h"
#include "emu.h"

typedef int CUresult;
enum { OK = 0, INVAL = 1, OOM = 2, NOTFOUND = 500, ALREADY = 712, NOTREG = 713, CAPUNSUP = 900, CAPINVAL = 901 };

#define K(name, T) extern "C" void name(const T a);
#define ATTN(hd) K(kvrt_decode_hd##hd##_f16, kvrt_gk_attn_args) K(kvrt_decode_hd##hd##_bf16, kvrt_gk_attn_args) K(kvrt_decode_hd##hd##_fp8, kvrt_gk_attn_args) \
	K(kvrt_decode_g8_hd##hd##_f16, kvrt_gk_attn_args) K(kvrt_decode_g8_hd##hd##_bf16, kvrt_gk_attn_args) K(kvrt_decode_g8_hd##hd##_fp8, kvrt_gk_attn_args) \
	K(kvrt_prefill_hd##hd##_f16, kvrt_gk_attn_args) K(kvrt_prefill_hd##hd##_bf16, kvrt_gk_attn_args) K(kvrt_prefill_hd##hd##_fp8, kvrt_gk_attn_args) \
	K(kvrt_prefill_tc_hd##hd##_f16, kvrt_gk_attn_args) K(kvrt_prefill_tc_hd##hd##_bf16, kvrt_gk_attn_args) K(kvrt_prefill_tc_hd##hd##_fp8, kvrt_gk_attn_args)
ATTN(64) ATTN(128) ATTN(256)
K(kvrt_attn_merge, kvrt_gk_merge_args)
K(kvrt_append_f16, kvrt_gk_append_args) K(kvrt_append_bf16, kvrt_gk_append_args) K(kvrt_append_fp8, kvrt_gk_append_args)
K(kvrt_copy_runs, kvrt_gk_copy_args)
K(kvrt_read_stream, kvrt_gk_read_args)

struct Fn { const char *name; int kind; void *fp; };
#define E(name, kind) { #name, kind, (void *)name },
#define EA(hd) E(kvrt_decode_hd##hd##_f16, 0) E(kvrt_decode_hd##hd##_bf16, 0) E(kvrt_decode_hd##hd##_fp8, 0) \
	E(kvrt_decode_g8_hd##hd##_f16, 0) E(kvrt_decode_g8_hd##hd##_bf16, 0) E(kvrt_decode_g8_hd##hd##_fp8, 0) \
	E(kvrt_prefill_hd##hd##_f16, 0) E(kvrt_prefill_hd##hd##_bf16, 0) E(kvrt_prefill_hd##hd##_fp8, 0) \
	E(kvrt_prefill_tc_hd##hd##_f16, 0) E(kvrt_prefill_tc_hd##hd##_bf16, 0) E(kvrt_prefill_tc_hd##hd##_fp8, 0)
static Fn fns[] = { EA(64) EA(128) EA(256) E(kvrt_attn_merge, 1) E(kvrt_append_f16, 2) E(kvrt_append_bf16, 2) E(kvrt_append_fp8, 2) E(kvrt_copy_runs, 3) E(kvrt_read_stream, 4) };

struct Node { int type; Fn *fn; std::vector<char> args; unsigned grid, block; uint64_t dst, src, n; };
static std::mutex mu;
static void *cap_stream; static bool capturing, cap_bad; static std::vector<Node> cap;
static std::map<uintptr_t, size_t> dev, reg;
static unsigned seed = 1;

static void run_kernel(Fn *f, const void *args, unsigned grid, unsigned block)
{
	unsigned s = seed++;
	switch (f->kind) {
	case 0: { kvrt_gk_attn_args a; memcpy(&a, args, sizeof(a)); kvrt_emu::launch([&] { ((void (*)(kvrt_gk_attn_args))f->fp)(a); }, grid, block, s); break; }
	case 1: { kvrt_gk_merge_args a; memcpy(&a, args, sizeof(a)); kvrt_emu::launch([&] { ((void (*)(kvrt_gk_merge_args))f->fp)(a); }, grid, block, s); break; }
	case 2: { kvrt_gk_append_args a; memcpy(&a, args, sizeof(a)); kvrt_emu::launch([&] { ((void (*)(kvrt_gk_append_args))f->fp)(a); }, grid, block, s); break; }
	case 4: { kvrt_gk_read_args a; memcpy(&a, args, sizeof(a)); kvrt_emu::launch([&] { ((void (*)(kvrt_gk_read_args))f->fp)(a); }, grid, block, s); break; }
	default: { kvrt_gk_copy_args a; memcpy(&a, args, sizeof(a)); kvrt_emu::launch([&] { ((void (*)(kvrt_gk_copy_args))f->fp)(a); }, grid, block, s); break; }
	}
}
static size_t argsize(int kind) { return kind == 0 ? sizeof(kvrt_gk_attn_args) : kind == 1 ? sizeof(kvrt_gk_merge_args) : kind == 2 ? sizeof(kvrt_gk_append_args) : kind == 4 ? sizeof(kvrt_gk_read_args) : sizeof(kvrt_gk_copy_args); }
static bool in(std::map<uintptr_t, size_t> &m, uintptr_t p, size_t n)
{
	auto it = m.upper_bound(p);
	if (it == m.begin()) return false;
	--it;
	return p >= it->first && p + n <= it->first + it->second;
}
/* a synchronous call while a global capture is on: illegal */
static bool sync_forbidden(void) { if (capturing) { cap_bad = true; return true; } return false; }
static CUresult async_copy(uint64_t d, uint64_t s, size_t n, void *stream)
{
	if (capturing && stream == cap_stream) {
		if (!(in(dev, s, n) || in(reg, s, n)) || !(in(dev, d, n) || in(reg, d, n))) { cap_bad = true; return CAPUNSUP; }
		cap.push_back(Node{ 1, nullptr, {}, 0, 0, d, s, n });
		return OK;
	}
	memmove((void *)d, (void *)s, n);
	return OK;
}

extern "C" {
static CUresult Init(unsigned) { return OK; }
static CUresult DriverGetVersion(int *v) { *v = getenv("EMU_DRIVER") ? atoi(getenv("EMU_DRIVER")) : 13000; return OK; }
static CUresult DeviceGetCount(int *n) { *n = 1; return OK; }
static CUresult DeviceGet(int *d, int o) { if (o != 0) return 101; *d = 0; return OK; }
static CUresult DeviceGetName(char *b, int len, int) { snprintf(b, len, "Emulated GPU (cuda/tests/emu.h)"); return OK; }
static CUresult DeviceGetAttribute(int *v, int attr, int) { *v = attr == 16 ? 132 : attr == 75 ? 9 : attr == 76 ? 0 : 1; return OK; }
static CUresult DeviceTotalMem(size_t *b, int) { *b = 80ULL << 30; return OK; }
static CUresult PrimaryCtxRetain(void **c, int) { *c = (void *)0x100; return OK; }
static CUresult PrimaryCtxRelease(int) { return OK; }
static CUresult CtxPush(void *) { return OK; }
static CUresult CtxPop(void **c) { if (c) *c = (void *)0x100; return OK; }
static CUresult ModuleLoadData(void **m, const void *) { *m = (void *)0x200; return OK; }
static CUresult ModuleUnload(void *) { return OK; }
static CUresult ModuleGetFunction(void **f, void *, const char *name)
{
	for (auto &e : fns) if (!strcmp(e.name, name)) { *f = &e; return OK; }
	return NOTFOUND;
}
/* the dynamic shared memory a function may take (the driver's default: 48 KB) */
static std::map<Fn *, int> max_dyn_smem;
static CUresult FuncSetAttribute(void *f, int attr, int v)
{
	if (attr != 8 || v < 0 || v > 227 * 1024) return INVAL;
	std::lock_guard<std::mutex> g(mu);
	max_dyn_smem[(Fn *)f] = v; return OK;
}
static CUresult LaunchKernel(void *f, unsigned gx, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned shm, void *stream, void **params, void **)
{
	std::lock_guard<std::mutex> g(mu);
	Fn *fn = (Fn *)f;
	if (shm > 48 * 1024 && (int)shm > max_dyn_smem[fn]) return INVAL;
	if (capturing && stream == cap_stream) {
		Node n{ 0, fn, std::vector<char>((char *)params[0], (char *)params[0] + argsize(fn->kind)), gx, bx, 0, 0, 0 };
		cap.push_back(n);
		return OK;
	}
	run_kernel(fn, params[0], gx, bx);
	return OK;
}
static CUresult MemAlloc(uint64_t *p, size_t n)
{
	if (sync_forbidden()) return CAPUNSUP;
	if (n > (64ULL << 30)) return OOM;
	void *m = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
	if (!m) return OOM;
	memset(m, 0xcd, n);	/* garbage, as cuMemAlloc's */
	std::lock_guard<std::mutex> g(mu);
	dev[(uintptr_t)m] = n; *p = (uintptr_t)m; return OK;
}
static CUresult MemFree(uint64_t p) { std::lock_guard<std::mutex> g(mu); if (!dev.erase(p)) return INVAL; free((void *)p); return OK; }
static CUresult MemAllocAsync(uint64_t *p, size_t n, void *) { return MemAlloc(p, n); }
static CUresult MemFreeAsync(uint64_t p, void *) { return MemFree(p); }
static CUresult Memcpy(uint64_t d, uint64_t s, size_t n) { if (sync_forbidden()) return CAPUNSUP; memmove((void *)d, (void *)s, n); return OK; }
static CUresult MemcpyAsync(uint64_t d, uint64_t s, size_t n, void *st) { std::lock_guard<std::mutex> g(mu); return async_copy(d, s, n, st); }
static CUresult MemcpyHtoD(uint64_t d, const void *s, size_t n) { return Memcpy(d, (uint64_t)s, n); }
static CUresult MemcpyHtoDAsync(uint64_t d, const void *s, size_t n, void *st) { return MemcpyAsync(d, (uint64_t)s, n, st); }
static CUresult MemHostRegister(void *p, size_t n, unsigned)
{
	std::lock_guard<std::mutex> g(mu);
	for (auto &r : reg) if ((uintptr_t)p < r.first + r.second && r.first < (uintptr_t)p + n) return ALREADY;
	reg[(uintptr_t)p] = n; return OK;
}
static CUresult MemHostUnregister(void *p) { std::lock_guard<std::mutex> g(mu); return reg.erase((uintptr_t)p) ? OK : NOTREG; }
static CUresult StreamSynchronize(void *) { if (sync_forbidden()) return CAPUNSUP; return OK; }
static CUresult StreamCreate(void **s, unsigned) { *s = malloc(1); return OK; }
static CUresult StreamDestroy(void *s) { free(s); return OK; }
static CUresult EventCreate(void **e, unsigned) { *e = malloc(1); return OK; }
static CUresult EventDestroy(void *e) { free(e); return OK; }
static CUresult EventRecord(void *, void *) { return OK; }
static CUresult StreamWaitEvent(void *, void *, unsigned) { return OK; }
static CUresult EventSynchronize(void *) { return OK; }
static CUresult EventElapsedTime(float *ms, void *, void *) { *ms = 1.0f; return OK; }
static CUresult BatchV2(uint64_t *d, uint64_t *s, size_t *n, size_t count, void *, size_t *, size_t, void *st)
{
	std::lock_guard<std::mutex> g(mu);
	for (size_t i = 0; i < count; i++) { CUresult r = async_copy(d[i], s[i], n[i], st); if (r) return r; }
	return OK;
}
static CUresult GetErrorName(CUresult r, const char **s) { static char b[32]; snprintf(b, sizeof(b), "EMU_ERROR_%d", r); *s = b; return OK; }
static CUresult BeginCapture(void *s, int) { std::lock_guard<std::mutex> g(mu); capturing = true; cap_bad = false; cap_stream = s; cap.clear(); return OK; }
static CUresult EndCapture(void *, void **graph)
{
	std::lock_guard<std::mutex> g(mu);
	capturing = false;
	if (cap_bad) { *graph = nullptr; return CAPINVAL; }
	*graph = new std::vector<Node>(cap); return OK;
}
static CUresult GraphInstantiate(void **e, void *graph, unsigned long long) { *e = new std::vector<Node>(*(std::vector<Node> *)graph); return OK; }
static CUresult GraphLaunch(void *e, void *)
{
	std::lock_guard<std::mutex> g(mu);
	for (auto &n : *(std::vector<Node> *)e)
		if (n.type == 0) run_kernel(n.fn, n.args.data(), n.grid, n.block); else memmove((void *)n.dst, (void *)n.src, n.n);
	return OK;
}
static CUresult GraphDestroy(void *g) { delete (std::vector<Node> *)g; return OK; }

struct Ent { const char *name; void *fp; };
#define P(n, f) { n, (void *)f },
static Ent ents[] = {
	P("cuInit", Init) P("cuDriverGetVersion", DriverGetVersion) P("cuDeviceGetCount", DeviceGetCount) P("cuDeviceGet", DeviceGet)
	P("cuDeviceGetName", DeviceGetName) P("cuDeviceGetAttribute", DeviceGetAttribute) P("cuDeviceTotalMem", DeviceTotalMem)
	P("cuDevicePrimaryCtxRetain", PrimaryCtxRetain) P("cuDevicePrimaryCtxRelease", PrimaryCtxRelease) P("cuCtxPushCurrent", CtxPush)
	P("cuCtxPopCurrent", CtxPop) P("cuModuleLoadData", ModuleLoadData) P("cuModuleUnload", ModuleUnload) P("cuModuleGetFunction", ModuleGetFunction) P("cuFuncSetAttribute", FuncSetAttribute)
	P("cuLaunchKernel", LaunchKernel) P("cuMemAlloc", MemAlloc) P("cuMemFree", MemFree) P("cuMemcpy", Memcpy) P("cuMemcpyAsync", MemcpyAsync)
	P("cuMemcpyHtoD", MemcpyHtoD) P("cuMemcpyHtoDAsync", MemcpyHtoDAsync) P("cuMemAllocAsync", MemAllocAsync) P("cuMemFreeAsync", MemFreeAsync)
	P("cuMemHostRegister", MemHostRegister) P("cuMemHostUnregister", MemHostUnregister) P("cuStreamSynchronize", StreamSynchronize)
	P("cuStreamCreate", StreamCreate) P("cuStreamDestroy", StreamDestroy) P("cuEventCreate", EventCreate) P("cuEventDestroy", EventDestroy)
	P("cuEventRecord", EventRecord) P("cuStreamWaitEvent", StreamWaitEvent) P("cuEventSynchronize", EventSynchronize)
	P("cuEventElapsedTime", EventElapsedTime) P("cuGetErrorName", GetErrorName) P("cuStreamBeginCapture", BeginCapture)
	P("cuStreamEndCapture", EndCapture) P("cuGraphInstantiateWithFlags", GraphInstantiate) P("cuGraphLaunch", GraphLaunch)
	P("cuGraphExecDestroy", GraphDestroy) P("cuGraphDestroy", GraphDestroy)
};
CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long, int *status)
{
	*fn = nullptr;
	if (!strcmp(name, "cuMemcpyBatchAsync")) {
		if (version >= 13000 && !getenv("EMU_NO_BATCH")) { *fn = (void *)BatchV2; if (status) *status = 0; return OK; }
		if (status) *status = 1;
		return NOTFOUND;
	}
	for (auto &e : ents) if (!strcmp(e.name, name)) { *fn = e.fp; if (status) *status = 0; return OK; }
	if (status) *status = 1;
	return NOTFOUND;
}
}
