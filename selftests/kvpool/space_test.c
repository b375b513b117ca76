// SPDX-License-Identifier: GPL-2.0
/*
 * space_test: creating and joining spaces, name rules, sharing between
 * processes, permission checks by credentials, and destruction on the last
 * close.
 *
 * Rights are fixed at open, as for any file: the module checks the
 * credentials of the fd's opener, whoever issues the ioctl.  Children that
 * act as other users therefore drop their credentials first and open the
 * device as that user (kv_drop_and_open(): /dev/kvpool itself may be 0660
 * root:root); passed_fd_keeps_openers_rights shows that a process using
 * another's fd acts as the opener.
 */
#include "kvpool_util.h"

#include <pthread.h>
#include <stdarg.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>

#define BLOCK	(64 * KiB)
#define QUOTA	(4 * MiB)

FIXTURE(space) {
	char name[KVPOOL_NAME_MAX];
	__u64 spaces0;
};

FIXTURE_SETUP(space)
{
	kv_name(self->name, sizeof(self->name), "space");
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
}

FIXTURE_TEARDOWN(space)
{
}

/* ---- create / join -------------------------------------------------------- */

TEST_F(space, create_reports_space)
{
	struct kvpool_space_open so;
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd) TH_LOG("create: %s", strerror(-fd));
	EXPECT_EQ(1, so.created);
	EXPECT_EQ(QUOTA / BLOCK, so.nr_blocks);
	EXPECT_EQ(QUOTA, so.map_bytes);
	EXPECT_EQ(BLOCK, so.block_bytes);
	EXPECT_EQ(getuid(), so.uid);
	EXPECT_EQ(getgid(), so.gid);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd);
}

TEST_F(space, join_reports_same_space)
{
	struct kvpool_space_open so1, so2, so3;
	int fd1, fd2, fd3;

	fd1 = kv_open_create(self->name, BLOCK, QUOTA, &so1);
	ASSERT_LE(0, fd1);
	/* Plain join, block_bytes 0. */
	fd2 = kv_open_join(self->name, &so2);
	ASSERT_LE(0, fd2) TH_LOG("join: %s", strerror(-fd2));
	EXPECT_EQ(0, so2.created);
	EXPECT_EQ(so1.space_id, so2.space_id);
	EXPECT_EQ(so1.nr_blocks, so2.nr_blocks);
	EXPECT_EQ(so1.map_bytes, so2.map_bytes);
	EXPECT_EQ(BLOCK, so2.block_bytes);
	EXPECT_EQ(so1.uid, so2.uid);
	EXPECT_EQ(so1.gid, so2.gid);
	/* Join naming the space's own block size. */
	fd3 = kv_open();
	ASSERT_LE(0, fd3);
	kv_so_init(&so3, self->name, 0, BLOCK, 0);
	EXPECT_EQ(0, kv_space_open(fd3, &so3));
	EXPECT_EQ(so1.space_id, so3.space_id);
	/* Still one space. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd3);
	close(fd2);
	close(fd1);
}

TEST_F(space, create_without_excl_joins_existing)
{
	struct kvpool_space_open so1, so2;
	int fd1, fd2;

	fd1 = kv_open();
	ASSERT_LE(0, fd1);
	kv_so_init(&so1, self->name, KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	ASSERT_EQ(0, kv_space_open(fd1, &so1));
	EXPECT_EQ(1, so1.created);
	fd2 = kv_open();
	ASSERT_LE(0, fd2);
	/* Different quota/mode/policy are ignored on join. */
	kv_so_init(&so2, self->name, KVPOOL_SPACE_CREATE, BLOCK, 2 * QUOTA);
	so2.mode = 0644;
	so2.numa_policy = KVPOOL_NUMA_INTERLEAVE;
	ASSERT_EQ(0, kv_space_open(fd2, &so2));
	EXPECT_EQ(0, so2.created);
	EXPECT_EQ(so1.space_id, so2.space_id);
	EXPECT_EQ(so1.nr_blocks, so2.nr_blocks);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd2);
	close(fd1);
}

/* *fd1 holds a new space name of BLOCK blocks and QUOTA; *fd2 is a second fd, in no space. */
static void created_and_bare(struct __test_metadata *_metadata, const char *name, int *fd1,
			     int *fd2)
{
	*fd1 = kv_open_create(name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, *fd1);
	*fd2 = kv_open();
	ASSERT_LE(0, *fd2);
}

TEST_F(space, create_excl_on_existing_eexist)
{
	struct kvpool_space_open so;
	int fd1, fd2;

	created_and_bare(_metadata, self->name, &fd1, &fd2);
	EXPECT_EQ(-EEXIST, kv_create(fd2, self->name, BLOCK, QUOTA, &so));
	/* Even with a different geometry. */
	EXPECT_EQ(-EEXIST, kv_create(fd2, self->name, 2 * BLOCK, QUOTA, &so));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd2);
	close(fd1);
}

TEST_F(space, join_absent_enoent)
{
	struct kvpool_space_open so;
	int fd;

	fd = kv_open();
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOENT, kv_join(fd, self->name, &so));
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	close(fd);
}

