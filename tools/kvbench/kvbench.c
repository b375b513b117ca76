// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench: the project's benchmark entry point.
 *
 *   kvbench SUBCOMMAND [--json] [options]
 *
 * Each case reports what it measured (value) and, measured in the same
 * run, the limit it is compared against: the cheapest operation the
 * measured code cannot beat, or the fastest it cannot exceed.  ratio is
 * 1.0 when the code is as good as that limit (limit / value for a cost,
 * value / limit for a rate).  report.h has the JSON line and the options
 * every subcommand shares; each bench_*.c says what its cases measure.
 *
 *   pool   bench_pool.c    block alloc+free, prefix lookup: kvcore, kvpool ioctls
 *   hash   bench_hash.c    chained SHA-256 prefix hashing (libkvrt)
 *   attn   bench_attn.c    CPU paged-attention decode bandwidth (libkvrt)
 *   copy   bench_copy.c    block copy bandwidth, kvrt_copy_blocks (libkvrt)
 *   demo   bench_demo.c    runs the kvrt-demo engine's benchmark
 *   gpu-attn  bench_gpu_attn.c  GPU paged-attention decode (libkvrt), SDPA peer
 *   gpu-copy  bench_gpu_copy.c  GPU <-> host pool block copies, registration
 *   tier   bench_tier.c    the SSD tier's store and fetch GB/s, fio as the peer
 *
 * The GPU subcommands need a dynamically linked kvbench (libcuda is
 * loaded at run time); kvbench-static, the VM's build, says so and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_pool(int argc, char **argv);	/* bench_pool.c */
int cmd_hash(int argc, char **argv);	/* bench_hash.c */
int cmd_attn(int argc, char **argv);	/* bench_attn.c */
int cmd_copy(int argc, char **argv);	/* bench_copy.c */
int cmd_demo(int argc, char **argv);	/* bench_demo.c */
int cmd_gpu_attn(int argc, char **argv);	/* bench_gpu_attn.c */
int cmd_gpu_copy(int argc, char **argv);	/* bench_gpu_copy.c */
int cmd_tier(int argc, char **argv);	/* bench_tier.c */

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
} cmds[] = {
	{ "pool", cmd_pool, "block alloc+free and 1,000-block prefix lookup cost:\n"
			    "                in-process kvcore, and the kvpool ioctls when\n"
			    "                /dev/kvpool exists (ns per block)" },
	{ "hash", cmd_hash, "chained SHA-256 prefix hashing of a prompt with libkvrt\n"
			    "                (ns per token)" },
	{ "attn", cmd_attn, "CPU paged-attention decode with libkvrt: GB/s of K/V read\n"
			    "                against the streaming read bandwidth, over context\n"
			    "                lengths (--plot)" },
	{ "copy", cmd_copy, "block copies through kvrt_copy_blocks between host block\n"
			    "                arrays, 32 KiB to 2 MiB blocks, against one large\n"
			    "                memcpy (--plot)" },
	{ "demo", cmd_demo, "the kvrt-demo engine's end-to-end benchmark, when kvrt-demo\n"
			    "                is built or installed" },
	{ "gpu-attn", cmd_gpu_attn, "GPU paged-attention decode with libkvrt: GB/s of K/V\n"
				    "                read against the device copy bandwidth, and\n"
				    "                PyTorch SDPA on the same shapes as a peer" },
	{ "gpu-copy", cmd_gpu_copy, "block copies between the GPU and a registered host pool\n"
				    "                per method, against one pinned memcpy; and\n"
				    "                the cost of registering the pool" },
	{ "tier", cmd_tier, "libkvrt's SSD tier: store and fetch GB/s at 256 KiB and\n"
			    "                2 MiB blocks, against fio's O_DIRECT writes and\n"
			    "                reads on the same file system" },
};
#define NR_CMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(FILE *f)
{
	unsigned int i;

	fprintf(f, "usage: kvbench SUBCOMMAND [--json] [options]\n\nsubcommands:\n");
	for (i = 0; i < NR_CMDS; i++)
		fprintf(f, "  %-13s %s\n", cmds[i].name, cmds[i].help);
	fprintf(f,
		"\n"
		"options every benchmark takes (kvbench SUBCOMMAND --help for its own):\n"
		"  --json            one JSON object per case per line on stdout:\n"
		"                    {\"bench\",\"case\",\"value\",\"unit\",\"limit\",\"limit_unit\",\"ratio\"}\n"
		"  --reps N          repetitions per case, median reported (1..99)\n"
		"  --rep-time SEC    seconds per repetition, at least\n"
		"  --plot FILE       attn, copy: draw the sweep with gnuplot (.svg or .png)\n"
		"  --progress        a progress line on stderr even when it is not a terminal\n"
		"  --quiet           no progress line and no notes on stderr\n"
		"  -h, --help        this text\n");
}

int main(int argc, char **argv)
{
	const char *cmd;
	unsigned int i;

	if (argc < 2) {
		fprintf(stderr, "kvbench: no subcommand given\n\n");
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	for (i = 0; i < NR_CMDS; i++)
		if (!strcmp(cmd, cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "kvbench: ");
	fprintf(stderr, cmd[0] == '-' ? "expected a subcommand before option '%s'" :
					"unknown subcommand '%s'", cmd);
	fprintf(stderr, "\n\n");
	usage(stderr);
	return 2;
}
