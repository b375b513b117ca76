// SPDX-License-Identifier: GPL-2.0
/*
 * A space's backing: chunks taken from the pool and attached to its range
 * (grow and refill, the core's ops), and given back at teardown.
 */
#include <linux/highmem.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "compat.h"
#include "kvpool_internal.h"

/* Take a chunk of at most max_pages from the first node of the policy's order that has one. */
static struct kvp_chunk *kvp_space_take_chunk(struct kvp_space *space, unsigned int max_pages)
{
	kvc_u8 order[KVC_MAX_NODES];
	unsigned int i, n;

	BUILD_BUG_ON((int)KVC_NUMA_PREFERRED != (int)KVPOOL_NUMA_PREFERRED ||
		     (int)KVC_NUMA_BIND != (int)KVPOOL_NUMA_BIND ||
		     (int)KVC_NUMA_INTERLEAVE != (int)KVPOOL_NUMA_INTERLEAVE ||
		     KVC_MAX_NODES != KVPOOL_MAX_NODES);
	n = kvc_numa_order(space->numa_policy, space->node_mask, kvp_pool_node_mask(),
			   numa_node_id(), space->interleave_next, order);
	for (i = 0; i < n; i++) {
		struct kvp_chunk *chunk = kvp_pool_take(order[i], max_pages);

		if (chunk) {
			space->interleave_next = order[i] + 1;
			return chunk;
		}
	}
	return NULL;
}

/* Attach a chunk's pages at range offset 'at'; page->private finds the chunk again. */
static int kvp_space_attach(struct kvp_space *space, struct kvp_chunk *chunk, u64 at)
{
	unsigned long i, n = chunk->nr_pages, first = at >> PAGE_SHIFT;
	int ret;

	for (i = 0; i < n; i++) {
		set_page_private(chunk->page + i, (unsigned long)chunk);
		ret = xa_err(xa_store(&space->pages, first + i, chunk->page + i, GFP_KERNEL));
		if (ret)
			goto out_erase;
	}
	chunk->offset = at;
	list_add_tail(&chunk->link, &space->chunks);
	return 0;

out_erase:
	while (i--)
		xa_erase(&space->pages, first + i);
	for (i = 0; i < n; i++)
		set_page_private(chunk->page + i, 0);
	/*
	 * A fault may have found one of these pages under RCU and not yet
	 * taken its reference; the chunk goes back to a pool that may free it.
	 */
	synchronize_rcu();
	return ret;
}

/*
 * Take chunks for want bytes of the range into *taken, charging the
 * space's tenant.  Growth takes whole chunks (huge-page sized where the
 * pool has them); a refill (exact) cuts them to the gap.  Returns the
 * bytes taken; *err says why it stopped short (0: the pool ran dry).
 */
static u64 kvp_space_take(struct kvp_space *space, u64 want, bool exact,
			  struct list_head *taken, int *err)
{
	struct kvp_chunk *chunk;
	u64 have = 0;

	*err = 0;
	while (have < want) {
		u64 left_pages = (want - have + PAGE_SIZE - 1) >> PAGE_SHIFT;
		unsigned int max_pages = 1U << KVP_CHUNK_ORDER;

		if (fatal_signal_pending(current)) {
			*err = -EINTR;
			break;
		}
		if (exact)
			max_pages = min_t(u64, left_pages, max_pages);
		chunk = kvp_space_take_chunk(space, max_pages);
		if (!chunk)
			break;
		if (kvp_tenant_charge(space->tenant, kvp_chunk_bytes(chunk))) {
			kvp_pool_return(chunk);
			*err = -EDQUOT;
			break;
		}
		list_add_tail(&chunk->link, taken);
		have += kvp_chunk_bytes(chunk);
	}
	return have;
}

/* Give back chunks that were taken but not attached. */
static void kvp_space_untake(struct kvp_space *space, struct list_head *taken)
{
	struct kvp_chunk *chunk, *next;

	list_for_each_entry_safe(chunk, next, taken, link) {
		list_del_init(&chunk->link);
		kvp_chunk_leave_space(chunk, space->tenant);
		kvp_pool_return(chunk);
	}
}

/* Scrub (when the chunk comes from another space) and attach at 'at'. */
static int kvp_space_place(struct kvp_space *space, struct kvp_chunk *chunk, u64 at)
{
	if (chunk->last_space != space->serial)
		kvp_chunk_scrub(chunk);
	chunk->last_space = space->serial;
	return kvp_space_attach(space, chunk, at);
}

