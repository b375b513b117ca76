// SPDX-License-Identifier: GPL-2.0
/*
 * persist_test: persistent spaces (KVPOOL_SPACE_PERSIST) outlive their last
 * fd with their cached prefix blocks; KVPOOL_IOC_SPACE_DESTROY unlinks a
 * space by name (errnos, owner/admin check, teardown with and without fds,
 * SPACE_DESTROYED events); sysfs destroy_space and drop_cached.
 *
 * Every space a test creates is destroyed again in the teardown, so that a
 * failing test leaves no persistent space behind for the runner's check.
 */
#include "kvpool_util.h"

#include <poll.h>

#define BB	(256 * KiB)
#define QUOTA	(4 * MiB)	/* 16 blocks of BB, two chunks */
#define SEED	0x9e55u
#define NNAMES	4

FIXTURE(persist) {
	char name[NNAMES][KVPOOL_NAME_MAX];
	__u64 free0;
	__u64 spaces0;
};

FIXTURE_SETUP(persist)
{
	int i;

	for (i = 0; i < NNAMES; i++)
		kv_name(self->name[i], sizeof(self->name[i]), "persist");
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
}

FIXTURE_TEARDOWN(persist)
{
	int i;

	/* Whatever is left of this test's spaces (ENOENT when none). */
	for (i = 0; i < NNAMES; i++)
		kv_destroy_name(self->name[i]);
}

static const struct kv_cred u1000 = { .uid = 1000, .gid = 1000 };
static const struct kv_cred u1001 = { .uid = 1001, .gid = 1001 };

/* Create @name persistent (CREATE|EXCL|PERSIST) on a new fd. */
static int open_persistent(const char *name, __u64 bb, __u64 quota,
			   struct kvpool_space_open *so)
{
	int fd = kv_open(), ret;

	if (fd < 0)
		return -errno;
	kv_so_init(so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL |
		   KVPOOL_SPACE_PERSIST, bb, quota);
	ret = kv_space_open(fd, so);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* 1 when debugfs "spaces" lists space @id named @name. */
static int debugfs_lists(__u32 id, const char *name)
{
	static char buf[1 << 16];
	char want[128];

	if (kv_debugfs_read("spaces", buf, sizeof(buf)) < 0)
		return -1;
	snprintf(want, sizeof(want), "space %u name=%s ", id, name);
	return strstr(buf, want) != NULL;
}

static int cached_blocks(int fd)
{
	struct kvpool_space_stats st;

	if (kv_space_stats(fd, &st))
		return -1;
	return (int)st.cached_blocks;
}

/*
 * Fork a child that drops to @c, opens the device as @c (rights are the
 * opener's) and destroys @name; returns its errno.
 */
static int destroy_as(const struct kv_cred *c, const char *name)
{
	pid_t pid = fork();

	if (pid < 0)
		return 250;
	if (pid == 0) {
		int fd = kv_drop_and_open(c);

		if (fd < 0)
			_exit(200);
		_exit(-kv_destroy(fd, name));
	}
	return kv_wait(pid);
}

/* Same, for a persistent create (the child exits right after). */
static int create_persistent_as(const struct kv_cred *c, const char *name)
{
	pid_t pid = fork();

	if (pid < 0)
		return 250;
	if (pid == 0) {
		struct kvpool_space_open so;
		int fd = kv_drop_and_open(c);

		if (fd < 0)
			_exit(200);
		kv_so_init(&so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL |
			   KVPOOL_SPACE_PERSIST, BB, QUOTA);
		_exit(-kv_space_open(fd, &so));
	}
	return kv_wait(pid);
}

/* ---- persistence ------------------------------------------------------------------ */

TEST_F(persist, persistent_space_outlives_last_close)
{
	struct kvpool_space_open so, so2;
	struct kvpool_space_info si;
	__u32 a[5], pub[4], got[4], hits = 0;
	char *m;
	int fd, i;

	fd = open_persistent(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fd) TH_LOG("create persistent: %s", strerror(-fd));
	EXPECT_EQ(1, so.created);
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, kv_alloc(fd, a, 5));
	ASSERT_EQ(0, kv_fill_and_publish(fd, m, BB, a, pub, 4, 0x300, SEED));
	EXPECT_EQ(1, kv_space_sysfs_get(so.space_id, "persistent"));
	EXPECT_EQ(1, kv_space_sysfs_get(so.space_id, "clients"));
	munmap(m, so.map_bytes);
	close(fd);

