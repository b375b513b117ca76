// SPDX-License-Identifier: MIT
/*
 * test_prefix: the prefix cache API where the embedded backend has its own
 * rules or its own machinery, beyond what test_backend checks on both
 * backends: the version that introduced the API, namespaces and persistence
 * bound to the struct kvrt, the eventfd, the pool cap as an eviction cause,
 * large batches, and joins, closes and destroys racing each other.
 * Embedded only (it never opens a device).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

#define BB 4096ULL
#define H KVRT_HASH_BYTES

static struct kvrt *open_emb(uint64_t pool_bytes)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED, .pool_bytes = pool_bytes,
				    .flags = KVRT_OPEN_NO_HUGETLB };
	struct kvrt *k = NULL;

	return kvrt_open(&k, &o) ? NULL : k;
}

static struct kvrt_space *sopen(struct kvrt *k, const char *name, uint32_t flags, uint64_t block,
				uint64_t quota)
{
	struct kvrt_space_opts o = { .name = name, .flags = flags, .block_bytes = block,
				     .quota_bytes = quota };

	/* A plain join has no create fields (kmod API 4). */
	if (flags & KVRT_SPACE_CREATE)
		o.mode = 0600;
	struct kvrt_space *s = NULL;

	return kvrt_space_open(k, &o, &s) ? NULL : s;
}

static void hfill(uint8_t h[H], uint32_t tag, uint32_t i)
{
	uint32_t t[2] = { tag, i };

	if (kvrt_hash_block(NULL, t, 2, NULL, 0, h))
		memset(h, 0, H);
}

static bool readable(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(version_0_2)
{
	CHECK_EQ(KVRT_VERSION_MAJOR, 0);
	CHECK(KVRT_VERSION_MINOR >= 2);
	CHECK_EQ(kvrt_version_number(), KVRT_VERSION_NUMBER);
	CHECK(!strncmp(kvrt_version(), "0.", 2));
}

/* Two handles, two namespaces: the same name is two spaces, two caches. */
TEST(namespaces_are_per_handle)
{
	struct kvrt *k1 = open_emb(0), *k2 = open_emb(0);
	struct kvrt_space *a, *b;
	uint8_t h[1][H];
	uint32_t x, got;

	REQUIRE(k1 && k2);
	hfill(h[0], 1, 0);
	a = sopen(k1, "same", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, BB, 16 * BB);
	b = sopen(k2, "same", KVRT_SPACE_CREATE | KVRT_SPACE_EXCL, BB, 16 * BB);
	REQUIRE(a && b);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	REQUIRE(kvrt_publish(a, 1, &x, h, NULL, NULL) == 0);
	CHECK_EQ(kvrt_lookup(b, 1, h, &got, NULL), 0);
	CHECK_EQ(kvrt_space_destroy(k2, "same"), 0);
	/* k1's is untouched. */
	CHECK_EQ(kvrt_lookup(a, 1, h, &got, NULL), 1);
	kvrt_space_close(b);
	kvrt_close(k2);
	/* kvrt_close with a persistent space joined: everything goes (ASan checks leaks). */
	kvrt_close(k1);
}

/* A persistent space keeps its backing until destroy or kvrt_close. */
TEST(persistence_lives_in_the_handle)
{
	struct kvrt *k = open_emb(8 << 20);
	struct kvrt_pool_info p;
	struct kvrt_space *a;
	struct kvrt_space_stats st;
	uint8_t h[4][H];
	uint32_t x[4], got[4];

	REQUIRE(k);
	for (uint32_t i = 0; i < 4; i++)
		hfill(h[i], 2, i);
	a = sopen(k, "p", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, 1 << 20, 8 << 20);
	REQUIRE(a);
	REQUIRE(kvrt_alloc_blocks(a, 4, x) == 0);
	for (int i = 0; i < 4; i++)
		memset(kvrt_block_addr(a, x[i]), 'a' + i, 1 << 20);
	REQUIRE(kvrt_publish(a, 4, x, h, NULL, NULL) == 0);
	kvrt_space_close(a);
	REQUIRE(kvrt_pool_info(k, &p) == 0);
	CHECK_EQ(p.used_bytes, 4 << 20);	/* still backed, nobody joined */
	a = sopen(k, "p", 0, 0, 0);
	REQUIRE(a);
	REQUIRE(kvrt_space_stats(a, &st) == 0);
	CHECK_EQ(st.cached_blocks, 4);
	CHECK_EQ(st.inserts, 4);	/* statistics live with the space */
	CHECK_EQ(kvrt_lookup(a, 4, h, got, NULL), 4);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(got[i], x[i]);
		CHECK_EQ(((char *)kvrt_block_addr(a, got[i]))[12345], 'a' + i);
	}
	kvrt_space_close(a);
	CHECK_EQ(kvrt_space_destroy(k, "p"), 0);
	REQUIRE(kvrt_pool_info(k, &p) == 0);
	CHECK_EQ(p.used_bytes, 0);
	CHECK(sopen(k, "p", 0, 0, 0) == NULL);
	kvrt_close(k);
}

