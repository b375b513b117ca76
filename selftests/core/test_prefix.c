// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Unit tests of kvcore's prefix cache: PUBLISH, LOOKUP, RELEASE of reader
 * references, eviction inside ALLOC, holes (reclaim and refill) and the
 * accounting check.  Every operation goes through the harness, which runs
 * it on the reference model too and compares errno, callbacks and the whole
 * state; the expectations below are written out by hand on top of that.
 */
#include <limits.h>
#include "harness.h"
#include "../tap.h"

#define BB 4096ULL
#define NONE KVC_NONE

static struct pair Q;		/* the pair of the running test */
static kvc_u32 ids[512], out[512];

static struct pair *space(kvc_u64 block_bytes, kvc_u64 nr_blocks)
{
	CHECK_EQ(pair_init(&Q, block_bytes, nr_blocks), 0);
	return &Q;
}

static void ent(struct kvc_publish_entry *e, kvc_u32 id, unsigned int k, unsigned int prio)
{
	memset(e, 0, sizeof(*e));
	test_hash(e->hash, k);
	e->id = id;
	e->priority = prio;
}

static const kvc_u8 *H(unsigned int k)
{
	static kvc_u8 h[8][KVC_HASH_BYTES];
	static unsigned int n;
	kvc_u8 *d = h[n++ & 7];

	test_hash(d, k);
	return d;
}

static kvc_u32 alloc1(struct pair *p, kvc_u32 owner)
{
	kvc_u32 id = NONE;

	CHECK_EQ(pair_alloc(p, owner, 1, &id), 0);
	return id;
}

/* Publish block id of owner under hash k: the id now holding k. */
static kvc_u32 pub1(struct pair *p, kvc_u32 owner, kvc_u32 id, unsigned int k, unsigned int prio)
{
	struct kvc_publish_entry e;

	ent(&e, id, k, prio);
	CHECK(pair_publish(p, owner, 1, &e) >= 0);
	return e.id;
}

static int unref1(struct pair *p, kvc_u32 owner, kvc_u32 id)
{
	return pair_unref(p, owner, 1, &id);
}

/* Block id of owner published under k and released: CACHED, newest at prio. */
static void cache_block(struct pair *p, kvc_u32 owner, kvc_u32 id, unsigned int k,
			unsigned int prio)
{
	CHECK_EQ(pub1(p, owner, id, k, prio), id);
	CHECK_EQ(unref1(p, owner, id), 0);
	CHECK_EQ(p->s.blocks[id].state, KVC_BLOCK_CACHED);
}

static int lookup(struct pair *p, kvc_u32 owner, unsigned int n, const unsigned int *ks)
{
	kvc_u8 (*hs)[KVC_HASH_BYTES] = calloc(n ? n : 1, KVC_HASH_BYTES);
	unsigned int i;
	int ret;

	for (i = 0; i < n; i++)
		test_hash(hs[i], ks[i]);
	ret = pair_lookup(p, owner, n, (const kvc_u8 (*)[KVC_HASH_BYTES])hs, out);
	free(hs);
	return ret;
}

#define LOOKUP(p, owner, ...)                                                                \
	lookup(p, owner, sizeof((unsigned int[]){ __VA_ARGS__ }) / sizeof(unsigned int),    \
	       (unsigned int[]){ __VA_ARGS__ })
#define UNREF(p, owner, ...)                                                                  \
	pair_unref(p, owner, sizeof((kvc_u32[]){ __VA_ARGS__ }) / sizeof(kvc_u32),           \
		   (kvc_u32[]){ __VA_ARGS__ })

/* kvc_lru_first/next into out[]; returns how many. */
static unsigned int lru(const struct pair *p)
{
	unsigned int n = 0;
	kvc_u32 id;

	for (id = kvc_lru_first(&p->s); id != NONE && n < 512; id = kvc_lru_next(&p->s, id))
		out[n++] = id;
	return n;
}

static void expect_lru(const struct pair *p, const kvc_u32 *want, unsigned int n)
{
	kvc_u32 got[512];
	unsigned int i, m = lru(p);

	memcpy(got, out, sizeof(got));
	CHECK_EQ(m, n);
	for (i = 0; i < n && i < m; i++)
		if (got[i] != want[i]) {
			tap_diag("LRU position %u is block %u, expected %u", i, got[i], want[i]);
			tap_ok = false;
		}
}

#define EXPECT_LRU(p, ...)                                                                    \
	expect_lru(p, (kvc_u32[]){ __VA_ARGS__ }, sizeof((kvc_u32[]){ __VA_ARGS__ }) / sizeof(kvc_u32))

/* The evicted callbacks of the last operation, in order. */
static void expect_evicted(const struct pair *p, unsigned int cause, const kvc_u32 *want,
			   unsigned int n)
{
	unsigned int i, m = 0;

	for (i = 0; i < p->h.nr_trace; i++) {
		const struct trace_ent *t = &p->h.trace[i];

		if (t->kind != TR_EVICTED)
			continue;
		if (m < n && (t->a != want[m] || t->b != cause)) {
			tap_diag("eviction %u: block %llu cause %llu, expected block %u cause %u", m,
				 (unsigned long long)t->a, (unsigned long long)t->b, want[m], cause);
			tap_ok = false;
		}
		m++;
	}
	CHECK_EQ(m, n);
}

#define EXPECT_EVICTED(p, cause, ...)                                                          \
	expect_evicted(p, cause, (kvc_u32[]){ __VA_ARGS__ },                                   \
		       sizeof((kvc_u32[]){ __VA_ARGS__ }) / sizeof(kvc_u32))
#define EXPECT_NO_EVICTION(p) expect_evicted(p, 0, NULL, 0)

static bool has_id(const kvc_u32 *v, unsigned int n, kvc_u32 id)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (v[i] == id)
			return true;
	return false;
}

static void expect_clean(struct pair *p)
{
	char msg[256] = "";

	if (kvc_space_check(&p->s, msg, sizeof(msg))) {
		tap_diag("kvc_space_check: %s", msg);
		tap_ok = false;
	}
}

/* ---- publish ----------------------------------------------------------- */

static void t_publish_new_hashes(void)
{
	struct pair *p = space(BB, 16);
	struct kvc_publish_entry e[3];

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);		/* 0 1 2 3 */
	ent(&e[0], 2, 7, 50);
	ent(&e[1], 0, 8, 0);
	ent(&e[2], 3, 9, KVC_PRIO_MAX);
	e[1].flags = 0x55;				/* out only: overwritten */
	CHECK_EQ(pair_publish(p, 1, 3, e), 0);
	CHECK_EQ(e[0].id, 2);
	CHECK_EQ(e[1].id, 0);
	CHECK_EQ(e[2].id, 3);
	CHECK_EQ(e[0].flags | e[1].flags | e[2].flags, 0);
	CHECK_EQ(p->s.blocks[2].state, KVC_BLOCK_PUBLISHED);
	CHECK_EQ(p->s.blocks[2].readers, 1);
	CHECK_EQ(p->s.blocks[2].priority, 50);
	CHECK_EQ(p->s.blocks[0].priority, 0);
	CHECK_EQ(p->s.blocks[3].priority, 100);
	CHECK_EQ(kvc_find(&p->s, H(7)), 2);
	CHECK_EQ(kvc_find(&p->s, H(8)), 0);
	CHECK_EQ(kvc_find(&p->s, H(10)), NONE);
	CHECK(!memcmp(kvc_block_hash(&p->s, 3), H(9), KVC_HASH_BYTES));
	CHECK_EQ(kvc_refs_count(&p->refs[1], 2), 1);
	CHECK_EQ(kvc_refs_count(&p->refs[1], 1), 0);
	CHECK_EQ(p->refs[1].total, 3);
	CHECK_EQ(p->s.nr_owned, 1);
	CHECK_EQ(p->s.nr_published, 3);
	CHECK_EQ(p->s.nr_readers, 3);
	CHECK_EQ(p->s.stats.inserts, 3);
	CHECK_EQ(p->s.stats.dedups, 0);
	CHECK_EQ(kvc_owner_blocks(&p->s, 1), 1);
	/* Published blocks are nobody's: FREE of one is EPERM. */
	CHECK_EQ(pair_free(p, 1, 1, (kvc_u32[]){ 2 }), -EPERM);
	CHECK_EQ(pair_release(p, 1), 1);		/* only block 1 */
	CHECK_EQ(p->s.nr_published, 3);
	pair_fini(p);
}

