// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_prefix: fuzz_test's prefix cache: PUBLISH, LOOKUP and RELEASE against a
 * model of every file's reader references.
 */
#include "fuzz_harness.h"

/* ---- PUBLISH, LOOKUP, RELEASE -------------------------------------------------- */

/* Hash number @n (< FZ_NHASH) of space @space_id: the same in every worker. */
static void fz_hash(u8 *out, u32 space_id, u32 n)
{
	int k;

	for (k = 0; k < KVPOOL_HASH_BYTES / 8; k++) {
		u64 v = fz_mix((u64)space_id << 32 ^ (u64)n << 8 ^ (u64)k ^
			       0x5052454649580000ULL);

		memcpy(out + 8 * k, &v, 8);
	}
}

/*
 * The block a file of this process holds a reference on for hash @n of
 * space @space_id (*who: that file), or ID_EMPTY.  While the reference is
 * held, the block stays in the index under that hash.
 */
static u32 held_block(struct worker *w, u32 space_id, u32 n, struct ofile **who)
{
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *o = &w->of[k];

		if (!o->used || !o->joined || o->space_id != space_id || !o->hblk[n])
			continue;
		if (who)
			*who = o;
		return o->hblk[n] - 1;
	}
	return ID_EMPTY;
}

/* @of got one more reference on block @id, which holds hash @n. */
static void ref_add(struct worker *w, struct ofile *of, u32 id, u32 n)
{
	struct ofile *o = NULL;
	u32 held = held_block(w, of->space_id, n, &o);
	long at;
	int k;

	if (held != ID_EMPTY && held != id)
		fz_fail(w, "hash %u of space %u is in block %u, while file %d holds a reference on block %u for it: one hash in two blocks",
			n, of->space_id, id, of_index(w, o), held);
	for (k = 0; k < FZ_MAX_OFILES; k++) {
		o = &w->of[k];
		if (!o->used || !o->joined || o->space_id != of->space_id)
			continue;
		at = idm_find(&o->refs, id);
		if (at >= 0 && o->refs.val[at] >> 20 != n)
			fz_fail(w, "block %u of space %u holds hash %u, but file %d holds it for hash %u",
				id, of->space_id, n, k, o->refs.val[at] >> 20);
	}
	at = idm_find(&of->refs, id);
	if (at < 0)
		idm_put(&of->refs, id, n << 20 | 1);
	else
		of->refs.val[at]++;
	of->hblk[n] = id + 1;
	of->nrefs++;
}

static u32 ref_count(const struct ofile *of, u32 id)
{
	long at = idm_find(&of->refs, id);

	return at < 0 ? 0 : of->refs.val[at] & 0xfffff;
}

static void ref_drop(struct ofile *of, u32 id)
{
	long at = idm_find(&of->refs, id);

	if (at < 0)
		return;
	if ((of->refs.val[at] & 0xfffff) == 1) {
		of->hblk[of->refs.val[at] >> 20] = 0;
		idm_del(&of->refs, id);
	} else {
		of->refs.val[at]--;
	}
	of->nrefs--;
}

/* SPACE_STATS agrees with the reference model, SPACE_INFO with owned. */
static void check_refs(struct worker *w, struct ofile *of, const char *why)
{
	struct kvpool_space_stats st;
	u64 mine = 0;
	int k, ret;

	if (!of->used || !of->joined)
		return;
	ret = kv_space_stats(of->fds[0], &st);
	if (ret)
		fz_fail(w, "SPACE_STATS %s: %s", why, ename(-ret));
	for (k = 0; k < FZ_MAX_OFILES; k++)
		if (w->of[k].used && w->of[k].joined &&
		    w->of[k].space_id == of->space_id)
			mine += w->of[k].nrefs;
	if (st.space_id != of->space_id || st.my_refs != of->nrefs ||
	    st.readers < mine || st.published_blocks > of->nr_blocks ||
	    st.cached_blocks + st.published_blocks > of->nr_blocks ||
	    (st.readers && !st.published_blocks) || st.flags ||
	    st.reserved[0] || st.reserved[1] || st.reserved[2] || st.reserved[3])
		fz_fail(w, "SPACE_STATS %s: space %u my_refs %llu readers %llu published %llu cached %llu; expected space %u, my_refs %llu, readers >= %llu",
			why, st.space_id, (unsigned long long)st.my_refs,
			(unsigned long long)st.readers,
			(unsigned long long)st.published_blocks,
			(unsigned long long)st.cached_blocks, of->space_id,
			(unsigned long long)of->nrefs, (unsigned long long)mine);
	check_my_blocks(w, of, why);
}

