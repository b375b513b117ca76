// SPDX-License-Identifier: GPL-2.0
/*
 * bench_pool.c: kvbench pool, the cost of handing out and finding blocks.
 *
 *   kvbench pool [--json] [--only core|ioctl] [--device PATH] [--spaces N]
 *                [common options]
 *
 *   core_alloc_free_batchN   kvc_alloc + kvc_free of N blocks, in-process,
 *                            ns per block; limit: popping and pushing one
 *                            id on a plain array stack, in batches of N.
 *   ioctl_alloc_free_batchN  KVPOOL_IOC_ALLOC + KVPOOL_IOC_FREE of N blocks
 *                            on /dev/kvpool (only where it exists), ns per
 *                            block; limit: the syscall floor per block,
 *                            two ioctls the driver rejects at once
 *                            (-ENOTTY) divided by the batch.
 *   core_lookup_prefix1000   kvc_lookup of a 1,000-block prefix (all hits)
 *                            + kvc_release of the 1,000 references, ns per
 *                            block; limit: comparing each looked-up hash
 *                            with the copy its block holds (no index).
 *   ioctl_lookup_prefix1000  KVPOOL_IOC_LOOKUP + KVPOOL_IOC_RELEASE of the
 *                            same, ns per block; limit: the syscall floor,
 *                            two empty ioctls spread over the 1,000 blocks.
 *   ..._colliding            the same with 1,000 hashes that share their
 *                            first 8 bytes: one bucket for an index keyed
 *                            on those bytes (issue 14, finding 8).
 *   ioctl_space_open_spacesN open(2) of the device + KVPOOL_IOC_SPACE_OPEN
 *                            joining a space by name + close(2), ns per
 *                            call, with N persistent spaces present (4 KiB
 *                            block, 4 KiB quota, nothing backed; --spaces,
 *                            default 10,000; the one joined is the last
 *                            created); limit: the same of that space alone,
 *                            measured before the others are created and
 *                            after they are destroyed (issue 14, finding 6).
 *                            It sets spaces_per_uid_max to 0 (unlimited)
 *                            for the case and restores it, so it needs
 *                            root unless that is 0 or at least N already;
 *                            otherwise it is skipped with a note.  The
 *                            spaces are destroyed with SPACE_DESTROY at the
 *                            end; a run killed midway leaves them, and the
 *                            next run destroys them first.
 *
 * The prefix's blocks are published once and released, so they sit in
 * the index as cached blocks; each repetition takes and drops one
 * reference per block, and the space's state does not grow.
 *
 * value is a cost: ratio = limit / value, 1.0 meaning as cheap as the floor.
 *
 * Timing: CLOCK_MONOTONIC; each repetition runs at least --rep-time
 * seconds (default 0.1); the median of --reps (default 5) repetitions is
 * reported.  Value and limit repetitions alternate, so drift hits both
 * alike; ioctl_space_open_spacesN cannot (its two states are N creates
 * apart), so its limit's repetitions bracket the value's instead: the
 * median of --reps before and --reps after.
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
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/kvpool.h>
#include "kvcore.h"
#include "data.h"
#include "report.h"

#define BENCH_BLOCK	4096ULL
#define CORE_BLOCKS	65536ULL		/* the core space: 16x the largest batch */
#define IOCTL_QUOTA	(64ULL << 20)		/* bytes; the VM pool is 64 MiB per node */
#define IOCTL_SPACE	"kvbench"
/* A command number kvpool does not know: the cheapest round trip into it. */
#define KVBENCH_IOC_NONE _IO(KVPOOL_IOC_MAGIC, 0x7f)

static const unsigned int batches[] = { 1, 16, 256, 4096 };
#define NR_BATCHES (sizeof(batches) / sizeof(batches[0]))
#define MAX_BATCH 4096
/* A 16k-token prompt in 16-token blocks. */
#define PREFIX_BLOCKS 1000
/* ioctl_space_open_spacesN: N by default, at most, and the spaces' names. */
#define OPEN_SPACES_DEFAULT	10000
#define OPEN_SPACES_MAX		1000000
#define OPEN_SPACE_NAME		"kvbench.open.%u"

