// SPDX-License-Identifier: GPL-2.0
/*
 * KUnit tests of kvcore's pure logic: block ids and backing arithmetic,
 * all-or-nothing allocation, quota accounting, FREE validation, owner
 * release, the prefix cache (publish, lookup, release, eviction order and
 * causes, holes), the accounting check and the NUMA node order.
 *
 * Built as kvpool_kunit.ko only against a kernel with CONFIG_KUNIT (the
 * debug kernel of `make check-debug`); the suites run when the module is
 * loaded and their TAP is in /sys/kernel/debug/kunit/<suite>/results.
 *
 * The module carries its own copy of kvcore (the #include below), so it
 * needs nothing from kvpool.ko and tests exactly the code that module runs.
 * Every expected value is written out by hand from the contract in
 * kvcore.h, not computed by a second implementation.
 */
#include <kunit/test.h>
#include <linux/module.h>
#include <linux/string.h>

#include "../core/kvcore.c"

#define KB(x) ((kvc_u64)(x) * 1024)
#define SENTINEL 0xdeadbeefU
#define MAX_GROWS 16
#define MAX_EVICTED 16
#define NR_REFS 3

/* The host side of one space: a pool that hands out fixed-size pieces. */
struct fake_host {
	kvc_u64 piece;		/* bytes added per grow call; 0: exactly what is wanted */
	kvc_u64 limit;		/* bytes the host can give in all; 0: no limit */
	kvc_u64 given;
	long long fail;		/* when non-zero, grow returns this */
	unsigned int calls;
	kvc_u64 wants[MAX_GROWS];
	int refill_ret;		/* what refill returns */
	unsigned int refills;
	kvc_u64 refill_start[MAX_GROWS], refill_len[MAX_GROWS];
	unsigned int nr_evicted;
	kvc_u32 evicted[MAX_EVICTED];
	unsigned int causes[MAX_EVICTED];
	unsigned int evicted_still_indexed;	/* evicted called with the hash still found */
};

struct kvt {
	struct kvc_space s;
	struct fake_host host;
	struct kvc_refs refs[NR_REFS];	/* reader references of owners 0..2 */
	char msg[128];
};

static long long fake_grow(struct kvc_space *s, kvc_u64 want)
{
	struct fake_host *h = s->host;
	kvc_u64 n;

	if (h->calls < MAX_GROWS)
		h->wants[h->calls] = want;
	h->calls++;
	if (h->fail)
		return h->fail;
	n = h->piece ? h->piece : want;
	if (h->limit && n > h->limit - h->given)
		n = h->limit - h->given;
	h->given += n;
	return (long long)n;
}

static int fake_refill(struct kvc_space *s, kvc_u64 start, kvc_u64 len)
{
	struct fake_host *h = s->host;

	if (h->refills < MAX_GROWS) {
		h->refill_start[h->refills] = start;
		h->refill_len[h->refills] = len;
	}
	h->refills++;
	return h->refill_ret;
}

static void fake_evicted(struct kvc_space *s, kvc_u32 id, const kvc_u8 *hash, unsigned int cause)
{
	struct fake_host *h = s->host;

	if (h->nr_evicted < MAX_EVICTED) {
		h->evicted[h->nr_evicted] = id;
		h->causes[h->nr_evicted] = cause;
	}
	h->nr_evicted++;
	if (kvc_find(s, hash) != KVC_NONE)
		h->evicted_still_indexed++;
}

static const struct kvc_space_ops fake_ops = {
	.grow = fake_grow,
	.refill = fake_refill,
	.evicted = fake_evicted,
};

static int kvt_init(struct kunit *test)
{
	struct kvt *t = kunit_kzalloc(test, sizeof(*t), GFP_KERNEL);

	if (!t)
		return -ENOMEM;
	test->priv = t;
	return 0;
}

static void kvt_exit(struct kunit *test)
{
	struct kvt *t = test->priv;
	unsigned int i;

	for (i = 0; i < NR_REFS; i++)
		kvc_release_refs(&t->s, &t->refs[i]);
	kvc_space_fini(&t->s);
}

/* A space of nr_blocks blocks of block_bytes on a host that adds piece bytes a call. */
static struct kvt *kvt_space(struct kunit *test, kvc_u64 block_bytes, kvc_u64 nr_blocks,
			     kvc_u64 piece, kvc_u64 limit)
{
	struct kvt *t = test->priv;

	t->host.piece = piece;
	t->host.limit = limit;
	KUNIT_ASSERT_EQ(test,
			kvc_space_init(&t->s, block_bytes, nr_blocks, &fake_ops, &t->host), 0);
	return t;
}

static void expect_ids(struct kunit *test, const kvc_u32 *got, const kvc_u32 *want, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		KUNIT_EXPECT_EQ_MSG(test, got[i], want[i], "ids[%u]", i);
}

static void expect_check_ok(struct kunit *test, struct kvt *t)
{
	t->msg[0] = '\0';
	KUNIT_EXPECT_EQ_MSG(test, kvc_space_check(&t->s, t->msg, sizeof(t->msg)), 0,
			    "check: %s", t->msg);
}

static void fill(kvc_u32 *ids, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		ids[i] = SENTINEL;
}

/* --- kvcore_alloc: ids, backing, all or nothing --------------------------- */

static void init_rejects_bad_geometry(struct kunit *test)
{
	struct kvt *t = test->priv;
	static const struct kvc_space_ops no_grow = { .grow = NULL };

	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 0, 8, &fake_ops, NULL), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 4096, 0, &fake_ops, NULL), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 4096, (1ULL << 31) + 1, &fake_ops, NULL),
			-EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 4096, 8, NULL, NULL), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 4096, 8, &no_grow, NULL), -EINVAL);
	/* 2^40 * 2^30 bytes does not fit in 64 bits. */
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 1ULL << 40, 1ULL << 30, &fake_ops, NULL),
			-EINVAL);
	/* 2^33 * 2^31 == 2^64 wraps to 0; 2^32 * 2^31 == 2^63 fits. */
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 1ULL << 33, 1ULL << 31, &fake_ops, NULL),
			-EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_space_init(&t->s, 1ULL << 32, 1ULL << 31, &fake_ops, NULL), 0);
	KUNIT_EXPECT_EQ(test, t->s.nr_blocks, 1ULL << 31);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.capacity, 0ULL);
}

