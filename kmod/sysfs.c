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

#include "kvpool_internal.h"

static ssize_t pool_bytes_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	u64 reserved, free, held;

	kvp_pool_totals(&reserved, &free, &held);
	return sysfs_emit(buf, "%llu\n", reserved);
}

/*
 * A whole decimal u64 with an optional K/M/G/T/P/E suffix and newline,
 * nothing else.  Not memparse(): it wraps silently on overflow, and a
 * wrapped limit of 0 would mean "unlimited".
 */
static int kvp_parse_bytes(const char *buf, u64 *out)
{
	static const char suffixes[] = "KMGTPE";
	unsigned int shift = 0;
	char digits[24];
	size_t n = 0;
	const char *s;
	u64 v;

	while (isdigit(buf[n])) {
		if (n == sizeof(digits) - 1)
			return -EINVAL;
		digits[n] = buf[n];
		n++;
	}
	digits[n] = 0;
	if (!n || kstrtou64(digits, 10, &v))
		return -EINVAL;
	s = buf[n] ? strchr(suffixes, toupper(buf[n])) : NULL;
	if (s) {
		shift = 10 * (unsigned int)(s - suffixes + 1);
		n++;
	}
	if (buf[n] == '\n')
		n++;
	if (buf[n] || (shift && v > (U64_MAX >> shift)))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

static ssize_t pool_bytes_store(struct device *dev, struct device_attribute *attr,
				const char *buf, size_t count)
{
	u64 bytes;
	int ret;

	if (kvp_parse_bytes(buf, &bytes))
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
KVP_COUNTER_ATTR(reclaimed_bytes);

struct kvp_tunables kvp_tun = {
	.shrinker_enabled = true,
	.event_queue_max = 65536,
	.refs_per_fd_max = KVC_REFS_MAX,
	.spaces_per_uid_max = 1024,
};

static ssize_t shrinker_enabled_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", READ_ONCE(kvp_tun.shrinker_enabled));
}

static ssize_t shrinker_enabled_store(struct device *dev, struct device_attribute *attr,
				      const char *buf, size_t count)
{
	bool on;

	if (kstrtobool(buf, &on))
		return -EINVAL;
	WRITE_ONCE(kvp_tun.shrinker_enabled, on);
	return count;
}
static DEVICE_ATTR_RW(shrinker_enabled);

static ssize_t event_queue_max_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(kvp_tun.event_queue_max));
}

static ssize_t event_queue_max_store(struct device *dev, struct device_attribute *attr,
				     const char *buf, size_t count)
{
	u32 v;

	if (kstrtou32(buf, 10, &v) || v < KVP_EVENT_QUEUE_MIN || v > KVP_EVENT_QUEUE_MAX)
		return -EINVAL;
	WRITE_ONCE(kvp_tun.event_queue_max, v);
	return count;
}
static DEVICE_ATTR_RW(event_queue_max);

static ssize_t refs_per_fd_max_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(kvp_tun.refs_per_fd_max));
}

static ssize_t refs_per_fd_max_store(struct device *dev, struct device_attribute *attr,
				     const char *buf, size_t count)
{
	u32 v;

	/* Up to the per-block bound: no single fd may fill a block's count. */
	if (kstrtou32(buf, 10, &v) || !v || v >= KVC_READERS_MAX)
		return -EINVAL;
	WRITE_ONCE(kvp_tun.refs_per_fd_max, v);
	return count;
}
static DEVICE_ATTR_RW(refs_per_fd_max);

static ssize_t spaces_per_uid_max_show(struct device *dev, struct device_attribute *attr,
				       char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(kvp_tun.spaces_per_uid_max));
}

static ssize_t spaces_per_uid_max_store(struct device *dev, struct device_attribute *attr,
					const char *buf, size_t count)
{
	u32 v;

	if (kstrtou32(buf, 10, &v))
		return -EINVAL;
	/* Lowering it never takes spaces away: creates fail until under it. */
	WRITE_ONCE(kvp_tun.spaces_per_uid_max, v);
	return count;
}
static DEVICE_ATTR_RW(spaces_per_uid_max);

/* A byte-size tunable: any size kvp_parse_bytes() takes. */
#define KVP_BYTES_TUNABLE(name, field)						\
static ssize_t name##_show(struct device *dev, struct device_attribute *attr,	\
			   char *buf)						\
{										\
	return sysfs_emit(buf, "%llu\n", READ_ONCE(kvp_tun.field));		\
}										\
static ssize_t name##_store(struct device *dev, struct device_attribute *attr,	\
			    const char *buf, size_t count)			\
{										\
	u64 v;									\
										\
	if (kvp_parse_bytes(buf, &v))						\
		return -EINVAL;							\
	WRITE_ONCE(kvp_tun.field, v);						\
	return count;								\
}										\
static DEVICE_ATTR_RW(name)

KVP_BYTES_TUNABLE(min_cached_bytes, min_cached_bytes);
KVP_BYTES_TUNABLE(uid_limit_default_bytes, uid_limit_default);

/* Every uid's usage: root's alone (mode 0600), like the per-space files. */
static ssize_t uid_limit_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return kvp_tenants_emit(buf);
}

