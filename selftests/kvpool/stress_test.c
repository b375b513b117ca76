// SPDX-License-Identifier: GPL-2.0
/*
 * stress_test: 4 processes on each of the 2 NUMA nodes hammer three spaces
 * at once for a bounded time, and nobody's data is ever disturbed.
 *
 * Spaces: one BIND to node 0 (64 KiB blocks) used by the 4 processes pinned
 * to node 0's CPU, one BIND to node 1 used by the 4 on node 1's CPU, and one
 * INTERLEAVE over both (768 KiB blocks, so blocks straddle chunks) that all
 * 8 share.  Each process loops over random operations on its two spaces:
 * ALLOC a batch and write it, rewrite a block, verify, FREE a batch (after
 * verifying it), read a block back through GUP (process_vm_readv on itself),
 * munmap and mmap again, or close the fd and join again (which drops every
 * block it owns and may destroy and re-create the space).  A block's
 * pattern is a function of (pid, block id, generation, page, word), so a
 * write that lands in another process's block, a block handed out twice, or
 * a stale page shows up as a mismatch.
 *
 * The quotas are sized so that neither a quota nor a node runs out: an
 * ENOSPC fails the test (it would mean leaked blocks or chunks).  While it
 * runs the parent reads the debugfs check every 500 ms (it must say "ok")
 * and checks that the BIND spaces hold chunks on their node only.  At the
 * end every process verifies and closes everything, and the pool must be
 * back at its baseline.
 *
 * Kernel command line: kvpool_stress_seconds=N (default 30), kvpool_seed=S.
 */
#include "kvpool_util.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#define NODES		2
#define PER_NODE	4
#define NPROC		(NODES * PER_NODE)
#define PG		4096UL
#define WORDS_PER_PAGE	8
#define WORD_STRIDE	(PG / WORDS_PER_PAGE)

#define NODE_BLOCK	(64 * KiB)
#define NODE_QUOTA	(24 * MiB)	/* 384 blocks, 12 chunks of one node */
#define IL_BLOCK	(768 * KiB)
#define IL_QUOTA	(24 * MiB)	/* 32 blocks, 12 chunks over both nodes */
#define NODE_SHARE	(NODE_QUOTA / NODE_BLOCK / PER_NODE)	/* 96 */
#define IL_SHARE	(IL_QUOTA / IL_BLOCK / NPROC)		/* 4 */
#define MAX_OWN		NODE_SHARE
#define BATCH		16

enum op {
	OP_ALLOC, OP_REWRITE, OP_VERIFY, OP_FREE, OP_GUP, OP_REMAP, OP_REJOIN,
	OP_NR
};

static const char *const op_names[OP_NR] = {
	"alloc", "rewrite", "verify", "free", "gup_read", "remap", "rejoin",
};

/* Op i is drawn when a draw of 100 is below op_below[i] (and no earlier op's bound). */
static const unsigned int op_below[OP_NR] = {
	[OP_ALLOC] = 32, [OP_REWRITE] = 44, [OP_VERIFY] = 60, [OP_FREE] = 86, [OP_GUP] = 92,
	[OP_REMAP] = 97, [OP_REJOIN] = 100,
};

struct pstat {
	volatile int pid;
	volatile int node;		/* node it runs on, -1 unpinned */
	volatile unsigned long ops[OP_NR];
	volatile unsigned long blocks_alloc, blocks_free, words_checked;
	volatile int done;
	char err[256];
};

struct shared {
	volatile int stop;
	char name[3][KVPOOL_NAME_MAX];	/* node 0, node 1, interleave */
	struct pstat p[NPROC];
};

static struct shared *sh;

/* The harness ends the test process with _exit(): flush every message. */
#define say(...) do { ksft_print_msg(__VA_ARGS__); fflush(stdout); } while (0)

static __u64 rng_state;

static __u64 rnd(void)
{
	return kv_splitmix64(&rng_state);
}

static __u64 pat(__u32 pid, __u32 id, __u32 gen, __u32 page, __u32 w)
{
	__u64 x = ((__u64)pid << 40) ^ ((__u64)gen << 20) ^ ((__u64)id << 12) ^
		  (page << 3) ^ w;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* One process's view of one space. */
struct pspace {
	int which;		/* 0, 1: node spaces; 2: interleave */
	int fd;
	char *map;
	__u64 map_bytes, block;
	unsigned int share;	/* most blocks this process holds here */
	unsigned int n;
	__u32 ids[MAX_OWN];
	__u32 gen[MAX_OWN];
};

#define PFAIL(st, ...) do { \
	char __m[sizeof((st)->err)]; \
	snprintf(__m, sizeof(__m), __VA_ARGS__); \
	memcpy((st)->err, __m, sizeof(__m)); \
	_exit(1); \
} while (0)