static void alloc_rejects_zero_count_and_owner(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 8, KB(16), 0);
	kvc_u32 ids[1] = { SENTINEL };

	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 0, ids), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, KVC_OWNER_NONE, 1, ids), -EINVAL);
	KUNIT_EXPECT_EQ(test, ids[0], SENTINEL);
	KUNIT_EXPECT_EQ(test, t->host.calls, 0U);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, 0ULL);
	expect_check_ok(test, t);
}

/* 4 KiB blocks, 16 KiB pieces: four blocks per grow, lowest new id first. */
static void alloc_ids_and_backing(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 64, KB(16), 0);
	kvc_u32 ids[8];
	static const kvc_u32 first[] = { 0, 1, 2 };
	/* Block 3 stays at the bottom of the stack; 7 6 5 4 go on top of it. */
	static const kvc_u32 second[] = { 4, 5 };
	static const kvc_u32 third[] = { 6, 7, 3 };

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 3, ids), 0);
	expect_ids(test, ids, first, 3);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	KUNIT_EXPECT_EQ(test, t->host.wants[0], KB(12));
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(16));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 3ULL);
	/* The arrays start at 64 entries, capped by the range (64 here). */
	KUNIT_EXPECT_EQ(test, t->s.capacity, 64ULL);

	/* One free block, two wanted: grow by the one block that is missing. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 2, ids), 0);
	expect_ids(test, ids, second, 2);
	KUNIT_EXPECT_EQ(test, t->host.calls, 2U);
	KUNIT_EXPECT_EQ(test, t->host.wants[1], KB(4));
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(32));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 8ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 3ULL);

	/* Three free blocks serve three without growing. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 3, ids), 0);
	expect_ids(test, ids, third, 3);
	KUNIT_EXPECT_EQ(test, t->host.calls, 2U);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 8ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.allocs, 8ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.alloc_failures, 0ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 5ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 2), 3ULL);
	expect_check_ok(test, t);
}

/*
 * 12 KiB blocks on 8 KiB pieces: a block straddles two grows, and a grow
 * can complete no block, one block, or finish one and start the next.
 */
static void alloc_blocks_straddle_grows(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(12), 16, KB(8), 0);
	kvc_u32 ids[4];
	static const kvc_u64 wants[] = { KB(12), KB(4), KB(8), KB(24), KB(16), KB(8) };
	static const kvc_u32 third[] = { 3, 2 };
	unsigned int i;

	/* 8 KiB: no block yet; 16 KiB: block 0, 4 KiB of block 1. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, ids[0], 0U);
	KUNIT_EXPECT_EQ(test, t->host.calls, 2U);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(16));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 0ULL);
	expect_check_ok(test, t);

	/* 24 KiB: block 1 completes exactly. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, ids[0], 1U);
	KUNIT_EXPECT_EQ(test, t->host.calls, 3U);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(24));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 2ULL);

	/* 32 KiB: nothing new; 40 KiB: block 2; 48 KiB: block 3 (on top). */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 2, ids), 0);
	expect_ids(test, ids, third, 2);
	KUNIT_EXPECT_EQ(test, t->host.calls, 6U);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(48));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 4ULL);
	for (i = 0; i < ARRAY_SIZE(wants); i++)
		KUNIT_EXPECT_EQ_MSG(test, t->host.wants[i], wants[i], "grow %u", i);
	expect_check_ok(test, t);
}

/* A host that adds a whole 1 MiB chunk to a 2-block range: clipped to the range. */
static void alloc_clips_backing_to_range(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 2, KB(1024), 0);
	kvc_u32 ids[2];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(8));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.capacity, 2ULL);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids + 1), 0);
	KUNIT_EXPECT_EQ(test, ids[0], 0U);
	KUNIT_EXPECT_EQ(test, ids[1], 1U);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), -ENOSPC);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	expect_check_ok(test, t);
}

/* The host runs dry after 3 blocks: a request for 5 fails and hands out nothing. */
static void alloc_all_or_nothing(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 10, KB(4), KB(12));
	kvc_u32 ids[5];
	static const kvc_u32 got[] = { 2, 1, 0 };
	unsigned int i;

	fill(ids, 5);
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 5, ids), -ENOSPC);
	for (i = 0; i < 5; i++)
		KUNIT_EXPECT_EQ_MSG(test, ids[i], SENTINEL, "ids[%u] written by a failed alloc", i);
	/* Three grows of one block, then one that returns 0. */
	KUNIT_EXPECT_EQ(test, t->host.calls, 4U);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.allocs, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.alloc_failures, 1ULL);
	/* Backing stays: the blocks it made are free. */
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(12));
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 3ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 3ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 0ULL);
	expect_check_ok(test, t);

	/* Blocks pushed one grow at a time: 0 at the bottom, 2 on top. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 3, ids), 0);
	expect_ids(test, ids, got, 3);
	KUNIT_EXPECT_EQ(test, t->host.calls, 4U);
	expect_check_ok(test, t);
}

static void alloc_passes_grow_errors(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 8, KB(4), 0);
	kvc_u32 ids[2] = { SENTINEL, SENTINEL };

	t->host.fail = -ENOMEM;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), -ENOMEM);
	t->host.fail = -EINTR;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), -EINTR);
	/* Not an errno: it must not be truncated into one. */
	t->host.fail = -5000;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), -EIO);
	t->host.fail = -(1LL << 32) - ENOMEM;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), -EIO);
	KUNIT_EXPECT_EQ(test, t->s.stats.alloc_failures, 4ULL);
	KUNIT_EXPECT_EQ(test, ids[0], SENTINEL);
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, 0ULL);

	/* A grow that adds nothing is ENOSPC. */
	t->host.fail = 0;
	t->host.limit = KB(4);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids + 1), -ENOSPC);
	KUNIT_EXPECT_EQ(test, ids[1], SENTINEL);
	KUNIT_EXPECT_EQ(test, t->s.stats.alloc_failures, 5ULL);
	expect_check_ok(test, t);
}

static struct kunit_case kvcore_alloc_cases[] = {
	KUNIT_CASE(init_rejects_bad_geometry),
	KUNIT_CASE(alloc_rejects_zero_count_and_owner),
	KUNIT_CASE(alloc_ids_and_backing),
	KUNIT_CASE(alloc_blocks_straddle_grows),
	KUNIT_CASE(alloc_clips_backing_to_range),
	KUNIT_CASE(alloc_all_or_nothing),
	KUNIT_CASE(alloc_passes_grow_errors),
	{}
};

