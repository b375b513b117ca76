/* SPDX-License-Identifier: MIT */
/*
 * pool/embedded/embedded.h: what the embedded backend's files share.
 *
 * The embedded backend is the in-process pool, for hosts without
 * kvpool.ko.  Each space is a kvc_space from kmod/core (the module's own
 * block logic) under a pthread mutex, in a per-handle namespace.  Its
 * files read one for one against the module's where the module has one:
 *
 *   emb_pool.c       probe, the pool cap, pool info (kmod/pool.c)
 *   emb_space.c      the namespace; create, join, leave, destroy, info,
 *                    alloc, free; the per-block side state; the ops
 *                    table (kmod/space.c)
 *   emb_backing.c    a space's range, backed chunk by chunk as kvcore
 *                    grows it (kmod/space.c's grow, from pool chunks)
 *   emb_prefix.c     publish, lookup, release, stats, and who hears of
 *                    an eviction (kmod/prefix.c)
 *   emb_residency.c  residency records, the device table (kmod/residency.c)
 *   emb_events.c     each client's event queue (kmod/events.c)
 *   emb_meminfo.c    kvrt_space_mem_info()'s report
 *
 * Locks (src/internal.h has the order): kvrt.lock for the namespace,
 * emb_space.lock for everything in one space; the functions declared
 * below that take a struct emb_space or emb_client are called under its
 * lock.  Nothing here is exported (-fvisibility=hidden).
 */
#ifndef KVRT_POOL_EMBEDDED_H
#define KVRT_POOL_EMBEDDED_H

#include "internal.h"
#include "pool/backend.h"

/* A residency record: client owner says the block mirrors gpu_block on slot. */
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
	unsigned int refs;		/* kvrt.lock: clients, and destroy in progress */
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
	struct emb_client *clients;	/* clients joined */
	struct emb_blk *bx;		/* per block, nbx entries */
	uint64_t nbx;
	/* The residency device table: slot s is held by dev_fds[s] clients. */
	uint8_t dev[KVRT_MAX_DEVICES][KVRT_UUID_BYTES];
	uint64_t dev_used;		/* bit s: slot s holds a device */
	uint32_t dev_fds[KVRT_MAX_DEVICES];
	bool destroyed;			/* SPACE_DESTROYED sent */
};

/* A client's event queue: a ring, grown up to max. */
struct emb_events {
	struct kvrt_event *ring;
	uint32_t head, len, cap;
	uint64_t seq;			/* last seq given out, dropped ones included */
	uint64_t lost;			/* dropped since the last OVERFLOW */
	int efd;			/* eventfd, -1 until kvrt_events_fd() */
	bool signalled;			/* efd's counter is 1 */
};

/* One client: a space handle joined to an emb_space (fields: es->lock). */
struct emb_client {
	struct kvrt_space space;
	struct emb_space *es;
	uint32_t owner;
	struct emb_client *cprev, *cnext;	/* emb_space.clients */
	struct kvc_refs refs;		/* reader references */
	uint64_t res_slots;		/* residency slots this client registered */
	struct emb_events ev;
};

/* The embedded pool as a whole: k->pool. */
struct emb_pool {
	uint64_t cap;			/* kvrt_open_opts.pool_bytes; 0: no cap */
	uint64_t used;			/* atomic: emb_pool_take(), emb_pool_put() */
	uint64_t node_mask;		/* online NUMA nodes */
	struct emb_space *spaces;	/* the namespace (kvrt.lock) */
	uint32_t next_space_id;		/* (kvrt.lock) */
};

static inline struct emb_pool *emb_pool_of(const struct kvrt *k)
{
	return k->pool;
}

static inline struct emb_client *to_emb(struct kvrt_space *space)
{
	return kvrt_container_of(space, struct emb_client, space);
}

/* emb_pool.c */
int emb_probe(struct kvrt *k, const struct kvrt_open_opts *o, const char *device);
void emb_pool_free(struct kvrt *k);
int emb_pool_info(struct kvrt *k, struct kvrt_pool_info *info);
bool emb_pool_take(struct kvrt *k, uint64_t bytes);
void emb_pool_put(struct kvrt *k, uint64_t bytes);

/* emb_backing.c */
long long emb_grow(struct kvc_space *core, kvc_u64 want);

/* emb_blocks.c */
int emb_bx_cover(struct emb_space *es, uint64_t n);
void emb_blk_forget(struct emb_space *es, uint32_t id);

/* emb_prefix.c */
void emb_evicted(struct kvc_space *core, kvc_u32 id, const kvc_u8 *hash,
		 unsigned int cause);
int emb_publish(struct kvrt_space *space, uint32_t count, uint32_t *ids,
		const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio, uint32_t *flags);
int emb_lookup(struct kvrt_space *space, uint32_t count,
	       const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint64_t *devices);
int emb_release(struct kvrt_space *space, uint32_t count, const uint32_t *ids);
int emb_space_stats(struct kvrt_space *space, struct kvrt_space_stats *st);

/* emb_residency.c */
void emb_rec_remove(struct emb_blk *b, uint32_t i);
uint64_t emb_rec_mask(const struct emb_space *es, uint32_t id);
void emb_dev_unregister(struct emb_space *es, struct emb_client *s, uint32_t slot);
int emb_residency(struct kvrt_space *space, uint32_t op, const uint8_t *uuid, uint32_t count,
		  const struct kvrt_residency_entry *entries);

/* emb_events.c */
void emb_ev_push(struct emb_client *s, const struct kvrt_event *e);
void emb_ev_broadcast(struct emb_space *es, const struct kvrt_event *e);
int emb_events_fd(struct kvrt_space *space);
int emb_read_events(struct kvrt_space *space, struct kvrt_event *ev, uint32_t max);

/* emb_meminfo.c */
int emb_mem_info(struct kvrt_space *space, struct kvrt_mem_info *m);

#endif /* KVRT_POOL_EMBEDDED_H */
