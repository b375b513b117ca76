// SPDX-License-Identifier: GPL-2.0
/*
 * opts.c: the command-line parser kvctl, kvbench and kvrt-demo share
 * (opts.h).  Hand-rolled rather than getopt_long: no abbreviations (a
 * prefix that matches today stops matching when an option is added), and
 * every mistake comes back as a sentence the tool prints with its name.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"

static enum topt_event fail(struct topt_args *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static enum topt_event fail(struct topt_args *a, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(a->err, sizeof(a->err), fmt, ap);
	va_end(ap);
	return TOPT_ERR;
}

void topt_init(struct topt_args *a, int argc, char **argv, int first)
{
	a->argc = argc;
	a->argv = argv;
	a->i = first;
	a->no_more_opts = false;
	a->err[0] = '\0';
}

static const struct topt *find(const struct topt *const *tables, size_t ntables, const char *a,
			       size_t len)
{
	const struct topt *t;
	size_t k;

	for (k = 0; k < ntables; k++)
		for (t = tables[k]; t && t->name; t++)
			if (strlen(t->name) == len && !strncmp(t->name, a, len))
				return t;
	return NULL;
}

static bool takes_value(const struct topt *t)
{
	switch (t->kind) {
	case TOPT_FLAG:
	case TOPT_CLEAR:
	case TOPT_REST:
		return false;
	case TOPT_ID:
		return t->arg != NULL;
	default:
		return true;
	}
}

enum topt_event topt_next(struct topt_args *a, const struct topt *const *tables, size_t ntables,
			  const struct topt **hit, const char **val)
{
	const char *arg, *eq;
	size_t len;

	*hit = NULL;
	*val = NULL;
	if (a->i >= a->argc)
		return TOPT_END;
	arg = a->argv[a->i++];
	if (a->no_more_opts || arg[0] != '-' || !strcmp(arg, "-")) {
		*val = arg;
		return TOPT_POS;
	}
	if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
		return TOPT_HELP;
	if (arg[1] != '-')
		return fail(a, "unknown option '%s' (options are long: --name)", arg);
	eq = strchr(arg, '=');
	len = eq ? (size_t)(eq - arg) : strlen(arg);
	*hit = find(tables, ntables, arg, len);
	if (!*hit) {
		if (!strcmp(arg, "--")) {
			a->no_more_opts = true;
			return topt_next(a, tables, ntables, hit, val);
		}
		return fail(a, "unknown option '%.*s'", (int)len, arg);
	}
	if (!takes_value(*hit)) {
		if (eq)
			return fail(a, "%s takes no value (got '%s')", (*hit)->name, arg);
		return (*hit)->kind == TOPT_REST ? TOPT_AT_REST : TOPT_OPT;
	}
	if (eq)
		*val = eq + 1;
	else if (a->i < a->argc)
		*val = a->argv[a->i++];
	else
		return fail(a, "%s needs a value (%s %s)", (*hit)->name, (*hit)->name,
			    (*hit)->arg ? (*hit)->arg : "VALUE");
	return TOPT_OPT;
}

int topt_parse_ulong(const char *v, unsigned long min, unsigned long max, unsigned long *out)
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

int topt_parse_double(const char *v, double min, double max, double *out)
{
	char *end;
	double d;

	if (!*v)
		return -1;
	errno = 0;
	d = strtod(v, &end);
	if (*end || errno || !(d >= min && d <= max))
		return -1;
	*out = d;
	return 0;
}

/* The index of v among "a|b|c", or -1. */
static int choice_index(const char *choices, const char *v)
{
	size_t n = strlen(v);
	const char *p = choices;
	int i = 0;

	while (p && *p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (len == n && !strncmp(p, v, n))
			return i;
		p = bar ? bar + 1 : NULL;
		i++;
	}
	return -1;
}

/* "a, b or c" from "a|b|c". */
static void choices_words(char *buf, size_t size, const char *choices)
{
	const char *p = choices, *last = strrchr(choices, '|');
	size_t used = 0;

	buf[0] = '\0';
	while (p && *p && used < size) {
		const char *bar = strchr(p, '|');
		int len = bar ? (int)(bar - p) : (int)strlen(p);

		used += (size_t)snprintf(buf + used, size - used, "%.*s%s", len, p,
					 !bar ? "" : bar == last ? " or " : ", ");
		p = bar ? bar + 1 : NULL;
	}
}

static int set_value(const struct topt *t, const char *v)
{
	unsigned long n;
	double d;
	int i;

	switch (t->kind) {
	case TOPT_FLAG:
	case TOPT_CLEAR:
		*(bool *)t->dst = t->kind == TOPT_FLAG;
		return 0;
	case TOPT_STR:
		*(const char **)t->dst = v;
		return 0;
	case TOPT_FUNC:
		return t->parse(v, t->dst);
	case TOPT_CHOICE:
		i = choice_index(t->choices, v);
		if (i < 0)
			return -1;
		*(int *)t->dst = t->values ? t->values[i] : i;
		return 0;
	case TOPT_DOUBLE:
		if (topt_parse_double(v, t->min, t->max, &d))
			return -1;
		*(double *)t->dst = d;
		return 0;
	case TOPT_INT:
	case TOPT_UINT:
	case TOPT_ULONG:
		if (topt_parse_ulong(v, (unsigned long)t->min, (unsigned long)t->max, &n))
			return -1;
		if (t->kind == TOPT_INT)
			*(int *)t->dst = (int)n;
		else if (t->kind == TOPT_UINT)
			*(unsigned int *)t->dst = (unsigned int)n;
		else
			*(unsigned long *)t->dst = n;
		return 0;
	default:
		return -1;
	}
}

int topt_set(struct topt_args *a, const struct topt *t, const char *v)
{
	char words[160];

	if (!set_value(t, v))
		return 0;
	if (t->want)
		snprintf(words, sizeof(words), "%s", t->want);
	else if (t->kind == TOPT_CHOICE)
		choices_words(words, sizeof(words), t->choices);
	else if (t->kind == TOPT_DOUBLE)
		snprintf(words, sizeof(words), "a number from %g to %g", t->min, t->max);
	else if (t->kind == TOPT_INT || t->kind == TOPT_UINT || t->kind == TOPT_ULONG)
		snprintf(words, sizeof(words), "a whole number from %.0f to %.0f", t->min, t->max);
	else
		snprintf(words, sizeof(words), "another value");
	fail(a, "%s wants %s, not '%s'", t->name, words, v);
	return -1;
}

enum topt_event topt_parse(struct topt_args *a, const struct topt *const *tables, size_t ntables,
			   int (*pos)(void *ctx, struct topt_args *a, const char *arg), void *ctx)
{
	const struct topt *t;
	const char *v;
	enum topt_event e;

	while ((e = topt_next(a, tables, ntables, &t, &v)) != TOPT_END) {
		switch (e) {
		case TOPT_OPT:
			if (t->kind == TOPT_ID)
				return fail(a, "%s is not handled here", t->name);
			if (topt_set(a, t, v))
				return TOPT_ERR;
			break;
		case TOPT_POS:
			if (!pos)
				return fail(a, "unexpected argument '%s' (options start with --)", v);
			if (pos(ctx, a, v))
				return TOPT_ERR;
			break;
		default:
			return e;
		}
	}
	return TOPT_END;
}

void topt_usage_line(FILE *f, const char *name, const char *arg, const char *help)
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

void topt_usage(FILE *f, const struct topt *t)
{
	for (; t && t->name; t++)
		if (t->help)
			topt_usage_line(f, t->name, t->arg, t->help);
}
