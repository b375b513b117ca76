/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * kvrules: the rules of the space namespace and of the event queue, in
 * portable C, written once for both hosts.  The module (kmod/main.c,
 * space.c, events.c) and libkvrt (kvrt.c's argument checks, the embedded
 * backend) call these, so the embedded pool cannot drift from the module.
 * Documentation/kvpool.rst states them for users.
 *
 * What differs by host stays with the host: who the caller is (the opener's
 * creds, or the process's ids) and the privilege that overrides mode bits
 * (CAP_SYS_ADMIN, or euid 0), which the open check asks for through a
 * callback and only when the mode bits say no.
 */
#ifndef KVRULES_H
#define KVRULES_H

#include "kvc_shim.h"

/* Numerically equal to the uAPI's KVPOOL_* and kvrt.h's KVRT_* values. */
#define KVC_NAME_MAX		64		/* with the NUL */
#define KVC_MAX_SPACE_BYTES	(1ULL << 40)	/* largest quota */
#define KVC_MAX_BLOCK_BYTES	(1ULL << 30)	/* largest block */
#define KVC_MODE_MASK		0777U		/* rwx for owner, group, others */

#define KVC_OPEN_CREATE		(1U << 0)
#define KVC_OPEN_EXCL		(1U << 1)
#define KVC_OPEN_PERSIST	(1U << 2)
#define KVC_OPEN_FOREIGN	(1U << 3)
#define KVC_OPEN_FLAGS		(KVC_OPEN_CREATE | KVC_OPEN_EXCL | KVC_OPEN_PERSIST | \
				 KVC_OPEN_FOREIGN)

/*
 * A space name: 1 to KVC_NAME_MAX - 1 bytes of [A-Za-z0-9._-], NUL within
 * the first KVC_NAME_MAX bytes.  ASCII only, whatever the host's ctype says.
 */
bool kvc_space_name_valid(const char *name);

/*
 * The shape of an open request, before its name is looked at: known flags;
 * EXCL and PERSIST only with CREATE; FOREIGN never with CREATE; expect_uid
 * only with FOREIGN; and a plain join carries no create field (mode, quota,
 * node mask, NUMA policy: has_create_fields).  0 or -EINVAL.
 */
int kvc_space_open_shape(kvc_u32 flags, kvc_u32 expect_uid, bool has_create_fields);

/* The fields a create gives, checked whether the open creates or joins. */
struct kvc_space_create {
	kvc_u64 block_bytes;
	kvc_u64 quota_bytes;
	kvc_u64 node_mask;
	kvc_u32 mode;
	kvc_u32 numa_policy;	/* enum kvc_numa_policy */
};

/*
 * Create fields, in this order: block_bytes a non-zero multiple of the
 * page (-EINVAL) and at most KVC_MAX_BLOCK_BYTES (-E2BIG); quota at least
 * one block (-EINVAL) and at most KVC_MAX_SPACE_BYTES (-E2BIG); mode within
 * KVC_MODE_MASK, a known policy, nodes that have pool pages, and BIND with
 * at least one node (-EINVAL).
 */
int kvc_space_create_check(const struct kvc_space_create *c, kvc_u64 page_size,
			   kvc_u64 pool_node_mask);

/* Which of a space's mode triplets applies to the caller. */
enum kvc_mode_class {
	KVC_CLASS_OWNER,
	KVC_CLASS_GROUP,
	KVC_CLASS_OTHER,
};

/* Like a file opened O_RDWR: both r and w in the caller's triplet. */
bool kvc_mode_permits(kvc_u32 mode, enum kvc_mode_class class);

/* An open of a name, as far as the rules go. */
struct kvc_space_open_check {
	kvc_u32 flags;			/* KVC_OPEN_* */
	bool found;			/* the name is taken */
	/* The rest only when found: */
	bool owner_accepted;		/* owned by the caller, or by expect_uid with FOREIGN */
	kvc_u64 want_block_bytes;	/* the caller's, 0 for any */
	kvc_u64 block_bytes;		/* the space's */
	kvc_u32 mode;			/* the space's */
	enum kvc_mode_class class;	/* the caller's */
	/* Asked only when the mode bits deny: may the caller override them? */
	bool (*privileged)(const void *ctx);
	const void *ctx;
};

/*
 * Whether the open may go on, and the errno when not, in the module's
 * order.  Absent name: -ENOENT without CREATE, else 0 (create).  Taken
 * name: -EEXIST for CREATE|EXCL; another owner than the caller accepts,
 * -EEXIST with CREATE (a squatter's name) and -EACCES without; a block
 * size other than the space's, -EINVAL; no read-write right, -EACCES;
 * else 0 (join).
 */
int kvc_space_open_decide(const struct kvc_space_open_check *c);

/*
 * The event queue's loss rule.  An event that finds no room is dropped and
 * counted; nothing more is queued until one OVERFLOW record carrying the
 * count has been, so the reader sees the gap where it happened.  A record's
 * count is 32 bits: take the part that fits, the rest stays owed for the
 * next record.  Returns the record's count and lowers *lost by it.
 */
static inline kvc_u32 kvc_overflow_take(kvc_u64 *lost)
{
	kvc_u32 count = *lost > 0xffffffffULL ? 0xffffffffU : (kvc_u32)*lost;

	*lost -= count;
	return count;
}

#endif /* KVRULES_H */
