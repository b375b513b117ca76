// SPDX-License-Identifier: MIT
/*
 * kvrt.c: the handle, backend choice, and the space and prefix
 * cache calls, which call through the chosen backend's ops table
 * (pool/backend.h): kmod (pool/backend_kmod.c) or embedded
 * (pool/embedded/, its table in emb_space.c).  Arguments that never reach
 * the module (NULL pointers, counts) are checked here, with the errno the
 * module gives for the same mistake, so both backends fail alike.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "pool/backend.h"

#define KVRT_STR2(x) #x
#define KVRT_STR(x) KVRT_STR2(x)

const char *kvrt_version(void)
{
	return KVRT_STR(KVRT_VERSION_MAJOR) "." KVRT_STR(KVRT_VERSION_MINOR) "."
		KVRT_STR(KVRT_VERSION_PATCH);
}

int kvrt_version_number(void)
{
	return KVRT_VERSION_NUMBER;
}

/* kvrt.h's constants are kvrules' (kmod/core/kvrules.h), which checks them. */
_Static_assert(KVRT_NAME_MAX == KVC_NAME_MAX && KVRT_MAX_SPACE_BYTES == KVC_MAX_SPACE_BYTES &&
	       KVRT_MAX_BLOCK_BYTES == KVC_MAX_BLOCK_BYTES, "kvrt.h and kvrules.h disagree");
_Static_assert(KVRT_SPACE_CREATE == KVC_OPEN_CREATE && KVRT_SPACE_EXCL == KVC_OPEN_EXCL &&
	       KVRT_SPACE_PERSIST == KVC_OPEN_PERSIST && KVRT_SPACE_FOREIGN == KVC_OPEN_FOREIGN,
	       "kvrt.h and kvrules.h disagree on open flags");
_Static_assert((int)KVRT_NUMA_BIND == (int)KVC_NUMA_BIND &&
	       (int)KVRT_NUMA_INTERLEAVE == (int)KVC_NUMA_INTERLEAVE,
	       "kvrt.h and kvcore.h disagree on NUMA policies");

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	while (n--)
		if (*c++)
			return false;
	return true;
}

/* opts->backend, else $KVRT_BACKEND; *why says where the choice came from. */
static int choose_backend(const struct kvrt_open_opts *o, enum kvrt_backend *b,
			  const char **why)
{
	const char *env;

	if (o->backend != KVRT_BACKEND_AUTO) {
		if (o->backend != KVRT_BACKEND_KMOD && o->backend != KVRT_BACKEND_EMBEDDED)
			return -EINVAL;
		*b = o->backend;
		*why = "forced by kvrt_open_opts.backend";
		return 0;
	}
	env = getenv("KVRT_BACKEND");
	if (!env || !*env || !strcmp(env, "auto")) {
		*b = KVRT_BACKEND_AUTO;
		*why = NULL;
	} else if (!strcmp(env, "kmod")) {
		*b = KVRT_BACKEND_KMOD;
		*why = "forced by KVRT_BACKEND=kmod";
	} else if (!strcmp(env, "embedded")) {
		*b = KVRT_BACKEND_EMBEDDED;
		*why = "forced by KVRT_BACKEND=embedded";
	} else {
		return -EINVAL;
	}
	return 0;
}

