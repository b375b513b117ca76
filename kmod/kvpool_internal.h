/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvpool internals shared by the module's files.  The files, one concern each:
 *
 *   main.c         module glue, /dev/kvpool, the ioctl dispatcher
 *   pool.c         the pinned chunks per NUMA node, lent to spaces
 *   space.c        spaces: names, ids, permissions, open/close, teardown
 *   backing.c      a space's range backed by pool chunks (grow, refill, return)
 *   blocks.c       the mapping and its faults; ALLOC, FREE, SPACE_INFO
 *   prefix.c       PUBLISH, LOOKUP, RELEASE, SPACE_STATS; per-fd interests
 *   events.c       per-fd event queues (read, poll)
 *   residency.c    which GPU blocks each host block mirrors, per fd
 *   tenant.c       bytes and limits per owner uid
 *   reclaim.c      the shrinker: cached blocks' pages back under pressure
 *   sysfs.c        /sys/class/misc/kvpool: pool, nodes, tenants
 *   sysfs_space.c  /sys/class/misc/kvpool/space/ID
 *   debugfs.c      state dumps and the accounting check
 *   compat.h       kernel APIs that differ between 6.1 and 6.12
 *   core/          kvcore (blocks, prefix cache) and kvrules, shared with
 *                  libkvrt's embedded backend
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
#include <linux/poll.h>
#include <linux/rhashtable-types.h>
#include <linux/seq_file.h>
#include <linux/wait.h>
#include <linux/xarray.h>
#include <linux/kvpool.h>

#include "kvcore.h"
#include "kvrules.h"

