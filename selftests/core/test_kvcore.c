// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Unit tests of kvcore (kmod/core), run under ASan and UBSan.  Every space
 * operation goes through the harness, which runs the same operation on an
 * independent reference model and compares errno, callbacks and the whole
 * state afterwards, kvc_space_check included.  The tests below add the
 * exact expectations of each scenario on top; the prefix cache's are in
 * test_prefix.c, the randomized ones in test_random.c.
 */
#include <limits.h>
#include "harness.h"
#include "../tap.h"

#define BB 4096ULL

static struct pair P;		/* the pair of the running test */
static kvc_u32 ids[8192], ids2[8192];

/* test_prefix.c's and test_rules.c's tests (the random ones: harness.h) */
extern const struct tap_test prefix_tests[];
extern const unsigned int nr_prefix_tests;
extern const struct tap_test rules_tests[];
extern const unsigned int nr_rules_tests;

static void on_mismatch(struct pair *p)
{
	tap_diag("kvcore and the model disagree: %s", p->why);
	tap_ok = false;
}

/* Fresh pair with an exact, unlimited host. */
static struct pair *space(kvc_u64 block_bytes, kvc_u64 nr_blocks)
{
	CHECK_EQ(pair_init(&P, block_bytes, nr_blocks), 0);
	return &P;
}

/* ---- init -------------------------------------------------------------- */

static void t_init_rejects_bad_geometry(void)
{
	static const struct kvc_space_ops no_grow = { 0 };
	struct kvc_space s;

	CHECK_EQ(kvc_space_init(&s, 0, 10, &host_ops, NULL), -EINVAL);
	CHECK_EQ(kvc_space_init(&s, BB, 0, &host_ops, NULL), -EINVAL);
	CHECK_EQ(kvc_space_init(&s, BB, KVC_MAX_BLOCKS + 1, &host_ops, NULL), -EINVAL);
	CHECK_EQ(kvc_space_init(&s, BB, ~0ULL, &host_ops, NULL), -EINVAL);
	CHECK_EQ(kvc_space_init(&s, BB, 10, NULL, NULL), -EINVAL);
	CHECK_EQ(kvc_space_init(&s, BB, 10, &no_grow, NULL), -EINVAL);

	/* The harness asks the model too; these must agree with it. */
	CHECK_EQ(pair_init(&P, 0, 1), -EINVAL);
	CHECK_EQ(pair_init(&P, 1, KVC_MAX_BLOCKS + 1), -EINVAL);
	CHECK_EQ(pair_init(&P, 1, KVC_MAX_BLOCKS), 0);
	pair_fini(&P);
	CHECK_EQ(pair_init(&P, ~0ULL, 1), 0);
	pair_fini(&P);
}

/* nr_blocks * block_bytes must not wrap: the range is counted in bytes. */
static void t_init_rejects_range_overflow(void)
{
	CHECK_EQ(pair_init(&P, 1ULL << 40, 1ULL << 31), -EINVAL);	/* 2^71 */
	CHECK_EQ(pair_init(&P, 1ULL << 63, 2), -EINVAL);		/* 2^64 */
	CHECK_EQ(pair_init(&P, 1ULL << 33, KVC_MAX_BLOCKS), -EINVAL);
	CHECK_EQ(pair_init(&P, (1ULL << 62) + 1, 4), -EINVAL);
	CHECK_EQ(pair_init(&P, (1ULL << 33) - 1, KVC_MAX_BLOCKS), 0);	/* just fits */
	pair_fini(&P);
	CHECK_EQ(pair_init(&P, 1ULL << 62, 3), 0);
	pair_fini(&P);
}

static void t_init_empty_space(void)
{
	struct pair *p = space(BB, 100);
	kvc_u32 id = 0;

	CHECK_EQ(p->s.backed_bytes, 0);
	CHECK_EQ(p->s.nr_free + p->s.nr_owned, 0);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 0);
	CHECK_EQ(pair_release(p, 1), 0);
	CHECK_EQ(pair_free(p, 1, 1, &id), -EINVAL);	/* nothing backed yet */
	CHECK_EQ(p->h.calls, 0);
	pair_fini(p);
}

/* ---- alloc ------------------------------------------------------------- */