TEST_F(space, join_block_bytes_mismatch_einval)
{
	struct kvpool_space_open so;
	int fd1, fd2;

	created_and_bare(_metadata, self->name, &fd1, &fd2);
	kv_so_init(&so, self->name, 0, 2 * BLOCK, 0);
	EXPECT_EQ(-EINVAL, kv_space_open(fd2, &so));
	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, BLOCK / 2, QUOTA);
	EXPECT_EQ(-EINVAL, kv_space_open(fd2, &so));
	kv_so_init(&so, self->name, 0, BLOCK, 0);
	EXPECT_EQ(0, kv_space_open(fd2, &so));
	close(fd2);
	close(fd1);
}

TEST_F(space, names_are_exact_and_case_sensitive)
{
	char upper[KVPOOL_NAME_MAX], lower[KVPOOL_NAME_MAX];
	char prefix[KVPOOL_NAME_MAX];
	struct kvpool_space_open a, b, c;
	int fa, fb, fc, fd;

	snprintf(lower, sizeof(lower), "case-%d-abc", (int)getpid());
	snprintf(upper, sizeof(upper), "case-%d-ABC", (int)getpid());
	snprintf(prefix, sizeof(prefix), "case-%d-ab", (int)getpid());
	fa = kv_open_create(lower, BLOCK, QUOTA, &a);
	ASSERT_LE(0, fa);
	fb = kv_open_create(upper, BLOCK, QUOTA, &b);
	ASSERT_LE(0, fb) TH_LOG("%s vs %s: %s", upper, lower, strerror(-fb));
	fc = kv_open_create(prefix, BLOCK, QUOTA, &c);
	ASSERT_LE(0, fc) TH_LOG("%s vs %s: %s", prefix, lower, strerror(-fc));
	EXPECT_NE(a.space_id, b.space_id);
	EXPECT_NE(a.space_id, c.space_id);
	EXPECT_NE(b.space_id, c.space_id);
	EXPECT_EQ(self->spaces0 + 3, sysfs_get("spaces"));
	/* A longer name that shares the prefix does not exist. */
	fd = kv_open();
	ASSERT_LE(0, fd);
	snprintf(prefix, sizeof(prefix), "case-%d-abcd", (int)getpid());
	EXPECT_EQ(-ENOENT, kv_join(fd, prefix, &c));
	close(fd);
	close(fc);
	close(fb);
	close(fa);
}

TEST_F(space, name_validation)
{
	static const char *const bad[] = {
		"", " ", "a b", "a/b", "/", "x\n", "q?", "pct%", "ab\\c",
		"caf\xc3\xa9", "tilde~", "plus+",
	};
	struct kvpool_space_open so;
	unsigned int i;
	int fd;

	fd = kv_open();
	ASSERT_LE(0, fd);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		kv_so_init(&so, bad[i], KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
		EXPECT_EQ(-EINVAL, kv_space_open(fd, &so)) TH_LOG("'%s'", bad[i]);
	}
	/* 64 bytes without a NUL. */
	kv_so_init(&so, "x", KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	memset(so.name, 'n', sizeof(so.name));
	EXPECT_EQ(-EINVAL, kv_space_open(fd, &so));
	/* Bytes after the NUL are not part of the name. */
	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	memset(so.name + strlen(self->name) + 1, '!',
	       sizeof(so.name) - strlen(self->name) - 1);
	EXPECT_EQ(0, kv_space_open(fd, &so));
	EXPECT_EQ(1, so.created);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd);
}

TEST_F(space, spaces_are_isolated)
{
	struct kvpool_space_open sa, sb;
	char other[KVPOOL_NAME_MAX];
	__u32 ida, idb;
	char *ma, *mb;
	int fa, fb;

	kv_name(other, sizeof(other), "space-b");
	fa = kv_open_create(self->name, BLOCK, QUOTA, &sa);
	ASSERT_LE(0, fa);
	fb = kv_open_create(other, BLOCK, QUOTA, &sb);
	ASSERT_LE(0, fb);
	EXPECT_NE(sa.space_id, sb.space_id);
	ASSERT_EQ(0, kv_alloc(fa, &ida, 1));
	ASSERT_EQ(0, kv_alloc(fb, &idb, 1));
	ma = kv_mmap(fa, sa.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, ma);
	mb = kv_mmap(fb, sb.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, mb);
	kv_fill(ma + (size_t)ida * BLOCK, BLOCK, 0xa, 0);
	kv_fill(mb + (size_t)idb * BLOCK, BLOCK, 0xb, 0);
	EXPECT_EQ(-1, kv_verify(ma + (size_t)ida * BLOCK, BLOCK, 0xa, 0));
	EXPECT_EQ(-1, kv_verify(mb + (size_t)idb * BLOCK, BLOCK, 0xb, 0));
	munmap(ma, sa.map_bytes);
	munmap(mb, sb.map_bytes);
	close(fb);
	close(fa);
}

/* ---- two processes -------------------------------------------------------- */

/*
 * Child: join @name with its own fd and mapping, check block a holds
 * pattern 1 (written by the parent), write pattern 2 into block b.
 * Exit codes: 0 ok, 10+ failure step.
 */
static int share_child(const char *name, int rd, int wr)
{
	struct kvpool_space_open so;
	__u32 ids[2];
	char *m, c = 'd';
	int fd;

	fd = kv_child_join_map(name, &so, &m);
	if (fd < 0)
		return -fd;
	if (read(rd, ids, sizeof(ids)) != sizeof(ids))
		return 12;
	if (kv_verify(m + (size_t)ids[0] * BLOCK, BLOCK, 1, 0) != -1)
		return 13;
	kv_fill(m + (size_t)ids[1] * BLOCK, BLOCK, 2, 0);
	if (write(wr, &c, 1) != 1)
		return 14;
	/* Wait for the parent to overwrite block a, then see it. */
	if (read(rd, &c, 1) != 1)
		return 15;
	if (kv_verify(m + (size_t)ids[0] * BLOCK, BLOCK, 3, 0) != -1)
		return 16;
	return 0;
}

