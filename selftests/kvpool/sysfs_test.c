// SPDX-License-Identifier: GPL-2.0
/*
 * sysfs_test: /sys/class/misc/kvpool.  pool_bytes grows and shrinks the
 * pool (split evenly over the pool nodes, rounded up to chunks), refuses
 * to take chunks a space holds (EBUSY after shrinking what it can) and
 * rejects garbage; the per-node files agree with the totals; the counters
 * move by exactly the number of blocks.  Every test that changes pool_bytes
 * restores it to 128 MiB in its teardown.
 */
#include "kvpool_util.h"

#define BLOCK	(64 * KiB)
#define QUOTA	(8 * MiB)	/* 128 blocks, 4 chunks */

struct pool_state {
	__u64 pool, free;
	__u64 res[2], nfree[2];
};

static int read_state(struct pool_state *s)
{
	int ret = 0;

	ret |= sysfs_u64("pool_bytes", &s->pool);
	ret |= sysfs_u64("free_bytes", &s->free);
	ret |= sysfs_u64("node0/reserved_bytes", &s->res[0]);
	ret |= sysfs_u64("node0/free_bytes", &s->nfree[0]);
	ret |= sysfs_u64("node1/reserved_bytes", &s->res[1]);
	ret |= sysfs_u64("node1/free_bytes", &s->nfree[1]);
	return ret ? -EIO : 0;
}

#define LOG_STATE(s) TH_LOG("pool %llu free %llu node0 %llu/%llu node1 %llu/%llu", \
	(unsigned long long)(s).pool, (unsigned long long)(s).free, \
	(unsigned long long)(s).nfree[0], (unsigned long long)(s).res[0], \
	(unsigned long long)(s).nfree[1], (unsigned long long)(s).res[1])

/* The per-node files agree with the totals. */
static void check_consistent(struct __test_metadata *_metadata,
			     struct pool_state *s)
{
	ASSERT_EQ(0, read_state(s));
	EXPECT_EQ(s->pool, s->res[0] + s->res[1]) LOG_STATE(*s);
	EXPECT_EQ(s->free, s->nfree[0] + s->nfree[1]) LOG_STATE(*s);
	EXPECT_LE(s->nfree[0], s->res[0]) LOG_STATE(*s);
	EXPECT_LE(s->nfree[1], s->res[1]) LOG_STATE(*s);
	EXPECT_EQ(0, s->res[0] % KV_CHUNK) LOG_STATE(*s);
	EXPECT_EQ(0, s->res[1] % KV_CHUNK) LOG_STATE(*s);
	ASSERT_KV_CHECK_OK();
}

FIXTURE(sysfs) {
	char name[KVPOOL_NAME_MAX];
	struct pool_state s0;
};

FIXTURE_SETUP(sysfs)
{
	kv_name(self->name, sizeof(self->name), "sysfs");
	ASSERT_EQ(0, read_state(&self->s0));
	ASSERT_EQ(KV_POOL_DEFAULT, self->s0.pool)
		TH_LOG("pool_bytes is not 128 MiB at the start; an earlier test did not restore it");
}

FIXTURE_TEARDOWN(sysfs)
{
	struct pool_state s;
	int ret;

	if (!read_state(&s) && s.pool == KV_POOL_DEFAULT &&
	    s.res[0] == KV_NODE_DEFAULT && s.res[1] == KV_NODE_DEFAULT)
		return;
	ret = sysfs_write("pool_bytes", "128M\n");
	if (ret)
		TH_LOG("restoring pool_bytes to 128M: %s", strerror(-ret));
}

/* Write @val to pool_bytes and expect @err (0 or an errno). */
#define WRITE_POOL(val, err) \
	EXPECT_EQ(-(err), sysfs_write("pool_bytes", val)) \
		TH_LOG("write '%.*s' to pool_bytes", (int)strcspn(val, "\n"), val)

/* A size resize_pool() does not check. */
#define ANY (~0ULL)

/* One expectation of resize_pool(): want (unless ANY) == got, naming the write. */
#define EXPECT_SIZE(want, got, val)                                                 \
	do {                                                                        \
		if ((want) != ANY) {                                                \
			EXPECT_EQ(want, got)                                        \
				TH_LOG("%s after writing '%.*s'", #got,             \
				       (int)strcspn(val, "\n"), val);               \
		}                                                                   \
	} while (0)

/*
 * Write val to pool_bytes and expect err (0 or an errno); then the files
 * read consistently into *s, with these sizes: the pool, each node's
 * reserve, what is free (ANY: not checked).
 */
