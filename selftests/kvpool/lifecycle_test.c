// SPDX-License-Identifier: GPL-2.0
/*
 * lifecycle_test: what an fd holds is released when its file is released:
 * by close(), by exit, by SIGKILL; a mapping keeps the file (and so the
 * space) alive; the module cannot be unloaded while a file is open.
 */
#include "kvpool_util.h"

#include <sys/prctl.h>

#define BLOCK	(64 * KiB)
#define QUOTA	(8 * MiB)	/* 128 blocks, 4 chunks */

FIXTURE(life) {
	char name[KVPOOL_NAME_MAX];
	__u64 free0;
	__u64 spaces0;
};

FIXTURE_SETUP(life)
{
	kv_name(self->name, sizeof(self->name), "life");
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
}

FIXTURE_TEARDOWN(life)
{
}

#define EXPECT_BASELINE() do { \
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000)); \
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000)); \
	ASSERT_KV_CHECK_OK(); \
} while (0)

TEST_F(life, close_frees_owned_blocks_seen_by_other_fd)
{
	struct kvpool_space_info si;
	__u32 ids1[40], ids2[8];
	int fd1, fd2;

	fd1 = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, ids1, 40));
	ASSERT_EQ(0, kv_alloc(fd2, ids2, 8));
	ASSERT_EQ(0, kv_space_info(fd2, &si));
	EXPECT_EQ(48, si.owned_blocks);
	EXPECT_EQ(8, si.my_blocks);

	close(fd1);
	ASSERT_EQ(0, kv_space_info(fd2, &si));
	EXPECT_EQ(8, si.owned_blocks);
	EXPECT_EQ(8, si.my_blocks);
	EXPECT_EQ(si.backed_blocks - 8, si.free_blocks);
	/* The space (and its chunks) stays while fd2 is open. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(self->free0 - si.backed_bytes, sysfs_get("free_bytes"));
	/* fd1's ids are free: fd2 can take the whole quota now. */
	ASSERT_EQ(0, kv_alloc(fd2, ids1, 40));
	ASSERT_EQ(0, kv_space_info(fd2, &si));
	EXPECT_EQ(48, si.my_blocks);
	close(fd2);
	EXPECT_BASELINE();
}

TEST_F(life, last_close_returns_chunks_to_pool)
{
	struct kvpool_space_info si;
	__u32 ids[128];
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 128));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(QUOTA, si.backed_bytes);
	EXPECT_EQ(self->free0 - QUOTA, sysfs_get("free_bytes"));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd);
	/* Synchronous: close() returns after the release. */
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	ASSERT_KV_CHECK_OK();
}

TEST_F(life, closing_a_dup_or_a_forked_copy_frees_nothing)
{
	struct kvpool_space_info si;
	__u32 ids[4];
	pid_t pid;
	int fd, fd_dup;

	fd = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	/* Same open file: still its blocks. */
	fd_dup = dup(fd);
	ASSERT_LE(0, fd_dup);
	close(fd_dup);
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(4, si.my_blocks);

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(fd);
		_exit(0);
	}
	ASSERT_EQ(0, kv_wait(pid));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(4, si.my_blocks);
	EXPECT_EQ(0, kv_free(fd, ids, 4));
	close(fd);
	EXPECT_BASELINE();
}

