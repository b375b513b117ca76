// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_ioctl: fuzz_test's INFO and SPACE_INFO, random command numbers and
 * bad fds.
 */
#include "fuzz_harness.h"

/* ---- INFO, SPACE_INFO, random commands ------------------------------------ */

static void info_validate(struct worker *w, const struct kvpool_info *in)
{
	int i;

	if (in->flags || in->api_version != KVPOOL_API_VERSION ||
	    in->features != KVPOOL_FEATURES || in->page_size != w->ps ||
	    in->chunk_size < w->ps || in->max_batch != KVPOOL_MAX_BATCH ||
	    in->node_mask != w->pool_mask ||
	    in->nr_nodes != (u32)__builtin_popcountll(in->node_mask) ||
	    in->pool_bytes != w->pool_bytes || in->free_bytes > in->pool_bytes)
		fz_fail(w, "INFO: flags %u api %u features %#llx page %u chunk %u nodes %u mask %#llx batch %u pool %llu free %llu",
			in->flags, in->api_version,
			(unsigned long long)in->features, in->page_size,
			in->chunk_size, in->nr_nodes,
			(unsigned long long)in->node_mask, in->max_batch,
			(unsigned long long)in->pool_bytes,
			(unsigned long long)in->free_bytes);
	for (i = 0; i < 4; i++)
		if (in->reserved[i])
			fz_fail(w, "INFO: reserved[%d] = %#llx out", i,
				(unsigned long long)in->reserved[i]);
}

void op_info(struct worker *w, struct rng *r)
{
	struct kvpool_info in, out;
	struct ofile *of = of_any(w, rnd(r), PICK_ANY);
	int sk = P_GOOD, ret, fd = of_fd(of, r), defect = 0;
	struct fz_exp e;
	char *arg;

	memset(&in, 0, sizeof(in));
	if (chance(r, 6)) {	/* out fields are 0 on input (API 4) */
		switch (rn(r, 4)) {
		case 0:
			in.api_version = (u32)rnd(r) | 1;
			break;
		case 1:
			in.features = rnd(r) | 1;
			break;
		case 2:
			in.pool_bytes = rnd(r) | 1;
			break;
		default:
			in.node_mask = rnd(r) | 1;
			break;
		}
		defect = 1;
	}
	if (chance(r, 3)) {
		switch (rn(r, 4)) {
		case 0:
			in.flags = (u32)rnd(r) | 1;
			defect = 1;
			break;
		case 1:
			in.reserved[rn(r, 4)] = rnd(r) | 1;
			defect = 1;
			break;
		case 2:
			sk = chance(r, 2) ? P_RO : P_KVRO;
			break;
		default:
			sk = p_fault_kind(r);
			break;
		}
	} else if (chance(r, 10)) {
		sk = chance(r, 2) ? P_MISALIGN : P_KVOWN;
	}
	arg = place_struct(w, r, &sk, &in, sizeof(in));
	memset(&e, 0, sizeof(e));
	if (!p_readable(sk)) {
		ex_defect(&e, EFAULT);
	} else if (sk == P_KVRO) {	/* whatever the page holds */
		ex_defect(&e, EINVAL);
		ex_defect(&e, EFAULT);
	} else {
		if (defect)
			ex_defect(&e, EINVAL);
		if (!p_writable(sk))
			ex_defect(&e, EFAULT);
	}
	note(w, " fd %d flags %#x ptr %s", fd, in.flags, p_name[sk]);
	ret = kv_ioctl(fd, KVPOOL_IOC_INFO, arg);
	fz_expect(w, ret, &e);
	if (!ret) {
		if (probe_copy(&out, arg, sizeof(out)))
			fz_fail(w, "fault reading back INFO at %p", arg);
		info_validate(w, &out);
	}
}

