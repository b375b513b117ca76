/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * kvcore: the block state machine and prefix cache of one space, in
 * portable C.
 *
 * A space is a range of nr_blocks blocks of block_bytes each.  A prefix of
 * the range has been backed by pages; the host (kernel module or embedded
 * backend) adds backing through the grow callback when an allocation needs
 * it, and may take backing away again (reclaim), which leaves HOLE blocks
 * that the refill callback backs again on demand.  kvcore keeps no locks:
 * the caller serialises every call on one space.
 *
 * Block states:
 *   FREE       backed, on the free stack.
 *   OWNED      private to one owner (a file descriptor), writable.
 *   PUBLISHED  keyed by a 32-byte content hash in the space's index,
 *              immutable by contract, readers > 0.
 *   CACHED     published with no readers: on the LRU of its priority,
 *              evictable.
 *   HOLE       inside the backed prefix but (partly) without pages after a
 *              reclaim; on the hole list until refilled.
 *
 * Accounting invariant (kvc_space_check):
 *   free + owned + published + cached + holes == backed_blocks, each block
 *   in exactly one state and exactly the list or index that state implies,
 *   readers > 0 exactly for PUBLISHED blocks and they add up to nr_readers.
 *
 * Reader references are counted per holder in a struct kvc_refs, which the
 * host keeps per owner so that closing an owner drops exactly its
 * references: everything a descriptor holds is released when it closes,
 * and nothing else releases it (Documentation/kvpool.rst).
 */
#ifndef KVCORE_H
#define KVCORE_H

#include "kvc_shim.h"

enum kvc_block_state {
	KVC_BLOCK_FREE = 0,
	KVC_BLOCK_OWNED = 1,
	KVC_BLOCK_PUBLISHED = 2,
	KVC_BLOCK_CACHED = 3,
	KVC_BLOCK_HOLE = 4,
	KVC_BLOCK_STATES,
};

/* Owner 0 means "nobody"; hosts hand out owner ids from 1. */
#define KVC_OWNER_NONE 0
/* No block: list ends and empty hash buckets. */
#define KVC_NONE 0xffffffffU

#define KVC_HASH_BYTES 32
/* Eviction priorities: lower goes first; the default is in the middle. */
#define KVC_PRIO_MAX 100
#define KVC_PRIO_DEFAULT 50
#define KVC_PRIO_LEVELS (KVC_PRIO_MAX + 1)

/* Why a cached block was evicted; numerically equal to KVPOOL_EVICT_*. */
enum kvc_evict_cause {
	KVC_EVICT_QUOTA = 0,	/* the space's range (quota) was full */
	KVC_EVICT_POOL = 1,	/* the pool had no pages left */
	KVC_EVICT_TENANT = 2,	/* the space owner's per-uid limit was reached */
	KVC_EVICT_RECLAIM = 3,	/* host memory pressure (shrinker) */
	KVC_EVICT_ADMIN = 4,	/* an explicit drop */
	KVC_EVICT_CAUSES,
};

struct kvc_space;

struct kvc_space_ops {
	/*
	 * Back at least want_bytes more of the range at its end.  Returns the
	 * bytes added (which may exceed want_bytes, e.g. a whole chunk), 0 when
	 * the pool has nothing left, -EDQUOT when the space's tenant is at its
	 * limit, or another negative errno, which fails the allocation.
	 */
	long long (*grow)(struct kvc_space *s, kvc_u64 want_bytes);
	/*
	 * Optional (NULL: the host never reclaims).  Back every missing page of
	 * bytes [start, start + len) of the range, which lie inside the backed
	 * prefix.  0, or an errno as for grow (-ENOSPC for an empty pool).
	 * Pages added before a failure stay with the space.
	 */
	int (*refill)(struct kvc_space *s, kvc_u64 start, kvc_u64 len);
	/*
	 * Optional.  A cached block is being evicted: called after it left the
	 * index and before it is reused; hash stays valid during the call.
	 */
	void (*evicted)(struct kvc_space *s, kvc_u32 id, const kvc_u8 *hash,
			unsigned int cause);
};

struct kvc_block {
	kvc_u32 owner;		/* OWNED: the owner; else KVC_OWNER_NONE */
	kvc_u32 readers;	/* PUBLISHED: reader references */
	kvc_u32 prev;		/* FREE: index in free_stack; CACHED/HOLE: list link */
	kvc_u32 next;		/* CACHED/HOLE: list link */
	kvc_u32 hnext;		/* PUBLISHED/CACHED: next in the hash bucket */
	kvc_u8 state;
	kvc_u8 priority;	/* PUBLISHED/CACHED */
	kvc_u8 pad[2];
};

