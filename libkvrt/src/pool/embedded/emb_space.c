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
 * unmapped when its last participant closes (a persistent space: when it
 * is destroyed, or with its handle).
 *
 * Prefix cache: kvcore keeps the hash index, the reader references (one
 * struct kvc_refs per participant, as the module keeps one per descriptor)
 * and the eviction lists; kvc_alloc evicts by itself and reports each
 * eviction through the evicted callback.  What the module keeps beside
 * kvcore is kept here beside it, under the space's mutex, per block: the
 * residency records (participant, device slot, GPU block) and the
 * participants to tell when the block is evicted (those that published or
 * hit it since it was last published); and per participant an event queue
 * with the module's sequence and overflow rules, signalled through an
 * eventfd.  Everything that may need memory is reserved before kvcore is
 * called, so the calls stay all or nothing.
 */
#define _GNU_SOURCE	/* mremap */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "pool/backend.h"

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

/* Events a participant's queue holds at most (the module's default). */
#define EMB_EVENT_MAX 65536U

/* A residency record: participant owner says the block mirrors gpu_block on slot. */
struct emb_rec {
	uint32_t owner;
	uint32_t slot;
	uint32_t gpu_block;
};

/* What the prefix cache keeps per block beside kvcore. */
struct emb_blk {
	uint32_t *watch;		/* owners to tell when it is evicted */
	struct emb_rec *rec;
	uint32_t nwatch, cwatch;
	uint32_t nrec, crec;
	uint32_t pending;		/* residency add: records being reserved */
};

struct emb_space {
	struct emb_space *next;		/* kvrt.emb_spaces */
	struct kvrt *k;
	char name[KVRT_NAME_MAX];
	unsigned int refs;		/* kvrt.lock: participants, and destroy in progress */
	uint32_t next_owner;		/* kvrt.lock */
	bool persist;			/* kvrt.lock */
	bool linked;			/* kvrt.lock: in kvrt.emb_spaces, under its name */
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

	/* Prefix cache side state. */
	struct emb_part *sessions;	/* participants joined */
	struct emb_blk *bx;		/* per block, nbx entries */
	uint64_t nbx;
	/* The residency device table: slot s is held by dev_fds[s] participants. */
	uint8_t dev[KVRT_MAX_DEVICES][KVRT_UUID_BYTES];
	uint64_t dev_used;		/* bit s: slot s holds a device */
	uint32_t dev_fds[KVRT_MAX_DEVICES];
	bool destroyed;			/* SPACE_DESTROYED sent */
};

/* A participant's event queue: a ring, grown up to max. */
struct emb_events {
	struct kvrt_event *ring;
	uint32_t head, len, cap;
	uint64_t seq;			/* last seq given out, dropped ones included */
	uint64_t lost;			/* dropped since the last OVERFLOW */
	int efd;			/* eventfd, -1 until kvrt_events_fd() */
	bool signalled;			/* efd's counter is 1 */
};

/* One participant: a space handle joined to an emb_space (fields: es->lock). */
struct emb_part {
	struct kvrt_space space;
	struct emb_space *es;
	uint32_t owner;
	struct emb_part *sprev, *snext;	/* emb_space.sessions */
	struct kvc_refs refs;		/* reader references */
	uint64_t res_slots;		/* residency slots this participant registered */
	struct emb_events ev;
};

static struct emb_part *to_emb(struct kvrt_space *space)
{
	return kvrt_container_of(space, struct emb_part, space);
}

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

