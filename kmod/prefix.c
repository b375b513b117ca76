// SPDX-License-Identifier: GPL-2.0
/*
 * The prefix cache ioctls: PUBLISH, LOOKUP, RELEASE and SPACE_STATS.  The
 * block logic is kvcore's; this file copies arrays in and out, keeps each
 * fd's interest set (which evictions it hears about) and reports
 * evictions as events.  Arrays are copied in before the space's lock is
 * taken and out after it is dropped (DOC: locking).
 */
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "kvpool_internal.h"

static_assert(sizeof(struct kvc_publish_entry) == sizeof(struct kvpool_publish_entry));
static_assert(offsetof(struct kvc_publish_entry, id) ==
	      offsetof(struct kvpool_publish_entry, id));
static_assert(offsetof(struct kvc_publish_entry, priority) ==
	      offsetof(struct kvpool_publish_entry, priority));
static_assert(offsetof(struct kvc_publish_entry, flags) ==
	      offsetof(struct kvpool_publish_entry, flags));
static_assert(KVC_HASH_BYTES == KVPOOL_HASH_BYTES && KVC_PRIO_MAX == KVPOOL_PRIO_MAX &&
	      (int)KVC_EVICT_CAUSES == (int)KVPOOL_EVICT_CAUSES);

/*
 * An fd's interest in a block: in the fd's interest xarray under the
 * block id, and on the ring of the block's interested fds, which
 * kvp_space.interest holds by one of its members.  An eviction visits the
 * ring alone, never the fds that did not ask about the block.
 */
struct kvp_interest {
	struct list_head ring;
	struct kvp_client *client;
};

/* Take one interest off its block's ring; the caller frees it. */
static void kvp_interest_unlink(struct kvp_space *space, u32 id, struct kvp_interest *in)
{
	if (list_empty(&in->ring)) {
		xa_erase(&space->interest, id);
		return;
	}
	/* Replacing a present entry allocates nothing: this cannot fail. */
	if (xa_load(&space->interest, id) == in)
		xa_store(&space->interest, id, list_next_entry(in, ring), GFP_NOWAIT);
	list_del(&in->ring);
}

/*
 * Remember that this fd holds or held block id, so its eviction is
 * reported.  A failed allocation cannot be made up for later: the queue
 * records a loss, which the reader sees as an OVERFLOW.
 */
static void kvp_interest_add(struct kvp_space *space, struct kvp_client *client, u32 id)
{
	struct kvp_interest *in, *first;

	lockdep_assert_held(&space->lock);
	if (xa_load(&client->interest, id))
		return;
	in = kmalloc(sizeof(*in), GFP_KERNEL_ACCOUNT);
	if (!in)
		goto out_lost;
	in->client = client;
	INIT_LIST_HEAD(&in->ring);
	if (xa_err(xa_store(&client->interest, id, in, GFP_KERNEL)))
		goto out_free;
	first = xa_load(&space->interest, id);
	if (first) {
		list_add_tail(&in->ring, &first->ring);
		return;
	}
	if (!xa_err(xa_store(&space->interest, id, in, GFP_KERNEL)))
		return;
	xa_erase(&client->interest, id);
out_free:
	kfree(in);
out_lost:
	kvp_event_lost(&client->events);
}

/* The fd goes: its interests leave their rings (O(its own interests)). */
void kvp_interest_drop_client(struct kvp_space *space, struct kvp_client *client)
{
	struct kvp_interest *in;
	unsigned long id;

	lockdep_assert_held(&space->lock);
	xa_for_each(&client->interest, id, in) {
		kvp_interest_unlink(space, id, in);
		kfree(in);
	}
	xa_destroy(&client->interest);
}

/*
 * kvcore evicted callback, under the space's lock: the fds interested in
 * the block hear of it, and only they are visited.
 */
void kvp_space_evicted(struct kvc_space *core, u32 id, const u8 *hash, unsigned int cause)
{
	struct kvp_space *space = container_of(core, struct kvp_space, core);
	struct kvp_interest *first = xa_erase(&space->interest, id), *in, *next;
	LIST_HEAD(ring);

	lockdep_assert_held(&space->lock);
	if (first) {
		/* A head before the first member makes the ring a list. */
		list_add_tail(&ring, &first->ring);
		list_for_each_entry_safe(in, next, &ring, ring) {
			xa_erase(&in->client->interest, id);
			kvp_event_emit(&in->client->events, KVPOOL_EVENT_EVICTED, cause, id, 0,
				       hash);
			kfree(in);
		}
	}
	kvp_residency_drop_block(space, id);
}

