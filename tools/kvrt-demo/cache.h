/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cache.h: the two KV tiers.  The "device" cache is what attention reads:
 * a layer-major paged cache (as GPU engines keep one), a host array or,
 * with --device gpu, GPU memory.
 * The pool is a libkvrt space (kvpool.ko's pages, or the embedded pool):
 * block-major, one pool block per device block, where full prompt blocks
 * are published for reuse by content and idle sequences' private blocks
 * are offloaded.  Blocks move between the tiers only by kvrt_copy_blocks,
 * or kvrt_gpu_copy_blocks against the registered space on the GPU.
 */
#ifndef KVRT_DEMO_CACHE_H
#define KVRT_DEMO_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvrt.h>

struct devgpu;

struct devcache {
	struct kvrt_layout layout;	/* layer-major */
	void *base;			/* GPU memory when gpu is set */
	struct devgpu *gpu;
	uint64_t bytes;
	uint32_t *free_ids;		/* a stack of free block ids */
	uint32_t n_free;
};

int devcache_init(struct devcache *d, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		  uint32_t block_tokens, uint32_t blocks, enum kvrt_dtype dtype,
		  struct devgpu *gpu);
void devcache_fini(struct devcache *d);
int devcache_alloc(struct devcache *d, uint32_t n, uint32_t *ids);
void devcache_free(struct devcache *d, uint32_t n, const uint32_t *ids);
/* Test the checks: flip one bit of block id (layer 0, K, token 0). */
void devcache_corrupt(struct devcache *d, uint32_t id);

/* Figures of the pool side, summed over a run. */
struct pool_stats {
	uint64_t lookups;		/* hashes asked for */
	uint64_t hits;			/* blocks found */
	uint64_t shared_hits;		/* found, and published by another process */
	uint64_t shared_distinct;	/* distinct such blocks */
	uint64_t inserted;		/* published under a new hash */
	uint64_t dedups;		/* published, hash already there */
	uint64_t publish_skipped;	/* no pool room: not published */
	uint64_t offload_blocks, offload_bytes;		/* idle sequences, device -> pool */
	uint64_t publish_blocks, publish_bytes;		/* write-through, device -> pool */
	uint64_t fetch_hit_blocks, fetch_hit_bytes;	/* prefix hits, pool -> device */
	uint64_t fetch_resume_blocks, fetch_resume_bytes;	/* resumed sequences */
	uint64_t offload_dropped;	/* no pool room: recomputed on resume */
	uint64_t tier_hits;		/* hits read back from a tier */
	uint64_t tier_stores;		/* blocks written through (to any tier) */
	uint64_t tier_store_errors;	/* write-throughs that failed (the pool kept them) */
};

struct hashset;

/* A pending asynchronous offload: device blocks to free when it is done. */
struct pending_copy {
	struct kvrt_copy *copy;
	uint32_t *dev_ids;
	uint32_t n;
	uint64_t tag;		/* who it belongs to (a conversation) */
	struct pending_copy *next;
};

struct pcache {
	struct kvrt *k;
	struct kvrt_space *space;
	struct kvrt_layout layout;	/* block-major, block_stride = the space's block */
	struct kvrt_block_array pool_arr, dev_arr;
	struct devcache *dev;
	uint64_t kv_block_bytes;	/* K/V bytes of one block (what a copy moves) */
	uint8_t root[KVRT_HASH_BYTES];	/* chains every prompt: model identity */
	uint32_t block_tokens;
	struct hashset *mine;		/* hashes this process inserted */
	struct hashset *shared;		/* others' hashes this process hit */
	struct pending_copy *pending, **pending_tail;
	struct pool_stats st;
	uint32_t priority;		/* of the blocks it publishes (KVRT_PRIO_DEFAULT) */
	int inject_fault;		/* test: corrupt the next fetch once */
	struct kvrt_tier *tier;		/* the first --tier, or NULL: lookups go through tiers */
};

/* Space parameters from the command line. */
struct pool_opts {
	const char *space_name;
	uint32_t space_flags;		/* KVRT_SPACE_* */
	uint32_t space_owner;		/* KVRT_SPACE_FOREIGN: the owner to accept */
	uint32_t mode;
	uint64_t quota_bytes;
	const char *tier_dir;		/* an SSD tier below the pool, or NULL */
	const char *tier_redis;		/* a Redis Cluster's seeds, below that, or NULL */
	const char *tier_prefix;	/* its keys' prefix, or NULL */
	uint64_t tier_bytes;
	bool tier_write_back;		/* KVRT_TIER_WRITE_BACK on every tier */
};

/*
 * Join or create the space for this geometry (block_bytes: the pool
 * layout's block rounded up to a page), registered with the GPU when the
 * device cache is on one.  err gets a sentence on failure.
 */
/*
 * The model identity the hash chain starts from: the weights' fingerprint,
 * the K/V element type and the block size.  Every process that must find
 * another's blocks (a serving run, kvrt-demo warm) names it the same way.
 */
void pcache_model_id(char *buf, size_t len, uint64_t fingerprint, enum kvrt_dtype dtype,
		     uint32_t block_tokens);

int pcache_open(struct pcache *pc, struct kvrt *k, struct devcache *dev,
		const struct pool_opts *o, const void *model_id, size_t model_id_len,
		char *err, size_t errlen);
void pcache_close(struct pcache *pc);
void pcache_reset_stats(struct pcache *pc);

/* Hashes of the first n / block_tokens full blocks of tokens[0..n). */
int pcache_hash(struct pcache *pc, const uint32_t *tokens, uint32_t n,
		uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t max);

/* Longest cached prefix; ids get one reference each.  Returns hits. */
int pcache_lookup(struct pcache *pc, const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t n,
		  uint32_t *ids);

/*
 * Publish device blocks dev_ids[i] under hashes[i], at pc->priority:
 * allocate pool blocks, copy in one batch, publish in one call.  pool_ids[i] receives the block
 * that holds each hash (one reference each).  -ENOSPC: pool full, nothing
 * published (counted as skipped).
 */
int pcache_publish(struct pcache *pc, uint32_t n, const uint32_t *dev_ids,
		   const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *pool_ids);

int pcache_release(struct pcache *pc, uint32_t n, const uint32_t *ids);

/*
 * Offload device blocks to freshly allocated pool blocks (owned, private)
 * with an asynchronous copy; the device blocks go back to the device free
 * list when the copy completes.  -ENOSPC: no room (counted as dropped; the
 * device blocks are freed at once).
 */
int pcache_offload(struct pcache *pc, uint32_t n, const uint32_t *dev_ids, uint32_t *pool_ids,
		   uint64_t tag);

/* Copy pool blocks to device blocks now (hits, or resumed blocks). */
int pcache_fetch(struct pcache *pc, uint32_t n, const uint32_t *pool_ids,
		 const uint32_t *dev_ids, int resume);

int pcache_free_owned(struct pcache *pc, uint32_t n, const uint32_t *ids);

/*
 * Retire completed offloads (their device blocks go back to the free
 * list): those done now, or all of them, waiting.  0 or a copy's errno.
 */
int pcache_poll(struct pcache *pc);
int pcache_wait_all(struct pcache *pc);

/* Wait for the tiers' write-back queues; a failure counts in tier_store_errors. */
void pcache_flush_tiers(struct pcache *pc);
/* Whether an offload of this tag is still in flight. */
int pcache_tag_pending(const struct pcache *pc, uint64_t tag);

#endif
