/* SPDX-License-Identifier: GPL-2.0 */
/*
 * workload.h: the simulated request stream.  Conversations arrive as a
 * Poisson process; every conversation starts with the same system prompt;
 * some have several turns, each a later request whose prompt is the whole
 * conversation so far plus a new user message.  Token ids are drawn from
 * a seeded generator (a toy tokenizer: ids are the text).
 */
#ifndef KVRT_DEMO_WORKLOAD_H
#define KVRT_DEMO_WORKLOAD_H

#include <stdint.h>

struct wl_turn {
	uint32_t n_user;
	uint32_t *user;		/* the user message of this turn */
	uint32_t max_new;	/* tokens to generate */
	uint32_t req;		/* request index */
};

struct wl_conv {
	double start;		/* seconds from the run's start */
	double think;		/* seconds between a reply and the next turn */
	uint32_t n_turns;
	struct wl_turn *turns;
};

struct workload {
	uint32_t n_system;
	uint32_t *system;
	uint32_t n_convs, n_requests;
	struct wl_conv *convs;
	uint32_t max_conv_tokens;	/* the longest conversation, all turns */
	uint32_t max_request_tokens;	/* the longest prompt + generation */
};

struct workload_opts {
	uint64_t seed;
	uint32_t requests;	/* total turns */
	uint32_t system_tokens;
	uint32_t user_tokens;	/* mean; each message is 1/2x .. 3/2x */
	uint32_t gen_tokens;
	uint32_t max_turns;
	double multi_turn;	/* fraction of conversations with >1 turn */
	double rate;		/* conversations per second */
	double think_s;		/* mean gap between turns */
	uint32_t vocab;
};

int workload_make(struct workload *w, const struct workload_opts *o);
void workload_free(struct workload *w);

#endif
