// SPDX-License-Identifier: GPL-2.0
/*
 * gup_longterm_dbgtest: pin a space's mapping with FOLL_LONGTERM, as
 * cuMemHostRegister and RDMA registration do, through the kernel's
 * CONFIG_GUP_TEST debugfs file.  Only the debug kernel has that file, so
 * only the debug lane runs *_dbgtest binaries; there a missing file fails.
 */
#include "kvpool_util.h"
#include "kselftest_harness.h"

/* From the kernel's mm/gup_test.h (6.1): the debugfs ioctl interface. */
#define GUP_TEST_PATH		"/sys/kernel/debug/gup_test"
#define PIN_LONGTERM_BENCHMARK	_IOWR('g', 3, struct gup_test)
#define GUP_TEST_FOLL_WRITE	0x01

struct gup_test {
	__u64 get_delta_usec;
	__u64 put_delta_usec;
	__u64 addr;
	__u64 size;
	__u32 nr_pages_per_call;
	__u32 gup_flags;
	__u32 test_flags;
	__u32 which_pages[8];
};

#define BLOCK	(3 * MiB)	/* larger than a chunk: blocks straddle chunks */
#define QUOTA	(24 * MiB)

/* Pin [p, p + len) long-term and release it; returns bytes pinned or -errno. */
static long long pin_longterm(void *p, size_t len)
{
	struct gup_test g = {
		.addr = (uintptr_t)p,
		.size = len,
		.nr_pages_per_call = 64,
		.gup_flags = GUP_TEST_FOLL_WRITE,
	};
	int fd = open(GUP_TEST_PATH, O_RDWR);
	int ret;

	if (fd < 0)
		return -errno;
	ret = ioctl(fd, PIN_LONGTERM_BENCHMARK, &g);
	close(fd);
	return ret ? -errno : (long long)g.size;
}

TEST(longterm_pin_of_backed_blocks)
{
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	__u32 ids[4];
	void *map;
	int fd;

	kv_name(name, sizeof(name), "gup");
	fd = kv_open_create(name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	map = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, map);
	kv_fill(map, 4 * BLOCK, 7, 0);

	/* All four blocks, across chunk boundaries, pinned for write. */
	EXPECT_EQ((long long)(4 * BLOCK), pin_longterm(map, 4 * BLOCK));
	/* The pin neither moved nor changed the data. */
	EXPECT_EQ(-1, kv_verify(map, 4 * BLOCK, 7, 0));

	munmap(map, so.map_bytes);
	close(fd);
}

TEST(longterm_pin_stops_at_the_backed_end)
{
	struct kvpool_space_info si = { 0 };
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	long long pinned;
	__u32 id;
	void *map;
	int fd;

	kv_name(name, sizeof(name), "gupend");
	fd = kv_open_create(name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, &id, 1));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	map = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, map);

	/* Unbacked pages cannot be pinned: the pin covers exactly the backing. */
	pinned = pin_longterm(map, so.map_bytes);
	EXPECT_EQ((long long)si.backed_bytes, pinned);

	munmap(map, so.map_bytes);
	close(fd);
}

TEST_HARNESS_MAIN