/* Nothing to open: device names the module, which this backend stands in for. */
static int emb_probe(struct kvrt *k, const char *device)
{
	(void)device;
	k->node_mask = online_nodes();
	/* Everything but RECLAIM: the embedded pool has no shrinker. */
	k->features = KVPOOL_FEAT_SPACES | KVPOOL_FEAT_NUMA | KVPOOL_FEAT_PREFIX |
		      KVPOOL_FEAT_PERSIST | KVPOOL_FEAT_RESIDENCY | KVPOOL_FEAT_EVENTS;
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

static int emb_pool_info(struct kvrt *k, struct kvrt_pool_info *info)
{
	uint64_t used = __atomic_load_n(&k->pool_used, __ATOMIC_RELAXED);

	info->api_version = KVPOOL_API_VERSION;
	info->features = k->features;
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

static void emb_evicted(struct kvc_space *core, kvc_u32 id, const kvc_u8 *hash,
			unsigned int cause);

static const struct kvc_space_ops emb_ops = {
	.grow = emb_grow,
	.evicted = emb_evicted,
};

/* ---- spaces ---------------------------------------------------------------- */

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

/* As the module: the caller's own spaces, or expect_uid's with FOREIGN. */
static bool emb_owner_accepted(const struct emb_space *es, const struct kvrt_space_opts *o)
{
	uint32_t accepted = (uint32_t)geteuid();

	if (o->flags & KVRT_SPACE_FOREIGN)
		accepted = o->expect_uid;
	return es->uid == accepted;
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
	for (uint64_t i = 0; i < es->nbx; i++) {
		free(es->bx[i].watch);
		free(es->bx[i].rec);
	}
	free(es->bx);
	munmap(es->base, es->reserve_bytes);
	pool_put(es->k, es->mapped_bytes);
	kvc_space_fini(&es->core);
	pthread_mutex_destroy(&es->lock);
	free(es);
}

/*
 * Drop one reference to es (a participant's, or destroy's): the space goes
 * when none is left, unless it is persistent and still has its name.
 */
static void emb_put(struct kvrt *k, struct emb_space *es)
{
	struct emb_space **pp;
	bool last;

	pthread_mutex_lock(&k->lock);
	last = !--es->refs && !(es->linked && es->persist);
	if (last && es->linked) {
		for (pp = &k->emb_spaces; *pp != es; pp = &(*pp)->next)
			;
		*pp = es->next;
		es->linked = false;
	}
	pthread_mutex_unlock(&k->lock);
	if (last)
		emb_destroy(es);
}

/* ---- events ------------------------------------------------------------------ */

/* Room for one more event, growing the ring up to EMB_EVENT_MAX. */
static bool ev_room(struct emb_events *q)
{
	struct kvrt_event *ring;
	uint32_t cap;

	if (q->len < q->cap)
		return true;
	if (q->cap >= EMB_EVENT_MAX)
		return false;
	cap = q->cap ? q->cap * 2 : 64;
	ring = malloc((size_t)cap * sizeof(*ring));
	if (!ring)
		return false;	/* counted as lost, like a full queue */
	for (uint32_t i = 0; i < q->len; i++)
		ring[i] = q->ring[(q->head + i) % q->cap];
	free(q->ring);
	q->ring = ring;
	q->cap = cap;
	q->head = 0;
	return true;
}

/*
 * The eventfd is readable exactly while something is pending (events, or
 * an OVERFLOW owed), as the module's poll says.
 */
static void ev_signal(struct emb_events *q)
{
	bool pending = q->len || q->lost;
	uint64_t v = 1;
	ssize_t n;

	if (q->efd < 0 || pending == q->signalled)
		return;
	/* Neither can fail: the counter is 0 or 1 and the eventfd non-blocking. */
	if (pending)
		n = write(q->efd, &v, sizeof(v));
	else
		n = read(q->efd, &v, sizeof(v));
	(void)n;
	q->signalled = pending;
}

static void ev_append(struct emb_events *q, const struct kvrt_event *e)
{
	q->ring[(q->head + q->len) % q->cap] = *e;
	q->len++;
}

/* Events dropped so far become one OVERFLOW, once there is room for it. */
static void ev_flush_lost(struct emb_events *q)
{
	struct kvrt_event e = { .type = KVRT_EVENT_OVERFLOW };

	if (!q->lost || !ev_room(q))
		return;
	e.seq = ++q->seq;
	e.count = (uint32_t)(q->lost > UINT32_MAX ? UINT32_MAX : q->lost);
	q->lost = 0;
	ev_append(q, &e);
}

/*
 * Queue e for one participant.  Every event takes the next seq; one that
 * does not fit (queue full, or no memory) is dropped and counted, and the
 * OVERFLOW that replaces the dropped ones comes before anything later.
 */
static void ev_push(struct emb_part *s, const struct kvrt_event *e)
{
	struct emb_events *q = &s->ev;
	struct kvrt_event x = *e;

	ev_flush_lost(q);
	x.seq = ++q->seq;
	if (q->lost || !ev_room(q))
		q->lost++;
	else
		ev_append(q, &x);
	ev_signal(q);
}

static void ev_broadcast(struct emb_space *es, const struct kvrt_event *e)
{
	for (struct emb_part *s = es->sessions; s; s = s->snext)
		ev_push(s, e);
}

static struct emb_part *emb_session(struct emb_space *es, uint32_t owner)
{
	struct emb_part *s;

	for (s = es->sessions; s; s = s->snext)
		if (s->owner == owner)
			return s;
	return NULL;
}

/* ---- per-block side state ------------------------------------------------------ */

/* bx[] covers ids below n. */
static int bx_cover(struct emb_space *es, uint64_t n)
{
	struct emb_blk *bx;
	uint64_t cap;

	if (n <= es->nbx)
		return 0;
	cap = es->nbx * 2 > n ? es->nbx * 2 : n;
	if (cap < 64)
		cap = 64;
	if (cap > es->core.nr_blocks)
		cap = es->core.nr_blocks;
	bx = realloc(es->bx, cap * sizeof(*bx));
	if (!bx)
		return -ENOMEM;
	memset(bx + es->nbx, 0, (cap - es->nbx) * sizeof(*bx));
	es->bx = bx;
	es->nbx = cap;
	return 0;
}

static bool watching(const struct emb_blk *b, uint32_t owner)
{
	for (uint32_t i = 0; i < b->nwatch; i++)
		if (b->watch[i] == owner)
			return true;
	return false;
}

/* Room to add owner to block id's watchers (bx covers id). */
static int watch_reserve(struct emb_space *es, uint32_t id, uint32_t owner)
{
	struct emb_blk *b = &es->bx[id];
	uint32_t *w, cap;

	if (b->nwatch < b->cwatch || watching(b, owner))
		return 0;
	cap = b->cwatch ? b->cwatch * 2 : 2;
	w = realloc(b->watch, cap * sizeof(*w));
	if (!w)
		return -ENOMEM;
	b->watch = w;
	b->cwatch = cap;
	return 0;
}

/* After watch_reserve(): cannot fail. */
static void watch_add(struct emb_space *es, uint32_t id, uint32_t owner)
{
	struct emb_blk *b = &es->bx[id];

	if (!watching(b, owner) && b->nwatch < b->cwatch)
		b->watch[b->nwatch++] = owner;
}

/* The block became free or was evicted: its records and watchers go. */
static void blk_forget(struct emb_space *es, uint32_t id)
{
	if (id < es->nbx) {
		es->bx[id].nrec = 0;
		es->bx[id].nwatch = 0;
	}
}

static int rec_find(const struct emb_blk *b, uint32_t owner, uint32_t slot)
{
	for (uint32_t i = 0; i < b->nrec; i++)
		if (b->rec[i].owner == owner && b->rec[i].slot == slot)
			return (int)i;
	return -1;
}

static void rec_remove(struct emb_blk *b, uint32_t i)
{
	b->rec[i] = b->rec[--b->nrec];
}

static uint64_t rec_mask(const struct emb_space *es, uint32_t id)
{
	uint64_t mask = 0;

	if (id < es->nbx)
		for (uint32_t i = 0; i < es->bx[id].nrec; i++)
			mask |= 1ULL << es->bx[id].rec[i].slot;
	return mask;
}

/* kvcore, inside kvc_alloc: a cached block is evicted. */
static void emb_evicted(struct kvc_space *core, kvc_u32 id, const kvc_u8 *hash,
			unsigned int cause)
{
	struct emb_space *es = core->host;
	struct kvrt_event e = { .type = KVRT_EVENT_EVICTED, .cause = cause, .block = id };

	memcpy(e.hash, hash, KVRT_HASH_BYTES);
	if (id < es->nbx)
		for (uint32_t i = 0; i < es->bx[id].nwatch; i++) {
			struct emb_part *s = emb_session(es, es->bx[id].watch[i]);

			if (s)
				ev_push(s, &e);
		}
	blk_forget(es, id);
}

/* ---- joining and leaving -------------------------------------------------------- */

static int emb_join(struct kvrt *k, const struct kvrt_space_opts *o, struct emb_part *s)
{
	struct emb_space *es;
	int ret = 0;

	/* As the module (API 4): create fields are checked for a join too. */
	if (o->flags & KVRT_SPACE_CREATE) {
		ret = kvrt_create_args_valid(o, k->page_size, k->node_mask);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&k->lock);
	es = emb_find(k, o->name);
	if (es) {
		if ((o->flags & KVRT_SPACE_CREATE) && (o->flags & KVRT_SPACE_EXCL)) {
			ret = -EEXIST;
			goto out_unlock;
		}
		/* As the module: join only the owner the caller accepts. */
		if (!emb_owner_accepted(es, o)) {
			ret = (o->flags & KVRT_SPACE_CREATE) ? -EEXIST : -EACCES;
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
		s->space.created = 0;
	} else {
		if (!(o->flags & KVRT_SPACE_CREATE)) {
			ret = -ENOENT;
			goto out_unlock;
		}
		ret = emb_create(k, o, &es);
		if (ret)
			goto out_unlock;
		es->persist = !!(o->flags & KVRT_SPACE_PERSIST);
		es->linked = true;
		es->next = k->emb_spaces;
		k->emb_spaces = es;
		s->space.created = 1;
	}
	es->refs++;
	s->es = es;
	s->owner = es->next_owner++;
	s->space.base = es->base;
	s->space.block_bytes = es->core.block_bytes;
	s->space.nr_blocks = es->core.nr_blocks;
	s->space.map_bytes = es->core.nr_blocks * es->core.block_bytes;
	pthread_mutex_unlock(&k->lock);

	/* Join the participants; a destroy that came in between is told. */
	pthread_mutex_lock(&es->lock);
	s->snext = es->sessions;
	if (es->sessions)
		es->sessions->sprev = s;
	es->sessions = s;
	if (es->destroyed)
		ev_push(s, &(struct kvrt_event){ .type = KVRT_EVENT_SPACE_DESTROYED });
	pthread_mutex_unlock(&es->lock);
	return 0;

out_unlock:
	pthread_mutex_unlock(&k->lock);
	return ret;
}

static int emb_space_open(struct kvrt *k, const struct kvrt_space_opts *o,
			  struct kvrt_space **out)
{
	struct emb_part *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->space.k = k;
	s->ev.efd = -1;
	ret = emb_join(k, o, s);
	if (ret) {
		free(s);
		return ret;
	}
	*out = &s->space;
	return 0;
}

static void dev_unregister(struct emb_space *es, struct emb_part *s, uint32_t slot);

static void emb_space_close(struct kvrt_space *space)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	struct kvrt *k = s->space.k;

	pthread_mutex_lock(&es->lock);
	/* References first (published blocks may become cached), then blocks. */
	kvc_release_refs(&es->core, &s->refs);
	kvc_release_owner(&es->core, s->owner);
	for (uint64_t id = 0; id < es->nbx; id++) {
		struct emb_blk *b = &es->bx[id];

		for (uint32_t i = 0; i < b->nrec;)
			if (b->rec[i].owner == s->owner)
				rec_remove(b, i);
			else
				i++;
		for (uint32_t i = 0; i < b->nwatch; i++)
			if (b->watch[i] == s->owner) {
				b->watch[i] = b->watch[--b->nwatch];
				break;
			}
	}
	for (uint32_t slot = 0; slot < KVRT_MAX_DEVICES; slot++)
		dev_unregister(es, s, slot);
	if (s->sprev)
		s->sprev->snext = s->snext;
	else
		es->sessions = s->snext;
	if (s->snext)
		s->snext->sprev = s->sprev;
	pthread_mutex_unlock(&es->lock);

	free(s->ev.ring);
	if (s->ev.efd >= 0)
		close(s->ev.efd);
	emb_put(k, es);
	free(s);
}

/* kvrt_close(): the persistent spaces left in the namespace (none is joined). */
static void emb_close(struct kvrt *k)
{
	struct emb_space *es;

	pthread_mutex_lock(&k->lock);
	es = k->emb_spaces;
	k->emb_spaces = NULL;
	pthread_mutex_unlock(&k->lock);
	while (es) {
		struct emb_space *next = es->next;

		emb_destroy(es);
		es = next;
	}
}

static int emb_space_destroy(struct kvrt *k, const char *name)
{
	struct emb_space *es, **pp;
	uid_t euid = geteuid();

	pthread_mutex_lock(&k->lock);
	es = emb_find(k, name);
	if (!es) {
		pthread_mutex_unlock(&k->lock);
		return -ENOENT;
	}
	if (euid != 0 && euid != es->uid) {
		pthread_mutex_unlock(&k->lock);
		return -EPERM;
	}
	for (pp = &k->emb_spaces; *pp != es; pp = &(*pp)->next)
		;
	*pp = es->next;
	es->linked = false;
	es->persist = false;
	if (!es->refs) {
		pthread_mutex_unlock(&k->lock);
		emb_destroy(es);
		return 0;
	}
	es->refs++;	/* keeps it while the participants are told */
	pthread_mutex_unlock(&k->lock);

	pthread_mutex_lock(&es->lock);
	es->destroyed = true;
	ev_broadcast(es, &(struct kvrt_event){ .type = KVRT_EVENT_SPACE_DESTROYED });
	pthread_mutex_unlock(&es->lock);
	emb_put(k, es);
	return 0;
}

static int emb_space_info(struct kvrt_space *space, struct kvrt_space_info *info)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;

	info->space_id = es->id;
	info->created = s->space.created;
	info->uid = es->uid;
	info->gid = es->gid;
	info->mode = es->mode;
	info->numa_policy = (enum kvrt_numa_policy)es->policy;
	info->node_mask = es->node_mask;
	pthread_mutex_lock(&es->lock);
	info->block_bytes = es->core.block_bytes;
	info->nr_blocks = es->core.nr_blocks;
	info->map_bytes = s->space.map_bytes;
	info->backed_blocks = es->core.backed_blocks;
	info->free_blocks = es->core.nr_free;
	info->owned_blocks = es->core.nr_owned;
	info->my_blocks = kvc_owner_blocks(&es->core, s->owner);
	info->backed_bytes = es->core.backed_bytes;
	pthread_mutex_unlock(&es->lock);
	return 0;
}

/* ---- blocks ---------------------------------------------------------------------- */

static uint64_t emb_evictions(const struct kvc_space *c)
{
	uint64_t n = 0;

	for (int i = 0; i < KVC_EVICT_CAUSES; i++)
		n += c->stats.evictions[i];
	return n;
}

/*
 * As the module's ALLOC: an allocation that evicted (after the EVICTED
 * events, sent from the callback) or found no room tells every participant,
 * with the cause kvcore found.
 */
static int emb_alloc(struct kvrt_space *space, uint32_t count, uint32_t *ids)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	struct kvrt_event e = { .type = KVRT_EVENT_QUOTA_PRESSURE };
	uint64_t evicted;
	int ret;

	pthread_mutex_lock(&es->lock);
	evicted = emb_evictions(&es->core);
	ret = kvc_alloc(&es->core, s->owner, count, ids);
	evicted = emb_evictions(&es->core) - evicted;
	if (evicted || ret == -ENOSPC) {
		e.cause = (uint32_t)es->core.stats.last_pressure_cause;
		e.count = (uint32_t)evicted;
		ev_broadcast(es, &e);
	}
	pthread_mutex_unlock(&es->lock);
	return ret;
}

