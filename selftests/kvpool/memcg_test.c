// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_test: kernel memory that a tenant makes the module allocate is
 * charged to that tenant's memory cgroup (issue 14 finding 5).
 *
 * Event queues are filled by whoever evicts (here: root writing sysfs
 * drop_cached from the root cgroup), so an uncharged queue let 64 fds with
 * failing ALLOCs add 260 MiB of slab that no cgroup saw.  A child in its
 * own cgroup v2 group opens NR_FDS fds that all hear of every block's
 * eviction; the group's memory.current must grow by at least the queued
 * records, and fall again when the fds close.  The growth is measured
 * from before the lookups: an fd's interest in a block (what makes it
 * hear of the eviction) is charged to the group too, and goes with the
 * eviction that turns it into a record.
 */
#include "kvpool_prefix_util.h"

#include <sys/mount.h>

#define CG_ROOT		"/sys/fs/cgroup"
#define BLOCK		(4 * KiB)
#define NR_BLOCKS	1024u
#define NR_FDS		32

static long long cg_read_u64(const char *dir, const char *file)
{
	char path[256], buf[64];
	int n;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	n = px_read_all(path, buf, sizeof(buf));
	if (n <= 0)
		return -1;
	return strtoll(buf, NULL, 10);
}

/* cgroup v2 with the memory controller for children of the root; 0 or -errno. */
static int cg_setup(void)
{
	if (access(CG_ROOT "/cgroup.controllers", F_OK) &&
	    mount("cgroup2", CG_ROOT, "cgroup2", 0, NULL))
		return -errno;
	return kv_write_path(CG_ROOT "/cgroup.subtree_control", "+memory");
}

/*
 * Child: move into cg, open NR_FDS fds on name and say so on ready; after
 * a byte on go, look up every block (so each fd hears of its eviction)
 * and release it; then say so on ready and wait for a byte on go before
 * closing everything.
 */
static void child_run(const char *cg, const char *name, int ready, int go)
{
	static __u32 ids[NR_BLOCKS];
	char path[256];
	int fds[NR_FDS], i;
	__u32 hits;
	char c;

	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	if (kv_write_path(path, "0"))
		_exit(10);
	for (i = 0; i < NR_FDS; i++) {
		fds[i] = kv_open_join(name, NULL);
		if (fds[i] < 0)
			_exit(11);
	}
	if (write(ready, "o", 1) != 1 || read(go, &c, 1) != 1)
		_exit(15);
	for (i = 0; i < NR_FDS; i++) {
		if (kv_lookup_seq(fds[i], 0x3e3c, 0, NR_BLOCKS, ids, NULL, &hits) ||
		    hits != NR_BLOCKS || kv_release(fds[i], ids, NR_BLOCKS))
			_exit(12);
	}
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		_exit(13);
	for (i = 0; i < NR_FDS; i++)
		close(fds[i]);
	if (write(ready, "c", 1) != 1 || read(go, &c, 1) != 1)
		_exit(14);
	_exit(0);
}

TEST(event_queues_charged_to_opener_memcg)
{
	/* Each fd queues one 64-byte record per block. */
	const long long queued = (long long)NR_FDS * NR_BLOCKS * sizeof(struct kvpool_event);
	static __u32 ids[NR_BLOCKS];
	long long before, full, after;
	int ready[2], go[2], fd, st;
	char name[KVPOOL_NAME_MAX], cg[128], c;
	pid_t pid;

	ASSERT_EQ(0, cg_setup());
	snprintf(cg, sizeof(cg), CG_ROOT "/kvpool-memcg-%d", getpid());
	ASSERT_EQ(0, mkdir(cg, 0755));
	kv_name(name, sizeof(name), "memcg");
	fd = kv_open_create(name, BLOCK, (__u64)NR_BLOCKS * BLOCK, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, NR_BLOCKS));
	ASSERT_EQ(0, kv_publish_seq(fd, ids, NR_BLOCKS, 0x3e3c, 0, NULL));
	ASSERT_EQ(0, kv_release(fd, ids, NR_BLOCKS));
	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, pipe(go));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		child_run(cg, name, ready[1], go[0]);
	ASSERT_EQ(1, read(ready[0], &c, 1));
	before = cg_read_u64(cg, "memory.current");
	ASSERT_LE(0, before);
	ASSERT_EQ(1, write(go[1], "g", 1));
	ASSERT_EQ(1, read(ready[0], &c, 1));
	TH_LOG("memory.current %lld -> %lld with the interests in every block", before,
	       cg_read_u64(cg, "memory.current"));
	/* Root evicts from the root cgroup; the records belong to the child's fds. */
	ASSERT_EQ(0, sysfs_write("drop_cached", name));
	full = cg_read_u64(cg, "memory.current");
	TH_LOG("memory.current %lld -> %lld after %lld bytes of records", before, full, queued);
	EXPECT_GE(full - before, queued * 9 / 10);
	ASSERT_EQ(1, write(go[1], "g", 1));
	ASSERT_EQ(1, read(ready[0], &c, 1));
	after = cg_read_u64(cg, "memory.current");
	TH_LOG("after close: %lld", after);
	EXPECT_LE(after, full - queued * 9 / 10);
	ASSERT_EQ(1, write(go[1], "g", 1));
	st = kv_wait(pid);
	EXPECT_EQ(0, st);
	close(fd);
	EXPECT_EQ(0, rmdir(cg));
}

TEST_HARNESS_MAIN