static void t_alloc_rejects_count0_owner0(void)
{
	struct pair *p = space(BB, 64);

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	CHECK_EQ(pair_alloc(p, 1, 0, ids), -EINVAL);
	CHECK_EQ(pair_alloc(p, KVC_OWNER_NONE, 1, ids), -EINVAL);
	CHECK_EQ(pair_alloc(p, KVC_OWNER_NONE, 0, ids), -EINVAL);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(p->s.stats.allocs, 4);
	pair_fini(p);
}

static void t_alloc_first_ids_ascending(void)
{
	struct pair *p = space(BB, 64);
	kvc_u32 i;

	CHECK_EQ(pair_alloc(p, 1, 5, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 5 * BB);
	for (i = 0; i < 5; i++)
		CHECK_EQ(ids[i], i);
	CHECK_EQ(pair_alloc(p, 2, 3, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 3 * BB);
	for (i = 0; i < 3; i++)
		CHECK_EQ(ids[i], 5 + i);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 5);
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 3);
	pair_fini(p);
}

/* Recently freed blocks are handed out first (LIFO). */
static void t_alloc_reuses_freed_lifo(void)
{
	struct pair *p = space(BB, 64);
	kvc_u32 f[2] = { 1, 2 };

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	CHECK_EQ(pair_free(p, 1, 2, f), 0);
	CHECK_EQ(pair_alloc(p, 3, 1, ids), 0);
	CHECK_EQ(ids[0], 2);
	CHECK_EQ(pair_alloc(p, 3, 1, ids), 0);
	CHECK_EQ(ids[0], 1);
	CHECK_EQ(p->h.calls, 0);
	pair_fini(p);
}

static void t_alloc_quota_exhaustion(void)
{
	struct pair *p = space(BB, 8);
	kvc_u32 f[2] = { 0, 3 };

	CHECK_EQ(pair_alloc(p, 1, 9, ids), -ENOSPC);		/* more than the range */
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(pair_alloc(p, 1, 0xffffffffu, ids), -ENOSPC);
	CHECK_EQ(pair_alloc(p, 1, 5, ids), 0);
	CHECK_EQ(pair_alloc(p, 2, 4, ids), -ENOSPC);		/* 3 left */
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(p->s.backed_bytes, 5 * BB);		/* unchanged */
	CHECK_EQ(pair_alloc(p, 2, 3, ids), 0);		/* exactly full */
	CHECK_EQ(p->s.backed_bytes, 8 * BB);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -ENOSPC);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(pair_free(p, 1, 2, f), 0);
	CHECK_EQ(pair_alloc(p, 3, 3, ids), -ENOSPC);
	CHECK_EQ(pair_alloc(p, 3, 2, ids), 0);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(p->s.stats.alloc_failures, 5);
	CHECK_EQ(p->s.nr_free, 0);
	pair_fini(p);
}

/* The host's pool runs dry: grow returns 0, then -ENOSPC with nothing taken. */
static void t_alloc_host_returns_zero(void)
{
	struct pair *p = space(BB, 100);

	host_set(&p->h, HOST_ZERO, 0);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), -ENOSPC);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->s.backed_bytes, 0);

	host_set(&p->h, HOST_EXACT, 0);
	p->h.pool_left = 3 * BB;
	CHECK_EQ(pair_alloc(p, 1, 2, ids), 0);
	CHECK_EQ(pair_alloc(p, 1, 2, ids), -ENOSPC);	/* got 1 block, then 0 */
	CHECK_EQ(p->h.calls, 2);
	CHECK_EQ(p->s.backed_bytes, 3 * BB);		/* the block it got stays */
	CHECK_EQ(p->s.nr_free, 1);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 2);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);		/* uses it, no grow */
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(ids[0], 2);
	pair_fini(p);
}

static void t_alloc_host_errno(void)
{
	/* -ENOSPC and -EDQUOT mean "no room": with nothing cached, ENOSPC. */
	static const long long errs[] = { -EIO, -ENOMEM, -EINTR, -EAGAIN, -ENOSPC, -EFAULT,
					  -4095, -EDQUOT };
	struct pair *p = space(BB, 100);
	unsigned int i;

	CHECK_EQ(pair_alloc(p, 1, 3, ids), 0);
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		host_set(&p->h, HOST_ERRNO, errs[i]);
		CHECK_EQ(pair_alloc(p, 2, 5, ids), errs[i] == -EDQUOT ? -ENOSPC : errs[i]);
		CHECK_EQ(p->h.calls, 1);
		CHECK_EQ(p->s.backed_bytes, 3 * BB);
		CHECK_EQ(kvc_owner_blocks(&p->s, 2), 0);
	}
	/* Served from free blocks, the host is not asked. */
	CHECK_EQ(pair_free(p, 1, 1, (kvc_u32[]){ 0 }), 0);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);
	CHECK_EQ(p->h.calls, 0);
	pair_fini(p);
}