static struct kunit_suite kvcore_alloc_suite = {
	.name = "kvcore_alloc",
	.init = kvt_init,
	.exit = kvt_exit,
	.test_cases = kvcore_alloc_cases,
};

/* --- kvcore_quota: the range is the quota ----------------------------------- */

static void quota_enospc_at_nr_blocks(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 8, 0, 0);
	kvc_u32 ids[9];

	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 9, ids), -ENOSPC);
	/* Over the quota is known before the host is asked. */
	KUNIT_EXPECT_EQ(test, t->host.calls, 0U);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 8, ids), 0);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	KUNIT_EXPECT_EQ(test, t->host.wants[0], KB(32));
	KUNIT_EXPECT_EQ(test, t->s.backed_bytes, KB(32));
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), -ENOSPC);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	KUNIT_EXPECT_EQ(test, t->s.stats.alloc_failures, 2ULL);

	/* One freed block can be had again, and only one. */
	ids[0] = 6;
	KUNIT_ASSERT_EQ(test, kvc_free(&t->s, 1, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 2, ids), -ENOSPC);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, ids[0], 6U);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 7ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 2), 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.allocs, 9ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.frees, 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.alloc_failures, 3ULL);
	expect_check_ok(test, t);
}

/* Free blocks plus the unbacked rest of the range is what a request may take. */
static void quota_counts_free_and_unbacked(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 6, KB(8), 0);
	kvc_u32 ids[6];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), 0);	/* backs 2, 1 free */
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 1ULL);
	/* 1 free + 4 unbacked = 5 */
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 6, ids), -ENOSPC);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 5, ids), 0);
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 6ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 6ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 1ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 2), 5ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 3), 0ULL);
	expect_check_ok(test, t);
}

/* A range larger than the initial array size: the arrays double, keeping state. */
static void quota_arrays_grow_keep_state(struct kunit *test)
{
	struct kvt *t = kvt_space(test, 64, 200, 64 * 70, 0);
	kvc_u32 ids[130];
	unsigned int i;

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 60, ids), 0);	/* backs 70 */
	KUNIT_EXPECT_EQ(test, t->s.capacity, 128ULL);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 130, ids), 0);	/* backs 140, 200 */
	/* Doubling 128 would give 256: capped at the range. */
	KUNIT_EXPECT_EQ(test, t->s.capacity, 200ULL);
	KUNIT_EXPECT_EQ(test, t->s.backed_blocks, 200ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 10ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 60ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 2), 130ULL);
	/* Owner 1 kept blocks 0..59 across the move. */
	for (i = 0; i < 60; i++)
		KUNIT_EXPECT_EQ_MSG(test, t->s.blocks[i].owner, 1U, "block %u", i);
	expect_check_ok(test, t);
}

static struct kunit_case kvcore_quota_cases[] = {
	KUNIT_CASE(quota_enospc_at_nr_blocks),
	KUNIT_CASE(quota_counts_free_and_unbacked),
	KUNIT_CASE(quota_arrays_grow_keep_state),
	{}
};

static struct kunit_suite kvcore_quota_suite = {
	.name = "kvcore_quota",
	.init = kvt_init,
	.exit = kvt_exit,
	.test_cases = kvcore_quota_cases,
};

/* --- kvcore_free: validation errnos, release_owner ---------------------------- */

/* Owner 1 holds blocks 0..3, owner 2 holds 4 and 5, blocks 6 and 7 are free. */
static struct kvt *kvt_eight(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 16, KB(32), 0);
	kvc_u32 ids[4];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 4, ids), 0);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 2, ids), 0);
	KUNIT_ASSERT_EQ(test, t->s.backed_blocks, 8ULL);
	KUNIT_ASSERT_EQ(test, t->s.nr_free, 2ULL);
	return t;
}

static void expect_unchanged(struct kunit *test, struct kvt *t)
{
	unsigned int i;

	for (i = 0; i < 8; i++) {
		kvc_u32 owner = i < 4 ? 1 : i < 6 ? 2 : KVC_OWNER_NONE;

		KUNIT_EXPECT_EQ_MSG(test, t->s.blocks[i].owner, owner, "block %u", i);
		KUNIT_EXPECT_EQ_MSG(test, t->s.blocks[i].state,
				    owner ? KVC_BLOCK_OWNED : KVC_BLOCK_FREE, "block %u", i);
	}
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 6ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.frees, 0ULL);
	expect_check_ok(test, t);
}

static void free_validation_errnos(struct kunit *test)
{
	struct kvt *t = kvt_eight(test);
	static const kvc_u32 out_of_range[] = { 0, 8 };
	static const kvc_u32 far_out[] = { 0xffffffffU };
	static const kvc_u32 twice[] = { 1, 2, 1 };
	static const kvc_u32 other_owner[] = { 0, 4 };
	static const kvc_u32 free_block[] = { 6 };
	static const kvc_u32 eperm_first[] = { 4, 99 };
	static const kvc_u32 einval_first[] = { 99, 4 };
	kvc_u32 none[1] = { 0 };

	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 0, none), -EINVAL);
	/* Block 8 is in the range (16) but not backed. */
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 2, out_of_range), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 1, far_out), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 3, twice), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 2, other_owner), -EPERM);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 1, free_block), -EPERM);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, KVC_OWNER_NONE, 1, free_block), -EPERM);
	/* The first bad id decides. */
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 2, eperm_first), -EPERM);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 2, einval_first), -EINVAL);
	/* Nothing above changed a block, and the batch marks are all gone. */
	expect_unchanged(test, t);
}

