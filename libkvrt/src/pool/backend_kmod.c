// SPDX-License-Identifier: MIT
/*
 * backend_kmod.c: spaces on kvpool.ko.  The handle keeps one descriptor of
 * the device for KVPOOL_IOC_INFO; each struct kmod_space opens its own
 * descriptor (a descriptor joins one space), joins with
 * KVPOOL_IOC_SPACE_OPEN and maps the whole range with MAP_SHARED; that
 * descriptor also holds the handle's reader references and residency
 * records, and is its event stream.  Every errno is the module's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "pool/backend.h"

_Static_assert(KVRT_SPACE_CREATE == KVPOOL_SPACE_CREATE, "flag values are the uAPI's");
_Static_assert(KVRT_SPACE_EXCL == KVPOOL_SPACE_EXCL, "flag values are the uAPI's");
_Static_assert((int)KVRT_NUMA_PREFERRED == (int)KVPOOL_NUMA_PREFERRED &&
	       (int)KVRT_NUMA_BIND == (int)KVPOOL_NUMA_BIND &&
	       (int)KVRT_NUMA_INTERLEAVE == (int)KVPOOL_NUMA_INTERLEAVE, "policies are the uAPI's");
_Static_assert(KVRT_NAME_MAX == KVPOOL_NAME_MAX && KVRT_MAX_BATCH == KVPOOL_MAX_BATCH &&
	       KVRT_MAX_BLOCK_BYTES == KVPOOL_MAX_BLOCK_BYTES &&
	       KVRT_MAX_SPACE_BYTES == KVPOOL_MAX_SPACE_BYTES, "limits are the uAPI's");
_Static_assert(KVRT_SPACE_PERSIST == KVPOOL_SPACE_PERSIST, "flag values are the uAPI's");
_Static_assert(KVRT_SPACE_FOREIGN == KVPOOL_SPACE_FOREIGN, "flag values are the uAPI's");
_Static_assert(KVRT_FEAT_SPACES == KVPOOL_FEAT_SPACES && KVRT_FEAT_NUMA == KVPOOL_FEAT_NUMA &&
	       KVRT_FEAT_PREFIX == KVPOOL_FEAT_PREFIX && KVRT_FEAT_PERSIST == KVPOOL_FEAT_PERSIST &&
	       KVRT_FEAT_RESIDENCY == KVPOOL_FEAT_RESIDENCY &&
	       KVRT_FEAT_EVENTS == KVPOOL_FEAT_EVENTS && KVRT_FEAT_RECLAIM == KVPOOL_FEAT_RECLAIM,
	       "feature bits are the uAPI's");
_Static_assert(KVRT_HASH_BYTES == KVPOOL_HASH_BYTES && KVRT_PRIO_MAX == KVPOOL_PRIO_MAX &&
	       KVRT_PRIO_DEFAULT == KVPOOL_PRIO_DEFAULT &&
	       KVRT_PUBLISHED_DEDUP == KVPOOL_PUBLISHED_DEDUP &&
	       KVRT_MAX_DEVICES == KVPOOL_MAX_DEVICES, "prefix cache constants are the uAPI's");
_Static_assert((int)KVRT_EVICT_QUOTA == (int)KVPOOL_EVICT_QUOTA &&
	       (int)KVRT_EVICT_POOL == (int)KVPOOL_EVICT_POOL &&
	       (int)KVRT_EVICT_TENANT == (int)KVPOOL_EVICT_TENANT &&
	       (int)KVRT_EVICT_RECLAIM == (int)KVPOOL_EVICT_RECLAIM &&
	       (int)KVRT_EVICT_ADMIN == (int)KVPOOL_EVICT_ADMIN &&
	       (int)KVRT_EVICT_CAUSES == (int)KVPOOL_EVICT_CAUSES, "causes are the uAPI's");
_Static_assert((int)KVRT_EVENT_EVICTED == (int)KVPOOL_EVENT_EVICTED &&
	       (int)KVRT_EVENT_SPACE_DESTROYED == (int)KVPOOL_EVENT_SPACE_DESTROYED &&
	       (int)KVRT_EVENT_QUOTA_PRESSURE == (int)KVPOOL_EVENT_QUOTA_PRESSURE &&
	       (int)KVRT_EVENT_OVERFLOW == (int)KVPOOL_EVENT_OVERFLOW, "event types are the uAPI's");
/* Events are read straight into the caller's array. */
_Static_assert(sizeof(struct kvrt_event) == sizeof(struct kvpool_event) &&
	       offsetof(struct kvrt_event, seq) == offsetof(struct kvpool_event, seq) &&
	       offsetof(struct kvrt_event, type) == offsetof(struct kvpool_event, type) &&
	       offsetof(struct kvrt_event, cause) == offsetof(struct kvpool_event, cause) &&
	       offsetof(struct kvrt_event, block) == offsetof(struct kvpool_event, block) &&
	       offsetof(struct kvrt_event, count) == offsetof(struct kvpool_event, count) &&
	       offsetof(struct kvrt_event, hash) == offsetof(struct kvpool_event, hash),
	       "struct kvrt_event is struct kvpool_event");
