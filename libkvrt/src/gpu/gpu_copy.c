// SPDX-License-Identifier: MIT
/*
 * gpu_copy.c: block copies between the GPU and registered host memory
 * (gpu_register.c), the pool's spaces included.
 *
 * A copy becomes a list of runs: kvrt_copy_each_run() gives the largest
 * pieces both layouts keep contiguous (a whole block between two
 * block-major arrays), then runs that touch end to end on both sides are
 * joined.  The list then goes in one call: one cuMemcpyBatchAsync, one
 * launch of the copy kernel (its run table uploaded on the stream into
 * stream-ordered memory), or, last, one cuMemcpyAsync per run.
 *
 * AUTO sends runs up to kernel_copy_max through the kernel and the rest
 * through the batch (else memcpy).  The threshold is measured once per
 * handle, at the first AUTO copy: each method copies 16 MiB host to
 * device in runs of 4 KiB .. 1 MiB from a buffer of the pools' kind
 * (gpu_calib.h), and the threshold is the largest run at which the
 * kernel was the faster (gpu_calib_pick).  $KVRT_GPU_KERNEL_COPY_MAX
 * (bytes) sets it instead.  kvrt_gpu_copy_calibration() and the log say
 * what was measured.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gpu_calib.h"
#include "gpu_internal.h"

#define CALIB_BYTES (16ULL << 20)

struct run_list {
	struct kvrt_gk_copy_run *runs;
	uint32_t n, cap;
	int err;
};

int gpu_copy_init(struct kvrt_gpu *g)
{
	int ret;

	pthread_mutex_init(&g->lock, NULL);
	ret = gpu_check(g, g->cu.StreamCreate(&g->own_stream, KVRT_CU_STREAM_NON_BLOCKING),
			"cuStreamCreate");
	if (!ret)
		ret = gpu_check(g, g->cu.EventCreate(&g->fence_in, KVRT_CU_EVENT_DEFAULT),
				"cuEventCreate");
	if (!ret)
		ret = gpu_check(g, g->cu.EventCreate(&g->fence_out, KVRT_CU_EVENT_DEFAULT),
				"cuEventCreate");
	if (ret)
		gpu_copy_fini(g);
	return ret;
}

/* With the context pushed. */
void gpu_copy_fini(struct kvrt_gpu *g)
{
	gpu_reg_free_all(g);
	if (g->fence_out)
		g->cu.EventDestroy(g->fence_out);
	if (g->fence_in)
		g->cu.EventDestroy(g->fence_in);
	if (g->own_stream)
		g->cu.StreamDestroy(g->own_stream);
	g->fence_in = g->fence_out = NULL;
	g->own_stream = NULL;
	pthread_mutex_destroy(&g->lock);
}

static void collect_run(void *arg, char *dst, const char *src, size_t bytes)
{
	struct run_list *l = arg;
	struct kvrt_gk_copy_run *last = l->n ? &l->runs[l->n - 1] : NULL;

	if (l->err)
		return;
	if (last && last->src + last->bytes == (uintptr_t)src &&
	    last->dst + last->bytes == (uintptr_t)dst) {
		last->bytes += bytes;
		return;
	}
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 256;
		struct kvrt_gk_copy_run *runs = realloc(l->runs, cap * sizeof(*runs));

		if (!runs) {
			l->err = -ENOMEM;
			return;
		}
		l->runs = runs;
		l->cap = cap;
	}
	l->runs[l->n++] = (struct kvrt_gk_copy_run){ (uintptr_t)src, (uintptr_t)dst, bytes };
}

static int copy_memcpy(struct kvrt_gpu *g, const struct kvrt_gk_copy_run *runs, uint32_t n,
		       CUstream stream)
{
	uint32_t i;
	int ret = 0;

	for (i = 0; i < n && !ret; i++)
		ret = gpu_check(g, g->cu.MemcpyAsync(runs[i].dst, runs[i].src, runs[i].bytes, stream),
				"cuMemcpyAsync");
	return ret;
}

/*
 * The kernel copies a run with one CTA, and a CTA keeps few bytes in
 * flight over PCIe: on an H200, 256 runs of 64 KiB lost to the batched
 * memcpy while 8192 runs of 32 KiB moved 1.9 times faster.  Runs are cut
 * into pieces of this size (a multiple of 16: alignments stay) so the
 * CTAs in flight follow the bytes, not the run count.
 */
#define COPY_PIECE_BYTES (16U << 10)

