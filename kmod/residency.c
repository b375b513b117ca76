// SPDX-License-Identifier: GPL-2.0
/*
 * Residency records: "host block h holds a copy of GPU block g of device
 * d", kept per fd so an engine that dies takes its claims with it.  Each
 * space has a table of up to 64 device UUIDs, each held by the fds that
 * registered it; LOOKUP reports a hit's devices as bits of that table.
 * Everything runs under the space's lock.
 */
#include <linux/pagemap.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "kvpool_internal.h"

/*
 * The device table.  A slot holds a device while some fd has the device
 * registered: an ADD that succeeds registers it for its fd, CLEAR and the
 * fd's close unregister it, and the last of them frees the slot for
 * another device.  Records are kept only by fds that have their slot
 * registered, so a record never outlives its slot.
 */
static int kvp_device_find(const struct kvp_space *space, const u8 *uuid)
{
	unsigned int i;

	for (i = 0; i < KVPOOL_MAX_DEVICES; i++)
		if ((space->devices_used & BIT_ULL(i)) && !memcmp(space->devices[i], uuid, 16))
			return i;
	return -ENOENT;
}

/* The slot a new device would take: the lowest free one, or -ENOSPC. */
static int kvp_device_free_slot(const struct kvp_space *space)
{
	if (space->devices_used == U64_MAX)
		return -ENOSPC;
	return __ffs64(~space->devices_used);
}

static void kvp_device_register(struct kvp_space *space, struct kvp_client *client,
				unsigned int slot, const u8 *uuid)
{
	if (!(space->devices_used & BIT_ULL(slot))) {
		memcpy(space->devices[slot], uuid, 16);
		space->devices_used |= BIT_ULL(slot);
	}
	if (!(client->res_slots & BIT_ULL(slot))) {
		client->res_slots |= BIT_ULL(slot);
		space->device_fds[slot]++;
	}
}

static void kvp_device_unregister(struct kvp_space *space, struct kvp_client *client,
				  unsigned int slot)
{
	if (!(client->res_slots & BIT_ULL(slot)))
		return;
	client->res_slots &= ~BIT_ULL(slot);
	if (--space->device_fds[slot])
		return;
	space->devices_used &= ~BIT_ULL(slot);
	memset(space->devices[slot], 0, 16);
}

static struct kvp_res_rec *kvp_res_find(struct kvp_res_block *rb, u32 owner, u8 slot)
{
	u32 i;

	for (i = 0; rb && i < rb->nr; i++)
		if (rb->recs[i].owner == owner && rb->recs[i].slot == slot)
			return &rb->recs[i];
	return NULL;
}

static void kvp_res_remove(struct kvp_space *space, u32 id, struct kvp_res_block *rb, u32 i)
{
	rb->recs[i] = rb->recs[--rb->nr];
	if (!rb->nr) {
		xa_erase(&space->residency, id);
		kfree(rb);
	}
}

/* Room for one more record on block id; the block's array may move. */
static int kvp_res_reserve(struct kvp_space *space, u32 id)
{
	struct kvp_res_block *rb = xa_load(&space->residency, id), *grown;
	u32 cap = rb ? rb->cap * 2 : 2;
	int ret;

	if (rb && rb->nr < rb->cap)
		return 0;
	grown = kmalloc(struct_size(grown, recs, cap), GFP_KERNEL_ACCOUNT);
	if (!grown)
		return -ENOMEM;
	grown->nr = rb ? rb->nr : 0;
	grown->cap = cap;
	if (rb)
		memcpy(grown->recs, rb->recs, rb->nr * sizeof(rb->recs[0]));
	ret = xa_err(xa_store(&space->residency, id, grown, GFP_KERNEL_ACCOUNT));
	if (ret) {
		kfree(grown);
		return ret;
	}
	kfree(rb);
	return 0;
}

/*
 * Undo the reservations of an ADD that failed: an array it created holds
 * no record, and the debugfs check rightly flags one left so.  Arrays it
 * grew keep their records and their spare room.
 */
static void kvp_res_unreserve(struct kvp_space *space,
			      const struct kvpool_residency_entry *e, u32 count)
{
	u32 i;

	for (i = 0; i < count; i++) {
		struct kvp_res_block *rb = xa_load(&space->residency, e[i].block);

		if (rb && !rb->nr) {
			xa_erase(&space->residency, e[i].block);
			kfree(rb);
		}
	}
}

/* May this fd speak for block id?  It owns it or holds a reference on it. */
static int kvp_res_block_ok(struct kvp_space *space, struct kvp_client *client, u32 id)
{
	const struct kvc_space *c = &space->core;

	if (id >= c->backed_blocks)
		return -EINVAL;
	if (c->blocks[id].state == KVC_BLOCK_OWNED && c->blocks[id].owner == client->owner)
		return 0;
	if (kvc_refs_count(&client->refs, id))
		return 0;
	return -EPERM;
}

static int kvp_res_validate(struct kvp_space *space, struct kvp_client *client,
			    const struct kvpool_residency_entry *e, u32 count)
{
	u32 i;
	int ret;

	for (i = 0; i < count; i++) {
		ret = kvp_res_block_ok(space, client, e[i].block);
		if (ret)
			return ret;
	}
	return 0;
}

