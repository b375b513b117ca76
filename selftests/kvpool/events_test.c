// SPDX-License-Identifier: GPL-2.0
/*
 * events_test: the read()/poll() event stream of a joined fd.
 *
 *   - every eviction of a block that an fd published or looked up (hit)
 *     reaches that fd as one EVICTED event with the block, its hash and the
 *     cause; seq runs 1, 2, 3, ... with no gap over 1000 quota evictions,
 *     and the counts match SPACE_STATS and the sysfs counters; an fd that
 *     never touched the block gets no EVICTED event;
 *   - every fd of the space gets one QUOTA_PRESSURE per evicting ALLOC
 *     (count = blocks evicted) and one with count 0 per ALLOC that fails
 *     with ENOSPC, which evicts nothing;
 *   - SPACE_DESTROY, and sysfs destroy_space, send each joined fd one
 *     SPACE_DESTROYED; sysfs drop_cached evicts a space's cached blocks
 *     with cause ADMIN (EVICTED events, no QUOTA_PRESSURE);
 *   - poll() says EPOLLIN exactly while events are pending (EPOLLERR on an
 *     unjoined fd); a blocking read() and a blocking poll() in one process
 *     are woken by an eviction that another process causes;
 *   - O_NONBLOCK read with nothing pending: EAGAIN; a buffer shorter than
 *     one event: EINVAL (nothing consumed); an unjoined fd: EBADFD; read()
 *     returns whole events only;
 *   - with sysfs event_queue_max at 16, 100 evictions without reading give
 *     some events, then one OVERFLOW whose count makes up every seq, and
 *     the next event continues the seq (event_queue_max is restored).
 */
#include "kvpool_prefix_util.h"

#include <sys/epoll.h>

#define PG	4096

/* An eviction we expect: the block and the n of its hash px_hash(tag, n). */
struct victim {
	__u32 id;
	__u32 n;
};

/* FIFO model of the LRU (one priority, so released-longest-ago first). */
struct lru {
	struct victim *v;
	unsigned int head, tail, cap;
};

static void lru_init(struct lru *l, unsigned int cap)
{
	l->v = calloc(cap, sizeof(*l->v));
	l->head = l->tail = 0;
	l->cap = cap;
}

static void lru_push(struct lru *l, __u32 id, __u32 n)
{
	l->v[l->tail % l->cap].id = id;
	l->v[l->tail % l->cap].n = n;
	l->tail++;
}

static struct victim lru_pop(struct lru *l)
{
	return l->v[l->head++ % l->cap];
}

FIXTURE(ev) {
	char name[KVPOOL_NAME_MAX];
	__u64 tag;
	__u64 qmax0;
	int have_qmax;
};

FIXTURE_SETUP(ev)
{
	struct kvpool_info info;

	kv_name(self->name, sizeof(self->name), "ev");
	self->tag = kv_now_us() ^ ((__u64)getpid() << 32);
	ASSERT_EQ(0, kv_pool_info(&info));
	ASSERT_EQ(KVPOOL_API_VERSION, info.api_version);
	ASSERT_TRUE(info.features & KVPOOL_FEAT_EVENTS);
	ASSERT_TRUE(info.features & KVPOOL_FEAT_PREFIX);
	self->have_qmax = sysfs_u64("event_queue_max", &self->qmax0) == 0;
}

FIXTURE_TEARDOWN(ev)
{
	if (self->have_qmax && sysfs_get("event_queue_max") != self->qmax0)
		px_sysfs_write_u64("event_queue_max", self->qmax0);
}

/*
 * ALLOC one block on fd, publish it under px_hash(tag, n), release it: it
 * is CACHED, newest on the LRU.  0 or -errno (of the step that failed).
 */
static int cache_one(int fd, __u64 tag, __u32 n, __u32 *idp)
{
	__u8 h[KVPOOL_HASH_BYTES];
	__u32 id, got = ~0U, fl = ~0U;
	int ret;

	ret = kv_alloc(fd, &id, 1);
	if (ret)
		return ret;
	px_hash(h, tag, n);
	ret = px_publish1(fd, id, h, &got, &fl);
	if (ret)
		return ret;
	if (got != id || fl != 0)
		return -EPROTO;	/* a new hash: published in place */
	ret = px_release1(fd, id);
	if (ret)
		return ret;
	if (idp)
		*idp = id;
	return 0;
}

/* Fill a new space of nr blocks with cached blocks n = 0..nr-1 (oldest first). */
static int fill_cached(int fd, __u64 tag, unsigned int nr, struct lru *l)
{
	unsigned int i;
	int ret;

	for (i = 0; i < nr; i++) {
		__u32 id;

		ret = cache_one(fd, tag, i, &id);
		if (ret)
			return ret;
		if (l)
			lru_push(l, id, i);
	}
	return 0;
}

/* Drain fd's events into ev[max]; asserts the read succeeded. */
#define DRAIN(fd, ev, max) ({ \
	int __lost, __n = px_drain_events((fd), (ev), (max), &__lost); \
	ASSERT_LE(0, __n) TH_LOG("draining events: %s", strerror(-__n)); \
	ASSERT_EQ(0, __lost) TH_LOG("more than %d events", (int)(max)); \
	__n; })