struct pool_opts {
	struct kvb_opts c;
	const char *device;
	const char *only;	/* NULL, "core" or "ioctl" */
	unsigned int spaces;	/* ioctl_space_open_spacesN's N; 0: not run */
};

static const struct kvb_opts pool_defaults = { .bench = "pool", .reps = 5, .rep_time = 0.1 };

#define STR(x) #x
#define XSTR(x) STR(x)

static const char pool_about[] =
	"Block alloc+free cost, ns per block: in-process kvcore against an array\n"
	"stack, and the kvpool ioctls (when /dev/kvpool exists) against the\n"
	"syscall floor.  Lookup+release of a 1,000-block prefix, ns per block:\n"
	"kvcore against comparing each hash with its block's copy, the ioctls\n"
	"against the syscall floor; _colliding: hashes sharing their first 8\n"
	"bytes.  ioctl_space_open_spacesN: open + SPACE_OPEN join by name + close,\n"
	"ns per call, with N persistent spaces present, against the same with the\n"
	"space alone (needs root: spaces_per_uid_max is set to 0 for the case and\n"
	"restored).  ratio = limit / value.\n";

/* "core" or "ioctl". */
static int parse_only(const char *v, void *dst)
{
	if (strcmp(v, "core") && strcmp(v, "ioctl"))
		return -1;
	*(const char **)dst = v;
	return 0;
}

static const char pool_unit[] = "ns/block (cost; ratio = limit/value)";

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


/* ---- prefix lookup: hashes and cases ------------------------------------ */

static const char *const lookup_cases[] = { "lookup_prefix1000", "lookup_prefix1000_colliding" };
#define NR_LOOKUP (sizeof(lookup_cases) / sizeof(lookup_cases[0]))

/*
 * Random hashes, distinct; case 1 gives all the same first 8 bytes, the
 * caller-chosen pattern that piles them into one bucket of an index
 * keyed on those bytes.  Fixed seeds: every run looks up the same keys.
 */
static void prefix_hashes(kvc_u8 (*h)[KVC_HASH_BYTES], unsigned int c)
{
	uint64_t seed = 0x6b7670726566ULL + c, head = kvb_xorshift(&seed), w;
	unsigned int i, j;

	for (i = 0; i < PREFIX_BLOCKS; i++)
		for (j = 0; j < KVC_HASH_BYTES; j += 8) {
			w = j == 0 && c == 1 ? head : kvb_xorshift(&seed);
			memcpy(h[i] + j, &w, 8);
		}
}

/* ---- core: kvc_lookup + kvc_release of a prefix ------------------------ */

struct core_lookup_ctx {
	struct kvc_space *s;
	struct kvc_refs refs;
	const kvc_u8 (*hashes)[KVC_HASH_BYTES];
	const kvc_u32 *stored;	/* the block holding each hash, from publish */
	kvc_u32 *ids;
};

