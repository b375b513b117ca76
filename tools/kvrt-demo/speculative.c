// SPDX-License-Identifier: GPL-2.0
/*
 * speculative.c: greedy speculative decoding over struct kvrt_seqs.
 *
 * Each model (target, draft) has its own device KV cache and its own
 * sequence table.  The system prompt is computed once into a root
 * sequence; every conversation forks it (kvrt_seq_fork), runs its turns in
 * one growing sequence, and frees it.  A sequence holds the K/V of the
 * context but its last token, which is fed with the next pass.
 *
 * A round, with the context c[0..n) and k draft tokens:
 *   draft:  feed what it lacks of c (1 token, or 2 after a full accept, or
 *           a whole user message), then k - 1 one-token steps: d1 .. dk;
 *   target: one chunk [c[n-1], d1 .. dk], logits for all k + 1 rows; row i
 *           is the target's choice after d_i, so d_{i+1} is accepted while
 *           it equals that row's argmax; the first row that disagrees (or
 *           the last) gives one more token of the target's own;
 *   rollback: both sequences are cut to c plus the accepted tokens.
 * Every token of the output is the argmax of a target row whose input is
 * exactly the context before it, which is why the output equals the
 * target's own greedy decoding; spec_main checks that it does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/carve.h"
#include "cache.h"
#include "report.h"
#include "speculative.h"

enum { EX_OK = 0, EX_MISMATCH = 1, EX_USAGE = 2, EX_RUNTIME = 3 };

/* One model with its cache, its sequence table and its batch arrays. */
struct lm {
	const char *what;		/* "target", "draft": for messages */
	struct model m;
	struct devcache dev;
	struct kvrt_seqs *seqs;
	uint64_t root;			/* the system prompt */
	uint32_t vocab, rows_cap, blk_cap;
	uint32_t *tok, *out_rows;
	int32_t *pos, *indptr, *blk, *lens;
	int64_t *slots;
	float *logits;			/* [rows_cap][vocab] */
	void *batch;			/* the batch arrays above: one allocation */
	uint64_t passes, rows;		/* forward passes, token rows */
	uint64_t truncates, rolled_back;
	int have_model, have_dev;
};

/* What one decoding of the workload produced. */
struct spec_result {
	uint32_t **gen;			/* per request: tokens */
	uint64_t **hash;		/* per request: FNV-1a of each token's logits row */
	uint32_t *n_gen;
	uint64_t prompt_passes;		/* target passes over prompts (first token of a turn) */
	uint64_t decode_passes;		/* target passes after that */
	uint64_t decode_tokens;		/* tokens those produced */
	uint64_t proposed, accepted, rounds;
	double wall;
};

struct spec_run {
	const struct workload *wl;
	const struct spec_opts *o;
	uint32_t *ctx;			/* the conversation so far */
	int fault_done;
	char err[256];
};