static void si_validate(struct worker *w, struct ofile *of,
			const struct kvpool_space_info *si)
{
	u64 mine = 0;
	u32 i;
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++)
		if (w->of[k].used && w->of[k].joined &&
		    w->of[k].space_id == of->space_id)
			mine += w->of[k].owned.n;
	if (si->flags || si->reserved[0] || si->reserved[1] || si->reserved[2] ||
	    si->reserved[3] || si->space_id != of->space_id ||
	    si->block_bytes != of->block_bytes || si->nr_blocks != of->nr_blocks ||
	    /* the rest of the backed blocks are published, cached or holes */
	    si->free_blocks + si->owned_blocks > si->backed_blocks ||
	    si->backed_blocks > si->nr_blocks ||
	    si->backed_bytes < si->backed_blocks * si->block_bytes ||
	    si->backed_bytes > si->nr_blocks * si->block_bytes ||
	    si->my_blocks != of->owned.n || si->owned_blocks < mine)
		fz_fail(w, "SPACE_INFO: space %u bb %llu nr %llu backed %llu (%llu bytes) free %llu owned %llu mine %llu; this file owns %u, this process %llu, expected space %u bb %llu nr %llu",
			si->space_id, (unsigned long long)si->block_bytes,
			(unsigned long long)si->nr_blocks,
			(unsigned long long)si->backed_blocks,
			(unsigned long long)si->backed_bytes,
			(unsigned long long)si->free_blocks,
			(unsigned long long)si->owned_blocks,
			(unsigned long long)si->my_blocks, of->owned.n,
			(unsigned long long)mine, of->space_id,
			(unsigned long long)of->block_bytes,
			(unsigned long long)of->nr_blocks);
	for (i = 0; i < of->owned.cap; i++)
		if (of->owned.key[i] != ID_EMPTY &&
		    of->owned.key[i] >= si->backed_blocks)
			fz_fail(w, "owned block %u is beyond backed_blocks %llu",
				of->owned.key[i], (unsigned long long)si->backed_blocks);
	kb_raise(w, of->space_id, si->backed_blocks * si->block_bytes);
}

void op_space_info(struct worker *w, struct rng *r)
{
	struct kvpool_space_info in, out;
	struct ofile *of = of_any(w, rnd(r), PICK_JOINED);
	int sk = P_GOOD, ret, fd, defect = 0;
	struct fz_exp e;
	char *arg;

	memset(&in, 0, sizeof(in));
	if (chance(r, 6)) {	/* out fields are 0 on input (API 4) */
		switch (rn(r, 3)) {
		case 0:
			in.space_id = (u32)rnd(r) | 1;
			break;
		case 1:
			in.my_blocks = rnd(r) | 1;
			break;
		default:
			in.backed_bytes = rnd(r) | 1;
			break;
		}
		defect = 1;
	}
	if (chance(r, 3)) {
		switch (rn(r, 5)) {
		case 0:
			in.flags = (u32)rnd(r) | 1;
			defect = 1;
			break;
		case 1:
			in.reserved[rn(r, 4)] = rnd(r) | 1;
			defect = 1;
			break;
		case 2:
			sk = chance(r, 2) ? P_RO : P_KVRO;
			break;
		case 3:
			of = of_any(w, rnd(r), PICK_UNJOINED);
			break;
		default:
			sk = p_fault_kind(r);
			break;
		}
	} else if (chance(r, 10)) {
		sk = chance(r, 2) ? P_MISALIGN : P_KVOWN;
	}
	fd = of_fd(of, r);
	arg = place_struct(w, r, &sk, &in, sizeof(in));
	memset(&e, 0, sizeof(e));
	if (!p_readable(sk)) {
		ex_defect(&e, EFAULT);
	} else {
		if (sk == P_KVRO) {
			ex_defect(&e, EINVAL);
			ex_defect(&e, EFAULT);
		}
		if (defect)
			ex_defect(&e, EINVAL);
		if (!of->joined)
			ex_defect(&e, EBADFD);
		if (!p_writable(sk))
			ex_defect(&e, EFAULT);
	}
	note(w, " file %d fd %d%s flags %#x ptr %s", of_index(w, of), fd,
	     of->joined ? "" : " (unjoined)", in.flags, p_name[sk]);
	ret = kv_ioctl(fd, KVPOOL_IOC_SPACE_INFO, arg);
	fz_expect(w, ret, &e);
	if (!ret) {
		if (probe_copy(&out, arg, sizeof(out)))
			fz_fail(w, "fault reading back SPACE_INFO at %p", arg);
		si_validate(w, of, &out);
	}
}