static int emb_free(struct kvrt_space *space, uint32_t count, const uint32_t *ids)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	ret = kvc_free(&es->core, s->owner, count, ids);
	if (!ret)
		for (uint32_t i = 0; i < count; i++)
			blk_forget(es, ids[i]);
	pthread_mutex_unlock(&es->lock);
	return ret;
}

/* ---- prefix cache ------------------------------------------------------------------ */

static int emb_publish(struct kvrt_space *space, uint32_t count, uint32_t *ids,
		       const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio, uint32_t *flags)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	struct kvc_publish_entry *e;
	int ret = 0;

	/* The ioctl's entry checks, before kvcore sees the batch. */
	for (uint32_t i = 0; prio && i < count; i++)
		if (prio[i] > KVRT_PRIO_MAX)
			return -EINVAL;
	e = calloc(count, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		memcpy(e[i].hash, hashes[i], KVRT_HASH_BYTES);
		e[i].id = ids[i];
		e[i].priority = prio ? prio[i] : KVRT_PRIO_DEFAULT;
	}

	pthread_mutex_lock(&es->lock);
	/* Each entry ends on its own block or on the one found (earlier in the batch or not). */
	ret = bx_cover(es, es->core.backed_blocks);
	for (uint32_t i = 0; !ret && i < count; i++) {
		uint32_t found = kvc_find(&es->core, e[i].hash);

		if (e[i].id < es->core.backed_blocks)
			ret = watch_reserve(es, e[i].id, s->owner);
		if (!ret && found != KVC_NONE)
			ret = watch_reserve(es, found, s->owner);
	}
	if (!ret)
		ret = kvc_publish(&es->core, s->owner, &s->refs, count, e);
	if (ret >= 0)
		for (uint32_t i = 0; i < count; i++) {
			if (e[i].flags & KVC_PUBLISH_DEDUP)
				blk_forget(es, ids[i]);	/* the caller's block was freed */
			watch_add(es, e[i].id, s->owner);
		}
	pthread_mutex_unlock(&es->lock);

	if (ret >= 0)
		for (uint32_t i = 0; i < count; i++) {
			ids[i] = e[i].id;
			if (flags)
				flags[i] = e[i].flags & KVC_PUBLISH_DEDUP ? KVRT_PUBLISHED_DEDUP : 0;
		}
	free(e);
	return ret;
}