static uint32_t div_up(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

/* Copy-on-write of a host layer-major cache: the first ntokens of src, every layer, K and V. */
static int copy_block(void *arg, uint32_t src, uint32_t dst, uint32_t ntokens)
{
	const struct devcache *d = arg;
	const struct kvrt_layout *l = &d->layout;
	uint32_t layer, kv;

	for (layer = 0; layer < l->num_layers; layer++)
		for (kv = 0; kv < 2; kv++) {
			char *b = (char *)d->base + layer * l->layer_stride + kv * l->kv_stride;

			memcpy(b + dst * l->block_stride, b + src * l->block_stride,
			       (size_t)ntokens * (size_t)l->token_stride);
		}
	return 0;
}

static void lm_fini(struct lm *x)
{
	kvrt_seqs_destroy(x->seqs);
	if (x->have_dev)
		devcache_fini(&x->dev);
	if (x->have_model)
		model_fini(&x->m);
	free(x->batch);
	memset(x, 0, sizeof(*x));
}

/* The batch arrays of T token rows, one allocation (../common/carve.h). */
static void *lm_batch_carve(struct lm *x, uint32_t T, uint32_t blocks)
{
	const struct carve_part part[] = {
		{ (void **)&x->tok, sizeof(*x->tok) * T },
		{ (void **)&x->out_rows, sizeof(*x->out_rows) * T },
		{ (void **)&x->pos, sizeof(*x->pos) * T },
		{ (void **)&x->slots, sizeof(*x->slots) * T },
		{ (void **)&x->indptr, sizeof(*x->indptr) * 2 },
		{ (void **)&x->lens, sizeof(*x->lens) * 1 },
		{ (void **)&x->blk, sizeof(*x->blk) * blocks },
		{ (void **)&x->logits, sizeof(float) * (size_t)x->rows_cap * x->vocab },
	};

	return carve(part, sizeof(part) / sizeof(part[0]));
}

static int lm_init(struct lm *x, const char *what, const struct checkpoint *ck,
		   const struct spec_opts *o, uint32_t blocks, char *err, size_t errlen)
{
	const struct model_config *c = &ck->cfg;
	struct kvrt_seqs_opts so = { 0 };
	uint32_t T = o->batch_tokens, hd = (uint32_t)(c->dim / c->n_heads);
	int ret;

	memset(x, 0, sizeof(*x));
	x->what = what;
	x->vocab = (uint32_t)c->vocab_size;
	x->rows_cap = o->k + 1;
	x->blk_cap = blocks;
	ret = model_init(&x->m, ck, T, o->threads, o->decode_kernel);
	if (ret) {
		snprintf(err, errlen, "%s model: %s", what, strerror(-ret));
		return ret;
	}
	x->have_model = 1;
	ret = devcache_init(&x->dev, (uint32_t)c->n_layers, (uint32_t)c->n_kv_heads, hd,
			    o->block_tokens, blocks, o->kv_dtype, NULL);
	if (ret) {
		snprintf(err, errlen, "%s KV cache of %u blocks: %s", what, blocks, strerror(-ret));
		return ret;
	}
	x->have_dev = 1;
	so.nr_blocks = blocks;
	so.block_tokens = o->block_tokens;
	so.copy_block = copy_block;
	so.copy_arg = &x->dev;
	ret = kvrt_seqs_create(&x->seqs, &so);
	if (!ret)
		ret = kvrt_seq_add(x->seqs, &x->root);
	if (ret) {
		snprintf(err, errlen, "%s: kvrt_seqs_create/kvrt_seq_add: %s", what, strerror(-ret));
		return ret;
	}
	x->batch = lm_batch_carve(x, T, blocks);
	if (!x->batch) {
		snprintf(err, errlen, "%s: out of memory", what);
		return -ENOMEM;
	}
	return 0;
}

/*
 * Feed toks[0..n) at positions from..from+n to sequence id (whose length
 * must be from), in chunks of the batch budget, and keep the logits of
 * the last n_out rows in x->logits.  decoding: a one-token step of a
 * decoding sequence (what --decode-kernel decode sends to kvrt_attn_decode).
 */
static int lm_feed(struct lm *x, uint64_t id, const uint32_t *toks, uint32_t n, uint32_t from,
		   uint32_t n_out, int decoding, char *err, size_t errlen)
{
	uint32_t done = 0, i;
	int ret;

	if (kvrt_seq_len(x->seqs, id) != (int)from || n_out > x->rows_cap || n_out > n) {
		snprintf(err, errlen, "%s: sequence of %d tokens fed at %u (%u rows out): a "
			 "bookkeeping bug", x->what, kvrt_seq_len(x->seqs, id), from, n_out);
		return -EINVAL;
	}
	while (done < n) {
		uint32_t c = n - done < x->m.max_tokens ? n - done : x->m.max_tokens;
		uint32_t last = done + c == n, out = last ? (n_out < c ? n_out : c) : 0;
		int32_t q_indptr[2] = { 0, (int32_t)c };
		struct fwd_batch b;

		/* the rows out of the last chunk must be all n_out (verify chunks fit one) */
		if (last && out != n_out) {
			snprintf(err, errlen, "%s: %u rows out of a %u-token chunk", x->what, n_out, c);
			return -EINVAL;
		}
		ret = kvrt_seq_append(x->seqs, id, c, x->slots);
		if (ret) {
			snprintf(err, errlen, "%s: kvrt_seq_append of %u tokens: %s", x->what, c,
				 strerror(-ret));
			return ret;
		}
		ret = kvrt_seqs_csr(x->seqs, 1, &id, x->indptr, x->blk, x->blk_cap, x->lens);
		if (ret < 0) {
			snprintf(err, errlen, "%s: kvrt_seqs_csr: %s", x->what, strerror(-ret));
			return ret;
		}
		for (i = 0; i < c; i++) {
			x->tok[i] = toks[done + i];
			x->pos[i] = (int32_t)(from + done + i);
		}
		for (i = 0; i < out; i++)
			x->out_rows[i] = c - out + i;
		b = (struct fwd_batch){
			.n_tokens = c, .tokens = x->tok, .pos = x->pos, .slots = x->slots,
			.n_seqs = 1, .n_decode = decoding && c == 1, .q_indptr = q_indptr,
			.blk_indptr = x->indptr, .blk_indices = x->blk, .seq_lens = x->lens,
			.n_out = out, .out_rows = x->out_rows, .logits = x->logits,
		};
		ret = model_forward(&x->m, &x->dev.layout, x->dev.base, &b);
		if (ret) {
			snprintf(err, errlen, "%s: forward pass: %s", x->what, strerror(-ret));
			return ret;
		}
		x->passes++;
		x->rows += c;
		done += c;
	}
	return 0;
}

/* Cut sequence id to len tokens (a rollback), counting what went. */
static int lm_cut(struct lm *x, uint64_t id, uint32_t len, char *err, size_t errlen)
{
	int have = kvrt_seq_len(x->seqs, id), ret;

	if (have < 0 || (uint32_t)have == len)
		return have < 0 ? have : 0;
	ret = kvrt_seq_truncate(x->seqs, id, len);
	if (ret) {
		snprintf(err, errlen, "%s: kvrt_seq_truncate to %u of %d tokens: %s", x->what, len,
			 have, strerror(-ret));
		return ret;
	}
	x->truncates++;
	x->rolled_back += (uint32_t)have - len;
	return 0;
}

static const float *row(const struct lm *x, uint32_t i)
{
	return x->logits + (size_t)i * x->vocab;
}

static uint64_t row_hash(const struct lm *x, uint32_t i)
{
	return fnv64_words(row(x, i), sizeof(float) * x->vocab, 0xcbf29ce484222325ULL);
}

static void result_free(struct spec_result *r, uint32_t n)
{
	uint32_t i;

	for (i = 0; r->gen && i < n; i++) {
		free(r->gen[i]);
		free(r->hash[i]);
	}
	free(r->gen);
	free(r->hash);
	free(r->n_gen);
	memset(r, 0, sizeof(*r));
}

static int result_alloc(struct spec_result *r, const struct workload *wl)
{
	uint32_t c, t;

	memset(r, 0, sizeof(*r));
	r->gen = calloc(wl->n_requests, sizeof(*r->gen));
	r->hash = calloc(wl->n_requests, sizeof(*r->hash));
	r->n_gen = calloc(wl->n_requests, sizeof(*r->n_gen));
	if (!r->gen || !r->hash || !r->n_gen)
		return -ENOMEM;
	for (c = 0; c < wl->n_convs; c++)
		for (t = 0; t < wl->convs[c].n_turns; t++) {
			const struct wl_turn *tu = &wl->convs[c].turns[t];

			r->gen[tu->req] = calloc(tu->max_new + 1, sizeof(uint32_t));
			r->hash[tu->req] = calloc(tu->max_new + 1, sizeof(uint64_t));
			if (!r->gen[tu->req] || !r->hash[tu->req])
				return -ENOMEM;
		}
	return 0;
}

/* The system prompt into the root sequence of x. */
static int lm_root(struct lm *x, const struct workload *wl, char *err, size_t errlen)
{
	return lm_feed(x, x->root, wl->system, wl->n_system, 0, 0, 0, err, errlen);
}

/*
 * Decode every conversation with target t alone (d NULL: one token per
 * pass) or speculatively with draft d, into r.
 */
static int decode_all(struct spec_run *s, struct lm *t, struct lm *d, struct spec_result *r)
{
	const struct workload *wl = s->wl;
	uint32_t *ctx = s->ctx, K = d ? s->o->k : 0;
	uint32_t c, turn, drafts[SPEC_MAX_K], chunk[SPEC_MAX_K + 1];
	double t0 = wall_seconds();
	int ret = 0;

	for (c = 0; c < wl->n_convs && !ret; c++) {
		const struct wl_conv *wc = &wl->convs[c];
		uint64_t tid = 0, did = 0;
		uint32_t n = wl->n_system, dlen = wl->n_system;

		memcpy(ctx, wl->system, sizeof(uint32_t) * n);
		ret = kvrt_seq_fork(t->seqs, t->root, &tid);
		if (!ret && d)
			ret = kvrt_seq_fork(d->seqs, d->root, &did);
		if (ret) {
			snprintf(s->err, sizeof(s->err), "kvrt_seq_fork of the system prompt: %s",
				 strerror(-ret));
			break;
		}
		for (turn = 0; turn < wc->n_turns && !ret; turn++) {
			const struct wl_turn *tu = &wc->turns[turn];
			uint32_t tlen = (uint32_t)kvrt_seq_len(t->seqs, tid), *gen = r->gen[tu->req];
			uint64_t *hash = r->hash[tu->req];
			uint32_t ng = 0;

			memcpy(ctx + n, tu->user, sizeof(uint32_t) * tu->n_user);
			n += tu->n_user;
			/* the prompt: its last row gives the turn's first token */
			ret = lm_feed(t, tid, ctx + tlen, n - tlen, tlen, 1, 0, s->err,
				      sizeof(s->err));
			if (ret)
				break;
			r->prompt_passes++;
			gen[ng] = argmax(row(t, 0), t->vocab);
			hash[ng++] = row_hash(t, 0);
			ctx[n++] = gen[ng - 1];
			while (ng < tu->max_new) {
				uint32_t left = tu->max_new - ng, k = K < left - 1 ? K : left - 1;
				uint32_t a = 0, i;

				if (!k) {	/* plain decoding, or one token left */
					ret = lm_feed(t, tid, ctx + n - 1, 1, n - 1, 1, 1, s->err,
						      sizeof(s->err));
					if (ret)
						break;
					r->decode_passes++;
					r->decode_tokens++;
					gen[ng] = argmax(row(t, 0), t->vocab);
					hash[ng++] = row_hash(t, 0);
					ctx[n++] = gen[ng - 1];
					continue;
				}
				/* the draft catches up with the context, then proposes k tokens */
				ret = lm_feed(d, did, ctx + dlen, n - dlen, dlen, 1, n - dlen == 1,
					      s->err, sizeof(s->err));
				for (i = 0; !ret; i++) {
					drafts[i] = argmax(row(d, 0), d->vocab);
					if (i + 1 == k)
						break;
					ret = lm_feed(d, did, &drafts[i], 1, n + i, 1, 1, s->err,
						      sizeof(s->err));
				}
				if (ret)
					break;
				/* the target verifies them in one chunk of k + 1 rows */
				chunk[0] = ctx[n - 1];
				memcpy(chunk + 1, drafts, sizeof(uint32_t) * k);
				ret = lm_feed(t, tid, chunk, k + 1, n - 1, k + 1, 0, s->err,
					      sizeof(s->err));
				if (ret)
					break;
				r->decode_passes++;
				r->rounds++;
				r->proposed += k;
				while (a < k && drafts[a] == argmax(row(t, a), t->vocab))
					a++;
				r->accepted += a;
				for (i = 0; i <= a; i++) {
					uint32_t tok = i < a ? drafts[i] : argmax(row(t, a), t->vocab);

					gen[ng] = tok;
					hash[ng++] = row_hash(t, i);
					ctx[n + i] = tok;
					/* the test fault: a bookkeeping slip on one accepted token */
					if (s->o->inject_fault && !s->fault_done && i < a) {
						gen[ng - 1] = (tok + 1) % t->vocab;
						s->fault_done = 1;
					}
				}
				r->decode_tokens += a + 1;
				/* keep c[0..n) and the accepted drafts; the new last token is fed next */
				ret = lm_cut(t, tid, n + a, s->err, sizeof(s->err));
				dlen = n + (a < k - 1 ? a : k - 1);
				if (!ret)
					ret = lm_cut(d, did, dlen, s->err, sizeof(s->err));
				n += a + 1;
			}
			r->n_gen[tu->req] = ng;
		}
		if (kvrt_seq_free(t->seqs, tid) || (d && kvrt_seq_free(d->seqs, did))) {
			snprintf(s->err, sizeof(s->err), "kvrt_seq_free of conversation %u failed", c);
			ret = ret ? ret : -EIO;
		}
	}
	r->wall = wall_seconds() - t0;
	return ret;
}

struct spec_eq {
	int ok, strict;
	uint32_t requests;
	uint64_t tokens, same_logits;
	char why[256];
};

/* Token for token against the target alone; logits bitwise when strict. */
static void compare(const struct workload *wl, const struct spec_result *p,
		    const struct spec_result *s, int strict, struct spec_eq *eq)
{
	uint32_t i, j;

	memset(eq, 0, sizeof(*eq));
	eq->ok = 1;
	eq->strict = strict;
	eq->requests = wl->n_requests;
	for (i = 0; i < wl->n_requests && eq->ok; i++) {
		if (p->n_gen[i] != s->n_gen[i]) {
			snprintf(eq->why, sizeof(eq->why), "request %u: %u tokens speculative, %u "
				 "plain", i, s->n_gen[i], p->n_gen[i]);
			eq->ok = 0;
			break;
		}
		for (j = 0; j < p->n_gen[i]; j++) {
			if (p->gen[i][j] != s->gen[i][j]) {
				snprintf(eq->why, sizeof(eq->why), "request %u: token %u is %u "
					 "speculative, %u by the target alone", i, j, s->gen[i][j],
					 p->gen[i][j]);
				eq->ok = 0;
				break;
			}
			if (p->hash[i][j] == s->hash[i][j]) {
				eq->same_logits++;
			} else if (strict) {
				snprintf(eq->why, sizeof(eq->why), "request %u: the logits of token "
					 "%u differ from the target alone's (the token, %u, does not)",
					 i, j, p->gen[i][j]);
				eq->ok = 0;
				break;
			}
			eq->tokens++;
		}
	}
}

static uint64_t digest(const struct workload *wl, const struct spec_result *r)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	uint32_t i, j;

	for (i = 0; i < wl->n_requests; i++)
		for (j = 0; j < r->n_gen[i]; j++)
			h = (h ^ r->gen[i][j]) * 0x100000001b3ULL;
	return h;
}