/* ADD: slot is the device's, or the free one it takes when this succeeds. */
static int kvp_res_add(struct kvp_space *space, struct kvp_client *client, u8 slot,
		       const u8 *uuid, const struct kvpool_residency_entry *e, u32 count)
{
	u32 i;
	int ret = kvp_res_validate(space, client, e, count);

	if (ret)
		return ret;
	/*
	 * Reserve room for every record first so the batch cannot fail half
	 * way; arrays grown but left unused keep their spare room, arrays
	 * created for a batch that then fails go again.  Only then is the
	 * device registered: a failed ADD takes no slot.
	 */
	for (i = 0; i < count; i++) {
		ret = kvp_res_reserve(space, e[i].block);
		if (ret) {
			kvp_res_unreserve(space, e, i);
			return ret;
		}
	}
	kvp_device_register(space, client, slot, uuid);
	for (i = 0; i < count; i++) {
		struct kvp_res_block *rb = xa_load(&space->residency, e[i].block);
		struct kvp_res_rec *rec = kvp_res_find(rb, client->owner, slot);

		if (!rec) {
			rec = &rb->recs[rb->nr++];
			rec->owner = client->owner;
			rec->slot = slot;
		}
		rec->gpu_block = e[i].gpu_block;
	}
	return 0;
}

static int kvp_res_del(struct kvp_space *space, struct kvp_client *client, u8 slot,
		       const struct kvpool_residency_entry *e, u32 count)
{
	u32 i;

	for (i = 0; i < count; i++) {
		if (e[i].block >= space->core.backed_blocks)
			return -EINVAL;
		if (!kvp_res_find(xa_load(&space->residency, e[i].block), client->owner, slot))
			return -ENOENT;
	}
	for (i = 0; i < count; i++) {
		struct kvp_res_block *rb = xa_load(&space->residency, e[i].block);
		struct kvp_res_rec *rec = kvp_res_find(rb, client->owner, slot);

		/* Listed twice: the first entry already removed it. */
		if (rec)
			kvp_res_remove(space, e[i].block, rb, rec - rb->recs);
	}
	return 0;
}

static void kvp_res_clear(struct kvp_space *space, u32 owner, int slot)
{
	struct kvp_res_block *rb;
	unsigned long id;
	u32 i;

	xa_for_each(&space->residency, id, rb) {
		for (i = 0; i < rb->nr;) {
			if (rb->recs[i].owner == owner && (slot < 0 || rb->recs[i].slot == slot)) {
				bool last = rb->nr == 1;

				kvp_res_remove(space, id, rb, i);
				if (last)
					break;
				continue;
			}
			i++;
		}
	}
}

long kvp_ioctl_residency(struct kvp_client *client, void __user *uarg)
{
	struct kvp_space *space = kvp_client_space(client);
	struct kvpool_residency_entry *e = NULL;
	struct kvpool_residency args;
	long ret;
	int slot;
	u32 i;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	/*
	 * API 4: entries grew a reserved word, and entry_bytes (0 from a
	 * caller built for API 3, whose entries were 8 bytes) says which
	 * layout the caller sends; device_slot is out only.
	 */
	if (args.flags || args.device_slot || args.pad || args.reserved ||
	    args.entry_bytes != sizeof(*e) || args.op > KVPOOL_RESIDENCY_CLEAR)
		return -EINVAL;
	if (args.count > KVPOOL_MAX_BATCH)
		return -E2BIG;
	if ((args.op == KVPOOL_RESIDENCY_DEL && !args.count) ||
	    (args.op == KVPOOL_RESIDENCY_CLEAR && args.count))
		return -EINVAL;
	if (!space)
		return -EBADFD;
	/* device_slot goes back: fail before anything changes if it cannot. */
	if (fault_in_safe_writeable(uarg, sizeof(args)))
		return -EFAULT;
	if (args.count) {
		e = kvmalloc_array(args.count, sizeof(*e), GFP_KERNEL);
		if (!e)
			return -ENOMEM;
		if (copy_from_user(e, u64_to_user_ptr(args.entries),
				   (size_t)args.count * sizeof(*e))) {
			ret = -EFAULT;
			goto out_free;
		}
		for (i = 0; i < args.count; i++) {
			if (e[i].reserved) {
				ret = -EINVAL;
				goto out_free;
			}
		}
	}
	if (mutex_lock_killable(&space->lock)) {
		ret = -EINTR;
		goto out_free;
	}
	slot = kvp_device_find(space, args.device_uuid);
	if (slot == -ENOENT && args.op == KVPOOL_RESIDENCY_ADD) {
		/* The entries' errnos come before a full table's. */
		ret = kvp_res_validate(space, client, e, args.count);
		if (ret)
			goto out_unlock;
		slot = kvp_device_free_slot(space);
	}
	if (slot < 0) {
		ret = slot;
		goto out_unlock;
	}
	switch (args.op) {
	case KVPOOL_RESIDENCY_ADD:
		ret = kvp_res_add(space, client, slot, args.device_uuid, e, args.count);
		break;
	case KVPOOL_RESIDENCY_DEL:
		ret = kvp_res_del(space, client, slot, e, args.count);
		break;
	default:
		/* This fd is done with the device: its records and its registration go. */
		kvp_res_clear(space, client->owner, slot);
		kvp_device_unregister(space, client, slot);
		ret = 0;
		break;
	}
	mutex_unlock(&space->lock);
	if (!ret) {
		args.device_slot = slot;
		if (copy_to_user(uarg, &args, sizeof(args)))
			ret = -EFAULT;
	}
	goto out_free;

out_unlock:
	mutex_unlock(&space->lock);
out_free:
	kvfree(e);
	return ret;
}