/* The embedded event descriptor is an eventfd: non-blocking, close-on-exec, ours. */
TEST(events_fd_is_an_eventfd)
{
	struct kvrt *k = open_emb(0);
	struct kvrt_space *a;
	struct kvrt_event ev[4];
	char link[64], target[128];
	uint32_t x, y;
	ssize_t n;
	int fd;

	REQUIRE(k);
	a = sopen(k, "e", KVRT_SPACE_CREATE, BB, BB);
	REQUIRE(a);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	/* An event queued before the descriptor exists makes it readable at once. */
	CHECK_EQ(kvrt_alloc_blocks(a, 1, &y), -ENOSPC);
	fd = kvrt_events_fd(a);
	REQUIRE(fd >= 0);
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	REQUIRE(n > 0);
	target[n] = '\0';
	CHECK(strstr(target, "eventfd") != NULL);
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	CHECK(readable(fd, 0));
	CHECK_EQ(kvrt_read_events(a, ev, 4), 1);
	CHECK_EQ(ev[0].seq, 1);
	CHECK_EQ(ev[0].type, KVRT_EVENT_QUOTA_PRESSURE);
	CHECK_EQ(ev[0].cause, KVRT_EVICT_QUOTA);
	CHECK(!readable(fd, 0));
	/* Partial reads leave it readable. */
	CHECK_EQ(kvrt_alloc_blocks(a, 1, &y), -ENOSPC);
	CHECK_EQ(kvrt_alloc_blocks(a, 1, &y), -ENOSPC);
	CHECK_EQ(kvrt_read_events(a, ev, 1), 1);
	CHECK(readable(fd, 0));
	CHECK_EQ(kvrt_read_events(a, ev, 4), 1);
	CHECK_EQ(ev[0].seq, 3);
	CHECK(!readable(fd, 0));
	kvrt_space_close(a);
	/* Closed with the space. */
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
	kvrt_close(k);
}

struct waiter {
	struct kvrt_space *s;
	int fd;
	int woke;
	struct kvrt_event ev;
};

static void *wait_evicted(void *arg)
{
	struct waiter *w = arg;

	if (readable(w->fd, 10000))
		w->woke = kvrt_read_events(w->s, &w->ev, 1);
	return NULL;
}

