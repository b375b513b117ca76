// SPDX-License-Identifier: GPL-2.0
/*
 * bench_tier.c: kvbench tier, libkvrt's SSD tier against fio, and its Redis
 * Cluster tier against redis-benchmark.
 *
 *   kvbench tier [--json] [--dir DIR] [--mib M] [--queue-depth N]
 *                [--batch N] [--redis HOST:PORT,... [--redis-mib M]]
 *                [common options]
 *
 * Cases ssd_store_<B> and ssd_fetch_<B>, for blocks B of 256 KiB and 2 MiB:
 * M MiB (default 256) of blocks, in batches of --batch blocks (32):
 *
 *   store   kvrt_tier_store() of blocks of an embedded space into a new SSD
 *           tier below DIR: O_DIRECT writes through io_uring, then the
 *           data file's fdatasync and the index records' (per batch)
 *   fetch   after a restart (a new pool, the tier reopened from its index),
 *           kvrt_lookup_tiers() of the blocks' hashes: O_DIRECT reads into
 *           new blocks of the space, each checksummed, then published
 *
 * and ssd_store_wb_<B>: the same blocks, published first, stored into a tier
 * opened write-back (KVRT_TIER_WRITE_BACK, a queue as long as the blocks):
 * value = GB/s as the caller sees it (the kvrt_tier_store() calls only),
 * limit = the write-through store's GB/s of the same repetition, so ratio
 * is how much sooner an engine's step gets on; a note gives the GB/s to
 * the end of kvrt_tier_flush() (the device's work is the same).
 *
 * value = GB/s of block bytes.  limit, measured in the same run on the same
 * file system: fio writing (then reading) a file of the same size with the
 * same block size, O_DIRECT, io_uring, the tier's depth (the smaller of
 * --queue-depth and --batch: a call has at most its batch in flight), and,
 * for writes, an fdatasync every --batch blocks as the tier does.  ratio =
 * value / limit.  Each repetition runs the tier's case and fio's once;
 * of --reps (default 3) pairs the one with the middle ratio is reported.
 *
 * With --redis, cases redis_store_<B>, redis_fetch_<B> and redis_store_wb_<B> too: --redis-mib
 * MiB (64) of blocks stored into, and after a restart fetched from, that
 * cluster's tier (keys under kvbench:, expiring after 600 s; new keys each
 * repetition), GB/s; limit: redis-benchmark --cluster SET and GET of values
 * of the block size, one client pipelining --batch requests, over as many
 * keys as the tier's blocks, against the same cluster in the same run.
 * The tier's and the peer's ACL user: $KVRT_REDIS_USER, $KVRT_REDIS_PASSWORD
 * (the peer's keys are key:*).  A note line gives the fetches in blocks/s.
 *
 * fio (Debian's fio) must be on $PATH, and redis-benchmark (redis-tools)
 * for --redis: without them kvbench tier says so and exits 1.  DIR defaults to $TMPDIR or /var/tmp: it needs O_DIRECT (not
 * tmpfs before Linux 6.6), and what is measured is its device.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvrt.h"
#include "child.h"
#include "report.h"

#define TIER_MAX_REPS 9

struct tier_opts {
	struct kvb_opts c;
	const char *dir;
	unsigned long mib;
	unsigned int qd;
	unsigned int batch;
	const char *redis;		/* --redis SEEDS: the Redis cases too */
	unsigned long redis_mib;
};

static const struct kvb_opts tier_defaults = { .bench = "tier", .reps = 3, .rep_time = 0 };

static const char tier_about[] =
	"libkvrt's SSD tier: store and fetch GB/s at 256 KiB and 2 MiB blocks, against\n"
	"fio's O_DIRECT writes and reads of the same size on the same file system;\n"
	"with --redis, its Redis Cluster tier against redis-benchmark SET and GET on\n"
	"the same cluster.  ratio = value / limit.  Needs fio (and redis-benchmark).\n";

