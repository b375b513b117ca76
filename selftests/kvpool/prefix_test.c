// SPDX-License-Identifier: GPL-2.0
/*
 * prefix_test: the prefix cache of a space (API v2): PUBLISH, LOOKUP,
 * RELEASE, SPACE_STATS, eviction inside ALLOC, eviction events, and the
 * per-space sysfs directory and debugfs hashes/lru dumps.
 *
 * Every expectation comes from the scenario itself (which blocks were
 * published, looked up, released, in which order), never from another
 * report of the module: the stats, sysfs and debugfs are each compared
 * against those numbers.
 */
#include "kvpool_util.h"

#include <poll.h>

/* CHECK_STATS() overrides its "not checked" defaults with designators. */
#pragma GCC diagnostic ignored "-Woverride-init"

#define BB	(256 * KiB)
#define Q8	(2 * MiB)	/* 8 blocks of BB: exactly one chunk */
#define SEED	0x5eedu

FIXTURE(prefix) {
	char name[KVPOOL_NAME_MAX];
	__u64 free0;
	__u64 spaces0;
};

FIXTURE_SETUP(prefix)
{
	kv_name(self->name, sizeof(self->name), "prefix");
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
}

FIXTURE_TEARDOWN(prefix)
{
}

/* ---- helpers --------------------------------------------------------------- */

static void hent(struct kvpool_publish_entry *e, __u32 seed, __u32 i,
		 __u32 id, __u32 prio)
{
	__u8 h[KVPOOL_HASH_BYTES];

	kv_hash(h, seed, i);
	kv_pub_entry(e, h, id, prio);
}

/* LOOKUP of the single hash (seed, i): nr_hits (0/1) or -errno. */
static int lookup1(int fd, __u32 seed, __u32 i, __u32 *id)
{
	__u32 hits = 99, tmp;
	int ret = kv_lookup_seq(fd, seed, i, 1, id ? id : &tmp, NULL, &hits);

	return ret ? ret : (int)hits;
}

/* Look (seed, i) up and give the reference back: 1 when present. */
static int present(int fd, __u32 seed, __u32 i)
{
	__u32 id;
	int n = lookup1(fd, seed, i, &id);

	if (n == 1 && kv_release(fd, &id, 1))
		return -1000;
	return n;
}

/* Expected SPACE_STATS figures; -1 means "not checked". */
struct xs {
	long long inserts, dedups, hits, misses;
	long long published, cached, readers, my_refs;
};

static void check_stats(struct __test_metadata *_metadata, int fd,
			struct xs x, int line)
{
	struct kvpool_space_stats st;
	int i;

	ASSERT_EQ(0, kv_space_stats(fd, &st)) TH_LOG("from line %d", line);
	EXPECT_EQ(0, st.flags);
	for (i = 0; i < 4; i++)
		EXPECT_EQ(0, st.reserved[i]);
#define XS(f, g) do { \
	if (x.f >= 0) \
		EXPECT_EQ((__u64)x.f, st.g) TH_LOG("%s, from line %d", #g, line); \
} while (0)
	XS(inserts, inserts);
	XS(dedups, dedups);
	XS(hits, hits);
	XS(misses, misses);
	XS(published, published_blocks);
	XS(cached, cached_blocks);
	XS(readers, readers);
	XS(my_refs, my_refs);
#undef XS
}

#define CHECK_STATS(fd, ...) \
	check_stats(_metadata, fd, (struct xs){ .inserts = -1, .dedups = -1, \
		.hits = -1, .misses = -1, .published = -1, .cached = -1, \
		.readers = -1, .my_refs = -1, __VA_ARGS__ }, __LINE__)

static void check_info(struct __test_metadata *_metadata, int fd,
		       long long backed, long long free_b, long long owned,
		       long long mine, int line)
{
	struct kvpool_space_info si;

	ASSERT_EQ(0, kv_space_info(fd, &si)) TH_LOG("from line %d", line);
	if (backed >= 0)
		EXPECT_EQ((__u64)backed, si.backed_blocks) TH_LOG("line %d", line);
	if (free_b >= 0)
		EXPECT_EQ((__u64)free_b, si.free_blocks) TH_LOG("line %d", line);
	if (owned >= 0)
		EXPECT_EQ((__u64)owned, si.owned_blocks) TH_LOG("line %d", line);
	if (mine >= 0)
		EXPECT_EQ((__u64)mine, si.my_blocks) TH_LOG("line %d", line);
}

#define CHECK_INFO(fd, backed, free_b, owned, mine) \
	check_info(_metadata, fd, backed, free_b, owned, mine, __LINE__)

static __u64 evictions(int fd, int cause)
{
	struct kvpool_space_stats st;

	if (kv_space_stats(fd, &st))
		return ~0ULL;
	return st.evictions[cause];
}

static __u64 pressure(int fd)
{
	struct kvpool_space_stats st;

	if (kv_space_stats(fd, &st))
		return ~0ULL;
	return st.pressure;
}

static int id_in(__u32 id, const __u32 *set, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (set[i] == id)
			return 1;
	return 0;
}

/* A backed block id that is in none of the @n ids. */
static __u32 free_id(const __u32 *ids, int n, __u32 backed)
{
	__u32 id;

	for (id = 0; id < backed; id++)
		if (!id_in(id, ids, n))
			return id;
	return 0xffffffffu;
}

static __u64 fnv(const void *p, size_t len)
{
	const unsigned char *c = p;
	__u64 h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

/* ---- PUBLISH ---------------------------------------------------------------- */

TEST_F(prefix, publish_new_hashes_keeps_ids)
{
	struct kvpool_publish_entry e[4], copy[4];
	struct kvpool_space_stats st;
	struct kvpool_publish p;
	__u32 ids[4];
	int fd, i;

	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd) TH_LOG("create: %s", strerror(-fd));
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	CHECK_STATS(fd, .inserts = 0, .dedups = 0, .hits = 0, .misses = 0,
		    .published = 0, .cached = 0, .readers = 0, .my_refs = 0);
	for (i = 0; i < 4; i++)
		hent(&e[i], SEED, i, ids[i], 0);
	memcpy(copy, e, sizeof(e));
	memset(&p, 0, sizeof(p));
	p.entries = (uintptr_t)e;
	p.count = 4;
	ASSERT_EQ(0, kv_ioctl(fd, KVPOOL_IOC_PUBLISH, &p));
	EXPECT_EQ(0, p.nr_dedup);
	EXPECT_EQ(4, p.count);
	EXPECT_EQ(0, p.flags);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(ids[i], e[i].id) TH_LOG("entry %d", i);
		EXPECT_EQ(0, e[i].flags) TH_LOG("entry %d", i);
		EXPECT_EQ(0, memcmp(copy[i].hash, e[i].hash, KVPOOL_HASH_BYTES));
		EXPECT_EQ(0, e[i].pad);
	}
	CHECK_STATS(fd, .inserts = 4, .dedups = 0, .hits = 0, .misses = 0,
		    .published = 4, .cached = 0, .readers = 4, .my_refs = 4);
	ASSERT_EQ(0, kv_space_stats(fd, &st));
	EXPECT_EQ(4, st.allocs);
	EXPECT_EQ(0, st.frees);
	EXPECT_EQ(0, st.pressure);
	EXPECT_EQ(0, st.hole_blocks);
	for (i = 0; i < KVPOOL_EVICT_CAUSES; i++)
		EXPECT_EQ(0, st.evictions[i]);
	/* Published blocks are no longer owned by anyone. */
	CHECK_INFO(fd, 8, 4, 0, 0);
	/* Each id now holds its hash. */
	for (i = 0; i < 4; i++) {
		__u32 id = ~0u;

		EXPECT_EQ(1, lookup1(fd, SEED, i, &id));
		EXPECT_EQ(ids[i], id);
	}
	close(fd);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
}

