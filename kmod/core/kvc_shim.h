/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The few things kvcore needs from its host: fixed-width types, bool, errnos,
 * zeroed allocation that may fail, copy, random bytes for the hash key,
 * and a point to yield the CPU in long loops.  The kernel, libkvrt's embedded
 * backend and the userspace tests each compile kvcore against this file.
 */
#ifndef KVC_SHIM_H
#define KVC_SHIM_H

#ifdef __KERNEL__
#include <linux/errno.h>
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/types.h>
typedef u8 kvc_u8;
typedef u32 kvc_u32;
typedef u64 kvc_u64;
/* Callers make kvcore's arrays grow: charge them to the caller's cgroup. */
static inline void *kvc_zalloc(size_t n) { return kvzalloc(n, GFP_KERNEL_ACCOUNT | __GFP_NOWARN); }
static inline void kvc_free_mem(void *p) { kvfree(p); }
static inline void kvc_random_bytes(void *buf, size_t n) { get_random_bytes(buf, n); }
static inline void kvc_yield(void) { cond_resched(); }
#else
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
typedef uint8_t kvc_u8;
typedef uint32_t kvc_u32;
typedef uint64_t kvc_u64;
#ifdef KVC_FAULT_INJECTION
/* Tests set this to make the Nth allocation from now fail. */
extern long kvc_fail_alloc_countdown;
#endif
static inline void *kvc_zalloc(size_t n)
{
#ifdef KVC_FAULT_INJECTION
	if (kvc_fail_alloc_countdown > 0 && --kvc_fail_alloc_countdown == 0)
		return NULL;
#endif
	return calloc(1, n);
}

static inline void kvc_free_mem(void *p) { free(p); }

/* A key nobody else can predict; on failure a per-call address still varies it. */
static inline void kvc_random_bytes(void *buf, size_t n)
{
	if (getrandom(buf, n, 0) != (ssize_t)n) {
		uintptr_t mix = (uintptr_t)buf ^ (uintptr_t)&n;

		memcpy(buf, &mix, n < sizeof(mix) ? n : sizeof(mix));
	}
}

static inline void kvc_yield(void) { }
#endif

#endif /* KVC_SHIM_H */
