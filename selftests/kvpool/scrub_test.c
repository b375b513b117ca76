// SPDX-License-Identifier: GPL-2.0
/*
 * scrub_test: a chunk is zeroed before a different space receives it.
 * One space fills as much of the pool as it can with 0xA5 through its
 * mapping and goes away; the next space allocates everything and must see
 * only zeroes.  (Reuse inside one space need not be zeroed; nothing here
 * asserts either way about that.)
 *
 * Issue 30 item 8 (wrap_ids_backwards_serial_still_scrubs): the space
 * serial that debugfs wrap_ids sets is not the scrub key, and a backwards
 * serial is refused (EINVAL), so a new space of another uid never gets an
 * old space's chunk unscrubbed.  Item 12
 * (pool_shrink_scrubs_chunks_it_frees): a chunk that held a space's data
 * is zeroed before it goes back to the page allocator, unless the kernel
 * zeroes freed pages itself (init_on_free).
 */
#include "kvpool_util.h"

#define PATTERN	0xA5

FIXTURE(scrub) {
	char name_a[KVPOOL_NAME_MAX];
	char name_b[KVPOOL_NAME_MAX];
	__u64 free0;
	__u64 spaces0;
};

FIXTURE_SETUP(scrub)
{
	kv_name(self->name_a, sizeof(self->name_a), "scrub-a");
	kv_name(self->name_b, sizeof(self->name_b), "scrub-b");
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
	ASSERT_LT(0, self->free0);
}

FIXTURE_TEARDOWN(scrub)
{
}

/* Offset of the first non-zero byte, or -1. */
static long first_nonzero(const void *p, size_t len)
{
	const __u64 *q = p;
	size_t i, j;

	for (i = 0; i < len / 8; i++) {
		if (q[i]) {
			for (j = i * 8; j < i * 8 + 8; j++)
				if (((const unsigned char *)p)[j])
					return (long)j;
		}
	}
	return -1;
}

struct filled {
	int fd;
	char *m;
	size_t bytes;	/* mapped and written: the backed range */
	long blocks;
};

/*
 * Create @name with @bb-byte blocks and a quota larger than the pool,
 * allocate until ENOSPC (batches halve on failure), map all of it and fill
 * it with @byte.  Returns 0 or -errno; with @byte < 0, nothing is written.
 */
static int fill_pool(const char *name, __u64 bb, int byte, struct filled *f)
{
	__u64 quota = (2 * KV_POOL_DEFAULT / bb) * bb;
	struct kvpool_space_info si;
	__u32 batch = 1024, *ids;
	int ret;

	memset(f, 0, sizeof(*f));
	ids = calloc(batch, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	f->fd = kv_open_create(name, bb, quota, NULL);
	if (f->fd < 0) {
		free(ids);
		return f->fd;
	}
	while (batch) {
		ret = kv_alloc(f->fd, ids, batch);
		if (!ret) {
			f->blocks += batch;
			continue;
		}
		if (ret != -ENOSPC) {
			free(ids);
			return ret;
		}
		batch /= 2;
	}
	free(ids);
	/* Every allocated id is in the backed range: map and use all of it. */
	ret = kv_space_info(f->fd, &si);
	if (ret)
		return ret;
	f->bytes = si.backed_bytes;
	if (!f->bytes)
		return -ENOSPC;
	f->m = kv_mmap(f->fd, f->bytes, 0);
	if (f->m == MAP_FAILED)
		return -errno;
	if (byte >= 0)
		memset(f->m, byte, f->bytes);
	return 0;
}

static void drop(struct filled *f)
{
	if (f->m && f->m != MAP_FAILED)
		munmap(f->m, f->bytes);
	close(f->fd);
}

/* Every byte f has mapped reads zero; a failure names the first that does not. */
static void expect_zeroed(struct __test_metadata *_metadata, const struct filled *f)
{
	long off = first_nonzero(f->m, f->bytes);

	EXPECT_EQ(-1, off) TH_LOG("byte at %ld is 0x%02x", off,
				  off < 0 ? 0 : (unsigned char)f->m[off]);
}

TEST_F_TIMEOUT(scrub, next_space_sees_only_zeroes, 120)
{
	struct filled a, b;

	ASSERT_EQ(0, fill_pool(self->name_a, KV_CHUNK, PATTERN, &a));
	EXPECT_EQ(self->free0, a.bytes);
	EXPECT_EQ(0, sysfs_get("free_bytes"));
	drop(&a);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));

	ASSERT_EQ(0, fill_pool(self->name_b, KV_CHUNK, -1, &b));
	EXPECT_EQ(self->free0, b.bytes);
	expect_zeroed(_metadata, &b);
	drop(&b);
	ASSERT_KV_CHECK_OK();
}

