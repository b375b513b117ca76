// SPDX-License-Identifier: GPL-2.0
/*
 * kill_campaign_test: SIGKILL child processes at random points of their
 * work, many times, and check after each round that everything they held
 * went back: sysfs free_bytes, held_bytes and spaces at the baseline, and
 * the debugfs accounting check "ok".
 *
 * Each round forks two workers.  Both loop over: open /dev/kvpool, join or
 * create a space, ALLOC batches, mmap, touch their blocks, GUP the sibling's
 * mapping with process_vm_readv/process_vm_writev (and their own with
 * process_vm_writev), verify, FREE part of their blocks, munmap, close.  In
 * half of the rounds the two share one space; in the others each has its
 * own.  The parent SIGKILLs one worker after a random delay and reaps it;
 * the debugfs check must say "ok" right then, and with separate spaces the
 * victim's space must go while its sibling runs on.  Then it SIGKILLs the
 * other after another delay.  The delays are drawn from [0, 3 iterations),
 * measured by a calibration round, so the kills land inside the loop.  A
 * kill is counted with the phase the worker had announced just before it;
 * whether the kill interrupted an ioctl cannot be told from outside.
 *
 * Data checks while it runs: a worker's pattern is a function of (its pid,
 * block id, page, word), so
 *   - every word of a block a worker owns reads back exactly after it wrote
 *     it, whatever the sibling's GUP writes did meanwhile;
 *   - every word the sibling reads through process_vm_readv is 0 or the
 *     pattern of one of the two workers of this round, byte by byte since a
 *     word written meanwhile reads torn (a word of a space of an earlier
 *     round would mean a chunk was not scrubbed).
 * process_vm_writev into the sibling writes the sibling's own pattern, and
 * only when the spaces are separate (in a shared space a block may have
 * changed hands).  Each worker maps its space over a PROT_NONE placeholder
 * that it keeps for its whole life, so a GUP write aimed at a mapping that
 * just went away hits the placeholder (EFAULT), never other memory.
 *
 * The prefix campaign (prefix_sigkill_campaign) does the same to workers
 * of the prefix cache.  Each round the test creates a small space (64
 * blocks of 16 KiB, a universe of 96 hashes, so evictions are constant)
 * and keeps one fd on it that holds nothing; three workers loop over:
 * open, join, mmap, then 1-6 times: ALLOC, write each block with the
 * content derived from a hash (one word per 512 bytes), PUBLISH (DEDUP when the hash is present), LOOKUP runs of hashes
 * (checking each hit's content), RELEASE some references; then drain
 * events, FREE, and either RELEASE everything and close or close while holding
 * references.  The test SIGKILLs the three workers one by one at random
 * points; after each, debugfs check must say "ok"; after the last, the
 * space must show no reader references, no published and no owned blocks,
 * free + cached + holes == backed, and every hash still cached must hold
 * its content.  Then the space goes and the pool must be at its baseline.
 *
 * Kernel command line (all optional):
 *   kvpool_kills=N          kills in total, two per round (default 1000)
 *   kvpool_prefix_kills=N   kills of the prefix campaign, three per round
 *                           (default 600)
 *   kvpool_seed=S           PRNG seed (default: time and pid); printed
 *   kvpool_kill_seconds=T   fail if a campaign needs longer (default 280)
 */
#include "kvpool_util.h"
#include "kvpool_prefix_util.h"

#include <sys/prctl.h>
#include <sys/uio.h>

#define BLOCK		(64 * KiB)
#define QUOTA		(8 * MiB)	/* 128 blocks, 4 chunks */
#define NR_BLOCKS	(QUOTA / BLOCK)
#define PG		4096UL
#define PAGES_PER_BLOCK	(BLOCK / PG)
#define WORDS_PER_PAGE	8	/* pattern words per page, 512 bytes apart */
#define WORD_STRIDE	(PG / WORDS_PER_PAGE)
#define MAX_HELD	48	/* blocks a worker holds at most */

enum phase {
	PH_START, PH_OPEN, PH_JOIN, PH_ALLOC, PH_MMAP, PH_TOUCH, PH_GUP_READ,
	PH_GUP_WRITE, PH_GUP_SELF, PH_VERIFY, PH_FREE, PH_MUNMAP, PH_CLOSE,
	PH_NR
};

static const char *const phase_names[PH_NR] = {
	"start", "open", "join", "alloc", "mmap", "touch", "gup_read",
	"gup_write", "gup_self", "verify", "free", "munmap", "close",
};

/* One per worker, in memory shared with the parent and the sibling. */
struct slot {
	volatile int pid;
	volatile int phase;
	volatile int mapped;		/* the kvpool mapping is in place */
	volatile int stop_after;	/* calibration: exit 0 after this many iterations */
	unsigned long base;		/* the placeholder range, fixed for the worker's life */
	volatile unsigned long iters;
	volatile unsigned long gup_ok, gup_fault, gup_words;
	volatile unsigned long allocs, frees;
	char err[200];			/* why the worker exited on its own */
};

struct shared {
	struct slot w[2];
	volatile int shared_space;	/* this round: one space for both */
	volatile __u32 numa_policy;
	char name[2][KVPOOL_NAME_MAX];	/* space of worker 0 / 1 (equal when shared) */
};

static struct shared *sh;

/* ---- small helpers --------------------------------------------------------- */

/* The harness ends the test process with _exit(): flush every message. */
#define say(...) do { ksft_print_msg(__VA_ARGS__); fflush(stdout); } while (0)

static __u64 rng_state;

static __u64 rnd(void)
{
	return kv_splitmix64(&rng_state);
}

