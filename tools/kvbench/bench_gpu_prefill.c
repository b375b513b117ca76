// SPDX-License-Identifier: GPL-2.0
/*
 * bench_gpu_prefill.c: kvbench gpu-attn's chunked prefill cases
 * (--prefill BxQxCTX,...), on the cache, shapes and K/V type of the decode
 * cases (bench_gpu_attn.c, whose header comment says what is reported).
 *
 * B sequences of CTX tokens each, the last Q of them the new chunk: query
 * r (0-based) sits at position CTX - Q + r and sees keys 0 .. CTX - Q + r,
 * its own included.  One kvrt_gpu_plan_prefill() per case, then
 * kvrt_gpu_attn_prefill() timed as decode is: a warm-up, then per
 * repetition N back-to-back calls and a sync; the median of --reps.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "attn_shape.h"
#include "bench_gpu.h"
#include "data.h"
#include "report.h"

#define MAX_Q_TOKENS (1U << 20)

/* "8x512x4096,1x4096x4096" into o->prefill[]; Q <= CTX is prefill_check()'s. */
int parse_prefill(const char *v, void *dst)
{
	struct gattn_opts *o = dst;
	char buf[256], *tok, *save = NULL, *end;
	unsigned long x[3];
	int k;

	o->np = 0;
	if (strlen(v) >= sizeof(buf))
		return -1;
	strcpy(buf, v);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (o->np >= MAX_PREFILL)
			return -1;
		for (k = 0, end = tok; k < 3; k++, end++) {
			if (*end < '0' || *end > '9')
				return -1;
			errno = 0;
			x[k] = strtoul(end, &end, 10);
			if (errno || !x[k] || x[k] > (1UL << 22) || *end != (k < 2 ? 'x' : 0))
				return -1;
		}
		if (x[0] > 4096)
			return -1;
		o->prefill[o->np++] = (struct prefill_shape){ x[0], x[1], x[2] };
	}
	return o->np ? 0 : -1;
}

/* NULL, or what is wrong with the --prefill cases (in buf). */
const char *prefill_check(const struct gattn_opts *o, char *buf, size_t len)
{
	unsigned int i;

	for (i = 0; i < o->np; i++) {
		const struct prefill_shape *p = &o->prefill[i];

		if (p->q > p->ctx) {
			snprintf(buf, len, "--prefill %ux%ux%u: Q (%u new tokens) is more than CTX "
				 "(%u tokens in all)", p->batch, p->q, p->ctx, p->q, p->ctx);
			return buf;
		}
		if ((uint64_t)p->batch * p->q > MAX_Q_TOKENS) {
			snprintf(buf, len, "--prefill %ux%ux%u: B x Q is more than %u query tokens",
				 p->batch, p->q, p->ctx, MAX_Q_TOKENS);
			return buf;
		}
	}
	return NULL;
}

/* Cache tokens the largest prefill case needs (whole blocks). */
uint64_t prefill_cache_tokens(const struct gattn_opts *o)
{
	uint64_t max = 0, t;
	unsigned int i;

	for (i = 0; i < o->np; i++) {
		t = (uint64_t)o->prefill[i].batch *
		    ((o->prefill[i].ctx + BLOCK - 1) / BLOCK * BLOCK);
		if (t > max)
			max = t;
	}
	return max;
}

/*
 * The FLOPs of causal chunked prefill: per query head and (query, visible
 * key) pair, q.k and p.v, a multiply and an add per element each: 4 x
 * head_dim.  Query r of Q sees CTX - Q + r + 1 keys.
 */
double prefill_flops(uint32_t batch, uint32_t q, uint32_t ctx)
{
	double pairs = (double)q * (ctx - q) + (double)q * (q + 1) / 2;

	return 4.0 * HEAD_DIM * Q_HEADS * batch * pairs;
}

/* ---- one case -------------------------------------------------------------------------- */

struct pcase {
	struct prefill_shape s;
	struct kvrt_gpu_plan *plan;
	struct kvrt_attn_params params;
	struct kvrt_kv_cache kv;
	struct kvrt_block_table bt;
	int32_t *lens, *q_indptr;	/* host */
	void *d_indptr, *d_indices, *d_lens, *d_qindptr, *d_q, *d_out;
};

