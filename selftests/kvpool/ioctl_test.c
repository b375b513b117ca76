// SPDX-License-Identifier: GPL-2.0
/*
 * ioctl_test: struct layout and one test per documented errno of every
 * kvpool ioctl (INFO, SPACE_OPEN, ALLOC, FREE, SPACE_INFO, and of API v2
 * PUBLISH, LOOKUP, RELEASE, SPACE_DESTROY, RESIDENCY, SPACE_STATS and the
 * read()/poll() event stream).  Each failure
 * asserts the exact errno and, where the call could have had an effect,
 * that it had none.
 */
#include "kvpool_util.h"

#include <poll.h>
#include <pthread.h>
#include <linux/userfaultfd.h>

#define BLOCK	(64 * KiB)
#define QUOTA	(8 * MiB)	/* 128 blocks, 4 chunks */

static long page_size(void)
{
	return sysconf(_SC_PAGESIZE);
}

/* A page that can be read but not written. */
static void *ro_page(void)
{
	void *p = mmap(NULL, page_size(), PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* A page that cannot be touched at all. */
static void *none_page(void)
{
	void *p = mmap(NULL, page_size(), PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Two pages, the second PROT_NONE: returns the first. */
static void *rw_then_none(void)
{
	long ps = page_size();
	char *p = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (mprotect(p + ps, ps, PROT_NONE))
		return NULL;
	return p;
}

/* A page holding a copy of @len bytes of @src, then made read-only. */
static void *ro_copy(const void *src, size_t len)
{
	void *p = mmap(NULL, page_size(), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memcpy(p, src, len);
	if (mprotect(p, page_size(), PROT_READ))
		return NULL;
	return p;
}

/* ---- layout --------------------------------------------------------------- */

TEST(struct_sizes_are_multiples_of_8)
{
	EXPECT_EQ(0, sizeof(struct kvpool_info) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_space_open) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_blocks) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_space_info) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_publish_entry) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_publish) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_lookup) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_space_destroy) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_residency_entry) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_residency) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_space_stats) % 8);
	EXPECT_EQ(0, sizeof(struct kvpool_event) % 8);
}

TEST(struct_layout_has_no_holes)
{
	/* Sum of the members: no implicit padding on any ABI. */
	EXPECT_EQ(88, sizeof(struct kvpool_info));
	EXPECT_EQ(168, sizeof(struct kvpool_space_open));
	EXPECT_EQ(32, sizeof(struct kvpool_blocks));
	EXPECT_EQ(96, sizeof(struct kvpool_space_info));

	/* Every __u64 is naturally aligned, so i386 and x86-64 agree. */
	EXPECT_EQ(0, offsetof(struct kvpool_info, features) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_info, node_mask) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_info, reserved) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_open, block_bytes) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_open, quota_bytes) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_open, node_mask) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_open, nr_blocks) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_open, map_bytes) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_open, reserved) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_blocks, ids) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_blocks, reserved) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_info, block_bytes) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_space_info, reserved) % 8);

	/* API v2 structs: the sum of their members. */
	EXPECT_EQ(48, sizeof(struct kvpool_publish_entry));
	EXPECT_EQ(40, sizeof(struct kvpool_publish));
	EXPECT_EQ(56, sizeof(struct kvpool_lookup));
	EXPECT_EQ(88, sizeof(struct kvpool_space_destroy));
	EXPECT_EQ(16, sizeof(struct kvpool_residency_entry));	/* API 4 */
	EXPECT_EQ(8, offsetof(struct kvpool_residency_entry, reserved));
	EXPECT_EQ(56, sizeof(struct kvpool_residency));
	EXPECT_EQ(40, offsetof(struct kvpool_residency, entry_bytes));
	EXPECT_EQ(176, sizeof(struct kvpool_space_stats));
	EXPECT_EQ(64, sizeof(struct kvpool_event));
	EXPECT_EQ(32, offsetof(struct kvpool_publish_entry, id));
	EXPECT_EQ(0, offsetof(struct kvpool_publish, entries));
	EXPECT_EQ(0, offsetof(struct kvpool_publish, reserved) % 8);
	EXPECT_EQ(0, offsetof(struct kvpool_lookup, hashes));
	EXPECT_EQ(8, offsetof(struct kvpool_lookup, ids));
	EXPECT_EQ(16, offsetof(struct kvpool_lookup, devices));
	EXPECT_EQ(0, offsetof(struct kvpool_lookup, reserved) % 8);
	EXPECT_EQ(64, offsetof(struct kvpool_space_destroy, flags));
	EXPECT_EQ(16, offsetof(struct kvpool_residency, entries));
	EXPECT_EQ(0, offsetof(struct kvpool_residency, reserved) % 8);
	EXPECT_EQ(8, offsetof(struct kvpool_space_stats, hits));
	EXPECT_EQ(40, offsetof(struct kvpool_space_stats, evictions));
	EXPECT_EQ(0, offsetof(struct kvpool_space_stats, reserved) % 8);
	EXPECT_EQ(24, offsetof(struct kvpool_event, hash));
	EXPECT_EQ(56, offsetof(struct kvpool_event, reserved));
}

TEST(ioctl_numbers_encode_struct_sizes)
{
	EXPECT_EQ(sizeof(struct kvpool_info), _IOC_SIZE(KVPOOL_IOC_INFO));
	EXPECT_EQ(sizeof(struct kvpool_space_open),
		  _IOC_SIZE(KVPOOL_IOC_SPACE_OPEN));
	EXPECT_EQ(sizeof(struct kvpool_blocks), _IOC_SIZE(KVPOOL_IOC_ALLOC));
	EXPECT_EQ(sizeof(struct kvpool_blocks), _IOC_SIZE(KVPOOL_IOC_FREE));
	EXPECT_EQ(sizeof(struct kvpool_space_info),
		  _IOC_SIZE(KVPOOL_IOC_SPACE_INFO));
	EXPECT_EQ(KVPOOL_IOC_MAGIC, _IOC_TYPE(KVPOOL_IOC_INFO));
	EXPECT_EQ(0x02, _IOC_NR(KVPOOL_IOC_ALLOC));
	EXPECT_EQ(_IOC_WRITE, _IOC_DIR(KVPOOL_IOC_ALLOC));	/* API 4 */
	EXPECT_EQ(_IOC_WRITE, _IOC_DIR(KVPOOL_IOC_FREE));

	EXPECT_EQ(sizeof(struct kvpool_publish), _IOC_SIZE(KVPOOL_IOC_PUBLISH));
	EXPECT_EQ(sizeof(struct kvpool_lookup), _IOC_SIZE(KVPOOL_IOC_LOOKUP));
	EXPECT_EQ(sizeof(struct kvpool_blocks), _IOC_SIZE(KVPOOL_IOC_RELEASE));
	EXPECT_EQ(sizeof(struct kvpool_space_destroy),
		  _IOC_SIZE(KVPOOL_IOC_SPACE_DESTROY));
	EXPECT_EQ(sizeof(struct kvpool_residency),
		  _IOC_SIZE(KVPOOL_IOC_RESIDENCY));
	EXPECT_EQ(sizeof(struct kvpool_space_stats),
		  _IOC_SIZE(KVPOOL_IOC_SPACE_STATS));
	EXPECT_EQ(0x05, _IOC_NR(KVPOOL_IOC_PUBLISH));
	EXPECT_EQ(0x06, _IOC_NR(KVPOOL_IOC_LOOKUP));
	EXPECT_EQ(0x07, _IOC_NR(KVPOOL_IOC_RELEASE));
	EXPECT_EQ(0x08, _IOC_NR(KVPOOL_IOC_SPACE_DESTROY));
	EXPECT_EQ(0x09, _IOC_NR(KVPOOL_IOC_RESIDENCY));
	EXPECT_EQ(0x0A, _IOC_NR(KVPOOL_IOC_SPACE_STATS));
	EXPECT_EQ(_IOC_READ | _IOC_WRITE, _IOC_DIR(KVPOOL_IOC_PUBLISH));
	EXPECT_EQ(_IOC_READ | _IOC_WRITE, _IOC_DIR(KVPOOL_IOC_LOOKUP));
	EXPECT_EQ(_IOC_WRITE, _IOC_DIR(KVPOOL_IOC_RELEASE));
	EXPECT_EQ(_IOC_WRITE, _IOC_DIR(KVPOOL_IOC_SPACE_DESTROY));
	EXPECT_EQ(_IOC_READ | _IOC_WRITE, _IOC_DIR(KVPOOL_IOC_RESIDENCY));
	EXPECT_EQ(_IOC_READ | _IOC_WRITE, _IOC_DIR(KVPOOL_IOC_SPACE_STATS));
}

/* ---- fixtures ------------------------------------------------------------- */

/* An fd that has not joined a space. */
FIXTURE(dev) {
	int fd;
	char name[KVPOOL_NAME_MAX];
};

FIXTURE_SETUP(dev)
{
	self->fd = kv_open();
	ASSERT_LE(0, self->fd) TH_LOG("open %s: %s", KV_DEV, strerror(errno));
	kv_name(self->name, sizeof(self->name), "ioctl");
}

FIXTURE_TEARDOWN(dev)
{
	close(self->fd);
}

/* fd joined to a fresh space (64 KiB blocks, 8 MiB quota); fd2 unjoined. */
FIXTURE(space) {
	int fd;
	int fd2;
	char name[KVPOOL_NAME_MAX];
	struct kvpool_space_open so;
};

FIXTURE_SETUP(space)
{
	kv_name(self->name, sizeof(self->name), "ioctl");
	self->fd = kv_open_create(self->name, BLOCK, QUOTA, &self->so);
	ASSERT_LE(0, self->fd) TH_LOG("create %s: %s", self->name,
				      strerror(-self->fd));
	ASSERT_EQ(128, self->so.nr_blocks);
	self->fd2 = kv_open();
	ASSERT_LE(0, self->fd2);
}

FIXTURE_TEARDOWN(space)
{
	close(self->fd2);
	close(self->fd);
}

/* ---- any ioctl ------------------------------------------------------------ */

static void check_enotty(struct __test_metadata *_metadata, int fd)
{
	struct kvpool_info info;
	char buf[256];

	memset(buf, 0, sizeof(buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(fd, _IOWR(KVPOOL_IOC_MAGIC, 0xff,
					      struct kvpool_info), &info));
	EXPECT_EQ(-ENOTTY, kv_ioctl(fd, _IOWR(KVPOOL_IOC_MAGIC, 0x7f,
					      struct kvpool_blocks), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(fd, _IO(KVPOOL_IOC_MAGIC, 0xfe), NULL));
	/* Right number, wrong magic. */
	EXPECT_EQ(-ENOTTY, kv_ioctl(fd, _IOWR(KVPOOL_IOC_MAGIC + 1, 0x00,
					      struct kvpool_info), &info));
	EXPECT_EQ(-ENOTTY, kv_ioctl(fd, 0, buf));
}

TEST_F(dev, unknown_command_enotty)
{
	check_enotty(_metadata, self->fd);
}

TEST_F(space, unknown_command_on_joined_fd_enotty)
{
	check_enotty(_metadata, self->fd);
}

/* ---- INFO ----------------------------------------------------------------- */

TEST_F(dev, info_reports_pool)
{
	struct kvpool_info info;
	__u64 v;
	int i;

	ASSERT_EQ(0, kv_info(self->fd, &info));
	EXPECT_EQ(0, info.flags);
	EXPECT_EQ(KVPOOL_API_VERSION, info.api_version);
	EXPECT_EQ(KVPOOL_FEATURES, info.features);
	EXPECT_EQ((__u32)getpagesize(), info.page_size);
	EXPECT_EQ(KV_CHUNK, info.chunk_size);
	EXPECT_EQ(2, info.nr_nodes);
	EXPECT_EQ(0x3, info.node_mask);
	EXPECT_EQ(KVPOOL_MAX_BATCH, info.max_batch);
	EXPECT_EQ(KV_POOL_DEFAULT, info.pool_bytes);
	EXPECT_LE(info.free_bytes, info.pool_bytes);
	EXPECT_EQ(0, info.free_bytes % info.page_size);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(0, info.reserved[i]);
	}

	/* INFO agrees with sysfs. */
	ASSERT_EQ(0, sysfs_u64("pool_bytes", &v));
	EXPECT_EQ(v, info.pool_bytes);
	ASSERT_EQ(0, sysfs_u64("free_bytes", &v));
	EXPECT_EQ(v, info.free_bytes);
	ASSERT_EQ(0, sysfs_u64("chunk_bytes", &v));
	EXPECT_EQ(v, info.chunk_size);
	ASSERT_EQ(0, sysfs_u64("max_batch", &v));
	EXPECT_EQ(v, info.max_batch);
}

TEST_F(space, info_free_bytes_tracks_space_chunks)
{
	struct kvpool_info before, after;
	__u32 id;

	ASSERT_EQ(0, kv_info(self->fd, &before));
	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	ASSERT_EQ(0, kv_info(self->fd, &after));
	/* One 64 KiB block needs exactly one more chunk from the pool. */
	EXPECT_EQ(before.free_bytes - KV_CHUNK, after.free_bytes);
	EXPECT_EQ(before.pool_bytes, after.pool_bytes);
}

TEST_F(dev, info_flags_nonzero_einval)
{
	static const __u32 bad[] = { 1, 2, 0x80000000u, 0xffffffffu };
	struct kvpool_info info;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(&info, 0, sizeof(info));
		info.flags = bad[i];
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_INFO, &info))
			TH_LOG("flags 0x%x", bad[i]);
	}
}

