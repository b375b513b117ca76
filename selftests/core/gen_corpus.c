// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Writes the seed corpus of fuzz_kvcore into the directory given: a few
 * inputs in the encoding of fuzz_ops.h, one per scenario worth starting
 * from.  Run at build time; nothing binary is kept in the tree.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "fuzz_ops.h"

static unsigned char buf[4096];
static size_t len;

static void u8(unsigned int v) { buf[len++] = (unsigned char)v; }
static void le(unsigned long long v, int bytes)
{
	while (bytes--) {
		u8(v & 0xff);
		v >>= 8;
	}
}

/* owner index: 0 is "nobody", 1..8 the owners, 9 is 0xffffffff */
static void geo(unsigned int g, unsigned long long bb, unsigned long long nb, unsigned int pool)
{
	u8(g);
	if ((g & 7) == GEO_BB_RAW64)
		le(bb, 8);
	else if ((g & 7) == GEO_BB_RAW32)
		le(bb, 4);
	le(g & GEO_RAW_NB ? nb : nb - 1, g & GEO_RAW_NB ? 8 : 2);
	u8(pool);
}
static void alloc(unsigned int o, unsigned int n) { u8(FOP_ALLOC); u8(o); le(n, 2); }
static void free_owned(unsigned int o, unsigned int k) { u8(FOP_FREE_OWNED); u8(o); u8(k); }
static void release(unsigned int o) { u8(FOP_RELEASE); u8(o); }
static void mode(unsigned int m, unsigned int arg) { u8(FOP_HOST_MODE); u8(m); le(arg, 4); }
static void fault(unsigned int nth) { u8(FOP_FAULT); u8(nth); }
/* Publish the owner's first k blocks under hashes h, h+1, ... at priority prio. */
static void publish(unsigned int o, unsigned int k, unsigned int h, unsigned int prio)
{
	unsigned int i;

	u8(FOP_PUBLISH); u8(o); u8(k);
	for (i = 0; i < k; i++) {
		le(i, 2);	/* the owner's blocks as listed before the call */
		u8(h + i);
		u8(prio);
	}
}
static void lookup(unsigned int o, unsigned int k, unsigned int h)
{
	unsigned int i;

	u8(FOP_LOOKUP); u8(o); u8(k);
	for (i = 0; i < k; i++)
		u8(h + i);
}
/* Look up hash h k times in one call. */
static void lookup_same(unsigned int o, unsigned int k, unsigned int h)
{
	unsigned int i;

	u8(FOP_LOOKUP); u8(o); u8(k);
	for (i = 0; i < k; i++)
		u8(h);
}
/* Release the holder's first k references (a block held twice counts twice). */
static void unref(unsigned int o, unsigned int k)
{
	unsigned int i;

	u8(FOP_UNREF); u8(o); u8(k);
	for (i = 0; i < k; i++)
		le(i, 2);
}
static void drop_refs(unsigned int o) { u8(FOP_DROP_REFS); u8(o); }
static void evict(unsigned int n, unsigned int cause) { u8(FOP_EVICT); u8(n); u8(cause); }
static void reclaim(unsigned int blk, unsigned int off, unsigned int nblk, unsigned int len_off,
		    unsigned int cause)
{
	u8(FOP_RECLAIM); le(blk, 2); le(off, 2); u8(nblk); le(len_off, 2); u8(cause);
}
static void refill(unsigned int kind, unsigned int v) { u8(FOP_REFILL); u8(kind); u8(v); }

static int emit(const char *dir, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
		return 1;
	}
	len = 0;
	return 0;
}

