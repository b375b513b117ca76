// SPDX-License-Identifier: GPL-2.0
/*
 * report.c: the options, clock, medians, the measuring of a case, result
 * lines and progress line that every kvbench subcommand shares (report.h).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report.h"

/* ---- options -------------------------------------------------------------- */

void kvb_usage(const struct kvb_cmd *cmd, FILE *f)
{
	const struct kvb_opts *d = cmd->defaults;
	char line[96];

	fprintf(f, "usage: kvbench %s %s\n\n%s\noptions:\n", d->bench,
		cmd->synopsis ? cmd->synopsis : "[--json] [options]", cmd->about);
	topt_usage(f, cmd->opts);
	if (!cmd->no_common) {
		topt_usage_line(f, "--json", NULL, "one JSON object per case per line on stdout");
		snprintf(line, sizeof(line),
			 "repetitions per case, median reported (default %u, 1..%d)", d->reps,
			 KVB_MAX_REPS);
		topt_usage_line(f, "--reps", "N", line);
		snprintf(line, sizeof(line), "seconds per repetition, at least (default %g)",
			     d->rep_time);
		topt_usage_line(f, "--rep-time", "SEC", line);
		if (d->can_plot)
			topt_usage_line(f, "--plot", "FILE",
					"also draw the sweep with gnuplot into FILE (.svg or\n.png)");
		topt_usage_line(f, "--progress", NULL,
				"a progress line on stderr even when it is not a terminal");
		topt_usage_line(f, "--quiet", NULL, "no progress line and no notes on stderr");
	}
	topt_usage_line(f, "-h, --help", NULL, "this text");
	if (cmd->epilogue)
		fprintf(f, "\n%s", cmd->epilogue);
}

int kvb_usage_error(const struct kvb_cmd *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvbench %s: ", cmd->defaults->bench);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n\n");
	kvb_usage(cmd, stderr);
	return 2;
}

/* A plot file name gnuplot can take between single quotes. */
static int parse_plot(const char *v, void *dst)
{
	size_t n = strlen(v);

	if (strpbrk(v, "'\n\r") || n <= 4 || (strcmp(v + n - 4, ".svg") && strcmp(v + n - 4, ".png")))
		return -1;
	*(const char **)dst = v;
	return 0;
}

#define NR_COMMON 6

/* The common options, as a table over o. */
static void common_table(struct kvb_opts *o, struct topt t[NR_COMMON + 1])
{
	const struct topt c[NR_COMMON + 1] = {
		{ .name = "--json", .kind = TOPT_FLAG, .dst = &o->json },
		{ .name = "--quiet", .kind = TOPT_FLAG, .dst = &o->quiet },
		{ .name = "--progress", .kind = TOPT_FLAG, .dst = &o->progress },
		{ .name = "--reps", .arg = "N", .kind = TOPT_UINT, .dst = &o->reps, .min = 1,
		  .max = KVB_MAX_REPS, .want = "a number from 1 to 99" },
		{ .name = "--rep-time", .arg = "SEC", .kind = TOPT_DOUBLE, .dst = &o->rep_time,
		  .min = 1e-9, .max = 60, .want = "seconds in (0, 60]" },
		{ .name = "--plot", .arg = "FILE", .kind = TOPT_FUNC, .dst = &o->plot,
		  .parse = parse_plot,
		  .want = "a FILE.svg or FILE.png name (without quotes or newlines)" },
		{ .name = NULL },
	};

	memcpy(t, c, sizeof(c));
}

/* The option parsing itself: -1 to run, else the exit status. */
static int parse_args(const struct kvb_cmd *cmd, struct kvb_opts *o, int argc, char **argv,
		      int *rest)
{
	struct topt common[NR_COMMON + 1];
	const struct topt *tables[2] = { cmd->opts, NULL }, *t;
	struct topt_args a;
	const char *v;

	*o = *cmd->defaults;
	common_table(o, common);
	if (!cmd->no_common)
		tables[1] = common;
	if (rest)
		*rest = argc;
	topt_init(&a, argc, argv, 1);
	for (;;) {
		switch (topt_next(&a, tables, 2, &t, &v)) {
		case TOPT_END:
			return -1;
		case TOPT_HELP:
			kvb_usage(cmd, stdout);
			return 0;
		case TOPT_AT_REST:
			if (rest)
				*rest = a.i;
			return -1;
		case TOPT_POS:
			return kvb_usage_error(cmd, "unexpected argument '%s' (options start with --)",
					       v);
		case TOPT_OPT:
			if (t->dst == (void *)&o->plot && !o->can_plot)
				return kvb_usage_error(cmd,
						       "--plot: %s has no sweep to plot (attn and copy do)",
						       o->bench);
			if (!topt_set(&a, t, v))
				break;
			/* fall through */
		default:
			return kvb_usage_error(cmd, "%s%s", a.err,
					       !strncmp(a.err, "unknown option", 14) &&
					       cmd->unknown_hint ? cmd->unknown_hint : "");
		}
	}
}

