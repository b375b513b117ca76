// SPDX-License-Identifier: GPL-2.0
/*
 * scheduler.c: the engine loop: arrivals, admission (prefix lookup, fetch
 * of hits and of a resumed conversation's offloaded blocks), the step's
 * batch, sampling, publishing of completed prompt blocks, and finishing
 * (release, offload of an idle conversation's private blocks).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "scheduler.h"

enum req_state { R_PREFILL, R_DECODE };

/* A conversation between and during its turns. */
struct conv_state {
	uint32_t *tokens;		/* everything said so far */
	uint32_t n_tokens;
	uint32_t next_turn;
	double next_arrival;
	int active;			/* a turn is queued or running */
	/* kept across an idle gap (cached pass only) */
	uint32_t kv_len;		/* positions whose K/V are kept */
	uint32_t n_pub;			/* leading blocks findable by hash */
	uint32_t *off_ids;		/* private pool blocks: blocks n_pub .. n_pub + n_off */
	uint32_t n_off;
};

struct req {
	uint32_t id, conv, turn;
	enum req_state state;
	uint32_t *tok;
	uint32_t n_tok, prompt_len, max_new, n_gen;
	uint32_t n_computed;		/* positions with K/V in the device cache */
	uint32_t *dev;			/* device blocks, in position order */
	uint32_t n_dev;
	uint8_t (*hash)[KVRT_HASH_BYTES];	/* full prompt blocks */
	uint32_t n_hash;
	uint32_t n_pub;			/* leading prompt blocks in the pool */
	uint32_t pub_cursor;		/* next prompt block to publish */
	uint32_t *refs;			/* reader references held */
	uint32_t n_refs;
	uint32_t chunk;			/* tokens this step */
	uint32_t out_row;		/* its logits row this step, or UINT32_MAX */
};

struct engine {
	struct model *m;
	struct devcache *dev;
	struct pcache *pc;
	const struct workload *wl;
	const struct engine_opts *o;
	struct pass_result *res;
	struct conv_state *cs;
	struct req **wait, **run;
	uint32_t n_wait, n_run, done;
	uint32_t bt;
	double now;
	char *err;
	size_t errlen;
	/* step scratch */
	uint32_t *b_tok, *b_out, *b_first;
	int32_t *b_pos, *b_qi, *b_bi, *b_idx, *b_len;
	int64_t *b_slot;
	float *logits;
	uint32_t *pub_dev, *pub_pool;
	uint8_t (*pub_hash)[KVRT_HASH_BYTES];
	struct req **pub_req;
	uint32_t *pub_blk;
	uint32_t pub_cap;
};

static int fail(struct engine *e, int ret, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct engine *e, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->err, e->errlen, fmt, ap);
	va_end(ap);
	return ret < 0 ? ret : -EIO;
}

