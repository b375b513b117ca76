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
 * kvb_parse_args() on a table of every kind: values (after a space or
 * '=') land in their variables, out-of-range and unknown options are
 * usage errors (2) that leave the run undone, "--" stops parsing.  kvb_measure(): the calls it
 * makes (a warm call of each side, then the repetitions; or calibration),
 * and a side's error comes back with nothing reported.
 *
 * Five TAP tests (selftests/tap.h); ends with
 * "# test_report: N passed, N failed, N skipped"; exits 1 on any failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../selftests/tap.h"
#include "../report.h"

#define TRIALS 2000

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

/* Both random tests draw the same (v, l) sequence from this seed. */
#define SEED 12345

/* "C" into *(char *)dst; any other value is refused. */
static int parse_c(const char *v, void *dst)
{
	if (strcmp(v, "C"))
		return -1;
	*(char *)dst = 'C';
	return 0;
}

struct parsed {
	bool flag;
	const char *str;
	int i;
	unsigned int u;
	unsigned long ul;
	double d;
	char c;
};

static const struct kvb_opts test_defaults = { .bench = "test", .reps = 5, .rep_time = 0.2 };

/* kvb_parse_args over argv (NULL-terminated) into *p: 0 to run, else the exit status. */
static int parse(char **argv, struct parsed *p, struct kvb_opts *o, int *rest)
{
	const struct topt opts[] = {
		{ .name = "--flag", .kind = TOPT_FLAG, .dst = &p->flag, .help = "f" },
		{ .name = "--str", .arg = "S", .kind = TOPT_STR, .dst = &p->str, .help = "s" },
		{ .name = "--int", .arg = "N", .kind = TOPT_INT, .dst = &p->i, .min = 0, .max = 7,
		  .want = "0 to 7", .help = "i" },
		{ .name = "--uint", .arg = "N", .kind = TOPT_UINT, .dst = &p->u, .min = 2, .max = 9,
		  .want = "2 to 9", .help = "u" },
		{ .name = "--ulong", .arg = "N", .kind = TOPT_ULONG, .dst = &p->ul, .min = 0,
		  .max = 1UL << 40, .want = "0 to 2^40", .help = "ul" },
		{ .name = "--double", .arg = "D", .kind = TOPT_DOUBLE, .dst = &p->d, .min = 0.5,
		  .max = 1.5, .want = "in [0.5, 1.5]", .help = "d" },
		{ .name = "--c", .arg = "C", .kind = TOPT_FUNC, .dst = &p->c, .parse = parse_c,
		  .want = "C", .help = "c" },
		{ .name = "--", .kind = TOPT_REST, .help = "rest" },
		{ NULL },
	};
	const struct kvb_cmd cmd = { .defaults = &test_defaults, .about = "test\n", .opts = opts };
	int argc = 0, status;

	while (argv[argc])
		argc++;
	memset(p, 0, sizeof(*p));
	return kvb_parse_args(&cmd, o, argc, argv, rest, &status) ? 0 : status;
}

TEST(parser_table)
{
	char *good[] = { "test", "--flag", "--str", "x", "--int", "7", "--uint=2",
			 "--ulong", "1099511627776", "--double", "1.5", "--c", "C", "--reps=3",
			 "--json", "--", "--int", "9", NULL };
	char *bad[][4] = {
		{ "test", "--int", "8", NULL }, { "test", "--uint", "1", NULL },
		{ "test", "--ulong", "1099511627777", NULL }, { "test", "--double", "0.4", NULL },
		{ "test", "--c", "D", NULL }, { "test", "--int", NULL },
		{ "test", "--nope", NULL }, { "test", "--reps", "100", NULL },
		{ "test", "--plot", "x.svg", NULL }, { "test", "--int", "-1", NULL },
		{ "test", "--flag=1", NULL }, { "test", "--int=8", NULL }, { "test", "--in=7", NULL },
	};
	struct parsed p;
	struct kvb_opts o;
	unsigned int i;
	int ret, rest;

	ret = parse(good, &p, &o, &rest);
	CHECKF(ret == 0 && p.flag && p.str && !strcmp(p.str, "x") && p.i == 7 && p.u == 2 &&
	      p.ul == 1UL << 40 && p.d == 1.5 && p.c == 'C' && o.reps == 3 && o.json &&
	      o.rep_time == 0.2 && rest == 16,
	      "parse: ret %d flag %d i %d u %u ul %lu d %g c %c reps %u json %d rest %d", ret,
	      p.flag, p.i, p.u, p.ul, p.d, p.c, o.reps, o.json, rest);
	/* the usage errors go to stderr; only their status is checked here */
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ret = parse(bad[i], &p, &o, &rest);
		CHECKF(ret == 2, "parse %s %s: %d, expected 2", bad[i][1], bad[i][2] ? bad[i][2] : "",
		      ret);
	}
}