TEST_F(dev, info_reserved_nonzero_einval)
{
	struct kvpool_info info;
	int i;

	for (i = 0; i < 4; i++) {
		memset(&info, 0, sizeof(info));
		info.reserved[i] = 1ULL << (i * 13);
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_INFO, &info))
			TH_LOG("reserved[%d]", i);
	}
}

TEST_F(dev, info_bad_pointer_efault)
{
	void *ro = ro_page(), *none = none_page();

	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, none);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_INFO, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_INFO, none));
	/* Readable (flags 0, reserved 0) but the answer cannot be written. */
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_INFO, ro));
}

/* ---- SPACE_OPEN ----------------------------------------------------------- */

static void so_create(struct kvpool_space_open *so, const char *name)
{
	kv_so_init(so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
		   BLOCK, QUOTA);
}

/* The request fails with @err and the fd is still free to join afterwards. */
#define EXPECT_OPEN_FAILS(_fd, _so, _err, _what) do { \
	struct kvpool_space_open __so = *(_so); \
	EXPECT_EQ(-(_err), kv_space_open(_fd, &__so)) TH_LOG("%s", _what); \
} while (0)

static void assert_still_unjoined(struct __test_metadata *_metadata, int fd,
				  const char *name)
{
	struct kvpool_space_open so;
	struct kvpool_space_info si;

	/* Nothing was joined or created by the failed calls. */
	EXPECT_EQ(-EBADFD, kv_space_info(fd, &si));
	EXPECT_EQ(-ENOENT, kv_join(fd, name, &so));
	/* And the fd can still create and join. */
	EXPECT_EQ(0, kv_create(fd, name, BLOCK, QUOTA, &so));
	EXPECT_EQ(1, so.created);
}

TEST_F(dev, space_open_unknown_flags_einval)
{
	static const __u32 bad[] = { 1u << 2, 1u << 4, 1u << 31,
				     KVPOOL_SPACE_FLAGS | (1u << 8) };
	struct kvpool_space_open so;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		so_create(&so, self->name);
		so.flags = bad[i];
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "unknown flag");
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_excl_without_create_einval)
{
	struct kvpool_space_open so;

	so_create(&so, self->name);
	so.flags = KVPOOL_SPACE_EXCL;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "EXCL alone");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_expect_uid_without_foreign_einval)
{
	struct kvpool_space_open so;

	so_create(&so, self->name);
	so.expect_uid = 1;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "expect_uid without FOREIGN");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_foreign_with_create_einval)
{
	struct kvpool_space_open so;

	so_create(&so, self->name);
	so.flags |= KVPOOL_SPACE_FOREIGN;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "FOREIGN | CREATE");
	so.flags = KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL | KVPOOL_SPACE_FOREIGN;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "FOREIGN | CREATE | EXCL");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_reserved_nonzero_einval)
{
	struct kvpool_space_open so;
	int i;

	for (i = 0; i < 4; i++) {
		so_create(&so, self->name);
		so.reserved[i] = 1ULL << 63;
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "reserved");
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_reserved_nonzero_on_join_einval)
{
	struct kvpool_space_open so;
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	kv_so_init(&so, self->name, 0, 0, 0);
	so.reserved[3] = 1;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "reserved[3] on join");
	kv_so_init(&so, self->name, 0, 0, 0);
	so.expect_uid = getuid() ? getuid() : 1;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "expect_uid on join without FOREIGN");
	close(fd);
}

TEST_F(dev, space_open_bad_names_einval)
{
	static const char *const bad[] = {
		"", "a b", "a/b", "../x", "x\n", "tab\there", "semi;colon",
		"caf\xc3\xa9", "star*", "a:b", "\x7f",
	};
	struct kvpool_space_open so;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		so_create(&so, "x");
		memset(so.name, 0, sizeof(so.name));
		memcpy(so.name, bad[i], strlen(bad[i]));
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, bad[i]);
		/* Without CREATE the name is validated as well. */
		so.flags = 0;
		so.block_bytes = 0;
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, bad[i]);
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_name_not_terminated_einval)
{
	struct kvpool_space_open so;

	so_create(&so, "x");
	memset(so.name, 'a', sizeof(so.name));
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "64 x 'a', no NUL");
	so.flags = 0;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "64 x 'a', no NUL, join");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_open_name_charset_and_length_accepted)
{
	struct kvpool_space_open so;
	char longname[KVPOOL_NAME_MAX];
	int fd;

	/* Every allowed character class, and a name that starts with dots. */
	so_create(&so, "AZaz09._-");
	snprintf(so.name, sizeof(so.name), "AZaz09._-%d", (int)getpid());
	EXPECT_EQ(0, kv_space_open(self->fd, &so));
	EXPECT_EQ(1, so.created);

	/* 63 characters plus the NUL: the longest name. */
	memset(longname, 0, sizeof(longname));
	snprintf(longname, sizeof(longname), "L%d-", (int)getpid());
	memset(longname + strlen(longname), 'L',
	       sizeof(longname) - 1 - strlen(longname));
	ASSERT_EQ(KVPOOL_NAME_MAX - 1, strlen(longname));
	fd = kv_open();
	ASSERT_LE(0, fd);
	so_create(&so, longname);
	ASSERT_EQ(0, memcmp(so.name, longname, sizeof(longname)));
	EXPECT_EQ(0, kv_space_open(fd, &so));
	close(fd);

	fd = kv_open();
	ASSERT_LE(0, fd);
	snprintf(longname, sizeof(longname), "..%d", (int)getpid());
	so_create(&so, longname);
	EXPECT_EQ(0, kv_space_open(fd, &so));
	close(fd);
}

TEST_F(space, space_open_twice_ebusy)
{
	struct kvpool_space_open so;
	char other[KVPOOL_NAME_MAX];

	/* Same space again, a new space, a plain join: all EBUSY. */
	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	EXPECT_EQ(-EBUSY, kv_space_open(self->fd, &so));
	EXPECT_EQ(-EBUSY, kv_join(self->fd, self->name, &so));
	kv_name(other, sizeof(other), "ioctl-other");
	EXPECT_EQ(-EBUSY, kv_create(self->fd, other, BLOCK, QUOTA, &so));
	/* The other space was not created as a side effect. */
	EXPECT_EQ(-ENOENT, kv_join(self->fd2, other, &so));
}

TEST_F(dev, space_open_absent_enoent)
{
	struct kvpool_space_open so;

	EXPECT_EQ(-ENOENT, kv_join(self->fd, self->name, &so));
	/* block_bytes given without CREATE: still ENOENT. */
	kv_so_init(&so, self->name, 0, BLOCK, QUOTA);
	EXPECT_EQ(-ENOENT, kv_space_open(self->fd, &so));
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(space, space_open_excl_present_eexist)
{
	struct kvpool_space_open so;

	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
		   BLOCK, QUOTA);
	EXPECT_EQ(-EEXIST, kv_space_open(self->fd2, &so));
	/* fd2 did not join: it can join now. */
	EXPECT_EQ(0, kv_join(self->fd2, self->name, &so));
	EXPECT_EQ(0, so.created);
}

TEST_F(dev, space_create_block_bytes_invalid_einval)
{
	long ps = page_size();
	const __u64 bad[] = { 0, 1, 512, ps - 1, ps + 1, ps + ps / 2,
			      3 * ps - 8 };
	struct kvpool_space_open so;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		so_create(&so, self->name);
		so.block_bytes = bad[i];
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "block_bytes");
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_block_bytes_too_big_e2big)
{
	const __u64 bad[] = { KVPOOL_MAX_BLOCK_BYTES + page_size(),
			      2 * KVPOOL_MAX_BLOCK_BYTES, 1ULL << 40 };
	struct kvpool_space_open so;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		so_create(&so, self->name);
		so.block_bytes = bad[i];
		so.quota_bytes = KVPOOL_MAX_SPACE_BYTES;
		EXPECT_OPEN_FAILS(self->fd, &so, E2BIG, "block_bytes");
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_quota_below_block_einval)
{
	struct kvpool_space_open so;

	so_create(&so, self->name);
	so.quota_bytes = 0;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "quota 0");
	so.quota_bytes = BLOCK - page_size();
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "quota < block");
	so.quota_bytes = BLOCK - 1;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "quota = block - 1");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_quota_too_big_e2big)
{
	struct kvpool_space_open so;

	so_create(&so, self->name);
	so.block_bytes = KV_CHUNK;
	so.quota_bytes = KVPOOL_MAX_SPACE_BYTES + KV_CHUNK;
	EXPECT_OPEN_FAILS(self->fd, &so, E2BIG, "quota max + chunk");
	so.quota_bytes = ~0ULL;
	EXPECT_OPEN_FAILS(self->fd, &so, E2BIG, "quota ~0");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_limits_are_inclusive)
{
	struct kvpool_space_open so;

	/* Largest block and largest quota: 1024 blocks, nothing backed. */
	so_create(&so, self->name);
	so.block_bytes = KVPOOL_MAX_BLOCK_BYTES;
	so.quota_bytes = KVPOOL_MAX_SPACE_BYTES;
	ASSERT_EQ(0, kv_space_open(self->fd, &so));
	EXPECT_EQ(1, so.created);
	EXPECT_EQ(KVPOOL_MAX_SPACE_BYTES / KVPOOL_MAX_BLOCK_BYTES,
		  so.nr_blocks);
	EXPECT_EQ(KVPOOL_MAX_SPACE_BYTES, so.map_bytes);
}

TEST_F(dev, space_create_reports_geometry)
{
	struct kvpool_space_open so;

	/* quota not a multiple of block_bytes: nr_blocks rounds down. */
	so_create(&so, self->name);
	so.block_bytes = 3 * BLOCK;
	so.quota_bytes = 10 * BLOCK;
	ASSERT_EQ(0, kv_space_open(self->fd, &so));
	EXPECT_EQ(1, so.created);
	EXPECT_EQ(3, so.nr_blocks);
	EXPECT_EQ(9 * BLOCK, so.map_bytes);
	EXPECT_EQ(3 * BLOCK, so.block_bytes);
	EXPECT_EQ(getuid(), so.uid);
	EXPECT_EQ(getgid(), so.gid);
	EXPECT_EQ(0, so.expect_uid);
}

