// SPDX-License-Identifier: MIT
/*
 * bind_overhead.c: the C side of bind_overhead.py.  The same libkvrt calls
 * the Python benchmark makes through the kvrt package, made from C on the
 * same kind of space, timed the same way:
 *
 *   lookup_prefix1000  kvrt_lookup of 1,000 cached hashes (all hits) +
 *                      kvrt_release of the 1,000 ids
 *   publish_batch1000  kvrt_publish of 1,000 owned blocks under new hashes
 *                      (the alloc before and the release after untimed)
 *
 * Usage: bind_overhead REPS ITERS; prints "case ns_per_block" lines, the
 * median of REPS repetitions of ITERS calls each.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrt.h"

#define N 1000

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return v[n / 2];
}

/* Hash i of series s: distinct bytes, as the Python side makes them. */
static void make_hashes(uint8_t (*h)[KVRT_HASH_BYTES], uint32_t series)
{
	for (uint32_t i = 0; i < N; i++) {
		memset(h[i], 0, KVRT_HASH_BYTES);
		memcpy(h[i], &i, 4);
		memcpy(h[i] + 4, &series, 4);
		h[i][31] = 0xA5;
	}
}

#define CHECK(x) do { int r_ = (x); if (r_ < 0) { \
	fprintf(stderr, "bind_overhead: %s: %s\n", #x, strerror(-r_)); exit(1); } } while (0)

int main(int argc, char **argv)
{
	static uint8_t hashes[N][KVRT_HASH_BYTES];
	static uint32_t ids[N], got[N], prio[N];
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED,
				     .flags = KVRT_OPEN_NO_HUGETLB };
	struct kvrt_space_opts so = { .name = "bind-overhead-c", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = 4096,
				      .quota_bytes = 4096ULL * 4 * N };
	int reps = argc > 1 ? atoi(argv[1]) : 11, iters = argc > 2 ? atoi(argv[2]) : 200;
	double t_lookup[99], t_publish[99];
	struct kvrt_space *sp;
	struct kvrt *k;
	uint32_t series = 1;

	if (reps < 1 || reps > 99 || iters < 1) {
		fprintf(stderr, "usage: bind_overhead REPS(1..99) ITERS\n");
		return 2;
	}
	CHECK(kvrt_open(&k, &oo));
	CHECK(kvrt_space_open(k, &so, &sp));
	/* the prefix: published once, released, so it sits cached */
	make_hashes(hashes, 0);
	CHECK(kvrt_alloc_blocks(sp, N, ids));
	for (uint32_t i = 0; i < N; i++)
		prio[i] = KVRT_PRIO_MAX;	/* the publish case's blocks go first */
	CHECK(kvrt_publish(sp, N, ids, (const uint8_t (*)[KVRT_HASH_BYTES])hashes, prio, NULL));
	CHECK(kvrt_release(sp, N, ids));
	for (int r = 0; r < reps; r++) {
		double t0 = now_ns();

		for (int i = 0; i < iters; i++) {
			int hits = kvrt_lookup(sp, N, (const uint8_t (*)[KVRT_HASH_BYTES])hashes,
					       got, NULL);
			if (hits != N) {
				fprintf(stderr, "bind_overhead: lookup found %d of %d\n", hits, N);
				return 1;
			}
			CHECK(kvrt_release(sp, N, got));
		}
		t_lookup[r] = (now_ns() - t0) / iters / N;
	}
	for (int r = 0; r < reps; r++) {
		double sum = 0;

		for (int i = 0; i < iters; i++) {
			double t0;
			int ret;

			make_hashes(hashes, series++);
			CHECK(kvrt_alloc_blocks(sp, N, ids));
			t0 = now_ns();
			ret = kvrt_publish(sp, N, ids, (const uint8_t (*)[KVRT_HASH_BYTES])hashes,
					   NULL, NULL);
			sum += now_ns() - t0;
			CHECK(ret);
			CHECK(kvrt_release(sp, N, ids));
		}
		t_publish[r] = sum / iters / N;
	}
	printf("lookup_prefix1000 %.4g\n", median(t_lookup, reps));
	printf("publish_batch1000 %.4g\n", median(t_publish, reps));
	kvrt_space_close(sp);
	kvrt_close(k);
	return 0;
}
