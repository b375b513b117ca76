// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_mmap: fuzz_test's mappings (mmap, munmap, mprotect, mremap, madvise,
 * mlock) and the data in them: writes, reads, SIGBUS, get_user_pages.
 */
#include "fuzz_harness.h"

/* ---- mappings ------------------------------------------------------------------ */

static int sys_ret(long r)
{
	return r < 0 ? -errno : 0;
}

static struct kmap *map_pick(struct worker *w, u64 r, int need_prot)
{
	int k;

	for (k = 0; k < FZ_MAX_MAPS; k++) {
		struct kmap *m = &w->map[(r + k) % FZ_MAX_MAPS];

		if (m->used && (m->prot & need_prot) == need_prot)
			return m;
	}
	return NULL;
}

/*
 * Make [a, a + len) of @m a region of its own (splitting off head and tail);
 * returns it, or NULL when there are not enough free slots.
 */
static struct kmap *map_split(struct worker *w, struct kmap *m, char *a, u64 len)
{
	int need = (a > m->addr) + (a + len < m->addr + m->len);
	struct kmap *h, *t;

	if (map_free_slots(w) < need)
		return NULL;
	if (a > m->addr) {
		h = map_new(w);
		*h = *m;
		h->len = a - m->addr;
		m->off += h->len;
		m->len -= h->len;
		m->addr = a;
	}
	if (len < m->len) {
		t = map_new(w);
		*t = *m;
		t->addr = m->addr + len;
		t->off = m->off + len;
		t->len = m->len - len;
		m->len = len;
	}
	return m;
}

/*
 * The whole of @m instead of [*a, *a + *len) when the table has no room for
 * the pieces a split leaves: the kernel splits the vma either way.
 */
static void map_fit(struct worker *w, struct kmap *m, char **a, u64 *len)
{
	int need = (*a > m->addr) + (*a + *len < m->addr + m->len);

	if (map_free_slots(w) < need) {
		*a = m->addr;
		*len = m->len;
	}
}

/* A page-aligned sub-range of @m: whole, head, tail or middle. */
static void map_subrange(struct worker *w, struct rng *r, struct kmap *m,
			 u64 max_pages, char **a, u64 *len)
{
	u64 pages = m->len / w->ps, first = 0, n = pages;

	switch (rn(r, 5)) {
	case 0:
	case 1:
		break;
	case 2:
		n = 1 + rn(r, pages);
		break;
	case 3:
		n = 1 + rn(r, pages);
		first = pages - n;
		break;
	default:
		first = rn(r, pages);
		n = 1 + rn(r, pages - first);
		break;
	}
	if (max_pages && n > max_pages)
		n = max_pages;
	*a = m->addr + first * w->ps;
	*len = n * w->ps;
}

void map_drop(struct worker *w, struct kmap *m)
{
	if (munmap(m->addr, m->len))
		fz_fail(w, "munmap(%p, %llu): %s", m->addr,
			(unsigned long long)m->len, strerror(errno));
	memset(m, 0, sizeof(*m));
}

static void mmap_expect(struct worker *w, struct ofile *of, int prot, int flags,
			u64 off, u64 len, struct fz_exp *e)
{
	memset(e, 0, sizeof(*e));
	if (!len || off % w->ps)
		ex_defect(e, EINVAL);
	if ((flags & MAP_TYPE) == MAP_PRIVATE) {
		ex_defect(e, EINVAL);
		if (prot & PROT_WRITE)
			ex_add(e, ENOMEM);	/* overcommit accounting comes first */
	}
	if ((flags & MAP_TYPE) == MAP_SHARED_VALIDATE &&
	    (flags & ~(MAP_SHARED_VALIDATE | MAP_POPULATE | MAP_NORESERVE |
		       MAP_LOCKED)))
		ex_defect(e, EOPNOTSUPP);
	if (of->acc == O_WRONLY)
		ex_defect(e, EACCES);
	if ((prot & PROT_WRITE) && of->acc == O_RDONLY &&
	    (flags & MAP_TYPE) != MAP_PRIVATE)
		ex_defect(e, EACCES);
	if (prot & PROT_EXEC)
		ex_defect(e, EPERM);	/* also noexec mounts */
	if (!of->joined)
		ex_defect(e, EBADFD);
	else if (off > of->map_bytes || len > of->map_bytes - off)
		ex_defect(e, ENXIO);
	if (len > (1ULL << 46)) {
		ex_defect(e, ENOMEM);
		ex_add(e, EINVAL);
	}
	if (off > (1ULL << 60))
		ex_add(e, EOVERFLOW);
}

