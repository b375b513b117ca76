/* SPDX-License-Identifier: MIT */
/*
 * gpu_calib.h: what AUTO's first-use calibration (gpu_copy.c) decides
 * with, without CUDA, so that the unit tests (test_gpu_calib) run it:
 *
 *   - gpu_calib_pick(): the threshold from the measured rates;
 *   - gpu_calib_buffer_map(): the host buffer it copies from, of the kind
 *     pools are: 2 MiB aligned and advised MADV_HUGEPAGE (pools are
 *     THP- or hugetlb-backed), touched so that the pages exist before the
 *     driver pins them;
 *   - gpu_calib_thp_bytes(): how much of it the kernel backed with huge
 *     pages (AnonHugePages in /proc/self/smaps), for the record.
 */
#ifndef KVRT_GPU_CALIB_H
#define KVRT_GPU_CALIB_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "kvrt.h"

#define GPU_CALIB_ALIGN (2ULL << 20)

/* The kernel won at size i; a size either side failed to measure (rate 0) is a loss. */
static inline bool gpu_calib_won(const struct kvrt_gpu_copy_calib *c, uint32_t i)
{
	const double k = c->sizes[i].kernel_gbps, l = c->sizes[i].large_gbps;

	return k > 0 && l > 0 && k > l;
}

/*
 * The largest run size at which the copy kernel beat the large-run path,
 * scanning sizes upwards and stopping at the second loss in a row (larger
 * runs favour the copy engines more).  0: never use the kernel.
 */
static inline uint64_t gpu_calib_pick(const struct kvrt_gpu_copy_calib *c)
{
	uint64_t best = 0;
	uint32_t i, losses = 0;

	for (i = 0; i < c->num_sizes && i < KVRT_GPU_CALIB_MAX; i++) {
		if (gpu_calib_won(c, i)) {
			best = c->sizes[i].run_bytes;
			losses = 0;
		} else if (++losses == 2) {
			break;
		}
	}
	return best;
}

/* Nothing larger can change the pick: the last two sizes measured were losses. */
static inline bool gpu_calib_settled(const struct kvrt_gpu_copy_calib *c)
{
	const uint32_t n = c->num_sizes;

	return n >= 2 && !gpu_calib_won(c, n - 1) && !gpu_calib_won(c, n - 2);
}

/*
 * bytes (a multiple of GPU_CALIB_ALIGN) of anonymous memory at a
 * GPU_CALIB_ALIGN boundary, advised MADV_HUGEPAGE and touched; NULL on
 * failure.  *advise_errno: 0, or why madvise refused (the buffer is still
 * usable, on small pages).  Free with munmap(p, bytes).
 */
static inline void *gpu_calib_buffer_map(size_t bytes, int *advise_errno)
{
	size_t len = bytes + GPU_CALIB_ALIGN, head;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;

	*advise_errno = 0;
	if (m == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)m + GPU_CALIB_ALIGN - 1) & ~(uintptr_t)(GPU_CALIB_ALIGN - 1));
	head = (size_t)(p - m);
	if (head)
		munmap(m, head);
	munmap(p + bytes, len - head - bytes);
	if (madvise(p, bytes, MADV_HUGEPAGE))
		*advise_errno = errno;
	memset(p, 0x5a, bytes);
	return p;
}

/*
 * Bytes of huge pages backing the mapping that holds addr, and whether it
 * is advised MADV_HUGEPAGE ("hg" in VmFlags); -1 where smaps cannot be
 * read or has no such mapping.
 */
static inline int64_t gpu_calib_thp_bytes(const void *addr, bool *advised)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	bool in = false;
	int64_t kb = -1;

	*advised = false;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;
		long long v;

		/* a mapping's first line, "lo-hi perms ..."; no field name parses so */
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2) {
			if (in)
				break;	/* past our mapping */
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (!in)
			continue;
		if (sscanf(line, "AnonHugePages: %lld kB", &v) == 1)
			kb = v;
		else if (!strncmp(line, "VmFlags:", 8))
			*advised = strstr(line, " hg") != NULL;
	}
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

#endif /* KVRT_GPU_CALIB_H */
