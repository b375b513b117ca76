// SPDX-License-Identifier: MIT
/*
 * emu.cpp: the fiber scheduler behind emu.h.  One CTA at a time, one
 * ucontext fiber per thread; fibers switch only at barriers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <algorithm>
#include <random>
#include <vector>

#include "emu.h"

namespace kvrt_emu {
namespace {

enum State { RUNNABLE, WAIT_CTA, WAIT_WARP, DONE };

struct Fiber {
	ucontext_t ctx;
	State state;
	char *stack;
};

constexpr size_t kStack = 512 * 1024;
constexpr size_t kShared = 64 * 1024;

std::vector<Fiber> fibers;
ucontext_t sched_ctx;
unsigned cur, cur_block, grid, block;
const std::function<void()> *body;
uint64_t xbuf[1024];		/* per lane: the value it offers in a shuffle */
alignas(64) unsigned char shared[kShared];

void fiber_main()
{
	(*body)();
	fibers[cur].state = DONE;
	/* returns to uc_link: the scheduler */
}

[[noreturn]] void die(const char *what)
{
	fprintf(stderr, "emu: block %u: %s\n", cur_block, what);
	for (unsigned i = 0; i < fibers.size(); i++)
		fprintf(stderr, "%u:%d%s", i, fibers[i].state, i % 16 == 15 ? "\n" : " ");
	abort();
}

void wait(State s)
{
	fibers[cur].state = s;
	swapcontext(&fibers[cur].ctx, &sched_ctx);
}

/* Release the barriers that every participant has reached. */
bool release()
{
	bool any = false, cta = true, some_cta = false;

	for (auto &f : fibers) {
		if (f.state == WAIT_CTA)
			some_cta = true;
		else if (f.state != DONE)
			cta = false;
	}
	if (cta && some_cta) {
		for (auto &f : fibers)
			if (f.state == WAIT_CTA)
				f.state = RUNNABLE;
		return true;
	}
	for (unsigned w = 0; w * 32 < fibers.size(); w++) {
		unsigned waiting = 0, done = 0;

		for (unsigned l = 0; l < 32; l++) {
			State s = fibers[w * 32 + l].state;

			waiting += s == WAIT_WARP;
			done += s == DONE;
		}
		if (waiting == 32) {
			for (unsigned l = 0; l < 32; l++)
				fibers[w * 32 + l].state = RUNNABLE;
			any = true;
		} else if (waiting && waiting + done == 32) {
			die("warp barrier or shuffle with exited lanes");
		}
	}
	return any;
}

} /* namespace */

unsigned thread_index()
{
	return cur;
}

unsigned block_index()
{
	return cur_block;
}

unsigned grid_size()
{
	return grid;
}

unsigned block_size()
{
	return block;
}

void sync_cta()
{
	wait(WAIT_CTA);
}

void sync_warp()
{
	wait(WAIT_WARP);
}

uint64_t exchange(uint64_t v, unsigned src_lane)
{
	unsigned base = cur & ~31u;
	uint64_t r;

	xbuf[cur] = v;
	sync_warp();
	r = xbuf[base + src_lane];
	sync_warp();
	return r;
}

void *shared_mem(size_t bytes)
{
	if (bytes > kShared)
		die("shared memory larger than the emulator's");
	return shared;
}

void launch(const std::function<void()> &fn, unsigned g, unsigned b, unsigned seed)
{
	std::mt19937 rng(seed);
	std::vector<unsigned> order(b);

	if (b % 32 || b > 1024)
		die("block size");
	body = &fn;
	grid = g;
	block = b;
	if (fibers.size() != b) {
		for (auto &f : fibers)
			free(f.stack);
		fibers.assign(b, Fiber{});
		for (auto &f : fibers)
			f.stack = static_cast<char *>(malloc(kStack));
	}
	for (unsigned i = 0; i < b; i++)
		order[i] = i;
	for (cur_block = 0; cur_block < g; cur_block++) {
		memset(shared, 0xff, sizeof(shared));	/* NaN floats, -1 ints */
		async_cta_begin();
		for (auto &f : fibers) {
			getcontext(&f.ctx);
			f.ctx.uc_stack.ss_sp = f.stack;
			f.ctx.uc_stack.ss_size = kStack;
			f.ctx.uc_link = &sched_ctx;
			makecontext(&f.ctx, fiber_main, 0);
			f.state = RUNNABLE;
		}
		for (;;) {
			bool ran = false;

			std::shuffle(order.begin(), order.end(), rng);
			for (unsigned i : order) {
				if (fibers[i].state != RUNNABLE)
					continue;
				cur = i;
				swapcontext(&sched_ctx, &fibers[i].ctx);
				ran = true;
			}
			if (release() || ran)
				continue;
			bool all_done = true;

			for (auto &f : fibers)
				all_done &= f.state == DONE;
			if (all_done)
				break;
			die("deadlock: a barrier not every thread reaches");
		}
	}
}

} /* namespace kvrt_emu */
