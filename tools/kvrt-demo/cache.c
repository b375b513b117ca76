// SPDX-License-Identifier: GPL-2.0
/*
 * cache.c: the device KV cache (a block allocator over a layer-major host
 * array) and the pool side: prefix hashing, lookup, publish, release,
 * offload and fetch, each a batch call into libkvrt.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "devgpu.h"

/* ---- device cache -------------------------------------------------------------- */

int devcache_init(struct devcache *d, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		  uint32_t block_tokens, uint32_t blocks, enum kvrt_dtype dtype,
		  struct devgpu *gpu)
{
	uint32_t i;
	int ret;

	memset(d, 0, sizeof(*d));
	ret = kvrt_layout_init(&d->layout, KVRT_LAYOUT_LAYER_MAJOR, layers, kv_heads, head_dim,
			       block_tokens, blocks, dtype);
	if (ret)
		return ret;
	d->bytes = (uint64_t)d->layout.layer_stride * layers;
	d->free_ids = malloc(sizeof(uint32_t) * blocks);
	if (!d->free_ids) {
		devcache_fini(d);
		return -ENOMEM;
	}
	/* zeroed: slots past a sequence's length are never read, but keep them defined */
	if (gpu) {
		ret = devgpu_alloc_cache(gpu, d->bytes, &d->base);
		if (ret) {
			devcache_fini(d);
			return ret;
		}
		d->gpu = gpu;
	} else {
		d->base = calloc(1, d->bytes);
		if (!d->base) {
			devcache_fini(d);
			return -ENOMEM;
		}
	}
	/* low ids on top of the stack: the first allocations get 0, 1, 2... */
	for (i = 0; i < blocks; i++)
		d->free_ids[i] = blocks - 1 - i;
	d->n_free = blocks;
	return 0;
}

void devcache_fini(struct devcache *d)
{
	if (d->gpu)
		devgpu_free(d->gpu, d->base);
	else
		free(d->base);
	free(d->free_ids);
	memset(d, 0, sizeof(*d));
}

int devcache_alloc(struct devcache *d, uint32_t n, uint32_t *ids)
{
	uint32_t i;

	if (n > d->n_free)
		return -ENOSPC;
	for (i = 0; i < n; i++)
		ids[i] = d->free_ids[--d->n_free];
	return 0;
}

void devcache_free(struct devcache *d, uint32_t n, const uint32_t *ids)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		d->free_ids[d->n_free++] = ids[i];
}

/* ---- a set of hashes -------------------------------------------------------------- */

struct hashset {
	uint8_t (*slot)[KVRT_HASH_BYTES];
	uint8_t *used;
	size_t cap, n;
};

static size_t hs_index(const uint8_t *h, size_t cap)
{
	uint64_t v;

	memcpy(&v, h, sizeof(v));	/* SHA-256 bytes are already uniform */
	return (size_t)(v & (cap - 1));
}

static int hs_has(const struct hashset *s, const uint8_t *h)
{
	size_t i;

	if (!s->cap)
		return 0;
	for (i = hs_index(h, s->cap); s->used[i]; i = (i + 1) & (s->cap - 1))
		if (!memcmp(s->slot[i], h, KVRT_HASH_BYTES))
			return 1;
	return 0;
}

static int hs_add(struct hashset *s, const uint8_t *h)
{
	size_t i;

	if (hs_has(s, h))
		return 0;
	if ((s->n + 1) * 2 > s->cap) {
		struct hashset g = { 0 };
		size_t j;

		g.cap = s->cap ? 2 * s->cap : 256;
		g.slot = malloc(KVRT_HASH_BYTES * g.cap);
		g.used = calloc(g.cap, 1);
		if (!g.slot || !g.used) {
			free(g.slot);
			free(g.used);
			return -ENOMEM;
		}
		for (j = 0; j < s->cap; j++)
			if (s->used[j])
				hs_add(&g, s->slot[j]);
		free(s->slot);
		free(s->used);
		*s = g;
	}
	for (i = hs_index(h, s->cap); s->used[i]; i = (i + 1) & (s->cap - 1))
		;
	memcpy(s->slot[i], h, KVRT_HASH_BYTES);
	s->used[i] = 1;
	s->n++;
	return 0;
}

static void hs_free(struct hashset *s)
{
	if (!s)
		return;
	free(s->slot);
	free(s->used);
	free(s);
}

/* ---- pool ----------------------------------------------------------------------------- */

