// SPDX-License-Identifier: GPL-2.0
/*
 * kvrt-demo: a small Llama-architecture engine on libkvrt.  It serves a
 * simulated request stream twice: with the prefix cache and offload (the
 * pool: kvpool.ko or the embedded backend), and as a reference that
 * recomputes every prompt from scratch; then it prints the figures and
 * checks that both generated the same tokens.  See kvrt-demo(1).
 *
 * The files, one concern each:
 *   main.c          options, then the run as a list of steps (main())
 *   checkpoint.c    the llama2.c weights: load, save, generate from a seed
 *   model.c         the decoder's forward pass
 *   workload.c      the simulated request stream, from a seed
 *   scheduler.c     the engine loop: admission, batching, sampling, finishing
 *   cache.c         the device KV cache in host memory and the pool side
 *   devgpu.c        the device KV cache on a GPU, each call checked on the CPU
 *   report.c        the progress line, the closing table and the JSON
 *   speculative.c   --speculative: a draft model's tokens checked by the model
 *   branch.c        --n, --beam: continuations sharing their prompt's blocks
 *   warm.c          `kvrt-demo warm`: publish a prompt file's blocks
 *   ../common/opts.c  the tools' command-line parser
 *   ../common/cpus.c  the default thread count
 *   ../common/carve.c many arrays from one allocation (model, speculative)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvrt.h>

#include "branch.h"
#include "cache.h"
#include "../common/cpus.h"
#include "../common/opts.h"
#include "checkpoint.h"
#include "devgpu.h"
#include "model.h"
#include "report.h"
#include "scheduler.h"
#include "speculative.h"
#include "warm.h"
#include "workload.h"

#define DEMO_VERSION "0.1"

enum exit_code {
	EXIT_OK = 0,
	EXIT_MISMATCH = 1,	/* equivalence failed */
	EXIT_USAGE = 2,
	EXIT_RUNTIME = 3,	/* a libkvrt call or the system failed */
	EXIT_EXPECT = 4,	/* --expect-hits / --expect-shared-hits not met */
};

enum role { ROLE_NONE, ROLE_FIRST, ROLE_SECOND };

struct equivalence {
	int checked, ok;
	int strict;		/* the logits must be the same bits too */
	uint32_t requests;
	uint64_t tokens, same_logits;
	char why[256];
};

struct opts {
	struct model_config cfg;
	uint64_t model_seed;
	const char *checkpoint, *gen_checkpoint;
	struct workload_opts wl;
	uint32_t block_tokens, batch_tokens, max_seqs, device_blocks, threads;
	enum kvrt_dtype kv_dtype;
	enum kvrt_backend backend;
	const char *space;
	enum role role;
	bool keep_space;
	bool foreign;			/* --space-owner given */
	uint32_t space_owner;
	uint64_t pool_bytes;
	const char *tier_dir;		/* --tier ssd:DIR */
	const char *tier_redis;		/* --tier redis:HOST:PORT,... */
	const char *tier_prefix;	/* --tier-prefix */
	uint64_t tier_bytes;
	bool expect_tier_hits;
	bool tier_write_back;		/* --tier-write-back */
	enum decode_kernel decode_kernel;
	bool reference, progress, expect_hits, expect_shared, json, quiet, inject_fault;
	enum device_choice { DEVICE_AUTO, DEVICE_CPU, DEVICE_GPU } device;
	bool gpu_check;			/* each GPU attention call against the CPU's */
	bool inject_gpu_fault;
	int reference_on_gpu;		/* --reference-device gpu (a choice: cpu 0, gpu 1) */
	struct spec_opts spec;		/* --speculative K and its draft */
	bool inject_spec_fault;
	int separate_classifier;	/* --classifier separate */
	struct branch_opts br;		/* --n, --beam: instead of serving the workload */
};

/* Presets: tiny runs in a TCG VM in seconds; default is what `make demo` shows. */
static const struct demo_preset {
	const char *name;
	struct model_config cfg;
	uint32_t requests, system_tokens, user_tokens, gen_tokens, batch_tokens, max_seqs;
	double rate, think_s;
	uint64_t pool_mib;
} presets[] = {
	{ "tiny", { .dim = 64, .hidden_dim = 172, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
		    .vocab_size = 512, .seq_len = 512, .shared_classifier = 1 },
	  8, 96, 16, 8, 64, 8, 200, 0.002, 8 },
	{ "default", { .dim = 512, .hidden_dim = 1376, .n_layers = 6, .n_heads = 8,
		       .n_kv_heads = 2, .vocab_size = 4096, .seq_len = 2048,
		       .shared_classifier = 1 },
	  24, 512, 64, 24, 256, 16, 1, 0.5, 256 },
};

static void preset(struct opts *o, const char *name)
{
	const struct demo_preset *p = &presets[strcmp(name, "tiny") ? 1 : 0];

	o->cfg = p->cfg;
	o->wl.requests = p->requests;
	o->wl.system_tokens = p->system_tokens;
	o->wl.user_tokens = p->user_tokens;
	o->wl.gen_tokens = p->gen_tokens;
	o->wl.max_turns = 3;
	o->wl.rate = p->rate;
	o->wl.think_s = p->think_s;
	o->batch_tokens = p->batch_tokens;
	o->max_seqs = p->max_seqs;
	o->pool_bytes = p->pool_mib << 20;
	o->wl.vocab = (uint32_t)o->cfg.vocab_size;
}

static void defaults(struct opts *o)
{
	memset(o, 0, sizeof(*o));
	preset(o, "default");
	o->model_seed = 1;
	o->wl.seed = 1;
	o->wl.multi_turn = 0.5;
	o->block_tokens = 16;
	o->kv_dtype = KVRT_DTYPE_F16;
	o->backend = KVRT_BACKEND_AUTO;
	o->reference = 1;
	o->progress = 1;
	o->gpu_check = 1;
	branch_defaults(&o->br);
}

