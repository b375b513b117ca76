// SPDX-License-Identifier: GPL-2.0
/*
 * bench_gpu_attn.c: kvbench gpu-attn, paged-attention decode and chunked
 * prefill on the GPU (the prefill cases: bench_gpu_prefill.c).
 *
 *   kvbench gpu-attn [--json] [--device N] [--kv-dtype bf16|f16|fp8]
 *                    [--batches LIST] [--contexts LIST] [--prefill LIST]
 *                    [--no-prefill] [--peer-script PATH] [--no-peer]
 *                    [common options]
 *
 * Shapes: head dim 128, 32 query heads over 8 KV heads (GQA 4), 16-token
 * blocks of a layer-major (vLLM-style) cache of one layer, the blocks of
 * every sequence scattered at random over the whole cache; q and out
 * bf16; K/V bf16 by default (--kv-dtype f16: q and out f16 too; fp8: e4m3
 * with per-block scales, q and out bf16).  Batches 1, 8, 64 x contexts
 * 1024, 4096, 16384, 32768 tokens per sequence (--batches, --contexts);
 * a combination whose cache cannot be allocated on the device is skipped
 * with a note saying how much it needed.
 *
 * Per combination, after a warm-up (at least 3 calls and 20 ms), each
 * repetition runs N back-to-back kvrt_gpu_attn_decode() calls on the
 * default stream and then kvrt_gpu_sync(), N chosen so that it lasts at
 * least --rep-time seconds; the time per call is the repetition's
 * CLOCK_MONOTONIC time over N (launch cost included, as an engine without
 * CUDA graphs pays it); the median of --reps is reported.
 *
 *   decode_read_bB_ctxC value: GB/s of K/V the call must read (B x C x 8
 *                       heads x 128 x element size x K and V, plus the fp8
 *                       scales of the blocks read: the bytes counted); limit:
 *                       GB/s of kvrt_gpu_read_stream(), a kernel that only
 *                       reads, over the same number of bytes, timed as the
 *                       decode is (N back-to-back calls, then a sync; one
 *                       call over the first B x C tokens' K/V bytes of the
 *                       cache, contiguous, plus, for fp8, one over the same
 *                       count of scale bytes), between the repetitions;
 *                       ratio = value / limit.  Decode only reads K/V, so
 *                       this is its limit.  Where the bytes fit in L2 (50-60
 *                       MB on an H100/H200) both sides may be served from it.
 *   decode_bB_ctxC      value: as decode_read_bB_ctxC's; limit: the device copy
 *                       bandwidth measured between the repetitions,
 *                       kvrt_gpu_memcpy() of one --copy-mib buffer (default
 *                       1024 MiB) onto another, counting bytes read plus
 *                       bytes written (2 x size per copy) as the device's
 *                       total memory traffic; ratio = value / limit (the
 *                       ratio of earlier runs, kept to compare with them).
 *   decode_bB_ctxC_us   the same call as a cost: value: microseconds per
 *                       call; limit: the microseconds the K/V bytes take
 *                       at that copy rate; ratio = limit / value (the
 *                       same ratio as a time).
 *   plan_bB_ctxC        value: microseconds per kvrt_gpu_plan_decode() (host
 *                       planning and its synchronous upload); limit:
 *                       microseconds per decode call; ratio = value / limit,
 *                       the share of a decode step spent planning.
 *   sdpa_peer_bB_ctxC   value: this decode's GB/s; limit: PyTorch's
 *                       torch.nn.functional.scaled_dot_product_attention
 *                       on the same shapes laid out densely ([B, heads,
 *                       C, 128] bf16 on the same GPU, q length 1, GQA
 *                       through enable_gqa or repeat_interleave), timed by
 *                       bench/sdpa_peer.py with CUDA events (median of its
 *                       repetitions), K/V bytes counted as for decode;
 *                       ratio = value / limit = the speedup over SDPA.
 *                       The peer runs after the decode cases, once their
 *                       device memory is freed, as `python3 SCRIPT` (the
 *                       script: --peer-script, else bench/sdpa_peer.py in
 *                       the source tree this kvbench was built in, else
 *                       ./bench/sdpa_peer.py).  Where python3, torch or
 *                       CUDA is missing, or a shape does not fit, the peer
 *                       is reported absent with the reason, on stderr; no
 *                       line is made up.
 *
 * Chunked prefill, --prefill BxQxCTX,... (default 8x512x4096, the GPU
 * goal's case, 1x4096x4096 and 8x512x16384; --no-prefill: none): B
 * sequences of CTX tokens in the same cache, the last Q of each the new
 * chunk, causal (query r of Q sees keys 0 .. CTX - Q + r);
 * kvrt_gpu_attn_prefill() timed as decode is (the plan made once, outside
 * the timing).  Its lines come after the peer's run, which is their limit:
 *   prefill_bB_ctxC_qQ  value: TFLOP/s of the causal work done, 4 x 128 x
 *                       32 heads x the (query, visible key) pairs, B x (Q x
 *                       (C - Q) + Q x (Q + 1) / 2); limit: the SDPA peer's
 *                       best TFLOP/s on dense [B, 32, Q, 128] q and [B, 8,
 *                       C, 128] K/V, each figure counting the pairs it
 *                       computes: the flash backend forced without a mask
 *                       (all B x Q x C pairs: SDPA's flash has no
 *                       bottom-right causal mask), flash with is_causal
 *                       where Q = C (exact there), or the lower-right
 *                       CausalBias on another backend; the limit's unit
 *                       names the figure (sdpa_peer.py says more);
 *                       ratio = value / limit, the GPU goal's 0.7.
 *   prefill_bB_ctxC_qQ_us  value: microseconds per call; limit: those the
 *                       causal FLOPs take at the peer's rate; ratio = limit
 *                       / value.
 * Without the peer (--no-peer, fp8, no torch) both lines are still made,
 * their limit and ratio null ("-" in the table).  The SIMT prefill
 * (KVRT_GPU_PREFILL=simt) is not measured: libkvrt reads that variable at
 * kvrt_gpu_open(), so a second device handle would be needed, not a call
 * of the same one.
 *
 * Split-KV: libkvrt splits long sequences of small batches along the keys
 * (flash-decoding); the API has no switch to turn that off, so there is
 * no on/off comparison: the plan of every b1 case is given in a note
 * (tasks, sequences split, keys per split) instead.
 *
 * Without a usable GPU (kvrt_gpu_probe) it prints the reason on stderr
 * and exits with status 1, as kvbench does when a needed program is
 * missing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvrt.h"
#include "attn_shape.h"
#include "bench_gpu.h"
#include "data.h"
#include "child.h"
#include "report.h"

#define PEER_TIMEOUT_S 900
#define STR(x) #x
#define XSTR(x) STR(x)

static const struct kvb_opts gattn_defaults = {
	.bench = "gpu-attn", .reps = 5, .rep_time = 0.1,
};

static const char gattn_about[] =
	"GPU paged-attention decode (kvrt_gpu_attn_decode): GB/s of K/V read against\n"
	"a read-only stream of the same bytes and against the device copy bandwidth\n"
	"(bytes read + written), both measured in the same run, microseconds per call, planning cost, and PyTorch SDPA on the same shapes as\n"
	"a peer; chunked prefill (kvrt_gpu_attn_prefill): causal TFLOP/s against SDPA's\n"
	"flash backend on dense data.  bf16, head dim 128, 32 q / 8 KV heads, 16-token blocks.\n";

static const char *dtype_name(enum kvrt_dtype t)
{
	return t == KVRT_DTYPE_F16 ? "f16" : t == KVRT_DTYPE_BF16 ? "bf16" :
	       t == KVRT_DTYPE_FP8_E4M3 ? "fp8" : "f32";
}

/* "1,8,64" into v[]; 0 or -1. */
static int parse_list(const char *s, uint32_t *v, unsigned int *n, unsigned long max)
{
	char buf[256], *tok, *save = NULL;
	unsigned long x;

	*n = 0;
	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*n >= MAX_LIST || topt_parse_ulong(tok, 1, max, &x))
			return -1;
		v[(*n)++] = (uint32_t)x;
	}
	return *n ? 0 : -1;
}