	/* Still there, with its published blocks cached and a[4] free. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	ASSERT_TRUE(kv_space_sysfs_exists(so.space_id));
	EXPECT_EQ(1, kv_space_sysfs_get(so.space_id, "persistent"));
	EXPECT_EQ(0, kv_space_sysfs_get(so.space_id, "clients"));
	EXPECT_EQ(4, kv_space_sysfs_get(so.space_id, "cached_blocks"));
	EXPECT_EQ(0, kv_space_sysfs_get(so.space_id, "published_blocks"));
	EXPECT_EQ(0, kv_space_sysfs_get(so.space_id, "owned_blocks"));
	EXPECT_EQ(4, kv_space_sysfs_get(so.space_id, "free_blocks"));
	EXPECT_EQ(4, kv_space_sysfs_get(so.space_id, "inserts"));
	EXPECT_EQ(1, debugfs_lists(so.space_id, self->name[0]));
	/* It keeps its chunk. */
	EXPECT_EQ(self->free0 - KV_CHUNK, sysfs_get("free_bytes"));

	/* Rejoin by name: LOOKUP finds every block, data intact. */
	fd = kv_open_join(self->name[0], &so2);
	ASSERT_LE(0, fd) TH_LOG("rejoin: %s", strerror(-fd));
	EXPECT_EQ(0, so2.created);
	EXPECT_EQ(so.space_id, so2.space_id);
	ASSERT_EQ(0, kv_lookup_seq(fd, SEED, 0, 4, got, NULL, &hits));
	EXPECT_EQ(4, hits);
	m = kv_mmap(fd, so2.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(a[i], got[i]);
		EXPECT_EQ(-1, kv_verify(m + (size_t)got[i] * BB, BB, 0x300 + i, 0))
			TH_LOG("block %u of hash %d", got[i], i);
	}
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(0, si.owned_blocks);
	EXPECT_EQ(4, si.free_blocks);
	EXPECT_EQ(8, si.backed_blocks);
	munmap(m, so2.map_bytes);
	close(fd);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));

	/* Destroyed with no fds: gone at once, the pool gets its chunk back. */
	EXPECT_EQ(0, kv_destroy_name(self->name[0]));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_FALSE(kv_space_sysfs_exists(so.space_id));
	EXPECT_EQ(0, debugfs_lists(so.space_id, self->name[0]));
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	fd = kv_open();
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOENT, kv_join(fd, self->name[0], &so2));
	close(fd);
	ASSERT_KV_CHECK_OK();
}

TEST_F(persist, create_without_excl_can_persist)
{
	struct kvpool_space_open so;
	int fd;

	fd = kv_open();
	ASSERT_LE(0, fd);
	kv_so_init(&so, self->name[0], KVPOOL_SPACE_CREATE | KVPOOL_SPACE_PERSIST,
		   BB, QUOTA);
	ASSERT_EQ(0, kv_space_open(fd, &so));
	EXPECT_EQ(1, so.created);
	close(fd);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(1, kv_space_sysfs_get(so.space_id, "persistent"));
	EXPECT_EQ(0, kv_destroy_name(self->name[0]));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
}

TEST_F(persist, ordinary_space_is_not_persistent)
{
	struct kvpool_space_open so;
	int fd;

	fd = kv_open_create(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fd);
	EXPECT_EQ(0, kv_space_sysfs_get(so.space_id, "persistent"));
	close(fd);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_EQ(-ENOENT, kv_destroy_name(self->name[0]));
}

TEST_F(persist, persist_without_create_einval)
{
	static const __u32 bad[] = {
		KVPOOL_SPACE_PERSIST,
		KVPOOL_SPACE_PERSIST | KVPOOL_SPACE_EXCL,
	};
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	unsigned int i;
	int fd, fd1;

	fd = kv_open();
	ASSERT_LE(0, fd);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		kv_so_init(&so, self->name[0], bad[i], BB, QUOTA);
		EXPECT_EQ(-EINVAL, kv_space_open(fd, &so)) TH_LOG("flags %#x", bad[i]);
	}
	/* Also when the space exists: PERSIST is not a join flag. */
	fd1 = kv_open_create(self->name[1], BB, QUOTA, NULL);
	ASSERT_LE(0, fd1);
	kv_so_init(&so, self->name[1], KVPOOL_SPACE_PERSIST, 0, 0);
	EXPECT_EQ(-EINVAL, kv_space_open(fd, &so));
	EXPECT_EQ(-EBADFD, kv_space_info(fd, &si));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(-ENOENT, kv_join(fd, self->name[0], &so));
	close(fd1);
	close(fd);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
}

/* ---- SPACE_DESTROY errnos ---------------------------------------------------------- */

