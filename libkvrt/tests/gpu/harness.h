/* SPDX-License-Identifier: MIT */
/*
 * harness.h: what every file of test_gpu shares (test_gpu.c has the
 * program's overview, the tolerances and main; harness.c the code): the
 * library and GPU handles, device memory, attention cases and the float64
 * reference, and the tables each topic file gives main.
 *
 *   api.c      without a GPU: probe, open, NULL handles; the comparator
 *   device.c   the handle, device memory, plan validation
 *   decode.c   decode attention       prefill.c  chunked prefill
 *   graphs.c   one plan replanned; a CUDA graph replayed after replans
 *   append.c   kvrt_gpu_append_kv     copy.c     registration and copies
 */
#ifndef KVRT_TESTS_GPU_HARNESS_H
#define KVRT_TESTS_GPU_HARNESS_H

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvrt.h"
#include "../kv_data.h"
#include "../../../selftests/tap.h"

/* A topic file's tests, in the order main runs them: GPU_TESTS(gpu_x_tests, T(a), T(b)); */
#define T(fn) { #fn, fn }
#define GPU_TESTS(table, ...)                                                                  \
	const struct tap_test table[] = { __VA_ARGS__ };                                        \
	const unsigned int nr_##table = sizeof(table) / sizeof(table[0])

extern const struct tap_test gpu_api_tests[], gpu_device_tests[], gpu_decode_tests[],
	gpu_prefill_tests[], gpu_graphs_tests[], gpu_append_tests[], gpu_copy_tests[];
extern const unsigned int nr_gpu_api_tests, nr_gpu_device_tests, nr_gpu_decode_tests,
	nr_gpu_prefill_tests, nr_gpu_graphs_tests, nr_gpu_append_tests, nr_gpu_copy_tests;
void open_and_info(void);	/* device.c: opens G, which the rest needs */
void copy_teardown(void);	/* copy.c: unregisters and closes its pools */

#define GUARD 256

#define MAX_SEQS 64

struct tcase {
	uint32_t bt, nkv, group, hd, nseq;
	enum kvrt_dtype kv_dt, q_dt, o_dt;
	int layout;
	int32_t window;
	float softcap;
	double qamp;		/* query magnitude: larger = peakier softmax */
	uint32_t lens[MAX_SEQS];	/* tokens in the cache per sequence */
	uint32_t extra[MAX_SEQS];	/* unused blocks at the end of a block list */
};

struct world {
	struct tcase tc;
	struct kvrt_layout lo;
	uint8_t *cache;
	size_t cache_bytes;
	float *scales;
	size_t nscales;
	int32_t *indptr, *indices;
	uint32_t layer;
	void *d_cache, *d_scales, *d_indptr, *d_indices;
};

/* A candidate: q rounded to rq, dequantised K/V rounded to rkv (F32: not rounded). */
struct cand {
	enum kvrt_dtype rq, rkv;
};

/* What a row's tolerance depends on. */
struct rowinfo {
	double vscale;		/* largest |v| attended */
	double qk;		/* largest sm_scale * sum_d |q_d k_d| over the keys attended */
	uint32_t nkeys;
};

/*
 * The query rows of one call: token row j belongs to sequence seq[j] and
 * sits at position pos[j]; rows are (token, q head) pairs, token-major.
 */
struct qrows {
	uint32_t ntok;
	const uint32_t *seq;
	const int64_t *pos;
	const void *q;		/* host, [ntok][nq][hd] of q_dt */
};

enum { L_BM, L_LM, L_HM, L_PAD, NR_LAYOUTS };

struct gpu_stats {
	double worst[4];	/* largest err / tol of a passing GPU case, by kv dtype */
	unsigned int matched[4][4];	/* calls per candidate: [rq][rkv] */
	unsigned int cases, splits;
};

/* Plan objects, one per head configuration: harness.c says why. */
struct gpu_plan_slot {
	uint32_t nq, nkv;
	struct kvrt_gpu_plan *p;
};

extern struct kvrt *K;
extern struct kvrt_gpu *G;
extern struct kvrt_gpu_info GI;
extern struct gpu_plan_slot plans[64];
extern unsigned int nplans;
extern int probe_ret;
extern char probe_why[512];
extern struct gpu_stats stats;
extern const enum kvrt_dtype kv_types[3], qo_types[3];

const char *cand_name(const struct cand *c, char *buf, size_t n);
struct kvrt_attn_params case_params(const struct tcase *tc, enum kvrt_attn_impl impl);
void check_outputs(const struct world *w, const struct qrows *qr, const void *cpu_out,
		   const uint8_t *gpu_out, const char *what);
void *dev_alloc(size_t n);
void *dev_dup(const void *h, size_t n);
void dev_free(void *p);
int dev_get(void *h, const void *d, size_t n);
void *dev_out(size_t obytes);
int dev_sync(void);
void fill_layout(struct kvrt_layout *lo, int kind, uint32_t layers, uint32_t heads,
		 uint32_t hd, uint32_t bt, uint32_t nblocks, enum kvrt_dtype dt);
double gpu_tol(const struct tcase *tc, const struct rowinfo *ri);
void *make_q(const struct tcase *tc, uint32_t ntok);
void pin_driver(void);
void random_case(struct tcase *tc, uint32_t max_len, uint32_t max_seqs, uint32_t max_group);
uint32_t random_len(uint32_t bt, uint32_t max_len);
void run_decode(const struct tcase *tc, const char *what, struct kvrt_gpu_plan_info *info);
void run_prefill(const struct tcase *tc, uint32_t rounds, uint32_t last_chunk,
		 const char *what);
void shuffle(uint32_t *v, uint32_t n);
void world_free(struct world *w);
int world_make(struct world *w, const struct tcase *tc);
int world_upload(struct world *w);
double worst_ratio(const struct tcase *tc, const void *out, size_t nrows, const double *ref,
		   const struct rowinfo *ri, bool gpu, size_t *where);
void *xmalloc(size_t n);

#endif /* KVRT_TESTS_GPU_HARNESS_H */