/* One block size's state: a pool, a space and its tier. */
struct tier_run {
	const struct tier_opts *o;
	bool redis;		/* the Redis Cluster tier, else the SSD tier */
	bool write_back;	/* the tier opened KVRT_TIER_WRITE_BACK */
	unsigned int rep;	/* Redis: each repetition stores new keys */
	uint64_t bb;		/* block bytes */
	uint32_t n;		/* blocks */
	char dir[4096];
	struct kvrt *k;
	struct kvrt_space *s;
	struct kvrt_tier *t;
	uint8_t (*hashes)[KVRT_HASH_BYTES];
	uint32_t *ids;
};

static void run_close(struct tier_run *r)
{
	if (r->s)
		kvrt_space_close(r->s);
	if (r->k)
		kvrt_close(r->k);
	r->s = NULL;
	r->k = NULL;
	r->t = NULL;
}

/* A new pool, the space, and the SSD tier below r->dir. */
static int run_open(struct tier_run *r)
{
	struct kvrt_open_opts ko = { .backend = KVRT_BACKEND_EMBEDDED,
				     .flags = KVRT_OPEN_NO_HUGETLB };
	struct kvrt_space_opts so = { .name = "kvbench-tier", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = r->bb,
				      .quota_bytes = (uint64_t)(r->n + 1) * r->bb };
	/* Write-back: a queue that takes every block, so that no call waits. */
	uint32_t wb_flags = r->write_back ? KVRT_TIER_WRITE_BACK : 0;
	uint32_t wb_max = r->write_back ? (r->n < KVRT_MAX_BATCH ? r->n : KVRT_MAX_BATCH) : 0;
	struct kvrt_tier_ssd_opts to = { .dir = r->dir, .capacity_bytes = (uint64_t)r->n * r->bb,
					 .queue_depth = r->o->qd, .flags = wb_flags,
					 .writeback_max = wb_max };
	/* Keys that go by themselves: a benchmark leaves nothing for good. */
	struct kvrt_tier_redis_opts ro = { .nodes = r->o->redis, .user = getenv("KVRT_REDIS_USER"),
					   .password = getenv("KVRT_REDIS_PASSWORD"),
					   .key_prefix = "kvbench:", .ttl_s = 600, .timeout_ms = 5000,
					   .flags = wb_flags, .writeback_max = wb_max };
	int ret;

	ret = kvrt_open(&r->k, &ko);
	if (!ret)
		ret = kvrt_space_open(r->k, &so, &r->s);
	if (!ret)
		ret = r->redis ? kvrt_tier_open_redis(r->s, &ro, &r->t) :
				 kvrt_tier_open_ssd(r->s, &to, &r->t);
	if (ret)
		run_close(r);
	return ret;
}

static int remove_tree(const char *dir)
{
	char *argv[] = { "rm", "-rf", (char *)dir, NULL };
	char out[256];
	bool timed_out;
	int fd, status;
	pid_t pid;

	pid = kvb_child_start("rm", argv, KVB_CHILD_SEARCH | KVB_CHILD_STDERR, &fd);
	if (pid < 0)
		return (int)pid;
	kvb_child_read(fd, pid, out, sizeof(out), 0, &timed_out);
	return kvb_child_wait(pid, &status) ? -EIO : 0;
}

/*
 * Store all blocks into a new tier: seconds in kvrt_tier_store(), or a
 * negative errno.  Write-back: the blocks are published first (what it
 * queues), and *drain gets the seconds to the end of kvrt_tier_flush().
 */
