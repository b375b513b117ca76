/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * kvpool: a host-wide pool of pinned pages handed out as KV-cache blocks.
 *
 * One open file descriptor of /dev/kvpool joins at most one space
 * (KVPOOL_IOC_SPACE_OPEN); mmap of that fd maps the space's range, where
 * block i lives at offset i * block_bytes.  Every struct is fixed-size,
 * 64-bit aligned and identical for 32- and 64-bit callers; arrays travel
 * through __u64 user pointers.  Reserved fields and unknown flags must be
 * zero, or the ioctl fails with -EINVAL.  So must every field marked "out"
 * (API 4): a struct is passed in zeroed but for its "in" fields, and one
 * that comes back from a call is not an input to the next.  See
 * Documentation/kvpool.rst.
 */
#ifndef _UAPI_LINUX_KVPOOL_H
#define _UAPI_LINUX_KVPOOL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define KVPOOL_API_VERSION	4

/* Feature bits reported by KVPOOL_IOC_INFO. */
#define KVPOOL_FEAT_SPACES	(1ULL << 0)	/* spaces, alloc/free, mmap */
#define KVPOOL_FEAT_NUMA	(1ULL << 1)	/* NUMA policies honoured */
#define KVPOOL_FEAT_PREFIX	(1ULL << 2)	/* publish, lookup, release, eviction */
#define KVPOOL_FEAT_PERSIST	(1ULL << 3)	/* persistent spaces, SPACE_DESTROY */
#define KVPOOL_FEAT_RESIDENCY	(1ULL << 4)	/* GPU residency records */
#define KVPOOL_FEAT_EVENTS	(1ULL << 5)	/* read()/poll() event stream */
#define KVPOOL_FEAT_RECLAIM	(1ULL << 6)	/* shrinker gives cached blocks back */
#define KVPOOL_FEATURES		(KVPOOL_FEAT_SPACES | KVPOOL_FEAT_NUMA | KVPOOL_FEAT_PREFIX | \
				 KVPOOL_FEAT_PERSIST | KVPOOL_FEAT_RESIDENCY | \
				 KVPOOL_FEAT_EVENTS | KVPOOL_FEAT_RECLAIM)

#define KVPOOL_NAME_MAX		64	/* including the terminating NUL */
#define KVPOOL_MAX_BATCH	65536	/* ids per ALLOC or FREE call */
#define KVPOOL_MAX_NODES	64	/* bits in a node mask */
#define KVPOOL_MAX_SPACE_BYTES	(1ULL << 40)	/* largest quota */
#define KVPOOL_MAX_BLOCK_BYTES	(1ULL << 30)	/* largest block */

/* Every field of kvpool_info, kvpool_space_info and kvpool_space_stats is 0 on input. */
struct kvpool_info {
	__u32 flags;		/* in: must be 0 */
	__u32 api_version;	/* out: KVPOOL_API_VERSION */
	__u64 features;		/* out: KVPOOL_FEAT_* */
	__u32 page_size;	/* out: bytes */
	__u32 chunk_size;	/* out: bytes of a full-order chunk */
	__u32 nr_nodes;		/* out: NUMA nodes that hold pool pages */
	__u32 max_batch;	/* out: KVPOOL_MAX_BATCH */
	__u64 node_mask;	/* out: bit n set when node n holds pool pages */
	__u64 pool_bytes;	/* out: reserved pages, all nodes */
	__u64 free_bytes;	/* out: pages not held by any space */
	__u64 reserved[4];	/* must be 0 */
};

/* NUMA placement of the chunks that back a space. */
enum kvpool_numa_policy {
	KVPOOL_NUMA_PREFERRED = 0, /* nodes in mask first, then any; empty mask: caller's node */
	KVPOOL_NUMA_BIND = 1,	   /* only nodes in mask; -ENOSPC when they run out */
	KVPOOL_NUMA_INTERLEAVE = 2,/* chunk by chunk across mask (empty: all nodes) */
};

/* KVPOOL_IOC_SPACE_OPEN flags */
#define KVPOOL_SPACE_CREATE	(1U << 0)	/* create when absent */
#define KVPOOL_SPACE_EXCL	(1U << 1)	/* with CREATE: fail if present */
#define KVPOOL_SPACE_PERSIST	(1U << 2)	/* with CREATE: outlive the last fd */
#define KVPOOL_SPACE_FOREIGN	(1U << 3)	/* join a space owned by expect_uid (API 3) */
#define KVPOOL_SPACE_FLAGS	(KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL | KVPOOL_SPACE_PERSIST | \
				 KVPOOL_SPACE_FOREIGN)

