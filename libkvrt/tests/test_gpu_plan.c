// SPDX-License-Identifier: MIT
/*
 * The GPU host planning (src/gpu/gpu_plan.h), executed on the CPU: every plan
 * the planner makes is run task by task in float64 with the semantics the
 * kernels implement (kvrt_gpu_abi.h: a task's keys, its causal and window
 * mask, unnormalised partials merged by max-rescaling), and the result is
 * compared with a direct float64 attention.  So a plan that drops a key,
 * counts one twice, splits off a block boundary or merges wrongly fails
 * here, before any GPU runs it.  Also the registration pieces
 * (src/gpu/gpu_register.h).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_plan.h"
#include "gpu/gpu_register.h"
#include "../../selftests/tap.h"

#define XORSHIFT_SEED 0x9e3779b97f4a7c15ULL
#include "xorshift.h"

static double frand(void)
{
	return (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1;
}

/* ---- registration pieces ---- */

TEST(reg_pieces)
{
	const uint64_t G = 1ULL << 30, M = 1ULL << 20;
	uint64_t sizes[128];
	int iter;

	CHECK_EQ(gpu_reg_pieces(0, 2 * M, 64 * G, sizes), 0);
	CHECK_EQ(gpu_reg_pieces(5 * M, 2 * M, 64 * G, sizes), 1);
	CHECK_EQ(sizes[0], 5 * M);
	CHECK_EQ(gpu_reg_pieces(64 * G, 2 * M, 64 * G, sizes), 1);
	CHECK_EQ(gpu_reg_pieces(64 * G + 2 * M, 2 * M, 64 * G, sizes), 2);
	CHECK_EQ(sizes[0], 64 * G);
	CHECK_EQ(sizes[1], 2 * M);
	/* A block size that does not divide 64 GiB: pieces end on blocks. */
	CHECK_EQ(gpu_reg_pieces(200 * G, 3 * M, 64 * G, sizes), 4);
	CHECK_EQ(sizes[0], (64 * G) / (3 * M) * (3 * M));
	for (iter = 0; iter < 2000; iter++) {
		uint64_t unit = 1 + rnd() % 5000, max = unit * (1 + rnd() % 7) + rnd() % unit;
		uint64_t bytes = rnd() % (max * 20), sum = 0;
		uint32_t n = gpu_reg_pieces(bytes, unit, max, NULL), i;

		REQUIRE(n < 128);
		CHECK_EQ(gpu_reg_pieces(bytes, unit, max, sizes), n);
		for (i = 0; i < n; i++) {
			CHECK(sizes[i] > 0 && sizes[i] <= max);
			if (i + 1 < n)
				CHECK_EQ(sizes[i] % unit, 0);
			sum += sizes[i];
		}
		CHECK_EQ(sum, bytes);
	}
}

/* ---- plans executed in float64 ---- */

struct batch {
	struct gpu_plan_shape s;
	uint32_t num_seqs;
	int32_t *seq_lens, *q_indptr;	/* q_indptr NULL: decode */
	uint32_t head_dim;
	double **k, **v;		/* per sequence: [pos][kv_head][d] */
	double *q;			/* [rows][num_q_heads][d] */
	uint32_t rows;
	double cap;			/* soft-cap, 0: none */
};

static int32_t row_pos(const struct batch *b, uint32_t seq, int32_t row)
{
	if (!b->q_indptr)
		return b->seq_lens[seq] - 1;
	return b->seq_lens[seq] - (b->q_indptr[seq + 1] - row);
}

static double logit(const struct batch *b, uint32_t seq, int32_t row, uint32_t qh, int32_t p)
{
	uint32_t kvh = qh / (b->s.num_q_heads / b->s.num_kv_heads), d;
	const double *q = b->q + ((size_t)row * b->s.num_q_heads + qh) * b->head_dim;
	const double *k = b->k[seq] + ((size_t)p * b->s.num_kv_heads + kvh) * b->head_dim;
	double x = 0;

	for (d = 0; d < b->head_dim; d++)
		x += q[d] * k[d];
	x /= sqrt((double)b->head_dim);
	return b->cap > 0 ? b->cap * tanh(x / b->cap) : x;
}

