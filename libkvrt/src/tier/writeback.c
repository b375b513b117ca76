// SPDX-License-Identifier: MIT
/*
 * tier/writeback.c: a write-back tier's queue and the thread that drains
 * it.  Each queued block carries a reader reference on its pool block, so
 * the pool keeps the data until the tier has it; the thread writes the
 * queue in order, in batches, through the tier's own store op, and drops
 * the references.  Flushes wait on a count of blocks written, not on an
 * empty queue, so that a steady stream of stores cannot starve them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tier.h"

#define WB_BATCH 256	/* blocks per store op: one io_uring round, one pipeline */

struct wb_entry {
	uint8_t hash[KVRT_HASH_BYTES];
	uint32_t id;		/* the pool block, one reader reference held */
	uint32_t prio;
};

struct kvrt_writeback {
	pthread_mutex_t lock;
	pthread_cond_t work;	/* entries queued, or stop */
	pthread_cond_t done_cv;	/* written advanced */
	pthread_t thread;
	struct wb_entry *ring;
	uint32_t cap, head, len;
	uint32_t busy;		/* entries taken by the thread, not yet written */
	uint64_t queued_total;	/* entries ever queued (the flush target) */
	uint64_t written;	/* entries the thread finished with */
	int error;		/* first failure since the last flush */
	bool stop;
	pid_t pid;		/* the process the thread runs in (not a fork()ed child) */
	/* The thread's batch. */
	uint8_t (*hashes)[KVRT_HASH_BYTES];
	uint32_t *ids, *prio;
};

static void *wb_thread(void *arg)
{
	struct kvrt_tier *t = arg;
	struct kvrt_writeback *wb = t->wb;
	uint32_t n, i;
	int ret;

	pthread_mutex_lock(&wb->lock);
	for (;;) {
		while (!wb->len && !wb->stop)
			pthread_cond_wait(&wb->work, &wb->lock);
		if (!wb->len)
			break;	/* stopping, and nothing left */
		n = wb->len < WB_BATCH ? wb->len : WB_BATCH;
		for (i = 0; i < n; i++) {
			const struct wb_entry *e = &wb->ring[(wb->head + i) % wb->cap];

			memcpy(wb->hashes[i], e->hash, KVRT_HASH_BYTES);
			wb->ids[i] = e->id;
			wb->prio[i] = e->prio;
		}
		wb->head = (wb->head + n) % wb->cap;
		wb->len -= n;
		wb->busy = n;
		pthread_mutex_unlock(&wb->lock);

		ret = t->ops->store(t, n, (const uint8_t (*)[KVRT_HASH_BYTES])wb->hashes, wb->ids,
				    wb->prio);
		kvrt_release(t->space, n, wb->ids);

		pthread_mutex_lock(&wb->lock);
		if (ret < 0 && !wb->error)
			wb->error = ret;
		wb->busy = 0;
		wb->written += n;
		pthread_cond_broadcast(&wb->done_cv);
	}
	pthread_mutex_unlock(&wb->lock);
	return NULL;
}

static void wb_free(struct kvrt_writeback *wb)
{
	/*
	 * In a fork()ed child the parent's thread may have been waiting on
	 * these at the fork: glibc's pthread_cond_destroy() would wait for it
	 * forever.  There only the memory goes.
	 */
	if (wb->pid == getpid()) {
		pthread_cond_destroy(&wb->done_cv);
		pthread_cond_destroy(&wb->work);
		pthread_mutex_destroy(&wb->lock);
	}
	free(wb->prio);
	free(wb->ids);
	free(wb->hashes);
	free(wb->ring);
	free(wb);
}

int kvrt_writeback_start(struct kvrt_tier *t, uint32_t max_blocks)
{
	struct kvrt_writeback *wb = calloc(1, sizeof(*wb));
	uint32_t batch = max_blocks < WB_BATCH ? max_blocks : WB_BATCH;

	if (!wb)
		return -ENOMEM;
	wb->pid = getpid();
	pthread_mutex_init(&wb->lock, NULL);
	pthread_cond_init(&wb->work, NULL);
	pthread_cond_init(&wb->done_cv, NULL);
	wb->cap = max_blocks;
	wb->ring = calloc(max_blocks, sizeof(*wb->ring));
	wb->hashes = calloc(batch, KVRT_HASH_BYTES);
	wb->ids = calloc(batch, sizeof(uint32_t));
	wb->prio = calloc(batch, sizeof(uint32_t));
	if (!wb->ring || !wb->hashes || !wb->ids || !wb->prio) {
		wb_free(wb);
		return -ENOMEM;
	}
	t->wb = wb;
	if (pthread_create(&wb->thread, NULL, wb_thread, t)) {
		t->wb = NULL;
		wb_free(wb);
		return -EAGAIN;
	}
	return 0;
}

uint32_t kvrt_writeback_queue(struct kvrt_tier *t, uint32_t n,
			      const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids,
			      const uint32_t *prio)
{
	struct kvrt_writeback *wb = t->wb;
	uint32_t i;

	pthread_mutex_lock(&wb->lock);
	if (n > wb->cap - wb->len)
		n = wb->cap - wb->len;
	for (i = 0; i < n; i++) {
		struct wb_entry *e = &wb->ring[(wb->head + wb->len + i) % wb->cap];

		memcpy(e->hash, hashes[i], KVRT_HASH_BYTES);
		e->id = ids[i];
		e->prio = prio ? prio[i] : KVRT_PRIO_DEFAULT;
	}
	wb->len += n;
	wb->queued_total += n;
	if (n)
		pthread_cond_signal(&wb->work);
	pthread_mutex_unlock(&wb->lock);
	return n;
}

int kvrt_writeback_flush(struct kvrt_tier *t)
{
	struct kvrt_writeback *wb = t->wb;
	uint64_t target;
	int ret;

	pthread_mutex_lock(&wb->lock);
	target = wb->queued_total;
	while (wb->written < target)
		pthread_cond_wait(&wb->done_cv, &wb->lock);
	ret = wb->error;
	wb->error = 0;
	pthread_mutex_unlock(&wb->lock);
	return ret;
}

void kvrt_writeback_stats(struct kvrt_tier *t, struct kvrt_tier_stats *st)
{
	struct kvrt_writeback *wb = t->wb;

	pthread_mutex_lock(&wb->lock);
	st->queued = wb->len + wb->busy;
	st->deferred = wb->queued_total;
	pthread_mutex_unlock(&wb->lock);
}

bool kvrt_writeback_here(const struct kvrt_tier *t)
{
	return t->wb->pid == getpid();
}

void kvrt_writeback_stop(struct kvrt_tier *t)
{
	struct kvrt_writeback *wb = t->wb;

	/* A fork()ed child has the queue but no thread: nothing to stop or drain. */
	if (!wb || !kvrt_writeback_here(t))
		return;
	pthread_mutex_lock(&wb->lock);
	wb->stop = true;
	pthread_cond_signal(&wb->work);
	pthread_mutex_unlock(&wb->lock);
	pthread_join(wb->thread, NULL);	/* it writes what is queued first */
}

void kvrt_writeback_free(struct kvrt_writeback *wb)
{
	if (wb)
		wb_free(wb);
}
