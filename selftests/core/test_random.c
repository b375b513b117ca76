// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Randomized differential test: long seeded sequences of operations on
 * random geometries and host behaviours, every step compared against the
 * reference model (harness.c).  KVC_SEED=N reruns one seed;
 * KVC_RANDOM_SPACES=N changes how many spaces are tried.
 */
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "tap.h"

#define IDS_MAX 4096

static struct pair RP;
static kvc_u32 rids[IDS_MAX + 64], owned[IDS_MAX];
static unsigned long long rng;

static kvc_u64 rnd(void)
{
	/* xorshift64* */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dULL;
}

static kvc_u64 below(kvc_u64 n)
{
	return n ? rnd() % n : 0;
}

static unsigned long long env_ull(const char *name, unsigned long long dflt)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static kvc_u64 pick_block_bytes(void)
{
	static const kvc_u64 bbs[] = { 1, 7, 512, 3000, 4096, 4096, 65536, 1 << 21 };

	if (below(10) == 0)
		return 1 + below(1 << 20);
	return bbs[below(sizeof(bbs) / sizeof(bbs[0]))];
}

static kvc_u64 pick_nr_blocks(void)
{
	static const kvc_u64 nbs[] = { 1, 2, 3, 17, 63, 64, 65, 100, 129, 500, 1000, 2000 };

	if (below(40) == 0)
		return KVC_MAX_BLOCKS;
	return nbs[below(sizeof(nbs) / sizeof(nbs[0]))];
}

static kvc_u32 pick_owner(void)
{
	kvc_u64 r = below(100);

	if (r == 0)
		return KVC_OWNER_NONE;
	if (r == 1)
		return 0xffffffffu;
	return 1 + (kvc_u32)below(6);
}

/* Bytes the host may still hand out, so a huge range stays small. */
static kvc_u64 pool_budget(const struct pair *p)
{
	kvc_u64 max_blocks = p->r.nr_blocks > 4000 ? 3000 : 0;

	if (!max_blocks)
		return below(4) ? HOST_UNLIMITED : below(p->r.nr_blocks * p->r.block_bytes + 1);
	return max_blocks * p->r.block_bytes;
}

static void change_host(struct pair *p)
{
	static const long long errs[] = { -EIO, -ENOMEM, -EINTR, -EAGAIN, -ENOSPC, -4095,
					  -4096, -(1LL << 40) };
	kvc_u64 bb = p->r.block_bytes, r = below(100);
	long long script[HOST_SCRIPT_MAX];
	unsigned int i, n;

	if (r < 30) {
		host_set(&p->h, HOST_EXACT, 0);
	} else if (r < 55) {
		static const kvc_u64 mult[] = { 1, 2, 16, 512 };

		host_set(&p->h, HOST_CHUNK,
			 (long long)(below(2) ? 4096 + below(3) : bb * mult[below(4)]));
	} else if (r < 75) {
		/* At most 16 calls per block. */
		host_set(&p->h, HOST_PARTIAL, (long long)(bb / (1 + below(16)) + below(3)));
	} else if (r < 80) {
		host_set(&p->h, HOST_ZERO, 0);
	} else if (r < 90) {
		host_set(&p->h, HOST_ERRNO, errs[below(sizeof(errs) / sizeof(errs[0]))]);
	} else {
		n = 1 + (unsigned int)below(5);
		for (i = 0; i < n; i++) {
			kvc_u64 k = below(4);

			script[i] = k == 0 ? -(long long)(1 + below(133)) :
				    k == 1 ? 0 : (long long)(1 + below(2 * bb));
		}
		host_script(&p->h, n, script);
	}
	if (below(3) == 0 || p->r.nr_blocks > 4000)
		p->h.pool_left = pool_budget(p);
}