static bool visible(const struct batch *b, int32_t pos, int32_t p)
{
	return p <= pos && (b->s.window_left < 0 || p >= pos - b->s.window_left);
}

/* Softmax state over keys [lo, hi) of one (row, head): max, sum, o. */
static void attend(const struct batch *b, uint32_t seq, int32_t row, uint32_t qh, int32_t lo,
		   int32_t hi, double *m, double *l, double *o)
{
	uint32_t kvh = qh / (b->s.num_q_heads / b->s.num_kv_heads), d;
	int32_t pos = row_pos(b, seq, row), p;

	*m = -INFINITY;
	*l = 0;
	memset(o, 0, b->head_dim * sizeof(*o));
	for (p = lo; p < hi; p++)
		if (visible(b, pos, p) && logit(b, seq, row, qh, p) > *m)
			*m = logit(b, seq, row, qh, p);
	for (p = lo; p < hi; p++) {
		const double *v = b->v[seq] + ((size_t)p * b->s.num_kv_heads + kvh) * b->head_dim;
		double w;

		if (!visible(b, pos, p))
			continue;
		w = exp(logit(b, seq, row, qh, p) - *m);
		*l += w;
		for (d = 0; d < b->head_dim; d++)
			o[d] += w * v[d];
	}
}

static uint32_t seq_of_row(const struct batch *b, int32_t row)
{
	uint32_t s;

	if (!b->q_indptr)
		return (uint32_t)row;
	for (s = 0; s < b->num_seqs; s++)
		if (row < b->q_indptr[s + 1])
			return s;
	return UINT32_MAX;
}

/*
 * Run plan o as the kernels would; compare with attend() over all keys.
 * Every (row, head) must be written exactly once, by a task or a merge.
 */
static void execute_and_compare(const struct batch *b, const struct gpu_plan_out *o)
{
	uint32_t H = b->s.num_q_heads, D = b->head_dim, w, i, h, d;
	double *out = calloc((size_t)b->rows * H * D, sizeof(double));
	double *po = calloc((size_t)o->partial_cap * KVRT_GK_MAX_GROUP * D, sizeof(double));
	double *pml = calloc((size_t)o->partial_cap * KVRT_GK_MAX_GROUP * 2, sizeof(double));
	int *writes = calloc((size_t)b->rows * H, sizeof(int));
	double *ref = malloc(D * sizeof(double)), m, l, worst = 0;
	int32_t r;

	REQUIRE(out && po && pml && writes && ref);
	for (w = 0; w < o->num_work; w++) {
		const struct kvrt_gk_work *t = &o->work[w];

		CHECK(t->num_q_heads >= 1 && t->num_q_heads <= KVRT_GK_MAX_GROUP);
		CHECK((uint32_t)t->q_head0 / (H / b->s.num_kv_heads) == (uint32_t)t->kv_head);
		CHECK((uint32_t)(t->q_head0 + t->num_q_heads - 1) / (H / b->s.num_kv_heads) ==
		      (uint32_t)t->kv_head);
		for (r = t->q_row0; r < t->q_row_end; r++) {
			CHECK_EQ(seq_of_row(b, r), t->seq);
			for (h = 0; h < (uint32_t)t->num_q_heads; h++) {
				double *dst;

				if (t->partial < 0) {
					dst = out + ((size_t)r * H + t->q_head0 + h) * D;
					attend(b, t->seq, r, t->q_head0 + h, t->tok_begin, t->tok_end,
					       &m, &l, dst);
					for (d = 0; d < D; d++)
						dst[d] = l > 0 ? dst[d] / l : 0;
					writes[(size_t)r * H + t->q_head0 + h]++;
					continue;
				}
				dst = po + ((size_t)t->partial * KVRT_GK_MAX_GROUP + h) * D;
				attend(b, t->seq, r, t->q_head0 + h, t->tok_begin, t->tok_end,
				       &pml[((size_t)t->partial * KVRT_GK_MAX_GROUP + h) * 2],
				       &pml[((size_t)t->partial * KVRT_GK_MAX_GROUP + h) * 2 + 1], dst);
			}
		}
	}
	for (i = 0; i < o->num_merge; i++) {
		const struct kvrt_gk_merge *mg = &o->merge[i];

		for (h = 0; h < (uint32_t)mg->num_q_heads; h++) {
			double M = -INFINITY, L = 0, *dst = out + ((size_t)mg->row * H + mg->q_head0 + h) * D;
			int32_t p;

			for (p = 0; p < mg->num_partials; p++)
				M = fmax(M, pml[((size_t)(mg->partial0 + p) * KVRT_GK_MAX_GROUP + h) * 2]);
			for (p = 0; p < mg->num_partials; p++) {
				size_t slot = (size_t)(mg->partial0 + p) * KVRT_GK_MAX_GROUP + h;
				double s = pml[slot * 2] == -INFINITY ? 0 : exp(pml[slot * 2] - M);

				L += s * pml[slot * 2 + 1];
				for (d = 0; d < D; d++)
					dst[d] += s * po[slot * D + d];
			}
			for (d = 0; d < D; d++)
				dst[d] /= L;
			writes[(size_t)mg->row * H + mg->q_head0 + h]++;
		}
	}
	for (r = 0; r < (int32_t)b->rows; r++) {
		uint32_t seq = seq_of_row(b, r);

		for (h = 0; h < H; h++) {
			CHECK_EQ(writes[(size_t)r * H + h], 1);
			attend(b, seq, r, h, 0, b->seq_lens[seq], &m, &l, ref);
			for (d = 0; d < D; d++)
				worst = fmax(worst, fabs(out[((size_t)r * H + h) * D + d] - ref[d] / l));
		}
	}
	if (worst > 1e-9)
		tap_diag("worst error %g", worst);
	CHECK(worst <= 1e-9);
	free(ref);
	free(writes);
	free(pml);
	free(po);
	free(out);
}