TEST_F(dev, space_create_mode_bits_einval)
{
	static const __u32 bad[] = { 01000, 02000, 04000, 010000, 0x80000000u };
	struct kvpool_space_open so;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		so_create(&so, self->name);
		so.mode = bad[i] | 0600;
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "mode");
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_numa_policy_invalid_einval)
{
	static const __u32 bad[] = { 3, 4, 0x100, 0xffffffffu };
	struct kvpool_space_open so;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		so_create(&so, self->name);
		so.numa_policy = bad[i];
		so.node_mask = 0x1;
		EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "numa_policy");
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_node_mask_without_pool_pages_einval)
{
	static const __u64 bad[] = { 1ULL << 2, 0x7, 1ULL << 63, ~0ULL };
	struct kvpool_space_open so;
	unsigned int i, pol;

	for (pol = 0; pol <= KVPOOL_NUMA_INTERLEAVE; pol++) {
		for (i = 0; i < ARRAY_SIZE(bad); i++) {
			so_create(&so, self->name);
			so.numa_policy = pol;
			so.node_mask = bad[i];
			EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "node_mask");
		}
	}
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_bind_empty_mask_einval)
{
	struct kvpool_space_open so;

	so_create(&so, self->name);
	so.numa_policy = KVPOOL_NUMA_BIND;
	so.node_mask = 0;
	EXPECT_OPEN_FAILS(self->fd, &so, EINVAL, "BIND, mask 0");
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, space_create_valid_numa_requests_accepted)
{
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	static const struct { __u32 pol; __u64 mask; } ok[] = {
		{ KVPOOL_NUMA_PREFERRED, 0 }, { KVPOOL_NUMA_PREFERRED, 0x2 },
		{ KVPOOL_NUMA_BIND, 0x1 }, { KVPOOL_NUMA_BIND, 0x3 },
		{ KVPOOL_NUMA_INTERLEAVE, 0 }, { KVPOOL_NUMA_INTERLEAVE, 0x3 },
	};
	unsigned int i;
	int fd;

	for (i = 0; i < ARRAY_SIZE(ok); i++) {
		fd = kv_open();
		ASSERT_LE(0, fd);
		kv_name(name, sizeof(name), "numaok");
		so_create(&so, name);
		so.numa_policy = ok[i].pol;
		so.node_mask = ok[i].mask;
		EXPECT_EQ(0, kv_space_open(fd, &so))
			TH_LOG("policy %u mask 0x%llx", ok[i].pol,
			       (unsigned long long)ok[i].mask);
		close(fd);
	}
}

TEST_F(space, join_block_bytes_mismatch_einval)
{
	struct kvpool_space_open so;

	kv_so_init(&so, self->name, 0, 2 * BLOCK, 0);
	EXPECT_EQ(-EINVAL, kv_space_open(self->fd2, &so));
	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, BLOCK / 2, QUOTA);
	EXPECT_EQ(-EINVAL, kv_space_open(self->fd2, &so));
	kv_so_init(&so, self->name, 0, 1, 0);
	EXPECT_EQ(-EINVAL, kv_space_open(self->fd2, &so));
	/* Still unjoined; the space's own block size is accepted. */
	kv_so_init(&so, self->name, 0, BLOCK, 0);
	EXPECT_EQ(0, kv_space_open(self->fd2, &so));
	EXPECT_EQ(0, so.created);
}

/*
 * API 4, issue 14 finding 13: a create-or-join that finds the space joins
 * it only with create fields that would create a space, and writes the
 * space's own values over them.
 */
TEST_F(space, create_or_join_writes_back_the_spaces_values)
{
	struct kvpool_space_open so;

	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, BLOCK, 4 * QUOTA + 4096);
	so.mode = 0666;
	so.numa_policy = KVPOOL_NUMA_INTERLEAVE;
	so.node_mask = 0x1;
	ASSERT_EQ(0, kv_space_open(self->fd2, &so));
	EXPECT_EQ(0, so.created);
	EXPECT_EQ(self->so.space_id, so.space_id);
	EXPECT_EQ(BLOCK, so.block_bytes);
	EXPECT_EQ(self->so.nr_blocks, so.nr_blocks);
	EXPECT_EQ(self->so.map_bytes, so.map_bytes);
	EXPECT_EQ(self->so.uid, so.uid);
	EXPECT_EQ(self->so.gid, so.gid);
	/* What the space has, not what this call asked for. */
	EXPECT_EQ(QUOTA, so.quota_bytes);
	EXPECT_EQ(0600, so.mode);
	EXPECT_EQ(KVPOOL_NUMA_PREFERRED, so.numa_policy);
	EXPECT_EQ(0, so.node_mask);
}

/* A create of a non-block-multiple quota reports it in whole blocks. */
TEST_F(dev, create_reports_quota_in_whole_blocks)
{
	struct kvpool_space_open so;

	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL, BLOCK,
		   QUOTA + BLOCK / 2);
	ASSERT_EQ(0, kv_space_open(self->fd, &so));
	EXPECT_EQ(1, so.created);
	EXPECT_EQ(QUOTA / BLOCK, so.nr_blocks);
	EXPECT_EQ(QUOTA, so.quota_bytes);
}

/*
 * API 4, issue 14 finding 13: create fields are checked whether a
 * create-or-join creates or joins; bad ones never join.
 */
TEST_F(space, create_or_join_checks_create_fields)
{
	struct kvpool_space_open so;
	long ps = page_size();
	static const struct {
		__u64 block_bytes, quota_bytes, node_mask;
		__u32 mode, policy;
		int err;
		const char *what;
	} bad[] = {
		{ 0, QUOTA, 0, 0600, 0, EINVAL, "block_bytes 0" },
		{ BLOCK, BLOCK - 4096, 0, 0600, 0, EINVAL, "quota below block_bytes" },
		{ BLOCK, KVPOOL_MAX_SPACE_BYTES + BLOCK, 0, 0600, 0, E2BIG, "quota too big" },
		{ BLOCK, QUOTA, 0, 01000, 0, EINVAL, "mode beyond 0777" },
		{ BLOCK, QUOTA, 0, 0600, 3, EINVAL, "unknown policy" },
		{ BLOCK, QUOTA, 1ULL << 63, 0600, 0, EINVAL, "mask bit without pool pages" },
		{ BLOCK, QUOTA, 0, 0600, KVPOOL_NUMA_BIND, EINVAL, "BIND, empty mask" },
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, bad[i].block_bytes,
			   bad[i].quota_bytes);
		so.mode = bad[i].mode;
		so.numa_policy = bad[i].policy;
		so.node_mask = bad[i].node_mask;
		EXPECT_EQ(-bad[i].err, kv_space_open(self->fd2, &so)) TH_LOG("%s", bad[i].what);
	}
	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, BLOCK + ps / 2, QUOTA);
	EXPECT_EQ(-EINVAL, kv_space_open(self->fd2, &so)) TH_LOG("block_bytes not a page multiple");
	/* None of them joined. */
	EXPECT_EQ(-EBADFD, kv_space_info(self->fd2, &(struct kvpool_space_info){}));
	EXPECT_EQ(0, kv_join(self->fd2, self->name, &so));
}

/*
 * API 4, issue 14 finding 13: without KVPOOL_SPACE_CREATE the create
 * fields must be 0 (PERSIST already had to be); a join never ignores them.
 */
TEST_F(space, join_create_fields_nonzero_einval)
{
	struct kvpool_space_open so;
	int i;

	for (i = 0; i < 8; i++) {
		kv_so_init(&so, self->name, i < 4 ? 0 : KVPOOL_SPACE_FOREIGN, 0, 0);
		so.expect_uid = self->so.uid;
		if (!(so.flags & KVPOOL_SPACE_FOREIGN))
			so.expect_uid = 0;
		switch (i % 4) {
		case 0:
			so.mode = 0600;
			break;
		case 1:
			so.quota_bytes = QUOTA;
			break;
		case 2:
			so.node_mask = 1;
			break;
		default:
			so.numa_policy = KVPOOL_NUMA_INTERLEAVE;
			break;
		}
		EXPECT_EQ(-EINVAL, kv_space_open(self->fd2, &so)) TH_LOG("case %d", i);
	}
	EXPECT_EQ(-EBADFD, kv_space_info(self->fd2, &(struct kvpool_space_info){}));
	/* A join without them reports the space's. */
	ASSERT_EQ(0, kv_join(self->fd2, self->name, &so));
	EXPECT_EQ(0600, so.mode);
	EXPECT_EQ(QUOTA, so.quota_bytes);
}

TEST_F(space, join_without_permission_eacces)
{
	const struct kv_cred nobody = { .uid = 65534, .gid = 65534 };
	struct kvpool_space_open so;
	int fd;

	/*
	 * The space is root's, mode 0600; uid/gid 65534 may not join it.
	 * SPACE_OPEN checks the opener of the fd, so nobody opens it.
	 */
	fd = kv_open_as(&nobody);
	ASSERT_LE(0, fd) TH_LOG("open as nobody: %s", strerror(-fd));
	/* Accept root as the owner, so the mode is what refuses. */
	kv_so_init(&so, self->name, KVPOOL_SPACE_FOREIGN, 0, 0);
	so.expect_uid = 0;
	EXPECT_EQ(-EACCES, kv_space_open(fd, &so));
	/* fd did not join; root can. */
	EXPECT_EQ(-EBADFD, kv_space_info(fd, &(struct kvpool_space_info){}));
	close(fd);
	EXPECT_EQ(0, kv_join(self->fd2, self->name, &so));
}

TEST_F(dev, space_open_bad_pointer_efault)
{
	void *none = none_page();

	ASSERT_NE(NULL, none);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_OPEN, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_OPEN, none));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_OPEN,
				    (void *)8));
	assert_still_unjoined(_metadata, self->fd, self->name);
}

TEST_F(dev, failed_open_leaves_fd_unjoined)
{
	struct kvpool_space_open so;

	EXPECT_EQ(-ENOENT, kv_join(self->fd, self->name, &so));
	so_create(&so, self->name);
	so.block_bytes = 0;
	EXPECT_EQ(-EINVAL, kv_space_open(self->fd, &so));
	assert_still_unjoined(_metadata, self->fd, self->name);
}

/* ---- ALLOC ---------------------------------------------------------------- */

static void expect_my_blocks(struct __test_metadata *_metadata, int fd,
			     __u64 mine, __u64 owned)
{
	struct kvpool_space_info si;

	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(mine, si.my_blocks);
	EXPECT_EQ(owned, si.owned_blocks);
	EXPECT_EQ(si.backed_blocks, si.free_blocks + si.owned_blocks);
}

TEST_F(dev, alloc_unjoined_ebadfd)
{
	__u32 ids[4];

	EXPECT_EQ(-EBADFD, kv_alloc(self->fd, ids, 1));
	EXPECT_EQ(-EBADFD, kv_alloc(self->fd, ids, 4));
}

TEST_F(space, alloc_flags_reserved_einval)
{
	struct kvpool_blocks b;
	__u32 ids[2];
	int i;

	memset(&b, 0, sizeof(b));
	b.ids = (uintptr_t)ids;
	b.count = 1;
	b.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_ALLOC, &b));
	b.flags = 0x80000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_ALLOC, &b));
	for (i = 0; i < 2; i++) {
		memset(&b, 0, sizeof(b));
		b.ids = (uintptr_t)ids;
		b.count = 1;
		b.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_ALLOC, &b));
	}
	expect_my_blocks(_metadata, self->fd, 0, 0);
}

TEST_F(space, alloc_count_zero_einval)
{
	__u32 ids[1];

	EXPECT_EQ(-EINVAL, kv_alloc(self->fd, ids, 0));
	EXPECT_EQ(-EINVAL, kv_alloc(self->fd, NULL, 0));
	expect_my_blocks(_metadata, self->fd, 0, 0);
}

TEST_F(space, alloc_count_over_max_batch_e2big)
{
	__u32 *ids = calloc(KVPOOL_MAX_BATCH + 2, sizeof(*ids));

	ASSERT_NE(NULL, ids);
	EXPECT_EQ(-E2BIG, kv_alloc(self->fd, ids, KVPOOL_MAX_BATCH + 1));
	EXPECT_EQ(-E2BIG, kv_alloc(self->fd, ids, 0xffffffffu));
	/* Limits are checked before the ids pointer is used. */
	EXPECT_EQ(-E2BIG, kv_alloc(self->fd, NULL, KVPOOL_MAX_BATCH + 1));
	expect_my_blocks(_metadata, self->fd, 0, 0);
	free(ids);
}