static void sleep_us(__u64 us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* The pattern word of (pid, block, page, word): never 0. */
static __u64 pat(__u32 pid, __u32 id, __u32 page, __u32 w)
{
	__u64 x = ((__u64)pid << 32) ^ ((__u64)id << 12) ^ (page << 3) ^ w;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x | 1;
}

static __u64 *word_at(char *m, __u32 id, __u32 page, __u32 w)
{
	return (__u64 *)(m + (size_t)id * BLOCK + page * PG + w * WORD_STRIDE);
}

static void fill_block(char *m, __u32 pid, __u32 id)
{
	__u32 p, w;

	for (p = 0; p < PAGES_PER_BLOCK; p++)
		for (w = 0; w < WORDS_PER_PAGE; w++)
			*word_at(m, id, p, w) = pat(pid, id, p, w);
}

/* 0, or 1 + the index of the first bad word. */
static long check_block(char *m, __u32 pid, __u32 id)
{
	__u32 p, w;

	for (p = 0; p < PAGES_PER_BLOCK; p++)
		for (w = 0; w < WORDS_PER_PAGE; w++)
			if (*word_at(m, id, p, w) != pat(pid, id, p, w))
				return 1 + p * WORDS_PER_PAGE + w;
	return 0;
}

/* ---- the worker ---------------------------------------------------------- */

#define WFAIL(s, code, ...) do { \
	snprintf((s)->err, sizeof((s)->err), __VA_ARGS__); \
	_exit(code); \
} while (0)

/*
 * process_vm_readv copies bytewise while the sibling stores whole words, so
 * a word being written reads torn: each byte is the old one (0, or in a
 * shared space the other worker's pattern) or the new one.  Foreign data,
 * e.g. an unscrubbed chunk, fails this with near certainty.
 */
static int bytes_from(__u64 v, __u64 a, __u64 b)
{
	int i;

	for (i = 0; i < 64; i += 8) {
		__u64 m = 0xffULL << i;

		if ((v & m) && (v & m) != (a & m) && (v & m) != (b & m))
			return 0;
	}
	return 1;
}

/* Read block @id of the sibling through GUP and check each pattern word. */
static void gup_read_sibling(struct slot *me, struct slot *sib, int me_pid,
			     __u32 id, char *buf)
{
	struct iovec local = { buf, BLOCK };
	struct iovec remote = { (void *)(sib->base + (size_t)id * BLOCK), BLOCK };
	int sib_pid = sib->pid;
	ssize_t n;
	__u32 p, w;

	n = process_vm_readv(sib_pid, &local, 1, &remote, 1, 0);
	if (n < 0) {
		/* Unbacked block, mapping gone, sibling dead. */
		if (errno == EFAULT || errno == ESRCH) {
			me->gup_fault++;
			return;
		}
		WFAIL(me, 20, "process_vm_readv(%d): %s", sib_pid, strerror(errno));
	}
	me->gup_ok++;
	for (p = 0; p < PAGES_PER_BLOCK && (p + 1) * PG <= (size_t)n; p++) {
		for (w = 0; w < WORDS_PER_PAGE; w++) {
			__u64 v = *word_at(buf, 0, p, w);

			me->gup_words++;
			if (bytes_from(v, pat(sib_pid, id, p, w),
				       sh->shared_space ? pat(me_pid, id, p, w) : 0))
				continue;
			WFAIL(me, 21, "GUP read of sibling %d block %u page %u word %u: %#llx is neither 0 nor a pattern of this round",
			      sib_pid, id, p, w, (unsigned long long)v);
		}
	}
}

/* Write the sibling's own pattern into its block @id (separate spaces only). */
static void gup_write_sibling(struct slot *me, struct slot *sib, __u32 id)
{
	struct iovec local[PAGES_PER_BLOCK * WORDS_PER_PAGE];
	struct iovec remote[PAGES_PER_BLOCK * WORDS_PER_PAGE];
	__u64 vals[PAGES_PER_BLOCK * WORDS_PER_PAGE];
	int sib_pid = sib->pid;
	__u32 p, w, i = 0;
	ssize_t n;

	for (p = 0; p < PAGES_PER_BLOCK; p++) {
		for (w = 0; w < WORDS_PER_PAGE; w++, i++) {
			vals[i] = pat(sib_pid, id, p, w);
			local[i].iov_base = &vals[i];
			local[i].iov_len = sizeof(__u64);
			remote[i].iov_base = word_at((char *)sib->base, id, p, w);
			remote[i].iov_len = sizeof(__u64);
		}
	}
	n = process_vm_writev(sib_pid, local, i, remote, i, 0);
	if (n < 0) {
		if (errno == EFAULT || errno == ESRCH) {
			me->gup_fault++;
			return;
		}
		WFAIL(me, 22, "process_vm_writev(%d): %s", sib_pid, strerror(errno));
	}
	me->gup_ok++;
}

/* Rewrite our own block @id with its pattern through GUP on ourselves. */
static void gup_write_self(struct slot *me, char *m, int pid, __u32 id)
{
	static char buf[BLOCK];
	struct iovec local = { buf, BLOCK };
	struct iovec remote = { m + (size_t)id * BLOCK, BLOCK };
	__u32 p, w;
	ssize_t n;

	memcpy(buf, m + (size_t)id * BLOCK, BLOCK);
	for (p = 0; p < PAGES_PER_BLOCK; p++)
		for (w = 0; w < WORDS_PER_PAGE; w++)
			*word_at(buf, 0, p, w) = pat(pid, id, p, w);
	n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
	if (n != BLOCK)
		WFAIL(me, 23, "process_vm_writev(self) of owned block %u: %s", id,
		      n < 0 ? strerror(errno) : "short");
	me->gup_ok++;
}