static int emb_lookup(struct kvrt_space *space, uint32_t count,
		      const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint64_t *devices)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	uint32_t small[64], *got = small;
	int ret;

	/*
	 * kvc_lookup also writes the slot after the last hit (and the hits
	 * when it fails): the caller's ids[] only gets the hits.
	 */
	if (count > sizeof(small) / sizeof(small[0])) {
		got = malloc((size_t)count * sizeof(*got));
		if (!got)
			return -ENOMEM;
	}
	pthread_mutex_lock(&es->lock);
	ret = bx_cover(es, es->core.backed_blocks);
	for (uint32_t i = 0; !ret && i < count; i++) {
		uint32_t found = kvc_find(&es->core, hashes[i]);

		if (found == KVC_NONE)
			break;
		ret = watch_reserve(es, found, s->owner);
	}
	if (!ret)
		ret = kvc_lookup(&es->core, &s->refs, count, hashes, got);
	for (int i = 0; i < ret; i++) {
		watch_add(es, got[i], s->owner);
		ids[i] = got[i];
		if (devices)
			devices[i] = rec_mask(es, got[i]);
	}
	pthread_mutex_unlock(&es->lock);
	if (got != small)
		free(got);
	return ret;
}

static int emb_release(struct kvrt_space *space, uint32_t count, const uint32_t *ids)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	ret = kvc_release(&es->core, &s->refs, count, ids);
	pthread_mutex_unlock(&es->lock);
	return ret;
}