/* seq must be first, first + 1, ... */
static bool seqs_from(struct __test_metadata *_metadata, const struct kvpool_event *ev,
		      int n, __u64 first, const char *who)
{
	char s[200];
	int i;

	for (i = 0; i < n; i++) {
		if (ev[i].seq != first + i) {
			px_event_str(s, sizeof(s), &ev[i]);
			TH_LOG("%s: event %d has seq %llu, want %llu: %s", who, i,
			       (unsigned long long)ev[i].seq,
			       (unsigned long long)(first + i), s);
			return false;
		}
		if (ev[i].reserved) {
			px_event_str(s, sizeof(s), &ev[i]);
			TH_LOG("%s: event %d has reserved != 0: %s", who, i, s);
			return false;
		}
	}
	return true;
}

static int count_type(const struct kvpool_event *ev, int n, __u32 type)
{
	int i, c = 0;

	for (i = 0; i < n; i++)
		c += ev[i].type == type;
	return c;
}

/* The EVICTED event e names block id with hash px_hash(tag, hn) and cause. */
static bool evicted_is(struct __test_metadata *_metadata, const struct kvpool_event *e,
		       __u32 id, __u64 tag, __u32 hn, __u32 cause, const char *who)
{
	__u8 h[KVPOOL_HASH_BYTES];
	char s[200];

	px_hash(h, tag, hn);
	if (e->type == KVPOOL_EVENT_EVICTED && e->block == id && e->cause == cause &&
	    !memcmp(e->hash, h, KVPOOL_HASH_BYTES))
		return true;
	px_event_str(s, sizeof(s), e);
	TH_LOG("%s: want EVICTED block=%u hash n=%u cause=%u, got %s", who, id, hn, cause, s);
	return false;
}

TEST_F_TIMEOUT(ev, evicted_1000_no_gap_only_to_touchers, 120)
{
	const unsigned int nr = 64, rounds = 1000, clook = 10;
	static struct kvpool_event ea[4096], eb[4096], ec[4096];
	__u8 hashes[10][KVPOOL_HASH_BYTES];
	struct kvpool_space_stats s0, s1;
	struct victim vict[1000];
	__u64 g0[KVPOOL_EVICT_CAUSES] = { 0 }, g1[KVPOOL_EVICT_CAUSES] = { 0 };
	struct lru l;
	__u32 cids[10];
	int a, b, c, na, nb, nc, i, k, have_g;
	unsigned int r;

	lru_init(&l, nr + rounds + 16);
	a = kv_open_create(self->name, PG, nr * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);
	c = kv_open_join(self->name, NULL);
	ASSERT_LE(0, c);
	ASSERT_EQ(0, fill_cached(a, self->tag, nr, &l));

	/* c looks up (hits) the 10 oldest, then releases them in order. */
	for (i = 0; i < (int)clook; i++)
		px_hash(hashes[i], self->tag, i);
	ASSERT_EQ((int)clook, px_lookup(c, (const __u8 (*)[KVPOOL_HASH_BYTES])hashes, clook,
				       cids, NULL));
	for (i = 0; i < (int)clook; i++) {
		struct victim v = lru_pop(&l);

		ASSERT_EQ(v.id, cids[i]);
		ASSERT_EQ(0, px_release1(c, cids[i]));
		lru_push(&l, v.id, v.n);
	}
	/* Nothing was evicted yet: nobody has an event. */
	ASSERT_EQ(0, DRAIN(a, ea, 4096));
	ASSERT_EQ(0, DRAIN(b, eb, 4096));
	ASSERT_EQ(0, DRAIN(c, ec, 4096));

	ASSERT_EQ(0, px_stats(a, &s0));
	EXPECT_EQ(nr, s0.cached_blocks);
	have_g = px_sysfs_evictions("evictions", g0) == 0;
	EXPECT_TRUE(have_g) TH_LOG("sysfs evictions unreadable or malformed");

	for (r = 0; r < rounds; r++) {
		__u32 id;

		vict[r] = lru_pop(&l);
		ASSERT_EQ(0, cache_one(a, self->tag, nr + r, &id)) TH_LOG("round %u", r);
		lru_push(&l, id, nr + r);
	}

	ASSERT_EQ(0, px_stats(a, &s1));
	EXPECT_EQ(rounds, s1.evictions[KVPOOL_EVICT_QUOTA] - s0.evictions[KVPOOL_EVICT_QUOTA]);
	for (k = 1; k < KVPOOL_EVICT_CAUSES; k++)
		EXPECT_EQ(s0.evictions[k], s1.evictions[k]) TH_LOG("cause %d", k);
	EXPECT_EQ(rounds, s1.pressure - s0.pressure);
	EXPECT_EQ(nr, s1.cached_blocks);
	EXPECT_EQ(0, s1.published_blocks);
	EXPECT_EQ(0, s1.readers);
	if (have_g) {
		ASSERT_EQ(0, px_sysfs_evictions("evictions", g1));
		EXPECT_EQ(rounds, g1[KVPOOL_EVICT_QUOTA] - g0[KVPOOL_EVICT_QUOTA]);
	}

	/* a published every block: 1000 EVICTED + 1000 QUOTA_PRESSURE, seq 1..2000. */
	na = DRAIN(a, ea, 4096);
	ASSERT_EQ(2 * rounds, na);
	ASSERT_TRUE(seqs_from(_metadata, ea, na, 1, "publisher"));
	EXPECT_EQ(rounds, count_type(ea, na, KVPOOL_EVENT_EVICTED));
	EXPECT_EQ(rounds, count_type(ea, na, KVPOOL_EVENT_QUOTA_PRESSURE));
	for (i = 0, r = 0; i < na; i++) {
		if (ea[i].type == KVPOOL_EVENT_QUOTA_PRESSURE) {
			EXPECT_EQ(1, ea[i].count) TH_LOG("event %d", i);
			EXPECT_EQ(KVPOOL_EVICT_QUOTA, ea[i].cause) TH_LOG("event %d", i);
			continue;
		}
		ASSERT_GT(rounds, r);
		/* In eviction order: released longest ago first. */
		ASSERT_TRUE(evicted_is(_metadata, &ea[i], vict[r].id, self->tag, vict[r].n,
				       KVPOOL_EVICT_QUOTA, "publisher"))
			TH_LOG("eviction %u", r);
		r++;
	}

	/* b never touched a block: only the 1000 QUOTA_PRESSURE events. */
	nb = DRAIN(b, eb, 4096);
	ASSERT_EQ(rounds, nb);
	ASSERT_TRUE(seqs_from(_metadata, eb, nb, 1, "bystander"));
	EXPECT_EQ(rounds, count_type(eb, nb, KVPOOL_EVENT_QUOTA_PRESSURE));
	EXPECT_EQ(0, count_type(eb, nb, KVPOOL_EVENT_EVICTED));

	/* c looked up 10 blocks: their evictions, in order, and the pressure events. */
	nc = DRAIN(c, ec, 4096);
	ASSERT_EQ(rounds + clook, nc);
	ASSERT_TRUE(seqs_from(_metadata, ec, nc, 1, "reader"));
	EXPECT_EQ(rounds, count_type(ec, nc, KVPOOL_EVENT_QUOTA_PRESSURE));
	for (i = 0, k = 0; i < nc; i++) {
		if (ec[i].type != KVPOOL_EVENT_EVICTED)
			continue;
		ASSERT_GT((int)clook, k);
		ASSERT_TRUE(evicted_is(_metadata, &ec[i], cids[k], self->tag, k,
				       KVPOOL_EVICT_QUOTA, "reader"));
		k++;
	}
	EXPECT_EQ((int)clook, k);

	close(a);
	close(b);
	close(c);
	free(l.v);
	ASSERT_KV_CHECK_OK();
}