TEST_F(prefix, publish_present_hash_dedups_to_first_block)
{
	struct kvpool_publish_entry e[3];
	struct kvpool_space_stats st;
	__u32 a[3], b[3], nd = 99;
	int fd1, fd2, i;

	fd1 = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, a, 3));
	ASSERT_EQ(0, kv_publish_seq(fd1, a, 3, SEED, 0, &nd));
	EXPECT_EQ(0, nd);
	ASSERT_EQ(0, kv_alloc(fd2, b, 3));
	CHECK_INFO(fd2, 8, 2, 3, 3);
	for (i = 0; i < 3; i++) {
		EXPECT_FALSE(id_in(b[i], a, 3));
		hent(&e[i], SEED, i, b[i], 0);
	}
	nd = 99;
	ASSERT_EQ(0, kv_publish(fd2, e, 3, 0, &nd));
	EXPECT_EQ(3, nd);
	for (i = 0; i < 3; i++) {
		EXPECT_EQ(a[i], e[i].id) TH_LOG("entry %d", i);
		EXPECT_EQ(KVPOOL_PUBLISHED_DEDUP, e[i].flags) TH_LOG("entry %d", i);
	}
	/* fd2's own blocks went back to FREE. */
	CHECK_INFO(fd2, 8, 5, 0, 0);
	CHECK_INFO(fd1, 8, 5, 0, 0);
	CHECK_STATS(fd2, .inserts = 3, .dedups = 3, .hits = 0, .misses = 0,
		    .published = 3, .cached = 0, .readers = 6, .my_refs = 3);
	CHECK_STATS(fd1, .my_refs = 3);
	ASSERT_EQ(0, kv_space_stats(fd1, &st));
	EXPECT_EQ(6, st.allocs);
	EXPECT_EQ(3, st.frees);
	/* They are free: not fd2's to FREE any more. */
	EXPECT_EQ(-EPERM, kv_free(fd2, b, 1));
	/* Both fds hold a reference on the first blocks. */
	EXPECT_EQ(0, kv_release(fd2, a, 3));
	CHECK_STATS(fd1, .published = 3, .cached = 0, .readers = 3, .my_refs = 3);
	EXPECT_EQ(0, kv_release(fd1, a, 3));
	CHECK_STATS(fd1, .published = 0, .cached = 3, .readers = 0, .my_refs = 0);
	close(fd2);
	close(fd1);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
}

TEST_F(prefix, publish_same_hash_twice_in_batch_dedups)
{
	struct kvpool_publish_entry e[3];
	__u32 ids[3], nd = 99, two[2];
	int fd;

	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 3));
	hent(&e[0], SEED, 0, ids[0], 0);
	hent(&e[1], SEED, 1, ids[1], 0);
	hent(&e[2], SEED, 0, ids[2], 0);
	ASSERT_EQ(0, kv_publish(fd, e, 3, 0, &nd));
	EXPECT_EQ(1, nd);
	EXPECT_EQ(ids[0], e[0].id);
	EXPECT_EQ(0, e[0].flags);
	EXPECT_EQ(ids[1], e[1].id);
	EXPECT_EQ(0, e[1].flags);
	EXPECT_EQ(ids[0], e[2].id);
	EXPECT_EQ(KVPOOL_PUBLISHED_DEDUP, e[2].flags);
	CHECK_INFO(fd, 8, 6, 0, 0);
	CHECK_STATS(fd, .inserts = 2, .dedups = 1, .published = 2, .cached = 0,
		    .readers = 3, .my_refs = 3);
	/* ids[0] carries two references of this fd, ids[1] one. */
	two[0] = ids[1];
	two[1] = ids[1];
	EXPECT_EQ(-EINVAL, kv_release(fd, two, 2));
	CHECK_STATS(fd, .published = 2, .cached = 0, .readers = 3, .my_refs = 3);
	two[0] = ids[0];
	two[1] = ids[0];
	EXPECT_EQ(0, kv_release(fd, two, 2));
	CHECK_STATS(fd, .published = 1, .cached = 1, .readers = 1, .my_refs = 1);
	close(fd);
}

TEST_F(prefix, publish_mixed_batch_new_and_present)
{
	struct kvpool_publish_entry e[3];
	__u32 a[2], b[3], nd = 99;
	int fd1, fd2;

	fd1 = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, a, 2));
	ASSERT_EQ(0, kv_publish_seq(fd1, a, 2, SEED, 0, &nd));
	/* A CACHED hash dedups as well as a PUBLISHED one. */
	ASSERT_EQ(0, kv_release(fd1, &a[1], 1));
	ASSERT_EQ(0, kv_alloc(fd2, b, 3));
	hent(&e[0], SEED, 5, b[0], 0);	/* new */
	hent(&e[1], SEED, 0, b[1], 0);	/* published by fd1 */
	hent(&e[2], SEED, 1, b[2], 0);	/* cached */
	ASSERT_EQ(0, kv_publish(fd2, e, 3, 0, &nd));
	EXPECT_EQ(2, nd);
	EXPECT_EQ(b[0], e[0].id);
	EXPECT_EQ(0, e[0].flags);
	EXPECT_EQ(a[0], e[1].id);
	EXPECT_EQ(KVPOOL_PUBLISHED_DEDUP, e[1].flags);
	EXPECT_EQ(a[1], e[2].id);
	EXPECT_EQ(KVPOOL_PUBLISHED_DEDUP, e[2].flags);
	/* The cached block is referenced (published) again. */
	CHECK_STATS(fd2, .inserts = 3, .dedups = 2, .published = 3, .cached = 0,
		    .readers = 4, .my_refs = 3);
	CHECK_INFO(fd2, 8, 5, 0, 0);
	close(fd2);
	close(fd1);
}

TEST_F(prefix, publish_errors_change_nothing)
{
	struct kvpool_publish_entry e[2];
	__u32 a[4], b[1], used[5], pub, nd, id;
	int fd1, fd2;

	fd1 = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, a, 4));
	ASSERT_EQ(0, kv_alloc(fd2, b, 1));
	/* a[0] PUBLISHED, a[3] CACHED, a[1] and a[2] owned. */
	pub = a[0];
	ASSERT_EQ(0, kv_publish_seq(fd1, &pub, 1, SEED, 0, NULL));
	id = a[3];
	ASSERT_EQ(0, kv_publish_seq(fd1, &id, 1, SEED, 3, NULL));
	ASSERT_EQ(0, kv_release(fd1, &id, 1));
	CHECK_STATS(fd1, .inserts = 2, .published = 1, .cached = 1,
		    .readers = 1, .my_refs = 1);

#define PUB_FAILS(err, flags, what) do { \
	EXPECT_EQ(-(err), kv_publish(fd1, e, 2, flags, NULL)) TH_LOG("%s", what); \
	CHECK_INFO(fd1, 8, 3, 3, 2); \
	CHECK_STATS(fd1, .inserts = 2, .dedups = 0, .published = 1, \
		    .cached = 1, .readers = 1, .my_refs = 1); \
	EXPECT_EQ(0, present(fd1, SEED, 10)) TH_LOG("%s", what); \
} while (0)

	/* e[0] is always valid; e[1] carries one defect. */
	hent(&e[0], SEED, 10, a[1], 0);
	hent(&e[1], SEED, 11, b[0], 0);
	PUB_FAILS(EPERM, 0, "another fd's block");
	used[0] = a[0];
	used[1] = a[1];
	used[2] = a[2];
	used[3] = a[3];
	used[4] = b[0];
	hent(&e[1], SEED, 11, free_id(used, 5, 8), 0);
	ASSERT_GT(8, e[1].id);
	PUB_FAILS(EPERM, 0, "a FREE block");
	hent(&e[1], SEED, 11, a[0], 0);
	PUB_FAILS(EPERM, 0, "a PUBLISHED block");
	hent(&e[1], SEED, 11, a[3], 0);
	PUB_FAILS(EPERM, 0, "a CACHED block");
	hent(&e[1], SEED, 11, a[1], 0);
	PUB_FAILS(EINVAL, 0, "the same id twice");
	hent(&e[1], SEED, 11, a[2], 101);
	PUB_FAILS(EINVAL, KVPOOL_PUBLISH_PRIORITY, "priority 101");
	hent(&e[1], SEED, 11, a[2], 0xffffffffu);
	PUB_FAILS(EINVAL, KVPOOL_PUBLISH_PRIORITY, "priority ~0");
	hent(&e[1], SEED, 11, a[2], 1);
	PUB_FAILS(EINVAL, 0, "priority without the flag");
	hent(&e[1], SEED, 11, 8, 0);
	PUB_FAILS(EINVAL, 0, "id == backed blocks");
	hent(&e[1], SEED, 11, 0xffffffffu, 0);
	PUB_FAILS(EINVAL, 0, "id ~0");
	hent(&e[1], SEED, 11, a[2], 0);
	e[1].flags = KVPOOL_PUBLISHED_DEDUP;
	PUB_FAILS(EINVAL, 0, "entry flags");
	hent(&e[1], SEED, 11, a[2], 0);
	e[1].pad = 1;
	PUB_FAILS(EINVAL, 0, "entry pad");
	/* fd2 cannot publish fd1's block either. */
	hent(&e[0], SEED, 10, a[1], 0);
	EXPECT_EQ(-EPERM, kv_publish(fd2, e, 1, 0, NULL));
	CHECK_INFO(fd2, 8, 3, 3, 1);
