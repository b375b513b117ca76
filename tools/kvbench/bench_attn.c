// SPDX-License-Identifier: GPL-2.0
/*
 * bench_attn.c: kvbench attn, CPU paged-attention decode throughput.
 *
 *   kvbench attn [--json] [--gib G] [--threads N] [--block-tokens N]
 *                [--plot FILE.svg] [common options]
 *
 * Decode cases (libkvrt's fast path, bf16 K/V and q, head dim 128, 32 query
 * heads over 8 KV heads, 16-token blocks (--block-tokens N: N-token blocks,
 * every decode and gather case named _btN), blocks scattered at random over
 * the cache as in a churned pool): value = bytes of K and V the call must
 * read (sum of sequence lengths x 8 heads x 128 dims x 2 bytes x K and V)
 * per second.  limit = this machine's memory read bandwidth measured in the
 * same run: every thread sums the 64-bit words of its share of a buffer of
 * the same size with AVX2 loads (a plain streaming read).  ratio =
 * value / limit.  Both buffers are --gib GiB (default 1), far above the
 * last-level cache, so every repetition streams from DRAM.
 *
 *   decode_bB_ctxC            B sequences of C tokens, layer-major cache;
 *                             B x C is the same for every case (B 8 .. 512,
 *                             C 32768 .. 512 at 1 GiB), so the cases sweep
 *                             context length at a constant working set
 *   decode_bB_ctxC_blockmajor the same, block-major cache of 2 layers, layer 1
 *
 * --plot FILE draws GB/s against context length, the decode cases and the
 * streaming-read limit, and adds the sweep's intermediate points (C 16384,
 * 4096, 1024 at 1 GiB) to the run.
 *
 * Access-pattern case: gather_read_b32_ctx8192: value = GB/s reading
 * exactly the K and V blocks decode_b32_ctx8192 reads, in its order
 * (sequence by sequence, block by block, K then V), with the same threads
 * and nothing else: AVX2 loads summed, the next block prefetched one line
 * per line read.  limit = the streaming read.  Its ratio is what a perfect
 * decode could reach on these scattered blocks (32 KiB each at 16 tokens).
 *
 * Speedup case: decode_vs_reference_b4_ctx1024: value = fast path GB/s,
 * limit = the reference implementation's GB/s on the same call (16 MiB of
 * K/V, in cache), ratio = the fast path's speedup.
 *
 * Threads: thread_spawn: value = microseconds to create and join one
 * pthread (what the fast path pays per extra thread per call), limit =
 * microseconds of the smallest decode call (b1 ctx4096, 16 MiB) with all
 * threads, ratio = value / limit.  decode_kept_b1_ctx4096: value = that
 * call's microseconds on threads kept between calls (kvrt_workers), limit =
 * the same call creating its threads.
 *
 * Timing: CLOCK_MONOTONIC; each repetition runs whole calls for at least
 * --rep-time seconds (default 0.3); value and limit repetitions alternate,
 * and of --reps (default 5) such pairs the one with the middle ratio is
 * reported (kvb_middle_pair: the shared host's memory bandwidth moves).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvrt.h"
#include "attn_shape.h"
#include "plot.h"
#include "data.h"
#include "report.h"

#define DEFAULT_BLOCK_TOKENS 16
#define TOKEN_KV_BYTES (2ULL * KV_HEADS * HEAD_DIM * 2)	/* K and V, bf16: 4 KiB */

struct attn_opts {
	struct kvb_opts c;
	double gib;
	unsigned int threads;
	uint32_t block_tokens;
};

static const struct kvb_opts attn_defaults = {
	.bench = "attn", .reps = 5, .rep_time = 0.3, .can_plot = true,
};

/* bf16 values in +-[0.5, 2): finite, no denormals. */
static void fill_bf16(void *p, size_t bytes, uint64_t seed)
{
	uint64_t *w = p, s = seed | 1;
	size_t i;

	for (i = 0; i < bytes / 8; i++)
		w[i] = (kvb_xorshift(&s) & 0x807f807f807f807fULL) | 0x3f003f003f003f00ULL;
}

/* ---- the limit: a streaming read with every thread ------------------------- */

struct stream_arg {
	uint64_t sum;		/* first: on_threads() adds these up */
	const uint8_t *p;
	size_t bytes;
};

