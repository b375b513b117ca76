// SPDX-License-Identifier: GPL-2.0
/*
 * The shrinker: under host memory pressure, cached blocks give their pages
 * back to the page allocator, coldest first (kvcore's eviction order).  A
 * chunk goes only when every block touching it is free, cached or already
 * a hole, so owned and referenced blocks are never touched; its blocks
 * become holes that ALLOC refills on demand.  Mappings of the chunk are
 * zapped and a grace period passes before its page counts are read; a
 * chunk still mapped or pinned then waits on the held list (invariant 2).
 */
#include <linux/mm.h>
#include <linux/rcupdate.h>
#include <linux/shrinker.h>
#include <linux/version.h>

#include "kvpool.h"

/* Candidates looked at per space and scan, so a busy space cannot stall reclaim. */
#define KVP_RECLAIM_SCAN_MAX 1024

static unsigned long kvp_cached_estimate;

/* Cached bytes in all spaces; racy reads are fine for an estimate. */
static u64 kvp_cached_bytes(void)
{
	struct kvp_space *space;
	u64 bytes = 0;

	if (!mutex_trylock(&kvp_spaces_lock))
		return READ_ONCE(kvp_cached_estimate);
	list_for_each_entry(space, &kvp_spaces, link)
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

/* Take a chunk out of its space: no page is findable or mapped afterwards. */
static void kvp_space_detach(struct kvp_space *space, struct kvp_chunk *chunk)
{
	unsigned long first = chunk->offset >> PAGE_SHIFT, i;
	struct address_space *last = NULL;
	struct kvp_client *c;

	for (i = 0; i < chunk->nr_pages; i++) {
		xa_erase(&space->pages, first + i);
		set_page_private(chunk->page + i, 0);
	}
	list_del_init(&chunk->link);
	kvp_chunk_leave_space(chunk, space->tenant);
	/*
	 * Every fd that can map the space is a client.  Fds opened through
	 * the same device node share one mapping; zapping it also drops other
	 * spaces' PTEs at this offset, which simply fault back in.
	 */
	list_for_each_entry(c, &space->clients, link) {
		struct address_space *mapping = c->file->f_mapping;

		if (mapping == last)
			continue;
		unmap_mapping_range(mapping, chunk->offset, kvp_chunk_bytes(chunk), 1);
		last = mapping;
	}
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
		u64 evicted_bytes;

		if (!chunk || !kvc_range_reclaimable(core, chunk->offset, kvp_chunk_bytes(chunk)) ||
		    kvp_chunk_dma_pinned(chunk)) {
			id = kvc_lru_next(core, id);
			continue;
		}
		evicted_bytes = kvc_reclaim_range(core, chunk->offset, kvp_chunk_bytes(chunk),
						  KVC_EVICT_RECLAIM) * core->block_bytes;
		kvp_space_detach(space, chunk);
		list_add_tail(&chunk->link, victims);
		*left -= min_t(unsigned long, *left, chunk->nr_pages);
		*cached_left -= min(*cached_left, evicted_bytes);
		if (!*cached_left)
			break;
		/* The order changed under the reclaimed blocks: start again. */
		id = kvc_lru_first(core);
	}
}

static unsigned long kvp_shrink_scan(struct shrinker *sh, struct shrink_control *sc)
{
	u64 floor = READ_ONCE(kvp_tun.min_cached_bytes), cached, cached_left;
	unsigned long left = sc->nr_to_scan, freed = 0;
	struct kvp_chunk *chunk, *next;
	struct kvp_space *space;
	LIST_HEAD(victims);

	if (!READ_ONCE(kvp_tun.shrinker_enabled))
		return SHRINK_STOP;
	cached = kvp_cached_bytes();
	if (cached <= floor)
		return SHRINK_STOP;
	cached_left = cached - floor;
	/* Reclaim runs inside other allocations: never wait for our own locks. */
	if (!mutex_trylock(&kvp_spaces_lock))
		return SHRINK_STOP;
	if (!down_read_trylock(&kvp_pool.backing_rwsem)) {
		mutex_unlock(&kvp_spaces_lock);
		return SHRINK_STOP;
	}
	list_for_each_entry(space, &kvp_spaces, link) {
		if (!left || !cached_left)
			break;
		if (!mutex_trylock(&space->lock))
			continue;
		kvp_space_reclaim(space, &left, &cached_left, &victims);
		mutex_unlock(&space->lock);
	}
	/*
	 * Spaces may open and close during the grace period; the debugfs
	 * check, which would see the victims in no space, waits on the rwsem.
	 */
	mutex_unlock(&kvp_spaces_lock);
	if (!list_empty(&victims)) {
		/* A fault that found a page before the erase holds its reference by now. */
		synchronize_rcu();
		list_for_each_entry_safe(chunk, next, &victims, link) {
			list_del_init(&chunk->link);
			freed += chunk->nr_pages;
			kvp_pool_release(chunk);
		}
	}
	up_read(&kvp_pool.backing_rwsem);
	return freed ? freed : SHRINK_STOP;
}

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 7, 0)
static struct shrinker *kvp_shrinker;

int kvp_reclaim_init(void)
{
	kvp_shrinker = shrinker_alloc(0, "kvpool");
	if (!kvp_shrinker)
		return -ENOMEM;
	kvp_shrinker->count_objects = kvp_shrink_count;
	kvp_shrinker->scan_objects = kvp_shrink_scan;
	kvp_shrinker->seeks = DEFAULT_SEEKS;
	shrinker_register(kvp_shrinker);
	return 0;
}

void kvp_reclaim_exit(void)
{
	shrinker_free(kvp_shrinker);
}
#else
static struct shrinker kvp_shrinker = {
	.count_objects = kvp_shrink_count,
	.scan_objects = kvp_shrink_scan,
	.seeks = DEFAULT_SEEKS,
};

int kvp_reclaim_init(void)
{
	return register_shrinker(&kvp_shrinker, "kvpool");
}

void kvp_reclaim_exit(void)
{
	unregister_shrinker(&kvp_shrinker);
}
#endif
