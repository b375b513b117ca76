// SPDX-License-Identifier: MIT
/*
 * test_backend: libkvrt's space and prefix cache API against each
 * backend, with the errnos Documentation/kvpool.rst gives for the ioctls,
 * for both backends alike.  The prefix cache part checks against
 * expectations worked out by hand (eviction order from priorities and
 * release order, dedup targets, event sequences), not against kvcore.
 *
 *   KVRT_BACKEND=embedded  only the embedded backend
 *   KVRT_BACKEND=kmod      only kvpool.ko (fails when the device is absent)
 *   unset                  embedded, then kmod when the device opens
 *                          (a SKIP line otherwise)
 *   KVRT_DEVICE            the device (default /dev/kvpool)
 *
 * Built twice by libkvrt's Makefile: against the shared library (and under
 * ASan+UBSan) for `make check`, and static (build/test_backend) for the
 * test VM, where kvpool.ko is loaded.  Space names carry the pid, so runs
 * never meet each other's spaces on a shared module.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

#define BB 4096ULL

static enum kvrt_backend cur;
static const char *cur_name;
static const char *device;
static struct kvrt *K;
static uint32_t ids[KVRT_MAX_BATCH + 1];

static struct kvrt *open_backend(enum kvrt_backend b, uint32_t flags, uint64_t pool_bytes)
{
	struct kvrt_open_opts o = { .backend = b, .device = device, .flags = flags,
				    .pool_bytes = pool_bytes };
	struct kvrt *k = NULL;

	return kvrt_open(&k, &o) ? NULL : k;
}

static int test_pid;	/* the parent's, so forked children find its spaces */

static const char *nm(const char *tag)
{
	static char buf[8][KVRT_NAME_MAX];
	static int i;
	char *b = buf[i++ % 8];

	snprintf(b, KVRT_NAME_MAX, "kvrt-test-%d-%s", test_pid, tag);
	return b;
}

static struct kvrt_space_opts create_opts(const char *tag, uint64_t block, uint64_t quota)
{
	return (struct kvrt_space_opts){ .name = nm(tag), .flags = KVRT_SPACE_CREATE,
					 .mode = 0600, .block_bytes = block, .quota_bytes = quota };
}

static struct kvrt_space *create(const char *tag, uint64_t block, uint64_t quota)
{
	struct kvrt_space_opts o = create_opts(tag, block, quota);
	struct kvrt_space *s = NULL;
	int ret = kvrt_space_open(K, &o, &s);

	if (ret)
		tap_diag("create %s: %s", o.name, strerror(-ret));
	return s;
}

static struct kvrt_space *join(const char *tag)
{
	struct kvrt_space_opts o = { .name = nm(tag) };
	struct kvrt_space *s = NULL;

	return kvrt_space_open(K, &o, &s) ? NULL : s;
}

/* A space of BB blocks created under tag (*a), and a second handle joined to it (*b). */
static bool create_and_join(const char *tag, uint64_t quota, struct kvrt_space **a,
			    struct kvrt_space **b)
{
	*a = create(tag, BB, quota);
	*b = *a ? join(tag) : NULL;
	if (*a && !*b)
		tap_diag("join %s failed", tag);
	return *a && *b;
}

static struct kvrt_space_info info(struct kvrt_space *s)
{
	struct kvrt_space_info i;

	memset(&i, 0xff, sizeof(i));
	CHECK_EQ(kvrt_space_info(s, &i), 0);
	return i;
}

/* ---- tests ------------------------------------------------------------------ */

TEST(pool_info)
{
	struct kvrt_pool_info p;

	CHECK_EQ(kvrt_pool_info(NULL, &p), -EINVAL);
	CHECK_EQ(kvrt_pool_info(K, NULL), -EINVAL);
	REQUIRE(kvrt_pool_info(K, &p) == 0);
	CHECK_EQ(p.backend, cur);
	CHECK(p.features & KVRT_FEAT_SPACES);
	if (cur == KVRT_BACKEND_EMBEDDED) {
		CHECK_EQ(p.api_version, 4);
		/* Everything but reclaim: the embedded pool has no shrinker. */
		CHECK_EQ(p.features, KVRT_FEAT_SPACES | KVRT_FEAT_NUMA | KVRT_FEAT_PREFIX |
				     KVRT_FEAT_PERSIST | KVRT_FEAT_RESIDENCY | KVRT_FEAT_EVENTS);
	} else {
		CHECK(p.api_version >= 1 && p.api_version <= 4);
		if (p.api_version >= 2)
			CHECK_EQ(p.features & 0x7f, 0x7f);
	}
	CHECK_EQ(p.page_size, sysconf(_SC_PAGESIZE));
	CHECK(p.chunk_size >= p.page_size && !(p.chunk_size & (p.chunk_size - 1)));
	CHECK_EQ(p.max_batch, KVRT_MAX_BATCH);
	CHECK(p.nr_nodes >= 1 && p.node_mask != 0);
	CHECK_EQ(p.nr_nodes, __builtin_popcountll(p.node_mask));
	if (cur == KVRT_BACKEND_KMOD) {
		CHECK(p.pool_bytes > 0);
		CHECK_EQ(p.used_bytes + p.free_bytes, p.pool_bytes);
	}
	tap_diag("%s: nodes %#llx, chunk %u, pool %llu, used %llu, free %llu", cur_name,
		 (unsigned long long)p.node_mask, p.chunk_size, (unsigned long long)p.pool_bytes,
		 (unsigned long long)p.used_bytes, (unsigned long long)p.free_bytes);
}

TEST(space_open_errors)
{
	struct kvrt_space_opts o;
	struct kvrt_space *s = (struct kvrt_space *)&s;
	struct kvrt_pool_info p;
	char name64[KVRT_NAME_MAX + 1];
	static const char *const bad_names[] = { "", "a/b", "a b", "caf\xc3\xa9", "x\n", "..?" };

	REQUIRE(kvrt_pool_info(K, &p) == 0);
	o = create_opts("e", BB, 16 * BB);
	CHECK_EQ(kvrt_space_open(NULL, &o, &s), -EINVAL);
	CHECK(s == NULL);
	CHECK_EQ(kvrt_space_open(K, NULL, &s), -EINVAL);
	CHECK_EQ(kvrt_space_open(K, &o, NULL), -EINVAL);
#define EXPECT(field_change, err)                                  \
	do {                                                       \
		o = create_opts("e", BB, 16 * BB);                 \
		field_change;                                      \
		CHECK_EQ(kvrt_space_open(K, &o, &s), err);         \
	} while (0)
	EXPECT(o.flags = 1U << 4, -EINVAL);
	EXPECT(o.flags = KVRT_SPACE_EXCL, -EINVAL);
	EXPECT(o.flags = KVRT_SPACE_PERSIST, -EINVAL);
	EXPECT(o.flags = KVRT_SPACE_PERSIST | KVRT_SPACE_EXCL, -EINVAL);
	EXPECT(o.expect_uid = 1, -EINVAL);			/* without FOREIGN */
	EXPECT(o.flags |= KVRT_SPACE_FOREIGN, -EINVAL);		/* with CREATE */
	EXPECT(o.reserved[2] = 1, -EINVAL);
	EXPECT(o.name = NULL, -EINVAL);
	for (unsigned int i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
		EXPECT(o.name = bad_names[i], -EINVAL);
	memset(name64, 'n', KVRT_NAME_MAX);
	name64[KVRT_NAME_MAX] = '\0';
	EXPECT(o.name = name64, -EINVAL);
	EXPECT(o.block_bytes = 0, -EINVAL);
	EXPECT(o.block_bytes = BB + 512, -EINVAL);
	EXPECT((o.block_bytes = KVRT_MAX_BLOCK_BYTES + BB, o.quota_bytes = 2 * o.block_bytes),
	       -E2BIG);
	EXPECT(o.quota_bytes = BB - 1, -EINVAL);
	EXPECT(o.quota_bytes = KVRT_MAX_SPACE_BYTES + BB, -E2BIG);
	EXPECT(o.mode = 01000, -EINVAL);
	EXPECT(o.numa_policy = (enum kvrt_numa_policy)3, -EINVAL);
	EXPECT(o.node_mask = 1ULL << 63, -EINVAL);
	EXPECT(o.node_mask = ~p.node_mask & -~p.node_mask, -EINVAL);	/* lowest absent node */
	EXPECT(o.numa_policy = KVRT_NUMA_BIND, -EINVAL);			/* BIND, empty mask */
	/* Nothing was created by any of these. */
	EXPECT((o.flags = 0, o.mode = 0, o.quota_bytes = 0), -ENOENT);
	/* A name of 63 characters is fine (nm() truncates to that). */
	o = create_opts("e-63-chars-are-fine-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", BB, 16 * BB);
	CHECK_EQ(strlen(o.name), KVRT_NAME_MAX - 1);
	o.flags |= KVRT_SPACE_EXCL;
	CHECK_EQ(kvrt_space_open(K, &o, &s), 0);
	kvrt_space_close(s);
#undef EXPECT
}

TEST(join_rules)
{
	struct kvrt_space *a, *b, *c = (struct kvrt_space *)&c;
	struct kvrt_space_opts o = create_opts("j", 2 * BB, 64 * BB);
	struct kvrt_space_info ia, ib;

	o.flags |= KVRT_SPACE_EXCL;
	o.mode = 0640;
	REQUIRE(kvrt_space_open(K, &o, &a) == 0);
	ia = info(a);
	CHECK_EQ(ia.created, 1);
	CHECK_EQ(ia.block_bytes, 2 * BB);
	CHECK_EQ(ia.nr_blocks, 32);
	CHECK_EQ(ia.map_bytes, 64 * BB);
	CHECK_EQ(ia.mode, 0640);
	CHECK_EQ(ia.uid, geteuid());
	CHECK_EQ(ia.gid, getegid());
	CHECK_EQ(ia.numa_policy, KVRT_NUMA_PREFERRED);
	/* CREATE|EXCL on an existing space. */
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EEXIST);
	CHECK(c == NULL);
	/* Join with another block size. */
	o.flags = KVRT_SPACE_CREATE;
	o.block_bytes = BB;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	/* A create-or-join checks the create fields even when it would join (kmod API 4). */
	o.block_bytes = 2 * BB;
	o.quota_bytes = 1;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	o.quota_bytes = 64 * BB;
	o.mode = 07777;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	o.mode = 0600;
	o.numa_policy = (enum kvrt_numa_policy)9;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	o.numa_policy = KVRT_NUMA_PREFERRED;
	o.block_bytes = 0;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	CHECK(c == NULL);
	/* Valid ones join, and the space's own values stand. */
	o.block_bytes = 2 * BB;
	o.quota_bytes = 128 * BB;
	o.mode = 0600;
	o.numa_policy = KVRT_NUMA_INTERLEAVE;
	CHECK_EQ(kvrt_space_open(K, &o, &b), 0);
	ib = info(b);
	CHECK_EQ(ib.created, 0);
	CHECK_EQ(ib.space_id, ia.space_id);
	CHECK_EQ(ib.nr_blocks, 32);
	CHECK_EQ(ib.mode, 0640);
	CHECK_EQ(ib.numa_policy, KVRT_NUMA_PREFERRED);
	kvrt_space_close(b);
	/* A plain join has no create fields at all. */
	c = (struct kvrt_space *)&c;
	CHECK_EQ(kvrt_space_open(K, &(struct kvrt_space_opts){ .name = nm("j"), .mode = 0640 },
				 &c), -EINVAL);
	CHECK(c == NULL);
	CHECK_EQ(kvrt_space_open(K, &(struct kvrt_space_opts){ .name = nm("j"),
							      .quota_bytes = 64 * BB }, &c),
		 -EINVAL);
	CHECK_EQ(kvrt_space_open(K, &(struct kvrt_space_opts){ .name = nm("j"), .node_mask = 1 },
				 &c), -EINVAL);
	CHECK_EQ(kvrt_space_open(K, &(struct kvrt_space_opts){
					 .name = nm("j"), .numa_policy = KVRT_NUMA_BIND }, &c),
		 -EINVAL);
	/* The same space under another handle's name lookup: plain join. */
	b = join("j");
	CHECK(b != NULL);
	kvrt_space_close(b);
	kvrt_space_close(a);
	/* The last close destroyed it. */
	CHECK(join("j") == NULL);
	o = (struct kvrt_space_opts){ .name = nm("j") };
	CHECK_EQ(kvrt_space_open(K, &o, &c), -ENOENT);
}