__attribute__((target("avx2")))
static uint64_t sum_avx2(const uint8_t *p, size_t bytes)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	uint64_t out[4];
	size_t i;

	for (i = 0; i + 128 <= bytes; i += 128) {
		a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	_mm256_storeu_si256((__m256i *)out, a0);
	return out[0] + out[1] + out[2] + out[3];
}

static uint64_t sum_plain(const uint8_t *p, size_t bytes)
{
	const uint64_t *w = (const uint64_t *)p;
	uint64_t s0 = 0, s1 = 0;
	size_t i;

	for (i = 0; i + 2 <= bytes / 8; i += 2) {
		s0 += w[i];
		s1 += w[i + 1];
	}
	return s0 + s1;
}

static void *stream_main(void *a)
{
	struct stream_arg *sa = a;

	sa->sum = __builtin_cpu_supports("avx2") ? sum_avx2(sa->p, sa->bytes) :
						   sum_plain(sa->p, sa->bytes);
	return NULL;
}

/*
 * fn on each of args[0 .. n) (elements of size bytes, each starting with
 * its uint64_t sum), one thread each, the caller being thread 0; the sum
 * of the sums.
 */
static uint64_t on_threads(void *(*fn)(void *), void *args, size_t size, unsigned int n)
{
	uint8_t *a = args;
	pthread_t tid[256];
	uint64_t sum = 0;
	unsigned int i, started;

	for (started = 1; started < n; started++)
		if (pthread_create(&tid[started], NULL, fn, a + size * started))
			break;
	fn(a);
	for (i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	for (i = started; i < n; i++)	/* creation failed: do it here */
		fn(a + size * i);
	for (i = 0; i < n; i++)
		sum += *(const uint64_t *)(a + size * i);
	return sum;
}

/* One pass over buf with nthreads threads. */
static uint64_t stream_pass(const uint8_t *buf, size_t bytes, unsigned int nthreads)
{
	struct stream_arg args[256];
	size_t share = bytes / nthreads / 128 * 128;
	unsigned int i;

	for (i = 0; i < nthreads; i++) {
		args[i].p = buf + share * i;
		args[i].bytes = i + 1 < nthreads ? share : bytes - share * i;
	}
	return on_threads(stream_main, args, sizeof(args[0]), nthreads);
}

/* ---- a decode setup --------------------------------------------------------- */

struct decode_case {
	struct kvrt_layout layout;
	struct kvrt_kv_cache kv;
	struct kvrt_block_table table;
	struct kvrt_attn_params params;
	int32_t *indptr, *indices, *lens;
	uint16_t *q, *out;
	uint64_t kv_bytes_read;	/* per call */
	struct kvrt_workers *kept;	/* non-NULL: calls run on these threads */
};

static void decode_case_free(struct decode_case *c)
{
	free(c->indptr);
	free(c->indices);
	free(c->lens);
	free(c->q);
	free(c->out);
}

/* batch sequences of ctx tokens over the cache at base (num_blocks blocks). */
static int decode_case_init(struct decode_case *c, const struct kvrt_layout *layout,
			    const void *base, uint32_t layer, uint32_t batch, uint32_t ctx,
			    unsigned int threads, uint64_t seed)
{
	uint32_t bt = layout->block_tokens, per_seq = (ctx + bt - 1) / bt, nblk = batch * per_seq, i;
	size_t qn = (size_t)batch * Q_HEADS * HEAD_DIM;

	memset(c, 0, sizeof(*c));
	if (nblk > layout->num_blocks)
		return -EINVAL;
	c->layout = *layout;
	c->indptr = malloc(sizeof(int32_t) * (batch + 1));
	c->indices = malloc(sizeof(int32_t) * layout->num_blocks);
	c->lens = malloc(sizeof(int32_t) * batch);
	c->q = malloc(qn * 2);
	c->out = malloc(qn * 2);
	if (!c->indptr || !c->indices || !c->lens || !c->q || !c->out) {
		decode_case_free(c);
		return -ENOMEM;
	}
	/* a random permutation of all blocks; sequences take the first ones */
	kvb_shuffle((uint32_t *)c->indices, layout->num_blocks, &seed);
	for (i = 0; i <= batch; i++)
		c->indptr[i] = (int32_t)(i * per_seq);
	for (i = 0; i < batch; i++)
		c->lens[i] = (int32_t)ctx;
	fill_bf16(c->q, qn * 2, seed);
	c->kv = (struct kvrt_kv_cache){ .layout = &c->layout, .base = base, .layer = layer };
	c->table = (struct kvrt_block_table){ batch, c->indptr, c->indices, c->lens };
	c->params = (struct kvrt_attn_params){
		.num_q_heads = Q_HEADS, .sm_scale = 0.08838834764831845f, .window_left = -1,
		.q_dtype = KVRT_DTYPE_BF16, .o_dtype = KVRT_DTYPE_BF16,
		.impl = KVRT_ATTN_FAST, .num_threads = threads,
	};
	c->kv_bytes_read = (uint64_t)batch * ctx * TOKEN_KV_BYTES;
	return 0;
}

static int decode_call(struct decode_case *c)
{
	if (c->kept)
		return kvrt_attn_decode_on(c->kept, &c->params, c->q, &c->kv, &c->table, c->out);
	return kvrt_attn_decode(&c->params, c->q, &c->kv, &c->table, c->out);
}

/* n decode calls. */
static int run_decode(void *ctx, unsigned long n)
{
	struct decode_case *c = ctx;
	int ret = 0;

	while (n-- && !ret)
		ret = decode_call(c);
	return ret;
}

/* n decode calls through the reference path. */
static int run_decode_reference(void *ctx, unsigned long n)
{
	struct decode_case *c = ctx;
	int ret;

	c->params.impl = KVRT_ATTN_REFERENCE;
	ret = run_decode(c, n);
	c->params.impl = KVRT_ATTN_FAST;
	return ret;
}

/* n decode calls, each creating its threads (the kept ones set aside). */
static int run_decode_unkept(void *ctx, unsigned long n)
{
	struct decode_case *c = ctx;
	struct kvrt_workers *kept = c->kept;
	int ret;

	c->kept = NULL;
	ret = run_decode(c, n);
	c->kept = kept;
	return ret;
}

/* A read pass (the limits): its data, threads; returns a sum of what it read. */
struct read_pass {
	uint64_t (*run)(const struct read_pass *rp, unsigned int threads);
	const uint8_t *buf;		/* stream: the buffer */
	size_t bytes;
	const struct decode_case *c;	/* gather: the decode case's blocks */
};

/* A read pass as a measured side: its threads, and where the sums it read go. */
struct read_side {
	const struct read_pass *rp;
	unsigned int threads;
	volatile uint64_t *sink;
};

/* n read passes. */
static int run_read(void *ctx, unsigned long n)
{
	struct read_side *s = ctx;

	while (n--)
		*s->sink += s->rp->run(s->rp, s->threads);
	return 0;
}

static uint64_t run_stream(const struct read_pass *rp, unsigned int threads)
{
	return stream_pass(rp->buf, rp->bytes, threads);
}

/* ---- the access pattern alone: the decode's blocks, read --------------------- */

struct gather_arg {
	uint64_t sum;		/* first: on_threads() adds these up */
	const struct decode_case *c;
	uint32_t s0, s1;	/* sequences [s0, s1) */
};

/* K (kv 0) or V of the j-th block of the table, at the case's layer. */
static const uint8_t *gather_block(const struct decode_case *c, uint32_t j, int kv)
{
	const struct kvrt_layout *lo = &c->layout;

	return (const uint8_t *)c->kv.base + c->kv.layer * lo->layer_stride + kv * lo->kv_stride +
	       (int64_t)c->indices[j] * lo->block_stride;
}

/* bytes: one block's K (its token rows are contiguous in both presets) */
__attribute__((target("avx2")))
static uint64_t gather_avx2(const struct decode_case *c, uint32_t s0, uint32_t s1, size_t bytes)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0;
	uint32_t j, j0 = (uint32_t)c->indptr[s0], j1 = (uint32_t)c->indptr[s1];
	uint64_t out[4];
	size_t off;
	int kv;

	for (j = j0; j < j1; j++)
		for (kv = 0; kv < 2; kv++) {
			const uint8_t *p = gather_block(c, j, kv);
			/* one line of the next block (K, then V) per line read */
			const uint8_t *next = kv ? (j + 1 < j1 ? gather_block(c, j + 1, 0) : NULL)
						 : gather_block(c, j, 1);

			for (off = 0; off < bytes; off += 64) {
				if (next)
					_mm_prefetch((const char *)next + off, _MM_HINT_T0);
				a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + off)));
				a1 = _mm256_add_epi64(a1,
						      _mm256_loadu_si256((const __m256i *)(p + off + 32)));
			}
		}
	_mm256_storeu_si256((__m256i *)out, _mm256_add_epi64(a0, a1));
	return out[0] + out[1] + out[2] + out[3];
}