static void usage(FILE *f)
{
	fputs("usage: kvrt-demo [options]\n"
	      "       kvrt-demo --gen-checkpoint FILE [model options]\n"
	      "       kvrt-demo warm --space NAME --prompts FILE [options] (warm --help)\n"
	      "\n"
	      "Serve simulated requests with a Llama-architecture model on libkvrt, with the\n"
	      "prefix cache and offload, then recompute them without; print the figures and\n"
	      "check that the generated tokens are identical.  See kvrt-demo(1).\n"
	      "\n"
	      "model:\n"
	      "  --checkpoint FILE      llama2.c-format weights (default: random, from --seed)\n"
	      "  --gen-checkpoint FILE  write a random checkpoint and exit\n"
	      "  --seed N               seed of the random weights (1)\n"
	      "  --dim N --hidden-dim N --layers N --heads N --kv-heads N --vocab N --seq-len N\n"
	      "                         shape of the random model (512 1376 6 8 2 4096 2048)\n"
	      "  --classifier shared|separate  logits from the token embedding or a matrix of\n"
	      "                         their own (shared; a random shared one repeats its input)\n"
	      "workload:\n"
	      "  --preset tiny|default  sizes for a VM test or for the demo (default)\n"
	      "  --requests N           requests (turns of all conversations) (24)\n"
	      "  --system-tokens N      shared system prompt (512)\n"
	      "  --user-tokens N        mean user message (64)\n"
	      "  --gen-tokens N         tokens generated per request (24)\n"
	      "  --max-turns N          turns of a multi-turn conversation, at most (3)\n"
	      "  --multi-turn F         fraction of multi-turn conversations (0.5)\n"
	      "  --rate F               conversations per second, virtual time (1)\n"
	      "  --think-ms F           mean gap between turns, virtual time (500)\n"
	      "  --workload-seed N      seed of the requests (1)\n"
	      "engine:\n"
	      "  --block-tokens N       tokens per KV block (16)\n"
	      "  --batch-tokens N       token budget per step (256)\n"
	      "  --max-seqs N           sequences per step (16)\n"
	      "  --device-blocks N      blocks of the device KV cache (enough for max-seqs)\n"
	      "  --kv-dtype f32|f16|bf16  KV cache element type (f16)\n"
	      "  --decode-kernel prefill|decode  attention of decoding rows (prefill)\n"
	      "  --threads N            threads (the CPUs this process may use)\n"
	      "  --device cpu|gpu|auto  where the KV cache lives and attention runs (auto: the\n"
	      "                         GPU when libkvrt finds one and the model fits it)\n"
	      "  --no-gpu-check         gpu: do not hold each attention call to the CPU's\n"
	      "  --reference-device cpu|gpu  gpu: where the reference pass recomputes (cpu)\n"
	      "pool:\n"
	      "  --backend auto|embedded|kmod  libkvrt backend (auto: as kvrt_open decides)\n"
	      "  --space NAME           the space (default kvrt-demo-PID)\n"
	      "  --role first|second    two processes: first creates a persistent space and\n"
	      "                         publishes; second joins it, hits, and destroys it\n"
	      "  --keep-space           second: do not destroy the space at exit\n"
	      "  --space-owner UID      second: join the space although UID, not you, owns it\n"
	      "  --pool-mb N            space quota in MiB (256)\n"
	      "  --tier ssd:DIR         an SSD tier below the pool, in DIR: published blocks\n"
	      "                         are written through, prefixes the pool lacks are read\n"
	      "                         back (a restarted demo finds its prefixes there; the\n"
	      "                         space is then named kvrt-demo unless --space names it)\n"
	      "  --tier-mb N            the SSD tier's capacity in MiB (1024)\n"
	      "  --tier redis:HOST:PORT,...  a Redis Cluster tier below the pool (and the SSD\n"
	      "                         tier, when both are given): another host, or another\n"
	      "                         process with its own pool, finds the blocks there; the\n"
	      "                         ACL user and password come from $KVRT_REDIS_USER and\n"
	      "                         $KVRT_REDIS_PASSWORD\n"
	      "  --tier-prefix P        the Redis keys' prefix, the tenant's (kvt:)\n"
	      "  --tier-write-back      queue the tiers' writes for their own threads (the pool\n"
	      "                         holds the blocks meanwhile) instead of writing through\n"
	      "branching (instead of serving the workload; kvrt-demo(1)):\n"
	      "  --n N                  N sampled continuations of each prompt, sharing its blocks\n"
	      "  --beam N               beam search of width N over --gen-tokens tokens\n"
	      "  --temperature T        --n: sampling temperature, 0 greedy (1)\n"
	      "  --sample-seed N        --n: seed of the samplers (1)\n"
	      "checks and output:\n"
	      "  --no-reference         skip the reference pass (no equivalence check)\n"
	      "  --expect-hits          exit 4 unless some prefix block was hit\n"
	      "  --expect-shared-hits   exit 4 unless some hit block came from another process\n"
	      "  --expect-tier-hits     exit 4 unless some hit block came from a tier\n"
	      "  --no-progress          no progress line on stderr\n"
	      "  --quiet                no progress line, no description of the run\n"
	      "  --json                 print one JSON object instead of the text report\n"
	      "  --inject-fault         test the check: corrupt the first fetched block\n"
	      "                         (--n, --beam: the prompt's first block after the fork)\n"
	      "  --inject-gpu-fault     test the GPU check: move one output of the first GPU\n"
	      "                         attention call (by 1% plus 0.01)\n"
	      "speculative decoding (instead of serving; see SPECULATIVE DECODING in the man page):\n"
	      "  --speculative K        a draft proposes K tokens (1-64), the model verifies them\n"
	      "                         in one pass; checked against the model decoding alone\n"
	      "  --draft-layers N       the draft: the model's first N layers (half of them)\n"
	      "  --draft-checkpoint FILE  the draft: a checkpoint with the model's vocabulary\n"
	      "  --gen-draft-checkpoint FILE  write the draft (--draft-layers) and exit\n"
	      "  --inject-spec-fault    test the check: report one accepted token wrong\n"
	      "  --help, --version\n", f);
}

/* A command-line mistake, and where the options are told. */
static int usage_error(const char *what)
{
	fprintf(stderr, "kvrt-demo: %s\n(more: kvrt-demo --help)\n", what);
	return EXIT_USAGE;
}

/* --think-ms: milliseconds in, seconds kept. */
static int parse_think_ms(const char *v, void *dst)
{
	double ms;

	if (topt_parse_double(v, 0, 1e9, &ms))
		return -1;
	*(double *)dst = ms / 1000;
	return 0;
}

/* --pool-mb: MiB in, bytes kept. */
static int parse_pool_mb(const char *v, void *dst)
{
	unsigned long mb;

	if (topt_parse_ulong(v, 1, 1UL << 20, &mb))
		return -1;
	*(uint64_t *)dst = (uint64_t)mb << 20;
	return 0;
}

/* --tier: ssd:DIR or redis:SEEDS, each at most once. */
static int parse_tier(const char *v, void *dst)
{
	struct opts *o = dst;

	if (!strncmp(v, "ssd:", 4) && v[4] && !o->tier_dir)
		o->tier_dir = v + 4;
	else if (!strncmp(v, "redis:", 6) && v[6] && !o->tier_redis)
		o->tier_redis = v + 6;
	else
		return -1;
	return 0;
}

/* --space-owner: the uid, and that the space is someone else's. */
static int parse_owner(const char *v, void *dst)
{
	struct opts *o = dst;
	unsigned long uid;

	if (topt_parse_ulong(v, 0, UINT32_MAX - 1, &uid))
		return -1;
	o->foreign = true;
	o->space_owner = (uint32_t)uid;
	return 0;
}

_Static_assert(sizeof(unsigned long) == sizeof(uint64_t), "seeds are parsed as unsigned long");
_Static_assert(sizeof(int) == sizeof(int32_t) && sizeof(unsigned int) == sizeof(uint32_t),
	       "sizes are parsed as int and unsigned int");

static const int dtype_values[] = { KVRT_DTYPE_F32, KVRT_DTYPE_F16, KVRT_DTYPE_BF16 };
static const int deck_values[] = { DECODE_WITH_PREFILL, DECODE_WITH_DECODE };
static const int device_values[] = { DEVICE_CPU, DEVICE_GPU, DEVICE_AUTO };
static const int backend_values[] = { KVRT_BACKEND_AUTO, KVRT_BACKEND_EMBEDDED, KVRT_BACKEND_KMOD };
static const int role_values[] = { ROLE_FIRST, ROLE_SECOND };