TEST_F(dev, alloc_count_max_batch_is_not_e2big)
{
	__u32 *ids = calloc(KVPOOL_MAX_BATCH, sizeof(*ids));
	struct kvpool_space_open so;

	ASSERT_NE(NULL, ids);
	/* 65536 one-page blocks fit the quota but not a 128 MiB pool. */
	ASSERT_EQ(0, kv_create(self->fd, self->name, page_size(),
			       KVPOOL_MAX_BATCH * (__u64)page_size(), &so));
	ASSERT_EQ(KVPOOL_MAX_BATCH, so.nr_blocks);
	ASSERT_LT(sysfs_get("free_bytes"), KVPOOL_MAX_BATCH * (__u64)page_size());
	EXPECT_EQ(-ENOSPC, kv_alloc(self->fd, ids, KVPOOL_MAX_BATCH));
	expect_my_blocks(_metadata, self->fd, 0, 0);
	free(ids);
}

TEST_F(space, alloc_quota_exhausted_enospc)
{
	__u32 ids[130];

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 120));
	/* 8 left: a batch of 9 fails whole, 8 then succeed, then 1 fails. */
	EXPECT_EQ(-ENOSPC, kv_alloc(self->fd, ids + 120, 9));
	expect_my_blocks(_metadata, self->fd, 120, 120);
	EXPECT_EQ(0, kv_alloc(self->fd, ids + 120, 8));
	EXPECT_EQ(-ENOSPC, kv_alloc(self->fd, ids + 128, 1));
	expect_my_blocks(_metadata, self->fd, 128, 128);
}

TEST_F(space, alloc_bad_pointers_efault)
{
	void *none = none_page();

	ASSERT_NE(NULL, none);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_ALLOC, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_ALLOC, none));
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, NULL, 1));
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, none, 4));
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, (__u32 *)8, 1));
	expect_my_blocks(_metadata, self->fd, 0, 0);
}

TEST_F(space, alloc_ids_unwritable_efault_nothing_allocated)
{
	__u32 *ro = ro_page();
	struct kvpool_space_info si;
	__u32 ids[128];
	__u64 allocs;

	ASSERT_NE(NULL, ro);
	allocs = sysfs_get("allocs");
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, ro, 1));
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, ro, 16));
	expect_my_blocks(_metadata, self->fd, 0, 0);
	EXPECT_EQ(allocs, sysfs_get("allocs"));
	/* All blocks still free: the whole quota can be allocated. */
	EXPECT_EQ(0, kv_alloc(self->fd, ids, 128));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	EXPECT_EQ(128, si.my_blocks);
}

TEST_F(space, alloc_efault_takes_no_chunks_from_pool)
{
	struct kvpool_space_info si;
	__u32 *ro = ro_page();
	__u64 free_before;

	ASSERT_NE(NULL, ro);
	free_before = sysfs_get("free_bytes");
	/* A fresh space: this batch would need two chunks from the pool. */
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, ro, 40));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	EXPECT_EQ(0, si.my_blocks);
	EXPECT_EQ(0, si.backed_bytes)
		TH_LOG("a failed ALLOC left %llu bytes of pool chunks in the space",
		       (unsigned long long)si.backed_bytes);
	EXPECT_EQ(free_before, sysfs_get("free_bytes"));
}

TEST_F(space, alloc_ids_partly_unmapped_efault_nothing_allocated)
{
	char *p = rw_then_none();
	__u32 *ids;

	ASSERT_NE(NULL, p);
	/* ids[0] and ids[1] writable, ids[2] on the PROT_NONE page. */
	ids = (__u32 *)(p + page_size()) - 2;
	EXPECT_EQ(-EFAULT, kv_alloc(self->fd, ids, 3));
	expect_my_blocks(_metadata, self->fd, 0, 0);
	EXPECT_EQ(0, kv_alloc(self->fd, ids, 2));
	expect_my_blocks(_metadata, self->fd, 2, 2);
}

/* Three pages, the middle one unmapped: returns the first. */
static void *rw_hole_rw(void)
{
	long ps = page_size();
	char *p = mmap(NULL, 3 * ps, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (munmap(p + ps, ps))
		return NULL;
	return p;
}

/* The start of the [vvar] mapping (read-only, VM_PFNMAP), or NULL. */
static void *vvar_page(void)
{
	unsigned long lo = 0, hi;
	char line[256];
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[vvar]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			break;
	fclose(f);
	return (void *)lo;
}

static __u64 evictions(const struct kvpool_space_stats *st)
{
	__u64 n = 0;
	int i;

	for (i = 0; i < KVPOOL_EVICT_CAUSES; i++)
		n += st->evictions[i];
	return n;
}

/*
 * Issue 14 finding 13: an ALLOC that fails with EFAULT must not have
 * evicted anything.  A space full of cached blocks makes every ALLOC
 * evict; each unwritable ids array below must be refused before that,
 * including the shapes a probe that only faults pages in can miss (a hole
 * in the middle of the array, a read-only PFN mapping, a writable page
 * followed by an unwritable one).
 */
TEST_F(dev, alloc_efault_keeps_cached_blocks)
{
	enum { NR = 2048 };
	struct kvpool_space_stats st;
	struct kvpool_space_info si;
	long ps = page_size();
	__u32 *ids = calloc(NR, sizeof(*ids));
	char *p;
	struct {
		const char *what;
		void *ids;
		__u32 count;
	} bad[4];
	int i, n = 0;

	ASSERT_NE(NULL, ids);
	ASSERT_EQ(0, kv_create(self->fd, self->name, 4096, NR * 4096ULL, NULL));
	ASSERT_EQ(0, kv_alloc(self->fd, ids, NR));
	ASSERT_EQ(0, kv_publish_seq(self->fd, ids, NR, 0xefau, 0, NULL));
	ASSERT_EQ(0, kv_release(self->fd, ids, NR));
	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	ASSERT_EQ(NR, st.cached_blocks);
	ASSERT_EQ(0, evictions(&st));

	bad[n].what = "read-only page";
	bad[n].ids = ro_page();
	bad[n++].count = 1;
	p = rw_then_none();
	bad[n].what = "writable page, then PROT_NONE";
	bad[n].ids = p ? p + ps - 8 : NULL;
	bad[n++].count = 3;
	p = rw_hole_rw();
	bad[n].what = "writable, unmapped, writable";
	bad[n].ids = p ? p + ps - 8 : NULL;
	bad[n++].count = (__u32)(ps + 16) / 4;
	bad[n].what = "[vvar]";
	bad[n].ids = vvar_page();
	bad[n++].count = 1;
	for (i = 0; i < n; i++) {
		if (!bad[i].ids) {
			TH_LOG("no %s here: not tried", bad[i].what);
			continue;
		}
		EXPECT_EQ(-EFAULT, kv_alloc(self->fd, bad[i].ids, bad[i].count))
			TH_LOG("%s", bad[i].what);
		ASSERT_EQ(0, kv_space_stats(self->fd, &st));
		EXPECT_EQ(NR, st.cached_blocks) TH_LOG("%s", bad[i].what);
		EXPECT_EQ(0, evictions(&st)) TH_LOG("%s", bad[i].what);
		EXPECT_EQ(0, st.pressure) TH_LOG("%s", bad[i].what);
		EXPECT_EQ(0, kv_space_info(self->fd, &si));
		EXPECT_EQ(0, si.my_blocks) TH_LOG("%s", bad[i].what);
	}
	/* The cache was evictable all along: a good array takes one block. */
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	EXPECT_EQ(NR - 1, st.cached_blocks);
	EXPECT_EQ(1, evictions(&st));
	free(ids);
}

/*
 * The ids array taken away during the call, the other way an ALLOC can
 * meet an unwritable array.  Its two pages are userfaultfd-registered:
 * the handler serves the first fault of each, and serving the second
 * page's takes the first page's contents away again (MADV_DONTNEED), so
 * that the next access to the first page faults anew; that fault, which
 * can only come once the call is past its checks and has evicted, unmaps
 * the page.  A call that checked the array by faulting it in and copied
 * the ids out later fails there with EFAULT, after its evictions (issue
 * 14, finding 13).  The call must either fail with nothing evicted or
 * succeed.
 */
struct takeaway {
	int uffd;
	int stop[2];
	size_t psz;
	char *pages;		/* P0, P1 */
	char *zero;
	int faults[2];
	int unmapped;
};

static void *takeaway_handler(void *arg)
{
	struct takeaway *t = arg;

	for (;;) {
		struct pollfd pfd[2] = { { .fd = t->uffd, .events = POLLIN },
					 { .fd = t->stop[0], .events = POLLIN } };
		struct uffdio_range range;
		struct uffdio_copy copy;
		struct uffd_msg msg;
		int pg;

		if (poll(pfd, 2, -1) < 1)
			continue;
		if (pfd[1].revents)
			return NULL;
		if (read(t->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		pg = msg.arg.pagefault.address >= (unsigned long)t->pages + t->psz;
		if (++t->faults[pg] > 1 && pg == 0) {
			munmap(t->pages, t->psz);
			t->unmapped = 1;
			range.start = (unsigned long)t->pages;
			range.len = t->psz;
			ioctl(t->uffd, UFFDIO_WAKE, &range);
			continue;
		}
		if (pg == 1)
			madvise(t->pages, t->psz, MADV_DONTNEED);
		memset(&copy, 0, sizeof(copy));
		copy.dst = (unsigned long)t->pages + pg * t->psz;
		copy.src = (unsigned long)t->zero;
		copy.len = t->psz;
		ioctl(t->uffd, UFFDIO_COPY, &copy);
	}
}

TEST_F(space, alloc_ids_taken_away_mid_call_keeps_cache)
{
	struct kvpool_space_stats st;
	struct kvpool_space_info si;
	struct uffdio_register reg;
	struct uffdio_api api;
	struct takeaway t;
	__u32 ids[128];
	pthread_t th;
	int ret;

	/* The whole quota cached: any ALLOC evicts. */
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 128));
	ASSERT_EQ(0, kv_publish_seq(self->fd, ids, 128, 0x7a4e, 0, NULL));
	ASSERT_EQ(0, kv_release(self->fd, ids, 128));
	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	ASSERT_EQ(128, st.cached_blocks);

	memset(&t, 0, sizeof(t));
	t.psz = page_size();
	t.uffd = (int)syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (t.uffd < 0)
		SKIP(return, "no userfaultfd: %s", strerror(errno));
	memset(&api, 0, sizeof(api));
	api.api = UFFD_API;
	ASSERT_EQ(0, ioctl(t.uffd, UFFDIO_API, &api));
	t.pages = mmap(NULL, 2 * t.psz, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, t.pages);
	t.zero = calloc(1, t.psz);
	ASSERT_NE(NULL, t.zero);
	memset(&reg, 0, sizeof(reg));
	reg.range.start = (unsigned long)t.pages;
	reg.range.len = 2 * t.psz;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	ASSERT_EQ(0, ioctl(t.uffd, UFFDIO_REGISTER, &reg));
	ASSERT_EQ(0, pipe(t.stop));
	ASSERT_EQ(0, pthread_create(&th, NULL, takeaway_handler, &t));

	/* 4 ids: two at the end of P0, two at the start of P1. */
	ret = kv_alloc(self->fd, (__u32 *)(t.pages + t.psz) - 2, 4);

	ASSERT_EQ(1, write(t.stop[1], "x", 1));
	pthread_join(th, NULL);
	TH_LOG("ALLOC: %s; faults P0 %d, P1 %d; P0 unmapped: %d",
	       ret ? strerror(-ret) : "ok", t.faults[0], t.faults[1], t.unmapped);
	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	if (ret == -EFAULT) {
		EXPECT_EQ(128, st.cached_blocks) TH_LOG("an EFAULT ALLOC evicted");
		EXPECT_EQ(0, evictions(&st));
		EXPECT_EQ(0, si.my_blocks);
	} else {
		EXPECT_EQ(0, ret);
		EXPECT_EQ(124, st.cached_blocks);
		EXPECT_EQ(4, evictions(&st));
		EXPECT_EQ(4, si.my_blocks);
	}
	close(t.stop[0]);
	close(t.stop[1]);
	close(t.uffd);
	free(t.zero);
}

TEST_F(space, alloc_fresh_space_ids_start_at_zero)
{
	__u32 ids[128];
	unsigned char seen[128];
	int i;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	EXPECT_EQ(0, ids[0]);
	ASSERT_EQ(0, kv_alloc(self->fd, ids + 1, 127));
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < 128; i++) {
		ASSERT_LT(ids[i], 128) TH_LOG("ids[%d] = %u", i, ids[i]);
		EXPECT_EQ(0, seen[ids[i]]) TH_LOG("id %u twice", ids[i]);
		seen[ids[i]] = 1;
	}
	expect_my_blocks(_metadata, self->fd, 128, 128);
}