static const char *space_errno_text(int err)
{
	switch (err) {
	case -ENOENT:
		return "no such space (run the --role first process before --role second)";
	case -EINVAL:
		return "invalid parameters, or the space exists with another block size "
		       "(another model geometry)";
	case -EACCES:
		return "permission denied: the space belongs to another user (join it with "
		       "--space-owner UID) or its mode denies you";
	case -EEXIST:
		return "the name is taken: the space exists already, or another user owns it";
	default:
		return strerror(-err);
	}
}

void pcache_model_id(char *buf, size_t len, uint64_t fingerprint, enum kvrt_dtype dtype,
		     uint32_t block_tokens)
{
	snprintf(buf, len, "kvrt-demo model %016" PRIx64 " kv %s block %u", fingerprint,
		 dtype == KVRT_DTYPE_F32 ? "f32" : dtype == KVRT_DTYPE_F16 ? "f16" : "bf16",
		 block_tokens);
}

int pcache_open(struct pcache *pc, struct kvrt *k, struct devcache *dev,
		const struct pool_opts *o, const void *model_id, size_t model_id_len,
		char *err, size_t errlen)
{
	const struct kvrt_layout *dl = &dev->layout;
	struct kvrt_space_opts so = { 0 };
	uint64_t kvb, bb, page = (uint64_t)sysconf(_SC_PAGESIZE);
	int ret;

	memset(pc, 0, sizeof(*pc));
	pc->k = k;
	pc->dev = dev;
	pc->block_tokens = dl->block_tokens;
	pc->priority = KVRT_PRIO_DEFAULT;
	pc->pending_tail = &pc->pending;
	pc->mine = calloc(1, sizeof(*pc->mine));
	pc->shared = calloc(1, sizeof(*pc->shared));
	if (!pc->mine || !pc->shared) {
		ret = -ENOMEM;
		goto out_free;
	}
	ret = kvrt_layout_init(&pc->layout, KVRT_LAYOUT_BLOCK_MAJOR, dl->num_layers,
			       dl->num_kv_heads, dl->head_dim, dl->block_tokens, 1, dl->kv_dtype);
	if (!ret)
		ret = kvrt_layout_block_bytes(&pc->layout, &kvb);
	if (ret) {
		snprintf(err, errlen, "pool layout: %s", strerror(-ret));
		goto out_free;
	}
	pc->kv_block_bytes = kvb;
	/* a pool block is a page multiple; the layout's blocks are spaced to match */
	bb = (kvb + page - 1) / page * page;
	so.name = o->space_name;
	so.flags = o->space_flags;
	so.expect_uid = o->space_owner;
	so.block_bytes = bb;
	/* A plain join has no create fields (kvpool API 4): only a create sends them. */
	if (so.flags & KVRT_SPACE_CREATE) {
		so.mode = o->mode;
		so.quota_bytes = o->quota_bytes / bb * bb;
		if (so.quota_bytes < bb)
			so.quota_bytes = bb;
	}
	ret = kvrt_space_open(k, &so, &pc->space);
	if (ret) {
		snprintf(err, errlen, "kvrt_space_open(%s, block %llu bytes, quota %llu bytes): %s",
			 o->space_name, (unsigned long long)bb, (unsigned long long)so.quota_bytes,
			 space_errno_text(ret));
		goto out_free;
	}
	/* Space blocks are page-rounded: the layout takes the space's stride and size. */
	ret = kvrt_layout_for_space(&pc->layout, pc->space);
	if (ret) {
		snprintf(err, errlen, "pool layout for space %s: %s", o->space_name,
			 strerror(-ret));
		goto out_close;
	}
	if (o->tier_dir) {
		struct kvrt_tier_ssd_opts to = { .dir = o->tier_dir, .capacity_bytes = o->tier_bytes,
						 .layout = &pc->layout,
						 .flags = o->tier_write_back ? KVRT_TIER_WRITE_BACK : 0 };

		if (to.capacity_bytes < bb)
			to.capacity_bytes = bb;
		ret = kvrt_tier_open_ssd(pc->space, &to, &pc->tier);
		if (ret) {
			snprintf(err, errlen, "kvrt_tier_open_ssd(%s): %s%s", o->tier_dir,
				 strerror(-ret), ret == -EBUSY ?
				 " (another process has this space's tier open)" : "");
			goto out_close;
		}
	}
	if (o->tier_redis) {
		struct kvrt_tier_redis_opts ro = { .nodes = o->tier_redis,
						   .user = getenv("KVRT_REDIS_USER"),
						   .password = getenv("KVRT_REDIS_PASSWORD"),
						   .key_prefix = o->tier_prefix, .layout = &pc->layout,
						   .flags = o->tier_write_back ?
							    KVRT_TIER_WRITE_BACK : 0 };
		struct kvrt_tier *t;

		ret = kvrt_tier_open_redis(pc->space, &ro, &t);
		if (ret) {
			snprintf(err, errlen, "kvrt_tier_open_redis(%s): %s%s", o->tier_redis,
				 strerror(-ret), ret == -EACCES ?
				 " (KVRT_REDIS_USER and KVRT_REDIS_PASSWORD name the ACL user)" : "");
			goto out_close;
		}
		if (!pc->tier)
			pc->tier = t;
	}
	if (dev->gpu) {
		/* once: every copy after this runs at the link's speed */
		ret = kvrt_gpu_register_space(dev->gpu->gpu, pc->space);
		if (ret) {
			snprintf(err, errlen, "kvrt_gpu_register_space(%s): %s", o->space_name,
				 strerror(-ret));
			goto out_close;
		}
	}
	pc->pool_arr = (struct kvrt_block_array){ .layout = &pc->layout,
						  .base = kvrt_space_base(pc->space) };
	pc->dev_arr = (struct kvrt_block_array){ .layout = &dev->layout, .base = dev->base };
	/*
	 * The chain's root names the model: K/V are a function of the weights
	 * as much as of the tokens, so two models sharing a space never hit
	 * each other's blocks.
	 */
	ret = kvrt_hash_block(NULL, NULL, 0, model_id, model_id_len, pc->root);
	if (ret) {
		snprintf(err, errlen, "kvrt_hash_block: %s", strerror(-ret));
		goto out_close;
	}
	return 0;

out_close:
	kvrt_space_close(pc->space);
out_free:
	hs_free(pc->mine);
	hs_free(pc->shared);
	memset(pc, 0, sizeof(*pc));
	return ret;
}