static __u32 gen_counter;

static __u64 *word_at(char *base, __u64 block, __u32 id, __u32 page, __u32 w)
{
	return (__u64 *)(base + (size_t)id * block + page * PG + w * WORD_STRIDE);
}

static void fill(struct pspace *s, __u32 pid, unsigned int i)
{
	__u32 p, w, pages = s->block / PG;

	s->gen[i] = ++gen_counter;
	for (p = 0; p < pages; p++)
		for (w = 0; w < WORDS_PER_PAGE; w++)
			*word_at(s->map, s->block, s->ids[i], p, w) =
				pat(pid, s->ids[i], s->gen[i], p, w);
}

/* Check block i of @s in @base (the mapping, or a copy at id 0). */
static void verify_at(struct pstat *st, struct pspace *s, __u32 pid,
		      unsigned int i, char *base, __u32 at_id, const char *how)
{
	__u32 p, w, pages = s->block / PG;

	for (p = 0; p < pages; p++) {
		for (w = 0; w < WORDS_PER_PAGE; w++) {
			__u64 v = *word_at(base, s->block, at_id, p, w);
			__u64 want = pat(pid, s->ids[i], s->gen[i], p, w);

			if (v != want)
				PFAIL(st, "pid %u space %s block %u gen %u page %u word %u (%s): %#llx, want %#llx",
				      pid, sh->name[s->which], s->ids[i], s->gen[i], p, w,
				      how, (unsigned long long)v,
				      (unsigned long long)want);
		}
	}
	st->words_checked += pages * WORDS_PER_PAGE;
}

static void verify(struct pstat *st, struct pspace *s, __u32 pid, unsigned int i)
{
	verify_at(st, s, pid, i, s->map, s->ids[i], "mapping");
}

static void verify_all(struct pstat *st, struct pspace *s, __u32 pid)
{
	unsigned int i;

	for (i = 0; i < s->n; i++)
		verify(st, s, pid, i);
}

static void do_mmap(struct pstat *st, struct pspace *s)
{
	s->map = kv_mmap(s->fd, s->map_bytes, 0);
	if (s->map == MAP_FAILED)
		PFAIL(st, "mmap %s: %s", sh->name[s->which], strerror(errno));
}

static void join(struct pstat *st, struct pspace *s)
{
	struct kvpool_space_open so;
	__u64 quota = s->which == 2 ? IL_QUOTA : NODE_QUOTA;
	int ret;

	s->block = s->which == 2 ? IL_BLOCK : NODE_BLOCK;
	s->fd = kv_open();
	if (s->fd < 0)
		PFAIL(st, "open: %s", strerror(errno));
	kv_so_init(&so, sh->name[s->which], KVPOOL_SPACE_CREATE, s->block, quota);
	so.mode = 0600;
	if (s->which == 2) {
		so.numa_policy = KVPOOL_NUMA_INTERLEAVE;
	} else {
		so.numa_policy = KVPOOL_NUMA_BIND;
		so.node_mask = 1ULL << s->which;
	}
	ret = kv_space_open(s->fd, &so);
	if (ret)
		PFAIL(st, "SPACE_OPEN %s: %s", so.name, strerror(-ret));
	s->map_bytes = so.map_bytes;
	s->n = 0;
	do_mmap(st, s);
}

static void leave(struct pstat *st, struct pspace *s, __u32 pid)
{
	verify_all(st, s, pid);
	if (munmap(s->map, s->map_bytes))
		PFAIL(st, "munmap: %s", strerror(errno));
	close(s->fd);
	s->n = 0;
}

static void op_alloc(struct pstat *st, struct pspace *s, __u32 pid)
{
	unsigned int room = s->share - s->n, cnt, i;
	int ret;

	if (!room)
		return;
	cnt = 1 + rnd() % (room < BATCH ? room : BATCH);
	ret = kv_alloc(s->fd, s->ids + s->n, cnt);
	if (ret)
		PFAIL(st, "ALLOC %u in %s (holding %u): %s", cnt, sh->name[s->which],
		      s->n, strerror(-ret));
	for (i = s->n; i < s->n + cnt; i++)
		fill(s, pid, i);
	s->n += cnt;
	st->blocks_alloc += cnt;
}

static void op_free(struct pstat *st, struct pspace *s, __u32 pid)
{
	__u32 ids[BATCH];
	unsigned int cnt, i, j;
	int ret;

	if (!s->n)
		return;
	cnt = 1 + rnd() % (s->n < BATCH ? s->n : BATCH);
	/* Take cnt random entries out of the table, checking each first. */
	for (i = 0; i < cnt; i++) {
		j = rnd() % s->n;
		verify(st, s, pid, j);
		ids[i] = s->ids[j];
		s->n--;
		s->ids[j] = s->ids[s->n];
		s->gen[j] = s->gen[s->n];
	}
	ret = kv_free(s->fd, ids, cnt);
	if (ret)
		PFAIL(st, "FREE %u in %s: %s", cnt, sh->name[s->which], strerror(-ret));
	st->blocks_free += cnt;
}