TEST_F(ev, quota_pressure_count_and_enospc_evicts_nothing)
{
	struct kvpool_event ea[64], eb[64];
	struct kvpool_space_stats s0, s1;
	__u32 ids[32];
	struct lru l;
	int a, b, na, nb, i, e = 0, q = 0;

	lru_init(&l, 64);
	a = kv_open_create(self->name, PG, 16 * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);
	ASSERT_EQ(0, fill_cached(a, self->tag, 16, &l));

	/* One ALLOC of 5 evicts the 5 oldest: one QUOTA_PRESSURE, count 5. */
	ASSERT_EQ(0, px_stats(a, &s0));
	ASSERT_EQ(0, kv_alloc(a, ids, 5));
	ASSERT_EQ(0, px_stats(a, &s1));
	EXPECT_EQ(5, s1.evictions[KVPOOL_EVICT_QUOTA] - s0.evictions[KVPOOL_EVICT_QUOTA]);
	EXPECT_EQ(1, s1.pressure - s0.pressure);
	EXPECT_EQ(11, s1.cached_blocks);
	na = DRAIN(a, ea, 64);
	ASSERT_EQ(6, na);
	ASSERT_TRUE(seqs_from(_metadata, ea, na, 1, "publisher"));
	for (i = 0; i < na; i++) {
		if (ea[i].type == KVPOOL_EVENT_QUOTA_PRESSURE) {
			EXPECT_EQ(5, ea[i].count);
			EXPECT_EQ(KVPOOL_EVICT_QUOTA, ea[i].cause);
			q++;
		} else {
			struct victim v = lru_pop(&l);

			ASSERT_TRUE(evicted_is(_metadata, &ea[i], v.id, self->tag, v.n,
					       KVPOOL_EVICT_QUOTA, "publisher"));
			e++;
		}
	}
	EXPECT_EQ(1, q);
	EXPECT_EQ(5, e);
	nb = DRAIN(b, eb, 64);
	ASSERT_EQ(1, nb);
	EXPECT_PRESSURE_EVENT(eb[0], 1, 5, KVPOOL_EVICT_QUOTA);

	/* 11 cached, 0 free: ALLOC 12 cannot succeed, so it evicts nothing. */
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 5, 12));
	ASSERT_EQ(0, px_stats(a, &s0));
	EXPECT_EQ(s1.evictions[KVPOOL_EVICT_QUOTA], s0.evictions[KVPOOL_EVICT_QUOTA]);
	EXPECT_EQ(11, s0.cached_blocks);
	na = DRAIN(a, ea, 64);
	ASSERT_EQ(1, na);
	EXPECT_EQ(7, ea[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ea[0].type);
	EXPECT_EQ(0, ea[0].count);
	nb = DRAIN(b, eb, 64);
	ASSERT_EQ(1, nb);
	EXPECT_EQ(2, eb[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, eb[0].type);
	EXPECT_EQ(0, eb[0].count);

	/* Exactly 11 fits: all cached go, count 11 (b allocates this time). */
	ASSERT_EQ(0, kv_alloc(b, ids + 5, 11));
	ASSERT_EQ(0, px_stats(a, &s1));
	EXPECT_EQ(11, s1.evictions[KVPOOL_EVICT_QUOTA] - s0.evictions[KVPOOL_EVICT_QUOTA]);
	EXPECT_EQ(0, s1.cached_blocks);
	na = DRAIN(a, ea, 64);
	ASSERT_EQ(12, na);
	ASSERT_TRUE(seqs_from(_metadata, ea, na, 8, "publisher"));
	EXPECT_EQ(11, count_type(ea, na, KVPOOL_EVENT_EVICTED));
	for (i = 0; i < na; i++)
		if (ea[i].type == KVPOOL_EVENT_QUOTA_PRESSURE)
			EXPECT_EQ(11, ea[i].count);
	nb = DRAIN(b, eb, 64);
	ASSERT_EQ(1, nb);
	EXPECT_EQ(3, eb[0].seq);
	EXPECT_EQ(11, eb[0].count);

	/* All owned now: ENOSPC, QUOTA_PRESSURE count 0 to both. */
	EXPECT_EQ(-ENOSPC, kv_alloc(b, ids, 1));
	na = DRAIN(a, ea, 64);
	nb = DRAIN(b, eb, 64);
	ASSERT_EQ(1, na);
	ASSERT_EQ(1, nb);
	EXPECT_EQ(20, ea[0].seq);
	EXPECT_EQ(4, eb[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ea[0].type);
	EXPECT_EQ(0, ea[0].count);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, eb[0].type);
	EXPECT_EQ(0, eb[0].count);
	close(a);
	close(b);
	free(l.v);
	ASSERT_KV_CHECK_OK();
}

TEST_F(ev, space_destroyed_once_per_joined_fd)
{
	struct kvpool_event e[8];
	__u32 id;
	int a, b, c, d, x, n;

	a = kv_open_create(self->name, PG, 16 * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);
	c = kv_open();		/* never joins */
	ASSERT_LE(0, c);
	ASSERT_EQ(0, px_destroy(c, self->name));

	n = DRAIN(a, e, 8);
	ASSERT_EQ(1, n);
	EXPECT_EQ(1, e[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, e[0].type);
	n = DRAIN(b, e, 8);
	ASSERT_EQ(1, n);
	EXPECT_EQ(1, e[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, e[0].type);
	/* The unjoined destroyer has no stream. */
	EXPECT_EQ(-EBADFD, px_read_events(c, e, 1));

	/* Joined fds keep working; the name is free at once. */
	EXPECT_EQ(0, kv_alloc(a, &id, 1));
	EXPECT_EQ(0, cache_one(b, self->tag, 1, NULL));
	d = kv_open_create(self->name, PG, 16 * PG, NULL);
	ASSERT_LE(0, d);
	x = kv_open_join(self->name, NULL);
	ASSERT_LE(0, x);
	/* Destroying the new space (from a joined fd) does not touch a and b. */
	ASSERT_EQ(0, px_destroy(x, self->name));
	n = DRAIN(d, e, 8);
	ASSERT_EQ(1, n);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, e[0].type);
	n = DRAIN(x, e, 8);
	ASSERT_EQ(1, n);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, e[0].type);
	EXPECT_EQ(0, DRAIN(a, e, 8));
	EXPECT_EQ(0, DRAIN(b, e, 8));
	EXPECT_EQ(-ENOENT, px_destroy(c, self->name));
	close(a);
	close(b);
	close(c);
	close(d);
	close(x);
	ASSERT_KV_CHECK_OK();
}

TEST_F(ev, poll_epollin_only_while_pending)
{
	struct kvpool_event e[8];
	struct epoll_event ee;
	struct pollfd p;
	__u32 id;
	int a, b, u, ep, n;

	a = kv_open_create(self->name, PG, 8 * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);
	ASSERT_EQ(0, fill_cached(a, self->tag, 8, NULL));
	ep = epoll_create1(EPOLL_CLOEXEC);
	ASSERT_LE(0, ep);
	ee.events = EPOLLIN;
	ee.data.u32 = 7;
	ASSERT_EQ(0, epoll_ctl(ep, EPOLL_CTL_ADD, a, &ee));

	p.fd = a;
	p.events = POLLIN;
	p.revents = 0;
	EXPECT_EQ(0, poll(&p, 1, 0));
	EXPECT_EQ(0, p.revents);
	EXPECT_EQ(0, epoll_wait(ep, &ee, 1, 0));

	/* b's ALLOC evicts a's oldest block. */
	ASSERT_EQ(0, kv_alloc(b, &id, 1));
	p.revents = 0;
	EXPECT_EQ(1, poll(&p, 1, 0));
	EXPECT_TRUE(p.revents & POLLIN);
	EXPECT_FALSE(p.revents & (POLLERR | POLLHUP | POLLNVAL));
	ASSERT_EQ(1, epoll_wait(ep, &ee, 1, 0));
	EXPECT_TRUE(ee.events & EPOLLIN);
	EXPECT_EQ(7, ee.data.u32);

	/* One read of room for one leaves the second event: still readable. */
	ASSERT_EQ(1, px_read_events(a, e, 1));
	EXPECT_EQ(1, e[0].seq);
	p.revents = 0;
	EXPECT_EQ(1, poll(&p, 1, 0));
	EXPECT_TRUE(p.revents & POLLIN);
	n = DRAIN(a, e, 8);
	EXPECT_EQ(1, n);
	p.revents = 0;
	EXPECT_EQ(0, poll(&p, 1, 0));
	EXPECT_EQ(0, epoll_wait(ep, &ee, 1, 0));

	/* Unjoined: EPOLLERR. */
	u = kv_open();
	ASSERT_LE(0, u);
	p.fd = u;
	p.events = POLLIN;
	p.revents = 0;
	EXPECT_EQ(1, poll(&p, 1, 0));
	EXPECT_TRUE(p.revents & POLLERR);
	EXPECT_FALSE(p.revents & POLLIN);
	close(u);
	close(ep);
	close(a);
	close(b);
}

/* What a blocked child saw, in memory shared with the test. */
struct waiter {
	volatile int ready;		/* published and released its block */
	volatile int returned;		/* read()/poll() came back */
	volatile __u32 id;		/* its block */
	volatile int ret;		/* read: events, poll: revents; or -errno */
	volatile __u64 woke_us;
	int n;
	struct kvpool_event ev[8];
	char err[160];
};

/* Child: join, cache one block under hash n, then block in read() or poll(). */
static void waiter_child(struct waiter *w, const char *name, __u64 tag, __u32 n, int use_poll)
{
	int fd, ret;
	__u32 id;

	fd = kv_open_join(name, NULL);
	if (fd < 0) {
		snprintf(w->err, sizeof(w->err), "join: %s", strerror(-fd));
		_exit(2);
	}
	ret = cache_one(fd, tag, n, &id);
	if (ret) {
		snprintf(w->err, sizeof(w->err), "cache_one: %s", strerror(-ret));
		_exit(3);
	}
	w->id = id;
	w->ready = 1;
	if (use_poll) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		ret = poll(&p, 1, -1);
		w->ret = ret < 0 ? -errno : p.revents;
	} else {
		ret = px_read_events(fd, w->ev, 8);
		w->ret = ret;
	}
	w->woke_us = kv_now_us();
	w->returned = 1;
	/* Collect the rest of what the eviction sent (the ALLOC may still run). */
	w->n = use_poll ? 0 : (w->ret > 0 ? w->ret : 0);
	px_sleep_ms(200);
	ret = px_drain_events(fd, w->ev + w->n, 8 - w->n, NULL);
	if (ret < 0) {
		snprintf(w->err, sizeof(w->err), "drain: %s", strerror(-ret));
		_exit(4);
	}
	w->n += ret;
	_exit(0);
}

