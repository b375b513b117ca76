// SPDX-License-Identifier: MIT
/*
 * test_async.cpp: the emulator's cp.async (emu_async.h, through
 * ../kvrt_async.cuh) has the hardware's latest-possible semantics, so the
 * mistakes an eager emulator would hide fail here:
 *
 *   - a copy is in shared memory after its thread's wait, in issue order;
 *   - a read before the wait sees the poison (or a ring's stale stage);
 *   - wait_group N leaves exactly the newest N groups pending, and the
 *     open (uncommitted) group is not performed by it;
 *   - another thread's copy read before the barrier after the wait is
 *     seen stale in some thread orders, and always right after it.
 *
 * One TAP result per check, then "# test_async: N passed, ...".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kvrt_async.cuh"
#include "../../selftests/tap.h"

using namespace kvgpu;

constexpr unsigned kThreads = 64;

/* Global source: word i of thread t is t * 1000 + i. */
static uint32_t src[kThreads][16] __attribute__((aligned(16)));

static void fill_src()
{
	for (unsigned t = 0; t < kThreads; t++)
		for (unsigned i = 0; i < 16; i++)
			src[t][i] = t * 1000 + i;
}

struct Tile {
	uint32_t w[kThreads][16];
};

/* Each thread copies its 16 words (4 x 16 bytes) and reads word 0 and 15, with or without waiting. */
static bool own_copy(bool wait, unsigned seed, unsigned *poisoned)
{
	uint32_t got[kThreads][2];

	kvrt_emu::launch([&] {
		KVRT_SHARED(Tile, sm);
		const unsigned t = threadIdx.x;

		for (int i = 0; i < 16; i += 4)
			cp_async_16(&sm.w[t][i], &src[t][i]);
		cp_async_commit();
		if (wait)
			cp_async_wait<0>();
		got[t][0] = sm.w[t][0];
		got[t][1] = sm.w[t][15];
	}, 1, kThreads, seed);
	bool right = true;

	*poisoned = 0;
	for (unsigned t = 0; t < kThreads; t++) {
		right &= got[t][0] == src[t][0] && got[t][1] == src[t][15];
		*poisoned += got[t][0] == 0xffffffffu && got[t][1] == 0xffffffffu;
	}
	return right;
}

static void test_own_copy()
{
	unsigned poisoned;
	bool right;

	tap_result(own_copy(true, 1, &poisoned), "cp.async 16: own copy right after wait_group 0");
	right = own_copy(false, 1, &poisoned);
	tap_result(!right && poisoned == kThreads,
		   "cp.async 16: a read before the wait sees the poison (%u of %u threads)",
		   poisoned, kThreads);
}

/* .ca sizes, and two copies to one place in one group: the later lands last. */
static void test_sizes_and_order()
{
	uint32_t got[kThreads][4];

	kvrt_emu::launch([&] {
		KVRT_SHARED(Tile, sm);
		const unsigned t = threadIdx.x;

		cp_async_4(&sm.w[t][0], &src[t][1]);
		cp_async_8(&sm.w[t][2], &src[t][4]);
		cp_async_16(&sm.w[t][4], &src[t][8]);
		cp_async_4(&sm.w[t][4], &src[t][0]);	/* after the 16 over it */
		cp_async_wait_all();
		got[t][0] = sm.w[t][0];
		got[t][1] = sm.w[t][3];
		got[t][2] = sm.w[t][4];
		got[t][3] = sm.w[t][7];
	}, 1, kThreads, 2);
	bool ok = true;

	for (unsigned t = 0; t < kThreads; t++)
		ok &= got[t][0] == src[t][1] && got[t][1] == src[t][5] && got[t][2] == src[t][0] &&
		      got[t][3] == src[t][11];
	tap_result(ok, "cp.async 4/8/16 and wait_all: sizes, and issue order within a group");
}