/* Backing added before the host failed stays, as free blocks. */
static void t_alloc_host_fails_after_partial_grow(void)
{
	const long long script[] = { 2 * BB, BB / 2, -EINTR };
	struct pair *p = space(BB, 100);

	host_script(&p->h, 3, script);
	CHECK_EQ(pair_alloc(p, 1, 5, ids), -EINTR);
	CHECK_EQ(p->h.calls, 3);
	CHECK_EQ(p->s.backed_bytes, 2 * BB + BB / 2);
	CHECK_EQ(p->s.backed_blocks, 2);
	CHECK_EQ(p->s.nr_free, 2);
	CHECK_EQ(p->s.nr_owned, 0);
	/* The next allocation asks only for the missing part. */
	CHECK_EQ(pair_alloc(p, 1, 5, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 5 * BB - (2 * BB + BB / 2));
	pair_fini(p);
}

/* Values that are neither bytes nor an errno must not read as success. */
static void t_alloc_host_returns_bad_value(void)
{
	static const long long bad[] = { -4096, -(1LL << 32), -(1LL << 32) - 1, LLONG_MIN };
	struct pair *p = space(BB, 100);
	unsigned int i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		host_set(&p->h, HOST_ERRNO, bad[i]);
		CHECK_EQ(pair_alloc(p, 1, 2, ids), -EIO);
		CHECK_EQ(p->s.nr_owned, 0);
	}
	pair_fini(p);
}

static void t_alloc_host_gives_more(void)
{
	struct pair *p = space(BB, 100);
	int i;

	host_set(&p->h, HOST_CHUNK, 16 * BB);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);
	CHECK_EQ(p->h.last_want, BB);
	CHECK_EQ(p->s.backed_bytes, 16 * BB);
	CHECK_EQ(p->s.nr_free, 15);
	for (i = 0; i < 15; i++) {
		CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);
		CHECK_EQ(p->h.calls, 0);
	}
	CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->s.backed_bytes, 32 * BB);
	pair_fini(p);
}

/* More than the range is clamped: the space never counts bytes past it. */
static void t_alloc_host_gives_more_than_range(void)
{
	struct pair *p = space(3000, 10);

	host_set(&p->h, HOST_CHUNK, 1 << 30);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);
	CHECK_EQ(p->s.backed_bytes, 30000);
	CHECK_EQ(p->s.backed_blocks, 10);
	CHECK_EQ(pair_alloc(p, 1, 9, ids), 0);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), -ENOSPC);
	CHECK_EQ(p->h.calls, 0);
	pair_fini(p);
}

/* Page-sized grows under 3000-byte blocks: blocks straddle two grows. */
static void t_alloc_partial_blocks_straddle(void)
{
	struct pair *p = space(3000, 1000);

	host_set(&p->h, HOST_CHUNK, 4096);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);
	CHECK_EQ(p->h.last_want, 3000);
	CHECK_EQ(p->s.backed_bytes, 4096);
	CHECK_EQ(p->s.backed_blocks, 1);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);		/* block 1: bytes 3000..5999 */
	CHECK_EQ(ids[0], 1);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 6000 - 4096);
	CHECK_EQ(p->s.backed_bytes, 8192);

	/* At most one page per call: one allocation, many grows. */
	host_set(&p->h, HOST_PARTIAL, 4096);
	CHECK_EQ(pair_alloc(p, 2, 10, ids), 0);
	CHECK_EQ(p->h.calls, 7);			/* 12 * 3000 - 8192 by 4096 */
	CHECK_EQ(p->s.backed_bytes, 12 * 3000);		/* the last call is short */
	CHECK_EQ(p->s.backed_blocks, 12);
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 10);

	/* One byte per call. */
	host_set(&p->h, HOST_PARTIAL, 1);
	CHECK_EQ(pair_alloc(p, 3, 2, ids), 0);
	CHECK_EQ(p->h.calls, 2 * 3000);
	CHECK_EQ(p->s.backed_bytes, 14 * 3000);
	pair_fini(p);
}