static const unsigned int fz_cmds[] = {
	KVPOOL_IOC_INFO, KVPOOL_IOC_SPACE_OPEN, KVPOOL_IOC_ALLOC,
	KVPOOL_IOC_FREE, KVPOOL_IOC_SPACE_INFO, KVPOOL_IOC_PUBLISH,
	KVPOOL_IOC_LOOKUP, KVPOOL_IOC_RELEASE, KVPOOL_IOC_SPACE_DESTROY,
	KVPOOL_IOC_RESIDENCY, KVPOOL_IOC_SPACE_STATS,
};
#define FZ_NCMDS	(sizeof(fz_cmds) / sizeof(fz_cmds[0]))

static const char *const fz_cmd_names[FZ_NCMDS] = {
	"INFO", "SPACE_OPEN", "ALLOC", "FREE", "SPACE_INFO", "PUBLISH",
	"LOOKUP", "RELEASE", "SPACE_DESTROY", "RESIDENCY", "SPACE_STATS",
};

static int is_cmd(unsigned int c)
{
	unsigned int i;

	for (i = 0; i < FZ_NCMDS; i++)
		if (c == fz_cmds[i])
			return 1;
	return 0;
}

/* Commands the VFS handles itself for any file: not the module's to refuse. */
static int vfs_cmd(unsigned int c)
{
	switch (_IOC_TYPE(c)) {
	case 0x00:	/* FIBMAP, FIGETBSZ */
	case 'T':	/* FIOCLEX, FIONBIO, FIOASYNC, FIOQSIZE, FIONREAD */
	case 'X':	/* FIFREEZE, FITHAW, FS_IOC_FSGETXATTR */
	case 'f':	/* FS_IOC_FIEMAP, FS_IOC_GETFLAGS */
	case 0x94:	/* FICLONE, FICLONERANGE, FIDEDUPERANGE */
		return 1;
	}
	return 0;
}