static int copy_kernel(struct kvrt_gpu *g, const struct kvrt_gk_copy_run *runs, uint32_t n,
		       CUstream stream)
{
	struct kvrt_gk_copy_args a;
	struct kvrt_gk_copy_run *pieces = NULL;
	uint64_t np = 0, off;
	size_t bytes;
	CUdeviceptr table;
	uint32_t grid, i;
	int ret;

	if (!n)
		return 0;
	if (!g->host_ptr_ok)
		return -ENOTSUP;
	for (i = 0; i < n; i++)
		np += runs[i].bytes ? (runs[i].bytes + COPY_PIECE_BYTES - 1) / COPY_PIECE_BYTES : 1;
	if (np > UINT32_MAX)
		return -E2BIG;
	if (np > n) {
		pieces = malloc(np * sizeof(*pieces));
		if (!pieces)
			return -ENOMEM;
		np = 0;
		for (i = 0; i < n; i++) {
			off = 0;
			do {
				uint64_t len = runs[i].bytes - off;

				if (len > COPY_PIECE_BYTES)
					len = COPY_PIECE_BYTES;
				pieces[np++] = (struct kvrt_gk_copy_run){ runs[i].src + off,
									 runs[i].dst + off, len };
				off += len;
			} while (off < runs[i].bytes);
		}
		runs = pieces;
		n = (uint32_t)np;
	}
	a = (struct kvrt_gk_copy_args){ .num_runs = n };
	bytes = (size_t)n * sizeof(*runs);
	ret = gpu_check(g, g->cu.MemAllocAsync(&table, bytes, stream), "cuMemAllocAsync");
	if (ret)
		goto out;
	/* From pageable memory: staged before the call returns. */
	ret = gpu_check(g, g->cu.MemcpyHtoDAsync(table, runs, bytes, stream), "copy table upload");
	if (!ret) {
		a.runs = table;
		grid = n < 65535 ? n : 65535;
		ret = gpu_launch(g, g->copy, grid, KVRT_GK_COPY_THREADS, &a, stream,
				 "copy kernel launch");
	}
	g->cu.MemFreeAsync(table, stream);
out:
	free(pieces);
	return ret;
}

static int copy_batch(struct kvrt_gpu *g, const struct kvrt_gk_copy_run *runs, uint32_t n,
		      CUstream stream)
{
	struct kvrt_cu_memcpy_attrs attr = { .src_access_order = KVRT_CU_SRC_ACCESS_ORDER_STREAM };
	CUdeviceptr *dsts, *srcs;
	size_t *sizes, idx0 = 0, fail = 0;
	CUstream s = stream ? stream : g->own_stream;
	uint32_t i;
	int ret;

	if (!n)
		return 0;
	if (!g->cu.MemcpyBatchAsyncV1 && !g->cu.MemcpyBatchAsyncV2)
		return -ENOTSUP;
	dsts = malloc(n * sizeof(*dsts));
	srcs = malloc(n * sizeof(*srcs));
	sizes = malloc(n * sizeof(*sizes));
	if (!dsts || !srcs || !sizes) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (i = 0; i < n; i++) {
		dsts[i] = runs[i].dst;
		srcs[i] = runs[i].src;
		sizes[i] = runs[i].bytes;
	}
	/* The legacy stream is not allowed: run on ours, ordered both ways. */
	if (!stream) {
		ret = gpu_check(g, g->cu.EventRecord(g->fence_in, NULL), "cuEventRecord");
		if (!ret)
			ret = gpu_check(g, g->cu.StreamWaitEvent(s, g->fence_in, 0),
					"cuStreamWaitEvent");
		if (ret)
			goto out_free;
	}
	if (g->cu.MemcpyBatchAsyncV2)
		ret = gpu_check(g, g->cu.MemcpyBatchAsyncV2(dsts, srcs, sizes, n, &attr, &idx0, 1, s),
				"cuMemcpyBatchAsync");
	else
		ret = gpu_check(g, g->cu.MemcpyBatchAsyncV1(dsts, srcs, sizes, n, &attr, &idx0, 1,
							    &fail, s), "cuMemcpyBatchAsync");
	if (!stream && !ret) {
		ret = gpu_check(g, g->cu.EventRecord(g->fence_out, s), "cuEventRecord");
		if (!ret)
			ret = gpu_check(g, g->cu.StreamWaitEvent(NULL, g->fence_out, 0),
					"cuStreamWaitEvent");
	}
out_free:
	free(sizes);
	free(srcs);
	free(dsts);
	return ret;
}

static int copy_large(struct kvrt_gpu *g, const struct kvrt_gk_copy_run *runs, uint32_t n,
		      CUstream stream)
{
	if (g->info.batch_memcpy)
		return copy_batch(g, runs, n, stream);
	return copy_memcpy(g, runs, n, stream);
}

/* Seconds for fn to copy CALIB_BYTES in runs of run bytes, or -1. */
static double calib_time(struct kvrt_gpu *g, int (*fn)(struct kvrt_gpu *,
						       const struct kvrt_gk_copy_run *, uint32_t,
						       CUstream),
			 struct kvrt_gk_copy_run *runs, uint32_t n)
{
	CUevent a = NULL, b = NULL;
	float ms = -1;
	int rep;