/* A block in the index: no file of this process and no live record owns it. */
static void check_unowned(struct worker *w, struct ofile *of, u32 id,
			  const char *what)
{
	char a[128];
	u64 rec;
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *o = &w->of[k];

		if (o->used && o->joined && o->space_id == of->space_id &&
		    idm_find(&o->owned, id) >= 0)
			fz_fail(w, "%s block %u, which file %d of this process owns",
				what, id, k);
	}
	if (of->name_slot < 0 || id >= FZ_TRACK)
		return;
	rec = LOAD(sh->owner[of->name_slot][id]);
	if (rec && (u32)(rec >> 32) == of->space_id && rec_live(rec)) {
		rec_str(rec, a, sizeof(a));
		fz_fail(w, "%s block %u of space %u, which [%s] owns", what, id,
			of->space_id, a);
	}
}

/*
 * A buffer of @len bytes of kind @k for array number @slot of one call
 * (each has its own region of the scratch and read-only memory).
 */
static char *place_buf(struct worker *w, struct rng *r, int k, const void *src,
		       size_t len, unsigned int slot)
{
	char *p;

	switch (k) {
	case P_GOOD:
		p = (char *)w->ids + slot * 4096;
		break;
	case P_MISALIGN:
		p = (char *)w->ids + slot * 4096 + 1 + rn(r, 7);
		break;
	case P_RO:
		if (src)
			memcpy(w->ro_rw + (2 + slot) * w->ps, src, len);
		return w->ro + (2 + slot) * w->ps;
	case P_PARTIAL:
		p = w->guard - (len > 1 ? 1 + rn(r, len - 1) : 1);
		if (src)
			memcpy(p, src, w->guard - p);
		return p;
	default:
		return bogus(w, r, k, len);
	}
	if (src)
		memcpy(p, src, len);
	return p;
}

static int p_bad_kind(struct rng *r, int readable_ok)
{
	if (readable_ok && chance(r, 4))
		return P_RO;
	return p_fault_kind(r);
}

static void pub_expect(struct worker *w, const struct kvpool_publish *p,
		       int sk, int ek, struct ofile *of,
		       const struct kvpool_publish_entry *ents, u32 n,
		       struct fz_exp *e)
{
	u64 kb;
	u32 i, j;

	memset(e, 0, sizeof(*e));
	if (!p_readable(sk)) {
		ex_defect(e, EFAULT);
		return;
	}
	ex_add(e, ENOMEM);
	ex_add(e, EINTR);
	if ((p->flags & ~KVPOOL_PUBLISH_FLAGS) || p->nr_dedup || p->pad || p->reserved[0] ||
	    p->reserved[1] || !p->count)
		ex_defect(e, EINVAL);
	if (p->count > KVPOOL_MAX_BATCH)
		ex_defect(e, E2BIG);
	if (!of->joined)
		ex_defect(e, EBADFD);
	if (!p->count || p->count > KVPOOL_MAX_BATCH || !of->joined) {
		ex_add(e, EFAULT);
		return;
	}
	if (!p_readable(ek)) {
		ex_defect(e, EFAULT);
		return;
	}
	if (!p_writable(ek))
		ex_defect(e, EFAULT);	/* the results cannot be written */
	kb = kb_get(w, of->space_id);
	for (i = 0; i < n; i++) {
		const struct kvpool_publish_entry *x = &ents[i];

		if (x->flags || x->pad)
			ex_defect(e, EINVAL);
		if ((p->flags & KVPOOL_PUBLISH_PRIORITY) ?
		    x->priority > KVPOOL_PRIO_MAX : x->priority != 0)
			ex_defect(e, EINVAL);
		if (idm_find(&of->owned, x->id) < 0) {
			if (x->id >= of->nr_blocks) {
				ex_defect(e, EINVAL);
			} else if (((u64)x->id + 1) * of->block_bytes <= kb) {
				ex_defect(e, EPERM);
			} else {
				ex_defect(e, EINVAL);
				ex_defect(e, EPERM);
			}
		}
		for (j = 0; j < i; j++)
			if (ents[j].id == x->id)
				ex_defect(e, EINVAL);
	}
}