static double time_store(struct tier_run *r, double *drain)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	uint32_t i, j;
	double t0, t = 0;
	int ret;

	if (!r->redis)
		remove_tree(r->dir);
	ret = run_open(r);
	if (ret)
		return ret;
	ret = kvrt_alloc_blocks(r->s, r->n, r->ids);
	if (ret)
		goto out;
	/* Data that no device can compress or deduplicate. */
	for (i = 0; i < r->n; i++) {
		uint64_t *p = kvrt_block_addr(r->s, r->ids[i]);

		for (j = 0; j < r->bb / 8; j++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			p[j] = x;
		}
	}
	for (i = 0; r->write_back && i < r->n && ret >= 0; i += r->o->batch) {
		uint32_t m = r->n - i < r->o->batch ? r->n - i : r->o->batch;

		ret = kvrt_publish(r->s, m, r->ids + i,
				   (const uint8_t (*)[KVRT_HASH_BYTES])r->hashes + i, NULL, NULL);
	}
	t0 = kvb_now_s();
	for (i = 0; i < r->n && ret >= 0; i += r->o->batch) {
		uint32_t m = r->n - i < r->o->batch ? r->n - i : r->o->batch;

		ret = kvrt_tier_store(r->s, m, r->ids + i,
				      (const uint8_t (*)[KVRT_HASH_BYTES])r->hashes + i, NULL);
		if (ret >= 0 && (uint32_t)ret != m)
			ret = -ENOSPC;
	}
	t = kvb_now_s() - t0;
	if (r->write_back && ret >= 0) {
		ret = kvrt_tier_flush(r->s);
		*drain = kvb_now_s() - t0;
	}
out:
	run_close(r);
	return ret < 0 ? ret : t;
}

/* A restart, then every block brought up from the tier: seconds, or a negative errno. */
static double time_fetch(struct tier_run *r)
{
	double t0, t;
	uint32_t i;
	int ret;

	ret = run_open(r);
	if (ret)
		return ret;
	t0 = kvb_now_s();
	for (i = 0; i < r->n; i += r->o->batch) {
		uint32_t m = r->n - i < r->o->batch ? r->n - i : r->o->batch;

		ret = kvrt_lookup_tiers(r->s, m, (const uint8_t (*)[KVRT_HASH_BYTES])r->hashes + i,
					r->ids + i, NULL);
		if (ret >= 0 && (uint32_t)ret != m) {
			ret = -ENODATA;
			break;
		}
	}
	t = kvb_now_s() - t0;
	run_close(r);
	return ret < 0 ? ret : t;
}

/* The tier has at most a batch's requests in flight: fio gets the same depth. */
static unsigned int inflight(const struct tier_opts *o)
{
	return o->batch < o->qd ? o->batch : o->qd;
}

/* fio's bw_bytes of the "read" or "write" part of its JSON, or 0. */
static double fio_bw(const char *json, const char *part)
{
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), "\"%s\" : {", part);
	p = strstr(json, key);
	p = p ? strstr(p, "\"bw_bytes\" : ") : NULL;
	return p ? strtod(p + strlen("\"bw_bytes\" : "), NULL) : 0;
}

/* fio writing or reading r->n blocks of r->bb in DIR/fio.dat: bytes per second, or 0 (why). */
static double fio_rate(struct tier_run *r, bool write, char *why, size_t wlen)
{
	char file[4200], size[32], bs[32], qd[16], sync[16], out[1 << 16];
	char *argv[] = { "fio", "--name=kvbench-tier", "--ioengine=io_uring", "--direct=1",
			 "--output-format=json", NULL, NULL, NULL, NULL, NULL, NULL, NULL };
	int fd, status, na = 5;
	bool timed_out;
	double bw;
	pid_t pid;

	snprintf(file, sizeof(file), "--filename=%s/fio.dat", r->o->dir);
	snprintf(size, sizeof(size), "--size=%llu", (unsigned long long)r->n * r->bb);
	snprintf(bs, sizeof(bs), "--bs=%llu", (unsigned long long)r->bb);
	snprintf(qd, sizeof(qd), "--iodepth=%u", inflight(r->o));
	snprintf(sync, sizeof(sync), "--fdatasync=%u", r->o->batch);
	argv[na++] = file;
	argv[na++] = size;
	argv[na++] = bs;
	argv[na++] = qd;
	argv[na++] = write ? "--rw=write" : "--rw=read";
	if (write)
		argv[na++] = sync;
	pid = kvb_child_start("fio", argv, KVB_CHILD_SEARCH, &fd);
	if (pid < 0) {
		snprintf(why, wlen, "cannot start fio: %s", strerror((int)-pid));
		return 0;
	}
	kvb_child_read(fd, pid, out, sizeof(out), 600, &timed_out);
	kvb_child_wait(pid, &status);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		snprintf(why, wlen, "fio is not on $PATH (Debian: apt-get install fio)");
		return 0;
	}
	bw = fio_bw(out, write ? "write" : "read");
	if (!WIFEXITED(status) || WEXITSTATUS(status) || !(bw > 0))
		snprintf(why, wlen, "fio %s failed (status %d)%s", write ? "write" : "read", status,
			 timed_out ? ", past 600 s" : "");
	return bw;
}