	if (g->cu.EventCreate(&a, KVRT_CU_EVENT_DEFAULT) ||
	    g->cu.EventCreate(&b, KVRT_CU_EVENT_DEFAULT))
		goto out;
	if (fn(g, runs, n, g->own_stream))	/* warm-up */
		goto out;
	g->cu.EventRecord(a, g->own_stream);
	for (rep = 0; rep < 3; rep++)
		if (fn(g, runs, n, g->own_stream))
			goto out;
	g->cu.EventRecord(b, g->own_stream);
	if (g->cu.EventSynchronize(b) || g->cu.EventElapsedTime(&ms, a, b))
		ms = -1;
out:
	if (a)
		g->cu.EventDestroy(a);
	if (b)
		g->cu.EventDestroy(b);
	return ms < 0 ? -1 : ms;
}

/*
 * Both methods over runs of run bytes from host to dev, scattered as a
 * block table is (n is a power of two, so an odd multiplier permutes),
 * into *p as GB/s (0 where one failed).
 */
static void calib_size(struct kvrt_gpu *g, char *host, CUdeviceptr dev,
		       struct kvrt_gk_copy_run *runs, uint64_t run, struct kvrt_gpu_copy_calib *c)
{
	uint32_t n = (uint32_t)(CALIB_BYTES / run), i;
	double tk, tl, bytes = 3.0 * CALIB_BYTES;	/* calib_time's repetitions */

	for (i = 0; i < n; i++)
		runs[i] = (struct kvrt_gk_copy_run){ (uintptr_t)host + i * run,
						     dev + (uint64_t)((i * 40503u) & (n - 1)) * run,
						     run };
	tk = calib_time(g, copy_kernel, runs, n);
	tl = calib_time(g, copy_large, runs, n);
	c->sizes[c->num_sizes].run_bytes = run;
	c->sizes[c->num_sizes].kernel_gbps = tk > 0 ? bytes / (tk * 1e-3) / 1e9 : 0;
	c->sizes[c->num_sizes].large_gbps = tl > 0 ? bytes / (tl * 1e-3) / 1e9 : 0;
	kvrt_log(g->k, KVRT_LOG_INFO, "gpu %d: copy calibration, %llu-byte runs: kernel %.2f "
		 "GB/s, %s %.2f GB/s", g->ordinal, (unsigned long long)run,
		 c->sizes[c->num_sizes].kernel_gbps, g->info.batch_memcpy ? "batch" : "memcpy",
		 c->sizes[c->num_sizes].large_gbps);
	c->num_sizes++;
}

/*
 * Sizes are measured upwards until the pick is settled (two losses in a
 * row), and the record keeps every size measured, so it shows what the
 * decision saw.  The buffer is of the kind the
 * pools are: on an H200 a 4 KiB-page buffer made the kernel look slower
 * past 16 KiB runs than it is on the THP-backed pool (0.46-0.50 of the
 * limit at 32 KiB through AUTO, 0.75-0.78 through the kernel).
 */
static void calib_measure(struct kvrt_gpu *g, struct kvrt_gpu_copy_calib *c)
{
	struct kvrt_gk_copy_run *runs = malloc((CALIB_BYTES / 4096) * sizeof(*runs));
	char *host = gpu_calib_buffer_map(CALIB_BYTES, &c->buffer_advise_errno);
	CUdeviceptr dev = 0;
	bool advised;
	uint64_t run;

	c->source = KVRT_GPU_CALIB_FAILED;
	c->buffer_bytes = CALIB_BYTES;
	if (!host || !runs || g->cu.MemAlloc(&dev, CALIB_BYTES))
		goto out;
	c->buffer_thp_bytes = gpu_calib_thp_bytes(host, &advised);
	if (g->cu.MemHostRegister(host, CALIB_BYTES, KVRT_CU_MEMHOSTREGISTER_PORTABLE |
				  KVRT_CU_MEMHOSTREGISTER_DEVICEMAP))
		goto out;
	for (run = 4096; run <= (1 << 20) && !gpu_calib_settled(c); run *= 2)
		calib_size(g, host, dev, runs, run, c);
	g->cu.MemHostUnregister(host);
	c->source = KVRT_GPU_CALIB_MEASURED;
	c->kernel_copy_max = gpu_calib_pick(c);
out:
	if (dev)
		g->cu.MemFree(dev);
	if (host)
		munmap(host, CALIB_BYTES);
	free(runs);
}