static void worker(int idx, int ready_fd)
{
	struct slot *me = &sh->w[idx], *sib = &sh->w[!idx];
	static char gup_buf[BLOCK];
	__u32 held[MAX_HELD], pid = getpid();
	char *base = (char *)me->base;
	unsigned long iter = 0;
	char c = 'r';

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rng_state ^= (__u64)pid * 0x9E3779B97F4A7C15ULL;
	me->phase = PH_START;
	if (write(ready_fd, &c, 1) != 1)
		WFAIL(me, 2, "ready pipe: %s", strerror(errno));
	close(ready_fd);

	for (;;) {
		struct kvpool_space_open so;
		int fd, ret, nheld = 0, i, nb;
		__u32 k;

		me->phase = PH_OPEN;
		fd = kv_open();
		if (fd < 0)
			WFAIL(me, 3, "open: %s", strerror(errno));

		me->phase = PH_JOIN;
		kv_so_init(&so, sh->name[idx], KVPOOL_SPACE_CREATE, BLOCK, QUOTA);
		so.numa_policy = sh->numa_policy;
		ret = kv_space_open(fd, &so);
		if (ret)
			WFAIL(me, 4, "SPACE_OPEN %s: %s", so.name, strerror(-ret));

		me->phase = PH_ALLOC;
		nb = 1 + rnd() % 4;
		for (i = 0; i < nb && nheld < MAX_HELD; i++) {
			__u32 cnt = 1 + rnd() % 12;

			if (cnt > (__u32)(MAX_HELD - nheld))
				cnt = MAX_HELD - nheld;
			ret = kv_alloc(fd, held + nheld, cnt);
			if (ret)
				WFAIL(me, 5, "ALLOC %u: %s", cnt, strerror(-ret));
			nheld += cnt;
			me->allocs += cnt;
		}

		me->phase = PH_MMAP;
		if (mmap(base, QUOTA, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 fd, 0) != base)
			WFAIL(me, 6, "mmap: %s", strerror(errno));
		me->mapped = 1;

		me->phase = PH_TOUCH;
		for (i = 0; i < nheld; i++)
			fill_block(base, pid, held[i]);

		if (sib->mapped && sib->pid > 0) {
			me->phase = PH_GUP_READ;
			gup_read_sibling(me, sib, pid, rnd() % MAX_HELD, gup_buf);
			if (!sh->shared_space) {
				me->phase = PH_GUP_WRITE;
				gup_write_sibling(me, sib, rnd() % MAX_HELD);
			}
		}
		me->phase = PH_GUP_SELF;
		gup_write_self(me, base, pid, held[rnd() % nheld]);

		me->phase = PH_VERIFY;
		for (i = 0; i < nheld; i++) {
			long bad = check_block(base, pid, held[i]);

			if (bad)
				WFAIL(me, 7, "own block %u corrupted at word %ld (pid %u, iteration %lu)",
				      held[i], bad - 1, pid, iter);
		}

		/* FREE a random prefix; close releases the rest. */
		me->phase = PH_FREE;
		k = rnd() % (nheld + 1);
		if (k) {
			ret = kv_free(fd, held, k);
			if (ret)
				WFAIL(me, 8, "FREE %u: %s", k, strerror(-ret));
			me->frees += k;
		}

		/* Sometimes close first: the mapping then keeps the space. */
		if (rnd() & 1) {
			me->phase = PH_CLOSE;
			close(fd);
			fd = -1;
		}
		me->phase = PH_MUNMAP;
		me->mapped = 0;
		if (munmap(base, QUOTA))
			WFAIL(me, 9, "munmap: %s", strerror(errno));
		if (mmap(base, QUOTA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
			 MAP_NORESERVE | MAP_FIXED, -1, 0) != base)
			WFAIL(me, 10, "placeholder: %s", strerror(errno));
		if (fd >= 0) {
			me->phase = PH_CLOSE;
			close(fd);
		}
		me->iters = ++iter;
		if (me->stop_after && iter >= (unsigned long)me->stop_after)
			_exit(0);
	}
}

/* Fork worker @idx; returns its pid once it is about to enter its loop. */
static pid_t start_worker(int idx)
{
	struct slot *s = &sh->w[idx];
	void *base;
	int p[2];
	pid_t pid;
	char c;

	base = mmap(NULL, QUOTA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		    MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return -1;
	/* The child keeps the range; the parent's copy goes after the fork. */
	s->base = (unsigned long)base;
	s->mapped = 0;
	s->phase = PH_START;
	s->err[0] = '\0';
	s->pid = 0;
	if (pipe(p))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		worker(idx, p[1]);
		_exit(99);
	}
	s->pid = pid;
	munmap(base, QUOTA);
	close(p[1]);
	if (read(p[0], &c, 1) != 1) {
		close(p[0]);
		return pid;	/* it died before it got ready; kv_wait says how */
	}
	close(p[0]);
	return pid;
}

/* ---- the campaign -------------------------------------------------------- */

struct totals {
	unsigned long kills, rounds, iters, allocs, frees;
	unsigned long gup_ok, gup_fault, gup_words;
	unsigned long phase[PH_NR];
	unsigned long shared_rounds;
	unsigned long wait_ms_max;
	unsigned long held_rounds;	/* rounds that left held_bytes when reaped */
	unsigned long mid_checks;	/* debugfs checks between the two kills */
};