static void pcase_free(struct gctx *x, struct pcase *c)
{
	kvrt_gpu_plan_destroy(c->plan);
	kvrt_gpu_free(x->g, c->d_indptr);
	kvrt_gpu_free(x->g, c->d_indices);
	kvrt_gpu_free(x->g, c->d_lens);
	kvrt_gpu_free(x->g, c->d_qindptr);
	kvrt_gpu_free(x->g, c->d_q);
	kvrt_gpu_free(x->g, c->d_out);
	free(c->lens);
	free(c->q_indptr);
}

/* Random q in +-[0.5, 2), as decode's. */
static uint16_t *random_q(size_t n, bool bf16, uint64_t *seed)
{
	uint16_t *q = malloc(n * 2);
	size_t i;

	for (i = 0; q && i < n; i++)
		q[i] = bf16 ? (uint16_t)((kvb_xorshift(seed) & 0x807f) | 0x3f00) :
		       (uint16_t)((kvb_xorshift(seed) & 0x83ff) | 0x3800);
	return q;
}

/* Block table (blocks scattered over the whole cache), q, out and the plan. */
static int pcase_init(struct grun *g, struct pcase *c, uint64_t seed)
{
	uint32_t per_seq = (c->s.ctx + BLOCK - 1) / BLOCK, nblk = g->layout.num_blocks, i;
	uint32_t qtok = c->s.batch * c->s.q;
	size_t qn = (size_t)qtok * Q_HEADS * HEAD_DIM;
	int32_t *indptr = malloc(sizeof(int32_t) * (c->s.batch + 1));
	int32_t *indices = malloc(sizeof(int32_t) * nblk);
	uint16_t *q = random_q(qn, c->params.q_dtype == KVRT_DTYPE_BF16, &seed);
	int ret = 0;

	c->lens = malloc(sizeof(int32_t) * c->s.batch);
	c->q_indptr = malloc(sizeof(int32_t) * (c->s.batch + 1));
	if (!indptr || !indices || !q || !c->lens || !c->q_indptr) {
		ret = -ENOMEM;
		goto out;
	}
	kvb_shuffle((uint32_t *)indices, nblk, &seed);
	for (i = 0; i <= c->s.batch; i++) {
		indptr[i] = (int32_t)(i * per_seq);
		c->q_indptr[i] = (int32_t)(i * c->s.q);
		if (i < c->s.batch)
			c->lens[i] = (int32_t)c->s.ctx;
	}
	c->d_indptr = dev_upload(&g->x, indptr, sizeof(int32_t) * (c->s.batch + 1), &ret);
	c->d_indices = dev_upload(&g->x, indices, sizeof(int32_t) * c->s.batch * per_seq, &ret);
	c->d_lens = dev_upload(&g->x, c->lens, sizeof(int32_t) * c->s.batch, &ret);
	c->d_qindptr = dev_upload(&g->x, c->q_indptr, sizeof(int32_t) * (c->s.batch + 1), &ret);
	c->d_q = dev_upload(&g->x, q, qn * 2, &ret);
	if (!ret)
		ret = kvrt_gpu_alloc(g->x.g, qn * 2, &c->d_out);
	if (!ret)
		ret = kvrt_gpu_plan_create(g->x.g, c->s.batch, qtok, &c->plan);
	if (!ret)
		ret = kvrt_gpu_plan_prefill(c->plan, &c->params, &g->layout, c->s.batch,
					    c->q_indptr, c->lens);
	c->kv = (struct kvrt_kv_cache){ &g->layout, g->cache, g->scales, 0 };
	c->bt = (struct kvrt_block_table){ c->s.batch, c->d_indptr, c->d_indices, c->d_lens };
out:
	free(indptr);
	free(indices);
	free(q);
	return ret;
}

/* n calls then a sync: seconds per call. */
static int pcase_calls(struct grun *g, struct pcase *c, unsigned long n, double *sec)
{
	double t0 = kvb_now_s();
	unsigned long i;
	int ret = 0;

	for (i = 0; i < n && !ret; i++)
		ret = kvrt_gpu_attn_prefill(c->plan, c->d_q, c->d_qindptr, &c->kv, &c->bt,
					    c->d_out, NULL);
	if (!ret)
		ret = kvrt_gpu_sync(g->x.g, NULL);
	*sec = (kvb_now_s() - t0) / (double)n;
	return ret;
}