/* Blocks larger than what one grow call can return. */
static void t_alloc_huge_blocks(void)
{
	struct pair *p = space(1ULL << 62, 3);

	CHECK_EQ(pair_alloc(p, 1, 2, ids), 0);		/* wants 2^63: two calls */
	CHECK_EQ(p->h.calls, 2);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), 0);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), -ENOSPC);
	CHECK_EQ(pair_release(p, 1), 3);
	pair_fini(p);
}

static void t_alloc_one_byte_blocks(void)
{
	struct pair *p = space(1, 1000);

	CHECK_EQ(pair_alloc(p, 1, 1000, ids), 0);
	CHECK_EQ(p->s.backed_bytes, 1000);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), -ENOSPC);
	pair_fini(p);
}

static void t_alloc_largest_range(void)
{
	struct pair *p = space(BB, KVC_MAX_BLOCKS);

	CHECK_EQ(pair_alloc(p, 1, 100, ids), 0);
	CHECK_EQ(pair_alloc(p, 2, 4096, ids), 0);
	CHECK_EQ(p->s.backed_blocks, 4196);
	CHECK_EQ(pair_free(p, 2, 4096, ids), 0);
	CHECK_EQ(pair_release(p, 1), 100);
	pair_fini(p);
}

/* ---- free -------------------------------------------------------------- */

/* Owner 1 holds 0..3, owner 2 holds 4..5, 6..7 are free, 8..15 unbacked. */
static struct pair *free_fixture(void)
{
	struct pair *p = space(BB, 16);

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	CHECK_EQ(pair_alloc(p, 2, 4, ids), 0);
	CHECK_EQ(pair_free(p, 2, 2, (kvc_u32[]){ 6, 7 }), 0);
	return p;
}

#define FREE(p, owner, ...)                                                         \
	pair_free(p, owner, sizeof((kvc_u32[]){ __VA_ARGS__ }) / sizeof(kvc_u32), \
		  (kvc_u32[]){ __VA_ARGS__ })

static void t_free_rejects_bad_ids(void)
{
	struct pair *p = free_fixture();

	CHECK_EQ(pair_free(p, 1, 0, ids), -EINVAL);
	CHECK_EQ(FREE(p, 1, 8), -EINVAL);		/* first unbacked id */
	CHECK_EQ(FREE(p, 1, 15), -EINVAL);		/* in the range, unbacked */
	CHECK_EQ(FREE(p, 1, 16), -EINVAL);		/* past the range */
	CHECK_EQ(FREE(p, 1, 0xffffffffu), -EINVAL);
	CHECK_EQ(FREE(p, 1, 0, 1, 99), -EINVAL);	/* all or nothing */
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 4);
	pair_fini(p);
}

static void t_free_rejects_duplicates(void)
{
	struct pair *p = free_fixture();

	CHECK_EQ(FREE(p, 1, 0, 0), -EINVAL);
	CHECK_EQ(FREE(p, 1, 0, 1, 2, 1), -EINVAL);
	CHECK_EQ(FREE(p, 1, 3, 2, 1, 0, 3), -EINVAL);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 4);
	/* The marks of the rejected batches are gone: these succeed. */
	CHECK_EQ(FREE(p, 1, 0, 1), 0);
	CHECK_EQ(FREE(p, 1, 3, 2), 0);
	pair_fini(p);
}

static void t_free_rejects_other_owner(void)
{
	struct pair *p = free_fixture();

	CHECK_EQ(FREE(p, 1, 4), -EPERM);		/* owner 2's */
	CHECK_EQ(FREE(p, 1, 0, 1, 5), -EPERM);		/* all or nothing */
	CHECK_EQ(FREE(p, 2, 0), -EPERM);
	CHECK_EQ(FREE(p, 3, 0), -EPERM);		/* owns nothing */
	CHECK_EQ(FREE(p, 1, 6), -EPERM);		/* free block */
	CHECK_EQ(FREE(p, KVC_OWNER_NONE, 6), -EPERM);	/* owner 0, free block */
	CHECK_EQ(FREE(p, KVC_OWNER_NONE, 0), -EPERM);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 4);
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 2);
	CHECK_EQ(FREE(p, 1, 0), 0);
	CHECK_EQ(FREE(p, 1, 0), -EPERM);		/* double free */
	pair_fini(p);
}