/* libkvrt's entry is the 8-byte one of API 1..3; API 4 added a reserved word. */
_Static_assert(sizeof(struct kvrt_residency_entry) ==
	       sizeof(struct kvpool_residency_entry_api3) &&
	       offsetof(struct kvrt_residency_entry, block) ==
	       offsetof(struct kvpool_residency_entry_api3, block) &&
	       offsetof(struct kvrt_residency_entry, gpu_block) ==
	       offsetof(struct kvpool_residency_entry_api3, gpu_block) &&
	       offsetof(struct kvpool_residency_entry, block) ==
	       offsetof(struct kvpool_residency_entry_api3, block) &&
	       offsetof(struct kvpool_residency_entry, gpu_block) ==
	       offsetof(struct kvpool_residency_entry_api3, gpu_block),
	       "residency entries are the uAPI's");

/* The handle's part (k->pool): the descriptor for INFO and SPACE_DESTROY. */
struct kmod_pool {
	int ctl_fd;
	uint32_t api_version;	/* the module's KVPOOL_API_VERSION */
};

static struct kmod_pool *kmod_pool_of(const struct kvrt *k)
{
	return k->pool;
}

/* A space handle: its own descriptor, joined to one space. */
struct kmod_space {
	struct kvrt_space space;
	int fd;
	struct kvpool_space_open so;	/* what SPACE_OPEN returned */
	pthread_mutex_t ev_lock;	/* event reads */
};

static struct kmod_space *to_kmod(struct kvrt_space *space)
{
	return kvrt_container_of(space, struct kmod_space, space);
}

/* Every call returns the module's errno as libkvrt's. */
static int kmod_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static int kmod_info(int fd, struct kvpool_info *info)
{
	memset(info, 0, sizeof(*info));
	return kmod_ioctl(fd, KVPOOL_IOC_INFO, info);
}

/*
 * Open the device and check it is kvpool.  On failure k->info says
 * "DEVICE: reason" and the return is -ENODEV (absent, or not kvpool), or
 * the open errno when it exists but may not be opened.
 */