/*
 * API 4, issue 14 finding 13: ALLOC never wrote its struct back, so it is
 * _IOW now.  The API 3 number (_IOWR) is no command any more, and the
 * struct may sit on a read-only page.
 */
TEST_F(space, alloc_is_iow_api3_number_enotty)
{
	struct kvpool_blocks b, *ro;
	__u32 ids[2];

	memset(&b, 0, sizeof(b));
	b.ids = (uintptr_t)ids;
	b.count = 2;
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOWR(KVPOOL_IOC_MAGIC, 0x02,
						    struct kvpool_blocks), &b));
	expect_my_blocks(_metadata, self->fd, 0, 0);
	ro = ro_copy(&b, sizeof(b));
	ASSERT_NE(NULL, ro);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_ALLOC, ro));
	expect_my_blocks(_metadata, self->fd, 2, 2);
}

/* ---- FREE ----------------------------------------------------------------- */

TEST_F(dev, free_unjoined_ebadfd)
{
	__u32 ids[1] = { 0 };

	EXPECT_EQ(-EBADFD, kv_free(self->fd, ids, 1));
}

TEST_F(space, free_flags_reserved_einval)
{
	struct kvpool_blocks b;
	__u32 ids[1];
	int i;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	memset(&b, 0, sizeof(b));
	b.ids = (uintptr_t)ids;
	b.count = 1;
	b.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_FREE, &b));
	b.flags = 0x40000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_FREE, &b));
	for (i = 0; i < 2; i++) {
		memset(&b, 0, sizeof(b));
		b.ids = (uintptr_t)ids;
		b.count = 1;
		b.reserved[i] = ~0ULL;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_FREE, &b));
	}
	expect_my_blocks(_metadata, self->fd, 1, 1);
}

TEST_F(space, free_count_zero_einval)
{
	__u32 ids[1];

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	EXPECT_EQ(-EINVAL, kv_free(self->fd, ids, 0));
	expect_my_blocks(_metadata, self->fd, 1, 1);
}

TEST_F(space, free_count_over_max_batch_e2big)
{
	__u32 *ids = calloc(KVPOOL_MAX_BATCH + 1, sizeof(*ids));

	ASSERT_NE(NULL, ids);
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	EXPECT_EQ(-E2BIG, kv_free(self->fd, ids, KVPOOL_MAX_BATCH + 1));
	EXPECT_EQ(-E2BIG, kv_free(self->fd, NULL, 0xffffffffu));
	expect_my_blocks(_metadata, self->fd, 1, 1);
	free(ids);
}

TEST_F(space, free_bad_pointers_efault)
{
	void *none = none_page();
	char *p = rw_then_none();
	__u32 *ids;

	ASSERT_NE(NULL, none);
	ASSERT_NE(NULL, p);
	ids = (__u32 *)(p + page_size()) - 2;
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 2));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_FREE, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_FREE, none));
	EXPECT_EQ(-EFAULT, kv_free(self->fd, NULL, 1));
	EXPECT_EQ(-EFAULT, kv_free(self->fd, none, 1));
	/* Two valid ids followed by one on an unreadable page. */
	EXPECT_EQ(-EFAULT, kv_free(self->fd, ids, 3));
	expect_my_blocks(_metadata, self->fd, 2, 2);
	EXPECT_EQ(0, kv_free(self->fd, ids, 2));
	expect_my_blocks(_metadata, self->fd, 0, 0);
}

TEST_F(space, free_id_outside_backed_range_einval)
{
	struct kvpool_space_info si;
	__u32 ids[2];

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	ASSERT_LT(si.backed_blocks, si.nr_blocks);
	ids[1] = si.backed_blocks;		/* first unbacked block */
	EXPECT_EQ(-EINVAL, kv_free(self->fd, ids + 1, 1));
	ids[1] = si.nr_blocks - 1;
	EXPECT_EQ(-EINVAL, kv_free(self->fd, ids + 1, 1));
	ids[1] = si.nr_blocks;			/* past the quota */
	EXPECT_EQ(-EINVAL, kv_free(self->fd, ids + 1, 1));
	ids[1] = 0xffffffffu;
	EXPECT_EQ(-EINVAL, kv_free(self->fd, ids + 1, 1));
	/* A valid id then an invalid one: nothing freed. */
	EXPECT_EQ(-EINVAL, kv_free(self->fd, ids, 2));
	expect_my_blocks(_metadata, self->fd, 1, 1);
}

TEST_F(space, free_duplicate_id_einval_nothing_freed)
{
	__u32 ids[4], dup[3];

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 4));
	dup[0] = ids[0];
	dup[1] = ids[1];
	dup[2] = ids[0];
	EXPECT_EQ(-EINVAL, kv_free(self->fd, dup, 3));
	dup[0] = ids[3];
	dup[1] = ids[3];
	EXPECT_EQ(-EINVAL, kv_free(self->fd, dup, 2));
	expect_my_blocks(_metadata, self->fd, 4, 4);
	EXPECT_EQ(0, kv_free(self->fd, ids, 4));
	expect_my_blocks(_metadata, self->fd, 0, 0);
}

TEST_F(space, free_unowned_block_eperm)
{
	struct kvpool_space_info si;
	__u32 ids[2], id;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	ASSERT_GE(si.backed_blocks, 2);
	/* A backed but free block. */
	id = ids[0] == 0 ? 1 : 0;
	EXPECT_EQ(-EPERM, kv_free(self->fd, &id, 1));
	/* A block this fd freed already. */
	EXPECT_EQ(0, kv_free(self->fd, ids, 1));
	EXPECT_EQ(-EPERM, kv_free(self->fd, ids, 1));
	/* Owned + free in one batch: nothing freed. */
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 1));
	ids[1] = id;
	if (ids[1] == ids[0])
		ids[1] = ids[0] + 1;
	EXPECT_EQ(-EPERM, kv_free(self->fd, ids, 2));
	expect_my_blocks(_metadata, self->fd, 1, 1);
}

TEST_F(space, free_block_of_other_fd_eperm)
{
	struct kvpool_space_open so;
	__u32 mine[2], theirs[2], mixed[2];

	ASSERT_EQ(0, kv_join(self->fd2, self->name, &so));
	ASSERT_EQ(0, kv_alloc(self->fd, mine, 2));
	ASSERT_EQ(0, kv_alloc(self->fd2, theirs, 2));
	EXPECT_EQ(-EPERM, kv_free(self->fd, theirs, 1));
	EXPECT_EQ(-EPERM, kv_free(self->fd2, mine, 2));
	mixed[0] = mine[0];
	mixed[1] = theirs[1];
	EXPECT_EQ(-EPERM, kv_free(self->fd, mixed, 2));
	expect_my_blocks(_metadata, self->fd, 2, 4);
	expect_my_blocks(_metadata, self->fd2, 2, 4);
	EXPECT_EQ(0, kv_free(self->fd2, theirs, 2));
	expect_my_blocks(_metadata, self->fd, 2, 2);
}

TEST_F(space, free_then_alloc_roundtrip)
{
	struct kvpool_space_info si;
	__u32 ids[128];

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 128));
	EXPECT_EQ(0, kv_free(self->fd, ids + 100, 28));
	expect_my_blocks(_metadata, self->fd, 100, 100);
	EXPECT_EQ(0, kv_alloc(self->fd, ids + 100, 28));
	EXPECT_EQ(0, kv_free(self->fd, ids, 128));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	EXPECT_EQ(0, si.my_blocks);
	EXPECT_EQ(si.backed_blocks, si.free_blocks);
}

/* ---- SPACE_INFO ----------------------------------------------------------- */

TEST_F(dev, space_info_unjoined_ebadfd)
{
	struct kvpool_space_info si;

	EXPECT_EQ(-EBADFD, kv_space_info(self->fd, &si));
}

TEST_F(space, space_info_flags_reserved_einval)
{
	struct kvpool_space_info si;
	int i;

	memset(&si, 0, sizeof(si));
	si.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_INFO, &si));
	memset(&si, 0, sizeof(si));
	si.flags = 0x80000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_INFO, &si));
	for (i = 0; i < 4; i++) {
		memset(&si, 0, sizeof(si));
		si.reserved[i] = 1;
		EXPECT_EQ(-EINVAL,
			  kv_ioctl(self->fd, KVPOOL_IOC_SPACE_INFO, &si));
	}
}

TEST_F(space, space_info_bad_pointer_efault)
{
	void *ro = ro_page(), *none = none_page();

	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, none);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_INFO, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_INFO, none));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_INFO, ro));
}

TEST_F(space, space_info_counts)
{
	struct kvpool_space_info si, si2;
	struct kvpool_space_open so;
	__u32 ids[40];

	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	EXPECT_EQ(0, si.flags);
	EXPECT_EQ(self->so.space_id, si.space_id);
	EXPECT_EQ(BLOCK, si.block_bytes);
	EXPECT_EQ(128, si.nr_blocks);
	EXPECT_EQ(0, si.backed_blocks);
	EXPECT_EQ(0, si.backed_bytes);
	EXPECT_EQ(0, si.owned_blocks);
	EXPECT_EQ(0, si.my_blocks);
	EXPECT_EQ(0, si.free_blocks);

	ASSERT_EQ(0, kv_join(self->fd2, self->name, &so));
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 30));
	ASSERT_EQ(0, kv_alloc(self->fd2, ids + 30, 10));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	ASSERT_EQ(0, kv_space_info(self->fd2, &si2));
	EXPECT_EQ(30, si.my_blocks);
	EXPECT_EQ(10, si2.my_blocks);
	EXPECT_EQ(40, si.owned_blocks);
	EXPECT_EQ(40, si2.owned_blocks);
	/* 40 blocks of 64 KiB need 2 chunks of 2 MiB = 64 blocks. */
	EXPECT_EQ(2 * KV_CHUNK, si.backed_bytes);
	EXPECT_EQ(64, si.backed_blocks);
	EXPECT_EQ(24, si.free_blocks);
	EXPECT_EQ(si.backed_blocks, si2.backed_blocks);
	EXPECT_EQ(si.free_blocks, si2.free_blocks);
	EXPECT_EQ(0, si.reserved[0] | si.reserved[1] | si.reserved[2] |
		     si.reserved[3]);
}

/* ---- API v2: helpers ------------------------------------------------------ */

#define V2SEED	0x10c7u

/* The last @len bytes before a PROT_NONE page, holding a copy of @src. */
static void *before_guard(const void *src, size_t len)
{
	char *p = rw_then_none();

	if (!p)
		return NULL;
	p += page_size() - len;
	if (src)
		memcpy(p, src, len);
	return p;
}

/* Everything the failed prefix calls must have left alone. */
static void expect_prefix(struct __test_metadata *_metadata, int fd,
			  __u64 mine, __u64 inserts, __u64 published,
			  __u64 cached, __u64 my_refs, int line)
{
	struct kvpool_space_stats st;
	struct kvpool_space_info si;

	ASSERT_EQ(0, kv_space_info(fd, &si)) TH_LOG("line %d", line);
	EXPECT_EQ(mine, si.my_blocks) TH_LOG("line %d", line);
	ASSERT_EQ(0, kv_space_stats(fd, &st)) TH_LOG("line %d", line);
	EXPECT_EQ(inserts, st.inserts) TH_LOG("line %d", line);
	EXPECT_EQ(0, st.dedups) TH_LOG("line %d", line);
	EXPECT_EQ(published, st.published_blocks) TH_LOG("line %d", line);
	EXPECT_EQ(cached, st.cached_blocks) TH_LOG("line %d", line);
	EXPECT_EQ(my_refs, st.my_refs) TH_LOG("line %d", line);
	EXPECT_EQ(my_refs, st.readers) TH_LOG("line %d", line);
}

