// SPDX-License-Identifier: GPL-2.0
/*
 * prefix_stress_test: 6 processes share one small space for a bounded time
 * and hammer the prefix cache: ALLOC, write and verify owned blocks,
 * PUBLISH (publishers write the content derived from the hash first, so
 * every block published under a hash holds that content), LOOKUP of
 * random runs of a 256-hash universe, RELEASE, FREE, and reading the event
 * stream.  The quota (128 blocks of 16 KiB) is far below the universe, so
 * blocks are evicted all the time.
 *
 * Checked while it runs, by every process:
 *   - a block this process holds a reference on keeps the content of its
 *     hash from the LOOKUP/PUBLISH that gave the reference to its RELEASE
 *     (an evicted or reused referenced block shows up here);
 *   - owned blocks keep what their owner wrote;
 *   - PUBLISH of a hash that is present returns DEDUP and that block;
 *     LOOKUP hits carry their hash's content; FREE of a referenced block
 *     is EPERM;
 *   - ALLOC never fails: holdings are capped so that free + cached always
 *     covers a request (an ENOSPC would mean a leaked block);
 *   - events: seq 1, 2, ... without gaps (an OVERFLOW's count fills its
 *     gap), EVICTED only for hashes this process published or looked up;
 * and by the parent every 500 ms: debugfs check "ok".  At the end every
 * process verifies everything; half of them release explicitly, the
 * others just exit; then SPACE_STATS must show no readers, no published
 * blocks, no owned blocks, many evictions, and the accounting check ok.
 *
 * Kernel command line: kvpool_prefix_stress_seconds=N (default 20),
 * kvpool_seed=S.
 */
#include "kvpool_prefix_util.h"

#define NPROC		6
#define BLOCK		(16 * KiB)
#define NBLOCKS		128
#define QUOTA		(NBLOCKS * BLOCK)
#define UNIVERSE	256
#define MAX_OWN		6
#define MAX_REFS	10
#define WORDS		(BLOCK / 8)

enum op {
	OP_ALLOC, OP_REWRITE, OP_PUBLISH, OP_LOOKUP, OP_RELEASE, OP_FREE, OP_VERIFY,
	OP_EVENTS, OP_EPERM, OP_NR
};

static const char *const op_names[OP_NR] = {
	"alloc", "rewrite", "publish", "lookup", "release", "free", "verify", "events", "free_eperm",
};

/* Op i is drawn when a draw of 100 is below op_below[i] (and no earlier op's bound). */
static const unsigned int op_below[OP_NR] = {
	[OP_ALLOC] = 18, [OP_REWRITE] = 24, [OP_PUBLISH] = 44, [OP_LOOKUP] = 68,
	[OP_RELEASE] = 82, [OP_FREE] = 88, [OP_VERIFY] = 92, [OP_EVENTS] = 98, [OP_EPERM] = 100,
};

struct pstat {
	volatile unsigned long ops[OP_NR];
	volatile unsigned long hits, misses, dedups, inserts, evicted_events, pressure_events;
	volatile unsigned long overflows, words;
	volatile int done;
	char err[400];
};

struct shared {
	volatile int stop;
	char name[KVPOOL_NAME_MAX];
	__u64 tag;
	struct pstat p[NPROC];
};

static struct shared *sh;

#define say(...) do { ksft_print_msg(__VA_ARGS__); fflush(stdout); } while (0)

static __u64 rng_state;

static __u64 rnd(void)
{
	return kv_splitmix64(&rng_state);
}

struct ref {
	__u32 id;
	__u32 hn;	/* hash number in the universe */
};

struct proc {
	struct pstat *st;
	int idx, fd;
	char *map;
	__u32 own[MAX_OWN], own_gen[MAX_OWN];
	int nown;
	struct ref refs[MAX_REFS];
	int nrefs;
	__u64 next_seq;
	__u8 touched[UNIVERSE];
	__u32 gen;
	__u8 hashes[UNIVERSE][KVPOOL_HASH_BYTES];
};

#define PFAIL(P, ...) do { \
	snprintf((P)->st->err, sizeof((P)->st->err), __VA_ARGS__); \
	_exit(1); \
} while (0)

static char *blk(struct proc *p, __u32 id)
{
	return p->map + (size_t)id * BLOCK;
}

static unsigned int own_seed(struct proc *p, int i)
{
	return (unsigned int)(p->idx + 1) * 100003u + p->own_gen[i];
}

static void own_write(struct proc *p, int i)
{
	p->own_gen[i] = ++p->gen;
	kv_fill(blk(p, p->own[i]), BLOCK, own_seed(p, i), 0);
}

