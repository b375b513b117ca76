/* SPDX-License-Identifier: GPL-2.0 */
/*
 * warm.h: `kvrt-demo warm`: compute the K/V of common prefixes (system
 * prompts read from a file) and publish them into a persistent space, so
 * that the first request of any engine process that joins it hits.  The
 * blocks are hashed exactly as a serving run hashes its prompts (cache.c's
 * chain from the model identity), so a warmed block is what its lookup
 * finds.  See kvrt-demo(1), WARMING A SPACE.
 */
#ifndef KVRT_DEMO_WARM_H
#define KVRT_DEMO_WARM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <kvrt.h>

#include "../common/opts.h"
#include "cache.h"
#include "checkpoint.h"
#include "model.h"
#include "workload.h"

/* The default priority: above the engines' KVRT_PRIO_DEFAULT (50), so that
 * under pressure ordinary traffic's cached blocks go before the warmed ones. */
#define WARM_PRIO_DEFAULT 75

/* The subcommand's own options. */
struct warm_opts {
	const char *prompts;		/* --prompts FILE */
	unsigned int priority;		/* --priority P */
	bool print_workload;		/* --print-workload-prompt */
};

/*
 * The rows main.c's parser adds for `kvrt-demo warm` (rows[] holds
 * WARM_ROWS), and the serving options it keeps: warm_keep() copies the
 * rows of `all` that warming uses (the model, the engine's block size,
 * batch and threads, the pool, the output) into kept[], so that any other
 * option is "unknown" to `kvrt-demo warm`.  Returns the rows kept.
 */
#define WARM_ROWS 4
void warm_rows(struct warm_opts *w, struct topt rows[WARM_ROWS]);
size_t warm_keep(const struct topt *all, struct topt *kept);
void warm_usage(FILE *f);

/* What main.c's options say about the model, the engine and the pool. */
struct warm_setup {
	const char *checkpoint;		/* NULL: random weights from cfg and seed */
	const struct model_config *cfg;
	uint64_t model_seed;
	const struct workload_opts *wl;	/* --print-workload-prompt */
	uint32_t block_tokens, batch_tokens, threads;
	enum kvrt_dtype kv_dtype;
	enum kvrt_backend backend;
	const char *space;
	uint64_t pool_bytes;
	bool json, quiet;
};

/* The subcommand: an exit status of kvrt-demo (0, 2 usage or input, 3 runtime). */
int warm_main(const struct warm_opts *w, const struct warm_setup *s);

/* ---- the parts, for tests/test_warm.c ------------------------------------------ */

struct warm_prompt {
	uint32_t *tok;
	uint32_t n;
	uint32_t line;			/* in the file, from 1 */
};

struct warm_file {
	struct warm_prompt *p;
	uint32_t n;
};

/*
 * Read a prompt file: one prompt a line, token ids in decimal separated by
 * blanks or commas; '#' starts a comment; blank lines are skipped.  Every
 * id must be below vocab and every prompt at most seq_len tokens.  0, or
 * -EINVAL (bad content, or no prompt at all) / -errno (open, read) with a
 * sentence "PATH:LINE: ..." in err; nothing is kept on failure.
 */
int warm_read(struct warm_file *f, const char *path, uint32_t vocab, uint32_t seq_len,
	      char *err, size_t errlen);
void warm_file_free(struct warm_file *f);

/* Device blocks warm_space needs: the longest prompt's full blocks (at least 1). */
uint32_t warm_blocks_needed(const struct warm_file *f, uint32_t block_tokens);

struct warm_stats {
	uint32_t prompts;
	uint32_t short_prompts;		/* shorter than one block: nothing to cache */
	uint64_t blocks;		/* full blocks of all prompts */
	uint64_t present;		/* found by lookup, not computed */
	uint64_t computed;		/* blocks whose K/V this run computed */
	uint64_t published;		/* inserted under a new hash */
	uint64_t dedups;		/* computed, but another published it meanwhile */
	uint64_t published_bytes;	/* K/V bytes of the inserted blocks */
	double seconds;
};

/*
 * Warm pc's space with every prompt of f: for each, look its full blocks
 * up, fetch the blocks present, compute the rest (chunks of batch_tokens,
 * the model's max) and publish them at pc->priority.  The references are
 * held until all prompts are done, so that the run does not evict its own
 * blocks, then released: the blocks stay CACHED.  dev needs
 * warm_blocks_needed() blocks.  0, or a negative errno with err set
 * (-ENOSPC: the space is full; the blocks published so far stay).
 */
int warm_space(struct model *m, struct devcache *dev, struct pcache *pc,
	       const struct warm_file *f, uint32_t batch_tokens, struct warm_stats *st,
	       char *err, size_t errlen);

#endif