/**
 * DOC: locking
 *
 * Order, outermost first.  Nothing below takes a lock above it.
 *
 * 1. kvp_spaces_lock (mutex, may sleep): the list of spaces, the name
 *    index, each space's client and pin counts, persistence, unlinking
 *    and dying, the space id counter and the scrub key counter.  Joining,
 *    destroying and the last close serialise here.  Nothing done under it
 *    grows with what a tenant controls within its spaces (fds, VMAs,
 *    pages): it finds, pins, marks and lists, and whoever then works on a
 *    space does so after dropping it.  Walks of the list grow with the
 *    number of spaces alone (spaces_per_uid_max per uid).
 * 2. kvp_space.lock (mutex, may sleep): the space's kvcore state (block
 *    states, free stack, hash index, LRUs, holes), every client's reader
 *    references, interest set and residency slot registrations, its
 *    client list, residency records and device table, its chunk list and
 *    its owner counter.  Growth and refill allocate, zero and call
 *    cond_resched() under it; reclaim evicts and zaps user mappings
 *    under it (it nests the page locks of the extent, then the space's
 *    own i_mmap_rwsem: see kvp_space.inode), so an eviction's events to
 *    the fds interested in a block and a zap's walk of the VMAs its
 *    members made hold up that space alone.  Teardown empties the chunk
 *    list under it, a batch of pages at a time: the debugfs dumps walk
 *    that list.  Taken killable from ioctls (but to undo a call whose
 *    copy-out failed) and sysfs.  Lookups in one space serialise here;
 *    spaces never contend.
 * 3. kvp_pool.backing_rwsem (rw_semaphore, may sleep): readers move chunks
 *    between the pool and spaces (growth, refill, reclaim, teardown); the
 *    debugfs check takes it for writing so the per-node totals and the
 *    spaces' chunk lists can be compared while nothing moves.
 * 4. kvp_pool.resize_lock (mutex, may sleep): one pool resize at a time
 *    (sysfs pool_bytes).  Never taken with a space lock held.
 * 5. kvp_node.lock (spinlock, no sleeping, no allocation): the node's free
 *    and held chunk lists and its byte counters.  Work under it is bounded
 *    by nothing a tenant controls: no page of a chunk is examined under it
 *    (held chunks are detached in batches of KVP_RECYCLE_BATCH and checked
 *    outside it: pool.c, held_test), and no chunk is freed under it.
 * 6. kvp_tenants_lock (spinlock, no sleeping): per-uid usage and limits;
 *    taken under 5 when a held chunk returns to the pool and uncharges.
 * 7. kvp_events.lock (spinlock, irq-unsafe, no sleeping): one client's
 *    event queue; emitted under 2, read by read()/poll() alone.
 *
 * The shrinker runs inside other allocations, so it only ever trylocks
 * 1, 2 and 3 and skips what is busy.  It holds 1 only to pick a few
 * spaces, taking a reclaim reference on each (kvp_space.reclaim_refs,
 * which teardown waits for), and reclaims from each under 2 and 3 with
 * 1 dropped.  The page locks of an extent it trylocks too; the space's
 * i_mmap_rwsem it probes with a trylock before it commits to an extent,
 * and unmap_mapping_range() then takes it for reading (see
 * kvp_mapping_idle() in reclaim.c for what that leaves).
 * No other space's fds ever take that lock.
 *
 * No lock that outlives one open file is held across an access to user
 * memory, whose fault can last as long as userspace wants (userfaultfd,
 * a FUSE mapping).  Ioctls copy their arrays in before taking 2 and out
 * after dropping it; a failed copy-out takes 2 again to undo the call
 * (LOOKUP) or leaves it done (PUBLISH), as kvpool.rst says.  ALLOC pins
 * its ids array before it takes 2 and writes into the pinned pages, so
 * its copy-out cannot fail.
 * So 2 is only ever held for kernel work.  Even so, no path that any uid
 * can reach waits for 2 while holding 1: join, destroy and drop_cached pin
 * the space under 1 (nr_pins keeps it listed), drop 1, then take 2
 * (killably where the call can still fail).  The last close (or unpin)
 * only unnames the space and marks it dying under 1; the teardown then
 * gives the chunks back without 1, yielding between batches, and takes 1
 * again to unlist it, O(1).  Only the root-only debugfs dumps and check
 * take 2 under 1.  The sysfs totals, which any uid reads, take 1
 * killably and no space's lock: they read each space's counters as they
 * stand.  An fd's event read_lock is that fd's own.
 *
 * The fault handler takes no lock: kvp_space.pages is an xarray read under
 * RCU, and the page reference is taken inside the RCU read section.
 * Reclaim erases pages from it, zaps the mappings, waits for a grace
 * period and only then looks at the page counts, so a racing fault either
 * holds a reference that keeps the chunk on the held list or saw no page.
 */

/*
 * A chunk: 2^order physically contiguous pages from one node, split into
 * order-0 pages so each page carries its own refcount for mappings and pins.
 */
struct kvp_chunk {
	struct list_head link;	/* node free/held list, or space->chunks */
	struct page *page;
	unsigned int nr_pages;	/* a power of 2 when allocated; split to fill holes */
	int nid;
	u64 last_space;		/* scrub key (serial) of the last space that held it, 0 never */
	u64 offset;		/* in space->chunks: byte offset in the range */
	bool to_buddy;		/* on the held list: freed, not reused, once idle */
	struct kvp_tenant *charged;	/* left a space still charged: uncharged once idle */
};

static inline u64 kvp_chunk_bytes(const struct kvp_chunk *c)
{
	return (u64)c->nr_pages << PAGE_SHIFT;
}

struct kvp_node {
	spinlock_t lock;	/* the lists and byte counters below */
	int nid;
	struct list_head free_chunks;
	struct list_head held_chunks;	/* left by a space while mapped or pinned */
	u64 target_bytes;	/* what sysfs pool_bytes asked for */
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
	atomic64_t zeroed_chunks;	/* chunks scrubbed: for a new space or the page allocator */
	atomic64_t reclaimed_bytes;	/* given back to the page allocator by the shrinker */
};

