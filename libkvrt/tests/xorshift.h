/* SPDX-License-Identifier: MIT */
/*
 * xorshift.h: the small seeded source of the tests that need any random
 * bytes but no particular distribution (test_append, test_copy,
 * test_gpu_plan).  Define XORSHIFT_SEED before including it; the same seed
 * gives the same run.  Header-only, included once per program.
 */
#ifndef KVRT_TESTS_XORSHIFT_H
#define KVRT_TESTS_XORSHIFT_H

#include <stdint.h>

static uint64_t rng = XORSHIFT_SEED;

/* xorshift64 (13, 7, 17) */
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#endif /* KVRT_TESTS_XORSHIFT_H */