/* --kv-dtype: bf16, f16 or fp8 into an enum kvrt_dtype. */
static int parse_dtype(const char *v, void *dst)
{
	enum kvrt_dtype *t = dst;

	if (!strcmp(v, "bf16"))
		*t = KVRT_DTYPE_BF16;
	else if (!strcmp(v, "f16"))
		*t = KVRT_DTYPE_F16;
	else if (!strcmp(v, "fp8"))
		*t = KVRT_DTYPE_FP8_E4M3;
	else
		return -1;
	return 0;
}

static int parse_batches(const char *v, void *dst)
{
	struct gattn_opts *o = dst;

	return parse_list(v, o->batches, &o->nb, 4096);
}

static int parse_contexts(const char *v, void *dst)
{
	struct gattn_opts *o = dst;

	return parse_list(v, o->contexts, &o->nc, 1U << 22);
}

/* ---- device helpers ----------------------------------------------------------- */

int report_gpu_error(const struct gctx *x, const char *what, int ret)
{
	fprintf(stderr, "kvbench %s: %s: %s\n", x->o->c.bench, what, strerror(-ret));
	return ret;
}

/* Fill dev[0, bytes) from a host pattern of chunk bytes, doubling on the device. */
static int dev_fill(struct gctx *x, uint8_t *dev, size_t bytes, const void *pattern, size_t chunk)
{
	size_t done;
	int ret;

	if (chunk > bytes)
		chunk = bytes;
	ret = kvrt_gpu_memcpy(x->g, dev, pattern, chunk);
	for (done = chunk; !ret && done < bytes; done *= 2) {
		size_t n = done < bytes - done ? done : bytes - done;

		ret = kvrt_gpu_memcpy(x->g, dev + done, dev, n);
	}
	return ret;
}

/* n device-to-device copies of copy_bytes, each followed by a sync. */
static int run_copy(void *ctx, unsigned long n)
{
	struct gctx *x = ctx;
	int ret = 0;

	while (n-- && !ret) {
		ret = kvrt_gpu_memcpy(x->g, x->copy_b, x->copy_a, x->copy_bytes);
		if (!ret)
			ret = kvrt_gpu_sync(x->g, NULL);
	}
	return ret;
}

/*
 * Seconds per device-to-device copy of copy_bytes, whole copies for rep_time.
 * cuMemcpy returns before a device-to-device copy ends: the clock is read
 * after a sync, else it times the queueing (3.5x the H200's bandwidth).
 */
static int time_copy(struct gctx *x, double rep_time, double *sec)
{
	struct kvb_side s = { .run = run_copy, .ctx = x, .units = 1 };
	int ret = kvrt_gpu_sync(x->g, NULL);

	return ret ? ret : kvb_time_calls(&s, rep_time, sec);
}

/* ---- one decode combination ---------------------------------------------------------- */