#define U32(opt, lo, hi, field) \
	{ .name = opt, .arg = "N", .kind = TOPT_UINT, .dst = &o->field, .min = lo, .max = hi }
#define I32(opt, lo, hi, field) \
	{ .name = opt, .arg = "N", .kind = TOPT_INT, .dst = &o->field, .min = lo, .max = hi }
#define CHOICE(opt, list, stored, field)                                             \
	{ .name = opt, .arg = list, .kind = TOPT_CHOICE, .dst = &o->field, .choices = list, \
	  .values = stored }
#define FLAG(opt, field) { .name = opt, .kind = TOPT_FLAG, .dst = &o->field }

/* Returns -1 to go on, else the exit status.  warm: `kvrt-demo warm`'s rows
 * first, and of the table only the rows warm_keep() keeps. */
static int parse(int argc, char **argv, struct opts *o, const struct topt *warm)
{
	int preset_index = 1;
	bool version = false, no_ref = false, no_progress = false, no_gpu_check = false;
	const struct topt table[] = {
		{ .name = "--checkpoint", .arg = "FILE", .kind = TOPT_STR, .dst = &o->checkpoint },
		{ .name = "--gen-checkpoint", .arg = "FILE", .kind = TOPT_STR,
		  .dst = &o->gen_checkpoint },
		{ .name = "--seed", .arg = "N", .kind = TOPT_ULONG, .dst = &o->model_seed,
		  .max = UINT32_MAX, .want = "a 32-bit number" },
		I32("--dim", 2, CKPT_MAX_DIM, cfg.dim),
		I32("--hidden-dim", 1, CKPT_MAX_HIDDEN, cfg.hidden_dim),
		I32("--layers", 1, CKPT_MAX_LAYERS, cfg.n_layers),
		I32("--heads", 1, 1024, cfg.n_heads),
		I32("--kv-heads", 1, 1024, cfg.n_kv_heads),
		I32("--vocab", 2, CKPT_MAX_VOCAB, cfg.vocab_size),
		I32("--seq-len", 2, 65536, cfg.seq_len),
		{ .name = "--classifier", .arg = "shared|separate", .kind = TOPT_CHOICE,
		  .dst = &o->separate_classifier, .choices = "shared|separate" },
		{ .name = "--preset", .arg = "tiny|default", .kind = TOPT_CHOICE,
		  .dst = &preset_index, .choices = "tiny|default" },
		U32("--requests", 1, 100000, wl.requests),
		U32("--system-tokens", 0, 65536, wl.system_tokens),
		U32("--user-tokens", 1, 65536, wl.user_tokens),
		U32("--gen-tokens", 1, 65536, wl.gen_tokens),
		U32("--max-turns", 1, 64, wl.max_turns),
		{ .name = "--multi-turn", .arg = "F", .kind = TOPT_DOUBLE, .dst = &o->wl.multi_turn,
		  .min = 0, .max = 1, .want = "a fraction from 0 to 1" },
		{ .name = "--rate", .arg = "R", .kind = TOPT_DOUBLE, .dst = &o->wl.rate,
		  .min = 1e-6, .max = 1e9, .want = "a positive rate (conversations per second)" },
		{ .name = "--think-ms", .arg = "MS", .kind = TOPT_FUNC, .dst = &o->wl.think_s,
		  .parse = parse_think_ms, .want = "milliseconds >= 0" },
		{ .name = "--workload-seed", .arg = "N", .kind = TOPT_ULONG, .dst = &o->wl.seed,
		  .max = UINT32_MAX, .want = "a 32-bit number" },
		U32("--block-tokens", 1, 4096, block_tokens),
		U32("--batch-tokens", 1, 65536, batch_tokens),
		U32("--max-seqs", 1, 4096, max_seqs),
		U32("--device-blocks", 1, 16777216, device_blocks),
		U32("--threads", 1, 1024, threads),
		{ .name = "--pool-mb", .arg = "N", .kind = TOPT_FUNC, .dst = &o->pool_bytes,
		  .parse = parse_pool_mb, .want = "MiB from 1 to 1048576" },
		CHOICE("--kv-dtype", "f32|f16|bf16", dtype_values, kv_dtype),
		CHOICE("--decode-kernel", "prefill|decode", deck_values, decode_kernel),
		CHOICE("--device", "cpu|gpu|auto", device_values, device),
		CHOICE("--backend", "auto|embedded|kmod", backend_values, backend),
		CHOICE("--role", "first|second", role_values, role),
		{ .name = "--reference-device", .arg = "cpu|gpu", .kind = TOPT_CHOICE,
		  .dst = &o->reference_on_gpu, .choices = "cpu|gpu" },
		{ .name = "--space", .arg = "NAME", .kind = TOPT_STR, .dst = &o->space },
		{ .name = "--tier", .arg = "ssd:DIR|redis:SEEDS", .kind = TOPT_FUNC, .dst = o,
		  .parse = parse_tier,
		  .want = "ssd:DIR or redis:HOST:PORT,... (each kind once)" },
		{ .name = "--tier-prefix", .arg = "P", .kind = TOPT_STR, .dst = &o->tier_prefix },
		{ .name = "--tier-mb", .arg = "N", .kind = TOPT_FUNC, .dst = &o->tier_bytes,
		  .parse = parse_pool_mb, .want = "MiB from 1 to 1048576" },
		FLAG("--expect-tier-hits", expect_tier_hits),
		FLAG("--tier-write-back", tier_write_back),
		{ .name = "--space-owner", .arg = "UID", .kind = TOPT_FUNC, .dst = o,
		  .parse = parse_owner, .want = "a uid" },
		FLAG("--keep-space", keep_space),
		{ .name = "--no-reference", .kind = TOPT_FLAG, .dst = &no_ref },
		{ .name = "--no-progress", .kind = TOPT_FLAG, .dst = &no_progress },
		{ .name = "--no-gpu-check", .kind = TOPT_FLAG, .dst = &no_gpu_check },
		FLAG("--expect-hits", expect_hits),
		FLAG("--expect-shared-hits", expect_shared),
		FLAG("--json", json),
		FLAG("--quiet", quiet),
		FLAG("--inject-fault", inject_fault),
		FLAG("--inject-gpu-fault", inject_gpu_fault),
		U32("--speculative", 1, SPEC_MAX_K, spec.k),
		U32("--draft-layers", 1, CKPT_MAX_LAYERS, spec.draft_layers),
		{ .name = "--draft-checkpoint", .arg = "FILE", .kind = TOPT_STR,
		  .dst = &o->spec.draft_checkpoint },
		{ .name = "--gen-draft-checkpoint", .arg = "FILE", .kind = TOPT_STR,
		  .dst = &o->spec.gen_draft },
		FLAG("--inject-spec-fault", inject_spec_fault),
		{ .name = "--n", .arg = "N", .kind = TOPT_UINT, .dst = &o->br.n, .min = 1,
		  .max = BRANCH_MAX_WIDTH, .want = "a number of samples from 1 to 128" },
		{ .name = "--beam", .arg = "N", .kind = TOPT_UINT, .dst = &o->br.beam, .min = 1,
		  .max = BRANCH_MAX_WIDTH, .want = "a beam width from 1 to 128" },
		{ .name = "--temperature", .arg = "T", .kind = TOPT_DOUBLE, .dst = &o->br.temperature,
		  .min = 0, .max = 100, .want = "a temperature from 0 (greedy) to 100" },
		{ .name = "--sample-seed", .arg = "N", .kind = TOPT_ULONG, .dst = &o->br.sample_seed,
		  .max = UINT32_MAX, .want = "a 32-bit number" },
		{ .name = "--version", .kind = TOPT_FLAG, .dst = &version },
		{ .name = NULL },
	};
	struct topt kept[sizeof(table) / sizeof(table[0])];
	const struct topt *tables[] = { warm, warm ? kept : table }, *preset_opt = table;
	struct topt_args a;
	const char *err;
	int i;

	if (warm)
		warm_keep(table, kept);
	defaults(o);
	/* a preset first, wherever it is, so that other options override it */
	while (strcmp(preset_opt->name, "--preset"))
		preset_opt++;
	topt_init(&a, argc, argv, 1);
	for (i = 1; i < argc; i++) {
		const char *v = !strncmp(argv[i], "--preset=", 9) ? argv[i] + 9 :
				!strcmp(argv[i], "--preset") && i + 1 < argc ? argv[i + 1] : NULL;

		if (v && topt_set(&a, preset_opt, v)) {
			return usage_error(a.err);
		}
		if (v)
			preset(o, preset_index ? "default" : "tiny");
	}
	switch (topt_parse(&a, tables, 2, NULL, NULL)) {
	case TOPT_END:
		break;
	case TOPT_HELP:
		(warm ? warm_usage : usage)(stdout);
		return EXIT_OK;
	default:
		return usage_error(a.err);
	}
	if (version) {
		printf("kvrt-demo %s (libkvrt %s)\n", DEMO_VERSION, kvrt_version());
		return EXIT_OK;
	}
	if ((err = branch_check(&o->br)))
		return usage_error(err);
	o->reference = !no_ref;
	o->progress = !no_progress && !o->quiet;
	o->gpu_check = !no_gpu_check;
	/* Only a join may accept another owner: creating makes the space ours. */
	if (o->foreign && o->role != ROLE_SECOND)
		return usage_error("--space-owner needs --role second (only a join takes another's space)");
	if (o->tier_write_back && !o->tier_dir && !o->tier_redis)
		return usage_error("--tier-write-back is a policy of the tiers: add --tier ssd:DIR "
				   "or --tier redis:HOST:PORT,...");
	if ((o->spec.k || o->spec.gen_draft) && (o->br.n || o->br.beam))
		return usage_error("--speculative and --n/--beam are separate modes: give one of them");
	if (!o->spec.k && !o->spec.gen_draft &&
	    (o->spec.draft_layers || o->spec.draft_checkpoint || o->inject_spec_fault))
		return usage_error("--draft-layers, --draft-checkpoint and --inject-spec-fault "
				   "belong to --speculative K: add it");
	if ((o->spec.k || o->spec.gen_draft) &&
	    (o->device == DEVICE_GPU || o->role != ROLE_NONE || o->expect_hits ||
	     o->expect_shared || no_ref || o->inject_fault || o->inject_gpu_fault))
		return usage_error("--speculative and --gen-draft-checkpoint run on the CPU without "
				   "the pool and always check: drop --device gpu, --role, --expect-*, "
				   "--no-reference and --inject-fault/--inject-gpu-fault");
	o->cfg.shared_classifier = !o->separate_classifier;
	o->wl.vocab = (uint32_t)o->cfg.vocab_size;
	return -1;
}

