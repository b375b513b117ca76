// SPDX-License-Identifier: GPL-2.0
/*
 * test_report.c: kvbench's repetition summaries (report.c).
 *
 * kvb_middle_pair() is checked against a brute force written here: for
 * random odd and even n, the pair it returns must be one of the input
 * pairs, and exactly floor(n / 2) of the other pairs must have a smaller
 * quotient v / l (ties broken by any order: the quotients are distinct
 * here).  kvb_median() against a sort done here.  A planted case checks
 * that the pair is taken together: the medians of v and l alone would
 * give another ratio.
 *
 * Prints "# test_report: N passed, N failed"; exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../report.h"

static unsigned int passed, failed;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (cond) {                                                  \
			passed++;                                            \
		} else {                                                     \
			failed++;                                            \
			printf("not ok: " __VA_ARGS__);                      \
			printf("\n");                                        \
		}                                                            \
	} while (0)

static double rnd(unsigned long long *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return 0.5 + (double)(*s >> 11) / (double)(1ULL << 53);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(void)
{
	unsigned long long seed = 12345;
	double v[KVB_MAX_REPS], l[KVB_MAX_REPS], sv[KVB_MAX_REPS], vo, lo, m;
	unsigned int trial, n, i, below, found;

	for (trial = 0; trial < 2000; trial++) {
		n = 1 + trial % KVB_MAX_REPS;
		for (i = 0; i < n; i++) {
			v[i] = rnd(&seed);
			l[i] = rnd(&seed);
		}
		kvb_middle_pair(v, l, n, &vo, &lo);
		found = 0;
		below = 0;
		for (i = 0; i < n; i++) {
			found |= v[i] == vo && l[i] == lo;
			below += v[i] / l[i] < vo / lo;
		}
		CHECK(found && below == n / 2, "n %u: pair (%g, %g) is %s, %u of %u below", n, vo,
		      lo, found ? "an input pair" : "no input pair", below, n);

		for (i = 0; i < n; i++)
			sv[i] = v[i];
		qsort(sv, n, sizeof(*sv), cmp);
		m = n % 2 ? sv[n / 2] : (sv[n / 2 - 1] + sv[n / 2]) / 2;
		CHECK(kvb_median(v, n) == m, "n %u: median %g, expected %g", n, kvb_median(v, n), m);
	}

	/*
	 * One fast moment and two slow ones: the middle pair is (2.0, 2.2),
	 * quotient 0.909; the medians alone (2.0 and 2.0) would say 1.0.
	 */
	{
		const double pv[3] = { 1.0, 2.0, 2.1 }, pl[3] = { 1.25, 2.2, 2.0 };

		kvb_middle_pair(pv, pl, 3, &vo, &lo);
		CHECK(vo == 2.0 && lo == 2.2, "planted: pair (%g, %g), expected (2, 2.2)", vo, lo);
		CHECK(kvb_median(pv, 3) / kvb_median(pl, 3) != vo / lo,
		      "planted: the medians alone agree with the pair, the case tests nothing");
	}
	printf("# test_report: %u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
