// SPDX-License-Identifier: MIT
/*
 * emb_backing.c: backing an embedded space's range.  The range is one
 * contiguous stretch of virtual memory reserved at creation (PROT_NONE,
 * MAP_NORESERVE, 2 MiB aligned) and backed 2 MiB chunk by chunk when
 * kvcore's grow callback asks, as the module backs spaces with pool chunks:
 *
 *   1. MAP_HUGETLB: a 2 MiB hugetlb page is mapped anywhere, then moved into
 *      place with mremap(MREMAP_FIXED), which replaces the reservation in
 *      one step (mapping it in place with MAP_FIXED would leave a hole in
 *      the range if it failed);
 *   2. otherwise the reservation is made read/write with mprotect and
 *      madvise(MADV_HUGEPAGE) asks for a transparent huge page;
 *   3. mbind(2) applies the space's NUMA policy before any page is touched;
 *   4. the chunk is populated now, by mlock when permitted (hugetlb pages
 *      are unswappable anyway), else by MADV_POPULATE_WRITE, so allocation
 *      fails with -ENOSPC rather than a later page fault failing.
 *
 * Each step's outcome is counted and its last errno kept; kvrt_space_mem_info
 * reports them with the THP the kernel actually granted (from smaps, in
 * emb_meminfo.c).  Chunks are never shared between spaces and fresh
 * anonymous memory is zero, so a space never sees another's data.
 */
#define _GNU_SOURCE	/* mremap */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pool/embedded/embedded.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* mbind(2) modes, as linux/mempolicy.h numbers them. */
#define KVRT_MPOL_PREFERRED 1
#define KVRT_MPOL_BIND 2
#define KVRT_MPOL_PREFERRED_MANY 5

static long sys_mbind(void *addr, unsigned long len, int mode, uint64_t mask)
{
	unsigned long nodes[2] = { (unsigned long)mask, 0 };

	return syscall(SYS_mbind, addr, len, mode, nodes, 65UL, 0U);
}

/* Apply the space's policy to one chunk before it is touched. */
static void emb_numa(struct emb_space *es, void *addr)
{
	uint64_t online = emb_pool_of(es->k)->node_mask, mask = es->node_mask & online;
	kvc_u8 order[KVC_MAX_NODES];
	int mode;
	long ret;

	switch (es->policy) {
	case KVRT_NUMA_BIND:
		mode = KVRT_MPOL_BIND;
		break;
	case KVRT_NUMA_INTERLEAVE:
		/* Chunk by chunk across the mask, as the module interleaves. */
		if (!kvc_numa_order(KVC_NUMA_INTERLEAVE, es->node_mask, online, -1,
				    es->cursor, order))
			return;
		es->cursor = order[0] + 1U;
		mask = 1ULL << order[0];
		mode = KVRT_MPOL_PREFERRED;
		break;
	default:
		if (!mask)
			return;	/* the caller's node: the kernel's default */
		mode = KVRT_MPOL_PREFERRED_MANY;
		break;
	}
	ret = sys_mbind(addr, KVRT_CHUNK_BYTES, mode, mask);
	if (ret && errno == EINVAL && mode == KVRT_MPOL_PREFERRED_MANY) {
		/* Before Linux 5.15: prefer the first node of the mask. */
		ret = sys_mbind(addr, KVRT_CHUNK_BYTES, KVRT_MPOL_PREFERRED,
				mask & -mask);
	}
	if (ret)
		es->numa_errno = errno;
	else
		es->numa_bytes += KVRT_CHUNK_BYTES;
}