void pcache_close(struct pcache *pc)
{
	pcache_wait_all(pc);
	if (pc->dev->gpu)
		kvrt_gpu_unregister_space(pc->dev->gpu->gpu, pc->space);
	kvrt_space_close(pc->space);
	hs_free(pc->mine);
	hs_free(pc->shared);
	memset(pc, 0, sizeof(*pc));
}

void pcache_reset_stats(struct pcache *pc)
{
	memset(&pc->st, 0, sizeof(pc->st));
}

int pcache_hash(struct pcache *pc, const uint32_t *tokens, uint32_t n,
		uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t max)
{
	if (n < pc->block_tokens || !max)
		return 0;
	return kvrt_hash_prompt(pc->root, tokens, n, pc->block_tokens, NULL, NULL, hashes, max);
}

int pcache_lookup(struct pcache *pc, const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t n,
		  uint32_t *ids)
{
	uint8_t *where = NULL;
	int hits, i;

	if (!n)
		return 0;
	if (pc->tier) {
		where = malloc(n);
		if (!where)
			return -ENOMEM;
		hits = kvrt_lookup_tiers(pc->space, n, hashes, ids, where);
		for (i = 0; i < hits; i++)
			pc->st.tier_hits += where[i] != 0;
		free(where);
	} else {
		hits = kvrt_lookup(pc->space, n, hashes, ids, NULL);
	}
	if (hits < 0)
		return hits;
	pc->st.lookups += n;
	pc->st.hits += (uint64_t)hits;
	for (i = 0; i < hits; i++) {
		if (hs_has(pc->mine, hashes[i]))
			continue;
		pc->st.shared_hits++;
		if (!hs_has(pc->shared, hashes[i])) {
			pc->st.shared_distinct++;
			hs_add(pc->shared, hashes[i]);
		}
	}
	return hits;
}

static struct kvrt_block_pair *make_pairs(uint32_t n, const uint32_t *src, const uint32_t *dst)
{
	struct kvrt_block_pair *p = malloc(sizeof(*p) * (n ? n : 1));
	uint32_t i;

	if (!p)
		return NULL;
	for (i = 0; i < n; i++)
		p[i] = (struct kvrt_block_pair){ .src = src[i], .dst = dst[i] };
	return p;
}

/*
 * Blocks between the tiers, done when it returns.  On the GPU one
 * kvrt_gpu_copy_blocks (AUTO: the copy kernel or batched copies), then a
 * wait for the stream.
 */