int kvrt_open(struct kvrt **out, const struct kvrt_open_opts *opts)
{
	static const struct kvrt_open_opts defaults;
	const struct kvrt_open_opts *o = opts ? opts : &defaults;
	enum kvrt_backend want;
	const char *why, *device;
	struct kvrt *k;
	long page;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if ((o->flags & ~KVRT_OPEN_FLAGS) || o->reserved0 ||
	    !all_zero(o->reserved, sizeof(o->reserved)))
		return -EINVAL;
	if (o->log_level < 0)
		return -EINVAL;
	ret = choose_backend(o, &want, &why);
	if (ret)
		return ret;
	device = o->device;
	if (!device) {
		device = getenv("KVRT_DEVICE");
		if (!device || !*device)
			device = KVRT_DEFAULT_DEVICE;
	}
	if (strlen(device) >= sizeof(k->device))
		return -ENAMETOOLONG;

	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->flags = o->flags;
	k->log = o->log;
	k->log_arg = o->log_arg;
	k->log_level = o->log_level ? o->log_level : KVRT_LOG_INFO;
	page = sysconf(_SC_PAGESIZE);
	k->page_size = page > 0 ? (uint32_t)page : 4096;
	snprintf(k->device, sizeof(k->device), "%s", device);
	pthread_mutex_init(&k->lock, NULL);
	pthread_mutex_init(&k->qlock, NULL);
	pthread_cond_init(&k->qcond, NULL);

	if (want != KVRT_BACKEND_EMBEDDED) {
		ret = kvrt_kmod_ops.probe(k, o, device);
		if (!ret) {
			k->ops = &kvrt_kmod_ops;
			k->backend = k->ops->backend;
			if (why) {
				size_t n = strlen(k->info);

				snprintf(k->info + n, sizeof(k->info) - n, ", %s", why);
			}
			goto out_opened;
		}
		if (want == KVRT_BACKEND_KMOD) {
			kvrt_log(k, KVRT_LOG_ERR, "kvrt_open: kmod backend %s but %s", why,
				 k->info);
			goto out_free;
		}
		/* k->info holds why kmod is not usable: "DEVICE: reason". */
	} else {
		snprintf(k->info, sizeof(k->info), "%s", why);
	}
	{
		char reason[sizeof(k->info)];

		memcpy(reason, k->info, sizeof(reason));
		snprintf(k->info, sizeof(k->info), "embedded: %.300s", reason);
	}
	ret = kvrt_embedded_ops.probe(k, o, device);
	if (ret)
		goto out_free;
	k->ops = &kvrt_embedded_ops;
	k->backend = k->ops->backend;

out_opened:
	kvrt_log(k, KVRT_LOG_INFO, "libkvrt %s: %s", kvrt_version(), k->info);
	*out = k;
	return 0;

out_free:
	pthread_cond_destroy(&k->qcond);
	pthread_mutex_destroy(&k->qlock);
	pthread_mutex_destroy(&k->lock);
	free(k);
	return ret;
}

void kvrt_close(struct kvrt *k)
{
	if (!k)
		return;
	kvrt_copy_shutdown(k);
	while (k->spaces)
		kvrt_space_close(k->spaces);
	k->ops->close(k);
	pthread_cond_destroy(&k->qcond);
	pthread_mutex_destroy(&k->qlock);
	pthread_mutex_destroy(&k->lock);
	free(k);
}

enum kvrt_backend kvrt_backend(const struct kvrt *k)
{
	return k ? k->backend : KVRT_BACKEND_AUTO;
}

const char *kvrt_backend_info(const struct kvrt *k)
{
	return k ? k->info : "no handle";
}

int kvrt_pool_info(struct kvrt *k, struct kvrt_pool_info *info)
{
	if (!k || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->backend = k->backend;
	return k->ops->pool_info(k, info);
}

/* ---- spaces --------------------------------------------------------------- */

int kvrt_space_open(struct kvrt *k, const struct kvrt_space_opts *o, struct kvrt_space **out)
{
	struct kvrt_space *s;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!k || !o)
		return -EINVAL;
	/* The uAPI's order of checks: flags and reserved fields, then the name. */
	if (kvc_space_open_shape(o->flags, o->expect_uid,
				 o->mode || o->quota_bytes || o->node_mask || o->numa_policy) ||
	    !all_zero(o->reserved, sizeof(o->reserved)))
		return -EINVAL;
	if (!kvc_space_name_valid(o->name))
		return -EINVAL;
	ret = k->ops->space_open(k, o, &s);
	if (ret)
		return ret;
	snprintf(s->name, sizeof(s->name), "%s", o->name);
	s->tiers = NULL;
	s->backed_seen = 0;	/* asked for on the first check that needs more */
	pthread_mutex_lock(&k->lock);
	s->next = k->spaces;
	if (k->spaces)
		k->spaces->prev = s;
	k->spaces = s;
	pthread_mutex_unlock(&k->lock);
	kvrt_bounds_add(s);
	kvrt_log(k, KVRT_LOG_DEBUG, "space \"%s\": %s, block_bytes %llu, %llu blocks", o->name,
		 s->created ? "created" : "joined", (unsigned long long)s->block_bytes,
		 (unsigned long long)s->nr_blocks);
	*out = s;
	return 0;
}

void kvrt_space_close(struct kvrt_space *s)
{
	struct kvrt *k;

	if (!s)
		return;
	k = s->k;
	while (s->tiers)
		kvrt_tier_close(s->tiers);
	pthread_mutex_lock(&k->lock);
	if (s->prev)
		s->prev->next = s->next;
	else
		k->spaces = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&k->lock);
	kvrt_bounds_remove(s);
	k->ops->space_close(s);
}