static void batch_free(struct batch *b)
{
	uint32_t s;

	for (s = 0; s < b->num_seqs; s++) {
		free(b->k[s]);
		free(b->v[s]);
	}
	free(b->k);
	free(b->v);
	free(b->q);
	free(b->seq_lens);
	free(b->q_indptr);
}

/* Random K/V/q for the batch's lengths (q_indptr set for prefill). */
static void batch_fill(struct batch *b)
{
	uint32_t s;
	size_t i, n;

	b->k = calloc(b->num_seqs, sizeof(*b->k));
	b->v = calloc(b->num_seqs, sizeof(*b->v));
	for (s = 0; s < b->num_seqs; s++) {
		n = (size_t)b->seq_lens[s] * b->s.num_kv_heads * b->head_dim;
		b->k[s] = malloc(n * sizeof(double));
		b->v[s] = malloc(n * sizeof(double));
		for (i = 0; i < n; i++) {
			b->k[s][i] = frand();
			b->v[s][i] = frand();
		}
	}
	b->rows = b->q_indptr ? (uint32_t)b->q_indptr[b->num_seqs] : b->num_seqs;
	n = (size_t)b->rows * b->s.num_q_heads * b->head_dim;
	b->q = malloc(n * sizeof(double));
	for (i = 0; i < n; i++)
		b->q[i] = 2 * frand();
}

