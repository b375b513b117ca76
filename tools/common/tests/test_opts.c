// SPDX-License-Identifier: GPL-2.0
/*
 * test_opts.c: the option parser kvctl, kvbench and kvrt-demo share
 * (../opts.c).  Every kind of row over "--name value" and "--name=value";
 * the exact sentence of each mistake, written out here from opts.h's
 * contract rather than taken from the code; "--" with and without a row of
 * its own; positionals; no abbreviations; strict numbers.
 *
 * TAP (selftests/tap.h); exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../selftests/tap.h"
#include "../opts.h"

struct vars {
	bool flag, on;
	const char *str;
	int i, dtype, mode;
	unsigned int u;
	unsigned long ul;
	double d;
	char c;
	const char *pos[4];
	int npos;
};

static int parse_c(const char *v, void *dst)
{
	if (strcmp(v, "C"))
		return -1;
	*(char *)dst = 'C';
	return 0;
}

static const int dtype_values[] = { 10, 20, 30 };

#define NROWS 12

static void table(struct vars *x, struct topt t[NROWS + 1], bool with_rest)
{
	const struct topt rows[NROWS + 1] = {
		{ .name = "--flag", .kind = TOPT_FLAG, .dst = &x->flag },
		{ .name = "--no-on", .kind = TOPT_CLEAR, .dst = &x->on },
		{ .name = "--str", .arg = "S", .kind = TOPT_STR, .dst = &x->str },
		{ .name = "--int", .arg = "N", .kind = TOPT_INT, .dst = &x->i, .min = 0, .max = 7 },
		{ .name = "--uint", .arg = "N", .kind = TOPT_UINT, .dst = &x->u, .min = 2, .max = 9,
		  .want = "two to nine" },
		{ .name = "--ulong", .arg = "N", .kind = TOPT_ULONG, .dst = &x->ul, .min = 0,
		  .max = 1UL << 40 },
		{ .name = "--d", .arg = "D", .kind = TOPT_DOUBLE, .dst = &x->d, .min = 0.5, .max = 1.5 },
		{ .name = "--dtype", .arg = "T", .kind = TOPT_CHOICE, .dst = &x->dtype,
		  .choices = "f32|f16|bf16", .values = dtype_values },
		{ .name = "--mode", .arg = "M", .kind = TOPT_CHOICE, .dst = &x->mode,
		  .choices = "a|b" },
		{ .name = "--c", .arg = "C", .kind = TOPT_FUNC, .dst = &x->c, .parse = parse_c,
		  .want = "the letter C" },
		{ .name = "--act", .arg = "X", .kind = TOPT_ID, .id = 7 },
		{ .name = with_rest ? "--" : "--unused", .kind = TOPT_REST },
		{ .name = NULL },
	};

	memcpy(t, rows, sizeof(rows));
}

static int take_pos(void *ctx, struct topt_args *a, const char *arg)
{
	struct vars *x = ctx;

	if (x->npos == 2) {
		snprintf(a->err, sizeof(a->err), "two at most");
		return -1;
	}
	x->pos[x->npos++] = arg;
	return 0;
}

/* topt_parse over a NULL-terminated argv (argv[0] is the program). */
static enum topt_event run(char **argv, struct vars *x, bool with_rest, bool positionals,
			   struct topt_args *a)
{
	struct topt t[NROWS + 1];
	const struct topt *tables[] = { NULL, t };
	int argc = 0;

	while (argv[argc])
		argc++;
	memset(x, 0, sizeof(*x));
	x->on = true;
	table(x, t, with_rest);
	topt_init(a, argc, argv, 1);
	return topt_parse(a, tables, 2, positionals ? take_pos : NULL, x);
}

TEST(every_kind_lands)
{
	char *argv[] = { "p", "--flag", "--no-on", "--str", "x", "--int=7", "--uint", "2",
			 "--ulong", "1099511627776", "--d=0.5", "--dtype", "bf16", "--mode=b",
			 "--c", "C", "--str=", NULL };
	struct topt_args a;
	struct vars x;
	enum topt_event e = run(argv, &x, true, false, &a);

	CHECKF(e == TOPT_END && x.flag && !x.on && x.str && !*x.str && x.i == 7 && x.u == 2 &&
	       x.ul == 1UL << 40 && x.d == 0.5 && x.dtype == 30 && x.mode == 1 && x.c == 'C',
	       "event %d err '%s' flag %d on %d i %d u %u ul %lu d %g dtype %d mode %d c %c", e,
	       a.err, x.flag, x.on, x.i, x.u, x.ul, x.d, x.dtype, x.mode, x.c);
}