static uint64_t gather_plain(const struct decode_case *c, uint32_t s0, uint32_t s1, size_t bytes)
{
	uint32_t j, j0 = (uint32_t)c->indptr[s0], j1 = (uint32_t)c->indptr[s1];
	uint64_t s = 0;
	size_t i;
	int kv;

	for (j = j0; j < j1; j++)
		for (kv = 0; kv < 2; kv++) {
			const uint64_t *w = (const uint64_t *)gather_block(c, j, kv);

			for (i = 0; i < bytes / 8; i++)
				s += w[i];
		}
	return s;
}

static void *gather_main(void *a)
{
	struct gather_arg *ga = a;
	const struct kvrt_layout *lo = &ga->c->layout;
	size_t bytes = lo->block_tokens * (size_t)lo->token_stride;

	ga->sum = __builtin_cpu_supports("avx2") ? gather_avx2(ga->c, ga->s0, ga->s1, bytes) :
						   gather_plain(ga->c, ga->s0, ga->s1, bytes);
	return NULL;
}

/* One pass over the case's blocks, sequences split evenly over the threads. */
static uint64_t gather_pass(const struct decode_case *c, unsigned int nthreads)
{
	struct gather_arg args[256];
	uint32_t batch = c->table.num_seqs;
	unsigned int i;

	for (i = 0; i < nthreads; i++)
		args[i] = (struct gather_arg){ 0, c, (uint32_t)((uint64_t)batch * i / nthreads),
					       (uint32_t)((uint64_t)batch * (i + 1) / nthreads) };
	return on_threads(gather_main, args, sizeof(args[0]), nthreads);
}