static void blocked_waiter_woken(struct __test_metadata *_metadata, const char *name,
				 __u64 tag, int use_poll)
{
	struct waiter *w;
	__u64 t_evict;
	__u32 ids[4];
	pid_t pid;
	int fd, st, i, found = 0;
	char state = '?';

	w = mmap(NULL, sizeof(*w), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, w);
	memset(w, 0, sizeof(*w));
	fd = kv_open_create(name, PG, 4 * PG, NULL);
	ASSERT_LE(0, fd);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		waiter_child(w, name, tag, 1, use_poll);

	for (i = 0; i < 1000 && !w->ready; i++)
		px_sleep_ms(5);
	ASSERT_TRUE(w->ready) TH_LOG("child: %s", w->err);
	/* Let it enter read()/poll() and sleep there. */
	for (i = 0; i < 200; i++) {
		state = px_proc_state(pid);
		if (state == 'S')
			break;
		px_sleep_ms(5);
	}
	px_sleep_ms(200);
	state = px_proc_state(pid);
	EXPECT_EQ('S', state);
	ASSERT_FALSE(w->returned) TH_LOG("%s returned with nothing to report: %d",
					 use_poll ? "poll" : "read", w->ret);

	/* This process takes the whole quota: the child's block is evicted. */
	t_evict = kv_now_us();
	ASSERT_EQ(0, kv_alloc(fd, ids, 4));
	st = px_wait_timeout(pid, 5000);
	if (st == -ETIMEDOUT) {
		px_kill_reap(pid);
		ASSERT_TRUE(false) TH_LOG("the blocked %s was not woken within 5 s",
					  use_poll ? "poll" : "read");
	}
	ASSERT_EQ(0, st) TH_LOG("child: %s", w->err);
	ASSERT_TRUE(w->returned);
	TH_LOG("%s woke %llu us after the evicting ALLOC began", use_poll ? "poll" : "read",
	       (unsigned long long)(w->woke_us - t_evict));
	if (use_poll) {
		EXPECT_TRUE(w->ret & POLLIN) TH_LOG("revents %#x", w->ret);
	} else {
		EXPECT_LE(1, w->ret) TH_LOG("read: %s", w->ret < 0 ? strerror(-w->ret) : "0");
	}
	/* One EVICTED (its block) and one QUOTA_PRESSURE, seq 1 and 2. */
	ASSERT_EQ(2, w->n);
	for (i = 0; i < w->n; i++) {
		EXPECT_EQ((__u64)i + 1, w->ev[i].seq);
		if (w->ev[i].type == KVPOOL_EVENT_EVICTED) {
			found++;
			EXPECT_TRUE(evicted_is(_metadata, &w->ev[i], w->id, tag, 1,
					       KVPOOL_EVICT_QUOTA, "waiter"));
		} else {
			EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, w->ev[i].type);
			EXPECT_EQ(1, w->ev[i].count);
		}
	}
	EXPECT_EQ(1, found);
	close(fd);
	munmap(w, sizeof(*w));
}

