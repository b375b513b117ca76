// SPDX-License-Identifier: GPL-2.0
/*
 * A space's blocks as the opener sees them: the mapping and its faults,
 * and the ALLOC, FREE and SPACE_INFO ioctls.
 */
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "kvpool_internal.h"

/*
 * Pages are inserted one fault at a time; unbacked offsets (never backed,
 * or reclaimed) are SIGBUS.  The reference is taken inside the RCU read
 * section so reclaim, which waits for a grace period, sees it.
 */
static vm_fault_t kvp_vm_fault(struct vm_fault *vmf)
{
	struct kvp_client *client = vmf->vma->vm_file->private_data;
	struct kvp_space *space = kvp_client_space(client);
	struct page *page;

	if (!space)
		return VM_FAULT_SIGBUS;
	rcu_read_lock();
	page = xa_load(&space->pages, vmf->pgoff);
	if (page)
		get_page(page);
	rcu_read_unlock();
	if (!page)
		return VM_FAULT_SIGBUS;
	/*
	 * Reclaim holds the page lock from before it erases the page until
	 * after it zapped the mappings: a page still indexed once locked gets
	 * its PTE (under this lock) before that zap, never after it.
	 */
	lock_page(page);
	if (xa_load(&space->pages, vmf->pgoff) != page) {
		unlock_page(page);
		put_page(page);
		return VM_FAULT_SIGBUS;
	}
	vmf->page = page;
	return VM_FAULT_LOCKED;
}

static const struct vm_operations_struct kvp_vm_ops = {
	.fault = kvp_vm_fault,
};

int kvp_space_mmap(struct kvp_client *client, struct vm_area_struct *vma)
{
	struct kvp_space *space = kvp_client_space(client);
	u64 range_pages, pages = vma_pages(vma);

	if (!space)
		return -EBADFD;
	/* VM_MAYSHARE: MAP_SHARED of a read-only fd lacks VM_SHARED but is fine. */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	range_pages = (space->core.nr_blocks * space->core.block_bytes) >> PAGE_SHIFT;
	if (vma->vm_pgoff > range_pages || pages > range_pages - vma->vm_pgoff)
		return -ENXIO;
	/* Page-backed on purpose, no I/O or PFN-map flags: GUP must work here. */
	kvp_vma_flags_mod(vma, VM_DONTEXPAND | VM_DONTDUMP, VM_MAYEXEC);
	vma->vm_ops = &kvp_vm_ops;
	return 0;
}

/*
 * mmap_region() reads file->f_mapping before ->mmap (to count a writable
 * shared mapping) and again after it.  A join that moved f_mapping in
 * between would leave that count on the device's mapping and take it from
 * the space's, and a space whose count goes negative refuses every
 * writable shared mmap (EPERM).  do_mmap() asks here before either read,
 * so an mmap that gets past this saw the space and, published before it
 * and never changed after, the fd's final f_mapping.
 */
unsigned long kvp_space_get_unmapped_area(struct kvp_client *client, struct file *file,
					  unsigned long addr, unsigned long len,
					  unsigned long pgoff, unsigned long flags)
{
	if (!kvp_client_space(client))
		return -EBADFD;
	return kvp_mm_get_unmapped_area(file, addr, len, pgoff, flags);
}

/* Every fd of the space hears that an allocation evicted (count) or found no room (0). */
void kvp_space_emit_pressure(struct kvp_space *space, unsigned int cause, u32 evicted)
{
	struct kvp_client *c;

	lockdep_assert_held(&space->lock);
	list_for_each_entry(c, &space->clients, link)
		kvp_event_emit(&c->events, KVPOOL_EVENT_QUOTA_PRESSURE, cause, 0, evicted, NULL);
}

static u64 kvp_space_evictions(const struct kvc_space *core)
{
	u64 n = 0;
	int i;

	for (i = 0; i < KVC_EVICT_CAUSES; i++)
		n += core->stats.evictions[i];
	return n;
}

/*
 * An ALLOC's ids array, pinned before anything changes.  Writing the ids
 * into pinned pages cannot fault, so once the pin holds, the call cannot
 * fail with EFAULT after it evicted cached blocks (issue 14, finding 13):
 * every unwritable array (read-only, PROT_NONE, unmapped in part, a PFN
 * map) fails the pin, and an array the caller unmaps or remaps during the
 * call still gets its ids, in pages the caller no longer sees.
 */
struct kvp_user_out {
	struct page **pages;
	struct page *few[2];	/* pages, when the array spans no more than these */
	unsigned int nr_pages;
	unsigned int offset;	/* of the array in its first page */
};

/* Pin [uaddr, uaddr + len) for writing: 0, -EFAULT, -EINTR or -ENOMEM. */
static int kvp_user_out_pin(struct kvp_user_out *o, u64 uaddr, size_t len)
{
	unsigned long first = uaddr & PAGE_MASK;
	int got;

	if (!len || uaddr + len < uaddr || !access_ok(u64_to_user_ptr(uaddr), len))
		return -EFAULT;
	o->nr_pages = (PAGE_ALIGN(uaddr + len) - first) >> PAGE_SHIFT;
	o->offset = offset_in_page(uaddr);
	o->pages = o->few;
	if (o->nr_pages > ARRAY_SIZE(o->few)) {
		o->pages = kvmalloc_array(o->nr_pages, sizeof(*o->pages), GFP_KERNEL);
		if (!o->pages)
			return -ENOMEM;
	}
	/* May fault (and wait on userfaultfd): no lock is held yet. */
	got = pin_user_pages_fast(first, o->nr_pages, FOLL_WRITE, o->pages);
	if (got == o->nr_pages)
		return 0;
	if (got > 0)
		unpin_user_pages(o->pages, got);
	if (o->pages != o->few)
		kvfree(o->pages);
	return got == -EINTR ? -EINTR : -EFAULT;
}