static uint64_t run_gather(const struct read_pass *rp, unsigned int threads)
{
	return gather_pass(rp->c, threads);
}

/* ---- the cases ---------------------------------------------------------------- */

/* Layer-major decode points, longest context first; sweep: only with --plot. */
static const struct {
	uint32_t batch, ctx;	/* at 1 GiB: scaled to --gib */
	bool sweep;
} points[] = {
	{ 8, 32768, false }, { 16, 16384, true }, { 32, 8192, false }, { 64, 4096, true },
	{ 128, 2048, false }, { 256, 1024, true }, { 512, 512, false },
};
#define NR_POINTS (sizeof(points) / sizeof(points[0]))
#define BLOCK_MAJOR_POINT 2	/* b32 ctx8192: one block-major point is enough */

static unsigned int online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned int)n : 1;
}

static void *spawn_main(void *arg)
{
	return arg;
}

/* What bench_decode() sets up once for its cases. */
struct attn_run {
	const struct attn_opts *ao;
	const struct kvb_opts *o;
	struct kvb_report rep;
	unsigned int threads, step, steps;
	uint32_t bt;			/* tokens per block */
	size_t kv_bytes;		/* a layer of the caches, and the stream */
	struct kvrt_layout lm, bm;	/* layer-major, block-major (2 layers) */
	uint8_t *stream, *cache;
	struct read_pass streaming;
	struct read_side stream_side;	/* the limit: a streaming read */
	volatile uint64_t sink;
	char sfx[16];			/* "_btN" unless the default block size */
};

static const char stream_limit_unit[] = "GB/s streaming read";

