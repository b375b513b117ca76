// SPDX-License-Identifier: GPL-2.0
/*
 * The pool: pinned chunks reserved per NUMA node.  Chunks are allocated at
 * load and on sysfs growth, handed to spaces whole, and given back to the
 * page allocator only when free and unreferenced: no page that a user
 * mapping or a DMA pin still holds is freed (Documentation/kvpool.rst, Pool).
 */
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/highmem.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "kvpool_internal.h"

struct kvp_pool kvp_pool;

/*
 * Held chunks wait for a pin or mapping to go away: typically a GUP user
 * (process_vm_readv, O_DIRECT, RDMA) that outlived the space by moments, or
 * a long-term registration that may last hours.  Recheck with backoff.
 */
#define KVP_HELD_RECHECK_MIN_MS	10
#define KVP_HELD_RECHECK_MAX_MS	5000
static void kvp_held_recheck(struct work_struct *work);
static DECLARE_DELAYED_WORK(kvp_held_work, kvp_held_recheck);
static unsigned int kvp_held_delay_ms = KVP_HELD_RECHECK_MIN_MS;

/* Fallback orders when 2 MiB blocks are fragmented away. */
static const unsigned int kvp_orders[] = { KVP_CHUNK_ORDER, 4, 0 };

static gfp_t kvp_order_gfp(unsigned int order)
{
	/*
	 * Fail rather than reclaim hard or wake the OOM killer: pinned pool
	 * pages cannot be reclaimed, so an OOM kill could not free them and
	 * a too-large pool_bytes would deadlock the host.
	 */
	return GFP_HIGHUSER | __GFP_THISNODE | __GFP_ZERO | __GFP_NOWARN | __GFP_NORETRY;
}

/* Allocate one chunk on nid, largest order first. */
static struct kvp_chunk *kvp_chunk_alloc(int nid, u64 max_bytes)
{
	struct kvp_chunk *chunk;
	struct page *page = NULL;
	unsigned int i;

	chunk = kzalloc_node(sizeof(*chunk), GFP_KERNEL, nid);
	if (!chunk)
		return NULL;
	for (i = 0; i < ARRAY_SIZE(kvp_orders); i++) {
		unsigned int order = kvp_orders[i];

		if ((PAGE_SIZE << order) > max_bytes && order)
			continue;
		page = alloc_pages_node(nid, kvp_order_gfp(order), order);
		if (page) {
			chunk->nr_pages = 1U << order;
			break;
		}
	}
	if (!page) {
		kfree(chunk);
		return NULL;
	}
	if (chunk->nr_pages > 1)
		split_page(page, ilog2(chunk->nr_pages));
	chunk->page = page;
	chunk->nid = nid;
	INIT_LIST_HEAD(&chunk->link);
	return chunk;
}

/*
 * A chunk is busy while any of its pages is referenced by more than the
 * pool: a user mapping, a get_user_pages pin (DMA, RDMA, O_DIRECT), or
 * anything else.  folio_maybe_dma_pinned() and page_mapped() name the
 * usual causes; the refcount catches them all.
 */
static bool kvp_chunk_busy_scan(const struct kvp_chunk *chunk, u64 *examined)
{
	unsigned long i, n = chunk->nr_pages;

	for (i = 0; i < n; i++) {
		struct page *page = chunk->page + i;

		if (page_count(page) != 1 || page_mapped(page) ||
		    folio_maybe_dma_pinned(page_folio(page))) {
			*examined += i + 1;
			return true;
		}
	}
	*examined += n;
	return false;
}

bool kvp_chunk_busy(const struct kvp_chunk *chunk)
{
	u64 examined = 0;

	return kvp_chunk_busy_scan(chunk, &examined);
}

/*
 * The most pages one pass over the held list examined since load or the
 * last reset (debugfs held_scan): what one take, or one step of the
 * recheck work, costs in page checks.
 */
static atomic64_t kvp_held_scan_max = ATOMIC64_INIT(0);

static void kvp_held_scan_note(u64 examined)
{
	s64 old = atomic64_read(&kvp_held_scan_max);

	while ((u64)old < examined &&
	       !atomic64_try_cmpxchg(&kvp_held_scan_max, &old, examined))
		;
}

u64 kvp_pool_held_scan_max(bool reset)
{
	return reset ? atomic64_xchg(&kvp_held_scan_max, 0) : atomic64_read(&kvp_held_scan_max);
}