static int copy_now(struct pcache *pc, const struct kvrt_block_array *dst,
		    const struct kvrt_block_array *src, const struct kvrt_block_pair *pairs,
		    uint32_t n)
{
	int ret;

	if (!pc->dev->gpu)
		return kvrt_copy_blocks(pc->k, dst, src, pairs, n, 0, NULL);
	ret = kvrt_gpu_copy_blocks(pc->dev->gpu->gpu, dst, src, pairs, n, KVRT_GPU_COPY_AUTO,
				   NULL);
	return ret ? ret : kvrt_gpu_sync(pc->dev->gpu->gpu, NULL);
}

int pcache_publish(struct pcache *pc, uint32_t n, const uint32_t *dev_ids,
		   const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *pool_ids)
{
	struct kvrt_block_pair *pairs;
	uint32_t *flags, *prio = NULL, i;
	int ret;

	if (!n)
		return 0;
	ret = kvrt_alloc_blocks(pc->space, n, pool_ids);
	if (ret == -ENOSPC) {
		pc->st.publish_skipped += n;
		return ret;
	}
	if (ret)
		return ret;
	pairs = make_pairs(n, dev_ids, pool_ids);
	flags = calloc(n, sizeof(*flags));
	/* NULL priorities is the library's default: an array only for another */
	if (pc->priority != KVRT_PRIO_DEFAULT) {
		prio = malloc(sizeof(*prio) * n);
		for (i = 0; prio && i < n; i++)
			prio[i] = pc->priority;
	}
	if (!pairs || !flags || (pc->priority != KVRT_PRIO_DEFAULT && !prio)) {
		ret = -ENOMEM;
		goto out_free_blocks;
	}
	/* the data must be in the block before the hash names it */
	ret = copy_now(pc, &pc->pool_arr, &pc->dev_arr, pairs, n);
	if (ret)
		goto out_free_blocks;
	ret = kvrt_publish(pc->space, n, pool_ids, hashes, prio, flags);
	if (ret < 0)
		goto out_free_blocks;
	for (i = 0; i < n; i++) {
		if (flags[i] & KVRT_PUBLISHED_DEDUP) {
			pc->st.dedups++;
		} else {
			pc->st.inserted++;
			/* out of memory here only miscounts shared hits later */
			hs_add(pc->mine, hashes[i]);
		}
	}
	pc->st.publish_blocks += n;
	pc->st.publish_bytes += n * pc->kv_block_bytes;
	if (pc->tier) {
		/* Written or queued: the pool keeps its copy whatever the tier says. */
		int w = kvrt_tier_store(pc->space, n, pool_ids, hashes, prio);

		if (w >= 0)
			pc->st.tier_stores += (uint64_t)w;
		else
			pc->st.tier_store_errors++;
	}
	free(pairs);
	free(flags);
	free(prio);
	return 0;

out_free_blocks:
	kvrt_free_blocks(pc->space, n, pool_ids);
	free(pairs);
	free(flags);
	free(prio);
	return ret;
}

int pcache_release(struct pcache *pc, uint32_t n, const uint32_t *ids)
{
	return n ? kvrt_release(pc->space, n, ids) : 0;
}

int pcache_offload(struct pcache *pc, uint32_t n, const uint32_t *dev_ids, uint32_t *pool_ids,
		   uint64_t tag)
{
	struct pending_copy *pc_entry;
	struct kvrt_block_pair *pairs;
	int ret;

	if (!n)
		return 0;
	ret = kvrt_alloc_blocks(pc->space, n, pool_ids);
	if (ret) {
		if (ret == -ENOSPC)
			pc->st.offload_dropped += n;
		devcache_free(pc->dev, n, dev_ids);
		return ret;
	}
	pairs = make_pairs(n, dev_ids, pool_ids);
	pc_entry = calloc(1, sizeof(*pc_entry));
	if (pc_entry)
		pc_entry->dev_ids = malloc(sizeof(uint32_t) * n);
	if (!pairs || !pc_entry || !pc_entry->dev_ids) {
		ret = -ENOMEM;
		goto out_free;
	}
	/*
	 * Asynchronous on the host: the engine goes on while the copy thread
	 * moves the blocks.  On the GPU it is done at once (copy stays NULL).
	 */
	if (pc->dev->gpu)
		ret = copy_now(pc, &pc->pool_arr, &pc->dev_arr, pairs, n);
	else
		ret = kvrt_copy_blocks(pc->k, &pc->pool_arr, &pc->dev_arr, pairs, n,
				       KVRT_COPY_ASYNC, &pc_entry->copy);
	if (ret)
		goto out_free;
	memcpy(pc_entry->dev_ids, dev_ids, sizeof(uint32_t) * n);
	pc_entry->n = n;
	pc_entry->tag = tag;
	*pc->pending_tail = pc_entry;
	pc->pending_tail = &pc_entry->next;
	pc->st.offload_blocks += n;
	pc->st.offload_bytes += n * pc->kv_block_bytes;
	free(pairs);
	return 0;

out_free:
	kvrt_free_blocks(pc->space, n, pool_ids);
	devcache_free(pc->dev, n, dev_ids);
	if (pc_entry)
		free(pc_entry->dev_ids);
	free(pc_entry);
	free(pairs);
	return ret;
}