static void resize_pool(struct __test_metadata *_metadata, struct pool_state *s,
			const char *val, int err, __u64 pool, __u64 res0, __u64 res1,
			__u64 free)
{
	WRITE_POOL(val, err);
	check_consistent(_metadata, s);
	EXPECT_SIZE(pool, s->pool, val);
	EXPECT_SIZE(res0, s->res[0], val);
	EXPECT_SIZE(res1, s->res[1], val);
	EXPECT_SIZE(free, s->free, val);
}

/* The files read consistently into *s, the pool at its default size. */
static void expect_default_pool(struct __test_metadata *_metadata, struct pool_state *s)
{
	check_consistent(_metadata, s);
	EXPECT_EQ(KV_POOL_DEFAULT, s->pool);
	EXPECT_EQ(KV_NODE_DEFAULT, s->res[0]);
	EXPECT_EQ(KV_NODE_DEFAULT, s->res[1]);
}

TEST_F(sysfs, files_read_consistently)
{
	struct pool_state s;
	__u64 v;

	expect_default_pool(_metadata, &s);
	EXPECT_LE(s.free, s.pool);
	ASSERT_EQ(0, sysfs_u64("chunk_bytes", &v));
	EXPECT_EQ(KV_CHUNK, v);
	ASSERT_EQ(0, sysfs_u64("max_batch", &v));
	EXPECT_EQ(KVPOOL_MAX_BATCH, v);
	EXPECT_EQ(0, sysfs_u64("spaces", &v));
	EXPECT_EQ(0, sysfs_u64("allocs", &v));
	EXPECT_EQ(0, sysfs_u64("frees", &v));
	EXPECT_EQ(0, sysfs_u64("alloc_failures", &v));
}

TEST_F(sysfs, read_only_files_reject_writes)
{
	static const char *const ro[] = {
		"free_bytes", "chunk_bytes", "max_batch", "spaces", "allocs",
		"frees", "alloc_failures", "node0/reserved_bytes",
		"node0/free_bytes", "node1/reserved_bytes", "node1/free_bytes",
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(ro); i++) {
		EXPECT_NE(0, sysfs_write(ro[i], "0\n")) TH_LOG("%s", ro[i]);
	}
	check_consistent(_metadata, &self->s0);
}

TEST_F(sysfs, pool_grow_and_shrink)
{
	struct pool_state s;

	resize_pool(_metadata, &s, "160M\n", 0, 160 * MiB, 80 * MiB, 80 * MiB,
		    self->s0.free + 32 * MiB);
	resize_pool(_metadata, &s, "64M\n", 0, 64 * MiB, 32 * MiB, 32 * MiB, 64 * MiB);
	/* Plain bytes, no newline. */
	resize_pool(_metadata, &s, "134217728", 0, KV_POOL_DEFAULT, KV_NODE_DEFAULT,
		    KV_NODE_DEFAULT, self->s0.free);
}

TEST_F(sysfs, pool_suffixes_and_rounding)
{
	struct pool_state s;

	resize_pool(_metadata, &s, "196608K\n", 0, 192 * MiB, 96 * MiB, ANY, ANY);
	/* 3 MiB: 1.5 MiB per node, rounded up to a 2 MiB chunk each. */
	resize_pool(_metadata, &s, "3M\n", 0, 4 * MiB, 2 * MiB, 2 * MiB, ANY);
	/* 100000000 bytes: 47.7 MiB per node -> 48 MiB each. */
	resize_pool(_metadata, &s, "100000000\n", 0, 96 * MiB, ANY, 48 * MiB, ANY);
	resize_pool(_metadata, &s, "128M\n", 0, KV_POOL_DEFAULT, ANY, ANY, ANY);
}

TEST_F(sysfs, pool_shrink_to_zero_and_back)
{
	struct pool_state s;
	struct kvpool_info info;
	int fd;

	/* G suffix; nothing holds chunks, so all of them go. */
	resize_pool(_metadata, &s, "0G\n", 0, 0, ANY, ANY, 0);
	resize_pool(_metadata, &s, "128M\n", 0, KV_POOL_DEFAULT, KV_NODE_DEFAULT, KV_NODE_DEFAULT,
		    ANY);
	fd = kv_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_info(fd, &info));
	EXPECT_EQ(0x3, info.node_mask);
	EXPECT_EQ(KV_POOL_DEFAULT, info.pool_bytes);
	close(fd);
}