void op_mmap(struct worker *w, struct rng *r, int bad)
{
	struct ofile *of = of_any(w, rnd(r), PICK_JOINED);
	struct kmap *m = map_new(w);
	u64 pages, first = 0, n = 1, off, len, bpages;
	int prot, flags, ret, n_def, fd;
	struct fz_exp e;
	char *p;

	if (!m) {
		m = &w->map[rn(r, FZ_MAX_MAPS)];
		note(w, " (full: unmapped %p)", m->addr);
		map_drop(w, m);
	}
	pages = of->joined ? of->map_bytes / w->ps : 16;
	bpages = of->joined ? of->block_bytes / w->ps : 1;
	switch (rn(r, 3)) {
	case 0:
		break;
	case 1:
		first = rn(r, pages / bpages) * bpages;
		break;
	default:
		first = rn(r, pages);
		break;
	}
	switch (rn(r, 4)) {
	case 0:
		n = pages - first;
		if (n > (256 * MiB) / w->ps && !chance(r, 20))
			n = (256 * MiB) / w->ps;
		break;
	case 1:
		n = 1 + rn(r, 16);
		break;
	default:
		n = bpages * (1 + rn(r, 8));
		break;
	}
	if (n > pages - first)
		n = pages - first;
	if (!n)
		n = 1;
	off = first * w->ps;
	len = n * w->ps;
	prot = of->acc != O_RDWR || chance(r, 5) ? PROT_READ : PROT_READ | PROT_WRITE;
	flags = chance(r, 6) ? MAP_SHARED_VALIDATE : MAP_SHARED;
	if (chance(r, 8))
		flags |= MAP_NORESERVE;
	if (len <= 16 * MiB && chance(r, 10))
		flags |= MAP_POPULATE;
	if (len <= 16 * MiB && chance(r, 20))
		flags |= MAP_LOCKED;
	for (n_def = bad ? 1 + rn(r, 2) : 0; n_def > 0; n_def--) {
		switch (rn(r, 10)) {
		case 0:
			flags = (flags & ~MAP_TYPE) | MAP_PRIVATE;
			break;
		case 1:
			prot |= PROT_EXEC;
			break;
		case 2:
			len = (of->map_bytes > off ? of->map_bytes - off : 0) +
			      w->ps * (1 + rn(r, 64));
			break;
		case 3:
			off = (of->map_bytes + w->ps * rn(r, 1024)) / w->ps * w->ps;
			break;
		case 4:
			len = 0;
			break;
		case 5:
			off += 1 + rn(r, w->ps - 1);
			break;
		case 6: {
			struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED);

			if (u)
				of = u;
			break;
		}
		case 7:
			prot |= PROT_WRITE;
			if (of->acc == O_RDWR) {
				struct ofile *ro = of_pick(w, rnd(r), PICK_JOINED);

				if (ro && ro->acc != O_RDWR)
					of = ro;
			}
			break;
		case 8:
			len = 1ULL << (47 + rn(r, 16));
			break;
		default: {	/* MAP_SYNC, or a bit no mmap flag uses */
			static const int unknown[] = { 0x80000, 0x200000, 0x400000,
						       0x800000, 0x1000000, 0x2000000 };

			flags = MAP_SHARED_VALIDATE | unknown[rn(r, 6)];
			break;
		}
		}
	}
	mmap_expect(w, of, prot, flags, off, len, &e);
	fd = of_fd(of, r);
	note(w, " file %d fd %d%s sp %u off %#llx len %#llx prot %d flags %#x",
	     of_index(w, of), fd, of->joined ? "" : " (unjoined)", of->space_id,
	     (unsigned long long)off, (unsigned long long)len, prot, flags);
	p = mmap(NULL, len, prot, flags, fd, off);
	ret = p == MAP_FAILED ? -errno : 0;
	fz_expect(w, ret, &e);
	if (ret)
		return;
	note(w, " at %p", p);
	m->used = 1;
	m->addr = p;
	m->len = len;
	m->off = off;
	m->prot = prot;
	m->acc = of->acc;
	m->locked = !!(flags & MAP_LOCKED);
	m->space_id = of->space_id;
}

