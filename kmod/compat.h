/* SPDX-License-Identifier: GPL-2.0 */
/*
 * compat.h: the kernel APIs kvpool uses that changed between the kernels it
 * is built and tested on (Debian 12's 6.1 and 6.12, Documentation/
 * admin-guide.rst "Kernels").  Each shim says which release changed what; on
 * another kernel, a build error in one of these is where to look.  The rest
 * of the module calls these and tests no version itself.
 */
#ifndef KVPOOL_COMPAT_H
#define KVPOOL_COMPAT_H

#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/shrinker.h>
#include <linux/slab.h>
#include <linux/version.h>

/* 6.3 made vma->vm_flags read-only: writers go through vm_flags_mod(). */
static inline void kvp_vma_flags_mod(struct vm_area_struct *vma, vm_flags_t set,
				     vm_flags_t clear)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_mod(vma, set, clear);
#else
	vma->vm_flags = (vma->vm_flags | set) & ~clear;
#endif
}

/* 6.10 replaced mm->get_unmapped_area with mm_get_unmapped_area(). */
static inline unsigned long kvp_mm_get_unmapped_area(struct file *file, unsigned long addr,
						     unsigned long len, unsigned long pgoff,
						     unsigned long flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
	return mm_get_unmapped_area(current->mm, file, addr, len, pgoff, flags);
#else
	return current->mm->get_unmapped_area(file, addr, len, pgoff, flags);
#endif
}

/*
 * 6.7 replaced register_shrinker() on a caller's struct shrinker with
 * shrinker_alloc(), shrinker_register() and shrinker_free().  Both ways
 * here: a registered shrinker, or NULL when there was no memory.
 */
static inline struct shrinker *
kvp_shrinker_create(const char *name,
		    unsigned long (*count)(struct shrinker *, struct shrink_control *),
		    unsigned long (*scan)(struct shrinker *, struct shrink_control *))
{
	struct shrinker *s;

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 7, 0)
	s = shrinker_alloc(0, "%s", name);
	if (!s)
		return NULL;
	s->count_objects = count;
	s->scan_objects = scan;
	s->seeks = DEFAULT_SEEKS;
	shrinker_register(s);
#else
	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return NULL;
	s->count_objects = count;
	s->scan_objects = scan;
	s->seeks = DEFAULT_SEEKS;
	if (register_shrinker(s, "%s", name)) {
		kfree(s);
		return NULL;
	}
#endif
	return s;
}

/* Unregisters; once it returns, no scan or count runs. */
static inline void kvp_shrinker_destroy(struct shrinker *s)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 7, 0)
	shrinker_free(s);
#else
	unregister_shrinker(s);
	kfree(s);
#endif
}

#endif /* KVPOOL_COMPAT_H */