static void own_verify(struct proc *p, int i, const char *when)
{
	long bad = kv_verify(blk(p, p->own[i]), BLOCK, own_seed(p, i), 0);

	if (bad >= 0)
		PFAIL(p, "proc %d: owned block %u (%s) changed at byte %ld", p->idx, p->own[i],
		      when, bad);
	p->st->words += WORDS;
}

static void ref_verify(struct proc *p, __u32 id, __u32 hn, const char *when)
{
	long bad = px_check_hash(blk(p, id), BLOCK, p->hashes[hn], 1);

	if (bad >= 0)
		PFAIL(p, "proc %d: block %u referenced under hash %u (%s): word %ld is %#llx, want %#llx",
		      p->idx, id, hn, when, bad,
		      (unsigned long long)((__u64 *)blk(p, id))[bad],
		      (unsigned long long)px_hash_word(p->hashes[hn], bad));
	p->st->words += WORDS;
}

static void drop_own(struct proc *p, int i)
{
	p->nown--;
	p->own[i] = p->own[p->nown];
	p->own_gen[i] = p->own_gen[p->nown];
}

static void release_ref(struct proc *p, int i)
{
	int ret;

	ref_verify(p, p->refs[i].id, p->refs[i].hn, "before RELEASE");
	ret = px_release1(p->fd, p->refs[i].id);
	if (ret)
		PFAIL(p, "proc %d: RELEASE %u: %s", p->idx, p->refs[i].id, strerror(-ret));
	p->nrefs--;
	p->refs[i] = p->refs[p->nrefs];
}

static void add_ref(struct proc *p, __u32 id, __u32 hn, const char *how)
{
	ref_verify(p, id, hn, how);
	p->refs[p->nrefs].id = id;
	p->refs[p->nrefs].hn = hn;
	p->nrefs++;
	/* Cap the holdings: release a random one (maybe this one) at once. */
	if (p->nrefs > MAX_REFS - 2)
		release_ref(p, rnd() % p->nrefs);
}

static void op_alloc(struct proc *p)
{
	__u32 cnt = 1 + rnd() % 3, ids[3], i;
	int ret;

	if (p->nown + (int)cnt > MAX_OWN)
		return;
	ret = kv_alloc(p->fd, ids, cnt);
	if (ret)
		PFAIL(p, "proc %d: ALLOC %u (holding %d owned, %d refs): %s", p->idx, cnt,
		      p->nown, p->nrefs, strerror(-ret));
	for (i = 0; i < cnt; i++) {
		if (ids[i] >= NBLOCKS)
			PFAIL(p, "proc %d: ALLOC gave id %u", p->idx, ids[i]);
		p->own[p->nown] = ids[i];
		own_write(p, p->nown);
		p->nown++;
	}
}

static void op_publish(struct proc *p)
{
	struct kvpool_publish_entry e[2];
	__u32 n, i, nd, flags = 0, hn[2];
	int ret, slot[2];

	if (!p->nown || p->nrefs + 2 > MAX_REFS)
		return;
	n = p->nown >= 2 && (rnd() & 3) == 0 ? 2 : 1;
	for (i = 0; i < n; i++) {
		slot[i] = i == 0 ? (int)(rnd() % p->nown) : (slot[0] + 1) % p->nown;
		own_verify(p, slot[i], "before PUBLISH");
		/* Sometimes the same hash twice in one batch: the second dedups. */
		hn[i] = i == 1 && (rnd() & 1) ? hn[0] : rnd() % UNIVERSE;
		px_fill_hash(blk(p, p->own[slot[i]]), BLOCK, p->hashes[hn[i]]);
		px_entry(&e[i], p->own[slot[i]], p->hashes[hn[i]], 0);
	}
	if (rnd() & 1) {
		flags = KVPOOL_PUBLISH_PRIORITY;
		for (i = 0; i < n; i++)
			e[i].priority = rnd() % (KVPOOL_PRIO_MAX + 1);
	}
	ret = px_publish(p->fd, e, n, flags, &nd);
	if (ret)
		PFAIL(p, "proc %d: PUBLISH %u: %s", p->idx, n, strerror(-ret));
	for (i = 0; i < n; i++) {
		__u32 mine = p->own[slot[i]];

		p->touched[hn[i]] = 1;
		if (e[i].flags & KVPOOL_PUBLISHED_DEDUP) {
			if (e[i].id == mine)
				PFAIL(p, "proc %d: DEDUP of hash %u kept our block %u", p->idx,
				      hn[i], mine);
			p->st->dedups++;
		} else {
			if (e[i].flags || e[i].id != mine)
				PFAIL(p, "proc %d: PUBLISH of a new hash %u: id %u -> %u flags %#x",
				      p->idx, hn[i], mine, e[i].id, e[i].flags);
			p->st->inserts++;
		}
	}
	if (n == 2 && hn[0] == hn[1] && !(e[1].flags & KVPOOL_PUBLISHED_DEDUP))
		PFAIL(p, "proc %d: the second of two entries with hash %u was no DEDUP", p->idx,
		      hn[0]);
	/* Our blocks are published or freed now: no longer owned (higher slot first). */
	if (n == 2 && slot[1] > slot[0]) {
		drop_own(p, slot[1]);
		drop_own(p, slot[0]);
	} else {
		drop_own(p, slot[0]);
		if (n == 2)
			drop_own(p, slot[1]);
	}
	for (i = 0; i < n; i++)
		add_ref(p, e[i].id, hn[i], "after PUBLISH");
}

