// SPDX-License-Identifier: GPL-2.0
/*
 * Per-fd event queues, read with read() and waited for with poll().
 * Records are kept in page-sized segments so a long queue needs no large
 * allocation.  Emitters may run in reclaim, so segments come from
 * GFP_NOWAIT; when one cannot be had, or the queue is at event_queue_max,
 * the event is counted as lost and the reader gets an OVERFLOW record in
 * its place: a loss is always reported, never silent.
 */
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "kvpool.h"

#define KVP_SEG_EVENTS ((PAGE_SIZE - 2 * sizeof(struct list_head)) / sizeof(struct kvpool_event))

struct kvp_event_seg {
	struct list_head link;
	u32 head, tail;		/* records [head, tail) are queued */
	struct kvpool_event ev[KVP_SEG_EVENTS];
};

void kvp_events_init(struct kvp_events *ev)
{
	spin_lock_init(&ev->lock);
	init_waitqueue_head(&ev->wait);
	INIT_LIST_HEAD(&ev->segs);
}

void kvp_events_fini(struct kvp_events *ev)
{
	struct kvp_event_seg *seg, *next;

	list_for_each_entry_safe(seg, next, &ev->segs, link)
		kfree(seg);
	INIT_LIST_HEAD(&ev->segs);
	ev->queued = 0;
}

/* A free record slot at the tail, or NULL. */
static struct kvpool_event *kvp_events_slot(struct kvp_events *ev)
{
	struct kvp_event_seg *seg = NULL;

	lockdep_assert_held(&ev->lock);
	if (ev->queued >= READ_ONCE(kvp_tun.event_queue_max))
		return NULL;
	if (!list_empty(&ev->segs))
		seg = list_last_entry(&ev->segs, struct kvp_event_seg, link);
	if (!seg || seg->tail == KVP_SEG_EVENTS) {
		seg = kmalloc(sizeof(*seg), GFP_NOWAIT | __GFP_NOWARN);
		if (!seg)
			return NULL;
		seg->head = 0;
		seg->tail = 0;
		list_add_tail(&seg->link, &ev->segs);
	}
	ev->queued++;
	return memset(&seg->ev[seg->tail++], 0, sizeof(struct kvpool_event));
}

/* Queue the OVERFLOW record owed for earlier losses; false when no room yet. */
static bool kvp_events_flush_lost(struct kvp_events *ev)
{
	struct kvpool_event *rec;

	if (!ev->lost)
		return true;
	rec = kvp_events_slot(ev);
	if (!rec)
		return false;
	rec->seq = ++ev->next_seq;
	rec->type = KVPOOL_EVENT_OVERFLOW;
	rec->count = (u32)min_t(u64, ev->lost, U32_MAX);
	ev->lost -= rec->count;
	return !ev->lost;
}

void kvp_event_emit(struct kvp_events *ev, u32 type, u32 cause, u32 block, u32 count,
		    const u8 *hash)
{
	struct kvpool_event *rec = NULL;

	spin_lock(&ev->lock);
	if (kvp_events_flush_lost(ev))
		rec = kvp_events_slot(ev);
	if (!rec) {
		/* Its seq is spent: the OVERFLOW record's count covers it. */
		ev->next_seq++;
		ev->lost++;
	} else {
		rec->seq = ++ev->next_seq;
		rec->type = type;
		rec->cause = cause;
		rec->block = block;
		rec->count = count;
		if (hash)
			memcpy(rec->hash, hash, KVPOOL_HASH_BYTES);
	}
	spin_unlock(&ev->lock);
	wake_up_interruptible(&ev->wait);
}

void kvp_event_lost(struct kvp_events *ev)
{
	spin_lock(&ev->lock);
	ev->next_seq++;
	ev->lost++;
	spin_unlock(&ev->lock);
	wake_up_interruptible(&ev->wait);
}

static bool kvp_events_pending(struct kvp_events *ev)
{
	bool pending;

	spin_lock(&ev->lock);
	pending = ev->queued || ev->lost;
	spin_unlock(&ev->lock);
	return pending;
}

/* Pop up to max records into out[]; an owed OVERFLOW comes after the queue. */
static size_t kvp_events_pop(struct kvp_events *ev, struct kvpool_event *out, size_t max)
{
	size_t n = 0;

	spin_lock(&ev->lock);
	while (n < max && ev->queued) {
		struct kvp_event_seg *seg = list_first_entry(&ev->segs, struct kvp_event_seg,
							     link);

		out[n++] = seg->ev[seg->head++];
		ev->queued--;
		if (seg->head == seg->tail) {
			list_del(&seg->link);
			kfree(seg);
		}
	}
	if (n < max && ev->lost) {
		struct kvpool_event *rec = &out[n++];

		memset(rec, 0, sizeof(*rec));
		rec->seq = ++ev->next_seq;
		rec->type = KVPOOL_EVENT_OVERFLOW;
		rec->count = (u32)min_t(u64, ev->lost, U32_MAX);
		ev->lost -= rec->count;
	}
	spin_unlock(&ev->lock);
	return n;
}

#define KVP_READ_BATCH 16

ssize_t kvp_events_read(struct kvp_client *client, char __user *buf, size_t len, bool nonblock)
{
	struct kvpool_event batch[KVP_READ_BATCH];
	struct kvp_events *ev = &client->events;
	size_t max = len / sizeof(struct kvpool_event), done = 0;

	if (!kvp_client_space(client))
		return -EBADFD;
	if (!max)
		return -EINVAL;
	while (!kvp_events_pending(ev)) {
		if (nonblock)
			return -EAGAIN;
		if (wait_event_interruptible(ev->wait, kvp_events_pending(ev)))
			return -ERESTARTSYS;
	}
	while (done < max) {
		size_t n = kvp_events_pop(ev, batch, min_t(size_t, max - done, KVP_READ_BATCH));

		if (!n)
			break;
		/*
		 * Records already popped cannot go back in order: a fault here
		 * loses them, so count them as lost for the next read.
		 */
		if (copy_to_user(buf + done * sizeof(*batch), batch, n * sizeof(*batch))) {
			spin_lock(&ev->lock);
			ev->lost += n;
			spin_unlock(&ev->lock);
			return done ? done * sizeof(*batch) : -EFAULT;
		}
		done += n;
	}
	return done * sizeof(struct kvpool_event);
}

__poll_t kvp_events_poll(struct kvp_client *client, struct file *file, poll_table *wait)
{
	struct kvp_events *ev = &client->events;

	if (!kvp_client_space(client))
		return EPOLLERR;
	poll_wait(file, &ev->wait, wait);
	return kvp_events_pending(ev) ? EPOLLIN | EPOLLRDNORM : 0;
}
