// SPDX-License-Identifier: MIT
/*
 * emb_events.c: each client's event queue, with the module's sequence
 * and overflow rules (kmod/events.c), signalled through an eventfd where
 * the module's descriptor polls.  Everything runs under the space's lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pool/embedded/embedded.h"

/* Events a client's queue holds at most (the module's default). */
#define EMB_EVENT_MAX 65536U

/* Room for one more event, growing the ring up to EMB_EVENT_MAX. */
static bool ev_room(struct emb_events *q)
{
	struct kvrt_event *ring;
	uint32_t cap;

	if (q->len < q->cap)
		return true;
	if (q->cap >= EMB_EVENT_MAX)
		return false;
	cap = q->cap ? q->cap * 2 : 64;
	ring = malloc((size_t)cap * sizeof(*ring));
	if (!ring)
		return false;	/* counted as lost, like a full queue */
	for (uint32_t i = 0; i < q->len; i++)
		ring[i] = q->ring[(q->head + i) % q->cap];
	free(q->ring);
	q->ring = ring;
	q->cap = cap;
	q->head = 0;
	return true;
}

/*
 * The eventfd is readable exactly while something is pending (events, or
 * an OVERFLOW owed), as the module's poll says.
 */
static void ev_signal(struct emb_events *q)
{
	bool pending = q->len || q->lost;
	uint64_t v = 1;
	ssize_t n;

	if (q->efd < 0 || pending == q->signalled)
		return;
	/* Neither can fail: the counter is 0 or 1 and the eventfd non-blocking. */
	if (pending)
		n = write(q->efd, &v, sizeof(v));
	else
		n = read(q->efd, &v, sizeof(v));
	(void)n;
	q->signalled = pending;
}

static void ev_append(struct emb_events *q, const struct kvrt_event *e)
{
	q->ring[(q->head + q->len) % q->cap] = *e;
	q->len++;
}

/* Events dropped so far become an OVERFLOW once there is room (kvrules.h's rule). */
static void ev_flush_lost(struct emb_events *q)
{
	struct kvrt_event e = { .type = KVRT_EVENT_OVERFLOW };

	if (!q->lost || !ev_room(q))
		return;
	e.seq = ++q->seq;
	e.count = kvc_overflow_take(&q->lost);
	ev_append(q, &e);
}

/*
 * Queue e for one client.  Every event takes the next seq; one that
 * does not fit (queue full, or no memory) is dropped and counted, and the
 * OVERFLOW that replaces the dropped ones comes before anything later.
 */
void emb_ev_push(struct emb_client *s, const struct kvrt_event *e)
{
	struct emb_events *q = &s->ev;
	struct kvrt_event x = *e;

	ev_flush_lost(q);
	x.seq = ++q->seq;
	if (q->lost || !ev_room(q))
		q->lost++;
	else
		ev_append(q, &x);
	ev_signal(q);
}

void emb_ev_broadcast(struct emb_space *es, const struct kvrt_event *e)
{
	for (struct emb_client *s = es->clients; s; s = s->cnext)
		emb_ev_push(s, e);
}

int emb_events_fd(struct kvrt_space *space)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	if (s->ev.efd < 0) {
		s->ev.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (s->ev.efd < 0) {
			ret = -errno;
			goto out_unlock;
		}
		s->ev.signalled = false;
		ev_signal(&s->ev);
	}
	ret = s->ev.efd;
out_unlock:
	pthread_mutex_unlock(&es->lock);
	return ret;
}

int emb_read_events(struct kvrt_space *space, struct kvrt_event *ev, uint32_t max)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	struct emb_events *q = &s->ev;
	uint32_t n = 0;

	pthread_mutex_lock(&es->lock);
	while (n < max) {
		if (!q->len) {
			ev_flush_lost(q);	/* room now: the OVERFLOW comes next */
			if (!q->len)
				break;
		}
		ev[n++] = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->len--;
	}
	ev_flush_lost(q);
	ev_signal(q);
	pthread_mutex_unlock(&es->lock);
	return (int)n;
}