static void op_lookup(struct proc *p)
{
	__u8 h[6][KVPOOL_HASH_BYTES];
	__u32 len = 1 + rnd() % 6, start = rnd() % UNIVERSE, ids[6], hns[6], i;
	int hits;

	if (p->nrefs + (int)len > MAX_REFS + 4)
		return;
	for (i = 0; i < len; i++) {
		hns[i] = (start + i) % UNIVERSE;
		memcpy(h[i], p->hashes[hns[i]], KVPOOL_HASH_BYTES);
	}
	hits = px_lookup(p->fd, (const __u8 (*)[KVPOOL_HASH_BYTES])h, len, ids, NULL);
	if (hits < 0)
		PFAIL(p, "proc %d: LOOKUP %u: %s", p->idx, len, strerror(-hits));
	if ((__u32)hits > len)
		PFAIL(p, "proc %d: LOOKUP of %u gave %d hits", p->idx, len, hits);
	p->st->hits += hits;
	p->st->misses += len - hits;
	for (i = 0; i < (__u32)hits; i++) {
		if (ids[i] >= NBLOCKS)
			PFAIL(p, "proc %d: LOOKUP hit id %u", p->idx, ids[i]);
		p->touched[hns[i]] = 1;
		/* Hold at most MAX_REFS: verify and release the rest at once. */
		if (p->nrefs < MAX_REFS) {
			add_ref(p, ids[i], hns[i], "LOOKUP hit");
		} else {
			int ret;

			ref_verify(p, ids[i], hns[i], "LOOKUP hit");
			ret = px_release1(p->fd, ids[i]);
			if (ret)
				PFAIL(p, "proc %d: RELEASE of a hit %u: %s", p->idx, ids[i],
				      strerror(-ret));
		}
	}
}

static void op_events(struct proc *p)
{
	struct kvpool_event ev[64];
	char s[200];
	int n, i;

	for (;;) {
		n = px_read_events(p->fd, ev, 64);
		if (n == -EAGAIN)
			return;
		if (n <= 0)
			PFAIL(p, "proc %d: read events: %s", p->idx, n ? strerror(-n) : "0");
		for (i = 0; i < n; i++) {
			px_event_str(s, sizeof(s), &ev[i]);
			if (ev[i].type == KVPOOL_EVENT_OVERFLOW) {
				/* Its own seq or none: see events_test. */
				if (ev[i].seq == p->next_seq + ev[i].count)
					p->next_seq = ev[i].seq + 1;
				else
					p->next_seq += ev[i].count;
				p->st->overflows++;
				continue;
			}
			if (ev[i].seq != p->next_seq)
				PFAIL(p, "proc %d: event seq %llu, want %llu: %s", p->idx,
				      (unsigned long long)ev[i].seq,
				      (unsigned long long)p->next_seq, s);
			p->next_seq++;
			if (ev[i].type == KVPOOL_EVENT_QUOTA_PRESSURE) {
				p->st->pressure_events++;
				continue;
			}
			if (ev[i].type != KVPOOL_EVENT_EVICTED)
				PFAIL(p, "proc %d: unexpected event %s", p->idx, s);
			{
				__u32 hn;

				memcpy(&hn, ev[i].hash, 4);
				if (hn >= UNIVERSE ||
				    memcmp(ev[i].hash, p->hashes[hn], KVPOOL_HASH_BYTES) ||
				    !p->touched[hn])
					PFAIL(p, "proc %d: EVICTED for a hash it never published or looked up: %s",
					      p->idx, s);
				if (ev[i].cause != KVPOOL_EVICT_QUOTA || ev[i].block >= NBLOCKS)
					PFAIL(p, "proc %d: bad EVICTED event: %s", p->idx, s);
			}
			p->st->evicted_events++;
		}
	}
}