#undef PUB_FAILS

	/* Valid: the limits of the priority are inclusive. */
	hent(&e[0], SEED, 10, a[1], 100);
	hent(&e[1], SEED, 11, a[2], 0);
	nd = 99;
	EXPECT_EQ(0, kv_publish(fd1, e, 2, KVPOOL_PUBLISH_PRIORITY, &nd));
	EXPECT_EQ(0, nd);
	CHECK_STATS(fd1, .inserts = 4, .published = 3, .cached = 1,
		    .readers = 3, .my_refs = 3);
	close(fd2);
	close(fd1);
}

TEST_F(prefix, free_of_published_or_cached_block_eperm)
{
	__u32 ids[3], pub, two[2];
	int fd, fd2;

	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 3));
	pub = ids[0];
	ASSERT_EQ(0, kv_publish_seq(fd, &pub, 1, SEED, 0, NULL));
	EXPECT_EQ(-EPERM, kv_free(fd, &pub, 1));
	two[0] = ids[1];
	two[1] = pub;
	EXPECT_EQ(-EPERM, kv_free(fd, two, 2));
	CHECK_INFO(fd, 8, 5, 2, 2);
	CHECK_STATS(fd, .published = 1, .cached = 0, .readers = 1, .my_refs = 1);
	ASSERT_EQ(0, kv_release(fd, &pub, 1));
	EXPECT_EQ(-EPERM, kv_free(fd, &pub, 1));
	CHECK_STATS(fd, .published = 0, .cached = 1, .readers = 0);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	EXPECT_EQ(-EPERM, kv_free(fd2, &pub, 1));
	CHECK_INFO(fd, 8, 5, 2, 2);
	EXPECT_EQ(0, kv_free(fd, &ids[1], 2));
	CHECK_INFO(fd, 8, 7, 0, 0);
	EXPECT_EQ(1, present(fd2, SEED, 0));
	close(fd2);
	close(fd);
}

/* ---- concurrent publish ------------------------------------------------------- */

#define CN	64
#define CBB	(64 * KiB)

struct conc_result {
	int ret;		/* 0, or the failing step */
	int err;		/* its errno */
	__u32 nr_dedup;
	__u32 orig[CN];		/* the blocks this child allocated */
	__u32 id[CN];		/* entry.id after PUBLISH */
	__u32 flags[CN];
	__u64 sum[CN];		/* checksum of block id[i] as this child reads it */
};

static __u32 conc_seed(int k, int i)
{
	return 0x1000u * (k + 1) + i;
}

static void conc_child(const char *name, int k, int go, int res, int hold)
{
	struct kvpool_publish_entry e[CN];
	struct kvpool_space_open so;
	struct conc_result r;
	char c = 'r', *m;
	int fd, i, b, ret, ready = 0;
	__u32 nd;

	memset(&r, 0, sizeof(r));
	fd = kv_open_join(name, &so);
	if (fd < 0) {
		r.ret = 1;
		r.err = -fd;
		goto out;
	}
	m = kv_mmap(fd, so.map_bytes, 0);
	if (m == MAP_FAILED) {
		r.ret = 2;
		r.err = errno;
		goto out;
	}
	ret = kv_alloc(fd, r.orig, CN);
	if (ret) {
		r.ret = 3;
		r.err = -ret;
		goto out;
	}
	for (i = 0; i < CN; i++) {
		kv_fill(m + (size_t)r.orig[i] * CBB, CBB, conc_seed(k, i), 0);
		hent(&e[i], SEED, i, r.orig[i], 0);
	}
	ready = 1;
	if (write(res, &c, 1) != 1 || read(go, &c, 1) != 1) {
		r.ret = 4;
		goto out;
	}
	/* Batches of 8, so that the two children interleave. */
	for (b = 0; b < CN; b += 8) {
		nd = 0;
		ret = kv_publish(fd, e + b, 8, 0, &nd);
		if (ret) {
			r.ret = 5;
			r.err = -ret;
			goto out;
		}
		r.nr_dedup += nd;
	}
	for (i = 0; i < CN; i++) {
		r.id[i] = e[i].id;
		r.flags[i] = e[i].flags;
		r.sum[i] = fnv(m + (size_t)e[i].id * CBB, CBB);
	}
out:
	if (!ready && write(res, &c, 1) != 1)
		_exit(19);
	if (write(res, &r, sizeof(r)) != sizeof(r))
		_exit(20);
	/* Hold the references until the parent has looked. */
	if (read(hold, &c, 1) < 0)
		_exit(21);
	_exit(r.ret);
}

TEST_F_TIMEOUT(prefix, concurrent_publish_same_prefix_one_copy_per_hash, 180)
{
	struct conc_result r[2];
	struct kvpool_space_open so;
	int go[2], res[2][2], hold[2], fd, k, i, nlines;
	__u32 ids[CN], hits = 0, dedups;
	static char dump[1 << 16], sec[1 << 16];
	pid_t pid[2];
	char c, *m, *buf;
	size_t got;

	fd = kv_open_create(self->name, CBB, 2 * CN * CBB, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(hold));
	for (k = 0; k < 2; k++) {
		ASSERT_EQ(0, pipe(res[k]));
		pid[k] = fork();
		ASSERT_LE(0, pid[k]);
		if (pid[k] == 0) {
			close(fd);
			close(go[1]);
			close(hold[1]);
			close(res[k][0]);
			conc_child(self->name, k, go[0], res[k][1], hold[0]);
		}
		close(res[k][1]);
	}
	close(go[0]);
	close(hold[0]);
	/* Both ready, then both go. */
	for (k = 0; k < 2; k++)
		ASSERT_EQ(1, read(res[k][0], &c, 1));
	ASSERT_EQ(2, write(go[1], "gg", 2));
	for (k = 0; k < 2; k++) {
		buf = (char *)&r[k];
		for (got = 0; got < sizeof(r[k]);) {
			ssize_t n = read(res[k][0], buf + got, sizeof(r[k]) - got);

			ASSERT_LT(0, n) TH_LOG("child %d result", k);
			got += n;
		}
		ASSERT_EQ(0, r[k].ret) TH_LOG("child %d failed at step %d: %s",
					      k, r[k].ret, strerror(r[k].err));
	}
	/* Exactly one copy per hash: one inserted it, the other deduped. */
	EXPECT_EQ(CN, r[0].nr_dedup + r[1].nr_dedup);
	for (i = 0; i < CN; i++) {
		int w = r[0].flags[i] == 0 ? 0 : 1, l = !w;

		EXPECT_EQ(r[0].id[i], r[1].id[i]) TH_LOG("hash %d", i);
		EXPECT_EQ(0, r[w].flags[i]) TH_LOG("hash %d", i);
		EXPECT_EQ(KVPOOL_PUBLISHED_DEDUP, r[l].flags[i]) TH_LOG("hash %d", i);
		EXPECT_EQ(r[w].orig[i], r[w].id[i]) TH_LOG("hash %d", i);
		EXPECT_FALSE(id_in(r[l].id[i], r[l].orig, CN)) TH_LOG("hash %d", i);
		/* Both see the same bytes: the winner's. */
		EXPECT_EQ(r[0].sum[i], r[1].sum[i]) TH_LOG("hash %d", i);
		ids[i] = r[0].id[i];
	}
	m = malloc(CBB);
	ASSERT_NE(NULL, m);
	for (i = 0; i < CN; i++) {
		int w = r[0].flags[i] == 0 ? 0 : 1;

		kv_fill(m, CBB, conc_seed(w, i), 0);
		EXPECT_EQ(fnv(m, CBB), r[w].sum[i]) TH_LOG("hash %d", i);
	}
	free(m);
	for (i = 0; i < CN; i++)
		for (k = 0; k < i; k++)
			EXPECT_NE(ids[k], ids[i]);
	dedups = r[0].nr_dedup + r[1].nr_dedup;
	CHECK_STATS(fd, .inserts = CN, .dedups = dedups, .published = CN,
		    .cached = 0, .readers = 2 * CN, .my_refs = 0);
	CHECK_INFO(fd, 2 * CN, CN, 0, 0);
	ASSERT_LE(0, kv_debugfs_read("hashes", dump, sizeof(dump)));
	nlines = kv_debugfs_section(dump, so.space_id, sec, sizeof(sec));
	EXPECT_EQ(CN, nlines);
	for (i = 0; i < CN; i++) {
		char want[64];

		snprintf(want, sizeof(want), "block=%u state=published readers=2 ",
			 ids[i]);
		EXPECT_NE(NULL, strstr(sec, want)) TH_LOG("%s", want);
	}

	/* Let the children go: their references go with them. */
	ASSERT_EQ(2, write(hold[1], "xx", 2));
	for (k = 0; k < 2; k++)
		EXPECT_EQ(0, kv_wait(pid[k]));
	CHECK_STATS(fd, .published = 0, .cached = CN, .readers = 0);
	ASSERT_EQ(0, kv_lookup_seq(fd, SEED, 0, CN, r[0].orig, NULL, &hits));
	EXPECT_EQ(CN, hits);
	for (i = 0; i < CN; i++)
		EXPECT_EQ(ids[i], r[0].orig[i]);
	close(go[1]);
	close(hold[1]);
	close(fd);
}