#undef U32
#undef I32
#undef CHOICE
#undef FLAG

static const char *dtype_name(enum kvrt_dtype d)
{
	return d == KVRT_DTYPE_F32 ? "f32" : d == KVRT_DTYPE_F16 ? "f16" : "bf16";
}

/* FNV-1a over every generated token id, request by request: one number
 * that two runs (or two processes) can compare. */
static uint64_t token_digest(const struct pass_result *r)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	uint32_t i, j;

	for (i = 0; i < r->n_requests; i++)
		for (j = 0; j < r->req[i].n_gen; j++)
			h = (h ^ r->req[i].gen[j]) * 0x100000001b3ULL;
	return h;
}

/*
 * Compare the passes' generated tokens, and their logits' hashes.  strict
 * (every row through kvrt_attn_prefill): the logits must be the same bits
 * as well, since nothing in the computation may differ; a cache bug that
 * moves a logit without changing the argmax fails too.
 */
static void equivalence(const struct pass_result *c, const struct pass_result *r, int strict,
			struct equivalence *eq)
{
	uint32_t i, j;

	memset(eq, 0, sizeof(*eq));
	eq->checked = 1;
	eq->ok = 1;
	eq->strict = strict;
	eq->requests = c->n_requests;
	for (i = 0; i < c->n_requests && eq->ok; i++) {
		const struct req_result *a = &c->req[i], *b = &r->req[i];

		if (a->n_gen != b->n_gen) {
			snprintf(eq->why, sizeof(eq->why), "request %u (conversation %u, turn %u) "
				 "generated %u tokens with the cache and %u recomputed", i, a->conv,
				 a->turn + 1, a->n_gen, b->n_gen);
			eq->ok = 0;
			break;
		}
		for (j = 0; j < a->n_gen; j++) {
			if (a->gen[j] != b->gen[j]) {
				snprintf(eq->why, sizeof(eq->why), "request %u (conversation %u, turn "
					 "%u): token %u is %u with the cache, %u recomputed", i, a->conv,
					 a->turn + 1, j, a->gen[j], b->gen[j]);
				eq->ok = 0;
				break;
			}
			if (a->logit_hash[j] == b->logit_hash[j]) {
				eq->same_logits++;
			} else if (strict) {
				snprintf(eq->why, sizeof(eq->why), "request %u (conversation %u, turn "
					 "%u): the logits of token %u differ from the recomputation "
					 "(the token, %u, does not)", i, a->conv, a->turn + 1, j,
					 a->gen[j]);
				eq->ok = 0;
				break;
			}
			eq->tokens++;
		}
	}
}

static void print_equivalence(const struct equivalence *eq)
{
	if (!eq->checked) {
		printf("equivalence: skipped (--no-reference)\n");
		return;
	}
	printf("compared: the token ids each request generated with the prefix cache and offload, "
	       "against a pass that recomputes every prompt from position 0 (no lookup, no "
	       "publish, no offload)\n");
	if (!eq->ok) {
		printf("equivalence: FAIL: %s\n", eq->why);
		return;
	}
	printf("equivalence: PASS (%u requests, %" PRIu64 " tokens identical)\n", eq->requests,
	       eq->tokens);
	if (eq->same_logits == eq->tokens)
		printf("  the logits were bitwise identical at all %" PRIu64 " sampled positions%s\n",
		       eq->tokens, eq->strict ? " (required: every row went through "
		       "kvrt_attn_prefill)" : "");
	else
		printf("  the logits differed in rounding at %" PRIu64 " of %" PRIu64
		       " sampled positions (the argmax did not change)\n",
		       eq->tokens - eq->same_logits, eq->tokens);
}