static void add_slot(struct totals *t, const struct slot *s)
{
	t->iters += s->iters;
	t->allocs += s->allocs;
	t->frees += s->frees;
	t->gup_ok += s->gup_ok;
	t->gup_fault += s->gup_fault;
	t->gup_words += s->gup_words;
}

static void clear_counters(struct slot *s)
{
	s->iters = 0;
	s->gup_ok = 0;
	s->gup_fault = 0;
	s->gup_words = 0;
	s->allocs = 0;
	s->frees = 0;
	s->stop_after = 0;
}

static void setup_round(unsigned long round, int shared)
{
	static const __u32 policies[] = {
		KVPOOL_NUMA_PREFERRED, KVPOOL_NUMA_INTERLEAVE,
	};

	sh->shared_space = shared;
	sh->numa_policy = policies[rnd() % 2];
	snprintf(sh->name[0], KVPOOL_NAME_MAX, "kill-%d-%lu-a", (int)getpid(), round);
	snprintf(sh->name[1], KVPOOL_NAME_MAX, "kill-%d-%lu-%c", (int)getpid(), round,
		 shared ? 'a' : 'b');
	clear_counters(&sh->w[0]);
	clear_counters(&sh->w[1]);
}

FIXTURE(kill) {
	__u64 free0, spaces0, held0;
};

FIXTURE_SETUP(kill)
{
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
	ASSERT_EQ(0, sysfs_u64("held_bytes", &self->held0));
	ASSERT_EQ(0, self->held0);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, sh);
	memset(sh, 0, sizeof(*sh));
}

FIXTURE_TEARDOWN(kill)
{
}

/* Wait until the pool is back where it started; false (and a log) if not. */
static bool back_to_baseline(struct __test_metadata *_metadata,
			     FIXTURE_DATA(kill) *self, struct totals *t,
			     const char *when)
{
	__u64 t0 = kv_now_us(), free_b, spaces, held, ms = 0;
	char ck[512];
	int r;

	/*
	 * The reaped workers' files are closed by now, but a file whose last
	 * reference went to a sibling's GUP is released a little later, and a
	 * chunk whose page a sibling's GUP still pinned when its space died
	 * waits on the held list until the module sees the pin gone
	 * (Documentation/ABI: held_bytes).  Poll up to 3 s.
	 */
	held = sysfs_get("held_bytes");
	if (held)
		t->held_rounds++;
	for (;;) {
		free_b = sysfs_get("free_bytes");
		spaces = sysfs_get("spaces");
		held = sysfs_get("held_bytes");
		if ((free_b == self->free0 && spaces == self->spaces0 && !held) || ms >= 3000)
			break;
		sleep_us(10000);
		ms = (kv_now_us() - t0) / 1000;
	}
	if (ms > t->wait_ms_max)
		t->wait_ms_max = ms;
	r = kv_check(ck, sizeof(ck));
	if (free_b == self->free0 && spaces == self->spaces0 && held == 0 && r == 1)
		return true;
	TH_LOG("%s: free_bytes %llu (want %llu), spaces %llu (want %llu), held_bytes %llu, check: %s",
	       when, (unsigned long long)free_b, (unsigned long long)self->free0,
	       (unsigned long long)spaces, (unsigned long long)self->spaces0,
	       (unsigned long long)held, r < 0 ? strerror(-r) : ck);
	if (read_file("/sys/kernel/debug/kvpool/nodes", ck, sizeof(ck)) > 0)
		TH_LOG("debugfs nodes:\n%s", ck);
	if (read_file("/sys/kernel/debug/kvpool/spaces", ck, sizeof(ck)) > 0)
		TH_LOG("debugfs spaces:\n%s", ck);
	return false;
}

/* After the first kill and reap of a round, while the sibling still runs. */
static bool check_mid_round(struct __test_metadata *_metadata, FIXTURE_DATA(kill) *self,
			    struct totals *t, int shared, unsigned long round, __u64 seed)
{
	__u64 spaces = 0, t0 = kv_now_us();
	char ck[512];
	int r;

	r = kv_check(ck, sizeof(ck));
	t->mid_checks++;
	if (r != 1) {
		TH_LOG("round %lu (seed %llu): debugfs check after the first kill: %s", round,
		       (unsigned long long)seed, r < 0 ? strerror(-r) : ck);
		return false;
	}
	if (shared)
		return true;
	while (kv_now_us() - t0 < 3000000) {
		spaces = sysfs_get("spaces");
		if (spaces <= self->spaces0 + 1)
			return true;
		sleep_us(10000);
	}
	TH_LOG("round %lu (seed %llu): %llu spaces 3 s after the first kill (want <= %llu)",
	       round, (unsigned long long)seed, (unsigned long long)spaces,
	       (unsigned long long)self->spaces0 + 1);
	return false;
}

/* A worker must have died of our SIGKILL; anything else is its report. */
static bool reaped_ok(struct __test_metadata *_metadata, int idx, int st,
		      unsigned long round, __u64 seed)
{
	if (st == 1000 + SIGKILL)
		return true;
	TH_LOG("round %lu (seed %llu): worker %d (%s space) ended with %s %d: %s",
	       round, (unsigned long long)seed, idx,
	       sh->shared_space ? "shared" : "own",
	       st >= 1000 ? "signal" : "status", st >= 1000 ? st - 1000 : st,
	       sh->w[idx].err[0] ? sh->w[idx].err : "(no message)");
	return false;
}

