// SPDX-License-Identifier: MIT
/*
 * bounds.c: the rule that a layout laid over a space's mapping keeps each
 * block it names inside one pool block of that mapping.
 *
 * Copy, append and attention take a bare base pointer and a layout, so a
 * layout whose strides reach further than the pool block (a caller's own
 * edit after kvrt_layout_for_space(), or a fuzzed one) would write or read
 * past the block, and for the last block past the mapping.  Every open
 * space handle registers its mapping here; before any byte moves, the
 * calls check each block they will touch against the registered mappings.
 * Memory that is in no mapping is the caller's and cannot be checked.
 */
#include <errno.h>
#include <pthread.h>

#include "internal.h"

/* The one process-wide list: pointers alone do not say which handle. */
static pthread_rwlock_t maps_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct kvrt_space *maps;

void kvrt_bounds_add(struct kvrt_space *s)
{
	pthread_rwlock_wrlock(&maps_lock);
	s->map_prev = NULL;
	s->map_next = maps;
	if (maps)
		maps->map_prev = s;
	maps = s;
	pthread_rwlock_unlock(&maps_lock);
}

void kvrt_bounds_remove(struct kvrt_space *s)
{
	pthread_rwlock_wrlock(&maps_lock);
	if (s->map_prev)
		s->map_prev->map_next = s->map_next;
	else if (maps == s)
		maps = s->map_next;
	if (s->map_next)
		s->map_next->map_prev = s->map_prev;
	s->map_prev = s->map_next = NULL;
	pthread_rwlock_unlock(&maps_lock);
}

/* base + off without wrapping; false when the sum leaves the address space. */
static bool addr_add(uintptr_t base, int64_t off, uintptr_t *r)
{
	if (off >= 0)
		return !__builtin_add_overflow(base, (uint64_t)off, r);
	return !__builtin_sub_overflow(base, -(uint64_t)off, r);
}

/* The mapping that holds address a, or NULL. */
static const struct kvrt_space *map_of(uintptr_t a)
{
	const struct kvrt_space *s;

	for (s = maps; s; s = s->map_next)
		if (a >= (uintptr_t)s->base && a - (uintptr_t)s->base < s->map_bytes)
			return s;
	return NULL;
}

/*
 * A byte range is fine when it lies in one pool block of a mapping, or
 * misses every mapping and its pointer (home) was no space's: a pointer
 * into a space addresses that space, so it may not leave it.
 */
static bool range_ok(uintptr_t lo, uintptr_t hi, const struct kvrt_space *home)
{
	const struct kvrt_space *s;

	for (s = maps; s; s = s->map_next) {
		uintptr_t start = (uintptr_t)s->base, end = start + s->map_bytes;

		if (hi <= start || lo >= end)
			continue;
		if (lo < start || hi > end || (home && s->base != home->base))
			return false;
		return (lo - start) / s->block_bytes == (hi - 1 - start) / s->block_bytes;
	}
	return !home;
}

/*
 * [base + (off + lo) * elem, base + (off + hi) * elem): computed without
 * wrapping (a range that wraps cannot be memory, so it fails) and checked.
 */
static bool span_addrs(const void *base, int64_t off, int64_t lo, int64_t hi, int64_t elem,
		       uintptr_t *a, uintptr_t *b)
{
	int64_t l, h;

	if (__builtin_add_overflow(off, lo, &l) || __builtin_add_overflow(off, hi, &h) ||
	    __builtin_mul_overflow(l, elem, &l) || __builtin_mul_overflow(h, elem, &h))
		return false;
	return addr_add((uintptr_t)base, l, a) && addr_add((uintptr_t)base, h, b);
}

static bool any_overlap(uintptr_t lo, uintptr_t hi)
{
	const struct kvrt_space *s;

	for (s = maps; s; s = s->map_next)
		if (hi > (uintptr_t)s->base && lo < (uintptr_t)s->base + s->map_bytes)
			return true;
	return false;
}

/* Whether [lo, hi) elements from base can touch a mapping (true when unsure). */
static bool may_reach(const void *base, int64_t lo, int64_t hi, int64_t elem)
{
	uintptr_t a, b;

	return !span_addrs(base, 0, lo, hi, elem, &a, &b) || any_overlap(a, b);
}

static bool block_ok(const void *base, int64_t off, int64_t lo, int64_t hi, int64_t elem)
{
	uintptr_t a, b;

	return span_addrs(base, off, lo, hi, elem, &a, &b) &&
	       range_ok(a, b, map_of((uintptr_t)base));
}

int kvrt_bounds_check(const struct kvrt_layout *l, const void *base, const float *scales,
		      uint32_t count, kvrt_block_at_fn block_at, const void *arg)
{
	struct kvrt_layout one = *l;
	struct kvrt_extent all, blk;
	bool fp8 = l->kv_dtype == KVRT_DTYPE_FP8_E4M3 && scales;
	int64_t b, off, soff;
	uint32_t i;
	int ret = 0;

	/* The extent of one block: the layout with the block dimension gone. */
	one.num_blocks = 1;
	if (kvrt_layout_extent(l, &all) || kvrt_layout_extent(&one, &blk))
		return -EINVAL;
	pthread_rwlock_rdlock(&maps_lock);
	/* Most caches are the caller's own memory: one test for all blocks
	 * (a base inside a mapping overlaps it, so it never takes this way). */
	if (!may_reach(base, all.min_off, all.max_end, 1) &&
	    !(fp8 && may_reach(scales, all.scale_min, all.scale_max_end, sizeof(float))))
		goto out;
	for (i = 0; i < count; i++) {
		b = block_at(arg, i);
		if (b < 0)
			continue;
		if (__builtin_mul_overflow(b, l->block_stride, &off) ||
		    __builtin_mul_overflow(b, l->scale_block_stride, &soff) ||
		    !block_ok(base, off, blk.min_off, blk.max_end, 1) ||
		    (fp8 && !block_ok(scales, soff, blk.scale_min, blk.scale_max_end,
				      sizeof(float)))) {
			ret = -ERANGE;
			break;
		}
	}
out:
	pthread_rwlock_unlock(&maps_lock);
	return ret;
}
