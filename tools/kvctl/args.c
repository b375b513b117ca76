// SPDX-License-Identifier: GPL-2.0
/*
 * Option parsing for the commands, through the parser the tools share
 * (../common/opts.h), so that every mistake is reported with the
 * command's name and its usage line; and the numeric option values.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvctl.h"

void kv_args_init(struct kv_args *a, const char *cmd, int argc, char **argv)
{
	a->cmd = cmd;
	topt_init(&a->t, argc, argv, 0);
}

/*
 * The next option's id (its value in *val), KV_OPT_POS with the argument
 * in *val, KV_OPT_HELP, KV_OPT_END, or KV_OPT_ERR after printing why.
 */
int kv_args_next(struct kv_args *a, const struct topt *opts, const char **val)
{
	const struct topt *tables[] = { opts }, *hit, *o;

	switch (topt_next(&a->t, tables, 1, &hit, val)) {
	case TOPT_END:
		return KV_OPT_END;
	case TOPT_POS:
		return KV_OPT_POS;
	case TOPT_HELP:
		return KV_OPT_HELP;
	case TOPT_OPT:
		if (hit->kind == TOPT_ID)
			return hit->id;
		break;
	default:
		break;
	}
	kv_usage(a->cmd, "%s", a->t.err);
	if (!strncmp(a->t.err, "unknown option '--", 18) && opts && opts->name) {
		fprintf(stderr, "options of kvctl %s:", a->cmd);
		for (o = opts; o->name; o++)
			fprintf(stderr, " %s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
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

/*
 * A command that prints text, --json or (when prom is not NULL) --prometheus,
 * with at most one positional argument (into *pos; NULL: none taken) and,
 * when tiers is not NULL, --tiers DIR (into *tiers).  -1 to go on with
 * *json and *prom set, else the exit status (help printed, or a usage
 * error).
 */
int kv_format_args(const char *cmd, int argc, char **argv, bool *json, bool *prom,
		   const char **pos, const char **tiers)
{
	enum { OPT_JSON = 1, OPT_PROM, OPT_TIERS };
	static const struct topt all[] = {
		{ .name = "--json", .kind = TOPT_ID, .id = OPT_JSON },
		{ .name = "--prometheus", .kind = TOPT_ID, .id = OPT_PROM },
		{ .name = "--tiers", .arg = "DIR", .kind = TOPT_ID, .id = OPT_TIERS },
	};
	/* The options the command takes, a prefix of all: the rest are unknown to it. */
	struct topt opts[4] = { { .name = NULL } };
	size_t n = !prom ? 1 : !tiers ? 2 : 3;
	struct kv_args a;
	const char *v;
	bool no_prom;
	int o;

	memcpy(opts, all, n * sizeof(all[0]));
	if (!prom)
		prom = &no_prom;
	*json = *prom = false;
	if (tiers)
		*tiers = NULL;
	kv_args_init(&a, cmd, argc, argv);
	while ((o = kv_args_next(&a, opts, &v)) != KV_OPT_END) {
		if (o == KV_OPT_HELP)
			return kv_help(cmd);
		if (o == KV_OPT_ERR)
			return KV_EXIT_USAGE;
		if (o == KV_OPT_POS && (!pos || *pos))
			return kv_usage(cmd, "unexpected argument '%s'", v);
		if (o == KV_OPT_POS)
			*pos = v;
		else if (o == OPT_TIERS && *tiers)
			return kv_usage(cmd, "--tiers names one directory: give it once");
		else if (o == OPT_TIERS)
			*tiers = v;
		else if (o == OPT_JSON)
			*json = true;
		else
			*prom = true;
	}
	if (*json && *prom)
		return kv_usage(cmd, "--json and --prometheus are two formats: pick one");
	return -1;
}
