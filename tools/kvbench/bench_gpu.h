/* SPDX-License-Identifier: GPL-2.0 */
/*
 * bench_gpu.h: what kvbench gpu-attn's decode (bench_gpu_attn.c) and
 * prefill (bench_gpu_prefill.c) cases share: the options, the device and
 * the cache set up once, and the SDPA peer's results.
 */
#ifndef KVBENCH_BENCH_GPU_H
#define KVBENCH_BENCH_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "kvrt.h"
#include "report.h"

#define BLOCK 16
#define MAX_LIST 16
#define MAX_PREFILL 8
#define MAX_PEER (MAX_LIST * MAX_LIST + MAX_PREFILL)

/* A chunked prefill: batch sequences, each with its last q of ctx tokens new. */
struct prefill_shape {
	uint32_t batch, q, ctx;
};

struct gattn_opts {
	struct kvb_opts c;
	int device;
	enum kvrt_dtype kv_dtype;
	uint32_t batches[MAX_LIST], contexts[MAX_LIST];
	unsigned int nb, nc;
	struct prefill_shape prefill[MAX_PREFILL];
	unsigned int np;	/* 0: --no-prefill */
	unsigned long copy_mib;
	const char *peer_script;
	bool no_peer;
};

struct gctx {
	const struct gattn_opts *o;
	struct kvrt *k;
	struct kvrt_gpu *g;
	struct kvrt_gpu_info info;
	void *copy_a, *copy_b;
	size_t copy_bytes;
};

/* A case the peer times: decode (q 0) or prefill. */
struct peer_result {
	uint32_t batch, ctx, q;
	double median_ms;	/* decode */
	double tflops;		/* prefill: the peer's best */
	char best[48];		/* prefill: which of its figures that is */
	char error[200];
	bool have;
};

/* What bench() sets up once, and the cases it ran (for the peer). */
struct grun {
	struct gctx x;
	struct kvb_report rate, cost;
	struct kvrt_layout layout;
	struct kvrt_gpu_plan *plan;
	void *cache, *scales;
	uint64_t cap_tokens, tok_bytes;	/* the cache's tokens; K+V bytes of one */
	uint64_t seed;			/* of the copy buffer's and the cache's bytes */
	const char *sfx;		/* the K/V type's suffix of the case names */
	unsigned int step, steps;
	struct peer_result peer[MAX_PEER];
	double dec_us[MAX_PEER];	/* us per libkvrt call of peer[i]'s case */
	unsigned int npeer;
};

int report_gpu_error(const struct gctx *x, const char *what, int ret);
void *dev_upload(struct gctx *x, const void *h, size_t n, int *ret);

/* bench_gpu_prefill.c */
int parse_prefill(const char *v, void *dst);
const char *prefill_check(const struct gattn_opts *o, char *buf, size_t len);
uint64_t prefill_cache_tokens(const struct gattn_opts *o);
double prefill_flops(uint32_t batch, uint32_t q, uint32_t ctx);
int bench_prefill_case(struct grun *g, unsigned int i);
void report_prefill(struct grun *g, unsigned int i, const struct peer_result *peer);

#endif