TEST_F(ev, blocking_read_woken_by_eviction_in_other_process)
{
	blocked_waiter_woken(_metadata, self->name, self->tag, 0);
}

TEST_F(ev, blocking_poll_woken_by_eviction_in_other_process)
{
	blocked_waiter_woken(_metadata, self->name, self->tag, 1);
}

TEST_F(ev, nonblock_eagain)
{
	struct kvpool_event e[4];
	struct kvpool_space_open so;
	__u32 id;
	int a, nb, fl;

	nb = open(KV_DEV, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	ASSERT_LE(0, nb);
	kv_so_init(&so, self->name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL, PG, 4 * PG);
	ASSERT_EQ(0, kv_space_open(nb, &so));
	EXPECT_EQ(-EAGAIN, px_read_events(nb, e, 4));

	a = kv_open_join(self->name, NULL);
	ASSERT_LE(0, a);
	fl = fcntl(a, F_GETFL);
	ASSERT_EQ(0, fcntl(a, F_SETFL, fl | O_NONBLOCK));
	EXPECT_EQ(-EAGAIN, px_read_events(a, e, 4));

	/* An event arrives: the O_NONBLOCK read returns it, then EAGAIN again. */
	ASSERT_EQ(0, cache_one(nb, self->tag, 0, &id));
	ASSERT_EQ(0, kv_alloc(a, &id, 4));
	ASSERT_EQ(2, px_read_events(nb, e, 4));
	EXPECT_EQ(1, e[0].seq);
	EXPECT_EQ(2, e[1].seq);
	EXPECT_EQ(1, count_type(e, 2, KVPOOL_EVENT_EVICTED));
	EXPECT_EQ(-EAGAIN, px_read_events(nb, e, 4));
	ASSERT_EQ(1, px_read_events(a, e, 4));
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, e[0].type);
	EXPECT_EQ(-EAGAIN, px_read_events(a, e, 4));
	close(a);
	close(nb);
}