static void free_is_all_or_nothing(struct kunit *test)
{
	struct kvt *t = kvt_eight(test);
	static const kvc_u32 bad_last[] = { 0, 1, 2, 5 };
	static const kvc_u32 good[] = { 2, 0 };
	kvc_u32 ids[3];
	static const kvc_u32 realloc[] = { 0, 2, 6 };

	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 4, bad_last), -EPERM);
	expect_unchanged(test, t);
	/* The same blocks in a valid batch free; a duplicate of an earlier batch does not. */
	KUNIT_ASSERT_EQ(test, kvc_free(&t->s, 1, 2, good), 0);
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 1, good), -EPERM);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.frees, 2ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 2ULL);
	/* LIFO: the stack was [7 6] (6 on top), then 2 and 0 were pushed. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 3, 3, ids), 0);
	expect_ids(test, ids, realloc, 3);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	expect_check_ok(test, t);
}

static void release_owner_frees_only_its_blocks(struct kunit *test)
{
	struct kvt *t = kvt_eight(test);
	kvc_u32 ids[4];
	/* Released in id order onto the stack [7 6]: 0 1 2 3, so 3 comes out first. */
	static const kvc_u32 after[] = { 3, 2, 1, 0 };

	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, 3), 0ULL);
	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, KVC_OWNER_NONE), 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 2ULL);
	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, 1), 4ULL);
	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, 1), 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 6ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.frees, 4ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 1), 0ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 2), 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.blocks[4].owner, 2U);
	KUNIT_EXPECT_EQ(test, t->s.blocks[5].owner, 2U);
	expect_check_ok(test, t);
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 4, 4, ids), 0);
	expect_ids(test, ids, after, 4);

	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, 2), 2ULL);
	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, 4), 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 8ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.frees, 10ULL);
	expect_check_ok(test, t);
}

static struct kunit_case kvcore_free_cases[] = {
	KUNIT_CASE(free_validation_errnos),
	KUNIT_CASE(free_is_all_or_nothing),
	KUNIT_CASE(release_owner_frees_only_its_blocks),
	{}
};

static struct kunit_suite kvcore_free_suite = {
	.name = "kvcore_free",
	.init = kvt_init,
	.exit = kvt_exit,
	.test_cases = kvcore_free_cases,
};

/* --- kvcore_check: corruption is detected, and the check changes nothing ------ */

static void expect_corrupt(struct kunit *test, struct kvt *t, const char *what)
{
	t->msg[0] = '\0';
	KUNIT_EXPECT_EQ(test, kvc_space_check(&t->s, t->msg, sizeof(t->msg)), -EUCLEAN);
	KUNIT_EXPECT_NOT_NULL_MSG(test, strstr(t->msg, what), "message '%s' lacks '%s'",
				  t->msg, what);
}

static void check_detects_corruption(struct kunit *test)
{
	struct kvt *t = kvt_eight(test);
	struct kvc_block saved;
	kvc_u32 slot;

	expect_check_ok(test, t);

	saved = t->s.blocks[2];
	t->s.blocks[2].state = 5;
	expect_corrupt(test, t, "block 2: bad state");
	t->s.blocks[2] = saved;

	/* Owned by nobody, and free with an owner. */
	saved = t->s.blocks[3];
	t->s.blocks[3].owner = KVC_OWNER_NONE;
	expect_corrupt(test, t, "block 3: owner does not match state");
	t->s.blocks[3] = saved;
	saved = t->s.blocks[6];
	t->s.blocks[6].owner = 9;
	expect_corrupt(test, t, "block 6: owner does not match state");
	t->s.blocks[6] = saved;

	/* Counters that disagree with the blocks. */
	t->s.nr_free++;
	expect_corrupt(test, t, "free 3/2 ");
	t->s.nr_free--;
	t->s.nr_owned--;
	expect_corrupt(test, t, "owned 5/6 ");
	t->s.nr_owned++;
	t->s.backed_blocks = 3;
	expect_corrupt(test, t, "backed 3 readers");
	t->s.backed_blocks = 8;
	t->s.backed_bytes = KB(28);
	expect_corrupt(test, t, "backed_bytes 28672 backed_blocks 8 disagree");
	t->s.backed_bytes = KB(4) * 17;
	expect_corrupt(test, t, "backed_bytes 69632 backed_blocks 8 disagree");
	t->s.backed_bytes = KB(32);

	/* The stack: [7 6] bottom to top. */
	KUNIT_ASSERT_EQ(test, t->s.free_stack[0], 7U);
	KUNIT_ASSERT_EQ(test, t->s.free_stack[1], 6U);
	slot = t->s.free_stack[1];
	t->s.free_stack[1] = 7;
	expect_corrupt(test, t, "free stack entry 1 holds block 7 that is already in the stack");
	t->s.free_stack[1] = 0;
	expect_corrupt(test, t, "free stack entry 1 holds block 0 that is not free");
	t->s.free_stack[1] = 8;
	expect_corrupt(test, t, "free stack entry 1 holds block 8 that is not backed");
	t->s.free_stack[1] = slot;

	/* Every failed check took its marks off again. */
	expect_unchanged(test, t);
}

static struct kunit_case kvcore_check_cases[] = {
	KUNIT_CASE(check_detects_corruption),
	{}
};

static struct kunit_suite kvcore_check_suite = {
	.name = "kvcore_check",
	.init = kvt_init,
	.exit = kvt_exit,
	.test_cases = kvcore_check_cases,
};

/* --- kvcore_prefix: publish, lookup, release, eviction, holes ----------------- */

/* A test hash: k in the first byte (the index buckets on the first word). */
static void hash_of(kvc_u8 *h, unsigned int k)
{
	memset(h, 0, KVC_HASH_BYTES);
	h[0] = (kvc_u8)k;
	h[31] = 0xa5;
}

static void entry(struct kvc_publish_entry *e, kvc_u32 id, unsigned int k, unsigned int prio)
{
	memset(e, 0, sizeof(*e));
	hash_of(e->hash, k);
	e->id = id;
	e->priority = prio;
}

/* Owner 1 publishes blocks 0..n-1 under hashes 0..n-1 at prio[i]. */
static void publish_range(struct kunit *test, struct kvt *t, unsigned int n,
			  const unsigned int *prio)
{
	struct kvc_publish_entry e[8];
	unsigned int i;

	for (i = 0; i < n; i++)
		entry(&e[i], i, i, prio[i]);
	KUNIT_ASSERT_EQ(test, kvc_publish(&t->s, 1, &t->refs[1], n, e), 0);
}

static void expect_lru(struct kunit *test, struct kvt *t, const kvc_u32 *want, unsigned int n)
{
	kvc_u32 id = kvc_lru_first(&t->s);
	unsigned int i;

	for (i = 0; i < n; i++) {
		KUNIT_EXPECT_EQ_MSG(test, id, want[i], "LRU position %u", i);
		if (id == KVC_NONE)
			return;
		id = kvc_lru_next(&t->s, id);
	}
	KUNIT_EXPECT_EQ_MSG(test, id, KVC_NONE, "LRU longer than %u", n);
}