/*
 * In a child that dropped to uid/gid 65534 (keeping group 0 with @group0,
 * so that a 0660 root:root /dev/kvpool opens): 0 if kvrt_space_open with
 * flags and expect_uid gave want, and a success landed in a space of owner
 * want_owner that it created exactly when CREATE was asked.
 */
static int child_open_as(const char *tag, uint32_t flags, uint32_t expect_uid,
			 int want_unless_no_device, uint32_t want_owner, bool group0)
{
	pid_t pid;
	int status;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct kvrt_space_opts o = create_opts(tag, BB, 4 * BB);
		struct kvrt_space *s = (struct kvrt_space *)&s;
		int want = want_unless_no_device, ret;

		o.flags = flags;
		o.expect_uid = expect_uid;
		o.mode = 0666;
		if (!(flags & KVRT_SPACE_CREATE))	/* a plain join has no create fields */
			o = (struct kvrt_space_opts){ .name = o.name, .flags = flags,
						      .expect_uid = expect_uid };
		if (setgroups(group0, (gid_t[]){ 0 }) || setgid(65534) || setuid(65534))
			_exit(100);
		if (cur == KVRT_BACKEND_KMOD && access(device ? device : "/dev/kvpool", R_OK | W_OK))
			want = -EACCES;	/* the device itself is closed to this user */
		ret = kvrt_space_open(K, &o, &s);
		if (ret != want || (ret && s) ||
		    (!ret && (info(s).created != !!(flags & KVRT_SPACE_CREATE) ||
			      info(s).uid != want_owner))) {
			printf("# child: open %s flags %#x expect_uid %u gave %d, want %d\n",
			       o.name, flags, expect_uid, ret, want);
			fflush(stdout);
			_exit(1);
		}
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int child_open(const char *tag, uint32_t flags, uint32_t expect_uid, int want)
{
	return child_open_as(tag, flags, expect_uid, want, expect_uid, false);
}

TEST(permissions)
{
	struct kvrt_space_opts o = create_opts("p0", BB, 4 * BB);
	struct kvrt_space *a, *b, *q;
	int ret;

	o.mode = 0;
	REQUIRE(kvrt_space_open(K, &o, &a) == 0);
	/* The owner needs rw like anyone; root (CAP_SYS_ADMIN) is let in. */
	ret = kvrt_space_open(K, &(struct kvrt_space_opts){ .name = nm("p0") }, &b);
	CHECK_EQ(ret, geteuid() == 0 ? 0 : -EACCES);
	if (!ret)
		kvrt_space_close(b);
	if (geteuid() != 0) {
		tap_skip("not root: no other user to try");
		kvrt_space_close(a);
		return;
	}
	o = create_opts("p606", BB, 4 * BB);
	o.mode = 0606;
	REQUIRE(kvrt_space_open(K, &o, &q) == 0);
	/* The mode decides once the owner (root) is named. */
	CHECK_EQ(child_open("p0", KVRT_SPACE_FOREIGN, 0, -EACCES), 0);
	CHECK_EQ(child_open("p606", KVRT_SPACE_FOREIGN, 0, 0), 0);
	kvrt_space_close(q);
	kvrt_space_close(a);
}

static uint64_t features_of(struct kvrt *k)
{
	struct kvrt_pool_info p;

	return kvrt_pool_info(k, &p) ? 0 : p.features;
}

/*
 * Issue 14.3, space-name squatting: a create-or-join must not land in a
 * space that another uid took first; only naming that owner
 * (KVRT_SPACE_FOREIGN and expect_uid) joins it.
 */
TEST(space_name_squatting)
{
	struct kvrt_space_opts o = create_opts("sq", BB, 4 * BB);
	struct kvrt_space *a, *b, *c = (struct kvrt_space *)&c;
	uint32_t me = (uint32_t)geteuid();
	struct kvrt_space_info ia, ib;

	/* Refused requests change nothing: the name stays free. */
	o.flags = KVRT_SPACE_CREATE | KVRT_SPACE_FOREIGN;
	o.expect_uid = me;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	CHECK(c == NULL);
	o.flags = KVRT_SPACE_CREATE;
	o.expect_uid = me + 1;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EINVAL);
	o = (struct kvrt_space_opts){ .name = nm("sq"), .flags = KVRT_SPACE_FOREIGN,
				      .expect_uid = me + 1 };
	CHECK_EQ(kvrt_space_open(K, &o, &c), -ENOENT);
	CHECK(c == NULL);

	o = create_opts("sq", BB, 4 * BB);
	o.mode = 0666;
	REQUIRE(kvrt_space_open(K, &o, &a) == 0);
	ia = info(a);
	CHECK_EQ(ia.created, 1);
	CHECK_EQ(ia.uid, me);
	/* The owner's create-or-join joins and says so; its (valid) create fields are not applied. */
	o.mode = 0600;
	o.quota_bytes = 8 * BB;
	o.flags |= KVRT_SPACE_PERSIST;
	REQUIRE(kvrt_space_open(K, &o, &b) == 0);
	ib = info(b);
	CHECK_EQ(ib.created, 0);
	CHECK_EQ(ib.space_id, ia.space_id);
	CHECK_EQ(ib.uid, me);
	CHECK_EQ(ib.mode, 0666);
	CHECK_EQ(ib.nr_blocks, 4);
	kvrt_space_close(b);
	/* Naming the owner joins; naming anyone else joins nothing. */
	o = (struct kvrt_space_opts){ .name = nm("sq"), .flags = KVRT_SPACE_FOREIGN,
				      .expect_uid = me };
	REQUIRE(kvrt_space_open(K, &o, &b) == 0);
	CHECK_EQ(info(b).created, 0);
	CHECK_EQ(info(b).uid, me);
	kvrt_space_close(b);
	o.expect_uid = me + 1;
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EACCES);
	CHECK(c == NULL);
	CHECK_EQ(info(a).my_blocks, 0);
	if (geteuid() != 0) {
		tap_skip("not root: no other user to try");
		kvrt_space_close(a);
		return;
	}
	/* uid 65534 (in group 0, to reach a root-only device) meets root's space. */
	CHECK_EQ(child_open_as("sq", KVRT_SPACE_CREATE, 0, -EEXIST, 0, true), 0);
	CHECK_EQ(child_open_as("sq", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, 0, -EEXIST, 0, true),
		 0);
	CHECK_EQ(child_open_as("sq", 0, 0, -EACCES, 0, true), 0);
	CHECK_EQ(child_open_as("sq", KVRT_SPACE_FOREIGN, 65534, -EACCES, 0, true), 0);
	CHECK_EQ(child_open_as("sq", KVRT_SPACE_FOREIGN, 0, 0, 0, true), 0);
	kvrt_space_close(a);
	if (cur != KVRT_BACKEND_KMOD || !(features_of(K) & KVRT_FEAT_PERSIST))
		return;
	/* kmod: 65534 squats a name first (persistent, 0666); root is the victim. */
	REQUIRE(child_open_as("sq2", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, 0, 0, 65534, true) ==
		0);
	o = create_opts("sq2", BB, 4 * BB);
	CHECK_EQ(kvrt_space_open(K, &o, &c), -EEXIST);
	CHECK(c == NULL);
	CHECK_EQ(kvrt_space_open(K, &(struct kvrt_space_opts){ .name = nm("sq2") }, &c), -EACCES);
	o = (struct kvrt_space_opts){ .name = nm("sq2"), .flags = KVRT_SPACE_FOREIGN,
				      .expect_uid = 65534 };
	REQUIRE(kvrt_space_open(K, &o, &b) == 0);
	CHECK_EQ(info(b).created, 0);
	CHECK_EQ(info(b).uid, 65534);
	kvrt_space_close(b);
	CHECK_EQ(kvrt_space_destroy(K, nm("sq2")), 0);
}

TEST(alloc_free_argument_errors)
{
	struct kvrt_space *s = create("a", BB, 16 * BB);

	REQUIRE(s);
	CHECK_EQ(kvrt_alloc_blocks(NULL, 1, ids), -EINVAL);
	CHECK_EQ(kvrt_alloc_blocks(s, 0, ids), -EINVAL);
	CHECK_EQ(kvrt_alloc_blocks(s, KVRT_MAX_BATCH + 1, ids), -E2BIG);
	CHECK_EQ(kvrt_alloc_blocks(s, 1, NULL), -EFAULT);
	CHECK_EQ(kvrt_free_blocks(NULL, 1, ids), -EINVAL);
	CHECK_EQ(kvrt_free_blocks(s, 0, ids), -EINVAL);
	CHECK_EQ(kvrt_free_blocks(s, KVRT_MAX_BATCH + 1, ids), -E2BIG);
	CHECK_EQ(kvrt_free_blocks(s, 1, NULL), -EFAULT);
	CHECK_EQ(info(s).owned_blocks, 0);
	CHECK_EQ(kvrt_space_info(NULL, NULL), -EINVAL);
	CHECK_EQ(kvrt_space_info(s, NULL), -EINVAL);
	CHECK(kvrt_space_base(NULL) == NULL);
	CHECK(kvrt_block_addr(NULL, 0) == NULL);
	kvrt_space_close(s);
	kvrt_space_close(NULL);
}

TEST(alloc_to_the_quota_all_or_nothing)
{
	struct kvrt_space *s = create("q", BB, 8 * BB);
	struct kvrt_space_info i;
	uint32_t more[4] = { 77, 77, 77, 77 };

	REQUIRE(s);
	CHECK_EQ(kvrt_alloc_blocks(s, 5, ids), 0);
	i = info(s);
	CHECK_EQ(i.owned_blocks, 5);
	CHECK_EQ(i.my_blocks, 5);
	/* 4 more do not fit in 8: nothing is taken, the array is untouched. */
	CHECK_EQ(kvrt_alloc_blocks(s, 4, more), -ENOSPC);
	CHECK_EQ(more[0], 77);
	CHECK_EQ(info(s).owned_blocks, 5);
	CHECK_EQ(info(s).free_blocks, i.free_blocks);
	CHECK_EQ(kvrt_alloc_blocks(s, 3, ids + 5), 0);
	CHECK_EQ(kvrt_alloc_blocks(s, 1, more), -ENOSPC);
	i = info(s);
	CHECK_EQ(i.owned_blocks, 8);
	CHECK_EQ(i.free_blocks, i.backed_blocks - 8);
	/* Distinct ids below nr_blocks. */
	for (int a = 0; a < 8; a++) {
		CHECK(ids[a] < 8);
		for (int b = 0; b < a; b++)
			CHECK(ids[a] != ids[b]);
	}
	CHECK_EQ(kvrt_free_blocks(s, 8, ids), 0);
	i = info(s);
	CHECK_EQ(i.owned_blocks, 0);
	CHECK_EQ(i.free_blocks, i.backed_blocks);
	kvrt_space_close(s);
}

TEST(free_errors_all_or_nothing)
{
	struct kvrt_space *a, *b;
	struct kvrt_space_info i;
	uint32_t mine[2], theirs[1], batch[3], freeid = UINT32_MAX;

	REQUIRE(create_and_join("f", 1024 * BB, &a, &b));
	REQUIRE(kvrt_alloc_blocks(a, 2, mine) == 0);
	REQUIRE(kvrt_alloc_blocks(b, 1, theirs) == 0);
	i = info(a);
	CHECK_EQ(i.my_blocks, 2);
	CHECK_EQ(info(b).my_blocks, 1);
	CHECK_EQ(i.owned_blocks, 3);
	/* Another participant's block: EPERM, and nothing of the batch freed. */
	batch[0] = mine[0];
	batch[1] = theirs[0];
	CHECK_EQ(kvrt_free_blocks(a, 2, batch), -EPERM);
	CHECK_EQ(info(a).my_blocks, 2);
	/* Twice in one batch: EINVAL. */
	batch[0] = mine[0];
	batch[1] = mine[1];
	batch[2] = mine[0];
	CHECK_EQ(kvrt_free_blocks(a, 3, batch), -EINVAL);
	CHECK_EQ(info(a).my_blocks, 2);
	/* Beyond the backed range (the last block of a 4 MiB range). */
	batch[1] = 1023;
	CHECK(i.backed_blocks <= 1023);
	CHECK_EQ(kvrt_free_blocks(a, 2, batch), -EINVAL);
	batch[1] = UINT32_MAX;
	CHECK_EQ(kvrt_free_blocks(a, 2, batch), -EINVAL);
	/* A backed block that is free: EPERM. */
	for (uint32_t id = 0; id < i.backed_blocks && freeid == UINT32_MAX; id++)
		if (id != mine[0] && id != mine[1] && id != theirs[0])
			freeid = id;
	if (freeid != UINT32_MAX) {
		batch[1] = freeid;
		CHECK_EQ(kvrt_free_blocks(a, 2, batch), -EPERM);
	}
	CHECK_EQ(info(a).my_blocks, 2);
	CHECK_EQ(kvrt_free_blocks(a, 2, mine), 0);
	CHECK_EQ(kvrt_free_blocks(a, 1, mine), -EPERM);	/* already free */
	CHECK_EQ(info(a).owned_blocks, 1);
	kvrt_space_close(b);
	CHECK_EQ(info(a).owned_blocks, 0);	/* closing b freed its block */
	kvrt_space_close(a);
}

