// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_blocks: fuzz_test's ALLOC and FREE, valid and with defects.
 */
#include "fuzz_harness.h"

/* ---- ALLOC and FREE ------------------------------------------------------- */

/* Blocks of this space that none of this process's files owns. */
static u64 of_avail(struct worker *w, struct ofile *of)
{
	u64 mine = 0;
	int i;

	for (i = 0; i < FZ_MAX_OFILES; i++)
		if (w->of[i].used && w->of[i].joined &&
		    w->of[i].space_id == of->space_id)
			mine += w->of[i].owned.n;
	return of->nr_blocks > mine ? of->nr_blocks - mine : 0;
}

void check_my_blocks(struct worker *w, struct ofile *of, const char *why)
{
	struct kvpool_space_info si;
	int ret = kv_space_info(of->fds[0], &si);

	if (ret)
		fz_fail(w, "SPACE_INFO %s: %s", why, ename(-ret));
	if (si.my_blocks != of->owned.n)
		fz_fail(w, "%s: SPACE_INFO says this file owns %llu blocks, it owns %u",
			why, (unsigned long long)si.my_blocks, of->owned.n);
}

static int u32_cmp(const void *a, const void *b)
{
	u32 x = *(const u32 *)a, y = *(const u32 *)b;

	return x < y ? -1 : x > y;
}

static int has_dup(const u32 *ids, u32 n)
{
	u32 *c, i;
	int dup = 0;

	if (n < 2)
		return 0;
	c = malloc((size_t)n * 4);
	if (!c)
		_exit(3);
	memcpy(c, ids, (size_t)n * 4);
	qsort(c, n, 4, u32_cmp);
	for (i = 1; i < n; i++)
		if (c[i] == c[i - 1])
			dup = 1;
	free(c);
	return dup;
}

static void blocks_expect(struct worker *w, int alloc,
			  const struct kvpool_blocks *b, int sk, int ik,
			  struct ofile *of, const u32 *ids, struct fz_exp *e)
{
	u64 kb, i, n;

	memset(e, 0, sizeof(*e));
	if (!p_readable(sk)) {
		ex_defect(e, EFAULT);
		return;
	}
	if (b->flags || b->reserved[0] || b->reserved[1] || !b->count)
		ex_defect(e, EINVAL);
	if (b->count > KVPOOL_MAX_BATCH)
		ex_defect(e, E2BIG);
	if (!of->joined)
		ex_defect(e, EBADFD);
	if (alloc) {
		ex_add(e, ENOSPC);
		ex_add(e, ENOMEM);
		ex_add(e, EINTR);
		if (!p_writable(ik))
			ex_defect(e, EFAULT);
		if (of->joined && b->count && b->count <= KVPOOL_MAX_BATCH &&
		    b->count > of_avail(w, of))
			ex_defect(e, ENOSPC);
		return;
	}
	if (!p_readable(ik)) {
		ex_defect(e, EFAULT);
		return;
	}
	if (!of->joined || !ids || !b->count || b->count > KVPOOL_MAX_BATCH)
		return;
	kb = kb_get(w, of->space_id);
	n = b->count;
	for (i = 0; i < n; i++) {
		u32 id = ids[i];
		u64 j;

		if (idm_find(&of->owned, id) < 0) {
			if (id >= of->nr_blocks) {
				ex_defect(e, EINVAL);
			} else if (((u64)id + 1) * of->block_bytes <= kb) {
				ex_defect(e, EPERM);
			} else {
				ex_defect(e, EINVAL);
				ex_defect(e, EPERM);
			}
		}
		if (n <= 32) {
			for (j = 0; j < i; j++)
				if (ids[j] == id)
					ex_defect(e, EINVAL);
		}
	}
	if (n > 32 && has_dup(ids, n))	/* a big batch: sort a copy */
		ex_defect(e, EINVAL);
}

