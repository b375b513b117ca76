/* SPDX-License-Identifier: GPL-2.0 */
/*
 * opts.h: the one command-line style of kvctl, kvbench and kvrt-demo.
 *
 *   - long options only: "--name value" or "--name=value";
 *   - -h and --help anywhere;
 *   - "--" ends the options (what follows is positional), unless the table
 *     gives "--" a meaning of its own (TOPT_REST);
 *   - a value the option cannot take is "--name wants WANT, not 'VALUE'",
 *     so that the message says how to do it right.
 *
 * An option is a row of a table.  A declarative row (TOPT_FLAG .. TOPT_FUNC)
 * names the variable it sets; topt_parse() runs a whole command line over
 * such a table.  A TOPT_ID row hands its value to the caller instead
 * (topt_next), for commands whose options act rather than set.
 */
#ifndef TOOLS_COMMON_OPTS_H
#define TOOLS_COMMON_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum topt_kind {
	TOPT_FLAG,	/* bool: set to true; no value */
	TOPT_CLEAR,	/* bool: set to false; no value (--no-x) */
	TOPT_STR,	/* const char *: the value as given */
	TOPT_INT,	/* int in [min, max] */
	TOPT_UINT,	/* unsigned int in [min, max] */
	TOPT_ULONG,	/* unsigned long in [min, max] */
	TOPT_DOUBLE,	/* double in [min, max] */
	TOPT_CHOICE,	/* int: values[i] (or i) for the i-th of choices ("a|b|c") */
	TOPT_FUNC,	/* parse(value, dst): 0, or -1 when the value is bad */
	TOPT_REST,	/* the arguments after it are not parsed (see topt_parse) */
	TOPT_ID,	/* nothing set: topt_next returns it; a value when arg != NULL */
};

struct topt {
	const char *name;	/* "--gib"; NULL ends the table */
	const char *arg;	/* the value's name in --help ("G"); NULL: none */
	enum topt_kind kind;
	void *dst;
	double min, max;
	int (*parse)(const char *v, void *dst);
	const char *want;	/* "a size in [0.05, 64]"; NULL: said from min, max, choices */
	const char *help;	/* --help text; a newline continues it indented */
	const char *choices;	/* TOPT_CHOICE: "f32|f16|bf16" */
	const int *values;	/* TOPT_CHOICE: what each choice stores; NULL: its index */
	int id;			/* TOPT_ID: the caller's name for it */
};

/* What topt_next found. */
enum topt_event {
	TOPT_END,	/* no arguments left */
	TOPT_OPT,	/* an option of a table: *hit, and its value in *val */
	TOPT_POS,	/* a positional argument in *val */
	TOPT_HELP,	/* -h or --help */
	TOPT_AT_REST,	/* a TOPT_REST option: the rest starts at a->i */
	TOPT_ERR,	/* a->err says what was wrong */
};

struct topt_args {
	int argc;
	char **argv;
	int i;			/* the next argument */
	bool no_more_opts;	/* after "--" */
	char err[256];
};

void topt_init(struct topt_args *a, int argc, char **argv, int first);

/*
 * The next argument, looked up in tables[0 .. ntables) in that order
 * (NULL tables are skipped).  A value is taken after '=' or from the next
 * argument; a TOPT_FLAG, TOPT_CLEAR or TOPT_REST row takes none.
 */
enum topt_event topt_next(struct topt_args *a, const struct topt *const *tables, size_t ntables,
			  const struct topt **hit, const char **val);

/* v into t's variable: 0, or -1 (with a->err set) when t cannot take it. */
int topt_set(struct topt_args *a, const struct topt *t, const char *v);

/*
 * A whole command line over tables: every option sets its variable, every
 * positional goes to pos(ctx, arg) (an error when pos is NULL or returns
 * nonzero, which then has set a->err).  Returns TOPT_END when all went in,
 * TOPT_HELP, TOPT_AT_REST (a->i is the first argument after the option),
 * or TOPT_ERR with a->err.  A TOPT_ID row is an error here.
 */
enum topt_event topt_parse(struct topt_args *a, const struct topt *const *tables, size_t ntables,
			   int (*pos)(void *ctx, struct topt_args *a, const char *arg), void *ctx);

/* "  --name ARG" in 18 columns, then help (its newlines indented). */
void topt_usage_line(FILE *f, const char *name, const char *arg, const char *help);
/* Every row of t with help, by topt_usage_line. */
void topt_usage(FILE *f, const struct topt *t);

/* Strict numbers: 0, or -1 when v is not one in [min, max]. */
int topt_parse_ulong(const char *v, unsigned long min, unsigned long max, unsigned long *out);
int topt_parse_double(const char *v, double min, double max, double *out);

#endif