/* The layouts, the caches and the stream, filled. */
static int decode_setup(struct attn_run *a)
{
	const struct kvb_opts *o = a->o;
	uint32_t num_blocks;
	unsigned int p;
	int ret;

	a->kv_bytes = (size_t)(a->ao->gib * (1ULL << 30)) / (a->bt * TOKEN_KV_BYTES) *
		      (a->bt * TOKEN_KV_BYTES);
	num_blocks = (uint32_t)(a->kv_bytes / (a->bt * TOKEN_KV_BYTES));
	a->steps = 5;	/* block-major, gather, reference, spawn, kept */
	if (a->bt != DEFAULT_BLOCK_TOKENS)
		snprintf(a->sfx, sizeof(a->sfx), "_bt%u", a->bt);
	for (p = 0; p < NR_POINTS; p++)
		a->steps += !points[p].sweep || o->plot;
	kvb_report_header(&a->rep, "value");
	ret = kvrt_layout_init(&a->lm, KVRT_LAYOUT_LAYER_MAJOR, 1, KV_HEADS, HEAD_DIM, a->bt,
			       num_blocks, KVRT_DTYPE_BF16);
	if (!ret)
		ret = kvrt_layout_init(&a->bm, KVRT_LAYOUT_BLOCK_MAJOR, 2, KV_HEADS, HEAD_DIM, a->bt,
				       num_blocks, KVRT_DTYPE_BF16);
	if (ret) {
		fprintf(stderr, "kvbench attn: kvrt_layout_init: %s\n", strerror(-ret));
		return ret;
	}
	/* the block-major cache has 2 layers: twice the memory, the same bytes read */
	a->cache = kvb_big_alloc(2 * a->kv_bytes);
	a->stream = kvb_big_alloc(a->kv_bytes);
	if (!a->cache || !a->stream) {
		fprintf(stderr, "kvbench attn: cannot map %zu MiB\n", 3 * a->kv_bytes >> 20);
		return -ENOMEM;
	}
	kvb_progress(o, 0, 0, "filling the caches");
	fill_bf16(a->cache, 2 * a->kv_bytes, 42);
	fill_bf16(a->stream, a->kv_bytes, 43);
	a->streaming = (struct read_pass){ .run = run_stream, .buf = a->stream,
					   .bytes = a->kv_bytes };
	a->stream_side = (struct read_side){ .rp = &a->streaming, .threads = a->threads,
					     .sink = &a->sink };
	return 0;
}

/* The layer-major points, then the block-major one, against the stream. */
static int decode_points(struct attn_run *a)
{
	const struct kvb_opts *o = a->o;
	const uint32_t bt = a->bt;
	unsigned int p;
	char name[64];
	int ret = 0;

	for (p = 0; p <= NR_POINTS && !ret; p++) {
		bool block_major = p == NR_POINTS;
		unsigned int pt = block_major ? BLOCK_MAJOR_POINT : p;
		const struct kvrt_layout *lo = block_major ? &a->bm : &a->lm;
		uint32_t batch = points[pt].batch;
		uint32_t ctx = (uint32_t)(points[pt].ctx * a->ao->gib);
		struct decode_case c;
		struct kvb_case m = {
			.value = { .run = run_decode, .ctx = &c },
			.limit = { .run = run_read, .ctx = &a->stream_side,
				   .units = (double)a->kv_bytes },
			.per_call = true, .middle_pair = true,
		};
		double v, l;

		if (!block_major && points[pt].sweep && !o->plot)
			continue;
		ctx = ctx / bt * bt;
		if (ctx < bt)
			ctx = bt;
		snprintf(name, sizeof(name), "decode_b%u_ctx%u%s%s", batch, ctx,
			 block_major ? "_blockmajor" : "", a->sfx);
		kvb_progress(o, ++a->step, a->steps, name);
		ret = decode_case_init(&c, lo, a->cache, block_major ? 1 : 0, batch, ctx, a->threads,
				       1000 + pt + (block_major ? NR_POINTS : 0));
		if (ret)
			break;
		m.value.units = (double)c.kv_bytes_read;
		ret = kvb_measure_report(&a->rep, name, &m, "GB/s K/V read (ratio = value/limit)",
					 stream_limit_unit, &v, &l);
		if (!ret) {
			kvb_plot_point(block_major ? "decode, block-major cache (layer 1 of 2)" :
						     "decode, layer-major cache", ctx, v);
			if (!block_major)
				kvb_plot_point("limit: streaming read, same threads", ctx, l);
		}
		decode_case_free(&c);
	}
	return ret;
}