/*
 * Zero a chunk (design: scrubbing): before a space other than its last
 * receives it (space.c), and before it goes back to the page allocator
 * with a space's data in it.  May sleep.
 */
void kvp_chunk_scrub(struct kvp_chunk *chunk)
{
	unsigned long i, n = chunk->nr_pages;

	for (i = 0; i < n; i++) {
		clear_highpage(chunk->page + i);
		if ((i & 63) == 63)
			cond_resched();
	}
	atomic64_inc(&kvp_pool.zeroed_chunks);
}

/*
 * Give a chunk back to the page allocator; may sleep.  A chunk that held a
 * space's data is zeroed first: the allocator hands pages to kernel users
 * that need not zero them (slab, page cache) and an info leak there would
 * read a tenant's KV data.  init_on_free zeroes every freed page already.
 * A page a pin still holds at unload is zeroed too: freed by its last
 * put, it gets no other chance.
 */
static void kvp_chunk_free(struct kvp_chunk *chunk)
{
	unsigned long i, n = chunk->nr_pages;

	if (chunk->last_space && !want_init_on_free())
		kvp_chunk_scrub(chunk);
	/* Drop the pool's reference; a page still pinned is freed by its last put. */
	for (i = 0; i < n; i++)
		__free_page(chunk->page + i);
	kfree(chunk);
}

static struct kvp_node *kvp_node_new(int nid)
{
	struct kvp_node *node = kzalloc_node(sizeof(*node), GFP_KERNEL, nid);

	if (!node)
		return NULL;
	spin_lock_init(&node->lock);
	node->nid = nid;
	INIT_LIST_HEAD(&node->free_chunks);
	INIT_LIST_HEAD(&node->held_chunks);
	return node;
}

/* A chunk that left a space charged is back in the pool. */
static void kvp_chunk_uncharge(struct kvp_chunk *chunk)
{
	if (chunk->charged) {
		kvp_tenant_unhold(chunk->charged, kvp_chunk_bytes(chunk));
		chunk->charged = NULL;
	}
}

/*
 * A chunk leaves a space whose tenant t is charged for it; the charge
 * stays until kvp_pool_return() or kvp_pool_release() finds it idle.
 */
void kvp_chunk_leave_space(struct kvp_chunk *chunk, struct kvp_tenant *t)
{
	kvp_tenant_hold(t, kvp_chunk_bytes(chunk));
	chunk->charged = t;
}

/*
 * Held chunks one recycling pass examines: at most this many times 512
 * pages checked per take (debugfs held_scan), and none of them under the
 * node lock.  A take that finds the free list empty makes one pass; the
 * recheck work makes as many as cover the list, yielding between them.
 */
#define KVP_RECYCLE_BATCH	8

/*
 * One pass over the head of node's held list: detach up to
 * KVP_RECYCLE_BATCH chunks under the lock, examine their pages without it,
 * then move the idle ones to the free list (or, when reclaim took them,
 * back to the page allocator) and the busy ones to the tail.  Detached
 * chunks still count in held_bytes, so the node's totals add up all along.
 * Returns the bytes examined, 0 when the held list was empty.
 */
static u64 kvp_node_recycle_pass(struct kvp_node *node)
{
	struct kvp_chunk *chunk, *next;
	LIST_HEAD(batch);
	LIST_HEAD(idle);
	LIST_HEAD(gone);
	u64 examined = 0, bytes = 0;
	unsigned int n = 0;

	lockdep_assert_not_held(&node->lock);
	spin_lock(&node->lock);
	list_for_each_entry_safe(chunk, next, &node->held_chunks, link) {
		if (n++ == KVP_RECYCLE_BATCH)
			break;
		list_move_tail(&chunk->link, &batch);
	}
	spin_unlock(&node->lock);
	if (list_empty(&batch))
		return 0;

	list_for_each_entry_safe(chunk, next, &batch, link) {
		bytes += kvp_chunk_bytes(chunk);
		if (!kvp_chunk_busy_scan(chunk, &examined))
			list_move_tail(&chunk->link, chunk->to_buddy ? &gone : &idle);
	}
	kvp_held_scan_note(examined);

	spin_lock(&node->lock);
	list_splice_tail(&batch, &node->held_chunks);
	list_for_each_entry(chunk, &idle, link) {
		node->held_bytes -= kvp_chunk_bytes(chunk);
		node->free_bytes += kvp_chunk_bytes(chunk);
		kvp_chunk_uncharge(chunk);
	}
	list_splice_tail(&idle, &node->free_chunks);
	list_for_each_entry(chunk, &gone, link) {
		node->held_bytes -= kvp_chunk_bytes(chunk);
		node->reserved_bytes -= kvp_chunk_bytes(chunk);
		node->nr_chunks--;
		kvp_chunk_uncharge(chunk);
	}
	spin_unlock(&node->lock);

	list_for_each_entry_safe(chunk, next, &gone, link) {
		list_del(&chunk->link);
		atomic64_add(kvp_chunk_bytes(chunk), &kvp_pool.reclaimed_bytes);
		kvp_chunk_free(chunk);
	}
	return bytes;
}

