// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Randomized differential tests: long seeded sequences of operations on
 * random geometries and host behaviours, every step compared against the
 * reference model (harness.c), kvc_space_check included.  The prefix runs
 * add PUBLISH, LOOKUP, RELEASE, eviction and reclaim with several owners
 * and a small hash alphabet, so that dedups, hits and evictions are common.
 * KVC_SEED=N reruns one seed; KVC_RANDOM_SPACES=N changes how many spaces
 * are tried.
 */
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "../tap.h"

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

/* Now and then no owner or the largest id, else one of owners 1 .. nr. */
static kvc_u32 pick_owner(kvc_u32 nr)
{
	kvc_u64 r = below(100);

	if (r == 0)
		return KVC_OWNER_NONE;
	if (r == 1)
		return 0xffffffffu;
	return 1 + (kvc_u32)below(nr);
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
	kvc_u32 o = pick_owner(6), n, k, i, count;
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
			pair_alloc(p, pick_owner(6), pick_count(p), rids);
		else if (r < 80)
			random_free(p);
		else if (r < 84)
			pair_release(p, pick_owner(6));
		else
			change_host(p);
	}
	kvc_fail_alloc_countdown = 0;
}

/* What a run exercised, so that a weak generator shows. */
static struct kvc_space_stats tot;
static unsigned long long reclaims, refills;

static void add_stats(const struct kvc_space_stats *st)
{
	kvc_u64 *t = (kvc_u64 *)&tot;
	const kvc_u64 *v = (const kvc_u64 *)st;
	unsigned int i;

	for (i = 0; i < sizeof(tot) / sizeof(kvc_u64); i++)
		t[i] += v[i];
}

static void run_random(const char *what, unsigned long long spaces, unsigned int nops,
		       unsigned int fault_pct,
		       void (*one)(struct pair *p, unsigned int nops, unsigned int fault_pct))
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
	memset(&tot, 0, sizeof(tot));
	reclaims = refills = 0;
	for (i = 0; i < spaces && tap_ok; i++) {
		one(&RP, nops, fault_pct);
		if (RP.live)
			add_stats(&RP.s.stats);
		if (RP.failed)
			tap_diag("%s: seed %llu, space %llu (bb %llu nb %llu) failed", what, seed, i,
				 (unsigned long long)RP.r.block_bytes,
				 (unsigned long long)RP.r.nr_blocks);
		pair_fini(&RP);
	}
	if (!tot.inserts && !reclaims) {
		tap_diag("%s: allocs %llu (failed %llu) frees %llu", what,
			 (unsigned long long)tot.allocs, (unsigned long long)tot.alloc_failures,
			 (unsigned long long)tot.frees);
		return;
	}
	tap_diag("%s: allocs %llu (failed %llu) frees %llu inserts %llu dedups %llu hits %llu "
		 "misses %llu pressure %llu evictions quota %llu pool %llu tenant %llu reclaim %llu "
		 "admin %llu; reclaims %llu refills %llu", what, (unsigned long long)tot.allocs,
		 (unsigned long long)tot.alloc_failures, (unsigned long long)tot.frees,
		 (unsigned long long)tot.inserts, (unsigned long long)tot.dedups,
		 (unsigned long long)tot.hits, (unsigned long long)tot.misses,
		 (unsigned long long)tot.pressure,
		 (unsigned long long)tot.evictions[KVC_EVICT_QUOTA],
		 (unsigned long long)tot.evictions[KVC_EVICT_POOL],
		 (unsigned long long)tot.evictions[KVC_EVICT_TENANT],
		 (unsigned long long)tot.evictions[KVC_EVICT_RECLAIM],
		 (unsigned long long)tot.evictions[KVC_EVICT_ADMIN], reclaims, refills);
}

void t_random_differential(void)
{
	run_random("random", 300, 400, 2, random_space);
}

/* kvcore's own allocations fail often: ENOMEM paths and recovery. */
void t_random_fault_storm(void)
{
	run_random("fault storm", 100, 300, 40, random_space);
}

/* ---- the prefix cache ---------------------------------------------------- */