TEST_F(life, mapping_keeps_space_alive_after_close)
{
	struct kvpool_space_open so;
	__u32 ids[4];
	char *m;
	int fd, fd2;

	fd = kv_open_create(self->name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	m = kv_mmap(fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m + (size_t)ids[2] * BLOCK, BLOCK, 31, 0);
	close(fd);

	/* The mapping holds the file, so the space and its pages stay. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(self->free0 - KV_CHUNK, sysfs_get("free_bytes"));
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[2] * BLOCK, BLOCK, 31, 0));
	fd2 = kv_open_join(self->name, NULL);
	EXPECT_LE(0, fd2) TH_LOG("join while only a mapping holds it: %s",
				 strerror(-fd2));
	if (fd2 >= 0)
		close(fd2);

	munmap(m, QUOTA);
	EXPECT_BASELINE();
}

/* Child: create @name, allocate, map, write; report; wait to be killed. */
static int holder_child(const char *name, int wr, int nr_blocks)
{
	struct kvpool_space_open so;
	__u32 ids[128];
	char *m, c = 'r';
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	fd = kv_open();
	if (fd < 0)
		return 10;
	kv_so_init(&so, name, KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	if (kv_space_open(fd, &so))
		return 11;
	if (kv_alloc(fd, ids, nr_blocks))
		return 12;
	m = kv_mmap(fd, QUOTA, 0);
	if (m == MAP_FAILED)
		return 13;
	memset(m, 0x3c, (size_t)nr_blocks * BLOCK);
	if (write(wr, &c, 1) != 1)
		return 14;
	for (;;)
		pause();
}

static pid_t start_holder(const char *name, int nr_blocks)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		_exit(holder_child(name, p[1], nr_blocks));
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1) {
		kill(pid, SIGKILL);
		kv_wait(pid);
		pid = -1;
	}
	close(p[0]);
	return pid;
}

TEST_F(life, sigkill_with_blocks_and_mapping_releases_all)
{
	pid_t pid;

	pid = start_holder(self->name, 100);
	ASSERT_LT(0, pid);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	EXPECT_EQ(self->free0 - QUOTA, sysfs_get("free_bytes"));
	ASSERT_EQ(0, kill(pid, SIGKILL));
	EXPECT_EQ(1000 + SIGKILL, kv_wait(pid));
	EXPECT_BASELINE();
}

TEST_F(life, sigkill_in_shared_space_keeps_survivor_data)
{
	struct kvpool_space_info si;
	__u32 ids[8];
	pid_t pid;
	char *m;
	int fd, i;

	pid = start_holder(self->name, 64);
	ASSERT_LT(0, pid);
	fd = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 8));
	m = kv_mmap(fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	for (i = 0; i < 8; i++)
		kv_fill(m + (size_t)ids[i] * BLOCK, BLOCK, i, 0);
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(72, si.owned_blocks);

	ASSERT_EQ(0, kill(pid, SIGKILL));
	EXPECT_EQ(1000 + SIGKILL, kv_wait(pid));
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(8, si.owned_blocks);
	EXPECT_EQ(8, si.my_blocks);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	for (i = 0; i < 8; i++) {
		EXPECT_EQ(-1, kv_verify(m + (size_t)ids[i] * BLOCK, BLOCK, i, 0))
			TH_LOG("block %u", ids[i]);
	}
	ASSERT_KV_CHECK_OK();
	munmap(m, QUOTA);
	close(fd);
	EXPECT_BASELINE();
}

TEST_F(life, exit_with_many_fds_and_spaces_releases_all)
{
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		char name[KVPOOL_NAME_MAX];
		__u32 ids[16];
		int i, fd;

		for (i = 0; i < 8; i++) {
			/* Four spaces, two fds each, all with blocks. */
			snprintf(name, sizeof(name), "%.50s-%d", self->name, i / 2);
			fd = kv_open();
			if (fd < 0)
				_exit(10);
			{
				struct kvpool_space_open so;

				kv_so_init(&so, name, KVPOOL_SPACE_CREATE,
					   BLOCK, QUOTA);
				if (kv_space_open(fd, &so))
					_exit(11);
			}
			if (kv_alloc(fd, ids, 16))
				_exit(12);
			if (i == 5 && kv_mmap(fd, QUOTA, 0) == MAP_FAILED)
				_exit(13);
		}
		_exit(0);	/* no close, no munmap */
	}
	EXPECT_EQ(0, kv_wait(pid));
	EXPECT_BASELINE();
}

static long sys_delete_module(const char *name, unsigned int flags)
{
	return syscall(SYS_delete_module, name, flags);
}

/* The module must be pinned (refcnt > 0) before we dare ask to unload it. */
static void expect_unload_refused(struct __test_metadata *_metadata,
				  const char *what)
{
	char buf[32];
	long ret;
	int n;

	n = read_file("/sys/module/kvpool/refcnt", buf, sizeof(buf));
	ASSERT_LT(0, n) TH_LOG("/sys/module/kvpool/refcnt: %s", strerror(-n));
	ASSERT_LT(0, atoi(buf)) TH_LOG("%s: module refcnt is 0; not trying to unload", what);
	ret = sys_delete_module("kvpool", O_NONBLOCK);
	ASSERT_EQ(-1, ret) TH_LOG("%s: kvpool was unloaded!", what);
	EXPECT_TRUE(errno == EWOULDBLOCK || errno == EAGAIN)
		TH_LOG("%s: delete_module: %s", what, strerror(errno));
	EXPECT_EQ(0, access("/sys/module/kvpool", F_OK));
}

TEST_F(life, unload_refused_while_fd_open)
{
	int fd;

	fd = kv_open();
	ASSERT_LE(0, fd);
	expect_unload_refused(_metadata, "unjoined fd");
	ASSERT_EQ(0, kv_create(fd, self->name, BLOCK, QUOTA, NULL));
	expect_unload_refused(_metadata, "joined fd");
	close(fd);
}

TEST_F(life, unload_refused_while_only_mapping_open)
{
	__u32 id;
	char *m;
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, &id, 1));
	m = kv_mmap(fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	close(fd);
	expect_unload_refused(_metadata, "mapping without fd");
	m[(size_t)id * BLOCK] = 1;
	munmap(m, QUOTA);
	EXPECT_BASELINE();
}

TEST_HARNESS_MAIN