/* redis-benchmark's SET and GET rates at the tier's value size: bytes per second, or 0 (why). */
static int redis_peer(struct tier_run *r, double *set_bps, double *get_bps, char *why, size_t wlen)
{
	char host[64], port[16], d[32], n[32], keys[32], pipe[16], out[1 << 14];
	char *argv[24] = { "redis-benchmark", "--cluster", "-h", host, "-p", port, "-t", "set,get",
			   "-d", d, "-n", n, "-r", keys, "-P", pipe, "-c", "1", "--csv" };
	const char *user = getenv("KVRT_REDIS_USER"), *pass = getenv("KVRT_REDIS_PASSWORD");
	const char *seed = r->o->redis, *colon;
	int na = 19, fd, status;
	bool timed_out;
	const char *p;
	pid_t pid;

	colon = strchr(seed, ':');
	if (!colon || (size_t)(colon - seed) >= sizeof(host)) {
		snprintf(why, wlen, "--redis %s: want HOST:PORT[,...]", seed);
		return -EINVAL;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - seed), seed);
	snprintf(port, sizeof(port), "%d", atoi(colon + 1));
	snprintf(d, sizeof(d), "%llu", (unsigned long long)r->bb);
	/* As many distinct keys as the tier's blocks, each set and read about 4 times. */
	snprintf(keys, sizeof(keys), "%u", r->n);
	snprintf(n, sizeof(n), "%u", 4 * (r->n > r->o->batch ? r->n : r->o->batch));
	snprintf(pipe, sizeof(pipe), "%u", r->o->batch);
	if (user && *user) {
		argv[na++] = "--user";
		argv[na++] = (char *)user;
	}
	if (pass && *pass) {
		argv[na++] = "-a";
		argv[na++] = (char *)pass;
	}
	argv[na] = NULL;
	pid = kvb_child_start("redis-benchmark", argv, KVB_CHILD_SEARCH, &fd);
	if (pid < 0) {
		snprintf(why, wlen, "cannot start redis-benchmark: %s", strerror((int)-pid));
		return (int)pid;
	}
	kvb_child_read(fd, pid, out, sizeof(out), 600, &timed_out);
	kvb_child_wait(pid, &status);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		snprintf(why, wlen, "redis-benchmark is not on $PATH (Debian: apt-get install redis-tools)");
		return -ENOENT;
	}
	p = strstr(out, "\"SET\",\"");
	*set_bps = p ? strtod(p + 7, NULL) * (double)r->bb : 0;
	p = strstr(out, "\"GET\",\"");
	*get_bps = p ? strtod(p + 7, NULL) * (double)r->bb : 0;
	if (!(*set_bps > 0) || !(*get_bps > 0)) {
		snprintf(why, wlen, "redis-benchmark gave no SET/GET rates (status %d)", status);
		return -EIO;
	}
	return 0;
}

/* r->hashes: the blocks' names, in a series of their own per tag. */
static int tier_hashes(struct tier_run *r, uint32_t tag)
{
	uint32_t j;

	for (j = 0; j < r->n; j++) {
		uint32_t tok[3] = { (uint32_t)r->bb, j, tag };

		if (kvrt_hash_block(NULL, tok, 3, NULL, 0, r->hashes[j]))
			return -EIO;
	}
	return 0;
}