void op_munmap(struct worker *w, struct rng *r)
{
	struct kmap *m = map_pick(w, rnd(r), 0), *s;
	u64 len;
	char *a;

	if (!m) {
		skip(w, "nothing mapped");
		return;
	}
	map_subrange(w, r, m, 0, &a, &len);
	map_fit(w, m, &a, &len);
	s = map_split(w, m, a, len);
	note(w, " %p+%#llx of %p+%#llx (sp %u)", s->addr,
	     (unsigned long long)s->len, m->addr, (unsigned long long)m->len,
	     m->space_id);
	map_drop(w, s);
	w->op_ok = 1;
}

void op_mprotect(struct worker *w, struct rng *r)
{
	static const int prots[] = { PROT_READ, PROT_READ | PROT_WRITE, PROT_NONE,
				     PROT_READ | PROT_EXEC,
				     PROT_READ | PROT_WRITE | PROT_EXEC };
	struct kmap *m = map_pick(w, rnd(r), 0), *s;
	int prot = prots[rn(r, 5)], ret;
	struct fz_exp e;
	u64 len;
	char *a;

	if (!m) {
		skip(w, "nothing mapped");
		return;
	}
	map_subrange(w, r, m, 0, &a, &len);
	map_fit(w, m, &a, &len);
	memset(&e, 0, sizeof(e));
	if (prot & PROT_EXEC)
		ex_defect(&e, EACCES);	/* VM_MAYEXEC is cleared */
	if ((prot & PROT_WRITE) && m->acc != O_RDWR)
		ex_defect(&e, EACCES);
	note(w, " %p+%#llx (sp %u) prot %d", a, (unsigned long long)len,
	     m->space_id, prot);
	ret = sys_ret(mprotect(a, len, prot));
	fz_expect(w, ret, &e);
	if (ret)
		return;
	s = map_split(w, m, a, len);
	s->prot = prot;
	s->inh = 0;
}

