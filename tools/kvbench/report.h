/* SPDX-License-Identifier: GPL-2.0 */
/*
 * report.h: what every kvbench subcommand shares: the common options, the
 * clock, medians, the result line (a table row, or one JSON object per
 * case) and the progress line.
 *
 * A result line, with --json:
 *
 *   {"bench":"attn","case":"decode_b8_ctx32768","value":31.2,
 *    "unit":"GB/s K/V read (ratio = value/limit)","limit":42.9,
 *    "limit_unit":"GB/s streaming read","ratio":0.727}
 *
 * value is what the case measured, limit the floor or ceiling it is
 * compared against, measured in the same run.  A cost (pool, hash) has
 * ratio = limit / value, a rate (attn, copy) ratio = value / limit; either
 * way 1.0 means as good as the limit.  Numbers are printed with %.4g
 * below 1000 and as integers above.  A limit that could not be measured
 * (NAN: a peer that is absent) is null, and so is the ratio ("-" in the
 * table).
 */
#ifndef KVBENCH_REPORT_H
#define KVBENCH_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "../common/opts.h"

#define KVB_MAX_REPS 99

/* Options every subcommand takes (kvb_parse_args parses them). */
struct kvb_opts {
	const char *bench;	/* the subcommand: "pool", "attn", ... */
	bool json;		/* --json: JSON lines on stdout */
	bool quiet;		/* --quiet: no progress, no notes on stderr */
	bool progress;		/* --progress: progress lines even when stderr is no tty */
	unsigned int reps;	/* --reps: repetitions per case, median reported */
	double rep_time;	/* --rep-time: seconds per repetition, at least */
	const char *plot;	/* --plot FILE (.svg or .png); only where can_plot */
	bool can_plot;		/* set by the subcommand before parsing */
};

/*
 * A subcommand's own options are a table of ../common/opts.h rows: the
 * shared parser reads it and --help is printed from it.  dst points at
 * the variable the option sets; a value it cannot take is the usage error
 * "NAME wants WANT, not 'VALUE'".
 */
/* A subcommand's command line: its options and its --help. */
struct kvb_cmd {
	const struct kvb_opts *defaults;	/* name, common options' defaults */
	const char *synopsis;	/* after "usage: kvbench NAME"; NULL: "[--json] [options]" */
	const char *about;	/* --help's paragraph, ending in a newline */
	const struct topt *opts;
	bool no_common;		/* the common options are not taken (demo) */
	const char *unknown_hint;	/* appended to "unknown option 'X'" */
	const char *epilogue;	/* --help's last paragraph; NULL: none */
};

/* The GPU subcommands' last --help paragraph. */
#define KVB_NO_GPU_NOTE "Without a usable GPU: the reason on stderr, exit status 1.\n"

/*
 * Parse argv[1 ..] (argv[0] is the subcommand) into o (the common options,
 * starting from *cmd->defaults) and the table's variables; a value follows
 * its option as the next argument or after '=' (--gib=0.5).  Returns true
 * to run; false with the exit status in *status: 0 after printing --help
 * on stdout, 2 after a usage error (kvb_usage_error).  rest, when not
 * NULL, gets the index of the first argument after a TOPT_REST option,
 * argc when there is none.
 */
bool kvb_parse_args(const struct kvb_cmd *cmd, struct kvb_opts *o, int argc, char **argv,
		    int *rest, int *status);

/*
 * kvb_parse_args for the usual subcommand: its own options and the common
 * ones, no operands, nothing else in its kvb_cmd.
 */
bool kvb_parse(const struct kvb_opts *defaults, const char *about, const struct topt *opts,
	       struct kvb_opts *o, int argc, char **argv, int *status);

/* The subcommand's --help. */
void kvb_usage(const struct kvb_cmd *cmd, FILE *f);

