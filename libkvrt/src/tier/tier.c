// SPDX-License-Identifier: MIT
/*
 * tier/tier.c: the tier calls of kvrt.h: opening and closing a handle's
 * tiers, lookup across the pool and the tiers, stores by each tier's
 * policy.  The tiers' own work is behind their ops (tier.h); write-back's
 * queue is writeback.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "tier.h"

/* key_file took a reserved word in 0.8: the structs keep their 0.7 size. */
_Static_assert(sizeof(struct kvrt_tier_ssd_opts) == 64 && sizeof(struct kvrt_tier_redis_opts) == 80,
	       "kvrt_tier_*_opts keep their size");

/* kvrt.c's checks of a batch, then the second array's. */
static int batch_args(const struct kvrt_space *s, uint32_t count, const void *a, const void *b)
{
	int ret = kvrt_batch_args(s, count, a);

	return ret ? ret : b ? 0 : -EFAULT;
}

int kvrt_tier_identity(struct kvrt_space *s, const struct kvrt_layout *layout, uint8_t id[32])
{
	struct {
		char magic[8];
		char name[KVRT_NAME_MAX];
		uint32_t uid;
		uint32_t has_layout;
		uint64_t block_bytes;
		struct kvrt_layout layout;
	} key;
	struct kvrt_space_info info;
	unsigned int len = 32;
	int ret;

	ret = kvrt_space_info(s, &info);
	if (ret)
		return ret;
	memset(&key, 0, sizeof(key));
	memcpy(key.magic, "kvtier1", 8);
	memcpy(key.name, s->name, sizeof(key.name));
	key.uid = info.uid;
	key.block_bytes = s->block_bytes;
	if (layout) {
		key.has_layout = 1;
		key.layout = *layout;
		key.layout.num_blocks = 0;	/* the cache's size, not its geometry */
	}
	return EVP_Digest(&key, sizeof(key), id, &len, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
}

static void tier_add(struct kvrt_space *s, struct kvrt_tier *t)
{
	struct kvrt_tier **p;

	pthread_mutex_lock(&s->k->lock);
	for (p = &s->tiers; *p; p = &(*p)->next)
		;
	t->next = NULL;
	*p = t;
	pthread_mutex_unlock(&s->k->lock);
}

static bool words_zero(const uint64_t *w, size_t n)
{
	uint64_t z = 0;

	while (n--)
		z |= w[n];
	return !z;
}

/* The default queue: at most an eighth of the space held for the tier. */
static uint32_t writeback_default(const struct kvrt_space *s)
{
	uint64_t eighth = s->nr_blocks / 8;

	return eighth > 1024 ? 1024 : eighth ? (uint32_t)eighth : 1;
}

/* The policy's fields: WRITE_BACK the only flag, writeback_max only with it. */
static bool policy_valid(uint32_t flags, uint32_t writeback_max)
{
	if (flags & ~KVRT_TIER_WRITE_BACK)
		return false;
	return flags ? writeback_max <= KVRT_MAX_BATCH : !writeback_max;
}

/* The identity, the kind's own open, its write-back thread, then the handle's list. */
static int tier_attach(struct kvrt_space *s, enum kvrt_tier_kind kind,
		       const struct kvrt_layout *layout, const void *opts, uint32_t flags,
		       uint32_t writeback_max, struct kvrt_tier **out)
{
	uint8_t identity[32];
	struct kvrt_tier *t;
	int ret;

	ret = kvrt_tier_identity(s, layout, identity);
	if (ret)
		return ret;
	ret = kind == KVRT_TIER_SSD ? kvrt_ssd_open(s, opts, identity, &t) :
				      kvrt_redis_open(s, opts, identity, &t);
	if (ret)
		return ret;
	t->space = s;
	t->kind = kind;
	t->wb = NULL;
	if (flags & KVRT_TIER_WRITE_BACK) {
		ret = kvrt_writeback_start(t, writeback_max ? writeback_max : writeback_default(s));
		if (ret) {
			t->ops->close(t);
			return ret;
		}
	}
	tier_add(s, t);
	*out = t;
	return 0;
}

int kvrt_tier_open_ssd(struct kvrt_space *s, const struct kvrt_tier_ssd_opts *o,
		       struct kvrt_tier **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!s || !o || !o->dir || !*o->dir || !policy_valid(o->flags, o->writeback_max) ||
	    o->reserved0 || !words_zero(o->reserved, 2) || o->capacity_bytes < s->block_bytes ||
	    o->capacity_bytes > (1ULL << 50) || o->queue_depth > 4096)
		return -EINVAL;
	return tier_attach(s, KVRT_TIER_SSD, o->layout, o, o->flags, o->writeback_max, out);
}