static void verify_all(struct proc *p)
{
	int i;

	for (i = 0; i < p->nown; i++)
		own_verify(p, i, "verify");
	for (i = 0; i < p->nrefs; i++)
		ref_verify(p, p->refs[i].id, p->refs[i].hn, "verify");
}

static void stress_proc(int idx, __u64 seed)
{
	static struct proc P;
	struct proc *p = &P;
	struct kvpool_space_open so;
	int i, ret;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	memset(p, 0, sizeof(*p));
	p->st = &sh->p[idx];
	p->idx = idx;
	p->next_seq = 1;
	rng_state = seed ^ ((__u64)(idx + 1) * 0x9E3779B97F4A7C15ULL);
	for (i = 0; i < UNIVERSE; i++)
		px_hash(p->hashes[i], sh->tag, i);
	p->fd = open(KV_DEV, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (p->fd < 0)
		PFAIL(p, "open: %s", strerror(errno));
	ret = kv_join(p->fd, sh->name, &so);
	if (ret)
		PFAIL(p, "join: %s", strerror(-ret));
	p->map = kv_mmap(p->fd, so.map_bytes, 0);
	if (p->map == MAP_FAILED)
		PFAIL(p, "mmap: %s", strerror(errno));

	while (!sh->stop) {
		unsigned int r = rnd() % 100;
		enum op op = OP_ALLOC;

		while (r >= op_below[op])
			op++;

		switch (op) {
		case OP_ALLOC:
			op_alloc(p);
			break;
		case OP_REWRITE:
			if (p->nown) {
				i = rnd() % p->nown;
				own_verify(p, i, "before rewrite");
				own_write(p, i);
			}
			break;
		case OP_PUBLISH:
			op_publish(p);
			break;
		case OP_LOOKUP:
			op_lookup(p);
			break;
		case OP_RELEASE:
			if (p->nrefs)
				release_ref(p, rnd() % p->nrefs);
			break;
		case OP_FREE:
			if (p->nown) {
				i = rnd() % p->nown;
				own_verify(p, i, "before FREE");
				ret = kv_free(p->fd, &p->own[i], 1);
				if (ret)
					PFAIL(p, "proc %d: FREE %u: %s", idx, p->own[i],
					      strerror(-ret));
				drop_own(p, i);
			}
			break;
		case OP_VERIFY:
			verify_all(p);
			break;
		case OP_EVENTS:
			op_events(p);
			break;
		case OP_EPERM:
			if (p->nrefs) {
				__u32 id = p->refs[rnd() % p->nrefs].id;

				ret = kv_free(p->fd, &id, 1);
				if (ret != -EPERM)
					PFAIL(p, "proc %d: FREE of referenced block %u: %s, want EPERM",
					      idx, id, ret ? strerror(-ret) : "success");
			}
			break;
		case OP_NR:
			break;
		}
		p->st->ops[op]++;
	}
	verify_all(p);
	op_events(p);
	if (idx & 1) {
		while (p->nrefs)
			release_ref(p, 0);
		if (p->nown && (ret = kv_free(p->fd, p->own, p->nown)))
			PFAIL(p, "proc %d: final FREE: %s", idx, strerror(-ret));
	}
	p->st->done = 1;
	_exit(0);
}

FIXTURE(pstress) {
	__u64 free0, spaces0;
};

FIXTURE_SETUP(pstress)
{
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, sh);
	memset(sh, 0, sizeof(*sh));
}

FIXTURE_TEARDOWN(pstress)
{
}