static uint32_t div_up(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

/* Runs for every sampled token, inside the timed step: a word at a time. */
static uint64_t hash_row(const float *row, uint32_t n)
{
	return fnv64_words(row, (size_t)n * sizeof(float), 0xcbf29ce484222325ULL);
}

static void req_free(struct req *r)
{
	if (!r)
		return;
	free(r->tok);
	free(r->dev);
	free(r->hash);
	free(r->refs);
	free(r);
}

/* A turn arrives: its prompt is the conversation so far plus the user's message. */
static int make_request(struct engine *e, uint32_t c)
{
	const struct wl_conv *wc = &e->wl->convs[c];
	struct conv_state *cs = &e->cs[c];
	const struct wl_turn *tu = &wc->turns[cs->next_turn];
	struct req *r = calloc(1, sizeof(*r));
	uint32_t i;

	if (!r)
		return -ENOMEM;
	r->id = tu->req;
	r->conv = c;
	r->turn = cs->next_turn;
	r->prompt_len = cs->n_tokens + tu->n_user;
	r->max_new = tu->max_new;
	r->tok = malloc(sizeof(uint32_t) * (r->prompt_len + r->max_new));
	if (!r->tok) {
		req_free(r);
		return -ENOMEM;
	}
	memcpy(r->tok, cs->tokens, sizeof(uint32_t) * cs->n_tokens);
	memcpy(r->tok + cs->n_tokens, tu->user, sizeof(uint32_t) * tu->n_user);
	r->n_tok = r->prompt_len;
	e->res->req[r->id].arrival = cs->next_arrival;
	e->res->req[r->id].conv = c;
	e->res->req[r->id].turn = r->turn;
	e->res->req[r->id].prompt_len = r->prompt_len;
	e->res->prompt_tokens += r->prompt_len;
	/* the waiting queue is kept in arrival order */
	for (i = e->n_wait; i > 0 && e->res->req[e->wait[i - 1]->id].arrival >
					 e->res->req[r->id].arrival; i--)
		e->wait[i] = e->wait[i - 1];
	e->wait[i] = r;
	e->n_wait++;
	cs->active = 1;
	return 0;
}

static int arrivals(struct engine *e)
{
	uint32_t c;
	int ret;

	for (c = 0; c < e->wl->n_convs; c++) {
		struct conv_state *cs = &e->cs[c];

		if (cs->active || cs->next_turn >= e->wl->convs[c].n_turns ||
		    cs->next_arrival > e->now)
			continue;
		ret = make_request(e, c);
		if (ret)
			return ret;
	}
	return 0;
}

static double next_arrival(const struct engine *e)
{
	double t = -1;
	uint32_t c;

	for (c = 0; c < e->wl->n_convs; c++) {
		const struct conv_state *cs = &e->cs[c];

		if (!cs->active && cs->next_turn < e->wl->convs[c].n_turns &&
		    (t < 0 || cs->next_arrival < t))
			t = cs->next_arrival;
	}
	return t;
}

/*
 * Admission: device blocks for the whole request (so no preemption is
 * needed later), then, in the cached pass, the longest cached prefix and
 * the conversation's offloaded blocks.  -ENOSPC: not now.
 */
static int admit(struct engine *e, struct req *r)
{
	struct pcache *pc = e->pc;
	struct conv_state *cs = &e->cs[r->conv];
	struct req_result *rr = &e->res->req[r->id];
	uint32_t need = div_up(r->prompt_len + r->max_new - 1, e->bt), n_look, h = 0;
	uint32_t *ids = NULL;
	int ret;

	if (e->dev->n_free < need && pc) {
		/* offloads in flight hold device blocks until their copy is done */
		ret = pcache_poll(pc);
		if (!ret && e->dev->n_free < need)
			ret = pcache_wait_all(pc);
		if (ret)
			return fail(e, ret, "offload copy: %s", strerror(-ret));
	}
	if (e->dev->n_free < need)
		return -ENOSPC;
	r->dev = malloc(sizeof(uint32_t) * need);
	if (!r->dev)
		return fail(e, -ENOMEM, "out of memory");
	devcache_alloc(e->dev, need, r->dev);
	r->n_dev = need;
	r->state = R_PREFILL;
	if (!pc)
		return 0;

	r->n_hash = r->prompt_len / e->bt;
	r->hash = malloc(KVRT_HASH_BYTES * (r->n_hash + 1));
	r->refs = malloc(sizeof(uint32_t) * (r->n_hash + 1));
	ids = malloc(sizeof(uint32_t) * (r->n_hash + 1));
	if (!r->hash || !r->refs || !ids) {
		free(ids);
		return fail(e, -ENOMEM, "out of memory");
	}
	ret = pcache_hash(pc, r->tok, r->prompt_len, r->hash, r->n_hash);
	if (ret < 0) {
		free(ids);
		return fail(e, ret, "kvrt_hash_prompt: %s", strerror(-ret));
	}
	/* at least the last prompt token is computed: it yields the first logits */
	n_look = (r->prompt_len - 1) / e->bt;
	if (n_look > r->n_hash)
		n_look = r->n_hash;
	if (n_look) {
		ret = pcache_lookup(pc, (const uint8_t (*)[KVRT_HASH_BYTES])r->hash, n_look, ids);
		if (ret < 0) {
			free(ids);
			return fail(e, ret, "kvrt_lookup: %s", strerror(-ret));
		}
		h = (uint32_t)ret;
		memcpy(r->refs, ids, sizeof(uint32_t) * h);
		r->n_refs = h;
		ret = pcache_fetch(pc, h, ids, r->dev, 0);
		if (ret) {
			free(ids);
			return fail(e, ret, "fetch of %u hit blocks: %s", h, strerror(-ret));
		}
	}
	free(ids);
	r->n_pub = r->pub_cursor = h;
	r->n_computed = h * e->bt;
	rr->lookup_blocks = n_look;
	rr->hit_blocks = h;

	if (cs->n_off) {
		/* the conversation's private blocks follow its published ones */
		if (pcache_tag_pending(pc, r->conv)) {
			ret = pcache_wait_all(pc);
			if (ret)
				return fail(e, ret, "offload copy: %s", strerror(-ret));
		}
		if (h >= cs->n_pub && h < cs->n_pub + cs->n_off) {
			uint32_t first = h - cs->n_pub, n = cs->n_off - first;

			ret = pcache_fetch(pc, n, cs->off_ids + first, r->dev + h, 1);
			if (ret)
				return fail(e, ret, "fetch of %u offloaded blocks: %s", n,
					    strerror(-ret));
			if (cs->kv_len > r->n_computed) {
				rr->resumed_tokens = cs->kv_len - r->n_computed;
				r->n_computed = cs->kv_len;
			}
		}
		/* fetched, or useless (a published block before them was evicted) */
		ret = pcache_free_owned(pc, cs->n_off, cs->off_ids);
		if (ret)
			return fail(e, ret, "kvrt_free_blocks: %s", strerror(-ret));
		cs->n_off = 0;
	}
	e->res->reused_tokens += (uint64_t)h * e->bt;
	e->res->resumed_tokens += rr->resumed_tokens;
	return 0;
}

/* The step's publishing: every prompt block completed this step, one batch. */
static int publish_step(struct engine *e)
{
	uint32_t n = 0, i, j;
	int ret;

	for (i = 0; i < e->n_run; i++) {
		struct req *r = e->run[i];
		uint32_t full = (r->n_computed < r->prompt_len ? r->n_computed : r->prompt_len) /
				e->bt;

		for (j = r->pub_cursor; j < full && j < r->n_hash; j++) {
			e->pub_dev[n] = r->dev[j];
			memcpy(e->pub_hash[n], r->hash[j], KVRT_HASH_BYTES);
			e->pub_req[n] = r;
			e->pub_blk[n] = j;
			n++;
		}
		if (full > r->pub_cursor)
			r->pub_cursor = full;
	}
	if (!n)
		return 0;
	ret = pcache_publish(e->pc, n, e->pub_dev, (const uint8_t (*)[KVRT_HASH_BYTES])e->pub_hash,
			     e->pub_pool);
	if (ret == -ENOSPC)
		return 0;	/* the pool is full of referenced blocks: computed, not shared */
	if (ret)
		return fail(e, ret, "publish of %u blocks: %s", n, strerror(-ret));
	for (i = 0; i < n; i++) {
		struct req *r = e->pub_req[i];

		r->refs[r->n_refs++] = e->pub_pool[i];
		if (e->pub_blk[i] == r->n_pub)
			r->n_pub++;
	}
	return 0;
}

static int finish(struct engine *e, struct req *r)
{
	struct pcache *pc = e->pc;
	struct conv_state *cs = &e->cs[r->conv];
	struct req_result *rr = &e->res->req[r->id];
	int more = r->turn + 1 < e->wl->convs[r->conv].n_turns;
	uint32_t i, kv_blocks, n_priv = 0;
	int ret;

	rr->done = e->now;
	rr->n_gen = r->n_gen;
	/* the conversation now includes the reply */
	memcpy(cs->tokens, r->tok, sizeof(uint32_t) * r->n_tok);
	cs->n_tokens = r->n_tok;
	cs->active = 0;
	cs->next_turn++;
	cs->next_arrival = e->now + e->wl->convs[r->conv].think;
	cs->kv_len = 0;
	cs->n_pub = 0;
	if (pc) {
		ret = pcache_release(pc, r->n_refs, r->refs);
		if (ret)
			return fail(e, ret, "kvrt_release: %s", strerror(-ret));
		r->n_refs = 0;
	}
	kv_blocks = div_up(r->n_computed, e->bt);
	if (pc && more && kv_blocks > r->n_pub) {
		/* idle until the next turn: keep its private blocks in the pool */
		n_priv = kv_blocks - r->n_pub;
		cs->off_ids = realloc(cs->off_ids, sizeof(uint32_t) * n_priv);
		if (!cs->off_ids)
			return fail(e, -ENOMEM, "out of memory");
		ret = pcache_offload(pc, n_priv, r->dev + r->n_pub, cs->off_ids, r->conv);
		if (ret == 0) {
			cs->n_off = n_priv;
			cs->n_pub = r->n_pub;
			cs->kv_len = r->n_computed;
		} else if (ret != -ENOSPC) {
			return fail(e, ret, "offload of %u blocks: %s", n_priv, strerror(-ret));
		}
		/* either way those device blocks are no longer ours to free */
		devcache_free(e->dev, r->n_pub, r->dev);
		if (r->n_dev > kv_blocks)
			devcache_free(e->dev, r->n_dev - kv_blocks, r->dev + kv_blocks);
	} else {
		devcache_free(e->dev, r->n_dev, r->dev);
	}
	/* out of the running set, keeping its order */
	for (i = 0; i < e->n_run && e->run[i] != r; i++)
		;
	memmove(e->run + i, e->run + i + 1, sizeof(*e->run) * (e->n_run - i - 1));
	e->n_run--;
	e->done++;
	req_free(r);
	return 0;
}

/* Fill the step's batch; returns its token count. */
static uint32_t build_batch(struct engine *e, struct fwd_batch *b)
{
	uint32_t s, t = 0, nb = 0, n_out = 0, n_seq = 0, pass, p;

	b->n_decode = 0;
	e->b_qi[0] = 0;
	e->b_bi[0] = 0;
	/* decoding sequences first: the split attention path wants them so */
	for (pass = 0; pass < 2; pass++) {
		for (s = 0; s < e->n_run; s++) {
			struct req *r = e->run[s];
			uint32_t len, nblk;

			if ((pass == 0) != (r->state == R_DECODE) || !r->chunk)
				continue;
			for (p = r->n_computed; p < r->n_computed + r->chunk; p++, t++) {
				e->b_tok[t] = r->tok[p];
				e->b_pos[t] = (int32_t)p;
				e->b_slot[t] = (int64_t)r->dev[p / e->bt] * e->bt + p % e->bt;
			}
			len = r->n_computed + r->chunk;
			nblk = div_up(len, e->bt);
			memcpy(e->b_idx + nb, r->dev, sizeof(uint32_t) * nblk);
			nb += nblk;
			e->b_len[n_seq] = (int32_t)len;
			r->out_row = UINT32_MAX;
			if (r->state == R_DECODE || len == r->prompt_len) {
				r->out_row = n_out;
				e->b_out[n_out++] = t - 1;
			}
			n_seq++;
			e->b_qi[n_seq] = (int32_t)t;
			e->b_bi[n_seq] = (int32_t)nb;
			if (pass == 0)
				b->n_decode++;
		}
	}
	b->n_tokens = t;
	b->tokens = e->b_tok;
	b->pos = e->b_pos;
	b->slots = e->b_slot;
	b->n_seqs = n_seq;
	b->q_indptr = e->b_qi;
	b->blk_indptr = e->b_bi;
	b->blk_indices = e->b_idx;
	b->seq_lens = e->b_len;
	b->n_out = n_out;
	b->out_rows = e->b_out;
	b->logits = e->logits;
	return t;
}

/* Decide each running sequence's tokens this step, admitting new ones. */
static int schedule(struct engine *e)
{
	uint32_t budget = e->o->max_batch_tokens, i, rem;
	int ret;

	for (i = 0; i < e->n_run; i++) {
		struct req *r = e->run[i];

		r->chunk = 0;
		if (r->state == R_DECODE && budget) {
			r->chunk = 1;
			budget--;
		}
	}
	for (i = 0; i < e->n_run; i++) {
		struct req *r = e->run[i];

		if (r->state == R_PREFILL && budget) {
			rem = r->prompt_len - r->n_computed;
			r->chunk = rem < budget ? rem : budget;
			budget -= r->chunk;
		}
	}
	while (budget && e->n_wait && e->n_run < e->o->max_seqs) {
		struct req *r = e->wait[0];

		ret = admit(e, r);
		if (ret == -ENOSPC)
			break;
		if (ret)
			return ret;
		memmove(e->wait, e->wait + 1, sizeof(*e->wait) * (e->n_wait - 1));
		e->n_wait--;
		e->run[e->n_run++] = r;
		rem = r->prompt_len - r->n_computed;
		r->chunk = rem < budget ? rem : budget;
		budget -= r->chunk;
	}
	return 0;
}

static int engine_alloc(struct engine *e)
{
	uint32_t T = e->o->max_batch_tokens, S = e->o->max_seqs;
	uint32_t V = (uint32_t)e->m->cfg.vocab_size, n = e->wl->n_requests, c;
	uint32_t max_blocks = div_up(e->wl->max_request_tokens, e->bt) + 1;

	e->cs = calloc(e->wl->n_convs, sizeof(*e->cs));
	e->wait = calloc(n, sizeof(*e->wait));
	e->run = calloc(S, sizeof(*e->run));
	e->b_tok = malloc(sizeof(uint32_t) * T);
	e->b_out = malloc(sizeof(uint32_t) * T);
	e->b_first = malloc(sizeof(uint32_t) * S);
	e->b_pos = malloc(sizeof(int32_t) * T);
	e->b_slot = malloc(sizeof(int64_t) * T);
	e->b_qi = malloc(sizeof(int32_t) * (S + 1));
	e->b_bi = malloc(sizeof(int32_t) * (S + 1));
	e->b_len = malloc(sizeof(int32_t) * S);
	e->b_idx = malloc(sizeof(int32_t) * (size_t)S * max_blocks);
	e->logits = malloc(sizeof(float) * (size_t)S * V);
	e->pub_cap = S * max_blocks;
	e->pub_dev = malloc(sizeof(uint32_t) * e->pub_cap);
	e->pub_pool = malloc(sizeof(uint32_t) * e->pub_cap);
	e->pub_blk = malloc(sizeof(uint32_t) * e->pub_cap);
	e->pub_hash = malloc(KVRT_HASH_BYTES * (size_t)e->pub_cap);
	e->pub_req = malloc(sizeof(*e->pub_req) * e->pub_cap);
	e->res->req = calloc(n, sizeof(*e->res->req));
	if (!e->cs || !e->wait || !e->run || !e->b_tok || !e->b_out || !e->b_pos || !e->b_slot ||
	    !e->b_first || !e->b_qi || !e->b_bi || !e->b_len || !e->b_idx || !e->logits || !e->pub_dev ||
	    !e->pub_pool || !e->pub_blk || !e->pub_hash || !e->pub_req || !e->res->req)
		return -ENOMEM;
	e->res->n_requests = n;
	for (c = 0; c < e->wl->n_convs; c++) {
		const struct wl_conv *wc = &e->wl->convs[c];
		uint32_t t;

		e->cs[c].tokens = malloc(sizeof(uint32_t) * e->wl->max_conv_tokens);
		if (!e->cs[c].tokens)
			return -ENOMEM;
		memcpy(e->cs[c].tokens, e->wl->system, sizeof(uint32_t) * e->wl->n_system);
		e->cs[c].n_tokens = e->wl->n_system;
		e->cs[c].next_arrival = wc->start;
		for (t = 0; t < wc->n_turns; t++) {
			struct req_result *rr = &e->res->req[wc->turns[t].req];

			rr->gen = calloc(wc->turns[t].max_new ? wc->turns[t].max_new : 1,
					 sizeof(uint32_t));
			rr->logit_hash = calloc(wc->turns[t].max_new ? wc->turns[t].max_new : 1,
						sizeof(uint64_t));
			if (!rr->gen || !rr->logit_hash)
				return -ENOMEM;
		}
	}
	return 0;
}

static void engine_free(struct engine *e)
{
	uint32_t i;

	for (i = 0; e->wait && i < e->n_wait; i++)
		req_free(e->wait[i]);
	for (i = 0; e->run && i < e->n_run; i++)
		req_free(e->run[i]);
	for (i = 0; e->cs && i < e->wl->n_convs; i++) {
		if (e->pc && e->cs[i].n_off)
			pcache_free_owned(e->pc, e->cs[i].n_off, e->cs[i].off_ids);
		free(e->cs[i].tokens);
		free(e->cs[i].off_ids);
	}
	free(e->cs);
	free(e->wait);
	free(e->run);
	free(e->b_tok);
	free(e->b_out);
	free(e->b_first);
	free(e->b_pos);
	free(e->b_slot);
	free(e->b_qi);
	free(e->b_bi);
	free(e->b_len);
	free(e->b_idx);
	free(e->logits);
	free(e->pub_dev);
	free(e->pub_pool);
	free(e->pub_blk);
	free(e->pub_hash);
	free(e->pub_req);
}

/* One step: schedule, run the model, sample, publish, finish. */
static int step(struct engine *e, struct progress *prog)
{
	struct pass_result *res = e->res;
	struct fwd_batch b;
	uint32_t i, n_dec = 0, n_pre = 0, n_first, V = (uint32_t)e->m->cfg.vocab_size;
	double t0 = wall_seconds(), dt;
	int ret;

	if (e->pc) {
		ret = pcache_poll(e->pc);
		if (ret)
			return fail(e, ret, "offload copy: %s", strerror(-ret));
	}
	ret = schedule(e);
	if (ret)
		return ret;
	if (!build_batch(e, &b)) {
		if (!e->n_run && e->n_wait)
			return fail(e, -ENOSPC, "request %u needs more device blocks than the %u "
				    "the device cache has (--device-blocks)", e->wait[0]->id,
				    e->dev->layout.num_blocks);
		return fail(e, -EINVAL, "scheduler stalled with %u running", e->n_run);
	}
	ret = model_forward(e->m, &e->dev->layout, e->dev->base, &b);
	if (ret)
		return fail(e, ret, "forward pass: %s", strerror(-ret));
	n_dec = b.n_decode;
	n_pre = b.n_tokens - n_dec;

	for (i = 0; i < e->n_run; i++) {
		struct req *r = e->run[i];

		if (!r->chunk)
			continue;
		r->n_computed += r->chunk;
		if (r->state == R_PREFILL)
			res->req[r->id].computed_tokens += r->chunk;
		if (r->out_row != UINT32_MAX) {
			const float *row = e->logits + (size_t)r->out_row * V;
			struct req_result *rr = &res->req[r->id];

			rr->gen[r->n_gen] = argmax(row, V);
			rr->logit_hash[r->n_gen] = hash_row(row, V);
			r->tok[r->n_tok++] = rr->gen[r->n_gen];
			r->n_gen++;
			r->state = R_DECODE;
		}
	}
	if (e->pc) {
		ret = publish_step(e);
		if (ret)
			return ret;
	}
	/* who got a first token this step: its time is the step's end */
	for (i = 0, n_first = 0; i < e->n_run; i++) {
		struct req *r = e->run[i];

		if (r->n_gen == 1 && r->chunk && r->out_row != UINT32_MAX)
			e->b_first[n_first++] = r->id;
	}
	for (i = 0; i < e->n_run;) {
		struct req *r = e->run[i];

		if (r->n_gen >= r->max_new) {
			ret = finish(e, r);
			if (ret)
				return ret;
			continue;
		}
		i++;
	}
	dt = wall_seconds() - t0;
	e->now += dt;
	for (i = 0; i < n_first; i++)
		res->req[e->b_first[i]].first = e->now;
	res->busy_time += dt;
	res->prefill_time += dt * n_pre / b.n_tokens;
	res->decode_time += dt * n_dec / b.n_tokens;
	if (!n_pre) {
		res->decode_only_time += dt;
		res->decode_only_tokens += n_dec;
		res->decode_only_steps++;
	}
	res->prefill_tokens += n_pre;
	res->decode_tokens += n_dec;
	res->steps++;
	res->virtual_time = e->now;
	progress_update(prog, e->o->label, res, e->done, res->steps, 0);
	return 0;
}

/*
 * After a pass every request has finished: every device block must be
 * free again, and this handle must own no pool block and hold no
 * reference.  A leak here is a bug in the bookkeeping above.
 */
static int check_drained(struct engine *e)
{
	struct kvrt_space_stats st;
	struct kvrt_space_info si;
	int ret;

	if (e->dev->n_free != e->dev->layout.num_blocks)
		return fail(e, -EIO, "%u device blocks still held after the pass",
			    e->dev->layout.num_blocks - e->dev->n_free);
	if (!e->pc)
		return 0;
	ret = kvrt_space_info(e->pc->space, &si);
	if (!ret)
		ret = kvrt_space_stats(e->pc->space, &st);
	if (ret)
		return fail(e, ret, "kvrt_space_info/stats: %s", strerror(-ret));
	if (si.my_blocks || st.my_refs)
		return fail(e, -EIO, "after the pass this process still owns %llu pool blocks and "
			    "holds %llu references", (unsigned long long)si.my_blocks,
			    (unsigned long long)st.my_refs);
	return 0;
}

int engine_run(struct model *m, struct devcache *dev, struct pcache *pc,
	       const struct workload *wl, const struct engine_opts *o, struct pass_result *res,
	       char *err, size_t errlen)
{
	struct engine e = { .m = m, .dev = dev, .pc = pc, .wl = wl, .o = o, .res = res,
			    .bt = dev->layout.block_tokens, .err = err, .errlen = errlen };
	struct progress prog;
	double w0 = wall_seconds(), t;
	int ret;

	memset(res, 0, sizeof(*res));
	res->label = o->label;
	res->have_pool = pc != NULL;
	if (pc)
		pcache_reset_stats(pc);
	progress_init(&prog, o->progress);
	ret = engine_alloc(&e);
	if (ret) {
		fail(&e, ret, "out of memory");
		goto out;
	}
	while (e.done < wl->n_requests) {
		ret = arrivals(&e);
		if (ret) {
			fail(&e, ret, "out of memory");
			goto out;
		}
		if (!e.n_run && !e.n_wait) {
			/* idle: skip ahead to the next arrival */
			t = next_arrival(&e);
			if (t < 0) {
				ret = fail(&e, -EINVAL, "no request left to arrive");
				goto out;
			}
			if (t > e.now)
				e.now = t;
			continue;
		}
		ret = step(&e, &prog);
		if (ret)
			goto out;
	}
	if (pc) {
		ret = pcache_wait_all(pc);
		if (ret) {
			fail(&e, ret, "offload copy: %s", strerror(-ret));
			goto out;
		}
		/* A write-back tier's queue holds references until it is written. */
		pcache_flush_tiers(pc);
	}
	ret = check_drained(&e);
out:
	res->wall_time = wall_seconds() - w0;
	progress_update(&prog, o->label, res, e.done, res->steps, 1);
	engine_free(&e);
	if (pc) {
		pcache_wait_all(pc);
		pcache_flush_tiers(pc);
		res->pool = pc->st;
	}
	return ret;
}

void pass_result_free(struct pass_result *r)
{
	uint32_t i;

	for (i = 0; r->req && i < r->n_requests; i++) {
		free(r->req[i].gen);
		free(r->req[i].logit_hash);
	}
	free(r->req);
	memset(r, 0, sizeof(*r));
}
