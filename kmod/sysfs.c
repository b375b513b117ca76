// SPDX-License-Identifier: GPL-2.0
/*
 * sysfs under /sys/class/misc/kvpool/: pool size and limits, counters, and
 * one nodeN/ directory per pool node.  Documented in
 * Documentation/ABI/testing/sysfs-class-misc-kvpool.
 */
#include <linux/ctype.h>
#include <linux/device.h>
#include <linux/kobject.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "kvpool.h"

static ssize_t pool_bytes_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	u64 reserved, free, held;

	kvp_pool_totals(&reserved, &free, &held);
	return sysfs_emit(buf, "%llu\n", reserved);
}

static ssize_t pool_bytes_store(struct device *dev, struct device_attribute *attr,
				const char *buf, size_t count)
{
	char *end;
	u64 bytes;
	int ret;

	/* memparse() reads a bare suffix such as "M" as 0: require a digit. */
	if (!isdigit(buf[0]))
		return -EINVAL;
	bytes = memparse(buf, &end);
	if (end == buf || (*end && *end != '\n') || (*end == '\n' && end[1]))
		return -EINVAL;
	ret = kvp_pool_resize(bytes);
	return ret ? ret : count;
}
static DEVICE_ATTR_RW(pool_bytes);

static ssize_t free_bytes_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	u64 reserved, free, held;

	kvp_pool_totals(&reserved, &free, &held);
	return sysfs_emit(buf, "%llu\n", free);
}
static DEVICE_ATTR_RO(free_bytes);

static ssize_t held_bytes_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	u64 reserved, free, held;

	kvp_pool_totals(&reserved, &free, &held);
	return sysfs_emit(buf, "%llu\n", held);
}
static DEVICE_ATTR_RO(held_bytes);

static ssize_t chunk_bytes_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lu\n", KVP_CHUNK_BYTES);
}
static DEVICE_ATTR_RO(chunk_bytes);

static ssize_t max_batch_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", KVPOOL_MAX_BATCH);
}
static DEVICE_ATTR_RO(max_batch);

static ssize_t max_space_bytes_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", KVPOOL_MAX_SPACE_BYTES);
}
static DEVICE_ATTR_RO(max_space_bytes);

static ssize_t spaces_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(kvp_nr_spaces));
}
static DEVICE_ATTR_RO(spaces);

#define KVP_COUNTER_ATTR(name)							\
static ssize_t name##_show(struct device *dev, struct device_attribute *attr,	\
			   char *buf)						\
{										\
	return sysfs_emit(buf, "%lld\n", atomic64_read(&kvp_pool.name));	\
}										\
static DEVICE_ATTR_RO(name)

KVP_COUNTER_ATTR(allocs);
KVP_COUNTER_ATTR(frees);
KVP_COUNTER_ATTR(alloc_failures);
KVP_COUNTER_ATTR(zeroed_chunks);

static struct attribute *kvp_dev_attrs[] = {
	&dev_attr_pool_bytes.attr,
	&dev_attr_free_bytes.attr,
	&dev_attr_held_bytes.attr,
	&dev_attr_chunk_bytes.attr,
	&dev_attr_max_batch.attr,
	&dev_attr_max_space_bytes.attr,
	&dev_attr_spaces.attr,
	&dev_attr_allocs.attr,
	&dev_attr_frees.attr,
	&dev_attr_alloc_failures.attr,
	&dev_attr_zeroed_chunks.attr,
	NULL,
};

static const struct attribute_group kvp_dev_group = {
	.attrs = kvp_dev_attrs,
};

const struct attribute_group *kvp_dev_groups[] = {
	&kvp_dev_group,
	NULL,
};

/* nodeN/ directories: the kobject's index in kvp_node_kobjs is the node id. */
static struct kobject *kvp_node_kobjs[KVPOOL_MAX_NODES];

static struct kvp_node *kvp_kobj_node(struct kobject *kobj)
{
	int nid;

	for (nid = 0; nid < KVPOOL_MAX_NODES; nid++)
		if (kvp_node_kobjs[nid] == kobj)
			return kvp_pool.nodes[nid];
	return NULL;
}

enum kvp_node_field { KVP_NODE_RESERVED, KVP_NODE_FREE, KVP_NODE_HELD, KVP_NODE_IN_SPACES };

static ssize_t kvp_node_field_show(struct kobject *kobj, char *buf, enum kvp_node_field field)
{
	struct kvp_node *node = kvp_kobj_node(kobj);
	u64 val = 0;

	if (!node)
		return -ENODEV;
	spin_lock(&node->lock);
	switch (field) {
	case KVP_NODE_RESERVED:
		val = node->reserved_bytes;
		break;
	case KVP_NODE_FREE:
		val = node->free_bytes;
		break;
	case KVP_NODE_HELD:
		val = node->held_bytes;
		break;
	case KVP_NODE_IN_SPACES:
		val = node->in_spaces_bytes;
		break;
	}
	spin_unlock(&node->lock);
	return sysfs_emit(buf, "%llu\n", val);
}

#define KVP_NODE_ATTR(name, field)						\
static ssize_t node_##name##_show(struct kobject *kobj,			\
				  struct kobj_attribute *attr, char *buf)	\
{										\
	return kvp_node_field_show(kobj, buf, field);				\
}										\
static struct kobj_attribute kvp_node_##name##_attr =				\
	__ATTR(name, 0444, node_##name##_show, NULL)

KVP_NODE_ATTR(reserved_bytes, KVP_NODE_RESERVED);
KVP_NODE_ATTR(free_bytes, KVP_NODE_FREE);
KVP_NODE_ATTR(held_bytes, KVP_NODE_HELD);
KVP_NODE_ATTR(in_spaces_bytes, KVP_NODE_IN_SPACES);

static struct attribute *kvp_node_attrs[] = {
	&kvp_node_reserved_bytes_attr.attr,
	&kvp_node_free_bytes_attr.attr,
	&kvp_node_held_bytes_attr.attr,
	&kvp_node_in_spaces_bytes_attr.attr,
	NULL,
};

static const struct attribute_group kvp_node_group = {
	.attrs = kvp_node_attrs,
};

int kvp_sysfs_nodes_init(struct device *dev)
{
	char name[16];
	int nid, ret;

	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		snprintf(name, sizeof(name), "node%d", nid);
		kvp_node_kobjs[nid] = kobject_create_and_add(name, &dev->kobj);
		if (!kvp_node_kobjs[nid]) {
			ret = -ENOMEM;
			goto out_remove;
		}
		ret = sysfs_create_group(kvp_node_kobjs[nid], &kvp_node_group);
		if (ret) {
			kobject_put(kvp_node_kobjs[nid]);
			kvp_node_kobjs[nid] = NULL;
			goto out_remove;
		}
	}
	return 0;

out_remove:
	kvp_sysfs_nodes_exit();
	return ret;
}

void kvp_sysfs_nodes_exit(void)
{
	int nid;

	for (nid = 0; nid < KVPOOL_MAX_NODES; nid++) {
		if (!kvp_node_kobjs[nid])
			continue;
		sysfs_remove_group(kvp_node_kobjs[nid], &kvp_node_group);
		kobject_put(kvp_node_kobjs[nid]);
		kvp_node_kobjs[nid] = NULL;
	}
}