static int kmod_probe(struct kvrt *k, const struct kvrt_open_opts *o, const char *device)
{
	struct kmod_pool *pool;
	struct kvpool_info info;
	int fd, ret;

	(void)o;	/* the module's own settings rule it */

	fd = open(device, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(k->info, sizeof(k->info), "%s: %s", device, strerror(-ret));
		if (ret == -ENOENT || ret == -ENODEV || ret == -ENXIO || ret == -ENOTDIR)
			ret = -ENODEV;
		return ret;
	}
	ret = kmod_info(fd, &info);
	if (ret) {
		snprintf(k->info, sizeof(k->info), "%s: KVPOOL_IOC_INFO: %s (not kvpool)", device,
			 strerror(-ret));
		close(fd);
		return -ENODEV;
	}
	/*
	 * API 2 only added ioctls and flags: an API 1 module serves spaces,
	 * and the calls whose feature bit it lacks return -EOPNOTSUPP.  API 3
	 * added the owner check on join, which kmod_space_open() makes itself
	 * for older modules.  API 4 refuses out fields on input and create
	 * fields on a plain join (libkvrt passes neither), checks create
	 * fields on a create-or-join that joins (kmod_space_open() does that
	 * for older modules), renumbered ALLOC and grew residency entries:
	 * kmod_alloc() and kmod_residency() speak either version.
	 */
	if (info.api_version < 1 || info.api_version > KVPOOL_API_VERSION ||
	    !(info.features & KVPOOL_FEAT_SPACES)) {
		snprintf(k->info, sizeof(k->info),
			 "%s: api_version %u features %#llx, libkvrt needs api 1..%u with spaces",
			 device, info.api_version, (unsigned long long)info.features,
			 KVPOOL_API_VERSION);
		close(fd);
		return -ENODEV;
	}
	pool = malloc(sizeof(*pool));
	if (!pool) {
		close(fd);
		return -ENOMEM;
	}
	pool->ctl_fd = fd;
	pool->api_version = info.api_version;
	k->pool = pool;
	k->features = info.features;
	snprintf(k->info, sizeof(k->info), "kmod: %s (api %u)", device, info.api_version);
	return 0;
}

static void kmod_close(struct kvrt *k)
{
	close(kmod_pool_of(k)->ctl_fd);
	free(k->pool);
	k->pool = NULL;
}

static int kmod_pool_info(struct kvrt *k, struct kvrt_pool_info *out)
{
	struct kvpool_info info;
	int ret = kmod_info(kmod_pool_of(k)->ctl_fd, &info);

	if (ret)
		return ret;
	out->api_version = info.api_version;
	out->features = info.features;
	out->page_size = info.page_size;
	out->chunk_size = info.chunk_size;
	out->nr_nodes = info.nr_nodes;
	out->max_batch = info.max_batch;
	out->node_mask = info.node_mask;
	out->pool_bytes = info.pool_bytes;
	out->free_bytes = info.free_bytes;
	out->used_bytes = info.pool_bytes - info.free_bytes;
	return 0;
}

static int kmod_join(struct kvrt *k, const struct kvrt_space_opts *o, struct kmod_space *s)
{
	struct kvpool_space_open *so = &s->so;
	void *base;
	int ret;

	memset(so, 0, sizeof(*so));
	snprintf(so->name, sizeof(so->name), "%s", o->name);
	so->flags = o->flags;
	so->mode = o->mode;
	so->block_bytes = o->block_bytes;
	so->quota_bytes = o->quota_bytes;
	so->node_mask = o->node_mask;
	so->numa_policy = (uint32_t)o->numa_policy;
	so->expect_uid = o->expect_uid;
	/* Before API 3 the module neither knows FOREIGN nor checks owners: we do. */
	if (kmod_pool_of(k)->api_version < 3) {
		so->flags &= ~KVPOOL_SPACE_FOREIGN;
		so->expect_uid = 0;
	}
	/* Before API 4 a create-or-join that joins ignored bad create fields. */
	if (kmod_pool_of(k)->api_version < 4 && (o->flags & KVRT_SPACE_CREATE)) {
		struct kvpool_info info;

		ret = kmod_info(kmod_pool_of(k)->ctl_fd, &info);
		if (ret)
			return ret;
		ret = kvrt_create_args_valid(o, info.page_size, info.node_mask);
		if (ret)
			return ret;
	}

	s->fd = open(k->device, O_RDWR | O_CLOEXEC);
	if (s->fd < 0)
		return -errno;
	if (ioctl(s->fd, KVPOOL_IOC_SPACE_OPEN, so)) {
		ret = -errno;
		goto out_close;
	}
	if (kmod_pool_of(k)->api_version < 3 && !so->created &&
	    so->uid != ((o->flags & KVRT_SPACE_FOREIGN) ? o->expect_uid : (uint32_t)geteuid())) {
		/* Closing the fd leaves the space as it was: another fd or PERSIST holds it. */
		ret = (o->flags & KVRT_SPACE_CREATE) ? -EEXIST : -EACCES;
		kvrt_log(k, KVRT_LOG_ERR, "space \"%s\": owned by uid %u, not joined", o->name,
			 so->uid);
		goto out_close;
	}
	base = mmap(NULL, so->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		kvrt_log(k, KVRT_LOG_ERR, "space \"%s\": mmap of %llu bytes: %s", o->name,
			 (unsigned long long)so->map_bytes, strerror(errno));
		goto out_close;
	}
	s->space.base = base;
	s->space.block_bytes = so->block_bytes;
	s->space.nr_blocks = so->nr_blocks;
	s->space.map_bytes = so->map_bytes;
	s->space.created = so->created;
	return 0;

out_close:
	close(s->fd);
	s->fd = -1;
	return ret;
}