/* Why this model or cache cannot run on libkvrt's GPU path, or NULL. */
static const char *gpu_unfit(const struct opts *o, uint32_t head_dim)
{
	if (head_dim != 64 && head_dim != 128 && head_dim != 256)
		return "the GPU kernels take head dim 64, 128 or 256 (this model's is dim / "
		       "heads); pick --dim and --heads to match";
	if (o->kv_dtype != KVRT_DTYPE_F16 && o->kv_dtype != KVRT_DTYPE_BF16)
		return "the GPU KV cache is f16 or bf16: pass --kv-dtype f16 or bf16";
	if (o->decode_kernel != DECODE_WITH_PREFILL)
		return "on the GPU every row goes through the planned prefill kernel: drop "
		       "--decode-kernel decode";
	if (o->block_tokens > 128)
		return "the GPU kernels take blocks of up to 128 tokens (--block-tokens)";
	return NULL;
}

static void print_gpu(const struct devgpu *g, int check, int both_passes)
{
	char b1[32], b2[32];

	printf("gpu: %" PRIu64 " steps planned, %" PRIu64 " attention calls (%s); activations up "
	       "%s, attention output down %s\n", g->st.steps, g->st.calls,
	       both_passes ? "both passes" : "the cached pass; the reference ran on the CPU",
	       fmt_bytes(b1, sizeof(b1), g->st.up_bytes), fmt_bytes(b2, sizeof(b2), g->st.down_bytes));
	if (!check)
		printf("gpu check: skipped (--no-gpu-check)\n");
	else
		printf("gpu check: %s: %" PRIu64 " rows of %" PRIu64 " calls against the CPU attention "
		       "over the same K/V; largest error %.3g of the tolerance (call %" PRIu64 ")\n",
		       g->st.worst <= 1 ? "PASS" : "FAIL", g->st.rows_checked, g->st.calls,
		       g->st.worst, g->st.worst_call);
}

/*
 * A run's state, from the options to the figures, shared by the steps of
 * main() below; the have_* flags say what teardown() must undo.
 */
struct demo {
	struct opts o;
	struct checkpoint ck;
	struct model m;
	struct workload wl;
	struct devcache dev, gdev, *run_dev;	/* run_dev: dev, or gdev on the GPU */
	struct devgpu g;
	struct pcache pc;
	struct pool_opts po;
	struct pass_result cached, ref;
	struct kvrt *k;
	struct kvrt_mem_info mi;
	struct equivalence eq;
	char space_name[KVRT_NAME_MAX];
	char device_why[300];		/* auto: why not the GPU */
	uint32_t hd;			/* head dim */
	uint64_t fp;			/* the weights' fingerprint */
	uint32_t joined_cached, n_multi, owner;
	int created, destroyed, use_gpu;
	int have_ck, have_wl, have_model, have_dev, have_k, have_g, have_gdev, have_pc, have_mi;
};

/* A step's return: go on to the next step; anything else is the exit status. */
#define STEP_NEXT (-1)

/* --- the model ------------------------------------------------------------ */

/* Load or generate the weights; --gen-checkpoint writes them and stops. */
static int load_model(struct demo *d)
{
	struct opts *o = &d->o;
	struct checkpoint *ck = &d->ck;
	char err[512];
	int ret;

	if (o->checkpoint)
		ret = ckpt_load(ck, o->checkpoint, err, sizeof(err));
	else
		ret = ckpt_generate(ck, &o->cfg, o->model_seed, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "kvrt-demo: %s\n", err);
		return !o->checkpoint && ret == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
	}
	d->have_ck = 1;
	if (o->gen_checkpoint) {
		ret = ckpt_save(ck, o->gen_checkpoint, err, sizeof(err));
		if (ret) {
			fprintf(stderr, "kvrt-demo: %s\n", err);
			return EXIT_RUNTIME;
		}
		printf("wrote %s: llama2.c checkpoint, dim %d, hidden %d, %d layers, %d heads "
		       "(%d KV), vocab %d, seq_len %d, seed %" PRIu64 ", %zu bytes\n",
		       o->gen_checkpoint, ck->cfg.dim, ck->cfg.hidden_dim, ck->cfg.n_layers,
		       ck->cfg.n_heads, ck->cfg.n_kv_heads, ck->cfg.vocab_size, ck->cfg.seq_len,
		       o->model_seed, CKPT_HEADER_BYTES + ck->n_floats * sizeof(float));
		return EXIT_OK;
	}
	o->cfg = ck->cfg;
	o->wl.vocab = (uint32_t)ck->cfg.vocab_size;
	d->hd = (uint32_t)(ck->cfg.dim / ck->cfg.n_heads);
	d->fp = ckpt_fingerprint(ck);
	return STEP_NEXT;
}

/* The request stream, and the sizes that follow from it when not given. */
static int make_workload(struct demo *d)
{
	struct opts *o = &d->o;
	uint32_t max_blocks;
	int ret;

	ret = workload_make(&d->wl, &o->wl);
	if (ret) {
		fprintf(stderr, "kvrt-demo: workload: %s\n", strerror(-ret));
		return EXIT_RUNTIME;
	}
	d->have_wl = 1;
	if (d->wl.max_conv_tokens > (uint32_t)d->ck.cfg.seq_len) {
		fprintf(stderr, "kvrt-demo: the longest conversation has %u tokens, more than the "
			"model's seq_len %d: lower --system-tokens, --user-tokens, --gen-tokens or "
			"--max-turns\n", d->wl.max_conv_tokens, d->ck.cfg.seq_len);
		return EXIT_USAGE;
	}
	max_blocks = (d->wl.max_request_tokens + o->block_tokens - 1) / o->block_tokens;
	if (!o->device_blocks)
		o->device_blocks = o->max_seqs * max_blocks;
	if (!o->threads)
		o->threads = cpus();
	return STEP_NEXT;
}

/* --speculative, --gen-draft-checkpoint: spec_main serves the workload its own way. */
static int run_speculative(struct demo *d)
{
	struct opts *o = &d->o;

	if (!o->spec.k && !o->spec.gen_draft)
		return STEP_NEXT;
	o->spec.block_tokens = o->block_tokens;
	o->spec.batch_tokens = o->batch_tokens;
	o->spec.threads = o->threads;
	o->spec.kv_dtype = o->kv_dtype;
	o->spec.decode_kernel = o->decode_kernel;
	o->spec.json = o->json;
	o->spec.quiet = o->quiet;
	o->spec.inject_fault = o->inject_spec_fault;
	return spec_main(&d->ck, o->checkpoint, o->model_seed, &d->wl, &o->spec);
}

/* The forward pass and the device KV cache in host memory. */
static int init_model(struct demo *d)
{
	struct opts *o = &d->o;
	int ret;

	ret = model_init(&d->m, &d->ck, o->batch_tokens, o->threads, o->decode_kernel);
	if (ret) {
		fprintf(stderr, "kvrt-demo: model: %s\n", strerror(-ret));
		return EXIT_RUNTIME;
	}
	d->have_model = 1;
	ret = devcache_init(&d->dev, (uint32_t)d->ck.cfg.n_layers, (uint32_t)d->ck.cfg.n_kv_heads,
			    d->hd, o->block_tokens, o->device_blocks, o->kv_dtype, NULL);
	if (ret) {
		fprintf(stderr, "kvrt-demo: device KV cache of %u blocks: %s\n", o->device_blocks,
			strerror(-ret));
		return EXIT_RUNTIME;
	}
	d->have_dev = 1;
	d->run_dev = &d->dev;
	return STEP_NEXT;
}

