// SPDX-License-Identifier: GPL-2.0
/*
 * branch.c: parallel sampling (--n) and beam search (--beam) on libkvrt's
 * sequence tables; see branch.h.  The prompts are the system prompt plus
 * the first user message of the first BRANCH_PROMPTS conversations, all
 * served together; every step feeds each live continuation's last token.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "branch.h"
#include "report.h"

enum { B_OK = 0, B_MISMATCH = 1, B_USAGE = 2, B_RUNTIME = 3 };

/* Beam scores of a recomputation that is not bit-exact may move by rounding only. */
#define BEAM_SCORE_TOL 1e-3

void branch_defaults(struct branch_opts *b)
{
	memset(b, 0, sizeof(*b));
	b->temperature = -1;
	b->sample_seed = ~0UL;
}

const char *branch_check(struct branch_opts *b)
{
	int temp_given = b->temperature >= 0, seed_given = b->sample_seed <= UINT32_MAX;

	if (b->n && b->beam)
		return "--n and --beam are two modes: pass one of them";
	if ((temp_given || seed_given) && !b->n)
		return b->beam ? "--temperature and --sample-seed are for --n (beam search does "
				 "not sample): drop them or pass --n N instead of --beam" :
				 "--temperature and --sample-seed need --n N (parallel sampling)";
	if (!temp_given)
		b->temperature = 1.0;
	if (!seed_given)
		b->sample_seed = 1;
	return NULL;
}

/* One continuation: a sample or a beam. */
struct cont {
	uint32_t prompt;
	uint64_t seq;		/* its sequence in the table; 0 none */
	uint32_t *tok;		/* [gen] generated tokens */
	uint64_t *hash;		/* [gen] FNV-1a of the logits row each token came from */
	double score;		/* beam: summed log-probability */
	uint64_t seed;		/* --n: its generator's first state */
	uint64_t rng;
};

/* Tokens to feed one sequence; row: where its last row's logits go, or NULL. */
struct item {
	uint64_t id;
	const uint32_t *tok;
	uint32_t n, done;
	float *row;
};

struct bstats {
	uint64_t forwards, forks, freed, tokens, callbacks;
	uint32_t peak_used, peak_shared, end_shared;
	uint64_t peak_refs;
};

struct ctx {
	const struct branch_env *env;
	struct kvrt_seqs *seqs;
	struct kvrt_block_array arr;
	uint32_t V, bt, max_tok, max_seqs, blk_cap;
	uint32_t *tok, *out_rows, *out_item;
	int32_t *pos, *q_indptr, *blk_indptr, *blk_indices, *seq_lens;
	uint32_t idx_cap;
	int64_t *slots;
	uint64_t *ids;
	float *logits;
	double *scratch;	/* [V] */
	struct bstats st;
	char err[300];
};