static void op_gup(struct pstat *st, struct pspace *s, __u32 pid)
{
	static char buf[IL_BLOCK];
	struct iovec local, remote;
	unsigned int i;
	ssize_t n;

	if (!s->n)
		return;
	i = rnd() % s->n;
	local.iov_base = buf;
	local.iov_len = s->block;
	remote.iov_base = s->map + (size_t)s->ids[i] * s->block;
	remote.iov_len = s->block;
	n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	if (n != (ssize_t)s->block)
		PFAIL(st, "process_vm_readv of own block %u: %s", s->ids[i],
		      n < 0 ? strerror(errno) : "short");
	verify_at(st, s, pid, i, buf, 0, "process_vm_readv copy");
}

/* Check a random owned block, then write it again. */
static void op_rewrite(struct pstat *st, struct pspace *s, __u32 pid)
{
	unsigned int k;

	if (!s->n)
		return;
	k = rnd() % s->n;
	verify(st, s, pid, k);
	fill(s, pid, k);
}

/* Map the space again; what it holds reads back the same. */
static void op_remap(struct pstat *st, struct pspace *s, __u32 pid)
{
	if (munmap(s->map, s->map_bytes))
		PFAIL(st, "munmap: %s", strerror(errno));
	do_mmap(st, s);
	verify_all(st, s, pid);
}

static void op_rejoin(struct pstat *st, struct pspace *s, __u32 pid)
{
	leave(st, s, pid);
	join(st, s);
}

/* What each op does to one of the process's spaces. */
static void (*const op_fn[OP_NR])(struct pstat *st, struct pspace *s, __u32 pid) = {
	[OP_ALLOC] = op_alloc, [OP_REWRITE] = op_rewrite, [OP_VERIFY] = verify_all,
	[OP_FREE] = op_free, [OP_GUP] = op_gup, [OP_REMAP] = op_remap, [OP_REJOIN] = op_rejoin,
};

static void stress_proc(int idx, __u64 seed)
{
	struct pstat *st = &sh->p[idx];
	int node = idx / PER_NODE;
	struct pspace sp[2];
	__u32 pid = getpid();

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rng_state = seed ^ ((__u64)(idx + 1) * 0x9E3779B97F4A7C15ULL);
	st->node = kv_pin_to_cpu(node) == node ? node : -1;
	memset(sp, 0, sizeof(sp));
	sp[0].which = node;
	sp[0].share = NODE_SHARE;
	sp[1].which = 2;
	sp[1].share = IL_SHARE;
	join(st, &sp[0]);
	join(st, &sp[1]);

	while (!sh->stop) {
		struct pspace *s = &sp[rnd() % 2];
		unsigned int r = rnd() % 100;
		enum op op = OP_ALLOC;

		while (r >= op_below[op])
			op++;

		op_fn[op](st, s, pid);
		st->ops[op]++;
	}
	leave(st, &sp[0], pid);
	leave(st, &sp[1], pid);
	st->done = 1;
	_exit(0);
}

/*
 * The BIND spaces must hold chunks on their own node only.  Returns 0 (and
 * the offending line in @why) when one does not, else 1 + the number of
 * BIND spaces found, or -errno.
 */
static int check_bind_placement(char *why, size_t len)
{
	static char buf[16384];
	int n, which, found = 0;

	n = read_file("/sys/kernel/debug/kvpool/spaces", buf, sizeof(buf));
	if (n < 0)
		return n;
	for (which = 0; which < 2; which++) {
		char key[KVPOOL_NAME_MAX + 8], other[32], *line, *end, *p;

		snprintf(key, sizeof(key), "name=%s ", sh->name[which]);
		line = strstr(buf, key);
		if (!line)
			continue;	/* between its last close and a re-create */
		found++;
		end = strchr(line, '\n');
		if (end)
			*end = '\0';
		snprintf(other, sizeof(other), " node%d_bytes=", !which);
		p = strstr(line, other);
		if (p && strtoull(p + strlen(other), NULL, 10) != 0) {
			snprintf(why, len, "%s", line);
			return 0;
		}
		if (end)
			*end = '\n';
	}
	return 1 + found;
}

FIXTURE(stress) {
	__u64 free0, spaces0;
};

FIXTURE_SETUP(stress)
{
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
	ASSERT_EQ(0, sysfs_get("held_bytes"));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, sh);
	memset(sh, 0, sizeof(*sh));
}