/* Passes over every chunk held when it starts; may sleep. */
static void kvp_node_recycle_held(struct kvp_node *node)
{
	u64 left = READ_ONCE(node->held_bytes), bytes;

	do {
		bytes = kvp_node_recycle_pass(node);
		left -= min(left, bytes);
		cond_resched();
	} while (bytes && left);
}

static void kvp_held_recheck(struct work_struct *work)
{
	bool waiting = false;
	int nid;

	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		struct kvp_node *node = kvp_pool.nodes[nid];

		kvp_node_recycle_held(node);
		spin_lock(&node->lock);
		waiting |= !list_empty(&node->held_chunks);
		spin_unlock(&node->lock);
	}
	if (!waiting) {
		WRITE_ONCE(kvp_held_delay_ms, KVP_HELD_RECHECK_MIN_MS);
		return;
	}
	WRITE_ONCE(kvp_held_delay_ms, min(kvp_held_delay_ms * 2, KVP_HELD_RECHECK_MAX_MS));
	schedule_delayed_work(&kvp_held_work, msecs_to_jiffies(kvp_held_delay_ms));
}

static int kvp_node_grow(struct kvp_node *node, u64 target)
{
	while (READ_ONCE(node->reserved_bytes) < target) {
		struct kvp_chunk *chunk;

		if (fatal_signal_pending(current))
			return -EINTR;
		chunk = kvp_chunk_alloc(node->nid, target - READ_ONCE(node->reserved_bytes));
		if (!chunk)
			return -ENOMEM;
		spin_lock(&node->lock);
		list_add_tail(&chunk->link, &node->free_chunks);
		node->reserved_bytes += kvp_chunk_bytes(chunk);
		node->free_bytes += kvp_chunk_bytes(chunk);
		node->nr_chunks++;
		spin_unlock(&node->lock);
		cond_resched();
	}
	return 0;
}

/* Free unreferenced free chunks until reserved <= target; -EBUSY if short. */
static int kvp_node_shrink(struct kvp_node *node, u64 target)
{
	kvp_node_recycle_held(node);
	for (;;) {
		struct kvp_chunk *chunk = NULL, *it;

		spin_lock(&node->lock);
		if (node->reserved_bytes <= target) {
			spin_unlock(&node->lock);
			return 0;
		}
		/* Never undershoot: a node keeps at least its (chunk-rounded) target. */
		list_for_each_entry(it, &node->free_chunks, link) {
			if (!kvp_chunk_busy(it) &&
			    kvp_chunk_bytes(it) <= node->reserved_bytes - target) {
				chunk = it;
				break;
			}
		}
		if (!chunk) {
			bool short_of_target = node->reserved_bytes - target >= KVP_CHUNK_BYTES ||
					       node->free_bytes < node->reserved_bytes - target;

			spin_unlock(&node->lock);
			return short_of_target ? -EBUSY : 0;
		}
		list_del(&chunk->link);
		node->reserved_bytes -= kvp_chunk_bytes(chunk);
		node->free_bytes -= kvp_chunk_bytes(chunk);
		node->nr_chunks--;
		spin_unlock(&node->lock);
		kvp_chunk_free(chunk);
		cond_resched();
	}
}

/*
 * Memory the pool may still take: what the kernel calls available, less a
 * reserve of 1/16 of RAM (at least 64 MiB) that the rest of the host keeps.
 */
static u64 kvp_pool_headroom(void)
{
	u64 avail = (u64)si_mem_available() << PAGE_SHIFT;
	u64 reserve = max_t(u64, (u64)totalram_pages() << PAGE_SHIFT >> 4, 64ULL << 20);

	return avail > reserve ? avail - reserve : 0;
}