static void prefix_publish_and_dedup(struct kunit *test)
{
	struct kvt *t = kvt_space(test, KB(4), 16, 0, 0);
	struct kvc_publish_entry e[2];
	kvc_u32 ids[3], bad;
	kvc_u8 h[KVC_HASH_BYTES];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 2, ids), 0);		/* 0 1 */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 1, ids + 2), 0);	/* 2 */
	/* The same hash twice in one batch: the second is a dedup of the first. */
	entry(&e[0], 0, 1, 20);
	entry(&e[1], 1, 1, 60);
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 1, &t->refs[1], 2, e), 1);
	KUNIT_EXPECT_EQ(test, e[0].id, 0U);
	KUNIT_EXPECT_EQ(test, e[0].flags, 0U);
	KUNIT_EXPECT_EQ(test, e[1].id, 0U);
	KUNIT_EXPECT_EQ(test, e[1].flags, KVC_PUBLISH_DEDUP);
	KUNIT_EXPECT_EQ(test, t->s.blocks[1].state, (kvc_u8)KVC_BLOCK_FREE);
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].state, (kvc_u8)KVC_BLOCK_PUBLISHED);
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].readers, 2U);
	KUNIT_EXPECT_EQ(test, kvc_refs_count(&t->refs[1], 0), 2U);
	/* Another owner: its block is freed, it reads block 0; the priority stays 20. */
	entry(&e[0], 2, 1, 90);
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 2, &t->refs[2], 1, e), 1);
	KUNIT_EXPECT_EQ(test, e[0].id, 0U);
	KUNIT_EXPECT_EQ(test, t->s.blocks[2].state, (kvc_u8)KVC_BLOCK_FREE);
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].readers, 3U);
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].priority, (kvc_u8)20);
	KUNIT_EXPECT_EQ(test, kvc_refs_count(&t->refs[2], 0), 1U);
	KUNIT_EXPECT_EQ(test, t->s.stats.inserts, 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.dedups, 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.frees, 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 0ULL);
	hash_of(h, 1);
	KUNIT_EXPECT_EQ(test, kvc_find(&t->s, h), 0U);
	hash_of(h, 2);
	KUNIT_EXPECT_EQ(test, kvc_find(&t->s, h), KVC_NONE);

	/* Rejected batches change nothing. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 1, ids), 0);
	entry(&e[0], ids[0], 5, 101);
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 1, &t->refs[1], 1, e), -EINVAL);
	entry(&e[0], 16, 5, 50);
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 1, &t->refs[1], 1, e), -EINVAL);
	entry(&e[0], ids[0], 5, 50);
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 2, &t->refs[2], 1, e), -EPERM);
	entry(&e[0], 0, 5, 50);				/* published: nobody owns it */
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 1, &t->refs[1], 1, e), -EPERM);
	KUNIT_EXPECT_EQ(test, kvc_publish(&t->s, 1, &t->refs[1], 0, e), -EINVAL);
	KUNIT_EXPECT_EQ(test, t->s.blocks[ids[0]].state, (kvc_u8)KVC_BLOCK_OWNED);
	KUNIT_EXPECT_EQ(test, t->s.nr_published, 1ULL);
	KUNIT_EXPECT_EQ(test, t->refs[1].total, 2ULL);
	/* FREE of a published block is EPERM. */
	bad = 0;
	KUNIT_EXPECT_EQ(test, kvc_free(&t->s, 1, 1, &bad), -EPERM);
	expect_check_ok(test, t);
}

static void prefix_lookup_longest_prefix(struct kunit *test)
{
	static const unsigned int prio[] = { 50, 50, 50 };
	struct kvt *t = kvt_space(test, KB(4), 16, 0, 0);
	kvc_u8 h[4][KVC_HASH_BYTES];
	kvc_u32 ids[4];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 3, ids), 0);
	publish_range(test, t, 3, prio);
	hash_of(h[0], 0);
	hash_of(h[1], 1);
	hash_of(h[2], 9);	/* absent */
	hash_of(h[3], 2);
	KUNIT_EXPECT_EQ(test, kvc_lookup(&t->s, &t->refs[2], 4,
					 (const kvc_u8 (*)[KVC_HASH_BYTES])h, ids), 2);
	KUNIT_EXPECT_EQ(test, ids[0], 0U);
	KUNIT_EXPECT_EQ(test, ids[1], 1U);
	KUNIT_EXPECT_EQ(test, kvc_refs_count(&t->refs[2], 0), 1U);
	KUNIT_EXPECT_EQ(test, kvc_refs_count(&t->refs[2], 2), 0U);	/* past the miss */
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].readers, 2U);
	KUNIT_EXPECT_EQ(test, t->s.stats.hits, 2ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.misses, 2ULL);
	KUNIT_EXPECT_EQ(test, kvc_lookup(&t->s, &t->refs[2], 2,
					 (const kvc_u8 (*)[KVC_HASH_BYTES])(h + 2), ids), 0);
	KUNIT_EXPECT_EQ(test, t->s.stats.misses, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_readers, 5ULL);
	expect_check_ok(test, t);
}

/* A block is CACHED when its last reference goes, newest on its priority's LRU. */
static void prefix_release_and_lru(struct kunit *test)
{
	static const unsigned int prio[] = { 50, 50, 10, 50 };
	static const kvc_u32 over[] = { 0, 0, 0 }, order[] = { 3, 0, 1, 0, 2 };
	static const kvc_u32 lru[] = { 2, 3, 1, 0 };
	struct kvt *t = kvt_space(test, KB(4), 16, 0, 0);
	kvc_u8 h[KVC_HASH_BYTES];
	kvc_u32 ids[4];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 4, ids), 0);
	publish_range(test, t, 4, prio);
	hash_of(h, 0);
	KUNIT_ASSERT_EQ(test, kvc_lookup(&t->s, &t->refs[1], 1,
					 (const kvc_u8 (*)[KVC_HASH_BYTES])h, ids), 1);
	/* Block 0 is held twice: three releases are refused, all of them. */
	KUNIT_EXPECT_EQ(test, kvc_release(&t->s, &t->refs[1], 3, over), -EINVAL);
	KUNIT_EXPECT_EQ(test, kvc_release(&t->s, &t->refs[2], 1, over), -EINVAL);
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].readers, 2U);
	KUNIT_EXPECT_EQ(test, t->refs[1].total, 5ULL);
	KUNIT_EXPECT_EQ(test, kvc_lru_first(&t->s), KVC_NONE);
	/* 3 goes first, 1 next, 0 at its second release, then 2 (priority 10 leads). */
	KUNIT_EXPECT_EQ(test, kvc_release(&t->s, &t->refs[1], 5, order), 0);
	expect_lru(test, t, lru, ARRAY_SIZE(lru));
	KUNIT_EXPECT_EQ(test, t->s.nr_cached, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_readers, 0ULL);
	KUNIT_EXPECT_EQ(test, t->refs[1].total, 0ULL);
	KUNIT_EXPECT_EQ(test, kvc_release(&t->s, &t->refs[1], 1, over), -EINVAL);
	expect_check_ok(test, t);
}

