// SPDX-License-Identifier: GPL-2.0
/*
 * quota_test: a space's quota and the pool's size bound ALLOC; failures
 * are ENOSPC with nothing allocated; blocks larger than a chunk straddle
 * chunks; FREE makes room again.
 */
#include "kvpool_util.h"

#include <pthread.h>

FIXTURE(quota) {
	char name[KVPOOL_NAME_MAX];
	__u64 free0;
};

FIXTURE_SETUP(quota)
{
	kv_name(self->name, sizeof(self->name), "quota");
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
}

FIXTURE_TEARDOWN(quota)
{
}

static void expect_same_info(struct __test_metadata *_metadata,
			     const struct kvpool_space_info *a,
			     const struct kvpool_space_info *b)
{
	EXPECT_EQ(a->backed_blocks, b->backed_blocks);
	EXPECT_EQ(a->backed_bytes, b->backed_bytes);
	EXPECT_EQ(a->free_blocks, b->free_blocks);
	EXPECT_EQ(a->owned_blocks, b->owned_blocks);
	EXPECT_EQ(a->my_blocks, b->my_blocks);
}

TEST_F(quota, alloc_to_nr_blocks_then_enospc)
{
	struct kvpool_space_info before, after;
	struct kvpool_space_open so;
	__u32 ids[9];
	__u64 pool_free;
	int fd;

	fd = kv_open_create(self->name, MiB, 8 * MiB, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(8, so.nr_blocks);
	ASSERT_EQ(0, kv_alloc(fd, ids, 5));
	ASSERT_EQ(0, kv_alloc(fd, ids + 5, 3));
	ASSERT_EQ(0, kv_space_info(fd, &before));
	EXPECT_EQ(8, before.my_blocks);
	EXPECT_EQ(0, before.free_blocks);
	pool_free = sysfs_get("free_bytes");

	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + 8, 1));
	ASSERT_EQ(0, kv_space_info(fd, &after));
	expect_same_info(_metadata, &before, &after);
	EXPECT_EQ(pool_free, sysfs_get("free_bytes"));
	close(fd);
}

TEST_F(quota, batch_over_quota_enospc_nothing_allocated)
{
	struct kvpool_space_info before, after;
	struct kvpool_space_open so;
	__u32 ids[8];
	int fd;

	fd = kv_open_create(self->name, MiB, 8 * MiB, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 6));
	ASSERT_EQ(0, kv_space_info(fd, &before));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + 6, 3));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + 6, 8));
	ASSERT_EQ(0, kv_space_info(fd, &after));
	expect_same_info(_metadata, &before, &after);
	/* Exactly what is left still fits. */
	EXPECT_EQ(0, kv_alloc(fd, ids + 6, 2));
	close(fd);
}

TEST_F(quota, quota_rounds_down_to_whole_blocks)
{
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	__u32 ids[3];
	int fd;

	fd = kv_open_create(self->name, 2 * MiB, 5 * MiB, &so);
	ASSERT_LE(0, fd);
	EXPECT_EQ(2, so.nr_blocks);
	EXPECT_EQ(4 * MiB, so.map_bytes);
	ASSERT_EQ(0, kv_alloc(fd, ids, 2));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + 2, 1));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(4 * MiB, si.backed_bytes);
	close(fd);
}

/* Fill block @id (of @bb bytes) with seed @id + 100 and check the others. */
static void write_block(char *m, __u64 bb, __u32 id)
{
	kv_fill(m + (size_t)id * bb, bb, id + 100, 0);
}

