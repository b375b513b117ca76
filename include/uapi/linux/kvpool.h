/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * kvpool: a host-wide pool of pinned pages handed out as KV-cache blocks.
 *
 * One open file descriptor of /dev/kvpool joins at most one space
 * (KVPOOL_IOC_SPACE_OPEN); mmap of that fd maps the space's range, where
 * block i lives at offset i * block_bytes.  Every struct is fixed-size,
 * 64-bit aligned and identical for 32- and 64-bit callers; arrays travel
 * through __u64 user pointers.  Reserved fields and unknown flags must be
 * zero, or the ioctl fails with -EINVAL.  See Documentation/kvpool.rst.
 */
#ifndef _UAPI_LINUX_KVPOOL_H
#define _UAPI_LINUX_KVPOOL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define KVPOOL_API_VERSION	1

/* Feature bits reported by KVPOOL_IOC_INFO. */
#define KVPOOL_FEAT_SPACES	(1ULL << 0)	/* spaces, alloc/free, mmap */
#define KVPOOL_FEAT_NUMA	(1ULL << 1)	/* NUMA policies honoured */
#define KVPOOL_FEATURES		(KVPOOL_FEAT_SPACES | KVPOOL_FEAT_NUMA)

#define KVPOOL_NAME_MAX		64	/* including the terminating NUL */
#define KVPOOL_MAX_BATCH	65536	/* ids per ALLOC or FREE call */
#define KVPOOL_MAX_NODES	64	/* bits in a node mask */
#define KVPOOL_MAX_SPACE_BYTES	(1ULL << 40)	/* largest quota */
#define KVPOOL_MAX_BLOCK_BYTES	(1ULL << 30)	/* largest block */

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
#define KVPOOL_SPACE_FLAGS	(KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL)

struct kvpool_space_open {
	char name[KVPOOL_NAME_MAX];	/* in: NUL-terminated, [A-Za-z0-9._-]+ */
	__u32 flags;		/* in: KVPOOL_SPACE_* */
	__u32 mode;		/* in, create: 0777 bits; joining needs r and w */
	__u64 block_bytes;	/* in: page multiple; on join 0 or the space's value */
	__u64 quota_bytes;	/* in, create: at least block_bytes */
	__u64 node_mask;	/* in, create: nodes for the policy */
	__u32 numa_policy;	/* in, create: enum kvpool_numa_policy */
	__u32 space_id;		/* out */
	__u32 uid;		/* out: owner */
	__u32 gid;		/* out: owner group */
	__u64 nr_blocks;	/* out: quota_bytes / block_bytes */
	__u64 map_bytes;	/* out: length of the mmap range */
	__u32 created;		/* out: 1 when this call created the space */
	__u32 pad;		/* must be 0 */
	__u64 reserved[4];	/* must be 0 */
};

/* KVPOOL_IOC_ALLOC and KVPOOL_IOC_FREE: all ids or none. */
struct kvpool_blocks {
	__u64 ids;		/* in: user pointer to __u32[count] */
	__u32 count;		/* in: 1..KVPOOL_MAX_BATCH */
	__u32 flags;		/* in: must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/* KVPOOL_IOC_SPACE_INFO: the joined space's state. */
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

#define KVPOOL_IOC_MAGIC	0xB7
#define KVPOOL_IOC_INFO		_IOWR(KVPOOL_IOC_MAGIC, 0x00, struct kvpool_info)
#define KVPOOL_IOC_SPACE_OPEN	_IOWR(KVPOOL_IOC_MAGIC, 0x01, struct kvpool_space_open)
#define KVPOOL_IOC_ALLOC	_IOWR(KVPOOL_IOC_MAGIC, 0x02, struct kvpool_blocks)
#define KVPOOL_IOC_FREE		_IOW(KVPOOL_IOC_MAGIC, 0x03, struct kvpool_blocks)
#define KVPOOL_IOC_SPACE_INFO	_IOWR(KVPOOL_IOC_MAGIC, 0x04, struct kvpool_space_info)

#endif /* _UAPI_LINUX_KVPOOL_H */
