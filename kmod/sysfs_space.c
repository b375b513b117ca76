// SPDX-License-Identifier: GPL-2.0
/*
 * sysfs space/ID/: one directory per space with its usage and prefix-cache
 * figures, for admins and for kvctl.  Directories are named by space id,
 * not name, because a destroyed space keeps running under its old name
 * while a new space takes that name.
 */
#include <linux/device.h>
#include <linux/kobject.h>
#include <linux/slab.h>
#include <linux/sysfs.h>

#include "kvpool_internal.h"

struct kvp_space_kobj {
	struct kobject kobj;
	struct kvp_space *space;	/* valid until kvp_space_kobj_del() returns */
};

static struct kobject *kvp_space_dir;

ssize_t kvp_evictions_emit(char *buf, const u64 *n)
{
	return sysfs_emit(buf, "quota=%llu pool=%llu tenant=%llu reclaim=%llu admin=%llu\n",
			  n[KVC_EVICT_QUOTA], n[KVC_EVICT_POOL], n[KVC_EVICT_TENANT],
			  n[KVC_EVICT_RECLAIM], n[KVC_EVICT_ADMIN]);
}

enum kvp_space_field {
	KVP_SF_NAME, KVP_SF_UID, KVP_SF_PERSISTENT, KVP_SF_CLIENTS, KVP_SF_BLOCK_BYTES,
	KVP_SF_QUOTA_BYTES, KVP_SF_BACKED_BYTES, KVP_SF_FREE, KVP_SF_OWNED, KVP_SF_PUBLISHED,
	KVP_SF_CACHED, KVP_SF_HOLES, KVP_SF_HITS, KVP_SF_MISSES, KVP_SF_HIT_RATE,
	KVP_SF_INSERTS, KVP_SF_DEDUPS, KVP_SF_EVICTIONS, KVP_SF_UNLINKED, KVP_SF_READERS,
	KVP_SF_MODE, KVP_SF_GID, KVP_SF_POLICY,
};

static ssize_t kvp_space_field_show(struct kobject *kobj, char *buf, enum kvp_space_field f)
{
	struct kvp_space *space = container_of(kobj, struct kvp_space_kobj, kobj)->space;
	const struct kvc_space *c = &space->core;
	u64 evictions[KVC_EVICT_CAUSES], v = 0, chunk_bytes = 0;
	struct kvp_chunk *chunk;
	ssize_t ret;

	/* Fields kept under kvp_spaces_lock: racy reads of flags and counts are fine. */
	switch (f) {
	case KVP_SF_NAME:
		return sysfs_emit(buf, "%s\n", space->name);
	case KVP_SF_UID:
		return sysfs_emit(buf, "%u\n", from_kuid(&init_user_ns, space->uid));
	case KVP_SF_PERSISTENT:
		return sysfs_emit(buf, "%d\n", READ_ONCE(space->persistent) &&
				  !READ_ONCE(space->unlinked));
	case KVP_SF_CLIENTS:
		return sysfs_emit(buf, "%u\n", READ_ONCE(space->nr_clients));
	case KVP_SF_UNLINKED:
		return sysfs_emit(buf, "%d\n", READ_ONCE(space->unlinked));
	case KVP_SF_MODE:
		return sysfs_emit(buf, "%04o\n", space->mode);
	case KVP_SF_GID:
		return sysfs_emit(buf, "%u\n", from_kgid(&init_user_ns, space->gid));
	case KVP_SF_POLICY:
		return sysfs_emit(buf, "%s 0x%llx\n", kvp_policy_name(space->numa_policy),
				  space->node_mask);
	default:
		break;
	}
	if (mutex_lock_killable(&space->lock))
		return -EINTR;
	switch (f) {
	case KVP_SF_BLOCK_BYTES:
		v = c->block_bytes;
		break;
	case KVP_SF_QUOTA_BYTES:
		v = c->nr_blocks * c->block_bytes;
		break;
	case KVP_SF_BACKED_BYTES:
		list_for_each_entry(chunk, &space->chunks, link)
			chunk_bytes += kvp_chunk_bytes(chunk);
		v = chunk_bytes;
		break;
	case KVP_SF_FREE:
		v = c->nr_free;
		break;
	case KVP_SF_OWNED:
		v = c->nr_owned;
		break;
	case KVP_SF_PUBLISHED:
		v = c->nr_published;
		break;
	case KVP_SF_CACHED:
		v = c->nr_cached;
		break;
	case KVP_SF_HOLES:
		v = c->nr_holes;
		break;
	case KVP_SF_READERS:
		v = c->nr_readers;
		break;
	case KVP_SF_HITS:
		v = c->stats.hits;
		break;
	case KVP_SF_MISSES:
		v = c->stats.misses;
		break;
	case KVP_SF_HIT_RATE:
		/* Per mille of looked-up blocks found; 0 before any lookup. */
		v = c->stats.hits + c->stats.misses ?
		    div64_u64(c->stats.hits * 1000, c->stats.hits + c->stats.misses) : 0;
		break;
	case KVP_SF_INSERTS:
		v = c->stats.inserts;
		break;
	case KVP_SF_DEDUPS:
		v = c->stats.dedups;
		break;
	case KVP_SF_EVICTIONS:
		memcpy(evictions, c->stats.evictions, sizeof(evictions));
		mutex_unlock(&space->lock);
		return kvp_evictions_emit(buf, evictions);
	default:
		break;
	}
	mutex_unlock(&space->lock);
	ret = sysfs_emit(buf, "%llu\n", v);
	return ret;
}

