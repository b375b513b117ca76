/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scheduler.h: continuous batching over the request stream.  Each step
 * has a token budget: every decoding sequence gets one token, then running
 * prefills get chunks, then waiting requests are admitted while budget,
 * sequence slots and device blocks last.  Time is virtual: the wall time
 * of the steps, with idle gaps skipped to the next arrival, so a run
 * never sleeps.
 */
#ifndef KVRT_DEMO_SCHEDULER_H
#define KVRT_DEMO_SCHEDULER_H

#include <stdint.h>

#include "cache.h"
#include "model.h"
#include "workload.h"

struct req_result {
	uint32_t conv, turn;
	uint32_t prompt_len, n_gen;
	uint32_t *gen;			/* generated token ids */
	uint64_t *logit_hash;		/* FNV-1a of each sampling row's logits */
	double arrival, first, done;	/* virtual seconds */
	uint32_t lookup_blocks, hit_blocks;
	uint32_t resumed_tokens;	/* K/V fetched back from an offload */
	uint32_t computed_tokens;	/* prompt tokens this pass computed */
};

struct pass_result {
	const char *label;
	uint32_t n_requests;
	struct req_result *req;
	uint64_t prompt_tokens, prefill_tokens, decode_tokens;
	uint64_t reused_tokens, resumed_tokens;
	/*
	 * prefill_time and decode_time split each step's time by its token
	 * counts (a cost share, not a speed a user sees); decode_only_* sum
	 * the steps that had no prefill tokens, whose rate is the decode
	 * speed of the engine.
	 */
	double prefill_time, decode_time, busy_time, wall_time, virtual_time;
	double decode_only_time;
	uint64_t decode_only_tokens, decode_only_steps;
	uint64_t steps;
	int have_pool;
	struct pool_stats pool;
};

struct engine_opts {
	uint32_t max_batch_tokens;
	uint32_t max_seqs;
	int progress;			/* draw the progress line */
	const char *label;
};

/*
 * Serve the workload.  pc NULL: the reference pass (no lookup, publish or
 * offload; every prompt is computed from position 0).  err gets a
 * sentence on failure.
 */
int engine_run(struct model *m, struct devcache *dev, struct pcache *pc,
	       const struct workload *wl, const struct engine_opts *o, struct pass_result *res,
	       char *err, size_t errlen);

void pass_result_free(struct pass_result *r);

#endif
