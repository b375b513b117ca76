// SPDX-License-Identifier: MIT
/*
 * emu_atomic.h: the emulator's atomics and fences, included by emu.h.
 * CTAs run one at a time and fibers switch only at barriers, so a plain
 * read-modify-write is atomic and every write is visible to the next CTA:
 * what the tests check is the logic built on them (which CTA is last),
 * not the memory model.
 */
#ifndef KVRT_EMU_ATOMIC_H
#define KVRT_EMU_ATOMIC_H

static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
	unsigned old = *p;

	*p = old + v;
	return old;
}

static inline void __threadfence()
{
}

#endif /* KVRT_EMU_ATOMIC_H */