TEST_F(quota, block_larger_than_chunk_straddles_chunks)
{
	const __u64 bb = 3 * MiB;
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	__u32 ids[4];
	char *m;
	int fd, i, j;

	fd = kv_open_create(self->name, bb, 3 * bb, &so);
	ASSERT_LE(0, fd) TH_LOG("create with 3 MiB blocks: %s", strerror(-fd));
	ASSERT_EQ(3, so.nr_blocks);
	ASSERT_EQ(9 * MiB, so.map_bytes);
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);

	/* One at a time: each new block may start inside a backed chunk. */
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(0, kv_alloc(fd, &ids[i], 1));
		ASSERT_LT(ids[i], 3);
		ASSERT_EQ(0, kv_space_info(fd, &si));
		ASSERT_LE((ids[i] + 1) * bb, si.backed_bytes)
			TH_LOG("block %u not fully backed", ids[i]);
		ASSERT_EQ(0, kv_probe(m + (ids[i] + 1) * bb - 1, 1));
		write_block(m, bb, ids[i]);
		for (j = 0; j <= i; j++) {
			EXPECT_EQ(-1, kv_verify(m + (size_t)ids[j] * bb, bb,
						ids[j] + 100, 0))
				TH_LOG("block %u after allocating %d", ids[j], i);
		}
	}
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, &ids[3], 1));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(3, si.my_blocks);
	EXPECT_LE(9 * MiB, si.backed_bytes);
	EXPECT_GE(10 * MiB, si.backed_bytes);
	munmap(m, so.map_bytes);
	close(fd);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
}

TEST_F(quota, block_spanning_several_chunks)
{
	const __u64 bb = 5 * MiB + 4 * KiB * 3;	/* page multiple, odd */
	struct kvpool_space_open so;
	__u32 ids[2];
	char *m;
	int fd;

	fd = kv_open_create(self->name, bb, 2 * bb, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(2, so.nr_blocks);
	ASSERT_EQ(0, kv_alloc(fd, ids, 2));
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	write_block(m, bb, ids[0]);
	write_block(m, bb, ids[1]);
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[0] * bb, bb, ids[0] + 100, 0));
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[1] * bb, bb, ids[1] + 100, 0));
	munmap(m, so.map_bytes);
	close(fd);
}

TEST_F(quota, free_then_alloc_reuses_freed_blocks)
{
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	__u32 ids[16], again[3];
	int fd, i, hits;

	fd = kv_open_create(self->name, 512 * KiB, 8 * MiB, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 16));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, again, 1));
	ASSERT_EQ(0, kv_free(fd, &ids[3], 1));
	ASSERT_EQ(0, kv_free(fd, &ids[9], 2));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(13, si.my_blocks);
	EXPECT_EQ(3, si.free_blocks);
	/* The quota is full again after three; they are the freed ids. */
	ASSERT_EQ(0, kv_alloc(fd, again, 3));
	for (i = 0, hits = 0; i < 3; i++)
		hits += again[i] == ids[3] || again[i] == ids[9] ||
			again[i] == ids[10];
	EXPECT_EQ(3, hits);
	EXPECT_NE(again[0], again[1]);
	EXPECT_NE(again[1], again[2]);
	EXPECT_NE(again[0], again[2]);
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids, 1));
	close(fd);
}