/* A thread blocked in poll() wakes when another participant's allocation evicts. */
TEST(poll_wakes_on_eviction)
{
	struct kvrt *k = open_emb(0);
	struct kvrt_space *a, *b;
	struct waiter w = { 0 };
	pthread_t th;
	uint8_t h[1][H];
	uint32_t x, y[2];

	REQUIRE(k);
	hfill(h[0], 3, 0);
	a = sopen(k, "w", KVRT_SPACE_CREATE, BB, 2 * BB);
	b = sopen(k, "w", 0, 0, 0);
	REQUIRE(a && b);
	REQUIRE(kvrt_alloc_blocks(a, 1, &x) == 0);
	REQUIRE(kvrt_publish(a, 1, &x, h, NULL, NULL) == 0);
	REQUIRE(kvrt_release(a, 1, &x) == 0);
	w.s = a;
	w.fd = kvrt_events_fd(a);
	REQUIRE(w.fd >= 0);
	REQUIRE(pthread_create(&th, NULL, wait_evicted, &w) == 0);
	usleep(20000);
	CHECK_EQ(kvrt_alloc_blocks(b, 2, y), 0);
	pthread_join(th, NULL);
	CHECK_EQ(w.woke, 1);
	CHECK_EQ(w.ev.type, KVRT_EVENT_EVICTED);
	CHECK_EQ(w.ev.block, x);
	CHECK(!memcmp(w.ev.hash, h[0], H));
	kvrt_space_close(b);
	kvrt_space_close(a);
	kvrt_close(k);
}

/*
 * The pool cap as the limit: the space's range is far from full, so
 * evictions and failures say POOL, not QUOTA.
 */
TEST(pool_cap_evicts_with_cause_pool)
{
	struct kvrt *k = open_emb(2 << 20);
	struct kvrt_space *a;
	struct kvrt_space_stats st;
	struct kvrt_event ev[8];
	uint8_t h[2][H];
	uint32_t x[2], y[2];
	int n;

	REQUIRE(k);
	hfill(h[0], 4, 0);
	hfill(h[1], 4, 1);
	a = sopen(k, "cap", KVRT_SPACE_CREATE, 1 << 20, 64 << 20);
	REQUIRE(a);
	REQUIRE(kvrt_alloc_blocks(a, 2, x) == 0);	/* the whole 2 MiB */
	REQUIRE(kvrt_publish(a, 2, x, h, (const uint32_t[]){ 60, 40 }, NULL) == 0);
	REQUIRE(kvrt_release(a, 2, x) == 0);
	CHECK_EQ(kvrt_alloc_blocks(a, 1, y), 0);
	CHECK_EQ(y[0], x[1]);	/* priority 40 goes before 60 */
	n = kvrt_read_events(a, ev, 8);
	REQUIRE(n == 2);
	CHECK_EQ(ev[0].type, KVRT_EVENT_EVICTED);
	CHECK_EQ(ev[0].cause, KVRT_EVICT_POOL);
	CHECK_EQ(ev[0].block, x[1]);
	CHECK_EQ(ev[1].type, KVRT_EVENT_QUOTA_PRESSURE);
	CHECK_EQ(ev[1].cause, KVRT_EVICT_POOL);
	CHECK_EQ(ev[1].count, 1);
	CHECK_EQ(kvrt_alloc_blocks(a, 2, y), -ENOSPC);	/* 1 cached, 0 free */
	n = kvrt_read_events(a, ev, 8);
	REQUIRE(n == 1);
	CHECK_EQ(ev[0].cause, KVRT_EVICT_POOL);
	CHECK_EQ(ev[0].count, 0);
	REQUIRE(kvrt_space_stats(a, &st) == 0);
	CHECK_EQ(st.evictions[KVRT_EVICT_POOL], 1);
	CHECK_EQ(st.evictions[KVRT_EVICT_QUOTA], 0);
	CHECK_EQ(st.cached_blocks, 1);
	kvrt_close(k);
}