TEST_F(space, two_processes_see_each_others_writes)
{
	struct kvpool_space_open so;
	int to_child[2], to_parent[2];
	__u32 ids[2];
	pid_t pid;
	char *m, c = 'g';
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 2));
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m + (size_t)ids[0] * BLOCK, BLOCK, 1, 0);
	memset(m + (size_t)ids[1] * BLOCK, 0, BLOCK);

	ASSERT_EQ(0, pipe(to_child));
	ASSERT_EQ(0, pipe(to_parent));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(fd);	/* the child uses its own fd and mapping */
		munmap(m, so.map_bytes);
		_exit(share_child(self->name, to_child[0], to_parent[1]));
	}
	ASSERT_EQ(sizeof(ids), write(to_child[1], ids, sizeof(ids)));
	ASSERT_EQ(1, read(to_parent[0], &c, 1));
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[1] * BLOCK, BLOCK, 2, 0));
	kv_fill(m + (size_t)ids[0] * BLOCK, BLOCK, 3, 0);
	ASSERT_EQ(1, write(to_child[1], &c, 1));
	EXPECT_EQ(0, kv_wait(pid));
	/* The child's writes outlive the child. */
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[1] * BLOCK, BLOCK, 2, 0));
	munmap(m, so.map_bytes);
	close(fd);
}

/* ---- permissions ---------------------------------------------------------- */

/*
 * Fork a child that drops to @c, opens the device as @c, and runs
 * SPACE_OPEN with @flags and @expect_uid on @name.  Returns the errno (0 on
 * success), or 200+ when the child could not get that far.
 */
static int open_as_expect(const struct kv_cred *c, const char *name,
			  __u32 flags, __u32 expect_uid,
			  struct kvpool_space_open *out)
{
	struct kvpool_space_open so;
	int p[2], ret;
	pid_t pid;

	if (pipe(p))
		return 250;
	pid = fork();
	if (pid < 0)
		return 251;
	if (pid == 0) {
		int fd = kv_drop_and_open(c);

		close(p[0]);
		if (fd < 0)
			_exit(200);
		kv_so_init(&so, name, flags, BLOCK, QUOTA);
		so.expect_uid = expect_uid;
		ret = -kv_space_open(fd, &so);
		/* A refused open must not have joined anything. */
		if (ret && kv_space_info(fd, &(struct kvpool_space_info){}) != -EBADFD)
			_exit(203);
		if (write(p[1], &so, sizeof(so)) != sizeof(so))
			_exit(202);
		_exit(ret);
	}
	close(p[1]);
	memset(&so, 0, sizeof(so));
	if (read(p[0], &so, sizeof(so)) != sizeof(so))
		memset(&so, 0xff, sizeof(so));
	close(p[0]);
	if (out)
		*out = so;
	return kv_wait(pid);
}

static int open_as(const struct kv_cred *c, const char *name, __u32 flags,
		   struct kvpool_space_open *out)
{
	return open_as_expect(c, name, flags, 0, out);
}

static int join_as(const struct kv_cred *c, const char *name)
{
	return open_as(c, name, 0, NULL);
}

/* Join as @c a space that @owner owns: FOREIGN, so the mode decides. */
static int join_foreign_as(const struct kv_cred *c, const char *name,
			   uid_t owner)
{
	return open_as_expect(c, name, KVPOOL_SPACE_FOREIGN, owner, NULL);
}

/*
 * A child, dropped to @c, that creates @name with @mode and holds it open
 * until killed.  Returns the child's pid, or -errno of the create.
 */
static pid_t hold_space_as(const struct kv_cred *c, const char *name,
			   __u32 mode, struct kvpool_space_open *out)
{
	struct kvpool_space_open so;
	pid_t pid, parent = getpid();
	int p[2], ret;

	if (pipe(p))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = kv_drop_and_open(c);

		close(p[0]);
		ret = fd < 0 ? fd : 0;
		/* After the credential change, which clears it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		kv_so_init(&so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
			   BLOCK, QUOTA);
		so.mode = mode;
		if (!ret)
			ret = kv_space_open(fd, &so);
		if (write(p[1], &ret, sizeof(ret)) != sizeof(ret) ||
		    write(p[1], &so, sizeof(so)) != sizeof(so))
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &ret, sizeof(ret)) != sizeof(ret) ||
	    read(p[0], &so, sizeof(so)) != sizeof(so))
		ret = -EPIPE;
	close(p[0]);
	if (out)
		*out = so;
	if (ret) {
		kill(pid, SIGKILL);
		kv_wait(pid);
		return ret;
	}
	return pid;
}

/* hold_space_as(), which must succeed: the holder's pid. */
static pid_t held_as(struct __test_metadata *_metadata, const struct kv_cred *c,
		     const char *name, __u32 mode, struct kvpool_space_open *out)
{
	pid_t holder = hold_space_as(c, name, mode, out);

	ASSERT_LT(0, holder) TH_LOG("uid %u create %s: %s", (unsigned int)c->uid, name,
				    strerror(-holder));
	return holder;
}

static void release_holder(pid_t pid)
{
	kill(pid, SIGKILL);
	kv_wait(pid);
}

static const struct kv_cred nobody = { .uid = 65534, .gid = 65534 };
static const struct kv_cred u1000 = { .uid = 1000, .gid = 2000 };
static const struct kv_cred u1001 = { .uid = 1001, .gid = 3000 };
static const struct kv_cred u1001_g2000 = { .uid = 1001, .gid = 2000 };
static const struct kv_cred u1001_supp2000 = {
	.uid = 1001, .gid = 3000, .ngroups = 1, .groups = { 2000 },
};

TEST_F(space, nobody_cannot_join_root_space_eacces)
{
	struct kvpool_space_open so;
	int fd;

	fd = kv_open_create(self->name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd);
	EXPECT_EQ(EACCES, join_foreign_as(&nobody, self->name, 0));
	/* Without FOREIGN root's space is refused before the mode is read. */
	EXPECT_EQ(EACCES, join_as(&nobody, self->name));
	EXPECT_EQ(EEXIST, open_as(&nobody, self->name, KVPOOL_SPACE_CREATE,
				  NULL));
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd);
}

