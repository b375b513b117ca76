/* SPDX-License-Identifier: MIT */
/*
 * tier/ssd_index.h: the SSD tier's slots in memory: which hash each slot
 * holds, with its checksum and priority, a hash table to find it, and an
 * eviction order per priority (least recently used first), as kvcore
 * keeps the pool's cached blocks.  Not locked: tier_ssd.c holds its lock.
 */
#ifndef KVRT_SSD_INDEX_H
#define KVRT_SSD_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "kvrt.h"

#define SSD_NONE UINT32_MAX
/* The most slots: their numbers stay below SSD_NONE, the bucket count fits 32 bits. */
#define SSD_MAX_SLOTS (1U << 31)

struct ssd_slot {
	uint8_t hash[KVRT_HASH_BYTES];
	uint64_t sum;		/* XXH3-64 of the block */
	uint8_t nonce[16];	/* its tag's (tier_mac.h); set by the caller */
	uint8_t tag[16];
	uint32_t prev, next;	/* its priority's order, or the free list (next) */
	uint32_t chain;		/* the hash table's bucket chain */
	uint8_t prio;
	uint8_t used;
	uint8_t pending;	/* being written: never a victim */
};

struct ssd_index {
	uint32_t nr_slots;
	uint32_t nr_used;
	struct ssd_slot *slots;
	uint32_t *buckets;	/* a power of two, at least nr_slots */
	uint32_t bucket_mask;
	uint32_t free_head;
	uint32_t oldest[KVRT_PRIO_MAX + 1], newest[KVRT_PRIO_MAX + 1];
};

/* -EINVAL for 0 or more than SSD_MAX_SLOTS slots, -ENOMEM. */
int ssd_index_init(struct ssd_index *x, uint64_t nr_slots);
void ssd_index_destroy(struct ssd_index *x);
/* The slot holding hash, or SSD_NONE. */
uint32_t ssd_index_find(const struct ssd_index *x, const uint8_t *hash);
/* Make the slot the newest of its priority. */
void ssd_index_touch(struct ssd_index *x, uint32_t slot);
/* A free slot taken off the free list, or SSD_NONE. */
uint32_t ssd_index_take_free(struct ssd_index *x);
/* slot (taken, not yet indexed) now holds hash; the newest of prio. */
void ssd_index_insert(struct ssd_index *x, uint32_t slot, const uint8_t *hash, uint64_t sum,
		      uint8_t prio);
/* The slot leaves the index (its data no longer counts) and is taken, not freed. */
void ssd_index_remove(struct ssd_index *x, uint32_t slot);
/* A taken slot goes back to the free list. */
void ssd_index_put_free(struct ssd_index *x, uint32_t slot);
/* The next to evict: the oldest of the lowest priority not pending, or SSD_NONE. */
uint32_t ssd_index_victim(const struct ssd_index *x);
/* After a replay that inserted slots directly: every unused slot is free again. */
void ssd_index_rebuild_free(struct ssd_index *x);

#endif /* KVRT_SSD_INDEX_H */