TEST_F(persist, destroy_errnos)
{
	struct kvpool_space_destroy d;
	struct kvpool_space_open so;
	void *none;
	int fd, fdp, i;

	none = mmap(NULL, getpagesize(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	ASSERT_NE(MAP_FAILED, none);
	fdp = open_persistent(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fdp);
	close(fdp);
	fd = kv_open();
	ASSERT_LE(0, fd);

	EXPECT_EQ(-ENOENT, kv_destroy(fd, self->name[1]));

#define DESTROY_FAILS(err, what) do { \
	EXPECT_EQ(-(err), kv_ioctl(fd, KVPOOL_IOC_SPACE_DESTROY, &d)) TH_LOG("%s", what); \
} while (0)
#define D_INIT() do { \
	memset(&d, 0, sizeof(d)); \
	strcpy(d.name, self->name[0]); \
} while (0)
	D_INIT();
	d.flags = 1;
	DESTROY_FAILS(EINVAL, "flags 1");
	D_INIT();
	d.flags = 0x80000000u;
	DESTROY_FAILS(EINVAL, "flags bit 31");
	D_INIT();
	d.pad = 1;
	DESTROY_FAILS(EINVAL, "pad");
	for (i = 0; i < 2; i++) {
		D_INIT();
		d.reserved[i] = 1ULL << 40;
		DESTROY_FAILS(EINVAL, "reserved");
	}
	memset(&d, 0, sizeof(d));
	DESTROY_FAILS(EINVAL, "empty name");
	strcpy(d.name, "a/b");
	DESTROY_FAILS(EINVAL, "a/b");
	strcpy(d.name, "sp ace");
	DESTROY_FAILS(EINVAL, "space in name");
	memset(d.name, 'n', sizeof(d.name));
	DESTROY_FAILS(EINVAL, "64 bytes, no NUL");
#undef DESTROY_FAILS
#undef D_INIT
	EXPECT_EQ(-EFAULT, kv_ioctl(fd, KVPOOL_IOC_SPACE_DESTROY, NULL));
	EXPECT_EQ(-EFAULT, kv_ioctl(fd, KVPOOL_IOC_SPACE_DESTROY, none));

	/* Neither the owner (root) nor CAP_SYS_ADMIN. */
	EXPECT_EQ(EPERM, destroy_as(&u1000, self->name[0]));

	/* None of that touched the space. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(1, kv_space_sysfs_get(so.space_id, "persistent"));
	EXPECT_EQ(0, kv_destroy(fd, self->name[0]));
	EXPECT_EQ(-ENOENT, kv_destroy(fd, self->name[0]));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	close(fd);
	munmap(none, getpagesize());
}

TEST_F(persist, destroy_by_owner_uid_or_admin_only)
{
	/* uid 1000 creates two persistent spaces and exits. */
	ASSERT_EQ(0, create_persistent_as(&u1000, self->name[0]));
	ASSERT_EQ(0, create_persistent_as(&u1000, self->name[1]));
	EXPECT_EQ(self->spaces0 + 2, sysfs_get("spaces"));
	/* Another unprivileged uid may not. */
	EXPECT_EQ(EPERM, destroy_as(&u1001, self->name[0]));
	EXPECT_EQ(self->spaces0 + 2, sysfs_get("spaces"));
	/* The owner may, without having joined it. */
	EXPECT_EQ(0, destroy_as(&u1000, self->name[0]));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	/* Root (CAP_SYS_ADMIN) may destroy uid 1000's space. */
	EXPECT_EQ(0, kv_destroy_name(self->name[1]));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
}

/* ---- destroy while joined ---------------------------------------------------------- */

