// SPDX-License-Identifier: GPL-2.0
/*
 * workload.c: build the request stream from a seed.  Everything here is
 * fixed before the model runs, so both passes of a run (and two processes
 * given the same seed) serve the same requests; only the model's replies,
 * which later turns include, come from the model.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

static uint64_t next_u64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static double next_unit(uint64_t *s)	/* [0, 1) */
{
	return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint32_t next_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(next_u64(s) % n);
}

static void fill_tokens(uint32_t *t, uint32_t n, uint32_t vocab, uint64_t *s)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		t[i] = next_below(s, vocab);
}

int workload_make(struct workload *w, const struct workload_opts *o)
{
	/* the system prompt has its own stream: the same for every seed of requests */
	uint64_t sys_seed = 0x5157454d50524f4dULL, s = o->seed * 0x2545F4914F6CDD1DULL + 1;
	uint32_t left = o->requests, c, t, req = 0;
	double clock = 0.0;

	memset(w, 0, sizeof(*w));
	if (!o->requests || !o->max_turns || !o->vocab || o->rate <= 0)
		return -EINVAL;
	w->n_system = o->system_tokens;
	w->system = malloc(sizeof(uint32_t) * (o->system_tokens ? o->system_tokens : 1));
	w->convs = calloc(o->requests, sizeof(*w->convs));
	if (!w->system || !w->convs)
		goto out_nomem;
	fill_tokens(w->system, o->system_tokens, o->vocab, &sys_seed);

	for (c = 0; left; c++) {
		struct wl_conv *cv = &w->convs[c];
		uint32_t turns = 1, conv_tokens = o->system_tokens;

		if (o->max_turns > 1 && next_unit(&s) < o->multi_turn)
			turns = 2 + next_below(&s, o->max_turns - 1);
		if (turns > left)
			turns = left;
		left -= turns;
		/* exponential gaps: a Poisson process of conversations */
		clock += -log(1.0 - next_unit(&s)) / o->rate;
		cv->start = clock;
		cv->think = o->think_s * (0.5 + next_unit(&s));
		cv->n_turns = turns;
		cv->turns = calloc(turns, sizeof(*cv->turns));
		if (!cv->turns)
			goto out_nomem;
		w->n_convs = c + 1;
		for (t = 0; t < turns; t++) {
			struct wl_turn *tu = &cv->turns[t];
			uint32_t lo = o->user_tokens / 2 ? o->user_tokens / 2 : 1;

			tu->n_user = lo + next_below(&s, o->user_tokens + 1);
			tu->user = malloc(sizeof(uint32_t) * tu->n_user);
			if (!tu->user)
				goto out_nomem;
			fill_tokens(tu->user, tu->n_user, o->vocab, &s);
			tu->max_new = o->gen_tokens;
			tu->req = req++;
			conv_tokens += tu->n_user + tu->max_new;
			if (conv_tokens > w->max_request_tokens)
				w->max_request_tokens = conv_tokens;
		}
		if (conv_tokens > w->max_conv_tokens)
			w->max_conv_tokens = conv_tokens;
	}
	w->n_requests = req;
	return 0;

out_nomem:
	workload_free(w);
	return -ENOMEM;
}

void workload_free(struct workload *w)
{
	uint32_t c, t;

	for (c = 0; c < w->n_convs; c++) {
		for (t = 0; t < w->convs[c].n_turns && w->convs[c].turns; t++)
			free(w->convs[c].turns[t].user);
		free(w->convs[c].turns);
	}
	free(w->convs);
	free(w->system);
	memset(w, 0, sizeof(*w));
}
