// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl: the kvpool admin CLI.  It reads sysfs (/sys/class/misc/kvpool),
 * debugfs (/sys/kernel/debug/kvpool) and the INFO ioctl of /dev/kvpool,
 * and writes the sysfs tunables and actions.  `size` needs no module.
 *
 * Global options may come anywhere before "--": they are taken out of argv
 * here, so each command parses only its own.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kvctl.h"

struct kv_env kv_env = {
	.sysfs = "/sys/class/misc/kvpool",
	.debugfs = "/sys/kernel/debug/kvpool",
	.dev = "/dev/kvpool",
};

static const struct kv_cmd kv_cmds[] = {
	{ "status", cmd_status, "[--json]",
	  "pool, nodes, prefix cache, evictions, tunables, tenants",
	  "The pool at a glance: reserved, free, in-space and held bytes, each\n"
	  "NUMA node, the prefix-cache sums, evictions per cause, the tunables\n"
	  "and the per-uid limits; the INFO ioctl's API version and features when\n"
	  "/dev/kvpool can be opened (root, or the device's group).\n" },
	{ "spaces", cmd_spaces, "[--json]",
	  "one line per space",
	  "Every live space (sysfs space/ID/): id, name, owner, clients, block\n"
	  "size, quota, backed bytes, blocks per state and hit rate.\n" },
	{ "space", cmd_space, "NAME [--json] | --id ID [--json]",
	  "everything about one space",
	  "One space by name (or by id with --id, for a destroyed space whose\n"
	  "name was taken again).  As root, debugfs adds mode, group, NUMA policy,\n"
	  "readers and the bytes it holds on each node.\n" },
	{ "blocks", cmd_blocks, "[--space NAME] [--json]",
	  "block states per space; --space: its hash index and LRU",
	  "Per space: free, owned, published, cached and hole blocks, their sum\n"
	  "(backed blocks) and the blocks of its range not backed yet.  With\n"
	  "--space NAME also the space's published and cached blocks with their\n"
	  "hashes (debugfs hashes) and its cached blocks in eviction order\n"
	  "(debugfs lru); that part needs root.\n" },
	{ "top", cmd_top, "[--interval SEC] [--count N] [--json]",
	  "live view: usage, hit rate, evictions/s",
	  "Refreshes every --interval seconds (default 1): pool and node usage,\n"
	  "per-space usage, hit rate (since load and over the last interval),\n"
	  "evictions/s and allocs/s from the difference of successive samples.\n"
	  "--count N stops after N refreshes (0, the default: until interrupted).\n"
	  "The screen is cleared with ANSI escapes when stdout is a terminal;\n"
	  "otherwise frames are separated by a blank line.  --json prints one\n"
	  "JSON object per refresh, one per line.\n" },
	{ "set", cmd_set, "[--force] KEY=VALUE...",
	  "change tunables (root)",
	  "Keys (sysfs files, writable by root only):\n"
	  "  pool_bytes=SIZE               pinned pool, all nodes (grows or shrinks)\n"
	  "  min_cached_bytes=SIZE         cached bytes the shrinker leaves alone\n"
	  "  uid_limit_default_bytes=SIZE  limit of uids without their own (0: none)\n"
	  "  uid_limit=UID:SIZE            one uid's own limit (0 removes it)\n"
	  "  event_queue_max=N             events queued per fd, 16 to 1048576\n"
	  "  shrinker_enabled=BOOL         1/0, on/off, yes/no, true/false\n"
	  "SIZE is a whole number of bytes with an optional K, M, G or T suffix\n"
	  "(powers of 1024; \"KiB\" etc. accepted).  Every pair is checked before\n"
	  "anything is written; a bad one writes nothing.  Pinned pages cannot be\n"
	  "reclaimed, so pool_bytes above MemTotal is refused, and growth beyond\n"
	  "MemAvailable needs --force.  Each change is shown as old -> new.\n" },
	{ "check", cmd_check, "[--json]",
	  "the debugfs accounting check (root); exit 0 only on \"ok\"",
	  "Reads /sys/kernel/debug/kvpool/check: \"ok\", or one line per violated\n"
	  "invariant (per space, per uid, per node).  Exit status 0 on ok, 1 on\n"
	  "violations.\n" },
	{ "stats", cmd_stats, "[--json | --prometheus] [--tiers DIR]",
	  "every counter; --prometheus: node_exporter textfile format",
	  "All counters and gauges of the pool, its nodes, tenants and spaces;\n"
	  "with --tiers DIR, also those of the SSD tiers below DIR (as kvctl tiers).\n"
	  "--prometheus prints them in the Prometheus text format that\n"
	  "node_exporter's textfile collector reads, e.g. from cron:\n"
	  "  kvctl stats --prometheus > /var/lib/node_exporter/kvpool.prom.tmp &&\n"
	  "    mv /var/lib/node_exporter/kvpool.prom.tmp /var/lib/node_exporter/kvpool.prom\n"
	  "Without the module it prints kvpool_up 0 (and the tiers) and exits 3.\n" },
	{ "destroy", cmd_destroy, "NAME",
	  "destroy a space (root)",
	  "Writes NAME to sysfs destroy_space: the name is free at once; joined\n"
	  "descriptors keep working until they close.\n" },
	{ "drop-cached", cmd_drop_cached, "NAME | '*'",
	  "evict every cached block of a space, or of all (root)",
	  "Writes NAME (or *, quoted for the shell) to sysfs drop_cached.  The\n"
	  "blocks become free blocks of their space (cause admin).\n" },
	{ "tiers", cmd_tiers, "DIR [--json | --prometheus]",
	  "the SSD tiers libkvrt keeps below DIR (no module needed)",
	  "One line per space identity below DIR (kvrt_tier_ssd_opts.dir, kvrt-demo\n"
	  "--tier ssd:DIR), from the stats file the tier rewrites at most once a\n"
	  "second and at open and close: who has it open, blocks, bytes used of the\n"
	  "capacity, hit rate (hits / (hits + misses)), stores, evictions, blocks\n"
	  "that failed their checksum, failed reads and writes, and the age of the\n"
	  "figures.  --prometheus: kvpool_tier_* metrics labelled by dir and identity.\n" },
	{ "size", cmd_size,
	  "(--model NAME | --layers N --kv-heads N --head-dim N) --tokens N\n"
	  "            [--batch N] [--dtype T] [--tp N] [--block-tokens N] [--no-scales] [--json]\n"
	  "       kvctl size --list-models [--json]",
	  "KV-cache memory calculator (no module needed)",
	  "bytes = 2 (K and V) x batch x tokens x layers x kv_heads x head_dim x\n"
	  "        bytes per element, plus the scales of quantized formats.\n"
	  "--dtype: fp32, fp16 (default), bf16: no scales;\n"
	  "  fp8, int8: 1 byte per element + one fp32 scale per token per head\n"
	  "             (for K and for V): 4 bytes per head_dim elements;\n"
	  "  fp4:   NVFP4, 4 bits + one FP8 (E4M3) scale per 16 elements;\n"
	  "  mxfp4: OCP MXFP4, 4 bits + one E8M0 scale per 32 elements;\n"
	  "  int4:  4 bits + one fp16 scale per 32 elements (symmetric).\n"
	  "  --no-scales leaves scales out (per-tensor scales cost ~nothing).\n"
	  "--tokens N: context length per sequence (k/K = 1024, e.g. 128k).\n"
	  "--tp N: tensor parallelism; KV heads are split across the N ranks.\n"
	  "  With fewer KV heads than ranks each head is replicated and every\n"
	  "  rank holds one; MLA latents are replicated on every rank.\n"
	  "--block-tokens N: bytes of one N-token block per rank, all layers\n"
	  "  (a kvpool space's block_bytes for a block-major layout).\n"
	  "--model NAME: a preset (kvctl size --list-models); --layers etc.\n"
	  "  override it.  MLA models (DeepSeek) cache one latent of\n"
	  "  kv_lora_rank + rope dims per token per layer, not K and V per head.\n"
	  "--json: bytes, bytes_per_token, bytes_per_rank and the inputs.\n" },
};