/* "UID BYTES": exactly two fields; BYTES 0 removes the uid's limit. */
static ssize_t uid_limit_store(struct device *dev, struct device_attribute *attr,
			       const char *buf, size_t count)
{
	char copy[64], *p = copy, *uid_s, *bytes_s;
	kuid_t kuid;
	u64 bytes;
	u32 uid;
	int ret;

	if (count >= sizeof(copy))
		return -EINVAL;
	memcpy(copy, buf, count);
	copy[count] = 0;
	uid_s = strsep(&p, " ");
	bytes_s = p;
	if (!uid_s || !bytes_s || kstrtou32(uid_s, 10, &uid) || kvp_parse_bytes(bytes_s, &bytes))
		return -EINVAL;
	/* The same namespace the read side prints: the initial one. */
	kuid = make_kuid(&init_user_ns, uid);
	if (!uid_valid(kuid))
		return -EINVAL;
	ret = kvp_tenant_set_limit(kuid, bytes);
	return ret ? ret : count;
}
static DEVICE_ATTR_ADMIN_RW(uid_limit);

/* A space name from a sysfs write: one line, the trailing newline dropped. */
static int kvp_sysfs_name(const char *buf, size_t count, char *name)
{
	if (count && buf[count - 1] == '\n')
		count--;
	if (!count || count >= KVPOOL_NAME_MAX || memchr(buf, '\n', count))
		return -EINVAL;
	memcpy(name, buf, count);
	name[count] = 0;
	return 0;
}

static ssize_t destroy_space_store(struct device *dev, struct device_attribute *attr,
				   const char *buf, size_t count)
{
	char name[KVPOOL_NAME_MAX];
	int ret = kvp_sysfs_name(buf, count, name);

	if (!ret)
		ret = kvp_space_destroy(name, NULL);
	return ret ? ret : count;
}
static DEVICE_ATTR_WO(destroy_space);

static ssize_t drop_cached_store(struct device *dev, struct device_attribute *attr,
				 const char *buf, size_t count)
{
	char name[KVPOOL_NAME_MAX];
	int ret = kvp_sysfs_name(buf, count, name);

	if (!ret)
		ret = kvp_space_drop_cached(name);
	return ret ? ret : count;
}
static DEVICE_ATTR_WO(drop_cached);

/* Prefix-cache figures of all spaces, torn-down ones included. */
struct kvp_totals {
	struct kvc_space_stats st;
	u64 cached_bytes, published_bytes;	/* live spaces */
};

/* kvp_stats_add() of a live space's counters, read without its lock. */
static void kvp_stats_add_live(struct kvc_space_stats *to, const struct kvc_space_stats *from)
{
	int i;

	to->hits += READ_ONCE(from->hits);
	to->misses += READ_ONCE(from->misses);
	to->inserts += READ_ONCE(from->inserts);
	to->dedups += READ_ONCE(from->dedups);
	for (i = 0; i < KVC_EVICT_CAUSES; i++)
		to->evictions[i] += READ_ONCE(from->evictions[i]);
}

/*
 * Any uid reads these, so no space's lock is waited for: that would hold
 * kvp_spaces_lock, and with it every open and close, for as long as one
 * space's lock is held.  kvp_spaces_lock keeps the spaces listed; their
 * counters are read as they stand, each a word written under its lock.
 */
static int kvp_totals(struct kvp_totals *t)
{
	struct kvp_space *space;

	memset(t, 0, sizeof(*t));
	if (mutex_lock_killable(&kvp_spaces_lock))
		return -EINTR;
	kvp_stats_add(&t->st, &kvp_dead_stats);
	list_for_each_entry(space, &kvp_spaces, link) {
		const struct kvc_space *c = &space->core;

		kvp_stats_add_live(&t->st, &c->stats);
		t->cached_bytes += READ_ONCE(c->nr_cached) * c->block_bytes;
		t->published_bytes += READ_ONCE(c->nr_published) * c->block_bytes;
	}
	mutex_unlock(&kvp_spaces_lock);
	return 0;
}

#define KVP_TOTAL_ATTR(name, field)						\
static ssize_t name##_show(struct device *dev, struct device_attribute *attr,	\
			   char *buf)						\
{										\
	struct kvp_totals t;							\
										\
	if (kvp_totals(&t))							\
		return -EINTR;							\
	return sysfs_emit(buf, "%llu\n", t.field);				\
}										\
static DEVICE_ATTR_RO(name)

KVP_TOTAL_ATTR(prefix_hits, st.hits);
KVP_TOTAL_ATTR(prefix_misses, st.misses);
KVP_TOTAL_ATTR(prefix_inserts, st.inserts);
KVP_TOTAL_ATTR(prefix_dedups, st.dedups);
KVP_TOTAL_ATTR(cached_bytes, cached_bytes);
KVP_TOTAL_ATTR(published_bytes, published_bytes);

static ssize_t evictions_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct kvp_totals t;

	if (kvp_totals(&t))
		return -EINTR;
	return kvp_evictions_emit(buf, t.st.evictions);
}
static DEVICE_ATTR_RO(evictions);

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
	&dev_attr_reclaimed_bytes.attr,
	&dev_attr_shrinker_enabled.attr,
	&dev_attr_min_cached_bytes.attr,
	&dev_attr_event_queue_max.attr,
	&dev_attr_refs_per_fd_max.attr,
	&dev_attr_spaces_per_uid_max.attr,
	&dev_attr_uid_limit_default_bytes.attr,
	&dev_attr_uid_limit.attr,
	&dev_attr_destroy_space.attr,
	&dev_attr_drop_cached.attr,
	&dev_attr_prefix_hits.attr,
	&dev_attr_prefix_misses.attr,
	&dev_attr_prefix_inserts.attr,
	&dev_attr_prefix_dedups.attr,
	&dev_attr_cached_bytes.attr,
	&dev_attr_published_bytes.attr,
	&dev_attr_evictions.attr,
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