TEST_F(space, other_class_needs_read_and_write)
{
	static const struct { __u32 mode; int err; } cases[] = {
		{ 0666, 0 }, { 0606, 0 }, { 0604, EACCES }, { 0602, EACCES },
		{ 0660, EACCES }, { 0601, EACCES }, { 0607, 0 },
	};
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	unsigned int i;
	int fd;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		kv_name(name, sizeof(name), "perm");
		fd = kv_open();
		ASSERT_LE(0, fd);
		kv_so_init(&so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
			   BLOCK, QUOTA);
		so.mode = cases[i].mode;
		ASSERT_EQ(0, kv_space_open(fd, &so));
		EXPECT_EQ(cases[i].err, join_foreign_as(&nobody, name, 0))
			TH_LOG("mode 0%o", cases[i].mode);
		close(fd);
	}
}

TEST_F(space, owner_0600_other_uid_eacces_root_allowed)
{
	struct kvpool_space_open so;
	pid_t holder;
	int fd;

	holder = held_as(_metadata, &u1000, self->name, 0600, &so);
	EXPECT_EQ(1000, so.uid);
	EXPECT_EQ(2000, so.gid);
	EXPECT_EQ(1, so.created);

	EXPECT_EQ(EACCES, join_foreign_as(&u1001, self->name, 1000));
	EXPECT_EQ(EACCES, join_foreign_as(&u1001_g2000, self->name, 1000));
	EXPECT_EQ(EACCES, join_foreign_as(&nobody, self->name, 1000));
	/* The owner joins again. */
	EXPECT_EQ(0, join_as(&u1000, self->name));
	/* Root (CAP_SYS_ADMIN) overrides the mode, not the owner check. */
	fd = kv_open();
	ASSERT_LE(0, fd);
	EXPECT_EQ(-EACCES, kv_join(fd, self->name, &so));
	EXPECT_EQ(0, kv_join_foreign(fd, self->name, 1000, &so))
		TH_LOG("root join");
	EXPECT_EQ(1000, so.uid);
	EXPECT_EQ(0, so.created);
	close(fd);
	release_holder(holder);
}

static const struct kv_cred u1002 = { .uid = 1002, .gid = 1002 };

/*
 * Issue 14.3: uid 1001 takes the name a victim engine (uid 1002) uses, mode
 * 0666.  The victim's create-or-join must fail instead of joining, and so
 * must root's; only a join that names 1001 as the expected owner lands.
 */
