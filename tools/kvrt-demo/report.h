/* SPDX-License-Identifier: GPL-2.0 */
/*
 * report.h: the progress line while a pass runs, and the closing table.
 */
#ifndef KVRT_DEMO_REPORT_H
#define KVRT_DEMO_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "devgpu.h"
#include "scheduler.h"
#include "workload.h"

struct progress {
	int enabled;
	int tty;		/* update one line in place */
	double start, last;	/* wall time of the start, of the last update */
	int drawn;		/* a line is on the terminal */
};

void progress_init(struct progress *p, int enabled);
void progress_update(struct progress *p, const char *label, const struct pass_result *r,
		     uint32_t done, uint64_t step, int final);

double wall_seconds(void);

/* p-th percentile (0..100) of n values, by sorting a copy; 0 for n == 0. */
double percentile(const double *v, uint32_t n, double p);

/* A latency over requests, in ms; n == 0: no request counted. */
struct latency {
	double mean, p50, p90;
	uint32_t n;
};

/*
 * Time per output token, as a decoding request sees it: from its first
 * token to its last, over the tokens after the first (requests with two
 * tokens or more).  It includes the prefill work the scheduler put in the
 * same steps, as a user's stream does; the table's decode speed.
 */
struct latency report_tpot(const struct pass_result *r);

/* The closing table of one or two passes (ref may be NULL). */
void report_table(FILE *f, const struct pass_result *cached, const struct pass_result *ref);

/* What the JSON report says besides the passes' figures. */
struct json_info {
	const char *version, *backend, *backend_info, *space;
	int space_created, space_destroyed, space_persistent;
	const struct model_config *cfg;
	uint64_t params;
	const struct workload *wl;
	uint32_t n_multi, block_tokens, threads;
	const char *kv_dtype, *decode_kernel;
	const char *equivalence;	/* pass, fail, skipped */
	uint32_t eq_requests;
	uint64_t eq_tokens, eq_same_logits;
	const char *eq_why;
	uint64_t tokens_digest;
	const char *device;		/* cpu or gpu */
	const struct devgpu_stats *gpu;	/* NULL on the CPU */
	const char *gpu_name;
	int gpu_check;
	int reference_on_gpu;
};

/* One JSON object with everything the table shows. */
void report_json(FILE *f, const struct json_info *ji, const struct pass_result *cached,
		 const struct pass_result *ref);

/* s as a JSON string, escaped. */
void report_json_str(FILE *f, const char *s);

/* Human sizes: "12.3 MiB". */
const char *fmt_bytes(char *buf, size_t len, uint64_t bytes);

#endif
