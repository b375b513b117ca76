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
 *
 * Inside a mapping, a pool block must also have memory behind it (DESIGN.md,
 * "No signal for a bad id"): past the backed prefix the embedded range is
 * PROT_NONE and the module's mapping faults SIGBUS, so touching it would
 * kill the caller.  Each handle remembers how far its space was backed
 * (kvrt_space_backed()); only a block past that asks the backend again,
 * so a call over backed blocks costs no more than before.
 */
#include <errno.h>
#include <inttypes.h>
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

/* Which pool block had no memory behind it: for the log line, after the lock. */
struct unbacked {
	const struct kvrt_space *s;
	uint64_t pool_block, backed_blocks;
};

/*
 * A byte range is fine when it lies in one pool block of a mapping that
 * has memory behind it, or misses every mapping and its pointer (home)
 * was no space's: a pointer into a space addresses that space, so it may
 * not leave it.  -ERANGE, or -EFAULT (filling *why) for a block not backed.
 */
static int range_ok(uintptr_t lo, uintptr_t hi, const struct kvrt_space *home,
		    struct unbacked *why)
{
	struct kvrt_space *s;

	for (s = maps; s; s = s->map_next) {
		uintptr_t start = (uintptr_t)s->base, end = start + s->map_bytes;
		uint64_t backed;

		if (hi <= start || lo >= end)
			continue;
		if (lo < start || hi > end || (home && s->base != home->base))
			return -ERANGE;
		if ((lo - start) / s->block_bytes != (hi - 1 - start) / s->block_bytes)
			return -ERANGE;
		/* Backed is in whole blocks: the block's end is enough. */
		if (hi - start <= kvrt_space_backed(s, false) ||
		    hi - start <= (backed = kvrt_space_backed(s, true)))
			return 0;
		why->s = s;
		why->pool_block = (lo - start) / s->block_bytes;
		why->backed_blocks = backed / s->block_bytes;
		return -EFAULT;
	}
	return home ? -ERANGE : 0;
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

static int block_ok(const void *base, int64_t off, int64_t lo, int64_t hi, int64_t elem,
		    struct unbacked *why)
{
	uintptr_t a, b;

	if (!span_addrs(base, off, lo, hi, elem, &a, &b))
		return -ERANGE;
	return range_ok(a, b, map_of((uintptr_t)base), why);
}

/* Say what was wrong and what to do, through the handle of the space it hit. */
static void log_unbacked(const struct unbacked *u, int64_t id)
{
	const struct kvrt_space *s = u->s;

	if ((uint64_t)id == u->pool_block)
		kvrt_log(s->k, KVRT_LOG_WARNING,
			 "space \"%s\": block %" PRIu64 " has no memory behind it (backed: "
			 "blocks 0..%" PRIu64 " of %" PRIu64 "): allocate blocks with "
			 "kvrt_alloc_blocks (or look them up) and pass only ids this handle holds",
			 s->name, u->pool_block, u->backed_blocks ? u->backed_blocks - 1 : 0,
			 s->nr_blocks);
	else
		kvrt_log(s->k, KVRT_LOG_WARNING,
			 "space \"%s\": block %" PRId64 " of the layout lies in pool block %"
			 PRIu64 ", which has no memory behind it (backed: blocks 0..%" PRIu64
			 " of %" PRIu64 "): allocate blocks with kvrt_alloc_blocks (or look them "
			 "up) and pass only ids this handle holds",
			 s->name, id, u->pool_block, u->backed_blocks ? u->backed_blocks - 1 : 0,
			 s->nr_blocks);
}

int kvrt_bounds_check(const struct kvrt_layout *l, const void *base, const float *scales,
		      uint32_t count, kvrt_block_at_fn block_at, const void *arg)
{
	struct kvrt_layout one = *l;
	struct kvrt_extent all, blk;
	bool fp8 = l->kv_dtype == KVRT_DTYPE_FP8_E4M3 && scales;
	struct unbacked why = { 0 };
	int64_t b = 0, off, soff;
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
		    __builtin_mul_overflow(b, l->scale_block_stride, &soff)) {
			ret = -ERANGE;
			break;
		}
		ret = block_ok(base, off, blk.min_off, blk.max_end, 1, &why);
		if (!ret && fp8)
			ret = block_ok(scales, soff, blk.scale_min, blk.scale_max_end,
				       sizeof(float), &why);
		if (ret)
			break;
	}
out:
	pthread_rwlock_unlock(&maps_lock);
	/* The space stays mapped: the caller is using it (closing it now is its bug). */
	if (ret == -EFAULT)
		log_unbacked(&why, b);
	return ret;
}