TEST_F_TIMEOUT(kill, sigkill_campaign, 600)
{
	unsigned long want = kv_cmdline_ulong("kvpool_kills", 1000);
	unsigned long limit_s = kv_cmdline_ulong("kvpool_kill_seconds", 280);
	__u64 seed = kv_cmdline_ulong("kvpool_seed", 0);
	struct totals t = { 0 };
	__u64 t_start, iter_us, range_us, elapsed;
	unsigned long round;
	pid_t pid[2];
	int i, st;

	if (!seed)
		seed = kv_now_us() ^ ((__u64)getpid() << 20);
	rng_state = seed;
	say("seed=%llu kills=%lu (kernel command line: kvpool_seed=, kvpool_kills=)\n",
	    (unsigned long long)seed, want);

	/* Calibrate: both workers, 12 iterations each, no kill. */
	setup_round(0, 0);
	sh->w[0].stop_after = 12;
	sh->w[1].stop_after = 12;
	t_start = kv_now_us();
	pid[0] = start_worker(0);
	pid[1] = start_worker(1);
	ASSERT_LT(0, pid[0]);
	ASSERT_LT(0, pid[1]);
	for (i = 0; i < 2; i++) {
		st = kv_wait(pid[i]);
		ASSERT_EQ(0, st) TH_LOG("calibration worker %d: status %d: %s", i, st,
					sh->w[i].err);
	}
	iter_us = (kv_now_us() - t_start) / 12;
	ASSERT_TRUE(back_to_baseline(_metadata, self, &t, "after calibration"));
	range_us = 3 * iter_us;
	if (range_us < 2000)
		range_us = 2000;
	say("calibration: %llu us per iteration with two workers; kill delays in [0, %llu) us\n",
	    (unsigned long long)iter_us, (unsigned long long)range_us);

	t_start = kv_now_us();
	for (round = 1; t.kills < want; round++) {
		int victim = rnd() & 1, shared = rnd() & 1;

		setup_round(round, shared);
		t.shared_rounds += shared;
		pid[0] = start_worker(0);
		pid[1] = start_worker(1);
		ASSERT_LT(0, pid[0]);
		ASSERT_LT(0, pid[1]);

		sleep_us(rnd() % range_us);
		t.phase[sh->w[victim].phase < PH_NR ? sh->w[victim].phase : 0]++;
		ASSERT_EQ(0, kill(pid[victim], SIGKILL));
		t.kills++;
		/*
		 * Reap the victim while its sibling goes on: the accounting
		 * must add up at once, and with separate spaces the victim's
		 * space must go (a sibling's GUP may hold its mm, and so its
		 * file, a moment longer).
		 */
		st = kv_wait(pid[victim]);
		ASSERT_TRUE(reaped_ok(_metadata, victim, st, round, seed));
		ASSERT_TRUE(check_mid_round(_metadata, self, &t, shared, round, seed));
		sleep_us(rnd() % range_us);
		t.phase[sh->w[!victim].phase < PH_NR ? sh->w[!victim].phase : 0]++;
		ASSERT_EQ(0, kill(pid[!victim], SIGKILL));
		t.kills++;
		st = kv_wait(pid[!victim]);
		ASSERT_TRUE(reaped_ok(_metadata, !victim, st, round, seed));
		add_slot(&t, &sh->w[0]);
		add_slot(&t, &sh->w[1]);
		t.rounds++;
		if (!back_to_baseline(_metadata, self, &t, "after a round")) {
			TH_LOG("round %lu, seed %llu, %s space, policy %u, kills so far %lu",
			       round, (unsigned long long)seed,
			       shared ? "shared" : "own", sh->numa_policy, t.kills);
			ASSERT_TRUE(false);
		}
		elapsed = (kv_now_us() - t_start) / 1000000;
		ASSERT_GE(limit_s, elapsed)
			TH_LOG("%lu kills took %llu s, over kvpool_kill_seconds=%lu",
			       t.kills, (unsigned long long)elapsed, limit_s);
	}
	elapsed = kv_now_us() - t_start;

	say("seed=%llu kills=%lu rounds=%lu (shared space %lu, own spaces %lu) time=%llu.%03llus\n",
	    (unsigned long long)seed, t.kills, t.rounds, t.shared_rounds,
	    t.rounds - t.shared_rounds,
	    (unsigned long long)(elapsed / 1000000),
	    (unsigned long long)(elapsed / 1000 % 1000));
	say("worker iterations completed=%lu blocks allocated=%lu freed by FREE=%lu\n",
	    t.iters, t.allocs, t.frees);
	say("GUP calls ok=%lu efault/esrch=%lu words checked=%lu; slowest return to baseline %lu ms; %lu debugfs checks between the kills of a round, all ok\n",
	    t.gup_ok, t.gup_fault, t.gup_words, t.wait_ms_max, t.mid_checks);
	say("rounds with held_bytes > 0 right after both workers were reaped (a sibling's GUP pin outlived a space): %lu\n",
	    t.held_rounds);
	say("kills by the phase the worker had announced:\n");
	for (i = 0; i < PH_NR; i++)
		if (t.phase[i])
			say("  %-10s %lu\n", phase_names[i], t.phase[i]);
}

/* ---- the prefix campaign -------------------------------------------------- */

#define PBLOCK		(16 * KiB)
#define PNBLOCKS	64
#define PQUOTA		(PNBLOCKS * PBLOCK)
#define PUNIV		96
#define PWORKERS	3
#define P_MAX_OWN	4
#define P_MAX_REFS	12
#define P_STRIDE	64	/* content words written and checked: one per 512 bytes */