/*
 * kvcore grow callback: back at least want more bytes of the range, all or
 * nothing, so a failed ALLOC leaves the pool as it found it.  Chunks are
 * taken first and scrubbed and attached only once all are in hand.
 */
long long kvp_space_grow(struct kvc_space *core, u64 want)
{
	struct kvp_space *space = container_of(core, struct kvp_space, core);
	u64 room = core->nr_blocks * core->block_bytes - core->backed_bytes;
	struct kvp_chunk *chunk, *next;
	LIST_HEAD(taken);
	u64 have, got = 0;
	int ret = 0;

	lockdep_assert_held(&space->lock);
	want = min(want, room);
	down_read(&kvp_pool.backing_rwsem);
	have = kvp_space_take(space, want, false, &taken, &ret);
	if (have < want)
		goto out_return;	/* ret 0: kvcore reports -ENOSPC */
	list_for_each_entry_safe(chunk, next, &taken, link) {
		list_del_init(&chunk->link);
		ret = kvp_space_place(space, chunk, core->backed_bytes + got);
		if (ret) {
			list_add(&chunk->link, &taken);
			break;
		}
		got += kvp_chunk_bytes(chunk);
	}

out_return:
	kvp_space_untake(space, &taken);
	up_read(&kvp_pool.backing_rwsem);
	/* Pages already attached are the space's even when attaching stopped early. */
	if (got)
		return got;
	return ret;
}

/*
 * kvcore refill callback: back every missing page of [start, start + len),
 * which reclaim left as holes, with chunks cut to the size of each gap.
 */
int kvp_space_refill(struct kvc_space *core, u64 start, u64 len)
{
	struct kvp_space *space = container_of(core, struct kvp_space, core);
	unsigned long pg = start >> PAGE_SHIFT, end = (start + len + PAGE_SIZE - 1) >> PAGE_SHIFT;
	int ret = 0;

	lockdep_assert_held(&space->lock);
	down_read(&kvp_pool.backing_rwsem);
	while (pg < end && !ret) {
		unsigned long gap_end = pg;
		struct kvp_chunk *chunk, *next;
		LIST_HEAD(taken);
		u64 have;

		if (xa_load(&space->pages, pg)) {
			pg++;
			continue;
		}
		while (gap_end < end && !xa_load(&space->pages, gap_end))
			gap_end++;
		have = kvp_space_take(space, (u64)(gap_end - pg) << PAGE_SHIFT, true, &taken,
				      &ret);
		if (!have && !ret)
			ret = -ENOSPC;
		list_for_each_entry_safe(chunk, next, &taken, link) {
			int err;

			list_del_init(&chunk->link);
			err = kvp_space_place(space, chunk, (u64)pg << PAGE_SHIFT);
			if (err) {
				list_add(&chunk->link, &taken);
				ret = err;
				break;
			}
			pg += chunk->nr_pages;
		}
		kvp_space_untake(space, &taken);
	}
	up_read(&kvp_pool.backing_rwsem);
	return ret;
}

/* Pages of chunks given back per hold of the space's lock at teardown. */
#define KVP_TEARDOWN_PAGES 4096

/*
 * Give the chunks of a dying space back to the pool, a few thousand pages
 * at a time, yielding in between: a big space's teardown holds no global
 * lock and no CPU for long.  The chunk list moves under the space's lock,
 * as the debugfs dumps walk it, and under backing_rwsem, so that the
 * check sees each chunk in the space or in the pool.
 */
void kvp_space_return_chunks(struct kvp_space *space)
{
	bool more;

	do {
		unsigned long pages = 0, pg, first;
		struct kvp_chunk *chunk;

		mutex_lock(&space->lock);
		down_read(&kvp_pool.backing_rwsem);
		while (pages < KVP_TEARDOWN_PAGES &&
		       (chunk = list_first_entry_or_null(&space->chunks, struct kvp_chunk, link))) {
			list_del_init(&chunk->link);
			first = chunk->offset >> PAGE_SHIFT;
			for (pg = 0; pg < chunk->nr_pages; pg++) {
				xa_erase(&space->pages, first + pg);
				set_page_private(chunk->page + pg, 0);
			}
			pages += chunk->nr_pages;
			kvp_chunk_leave_space(chunk, space->tenant);
			kvp_pool_return(chunk);
		}
		more = !list_empty(&space->chunks);
		up_read(&kvp_pool.backing_rwsem);
		mutex_unlock(&space->lock);
		cond_resched();
	} while (more);
}