struct dcase {
	uint32_t batch, ctx;
	struct kvrt_layout *layout;
	struct kvrt_gpu_plan *plan;
	struct kvrt_attn_params params;
	void *cache, *scales;
	void *d_indptr, *d_indices, *d_lens, *d_q, *d_out;
	int32_t *lens;
	uint64_t kv_bytes;	/* read per call */
	uint64_t scale_bytes;	/* of those, fp8 scales */
};

static void dcase_free(struct gctx *x, struct dcase *c)
{
	kvrt_gpu_free(x->g, c->d_indptr);
	kvrt_gpu_free(x->g, c->d_indices);
	kvrt_gpu_free(x->g, c->d_lens);
	kvrt_gpu_free(x->g, c->d_q);
	kvrt_gpu_free(x->g, c->d_out);
	free(c->lens);
	c->d_indptr = c->d_indices = c->d_lens = c->d_q = c->d_out = NULL;
	c->lens = NULL;
}

void *dev_upload(struct gctx *x, const void *h, size_t n, int *ret)
{
	void *d = NULL;

	if (*ret)
		return NULL;
	*ret = kvrt_gpu_alloc(x->g, n, &d);
	if (!*ret)
		*ret = kvrt_gpu_memcpy(x->g, d, h, n);
	return d;
}

static int dcase_init(struct gctx *x, struct dcase *c, uint64_t seed)
{
	uint32_t per_seq = (c->ctx + BLOCK - 1) / BLOCK, nblk = c->layout->num_blocks, i;
	size_t qn = (size_t)c->batch * Q_HEADS * HEAD_DIM;
	size_t esz = c->params.q_dtype == KVRT_DTYPE_F32 ? 4 : 2;
	int32_t *indptr = malloc(sizeof(int32_t) * (c->batch + 1));
	int32_t *indices = malloc(sizeof(int32_t) * nblk);
	uint16_t *q = malloc(qn * 2);
	int ret = 0;

	c->lens = malloc(sizeof(int32_t) * c->batch);
	if (!indptr || !indices || !q || !c->lens) {
		ret = -ENOMEM;
		goto out;
	}
	/* a random permutation of every block; sequences take the first ones */
	kvb_shuffle((uint32_t *)indices, nblk, &seed);
	for (i = 0; i <= c->batch; i++)
		indptr[i] = (int32_t)(i * per_seq);
	for (i = 0; i < c->batch; i++)
		c->lens[i] = (int32_t)c->ctx;
	for (i = 0; i < qn; i++)	/* +-[0.5, 2) in bf16 and in f16 */
		q[i] = c->params.q_dtype == KVRT_DTYPE_BF16 ?
		       (uint16_t)((kvb_xorshift(&seed) & 0x807f) | 0x3f00) :
		       (uint16_t)((kvb_xorshift(&seed) & 0x83ff) | 0x3800);
	c->d_indptr = dev_upload(x, indptr, sizeof(int32_t) * (c->batch + 1), &ret);
	c->d_indices = dev_upload(x, indices, sizeof(int32_t) * (size_t)c->batch * per_seq, &ret);
	c->d_lens = dev_upload(x, c->lens, sizeof(int32_t) * c->batch, &ret);
	c->d_q = dev_upload(x, q, qn * esz, &ret);
	if (!ret)
		ret = kvrt_gpu_alloc(x->g, qn * esz, &c->d_out);
out:
	free(indptr);
	free(indices);
	free(q);
	return ret;
}

static int dcase_plan(struct dcase *c)
{
	return kvrt_gpu_plan_decode(c->plan, &c->params, c->layout, c->batch, c->lens);
}

static int dcase_call(struct gctx *x, struct dcase *c)
{
	struct kvrt_kv_cache kv = { c->layout, c->cache, c->scales, 0 };
	struct kvrt_block_table bt = { c->batch, c->d_indptr, c->d_indices, c->d_lens };

	(void)x;
	return kvrt_gpu_attn_decode(c->plan, c->d_q, &kv, &bt, c->d_out, NULL);
}

/* n calls then a sync: seconds per call. */
static int time_calls(struct gctx *x, struct dcase *c, unsigned long n, double *sec)
{
	double t0 = kvb_now_s();
	unsigned long i;
	int ret = 0;

	for (i = 0; i < n && !ret; i++)
		ret = dcase_call(x, c);
	if (!ret)
		ret = kvrt_gpu_sync(x->g, NULL);
	*sec = (kvb_now_s() - t0) / (double)n;
	return ret;
}

/*
 * n read streams over as many bytes as a decode call reads (the K/V bytes
 * from the cache's start, the scale bytes from the scales'), then a sync:
 * seconds per stream.
 */
static int time_reads(struct gctx *x, struct dcase *c, unsigned long n, double *sec)
{
	uint64_t kv = c->kv_bytes - c->scale_bytes;
	double t0 = kvb_now_s();
	unsigned long i;
	int ret = 0;

	for (i = 0; i < n && !ret; i++) {
		ret = kvrt_gpu_read_stream(x->g, c->cache, kv, NULL, NULL);
		if (!ret && c->scale_bytes)
			ret = kvrt_gpu_read_stream(x->g, c->scales, c->scale_bytes, NULL, NULL);
	}
	if (!ret)
		ret = kvrt_gpu_sync(x->g, NULL);
	*sec = (kvb_now_s() - t0) / (double)n;
	return ret;
}

/* ---- the SDPA peer ----------------------------------------------------------------------- */

/* The number after "key": in a JSON line, or NAN. */
static double json_num(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(line, pat);
	if (!p)
		return NAN;
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	return strtod(p, NULL);
}

