// SPDX-License-Identifier: GPL-2.0
/*
 * numa_test: NUMA placement of the chunks behind a space.  The node of each
 * mapped page comes from move_pages(2) with nodes == NULL (raw syscall, no
 * libnuma), which looks the page up through the page tables.
 */
#include "kvpool_util.h"

#include <sched.h>

#define BLOCK	(64 * KiB)
#define QUOTA	(16 * MiB)	/* 256 blocks, 8 chunks */

struct node_count {
	long n[2];	/* pages on node 0 and node 1 */
	long other;	/* pages on another node */
	long err;	/* pages move_pages could not place */
	int first_err;
};

/* Touch every page of [m, m+len) and count the node it lives on. */
static int count_nodes(char *m, size_t len, struct node_count *nc)
{
	size_t page = getpagesize(), npages = len / page, i, done;
	enum { BATCH = 512 };
	void *pages[BATCH];
	int status[BATCH];

	memset(nc, 0, sizeof(*nc));
	for (i = 0; i < npages; i++)
		((volatile char *)m)[i * page] += 0;	/* fault it in */
	for (done = 0; done < npages; done += BATCH) {
		size_t n = npages - done < BATCH ? npages - done : BATCH;

		for (i = 0; i < n; i++) {
			pages[i] = m + (done + i) * page;
			status[i] = -1000;
		}
		if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0))
			return -errno;
		for (i = 0; i < n; i++) {
			if (status[i] == 0 || status[i] == 1) {
				nc->n[status[i]]++;
			} else if (status[i] >= 0) {
				nc->other++;
			} else {
				if (!nc->err)
					nc->first_err = status[i];
				nc->err++;
			}
		}
	}
	return 0;
}

#define LOG_COUNT(nc) TH_LOG("node0 %ld node1 %ld other %ld err %ld (%d)", \
			     (nc).n[0], (nc).n[1], (nc).other, (nc).err, \
			     (nc).first_err)

FIXTURE(numa) {
	char name[KVPOOL_NAME_MAX];
	__u64 free0, free1;
	size_t page;
};

FIXTURE_SETUP(numa)
{
	struct kvpool_info info;

	self->page = getpagesize();
	kv_name(self->name, sizeof(self->name), "numa");
	ASSERT_EQ(0, kv_pool_info(&info));
	if ((info.node_mask & 0x3) != 0x3)
		SKIP(return, "needs pool pages on nodes 0 and 1 (node_mask 0x%llx): boot with 2 NUMA nodes",
		     (unsigned long long)info.node_mask);
	ASSERT_EQ(0, sysfs_u64("node0/free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("node1/free_bytes", &self->free1));
}

FIXTURE_TEARDOWN(numa)
{
}

/* Create a space with @policy/@mask, allocate all of it, count nodes. */
static void fill_and_count(struct __test_metadata *_metadata, const char *name,
			   __u32 policy, __u64 mask, struct node_count *nc)
{
	struct kvpool_space_open so;
	__u32 ids[QUOTA / BLOCK];
	char *m;
	int fd;

	fd = kv_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_create_numa(fd, name, BLOCK, QUOTA, policy, mask, &so));
	ASSERT_EQ(0, kv_alloc(fd, ids, QUOTA / BLOCK));
	m = kv_mmap(fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, count_nodes(m, QUOTA, nc));
	munmap(m, QUOTA);
	close(fd);
}

/* A space bound to node (0 or 1) has every page of its filled quota there, none on the other. */
static void bind_places_every_page_on(struct __test_metadata *_metadata,
				      FIXTURE_DATA(numa) *self, int node)
{
	struct node_count nc;

	fill_and_count(_metadata, self->name, KVPOOL_NUMA_BIND, 1u << node, &nc);
	EXPECT_EQ(QUOTA / self->page, nc.n[node]) LOG_COUNT(nc);
	EXPECT_EQ(0, nc.n[!node]) LOG_COUNT(nc);
	EXPECT_EQ(0, nc.err) LOG_COUNT(nc);
}

TEST_F(numa, bind_node1_places_every_page_on_node1)
{
	RETURN_IF_SKIPPED();
	bind_places_every_page_on(_metadata, self, 1);
}

TEST_F(numa, bind_node0_places_every_page_on_node0)
{
	RETURN_IF_SKIPPED();
	bind_places_every_page_on(_metadata, self, 0);
}

TEST_F(numa, bind_node1_takes_chunks_from_node1_only)
{
	struct kvpool_space_open so;
	__u32 ids[QUOTA / BLOCK];
	int fd;

	RETURN_IF_SKIPPED();
	fd = kv_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_create_numa(fd, self->name, BLOCK, QUOTA,
				    KVPOOL_NUMA_BIND, 0x2, &so));
	ASSERT_EQ(0, kv_alloc(fd, ids, QUOTA / BLOCK));
	EXPECT_EQ(self->free0, sysfs_get("node0/free_bytes"));
	EXPECT_EQ(self->free1 - QUOTA, sysfs_get("node1/free_bytes"));
	close(fd);
	/* The chunks go back to node 1's free list. */
	EXPECT_EQ(self->free1, sysfs_get("node1/free_bytes"));
	ASSERT_KV_CHECK_OK();
}