/* Another owner publishes the same content: it gets the block already there. */
static void t_publish_dedup_other_owner(void)
{
	struct pair *p = space(BB, 16);
	struct kvc_publish_entry e;
	kvc_u32 a = alloc1(p, 1), b = alloc1(p, 2);

	CHECK_EQ(pub1(p, 1, a, 5, 20), a);
	ent(&e, b, 5, 90);
	CHECK_EQ(pair_publish(p, 2, 1, &e), 1);
	CHECK_EQ(e.id, a);
	CHECK_EQ(e.flags, KVC_PUBLISH_DEDUP);
	CHECK_EQ(e.priority, 90);			/* in only: untouched */
	CHECK_EQ(p->s.blocks[b].state, KVC_BLOCK_FREE);
	CHECK_EQ(p->s.blocks[a].readers, 2);
	CHECK_EQ(p->s.blocks[a].priority, 20);		/* a dedup keeps the priority */
	CHECK_EQ(kvc_refs_count(&p->refs[1], a), 1);
	CHECK_EQ(kvc_refs_count(&p->refs[2], a), 1);
	CHECK_EQ(kvc_refs_count(&p->refs[2], b), 0);
	CHECK_EQ(p->s.stats.dedups, 1);
	CHECK_EQ(p->s.stats.inserts, 1);
	CHECK_EQ(p->s.stats.frees, 1);
	CHECK_EQ(p->s.nr_owned, 0);
	/* The freed block is the next one handed out (LIFO), without growing. */
	CHECK_EQ(alloc1(p, 3), b);
	CHECK_EQ(p->h.calls, 0);
	pair_fini(p);
}

/* The same hash twice in one batch: the second entry dedups onto the first. */
static void t_publish_dedup_same_batch(void)
{
	struct pair *p = space(BB, 16);
	struct kvc_publish_entry e[4];

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	ent(&e[0], 0, 1, 50);
	ent(&e[1], 1, 1, 10);
	ent(&e[2], 2, 2, 50);
	ent(&e[3], 3, 1, 50);
	CHECK_EQ(pair_publish(p, 1, 4, e), 2);
	CHECK_EQ(e[0].id, 0);
	CHECK_EQ(e[0].flags, 0);
	CHECK_EQ(e[1].id, 0);
	CHECK_EQ(e[1].flags, KVC_PUBLISH_DEDUP);
	CHECK_EQ(e[2].id, 2);
	CHECK_EQ(e[3].id, 0);
	CHECK_EQ(e[3].flags, KVC_PUBLISH_DEDUP);
	CHECK_EQ(p->s.blocks[0].readers, 3);
	CHECK_EQ(kvc_refs_count(&p->refs[1], 0), 3);
	CHECK_EQ(p->s.blocks[1].state, KVC_BLOCK_FREE);
	CHECK_EQ(p->s.blocks[3].state, KVC_BLOCK_FREE);
	CHECK_EQ(p->s.stats.dedups, 2);
	CHECK_EQ(p->s.stats.inserts, 2);
	/* Three releases of block 0 are allowed, a fourth is not. */
	CHECK_EQ(UNREF(p, 1, 0, 2, 0), 0);
	CHECK_EQ(p->s.blocks[0].state, KVC_BLOCK_PUBLISHED);
	CHECK_EQ(UNREF(p, 1, 0, 0), -EINVAL);
	CHECK_EQ(UNREF(p, 1, 0), 0);
	CHECK_EQ(p->s.blocks[0].state, KVC_BLOCK_CACHED);
	pair_fini(p);
}

/* Publishing content that is CACHED revives that block. */
static void t_publish_dedup_cached(void)
{
	struct pair *p = space(BB, 16);
	kvc_u32 a = alloc1(p, 1), b, c = alloc1(p, 1);

	cache_block(p, 1, a, 3, 30);
	cache_block(p, 1, c, 4, 30);
	EXPECT_LRU(p, a, c);
	b = alloc1(p, 2);
	CHECK_EQ(pub1(p, 2, b, 3, 70), a);
	CHECK_EQ(p->s.blocks[a].state, KVC_BLOCK_PUBLISHED);
	CHECK_EQ(p->s.blocks[a].priority, 30);
	CHECK_EQ(p->s.nr_cached, 1);
	EXPECT_LRU(p, c);
	/* Released again, it is now the newest. */
	CHECK_EQ(unref1(p, 2, a), 0);
	EXPECT_LRU(p, c, a);
	pair_fini(p);
}

/*
 * Owner 1 holds 0..3, owner 2 holds 4; 5 is published (owner 1 holds a
 * reference), 6 is cached, 7 is free.
 */
static struct pair *publish_fixture(void)
{
	struct pair *p = space(BB, 16);

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	CHECK_EQ(alloc1(p, 2), 4);
	CHECK_EQ(alloc1(p, 1), 5);
	CHECK_EQ(alloc1(p, 1), 6);
	CHECK_EQ(alloc1(p, 1), 7);
	CHECK_EQ(pub1(p, 1, 5, 50, 50), 5);
	cache_block(p, 1, 6, 60, 50);
	CHECK_EQ(pair_free(p, 1, 1, (kvc_u32[]){ 7 }), 0);
	return p;
}

/* Every rejected batch leaves the space byte for byte as it was. */
static int publish_bad(struct pair *p, kvc_u32 owner, unsigned int n, const kvc_u32 *bid,
		       const unsigned int *prio)
{
	struct kvc_publish_entry e[8];
	struct snap sn;
	unsigned int i;
	int ret;

	for (i = 0; i < n; i++)
		ent(&e[i], bid[i], 100 + i, prio ? prio[i] : 50);
	snap_take(&sn, &p->s);
	ret = pair_publish(p, owner, n, e);
	if (ret < 0)
		CHECK(snap_same(&sn, &p->s));
	snap_free(&sn);
	return ret;
}

#define PUB_BAD(p, owner, ...)                                                                \
	publish_bad(p, owner, sizeof((kvc_u32[]){ __VA_ARGS__ }) / sizeof(kvc_u32),          \
		    (kvc_u32[]){ __VA_ARGS__ }, NULL)

static void t_publish_errors_change_nothing(void)
{
	struct pair *p = publish_fixture();
	struct kvc_publish_entry e;

	CHECK_EQ(publish_bad(p, 1, 0, ids, NULL), -EINVAL);		/* count 0 */
	CHECK_EQ(PUB_BAD(p, 1, 16), -EINVAL);				/* past the backed blocks */
	CHECK_EQ(PUB_BAD(p, 1, 0xffffffffu), -EINVAL);
	CHECK_EQ(PUB_BAD(p, 1, 0, 1, 0), -EINVAL);			/* the same id twice */
	CHECK_EQ(PUB_BAD(p, 1, 0, 4), -EPERM);				/* owner 2's */
	CHECK_EQ(PUB_BAD(p, 1, 7), -EPERM);				/* free */
	CHECK_EQ(PUB_BAD(p, 1, 5), -EPERM);				/* published */
	CHECK_EQ(PUB_BAD(p, 1, 6), -EPERM);				/* cached */
	CHECK_EQ(PUB_BAD(p, 2, 0), -EPERM);
	CHECK_EQ(PUB_BAD(p, KVC_OWNER_NONE, 7), -EPERM);
	CHECK_EQ(PUB_BAD(p, 1, 0, 1, 2, 3, 4), -EPERM);		/* the last one is bad */
	CHECK_EQ(PUB_BAD(p, 1, 4, 99), -EPERM);			/* the first bad id decides */
	CHECK_EQ(PUB_BAD(p, 1, 99, 4), -EINVAL);
	CHECK_EQ(publish_bad(p, 1, 2, (kvc_u32[]){ 0, 1 }, (unsigned int[]){ 100, 101 }), -EINVAL);
	CHECK_EQ(publish_bad(p, 1, 1, (kvc_u32[]){ 0 }, (unsigned int[]){ 0xffffffffu }), -EINVAL);
	CHECK_EQ(publish_bad(p, 1, 1, (kvc_u32[]){ 0 }, (unsigned int[]){ 256 + 50 }), -EINVAL);
	CHECK_EQ(p->s.nr_owned, 5);
	CHECK_EQ(p->s.stats.inserts, 2);
	CHECK_EQ(p->refs[1].total, 1);
	/* The marks of the rejected batches are gone: these succeed. */
	ent(&e, 0, 200, 100);
	CHECK_EQ(pair_publish(p, 1, 1, &e), 0);
	CHECK_EQ(PUB_BAD(p, 1, 1, 2, 3), 0);
	pair_fini(p);
}

