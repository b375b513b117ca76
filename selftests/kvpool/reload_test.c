// SPDX-License-Identifier: GPL-2.0
/*
 * reload_test: the module unloads cleanly after real use and loads again,
 * many times, and refuses to unload while anything still uses it.
 *
 * Each cycle opens three spaces (PREFERRED, BIND to the last pool node,
 * INTERLEAVE), allocates, maps, checks that the new blocks read as zero,
 * writes and verifies them, then closes everything and requires:
 * delete_module("kvpool", 0) succeeds (raw syscall), /dev/kvpool and
 * /sys/module/kvpool are gone, finit_module() of /kvpool.ko with the
 * pool_mb_per_node the module was loaded with succeeds, and the fresh
 * module works: INFO answers, pool_bytes (INFO and sysfs) is
 * pool_mb_per_node MiB times the node count, every byte is free, no
 * space exists and the debugfs check says "ok".  The module is left
 * loaded at the end, also when a cycle fails.
 *
 * Persistent spaces do not exist yet, so every cycle starts from an empty
 * pool; once they do (the prefix-cache work), this test must also check
 * that unload is refused, or the spaces are dropped as documented, while
 * persistent spaces exist.
 *
 * Kernel command line: kvpool_reload_cycles=N (default 20).
 */
#include "kvpool_util.h"

#define MODULE_FILE	"/kvpool.ko"
#define MOD_SYSFS	"/sys/module/kvpool"
#define BLOCK		(128 * KiB)
#define QUOTA		(8 * MiB)
#define NBLK		24

/* The harness ends the test process with _exit(): flush every message. */
#define say(...) do { ksft_print_msg(__VA_ARGS__); fflush(stdout); } while (0)

static long sys_delete_module(const char *name, unsigned int flags)
{
	return syscall(SYS_delete_module, name, flags);
}

static long sys_finit_module(int fd, const char *args, unsigned int flags)
{
	return syscall(SYS_finit_module, fd, args, flags);
}

static bool module_loaded(void)
{
	return access(MOD_SYSFS, F_OK) == 0;
}

/* Load /kvpool.ko with @args; 0 or -errno. */
static int load_module(const char *args)
{
	int fd = open(MODULE_FILE, O_RDONLY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (sys_finit_module(fd, args, 0))
		ret = -errno;
	close(fd);
	return ret;
}

FIXTURE(reload) {
	char args[64];
	unsigned long mb_per_node;
	__u32 nr_nodes;
	__u64 node_mask;
};

FIXTURE_SETUP(reload)
{
	struct kvpool_info info;
	char buf[32];
	int n;

	if (access(MODULE_FILE, R_OK))
		SKIP(return, "%s not found: this test runs in the selftests VM", MODULE_FILE);
	n = read_file(MOD_SYSFS "/parameters/pool_mb_per_node", buf, sizeof(buf));
	ASSERT_LT(0, n) TH_LOG("pool_mb_per_node parameter: %s", strerror(-n));
	self->mb_per_node = strtoul(buf, NULL, 10);
	snprintf(self->args, sizeof(self->args), "pool_mb_per_node=%lu", self->mb_per_node);
	ASSERT_EQ(0, kv_pool_info(&info));
	self->nr_nodes = info.nr_nodes;
	self->node_mask = info.node_mask;
	/* A fresh module's numbers are what every cycle must come back to. */
	ASSERT_EQ(0, sysfs_get("spaces"));
	ASSERT_EQ(info.pool_bytes, info.free_bytes);
}

FIXTURE_TEARDOWN(reload)
{
	int ret;

	/* Whatever happened above, leave the module loaded. */
	if (!module_loaded() && !access(MODULE_FILE, R_OK)) {
		ret = load_module(self->args);
		if (ret)
			TH_LOG("could not load the module back: %s", strerror(-ret));
	}
}

/* Use the module as an engine would, then close everything. */
static void use_spaces(struct __test_metadata *_metadata,
		       FIXTURE_DATA(reload) *self, unsigned int cycle)
{
	static const __u32 policies[3] = {
		KVPOOL_NUMA_PREFERRED, KVPOOL_NUMA_BIND, KVPOOL_NUMA_INTERLEAVE,
	};
	char name[KVPOOL_NAME_MAX];
	int fds[3], i, j, last_node = 63;
	__u32 ids[3][NBLK];
	char *maps[3];

	while (last_node > 0 && !(self->node_mask & (1ULL << last_node)))
		last_node--;
	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "reload-%u-%d", cycle, i);
		fds[i] = kv_open();
		ASSERT_LE(0, fds[i]);
		ASSERT_EQ(0, kv_create_numa(fds[i], name, BLOCK, QUOTA, policies[i],
					    policies[i] == KVPOOL_NUMA_BIND ?
					    1ULL << last_node : 0, NULL));
		ASSERT_EQ(0, kv_alloc(fds[i], ids[i], NBLK));
		maps[i] = kv_mmap(fds[i], QUOTA, 0);
		ASSERT_NE(MAP_FAILED, maps[i]);
	}
	for (i = 0; i < 3; i++) {
		for (j = 0; j < NBLK; j++) {
			char *b = maps[i] + (size_t)ids[i][j] * BLOCK;
			size_t off;

			for (off = 0; off < BLOCK; off += 4096)
				ASSERT_EQ(0, b[off])
					TH_LOG("space %d block %u not zero", i, ids[i][j]);
			kv_fill(b, BLOCK, cycle * 100 + i * NBLK + j, 0);
		}
	}
	for (i = 0; i < 3; i++) {
		for (j = 0; j < NBLK; j++)
			ASSERT_EQ(-1, kv_verify(maps[i] + (size_t)ids[i][j] * BLOCK, BLOCK,
						cycle * 100 + i * NBLK + j, 0));
		/* Free half, close releases the rest. */
		ASSERT_EQ(0, kv_free(fds[i], ids[i], NBLK / 2));
		ASSERT_EQ(0, munmap(maps[i], QUOTA));
		close(fds[i]);
	}
	ASSERT_EQ(0, sysfs_get("spaces"));
	ASSERT_EQ(sysfs_get("pool_bytes"), sysfs_get("free_bytes"));
	ASSERT_KV_CHECK_OK();
}