TEST(mapping_is_shared_between_participants)
{
	struct kvrt_space *a = create("m", 2 * BB, 64 * 2 * BB), *b;
	struct kvrt_space_info i;
	uint32_t got[16];
	int bad = 0;

	REQUIRE(a);
	b = join("m");
	REQUIRE(b);
	i = info(a);
	CHECK(kvrt_space_base(a) != NULL);
	CHECK(kvrt_block_addr(a, 0) == kvrt_space_base(a));
	CHECK(kvrt_block_addr(a, 63) == (char *)kvrt_space_base(a) + 63 * 2 * BB);
	CHECK(kvrt_block_addr(a, 64) == NULL);
	CHECK(kvrt_block_addr(a, UINT32_MAX) == NULL);
	CHECK_EQ(i.map_bytes, 64 * 2 * BB);
	REQUIRE(kvrt_alloc_blocks(a, 16, got) == 0);
	for (int n = 0; n < 16; n++) {
		uint64_t *p = kvrt_block_addr(a, got[n]);

		for (size_t w = 0; w < 2 * BB / 8; w++)
			p[w] = ((uint64_t)got[n] << 32) | w;
	}
	for (int n = 0; n < 16; n++) {
		const uint64_t *p = kvrt_block_addr(b, got[n]);

		for (size_t w = 0; w < 2 * BB / 8; w++)
			if (p[w] != (((uint64_t)got[n] << 32) | w) && bad++ < 3)
				tap_diag("block %u word %zu: %#llx", got[n], w,
					 (unsigned long long)p[w]);
	}
	CHECK_EQ(bad, 0);
	kvrt_space_close(a);
	kvrt_space_close(b);
}

TEST(fresh_space_memory_is_zero)
{
	struct kvrt_space *s = create("z", 16 * BB, 64 * 16 * BB);
	uint32_t got[64];
	int bad = 0;

	REQUIRE(s);
	REQUIRE(kvrt_alloc_blocks(s, 64, got) == 0);
	for (int n = 0; n < 64; n++) {
		const unsigned char *p = kvrt_block_addr(s, got[n]);

		for (size_t x = 0; x < 16 * BB; x++)
			bad += p[x] != 0;
	}
	CHECK_EQ(bad, 0);
	kvrt_space_close(s);
}

TEST(two_spaces_on_one_handle)
{
	struct kvrt_space *a = create("two-a", BB, 16 * BB), *b = create("two-b", 8 * BB, 64 * BB);
	uint32_t x, y;

	REQUIRE(a && b);
	CHECK(info(a).space_id != info(b).space_id);
	CHECK_EQ(kvrt_alloc_blocks(a, 1, &x), 0);
	CHECK_EQ(kvrt_alloc_blocks(b, 1, &y), 0);
	memset(kvrt_block_addr(a, x), 0xa, BB);
	memset(kvrt_block_addr(b, y), 0xb, 8 * BB);
	CHECK_EQ(*(unsigned char *)kvrt_block_addr(a, x), 0xa);
	CHECK_EQ(info(a).my_blocks, 1);
	CHECK_EQ(info(b).my_blocks, 1);
	kvrt_space_close(a);
	kvrt_space_close(b);
}

TEST(numa_policies)
{
	struct kvrt_pool_info p;
	struct kvrt_space_opts o;
	struct kvrt_space *s;
	uint64_t top;

	REQUIRE(kvrt_pool_info(K, &p) == 0);
	top = 1ULL << (63 - __builtin_clzll(p.node_mask));
	for (int pol = 0; pol < 3; pol++) {
		o = create_opts(pol == 0 ? "n0" : pol == 1 ? "n1" : "n2", BB, 1024 * BB);
		o.numa_policy = (enum kvrt_numa_policy)pol;
		o.node_mask = pol == 2 ? p.node_mask : top;
		REQUIRE(kvrt_space_open(K, &o, &s) == 0);
		CHECK_EQ(info(s).numa_policy, pol);
		CHECK_EQ(info(s).node_mask, o.node_mask);
		CHECK_EQ(kvrt_alloc_blocks(s, 600, ids), 0);	/* more than one chunk */
		memset(kvrt_block_addr(s, ids[0]), 1, BB);
		kvrt_space_close(s);
	}
}

/* A thread's own xorshift64 (13, 7, 17): one step of *r. */
static void xorshift_step(uint64_t *r)
{
	*r ^= *r << 13;
	*r ^= *r >> 7;
	*r ^= *r << 17;
}

/* A thread of a concurrency test: its space handle, its tag, what went wrong. */
struct worker {
	struct kvrt_space *s;
	uint32_t tag;
	int errors;
};

/*
 * Run fn on six threads, four sharing handle a and two sharing b, tagged
 * tag_base + thread; each must end with no errors.
 */
static void run_six_workers(void *(*fn)(void *), struct kvrt_space *a, struct kvrt_space *b,
			    uint32_t tag_base)
{
	struct worker w[6];
	pthread_t th[6];

	for (int t = 0; t < 6; t++) {
		w[t] = (struct worker){ .s = t < 4 ? a : b, .tag = tag_base + (uint32_t)t };
		pthread_create(&th[t], NULL, fn, &w[t]);
	}
	for (int t = 0; t < 6; t++) {
		pthread_join(th[t], NULL);
		CHECKF(w[t].errors == 0, "thread %d (tag %#x): %d errors", t, w[t].tag,
		       w[t].errors);
	}
}

static void *worker(void *arg)
{
	struct worker *w = arg;
	uint32_t held[64], n = 0;
	uint64_t r = w->tag * 0x9e3779b97f4a7c15ULL + 1;

	for (int it = 0; it < 400; it++) {
		uint32_t want;

		xorshift_step(&r);
		want = 1 + (uint32_t)(r % 8);
		if (n + want <= 64 && (r >> 8) % 2) {
			if (kvrt_alloc_blocks(w->s, want, held + n)) {
				w->errors++;
				continue;
			}
			for (uint32_t i = n; i < n + want; i++)
				*(volatile uint32_t *)kvrt_block_addr(w->s, held[i]) = w->tag;
			n += want;
		} else if (n) {
			uint32_t k = 1 + (uint32_t)((r >> 16) % n);

			for (uint32_t i = 0; i < n; i++)
				if (*(volatile uint32_t *)kvrt_block_addr(w->s, held[i]) != w->tag)
					w->errors++;
			if (kvrt_free_blocks(w->s, k, held + n - k))
				w->errors++;
			n -= k;
		}
	}
	if (n && kvrt_free_blocks(w->s, n, held))
		w->errors++;
	return NULL;
}

TEST(threads_alloc_and_free_concurrently)
{
	struct kvrt_space *a, *b;
	struct kvrt_space_info i;

	REQUIRE(create_and_join("t", 1024 * BB, &a, &b));
	/* Four threads share one handle, two share another. */
	run_six_workers(worker, a, b, 0x1000);
	i = info(a);
	CHECK_EQ(i.owned_blocks, 0);
	CHECK_EQ(i.free_blocks, i.backed_blocks);
	kvrt_space_close(b);
	kvrt_space_close(a);
}

static uint64_t meminfo(const char *key)
{
	char line[256];
	unsigned long long v = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = strlen(key);

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			sscanf(line + n + 1, "%llu", &v);
	if (f)
		fclose(f);
	return v;
}

TEST(memory_report)
{
	struct kvrt_space *s = create("mem", BB, 1024 * BB);
	struct kvrt_mem_info m;
	struct kvrt_space_info i;
	uint64_t huge_free = meminfo("HugePages_Free");

	REQUIRE(s);
	CHECK_EQ(kvrt_space_mem_info(NULL, &m), -EINVAL);
	CHECK_EQ(kvrt_space_mem_info(s, NULL), -EINVAL);
	REQUIRE(kvrt_alloc_blocks(s, 700, ids) == 0);
	REQUIRE(kvrt_space_mem_info(s, &m) == 0);
	i = info(s);
	tap_diag("%s", m.summary);
	CHECK(m.backed_bytes >= i.backed_blocks * BB);
	CHECK(m.locked_bytes <= m.backed_bytes);
	CHECK(m.thp_bytes <= m.backed_bytes);
	CHECK(m.hugetlb_bytes <= m.backed_bytes);
	if (cur == KVRT_BACKEND_KMOD) {
		CHECK_EQ(m.kind, KVRT_MEM_KMOD_POOL);
		CHECK_EQ(m.backed_bytes, i.backed_bytes);
		CHECK_EQ(m.locked_bytes, m.backed_bytes);
		CHECK(!strncmp(m.summary, "kmod: ", 6));
	} else {
		CHECK_EQ(m.kind, KVRT_MEM_EMBEDDED);
		CHECK_EQ(m.chunk_bytes, 2 << 20);
		CHECK_EQ(m.backed_bytes % (2 << 20), 0);
		CHECK(!strncmp(m.summary, "embedded: ", 10));
		/* Everything is locked, or the report says why not. */
		if (m.locked_bytes < m.backed_bytes)
			CHECK(strstr(m.summary, "locked ") && strstr(strstr(m.summary, "locked "), " (mlock"));
		/* No free huge pages: MAP_HUGETLB failed and the report says so. */
		if (huge_free == 0) {
			CHECK_EQ(m.hugetlb_bytes, 0);
			CHECK(m.hugetlb_errno != 0);
			CHECK(strstr(m.summary, "MAP_HUGETLB") != NULL);
		}
		if (m.hugetlb_bytes == 0 && !m.thp_errno)
			CHECK(strstr(m.summary, "thp ") != NULL);
	}
	kvrt_space_close(s);
}

TEST(embedded_options_reported)
{
	struct kvrt *k, *saved = K;
	struct kvrt_space *s;
	struct kvrt_mem_info m;
	const char *p;
	int n = 0;

	if (cur != KVRT_BACKEND_EMBEDDED) {
		tap_skip("embedded only");
		return;
	}
	k = open_backend(cur, KVRT_OPEN_NO_HUGETLB | KVRT_OPEN_NO_THP | KVRT_OPEN_NO_MLOCK, 0);
	REQUIRE(k);
	K = k;
	s = create("opt", BB, 1024 * BB);
	K = saved;
	REQUIRE(s);
	REQUIRE(kvrt_alloc_blocks(s, 600, ids) == 0);
	REQUIRE(kvrt_space_mem_info(s, &m) == 0);
	tap_diag("%s", m.summary);
	CHECK_EQ(m.disabled, KVRT_OPEN_NO_HUGETLB | KVRT_OPEN_NO_THP | KVRT_OPEN_NO_MLOCK);
	CHECK_EQ(m.hugetlb_bytes, 0);
	CHECK_EQ(m.locked_bytes, 0);
	CHECK_EQ(m.backed_bytes, 4 << 20);
	for (p = m.summary; (p = strstr(p, "(not asked for: KVRT_OPEN_NO_")); p++)
		n++;
	CHECK_EQ(n, 3);
	kvrt_close(k);	/* closes s too */
}

