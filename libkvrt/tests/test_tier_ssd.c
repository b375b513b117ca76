// SPDX-License-Identifier: MIT
/*
 * test_tier_ssd: the SSD tier on the embedded backend: arguments refused
 * with their errnos and nothing written; store and lookup across pool and
 * tier, bytes compared with what was stored; a restart in a new pool; the
 * identity (name, block size, layout) separating blocks; a corrupted block
 * and a torn index record each a miss and nothing else; eviction by
 * priority then age; one user of a directory at a time; another uid
 * refused by the file system; what the tier refuses to trust (a root or
 * identity directory others control, another uid's squat in a shared
 * 1777 root, symlinks, hard links, a tampered block whose checksums were
 * fixed, bad key files) and a capacity the index cannot number;
 * write-back (queued, flushed, written on close, a full queue); and a
 * kill -9 campaign in which every block
 * lookup returns after the kill holds exactly what was stored, and every
 * batch a killed writer saw committed is still there.
 *
 * Files go below $KVRT_TIER_DIR (default: a fresh directory in $TMPDIR or
 * /var/tmp): a file system with O_DIRECT, which tmpfs before 6.6 is not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "kvrt.h"
#include "../../selftests/tap.h"
#include "tier_blocks.h"

#define BB 8192ULL
#define H KVRT_HASH_BYTES
#define MAXB 64
_Static_assert(MAXB <= TIER_RUN_MAX, "the run helpers take MAXB blocks");
/* The index's layout (Documentation/libkvrt.rst, Tiers): a head, then records. */
#define IDX_HEAD 96
#define IDX_REC 96
/* Two unprivileged uids, for the tests that run as root. */
#define VICTIM 65534
#define ATTACKER 65533

static char root[4096];
static unsigned int dir_seq;

struct env {
	struct kvrt *k;
	struct kvrt_space *s;
	struct kvrt_tier *t;
	const char *key_file;	/* kvrt_tier_ssd_opts.key_file */
	char dir[4200];
};

/* A fresh tier directory per test. */
static void new_dir(struct env *e)
{
	snprintf(e->dir, sizeof(e->dir), "%s/t%u", root, dir_seq++);
	e->key_file = NULL;
}

static int env_open_policy(struct env *e, const char *name, uint64_t block,
			   uint64_t cap_blocks, const struct kvrt_layout *layout, uint32_t flags,
			   uint32_t writeback_max)
{
	struct kvrt_space_opts so = { .name = name, .flags = KVRT_SPACE_CREATE, .mode = 0600,
				      .block_bytes = block, .quota_bytes = block * 256 };
	struct kvrt_tier_ssd_opts to = { .dir = e->dir, .capacity_bytes = cap_blocks * block,
					 .layout = layout, .queue_depth = 8, .flags = flags,
					 .writeback_max = writeback_max, .key_file = e->key_file };
	int ret;

	e->k = NULL;
	e->s = NULL;
	e->t = NULL;
	ret = tier_open_space(&so, &e->k, &e->s);
	if (!ret)
		ret = kvrt_tier_open_ssd(e->s, &to, &e->t);
	return ret;
}

static int env_open(struct env *e, const char *name, uint64_t block, uint64_t cap_blocks,
		    const struct kvrt_layout *layout)
{
	return env_open_policy(e, name, block, cap_blocks, layout, 0, 0);
}

static void env_close(struct env *e)
{
	tier_close_space(e->k, e->s);
	e->k = NULL;
	e->s = NULL;
	e->t = NULL;
}

/* Store hashes tag:[from, from + n) through the tier: blocks filled, stored, freed. */
static int store_run(struct env *e, uint32_t tag, uint32_t from, uint32_t n, uint32_t prio)
{
	return tier_store_run(e->s, tag, from, n, BB, (int)prio);
}

/* tag:[from, from + n) published in the pool, then stored: the pool keeps them cached. */
static int publish_store_run(struct env *e, uint32_t tag, uint32_t from, uint32_t n)
{
	return tier_publish_store(e->s, tag, from, n, BB);
}

/* Look up tag:[0, n): the hits, each checked against its pattern; where[] out. */
static int lookup_run(struct env *e, uint32_t tag, uint32_t n, uint8_t *where, int *bad)
{
	return tier_lookup_run(e->s, tag, n, BB, where, bad);
}

static struct kvrt_tier_stats stats(struct env *e)
{
	return tier_stats_now(e->t);
}

/* kvrt_tier_contains over tag:[0, n); where[] out. */
static int contains_run(struct env *e, uint32_t tag, uint32_t n, uint8_t *where)
{
	uint8_t h[MAXB][H];
	uint32_t i;

	for (i = 0; i < n; i++)
		tier_hash(h[i], tag, i);
	return kvrt_tier_contains(e->s, n, (const uint8_t (*)[H])h, where);
}

/*
 * kvrt_tier_contains (0.9) answers from the index: the stored prefix, a
 * gap ends it, nothing read, allocated or published; kvrt_lookup_tiers
 * then reads exactly that prefix.
 */
