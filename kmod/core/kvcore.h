/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * kvcore: the block state machine of one space, in portable C.
 *
 * A space is a range of nr_blocks blocks of block_bytes each.  Only a prefix
 * of the range is backed by pages; the host (kernel module or embedded
 * backend) adds backing through the grow callback when an allocation needs
 * it.  kvcore keeps no locks: the caller serialises every call on one space.
 *
 * Accounting invariant (kvc_space_check):
 *   free + owned == backed_blocks, each block in exactly one state, the free
 *   stack holds exactly the FREE blocks, and per-owner counts add up.
 */
#ifndef KVCORE_H
#define KVCORE_H

#include "kvc_shim.h"

enum kvc_block_state {
	KVC_BLOCK_FREE = 0,
	KVC_BLOCK_OWNED = 1,
	KVC_BLOCK_STATES,
};

/* Owner 0 means "nobody"; hosts hand out owner ids from 1. */
#define KVC_OWNER_NONE 0

struct kvc_space;

struct kvc_space_ops {
	/*
	 * Back at least want_bytes more of the range.  Returns the bytes added
	 * (which may exceed want_bytes, e.g. a whole chunk) or a negative errno;
	 * 0 means nothing could be added (-ENOSPC for the caller).
	 */
	long long (*grow)(struct kvc_space *s, kvc_u64 want_bytes);
};

struct kvc_block {
	kvc_u32 owner;
	kvc_u8 state;
	kvc_u8 pad[3];
};

struct kvc_space_stats {
	kvc_u64 allocs;		/* blocks handed out */
	kvc_u64 frees;		/* blocks returned by FREE or by owner release */
	kvc_u64 alloc_failures;	/* ALLOC calls that failed */
};

struct kvc_space {
	kvc_u64 block_bytes;
	kvc_u64 nr_blocks;	/* quota in blocks: the range */
	kvc_u64 backed_bytes;	/* bytes of the range with pages behind them */
	kvc_u64 backed_blocks;	/* whole blocks within backed_bytes */
	kvc_u64 capacity;	/* entries allocated in blocks[] and free_stack[] */
	kvc_u64 nr_free;	/* entries used in free_stack[] */
	kvc_u64 nr_owned;
	struct kvc_block *blocks;
	kvc_u32 *free_stack;	/* LIFO: recently freed blocks are reused first */
	struct kvc_space_stats stats;
	const struct kvc_space_ops *ops;
	void *host;		/* for the ops */
};

/* Largest range kvcore accepts, in blocks (ids are 32-bit). */
#define KVC_MAX_BLOCKS (1ULL << 31)

int kvc_space_init(struct kvc_space *s, kvc_u64 block_bytes, kvc_u64 nr_blocks,
		   const struct kvc_space_ops *ops, void *host);
void kvc_space_fini(struct kvc_space *s);

/*
 * Allocate count blocks owned by owner into ids[]: all or none.
 * -ENOSPC when the range or the host's pages run out, -ENOMEM when kvcore's
 * own arrays cannot grow, -EINVAL for count 0 or owner 0, or the grow
 * callback's errno.  On failure the space is unchanged except for any
 * backing that was added (backing is never given back by kvcore).
 */
int kvc_alloc(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids);

/*
 * Free count blocks: all or none.  -EINVAL for an id outside the backed
 * range or one that appears twice, -EPERM for a block not owned by owner.
 */
int kvc_free(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids);

/* Free every block owner holds; returns how many. */
kvc_u64 kvc_release_owner(struct kvc_space *s, kvc_u32 owner);

/* Blocks owner holds now. */
kvc_u64 kvc_owner_blocks(const struct kvc_space *s, kvc_u32 owner);

/*
 * Verify the accounting invariant.  Returns 0, or -EUCLEAN with a
 * description of the first violation written to msg (len bytes).
 */
int kvc_space_check(const struct kvc_space *s, char *msg, unsigned long len);

/* NUMA policies, numerically equal to enum kvpool_numa_policy. */
enum kvc_numa_policy {
	KVC_NUMA_PREFERRED = 0,
	KVC_NUMA_BIND = 1,
	KVC_NUMA_INTERLEAVE = 2,
};

#define KVC_MAX_NODES 64

/*
 * The nodes to try, in order, when a space under policy needs a chunk.
 * mask: the space's nodes (0: none given); pool_mask: nodes with pool pages;
 * local: the caller's node; cursor: the interleave position (the node after
 * the last one used).  Writes up to KVC_MAX_NODES node ids to order[] and
 * returns how many.
 */
unsigned int kvc_numa_order(unsigned int policy, kvc_u64 mask, kvc_u64 pool_mask, int local,
			    unsigned int cursor, kvc_u8 *order);

#endif /* KVCORE_H */