#define NR_CMDS (sizeof(kv_cmds) / sizeof(kv_cmds[0]))

static const struct kv_cmd *kv_find_cmd(const char *name)
{
	size_t i;

	for (i = 0; i < NR_CMDS; i++)
		if (!strcmp(kv_cmds[i].name, name))
			return &kv_cmds[i];
	return NULL;
}

void kv_err(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("kvctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A command-line mistake: what was wrong, then how the command is used. */
int kv_usage(const char *cmd, const char *fmt, ...)
{
	const struct kv_cmd *c = cmd ? kv_find_cmd(cmd) : NULL;
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "kvctl%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (c)
		fprintf(stderr, "usage: kvctl %s %s\n(more: kvctl %s --help)\n",
			c->name, c->synopsis, c->name);
	else
		fprintf(stderr, "usage: kvctl [GLOBAL OPTIONS] COMMAND [ARGS]\n(more: kvctl --help)\n");
	return KV_EXIT_USAGE;
}

static void kv_global_help(FILE *f)
{
	size_t i;

	fprintf(f,
		"usage: kvctl [GLOBAL OPTIONS] COMMAND [ARGS]\n"
		"\n"
		"The kvpool admin CLI: inspect and tune the kvpool module through sysfs,\n"
		"debugfs and /dev/kvpool, and size KV caches.\n"
		"\n"
		"commands:\n");
	for (i = 0; i < NR_CMDS; i++)
		fprintf(f, "  %-12s %s\n", kv_cmds[i].name, kv_cmds[i].summary);
	fprintf(f,
		"\n"
		"global options (anywhere on the line):\n"
		"  --sysfs-root DIR    instead of /sys/class/misc/kvpool (env KVCTL_SYSFS)\n"
		"  --debugfs-root DIR  instead of /sys/kernel/debug/kvpool (env KVCTL_DEBUGFS)\n"
		"  --dev PATH          instead of /dev/kvpool (env KVCTL_DEV)\n"
		"  --help, -h          this text; kvctl COMMAND --help for one command\n"
		"  --version           print the version\n"
		"\n"
		"Every read command takes --json.  Exit status: 0 ok, 1 failure, 2 usage\n"
		"error (nothing written), 3 module not loaded, 4 permission denied (run\n"
		"as root), 5 no such space.  See kvctl(8).\n");
}

int kv_help(const char *cmd)
{
	const struct kv_cmd *c = kv_find_cmd(cmd);

	if (!c)
		return KV_EXIT_USAGE;
	printf("usage: kvctl %s %s\n\n%s.\n\n%s", c->name, c->synopsis, c->summary, c->help);
	printf("\nglobal options: --sysfs-root DIR, --debugfs-root DIR, --dev PATH (kvctl --help)\n");
	return KV_EXIT_OK;
}

/* Take a global option at argv[*i]; 1 when taken, 0 when not one, -1 on error. */
static int kv_global_opt(int argc, char **argv, int *i)
{
	static const struct { const char *name; const char **dst; } g[] = {
		{ "--sysfs-root", &kv_env.sysfs },
		{ "--debugfs-root", &kv_env.debugfs },
		{ "--dev", &kv_env.dev },
	};
	size_t k, n;

	for (k = 0; k < sizeof(g) / sizeof(g[0]); k++) {
		n = strlen(g[k].name);
		if (strncmp(argv[*i], g[k].name, n))
			continue;
		if (argv[*i][n] == '=') {
			*g[k].dst = argv[*i] + n + 1;
		} else if (argv[*i][n] == '\0') {
			if (*i + 1 >= argc) {
				kv_usage(NULL, "%s needs a value, e.g. %s /tmp/fake/kvpool",
					 g[k].name, g[k].name);
				return -1;
			}
			*g[k].dst = argv[++*i];
		} else {
			continue;
		}
		if (!**g[k].dst) {
			kv_usage(NULL, "%s must not be empty", g[k].name);
			return -1;
		}
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const struct kv_cmd *cmd = NULL;
	char **rest;
	int i, n = 1, r;
	bool json_first = false, opts_done = false;
	const char *e;

	if ((e = getenv("KVCTL_SYSFS")) && *e)
		kv_env.sysfs = e;
	if ((e = getenv("KVCTL_DEBUGFS")) && *e)
		kv_env.debugfs = e;
	if ((e = getenv("KVCTL_DEV")) && *e)
		kv_env.dev = e;

	rest = calloc((size_t)argc + 2, sizeof(*rest));
	if (!rest) {
		kv_err("out of memory");
		return KV_EXIT_FAIL;
	}
	for (i = 1; i < argc; i++) {
		if (!opts_done) {
			r = kv_global_opt(argc, argv, &i);
			if (r < 0)
				return KV_EXIT_USAGE;
			if (r)
				continue;
			if (!strcmp(argv[i], "--"))
				opts_done = true;
		}
		if (!cmd) {
			if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
			    !strcmp(argv[i], "help")) {
				if (!strcmp(argv[i], "help") && i + 1 < argc && kv_find_cmd(argv[i + 1]))
					return kv_help(argv[i + 1]);
				kv_global_help(stdout);
				return KV_EXIT_OK;
			}
			if (!strcmp(argv[i], "--version")) {
				printf("kvctl %s (kvpool API %d)\n", KVCTL_VERSION, KVPOOL_API_VERSION);
				return KV_EXIT_OK;
			}
			if (!strcmp(argv[i], "--json")) {
				json_first = true;
				continue;
			}
			if (argv[i][0] == '-')
				return kv_usage(NULL, "unknown option '%s' before the command", argv[i]);
			cmd = kv_find_cmd(argv[i]);
			if (!cmd) {
				kv_usage(NULL, "unknown command '%s'", argv[i]);
				fprintf(stderr, "commands:");
				for (size_t k = 0; k < NR_CMDS; k++)
					fprintf(stderr, " %s", kv_cmds[k].name);
				fputc('\n', stderr);
				return KV_EXIT_USAGE;
			}
			continue;
		}
		rest[n++] = argv[i];
	}
	if (!cmd) {
		kv_global_help(stderr);
		fprintf(stderr, "\nkvctl: no command given; try 'kvctl status'\n");
		return KV_EXIT_USAGE;
	}
	/* rest[0] is kept for a --json given before the command. */
	rest[0] = "--json";
	rest[n] = NULL;
	r = json_first ? cmd->fn(n, rest) : cmd->fn(n - 1, rest + 1);
	if (fflush(stdout) == EOF && r == KV_EXIT_OK) {
		kv_err("writing the output failed");
		r = KV_EXIT_FAIL;
	}
	free(rest);
	return r;
}