/* The reference table cannot grow: -ENOMEM, and nothing happened. */
static void t_publish_enomem(void)
{
	struct pair *p = space(BB, 64);
	struct kvc_publish_entry e[9];
	unsigned int i;

	CHECK_EQ(pair_alloc(p, 1, 17, ids), 0);
	for (i = 0; i < 9; i++)
		ent(&e[i], ids[i], i, 50);
	kvc_fail_alloc_countdown = 1;			/* the first table */
	CHECK_EQ(pair_publish(p, 1, 1, e), -ENOMEM);
	CHECK_EQ(kvc_fail_alloc_countdown, 0);
	kvc_fail_alloc_countdown = 2;			/* its second array */
	CHECK_EQ(pair_publish(p, 1, 1, e), -ENOMEM);
	CHECK_EQ(p->s.blocks[ids[0]].state, KVC_BLOCK_OWNED);
	CHECK_EQ(pair_publish(p, 1, 8, e), 0);		/* 8 ids fit 16 slots at half load */
	/* The ninth needs a bigger table. */
	kvc_fail_alloc_countdown = 1;
	CHECK_EQ(pair_publish(p, 1, 1, e + 8), -ENOMEM);
	CHECK_EQ(p->refs[1].total, 8);
	CHECK_EQ(pair_publish(p, 1, 1, e + 8), 0);
	/* A dedup needs no more room than the table has: no allocation. */
	ent(&e[0], ids[9], 3, 50);
	kvc_fail_alloc_countdown = 1;
	CHECK_EQ(pair_publish(p, 1, 1, e), 1);
	CHECK_EQ(kvc_fail_alloc_countdown, 1);
	kvc_fail_alloc_countdown = 0;
	pair_fini(p);
}

/* ---- lookup ------------------------------------------------------------ */

static void t_lookup_longest_prefix(void)
{
	struct pair *p = space(BB, 16);
	kvc_u32 a, b, c;

	CHECK_EQ(pair_alloc(p, 1, 3, ids), 0);
	a = ids[0], b = ids[1], c = ids[2];
	CHECK_EQ(pub1(p, 1, a, 1, 50), a);
	CHECK_EQ(pub1(p, 1, b, 2, 50), b);
	CHECK_EQ(pub1(p, 1, c, 3, 50), c);
	CHECK_EQ(LOOKUP(p, 2, 1, 2, 9, 3), 2);
	CHECK_EQ(out[0], a);
	CHECK_EQ(out[1], b);
	CHECK_EQ(kvc_refs_count(&p->refs[2], a), 1);
	CHECK_EQ(kvc_refs_count(&p->refs[2], c), 0);	/* after the miss: not taken */
	CHECK_EQ(p->s.blocks[a].readers, 2);
	CHECK_EQ(p->s.stats.hits, 2);
	CHECK_EQ(p->s.stats.misses, 2);
	CHECK_EQ(LOOKUP(p, 2, 9, 1, 2), 0);		/* a miss first: nothing */
	CHECK_EQ(p->s.stats.misses, 5);
	CHECK_EQ(LOOKUP(p, 2, 3, 3, 1), 3);		/* the same hash twice: two refs */
	CHECK_EQ(kvc_refs_count(&p->refs[2], c), 2);
	CHECK_EQ(p->s.stats.hits, 5);
	CHECK_EQ(p->refs[2].total, 5);
	CHECK_EQ(p->s.nr_readers, 8);
	pair_fini(p);
}

/* A CACHED hit is PUBLISHED again and leaves the LRU. */
static void t_lookup_revives_cached(void)
{
	struct pair *p = space(BB, 16);

	CHECK_EQ(pair_alloc(p, 1, 3, ids), 0);
	cache_block(p, 1, 0, 10, 50);
	cache_block(p, 1, 1, 11, 50);
	cache_block(p, 1, 2, 12, 50);
	EXPECT_LRU(p, 0, 1, 2);
	CHECK_EQ(LOOKUP(p, 3, 11), 1);
	CHECK_EQ(p->s.blocks[1].state, KVC_BLOCK_PUBLISHED);
	EXPECT_LRU(p, 0, 2);
	CHECK_EQ(p->s.nr_cached, 2);
	CHECK_EQ(p->s.nr_published, 1);
	CHECK_EQ(UNREF(p, 3, 1), 0);
	EXPECT_LRU(p, 0, 2, 1);
	pair_fini(p);
}

static void t_lookup_enomem_takes_nothing(void)
{
	struct pair *p = space(BB, 64);
	unsigned int i;

	CHECK_EQ(pair_alloc(p, 1, 20, ids), 0);
	for (i = 0; i < 20; i++)
		CHECK_EQ(pub1(p, 1, ids[i], i, 50), ids[i]);
	kvc_fail_alloc_countdown = 1;
	CHECK_EQ(LOOKUP(p, 2, 0, 1, 2), -ENOMEM);
	CHECK_EQ(p->s.stats.hits, 0);
	CHECK_EQ(p->s.stats.misses, 0);
	CHECK_EQ(p->s.blocks[ids[0]].readers, 1);
	/* No hit, nothing to hold: no table needed, no allocation. */
	kvc_fail_alloc_countdown = 1;
	CHECK_EQ(LOOKUP(p, 2, 99, 0), 0);
	CHECK_EQ(kvc_fail_alloc_countdown, 1);
	kvc_fail_alloc_countdown = 0;
	CHECK_EQ(LOOKUP(p, 2, 0, 1, 2, 3, 4, 5, 6, 7), 8);
	kvc_fail_alloc_countdown = 2;			/* 9 ids: the table doubles, second array */
	CHECK_EQ(LOOKUP(p, 2, 8), -ENOMEM);
	CHECK_EQ(p->refs[2].total, 8);
	CHECK_EQ(LOOKUP(p, 2, 8, 9, 10), 3);
	pair_fini(p);
}

/* ---- release of reader references ----------------------------------------- */

static void t_release_up_to_held(void)
{
	struct pair *p = space(BB, 16);
	kvc_u32 a, b;

	CHECK_EQ(pair_alloc(p, 1, 2, ids), 0);
	a = ids[0];
	b = ids[1];
	CHECK_EQ(pub1(p, 1, a, 1, 50), a);
	CHECK_EQ(pub1(p, 1, b, 2, 50), b);
	CHECK_EQ(LOOKUP(p, 1, 1), 1);			/* owner 1: a twice, b once */
	CHECK_EQ(LOOKUP(p, 2, 1, 2), 2);		/* owner 2: a, b */
	CHECK_EQ(pair_unref(p, 1, 0, ids), -EINVAL);
	CHECK_EQ(UNREF(p, 1, a, a, a), -EINVAL);	/* three, holds two */
	CHECK_EQ(UNREF(p, 1, b, b), -EINVAL);
	CHECK_EQ(UNREF(p, 3, a), -EINVAL);		/* holds none */
	CHECK_EQ(UNREF(p, 1, 16), -EINVAL);
	CHECK_EQ(UNREF(p, 1, 0xffffffffu), -EINVAL);
	CHECK_EQ(UNREF(p, 1, 2), -EINVAL);		/* not even backed */
	CHECK_EQ(UNREF(p, 1, a, b, 5), -EINVAL);	/* all or nothing */
	CHECK_EQ(p->s.blocks[a].readers, 3);
	CHECK_EQ(p->refs[1].total, 3);
	CHECK_EQ(UNREF(p, 1, a, b, a), 0);
	CHECK_EQ(p->refs[1].total, 0);
	CHECK_EQ(p->s.blocks[a].readers, 1);		/* owner 2's */
	CHECK_EQ(p->s.nr_cached, 0);
	CHECK_EQ(UNREF(p, 1, a), -EINVAL);		/* its references are gone */
	CHECK_EQ(UNREF(p, 2, b, a), 0);
	EXPECT_LRU(p, b, a);
	pair_fini(p);
}

/* A block becomes cached when its last reference goes: that fixes its LRU place. */
static void t_release_lru_order(void)
{
	struct pair *p = space(BB, 16);
	unsigned int i;

	CHECK_EQ(pair_alloc(p, 1, 6, ids), 0);
	for (i = 0; i < 6; i++)
		CHECK_EQ(pub1(p, 1, i, 20 + i, i == 4 ? 10 : 50), i);
	CHECK_EQ(LOOKUP(p, 1, 20), 1);			/* 0 held twice */
	CHECK_EQ(UNREF(p, 1, 3, 0, 1), 0);
	EXPECT_LRU(p, 3, 1);				/* 0 still has a reader */
	CHECK_EQ(UNREF(p, 1, 0, 5, 4), 0);
	EXPECT_LRU(p, 4, 3, 1, 0, 5);			/* priority 10 first though newest */
	CHECK_EQ(UNREF(p, 1, 2), 0);
	EXPECT_LRU(p, 4, 3, 1, 0, 5, 2);
	pair_fini(p);
}