/* The string after "key": into buf (escapes kept as they are); false if absent. */
static bool json_str(const char *line, const char *key, char *buf, size_t len)
{
	char pat[64];
	const char *p, *e;
	size_t n;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(line, pat);
	if (!p)
		return false;
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	if (*p != '"')
		return false;
	p++;
	for (e = p; *e && !(*e == '"' && e[-1] != '\\'); e++)
		;
	n = (size_t)(e - p) < len - 1 ? (size_t)(e - p) : len - 1;
	memcpy(buf, p, n);
	buf[n] = 0;
	return true;
}

/* The peer script: explicit, else the source tree's, else ./bench/. */
static bool find_peer(const struct gattn_opts *o, char *path, size_t len, char *tried, size_t tlen)
{
	char self[PATH_MAX], *slash;
	ssize_t n;

	if (o->peer_script) {
		snprintf(path, len, "%s", o->peer_script);
		snprintf(tried, tlen, "%s", o->peer_script);
		return !access(path, R_OK);
	}
	tried[0] = 0;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			if (snprintf(path, len, "%s/../../bench/sdpa_peer.py", self) < (int)len &&
			    snprintf(tried, tlen, "%s, ", path) > 0 && !access(path, R_OK))
				return true;
		}
	}
	snprintf(path, len, "bench/sdpa_peer.py");
	snprintf(tried + strlen(tried), tlen - strlen(tried), "./bench/sdpa_peer.py");
	return !access(path, R_OK);
}

/* One case's JSON line from the peer into r. */
static void peer_line(const char *line, struct peer_result *r)
{
	const char *key = r->q ? "tflops" : "median_ms";
	double v = json_num(line, key);

	r->have = true;
	if (r->q) {
		r->tflops = v;
		if (!json_str(line, "best", r->best, sizeof(r->best)))
			snprintf(r->best, sizeof(r->best), "?");
	} else {
		r->median_ms = v;
	}
	if (!json_str(line, "error", r->error, sizeof(r->error)) && !(v > 0))
		snprintf(r->error, sizeof(r->error), "no %s", key);
}

/*
 * Run the peer for every combination; results into res[n] (each with a
 * time or an error).  Returns 0, or -1 with the reason in why when the
 * peer as a whole is absent.
 */
static int run_peer(const struct gattn_opts *o, struct peer_result *res, unsigned int n, char *why,
		    size_t wlen)
{
	char script[PATH_MAX], tried[2 * PATH_MAX + 64], *args[2 * MAX_PEER + 32];
	static char cases[MAX_PEER][40];
	char dev[16], reps[16], out[1 << 16], q_heads[8], kv_heads[8], head_dim[8];
	unsigned int i, na = 0;
	bool timed_out;
	int fd, status;
	pid_t pid;

	if (!find_peer(o, script, sizeof(script), tried, sizeof(tried))) {
		snprintf(why, wlen, "no sdpa_peer.py (looked at %s; --peer-script names one)", tried);
		return -1;
	}
	snprintf(dev, sizeof(dev), "%d", o->device);
	snprintf(q_heads, sizeof(q_heads), "%d", Q_HEADS);
	snprintf(kv_heads, sizeof(kv_heads), "%d", KV_HEADS);
	snprintf(head_dim, sizeof(head_dim), "%d", HEAD_DIM);
	snprintf(reps, sizeof(reps), "%u", o->c.reps < 5 ? 20 : 4 * o->c.reps);
	args[na++] = "python3";
	args[na++] = script;
	args[na++] = "--device";
	args[na++] = dev;
	args[na++] = "--iters";
	args[na++] = reps;
	args[na++] = "--q-heads";
	args[na++] = q_heads;
	args[na++] = "--kv-heads";
	args[na++] = kv_heads;
	args[na++] = "--head-dim";
	args[na++] = head_dim;
	args[na++] = "--dtype";
	args[na++] = o->kv_dtype == KVRT_DTYPE_F16 ? "f16" : "bf16";
	for (i = 0; i < n && i < MAX_PEER; i++) {
		if (res[i].q)
			snprintf(cases[i], sizeof(cases[i]), "%ux%ux%u", res[i].batch, res[i].q,
				 res[i].ctx);
		else
			snprintf(cases[i], sizeof(cases[i]), "%ux%u", res[i].batch, res[i].ctx);
		args[na++] = res[i].q ? "--prefill-case" : "--case";
		args[na++] = cases[i];
	}
	args[na] = NULL;
	pid = kvb_child_start("python3", args, KVB_CHILD_SEARCH, &fd);
	if (pid < 0) {
		snprintf(why, wlen, "cannot start python3: %s", strerror((int)-pid));
		return -1;
	}
	kvb_child_read(fd, pid, out, sizeof(out), PEER_TIMEOUT_S, &timed_out);
	kvb_child_wait(pid, &status);
	if (timed_out) {
		snprintf(why, wlen, "the peer ran past %d s and was killed", PEER_TIMEOUT_S);
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !out[0]) {
		snprintf(why, wlen, "cannot run python3 (not on $PATH?)");
		return -1;
	}
	/* one JSON object per line: a whole-run error, or one per case */
	{
		char *line, *save = NULL, c[32];

		for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			if (!json_str(line, "case", c, sizeof(c))) {
				if (json_str(line, "error", why, wlen))
					return -1;
				continue;
			}
			for (i = 0; i < n; i++)
				if (!strcmp(c, cases[i]))
					peer_line(line, &res[i]);
		}
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		for (i = 0; i < n && res[i].have; i++)
			;
		if (i < n || !n) {
			if (snprintf(why, wlen, "python3 %s exited with %s %d", script,
				     WIFEXITED(status) ? "status" : "signal",
				     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)) < 0)
				why[0] = 0;
			return -1;
		}
	}
	return 0;
}