TEST_F(persist, destroy_while_joined_frees_name_old_fd_keeps_working)
{
	struct kvpool_space_open so, so3, so4;
	struct kvpool_space_info si;
	struct kvpool_event ev[4];
	struct pollfd pfd;
	__u32 a[2], got, hits, more;
	int fd0, fd1, fd3, fd4, n;
	char *m;

	fd1 = open_persistent(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fd1);
	m = kv_mmap(fd1, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, kv_alloc(fd1, a, 2));
	kv_fill(m + (size_t)a[0] * BB, BB, 0x51, 0);
	ASSERT_EQ(0, kv_publish_seq(fd1, &a[0], 1, SEED, 0, NULL));

	/* An fd that never joined anything may destroy. */
	fd0 = kv_open();
	ASSERT_LE(0, fd0);
	ASSERT_EQ(0, kv_destroy(fd0, self->name[0]));
	close(fd0);
	/* The old space lives on with fd1. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));

	/* The name is free at once. */
	fd3 = kv_open_create(self->name[0], BB, QUOTA, &so3);
	ASSERT_LE(0, fd3) TH_LOG("re-create after destroy: %s", strerror(-fd3));
	EXPECT_EQ(1, so3.created);
	EXPECT_NE(so.space_id, so3.space_id);
	EXPECT_EQ(self->spaces0 + 2, sysfs_get("spaces"));
	fd4 = kv_open_join(self->name[0], &so4);
	ASSERT_LE(0, fd4);
	EXPECT_EQ(so3.space_id, so4.space_id);
	close(fd4);
	/* The new space has nothing of the old one. */
	EXPECT_EQ(0, kv_lookup_seq(fd3, SEED, 0, 1, &got, NULL, &hits));
	EXPECT_EQ(0, hits);

	/* fd1 keeps working on the old space. */
	ASSERT_EQ(0, kv_space_info(fd1, &si));
	EXPECT_EQ(so.space_id, si.space_id);
	EXPECT_EQ(0, kv_alloc(fd1, &more, 1));
	EXPECT_EQ(0, kv_publish_seq(fd1, &a[1], 1, SEED, 1, NULL));
	ASSERT_EQ(0, kv_lookup_seq(fd1, SEED, 0, 2, (__u32[2]){ 0 }, NULL, &hits));
	EXPECT_EQ(2, hits);
	EXPECT_EQ(-1, kv_verify(m + (size_t)a[0] * BB, BB, 0x51, 0));

	/* Exactly one SPACE_DESTROYED event, on fd1 only. */
	pfd.fd = fd1;
	pfd.events = POLLIN;
	EXPECT_EQ(1, poll(&pfd, 1, 0));
	n = kv_read_events(fd1, ev, 4);
	ASSERT_EQ(1, n);
	EXPECT_EQ(1, ev[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, ev[0].type);
	EXPECT_EQ(0, kv_read_events(fd3, ev, 4));

	/* It is no longer persistent: its last close tears it down. */
	munmap(m, so.map_bytes);
	close(fd1);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_FALSE(kv_space_sysfs_exists(so.space_id));
	EXPECT_TRUE(kv_space_sysfs_exists(so3.space_id));
	close(fd3);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	ASSERT_KV_CHECK_OK();
}

TEST_F(persist, destroy_with_only_a_mapping_left)
{
	struct kvpool_space_open so;
	__u32 id;
	char *m;
	int fd;

	fd = kv_open_create(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, &id, 1));
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m + (size_t)id * BB, BB, 0x99, 0);
	close(fd);	/* the mapping holds the file */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(0, kv_destroy_name(self->name[0]));
	/* The name is free; the mapping still works until munmap. */
	fd = kv_open();
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOENT, kv_join(fd, self->name[0], NULL));
	close(fd);
	EXPECT_EQ(-1, kv_verify(m + (size_t)id * BB, BB, 0x99, 0));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	munmap(m, so.map_bytes);
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000));
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));
}

/* ---- sysfs destroy_space and drop_cached ------------------------------------------- */

TEST_F(persist, sysfs_destroy_space)
{
	struct kvpool_space_open so;
	struct kvpool_event ev[2];
	pid_t pid;
	int fd;

	fd = open_persistent(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fd);
	close(fd);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	/* Root only (mode 0200). */
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (kv_drop_to(&u1000))
			_exit(201);
		_exit(-sysfs_write("destroy_space", self->name[0]));
	}
	EXPECT_EQ(EACCES, kv_wait(pid));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));

	EXPECT_EQ(0, sysfs_write("destroy_space", self->name[0]));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_FALSE(kv_space_sysfs_exists(so.space_id));
	EXPECT_EQ(-ENOENT, sysfs_write("destroy_space", self->name[0]));
	EXPECT_EQ(-EINVAL, sysfs_write("destroy_space", "a/b"));
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));

	/* A joined space: the fd gets SPACE_DESTROYED, the name is free. */
	fd = kv_open_create(self->name[1], BB, QUOTA, &so);
	ASSERT_LE(0, fd);
	EXPECT_EQ(0, sysfs_write("destroy_space", self->name[1]));
	EXPECT_EQ(-ENOENT, kv_destroy_name(self->name[1]));
	ASSERT_EQ(1, kv_read_events(fd, ev, 2));
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, ev[0].type);
	EXPECT_EQ(1, ev[0].seq);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
}

TEST_F(persist, sysfs_writes_accept_a_trailing_newline)
{
	struct kvpool_space_open so;
	char line[KVPOOL_NAME_MAX + 2];
	int fd;

	/* As echo(1) writes them. */
	fd = open_persistent(self->name[0], BB, QUOTA, &so);
	ASSERT_LE(0, fd);
	close(fd);
	snprintf(line, sizeof(line), "%s\n", self->name[0]);
	EXPECT_EQ(0, sysfs_write("drop_cached", line));
	EXPECT_EQ(0, sysfs_write("drop_cached", "*\n"));
	EXPECT_EQ(0, sysfs_write("destroy_space", line));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
}

