// SPDX-License-Identifier: MIT
/*
 * emb_residency.c: residency records ("host block h holds a copy of GPU
 * block g on device slot s", per client) and the space's device
 * table, as kmod/residency.c keeps them.  Everything runs under the
 * space's lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool/embedded/embedded.h"

static int rec_find(const struct emb_blk *b, uint32_t owner, uint32_t slot)
{
	for (uint32_t i = 0; i < b->nrec; i++)
		if (b->rec[i].owner == owner && b->rec[i].slot == slot)
			return (int)i;
	return -1;
}

void emb_rec_remove(struct emb_blk *b, uint32_t i)
{
	b->rec[i] = b->rec[--b->nrec];
}

uint64_t emb_rec_mask(const struct emb_space *es, uint32_t id)
{
	uint64_t mask = 0;

	if (id < es->nbx)
		for (uint32_t i = 0; i < es->bx[id].nrec; i++)
			mask |= 1ULL << es->bx[id].rec[i].slot;
	return mask;
}

/*
 * The device table as the module keeps it: a slot holds a device while a
 * client has it registered (a successful add registers it; clear and
 * close unregister), and is free for another device once none has.
 */
static int dev_slot(const struct emb_space *es, const uint8_t *uuid)
{
	for (uint32_t i = 0; i < KVRT_MAX_DEVICES; i++)
		if ((es->dev_used & (1ULL << i)) && !memcmp(es->dev[i], uuid, KVRT_UUID_BYTES))
			return (int)i;
	return -1;
}

static void dev_register(struct emb_space *es, struct emb_client *s, uint32_t slot,
			 const uint8_t *uuid)
{
	if (!(es->dev_used & (1ULL << slot))) {
		memcpy(es->dev[slot], uuid, KVRT_UUID_BYTES);
		es->dev_used |= 1ULL << slot;
	}
	if (!(s->res_slots & (1ULL << slot))) {
		s->res_slots |= 1ULL << slot;
		es->dev_fds[slot]++;
	}
}

void emb_dev_unregister(struct emb_space *es, struct emb_client *s, uint32_t slot)
{
	if (!(s->res_slots & (1ULL << slot)))
		return;
	s->res_slots &= ~(1ULL << slot);
	if (--es->dev_fds[slot])
		return;
	es->dev_used &= ~(1ULL << slot);
	memset(es->dev[slot], 0, KVRT_UUID_BYTES);
}

/*
 * Residency add, under es->lock, in the module's order: entry by entry the
 * block (-EINVAL, -EPERM), then a slot for a new device (-ENOSPC), then
 * room for every new record, and only then any change: a failed call
 * registers no device.
 */
static int emb_res_add(struct emb_client *s, const uint8_t *uuid, uint32_t count,
		       const struct kvrt_residency_entry *en)
{
	struct emb_space *es = s->es;
	const struct kvc_space *c = &es->core;
	int slot = dev_slot(es, uuid), ret;
	uint32_t want;

	for (uint32_t i = 0; i < count; i++) {
		const struct kvc_block *b;

		if (en[i].block >= c->backed_blocks)
			return -EINVAL;
		b = &c->blocks[en[i].block];
		if (!(b->state == KVC_BLOCK_OWNED && b->owner == s->owner) &&
		    !kvc_refs_count(&s->refs, en[i].block))
			return -EPERM;
	}
	if (slot < 0 && es->dev_used == ~0ULL)
		return -ENOSPC;
	want = slot < 0 ? (uint32_t)__builtin_ctzll(~es->dev_used) : (uint32_t)slot;
	ret = emb_bx_cover(es, c->backed_blocks);
	if (ret)
		return ret;
	/* Room for every record that is new: count them per block, then grow. */
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];

		if (slot < 0 || rec_find(b, s->owner, want) < 0)
			b->pending++;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];
		struct emb_rec *r;
		uint64_t cap = b->crec;

		if (!b->pending || ret)
			goto next;
		while (cap < (uint64_t)b->nrec + b->pending)
			cap = cap ? cap * 2 : 2;
		if (cap > b->crec) {
			r = cap <= UINT32_MAX ? realloc(b->rec, cap * sizeof(*r)) : NULL;
			if (!r) {
				ret = -ENOMEM;
				goto next;
			}
			b->rec = r;
			b->crec = (uint32_t)cap;
		}
next:
		b->pending = 0;
	}
	if (ret)
		return ret;
	slot = (int)want;
	dev_register(es, s, want, uuid);
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];
		int r = rec_find(b, s->owner, (uint32_t)slot);

		if (r >= 0)
			b->rec[r].gpu_block = en[i].gpu_block;
		else
			b->rec[b->nrec++] = (struct emb_rec){ .owner = s->owner,
							      .slot = (uint32_t)slot,
							      .gpu_block = en[i].gpu_block };
	}
	return slot;
}

static int emb_res_del(struct emb_client *s, const uint8_t *uuid, uint32_t count,
		       const struct kvrt_residency_entry *en)
{
	struct emb_space *es = s->es;
	int slot = dev_slot(es, uuid);

	if (slot < 0)
		return -ENOENT;
	for (uint32_t i = 0; i < count; i++) {
		if (en[i].block >= es->core.backed_blocks)
			return -EINVAL;
		if (en[i].block >= es->nbx ||
		    rec_find(&es->bx[en[i].block], s->owner, (uint32_t)slot) < 0)
			return -ENOENT;
	}
	for (uint32_t i = 0; i < count; i++) {
		struct emb_blk *b = &es->bx[en[i].block];
		int r = rec_find(b, s->owner, (uint32_t)slot);

		if (r >= 0)	/* a block listed twice went the first time */
			emb_rec_remove(b, (uint32_t)r);
	}
	return slot;
}

static int emb_res_clear(struct emb_client *s, const uint8_t *uuid)
{
	struct emb_space *es = s->es;
	int slot = dev_slot(es, uuid);

	if (slot < 0)
		return -ENOENT;
	for (uint64_t id = 0; id < es->nbx; id++) {
		int r = rec_find(&es->bx[id], s->owner, (uint32_t)slot);

		if (r >= 0)
			emb_rec_remove(&es->bx[id], (uint32_t)r);
	}
	/* This client is done with the device: its registration goes too. */
	emb_dev_unregister(es, s, (uint32_t)slot);
	return slot;
}

int emb_residency(struct kvrt_space *space, uint32_t op, const uint8_t *uuid, uint32_t count,
		  const struct kvrt_residency_entry *entries)
{
	struct emb_client *s = to_emb(space);
	struct emb_space *es = s->es;
	int ret;

	pthread_mutex_lock(&es->lock);
	switch (op) {
	case KVPOOL_RESIDENCY_ADD:
		ret = emb_res_add(s, uuid, count, entries);
		break;
	case KVPOOL_RESIDENCY_DEL:
		ret = emb_res_del(s, uuid, count, entries);
		break;
	case KVPOOL_RESIDENCY_CLEAR:
		ret = count ? -EINVAL : emb_res_clear(s, uuid);
		break;
	default:
		ret = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&es->lock);
	return ret;
}