static int usage(const char *what)
{
	fprintf(stderr, "kvrt-demo: %s\n(more: kvrt-demo --help)\n", what);
	return EX_USAGE;
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void print_text(const struct checkpoint *ck, const char *target_name, uint64_t seed,
		       const struct checkpoint *dk, const char *draft_desc,
		       const struct workload *wl, const struct spec_opts *o, const struct lm *t,
		       const struct lm *d, const struct spec_result *p,
		       const struct spec_result *s, const struct spec_eq *eq, uint64_t p_passes)
{
	uint64_t saved = p->decode_passes - s->decode_passes;

	if (o->quiet)
		goto table;
	printf("kvrt-demo %s: speculative decoding on libkvrt %s sequence tables\n", "0.1",
	       kvrt_version());
	printf("target    %s: dim %d, hidden %d, %d layers, %d heads / %d KV heads, vocab %d, "
	       "%.2fM parameters", target_name ? target_name : "random weights", ck->cfg.dim,
	       ck->cfg.hidden_dim, ck->cfg.n_layers, ck->cfg.n_heads, ck->cfg.n_kv_heads,
	       ck->cfg.vocab_size, (double)ckpt_param_count(&ck->cfg) / 1e6);
	if (!target_name)
		printf(" (seed %" PRIu64 ")", seed);
	printf("\ndraft     %s (%.2fM parameters)\n", draft_desc,
	       (double)ckpt_param_count(&dk->cfg) / 1e6);
	printf("workload  %u requests in %u conversations, one after another; system prompt %u "
	       "tokens (computed once per model, forked by every conversation)\n",
	       wl->n_requests, wl->n_convs, wl->n_system);
	printf("engine    greedy, CPU, %s KV in %u-token blocks; the draft proposes up to %u "
	       "tokens a round, the target verifies them in one chunk of K+1 rows, rejected "
	       "tokens are cut from both sequences by kvrt_seq_truncate\n\n",
	       o->kv_dtype == KVRT_DTYPE_F32 ? "f32" : o->kv_dtype == KVRT_DTYPE_F16 ? "f16" :
	       "bf16", o->block_tokens, o->k);
table:
	printf("%-36s %16s %16s\n", "", "target alone", "speculative");
	printf("%-36s %16" PRIu64 " %16" PRIu64 "\n", "tokens after each turn's first",
	       p->decode_tokens, s->decode_tokens);
	printf("%-36s %16" PRIu64 " %16" PRIu64 "\n", "target passes for them",
	       p->decode_passes, s->decode_passes);
	printf("%-36s %16.2f %16.2f\n", "tokens per target pass", ratio(p->decode_tokens,
	       p->decode_passes), ratio(s->decode_tokens, s->decode_passes));
	printf("%-36s %16" PRIu64 " %16" PRIu64 "\n", "target passes in all (with prompts)",
	       p_passes, t->passes);
	printf("%-36s %16s %16" PRIu64 "\n", "draft passes (with prompts)", "-", d->passes);
	printf("%-36s %16.3f %16.3f\n", "wall seconds (both models)", p->wall, s->wall);
	printf("\nacceptance: %" PRIu64 " of %" PRIu64 " proposed draft tokens accepted (%.1f%%) "
	       "in %" PRIu64 " rounds\n", s->accepted, s->proposed,
	       100.0 * ratio(s->accepted, s->proposed), s->rounds);
	printf("target passes saved: %" PRIu64 " of %" PRIu64 " (%.1f%%); the first token of "
	       "each turn comes from its prompt's pass in both runs and is not counted\n", saved,
	       p->decode_passes, 100.0 * ratio(saved, p->decode_passes));
	if (ck->cfg.shared_classifier && s->accepted == s->proposed)
		printf("note: with a shared classifier a random model repeats its input token, so "
		       "any draft agrees; --classifier separate gives one that does not\n");
	printf("rollback: target %" PRIu64 " truncates, %" PRIu64 " tokens; draft %" PRIu64
	       " truncates, %" PRIu64 " tokens\n", t->truncates, t->rolled_back, d->truncates,
	       d->rolled_back);
	printf("compared: the token ids of every request against the target decoding alone "
	       "(one token per pass, no draft), and the logits row that chose each token: %s\n",
	       eq->strict ? "bitwise, required (every row through kvrt_attn_prefill, whose rows "
	       "do not depend on the chunk)" : "bitwise where equal, not required "
	       "(--decode-kernel decode: one-token steps use kvrt_attn_decode, verify chunks "
	       "kvrt_attn_prefill)");
	if (!eq->ok) {
		printf("equivalence: FAIL: %s\n", eq->why);
	} else {
		printf("equivalence: PASS (%u requests, %" PRIu64 " tokens identical)\n",
		       eq->requests, eq->tokens);
		printf("  the logits were bitwise identical at %" PRIu64 " of %" PRIu64
		       " positions\n", eq->same_logits, eq->tokens);
	}
	printf("summary: mode=speculative k=%u proposed=%" PRIu64 " accepted=%" PRIu64
	       " acceptance=%.4f tokens_per_target_pass=%.4f target_passes_saved=%" PRIu64
	       " draft_passes=%" PRIu64 " truncates=%" PRIu64 " rolled_back=%" PRIu64
	       " tokens=%016" PRIx64 " equivalence=%s\n", o->k, s->proposed, s->accepted,
	       ratio(s->accepted, s->proposed), ratio(s->decode_tokens, s->decode_passes), saved,
	       d->passes, t->truncates + d->truncates, t->rolled_back + d->rolled_back,
	       digest(wl, s), eq->ok ? "pass" : "fail");
}

static void print_json(const struct checkpoint *ck, const struct checkpoint *dk,
		       const char *draft_desc, const struct workload *wl,
		       const struct spec_opts *o, const struct lm *t, const struct lm *d,
		       const struct spec_result *p, const struct spec_result *s,
		       const struct spec_eq *eq, uint64_t p_passes)
{
	const struct model_config *m = &ck->cfg;

	printf("{\n  \"tool\": \"kvrt-demo\", \"version\": \"0.1\", \"mode\": \"speculative\", "
	       "\"device\": \"cpu\",\n");
	printf("  \"model\": {\"dim\": %d, \"hidden_dim\": %d, \"layers\": %d, \"heads\": %d, "
	       "\"kv_heads\": %d, \"vocab\": %d, \"seq_len\": %d, \"params\": %" PRIu64 "},\n",
	       m->dim, m->hidden_dim, m->n_layers, m->n_heads, m->n_kv_heads, m->vocab_size,
	       m->seq_len, ckpt_param_count(m));
	printf("  \"draft\": {\"source\": ");
	report_json_str(stdout, draft_desc);
	printf(", \"layers\": %d, \"params\": %" PRIu64 "},\n", dk->cfg.n_layers,
	       ckpt_param_count(&dk->cfg));
	printf("  \"workload\": {\"requests\": %u, \"conversations\": %u, \"system_tokens\": %u},\n",
	       wl->n_requests, wl->n_convs, wl->n_system);
	printf("  \"engine\": {\"block_tokens\": %u, \"kv_dtype\": \"%s\", \"threads\": %u, "
	       "\"decode_kernel\": \"%s\", \"device\": \"cpu\"},\n", o->block_tokens,
	       o->kv_dtype == KVRT_DTYPE_F32 ? "f32" : o->kv_dtype == KVRT_DTYPE_F16 ? "f16" :
	       "bf16", o->threads, o->decode_kernel == DECODE_WITH_DECODE ? "decode" : "prefill");
	printf("  \"speculative\": {\"k\": %u, \"rounds\": %" PRIu64 ", \"proposed\": %" PRIu64
	       ", \"accepted\": %" PRIu64 ", \"acceptance_rate\": %.6f,\n", o->k, s->rounds,
	       s->proposed, s->accepted, ratio(s->accepted, s->proposed));
	printf("    \"decode_tokens\": %" PRIu64 ", \"target_passes\": %" PRIu64
	       ", \"tokens_per_target_pass\": %.6f,\n", s->decode_tokens, s->decode_passes,
	       ratio(s->decode_tokens, s->decode_passes));
	printf("    \"plain_decode_tokens\": %" PRIu64 ", \"plain_target_passes\": %" PRIu64
	       ", \"plain_tokens_per_target_pass\": %.6f, \"target_passes_saved\": %" PRIu64 ",\n",
	       p->decode_tokens, p->decode_passes, ratio(p->decode_tokens, p->decode_passes),
	       p->decode_passes - s->decode_passes);
	printf("    \"target_passes_all\": %" PRIu64 ", \"plain_target_passes_all\": %" PRIu64
	       ", \"draft_passes\": %" PRIu64 ", \"draft_rows\": %" PRIu64 ",\n", t->passes,
	       p_passes, d->passes, d->rows);
	printf("    \"truncates\": %" PRIu64 ", \"rolled_back_tokens\": %" PRIu64
	       ", \"target_truncates\": %" PRIu64 ", \"target_rolled_back\": %" PRIu64
	       ", \"draft_truncates\": %" PRIu64 ", \"draft_rolled_back\": %" PRIu64 ",\n",
	       t->truncates + d->truncates, t->rolled_back + d->rolled_back, t->truncates,
	       t->rolled_back, d->truncates, d->rolled_back);
	printf("    \"wall_s\": %.6f, \"plain_wall_s\": %.6f},\n", s->wall, p->wall);
	printf("  \"equivalence\": {\"result\": \"%s\", \"requests\": %u, \"tokens\": %" PRIu64
	       ", \"logits_identical\": %" PRIu64 ", \"logits_required\": %s, \"why\": ",
	       eq->ok ? "pass" : "fail", eq->requests, eq->tokens, eq->same_logits,
	       eq->strict ? "true" : "false");
	report_json_str(stdout, eq->why);
	printf("},\n  \"tokens_digest\": \"%016" PRIx64 "\"\n}\n", digest(wl, s));
}

/* The draft: loaded (same vocabulary) or the target's first layers. */
static int make_draft(const struct checkpoint *ck, const struct workload *wl,
		      const struct spec_opts *o, struct checkpoint *dk, char *desc, size_t dlen)
{
	char err[512];
	int32_t L = o->draft_layers ? (int32_t)o->draft_layers :
		    ck->cfg.n_layers / 2 ? ck->cfg.n_layers / 2 : 1;
	int ret;

	if (o->draft_checkpoint) {
		if (o->draft_layers)
			return usage("--draft-layers builds a draft from the model; with "
				     "--draft-checkpoint the file is the draft: pass one of them");
		ret = ckpt_load(dk, o->draft_checkpoint, err, sizeof(err));
		if (ret) {
			fprintf(stderr, "kvrt-demo: draft: %s\n", err);
			return EX_RUNTIME;
		}
		if (dk->cfg.vocab_size != ck->cfg.vocab_size) {
			fprintf(stderr, "kvrt-demo: the draft %s has a vocabulary of %d tokens, the "
				"model %d: speculative decoding compares token ids, so the draft must "
				"share the vocabulary (generate it with --vocab %d)\n(more: kvrt-demo "
				"--help)\n", o->draft_checkpoint, dk->cfg.vocab_size,
				ck->cfg.vocab_size, ck->cfg.vocab_size);
			ckpt_free(dk);
			return EX_USAGE;
		}
		if ((uint32_t)dk->cfg.seq_len < wl->max_conv_tokens) {
			fprintf(stderr, "kvrt-demo: the draft %s has seq_len %d, less than the "
				"longest conversation's %u tokens: use a draft with a longer "
				"seq_len or a shorter workload\n(more: kvrt-demo --help)\n",
				o->draft_checkpoint, dk->cfg.seq_len, wl->max_conv_tokens);
			ckpt_free(dk);
			return EX_USAGE;
		}
		snprintf(desc, dlen, "%s: dim %d, hidden %d, %d layers, %d heads / %d KV heads",
			 o->draft_checkpoint, dk->cfg.dim, dk->cfg.hidden_dim, dk->cfg.n_layers,
			 dk->cfg.n_heads, dk->cfg.n_kv_heads);
		return EX_OK;
	}
	ret = ckpt_first_layers(dk, ck, L, err, sizeof(err));
	if (ret == -EINVAL) {
		char why[600];

		snprintf(why, sizeof(why), "--draft-layers: %s", err);
		return usage(why);
	}
	if (ret) {
		fprintf(stderr, "kvrt-demo: draft: %s\n", err);
		return EX_RUNTIME;
	}
	snprintf(desc, dlen, "the model's first %d of %d layers, its embedding and classifier",
		 L, ck->cfg.n_layers);
	return EX_OK;
}

int spec_main(const struct checkpoint *ck, const char *target_name, uint64_t target_seed,
	      const struct workload *wl, const struct spec_opts *o)
{
	struct checkpoint dk;
	struct lm t, d;
	struct spec_result plain, spec;
	struct spec_run s = { .wl = wl, .o = o };
	struct spec_eq eq;
	char desc[300], err[256] = "";
	uint32_t blocks;
	uint64_t p_passes;
	int rc, ret;

	if (o->k && o->k + 1 > o->batch_tokens) {
		snprintf(desc, sizeof(desc), "--speculative %u verifies %u tokens in one chunk, more "
			 "than --batch-tokens %u: lower K or raise --batch-tokens", o->k, o->k + 1,
			 o->batch_tokens);
		return usage(desc);
	}
	rc = make_draft(ck, wl, o, &dk, desc, sizeof(desc));
	if (rc)
		return rc;
	if (o->gen_draft) {
		ret = ckpt_save(&dk, o->gen_draft, err, sizeof(err));
		if (ret)
			fprintf(stderr, "kvrt-demo: %s\n", err);
		else
			printf("wrote %s: llama2.c checkpoint, %s, vocab %d, %zu bytes\n",
			       o->gen_draft, desc, dk.cfg.vocab_size,
			       CKPT_HEADER_BYTES + dk.n_floats * sizeof(float));
		ckpt_free(&dk);
		return ret ? EX_RUNTIME : EX_OK;
	}
	memset(&t, 0, sizeof(t));
	memset(&d, 0, sizeof(d));
	memset(&plain, 0, sizeof(plain));
	memset(&spec, 0, sizeof(spec));
	rc = EX_RUNTIME;
	/* the root, one conversation with k + 1 tokens of slack, and a copy-on-write block */
	blocks = div_up(wl->n_system, o->block_tokens) +
		 div_up(wl->max_conv_tokens + o->k + 1, o->block_tokens) + 2;
	s.ctx = malloc(sizeof(uint32_t) * (wl->max_conv_tokens + o->k + 2));
	if (!s.ctx || result_alloc(&plain, wl) || result_alloc(&spec, wl)) {
		snprintf(err, sizeof(err), "out of memory");
		goto out;
	}
	ret = lm_init(&t, "target", ck, o, blocks, err, sizeof(err));
	if (!ret)
		ret = lm_init(&d, "draft", &dk, o, blocks, err, sizeof(err));
	if (!ret)
		ret = lm_root(&t, wl, err, sizeof(err));
	if (!ret)
		ret = lm_root(&d, wl, err, sizeof(err));
	if (ret)
		goto out;
	/* the system prompt is shared by both runs: count from here */
	t.passes = t.rows = d.passes = d.rows = 0;
	ret = decode_all(&s, &t, NULL, &plain);
	if (!ret) {
		p_passes = t.passes;
		t.passes = t.rows = 0;
		ret = decode_all(&s, &t, &d, &spec);
	}
	if (ret) {
		snprintf(err, sizeof(err), "%s", s.err);
		goto out;
	}
	compare(wl, &plain, &spec, o->decode_kernel == DECODE_WITH_PREFILL, &eq);
	if (o->json)
		print_json(ck, &dk, desc, wl, o, &t, &d, &plain, &spec, &eq, p_passes);
	else
		print_text(ck, target_name, target_seed, &dk, desc, wl, o, &t, &d, &plain, &spec,
			   &eq, p_passes);
	rc = eq.ok ? EX_OK : EX_MISMATCH;
out:
	if (rc == EX_RUNTIME)
		fprintf(stderr, "kvrt-demo: speculative: %s\n", err);
	lm_fini(&t);
	lm_fini(&d);
	result_free(&plain, wl->n_requests);
	result_free(&spec, wl->n_requests);
	free(s.ctx);
	ckpt_free(&dk);
	return rc;
}
