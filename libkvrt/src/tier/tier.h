/* SPDX-License-Identifier: MIT */
/*
 * tier/tier.h: what a tier below the pool implements, one ops table per
 * kind (as pool/backend.h for the pool backends).  tier.c checks every
 * argument, walks a handle's tiers in order and moves blocks between the
 * pool and a tier; a tier sees only block ids inside its space and hashes
 * it is asked about, and locks its own state.  Its figures are shown
 * (kvrt_tier_show_stats) at the end of each op, so that kvrt_tier_stats()
 * never waits behind a tier's I/O (a stalled Redis node, a slow device).
 */
#ifndef KVRT_TIER_H
#define KVRT_TIER_H

#include <pthread.h>

#include "internal.h"

struct kvrt_tier_ops {
	/* How many of hashes[0..count), from the first, the tier holds; no data is read. */
	uint32_t (*present)(struct kvrt_tier *t, uint32_t count,
			    const uint8_t (*hashes)[KVRT_HASH_BYTES]);
	/*
	 * Read hashes[i]'s data into block ids[i] of the space, in order;
	 * returns how many, from the first, arrived whole (checksum checked).
	 * A block that did not is dropped from the tier.
	 */
	uint32_t (*fetch)(struct kvrt_tier *t, uint32_t count,
			  const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids);
	/* Write the blocks it lacks; the number written, or -EIO / -ENOMEM. */
	int (*store)(struct kvrt_tier *t, uint32_t count, const uint8_t (*hashes)[KVRT_HASH_BYTES],
		     const uint32_t *ids, const uint32_t *prio);
	/* Release everything the tier holds open and free it. */
	void (*close)(struct kvrt_tier *t);
};

/* The common part every tier embeds. */
struct kvrt_tier {
	const struct kvrt_tier_ops *ops;
	enum kvrt_tier_kind kind;
	struct kvrt_space *space;
	struct kvrt_tier *next;		/* space->tiers, in search order */
	struct kvrt_writeback *wb;	/* NULL: write-through */
	pthread_mutex_t shown_lock;	/* taken alone, or inside the tier's own lock */
	struct kvrt_tier_stats shown;	/* as of the end of the last op */
};

/* A tier's open and close: the common part's lock. */
void kvrt_tier_common_init(struct kvrt_tier *t);
void kvrt_tier_common_destroy(struct kvrt_tier *t);
/* What kvrt_tier_stats() returns from now on; the tier calls it under its own lock. */
void kvrt_tier_show_stats(struct kvrt_tier *t, const struct kvrt_tier_stats *stats);

/*
 * The 32-byte identity of a space's blocks in any tier: its name, owner
 * uid, block_bytes and the layout's geometry (num_blocks aside), if any.
 */
int kvrt_tier_identity(struct kvrt_space *s, const struct kvrt_layout *layout, uint8_t id[32]);

/*
 * writeback.c: a write-back tier's queue and thread.  _queue takes over
 * the reader references of ids[0..n) it queues and returns how many fit;
 * _flush waits for what was queued before it and returns the first error
 * since the last flush; _stop writes what is queued, then ends the thread
 * (its figures stay readable until _free).
 */
int kvrt_writeback_start(struct kvrt_tier *t, uint32_t max_blocks);
uint32_t kvrt_writeback_queue(struct kvrt_tier *t, uint32_t n,
			      const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids,
			      const uint32_t *prio);
int kvrt_writeback_flush(struct kvrt_tier *t);
void kvrt_writeback_stats(struct kvrt_tier *t, struct kvrt_tier_stats *stats);
void kvrt_writeback_stop(struct kvrt_tier *t);
/* False in a fork()ed child: the thread, and the queue's references, are the parent's. */
bool kvrt_writeback_here(const struct kvrt_tier *t);
void kvrt_writeback_free(struct kvrt_writeback *wb);

int kvrt_ssd_open(struct kvrt_space *s, const struct kvrt_tier_ssd_opts *o,
		  const uint8_t identity[32], struct kvrt_tier **out);
int kvrt_redis_open(struct kvrt_space *s, const struct kvrt_tier_redis_opts *o,
		    const uint8_t identity[32], struct kvrt_tier **out);

#endif /* KVRT_TIER_H */