/* The access pattern alone, as decode_b32_ctx8192 reads it. */
static int gather_read(struct attn_run *a)
{
	const unsigned int pt = BLOCK_MAJOR_POINT;
	const uint32_t bt = a->bt;
	uint32_t batch = points[pt].batch;
	uint32_t ctx = (uint32_t)(points[pt].ctx * a->ao->gib) / bt * bt;
	struct decode_case c;
	const struct read_pass gather = { .run = run_gather, .c = &c };
	struct read_side gather_side = { .rp = &gather, .threads = a->threads, .sink = &a->sink };
	struct kvb_case m = {
		.value = { .run = run_read, .ctx = &gather_side },
		.limit = { .run = run_read, .ctx = &a->stream_side, .units = (double)a->kv_bytes },
		.per_call = true, .middle_pair = true,
	};
	char name[64];
	int ret;

	if (ctx < bt)
		ctx = bt;
	snprintf(name, sizeof(name), "gather_read_b%u_ctx%u%s", batch, ctx, a->sfx);
	kvb_progress(a->o, ++a->step, a->steps, name);
	/* the seed of that decode point: the same blocks in the same order */
	ret = decode_case_init(&c, &a->lm, a->cache, 0, batch, ctx, a->threads, 1000 + pt);
	if (!ret) {
		m.value.units = (double)c.kv_bytes_read;
		ret = kvb_measure_report(&a->rep, name, &m,
					 "GB/s the same blocks, read only (ratio = value/limit)",
					 stream_limit_unit, NULL, NULL);
	}
	decode_case_free(&c);
	return ret;
}

/* The fast path against the reference, small. */
static int decode_vs_reference(struct attn_run *a)
{
	struct decode_case c;
	struct kvb_case m = {
		.value = { .run = run_decode, .ctx = &c },
		.limit = { .run = run_decode_reference, .ctx = &c },
		.per_call = true, .middle_pair = true,
	};
	int ret;

	kvb_progress(a->o, ++a->step, a->steps, "decode_vs_reference_b4_ctx1024");
	ret = decode_case_init(&c, &a->lm, a->cache, 0, 4, 1024, a->threads, 7);
	if (!ret) {
		m.value.units = m.limit.units = (double)c.kv_bytes_read;
		ret = kvb_measure_report(&a->rep, "decode_vs_reference_b4_ctx1024", &m,
					 "GB/s K/V read, fast path (ratio = value/limit = speedup)",
					 "GB/s K/V read, reference path", NULL, NULL);
	}
	decode_case_free(&c);
	return ret;
}

/* What a call pays per thread: a thread's creation and join against a call. */
static int thread_spawn(struct attn_run *a)
{
	const struct kvb_opts *o = a->o;
	double vs[KVB_MAX_REPS], ls[KVB_MAX_REPS];
	struct decode_case c;
	struct kvb_side call = { .run = run_decode, .ctx = &c, .units = 1 };
	double v, t0;
	unsigned int i, r, n = 200;
	int ret;

	kvb_progress(o, ++a->step, a->steps, "thread_spawn");
	ret = decode_case_init(&c, &a->lm, a->cache, 0, 1, 4096, a->threads, 9);
	for (r = 0; r < o->reps && !ret; r++) {
		t0 = kvb_now_s();
		for (i = 0; i < n; i++) {
			pthread_t t;

			if (pthread_create(&t, NULL, spawn_main, NULL)) {
				ret = -EAGAIN;
				break;
			}
			pthread_join(t, NULL);
		}
		vs[r] = (kvb_now_s() - t0) / n * 1e6;
		if (!ret)
			ret = kvb_time_calls(&call, o->rep_time, &ls[r]);
		ls[r] *= 1e6;
	}
	if (!ret) {
		v = kvb_median(vs, o->reps);
		kvb_report(&a->rep, "thread_spawn", v,
			   "us per pthread_create+join (ratio = value/limit)",
			   kvb_median(ls, o->reps), "us per decode call b1 ctx4096");
	}
	decode_case_free(&c);
	return ret;
}

/* The same call on kept threads, against the call creating its own. */
static int decode_kept(struct attn_run *a)
{
	struct decode_case c;
	struct kvb_case m = {
		.value = { .run = run_decode, .ctx = &c, .units = 1e-6 },
		.limit = { .run = run_decode_unkept, .ctx = &c, .units = 1e-6 },
		.per_call = true, .middle_pair = true,
	};
	double v, l;
	int ret;

	kvb_progress(a->o, ++a->step, a->steps, "decode_kept_b1_ctx4096");
	ret = decode_case_init(&c, &a->lm, a->cache, 0, 1, 4096, a->threads, 9);
	if (!ret)
		ret = kvrt_workers_create(a->threads, &c.kept);
	/* seconds per 1e-6 call: microseconds per call */
	if (!ret)
		ret = kvb_measure(a->o, &m, &v, &l);
	if (!ret) {
		kvb_report(&a->rep, "decode_kept_b1_ctx4096", v,
			   "us per decode call on kept threads (ratio = value/limit)", l,
			   "us per the call creating its threads");
	}
	kvrt_workers_destroy(c.kept);
	decode_case_free(&c);
	return ret;
}