static int emb_space_stats(struct kvrt_space *space, struct kvrt_space_stats *st)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	const struct kvc_space_stats *c = &es->core.stats;

	st->space_id = es->id;
	pthread_mutex_lock(&es->lock);
	st->hits = c->hits;
	st->misses = c->misses;
	st->inserts = c->inserts;
	st->dedups = c->dedups;
	for (int i = 0; i < KVRT_EVICT_CAUSES; i++)
		st->evictions[i] = c->evictions[i];
	st->pressure = c->pressure;
	st->published_blocks = es->core.nr_published;
	st->cached_blocks = es->core.nr_cached;
	st->hole_blocks = es->core.nr_holes;
	st->readers = es->core.nr_readers;
	st->my_refs = s->refs.total;
	st->allocs = c->allocs;
	st->frees = c->frees;
	pthread_mutex_unlock(&es->lock);
	return 0;
}

/*
 * The device table as the module keeps it: a slot holds a device while a
 * participant has it registered (a successful add registers it; clear and
 * close unregister), and is free for another device once none has.
 */
static int dev_slot(const struct emb_space *es, const uint8_t *uuid)
{
	for (uint32_t i = 0; i < KVRT_MAX_DEVICES; i++)
		if ((es->dev_used & (1ULL << i)) && !memcmp(es->dev[i], uuid, KVRT_UUID_BYTES))
			return (int)i;
	return -1;
}