static int kmod_space_open(struct kvrt *k, const struct kvrt_space_opts *o,
			   struct kvrt_space **out)
{
	struct kmod_space *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->space.k = k;
	s->fd = -1;
	pthread_mutex_init(&s->ev_lock, NULL);
	ret = kmod_join(k, o, s);
	if (ret) {
		pthread_mutex_destroy(&s->ev_lock);
		free(s);
		return ret;
	}
	*out = &s->space;
	return 0;
}

static void kmod_space_close(struct kvrt_space *space)
{
	struct kmod_space *s = to_kmod(space);

	if (s->space.base)
		munmap(s->space.base, s->space.map_bytes);
	/* The module frees the descriptor's blocks when it closes. */
	if (s->fd >= 0)
		close(s->fd);
	pthread_mutex_destroy(&s->ev_lock);
	free(s);
}

static int kmod_raw_info(struct kmod_space *s, struct kvpool_space_info *si)
{
	memset(si, 0, sizeof(*si));
	return kmod_ioctl(s->fd, KVPOOL_IOC_SPACE_INFO, si);
}

static int kmod_space_info(struct kvrt_space *space, struct kvrt_space_info *info)
{
	struct kmod_space *s = to_kmod(space);
	struct kvpool_space_info si;
	int ret = kmod_raw_info(s, &si);

	if (ret)
		return ret;
	info->space_id = si.space_id;
	info->created = s->so.created;
	info->uid = s->so.uid;
	info->gid = s->so.gid;
	info->mode = s->so.mode;
	info->numa_policy = (enum kvrt_numa_policy)s->so.numa_policy;
	info->node_mask = s->so.node_mask;
	info->block_bytes = si.block_bytes;
	info->nr_blocks = si.nr_blocks;
	info->map_bytes = s->so.map_bytes;
	info->backed_blocks = si.backed_blocks;
	info->free_blocks = si.free_blocks;
	info->owned_blocks = si.owned_blocks;
	info->my_blocks = si.my_blocks;
	info->backed_bytes = si.backed_bytes;
	return 0;
}

/* ALLOC, FREE and RELEASE: one struct kvpool_blocks of ids. */
static int kmod_blocks(struct kvrt_space *space, unsigned long cmd, uint32_t count,
		       const uint32_t *ids)
{
	struct kvpool_blocks b = { .ids = (uintptr_t)ids, .count = count };

	return kmod_ioctl(to_kmod(space)->fd, cmd, &b);
}

static int kmod_alloc(struct kvrt_space *space, uint32_t count, uint32_t *ids)
{
	bool api3 = kmod_pool_of(space->k)->api_version < 4;

	return kmod_blocks(space, api3 ? KVPOOL_IOC_ALLOC_API3 : KVPOOL_IOC_ALLOC, count, ids);
}

