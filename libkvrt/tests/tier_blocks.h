/* SPDX-License-Identifier: MIT */
/*
 * tier_blocks.h: the blocks the tier tests store: hashes named by (tag, i)
 * and contents that follow from the hash, so that a block read back can be
 * checked without keeping what was written.
 */
#ifndef KVRT_TEST_TIER_BLOCKS_H
#define KVRT_TEST_TIER_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "kvrt.h"

static inline void tier_hash(uint8_t h[KVRT_HASH_BYTES], uint32_t tag, uint32_t i)
{
	uint32_t t[2] = { tag, i };

	if (kvrt_hash_block(NULL, t, 2, NULL, 0, h))
		memset(h, 0, KVRT_HASH_BYTES);
}

/* bytes (a multiple of 8) of an xorshift stream seeded by the hash. */
static inline void tier_pattern(const uint8_t h[KVRT_HASH_BYTES], uint64_t bytes, uint8_t *out)
{
	uint64_t x, i;

	memcpy(&x, h, sizeof(x));
	x |= 1;
	for (i = 0; i < bytes / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(out + 8 * i, &x, 8);
	}
}

#endif