/* Tunables (sysfs). */
struct kvp_tunables {
	bool shrinker_enabled;
	u64 min_cached_bytes;	/* the shrinker leaves this much cached */
	u32 event_queue_max;	/* events queued per fd before overflow */
	u32 refs_per_fd_max;	/* reader references one fd may hold, fixed at open */
	u32 spaces_per_uid_max;	/* spaces one owner uid may have, 0: no bound */
	u64 uid_limit_default;	/* bytes per uid without its own limit, 0: none */
};

extern struct kvp_tunables kvp_tun;

#define KVP_EVENT_QUEUE_MIN	16
#define KVP_EVENT_QUEUE_MAX	1048576

extern struct kvp_pool kvp_pool;
/* Prefix-cache counters of spaces already torn down (kvp_spaces_lock). */
extern struct kvc_space_stats kvp_dead_stats;

/* The counters that add up across spaces: lookups, inserts, evictions. */
static inline void kvp_stats_add(struct kvc_space_stats *to, const struct kvc_space_stats *from)
{
	int i;

	to->hits += from->hits;
	to->misses += from->misses;
	to->inserts += from->inserts;
	to->dedups += from->dedups;
	for (i = 0; i < KVC_EVICT_CAUSES; i++)
		to->evictions[i] += from->evictions[i];
}

/* Reserved and padding fields of an ioctl struct must be zero. */
static inline bool kvp_zero(const void *p, size_t len)
{
	return !memchr_inv(p, 0, len);
}

/*
 * The checks a batch ioctl on a space makes first, in this order: an
 * unknown flag or a nonzero reserved field (bad) or an empty batch
 * -EINVAL, a batch over KVPOOL_MAX_BATCH -E2BIG, no space joined -EBADFD.
 */
static inline long kvp_batch_check(bool bad, u32 count, bool joined)
{
	if (bad || !count)
		return -EINVAL;
	return count > KVPOOL_MAX_BATCH ? -E2BIG : joined ? 0 : -EBADFD;
}

extern struct mutex kvp_spaces_lock;
extern struct list_head kvp_spaces;
extern unsigned int kvp_nr_spaces;

#define KVP_CHUNK_ORDER 9	/* 2 MiB with 4 KiB pages */
#define KVP_CHUNK_BYTES (PAGE_SIZE << KVP_CHUNK_ORDER)

struct kvp_tenant;
struct kvp_space_kobj;

/* Residency: one fd's record of a GPU copy of a host block. */
struct kvp_res_rec {
	u32 owner;
	u32 gpu_block;
	u8 slot;
};

struct kvp_res_block {
	u32 nr, cap;
	struct kvp_res_rec recs[];
};

struct kvp_space {
	struct list_head link;	/* kvp_spaces */
	struct rhash_head name_node;	/* the name index, while not unlinked */
	unsigned int nr_clients;	/* kvp_spaces_lock */
	unsigned int nr_pins;	/* kvp_spaces_lock: holders waiting for the lock below */
	bool persistent;	/* kvp_spaces_lock: outlives its last fd */
	bool unlinked;		/* kvp_spaces_lock: destroyed, torn down at last close */
	bool dying;		/* kvp_spaces_lock: being torn down, listed until it is gone */
	atomic_t reclaim_refs;	/* shrinker scans at work on it without kvp_spaces_lock */
	u64 serial;		/* scrub key: unique, settable by nothing (space.c) */
	u32 id;
	char name[KVPOOL_NAME_MAX];
	kuid_t uid;
	kgid_t gid;
	umode_t mode;
	u32 numa_policy;
	u64 node_mask;
	unsigned int interleave_next;

	struct kvp_tenant *tenant;	/* the owner uid's usage, held for the space's life */
	/*
	 * The space's own address_space (i_mapping), on kvpool's internal
	 * filesystem: every fd that joins points f_mapping here, so all the
	 * space's mappings, and only they, are in its i_mmap tree.  Put with
	 * the space, hence after its last fd and so after its last mapping.
	 */
	struct inode *inode;
	struct kvp_space_kobj *kobj;	/* sysfs space/ID/ */