/* A doubly linked list threaded through kvc_block.prev/next. */
struct kvc_list {
	kvc_u32 head;		/* oldest */
	kvc_u32 tail;		/* newest */
};

struct kvc_space_stats {
	kvc_u64 allocs;		/* blocks handed out */
	kvc_u64 frees;		/* blocks returned by FREE, by owner release, or deduplicated */
	kvc_u64 alloc_failures;	/* ALLOC calls that failed */
	kvc_u64 hits;		/* looked-up blocks found */
	kvc_u64 misses;		/* looked-up blocks not served (from the first miss on) */
	kvc_u64 inserts;	/* blocks published under a new hash */
	kvc_u64 dedups;		/* blocks published under a hash already present */
	kvc_u64 pressure;	/* allocations that had to evict */
	kvc_u64 last_pressure_cause;	/* why the latest allocation was out of room */
	kvc_u64 evictions[KVC_EVICT_CAUSES];
};

struct kvc_space {
	kvc_u64 block_bytes;
	kvc_u64 nr_blocks;	/* quota in blocks: the range */
	kvc_u64 backed_bytes;	/* prefix of the range backed at some time */
	kvc_u64 backed_blocks;	/* whole blocks within backed_bytes */
	kvc_u64 capacity;	/* entries allocated in the per-block arrays */
	kvc_u64 nr_free;	/* entries used in free_stack[] */
	kvc_u64 nr_owned;
	kvc_u64 nr_published;
	kvc_u64 nr_cached;
	kvc_u64 nr_holes;
	kvc_u64 nr_readers;	/* sum of readers over PUBLISHED blocks */
	kvc_u32 max_readers;	/* bound on one block's readers, KVC_READERS_MAX by default */
	struct kvc_block *blocks;
	kvc_u32 *free_stack;	/* LIFO: recently freed blocks are reused first */
	kvc_u8 (*hashes)[KVC_HASH_BYTES];	/* PUBLISHED/CACHED: the key */
	kvc_u32 *buckets;	/* hash index heads, nr_buckets (a power of 2) */
	kvc_u64 bucket_key[2];	/* SipHash key of the index, random per space */
	kvc_u64 nr_buckets;
	struct kvc_list lru[KVC_PRIO_LEVELS];	/* CACHED, per priority */
	kvc_u64 lru_nonempty[2];	/* bit p: lru[p] has blocks */
	struct kvc_list holes;
	struct kvc_space_stats stats;
	const struct kvc_space_ops *ops;
	void *host;		/* for the ops */
};

/*
 * One holder's reader references: block id -> count, an open-addressing
 * table.  Zero-initialised is empty.
 */
struct kvc_refs {
	kvc_u32 *keys;		/* block id + 1; 0 is an empty slot */
	kvc_u32 *counts;
	kvc_u32 cap;		/* slots, a power of 2, or 0 */
	kvc_u32 used;		/* slots holding an id */
	kvc_u64 total;		/* sum of counts */
	kvc_u64 limit;		/* bound on total; 0: KVC_REFS_MAX */
};

/*
 * Reader references are bounded so that no count can wrap: a block's
 * readers stay below KVC_READERS_MAX (of 2^32) whatever the number of
 * holders, and one holder's total below its limit.  A PUBLISH or LOOKUP
 * that could pass either bound fails with -EOVERFLOW and takes nothing.
 */
#define KVC_READERS_MAX (1U << 31)
#define KVC_REFS_MAX (1ULL << 24)

/* Largest range kvcore accepts, in blocks (ids are 32-bit, KVC_NONE excluded). */
#define KVC_MAX_BLOCKS (1ULL << 31)

int kvc_space_init(struct kvc_space *s, kvc_u64 block_bytes, kvc_u64 nr_blocks,
		   const struct kvc_space_ops *ops, void *host);
void kvc_space_fini(struct kvc_space *s);