TEST_F(space, space_name_squatting)
{
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	pid_t squatter;
	int fd;

	kv_name(name, sizeof(name), "victim");
	squatter = held_as(_metadata, &u1001, name, 0666, &so);
	EXPECT_EQ(1001, so.uid);

	/* The victim's create-or-join, and a plain join, are refused. */
	EXPECT_EQ(EEXIST, open_as(&u1002, name, KVPOOL_SPACE_CREATE, NULL));
	EXPECT_EQ(EEXIST, open_as(&u1002, name, KVPOOL_SPACE_CREATE |
				  KVPOOL_SPACE_PERSIST, NULL));
	EXPECT_EQ(EACCES, join_as(&u1002, name));
	/* Naming the owner joins; naming anyone else does not. */
	EXPECT_EQ(0, join_foreign_as(&u1002, name, 1001));
	EXPECT_EQ(EACCES, join_foreign_as(&u1002, name, 1002));
	EXPECT_EQ(EACCES, join_foreign_as(&u1002, name, 0));
	EXPECT_EQ(EACCES, join_foreign_as(&u1002, name, (__u32)-1));
	/* expect_uid means nothing without FOREIGN; FOREIGN never creates. */
	EXPECT_EQ(EINVAL, open_as_expect(&u1002, name, 0, 1001, NULL));
	EXPECT_EQ(EINVAL, open_as_expect(&u1002, name, KVPOOL_SPACE_CREATE,
					 1001, NULL));
	EXPECT_EQ(EINVAL, open_as_expect(&u1002, name, KVPOOL_SPACE_CREATE |
					 KVPOOL_SPACE_FOREIGN, 1001, NULL));

	/* Root is squattable too: no capability skips the owner check. */
	fd = kv_open();
	ASSERT_LE(0, fd);
	kv_so_init(&so, name, KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
	EXPECT_EQ(-EEXIST, kv_space_open(fd, &so));
	EXPECT_EQ(-EACCES, kv_join(fd, name, &so));
	EXPECT_EQ(-EACCES, kv_join_foreign(fd, name, 1002, &so));
	EXPECT_EQ(0, kv_join_foreign(fd, name, 1001, &so));
	EXPECT_EQ(1001, so.uid);
	EXPECT_EQ(0, so.created);
	close(fd);

	/* The owner's create-or-join still joins, and says so. */
	EXPECT_EQ(0, open_as(&u1001, name, KVPOOL_SPACE_CREATE, &so));
	EXPECT_EQ(0, so.created);
	EXPECT_EQ(0666, so.mode);
	EXPECT_EQ(1001, so.uid);
	/* Nothing the refused calls did created a space. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	release_holder(squatter);
}

TEST_F(space, group_class_permissions)
{
	struct kvpool_space_open so;
	pid_t holder;

	/* Owner has no rights, group has rw, others none. */
	holder = held_as(_metadata, &u1000, self->name, 0060, &so);
	EXPECT_EQ(2000, so.gid);
	EXPECT_EQ(0, join_foreign_as(&u1001_g2000, self->name, 1000));
	EXPECT_EQ(0, join_foreign_as(&u1001_supp2000, self->name, 1000));
	EXPECT_EQ(EACCES, join_foreign_as(&u1001, self->name, 1000));
	/* The owner's class is checked first, like a file's. */
	EXPECT_EQ(EACCES, join_as(&u1000, self->name));
	release_holder(holder);
}

TEST_F(space, group_read_only_eacces)
{
	struct kvpool_space_open so;
	pid_t holder;

	holder = held_as(_metadata, &u1000, self->name, 0640, &so);
	EXPECT_EQ(EACCES, join_foreign_as(&u1001_g2000, self->name, 1000));
	EXPECT_EQ(0, join_as(&u1000, self->name));
	release_holder(holder);
}

TEST_F(space, unprivileged_user_can_create_own_space)
{
	struct kvpool_space_open so;

	EXPECT_EQ(0, open_as(&nobody, self->name,
			     KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL, &so));
	EXPECT_EQ(65534, so.uid);
	EXPECT_EQ(65534, so.gid);
	EXPECT_EQ(1, so.created);
	/* The child exited: its space is gone. */
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000));
}

/*
 * The owner is the opener's fsuid/fsgid: the ids the device was opened
 * with, not the euid, and not whatever the process has when it creates.
 */
TEST_F(space, owner_is_openers_fsuid_fsgid)
{
	struct kvpool_space_open so;
	int p[2];
	pid_t pid;

	ASSERT_EQ(0, pipe(p));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd, ret;

		/* euid/egid stay 0; only the filesystem ids change. */
		setfsgid(4321);
		setfsuid(1234);
		if (setfsuid(-1) != 1234 || setfsgid(-1) != 4321)
			_exit(20);
		/* fsuid 1234 lost CAP_DAC_OVERRIDE; the device may be 0660 root:root. */
		if (kv_dac_override(1))
			_exit(23);
		fd = kv_open();
		/* Back to root's ids: the fd keeps its opener's. */
		setfsuid(0);
		setfsgid(0);
		if (setfsuid(-1) != 0 || setfsgid(-1) != 0)
			_exit(24);
		ret = fd < 0 ? 21 : -kv_create(fd, self->name, BLOCK,
					       QUOTA, &so);
		if (write(p[1], &so, sizeof(so)) != sizeof(so))
			_exit(22);
		_exit(ret);
	}
	close(p[1]);
	ASSERT_EQ(sizeof(so), read(p[0], &so, sizeof(so)));
	ASSERT_EQ(0, kv_wait(pid));
	EXPECT_EQ(1234, so.uid);
	EXPECT_EQ(4321, so.gid);
}

/*
 * A child that drops to @c and then gets @fd over a unix socket
 * (SCM_RIGHTS), as from another process.  With @name it joins @name
 * (@flags, @expect_uid), else it destroys @destroy.  Returns the errno (0
 * on success), or 200+ when the child could not get that far.
 */
static int passed_fd_op_as(const struct kv_cred *c, int fd, const char *name,
			   __u32 flags, __u32 expect_uid, const char *destroy)
{
	int sk[2], ret, inherit = kv_fd_channel(sk);
	pid_t pid;

	if (inherit < 0)
		return 250;
	pid = fork();
	if (pid < 0)
		return 251;
	if (pid == 0) {
		struct kvpool_space_open so;
		int got = fd;

		if (!inherit) {
			close(sk[0]);
			if (close(fd))
				_exit(200);
		}
		if (kv_drop_to(c))
			_exit(200);
		if (!inherit)
			got = kv_recv_fd(sk[1]);
		if (got < 0)
			_exit(201);
		if (!name)
			_exit(-kv_destroy(got, destroy));
		kv_so_init(&so, name, flags, 0, 0);
		so.expect_uid = expect_uid;
		ret = -kv_space_open(got, &so);
		/* A refused open must not have joined anything. */
		if (ret && kv_space_info(got, &(struct kvpool_space_info){}) != -EBADFD)
			_exit(203);
		_exit(ret);
	}
	if (inherit)
		return kv_wait(pid);
	close(sk[1]);
	ret = kv_send_fd(sk[0], fd);
	close(sk[0]);
	if (ret) {
		kill(pid, SIGKILL);
		kv_wait(pid);
		return 252;
	}
	return kv_wait(pid);
}