int kvrt_space_info(struct kvrt_space *s, struct kvrt_space_info *info)
{
	if (!s || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	return s->k->ops->space_info(s, info);
}

/* The checks the kvpool ioctl dispatcher makes before it looks at a space. */
int kvrt_batch_args(const struct kvrt_space *s, uint32_t count, const void *ids)
{
	if (!s)
		return -EINVAL;
	if (!count)
		return -EINVAL;
	if (count > KVRT_MAX_BATCH)
		return -E2BIG;
	if (!ids)
		return -EFAULT;
	return 0;
}

uint64_t kvrt_space_backed(struct kvrt_space *s, bool refresh)
{
	struct kvrt_space_info info;
	uint64_t seen = __atomic_load_n(&s->backed_seen, __ATOMIC_ACQUIRE), now;

	if (!refresh || kvrt_space_info(s, &info) || !info.block_bytes)
		return seen;
	now = info.backed_bytes / info.block_bytes * info.block_bytes;
	if (now > s->map_bytes)
		now = s->map_bytes;
	/* Raise, never lower: another thread may have seen more meanwhile. */
	while (now > seen &&
	       !__atomic_compare_exchange_n(&s->backed_seen, &seen, now, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE))
		;
	return now > seen ? now : seen;
}

int kvrt_batch_ids(struct kvrt_space *s, uint32_t count, const uint32_t *ids)
{
	uint64_t need = 0, backed;
	uint32_t i, last = 0;
	int ret = kvrt_batch_args(s, count, ids);

	if (ret)
		return ret;
	for (i = 0; i < count; i++) {
		if (ids[i] >= s->nr_blocks)
			return -EINVAL;
		if ((ids[i] + 1) * s->block_bytes > need) {
			need = (ids[i] + 1) * s->block_bytes;
			last = ids[i];
		}
	}
	/* The furthest block decides: backed is a prefix. */
	if (need <= kvrt_space_backed(s, false) || need <= (backed = kvrt_space_backed(s, true)))
		return 0;
	kvrt_log(s->k, KVRT_LOG_WARNING,
		 "space \"%s\": block %u has no memory behind it (backed: %llu of %llu blocks): "
		 "allocate blocks with kvrt_alloc_blocks (or look them up) and pass only ids "
		 "this handle holds", s->name, last, (unsigned long long)(backed / s->block_bytes),
		 (unsigned long long)s->nr_blocks);
	return -EFAULT;
}

int kvrt_alloc_blocks(struct kvrt_space *s, uint32_t count, uint32_t *ids)
{
	int ret = kvrt_batch_args(s, count, ids);

	if (ret)
		return ret;
	return s->k->ops->alloc(s, count, ids);
}

int kvrt_free_blocks(struct kvrt_space *s, uint32_t count, const uint32_t *ids)
{
	int ret = kvrt_batch_args(s, count, ids);

	if (ret)
		return ret;
	return s->k->ops->free(s, count, ids);
}

void *kvrt_space_base(const struct kvrt_space *s)
{
	return s ? s->base : NULL;
}

void *kvrt_block_addr(const struct kvrt_space *s, uint32_t id)
{
	if (!s || id >= s->nr_blocks)
		return NULL;
	return (char *)s->base + (uint64_t)id * s->block_bytes;
}

int kvrt_space_mem_info(struct kvrt_space *s, struct kvrt_mem_info *m)
{
	if (!s || !m)
		return -EINVAL;
	memset(m, 0, sizeof(*m));
	m->chunk_bytes = (uint32_t)KVRT_CHUNK_BYTES;
	return s->k->ops->mem_info(s, m);
}

/* ---- prefix cache ------------------------------------------------------------- */

/*
 * -EINVAL without k or where the call's other arguments are bad (!args_ok),
 * then -EOPNOTSUPP unless the backend has every feature bit in feat.
 */
static int need(const struct kvrt *k, bool args_ok, uint64_t feat)
{
	if (!k || !args_ok)
		return -EINVAL;
	return (k->features & feat) == feat ? 0 : -EOPNOTSUPP;
}

/* need() of s's handle; -EINVAL without s. */
static int space_need(const struct kvrt_space *s, bool args_ok, uint64_t feat)
{
	return s ? need(s->k, args_ok, feat) : -EINVAL;
}

/* NULL space, feature, count 0 and > KVRT_MAX_BATCH, as the ioctls check. */
static int prefix_args(const struct kvrt_space *s, uint64_t feat, uint32_t count)
{
	int ret = space_need(s, true, feat);

	if (ret)
		return ret;
	if (!count)
		return -EINVAL;
	if (count > KVRT_MAX_BATCH)
		return -E2BIG;
	return 0;
}

int kvrt_publish(struct kvrt_space *s, uint32_t count, uint32_t *ids,
		 const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *priorities,
		 uint32_t *flags)
{
	int ret = prefix_args(s, KVPOOL_FEAT_PREFIX, count);

	if (ret)
		return ret;
	if (!ids || !hashes)
		return -EFAULT;
	return s->k->ops->publish(s, count, ids, hashes, priorities, flags);
}

int kvrt_lookup(struct kvrt_space *s, uint32_t count, const uint8_t (*hashes)[KVRT_HASH_BYTES],
		uint32_t *ids, uint64_t *devices)
{
	int ret = prefix_args(s, KVPOOL_FEAT_PREFIX, count);

	if (ret)
		return ret;
	if (!ids || !hashes)
		return -EFAULT;
	return s->k->ops->lookup(s, count, hashes, ids, devices);
}

int kvrt_release(struct kvrt_space *s, uint32_t count, const uint32_t *ids)
{
	int ret = prefix_args(s, KVPOOL_FEAT_PREFIX, count);

	if (ret)
		return ret;
	if (!ids)
		return -EFAULT;
	return s->k->ops->release(s, count, ids);
}

int kvrt_space_destroy(struct kvrt *k, const char *name)
{
	int ret = need(k, true, KVPOOL_FEAT_PERSIST);

	if (ret)
		return ret;
	if (!kvc_space_name_valid(name))
		return -EINVAL;
	return k->ops->space_destroy(k, name);
}

int kvrt_space_stats(struct kvrt_space *s, struct kvrt_space_stats *st)
{
	int ret = space_need(s, st != NULL, KVPOOL_FEAT_PREFIX);

	if (ret)
		return ret;
	memset(st, 0, sizeof(*st));
	return s->k->ops->space_stats(s, st);
}

static int residency_args(const struct kvrt_space *s, const uint8_t *uuid, uint32_t count,
			  const void *array)
{
	int ret = space_need(s, uuid != NULL, KVPOOL_FEAT_RESIDENCY);

	if (ret)
		return ret;
	if (count > KVRT_MAX_BATCH)
		return -E2BIG;
	if (count && !array)
		return -EFAULT;
	return 0;
}

int kvrt_residency_add(struct kvrt_space *s, const uint8_t uuid[KVRT_UUID_BYTES],
		       uint32_t count, const struct kvrt_residency_entry *entries)
{
	int ret = residency_args(s, uuid, count, entries);

	if (ret)
		return ret;
	return s->k->ops->residency(s, KVPOOL_RESIDENCY_ADD, uuid, count, entries);
}

int kvrt_residency_del(struct kvrt_space *s, const uint8_t uuid[KVRT_UUID_BYTES],
		       uint32_t count, const uint32_t *blocks)
{
	struct kvrt_residency_entry *e = NULL;
	int ret = residency_args(s, uuid, count, blocks);

	if (ret)
		return ret;
	if (!count)
		return -EINVAL;
	e = calloc(count, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++)
		e[i].block = blocks[i];
	ret = s->k->ops->residency(s, KVPOOL_RESIDENCY_DEL, uuid, count, e);
	free(e);
	return ret;
}

int kvrt_residency_clear(struct kvrt_space *s, const uint8_t uuid[KVRT_UUID_BYTES])
{
	int ret = residency_args(s, uuid, 0, NULL);

	if (ret)
		return ret;
	return s->k->ops->residency(s, KVPOOL_RESIDENCY_CLEAR, uuid, 0, NULL);
}

int kvrt_events_fd(struct kvrt_space *s)
{
	int ret = space_need(s, true, KVPOOL_FEAT_EVENTS);

	return ret ? ret : s->k->ops->events_fd(s);
}

/* More than any queue holds (the module's event_queue_max is at most 2^20). */
#define KVRT_READ_EVENTS_MAX (1U << 22)

int kvrt_read_events(struct kvrt_space *s, struct kvrt_event *events, uint32_t max)
{
	int ret = space_need(s, max != 0, KVPOOL_FEAT_EVENTS);

	if (ret)
		return ret;
	if (!events)
		return -EFAULT;
	if (max > KVRT_READ_EVENTS_MAX)
		max = KVRT_READ_EVENTS_MAX;
	return s->k->ops->read_events(s, events, max);
}