static int bench_size(struct tier_run *r, const struct kvb_report *rep)
{
	double sv[TIER_MAX_REPS], sl[TIER_MAX_REPS], fv[TIER_MAX_REPS], fl[TIER_MAX_REPS];
	double wv[TIER_MAX_REPS], wd[TIER_MAX_REPS], bytes = (double)r->n * (double)r->bb, v, l, t;
	char name[64], lunit[160], why[256] = "", sync_note[32];
	unsigned int i, reps = r->o->c.reps > TIER_MAX_REPS ? TIER_MAX_REPS : r->o->c.reps;

	snprintf(sync_note, sizeof(sync_note), ", fdatasync/%u", r->o->batch);
	for (i = 0; i < reps; i++) {
		/* Redis: new keys each repetition (its SET NX skips what is there). */
		uint32_t tag = r->redis ? (uint32_t)getpid() * 16 + i : 0;

		if (tier_hashes(r, tag))
			return -EIO;
		snprintf(name, sizeof(name), "%llu KiB blocks, repetition %u",
			 (unsigned long long)(r->bb >> 10), i + 1);
		kvb_progress(&r->o->c, i + 1, reps, name);
		t = time_store(r, NULL);
		if (t < 0)
			return (int)t;
		sv[i] = t / bytes;
		t = time_fetch(r);
		if (t < 0)
			return (int)t;
		fv[i] = t / bytes;
		/* Write-back, on keys of its own (Redis: new ones; SSD: a new tier). */
		if (tier_hashes(r, tag + 8))
			return -EIO;
		r->write_back = true;
		t = time_store(r, &wd[i]);
		r->write_back = false;
		if (t < 0)
			return (int)t;
		wv[i] = t / bytes;
		/* the peer's limits: seconds per byte, as the values */
		if (r->redis) {
			v = l = 0;
			redis_peer(r, &v, &l, why, sizeof(why));
		} else {
			v = fio_rate(r, true, why, sizeof(why));
			l = v > 0 ? fio_rate(r, false, why, sizeof(why)) : 0;
		}
		if (!(v > 0) || !(l > 0)) {
			kvb_progress_end();
			fprintf(stderr, "kvbench tier: %s\n", why);
			return -ENOENT;
		}
		sl[i] = 1 / v;
		fl[i] = 1 / l;
	}
	for (i = 0; i < 2; i++) {
		bool store = !i;

		kvb_middle_pair(store ? sv : fv, store ? sl : fl, reps, &v, &l);
		snprintf(name, sizeof(name), "%s_%s_%lluk", r->redis ? "redis" : "ssd",
			 store ? "store" : "fetch", (unsigned long long)(r->bb >> 10));
		if (r->redis)
			snprintf(lunit, sizeof(lunit), "GB/s redis-benchmark %s, same cluster, -P %u",
				 store ? "SET" : "GET", r->o->batch);
		else
			snprintf(lunit, sizeof(lunit), "GB/s fio O_DIRECT %s, io_uring, qd %u%s",
				 store ? "write" : "read", inflight(r->o),
				 store ? sync_note : "");
		kvb_report(rep, name, 1e-9 / v, store ? "GB/s stored (ratio = value/limit)" :
			   "GB/s fetched into the pool (ratio = value/limit)", 1e-9 / l, lunit);
	}
	kvb_note(&r->o->c, "%s, %llu KiB blocks: %.0f blocks/s fetched", r->redis ? "redis" : "ssd",
		 (unsigned long long)(r->bb >> 10), 1.0 / (v * (double)r->bb));
	/* Write-back against write-through, both per byte: the middle pair of the same reps. */
	kvb_middle_pair(wv, sv, reps, &v, &l);
	snprintf(name, sizeof(name), "%s_store_wb_%lluk", r->redis ? "redis" : "ssd",
		 (unsigned long long)(r->bb >> 10));
	kvb_report(rep, name, 1e-9 / v, "GB/s as the caller sees it, write-back (ratio = value/limit)",
		   1e-9 / l, "GB/s write-through store, same run");
	for (i = 0, t = 0; i < reps; i++)
		t = wv[i] == v ? wd[i] : t;
	kvb_note(&r->o->c, "%s, %llu KiB blocks, write-back: %.3f GB/s to the end of the flush",
		 r->redis ? "redis" : "ssd", (unsigned long long)(r->bb >> 10),
		 t > 0 ? bytes / t * 1e-9 : 0);
	return 0;
}