long kvp_ioctl_publish(struct kvp_client *client, void __user *uarg)
{
	struct kvp_space *space = kvp_client_space(client);
	struct kvpool_publish args;
	struct kvc_publish_entry *e;
	u32 *own, i;
	size_t bytes;
	long ret;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	/* nr_dedup is out only: 0 on the way in (API 4), like pad and reserved. */
	ret = kvp_batch_check((args.flags & ~KVPOOL_PUBLISH_FLAGS) || args.nr_dedup || args.pad ||
			      !kvp_zero(args.reserved, sizeof(args.reserved)), args.count, space);
	if (ret)
		return ret;
	bytes = (size_t)args.count * sizeof(*e);
	/* Everything written back must be writable before anything changes. */
	if (fault_in_safe_writeable(u64_to_user_ptr(args.entries), bytes) ||
	    fault_in_safe_writeable(uarg, sizeof(args)))
		return -EFAULT;
	e = kvmalloc(bytes, GFP_KERNEL);
	own = kvmalloc_array(args.count, sizeof(*own), GFP_KERNEL);
	if (!e || !own) {
		ret = -ENOMEM;
		goto out_free;
	}
	if (copy_from_user(e, u64_to_user_ptr(args.entries), bytes)) {
		ret = -EFAULT;
		goto out_free;
	}
	for (i = 0; i < args.count; i++) {
		if (e[i].flags || e[i].pad)
			goto out_inval;
		/* kvc_publish() checks the range; only the default is ours. */
		if (!(args.flags & KVPOOL_PUBLISH_PRIORITY)) {
			if (e[i].priority)
				goto out_inval;
			e[i].priority = KVPOOL_PRIO_DEFAULT;
		}
		own[i] = e[i].id;
	}
	if (mutex_lock_killable(&space->lock)) {
		ret = -EINTR;
		goto out_free;
	}
	ret = kvc_publish(&space->core, client->owner, &client->refs, args.count, e);
	if (ret < 0) {
		mutex_unlock(&space->lock);
		goto out_free;
	}
	args.nr_dedup = ret;
	for (i = 0; i < args.count; i++) {
		if (e[i].flags & KVC_PUBLISH_DEDUP)
			kvp_residency_drop_block(space, own[i]);
		kvp_interest_add(space, client, e[i].id);
		/* The caller passed 0 without the flag: give back what it gave. */
		if (!(args.flags & KVPOOL_PUBLISH_PRIORITY))
			e[i].priority = 0;
	}
	mutex_unlock(&space->lock);
	/*
	 * Copied out unlocked, like every output.  The entries were faulted in
	 * writable; should the copy still fail, the blocks stay published and
	 * referenced by this fd, which releases them on close, and the caller
	 * learns the call did not report back.
	 */
	ret = 0;
	if (copy_to_user(u64_to_user_ptr(args.entries), e, bytes) ||
	    copy_to_user(uarg, &args, sizeof(args)))
		ret = -EFAULT;
out_free:
	kvfree(own);
	kvfree(e);
	return ret;

out_inval:
	ret = -EINVAL;
	goto out_free;
}

/*
 * Drop the references of a LOOKUP whose ids never reached the caller.
 * Another call on the same fd may have released some while the lock was
 * dropped: release one by one what the fd still holds.  Not killable, as
 * the references must not stay; the lock is held only for kernel work.
 */
static void kvp_lookup_undo(struct kvp_space *space, struct kvp_client *client, u32 hits,
			    const u32 *ids)
{
	u32 i;

	mutex_lock(&space->lock);
	for (i = 0; i < hits; i++)
		kvc_release(&space->core, &client->refs, 1, &ids[i]);
	mutex_unlock(&space->lock);
}

