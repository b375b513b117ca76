// SPDX-License-Identifier: MIT
/*
 * emu_async.h: the emulator's asynchronous copies (cp.async), included by
 * emu.h.  A copy a thread issues is only recorded; it lands in shared
 * memory when that thread waits for its group (cp.async.wait_group N
 * performs every committed group but the newest N, oldest first, each in
 * issue order; wait_all commits the open group and performs them all).
 * Copies are therefore as late as the hardware may make them: a kernel
 * that reads a tile before its wait sees the NaN poison or the ring's
 * stale data, and one that reads another thread's copy before the barrier
 * after that thread's wait sees it whenever the scheduler runs the
 * reader first.  The global bytes are read at the wait too.
 *
 * State is per thread of the CTA and dropped when a CTA starts (copies a
 * thread never waited for are never performed, as nothing may read them).
 */
#ifndef KVRT_EMU_ASYNC_H
#define KVRT_EMU_ASYNC_H

#include <stdio.h>
#include <stdlib.h>

#include <deque>
#include <vector>

namespace kvrt_emu {

struct AsyncCopy {
	void *dst;
	const void *src;
	unsigned bytes;
};

/* One thread's copies: the open group, then committed groups, oldest first. */
struct AsyncQueue {
	std::vector<AsyncCopy> open;
	std::deque<std::vector<AsyncCopy>> committed;
};

inline AsyncQueue async_queues[1024];

inline void async_cta_begin()
{
	for (auto &q : async_queues) {
		q.open.clear();
		q.committed.clear();
	}
}

/* cp.async.{ca,cg}.shared.global [dst], [src], bytes: both aligned to bytes. */
inline void cp_async(void *dst, const void *src, unsigned bytes)
{
	if ((bytes != 4 && bytes != 8 && bytes != 16) || (uintptr_t)dst % bytes ||
	    (uintptr_t)src % bytes) {
		fprintf(stderr, "emu: cp.async of %u bytes, %p <- %p: size or alignment\n", bytes,
			dst, src);
		abort();
	}
	async_queues[thread_index()].open.push_back(AsyncCopy{ dst, src, bytes });
}

inline void cp_async_commit()
{
	AsyncQueue &q = async_queues[thread_index()];

	q.committed.push_back(std::move(q.open));
	q.open.clear();
}

/* cp.async.wait_group n: all but the newest n committed groups have landed. */
inline void cp_async_wait(unsigned n)
{
	AsyncQueue &q = async_queues[thread_index()];

	while (q.committed.size() > n) {
		for (const AsyncCopy &c : q.committed.front())
			memcpy(c.dst, c.src, c.bytes);
		q.committed.pop_front();
	}
}

inline void cp_async_wait_all()
{
	cp_async_commit();
	cp_async_wait(0);
}

/* Copies of this thread not yet performed (tests). */
inline size_t cp_async_pending()
{
	const AsyncQueue &q = async_queues[thread_index()];
	size_t n = q.open.size();

	for (const auto &g : q.committed)
		n += g.size();
	return n;
}

} /* namespace kvrt_emu */

#endif /* KVRT_EMU_ASYNC_H */
