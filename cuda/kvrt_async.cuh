// SPDX-License-Identifier: MIT
/*
 * kvrt_async.cuh: asynchronous global-to-shared copies (cp.async, sm_80+).
 *
 *   cp_async_16(dst, src)   16 bytes, L1 bypassed (.cg); both 16-aligned
 *   cp_async_8/_4(dst, src) 8 / 4 bytes through L1 (.ca: .cg takes 16 only)
 *   cp_async_commit()       close the thread's open group of copies
 *   cp_async_wait<N>()      all but the thread's newest N groups have landed
 *   cp_async_wait_all()     every copy of the thread has landed
 *
 * A copy is visible to the thread that issued it after its wait, and to
 * other threads only after a barrier that follows that wait.  On the
 * emulator (KVRT_EMU) the copies are performed at the wait and not before
 * (tests/emu_async.h), so a read that comes too early fails the tests.
 */
#ifndef KVRT_ASYNC_CUH
#define KVRT_ASYNC_CUH

#include "kvrt_common.cuh"

namespace kvgpu {

#ifdef KVRT_EMU
KVRT_DEV void cp_async_16(void *dst, const void *src)
{
	kvrt_emu::cp_async(dst, src, 16);
}

KVRT_DEV void cp_async_8(void *dst, const void *src)
{
	kvrt_emu::cp_async(dst, src, 8);
}

KVRT_DEV void cp_async_4(void *dst, const void *src)
{
	kvrt_emu::cp_async(dst, src, 4);
}

KVRT_DEV void cp_async_commit()
{
	kvrt_emu::cp_async_commit();
}

template <int N>
KVRT_DEV void cp_async_wait()
{
	kvrt_emu::cp_async_wait(N);
}

KVRT_DEV void cp_async_wait_all()
{
	kvrt_emu::cp_async_wait_all();
}
#else
KVRT_DEV uint32_t smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

KVRT_DEV void cp_async_16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"(smem_addr(dst)), "l"(src)
		     : "memory");
}

KVRT_DEV void cp_async_8(void *dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" : : "r"(smem_addr(dst)), "l"(src)
		     : "memory");
}

KVRT_DEV void cp_async_4(void *dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" : : "r"(smem_addr(dst)), "l"(src)
		     : "memory");
}

KVRT_DEV void cp_async_commit()
{
	asm volatile("cp.async.commit_group;" : : : "memory");
}

template <int N>
KVRT_DEV void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");
}

KVRT_DEV void cp_async_wait_all()
{
	asm volatile("cp.async.wait_all;" : : : "memory");
}
#endif

/*
 * One K/V chunk (CB = 16 or 8 bytes) from p, aligned to al (see ld_chunk),
 * to dst in shared memory: asynchronously where the alignment allows it,
 * else loaded and stored now (the padded and odd layouts of the tests),
 * which the same thread's wait then orders like the copies.
 */
template <int CB>
KVRT_DEV void copy_chunk_async(void *dst, const char *p, int al)
{
	if (al >= CB) {
		if constexpr (CB == 16)
			cp_async_16(dst, p);
		else
			cp_async_8(dst, p);
	} else {
		uint32_t r[CB / 4];

		ld_chunk<CB>(r, p, al);
#pragma unroll
		for (int i = 0; i < CB / 4; i++)
			static_cast<uint32_t *>(dst)[i] = r[i];
	}
}

} /* namespace kvgpu */

#endif /* KVRT_ASYNC_CUH */
