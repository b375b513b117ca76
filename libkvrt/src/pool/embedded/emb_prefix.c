// SPDX-License-Identifier: MIT
/*
 * emb_prefix.c: the embedded prefix cache, as kmod/prefix.c is the
 * module's: PUBLISH, LOOKUP, RELEASE and SPACE_STATS, and who is told of
 * an eviction.
 *
 * kvcore keeps the hash index, the reader references (one struct kvc_refs
 * per client, as the module keeps one per descriptor) and the
 * eviction lists; kvc_alloc evicts by itself and reports each eviction
 * through the evicted callback.  What the module keeps beside kvcore is
 * kept beside it here, under the space's mutex, per block: the residency
 * records (emb_residency.c) and the clients to tell when the block is
 * evicted (those that published or hit it since it was last published);
 * and per client an event queue (emb_events.c).  Everything that may
 * need memory is reserved before kvcore is called, so the calls stay all
 * or nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool/embedded/embedded.h"

/* ---- who hears of an eviction --------------------------------------------- */

static bool watching(const struct emb_blk *b, uint32_t owner)
{
	for (uint32_t i = 0; i < b->nwatch; i++)
		if (b->watch[i] == owner)
			return true;
	return false;
}

/* Room to add owner to block id's watchers (bx covers id). */
static int watch_reserve(struct emb_space *es, uint32_t id, uint32_t owner)
{
	struct emb_blk *b = &es->bx[id];
	uint32_t *w, cap;

	if (b->nwatch < b->cwatch || watching(b, owner))
		return 0;
	cap = b->cwatch ? b->cwatch * 2 : 2;
	w = realloc(b->watch, cap * sizeof(*w));
	if (!w)
		return -ENOMEM;
	b->watch = w;
	b->cwatch = cap;
	return 0;
}

/* After watch_reserve(): cannot fail. */
static void watch_add(struct emb_space *es, uint32_t id, uint32_t owner)
{
	struct emb_blk *b = &es->bx[id];

	if (!watching(b, owner) && b->nwatch < b->cwatch)
		b->watch[b->nwatch++] = owner;
}

static struct emb_client *emb_client_of(struct emb_space *es, uint32_t owner)
{
	struct emb_client *s;

	for (s = es->clients; s; s = s->cnext)
		if (s->owner == owner)
			return s;
	return NULL;
}

/* kvcore, inside kvc_alloc: a cached block is evicted. */
void emb_evicted(struct kvc_space *core, kvc_u32 id, const kvc_u8 *hash,
		 unsigned int cause)
{
	struct emb_space *es = core->host;
	struct kvrt_event e = { .type = KVRT_EVENT_EVICTED, .cause = cause, .block = id };

	memcpy(e.hash, hash, KVRT_HASH_BYTES);
	if (id < es->nbx)
		for (uint32_t i = 0; i < es->bx[id].nwatch; i++) {
			struct emb_client *s = emb_client_of(es, es->bx[id].watch[i]);

			if (s)
				emb_ev_push(s, &e);
		}
	emb_blk_forget(es, id);
}

/* ---- publish, lookup, release, stats ----------------------------------------- */

int emb_publish(struct kvrt_space *space, uint32_t count, uint32_t *ids,
		const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio, uint32_t *flags)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	struct kvc_publish_entry *e;
	int ret = 0;

	/* The ioctl's entry checks, before kvcore sees the batch. */
	for (uint32_t i = 0; prio && i < count; i++)
		if (prio[i] > KVRT_PRIO_MAX)
			return -EINVAL;
	e = calloc(count, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		memcpy(e[i].hash, hashes[i], KVRT_HASH_BYTES);
		e[i].id = ids[i];
		e[i].priority = prio ? prio[i] : KVRT_PRIO_DEFAULT;
	}

	pthread_mutex_lock(&es->lock);
	/* Each entry ends on its own block or on the one found (earlier in the batch or not). */
	ret = emb_bx_cover(es, es->core.backed_blocks);
	for (uint32_t i = 0; !ret && i < count; i++) {
		uint32_t found = kvc_find(&es->core, e[i].hash);

		if (e[i].id < es->core.backed_blocks)
			ret = watch_reserve(es, e[i].id, s->owner);
		if (!ret && found != KVC_NONE)
			ret = watch_reserve(es, found, s->owner);
	}
	if (!ret)
		ret = kvc_publish(&es->core, s->owner, &s->refs, count, e);
	if (ret >= 0)
		for (uint32_t i = 0; i < count; i++) {
			if (e[i].flags & KVC_PUBLISH_DEDUP)
				emb_blk_forget(es, ids[i]);	/* the caller's block was freed */
			watch_add(es, e[i].id, s->owner);
		}
	pthread_mutex_unlock(&es->lock);

	if (ret >= 0)
		for (uint32_t i = 0; i < count; i++) {
			ids[i] = e[i].id;
			if (flags)
				flags[i] = e[i].flags & KVC_PUBLISH_DEDUP ? KVRT_PUBLISHED_DEDUP : 0;
		}
	free(e);
	return ret;
}

int emb_lookup(struct kvrt_space *space, uint32_t count,
	       const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint64_t *devices)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	uint32_t small[64], *got = small;
	int ret;

	/*
	 * kvc_lookup also writes the slot after the last hit (and the hits
	 * when it fails): the caller's ids[] only gets the hits.
	 */
	if (count > sizeof(small) / sizeof(small[0])) {
		got = malloc((size_t)count * sizeof(*got));
		if (!got)
			return -ENOMEM;
	}
	pthread_mutex_lock(&es->lock);
	ret = emb_bx_cover(es, es->core.backed_blocks);
	for (uint32_t i = 0; !ret && i < count; i++) {
		uint32_t found = kvc_find(&es->core, hashes[i]);

		if (found == KVC_NONE)
			break;
		ret = watch_reserve(es, found, s->owner);
	}
	if (!ret)
		ret = kvc_lookup(&es->core, &s->refs, count, hashes, got);
	for (int i = 0; i < ret; i++) {
		watch_add(es, got[i], s->owner);
		ids[i] = got[i];
		if (devices)
			devices[i] = emb_rec_mask(es, got[i]);
	}
	pthread_mutex_unlock(&es->lock);
	if (got != small)
		free(got);
	return ret;
}

int emb_release(struct kvrt_space *space, uint32_t count, const uint32_t *ids)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	ret = kvc_release(&es->core, &s->refs, count, ids);
	pthread_mutex_unlock(&es->lock);
	return ret;
}

int emb_space_stats(struct kvrt_space *space, struct kvrt_space_stats *st)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	const struct kvc_space_stats *c = &es->core.stats;

	st->space_id = es->id;
	pthread_mutex_lock(&es->lock);
	st->hits = c->hits;
	st->misses = c->misses;
	st->inserts = c->inserts;
	st->dedups = c->dedups;
	for (int i = 0; i < KVRT_EVICT_CAUSES; i++)
		st->evictions[i] = c->evictions[i];
	st->pressure = c->pressure;
	st->published_blocks = es->core.nr_published;
	st->cached_blocks = es->core.nr_cached;
	st->hole_blocks = es->core.nr_holes;
	st->readers = es->core.nr_readers;
	st->my_refs = s->refs.total;
	st->allocs = c->allocs;
	st->frees = c->frees;
	pthread_mutex_unlock(&es->lock);
	return 0;
}