void op_mremap(struct worker *w, struct rng *r)
{
	struct kmap *m = map_pick(w, rnd(r), 0);
	struct fz_exp e;
	u64 pages, nlen;
	int ret;
	char *p, *dst;

	if (!m) {
		skip(w, "nothing mapped");
		return;
	}
	pages = m->len / w->ps;
	memset(&e, 0, sizeof(e));
	switch (rn(r, 4)) {
	case 0:		/* shrink in place */
		if (pages < 2)
			goto move;
		nlen = (1 + rn(r, pages - 1)) * w->ps;
		note(w, " shrink %p+%#llx to %#llx", m->addr,
		     (unsigned long long)m->len, (unsigned long long)nlen);
		p = mremap(m->addr, m->len, nlen, 0);
		ret = p == MAP_FAILED ? -errno : 0;
		fz_expect(w, ret, &e);
		m->len = nlen;
		return;
	case 1:		/* grow: VM_DONTEXPAND */
		nlen = m->len + w->ps * (1 + rn(r, 16));
		ex_defect(&e, EFAULT);
		note(w, " grow %p+%#llx to %#llx", m->addr,
		     (unsigned long long)m->len, (unsigned long long)nlen);
		p = mremap(m->addr, m->len, nlen, chance(r, 2) ? MREMAP_MAYMOVE : 0);
		ret = p == MAP_FAILED ? -errno : 0;
		fz_expect(w, ret, &e);
		return;
	case 2:		/* MREMAP_DONTUNMAP: not for VM_DONTEXPAND */
		ex_defect(&e, EINVAL);
		note(w, " dontunmap %p+%#llx", m->addr, (unsigned long long)m->len);
		p = mremap(m->addr, m->len, m->len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
		ret = p == MAP_FAILED ? -errno : 0;
		fz_expect(w, ret, &e);
		return;
	}
move:
	dst = mmap(NULL, m->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (dst == MAP_FAILED)
		fz_fail(w, "reserving %#llx bytes: %s", (unsigned long long)m->len,
			strerror(errno));
	note(w, " move %p+%#llx to %p", m->addr, (unsigned long long)m->len, dst);
	p = mremap(m->addr, m->len, m->len, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	ret = p == MAP_FAILED ? -errno : 0;
	if (ret)
		munmap(dst, m->len);
	fz_expect(w, ret, &e);
	if (p != dst)
		fz_fail(w, "mremap(MREMAP_FIXED) moved to %p", p);
	m->addr = dst;
	m->inh = 0;
}

void op_madvise(struct worker *w, struct rng *r)
{
	static const int advs[] = { MADV_DONTNEED, MADV_DONTNEED, MADV_DONTNEED,
				    MADV_COLD, MADV_PAGEOUT };
	static const char *const names[] = { "DONTNEED", "DONTNEED", "DONTNEED",
					     "COLD", "PAGEOUT" };
	struct kmap *m = map_pick(w, rnd(r), 0);
	unsigned int k = rn(r, 5);
	struct fz_exp e;
	u64 len;
	char *a;

	if (!m) {
		skip(w, "nothing mapped");
		return;
	}
	map_subrange(w, r, m, 4096, &a, &len);
	memset(&e, 0, sizeof(e));
	if (m->locked)
		ex_add(&e, EINVAL);	/* not on VM_LOCKED */
	note(w, " %s %p+%#llx (sp %u)", names[k], a, (unsigned long long)len,
	     m->space_id);
	fz_expect(w, sys_ret(madvise(a, len, advs[k])), &e);
}

void op_mlock(struct worker *w, struct rng *r)
{
	struct kmap *m = map_pick(w, rnd(r), 0), *s;
	struct fz_exp e;
	u64 len, off;
	int ret;
	char *a;

	if (!m) {
		skip(w, "nothing mapped");
		return;
	}
	map_subrange(w, r, m, (8 * MiB) / w->ps, &a, &len);
	map_fit(w, m, &a, &len);
	off = m->off + (a - m->addr);
	memset(&e, 0, sizeof(e));
	if (off + len > kb_get(w, m->space_id)) {
		ex_add(&e, ENOMEM);	/* a page is not backed */
		ex_add(&e, EAGAIN);
	}
	if (m->prot == PROT_NONE)
		ex_add(&e, ENOMEM);	/* populating needs an accessible vma */
	note(w, " %p+%#llx (sp %u off %#llx prot %d)", a, (unsigned long long)len,
	     m->space_id, (unsigned long long)off, m->prot);
	ret = sys_ret(mlock(a, len));
	s = map_split(w, m, a, len);
	s->locked = 1;	/* even a failed mlock leaves VM_LOCKED behind */
	fz_expect(w, ret, &e);
	if (chance(r, 2)) {
		note(w, " munlock");
		if (munlock(s->addr, s->len))
			fz_fail(w, "munlock: %s", strerror(errno));
		s->locked = 0;
	}
}

/* ---- data ---------------------------------------------------------------------- */

static int blk_pages(struct worker *w, u64 bb, u64 pg[3])
{
	u64 np = bb / w->ps;
	int n = 0;

	pg[n++] = 0;
	if (np > 2)
		pg[n++] = np / 2;
	if (np > 1)
		pg[n++] = np - 1;
	return n;
}

/* An owned block (*id, its slot *at) of @of with a mapping covering it. */
static struct kmap *owned_block(struct worker *w, struct rng *r,
				struct ofile *of, int prot, int want_pat,
				u32 *id, long *at)
{
	int k;

	for (k = 0; k < 8; k++) {
		long i = idm_pick(&of->owned, rnd(r));
		struct kmap *m;

		if (i < 0)
			return NULL;
		if (want_pat && !of->owned.val[i])
			continue;
		m = map_cover(w, of->space_id, (u64)of->owned.key[i] * of->block_bytes,
			      of->block_bytes, prot, rnd(r));
		if (m) {
			*id = of->owned.key[i];
			*at = i;
			return m;
		}
	}
	return NULL;
}

/* Map a few blocks around an owned block of @of, read-write. */
static struct kmap *map_block(struct worker *w, struct rng *r, struct ofile *of,
			      u32 *id, long *at)
{
	struct kmap *m = map_new(w);
	u64 bb = of->block_bytes, first, n;
	struct fz_exp e;
	char *p;
	int fd;

	*at = idm_pick(&of->owned, rnd(r));
	if (*at < 0)
		return NULL;
	*id = of->owned.key[*at];
	if (!m) {
		m = &w->map[rn(r, FZ_MAX_MAPS)];
		note(w, " (unmapped %p)", m->addr);
		map_drop(w, m);
	}
	first = *id - rn(r, (u64)*id < 3 ? (u64)*id + 1 : 3);
	n = *id - first + 1 + rn(r, 3);	/* always up to and including *id */
	if (first + n > of->nr_blocks)
		n = of->nr_blocks - first;
	fd = of_fd(of, r);
	note(w, " mmap fd %d off %#llx len %#llx", fd,
	     (unsigned long long)(first * bb), (unsigned long long)(n * bb));
	p = mmap(NULL, n * bb, PROT_READ | PROT_WRITE, MAP_SHARED, fd, first * bb);
	memset(&e, 0, sizeof(e));
	fz_expect(w, p == MAP_FAILED ? -errno : 0, &e);
	note(w, " at %p;", p);
	m->used = 1;
	m->inh = 0;
	m->addr = p;
	m->len = n * bb;
	m->off = first * bb;
	m->prot = PROT_READ | PROT_WRITE;
	m->acc = of->acc;
	m->locked = 0;
	m->space_id = of->space_id;
	return m;
}

void op_write(struct worker *w, struct rng *r)
{
	struct ofile *of = of_pick(w, rnd(r), PICK_OWNS | PICK_MUT);
	u32 id, pat = (u32)rnd(r) | 1;
	u64 pg[3], off;
	int np, i, sig, gup = chance(r, 4);
	struct kmap *m;
	long at;

	if (!of) {
		instead(w, r, OP_ALLOC, "nothing owned");
		return;
	}
	m = owned_block(w, r, of, PROT_READ | PROT_WRITE, 0, &id, &at);
	if (!m && of->acc == O_RDWR)
		m = map_block(w, r, of, &id, &at);
	if (!m) {
		skip(w, "no owned block mapped read-write");
		return;
	}
	off = (u64)id * of->block_bytes;
	np = blk_pages(w, of->block_bytes, pg);
	note(w, " file %d sp %u block %u at %p pattern %#x%s", of_index(w, of),
	     of->space_id, id, map_at(m, off), pat, gup ? " (process_vm_writev)" : "");
	for (i = 0; i < np; i++) {
		u64 *p = (u64 *)map_at(m, off + pg[i] * w->ps);
		u64 base = pat_base(pat, id, pg[i]);

		if (gup) {
			struct iovec l = { w->scr, w->ps }, rv = { p, w->ps };
			ssize_t got;

			fill_words((u64 *)w->scr, w->ps / 8, FZ_TAG(of->space_id), base);
			got = process_vm_writev(getpid(), &l, 1, &rv, 1, 0);
			if (got != (ssize_t)w->ps)
				fz_fail(w, "process_vm_writev of page %llu of owned block %u: %zd (%s)",
					(unsigned long long)pg[i], id, got,
					got < 0 ? strerror(errno) : "short");
			continue;
		}
		sig = probe_fill(p, w->ps / 8, FZ_TAG(of->space_id), base);
		if (sig)
			fz_fail(w, "signal %d writing page %llu of owned block %u at %p (prot %d)",
				sig, (unsigned long long)pg[i], id, p, m->prot);
	}
	of->owned.val[at] = pat;
	w->op_ok = 1;
}

/* The first word of a page of space @id: 0 or the space's tag. */
static void check_tag(struct worker *w, u32 id, u64 off, u64 v)
{
	if (v && v != FZ_TAG(id))
		fz_fail(w, "page at offset %#llx of space %u starts with %#llx: neither 0 nor this space's tag %#llx (another space's data, or an unscrubbed chunk)",
			(unsigned long long)off, id, (unsigned long long)v,
			(unsigned long long)FZ_TAG(id));
}

/* Check the written pages of block @id; via process_vm_readv of @pid if > 0. */
static void verify_block(struct worker *w, struct ofile *of, struct kmap *m,
			 u32 id, u32 pat, pid_t pid)
{
	u64 pg[3], off = (u64)id * of->block_bytes, got = 0;
	int np = blk_pages(w, of->block_bytes, pg), i, sig;
	long bad = -1;

	for (i = 0; i < np; i++) {
		u64 *p = (u64 *)map_at(m, off + pg[i] * w->ps);
		u64 base = pat_base(pat, id, pg[i]);

		if (!pat) {	/* not written by us: 0 or the space's tag */
			if (probe_copy(&got, p, 8))
				fz_fail(w, "fault reading page %llu of owned block %u at %p",
					(unsigned long long)pg[i], id, p);
			check_tag(w, of->space_id, off + pg[i] * w->ps, got);
			continue;
		}
		if (pid > 0) {
			struct iovec l = { w->scr, w->ps }, rv = { p, w->ps };
			ssize_t n = process_vm_readv(pid, &l, 1, &rv, 1, 0);

			if (n != (ssize_t)w->ps)
				fz_fail(w, "process_vm_readv(pid %d) of page %llu of owned block %u at %p: %zd (%s)",
					(int)pid, (unsigned long long)pg[i], id, p, n,
					n < 0 ? strerror(errno) : "short");
			bad = check_words((u64 *)w->scr, w->ps / 8,
					  FZ_TAG(of->space_id), base, &got);
		} else {
			sig = probe_check(p, w->ps / 8, FZ_TAG(of->space_id), base,
					  &bad, &got);
			if (sig)
				fz_fail(w, "signal %d reading page %llu of owned block %u at %p",
					sig, (unsigned long long)pg[i], id, p);
		}
		if (bad >= 0)
			fz_fail(w, "block %u of space %u (%s) page %llu word %ld reads %#llx, expected %#llx (pattern %#x)",
				id, of->space_id, of->name, (unsigned long long)pg[i],
				bad, (unsigned long long)got,
				(unsigned long long)(bad ? base + bad * FZ_STEP :
						     FZ_TAG(of->space_id)),
				pat);
	}
}

/* A block some file of this process owns and wrote, mapped readable. */
static struct kmap *written_block(struct worker *w, struct rng *r,
				  struct ofile **pof, u32 *id, long *at)
{
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *of = &w->of[(r->s + k) % FZ_MAX_OFILES];
		u32 i, start;

		if (!of->used || !of->joined || !of->owned.n)
			continue;
		start = rn(r, of->owned.cap);
		for (i = 0; i < of->owned.cap && i < 1024; i++) {
			u32 j = (start + i) & (of->owned.cap - 1);
			struct kmap *m;

			if (of->owned.key[j] == ID_EMPTY || !of->owned.val[j])
				continue;
			m = map_cover(w, of->space_id,
				      (u64)of->owned.key[j] * of->block_bytes,
				      of->block_bytes, PROT_READ, rnd(r));
			if (m) {
				*pof = of;
				*id = of->owned.key[j];
				*at = j;
				return m;
			}
		}
	}
	return NULL;
}

void op_verify(struct worker *w, struct rng *r)
{
	struct ofile *of = NULL;
	struct kmap *m;
	u32 id;
	long at;

	m = written_block(w, r, &of, &id, &at);
	if (!m) {
		/* an owned block not written yet: only its pages' tags */
		of = of_pick(w, rnd(r), PICK_OWNS);
		m = of ? owned_block(w, r, of, PROT_READ, 0, &id, &at) : NULL;
	}
	if (!m) {
		instead(w, r, OP_WRITE, "no owned block mapped");
		return;
	}
	note(w, " file %d%s sp %u block %u pattern %#x at %p", of_index(w, of),
	     of->inherited ? " (parent's)" : "", of->space_id, id, of->owned.val[at],
	     map_at(m, (u64)id * of->block_bytes));
	verify_block(w, of, m, id, of->owned.val[at], 0);
	w->op_ok = 1;
}

void op_touch(struct worker *w, struct rng *r)
{
	struct kmap *m = map_pick(w, rnd(r), PROT_READ);
	u64 pages, kb, off, v;
	int n, sig, bus = 0;
	char *p;

	if (!m) {
		skip(w, "nothing readable mapped");
		return;
	}
	pages = m->len / w->ps;
	kb = kb_get(w, m->space_id);
	note(w, " %p+%#llx (sp %u off %#llx, %#llx known backed):", m->addr,
	     (unsigned long long)m->len, m->space_id, (unsigned long long)m->off,
	     (unsigned long long)kb);
	for (n = 1 + rn(r, 8); n > 0; n--) {
		u64 pg = rn(r, pages);

		if (kb > m->off && chance(r, 2) && (kb - m->off) / w->ps)
			pg = rn(r, (kb - m->off) / w->ps < pages ?
				   (kb - m->off) / w->ps : pages);
		p = m->addr + pg * w->ps;
		off = m->off + pg * w->ps;
		sig = probe_copy(&v, p, 8);
		note(w, " %#llx%s", (unsigned long long)off, sig ? "!" : "");
		if (sig) {
			if (sig != SIGBUS)
				fz_fail(w, "signal %d reading %p (offset %#llx) of a readable mapping",
					sig, p, (unsigned long long)off);
			if (off < kb)
				fz_fail(w, "SIGBUS reading offset %#llx of space %u, below the %#llx bytes known to be backed",
					(unsigned long long)off, m->space_id,
					(unsigned long long)kb);
			bus = 1;
			ADD(sh->sigbus, 1);
			continue;
		}
		check_tag(w, m->space_id, off, v);
		kb_raise(w, m->space_id, off + w->ps);
		kb = kb_get(w, m->space_id);
	}
	w->op_ok = !bus;
}

void op_gup(struct worker *w, struct rng *r)
{
	struct ofile *of;
	struct kmap *m;
	u32 id;
	long at;
	int mode = rn(r, 3);

	if (mode == 0 || (w->child && chance(r, 2))) {
		/* read an owned, written block through GUP: ours, or the parent's */
		of = of_pick(w, rnd(r), PICK_OWNS);
		m = of ? owned_block(w, r, of, PROT_READ, 1, &id, &at) : NULL;
		if (m) {
			pid_t pid = w->child && of->inherited && m->inh ? w->parent :
				    getpid();

			note(w, " process_vm_readv(pid %d) file %d sp %u block %u",
			     (int)pid, of_index(w, of), of->space_id, id);
			verify_block(w, of, m, id, of->owned.val[at], pid);
			w->op_ok = 1;
			return;
		}
	} else if (mode == 1) {
		/* write a block with process_vm_writev: op_write does it too */
		of = of_pick(w, rnd(r), PICK_OWNS | PICK_MUT);
		m = of ? owned_block(w, r, of, PROT_READ | PROT_WRITE, 0, &id, &at) : NULL;
		if (m) {
			u32 pat = (u32)rnd(r) | 1;
			u64 pg[3], off = (u64)id * of->block_bytes;
			int np = blk_pages(w, of->block_bytes, pg), i;

			note(w, " process_vm_writev file %d sp %u block %u pattern %#x",
			     of_index(w, of), of->space_id, id, pat);
			for (i = 0; i < np; i++) {
				struct iovec l = { w->scr, w->ps },
					     rv = { map_at(m, off + pg[i] * w->ps), w->ps };
				ssize_t n;

				fill_words((u64 *)w->scr, w->ps / 8,
					   FZ_TAG(of->space_id), pat_base(pat, id, pg[i]));
				n = process_vm_writev(getpid(), &l, 1, &rv, 1, 0);
				if (n != (ssize_t)w->ps)
					fz_fail(w, "process_vm_writev: %zd (%s)", n,
						n < 0 ? strerror(errno) : "short");
			}
			of->owned.val[at] = pat;
			w->op_ok = 1;
			return;
		}
	}
	/* a random range of a readable mapping */
	m = map_pick(w, rnd(r), PROT_READ);
	if (!m) {
		skip(w, "nothing readable mapped");
		return;
	} else {
		u64 pages = m->len / w->ps, first = rn(r, pages), n = 1 + rn(r, 16);
		u64 kb = kb_get(w, m->space_id), off, i, must;
		struct iovec l, rv;
		ssize_t got;

		if (kb > m->off && chance(r, 2) && (kb - m->off) / w->ps)
			first = rn(r, (kb - m->off) / w->ps < pages ?
				      (kb - m->off) / w->ps : pages);
		if (n > pages - first)
			n = pages - first;
		if (n * w->ps > w->scr_len - w->ps)
			n = (w->scr_len - w->ps) / w->ps;
		off = m->off + first * w->ps;
		must = kb > off ? (kb - off < n * w->ps ? kb - off : n * w->ps) : 0;
		l.iov_base = w->ids;
		l.iov_len = n * w->ps;
		rv.iov_base = m->addr + first * w->ps;
		rv.iov_len = n * w->ps;
		note(w, " process_vm_readv %p+%#llx (sp %u off %#llx, %#llx known backed)",
		     rv.iov_base, (unsigned long long)rv.iov_len, m->space_id,
		     (unsigned long long)off, (unsigned long long)kb);
		got = process_vm_readv(getpid(), &l, 1, &rv, 1, 0);
		note(w, " -> %zd", got);
		if (got < 0 && errno != EFAULT)
			fz_fail(w, "process_vm_readv: %s", strerror(errno));
		if ((got < 0 ? 0 : (u64)got) < must)
			fz_fail(w, "process_vm_readv read %zd bytes, %#llx are known to be backed",
				got, (unsigned long long)must);
		for (i = 0; got > 0 && i < (u64)got / w->ps; i++) {
			check_tag(w, m->space_id, off + i * w->ps,
				  *(u64 *)((char *)w->ids + i * w->ps));
			kb_raise(w, m->space_id, off + (i + 1) * w->ps);
		}
		w->op_ok = got == (ssize_t)(n * w->ps);
	}
}
