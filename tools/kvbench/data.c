// SPDX-License-Identifier: GPL-2.0
/*
 * data.c: test data for the subcommands (data.h).
 */
#include <sys/mman.h>

#include "data.h"

uint64_t kvb_xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

void kvb_shuffle(uint32_t *v, uint32_t n, uint64_t *seed)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		v[i] = i;
	for (i = n ? n - 1 : 0; i > 0; i--) {
		uint32_t j = (uint32_t)(kvb_xorshift(seed) % (i + 1)), t = v[i];

		v[i] = v[j];
		v[j] = t;
	}
}

void *kvb_big_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}