/* PUBLISH succeeded: check the entries it wrote back, update the model. */
static void publish_took(struct worker *w, struct ofile *of,
			 const struct kvpool_publish_entry *in,
			 const struct kvpool_publish_entry *out, const u32 *hn,
			 u32 n, u32 nr_dedup)
{
	u32 i, j, nd = 0, held;

	for (i = 0; i < n; i++)
		idm_del(&of->owned, in[i].id);
	for (i = 0; i < n; i++) {
		const struct kvpool_publish_entry *o = &out[i];

		if (memcmp(o->hash, in[i].hash, KVPOOL_HASH_BYTES) ||
		    o->priority != in[i].priority || o->pad)
			fz_fail(w, "PUBLISH changed the in fields of entry %u", i);
		if (o->flags & ~KVPOOL_PUBLISHED_DEDUP)
			fz_fail(w, "PUBLISH entry %u flags %#x", i, o->flags);
		if (o->id >= of->nr_blocks)
			fz_fail(w, "PUBLISH entry %u id %u of a space of %llu blocks",
				i, o->id, (unsigned long long)of->nr_blocks);
		if (o->flags) {
			nd++;
			if (o->id == in[i].id)
				fz_fail(w, "PUBLISH entry %u (hash %u): DEDUP onto its own block %u",
					i, hn[i], o->id);
		} else if (o->id != in[i].id) {
			fz_fail(w, "PUBLISH entry %u (hash %u): new hash, but id %u became %u",
				i, hn[i], in[i].id, o->id);
		}
		held = held_block(w, of->space_id, hn[i], NULL);
		if (held != ID_EMPTY && (o->id != held || !o->flags))
			fz_fail(w, "PUBLISH entry %u: hash %u is held in block %u, got id %u flags %#x",
				i, hn[i], held, o->id, o->flags);
		for (j = 0; j < i; j++)
			if (hn[j] == hn[i] && (o->id != out[j].id || !o->flags))
				fz_fail(w, "PUBLISH entries %u and %u of hash %u: ids %u and %u, flags %#x",
					j, i, hn[i], out[j].id, o->id, o->flags);
		check_unowned(w, of, o->id, "PUBLISH returned");
		ref_add(w, of, o->id, hn[i]);
	}
	if (nd != nr_dedup)
		fz_fail(w, "PUBLISH: nr_dedup %u, %u entries say DEDUP", nr_dedup, nd);
	note(w, " ids %u..%s, %u dedup", out[0].id, n > 1 ? "" : " only", nd);
}