FIXTURE_TEARDOWN(stress)
{
}

TEST_F_TIMEOUT(stress, four_per_node_two_nodes, 600)
{
	unsigned long secs = kv_cmdline_ulong("kvpool_stress_seconds", 30);
	__u64 seed = kv_cmdline_ulong("kvpool_seed", 0);
	unsigned long checks = 0, bad_checks = 0, ops_total = 0, ops[OP_NR] = { 0 };
	unsigned long balloc = 0, bfree = 0, words = 0, placements = 0;
	pid_t pids[NPROC];
	__u64 t0, deadline;
	char ck[1024];
	int i, j, st, failed = 0, pinned = 0;
	struct kvpool_info info;

	ASSERT_EQ(0, kv_pool_info(&info));
	if ((info.node_mask & 3) != 3)
		SKIP(return, "needs pool nodes 0 and 1 (node mask %#llx)",
		     (unsigned long long)info.node_mask);
	if (!seed)
		seed = kv_now_us() ^ ((__u64)getpid() << 20);
	say("seed=%llu seconds=%lu processes=%d (kernel command line: kvpool_seed=, kvpool_stress_seconds=)\n",
	    (unsigned long long)seed, secs, NPROC);
	snprintf(sh->name[0], KVPOOL_NAME_MAX, "stress-%d-node0", (int)getpid());
	snprintf(sh->name[1], KVPOOL_NAME_MAX, "stress-%d-node1", (int)getpid());
	snprintf(sh->name[2], KVPOOL_NAME_MAX, "stress-%d-il", (int)getpid());

	t0 = kv_now_us();
	for (i = 0; i < NPROC; i++) {
		pids[i] = fork();
		ASSERT_LE(0, pids[i]);
		if (pids[i] == 0)
			stress_proc(i, seed);
		sh->p[i].pid = pids[i];
	}

	/* Watch while they run; a child that exits early has failed. */
	deadline = t0 + (__u64)secs * 1000000;
	while (kv_now_us() < deadline && !failed) {
		int r;

		usleep(500000);
		r = kv_check(ck, sizeof(ck));
		checks++;
		if (r != 1) {
			bad_checks++;
			TH_LOG("debugfs check while running: %s", r < 0 ? strerror(-r) : ck);
			failed = 1;
		}
		r = check_bind_placement(ck, sizeof(ck));
		if (r > 1)
			placements += r - 1;
		if (r == 0) {
			TH_LOG("a BIND space holds chunks of the other node: %s", ck);
			failed = 1;
		}
		for (i = 0; i < NPROC; i++) {
			pid_t w = waitpid(pids[i], &st, WNOHANG);

			if (w == pids[i]) {
				TH_LOG("process %d (pid %d) ended early (status %#x): %s", i,
				       pids[i], st, sh->p[i].err);
				pids[i] = -1;
				failed = 1;
			}
		}
	}
	sh->stop = 1;
	for (i = 0; i < NPROC; i++) {
		__u64 wait_start = kv_now_us();

		if (pids[i] < 0)
			continue;
		while (waitpid(pids[i], &st, WNOHANG) == 0) {
			if (kv_now_us() - wait_start > 60 * 1000000ULL) {
				TH_LOG("process %d did not stop within 60 s; killing it", i);
				kill(pids[i], SIGKILL);
				waitpid(pids[i], &st, 0);
				failed = 1;
				break;
			}
			usleep(10000);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !sh->p[i].done) {
			TH_LOG("process %d (pid %d, node %d): status %#x: %s", i, pids[i],
			       sh->p[i].node, st, sh->p[i].err);
			failed = 1;
		}
	}
	for (i = 0; i < NPROC; i++) {
		pinned += sh->p[i].node >= 0;
		for (j = 0; j < OP_NR; j++) {
			ops[j] += sh->p[i].ops[j];
			ops_total += sh->p[i].ops[j];
		}
		balloc += sh->p[i].blocks_alloc;
		bfree += sh->p[i].blocks_free;
		words += sh->p[i].words_checked;
	}
	say("ran %.1f s: %lu operations, %lu blocks allocated, %lu freed by FREE, %lu pattern words verified\n",
	    (kv_now_us() - t0) / 1e6, ops_total, balloc, bfree, words);
	for (j = 0; j < OP_NR; j++)
		say("  %-9s %lu\n", op_names[j], ops[j]);
	say("%d of %d processes pinned to their node's CPU; debugfs check read %lu times while running, %lu not ok; BIND placement seen %lu times\n",
	    pinned, NPROC, checks, bad_checks, placements);
	ASSERT_EQ(0, failed);

	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000));
	EXPECT_EQ(0, sysfs_wait_eq("held_bytes", 0, 500));
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
