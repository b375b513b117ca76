// SPDX-License-Identifier: MIT
/*
 * backend_embedded.c: the in-process pool, for hosts without kvpool.ko.
 *
 * Each space is a kvc_space from kmod/core (the module's own block logic)
 * under a pthread mutex, in a per-handle namespace.  Its range is one
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
 * reports them with the THP the kernel actually granted (from smaps).
 * Chunks are never shared between spaces and fresh anonymous memory is
 * zero, so a space never sees another's data.  A space's memory is
 * unmapped when its last participant closes.
 */
#define _GNU_SOURCE	/* mremap */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

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

struct emb_space {
	struct emb_space *next;		/* kvrt.emb_spaces */
	struct kvrt *k;
	char name[KVRT_NAME_MAX];
	unsigned int refs;		/* kvrt.lock */
	uint32_t next_owner;		/* kvrt.lock */
	uint32_t id, uid, gid, mode;
	uint32_t policy;
	uint64_t node_mask;

	pthread_mutex_t lock;		/* everything below */
	struct kvc_space core;
	char *base;
	uint64_t reserve_bytes;		/* virtual range, chunk multiple */
	uint64_t mapped_bytes;		/* chunks backed so far, from base */
	uint64_t hugetlb_bytes;
	uint64_t thp_advised_bytes;
	uint64_t locked_bytes;
	uint64_t numa_bytes;		/* chunks mbind accepted */
	unsigned int cursor;		/* interleave: next node to try */
	int hugetlb_errno, thp_errno, mlock_errno, numa_errno, populate_errno;
	const char *hugetlb_step;	/* which call the hugetlb errno came from */
};