#define EXPECT_PREFIX(fd, mine, ins, pub, cached, refs) \
	expect_prefix(_metadata, fd, mine, ins, pub, cached, refs, __LINE__)

static void pub_init(struct kvpool_publish *p, struct kvpool_publish_entry *e,
		     __u32 count)
{
	memset(p, 0, sizeof(*p));
	p->entries = (uintptr_t)e;
	p->count = count;
}

static void entries_init(struct kvpool_publish_entry *e, const __u32 *ids,
			 __u32 n)
{
	__u8 h[KVPOOL_HASH_BYTES];
	__u32 i;

	for (i = 0; i < n; i++) {
		kv_hash(h, V2SEED, i);
		kv_pub_entry(&e[i], h, ids[i], 0);
	}
}

/* LOOKUP of hash i alone: the hit count, references given back. */
static int hit(int fd, __u32 i)
{
	__u32 id, hits = 0;

	if (kv_lookup_seq(fd, V2SEED, i, 1, &id, NULL, &hits))
		return -1;
	if (hits && kv_release(fd, &id, 1))
		return -2;
	return (int)hits;
}

/* Wrong sizes and directions of the new numbers are not commands. */
TEST_F(space, v2_numbers_with_wrong_size_enotty)
{
	char buf[512];

	memset(buf, 0, sizeof(buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOWR(KVPOOL_IOC_MAGIC, 0x05,
						    struct kvpool_blocks), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOW(KVPOOL_IOC_MAGIC, 0x06,
						   struct kvpool_lookup), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOWR(KVPOOL_IOC_MAGIC, 0x07,
						    struct kvpool_blocks), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOWR(KVPOOL_IOC_MAGIC, 0x08,
						    struct kvpool_space_destroy), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOWR(KVPOOL_IOC_MAGIC, 0x09,
						    struct kvpool_info), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOR(KVPOOL_IOC_MAGIC, 0x0A,
						   struct kvpool_space_stats), buf));
	EXPECT_EQ(-ENOTTY, kv_ioctl(self->fd, _IOWR(KVPOOL_IOC_MAGIC, 0x0B,
						    struct kvpool_space_stats), buf));
}

/* ---- PUBLISH ---------------------------------------------------------------- */

TEST_F(dev, publish_unjoined_ebadfd)
{
	struct kvpool_publish_entry e[1];
	struct kvpool_publish p;
	__u32 id = 0;

	entries_init(e, &id, 1);
	pub_init(&p, e, 1);
	EXPECT_EQ(-EBADFD, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	/* The arguments are checked before the space: a bad batch says so first. */
	p.count = KVPOOL_MAX_BATCH + 1;
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	p.count = 0;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
}

TEST_F(space, publish_flags_pad_reserved_einval)
{
	static const __u32 bad[] = { 2, 1u << 31, KVPOOL_PUBLISH_FLAGS | 4, ~0u };
	struct kvpool_publish_entry e[1];
	struct kvpool_publish p;
	unsigned int i;
	__u32 id;

	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	entries_init(e, &id, 1);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		pub_init(&p, e, 1);
		p.flags = bad[i];
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p))
			TH_LOG("flags %#x", bad[i]);
	}
	pub_init(&p, e, 1);
	p.pad = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	for (i = 0; i < 2; i++) {
		pub_init(&p, e, 1);
		p.reserved[i] = 1ULL << (7 * i);
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	}
	EXPECT_PREFIX(self->fd, 1, 0, 0, 0, 0);
	EXPECT_EQ(0, hit(self->fd, 0));
	/* The same request, clean, works. */
	pub_init(&p, e, 1);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	EXPECT_PREFIX(self->fd, 0, 1, 1, 0, 1);
}

TEST_F(space, publish_count_zero_einval_over_max_e2big)
{
	struct kvpool_publish_entry e[1];
	struct kvpool_publish p;
	__u32 id;

	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	entries_init(e, &id, 1);
	pub_init(&p, e, 0);
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	pub_init(&p, NULL, 0);
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	/* Limits come before the pointer is used. */
	pub_init(&p, NULL, KVPOOL_MAX_BATCH + 1);
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	pub_init(&p, e, 0xffffffffu);
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	EXPECT_PREFIX(self->fd, 1, 0, 0, 0, 0);
}

TEST_F(space, publish_bad_pointers_efault_nothing_published)
{
	struct kvpool_publish_entry e[3], *ro, *half;
	struct kvpool_publish p;
	void *none = none_page();
	__u32 ids[3], i;

	ASSERT_NE(NULL, none);
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 3));
	entries_init(e, ids, 3);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, none));
	pub_init(&p, NULL, 1);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	pub_init(&p, none, 3);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	pub_init(&p, (void *)8, 1);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	/* Two readable entries, the third on a PROT_NONE page. */
	half = before_guard(e, 2 * sizeof(e[0]));
	ASSERT_NE(NULL, half);
	pub_init(&p, half, 3);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	/* Readable but not writable: the results cannot be written back. */
	ro = ro_copy(e, sizeof(e));
	ASSERT_NE(NULL, ro);
	pub_init(&p, ro, 3);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	pub_init(&p, ro, 1);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	/* Nothing changed: all three still owned, no hash present. */
	EXPECT_PREFIX(self->fd, 3, 0, 0, 0, 0);
	for (i = 0; i < 3; i++)
		EXPECT_EQ(0, hit(self->fd, i)) TH_LOG("hash %u", i);
	EXPECT_EQ(0, kv_free(self->fd, ids, 3));
	EXPECT_EQ(0, kv_alloc(self->fd, ids, 3));
	entries_init(e, ids, 3);
	pub_init(&p, e, 3);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &p));
	EXPECT_PREFIX(self->fd, 0, 3, 3, 0, 3);
}

/* ---- LOOKUP ----------------------------------------------------------------- */

static void lookup_init(struct kvpool_lookup *l, const void *hashes,
			__u32 *ids, __u64 *dev, __u32 count)
{
	memset(l, 0, sizeof(*l));
	l->hashes = (uintptr_t)hashes;
	l->ids = (uintptr_t)ids;
	l->devices = (uintptr_t)dev;
	l->count = count;
}

TEST_F(dev, lookup_unjoined_ebadfd)
{
	__u8 h[1][KVPOOL_HASH_BYTES];
	struct kvpool_lookup l;
	__u32 ids[1];

	kv_hash(h[0], V2SEED, 0);
	lookup_init(&l, h, ids, NULL, 1);
	EXPECT_EQ(-EBADFD, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	l.count = KVPOOL_MAX_BATCH + 1;
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	l.count = 0;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
}

/* fd publishes hashes 0 and 1 and releases them: both CACHED. */
static void two_cached(struct __test_metadata *_metadata, int fd, __u32 *pub)
{
	ASSERT_EQ(0, kv_alloc(fd, pub, 2));
	ASSERT_EQ(0, kv_publish_seq(fd, pub, 2, V2SEED, 0, NULL));
	ASSERT_EQ(0, kv_release(fd, pub, 2));
}

TEST_F(space, lookup_flags_pad_reserved_count_einval_e2big)
{
	__u8 h[2][KVPOOL_HASH_BYTES];
	struct kvpool_lookup l;
	__u32 pub[2], ids[2];
	int i;

	two_cached(_metadata, self->fd, pub);
	kv_hash(h[0], V2SEED, 0);
	kv_hash(h[1], V2SEED, 1);
	lookup_init(&l, h, ids, NULL, 2);
	l.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	lookup_init(&l, h, ids, NULL, 2);
	l.flags = 0x80000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	lookup_init(&l, h, ids, NULL, 2);
	l.pad = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	for (i = 0; i < 2; i++) {
		lookup_init(&l, h, ids, NULL, 2);
		l.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	}
	lookup_init(&l, h, ids, NULL, 0);
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	lookup_init(&l, NULL, NULL, NULL, KVPOOL_MAX_BATCH + 1);
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	lookup_init(&l, h, ids, NULL, 0xffffffffu);
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	EXPECT_PREFIX(self->fd, 0, 2, 0, 2, 0);
	/* Clean: two hits. */
	lookup_init(&l, h, ids, NULL, 2);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	EXPECT_EQ(2, l.nr_hits);
	EXPECT_PREFIX(self->fd, 0, 2, 2, 0, 2);
}

TEST_F(space, lookup_bad_pointers_efault_takes_no_reference)
{
	__u8 h[2][KVPOOL_HASH_BYTES], *hh;
	struct kvpool_lookup l;
	void *none = none_page();
	__u32 pub[2], ids[2], *ro_ids, *half_ids;
	__u64 dev[2], *ro_dev, *half_dev;
	__u32 zero_ids[2] = { 0, 0 };
	__u64 zero_dev[2] = { 0, 0 };

	ASSERT_NE(NULL, none);
	two_cached(_metadata, self->fd, pub);
	kv_hash(h[0], V2SEED, 0);
	kv_hash(h[1], V2SEED, 1);
	ro_ids = ro_copy(zero_ids, sizeof(zero_ids));
	ro_dev = ro_copy(zero_dev, sizeof(zero_dev));
	half_ids = before_guard(NULL, sizeof(__u32));
	half_dev = before_guard(NULL, sizeof(__u64));
	hh = before_guard(h, KVPOOL_HASH_BYTES);
	ASSERT_NE(NULL, ro_ids);
	ASSERT_NE(NULL, ro_dev);
	ASSERT_NE(NULL, half_ids);
	ASSERT_NE(NULL, half_dev);
	ASSERT_NE(NULL, hh);

#define LOOKUP_EFAULT(what) do { \
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l)) TH_LOG("%s", what); \
	EXPECT_PREFIX(self->fd, 0, 2, 0, 2, 0); \
} while (0)
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, none));
	lookup_init(&l, NULL, ids, NULL, 2);
	LOOKUP_EFAULT("hashes NULL");
	lookup_init(&l, none, ids, NULL, 2);
	LOOKUP_EFAULT("hashes PROT_NONE");
	lookup_init(&l, hh, ids, NULL, 2);
	LOOKUP_EFAULT("second hash on a PROT_NONE page");
	lookup_init(&l, h, NULL, NULL, 2);
	LOOKUP_EFAULT("ids NULL");
	lookup_init(&l, h, ro_ids, NULL, 2);
	LOOKUP_EFAULT("ids read-only");
	lookup_init(&l, h, half_ids, NULL, 2);
	LOOKUP_EFAULT("ids[1] on a PROT_NONE page");
	lookup_init(&l, h, ids, ro_dev, 2);
	LOOKUP_EFAULT("devices read-only");
	lookup_init(&l, h, ids, half_dev, 2);
	LOOKUP_EFAULT("devices[1] on a PROT_NONE page");
	lookup_init(&l, h, ids, none, 1);
	LOOKUP_EFAULT("devices PROT_NONE");
#undef LOOKUP_EFAULT
	/* The same call with good pointers takes two references. */
	lookup_init(&l, h, ids, dev, 2);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &l));
	EXPECT_EQ(2, l.nr_hits);
	EXPECT_EQ(pub[0], ids[0]);
	EXPECT_EQ(pub[1], ids[1]);
	EXPECT_PREFIX(self->fd, 0, 2, 2, 0, 2);
}

/* ---- RELEASE ---------------------------------------------------------------- */

TEST_F(dev, release_unjoined_ebadfd)
{
	__u32 ids[1] = { 0 };

	EXPECT_EQ(-EBADFD, kv_release(self->fd, ids, 1));
}

TEST_F(space, release_flags_reserved_count_einval_e2big)
{
	struct kvpool_blocks b;
	__u32 pub[2];
	int i;

	ASSERT_EQ(0, kv_alloc(self->fd, pub, 2));
	ASSERT_EQ(0, kv_publish_seq(self->fd, pub, 2, V2SEED, 0, NULL));
	memset(&b, 0, sizeof(b));
	b.ids = (uintptr_t)pub;
	b.count = 1;
	b.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RELEASE, &b));
	b.flags = 0x80000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RELEASE, &b));
	for (i = 0; i < 2; i++) {
		memset(&b, 0, sizeof(b));
		b.ids = (uintptr_t)pub;
		b.count = 1;
		b.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RELEASE, &b));
	}
	EXPECT_EQ(-EINVAL, kv_release(self->fd, pub, 0));
	EXPECT_EQ(-EINVAL, kv_release(self->fd, NULL, 0));
	EXPECT_EQ(-E2BIG, kv_release(self->fd, NULL, KVPOOL_MAX_BATCH + 1));
	EXPECT_EQ(-E2BIG, kv_release(self->fd, pub, 0xffffffffu));
	EXPECT_PREFIX(self->fd, 0, 2, 2, 0, 2);
	EXPECT_EQ(0, kv_release(self->fd, pub, 2));
	EXPECT_PREFIX(self->fd, 0, 2, 0, 2, 0);
}

