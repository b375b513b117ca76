/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvpool internals shared by the module's files.
 */
#ifndef KVPOOL_INTERNAL_H
#define KVPOOL_INTERNAL_H

#include <linux/atomic.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/nodemask.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/uidgid.h>
#include <linux/xarray.h>
#include <linux/kvpool.h>

#include "kvcore.h"

/**
 * DOC: locking
 *
 * Order, outermost first.  Nothing below takes a lock above it.
 *
 * 1. kvp_spaces_lock (mutex, may sleep): the list of spaces, name lookup,
 *    each space's client count, and the space id counter.  Joining and the
 *    last close of a space serialise here.
 * 2. kvp_space.lock (mutex, may sleep): the space's kvcore state (block
 *    states, free stack, backing), its chunk list and its owner counter.
 *    Growth allocates, zeroes and calls cond_resched() under it.  Taken
 *    killable from ioctls.
 * 3. kvp_pool.backing_rwsem (rw_semaphore, may sleep): readers move chunks
 *    between the pool and spaces (growth, space teardown); the debugfs
 *    check takes it for writing so the per-node totals and the spaces'
 *    chunk lists can be compared while nothing moves.  Chunk lists may be
 *    read without the space lock by a holder of the write side.
 * 4. kvp_pool.resize_lock (mutex, may sleep): one pool resize at a time
 *    (sysfs pool_bytes).  Never taken with a space lock held.
 * 5. kvp_node.lock (spinlock, no sleeping, no allocation): the node's free
 *    and held chunk lists and its byte counters.
 *
 * The fault handler takes no lock: kvp_space.pages is an xarray read under
 * RCU, and a live space never removes a page from it.
 */

/*
 * A chunk: 2^order physically contiguous pages from one node, split into
 * order-0 pages so each page carries its own refcount for mappings and pins.
 */
struct kvp_chunk {
	struct list_head link;	/* node free/held list, or space->chunks */
	struct page *page;
	unsigned int order;
	int nid;
	u64 last_space;		/* serial of the last space that held it, 0 never */
};

static inline u64 kvp_chunk_bytes(const struct kvp_chunk *c)
{
	return PAGE_SIZE << c->order;
}

struct kvp_node {
	spinlock_t lock;	/* the lists and byte counters below */
	int nid;
	struct list_head free_chunks;
	struct list_head held_chunks;	/* left by a space while mapped or pinned */
	u64 reserved_bytes;	/* free + in_spaces + held */
	u64 free_bytes;
	u64 held_bytes;
	u64 in_spaces_bytes;
	u64 nr_chunks;
};

struct kvp_pool {
	struct kvp_node *nodes[MAX_NUMNODES];
	nodemask_t pool_nodes;	/* nodes with a kvp_node, < KVPOOL_MAX_NODES */
	unsigned int nr_nodes;
	struct rw_semaphore backing_rwsem;
	struct mutex resize_lock;	/* one pool resize at a time */
	atomic64_t allocs;	/* blocks handed out */
	atomic64_t frees;	/* blocks returned by FREE or close */
	atomic64_t alloc_failures;	/* failed ALLOC calls */
	atomic64_t zeroed_chunks;	/* chunks scrubbed before a new space */
};

extern struct kvp_pool kvp_pool;
extern struct mutex kvp_spaces_lock;
extern struct list_head kvp_spaces;
extern unsigned int kvp_nr_spaces;

#define KVP_CHUNK_ORDER 9	/* 2 MiB with 4 KiB pages */
#define KVP_CHUNK_BYTES (PAGE_SIZE << KVP_CHUNK_ORDER)

struct kvp_space {
	struct list_head link;	/* kvp_spaces */
	unsigned int nr_clients;	/* kvp_spaces_lock */
	u64 serial;
	u32 id;
	char name[KVPOOL_NAME_MAX];
	kuid_t uid;
	kgid_t gid;
	umode_t mode;
	u32 numa_policy;
	u64 node_mask;
	unsigned int interleave_next;

	struct mutex lock;	/* core, chunks, next_owner, interleave_next */
	struct kvc_space core;
	struct list_head chunks;
	u32 next_owner;
	struct xarray pages;	/* page index in the range -> struct page * */
};

/* Per open file. */
struct kvp_client {
	struct kvp_space *space;	/* set once by SPACE_OPEN, read with acquire */
	u32 owner;
};

/* pool.c */
int kvp_pool_init(unsigned long bytes_per_node);
void kvp_pool_exit(void);
int kvp_pool_resize(u64 total_bytes);
struct kvp_chunk *kvp_pool_take(int nid);
void kvp_pool_return(struct kvp_chunk *chunk);
void kvp_pool_totals(u64 *reserved, u64 *free, u64 *held);
bool kvp_chunk_busy(const struct kvp_chunk *chunk);

/* space.c */
int kvp_space_open(struct kvp_client *client, struct kvpool_space_open *args);
void kvp_client_release(struct kvp_client *client);
int kvp_space_mmap(struct kvp_client *client, struct vm_area_struct *vma);
long kvp_ioctl_alloc(struct kvp_client *client, struct kvpool_blocks *args);
long kvp_ioctl_free(struct kvp_client *client, struct kvpool_blocks *args);
long kvp_ioctl_space_info(struct kvp_client *client, struct kvpool_space_info *info);
const char *kvp_policy_name(u32 policy);

/* sysfs.c */
extern const struct attribute_group *kvp_dev_groups[];
int kvp_sysfs_nodes_init(struct device *dev);
void kvp_sysfs_nodes_exit(void);

/* debugfs.c */
void kvp_debugfs_init(void);
void kvp_debugfs_exit(void);

#endif /* KVPOOL_INTERNAL_H */