/* ---- the run ----------------------------------------------------------------------------- */

/* The GPU: 0, or bench()'s exit status with nothing left open. */
static int open_device(struct grun *g)
{
	const struct gattn_opts *o = g->x.o;
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	struct gctx *x = &g->x;
	char why[512];
	int ret;

	ret = kvrt_gpu_probe(why, sizeof(why));
	if (ret) {
		fprintf(stderr, "kvbench gpu-attn: no usable GPU: %s\n", why);
		return 1;
	}
	ret = kvrt_open(&x->k, &oo);
	if (ret)
		return report_gpu_error(x, "kvrt_open", ret), 1;
	ret = kvrt_gpu_open(x->k, o->device, &x->g);
	if (ret) {
		fprintf(stderr, "kvbench gpu-attn: kvrt_gpu_open(%d): %s\n", o->device, strerror(-ret));
		kvrt_close(x->k);
		return 1;
	}
	kvrt_gpu_info(x->g, &x->info);
	kvb_note(&o->c, "%s (compute %d.%d, %u SMs, %.1f GiB, driver %d); K/V %s", x->info.name,
		 x->info.cc_major, x->info.cc_minor, x->info.sm_count,
		 x->info.total_mem / 1073741824.0, x->info.driver_version, dtype_name(o->kv_dtype));
	return 0;
}

/* The limit's buffers first: they are needed whatever else fits. */
static int alloc_copy_buffers(struct grun *g)
{
	static uint8_t pat[1 << 20];
	struct gctx *x = &g->x;
	unsigned int i;
	int ret;

	x->copy_bytes = x->o->copy_mib << 20;
	ret = kvrt_gpu_alloc(x->g, x->copy_bytes, &x->copy_a);
	if (!ret)
		ret = kvrt_gpu_alloc(x->g, x->copy_bytes, &x->copy_b);
	if (ret)
		return report_gpu_error(x, "device copy buffers", ret);
	for (i = 0; i < sizeof(pat); i++)
		pat[i] = (uint8_t)kvb_xorshift(&g->seed);
	ret = dev_fill(x, x->copy_a, x->copy_bytes, pat, sizeof(pat));
	if (ret)
		report_gpu_error(x, "filling the copy buffer", ret);
	return ret;
}

/* One cache for all: as many tokens as the largest combination, or what fits. */
static int alloc_cache(struct grun *g)
{
	const struct gattn_opts *o = g->x.o;
	size_t esz = kvrt_dtype_size(o->kv_dtype);
	uint64_t max_tokens = 0;
	unsigned int i, j;
	int ret = 0;

	g->tok_bytes = 2ULL * KV_HEADS * HEAD_DIM * esz;
	for (i = 0; i < o->nb; i++)
		for (j = 0; j < o->nc; j++) {
			uint64_t t = (uint64_t)o->batches[i] * ((o->contexts[j] + BLOCK - 1) / BLOCK * BLOCK);

			if (t > max_tokens)
				max_tokens = t;
		}
	if (prefill_cache_tokens(o) > max_tokens)
		max_tokens = prefill_cache_tokens(o);
	for (g->cap_tokens = max_tokens; g->cap_tokens >= BLOCK; g->cap_tokens /= 2) {
		uint32_t nblk = (uint32_t)(g->cap_tokens / BLOCK);

		ret = kvrt_gpu_alloc(g->x.g, g->cap_tokens * g->tok_bytes, &g->cache);
		if (!ret && o->kv_dtype == KVRT_DTYPE_FP8_E4M3)
			ret = kvrt_gpu_alloc(g->x.g, sizeof(float) * 2 * KV_HEADS * (size_t)nblk,
					     &g->scales);
		if (!ret)
			break;
		kvrt_gpu_free(g->x.g, g->cache);
		g->cache = NULL;
		if (ret != -ENOMEM)
			return report_gpu_error(&g->x, "the K/V cache", ret);
	}
	if (!g->cache) {
		fprintf(stderr, "kvbench gpu-attn: no K/V cache fits on the device\n");
		return -ENOMEM;
	}
	if (g->cap_tokens < max_tokens)
		kvb_note(&o->c, "%.1f GiB of K/V did not fit: cache of %.1f GiB; larger combinations "
			 "are skipped", max_tokens * g->tok_bytes / 1073741824.0,
			 g->cap_tokens * g->tok_bytes / 1073741824.0);
	ret = kvrt_layout_init(&g->layout, KVRT_LAYOUT_LAYER_MAJOR, 1, KV_HEADS, HEAD_DIM, BLOCK,
			       (uint32_t)(g->cap_tokens / BLOCK), o->kv_dtype);
	if (ret)
		report_gpu_error(&g->x, "kvrt_layout_init", ret);
	return ret;
}

/* Random finite K/V (and fp8 scales) over the whole cache. */
static int fill_cache(struct grun *g)
{
	const struct gattn_opts *o = g->x.o;
	size_t n = 64 << 20, k;
	uint8_t *pat;
	int ret;

	kvb_progress(&o->c, 0, 0, "filling the cache");
	pat = malloc(n);
	if (!pat)
		return -ENOMEM;
	if (o->kv_dtype == KVRT_DTYPE_FP8_E4M3) {
		for (k = 0; k < n; k++) {	/* finite e4m3 codes */
			uint8_t b = (uint8_t)kvb_xorshift(&g->seed);

			pat[k] = (b & 0x7f) == 0x7f ? b ^ 1 : b;
		}
	} else {
		uint16_t *h = (uint16_t *)pat;

		for (k = 0; k < n / 2; k++)
			h[k] = o->kv_dtype == KVRT_DTYPE_BF16 ?
			       (uint16_t)((kvb_xorshift(&g->seed) & 0x807f) | 0x3f00) :
			       (uint16_t)((kvb_xorshift(&g->seed) & 0x83ff) | 0x3800);
	}
	ret = dev_fill(&g->x, g->cache, g->cap_tokens * g->tok_bytes, pat, n);
	if (!ret && g->scales) {
		float *s = (float *)pat;

		for (k = 0; k < n / 4; k++)
			s[k] = 1.0f / 64 + (float)(kvb_xorshift(&g->seed) % 64) / 4096;
		ret = dev_fill(&g->x, g->scales,
			       sizeof(float) * 2 * KV_HEADS * (g->cap_tokens / BLOCK), pat, n);
	}
	free(pat);
	if (ret)
		report_gpu_error(&g->x, "filling the cache", ret);
	return ret;
}