static int bench_decode(const struct attn_opts *ao, unsigned int threads)
{
	struct attn_run a = {
		.ao = ao, .o = &ao->c, .threads = threads, .bt = ao->block_tokens,
		.rep = { .o = &ao->c, .ratio = KVB_RATE, .name_w = 34, .num_w = 10,
			 .unit_w = 30, .ratio_w = 7 },
	};
	int ret;

	ret = decode_setup(&a);
	if (ret)
		return ret;
	ret = decode_points(&a);
	if (!ret)
		ret = gather_read(&a);
	if (!ret)
		ret = decode_vs_reference(&a);
	if (!ret)
		ret = thread_spawn(&a);
	if (!ret)
		ret = decode_kept(&a);
	kvb_progress_end();

	if (ret)
		fprintf(stderr, "kvbench attn: %s\n", strerror(-ret));
	munmap(a.cache, 2 * a.kv_bytes);
	munmap(a.stream, a.kv_bytes);
	return ret;
}

static const char attn_about[] =
	"CPU paged-attention decode: GB/s of K/V read against this machine's\n"
	"streaming read bandwidth over context lengths, the same blocks read with\n"
	"nothing else (the ceiling of this access pattern), and the fast path's\n"
	"speedup over the reference.  ratio = value / limit.\n";

/* A power of two from 1 to 256 into a uint32_t. */
static int parse_block_tokens(const char *v, void *dst)
{
	unsigned long n;

	if (topt_parse_ulong(v, 1, 256, &n) || (n & (n - 1)))
		return -1;
	*(uint32_t *)dst = (uint32_t)n;
	return 0;
}

/* argv[0] is "attn". */
int cmd_attn(int argc, char **argv)
{
	struct attn_opts o = { .c = attn_defaults, .gib = 1.0,
			       .block_tokens = DEFAULT_BLOCK_TOKENS };
	unsigned int threads;
	char title[160];
	int ret;
	const struct topt opts[] = {
		{ .name = "--gib", .arg = "G", .kind = TOPT_DOUBLE, .dst = &o.gib, .min = 0.05,
		  .max = 64, .want = "a size in [0.05, 64]",
		  .help = "K/V working set in GiB (default 1; 0.05 .. 64)" },
		{ .name = "--threads", .arg = "N", .kind = TOPT_UINT, .dst = &o.threads, .min = 0,
		  .max = 256, .want = "a number from 0 to 256",
		  .help = "threads for attention and the streaming read (default:\nonline CPUs)" },
		{ .name = "--block-tokens", .arg = "N", .kind = TOPT_FUNC, .dst = &o.block_tokens,
		  .parse = parse_block_tokens, .want = "a power of two from 1 to 256",
		  .help = "tokens per cache block, a power of two from 1 to 256\n"
			  "(default 16); case names get _btN when not 16; needs\n"
			  "--gib of at least N / 512" },
		{ NULL },
	};
	const struct kvb_cmd cmd = { .defaults = &attn_defaults, .about = attn_about,
				     .opts = opts };

	if (!kvb_parse_args(&cmd, &o.c, argc, argv, NULL, &ret))
		return ret;
	/* the shortest point, 512 tokens at 1 GiB, must hold a block */
	if ((uint32_t)(512 * o.gib) < o.block_tokens)
		return kvb_usage_error(&cmd, "--block-tokens %u needs --gib %.3g or more (the shortest "
				       "case has 512 x G tokens per sequence)",
				       o.block_tokens, o.block_tokens / 512.0);
	if (kvb_plot_check(&o.c))
		return 1;
	threads = o.threads ? o.threads : online_cpus();
	if (threads > 256)
		threads = 256;
	if (bench_decode(&o, threads))
		return 1;
	snprintf(title, sizeof(title),
		 "kvbench attn: CPU paged-attention decode, bf16, 32 q / 8 KV heads, head dim "
		 "128, %u-token blocks, %u threads, %.3g GiB of K/V", o.block_tokens, threads,
		 o.gib);
	return kvb_plot_write(&o.c, &(struct kvb_plot_axes){
			.title = title,
			.xlabel = "context length (tokens per sequence; batch x context constant)",
			.ylabel = "GB/s of K/V read", .logx = true }) ? 1 : 0;
}