static u32 gen_count(struct rng *r, u64 avail)
{
	u64 c;

	switch (rn(r, 50)) {
	case 48:
		c = avail ? avail : 1;
		break;
	case 49:
		c = avail + 1;
		break;
	default: {
		unsigned int k = rn(r, 48);

		c = k < 20 ? 1 : k < 35 ? 2 + rn(r, 7) : k < 45 ? 9 + rn(r, 56) :
		    65 + rn(r, 960);
		break;
	}
	}
	return c > KVPOOL_MAX_BATCH ? KVPOOL_MAX_BATCH : (u32)c;
}

u32 huge_count(struct rng *r)
{
	switch (rn(r, 4)) {
	case 0:
		return KVPOOL_MAX_BATCH + 1;
	case 1:
		return 0xffffffffu;
	case 2:
		return KVPOOL_MAX_BATCH + 1 + rn(r, 1u << 20);
	}
	return (u32)rnd(r) | 0x80000000u;
}

/* ALLOC succeeded: check and record the ids it wrote at @at. */
static void alloc_took(struct worker *w, struct ofile *of, const u32 *at, u32 n)
{
	u32 *ids = w->tmp, i, max = 0;
	int k;

	if (probe_copy(ids, at, (size_t)n * 4))
		fz_fail(w, "fault reading the ids ALLOC wrote at %p", at);
	if (has_dup(ids, n))
		fz_fail(w, "ALLOC returned the same id twice in one batch");
	for (i = 0; i < n; i++) {
		if (ids[i] >= of->nr_blocks)
			fz_fail(w, "ALLOC returned id %u of a space of %llu blocks",
				ids[i], (unsigned long long)of->nr_blocks);
		for (k = 0; k < FZ_MAX_OFILES; k++) {
			struct ofile *o = &w->of[k];

			if (o->used && o->joined && o->space_id == of->space_id &&
			    idm_find(&o->owned, ids[i]) >= 0)
				fz_fail(w, "ALLOC returned block %u, which file %d of this process owns",
					ids[i], k);
			if (o->used && o->joined && o->space_id == of->space_id &&
			    idm_find(&o->refs, ids[i]) >= 0)
				fz_fail(w, "ALLOC returned block %u, on which file %d of this process holds a reader reference",
					ids[i], k);
		}
		if (ids[i] > max)
			max = ids[i];
	}
	for (i = 0; i < n; i++) {
		claim(w, of, ids[i]);
		idm_put(&of->owned, ids[i], 0);
	}
	kb_raise(w, of->space_id, ((u64)max + 1) * of->block_bytes);
	note(w, " ids %u..", ids[0]);
}

/* Bytes in blocks this process's own files hold: owned or referenced. */
static u64 owned_bytes(struct worker *w)
{
	u64 n = 0;
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++)
		if (w->of[k].used && !w->of[k].inherited)
			n += (u64)(w->of[k].owned.n + w->of[k].refs.n) *
			     w->of[k].block_bytes;
	return n;
}

/* A file of this process (not a parent's) with reader references. */
struct ofile *of_with_refs(struct worker *w, u64 r)
{
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *of = &w->of[(r + k) % FZ_MAX_OFILES];

		if (of->used && !of->inherited && of->joined && of->refs.n)
			return of;
	}
	return NULL;
}

