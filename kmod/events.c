// SPDX-License-Identifier: GPL-2.0
/*
 * Per-fd event queues, read with read() and waited for with poll().
 * Records are kept in page-sized segments so a long queue needs no large
 * allocation.  Emitters may run in reclaim, so segments come from
 * GFP_NOWAIT; when one cannot be had, or the queue is at event_queue_max,
 * the event is counted as lost and the reader gets an OVERFLOW record in
 * its place: a loss is always reported, never silent.
 *
 * Events are emitted by whoever evicts (another tenant's ALLOC, kswapd),
 * so segments are charged to the memory cgroup of the fd's opener, not to
 * the emitter: a queue counts against the tenant that reads it.
 */
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "kvpool_internal.h"

#define KVP_SEG_EVENTS ((PAGE_SIZE - 2 * sizeof(struct list_head)) / sizeof(struct kvpool_event))

struct kvp_event_seg {
	struct list_head link;
	u32 head, tail;		/* records [head, tail) are queued */
	struct kvpool_event ev[KVP_SEG_EVENTS];
};

void kvp_events_init(struct kvp_events *ev)
{
	spin_lock_init(&ev->lock);
	mutex_init(&ev->read_lock);
	init_waitqueue_head(&ev->wait);
	INIT_LIST_HEAD(&ev->segs);
	ev->memcg = get_mem_cgroup_from_mm(current->mm);
}

void kvp_events_fini(struct kvp_events *ev)
{
	struct kvp_event_seg *seg, *next;

	list_for_each_entry_safe(seg, next, &ev->segs, link)
		kfree(seg);
	INIT_LIST_HEAD(&ev->segs);
	ev->queued = 0;
	mem_cgroup_put(ev->memcg);
	ev->memcg = NULL;
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
		struct mem_cgroup *old = set_active_memcg(ev->memcg);

		seg = kmalloc(sizeof(*seg), GFP_NOWAIT | __GFP_ACCOUNT | __GFP_NOWARN);
		set_active_memcg(old);
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
	rec->count = kvc_overflow_take(&ev->lost);
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

/*
 * Copy up to max records from the head of the queue into out[] without
 * removing them; an owed OVERFLOW is queued first so it is read in order.
 */
static size_t kvp_events_peek(struct kvp_events *ev, struct kvpool_event *out, size_t max)
{
	struct kvp_event_seg *seg;
	size_t n = 0;
	u32 i;

	spin_lock(&ev->lock);
	if (!ev->queued)
		kvp_events_flush_lost(ev);
	list_for_each_entry(seg, &ev->segs, link) {
		for (i = seg->head; i < seg->tail && n < max; i++)
			out[n++] = seg->ev[i];
		if (n == max)
			break;
	}
	spin_unlock(&ev->lock);
	return n;
}

/* Remove the first n records, which the reader has copied out. */
static void kvp_events_consume(struct kvp_events *ev, size_t n)
{
	spin_lock(&ev->lock);
	while (n) {
		struct kvp_event_seg *seg = list_first_entry(&ev->segs, struct kvp_event_seg,
							     link);
		u32 take = min_t(size_t, n, seg->tail - seg->head);

		seg->head += take;
		ev->queued -= take;
		n -= take;
		if (seg->head == seg->tail) {
			list_del(&seg->link);
			kfree(seg);
		}
	}
	spin_unlock(&ev->lock);
}

#define KVP_READ_BATCH 4	/* 256 bytes of stack; KASAN doubles frames */

/*
 * Records leave the queue only once copied out, so a fault loses nothing;
 * read_lock keeps two readers of one fd from copying the same records.
 */
ssize_t kvp_events_read(struct kvp_client *client, char __user *buf, size_t len, bool nonblock)
{
	struct kvpool_event batch[KVP_READ_BATCH];
	struct kvp_events *ev = &client->events;
	size_t max = len / sizeof(struct kvpool_event), done = 0;
	ssize_t ret;

	if (!kvp_client_space(client))
		return -EBADFD;
	if (!max)
		return -EINVAL;
	if (mutex_lock_interruptible(&ev->read_lock))
		return -ERESTARTSYS;
	while (!kvp_events_pending(ev)) {
		ret = -EAGAIN;
		if (nonblock)
			goto out_unlock;
		mutex_unlock(&ev->read_lock);
		if (wait_event_interruptible(ev->wait, kvp_events_pending(ev)))
			return -ERESTARTSYS;
		if (mutex_lock_interruptible(&ev->read_lock))
			return -ERESTARTSYS;
	}
	while (done < max) {
		size_t n = kvp_events_peek(ev, batch, min_t(size_t, max - done, KVP_READ_BATCH));

		if (!n)
			break;
		if (copy_to_user(buf + done * sizeof(*batch), batch, n * sizeof(*batch))) {
			if (!done) {
				ret = -EFAULT;
				goto out_unlock;
			}
			break;
		}
		kvp_events_consume(ev, n);
		done += n;
	}
	ret = done * sizeof(struct kvpool_event);
out_unlock:
	mutex_unlock(&ev->read_lock);
	return ret;
}

__poll_t kvp_events_poll(struct kvp_client *client, struct file *file, poll_table *wait)
{
	struct kvp_events *ev = &client->events;

	if (!kvp_client_space(client))
		return EPOLLERR;
	poll_wait(file, &ev->wait, wait);
	return kvp_events_pending(ev) ? EPOLLIN | EPOLLRDNORM : 0;
}
