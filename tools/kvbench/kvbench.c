// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench: the project's benchmark entry point.
 *
 *   kvbench SUBCOMMAND [--json] [options]
 *
 * Each case reports a cost and, measured in the same run, the limit that
 * cost is compared against: the cost of the smallest operation that the
 * measured code cannot beat.  ratio = limit / value, so 1.0 means the code
 * is as cheap as the floor.
 *
 * pool:
 *   core_alloc_free_batchN   kvc_alloc + kvc_free of N blocks, in-process,
 *                            ns per block; limit: popping and pushing one
 *                            id on a plain array stack, in batches of N.
 *   ioctl_alloc_free_batchN  KVPOOL_IOC_ALLOC + KVPOOL_IOC_FREE of N blocks
 *                            on /dev/kvpool (only where it exists), ns per
 *                            block; limit: the syscall floor per block,
 *                            two ioctls the driver rejects at once
 *                            (-ENOTTY) divided by the batch.
 *
 * Timing: CLOCK_MONOTONIC; each repetition runs at least --rep-time
 * seconds; the median of --reps repetitions is reported.  Value and limit
 * repetitions alternate, so drift hits both alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <linux/kvpool.h>
#include "kvcore.h"

int cmd_hash(int argc, char **argv);	/* bench_hash.c */
int cmd_attn(int argc, char **argv);	/* bench_attn.c */

#define MAX_REPS	99
#define BENCH_BLOCK	4096ULL
#define CORE_BLOCKS	65536ULL		/* the core space: 16x the largest batch */
#define IOCTL_QUOTA	(64ULL << 20)		/* bytes; the VM pool is 64 MiB per node */
#define IOCTL_SPACE	"kvbench"
/* A command number kvpool does not know: the cheapest round trip into it. */
#define KVBENCH_IOC_NONE _IO(KVPOOL_IOC_MAGIC, 0x7f)

static const unsigned int batches[] = { 1, 16, 256, 4096 };
#define NR_BATCHES (sizeof(batches) / sizeof(batches[0]))
#define MAX_BATCH 4096

struct opts {
	bool json;
	bool quiet;
	unsigned int reps;
	double rep_time;	/* seconds per repetition, at least */
	const char *device;
	const char *only;	/* NULL, "core" or "ioctl" */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench SUBCOMMAND [--json] [options]\n"
		"\n"
		"subcommands:\n"
		"  pool          block alloc+free cost: in-process kvcore, and the kvpool\n"
		"                ioctls when /dev/kvpool exists\n"
		"  hash          prefix hashing of a prompt with libkvrt (bench_hash.c;\n"
		"                its own options: kvbench hash --help)\n"
		"  attn          CPU paged-attention decode with libkvrt, GB/s of K/V read\n"
		"                against the streaming read bandwidth (bench_attn.c; its\n"
		"                own options: kvbench attn --help)\n"
		"\n"
		"options:\n"
		"  --json            one JSON object per case per line on stdout\n"
		"  --only core|ioctl run only these cases\n"
		"  --reps N          repetitions per case, median reported (default 5, 1..%d)\n"
		"  --rep-time SEC    seconds per repetition, at least (default 0.1)\n"
		"  --device PATH     kvpool device (default /dev/kvpool)\n"
		"  --quiet           no progress lines on stderr\n"
		"  -h, --help        this text\n",
		MAX_REPS);
}

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "kvbench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n\n");
	usage(stderr);
	exit(2);
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- measurement ------------------------------------------------------- */

/* Runs iters iterations; returns 0 or a negative errno. */
typedef int (*bench_fn)(void *ctx, unsigned long iters);

struct measure {
	bench_fn fn;
	void *ctx;
	double units;		/* per iteration: blocks, ids or calls */
	unsigned long iters;	/* per repetition */
	double sample[MAX_REPS];/* ns per unit */
};

static int timed(struct measure *m, unsigned long iters, double *ns)
{
	double t0 = now_ns();
	int ret = m->fn(m->ctx, iters);

	*ns = now_ns() - t0;
	return ret;
}

