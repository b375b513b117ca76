/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Test harness for kvcore: a scriptable host (the grow, refill and evicted
 * callbacks), an independent reference model of one space, and a "pair"
 * that runs every operation on both and compares the complete observable
 * state afterwards.
 *
 * The model keeps a plain per-block array (state, owner, readers, priority,
 * hash, and the time a block became CACHED), a dense reader count per
 * holder and block, and a naive hash table (a flat array searched linearly).
 * It re-derives the contract of kvcore.h on its own: which errno, which
 * callbacks are made with which arguments, which cached block goes first
 * (lowest priority, then the oldest release time), what stays behind on
 * failure.  It never reads kvcore's state to decide what should happen,
 * except where the contract leaves a choice to kvcore, and there it only
 * validates that choice:
 *   - the ids an ALLOC returns (distinct, FREE after the refills, grows and
 *     evictions the model predicts);
 *   - which HOLE a refill call backs (any hole not yet refilled; the range
 *     must be exactly that block);
 *   - the order in which kvc_release_refs() makes blocks CACHED (the set
 *     must be exactly the blocks left without readers, each newer than
 *     every block cached before);
 *   - the order in which a reclaim evicts the cached blocks of its range
 *     (the set and causes must be exact).
 */
#ifndef KVC_HARNESS_H
#define KVC_HARNESS_H

#include <stdbool.h>
#include "kvcore.h"
#include "../tap.h"

extern long kvc_fail_alloc_countdown;

/* How the test host answers kvcore's grow callback. */
enum host_mode {
	HOST_EXACT,	/* want bytes */
	HOST_CHUNK,	/* want rounded up to a multiple of arg (more than asked) */
	HOST_PARTIAL,	/* min(want, arg): partial blocks, blocks straddle grows */
	HOST_ZERO,	/* 0: nothing could be added */
	HOST_ERRNO,	/* arg as a (negative) return value */
	HOST_MODES,
};

/* How it answers the refill callback. */
enum refill_mode {
	REFILL_POOL,	/* 0 while pool_left covers len (and takes it), else -ENOSPC */
	REFILL_ERRNO,	/* refill_arg */
	REFILL_MODES,
};

#define HOST_SCRIPT_MAX 16
#define HOST_UNLIMITED (~0ULL)

/* One callback kvcore made, in order. */
enum { TR_GROW, TR_REFILL, TR_EVICTED };
struct trace_ent {
	int kind;
	kvc_u64 a;		/* GROW: want; REFILL: start; EVICTED: id */
	kvc_u64 b;		/* REFILL: len; EVICTED: cause */
	long long ret;		/* GROW, REFILL: what the host answered */
	kvc_u8 hash[KVC_HASH_BYTES];	/* EVICTED */
	bool in_index;		/* EVICTED: kvc_find still found the hash */
};

struct host {
	int mode;
	long long arg;
	kvc_u64 pool_left;	/* bytes the host can still hand out */
	/* Scripted grow answers, used first, one per call; then mode. */
	long long script[HOST_SCRIPT_MAX];
	unsigned int script_len, script_pos;
	int refill_mode;
	int refill_arg;
	int refill_script[HOST_SCRIPT_MAX];
	unsigned int refill_script_len, refill_script_pos;
	/* Trace of the calls since the last host_trace_reset(). */
	struct trace_ent *trace;
	unsigned int nr_trace, trace_cap;
	unsigned long long calls;	/* grow calls */
	unsigned long long refills;	/* refill calls */
	unsigned long long evictions;	/* evicted callbacks */
	kvc_u64 last_want;
	bool check_in_grow;		/* run kvc_space_check inside grow and refill */
	bool bad_in_grow;		/* ... and it failed */
};

void host_set(struct host *h, int mode, long long arg);
void host_script(struct host *h, unsigned int n, const long long *vals);
void host_refill_set(struct host *h, int mode, int arg);
void host_refill_script(struct host *h, unsigned int n, const int *vals);
long long host_answer(struct host *h, kvc_u64 want);	/* pure: no tracing */
int host_refill_answer(struct host *h, kvc_u64 len);	/* pure: no tracing */
void host_trace_reset(struct host *h);
void host_free(struct host *h);
extern const struct kvc_space_ops host_ops;

/* Reader reference holders: one per owner id below, the last for the rest. */
#define NR_HOLDERS 12
unsigned int holder_of(kvc_u32 owner);

struct ref_block {
	kvc_u8 state;		/* KVC_BLOCK_* */
	kvc_u8 prio;
	kvc_u32 owner;
	kvc_u32 readers;
	kvc_u64 stamp;		/* CACHED: when it became CACHED */
	kvc_u8 hash[KVC_HASH_BYTES];
};

/* The naive hash index: hash -> id (KVC_NONE: absent, kept to check kvc_find). */
struct ref_hash {
	kvc_u8 hash[KVC_HASH_BYTES];
	kvc_u32 id;
};