/* An unprivileged process with RLIMIT_MEMLOCK 0: the refusal is reported. */
TEST(embedded_mlock_refusal_reported)
{
	pid_t pid;
	int status;

	if (cur != KVRT_BACKEND_EMBEDDED) {
		tap_skip("embedded only");
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 0, 0 };
		struct kvrt_mem_info m;
		struct kvrt_space *s;
		struct kvrt *k;
		int bad = 0;

		if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
			_exit(100);
		if (setrlimit(RLIMIT_MEMLOCK, &rl))
			_exit(101);
		k = open_backend(cur, KVRT_OPEN_NO_HUGETLB, 0);
		if (!k)
			_exit(102);
		K = k;
		s = create("rl", BB, 1024 * BB);
		if (!s || kvrt_alloc_blocks(s, 1, ids) || kvrt_space_mem_info(s, &m))
			_exit(103);
		printf("# child: %s\n", m.summary);
		bad += m.locked_bytes != 0;
		bad += !strstr(m.summary, "locked 0 B (mlock");
		/* Sanitizers interpose mlock (it returns 0, locks nothing). */
		if (m.mlock_errno) {
			bad += m.mlock_errno != EPERM && m.mlock_errno != ENOMEM;
			bad += !strstr(m.summary, "RLIMIT_MEMLOCK 0 B");
		} else {
			bad += !strstr(m.summary, "mlock is interposed");
		}
		fflush(stdout);
		_exit(bad ? 1 : 0);
	}
	REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
}

TEST(embedded_pool_cap)
{
	struct kvrt *k, *saved = K;
	struct kvrt_space *a, *b;
	struct kvrt_pool_info p;
	uint32_t x[8];

	if (cur != KVRT_BACKEND_EMBEDDED) {
		tap_skip("embedded only");
		return;
	}
	k = open_backend(cur, 0, 4 << 20);
	REQUIRE(k);
	K = k;
	a = create("cap-a", 1 << 20, 64 << 20);
	b = create("cap-b", 1 << 20, 64 << 20);
	K = saved;
	REQUIRE(a && b);
	CHECK_EQ(kvrt_alloc_blocks(a, 4, x), 0);	/* two chunks: the whole cap */
	CHECK_EQ(kvrt_alloc_blocks(a, 1, x + 4), -ENOSPC);
	CHECK_EQ(kvrt_alloc_blocks(b, 1, x + 4), -ENOSPC);
	REQUIRE(kvrt_pool_info(k, &p) == 0);
	CHECK_EQ(p.pool_bytes, 4 << 20);
	CHECK_EQ(p.used_bytes, 4 << 20);
	CHECK_EQ(p.free_bytes, 0);
	/* Freeing blocks keeps the backing; closing the space gives it back. */
	CHECK_EQ(kvrt_free_blocks(a, 4, x), 0);
	CHECK_EQ(kvrt_alloc_blocks(b, 1, x), -ENOSPC);
	kvrt_space_close(a);
	REQUIRE(kvrt_pool_info(k, &p) == 0);
	CHECK_EQ(p.used_bytes, 0);
	CHECK_EQ(kvrt_alloc_blocks(b, 4, x), 0);
	kvrt_close(k);
}

/* ---- prefix cache ----------------------------------------------------------------- */

#define H KVRT_HASH_BYTES

/* A distinct hash per (tag, i): SHA-256 of those two words. */
static void hfill(uint8_t h[H], uint32_t tag, uint32_t i)
{
	uint32_t t[2] = { tag, i };

	if (kvrt_hash_block(NULL, t, 2, NULL, 0, h))
		memset(h, 0, H);
}

static struct kvrt_space_stats stats(struct kvrt_space *s)
{
	struct kvrt_space_stats st;

	memset(&st, 0xff, sizeof(st));
	CHECK_EQ(kvrt_space_stats(s, &st), 0);
	return st;
}

/* Every pending event, up to max. */
static int drain(struct kvrt_space *s, struct kvrt_event *ev, uint32_t max)
{
	int n = 0, got = 0;

	while ((uint32_t)n < max && (got = kvrt_read_events(s, ev + n, max - (uint32_t)n)) > 0)
		n += got;
	return got < 0 ? got : n;
}