TEST_F(numa, interleave_spreads_chunks_over_both_nodes)
{
	long per_node = QUOTA / 2 / self->page;
	struct node_count nc;

	RETURN_IF_SKIPPED();
	/* 8 chunks, chunk by chunk over nodes 0 and 1. */
	fill_and_count(_metadata, self->name, KVPOOL_NUMA_INTERLEAVE, 0x3, &nc);
	EXPECT_EQ(0, nc.err) LOG_COUNT(nc);
	EXPECT_EQ(QUOTA / self->page, nc.n[0] + nc.n[1]) LOG_COUNT(nc);
	EXPECT_LE(per_node - (long)(KV_CHUNK / self->page), nc.n[0])
		LOG_COUNT(nc);
	EXPECT_LE(per_node - (long)(KV_CHUNK / self->page), nc.n[1])
		LOG_COUNT(nc);
}

TEST_F(numa, interleave_empty_mask_uses_all_nodes)
{
	struct node_count nc;

	RETURN_IF_SKIPPED();
	fill_and_count(_metadata, self->name, KVPOOL_NUMA_INTERLEAVE, 0, &nc);
	EXPECT_EQ(0, nc.err) LOG_COUNT(nc);
	EXPECT_LT(0, nc.n[0]) LOG_COUNT(nc);
	EXPECT_LT(0, nc.n[1]) LOG_COUNT(nc);
}

TEST_F(numa, preferred_node1_lands_on_node1)
{
	struct node_count nc;

	RETURN_IF_SKIPPED();
	fill_and_count(_metadata, self->name, KVPOOL_NUMA_PREFERRED, 0x2, &nc);
	EXPECT_EQ(QUOTA / self->page, nc.n[1]) LOG_COUNT(nc);
}

TEST_F(numa, preferred_empty_mask_uses_callers_node)
{
	char name[KVPOOL_NAME_MAX];
	struct node_count nc;
	int cpu, node[2];

	RETURN_IF_SKIPPED();
	node[0] = kv_pin_to_cpu(0);
	node[1] = kv_pin_to_cpu(1);
	if (node[0] != 0 || node[1] != 1)
		SKIP(return, "CPU 0 and CPU 1 are not on nodes 0 and 1 (%d, %d)",
		     node[0], node[1]);
	for (cpu = 0; cpu < 2; cpu++) {
		ASSERT_EQ(node[cpu], kv_pin_to_cpu(cpu));
		kv_name(name, sizeof(name), "numa-local");
		fill_and_count(_metadata, name, KVPOOL_NUMA_PREFERRED, 0, &nc);
		EXPECT_EQ(QUOTA / self->page, nc.n[node[cpu]])
			TH_LOG("cpu %d on node %d: node0 %ld node1 %ld", cpu,
			       node[cpu], nc.n[0], nc.n[1]);
	}
}

TEST_F(numa, bind_node1_exhaustion_enospc)
{
	char name2[KVPOOL_NAME_MAX];
	struct kvpool_space_open so;
	struct node_count nc;
	__u32 *ids, id;
	long n, max;
	char *m;
	int fd, fd2, err;

	RETURN_IF_SKIPPED();
	/* 2 MiB blocks: one chunk each; the quota is the whole pool. */
	max = KV_POOL_DEFAULT / KV_CHUNK;
	ids = calloc(max, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	ASSERT_LT(0, self->free0);
	fd = kv_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_create_numa(fd, self->name, KV_CHUNK, KV_POOL_DEFAULT,
				    KVPOOL_NUMA_BIND, 0x2, &so));
	n = kv_alloc_until_fail(fd, ids, max, &err);
	EXPECT_EQ(-ENOSPC, err);
	EXPECT_EQ(self->free1 / KV_CHUNK, n);
	EXPECT_EQ(0, sysfs_get("node1/free_bytes"));
	/* Node 0 still has every page it had. */
	EXPECT_EQ(self->free0, sysfs_get("node0/free_bytes"));
	/* Batches fail whole too. */
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + n, 2));

	/* PREFERRED node 1 falls back to node 0. */
	kv_name(name2, sizeof(name2), "numa-pref");
	fd2 = kv_open();
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_create_numa(fd2, name2, KV_CHUNK, 4 * KV_CHUNK,
				    KVPOOL_NUMA_PREFERRED, 0x2, &so));
	ASSERT_EQ(0, kv_alloc(fd2, &id, 1));
	m = kv_mmap(fd2, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, count_nodes(m + (size_t)id * KV_CHUNK, KV_CHUNK, &nc));
	EXPECT_EQ(KV_CHUNK / self->page, nc.n[0]) LOG_COUNT(nc);
	munmap(m, so.map_bytes);
	close(fd2);

	/* Freeing blocks of the BIND space lets it allocate again. */
	ASSERT_EQ(0, kv_free(fd, ids, 1));
	EXPECT_EQ(0, kv_alloc(fd, ids, 1));
	close(fd);
	EXPECT_EQ(self->free1, sysfs_get("node1/free_bytes"));
	EXPECT_EQ(self->free0, sysfs_get("node0/free_bytes"));
	ASSERT_KV_CHECK_OK();
	free(ids);
}

TEST_HARNESS_MAIN