TEST_F(persist, sysfs_drop_cached_by_name_and_all)
{
	struct kvpool_space_open sa, sb;
	struct kvpool_event ev[8];
	__u32 a[4], b[2], hits, got;
	char buf[128];
	int fa, fb, n, i;
	pid_t pid;

	/* A: 3 cached + 1 referenced, fd held.  B: persistent, 2 cached. */
	fa = kv_open_create(self->name[0], BB, QUOTA, &sa);
	ASSERT_LE(0, fa);
	ASSERT_EQ(0, kv_alloc(fa, a, 4));
	ASSERT_EQ(0, kv_publish_seq(fa, a, 4, SEED, 0, NULL));
	ASSERT_EQ(0, kv_release(fa, a, 3));
	fb = open_persistent(self->name[1], BB, QUOTA, &sb);
	ASSERT_LE(0, fb);
	ASSERT_EQ(0, kv_alloc(fb, b, 2));
	ASSERT_EQ(0, kv_publish_seq(fb, b, 2, SEED, 0, NULL));
	close(fb);
	EXPECT_EQ(3, cached_blocks(fa));
	EXPECT_EQ(2, kv_space_sysfs_get(sb.space_id, "cached_blocks"));

	/* Root only. */
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (kv_drop_to(&u1000))
			_exit(201);
		_exit(-sysfs_write("drop_cached", "*"));
	}
	EXPECT_EQ(EACCES, kv_wait(pid));
	EXPECT_EQ(3, cached_blocks(fa));

	/* By name: only A's cached blocks, cause ADMIN. */
	EXPECT_EQ(0, sysfs_write("drop_cached", self->name[0]));
	EXPECT_EQ(0, cached_blocks(fa));
	EXPECT_EQ(1, kv_space_sysfs_get(sa.space_id, "published_blocks"));
	/* One chunk of 8 blocks: 4 were free, the 3 dropped are free now. */
	EXPECT_EQ(7, kv_space_sysfs_get(sa.space_id, "free_blocks"));
	ASSERT_LT(0, kv_space_sysfs(sa.space_id, "evictions", buf, sizeof(buf)));
	EXPECT_STREQ("quota=0 pool=0 tenant=0 reclaim=0 admin=3\n", buf);
	EXPECT_EQ(2, kv_space_sysfs_get(sb.space_id, "cached_blocks"));
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(0, kv_lookup_seq(fa, SEED, i, 1, &got, NULL, &hits));
		EXPECT_EQ(0, hits) TH_LOG("hash %d", i);
	}
	ASSERT_EQ(0, kv_lookup_seq(fa, SEED, 3, 1, &got, NULL, &hits));
	EXPECT_EQ(1, hits);
	EXPECT_EQ(a[3], got);
	/* fa published them: three EVICTED events, cause ADMIN, no pressure. */
	n = kv_read_events(fa, ev, 8);
	ASSERT_EQ(3, n);
	for (i = 0; i < n; i++) {
		EXPECT_EQ(i + 1, ev[i].seq);
		EXPECT_EQ(KVPOOL_EVENT_EVICTED, ev[i].type);
		EXPECT_EQ(KVPOOL_EVICT_ADMIN, ev[i].cause);
		EXPECT_TRUE(ev[i].block == a[0] || ev[i].block == a[1] ||
			    ev[i].block == a[2]);
	}

	/* "*": every space. */
	EXPECT_EQ(0, sysfs_write("drop_cached", "*"));
	EXPECT_EQ(0, kv_space_sysfs_get(sb.space_id, "cached_blocks"));
	ASSERT_LT(0, kv_space_sysfs(sb.space_id, "evictions", buf, sizeof(buf)));
	EXPECT_STREQ("quota=0 pool=0 tenant=0 reclaim=0 admin=2\n", buf);
	/* A's referenced block is not touched. */
	EXPECT_EQ(1, kv_space_sysfs_get(sa.space_id, "published_blocks"));
	ASSERT_LT(0, kv_space_sysfs(sa.space_id, "evictions", buf, sizeof(buf)));
	EXPECT_STREQ("quota=0 pool=0 tenant=0 reclaim=0 admin=3\n", buf);
	EXPECT_EQ(0, kv_destroy_name(self->name[1]));
	close(fa);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
}

TEST_HARNESS_MAIN
