/* SPDX-License-Identifier: GPL-2.0 */
/*
 * branch.h: continuations that share their prompt's KV blocks.  --n N
 * samples N continuations of each prompt (temperature, a seeded generator
 * per continuation); --beam N keeps the N best continuations by summed
 * log-probability.  The block tables are libkvrt's sequence tables
 * (struct kvrt_seqs): fork after the prompt, copy-on-write of the partial
 * last block, free of dropped beams.  Every final continuation is then
 * recomputed in a sequence of its own, without sharing, and must give the
 * same tokens and (strict) the same logits bits.
 */
#ifndef KVRT_DEMO_BRANCH_H
#define KVRT_DEMO_BRANCH_H

#include <stdbool.h>
#include <stdint.h>

#include <kvrt.h>

#include "cache.h"
#include "checkpoint.h"
#include "devgpu.h"
#include "model.h"
#include "workload.h"

#define BRANCH_MAX_WIDTH 128
#define BRANCH_PROMPTS 2	/* the first conversations' first turns */

/* The options, as main.c's table fills them. */
struct branch_opts {
	unsigned int n;			/* --n: samples per prompt; 0 off */
	unsigned int beam;		/* --beam: width; 0 off */
	double temperature;		/* --temperature; < 0 not given */
	unsigned long sample_seed;	/* --sample-seed; > UINT32_MAX not given */
};

void branch_defaults(struct branch_opts *b);
/* After parsing: NULL, or a usage error to print.  Fills in defaults. */
const char *branch_check(struct branch_opts *b);
static inline bool branch_enabled(const struct branch_opts *b)
{
	return b->n || b->beam;
}

/* What the mode runs on, from main.c's setup. */
struct branch_env {
	struct model *m;
	const struct checkpoint *ck;
	struct devcache *dev;		/* the device cache: the table's blocks */
	struct kvrt *k;			/* host copies (kvrt_copy_blocks) */
	struct devgpu *gpu;		/* set: the cache is on the GPU */
	const struct workload *wl;
	uint32_t gen_tokens, max_seqs;
	int strict;			/* logits must be the same bits */
	int json, quiet, inject_fault, gpu_check;
	const char *version, *kv_dtype, *decode_kernel, *model_name;
	uint32_t threads;
};

/* Runs the mode and prints its report; returns the exit status (0 pass,
 * 1 mismatch, 2 usage, 3 runtime). */
int branch_run(const struct branch_opts *bo, const struct branch_env *env);

#endif