static bool readable(struct kvrt_space *s)
{
	struct pollfd p = { .fd = kvrt_events_fd(s), .events = POLLIN };

	return p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Accounting closes: free + owned + published + cached + holes == backed. */
static void check_accounting(struct kvrt_space *s)
{
	struct kvrt_space_info i = info(s);
	struct kvrt_space_stats st = stats(s);

	CHECK_EQ(i.free_blocks + i.owned_blocks + st.published_blocks + st.cached_blocks +
		 st.hole_blocks, i.backed_blocks);
}

TEST(prefix_argument_errors)
{
	struct kvrt_space *s = create("pa", BB, 16 * BB);
	uint8_t h[2][H], uuid[16] = { 1 };
	uint32_t id[2] = { 0, 0 }, prio[1] = { 0 };
	struct kvrt_residency_entry re = { 0, 0 };
	struct kvrt_space_stats st;
	struct kvrt_event ev;

	REQUIRE(s);
	hfill(h[0], 1, 0);
	hfill(h[1], 1, 1);
	CHECK_EQ(kvrt_publish(NULL, 1, id, h, NULL, NULL), -EINVAL);
	CHECK_EQ(kvrt_publish(s, 0, id, h, NULL, NULL), -EINVAL);
	CHECK_EQ(kvrt_publish(s, KVRT_MAX_BATCH + 1, id, h, NULL, NULL), -E2BIG);
	CHECK_EQ(kvrt_publish(s, 1, NULL, h, NULL, NULL), -EFAULT);
	CHECK_EQ(kvrt_publish(s, 1, id, NULL, NULL, NULL), -EFAULT);
	REQUIRE(kvrt_alloc_blocks(s, 1, id) == 0);
	prio[0] = KVRT_PRIO_MAX + 1;
	CHECK_EQ(kvrt_publish(s, 1, id, h, prio, NULL), -EINVAL);
	CHECK_EQ(kvrt_lookup(NULL, 1, h, id, NULL), -EINVAL);
	CHECK_EQ(kvrt_lookup(s, 0, h, id, NULL), -EINVAL);
	CHECK_EQ(kvrt_lookup(s, KVRT_MAX_BATCH + 1, h, id, NULL), -E2BIG);
	CHECK_EQ(kvrt_lookup(s, 1, NULL, id, NULL), -EFAULT);
	CHECK_EQ(kvrt_lookup(s, 1, h, NULL, NULL), -EFAULT);
	CHECK_EQ(kvrt_release(NULL, 1, id), -EINVAL);
	CHECK_EQ(kvrt_release(s, 0, id), -EINVAL);
	CHECK_EQ(kvrt_release(s, KVRT_MAX_BATCH + 1, id), -E2BIG);
	CHECK_EQ(kvrt_release(s, 1, NULL), -EFAULT);
	CHECK_EQ(kvrt_space_stats(NULL, &st), -EINVAL);
	CHECK_EQ(kvrt_space_stats(s, NULL), -EINVAL);
	CHECK_EQ(kvrt_space_destroy(NULL, nm("pa")), -EINVAL);
	CHECK_EQ(kvrt_space_destroy(K, NULL), -EINVAL);
	CHECK_EQ(kvrt_space_destroy(K, "a/b"), -EINVAL);
	CHECK_EQ(kvrt_space_destroy(K, nm("no-such-space")), -ENOENT);
	CHECK_EQ(kvrt_residency_add(NULL, uuid, 1, &re), -EINVAL);
	CHECK_EQ(kvrt_residency_add(s, NULL, 1, &re), -EINVAL);
	CHECK_EQ(kvrt_residency_add(s, uuid, KVRT_MAX_BATCH + 1, &re), -E2BIG);
	CHECK_EQ(kvrt_residency_add(s, uuid, 1, NULL), -EFAULT);
	CHECK_EQ(kvrt_residency_del(s, uuid, 0, id), -EINVAL);
	CHECK_EQ(kvrt_residency_del(s, uuid, 1, NULL), -EFAULT);
	CHECK_EQ(kvrt_residency_del(s, NULL, 1, id), -EINVAL);
	CHECK_EQ(kvrt_residency_clear(NULL, uuid), -EINVAL);
	CHECK_EQ(kvrt_residency_clear(s, NULL), -EINVAL);
	CHECK_EQ(kvrt_events_fd(NULL), -EINVAL);
	CHECK_EQ(kvrt_read_events(NULL, &ev, 1), -EINVAL);
	CHECK_EQ(kvrt_read_events(s, &ev, 0), -EINVAL);
	CHECK_EQ(kvrt_read_events(s, NULL, 1), -EFAULT);
	/* Nothing above changed anything. */
	st = stats(s);
	CHECK_EQ(st.inserts + st.hits + st.misses + st.published_blocks + st.readers, 0);
	CHECK_EQ(info(s).my_blocks, 1);
	kvrt_space_close(s);
}

TEST(publish_lookup_release)
{
	struct kvrt_space *a, *b;
	uint8_t h[5][H];
	uint32_t ids[4], orig[4], got[5] = { 9, 9, 9, 9, 9 }, fl[4] = { 7, 7, 7, 7 };
	uint64_t dev[5] = { 9, 9, 9, 9, 9 };
	struct kvrt_space_stats st;
	struct kvrt_space_info i;

	REQUIRE(create_and_join("pl", 64 * BB, &a, &b));
	for (uint32_t n = 0; n < 5; n++)
		hfill(h[n], 2, n);
	REQUIRE(kvrt_alloc_blocks(a, 4, ids) == 0);
	for (int n = 0; n < 4; n++) {
		memset(kvrt_block_addr(a, ids[n]), 0x40 + n, BB);
		orig[n] = ids[n];
	}
	CHECK_EQ(kvrt_publish(a, 4, ids, h, NULL, fl), 0);
	for (int n = 0; n < 4; n++) {
		CHECK_EQ(ids[n], orig[n]);
		CHECK_EQ(fl[n], 0);
	}
	st = stats(a);
	CHECK_EQ(st.inserts, 4);
	CHECK_EQ(st.dedups, 0);
	CHECK_EQ(st.published_blocks, 4);
	CHECK_EQ(st.cached_blocks, 0);
	CHECK_EQ(st.readers, 4);
	CHECK_EQ(st.my_refs, 4);
	CHECK_EQ(stats(b).my_refs, 0);
	CHECK_EQ(st.space_id, info(a).space_id);
	i = info(a);
	CHECK_EQ(i.owned_blocks, 0);
	CHECK_EQ(i.my_blocks, 0);
	/* Published blocks are no longer owned: FREE says EPERM. */
	CHECK_EQ(kvrt_free_blocks(a, 1, ids), -EPERM);
	check_accounting(a);

	/* b finds h0, h1, h2 and stops at the absent h4 (h3 is never reached). */
	{
		uint8_t q[5][H];

		memcpy(q[0], h[0], H);
		memcpy(q[1], h[1], H);
		memcpy(q[2], h[2], H);
		memcpy(q[3], h[4], H);
		memcpy(q[4], h[3], H);
		CHECK_EQ(kvrt_lookup(b, 5, q, got, dev), 3);
	}
	for (int n = 0; n < 3; n++) {
		CHECK_EQ(got[n], orig[n]);
		CHECK_EQ(dev[n], 0);
		CHECK_EQ(*(unsigned char *)kvrt_block_addr(b, got[n]), 0x40 + n);
	}
	CHECK_EQ(got[3], 9);	/* only hits are written */
	CHECK_EQ(got[4], 9);
	CHECK_EQ(dev[3], 9);
	st = stats(b);
	CHECK_EQ(st.hits, 3);
	CHECK_EQ(st.misses, 2);
	CHECK_EQ(st.my_refs, 3);
	CHECK_EQ(st.readers, 7);
	/* A miss on the first hash is success with 0 hits. */
	CHECK_EQ(kvrt_lookup(b, 1, &h[4], got, NULL), 0);
	CHECK_EQ(stats(b).misses, 3);

	/* a drops its references: h3's block has none left and is cached. */
	CHECK_EQ(kvrt_release(a, 4, orig), 0);
	st = stats(a);
	CHECK_EQ(st.my_refs, 0);
	CHECK_EQ(st.readers, 3);
	CHECK_EQ(st.published_blocks, 3);
	CHECK_EQ(st.cached_blocks, 1);
	/* Cached blocks are still found. */
	CHECK_EQ(kvrt_lookup(a, 4, h, got, NULL), 4);
	CHECK_EQ(got[3], orig[3]);
	CHECK_EQ(stats(a).cached_blocks, 0);
	CHECK_EQ(kvrt_release(a, 4, got), 0);
	/* Closing b drops its three references. */
	kvrt_space_close(b);
	st = stats(a);
	CHECK_EQ(st.readers, 0);
	CHECK_EQ(st.published_blocks, 0);
	CHECK_EQ(st.cached_blocks, 4);
	check_accounting(a);
	kvrt_space_close(a);
}

TEST(publish_errors_all_or_nothing)
{
	struct kvrt_space *a, *b;
	uint8_t h[3][H];
	uint32_t mine[3], theirs[1], batch[3], fl[3] = { 5, 5, 5 }, prio[3] = { 1, 2, 3 };
	struct kvrt_space_stats st0;
	struct kvrt_space_info i;
	uint32_t freeid = UINT32_MAX;

	REQUIRE(create_and_join("pe", 1024 * BB, &a, &b));
	for (uint32_t n = 0; n < 3; n++)
		hfill(h[n], 3, n);
	REQUIRE(kvrt_alloc_blocks(a, 3, mine) == 0);
	REQUIRE(kvrt_alloc_blocks(b, 1, theirs) == 0);
	st0 = stats(a);
	i = info(a);
#define TRY(errno_, ...)                                                        \
	do {                                                                    \
		uint32_t _in[3] = { __VA_ARGS__ };                              \
		memcpy(batch, _in, sizeof(batch));                              \
		CHECK_EQ(kvrt_publish(a, 3, batch, h, prio, fl), errno_);        \
		CHECK(!memcmp(batch, _in, sizeof(batch)));                      \
		CHECK_EQ(fl[0], 5);                                             \
	} while (0)
	TRY(-EPERM, mine[0], theirs[0], mine[2]);	/* another participant's block */
	TRY(-EINVAL, mine[0], mine[1], mine[0]);	/* the same id twice */
	TRY(-EINVAL, mine[0], 1023, mine[2]);		/* not backed */
	TRY(-EINVAL, mine[0], UINT32_MAX, mine[2]);
	for (uint32_t id = 0; id < i.backed_blocks && freeid == UINT32_MAX; id++)
		if (id != mine[0] && id != mine[1] && id != mine[2] && id != theirs[0])
			freeid = id;
	REQUIRE(freeid != UINT32_MAX);
	TRY(-EPERM, mine[0], mine[1], freeid);		/* a free block */
	prio[1] = KVRT_PRIO_MAX + 1;
	TRY(-EINVAL, mine[0], mine[1], mine[2]);	/* priority out of range */
	prio[1] = 2;
	/* Nothing happened: the blocks are still owned, nothing published. */
	CHECK_EQ(info(a).my_blocks, 3);
	CHECK_EQ(stats(a).inserts, st0.inserts);
	CHECK_EQ(stats(a).published_blocks, 0);
	CHECK_EQ(stats(a).my_refs, 0);
	/* A published block cannot be published again, even by its publisher. */
	CHECK_EQ(kvrt_publish(a, 1, mine, h, NULL, NULL), 0);
	TRY(-EPERM, mine[1], mine[2], mine[0]);
	CHECK_EQ(info(a).my_blocks, 2);
	CHECK_EQ(stats(a).inserts, 1);
#undef TRY
	/* Releasing more than held: EINVAL, all or nothing. */
	batch[0] = mine[0];
	batch[1] = mine[0];
	CHECK_EQ(kvrt_release(a, 2, batch), -EINVAL);
	CHECK_EQ(stats(a).my_refs, 1);
	CHECK_EQ(kvrt_release(b, 1, batch), -EINVAL);	/* b holds none */
	CHECK_EQ(kvrt_release(a, 1, &mine[1]), -EINVAL);	/* owned, not referenced */
	batch[1] = 1023;
	CHECK_EQ(kvrt_release(a, 2, batch), -EINVAL);
	CHECK_EQ(stats(a).my_refs, 1);
	CHECK_EQ(kvrt_release(a, 1, batch), 0);
	CHECK_EQ(kvrt_release(a, 1, batch), -EINVAL);
	CHECK_EQ(stats(a).cached_blocks, 1);
	check_accounting(a);
	kvrt_space_close(b);
	kvrt_space_close(a);
}

TEST(dedup)
{
	struct kvrt_space *a, *b;
	uint8_t h[3][H], hh[3][H];
	uint32_t x, y[3], fl[3], ya[3];
	struct kvrt_space_stats st;
	uint64_t free_before;

	REQUIRE(create_and_join("dd", 64 * BB, &a, &b));
	for (uint32_t n = 0; n < 3; n++)
		hfill(h[n], 4, n);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	*(uint32_t *)kvrt_block_addr(a, x) = 0xa11ce;
	REQUIRE(kvrt_publish(a, 1, &x, h, NULL, NULL) == 0);
	/* b publishes h0 too (and h1 twice): h0 and the second h1 dedup. */
	REQUIRE(kvrt_alloc_blocks(b, 3, y) == 0);
	memcpy(ya, y, sizeof(y));
	memcpy(hh[0], h[0], H);
	memcpy(hh[1], h[1], H);
	memcpy(hh[2], h[1], H);
	free_before = info(b).free_blocks;
	CHECK_EQ(kvrt_publish(b, 3, y, hh, NULL, fl), 2);
	CHECK_EQ(y[0], x);
	CHECK_EQ(fl[0], KVRT_PUBLISHED_DEDUP);
	CHECK_EQ(y[1], ya[1]);
	CHECK_EQ(fl[1], 0);
	CHECK_EQ(y[2], ya[1]);
	CHECK_EQ(fl[2], KVRT_PUBLISHED_DEDUP);
	/* b's copies of h0 and h1 were freed. */
	CHECK_EQ(info(b).my_blocks, 0);
	CHECK_EQ(info(b).free_blocks, free_before + 2);
	CHECK_EQ(*(uint32_t *)kvrt_block_addr(b, y[0]), 0xa11ce);
	st = stats(b);
	CHECK_EQ(st.inserts, 2);
	CHECK_EQ(st.dedups, 2);
	CHECK_EQ(st.published_blocks, 2);
	CHECK_EQ(st.my_refs, 3);	/* one per entry: x once, ya[1] twice */
	CHECK_EQ(st.readers, 4);
	/* A dedup does not change the priority the block was published with. */
	{
		uint32_t z, p = 0, got;

		REQUIRE(kvrt_alloc_blocks(b, 1, &z) == 0);
		CHECK_EQ(kvrt_publish(b, 1, &z, h, &p, NULL), 1);
		CHECK_EQ(z, x);
		CHECK_EQ(kvrt_lookup(a, 1, h, &got, NULL), 1);
		CHECK_EQ(kvrt_release(a, 1, &got), 0);
		CHECK_EQ(kvrt_release(b, 1, &z), 0);
	}
	CHECK_EQ(kvrt_release(b, 3, y), 0);
	CHECK_EQ(kvrt_release(a, 1, &x), 0);
	st = stats(a);
	CHECK_EQ(st.readers, 0);
	CHECK_EQ(st.cached_blocks, 2);
	check_accounting(a);
	kvrt_space_close(b);
	kvrt_space_close(a);
}

/*
 * Eviction order, worked out by hand: 8 blocks, priorities
 *   index:     0   1   2   3   4   5   6   7
 *   priority: 50  10  50  90  10  50   0  90
 * released in the order 2 0 7 1 4 6 3 5.  Lowest priority first, and within
 * a priority the block released longest ago first:
 *   6 (p0), 1 4 (p10, released 4th and 5th), 2 0 5 (p50: 1st, 2nd, 8th),
 *   7 3 (p90: 3rd, 7th).
 */
TEST(eviction_order_and_events)
{
	static const uint32_t prio[8] = { 50, 10, 50, 90, 10, 50, 0, 90 };
	static const int rel[8] = { 2, 0, 7, 1, 4, 6, 3, 5 };
	struct kvrt_space *a = create("ev", BB, 8 * BB);
	uint8_t h[8][H];
	uint32_t ids[8], got[8], more[8];
	struct kvrt_event ev[16];
	struct kvrt_space_stats st;
	uint64_t seq = 0;
	int n;

	REQUIRE(a);
	for (uint32_t i = 0; i < 8; i++)
		hfill(h[i], 5, i);
	REQUIRE(kvrt_alloc_blocks(a, 8, ids) == 0);
	REQUIRE(kvrt_publish(a, 8, ids, h, prio, NULL) == 0);
	for (int i = 0; i < 8; i++)
		REQUIRE(kvrt_release(a, 1, &ids[rel[i]]) == 0);
	CHECK_EQ(stats(a).cached_blocks, 8);
	CHECK_EQ(drain(a, ev, 16), 0);
	CHECK(!readable(a));

#define EXPECT_EVICTED(e, idx)                                          \
	do {                                                            \
		CHECK_EQ((e).seq, ++seq);                               \
		CHECK_EQ((e).type, KVRT_EVENT_EVICTED);                 \
		CHECK_EQ((e).cause, KVRT_EVICT_QUOTA);                  \
		CHECK_EQ((e).block, ids[idx]);                          \
		CHECK(!memcmp((e).hash, h[idx], H));                    \
	} while (0)
#define EXPECT_PRESSURE(e, n_)                                          \
	do {                                                            \
		CHECK_EQ((e).seq, ++seq);                               \
		CHECK_EQ((e).type, KVRT_EVENT_QUOTA_PRESSURE);          \
		CHECK_EQ((e).cause, KVRT_EVICT_QUOTA);                  \
		CHECK_EQ((e).count, n_);                                \
	} while (0)

	/* The quota is full: 3 blocks come from 6, 1, 4. */
	REQUIRE(kvrt_alloc_blocks(a, 3, got) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(got[i] == ids[6] || got[i] == ids[1] || got[i] == ids[4]);
	CHECK(got[0] != got[1] && got[1] != got[2] && got[0] != got[2]);
	CHECK(readable(a));
	n = drain(a, ev, 16);
	REQUIRE(n == 4);
	EXPECT_EVICTED(ev[0], 6);
	EXPECT_EVICTED(ev[1], 1);
	EXPECT_EVICTED(ev[2], 4);
	EXPECT_PRESSURE(ev[3], 3);
	CHECK(!readable(a));
	st = stats(a);
	CHECK_EQ(st.evictions[KVRT_EVICT_QUOTA], 3);
	CHECK_EQ(st.pressure, 1);
	CHECK_EQ(st.cached_blocks, 5);

	/* Free 3, take 4: one more eviction, block 2. */
	REQUIRE(kvrt_free_blocks(a, 3, got) == 0);
	REQUIRE(kvrt_alloc_blocks(a, 4, got) == 0);
	n = drain(a, ev, 16);
	REQUIRE(n == 2);
	EXPECT_EVICTED(ev[0], 2);
	EXPECT_PRESSURE(ev[1], 1);

	/* 4 cached (0 5 7 3), none free: 5 cannot be had and nothing is evicted. */
	memset(more, 0x5a, sizeof(more));
	CHECK_EQ(kvrt_alloc_blocks(a, 5, more), -ENOSPC);
	CHECK_EQ(more[0], 0x5a5a5a5a);
	CHECK_EQ(stats(a).cached_blocks, 4);
	n = drain(a, ev, 16);
	REQUIRE(n == 1);
	EXPECT_PRESSURE(ev[0], 0);

	/* A referenced block is never evicted: with 0 held, 4 do not fit. */
	CHECK_EQ(kvrt_lookup(a, 1, &h[0], more, NULL), 1);
	CHECK_EQ(more[0], ids[0]);
	CHECK_EQ(kvrt_alloc_blocks(a, 4, more + 1), -ENOSPC);
	CHECK_EQ(drain(a, ev, 16), 1);
	seq++;
	REQUIRE(kvrt_alloc_blocks(a, 3, more + 1) == 0);
	n = drain(a, ev, 16);
	REQUIRE(n == 4);
	EXPECT_EVICTED(ev[0], 5);
	EXPECT_EVICTED(ev[1], 7);
	EXPECT_EVICTED(ev[2], 3);
	EXPECT_PRESSURE(ev[3], 3);
	/* Only block 0 is left; its hash is found, the others are gone. */
	CHECK_EQ(kvrt_lookup(a, 8, h, got, NULL), 1);
	CHECK_EQ(kvrt_lookup(a, 1, &h[5], got, NULL), 0);
	st = stats(a);
	CHECK_EQ(st.evictions[KVRT_EVICT_QUOTA], 7);
	for (int c = 1; c < KVRT_EVICT_CAUSES; c++)
		CHECK_EQ(st.evictions[c], 0);
	CHECK_EQ(st.pressure, 3);
	CHECK_EQ(st.my_refs, 2);
	check_accounting(a);
#undef EXPECT_EVICTED
#undef EXPECT_PRESSURE
	kvrt_space_close(a);
}

/* Who hears of an eviction: those that published or hit the block since it was published. */
TEST(events_go_to_the_interested)
{
	struct kvrt_space *a = create("ei", BB, 4 * BB), *b, *c;
	uint8_t h[4][H];
	uint32_t x[2], y, fill[4];
	struct kvrt_event ev[16];
	int n;

	REQUIRE(a);
	b = join("ei");
	c = join("ei");
	REQUIRE(b && c);
	for (uint32_t i = 0; i < 4; i++)
		hfill(h[i], 6, i);
	/* a publishes two blocks (prio 0, then 1), c hits the second; all release. */
	REQUIRE(kvrt_alloc_blocks(a, 2, x) == 0);
	REQUIRE(kvrt_publish(a, 2, x, h, (uint32_t[]){ 0, 1 }, NULL) == 0);
	REQUIRE(kvrt_lookup(c, 2, h, fill, NULL) == 2);
	REQUIRE(kvrt_release(c, 1, &fill[1]) == 0);
	REQUIRE(kvrt_release(c, 1, &fill[0]) == 0);
	REQUIRE(kvrt_release(a, 2, x) == 0);
	/* b fills the space: 2 free + x[0] (prio 0). */
	REQUIRE(kvrt_alloc_blocks(b, 3, fill) == 0);
	n = drain(a, ev, 16);
	REQUIRE(n == 2);
	CHECK_EQ(ev[0].seq, 1);
	CHECK_EQ(ev[0].type, KVRT_EVENT_EVICTED);
	CHECK_EQ(ev[0].block, x[0]);
	CHECK(!memcmp(ev[0].hash, h[0], H));
	CHECK_EQ(ev[1].seq, 2);
	CHECK_EQ(ev[1].type, KVRT_EVENT_QUOTA_PRESSURE);
	CHECK_EQ(ev[1].count, 1);
	/* c looked x[0] up: told too.  b only hears the pressure. */
	n = drain(c, ev, 16);
	REQUIRE(n == 2);
	CHECK_EQ(ev[0].type, KVRT_EVENT_EVICTED);
	CHECK_EQ(ev[0].block, x[0]);
	CHECK_EQ(ev[1].type, KVRT_EVENT_QUOTA_PRESSURE);
	n = drain(b, ev, 16);
	REQUIRE(n == 1);
	CHECK_EQ(ev[0].seq, 1);
	CHECK_EQ(ev[0].type, KVRT_EVENT_QUOTA_PRESSURE);
	CHECK_EQ(ev[0].cause, KVRT_EVICT_QUOTA);
	CHECK_EQ(ev[0].count, 1);
	/*
	 * b republishes h0 in a block of its own; a and c heard of the old
	 * block's eviction, so the new one is none of their business.
	 */
	REQUIRE(kvrt_publish(b, 1, fill, h, NULL, NULL) == 0);
	REQUIRE(kvrt_release(b, 1, fill) == 0);
	y = fill[0];
	/* Cached now: x[1] (priority 1) and y (50).  4 blocks = 2 free + both. */
	REQUIRE(kvrt_free_blocks(b, 2, fill + 1) == 0);
	REQUIRE(kvrt_alloc_blocks(b, 4, fill) == 0);
	n = drain(a, ev, 16);
	REQUIRE(n == 2);
	CHECK_EQ(ev[0].seq, 3);
	CHECK_EQ(ev[0].type, KVRT_EVENT_EVICTED);
	CHECK_EQ(ev[0].block, x[1]);
	CHECK_EQ(ev[1].type, KVRT_EVENT_QUOTA_PRESSURE);
	CHECK_EQ(ev[1].count, 2);
	n = drain(b, ev, 16);
	REQUIRE(n == 2);
	CHECK_EQ(ev[0].seq, 2);
	CHECK_EQ(ev[0].type, KVRT_EVENT_EVICTED);
	CHECK_EQ(ev[0].block, y);
	CHECK(!memcmp(ev[0].hash, h[0], H));
	CHECK_EQ(ev[1].type, KVRT_EVENT_QUOTA_PRESSURE);
	n = drain(c, ev, 16);
	REQUIRE(n == 2);
	CHECK_EQ(ev[0].block, x[1]);
	CHECK_EQ(ev[1].type, KVRT_EVENT_QUOTA_PRESSURE);
	/* The descriptor: same one each time, readable exactly while events are pending. */
	CHECK(kvrt_events_fd(a) >= 0);
	CHECK_EQ(kvrt_events_fd(a), kvrt_events_fd(a));
	CHECK(!readable(a));
	CHECK_EQ(kvrt_alloc_blocks(a, 1, x), -ENOSPC);
	CHECK(readable(a));
	CHECK(readable(b));
	CHECK_EQ(kvrt_read_events(a, ev, 1), 1);
	CHECK_EQ(ev[0].seq, 5);
	CHECK_EQ(ev[0].count, 0);
	CHECK(!readable(a));
	CHECK_EQ(kvrt_read_events(a, ev, 16), 0);
	kvrt_space_close(c);
	kvrt_space_close(b);
	kvrt_space_close(a);
}

static uint32_t queue_max(void)
{
	unsigned long v = 65536;
	FILE *f;

	if (cur != KVRT_BACKEND_KMOD)
		return 65536;
	f = fopen("/sys/class/misc/kvpool/event_queue_max", "r");
	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 65536;
		fclose(f);
	}
	return (uint32_t)v;
}

/* A full queue drops events and says so with one OVERFLOW: seqs stay exact. */
TEST(event_queue_overflow)
{
	struct kvrt_space *a = create("eo", BB, 1 * BB);
	uint32_t q = queue_max(), x, y;
	struct kvrt_event *ev;
	int n, bad = 0;

	REQUIRE(a);
	ev = calloc((size_t)q + 16, sizeof(*ev));
	REQUIRE(ev);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	/* Every failed allocation is one QUOTA_PRESSURE: q + 5 of them. */
	for (uint32_t i = 0; i < q + 5; i++)
		bad += kvrt_alloc_blocks(a, 1, &y) != -ENOSPC;
	CHECK_EQ(bad, 0);
	CHECK(readable(a));
	n = drain(a, ev, q + 16);
	REQUIRE(n == (int)q + 1);
	for (uint32_t i = 0; i < q; i++)
		bad += ev[i].seq != i + 1 || ev[i].type != KVRT_EVENT_QUOTA_PRESSURE ||
		       ev[i].count != 0 || ev[i].cause != KVRT_EVICT_QUOTA;
	CHECK_EQ(bad, 0);
	CHECK_EQ(ev[q].type, KVRT_EVENT_OVERFLOW);
	CHECK_EQ(ev[q].count, 5);
	CHECK_EQ(ev[q].seq, (uint64_t)q + 5 + 1);
	CHECK(!readable(a));
	CHECK_EQ(kvrt_alloc_blocks(a, 1, &y), -ENOSPC);
	CHECK_EQ(drain(a, ev, 16), 1);
	CHECK_EQ(ev[0].seq, (uint64_t)q + 7);
	free(ev);
	kvrt_space_close(a);
}

static const uint8_t U1[16] = { 0xa1, 1 }, U2[16] = { 0xa2, 2 }, U3[16] = { 0xa3, 3 };

TEST(residency)
{
	struct kvrt_space *a, *b;
	uint8_t h[4][H];
	uint32_t x[3], got[2], z;
	uint64_t dev[2];
	struct kvrt_space_info i;

	REQUIRE(create_and_join("rs", 16 * BB, &a, &b));
	for (uint32_t n = 0; n < 4; n++)
		hfill(h[n], 7, n);
	REQUIRE(kvrt_alloc_blocks(a, 3, x) == 0);
	i = info(a);
	/* Slots in order of first use; count 0 only registers; a failed add does not. */
	CHECK_EQ(kvrt_residency_add(a, U1, 2,
				    (struct kvrt_residency_entry[]){ { x[0], 100 }, { x[1], 101 } }),
		 0);
	CHECK_EQ(kvrt_residency_add(b, U3, 1, &(struct kvrt_residency_entry){ x[0], 1 }), -EPERM);
	CHECK_EQ(kvrt_residency_add(a, U3, 2,
				    (struct kvrt_residency_entry[]){ { x[0], 1 },
								     { (uint32_t)i.backed_blocks, 2 } }),
		 -EINVAL);
	CHECK_EQ(kvrt_residency_del(a, U3, 1, x), -ENOENT);
	CHECK_EQ(kvrt_residency_add(a, U2, 0, NULL), 1);
	CHECK_EQ(kvrt_residency_add(a, U1, 0, NULL), 0);
	/* Updating a record; then the errors, which change nothing. */
	CHECK_EQ(kvrt_residency_add(a, U1, 1, &(struct kvrt_residency_entry){ x[0], 200 }), 0);
	CHECK_EQ(kvrt_residency_add(a, U2, 2,
				    (struct kvrt_residency_entry[]){ { x[0], 1 },
								     { (uint32_t)i.backed_blocks, 2 } }),
		 -EINVAL);
	CHECK_EQ(kvrt_residency_add(b, U2, 1, &(struct kvrt_residency_entry){ x[0], 1 }), -EPERM);
	CHECK_EQ(kvrt_residency_del(a, U3, 1, x), -ENOENT);		/* unknown device */
	CHECK_EQ(kvrt_residency_del(a, U2, 1, x), -ENOENT);		/* no such record */
	CHECK_EQ(kvrt_residency_del(a, U1, 2, (uint32_t[]){ x[0], x[2] }), -ENOENT);
	CHECK_EQ(kvrt_residency_del(a, U1, 2, (uint32_t[]){ x[0], (uint32_t)i.backed_blocks }),
		 -EINVAL);
	CHECK_EQ(kvrt_residency_clear(a, U3), -ENOENT);

	/* a publishes x[0] and x[1]: b's lookup sees U1 on both. */
	REQUIRE(kvrt_publish(a, 2, x, h, NULL, NULL) == 0);
	CHECK_EQ(kvrt_lookup(b, 2, h, got, dev), 2);
	CHECK_EQ(dev[0], 1ULL << 0);
	CHECK_EQ(dev[1], 1ULL << 0);
	/* b holds references now, so it may add records too: U3 gets slot 2. */
	CHECK_EQ(kvrt_residency_add(b, U3, 1, &(struct kvrt_residency_entry){ x[0], 7 }), 2);
	CHECK_EQ(kvrt_residency_add(a, U2, 1, &(struct kvrt_residency_entry){ x[0], 8 }), 1);
	CHECK_EQ(kvrt_lookup(a, 2, h, got, dev), 2);
	CHECK_EQ(dev[0], 0x7);
	CHECK_EQ(dev[1], 0x1);
	CHECK_EQ(kvrt_release(a, 2, got), 0);
	/* del (listed twice is fine) and clear: only the caller's records go. */
	CHECK_EQ(kvrt_residency_del(a, U1, 2, (uint32_t[]){ x[1], x[1] }), 0);
	CHECK_EQ(kvrt_residency_clear(a, U2), 1);
	CHECK_EQ(kvrt_lookup(a, 2, h, got, dev), 2);
	CHECK_EQ(dev[0], 0x5);
	CHECK_EQ(dev[1], 0x0);
	CHECK_EQ(kvrt_release(a, 2, got), 0);
	/* Released and cached, the records stay; b's go when b closes. */
	CHECK_EQ(kvrt_release(a, 2, x), 0);
	CHECK_EQ(kvrt_release(b, 2, x), 0);
	CHECK_EQ(stats(a).cached_blocks, 2);
	CHECK_EQ(kvrt_lookup(a, 1, h, got, dev), 1);
	CHECK_EQ(dev[0], 0x5);
	CHECK_EQ(kvrt_release(a, 1, got), 0);
	kvrt_space_close(b);
	CHECK_EQ(kvrt_lookup(a, 1, h, got, dev), 1);
	CHECK_EQ(dev[0], 0x1);
	CHECK_EQ(kvrt_release(a, 1, got), 0);

	/* A record on a block that is freed goes with it (the id comes back, bare). */
	CHECK_EQ(kvrt_residency_add(a, U1, 1, &(struct kvrt_residency_entry){ x[2], 9 }), 0);
	REQUIRE(kvrt_free_blocks(a, 1, &x[2]) == 0);
	REQUIRE(kvrt_alloc_blocks(a, 1, &z) == 0);
	CHECK_EQ(z, x[2]);	/* LIFO: the block just freed */
	CHECK_EQ(kvrt_residency_del(a, U1, 1, &z), -ENOENT);
	/* ... and with a dedup, which frees the caller's block. */
	CHECK_EQ(kvrt_residency_add(a, U1, 1, &(struct kvrt_residency_entry){ z, 9 }), 0);
	CHECK_EQ(kvrt_publish(a, 1, &z, h, NULL, NULL), 1);
	CHECK_EQ(z, x[0]);
	REQUIRE(kvrt_alloc_blocks(a, 1, &z) == 0);
	CHECK_EQ(z, x[2]);
	CHECK_EQ(kvrt_residency_del(a, U1, 1, &z), -ENOENT);
	REQUIRE(kvrt_publish(a, 1, &z, &h[2], NULL, NULL) == 0);
	CHECK_EQ(kvrt_lookup(a, 1, &h[2], got, dev), 1);
	CHECK_EQ(dev[0], 0);
	kvrt_space_close(a);
}

TEST(residency_device_table_full)
{
	struct kvrt_space *a = create("rd", BB, 16 * BB);
	uint8_t u[KVRT_MAX_DEVICES + 1][16];
	uint32_t x;
	int bad = 0;

	REQUIRE(a);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	memset(u, 0, sizeof(u));
	for (int d = 0; d <= KVRT_MAX_DEVICES; d++) {
		u[d][0] = 0xd0;
		u[d][15] = (uint8_t)d;
	}
	for (int d = 0; d < KVRT_MAX_DEVICES; d++)
		bad += kvrt_residency_add(a, u[d], 0, NULL) != d;
	CHECK_EQ(bad, 0);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES], 0, NULL), -ENOSPC);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES], 1,
				    &(struct kvrt_residency_entry){ x, 0 }), -ENOSPC);
	/* The entries are checked before the table. */
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES], 1,
				    &(struct kvrt_residency_entry){ (uint32_t)info(a).backed_blocks,
								    0 }), -EINVAL);
	CHECK_EQ(kvrt_residency_add(a, u[63], 1, &(struct kvrt_residency_entry){ x, 0 }), 63);
	CHECK_EQ(kvrt_residency_del(a, u[63], 1, &x), 63);
	CHECK_EQ(kvrt_residency_clear(a, u[KVRT_MAX_DEVICES]), -ENOENT);
	kvrt_space_close(a);
}