/* Seconds per call: warm-up (3 calls and 20 ms), then the median of --reps of N calls. */
static int pcase_time(struct grun *g, struct pcase *c, double *tcall)
{
	const struct kvb_opts *o = &g->x.o->c;
	double ts[KVB_MAX_REPS], t = 0, t0 = kvb_now_s();
	unsigned long n = 0;
	unsigned int r;
	int ret;

	do {
		ret = pcase_calls(g, c, 1, &t);
		n++;
	} while (!ret && (n < 3 || kvb_now_s() - t0 < 0.02));
	n = t > 0 ? (unsigned long)ceil(o->rep_time / t) : 100;
	if (n < 3)
		n = 3;
	for (r = 0; r < o->reps && !ret; r++)
		ret = pcase_calls(g, c, n, &ts[r]);
	if (!ret)
		*tcall = kvb_median(ts, o->reps);
	return ret;
}

/* o->prefill[i]: timed, kept for the peer (its lines come with the peer's). */
int bench_prefill_case(struct grun *g, unsigned int i)
{
	const struct gattn_opts *o = g->x.o;
	struct pcase c = { .s = o->prefill[i] };
	struct kvrt_gpu_plan_info pi;
	double tcall = 0;
	char name[64];
	int ret;

	snprintf(name, sizeof(name), "prefill_b%u_ctx%u_q%u%s", c.s.batch, c.s.ctx, c.s.q, g->sfx);
	kvb_progress(&o->c, ++g->step, g->steps, name);
	if ((uint64_t)c.s.batch * ((c.s.ctx + BLOCK - 1) / BLOCK * BLOCK) > g->cap_tokens) {
		kvb_note(&o->c, "%s skipped: the device cache holds %.1f GiB, too little", name,
			 g->cap_tokens * g->tok_bytes / 1073741824.0);
		return 0;
	}
	c.params = (struct kvrt_attn_params){
		.num_q_heads = Q_HEADS, .sm_scale = 0.08838834764831845f, .window_left = -1,
		.q_dtype = o->kv_dtype == KVRT_DTYPE_F16 ? KVRT_DTYPE_F16 : KVRT_DTYPE_BF16,
		.o_dtype = o->kv_dtype == KVRT_DTYPE_F16 ? KVRT_DTYPE_F16 : KVRT_DTYPE_BF16,
	};
	ret = pcase_init(g, &c, 2000 + 17 * i);
	if (!ret && !kvrt_gpu_plan_info(c.plan, &pi))
		kvb_note(&o->c, "%s: plan of %u tasks, grid %u", name, pi.num_work, pi.grid);
	if (!ret)
		ret = pcase_time(g, &c, &tcall);
	if (ret)
		report_gpu_error(&g->x, name, ret);
	else if (g->npeer < MAX_PEER) {
		g->dec_us[g->npeer] = tcall * 1e6;
		g->peer[g->npeer++] = (struct peer_result){ .batch = c.s.batch, .ctx = c.s.ctx,
							    .q = c.s.q };
	}
	pcase_free(&g->x, &c);
	return ret;
}

/*
 * g->peer[i]'s two lines: TFLOP/s against the peer's, and us per call
 * against the us the same FLOPs take at the peer's rate; without a peer
 * (NULL) the limits are absent (kvb_report: NAN).
 */
void report_prefill(struct grun *g, unsigned int i, const struct peer_result *peer)
{
	const struct peer_result *p = &g->peer[i];
	double flops = prefill_flops(p->batch, p->q, p->ctx), us = g->dec_us[i];
	double lim = peer && peer->tflops > 0 ? peer->tflops : NAN;
	char name[64], unit[96];
	size_t k;

	snprintf(unit, sizeof(unit), "TFLOP/s torch SDPA %s, dense", peer ? peer->best : "");
	for (k = 0; unit[k]; k++)	/* the peer's name goes into JSON unescaped */
		if (unit[k] == '"' || unit[k] == '\\' || (unsigned char)unit[k] < ' ')
			unit[k] = '_';
	if (isnan(lim))
		snprintf(unit, sizeof(unit), "SDPA peer absent");
	snprintf(name, sizeof(name), "prefill_b%u_ctx%u_q%u%s", p->batch, p->ctx, p->q, g->sfx);
	kvb_report(&g->rate, name, flops / (us * 1e-6) / 1e12,
		   "TFLOP/s causal attention (ratio = value/limit)", lim, unit);
	snprintf(name, sizeof(name), "prefill_b%u_ctx%u_q%u%s_us", p->batch, p->ctx, p->q,
		 g->sfx);
	kvb_report(&g->cost, name, us, "us per prefill call (ratio = limit/value)",
		   flops / (lim * 1e12) * 1e6,
		   isnan(lim) ? "SDPA peer absent" : "us for the FLOPs at the SDPA peer's rate");
}