/* Batches larger than the backend's on-stack buffers; hits-only writes. */
TEST(large_batches)
{
	enum { N = 3000, HITS = 1234 };
	struct kvrt *k = open_emb(0);
	struct kvrt_space *a, *b;
	uint8_t (*h)[H] = calloc(N, H);
	uint32_t *ids = calloc(N, sizeof(*ids)), *got = calloc(N, sizeof(*got));
	uint64_t *dev = calloc(N, sizeof(*dev));
	int bad = 0;

	REQUIRE(k && h && ids && got && dev);
	for (uint32_t i = 0; i < N; i++)
		hfill(h[i], 5, i);
	a = sopen(k, "big", KVRT_SPACE_CREATE, BB, 4096 * BB);
	b = sopen(k, "big", 0, 0, 0);
	REQUIRE(a && b);
	REQUIRE(kvrt_alloc_blocks(a, HITS, ids) == 0);
	CHECK_EQ(kvrt_publish(a, HITS, ids, h, NULL, NULL), 0);
	memset(got, 0xee, N * sizeof(*got));
	memset(dev, 0xee, N * sizeof(*dev));
	CHECK_EQ(kvrt_lookup(b, N, h, got, dev), HITS);
	for (int i = 0; i < N; i++) {
		if (i < HITS)
			bad += got[i] != ids[i] || dev[i] != 0;
		else
			bad += got[i] != 0xeeeeeeeeU || dev[i] != 0xeeeeeeeeeeeeeeeeULL;
	}
	CHECK_EQ(bad, 0);
	CHECK_EQ(kvrt_release(b, HITS, got), 0);
	kvrt_close(k);
	free(dev);
	free(got);
	free(ids);
	free(h);
}

struct racer {
	struct kvrt *k;
	int id;
	int errors;
};

/* Join, use and leave a persistent space while others destroy and recreate it. */
static void *racer(void *arg)
{
	struct racer *r = arg;
	uint8_t h[1][H];

	hfill(h[0], 6, 0);
	for (int it = 0; it < 200; it++) {
		struct kvrt_space *s;
		uint32_t x, got;
		int ret;

		if (r->id == 0 && it % 3 == 0) {
			ret = kvrt_space_destroy(r->k, "race");
			r->errors += ret && ret != -ENOENT;
			continue;
		}
		s = sopen(r->k, "race", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, BB, 64 * BB);
		if (!s) {
			r->errors++;
			continue;
		}
		ret = kvrt_lookup(s, 1, h, &got, NULL);
		if (ret == 1) {
			r->errors += kvrt_release(s, 1, &got) != 0;
		} else if (ret == 0 && !kvrt_alloc_blocks(s, 1, &x)) {
			ret = kvrt_publish(s, 1, &x, h, NULL, NULL);
			r->errors += ret < 0;
			if (ret >= 0)
				r->errors += kvrt_release(s, 1, &x) != 0;
		} else if (ret < 0) {
			r->errors++;
		}
		if (it % 2) {
			struct kvrt_event ev[8];

			r->errors += kvrt_events_fd(s) < 0;
			r->errors += kvrt_read_events(s, ev, 8) < 0;
		}
		kvrt_space_close(s);
	}
	return NULL;
}

TEST(join_close_destroy_race)
{
	struct kvrt *k = open_emb(0);
	struct racer r[4];
	pthread_t th[4];

	REQUIRE(k);
	for (int i = 0; i < 4; i++) {
		r[i] = (struct racer){ .k = k, .id = i };
		pthread_create(&th[i], NULL, racer, &r[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(r[i].errors, 0);
	}
	kvrt_close(k);	/* whatever persistent space is left goes here */
}

/*
 * A hostile layout: the preset with one stride moved, e.g. the fuzzer's
 * one-layer layout whose kv_stride is one pool block, which made the V
 * half of the last block lie past the space's mapping.  Each must be
 * refused with -EINVAL and left as it was, and a copy with the one that
 * was accepted before must not be possible.
 */
static void layout_for_space_refuses_strides(struct kvrt_space *s, uint64_t pool_block)
{
	struct kvrt_layout l, before;
	int64_t *fields[6];
	unsigned int i;

	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 2, 64, 16, 1,
				  KVRT_DTYPE_BF16), 0);
	l.kv_stride = (int64_t)pool_block;
	before = l;
	CHECK_EQ(kvrt_layout_for_space(&l, s), -EINVAL);
	CHECK_EQ(memcmp(&l, &before, sizeof(l)), 0);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 64, 16, 1,
				  KVRT_DTYPE_BF16), 0);
	fields[0] = &l.layer_stride;
	fields[1] = &l.kv_stride;
	fields[2] = &l.token_stride;
	fields[3] = &l.head_stride;
	fields[4] = &l.scale_layer_stride;
	fields[5] = &l.scale_block_stride;
	for (i = 0; i < 6; i++) {
		struct kvrt_layout m = l;

		*(int64_t *)((char *)&m + ((char *)fields[i] - (char *)&l)) += 2;
		before = m;
		CHECK_EQ(kvrt_layout_for_space(&m, s), -EINVAL);
		CHECK_EQ(memcmp(&m, &before, sizeof(m)), 0);
	}
}

