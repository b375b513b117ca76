// SPDX-License-Identifier: GPL-2.0
/*
 * bench_copy.c: kvbench copy, block copy bandwidth through libkvrt.
 *
 *   kvbench copy [--json] [--mib M] [--sweep] [--plot FILE.svg]
 *                [common options]
 *
 * Cases cpu_h2h_blockNk: kvrt_copy_blocks() (synchronous, in the caller)
 * of every block of one host block array into another, N KiB per block,
 * N = 32, 256 and 2048.  Both arrays are block-major (bf16, head dim 128,
 * 4 KV heads, 16-token blocks; N / 32 layers), so one block is one
 * contiguous run, and the pairs are two random permutations: blocks are
 * scattered over both arrays as in a churned pool.  value = GB/s of block
 * bytes copied per call (1 GB = 1e9 bytes).
 *
 * limit, measured in the same run: one memcpy() of the whole source array
 * onto the whole destination array, GB/s: one bulk copy by the same
 * thread, with no per-block cost.  ratio = value / limit.  It is a
 * reference, not a hard ceiling: the C library picks its copy strategy by
 * size, and many mid-size copies can run faster than one huge one, so a
 * ratio a little above 1 is possible.  Each array is --mib MiB (default 256), far above the
 * last-level cache, so every repetition streams from DRAM.  "cpu" is the
 * CPU implementation between host arrays; the GPU's copies are
 * kvbench gpu-copy (bench_gpu_copy.c).
 *
 * --sweep adds 64, 128, 512 and 1024 KiB blocks; --plot FILE draws GB/s
 * against block size, the copies and the memcpy limit (and implies
 * --sweep).  After the last repetition three copied blocks are compared
 * with their sources.
 *
 * Timing: CLOCK_MONOTONIC; each repetition runs whole calls for at least
 * --rep-time seconds (default 0.2); limit and value repetitions alternate,
 * and of --reps (default 5) such pairs the one with the middle ratio is
 * reported (kvb_middle_pair).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvrt.h"
#include "plot.h"
#include "data.h"
#include "report.h"

#define HEAD_DIM 128
#define KV_HEADS 4
#define BLOCK_TOKENS 16
#define LAYER_BYTES (2ULL * BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2)	/* 32 KiB */
#define MAX_LAYERS 64							/* 2 MiB */

struct copy_opts {
	struct kvb_opts c;
	unsigned long mib;
	bool sweep;
};

static const struct kvb_opts copy_defaults = {
	.bench = "copy", .reps = 5, .rep_time = 0.2, .can_plot = true,
};

/* layers per block, in block-size order; sweep: only with --sweep or --plot */
static const struct {
	uint32_t layers;
	bool sweep;
} sizes[] = {
	{ 1, false }, { 2, true }, { 4, true }, { 8, false }, { 16, true }, { 32, true },
	{ 64, false },
};
#define NR_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static const char copy_about[] =
	"Block copy bandwidth through kvrt_copy_blocks() between two host block\n"
	"arrays (cpu_h2h_block32k, _block256k, _block2048k: block-major, scattered\n"
	"blocks), against one memcpy() of the whole array.  ratio = value / limit.\n";

struct copy_case {
	struct kvrt *k;
	struct kvrt_layout layout;
	struct kvrt_block_array dst, src;
	struct kvrt_block_pair *pairs;
	uint32_t count;
	uint8_t *dbuf, *sbuf;
	size_t bytes;		/* per array */
	uint64_t block_bytes;
};

/* n calls of kvrt_copy_blocks over every pair. */
static int run_copy(void *ctx, unsigned long n)
{
	const struct copy_case *c = ctx;
	int ret = 0;

	while (n-- && !ret)
		ret = kvrt_copy_blocks(c->k, &c->dst, &c->src, c->pairs, c->count, 0, NULL);
	return ret;
}

/* n memcpy()s of the whole array: the limit. */
static int run_memcpy(void *ctx, unsigned long n)
{
	const struct copy_case *c = ctx;

	while (n--) {
		memcpy(c->dbuf, c->sbuf, c->bytes);
		/* the copy must happen: the compiler may not drop it */
		__asm__ __volatile__("" : : "r"(c->dbuf) : "memory");
	}
	return 0;
}

/* Three copied blocks against their sources: 0 or -EIO. */
static int verify(const struct copy_case *c)
{
	uint32_t at[3] = { 0, c->count / 2, c->count - 1 }, i;

	for (i = 0; i < 3; i++) {
		const struct kvrt_block_pair *p = &c->pairs[at[i]];

		if (memcmp(c->dbuf + p->dst * c->block_bytes, c->sbuf + p->src * c->block_bytes,
			   c->block_bytes))
			return -EIO;
	}
	return 0;
}

static int case_init(struct copy_case *c, uint32_t layers, uint64_t seed)
{
	uint32_t *s, *d, i;
	uint64_t seed_d;
	int ret;

	c->count = (uint32_t)(c->bytes / (layers * LAYER_BYTES));
	ret = kvrt_layout_init(&c->layout, KVRT_LAYOUT_BLOCK_MAJOR, layers, KV_HEADS, HEAD_DIM,
			       BLOCK_TOKENS, c->count, KVRT_DTYPE_BF16);
	if (!ret)
		ret = kvrt_layout_block_bytes(&c->layout, &c->block_bytes);
	if (ret)
		return ret;
	c->dst = (struct kvrt_block_array){ .layout = &c->layout, .base = c->dbuf };
	c->src = (struct kvrt_block_array){ .layout = &c->layout, .base = c->sbuf };
	c->pairs = malloc(sizeof(*c->pairs) * c->count);
	s = malloc(sizeof(*s) * c->count);
	d = malloc(sizeof(*d) * c->count);
	if (!c->pairs || !s || !d) {
		free(c->pairs);
		c->pairs = NULL;
		ret = -ENOMEM;
		goto out_free;
	}
	seed_d = seed * 31 + 7;
	kvb_shuffle(s, c->count, &seed);
	kvb_shuffle(d, c->count, &seed_d);
	for (i = 0; i < c->count; i++)
		c->pairs[i] = (struct kvrt_block_pair){ .src = s[i], .dst = d[i] };
out_free:
	free(s);
	free(d);
	return ret;
}

