/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Test harness for kvcore: a scriptable host (the grow callback), an
 * independent reference model of one space, and a "pair" that runs every
 * operation on both and compares the complete observable state afterwards.
 *
 * The model keeps a plain array of owners (0 = free) and re-derives the
 * contract of kvcore.h on its own: which errno, what the grow callback is
 * asked for, what backing and which blocks exist after a failure.  It never
 * reads kvcore's state to decide what should happen, with one exception:
 * the ids an ALLOC returns, which the contract leaves to kvcore and the
 * model only validates (distinct, backed, free before the call).
 */
#ifndef KVC_HARNESS_H
#define KVC_HARNESS_H

#include <stdbool.h>
#include "kvcore.h"

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

#define HOST_SCRIPT_MAX 16
#define HOST_UNLIMITED (~0ULL)

struct host {
	int mode;
	long long arg;
	kvc_u64 pool_left;	/* bytes the host can still hand out */
	/* Scripted answers, used first, one per call; then mode. */
	long long script[HOST_SCRIPT_MAX];
	unsigned int script_len, script_pos;
	/* Trace of the calls since the last host_trace_reset(). */
	unsigned long long calls;
	unsigned long long digest;	/* of every (want, got) pair */
	kvc_u64 last_want;
	bool check_in_grow;		/* run kvc_space_check inside the callback */
	bool bad_in_grow;		/* ... and it failed */
};

void host_set(struct host *h, int mode, long long arg);
void host_script(struct host *h, unsigned int n, const long long *vals);
long long host_answer(struct host *h, kvc_u64 want);	/* pure: no tracing */
void host_trace_reset(struct host *h);
extern const struct kvc_space_ops host_ops;

/* The reference model of one space. */
struct ref {
	kvc_u64 block_bytes, nr_blocks;
	kvc_u64 backed_bytes;
	kvc_u64 registered;	/* blocks the space knows (valid ids) */
	kvc_u64 cap;		/* entries in owner[] */
	kvc_u32 *owner;		/* [registered]: 0 = free */
	kvc_u64 nr_free, nr_owned;
	kvc_u64 allocs, frees, alloc_failures;
};

/* kvcore and the model side by side. */
struct pair {
	struct kvc_space s;
	struct ref r;
	struct host h;
	bool live;		/* kvc_space_init succeeded */
	bool failed;		/* a mismatch was found (message in why) */
	char why[512];
};

/* Called on the first mismatch of a pair; default: keep the message. */
extern void (*harness_on_fail)(struct pair *p);

/*
 * Each operation runs kvcore, then the model, compares the return values,
 * the grow calls and the whole state, and returns kvcore's result.
 * On a mismatch p->failed is set and p->why says what differed.
 */
int pair_init(struct pair *p, kvc_u64 block_bytes, kvc_u64 nr_blocks);
int pair_alloc(struct pair *p, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids);
int pair_free(struct pair *p, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids);
kvc_u64 pair_release(struct pair *p, kvc_u32 owner);
void pair_fini(struct pair *p);
/* Full comparison of kvcore's state with the model; false on mismatch. */
bool pair_compare(struct pair *p, const char *after);

/* Model helpers for tests that pick ids. */
kvc_u64 ref_owner_blocks(const struct ref *r, kvc_u32 owner);
/* Up to max ids owned by owner, lowest first; returns how many. */
kvc_u32 ref_owned_ids(const struct ref *r, kvc_u32 owner, kvc_u32 *ids, kvc_u32 max);

#endif /* KVC_HARNESS_H */