static unsigned int alphabet;		/* hashes in use by the current space */
static struct kvc_publish_entry rents[IDS_MAX];
static kvc_u8 rhashes[64][KVC_HASH_BYTES];

static unsigned int pick_prio(void)
{
	static const unsigned int prios[] = { 0, 10, 50, 50, 50, 100 };

	return below(4) ? prios[below(6)] : (unsigned int)below(KVC_PRIO_LEVELS);
}

static void random_publish(struct pair *p)
{
	kvc_u32 o = pick_owner(4), n, k, i;
	kvc_u64 r = below(100);

	n = ref_owned_ids(&p->r, o, owned, IDS_MAX);
	k = 1 + (kvc_u32)below(n && n < 8 ? n : 8);
	for (i = 0; i < k; i++) {
		kvc_u32 id;

		if (n > i) {
			kvc_u32 j = i + (kvc_u32)below(n - i), t = owned[i];

			owned[i] = owned[j];
			owned[j] = t;
			id = owned[i];
		} else {
			id = (kvc_u32)below(p->r.registered + 2);
		}
		memset(&rents[i], 0, sizeof(rents[i]));
		test_hash(rents[i].hash, (unsigned int)below(alphabet));
		rents[i].id = id;
		rents[i].priority = pick_prio();
		rents[i].flags = (kvc_u32)below(2);	/* out only */
	}
	/* Now and then a bad batch: all of it must be refused. */
	if (r < 3 && k > 1) {
		kvc_u32 from = (kvc_u32)below(k);

		rents[below(k)].id = rents[from].id;	/* maybe the same id twice */
	}
	else if (r < 6)
		rents[below(k)].id = (kvc_u32)below(p->r.registered + 1);
	else if (r < 8)
		rents[below(k)].priority = KVC_PRIO_MAX + 1 + (kvc_u32)below(300);
	else if (r < 9)
		rents[below(k)].id = 0xffffffffu;
	pair_publish(p, o, r < 10 && below(4) == 0 ? 0 : k, rents);
}

static void random_lookup(struct pair *p)
{
	kvc_u32 n = 1 + (kvc_u32)below(below(4) ? 6 : 64), i;
	unsigned int base = (unsigned int)below(alphabet);

	/* Runs of consecutive keys look like a prefix chain; some are random. */
	for (i = 0; i < n; i++)
		test_hash(rhashes[i], below(3) ? (base + i) % alphabet : (unsigned int)below(alphabet));
	pair_lookup(p, pick_owner(4), below(50) ? n : 0,
		    (const kvc_u8 (*)[KVC_HASH_BYTES])rhashes, rids);
}

static void random_unref(struct pair *p)
{
	kvc_u32 o = pick_owner(4), n, k, i;
	kvc_u64 r = below(100);

	n = ref_held_ids(&p->r, o, owned, IDS_MAX);
	k = n ? 1 + (kvc_u32)below(n) : 1;
	for (i = 0; i < k; i++) {
		if (n) {
			kvc_u32 j = i + (kvc_u32)below(n - i), t = owned[i];

			owned[i] = owned[j];
			owned[j] = t;
			rids[i] = owned[i];
		} else {
			rids[i] = (kvc_u32)below(p->r.registered + 1);
		}
	}
	/* One reference too many, someone else's, or nonsense. */
	if (r < 5) {
		kvc_u32 j = (kvc_u32)below(k);

		rids[k++] = rids[j];
	}
	else if (r < 8)
		rids[below(k)] = (kvc_u32)below(p->r.registered + 1);
	else if (r < 9)
		rids[below(k)] = 0xffffffffu;
	pair_unref(p, o, r == 9 ? 0 : k, rids);
}

static void random_reclaim(struct pair *p)
{
	kvc_u64 bb = p->r.block_bytes, blocks = p->r.registered;
	kvc_u64 start = below(blocks + 1) * bb, len = (1 + below(4)) * bb;
	static const unsigned int causes[] = { KVC_EVICT_RECLAIM, KVC_EVICT_RECLAIM,
					       KVC_EVICT_ADMIN };

	/* Page-sized pieces that do not line up with blocks, now and then. */
	if (below(3) == 0)
		start += below(bb);
	if (below(3) == 0)
		len = 1 + below(len);
	if (below(20) == 0)
		len = below(2) ? 0 : ~0ULL - below(3);
	reclaims += pair_reclaim(p, start, len, causes[below(3)]) >= 0;
}

