// SPDX-License-Identifier: GPL-2.0
/*
 * The shrinker: under host memory pressure, cached blocks give their pages
 * back to the page allocator, coldest first (kvcore's eviction order).  A
 * chunk goes only when every block touching it is free, cached or already
 * a hole, so owned and referenced blocks are never touched; its blocks
 * become holes that ALLOC refills on demand.  A block larger than a chunk
 * goes whole, with every chunk under it.  Mappings of the chunks are
 * zapped, in the space's own address_space (kvp_space.inode); a work item
 * waits a grace period and only then reads the page counts: a chunk still
 * mapped or pinned waits on the held list, since no mapped or pinned page
 * is ever freed or reused (Documentation/kvpool.rst, Pool).
 */
#include <linux/math64.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/rcupdate.h>
#include <linux/shrinker.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>
#include <linux/workqueue.h>

#include "compat.h"
#include "kvpool_internal.h"

/* Candidates looked at per space and scan, so a busy space cannot stall reclaim. */
#define KVP_RECLAIM_SCAN_MAX 1024
/* Spaces one scan works on: the work of one call is bounded. */
#define KVP_RECLAIM_SPACES_MAX 8

static unsigned long kvp_cached_estimate;

/* Cached bytes in all spaces; racy reads are fine for an estimate. */
static u64 kvp_cached_bytes(void)
{
	struct kvp_space *space;
	u64 bytes = 0;

	if (!mutex_trylock(&kvp_spaces_lock))
		return READ_ONCE(kvp_cached_estimate);
	list_for_each_entry(space, &kvp_spaces, link)
		if (!space->dying)
			bytes += READ_ONCE(space->core.nr_cached) * space->core.block_bytes;
	mutex_unlock(&kvp_spaces_lock);
	WRITE_ONCE(kvp_cached_estimate, bytes);
	return bytes;
}

static unsigned long kvp_shrink_count(struct shrinker *sh, struct shrink_control *sc)
{
	u64 cached, floor = READ_ONCE(kvp_tun.min_cached_bytes);

	if (!READ_ONCE(kvp_tun.shrinker_enabled))
		return 0;
	cached = kvp_cached_bytes();
	return cached > floor ? (cached - floor) >> PAGE_SHIFT : 0;
}

/* The chunk holding range offset off, through page->private set at attach. */
static struct kvp_chunk *kvp_space_chunk_at(struct kvp_space *space, u64 off)
{
	struct page *page = xa_load(&space->pages, off >> PAGE_SHIFT);

	return page ? (struct kvp_chunk *)page_private(page) : NULL;
}

/*
 * A long-term pin (cuMemHostRegister, RDMA) keeps DMA going to these very
 * pages: taking them away would leave the registration on pages the space
 * no longer has, so such a chunk stays.  Plain mappings are zapped instead.
 */
static bool kvp_chunk_dma_pinned(const struct kvp_chunk *chunk)
{
	unsigned int i;

	for (i = 0; i < chunk->nr_pages; i++)
		if (folio_maybe_dma_pinned(page_folio(chunk->page + i)))
			return true;
	return false;
}

/* Take a chunk out of its space: no page is findable afterwards (the caller zaps). */
static void kvp_space_detach(struct kvp_space *space, struct kvp_chunk *chunk)
{
	unsigned long first = chunk->offset >> PAGE_SHIFT, i;

	for (i = 0; i < chunk->nr_pages; i++) {
		xa_erase(&space->pages, first + i);
		set_page_private(chunk->page + i, 0);
	}
	list_del_init(&chunk->link);
	kvp_chunk_leave_space(chunk, space->tenant);
}

/*
 * Is nobody changing the space's mappings right now?  Every fd of the
 * space, and no other, has the space's inode as its f_mapping, so its
 * i_mmap_rwsem is taken (for writing) only by mmap, munmap, mremap, fork
 * and exit of this space's mappings.  The shrinker does not wait for
 * those: a space whose lock is contended keeps its candidates this scan.
 *
 * This is a probe, not a hold: unmap_mapping_range() takes the lock for
 * reading itself, and a second read acquisition under our own would
 * deadlock behind a writer queued in between.  What remains is the window
 * from here to the zap (page trylocks, the eviction, xarray erasures): a
 * writer that arrives in it makes the zap wait for that writer's section,
 * VMA bookkeeping that takes no lock of ours, page locks included (rmap's
 * order is page lock, then i_mmap_rwsem).  The kernel's own page reclaim
 * waits on this lock the same way (try_to_unmap() takes it for reading),
 * and no other space's mmap or munmap can make this zap wait.
 */
