// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * kvcore: block allocation within a space.  See kvcore.h for the contract.
 * The caller holds the space's lock around every function here.
 */
#include "kvcore.h"

/* Transient mark used while a FREE batch is validated. */
#define KVC_BLOCK_MARKED 0x80

int kvc_space_init(struct kvc_space *s, kvc_u64 block_bytes, kvc_u64 nr_blocks,
		   const struct kvc_space_ops *ops, void *host)
{
	if (!block_bytes || !nr_blocks || nr_blocks > KVC_MAX_BLOCKS || !ops || !ops->grow)
		return -EINVAL;
	/* The range is counted in bytes: nr_blocks * block_bytes must not wrap. */
	if (block_bytes > ~0ULL / nr_blocks)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->block_bytes = block_bytes;
	s->nr_blocks = nr_blocks;
	s->ops = ops;
	s->host = host;
	return 0;
}

void kvc_space_fini(struct kvc_space *s)
{
	kvc_free_mem(s->blocks);
	kvc_free_mem(s->free_stack);
	s->blocks = NULL;
	s->free_stack = NULL;
	s->capacity = 0;
}

/* Make blocks[] and free_stack[] hold at least want entries. */
static int kvc_reserve(struct kvc_space *s, kvc_u64 want)
{
	struct kvc_block *blocks;
	kvc_u32 *stack;
	kvc_u64 cap = s->capacity ? s->capacity : 64;

	if (want <= s->capacity)
		return 0;
	while (cap < want)
		cap *= 2;
	if (cap > s->nr_blocks)
		cap = s->nr_blocks;
	blocks = kvc_zalloc(cap * sizeof(*blocks));
	stack = kvc_zalloc(cap * sizeof(*stack));
	if (!blocks || !stack) {
		kvc_free_mem(blocks);
		kvc_free_mem(stack);
		return -ENOMEM;
	}
	if (s->capacity) {
		memcpy(blocks, s->blocks, s->capacity * sizeof(*blocks));
		memcpy(stack, s->free_stack, s->nr_free * sizeof(*stack));
	}
	kvc_free_mem(s->blocks);
	kvc_free_mem(s->free_stack);
	s->blocks = blocks;
	s->free_stack = stack;
	s->capacity = cap;
	return 0;
}

/*
 * Push the blocks that backed_bytes now completes.  backed_bytes is updated
 * before this can fail, so the host's pages are never lost track of: a
 * failed push is retried by the next allocation.
 */
static int kvc_push_backed(struct kvc_space *s)
{
	kvc_u64 new_blocks = s->backed_bytes / s->block_bytes, id;
	int ret;

	if (new_blocks == s->backed_blocks)
		return 0;
	ret = kvc_reserve(s, new_blocks);
	if (ret)
		return ret;
	/* Push in reverse so the lowest new id is handed out first. */
	for (id = new_blocks; id > s->backed_blocks; id--) {
		s->blocks[id - 1].state = KVC_BLOCK_FREE;
		s->blocks[id - 1].owner = KVC_OWNER_NONE;
		s->free_stack[s->nr_free++] = (kvc_u32)(id - 1);
	}
	s->backed_blocks = new_blocks;
	return 0;
}

