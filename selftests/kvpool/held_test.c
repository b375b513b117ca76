// SPDX-License-Identifier: GPL-2.0
/*
 * held_test: chunks a space lets go while something still references their
 * pages wait on their node's held list; taking a chunk from a node whose
 * free list is empty recycles the held ones that went idle.
 *
 * Issue 30 item 10 (held_recycle_scan_is_bounded): that recycling examined
 * every held chunk, up to 512 pages each, with the node spinlock held, on
 * every such take; a tenant that parks many chunks there (a page reference
 * on the last page of each: vmsplice into a pipe) made every take on the
 * node pay for all of them.  One pass now examines at most
 * KV_RECYCLE_CHUNKS chunks, outside the lock, and debugfs held_scan shows
 * the most pages one pass examined.  Once the references go, the chunks
 * come back and the space can allocate again.
 */
#include "kvpool_util.h"

#include <fcntl.h>
#include <sys/uio.h>

#define HELD_SCAN	KV_DEBUGFS "/held_scan"
#define KV_RECYCLE_CHUNKS	8	/* kmod/pool.c KVP_RECYCLE_BATCH */
#define KV_SCAN_BOUND	((__u64)KV_RECYCLE_CHUNKS * (KV_CHUNK / 4096))

FIXTURE(held) {
	char name_a[KVPOOL_NAME_MAX];
	char name_b[KVPOOL_NAME_MAX];
	__u64 free0, held0;
};

FIXTURE_SETUP(held)
{
	kv_name(self->name_a, sizeof(self->name_a), "held-a");
	kv_name(self->name_b, sizeof(self->name_b), "held-b");
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("held_bytes", &self->held0));
	ASSERT_EQ(0, self->held0);
	if (getpagesize() != 4096)
		SKIP(return, "expects 4 KiB pages");
}

FIXTURE_TEARDOWN(held)
{
}

static __u64 held_scan_max(void)
{
	unsigned long long v = ~0ULL;
	char buf[64];

	if (read_file(HELD_SCAN, buf, sizeof(buf)) < 0 ||
	    sscanf(buf, "max_pages_per_pass=%llu", &v) != 1)
		return ~0ULL;
	return v;
}

TEST_F_TIMEOUT(held, held_recycle_scan_is_bounded, 120)
{
	__u64 node0 = KV_NODE_DEFAULT, max;
	int fa, fb, err, p[2], i;
	__u32 *ids, id;
	long n;
	char *m;

	RETURN_IF_SKIPPED();
	if (access(HELD_SCAN, R_OK | W_OK))
		SKIP(return, "no debugfs held_scan");
	ids = calloc(node0 / KV_CHUNK, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	/* A takes all of node 0, one chunk per block. */
	fa = kv_open();
	ASSERT_LE(0, fa);
	ASSERT_EQ(0, kv_create_numa(fa, self->name_a, KV_CHUNK, node0, KVPOOL_NUMA_BIND, 1,
				    NULL));
	n = kv_alloc_until_fail(fa, ids, node0 / KV_CHUNK, &err);
	ASSERT_LT(KV_RECYCLE_CHUNKS * 2, n) TH_LOG("ALLOC: %s", strerror(-err));
	m = kv_mmap(fa, n * KV_CHUNK, 0);
	ASSERT_NE(MAP_FAILED, m);
	/* A page reference on the last page of every chunk: a pipe's. */
	ASSERT_EQ(0, pipe(p));
	ASSERT_LT(0, fcntl(p[1], F_SETPIPE_SZ, 256 * 4096));
	for (i = 0; i < n; i++) {
		struct iovec iov = { .iov_base = m + (size_t)i * KV_CHUNK + KV_CHUNK - 4096,
				     .iov_len = 4096 };

		memset(iov.iov_base, 0x5a, 4096);
		ASSERT_EQ(4096, vmsplice(p[1], &iov, 1, 0)) TH_LOG("vmsplice: %s",
								  strerror(errno));
	}
	munmap(m, n * KV_CHUNK);
	close(fa);
	/* All of A's chunks wait on node 0's held list. */
	EXPECT_EQ((__u64)n * KV_CHUNK, sysfs_get("held_bytes"));

	/* Takes on node 0 find no free chunk: each recycles the held list. */
	ASSERT_EQ(0, kv_write_path(HELD_SCAN, "0"));
	fb = kv_open();
	ASSERT_LE(0, fb);
	ASSERT_EQ(0, kv_create_numa(fb, self->name_b, KV_CHUNK, node0, KVPOOL_NUMA_BIND, 1,
				    NULL));
	for (i = 0; i < 4; i++)
		EXPECT_EQ(-ENOSPC, kv_alloc(fb, &id, 1));
	max = held_scan_max();
	EXPECT_LT(0, max);
	EXPECT_GE(KV_SCAN_BOUND, max) TH_LOG("one pass examined %llu pages, bound %llu",
					     (unsigned long long)max, (unsigned long long)KV_SCAN_BOUND);

	/* The references go: every chunk comes back, B can allocate. */
	close(p[0]);
	close(p[1]);
	EXPECT_EQ(0, sysfs_wait_eq("held_bytes", 0, 10000));
	EXPECT_EQ(0, kv_alloc(fb, &id, 1));
	close(fb);
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));
	EXPECT_GE(KV_SCAN_BOUND, held_scan_max());
	free(ids);
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
