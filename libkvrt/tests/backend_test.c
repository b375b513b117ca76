// SPDX-License-Identifier: MIT
/*
 * backend_test: libkvrt's space API against each backend, with the errnos
 * Documentation/kvpool.rst gives for the ioctls, for both backends alike.
 *
 *   KVRT_BACKEND=embedded  only the embedded backend
 *   KVRT_BACKEND=kmod      only kvpool.ko (fails when the device is absent)
 *   unset                  embedded, then kmod when the device opens
 *                          (a SKIP line otherwise)
 *   KVRT_DEVICE            the device (default /dev/kvpool)
 *
 * Built twice by libkvrt's Makefile: against the shared library (and under
 * ASan+UBSan) for `make check`, and static (build/backend_test) for the
 * test VM, where kvpool.ko is loaded.  Space names carry the pid, so runs
 * never meet each other's spaces on a shared module.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvrt.h"
#include "tap.h"

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
	CHECK_EQ(p.api_version, 1);
	CHECK(p.features & 1);
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
	EXPECT(o.flags = 1U << 2, -EINVAL);
	EXPECT(o.flags = KVRT_SPACE_EXCL, -EINVAL);
	EXPECT(o.reserved0 = 1, -EINVAL);
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
	EXPECT(o.flags = 0, -ENOENT);
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
	/* A join ignores the create fields, even invalid ones. */
	o.block_bytes = 0;
	o.quota_bytes = 1;
	o.mode = 07777;
	o.numa_policy = (enum kvrt_numa_policy)9;
	CHECK_EQ(kvrt_space_open(K, &o, &b), 0);
	ib = info(b);
	CHECK_EQ(ib.created, 0);
	CHECK_EQ(ib.space_id, ia.space_id);
	CHECK_EQ(ib.nr_blocks, 32);
	CHECK_EQ(ib.mode, 0640);
	kvrt_space_close(b);
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

/* In a child that dropped to uid/gid 65534: 0 if the join gave want. */
static int child_join(const char *tag, int want_unless_no_device)
{
	pid_t pid;
	int status;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct kvrt_space_opts o = { .name = nm(tag) };
		struct kvrt_space *s;
		int want = want_unless_no_device, ret;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(100);
		if (cur == KVRT_BACKEND_KMOD && access(device ? device : "/dev/kvpool", R_OK | W_OK))
			want = -EACCES;	/* the device itself is closed to this user */
		ret = kvrt_space_open(K, &o, &s);
		if (ret != want) {
			printf("# child: join %s gave %d, want %d\n", o.name, ret, want);
			fflush(stdout);
			_exit(1);
		}
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
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
	CHECK_EQ(child_join("p0", -EACCES), 0);
	CHECK_EQ(child_join("p606", 0), 0);
	kvrt_space_close(q);
	kvrt_space_close(a);
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
	struct kvrt_space *a = create("f", BB, 1024 * BB), *b;
	struct kvrt_space_info i;
	uint32_t mine[2], theirs[1], batch[3], freeid = UINT32_MAX;

	REQUIRE(a);
	b = join("f");
	REQUIRE(b);
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

struct worker {
	struct kvrt_space *s;
	uint32_t tag;
	int errors;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	uint32_t held[64], n = 0;
	uint64_t r = w->tag * 0x9e3779b97f4a7c15ULL + 1;

	for (int it = 0; it < 400; it++) {
		uint32_t want;

		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
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
	struct kvrt_space *a = create("t", BB, 1024 * BB), *b;
	struct worker w[6];
	pthread_t th[6];
	struct kvrt_space_info i;

	REQUIRE(a);
	b = join("t");
	REQUIRE(b);
	/* Four threads share one handle, two share another. */
	for (int t = 0; t < 6; t++) {
		w[t] = (struct worker){ .s = t < 4 ? a : b, .tag = 0x1000 + (uint32_t)t };
		pthread_create(&th[t], NULL, worker, &w[t]);
	}
	for (int t = 0; t < 6; t++) {
		pthread_join(th[t], NULL);
		CHECK_EQ(w[t].errors, 0);
	}
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

/* ---- runner ---------------------------------------------------------------------- */

#define RUNB(fn)                                                        \
	do {                                                            \
		char _n[96];                                            \
		snprintf(_n, sizeof(_n), "%s: %s", cur_name, #fn);      \
		tap_run(_n, fn);                                        \
	} while (0)

static void suite(void)
{
	tap_diag("%s", kvrt_backend_info(K));
	RUNB(pool_info);
	RUNB(space_open_errors);
	RUNB(join_rules);
	RUNB(permissions);
	RUNB(alloc_free_argument_errors);
	RUNB(alloc_to_the_quota_all_or_nothing);
	RUNB(free_errors_all_or_nothing);
	RUNB(mapping_is_shared_between_participants);
	RUNB(fresh_space_memory_is_zero);
	RUNB(two_spaces_on_one_handle);
	RUNB(numa_policies);
	RUNB(threads_alloc_and_free_concurrently);
	RUNB(memory_report);
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
		printf("not ok 1 - KVRT_BACKEND=%s: expected kmod, embedded or unset\n", env);
		return 1;
	}
	if (want_emb) {
		cur = KVRT_BACKEND_EMBEDDED;
		cur_name = "embedded";
		K = open_backend(cur, 0, 0);
		if (!K) {
			printf("not ok 1 - embedded backend does not open\n");
			return 1;
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
			if (forced) {
				printf("not ok %d - kmod backend forced, but %s\n", ++tap_n, why);
				tap_fail++;
			} else {
				printf("ok %d - kmod backend # SKIP %s\n", ++tap_n, why);
				tap_skipped++;
			}
		} else {
			suite();
			kvrt_close(K);
		}
	}
	return tap_done("backend_test");
}