/*
 * Issue 14, finding 13: slots were never given back.  A slot is held
 * while a handle has the device registered (a successful add); clear and
 * close let go, and a slot nobody holds takes the next new device.  The
 * same on both backends.
 */
TEST(residency_slots_freed)
{
	struct kvrt_space *a, *b;
	uint8_t u[KVRT_MAX_DEVICES + 8][16];
	struct kvrt_pool_info p;
	uint32_t x;
	int bad = 0;

	REQUIRE(kvrt_pool_info(K, &p) == 0);
	if (p.api_version < 4) {
		tap_skip("a module before API 4 never frees slots");
		return;
	}
	a = create("rf", BB, 16 * BB);
	REQUIRE(a);
	b = join("rf");
	REQUIRE(b);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	memset(u, 0, sizeof(u));
	for (int d = 0; d < KVRT_MAX_DEVICES + 8; d++) {
		u[d][0] = 0xf5;
		u[d][15] = (uint8_t)d;
	}
	/* b fills the table. */
	for (int d = 0; d < KVRT_MAX_DEVICES; d++)
		bad += kvrt_residency_add(b, u[d], 0, NULL) != d;
	CHECK_EQ(bad, 0);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES], 0, NULL), -ENOSPC);
	/* b clears device 5: its slot takes a's new device. */
	CHECK_EQ(kvrt_residency_clear(b, u[5]), 5);
	CHECK_EQ(kvrt_residency_clear(b, u[5]), -ENOENT);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES], 1,
				    &(struct kvrt_residency_entry){ x, 3 }), 5);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES + 1], 0, NULL), -ENOSPC);
	/* A device both hold stays while either does. */
	CHECK_EQ(kvrt_residency_add(a, u[7], 0, NULL), 7);
	CHECK_EQ(kvrt_residency_clear(b, u[7]), 7);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES + 1], 0, NULL), -ENOSPC);
	/* b closes: every slot but a's (5 and 7) is free again, lowest first. */
	kvrt_space_close(b);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES + 1], 0, NULL), 0);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES + 2], 0, NULL), 1);
	CHECK_EQ(kvrt_residency_add(a, u[KVRT_MAX_DEVICES], 0, NULL), 5);
	CHECK_EQ(kvrt_residency_add(a, u[7], 0, NULL), 7);
	CHECK_EQ(kvrt_residency_add(a, u[0], 0, NULL), 2);
	/* A failed add of a new device takes no slot. */
	CHECK_EQ(kvrt_residency_add(a, u[1], 1,
				    &(struct kvrt_residency_entry){ (uint32_t)info(a).backed_blocks,
								    0 }), -EINVAL);
	CHECK_EQ(kvrt_residency_add(a, u[2], 0, NULL), 3);
	/* a's record on device 64 keeps slot 5 until a clears it. */
	CHECK_EQ(kvrt_residency_clear(a, u[KVRT_MAX_DEVICES]), 5);
	CHECK_EQ(kvrt_residency_add(a, u[3], 0, NULL), 4);
	CHECK_EQ(kvrt_residency_add(a, u[4], 0, NULL), 5);
	kvrt_space_close(a);
}