static int core_lookup_run(void *c, unsigned long iters)
{
	struct core_lookup_ctx *x = c;
	unsigned long it;
	int ret;

	for (it = 0; it < iters; it++) {
		ret = kvc_lookup(x->s, &x->refs, PREFIX_BLOCKS, x->hashes, x->ids);
		if (ret != PREFIX_BLOCKS)
			return ret < 0 ? ret : -ENOENT;
		ret = kvc_release(x->s, &x->refs, PREFIX_BLOCKS, x->ids);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * The limit: what any lookup must do at least, compare the 32-byte key
 * with the one its block holds and hand the id out; no index walk, no
 * references.
 */
static int hash_cmp_run(void *c, unsigned long iters)
{
	struct core_lookup_ctx *x = c;
	unsigned long it;
	unsigned int i;

	for (it = 0; it < iters; it++) {
		for (i = 0; i < PREFIX_BLOCKS; i++) {
			kvc_u32 id = x->stored[i];

			if (memcmp(kvc_block_hash(x->s, id), x->hashes[i], KVC_HASH_BYTES))
				return -EPROTO;
			x->ids[i] = id;
		}
		__asm__ __volatile__("" : : "r"(x->ids) : "memory");
	}
	return 0;
}

/* Publish the prefix under owner 1 and drop publish's references: cached. */
static int core_publish(struct kvc_space *s, struct kvc_refs *refs,
			const kvc_u8 (*hashes)[KVC_HASH_BYTES], kvc_u32 *ids)
{
	static struct kvc_publish_entry e[PREFIX_BLOCKS];
	unsigned int i;
	int ret;

	ret = kvc_alloc(s, 1, PREFIX_BLOCKS, ids);
	if (ret)
		return ret;
	memset(e, 0, sizeof(e));
	for (i = 0; i < PREFIX_BLOCKS; i++) {
		memcpy(e[i].hash, hashes[i], KVC_HASH_BYTES);
		e[i].id = ids[i];
		e[i].priority = KVC_PRIO_DEFAULT;
	}
	ret = kvc_publish(s, 1, refs, PREFIX_BLOCKS, e);
	if (ret < 0)
		return ret;
	for (i = 0; i < PREFIX_BLOCKS; i++)
		ids[i] = e[i].id;
	return kvc_release(s, refs, PREFIX_BLOCKS, ids);
}

static int bench_core_lookup(const struct kvb_report *rep, struct kvc_space *s,
			     unsigned int *step, unsigned int steps)
{
	static kvc_u8 hashes[PREFIX_BLOCKS][KVC_HASH_BYTES];
	static kvc_u32 stored[PREFIX_BLOCKS], ids[PREFIX_BLOCKS];
	struct core_lookup_ctx x = { .s = s, .hashes = (const kvc_u8 (*)[KVC_HASH_BYTES])hashes,
				     .stored = stored, .ids = ids };
	unsigned int c;
	int ret = 0;

	/* Each prefix is published just before its case; the second joins the first. */
	for (c = 0; !ret && c < NR_LOOKUP; c++) {
		struct kvb_case m = {
			.value = { .run = core_lookup_run, .ctx = &x, .units = PREFIX_BLOCKS },
			.limit = { .run = hash_cmp_run, .ctx = &x, .units = PREFIX_BLOCKS },
		};
		char name[64];

		snprintf(name, sizeof(name), "core_%s", lookup_cases[c]);
		kvb_progress(rep->o, ++*step, steps, name);
		prefix_hashes(hashes, c);
		ret = core_publish(s, &x.refs, x.hashes, stored);
		if (!ret)
			ret = kvb_measure_report(rep, name, &m, pool_unit,
						 "ns/block memcmp w/ block's hash", NULL, NULL);
	}
	kvc_release_refs(s, &x.refs);
	return ret;
}

static int bench_core(const struct kvb_report *rep, unsigned int *step, unsigned int steps)
{
	static kvc_u32 ids[MAX_BATCH], stack[MAX_BATCH], out[MAX_BATCH];
	const struct kvb_opts *o = rep->o;
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
		struct kvb_case m = {
			.value = { .run = core_run, .ctx = &core, .units = batches[b] },
			.limit = { .run = stack_run, .ctx = &st, .units = batches[b] },
		};
		char name[64];

		snprintf(name, sizeof(name), "core_alloc_free_batch%u", batches[b]);
		kvb_progress(o, ++*step, steps, name);
		core.batch = st.batch = batches[b];
		ret = kvb_measure_report(rep, name, &m, pool_unit, "ns/op array push+pop", NULL,
					 NULL);
	}
	if (!ret)
		ret = bench_core_lookup(rep, &core.s, step, steps);
	if (!ret) {
		char msg[128];

		ret = kvc_space_check(&core.s, msg, sizeof(msg));
		if (ret)
			fprintf(stderr, "kvbench pool: core space inconsistent: %s\n", msg);
	}
	kvc_space_fini(&core.s);
out:
	if (ret == -ENOENT)
		fprintf(stderr, "kvbench pool: core: kvc_lookup missed a block just published\n");
	else if (ret == -EPROTO)
		fprintf(stderr, "kvbench pool: core: a block does not hold its published hash\n");
	else if (ret)
		fprintf(stderr, "kvbench pool: core: %s\n", strerror(-ret));
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


/* ---- ioctl: KVPOOL_IOC_LOOKUP + KVPOOL_IOC_RELEASE of a prefix ---------- */

struct ioctl_lookup_ctx {
	int fd;
	struct kvpool_lookup lookup;
	struct kvpool_blocks release;
};

static int ioctl_lookup_run(void *c, unsigned long iters)
{
	struct ioctl_lookup_ctx *x = c;
	unsigned long it;

	for (it = 0; it < iters; it++) {
		x->lookup.nr_hits = 0;	/* out only: 0 on the way in (API 4) */
		if (ioctl(x->fd, KVPOOL_IOC_LOOKUP, &x->lookup))
			return -errno;
		if (x->lookup.nr_hits != PREFIX_BLOCKS)
			return -ENOENT;
		if (ioctl(x->fd, KVPOOL_IOC_RELEASE, &x->release))
			return -errno;
	}
	return 0;
}

/* Publish the prefix through the device and release it: cached. */
static int ioctl_publish(int fd, const kvc_u8 (*hashes)[KVC_HASH_BYTES], kvc_u32 *ids)
{
	static struct kvpool_publish_entry e[PREFIX_BLOCKS];
	struct kvpool_blocks b = { .ids = (uintptr_t)ids, .count = PREFIX_BLOCKS };
	struct kvpool_publish p = { .entries = (uintptr_t)e, .count = PREFIX_BLOCKS };
	unsigned int i;

	if (ioctl(fd, KVPOOL_IOC_ALLOC, &b))
		return -errno;
	memset(e, 0, sizeof(e));
	for (i = 0; i < PREFIX_BLOCKS; i++) {
		memcpy(e[i].hash, hashes[i], KVPOOL_HASH_BYTES);
		e[i].id = ids[i];
	}
	if (ioctl(fd, KVPOOL_IOC_PUBLISH, &p))
		return -errno;
	/* A space left by an earlier run already holds them: use its blocks. */
	for (i = 0; i < PREFIX_BLOCKS; i++)
		ids[i] = e[i].id;
	return ioctl(fd, KVPOOL_IOC_RELEASE, &b) ? -errno : 0;
}

static int bench_ioctl_lookup(const struct kvb_report *rep, int fd, unsigned int *step,
			      unsigned int steps)
{
	static kvc_u8 hashes[PREFIX_BLOCKS][KVC_HASH_BYTES];
	static kvc_u32 ids[PREFIX_BLOCKS];
	struct ioctl_lookup_ctx x = {
		.fd = fd,
		.lookup = { .hashes = (uintptr_t)hashes, .ids = (uintptr_t)ids,
			    .count = PREFIX_BLOCKS },
		.release = { .ids = (uintptr_t)ids, .count = PREFIX_BLOCKS },
	};
	struct ioctl_ctx empty = { .fd = fd };
	unsigned int c;
	int ret = 0;

	for (c = 0; !ret && c < NR_LOOKUP; c++) {
		/* Two syscalls per repetition (lookup, release) over its blocks. */
		struct kvb_case m = {
			.value = { .run = ioctl_lookup_run, .ctx = &x, .units = PREFIX_BLOCKS },
			.limit = { .run = empty_run, .ctx = &empty, .units = PREFIX_BLOCKS / 2.0 },
		};
		char name[64];

		snprintf(name, sizeof(name), "ioctl_%s", lookup_cases[c]);
		kvb_progress(rep->o, ++*step, steps, name);
		prefix_hashes(hashes, c);
		ret = ioctl_publish(fd, (const kvc_u8 (*)[KVC_HASH_BYTES])hashes, ids);
		if (!ret)
			ret = kvb_measure_report(rep, name, &m, pool_unit,
						 "ns/block 2 empty ioctls / 1000", NULL, NULL);
	}
	return ret;
}

static int bench_ioctl(const struct kvb_report *rep, const char *device, unsigned int *step,
		       unsigned int steps)
{
	static kvc_u32 ids[MAX_BATCH];
	const struct kvb_opts *o = rep->o;
	struct kvpool_space_open so;
	struct ioctl_ctx x = { .fd = -1 };
	unsigned int b;
	int ret = 0;

	x.fd = open(device, O_RDWR | O_CLOEXEC);
	if (x.fd < 0) {
		ret = -errno;
		fprintf(stderr, "kvbench pool: open %s: %s\n", device, strerror(errno));
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
		fprintf(stderr, "kvbench pool: KVPOOL_IOC_SPACE_OPEN \"%s\": %s\n", IOCTL_SPACE,
			strerror(errno));
		goto out_close;
	}
	if (so.nr_blocks < MAX_BATCH) {
		fprintf(stderr, "kvbench pool: space \"%s\" has %llu blocks, need %u\n",
			IOCTL_SPACE, (unsigned long long)so.nr_blocks, MAX_BATCH);
		ret = -ENOSPC;
		goto out_close;
	}
	x.blocks.ids = (uintptr_t)ids;
	/* Back the largest batch once: steady state from here on. */
	x.blocks.count = MAX_BATCH;
	ret = ioctl_run(&x, 1);
	for (b = 0; !ret && b < NR_BATCHES; b++) {
		/* Two syscalls per batch (alloc, free) spread over its blocks. */
		struct kvb_case m = {
			.value = { .run = ioctl_run, .ctx = &x, .units = batches[b] },
			.limit = { .run = empty_run, .ctx = &x, .units = batches[b] / 2.0 },
		};
		char name[64];

		snprintf(name, sizeof(name), "ioctl_alloc_free_batch%u", batches[b]);
		kvb_progress(o, ++*step, steps, name);
		x.blocks.count = batches[b];
		ret = kvb_measure_report(rep, name, &m, pool_unit, "ns/block 2 empty ioctls / batch",
					 NULL, NULL);
	}
	if (!ret)
		ret = bench_ioctl_lookup(rep, x.fd, step, steps);
	if (ret == -EPROTO)
		fprintf(stderr, "kvbench pool: an unknown ioctl on %s did not fail with ENOTTY\n",
			device);
	else if (ret == -ENOENT)
		fprintf(stderr, "kvbench pool: LOOKUP on %s missed a block just published\n",
			device);
	else if (ret)
		fprintf(stderr, "kvbench pool: ioctl: %s\n", strerror(-ret));
out_close:
	close(x.fd);
	return ret;
}

/* ---- ioctl: SPACE_OPEN by name among many spaces ----------------------- */

struct open_ctx {
	const char *device;
	char name[KVPOOL_NAME_MAX];
};

/* open(2) the device, join the space named x->name, close(2): one call. */
static int open_join_run(void *c, unsigned long iters)
{
	struct open_ctx *x = c;
	struct kvpool_space_open so;
	unsigned long it;
	int fd, ret;

	for (it = 0; it < iters; it++) {
		fd = open(x->device, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		memset(&so, 0, sizeof(so));
		memcpy(so.name, x->name, sizeof(so.name));
		ret = ioctl(fd, KVPOOL_IOC_SPACE_OPEN, &so) ? -errno : 0;
		close(fd);
		if (ret)
			return ret;
		if (so.created)
			return -EPROTO;
	}
	return 0;
}

/* Create space number i, persistent: one 4 KiB block of quota, none backed. */
static int open_space_make(const char *device, unsigned int i)
{
	struct kvpool_space_open so;
	int fd, ret;

	fd = open(device, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	memset(&so, 0, sizeof(so));
	snprintf(so.name, sizeof(so.name), OPEN_SPACE_NAME, i);
	so.flags = KVPOOL_SPACE_CREATE | KVPOOL_SPACE_PERSIST;
	so.mode = 0600;
	so.block_bytes = BENCH_BLOCK;
	so.quota_bytes = BENCH_BLOCK;
	so.numa_policy = KVPOOL_NUMA_PREFERRED;
	ret = ioctl(fd, KVPOOL_IOC_SPACE_OPEN, &so) ? -errno : 0;
	close(fd);
	return ret;
}

/* Unlink space number i (-ENOENT when there is none). */
static int open_space_unlink(int ctl, unsigned int i)
{
	struct kvpool_space_destroy d;

	memset(&d, 0, sizeof(d));
	snprintf(d.name, sizeof(d.name), OPEN_SPACE_NAME, i);
	return ioctl(ctl, KVPOOL_IOC_SPACE_DESTROY, &d) ? -errno : 0;
}

/* Unlink spaces [from, to); the first error other than -ENOENT, or 0. */
static int open_spaces_unlink(int ctl, unsigned int from, unsigned int to)
{
	unsigned int i;
	int ret = 0, r;

	for (i = from; i < to; i++) {
		r = open_space_unlink(ctl, i);
		if (r && r != -ENOENT && !ret)
			ret = r;
	}
	return ret;
}

/* The device's sysfs attribute attr: /sys/dev/char/MAJOR:MINOR/attr. */
static void dev_attr_path(char *buf, size_t len, dev_t rdev, const char *attr)
{
	snprintf(buf, len, "/sys/dev/char/%u:%u/%s", major(rdev), minor(rdev), attr);
}

static int sysfs_read_ulong(const char *path, unsigned long *v)
{
	char buf[32], *end;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	errno = 0;
	*v = strtoul(buf, &end, 10);
	return errno || end == buf ? -EIO : 0;
}

static int sysfs_write_ulong(const char *path, unsigned long v)
{
	char buf[32];
	int fd, n, ret;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "%lu\n", v);
	ret = write(fd, buf, n) == n ? 0 : -errno;
	close(fd);
	return ret;
}

static int cmp_ns(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* reps repetitions of s, ns per call, into sample[]. */
static int open_reps(struct kvb_side *s, unsigned int reps, double *sample)
{
	unsigned int r;
	int ret;

	for (r = 0; r < reps; r++) {
		ret = kvb_time_counted(s, &sample[r]);
		if (ret)
			return ret;
		sample[r] *= 1e9;
	}
	return 0;
}

/*
 * ioctl_space_open_spacesN: open + SPACE_OPEN (join by name) + close of
 * the space created last among N persistent spaces, against the same of
 * that space alone, measured before the other N - 1 are created and
 * again after they are destroyed (the limit is the median of both sets:
 * the value's repetitions cannot alternate with a state that takes
 * N creates and destroys to reach).  The last-created space is the far
 * end of a list scanned from its head.  Needs spaces_per_uid_max 0 or
 * at least N: it is set to 0 (unlimited) for the case and restored,
 * which needs root; without it the case is skipped with a note.
 */
static int bench_ioctl_open(const struct kvb_report *rep, const char *device, dev_t rdev,
			    unsigned int nspaces, unsigned int *step, unsigned int steps)
{
	const struct kvb_opts *o = rep->o;
	struct open_ctx x = { .device = device };
	struct kvb_side value = { .run = open_join_run, .ctx = &x, .units = 1 };
	struct kvb_side limit = { .run = open_join_run, .ctx = &x, .units = 1 };
	double vsample[KVB_MAX_REPS], lsample[2 * KVB_MAX_REPS], v, l, t0;
	char max_path[96], spaces_path[96], name[64];
	unsigned long old_max = 0, present = 0;
	unsigned int made, last = nspaces - 1;
	bool raised = false;
	int ctl, ret, r;

	snprintf(name, sizeof(name), "ioctl_space_open_spaces%u", nspaces);
	kvb_progress(o, ++*step, steps, name);
	dev_attr_path(max_path, sizeof(max_path), rdev, "spaces_per_uid_max");
	dev_attr_path(spaces_path, sizeof(spaces_path), rdev, "spaces");
	ret = sysfs_read_ulong(max_path, &old_max);
	if (ret) {
		kvb_note(o, "%s: %s: %s skipped", max_path, strerror(-ret), name);
		return 0;
	}
	if (old_max) {
		ret = sysfs_write_ulong(max_path, 0);
		if (ret && old_max < nspaces) {
			kvb_note(o, "%s is %lu and cannot be raised (%s; root can): %s skipped",
				 max_path, old_max, strerror(-ret), name);
			return 0;
		}
		raised = !ret;
		ret = 0;
	}
	ctl = open(device, O_RDWR | O_CLOEXEC);
	if (ctl < 0) {
		ret = -errno;
		goto out_restore;
	}
	/* A run killed midway leaves its persistent spaces behind. */
	if (!sysfs_read_ulong(spaces_path, &present) && present) {
		ret = open_spaces_unlink(ctl, 0, nspaces);
		if (ret)
			goto out_close;
		if (!sysfs_read_ulong(spaces_path, &present) && present)
			kvb_note(o, "%lu other spaces present: %s's limit is not alone", present,
				 name);
	}
	snprintf(x.name, sizeof(x.name), OPEN_SPACE_NAME, last);

	/* The limit, before: the space alone. */
	ret = open_space_make(device, last);
	if (ret == -EDQUOT)
		goto out_quota;
	if (!ret)
		ret = kvb_calibrate(&limit, o->rep_time);
	if (!ret)
		ret = open_reps(&limit, o->reps, lsample);
	r = open_space_unlink(ctl, last);
	if (!ret)
		ret = r;
	if (ret)
		goto out_unlink;

	/* N - 1 others first, so the space joined is the last created. */
	t0 = kvb_now_s();
	for (made = 0; made < nspaces; made++) {
		ret = open_space_make(device, made);
		if (ret)
			break;
	}
	if (ret == -EDQUOT) {
		ret = open_spaces_unlink(ctl, 0, made);
		if (ret)
			goto out_close;
		goto out_quota;
	}
	if (ret)
		goto out_unlink;
	kvb_note(o, "%s: %u spaces created in %.2f s", name, nspaces, kvb_now_s() - t0);
	ret = kvb_calibrate(&value, o->rep_time);
	if (!ret)
		ret = open_reps(&value, o->reps, vsample);
	if (ret)
		goto out_unlink;

	/* The limit, after: the others destroyed, the same space alone again. */
	t0 = kvb_now_s();
	ret = open_spaces_unlink(ctl, 0, last);
	if (ret)
		goto out_unlink;
	kvb_note(o, "%s: %u spaces destroyed in %.2f s", name, last, kvb_now_s() - t0);
	ret = open_reps(&limit, o->reps, lsample + o->reps);
	r = open_space_unlink(ctl, last);
	if (!ret)
		ret = r;
	if (ret)
		goto out_close;

	v = kvb_median(vsample, o->reps);
	/* The two halves apart: how far the machine drifted over the case. */
	kvb_note(o, "%s: the space alone: %.0f ns/call before, %.0f after", name,
		 kvb_median(lsample, o->reps), kvb_median(lsample + o->reps, o->reps));
	qsort(lsample, 2 * o->reps, sizeof(lsample[0]), cmp_ns);
	l = (lsample[o->reps - 1] + lsample[o->reps]) / 2;	/* 2 * reps samples: even */
	kvb_report(rep, name, v, "ns/call (cost; ratio = limit/value)", l,
		   "ns/call, the space alone");
	goto out_close;

out_quota:
	kvb_note(o, "%s: SPACE_OPEN create: %s (spaces_per_uid_max %lu): skipped", name,
		 strerror(EDQUOT), raised ? 0 : old_max);
	ret = 0;
	goto out_close;
out_unlink:
	r = open_spaces_unlink(ctl, 0, nspaces);
	if (r)
		fprintf(stderr, "kvbench pool: %s: destroying its spaces: %s\n", name,
			strerror(-r));
out_close:
	close(ctl);
out_restore:
	if (raised) {
		r = sysfs_write_ulong(max_path, old_max);
		if (r)
			fprintf(stderr, "kvbench pool: restoring %s to %lu: %s\n", max_path,
				old_max, strerror(-r));
	}
	if (ret == -EPROTO)
		fprintf(stderr, "kvbench pool: %s: SPACE_OPEN without CREATE created a space\n",
			name);
	else if (ret)
		fprintf(stderr, "kvbench pool: %s: %s\n", name, strerror(-ret));
	return ret;
}

/* ---- pool -------------------------------------------------------------- */

/* argv[0] is "pool". */
int cmd_pool(int argc, char **argv)
{
	struct pool_opts o = { .c = pool_defaults, .device = "/dev/kvpool",
			       .spaces = OPEN_SPACES_DEFAULT };
	struct kvb_report rep = { .o = &o.c, .ratio = KVB_COST, .name_w = 34, .num_w = 12,
				  .unit_w = 31, .ratio_w = 8 };
	unsigned int step = 0, steps;
	bool core, dev;
	struct stat st;
	int ret;
	const struct topt opts[] = {
		{ .name = "--only", .arg = "core|ioctl", .kind = TOPT_FUNC, .dst = &o.only,
		  .parse = parse_only, .want = "core or ioctl",
		  .help = "run only these cases" },
		{ .name = "--device", .arg = "PATH", .kind = TOPT_STR, .dst = &o.device,
		  .help = "kvpool device (default /dev/kvpool)" },
		{ .name = "--spaces", .arg = "N", .kind = TOPT_UINT, .dst = &o.spaces, .min = 0,
		  .max = OPEN_SPACES_MAX, .want = "a count of 0 to " XSTR(OPEN_SPACES_MAX),
		  .help = "spaces present in ioctl_space_open_spacesN (default "
			  XSTR(OPEN_SPACES_DEFAULT) ",\nat most " XSTR(OPEN_SPACES_MAX)
			  "; 0: not run)" },
		{ NULL },
	};
	if (!kvb_parse(&pool_defaults, pool_about, opts, &o.c, argc, argv, &ret))
		return ret;
	core = !o.only || !strcmp(o.only, "core");
	dev = !o.only || !strcmp(o.only, "ioctl");
	if (dev && stat(o.device, &st)) {
		if (o.only) {
			fprintf(stderr, "kvbench pool: %s: %s (is kvpool.ko loaded?)\n", o.device,
				strerror(errno));
			return 1;
		}
		kvb_note(&o.c, "%s absent: ioctl cases skipped", o.device);
		dev = false;
	}
	steps = (core + dev) * (NR_BATCHES + NR_LOOKUP) + (dev && o.spaces);
	kvb_report_header(&rep, "ns");
	ret = 0;
	if (core)
		ret = bench_core(&rep, &step, steps);
	if (dev && !ret)
		ret = bench_ioctl(&rep, o.device, &step, steps);
	/* After bench_ioctl's space is gone: only this case's spaces exist. */
	if (dev && o.spaces && !ret)
		ret = bench_ioctl_open(&rep, o.device, st.st_rdev, o.spaces, &step, steps);
	kvb_progress_end();
	return ret ? 1 : 0;
}