/* ---- LOOKUP -------------------------------------------------------------------- */

/*
 * Issue 14 finding 1: two fds looking up one hash 2^32 times in all
 * wrapped the block's 32-bit reader count, and the next eviction wrote
 * past the index.  Each fd now holds at most refs_per_fd_max references
 * (fixed at open; lowered here so the bound is in reach) and LOOKUP or
 * PUBLISH past it fails with EOVERFLOW, taking nothing.
 */
/* LOOKUP of count hashes in one call: nr_hits or -errno. */
static int lookup_same(int fd, __u8 (*hs)[KVPOOL_HASH_BYTES], __u32 count, __u32 *ids)
{
	struct kvpool_lookup l = {
		.hashes = (__u64)(uintptr_t)hs,
		.ids = (__u64)(uintptr_t)ids,
		.count = count,
	};
	int ret = kv_ioctl(fd, KVPOOL_IOC_LOOKUP, &l);

	return ret ? ret : (int)l.nr_hits;
}

TEST_F(prefix, reader_count_overflow)
{
	enum { LIMIT = 1000, BATCH = 600 };
	__u8 (*hs)[KVPOOL_HASH_BYTES] = calloc(BATCH, KVPOOL_HASH_BYTES);
	__u32 *ids = calloc(BATCH, sizeof(*ids)), id, own, i;
	struct kvpool_publish_entry e;
	__u64 limit0;
	char lim[32];
	int fd, a, b, f;

	ASSERT_NE(NULL, hs);
	ASSERT_NE(NULL, ids);
	ASSERT_EQ(0, sysfs_u64("refs_per_fd_max", &limit0));
	/* Out of range: 0, and the per-block bound (2^31) or more. */
	ASSERT_EQ(-EINVAL, sysfs_write("refs_per_fd_max", "0"));
	ASSERT_EQ(-EINVAL, sysfs_write("refs_per_fd_max", "2147483648"));
	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, kv_alloc(fd, &id, 1));
	hent(&e, SEED, 0, id, 0);
	ASSERT_EQ(0, kv_publish(fd, &e, 1, 0, NULL));
	ASSERT_EQ(0, sysfs_write("refs_per_fd_max", "1000"));
	a = kv_open_join(self->name, NULL);
	b = kv_open_join(self->name, NULL);
	snprintf(lim, sizeof(lim), "%llu", (unsigned long long)limit0);
	ASSERT_EQ(0, sysfs_write("refs_per_fd_max", lim));
	ASSERT_GE(a, 0);
	ASSERT_GE(b, 0);
	for (i = 0; i < BATCH; i++)
		kv_hash(hs[i], SEED, 0);
	for (f = 0; f < 2; f++) {
		int who = f ? b : a;

		ASSERT_EQ(BATCH, lookup_same(who, hs, BATCH, ids));
		/* 600 + 600 > 1000: refused whole, nothing taken. */
		ASSERT_EQ(-EOVERFLOW, lookup_same(who, hs, BATCH, ids));
		ASSERT_EQ(LIMIT - BATCH, lookup_same(who, hs, LIMIT - BATCH, ids));
		ASSERT_EQ(-EOVERFLOW, lookup_same(who, hs, 1, ids));
		/* PUBLISH's dedup reference counts too; the block stays the caller's. */
		ASSERT_EQ(0, kv_alloc(who, &own, 1));
		hent(&e, SEED, 0, own, 0);
		ASSERT_EQ(-EOVERFLOW, kv_publish(who, &e, 1, 0, NULL));
		ASSERT_EQ(0, kv_free(who, &own, 1));
	}
	/* One fd's references all go back: room again, the other fd unaffected. */
	for (i = 0; i < BATCH; i++)
		ids[i] = id;
	ASSERT_EQ(0, kv_release(a, ids, BATCH));
	ASSERT_EQ(1, lookup_same(a, hs, 1, ids));
	ASSERT_EQ(-EOVERFLOW, lookup_same(b, hs, 1, ids));
	/* The creator's fd opened with the default bound: no limit in sight. */
	ASSERT_EQ(BATCH, lookup_same(fd, hs, BATCH, ids));
	close(a);
	close(b);
	close(fd);
	free(ids);
	free(hs);
}

TEST_F(prefix, lookup_returns_longest_prefix)
{
	__u8 h[4][KVPOOL_HASH_BYTES];
	__u32 a[4], pub[3], ids[4], hits;
	__u64 dev[4];
	int fd, fd2, i;

	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd, a, 3));
	/* Hashes 0, 1 and 3 present, 2 absent. */
	pub[0] = a[0];
	pub[1] = a[1];
	ASSERT_EQ(0, kv_publish_seq(fd, pub, 2, SEED, 0, NULL));
	pub[2] = a[2];
	ASSERT_EQ(0, kv_publish_seq(fd, &pub[2], 1, SEED, 3, NULL));
	for (i = 0; i < 4; i++)
		kv_hash(h[i], SEED, i);

	for (i = 0; i < 4; i++) {
		ids[i] = 0xa5a5a5a5u;
		dev[i] = 0x5a5a5a5a5a5a5a5aULL;
	}
	hits = 99;
	ASSERT_EQ(0, kv_lookup(fd2, h, 4, ids, dev, &hits));
	EXPECT_EQ(2, hits);
	EXPECT_EQ(a[0], ids[0]);
	EXPECT_EQ(a[1], ids[1]);
	EXPECT_EQ(0, dev[0]);
	EXPECT_EQ(0, dev[1]);
	/* Only the hits are written. */
	EXPECT_EQ(0xa5a5a5a5u, ids[2]);
	EXPECT_EQ(0xa5a5a5a5u, ids[3]);
	EXPECT_EQ(0x5a5a5a5a5a5a5a5aULL, dev[2]);
	EXPECT_EQ(0x5a5a5a5a5a5a5a5aULL, dev[3]);
	CHECK_STATS(fd2, .hits = 2, .misses = 2, .published = 3, .cached = 0,
		    .readers = 5, .my_refs = 2);

	/* A miss first: 0 hits is success, nothing taken. */
	hits = 99;
	ASSERT_EQ(0, kv_lookup(fd2, h[2], 2, ids, NULL, &hits));
	EXPECT_EQ(0, hits);
	CHECK_STATS(fd2, .hits = 2, .misses = 4, .my_refs = 2);
	/* Hash 3 on its own. */
	ASSERT_EQ(0, kv_lookup(fd2, h[3], 1, ids, NULL, &hits));
	EXPECT_EQ(1, hits);
	EXPECT_EQ(a[2], ids[0]);
	CHECK_STATS(fd2, .hits = 3, .misses = 4, .readers = 6, .my_refs = 3);
	/* The same hash twice: two hits, two references. */
	memcpy(h[1], h[0], KVPOOL_HASH_BYTES);
	ASSERT_EQ(0, kv_lookup(fd2, h, 2, ids, NULL, &hits));
	EXPECT_EQ(2, hits);
	EXPECT_EQ(a[0], ids[0]);
	EXPECT_EQ(a[0], ids[1]);
	CHECK_STATS(fd2, .hits = 5, .misses = 4, .readers = 8, .my_refs = 5);
	CHECK_STATS(fd, .hits = 5, .misses = 4, .my_refs = 3);
	close(fd2);
	CHECK_STATS(fd, .published = 3, .readers = 3, .my_refs = 3);
	close(fd);
}