static void dev_register(struct emb_space *es, struct emb_part *s, uint32_t slot,
			 const uint8_t *uuid)
{
	if (!(es->dev_used & (1ULL << slot))) {
		memcpy(es->dev[slot], uuid, KVRT_UUID_BYTES);
		es->dev_used |= 1ULL << slot;
	}
	if (!(s->res_slots & (1ULL << slot))) {
		s->res_slots |= 1ULL << slot;
		es->dev_fds[slot]++;
	}
}

static void dev_unregister(struct emb_space *es, struct emb_part *s, uint32_t slot)
{
	if (!(s->res_slots & (1ULL << slot)))
		return;
	s->res_slots &= ~(1ULL << slot);
	if (--es->dev_fds[slot])
		return;
	es->dev_used &= ~(1ULL << slot);
	memset(es->dev[slot], 0, KVRT_UUID_BYTES);
}

/*
 * Residency add, under es->lock, in the module's order: entry by entry the
 * block (-EINVAL, -EPERM), then a slot for a new device (-ENOSPC), then
 * room for every new record, and only then any change: a failed call
 * registers no device.
 */
static int emb_res_add(struct emb_part *s, const uint8_t *uuid, uint32_t count,
		       const struct kvrt_residency_entry *en)
{
	struct emb_space *es = s->es;
	const struct kvc_space *c = &es->core;
	int slot = dev_slot(es, uuid), ret;
	uint32_t want;

	for (uint32_t i = 0; i < count; i++) {
		const struct kvc_block *b;

		if (en[i].block >= c->backed_blocks)
			return -EINVAL;
		b = &c->blocks[en[i].block];
		if (!(b->state == KVC_BLOCK_OWNED && b->owner == s->owner) &&
		    !kvc_refs_count(&s->refs, en[i].block))
			return -EPERM;
	}
	if (slot < 0 && es->dev_used == ~0ULL)
		return -ENOSPC;
	want = slot < 0 ? (uint32_t)__builtin_ctzll(~es->dev_used) : (uint32_t)slot;
	ret = bx_cover(es, c->backed_blocks);
	if (ret)
		return ret;
	/* Room for every record that is new: count them per block, then grow. */
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];

		if (slot < 0 || rec_find(b, s->owner, want) < 0)
			b->pending++;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];
		struct emb_rec *r;
		uint64_t cap = b->crec;

		if (!b->pending || ret)
			goto next;
		while (cap < (uint64_t)b->nrec + b->pending)
			cap = cap ? cap * 2 : 2;
		if (cap > b->crec) {
			r = cap <= UINT32_MAX ? realloc(b->rec, cap * sizeof(*r)) : NULL;
			if (!r) {
				ret = -ENOMEM;
				goto next;
			}
			b->rec = r;
			b->crec = (uint32_t)cap;
		}