	struct mutex lock;	/* see DOC: locking */
	struct kvc_space core;
	struct list_head chunks;
	struct list_head clients;	/* kvp_client.link */
	u32 next_owner;		/* the lock; see kvp_space_next_owner() */
	bool owners_wrapped;	/* next_owner went past U32_MAX once */
	struct xarray pages;	/* page index in the range -> struct page * */
	struct xarray residency;	/* block id -> struct kvp_res_block * */
	struct xarray interest;	/* block id -> a member of its fds' interest ring (prefix.c) */
	/*
	 * The residency device table: slot s holds a device while some fd
	 * has it registered (device_fds[s] of them); a record's slot is
	 * always registered by the record's fd.
	 */
	u8 devices[KVPOOL_MAX_DEVICES][16];
	u64 devices_used;	/* bit s: slot s holds a device */
	u32 device_fds[KVPOOL_MAX_DEVICES];
};

/* An fd's event queue: segments of records, read in order. */
struct kvp_events {
	struct mutex read_lock;	/* one reader at a time: records leave once copied */
	spinlock_t lock;	/* everything below */
	wait_queue_head_t wait;
	struct list_head segs;
	u64 queued;
	u64 next_seq;		/* the last seq handed out */
	u64 lost;		/* dropped since the last OVERFLOW record */
	struct mem_cgroup *memcg;	/* the opener's: segments are charged to it */
};

/* Per open file. */
struct kvp_client {
	struct kvp_space *space;	/* set once by SPACE_OPEN, read with acquire */
	u32 owner;
	bool joining;		/* kvp_spaces_lock: a SPACE_OPEN is under way */
	struct file *file;
	struct list_head link;	/* space->clients */
	struct kvc_refs refs;	/* reader references */
	struct xarray interest;	/* block id -> its kvp_interest: evictions are reported */
	u64 res_slots;		/* the space's lock: residency slots this fd registered */
	struct kvp_events events;
};

/* pool.c */
int kvp_pool_init(unsigned long bytes_per_node);
void kvp_pool_exit(void);
int kvp_pool_resize(u64 total_bytes);
struct kvp_chunk *kvp_pool_take(int nid, unsigned int max_pages);
void kvp_pool_return(struct kvp_chunk *chunk);
void kvp_chunk_leave_space(struct kvp_chunk *chunk, struct kvp_tenant *t);
void kvp_pool_release(struct kvp_chunk *chunk);
void kvp_pool_totals(u64 *reserved, u64 *free, u64 *held);
bool kvp_chunk_busy(const struct kvp_chunk *chunk);
void kvp_chunk_scrub(struct kvp_chunk *chunk);
u64 kvp_pool_held_scan_max(bool reset);

/* space.c */
int kvp_spaces_init(void);
int kvp_space_open(struct kvp_client *client, struct kvpool_space_open *args);
void kvp_client_init(struct kvp_client *client, struct file *file);
void kvp_client_release(struct kvp_client *client);
struct kvp_space *kvp_client_space(struct kvp_client *client);
int kvp_space_destroy(const char *name, const struct file *file);
int kvp_space_drop_cached(const char *name);
int kvp_space_set_serial(u64 serial);
int kvp_space_set_next_owner(const char *name, u32 next);
void kvp_spaces_exit(void);
const char *kvp_policy_name(u32 policy);
u64 kvp_pool_node_mask(void);

/* backing.c */
long long kvp_space_grow(struct kvc_space *core, u64 want);
int kvp_space_refill(struct kvc_space *core, u64 start, u64 len);
void kvp_space_return_chunks(struct kvp_space *space);

