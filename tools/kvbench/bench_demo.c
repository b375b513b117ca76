// SPDX-License-Identifier: GPL-2.0
/*
 * bench_demo.c: kvbench demo, the end-to-end figures of the kvrt-demo
 * engine (tools/kvrt-demo).
 *
 *   kvbench demo [--json] [--quiet] [--progress] [-- KVRT-DEMO-ARGS...]
 *
 * kvbench does not link the engine: it runs the kvrt-demo program.  Its
 * table passes through; with --json, kvbench reads the program's JSON
 * object and prints the JSON lines every kvbench subcommand prints, each
 * a ratio to a limit from the same run: mean TTFT and wall time with the
 * prefix cache and offload against the no-cache recomputation the demo
 * runs beside it, and blocks hit against blocks looked up.  --raw prints
 * the program's own JSON instead.  The program is, first found:
 *
 *   $KVRT_DEMO                        an explicit path
 *   DIR/kvrt-demo                     DIR: where this kvbench is (installed
 *                                     side by side in $(PREFIX)/bin)
 *   DIR/../kvrt-demo/kvrt-demo        the source tree (tools/kvbench/kvbench)
 *   kvrt-demo on $PATH
 *
 * kvbench's --json, --quiet and --progress are passed on when the
 * program's --help lists them (--quiet as --no-progress when that is what
 * it has); --json is an error when it does not (the output would not be
 * JSON).  Arguments after "--" are passed on as they
 * are.  Exit status: kvrt-demo's, or 1 when there is no kvrt-demo.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "report.h"

#define MAX_ARGS 256

static const struct kvb_opts demo_defaults = { .bench = "demo", .reps = 1, .rep_time = 1 };

static const char demo_about[] =
	"Runs the kvrt-demo engine's benchmark (time to first token with and\n"
	"without prefix reuse, prefix hit rate, bytes offloaded and fetched,\n"
	"tokens per second) and passes its output through.  kvrt-demo is taken\n"
	"from $KVRT_DEMO, else next to kvbench, else ../kvrt-demo/ beside it (the\n"
	"source tree), else $PATH.\n";

/* dir/name into path, if it fits and is executable. */
static bool try_path(char *path, size_t len, const char *dir, int dlen, const char *name)
{
	int n = snprintf(path, len, "%.*s/%s", dlen, dir, name);

	return n > 0 && (size_t)n < len && !access(path, X_OK);
}

/* The kvrt-demo to run, into path; 0 or -ENOENT (tried[] says where). */
static int find_demo(char *path, size_t len, char *tried, size_t tlen)
{
	const char *env = getenv("KVRT_DEMO"), *p;
	char self[PATH_MAX], *slash;
	ssize_t n;

	tried[0] = 0;
	if (env && *env) {
		if (snprintf(path, len, "%s", env) < (int)len && !access(path, X_OK))
			return 0;
		snprintf(tried, tlen, "$KVRT_DEMO (%s: %s)", env, strerror(errno));
		return -ENOENT;	/* an explicit choice: no second guess */
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			if (try_path(path, len, self, INT_MAX, "kvrt-demo") ||
			    try_path(path, len, self, INT_MAX, "../kvrt-demo/kvrt-demo"))
				return 0;
			snprintf(tried, tlen, "%s/kvrt-demo, %s/../kvrt-demo/kvrt-demo, ", self,
				 self);
		}
	}
	p = getenv("PATH");
	while (p && *p) {
		size_t d = strcspn(p, ":");

		if (d && try_path(path, len, p, (int)d, "kvrt-demo"))
			return 0;
		p += d;
		if (*p == ':')
			p++;
	}
	snprintf(tried + strlen(tried), tlen - strlen(tried), "$PATH");
	return -ENOENT;
}

/* kvrt-demo --help's output (stdout and stderr) into buf; 0 or -errno. */
static int demo_help(const char *path, char *buf, size_t len)
{
	char *argv[] = { "kvrt-demo", "--help", NULL };
	bool timed_out;
	int fd, status, ret;
	size_t got;
	pid_t pid;

	pid = kvb_child_start(path, argv, KVB_CHILD_STDERR, &fd);
	if (pid < 0)
		return (int)pid;
	got = kvb_child_read(fd, pid, buf, len, 0, &timed_out);
	ret = kvb_child_wait(pid, &status);
	if (ret)
		return ret;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !got)
		return -ENOEXEC;
	return 0;
}

/* Whether help lists opt as a whole word ("--json" but not "--json-file"). */
static bool help_lists_option(const char *help, const char *opt)
{
	size_t n = strlen(opt);
	const char *p = help;

	while ((p = strstr(p, opt))) {
		char after = p[n];

		if ((p == help || p[-1] == ' ' || p[-1] == '\t' || p[-1] == '[' || p[-1] == '\n' ||
		     p[-1] == ',') &&
		    (after == 0 || after == ' ' || after == '\t' || after == ']' || after == '\n' ||
		     after == ',' || after == '='))
			return true;
		p += n;
	}
	return false;
}