/* kvc_release_refs drops what one holder has; others keep theirs. */
static void t_release_refs_of_holder(void)
{
	struct pair *p = space(BB, 16);
	unsigned int i;

	CHECK_EQ(pair_alloc(p, 1, 5, ids), 0);
	for (i = 0; i < 5; i++)
		CHECK_EQ(pub1(p, 1, i, i, 50), i);
	CHECK_EQ(LOOKUP(p, 2, 0, 1, 2, 0, 0), 5);
	CHECK_EQ(LOOKUP(p, 3, 2), 1);
	CHECK_EQ(UNREF(p, 1, 2, 3, 4), 0);
	CHECK_EQ(pair_drop_refs(p, 2), 5);
	CHECK(p->refs[2].keys == NULL && p->refs[2].cap == 0);
	CHECK_EQ(p->s.blocks[0].readers, 1);
	CHECK_EQ(p->s.blocks[2].readers, 1);		/* owner 3's */
	CHECK_EQ(p->s.blocks[1].readers, 1);
	CHECK_EQ(pair_drop_refs(p, 2), 0);
	CHECK_EQ(pair_drop_refs(p, 1), 2);		/* 0 and 1 */
	CHECK_EQ(p->s.nr_published, 1);
	CHECK_EQ(p->s.nr_cached, 4);
	CHECK_EQ(pair_drop_refs(p, 3), 1);
	CHECK_EQ(p->s.nr_readers, 0);
	CHECK_EQ(p->s.nr_cached, 5);
	/* Owned blocks are not references: release_owner frees only those. */
	CHECK_EQ(pair_alloc(p, 1, 2, ids), 0);
	CHECK_EQ(pair_release(p, 1), 2);
	CHECK_EQ(p->s.nr_cached, 5);
	pair_fini(p);
}

/* ---- eviction inside ALLOC ----------------------------------------------- */

static const unsigned int order_prio[8] = { 50, 10, 50, 90, 10, 50, 0, 100 };

/* A full 8-block range, every block cached, released 7 first and 0 last. */
static struct pair *full_cached(void)
{
	struct pair *p = space(BB, 8);
	int i;

	CHECK_EQ(pair_alloc(p, 1, 8, ids), 0);
	for (i = 0; i < 8; i++)
		CHECK_EQ(pub1(p, 1, i, i, order_prio[i]), i);
	for (i = 7; i >= 0; i--)
		CHECK_EQ(unref1(p, 1, i), 0);
	return p;
}

static void t_evict_order(void)
{
	struct pair *p = full_cached();
	kvc_u32 got[3];

	/* Priority 0, then 10 (4 was released before 1), then 50 (5, 2, 0). */
	EXPECT_LRU(p, 6, 4, 1, 5, 2, 0, 3, 7);
	CHECK_EQ(pair_alloc(p, 2, 3, got), 0);
	EXPECT_EVICTED(p, KVC_EVICT_QUOTA, 6, 4, 1);
	CHECK_EQ(p->h.calls, 0);			/* the range is full: no grow */
	CHECK(has_id(got, 3, 6) && has_id(got, 3, 4) && has_id(got, 3, 1));
	CHECK_EQ(kvc_find(&p->s, H(6)), NONE);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_QUOTA], 3);
	CHECK_EQ(p->s.stats.pressure, 1);
	EXPECT_LRU(p, 5, 2, 0, 3, 7);
	/* A referenced block is never evicted: 5 is skipped. */
	CHECK_EQ(LOOKUP(p, 3, 5), 1);
	CHECK_EQ(pair_alloc(p, 2, 2, got), 0);
	EXPECT_EVICTED(p, KVC_EVICT_QUOTA, 2, 0);
	CHECK_EQ(p->s.stats.pressure, 2);
	EXPECT_LRU(p, 3, 7);
	/* Two cached, three wanted: ENOSPC, and nothing is evicted. */
	CHECK_EQ(pair_alloc(p, 2, 3, got), -ENOSPC);
	CHECK_EQ(p->s.stats.last_pressure_cause, KVC_EVICT_QUOTA);
	EXPECT_NO_EVICTION(p);
	EXPECT_LRU(p, 3, 7);
	CHECK_EQ(p->s.stats.pressure, 2);
	CHECK_EQ(p->s.stats.alloc_failures, 1);
	CHECK_EQ(pair_alloc(p, 2, 2, got), 0);
	EXPECT_EVICTED(p, KVC_EVICT_QUOTA, 3, 7);
	CHECK_EQ(p->s.nr_cached, 0);
	CHECK_EQ(p->s.nr_owned, 7);
	pair_fini(p);
}

/* Free blocks go first; only the missing rest is evicted. */
static void t_evict_only_what_is_missing(void)
{
	struct pair *p = space(BB, 8);
	int i;

	CHECK_EQ(pair_alloc(p, 1, 8, ids), 0);
	for (i = 0; i < 4; i++)
		cache_block(p, 1, i, i, 50);
	CHECK_EQ(pair_release(p, 1), 4);		/* 4..7 free */
	CHECK_EQ(pair_alloc(p, 2, 5, ids), 0);
	EXPECT_EVICTED(p, KVC_EVICT_QUOTA, 0);
	EXPECT_LRU(p, 1, 2, 3);
	/* Blocks 4..7 owned by 2 plus block 0. */
	CHECK_EQ(kvc_owner_blocks(&p->s, 2), 5);
	CHECK_EQ(p->s.blocks[0].owner, 2);
	pair_fini(p);
}

/* Growing the range comes before evicting. */
static void t_evict_after_growing(void)
{
	struct pair *p = space(BB, 6);
	int i;

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	for (i = 0; i < 4; i++)
		cache_block(p, 1, i, i, 50);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);
	EXPECT_NO_EVICTION(p);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, BB);
	/* One more block in the range, two wanted: grow asks for the rest only, then evicts one. */
	CHECK_EQ(pair_alloc(p, 2, 2, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, BB);
	EXPECT_EVICTED(p, KVC_EVICT_QUOTA, 0);
	CHECK_EQ(p->s.backed_blocks, 6);
	pair_fini(p);
}

/* Why the growth stopped decides the cause. */
static void t_evict_causes(void)
{
	struct pair *p = space(BB, 64);
	int i;

	CHECK_EQ(pair_alloc(p, 1, 8, ids), 0);
	for (i = 0; i < 8; i++)
		cache_block(p, 1, i, i, 50);
	host_set(&p->h, HOST_ZERO, 0);			/* the pool is empty */
	CHECK_EQ(pair_alloc(p, 2, 2, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 2 * BB);
	EXPECT_EVICTED(p, KVC_EVICT_POOL, 0, 1);
	CHECK_EQ(p->s.stats.last_pressure_cause, KVC_EVICT_POOL);
	host_set(&p->h, HOST_ERRNO, -ENOSPC);		/* the same, as an errno */
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);
	EXPECT_EVICTED(p, KVC_EVICT_POOL, 2);
	host_set(&p->h, HOST_ERRNO, -EDQUOT);		/* the tenant's limit */
	CHECK_EQ(pair_alloc(p, 2, 2, ids), 0);
	EXPECT_EVICTED(p, KVC_EVICT_TENANT, 3, 4);
	CHECK_EQ(p->s.stats.last_pressure_cause, KVC_EVICT_TENANT);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_POOL], 3);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_TENANT], 2);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_QUOTA], 0);
	CHECK_EQ(p->s.stats.pressure, 3);
	/* Any other errno fails the allocation, and nothing is evicted. */
	host_set(&p->h, HOST_ERRNO, -EIO);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -EIO);
	EXPECT_NO_EVICTION(p);
	CHECK_EQ(p->s.stats.last_pressure_cause, KVC_EVICT_TENANT);	/* not out of room */
	host_set(&p->h, HOST_ERRNO, -4096);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -EIO);
	EXPECT_NO_EVICTION(p);
	/* Three cached, four wanted, no pool: ENOSPC, not EDQUOT. */
	host_set(&p->h, HOST_ERRNO, -EDQUOT);
	CHECK_EQ(pair_alloc(p, 2, 4, ids), -ENOSPC);
	EXPECT_NO_EVICTION(p);
	CHECK_EQ(p->s.nr_cached, 3);
	/* Part of it from the pool, then the pool runs dry. */
	host_set(&p->h, HOST_EXACT, 0);
	p->h.pool_left = BB;
	CHECK_EQ(pair_alloc(p, 2, 3, ids), 0);
	CHECK_EQ(p->h.calls, 2);
	EXPECT_EVICTED(p, KVC_EVICT_POOL, 5, 6);
	CHECK_EQ(p->s.backed_blocks, 9);
	pair_fini(p);
}