#define KVP_SPACE_ATTR(name, field)						\
static ssize_t space_##name##_show(struct kobject *kobj,			\
				   struct kobj_attribute *attr, char *buf)	\
{										\
	return kvp_space_field_show(kobj, buf, field);				\
}										\
static struct kobj_attribute kvp_space_##name##_attr =				\
	__ATTR(name, 0400, space_##name##_show, NULL)

KVP_SPACE_ATTR(name, KVP_SF_NAME);
KVP_SPACE_ATTR(uid, KVP_SF_UID);
KVP_SPACE_ATTR(persistent, KVP_SF_PERSISTENT);
KVP_SPACE_ATTR(clients, KVP_SF_CLIENTS);
KVP_SPACE_ATTR(block_bytes, KVP_SF_BLOCK_BYTES);
KVP_SPACE_ATTR(quota_bytes, KVP_SF_QUOTA_BYTES);
KVP_SPACE_ATTR(backed_bytes, KVP_SF_BACKED_BYTES);
KVP_SPACE_ATTR(free_blocks, KVP_SF_FREE);
KVP_SPACE_ATTR(owned_blocks, KVP_SF_OWNED);
KVP_SPACE_ATTR(published_blocks, KVP_SF_PUBLISHED);
KVP_SPACE_ATTR(cached_blocks, KVP_SF_CACHED);
KVP_SPACE_ATTR(hole_blocks, KVP_SF_HOLES);
KVP_SPACE_ATTR(hits, KVP_SF_HITS);
KVP_SPACE_ATTR(misses, KVP_SF_MISSES);
KVP_SPACE_ATTR(hit_rate, KVP_SF_HIT_RATE);
KVP_SPACE_ATTR(inserts, KVP_SF_INSERTS);
KVP_SPACE_ATTR(dedups, KVP_SF_DEDUPS);
KVP_SPACE_ATTR(evictions, KVP_SF_EVICTIONS);
KVP_SPACE_ATTR(unlinked, KVP_SF_UNLINKED);
KVP_SPACE_ATTR(readers, KVP_SF_READERS);
KVP_SPACE_ATTR(mode, KVP_SF_MODE);
KVP_SPACE_ATTR(gid, KVP_SF_GID);
KVP_SPACE_ATTR(numa_policy, KVP_SF_POLICY);

static struct attribute *kvp_space_attrs[] = {
	&kvp_space_name_attr.attr,
	&kvp_space_uid_attr.attr,
	&kvp_space_persistent_attr.attr,
	&kvp_space_clients_attr.attr,
	&kvp_space_block_bytes_attr.attr,
	&kvp_space_quota_bytes_attr.attr,
	&kvp_space_backed_bytes_attr.attr,
	&kvp_space_free_blocks_attr.attr,
	&kvp_space_owned_blocks_attr.attr,
	&kvp_space_published_blocks_attr.attr,
	&kvp_space_cached_blocks_attr.attr,
	&kvp_space_hole_blocks_attr.attr,
	&kvp_space_hits_attr.attr,
	&kvp_space_misses_attr.attr,
	&kvp_space_hit_rate_attr.attr,
	&kvp_space_inserts_attr.attr,
	&kvp_space_dedups_attr.attr,
	&kvp_space_evictions_attr.attr,
	&kvp_space_unlinked_attr.attr,
	&kvp_space_readers_attr.attr,
	&kvp_space_mode_attr.attr,
	&kvp_space_gid_attr.attr,
	&kvp_space_numa_policy_attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(kvp_space);

static void kvp_space_kobj_release(struct kobject *kobj)
{
	kfree(container_of(kobj, struct kvp_space_kobj, kobj));
}

static const struct kobj_type kvp_space_ktype = {
	.release = kvp_space_kobj_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = kvp_space_groups,
};

int kvp_space_kobj_add(struct kvp_space *space)
{
	struct kvp_space_kobj *sk;
	int ret;

	if (!kvp_space_dir)
		return -ENODEV;
	sk = kzalloc(sizeof(*sk), GFP_KERNEL);
	if (!sk)
		return -ENOMEM;
	sk->space = space;
	ret = kobject_init_and_add(&sk->kobj, &kvp_space_ktype, kvp_space_dir, "%u", space->id);
	if (ret) {
		kobject_put(&sk->kobj);
		return ret;
	}
	space->kobj = sk;
	return 0;
}

/* After this returns no attribute of the space runs or will run. */
void kvp_space_kobj_del(struct kvp_space *space)
{
	if (!space->kobj)
		return;
	kobject_del(&space->kobj->kobj);
	kobject_put(&space->kobj->kobj);
	space->kobj = NULL;
}

int kvp_sysfs_spaces_init(struct device *dev)
{
	kvp_space_dir = kobject_create_and_add("space", &dev->kobj);
	return kvp_space_dir ? 0 : -ENOMEM;
}

void kvp_sysfs_spaces_exit(void)
{
	kobject_put(kvp_space_dir);
	kvp_space_dir = NULL;
}