int main(int argc, char **argv)
{
	const char *d = argc > 1 ? argv[1] : ".";
	int bad = 0;

	/* Two owners, frees, release. */
	geo(4, 0, 64, 0);
	alloc(1, 5); alloc(2, 3); free_owned(1, 2); alloc(3, 7); release(2);
	free_owned(3, 255); alloc(1, 60);
	bad |= emit(d, "basic");

	/* 3000-byte blocks on page-sized grows: blocks straddle grows. */
	geo(3, 0, 1000, 0);
	mode(HOST_CHUNK, 4095); alloc(1, 1); alloc(1, 1); alloc(2, 10);
	mode(HOST_PARTIAL, 7); alloc(3, 20); free_owned(2, 255); alloc(4, 13);
	bad |= emit(d, "straddle");

	/* Quota and host pool run out. */
	geo(4, 0, 8, 0);
	alloc(1, 9); alloc(1, 8); alloc(2, 1); free_owned(1, 3); alloc(2, 4); alloc(2, 3);
	geo(4, 0, 4000, 1);
	alloc(1, 10); alloc(2, 10); mode(HOST_ZERO, 0); alloc(3, 1);
	bad |= emit(d, "quota");

	/* Host errors, scripted partial grows, values that are no errno. */
	geo(4, 0, 100, 0);
	alloc(1, 2); mode(HOST_ERRNO, 4); alloc(1, 3); mode(HOST_ERRNO, 0x80000001u);
	alloc(1, 3);
	u8(FOP_HOST_SCRIPT); u8(3);
	u8(SCR_BYTES); le(8191, 4); u8(SCR_BYTES); le(100, 4); u8(SCR_ERRNO); le(3, 4);
	alloc(2, 5); mode(HOST_EXACT, 0); alloc(2, 5);
	bad |= emit(d, "host-errors");

	/* kvcore's allocations fail: first arrays, then growing them. */
	geo(4, 0, 1000, 0);
	fault(1); alloc(1, 3); alloc(1, 3); alloc(1, 64); fault(2); alloc(2, 1);
	free_owned(1, 4); fault(1); alloc(2, 4); alloc(2, 40); release(1);
	bad |= emit(d, "enomem");

	/* Bad FREE batches: duplicates, foreign, unbacked, owner 0. */
	geo(4, 0, 32, 0);
	alloc(1, 4); alloc(2, 4);
	u8(FOP_FREE_RAW); u8(1); u8(2); le(0, 2); le(0, 2);
	u8(FOP_FREE_RAW); u8(1); u8(2); le(0, 2); le(5, 2);
	u8(FOP_FREE_RAW); u8(1); u8(1); le(0xffff, 2);
	u8(FOP_FREE_RAW); u8(0); u8(1); le(1, 2);
	u8(FOP_FREE_RAW); u8(1); u8(0);
	u8(FOP_FREE_RAW); u8(1); u8(4); le(3, 2); le(2, 2); le(1, 2); le(0, 2);
	bad |= emit(d, "bad-free");

	/* Geometries at the edges: a range that wraps, huge blocks, 1-byte blocks. */
	geo(GEO_BB_RAW64 | GEO_RAW_NB, 1ULL << 63, 2, 0);
	u8(FOP_REINIT); geo(GEO_BB_RAW64 | GEO_RAW_NB, 1ULL << 62, 3, 0);
	alloc(1, 2); alloc(1, 1);
	u8(FOP_REINIT); geo(0, 0, 1000, 0);
	alloc(1, 1000); alloc(1, 1);
	u8(FOP_REINIT); geo(GEO_BB_RAW32 | GEO_RAW_NB, 4096, 1ULL << 31, 2);
	alloc(1, 20); alloc(2, 20); release(1);
	bad |= emit(d, "geometry");

	/* Publish, dedup by another owner, lookups, release to cached, eviction by ALLOC. */
	geo(4, 0, 16, 0);
	alloc(1, 8); publish(1, 4, 0, 50); alloc(2, 2); publish(2, 2, 1, 10);
	lookup(3, 6, 0); unref(1, 4); unref(3, 2); drop_refs(2); drop_refs(3);
	u8(FOP_LOOKUP); u8(3); u8(3); u8(0); u8(20); u8(1);	/* a miss in the middle */
	u8(FOP_UNREF); u8(3); u8(2); le(0, 2); le(0, 2);	/* held once, released twice */
	alloc(4, 8); alloc(4, 4); alloc(4, 1);
	bad |= emit(d, "prefix");

	/* Priorities decide the eviction order; an ENOSPC that must evict nothing. */
	geo(4, 0, 8, 0);
	alloc(1, 8); publish(1, 2, 0, 0); publish(1, 2, 2, 100); publish(1, 2, 4, 50);
	unref(1, 6); alloc(2, 3); lookup(3, 2, 2); alloc(2, 4); alloc(2, 2); evict(9, 4);
	bad |= emit(d, "priority");

	/* The pool and the tenant's limit stop growth: POOL and TENANT evictions. */
	geo(4, 0, 64, 1);
	alloc(1, 12); publish(1, 12, 0, 50); unref(1, 12); alloc(2, 8);
	mode(HOST_ERRNO, 121); alloc(2, 2); mode(HOST_ZERO, 0); alloc(2, 2);
	alloc(2, 30);		/* more than free + cached: ENOSPC, nothing evicted */
	bad |= emit(d, "pressure");

	/* Reclaim makes holes; ALLOC refills them, and the refill fails every way. */
	geo(4, 0, 16, 0);
	alloc(1, 12); publish(1, 3, 0, 50); unref(1, 3); release(1);
	reclaim(11, 0, 1, 1, 3);	/* one byte past the backed blocks: refused */
	reclaim(0, 0, 6, 0, 3); reclaim(7, 100, 1, 200, 4); alloc(2, 8);
	refill(1, 0); alloc(2, 4); refill(1, 1); alloc(2, 1); refill(1, 2); alloc(2, 1);
	refill(2, 5); u8(0); u8(3); u8(1); u8(0); u8(2); alloc(2, 5); refill(0, 0); alloc(2, 3);
	bad |= emit(d, "holes");

	/* Reference tables that fail to grow, and nonsense ids and priorities. */
	geo(4, 0, 128, 0);
	alloc(1, 40); fault(1); publish(1, 1, 0, 50); publish(1, 1, 0, 50); fault(2);
	lookup(2, 1, 0); lookup(2, 1, 0); publish(1, 16, 1, 250); publish(1, 16, 1, 50);
	fault(1); lookup(2, 16, 0); lookup(2, 16, 0);
	u8(FOP_UNREF); u8(2); u8(3); le(0xffff, 2); le(0, 2); le(0, 2);
	u8(FOP_UNREF); u8(2); u8(3); le(0, 2); le(1, 2); le(2, 2);
	unref(2, 2); unref(2, 2); drop_refs(2);
	u8(FOP_PUBLISH); u8(1); u8(2); le(5, 2); u8(30); u8(1); le(5, 2); u8(31); u8(1);
	bad |= emit(d, "prefix-errors");

	/* Two holders hammer one hash up to the reader bound and the per-holder limit. */
	geo(4, 0, 16, 0);
	u8(FOP_LIMITS); u8(99); u8(15);
	alloc(1, 2); publish(1, 1, 0, 50);
	lookup_same(2, 64, 0); lookup_same(3, 40, 0); lookup_same(2, 64, 0);
	lookup_same(3, 1, 0); unref(2, 16); lookup_same(3, 1, 0);
	publish(1, 1, 0, 50); drop_refs(2); lookup_same(3, 60, 0);
	bad |= emit(d, "reader-bounds");

	return bad;
}
