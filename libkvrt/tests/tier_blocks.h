/* SPDX-License-Identifier: MIT */
/*
 * tier_blocks.h: the blocks the tier tests store: hashes named by (tag, i)
 * and contents that follow from the hash, so that a block read back can be
 * checked without keeping what was written.
 */
#ifndef KVRT_TEST_TIER_BLOCKS_H
#define KVRT_TEST_TIER_BLOCKS_H

#include <errno.h>
#include <stdbool.h>
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

/* The most blocks one of the run helpers below takes. */
#define TIER_RUN_MAX 64

/* Whether block id of the space holds the pattern of hash h. */
static inline bool tier_holds(struct kvrt_space *s, uint32_t id, const uint8_t h[KVRT_HASH_BYTES],
			      uint64_t bytes)
{
	static _Thread_local uint8_t want[64 << 10];	/* threads check blocks too */

	tier_pattern(h, bytes, want);
	return !memcmp(kvrt_block_addr(s, id), want, bytes);
}

/*
 * Store tag:[from, from + n) through the space's tiers: blocks filled,
 * stored at priority prio (-1: no priorities, the tiers' default), freed.
 */
static inline int tier_store_run(struct kvrt_space *s, uint32_t tag, uint32_t from, uint32_t n,
				 uint64_t bytes, int prio)
{
	uint8_t h[TIER_RUN_MAX][KVRT_HASH_BYTES];
	uint32_t ids[TIER_RUN_MAX], pr[TIER_RUN_MAX], i;
	int ret;

	if (n > TIER_RUN_MAX || kvrt_alloc_blocks(s, n, ids))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		tier_hash(h[i], tag, from + i);
		tier_pattern(h[i], bytes, (uint8_t *)kvrt_block_addr(s, ids[i]));
		pr[i] = (uint32_t)prio;
	}
	ret = kvrt_tier_store(s, n, ids, (const uint8_t (*)[KVRT_HASH_BYTES])h, prio < 0 ? NULL : pr);
	kvrt_free_blocks(s, n, ids);
	return ret;
}

/* tag:[from, from + n) published in the pool, then stored: the pool keeps them cached. */
static inline int tier_publish_store(struct kvrt_space *s, uint32_t tag, uint32_t from,
				     uint32_t n, uint64_t bytes)
{
	uint8_t h[TIER_RUN_MAX][KVRT_HASH_BYTES];
	uint32_t ids[TIER_RUN_MAX];
	int ret;

	if (n > TIER_RUN_MAX)
		return -EINVAL;
	ret = tier_publish(s, tag, from, n, bytes, ids, h);
	if (ret)
		return ret;
	ret = kvrt_tier_store(s, n, ids, (const uint8_t (*)[KVRT_HASH_BYTES])h, NULL);
	kvrt_release(s, n, ids);
	return ret;
}

/*
 * Look up tag:[0, n) across pool and tiers: the hits, each checked against
 * its pattern (*bad: the wrong ones); where[] (may be NULL) gets each hit's
 * depth, 0 for the pool.
 */
static inline int tier_lookup_run(struct kvrt_space *s, uint32_t tag, uint32_t n, uint64_t bytes,
				  uint8_t *where, int *bad)
{
	uint8_t h[TIER_RUN_MAX][KVRT_HASH_BYTES], w[TIER_RUN_MAX];
	uint32_t ids[TIER_RUN_MAX], i;
	int got;

	*bad = 0;
	if (n > TIER_RUN_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++)
		tier_hash(h[i], tag, i);
	got = kvrt_lookup_tiers(s, n, (const uint8_t (*)[KVRT_HASH_BYTES])h, ids, w);
	for (i = 0; got > 0 && i < (uint32_t)got; i++)
		if (!tier_holds(s, ids[i], h[i], bytes))
			(*bad)++;
	if (where)
		memcpy(where, w, got > 0 ? (size_t)got : 0);
	if (got > 0)
		kvrt_release(s, (uint32_t)got, ids);
	return got;
}

/* An embedded pool (no hugetlb) in *k and a space of so in *s, for a tier to open on. */
static inline int tier_open_space(const struct kvrt_space_opts *so, struct kvrt **k,
				  struct kvrt_space **s)
{
	struct kvrt_open_opts ko = { .backend = KVRT_BACKEND_EMBEDDED, .flags = KVRT_OPEN_NO_HUGETLB };
	int ret = kvrt_open(k, &ko);

	return ret ? ret : kvrt_space_open(*k, so, s);
}

/* Undo tier_open_space(), either NULL; closing the space closes its tiers. */
static inline void tier_close_space(struct kvrt *k, struct kvrt_space *s)
{
	if (s)
		kvrt_space_close(s);
	if (k)
		kvrt_close(k);
}

/* The tier's stats; all ones where the call filled nothing. */
static inline struct kvrt_tier_stats tier_stats_now(struct kvrt_tier *t)
{
	struct kvrt_tier_stats st;

	memset(&st, 0xff, sizeof(st));
	kvrt_tier_stats(t, &st);
	return st;
}

#endif