static void on_alarm(int sig)
{
}

TEST_F(ev, short_buffer_einval_and_whole_events_only)
{
	struct kvpool_event e[4];
	char buf[3 * sizeof(struct kvpool_event)];
	struct sigaction sa;
	__u32 ids[3];
	ssize_t n;
	int a, b, err;

	ASSERT_EQ(64, sizeof(struct kvpool_event));
	a = kv_open_create(self->name, PG, 4 * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);

	/*
	 * Nothing pending on a blocking fd: a short buffer is EINVAL at once
	 * (an alarm turns a read that sleeps instead into EINTR).
	 */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	ASSERT_EQ(0, sigaction(SIGALRM, &sa, NULL));
	alarm(3);
	n = read(a, buf, sizeof(struct kvpool_event) - 1);
	err = errno;
	alarm(0);
	EXPECT_EQ(-1, n);
	EXPECT_EQ(EINVAL, err) TH_LOG("%s", strerror(err));

	/* 3 of a's blocks evicted by one ALLOC of b: 3 EVICTED + 1 QUOTA_PRESSURE. */
	ASSERT_EQ(0, fill_cached(a, self->tag, 4, NULL));
	ASSERT_EQ(0, kv_alloc(b, ids, 3));

	n = read(a, buf, sizeof(struct kvpool_event) - 1);
	err = errno;
	EXPECT_EQ(-1, n);
	EXPECT_EQ(EINVAL, err) TH_LOG("read of %s bytes: %s", "sizeof(struct kvpool_event) - 1", strerror(err));
	n = read(a, buf, 1);
	err = errno;
	EXPECT_EQ(-1, n);
	EXPECT_EQ(EINVAL, err) TH_LOG("read of %s bytes: %s", "1", strerror(err));
	n = read(a, buf, 0);
	err = errno;
	EXPECT_EQ(-1, n);
	EXPECT_EQ(EINVAL, err) TH_LOG("read of %s bytes: %s", "0", strerror(err));

	/* Nothing was consumed; 2.5 events of room give exactly 2. */
	n = read(a, buf, 2 * sizeof(struct kvpool_event) + sizeof(struct kvpool_event) / 2);
	ASSERT_EQ(2 * (ssize_t)sizeof(struct kvpool_event), n);
	memcpy(e, buf, 2 * sizeof(struct kvpool_event));
	EXPECT_EQ(1, e[0].seq);
	EXPECT_EQ(2, e[1].seq);
	ASSERT_EQ(2, px_read_events(a, e, 4));
	EXPECT_EQ(3, e[0].seq);
	EXPECT_EQ(4, e[1].seq);
	close(a);
	close(b);
}