TEST_F(quota, pool_exhaustion_enospc)
{
	const long max = 2 * KV_POOL_DEFAULT / KV_CHUNK;
	struct kvpool_space_info before, after;
	char other[KVPOOL_NAME_MAX];
	__u32 *ids, id;
	long n;
	int fd, fd2, err;

	ids = calloc(max, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	ASSERT_LT(0, self->free0);
	/* The quota (256 MiB) is larger than the pool. */
	fd = kv_open_create(self->name, KV_CHUNK, max * KV_CHUNK, NULL);
	ASSERT_LE(0, fd);
	n = kv_alloc_until_fail(fd, ids, max, &err);
	EXPECT_EQ(-ENOSPC, err);
	EXPECT_EQ(self->free0 / KV_CHUNK, n);
	EXPECT_EQ(0, sysfs_get("free_bytes"));

	ASSERT_EQ(0, kv_space_info(fd, &before));
	EXPECT_EQ(n, before.my_blocks);
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, &id, 1));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids + n, 4));
	ASSERT_EQ(0, kv_space_info(fd, &after));
	expect_same_info(_metadata, &before, &after);

	/* Another space cannot get anything either. */
	kv_name(other, sizeof(other), "quota-other");
	fd2 = kv_open_create(other, 64 * KiB, 4 * MiB, NULL);
	ASSERT_LE(0, fd2);
	EXPECT_EQ(-ENOSPC, kv_alloc(fd2, &id, 1));

	/* Free three blocks: four still fail whole, three fit. */
	ASSERT_EQ(0, kv_free(fd, ids, 3));
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids, 4));
	ASSERT_EQ(0, kv_space_info(fd, &after));
	EXPECT_EQ(n - 3, after.my_blocks);
	EXPECT_EQ(0, kv_alloc(fd, ids, 3));
	/* Blocks freed in a space stay with that space. */
	EXPECT_EQ(-ENOSPC, kv_alloc(fd2, &id, 1));

	/* Closing the big space gives the pool back to the other one. */
	close(fd);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	EXPECT_EQ(0, kv_alloc(fd2, &id, 1));
	close(fd2);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	ASSERT_KV_CHECK_OK();
	free(ids);
}