int kvc_alloc(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids)
{
	kvc_u32 i;
	int ret;

	if (!count || owner == KVC_OWNER_NONE)
		return -EINVAL;
	if (count > s->nr_free + (s->nr_blocks - s->backed_blocks)) {
		ret = -ENOSPC;
		goto out_fail;
	}
	/*
	 * Backing that came in earlier becomes blocks first.  When that needs
	 * memory that is not there, free blocks can still serve the request.
	 */
	ret = kvc_push_backed(s);
	if (ret && s->nr_free < count)
		goto out_fail;
	while (s->nr_free < count) {
		kvc_u64 range_bytes = s->nr_blocks * s->block_bytes;
		kvc_u64 want = (s->backed_blocks + count - s->nr_free) * s->block_bytes -
			       s->backed_bytes;
		long long got = s->ops->grow(s, want);

		if (got < 0) {
			/* Anything below -4095 is no errno: do not truncate it to one. */
			ret = got >= -4095 ? (int)got : -EIO;
			goto out_fail;
		}
		if (got == 0) {
			ret = -ENOSPC;
			goto out_fail;
		}
		if ((kvc_u64)got > range_bytes - s->backed_bytes)
			got = (long long)(range_bytes - s->backed_bytes);
		s->backed_bytes += (kvc_u64)got;
		ret = kvc_push_backed(s);
		if (ret)
			goto out_fail;
	}
	for (i = 0; i < count; i++) {
		kvc_u32 id = s->free_stack[--s->nr_free];

		s->blocks[id].state = KVC_BLOCK_OWNED;
		s->blocks[id].owner = owner;
		ids[i] = id;
	}
	s->nr_owned += count;
	s->stats.allocs += count;
	return 0;

out_fail:
	s->stats.alloc_failures++;
	return ret;
}

static void kvc_unmark(struct kvc_block *blocks, kvc_u32 n, const kvc_u32 *ids)
{
	kvc_u32 i;

	for (i = 0; i < n; i++)
		blocks[ids[i]].state &= ~KVC_BLOCK_MARKED;
}

int kvc_free(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids)
{
	kvc_u32 i;
	int ret;

	if (!count)
		return -EINVAL;
	/* Validate the whole batch before changing anything. */
	for (i = 0; i < count; i++) {
		kvc_u32 id = ids[i];

		if (id >= s->backed_blocks) {
			ret = -EINVAL;
			goto out_unmark;
		}
		if (s->blocks[id].state & KVC_BLOCK_MARKED) {
			ret = -EINVAL;
			goto out_unmark;
		}
		if (s->blocks[id].state != KVC_BLOCK_OWNED || s->blocks[id].owner != owner) {
			ret = -EPERM;
			goto out_unmark;
		}
		s->blocks[id].state |= KVC_BLOCK_MARKED;
	}
	for (i = 0; i < count; i++) {
		kvc_u32 id = ids[i];

		s->blocks[id].state = KVC_BLOCK_FREE;
		s->blocks[id].owner = KVC_OWNER_NONE;
		s->free_stack[s->nr_free++] = id;
	}
	s->nr_owned -= count;
	s->stats.frees += count;
	return 0;

out_unmark:
	kvc_unmark(s->blocks, i, ids);
	return ret;
}

kvc_u64 kvc_release_owner(struct kvc_space *s, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	if (owner == KVC_OWNER_NONE)
		return 0;
	for (id = 0; id < s->backed_blocks; id++) {
		if (s->blocks[id].state == KVC_BLOCK_OWNED && s->blocks[id].owner == owner) {
			s->blocks[id].state = KVC_BLOCK_FREE;
			s->blocks[id].owner = KVC_OWNER_NONE;
			s->free_stack[s->nr_free++] = (kvc_u32)id;
			n++;
		}
	}
	s->nr_owned -= n;
	s->stats.frees += n;
	return n;
}

kvc_u64 kvc_owner_blocks(const struct kvc_space *s, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	for (id = 0; id < s->backed_blocks; id++)
		if (s->blocks[id].state == KVC_BLOCK_OWNED && s->blocks[id].owner == owner)
			n++;
	return n;
}