TEST(contains_answers_from_the_index_without_reading)
{
	struct kvrt_space_stats ps0, ps1;
	struct kvrt_tier_stats st0, st1;
	uint8_t h[2][H] = { { 0 } }, w[MAXB];
	uint32_t ids[MAXB];
	struct env e;
	int bad;

	new_dir(&e);
	REQUIRE(env_open(&e, "contains", BB, 16, NULL) == 0);
	CHECK_EQ(kvrt_tier_contains(NULL, 1, (const uint8_t (*)[H])h, NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_contains(e.s, 0, (const uint8_t (*)[H])h, NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_contains(e.s, KVRT_MAX_BATCH + 1, (const uint8_t (*)[H])h, NULL),
		 -E2BIG);
	CHECK_EQ(kvrt_tier_contains(e.s, 1, NULL, NULL), -EFAULT);
	CHECK_EQ(contains_run(&e, 3, 4, NULL), 0);
	CHECK_EQ(store_run(&e, 3, 0, 3, KVRT_PRIO_DEFAULT), 3);
	CHECK_EQ(store_run(&e, 3, 4, 1, KVRT_PRIO_DEFAULT), 1);	/* tag 3:3 is a gap */
	st0 = stats(&e);
	REQUIRE(kvrt_space_stats(e.s, &ps0) == 0);
	memset(w, 0xee, sizeof(w));
	CHECK_EQ(contains_run(&e, 3, 6, w), 3);
	CHECK(w[0] == 1 && w[1] == 1 && w[2] == 1 && w[3] == 0xee);
	CHECK_EQ(contains_run(&e, 3, 2, NULL), 2);
	st1 = stats(&e);
	REQUIRE(kvrt_space_stats(e.s, &ps1) == 0);
	CHECK_EQ(st1.read_bytes, st0.read_bytes);
	CHECK_EQ(st1.hits, st0.hits);
	CHECK_EQ(ps1.inserts, ps0.inserts);	/* nothing published */
	CHECK_EQ(ps1.allocs, ps0.allocs);	/* nothing allocated */
	tier_hash(h[0], 3, 0);
	CHECK_EQ(kvrt_lookup(e.s, 1, (const uint8_t (*)[H])h, ids, NULL), 0);	/* not in the pool */
	/* A hash it lacks is a miss, as for a lookup. */
	CHECK_EQ(contains_run(&e, 4, 2, NULL), 0);
	CHECK_EQ(stats(&e).misses, st1.misses + 1);
	/* The lookup reads what contains promised. */
	CHECK_EQ(lookup_run(&e, 3, 6, NULL, &bad), 3);
	CHECK_EQ(bad, 0);
	/* No tier open: nothing held. */
	kvrt_tier_close(e.t);
	e.t = NULL;
	CHECK_EQ(contains_run(&e, 3, 3, NULL), 0);
	env_close(&e);
}

TEST(arguments_refused)
{
	struct env e;
	struct kvrt_tier_ssd_opts o;
	struct kvrt_tier *t = (struct kvrt_tier *)&o;
	uint8_t h[2][H] = { { 0 } };
	uint32_t ids[2] = { 0, 1 }, prio[2] = { 50, 101 };

	new_dir(&e);
	REQUIRE(env_open(&e, "args", BB, 8, NULL) == 0);
	o = (struct kvrt_tier_ssd_opts){ .dir = e.dir, .capacity_bytes = 8 * BB };
	CHECK_EQ(kvrt_tier_open_ssd(e.s, &o, NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_open_ssd(NULL, &o, &t), -EINVAL);
	CHECK(t == NULL);	/* *tier cleared on failure */
	CHECK_EQ(kvrt_tier_open_ssd(e.s, NULL, &t), -EINVAL);
	{
		/* Each case one field off the valid o: a case a line. */
#define SSD_OPTS(...) { .dir = e.dir, .capacity_bytes = 8 * BB, __VA_ARGS__ }
		const struct {
			const char *what;
			struct kvrt_tier_ssd_opts o;
		} bad[] = {
			{ "unknown flag", SSD_OPTS(.flags = 2) },
			/* a write-back field on a write-through tier */
			{ "writeback_max, write-through", SSD_OPTS(.writeback_max = 4) },
			{ "writeback_max past KVRT_MAX_BATCH",
			  SSD_OPTS(.flags = KVRT_TIER_WRITE_BACK, .writeback_max = KVRT_MAX_BATCH + 1) },
			{ "reserved0", SSD_OPTS(.reserved0 = 1) },
			{ "reserved[1]", SSD_OPTS(.reserved[1] = 1) },
			{ "capacity under a block", { .dir = e.dir, .capacity_bytes = BB - 1 } },
			{ "capacity past 2^50", { .dir = e.dir, .capacity_bytes = (1ULL << 50) + BB } },
			{ "queue_depth 4097", SSD_OPTS(.queue_depth = 4097) },
			{ "empty dir", { .dir = "", .capacity_bytes = 8 * BB } },
		};
#undef SSD_OPTS

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			int ret = kvrt_tier_open_ssd(e.s, &bad[i].o, &t);

			CHECKF(ret == -EINVAL, "open_ssd, %s: %d, want -EINVAL", bad[i].what, ret);
		}
	}
	/* The identity's directory is taken by e.t. */
	o.dir = e.dir;
	CHECK_EQ(kvrt_tier_open_ssd(e.s, &o, &t), -EBUSY);

	CHECK_EQ(kvrt_tier_store(NULL, 1, ids, (const uint8_t (*)[H])h, NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_store(e.s, 0, ids, (const uint8_t (*)[H])h, NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_store(e.s, KVRT_MAX_BATCH + 1, ids, (const uint8_t (*)[H])h, NULL),
		 -E2BIG);
	CHECK_EQ(kvrt_tier_store(e.s, 1, NULL, (const uint8_t (*)[H])h, NULL), -EFAULT);
	CHECK_EQ(kvrt_tier_store(e.s, 1, ids, NULL, NULL), -EFAULT);
	ids[1] = 256;	/* outside the space */
	CHECK_EQ(kvrt_tier_store(e.s, 2, ids, (const uint8_t (*)[H])h, NULL), -EINVAL);
	ids[1] = 1;
	CHECK_EQ(kvrt_tier_store(e.s, 2, ids, (const uint8_t (*)[H])h, prio), -EINVAL);
	CHECK_EQ(kvrt_tier_stats(NULL, &(struct kvrt_tier_stats){ 0 }), -EINVAL);
	CHECK_EQ(kvrt_tier_stats(e.t, NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_flush(NULL), -EINVAL);
	CHECK_EQ(kvrt_tier_flush(e.s), 0);	/* no write-back tier: nothing to wait for */
	/* Nothing of the refused calls reached the tier. */
	CHECK_EQ(stats(&e).stores, 0);
	CHECK_EQ(stats(&e).blocks, 0);
	CHECK_EQ(kvrt_lookup_tiers(e.s, 0, (const uint8_t (*)[H])h, ids, NULL), -EINVAL);
	kvrt_tier_close(e.t);
	/* A handle without tiers: nothing to store to. */
	CHECK_EQ(kvrt_tier_store(e.s, 1, ids, (const uint8_t (*)[H])h, NULL), -ENODEV);
	e.t = NULL;
	env_close(&e);
}

TEST(store_then_lookup_across_pool_and_tier)
{
	struct env e;
	struct kvrt_tier_stats st;
	uint8_t where[MAXB];
	int bad, i, n;

	new_dir(&e);
	REQUIRE(env_open(&e, "roundtrip", BB, 32, NULL) == 0);
	CHECK_EQ(store_run(&e, 1, 0, 16, 50), 16);
	/* Storing again writes nothing: the tier has them. */
	CHECK_EQ(store_run(&e, 1, 0, 16, 50), 0);
	st = stats(&e);
	CHECK_EQ(st.stores, 16);
	CHECK_EQ(st.store_skips, 16);
	CHECK_EQ(st.blocks, 16);
	CHECK_EQ(st.used_bytes, 16 * BB);
	CHECK_EQ(st.capacity_bytes, 32 * BB);
	CHECK_EQ(st.write_bytes, 16 * BB);
	/* The pool has none of them (freed): all 16 come from tier 1. */
	n = lookup_run(&e, 1, 20, where, &bad);
	CHECK_EQ(n, 16);
	CHECK_EQ(bad, 0);
	for (i = 0; i < n; i++)
		CHECKF(where[i] == 1, "hit %d from %u", i, where[i]);
	st = stats(&e);
	CHECK_EQ(st.hits, 16);
	CHECK_EQ(st.read_bytes, 16 * BB);
	CHECK_EQ(st.misses, 1);		/* the lookup ended at hash 16 */
	/* Brought up and published: now the pool has them, released and cached. */
	n = lookup_run(&e, 1, 16, where, &bad);
	CHECK_EQ(n, 16);
	CHECK_EQ(bad, 0);
	for (i = 0; i < n; i++)
		CHECKF(where[i] == 0, "hit %d from %u", i, where[i]);
	CHECK_EQ(stats(&e).hits, 16);
	env_close(&e);
}

/*
 * Threads on one handle: each stores its own tag's blocks into a
 * write-back tier and looks them up through the pool and the tier, while
 * the tier's thread writes; then a flush, and a new pool finds every block
 * whole in the tier.
 */
#define WB_THREADS 4
#define WB_ROUNDS 12

struct wb_thread {
	struct env *e;
	uint32_t tag;
	int errors;
};

static void *wb_thread_main(void *arg)
{
	struct wb_thread *w = arg;
	uint32_t r;
	int bad;

	for (r = 0; r < WB_ROUNDS; r++) {
		int ret = publish_store_run(w->e, w->tag, r * 8, 8);

		if (ret != 8) {
			tap_diag("tag %u round %u: store %d", w->tag, r, ret);
			w->errors++;
		}
		/* tag:[0, 8) stays found (pool or tier), whole, as later rounds store */
		ret = lookup_run(w->e, w->tag, 8, NULL, &bad);
		if (ret != 8 || bad) {
			tap_diag("tag %u round %u: lookup %d, %d wrong", w->tag, r, ret, bad);
			w->errors++;
		}
		ret = r % 4 == 3 ? kvrt_tier_flush(w->e->s) : 0;
		if (ret) {
			tap_diag("tag %u round %u: flush %d", w->tag, r, ret);
			w->errors++;
		}
	}
	return NULL;
}

TEST(threads_store_and_look_up_while_the_tier_writes_back)
{
	struct wb_thread w[WB_THREADS];
	pthread_t th[WB_THREADS];
	struct env e;
	int i, bad;

	new_dir(&e);
	REQUIRE(env_open_policy(&e, "wbthreads", BB, 512, NULL, KVRT_TIER_WRITE_BACK, 64) == 0);
	for (i = 0; i < WB_THREADS; i++) {
		w[i] = (struct wb_thread){ .e = &e, .tag = 60 + (uint32_t)i };
		REQUIRE(pthread_create(&th[i], NULL, wb_thread_main, &w[i]) == 0);
	}
	for (i = 0; i < WB_THREADS; i++) {
		pthread_join(th[i], NULL);
		CHECKF(!w[i].errors, "thread %d: %d failed calls", i, w[i].errors);
	}
	CHECK_EQ(kvrt_tier_flush(e.s), 0);
	CHECK_EQ(stats(&e).queued, 0);
	CHECK_EQ(stats(&e).blocks, WB_THREADS * WB_ROUNDS * 8);
	env_close(&e);
	REQUIRE(env_open(&e, "wbthreads", BB, 512, NULL) == 0);
	for (i = 0; i < WB_THREADS; i++) {
		CHECK_EQ(lookup_run(&e, 60 + (uint32_t)i, MAXB, NULL, &bad), MAXB);
		CHECK_EQ(bad, 0);
	}
	env_close(&e);
}

/* The blocks a new handle of this identity finds in the tier's index. */
static long long blocks_held(struct env *e, const char *name, uint64_t block,
			     const struct kvrt_layout *layout)
{
	long long n = -1;

	if (!env_open(e, name, block, 32, layout))
		n = (long long)stats(e).blocks;
	env_close(e);
	return n;
}

TEST(blocks_survive_a_restart_in_their_identity_only)
{
	struct kvrt_layout l1, l2;
	struct env e;
	int bad;

	CHECK_EQ(kvrt_layout_init(&l1, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 64, 8, 1, KVRT_DTYPE_BF16), 0);
	CHECK_EQ(kvrt_layout_init(&l2, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 64, 8, 1, KVRT_DTYPE_F16), 0);
	new_dir(&e);
	REQUIRE(env_open(&e, "restart", BB, 32, &l1) == 0);
	CHECK_EQ(store_run(&e, 2, 0, 24, 50), 24);
	env_close(&e);
	/* A new process's pool: empty, the tier reloaded from its index. */
	REQUIRE(env_open(&e, "restart", BB, 32, &l1) == 0);
	CHECK_EQ(stats(&e).blocks, 24);
	CHECK_EQ(lookup_run(&e, 2, 24, NULL, &bad), 24);
	CHECK_EQ(bad, 0);
	env_close(&e);
	/* Another name, another dtype, another block size: other identities. */
	CHECK_EQ(blocks_held(&e, "restart2", BB, &l1), 0);
	CHECK_EQ(blocks_held(&e, "restart", BB, &l2), 0);
	CHECK_EQ(blocks_held(&e, "restart", 2 * BB, &l1), 0);
	/* A smaller capacity keeps the blocks whose slots still fit. */
	REQUIRE(env_open(&e, "restart", BB, 10, &l1) == 0);
	CHECK_EQ(stats(&e).blocks, 10);
	CHECK_EQ(lookup_run(&e, 2, 24, NULL, &bad), 10);
	CHECK_EQ(bad, 0);
	env_close(&e);
}

static char *tier_file(const struct env *e, const char *name)
{
	static char path[8192];
	char cmd[4400];
	FILE *p;

	/* The identity directory is the only entry of the tier's directory. */
	snprintf(cmd, sizeof(cmd), "ls -d '%s'/*/", e->dir);
	path[0] = 0;
	p = popen(cmd, "r");
	if (p && fgets(path, sizeof(path), p))
		path[strcspn(path, "\n")] = 0;
	if (p)
		pclose(p);
	strncat(path, name, sizeof(path) - strlen(path) - 1);
	return path;
}

TEST(a_corrupted_block_is_a_miss_and_is_dropped)
{
	struct env e;
	int fd, bad;
	char c = 0x5a;

	new_dir(&e);
	REQUIRE(env_open(&e, "corrupt", BB, 16, NULL) == 0);
	CHECK_EQ(store_run(&e, 3, 0, 8, 50), 8);
	env_close(&e);
	/* A fresh tier fills slots from the first: hash 3 is slot 3. */
	fd = open(tier_file(&e, "data"), O_WRONLY);
	REQUIRE(fd >= 0);
	CHECK_EQ(pwrite(fd, &c, 1, 3 * BB + 100), 1);
	close(fd);
	REQUIRE(env_open(&e, "corrupt", BB, 16, NULL) == 0);
	CHECK_EQ(lookup_run(&e, 3, 8, NULL, &bad), 3);
	CHECK_EQ(bad, 0);
	CHECK_EQ(stats(&e).checksum_errors, 1);
	CHECK_EQ(stats(&e).blocks, 7);
	/* Dropped: the next lookup stops at it without reading it. */
	CHECK_EQ(lookup_run(&e, 3, 8, NULL, &bad), 3);
	CHECK_EQ(stats(&e).checksum_errors, 1);
	env_close(&e);
}

TEST(a_torn_index_record_loses_that_block_only)
{
	struct stat st;
	struct env e;
	int bad;

	new_dir(&e);
	REQUIRE(env_open(&e, "torn", BB, 16, NULL) == 0);
	CHECK_EQ(store_run(&e, 4, 0, 4, 50), 4);
	CHECK_EQ(store_run(&e, 4, 4, 4, 50), 4);
	env_close(&e);
	/* The head and 8 records, written compact at the last open: cut the last one short. */
	REQUIRE(stat(tier_file(&e, "index"), &st) == 0);
	CHECK_EQ(st.st_size, IDX_HEAD + 8 * IDX_REC);
	REQUIRE(truncate(tier_file(&e, "index"), st.st_size - 10) == 0);
	REQUIRE(env_open(&e, "torn", BB, 16, NULL) == 0);
	CHECK_EQ(stats(&e).blocks, 7);
	CHECK_EQ(lookup_run(&e, 4, 8, NULL, &bad), 7);
	CHECK_EQ(bad, 0);
	CHECK_EQ(stats(&e).checksum_errors, 0);
	env_close(&e);
}

/* The stats file kvctl reads: written at open, on use and at close. */
/* The tier's stats file, whole, into buf. */
static void read_stats_file(const struct env *e, char *buf, size_t len)
{
	FILE *f = fopen(tier_file(e, "stats"), "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, len - 1, f);
		fclose(f);
	}
	buf[n] = 0;
}

TEST(the_stats_file_says_what_the_tier_did)
{
	char buf[2048] = "", want[64];
	struct env e;
	int bad;

	new_dir(&e);
	REQUIRE(env_open(&e, "statsfile", BB, 32, NULL) == 0);
	CHECK_EQ(store_run(&e, 9, 0, 12, 50), 12);
	CHECK_EQ(lookup_run(&e, 9, 12, NULL, &bad), 12);
	env_close(&e);
	read_stats_file(&e, buf, sizeof(buf));
	CHECK(strstr(buf, "kind=ssd\n"));
	CHECK(strstr(buf, "\nopen=0\n"));	/* the last write, at close */
	snprintf(want, sizeof(want), "\npid=%d\n", (int)getpid());
	CHECK(strstr(buf, want));
	CHECK(strstr(buf, "\nstores=12\n"));
	CHECK(strstr(buf, "\nblocks=12\n"));
	CHECK(strstr(buf, "\nhits=12\n"));
	CHECK(strstr(buf, "\nqueued=0\ndeferred=0\n"));
	snprintf(want, sizeof(want), "\ncapacity_bytes=%llu\n", 32 * BB);
	CHECK(strstr(buf, want));
	if (!tap_ok)
		tap_diag("stats: %s", buf);
}

/* Publish and store n blocks of tag, flush the queue: the tier's stats then. */
static struct kvrt_tier_stats publish_flush(struct env *e, uint32_t tag, uint32_t n)
{
	CHECK_EQ(publish_store_run(e, tag, 0, n), n);
	CHECK_EQ(kvrt_tier_flush(e->s), 0);
	return stats(e);
}

/*
 * Write-back: published blocks are queued and written by the tier's
 * thread (flush waits for them); unpublished ones are written before the
 * store returns; a full queue writes the rest at once; and a new handle
 * finds every block in the tier.
 */
TEST(write_back_writes_every_block_by_flush)
{
	struct kvrt_tier_stats st;
	uint8_t where[MAXB];
	struct env e;
	int bad, i, n;

	new_dir(&e);
	REQUIRE(env_open_policy(&e, "wb", BB, 128, NULL, KVRT_TIER_WRITE_BACK, 0) == 0);
	st = publish_flush(&e, 7, 32);
	CHECK_EQ(st.deferred, 32);
	CHECK_EQ(st.queued, 0);
	CHECK_EQ(st.stores, 32);
	/* Not published: nowhere to hold them, so written before the call returns. */
	CHECK_EQ(store_run(&e, 8, 0, 8, 50), 8);
	st = stats(&e);
	CHECK_EQ(st.stores, 40);
	CHECK_EQ(st.deferred, 32);
	env_close(&e);

	/* A queue of 4: 4 queued, the other 60 written at once. */
	REQUIRE(env_open_policy(&e, "wb", BB, 128, NULL, KVRT_TIER_WRITE_BACK, 4) == 0);
	st = publish_flush(&e, 9, 64);
	CHECK_EQ(st.deferred, 4);
	CHECK_EQ(st.stores, 64);
	env_close(&e);

	/* A new pool: every block comes from the tier, whole. */
	REQUIRE(env_open(&e, "wb", BB, 128, NULL) == 0);
	CHECK_EQ(stats(&e).blocks, 104);
	n = lookup_run(&e, 7, 32, where, &bad);
	CHECK_EQ(n, 32);
	CHECK_EQ(bad, 0);
	for (i = 0; i < n; i++)
		CHECKF(where[i] == 1, "hit %d from %u", i, where[i]);
	CHECK_EQ(lookup_run(&e, 8, 8, NULL, &bad), 8);
	CHECK_EQ(bad, 0);
	CHECK_EQ(lookup_run(&e, 9, 64, NULL, &bad), 64);
	CHECK_EQ(bad, 0);
	env_close(&e);
}

/* Closing the space right after a store writes everything queued before it returns. */
TEST(closing_a_write_back_tier_writes_what_is_queued)
{
	char buf[2048], *p;
	uint32_t b;
	struct env e;
	int bad;

	new_dir(&e);
	REQUIRE(env_open_policy(&e, "wbclose", BB, 256, NULL, KVRT_TIER_WRITE_BACK, 0) == 0);
	for (b = 0; b < 3; b++)
		CHECK_EQ(publish_store_run(&e, 11, b * MAXB, MAXB), MAXB);
	env_close(&e);
	/*
	 * kvctl's view, written at close: the queue empty, what went through
	 * it counted (a queue of 256 / 8 = 32: the overflow was written at once).
	 */
	read_stats_file(&e, buf, sizeof(buf));
	p = strstr(buf, "\nqueued=0\ndeferred=");
	CHECKF(p && strtoull(p + 19, NULL, 10) >= 32 && strstr(buf, "\nstores=192\n"),
	       "stats: %s", buf);
	REQUIRE(env_open(&e, "wbclose", BB, 256, NULL) == 0);
	CHECK_EQ(stats(&e).blocks, 3 * MAXB);
	CHECK_EQ(lookup_run(&e, 11, MAXB, NULL, &bad), MAXB);
	CHECK_EQ(bad, 0);
	env_close(&e);
}

/*
 * fork() after a write-back tier started: the child has the queue but not
 * the thread.  Its stores and flushes fail with -ECHILD instead of queueing
 * for no one or waiting forever, its close returns (an alarm would kill a
 * hang), and the parent's queue is written all the same.
 */
TEST(a_forked_child_neither_hangs_nor_takes_the_parents_queue)
{
	char buf[2048], want[64];
	struct env e;
	int status, bad;
	pid_t pid;

	new_dir(&e);
	REQUIRE(env_open_policy(&e, "wbfork", BB, 128, NULL, KVRT_TIER_WRITE_BACK, 0) == 0);
	CHECK_EQ(publish_store_run(&e, 70, 0, 16), 16);
	fflush(NULL);
	pid = fork();
	REQUIRE(pid >= 0);
	if (!pid) {
		alarm(10);
		if (publish_store_run(&e, 71, 0, 4) != -ECHILD)
			_exit(2);
		if (kvrt_tier_flush(e.s) != -ECHILD)
			_exit(3);
		env_close(&e);
		_exit(0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	/* The stats file is still the parent's: the child's close wrote none. */
	read_stats_file(&e, buf, sizeof(buf));
	snprintf(want, sizeof(want), "\npid=%d\nopen=1\n", (int)getpid());
	CHECKF(strstr(buf, want), "stats: %s", buf);
	CHECK_EQ(kvrt_tier_flush(e.s), 0);
	CHECK_EQ(stats(&e).stores, 16);
	env_close(&e);
	REQUIRE(env_open(&e, "wbfork", BB, 128, NULL) == 0);
	CHECK_EQ(lookup_run(&e, 70, 16, NULL, &bad), 16);
	CHECK_EQ(bad, 0);
	env_close(&e);
}

static bool present(struct env *e, uint32_t tag, uint32_t i)
{
	uint8_t h[1][H], w;
	uint32_t id;
	int got;

	tier_hash(h[0], tag, i);
	got = kvrt_lookup_tiers(e->s, 1, (const uint8_t (*)[H])h, &id, &w);
	if (got == 1)
		kvrt_release(e->s, 1, &id);
	return got == 1 && w == 1;
}

TEST(eviction_takes_the_lowest_priority_then_the_oldest)
{
	struct env e;

	new_dir(&e);
	REQUIRE(env_open(&e, "evict", BB, 4, NULL) == 0);
	CHECK_EQ(store_run(&e, 5, 0, 1, 80), 1);	/* 0: high priority, oldest */
	CHECK_EQ(store_run(&e, 5, 1, 3, 50), 3);	/* 1, 2, 3 */
	CHECK_EQ(store_run(&e, 5, 1, 1, 50), 0);	/* 1 used again: 2 is the oldest at 50 */
	CHECK_EQ(store_run(&e, 5, 4, 1, 50), 1);	/* evicts 2 */
	CHECK_EQ(stats(&e).evictions, 1);
	CHECK_EQ(store_run(&e, 5, 5, 2, 50), 2);	/* evicts 3, then 1 */
	CHECK_EQ(stats(&e).evictions, 3);
	CHECK_EQ(stats(&e).blocks, 4);
	env_close(&e);
	/* Which four are left, seen by a new handle (nothing of them in its pool). */
	REQUIRE(env_open(&e, "evict", BB, 4, NULL) == 0);
	CHECK(present(&e, 5, 0));
	CHECK(!present(&e, 5, 1));
	CHECK(!present(&e, 5, 2));
	CHECK(!present(&e, 5, 3));
	CHECK(present(&e, 5, 4));
	CHECK(present(&e, 5, 5));
	CHECK(present(&e, 5, 6));
	env_close(&e);
	/* A batch larger than the tier: the first ones are stored. */
	new_dir(&e);
	REQUIRE(env_open(&e, "evict", BB, 4, NULL) == 0);
	CHECK_EQ(store_run(&e, 6, 0, 6, 50), 4);
	CHECK_EQ(stats(&e).blocks, 4);
	env_close(&e);
}

/* Files 0600 in directories 0700; another uid can neither add its own nor read these. */
TEST(another_uid_is_refused_by_the_file_system)
{
	char data[8192];
	struct stat st;
	struct env e;
	pid_t pid;
	int status;

	new_dir(&e);
	REQUIRE(env_open(&e, "perm", BB, 4, NULL) == 0);
	CHECK_EQ(store_run(&e, 7, 0, 2, 50), 2);
	CHECK(stat(e.dir, &st) == 0 && (st.st_mode & 0777) == 0700);
	CHECK(stat(tier_file(&e, "data"), &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK(stat(tier_file(&e, "index"), &st) == 0 && (st.st_mode & 0777) == 0600);
	snprintf(data, sizeof(data), "%s", tier_file(&e, "data"));
	env_close(&e);
	if (geteuid() != 0) {
		tap_skip("not root: cannot become another uid");
		return;
	}
	fflush(NULL);
	pid = fork();
	REQUIRE(pid >= 0);
	if (!pid) {
		int ret, fd;

		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(2);
		ret = env_open(&e, "perm", BB, 4, NULL);
		fd = open(data, O_RDONLY);
		_exit(ret == -EACCES && fd < 0 && errno == EACCES ? 0 : 1);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

/* A file of the tests' own, outside any tier: what an attack must leave unchanged. */
static void put_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	if (fd >= 0) {
		if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
			tap_diag("%s: short write", path);
		fchmod(fd, mode);
		close(fd);
	}
}

/* Whether path holds exactly text. */
static bool file_is(const char *path, const char *text)
{
	char buf[256];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	return n == (ssize_t)strlen(text) && !memcmp(buf, text, (size_t)n);
}

/* The identity directory below dir (its only entry), into out; false if none. */
static bool identity_of(const char *dir, char *out, size_t len)
{
	struct dirent *d;
	DIR *D = opendir(dir);
	bool found = false;

	if (!D)
		return false;
	while ((d = readdir(D)))
		if (strlen(d->d_name) == 64) {
			snprintf(out, len, "%s/%s", dir, d->d_name);
			found = true;
		}
	closedir(D);
	return found;
}

/* The entries of dir, sorted, joined by spaces ("" when it cannot be read). */
static void list_dir(const char *dir, char *out, size_t len)
{
	char cmd[4400];
	FILE *p;
	size_t n = 0;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | tr '\\n' ' '", dir);
	p = popen(cmd, "r");
	if (p) {
		n = fread(out, 1, len - 1, p);
		pclose(p);
	}
	out[n] = 0;
}

/* What a child run as another uid saw, shared with the parent. */
struct seen {
	int open_ret;	/* kvrt_tier_open_ssd() */
	int hits;	/* kvrt_lookup_tiers() of the probed hash */
	int forged;	/* the hit held the forged bytes */
	int stored;	/* kvrt_tier_store() */
};

/*
 * As uid, open the tier of space "shared" below dir: with forge, store
 * hash 40:0 holding 41:0's bytes; with probe, look 40:0 up; else store
 * 42:[0, 4).  What it saw goes to *seen; the child's exit status is 0
 * unless it could not become uid.
 */
static int run_as(uid_t uid, const char *dir, bool forge, bool probe, struct seen *seen)
{
	int status;
	pid_t pid;

	memset(seen, 0, sizeof(*seen));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		struct env e;
		uint8_t h[1][H], want[BB];
		uint32_t id;

		if (setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
			_exit(2);
		umask(022);
		new_dir(&e);
		snprintf(e.dir, sizeof(e.dir), "%s", dir);
		seen->open_ret = env_open(&e, "shared", BB, 8, NULL);
		tier_hash(h[0], 40, 0);
		if (forge && !seen->open_ret && !kvrt_alloc_blocks(e.s, 1, &id)) {
			uint8_t f[1][H];

			tier_hash(f[0], 41, 0);
			tier_pattern(f[0], BB, kvrt_block_addr(e.s, id));
			seen->stored = kvrt_tier_store(e.s, 1, &id, (const uint8_t (*)[H])h, NULL);
			kvrt_free_blocks(e.s, 1, &id);
		} else if (probe) {
			seen->hits = kvrt_lookup_tiers(e.s, 1, (const uint8_t (*)[H])h, &id, NULL);
			if (seen->hits == 1) {
				tier_hash(h[0], 41, 0);
				tier_pattern(h[0], BB, want);
				seen->forged = !memcmp(kvrt_block_addr(e.s, id), want, BB);
				kvrt_release(e.s, 1, &id);
			}
		} else if (!seen->open_ret) {
			seen->stored = store_run(&e, 42, 0, 4, 50);
		}
		env_close(&e);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A shared root as an administrator makes it: root's, 1777. */
static void shared_root(char *out, size_t len)
{
	snprintf(out, len, "%s/shared%u", root, dir_seq++);
	mkdir(out, 0700);
	chmod(out, 01777);
}

/* A private root of uid's: what the victim's tier writes when no one interferes. */
static void private_root(char *out, size_t len, uid_t uid)
{
	snprintf(out, len, "%s/private%u", root, dir_seq++);
	mkdir(out, 0700);
	if (chown(out, uid, uid))
		tap_diag("chown %s: %s", out, strerror(errno));
}

/* The squatting tests' roots, and where the victim's identity directory goes in shared. */
struct squat {
	char shared[4200], priv[4200], id[4400], dir[4600];
	struct seen *seen;	/* NULL: skipped or failed, the test is over */
};

/*
 * As root: a shared 1777 root and a private root of the victim's, where
 * its tier opens (and stores a block when store) to name its identity.
 */
static void squat_setup(struct squat *sq, bool store)
{
	struct seen *seen;

	sq->seen = NULL;
	if (geteuid() != 0) {
		tap_skip("not root: cannot become two other uids");
		return;
	}
	seen = mmap(NULL, sizeof(*seen), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(seen != MAP_FAILED);
	shared_root(sq->shared, sizeof(sq->shared));
	private_root(sq->priv, sizeof(sq->priv), VICTIM);
	REQUIRE(run_as(VICTIM, sq->priv, store, false, seen) == 0);
	REQUIRE(seen->open_ret == 0);
	REQUIRE(identity_of(sq->priv, sq->id, sizeof(sq->id)));
	snprintf(sq->dir, sizeof(sq->dir), "%s/%s", sq->shared, strrchr(sq->id, '/') + 1);
	sq->seen = seen;
}

/*
 * Another uid makes the victim's identity directory in a shared 1777 root
 * before the victim first opens its tier there: a directory of its own,
 * 0777, with an empty data file of its own.  The victim refuses it with
 * -EPERM, writes nothing into it, and the attacker's file stays empty.
 */
TEST(another_tenant_cannot_prepare_the_identity_directory)
{
	char path[4700], before[512], after[512];
	struct squat sq;
	struct stat st;

	squat_setup(&sq, false);
	if (!sq.seen)
		return;
	/* The attacker's squat (root does it for it: the same files a 1777 root lets it make). */
	REQUIRE(mkdir(sq.dir, 0777) == 0);
	chmod(sq.dir, 0777);
	snprintf(path, sizeof(path), "%s/data", sq.dir);
	put_file(path, "", 0666);
	REQUIRE(chown(sq.dir, ATTACKER, ATTACKER) == 0 && chown(path, ATTACKER, ATTACKER) == 0);
	list_dir(sq.dir, before, sizeof(before));

	REQUIRE(run_as(VICTIM, sq.shared, false, false, sq.seen) == 0);
	CHECK_EQ(sq.seen->open_ret, -EPERM);
	CHECK_EQ(sq.seen->stored, 0);
	CHECK(stat(path, &st) == 0 && st.st_size == 0 && st.st_uid == ATTACKER);
	list_dir(sq.dir, after, sizeof(after));
	CHECKF(!strcmp(before, after), "the squat held '%s', now '%s'", before, after);
	munmap(sq.seen, sizeof(*sq.seen));
}

/* Copy every file of from into to (made 0777), as uid's files of mode. */
static int copy_dir(const char *from, const char *to, uid_t uid, mode_t mode)
{
	char cmd[40000];

	snprintf(cmd, sizeof(cmd),
		 "mkdir '%s' && cp -a '%s'/. '%s'/ && chown -R %u:%u '%s' && chmod 0777 '%s' && "
		 "chmod %o '%s'/*", to, from, to, (unsigned int)uid, (unsigned int)uid, to, to,
		 (unsigned int)mode, to);
	return system(cmd);
}

/*
 * The reported attack: in a shared 1777 root, another uid prepares the
 * victim's identity directory with a data file holding a forged block
 * and a valid index naming it (here the victim's own tier wrote them in a
 * private root, key and all, and root copied them in as the attacker's:
 * all the format can give an attacker).  The victim's lookup of that hash
 * is a miss: its tier refuses the directory (-EPERM).
 */
TEST(a_forged_block_in_a_shared_root_is_a_miss)
{
	struct squat sq;

	squat_setup(&sq, true);
	if (!sq.seen)
		return;
	REQUIRE(sq.seen->stored == 1);
	REQUIRE(copy_dir(sq.id, sq.dir, ATTACKER, 0666) == 0);

	REQUIRE(run_as(VICTIM, sq.shared, false, true, sq.seen) == 0);
	CHECK_EQ(sq.seen->open_ret, -EPERM);
	CHECK_EQ(sq.seen->hits, 0);
	CHECK_EQ(sq.seen->forged, 0);
	munmap(sq.seen, sizeof(*sq.seen));
}

/*
 * The identity directory, in id, of a tier named name of nblocks that
 * stored n blocks of tag and closed (id stays "" where a step failed).
 */
static void closed_tier(struct env *e, const char *name, uint32_t nblocks, uint32_t tag,
			uint32_t n, char id[4400])
{
	id[0] = 0;
	new_dir(e);
	REQUIRE(env_open(e, name, BB, nblocks, NULL) == 0);
	CHECK_EQ(store_run(e, tag, 0, n, 50), n);
	env_close(e);
	REQUIRE(identity_of(e->dir, id, 4400));
}

/* A file of the tier's owner that nothing may write through. */
static void precious_file(char victim[4400])
{
	snprintf(victim, 4400, "%s/victim%u", root, dir_seq++);
	put_file(victim, "precious\n", 0600);
}

/*
 * A symlink left where the index is rewritten (index.new) or the stats
 * file (stats.new) is removed, not written through: the file it names is
 * unchanged and the tier opens with its blocks.
 */
TEST(index_new_symlink_is_not_followed)
{
	char id[4400], link1[4600], link2[4600], victim[4400];
	struct stat st;
	struct env e;
	int bad;

	closed_tier(&e, "symlink", 8, 43, 4, id);
	if (!id[0])
		return;
	precious_file(victim);
	snprintf(link1, sizeof(link1), "%s/index.new", id);
	snprintf(link2, sizeof(link2), "%s/stats.new", id);
	REQUIRE(symlink(victim, link1) == 0);
	REQUIRE(symlink(victim, link2) == 0);
	REQUIRE(env_open(&e, "symlink", BB, 8, NULL) == 0);
	CHECK_EQ(lookup_run(&e, 43, 4, NULL, &bad), 4);
	CHECK_EQ(bad, 0);
	env_close(&e);
	CHECK(file_is(victim, "precious\n"));
	CHECK(lstat(victim, &st) == 0 && S_ISREG(st.st_mode));
	snprintf(link1, sizeof(link1), "%s/index", id);
	CHECK(lstat(link1, &st) == 0 && S_ISREG(st.st_mode));
}

/* A data file that is a hard link (to a file of the tier's owner) is not written through. */
TEST(a_hard_linked_data_file_is_refused)
{
	char id[4400], data[4600], victim[4400];
	struct env e;

	closed_tier(&e, "hardlink", 4, 44, 2, id);
	if (!id[0])
		return;
	precious_file(victim);
	snprintf(data, sizeof(data), "%s/data", id);
	REQUIRE(unlink(data) == 0);
	REQUIRE(link(victim, data) == 0);
	CHECK_EQ(env_open(&e, "hardlink", BB, 4, NULL), -EPERM);
	env_close(&e);
	CHECK(file_is(victim, "precious\n"));
}

/*
 * Whoever can write the tier's files (root, the owner's other programs)
 * and changes a block's bytes, then fixes the unkeyed checksums (the
 * block's XXH3 in its PUT record, the record's own): the tag still fails,
 * so the block is a miss, counted in checksum_errors, and dropped.
 */
TEST(a_tampered_block_with_a_valid_checksum_is_a_miss)
{
	char id[4400], path[4600];
	uint8_t *idx, blk[BB];
	uint64_t sum;
	uint32_t slot;
	struct stat st;
	struct env e;
	int fd, bad, i, fixed = 0;
	size_t off;

	closed_tier(&e, "tamper", 16, 45, 8, id);
	if (!id[0])
		return;
	/* Slot 3 (hash 3: a fresh tier fills slots from the first) gets other bytes. */
	snprintf(path, sizeof(path), "%s/data", id);
	fd = open(path, O_RDWR);
	REQUIRE(fd >= 0);
	REQUIRE(pread(fd, blk, BB, 3 * BB) == (ssize_t)BB);
	for (i = 0; i < 64; i++)
		blk[100 + i] ^= 0xff;
	REQUIRE(pwrite(fd, blk, BB, 3 * BB) == (ssize_t)BB);
	close(fd);
	sum = XXH3_64bits(blk, BB);
	/* Its PUT record: the block's XXH3 (offset 16) and the record's (its last 8 bytes). */
	snprintf(path, sizeof(path), "%s/index", id);
	REQUIRE(stat(path, &st) == 0);
	idx = malloc((size_t)st.st_size);
	REQUIRE(idx);
	fd = open(path, O_RDWR);
	REQUIRE(fd >= 0 && read(fd, idx, (size_t)st.st_size) == st.st_size);
	for (off = IDX_HEAD; off + IDX_REC <= (size_t)st.st_size; off += IDX_REC) {
		memcpy(&slot, idx + off + 8, 4);
		if (idx[off + 4] != 1 || slot != 3)
			continue;
		memcpy(idx + off + 16, &sum, 8);
		sum = XXH3_64bits(idx + off, IDX_REC - 8);
		memcpy(idx + off + IDX_REC - 8, &sum, 8);
		fixed++;
	}
	CHECK_EQ(fixed, 1);
	CHECK(pwrite(fd, idx, (size_t)st.st_size, 0) == st.st_size);
	close(fd);
	free(idx);
	REQUIRE(env_open(&e, "tamper", BB, 16, NULL) == 0);
	CHECK_EQ(stats(&e).blocks, 8);	/* the record is valid: the index keeps it */
	CHECK_EQ(lookup_run(&e, 45, 8, NULL, &bad), 3);
	CHECK_EQ(bad, 0);
	CHECK_EQ(stats(&e).checksum_errors, 1);
	CHECK_EQ(stats(&e).blocks, 7);
	env_close(&e);
}

/*
 * key_file: refused as kvrt_tier_key_from_file refuses it (a symlink
 * -ELOOP, group/other bits or another owner -EPERM, too short -EINVAL,
 * absent -ENOENT), before anything is created; a good one opens, and the
 * blocks are found again with that key only.
 */
TEST(key_file_checks)
{
	char key[4400], other[4400], link[4400];
	struct stat st;
	struct env e;
	int bad;

	snprintf(key, sizeof(key), "%s/key%u", root, dir_seq++);
	snprintf(other, sizeof(other), "%s/key%u", root, dir_seq++);
	snprintf(link, sizeof(link), "%s/key%u", root, dir_seq++);
	put_file(key, "0123456789abcdef0123456789abcdef", 0600);
	put_file(other, "another tenant's secret, 32 byte", 0600);
	REQUIRE(symlink(key, link) == 0);
	new_dir(&e);

	e.key_file = link;
	CHECK_EQ(env_open(&e, "keyfile", BB, 8, NULL), -ELOOP);
	env_close(&e);
	chmod(key, 0644);
	e.key_file = key;
	CHECK_EQ(env_open(&e, "keyfile", BB, 8, NULL), -EPERM);
	env_close(&e);
	chmod(key, 0600);
	if (geteuid() == 0) {
		REQUIRE(chown(key, VICTIM, VICTIM) == 0);
		CHECK_EQ(env_open(&e, "keyfile", BB, 8, NULL), -EPERM);
		env_close(&e);
		REQUIRE(chown(key, 0, 0) == 0);
	}
	e.key_file = "/nonexistent/kvrt/key";
	CHECK_EQ(env_open(&e, "keyfile", BB, 8, NULL), -ENOENT);
	env_close(&e);
	CHECK(stat(e.dir, &st) < 0 && errno == ENOENT);	/* nothing created */

	e.key_file = key;
	REQUIRE(env_open(&e, "keyfile", BB, 8, NULL) == 0);
	CHECK_EQ(store_run(&e, 46, 0, 4, 50), 4);
	env_close(&e);
	REQUIRE(env_open(&e, "keyfile", BB, 8, NULL) == 0);
	CHECK_EQ(lookup_run(&e, 46, 4, NULL, &bad), 4);
	CHECK_EQ(bad, 0);
	env_close(&e);
	/* Another key (and the directory's own): none of them, and nothing counted as damage. */
	e.key_file = other;
	REQUIRE(env_open(&e, "keyfile", BB, 8, NULL) == 0);
	CHECK_EQ(lookup_run(&e, 46, 4, NULL, &bad), 0);
	CHECK_EQ(stats(&e).checksum_errors, 0);
	env_close(&e);
}

/*
 * An index of version 1 (0.6, 0.7: 64-byte head and records, no tags),
 * valid in every checksum: read as empty (its blocks carry no tag), not
 * counted as damage, and rewritten as version 2.
 */
TEST(an_index_of_version_1_is_read_as_empty_and_rewritten)
{
	uint8_t v2[IDX_HEAD + 4 * IDX_REC], v1[64 + 4 * 64];
	char id[4400], path[4600];
	uint32_t version = 1;
	uint64_t sum;
	struct stat st;
	struct env e;
	int fd, bad, i;

	closed_tier(&e, "version1", 8, 47, 4, id);
	if (!id[0])
		return;
	snprintf(path, sizeof(path), "%s/index", id);
	fd = open(path, O_RDWR);
	REQUIRE(fd >= 0 && read(fd, v2, sizeof(v2)) == (ssize_t)sizeof(v2));
	/* Both versions share their first 56 bytes (head and record) but for the version. */
	memcpy(v1, v2, 56);
	memcpy(v1 + 8, &version, 4);
	sum = XXH3_64bits(v1, 56);
	memcpy(v1 + 56, &sum, 8);
	for (i = 0; i < 4; i++) {
		memcpy(v1 + 64 + 64 * i, v2 + IDX_HEAD + IDX_REC * i, 56);
		sum = XXH3_64bits(v1 + 64 + 64 * i, 56);
		memcpy(v1 + 64 + 64 * i + 56, &sum, 8);
	}
	REQUIRE(ftruncate(fd, 0) == 0 && pwrite(fd, v1, sizeof(v1), 0) == (ssize_t)sizeof(v1));
	close(fd);
	REQUIRE(env_open(&e, "version1", BB, 8, NULL) == 0);
	CHECK_EQ(stats(&e).blocks, 0);
	CHECK_EQ(lookup_run(&e, 47, 4, NULL, &bad), 0);
	CHECK_EQ(stats(&e).checksum_errors, 0);
	env_close(&e);
	CHECK(stat(path, &st) == 0 && st.st_size == IDX_HEAD);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && pread(fd, &version, 4, 8) == 4 && version == 2);
	if (fd >= 0)
		close(fd);
}

/* More slots than the index can number: -EINVAL, and nothing created. */
TEST(capacity_that_does_not_fit_the_index_is_refused)
{
	struct kvrt_tier_ssd_opts o;
	struct kvrt_tier *t;
	struct stat st;
	struct env e;

	new_dir(&e);
	REQUIRE(env_open(&e, "capacity", BB, 8, NULL) == 0);
	kvrt_tier_close(e.t);
	e.t = NULL;
	new_dir(&e);
	/* 2^32 + 8 slots: once opened as 8. */
	o = (struct kvrt_tier_ssd_opts){ .dir = e.dir, .capacity_bytes = ((1ULL << 32) + 8) * BB };
	CHECK_EQ(kvrt_tier_open_ssd(e.s, &o, &t), -EINVAL);
	o.capacity_bytes = ((1ULL << 31) + 1) * BB;
	CHECK_EQ(kvrt_tier_open_ssd(e.s, &o, &t), -EINVAL);
	CHECK(stat(e.dir, &st) < 0 && errno == ENOENT);
	env_close(&e);
}

/*
 * The root: one that others may write must be sticky (else they could
 * rename the identity directory away and put theirs in its place), and it
 * must be the caller's or root's; the identity directory must be the
 * caller's, 0700, not a symlink.  Each refusal -EPERM (-ELOOP for the
 * symlink).
 */
TEST(a_root_or_identity_directory_others_control_is_refused)
{
	char id[4400], moved[4400];
	struct env e;

	new_dir(&e);
	REQUIRE(mkdir(e.dir, 0700) == 0);
	chmod(e.dir, 0777);
	CHECK_EQ(env_open(&e, "rootdir", BB, 4, NULL), -EPERM);
	env_close(&e);
	chmod(e.dir, 01777);
	CHECK_EQ(env_open(&e, "rootdir", BB, 4, NULL), 0);
	env_close(&e);
	chmod(e.dir, 0700);
	if (geteuid() == 0) {
		REQUIRE(chown(e.dir, VICTIM, VICTIM) == 0);
		CHECK_EQ(env_open(&e, "rootdir", BB, 4, NULL), -EPERM);
		env_close(&e);
		REQUIRE(chown(e.dir, 0, 0) == 0);
	}
	REQUIRE(identity_of(e.dir, id, sizeof(id)));
	chmod(id, 0750);
	CHECK_EQ(env_open(&e, "rootdir", BB, 4, NULL), -EPERM);
	env_close(&e);
	chmod(id, 0700);
	snprintf(moved, sizeof(moved), "%s.moved", e.dir);
	REQUIRE(rename(id, moved) == 0);
	REQUIRE(symlink(moved, id) == 0);
	CHECK_EQ(env_open(&e, "rootdir", BB, 4, NULL), -ELOOP);
	env_close(&e);
}

/*
 * kill -9 while a writer stores batch after batch (write-through and
 * write-back rounds in turn): every block a lookup returns afterwards
 * holds its pattern, and every batch the writer had seen committed (and
 * that eviction cannot have taken) is there.
 */
#define KILL_ROUNDS 40
#define KILL_BATCH 8
#define KILL_CAP 64

/* Write-back rounds publish each batch, store it and flush before calling it committed. */
static void writer(struct env *e, int fd, bool write_back)
{
	uint32_t b;

	for (b = 0; b < 100000; b++) {
		if (write_back) {
			if (publish_store_run(e, 100, b * KILL_BATCH, KILL_BATCH) != KILL_BATCH ||
			    kvrt_tier_flush(e->s))
				_exit(3);
		} else if (store_run(e, 100, b * KILL_BATCH, KILL_BATCH, 50) != KILL_BATCH) {
			_exit(3);
		}
		if (write(fd, &b, sizeof(b)) != sizeof(b))
			_exit(4);
	}
	_exit(0);
}

TEST(kill_9_leaves_every_block_whole)
{
	uint32_t committed, b, last, i, wrong = 0, lost = 0, hits = 0, wb_hits = 0;
	struct timespec ts;
	struct env e;
	int round, p[2], status;
	pid_t pid;

	srand(1234);
	new_dir(&e);
	for (round = 0; round < KILL_ROUNDS; round++) {
		REQUIRE(pipe(p) == 0);
		fflush(NULL);
		pid = fork();
		REQUIRE(pid >= 0);
		if (!pid) {
			close(p[0]);
			if (env_open_policy(&e, "kill", BB, KILL_CAP, NULL,
					    round % 2 ? KVRT_TIER_WRITE_BACK : 0, 0))
				_exit(2);
			writer(&e, p[1], round % 2);
		}
		close(p[1]);
		ts.tv_sec = 0;
		ts.tv_nsec = (long)(2 + rand() % 80) * 1000000L;
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		CHECKF(WIFSIGNALED(status), "round %d: the writer ended by itself (status %d)",
		       round, status);
		committed = 0;
		last = UINT32_MAX;
		while (read(p[0], &b, sizeof(b)) == sizeof(b)) {
			last = b;
			committed++;
		}
		close(p[0]);
		REQUIRE(env_open(&e, "kill", BB, KILL_CAP, NULL) == 0);
		CHECK_EQ(stats(&e).checksum_errors, 0);
		/* Each batch's blocks, one lookup per block so that a gap cannot hide one. */
		for (b = 0; last != UINT32_MAX && b <= last + 1; b++)
			for (i = 0; i < KILL_BATCH; i++) {
				uint8_t h[1][H];
				uint32_t id;
				int got;

				tier_hash(h[0], 100, b * KILL_BATCH + i);
				got = kvrt_lookup_tiers(e.s, 1, (const uint8_t (*)[H])h, &id, NULL);
				if (got == 1) {
					hits++;
					wb_hits += round % 2;
					if (!tier_holds(e.s, id, h[0], BB))
						wrong++;
					kvrt_release(e.s, 1, &id);
				} else if (b <= last && last - b < KILL_CAP / KILL_BATCH - 1) {
					/*
					 * Committed and too recent to be evicted, even
					 * by the batch in progress at the kill.
					 */
					lost++;
				}
			}
		CHECK_EQ(stats(&e).checksum_errors, 0);
		env_close(&e);
		/* A fresh start for the next round's writer (b restarts at 0). */
		new_dir(&e);
		(void)committed;
	}
	CHECK_EQ(wrong, 0);
	CHECK_EQ(lost, 0);
	CHECKF(hits > 0, "no round committed anything: the kill came too early every time");
	CHECKF(wb_hits > 0, "no write-back round committed anything");
	tap_diag("%u blocks checked after %d kills (%u in write-back rounds)", hits, KILL_ROUNDS,
		 wb_hits);
}

/*
 * No signal for a bad id: a store names a block inside the space that has
 * no memory behind it (the embedded pool backs 2 MiB at a time, and one
 * block is allocated of four chunks).  Run in a child, so a signal is this
 * test's failure: -EFAULT, and nothing reaches the tier.
 */
TEST(a_store_of_an_unbacked_block_is_efault_not_a_signal)
{
	struct kvrt_open_opts ko = { .backend = KVRT_BACKEND_EMBEDDED, .flags = KVRT_OPEN_NO_HUGETLB };
	struct kvrt_space_opts so = { .name = "unbacked", .flags = KVRT_SPACE_CREATE, .mode = 0600,
				      .block_bytes = BB, .quota_bytes = 4 * 2097152 };
	struct env e;
	struct kvrt_tier_ssd_opts to = { .capacity_bytes = 8 * BB };
	uint8_t h[2][H];
	uint32_t ids[2], got[2], id;
	int status = 0;
	pid_t pid;

	new_dir(&e);
	to.dir = e.dir;
	REQUIRE(kvrt_open(&e.k, &ko) == 0);
	REQUIRE(kvrt_space_open(e.k, &so, &e.s) == 0);
	REQUIRE(kvrt_alloc_blocks(e.s, 1, &id) == 0);
	REQUIRE(kvrt_tier_open_ssd(e.s, &to, &e.t) == 0);
	memset(h, 0x33, sizeof(h));
	h[1][0] = 0x34;
	ids[0] = id;
	ids[1] = (uint32_t)(3 * 2097152 / BB);	/* in the last, unbacked chunk */
	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0);
	if (!pid) {
		int ret = kvrt_tier_store(e.s, 2, ids, (const uint8_t (*)[H])h, NULL);

		_exit(ret == -EFAULT ? 0 : ret < 0 ? -ret : 100);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "store of an unbacked block: %s %d (0: -EFAULT as wanted)",
	       WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) :
	       WEXITSTATUS(status));
	CHECK_EQ(kvrt_lookup_tiers(e.s, 2, (const uint8_t (*)[H])h, got, NULL), 0);
	CHECK_EQ(stats(&e).blocks, 0);
	env_close(&e);
}

int main(void)
{
	const char *d = getenv("KVRT_TIER_DIR");
	char tmpl[4096];

	setvbuf(stdout, NULL, _IOLBF, 0);
	tap_only = getenv("TAP_ONLY");	/* run only the tests whose name holds it */
	if (d && *d) {
		snprintf(root, sizeof(root), "%s", d);
	} else {
		snprintf(tmpl, sizeof(tmpl), "%s/kvrt-tier.XXXXXX",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp");
		if (!mkdtemp(tmpl)) {
			perror("mkdtemp");
			return 1;
		}
		snprintf(root, sizeof(root), "%s", tmpl);
	}
	/* Another uid must be able to reach the test's directories to be refused below them. */
	chmod(root, 0755);
	RUN(arguments_refused);
	RUN(contains_answers_from_the_index_without_reading);
	RUN(store_then_lookup_across_pool_and_tier);
	RUN(blocks_survive_a_restart_in_their_identity_only);
	RUN(a_corrupted_block_is_a_miss_and_is_dropped);
	RUN(a_torn_index_record_loses_that_block_only);
	RUN(the_stats_file_says_what_the_tier_did);
	RUN(write_back_writes_every_block_by_flush);
	RUN(closing_a_write_back_tier_writes_what_is_queued);
	RUN(threads_store_and_look_up_while_the_tier_writes_back);
	RUN(a_forked_child_neither_hangs_nor_takes_the_parents_queue);
	RUN(eviction_takes_the_lowest_priority_then_the_oldest);
	RUN(another_uid_is_refused_by_the_file_system);
	RUN(another_tenant_cannot_prepare_the_identity_directory);
	RUN(a_forged_block_in_a_shared_root_is_a_miss);
	RUN(index_new_symlink_is_not_followed);
	RUN(a_hard_linked_data_file_is_refused);
	RUN(a_tampered_block_with_a_valid_checksum_is_a_miss);
	RUN(key_file_checks);
	RUN(an_index_of_version_1_is_read_as_empty_and_rewritten);
	RUN(capacity_that_does_not_fit_the_index_is_refused);
	RUN(a_root_or_identity_directory_others_control_is_refused);
	RUN(a_store_of_an_unbacked_block_is_efault_not_a_signal);
	RUN(kill_9_leaves_every_block_whole);
	if (!d || !*d) {
		char cmd[4200];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd))
			tap_diag("could not remove %s", root);
	}
	return tap_done("test_tier_ssd");
}