int kvp_pool_resize(u64 total_bytes)
{
	u64 per_node, reserved, free, held, want;
	int nid, ret = 0;

	if (!kvp_pool.nr_nodes)
		return -ENODEV;
	/* Far past any host's memory: refuse before the arithmetic can wrap. */
	if (total_bytes > KVPOOL_MAX_SPACE_BYTES * 64)
		return -EINVAL;
	per_node = round_up(div_u64(total_bytes + kvp_pool.nr_nodes - 1, kvp_pool.nr_nodes),
			    KVP_CHUNK_BYTES);
	kvp_pool_totals(&reserved, &free, &held);
	want = per_node * kvp_pool.nr_nodes;
	if (want > reserved && want - reserved > kvp_pool_headroom())
		return -ENOMEM;
	mutex_lock(&kvp_pool.resize_lock);
	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		struct kvp_node *node = kvp_pool.nodes[nid];
		int err;

		WRITE_ONCE(node->target_bytes, per_node);
		if (READ_ONCE(node->reserved_bytes) < per_node)
			err = kvp_node_grow(node, per_node);
		else
			err = kvp_node_shrink(node, per_node);
		if (err && !ret)
			ret = err;
	}
	mutex_unlock(&kvp_pool.resize_lock);
	return ret;
}

/*
 * A node that reclaim shrank below its target allocates a fresh chunk when
 * a space needs one, so memory pressure only lends pages out for a while.
 */
static struct kvp_chunk *kvp_node_refill(struct kvp_node *node)
{
	u64 deficit = READ_ONCE(node->target_bytes) - READ_ONCE(node->reserved_bytes);
	struct kvp_chunk *chunk;

	if ((s64)deficit <= 0)
		return NULL;
	chunk = kvp_chunk_alloc(node->nid, deficit);
	if (!chunk)
		return NULL;
	spin_lock(&node->lock);
	node->reserved_bytes += kvp_chunk_bytes(chunk);
	node->in_spaces_bytes += kvp_chunk_bytes(chunk);
	node->nr_chunks++;
	spin_unlock(&node->lock);
	return chunk;
}

/*
 * Take a chunk of at most max_pages from nid for a space, splitting a
 * larger one, or NULL when the node has none free.  With the free list
 * empty it recycles at most KVP_RECYCLE_BATCH held chunks first, so that
 * its cost does not grow with what tenants park on the held list; idle
 * chunks further down come back through the recheck work.  May sleep.
 */
struct kvp_chunk *kvp_pool_take(int nid, unsigned int max_pages)
{
	struct kvp_chunk *chunk, *spare = NULL;
	bool recycled = false;
	struct kvp_node *node;

	if (nid < 0 || nid >= MAX_NUMNODES || !node_isset(nid, kvp_pool.pool_nodes) || !max_pages)
		return NULL;
	node = kvp_pool.nodes[nid];
retry:
	chunk = NULL;
	spin_lock(&node->lock);
	if (list_empty(&node->free_chunks) && !list_empty(&node->held_chunks) && !recycled) {
		/* One bounded pass, outside the lock; the work does the rest. */
		spin_unlock(&node->lock);
		kvp_node_recycle_pass(node);
		recycled = true;
		goto retry;
	}
	if (!list_empty(&node->free_chunks)) {
		chunk = list_first_entry(&node->free_chunks, struct kvp_chunk, link);
		if (chunk->nr_pages > max_pages) {
			if (!spare) {
				spin_unlock(&node->lock);
				spare = kzalloc_node(sizeof(*spare), GFP_KERNEL, nid);
				if (!spare)
					return NULL;
				goto retry;
			}
			/* The tail stays free as a chunk of its own. */
			spare->page = chunk->page + max_pages;
			spare->nr_pages = chunk->nr_pages - max_pages;
			spare->nid = chunk->nid;
			spare->last_space = chunk->last_space;
			list_add(&spare->link, &chunk->link);
			chunk->nr_pages = max_pages;
			node->nr_chunks++;
			spare = NULL;
		}
		list_del_init(&chunk->link);
		node->free_bytes -= kvp_chunk_bytes(chunk);
		node->in_spaces_bytes += kvp_chunk_bytes(chunk);
	}
	spin_unlock(&node->lock);
	kfree(spare);
	if (!chunk) {
		chunk = kvp_node_refill(node);
		if (chunk && chunk->nr_pages > max_pages) {
			/* Rare: hand it to the free list and split it from there. */
			kvp_pool_return(chunk);
			goto retry;
		}
	}
	return chunk;
}

