// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_space: fuzz_test's SPACE_OPEN: joins and creates, valid and with
 * defects.
 */
#include "fuzz_harness.h"

/* ---- SPACE_OPEN ---------------------------------------------------------- */

static int in_groups(struct worker *w, gid_t g)
{
	int i;

	for (i = 0; i < w->ngroups; i++)
		if (w->groups[i] == g)
			return 1;
	return 0;
}

/* Would open(O_RDWR) of a file with this owner and mode be allowed? */
static int perm_ok(struct worker *w, u32 suid, u32 sgid, u32 mode, uid_t uid,
		   gid_t gid)
{
	if (suid == uid)
		mode >>= 6;
	else if (sgid == gid || in_groups(w, sgid))
		mode >>= 3;
	return (mode & 6) == 6;
}

static int name_ok(const char *n)
{
	size_t l = strnlen(n, KVPOOL_NAME_MAX), i;

	if (!l || l == KVPOOL_NAME_MAX)
		return 0;
	for (i = 0; i < l; i++) {
		unsigned char c = n[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* @n (up to 64 bytes, to its NUL) printable, other bytes as \xNN. */
static const char *name_str(const char *n)
{
	static char buf[4 * KVPOOL_NAME_MAX + 1];
	size_t i, o = 0;

	for (i = 0; i < KVPOOL_NAME_MAX && n[i]; i++) {
		unsigned char c = n[i];

		if (c >= 0x21 && c < 0x7f && c != '\\')
			buf[o++] = c;
		else
			o += snprintf(buf + o, sizeof(buf) - o, "\\x%02x", c);
	}
	buf[o] = 0;
	return buf;
}

static unsigned char bad_char(struct rng *r)
{
	char s[2] = { 0, 0 };

	do
		s[0] = (char)(1 + rn(r, 255));
	while (name_ok(s));
	return (unsigned char)s[0];
}

static void gen_geometry(struct worker *w, struct rng *r, u64 *bb, u64 *quota)
{
	static const u64 sizes[] = {
		4 * KiB, 8 * KiB, 12 * KiB, 16 * KiB, 64 * KiB, 128 * KiB,
		256 * KiB, 1 * MiB, 1536 * KiB, 2 * MiB, 3 * MiB, 4 * MiB, 6 * MiB,
	};
	u64 b = sizes[rn(r, sizeof(sizes) / sizeof(sizes[0]))], q;

	b = (b + w->ps - 1) / w->ps * w->ps;
	if (chance(r, 64))
		b = KVPOOL_MAX_BLOCK_BYTES;
	switch (rn(r, 8)) {
	case 0:
		q = b;
		break;
	case 1:
		q = b * (2 + rn(r, 8));
		break;
	case 5:
		q = b * (1 + rn(r, 64)) + rn(r, b);	/* not a multiple */
		break;
	case 6:
		q = 1ULL << (30 + rn(r, 11));		/* 1 GiB .. 1 TiB */
		break;
	default:
		q = b * (1 + rn(r, 256));
		if (q > 48 * MiB)
			q = 48 * MiB;
		break;
	}
	*bb = b;
	*quota = q < b ? b : q;
}

static void gen_numa(struct worker *w, struct rng *r, struct kvpool_space_open *so)
{
	so->numa_policy = rn(r, 3);
	so->node_mask = rnd(r) & w->pool_mask;
	if (so->numa_policy == KVPOOL_NUMA_BIND && !so->node_mask)
		so->node_mask = w->pool_mask;
}

static u32 gen_mode(struct rng *r)
{
	static const u32 modes[] = { 0600, 0660, 0666, 0644, 0700, 0606, 0, 0640 };

	return chance(r, 5) ? rn(r, 01000) : modes[rn(r, 8)];
}

/* A request that is valid but for what the space's state decides. */
static void gen_so(struct worker *w, struct rng *r, struct kvpool_space_open *so,
		   int *slot)
{
	u64 bb, quota;
	unsigned int f = rn(r, 20);
	size_t l;

	memset(so, 0, sizeof(*so));
	if (chance(r, 7)) {
		snprintf(so->name, sizeof(so->name), "fzp-%d-%u", (int)getpid(),
			 w->priv_next++);
		*slot = -1;
		so->flags = KVPOOL_SPACE_CREATE | (chance(r, 2) ? KVPOOL_SPACE_EXCL : 0);
	} else {
		*slot = rn(r, FZ_NSHARED);
		memcpy(so->name, w->names[*slot], sizeof(so->name));
		so->flags = f < 12 ? KVPOOL_SPACE_CREATE :
			    f < 17 ? 0 : KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL;
	}
	gen_geometry(w, r, &bb, &quota);
	if (*slot >= 0 && w->last_bb[*slot] && chance(r, 2))
		bb = w->last_bb[*slot];	/* the geometry the name had */
	if (quota < bb)
		quota = bb;
	so->block_bytes = bb;
	so->quota_bytes = quota;
	so->mode = gen_mode(r);
	gen_numa(w, r, so);
	if (!(so->flags & KVPOOL_SPACE_CREATE)) {
		f = rn(r, 10);
		if (f < 7)
			so->block_bytes = 0;
		else if (f < 9 && *slot >= 0)
			so->block_bytes = w->last_bb[*slot];
		if (chance(r, 3)) {	/* accept an owner, maybe not the space's */
			so->flags |= KVPOOL_SPACE_FOREIGN;
			so->expect_uid = chance(r, 3) ? 0 : 1000 + rn(r, 2);
		}
		/* A plain join has no create fields (API 4). */
		so->quota_bytes = 0;
		so->mode = 0;
		so->numa_policy = 0;
		so->node_mask = 0;
	}
	if (chance(r, 3)) {	/* bytes after the NUL are not part of the name */
		l = strlen(so->name);
		while (++l < sizeof(so->name))
			so->name[l] = (char)rnd(r);
	}
}

/* Defects of API 4: an out field set, or a create field on a plain join. */
static void so_out_or_create_defect(struct rng *r, struct kvpool_space_open *so)
{
	u64 v = rnd(r) | 1;

	switch (rn(r, so->flags & KVPOOL_SPACE_CREATE ? 6 : 10)) {
	case 0:
		so->space_id = (u32)v;
		break;
	case 1:
		so->uid = (u32)v;
		break;
	case 2:
		so->gid = (u32)v;
		break;
	case 3:
		so->nr_blocks = v;
		break;
	case 4:
		so->map_bytes = v;
		break;
	case 5:
		so->created = (u32)v;
		break;
	case 6:
		so->quota_bytes = v;
		break;
	case 7:
		so->mode = chance(r, 2) ? 0600 : (u32)v;
		break;
	case 8:
		so->numa_policy = chance(r, 2) ? KVPOOL_NUMA_INTERLEAVE : (u32)v;
		break;
	default:
		so->node_mask = v;
		break;
	}
}

static void bad_name(struct rng *r, char *name)
{
	size_t l = strnlen(name, KVPOOL_NAME_MAX), i;

	switch (rn(r, 4)) {
	case 0:
		memset(name, 0, KVPOOL_NAME_MAX);
		break;
	case 1:		/* 64 valid characters, no NUL */
		for (i = 0; i < KVPOOL_NAME_MAX; i++)
			name[i] = 'a' + rn(r, 26);
		break;
	case 2:
		if (l == KVPOOL_NAME_MAX)
			l--;
		if (!l)
			l = 1;
		name[rn(r, l)] = (char)bad_char(r);
		break;
	default:
		for (i = 0; i < KVPOOL_NAME_MAX; i++)
			name[i] = (char)rnd(r);
		break;
	}
}

static void create_defect(struct worker *w, struct rng *r,
			  struct kvpool_space_open *so)
{
	u64 bit;

	switch (rn(r, 9)) {
	case 0:
		so->block_bytes = 0;
		break;
	case 1:
		so->block_bytes = w->ps * rn(r, 64) + 1 + rn(r, w->ps - 1);
		break;
	case 2:
		so->block_bytes = chance(r, 2) ?
			KVPOOL_MAX_BLOCK_BYTES + w->ps * (1 + rn(r, 4)) :
			1ULL << (31 + rn(r, 32));
		if (so->quota_bytes < so->block_bytes)
			so->quota_bytes = so->block_bytes;
		break;
	case 3:
		so->quota_bytes = so->block_bytes ? rn(r, so->block_bytes) : 0;
		break;
	case 4:
		so->quota_bytes = chance(r, 2) ?
			KVPOOL_MAX_SPACE_BYTES + w->ps * (1 + rn(r, 4)) :
			rnd(r) | 1ULL << 41;
		break;
	case 5:
		so->mode |= 1u << (9 + rn(r, 23));
		break;
	case 6:
		so->numa_policy = 3 + (chance(r, 2) ? rn(r, 8) : (u32)rnd(r) % 0x7ffffff0);
		break;
	case 7:
		do
			bit = 1ULL << rn(r, 64);
		while (bit & w->pool_mask);
		so->node_mask |= bit;
		break;
	default:
		so->numa_policy = KVPOOL_NUMA_BIND;
		so->node_mask = 0;
		break;
	}
}

/*
 * Add the create-field defects of @so; 1 when there is any.  They are
 * defects whether the call would create or join (API 4).
 */
static int create_defects(struct worker *w, const struct kvpool_space_open *so,
			  struct fz_exp *e)
{
	int n = 0;

#define CD(err) do { n++; ex_defect(e, err); } while (0)
	if (!so->block_bytes || so->block_bytes % w->ps)
		CD(EINVAL);
	if (so->block_bytes > KVPOOL_MAX_BLOCK_BYTES)
		CD(E2BIG);
	if (so->quota_bytes < so->block_bytes)
		CD(EINVAL);
	if (so->quota_bytes > KVPOOL_MAX_SPACE_BYTES)
		CD(E2BIG);
	if (so->mode & ~0777u)
		CD(EINVAL);
	if (so->numa_policy > KVPOOL_NUMA_INTERLEAVE)
		CD(EINVAL);
	if (so->node_mask & ~w->pool_mask)
		CD(EINVAL);
	if (so->numa_policy == KVPOOL_NUMA_BIND && !so->node_mask)
		CD(EINVAL);
#undef CD
	return n > 0;
}

static int so_reserved(const struct kvpool_space_open *so)
{
	int i;

	for (i = 0; i < 4; i++)
		if (so->reserved[i])
			return 1;
	return 0;
}

/* Out fields set on input, or create fields on a plain join (API 4). */
static int so_api4_bad(const struct kvpool_space_open *so)
{
	if (so->space_id || so->uid || so->gid || so->nr_blocks || so->map_bytes ||
	    so->created)
		return 1;
	return !(so->flags & KVPOOL_SPACE_CREATE) &&
	       (so->mode || so->quota_bytes || so->node_mask || so->numa_policy);
}

/* expect_uid names the owner a FOREIGN join accepts; FOREIGN never creates. */
static int so_foreign_bad(const struct kvpool_space_open *so)
{
	if (so->flags & KVPOOL_SPACE_FOREIGN)
		return !!(so->flags & KVPOOL_SPACE_CREATE);
	return so->expect_uid != 0;
}

/* Expected result of SPACE_OPEN; *cbad: the create fields are invalid. */
void so_expect(struct worker *w, const struct kvpool_space_open *so,
	       struct ofile *of, int sk, int as_user, struct fz_exp *e,
	       int *cbad)
{
	memset(e, 0, sizeof(*e));
	*cbad = 0;
	if (!p_readable(sk)) {
		ex_defect(e, EFAULT);
		return;
	}
	ex_add(e, ENOMEM);
	if (so->flags & ~KVPOOL_SPACE_FLAGS)
		ex_defect(e, EINVAL);
	if ((so->flags & KVPOOL_SPACE_EXCL) && !(so->flags & KVPOOL_SPACE_CREATE))
		ex_defect(e, EINVAL);
	if ((so->flags & KVPOOL_SPACE_PERSIST) && !(so->flags & KVPOOL_SPACE_CREATE))
		ex_defect(e, EINVAL);
	if (so_reserved(so) || so_foreign_bad(so) || so_api4_bad(so))
		ex_defect(e, EINVAL);
	if (!name_ok(so->name))
		ex_defect(e, EINVAL);
	if (of->joined)
		ex_defect(e, EBUSY);
	if (so->flags & KVPOOL_SPACE_CREATE) {
		int excl = !!(so->flags & KVPOOL_SPACE_EXCL);

		/* EEXIST without EXCL: the space has another owner. */
		ex_add(e, EEXIST);
		if (!excl)
			ex_add(e, EINVAL);	/* exists with another block_bytes */
		*cbad = create_defects(w, so, e);
	} else {
		ex_add(e, ENOENT);
		ex_add(e, EACCES);	/* the space has an owner not accepted */
		if (so->block_bytes)
			ex_add(e, EINVAL);
	}
	if (as_user)
		ex_add(e, EACCES);
	if (!p_writable(sk))
		ex_defect(e, EFAULT);	/* the copy-out fails */
}

static void of_attach(struct worker *w, struct ofile *of, const char *name,
		      int slot, u32 id, u64 bb, u64 nr)
{
	int i;

	for (i = 0; i < FZ_MAX_OFILES; i++) {
		struct ofile *o = &w->of[i];

		if (o == of || !o->used || !o->joined ||
		    strncmp(o->name, name, KVPOOL_NAME_MAX))
			continue;
		if (o->space_id != id)
			fz_fail(w, "joined space %u as '%s' while file %d of this process holds space %u of that name",
				id, o->name, of_index(w, o), o->space_id);
	}
	of->joined = 1;
	of->space_id = id;
	of->block_bytes = bb;
	of->nr_blocks = nr;
	of->map_bytes = nr * bb;
	of->name_slot = slot;
	memset(of->name, 0, sizeof(of->name));
	strncpy(of->name, name, sizeof(of->name) - 1);
	if (slot >= 0)
		w->last_bb[slot] = bb;
}

static void so_validate(struct worker *w, struct ofile *of,
			const struct kvpool_space_open *in,
			const struct kvpool_space_open *out, int slot, int cbad,
			int as_user, uid_t uid, gid_t gid)
{
	if (!out->space_id)
		fz_fail(w, "space_id 0");
	if (!out->block_bytes || out->block_bytes % w->ps ||
	    out->block_bytes > KVPOOL_MAX_BLOCK_BYTES || !out->nr_blocks ||
	    out->map_bytes != out->nr_blocks * out->block_bytes)
		fz_fail(w, "bad geometry out: block_bytes %llu nr_blocks %llu map_bytes %llu",
			(unsigned long long)out->block_bytes,
			(unsigned long long)out->nr_blocks,
			(unsigned long long)out->map_bytes);
	if (out->created > 1 ||
	    (!(in->flags & KVPOOL_SPACE_CREATE) && out->created) ||
	    ((in->flags & KVPOOL_SPACE_EXCL) && !out->created))
		fz_fail(w, "created = %u for flags %#x", out->created, in->flags);
	if (out->created && cbad)
		fz_fail(w, "created a space from invalid create fields");
	if (out->quota_bytes != out->map_bytes)
		fz_fail(w, "quota_bytes %llu out, map_bytes %llu",
			(unsigned long long)out->quota_bytes,
			(unsigned long long)out->map_bytes);
	if (!out->created && (in->flags & KVPOOL_SPACE_CREATE) && cbad)
		fz_fail(w, "joined with invalid create fields");
	if (out->created &&
	    (out->block_bytes != in->block_bytes ||
	     out->nr_blocks != in->quota_bytes / in->block_bytes ||
	     out->mode != in->mode || out->numa_policy != in->numa_policy ||
	     out->node_mask != in->node_mask || out->uid != uid || out->gid != gid))
		fz_fail(w, "created space does not echo the request: block_bytes %llu nr_blocks %llu mode %#o policy %u mask %#llx uid %u gid %u",
			(unsigned long long)out->block_bytes,
			(unsigned long long)out->nr_blocks, out->mode,
			out->numa_policy, (unsigned long long)out->node_mask,
			out->uid, out->gid);
	if (!out->created && in->block_bytes && out->block_bytes != in->block_bytes)
		fz_fail(w, "joined with block_bytes %llu a space of block_bytes %llu",
			(unsigned long long)in->block_bytes,
			(unsigned long long)out->block_bytes);
	if (!out->created &&
	    out->uid != ((in->flags & KVPOOL_SPACE_FOREIGN) ? in->expect_uid : uid))
		fz_fail(w, "uid %u joined a space of uid %u with flags %#x expect_uid %u",
			uid, out->uid, in->flags, in->expect_uid);
	if (as_user && !out->created &&
	    !perm_ok(w, out->uid, out->gid, out->mode, uid, gid))
		fz_fail(w, "uid %u gid %u joined a space of uid %u gid %u mode %#o",
			uid, gid, out->uid, out->gid, out->mode);
	if (so_reserved(out) || memcmp(out->name, in->name, sizeof(in->name)) ||
	    out->flags != in->flags || out->expect_uid != in->expect_uid)
		fz_fail(w, "in-only fields changed by SPACE_OPEN");
	of_attach(w, of, in->name, slot, out->space_id, out->block_bytes,
		  out->nr_blocks);
}

/* SPACE_OPEN failed with EFAULT after reading the struct: joined or not? */
static void so_resolve(struct worker *w, struct ofile *of,
		       const struct kvpool_space_open *in, int slot)
{
	struct kvpool_space_info si;
	int ret = kv_space_info(of->fds[0], &si);

	if (ret == -EBADFD) {
		note(w, " (not joined)");
		return;
	}
	if (ret)
		fz_fail(w, "SPACE_INFO after SPACE_OPEN -> EFAULT: %s", ename(-ret));
	note(w, " (joined space %u)", si.space_id);
	of_attach(w, of, in->name, slot, si.space_id, si.block_bytes, si.nr_blocks);
}

void op_join(struct worker *w, struct rng *r, int bad)
{
	struct kvpool_space_open so, out;
	struct ofile *of;
	int slot, sk = P_GOOD, as_user = 0, cbad, ret, busy = 0, n, fd;
	uid_t uid = 0;
	gid_t gid = 0;
	struct fz_exp e;
	char *arg;

	gen_so(w, r, &so, &slot);
	if (chance(r, 8)) {
		as_user = 1;
		uid = 1000 + rn(r, 2);
		gid = chance(r, 3) ? 0 : 1000 + rn(r, 2);
	}
	sk = odd_struct_kind(r, 25, sk);
	for (n = bad ? 1 + rn(r, 3) : 0; n > 0; n--) {
		switch (rn(r, 10)) {
		case 8:
			so_out_or_create_defect(r, &so);
			break;
		case 0:
			/*
			 * Not PERSIST (bit 2) with CREATE: a persistent space
			 * would outlive the run; PERSIST alone is a defect.
			 */
			if (chance(r, 4)) {
				so.flags = (so.flags & ~KVPOOL_SPACE_CREATE) |
					   KVPOOL_SPACE_PERSIST;
			} else {
				so.flags |= 1u << (4 + rn(r, 28));
			}
			break;
		case 1:
			so.flags = KVPOOL_SPACE_EXCL;
			break;
		case 2:
			if (chance(r, 2)) {
				so.flags &= ~KVPOOL_SPACE_FOREIGN;
				so.expect_uid = (u32)rnd(r) | 1;
			} else {
				so.flags |= KVPOOL_SPACE_FOREIGN | KVPOOL_SPACE_CREATE;
			}
			break;
		case 3:
			so.reserved[rn(r, 4)] = rnd(r) | 1;
			break;
		case 4:
			bad_name(r, so.name);
			slot = -1;
			break;
		case 5:
			so.flags = (so.flags & ~KVPOOL_SPACE_PERSIST) |
				   KVPOOL_SPACE_CREATE;
			create_defect(w, r, &so);
			break;
		case 6:
			sk = p_fault_kind(r);
			break;
		case 7:
			so.flags = (so.flags & ~KVPOOL_SPACE_PERSIST) |
				   KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL;
			create_defect(w, r, &so);
			break;
		default:
			busy = 1;
			break;
		}
	}
	/* A new file opened as the user: the module checks the opener. */
	of = as_user && !busy ? of_new_as(w, O_RDWR, uid, gid) : NULL;
	/* A parent's file must not change state: join only through our own. */
	if (!of)
		of = busy ? of_pick(w, rnd(r), PICK_JOINED) :
			    of_pick(w, rnd(r), PICK_UNJOINED | PICK_MUT);
	if (!of)
		of = of_new(w, O_RDWR);
	if (!of && !busy && (of = of_pick(w, rnd(r), PICK_MUT))) {
		/* every file has joined: give one up for a new one */
		note(w, " (closed file %d)", of_index(w, of));
		while (of->nfds)
			of_close_fd(w, of, 0);
		of = of_new(w, O_RDWR);
	}
	if (!of)
		of = of_any(w, rnd(r), PICK_UNJOINED | PICK_MUT);
	/* Whoever opened the file joins, not this (root) process. */
	as_user = of->as_user;
	uid = of->uid;
	gid = of->gid;
	so_expect(w, &so, of, sk, as_user, &e, &cbad);
	if (of->inherited && !e.must_fail) {
		skip(w, "parent's file");
		return;
	}
	fd = of_fd(of, r);
	arg = place_struct(w, r, &sk, &so, sizeof(so));
	so_expect(w, &so, of, sk, as_user, &e, &cbad);	/* sk may have changed */
	note(w, " file %d fd %d%s name '%s'%s flags %#x bb %llu quota %llu mode %#o policy %u mask %#llx expect_uid %u res %d ptr %s",
	     of_index(w, of), fd, of->joined ? " (joined)" : "",
	     name_str(so.name), name_ok(so.name) ? "" : " (bad)",
	     so.flags, (unsigned long long)so.block_bytes,
	     (unsigned long long)so.quota_bytes, so.mode, so.numa_policy,
	     (unsigned long long)so.node_mask, so.expect_uid, so_reserved(&so),
	     p_name[sk]);
	if (as_user)
		note(w, " (opened as %u:%u)", uid, gid);
	ret = kv_ioctl(fd, KVPOOL_IOC_SPACE_OPEN, arg);
	if (!ret && probe_copy(&out, arg, sizeof(out)))
		fz_fail(w, "fault reading back the struct at %p", arg);
	fz_expect(w, ret, &e);
	if (!ret) {
		note(w, " space %u%s", out.space_id, out.created ? " created" : "");
		so_validate(w, of, &so, &out, slot, cbad, as_user, uid, gid);
	} else if (ret == -EFAULT && p_readable(sk)) {
		so_resolve(w, of, &so, slot);
	}
}