/* The block became FREE: nobody's GPU copy mirrors it any more. */
void kvp_residency_drop_block(struct kvp_space *space, u32 id)
{
	kfree(xa_erase(&space->residency, id));
}

/* The fd closes: its records and its registrations go, and slots nobody holds. */
void kvp_residency_drop_client(struct kvp_space *space, struct kvp_client *client)
{
	unsigned int slot;

	lockdep_assert_held(&space->lock);
	kvp_res_clear(space, client->owner, -1);
	for (slot = 0; slot < KVPOOL_MAX_DEVICES; slot++)
		kvp_device_unregister(space, client, slot);
}

u64 kvp_residency_mask(struct kvp_space *space, u32 id)
{
	struct kvp_res_block *rb = xa_load(&space->residency, id);
	u64 mask = 0;
	u32 i;

	for (i = 0; rb && i < rb->nr; i++)
		mask |= 1ULL << rb->recs[i].slot;
	return mask;
}

void kvp_residency_destroy(struct kvp_space *space)
{
	struct kvp_res_block *rb;
	unsigned long id;

	xa_for_each(&space->residency, id, rb)
		kfree(rb);
	xa_destroy(&space->residency);
}

/* The slots the fd with this owner id has registered; 0 for no such fd. */
static u64 kvp_res_owner_slots(struct kvp_space *space, u32 owner)
{
	struct kvp_client *c;

	list_for_each_entry(c, &space->clients, link)
		if (c->owner == owner)
			return c->res_slots;
	return 0;
}

/*
 * debugfs check: records sit only on blocks someone holds, owned or
 * published, and on a slot their fd has registered; a slot holds a device
 * exactly while some fd has it registered, and device_fds counts them.
 */
unsigned int kvp_residency_check(struct seq_file *m, struct kvp_space *space)
{
	u32 fds[KVPOOL_MAX_DEVICES] = { 0 };
	struct kvp_res_block *rb;
	struct kvp_client *c;
	unsigned int bad = 0, slot;
	unsigned long id;
	u32 i;

	lockdep_assert_held(&space->lock);
	xa_for_each(&space->residency, id, rb) {
		u8 state = id < space->core.backed_blocks ? space->core.blocks[id].state :
			   KVC_BLOCK_FREE;

		if (state == KVC_BLOCK_FREE || state == KVC_BLOCK_HOLE || !rb->nr) {
			seq_printf(m, "space %u (%s): residency records on block %lu in state %u\n",
				   space->id, space->name, id, state);
			bad++;
		}
		for (i = 0; i < rb->nr; i++) {
			const struct kvp_res_rec *rec = &rb->recs[i];

			if (kvp_res_owner_slots(space, rec->owner) & BIT_ULL(rec->slot))
				continue;
			seq_printf(m, "space %u (%s): block %lu has a record on slot %u that owner %u has not registered\n",
				   space->id, space->name, id, rec->slot, rec->owner);
			bad++;
		}
	}
	list_for_each_entry(c, &space->clients, link)
		for (slot = 0; slot < KVPOOL_MAX_DEVICES; slot++)
			fds[slot] += !!(c->res_slots & BIT_ULL(slot));
	for (slot = 0; slot < KVPOOL_MAX_DEVICES; slot++) {
		bool used = space->devices_used & BIT_ULL(slot);

		if (fds[slot] == space->device_fds[slot] && used == !!fds[slot])
			continue;
		seq_printf(m, "space %u (%s): device slot %u: %u fds registered, %u counted, %s\n",
			   space->id, space->name, slot, fds[slot], space->device_fds[slot],
			   used ? "in use" : "free");
		bad++;
	}
	return bad;
}

/* debugfs: the device table and every record. */
void kvp_residency_show(struct seq_file *m, struct kvp_space *space)
{
	struct kvp_res_block *rb;
	unsigned long id;
	unsigned int i;

	for (i = 0; i < KVPOOL_MAX_DEVICES; i++)
		if (space->devices_used & BIT_ULL(i))
			seq_printf(m, "  slot=%u uuid=%16phN\n", i, space->devices[i]);
	xa_for_each(&space->residency, id, rb)
		for (i = 0; i < rb->nr; i++)
			seq_printf(m, "  block=%lu slot=%u gpu_block=%u owner=%u\n", id,
				   rb->recs[i].slot, rb->recs[i].gpu_block, rb->recs[i].owner);
}