/* A space gives a chunk back; busy chunks wait on the held list. */
void kvp_pool_return(struct kvp_chunk *chunk)
{
	struct kvp_node *node = kvp_pool.nodes[chunk->nid];
	bool busy = kvp_chunk_busy(chunk);

	spin_lock(&node->lock);
	node->in_spaces_bytes -= kvp_chunk_bytes(chunk);
	if (busy) {
		list_add_tail(&chunk->link, &node->held_chunks);
		node->held_bytes += kvp_chunk_bytes(chunk);
	} else {
		kvp_chunk_uncharge(chunk);
		list_add(&chunk->link, &node->free_chunks);
		node->free_bytes += kvp_chunk_bytes(chunk);
	}
	spin_unlock(&node->lock);
	if (busy) {
		WRITE_ONCE(kvp_held_delay_ms, KVP_HELD_RECHECK_MIN_MS);
		mod_delayed_work(system_wq, &kvp_held_work,
				 msecs_to_jiffies(KVP_HELD_RECHECK_MIN_MS));
	}
}

/*
 * Reclaim gives a chunk back to the page allocator: now when idle, else
 * from the held list once its mappings and pins are gone.
 */
void kvp_pool_release(struct kvp_chunk *chunk)
{
	struct kvp_node *node = kvp_pool.nodes[chunk->nid];
	bool busy = kvp_chunk_busy(chunk);

	spin_lock(&node->lock);
	node->in_spaces_bytes -= kvp_chunk_bytes(chunk);
	if (busy) {
		chunk->to_buddy = true;
		list_add_tail(&chunk->link, &node->held_chunks);
		node->held_bytes += kvp_chunk_bytes(chunk);
	} else {
		kvp_chunk_uncharge(chunk);
		node->reserved_bytes -= kvp_chunk_bytes(chunk);
		node->nr_chunks--;
	}
	spin_unlock(&node->lock);
	if (busy) {
		WRITE_ONCE(kvp_held_delay_ms, KVP_HELD_RECHECK_MIN_MS);
		mod_delayed_work(system_wq, &kvp_held_work,
				 msecs_to_jiffies(KVP_HELD_RECHECK_MIN_MS));
		return;
	}
	atomic64_add(kvp_chunk_bytes(chunk), &kvp_pool.reclaimed_bytes);
	kvp_chunk_free(chunk);
}

void kvp_pool_totals(u64 *reserved, u64 *free, u64 *held)
{
	int nid;

	*reserved = *free = *held = 0;
	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		struct kvp_node *node = kvp_pool.nodes[nid];

		spin_lock(&node->lock);
		*reserved += node->reserved_bytes;
		*free += node->free_bytes;
		*held += node->held_bytes;
		spin_unlock(&node->lock);
	}
}

int kvp_pool_init(unsigned long bytes_per_node)
{
	int nid, ret;

	init_rwsem(&kvp_pool.backing_rwsem);
	mutex_init(&kvp_pool.resize_lock);
	nodes_clear(kvp_pool.pool_nodes);
	for_each_node_state(nid, N_MEMORY) {
		if (nid >= KVPOOL_MAX_NODES)
			break;
		kvp_pool.nodes[nid] = kvp_node_new(nid);
		if (!kvp_pool.nodes[nid]) {
			ret = -ENOMEM;
			goto out_free_nodes;
		}
		node_set(nid, kvp_pool.pool_nodes);
		kvp_pool.nr_nodes++;
	}
	if (!kvp_pool.nr_nodes)
		return -ENODEV;
	ret = kvp_pool_resize((u64)bytes_per_node * kvp_pool.nr_nodes);
	if (ret)
		goto out_free_nodes;
	return 0;

out_free_nodes:
	kvp_pool_exit();
	return ret;
}

void kvp_pool_exit(void)
{
	int nid;

	cancel_delayed_work_sync(&kvp_held_work);
	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		struct kvp_node *node = kvp_pool.nodes[nid];
		struct kvp_chunk *chunk, *next;

		list_splice_init(&node->held_chunks, &node->free_chunks);
		list_for_each_entry_safe(chunk, next, &node->free_chunks, link) {
			list_del(&chunk->link);
			kvp_chunk_uncharge(chunk);
			kvp_chunk_free(chunk);
		}
		kfree(node);
		kvp_pool.nodes[nid] = NULL;
	}
	nodes_clear(kvp_pool.pool_nodes);
	kvp_pool.nr_nodes = 0;
}