TEST_F(prefix, lookup_revives_cached_block)
{
	__u32 ids[2], got[2], hits;
	int fd, fd2;

	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 2));
	ASSERT_EQ(0, kv_publish_seq(fd, ids, 2, SEED, 0, NULL));
	ASSERT_EQ(0, kv_release(fd, ids, 2));
	CHECK_STATS(fd, .published = 0, .cached = 2, .readers = 0, .my_refs = 0);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 0, 1, got, NULL, &hits));
	EXPECT_EQ(1, hits);
	EXPECT_EQ(ids[0], got[0]);
	CHECK_STATS(fd, .published = 1, .cached = 1, .readers = 1, .my_refs = 0);
	CHECK_STATS(fd2, .my_refs = 1);
	CHECK_INFO(fd, 8, 6, 0, 0);
	/* Closing the last holder makes it CACHED again, not FREE. */
	close(fd2);
	CHECK_STATS(fd, .published = 0, .cached = 2, .readers = 0);
	CHECK_INFO(fd, 8, 6, 0, 0);
	close(fd);
}

TEST_F(prefix, close_releases_refs_published_blocks_stay)
{
	__u32 a[3], b[1], got[3], hits;
	int fd1, fd2;

	fd1 = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, a, 3));
	ASSERT_EQ(0, kv_publish_seq(fd1, a, 3, SEED, 0, NULL));
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 0, 3, got, NULL, &hits));
	ASSERT_EQ(3, hits);
	ASSERT_EQ(0, kv_alloc(fd2, b, 1));
	ASSERT_EQ(0, kv_publish_seq(fd2, b, 1, SEED, 5, NULL));
	CHECK_STATS(fd1, .published = 4, .cached = 0, .readers = 7, .my_refs = 3);
	close(fd2);
	/* fd2's references are gone; its published block is cached. */
	CHECK_STATS(fd1, .published = 3, .cached = 1, .readers = 3, .my_refs = 3);
	CHECK_INFO(fd1, 8, 4, 0, 0);
	ASSERT_EQ(0, kv_lookup_seq(fd1, SEED, 5, 1, got, NULL, &hits));
	EXPECT_EQ(1, hits);
	EXPECT_EQ(b[0], got[0]);
	close(fd1);
	EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
}

/* ---- RELEASE ------------------------------------------------------------------- */

TEST_F(prefix, release_errors_release_nothing)
{
	__u32 a[4], pub[3], got, hits, x[3];
	int fd1, fd2;

	fd1 = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, a, 4));
	memcpy(pub, a, sizeof(pub));
	ASSERT_EQ(0, kv_publish_seq(fd1, pub, 3, SEED, 0, NULL));
	/* fd1: 2 refs on pub[0], 1 on pub[1] and pub[2]; fd2: 1 on pub[1]. */
	ASSERT_EQ(0, kv_lookup_seq(fd1, SEED, 0, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 1, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);

#define REL_FAILS(fd, n, what) do { \
	EXPECT_EQ(-EINVAL, kv_release(fd, x, n)) TH_LOG("%s", what); \
	CHECK_STATS(fd1, .published = 3, .cached = 0, .readers = 5, .my_refs = 4); \
	CHECK_STATS(fd2, .my_refs = 1); \
} while (0)

	x[0] = x[1] = x[2] = pub[0];
	REL_FAILS(fd1, 3, "three refs of two");
	x[0] = pub[0];
	REL_FAILS(fd2, 1, "a ref of another fd");
	x[0] = pub[2];
	x[1] = free_id(a, 4, 8);
	REL_FAILS(fd1, 2, "a FREE block");
	x[0] = a[3];
	REL_FAILS(fd1, 1, "an OWNED block");
	x[0] = pub[1];
	x[1] = 8;
	REL_FAILS(fd1, 2, "id == backed blocks");
	x[0] = 0xffffffffu;
	REL_FAILS(fd1, 1, "id ~0");
	x[0] = pub[1];
	x[1] = pub[1];
	REL_FAILS(fd1, 2, "pub[1] twice, one ref");
#undef REL_FAILS

	/* As often as held: fine. */
	x[0] = pub[0];
	x[1] = pub[0];
	EXPECT_EQ(0, kv_release(fd1, x, 2));
	CHECK_STATS(fd1, .published = 2, .cached = 1, .readers = 3, .my_refs = 2);
	EXPECT_EQ(-EINVAL, kv_release(fd1, x, 1));
	EXPECT_EQ(0, kv_release(fd2, &pub[1], 1));
	CHECK_STATS(fd1, .published = 2, .cached = 1, .readers = 2, .my_refs = 2);
	CHECK_STATS(fd2, .my_refs = 0);
	EXPECT_EQ(-EINVAL, kv_release(fd2, &pub[1], 1));
	close(fd2);
	close(fd1);
}

/* ---- eviction ------------------------------------------------------------------ */

TEST_F(prefix, refs_pin_blocks_against_eviction)
{
	struct kvpool_event ev[16];
	__u8 h[KVPOOL_HASH_BYTES];
	__u32 ids[8], pub[8], got[8], seen = 0, hits;
	int fd, i, j, n, np5 = 0;

	fd = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 8));
	memcpy(pub, ids, sizeof(pub));
	ASSERT_EQ(0, kv_publish_seq(fd, pub, 8, SEED, 0, NULL));
	/* Hashes 0..4 cached, 5..7 referenced. */
	for (i = 0; i < 5; i++)
		ASSERT_EQ(0, kv_release(fd, &pub[i], 1));
	CHECK_STATS(fd, .published = 3, .cached = 5, .readers = 3, .my_refs = 3);
	CHECK_INFO(fd, 8, 0, 0, 0);

	/* free 0 + cached 5 < 6: ENOSPC, and nothing is evicted. */
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, got, 6));
	CHECK_STATS(fd, .published = 3, .cached = 5, .readers = 3);
	EXPECT_EQ(0, evictions(fd, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(0, pressure(fd));
	CHECK_INFO(fd, 8, 0, 0, 0);

	/* Five fit: exactly the five cached blocks go. */
	ASSERT_EQ(0, kv_alloc(fd, got, 5));
	for (i = 0; i < 5; i++) {
		EXPECT_TRUE(id_in(got[i], pub, 5)) TH_LOG("got %u", got[i]);
		for (j = 0; j < i; j++)
			EXPECT_NE(got[j], got[i]);
	}
	CHECK_STATS(fd, .published = 3, .cached = 0, .readers = 3, .my_refs = 3);
	EXPECT_EQ(5, evictions(fd, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(0, evictions(fd, KVPOOL_EVICT_POOL));
	EXPECT_EQ(1, pressure(fd));
	CHECK_INFO(fd, 8, 0, 5, 5);
	for (i = 0; i < 5; i++)
		EXPECT_EQ(0, lookup1(fd, SEED, i, NULL)) TH_LOG("hash %d", i);
	ASSERT_EQ(0, kv_lookup_seq(fd, SEED, 5, 3, ids, NULL, &hits));
	EXPECT_EQ(3, hits);
	for (i = 0; i < 3; i++)
		EXPECT_EQ(pub[5 + i], ids[i]);

	/* Only referenced and owned blocks are left. */
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, got + 5, 1));
	EXPECT_EQ(5, evictions(fd, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(1, pressure(fd));
	CHECK_STATS(fd, .published = 3, .cached = 0, .readers = 6, .my_refs = 6);

	/* Events: pressure 0, 5 x EVICTED + pressure 5 (any order), pressure 0. */
	n = kv_read_events(fd, ev, 16);
	ASSERT_EQ(8, n);
	for (i = 0; i < n; i++)
		EXPECT_EQ(i + 1, ev[i].seq);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[0].type);
	EXPECT_EQ(0, ev[0].count);
	EXPECT_EQ(KVPOOL_EVICT_QUOTA, ev[0].cause);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[7].type);
	EXPECT_EQ(0, ev[7].count);
	for (i = 1; i < 7; i++) {
		if (ev[i].type == KVPOOL_EVENT_QUOTA_PRESSURE) {
			np5++;
			EXPECT_EQ(5, ev[i].count);
			EXPECT_EQ(KVPOOL_EVICT_QUOTA, ev[i].cause);
			continue;
		}
		EXPECT_EQ(KVPOOL_EVENT_EVICTED, ev[i].type);
		EXPECT_EQ(KVPOOL_EVICT_QUOTA, ev[i].cause);
		for (j = 0; j < 5; j++)
			if (pub[j] == ev[i].block)
				break;
		ASSERT_LT(j, 5) TH_LOG("EVICTED block %u", ev[i].block);
		seen |= 1u << j;
		kv_hash(h, SEED, j);
		EXPECT_EQ(0, memcmp(h, ev[i].hash, KVPOOL_HASH_BYTES));
	}
	EXPECT_EQ(1, np5);
	EXPECT_EQ(0x1f, seen);
	close(fd);
}

TEST_F(prefix, eviction_order_priority_then_lru)
{
	static const __u32 prio[8] = { 50, 10, 90, 10, 50, 0, 90, 50 };
	static const int rel[8] = { 7, 0, 3, 6, 1, 4, 2, 5 };
	/* prio 0: 5; prio 10 in release order: 3, 1; prio 50: 7, 0, 4; 90: 6, 2 */
	static const int order[8] = { 5, 3, 1, 7, 0, 4, 6, 2 };
	struct kvpool_publish_entry e[8];
	struct kvpool_space_open so;
	static char dump[1 << 16], sec[1 << 16];
	char want[64];
	__u32 ids[8], got;
	int fd, i, n;
	char *p;

	fd = kv_open_create(self->name, BB, Q8, &so);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, 8));
	for (i = 0; i < 8; i++)
		hent(&e[i], SEED, i, ids[i], prio[i]);
	ASSERT_EQ(0, kv_publish(fd, e, 8, KVPOOL_PUBLISH_PRIORITY, NULL));
	for (i = 0; i < 8; i++)
		ASSERT_EQ(0, kv_release(fd, &ids[rel[i]], 1));
	CHECK_STATS(fd, .published = 0, .cached = 8, .readers = 0);

	/* The debugfs lru dump lists them in eviction order. */
	ASSERT_LE(0, kv_debugfs_read("lru", dump, sizeof(dump)));
	n = kv_debugfs_section(dump, so.space_id, sec, sizeof(sec));
	EXPECT_EQ(8, n) TH_LOG("lru:\n%s", dump);
	p = sec;
	for (i = 0; i < 8 && p && *p; i++) {
		snprintf(want, sizeof(want), "block=%u prio=%u\n", ids[order[i]],
			 prio[order[i]]);
		EXPECT_EQ(0, strncmp(p, want, strlen(want)))
			TH_LOG("lru line %d: want %s section:\n%s", i, want, sec);
		p = strchr(p, '\n');
		if (p)
			p++;
	}

	/* ALLOC one at a time takes them in that order. */
	for (i = 0; i < 8; i++) {
		ASSERT_EQ(0, kv_alloc(fd, &got, 1));
		EXPECT_EQ(ids[order[i]], got)
			TH_LOG("eviction %d: want hash %d (block %u prio %u)", i,
			       order[i], ids[order[i]], prio[order[i]]);
		EXPECT_EQ(0, lookup1(fd, SEED, order[i], NULL));
		EXPECT_EQ(i + 1, evictions(fd, KVPOOL_EVICT_QUOTA));
	}
	EXPECT_EQ(8, pressure(fd));
	CHECK_STATS(fd, .published = 0, .cached = 0);
	CHECK_INFO(fd, 8, 0, 8, 8);
	close(fd);
}