/* The first bad id in the batch decides the errno. */
static void t_free_first_error_wins(void)
{
	struct pair *p = free_fixture();

	CHECK_EQ(FREE(p, 1, 4, 99), -EPERM);
	CHECK_EQ(FREE(p, 1, 99, 4), -EINVAL);
	CHECK_EQ(FREE(p, 1, 0, 0, 4), -EINVAL);
	CHECK_EQ(FREE(p, 1, 0, 4, 0), -EPERM);
	CHECK_EQ(FREE(p, 1, 1, 6, 1), -EPERM);
	pair_fini(p);
}

static void t_free_large_batch_all_or_nothing(void)
{
	struct pair *p = space(BB, 8192);
	kvc_u32 i;

	CHECK_EQ(pair_alloc(p, 1, 4000, ids), 0);
	CHECK_EQ(pair_alloc(p, 2, 1, ids2), 0);
	for (i = 0; i < 4000; i++)
		ids2[i] = ids[3999 - i];
	ids2[3999] = ids2[0];				/* duplicate at the end */
	CHECK_EQ(pair_free(p, 1, 4000, ids2), -EINVAL);
	ids2[3999] = 4000;				/* owner 2's block */
	CHECK_EQ(pair_free(p, 1, 4000, ids2), -EPERM);
	ids2[3999] = ids[0];
	CHECK_EQ(pair_free(p, 1, 4000, ids2), 0);
	CHECK_EQ(p->s.nr_free, 4000);
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 1);
	pair_fini(p);
}

/* ---- release ----------------------------------------------------------- */

static void t_release_owner(void)
{
	struct pair *p = space(BB, 512);
	int i;

	for (i = 0; i < 30; i++)
		CHECK_EQ(pair_alloc(p, 1 + i % 3, 1 + i, ids), 0);
	CHECK_EQ(pair_release(p, 2), 155);
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 0);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 145);
	CHECK_EQ(kvc_owner_blocks(&p->s, 3), 165);
	CHECK_EQ(pair_release(p, 2), 0);
	CHECK_EQ(pair_release(p, KVC_OWNER_NONE), 0);
	CHECK_EQ(pair_release(p, 99), 0);
	CHECK_EQ(p->s.stats.frees, 155);
	/* Released blocks can be allocated again, without growing. */
	CHECK_EQ(pair_alloc(p, 4, 155, ids), 0);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(pair_release(p, 1), 145);
	CHECK_EQ(pair_release(p, 3), 165);
	CHECK_EQ(pair_release(p, 4), 155);
	CHECK_EQ(p->s.nr_owned, 0);
	CHECK_EQ(p->s.nr_free, 465);
	pair_fini(p);
}

static void t_owner_blocks(void)
{
	struct pair *p = space(BB, 64);

	CHECK_EQ(pair_alloc(p, 0xffffffffu, 7, ids), 0);
	CHECK_EQ(pair_alloc(p, 1, 2, ids), 0);
	CHECK_EQ(kvc_owner_blocks(&p->s, 0xffffffffu), 7);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 2);
	CHECK_EQ(kvc_owner_blocks(&p->s, KVC_OWNER_NONE), 0);
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 0);
	pair_fini(p);
}

/* ---- kvcore's own allocation failing ----------------------------------- */

static void t_fault_first_alloc(void)
{
	long nth;

	/* The first registration allocates blocks[], free_stack[], hashes[], buckets[]. */
	for (nth = 1; nth <= 4; nth++) {
		struct pair *p = space(BB, 100);

		kvc_fail_alloc_countdown = nth;
		CHECK_EQ(pair_alloc(p, 1, 3, ids), -ENOMEM);
		CHECK_EQ(kvc_fail_alloc_countdown, 0);
		CHECK_EQ(p->s.backed_bytes, 3 * BB);	/* the host's pages are kept */
		CHECK_EQ(p->s.backed_blocks, 0);
		CHECK_EQ(FREE(p, 1, 0), -EINVAL);
		/* The next allocation adds the blocks without asking the host. */
		CHECK_EQ(pair_alloc(p, 1, 3, ids), 0);
		CHECK_EQ(p->h.calls, 0);
		CHECK_EQ(p->s.backed_blocks, 3);
		pair_fini(p);
	}
}

