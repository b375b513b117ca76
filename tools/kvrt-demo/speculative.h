/* SPDX-License-Identifier: GPL-2.0 */
/*
 * speculative.h: --speculative K, greedy speculative decoding on libkvrt's
 * sequence tables (struct kvrt_seqs).  A draft model proposes K tokens, the
 * target verifies them in one K+1-row chunk, and the rejected tokens are
 * cut from both models' sequences with kvrt_seq_truncate.  The same
 * conversations are also decoded by the target alone, one token per pass;
 * the two outputs must be the same tokens.  See kvrt-demo(1).
 */
#ifndef KVRT_DEMO_SPECULATIVE_H
#define KVRT_DEMO_SPECULATIVE_H

#include <stdint.h>

#include <kvrt.h>

#include "checkpoint.h"
#include "model.h"
#include "workload.h"

#define SPEC_MAX_K 64

struct spec_opts {
	uint32_t k;			/* draft tokens per round; 0: the mode is off */
	uint32_t draft_layers;		/* 0: half the target's (at least 1) */
	const char *draft_checkpoint;	/* else the target's first draft_layers */
	const char *gen_draft;		/* write the draft there and exit */
	uint32_t block_tokens, batch_tokens, threads;
	enum kvrt_dtype kv_dtype;
	enum decode_kernel decode_kernel;
	int json, quiet;
	int inject_fault;		/* test: report one accepted token wrong */
};

/*
 * Run the mode (or write the draft) for the target ck and the workload's
 * conversations; target_name: the checkpoint file or NULL (random).
 * Returns the exit status: 0, 1 (the outputs differ), 2 (a usage error,
 * said on stderr), 3 (a libkvrt call or the system failed).
 */
int spec_main(const struct checkpoint *ck, const char *target_name, uint64_t target_seed,
	      const struct workload *wl, const struct spec_opts *o);

#endif