/* --- the pool ------------------------------------------------------------- */

static int open_kvrt(struct demo *d)
{
	struct kvrt_open_opts oo = { 0 };
	int ret;

	oo.backend = d->o.backend;
	ret = kvrt_open(&d->k, &oo);
	if (ret) {
		fprintf(stderr, "kvrt-demo: kvrt_open: %s%s\n", strerror(-ret),
			ret == -ENODEV ? " (is kvpool.ko loaded? --backend embedded runs without)" :
			"");
		return EXIT_RUNTIME;
	}
	d->have_k = 1;
	return STEP_NEXT;
}

/* --- the device ----------------------------------------------------------- */

/* --device: the GPU when asked, or (auto) when it is there and fits. */
static int choose_device(struct demo *d)
{
	const struct opts *o = &d->o;
	const char *unfit;

	if (o->device == DEVICE_CPU)
		return STEP_NEXT;
	unfit = gpu_unfit(o, d->hd);
	if (unfit && o->device == DEVICE_GPU) {
		fprintf(stderr, "kvrt-demo: --device gpu: %s\n", unfit);
		return EXIT_USAGE;
	}
	if (unfit) {
		snprintf(d->device_why, sizeof(d->device_why), "%s", unfit);
	} else if (kvrt_gpu_probe(d->device_why, sizeof(d->device_why))) {
		if (o->device == DEVICE_GPU) {
			fprintf(stderr, "kvrt-demo: --device gpu: no usable GPU: %s\n",
				d->device_why);
			return EXIT_RUNTIME;
		}
	} else {
		d->use_gpu = 1;
	}
	return STEP_NEXT;
}

/* On the GPU: its attention and a device KV cache in its memory. */
static int open_gpu(struct demo *d)
{
	const struct opts *o = &d->o;
	const struct model_config *cfg = &d->ck.cfg;
	struct kvrt_attn_params ap = {
		.num_q_heads = (uint32_t)cfg->n_heads,
		.sm_scale = 1.0f / sqrtf((float)d->hd),	/* as model.c's attention */
		.window_left = -1,
		.q_dtype = KVRT_DTYPE_F32,
		.o_dtype = KVRT_DTYPE_F32,
		.num_threads = o->threads,
	};
	char err[512];
	int ret;

	if (!d->use_gpu)
		return STEP_NEXT;
	ret = devgpu_open(&d->g, d->k, 0, &ap, (uint32_t)cfg->n_layers, (uint32_t)cfg->n_kv_heads,
			  d->hd, o->batch_tokens, o->max_seqs, o->device_blocks, o->gpu_check,
			  err, sizeof(err));
	if (ret) {
		fprintf(stderr, "kvrt-demo: %s\n", err);
		return EXIT_RUNTIME;
	}
	d->have_g = 1;
	d->g.inject_fault = o->inject_gpu_fault;
	ret = devcache_init(&d->gdev, (uint32_t)cfg->n_layers, (uint32_t)cfg->n_kv_heads, d->hd,
			    o->block_tokens, o->device_blocks, o->kv_dtype, &d->g);
	if (ret) {
		fprintf(stderr, "kvrt-demo: device KV cache of %u blocks on the GPU: %s\n",
			o->device_blocks, strerror(-ret));
		return EXIT_RUNTIME;
	}
	d->have_gdev = 1;
	d->run_dev = &d->gdev;
	return STEP_NEXT;
}

/* --n, --beam: branch.c serves its prompts instead of the workload. */
static int run_branches(struct demo *d)
{
	const struct opts *o = &d->o;
	struct branch_env be = {
		.m = &d->m, .ck = &d->ck, .dev = d->run_dev, .k = d->k,
		.gpu = d->use_gpu ? &d->g : NULL, .wl = &d->wl, .gen_tokens = o->wl.gen_tokens,
		.max_seqs = o->max_seqs,
		.strict = !d->use_gpu && o->decode_kernel == DECODE_WITH_PREFILL,
		.json = o->json, .quiet = o->quiet, .inject_fault = o->inject_fault,
		.gpu_check = o->gpu_check, .version = DEMO_VERSION,
		.kv_dtype = dtype_name(o->kv_dtype), .threads = o->threads,
		.decode_kernel = o->decode_kernel == DECODE_WITH_DECODE ? "decode" : "prefill",
		.model_name = o->checkpoint ? o->checkpoint : "random weights",
	};

	if (!branch_enabled(&o->br))
		return STEP_NEXT;
	return branch_run(&o->br, &be);
}

/* Create or join the space (--role, --space-owner) with its tiers. */
static int open_space(struct demo *d)
{
	const struct opts *o = &d->o;
	struct pool_opts *po = &d->po;
	struct kvrt_space_stats ss;
	struct kvrt_space_info si;
	char err[512], model_id[160];
	int ret;

	if (o->space)
		snprintf(d->space_name, sizeof(d->space_name), "%s", o->space);
	else if (o->tier_dir || o->tier_redis)
		snprintf(d->space_name, sizeof(d->space_name), "kvrt-demo");	/* the tier's identity */
	else
		snprintf(d->space_name, sizeof(d->space_name), "kvrt-demo-%d", (int)getpid());
	po->space_name = d->space_name;
	po->mode = 0600;
	po->quota_bytes = o->pool_bytes;
	po->tier_dir = o->tier_dir;
	po->tier_redis = o->tier_redis;
	po->tier_prefix = o->tier_prefix;
	po->tier_bytes = o->tier_bytes ? o->tier_bytes : 1ULL << 30;
	po->tier_write_back = o->tier_write_back;
	po->space_flags = o->role == ROLE_SECOND ? 0 :
			  o->role == ROLE_FIRST ? KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST :
			  KVRT_SPACE_CREATE;
	if (o->foreign) {
		po->space_flags = KVRT_SPACE_FOREIGN;
		po->space_owner = o->space_owner;
	}
	pcache_model_id(model_id, sizeof(model_id), d->fp, o->kv_dtype, o->block_tokens);
	ret = pcache_open(&d->pc, d->k, d->run_dev, po, model_id, strlen(model_id), err,
			  sizeof(err));
	if (ret) {
		fprintf(stderr, "kvrt-demo: %s\n", err);
		if (ret == -ENOENT && kvrt_backend(d->k) == KVRT_BACKEND_EMBEDDED)
			fprintf(stderr, "kvrt-demo: (%s: embedded spaces live inside one process; "
				"two processes share only through kvpool.ko, --backend kmod)\n",
				kvrt_backend_info(d->k));
		return EXIT_RUNTIME;
	}
	d->have_pc = 1;
	d->pc.inject_fault = o->inject_fault;
	if (!kvrt_space_stats(d->pc.space, &ss))
		d->joined_cached = (uint32_t)(ss.published_blocks + ss.cached_blocks);
	if (!kvrt_space_info(d->pc.space, &si)) {
		d->created = si.created;
		d->owner = si.uid;
	}
	return STEP_NEXT;
}

/* --- what runs ------------------------------------------------------------ */