TEST_F_TIMEOUT(scrub, different_geometry_sees_only_zeroes, 120)
{
	struct filled a, b;

	/* Page-sized blocks first, then 3 MiB blocks that straddle chunks. */
	ASSERT_EQ(0, fill_pool(self->name_a, getpagesize(), PATTERN, &a));
	EXPECT_EQ(self->free0, a.bytes);
	drop(&a);

	ASSERT_EQ(0, fill_pool(self->name_b, 3 * MiB, -1, &b));
	EXPECT_EQ(self->free0 / (3 * MiB), b.blocks);
	expect_zeroed(_metadata, &b);
	drop(&b);
}

TEST_F_TIMEOUT(scrub, killed_writer_pattern_is_scrubbed, 120)
{
	struct filled b;
	int p[2], status;
	pid_t pid;
	char c;

	ASSERT_EQ(0, pipe(p));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct filled a;

		close(p[0]);
		c = fill_pool(self->name_a, KV_CHUNK, PATTERN, &a) ? 'E' : 'k';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	ASSERT_EQ(1, read(p[0], &c, 1));
	ASSERT_EQ('k', c);
	/* Killed with its mapping and fd: no orderly munmap or close. */
	kill(pid, SIGKILL);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));

	ASSERT_EQ(0, fill_pool(self->name_b, KV_CHUNK, -1, &b));
	EXPECT_EQ(self->free0, b.bytes);
	expect_zeroed(_metadata, &b);
	drop(&b);
}

TEST_F_TIMEOUT(scrub, chunks_of_closed_space_zeroed_while_others_live, 120)
{
	struct kvpool_space_open so;
	char name_c[KVPOOL_NAME_MAX];
	__u64 half = self->free0 / 2 / KV_CHUNK * KV_CHUNK;
	__u32 *ids;
	struct filled c;
	char *ma, *mb;
	long off;
	int fa, fb;

	ids = calloc(half / KV_CHUNK, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	ASSERT_LT(0, half);
	/* A and B split the pool; both write their patterns. */
	fa = kv_open_create(self->name_a, KV_CHUNK, half, &so);
	ASSERT_LE(0, fa);
	ASSERT_EQ(0, kv_alloc(fa, ids, half / KV_CHUNK));
	ma = kv_mmap(fa, half, 0);
	ASSERT_NE(MAP_FAILED, ma);
	memset(ma, PATTERN, half);
	fb = kv_open_create(self->name_b, KV_CHUNK, half, &so);
	ASSERT_LE(0, fb);
	ASSERT_EQ(0, kv_alloc(fb, ids, half / KV_CHUNK));
	mb = kv_mmap(fb, half, 0);
	ASSERT_NE(MAP_FAILED, mb);
	memset(mb, 0x5A, half);

	/* A goes away; C gets what is free, which includes A's chunks. */
	munmap(ma, half);
	close(fa);
	kv_name(name_c, sizeof(name_c), "scrub-c");
	ASSERT_EQ(0, fill_pool(name_c, KV_CHUNK, -1, &c));
	EXPECT_LE(half, c.bytes);
	expect_zeroed(_metadata, &c);
	/* B's data is untouched. */
	for (off = 0; off < (long)half; off += getpagesize()) {
		if (mb[off] != 0x5A || mb[off + getpagesize() - 1] != 0x5A)
			break;
	}
	EXPECT_EQ((long)half, off);
	drop(&c);
	munmap(mb, half);
	close(fb);
	free(ids);
}

TEST_F(scrub, reuse_in_same_space_keeps_working)
{
	struct kvpool_space_open so;
	__u32 ids[8];
	char *m;
	int fd, i;

	/* Freed and reallocated blocks are usable; contents not asserted. */
	fd = kv_open_create(self->name_a, 256 * KiB, 2 * MiB, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 8));
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	memset(m, PATTERN, so.map_bytes);
	ASSERT_EQ(0, kv_free(fd, ids, 8));
	ASSERT_EQ(0, kv_alloc(fd, ids, 8));
	for (i = 0; i < 8; i++) {
		kv_fill(m + (size_t)ids[i] * 256 * KiB, 256 * KiB, i, 0);
	}
	for (i = 0; i < 8; i++) {
		EXPECT_EQ(-1, kv_verify(m + (size_t)ids[i] * 256 * KiB,
					256 * KiB, i, 0));
	}
	munmap(m, so.map_bytes);
	close(fd);
}