/* One plan for every case: sized for the largest batch. */
static int create_plan(struct grun *g)
{
	const struct gattn_opts *o = g->x.o;
	uint32_t maxb = 0;
	unsigned int i;
	int ret;

	for (i = 0; i < o->nb; i++)
		if (o->batches[i] > maxb)
			maxb = o->batches[i];
	ret = kvrt_gpu_plan_create(g->x.g, maxb, maxb, &g->plan);
	if (ret)
		report_gpu_error(&g->x, "kvrt_gpu_plan_create", ret);
	return ret;
}

/*
 * Time one case: seconds per decode call and per plan (medians of --reps)
 * and the copy limit in GB/s, its copy timed before each repetition's calls.
 */
static int time_case(struct grun *g, struct dcase *dc, double *tcall, double *tplan,
		     double *limit, double *tread)
{
	const struct kvb_opts *c = &g->x.o->c;
	double vs[KVB_MAX_REPS], ls[KVB_MAX_REPS], ps[KVB_MAX_REPS], rs[KVB_MAX_REPS], t;
	unsigned long n = 0, nr;
	unsigned int r;
	int ret;

	/* warm-up: at least 3 calls and 20 ms; then N per repetition */
	{
		double t0 = kvb_now_s();

		do {
			ret = time_calls(&g->x, dc, 1, &t);
			n++;
		} while (!ret && (n < 3 || kvb_now_s() - t0 < 0.02));
	}
	if (!ret)
		ret = time_calls(&g->x, dc, 10, &t);
	n = t > 0 ? (unsigned long)ceil(c->rep_time / t) : 1000;
	if (n < 10)
		n = 10;
	if (!ret)	/* the read's warm-up and its calls per repetition */
		ret = time_reads(&g->x, dc, 10, &t);
	nr = t > 0 ? (unsigned long)ceil(c->rep_time / t) : 1000;
	if (nr < 10)
		nr = 10;
	for (r = 0; r < c->reps && !ret; r++) {
		ret = time_copy(&g->x, c->rep_time, &ls[r]);
		if (!ret)
			ret = time_reads(&g->x, dc, nr, &rs[r]);
		if (!ret)
			ret = time_calls(&g->x, dc, n, &vs[r]);
	}
	/* planning: as many calls as fit in a quarter of a repetition */
	for (r = 0; r < c->reps && !ret; r++) {
		double t0 = kvb_now_s();
		unsigned long k = 0;

		do {
			ret = dcase_plan(dc);
			k++;
		} while (!ret && kvb_now_s() - t0 < c->rep_time / 4);
		ps[r] = (kvb_now_s() - t0) / (double)k;
	}
	if (ret)
		return ret;
	*tcall = kvb_median(vs, c->reps);
	*tplan = kvb_median(ps, c->reps);
	*tread = kvb_median(rs, c->reps);
	/* limit: bytes read + written per second */
	*limit = 2.0 * (double)g->x.copy_bytes / kvb_median(ls, c->reps) / 1e9;
	return 0;
}

/* A timed case's four lines (rate against the read and the copy, cost,
 * planning); kept for the peer. */
static void report_case(struct grun *g, const struct dcase *dc, double tcall, double tplan,
			double l, double tread)
{
	char name[64], unit[96];
	double v = (double)dc->kv_bytes / tcall / 1e9;

	snprintf(name, sizeof(name), "decode_read_b%u_ctx%u%s", dc->batch, dc->ctx, g->sfx);
	kvb_report(&g->rate, name, v, "GB/s K/V read (ratio = value/limit)",
		   (double)dc->kv_bytes / tread / 1e9, "GB/s read-only stream, same bytes");

	snprintf(name, sizeof(name), "decode_b%u_ctx%u%s", dc->batch, dc->ctx, g->sfx);
	kvb_report(&g->rate, name, v, "GB/s K/V read (ratio = value/limit)", l,
		   "GB/s device copy, read+write bytes");
	snprintf(name, sizeof(name), "decode_b%u_ctx%u%s_us", dc->batch, dc->ctx, g->sfx);
	kvb_report(&g->cost, name, tcall * 1e6, "us per decode call (ratio = limit/value)",
		   (double)dc->kv_bytes / (l * 1e9) * 1e6, "us for the K/V bytes at the copy rate");
	snprintf(name, sizeof(name), "plan_b%u_ctx%u%s", dc->batch, dc->ctx, g->sfx);
	snprintf(unit, sizeof(unit), "us per kvrt_gpu_plan_decode (ratio = value/limit)");
	kvb_report(&g->rate, name, tplan * 1e6, unit, tcall * 1e6, "us per decode call");
	g->dec_us[g->npeer] = tcall * 1e6;
	g->peer[g->npeer++] = (struct peer_result){ .batch = dc->batch, .ctx = dc->ctx };
}