/*
 * --inject-fault: double or halve one K element of a fetched block (flip
 * the lowest exponent bit), so that a test can see the equivalence check
 * catch a cache that hands back wrong data.
 */
void devcache_corrupt(struct devcache *d, uint32_t id)
{
	const struct kvrt_layout *l = &d->layout;
	unsigned char *where = (unsigned char *)d->base + (size_t)id * l->block_stride;
	unsigned char word[4], *p = d->gpu ? word : where;

	/* on the GPU: the word down, a bit flipped, the word back up */
	if (d->gpu && kvrt_gpu_memcpy(d->gpu->gpu, word, where, sizeof(word)))
		return;

	switch (l->kv_dtype) {
	case KVRT_DTYPE_F16:
		p[1] ^= 0x04;	/* bit 10 */
		break;
	case KVRT_DTYPE_BF16:
		p[0] ^= 0x80;	/* bit 7 */
		break;
	default:
		p[2] ^= 0x80;	/* bit 23 */
		break;
	}
	if (d->gpu)
		kvrt_gpu_memcpy(d->gpu->gpu, where, word, sizeof(word));
}

int pcache_fetch(struct pcache *pc, uint32_t n, const uint32_t *pool_ids,
		 const uint32_t *dev_ids, int resume)
{
	struct kvrt_block_pair *pairs;
	int ret;

	if (!n)
		return 0;
	pairs = make_pairs(n, pool_ids, dev_ids);
	if (!pairs)
		return -ENOMEM;
	ret = copy_now(pc, &pc->dev_arr, &pc->pool_arr, pairs, n);
	free(pairs);
	if (ret)
		return ret;
	if (pc->inject_fault) {
		pc->inject_fault = 0;
		devcache_corrupt(pc->dev, dev_ids[0]);
	}
	if (resume) {
		pc->st.fetch_resume_blocks += n;
		pc->st.fetch_resume_bytes += n * pc->kv_block_bytes;
	} else {
		pc->st.fetch_hit_blocks += n;
		pc->st.fetch_hit_bytes += n * pc->kv_block_bytes;
	}
	return 0;
}

int pcache_free_owned(struct pcache *pc, uint32_t n, const uint32_t *ids)
{
	return n ? kvrt_free_blocks(pc->space, n, ids) : 0;
}

/* Retire the oldest pending copies; wait: block until each is done. */
static int retire(struct pcache *pc, int wait)
{
	struct pending_copy *e;
	int ret;

	while ((e = pc->pending)) {
		ret = !e->copy ? 0 : wait ? kvrt_copy_wait(e->copy) : kvrt_copy_poll(e->copy);
		if (ret == -EAGAIN)
			return 0;	/* copies complete in submission order */
		if (e->copy)
			kvrt_copy_free(e->copy);
		devcache_free(pc->dev, e->n, e->dev_ids);
		pc->pending = e->next;
		if (!pc->pending)
			pc->pending_tail = &pc->pending;
		free(e->dev_ids);
		free(e);
		if (ret)
			return ret;
	}
	return 0;
}

int pcache_poll(struct pcache *pc)
{
	return retire(pc, 0);
}

int pcache_wait_all(struct pcache *pc)
{
	return retire(pc, 1);
}

void pcache_flush_tiers(struct pcache *pc)
{
	if (pc->tier && kvrt_tier_flush(pc->space) < 0)
		pc->st.tier_store_errors++;
}

int pcache_tag_pending(const struct pcache *pc, uint64_t tag)
{
	const struct pending_copy *e;

	for (e = pc->pending; e; e = e->next)
		if (e->tag == tag)
			return 1;
	return 0;
}