static int print_setup(struct demo *d)
{
	const struct opts *o = &d->o;
	const struct model_config *cfg = &d->ck.cfg;
	char b1[32], b2[32];
	uint32_t c;

	for (c = 0; c < d->wl.n_convs; c++)
		d->n_multi += d->wl.convs[c].n_turns > 1;
	if (o->json || o->quiet)
		return STEP_NEXT;
	printf("kvrt-demo %s: a Llama decoder serving simulated requests on libkvrt %s\n",
	       DEMO_VERSION, kvrt_version());
	printf("model     %s: dim %d, hidden %d, %d layers, %d heads / %d KV heads (head "
	       "dim %u), vocab %d, seq_len %d, %.1fM parameters\n",
	       o->checkpoint ? o->checkpoint : "random weights", cfg->dim,
	       cfg->hidden_dim, cfg->n_layers, cfg->n_heads, cfg->n_kv_heads, d->hd,
	       cfg->vocab_size, cfg->seq_len, (double)ckpt_param_count(cfg) / 1e6);
	if (!o->checkpoint)
		printf("          (seed %" PRIu64 "; fingerprint %016" PRIx64 ")\n",
		       o->model_seed, d->fp);
	printf("backend   %s\n", kvrt_backend_info(d->k));
	if (d->use_gpu)
		printf("device    gpu %s (compute %d.%d, %u SMs): the device KV cache is GPU "
		       "memory, layer-major %s, %u blocks of %u tokens (%s); append and "
		       "attention on the GPU (one plan per step, one run per layer; the "
		       "dense math stays on the CPU); pool copies by kvrt_gpu_copy_blocks to "
		       "the registered space; %s\n", d->g.info.name, d->g.info.cc_major,
		       d->g.info.cc_minor, d->g.info.sm_count, dtype_name(o->kv_dtype),
		       o->device_blocks, o->block_tokens,
		       fmt_bytes(b1, sizeof(b1), d->gdev.bytes), o->gpu_check ?
		       "each attention call held to the CPU's (--no-gpu-check skips)" :
		       "no check of the calls (--no-gpu-check)");
	else
		printf("device    cpu: the device KV cache is a host array, layer-major %s, "
		       "%u blocks of %u tokens (%s)%s%s%s\n", dtype_name(o->kv_dtype),
		       o->device_blocks, o->block_tokens, fmt_bytes(b1, sizeof(b1), d->dev.bytes),
		       *d->device_why ? " (auto: not the GPU: " : "", d->device_why,
		       *d->device_why ? ")" : "");
	printf("pool      space %s (%s%s, owner uid %u): %u blocks of %s, block-major; %u "
	       "blocks cached there already\n", d->space_name, d->created ? "created" : "joined",
	       d->po.space_flags & KVRT_SPACE_PERSIST && d->created ? ", persistent" : "",
	       d->owner, d->pc.layout.num_blocks,
	       fmt_bytes(b2, sizeof(b2), (uint64_t)d->pc.layout.block_stride), d->joined_cached);
	printf("workload  %u requests in %u conversations (%u multi-turn) arriving at %.3g/s; "
	       "system prompt %u tokens, user messages ~%u, %u tokens generated each\n",
	       d->wl.n_requests, d->wl.n_convs, d->n_multi, o->wl.rate, d->wl.n_system,
	       o->wl.user_tokens, o->wl.gen_tokens);
	printf("engine    continuous batching, %u tokens per step, up to %u sequences, %u "
	       "threads; attention on kept libkvrt workers: %s\n", o->batch_tokens,
	       o->max_seqs, o->threads, o->decode_kernel == DECODE_WITH_DECODE ?
	       "kvrt_attn_decode for decoding rows, kvrt_attn_prefill for prompt chunks" :
	       "kvrt_attn_prefill for every row (decoding rows are 1-token chunks)");
	if (o->role != ROLE_NONE && kvrt_backend(d->k) != KVRT_BACKEND_KMOD)
		printf("note      --role with the embedded backend: the pool lives in this "
		       "process, so no other process can share it\n");
	return STEP_NEXT;
}

/* --- the passes ----------------------------------------------------------- */

/* With the prefix cache and offload, then (unless --no-reference) without. */
static int run_passes(struct demo *d)
{
	const struct opts *o = &d->o;
	struct engine_opts eo;
	char err[512];
	int ret;

	eo = (struct engine_opts){ .max_batch_tokens = o->batch_tokens, .max_seqs = o->max_seqs,
				   .progress = o->progress, .label = "prefix cache + offload" };
	d->m.gpu = d->use_gpu ? &d->g : NULL;
	ret = engine_run(&d->m, d->run_dev, &d->pc, &d->wl, &eo, &d->cached, err, sizeof(err));
	d->m.gpu = NULL;
	if (ret) {
		fprintf(stderr, "kvrt-demo: %s\n", err);
		return EXIT_RUNTIME;
	}
	if (!o->reference)
		return STEP_NEXT;
	eo.label = "reference (no cache)";
	/* on the CPU unless asked: the GPU pass against an independent one */
	if (d->use_gpu && o->reference_on_gpu) {
		d->m.gpu = &d->g;
		eo.label = "reference (no cache, GPU)";
	}
	ret = engine_run(&d->m, d->m.gpu ? &d->gdev : &d->dev, NULL, &d->wl, &eo, &d->ref, err,
			 sizeof(err));
	d->m.gpu = NULL;
	if (ret) {
		fprintf(stderr, "kvrt-demo: %s\n", err);
		return EXIT_RUNTIME;
	}
	/* GPU and CPU attention round differently: tokens must agree, logits may not */
	equivalence(&d->cached, &d->ref, !d->use_gpu && o->decode_kernel == DECODE_WITH_PREFILL,
		    &d->eq);
	return STEP_NEXT;
}

/* The pool's figures, then leave the space; --role second destroys it. */
static int close_space(struct demo *d)
{
	const struct opts *o = &d->o;
	int ret;

	d->have_mi = !kvrt_space_mem_info(d->pc.space, &d->mi);
	pcache_close(&d->pc);
	d->have_pc = 0;
	if (o->role == ROLE_SECOND && !o->keep_space) {
		ret = kvrt_space_destroy(d->k, d->space_name);
		if (ret && ret != -ENOENT)
			fprintf(stderr, "kvrt-demo: kvrt_space_destroy(%s): %s\n", d->space_name,
				strerror(-ret));
		d->destroyed = !ret;
	}
	return STEP_NEXT;
}

/* --- the report ----------------------------------------------------------- */

static void print_json(const struct demo *d)
{
	const struct opts *o = &d->o;
	const struct equivalence *eq = &d->eq;
	struct json_info ji = {
		.version = DEMO_VERSION, .backend = kvrt_backend(d->k) == KVRT_BACKEND_KMOD ?
			"kmod" : "embedded", .backend_info = kvrt_backend_info(d->k),
		.space = d->space_name, .space_created = d->created,
		.space_destroyed = d->destroyed,
		.space_persistent = !!(d->po.space_flags & KVRT_SPACE_PERSIST),
		.cfg = &d->ck.cfg, .params = ckpt_param_count(&d->ck.cfg), .wl = &d->wl,
		.n_multi = d->n_multi, .block_tokens = o->block_tokens,
		.kv_dtype = dtype_name(o->kv_dtype), .threads = o->threads,
		.decode_kernel = o->decode_kernel == DECODE_WITH_DECODE ? "decode" : "prefill",
		.equivalence = !eq->checked ? "skipped" : eq->ok ? "pass" : "fail",
		.eq_requests = eq->requests, .eq_tokens = eq->tokens,
		.eq_same_logits = eq->same_logits, .eq_why = eq->why,
		.tokens_digest = token_digest(&d->cached),
		.device = d->use_gpu ? "gpu" : "cpu", .gpu = d->use_gpu ? &d->g.st : NULL,
		.gpu_name = d->use_gpu ? d->g.info.name : NULL, .gpu_check = o->gpu_check,
		.reference_on_gpu = o->reference_on_gpu,
	};

	report_json(stdout, &ji, &d->cached, o->reference ? &d->ref : NULL);
}

