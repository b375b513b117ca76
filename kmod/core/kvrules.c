// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * kvrules.c: the space namespace's rules, shared by the module and
 * libkvrt's embedded backend (kvrules.h says which caller uses what).
 */
#include "kvrules.h"
#include "kvcore.h"

bool kvc_space_name_valid(const char *name)
{
	size_t i, len;

	if (!name)
		return false;
	len = strnlen(name, KVC_NAME_MAX);
	if (!len || len == KVC_NAME_MAX)
		return false;
	for (i = 0; i < len; i++) {
		char c = name[i];

		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
		    !(c >= '0' && c <= '9') && c != '.' && c != '_' && c != '-')
			return false;
	}
	return true;
}

int kvc_space_open_shape(kvc_u32 flags, kvc_u32 expect_uid, bool has_create_fields)
{
	if (flags & ~KVC_OPEN_FLAGS)
		return -EINVAL;
	if ((flags & (KVC_OPEN_EXCL | KVC_OPEN_PERSIST)) && !(flags & KVC_OPEN_CREATE))
		return -EINVAL;
	/* A foreign join never creates; expect_uid means nothing without it. */
	if ((flags & KVC_OPEN_FOREIGN) && (flags & KVC_OPEN_CREATE))
		return -EINVAL;
	if (!(flags & KVC_OPEN_FOREIGN) && expect_uid)
		return -EINVAL;
	if (!(flags & KVC_OPEN_CREATE) && has_create_fields)
		return -EINVAL;
	return 0;
}

int kvc_space_create_check(const struct kvc_space_create *c, kvc_u64 page_size,
			   kvc_u64 pool_node_mask)
{
	if (!c->block_bytes || c->block_bytes % page_size)
		return -EINVAL;
	if (c->block_bytes > KVC_MAX_BLOCK_BYTES)
		return -E2BIG;
	if (c->quota_bytes < c->block_bytes)
		return -EINVAL;
	if (c->quota_bytes > KVC_MAX_SPACE_BYTES)
		return -E2BIG;
	if (c->mode & ~KVC_MODE_MASK)
		return -EINVAL;
	if (c->numa_policy > KVC_NUMA_INTERLEAVE)
		return -EINVAL;
	if (c->node_mask & ~pool_node_mask)
		return -EINVAL;
	if (c->numa_policy == KVC_NUMA_BIND && !c->node_mask)
		return -EINVAL;
	return 0;
}

bool kvc_mode_permits(kvc_u32 mode, enum kvc_mode_class class)
{
	if (class == KVC_CLASS_OWNER)
		mode >>= 6;
	else if (class == KVC_CLASS_GROUP)
		mode >>= 3;
	return (mode & 06) == 06;
}

int kvc_space_open_decide(const struct kvc_space_open_check *c)
{
	if (!c->found)
		return (c->flags & KVC_OPEN_CREATE) ? 0 : -ENOENT;
	if ((c->flags & KVC_OPEN_CREATE) && (c->flags & KVC_OPEN_EXCL))
		return -EEXIST;
	/* Create-or-join must not silently join a squatter's space. */
	if (!c->owner_accepted)
		return (c->flags & KVC_OPEN_CREATE) ? -EEXIST : -EACCES;
	if (c->want_block_bytes && c->want_block_bytes != c->block_bytes)
		return -EINVAL;
	if (!kvc_mode_permits(c->mode, c->class) && !(c->privileged && c->privileged(c->ctx)))
		return -EACCES;
	return 0;
}