/* The freshly loaded module must look like a fresh module. */
static void expect_fresh(struct __test_metadata *_metadata,
			 FIXTURE_DATA(reload) *self)
{
	__u64 want = (__u64)self->mb_per_node * MiB * self->nr_nodes;
	struct kvpool_info info;
	int fd;

	fd = kv_open();
	ASSERT_LE(0, fd) TH_LOG("%s after reload: %s", KV_DEV, strerror(errno));
	ASSERT_EQ(0, kv_info(fd, &info));
	close(fd);
	EXPECT_EQ(KVPOOL_API_VERSION, info.api_version);
	EXPECT_EQ(self->nr_nodes, info.nr_nodes);
	EXPECT_EQ(self->node_mask, info.node_mask);
	EXPECT_EQ(want, info.pool_bytes);
	EXPECT_EQ(want, info.free_bytes);
	EXPECT_EQ(want, sysfs_get("pool_bytes"));
	EXPECT_EQ(want, sysfs_get("free_bytes"));
	EXPECT_EQ(0, sysfs_get("held_bytes"));
	EXPECT_EQ(0, sysfs_get("spaces"));
	EXPECT_EQ(0, sysfs_get("allocs"));
	ASSERT_KV_CHECK_OK();
}

TEST_F_TIMEOUT(reload, unload_and_load_cycles, 600)
{
	unsigned long cycles = kv_cmdline_ulong("kvpool_reload_cycles", 20);
	__u64 t_unload = 0, t_load = 0, t0, t1, t_start = kv_now_us();
	unsigned int c;
	int ret;

	RETURN_IF_SKIPPED();
	say("%lu cycles, module args \"%s\" (kernel command line: kvpool_reload_cycles=)\n",
	    cycles, self->args);
	for (c = 0; c < cycles; c++) {
		use_spaces(_metadata, self, c);

		t0 = kv_now_us();
		ret = sys_delete_module("kvpool", 0);
		ASSERT_EQ(0, ret) TH_LOG("cycle %u: delete_module(\"kvpool\", 0): %s", c,
					 strerror(errno));
		t1 = kv_now_us();
		t_unload += t1 - t0;
		EXPECT_FALSE(module_loaded());
		EXPECT_NE(0, access(KV_DEV, F_OK)) TH_LOG("%s still there after unload", KV_DEV);
		EXPECT_NE(0, access(KV_CHECK, F_OK))
			TH_LOG("%s still there after unload", KV_CHECK);

		ret = load_module(self->args);
		ASSERT_EQ(0, ret) TH_LOG("cycle %u: finit_module(%s, \"%s\"): %s", c,
					 MODULE_FILE, self->args, strerror(-ret));
		t_load += kv_now_us() - t1;
		expect_fresh(_metadata, self);
	}
	t0 = kv_now_us() - t_start;
	say("%lu reload cycles in %llu.%03llu s; delete_module %llu us and finit_module %llu us on average\n",
	    cycles, (unsigned long long)(t0 / 1000000), (unsigned long long)(t0 / 1000 % 1000),
	    (unsigned long long)(cycles ? t_unload / cycles : 0),
	    (unsigned long long)(cycles ? t_load / cycles : 0));
}

/* Refusal must not depend on a blocking flag: O_NONBLOCK, as rmmod uses. */
static void expect_unload_refused(struct __test_metadata *_metadata, const char *what)
{
	long ret = sys_delete_module("kvpool", O_NONBLOCK);

	ASSERT_EQ(-1, ret) TH_LOG("%s: the module was unloaded", what);
	EXPECT_TRUE(errno == EWOULDBLOCK || errno == EAGAIN)
		TH_LOG("%s: delete_module: %s", what, strerror(errno));
	EXPECT_TRUE(module_loaded());
}

TEST_F(reload, unload_refused_while_fd_open_or_mapped)
{
	__u32 ids[4];
	char *m;
	int fd;

	RETURN_IF_SKIPPED();
	fd = kv_open();
	ASSERT_LE(0, fd);
	expect_unload_refused(_metadata, "fd open, no space");
	ASSERT_EQ(0, kv_create(fd, "reload-busy", BLOCK, QUOTA, NULL));
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	expect_unload_refused(_metadata, "fd joined with blocks");
	m = kv_mmap(fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m + (size_t)ids[1] * BLOCK, BLOCK, 77, 0);
	close(fd);
	/* Only the mapping holds the file now. */
	expect_unload_refused(_metadata, "only a mapping left");
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[1] * BLOCK, BLOCK, 77, 0));
	ASSERT_EQ(0, munmap(m, QUOTA));
	ASSERT_EQ(0, sysfs_get("spaces"));

	/* Now nothing holds it: unload and load back. */
	ASSERT_EQ(0, sys_delete_module("kvpool", O_NONBLOCK))
		TH_LOG("delete_module after the last munmap: %s", strerror(errno));
	ASSERT_EQ(0, load_module(self->args));
	expect_fresh(_metadata, self);
}

TEST_HARNESS_MAIN