/*
 * Issue 14 finding 12: the module checked the caller's credentials, not the
 * opener's, so an fd passed over a unix socket (or kept across a
 * setresuid()) carried whatever rights its current user had.  Rights are
 * fixed at open now, as for a file: the owner's fd lets anyone it is given
 * to act as the owner, and an outsider's fd stays an outsider's even in
 * the owner's or root's hands.
 */
TEST_F(space, passed_fd_keeps_openers_rights)
{
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	int owner_fd, out_fd, fd;
	pid_t holder;

	holder = held_as(_metadata, &u1000, self->name, 0600, &so);
	ASSERT_EQ(1000, so.uid);

	/* The owner's fd, passed to nobody, joins as the owner (no FOREIGN). */
	owner_fd = kv_open_as(&u1000);
	ASSERT_LE(0, owner_fd) TH_LOG("open as 1000: %s", strerror(-owner_fd));
	EXPECT_EQ(0, passed_fd_op_as(&nobody, owner_fd, self->name, 0, 0, NULL));
	/* nobody's own fd may not. */
	EXPECT_EQ(EACCES, join_foreign_as(&nobody, self->name, 1000));

	/* nobody's fd, passed to the owner: the owner check sees 65534. */
	out_fd = kv_open_as(&nobody);
	ASSERT_LE(0, out_fd) TH_LOG("open as nobody: %s", strerror(-out_fd));
	EXPECT_EQ(EACCES, passed_fd_op_as(&u1000, out_fd, self->name, 0, 0, NULL));
	/* ... and the mode, nobody's class, with FOREIGN. */
	EXPECT_EQ(EACCES, passed_fd_op_as(&u1000, out_fd, self->name,
					  KVPOOL_SPACE_FOREIGN, 1000, NULL));
	/* In root's hands it has no CAP_SYS_ADMIN either. */
	EXPECT_EQ(-EACCES, kv_join_foreign(out_fd, self->name, 1000, &so));
	EXPECT_EQ(-EBADFD, kv_space_info(out_fd, &(struct kvpool_space_info){}));
	EXPECT_EQ(-EPERM, kv_destroy(out_fd, self->name));
	/* Root's own fd overrides the mode, as before. */
	fd = kv_open();
	ASSERT_LE(0, fd);
	EXPECT_EQ(0, kv_join_foreign(fd, self->name, 1000, &so));
	close(fd);

	/* Created through a passed fd, a space is the opener's. */
	fd = kv_open_as(&u1001);
	ASSERT_LE(0, fd);
	kv_name(name, sizeof(name), "passed");
	EXPECT_EQ(0, kv_create(fd, name, BLOCK, QUOTA, &so));
	EXPECT_EQ(1001, so.uid);
	EXPECT_EQ(3000, so.gid);
	/* So is destroying: nobody with the owner's fd may. */
	EXPECT_EQ(0, passed_fd_op_as(&nobody, owner_fd, NULL, 0, 0, self->name));
	EXPECT_EQ(-ENOENT, kv_destroy(out_fd, self->name));
	close(fd);
	close(out_fd);
	close(owner_fd);
	release_holder(holder);
}

/* ---- destruction ---------------------------------------------------------- */

TEST_F(space, destroyed_on_last_close)
{
	struct kvpool_space_open so;
	int fd1, fd2, fd3;

	fd1 = kv_open_create(self->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd1);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	close(fd1);
	/* fd2 still holds it. */
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	fd3 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd3) TH_LOG("join after first close: %s",
				 strerror(-fd3));
	close(fd3);
	close(fd2);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	/* Gone: a join fails and a create is a new space. */
	fd1 = kv_open();
	ASSERT_LE(0, fd1);
	EXPECT_EQ(-ENOENT, kv_join(fd1, self->name, &so));
	EXPECT_EQ(0, kv_create(fd1, self->name, 2 * BLOCK, QUOTA, &so));
	EXPECT_EQ(1, so.created);
	EXPECT_EQ(2 * BLOCK, so.block_bytes);
	close(fd1);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
}

TEST_F(space, destroyed_when_holder_process_exits)
{
	pid_t holder;
	int fd;

	holder = held_as(_metadata, &u1000, self->name, 0600, NULL);
	EXPECT_EQ(self->spaces0 + 1, sysfs_get("spaces"));
	release_holder(holder);
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000));
	fd = kv_open();
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOENT, kv_join(fd, self->name, NULL));
	close(fd);
}

/* ---- the name index ------------------------------------------------------ */

/* Spaces the index test creates; the debug kernel's run asks for fewer. */
#define INDEX_SPACES_MAX 1500

/* Persistent create through a fresh fd; the space id, or -errno. */
static long create_persistent(const char *name)
{
	struct kvpool_space_open so;
	int fd = kv_open(), ret;

	if (fd < 0)
		return -errno;
	kv_so_init(&so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL | KVPOOL_SPACE_PERSIST,
		   4096, 4096);
	ret = kv_space_open(fd, &so);
	close(fd);
	return ret ? ret : (long)so.space_id;
}