static void change_refill(struct pair *p)
{
	static const int errs[] = { -ENOSPC, -EDQUOT, -ENOMEM, -EIO, -EINTR };
	kvc_u64 r = below(100);
	int script[HOST_SCRIPT_MAX];
	unsigned int i, n;

	if (r < 60) {
		host_refill_set(&p->h, REFILL_POOL, 0);
	} else if (r < 85) {
		host_refill_set(&p->h, REFILL_ERRNO, errs[below(5)]);
	} else {
		n = 1 + (unsigned int)below(6);
		for (i = 0; i < n; i++)
			script[i] = below(2) ? 0 : errs[below(5)];
		host_refill_script(&p->h, n, script);
	}
}

/* The geometry random_prefix_space() is running, for the ops that size by it. */
static kvc_u64 prefix_bb, prefix_nb;

static void prefix_alloc(struct pair *p)
{
	pair_alloc(p, pick_owner(4), 1 + (kvc_u32)below(below(4) ? 8 : prefix_nb + 2), rids);
	refills += p->h.refills;
}

static void prefix_drop_refs(struct pair *p)
{
	pair_drop_refs(p, pick_owner(4));
}

static void prefix_release(struct pair *p)
{
	pair_release(p, pick_owner(4));
}

static void prefix_evict(struct pair *p)
{
	pair_evict(p, below(4), (unsigned int)below(KVC_EVICT_CAUSES));
}

/* An exact host, or a pool of its own size (often unlimited). */
static void prefix_change_pool(struct pair *p)
{
	if (below(2))
		host_set(&p->h, HOST_EXACT, 0);
	else
		p->h.pool_left = below(3) ? HOST_UNLIMITED : below(prefix_nb + 1) * prefix_bb;
}

/* The ops of a prefix space: op i when the draw of 100 is below ops[i].below. */
static const struct {
	unsigned int below;
	void (*op)(struct pair *p);
} prefix_ops[] = {
	{ 20, prefix_alloc },
	{ 28, random_free },
	{ 46, random_publish },
	{ 60, random_lookup },
	{ 74, random_unref },
	{ 77, prefix_drop_refs },
	{ 80, prefix_release },
	{ 83, prefix_evict },
	{ 90, random_reclaim },
	{ 94, change_refill },
	{ 97, change_host },
	{ 100, prefix_change_pool },
};

static void random_prefix_space(struct pair *p, unsigned int nops, unsigned int fault_pct)
{
	static const kvc_u64 bbs[] = { 1, 7, 512, 3000, 4096, 4096, 65536 };
	static const kvc_u64 nbs[] = { 1, 2, 3, 5, 8, 8, 17, 32, 64, 65, 100, 200, 1000 };
	kvc_u64 bb = bbs[below(sizeof(bbs) / sizeof(bbs[0]))];
	kvc_u64 nb = nbs[below(sizeof(nbs) / sizeof(nbs[0]))];
	unsigned int op;

	if (pair_init(p, bb, nb) || p->failed)
		return;
	prefix_bb = bb;
	prefix_nb = nb;
	alphabet = 2 + (unsigned int)below(below(2) ? 8 : 40);
	change_host(p);
	/* Often a pool smaller than the range: POOL evictions. */
	if (below(2))
		p->h.pool_left = (nb / 2 + below(nb)) * bb;
	for (op = 0; op < nops && !p->failed; op++) {
		kvc_u64 r = below(100);
		unsigned int i = 0;

		if (below(100) < fault_pct)
			kvc_fail_alloc_countdown = 1 + (long)below(3);
		while (r >= prefix_ops[i].below)
			i++;
		prefix_ops[i].op(p);
	}
	kvc_fail_alloc_countdown = 0;
}

void t_random_prefix(void)
{
	run_random("prefix", 300, 600, 1, random_prefix_space);
}

/* The reference tables and the arrays fail to grow often. */
void t_random_prefix_faults(void)
{
	run_random("prefix faults", 100, 400, 30, random_prefix_space);
}