struct counter {
	unsigned long calls, runs;
	int fail_at;	/* the run (1-based) that fails with -EIO; 0: none */
};

static int count_run(void *ctx, unsigned long n)
{
	struct counter *c = ctx;

	c->runs++;
	c->calls += n;
	return c->fail_at && c->runs == (unsigned long)c->fail_at ? -EIO : 0;
}

TEST(measure_loop)
{
	struct kvb_opts o = { .bench = "test", .reps = 3, .rep_time = 1e-4, .quiet = true };
	struct counter cv = { 0 }, cl = { 0 };
	struct kvb_case m = {
		.value = { .run = count_run, .ctx = &cv, .units = 1 },
		.limit = { .run = count_run, .ctx = &cl, .units = 1 },
		.per_call = true,
	};
	double v = -1, l = -1;
	int ret;

	ret = kvb_measure(&o, &m, &v, &l);
	/* per call: one warm call, then at least one call per repetition, one at a time */
	CHECKF(ret == 0 && cv.runs == cv.calls && cv.calls >= 1 + o.reps && cl.calls >= 1 + o.reps &&
	      v > 0 && l > 0, "per_call: ret %d, value %lu calls in %lu runs, limit %lu, v %g l %g",
	      ret, cv.calls, cv.runs, cl.calls, v, l);

	cv = (struct counter){ 0 };
	cl = (struct counter){ 0 };
	m.per_call = false;
	ret = kvb_measure(&o, &m, &v, &l);
	/* counted: calibration runs, then one run of iters calls per repetition */
	CHECKF(ret == 0 && m.value.iters > 1 && cv.calls > o.reps * m.value.iters,
	      "counted: ret %d, iters %lu, %lu calls", ret, m.value.iters, cv.calls);

	cv = (struct counter){ .fail_at = 3 };
	cl = (struct counter){ 0 };
	m.per_call = true;
	v = l = -1;
	ret = kvb_measure(&o, &m, &v, &l);
	CHECKF(ret == -EIO && v == -1 && l == -1, "a failing side: ret %d, v %g", ret, v);
}

/* TRIALS random n: the middle pair against the brute force */
TEST(middle_pair_random)
{
	double v[KVB_MAX_REPS], l[KVB_MAX_REPS], vo, lo;
	unsigned long long seed = SEED;
	unsigned int trial, n, i, below, found;

	for (trial = 0; trial < TRIALS; trial++) {
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
		CHECKF(found && below == n / 2, "n %u: pair (%g, %g) is %s, %u of %u below", n, vo,
		       lo, found ? "an input pair" : "no input pair", below, n);
	}
}

/* TRIALS random n: the median against a sort */
TEST(median_random)
{
	double v[KVB_MAX_REPS], sv[KVB_MAX_REPS], m;
	unsigned long long seed = SEED;
	unsigned int trial, n, i;

	for (trial = 0; trial < TRIALS; trial++) {
		n = 1 + trial % KVB_MAX_REPS;
		for (i = 0; i < n; i++) {
			sv[i] = v[i] = rnd(&seed);
			rnd(&seed);	/* the l draw: keeps v the other test's */
		}
		qsort(sv, n, sizeof(*sv), cmp);
		m = n % 2 ? sv[n / 2] : (sv[n / 2 - 1] + sv[n / 2]) / 2;
		CHECKF(kvb_median(v, n) == m, "n %u: median %g, expected %g", n, kvb_median(v, n), m);
	}
}

/*
 * One fast moment and two slow ones: the middle pair is (2.0, 2.2),
 * quotient 0.909; the medians alone (2.0 and 2.0) would say 1.0.
 */
TEST(middle_pair_planted)
{
	const double pv[3] = { 1.0, 2.0, 2.1 }, pl[3] = { 1.25, 2.2, 2.0 };
	double vo, lo;

	kvb_middle_pair(pv, pl, 3, &vo, &lo);
	CHECKF(vo == 2.0 && lo == 2.2, "planted: pair (%g, %g), expected (2, 2.2)", vo, lo);
	CHECKF(kvb_median(pv, 3) / kvb_median(pl, 3) != vo / lo,
	       "planted: the medians alone agree with the pair, the case tests nothing");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	RUN(middle_pair_random);
	RUN(median_random);
	RUN(middle_pair_planted);
	RUN(parser_table);
	RUN(measure_loop);
	return tap_done("test_report");
}