int kvc_space_check(const struct kvc_space *s, char *msg, unsigned long len)
{
	kvc_u64 id, counted[KVC_BLOCK_STATES] = { 0 };
	kvc_u64 i;

	if (s->backed_bytes > s->nr_blocks * s->block_bytes ||
	    s->backed_blocks > s->backed_bytes / s->block_bytes) {
		snprintf(msg, len, "backed_bytes %llu backed_blocks %llu disagree",
			 (unsigned long long)s->backed_bytes,
			 (unsigned long long)s->backed_blocks);
		return -EUCLEAN;
	}
	for (id = 0; id < s->backed_blocks; id++) {
		const struct kvc_block *b = &s->blocks[id];
		int is_free = b->state == KVC_BLOCK_FREE;
		int unowned = b->owner == KVC_OWNER_NONE;

		if (b->state >= KVC_BLOCK_STATES) {
			snprintf(msg, len, "block %llu in bad state %u",
				 (unsigned long long)id, b->state);
			return -EUCLEAN;
		}
		if (is_free != unowned) {
			snprintf(msg, len, "block %llu state %u owner %u",
				 (unsigned long long)id, b->state, b->owner);
			return -EUCLEAN;
		}
		counted[b->state]++;
	}
	if (counted[KVC_BLOCK_FREE] != s->nr_free || counted[KVC_BLOCK_OWNED] != s->nr_owned ||
	    s->nr_free + s->nr_owned != s->backed_blocks) {
		snprintf(msg, len,
			 "free %llu (counted %llu) + owned %llu (counted %llu) != backed %llu",
			 (unsigned long long)s->nr_free,
			 (unsigned long long)counted[KVC_BLOCK_FREE],
			 (unsigned long long)s->nr_owned,
			 (unsigned long long)counted[KVC_BLOCK_OWNED],
			 (unsigned long long)s->backed_blocks);
		return -EUCLEAN;
	}
	/*
	 * Each free block must be in the stack exactly once: mark them while
	 * scanning (the caller holds the space's lock, as for every call) and
	 * take the marks off again before returning.
	 */
	for (i = 0; i < s->nr_free; i++) {
		kvc_u32 id2 = s->free_stack[i];

		if (id2 >= s->backed_blocks || s->blocks[id2].state != KVC_BLOCK_FREE) {
			snprintf(msg, len, "free stack entry %llu holds block %u that is %s",
				 (unsigned long long)i, id2,
				 id2 >= s->backed_blocks ? "not backed" :
				 s->blocks[id2].state & KVC_BLOCK_MARKED ? "already in the stack" :
				 "not free");
			break;
		}
		s->blocks[id2].state |= KVC_BLOCK_MARKED;
	}
	kvc_unmark(s->blocks, (kvc_u32)i, s->free_stack);
	return i == s->nr_free ? 0 : -EUCLEAN;
}

static unsigned int kvc_add_nodes(kvc_u64 mask, unsigned int first, kvc_u8 *order,
				  unsigned int n)
{
	unsigned int i;

	for (i = 0; i < KVC_MAX_NODES; i++) {
		unsigned int nid = (first + i) % KVC_MAX_NODES;
		unsigned int j;
		int seen = 0;

		if (!(mask & (1ULL << nid)))
			continue;
		for (j = 0; j < n; j++)
			seen |= order[j] == nid;
		if (!seen)
			order[n++] = (kvc_u8)nid;
	}
	return n;
}

unsigned int kvc_numa_order(unsigned int policy, kvc_u64 mask, kvc_u64 pool_mask, int local,
			    unsigned int cursor, kvc_u8 *order)
{
	unsigned int n = 0;

	switch (policy) {
	case KVC_NUMA_BIND:
		return kvc_add_nodes(mask & pool_mask, 0, order, 0);
	case KVC_NUMA_INTERLEAVE:
		return kvc_add_nodes((mask ? mask : pool_mask) & pool_mask,
				     cursor % KVC_MAX_NODES, order, 0);
	default:
		/* Preferred: the mask, or the caller's node, then every other node. */
		if (mask)
			n = kvc_add_nodes(mask & pool_mask, 0, order, 0);
		else if (local >= 0 && local < KVC_MAX_NODES && (pool_mask & (1ULL << local)))
			order[n++] = (kvc_u8)local;
		return kvc_add_nodes(pool_mask, 0, order, n);
	}
}
