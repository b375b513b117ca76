// SPDX-License-Identifier: MIT
/*
 * workers.c: the attention's threads: kvrt_workers, kept between calls,
 * and threads_run(), created for one call.
 *
 * Creating and joining a thread costs 40-60 us on the 2-core VM (kvbench
 * attn, thread_spawn), paid per extra thread by every call that creates
 * its own, and serially by the caller.  A workers object starts its
 * threads once; they sleep on a condition variable between calls.  A call
 * (workers_run) publishes a function and a generation number, wakes the
 * threads it wants, works as index 0 itself and returns when every
 * participant has checked out, so nothing of the call's stack is touched
 * after it returns.  One call at a time per object (call_lock).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* sched_getaffinity, CPU_COUNT */
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvrt.h"
#include "workers.h"

struct kvrt_workers {
	pthread_mutex_t call_lock;	/* held for a whole call */
	pthread_mutex_t lock;		/* the fields below */
	pthread_cond_t wake, done;
	uint64_t generation;		/* bumped per call */
	uint32_t nthreads;		/* the caller's index 0 included */
	uint32_t participants;		/* indices 1 .. participants - 1 work this call */
	uint32_t pending;		/* participants not checked out yet */
	bool stop;
	void (*fn)(void *arg, uint32_t index);
	void *arg;
	struct worker_slot {
		struct kvrt_workers *w;
		uint32_t index;
		pthread_t tid;
	} slot[];			/* [nthreads - 1], index 1 .. */
};

uint32_t cpus_available(void)
{
	cpu_set_t set;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return (uint32_t)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (uint32_t)n : 1;
}

static void *worker_main(void *arg)
{
	struct worker_slot *me = arg;
	struct kvrt_workers *w = me->w;
	uint64_t seen = 0;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		void (*fn)(void *, uint32_t);
		void *fn_arg;

		while (!w->stop && w->generation == seen)
			pthread_cond_wait(&w->wake, &w->lock);
		if (w->stop)
			break;
		seen = w->generation;
		if (me->index >= w->participants)
			continue;
		fn = w->fn;
		fn_arg = w->arg;
		pthread_mutex_unlock(&w->lock);
		fn(fn_arg, me->index);
		pthread_mutex_lock(&w->lock);
		if (!--w->pending)
			pthread_cond_signal(&w->done);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void stop_threads(struct kvrt_workers *w, uint32_t started)
{
	uint32_t i;

	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < started; i++)
		pthread_join(w->slot[i].tid, NULL);
	pthread_cond_destroy(&w->wake);
	pthread_cond_destroy(&w->done);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->call_lock);
	free(w);
}

int kvrt_workers_create(uint32_t num_threads, struct kvrt_workers **workers)
{
	struct kvrt_workers *w;
	uint32_t n, i;

	if (!workers || num_threads > KVRT_WORKERS_MAX)
		return -EINVAL;
	n = num_threads ? num_threads : cpus_available();
	if (n > KVRT_WORKERS_MAX)
		n = KVRT_WORKERS_MAX;
	w = calloc(1, sizeof(*w) + sizeof(w->slot[0]) * (n - 1));
	if (!w)
		return -ENOMEM;
	w->nthreads = n;
	if (pthread_mutex_init(&w->call_lock, NULL) || pthread_mutex_init(&w->lock, NULL) ||
	    pthread_cond_init(&w->wake, NULL) || pthread_cond_init(&w->done, NULL)) {
		free(w);	/* glibc's init of these cannot fail */
		return -ENOMEM;
	}
	for (i = 0; i < n - 1; i++) {
		w->slot[i] = (struct worker_slot){ .w = w, .index = i + 1 };
		if (pthread_create(&w->slot[i].tid, NULL, worker_main, &w->slot[i])) {
			stop_threads(w, i);
			return -EAGAIN;
		}
	}
	*workers = w;
	return 0;
}

void kvrt_workers_destroy(struct kvrt_workers *workers)
{
	if (workers)
		stop_threads(workers, workers->nthreads - 1);
}

uint32_t workers_count(const struct kvrt_workers *w)
{
	return w->nthreads;
}

/* One thread of threads_run(). */
struct spawned {
	void (*fn)(void *arg, uint32_t index);
	void *arg;
	uint32_t index;
	pthread_t tid;
};

static void *spawned_main(void *arg)
{
	struct spawned *sp = arg;

	sp->fn(sp->arg, sp->index);
	return NULL;
}

void threads_run(uint32_t n, void (*fn)(void *arg, uint32_t index), void *arg)
{
	struct spawned *sp = n > 1 ? calloc(n - 1, sizeof(*sp)) : NULL;
	uint32_t started = 0, i;

	for (; sp && started < n - 1; started++) {
		sp[started] = (struct spawned){ .fn = fn, .arg = arg, .index = started + 1 };
		if (pthread_create(&sp[started].tid, NULL, spawned_main, &sp[started]))
			break;
	}
	fn(arg, 0);
	for (i = 0; i < started; i++)
		pthread_join(sp[i].tid, NULL);
	free(sp);
}

void workers_run(struct kvrt_workers *w, uint32_t n, void (*fn)(void *arg, uint32_t index),
		 void *arg)
{
	if (n > w->nthreads)
		n = w->nthreads;
	if (!n)
		n = 1;
	pthread_mutex_lock(&w->call_lock);
	if (n > 1) {
		pthread_mutex_lock(&w->lock);
		w->fn = fn;
		w->arg = arg;
		w->participants = n;
		w->pending = n - 1;
		w->generation++;
		pthread_cond_broadcast(&w->wake);
		pthread_mutex_unlock(&w->lock);
	}
	fn(arg, 0);
	if (n > 1) {
		pthread_mutex_lock(&w->lock);
		while (w->pending)
			pthread_cond_wait(&w->done, &w->lock);
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_unlock(&w->call_lock);
}