void op_publish(struct worker *w, struct rng *r, int bad)
{
	struct kvpool_publish_entry ents[FZ_PBATCH + 1], out[FZ_PBATCH + 1];
	struct kvpool_publish p, pout;
	u32 hn[FZ_PBATCH + 1], cnt, i, first;
	int sk = P_GOOD, ek = P_GOOD, ret, nd, fd, unjoined = 0, mine, k;
	struct ofile *of;
	struct fz_exp e;
	char *arg, *at;

	of = of_pick(w, rnd(r), PICK_OWNS | PICK_MUT);
	if (!of && !bad) {
		instead(w, r, OP_ALLOC, "nothing owned");
		return;
	}
	if (!of)
		of = of_any(w, rnd(r), PICK_JOINED | PICK_MUT);
	cnt = pick_owned(w, r, of, 1 + rn(r, FZ_PBATCH));
	if (!cnt) {
		w->tmp[0] = foreign_id(w, r, of);
		cnt = 1;
	}
	memset(&p, 0, sizeof(p));
	if (chance(r, 3))
		p.flags = KVPOOL_PUBLISH_PRIORITY;
	first = rn(r, FZ_NHASH);
	for (i = 0; i < cnt; i++) {
		u8 h[KVPOOL_HASH_BYTES];

		hn[i] = chance(r, 4) ? rn(r, FZ_NHASH) : (first + i) % FZ_NHASH;
		fz_hash(h, of->space_id, hn[i]);
		memset(&ents[i], 0, sizeof(ents[i]));
		memcpy(ents[i].hash, h, sizeof(h));
		ents[i].id = w->tmp[i];
		if (p.flags)
			ents[i].priority = rn(r, KVPOOL_PRIO_MAX + 1);
	}
	if (chance(r, 10))
		ek = P_MISALIGN;
	if (chance(r, 10))
		sk = P_MISALIGN;
	p.count = cnt;
	for (nd = bad ? 1 + rn(r, 3) : 0; nd > 0; nd--) {
		k = rn(r, cnt);
		switch (rn(r, 15)) {
		case 0:
			p.flags |= 2u << rn(r, 31);
			break;
		case 1:
			p.pad = (u32)rnd(r) | 1;
			break;
		case 2:
			p.reserved[rn(r, 2)] = rnd(r) | 1;
			break;
		case 3:
			p.count = 0;
			break;
		case 4:
			p.count = huge_count(r);
			break;
		case 5:
			ents[k].flags = (u32)rnd(r) | 1;
			break;
		case 6:
			ents[k].pad = (u32)rnd(r) | 1;
			break;
		case 7:
			p.flags |= KVPOOL_PUBLISH_PRIORITY;
			ents[k].priority = KVPOOL_PRIO_MAX + 1 +
					   (chance(r, 2) ? rn(r, 8) : (u32)rnd(r) % 0x7fffff00);
			break;
		case 8:
			if (!(p.flags & KVPOOL_PUBLISH_PRIORITY))
				ents[k].priority = 1 + rn(r, KVPOOL_PRIO_MAX);
			else
				ents[k].priority = KVPOOL_PRIO_MAX + 1;
			break;
		case 9:
			ents[k].id = foreign_id(w, r, of);
			break;
		case 10:	/* a duplicate id */
			if (cnt < FZ_PBATCH + 1) {
				ents[cnt] = ents[k];
				hn[cnt] = hn[k];
				cnt++;
				if (p.count == cnt - 1)
					p.count = cnt;
			}
			break;
		case 11:
			ek = p_bad_kind(r, 1);
			break;
		case 12:
			sk = p_fault_kind(r);
			break;
		case 13:	/* out only: 0 on input (API 4) */
			p.nr_dedup = (u32)rnd(r) | 1;
			break;
		default:
			unjoined = 1;
			break;
		}
	}
	if (unjoined)
		of = of_unjoined_or(w, r, of);
	at = place_buf(w, r, ek, ents, (size_t)cnt * sizeof(ents[0]), 0);
	p.entries = (u64)(uintptr_t)at;
	arg = place_struct(w, r, &sk, &p, sizeof(p));
	pub_expect(w, &p, sk, ek, of, ents, cnt, &e);
	if (of->inherited && !e.must_fail) {
		skip(w, "parent's file");
		return;
	}
	fd = of_fd(of, r);
	note(w, " file %d fd %d%s sp %u count %u (%u entries: id %u hash %u%s) flags %#x pad %u res %llx,%llx entries %s struct %s",
	     of_index(w, of), fd, of->joined ? "" : " (unjoined)", of->space_id,
	     p.count, cnt, ents[0].id, hn[0], cnt > 1 ? ",..." : "", p.flags, p.pad,
	     (unsigned long long)p.reserved[0], (unsigned long long)p.reserved[1],
	     p_name[ek], p_name[sk]);
	/* Records go before the blocks do (DEDUP frees them). */
	mine = !e.must_fail;
	if (mine)
		for (i = 0; i < cnt; i++)
			unclaim(w, of, ents[i].id);
	ret = kv_ioctl(fd, KVPOOL_IOC_PUBLISH, arg);
	fz_expect(w, ret, &e);
	if (ret) {
		if (mine)	/* still ours */
			for (i = 0; i < cnt; i++)
				claim(w, of, ents[i].id);
		check_refs(w, of, "after a failed PUBLISH");
		return;
	}
	if (probe_copy(out, at, (size_t)cnt * sizeof(out[0])) ||
	    probe_copy(&pout, arg, sizeof(pout)))
		fz_fail(w, "fault reading back what PUBLISH wrote");
	if (pout.count != p.count || pout.flags != p.flags || pout.pad ||
	    pout.entries != p.entries)
		fz_fail(w, "PUBLISH changed in fields of its struct");
	publish_took(w, of, ents, out, hn, cnt, pout.nr_dedup);
	check_refs(w, of, "after PUBLISH");
}