/* "kvbench NAME: <message>", a blank line, kvb_usage(stderr); returns 2. */
int kvb_usage_error(const struct kvb_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC. */
double kvb_now_ns(void);
double kvb_now_s(void);

/* The median of n samples; v is left as it was. */
double kvb_median(const double *v, unsigned int n);
/*
 * Of n repetitions of a value and its limit taken side by side (times per
 * unit of work), the pair whose quotient v[i] / l[i] is the middle one
 * (the upper middle for even n), in *v_out and *l_out.  A value and the
 * limit measured next to it saw the same machine: where the memory
 * bandwidth of a shared host changes between repetitions, the medians of
 * each alone can come from different conditions.
 */
void kvb_middle_pair(const double *v, const double *l, unsigned int n, double *v_out,
		     double *l_out);

enum kvb_ratio {
	KVB_COST,	/* value is a cost: ratio = limit / value */
	KVB_RATE,	/* value is a rate: ratio = value / limit */
};

/* One subcommand's result lines: its ratio and its table's column widths. */
struct kvb_report {
	const struct kvb_opts *o;
	enum kvb_ratio ratio;
	int name_w;		/* case */
	int num_w;		/* value and limit */
	int unit_w;		/* limit unit */
	int ratio_w;
};

/* The table's heading line (nothing with --json). */
void kvb_report_header(const struct kvb_report *r, const char *value_head);

/* One case: a JSON line or a table row on stdout, flushed. */
void kvb_report(const struct kvb_report *r, const char *name, double value, const char *unit,
		double limit, const char *limit_unit);

/*
 * Measuring a case: a value and the limit it is compared against, timed
 * side by side.  kvb_measure() warms both up, then runs --reps
 * repetitions of the limit followed by the value, each lasting at least
 * --rep-time, and summarises them; kvb_measure_report() also prints the
 * result line.
 */

/* n calls of the measured work; 0 or a negative errno. */
typedef int (*kvb_run_fn)(void *ctx, unsigned long n);

/* One side of a case. */
struct kvb_side {
	kvb_run_fn run;
	void *ctx;
	double units;		/* work per call (blocks, tokens, bytes): results are per unit */
	unsigned long iters;	/* calls per repetition, set by kvb_calibrate() */
};

struct kvb_case {
	struct kvb_side value, limit;
	/*
	 * Calls too long to count ahead: after one warm call of each side,
	 * every repetition runs whole calls one at a time until rep_time has
	 * passed.  Else (short calls, where a clock read per call would
	 * weigh) kvb_calibrate() counts the calls per repetition first.
	 */
	bool per_call;
	/* The pair with the middle ratio (kvb_middle_pair), else each side's median. */
	bool middle_pair;
};

/* s->iters for a repetition of about rep_time; its calls warm s up.  0 or -errno. */
int kvb_calibrate(struct kvb_side *s, double rep_time);

/* One repetition of s->iters calls: seconds per unit in *sec.  0 or -errno. */
int kvb_time_counted(struct kvb_side *s, double *sec);

/* Whole calls of s, one at a time, for at least rep_time: seconds per unit.  0 or -errno. */
int kvb_time_calls(struct kvb_side *s, double rep_time, double *sec);

/* c's value and limit in seconds per unit, *v and *l.  0 or -errno. */
int kvb_measure(const struct kvb_opts *o, struct kvb_case *c, double *v, double *l);

/*
 * kvb_measure(), then kvb_report() of a cost (KVB_COST: ns per unit) or a
 * rate (KVB_RATE: GB/s, units being bytes).  What was reported goes to *v
 * and *l when they are not NULL.  0 or -errno (nothing printed).
 */
int kvb_measure_report(const struct kvb_report *r, const char *name, struct kvb_case *c,
		       const char *unit, const char *limit_unit, double *v, double *l);

/*
 * Progress: "kvbench BENCH: [i/n] what" on stderr, only when stderr is a
 * terminal (one line, rewritten in place, with the time elapsed) or with
 * --progress (one line per step); never with --quiet.  n 0: no [i/n].
 * kvb_progress_end() clears a terminal's line; kvb_report() does too
 * before it prints.
 */
void kvb_progress(const struct kvb_opts *o, unsigned int i, unsigned int n, const char *what);
void kvb_progress_end(void);

/* A note on stderr ("kvbench BENCH: ..."), unless --quiet. */
void kvb_note(const struct kvb_opts *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* KVBENCH_REPORT_H */