TEST_F_TIMEOUT(pstress, six_procs_one_small_space, 600)
{
	unsigned long secs = kv_cmdline_ulong("kvpool_prefix_stress_seconds", 20);
	__u64 seed = kv_cmdline_ulong("kvpool_seed", 0);
	unsigned long ops[OP_NR] = { 0 }, total = 0, checks = 0;
	unsigned long hits = 0, misses = 0, dedups = 0, inserts = 0, evev = 0, qpev = 0, ovf = 0;
	unsigned long words = 0;
	struct kvpool_space_stats s0, s1;
	struct kvpool_space_info si;
	pid_t pids[NPROC];
	__u64 t0, deadline, evq = 0;
	char ck[1024];
	int i, j, st, failed = 0, fd;

	if (!seed)
		seed = kv_now_us() ^ ((__u64)getpid() << 20);
	say("seed=%llu seconds=%lu processes=%d (kernel command line: kvpool_seed=, kvpool_prefix_stress_seconds=)\n",
	    (unsigned long long)seed, secs, NPROC);
	kv_name(sh->name, sizeof(sh->name), "pstress");
	sh->tag = seed;
	/* This fd keeps the space and reads its figures; it holds nothing. */
	fd = kv_open_create(sh->name, BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, px_stats(fd, &s0));

	t0 = kv_now_us();
	for (i = 0; i < NPROC; i++) {
		pids[i] = fork();
		ASSERT_LE(0, pids[i]);
		if (pids[i] == 0)
			stress_proc(i, seed);
	}
	deadline = t0 + (__u64)secs * 1000000;
	while (kv_now_us() < deadline && !failed) {
		int r;

		px_sleep_ms(500);
		r = kv_check(ck, sizeof(ck));
		checks++;
		if (r != 1) {
			TH_LOG("debugfs check while running: %s", r < 0 ? strerror(-r) : ck);
			failed = 1;
		}
		for (i = 0; i < NPROC; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				TH_LOG("process %d ended early (status %#x): %s", i, st, sh->p[i].err);
				pids[i] = -1;
				failed = 1;
			}
		}
	}
	sh->stop = 1;
	for (i = 0; i < NPROC; i++) {
		if (pids[i] < 0)
			continue;
		st = px_wait_timeout(pids[i], 60000);
		if (st == -ETIMEDOUT) {
			TH_LOG("process %d did not stop within 60 s", i);
			px_kill_reap(pids[i]);
			failed = 1;
		} else if (st != 0 || !sh->p[i].done) {
			TH_LOG("process %d: status %d: %s", i, st, sh->p[i].err);
			failed = 1;
		}
	}
	for (i = 0; i < NPROC; i++) {
		for (j = 0; j < OP_NR; j++) {
			ops[j] += sh->p[i].ops[j];
			total += sh->p[i].ops[j];
		}
		hits += sh->p[i].hits;
		misses += sh->p[i].misses;
		dedups += sh->p[i].dedups;
		inserts += sh->p[i].inserts;
		evev += sh->p[i].evicted_events;
		qpev += sh->p[i].pressure_events;
		ovf += sh->p[i].overflows;
		words += sh->p[i].words;
	}
	ASSERT_EQ(0, px_stats(fd, &s1));
	for (j = 0; j < KVPOOL_EVICT_CAUSES; j++)
		evq += s1.evictions[j] - s0.evictions[j];
	say("ran %.1f s: %lu operations, %lu verified words; debugfs check read %lu times\n",
	    (kv_now_us() - t0) / 1e6, total, words, checks);
	for (j = 0; j < OP_NR; j++)
		say("  %-10s %lu\n", op_names[j], ops[j]);
	say("lookups: %lu hits, %lu misses; publishes: %lu new, %lu dedup; events: %lu EVICTED, %lu QUOTA_PRESSURE, %lu OVERFLOW\n",
	    hits, misses, inserts, dedups, evev, qpev, ovf);
	say("space: evictions %llu (quota %llu), pressure %llu, hits %llu, misses %llu, inserts %llu, dedups %llu\n",
	    (unsigned long long)evq,
	    (unsigned long long)(s1.evictions[KVPOOL_EVICT_QUOTA] - s0.evictions[KVPOOL_EVICT_QUOTA]),
	    (unsigned long long)(s1.pressure - s0.pressure), (unsigned long long)s1.hits,
	    (unsigned long long)s1.misses, (unsigned long long)s1.inserts,
	    (unsigned long long)s1.dedups);
	ASSERT_EQ(0, failed);

	/* Everything the processes held went with them. */
	EXPECT_EQ(0, s1.readers);
	EXPECT_EQ(0, s1.my_refs);
	EXPECT_EQ(0, s1.published_blocks);
	ASSERT_EQ(0, kv_space_info(fd, &si));
	EXPECT_EQ(0, si.owned_blocks);
	EXPECT_EQ(si.backed_blocks, si.free_blocks + s1.cached_blocks + s1.hole_blocks);
	/* The figures agree with what the processes saw. */
	EXPECT_EQ(hits, s1.hits - s0.hits);
	EXPECT_EQ(misses, s1.misses - s0.misses);
	EXPECT_EQ(inserts, s1.inserts - s0.inserts);
	EXPECT_EQ(dedups, s1.dedups - s0.dedups);
	EXPECT_EQ(evq, s1.evictions[KVPOOL_EVICT_QUOTA] - s0.evictions[KVPOOL_EVICT_QUOTA]);
	/* And it was a stress: constant eviction, hits and dedups. */
	EXPECT_LT(100, evq);
	EXPECT_LT(100, hits);
	EXPECT_LT(10, dedups);
	EXPECT_LT(0, evev);
	ASSERT_KV_CHECK_OK();
	close(fd);
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 2000));
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 2000));
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
