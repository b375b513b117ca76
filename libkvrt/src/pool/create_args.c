// SPDX-License-Identifier: MIT
/*
 * create_args.c: the create checks both backends make on kvrt_space_opts
 * (kmod/core's kvrules), beside the ops tables that call them.
 */
#include "internal.h"

/*
 * KVPOOL_IOC_SPACE_OPEN's create checks, in its order: with CREATE they
 * apply whether the open creates or joins (kmod API 4; libkvrt makes them
 * itself for older modules and for the embedded backend).
 */
int kvrt_create_args_valid(const struct kvrt_space_opts *o, uint32_t page_size,
			   uint64_t pool_node_mask)
{
	const struct kvc_space_create create = {
		.block_bytes = o->block_bytes,
		.quota_bytes = o->quota_bytes,
		.node_mask = o->node_mask,
		.mode = o->mode,
		.numa_policy = (uint32_t)o->numa_policy,
	};

	return kvc_space_create_check(&create, page_size, pool_node_mask);
}