/* kvcore's arrays grow at 64 blocks; failing there loses nothing. */
static void t_fault_when_arrays_grow(void)
{
	struct pair *p = space(BB, 1000);

	CHECK_EQ(pair_alloc(p, 1, 64, ids), 0);
	kvc_fail_alloc_countdown = 1;
	CHECK_EQ(pair_alloc(p, 2, 1, ids2), -ENOMEM);
	CHECK_EQ(p->s.backed_bytes, 65 * BB);		/* the host's pages are kept */
	CHECK_EQ(p->s.backed_blocks, 64);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 64);
	CHECK_EQ(FREE(p, 1, 64), -EINVAL);		/* not a block yet */
	CHECK_EQ(pair_free(p, 1, 10, ids), 0);
	/* Free blocks suffice: the failing registration does not matter. */
	kvc_fail_alloc_countdown = 1;
	CHECK_EQ(pair_alloc(p, 2, 10, ids2), 0);
	CHECK_EQ(kvc_fail_alloc_countdown, 0);
	CHECK_EQ(p->s.backed_blocks, 64);
	/* They do not: the pending block cannot be added, -ENOMEM. */
	kvc_fail_alloc_countdown = 2;
	CHECK_EQ(pair_alloc(p, 2, 5, ids2), -ENOMEM);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(p->s.backed_bytes, 65 * BB);
	CHECK_EQ(pair_release(p, 2), 10);
	CHECK_EQ(pair_alloc(p, 3, 15, ids2), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 4 * BB);
	CHECK_EQ(p->s.backed_blocks, 69);
	CHECK_EQ(pair_release(p, 1), 54);
	pair_fini(p);
}

/*
 * A fixed scenario, run once with each of kvcore's allocations failing in
 * turn; the model checks every step, and the space then recovers.
 */
static void t_fault_every_allocation(void)
{
	long nth;

	for (nth = 1; nth < 100; nth++) {
		struct pair *p = space(3000, 5000);
		int i, ok = 1;

		host_set(&p->h, HOST_CHUNK, 4096);
		kvc_fail_alloc_countdown = nth;
		for (i = 0; i < 12; i++) {
			pair_alloc(p, 1 + i % 3, 7 + 31 * i, ids);
			if (i % 4 == 3)
				pair_release(p, 1 + (i / 4) % 3);
		}
		if (kvc_fail_alloc_countdown > 0)
			ok = 0;				/* no fault left to inject */
		kvc_fail_alloc_countdown = 0;
		CHECK_EQ(pair_alloc(p, 9, 500, ids), 0);
		CHECK_EQ(p->s.backed_blocks, p->s.backed_bytes / 3000);
		pair_fini(p);
		if (!ok || !tap_ok)
			break;
	}
	CHECK(nth > 10);
	tap_diag("faults injected at %ld allocation points", nth - 1);
}

/* ---- kvc_space_check --------------------------------------------------- */

static void expect_clean(struct pair *p)
{
	char msg[256] = "";

	CHECK_EQ(kvc_space_check(&p->s, msg, sizeof(msg)), 0);
}