/* "0-3,5" as /sys/devices/system/node/online writes it. */
static uint64_t online_nodes(void)
{
	char buf[256], *p, *end;
	uint64_t mask = 0;
	ssize_t n;
	int fd;

	fd = open("/sys/devices/system/node/online", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = '\0';
	for (p = buf; *p && *p != '\n';) {
		unsigned long a = strtoul(p, &end, 10), b = a;

		if (end == p)
			break;
		if (*end == '-') {
			p = end + 1;
			b = strtoul(p, &end, 10);
		}
		for (; a <= b && a < KVC_MAX_NODES; a++)
			mask |= 1ULL << a;
		p = *end == ',' ? end + 1 : end;
	}
	return mask ? mask : 1;
}

int emb_init(struct kvrt *k)
{
	k->node_mask = online_nodes();
	return 0;
}

/* The embedded pool cap: an atomic, so grow never takes kvrt.lock. */
static bool pool_take(struct kvrt *k, uint64_t bytes)
{
	uint64_t used = __atomic_load_n(&k->pool_used, __ATOMIC_RELAXED);

	do {
		if (k->pool_cap && (used > k->pool_cap || bytes > k->pool_cap - used))
			return false;
	} while (!__atomic_compare_exchange_n(&k->pool_used, &used, used + bytes, true,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return true;
}

static void pool_put(struct kvrt *k, uint64_t bytes)
{
	__atomic_fetch_sub(&k->pool_used, bytes, __ATOMIC_RELAXED);
}

int emb_pool_info(struct kvrt *k, struct kvrt_pool_info *info)
{
	uint64_t used = __atomic_load_n(&k->pool_used, __ATOMIC_RELAXED);

	info->api_version = KVPOOL_API_VERSION;
	info->features = KVPOOL_FEATURES;
	info->page_size = k->page_size;
	info->chunk_size = (uint32_t)KVRT_CHUNK_BYTES;
	info->nr_nodes = (uint32_t)__builtin_popcountll(k->node_mask);
	info->max_batch = KVRT_MAX_BATCH;
	info->node_mask = k->node_mask;
	info->pool_bytes = k->pool_cap;
	info->used_bytes = used;
	info->free_bytes = k->pool_cap > used ? k->pool_cap - used : 0;
	return 0;
}

/* ---- backing ------------------------------------------------------------- */

static long sys_mbind(void *addr, unsigned long len, int mode, uint64_t mask)
{
	unsigned long nodes[2] = { (unsigned long)mask, 0 };

	return syscall(SYS_mbind, addr, len, mode, nodes, 65UL, 0U);
}

/* Apply the space's policy to one chunk before it is touched. */
static void emb_numa(struct emb_space *es, void *addr)
{
	uint64_t mask = es->node_mask & es->k->node_mask;
	kvc_u8 order[KVC_MAX_NODES];
	int mode;
	long ret;

	switch (es->policy) {
	case KVRT_NUMA_BIND:
		mode = KVRT_MPOL_BIND;
		break;
	case KVRT_NUMA_INTERLEAVE:
		/* Chunk by chunk across the mask, as the module interleaves. */
		if (!kvc_numa_order(KVC_NUMA_INTERLEAVE, es->node_mask, es->k->node_mask, -1,
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
static long long emb_grow(struct kvc_space *core, kvc_u64 want)
{
	struct emb_space *es = core->host;
	uint64_t room = es->reserve_bytes - es->mapped_bytes, got = 0;

	if (want > room)
		want = room;
	while (got < want) {
		if (!pool_take(es->k, KVRT_CHUNK_BYTES)) {
			kvrt_log(es->k, KVRT_LOG_DEBUG, "space \"%s\": pool cap %llu reached",
				 es->name, (unsigned long long)es->k->pool_cap);
			break;
		}
		if (emb_map_chunk(es, es->base + es->mapped_bytes)) {
			pool_put(es->k, KVRT_CHUNK_BYTES);
			break;
		}
		es->mapped_bytes += KVRT_CHUNK_BYTES;
		got += KVRT_CHUNK_BYTES;
	}
	return (long long)got;
}

static const struct kvc_space_ops emb_ops = {
	.grow = emb_grow,
};

/* ---- spaces ---------------------------------------------------------------- */

/* KVPOOL_IOC_SPACE_OPEN's create checks, in its order. */
static int emb_args_valid(const struct kvrt *k, const struct kvrt_space_opts *o)
{
	if (!o->block_bytes || o->block_bytes % k->page_size)
		return -EINVAL;
	if (o->block_bytes > KVRT_MAX_BLOCK_BYTES)
		return -E2BIG;
	if (o->quota_bytes < o->block_bytes)
		return -EINVAL;
	if (o->quota_bytes > KVRT_MAX_SPACE_BYTES)
		return -E2BIG;
	if (o->mode & ~0777U)
		return -EINVAL;
	if ((unsigned int)o->numa_policy > KVRT_NUMA_INTERLEAVE)
		return -EINVAL;
	if (o->node_mask & ~k->node_mask)
		return -EINVAL;
	if (o->numa_policy == KVRT_NUMA_BIND && !o->node_mask)
		return -EINVAL;
	return 0;
}

static bool in_group(gid_t gid)
{
	gid_t groups[256];
	int i, n;

	if (getegid() == gid)
		return true;
	n = getgroups(256, groups);
	for (i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/* As the module: read and write for the caller's class; root overrides. */
static bool emb_permitted(const struct emb_space *es)
{
	uint32_t bits;

	if (geteuid() == 0)
		return true;
	if (geteuid() == es->uid)
		bits = es->mode >> 6;
	else if (in_group(es->gid))
		bits = es->mode >> 3;
	else
		bits = es->mode;
	return (bits & 6) == 6;
}

static struct emb_space *emb_find(struct kvrt *k, const char *name)
{
	struct emb_space *es;

	for (es = k->emb_spaces; es; es = es->next)
		if (!strcmp(es->name, name))
			return es;
	return NULL;
}

static int emb_create(struct kvrt *k, const struct kvrt_space_opts *o, struct emb_space **out)
{
	uint64_t nr_blocks = o->quota_bytes / o->block_bytes, range, reserve;
	struct emb_space *es;
	char *p, *base;
	int ret;

	es = calloc(1, sizeof(*es));
	if (!es)
		return -ENOMEM;
	ret = kvc_space_init(&es->core, o->block_bytes, nr_blocks, &emb_ops, es);
	if (ret)
		goto out_free;
	range = nr_blocks * o->block_bytes;
	reserve = (range + KVRT_CHUNK_BYTES - 1) & ~(KVRT_CHUNK_BYTES - 1);
	/* One chunk more, to align the start to 2 MiB (hugetlb needs it). */
	p = mmap(NULL, reserve + KVRT_CHUNK_BYTES, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		ret = -ENOMEM;
		goto out_fini;
	}
	base = (char *)(((uintptr_t)p + KVRT_CHUNK_BYTES - 1) & ~(uintptr_t)(KVRT_CHUNK_BYTES - 1));
	if (base > p)
		munmap(p, (size_t)(base - p));
	if (base + reserve < p + reserve + KVRT_CHUNK_BYTES)
		munmap(base + reserve, (size_t)(p + reserve + KVRT_CHUNK_BYTES - (base + reserve)));
	madvise(base, reserve, MADV_DONTDUMP);

	es->k = k;
	snprintf(es->name, sizeof(es->name), "%s", o->name);
	es->next_owner = 1;
	es->id = k->next_space_id++;
	es->uid = (uint32_t)geteuid();
	es->gid = (uint32_t)getegid();
	es->mode = o->mode;
	es->policy = (uint32_t)o->numa_policy;
	es->node_mask = o->node_mask;
	es->base = base;
	es->reserve_bytes = reserve;
	pthread_mutex_init(&es->lock, NULL);
	*out = es;
	return 0;

out_fini:
	kvc_space_fini(&es->core);
out_free:
	free(es);
	return ret;
}

static void emb_destroy(struct emb_space *es)
{
	munmap(es->base, es->reserve_bytes);
	pool_put(es->k, es->mapped_bytes);
	kvc_space_fini(&es->core);
	pthread_mutex_destroy(&es->lock);
	free(es);
}

int emb_space_open(struct kvrt *k, const struct kvrt_space_opts *o, struct kvrt_space *s)
{
	struct emb_space *es;
	int ret = 0;

	pthread_mutex_lock(&k->lock);
	es = emb_find(k, o->name);
	if (es) {
		if ((o->flags & KVRT_SPACE_CREATE) && (o->flags & KVRT_SPACE_EXCL)) {
			ret = -EEXIST;
			goto out_unlock;
		}
		if (o->block_bytes && o->block_bytes != es->core.block_bytes) {
			ret = -EINVAL;
			goto out_unlock;
		}
		if (!emb_permitted(es)) {
			ret = -EACCES;
			goto out_unlock;
		}
		s->created = 0;
	} else {
		if (!(o->flags & KVRT_SPACE_CREATE)) {
			ret = -ENOENT;
			goto out_unlock;
		}
		ret = emb_args_valid(k, o);
		if (ret)
			goto out_unlock;
		ret = emb_create(k, o, &es);
		if (ret)
			goto out_unlock;
		es->next = k->emb_spaces;
		k->emb_spaces = es;
		s->created = 1;
	}
	es->refs++;
	s->es = es;
	s->owner = es->next_owner++;
	s->base = es->base;
	s->block_bytes = es->core.block_bytes;
	s->nr_blocks = es->core.nr_blocks;
	s->map_bytes = es->core.nr_blocks * es->core.block_bytes;

out_unlock:
	pthread_mutex_unlock(&k->lock);
	return ret;
}

void emb_space_close(struct kvrt_space *s)
{
	struct emb_space *es = s->es, **pp;
	struct kvrt *k = s->k;
	bool last;

	pthread_mutex_lock(&es->lock);
	kvc_release_owner(&es->core, s->owner);
	pthread_mutex_unlock(&es->lock);

	pthread_mutex_lock(&k->lock);
	last = !--es->refs;
	if (last) {
		for (pp = &k->emb_spaces; *pp != es; pp = &(*pp)->next)
			;
		*pp = es->next;
	}
	pthread_mutex_unlock(&k->lock);
	if (last)
		emb_destroy(es);
}

int emb_space_info(struct kvrt_space *s, struct kvrt_space_info *info)
{
	struct emb_space *es = s->es;

	info->space_id = es->id;
	info->created = s->created;
	info->uid = es->uid;
	info->gid = es->gid;
	info->mode = es->mode;
	info->numa_policy = (enum kvrt_numa_policy)es->policy;
	info->node_mask = es->node_mask;
	pthread_mutex_lock(&es->lock);
	info->block_bytes = es->core.block_bytes;
	info->nr_blocks = es->core.nr_blocks;
	info->map_bytes = s->map_bytes;
	info->backed_blocks = es->core.backed_blocks;
	info->free_blocks = es->core.nr_free;
	info->owned_blocks = es->core.nr_owned;
	info->my_blocks = kvc_owner_blocks(&es->core, s->owner);
	info->backed_bytes = es->core.backed_bytes;
	pthread_mutex_unlock(&es->lock);
	return 0;
}

int emb_alloc(struct kvrt_space *s, uint32_t count, uint32_t *ids)
{
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	ret = kvc_alloc(&es->core, s->owner, count, ids);
	pthread_mutex_unlock(&es->lock);
	return ret;
}

int emb_free(struct kvrt_space *s, uint32_t count, const uint32_t *ids)
{
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	ret = kvc_free(&es->core, s->owner, count, ids);
	pthread_mutex_unlock(&es->lock);
	return ret;
}

/* ---- memory report ----------------------------------------------------------- */

/*
 * What the kernel says about the VMAs inside [lo, hi), from
 * /proc/self/smaps: AnonHugePages (THP) and Locked (mlock'd) bytes.
 * -errno when smaps cannot be read.
 */
static int smaps_scan(uintptr_t lo, uintptr_t hi, uint64_t *thp, uint64_t *locked)
{
	char line[512];
	bool inside = false, at_start = true;
	FILE *f;

	*thp = *locked = 0;
	f = fopen("/proc/self/smaps", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		bool start = at_start;
		uintptr_t a, b;
		unsigned long long kb;

		/* A line longer than the buffer arrives in pieces: parse only starts. */
		at_start = strchr(line, '\n') != NULL;
		if (!start)
			continue;
		/* VMA headers are "start-end perms ...", field lines "Name: value". */
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &a, &b) == 2) {
			inside = a >= lo && b <= hi;
			continue;
		}
		if (!inside)
			continue;
		if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
			*thp += (uint64_t)kb * 1024;
		else if (sscanf(line, "Locked: %llu kB", &kb) == 1)
			*locked += (uint64_t)kb * 1024;
	}
	fclose(f);
	return 0;
}

/* The system THP mode, e.g. "madvise", from the bracketed word. */
static void thp_mode(char *buf, size_t len)
{
	char line[128], *a, *b;
	ssize_t n;
	int fd;

	snprintf(buf, len, "unknown");
	fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(buf, len, "absent");
		return;
	}
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return;
	line[n] = '\0';
	a = strchr(line, '[');
	b = a ? strchr(a, ']') : NULL;
	if (a && b)
		snprintf(buf, len, "%.*s", (int)(b - a - 1), a + 1);
}

static void human(char *buf, size_t len, uint64_t bytes)
{
	if (bytes >= (1ULL << 30) && !(bytes % (1ULL << 20)))
		snprintf(buf, len, "%.1f GiB", (double)bytes / (1ULL << 30));
	else if (bytes >= (1ULL << 20))
		snprintf(buf, len, "%.1f MiB", (double)bytes / (1ULL << 20));
	else
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
}

/* "(why)" for a mechanism that did not cover everything. */
static void why(char *buf, size_t len, uint32_t disabled_bit, const char *flag,
		const struct kvrt *k, int err, const char *call)
{
	if (k->flags & disabled_bit)
		snprintf(buf, len, " (not asked for: %s)", flag);
	else if (err)
		snprintf(buf, len, " (%s: %s)", call, strerror(err));
	else
		buf[0] = '\0';
}

/* snprintf that may truncate, on purpose: the summary is bounded. */
__attribute__((format(printf, 3, 4)))
static void fmt(char *buf, size_t len, const char *f, ...)
{
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, len, f, ap);
	va_end(ap);
}

int emb_mem_info(struct kvrt_space *s, struct kvrt_mem_info *m)
{
	struct emb_space *es = s->es;
	struct kvrt *k = s->k;
	char h[4][32], w[4][160], mode[32];
	uint64_t thp, locked, asked_locked, hugetlb;
	struct rlimit lim;
	int sm;

	sm = smaps_scan((uintptr_t)es->base, (uintptr_t)es->base + es->reserve_bytes, &thp,
			&locked);
	thp_mode(mode, sizeof(mode));

	pthread_mutex_lock(&es->lock);
	m->kind = KVRT_MEM_EMBEDDED;
	m->backed_bytes = es->mapped_bytes;
	m->hugetlb_bytes = hugetlb = es->hugetlb_bytes;
	asked_locked = es->locked_bytes;	/* hugetlb chunks + successful mlocks */
	m->hugetlb_errno = es->hugetlb_errno;
	m->thp_errno = es->thp_errno;
	m->mlock_errno = es->mlock_errno;
	m->numa_errno = es->numa_errno;
	m->disabled = k->flags & KVRT_OPEN_FLAGS;
	why(w[0], sizeof(w[0]), KVRT_OPEN_NO_HUGETLB, "KVRT_OPEN_NO_HUGETLB", k, es->hugetlb_errno,
	    es->hugetlb_step ? es->hugetlb_step : "mmap(MAP_HUGETLB)");
	why(w[1], sizeof(w[1]), KVRT_OPEN_NO_THP, "KVRT_OPEN_NO_THP", k, es->thp_errno,
	    "madvise(MADV_HUGEPAGE)");
	why(w[2], sizeof(w[2]), KVRT_OPEN_NO_MLOCK, "KVRT_OPEN_NO_MLOCK", k, es->mlock_errno,
	    "mlock");
	if (es->numa_errno)
		fmt(w[3], sizeof(w[3]), ", numa policy not applied (mbind: %s)",
		    strerror(es->numa_errno));
	else
		w[3][0] = '\0';
	pthread_mutex_unlock(&es->lock);

	/*
	 * Locked bytes as the kernel counts them (hugetlb pages are never
	 * swapped and are not VM_LOCKED, so they are added).  An mlock that
	 * returned 0 without locking anything (sanitizers interpose mlock) is
	 * reported as such rather than believed.
	 */
	if (sm == 0) {
		m->locked_bytes = locked + hugetlb;
		m->thp_bytes = thp;
		if (m->locked_bytes < asked_locked && !w[2][0])
			fmt(w[2], sizeof(w[2]),
			    " (mlock returned 0 for %llu B but the kernel shows them unlocked: "
			    "mlock is interposed, e.g. by a sanitizer)",
			    (unsigned long long)(asked_locked - m->locked_bytes));
	} else {
		m->locked_bytes = asked_locked;
	}
	if (m->mlock_errno && !getrlimit(RLIMIT_MEMLOCK, &lim) && lim.rlim_cur != RLIM_INFINITY) {
		size_t n = strlen(w[2]);

		if (n && w[2][n - 1] == ')')
			fmt(w[2] + n - 1, sizeof(w[2]) - n + 1, ", RLIMIT_MEMLOCK %llu B)",
			    (unsigned long long)lim.rlim_cur);
	}
	human(h[0], sizeof(h[0]), m->backed_bytes);
	human(h[1], sizeof(h[1]), m->hugetlb_bytes);
	human(h[2], sizeof(h[2]), m->thp_bytes);
	human(h[3], sizeof(h[3]), m->locked_bytes);
	fmt(m->summary, sizeof(m->summary),
	    "embedded: %s backed; hugetlb %s%s; thp %s%s (system: %s); locked %s%s%s",
	    h[0], h[1], w[0], sm ? "unknown (no /proc/self/smaps)" : h[2], w[1], mode, h[3],
	    w[2], w[3]);
	return 0;
}