/* argv[0] is "tier". */
int cmd_tier(int argc, char **argv)
{
	static const uint64_t sizes[] = { 256ULL << 10, 2ULL << 20 };
	struct tier_opts o = { .c = tier_defaults, .mib = 256, .qd = 64, .batch = 32,
			       .redis_mib = 64 };
	struct kvb_report rep = { .o = &o.c, .ratio = KVB_RATE, .name_w = 18, .num_w = 8,
				  .unit_w = 52, .ratio_w = 7 };
	char base[4096];
	unsigned int s;
	int ret = 0;
	const struct topt opts[] = {
		{ .name = "--dir", .arg = "DIR", .kind = TOPT_STR, .dst = &o.dir,
		  .help = "where the tier and fio's file go (default $TMPDIR or /var/tmp)" },
		{ .name = "--mib", .arg = "M", .kind = TOPT_ULONG, .dst = &o.mib, .min = 4,
		  .max = 1UL << 20, .want = "MiB from 4 to 1048576",
		  .help = "MiB of blocks per block size (default 256)" },
		{ .name = "--queue-depth", .arg = "N", .kind = TOPT_UINT, .dst = &o.qd, .min = 1,
		  .max = 4096, .want = "a queue depth from 1 to 4096",
		  .help = "I/Os in flight, the tier's and fio's (default 64)" },
		{ .name = "--batch", .arg = "N", .kind = TOPT_UINT, .dst = &o.batch, .min = 1,
		  .max = 4096, .want = "blocks per call from 1 to 4096",
		  .help = "blocks per store or lookup call (default 32)" },
		{ .name = "--redis", .arg = "HOST:PORT,...", .kind = TOPT_STR, .dst = &o.redis,
		  .help = "also the Redis Cluster tier on this cluster, against redis-benchmark\n"
			  "(ACL user from $KVRT_REDIS_USER, $KVRT_REDIS_PASSWORD)" },
		{ .name = "--redis-mib", .arg = "M", .kind = TOPT_ULONG, .dst = &o.redis_mib,
		  .min = 1, .max = 1UL << 16, .want = "MiB from 1 to 65536",
		  .help = "MiB of blocks per block size on Redis (default 64)" },
		{ NULL },
	};
	if (!kvb_parse(&tier_defaults, tier_about, opts, &o.c, argc, argv, &ret))
		return ret;
	ret = 0;
	if (!o.dir) {
		const char *t = getenv("TMPDIR");

		snprintf(base, sizeof(base), "%s/kvbench-tier.XXXXXX", t && *t ? t : "/var/tmp");
		if (!mkdtemp(base)) {
			fprintf(stderr, "kvbench tier: %s: %s\n", base, strerror(errno));
			return 1;
		}
		o.dir = base;
	}
	kvb_report_header(&rep, "GB/s");
	for (s = 0; s < 2 * sizeof(sizes) / sizeof(sizes[0]) && !ret; s++) {
		struct tier_run r = { .o = &o, .bb = sizes[s % 2], .redis = s >= 2 };

		if (r.redis && !o.redis)
			break;
		r.n = (uint32_t)(((uint64_t)(r.redis ? o.redis_mib : o.mib) << 20) / r.bb);
		if (!r.n)
			r.n = 1;
		snprintf(r.dir, sizeof(r.dir), "%s/tier", o.dir);
		r.hashes = calloc(r.n, sizeof(*r.hashes));
		r.ids = calloc(r.n, sizeof(*r.ids));
		ret = r.hashes && r.ids ? bench_size(&r, &rep) : -ENOMEM;
		if (ret && ret != -ENOENT)
			fprintf(stderr, "kvbench tier: %llu KiB blocks: %s\n",
				(unsigned long long)(r.bb >> 10), strerror(-ret));
		free(r.hashes);
		free(r.ids);
		remove_tree(r.dir);
	}
	{
		char fio[4200];

		snprintf(fio, sizeof(fio), "%s/fio.dat", o.dir);
		unlink(fio);
	}
	if (o.dir == base)
		rmdir(base);
	kvb_progress_end();
	return ret ? 1 : 0;
}