/*
 * kvrt_layout_for_space: block i of the layout is block i of the space,
 * at kvrt_block_addr(), with the preset's offsets inside the block.
 */
TEST(layout_for_space)
{
	const uint64_t block = 5 * BB;	/* more than the 16 KiB the layout needs */
	struct kvrt_layout l, preset, lm;
	struct kvrt_space *s, *small;
	uint64_t need, off;
	struct kvrt *k;

	k = open_emb(8 << 20);
	CHECK(k != NULL);
	if (!k)
		return;
	s = sopen(k, "lfs", KVRT_SPACE_CREATE, block, 8 * block);
	small = sopen(k, "lfs-small", KVRT_SPACE_CREATE, BB, 8 * BB);
	CHECK(s != NULL && small != NULL);
	if (!s || !small)
		goto out;
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 64, 16, 1,
				  KVRT_DTYPE_BF16), 0);
	preset = l;
	CHECK_EQ(kvrt_layout_block_bytes(&l, &need), 0);
	CHECK_EQ(need, 2ULL * 2 * 16 * 2 * 64 * 2);
	CHECK_EQ(kvrt_layout_for_space(NULL, s), -EINVAL);
	CHECK_EQ(kvrt_layout_for_space(&l, NULL), -EINVAL);
	CHECK_EQ(kvrt_layout_for_space(&l, small), -E2BIG);
	CHECK_EQ(memcmp(&l, &preset, sizeof(l)), 0);	/* a failure changes nothing */
	CHECK_EQ(kvrt_layout_for_space(&l, s), 0);
	CHECK_EQ(l.block_stride, (int64_t)block);
	CHECK_EQ(l.num_blocks, 8);
	for (uint32_t b = 0; b < 8; b++) {
		/* layer 1, V, token 5, head 1: the preset's offset within block b */
		int64_t in = preset.layer_stride + preset.kv_stride + 5 * preset.token_stride +
			     preset.head_stride;
		uint8_t *want = (uint8_t *)kvrt_block_addr(s, b) + in;
		uint8_t *got = (uint8_t *)kvrt_space_base(s) + b * l.block_stride + in;

		CHECK(kvrt_block_addr(s, b) != NULL);
		CHECK(want == got);
	}
	CHECK_EQ(kvrt_layout_init(&lm, KVRT_LAYOUT_LAYER_MAJOR, 2, 2, 64, 16, 8,
				  KVRT_DTYPE_BF16), 0);
	CHECK_EQ(kvrt_layout_for_space(&lm, s), -EINVAL);
	layout_for_space_refuses_strides(s, block);
	/* fp8: only with the scales inside the block, and they follow the stride */
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 64, 16, 1,
				  KVRT_DTYPE_FP8_E4M3), 0);
	CHECK_EQ(kvrt_layout_for_space(&l, s), -EINVAL);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), 0);
	CHECK_EQ(kvrt_layout_for_space(&l, s), 0);
	CHECK_EQ(l.block_stride, (int64_t)block);
	CHECK_EQ(l.scale_block_stride, (int64_t)(block / sizeof(float)));
out:
	if (small)
		kvrt_space_close(small);
	if (s)
		kvrt_space_close(s);
	kvrt_close(k);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	RUN(version_0_2);
	RUN(namespaces_are_per_handle);
	RUN(persistence_lives_in_the_handle);
	RUN(events_fd_is_an_eventfd);
	RUN(poll_wakes_on_eviction);
	RUN(pool_cap_evicts_with_cause_pool);
	RUN(large_batches);
	RUN(join_close_destroy_race);
	RUN(layout_for_space);
	return tap_done("test_prefix");
}