TEST_F(sysfs, grown_pool_is_allocatable)
{
	struct pool_state s;
	__u32 *ids;
	long n, max = 256;
	int fd, err;

	resize_pool(_metadata, &s, "160M\n", 0, ANY, ANY, ANY, ANY);
	ids = calloc(max, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	fd = kv_open_create(self->name, KV_CHUNK, max * KV_CHUNK, NULL);
	ASSERT_LE(0, fd);
	n = kv_alloc_until_fail(fd, ids, max, &err);
	EXPECT_EQ(-ENOSPC, err);
	EXPECT_EQ(s.free / KV_CHUNK, n);
	EXPECT_EQ(0, sysfs_get("free_bytes"));
	close(fd);
	free(ids);
}

TEST_F(sysfs, pool_garbage_einval)
{
	static const char *const bad[] = {
		"abc\n", "12Q\n", "-1\n", "M\n", "1MB\n", "12 34\n", "K",
		"1.5M\n", "+\n",
	};
	struct pool_state s;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		WRITE_POOL(bad[i], EINVAL);
	}
	expect_default_pool(_metadata, &s);
}

TEST_F(sysfs, shrink_below_held_chunks_ebusy_data_intact)
{
	struct kvpool_space_info si;
	struct pool_state s;
	__u32 ids[128];
	char *m;
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 128));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	ASSERT_EQ(QUOTA, si.backed_bytes);
	m = kv_mmap(fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m, QUOTA, 0x51, 0);

	/* A target the held chunks fit in: fine. */
	resize_pool(_metadata, &s, "32M\n", 0, 32 * MiB, ANY, ANY, 32 * MiB - QUOTA);

	/* Zero: everything free goes, the space's chunks stay, EBUSY. */
	resize_pool(_metadata, &s, "0\n", EBUSY, QUOTA, ANY, ANY, 0);
	EXPECT_EQ(-1, kv_verify(m, QUOTA, 0x51, 0));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(128, si.my_blocks);
	EXPECT_EQ(QUOTA, si.backed_bytes);

	/* Back to 128 MiB, evenly split, data still there. */
	resize_pool(_metadata, &s, "128M\n", 0, KV_POOL_DEFAULT, KV_NODE_DEFAULT, KV_NODE_DEFAULT,
		    KV_POOL_DEFAULT - QUOTA);
	EXPECT_EQ(-1, kv_verify(m, QUOTA, 0x51, 0));
	munmap(m, QUOTA);
	close(fd);
	EXPECT_EQ(KV_POOL_DEFAULT, sysfs_get("free_bytes"));
}

TEST_F(sysfs, counters_move_by_exact_block_counts)
{
	__u64 allocs, frees, fails;
	__u32 ids[256], other;	/* room for the 128-id call at ids + 15 */
	int fd, fd2;

	fd = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, sysfs_u64("allocs", &allocs));
	ASSERT_EQ(0, sysfs_u64("frees", &frees));
	ASSERT_EQ(0, sysfs_u64("alloc_failures", &fails));

	ASSERT_EQ(0, kv_alloc(fd, ids, 10));
	ASSERT_EQ(0, kv_alloc(fd, ids + 10, 5));
	ASSERT_EQ(0, kv_alloc(fd2, &other, 1));
	EXPECT_EQ(allocs + 16, sysfs_get("allocs"));
	EXPECT_EQ(frees, sysfs_get("frees"));
	EXPECT_EQ(fails, sysfs_get("alloc_failures"));

	ASSERT_EQ(0, kv_free(fd, ids + 3, 7));
	EXPECT_EQ(frees + 7, sysfs_get("frees"));
	EXPECT_EQ(allocs + 16, sysfs_get("allocs"));

	/* Failed calls move no block counters; ENOSPC counts one failure. */
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + 15, 128));
	EXPECT_EQ(allocs + 16, sysfs_get("allocs"));
	EXPECT_EQ(fails + 1, sysfs_get("alloc_failures"));
	EXPECT_EQ(-EPERM, kv_free(fd, &other, 1));	/* fd2's block */
	EXPECT_EQ(-EPERM, kv_free(fd, ids + 3, 1));	/* freed already */
	EXPECT_EQ(frees + 7, sysfs_get("frees"));
	EXPECT_EQ(allocs + 16, sysfs_get("allocs"));

	/* 9 owned: the other 119 fit exactly, then one more fails. */
	ASSERT_EQ(0, kv_alloc(fd, ids + 9, 119));
	EXPECT_EQ(allocs + 16 + 119, sysfs_get("allocs"));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, &other, 1));
	EXPECT_EQ(fails + 2, sysfs_get("alloc_failures"));
	EXPECT_EQ(allocs + 16 + 119, sysfs_get("allocs"));
	EXPECT_EQ(frees + 7, sysfs_get("frees"));
	close(fd2);
	close(fd);
}

TEST_HARNESS_MAIN