TEST_F(prefix, lookup_and_release_make_block_newest)
{
	static const int order[4] = { 2, 3, 0, 1 };
	struct kvpool_space_open so;
	static char dump[1 << 16], sec[1 << 16];
	__u32 ids[4], more[4], got, hits;
	char want[64], *p;
	int fd, fd2, i;

	fd = kv_open_create(self->name, BB, Q8, &so);
	ASSERT_LE(0, fd);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	ASSERT_EQ(0, kv_publish_seq(fd, ids, 4, SEED, 0, NULL));
	for (i = 0; i < 4; i++)
		ASSERT_EQ(0, kv_release(fd, &ids[i], 1));
	/* LRU 0 1 2 3; a hit and release moves a block to the end. */
	ASSERT_EQ(0, kv_lookup_seq(fd, SEED, 0, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, kv_release(fd, &got, 1));
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 1, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, kv_release(fd2, &got, 1));
	ASSERT_LE(0, kv_debugfs_read("lru", dump, sizeof(dump)));
	ASSERT_EQ(4, kv_debugfs_section(dump, so.space_id, sec, sizeof(sec)));
	for (i = 0, p = sec; i < 4; i++) {
		snprintf(want, sizeof(want), "block=%u prio=%u\n", ids[order[i]],
			 KVPOOL_PRIO_DEFAULT);
		EXPECT_EQ(0, strncmp(p, want, strlen(want)))
			TH_LOG("lru line %d: want %s section:\n%s", i, want, sec);
		p = strchr(p, '\n');
		ASSERT_NE(NULL, p);
		p++;
	}
	/* The four free blocks go first, without evicting. */
	ASSERT_EQ(0, kv_alloc(fd, more, 4));
	for (i = 0; i < 4; i++)
		EXPECT_FALSE(id_in(more[i], ids, 4));
	EXPECT_EQ(0, evictions(fd, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(0, pressure(fd));
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(0, kv_alloc(fd2, &got, 1));
		EXPECT_EQ(ids[order[i]], got) TH_LOG("eviction %d", i);
	}
	close(fd2);
	close(fd);
}

TEST_F(prefix, dedup_keeps_existing_priority)
{
	struct kvpool_publish_entry e;
	struct kvpool_space_open so;
	static char dump[1 << 16], sec[1 << 16];
	__u32 a[2], b, got, more[6];
	char want[96], hex[2 * KVPOOL_HASH_BYTES + 1];
	__u8 h[KVPOOL_HASH_BYTES];
	int fd1, fd2;

	fd1 = kv_open_create(self->name, BB, Q8, &so);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd1, a, 2));
	hent(&e, SEED, 0, a[0], 90);
	ASSERT_EQ(0, kv_publish(fd1, &e, 1, KVPOOL_PUBLISH_PRIORITY, NULL));
	ASSERT_EQ(0, kv_alloc(fd2, &b, 1));
	hent(&e, SEED, 0, b, 0);
	ASSERT_EQ(0, kv_publish(fd2, &e, 1, KVPOOL_PUBLISH_PRIORITY, NULL));
	EXPECT_EQ(a[0], e.id);
	EXPECT_EQ(KVPOOL_PUBLISHED_DEDUP, e.flags);
	/* Hash 1 at the default priority. */
	ASSERT_EQ(0, kv_publish_seq(fd1, &a[1], 1, SEED, 1, NULL));
	ASSERT_LE(0, kv_debugfs_read("hashes", dump, sizeof(dump)));
	ASSERT_EQ(2, kv_debugfs_section(dump, so.space_id, sec, sizeof(sec)));
	kv_hash(h, SEED, 0);
	kv_hex(hex, h, KVPOOL_HASH_BYTES);
	snprintf(want, sizeof(want), "block=%u state=published readers=2 prio=90 hash=",
		 a[0]);
	EXPECT_NE(NULL, strstr(sec, want)) TH_LOG("want %s in\n%s", want, sec);
	EXPECT_NE(NULL, strcasestr(sec, hex)) TH_LOG("hash %s in\n%s", hex, sec);
	snprintf(want, sizeof(want), "block=%u state=published readers=1 prio=%u hash=",
		 a[1], KVPOOL_PRIO_DEFAULT);
	EXPECT_NE(NULL, strstr(sec, want)) TH_LOG("want %s in\n%s", want, sec);
	/* Release hash 0 first: the prio-50 block still goes first. */
	ASSERT_EQ(0, kv_release(fd1, &a[0], 1));
	ASSERT_EQ(0, kv_release(fd2, &a[0], 1));
	ASSERT_EQ(0, kv_release(fd1, &a[1], 1));
	/* 8 - 2 published = 6 free blocks first, then the prio-50 one. */
	ASSERT_EQ(0, kv_alloc(fd1, more, 6));
	EXPECT_EQ(0, evictions(fd1, KVPOOL_EVICT_QUOTA));
	ASSERT_EQ(0, kv_alloc(fd1, &got, 1));
	EXPECT_EQ(a[1], got);
	EXPECT_EQ(1, evictions(fd1, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(0, lookup1(fd1, SEED, 1, NULL));
	EXPECT_EQ(1, present(fd1, SEED, 0));
	close(fd2);
	close(fd1);
}

TEST_F(prefix, evicted_events_go_to_publishers_and_lookers)
{
	struct kvpool_event ev[8];
	__u8 h[KVPOOL_HASH_BYTES];
	__u32 a[2], got, hits, more[8];
	struct pollfd pfd;
	int fd1, fd2, fd3, n, i, ne;

	fd1 = kv_open_create(self->name, BB, Q8, NULL);
	ASSERT_LE(0, fd1);
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	fd3 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd3);
	ASSERT_EQ(0, kv_alloc(fd1, a, 2));
	ASSERT_EQ(0, kv_publish_seq(fd1, a, 2, SEED, 0, NULL));
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 0, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, kv_release(fd1, a, 2));
	ASSERT_EQ(0, kv_release(fd2, &got, 1));
	/* No events yet. */
	pfd.fd = fd1;
	pfd.events = POLLIN;
	EXPECT_EQ(0, poll(&pfd, 1, 0));
	EXPECT_EQ(0, kv_read_events(fd1, ev, 8));
	/* 6 free + 2 cached: fd3 takes all eight. */
	ASSERT_EQ(0, kv_alloc(fd3, more, 8));
	EXPECT_EQ(2, evictions(fd3, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(1, poll(&pfd, 1, 0));
	EXPECT_TRUE(pfd.revents & POLLIN);

	/* fd1 published both: two EVICTED and the pressure event. */
	n = kv_read_events(fd1, ev, 8);
	ASSERT_EQ(3, n);
	for (i = 0, ne = 0; i < n; i++) {
		EXPECT_EQ(i + 1, ev[i].seq);
		if (ev[i].type == KVPOOL_EVENT_QUOTA_PRESSURE) {
			EXPECT_EQ(2, ev[i].count);
			EXPECT_EQ(KVPOOL_EVICT_QUOTA, ev[i].cause);
			continue;
		}
		ASSERT_EQ(KVPOOL_EVENT_EVICTED, ev[i].type);
		EXPECT_EQ(KVPOOL_EVICT_QUOTA, ev[i].cause);
		ASSERT_TRUE(id_in(ev[i].block, a, 2));
		kv_hash(h, SEED, ev[i].block == a[0] ? 0 : 1);
		EXPECT_EQ(0, memcmp(h, ev[i].hash, KVPOOL_HASH_BYTES));
		ne++;
	}
	EXPECT_EQ(2, ne);
	EXPECT_EQ(0, poll(&pfd, 1, 0));
	/* fd2 looked up hash 0 only. */
	n = kv_read_events(fd2, ev, 8);
	ASSERT_EQ(2, n);
	for (i = 0, ne = 0; i < n; i++) {
		EXPECT_EQ(i + 1, ev[i].seq);
		if (ev[i].type == KVPOOL_EVENT_QUOTA_PRESSURE) {
			EXPECT_EQ(2, ev[i].count);
			continue;
		}
		ASSERT_EQ(KVPOOL_EVENT_EVICTED, ev[i].type);
		EXPECT_EQ(a[0], ev[i].block);
		kv_hash(h, SEED, 0);
		EXPECT_EQ(0, memcmp(h, ev[i].hash, KVPOOL_HASH_BYTES));
		ne++;
	}
	EXPECT_EQ(1, ne);
	/* fd3 neither published nor looked up: only the pressure event. */
	n = kv_read_events(fd3, ev, 8);
	ASSERT_EQ(1, n);
	EXPECT_PRESSURE_EVENT(ev[0], 1, 2, KVPOOL_EVICT_QUOTA);
	/* A failed ALLOC: pressure with count 0 to every fd. */
	EXPECT_EQ(-ENOSPC, kv_alloc(fd2, &got, 1));
	for (i = 0; i < 3; i++) {
		int f = i == 0 ? fd1 : i == 1 ? fd2 : fd3;

		n = kv_read_events(f, ev, 8);
		ASSERT_EQ(1, n) TH_LOG("fd %d", i + 1);
		EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[0].type);
		EXPECT_EQ(0, ev[0].count);
		EXPECT_EQ(i == 0 ? 4 : i == 1 ? 3 : 2, ev[0].seq);
	}
	close(fd3);
	close(fd2);
	close(fd1);
}

