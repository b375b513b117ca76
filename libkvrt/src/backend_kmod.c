// SPDX-License-Identifier: MIT
/*
 * backend_kmod.c: spaces on kvpool.ko.  The handle keeps one descriptor of
 * the device for KVPOOL_IOC_INFO; each struct kvrt_space opens its own
 * descriptor (a descriptor joins one space), joins with
 * KVPOOL_IOC_SPACE_OPEN and maps the whole range with MAP_SHARED.  Every
 * errno is the module's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

_Static_assert(KVRT_SPACE_CREATE == KVPOOL_SPACE_CREATE, "flag values are the uAPI's");
_Static_assert(KVRT_SPACE_EXCL == KVPOOL_SPACE_EXCL, "flag values are the uAPI's");
_Static_assert((int)KVRT_NUMA_PREFERRED == (int)KVPOOL_NUMA_PREFERRED &&
	       (int)KVRT_NUMA_BIND == (int)KVPOOL_NUMA_BIND &&
	       (int)KVRT_NUMA_INTERLEAVE == (int)KVPOOL_NUMA_INTERLEAVE, "policies are the uAPI's");
_Static_assert(KVRT_NAME_MAX == KVPOOL_NAME_MAX && KVRT_MAX_BATCH == KVPOOL_MAX_BATCH &&
	       KVRT_MAX_BLOCK_BYTES == KVPOOL_MAX_BLOCK_BYTES &&
	       KVRT_MAX_SPACE_BYTES == KVPOOL_MAX_SPACE_BYTES, "limits are the uAPI's");

static int kmod_info(int fd, struct kvpool_info *info)
{
	memset(info, 0, sizeof(*info));
	if (ioctl(fd, KVPOOL_IOC_INFO, info))
		return -errno;
	return 0;
}

/*
 * Open the device and check it is kvpool.  On failure k->info says
 * "DEVICE: reason" and the return is -ENODEV (absent, or not kvpool), or
 * the open errno when it exists but may not be opened.
 */
int kmod_probe(struct kvrt *k, const char *device)
{
	struct kvpool_info info;
	int fd, ret;

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
	if (info.api_version != KVPOOL_API_VERSION || !(info.features & KVPOOL_FEAT_SPACES)) {
		snprintf(k->info, sizeof(k->info),
			 "%s: api_version %u features %#llx, libkvrt needs api %u with spaces",
			 device, info.api_version, (unsigned long long)info.features,
			 KVPOOL_API_VERSION);
		close(fd);
		return -ENODEV;
	}
	k->ctl_fd = fd;
	snprintf(k->info, sizeof(k->info), "kmod: %s (api %u)", device, info.api_version);
	return 0;
}

void kmod_close(struct kvrt *k)
{
	if (k->ctl_fd >= 0)
		close(k->ctl_fd);
	k->ctl_fd = -1;
}

int kmod_pool_info(struct kvrt *k, struct kvrt_pool_info *out)
{
	struct kvpool_info info;
	int ret = kmod_info(k->ctl_fd, &info);

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

int kmod_space_open(struct kvrt *k, const struct kvrt_space_opts *o, struct kvrt_space *s)
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

	s->fd = open(k->device, O_RDWR | O_CLOEXEC);
	if (s->fd < 0)
		return -errno;
	if (ioctl(s->fd, KVPOOL_IOC_SPACE_OPEN, so)) {
		ret = -errno;
		goto out_close;
	}
	base = mmap(NULL, so->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		kvrt_log(k, KVRT_LOG_ERR, "space \"%s\": mmap of %llu bytes: %s", o->name,
			 (unsigned long long)so->map_bytes, strerror(errno));
		goto out_close;
	}
	s->base = base;
	s->block_bytes = so->block_bytes;
	s->nr_blocks = so->nr_blocks;
	s->map_bytes = so->map_bytes;
	s->created = so->created;
	return 0;

out_close:
	close(s->fd);
	s->fd = -1;
	return ret;
}

void kmod_space_close(struct kvrt_space *s)
{
	if (s->base)
		munmap(s->base, s->map_bytes);
	/* The module frees the descriptor's blocks when it closes. */
	if (s->fd >= 0)
		close(s->fd);
}

static int kmod_raw_info(struct kvrt_space *s, struct kvpool_space_info *si)
{
	memset(si, 0, sizeof(*si));
	if (ioctl(s->fd, KVPOOL_IOC_SPACE_INFO, si))
		return -errno;
	return 0;
}

int kmod_space_info(struct kvrt_space *s, struct kvrt_space_info *info)
{
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

int kmod_alloc(struct kvrt_space *s, uint32_t count, uint32_t *ids)
{
	struct kvpool_blocks b = { .ids = (uintptr_t)ids, .count = count };

	if (ioctl(s->fd, KVPOOL_IOC_ALLOC, &b))
		return -errno;
	return 0;
}

int kmod_free(struct kvrt_space *s, uint32_t count, const uint32_t *ids)
{
	struct kvpool_blocks b = { .ids = (uintptr_t)ids, .count = count };

	if (ioctl(s->fd, KVPOOL_IOC_FREE, &b))
		return -errno;
	return 0;
}

int kmod_mem_info(struct kvrt_space *s, struct kvrt_mem_info *m)
{
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