static void plan_case(uint32_t num_seqs, uint32_t max_len, uint32_t nq, uint32_t nkv,
		      uint32_t bt, int32_t window, uint32_t sms, bool prefill, double cap)
{
	struct batch b = { 0 };
	struct gpu_plan_out o = { 0 };
	uint32_t s;
	int ret;

	b.s = (struct gpu_plan_shape){ nq, nkv, bt, window, sms, 0 };
	b.num_seqs = num_seqs;
	b.head_dim = 8;
	b.cap = cap;
	b.seq_lens = malloc(num_seqs * sizeof(int32_t));
	for (s = 0; s < num_seqs; s++)
		b.seq_lens[s] = 1 + (int32_t)(rnd() % max_len);
	if (num_seqs > 1)
		b.seq_lens[0] = (int32_t)bt;	/* a block boundary */
	if (prefill) {
		b.q_indptr = malloc((num_seqs + 1) * sizeof(int32_t));
		b.q_indptr[0] = 0;
		for (s = 0; s < num_seqs; s++)
			b.q_indptr[s + 1] = b.q_indptr[s] +
					    (int32_t)(rnd() % ((uint64_t)b.seq_lens[s] + 1));
	}
	batch_fill(&b);
	o.work_cap = 100000;
	o.merge_cap = 10000;
	o.partial_cap = 100000;
	o.work = calloc(o.work_cap, sizeof(*o.work));
	o.merge = calloc(o.merge_cap, sizeof(*o.merge));
	if (prefill)
		ret = gpu_plan_prefill(&b.s, num_seqs, b.q_indptr, b.seq_lens, &o);
	else
		ret = gpu_plan_decode(&b.s, num_seqs, b.seq_lens, &o);
	CHECK_EQ(ret, 0);
	if (!ret) {
		uint32_t w;

		/* Interior cuts of a split fall on block boundaries. */
		for (w = 0; w < o.num_work; w++)
			if (o.work[w].partial >= 0 && o.work[w].tok_end < b.seq_lens[o.work[w].seq])
				CHECK_EQ(o.work[w].tok_end % (int32_t)bt, 0);
		execute_and_compare(&b, &o);
	}
	free(o.work);
	free(o.merge);
	batch_free(&b);
}

TEST(decode_plans_match_float64)
{
	static const uint32_t bts[] = { 1, 16, 17, 128 };
	int i;

	for (i = 0; i < 60; i++) {
		uint32_t nkv = 1 + rnd() % 3, group = (uint32_t[]){ 1, 4, 8, 12, 32 }[rnd() % 5];
		int32_t window = rnd() % 3 ? -1 : (int32_t)(rnd() % 300);

		plan_case(1 + rnd() % 6, 1 + rnd() % 3000, nkv * group, nkv, bts[rnd() % 4], window,
			  1 + rnd() % 16, false, rnd() % 2 ? 0 : 5.0);
	}
}

TEST(prefill_plans_match_float64)
{
	int i;

	for (i = 0; i < 30; i++) {
		uint32_t nkv = 1 + rnd() % 2, group = (uint32_t[]){ 1, 4, 8, 12 }[rnd() % 4];
		int32_t window = rnd() % 3 ? -1 : (int32_t)(rnd() % 40);

		plan_case(1 + rnd() % 4, 1 + rnd() % 90, nkv * group, nkv, 1 + rnd() % 20, window,
			  4, true, 0);
	}
}

static uint32_t decode_splits(uint32_t num_seqs, int32_t len, uint32_t nq, uint32_t nkv,
			      uint32_t sms, uint32_t *chunk, uint32_t *work)
{
	struct gpu_plan_shape s = { nq, nkv, 16, -1, sms, 0 };
	struct gpu_plan_out o = { 0 };
	int32_t *lens = malloc(num_seqs * sizeof(*lens));
	uint32_t i, split = UINT32_MAX;

	for (i = 0; i < num_seqs; i++)
		lens[i] = len;
	o.work_cap = 1 << 20;
	o.merge_cap = 1 << 16;
	o.partial_cap = 3 * sms * KVRT_PLAN_CTAS_PER_SM;	/* as gpu_attn.c sizes it */
	o.work = calloc(o.work_cap, sizeof(*o.work));
	o.merge = calloc(o.merge_cap, sizeof(*o.merge));
	if (!gpu_plan_decode(&s, num_seqs, lens, &o))
		split = o.num_split;
	*chunk = o.split_tokens;
	*work = o.num_work;
	free(o.work);
	free(o.merge);
	free(lens);
	return split;
}