/*
 * Rights are fixed at open, as for a file: every check below uses the
 * credentials the fd was opened with (fsuid, fsgid, groups, user namespace,
 * CAP_SYS_ADMIN), not those of the task issuing the ioctl, and a created
 * space is owned by, and charged to, the opener's fsuid/fsgid.
 *
 * Space names are one host-wide namespace, so a join checks who owns the
 * space it finds (API 3): the owner must be the opener's fsuid or, with
 * KVPOOL_SPACE_FOREIGN, exactly expect_uid.  Otherwise the call fails and
 * joins nothing: -EEXIST with KVPOOL_SPACE_CREATE (the name is taken by
 * another owner), -EACCES without.  Root is not exempt.  FOREIGN only
 * joins: with CREATE it is -EINVAL, and expect_uid must be 0 without it.
 *
 * The create fields (mode, quota_bytes, node_mask, numa_policy and the
 * PERSIST flag) must be 0 without KVPOOL_SPACE_CREATE (API 4).  With it
 * they are checked as for a create whether the call creates or joins.
 * Every success writes the space's own mode, quota_bytes (nr_blocks *
 * block_bytes), node_mask, numa_policy and block_bytes back over them, so
 * a create-or-join that joined sees what the space has.
 */

struct kvpool_space_open {
	char name[KVPOOL_NAME_MAX];	/* in: NUL-terminated, [A-Za-z0-9._-]+ */
	__u32 flags;		/* in: KVPOOL_SPACE_* */
	__u32 mode;		/* in, create (else 0): 0777 bits; out: the space's */
	__u64 block_bytes;	/* in: page multiple; on join 0 or the space's; out */
	__u64 quota_bytes;	/* in, create (else 0): at least block_bytes; out */
	__u64 node_mask;	/* in, create (else 0): nodes for the policy; out */
	__u32 numa_policy;	/* in, create (else 0): enum kvpool_numa_policy; out */
	__u32 space_id;		/* out (0 on input) */
	__u32 uid;		/* out (0 on input): owner */
	__u32 gid;		/* out (0 on input): owner group */
	__u64 nr_blocks;	/* out (0 on input): quota_bytes / block_bytes */
	__u64 map_bytes;	/* out (0 on input): length of the mmap range */
	__u32 created;		/* out (0 on input): 1 when this call created the space */
	__u32 expect_uid;	/* in, FOREIGN: the owner to accept; else 0 (was pad) */
	__u64 reserved[4];	/* must be 0 */
};

/*
 * KVPOOL_IOC_ALLOC, KVPOOL_IOC_FREE and KVPOOL_IOC_RELEASE: all ids or none.
 * ALLOC writes ids[] but never the struct (_IOW since API 4).
 */