/* No cached blocks: EDQUOT and ENOSPC from the host are both ENOSPC. */
static void t_alloc_no_room_is_enospc(void)
{
	struct pair *p = space(BB, 64);

	host_set(&p->h, HOST_ERRNO, -EDQUOT);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), -ENOSPC);
	host_set(&p->h, HOST_ERRNO, -ENOSPC);
	CHECK_EQ(pair_alloc(p, 1, 1, ids), -ENOSPC);
	CHECK_EQ(p->s.stats.alloc_failures, 2);
	CHECK_EQ(p->s.stats.pressure, 0);
	pair_fini(p);
}

/*
 * Blocks of 2^62 bytes, 3 of them: the range is 3 * 2^62, just below 2^64.
 * With both backed blocks cached, an ALLOC of 3 must ask the host for the
 * one block left in the range (2^62 bytes), then evict.
 */
static void t_evict_want_within_range(void)
{
	struct pair *p = space(1ULL << 62, 3);

	CHECK_EQ(pair_alloc(p, 1, 2, ids), 0);
	cache_block(p, 1, 0, 0, 50);
	cache_block(p, 1, 1, 1, 50);
	CHECK_EQ(pair_alloc(p, 2, 3, ids), 0);
	CHECK_EQ(p->h.calls, 1);
	CHECK_EQ(p->h.last_want, 1ULL << 62);
	pair_fini(p);
}

static void t_evict_api(void)
{
	struct pair *p = full_cached();

	CHECK_EQ(pair_evict(p, 0, KVC_EVICT_ADMIN), 0);
	CHECK_EQ(pair_evict(p, 2, KVC_EVICT_ADMIN), 2);
	EXPECT_EVICTED(p, KVC_EVICT_ADMIN, 6, 4);
	CHECK_EQ(p->s.nr_free, 2);
	CHECK_EQ(pair_evict(p, 1, KVC_EVICT_RECLAIM), 1);
	EXPECT_EVICTED(p, KVC_EVICT_RECLAIM, 1);
	CHECK_EQ(pair_evict(p, 100, KVC_EVICT_ADMIN), 5);
	EXPECT_EVICTED(p, KVC_EVICT_ADMIN, 5, 2, 0, 3, 7);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_ADMIN], 7);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_RECLAIM], 1);
	CHECK_EQ(p->s.stats.pressure, 0);
	CHECK_EQ(kvc_lru_first(&p->s), NONE);
	CHECK_EQ(pair_evict(p, 1, KVC_EVICT_ADMIN), 0);
	CHECK_EQ(p->s.nr_free, 8);
	/* Evicted content is gone: a lookup misses, a publish inserts anew. */
	CHECK_EQ(LOOKUP(p, 1, 0), 0);
	CHECK_EQ(alloc1(p, 1), 7);
	CHECK_EQ(pub1(p, 1, 7, 0, 50), 7);
	pair_fini(p);
}

/* ---- holes ------------------------------------------------------------- */

/*
 * Owner 1 holds 0..3, 4 is cached, 5 published, 6 and 7 free; 8 of 16
 * blocks backed.
 */
static struct pair *reclaim_fixture(void)
{
	struct pair *p = space(BB, 16);

	CHECK_EQ(pair_alloc(p, 1, 8, ids), 0);
	cache_block(p, 1, 4, 4, 50);
	CHECK_EQ(pub1(p, 1, 5, 5, 50), 5);
	CHECK_EQ(pair_free(p, 1, 2, (kvc_u32[]){ 6, 7 }), 0);
	return p;
}

static void t_reclaimable_ranges(void)
{
	struct pair *p = reclaim_fixture();

	/* pair_reclaim asks kvc_range_reclaimable and the model; -1 is "no". */
	CHECK_EQ(kvc_range_reclaimable(&p->s, 6 * BB, 2 * BB), 1);
	CHECK_EQ(kvc_range_reclaimable(&p->s, 6 * BB + 100, 10), 1);
	CHECK_EQ(kvc_range_reclaimable(&p->s, 4 * BB, BB), 1);
	CHECK_EQ(kvc_range_reclaimable(&p->s, 6 * BB, 2 * BB + 1), 0);	/* past the backed */
	CHECK_EQ(kvc_range_reclaimable(&p->s, 4 * BB, BB + 1), 0);	/* touches published 5 */
	CHECK_EQ(kvc_range_reclaimable(&p->s, 4 * BB - 1, 2), 0);	/* touches owned 3 */
	CHECK_EQ(kvc_range_reclaimable(&p->s, 6 * BB, 0), 0);
	CHECK_EQ(kvc_range_reclaimable(&p->s, 8 * BB, 1), 0);
	CHECK_EQ(kvc_range_reclaimable(&p->s, ~0ULL - 5, 10), 0);	/* wraps */
	CHECK_EQ(kvc_range_reclaimable(&p->s, 7 * BB, ~0ULL), 0);
	CHECK_EQ(kvc_range_reclaimable(&p->s, 0, ~0ULL), 0);
	CHECK_EQ(pair_reclaim(p, 5 * BB, BB, KVC_EVICT_RECLAIM), -1);
	CHECK_EQ(pair_reclaim(p, 0, 8 * BB, KVC_EVICT_RECLAIM), -1);
	CHECK_EQ(pair_reclaim(p, 6 * BB + 1, 2 * BB, KVC_EVICT_RECLAIM), -1);
	CHECK_EQ(p->s.nr_holes, 0);
	pair_fini(p);
}

static void t_reclaim_makes_holes(void)
{
	struct pair *p = reclaim_fixture();

	CHECK_EQ(pair_reclaim(p, 4 * BB, BB, KVC_EVICT_RECLAIM), 1);
	EXPECT_EVICTED(p, KVC_EVICT_RECLAIM, 4);
	CHECK_EQ(p->s.blocks[4].state, KVC_BLOCK_HOLE);
	CHECK_EQ(kvc_find(&p->s, H(4)), NONE);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_RECLAIM], 1);
	/* A few bytes of block 6 and of block 7: both become holes. */
	CHECK_EQ(pair_reclaim(p, 7 * BB - 10, 20, KVC_EVICT_RECLAIM), 0);
	CHECK_EQ(p->s.blocks[6].state, KVC_BLOCK_HOLE);
	CHECK_EQ(p->s.blocks[7].state, KVC_BLOCK_HOLE);
	CHECK_EQ(p->s.nr_free, 0);
	CHECK_EQ(p->s.nr_holes, 3);
	/* Holes may be reclaimed again: nothing changes. */
	CHECK_EQ(pair_reclaim(p, 6 * BB, 2 * BB, KVC_EVICT_RECLAIM), 0);
	CHECK_EQ(p->s.nr_holes, 3);
	/* Not reclaimable: owned, published. */
	CHECK_EQ(pair_reclaim(p, 3 * BB, 2 * BB, KVC_EVICT_RECLAIM), -1);
	/* Publish and reclaim with another cause, e.g. an admin drop path. */
	CHECK_EQ(pair_release(p, 1), 4);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);
	CHECK_EQ(pub1(p, 2, ids[0], 40, 50), ids[0]);
	CHECK_EQ(unref1(p, 2, ids[0]), 0);
	CHECK_EQ(pair_reclaim(p, 0, 4 * BB, KVC_EVICT_ADMIN), 1);
	CHECK_EQ(p->s.stats.evictions[KVC_EVICT_ADMIN], 1);
	CHECK_EQ(p->s.nr_holes, 7);
	pair_fini(p);
}