void op_alloc(struct worker *w, struct rng *r, int bad)
{
	struct kvpool_blocks b;
	struct ofile *of;
	int sk = P_GOOD, ik = P_GOOD, ret, n, fd, unjoined = 0;
	u32 *at;
	char *arg;
	struct fz_exp e;

	/* Leave the others some pool: over its share, a worker frees instead. */
	if (!bad && owned_bytes(w) > w->pool_bytes / (3 * cfg.workers)) {
		instead(w, r, of_with_refs(w, rnd(r)) && chance(r, 2) ? OP_RELEASE :
			OP_FREE, "over budget");
		return;
	}
	memset(&b, 0, sizeof(b));
	of = of_pick(w, rnd(r), PICK_JOINED | PICK_MUT);
	if (!of && !bad) {
		instead(w, r, OP_JOIN, "no joined file");
		return;
	}
	if (!of)
		of = of_any(w, rnd(r), PICK_MUT);
	b.count = gen_count(r, of->joined ? of_avail(w, of) : 1);
	switch (rn(r, 20)) {
	case 0:
		ik = P_MISALIGN;
		break;
	case 1:
		ik = P_KVOWN;
		break;
	}
	sk = odd_struct_kind(r, 20, sk);
	for (n = bad ? 1 + rn(r, 3) : 0; n > 0; n--) {
		switch (rn(r, 7)) {
		case 0:
			b.flags = chance(r, 2) ? 1u << rn(r, 32) : (u32)rnd(r) | 1;
			break;
		case 1:
			b.reserved[rn(r, 2)] = rnd(r) | 1;
			break;
		case 2:
			b.count = 0;
			break;
		case 3:
			b.count = huge_count(r);
			break;
		case 4:
			ik = chance(r, 4) ? (chance(r, 2) ? P_RO : P_KVRO) : p_fault_kind(r);
			break;
		case 5:
			sk = p_fault_kind(r);
			break;
		default:
			unjoined = 1;
			break;
		}
	}
	if (unjoined)
		of = of_unjoined_or(w, r, of);
	at = place_ids(w, r, &ik, NULL, b.count <= FZ_IDS_MAX ? b.count : 1);
	b.ids = (u64)(uintptr_t)at;
	arg = place_struct(w, r, &sk, &b, sizeof(b));
	blocks_expect(w, 1, &b, sk, ik, of, NULL, &e);
	if (of->inherited && !e.must_fail) {
		skip(w, "parent's file");
		return;
	}
	fd = of_fd(of, r);
	note(w, " file %d fd %d%s sp %u count %u flags %#x res %llx,%llx ids %s %p struct %s",
	     of_index(w, of), fd, of->joined ? "" : " (unjoined)", of->space_id,
	     b.count, b.flags, (unsigned long long)b.reserved[0],
	     (unsigned long long)b.reserved[1], p_name[ik], at, p_name[sk]);
	ret = kv_ioctl(fd, KVPOOL_IOC_ALLOC, arg);
	fz_expect(w, ret, &e);
	if (!ret)
		alloc_took(w, of, at, b.count);
	else if (of->joined && (ret == -EFAULT || chance(r, 4)))
		check_my_blocks(w, of, "after a failed ALLOC");
}

/* Up to @max distinct ids this file owns, into w->tmp; returns how many. */
u32 pick_owned(struct worker *w, struct rng *r, struct ofile *of, u32 max)
{
	u32 n = 0, i, start;

	if (!of->owned.n || !max)
		return 0;
	start = rn(r, of->owned.cap);
	for (i = 0; i < of->owned.cap && n < max; i++) {
		u32 k = of->owned.key[(start + i) & (of->owned.cap - 1)];

		if (k != ID_EMPTY)
			w->tmp[n++] = k;
	}
	return n;
}

/* An id this file does not own. */
u32 foreign_id(struct worker *w, struct rng *r, struct ofile *of)
{
	int k;

	switch (rn(r, 6)) {
	case 0:
	case 1:	/* another file's block in the same space */
		for (k = 0; k < FZ_MAX_OFILES; k++) {
			struct ofile *o = &w->of[(r->s + k) % FZ_MAX_OFILES];
			long at;

			if (o == of || !o->used || !o->joined ||
			    o->space_id != of->space_id)
				continue;
			at = idm_pick(&o->owned, rnd(r));
			if (at >= 0)
				return o->owned.key[at];
		}
		break;
	case 2:
		return (u32)(of->nr_blocks + rn(r, 1000));
	case 3:
		return 0xffffffffu - rn(r, 2);
	case 4:
		return (u32)(kb_get(w, of->space_id) / (of->block_bytes ? of->block_bytes : 1));
	}
	for (k = 0; k < 16; k++) {
		u32 id = (u32)rn(r, of->nr_blocks ? of->nr_blocks : 1000);

		if (idm_find(&of->owned, id) < 0)
			return id;
	}
	return 0xfffffffeu;
}