/* A hugetlb chunk moved into place at addr; false when none could be had. */
static bool emb_map_hugetlb(struct emb_space *es, char *addr)
{
	void *p, *q;

	p = mmap(NULL, KVRT_CHUNK_BYTES, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
	if (p == MAP_FAILED) {
		es->hugetlb_errno = errno;
		es->hugetlb_step = "mmap(MAP_HUGETLB)";
		return false;
	}
	emb_numa(es, p);
	q = mremap(p, KVRT_CHUNK_BYTES, KVRT_CHUNK_BYTES, MREMAP_MAYMOVE | MREMAP_FIXED, addr);
	if (q == MAP_FAILED) {
		/* Before Linux 5.16 hugetlb mappings cannot be moved. */
		es->hugetlb_errno = errno;
		es->hugetlb_step = "mremap of the hugetlb page";
		munmap(p, KVRT_CHUNK_BYTES);
		return false;
	}
	return true;
}

/* Give a chunk back to the reservation (PROT_NONE, no memory). */
static void emb_unmap_chunk(char *addr)
{
	void *p = mmap(addr, KVRT_CHUNK_BYTES, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);

	if (p == MAP_FAILED) {
		/* Keep the range ours whatever happens: at least drop the pages. */
		madvise(addr, KVRT_CHUNK_BYTES, MADV_DONTNEED);
		mprotect(addr, KVRT_CHUNK_BYTES, PROT_NONE);
	}
}

/* Touch every page, for kernels without MADV_POPULATE_WRITE. */
static void emb_touch(char *addr, uint32_t page)
{
	uint64_t off;

	for (off = 0; off < KVRT_CHUNK_BYTES; off += page)
		*(volatile char *)(addr + off) = 0;
}

/* Fault the chunk in now; false (chunk unmapped again) when that fails. */
static bool emb_populate(struct emb_space *es, char *addr)
{
	if (!madvise(addr, KVRT_CHUNK_BYTES, MADV_POPULATE_WRITE))
		return true;
	if (errno == EINVAL) {
		/* Before Linux 5.14: touch the pages instead. */
		emb_touch(addr, es->k->page_size);
		return true;
	}
	es->populate_errno = errno;
	kvrt_log(es->k, KVRT_LOG_WARNING, "space \"%s\": populating a chunk: %s", es->name,
		 strerror(errno));
	emb_unmap_chunk(addr);
	return false;
}

/* Back the chunk at addr: 0, or -ENOMEM when no memory could be had. */
static int emb_map_chunk(struct emb_space *es, char *addr)
{
	struct kvrt *k = es->k;
	bool locked = false;

	/* A huge page that cannot be faulted in (its node is out) falls back. */
	if (!(k->flags & KVRT_OPEN_NO_HUGETLB) && emb_map_hugetlb(es, addr)) {
		if (emb_populate(es, addr)) {
			/* Never swapped, so locked; mlock would not count it anyway. */
			es->hugetlb_bytes += KVRT_CHUNK_BYTES;
			es->locked_bytes += KVRT_CHUNK_BYTES;
			return 0;
		}
		es->hugetlb_errno = es->populate_errno;
		es->hugetlb_step = "populating the hugetlb page";
	}
	if (mprotect(addr, KVRT_CHUNK_BYTES, PROT_READ | PROT_WRITE))
		return -ENOMEM;
	emb_numa(es, addr);
	if (!(k->flags & KVRT_OPEN_NO_THP)) {
		if (madvise(addr, KVRT_CHUNK_BYTES, MADV_HUGEPAGE))
			es->thp_errno = errno;
		else
			es->thp_advised_bytes += KVRT_CHUNK_BYTES;
	}
	if (!(k->flags & KVRT_OPEN_NO_MLOCK)) {
		/* mlock faults the chunk in as it locks it. */
		if (mlock(addr, KVRT_CHUNK_BYTES))
			es->mlock_errno = errno;
		else
			locked = true;
	}
	if (!locked && !emb_populate(es, addr))
		return -ENOMEM;
	if (locked)
		es->locked_bytes += KVRT_CHUNK_BYTES;
	return 0;
}

/*
 * kvcore grow callback, under es->lock: back at least want more bytes, in
 * whole chunks.  Returns the bytes backed (kvcore clamps the last chunk to
 * the range), 0 when the pool cap or memory ran out (-ENOSPC for the caller).
 */
long long emb_grow(struct kvc_space *core, kvc_u64 want)
{
	struct emb_space *es = core->host;
	uint64_t room = es->reserve_bytes - es->mapped_bytes, got = 0;

	if (want > room)
		want = room;
	while (got < want) {
		if (!emb_pool_take(es->k, KVRT_CHUNK_BYTES)) {
			kvrt_log(es->k, KVRT_LOG_DEBUG, "space \"%s\": pool cap %llu reached",
				 es->name, (unsigned long long)emb_pool_of(es->k)->cap);
			break;
		}
		if (emb_map_chunk(es, es->base + es->mapped_bytes)) {
			emb_pool_put(es->k, KVRT_CHUNK_BYTES);
			break;
		}
		es->mapped_bytes += KVRT_CHUNK_BYTES;
		got += KVRT_CHUNK_BYTES;
	}
	return (long long)got;
}