/* Whole blocks only: the partial block at the end of the backed bytes is not reclaimable. */
static void t_reclaim_partial_backing(void)
{
	struct pair *p = space(3000, 100);

	host_set(&p->h, HOST_CHUNK, 4096);
	CHECK_EQ(alloc1(p, 1), 0);
	CHECK_EQ(p->s.backed_bytes, 4096);
	CHECK_EQ(pair_release(p, 1), 1);
	CHECK_EQ(pair_reclaim(p, 0, 3001, KVC_EVICT_RECLAIM), -1);
	CHECK_EQ(pair_reclaim(p, 2999, 1, KVC_EVICT_RECLAIM), 0);
	CHECK_EQ(p->s.nr_holes, 1);
	/* The hole is refilled as a whole block, then used. */
	CHECK_EQ(alloc1(p, 1), 0);
	CHECK_EQ(p->h.refills, 1);
	CHECK_EQ(p->h.trace[0].a, 0);
	CHECK_EQ(p->h.trace[0].b, 3000);
	CHECK_EQ(p->h.calls, 0);
	pair_fini(p);
}

static void t_alloc_refills_holes(void)
{
	struct pair *p = space(BB, 8);

	CHECK_EQ(pair_alloc(p, 1, 8, ids), 0);
	CHECK_EQ(pair_release(p, 1), 8);
	CHECK_EQ(pair_reclaim(p, 2 * BB, 3 * BB, KVC_EVICT_RECLAIM), 0);	/* 2 3 4 */
	CHECK_EQ(p->s.nr_free, 5);
	/* Free blocks first: no refill. */
	CHECK_EQ(pair_alloc(p, 2, 5, ids), 0);
	CHECK_EQ(p->h.refills, 0);
	/* Then one hole per missing block, one call each, and no grow. */
	CHECK_EQ(pair_alloc(p, 2, 2, ids), 0);
	CHECK_EQ(p->h.refills, 2);
	CHECK_EQ(p->h.calls, 0);
	CHECK_EQ(p->h.trace[0].b, BB);
	CHECK_EQ(p->s.nr_holes, 1);
	CHECK(p->s.blocks[ids[0]].state == KVC_BLOCK_OWNED && ids[0] >= 2 && ids[0] <= 4);
	CHECK_EQ(alloc1(p, 2), 2 + 3 + 4 - ids[0] - ids[1]);
	CHECK_EQ(p->s.nr_holes, 0);
	/* Nothing left at all: ENOSPC before any callback. */
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -ENOSPC);
	CHECK_EQ(p->h.nr_trace, 0);
	pair_fini(p);
}

/* Holes first, then the range grows. */
static void t_alloc_refills_then_grows(void)
{
	struct pair *p = space(BB, 8);

	CHECK_EQ(pair_alloc(p, 1, 4, ids), 0);
	CHECK_EQ(pair_release(p, 1), 4);
	CHECK_EQ(pair_reclaim(p, 0, 2 * BB, KVC_EVICT_RECLAIM), 0);
	CHECK_EQ(pair_alloc(p, 2, 6, ids), 0);
	CHECK_EQ(p->h.nr_trace, 3);
	CHECK_EQ(p->h.trace[0].kind, TR_REFILL);
	CHECK_EQ(p->h.trace[1].kind, TR_REFILL);
	CHECK_EQ(p->h.trace[2].kind, TR_GROW);
	CHECK_EQ(p->h.last_want, 2 * BB);
	CHECK_EQ(p->s.backed_blocks, 6);
	pair_fini(p);
}

/* 0 and 1 cached, 2..7 holes; the range is all backed. */
static struct pair *holes_fixture(void)
{
	struct pair *p = space(BB, 8);

	CHECK_EQ(pair_alloc(p, 1, 8, ids), 0);
	cache_block(p, 1, 0, 0, 50);
	cache_block(p, 1, 1, 1, 50);
	CHECK_EQ(pair_release(p, 1), 6);
	CHECK_EQ(pair_reclaim(p, 2 * BB, 6 * BB, KVC_EVICT_RECLAIM), 0);
	CHECK_EQ(p->s.nr_holes, 6);
	return p;
}

static void t_refill_failures(void)
{
	struct pair *p = holes_fixture();

	/* The pool is empty: the range is full, but the cause is the pool. */
	host_refill_set(&p->h, REFILL_ERRNO, -ENOSPC);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);
	CHECK_EQ(p->h.refills, 1);
	CHECK_EQ(p->h.calls, 0);
	EXPECT_EVICTED(p, KVC_EVICT_POOL, 0);
	CHECK_EQ(p->s.nr_holes, 6);
	host_refill_set(&p->h, REFILL_ERRNO, -EDQUOT);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), 0);
	EXPECT_EVICTED(p, KVC_EVICT_TENANT, 1);
	/* Nothing cached any more: ENOSPC, and the tenant is why. */
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -ENOSPC);
	CHECK_EQ(p->s.stats.last_pressure_cause, KVC_EVICT_TENANT);
	host_refill_set(&p->h, REFILL_ERRNO, -ENOMEM);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -ENOMEM);
	host_refill_set(&p->h, REFILL_ERRNO, -EIO);
	CHECK_EQ(pair_alloc(p, 2, 1, ids), -EIO);
	/* Two refills work, the third does not: those two stay, free. */
	host_refill_script(&p->h, 3, (int[]){ 0, 0, -ENOSPC });
	CHECK_EQ(pair_alloc(p, 2, 4, ids), -ENOSPC);
	CHECK_EQ(p->h.refills, 3);
	CHECK_EQ(p->s.nr_free, 2);
	CHECK_EQ(p->s.nr_holes, 4);
	host_refill_set(&p->h, REFILL_POOL, 0);
	CHECK_EQ(pair_alloc(p, 2, 4, ids), 0);
	CHECK_EQ(p->h.refills, 2);
	CHECK_EQ(p->s.stats.alloc_failures, 4);
	pair_fini(p);
}

/* A failing refill with cached blocks around: errno, and nothing evicted. */
static void t_refill_error_evicts_nothing(void)
{
	struct pair *p = holes_fixture();

	host_refill_set(&p->h, REFILL_ERRNO, -EINTR);
	CHECK_EQ(pair_alloc(p, 2, 2, ids), -EINTR);
	EXPECT_NO_EVICTION(p);
	CHECK_EQ(p->s.nr_cached, 2);
	host_refill_script(&p->h, 1, (int[]){ 0 });
	host_refill_set(&p->h, REFILL_ERRNO, -ENOSPC);
	host_refill_script(&p->h, 1, (int[]){ 0 });
	CHECK_EQ(pair_alloc(p, 2, 3, ids), 0);		/* one refilled, two evicted */
	EXPECT_EVICTED(p, KVC_EVICT_POOL, 0, 1);
	pair_fini(p);
}

/*
 * A host without a refill callback: holes cannot be refilled, which counts
 * as no room.  The pair's model knows nothing of other ops, so this test
 * drives kvcore directly, on the fixture's state, and tears it down itself.
 */
static void t_holes_without_refill_op(void)
{
	struct pair *p = holes_fixture();
	struct kvc_space_ops ops = { .grow = host_ops.grow };
	struct kvc_space *s = &p->s;
	char msg[128];
	unsigned int h;

	s->ops = &ops;
	CHECK_EQ(kvc_alloc(s, 2, 3, ids), -ENOSPC);	/* 2 cached < 3 */
	CHECK_EQ(s->stats.last_pressure_cause, KVC_EVICT_POOL);
	CHECK_EQ(kvc_alloc(s, 2, 2, ids), 0);		/* both evicted */
	CHECK_EQ(s->stats.evictions[KVC_EVICT_POOL], 2);
	CHECK_EQ(s->nr_holes, 6);
	CHECK_EQ(p->h.nr_trace, 0);			/* no refill, no evicted callback */
	CHECK_EQ(kvc_space_check(s, msg, sizeof(msg)), 0);
	for (h = 0; h < NR_HOLDERS; h++)
		kvc_release_refs(s, &p->refs[h]);
	kvc_space_fini(s);
	p->live = false;
	pair_fini(p);
}

/* ---- the accounting check ------------------------------------------------- */

/*
 * Owner 1 holds 4..7; 0 and 1 cached at priority 50, 2 cached at 10,
 * 3 published (one reader); 8 free, 9 a hole.
 */
static struct pair *check_fixture(void)
{
	struct pair *p = space(BB, 16);

	CHECK_EQ(pair_alloc(p, 1, 10, ids), 0);
	cache_block(p, 1, 0, 0, 50);
	cache_block(p, 1, 1, 1, 50);
	cache_block(p, 1, 2, 2, 10);
	CHECK_EQ(pub1(p, 1, 3, 3, 50), 3);
	CHECK_EQ(pair_free(p, 1, 2, (kvc_u32[]){ 8, 9 }), 0);
	CHECK_EQ(pair_reclaim(p, 9 * BB, BB, KVC_EVICT_RECLAIM), 0);
	expect_clean(p);
	return p;
}