int kvrt_tier_open_redis(struct kvrt_space *s, const struct kvrt_tier_redis_opts *o,
			 struct kvrt_tier **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!s || !o || !o->nodes || !policy_valid(o->flags, o->writeback_max) ||
	    !words_zero(o->reserved, 2) || (o->key_prefix && strlen(o->key_prefix) > 128))
		return -EINVAL;
	return tier_attach(s, KVRT_TIER_REDIS, o->layout, o, o->flags, o->writeback_max, out);
}

void kvrt_tier_close(struct kvrt_tier *t)
{
	struct kvrt_writeback *wb;
	struct kvrt_tier **p;
	struct kvrt_space *s;

	if (!t)
		return;
	s = t->space;
	pthread_mutex_lock(&s->k->lock);
	for (p = &s->tiers; *p && *p != t; p = &(*p)->next)
		;
	if (*p)
		*p = t->next;
	pthread_mutex_unlock(&s->k->lock);
	wb = t->wb;
	kvrt_writeback_stop(t);
	t->ops->close(t);	/* frees t; the SSD tier's last stats file still counts wb's */
	kvrt_writeback_free(wb);
}

void kvrt_tier_common_init(struct kvrt_tier *t)
{
	pthread_mutex_init(&t->shown_lock, NULL);
}

void kvrt_tier_common_destroy(struct kvrt_tier *t)
{
	pthread_mutex_destroy(&t->shown_lock);
}

void kvrt_tier_show_stats(struct kvrt_tier *t, const struct kvrt_tier_stats *st)
{
	pthread_mutex_lock(&t->shown_lock);
	t->shown = *st;
	pthread_mutex_unlock(&t->shown_lock);
}

int kvrt_tier_stats(struct kvrt_tier *t, struct kvrt_tier_stats *st)
{
	if (!t || !st)
		return -EINVAL;
	pthread_mutex_lock(&t->shown_lock);
	*st = t->shown;
	pthread_mutex_unlock(&t->shown_lock);
	st->kind = t->kind;
	if (t->wb)
		kvrt_writeback_stats(t, st);
	return 0;
}

/*
 * Bring hashes[0..n) up from tier t into new blocks of the space and
 * publish them there; ids[] get the blocks (a dedup's id when another
 * process published the hash meanwhile).  Returns how many arrived, from
 * the first, or an errno when none did and the reason matters.
 */
static int bring_up(struct kvrt_tier *t, uint32_t n, const uint8_t (*hashes)[KVRT_HASH_BYTES],
		    uint32_t *ids)
{
	struct kvrt_space *s = t->space;
	uint32_t got;
	int ret;

	ret = kvrt_alloc_blocks(s, n, ids);
	/* No room for all: as many as fit, fewer each time. */
	while (ret == -ENOSPC && n > 1) {
		n /= 2;
		ret = kvrt_alloc_blocks(s, n, ids);
	}
	if (ret)
		return ret;
	got = t->ops->fetch(t, n, hashes, ids);
	if (got < n)
		kvrt_free_blocks(s, n - got, ids + got);
	if (!got)
		return 0;
	ret = kvrt_publish(s, got, ids, hashes, NULL, NULL);
	if (ret < 0) {
		kvrt_free_blocks(s, got, ids);
		return ret;
	}
	return (int)got;
}

/*
 * The first tier, top down, that holds a run at the head of hashes: its
 * length in *run and its depth (1: the top tier) in *depth; NULL: none.
 */
static struct kvrt_tier *first_run(struct kvrt_space *s, uint32_t count,
				   const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *run,
				   uint32_t *depth)
{
	struct kvrt_tier *t;

	for (t = s->tiers, *depth = 1; t; t = t->next, (*depth)++) {
		*run = t->ops->present(t, count, hashes);
		if (*run)
			return t;
	}
	return NULL;
}

int kvrt_lookup_tiers(struct kvrt_space *s, uint32_t count,
		      const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint8_t *where)
{
	uint32_t hits = 0, want = 0, depth;
	struct kvrt_tier *t;
	int ret;

	ret = batch_args(s, count, hashes, ids);
	if (ret)
		return ret;
	while (hits < count) {
		/* The pool first, at every step: a tier's run may end where the pool resumes. */
		ret = kvrt_lookup(s, count - hits, hashes + hits, ids + hits, NULL);
		if (ret < 0) {
			if (!hits)
				return ret;
			break;
		}
		if (ret > 0) {
			if (where)
				memset(where + hits, 0, (uint32_t)ret);
			hits += (uint32_t)ret;
			continue;
		}
		t = first_run(s, count - hits, hashes + hits, &want, &depth);
		if (!t)
			break;
		ret = bring_up(t, want, hashes + hits, ids + hits);
		if (ret <= 0)
			break;
		if (where)
			memset(where + hits, (int)depth, (uint32_t)ret);
		hits += (uint32_t)ret;
		if ((uint32_t)ret < want)
			break;
	}
	return (int)hits;
}