/* Find iterations per repetition so one takes at least rep_time. */
static int calibrate(struct measure *m, double rep_time)
{
	double want = rep_time * 1e9, ns = 0;
	unsigned long iters = 1;
	int ret;

	for (;;) {
		ret = timed(m, iters, &ns);
		if (ret)
			return ret;
		if (ns >= want / 8 || iters >= (1UL << 40))
			break;
		iters *= ns < want / 1000 ? 16 : 2;
	}
	m->iters = (unsigned long)((double)iters * want / (ns > 1 ? ns : 1)) + 1;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, unsigned int n)
{
	double s[MAX_REPS];

	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* Alternate repetitions of value and limit; medians in ns per unit. */
static int measure_pair(struct measure *value, struct measure *limit, const struct opts *o,
			double *value_ns, double *limit_ns)
{
	unsigned int r;
	double ns;
	int ret;

	ret = calibrate(limit, o->rep_time);
	if (!ret)
		ret = calibrate(value, o->rep_time);
	for (r = 0; !ret && r < o->reps; r++) {
		ret = timed(limit, limit->iters, &ns);
		limit->sample[r] = ns / ((double)limit->iters * limit->units);
		if (!ret)
			ret = timed(value, value->iters, &ns);
		value->sample[r] = ns / ((double)value->iters * value->units);
	}
	if (ret)
		return ret;
	*value_ns = median(value->sample, o->reps);
	*limit_ns = median(limit->sample, o->reps);
	return 0;
}

/* ---- output ------------------------------------------------------------ */

static void num(char *buf, size_t len, double v)
{
	snprintf(buf, len, v >= 1000 ? "%.0f" : "%.4g", v);
}

static void report(const struct opts *o, const char *name, double value, const char *limit_unit,
		   double limit)
{
	const char *unit = "ns/block (cost; ratio = limit/value)";
	char v[32], l[32], r[32];

	num(v, sizeof(v), value);
	num(l, sizeof(l), limit);
	num(r, sizeof(r), value > 0 ? limit / value : 0);
	if (o->json)
		printf("{\"bench\":\"pool\",\"case\":\"%s\",\"value\":%s,\"unit\":\"%s\","
		       "\"limit\":%s,\"limit_unit\":\"%s\",\"ratio\":%s}\n",
		       name, v, unit, l, limit_unit, r);
	else
		printf("%-28s %12s %12s  %-26s %8s\n", name, v, l, limit_unit, r);
	fflush(stdout);
}

static void progress(const struct opts *o, unsigned int i, unsigned int n, const char *name)
{
	if (!o->quiet)
		fprintf(stderr, "kvbench: [%u/%u] %s\n", i, n, name);
}

/* ---- the limit of core: ids on a plain array stack --------------------- */

struct stack_ctx {
	kvc_u32 *stack;
	kvc_u32 top;
	kvc_u32 *out;
	unsigned int batch;
};

static int stack_run(void *c, unsigned long iters)
{
	struct stack_ctx *x = c;
	unsigned long it;

	for (it = 0; it < iters; it++) {
		kvc_u32 *st = x->stack, *out = x->out, top = x->top;
		unsigned int i, b = x->batch;

		for (i = 0; i < b; i++)
			out[i] = st[--top];
		/* The ids must really be in out[] and back on the stack. */
		__asm__ __volatile__("" : : "r"(out), "r"(st) : "memory");
		for (i = 0; i < b; i++)
			st[top++] = out[i];
		__asm__ __volatile__("" : : "r"(out), "r"(st) : "memory");
		x->top = top;
	}
	return 0;
}

/* ---- core: kvc_alloc + kvc_free --------------------------------------- */

struct core_ctx {
	struct kvc_space s;
	kvc_u32 *ids;
	unsigned int batch;
};

static long long core_grow(struct kvc_space *s, kvc_u64 want)
{
	(void)s;
	return (long long)want;
}

static const struct kvc_space_ops core_ops = { .grow = core_grow };

static int core_run(void *c, unsigned long iters)
{
	struct core_ctx *x = c;
	unsigned long it;
	int ret;

	for (it = 0; it < iters; it++) {
		ret = kvc_alloc(&x->s, 1, x->batch, x->ids);
		if (ret)
			return ret;
		ret = kvc_free(&x->s, 1, x->batch, x->ids);
		if (ret)
			return ret;
	}
	return 0;
}

static int bench_core(const struct opts *o, unsigned int *step, unsigned int steps)
{
	static kvc_u32 ids[MAX_BATCH], stack[MAX_BATCH], out[MAX_BATCH];
	struct core_ctx core = { .ids = ids };
	struct stack_ctx st = { .stack = stack, .top = MAX_BATCH, .out = out };
	unsigned int b, i;
	int ret;

	for (i = 0; i < MAX_BATCH; i++)
		stack[i] = i;
	ret = kvc_space_init(&core.s, BENCH_BLOCK, CORE_BLOCKS, &core_ops, NULL);
	if (ret)
		goto out;
	/* Back and index the largest batch once: steady state from here on. */
	core.batch = MAX_BATCH;
	ret = core_run(&core, 1);
	for (b = 0; !ret && b < NR_BATCHES; b++) {
		struct measure value = { .fn = core_run, .ctx = &core, .units = batches[b] };
		struct measure limit = { .fn = stack_run, .ctx = &st, .units = batches[b] };
		char name[64];
		double v, l;

		snprintf(name, sizeof(name), "core_alloc_free_batch%u", batches[b]);
		progress(o, ++*step, steps, name);
		core.batch = st.batch = batches[b];
		ret = measure_pair(&value, &limit, o, &v, &l);
		if (!ret)
			report(o, name, v, "ns/op array push+pop", l);
	}
	if (!ret) {
		char msg[128];

		ret = kvc_space_check(&core.s, msg, sizeof(msg));
		if (ret)
			fprintf(stderr, "kvbench: core space inconsistent: %s\n", msg);
	}
	kvc_space_fini(&core.s);
out:
	if (ret)
		fprintf(stderr, "kvbench: core: %s\n", strerror(-ret));
	return ret;
}

/* ---- ioctl: KVPOOL_IOC_ALLOC + KVPOOL_IOC_FREE ------------------------- */

struct ioctl_ctx {
	int fd;
	struct kvpool_blocks blocks;
};

static int ioctl_run(void *c, unsigned long iters)
{
	struct ioctl_ctx *x = c;
	unsigned long it;

	for (it = 0; it < iters; it++) {
		if (ioctl(x->fd, KVPOOL_IOC_ALLOC, &x->blocks))
			return -errno;
		if (ioctl(x->fd, KVPOOL_IOC_FREE, &x->blocks))
			return -errno;
	}
	return 0;
}

static int empty_run(void *c, unsigned long iters)
{
	struct ioctl_ctx *x = c;
	unsigned long it;

	for (it = 0; it < iters; it++)
		if (ioctl(x->fd, KVBENCH_IOC_NONE, NULL) != -1 || errno != ENOTTY)
			return -EPROTO;
	return 0;
}

static int bench_ioctl(const struct opts *o, unsigned int *step, unsigned int steps)
{
	static kvc_u32 ids[MAX_BATCH];
	struct kvpool_space_open so;
	struct ioctl_ctx x = { .fd = -1 };
	unsigned int b;
	int ret = 0;

	x.fd = open(o->device, O_RDWR | O_CLOEXEC);
	if (x.fd < 0) {
		ret = -errno;
		fprintf(stderr, "kvbench: open %s: %s\n", o->device, strerror(errno));
		return ret;
	}
	memset(&so, 0, sizeof(so));
	snprintf(so.name, sizeof(so.name), "%s", IOCTL_SPACE);
	so.flags = KVPOOL_SPACE_CREATE;
	so.mode = 0600;
	so.block_bytes = BENCH_BLOCK;
	so.quota_bytes = IOCTL_QUOTA;
	so.numa_policy = KVPOOL_NUMA_PREFERRED;
	if (ioctl(x.fd, KVPOOL_IOC_SPACE_OPEN, &so)) {
		ret = -errno;
		fprintf(stderr, "kvbench: KVPOOL_IOC_SPACE_OPEN \"%s\": %s\n", IOCTL_SPACE,
			strerror(errno));
		goto out_close;
	}
	if (so.nr_blocks < MAX_BATCH) {
		fprintf(stderr, "kvbench: space \"%s\" has %llu blocks, need %u\n", IOCTL_SPACE,
			(unsigned long long)so.nr_blocks, MAX_BATCH);
		ret = -ENOSPC;
		goto out_close;
	}
	x.blocks.ids = (uintptr_t)ids;
	/* Back the largest batch once: steady state from here on. */
	x.blocks.count = MAX_BATCH;
	ret = ioctl_run(&x, 1);
	for (b = 0; !ret && b < NR_BATCHES; b++) {
		struct measure value = { .fn = ioctl_run, .ctx = &x, .units = batches[b] };
		struct measure limit = { .fn = empty_run, .ctx = &x, .units = 1 };
		char name[64];
		double v, l;

		snprintf(name, sizeof(name), "ioctl_alloc_free_batch%u", batches[b]);
		progress(o, ++*step, steps, name);
		x.blocks.count = batches[b];
		ret = measure_pair(&value, &limit, o, &v, &l);
		if (!ret)
			/* Two syscalls per batch (alloc, free) spread over its blocks. */
			report(o, name, v, "ns/block 2 empty ioctls / batch",
			       2.0 * l / batches[b]);
	}
	if (ret == -EPROTO)
		fprintf(stderr, "kvbench: an unknown ioctl on %s did not fail with ENOTTY\n",
			o->device);
	else if (ret)
		fprintf(stderr, "kvbench: ioctl alloc/free: %s\n", strerror(-ret));
out_close:
	close(x.fd);
	return ret;
}

/* ---- pool -------------------------------------------------------------- */

static int cmd_pool(const struct opts *o)
{
	bool core = !o->only || !strcmp(o->only, "core");
	bool dev = !o->only || !strcmp(o->only, "ioctl");
	unsigned int step = 0, steps;
	struct stat st;
	int ret = 0;

	if (dev && stat(o->device, &st)) {
		if (o->only) {
			fprintf(stderr, "kvbench: %s: %s (is kvpool.ko loaded?)\n", o->device,
				strerror(errno));
			return 1;
		}
		if (!o->quiet)
			fprintf(stderr, "kvbench: %s absent: ioctl cases skipped\n", o->device);
		dev = false;
	}
	steps = (core + dev) * NR_BATCHES;
	if (!o->json)
		printf("%-28s %12s %12s  %-26s %8s\n", "case", "ns/block", "limit", "limit unit",
		       "ratio");
	if (core)
		ret = bench_core(o, &step, steps);
	if (dev && !ret)
		ret = bench_ioctl(o, &step, steps);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o = { .reps = 5, .rep_time = 0.1, .device = "/dev/kvpool" };
	const char *cmd;
	int i;

	if (argc < 2)
		die_usage("%s", "no subcommand given");
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "hash"))
		return cmd_hash(argc - 1, argv + 1);
	if (!strcmp(cmd, "attn"))
		return cmd_attn(argc - 1, argv + 1);
	if (strcmp(cmd, "pool"))
		die_usage(cmd[0] == '-' ? "expected a subcommand before option '%s'" :
					  "unknown subcommand '%s'", cmd);
	for (i = 2; i < argc; i++) {
		const char *a = argv[i];
		char *end;

		if (!strcmp(a, "--json")) {
			o.json = true;
		} else if (!strcmp(a, "--quiet")) {
			o.quiet = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--reps") || !strcmp(a, "--rep-time") ||
			   !strcmp(a, "--device") || !strcmp(a, "--only")) {
			const char *v;

			if (i + 1 >= argc)
				die_usage("option '%s' needs a value", a);
			v = argv[++i];
			if (!strcmp(a, "--reps")) {
				unsigned long n = strtoul(v, &end, 10);

				if (*end || !*v || n < 1 || n > MAX_REPS)
					die_usage("--reps: '%s' is not a number from 1 to 99", v);
				o.reps = (unsigned int)n;
			} else if (!strcmp(a, "--rep-time")) {
				double t = strtod(v, &end);

				if (*end || !*v || !(t > 0 && t <= 60))
					die_usage("--rep-time: '%s' is not seconds in (0, 60]", v);
				o.rep_time = t;
			} else if (!strcmp(a, "--device")) {
				o.device = v;
			} else {
				if (strcmp(v, "core") && strcmp(v, "ioctl"))
					die_usage("--only: '%s' is neither core nor ioctl", v);
				o.only = v;
			}
		} else {
			die_usage("unknown option '%s'", a);
		}
	}
	return cmd_pool(&o);
}