/* The bucket link that points at id. */
static kvc_u32 *bucket_link(struct kvc_space *s, kvc_u32 id)
{
	kvc_u64 i;

	for (i = 0; i < s->nr_buckets; i++) {
		kvc_u32 *l = &s->buckets[i];

		while (*l != NONE) {
			if (*l == id)
				return l;
			l = &s->blocks[*l].hnext;
		}
	}
	return NULL;
}

/*
 * Flip the first bit of id's hash that moves it out of its chain: the
 * bucket key is random, so no fixed bit is sure to (a fixed bit failed
 * one run in nr_buckets).  Returns the bit, or 64 when none did.
 */
static unsigned int move_out_of_bucket(struct kvc_space *s, kvc_u32 id)
{
	unsigned int bit;

	for (bit = 0; bit < 64; bit++) {
		s->hashes[id][bit / 8] ^= 1 << (bit % 8);
		if (kvc_find(s, s->hashes[id]) != id)
			break;
		s->hashes[id][bit / 8] ^= 1 << (bit % 8);
	}
	return bit;
}

static void t_check_prefix_corruption(void)
{
	struct pair *p = check_fixture();
	struct kvc_space *s = &p->s;
	struct kvc_block saved;
	kvc_u8 hsave[KVC_HASH_BYTES];
	kvc_u64 word;
	kvc_u32 *link, v;
	unsigned int bit;

	/* Wrong states. */
	saved = s->blocks[1];
	s->blocks[1].state = KVC_BLOCK_PUBLISHED;
	expect_corrupt(p, "cached block marked published, no readers");
	s->blocks[1].state = KVC_BLOCK_FREE;
	expect_corrupt(p, "cached block marked free");
	s->blocks[1].state = KVC_BLOCK_HOLE;
	expect_corrupt(p, "cached block marked hole");
	s->blocks[1].readers = 1;
	s->blocks[1].state = KVC_BLOCK_CACHED;
	expect_corrupt(p, "cached block with a reader");
	s->blocks[1] = saved;
	saved = s->blocks[3];
	s->blocks[3].state = KVC_BLOCK_CACHED;
	expect_corrupt(p, "published block marked cached");
	s->blocks[3].state = KVC_BLOCK_OWNED;
	s->blocks[3].owner = 1;
	expect_corrupt(p, "published block marked owned");
	s->blocks[3] = saved;
	saved = s->blocks[9];
	s->blocks[9].state = KVC_BLOCK_FREE;
	expect_corrupt(p, "hole marked free");
	s->blocks[9] = saved;
	saved = s->blocks[8];
	s->blocks[8].state = KVC_BLOCK_HOLE;
	expect_corrupt(p, "free block marked hole");
	s->blocks[8] = saved;
	expect_clean(p);

	/* A cached block missing from its LRU (the list itself stays well formed). */
	CHECK_EQ(s->lru[50].head, 0);
	CHECK_EQ(s->lru[50].tail, 1);
	s->blocks[0].next = NONE;
	s->lru[50].tail = 0;
	expect_corrupt(p, "block 1 missing from the LRU");
	s->blocks[0].next = 1;
	s->lru[50].tail = 1;
	/* On the LRU of another priority. */
	s->blocks[2].priority = 11;
	expect_corrupt(p, "block on the LRU of another priority");
	s->blocks[2].priority = 10;
	/* The non-empty bits. */
	s->lru_nonempty[0] &= ~(1ULL << 10);
	expect_corrupt(p, "non-empty bit of a list clear");
	s->lru_nonempty[0] |= 1ULL << 10 | 1ULL << 30;
	expect_corrupt(p, "non-empty bit of an empty list");
	s->lru_nonempty[0] &= ~(1ULL << 30);
	/* A broken back link. */
	s->blocks[1].prev = NONE;
	expect_corrupt(p, "LRU back link");
	s->blocks[1].prev = 0;
	/* A hole missing from the hole list. */
	s->holes.head = s->holes.tail = NONE;
	expect_corrupt(p, "hole list empty");
	s->holes.head = s->holes.tail = 9;
	expect_clean(p);

	/* The hash index. */
	/*
	 * (A key changed in place within its bucket is a consistent index
	 * for another hash: only the model comparison can tell.)
	 */
	bit = move_out_of_bucket(s, 3);
	CHECK(bit < 64);
	expect_corrupt(p, "published block's hash moved to another bucket");
	if (bit < 64)
		s->hashes[3][bit / 8] ^= 1 << (bit % 8);
	bit = move_out_of_bucket(s, 2);
	CHECK(bit < 64);
	expect_corrupt(p, "cached block's hash moved to another bucket");
	if (bit < 64)
		s->hashes[2][bit / 8] ^= 1 << (bit % 8);
	memcpy(hsave, s->hashes[1], KVC_HASH_BYTES);
	memcpy(s->hashes[1], s->hashes[0], KVC_HASH_BYTES);
	expect_corrupt(p, "two blocks with one hash");
	memcpy(s->hashes[1], hsave, KVC_HASH_BYTES);
	link = bucket_link(s, 3);
	CHECK(link != NULL);
	if (link) {
		*link = s->blocks[3].hnext;
		expect_corrupt(p, "published block unlinked from its bucket");
		s->blocks[3].hnext = *link;
		*link = 3;
	}
	link = bucket_link(s, 2);
	CHECK(link != NULL);
	if (link) {
		v = s->blocks[2].hnext;
		s->blocks[2].hnext = 8;			/* a free block in a chain */
		s->blocks[8].hnext = v;
		expect_corrupt(p, "free block in a hash chain");
		s->blocks[2].hnext = v;
		s->blocks[8].hnext = NONE;
	}
	expect_clean(p);

	/* Readers. */
	s->blocks[3].readers++;
	expect_corrupt(p, "block readers above the sum");
	s->blocks[3].readers--;
	s->nr_readers++;
	expect_corrupt(p, "nr_readers above the sum");
	s->nr_readers--;

	/* Counters. */
	s->nr_published++;
	expect_corrupt(p, "nr_published");
	s->nr_published--;
	s->nr_cached--;
	expect_corrupt(p, "nr_cached");
	s->nr_cached++;
	s->nr_holes++;
	expect_corrupt(p, "nr_holes");
	s->nr_holes--;
	word = s->backed_blocks;
	s->backed_blocks = 9;
	expect_corrupt(p, "backed_blocks cuts off a hole");
	s->backed_blocks = word;

	expect_clean(p);
	pair_compare(p, "restoring the corruptions");
	pair_fini(p);
}

/* Bits 101..127 of lru_nonempty name no list: kvc_lru_first would index past lru[]. */
static void t_check_stray_lru_bit(void)
{
	struct pair *p = check_fixture();

	p->s.lru_nonempty[1] |= 1ULL << (120 - 64);
	expect_corrupt(p, "non-empty bit of priority 120");
	p->s.lru_nonempty[1] = 0;
	expect_clean(p);
	pair_fini(p);
}

/* The comparison itself must notice a wrong LRU order, reference or hash. */
static void t_harness_detects_prefix_divergence(void)
{
	struct pair *p = check_fixture();
	void (*hook)(struct pair *) = harness_on_fail;
	struct kvc_space *s = &p->s;

	harness_on_fail = NULL;
	/* Swap 0 and 1 on the priority-50 LRU: consistent, but the wrong order. */
	s->lru[50].head = 1;
	s->lru[50].tail = 0;
	s->blocks[1].prev = NONE;
	s->blocks[1].next = 0;
	s->blocks[0].prev = 1;
	s->blocks[0].next = NONE;
	expect_clean(p);
	CHECK(!pair_compare(p, "LRU swap"));
	CHECK(p->failed);
	p->failed = false;
	s->lru[50].head = 0;
	s->lru[50].tail = 1;
	s->blocks[0].prev = NONE;
	s->blocks[0].next = 1;
	s->blocks[1].prev = 0;
	s->blocks[1].next = NONE;
	CHECK(pair_compare(p, "LRU restored"));
	/* One more reference in the holder's table than the model has. */
	p->r.held[1][3]++;
	CHECK(!pair_compare(p, "reference"));
	p->r.held[1][3]--;
	p->failed = false;
	/* A priority the model does not have. */
	p->r.blk[3].prio = 51;
	CHECK(!pair_compare(p, "priority"));
	p->r.blk[3].prio = 50;
	p->failed = false;
	harness_on_fail = hook;
	CHECK(pair_compare(p, "all restored"));
	pair_fini(p);
}