/* The reference model of one space. */
struct ref {
	kvc_u64 block_bytes, nr_blocks;
	kvc_u64 backed_bytes;
	kvc_u64 registered;	/* blocks the space knows (valid ids) */
	kvc_u64 cap;		/* entries in blk[] and held[][] */
	struct ref_block *blk;
	kvc_u32 *held[NR_HOLDERS];	/* [cap]: reader refs of each holder */
	kvc_u64 held_total[NR_HOLDERS];
	struct ref_hash *index;
	kvc_u64 nr_index, index_cap;
	kvc_u64 clock;		/* LRU time */
	kvc_u64 n[KVC_BLOCK_STATES];
	kvc_u64 readers;
	kvc_u32 max_readers;	/* per block; KVC_READERS_MAX unless a test lowers it */
	kvc_u64 refs_limit;	/* per holder; KVC_REFS_MAX unless a test lowers it */
	struct kvc_space_stats st;
};

/* kvcore and the model side by side. */
struct pair {
	struct kvc_space s;
	struct kvc_refs refs[NR_HOLDERS];
	struct ref r;
	struct host h;
	bool live;		/* kvc_space_init succeeded */
	bool failed;		/* a mismatch was found (message in why) */
	char why[512];
};

/* Fail the running test unless kvc_space_check() finds p's state corrupt, and says how. */
static inline void expect_corrupt(struct pair *p, const char *what)
{
	char msg[256] = "";

	if (kvc_space_check(&p->s, msg, sizeof(msg)) != -EUCLEAN) {
		tap_diag("kvc_space_check missed: %s", what);
		tap_ok = false;
	} else if (!msg[0]) {
		tap_diag("kvc_space_check gave no message for: %s", what);
		tap_ok = false;
	}
}

/* Called on the first mismatch of a pair; default: keep the message. */
extern void (*harness_on_fail)(struct pair *p);

/*
 * Each operation runs kvcore, then the model, compares the return values,
 * the callbacks and the whole state, and returns kvcore's result.
 * On a mismatch p->failed is set and p->why says what differed.
 * Reader references are kept per holder: holder_of(owner).
 */
int pair_init(struct pair *p, kvc_u64 block_bytes, kvc_u64 nr_blocks);
int pair_alloc(struct pair *p, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids);
int pair_free(struct pair *p, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids);
kvc_u64 pair_release(struct pair *p, kvc_u32 owner);
int pair_publish(struct pair *p, kvc_u32 owner, kvc_u32 count, struct kvc_publish_entry *e);
int pair_lookup(struct pair *p, kvc_u32 owner, kvc_u32 count,
		const kvc_u8 (*hashes)[KVC_HASH_BYTES], kvc_u32 *ids);
int pair_unref(struct pair *p, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids);
kvc_u64 pair_drop_refs(struct pair *p, kvc_u32 owner);
kvc_u64 pair_evict(struct pair *p, kvc_u64 count, unsigned int cause);
/* kvc_range_reclaimable(), then kvc_reclaim_range() when it said yes: -1 or evicted. */
long long pair_reclaim(struct pair *p, kvc_u64 start, kvc_u64 len, unsigned int cause);
void pair_fini(struct pair *p);
/*
 * Set the reference bounds on both sides: max_readers (raised to the most
 * readers a block has now), and every holder's limit.
 */
void pair_limits(struct pair *p, kvc_u32 max_readers, kvc_u64 refs_limit);
/* Full comparison of kvcore's state with the model; false on mismatch. */
bool pair_compare(struct pair *p, const char *after);

/* Model helpers for tests that pick ids. */
kvc_u64 ref_owner_blocks(const struct ref *r, kvc_u32 owner);
/* Up to max ids owned by owner, lowest first; returns how many. */
kvc_u32 ref_owned_ids(const struct ref *r, kvc_u32 owner, kvc_u32 *ids, kvc_u32 max);
/* Up to max ids holder_of(owner) holds references on, each as often as held. */
kvc_u32 ref_held_ids(const struct ref *r, kvc_u32 owner, kvc_u32 *ids, kvc_u32 max);
/* The model's block for hash, or KVC_NONE. */
kvc_u32 ref_find(const struct ref *r, const kvc_u8 *hash);
/* The model's eviction order: up to max ids; returns how many. */
kvc_u32 ref_lru(const struct ref *r, kvc_u32 *ids, kvc_u32 max);

/* A byte copy of a space (struct and arrays), to prove a call changed nothing. */
struct snap {
	struct kvc_space s;
	void *blocks, *stack, *hashes, *buckets;
};
void snap_take(struct snap *sn, const struct kvc_space *s);
bool snap_same(const struct snap *sn, const struct kvc_space *s);
void snap_free(struct snap *sn);

/* Test hashes: k picks one of a small alphabet of distinct, colliding-ish keys. */
void test_hash(kvc_u8 *hash, unsigned int k);

/* The randomized tests (test_random.c), listed by test_kvcore.c and test_prefix.c. */
void t_random_differential(void);
void t_random_fault_storm(void);
void t_random_prefix(void);
void t_random_prefix_faults(void);

#endif /* KVC_HARNESS_H */
