// SPDX-License-Identifier: GPL-2.0
/*
 * Option parsing for the commands: long options only ("--name value" or
 * "--name=value"), -h/--help, "--" ending options, positionals in between.
 * Hand-rolled rather than getopt_long so that every mistake is reported
 * with the command's name and its usage line.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvctl.h"

void kv_args_init(struct kv_args *a, const char *cmd, int argc, char **argv)
{
	a->cmd = cmd;
	a->argc = argc;
	a->argv = argv;
	a->i = 0;
	a->no_more_opts = false;
}

/*
 * The next option's id (its value in *val), KV_OPT_POS with the argument
 * in *val, KV_OPT_HELP, KV_OPT_END, or KV_OPT_ERR after printing why.
 */
int kv_args_next(struct kv_args *a, const struct kv_opt *opts, const char **val)
{
	const struct kv_opt *o;
	const char *arg, *eq;
	size_t n;

	*val = NULL;
	if (a->i >= a->argc)
		return KV_OPT_END;
	arg = a->argv[a->i++];
	if (a->no_more_opts || arg[0] != '-' || !strcmp(arg, "-")) {
		*val = arg;
		return KV_OPT_POS;
	}
	if (!strcmp(arg, "--")) {
		a->no_more_opts = true;
		return kv_args_next(a, opts, val);
	}
	if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
		return KV_OPT_HELP;
	if (arg[1] != '-') {
		kv_usage(a->cmd, "unknown option '%s' (options are long: --name)", arg);
		return KV_OPT_ERR;
	}
	eq = strchr(arg, '=');
	n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
	for (o = opts; o && o->name; o++) {
		if (strlen(o->name) != n || strncmp(o->name, arg + 2, n))
			continue;
		if (!o->has_arg) {
			if (eq) {
				kv_usage(a->cmd, "--%s takes no value (got '%s')", o->name, arg);
				return KV_OPT_ERR;
			}
			return o->id;
		}
		if (eq) {
			*val = eq + 1;
		} else if (a->i < a->argc) {
			*val = a->argv[a->i++];
		} else {
			kv_usage(a->cmd, "--%s needs a value", o->name);
			return KV_OPT_ERR;
		}
		return o->id;
	}
	kv_usage(a->cmd, "unknown option '%.*s'", (int)(n + 2), arg);
	if (opts && opts->name) {
		fprintf(stderr, "options of kvctl %s:", a->cmd);
		for (o = opts; o->name; o++)
			fprintf(stderr, " --%s%s", o->name, o->has_arg ? " X" : "");
		fprintf(stderr, " --help\n");
	}
	return KV_OPT_ERR;
}

/* A whole number option in [min, max]; with suffixes, k/K = 1024 etc. */
int kv_opt_u64(const char *cmd, const char *opt, const char *val, uint64_t min,
	       uint64_t max, bool suffixes, uint64_t *out)
{
	int r;

	/* Plain digits go through the size parser for its overflow check. */
	if (suffixes)
		r = kv_parse_count(val, out);
	else if (strspn(val, "0123456789") == strlen(val))
		r = kv_parse_size(val, out);
	else
		r = KV_SIZE_BAD;
	if (r == KV_SIZE_OK && *out >= min && *out <= max)
		return 0;
	kv_usage(cmd, "--%s wants a whole number from %llu to %llu%s, not '%s'", opt,
		 (unsigned long long)min, (unsigned long long)max,
		 suffixes ? " (k = 1024: 128k)" : "", val);
	return -1;
}

int kv_opt_double(const char *cmd, const char *opt, const char *val, double min,
		  double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (end != val && !*end && !errno && isfinite(v) && v >= min && v <= max) {
		*out = v;
		return 0;
	}
	kv_usage(cmd, "--%s wants a number of seconds from %g to %g (e.g. 0.5), not '%s'",
		 opt, min, max, val);
	return -1;
}