void op_lookup(struct worker *w, struct rng *r, int bad)
{
	u8 hs[FZ_PBATCH][KVPOOL_HASH_BYTES];
	u32 hn[FZ_PBATCH], ids[FZ_PBATCH], cnt, i, j, first, hits = 0, held;
	u64 dev[FZ_PBATCH];
	int sk = P_GOOD, hk = P_GOOD, ik = P_GOOD, dk = P_GOOD, with_dev, nd, ret, fd;
	int unjoined = 0, defect_ptr = 0;
	struct kvpool_lookup l, lout;
	struct ofile *of;
	struct fz_exp e;
	char *arg, *hp, *ip, *dp;

	of = of_pick(w, rnd(r), PICK_JOINED | PICK_MUT);
	if (!of && !bad) {
		instead(w, r, OP_JOIN, "no joined file");
		return;
	}
	if (!of)
		of = of_any(w, rnd(r), PICK_MUT);
	cnt = 1 + rn(r, FZ_PBATCH);
	first = rn(r, FZ_NHASH);
	for (i = 0; i < cnt; i++) {
		hn[i] = chance(r, 6) ? rn(r, FZ_NHASH) : (first + i) % FZ_NHASH;
		fz_hash(hs[i], of->space_id, hn[i]);
	}
	with_dev = chance(r, 2);
	if (chance(r, 10))
		hk = chance(r, 2) ? P_MISALIGN : P_RO;	/* read-only is fine */
	if (chance(r, 10))
		ik = P_MISALIGN;
	if (chance(r, 10))
		sk = P_MISALIGN;
	memset(&l, 0, sizeof(l));
	l.count = cnt;
	for (nd = bad ? 1 + rn(r, 3) : 0; nd > 0; nd--) {
		switch (rn(r, 12)) {
		case 0:
			l.flags = (u32)rnd(r) | 1;
			break;
		case 1:
			l.pad = (u32)rnd(r) | 1;
			break;
		case 2:
			l.reserved[rn(r, 2)] = rnd(r) | 1;
			break;
		case 3:
			l.count = 0;
			break;
		case 4:
			l.count = huge_count(r);
			break;
		case 5:
			hk = p_fault_kind(r);
			break;
		case 6:
			ik = p_bad_kind(r, 1);
			break;
		case 7:
			with_dev = 1;
			dk = p_bad_kind(r, 1);
			break;
		case 8:
		case 9:
			sk = p_fault_kind(r);
			break;
		case 10:	/* out only: 0 on input (API 4) */
			l.nr_hits = (u32)rnd(r) | 1;
			break;
		default:
			unjoined = 1;
			break;
		}
	}
	if (unjoined)
		of = of_unjoined_or(w, r, of);
	hp = place_buf(w, r, hk, hs, (size_t)cnt * KVPOOL_HASH_BYTES, 1);
	ip = place_buf(w, r, ik, NULL, (size_t)cnt * 4, 2);
	dp = with_dev ? place_buf(w, r, dk, NULL, (size_t)cnt * 8, 3) : NULL;
	if (!dp)	/* devices 0: not wanted, not a bad pointer */
		with_dev = 0;
	l.hashes = (u64)(uintptr_t)hp;
	l.ids = (u64)(uintptr_t)ip;
	l.devices = (u64)(uintptr_t)dp;
	arg = place_struct(w, r, &sk, &l, sizeof(l));

	memset(&e, 0, sizeof(e));
	if (!p_readable(sk)) {
		ex_defect(&e, EFAULT);
	} else {
		ex_add(&e, ENOMEM);
		ex_add(&e, EINTR);
		if (l.flags || l.nr_hits || l.pad || l.reserved[0] || l.reserved[1] ||
		    !l.count)
			ex_defect(&e, EINVAL);
		if (l.count > KVPOOL_MAX_BATCH)
			ex_defect(&e, E2BIG);
		if (!of->joined)
			ex_defect(&e, EBADFD);
		if (!p_readable(hk))
			ex_defect(&e, EFAULT);
		/* ids/devices are written only for hits: EFAULT when there are any */
		if (!p_writable(ik) || (with_dev && !p_writable(dk))) {
			ex_add(&e, EFAULT);
			defect_ptr = 1;
		}
	}
	if (of->inherited && !e.must_fail) {
		skip(w, "parent's file");
		return;
	}
	fd = of_fd(of, r);
	note(w, " file %d fd %d%s sp %u count %u (hashes %u%s) flags %#x pad %u res %llx,%llx hashes %s ids %s devices %s struct %s",
	     of_index(w, of), fd, of->joined ? "" : " (unjoined)", of->space_id,
	     l.count, hn[0], cnt > 1 ? ",..." : "", l.flags, l.pad,
	     (unsigned long long)l.reserved[0], (unsigned long long)l.reserved[1],
	     p_name[hk], p_name[ik], with_dev ? p_name[dk] : "none", p_name[sk]);
	ret = kv_ioctl(fd, KVPOOL_IOC_LOOKUP, arg);
	fz_expect(w, ret, &e);
	if (ret) {
		/* No reference is taken by a failed LOOKUP. */
		check_refs(w, of, "after a failed LOOKUP");
		return;
	}
	if (probe_copy(&lout, arg, sizeof(lout)))
		fz_fail(w, "fault reading back the LOOKUP struct");
	hits = lout.nr_hits;
	note(w, " %u hits", hits);
	if (hits > cnt)
		fz_fail(w, "LOOKUP: %u hits of %u hashes", hits, cnt);
	if (hits && defect_ptr)
		fz_fail(w, "LOOKUP: %u hits written through an unwritable pointer", hits);
	if (hits && probe_copy(ids, ip, (size_t)hits * 4))
		fz_fail(w, "fault reading back the ids LOOKUP wrote");
	if (hits && with_dev && probe_copy(dev, dp, (size_t)hits * 8))
		fz_fail(w, "fault reading back the devices LOOKUP wrote");
	if (hits < cnt) {
		/* It stopped at a hash that nobody here holds. */
		held = held_block(w, of->space_id, hn[hits], NULL);
		if (held != ID_EMPTY)
			fz_fail(w, "LOOKUP stopped at hash %u (entry %u), which this process holds in block %u",
				hn[hits], hits, held);
		for (j = 0; j < hits; j++)
			if (hn[j] == hn[hits])
				fz_fail(w, "LOOKUP hit hash %u at entry %u, missed it at entry %u",
					hn[j], j, hits);
	}
	for (i = 0; i < hits; i++) {
		if (ids[i] >= of->nr_blocks)
			fz_fail(w, "LOOKUP hit %u: id %u of a space of %llu blocks",
				i, ids[i], (unsigned long long)of->nr_blocks);
		held = held_block(w, of->space_id, hn[i], NULL);
		if (held != ID_EMPTY && held != ids[i])
			fz_fail(w, "LOOKUP hit %u: hash %u in block %u, this process holds it in block %u",
				i, hn[i], ids[i], held);
		for (j = 0; j < i; j++)
			if (hn[j] == hn[i] && ids[j] != ids[i])
				fz_fail(w, "LOOKUP: hash %u in blocks %u and %u", hn[i],
					ids[j], ids[i]);
		/* No process of the fuzz adds residency records. */
		if (with_dev && dev[i])
			fz_fail(w, "LOOKUP hit %u: devices %#llx, no record was ever added",
				i, (unsigned long long)dev[i]);
		check_unowned(w, of, ids[i], "LOOKUP hit");
	}
	for (i = 0; i < hits; i++)
		ref_add(w, of, ids[i], hn[i]);
	check_refs(w, of, "after LOOKUP");
}