/* The number after "key": at or after from, within the text; NaN when absent. */
static double json_num(const char *from, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = from ? strstr(from, pat) : NULL;
	return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* Run path with args, its standard output into out (NUL-terminated); 0 when it exited 0. */
static int run_capture(const char *path, char **args, char *out, size_t size)
{
	bool timed_out;
	int fd, status;
	pid_t pid;

	pid = kvb_child_start(path, args, 0, &fd);
	if (pid < 0)
		return -1;
	kvb_child_read(fd, pid, out, size, 0, &timed_out);
	if (kvb_child_wait(pid, &status))
		return -1;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "kvbench demo: %s failed (status %d): no figures\n", path,
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -1;
	}
	return 0;
}

/* Run kvrt-demo --json, read its object, print kvbench's JSON lines. */
static int demo_json_lines(const struct kvb_opts *o, const char *path, char **args)
{
	struct kvb_report cost = { .o = o, .ratio = KVB_COST, .name_w = 16, .num_w = 10,
				   .unit_w = 36, .ratio_w = 7 };
	struct kvb_report rate = cost;
	static char out[1 << 20];
	const char *cached, *ref;

	rate.ratio = KVB_RATE;
	if (run_capture(path, args, out, sizeof(out)))
		return 1;
	cached = strstr(out, "\"cached\":");
	ref = strstr(out, "\"reference\":");
	if (!cached || !ref || isnan(json_num(cached, "mean")) || isnan(json_num(ref, "mean"))) {
		fprintf(stderr, "kvbench demo: %s --json printed no cached/reference figures\n",
			path);
		return 1;
	}
	kvb_report(&cost, "ttft_mean_ms", json_num(cached, "mean"),
		   "ms mean TTFT, prefix cache + offload", json_num(ref, "mean"),
		   "ms mean TTFT, no-cache recomputation");
	kvb_report(&cost, "wall_s", json_num(cached, "wall_s"), "s for the request stream, cached",
		   json_num(ref, "wall_s"), "s for it, no-cache recomputation");
	kvb_report(&rate, "prefix_hit_rate", json_num(cached, "prefix_hits"),
		   "blocks found by lookup", json_num(cached, "prefix_lookups"),
		   "blocks looked up");
	return 0;
}

#define MODE_BEAM	"4"
#define MODE_SPEC_K	"4"

/* args: path --json mode... tail..., NULL-terminated, at most MAX_ARGS. */
static void mode_args(char **args, const char *path, char *const *mode, char **tail, int ntail)
{
	int n = 0, i;

	args[n++] = (char *)path;
	args[n++] = "--json";
	for (i = 0; mode[i]; i++)
		args[n++] = mode[i];
	for (i = 0; i < ntail && n + 1 < MAX_ARGS; i++)
		args[n++] = tail[i];
	args[n] = NULL;
}

/*
 * --modes: kvrt-demo's sequence modes, each checked by kvrt-demo against a
 * recomputation (a run that fails its check exits non-zero: no figure).
 * Beam search's K/V at its peak against the same beams as independent
 * copies; speculative decoding's target passes per generated token against
 * plain decoding of the same requests in the same run.  args_tail: the
 * arguments after "--", given to both.
 */
static int demo_mode_lines(const struct kvb_opts *o, const char *path, char **tail, int ntail)
{
	struct kvb_report cost = { .o = o, .ratio = KVB_COST, .name_w = 16, .num_w = 10,
				   .unit_w = 36, .ratio_w = 7 };
	static char out[1 << 20];
	char *args[MAX_ARGS];
	const char *b, *sp;

	static char *const beam[] = { "--beam", MODE_BEAM, NULL };
	/* a random model with a shared classifier repeats its input: any draft agrees */
	static char *const spec[] = { "--speculative", MODE_SPEC_K, "--classifier", "separate", NULL };

	mode_args(args, path, beam, tail, ntail);
	kvb_note(o, "running %s --beam " MODE_BEAM, path);
	if (run_capture(path, args, out, sizeof(out)))
		return 1;
	b = strstr(out, "\"branch\":");
	if (!b || isnan(json_num(b, "peak_used_bytes")) || isnan(json_num(b, "independent_bytes"))) {
		fprintf(stderr, "kvbench demo: %s --beam printed no branch figures\n", path);
		return 1;
	}
	kvb_report(&cost, "beam" MODE_BEAM "_kv_bytes", json_num(b, "peak_used_bytes"),
		   "B of K/V at the peak, beams sharing blocks", json_num(b, "independent_bytes"),
		   "B for the same beams as independent copies");

	mode_args(args, path, spec, tail, ntail);
	kvb_note(o, "running %s --speculative " MODE_SPEC_K, path);
	if (run_capture(path, args, out, sizeof(out)))
		return 1;
	sp = strstr(out, "\"speculative\":");
	if (!sp || !(json_num(sp, "decode_tokens") > 0) || !(json_num(sp, "plain_decode_tokens") > 0)) {
		fprintf(stderr, "kvbench demo: %s --speculative printed no figures\n", path);
		return 1;
	}
	kvb_report(&cost, "spec" MODE_SPEC_K "_passes_per_token",
		   json_num(sp, "target_passes") / json_num(sp, "decode_tokens"),
		   "target passes per token, speculative",
		   json_num(sp, "plain_target_passes") / json_num(sp, "plain_decode_tokens"),
		   "per token, plain decoding (same run)");
	return 0;
}