static uint32_t div_up(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static double next_unit(uint64_t *s)	/* [0, 1) */
{
	*s += 0x9E3779B97F4A7C15ULL;
	return (double)(mix64(*s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t hash_row(const float *row, uint32_t n)
{
	return fnv64_words(row, (size_t)n * sizeof(float), 0xcbf29ce484222325ULL);
}

static int fail(struct ctx *c, int ret, const char *what)
{
	snprintf(c->err, sizeof(c->err), "%s: %s", what, strerror(-ret));
	return ret;
}

/*
 * A token from row at temperature temp (0: the argmax), drawn by inverse
 * transform from the continuation's own generator: the same row and state
 * give the same token.
 */
static uint32_t sample(struct ctx *c, const float *row, double temp, uint64_t *rng)
{
	uint32_t i, best = argmax(row, c->V);
	double sum = 0, u, acc = 0;

	if (temp == 0)
		return best;
	for (i = 0; i < c->V; i++) {
		c->scratch[i] = exp(((double)row[i] - row[best]) / temp);
		sum += c->scratch[i];
	}
	u = next_unit(rng) * sum;
	for (i = 0; i < c->V; i++) {
		acc += c->scratch[i];
		if (u < acc)
			return i;
	}
	return best;	/* u rounded up to sum */
}

/* lp[i] = log softmax(row)[i], in double, in one fixed order. */
static void log_softmax(const float *row, uint32_t V, double *lp)
{
	uint32_t i, best = argmax(row, V);
	double sum = 0, lse;

	for (i = 0; i < V; i++)
		sum += exp((double)row[i] - row[best]);
	lse = row[best] + log(sum);
	for (i = 0; i < V; i++)
		lp[i] = (double)row[i] - lse;
}

/* The w largest of lp[0..V) into top[], best first; ties: the lower id. */
static void top_n(const double *lp, uint32_t V, uint32_t w, uint32_t *top)
{
	uint32_t i, j, n = 0;

	for (i = 0; i < V; i++) {
		if (n == w && !(lp[i] > lp[top[w - 1]]))
			continue;
		j = n < w ? n++ : w - 1;
		for (; j > 0 && lp[i] > lp[top[j - 1]]; j--)
			top[j] = top[j - 1];
		top[j] = i;
	}
}

/* copy-on-write of the table: the whole block, on the cache's device */
static int cow_copy(void *arg, uint32_t src, uint32_t dst, uint32_t ntokens)
{
	struct ctx *c = arg;
	struct kvrt_block_pair p = { .src = src, .dst = dst };
	int ret;

	(void)ntokens;
	c->st.callbacks++;
	if (!c->env->gpu)
		return kvrt_copy_blocks(c->env->k, &c->arr, &c->arr, &p, 1, 0, NULL);
	ret = kvrt_gpu_copy_blocks(c->env->gpu->gpu, &c->arr, &c->arr, &p, 1,
				   KVRT_GPU_COPY_AUTO, NULL);
	return ret ? ret : kvrt_gpu_sync(c->env->gpu->gpu, NULL);
}

static int table_open(struct ctx *c)
{
	struct kvrt_seqs_opts so = { .nr_blocks = c->env->dev->layout.num_blocks,
				     .block_tokens = c->bt, .copy_block = cow_copy,
				     .copy_arg = c };
	int ret = kvrt_seqs_create(&c->seqs, &so);

	return ret ? fail(c, ret, "kvrt_seqs_create") : 0;
}

static void note_stats(struct ctx *c)
{
	struct kvrt_seqs_stats s;

	if (kvrt_seqs_stats(c->seqs, &s))
		return;
	if (s.used_blocks > c->st.peak_used)
		c->st.peak_used = s.used_blocks;
	if (s.block_refs > c->st.peak_refs)
		c->st.peak_refs = s.block_refs;
	if (s.shared_blocks > c->st.peak_shared)
		c->st.peak_shared = s.shared_blocks;
}

/*
 * Feed items[0..n) to the model: as many forward passes as the token
 * budget, the sequence limit and (for the GPU's table) the cache's block
 * count need, each item's tokens appended to its sequence right before
 * the pass that computes them.  decoding: every item is one token of a
 * sequence that has a history (the fwd_batch's n_decode rows).
 */
static int forward_items(struct ctx *c, struct item *it, uint32_t n, int decoding)
{
	const struct branch_env *e = c->env;
	uint32_t cur = 0, V = c->V;

	while (cur < n) {
		uint32_t T = 0, S = 0, nidx = 0, nout = 0, i;
		struct fwd_batch b;
		int ret;

		while (cur < n && S < c->max_seqs && T < c->max_tok) {
			struct item *x = &it[cur];
			uint32_t chunk = x->n - x->done, j;
			int len = kvrt_seq_len(c->seqs, x->id);

			if (len < 0)
				return fail(c, len, "kvrt_seq_len");
			if (chunk > c->max_tok - T)
				chunk = c->max_tok - T;
			if (S && nidx + div_up((uint32_t)len + chunk, c->bt) > c->blk_cap)
				break;
			ret = kvrt_seq_append(c->seqs, x->id, chunk, c->slots + T);
			if (ret == -ENOSPC)
				return fail(c, ret, "kvrt_seq_append: the device cache is out of "
					    "blocks (raise --device-blocks)");
			if (ret)
				return fail(c, ret, "kvrt_seq_append");
			c->q_indptr[S] = (int32_t)T;
			c->ids[S++] = x->id;
			for (j = 0; j < chunk; j++) {
				c->tok[T + j] = x->tok[x->done + j];
				c->pos[T + j] = len + (int32_t)j;
			}
			T += chunk;
			nidx += div_up((uint32_t)len + chunk, c->bt);
			x->done += chunk;
			if (x->done < x->n)
				break;	/* the budget is spent: the rest next pass */
			if (x->row) {
				c->out_rows[nout] = T - 1;
				c->out_item[nout++] = cur;
			}
			cur++;
		}
		c->q_indptr[S] = (int32_t)T;
		if (nidx > c->idx_cap) {
			int32_t *p = realloc(c->blk_indices, sizeof(int32_t) * nidx);

			if (!p)
				return fail(c, -ENOMEM, "block table");
			c->blk_indices = p;
			c->idx_cap = nidx;
		}
		ret = kvrt_seqs_csr(c->seqs, S, c->ids, c->blk_indptr, c->blk_indices, c->idx_cap,
				    c->seq_lens);
		if (ret < 0)
			return fail(c, ret, "kvrt_seqs_csr");
		b = (struct fwd_batch){ .n_tokens = T, .tokens = c->tok, .pos = c->pos,
					.slots = c->slots, .n_seqs = S, .n_decode = decoding ? S : 0,
					.q_indptr = c->q_indptr, .blk_indptr = c->blk_indptr,
					.blk_indices = c->blk_indices, .seq_lens = c->seq_lens,
					.n_out = nout, .out_rows = c->out_rows, .logits = c->logits };
		e->m->gpu = e->gpu;
		ret = model_forward(e->m, &e->dev->layout, e->dev->base, &b);
		e->m->gpu = NULL;
		if (ret)
			return fail(c, ret, "forward pass");
		for (i = 0; i < nout; i++)
			memcpy(it[c->out_item[i]].row, c->logits + (size_t)i * V, sizeof(float) * V);
		c->st.forwards++;
		note_stats(c);
	}
	return 0;
}

static int ctx_init(struct ctx *c, const struct branch_env *e)
{
	uint32_t T, S;

	memset(c, 0, sizeof(*c));
	c->env = e;
	c->V = (uint32_t)e->m->cfg.vocab_size;
	c->bt = e->dev->layout.block_tokens;
	c->max_tok = T = e->m->max_tokens;
	c->max_seqs = S = e->max_seqs < T ? e->max_seqs : T;
	c->blk_cap = e->dev->layout.num_blocks;
	c->arr = (struct kvrt_block_array){ .layout = &e->dev->layout, .base = e->dev->base };
	c->tok = malloc(sizeof(uint32_t) * T);
	c->pos = malloc(sizeof(int32_t) * T);
	c->slots = malloc(sizeof(int64_t) * T);
	c->q_indptr = malloc(sizeof(int32_t) * (S + 1));
	c->blk_indptr = malloc(sizeof(int32_t) * (S + 1));
	c->seq_lens = malloc(sizeof(int32_t) * S);
	c->ids = malloc(sizeof(uint64_t) * S);
	c->out_rows = malloc(sizeof(uint32_t) * S);
	c->out_item = malloc(sizeof(uint32_t) * S);
	c->logits = malloc(sizeof(float) * S * c->V);
	c->scratch = malloc(sizeof(double) * c->V);
	if (!c->tok || !c->pos || !c->slots || !c->q_indptr || !c->blk_indptr || !c->seq_lens ||
	    !c->ids || !c->out_rows || !c->out_item || !c->logits || !c->scratch)
		return fail(c, -ENOMEM, "buffers");
	return 0;
}

static void ctx_fini(struct ctx *c)
{
	kvrt_seqs_destroy(c->seqs);
	free(c->tok);
	free(c->pos);
	free(c->slots);
	free(c->q_indptr);
	free(c->blk_indptr);
	free(c->blk_indices);
	free(c->seq_lens);
	free(c->ids);
	free(c->out_rows);
	free(c->out_item);
	free(c->logits);
	free(c->scratch);
}

/* ---- the shared run ------------------------------------------------------------ */

struct run {
	int beam;
	uint32_t P, W, G;	/* prompts, continuations per prompt, generated tokens */
	uint32_t **prompt, *plen;
	struct cont *cont, *next;	/* [P * W]; next: beam search's new generation */
	float *rows;			/* [P * W][V] */
	double *lp;			/* [W][V]: one prompt's beams */
	uint32_t *top;			/* [W * W] */
	struct cand { double score; uint32_t beam, tok; } *cand;	/* [W * W] */
	double shared_s, recompute_s;
};

static int cand_cmp(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	if (a->beam != b->beam)
		return a->beam < b->beam ? -1 : 1;
	return a->tok < b->tok ? -1 : a->tok > b->tok;
}

static uint64_t cont_seed(unsigned long seed, uint32_t p, uint32_t i)
{
	return mix64(mix64(seed + 1) ^ ((uint64_t)p << 32 | i));
}

/* One prompt's step of beam search: W beams, each with its row. */
static int beam_step(struct ctx *c, struct run *r, uint32_t p, uint32_t s)
{
	struct cont *cur = r->cont + (size_t)p * r->W, *nx = r->next + (size_t)p * r->W;
	uint32_t W = r->W, V = c->V, nc = 0, i, k, taken[BRANCH_MAX_WIDTH] = { 0 },
		 kids[BRANCH_MAX_WIDTH] = { 0 };
	int ret;

	for (i = 0; i < W; i++) {
		log_softmax(r->rows + ((size_t)p * W + i) * V, V, r->lp + (size_t)i * V);
		top_n(r->lp + (size_t)i * V, V, W, r->top + (size_t)i * W);
		for (k = 0; k < W; k++) {
			uint32_t t = r->top[i * W + k];

			r->cand[nc++] = (struct cand){ cur[i].score + r->lp[(size_t)i * V + t], i, t };
		}
	}
	qsort(r->cand, nc, sizeof(*r->cand), cand_cmp);
	for (k = 0; k < W; k++)
		kids[r->cand[k].beam]++;
	/* dropped beams first: their blocks are free for the copies to come */
	for (i = 0; i < W; i++) {
		if (kids[i])
			continue;
		ret = kvrt_seq_free(c->seqs, cur[i].seq);
		if (ret)
			return fail(c, ret, "kvrt_seq_free");
		c->st.freed++;
	}
	for (k = 0; k < W; k++) {
		const struct cand *cd = &r->cand[k];
		const struct cont *par = &cur[cd->beam];
		struct cont *ch = &nx[k];

		memcpy(ch->tok, par->tok, sizeof(uint32_t) * s);
		memcpy(ch->hash, par->hash, sizeof(uint64_t) * s);
		ch->tok[s] = cd->tok;
		ch->hash[s] = hash_row(r->rows + ((size_t)p * W + cd->beam) * V, V);
		ch->score = cd->score;
		ch->prompt = p;
		if (!taken[cd->beam]++) {
			ch->seq = par->seq;
		} else {
			ret = kvrt_seq_fork(c->seqs, par->seq, &ch->seq);
			if (ret)
				return fail(c, ret, "kvrt_seq_fork");
			c->st.forks++;
		}
	}
	return 0;
}

/* Prefill the prompts, fork, and generate G tokens per continuation. */
static int shared_run(struct ctx *c, struct run *r, const struct branch_opts *bo)
{
	const struct branch_env *e = c->env;
	uint32_t P = r->P, W = r->W, V = c->V, p, i, s;
	struct item *it = calloc((size_t)P * W, sizeof(*it));
	uint64_t *pseq = calloc(P, sizeof(uint64_t));
	double t0 = wall_seconds();
	int ret = -ENOMEM;

	if (!it || !pseq)
		goto out;
	for (p = 0; p < P; p++) {
		ret = kvrt_seq_add(c->seqs, &pseq[p]);
		if (ret) {
			fail(c, ret, "kvrt_seq_add");
			goto out;
		}
		it[p] = (struct item){ pseq[p], r->prompt[p], r->plen[p], 0,
				       r->rows + (size_t)p * W * V };
	}
	ret = forward_items(c, it, P, 0);
	if (ret)
		goto out;

	/* the first token of each continuation: all from the prompt's last row */
	for (p = 0; p < P; p++) {
		const float *row = r->rows + (size_t)p * W * V;

		if (r->beam) {
			log_softmax(row, V, r->lp);
			top_n(r->lp, V, W, r->top);
		}
		for (i = 0; i < W; i++) {
			struct cont *ct = &r->cont[p * W + i];

			ct->prompt = p;
			ct->hash[0] = hash_row(row, V);
			if (r->beam) {
				ct->tok[0] = r->top[i];
				ct->score = r->lp[r->top[i]];
			} else {
				ct->seed = ct->rng = cont_seed(bo->sample_seed, p, i);
				ct->tok[0] = sample(c, row, bo->temperature, &ct->rng);
			}
			if (!i) {
				ct->seq = pseq[p];
				continue;
			}
			ret = kvrt_seq_fork(c->seqs, pseq[p], &ct->seq);
			if (ret) {
				fail(c, ret, "kvrt_seq_fork");
				goto out;
			}
			c->st.forks++;
		}
	}
	note_stats(c);
	if (e->inject_fault) {
		/* the prompt's first block, held by all W continuations now */
		uint32_t *blk = malloc(sizeof(uint32_t) * c->blk_cap);

		ret = blk ? kvrt_seq_blocks(c->seqs, pseq[0], blk, c->blk_cap) : -ENOMEM;
		if (ret > 0)
			devcache_corrupt(e->dev, blk[0]);
		free(blk);
		if (ret < 0) {
			fail(c, ret, "kvrt_seq_blocks");
			goto out;
		}
	}

	for (s = 1; s < r->G; s++) {
		for (i = 0; i < P * W; i++)
			it[i] = (struct item){ r->cont[i].seq, &r->cont[i].tok[s - 1], 1, 0,
					       r->rows + (size_t)i * V };
		ret = forward_items(c, it, P * W, 1);
		if (ret)
			goto out;
		if (r->beam) {
			struct cont *t;

			for (p = 0; p < P; p++) {
				ret = beam_step(c, r, p, s);
				if (ret)
					goto out;
			}
			t = r->cont;
			r->cont = r->next;
			r->next = t;
			note_stats(c);
			continue;
		}
		for (i = 0; i < P * W; i++) {
			struct cont *ct = &r->cont[i];
			const float *row = r->rows + (size_t)i * V;

			ct->hash[s] = hash_row(row, V);
			ct->tok[s] = sample(c, row, bo->temperature, &ct->rng);
		}
	}
	c->st.tokens = (uint64_t)P * W * r->G;
	{
		struct kvrt_seqs_stats st;

		ret = kvrt_seqs_stats(c->seqs, &st);
		if (ret) {
			fail(c, ret, "kvrt_seqs_stats");
			goto out;
		}
		c->st.end_shared = st.shared_blocks;
		/* the library's count and the calls this program saw must agree */
		if (st.copies != c->st.callbacks) {
			ret = -EPROTO;
			snprintf(c->err, sizeof(c->err), "kvrt_seqs_stats says %" PRIu64 " copies, "
				 "copy_block was called %" PRIu64 " times", st.copies,
				 c->st.callbacks);
			goto out;
		}
	}
	r->shared_s = wall_seconds() - t0;
	ret = 0;
out:
	if (ret == -ENOMEM && !*c->err)
		fail(c, ret, "memory");
	free(it);
	free(pseq);
	return ret;
}

/* ---- the recomputation ------------------------------------------------------------ */

struct verdict {
	int ok;
	uint32_t seqs;
	uint64_t tokens, same_logits, same_scores;
	double worst_score;	/* largest |recomputed - reported| beam score */
	char why[300];
};

/*
 * Every final continuation alone: a fresh sequence in a fresh table (no
 * fork, so no block is shared), the prompt prefilled, then its tokens fed
 * one at a time.  --n: each row is sampled again with a generator in the
 * continuation's first state and must give its token; --beam: each token
 * must be among the W best of its recomputed row, and the summed
 * log-probabilities must give the reported score.  strict: every row's
 * logits hash must match too.
 */
static int recompute(struct ctx *c, struct run *r, const struct branch_opts *bo,
		     struct verdict *v)
{
	uint32_t V = c->V, W = r->W, i, s, k;
	float *row = malloc(sizeof(float) * V);
	double *lp = malloc(sizeof(double) * V), t0 = wall_seconds();
	uint32_t *top = malloc(sizeof(uint32_t) * W);
	struct kvrt_seqs_stats st;
	struct bstats shared;
	int ret = -ENOMEM;

	memset(v, 0, sizeof(*v));
	v->ok = 1;
	shared = c->st;
	memset(&c->st, 0, sizeof(c->st));
	if (!row || !lp || !top) {
		fail(c, ret, "memory");
		goto out;
	}
	kvrt_seqs_destroy(c->seqs);
	c->seqs = NULL;
	ret = table_open(c);
	if (ret)
		goto out;
	for (i = 0; i < r->P * W; i++) {
		const struct cont *ct = &r->cont[i];
		uint64_t id, rng = ct->seed;
		double score = 0;
		struct item it;

		ret = kvrt_seq_add(c->seqs, &id);
		if (ret) {
			fail(c, ret, "kvrt_seq_add");
			goto out;
		}
		it = (struct item){ id, r->prompt[ct->prompt], r->plen[ct->prompt], 0, row };
		ret = forward_items(c, &it, 1, 0);
		for (s = 0; !ret && s < r->G; s++) {
			const char *bad = NULL;
			uint32_t t = 0;

			if (s) {
				it = (struct item){ id, &ct->tok[s - 1], 1, 0, row };
				ret = forward_items(c, &it, 1, 1);
				if (ret)
					break;
			}
			if (r->beam) {
				log_softmax(row, V, lp);
				top_n(lp, V, W, top);
				score += lp[ct->tok[s]];
				for (k = 0; k < W && top[k] != ct->tok[s]; k++)
					;
				if (k == W)
					bad = "is not among the best of its recomputed row";
			} else {
				t = sample(c, row, bo->temperature, &rng);
				if (t != ct->tok[s])
					bad = "is not what the recomputed row samples";
			}
			if (bad && v->ok) {
				int n = snprintf(v->why, sizeof(v->why), "prompt %u, %s %u: token %u "
						 "(%u) %s", ct->prompt + 1, r->beam ? "beam" :
						 "sample", i % W + 1, s, ct->tok[s], bad);

				if (!r->beam && n > 0 && (size_t)n < sizeof(v->why))
					snprintf(v->why + n, sizeof(v->why) - n, ", which is %u", t);
				v->ok = 0;
			}
			if (hash_row(row, V) == ct->hash[s]) {
				v->same_logits++;
			} else if (c->env->strict && v->ok) {
				snprintf(v->why, sizeof(v->why), "prompt %u, %s %u: the logits of token "
					 "%u differ from the recomputation (the token, %u, does not)",
					 ct->prompt + 1, r->beam ? "beam" : "sample", i % W + 1, s,
					 ct->tok[s]);
				v->ok = 0;
			}
			v->tokens++;
		}
		if (ret)
			goto out;	/* forward_items said why */
		ret = kvrt_seq_free(c->seqs, id);
		if (ret) {
			fail(c, ret, "kvrt_seq_free");
			goto out;
		}
		v->seqs++;
		if (r->beam) {
			double d = fabs(score - ct->score);

			if (score == ct->score)
				v->same_scores++;
			if (d > v->worst_score || d != d)
				v->worst_score = d;
			if (v->ok && (c->env->strict ? score != ct->score : !(d <= BEAM_SCORE_TOL))) {
				snprintf(v->why, sizeof(v->why), "prompt %u, beam %u: recomputed score "
					 "%.17g, reported %.17g", ct->prompt + 1, i % W + 1, score,
					 ct->score);
				v->ok = 0;
			}
		}
	}
	/* nothing was shared, nothing copied: each sequence had blocks of its own */
	ret = kvrt_seqs_stats(c->seqs, &st);
	if (!ret && (st.copies || c->st.peak_shared)) {
		snprintf(c->err, sizeof(c->err), "the recomputation shared %u blocks and copied %"
			 PRIu64, c->st.peak_shared, st.copies);
		ret = -EPROTO;
		goto out;
	}
	if (ret) {
		fail(c, ret, "kvrt_seqs_stats");
		goto out;
	}
	r->recompute_s = wall_seconds() - t0;
out:
	c->st = shared;	/* the report's figures are the shared run's */
	free(row);
	free(lp);
	free(top);
	return ret;
}

/* ---- the report ------------------------------------------------------------------- */

static uint64_t tokens_digest(const struct run *r)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	uint32_t i, s;

	for (i = 0; i < r->P * r->W; i++)
		for (s = 0; s < r->G; s++)
			h = (h ^ r->cont[i].tok[s]) * 0x100000001b3ULL;
	return h;
}

struct figures {
	uint64_t block_bytes, used_bytes, indep_bytes;
	const char *mode, *result;
};

static void report_text(const struct ctx *c, const struct run *r, const struct branch_opts *bo,
			const struct verdict *v, const struct figures *f)
{
	const struct branch_env *e = c->env;
	const struct model_config *m = &e->ck->cfg;
	const char *what = r->beam ? "beam" : "sample";
	char b1[32], b2[32], b3[32];
	uint32_t i, s;

	if (!e->quiet) {
		if (r->beam)
			printf("kvrt-demo %s: beam search, width %u, on libkvrt %s's sequence tables\n",
			       e->version, r->W, kvrt_version());
		else
			printf("kvrt-demo %s: parallel sampling, %u continuations per prompt "
			       "(temperature %g, seed %lu), on libkvrt %s's sequence tables\n",
			       e->version, r->W, bo->temperature, bo->sample_seed, kvrt_version());
		printf("model     %s: dim %d, hidden %d, %d layers, %d heads / %d KV heads, vocab "
		       "%d\n", e->model_name, m->dim, m->hidden_dim, m->n_layers, m->n_heads,
		       m->n_kv_heads, m->vocab_size);
		printf("prompts   %u: the system prompt (%u tokens) and the first user message of "
		       "conversation 1", r->P, e->wl->n_system);
		if (r->P > 1)
			printf(" to %u", r->P);
		printf(" (");
		for (i = 0; i < r->P; i++)
			printf("%s%u", i ? ", " : "", r->plen[i]);
		printf(" tokens); %u tokens generated per %s\n", r->G, what);
		printf("engine    one struct kvrt_seqs over the %s device KV cache: %u blocks of %u "
		       "tokens, %s, %s a block; copy-on-write by %s; %s for every row\n",
		       e->gpu ? "gpu" : "cpu", e->dev->layout.num_blocks, c->bt, e->kv_dtype,
		       fmt_bytes(b1, sizeof(b1), f->block_bytes),
		       e->gpu ? "kvrt_gpu_copy_blocks" : "kvrt_copy_blocks",
		       strcmp(e->decode_kernel, "decode") ? "kvrt_attn_prefill" :
		       "kvrt_attn_decode (prefill for prompts)");
		printf("\n");
	}
	for (i = 0; i < r->P * r->W; i++) {
		const struct cont *ct = &r->cont[i];

		printf("prompt %u %s %u", ct->prompt + 1, what, i % r->W + 1);
		if (r->beam)
			printf(" (log-prob %.6g)", ct->score);
		printf(":");
		for (s = 0; s < r->G && s < 12; s++)
			printf(" %u", ct->tok[s]);
		printf("%s\n", r->G > 12 ? " ..." : "");
	}
	printf("\ngenerated %" PRIu64 " tokens (%u %ss of %u tokens) in %" PRIu64 " forward passes, "
	       "%.3f s; %" PRIu64 " forks%s", c->st.tokens, r->P * r->W, what, r->G,
	       c->st.forwards, r->shared_s, c->st.forks, r->beam ? "" : "\n");
	if (r->beam)
		printf(", %" PRIu64 " beams dropped (kvrt_seq_free)\n", c->st.freed);
	printf("blocks: at the peak %u in use for %" PRIu64 " block references: %s with sharing "
	       "against %s for %u independent copies (%.2fx); %u blocks shared at the end "
	       "(peak %u); %" PRIu64 " copy-on-write copies of a partial last block\n",
	       c->st.peak_used, c->st.peak_refs, fmt_bytes(b2, sizeof(b2), f->used_bytes),
	       fmt_bytes(b3, sizeof(b3), f->indep_bytes), r->P * r->W,
	       c->st.peak_used ? (double)c->st.peak_refs / c->st.peak_used : 0.0,
	       c->st.end_shared, c->st.peak_shared, c->st.callbacks);
	printf("compared: each final %s recomputed alone in a fresh sequence with blocks of its "
	       "own (prompt prefilled, then its tokens fed one at a time, %.3f s), against the "
	       "shared run\n", what, r->recompute_s);
	if (!v->ok) {
		printf("equivalence: FAIL: %s\n", v->why);
	} else {
		printf("equivalence: PASS (%u %ss, %" PRIu64 " tokens identical%s)\n", v->seqs, what,
		       v->tokens, r->beam ? ", each among the best of its recomputed row" :
		       ", each sampled again from its recomputed row");
		if (v->same_logits == v->tokens)
			printf("  the logits were bitwise identical at all %" PRIu64 " sampled "
			       "rows%s\n", v->tokens, e->strict ? " (required)" : "");
		else
			printf("  the logits differed in rounding at %" PRIu64 " of %" PRIu64 " rows "
			       "(not required here: %s)\n", v->tokens - v->same_logits, v->tokens,
			       e->gpu ? "GPU attention" : "--decode-kernel decode");
		if (r->beam && v->same_scores == v->seqs)
			printf("  the recomputed log-prob of every beam was bitwise the reported "
			       "one\n");
		else if (r->beam)
			printf("  recomputed log-probs: %" PRIu64 " of %u bitwise the reported, the "
			       "largest difference %.3g (tolerance %g)\n", v->same_scores, v->seqs,
			       v->worst_score, BEAM_SCORE_TOL);
	}
	if (e->gpu)
		printf("gpu check: %s: %" PRIu64 " rows against the CPU attention; largest error "
		       "%.3g of the tolerance\n", !e->gpu_check ? "skipped" :
		       e->gpu->st.worst <= 1 ? "PASS" : "FAIL", e->gpu->st.rows_checked,
		       e->gpu->st.worst);
	printf("summary: mode=%s width=%u prompts=%u tokens=%" PRIu64 " peak_used_blocks=%u "
	       "peak_block_refs=%" PRIu64 " shared_blocks=%u cow_copies=%" PRIu64 " digest=%016"
	       PRIx64 " equivalence=%s\n", f->mode, r->W, r->P, c->st.tokens, c->st.peak_used,
	       c->st.peak_refs, c->st.end_shared, c->st.callbacks, tokens_digest(r), f->result);
}

static void report_json_branch(const struct ctx *c, const struct run *r,
			       const struct branch_opts *bo, const struct verdict *v,
			       const struct figures *f)
{
	const struct branch_env *e = c->env;
	const struct model_config *m = &e->ck->cfg;
	uint32_t i, s;

	printf("{\n  \"tool\": \"kvrt-demo\", \"version\": ");
	report_json_str(stdout, e->version);
	printf(", \"mode\": \"%s\",\n", f->mode);
	printf("  \"model\": {\"dim\": %d, \"hidden_dim\": %d, \"layers\": %d, \"heads\": %d, "
	       "\"kv_heads\": %d, \"vocab\": %d, \"seq_len\": %d},\n", m->dim, m->hidden_dim,
	       m->n_layers, m->n_heads, m->n_kv_heads, m->vocab_size, m->seq_len);
	printf("  \"engine\": {\"block_tokens\": %u, \"kv_dtype\": \"%s\", \"threads\": %u, "
	       "\"decode_kernel\": \"%s\", \"device\": \"%s\", \"device_blocks\": %u},\n", c->bt,
	       e->kv_dtype, e->threads, e->decode_kernel, e->gpu ? "gpu" : "cpu",
	       e->dev->layout.num_blocks);
	printf("  \"branch\": {\"mode\": \"%s\", \"width\": %u, \"prompts\": %u, "
	       "\"prompt_tokens\": [", f->mode, r->W, r->P);
	for (i = 0; i < r->P; i++)
		printf("%s%u", i ? ", " : "", r->plen[i]);
	printf("], \"gen_tokens\": %u,\n", r->G);
	if (!r->beam)
		printf("    \"temperature\": %.17g, \"sample_seed\": %lu,\n", bo->temperature,
		       bo->sample_seed);
	printf("    \"sequences\": %u, \"tokens_generated\": %" PRIu64 ", \"forward_passes\": %"
	       PRIu64 ", \"forks\": %" PRIu64 ", \"freed\": %" PRIu64 ",\n", r->P * r->W,
	       c->st.tokens, c->st.forwards, c->st.forks, c->st.freed);
	printf("    \"blocks_shared\": %u, \"peak_blocks_shared\": %u, \"cow_copies\": %" PRIu64
	       ",\n", c->st.end_shared, c->st.peak_shared, c->st.callbacks);
	printf("    \"peak_used_blocks\": %u, \"peak_block_refs\": %" PRIu64 ", \"block_bytes\": %"
	       PRIu64 ", \"peak_used_bytes\": %" PRIu64 ", \"independent_bytes\": %" PRIu64 ",\n",
	       c->st.peak_used, c->st.peak_refs, f->block_bytes, f->used_bytes, f->indep_bytes);
	printf("    \"wall_s\": %.4f, \"recompute_wall_s\": %.4f,\n", r->shared_s, r->recompute_s);
	printf("    \"continuations\": [");
	for (i = 0; i < r->P * r->W; i++) {
		const struct cont *ct = &r->cont[i];

		printf("%s\n      {\"prompt\": %u, \"index\": %u, ", i ? "," : "", ct->prompt,
		       i % r->W);
		if (r->beam)
			printf("\"log_prob\": %.17g, ", ct->score);
		printf("\"tokens\": [");
		for (s = 0; s < r->G; s++)
			printf("%s%u", s ? ", " : "", ct->tok[s]);
		printf("]}");
	}
	printf("\n    ]\n  },\n");
	if (e->gpu)
		printf("  \"gpu\": {\"check\": %s, \"rows_checked\": %" PRIu64 ", "
		       "\"worst_in_tolerances\": %.4g},\n", e->gpu_check ? "true" : "false",
		       e->gpu->st.rows_checked, e->gpu->st.worst < 1e300 ? e->gpu->st.worst : 1e300);
	printf("  \"equivalence\": {\"result\": \"%s\", \"strict\": %s, \"sequences\": %u, "
	       "\"tokens\": %" PRIu64 ", \"logits_identical\": %" PRIu64, f->result,
	       e->strict ? "true" : "false", v->seqs, v->tokens, v->same_logits);
	if (r->beam)
		printf(", \"log_probs_identical\": %" PRIu64 ", \"log_prob_max_diff\": %.17g",
		       v->same_scores, v->worst_score);
	printf(", \"why\": ");
	report_json_str(stdout, v->why);
	printf("},\n  \"tokens_digest\": \"%016" PRIx64 "\"\n}\n", tokens_digest(r));
}

/* ---- the mode ------------------------------------------------------------------------ */

static void run_free(struct run *r)
{
	uint32_t i;

	for (i = 0; r->cont && i < r->P * r->W; i++) {
		free(r->cont[i].tok);
		free(r->cont[i].hash);
	}
	for (i = 0; r->next && i < r->P * r->W; i++) {
		free(r->next[i].tok);
		free(r->next[i].hash);
	}
	for (i = 0; r->prompt && i < r->P; i++)
		free(r->prompt[i]);
	free(r->prompt);
	free(r->plen);
	free(r->cont);
	free(r->next);
	free(r->rows);
	free(r->lp);
	free(r->top);
	free(r->cand);
}

static int run_init(struct run *r, const struct branch_opts *bo, const struct branch_env *e,
		    uint32_t V)
{
	const struct workload *wl = e->wl;
	uint32_t i, n = 0;

	memset(r, 0, sizeof(*r));
	r->beam = bo->beam > 0;
	r->W = r->beam ? bo->beam : bo->n;
	r->G = e->gen_tokens;
	r->P = wl->n_convs < BRANCH_PROMPTS ? wl->n_convs : BRANCH_PROMPTS;
	n = r->P * r->W;
	r->prompt = calloc(r->P, sizeof(*r->prompt));
	r->plen = calloc(r->P, sizeof(*r->plen));
	r->cont = calloc(n, sizeof(*r->cont));
	r->next = calloc(n, sizeof(*r->next));
	r->rows = malloc(sizeof(float) * n * V);
	r->lp = malloc(sizeof(double) * r->W * V);
	r->top = malloc(sizeof(uint32_t) * r->W * r->W);
	r->cand = malloc(sizeof(*r->cand) * r->W * r->W);
	if (!r->prompt || !r->plen || !r->cont || !r->next || !r->rows || !r->lp || !r->top ||
	    !r->cand)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		r->cont[i].tok = malloc(sizeof(uint32_t) * r->G);
		r->cont[i].hash = malloc(sizeof(uint64_t) * r->G);
		r->next[i].tok = malloc(sizeof(uint32_t) * r->G);
		r->next[i].hash = malloc(sizeof(uint64_t) * r->G);
		if (!r->cont[i].tok || !r->cont[i].hash || !r->next[i].tok || !r->next[i].hash)
			return -ENOMEM;
	}
	for (i = 0; i < r->P; i++) {
		const struct wl_turn *t = &wl->convs[i].turns[0];

		r->plen[i] = wl->n_system + t->n_user;
		r->prompt[i] = malloc(sizeof(uint32_t) * r->plen[i]);
		if (!r->prompt[i])
			return -ENOMEM;
		memcpy(r->prompt[i], wl->system, sizeof(uint32_t) * wl->n_system);
		memcpy(r->prompt[i] + wl->n_system, t->user, sizeof(uint32_t) * t->n_user);
	}
	return 0;
}

int branch_run(const struct branch_opts *bo, const struct branch_env *e)
{
	struct ctx c;
	struct run r = { 0 };
	struct verdict v = { 0 };
	struct figures f = { .mode = bo->beam ? "beam" : "parallel" };
	uint32_t V = (uint32_t)e->m->cfg.vocab_size;
	int ret, rc = B_RUNTIME;

	if (bo->beam > V) {
		fprintf(stderr, "kvrt-demo: --beam %u is wider than the vocabulary (%u tokens): "
			"pass a width up to %u\n", bo->beam, V, V);
		return B_USAGE;
	}
	if (e->inject_fault && e->gen_tokens < 2) {
		fprintf(stderr, "kvrt-demo: --inject-fault with --n or --beam corrupts a block "
			"after the first token: pass --gen-tokens 2 or more\n");
		return B_USAGE;
	}
	ret = ctx_init(&c, e);
	if (!ret)
		ret = run_init(&r, bo, e, V);
	if (ret) {
		fprintf(stderr, "kvrt-demo: %s\n", strerror(-ret));
		goto out;
	}
	ret = table_open(&c);
	if (!ret)
		ret = shared_run(&c, &r, bo);
	if (!ret)
		ret = recompute(&c, &r, bo, &v);
	if (ret) {
		fprintf(stderr, "kvrt-demo: --%s: %s\n", r.beam ? "beam" : "n", c.err);
		goto out;
	}
	ret = kvrt_layout_block_bytes(&e->dev->layout, &f.block_bytes);
	if (ret) {
		fprintf(stderr, "kvrt-demo: kvrt_layout_block_bytes: %s\n", strerror(-ret));
		goto out;
	}
	f.used_bytes = f.block_bytes * c.st.peak_used;
	f.indep_bytes = f.block_bytes * c.st.peak_refs;
	rc = v.ok ? B_OK : B_MISMATCH;
	if (e->gpu && e->gpu_check && !(e->gpu->st.worst <= 1))
		rc = B_MISMATCH;
	f.result = v.ok ? "pass" : "fail";
	if (e->json)
		report_json_branch(&c, &r, bo, &v, &f);
	else
		report_text(&c, &r, bo, &v, &f);
out:
	run_free(&r);
	ctx_fini(&c);
	return rc;
}