TEST_F(quota, failed_alloc_takes_no_chunks_from_pool)
{
	const long max = KV_POOL_DEFAULT / KV_CHUNK;
	struct kvpool_space_info si;
	char other[KVPOOL_NAME_MAX];
	__u32 *ids, small[96];
	long keep;
	int fa, fb;

	/* Space A leaves exactly two chunks free in the pool. */
	ids = calloc(max, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	keep = self->free0 / KV_CHUNK - 2;
	ASSERT_LT(0, keep);
	fa = kv_open_create(self->name, KV_CHUNK, KV_POOL_DEFAULT, NULL);
	ASSERT_LE(0, fa);
	ASSERT_EQ(0, kv_alloc(fa, ids, keep));
	ASSERT_EQ(2 * KV_CHUNK, sysfs_get("free_bytes"));

	/* Space B asks for three chunks' worth of blocks in one batch. */
	kv_name(other, sizeof(other), "quota-b");
	fb = kv_open_create(other, 64 * KiB, 16 * MiB, NULL);
	ASSERT_LE(0, fb);
	EXPECT_EQ(-ENOSPC, kv_alloc(fb, small, 96));
	/* Nothing allocated: no blocks, and no chunks moved into B. */
	ASSERT_EQ(0, kv_space_info(fb, &si));
	EXPECT_EQ(0, si.my_blocks);
	EXPECT_EQ(0, si.backed_bytes);
	EXPECT_EQ(2 * KV_CHUNK, sysfs_get("free_bytes"));
	/* A can still use those two chunks. */
	EXPECT_EQ(0, kv_alloc(fa, ids + keep, 2));
	close(fb);
	close(fa);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	free(ids);
}

TEST_F(quota, pool_exhaustion_small_blocks_exact)
{
	const __u64 bb = getpagesize();
	__u64 total = 0, want;
	__u32 *ids;
	__u32 batch = 4096;
	int fd, ret;

	want = self->free0 / bb;
	ids = calloc(batch, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	fd = kv_open_create(self->name, bb, 2 * KV_POOL_DEFAULT, NULL);
	ASSERT_LE(0, fd);
	/* Halve the batch on ENOSPC: failed batches must take nothing. */
	while (batch) {
		ret = kv_alloc(fd, ids, batch);
		if (!ret) {
			total += batch;
			continue;
		}
		ASSERT_EQ(-ENOSPC, ret) TH_LOG("batch %u", batch);
		batch /= 2;
	}
	EXPECT_EQ(want, total);
	EXPECT_EQ(0, sysfs_get("free_bytes"));
	close(fd);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	free(ids);
}

/* ---- concurrency ----------------------------------------------------------- */

#define NR_THREADS	4
#define THREAD_ITERS	1500
#define THREAD_HOLD	32	/* blocks a thread holds at most */
#define CBLOCK		(64 * KiB)
#define CQUOTA		(16 * MiB)	/* 256 blocks: never exhausted */

struct worker {
	pthread_t thread;
	int fd;
	int tid;
	char *m;
	int err;	/* 0, or the first failure (errno or a step) */
	long ops;
};

/*
 * Each thread has its own fd in one space.  A block it allocates must carry
 * no other thread's marker; it marks the block with its id and clears the
 * marker before freeing, so two threads handed the same block would see
 * each other's marks.
 */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	__u32 held[THREAD_HOLD], batch[8];
	unsigned int seed = w->tid * 7919 + 1;
	int nheld = 0, i, k, ret;
	long it;

	for (it = 0; it < THREAD_ITERS && !w->err; it++) {
		k = 1 + rand_r(&seed) % 8;
		if (nheld + k <= THREAD_HOLD && (rand_r(&seed) & 1)) {
			ret = kv_alloc(w->fd, batch, k);
			if (ret) {
				w->err = ret;
				break;
			}
			for (i = 0; i < k; i++) {
				volatile __u32 *mark =
					(__u32 *)(w->m + (size_t)batch[i] * CBLOCK);

				if (batch[i] >= CQUOTA / CBLOCK || *mark) {
					w->err = 1000 + (int)batch[i];
					break;
				}
				*mark = w->tid;
				held[nheld++] = batch[i];
			}
		} else if (nheld) {
			k = k > nheld ? nheld : k;
			for (i = 0; i < k; i++) {
				volatile __u32 *mark =
					(__u32 *)(w->m + (size_t)held[nheld - k + i] * CBLOCK);

				if (*mark != (__u32)w->tid) {
					w->err = 2000;
					break;
				}
				*mark = 0;
			}
			ret = kv_free(w->fd, &held[nheld - k], k);
			if (ret) {
				w->err = ret;
				break;
			}
			nheld -= k;
		}
		w->ops++;
	}
	return NULL;
}

TEST_F_TIMEOUT(quota, concurrent_fds_never_share_a_block, 120)
{
	__u32 ids[CQUOTA / CBLOCK];
	struct worker w[NR_THREADS];
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	__u64 owned = 0;
	char *m;
	int fd, i;

	fd = kv_open_create(self->name, CBLOCK, CQUOTA, &so);
	ASSERT_LE(0, fd);
	/* Back the whole range first so every block can be marked. */
	ASSERT_EQ(0, kv_alloc(fd, ids, CQUOTA / CBLOCK));
	ASSERT_EQ(0, kv_free(fd, ids, CQUOTA / CBLOCK));
	m = kv_mmap(fd, CQUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	memset(m, 0, CQUOTA);

	for (i = 0; i < NR_THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].tid = i + 1;
		w[i].m = m;
		w[i].fd = kv_open_join(self->name, NULL);
		ASSERT_LE(0, w[i].fd);
	}
	for (i = 0; i < NR_THREADS; i++) {
		ASSERT_EQ(0, pthread_create(&w[i].thread, NULL, worker_main,
					    &w[i]));
	}
	for (i = 0; i < NR_THREADS; i++) {
		pthread_join(w[i].thread, NULL);
		EXPECT_EQ(0, w[i].err) TH_LOG("thread %d after %ld ops", i,
					      w[i].ops);
		ASSERT_EQ(0, kv_space_info(w[i].fd, &si));
		owned += si.my_blocks;
	}
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(owned, si.owned_blocks);
	EXPECT_EQ(si.backed_blocks, si.free_blocks + si.owned_blocks);
	ASSERT_KV_CHECK_OK();
	/* Closing the workers' fds frees what they still hold. */
	for (i = 0; i < NR_THREADS; i++)
		close(w[i].fd);
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(0, si.owned_blocks);
	munmap(m, CQUOTA);
	close(fd);
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