enum pphase {
	PP_START, PP_OPEN, PP_JOIN, PP_MMAP, PP_ALLOC, PP_WRITE, PP_PUBLISH, PP_LOOKUP,
	PP_VERIFY, PP_RELEASE, PP_EVENTS, PP_FREE, PP_RELEASE_ALL, PP_CLOSE, PP_NR
};

static const char *const pphase_names[PP_NR] = {
	"start", "open", "join", "mmap", "alloc", "write", "publish", "lookup",
	"verify", "release", "events", "free", "release_all", "close",
};

struct pslot {
	volatile int pid;
	volatile int phase;
	volatile int stop_after;
	volatile unsigned long iters, publishes, dedups, hits, releases, events;
	char err[200];
};

struct pshared {
	struct pslot w[PWORKERS];
	char name[KVPOOL_NAME_MAX];
	__u64 tag;
};

static struct pshared *psh;

static void pworker(int idx, int ready_fd)
{
	struct pslot *me = &psh->w[idx];
	static __u8 hashes[PUNIV][KVPOOL_HASH_BYTES];
	__u32 refs[P_MAX_REFS], refh[P_MAX_REFS], own[P_MAX_OWN];
	unsigned long iter = 0;
	char c = 'r';
	int i;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rng_state ^= (__u64)getpid() * 0x9E3779B97F4A7C15ULL;
	for (i = 0; i < PUNIV; i++)
		px_hash(hashes[i], psh->tag, i);
	me->phase = PP_START;
	if (write(ready_fd, &c, 1) != 1)
		WFAIL(me, 2, "ready pipe: %s", strerror(errno));
	close(ready_fd);

	for (;;) {
		struct kvpool_publish_entry e[P_MAX_OWN];
		struct kvpool_event ev[32];
		struct kvpool_space_open so;
		int fd, ret, nrefs = 0, nown, k, rounds;
		char *map;
		__u32 nd;

		me->phase = PP_OPEN;
		fd = open(KV_DEV, O_RDWR | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			WFAIL(me, 3, "open: %s", strerror(errno));
		me->phase = PP_JOIN;
		ret = kv_join(fd, psh->name, &so);
		if (ret)
			WFAIL(me, 4, "join %s: %s", psh->name, strerror(-ret));
		me->phase = PP_MMAP;
		map = kv_mmap(fd, so.map_bytes, 0);
		if (map == MAP_FAILED)
			WFAIL(me, 5, "mmap: %s", strerror(errno));

		rounds = 1 + rnd() % 6;
		for (k = 0; k < rounds; k++) {
			__u8 lh[8][KVPOOL_HASH_BYTES];
			__u32 lids[8], start, len, hn[P_MAX_OWN];

			me->phase = PP_ALLOC;
			nown = 1 + rnd() % P_MAX_OWN;
			if (nrefs + nown > P_MAX_REFS)
				nown = P_MAX_REFS - nrefs;
			if (nown > 0) {
				ret = kv_alloc(fd, own, nown);
				if (ret)
					WFAIL(me, 6, "ALLOC %d (holding %d refs): %s", nown, nrefs,
					      strerror(-ret));
				me->phase = PP_WRITE;
				for (i = 0; i < nown; i++) {
					hn[i] = rnd() % PUNIV;
					px_fill_hash_stride(map + (size_t)own[i] * PBLOCK, PBLOCK,
							    hashes[hn[i]], P_STRIDE);
					px_entry(&e[i], own[i], hashes[hn[i]], 0);
				}
				me->phase = PP_PUBLISH;
				ret = px_publish(fd, e, nown, 0, &nd);
				if (ret)
					WFAIL(me, 7, "PUBLISH %d: %s", nown, strerror(-ret));
				me->publishes += nown;
				me->dedups += nd;
				for (i = 0; i < nown; i++) {
					refs[nrefs] = e[i].id;
					refh[nrefs++] = hn[i];
				}
			}

			me->phase = PP_LOOKUP;
			len = 1 + rnd() % 8;
			if (nrefs + (int)len > P_MAX_REFS)
				len = P_MAX_REFS - nrefs;
			if (len > 0) {
				start = rnd() % PUNIV;
				for (i = 0; i < (int)len; i++)
					memcpy(lh[i], hashes[(start + i) % PUNIV], KVPOOL_HASH_BYTES);
				ret = px_lookup(fd, (const __u8 (*)[KVPOOL_HASH_BYTES])lh, len, lids, NULL);
				if (ret < 0)
					WFAIL(me, 8, "LOOKUP %u: %s", len, strerror(-ret));
				me->hits += ret;
				for (i = 0; i < ret; i++) {
					refs[nrefs] = lids[i];
					refh[nrefs++] = (start + i) % PUNIV;
				}
			}

			me->phase = PP_VERIFY;
			for (i = 0; i < nrefs; i++) {
				long bad = px_check_hash(map + (size_t)refs[i] * PBLOCK, PBLOCK,
							 hashes[refh[i]], P_STRIDE);

				if (bad >= 0)
					WFAIL(me, 9, "block %u referenced under hash %u: word %ld wrong",
					      refs[i], refh[i], bad);
			}

			me->phase = PP_RELEASE;
			while (nrefs > P_MAX_REFS / 2 || (nrefs && (rnd() & 1))) {
				int j = rnd() % nrefs;

				ret = px_release1(fd, refs[j]);
				if (ret)
					WFAIL(me, 10, "RELEASE %u: %s", refs[j], strerror(-ret));
				me->releases++;
				nrefs--;
				refs[j] = refs[nrefs];
				refh[j] = refh[nrefs];
			}
		}

		me->phase = PP_EVENTS;
		while ((ret = px_read_events(fd, ev, 32)) > 0)
			me->events += ret;
		if (ret != -EAGAIN)
			WFAIL(me, 11, "read events: %s", ret ? strerror(-ret) : "0");

		me->phase = PP_FREE;
		ret = kv_alloc(fd, own, 2);
		if (ret)
			WFAIL(me, 12, "ALLOC 2: %s", strerror(-ret));
		ret = kv_free(fd, own, 2);
		if (ret)
			WFAIL(me, 13, "FREE 2: %s", strerror(-ret));

		if (rnd() & 1) {
			me->phase = PP_RELEASE_ALL;
			if (nrefs && (ret = px_release(fd, refs, nrefs)))
				WFAIL(me, 14, "RELEASE %d: %s", nrefs, strerror(-ret));
		}
		me->phase = PP_CLOSE;
		munmap(map, so.map_bytes);
		close(fd);
		me->iters = ++iter;
		if (me->stop_after && iter >= (unsigned long)me->stop_after)
			_exit(0);
	}
}

static pid_t start_pworker(int idx)
{
	struct pslot *s = &psh->w[idx];
	int p[2];
	pid_t pid;
	char c;

	s->phase = PP_START;
	s->err[0] = '\0';
	s->pid = 0;
	if (pipe(p))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		pworker(idx, p[1]);
		_exit(99);
	}
	s->pid = pid;
	close(p[1]);
	if (read(p[0], &c, 1) != 1) {
		close(p[0]);
		return pid;
	}
	close(p[0]);
	return pid;
}