TEST_F(prefix, pool_eviction_takes_only_own_cached_blocks)
{
	const long max = 2 * KV_POOL_DEFAULT / KV_CHUNK;
	char other[KVPOOL_NAME_MAX];
	__u32 *ids, id, idb;
	long n;
	int fd, fdb, err;

	ids = calloc(max, sizeof(*ids));
	ASSERT_NE(NULL, ids);
	/* The quota is larger than the pool: the pool runs out first. */
	fd = kv_open_create(self->name, KV_CHUNK, max * KV_CHUNK, NULL);
	ASSERT_LE(0, fd);
	n = kv_alloc_until_fail(fd, ids, max, &err);
	ASSERT_EQ(-ENOSPC, err);
	ASSERT_EQ(self->free0 / KV_CHUNK, n);
	ASSERT_LE(2, n);
	id = ids[0];
	ASSERT_EQ(0, kv_publish_seq(fd, &id, 1, SEED, 0, NULL));
	id = ids[1];
	ASSERT_EQ(0, kv_publish_seq(fd, &id, 1, SEED, 1, NULL));
	ASSERT_EQ(0, kv_release(fd, &ids[0], 1));
	ASSERT_EQ(0, kv_release(fd, &ids[1], 1));
	CHECK_STATS(fd, .cached = 2, .published = 0);

	/* Another space cannot take this space's cached blocks. */
	kv_name(other, sizeof(other), "prefix-b");
	fdb = kv_open_create(other, 64 * KiB, 4 * MiB, NULL);
	ASSERT_LE(0, fdb);
	EXPECT_EQ(-ENOSPC, kv_alloc(fdb, &idb, 1));
	CHECK_STATS(fd, .cached = 2);
	EXPECT_EQ(0, evictions(fd, KVPOOL_EVICT_POOL));

	/* The space itself evicts its oldest cached block: cause POOL. */
	ASSERT_EQ(0, kv_alloc(fd, &id, 1));
	EXPECT_EQ(ids[0], id);
	EXPECT_EQ(1, evictions(fd, KVPOOL_EVICT_POOL));
	EXPECT_EQ(0, evictions(fd, KVPOOL_EVICT_QUOTA));
	EXPECT_EQ(0, lookup1(fd, SEED, 0, NULL));
	EXPECT_EQ(1, present(fd, SEED, 1));
	close(fdb);
	close(fd);
	EXPECT_EQ(self->free0, sysfs_get("free_bytes"));
	free(ids);
}

/* ---- data ------------------------------------------------------------------------ */

/* Child: join, map, look the two hashes up, check the data, send the ids. */
static int data_child(const char *name, int wr)
{
	struct kvpool_space_open so;
	__u32 ids[2], hits = 0;
	char *m;
	int fd, i;

	fd = kv_child_join_map(name, &so, &m);
	if (fd < 0)
		return -fd;
	if (kv_lookup_seq(fd, SEED, 0, 2, ids, NULL, &hits))
		return 12;
	if (hits != 2)
		return 13;
	for (i = 0; i < 2; i++)
		if (kv_verify(m + (size_t)ids[i] * BB, BB, 0x77 + i, 0) != -1)
			return 14 + i;
	if (write(wr, ids, sizeof(ids)) != sizeof(ids))
		return 16;
	return 0;
}

TEST_F(prefix, data_written_before_publish_visible_to_other_process)
{
	struct kvpool_space_open so;
	__u32 ids[2], pub[2], theirs[2];
	int fd, p[2];
	pid_t pid;
	char *m;

	fd = kv_open_create(self->name, BB, Q8, &so);
	ASSERT_LE(0, fd);
	m = kv_mmap(fd, so.map_bytes, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, kv_alloc(fd, ids, 2));
	ASSERT_EQ(0, kv_fill_and_publish(fd, m, BB, ids, pub, 2, 0x77, SEED));
	/* Released: the blocks are CACHED and keep their data. */
	ASSERT_EQ(0, kv_release(fd, pub, 2));
	munmap(m, so.map_bytes);
	ASSERT_EQ(0, pipe(p));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(fd);
		close(p[0]);
		_exit(data_child(self->name, p[1]));
	}
	close(p[1]);
	EXPECT_EQ(0, kv_wait(pid));
	ASSERT_EQ(sizeof(theirs), read(p[0], theirs, sizeof(theirs)));
	EXPECT_EQ(ids[0], theirs[0]);
	EXPECT_EQ(ids[1], theirs[1]);
	close(p[0]);
	CHECK_STATS(fd, .hits = 2, .cached = 2, .readers = 0);
	close(fd);
}

