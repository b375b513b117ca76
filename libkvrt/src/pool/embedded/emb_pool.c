// SPDX-License-Identifier: MIT
/*
 * emb_pool.c: the embedded pool as a whole, as kmod/pool.c is the
 * module's: what probe reports, and the pool cap every space's chunks
 * count against.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool/embedded/embedded.h"

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
int emb_probe(struct kvrt *k, const struct kvrt_open_opts *o, const char *device)
{
	struct emb_pool *pool = calloc(1, sizeof(*pool));

	(void)device;
	if (!pool)
		return -ENOMEM;
	pool->cap = o->pool_bytes;
	pool->node_mask = online_nodes();
	pool->next_space_id = 1;
	k->pool = pool;
	/* Everything but RECLAIM: the embedded pool has no shrinker. */
	k->features = KVPOOL_FEAT_SPACES | KVPOOL_FEAT_NUMA | KVPOOL_FEAT_PREFIX |
		      KVPOOL_FEAT_PERSIST | KVPOOL_FEAT_RESIDENCY | KVPOOL_FEAT_EVENTS;
	return 0;
}

/* kvrt_close(), after emb_close() has destroyed the spaces left. */
void emb_pool_free(struct kvrt *k)
{
	free(k->pool);
	k->pool = NULL;
}

/* The embedded pool cap: an atomic, so grow never takes kvrt.lock. */
bool emb_pool_take(struct kvrt *k, uint64_t bytes)
{
	struct emb_pool *pool = emb_pool_of(k);
	uint64_t used = __atomic_load_n(&pool->used, __ATOMIC_RELAXED);

	do {
		if (pool->cap && (used > pool->cap || bytes > pool->cap - used))
			return false;
	} while (!__atomic_compare_exchange_n(&pool->used, &used, used + bytes, true,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return true;
}

void emb_pool_put(struct kvrt *k, uint64_t bytes)
{
	__atomic_fetch_sub(&emb_pool_of(k)->used, bytes, __ATOMIC_RELAXED);
}

int emb_pool_info(struct kvrt *k, struct kvrt_pool_info *info)
{
	const struct emb_pool *pool = emb_pool_of(k);
	uint64_t used = __atomic_load_n(&pool->used, __ATOMIC_RELAXED);

	info->api_version = KVPOOL_API_VERSION;
	info->features = k->features;
	info->page_size = k->page_size;
	info->chunk_size = (uint32_t)KVRT_CHUNK_BYTES;
	info->nr_nodes = (uint32_t)__builtin_popcountll(pool->node_mask);
	info->max_batch = KVRT_MAX_BATCH;
	info->node_mask = pool->node_mask;
	info->pool_bytes = pool->cap;
	info->used_bytes = used;
	info->free_bytes = pool->cap > used ? pool->cap - used : 0;
	return 0;
}