long kvp_ioctl_lookup(struct kvp_client *client, void __user *uarg)
{
	struct kvp_space *space = kvp_client_space(client);
	u8 (*hashes)[KVPOOL_HASH_BYTES] = NULL;
	struct kvpool_lookup args;
	u64 *devices = NULL;
	u32 *ids = NULL, i;
	long ret;
	int hits;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	/* nr_hits is out only: 0 on the way in (API 4). */
	ret = kvp_batch_check(args.flags || args.nr_hits || args.pad ||
			      !kvp_zero(args.reserved, sizeof(args.reserved)), args.count, space);
	if (ret)
		return ret;
	/* Outputs must be writable before any reference is taken. */
	if (fault_in_safe_writeable(uarg, sizeof(args)) ||
	    fault_in_safe_writeable(u64_to_user_ptr(args.ids), (size_t)args.count * sizeof(u32)) ||
	    (args.devices && fault_in_safe_writeable(u64_to_user_ptr(args.devices),
						     (size_t)args.count * sizeof(u64))))
		return -EFAULT;
	hashes = kvmalloc_array(args.count, KVPOOL_HASH_BYTES, GFP_KERNEL);
	ids = kvmalloc_array(args.count, sizeof(*ids), GFP_KERNEL);
	if (args.devices)
		devices = kvcalloc(args.count, sizeof(*devices), GFP_KERNEL);
	if (!hashes || !ids || (args.devices && !devices)) {
		ret = -ENOMEM;
		goto out_free;
	}
	if (copy_from_user(hashes, u64_to_user_ptr(args.hashes),
			   (size_t)args.count * KVPOOL_HASH_BYTES)) {
		ret = -EFAULT;
		goto out_free;
	}
	if (mutex_lock_killable(&space->lock)) {
		ret = -EINTR;
		goto out_free;
	}
	hits = kvc_lookup(&space->core, &client->refs, args.count,
			  (const u8 (*)[KVPOOL_HASH_BYTES])hashes, ids);
	if (hits < 0) {
		mutex_unlock(&space->lock);
		ret = hits;
		goto out_free;
	}
	for (i = 0; i < hits; i++) {
		kvp_interest_add(space, client, ids[i]);
		if (devices)
			devices[i] = kvp_residency_mask(space, ids[i]);
	}
	mutex_unlock(&space->lock);
	args.nr_hits = hits;
	ret = 0;
	/* Copied out unlocked: a stalled user page holds up no one else. */
	if ((hits && copy_to_user(u64_to_user_ptr(args.ids), ids, (size_t)hits * sizeof(*ids))) ||
	    (hits && devices && copy_to_user(u64_to_user_ptr(args.devices), devices,
					     (size_t)hits * sizeof(*devices))) ||
	    copy_to_user(uarg, &args, sizeof(args))) {
		/* The caller cannot know what it holds: take the references back. */
		if (hits)
			kvp_lookup_undo(space, client, hits, ids);
		ret = -EFAULT;
	}
out_free:
	kvfree(devices);
	kvfree(ids);
	kvfree(hashes);
	return ret;
}

long kvp_ioctl_release(struct kvp_client *client, struct kvpool_blocks *args)
{
	struct kvp_space *space = kvp_client_space(client);
	u32 *ids;
	long ret;

	ids = kvp_space_lock_with_ids(space, args);
	if (IS_ERR(ids))
		return PTR_ERR(ids);
	ret = kvc_release(&space->core, &client->refs, args->count, ids);
	mutex_unlock(&space->lock);
	kvfree(ids);
	return ret;
}

long kvp_ioctl_space_stats(struct kvp_client *client, void __user *uarg)
{
	struct kvp_space *space = kvp_client_space(client);
	struct kvpool_space_stats st;
	const struct kvc_space *c;
	int i;

	if (copy_from_user(&st, uarg, sizeof(st)))
		return -EFAULT;
	/* flags, reserved and (API 4) every out field: all of it is 0. */
	if (!kvp_zero(&st, sizeof(st)))
		return -EINVAL;
	if (!space)
		return -EBADFD;
	if (mutex_lock_killable(&space->lock))
		return -EINTR;
	c = &space->core;
	st.space_id = space->id;
	st.hits = c->stats.hits;
	st.misses = c->stats.misses;
	st.inserts = c->stats.inserts;
	st.dedups = c->stats.dedups;
	for (i = 0; i < KVPOOL_EVICT_CAUSES; i++)
		st.evictions[i] = c->stats.evictions[i];
	st.pressure = c->stats.pressure;
	st.published_blocks = c->nr_published;
	st.cached_blocks = c->nr_cached;
	st.hole_blocks = c->nr_holes;
	st.readers = c->nr_readers;
	st.my_refs = client->refs.total;
	st.allocs = c->stats.allocs;
	st.frees = c->stats.frees;
	mutex_unlock(&space->lock);
	if (copy_to_user(uarg, &st, sizeof(st)))
		return -EFAULT;
	return 0;
}