/* Join by name, with @junk written past the name's NUL; the id, or -errno. */
static long join_id(const char *name, char junk)
{
	struct kvpool_space_open so;
	int fd = kv_open(), ret;

	if (fd < 0)
		return -errno;
	kv_so_init(&so, name, 0, 0, 0);
	memset(so.name + strlen(name) + 1, junk, sizeof(so.name) - strlen(name) - 1);
	ret = kv_space_open(fd, &so);
	close(fd);
	return ret ? ret : (long)so.space_id;
}

/*
 * Many names: each resolves to its own space whatever follows its NUL, a
 * destroyed name is free at once while its neighbours stay, and nothing is
 * left behind.
 */
TEST_F_TIMEOUT(space, name_index_many_spaces, 300)
{
	static long ids[INDEX_SPACES_MAX];
	int n = (int)kv_cmdline_ulong("kvpool_index_spaces", INDEX_SPACES_MAX);
	char name[KVPOOL_NAME_MAX], old_max[32];
	int i;

	if (n < 2 || n > INDEX_SPACES_MAX)
		n = INDEX_SPACES_MAX;

	ASSERT_LT(0, read_file(KV_SYSFS "/spaces_per_uid_max", old_max, sizeof(old_max)));
	ASSERT_EQ(0, sysfs_write("spaces_per_uid_max", "0"));
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%.48s.%d", self->name, i);
		ids[i] = create_persistent(name);
		if (ids[i] < 0)
			break;
	}
	ASSERT_EQ(n, i) TH_LOG("create %d: %s", i, strerror((int)-ids[i]));
	EXPECT_EQ(self->spaces0 + n, sysfs_get("spaces"));
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%.48s.%d", self->name, i);
		ASSERT_EQ(ids[i], join_id(name, (char)('a' + i % 26))) TH_LOG("%s", name);
		if (i % 2)
			ASSERT_EQ(0, kv_destroy_name(name));
	}
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%.48s.%d", self->name, i);
		if (i % 2) {
			ASSERT_EQ(-ENOENT, join_id(name, 0)) TH_LOG("%s", name);
			ASSERT_LT(0, create_persistent(name));
		} else {
			ASSERT_EQ(ids[i], join_id(name, 0)) TH_LOG("%s", name);
		}
		ASSERT_EQ(0, kv_destroy_name(name));
	}
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_EQ(0, sysfs_write("spaces_per_uid_max", old_max));
	ASSERT_KV_CHECK_OK();
}

/* ---- joins, destroys and cache drops racing one another ------------------- */

#define RACE_NAMES 4
/* Rounds of each racer; the debug kernel's run asks for fewer. */
static unsigned long race_rounds;

static void race_name(char *buf, const char *base, unsigned int i)
{
	snprintf(buf, KVPOOL_NAME_MAX, "%.48s.r%u", base, i % RACE_NAMES);
}

/*
 * Run op on each round's name (the names cycle through RACE_NAMES); the
 * first op to return non-zero ends the racer with that exit code.
 */
static int race_each_name(const char *base, int (*op)(const char *name, unsigned int i))
{
	char name[KVPOOL_NAME_MAX];
	unsigned int i;
	int ret;

	for (i = 0; i < race_rounds; i++) {
		race_name(name, base, i);
		ret = op(name, i);
		if (ret)
			return ret;
	}
	return 0;
}

/* Create-or-join, touch the space, close: the last close tears it down. */
static int join_touch_close(const char *name, unsigned int i)
{
	struct kvpool_space_open so;
	__u32 id;
	int fd, ret;

	(void)i;
	fd = kv_open();
	if (fd < 0)
		return 1;
	kv_so_init(&so, name, KVPOOL_SPACE_CREATE, 4096, 16 * 4096);
	ret = kv_space_open(fd, &so);
	if (ret && ret != -ENOENT) {
		close(fd);
		return 2;
	}
	if (!ret && kv_alloc(fd, &id, 1)) {
		close(fd);
		return 3;
	}
	close(fd);
	return 0;
}

/* Destroy the name; that it is gone already is no error. */
static int destroy_name(const char *name, unsigned int i)
{
	int ret = kv_destroy_name(name);

	(void)i;
	return ret && ret != -ENOENT;
}

/* Drop the name's cached blocks, or every space's on odd rounds. */
static int drop_cached(const char *name, unsigned int i)
{
	int ret = sysfs_write("drop_cached", i % 2 ? "*" : name);

	return ret && ret != -ENOENT;
}

static int race_joiner(const char *base)
{
	return race_each_name(base, join_touch_close);
}

static int race_destroyer(const char *base)
{
	return race_each_name(base, destroy_name);
}

static int race_dropper(const char *base)
{
	return race_each_name(base, drop_cached);
}

/* Two threads SPACE_OPEN one fd at once: exactly one joins. */
struct double_open {
	int fd;
	char name[KVPOOL_NAME_MAX];
	int ret;
};

static void *double_open_thread(void *arg)
{
	struct double_open *d = arg;
	struct kvpool_space_open so;

	kv_so_init(&so, d->name, KVPOOL_SPACE_CREATE, 4096, 4096);
	d->ret = kv_space_open(d->fd, &so);
	return NULL;
}