static bool kvp_mapping_idle(struct address_space *mapping)
{
	if (!i_mmap_trylock_read(mapping))
		return false;
	i_mmap_unlock_read(mapping);
	return true;
}

/*
 * The next chunk at or after *off and before end, or NULL; *off moves past
 * it.  The pages of holes in between are skipped.
 */
static struct kvp_chunk *kvp_extent_next(struct kvp_space *space, u64 *off, u64 end)
{
	for (; *off < end; *off += PAGE_SIZE) {
		struct kvp_chunk *c = kvp_space_chunk_at(space, *off);

		if (c) {
			*off = c->offset + kvp_chunk_bytes(c);
			return c;
		}
	}
	return NULL;
}

/*
 * The bytes to take for a candidate chunk: whole blocks, and every chunk
 * under them, so that a block larger than a chunk goes whole and no chunk
 * of a hole is left stranded.  Grows until chunks and blocks agree; false
 * when that runs past the whole blocks of the backed prefix.
 */
static bool kvp_reclaim_extent(struct kvp_space *space, const struct kvp_chunk *chunk,
			       u64 *start, u64 *end)
{
	u64 bb = space->core.block_bytes, limit = space->core.backed_blocks * bb;
	u64 lo = chunk->offset, hi = lo + kvp_chunk_bytes(chunk);
	struct kvp_chunk *c;

	for (;;) {
		u64 nlo = div64_u64(lo, bb) * bb, nhi = div64_u64(hi + bb - 1, bb) * bb, off;

		if (nhi > limit)
			return false;
		off = nlo;
		while ((c = kvp_extent_next(space, &off, nhi))) {
			nlo = min(nlo, c->offset);
			nhi = max(nhi, c->offset + kvp_chunk_bytes(c));
		}
		if (nlo == lo && nhi == hi)
			break;
		lo = nlo;
		hi = nhi;
	}
	*start = lo;
	*end = hi;
	return true;
}

/* Does any chunk in [start, end) carry a long-term pin? */
static bool kvp_extent_dma_pinned(struct kvp_space *space, u64 start, u64 end)
{
	struct kvp_chunk *c;
	u64 off = start;

	while ((c = kvp_extent_next(space, &off, end)))
		if (kvp_chunk_dma_pinned(c))
			return true;
	return false;
}

/* Lock every page of every chunk in [start, end), or none: see kvp_vm_fault(). */
static bool kvp_extent_trylock(struct kvp_space *space, u64 start, u64 end)
{
	u64 off = start;

	while (off < end) {
		struct page *page = xa_load(&space->pages, off >> PAGE_SHIFT);

		if (page && !trylock_page(page))
			goto out_unlock;
		off += PAGE_SIZE;
	}
	return true;

out_unlock:
	while (off > start) {
		struct page *page;

		off -= PAGE_SIZE;
		page = xa_load(&space->pages, off >> PAGE_SHIFT);
		if (page)
			unlock_page(page);
	}
	return false;
}

/*
 * Detach every chunk in [start, end) onto victims and zap the space's
 * mappings of the extent, once; returns the pages taken.
 */
static unsigned long kvp_extent_detach(struct kvp_space *space, u64 start, u64 end,
				       struct list_head *victims)
{
	unsigned long pages = 0, i;
	struct kvp_chunk *c, *next;
	LIST_HEAD(taken);
	u64 off = start;

	while ((c = kvp_extent_next(space, &off, end))) {
		pages += c->nr_pages;
		kvp_space_detach(space, c);
		list_add_tail(&c->link, &taken);
	}
	/* The space's mappings only: no other space maps through this inode. */
	unmap_mapping_range(space->inode->i_mapping, start, end - start, 1);
	list_for_each_entry_safe(c, next, &taken, link) {
		/* Zapped: a fault waiting for one of these pages now finds it gone. */
		for (i = 0; i < c->nr_pages; i++)
			unlock_page(c->page + i);
		list_move_tail(&c->link, victims);
	}
	return pages;
}

/* Reclaim from one space until *left pages are gone; chunks go to *victims. */
static void kvp_space_reclaim(struct kvp_space *space, unsigned long *left, u64 *cached_left,
			      struct list_head *victims)
{
	struct kvc_space *core = &space->core;
	unsigned int looked = 0;
	u32 id = kvc_lru_first(core);