/* Three groups, then wait_group 1; and the open group is not waited for. */
static void test_wait_group()
{
	uint32_t got[kThreads][5];
	size_t pending[kThreads];

	kvrt_emu::launch([&] {
		KVRT_SHARED(Tile, sm);
		const unsigned t = threadIdx.x;

		for (int g = 0; g < 3; g++) {
			cp_async_16(&sm.w[t][4 * g], &src[t][4 * g]);
			cp_async_commit();
		}
		cp_async_16(&sm.w[t][12], &src[t][12]);	/* open group */
		cp_async_wait<1>();
		got[t][0] = sm.w[t][0];
		got[t][1] = sm.w[t][4];
		got[t][2] = sm.w[t][8];
		got[t][3] = sm.w[t][12];
		pending[t] = kvrt_emu::cp_async_pending();
		cp_async_wait<0>();
		got[t][4] = sm.w[t][12];	/* still open: wait_group does not commit */
	}, 1, kThreads, 3);
	bool ok = true;

	for (unsigned t = 0; t < kThreads; t++)
		ok &= got[t][0] == src[t][0] && got[t][1] == src[t][4] && got[t][2] == 0xffffffffu &&
		      got[t][3] == 0xffffffffu && got[t][4] == 0xffffffffu && pending[t] == 2;
	tap_result(ok, "wait_group 1 of 3 groups: two land, the newest and the open group do not");
}

/*
 * A two-stage ring: stage 0 holds step 0, the copy of step 2 into stage 0
 * is issued, and the thread reads stage 0 again before waiting: it must see
 * step 0's (stale) words, not step 2's.
 */
static void test_ring_stale()
{
	uint32_t got[kThreads][2];

	kvrt_emu::launch([&] {
		KVRT_SHARED(Tile, sm);
		const unsigned t = threadIdx.x;

		cp_async_16(&sm.w[t][0], &src[t][0]);	/* step 0 -> stage 0 */
		cp_async_commit();
		cp_async_16(&sm.w[t][4], &src[t][4]);	/* step 1 -> stage 1 */
		cp_async_commit();
		cp_async_wait<1>();
		cp_async_16(&sm.w[t][0], &src[t][8]);	/* step 2 -> stage 0 */
		cp_async_commit();
		got[t][0] = sm.w[t][0];	/* too early: step 0's */
		cp_async_wait<0>();
		got[t][1] = sm.w[t][0];
	}, 1, kThreads, 4);
	bool ok = true;

	for (unsigned t = 0; t < kThreads; t++)
		ok &= got[t][0] == src[t][0] && got[t][1] == src[t][8];
	tap_result(ok, "a ring stage read before its refill's wait holds the old step");
}

/* Thread t reads the words thread t ^ 1 copied, after its wait, with or without a barrier. */
static unsigned cross_thread(bool barrier, unsigned seed)
{
	unsigned wrong = 0;

	kvrt_emu::launch([&] {
		KVRT_SHARED(Tile, sm);
		const unsigned t = threadIdx.x;

		cp_async_16(&sm.w[t][0], &src[t][0]);
		cp_async_wait_all();
		if (barrier)
			__syncthreads();
		wrong += sm.w[t ^ 1][0] != src[t ^ 1][0];
		__syncthreads();	/* every thread has waited: nothing pends */
	}, 1, kThreads, seed);
	return wrong;
}

static void test_cross_thread()
{
	unsigned early = 0, late = 0;

	for (unsigned s = 0; s < 8; s++) {
		early += cross_thread(false, 100 + s);
		late += cross_thread(true, 100 + s);
	}
	tap_result(early > 0, "another thread's copy read before the barrier is seen stale (%u reads of %u)",
		   early, 8 * kThreads);
	tap_result(late == 0, "another thread's copy read after wait and barrier is right (%u wrong)", late);
}

/* A CTA starts with nothing pending from the one before. */
static void test_cta_reset()
{
	size_t pending[2][kThreads];

	kvrt_emu::launch([&] {
		KVRT_SHARED(Tile, sm);
		const unsigned t = threadIdx.x;

		pending[blockIdx.x][t] = kvrt_emu::cp_async_pending();
		cp_async_16(&sm.w[t][0], &src[t][0]);
		cp_async_commit();	/* never waited for */
	}, 2, kThreads, 5);
	bool ok = true;

	for (unsigned t = 0; t < kThreads; t++)
		ok &= pending[0][t] == 0 && pending[1][t] == 0;
	tap_result(ok, "copies never waited for do not carry into the next CTA");
}

int main()
{
	fill_src();
	test_own_copy();
	test_sizes_and_order();
	test_wait_group();
	test_ring_stale();
	test_cross_thread();
	test_cta_reset();
	return tap_done("test_async");
}