static void t_check_detects_corruption(void)
{
	struct pair *p = space(BB, 256);
	struct kvc_space *s = &p->s;
	struct kvc_block saved, saved2;
	kvc_u32 owned, fr, fr2, e;
	kvc_u64 v;

	CHECK_EQ(pair_alloc(p, 1, 20, ids), 0);
	CHECK_EQ(pair_free(p, 1, 5, ids + 10), 0);
	expect_clean(p);
	owned = ids[0];
	fr = s->free_stack[s->nr_free - 1];
	fr2 = s->free_stack[s->nr_free - 2];

	saved = s->blocks[owned];
	s->blocks[owned].state = 7;
	expect_corrupt(p, "block in an unknown state");
	s->blocks[owned].state = KVC_BLOCK_OWNED | 0x80;
	expect_corrupt(p, "block left marked");
	s->blocks[owned].owner = KVC_OWNER_NONE;
	s->blocks[owned].state = KVC_BLOCK_OWNED;
	expect_corrupt(p, "owned block without owner");
	s->blocks[owned] = saved;
	s->blocks[owned].state = KVC_BLOCK_FREE;
	expect_corrupt(p, "free block with an owner");
	s->blocks[owned] = saved;
	expect_clean(p);

	/* Swap an owned and a free block's states: counts still add up. */
	saved2 = s->blocks[fr];
	s->blocks[fr] = saved;
	s->blocks[owned] = saved2;
	expect_corrupt(p, "free stack holds an owned block");
	s->blocks[fr] = saved2;
	s->blocks[owned] = saved;

	s->nr_free++;
	expect_corrupt(p, "nr_free one too many");
	s->nr_free--;
	s->nr_owned--;
	expect_corrupt(p, "nr_owned one too few");
	s->nr_owned++;

	e = s->free_stack[0];
	s->free_stack[0] = owned;
	expect_corrupt(p, "free stack entry is owned");
	s->free_stack[0] = (kvc_u32)s->backed_blocks;
	expect_corrupt(p, "free stack entry past the backed blocks");
	s->free_stack[0] = e;
	expect_clean(p);

	/* One free block twice in the stack, another missing from it. */
	s->free_stack[s->nr_free - 1] = fr2;
	expect_corrupt(p, "free stack holds a block twice");
	s->free_stack[s->nr_free - 1] = fr;
	expect_clean(p);

	v = s->backed_blocks;
	s->backed_blocks++;
	expect_corrupt(p, "backed_blocks past backed_bytes");
	s->backed_blocks = v;
	v = s->backed_bytes;
	s->backed_bytes = s->nr_blocks * s->block_bytes + 1;
	expect_corrupt(p, "backed_bytes past the range");
	s->backed_bytes = v;

	expect_clean(p);
	pair_compare(p, "restoring the corruptions");	/* the check left no marks */
	pair_fini(p);
}

/* The model comparison itself must notice a wrong kvcore. */
static void t_harness_detects_divergence(void)
{
	struct pair *p = space(BB, 64);
	void (*hook)(struct pair *) = harness_on_fail;

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	harness_on_fail = NULL;
	p->s.blocks[ids[0]].owner = 2;			/* consistent, but not the model */
	CHECK(!pair_compare(p, "tampering"));
	CHECK(p->failed);
	harness_on_fail = hook;
	p->s.blocks[ids[0]].owner = 1;
	pair_fini(p);
}

static void t_stats(void)
{
	struct pair *p = space(BB, 10);

	CHECK_EQ(pair_alloc(p, 1, 6, ids), 0);
	CHECK_EQ(pair_alloc(p, 1, 6, ids2), -ENOSPC);
	CHECK_EQ(pair_free(p, 1, 2, ids), 0);
	CHECK_EQ(pair_release(p, 1), 4);
	CHECK_EQ(p->s.stats.allocs, 6);
	CHECK_EQ(p->s.stats.frees, 6);
	CHECK_EQ(p->s.stats.alloc_failures, 1);
	pair_fini(p);
}

static void t_fini_twice_is_harmless(void)
{
	struct pair *p = space(BB, 10);

	CHECK_EQ(pair_alloc(p, 1, 3, ids), 0);
	kvc_space_fini(&p->s);
	kvc_space_fini(&p->s);
	CHECK(p->s.blocks == NULL && p->s.free_stack == NULL);
	CHECK(p->s.hashes == NULL && p->s.buckets == NULL);
	p->live = false;
	pair_fini(p);
}

/* Expected orders are written out by hand: an independent statement of the policy. */
static void numa_expect(unsigned int policy, kvc_u64 mask, kvc_u64 pool, int local,
			unsigned int cursor, const int *want, unsigned int nwant)
{
	kvc_u8 order[KVC_MAX_NODES];
	unsigned int i, n = kvc_numa_order(policy, mask, pool, local, cursor, order);

	CHECK_EQ(n, nwant);
	for (i = 0; i < n && i < nwant; i++)
		CHECK_EQ(order[i], want[i]);
}