static void kvp_user_out_write(const struct kvp_user_out *o, const void *src, size_t len)
{
	unsigned int i, off = o->offset;

	for (i = 0; len; i++) {
		size_t n = min_t(size_t, len, PAGE_SIZE - off);
		void *dst = kmap_local_page(o->pages[i]);

		memcpy(dst + off, src, n);
		kunmap_local(dst);
		flush_dcache_page(o->pages[i]);
		src += n;
		len -= n;
		off = 0;
	}
}

static void kvp_user_out_unpin(struct kvp_user_out *o, bool written)
{
	unpin_user_pages_dirty_lock(o->pages, o->nr_pages, written);
	if (o->pages != o->few)
		kvfree(o->pages);
}

long kvp_ioctl_alloc(struct kvp_client *client, struct kvpool_blocks *args)
{
	struct kvp_space *space = kvp_client_space(client);
	size_t bytes = (size_t)args->count * sizeof(u32);
	struct kvp_user_out out;
	u64 evicted;
	u32 *ids;
	long ret;

	if (!space)
		return -EBADFD;
	/*
	 * An unwritable ids array fails before any block or chunk is taken,
	 * and leaves the caller's array as it was.
	 */
	ret = kvp_user_out_pin(&out, args->ids, bytes);
	if (ret)
		return ret;
	ids = kvmalloc(bytes, GFP_KERNEL);
	if (!ids) {
		ret = -ENOMEM;
		goto out_unpin;
	}
	if (mutex_lock_killable(&space->lock)) {
		ret = -EINTR;
		goto out_free_ids;
	}
	evicted = kvp_space_evictions(&space->core);
	ret = kvc_alloc(&space->core, client->owner, args->count, ids);
	evicted = kvp_space_evictions(&space->core) - evicted;
	if (evicted || ret == -ENOSPC)
		kvp_space_emit_pressure(space, space->core.stats.last_pressure_cause,
					(u32)evicted);
	mutex_unlock(&space->lock);
	/* Written unlocked, as every output, though into pinned pages it cannot fault. */
	if (!ret) {
		kvp_user_out_write(&out, ids, bytes);
		atomic64_add(args->count, &kvp_pool.allocs);
	} else {
		atomic64_inc(&kvp_pool.alloc_failures);
	}

out_free_ids:
	kvfree(ids);
out_unpin:
	kvp_user_out_unpin(&out, !ret);
	return ret;
}

/*
 * FREE's and RELEASE's first steps: a client with no space is -EBADFD;
 * copy in the ids (-ENOMEM or -EFAULT, as every ids array) and lock the
 * space (-EINTR).  The caller unlocks and kvfree()s them.
 */
u32 *kvp_space_lock_with_ids(struct kvp_space *space, const struct kvpool_blocks *args)
{
	u32 *ids;

	if (!space)
		return ERR_PTR(-EBADFD);
	ids = vmemdup_user(u64_to_user_ptr(args->ids), (size_t)args->count * sizeof(*ids));
	if (IS_ERR(ids))
		return ids;
	if (mutex_lock_killable(&space->lock)) {
		kvfree(ids);
		return ERR_PTR(-EINTR);
	}
	return ids;
}

long kvp_ioctl_free(struct kvp_client *client, struct kvpool_blocks *args)
{
	struct kvp_space *space = kvp_client_space(client);
	u32 *ids, i;
	long ret;

	ids = kvp_space_lock_with_ids(space, args);
	if (IS_ERR(ids))
		return PTR_ERR(ids);
	ret = kvc_free(&space->core, client->owner, args->count, ids);
	if (!ret)
		for (i = 0; i < args->count; i++)
			kvp_residency_drop_block(space, ids[i]);
	mutex_unlock(&space->lock);
	if (!ret)
		atomic64_add(args->count, &kvp_pool.frees);
	kvfree(ids);
	return ret;
}

long kvp_ioctl_space_info(struct kvp_client *client, struct kvpool_space_info *info)
{
	struct kvp_space *space = kvp_client_space(client);

	if (!space)
		return -EBADFD;
	if (mutex_lock_killable(&space->lock))
		return -EINTR;
	info->space_id = space->id;
	info->block_bytes = space->core.block_bytes;
	info->nr_blocks = space->core.nr_blocks;
	info->backed_blocks = space->core.backed_blocks - space->core.nr_holes;
	info->free_blocks = space->core.nr_free;
	info->owned_blocks = space->core.nr_owned;
	info->my_blocks = kvc_owner_blocks(&space->core, client->owner);
	info->backed_bytes = space->core.backed_bytes;
	mutex_unlock(&space->lock);
	return 0;
}