static kvc_u32 pick_count(const struct pair *p)
{
	kvc_u64 r = below(100), nb = p->r.nr_blocks;

	if (r < 50)
		return 1 + (kvc_u32)below(8);
	if (r < 75)
		return 1 + (kvc_u32)below(64);
	if (r < 90)
		return 1 + (kvc_u32)below(nb + 2 < IDS_MAX ? nb + 2 : IDS_MAX);
	if (r < 95)
		return 0;
	return below(2) ? 0xffffffffu : (kvc_u32)(nb < 0xffffffffu ? nb + 1 : nb);
}

static void random_free(struct pair *p)
{
	kvc_u32 o = pick_owner(), n, k, i, count;
	kvc_u64 r;

	n = ref_owned_ids(&p->r, o, owned, IDS_MAX);
	k = n ? 1 + (kvc_u32)below(n < 64 ? n : (below(4) ? 64 : n)) : 1;
	for (i = 0; i < k; i++) {
		if (n) {
			kvc_u32 j = i + (kvc_u32)below(n - i);
			kvc_u32 t = owned[i];

			owned[i] = owned[j];
			owned[j] = t;
			rids[i] = owned[i];
		} else {
			rids[i] = (kvc_u32)below(p->r.registered + 2);
		}
	}
	count = k;
	r = below(100);
	if (r < 4 && k > 1) {
		kvc_u64 from = below(k);

		rids[below(k)] = rids[from];			/* maybe a duplicate */
	} else if (r < 8) {
		rids[below(k)] = (kvc_u32)below(p->r.registered + 1);	/* anyone's */
	} else if (r < 10) {
		rids[below(k)] = below(2) ? 0xffffffffu : (kvc_u32)(p->r.registered + below(3));
	} else if (r < 11) {
		count = 0;
	} else if (r < 13) {
		o = KVC_OWNER_NONE;
	}
	pair_free(p, o, count, rids);
}

static void random_space(struct pair *p, unsigned int nops, unsigned int fault_pct)
{
	unsigned int op;
	kvc_u64 bb = pick_block_bytes(), nb = pick_nr_blocks();

	if (below(30) == 0)
		bb = below(2) ? 0 : ~0ULL / nb + 1 + below(1000);	/* rejected */
	if (pair_init(p, bb, nb) || p->failed)
		return;
	change_host(p);
	for (op = 0; op < nops && !p->failed; op++) {
		kvc_u64 r = below(100);

		if (below(100) < fault_pct)
			kvc_fail_alloc_countdown = 1 + (long)below(3);
		if (r < 42)
			pair_alloc(p, pick_owner(), pick_count(p), rids);
		else if (r < 80)
			random_free(p);
		else if (r < 84)
			pair_release(p, pick_owner());
		else
			change_host(p);
	}
	kvc_fail_alloc_countdown = 0;
}

static void run_random(const char *what, unsigned long long spaces, unsigned int nops,
		       unsigned int fault_pct)
{
	static unsigned long long seed;
	unsigned long long i;

	/* One seed per run, for every random test. */
	if (!seed)
		seed = env_ull("KVC_SEED", 0);
	if (!seed)
		seed = ((unsigned long long)time(NULL) << 20) ^ (unsigned long long)getpid();
	spaces = env_ull("KVC_RANDOM_SPACES", spaces);
	tap_diag("%s: seed %llu (rerun with KVC_SEED=%llu), %llu spaces x %u ops", what, seed,
		 seed, spaces, nops);
	rng = seed | 1;
	for (i = 0; i < spaces && tap_ok; i++) {
		random_space(&RP, nops, fault_pct);
		if (RP.failed)
			tap_diag("%s: seed %llu, space %llu (bb %llu nb %llu) failed", what, seed, i,
				 (unsigned long long)RP.r.block_bytes,
				 (unsigned long long)RP.r.nr_blocks);
		pair_fini(&RP);
	}
}

void t_random_differential(void)
{
	run_random("random", 300, 400, 2);
}

/* kvcore's own allocations fail often: ENOMEM paths and recovery. */
void t_random_fault_storm(void)
{
	run_random("fault storm", 100, 300, 40);
}