bool kvb_parse_args(const struct kvb_cmd *cmd, struct kvb_opts *o, int argc, char **argv,
		    int *rest, int *status)
{
	*status = parse_args(cmd, o, argc, argv, rest);
	return *status < 0;
}

bool kvb_parse(const struct kvb_opts *defaults, const char *about, const struct topt *opts,
	       struct kvb_opts *o, int argc, char **argv, int *status)
{
	const struct kvb_cmd cmd = { .defaults = defaults, .about = about, .opts = opts };

	return kvb_parse_args(&cmd, o, argc, argv, NULL, status);
}

/* ---- clock and medians ------------------------------------------------------ */

double kvb_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double kvb_now_s(void)
{
	return kvb_now_ns() * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double kvb_median(const double *v, unsigned int n)
{
	double s[KVB_MAX_REPS];

	if (!n)
		return 0;
	if (n > KVB_MAX_REPS)
		n = KVB_MAX_REPS;
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

void kvb_middle_pair(const double *v, const double *l, unsigned int n, double *v_out,
		     double *l_out)
{
	unsigned int idx[KVB_MAX_REPS], i, j, t;

	if (n > KVB_MAX_REPS)
		n = KVB_MAX_REPS;
	if (!n) {
		*v_out = *l_out = 0;
		return;
	}
	for (i = 0; i < n; i++)
		idx[i] = i;
	for (i = 1; i < n; i++)	/* insertion sort by v / l: n <= 99 */
		for (j = i; j > 0 && v[idx[j]] * l[idx[j - 1]] < v[idx[j - 1]] * l[idx[j]]; j--) {
			t = idx[j];
			idx[j] = idx[j - 1];
			idx[j - 1] = t;
		}
	*v_out = v[idx[n / 2]];
	*l_out = l[idx[n / 2]];
}

/* ---- measuring a case ---------------------------------------------------- */

int kvb_calibrate(struct kvb_side *s, double rep_time)
{
	double want = rep_time * 1e9, ns, t0;
	unsigned long iters = 1;
	int ret;

	for (;;) {
		t0 = kvb_now_ns();
		ret = s->run(s->ctx, iters);
		ns = kvb_now_ns() - t0;
		if (ret)
			return ret;
		if (ns >= want / 8 || iters >= (1UL << 40))
			break;
		iters *= ns < want / 1000 ? 16 : 2;
	}
	s->iters = (unsigned long)((double)iters * want / (ns > 1 ? ns : 1)) + 1;
	return 0;
}

int kvb_time_counted(struct kvb_side *s, double *sec)
{
	double t0 = kvb_now_s();
	int ret = s->run(s->ctx, s->iters);

	*sec = (kvb_now_s() - t0) / ((double)s->iters * s->units);
	return ret;
}

int kvb_time_calls(struct kvb_side *s, double rep_time, double *sec)
{
	double t0 = kvb_now_s(), t;
	unsigned long n = 0;
	int ret;

	do {
		ret = s->run(s->ctx, 1);
		if (ret)
			return ret;
		n++;
		t = kvb_now_s() - t0;
	} while (t < rep_time);
	*sec = t / ((double)n * s->units);
	return 0;
}

static int time_rep(const struct kvb_opts *o, const struct kvb_case *c, struct kvb_side *s,
		    double *sec)
{
	return c->per_call ? kvb_time_calls(s, o->rep_time, sec) : kvb_time_counted(s, sec);
}

int kvb_measure(const struct kvb_opts *o, struct kvb_case *c, double *v, double *l)
{
	double vs[KVB_MAX_REPS], ls[KVB_MAX_REPS];
	unsigned int r;
	int ret;

	if (c->per_call) {
		ret = c->limit.run(c->limit.ctx, 1);
		if (!ret)
			ret = c->value.run(c->value.ctx, 1);
	} else {
		ret = kvb_calibrate(&c->limit, o->rep_time);
		if (!ret)
			ret = kvb_calibrate(&c->value, o->rep_time);
	}
	for (r = 0; !ret && r < o->reps && r < KVB_MAX_REPS; r++) {
		ret = time_rep(o, c, &c->limit, &ls[r]);
		if (!ret)
			ret = time_rep(o, c, &c->value, &vs[r]);
	}
	if (ret)
		return ret;
	if (c->middle_pair) {
		kvb_middle_pair(vs, ls, o->reps, v, l);
	} else {
		*v = kvb_median(vs, o->reps);
		*l = kvb_median(ls, o->reps);
	}
	return 0;
}

int kvb_measure_report(const struct kvb_report *r, const char *name, struct kvb_case *c,
		       const char *unit, const char *limit_unit, double *v, double *l)
{
	double vsec, lsec, vo, lo;
	int ret = kvb_measure(r->o, c, &vsec, &lsec);

	if (ret)
		return ret;
	if (r->ratio == KVB_COST) {
		vo = vsec * 1e9;
		lo = lsec * 1e9;
	} else {
		vo = 1 / vsec / 1e9;
		lo = 1 / lsec / 1e9;
	}
	kvb_report(r, name, vo, unit, lo, limit_unit);
	if (v)
		*v = vo;
	if (l)
		*l = lo;
	return 0;
}

/* ---- progress ------------------------------------------------------------- */

static bool progress_live;	/* a terminal line is showing */
static double progress_t0;

static void progress_clear(void)
{
	if (progress_live) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		progress_live = false;
	}
}

void kvb_progress(const struct kvb_opts *o, unsigned int i, unsigned int n, const char *what)
{
	bool tty = isatty(STDERR_FILENO);
	char step[32] = "";

	if (o->quiet || (!tty && !o->progress))
		return;
	if (!progress_t0)
		progress_t0 = kvb_now_s();
	if (n)
		snprintf(step, sizeof(step), "[%u/%u] ", i, n);
	if (tty) {
		/* Rewritten in place; cleared before a result line goes out. */
		fprintf(stderr, "\r\033[Kkvbench %s: %s%s (%.0f s)", o->bench, step, what,
			kvb_now_s() - progress_t0);
		progress_live = true;
	} else {
		fprintf(stderr, "kvbench %s: %s%s\n", o->bench, step, what);
	}
	fflush(stderr);
}

void kvb_progress_end(void)
{
	progress_clear();
}

void kvb_note(const struct kvb_opts *o, const char *fmt, ...)
{
	va_list ap;

	if (o->quiet)
		return;
	progress_clear();
	fprintf(stderr, "kvbench %s: ", o->bench);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- result lines ----------------------------------------------------------- */

/* JSON has no NaN or infinity: those print as 0. */
static void format_number(char *buf, size_t len, double v)
{
	if (!isfinite(v))
		v = 0;
	snprintf(buf, len, v >= 1000 ? "%.0f" : "%.4g", v);
}

void kvb_report_header(const struct kvb_report *r, const char *value_head)
{
	if (r->o->json)
		return;
	progress_clear();
	printf("%-*s %*s %*s  %-*s %*s\n", r->name_w, "case", r->num_w, value_head, r->num_w,
	       "limit", r->unit_w, "limit unit", r->ratio_w, "ratio");
	fflush(stdout);
}

void kvb_report(const struct kvb_report *r, const char *name, double value, const char *unit,
		double limit, const char *limit_unit)
{
	double ratio;
	char v[32], l[32], q[32];

	if (r->ratio == KVB_COST)
		ratio = value > 0 ? limit / value : 0;
	else
		ratio = limit > 0 ? value / limit : 0;
	format_number(v, sizeof(v), value);
	format_number(l, sizeof(l), limit);
	format_number(q, sizeof(q), ratio);
	if (isnan(limit)) {	/* absent: null, "-" in the table */
		snprintf(l, sizeof(l), "%s", r->o->json ? "null" : "-");
		snprintf(q, sizeof(q), "%s", r->o->json ? "null" : "-");
	}
	progress_clear();
	if (r->o->json)
		printf("{\"bench\":\"%s\",\"case\":\"%s\",\"value\":%s,\"unit\":\"%s\","
		       "\"limit\":%s,\"limit_unit\":\"%s\",\"ratio\":%s}\n",
		       r->o->bench, name, v, unit, l, limit_unit, q);
	else
		printf("%-*s %*s %*s  %-*s %*s\n", r->name_w, name, r->num_w, v, r->num_w, l,
		       r->unit_w, limit_unit, r->ratio_w, q);
	fflush(stdout);
}
