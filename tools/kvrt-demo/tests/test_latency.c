// SPDX-License-Identifier: GPL-2.0
/*
 * test_latency.c: the demo's decode speed (report_tpot in report.c), the
 * time per output token a request sees, against values worked out here by
 * hand: a request's (done - first) / (n_gen - 1) in ms, requests with
 * fewer than two tokens left out, mean and nearest-rank percentiles over
 * the rest.
 *
 * TAP (selftests/tap.h); exits 1 on any failure.
 */
#include <math.h>
#include <string.h>

#include "../../../selftests/tap.h"
#include "../report.h"

TEST(tpot_per_request)
{
	/* first, done in s; n_gen: 11 tokens over 1 s = 100 ms each, and so on */
	struct req_result req[] = {
		{ .first = 1.0, .done = 2.0, .n_gen = 11 },	/* 100 ms */
		{ .first = 0.5, .done = 0.5, .n_gen = 1 },	/* one token: left out */
		{ .first = 2.0, .done = 2.2, .n_gen = 3 },	/* 100 ms */
		{ .first = 3.0, .done = 3.4, .n_gen = 5 },	/* 100 ms */
		{ .first = 0.0, .done = 0.0, .n_gen = 0 },	/* nothing: left out */
		{ .first = 1.0, .done = 1.5, .n_gen = 2 },	/* 500 ms */
	};
	struct pass_result r = { .n_requests = 6, .req = req };
	struct latency t = report_tpot(&r);

	CHECK_EQ(4, t.n);
	CHECKF(fabs(t.mean - 200.0) < 1e-9, "mean %g, wanted 200", t.mean);
	CHECKF(fabs(t.p50 - 100.0) < 1e-9, "p50 %g, wanted 100", t.p50);
	CHECKF(t.p90 > 100.0 && t.p90 <= 500.0, "p90 %g, wanted in (100, 500]", t.p90);
}

TEST(tpot_no_request)
{
	struct req_result req[] = { { .first = 1.0, .done = 1.0, .n_gen = 1 } };
	struct pass_result r = { .n_requests = 1, .req = req };
	struct latency t = report_tpot(&r);

	CHECKF(t.n == 0 && t.mean == 0 && t.p50 == 0, "n %u mean %g", t.n, t.mean);
}

int main(void)
{
	RUN(tpot_per_request);
	RUN(tpot_no_request);
	return tap_done("test_latency");
}
