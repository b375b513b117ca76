// SPDX-License-Identifier: MIT
/*
 * emb_space.c: the embedded backend's spaces, as kmod/space.c is the
 * module's: the namespace, create and join under the module's own rules
 * (kmod/core/kvrules.c), leave, destroy, info, alloc and free, and the
 * ops table (pool/backend.h) that kvrt.c calls through.
 *
 * A space's memory is unmapped when its last client closes (a
 * persistent space: when it is destroyed, or with its handle).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pool/embedded/embedded.h"

/* kvcore's callbacks: backing (emb_backing.c) and evictions (emb_prefix.c). */
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

/* The mode triplet for the caller, by its effective ids as the module's by fsuid/fsgid. */
static enum kvc_mode_class emb_class(const struct emb_space *es)
{
	if (geteuid() == es->uid)
		return KVC_CLASS_OWNER;
	if (in_group(es->gid))
		return KVC_CLASS_GROUP;
	return KVC_CLASS_OTHER;
}

/* Root overrides the mode bits, as CAP_SYS_ADMIN does for the module. */
static bool emb_privileged(const void *unused)
{
	(void)unused;
	return geteuid() == 0;
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

	for (es = emb_pool_of(k)->spaces; es; es = es->next)
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
	es->id = emb_pool_of(k)->next_space_id++;
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
	emb_pool_put(es->k, es->mapped_bytes);
	kvc_space_fini(&es->core);
	pthread_mutex_destroy(&es->lock);
	free(es);
}

/*
 * Drop one reference to es (a client's, or destroy's): the space goes
 * when none is left, unless it is persistent and still has its name.
 */
static void emb_put(struct kvrt *k, struct emb_space *es)
{
	struct emb_space **pp;
	bool last;

	pthread_mutex_lock(&k->lock);
	last = !--es->refs && !(es->linked && es->persist);
	if (last && es->linked) {
		for (pp = &emb_pool_of(k)->spaces; *pp != es; pp = &(*pp)->next)
			;
		*pp = es->next;
		es->linked = false;
	}
	pthread_mutex_unlock(&k->lock);
	if (last)
		emb_destroy(es);
}

/* ---- joining and leaving -------------------------------------------------------- */

static int emb_join(struct kvrt *k, const struct kvrt_space_opts *o, struct emb_client *s)
{
	struct kvc_space_open_check check = { .flags = o->flags };
	struct emb_space *es;
	int ret = 0;

	/* As the module (API 4): create fields are checked for a join too. */
	if (o->flags & KVRT_SPACE_CREATE) {
		ret = kvrt_create_args_valid(o, k->page_size, emb_pool_of(k)->node_mask);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&k->lock);
	es = emb_find(k, o->name);
	if (es) {
		check.found = true;
		check.owner_accepted = emb_owner_accepted(es, o);
		check.want_block_bytes = o->block_bytes;
		check.block_bytes = es->core.block_bytes;
		check.mode = es->mode;
		check.class = emb_class(es);
		check.privileged = emb_privileged;
	}
	ret = kvc_space_open_decide(&check);
	if (ret)
		goto out_unlock;
	if (es) {
		s->space.created = 0;
	} else {
		ret = emb_create(k, o, &es);
		if (ret)
			goto out_unlock;
		es->persist = !!(o->flags & KVRT_SPACE_PERSIST);
		es->linked = true;
		es->next = emb_pool_of(k)->spaces;
		emb_pool_of(k)->spaces = es;
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

	/* Join the clients; a destroy that came in between is told. */
	pthread_mutex_lock(&es->lock);
	s->cnext = es->clients;
	if (es->clients)
		es->clients->cprev = s;
	es->clients = s;
	if (es->destroyed)
		emb_ev_push(s, &(struct kvrt_event){ .type = KVRT_EVENT_SPACE_DESTROYED });
	pthread_mutex_unlock(&es->lock);
	return 0;

out_unlock:
	pthread_mutex_unlock(&k->lock);
	return ret;
}

static int emb_space_open(struct kvrt *k, const struct kvrt_space_opts *o,
			  struct kvrt_space **out)
{
	struct emb_client *s = calloc(1, sizeof(*s));
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

static void emb_space_close(struct kvrt_space *space)
{
	struct emb_client *s = to_emb(space);
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
				emb_rec_remove(b, i);
			else
				i++;
		for (uint32_t i = 0; i < b->nwatch; i++)
			if (b->watch[i] == s->owner) {
				b->watch[i] = b->watch[--b->nwatch];
				break;
			}
	}
	for (uint32_t slot = 0; slot < KVRT_MAX_DEVICES; slot++)
		emb_dev_unregister(es, s, slot);
	if (s->cprev)
		s->cprev->cnext = s->cnext;
	else
		es->clients = s->cnext;
	if (s->cnext)
		s->cnext->cprev = s->cprev;
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
	es = emb_pool_of(k)->spaces;
	emb_pool_of(k)->spaces = NULL;
	pthread_mutex_unlock(&k->lock);
	while (es) {
		struct emb_space *next = es->next;

		emb_destroy(es);
		es = next;
	}
	emb_pool_free(k);
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
	for (pp = &emb_pool_of(k)->spaces; *pp != es; pp = &(*pp)->next)
		;
	*pp = es->next;
	es->linked = false;
	es->persist = false;
	if (!es->refs) {
		pthread_mutex_unlock(&k->lock);
		emb_destroy(es);
		return 0;
	}
	es->refs++;	/* keeps it while the clients are told */
	pthread_mutex_unlock(&k->lock);

	pthread_mutex_lock(&es->lock);
	es->destroyed = true;
	emb_ev_broadcast(es, &(struct kvrt_event){ .type = KVRT_EVENT_SPACE_DESTROYED });
	pthread_mutex_unlock(&es->lock);
	emb_put(k, es);
	return 0;
}

static int emb_space_info(struct kvrt_space *space, struct kvrt_space_info *info)
{
	struct emb_client *s = to_emb(space);
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
 * events, sent from the callback) or found no room tells every client,
 * with the cause kvcore found.
 */
static int emb_alloc(struct kvrt_space *space, uint32_t count, uint32_t *ids)
{
	struct emb_client *s = to_emb(space);
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
		emb_ev_broadcast(es, &e);
	}
	pthread_mutex_unlock(&es->lock);
	return ret;
}

static int emb_free(struct kvrt_space *space, uint32_t count, const uint32_t *ids)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	ret = kvc_free(&es->core, s->owner, count, ids);
	if (!ret)
		for (uint32_t i = 0; i < count; i++)
			emb_blk_forget(es, ids[i]);
	pthread_mutex_unlock(&es->lock);
	return ret;
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