static void t_numa_order(void)
{
	const kvc_u64 pool = 0xb;	/* nodes 0, 1, 3 */

	numa_expect(KVC_NUMA_BIND, 0x2, pool, 0, 0, (const int[]){ 1 }, 1);
	numa_expect(KVC_NUMA_BIND, 0xa, pool, 0, 0, (const int[]){ 1, 3 }, 2);
	/* A bound node without pool pages is never tried. */
	numa_expect(KVC_NUMA_BIND, 0x4, pool, 0, 0, (const int[]){ 0 }, 0);
	numa_expect(KVC_NUMA_PREFERRED, 0, pool, 3, 0, (const int[]){ 3, 0, 1 }, 3);
	numa_expect(KVC_NUMA_PREFERRED, 0, pool, 2, 0, (const int[]){ 0, 1, 3 }, 3);
	numa_expect(KVC_NUMA_PREFERRED, 0x8, pool, 0, 0, (const int[]){ 3, 0, 1 }, 3);
	numa_expect(KVC_NUMA_PREFERRED, 0xa, pool, 0, 0, (const int[]){ 1, 3, 0 }, 3);
	numa_expect(KVC_NUMA_INTERLEAVE, 0, pool, 0, 0, (const int[]){ 0, 1, 3 }, 3);
	numa_expect(KVC_NUMA_INTERLEAVE, 0, pool, 0, 2, (const int[]){ 3, 0, 1 }, 3);
	numa_expect(KVC_NUMA_INTERLEAVE, 0x3, pool, 0, 1, (const int[]){ 1, 0 }, 2);
	numa_expect(KVC_NUMA_INTERLEAVE, 0x3, pool, 0, 65, (const int[]){ 1, 0 }, 2);
	numa_expect(KVC_NUMA_INTERLEAVE, 1ULL << 63, 1ULL << 63, 0, 0, (const int[]){ 63 }, 1);
}

static const struct tap_test tests[] = {
#define T(fn) { &#fn[2], fn }	/* the name without "t_" */
	T(t_init_rejects_bad_geometry),
	T(t_init_rejects_range_overflow),
	T(t_init_empty_space),
	T(t_alloc_rejects_count0_owner0),
	T(t_alloc_first_ids_ascending),
	T(t_alloc_reuses_freed_lifo),
	T(t_alloc_quota_exhaustion),
	T(t_alloc_host_returns_zero),
	T(t_alloc_host_errno),
	T(t_alloc_host_fails_after_partial_grow),
	T(t_alloc_host_returns_bad_value),
	T(t_alloc_host_gives_more),
	T(t_alloc_host_gives_more_than_range),
	T(t_alloc_partial_blocks_straddle),
	T(t_alloc_huge_blocks),
	T(t_alloc_one_byte_blocks),
	T(t_alloc_largest_range),
	T(t_free_rejects_bad_ids),
	T(t_free_rejects_duplicates),
	T(t_free_rejects_other_owner),
	T(t_free_first_error_wins),
	T(t_free_large_batch_all_or_nothing),
	T(t_release_owner),
	T(t_owner_blocks),
	T(t_fault_first_alloc),
	T(t_fault_when_arrays_grow),
	T(t_fault_every_allocation),
	T(t_check_detects_corruption),
	T(t_harness_detects_divergence),
	T(t_stats),
	T(t_fini_twice_is_harmless),
	T(t_numa_order),
	T(t_random_differential),
	T(t_random_fault_storm),
#undef T
};

/* Every test starts without an armed fault and leaves no pair behind. */
static void (*cur_fn)(void);

static void run_fn(void)
{
	kvc_fail_alloc_countdown = 0;
	cur_fn();
	kvc_fail_alloc_countdown = 0;
	pair_fini(&P);	/* harmless when the test did it */
}

static void run_one(const struct tap_test *t)
{
	cur_fn = t->fn;
	tap_run(t->name, run_fn);
}

int main(int argc, char **argv)
{
	unsigned int n = sizeof(tests) / sizeof(tests[0]), i;
	int ret;

	tap_only = argc > 1 ? argv[1] : NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	harness_on_fail = on_mismatch;
	printf("TAP version 13\n");
	for (i = 0; i < n; i++)
		run_one(&tests[i]);
	for (i = 0; i < nr_prefix_tests; i++)
		run_one(&prefix_tests[i]);
	for (i = 0; i < nr_rules_tests; i++)
		run_one(&rules_tests[i]);
	ret = tap_done("test_kvcore");
	/* check-core's closing line, which selftests/vm/summarize.sh adds up */
	printf("%d passed, %d failed\n", tap_pass, tap_fail);
	return ret;
}