/* An 8-block range, full, every block cached: 7 released first, 0 last. */
static struct kvt *kvt_full_cached(struct kunit *test)
{
	static const unsigned int prio[] = { 50, 10, 50, 90, 10, 50, 0, 100 };
	static const kvc_u32 rel[] = { 7, 6, 5, 4, 3, 2, 1, 0 };
	struct kvt *t = kvt_space(test, KB(4), 8, 0, 0);
	kvc_u32 ids[8];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 8, ids), 0);
	publish_range(test, t, 8, prio);
	KUNIT_ASSERT_EQ(test, kvc_release(&t->s, &t->refs[1], 8, rel), 0);
	return t;
}

static void prefix_eviction_order(struct kunit *test)
{
	struct kvt *t = kvt_full_cached(test);
	/* Priority 0; 10 (4 released before 1); 50 (5, 2, 0); 90; 100. */
	static const kvc_u32 lru[] = { 6, 4, 1, 5, 2, 0, 3, 7 };
	kvc_u8 h[KVC_HASH_BYTES];
	kvc_u32 ids[6];
	unsigned int i;

	expect_lru(test, t, lru, ARRAY_SIZE(lru));
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 3, ids), 0);
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);	/* the range is full: no grow */
	KUNIT_ASSERT_EQ(test, t->host.nr_evicted, 3U);
	for (i = 0; i < 3; i++) {
		KUNIT_EXPECT_EQ_MSG(test, t->host.evicted[i], lru[i], "eviction %u", i);
		KUNIT_EXPECT_EQ_MSG(test, t->host.causes[i], (unsigned int)KVC_EVICT_QUOTA,
				    "eviction %u", i);
	}
	KUNIT_EXPECT_EQ(test, t->host.evicted_still_indexed, 0U);
	hash_of(h, 6);
	KUNIT_EXPECT_EQ(test, kvc_find(&t->s, h), KVC_NONE);
	KUNIT_EXPECT_EQ(test, t->s.stats.evictions[KVC_EVICT_QUOTA], 3ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.pressure, 1ULL);
	KUNIT_EXPECT_EQ(test, kvc_owner_blocks(&t->s, 2), 3ULL);
	expect_lru(test, t, lru + 3, 5);
	/* Five cached, six wanted: ENOSPC, and nothing is evicted. */
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 6, ids), -ENOSPC);
	KUNIT_EXPECT_EQ(test, t->host.nr_evicted, 3U);
	KUNIT_EXPECT_EQ(test, t->s.nr_cached, 5ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.pressure, 1ULL);
	/* An explicit drop takes the same order. */
	KUNIT_EXPECT_EQ(test, kvc_evict(&t->s, 2, KVC_EVICT_ADMIN), 2ULL);
	KUNIT_EXPECT_EQ(test, t->host.evicted[3], 5U);
	KUNIT_EXPECT_EQ(test, t->host.evicted[4], 2U);
	KUNIT_EXPECT_EQ(test, t->host.causes[4], (unsigned int)KVC_EVICT_ADMIN);
	KUNIT_EXPECT_EQ(test, t->s.stats.evictions[KVC_EVICT_ADMIN], 2ULL);
	expect_lru(test, t, lru + 5, 3);
	expect_check_ok(test, t);
}

/* Why growth stopped is the cause: the pool (0 or ENOSPC), the tenant (EDQUOT). */
static void prefix_eviction_causes(struct kunit *test)
{
	static const unsigned int prio[] = { 50, 50, 50, 50 };
	static const kvc_u32 rel[] = { 0, 1, 2, 3 };
	struct kvt *t = kvt_space(test, KB(4), 64, 0, 0);
	kvc_u32 ids[4];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 4, ids), 0);
	publish_range(test, t, 4, prio);
	KUNIT_ASSERT_EQ(test, kvc_release(&t->s, &t->refs[1], 4, rel), 0);
	t->host.limit = t->host.given;			/* the pool is empty */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 1, ids), 0);
	KUNIT_EXPECT_EQ(test, t->host.calls, 2U);
	KUNIT_ASSERT_EQ(test, t->host.nr_evicted, 1U);
	KUNIT_EXPECT_EQ(test, t->host.evicted[0], 0U);
	KUNIT_EXPECT_EQ(test, t->host.causes[0], (unsigned int)KVC_EVICT_POOL);
	t->host.fail = -EDQUOT;
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 1, ids), 0);
	KUNIT_ASSERT_EQ(test, t->host.nr_evicted, 2U);
	KUNIT_EXPECT_EQ(test, t->host.evicted[1], 1U);
	KUNIT_EXPECT_EQ(test, t->host.causes[1], (unsigned int)KVC_EVICT_TENANT);
	KUNIT_EXPECT_EQ(test, t->s.stats.evictions[KVC_EVICT_POOL], 1ULL);
	KUNIT_EXPECT_EQ(test, t->s.stats.evictions[KVC_EVICT_TENANT], 1ULL);
	/* Two cached, three wanted: ENOSPC (not EDQUOT), nothing evicted. */
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 3, ids), -ENOSPC);
	/* Another errno fails the allocation as it is, nothing evicted. */
	t->host.fail = -EIO;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 1, ids), -EIO);
	KUNIT_EXPECT_EQ(test, t->host.nr_evicted, 2U);
	KUNIT_EXPECT_EQ(test, t->s.nr_cached, 2ULL);
	expect_check_ok(test, t);
}