struct kvpool_blocks {
	__u64 ids;		/* in: user pointer to __u32[count] */
	__u32 count;		/* in: 1..KVPOOL_MAX_BATCH */
	__u32 flags;		/* in: must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/*
 * KVPOOL_IOC_SPACE_INFO: the joined space's state; every field but flags
 * is out (0 on input).
 */
struct kvpool_space_info {
	__u32 flags;		/* in: must be 0 */
	__u32 space_id;
	__u64 block_bytes;
	__u64 nr_blocks;	/* quota in blocks */
	__u64 backed_blocks;	/* blocks with pages behind them */
	__u64 free_blocks;
	__u64 owned_blocks;	/* all fds */
	__u64 my_blocks;	/* owned by this fd */
	__u64 backed_bytes;
	__u64 reserved[4];	/* must be 0 */
};

/*
 * Prefix cache.  A block is published under a 32-byte content hash that
 * the caller computes (a chained hash of the prefix); the kernel treats it
 * as an opaque key scoped to the space.  Published blocks are immutable by
 * contract and shared by every fd of the space; each holder keeps reader
 * references, and a block with none is CACHED: evictable, lowest priority
 * first, least recently released first within a priority.
 */
#define KVPOOL_HASH_BYTES	32
#define KVPOOL_PRIO_MAX		100
#define KVPOOL_PRIO_DEFAULT	50

/* KVPOOL_IOC_PUBLISH flags */
#define KVPOOL_PUBLISH_PRIORITY	(1U << 0)	/* entries carry a priority 0..100 */
#define KVPOOL_PUBLISH_FLAGS	KVPOOL_PUBLISH_PRIORITY

/* kvpool_publish_entry.flags, out */
#define KVPOOL_PUBLISHED_DEDUP	(1U << 0)	/* hash present: id is that block, ours freed */

struct kvpool_publish_entry {
	__u8 hash[KVPOOL_HASH_BYTES];	/* in */
	__u32 id;		/* in: a block this fd owns; out: the block holding hash */
	__u32 priority;		/* in: with KVPOOL_PUBLISH_PRIORITY, else 0 */
	__u32 flags;		/* in: 0; out: KVPOOL_PUBLISHED_* */
	__u32 pad;		/* must be 0 */
};

/*
 * KVPOOL_IOC_PUBLISH: all entries or none.  Each entry leaves this fd one
 * reader reference on the block that holds its hash.
 */
struct kvpool_publish {
	__u64 entries;		/* in: user pointer to struct kvpool_publish_entry[count] */
	__u32 count;		/* in: 1..KVPOOL_MAX_BATCH */
	__u32 flags;		/* in: KVPOOL_PUBLISH_* */
	__u32 nr_dedup;		/* out (0 on input): entries that found their hash present */
	__u32 pad;		/* must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/*
 * KVPOOL_IOC_LOOKUP: the longest prefix of hashes[] present in the space.
 * One reader reference per hit; hits are written to ids[] and, when
 * devices is set, the residency device mask of each hit to devices[].
 */
struct kvpool_lookup {
	__u64 hashes;		/* in: user pointer to __u8[count][KVPOOL_HASH_BYTES] */
	__u64 ids;		/* out: user pointer to __u32[count]; nr_hits written */
	__u64 devices;		/* out, optional (0): user pointer to __u64[count] */
	__u32 count;		/* in: 1..KVPOOL_MAX_BATCH */
	__u32 flags;		/* in: must be 0 */
	__u32 nr_hits;		/* out (0 on input) */
	__u32 pad;		/* must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/*
 * KVPOOL_IOC_SPACE_DESTROY: unlink a space by name, like unlinking a file.
 * The name is free again at once and the space stops being persistent;
 * fds still joined keep working, get a KVPOOL_EVENT_SPACE_DESTROYED, and
 * the space is torn down when the last of them closes (a mapping holds its
 * fd, so teardown waits for live mappings; pinned pages wait on the pool's
 * held list).  Only through an fd whose opener owns the space or had
 * CAP_SYS_ADMIN.
 */
struct kvpool_space_destroy {
	char name[KVPOOL_NAME_MAX];	/* in */
	__u32 flags;		/* in: must be 0 */
	__u32 pad;		/* must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/*
 * Residency records: this fd says host block `block` holds a copy of GPU
 * block `gpu_block` on the device with device_uuid.  An ADD that succeeds
 * registers the device for this fd, giving it a slot (0..63) in the
 * space's device table if it has none; LOOKUP reports slots as bits.  A
 * slot is held while any fd has its device registered, and is free for
 * another device once none has (API 4): CLEAR and close unregister.
 * Records go away when the fd closes, on DEL or CLEAR, and when the host
 * block is freed or evicted.
 */
#define KVPOOL_MAX_DEVICES	64
enum kvpool_residency_op {
	KVPOOL_RESIDENCY_ADD = 0,	/* add or update; count 0: only get the slot */
	KVPOOL_RESIDENCY_DEL = 1,	/* remove this fd's records of these blocks */
	KVPOOL_RESIDENCY_CLEAR = 2,	/* remove all of this fd's records of the device */
};

struct kvpool_residency_entry {
	__u32 block;		/* host block: owned by or referenced by this fd */
	__u32 gpu_block;	/* ADD: the GPU block; DEL: ignored */
	__u64 reserved;		/* must be 0 (API 4: the entry was 8 bytes) */
};

struct kvpool_residency {
	__u8 device_uuid[16];	/* in: the GPU's UUID (cuDeviceGetUuid) */
	__u64 entries;		/* in: user pointer to struct kvpool_residency_entry[count] */
	__u32 count;		/* in: 0..KVPOOL_MAX_BATCH */
	__u32 op;		/* in: enum kvpool_residency_op */
	__u32 device_slot;	/* out (0 on input) */
	__u32 flags;		/* in: must be 0 */
	__u32 entry_bytes;	/* in: sizeof(struct kvpool_residency_entry) (API 4) */
	__u32 pad;		/* must be 0 */
	__u64 reserved;		/* must be 0 */
};

/* Why a block was evicted (events and statistics). */
enum kvpool_evict_cause {
	KVPOOL_EVICT_QUOTA = 0,		/* the space's quota was full */
	KVPOOL_EVICT_POOL = 1,		/* the pool was out of pages */
	KVPOOL_EVICT_TENANT = 2,	/* the owner's per-uid limit was reached */
	KVPOOL_EVICT_RECLAIM = 3,	/* host memory pressure (shrinker) */
	KVPOOL_EVICT_ADMIN = 4,		/* an administrator dropped the cache */
	KVPOOL_EVICT_CAUSES = 5,
};

/*
 * KVPOOL_IOC_SPACE_STATS: the joined space's prefix-cache figures; every
 * field but flags is out (0 on input).
 */
struct kvpool_space_stats {
	__u32 flags;		/* in: must be 0 */
	__u32 space_id;
	__u64 hits;		/* looked-up blocks found */
	__u64 misses;		/* looked-up blocks not served */
	__u64 inserts;		/* blocks published under a new hash */
	__u64 dedups;		/* published blocks whose hash was present */
	__u64 evictions[KVPOOL_EVICT_CAUSES];
	__u64 pressure;		/* allocations that had to evict */
	__u64 published_blocks;	/* with readers */
	__u64 cached_blocks;	/* without readers */
	__u64 hole_blocks;	/* given back under memory pressure, refilled on demand */
	__u64 readers;		/* reader references, all fds */
	__u64 my_refs;		/* reader references held by this fd */
	__u64 allocs;
	__u64 frees;
	__u64 reserved[4];	/* must be 0 */
};

/*
 * Events: read() on a joined fd returns whole struct kvpool_event records
 * (a buffer shorter than one is -EINVAL; none pending is -EAGAIN with
 * O_NONBLOCK, else read waits); poll() reports EPOLLIN while any are
 * pending.  seq counts from 1 per fd with no gaps, except that events
 * dropped because the queue was full (sysfs event_queue_max) are replaced
 * by one KVPOOL_EVENT_OVERFLOW whose count says how many seqs were skipped.
 */
enum kvpool_event_type {
	KVPOOL_EVENT_EVICTED = 1,	  /* a block this fd published or looked up */
	KVPOOL_EVENT_SPACE_DESTROYED = 2, /* SPACE_DESTROY or an admin */
	KVPOOL_EVENT_QUOTA_PRESSURE = 3,  /* an ALLOC in the space evicted (count) or failed (0) */
	KVPOOL_EVENT_OVERFLOW = 4,	  /* count events were lost before this one */
};

struct kvpool_event {
	__u64 seq;
	__u32 type;		/* enum kvpool_event_type */
	__u32 cause;		/* EVICTED, QUOTA_PRESSURE: enum kvpool_evict_cause */
	__u32 block;		/* EVICTED: the block id */
	__u32 count;		/* QUOTA_PRESSURE: blocks evicted; OVERFLOW: events lost */
	__u8 hash[KVPOOL_HASH_BYTES];	/* EVICTED: the block's hash */
	__u64 reserved;
};

#define KVPOOL_IOC_MAGIC	0xB7
#define KVPOOL_IOC_INFO		_IOWR(KVPOOL_IOC_MAGIC, 0x00, struct kvpool_info)
#define KVPOOL_IOC_SPACE_OPEN	_IOWR(KVPOOL_IOC_MAGIC, 0x01, struct kvpool_space_open)
#define KVPOOL_IOC_ALLOC	_IOW(KVPOOL_IOC_MAGIC, 0x02, struct kvpool_blocks)
#define KVPOOL_IOC_FREE		_IOW(KVPOOL_IOC_MAGIC, 0x03, struct kvpool_blocks)
#define KVPOOL_IOC_SPACE_INFO	_IOWR(KVPOOL_IOC_MAGIC, 0x04, struct kvpool_space_info)
#define KVPOOL_IOC_PUBLISH	_IOWR(KVPOOL_IOC_MAGIC, 0x05, struct kvpool_publish)
#define KVPOOL_IOC_LOOKUP	_IOWR(KVPOOL_IOC_MAGIC, 0x06, struct kvpool_lookup)
#define KVPOOL_IOC_RELEASE	_IOW(KVPOOL_IOC_MAGIC, 0x07, struct kvpool_blocks)
#define KVPOOL_IOC_SPACE_DESTROY _IOW(KVPOOL_IOC_MAGIC, 0x08, struct kvpool_space_destroy)
#define KVPOOL_IOC_RESIDENCY	_IOWR(KVPOOL_IOC_MAGIC, 0x09, struct kvpool_residency)
#define KVPOOL_IOC_SPACE_STATS	_IOWR(KVPOOL_IOC_MAGIC, 0x0A, struct kvpool_space_stats)

#endif /* _UAPI_LINUX_KVPOOL_H */