/* With the context pushed and g->lock held. */
static void calibrate(struct kvrt_gpu *g)
{
	const char *env = getenv("KVRT_GPU_KERNEL_COPY_MAX");
	struct kvrt_gpu_copy_calib *c = &g->calib;

	g->calibrated = true;
	*c = (struct kvrt_gpu_copy_calib){ .buffer_thp_bytes = -1 };
	if (env && *env) {
		c->source = KVRT_GPU_CALIB_ENV;
		c->kernel_copy_max = strtoull(env, NULL, 0);
	} else if (!g->host_ptr_ok) {
		c->source = KVRT_GPU_CALIB_NO_KERNEL;
	} else {
		calib_measure(g, c);
		kvrt_log(g->k, KVRT_LOG_INFO, "gpu %d: copy kernel for runs up to %llu bytes "
			 "(16 MiB buffer, %lld bytes on huge pages, madvise %s)", g->ordinal,
			 (unsigned long long)c->kernel_copy_max, (long long)c->buffer_thp_bytes,
			 c->buffer_advise_errno ? strerror(c->buffer_advise_errno) : "ok");
	}
	g->info.kernel_copy_max = c->kernel_copy_max;
}

int kvrt_gpu_copy_calibration(struct kvrt_gpu *g, struct kvrt_gpu_copy_calib *out)
{
	int ret;

	if (!g || !out)
		return -EINVAL;
	ret = gpu_enter(g);
	if (ret)
		return ret;
	pthread_mutex_lock(&g->lock);
	if (!g->calibrated)
		calibrate(g);
	*out = g->calib;
	pthread_mutex_unlock(&g->lock);
	gpu_leave(g);
	return 0;
}

/* AUTO: small runs to the kernel, the others batched, each one call. */
static int copy_auto(struct kvrt_gpu *g, struct kvrt_gk_copy_run *runs, uint32_t n,
		     CUstream stream)
{
	uint32_t small = 0, i;
	uint64_t max;
	int ret;

	pthread_mutex_lock(&g->lock);
	if (!g->calibrated)
		calibrate(g);
	max = g->info.kernel_copy_max;
	pthread_mutex_unlock(&g->lock);
	/* Partition in place: runs up to max first. */
	for (i = 0; i < n; i++) {
		if (runs[i].bytes <= max) {
			struct kvrt_gk_copy_run t = runs[small];

			runs[small++] = runs[i];
			runs[i] = t;
		}
	}
	ret = copy_kernel(g, runs, small, stream);
	if (!ret)
		ret = copy_large(g, runs + small, n - small, stream);
	return ret;
}

static int reg_cover_runs(struct kvrt_gpu *g, const struct kvrt_block_array *dst,
			  const struct kvrt_block_array *src, const struct run_list *l)
{
	uint64_t dend = 0, send = 0;
	uint32_t i;
	int ret;

	for (i = 0; i < l->n; i++) {
		if (l->runs[i].dst + l->runs[i].bytes > dend)
			dend = l->runs[i].dst + l->runs[i].bytes;
		if (l->runs[i].src + l->runs[i].bytes > send)
			send = l->runs[i].src + l->runs[i].bytes;
	}
	ret = gpu_reg_cover(g, dst->base, dend);
	return ret ? ret : gpu_reg_cover(g, src->base, send);
}

int kvrt_gpu_copy_blocks(struct kvrt_gpu *g, const struct kvrt_block_array *dst,
			 const struct kvrt_block_array *src, const struct kvrt_block_pair *pairs,
			 uint32_t count, enum kvrt_gpu_copy_method method, void *stream)
{
	struct run_list l = { 0 };
	CUstream s = (CUstream)stream;
	int ret;

	if (!g || method > KVRT_GPU_COPY_MEMCPY)
		return -EINVAL;
	ret = kvrt_copy_check(dst, src, pairs, count);
	if (ret || !count)
		return ret;
	if (method == KVRT_GPU_COPY_BATCH && !g->info.batch_memcpy)
		return -ENOTSUP;
	if (method == KVRT_GPU_COPY_KERNEL && !g->host_ptr_ok)
		return -ENOTSUP;
	kvrt_copy_each_run(dst->layout, dst->base, dst->scales, src->layout, src->base,
			   src->scales, pairs, count, collect_run, &l);
	if (l.err) {
		free(l.runs);
		return l.err;
	}
	ret = reg_cover_runs(g, dst, src, &l);
	if (ret)
		goto out_free;
	ret = gpu_enter(g);
	if (ret)
		goto out_free;
	switch (method) {
	case KVRT_GPU_COPY_BATCH:
		ret = copy_batch(g, l.runs, l.n, s);
		break;
	case KVRT_GPU_COPY_KERNEL:
		ret = copy_kernel(g, l.runs, l.n, s);
		break;
	case KVRT_GPU_COPY_MEMCPY:
		ret = copy_memcpy(g, l.runs, l.n, s);
		break;
	default:
		ret = copy_auto(g, l.runs, l.n, s);
		break;
	}
	gpu_leave(g);
out_free:
	free(l.runs);
	return ret;
}