#define WRAP_IDS "/sys/kernel/debug/kvpool/wrap_ids"

TEST_F_TIMEOUT(scrub, wrap_ids_backwards_serial_still_scrubs, 120)
{
	static const struct kv_cred u1000 = { .uid = 1000, .gid = 1000 };
	struct kvpool_space_open so;
	struct filled b;
	__u32 *ids;
	char buf[64];
	long n;
	int fa, err;
	char *ma;

	if (access(WRAP_IDS, W_OK))
		SKIP(return, "no debugfs wrap_ids");
	ids = calloc(self->free0 / KV_CHUNK, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	/* uid 1000's space takes the whole pool and writes its pattern. */
	fa = kv_open_as(&u1000);
	ASSERT_LE(0, fa);
	ASSERT_EQ(0, kv_create(fa, self->name_a, KV_CHUNK, self->free0, &so));
	n = kv_alloc_until_fail(fa, ids, self->free0 / KV_CHUNK, &err);
	ASSERT_EQ((long)(self->free0 / KV_CHUNK), n) TH_LOG("ALLOC: %s", strerror(-err));
	ma = kv_mmap(fa, self->free0, 0);
	ASSERT_NE(MAP_FAILED, ma);
	memset(ma, PATTERN, self->free0);
	munmap(ma, self->free0);
	close(fa);
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));

	/*
	 * Until 2^32 spaces, a space's serial is its id: move the counter back
	 * so that the next space would get the serial A had.  Refused
	 * (space_test's wrap test shows forward moves still work).
	 */
	snprintf(buf, sizeof(buf), "serial %llu", (unsigned long long)so.space_id - 1);
	EXPECT_EQ(-EINVAL, kv_write_path(WRAP_IDS, buf));

	/* Root's new space gets every chunk A had: all zero. */
	ASSERT_EQ(0, fill_pool(self->name_b, KV_CHUNK, -1, &b));
	EXPECT_EQ(self->free0, b.bytes);
	expect_zeroed(_metadata, &b);
	drop(&b);
	free(ids);
	ASSERT_KV_CHECK_OK();
}

/* Whether the kernel zeroes pages as they are freed (init_on_free). */
static int init_on_free(void)
{
	char buf[4096];

	if (read_file("/proc/cmdline", buf, sizeof(buf)) < 0)
		return 0;
	return strstr(buf, "init_on_free=1") != NULL;
}

TEST_F_TIMEOUT(scrub, pool_shrink_scrubs_chunks_it_frees, 120)
{
	__u64 pool0, z0, z1, freed;
	struct filled a;
	char buf[32];

	if (init_on_free())
		SKIP(return, "init_on_free=1: the page allocator zeroes freed pages");
	ASSERT_EQ(0, sysfs_u64("pool_bytes", &pool0));
	ASSERT_EQ(0, fill_pool(self->name_a, KV_CHUNK, PATTERN, &a));
	drop(&a);
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));
	/* Half the pool goes back to the page allocator, full of A's data. */
	ASSERT_EQ(0, sysfs_u64("zeroed_chunks", &z0));
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(pool0 / 2));
	ASSERT_EQ(0, sysfs_write("pool_bytes", buf));
	freed = (pool0 - sysfs_get("pool_bytes")) / KV_CHUNK;
	ASSERT_LT(0, freed);
	ASSERT_EQ(0, sysfs_u64("zeroed_chunks", &z1));
	EXPECT_LE(freed, z1 - z0) TH_LOG("%llu chunks freed, %llu zeroed",
					 (unsigned long long)freed,
					 (unsigned long long)(z1 - z0));
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)pool0);
	ASSERT_EQ(0, sysfs_write("pool_bytes", buf));
	EXPECT_EQ(pool0, sysfs_get("pool_bytes"));
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