static int kmod_free(struct kvrt_space *space, uint32_t count, const uint32_t *ids)
{
	return kmod_blocks(space, KVPOOL_IOC_FREE, count, ids);
}

static int kmod_mem_info(struct kvrt_space *space, struct kvrt_mem_info *m)
{
	struct kmod_space *s = to_kmod(space);
	struct kvpool_space_info si;
	struct kvpool_info pi;
	int ret = kmod_raw_info(s, &si);

	if (ret)
		return ret;
	ret = kmod_info(s->fd, &pi);
	if (ret)
		return ret;
	m->kind = KVRT_MEM_KMOD_POOL;
	m->chunk_bytes = pi.chunk_size;
	m->backed_bytes = si.backed_bytes;
	m->locked_bytes = si.backed_bytes;
	snprintf(m->summary, sizeof(m->summary),
		 "kmod: %llu bytes of kvpool's pinned pool pages (chunks of %u bytes, "
		 "mapped page by page on fault)",
		 (unsigned long long)si.backed_bytes, pi.chunk_size);
	return 0;
}

/* ---- prefix cache ---------------------------------------------------------------- */

static int kmod_publish(struct kvrt_space *space, uint32_t count, uint32_t *ids,
			const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio, uint32_t *flags)
{
	struct kmod_space *s = to_kmod(space);
	struct kvpool_publish_entry *e = calloc(count, sizeof(*e));
	struct kvpool_publish p = { .count = count };
	int ret;

	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		memcpy(e[i].hash, hashes[i], KVPOOL_HASH_BYTES);
		e[i].id = ids[i];
		e[i].priority = prio ? prio[i] : 0;
	}
	p.entries = (uintptr_t)e;
	p.flags = prio ? KVPOOL_PUBLISH_PRIORITY : 0;
	ret = kmod_ioctl(s->fd, KVPOOL_IOC_PUBLISH, &p);
	if (ret)
		goto out_free;
	for (uint32_t i = 0; i < count; i++) {
		ids[i] = e[i].id;
		if (flags)
			flags[i] = e[i].flags;
	}
	ret = (int)p.nr_dedup;
out_free:
	free(e);
	return ret;
}

static int kmod_lookup(struct kvrt_space *space, uint32_t count,
		       const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint64_t *devices)
{
	struct kmod_space *s = to_kmod(space);
	struct kvpool_lookup l = {
		.hashes = (uintptr_t)hashes,
		.ids = (uintptr_t)ids,
		.devices = (uintptr_t)devices,
		.count = count,
	};
	int ret = kmod_ioctl(s->fd, KVPOOL_IOC_LOOKUP, &l);

	return ret ? ret : (int)l.nr_hits;
}

static int kmod_release(struct kvrt_space *space, uint32_t count, const uint32_t *ids)
{
	return kmod_blocks(space, KVPOOL_IOC_RELEASE, count, ids);
}

static int kmod_space_destroy(struct kvrt *k, const char *name)
{
	struct kvpool_space_destroy d;

	memset(&d, 0, sizeof(d));
	snprintf(d.name, sizeof(d.name), "%s", name);
	return kmod_ioctl(kmod_pool_of(k)->ctl_fd, KVPOOL_IOC_SPACE_DESTROY, &d);
}