	lockdep_assert_held(&space->lock);
	while (id != KVC_NONE && *left && looked++ < KVP_RECLAIM_SCAN_MAX) {
		struct kvp_chunk *chunk = kvp_space_chunk_at(space, (u64)id * core->block_bytes);
		u64 evicted_bytes, start, end;
		unsigned long pages;

		if (!chunk || !kvp_reclaim_extent(space, chunk, &start, &end) ||
		    !kvc_range_reclaimable(core, start, end - start) ||
		    kvp_extent_dma_pinned(space, start, end)) {
			id = kvc_lru_next(core, id);
			continue;
		}
		/* Its mappings are changing: leave the space for the next scan. */
		if (!kvp_mapping_idle(space->inode->i_mapping))
			break;
		if (!kvp_extent_trylock(space, start, end)) {
			id = kvc_lru_next(core, id);
			continue;
		}
		evicted_bytes = kvc_reclaim_range(core, start, end - start, KVC_EVICT_RECLAIM) *
				core->block_bytes;
		pages = kvp_extent_detach(space, start, end, victims);
		*left -= min(*left, pages);
		*cached_left -= min(*cached_left, evicted_bytes);
		if (!*cached_left)
			break;
		/* The order changed under the reclaimed blocks: start again. */
		id = kvc_lru_first(core);
	}
}

/*
 * Chunks taken by one scan, waiting for a grace period in a work item:
 * the shrinker runs inside other allocations and must not wait for one.
 */
struct kvp_reclaim_batch {
	struct rcu_work rwork;
	struct list_head link;		/* kvp_reclaim_transit */
	struct list_head chunks;
};

static struct workqueue_struct *kvp_reclaim_wq;
/* Batches between their scan and their release (kvp_reclaim_transit_lock). */
static LIST_HEAD(kvp_reclaim_transit);
static DEFINE_SPINLOCK(kvp_reclaim_transit_lock);

/* Bytes of node nid's chunks in transit; the caller holds backing_rwsem for writing. */
u64 kvp_reclaim_transit_bytes(int nid)
{
	struct kvp_reclaim_batch *b;
	struct kvp_chunk *chunk;
	u64 bytes = 0;

	spin_lock(&kvp_reclaim_transit_lock);
	list_for_each_entry(b, &kvp_reclaim_transit, link)
		list_for_each_entry(chunk, &b->chunks, link)
			if (chunk->nid == nid)
				bytes += kvp_chunk_bytes(chunk);
	spin_unlock(&kvp_reclaim_transit_lock);
	return bytes;
}

/* A grace period after the scan: a fault that found a page holds its reference now. */
static void kvp_reclaim_release(struct work_struct *work)
{
	struct kvp_reclaim_batch *b = container_of(to_rcu_work(work), struct kvp_reclaim_batch,
						   rwork);
	struct kvp_chunk *chunk, *next;

	/* The debugfs check sees each chunk either in transit or released. */
	down_read(&kvp_pool.backing_rwsem);
	list_for_each_entry_safe(chunk, next, &b->chunks, link) {
		list_del_init(&chunk->link);
		kvp_pool_release(chunk);
	}
	spin_lock(&kvp_reclaim_transit_lock);
	list_del(&b->link);
	spin_unlock(&kvp_reclaim_transit_lock);
	up_read(&kvp_pool.backing_rwsem);
	kfree(b);
}

/* The serial of the last space a scan took (kvp_spaces_lock): scans take turns. */
static u64 kvp_reclaim_cursor;

/*
 * Up to max spaces with cached blocks, those after the cursor first, each
 * with a reclaim reference: teardown waits for it (kvp_space_destroy_now()),
 * so the scan works on them with kvp_spaces_lock dropped.
 */
static unsigned int kvp_reclaim_pick(struct kvp_space **picked, unsigned int max)
{
	struct kvp_space *space;
	unsigned int got = 0, pass;

	lockdep_assert_held(&kvp_spaces_lock);
	for (pass = 0; pass < 2; pass++) {
		list_for_each_entry(space, &kvp_spaces, link) {
			bool before = space->serial <= kvp_reclaim_cursor;

			if (got == max)
				goto out;
			/* Pass 0 takes those after the cursor, pass 1 the rest. */
			if (before != pass || space->dying || !READ_ONCE(space->core.nr_cached))
				continue;
			atomic_inc(&space->reclaim_refs);
			picked[got++] = space;
		}
	}
out:
	if (got)
		kvp_reclaim_cursor = picked[got - 1]->serial;
	return got;
}