/* The planner's choices on an H100's 132 SMs, GQA 32/8. */
TEST(split_policy)
{
	uint32_t chunk, work;

	/* Batch 1 x 32k: split until the 396 resident CTAs are covered. */
	CHECK_EQ(decode_splits(1, 32768, 32, 8, 132, &chunk, &work), 8);
	CHECK_EQ(chunk % 16, 0);
	CHECK(work >= 132 * KVRT_PLAN_CTAS_PER_SM * 9 / 10);
	CHECK(work <= 3 * 132 * KVRT_PLAN_CTAS_PER_SM);
	/* Batch 16 x 4k: 128 tasks for 396 resident CTAs, split. */
	CHECK(decode_splits(16, 4096, 32, 8, 132, &chunk, &work) > 0);
	/* Batch 32: 256 tasks leave 140 slots idle for 4096 keys; thirds
	 * (1376 keys, 768 tasks) take two waves of a third of the time each. */
	CHECK_EQ(decode_splits(32, 4096, 32, 8, 132, &chunk, &work), 32 * 8);
	CHECK_EQ(chunk, 1376);
	CHECK_EQ(work, 32 * 8 * 3);
	/* Batch 48: 384 tasks, one nearly full wave: no split pays. */
	CHECK_EQ(decode_splits(48, 4096, 32, 8, 132, &chunk, &work), 0);
	CHECK_EQ(work, 48 * 8);
	/* Batch 64 x 4k: 512 tasks are two waves of 4096 keys on 396 slots;
	 * halves are three waves of 2048 (thirds would need 1536 partials,
	 * past the 1188 the workspace holds). */
	CHECK_EQ(decode_splits(64, 4096, 32, 8, 132, &chunk, &work), 64 * 8);
	CHECK_EQ(chunk, 2048);
	CHECK_EQ(work, 64 * 8 * 2);
	/* Batch 100 x 4k: 800 tasks, and halves would need 1600 partials. */
	CHECK_EQ(decode_splits(100, 4096, 32, 8, 132, &chunk, &work), 0);
	CHECK_EQ(work, 100 * 8);
	/* Batch 64 at 300 keys: pieces under the minimum split never pay. */
	CHECK_EQ(decode_splits(64, 300, 32, 8, 132, &chunk, &work), 0);
	/* Short sequences are never cut below the minimum split. */
	CHECK_EQ(decode_splits(1, KVRT_PLAN_MIN_SPLIT_TOKENS, 32, 8, 132, &chunk, &work), 0);
	CHECK_EQ(work, 8);
	/* 64 query heads per KV head: 8 slices of 8 heads. */
	decode_splits(300, 10, 64, 1, 132, &chunk, &work);
	CHECK_EQ(work, 300 * 8);
}

TEST(plan_errors)
{
	struct gpu_plan_shape s = { 32, 8, 16, -1, 132, 0 };
	struct kvrt_gk_work work[8];
	struct kvrt_gk_merge merge[2];
	struct gpu_plan_out o = { .work = work, .work_cap = 8, .merge = merge, .merge_cap = 2,
				  .partial_cap = 4 };
	int32_t lens[2] = { 5, 0 }, qi[3] = { 0, 3, 9 };

	CHECK_EQ(gpu_plan_decode(&s, 2, lens, &o), -EINVAL);	/* length 0 */
	lens[1] = 5;
	CHECK_EQ(gpu_plan_decode(&s, 2, lens, &o), -E2BIG);	/* 16 tasks > 8 */
	CHECK_EQ(gpu_plan_decode(&s, 1, lens, &o), 0);
	CHECK_EQ(o.num_work, 8);
	CHECK_EQ(gpu_plan_prefill(&s, 2, qi, lens, &o), -EINVAL);	/* 6 rows > 5 */
	qi[0] = 1;
	CHECK_EQ(gpu_plan_prefill(&s, 1, qi, lens, &o), -EINVAL);
	s.num_q_heads = 12;
	CHECK_EQ(gpu_plan_decode(&s, 1, lens, &o), -EINVAL);	/* 12 % 8 */
	s.num_q_heads = 32;
	s.sm_count = 0;
	CHECK_EQ(gpu_plan_decode(&s, 1, lens, &o), -EINVAL);
	/* Splits past the partial capacity. */
	s.sm_count = 132;
	s.num_kv_heads = 32;
	s.num_q_heads = 32;
	lens[0] = 100000;
	CHECK_EQ(gpu_plan_decode(&s, 1, lens, &o), -E2BIG);
}

int main(void)
{
	RUN(reg_pieces);
	RUN(decode_plans_match_float64);
	RUN(prefill_plans_match_float64);
	RUN(split_policy);
	RUN(plan_errors);
	return tap_done("test_gpu_plan");
}