void op_free(struct worker *w, struct rng *r, int bad)
{
	struct kvpool_blocks b;
	struct ofile *of;
	int sk = P_GOOD, ik = P_GOOD, ret, n, fd, unjoined = 0, mine;
	u32 cnt, i, max;
	u32 *at;
	char *arg;
	struct fz_exp e;

	memset(&b, 0, sizeof(b));
	of = of_pick(w, rnd(r), PICK_OWNS | PICK_MUT);
	if (!of && !bad) {
		instead(w, r, OP_ALLOC, "nothing owned");
		return;
	}
	if (!of || (bad && chance(r, 3)))
		of = of_any(w, rnd(r), PICK_JOINED | (bad ? 0 : PICK_MUT));
	switch (rn(r, 8)) {
	case 0:
		max = of->owned.n;
		break;
	case 1:
	case 2:
		max = 2 + rn(r, 63);
		break;
	default:
		max = 1;
		break;
	}
	if (max > KVPOOL_MAX_BATCH)
		max = KVPOOL_MAX_BATCH;
	cnt = pick_owned(w, r, of, max);
	if (!cnt) {
		w->tmp[0] = foreign_id(w, r, of);
		cnt = 1;
	}
	switch (rn(r, 16)) {
	case 0:
		ik = P_MISALIGN;
		break;
	case 1:
		ik = P_KVOWN;
		break;
	case 2:
		ik = P_RO;
		break;
	}
	if (chance(r, 20))
		sk = chance(r, 2) ? P_RO : P_KVOWN;
	b.count = cnt;
	for (n = bad ? 1 + rn(r, 3) : 0; n > 0; n--) {
		switch (rn(r, 9)) {
		case 0:
			b.flags = chance(r, 2) ? 1u << rn(r, 32) : (u32)rnd(r) | 1;
			break;
		case 1:
			b.reserved[rn(r, 2)] = rnd(r) | 1;
			break;
		case 2:
			b.count = 0;
			break;
		case 3:
			b.count = huge_count(r);
			break;
		case 4:	/* a duplicate */
			if (cnt < KVPOOL_MAX_BATCH) {
				w->tmp[cnt] = w->tmp[rn(r, cnt)];
				i = rn(r, cnt + 1);
				u32 t = w->tmp[i];

				w->tmp[i] = w->tmp[cnt];
				w->tmp[cnt] = t;
				b.count = ++cnt;
			}
			break;
		case 5:	/* an id that is not ours */
			if (chance(r, 2) || cnt >= KVPOOL_MAX_BATCH) {
				w->tmp[rn(r, cnt)] = foreign_id(w, r, of);
			} else {
				w->tmp[cnt] = foreign_id(w, r, of);
				b.count = ++cnt;
			}
			break;
		case 6:
			ik = p_fault_kind(r);
			break;
		case 7:
			sk = p_fault_kind(r);
			break;
		default:
			unjoined = 1;
			break;
		}
	}
	if (unjoined)
		of = of_unjoined_or(w, r, of);
	at = place_ids(w, r, &ik, w->tmp, cnt);
	b.ids = (u64)(uintptr_t)at;
	arg = place_struct(w, r, &sk, &b, sizeof(b));
	blocks_expect(w, 0, &b, sk, ik, of, w->tmp, &e);
	if (of->inherited && !e.must_fail) {
		skip(w, "parent's file");
		return;
	}
	fd = of_fd(of, r);
	note(w, " file %d fd %d%s sp %u count %u (%u ids: %u%s) flags %#x res %llx,%llx ids %s %p struct %s",
	     of_index(w, of), fd, of->joined ? "" : " (unjoined)", of->space_id,
	     b.count, cnt, w->tmp[0], cnt > 1 ? ",..." : "", b.flags,
	     (unsigned long long)b.reserved[0], (unsigned long long)b.reserved[1],
	     p_name[ik], at, p_name[sk]);
	/* Records go before the blocks do (see struct fz_shm). */
	mine = !e.must_fail;
	if (mine)
		for (i = 0; i < cnt; i++)
			unclaim(w, of, w->tmp[i]);
	ret = kv_ioctl(fd, KVPOOL_IOC_FREE, arg);
	fz_expect(w, ret, &e);
	if (!ret) {
		for (i = 0; i < cnt; i++)
			idm_del(&of->owned, w->tmp[i]);
	} else if (of->joined && (chance(r, 4) || ret == -EFAULT)) {
		check_my_blocks(w, of, "after a failed FREE");
	}
}