static int race_double_opener(const char *base)
{
	struct double_open d[2];
	pthread_t t[2];
	int i, j;

	for (i = 0; i < race_rounds / 4; i++) {
		int fd = kv_open();

		if (fd < 0)
			return 1;
		for (j = 0; j < 2; j++) {
			d[j].fd = fd;
			snprintf(d[j].name, sizeof(d[j].name), "%.48s.d%d", base, j);
			if (pthread_create(&t[j], NULL, double_open_thread, &d[j]))
				return 2;
		}
		for (j = 0; j < 2; j++)
			pthread_join(t[j], NULL);
		close(fd);
		if (!!d[0].ret == !!d[1].ret)
			return 3;
		if ((d[0].ret ? d[0].ret : d[1].ret) != -EBUSY)
			return 4;
	}
	return 0;
}

/*
 * Joins, destroys, cache drops (named and "*") and double opens of one fd,
 * all at once: every step succeeds or fails with its documented errno, and
 * afterwards no space is left and the accounting holds.
 */
TEST_F_TIMEOUT(space, open_destroy_drop_race, 300)
{
	int (*const workers[])(const char *) = {
		race_joiner, race_joiner, race_destroyer, race_dropper, race_double_opener,
	};
	pid_t pids[ARRAY_SIZE(workers)];
	unsigned int i;

	race_rounds = kv_cmdline_ulong("kvpool_race_rounds", 200);

	for (i = 0; i < ARRAY_SIZE(workers); i++) {
		pids[i] = fork();
		ASSERT_LE(0, pids[i]);
		if (!pids[i])
			_exit(workers[i](self->name));
	}
	for (i = 0; i < ARRAY_SIZE(workers); i++)
		EXPECT_EQ(0, kv_wait(pids[i])) TH_LOG("worker %u", i);
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000));
	ASSERT_KV_CHECK_OK();
}

/* ---- 32-bit ids after a wrap (issue 14, finding 15) ----------------------- */

#define WRAP_IDS "/sys/kernel/debug/kvpool/wrap_ids"

static int wrap_ids(const char *fmt, ...)
{
	char buf[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return kv_write_path(WRAP_IDS, buf);
}

/*
 * Past 2^32 creates, a new space id skips 0 and every id a live space holds:
 * sysfs space/ID and block owners would otherwise name two spaces at once.
 */
TEST_F(space, space_ids_wrap_skip_zero_and_in_use)
{
	struct kvpool_space_open x, y, z;
	char name[KVPOOL_NAME_MAX];
	int fdx, fdy, fdz;

	if (access(WRAP_IDS, W_OK))
		SKIP(return, "no debugfs wrap_ids");
	fdx = kv_open_create(self->name, 4096, 4096, &x);
	ASSERT_LE(0, fdx);
	/* The next id would be x's own. */
	ASSERT_EQ(0, wrap_ids("serial %llu", (1ULL << 32) + x.space_id - 1));
	snprintf(name, sizeof(name), "%.48s.y", self->name);
	fdy = kv_open_create(name, 4096, 4096, &y);
	ASSERT_LE(0, fdy);
	EXPECT_NE(x.space_id, y.space_id);
	EXPECT_NE(0, y.space_id);
	/* The next id would be 0. */
	ASSERT_EQ(0, wrap_ids("serial %llu", (2ULL << 32) - 1));
	snprintf(name, sizeof(name), "%.48s.z", self->name);
	fdz = kv_open_create(name, 4096, 4096, &z);
	ASSERT_LE(0, fdz);
	EXPECT_NE(0, z.space_id);
	EXPECT_NE(x.space_id, z.space_id);
	EXPECT_NE(y.space_id, z.space_id);
	close(fdz);
	close(fdy);
	close(fdx);
	ASSERT_KV_CHECK_OK();
}

/*
 * Past 2^32 joins of one space, a new fd's owner id skips 0 and every id an
 * open fd holds: two fds with one owner id could free each other's blocks,
 * and the first to close would take the other's with it.
 */
TEST_F(space, owner_ids_wrap_skip_zero_and_in_use)
{
	int fd[4], i, j, late;
	__u32 id[4];

	if (access(WRAP_IDS, W_OK))
		SKIP(return, "no debugfs wrap_ids");
	fd[0] = kv_open_create(self->name, 4096, 16 * 4096, NULL);
	ASSERT_LE(0, fd[0]);
	fd[1] = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd[1]);
	/* fd 0 and 1 hold owners 1 and 2; the counter goes back to 1 ... */
	ASSERT_EQ(0, wrap_ids("owner %s 1", self->name));
	fd[2] = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd[2]);
	/* ... and to the last id, then 0. */
	ASSERT_EQ(0, wrap_ids("owner %s %u", self->name, 0xffffffffu));
	fd[3] = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd[3]);
	late = kv_open_join(self->name, NULL);
	ASSERT_LE(0, late);
	for (i = 0; i < 4; i++)
		ASSERT_EQ(0, kv_alloc(fd[i], &id[i], 1));
	/* Nobody else may free a block: every fd has an owner id of its own. */
	for (i = 0; i < 4; i++)
		EXPECT_EQ(-EPERM, kv_free(late, &id[i], 1)) TH_LOG("block of fd %d", i);
	close(late);
	for (i = 0; i < 4; i++)
		for (j = 0; j < 4; j++)
			if (j != i)
				EXPECT_EQ(-EPERM, kv_free(fd[j], &id[i], 1))
					TH_LOG("fd %d freed the block of fd %d", j, i);
	for (i = 0; i < 4; i++)
		EXPECT_EQ(0, kv_free(fd[i], &id[i], 1)) TH_LOG("fd %d", i);
	for (i = 0; i < 4; i++)
		close(fd[i]);
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
