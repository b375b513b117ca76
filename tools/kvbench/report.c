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

int kvb_parse_ulong(const char *v, unsigned long min, unsigned long max, unsigned long *out)
{
	unsigned long n;
	char *end;

	if (!*v || *v == '-' || *v == '+')
		return -1;
	errno = 0;
	n = strtoul(v, &end, 10);
	if (*end || errno || n < min || n > max)
		return -1;
	*out = n;
	return 0;
}

int kvb_parse_double(const char *v, double min, double max, double *out)
{
	char *end;
	double d;

	if (!*v)
		return -1;
	d = strtod(v, &end);
	if (*end || !(d >= min && d <= max))
		return -1;
	*out = d;
	return 0;
}

/* One option's --help line: "  --name ARG" in 18 columns, then its help. */
static void usage_line(FILE *f, const char *name, const char *arg, const char *help)
{
	char head[64];
	const char *nl;

	snprintf(head, sizeof(head), "%s%s%s", name, arg ? " " : "", arg ? arg : "");
	fprintf(f, "  %-17s ", head);
	while ((nl = strchr(help, '\n'))) {
		fprintf(f, "%.*s\n%20s", (int)(nl - help), help, "");
		help = nl + 1;
	}
	fprintf(f, "%s\n", help);
}

void kvb_usage(const struct kvb_cmd *cmd, FILE *f)
{
	const struct kvb_opts *d = cmd->defaults;
	const struct kvb_opt *t;
	char line[96];

	fprintf(f, "usage: kvbench %s %s\n\n%s\noptions:\n", d->bench,
		cmd->synopsis ? cmd->synopsis : "[--json] [options]", cmd->about);
	for (t = cmd->opts; t && t->name; t++)
		usage_line(f, t->name, t->arg, t->help);
	if (!cmd->no_common) {
		usage_line(f, "--json", NULL, "one JSON object per case per line on stdout");
		snprintf(line, sizeof(line),
			 "repetitions per case, median reported (default %u, 1..%d)", d->reps,
			 KVB_MAX_REPS);
		usage_line(f, "--reps", "N", line);
		snprintf(line, sizeof(line), "seconds per repetition, at least (default %g)",
			 d->rep_time);
		usage_line(f, "--rep-time", "SEC", line);
		if (d->can_plot)
			usage_line(f, "--plot", "FILE",
				   "also draw the sweep with gnuplot into FILE (.svg or\n.png)");
		usage_line(f, "--progress", NULL,
			   "a progress line on stderr even when it is not a terminal");
		usage_line(f, "--quiet", NULL, "no progress line and no notes on stderr");
	}
	usage_line(f, "-h, --help", NULL, "this text");
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
static void common_table(struct kvb_opts *o, struct kvb_opt t[NR_COMMON])
{
	const struct kvb_opt c[NR_COMMON] = {
		{ .name = "--json", .kind = KVB_FLAG, .dst = &o->json },
		{ .name = "--quiet", .kind = KVB_FLAG, .dst = &o->quiet },
		{ .name = "--progress", .kind = KVB_FLAG, .dst = &o->progress },
		{ .name = "--reps", .kind = KVB_UINT, .dst = &o->reps, .min = 1, .max = KVB_MAX_REPS,
		  .bad = "is not a number from 1 to 99" },
		{ .name = "--rep-time", .kind = KVB_DOUBLE, .dst = &o->rep_time, .min = 1e-9,
		  .max = 60, .bad = "is not seconds in (0, 60]" },
		{ .name = "--plot", .kind = KVB_FUNC, .dst = &o->plot, .parse = parse_plot,
		  .bad = "is not a FILE.svg or FILE.png name (without quotes or newlines)" },
	};

	memcpy(t, c, sizeof(c));
}

/* The option named by a's first len characters, among at most n of t. */
static const struct kvb_opt *find_opt(const struct kvb_opt *t, size_t n, const char *a,
				      size_t len)
{
	for (; t && n && t->name; t++, n--)
		if (strlen(t->name) == len && !strncmp(t->name, a, len))
			return t;
	return NULL;
}

/* An option's value into its variable: 0, or -1 when the option does not take it. */
static int set_value(const struct kvb_opt *t, const char *v)
{
	unsigned long n;
	double d;

	switch (t->kind) {
	case KVB_STR:
		*(const char **)t->dst = v;
		return 0;
	case KVB_FUNC:
		return t->parse(v, t->dst);
	case KVB_DOUBLE:
		if (kvb_parse_double(v, t->min, t->max, &d))
			return -1;
		*(double *)t->dst = d;
		return 0;
	default:
		if (kvb_parse_ulong(v, (unsigned long)t->min, (unsigned long)t->max, &n))
			return -1;
		if (t->kind == KVB_INT)
			*(int *)t->dst = (int)n;
		else if (t->kind == KVB_UINT)
			*(unsigned int *)t->dst = (unsigned int)n;
		else
			*(unsigned long *)t->dst = n;
		return 0;
	}
}

/* The option parsing itself: -1 to run, else the exit status. */
static int parse_args(const struct kvb_cmd *cmd, struct kvb_opts *o, int argc, char **argv,
		      int *rest)
{
	struct kvb_opt common[NR_COMMON];
	const struct kvb_opt *t;
	const char *eq, *v;
	int i, len;

	*o = *cmd->defaults;
	common_table(o, common);
	if (rest)
		*rest = argc;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			kvb_usage(cmd, stdout);
			return 0;
		}
		/* "--name=value" as well as "--name value", as kvctl and kvrt-demo take them */
		eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
		len = eq ? (int)(eq - a) : (int)strlen(a);
		t = find_opt(cmd->opts, SIZE_MAX, a, (size_t)len);
		if (!t && !cmd->no_common)
			t = find_opt(common, NR_COMMON, a, (size_t)len);
		if (!t)
			return kvb_usage_error(cmd, "unknown option '%.*s'%s", len, a,
					       cmd->unknown_hint ? cmd->unknown_hint : "");
		if (eq && (t->kind == KVB_REST || t->kind == KVB_FLAG))
			return kvb_usage_error(cmd, "option '%.*s' takes no value (got '%s')", len,
					       a, a);
		if (t->kind == KVB_REST) {
			if (rest)
				*rest = i + 1;
			return -1;
		}
		if (t->kind == KVB_FLAG) {
			*(bool *)t->dst = true;
			continue;
		}
		if (!eq && i + 1 >= argc)
			return kvb_usage_error(cmd, "option '%s' needs a value", a);
		v = eq ? eq + 1 : argv[++i];
		if (t->dst == (void *)&o->plot && !o->can_plot)
			return kvb_usage_error(cmd, "--plot: %s has no sweep to plot (attn and copy do)",
					       o->bench);
		if (set_value(t, v))
			return kvb_usage_error(cmd, "%.*s: '%s' %s", len, a, v, t->bad);
	}
	return -1;
}

bool kvb_parse_args(const struct kvb_cmd *cmd, struct kvb_opts *o, int argc, char **argv,
		    int *rest, int *status)
{
	*status = parse_args(cmd, o, argc, argv, rest);
	return *status < 0;
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
