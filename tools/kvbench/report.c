// SPDX-License-Identifier: GPL-2.0
/*
 * report.c: the options, clock, medians, result lines and progress line
 * that every kvbench subcommand shares (report.h).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
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

int kvb_usage_error(const struct kvb_opts *o, void (*usage)(FILE *f), const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvbench %s: ", o->bench);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n\n");
	usage(stderr);
	return 2;
}

__attribute__((format(printf, 2, 3)))
static int common_error(const struct kvb_opts *o, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvbench %s: ", o->bench);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (kvbench %s --help)\n", o->bench);
	return 2;
}

/* A plot file name gnuplot can take between single quotes. */
static bool plot_name_ok(const char *v)
{
	size_t n = strlen(v);

	if (strpbrk(v, "'\n\r"))
		return false;
	return (n > 4 && !strcmp(v + n - 4, ".svg")) || (n > 4 && !strcmp(v + n - 4, ".png"));
}

int kvb_common_opt(struct kvb_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	unsigned long n;
	double t;

	if (!strcmp(a, "--json")) {
		o->json = true;
		return 1;
	}
	if (!strcmp(a, "--quiet")) {
		o->quiet = true;
		return 1;
	}
	if (!strcmp(a, "--progress")) {
		o->progress = true;
		return 1;
	}
	if (strcmp(a, "--reps") && strcmp(a, "--rep-time") && strcmp(a, "--plot"))
		return 0;
	if (*i + 1 >= argc)
		return common_error(o, "option '%s' needs a value", a);
	v = argv[++*i];
	if (!strcmp(a, "--reps")) {
		if (kvb_parse_ulong(v, 1, KVB_MAX_REPS, &n))
			return common_error(o, "--reps: '%s' is not a number from 1 to 99", v);
		o->reps = (unsigned int)n;
	} else if (!strcmp(a, "--rep-time")) {
		if (kvb_parse_double(v, 1e-9, 60, &t))
			return common_error(o, "--rep-time: '%s' is not seconds in (0, 60]", v);
		o->rep_time = t;
	} else {
		if (!o->can_plot)
			return common_error(o, "--plot: %s has no sweep to plot (attn and copy do)",
					    o->bench);
		if (!plot_name_ok(v))
			return common_error(o, "--plot: '%s' is not a FILE.svg or FILE.png name "
					    "(without quotes or newlines)", v);
		o->plot = v;
	}
	return 1;
}

void kvb_common_usage(FILE *f, const struct kvb_opts *d)
{
	fprintf(f,
		"  --json            one JSON object per case per line on stdout\n"
		"  --reps N          repetitions per case, median reported (default %u, 1..%d)\n"
		"  --rep-time SEC    seconds per repetition, at least (default %g)\n",
		d->reps, KVB_MAX_REPS, d->rep_time);
	if (d->can_plot)
		fprintf(f,
			"  --plot FILE       also draw the sweep with gnuplot into FILE (.svg or\n"
			"                    .png)\n");
	fprintf(f,
		"  --progress        a progress line on stderr even when it is not a terminal\n"
		"  --quiet           no progress line and no notes on stderr\n"
		"  -h, --help        this text\n");
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
static void num(char *buf, size_t len, double v)
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
	num(v, sizeof(v), value);
	num(l, sizeof(l), limit);
	num(q, sizeof(q), ratio);
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
