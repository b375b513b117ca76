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

/*
 * Fill n new blocks of the space with tag:[from, from + n)'s patterns and
 * publish them; ids[] and h[] get the blocks and hashes, each block with
 * the handle's reader reference (drop with kvrt_release).  0 or an errno.
 */
static inline int tier_publish(struct kvrt_space *s, uint32_t tag, uint32_t from, uint32_t n,
			       uint64_t bytes, uint32_t *ids, uint8_t (*h)[KVRT_HASH_BYTES])
{
	uint32_t i;
	int ret;

	ret = kvrt_alloc_blocks(s, n, ids);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		tier_hash(h[i], tag, from + i);
		tier_pattern(h[i], bytes, (uint8_t *)kvrt_block_addr(s, ids[i]));
	}
	ret = kvrt_publish(s, n, ids, (const uint8_t (*)[KVRT_HASH_BYTES])h, NULL, NULL);
	if (ret < 0) {
		kvrt_free_blocks(s, n, ids);
		return ret;
	}
	return 0;
}

#endif