/*
 * Allocate count blocks owned by owner into ids[]: all or none.  Free
 * blocks first, then holes are refilled and the range grown; when that is
 * not enough, cached blocks of this space are evicted, lowest priority
 * first and least recently released first within a priority.
 * -ENOSPC when even eviction cannot make room, -ENOMEM when kvcore's own
 * arrays cannot grow, -EINVAL for count 0 or owner 0, or a callback's
 * errno other than -ENOSPC/-EDQUOT.  Nothing is evicted unless the
 * allocation then succeeds.  Backing added on the way stays.
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

/* Publish entry, laid out as struct kvpool_publish_entry. */
struct kvc_publish_entry {
	kvc_u8 hash[KVC_HASH_BYTES];	/* in */
	kvc_u32 id;		/* in: an owned block; out: the block holding hash */
	kvc_u32 priority;	/* in: 0..KVC_PRIO_MAX */
	kvc_u32 flags;		/* out: KVC_PUBLISH_DEDUP */
	kvc_u32 pad;
};

#define KVC_PUBLISH_DEDUP 1U	/* hash was present; the entry's own block was freed */

/*
 * Publish count owned blocks under their hashes, all or none.  Each entry
 * ends with one reader reference in refs on the block that holds its hash:
 * its own block, now PUBLISHED, or the block already present (its own
 * block is then freed and flags says DEDUP).  Returns the number of
 * dedups, or -EINVAL (bad id, id twice, priority out of range), -EPERM
 * (block not owned by owner), -EOVERFLOW (a block holding one of the
 * hashes has max_readers - count readers or more, or refs would pass its
 * limit), -ENOMEM (refs table).
 */
int kvc_publish(struct kvc_space *s, kvc_u32 owner, struct kvc_refs *refs, kvc_u32 count,
		struct kvc_publish_entry *entries);

/*
 * Look up hashes in order and stop at the first miss.  Takes one reader
 * reference in refs per hit and writes the hits' ids to ids[].  Returns
 * the number of hits, or -EOVERFLOW (a hit has max_readers - hits
 * readers or more, or refs would pass its limit) or -ENOMEM (refs table);
 * on an error nothing is taken, though ids[] may have been written.
 */
int kvc_lookup(struct kvc_space *s, struct kvc_refs *refs, kvc_u32 count,
	       const kvc_u8 (*hashes)[KVC_HASH_BYTES], kvc_u32 *ids);

/*
 * Drop one reader reference per id (an id may repeat as often as refs
 * holds it), all or none.  -EINVAL for an id that refs does not hold that
 * often.  A block left with no readers becomes CACHED, newest on its LRU.
 */
int kvc_release(struct kvc_space *s, struct kvc_refs *refs, kvc_u32 count, const kvc_u32 *ids);

/* Drop every reference refs holds and free its table; returns how many. */
kvc_u64 kvc_release_refs(struct kvc_space *s, struct kvc_refs *refs);

/* References refs holds on id. */
kvc_u32 kvc_refs_count(const struct kvc_refs *refs, kvc_u32 id);

/*
 * SipHash-2-4 of len bytes under a 128-bit key.  The index buckets hashes
 * with it under a random per-space key, so a caller that picks its hashes
 * cannot pile them into one bucket.
 */
kvc_u64 kvc_siphash(const kvc_u64 key[2], const void *data, kvc_u64 len);

/* The block holding hash (PUBLISHED or CACHED), or KVC_NONE. */
kvc_u32 kvc_find(const struct kvc_space *s, const kvc_u8 *hash);

/* The hash of a PUBLISHED or CACHED block. */
static inline const kvc_u8 *kvc_block_hash(const struct kvc_space *s, kvc_u32 id)
{
	return s->hashes[id];
}

/*
 * Eviction order: the first cached block to go, and the one after id.
 * KVC_NONE at the end.  Only valid while the space is unchanged.
 */
kvc_u32 kvc_lru_first(const struct kvc_space *s);
kvc_u32 kvc_lru_next(const struct kvc_space *s, kvc_u32 id);

/* Evict up to count cached blocks in eviction order; returns how many. */
kvc_u64 kvc_evict(struct kvc_space *s, kvc_u64 count, unsigned int cause);

/*
 * Reclaim: may the host take away the pages of bytes [start, start + len)?
 * Only when every block they touch is FREE, CACHED or a HOLE and the range
 * lies within the whole blocks of the backed prefix.
 */
int kvc_range_reclaimable(const struct kvc_space *s, kvc_u64 start, kvc_u64 len);

/*
 * The host is taking away those pages: cached blocks touched are evicted
 * (cause), and every touched block becomes a HOLE.  Call only after
 * kvc_range_reclaimable() said yes.  Returns the blocks evicted.
 */
kvc_u64 kvc_reclaim_range(struct kvc_space *s, kvc_u64 start, kvc_u64 len, unsigned int cause);

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