static void kvp_reclaim_put(struct kvp_space *space)
{
	if (atomic_dec_and_test(&space->reclaim_refs))
		wake_up_var(&space->reclaim_refs);
}

/*
 * Reclaim from one space with only its own locks held: its evictions
 * (every fd interested in a block hears of it) and the zap of its
 * mappings (as many VMAs as its fds made) hold up the space alone.
 */
static void kvp_reclaim_one(struct kvp_space *space, unsigned long *left, u64 *cached_left,
			    struct list_head *victims)
{
	if (!mutex_trylock(&space->lock))
		return;
	if (!READ_ONCE(space->dying) && down_read_trylock(&kvp_pool.backing_rwsem)) {
		/* The debugfs check sees each chunk in its space or in transit. */
		kvp_space_reclaim(space, left, cached_left, victims);
		up_read(&kvp_pool.backing_rwsem);
	}
	mutex_unlock(&space->lock);
}

static unsigned long kvp_shrink_scan(struct shrinker *sh, struct shrink_control *sc)
{
	u64 floor = READ_ONCE(kvp_tun.min_cached_bytes), cached, cached_left;
	struct kvp_space *picked[KVP_RECLAIM_SPACES_MAX];
	unsigned long left = sc->nr_to_scan;
	struct kvp_reclaim_batch *batch;
	unsigned int i, n;

	if (!READ_ONCE(kvp_tun.shrinker_enabled))
		return SHRINK_STOP;
	cached = kvp_cached_bytes();
	if (cached <= floor)
		return SHRINK_STOP;
	cached_left = cached - floor;
	batch = kmalloc(sizeof(*batch), GFP_NOWAIT | __GFP_NOWARN);
	if (!batch)
		return SHRINK_STOP;
	INIT_LIST_HEAD(&batch->chunks);
	INIT_RCU_WORK(&batch->rwork, kvp_reclaim_release);
	/*
	 * Reclaim runs inside other allocations: never wait for our own
	 * locks.  The global one is held to pick the spaces and no longer.
	 */
	if (!mutex_trylock(&kvp_spaces_lock))
		goto out_free;
	n = kvp_reclaim_pick(picked, ARRAY_SIZE(picked));
	mutex_unlock(&kvp_spaces_lock);
	/*
	 * In transit before it holds anything; its chunks are added under
	 * backing_rwsem, which the debugfs check takes for writing.
	 */
	spin_lock(&kvp_reclaim_transit_lock);
	list_add_tail(&batch->link, &kvp_reclaim_transit);
	spin_unlock(&kvp_reclaim_transit_lock);
	for (i = 0; i < n; i++) {
		if (left && cached_left)
			kvp_reclaim_one(picked[i], &left, &cached_left, &batch->chunks);
		kvp_reclaim_put(picked[i]);
	}
	if (list_empty(&batch->chunks)) {
		spin_lock(&kvp_reclaim_transit_lock);
		list_del(&batch->link);
		spin_unlock(&kvp_reclaim_transit_lock);
		goto out_free;
	}
	queue_rcu_work(kvp_reclaim_wq, &batch->rwork);
	/* Taken out of the spaces; the pages follow after the grace period. */
	return sc->nr_to_scan - left;

out_free:
	kfree(batch);
	return SHRINK_STOP;
}

/* Every batch queued so far is released (its grace period, then its work). */
void kvp_reclaim_flush(void)
{
	rcu_barrier();
	flush_workqueue(kvp_reclaim_wq);
}

/* Unload: the shrinker is gone, so nothing queues any more. */
static void kvp_reclaim_drain(void)
{
	rcu_barrier();
	drain_workqueue(kvp_reclaim_wq);
}

static struct shrinker *kvp_shrinker;

int kvp_reclaim_init(void)
{
	kvp_reclaim_wq = alloc_workqueue("kvpool_reclaim", WQ_MEM_RECLAIM, 0);
	if (!kvp_reclaim_wq)
		return -ENOMEM;
	kvp_shrinker = kvp_shrinker_create("kvpool", kvp_shrink_count, kvp_shrink_scan);
	if (!kvp_shrinker) {
		destroy_workqueue(kvp_reclaim_wq);
		return -ENOMEM;
	}
	return 0;
}

void kvp_reclaim_exit(void)
{
	kvp_shrinker_destroy(kvp_shrinker);
	kvp_reclaim_drain();
	destroy_workqueue(kvp_reclaim_wq);
}