/* blocks.c */
void kvp_space_emit_pressure(struct kvp_space *space, unsigned int cause, u32 evicted);
int kvp_space_mmap(struct kvp_client *client, struct vm_area_struct *vma);
unsigned long kvp_space_get_unmapped_area(struct kvp_client *client, struct file *file,
					  unsigned long addr, unsigned long len,
					  unsigned long pgoff, unsigned long flags);
long kvp_ioctl_alloc(struct kvp_client *client, struct kvpool_blocks *args);
long kvp_ioctl_free(struct kvp_client *client, struct kvpool_blocks *args);
u32 *kvp_space_lock_with_ids(struct kvp_space *space, const struct kvpool_blocks *args);
long kvp_ioctl_space_info(struct kvp_client *client, struct kvpool_space_info *info);

/* prefix.c */
long kvp_ioctl_publish(struct kvp_client *client, void __user *uarg);
long kvp_ioctl_lookup(struct kvp_client *client, void __user *uarg);
long kvp_ioctl_release(struct kvp_client *client, struct kvpool_blocks *args);
long kvp_ioctl_space_stats(struct kvp_client *client, void __user *uarg);
void kvp_space_evicted(struct kvc_space *core, u32 id, const u8 *hash, unsigned int cause);
void kvp_interest_drop_client(struct kvp_space *space, struct kvp_client *client);

/* events.c */
void kvp_events_init(struct kvp_events *ev);
void kvp_events_fini(struct kvp_events *ev);
void kvp_event_emit(struct kvp_events *ev, u32 type, u32 cause, u32 block, u32 count,
		    const u8 *hash);
void kvp_event_lost(struct kvp_events *ev);
ssize_t kvp_events_read(struct kvp_client *client, char __user *buf, size_t len, bool nonblock);
__poll_t kvp_events_poll(struct kvp_client *client, struct file *file, poll_table *wait);

/* residency.c */
long kvp_ioctl_residency(struct kvp_client *client, void __user *uarg);
void kvp_residency_drop_block(struct kvp_space *space, u32 id);
void kvp_residency_drop_client(struct kvp_space *space, struct kvp_client *client);
u64 kvp_residency_mask(struct kvp_space *space, u32 id);
void kvp_residency_destroy(struct kvp_space *space);
void kvp_residency_show(struct seq_file *m, struct kvp_space *space);
unsigned int kvp_residency_check(struct seq_file *m, struct kvp_space *space);

/* tenant.c */
struct kvp_tenant *kvp_tenant_get(const struct cred *cred);
void kvp_tenant_put(struct kvp_tenant *t);
int kvp_tenant_charge(struct kvp_tenant *t, u64 bytes);
void kvp_tenant_hold(struct kvp_tenant *t, u64 bytes);
void kvp_tenant_unhold(struct kvp_tenant *t, u64 bytes);
void kvp_tenants_exit(void);
int kvp_tenant_set_limit(kuid_t uid, u64 bytes);
ssize_t kvp_tenants_emit(char *buf);
u64 kvp_tenant_in_spaces(const struct kvp_tenant *t);

/* reclaim.c */
int kvp_reclaim_init(void);
void kvp_reclaim_exit(void);
u64 kvp_reclaim_transit_bytes(int nid);
void kvp_reclaim_flush(void);

/* sysfs.c, sysfs_space.c */
extern const struct attribute_group *kvp_dev_groups[];
int kvp_sysfs_nodes_init(struct device *dev);
void kvp_sysfs_nodes_exit(void);
int kvp_sysfs_spaces_init(struct device *dev);
void kvp_sysfs_spaces_exit(void);
int kvp_space_kobj_add(struct kvp_space *space);
ssize_t kvp_evictions_emit(char *buf, const u64 *n);
void kvp_space_kobj_del(struct kvp_space *space);

/* debugfs.c */
void kvp_debugfs_init(void);
void kvp_debugfs_exit(void);

#endif /* KVPOOL_INTERNAL_H */