/*
 * In a child that dropped to uid/gid 65534: 0 if kvrt_space_destroy gave
 * want.  The module fixes a descriptor's rights at open, so with kmod the
 * child opens its own handle after the drop (group 0 reaches the test VM's
 * root:root device); embedded spaces live in K, which checks the euid.
 */
static int child_destroy(const char *tag, int want)
{
	bool kmod = cur == KVRT_BACKEND_KMOD;
	pid_t pid;
	int status;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct kvrt *k = K;
		int ret;

		if (setgroups(kmod, (gid_t[]){ 0 }) || setgid(65534) || setuid(65534))
			_exit(100);
		if (kmod) {
			if (access(device ? device : "/dev/kvpool", R_OK | W_OK)) {
				printf("# child: the device is closed to this user\n");
				fflush(stdout);
				_exit(0);
			}
			k = open_backend(cur, 0, 0);
			if (!k)
				_exit(101);
		}
		ret = kvrt_space_destroy(k, nm(tag));
		if (ret != want) {
			printf("# child: destroy %s gave %d, want %d\n", nm(tag), ret, want);
			fflush(stdout);
			_exit(1);
		}
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(persistent_space)
{
	struct kvrt_space_opts o = create_opts("ps", BB, 32 * BB);
	struct kvrt_space *a, *b, *n2;
	uint8_t h[3][H];
	uint32_t ids[3], got[3];
	struct kvrt_space_stats st;
	struct kvrt_event ev[4];
	uint32_t old_id;

	for (uint32_t i = 0; i < 3; i++)
		hfill(h[i], 8, i);
	o.flags |= KVRT_SPACE_PERSIST | KVRT_SPACE_EXCL;
	REQUIRE(kvrt_space_open(K, &o, &a) == 0);
	old_id = info(a).space_id;
	REQUIRE(kvrt_alloc_blocks(a, 3, ids) == 0);
	for (int i = 0; i < 3; i++)
		memset(kvrt_block_addr(a, ids[i]), 0x70 + i, BB);
	REQUIRE(kvrt_publish(a, 2, ids, h, NULL, NULL) == 0);
	/* The last close: references and owned blocks go, the space stays. */
	kvrt_space_close(a);
	a = join("ps");
	REQUIRE(a);
	CHECK_EQ(info(a).space_id, old_id);
	CHECK_EQ(info(a).created, 0);
	CHECK_EQ(info(a).owned_blocks, 0);
	st = stats(a);
	CHECK_EQ(st.cached_blocks, 2);
	CHECK_EQ(st.readers, 0);
	CHECK_EQ(kvrt_lookup(a, 3, h, got, NULL), 2);
	CHECK_EQ(got[0], ids[0]);
	CHECK_EQ(got[1], ids[1]);
	CHECK_EQ(*(unsigned char *)kvrt_block_addr(a, got[0]), 0x70);
	CHECK_EQ(*(unsigned char *)kvrt_block_addr(a, got[1]) , 0x71);
	/* Persist on a join is ignored like the other create fields. */
	o.flags = KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST;
	REQUIRE(kvrt_space_open(K, &o, &b) == 0);
	CHECK_EQ(info(b).created, 0);
	/* Not the owner: EPERM (root can play another user). */
	if (geteuid() == 0)
		CHECK_EQ(child_destroy("ps", -EPERM), 0);
	/* Destroy while joined: the name goes now, the space when a and b close. */
	CHECK_EQ(kvrt_space_destroy(K, nm("ps")), 0);
	CHECK_EQ(drain(a, ev, 4), 1);
	CHECK_EQ(ev[0].type, KVRT_EVENT_SPACE_DESTROYED);
	CHECK_EQ(ev[0].seq, 1);
	CHECK_EQ(drain(b, ev, 4), 1);
	CHECK_EQ(ev[0].type, KVRT_EVENT_SPACE_DESTROYED);
	CHECK(join("ps") == NULL);
	CHECK_EQ(kvrt_space_destroy(K, nm("ps")), -ENOENT);
	o = create_opts("ps", 2 * BB, 8 * BB);
	o.flags |= KVRT_SPACE_EXCL;
	REQUIRE(kvrt_space_open(K, &o, &n2) == 0);
	CHECK_EQ(info(n2).created, 1);
	CHECK(info(n2).space_id != old_id);
	CHECK_EQ(kvrt_lookup(n2, 1, h, got + 2, NULL), 0);
	/* The unlinked space still works for those joined. */
	CHECK_EQ(kvrt_alloc_blocks(a, 1, got + 2), 0);
	CHECK_EQ(kvrt_lookup(b, 1, h, got + 2, NULL), 1);
	kvrt_space_close(b);
	kvrt_space_close(a);
	/* It is gone (not persistent any more); the new one is not persistent either. */
	kvrt_space_close(n2);
	CHECK(join("ps") == NULL);

	/* A persistent space that nobody holds goes at once. */
	o = create_opts("ps2", BB, 8 * BB);
	o.flags |= KVRT_SPACE_PERSIST;
	REQUIRE(kvrt_space_open(K, &o, &a) == 0);
	kvrt_space_close(a);
	a = join("ps2");
	CHECK(a != NULL);
	kvrt_space_close(a);
	CHECK_EQ(kvrt_space_destroy(K, nm("ps2")), 0);
	CHECK(join("ps2") == NULL);
	/* A plain space can be destroyed too while it is joined. */
	a = create("ps3", BB, 8 * BB);
	REQUIRE(a);
	CHECK_EQ(kvrt_space_destroy(K, nm("ps3")), 0);
	CHECK(join("ps3") == NULL);
	kvrt_space_close(a);
}

/*
 * Hashing and the cache together: two prompts that share their first 70
 * tokens (blocks of 16) share exactly 4 full blocks; the second prompt's
 * lookup hits those 4 and no more, and publishing it dedups exactly them.
 */
TEST(hashing_integration)
{
	enum { BT = 16, LA = 100, LB = 90, SHARED = 70 };
	struct kvrt_space *a, *b;
	uint32_t ta[LA], tb[LB], ia[LA / BT], ib[LB / BT], got[LB / BT], fl[LB / BT];
	uint8_t ha[LA / BT][H], hb[LB / BT][H], hx[LB / BT][H];
	uint64_t xi[LB / BT + 1];
	int na, nb;

	REQUIRE(create_and_join("hi", 64 * BB, &a, &b));
	for (int i = 0; i < LA; i++)
		ta[i] = 1000 + (uint32_t)i * 7;
	for (int i = 0; i < LB; i++)
		tb[i] = i < SHARED ? ta[i] : 50000 + (uint32_t)i;
	na = kvrt_hash_prompt(NULL, ta, LA, BT, NULL, NULL, ha, LA / BT);
	nb = kvrt_hash_prompt(NULL, tb, LB, BT, NULL, NULL, hb, LB / BT);
	REQUIRE(na == 6 && nb == 5);
	REQUIRE(kvrt_alloc_blocks(a, 6, ia) == 0);
	REQUIRE(kvrt_publish(a, 6, ia, ha, NULL, NULL) == 0);
	CHECK_EQ(kvrt_lookup(b, 5, hb, got, NULL), SHARED / BT);
	for (int i = 0; i < SHARED / BT; i++)
		CHECK_EQ(got[i], ia[i]);
	CHECK_EQ(kvrt_release(b, SHARED / BT, got), 0);
	REQUIRE(kvrt_alloc_blocks(b, 5, ib) == 0);
	CHECK_EQ(kvrt_publish(b, 5, ib, hb, NULL, fl), SHARED / BT);
	for (int i = 0; i < 5; i++) {
		CHECK_EQ(fl[i], i < SHARED / BT ? KVRT_PUBLISHED_DEDUP : 0);
		if (i < SHARED / BT)
			CHECK_EQ(ib[i], ia[i]);
	}
	/* The same tokens with an extra key (an adapter id) share nothing. */
	for (int i = 0; i <= LB / BT; i++)
		xi[i] = (uint64_t)i * 6;
	nb = kvrt_hash_prompt(NULL, tb, LB, BT, "lora:7lora:7lora:7lora:7lora:7", xi, hx, LB / BT);
	REQUIRE(nb == 5);
	CHECK_EQ(kvrt_lookup(b, 5, hx, got, NULL), 0);
	/* Continuing a prompt from its last hash gives the same chain. */
	nb = kvrt_hash_prompt(hb[1], tb + 2 * BT, LB - 2 * BT, BT, NULL, NULL, hx, 3);
	REQUIRE(nb == 3);
	CHECK(!memcmp(hx[0], hb[2], H) && !memcmp(hx[2], hb[4], H));
	CHECK_EQ(kvrt_lookup(b, 3, hx, got, NULL), 3);
	CHECK_EQ(got[0], ia[2]);
	CHECK_EQ(got[2], ib[4]);
	kvrt_space_close(b);
	kvrt_space_close(a);
}

/* Publish blocks under a small set of hashes, look prefixes up, release. */
static void *pworker(void *arg)
{
	struct worker *w = arg;
	uint64_t r = w->tag * 0x9e3779b97f4a7c15ULL + 1;
	uint8_t h[8][H];
	uint32_t held[64], n = 0;

	for (uint32_t i = 0; i < 8; i++)
		hfill(h[i], 9, i);
	for (int it = 0; it < 300; it++) {
		uint32_t id, k;
		int ret;

		xorshift_step(&r);
		k = (uint32_t)(r % 8);
		switch ((r >> 8) % 3) {
		case 0:
			if (n == 64 || kvrt_alloc_blocks(w->s, 1, &id)) {
				w->errors += n < 64;
				break;
			}
			*(volatile uint32_t *)kvrt_block_addr(w->s, id) = k;
			if (kvrt_publish(w->s, 1, &id, &h[k], NULL, NULL) < 0) {
				w->errors++;
				break;
			}
			held[n++] = id;
			break;
		case 1:
			if (n + k + 1 > 64)
				break;
			ret = kvrt_lookup(w->s, k + 1, h, held + n, NULL);
			if (ret < 0) {
				w->errors++;
				break;
			}
			for (int i = 0; i < ret; i++)
				if (*(volatile uint32_t *)kvrt_block_addr(w->s, held[n + i]) !=
				    (uint32_t)i)
					w->errors++;
			n += (uint32_t)ret;
			break;
		default:
			if (n && kvrt_release(w->s, n, held))
				w->errors++;
			n = 0;
			break;
		}
	}
	if (n && kvrt_release(w->s, n, held))
		w->errors++;
	return NULL;
}

TEST(threads_publish_lookup_release)
{
	struct kvrt_space *a, *b;
	struct kvrt_space_stats st;
	struct kvrt_event ev[64];

	REQUIRE(create_and_join("pt", 1024 * BB, &a, &b));
	run_six_workers(pworker, a, b, 0x2000);
	st = stats(a);
	CHECK_EQ(st.readers, 0);
	CHECK_EQ(st.my_refs, 0);
	CHECK_EQ(st.published_blocks, 0);
	CHECK(st.cached_blocks <= 8);
	CHECK_EQ(st.inserts - st.evictions[KVRT_EVICT_QUOTA], st.cached_blocks);
	CHECK_EQ(info(a).owned_blocks, 0);
	check_accounting(a);
	/* Nothing was evicted (1024 blocks), so no events. */
	CHECK_EQ(drain(a, ev, 64), 0);
	kvrt_space_close(b);
	kvrt_space_close(a);
}

/* ---- runner ---------------------------------------------------------------------- */

#define RUNB(fn)                                                        \
	do {                                                            \
		char _n[96];                                            \
		snprintf(_n, sizeof(_n), "%s: %s", cur_name, #fn);      \
		tap_run(_n, fn);                                        \
	} while (0)

/*
 * The SSD tier on this backend: blocks written with O_DIRECT from the
 * space's mapping by one handle, then read by another handle of the same
 * space into new blocks (on kmod: the module's pages) and published.  The
 * directory: $KVRT_TIER_DIR (in the test VM, selftests/vm/tierfs.sh's ext4,
 * where O_DIRECT takes the module's pages through get_user_pages), else
 * /var/tmp, else /tmp.  A file system that refuses O_DIRECT (tmpfs before
 * Linux 6.6) is reported as a SKIP naming it.
 */
TEST(ssd_tier_on_the_mapping)
{
	const char *base = getenv("KVRT_TIER_DIR");
	struct kvrt_tier_ssd_opts o = { .capacity_bytes = 16 * BB };
	struct kvrt_space *a = create("tier", BB, 64 * BB), *b = NULL;
	struct kvrt_tier *ta = NULL, *tb = NULL;
	char dir[512], cmd[600];
	uint32_t got_ids[8];
	uint8_t h[8][H], w[8];
	int n, ret, got;

	REQUIRE(a);
	if (!base || !*base)
		base = access("/var/tmp", W_OK) ? "/tmp" : "/var/tmp";
	snprintf(dir, sizeof(dir), "%s/kvrt-test-tier-%d-%s", base, test_pid, cur_name);
	o.dir = dir;
	ret = kvrt_tier_open_ssd(a, &o, &ta);
	if (ret == -EINVAL || ret == -ENOSYS) {
		tap_skip(ret == -EINVAL ? "the file system refuses O_DIRECT (tmpfs before 6.6)" :
			 "io_uring is not available");
		goto out;
	}
	REQUIRE(ret == 0);
	REQUIRE(kvrt_alloc_blocks(a, 8, ids) == 0);
	for (n = 0; n < 8; n++) {
		hfill(h[n], 40, (uint32_t)n);
		memset(kvrt_block_addr(a, ids[n]), 0x60 + n, BB);
	}
	CHECK_EQ(kvrt_tier_store(a, 8, ids, (const uint8_t (*)[H])h, NULL), 8);
	CHECK_EQ(kvrt_free_blocks(a, 8, ids), 0);
	kvrt_tier_close(ta);
	/* Another handle of the space, the tier its own now. */
	b = join("tier");
	REQUIRE(b);
	REQUIRE(kvrt_tier_open_ssd(b, &o, &tb) == 0);
	got = kvrt_lookup_tiers(b, 8, (const uint8_t (*)[H])h, got_ids, w);
	CHECK_EQ(got, 8);
	for (n = 0; n < got; n++) {
		uint8_t *p = kvrt_block_addr(b, got_ids[n]), *q = kvrt_block_addr(a, got_ids[n]);

		CHECKF(w[n] == 1 && p[0] == 0x60 + n && p[BB - 1] == 0x60 + n && !memcmp(p, q, BB),
		       "block %d from %u: %#x..%#x", n, w[n], p[0], p[BB - 1]);
	}
	if (got == 8) {
		/* Published by b: a, the other participant, finds them in the pool. */
		CHECK_EQ(kvrt_lookup(a, 8, (const uint8_t (*)[H])h, ids, NULL), 8);
		CHECK_EQ(kvrt_release(a, 8, ids), 0);
	}
	if (got > 0)
		CHECK_EQ(kvrt_release(b, (uint32_t)got, got_ids), 0);
out:
	if (b)
		kvrt_space_close(b);
	kvrt_space_close(a);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		tap_diag("could not remove %s", dir);
}

static void suite(void)
{
	struct kvrt_pool_info p;
	uint64_t features = 0;

	if (!kvrt_pool_info(K, &p))
		features = p.features;
	tap_diag("%s", kvrt_backend_info(K));
	RUNB(pool_info);
	RUNB(space_open_errors);
	RUNB(join_rules);
	RUNB(permissions);
	RUNB(space_name_squatting);
	RUNB(alloc_free_argument_errors);
	RUNB(alloc_to_the_quota_all_or_nothing);
	RUNB(free_errors_all_or_nothing);
	RUNB(mapping_is_shared_between_participants);
	RUNB(fresh_space_memory_is_zero);
	RUNB(two_spaces_on_one_handle);
	RUNB(numa_policies);
	RUNB(threads_alloc_and_free_concurrently);
	RUNB(memory_report);
	if (!(features & KVRT_FEAT_PREFIX)) {
		/* An API 1 module: the calls say so, the rest is not there to test. */
		struct kvrt_space *s = create("np", BB, 4 * BB);
		uint32_t id = 0;
		char name[64];

		snprintf(name, sizeof(name), "%s: prefix cache", cur_name);
		tap_result_skip(name, "the module has no KVRT_FEAT_PREFIX (publish gives %d)",
				kvrt_publish(s, 1, &id, (const uint8_t (*)[KVRT_HASH_BYTES])ids,
					     NULL, NULL));
		kvrt_space_close(s);
	} else {
		RUNB(prefix_argument_errors);
		RUNB(publish_lookup_release);
		RUNB(publish_errors_all_or_nothing);
		RUNB(dedup);
		RUNB(eviction_order_and_events);
		RUNB(events_go_to_the_interested);
		RUNB(event_queue_overflow);
		RUNB(residency);
		RUNB(residency_device_table_full);
		RUNB(residency_slots_freed);
		RUNB(persistent_space);
		RUNB(hashing_integration);
		RUNB(threads_publish_lookup_release);
		RUNB(ssd_tier_on_the_mapping);
	}
	if (cur != KVRT_BACKEND_EMBEDDED)
		return;	/* the rest is about the embedded backend's own memory */
	RUNB(embedded_options_reported);
	RUNB(embedded_mlock_refusal_reported);
	RUNB(embedded_pool_cap);
}

int main(void)
{
	const char *env = getenv("KVRT_BACKEND");
	bool want_emb = !env || !*env || !strcmp(env, "embedded") || !strcmp(env, "auto");
	bool want_kmod = !env || !*env || !strcmp(env, "kmod") || !strcmp(env, "auto");
	bool forced = env && !strcmp(env, "kmod");
	static char why[400];

	device = getenv("KVRT_DEVICE");
	test_pid = (int)getpid();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!want_emb && !want_kmod) {
		tap_result(false, "KVRT_BACKEND=%s: expected kmod, embedded or unset", env);
		return tap_done("test_backend");
	}
	if (want_emb) {
		cur = KVRT_BACKEND_EMBEDDED;
		cur_name = "embedded";
		K = open_backend(cur, 0, 0);
		if (!K) {
			tap_result(false, "embedded backend does not open");
			return tap_done("test_backend");
		}
		suite();
		kvrt_close(K);
	}
	if (want_kmod) {
		struct kvrt_open_opts o = { .backend = KVRT_BACKEND_KMOD, .device = device };
		int ret;

		cur = KVRT_BACKEND_KMOD;
		cur_name = "kmod";
		K = NULL;
		ret = kvrt_open(&K, &o);
		if (ret) {
			snprintf(why, sizeof(why), "%s: %s", device ? device : "/dev/kvpool",
				 strerror(-ret));
			if (forced)
				tap_result(false, "kmod backend forced, but %s", why);
			else
				tap_result_skip("kmod backend", "%s", why);
		} else {
			suite();
			kvrt_close(K);
		}
	}
	return tap_done("test_backend");
}