struct ptotals {
	unsigned long kills, rounds, iters, publishes, dedups, hits, releases, events;
	unsigned long phase[PP_NR];
	unsigned long cached_checked, evictions;
};

static void padd_slot(struct ptotals *t, struct pslot *s)
{
	t->iters += s->iters;
	t->publishes += s->publishes;
	t->dedups += s->dedups;
	t->hits += s->hits;
	t->releases += s->releases;
	t->events += s->events;
	s->iters = s->publishes = s->dedups = s->hits = s->releases = s->events = 0;
	s->stop_after = 0;
}

/*
 * After every worker of the round is dead: nothing held, the figures add
 * up, and every cached hash still holds its content.
 */
static bool holder_clean(struct __test_metadata *_metadata, int fd, char *map,
			 struct ptotals *t, unsigned long round, __u64 seed)
{
	struct kvpool_space_stats st;
	struct kvpool_space_info si;
	__u64 cached = 0;
	int i, ret;

	if (px_stats(fd, &st) || kv_space_info(fd, &si)) {
		TH_LOG("round %lu: SPACE_STATS/SPACE_INFO failed", round);
		return false;
	}
	t->evictions += st.evictions[KVPOOL_EVICT_QUOTA];
	if (st.readers || st.my_refs || st.published_blocks || si.owned_blocks ||
	    si.free_blocks + st.cached_blocks + st.hole_blocks != si.backed_blocks) {
		TH_LOG("round %lu (seed %llu): after the kills readers=%llu published=%llu owned=%llu free=%llu cached=%llu holes=%llu backed=%llu",
		       round, (unsigned long long)seed, (unsigned long long)st.readers,
		       (unsigned long long)st.published_blocks,
		       (unsigned long long)si.owned_blocks, (unsigned long long)si.free_blocks,
		       (unsigned long long)st.cached_blocks, (unsigned long long)st.hole_blocks,
		       (unsigned long long)si.backed_blocks);
		return false;
	}
	for (i = 0; i < PUNIV; i++) {
		__u8 h[KVPOOL_HASH_BYTES];
		__u32 id;
		long bad;

		px_hash(h, psh->tag, i);
		ret = px_lookup1(fd, h, &id);
		if (ret < 0) {
			TH_LOG("round %lu: LOOKUP: %s", round, strerror(-ret));
			return false;
		}
		if (!ret)
			continue;
		cached++;
		bad = px_check_hash(map + (size_t)id * PBLOCK, PBLOCK, h, P_STRIDE);
		if (px_release1(fd, id) || bad >= 0) {
			TH_LOG("round %lu (seed %llu): cached block %u of hash %d: word %ld wrong",
			       round, (unsigned long long)seed, id, i, bad);
			return false;
		}
	}
	t->cached_checked += cached;
	if (cached != st.cached_blocks) {
		TH_LOG("round %lu: %llu hashes cached, SPACE_STATS says %llu cached blocks", round,
		       (unsigned long long)cached, (unsigned long long)st.cached_blocks);
		return false;
	}
	return true;
}

static bool preaped_ok(struct __test_metadata *_metadata, int idx, int st,
		       unsigned long round, __u64 seed)
{
	if (st == 1000 + SIGKILL)
		return true;
	TH_LOG("round %lu (seed %llu): prefix worker %d ended with %s %d: %s",
	       round, (unsigned long long)seed, idx,
	       st >= 1000 ? "signal" : "status", st >= 1000 ? st - 1000 : st,
	       psh->w[idx].err[0] ? psh->w[idx].err : "(no message)");
	return false;
}