/* argv[0] is "demo". */
int cmd_demo(int argc, char **argv)
{
	struct kvb_opts o = demo_defaults;
	static char help[65536];
	char path[PATH_MAX], tried[3 * PATH_MAX];
	char *args[MAX_ARGS];
	int i, nargs = 0, ret, tail;
	bool raw = false, modes = false;
	const struct topt opts[] = {
		{ .name = "--json", .kind = TOPT_FLAG, .dst = &o.json,
		  .help = "kvbench JSON lines from kvrt-demo --json: ttft_mean_ms and\n"
			  "wall_s against the no-cache pass, prefix_hit_rate" },
		{ .name = "--raw", .kind = TOPT_FLAG, .dst = &raw,
		  .help = "with --json: kvrt-demo's own JSON object instead" },
		{ .name = "--modes", .kind = TOPT_FLAG, .dst = &modes,
		  .help = "with --json: also --beam " MODE_BEAM " (K/V against independent\n"
			  "copies) and --speculative " MODE_SPEC_K " (target passes per token\n"
			  "against plain decoding), each checked by kvrt-demo" },
		{ .name = "--progress", .kind = TOPT_FLAG, .dst = &o.progress,
		  .help = "passed on when kvrt-demo has it" },
		{ .name = "--quiet", .kind = TOPT_FLAG, .dst = &o.quiet,
		  .help = "passed on when kvrt-demo has it" },
		{ .name = "--", .kind = TOPT_REST,
		  .help = "the arguments after it go to kvrt-demo as they are" },
		{ NULL },
	};
	const struct kvb_cmd cmd = {
		.defaults = &demo_defaults, .about = demo_about, .opts = opts, .no_common = true,
		.synopsis = "[--json] [--quiet] [--progress] [-- KVRT-DEMO-ARGS...]",
		.unknown_hint = " (kvrt-demo's own options go after --)",
	};

	if (!kvb_parse_args(&cmd, &o, argc, argv, &i, &ret))
		return ret;
	if (modes && (!o.json || raw))
		return kvb_usage_error(&cmd, "--modes adds JSON lines: give it with --json, without --raw");
	if (find_demo(path, sizeof(path), tried, sizeof(tried))) {
		fprintf(stderr,
			"kvbench demo: kvrt-demo is not available (looked at %s).\n"
			"Build it with 'make tools' (tools/kvrt-demo), install it with 'make "
			"install', or set KVRT_DEMO=/path/to/kvrt-demo.\n",
			tried);
		return 1;
	}
	ret = demo_help(path, help, sizeof(help));
	if (ret) {
		fprintf(stderr, "kvbench demo: cannot run %s --help: %s\n", path, strerror(-ret));
		return 1;
	}
	args[nargs++] = path;
	if (o.json) {
		if (!help_lists_option(help, "--json")) {
			fprintf(stderr,
				"kvbench demo: %s has no --json option (its --help does not list "
				"it); run kvbench demo without --json for its table\n",
				path);
			return 1;
		}
		args[nargs++] = "--json";
	}
	if (o.quiet && help_lists_option(help, "--quiet"))
		args[nargs++] = "--quiet";
	else if (o.quiet && help_lists_option(help, "--no-progress"))
		args[nargs++] = "--no-progress";
	if (o.progress && help_lists_option(help, "--progress"))
		args[nargs++] = "--progress";
	tail = i;
	for (; i < argc; i++) {
		if (nargs + 1 >= MAX_ARGS) {
			fprintf(stderr, "kvbench demo: too many arguments\n");
			return 2;
		}
		args[nargs++] = argv[i];
	}
	args[nargs] = NULL;
	kvb_note(&o, "running %s", path);
	fflush(NULL);
	if (o.json && !raw) {
		ret = demo_json_lines(&o, path, args);
		if (!ret && modes)
			ret = demo_mode_lines(&o, path, argv + tail, argc - tail);
		return ret;
	}
	execv(path, args);
	fprintf(stderr, "kvbench demo: exec %s: %s\n", path, strerror(errno));
	return 1;
}