static int bench_copy(const struct copy_opts *co)
{
	const struct kvb_opts *o = &co->c;
	struct kvb_report rep = { .o = o, .ratio = KVB_RATE, .name_w = 20, .num_w = 10,
				  .unit_w = 36, .ratio_w = 7 };
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	struct copy_case c = { .bytes = (size_t)co->mib << 20 };
	unsigned int i, step = 0, steps = 0;
	uint64_t *w, seed = 0x9e3779b97f4a7c15ULL;
	size_t j;
	int ret;

	for (i = 0; i < NR_SIZES; i++)
		steps += !sizes[i].sweep || co->sweep;
	/* whole blocks of every size: a multiple of the largest block */
	c.bytes = c.bytes / (MAX_LAYERS * LAYER_BYTES) * (MAX_LAYERS * LAYER_BYTES);
	ret = kvrt_open(&c.k, &oo);
	if (ret) {
		fprintf(stderr, "kvbench copy: kvrt_open: %s\n", strerror(-ret));
		return ret;
	}
	c.sbuf = kvb_big_alloc(c.bytes);
	c.dbuf = kvb_big_alloc(c.bytes);
	if (!c.sbuf || !c.dbuf) {
		fprintf(stderr, "kvbench copy: cannot map 2 x %zu MiB\n", c.bytes >> 20);
		ret = -ENOMEM;
		goto out;
	}
	kvb_report_header(&rep, "GB/s");
	kvb_progress(o, 0, 0, "filling the arrays");
	w = (uint64_t *)c.sbuf;
	for (j = 0; j < c.bytes / 8; j++)
		w[j] = kvb_xorshift(&seed);
	memset(c.dbuf, 0, c.bytes);

	for (i = 0; i < NR_SIZES && !ret; i++) {
		struct kvb_case m = {
			.value = { .run = run_copy, .ctx = &c, .units = (double)c.bytes },
			.limit = { .run = run_memcpy, .ctx = &c, .units = (double)c.bytes },
			.per_call = true, .middle_pair = true,
		};
		char name[64];
		double v, l;

		if (sizes[i].sweep && !co->sweep)
			continue;
		snprintf(name, sizeof(name), "cpu_h2h_block%lluk",
			 (unsigned long long)(sizes[i].layers * LAYER_BYTES >> 10));
		kvb_progress(o, ++step, steps, name);
		ret = case_init(&c, sizes[i].layers, 1000 + i);
		if (ret)
			break;
		/* value and limit: GB/s of the array's bytes, warmed up first */
		ret = kvb_measure(o, &m, &v, &l);
		if (!ret && verify(&c)) {
			fprintf(stderr, "kvbench copy: %s: a copied block differs from its source\n",
				name);
			ret = -EIO;
		}
		if (!ret) {
			v = 1 / v / 1e9;
			l = 1 / l / 1e9;
			kvb_report(&rep, name, v, "GB/s block bytes copied (ratio = value/limit)", l,
				   "GB/s one memcpy of the whole array");
			kvb_plot_point("kvrt_copy_blocks, block-major to block-major, scattered",
				       (double)(sizes[i].layers * LAYER_BYTES >> 10), v);
			kvb_plot_point("limit: one memcpy of the whole array",
				       (double)(sizes[i].layers * LAYER_BYTES >> 10), l);
		}
		free(c.pairs);
		c.pairs = NULL;
	}
	kvb_progress_end();
	if (ret && ret != -EIO)
		fprintf(stderr, "kvbench copy: %s\n", strerror(-ret));
out:
	if (c.sbuf)
		munmap(c.sbuf, c.bytes);
	if (c.dbuf)
		munmap(c.dbuf, c.bytes);
	kvrt_close(c.k);
	return ret;
}

/* argv[0] is "copy". */
int cmd_copy(int argc, char **argv)
{
	struct copy_opts o = { .c = copy_defaults, .mib = 256 };
	char title[160];
	int ret;
	const struct topt opts[] = {
		{ .name = "--mib", .arg = "M", .kind = TOPT_ULONG, .dst = &o.mib, .min = 16,
		  .max = 65536, .want = "a number from 16 to 65536",
		  .help = "bytes per array in MiB (default 256; 16 .. 65536)" },
		{ .name = "--sweep", .kind = TOPT_FLAG, .dst = &o.sweep,
		  .help = "also 64, 128, 512 and 1024 KiB blocks (--plot implies it)" },
		{ NULL },
	};
	if (!kvb_parse(&copy_defaults, copy_about, opts, &o.c, argc, argv, &ret))
		return ret;
	if (o.c.plot)
		o.sweep = true;
	if (kvb_plot_check(&o.c))
		return 1;
	if (bench_copy(&o))
		return 1;
	snprintf(title, sizeof(title),
		 "kvbench copy: host block copies on the CPU, %lu MiB per array", o.mib);
	return kvb_plot_write(&o.c, &(struct kvb_plot_axes){
			.title = title, .xlabel = "block size (KiB)",
			.ylabel = "GB/s copied (1 GB = 1e9 bytes)", .logx = true }) ? 1 : 0;
}