/* batches[i] x contexts[j]: skipped when the cache is too small, else timed
 * and reported.  An error is reported here and ends the run. */
static int bench_case(struct grun *g, unsigned int i, unsigned int j)
{
	const struct gattn_opts *o = g->x.o;
	const struct kvb_opts *c = &o->c;
	struct dcase dc = {
		.batch = o->batches[i], .ctx = o->contexts[j] / BLOCK * BLOCK,
		.layout = &g->layout, .plan = g->plan, .cache = g->cache, .scales = g->scales,
	};
	struct kvrt_gpu_plan_info pi;
	double tcall, tplan, l, tread;
	char name[64];
	int ret;

	if (dc.ctx < BLOCK)
		dc.ctx = BLOCK;
	snprintf(name, sizeof(name), "decode_b%u_ctx%u%s", dc.batch, dc.ctx, g->sfx);
	kvb_progress(c, ++g->step, g->steps, name);
	if ((uint64_t)dc.batch * dc.ctx > g->cap_tokens) {
		kvb_note(c, "%s skipped: needs %.1f GiB of K/V, the device cache holds "
			 "%.1f GiB", name, (double)dc.batch * dc.ctx * g->tok_bytes /
			 1073741824.0, g->cap_tokens * g->tok_bytes / 1073741824.0);
		return 0;
	}
	dc.params = (struct kvrt_attn_params){
		.num_q_heads = Q_HEADS, .sm_scale = 0.08838834764831845f,
		.window_left = -1,
		.q_dtype = o->kv_dtype == KVRT_DTYPE_F16 ? KVRT_DTYPE_F16 : KVRT_DTYPE_BF16,
		.o_dtype = o->kv_dtype == KVRT_DTYPE_F16 ? KVRT_DTYPE_F16 : KVRT_DTYPE_BF16,
	};
	dc.kv_bytes = (uint64_t)dc.batch * dc.ctx * g->tok_bytes;
	if (g->scales)	/* the scales of every block read, K and V */
		dc.scale_bytes = (uint64_t)dc.batch * (dc.ctx / BLOCK) * 2 * KV_HEADS * 4;
	dc.kv_bytes += dc.scale_bytes;
	ret = dcase_init(&g->x, &dc, 1000 + 31 * i + j);
	if (!ret)
		ret = dcase_plan(&dc);
	if (!ret) {
		if (dc.batch == 1 && !kvrt_gpu_plan_info(g->plan, &pi))
			kvb_note(c, "%s: plan of %u tasks, %u sequence/head groups split along "
				 "the keys, %u keys per split, grid %u", name, pi.num_work,
				 pi.num_split, pi.split_tokens, pi.grid);
		ret = time_case(g, &dc, &tcall, &tplan, &l, &tread);
	}
	if (ret) {
		report_gpu_error(&g->x, name, ret);
		dcase_free(&g->x, &dc);
		return ret;
	}
	report_case(g, &dc, tcall, tplan, l, tread);
	dcase_free(&g->x, &dc);
	return 0;
}

/* Everything bench() allocated on the device; again is harmless. */
static void free_device(struct grun *g)
{
	kvrt_gpu_plan_destroy(g->plan);
	g->plan = NULL;
	kvrt_gpu_free(g->x.g, g->cache);
	kvrt_gpu_free(g->x.g, g->scales);
	kvrt_gpu_free(g->x.g, g->x.copy_a);
	kvrt_gpu_free(g->x.g, g->x.copy_b);
	g->cache = g->scales = g->x.copy_a = g->x.copy_b = NULL;
}

/* Whether the SDPA peer ran; notes say why not. */
static bool peer_ran(struct grun *g)
{
	const struct gattn_opts *o = g->x.o;
	const struct kvb_opts *c = &o->c;
	char why[512];

	if (o->kv_dtype == KVRT_DTYPE_FP8_E4M3) {
		kvb_note(c, "SDPA peer: not run for fp8 K/V (SDPA has no fp8 K/V path to compare)");
		return false;
	}
	if (o->no_peer) {
		kvb_note(c, "SDPA peer: not run (--no-peer)");
		return false;
	}
	kvb_progress(c, 0, 0, "running the SDPA peer (python3)");
	if (run_peer(o, g->peer, g->npeer, why, sizeof(why))) {
		kvb_progress_end();
		kvb_note(c, "SDPA peer absent: %s", why);
		return false;
	}
	kvb_progress_end();
	return true;
}

/*
 * The SDPA peer over the cases run: a line each, or notes saying why not.
 * Prefill's lines are made here whether the peer ran or not: the peer is
 * their limit.
 */
static void compare_with_peer(struct grun *g)
{
	const struct kvb_opts *c = &g->x.o->c;
	bool ran = peer_ran(g);
	char name[64];
	unsigned int i;

	for (i = 0; i < g->npeer; i++) {
		const struct peer_result *p = &g->peer[i];
		uint64_t kvb = (uint64_t)p->batch * p->ctx * g->tok_bytes;
		bool ok = ran && p->have && !p->error[0];

		if (ran && !ok)
			kvb_note(c, "SDPA peer %s%ux%u%s%u absent: %s", p->q ? "prefill " : "",
				 p->batch, p->q ? p->q : p->ctx, p->q ? "x" : "", p->ctx,
				 p->have ? p->error : "the peer printed no result for it");
		if (p->q) {
			report_prefill(g, i, ok ? p : NULL);
			continue;
		}
		if (!ok || !(p->median_ms > 0))
			continue;
		snprintf(name, sizeof(name), "sdpa_peer_b%u_ctx%u%s", p->batch, p->ctx, g->sfx);
		kvb_report(&g->rate, name, (double)kvb / (g->dec_us[i] * 1e-6) / 1e9,
			   "GB/s K/V read, kvrt paged decode (ratio = value/limit = speedup)",
			   (double)kvb / (p->median_ms * 1e-3) / 1e9, "GB/s K/V read, torch SDPA dense");
	}
}