static void print_text(const struct demo *d)
{
	const struct opts *o = &d->o;
	const struct pool_stats *p = &d->cached.pool;
	const struct equivalence *eq = &d->eq;

	report_table(stdout, &d->cached, o->reference ? &d->ref : NULL);
	if (d->have_mi)
		printf("\npool memory: %s\n", d->mi.summary);
	printf("\n");
	if (o->role != ROLE_NONE || p->shared_hits)
		printf("sharing: %" PRIu64 " of %" PRIu64 " block hits (%" PRIu64 " distinct "
		       "blocks) were published by another process; this process inserted %"
		       PRIu64 " blocks\n", p->shared_hits, p->hits, p->shared_distinct,
		       p->inserted);
	if (o->tier_dir || o->tier_redis)
		printf("tiers: %" PRIu64 " of %" PRIu64 " block hits came from %s%s%s%s; %" PRIu64
		       " blocks %s\n", p->tier_hits, p->hits,
		       o->tier_dir ? "ssd:" : "", o->tier_dir ? o->tier_dir : "",
		       o->tier_dir && o->tier_redis ? " and redis:" : o->tier_redis ? "redis:" : "",
		       o->tier_redis ? o->tier_redis : "", p->tier_stores,
		       o->tier_write_back ? "queued for write-back" : "written through");
	/* the first arrival: only a warmed or shared space can serve it */
	if (d->cached.n_requests && d->cached.req[0].hit_blocks)
		printf("first request: %u of its %u prompt blocks found in the pool\n",
		       d->cached.req[0].hit_blocks, d->cached.req[0].lookup_blocks);
	if (d->destroyed)
		printf("space %s destroyed (--keep-space keeps it)\n", d->space_name);
	else if (o->role == ROLE_FIRST)
		printf("space %s persists for a --role second process\n", d->space_name);
	print_equivalence(eq);
	if (d->use_gpu)
		print_gpu(&d->g, o->gpu_check, o->reference && o->reference_on_gpu);
	printf("summary: backend=%s hits=%" PRIu64 " lookups=%" PRIu64 " shared_hits=%"
	       PRIu64 " shared_blocks=%" PRIu64 " inserted=%" PRIu64 " offloaded_bytes=%"
	       PRIu64 " fetched_bytes=%" PRIu64 " tokens=%016" PRIx64 " equivalence=%s\n",
	       kvrt_backend(d->k) == KVRT_BACKEND_KMOD ? "kmod" : "embedded",
	       p->hits, p->lookups, p->shared_hits, p->shared_distinct, p->inserted,
	       p->offload_bytes + p->publish_bytes, p->fetch_hit_bytes + p->fetch_resume_bytes,
	       token_digest(&d->cached), !eq->checked ? "skipped" : eq->ok ? "pass" : "fail");
}

static int print_report(struct demo *d)
{
	if (d->o.json)
		print_json(d);
	else
		print_text(d);
	return STEP_NEXT;
}

/* The exit status: the checks first, then --expect-* (their messages go to
 * stderr, after the report: stdout may be JSON). */
static int verdict(struct demo *d)
{
	const struct opts *o = &d->o;
	const struct pool_stats *p = &d->cached.pool;
	int rc;

	rc = d->eq.checked && !d->eq.ok ? EXIT_MISMATCH : EXIT_OK;
	if (d->use_gpu && o->gpu_check && !(d->g.st.worst <= 1))
		rc = EXIT_MISMATCH;
	if (rc == EXIT_OK && o->expect_hits && !p->hits) {
		fprintf(stderr, "kvrt-demo: expectation failed: no prefix block was hit "
			"(--expect-hits)\n");
		rc = EXIT_EXPECT;
	}
	if (rc == EXIT_OK && o->expect_tier_hits && !p->tier_hits) {
		fprintf(stderr, "kvrt-demo: expectation failed: no hit came from a tier "
			"(--expect-tier-hits)\n");
		rc = EXIT_EXPECT;
	}
	if (rc == EXIT_OK && o->expect_shared && !p->shared_hits) {
		fprintf(stderr, "kvrt-demo: expectation failed: no hit came from another process "
			"(--expect-shared-hits)\n");
		rc = EXIT_EXPECT;
	}
	return rc;
}

/* Undo what the steps set up, last first. */
static void teardown(struct demo *d)
{
	pass_result_free(&d->cached);
	pass_result_free(&d->ref);
	if (d->have_pc)
		pcache_close(&d->pc);
	if (d->have_gdev)
		devcache_fini(&d->gdev);
	if (d->have_g)
		devgpu_close(&d->g);
	if (d->have_k)
		kvrt_close(d->k);
	if (d->have_dev)
		devcache_fini(&d->dev);
	if (d->have_model)
		model_fini(&d->m);
	if (d->have_wl)
		workload_free(&d->wl);
	if (d->have_ck)
		ckpt_free(&d->ck);
}

/* `kvrt-demo warm ...`: warm.c, with the model and pool options of ours it keeps. */
static int warm_command(int argc, char **argv)
{
	struct opts o;
	struct warm_opts wo;
	struct topt rows[WARM_ROWS];
	int rc;

	warm_rows(&wo, rows);
	rc = parse(argc, argv, &o, rows);
	if (rc >= 0)
		return rc;
	return warm_main(&wo, &(struct warm_setup){
		.checkpoint = o.checkpoint, .cfg = &o.cfg, .model_seed = o.model_seed,
		.wl = &o.wl, .block_tokens = o.block_tokens, .batch_tokens = o.batch_tokens,
		.threads = o.threads ? o.threads : cpus(), .kv_dtype = o.kv_dtype,
		.backend = o.backend, .space = o.space, .pool_bytes = o.pool_bytes,
		.json = o.json, .quiet = o.quiet });
}

int main(int argc, char **argv)
{
	/* in order; each returns STEP_NEXT or the exit status, which ends the run */
	static int (*const steps[])(struct demo *) = {
		load_model,		/* --gen-checkpoint ends here */
		make_workload,
		run_speculative,	/* --speculative ends here */
		init_model,
		open_kvrt,
		choose_device,
		open_gpu,
		run_branches,		/* --n, --beam end here */
		open_space,
		print_setup,
		run_passes,
		close_space,
		print_report,
		verdict,		/* always ends the run */
	};
	struct demo d = { 0 };
	size_t i;
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "warm"))
		return warm_command(argc - 1, argv + 1);
	rc = parse(argc, argv, &d.o, NULL);
	if (rc >= 0)
		return rc;
	for (i = 0; rc == STEP_NEXT && i < sizeof(steps) / sizeof(steps[0]); i++)
		rc = steps[i](&d);
	teardown(&d);
	return rc;
}