/* LOOKUP hash k count times in one call (the attack: one hash, huge repeats). */
static int lookup_same(struct pair *p, kvc_u32 owner, kvc_u32 count, unsigned int k)
{
	kvc_u8 (*hs)[KVC_HASH_BYTES] = calloc(count, KVC_HASH_BYTES);
	kvc_u32 *got = calloc(count, sizeof(*got));
	kvc_u32 i;
	int ret;

	for (i = 0; i < count; i++)
		test_hash(hs[i], k);
	ret = pair_lookup(p, owner, count, (const kvc_u8 (*)[KVC_HASH_BYTES])hs, got);
	free(got);
	free(hs);
	return ret;
}

/*
 * Issue 14 finding 1: two holders looking up one hash 2^32 times in all
 * wrapped the block's 32-bit reader count.  Each holder now stops at
 * KVC_REFS_MAX references with -EOVERFLOW, taking nothing.
 */
static void t_reader_count_overflow_per_holder(void)
{
	struct pair *p = space(BB, 8);
	kvc_u32 id = alloc1(p, 1), batch = 65536, calls;

	CHECK_EQ(pub1(p, 1, id, 0, 50), id);
	for (calls = 0; calls < KVC_REFS_MAX / batch; calls++)
		if (lookup_same(p, 2, batch, 0) != (int)batch)
			break;
	CHECK_EQ(calls, KVC_REFS_MAX / batch);
	CHECK_EQ(p->refs[holder_of(2)].total, KVC_REFS_MAX);
	CHECK_EQ(lookup_same(p, 2, 1, 0), -EOVERFLOW);
	/* Another holder has its own bound; the block counts both. */
	CHECK_EQ(lookup_same(p, 3, batch, 0), (int)batch);
	CHECK_EQ(p->s.blocks[id].readers, 1 + KVC_REFS_MAX + batch);
	/* PUBLISH's dedup takes a reference too, under the same bound. */
	{
		struct kvc_publish_entry e;

		ent(&e, alloc1(p, 2), 0, 50);
		CHECK_EQ(pair_publish(p, 2, 1, &e), -EOVERFLOW);
		CHECK_EQ(p->s.blocks[e.id].state, KVC_BLOCK_OWNED);
	}
	CHECK_EQ(pair_drop_refs(p, 2), KVC_REFS_MAX);
	CHECK_EQ(lookup_same(p, 2, 1, 0), 1);
	CHECK(!p->failed);
	pair_fini(p);
}

/* The per-block bound holds across many holders, with lowered bounds to reach it. */
static void t_reader_count_overflow_per_block(void)
{
	struct pair *p = space(BB, 8);
	kvc_u32 id = alloc1(p, 1), o;
	struct kvc_publish_entry e[3];
	int ret;

	pair_limits(p, 100, 1000);
	CHECK_EQ(pub1(p, 1, id, 0, 50), id);
	for (o = 2; o < 8; o++) {
		do
			ret = lookup_same(p, o, 7, 0);
		while (ret == 7);
		CHECK_EQ(ret, -EOVERFLOW);
		CHECK(p->s.blocks[id].readers <= 100);
	}
	/* 1 + 14 * 7 readers: room for one more reference, then none. */
	CHECK_EQ(p->s.blocks[id].readers, 99);
	CHECK_EQ(lookup_same(p, 9, 1, 0), 1);
	CHECK_EQ(lookup_same(p, 9, 2, 0), -EOVERFLOW);
	/* A batch that dedups onto itself counts whole, even for a new hash. */
	ent(&e[0], alloc1(p, 9), 5, 50);
	ent(&e[1], alloc1(p, 9), 5, 50);
	ent(&e[2], alloc1(p, 9), 0, 50);
	CHECK_EQ(pair_publish(p, 9, 3, e), -EOVERFLOW);
	CHECK_EQ(pair_publish(p, 9, 2, e), 1);
	/* The holder's limit: 1000 references at most. */
	pair_limits(p, KVC_READERS_MAX, 1000);
	CHECK_EQ(lookup_same(p, 10, 1000, 5), 1000);
	CHECK_EQ(lookup_same(p, 10, 1, 5), -EOVERFLOW);
	CHECK_EQ(p->refs[holder_of(10)].total, 1000);
	CHECK(!p->failed);
	pair_fini(p);
}

/* SipHash-2-4 against the reference vectors of its paper (key 00..0f, input 00..len-1). */
static void t_siphash_reference_vectors(void)
{
	const kvc_u64 key[2] = { 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL };
	kvc_u8 msg[15];
	unsigned int i;

	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (kvc_u8)i;
	CHECK_EQ(kvc_siphash(key, msg, 0), 0x726fdb47dd0e0e31ULL);
	CHECK_EQ(kvc_siphash(key, msg, 15), 0xa129ca6149be45e5ULL);
}

/* Longest hash-bucket chain of the space's index. */
static kvc_u64 longest_chain(const struct kvc_space *s)
{
	kvc_u64 b, longest = 0;

	for (b = 0; b < s->nr_buckets; b++) {
		kvc_u64 n = 0;
		kvc_u32 id;

		for (id = s->buckets[b]; id != NONE; id = s->blocks[id].hnext)
			n++;
		if (n > longest)
			longest = n;
	}
	return longest;
}

/*
 * Issue 14 finding 8: the bucket was the hash's first 8 bytes, which the
 * caller chooses; 262,144 hashes sharing them made one LOOKUP walk a
 * chain of all of them.  Under a keyed hash they spread like any others.
 */
static void t_colliding_hashes_spread(void)
{
	enum { N = 4096 };
	struct pair *p = space(BB, N);
	struct kvc_publish_entry *e = calloc(N, sizeof(*e));
	kvc_u32 *got = calloc(N, sizeof(*got)), i;
	kvc_u8 (*hs)[KVC_HASH_BYTES] = calloc(N, KVC_HASH_BYTES);

	CHECK_EQ(pair_alloc(p, 1, N, got), 0);
	for (i = 0; i < N; i++) {
		e[i].id = got[i];
		e[i].priority = 50;
		memset(e[i].hash, 0xa5, 8);		/* the old bucket: all the same */
		memcpy(e[i].hash + 8, &i, sizeof(i));
		memcpy(hs[i], e[i].hash, KVC_HASH_BYTES);
	}
	CHECK_EQ(pair_publish(p, 1, N, e), 0);
	/* 4096 keys in at least 4096 buckets: a chain of 16 is already a 1e-9 event. */
	CHECK(longest_chain(&p->s) <= 16);
	CHECK_EQ(pair_lookup(p, 2, N, (const kvc_u8 (*)[KVC_HASH_BYTES])hs, got), N);
	CHECK(!p->failed);
	pair_fini(p);
	free(hs);
	free(got);
	free(e);
}

#define T(fn) { &#fn[2], fn }
const struct tap_test prefix_tests[] = {
	T(t_publish_new_hashes),
	T(t_publish_dedup_other_owner),
	T(t_publish_dedup_same_batch),
	T(t_publish_dedup_cached),
	T(t_publish_errors_change_nothing),
	T(t_publish_enomem),
	T(t_lookup_longest_prefix),
	T(t_lookup_revives_cached),
	T(t_lookup_enomem_takes_nothing),
	T(t_reader_count_overflow_per_holder),
	T(t_reader_count_overflow_per_block),
	T(t_siphash_reference_vectors),
	T(t_colliding_hashes_spread),
	T(t_release_up_to_held),
	T(t_release_lru_order),
	T(t_release_refs_of_holder),
	T(t_evict_order),
	T(t_evict_only_what_is_missing),
	T(t_evict_after_growing),
	T(t_evict_causes),
	T(t_alloc_no_room_is_enospc),
	T(t_evict_want_within_range),
	T(t_evict_api),
	T(t_reclaimable_ranges),
	T(t_reclaim_makes_holes),
	T(t_reclaim_partial_backing),
	T(t_alloc_refills_holes),
	T(t_alloc_refills_then_grows),
	T(t_refill_failures),
	T(t_refill_error_evicts_nothing),
	T(t_holes_without_refill_op),
	T(t_check_prefix_corruption),
	T(t_check_stray_lru_bit),
	T(t_harness_detects_prefix_divergence),
	T(t_random_prefix),
	T(t_random_prefix_faults),
};
#undef T
const unsigned int nr_prefix_tests = sizeof(prefix_tests) / sizeof(prefix_tests[0]);