int kvrt_tier_contains(struct kvrt_space *s, uint32_t count,
		       const uint8_t (*hashes)[KVRT_HASH_BYTES], uint8_t *where)
{
	uint32_t held = 0, run = 0, depth;
	struct kvrt_tier *t;
	int ret;

	ret = kvrt_batch_args(s, count, hashes);
	if (ret)
		return ret;
	/* As kvrt_lookup_tiers walks them, minus the pool: the first tier with a run. */
	while (held < count) {
		t = first_run(s, count - held, hashes + held, &run, &depth);
		if (!t)
			break;
		if (where)
			memset(where + held, (int)depth, run);
		held += run;
	}
	return (int)held;
}

/* A write-back tier of this handle whose thread is a fork()ing parent's. */
static bool parents_queue(const struct kvrt_space *s)
{
	const struct kvrt_tier *t;

	for (t = s->tiers; t; t = t->next)
		if (t->wb && !kvrt_writeback_here(t))
			return true;
	return false;
}

/*
 * A write-back tier's part of kvrt_tier_store: the blocks whose hashes are
 * published are queued with a reader reference each (taken by a lookup);
 * the others, and what the queue has no room for, are written now.  The
 * blocks written now go first, so that a failure leaves nothing queued.
 */
static int store_back(struct kvrt_tier *t, uint32_t count, const uint32_t *ids,
		      const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio)
{
	struct kvrt_space *s = t->space;
	size_t per = KVRT_HASH_BYTES + 2 * sizeof(uint32_t);
	uint8_t (*h[2])[KVRT_HASH_BYTES];	/* [0] written now, [1] queued */
	uint32_t *id[2], *pr[2], n[2] = { 0, 0 }, i, j, q;
	char *mem = malloc((size_t)count * per * 2);
	int ret, r;

	if (!mem)
		return -ENOMEM;
	for (j = 0; j < 2; j++) {
		h[j] = (void *)(mem + (size_t)count * per * j);
		id[j] = (uint32_t *)(h[j] + count);
		pr[j] = id[j] + count;
	}
	for (i = 0; i < count;) {
		r = kvrt_lookup(s, count - i, hashes + i, id[1] + n[1], NULL);
		j = r > 0 ? 1 : 0;
		if (r <= 0) {	/* not published (or the pool cannot say): written now */
			id[0][n[0]] = ids[i];
			r = 1;
		}
		memcpy(h[j] + n[j], hashes + i, (size_t)r * KVRT_HASH_BYTES);
		for (q = 0; q < (uint32_t)r; q++)
			pr[j][n[j] + q] = prio ? prio[i + q] : KVRT_PRIO_DEFAULT;
		n[j] += (uint32_t)r;
		i += (uint32_t)r;
	}
	ret = n[0] ? t->ops->store(t, n[0], (const uint8_t (*)[KVRT_HASH_BYTES])h[0], id[0], pr[0]) : 0;
	if (ret < 0) {
		if (n[1])
			kvrt_release(s, n[1], id[1]);
		goto out;
	}
	q = n[1] ? kvrt_writeback_queue(t, n[1], (const uint8_t (*)[KVRT_HASH_BYTES])h[1], id[1],
					pr[1]) : 0;
	if (q < n[1]) {	/* the queue is full: the rest now */
		r = t->ops->store(t, n[1] - q, (const uint8_t (*)[KVRT_HASH_BYTES])(h[1] + q),
				  id[1] + q, pr[1] + q);
		kvrt_release(s, n[1] - q, id[1] + q);
		if (r < 0) {
			ret = r;
			goto out;
		}
		ret += r;
	}
	ret += (int)q;
out:
	free(mem);
	return ret;
}

int kvrt_tier_store(struct kvrt_space *s, uint32_t count, const uint32_t *ids,
		    const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio)
{
	struct kvrt_tier *t;
	int ret, written = 0;
	uint32_t i;

	ret = batch_args(s, count, ids, hashes);
	if (ret)
		return ret;
	for (i = 0; i < count; i++)
		if (ids[i] >= s->nr_blocks || (prio && prio[i] > KVRT_PRIO_MAX))
			return -EINVAL;
	if (!s->tiers)
		return -ENODEV;
	if (parents_queue(s))
		return -ECHILD;
	/* A tier reads every block it stores: each must have memory behind it. */
	ret = kvrt_batch_ids(s, count, ids);
	if (ret)
		return ret;
	for (t = s->tiers; t; t = t->next) {
		ret = t->wb ? store_back(t, count, ids, hashes, prio) :
			      t->ops->store(t, count, hashes, ids, prio);
		if (ret < 0)
			return ret;
		written = ret > written ? ret : written;
	}
	return written;
}

int kvrt_tier_flush(struct kvrt_space *s)
{
	struct kvrt_tier *t;
	int ret, first = 0;

	if (!s)
		return -EINVAL;
	if (parents_queue(s))
		return -ECHILD;
	for (t = s->tiers; t; t = t->next) {
		if (!t->wb)
			continue;
		ret = kvrt_writeback_flush(t);
		if (ret && !first)
			first = ret;
	}
	return first;
}