void op_ioctl_rand(struct worker *w, struct rng *r)
{
	struct ofile *of = of_any(w, rnd(r), PICK_ANY);
	int fd = of_fd(of, r), ret, k;
	unsigned int cmd, nr;
	struct fz_exp e;
	char *arg;

	memset(&e, 0, sizeof(e));
	switch (rn(r, 4)) {
	case 0:		/* anything in the magic */
		do
			cmd = _IOC(rn(r, 4), KVPOOL_IOC_MAGIC, rn(r, 256), rn(r, 1 << 14));
		while (is_cmd(cmd));
		break;
	case 1:		/* a real number with the wrong size or direction */
		nr = rn(r, FZ_NCMDS);
		do
			cmd = _IOC(rn(r, 4), KVPOOL_IOC_MAGIC, nr,
				   chance(r, 2) ? rn(r, 256) :
				   _IOC_SIZE(fz_cmds[nr]) + (rn(r, 2) ? 8 : -8));
		while (is_cmd(cmd));
		break;
	case 2:		/* anything */
		do
			cmd = (u32)rnd(r);
		while (is_cmd(cmd) || vfs_cmd(cmd));
		break;
	default: {	/* a real command, random bytes as the struct */
		union {
			struct kvpool_info i;
			struct kvpool_space_open so;
			struct kvpool_blocks b;
			struct kvpool_space_info si;
			struct kvpool_publish pub;
			struct kvpool_lookup lk;
			struct kvpool_space_destroy sd;
			struct kvpool_residency res;
			struct kvpool_space_stats st;
			u64 raw[32];
		} u;
		int cbad;

		for (k = 0; k < 32; k++)
			u.raw[k] = rnd(r);
		nr = rn(r, FZ_NCMDS);
		cmd = fz_cmds[nr];
		switch (nr) {
		case 0:
			u.i.flags |= 1;
			ex_defect(&e, EINVAL);
			break;
		case 1:
			u.so.flags |= 8;	/* an unknown flag */
			so_expect(w, &u.so, of, P_GOOD, 0, &e, &cbad);
			break;
		case 2:
		case 3:
		case 7:		/* RELEASE: struct kvpool_blocks as well */
			u.b.flags |= 1;
			ex_defect(&e, EINVAL);
			ex_add(&e, E2BIG);
			if (!of->joined)
				ex_add(&e, EBADFD);
			break;
		case 5:
			u.pub.flags |= 2;	/* not a KVPOOL_PUBLISH_* flag */
			ex_defect(&e, EINVAL);
			ex_add(&e, E2BIG);
			if (!of->joined)
				ex_add(&e, EBADFD);
			break;
		case 6:
			u.lk.flags |= 1;
			ex_defect(&e, EINVAL);
			ex_add(&e, E2BIG);
			if (!of->joined)
				ex_add(&e, EBADFD);
			break;
		case 8:		/* never destroys: the flags are bad */
			u.sd.flags |= 1;
			ex_defect(&e, EINVAL);
			break;
		case 9:
			u.res.flags |= 1;
			ex_defect(&e, EINVAL);
			ex_add(&e, E2BIG);
			if (!of->joined)
				ex_add(&e, EBADFD);
			break;
		case 10:
			u.st.flags |= 1;
			ex_defect(&e, EINVAL);
			if (!of->joined)
				ex_add(&e, EBADFD);
			break;
		default:
			u.si.flags |= 1;
			ex_defect(&e, EINVAL);
			break;
		}
		/* Every command but INFO, SPACE_INFO and SPACE_STATS needs FMODE_WRITE first. */
		if (of->acc == O_RDONLY && nr != 0 && nr != 4 && nr != 10) {
			memset(&e, 0, sizeof(e));
			ex_defect(&e, EBADF);
		}
		k = P_GOOD;
		arg = place_struct(w, r, &k, &u, _IOC_SIZE(cmd));
		note(w, " fd %d %s with random bytes", fd, fz_cmd_names[nr]);
		ret = kv_ioctl(fd, cmd, arg);
		fz_expect(w, ret, &e);
		return;
	}
	}
	switch (rn(r, 3)) {
	case 0:
		arg = w->scr;
		break;
	case 1:
		arg = NULL;
		break;
	default:
		arg = (char *)(uintptr_t)rnd(r);
		break;
	}
	ex_defect(&e, ENOTTY);
	note(w, " fd %d cmd %#x arg %p", fd, cmd, arg);
	ret = kv_ioctl(fd, cmd, arg);
	fz_expect(w, ret, &e);
}

void op_badfd(struct worker *w, struct rng *r)
{
	struct kvpool_info info;
	struct fz_exp e;
	int fd = 900 + rn(r, 100), ret;
	void *p;

	memset(&info, 0, sizeof(info));
	memset(&e, 0, sizeof(e));
	ex_defect(&e, EBADF);
	if (fcntl(fd, F_GETFD) != -1) {
		note(w, " fd %d", fd);
		skip(w, "open");
		return;
	}
	if (chance(r, 2)) {
		note(w, " ioctl(fd %d, INFO)", fd);
		ret = kv_ioctl(fd, KVPOOL_IOC_INFO, &info);
	} else {
		note(w, " mmap(fd %d)", fd);
		p = mmap(NULL, w->ps, PROT_READ, MAP_SHARED, fd, 0);
		ret = p == MAP_FAILED ? -errno : 0;
	}
	fz_expect(w, ret, &e);
}