TEST_F_TIMEOUT(kill, prefix_sigkill_campaign, 600)
{
	unsigned long want = kv_cmdline_ulong("kvpool_prefix_kills", 600);
	unsigned long limit_s = kv_cmdline_ulong("kvpool_kill_seconds", 280);
	__u64 seed = kv_cmdline_ulong("kvpool_seed", 0);
	struct ptotals t = { 0 };
	struct totals bt = { 0 };
	__u64 t_start, iter_us, range_us, elapsed;
	unsigned long round;
	pid_t pid[PWORKERS];
	int i, st, fd, order[PWORKERS];
	char *map, ck[512];

	psh = mmap(NULL, sizeof(*psh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, psh);
	memset(psh, 0, sizeof(*psh));
	if (!seed)
		seed = kv_now_us() ^ ((__u64)getpid() << 20);
	rng_state = seed;
	say("seed=%llu prefix kills=%lu (kernel command line: kvpool_seed=, kvpool_prefix_kills=)\n",
	    (unsigned long long)seed, want);

	/* Calibrate: three workers, 8 iterations each, no kill. */
	psh->tag = seed;
	snprintf(psh->name, KVPOOL_NAME_MAX, "pkill-%d-0", (int)getpid());
	fd = kv_open_create(psh->name, PBLOCK, PQUOTA, NULL);
	ASSERT_LE(0, fd);
	map = kv_mmap(fd, PQUOTA, 0);
	ASSERT_NE(MAP_FAILED, map);
	t_start = kv_now_us();
	for (i = 0; i < PWORKERS; i++) {
		psh->w[i].stop_after = 8;
		pid[i] = start_pworker(i);
		ASSERT_LT(0, pid[i]);
	}
	for (i = 0; i < PWORKERS; i++) {
		st = kv_wait(pid[i]);
		ASSERT_EQ(0, st) TH_LOG("calibration worker %d: status %d: %s", i, st, psh->w[i].err);
	}
	iter_us = (kv_now_us() - t_start) / 8;
	ASSERT_TRUE(holder_clean(_metadata, fd, map, &t, 0, seed));
	for (i = 0; i < PWORKERS; i++)
		padd_slot(&t, &psh->w[i]);
	munmap(map, PQUOTA);
	close(fd);
	ASSERT_TRUE(back_to_baseline(_metadata, self, &bt, "after the prefix calibration"));
	range_us = 3 * iter_us;
	if (range_us < 2000)
		range_us = 2000;
	say("calibration: %llu us per iteration with three workers; kill delays in [0, %llu) us\n",
	    (unsigned long long)iter_us, (unsigned long long)range_us);

	t_start = kv_now_us();
	for (round = 1; t.kills < want; round++) {
		psh->tag = seed ^ round;
		snprintf(psh->name, KVPOOL_NAME_MAX, "pkill-%d-%lu", (int)getpid(), round);
		fd = kv_open_create(psh->name, PBLOCK, PQUOTA, NULL);
		ASSERT_LE(0, fd);
		map = kv_mmap(fd, PQUOTA, 0);
		ASSERT_NE(MAP_FAILED, map);
		for (i = 0; i < PWORKERS; i++) {
			pid[i] = start_pworker(i);
			ASSERT_LT(0, pid[i]);
			order[i] = i;
		}
		for (i = PWORKERS - 1; i > 0; i--) {
			int j = rnd() % (i + 1), x = order[i];

			order[i] = order[j];
			order[j] = x;
		}
		for (i = 0; i < PWORKERS; i++) {
			int v = order[i], r;

			sleep_us(rnd() % range_us);
			t.phase[psh->w[v].phase < PP_NR ? psh->w[v].phase : 0]++;
			ASSERT_EQ(0, kill(pid[v], SIGKILL));
			t.kills++;
			st = kv_wait(pid[v]);
			ASSERT_TRUE(preaped_ok(_metadata, v, st, round, seed));
			r = kv_check(ck, sizeof(ck));
			ASSERT_EQ(1, r) TH_LOG("round %lu (seed %llu): debugfs check after killing worker %d in %s: %s",
					       round, (unsigned long long)seed, v,
					       pphase_names[psh->w[v].phase < PP_NR ? psh->w[v].phase : 0],
					       r < 0 ? strerror(-r) : ck);
		}
		for (i = 0; i < PWORKERS; i++)
			padd_slot(&t, &psh->w[i]);
		ASSERT_TRUE(holder_clean(_metadata, fd, map, &t, round, seed));
		munmap(map, PQUOTA);
		close(fd);
		t.rounds++;
		if (!back_to_baseline(_metadata, self, &bt, "after a prefix round")) {
			TH_LOG("round %lu, seed %llu, kills so far %lu", round,
			       (unsigned long long)seed, t.kills);
			ASSERT_TRUE(false);
		}
		elapsed = (kv_now_us() - t_start) / 1000000;
		ASSERT_GE(limit_s, elapsed)
			TH_LOG("%lu kills took %llu s, over kvpool_kill_seconds=%lu",
			       t.kills, (unsigned long long)elapsed, limit_s);
	}
	elapsed = kv_now_us() - t_start;
	say("seed=%llu prefix kills=%lu rounds=%lu time=%llu.%03llus\n",
	    (unsigned long long)seed, t.kills, t.rounds,
	    (unsigned long long)(elapsed / 1000000),
	    (unsigned long long)(elapsed / 1000 % 1000));
	say("worker iterations completed=%lu blocks published=%lu (dedup %lu) lookup hits=%lu releases=%lu events read=%lu\n",
	    t.iters, t.publishes, t.dedups, t.hits, t.releases, t.events);
	say("quota evictions seen by the holders=%lu cached blocks checked after the kills=%lu; slowest return to baseline %lu ms\n",
	    t.evictions, t.cached_checked, bt.wait_ms_max);
	say("kills by the phase the worker had announced:\n");
	for (i = 0; i < PP_NR; i++)
		if (t.phase[i])
			say("  %-12s %lu\n", pphase_names[i], t.phase[i]);
}

TEST_HARNESS_MAIN
