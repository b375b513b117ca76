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
 * Kernel command line (all optional):
 *   kvpool_kills=N          kills in total, two per round (default 1000)
 *   kvpool_seed=S           PRNG seed (default: time and pid); printed
 *   kvpool_kill_seconds=T   fail if the campaign needs longer (default 280)
 */
#include "kvpool_util.h"

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

TEST_HARNESS_MAIN