/* ---- sysfs and debugfs ------------------------------------------------------------ */

static void expect_space_attr(struct __test_metadata *_metadata, __u32 id,
			      const char *attr, __u64 want)
{
	EXPECT_EQ(want, kv_space_sysfs_get(id, attr)) TH_LOG("space/%u/%s", id, attr);
}

TEST_F(prefix, sysfs_space_dir_and_debugfs_dumps_match)
{
	static const __u32 prio[5] = { 10, 50, 90, 50, 0 };
	/* block state after the scenario: readers (-1: cached) */
	static const int readers[5] = { 2, 1, 2, -1, -1 };
	struct kvpool_publish_entry e[5];
	struct kvpool_space_open so;
	static char dump[1 << 16], sec[1 << 16];
	char buf[256], want[256], hex[2 * KVPOOL_HASH_BYTES + 1];
	__u64 hits0, misses0, ins0, ded0, cached0, pub0;
	__u32 a[6], got[4], hits;
	__u8 h[KVPOOL_HASH_BYTES];
	int fd1, fd2, i;

	hits0 = sysfs_get("prefix_hits");
	misses0 = sysfs_get("prefix_misses");
	ins0 = sysfs_get("prefix_inserts");
	ded0 = sysfs_get("prefix_dedups");
	cached0 = sysfs_get("cached_bytes");
	pub0 = sysfs_get("published_bytes");
	ASSERT_NE(~0ULL, hits0);
	ASSERT_NE(~0ULL, cached0);

	fd1 = kv_open_create(self->name, BB, Q8, &so);
	ASSERT_LE(0, fd1);
	ASSERT_TRUE(kv_space_sysfs_exists(so.space_id));
	ASSERT_EQ(0, kv_alloc(fd1, a, 6));
	for (i = 0; i < 5; i++)
		hent(&e[i], SEED, i, a[i], prio[i]);
	ASSERT_EQ(0, kv_publish(fd1, e, 5, KVPOOL_PUBLISH_PRIORITY, NULL));
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	/* Hashes 0, 1, 2 hit, then a miss. */
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 0, 3, got, NULL, &hits));
	ASSERT_EQ(3, hits);
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 9, 1, got, NULL, &hits));
	ASSERT_EQ(0, hits);
	ASSERT_EQ(0, kv_release(fd1, &a[3], 1));
	ASSERT_EQ(0, kv_release(fd1, &a[4], 1));
	ASSERT_EQ(0, kv_release(fd1, &a[1], 1));	/* fd2 still holds it */
	CHECK_STATS(fd1, .inserts = 5, .dedups = 0, .hits = 3, .misses = 1,
		    .published = 3, .cached = 2, .readers = 5, .my_refs = 2);

	/* space/ID/ */
	ASSERT_LT(0, kv_space_sysfs(so.space_id, "name", buf, sizeof(buf)));
	snprintf(want, sizeof(want), "%s\n", self->name);
	EXPECT_STREQ(want, buf);
	expect_space_attr(_metadata, so.space_id, "uid", getuid());
	expect_space_attr(_metadata, so.space_id, "persistent", 0);
	expect_space_attr(_metadata, so.space_id, "clients", 2);
	expect_space_attr(_metadata, so.space_id, "block_bytes", BB);
	expect_space_attr(_metadata, so.space_id, "quota_bytes", Q8);
	expect_space_attr(_metadata, so.space_id, "backed_bytes", Q8);
	expect_space_attr(_metadata, so.space_id, "free_blocks", 2);
	expect_space_attr(_metadata, so.space_id, "owned_blocks", 1);
	expect_space_attr(_metadata, so.space_id, "published_blocks", 3);
	expect_space_attr(_metadata, so.space_id, "cached_blocks", 2);
	expect_space_attr(_metadata, so.space_id, "hole_blocks", 0);
	expect_space_attr(_metadata, so.space_id, "hits", 3);
	expect_space_attr(_metadata, so.space_id, "misses", 1);
	expect_space_attr(_metadata, so.space_id, "hit_rate", 750);
	expect_space_attr(_metadata, so.space_id, "inserts", 5);
	expect_space_attr(_metadata, so.space_id, "dedups", 0);
	ASSERT_LT(0, kv_space_sysfs(so.space_id, "evictions", buf, sizeof(buf)));
	EXPECT_STREQ("quota=0 pool=0 tenant=0 reclaim=0 admin=0\n", buf);

	/* Pool-wide counters moved by exactly this scenario. */
	EXPECT_EQ(hits0 + 3, sysfs_get("prefix_hits"));
	EXPECT_EQ(misses0 + 1, sysfs_get("prefix_misses"));
	EXPECT_EQ(ins0 + 5, sysfs_get("prefix_inserts"));
	EXPECT_EQ(ded0, sysfs_get("prefix_dedups"));
	EXPECT_EQ(cached0 + 2 * BB, sysfs_get("cached_bytes"));
	EXPECT_EQ(pub0 + 3 * BB, sysfs_get("published_bytes"));

	/* debugfs hashes: one line per published or cached block. */
	ASSERT_LE(0, kv_debugfs_read("hashes", dump, sizeof(dump)));
	EXPECT_EQ(5, kv_debugfs_section(dump, so.space_id, sec, sizeof(sec)))
		TH_LOG("hashes:\n%s", dump);
	for (i = 0; i < 5; i++) {
		kv_hash(h, SEED, i);
		kv_hex(hex, h, KVPOOL_HASH_BYTES);
		if (readers[i] < 0)
			snprintf(want, sizeof(want),
				 "block=%u state=cached readers=0 prio=%u hash=%s\n",
				 a[i], prio[i], hex);
		else
			snprintf(want, sizeof(want),
				 "block=%u state=published readers=%d prio=%u hash=%s\n",
				 a[i], readers[i], prio[i], hex);
		EXPECT_NE(NULL, strcasestr(sec, want))
			TH_LOG("want %s in\n%s", want, sec);
	}
	/* debugfs lru: the cached ones, prio 0 first. */
	ASSERT_LE(0, kv_debugfs_read("lru", dump, sizeof(dump)));
	ASSERT_EQ(2, kv_debugfs_section(dump, so.space_id, sec, sizeof(sec)));
	snprintf(want, sizeof(want), "block=%u prio=0\nblock=%u prio=50\n",
		 a[4], a[3]);
	EXPECT_STREQ(want, sec);

	/* One eviction shows everywhere. */
	ASSERT_EQ(0, kv_alloc(fd1, got, 3));
	ASSERT_LT(0, kv_space_sysfs(so.space_id, "evictions", buf, sizeof(buf)));
	EXPECT_STREQ("quota=1 pool=0 tenant=0 reclaim=0 admin=0\n", buf);
	expect_space_attr(_metadata, so.space_id, "cached_blocks", 1);
	expect_space_attr(_metadata, so.space_id, "owned_blocks", 4);
	expect_space_attr(_metadata, so.space_id, "free_blocks", 0);
	EXPECT_EQ(cached0 + BB, sysfs_get("cached_bytes"));
	ASSERT_LE(0, kv_debugfs_read("lru", dump, sizeof(dump)));
	ASSERT_EQ(1, kv_debugfs_section(dump, so.space_id, sec, sizeof(sec)));
	snprintf(want, sizeof(want), "block=%u prio=50\n", a[3]);
	EXPECT_STREQ(want, sec);
	expect_space_attr(_metadata, so.space_id, "clients", 2);
	close(fd2);
	expect_space_attr(_metadata, so.space_id, "clients", 1);
	close(fd1);
	/* Gone with the space. */
	EXPECT_FALSE(kv_space_sysfs_exists(so.space_id));
	ASSERT_LE(0, kv_debugfs_read("hashes", dump, sizeof(dump)));
	EXPECT_EQ(-1, kv_debugfs_section(dump, so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(cached0, sysfs_get("cached_bytes"));
	EXPECT_EQ(pub0, sysfs_get("published_bytes"));
}

TEST_HARNESS_MAIN
