/* SPDX-License-Identifier: MIT */
/*
 * workers.h: the attention's threads, kept (struct kvrt_workers) or made
 * per call (workers.c).
 */
#ifndef KVRT_WORKERS_H
#define KVRT_WORKERS_H

#include <stdint.h>

struct kvrt_workers;

/* CPUs in this thread's affinity mask, else online CPUs; at least 1. */
uint32_t cpus_available(void);

/* Threads of w, the caller's included. */
uint32_t workers_count(const struct kvrt_workers *w);

/*
 * fn(arg, i) for i in [0, n) (n capped to the object's threads), i = 0 on
 * the calling thread; returns when every one has returned.
 */
void workers_run(struct kvrt_workers *w, uint32_t n, void (*fn)(void *arg, uint32_t index),
		 void *arg);

/*
 * The same on threads created for this call and joined before it returns.
 * An index whose thread cannot be created (memory, pthread_create) does
 * not run: fn must share its work through the indices that do, as the
 * attention's item counter does.
 */
void threads_run(uint32_t n, void (*fn)(void *arg, uint32_t index), void *arg);

#endif /* KVRT_WORKERS_H */