static int kmod_space_stats(struct kvrt_space *space, struct kvrt_space_stats *st)
{
	struct kmod_space *s = to_kmod(space);
	struct kvpool_space_stats ks;
	int ret;

	memset(&ks, 0, sizeof(ks));
	ret = kmod_ioctl(s->fd, KVPOOL_IOC_SPACE_STATS, &ks);
	if (ret)
		return ret;
	st->space_id = ks.space_id;
	st->hits = ks.hits;
	st->misses = ks.misses;
	st->inserts = ks.inserts;
	st->dedups = ks.dedups;
	for (int c = 0; c < KVRT_EVICT_CAUSES; c++)
		st->evictions[c] = ks.evictions[c];
	st->pressure = ks.pressure;
	st->published_blocks = ks.published_blocks;
	st->cached_blocks = ks.cached_blocks;
	st->hole_blocks = ks.hole_blocks;
	st->readers = ks.readers;
	st->my_refs = ks.my_refs;
	st->allocs = ks.allocs;
	st->frees = ks.frees;
	return 0;
}

static int kmod_residency(struct kvrt_space *space, uint32_t op, const uint8_t *uuid, uint32_t count,
			  const struct kvrt_residency_entry *entries)
{
	struct kmod_space *s = to_kmod(space);
	struct kvpool_residency r = {
		.entries = (uintptr_t)entries,
		.count = count,
		.op = op,
	};
	struct kvpool_residency_entry *e = NULL;
	int ret;

	/* API 4 entries are 16 bytes; older modules take ours as they are. */
	if (kmod_pool_of(s->space.k)->api_version >= 4) {
		r.entry_bytes = sizeof(*e);
		if (count) {
			e = calloc(count, sizeof(*e));
			if (!e)
				return -ENOMEM;
			for (uint32_t i = 0; i < count; i++) {
				e[i].block = entries[i].block;
				e[i].gpu_block = entries[i].gpu_block;
			}
			r.entries = (uintptr_t)e;
		}
	}
	memcpy(r.device_uuid, uuid, sizeof(r.device_uuid));
	ret = ioctl(s->fd, KVPOOL_IOC_RESIDENCY, &r) ? -errno : (int)r.device_slot;
	free(e);
	return ret;
}

static int kmod_events_fd(struct kvrt_space *space)
{
	struct kmod_space *s = to_kmod(space);

	return s->fd;
}

/*
 * The descriptor blocks in read() while nothing is pending, so read only
 * after poll() said POLLIN, under ev_lock so that no other libkvrt reader
 * takes the events in between (callers only poll the descriptor).
 */
static int kmod_read_events(struct kvrt_space *space, struct kvrt_event *ev, uint32_t max)
{
	struct kmod_space *s = to_kmod(space);
	struct pollfd p = { .fd = s->fd, .events = POLLIN };
	ssize_t n;
	int ret;

	pthread_mutex_lock(&s->ev_lock);
	do {
		ret = poll(&p, 1, 0);
	} while (ret < 0 && errno == EINTR);
	if (ret < 0) {
		ret = -errno;
		goto out_unlock;
	}
	if (!ret) {
		ret = 0;
		goto out_unlock;
	}
	if (!(p.revents & POLLIN)) {
		/* POLLERR: the descriptor is no longer joined, read would say so. */
		ret = p.revents & POLLNVAL ? -EBADF : -EBADFD;
		goto out_unlock;
	}
	do {
		n = read(s->fd, ev, (size_t)max * sizeof(*ev));
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		ret = -errno;
	else
		ret = (int)((size_t)n / sizeof(*ev));
out_unlock:
	pthread_mutex_unlock(&s->ev_lock);
	return ret;
}

const struct kvrt_backend_ops kvrt_kmod_ops = {
	.backend = KVRT_BACKEND_KMOD,
	.probe = kmod_probe,
	.close = kmod_close,
	.pool_info = kmod_pool_info,
	.space_open = kmod_space_open,
	.space_close = kmod_space_close,
	.space_info = kmod_space_info,
	.mem_info = kmod_mem_info,
	.space_destroy = kmod_space_destroy,
	.alloc = kmod_alloc,
	.free = kmod_free,
	.publish = kmod_publish,
	.lookup = kmod_lookup,
	.release = kmod_release,
	.space_stats = kmod_space_stats,
	.residency = kmod_residency,
	.events_fd = kmod_events_fd,
	.read_events = kmod_read_events,
};
