// SPDX-License-Identifier: MIT
/*
 * tier/ssd_index.c: the SSD tier's slots in memory (ssd_index.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd_index.h"

static uint32_t bucket_of(const struct ssd_index *x, const uint8_t *hash)
{
	uint32_t h;

	/* The hashes are SHA-256 outputs: any four bytes spread evenly. */
	memcpy(&h, hash, sizeof(h));
	return h & x->bucket_mask;
}

int ssd_index_init(struct ssd_index *x, uint64_t nr_slots)
{
	uint32_t n = 1, i;

	memset(x, 0, sizeof(*x));
	if (!nr_slots || nr_slots > SSD_MAX_SLOTS)
		return -EINVAL;
	while (n < nr_slots)
		n <<= 1;
	x->slots = calloc(nr_slots, sizeof(*x->slots));
	x->buckets = malloc((size_t)n * sizeof(*x->buckets));
	if (!x->slots || !x->buckets) {
		ssd_index_destroy(x);
		return -ENOMEM;
	}
	x->nr_slots = (uint32_t)nr_slots;
	x->bucket_mask = n - 1;
	for (i = 0; i < n; i++)
		x->buckets[i] = SSD_NONE;
	for (i = 0; i <= KVRT_PRIO_MAX; i++)
		x->oldest[i] = x->newest[i] = SSD_NONE;
	/* The free list in slot order, so that a new tier fills the file from the start. */
	for (i = 0; i < nr_slots; i++)
		x->slots[i].next = i + 1 < nr_slots ? i + 1 : SSD_NONE;
	x->free_head = 0;
	return 0;
}

void ssd_index_destroy(struct ssd_index *x)
{
	free(x->slots);
	free(x->buckets);
	x->slots = NULL;
	x->buckets = NULL;
}

uint32_t ssd_index_find(const struct ssd_index *x, const uint8_t *hash)
{
	uint32_t i;

	for (i = x->buckets[bucket_of(x, hash)]; i != SSD_NONE; i = x->slots[i].chain)
		if (!memcmp(x->slots[i].hash, hash, KVRT_HASH_BYTES))
			return i;
	return SSD_NONE;
}

static void order_unlink(struct ssd_index *x, uint32_t i)
{
	struct ssd_slot *s = &x->slots[i];

	if (s->prev != SSD_NONE)
		x->slots[s->prev].next = s->next;
	else
		x->oldest[s->prio] = s->next;
	if (s->next != SSD_NONE)
		x->slots[s->next].prev = s->prev;
	else
		x->newest[s->prio] = s->prev;
}

static void order_append(struct ssd_index *x, uint32_t i)
{
	struct ssd_slot *s = &x->slots[i];

	s->prev = x->newest[s->prio];
	s->next = SSD_NONE;
	if (s->prev != SSD_NONE)
		x->slots[s->prev].next = i;
	else
		x->oldest[s->prio] = i;
	x->newest[s->prio] = i;
}

void ssd_index_touch(struct ssd_index *x, uint32_t i)
{
	order_unlink(x, i);
	order_append(x, i);
}

uint32_t ssd_index_take_free(struct ssd_index *x)
{
	uint32_t i = x->free_head;

	if (i != SSD_NONE)
		x->free_head = x->slots[i].next;
	return i;
}

void ssd_index_put_free(struct ssd_index *x, uint32_t i)
{
	x->slots[i].next = x->free_head;
	x->free_head = i;
}

void ssd_index_insert(struct ssd_index *x, uint32_t i, const uint8_t *hash, uint64_t sum,
		      uint8_t prio)
{
	struct ssd_slot *s = &x->slots[i];
	uint32_t b = bucket_of(x, hash);

	memcpy(s->hash, hash, KVRT_HASH_BYTES);
	s->sum = sum;
	s->prio = prio;
	s->used = 1;
	s->pending = 0;
	s->chain = x->buckets[b];
	x->buckets[b] = i;
	order_append(x, i);
	x->nr_used++;
}

void ssd_index_remove(struct ssd_index *x, uint32_t i)
{
	struct ssd_slot *s = &x->slots[i];
	uint32_t *p = &x->buckets[bucket_of(x, s->hash)];

	while (*p != i)
		p = &x->slots[*p].chain;
	*p = s->chain;
	order_unlink(x, i);
	s->used = 0;
	s->pending = 0;
	x->nr_used--;
}

uint32_t ssd_index_victim(const struct ssd_index *x)
{
	unsigned int p;

	uint32_t i;

	/* A batch's pending slots are the newest of their priority: reached last. */
	for (p = 0; p <= KVRT_PRIO_MAX; p++)
		for (i = x->oldest[p]; i != SSD_NONE; i = x->slots[i].next)
			if (!x->slots[i].pending)
				return i;
	return SSD_NONE;
}

void ssd_index_rebuild_free(struct ssd_index *x)
{
	uint32_t i = x->nr_slots;

	x->free_head = SSD_NONE;
	while (i--)
		if (!x->slots[i].used)
			ssd_index_put_free(x, i);
}