void op_release(struct worker *w, struct rng *r, int bad)
{
	u32 ids[FZ_PBATCH + 1], cnt = 0, want, i, j, listed;
	struct kvpool_blocks b;
	int sk = P_GOOD, ik = P_GOOD, nd, ret, fd, unjoined = 0;
	struct ofile *of;
	struct fz_exp e;
	char *arg, *at;

	of = of_with_refs(w, rnd(r));
	if (!of && !bad) {
		instead(w, r, OP_LOOKUP, "no references");
		return;
	}
	if (!of)
		of = of_any(w, rnd(r), PICK_JOINED | PICK_MUT);
	want = 1 + rn(r, FZ_PBATCH);
	/* Ids this file holds, each at most as often as it holds it. */
	for (i = 0; i < want * 2 && cnt < want && of->refs.n; i++) {
		long a = idm_pick(&of->refs, rnd(r));
		u32 id = of->refs.key[a];

		for (j = 0, listed = 0; j < cnt; j++)
			listed += ids[j] == id;
		if (listed < ref_count(of, id))
			ids[cnt++] = id;
	}
	if (!cnt) {
		ids[0] = foreign_id(w, r, of);
		cnt = 1;
	}
	if (chance(r, 10))
		ik = chance(r, 2) ? P_MISALIGN : P_RO;	/* only read */
	if (chance(r, 10))
		sk = P_MISALIGN;
	memset(&b, 0, sizeof(b));
	b.count = cnt;
	for (nd = bad ? 1 + rn(r, 3) : 0; nd > 0; nd--) {
		switch (rn(r, 9)) {
		case 0:
			b.flags = (u32)rnd(r) | 1;
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
		case 4:		/* one more than held */
			if (cnt < FZ_PBATCH + 1) {
				u32 id = ids[rn(r, cnt)];

				for (j = 0, listed = 0; j < cnt; j++)
					listed += ids[j] == id;
				while (listed < ref_count(of, id) && cnt < FZ_PBATCH + 1) {
					ids[cnt++] = id;
					listed++;
				}
				if (cnt < FZ_PBATCH + 1)
					ids[cnt++] = id;
				b.count = cnt;
			}
			break;
		case 5:		/* an id not held at all */
			ids[rn(r, cnt)] = foreign_id(w, r, of);
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
	at = place_buf(w, r, ik, ids, (size_t)cnt * 4, 4);
	b.ids = (u64)(uintptr_t)at;
	arg = place_struct(w, r, &sk, &b, sizeof(b));
	memset(&e, 0, sizeof(e));
	if (!p_readable(sk)) {
		ex_defect(&e, EFAULT);
	} else {
		ex_add(&e, EINTR);
		if (b.flags || b.reserved[0] || b.reserved[1] || !b.count)
			ex_defect(&e, EINVAL);
		if (b.count > KVPOOL_MAX_BATCH)
			ex_defect(&e, E2BIG);
		if (!of->joined)
			ex_defect(&e, EBADFD);
		if (!p_readable(ik)) {
			ex_defect(&e, EFAULT);
		} else if (of->joined && b.count == cnt) {
			for (i = 0; i < cnt; i++) {
				for (j = 0, listed = 0; j < cnt; j++)
					listed += ids[j] == ids[i];
				if (listed > ref_count(of, ids[i]))
					ex_defect(&e, EINVAL);
			}
		} else {
			ex_add(&e, EINVAL);
			ex_add(&e, EFAULT);
		}
	}
	if (of->inherited && !e.must_fail) {
		skip(w, "parent's file");
		return;
	}
	fd = of_fd(of, r);
	note(w, " file %d fd %d%s sp %u count %u (%u ids: %u%s) flags %#x res %llx,%llx ids %s struct %s",
	     of_index(w, of), fd, of->joined ? "" : " (unjoined)", of->space_id,
	     b.count, cnt, ids[0], cnt > 1 ? ",..." : "", b.flags,
	     (unsigned long long)b.reserved[0], (unsigned long long)b.reserved[1],
	     p_name[ik], p_name[sk]);
	ret = kv_ioctl(fd, KVPOOL_IOC_RELEASE, arg);
	fz_expect(w, ret, &e);
	if (!ret)
		for (i = 0; i < cnt; i++)
			ref_drop(of, ids[i]);
	check_refs(w, of, ret ? "after a failed RELEASE" : "after RELEASE");
}