static int bench(const struct gattn_opts *o)
{
	struct grun g = {
		.x = { .o = o },
		.rate = { .o = &o->c, .ratio = KVB_RATE, .name_w = 30, .num_w = 10, .unit_w = 44,
			  .ratio_w = 7 },
		.seed = 0x9e3779b97f4a7c15ULL,
		.sfx = o->kv_dtype == KVRT_DTYPE_BF16 ? "" :
		       o->kv_dtype == KVRT_DTYPE_F16 ? "_f16" : "_fp8",
		.steps = o->nb * o->nc + o->np,
	};
	unsigned int i, j;
	int ret;

	g.cost = g.rate;
	g.cost.ratio = KVB_COST;
	if (open_device(&g))
		return 1;
	ret = alloc_copy_buffers(&g);
	if (!ret)
		ret = alloc_cache(&g);
	if (!ret)
		ret = fill_cache(&g);
	if (!ret)
		ret = create_plan(&g);
	if (!ret) {
		kvb_report_header(&g.rate, "value");
		for (i = 0; i < o->nb && !ret; i++)
			for (j = 0; j < o->nc && !ret; j++)
				ret = bench_case(&g, i, j);
		for (i = 0; i < o->np && !ret; i++)
			ret = bench_prefill_case(&g, i);
		kvb_progress_end();
		free_device(&g);	/* before the peer needs the memory */
		if (!ret && g.npeer)
			compare_with_peer(&g);
	}
	free_device(&g);
	kvrt_gpu_close(g.x.g);
	kvrt_close(g.x.k);
	return ret ? 1 : 0;
}

/* argv[0] is "gpu-attn". */
int cmd_gpu_attn(int argc, char **argv)
{
	struct gattn_opts o = {
		.c = gattn_defaults, .kv_dtype = KVRT_DTYPE_BF16, .copy_mib = 1024,
		.batches = { 1, 8, 64 }, .nb = 3, .contexts = { 1024, 4096, 16384, 32768 }, .nc = 4,
		.prefill = { { 8, 512, 4096 }, { 1, 4096, 4096 }, { 8, 512, 16384 } }, .np = 3,
	};
	bool no_prefill = false;
	char why[128];
	int ret;
	const struct topt opts[] = {
		{ .name = "--device", .arg = "N", .kind = TOPT_INT, .dst = &o.device, .min = 0,
		  .max = 1023, .want = "an ordinal", .help = "GPU ordinal (default 0)" },
		{ .name = "--kv-dtype", .arg = "T", .kind = TOPT_FUNC, .dst = &o.kv_dtype,
		  .parse = parse_dtype, .want = "bf16, f16 or fp8",
		  .help = "bf16 (default), f16 or fp8 (e4m3 with block scales)" },
		{ .name = "--batches", .arg = "LIST", .kind = TOPT_FUNC, .dst = &o,
		  .parse = parse_batches,
		  .want = "a list of 1 to " XSTR(MAX_LIST) " numbers from 1 to 4096",
		  .help = "comma-separated batch sizes (default 1,8,64)" },
		{ .name = "--contexts", .arg = "LIST", .kind = TOPT_FUNC, .dst = &o,
		  .parse = parse_contexts,
		  .want = "a list of 1 to " XSTR(MAX_LIST) " numbers from 1 to 4194304",
		  .help = "tokens per sequence (default 1024,4096,16384,32768)" },
		{ .name = "--prefill", .arg = "LIST", .kind = TOPT_FUNC, .dst = &o,
		  .parse = parse_prefill,
		  .want = "a list of 1 to " XSTR(MAX_PREFILL) " BxQxCTX items (e.g. 8x512x4096)",
		  .help = "chunked prefill cases: B sequences, their last Q of CTX\n"
			  "tokens new (default 8x512x4096,1x4096x4096,8x512x16384)" },
		{ .name = "--no-prefill", .kind = TOPT_FLAG, .dst = &no_prefill,
		  .help = "no prefill cases" },
		{ .name = "--copy-mib", .arg = "M", .kind = TOPT_ULONG, .dst = &o.copy_mib,
		  .min = 16, .max = 65536, .want = "a number from 16 to 65536",
		  .help = "device copy buffers for the limit (default 1024)" },
		{ .name = "--peer-script", .arg = "P", .kind = TOPT_STR, .dst = &o.peer_script,
		  .help = "the SDPA peer script (default: bench/sdpa_peer.py of the\n"
			  "source tree, else ./bench/sdpa_peer.py)" },
		{ .name = "--no-peer", .kind = TOPT_FLAG, .dst = &o.no_peer,
		  .help = "do not run the peer" },
		{ NULL },
	};
	const struct kvb_cmd cmd = { .defaults = &gattn_defaults, .about = gattn_about,
				     .opts = opts, .epilogue = KVB_NO_GPU_NOTE };

	if (!kvb_parse_args(&cmd, &o.c, argc, argv, NULL, &ret))
		return ret;
	if (o.nb * o.nc > 64)
		return kvb_usage_error(&cmd, "at most 64 batch x context combinations");
	if (prefill_check(&o, why, sizeof(why)))
		return kvb_usage_error(&cmd, "%s", why);
	if (no_prefill)
		o.np = 0;
	return bench(&o);
}