next:
		b->pending = 0;
	}
	if (ret)
		return ret;
	slot = (int)want;
	dev_register(es, s, want, uuid);
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];
		int r = rec_find(b, s->owner, (uint32_t)slot);

		if (r >= 0)
			b->rec[r].gpu_block = en[i].gpu_block;
		else
			b->rec[b->nrec++] = (struct emb_rec){ .owner = s->owner,
							      .slot = (uint32_t)slot,
							      .gpu_block = en[i].gpu_block };
	}
	return slot;
}

static int emb_res_del(struct emb_part *s, const uint8_t *uuid, uint32_t count,
		       const struct kvrt_residency_entry *en)
{
	struct emb_space *es = s->es;
	int slot = dev_slot(es, uuid);

	if (slot < 0)
		return -ENOENT;
	for (uint32_t i = 0; i < count; i++) {
		if (en[i].block >= es->core.backed_blocks)
			return -EINVAL;
		if (en[i].block >= es->nbx ||
		    rec_find(&es->bx[en[i].block], s->owner, (uint32_t)slot) < 0)
			return -ENOENT;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];
		int r = rec_find(b, s->owner, (uint32_t)slot);

		if (r >= 0)	/* a block listed twice went the first time */
			rec_remove(b, (uint32_t)r);
	}
	return slot;
}