/* Each mistake: the event and the whole sentence. */
TEST(mistakes_say_what_and_how)
{
	static const struct {
		const char *args[4];
		const char *err;
	} c[] = {
		{ { "--nope" }, "unknown option '--nope'" },
		{ { "--nope=1" }, "unknown option '--nope'" },
		{ { "--in", "7" }, "unknown option '--in'" },	/* no abbreviations */
		{ { "-i" }, "unknown option '-i' (options are long: --name)" },
		{ { "--flag=1" }, "--flag takes no value (got '--flag=1')" },
		{ { "--int" }, "--int needs a value (--int N)" },
		{ { "--int", "8" }, "--int wants a whole number from 0 to 7, not '8'" },
		{ { "--int", "-1" }, "--int wants a whole number from 0 to 7, not '-1'" },
		{ { "--int", "+1" }, "--int wants a whole number from 0 to 7, not '+1'" },
		{ { "--int", "1x" }, "--int wants a whole number from 0 to 7, not '1x'" },
		{ { "--int=" }, "--int wants a whole number from 0 to 7, not ''" },
		{ { "--uint", "1" }, "--uint wants two to nine, not '1'" },
		{ { "--ulong", "18446744073709551616" },
		  "--ulong wants a whole number from 0 to 1099511627776, not '18446744073709551616'" },
		{ { "--d", "2" }, "--d wants a number from 0.5 to 1.5, not '2'" },
		{ { "--d", "nan" }, "--d wants a number from 0.5 to 1.5, not 'nan'" },
		{ { "--dtype", "f8" }, "--dtype wants f32, f16 or bf16, not 'f8'" },
		{ { "--mode", "A" }, "--mode wants a or b, not 'A'" },
		{ { "--c", "D" }, "--c wants the letter C, not 'D'" },
		{ { "--act", "1" }, "--act is not handled here" },
		{ { "extra" }, "unexpected argument 'extra' (options start with --)" },
	};
	unsigned int k, n;

	for (k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		char *argv[6] = { "p" };
		struct topt_args a;
		struct vars x;
		enum topt_event e;

		for (n = 0; n < 4 && c[k].args[n]; n++)
			argv[n + 1] = (char *)c[k].args[n];
		argv[n + 1] = NULL;
		e = run(argv, &x, false, false, &a);
		CHECKF(e == TOPT_ERR && !strcmp(a.err, c[k].err), "%s: event %d, '%s', wanted '%s'",
		       c[k].args[0], e, a.err, c[k].err);
	}
}

TEST(double_dash_and_positionals)
{
	char *ends[] = { "p", "one", "--int", "3", "--", "--int", NULL };
	char *rest[] = { "p", "--int", "3", "--", "--int", "9", NULL };
	char *many[] = { "p", "a", "b", "c", NULL };
	char *dash[] = { "p", "-", NULL };
	struct topt_args a;
	struct vars x;
	enum topt_event e;

	/* no "--" row: it ends the options, what follows is positional */
	e = run(ends, &x, false, true, &a);
	CHECKF(e == TOPT_END && x.i == 3 && x.npos == 2 && !strcmp(x.pos[0], "one") &&
	       !strcmp(x.pos[1], "--int"), "event %d '%s' i %d npos %d", e, a.err, x.i, x.npos);
	/* a "--" row: parsing stops, and a.i is the first argument after it */
	e = run(rest, &x, true, true, &a);
	CHECKF(e == TOPT_AT_REST && a.i == 4 && x.i == 3, "event %d a.i %d i %d", e, a.i, x.i);
	/* the positional callback's refusal is the error */
	e = run(many, &x, false, true, &a);
	CHECKF(e == TOPT_ERR && !strcmp(a.err, "two at most") && x.npos == 2, "event %d '%s'", e,
	       a.err);
	/* "-" (standard input, by convention) is a positional */
	e = run(dash, &x, false, true, &a);
	CHECKF(e == TOPT_END && x.npos == 1 && !strcmp(x.pos[0], "-"), "event %d npos %d", e,
	       x.npos);
}

TEST(help_anywhere_and_ids)
{
	char *help[] = { "p", "--int", "3", "-h", "--int", "99", NULL };
	char *ids[] = { "p", "--act=go", "pos", "--act", "-1", NULL };
	struct topt t[NROWS + 1];
	const struct topt *tables[] = { t }, *hit;
	struct topt_args a;
	struct vars x;
	const char *v;
	enum topt_event e;

	e = run(help, &x, false, false, &a);
	CHECKF(e == TOPT_HELP && x.i == 3, "event %d i %d", e, x.i);

	table(&x, t, false);
	topt_init(&a, 5, ids, 1);
	e = topt_next(&a, tables, 1, &hit, &v);
	CHECKF(e == TOPT_OPT && hit && hit->id == 7 && !strcmp(v, "go"), "1: event %d", e);
	e = topt_next(&a, tables, 1, &hit, &v);
	CHECKF(e == TOPT_POS && !hit && !strcmp(v, "pos"), "2: event %d", e);
	/* a value may start with '-': it is the option's, not an option */
	e = topt_next(&a, tables, 1, &hit, &v);
	CHECKF(e == TOPT_OPT && hit && hit->id == 7 && !strcmp(v, "-1"), "3: event %d", e);
	e = topt_next(&a, tables, 1, &hit, &v);
	CHECKF(e == TOPT_END, "4: event %d", e);
}

TEST(usage_lines)
{
	char buf[512] = "";
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	const struct topt t[] = {
		{ .name = "--gib", .arg = "G", .kind = TOPT_DOUBLE, .help = "size\nmore" },
		{ .name = "--hidden", .kind = TOPT_FLAG },
		{ .name = NULL },
	};

	REQUIRE(f);
	topt_usage(f, t);
	fclose(f);
	CHECKF(!strcmp(buf, "  --gib G           size\n                    more\n"), "got '%s'", buf);
}

int main(void)
{
	RUN(every_kind_lands);
	RUN(mistakes_say_what_and_how);
	RUN(double_dash_and_positionals);
	RUN(help_anywhere_and_ids);
	RUN(usage_lines);
	return tap_done("test_opts");
}
