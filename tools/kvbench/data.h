/* SPDX-License-Identifier: GPL-2.0 */
/*
 * data.h: test data for the subcommands: a seeded random source, random
 * block orders, and large buffers on huge pages.
 */
#ifndef KVBENCH_DATA_H
#define KVBENCH_DATA_H

#include <stddef.h>
#include <stdint.h>

/* The next value of a xorshift64 state (nonzero). */
uint64_t kvb_xorshift(uint64_t *s);

/* v = a random permutation of 0 .. n-1, drawn from *seed. */
void kvb_shuffle(uint32_t *v, uint32_t n, uint64_t *seed);

/* Anonymous memory on transparent huge pages where the kernel allows; NULL on failure. */
void *kvb_big_alloc(size_t bytes);

#endif /* KVBENCH_DATA_H */