TEST_F(ev, unjoined_read_ebadfd)
{
	struct kvpool_event e[2];
	int u, unb;

	u = kv_open();
	ASSERT_LE(0, u);
	EXPECT_EQ(-EBADFD, px_read_events(u, e, 2));
	unb = open(KV_DEV, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	ASSERT_LE(0, unb);
	EXPECT_EQ(-EBADFD, px_read_events(unb, e, 2));
	/* A failed join leaves it unjoined. */
	EXPECT_EQ(-ENOENT, kv_join(u, self->name, NULL));
	EXPECT_EQ(-EBADFD, px_read_events(u, e, 2));
	close(u);
	close(unb);
}

TEST_F(ev, event_queue_max_bounds)
{
	ASSERT_TRUE(self->have_qmax) TH_LOG("no sysfs event_queue_max");
	EXPECT_EQ(65536, self->qmax0);
	EXPECT_EQ(-EINVAL, sysfs_write("event_queue_max", "15"));
	EXPECT_EQ(-EINVAL, sysfs_write("event_queue_max", "1048577"));
	EXPECT_EQ(-EINVAL, sysfs_write("event_queue_max", "0"));
	EXPECT_EQ(-EINVAL, sysfs_write("event_queue_max", "abc"));
	EXPECT_EQ(-EINVAL, sysfs_write("event_queue_max", "-16"));
	EXPECT_EQ(self->qmax0, sysfs_get("event_queue_max"));
	EXPECT_EQ(0, sysfs_write("event_queue_max", "16"));
	EXPECT_EQ(16, sysfs_get("event_queue_max"));
	EXPECT_EQ(0, sysfs_write("event_queue_max", "1048576"));
	EXPECT_EQ(1048576, sysfs_get("event_queue_max"));
	EXPECT_EQ(0, px_sysfs_write_u64("event_queue_max", self->qmax0));
	EXPECT_EQ(self->qmax0, sysfs_get("event_queue_max"));
}

/*
 * Check a drained stream of an overflowed fd: k >= 1 events seq 1..k, then
 * one OVERFLOW whose count is total - k, nothing else.  Returns the seq the
 * next event must have: the header leaves open whether the OVERFLOW record
 * takes a seq of its own (then it is k + count + 1 and the stream goes on
 * after it) or stands only for the skipped ones (the stream goes on at
 * k + count + 1).
 */
static __u64 check_overflowed(struct __test_metadata *_metadata, const struct kvpool_event *e,
			      int n, unsigned int total, unsigned int qmax, const char *who)
{
	char s[200];
	int k;

	if (n < 2) {
		TH_LOG("%s: %d events, want some and an OVERFLOW", who, n);
		_metadata->passed = 0;
		return 0;
	}
	k = n - 1;
	px_event_str(s, sizeof(s), &e[k]);
	TH_LOG("%s: %d events, then %s", who, k, s);
	EXPECT_EQ(KVPOOL_EVENT_OVERFLOW, e[k].type) TH_LOG("%s: last is %s", who, s);
	EXPECT_EQ(0, count_type(e, k, KVPOOL_EVENT_OVERFLOW));
	EXPECT_TRUE(seqs_from(_metadata, e, k, 1, who));
	EXPECT_GE(qmax, (unsigned int)k);
	EXPECT_EQ(total, (unsigned int)k + e[k].count)
		TH_LOG("%s: %d events read + OVERFLOW count %u != %u generated", who, k,
		       e[k].count, total);
	if (e[k].seq == (__u64)k + e[k].count + 1)
		return e[k].seq + 1;
	return (__u64)k + e[k].count + 1;
}

TEST_F(ev, overflow_accounts_for_every_seq)
{
	const unsigned int nr = 16, evictions = 100;
	struct kvpool_event ea[256], eb[256];
	unsigned int i;
	__u64 next_a, next_b;
	__u32 id;
	int a, b, na, nb;

	ASSERT_TRUE(self->have_qmax) TH_LOG("no sysfs event_queue_max");
	ASSERT_EQ(0, sysfs_write("event_queue_max", "16"));
	ASSERT_EQ(16, sysfs_get("event_queue_max"));
	a = kv_open_create(self->name, PG, nr * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);
	ASSERT_EQ(0, fill_cached(a, self->tag, nr, NULL));

	/* 100 ALLOCs that each evict one of a's blocks, nobody reading. */
	for (i = 0; i < evictions; i++)
		ASSERT_EQ(0, cache_one(a, self->tag, nr + i, NULL)) TH_LOG("eviction %u", i);

	na = DRAIN(a, ea, 256);
	next_a = check_overflowed(_metadata, ea, na, 2 * evictions, 16, "publisher");
	nb = DRAIN(b, eb, 256);
	next_b = check_overflowed(_metadata, eb, nb, evictions, 16, "bystander");
	ASSERT_TRUE(_metadata->passed);

	/* The stream goes on after the gap, with no other gap. */
	ASSERT_EQ(0, kv_alloc(b, &id, 1));
	na = DRAIN(a, ea, 256);
	ASSERT_EQ(2, na);
	EXPECT_TRUE(seqs_from(_metadata, ea, na, next_a, "publisher after"));
	EXPECT_EQ(1, count_type(ea, na, KVPOOL_EVENT_EVICTED));
	nb = DRAIN(b, eb, 256);
	ASSERT_EQ(1, nb);
	EXPECT_EQ(next_b, eb[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, eb[0].type);
	close(a);
	close(b);
	EXPECT_EQ(0, px_sysfs_write_u64("event_queue_max", self->qmax0));
	ASSERT_KV_CHECK_OK();
}

TEST_F(ev, admin_drop_cached_and_destroy_space)
{
	struct kvpool_event e[64];
	struct kvpool_space_stats st;
	char other[KVPOOL_NAME_MAX];
	struct lru l;
	__u32 ids[4], i;
	int a, b, o, na, nb;

	lru_init(&l, 64);
	a = kv_open_create(self->name, PG, 16 * PG, NULL);
	ASSERT_LE(0, a);
	b = kv_open_join(self->name, NULL);
	ASSERT_LE(0, b);
	kv_name(other, sizeof(other), "ev-other");
	o = kv_open_create(other, PG, 16 * PG, NULL);
	ASSERT_LE(0, o);
	ASSERT_EQ(0, fill_cached(a, self->tag, 8, &l));
	ASSERT_EQ(0, fill_cached(o, self->tag, 3, NULL));
	/* Two referenced and two owned blocks stay. */
	ASSERT_EQ(0, kv_alloc(a, ids, 4));
	for (i = 0; i < 2; i++) {
		__u8 h[KVPOOL_HASH_BYTES];

		px_hash(h, self->tag, 100 + i);
		ASSERT_EQ(0, px_publish1(a, ids[i], h, NULL, NULL));
	}

	/* drop_cached NAME: every cached block of that space goes, cause ADMIN. */
	ASSERT_EQ(0, sysfs_write("drop_cached", self->name));
	ASSERT_EQ(0, px_stats(a, &st));
	EXPECT_EQ(0, st.cached_blocks);
	EXPECT_EQ(2, st.published_blocks);
	EXPECT_EQ(8, st.evictions[KVPOOL_EVICT_ADMIN]);
	na = DRAIN(a, e, 64);
	ASSERT_EQ(8, na);
	ASSERT_TRUE(seqs_from(_metadata, e, na, 1, "publisher"));
	for (i = 0; i < 8; i++) {
		struct victim v = lru_pop(&l);

		/* No ALLOC: no QUOTA_PRESSURE; LRU order. */
		EXPECT_TRUE(evicted_is(_metadata, &e[i], v.id, self->tag, v.n,
				       KVPOOL_EVICT_ADMIN, "publisher"));
	}
	EXPECT_EQ(0, DRAIN(b, e, 64));
	/* The other space kept its cache. */
	ASSERT_EQ(0, px_stats(o, &st));
	EXPECT_EQ(3, st.cached_blocks);
	EXPECT_EQ(0, DRAIN(o, e, 64));
	/* The errno for an unknown name is not specified: only shown. */
	TH_LOG("drop_cached of an unknown space: %s",
	       strerror(-sysfs_write("drop_cached", "no-such-space-xyz")));

	/* destroy_space NAME: SPACE_DESTROYED to each joined fd, name free at once. */
	ASSERT_EQ(0, sysfs_write("destroy_space", self->name));
	na = DRAIN(a, e, 64);
	nb = DRAIN(b, e + 32, 32);
	ASSERT_EQ(1, na);
	ASSERT_EQ(1, nb);
	EXPECT_EQ(9, e[0].seq);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, e[0].type);
	EXPECT_EQ(1, e[32].seq);
	EXPECT_EQ(KVPOOL_EVENT_SPACE_DESTROYED, e[32].type);
	EXPECT_EQ(0, DRAIN(o, e, 64));
	EXPECT_EQ(-ENOENT, sysfs_write("destroy_space", self->name));
	/* The fds keep working on the unlinked space. */
	EXPECT_EQ(0, px_release1(a, ids[0]));
	EXPECT_EQ(0, kv_free(a, ids + 2, 2));
	close(a);
	close(b);
	close(o);
	free(l.v);
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