TEST_F(space, release_bad_pointers_efault_nothing_released)
{
	void *none = none_page();
	__u32 pub[2], *half;

	ASSERT_NE(NULL, none);
	ASSERT_EQ(0, kv_alloc(self->fd, pub, 2));
	ASSERT_EQ(0, kv_publish_seq(self->fd, pub, 2, V2SEED, 0, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RELEASE, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RELEASE, none));
	EXPECT_EQ(-EFAULT, kv_release(self->fd, NULL, 1));
	EXPECT_EQ(-EFAULT, kv_release(self->fd, none, 2));
	EXPECT_EQ(-EFAULT, kv_release(self->fd, (__u32 *)8, 1));
	/* Two valid ids, then one on a PROT_NONE page. */
	half = before_guard(pub, sizeof(pub));
	ASSERT_NE(NULL, half);
	EXPECT_EQ(-EFAULT, kv_release(self->fd, half, 3));
	EXPECT_PREFIX(self->fd, 0, 2, 2, 0, 2);
	EXPECT_EQ(0, kv_release(self->fd, half, 2));
	EXPECT_PREFIX(self->fd, 0, 2, 0, 2, 0);
}

/* ---- SPACE_DESTROY ------------------------------------------------------------ */

static void destroy_init(struct kvpool_space_destroy *d, const char *name)
{
	size_t n = strlen(name);

	memset(d, 0, sizeof(*d));
	memcpy(d->name, name, n < sizeof(d->name) ? n : sizeof(d->name) - 1);
}

TEST_F(space, space_destroy_flags_pad_reserved_name_einval)
{
	struct kvpool_space_destroy d;
	struct kvpool_space_open so;
	static const char *const bad[] = { "", "a b", "a/b", "x\n", "caf\xc3\xa9" };
	unsigned int i;

	destroy_init(&d, self->name);
	d.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_DESTROY, &d));
	destroy_init(&d, self->name);
	d.flags = 0x80000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_DESTROY, &d));
	destroy_init(&d, self->name);
	d.pad = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_DESTROY, &d));
	for (i = 0; i < 2; i++) {
		destroy_init(&d, self->name);
		d.reserved[i] = ~0ULL;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_DESTROY, &d));
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		destroy_init(&d, bad[i]);
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_DESTROY, &d))
			TH_LOG("'%s'", bad[i]);
	}
	memset(d.name, 'z', sizeof(d.name));
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_DESTROY, &d));
	/* The space was not destroyed: its name still joins it. */
	EXPECT_EQ(0, kv_join(self->fd2, self->name, &so));
	EXPECT_EQ(self->so.space_id, so.space_id);
	EXPECT_EQ(0, kv_read_events(self->fd, (struct kvpool_event[1]){}, 1));
}

TEST_F(dev, space_destroy_absent_enoent_bad_pointer_efault)
{
	void *none = none_page();

	ASSERT_NE(NULL, none);
	EXPECT_EQ(-ENOENT, kv_destroy(self->fd, self->name));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_DESTROY, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_DESTROY, none));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_DESTROY, (void *)8));
}

TEST_F(space, space_destroy_bad_pointer_leaves_space)
{
	struct kvpool_space_destroy d, *half;
	struct kvpool_space_open so;

	destroy_init(&d, self->name);
	/* The name readable, flags and the rest on a PROT_NONE page. */
	half = before_guard(&d, offsetof(struct kvpool_space_destroy, flags));
	ASSERT_NE(NULL, half);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_DESTROY, half));
	EXPECT_EQ(0, kv_join(self->fd2, self->name, &so));
	EXPECT_EQ(self->so.space_id, so.space_id);
}

/* ---- RESIDENCY ------------------------------------------------------------------ */

static void res_init(struct kvpool_residency *r, __u32 dev,
		     struct kvpool_residency_entry *e, __u32 count, __u32 op)
{
	memset(r, 0, sizeof(*r));
	kv_uuid(r->device_uuid, dev);
	r->entries = (uintptr_t)e;
	r->count = count;
	r->op = op;
	r->entry_bytes = sizeof(struct kvpool_residency_entry);
}

/* Device mask of hash 0 as LOOKUP reports it (reference given back). */
static __u64 mask0(int fd)
{
	__u32 id, hits = 0;
	__u64 dev = ~0ULL;

	if (kv_lookup_seq(fd, V2SEED, 0, 1, &id, &dev, &hits) || hits != 1)
		return ~1ULL;
	if (kv_release(fd, &id, 1))
		return ~2ULL;
	return dev;
}

TEST_F(dev, residency_unjoined_ebadfd)
{
	struct kvpool_residency_entry e = { 0 };
	struct kvpool_residency r;

	res_init(&r, 1, NULL, 0, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(-EBADFD, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	res_init(&r, 1, &e, 1, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(-EBADFD, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
}

TEST_F(space, residency_flags_reserved_op_einval_e2big)
{
	struct kvpool_residency_entry e[1];
	struct kvpool_residency r;
	__u32 pub;
	int i;

	ASSERT_EQ(0, kv_alloc(self->fd, &pub, 1));
	ASSERT_EQ(0, kv_publish_seq(self->fd, &pub, 1, V2SEED, 0, NULL));
	memset(e, 0, sizeof(e));
	e[0].block = pub;
	e[0].gpu_block = 3;
	res_init(&r, 1, e, 1, KVPOOL_RESIDENCY_ADD);
	r.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	for (i = 0; i < 2; i++) {
		res_init(&r, 1, e, 1, KVPOOL_RESIDENCY_ADD);
		if (i)
			r.reserved = 1ULL << 40;
		else
			r.pad = 1;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	}
	res_init(&r, 1, e, 1, 3);
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	res_init(&r, 1, e, 1, KVPOOL_RESIDENCY_CLEAR);
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	res_init(&r, 1, NULL, KVPOOL_MAX_BATCH + 1, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	res_init(&r, 1, e, 0xffffffffu, KVPOOL_RESIDENCY_DEL);
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	EXPECT_EQ(0, mask0(self->fd));
	/* Clean: recorded. */
	res_init(&r, 1, e, 1, KVPOOL_RESIDENCY_ADD);
	ASSERT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	ASSERT_GT(KVPOOL_MAX_DEVICES, r.device_slot);
	EXPECT_EQ(1ULL << r.device_slot, mask0(self->fd));
}

TEST_F(space, residency_bad_pointers_efault_nothing_recorded)
{
	struct kvpool_residency_entry e[2], *half;
	struct kvpool_residency r, *ro;
	void *none = none_page();
	__u32 pub[2];

	ASSERT_NE(NULL, none);
	ASSERT_EQ(0, kv_alloc(self->fd, pub, 2));
	ASSERT_EQ(0, kv_publish_seq(self->fd, pub, 2, V2SEED, 0, NULL));
	memset(e, 0, sizeof(e));
	e[0].block = pub[0];
	e[0].gpu_block = 1;
	e[1].block = pub[1];
	e[1].gpu_block = 2;
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, none));
	res_init(&r, 1, NULL, 1, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	res_init(&r, 1, none, 2, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	EXPECT_EQ(0, mask0(self->fd));
	/* The first entry readable, the second on a PROT_NONE page. */
	half = before_guard(e, sizeof(e[0]));
	ASSERT_NE(NULL, half);
	res_init(&r, 1, half, 2, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	EXPECT_EQ(0, mask0(self->fd)) TH_LOG("after the half-mapped entries");
	/* A read-only struct: device_slot cannot be written. */
	res_init(&r, 1, e, 1, KVPOOL_RESIDENCY_ADD);
	ro = ro_copy(&r, sizeof(r));
	ASSERT_NE(NULL, ro);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, ro));
	EXPECT_EQ(0, mask0(self->fd)) TH_LOG("after the read-only struct");
	res_init(&r, 1, e, 2, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	EXPECT_EQ(1ULL << r.device_slot, mask0(self->fd));
}

/*
 * API 4, issue 14 finding 13: a residency entry is 16 bytes with a
 * reserved word, and the call says so in entry_bytes.  A caller built for
 * API 3 passes 0 there (it was reserved) and 8-byte entries: EINVAL, with
 * nothing recorded, rather than entries read at the wrong stride.
 */
TEST_F(space, residency_entry_bytes_and_reserved_einval)
{
	static const __u32 bad_bytes[] = { 0, 8, 12, 24, 32, 0xffffffffu };
	struct kvpool_residency_entry e[2];
	struct kvpool_residency r;
	__u32 api3[4], pub[2];
	unsigned int i;
	int op;

	ASSERT_EQ(0, kv_alloc(self->fd, pub, 2));
	ASSERT_EQ(0, kv_publish_seq(self->fd, pub, 2, V2SEED, 0, NULL));
	memset(e, 0, sizeof(e));
	e[0].block = pub[0];
	e[0].gpu_block = 5;
	e[1].block = pub[1];
	e[1].gpu_block = 6;
	for (op = KVPOOL_RESIDENCY_ADD; op <= KVPOOL_RESIDENCY_CLEAR; op++) {
		for (i = 0; i < ARRAY_SIZE(bad_bytes); i++) {
			res_init(&r, 1, op == KVPOOL_RESIDENCY_CLEAR ? NULL : e,
				 op == KVPOOL_RESIDENCY_CLEAR ? 0 : 2, op);
			r.entry_bytes = bad_bytes[i];
			EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r))
				TH_LOG("op %d entry_bytes %u", op, bad_bytes[i]);
		}
	}
	/* count 0 (register the device only) needs it too. */
	res_init(&r, 1, NULL, 0, KVPOOL_RESIDENCY_ADD);
	r.entry_bytes = 0;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	/* An API 3 call: { block, gpu_block } pairs, entry_bytes 0. */
	api3[0] = pub[0];
	api3[1] = 5;
	api3[2] = pub[1];
	api3[3] = 6;
	res_init(&r, 1, (void *)api3, 2, KVPOOL_RESIDENCY_ADD);
	r.entry_bytes = 0;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	/* An entry's reserved word, in any entry, for ADD and DEL. */
	for (i = 0; i < 2; i++) {
		e[i].reserved = 1ULL << (32 * i);
		res_init(&r, 1, e, 2, KVPOOL_RESIDENCY_ADD);
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r))
			TH_LOG("ADD, entry %u reserved", i);
		res_init(&r, 1, e, 2, KVPOOL_RESIDENCY_DEL);
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r))
			TH_LOG("DEL, entry %u reserved", i);
		e[i].reserved = 0;
	}
	EXPECT_EQ(0, mask0(self->fd));
	/* The same entries, well formed, are recorded. */
	res_init(&r, 1, e, 2, KVPOOL_RESIDENCY_ADD);
	ASSERT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	EXPECT_EQ(1ULL << r.device_slot, mask0(self->fd));
}

/*
 * read() into an unwritable buffer: EFAULT.  The header allows a gap in
 * seq (an OVERFLOW record) only for events dropped because the queue was
 * full, so the pending event is still there afterwards, with seq 1.
 */
TEST_F(space, event_read_efault_loses_no_event)
{
	struct kvpool_event ev[2];
	__u32 ids[129];
	void *none = none_page();
	int n;

	ASSERT_NE(NULL, none);
	EXPECT_EQ(-ENOSPC, kv_alloc(self->fd, ids, 129));
	EXPECT_EQ(-1, read(self->fd, none, sizeof(ev[0])));
	EXPECT_EQ(EFAULT, errno);
	n = kv_read_events(self->fd, ev, 2);
	ASSERT_EQ(1, n);
	EXPECT_EQ(1, ev[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[0].type)
		TH_LOG("type %u count %u", ev[0].type, ev[0].count);
}

/*
 * API 4, issue 14 finding 13: every out field must be 0 on input, so a
 * struct that came back from one call is not silently reused as the next
 * one's input.  Each call fails with EINVAL and changes nothing.
 */
#define OUT_FIELD_EINVAL(fd, cmd, init, field, what) do { \
	init; \
	field = 1; \
	EXPECT_EQ(-EINVAL, kv_ioctl(fd, cmd, &u)) TH_LOG("%s", what); \
} while (0)