/* Reclaim leaves holes; ALLOC refills them before it grows the range. */
static void prefix_holes_refill(struct kunit *test)
{
	static const unsigned int prio[] = { 50 };
	static const kvc_u32 rel[] = { 0 };
	struct kvt *t = kvt_space(test, KB(4), 8, 0, 0);
	kvc_u32 ids[8];

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 8, ids), 0);
	publish_range(test, t, 1, prio);
	KUNIT_ASSERT_EQ(test, kvc_release(&t->s, &t->refs[1], 1, rel), 0);
	KUNIT_EXPECT_EQ(test, kvc_release_owner(&t->s, 1), 7ULL);
	KUNIT_EXPECT_EQ(test, kvc_range_reclaimable(&t->s, 0, KB(16)), 1);
	KUNIT_EXPECT_EQ(test, kvc_range_reclaimable(&t->s, KB(28), KB(4) + 1), 0);
	KUNIT_EXPECT_EQ(test, kvc_range_reclaimable(&t->s, KB(4), 0), 0);
	/* Block 0 is cached: evicted with the reclaim's cause. */
	KUNIT_EXPECT_EQ(test, kvc_reclaim_range(&t->s, 0, KB(16), KVC_EVICT_RECLAIM), 1ULL);
	KUNIT_ASSERT_EQ(test, t->host.nr_evicted, 1U);
	KUNIT_EXPECT_EQ(test, t->host.causes[0], (unsigned int)KVC_EVICT_RECLAIM);
	KUNIT_EXPECT_EQ(test, t->s.nr_holes, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_free, 4ULL);
	KUNIT_EXPECT_EQ(test, t->s.blocks[0].state, (kvc_u8)KVC_BLOCK_HOLE);
	expect_check_ok(test, t);
	/* Four free and one hole refilled: one call for one whole block, no grow. */
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 5, ids), 0);
	KUNIT_EXPECT_EQ(test, t->host.refills, 1U);
	KUNIT_EXPECT_EQ(test, t->host.refill_len[0], KB(4));
	KUNIT_EXPECT_LT(test, t->host.refill_start[0], KB(16));
	KUNIT_EXPECT_EQ(test, t->host.calls, 1U);
	KUNIT_EXPECT_EQ(test, t->s.nr_holes, 3ULL);
	/* Refill failures: ENOSPC is no room (nothing cached: ENOSPC), others pass. */
	t->host.refill_ret = -ENOSPC;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 1, ids), -ENOSPC);
	t->host.refill_ret = -ENOMEM;
	KUNIT_EXPECT_EQ(test, kvc_alloc(&t->s, 2, 1, ids), -ENOMEM);
	KUNIT_EXPECT_EQ(test, t->s.nr_holes, 3ULL);
	t->host.refill_ret = 0;
	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 2, 3, ids), 0);
	KUNIT_EXPECT_EQ(test, t->s.nr_holes, 0ULL);
	KUNIT_EXPECT_EQ(test, t->s.nr_owned, 8ULL);
	expect_check_ok(test, t);
}

static void prefix_check_detects_corruption(struct kunit *test)
{
	static const unsigned int prio[] = { 50, 50, 50 };
	static const kvc_u32 rel[] = { 0, 1 };
	struct kvt *t = kvt_space(test, KB(4), 8, 0, 0);
	kvc_u32 ids[3];
	unsigned int bit;

	KUNIT_ASSERT_EQ(test, kvc_alloc(&t->s, 1, 3, ids), 0);
	publish_range(test, t, 3, prio);
	KUNIT_ASSERT_EQ(test, kvc_release(&t->s, &t->refs[1], 2, rel), 0);
	expect_check_ok(test, t);

	t->s.blocks[1].readers = 1;			/* cached with a reader */
	expect_corrupt(test, t, "block 1: readers do not match state");
	t->s.blocks[1].readers = 0;
	t->s.nr_readers++;
	expect_corrupt(test, t, "readers 2/1");
	t->s.nr_readers--;
	/* Block 1 missing from the LRU, which is otherwise well formed. */
	t->s.blocks[0].next = KVC_NONE;
	t->s.lru[50].tail = 0;
	expect_corrupt(test, t, "LRUs hold 1 of 2 cached");
	t->s.blocks[0].next = 1;
	t->s.lru[50].tail = 1;
	/*
	 * A key that moved: the index no longer finds block 2.  The bucket
	 * key is random, so flip the first bit that leaves the chain.
	 */
	for (bit = 0; bit < 64; bit++) {
		t->s.hashes[2][bit / 8] ^= 1 << (bit % 8);
		if (kvc_find(&t->s, t->s.hashes[2]) != 2)
			break;
		t->s.hashes[2][bit / 8] ^= 1 << (bit % 8);
	}
	KUNIT_ASSERT_LT(test, bit, 64U);
	expect_corrupt(test, t, "block 2: published but not found by its hash");
	t->s.hashes[2][bit / 8] ^= 1 << (bit % 8);
	expect_check_ok(test, t);
}

static struct kunit_case kvcore_prefix_cases[] = {
	KUNIT_CASE(prefix_publish_and_dedup),
	KUNIT_CASE(prefix_lookup_longest_prefix),
	KUNIT_CASE(prefix_release_and_lru),
	KUNIT_CASE(prefix_eviction_order),
	KUNIT_CASE(prefix_eviction_causes),
	KUNIT_CASE(prefix_holes_refill),
	KUNIT_CASE(prefix_check_detects_corruption),
	{}
};

static struct kunit_suite kvcore_prefix_suite = {
	.name = "kvcore_prefix",
	.init = kvt_init,
	.exit = kvt_exit,
	.test_cases = kvcore_prefix_cases,
};

/* --- kvcore_numa: kvc_numa_order for every policy ------------------------------ */

#define N(x) (1ULL << (x))
#define ORDER_END 0xff

/* Call kvc_numa_order and compare with want[], which ends at ORDER_END. */
static void expect_order(struct kunit *test, unsigned int policy, kvc_u64 mask,
			 kvc_u64 pool_mask, int local, unsigned int cursor, const kvc_u8 *want)
{
	kvc_u8 order[KVC_MAX_NODES + 1];
	unsigned int n, i, nwant = 0;

	while (want[nwant] != ORDER_END)
		nwant++;
	memset(order, ORDER_END, sizeof(order));
	n = kvc_numa_order(policy, mask, pool_mask, local, cursor, order);
	KUNIT_EXPECT_EQ_MSG(test, n, nwant, "policy %u mask %#llx pool %#llx local %d cursor %u",
			    policy, mask, pool_mask, local, cursor);
	for (i = 0; i < nwant && i < n; i++)
		KUNIT_EXPECT_EQ_MSG(test, order[i], want[i],
				    "order[%u], policy %u mask %#llx pool %#llx local %d cursor %u",
				    i, policy, mask, pool_mask, local, cursor);
	/* Nothing written past what it returned. */
	for (i = n; i < ARRAY_SIZE(order); i++)
		KUNIT_EXPECT_EQ_MSG(test, order[i], ORDER_END, "order[%u] past n %u", i, n);
}

