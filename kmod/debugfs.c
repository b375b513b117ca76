// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs under /sys/kernel/debug/kvpool/: state dumps (nodes, spaces) and
 * `check`, which verifies the accounting invariant and prints "ok" or each
 * violation found.
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include "kvpool.h"

static struct dentry *kvp_debugfs_dir;

static int kvp_nodes_show(struct seq_file *m, void *unused)
{
	int nid;

	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		struct kvp_node *node = kvp_pool.nodes[nid];

		spin_lock(&node->lock);
		seq_printf(m, "node%d reserved=%llu free=%llu in_spaces=%llu held=%llu chunks=%llu\n",
			   nid, node->reserved_bytes, node->free_bytes, node->in_spaces_bytes,
			   node->held_bytes, node->nr_chunks);
		spin_unlock(&node->lock);
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(kvp_nodes);

static int kvp_spaces_show(struct seq_file *m, void *unused)
{
	struct kvp_space *space;

	mutex_lock(&kvp_spaces_lock);
	list_for_each_entry(space, &kvp_spaces, link) {
		u64 node_bytes[KVPOOL_MAX_NODES] = { 0 };
		struct kvp_chunk *chunk;
		int nid;

		mutex_lock(&space->lock);
		seq_printf(m, "space %u name=%s uid=%u gid=%u mode=%04o clients=%u block_bytes=%llu nr_blocks=%llu backed_blocks=%llu backed_bytes=%llu free=%llu owned=%llu policy=%s node_mask=0x%llx",
			   space->id, space->name, from_kuid(&init_user_ns, space->uid),
			   from_kgid(&init_user_ns, space->gid), space->mode, space->nr_clients,
			   space->core.block_bytes, space->core.nr_blocks,
			   space->core.backed_blocks, space->core.backed_bytes,
			   space->core.nr_free, space->core.nr_owned,
			   kvp_policy_name(space->numa_policy), space->node_mask);
		list_for_each_entry(chunk, &space->chunks, link)
			if (chunk->nid < KVPOOL_MAX_NODES)
				node_bytes[chunk->nid] += kvp_chunk_bytes(chunk);
		for_each_node_mask(nid, kvp_pool.pool_nodes)
			seq_printf(m, " node%d_bytes=%llu", nid, node_bytes[nid]);
		seq_putc(m, '\n');
		mutex_unlock(&space->lock);
	}
	mutex_unlock(&kvp_spaces_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(kvp_spaces);

/*
 * Invariant 1 of the design: per node free + in_spaces + held == reserved,
 * the spaces' chunks on each node add up to in_spaces, and each space's
 * blocks add up (kvc_space_check) within the bytes its chunks back.
 */
static int kvp_check_show(struct seq_file *m, void *unused)
{
	u64 space_bytes[KVPOOL_MAX_NODES] = { 0 };
	struct kvp_space *space;
	unsigned int bad = 0;
	char msg[160];
	int nid;

	mutex_lock(&kvp_spaces_lock);
	list_for_each_entry(space, &kvp_spaces, link) {
		mutex_lock(&space->lock);
		if (kvc_space_check(&space->core, msg, sizeof(msg))) {
			seq_printf(m, "space %u (%s): %s\n", space->id, space->name, msg);
			bad++;
		}
		mutex_unlock(&space->lock);
	}

	/* Freeze chunk movement to compare the nodes with the spaces. */
	down_write(&kvp_pool.backing_rwsem);
	list_for_each_entry(space, &kvp_spaces, link) {
		struct kvp_chunk *chunk;
		u64 chunk_total = 0;

		list_for_each_entry(chunk, &space->chunks, link) {
			chunk_total += kvp_chunk_bytes(chunk);
			if (chunk->nid < KVPOOL_MAX_NODES)
				space_bytes[chunk->nid] += kvp_chunk_bytes(chunk);
		}
		if (READ_ONCE(space->core.backed_bytes) > chunk_total) {
			seq_printf(m, "space %u (%s): backed_bytes %llu > chunk bytes %llu\n",
				   space->id, space->name, space->core.backed_bytes, chunk_total);
			bad++;
		}
	}
	for_each_node_mask(nid, kvp_pool.pool_nodes) {
		struct kvp_node *node = kvp_pool.nodes[nid];

		spin_lock(&node->lock);
		if (node->free_bytes + node->in_spaces_bytes + node->held_bytes !=
		    node->reserved_bytes) {
			seq_printf(m, "node%d: free %llu + in_spaces %llu + held %llu != reserved %llu\n",
				   nid, node->free_bytes, node->in_spaces_bytes, node->held_bytes,
				   node->reserved_bytes);
			bad++;
		}
		if (node->in_spaces_bytes != space_bytes[nid]) {
			seq_printf(m, "node%d: in_spaces %llu != spaces' chunks %llu\n", nid,
				   node->in_spaces_bytes, space_bytes[nid]);
			bad++;
		}
		spin_unlock(&node->lock);
	}
	up_write(&kvp_pool.backing_rwsem);
	mutex_unlock(&kvp_spaces_lock);
	if (!bad)
		seq_puts(m, "ok\n");
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(kvp_check);

void kvp_debugfs_init(void)
{
	kvp_debugfs_dir = debugfs_create_dir("kvpool", NULL);
	debugfs_create_file("nodes", 0400, kvp_debugfs_dir, NULL, &kvp_nodes_fops);
	debugfs_create_file("spaces", 0400, kvp_debugfs_dir, NULL, &kvp_spaces_fops);
	debugfs_create_file("check", 0400, kvp_debugfs_dir, NULL, &kvp_check_fops);
}

void kvp_debugfs_exit(void)
{
	debugfs_remove_recursive(kvp_debugfs_dir);
}