TEST_F(space, out_fields_nonzero_einval)
{
	union {
		struct kvpool_info info;
		struct kvpool_space_open so;
		struct kvpool_space_info si;
		struct kvpool_space_stats st;
		struct kvpool_publish pub;
		struct kvpool_lookup lk;
		struct kvpool_residency res;
	} u;
	struct kvpool_publish_entry e[1];
	struct kvpool_residency_entry re;
	struct kvpool_space_stats st;
	__u8 h[1][KVPOOL_HASH_BYTES];
	__u32 id, ids[1];
	int i;

#define OF_INFO(f) OUT_FIELD_EINVAL(self->fd, KVPOOL_IOC_INFO, memset(&u, 0, sizeof(u)), \
				 u.info.f, "INFO " #f)
	OF_INFO(api_version);
	OF_INFO(features);
	OF_INFO(page_size);
	OF_INFO(chunk_size);
	OF_INFO(nr_nodes);
	OF_INFO(max_batch);
	OF_INFO(node_mask);
	OF_INFO(pool_bytes);
	OF_INFO(free_bytes);
#undef OF_INFO

#define OF_SO(f) OUT_FIELD_EINVAL(self->fd2, KVPOOL_IOC_SPACE_OPEN, \
			       kv_so_init(&u.so, self->name, 0, 0, 0), u.so.f, "SPACE_OPEN " #f)
	OF_SO(space_id);
	OF_SO(uid);
	OF_SO(gid);
	OF_SO(nr_blocks);
	OF_SO(map_bytes);
	OF_SO(created);
#undef OF_SO
	/* The same on a create, which must not have created anything. */
	kv_so_init(&u.so, "ioctl-out-fields-never", KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	u.so.created = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd2, KVPOOL_IOC_SPACE_OPEN, &u));
	EXPECT_EQ(-EBADFD, kv_space_info(self->fd2, &u.si));
	EXPECT_EQ(-ENOENT, kv_join(self->fd2, "ioctl-out-fields-never", &u.so));

#define OF_SI(f) OUT_FIELD_EINVAL(self->fd, KVPOOL_IOC_SPACE_INFO, memset(&u, 0, sizeof(u)), \
			       u.si.f, "SPACE_INFO " #f)
	OF_SI(space_id);
	OF_SI(block_bytes);
	OF_SI(nr_blocks);
	OF_SI(backed_blocks);
	OF_SI(free_blocks);
	OF_SI(owned_blocks);
	OF_SI(my_blocks);
	OF_SI(backed_bytes);
#undef OF_SI

#define OF_ST(f) OUT_FIELD_EINVAL(self->fd, KVPOOL_IOC_SPACE_STATS, memset(&u, 0, sizeof(u)), \
			       u.st.f, "SPACE_STATS " #f)
	OF_ST(space_id);
	OF_ST(hits);
	OF_ST(misses);
	OF_ST(inserts);
	OF_ST(dedups);
	for (i = 0; i < KVPOOL_EVICT_CAUSES; i++)
		OF_ST(evictions[i]);
	OF_ST(pressure);
	OF_ST(published_blocks);
	OF_ST(cached_blocks);
	OF_ST(hole_blocks);
	OF_ST(readers);
	OF_ST(my_refs);
	OF_ST(allocs);
	OF_ST(frees);
#undef OF_ST

	/* PUBLISH's nr_dedup: the block stays OWNED. */
	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	entries_init(e, &id, 1);
	pub_init(&u.pub, e, 1);
	u.pub.nr_dedup = 77;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &u));
	EXPECT_EQ(id, e[0].id);
	EXPECT_PREFIX(self->fd, 1, 0, 0, 0, 0);
	pub_init(&u.pub, e, 1);
	ASSERT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_PUBLISH, &u));
	EXPECT_EQ(0, u.pub.nr_dedup);

	/* LOOKUP's nr_hits: no reference taken. */
	kv_hash(h[0], V2SEED, 0);
	lookup_init(&u.lk, h, ids, NULL, 1);
	u.lk.nr_hits = 77;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &u));
	EXPECT_PREFIX(self->fd, 0, 1, 1, 0, 1);
	lookup_init(&u.lk, h, ids, NULL, 1);
	ASSERT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_LOOKUP, &u));
	EXPECT_EQ(1, u.lk.nr_hits);

	/* RESIDENCY's device_slot: nothing recorded. */
	memset(&re, 0, sizeof(re));
	re.block = id;
	re.gpu_block = 1;
	res_init(&u.res, 1, &re, 1, KVPOOL_RESIDENCY_ADD);
	u.res.device_slot = 0xdead;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &u));
	EXPECT_EQ(0, mask0(self->fd));
	res_init(&u.res, 1, &re, 1, KVPOOL_RESIDENCY_ADD);
	EXPECT_EQ(0, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &u));
	EXPECT_GT(KVPOOL_MAX_DEVICES, u.res.device_slot);

	/* What a call returned is refused as the next call's input. */
	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, &st));
}
#undef OUT_FIELD_EINVAL

/* ---- SPACE_STATS ----------------------------------------------------------------- */

TEST_F(dev, space_stats_unjoined_ebadfd)
{
	struct kvpool_space_stats st;

	EXPECT_EQ(-EBADFD, kv_space_stats(self->fd, &st));
}

TEST_F(space, space_stats_flags_reserved_einval)
{
	struct kvpool_space_stats st;
	int i;

	memset(&st, 0, sizeof(st));
	st.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, &st));
	memset(&st, 0, sizeof(st));
	st.flags = 0x80000000u;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, &st));
	for (i = 0; i < 4; i++) {
		memset(&st, 0, sizeof(st));
		st.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, &st));
	}
}

TEST_F(space, space_stats_bad_pointer_efault)
{
	struct kvpool_space_stats zero;
	void *none = none_page(), *ro;

	memset(&zero, 0, sizeof(zero));
	ro = ro_copy(&zero, sizeof(zero));
	ASSERT_NE(NULL, none);
	ASSERT_NE(NULL, ro);
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, none));
	EXPECT_EQ(-EFAULT, kv_ioctl(self->fd, KVPOOL_IOC_SPACE_STATS, ro));
}

TEST_F(space, space_stats_of_fresh_space)
{
	struct kvpool_space_stats st;
	__u32 ids[3];
	int i;

	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	EXPECT_EQ(self->so.space_id, st.space_id);
	EXPECT_EQ(0, st.hits | st.misses | st.inserts | st.dedups | st.pressure |
		     st.published_blocks | st.cached_blocks | st.hole_blocks |
		     st.readers | st.my_refs | st.allocs | st.frees);
	for (i = 0; i < KVPOOL_EVICT_CAUSES; i++)
		EXPECT_EQ(0, st.evictions[i]);
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 3));
	ASSERT_EQ(0, kv_free(self->fd, ids, 1));
	ASSERT_EQ(0, kv_space_stats(self->fd, &st));
	EXPECT_EQ(3, st.allocs);
	EXPECT_EQ(1, st.frees);
}

/* ---- events ---------------------------------------------------------------------- */

TEST_F(dev, event_read_and_poll_unjoined)
{
	struct kvpool_event ev;
	struct pollfd pfd = { .fd = self->fd, .events = POLLIN };

	EXPECT_EQ(-1, read(self->fd, &ev, sizeof(ev)));
	EXPECT_EQ(EBADFD, errno);
	EXPECT_EQ(1, poll(&pfd, 1, 0));
	EXPECT_TRUE(pfd.revents & POLLERR);
}

TEST_F(space, event_read_short_buffer_einval_none_eagain)
{
	struct kvpool_event ev[2];
	__u32 ids[129];
	int fl;

	fl = fcntl(self->fd, F_GETFL);
	ASSERT_EQ(0, fcntl(self->fd, F_SETFL, fl | O_NONBLOCK));
	EXPECT_EQ(-1, read(self->fd, ev, sizeof(ev)));
	EXPECT_EQ(EAGAIN, errno);
	/* A failed ALLOC queues one QUOTA_PRESSURE (count 0). */
	EXPECT_EQ(-ENOSPC, kv_alloc(self->fd, ids, 129));
	EXPECT_EQ(-1, read(self->fd, ev, sizeof(ev[0]) - 1));
	EXPECT_EQ(EINVAL, errno);
	/* Whole records only: a buffer of 1.5 records gets one. */
	EXPECT_EQ(sizeof(ev[0]), read(self->fd, ev, sizeof(ev[0]) * 3 / 2));
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[0].type);
	EXPECT_EQ(0, ev[0].count);
	EXPECT_EQ(-1, read(self->fd, ev, sizeof(ev)));
	EXPECT_EQ(EAGAIN, errno);
	fcntl(self->fd, F_SETFL, fl);
}

/*
 * Issue 14 finding 12: ioctls ignored how the fd was opened, so an O_RDONLY
 * fd could allocate, publish or destroy a space.  Every command that
 * changes state now needs FMODE_WRITE (EBADF, before anything else is
 * looked at); INFO, SPACE_INFO and SPACE_STATS stay readable.
 */
TEST(readonly_fd_cannot_change_state)
{
	struct kvpool_residency res = { .op = KVPOOL_RESIDENCY_CLEAR };
	struct kvpool_publish pub = { .count = 1 };
	struct kvpool_lookup lk = { .count = 1 };
	struct kvpool_space_stats st = { 0 };
	struct kvpool_space_info si = { 0 };
	struct kvpool_space_open so;
	struct kvpool_info info;
	char name[KVPOOL_NAME_MAX];
	int rw, ro, wo;
	__u32 id = 0;

	kv_name(name, sizeof(name), "rofd");
	rw = kv_open_create(name, 64 * KiB, 2 * MiB, NULL);
	ASSERT_LE(0, rw);
	ro = open(KV_DEV, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, ro);
	EXPECT_EQ(0, kv_info(ro, &info));
	kv_so_init(&so, name, 0, 0, 0);
	EXPECT_EQ(-EBADF, kv_space_open(ro, &so));
	kv_so_init(&so, "rofd-new", KVPOOL_SPACE_CREATE, 64 * KiB, 2 * MiB);
	EXPECT_EQ(-EBADF, kv_space_open(ro, &so));
	EXPECT_EQ(-EBADF, kv_alloc(ro, &id, 1));
	EXPECT_EQ(-EBADF, kv_free(ro, &id, 1));
	EXPECT_EQ(-EBADF, kv_release(ro, &id, 1));
	EXPECT_EQ(-EBADF, kv_ioctl(ro, KVPOOL_IOC_PUBLISH, &pub));
	EXPECT_EQ(-EBADF, kv_ioctl(ro, KVPOOL_IOC_LOOKUP, &lk));
	EXPECT_EQ(-EBADF, kv_ioctl(ro, KVPOOL_IOC_RESIDENCY, &res));
	EXPECT_EQ(-EBADF, kv_destroy(ro, name));
	/* The queries still answer (not joined: EBADFD, not EBADF). */
	EXPECT_EQ(-EBADFD, kv_ioctl(ro, KVPOOL_IOC_SPACE_INFO, &si));
	EXPECT_EQ(-EBADFD, kv_ioctl(ro, KVPOOL_IOC_SPACE_STATS, &st));
	/* The space was not destroyed: its creator goes on. */
	EXPECT_EQ(0, kv_alloc(rw, &id, 1));
	/* O_WRONLY carries FMODE_WRITE: it may join. */
	wo = open(KV_DEV, O_WRONLY | O_CLOEXEC);
	ASSERT_LE(0, wo);
	EXPECT_EQ(0, kv_join(wo, name, NULL));
	close(wo);
	close(ro);
	close(rw);
}

TEST_HARNESS_MAIN