static int emb_res_clear(struct emb_part *s, const uint8_t *uuid)
{
	struct emb_space *es = s->es;
	int slot = dev_slot(es, uuid);

	if (slot < 0)
		return -ENOENT;
	for (uint64_t id = 0; id < es->nbx; id++) {
		int r = rec_find(&es->bx[id], s->owner, (uint32_t)slot);

		if (r >= 0)
			rec_remove(&es->bx[id], (uint32_t)r);
	}
	/* This participant is done with the device: its registration goes too. */
	dev_unregister(es, s, (uint32_t)slot);
	return slot;
}

static int emb_residency(struct kvrt_space *space, uint32_t op, const uint8_t *uuid, uint32_t count,
			 const struct kvrt_residency_entry *entries)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	switch (op) {
	case KVPOOL_RESIDENCY_ADD:
		ret = emb_res_add(s, uuid, count, entries);
		break;
	case KVPOOL_RESIDENCY_DEL:
		ret = emb_res_del(s, uuid, count, entries);
		break;
	case KVPOOL_RESIDENCY_CLEAR:
		ret = count ? -EINVAL : emb_res_clear(s, uuid);
		break;
	default:
		ret = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&es->lock);
	return ret;
}

static int emb_events_fd(struct kvrt_space *space)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	if (s->ev.efd < 0) {
		s->ev.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (s->ev.efd < 0) {
			ret = -errno;
			goto out_unlock;
		}
		s->ev.signalled = false;
		ev_signal(&s->ev);
	}
	ret = s->ev.efd;
out_unlock:
	pthread_mutex_unlock(&es->lock);
	return ret;
}

static int emb_read_events(struct kvrt_space *space, struct kvrt_event *ev, uint32_t max)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	struct emb_events *q = &s->ev;
	uint32_t n = 0;

	pthread_mutex_lock(&es->lock);
	while (n < max) {
		if (!q->len) {
			ev_flush_lost(q);	/* room now: the OVERFLOW comes next */
			if (!q->len)
				break;
		}
		ev[n++] = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->len--;
	}
	ev_flush_lost(q);
	ev_signal(q);
	pthread_mutex_unlock(&es->lock);
	return (int)n;
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

static int emb_mem_info(struct kvrt_space *space, struct kvrt_mem_info *m)
{
	struct emb_part *s = to_emb(space);
	struct emb_space *es = s->es;
	struct kvrt *k = s->space.k;
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

const struct kvrt_backend_ops kvrt_embedded_ops = {
	.backend = KVRT_BACKEND_EMBEDDED,
	.probe = emb_probe,
	.close = emb_close,
	.pool_info = emb_pool_info,
	.space_open = emb_space_open,
	.space_close = emb_space_close,
	.space_info = emb_space_info,
	.mem_info = emb_mem_info,
	.space_destroy = emb_space_destroy,
	.alloc = emb_alloc,
	.free = emb_free,
	.publish = emb_publish,
	.lookup = emb_lookup,
	.release = emb_release,
	.space_stats = emb_space_stats,
	.residency = emb_residency,
	.events_fd = emb_events_fd,
	.read_events = emb_read_events,
};
