// SPDX-License-Identifier: MIT
/*
 * gpu_read.c: kvrt_gpu_read_stream(), device memory read by a kernel that
 * only reads (cuda/bench_read.cu): the limit a reader such as decode
 * attention is measured against.  A device copy's rate counts bytes
 * written too, which a reader never pays for.
 *
 * The grid is a few CTAs per SM (grid-stride), enough bytes in flight to
 * cover the memory latency; each CTA writes one 64-bit sum.  Timed calls
 * (sum NULL) share one per-handle array for those sums that nothing
 * reads; a checked call has its own and reads it back.
 */
#include <errno.h>
#include <stdlib.h>

#include "gpu_internal.h"

#define READ_CTAS_PER_SM 4

static uint32_t read_grid(const struct kvrt_gpu *g, uint64_t units)
{
	uint64_t want = (units + KVRT_GK_READ_THREADS - 1) / KVRT_GK_READ_THREADS;
	uint64_t most = (uint64_t)g->info.sm_count * READ_CTAS_PER_SM;

	return (uint32_t)(want < most ? (want ? want : 1) : most);
}

/* The shared sums array, made at the first timed call. */
static int read_scratch(struct kvrt_gpu *g, CUdeviceptr *out)
{
	int ret = 0;

	pthread_mutex_lock(&g->lock);
	if (!g->read_sums)
		ret = gpu_check(g, g->cu.MemAlloc(&g->read_sums, (size_t)g->info.sm_count *
						  READ_CTAS_PER_SM * sizeof(uint64_t)),
				"cuMemAlloc");
	*out = g->read_sums;
	pthread_mutex_unlock(&g->lock);
	return ret;
}

/* Launch, wait, and add up the CTAs' sums into *sum. */
static int read_checked(struct kvrt_gpu *g, struct kvrt_gk_read_args *a, uint32_t grid,
			CUstream s, uint64_t *sum)
{
	uint64_t *host = malloc(grid * sizeof(*host));
	CUdeviceptr sums = 0;
	uint32_t i;
	int ret;

	if (!host)
		return -ENOMEM;
	ret = gpu_check(g, g->cu.MemAlloc(&sums, grid * sizeof(*host)), "cuMemAlloc");
	if (ret)
		goto out_free_host;
	a->sums = sums;
	ret = gpu_launch(g, g->read, grid, KVRT_GK_READ_THREADS, a, s, "read stream launch");
	if (!ret)
		ret = gpu_check(g, g->cu.StreamSynchronize(s), "cuStreamSynchronize");
	if (!ret)
		ret = gpu_check(g, g->cu.Memcpy((CUdeviceptr)(uintptr_t)host, sums,
						grid * sizeof(*host)), "cuMemcpy");
	for (*sum = 0, i = 0; !ret && i < grid; i++)
		*sum += host[i];
	g->cu.MemFree(sums);
out_free_host:
	free(host);
	return ret;
}

int kvrt_gpu_read_stream(struct kvrt_gpu *g, const void *src, size_t bytes, uint64_t *sum,
			 void *stream)
{
	struct kvrt_gk_read_args a = { .src = (uintptr_t)src, .units = bytes / 16 };
	uint32_t grid;
	int ret;

	if (!g || (!src && bytes) || (((uintptr_t)src | bytes) & 15))
		return -EINVAL;
	if (sum)
		*sum = 0;
	if (!bytes)
		return 0;
	grid = read_grid(g, a.units);
	ret = gpu_enter(g);
	if (ret)
		return ret;
	if (sum) {
		ret = read_checked(g, &a, grid, (CUstream)stream, sum);
	} else {
		CUdeviceptr sums = 0;

		ret = read_scratch(g, &sums);
		a.sums = sums;
		if (!ret)
			ret = gpu_launch(g, g->read, grid, KVRT_GK_READ_THREADS, &a,
					 (CUstream)stream, "read stream launch");
	}
	gpu_leave(g);
	return ret;
}