static const kvc_u8 o_none[] = { ORDER_END };

static void numa_bind(struct kunit *test)
{
	static const kvc_u8 o_13[] = { 1, 3, ORDER_END };
	static const kvc_u8 o_1[] = { 1, ORDER_END };
	static const kvc_u8 o_63[] = { 63, ORDER_END };

	/* The mask's pool nodes in id order; local and cursor do not matter. */
	expect_order(test, KVC_NUMA_BIND, N(1) | N(3), 0xf, 0, 0, o_13);
	expect_order(test, KVC_NUMA_BIND, N(3) | N(1), 0xf, 2, 3, o_13);
	expect_order(test, KVC_NUMA_BIND, N(1) | N(5), 0xf, 5, 0, o_1);
	/* No mask, or none of its nodes has pool pages: nowhere to go. */
	expect_order(test, KVC_NUMA_BIND, 0, 0xf, 0, 0, o_none);
	expect_order(test, KVC_NUMA_BIND, N(2) | N(3), N(0) | N(1), 0, 0, o_none);
	expect_order(test, KVC_NUMA_BIND, N(63), N(63) | N(0), 0, 0, o_63);
}

static void numa_interleave(struct kunit *test)
{
	static const kvc_u8 o_130[] = { 1, 3, 0, ORDER_END };
	static const kvc_u8 o_301[] = { 3, 0, 1, ORDER_END };
	static const kvc_u8 o_013[] = { 0, 1, 3, ORDER_END };
	static const kvc_u8 o_201[] = { 2, 0, 1, ORDER_END };
	static const kvc_u8 o_10[] = { 1, 0, ORDER_END };
	static const kvc_u8 o_630[] = { 63, 0, ORDER_END };
	kvc_u64 m013 = N(0) | N(1) | N(3);

	/* Round robin over the mask from the cursor on. */
	expect_order(test, KVC_NUMA_INTERLEAVE, m013, 0xf, 0, 0, o_013);
	expect_order(test, KVC_NUMA_INTERLEAVE, m013, 0xf, 0, 1, o_130);
	expect_order(test, KVC_NUMA_INTERLEAVE, m013, 0xf, 0, 2, o_301);
	expect_order(test, KVC_NUMA_INTERLEAVE, m013, 0xf, 0, 3, o_301);
	expect_order(test, KVC_NUMA_INTERLEAVE, m013, 0xf, 0, 4, o_013);
	/* The cursor wraps at 64. */
	expect_order(test, KVC_NUMA_INTERLEAVE, m013, 0xf, 0, 65, o_130);
	expect_order(test, KVC_NUMA_INTERLEAVE, N(63) | N(0), N(63) | N(0), 5, 63, o_630);
	/* No mask: every pool node; a mask is cut down to pool nodes. */
	expect_order(test, KVC_NUMA_INTERLEAVE, 0, 0x7, 1, 2, o_201);
	expect_order(test, KVC_NUMA_INTERLEAVE, N(0) | N(1) | N(7), 0x3, 0, 1, o_10);
	expect_order(test, KVC_NUMA_INTERLEAVE, N(3), 0x7, 0, 0, o_none);
	/* The two-node machine of the VM: the cursor alternates. */
	expect_order(test, KVC_NUMA_INTERLEAVE, 0, 0x3, 0, 1, o_10);
}

static void numa_preferred(struct kunit *test)
{
	static const kvc_u8 o_1023[] = { 1, 0, 2, 3, ORDER_END };
	static const kvc_u8 o_0123[] = { 0, 1, 2, 3, ORDER_END };
	static const kvc_u8 o_2301[] = { 2, 3, 0, 1, ORDER_END };
	static const kvc_u8 o_2013[] = { 2, 0, 1, 3, ORDER_END };
	static const kvc_u8 o_01[] = { 0, 1, ORDER_END };
	static const kvc_u8 o_10[] = { 1, 0, ORDER_END };
	kvc_u8 o_all[KVC_MAX_NODES + 1];
	unsigned int i, n = 0;

	/* No mask: the caller's node, then the rest in id order. */
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0xf, 1, 0, o_1023);
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0x3, 1, 0, o_10);
	/* A caller's node without pool pages, or no node, or nonsense: id order. */
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0xf, 5, 0, o_0123);
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0xf, -1, 0, o_0123);
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0xf, 64, 0, o_0123);
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0xf, 1000, 0, o_0123);
	/* A mask comes first, in id order, and wins over the caller's node. */
	expect_order(test, KVC_NUMA_PREFERRED, N(2) | N(3), 0xf, 0, 0, o_2301);
	expect_order(test, KVC_NUMA_PREFERRED, N(2), 0xf, 1, 0, o_2013);
	/* Mask nodes without pool pages are skipped; the cursor does not matter. */
	expect_order(test, KVC_NUMA_PREFERRED, N(4), 0x3, 1, 7, o_01);
	expect_order(test, KVC_NUMA_PREFERRED, 0, 0, 0, 0, o_none);
	/* An unknown policy is handled as preferred. */
	expect_order(test, 7, 0, 0xf, 1, 0, o_1023);

	/* 64 nodes, caller on 10: 10, then 0..9, 11..63: the whole array. */
	o_all[n++] = 10;
	for (i = 0; i < KVC_MAX_NODES; i++)
		if (i != 10)
			o_all[n++] = i;
	o_all[n] = ORDER_END;
	expect_order(test, KVC_NUMA_PREFERRED, 0, ~0ULL, 10, 0, o_all);
}

static struct kunit_case kvcore_numa_cases[] = {
	KUNIT_CASE(numa_bind),
	KUNIT_CASE(numa_interleave),
	KUNIT_CASE(numa_preferred),
	{}
};

static struct kunit_suite kvcore_numa_suite = {
	.name = "kvcore_numa",
	.test_cases = kvcore_numa_cases,
};

kunit_test_suites(&kvcore_alloc_suite, &kvcore_quota_suite, &kvcore_free_suite,
		  &kvcore_prefix_suite, &kvcore_check_suite, &kvcore_numa_suite);

MODULE_DESCRIPTION("KUnit tests of kvpool's portable block core (kvcore)");
MODULE_LICENSE("GPL");
