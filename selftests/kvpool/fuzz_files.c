// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_files: fuzz_test's open, close and dup of /dev/kvpool files, and
 * reads of the sysfs and debugfs files.
 */
#include "fuzz_harness.h"

/* ---- files ------------------------------------------------------------------ */

void op_open(struct worker *w, struct rng *r)
{
	static const int accs[] = { O_RDWR, O_RDWR, O_RDWR, O_RDWR, O_RDWR,
				    O_RDWR, O_RDWR, O_RDWR, O_RDONLY, O_WRONLY };
	int acc = accs[rn(r, 10)];
	struct ofile *of = of_new(w, acc);

	if (!of) {	/* table full: close one file first */
		of = &w->of[rn(r, FZ_MAX_OFILES)];
		note(w, " (full: closed file %d)", of_index(w, of));
		while (of->nfds)
			of_close_fd(w, of, 0);
		of = of_new(w, acc);
	}
	note(w, " %s -> file %d fd %d",
	     acc == O_RDWR ? "O_RDWR" : acc == O_RDONLY ? "O_RDONLY" : "O_WRONLY",
	     of_index(w, of), of->fds[0]);
	w->op_ok = 1;
}

void op_close(struct worker *w, struct rng *r)
{
	struct ofile *of = of_pick(w, rnd(r), PICK_ANY);
	int all;

	if (!of) {
		skip(w, "nothing open");
		return;
	}
	all = chance(r, 4);
	note(w, " file %d%s fd %d%s (%u blocks)", of_index(w, of),
	     of->inherited ? " (parent's)" : "", of->fds[0],
	     all ? " and its dups" : "", of->owned.n);
	if (all) {
		while (of->nfds)
			of_close_fd(w, of, 0);
	} else {
		of_close_fd(w, of, rn(r, of->nfds));
	}
	w->op_ok = 1;
}

void op_dup(struct worker *w, struct rng *r)
{
	struct ofile *of = of_pick(w, rnd(r), PICK_ANY), *v;
	int fd, nfd, vi, k;

	if (!of || of->nfds >= FZ_MAX_FDS) {
		skip(w, "no file to dup");
		return;
	}
	fd = of_fd(of, r);
	switch (rn(r, 3)) {
	case 0:
		nfd = dup(fd);
		note(w, " dup(%d)", fd);
		break;
	case 1:
		nfd = fcntl(fd, F_DUPFD_CLOEXEC, 64 + rn(r, 64));
		note(w, " F_DUPFD_CLOEXEC(%d)", fd);
		break;
	default:	/* over another file's fd: that one is closed */
		v = of_pick(w, rnd(r), PICK_ANY);
		if (!v || v == of) {
			nfd = dup(fd);
			note(w, " dup(%d)", fd);
			break;
		}
		vi = rn(r, v->nfds);
		nfd = v->fds[vi];
		note(w, " dup3(%d, %d of file %d)", fd, nfd, of_index(w, v));
		if (v->nfds == 1)
			of_unclaim_all(w, v);
		if (dup3(fd, nfd, O_CLOEXEC) != nfd)
			fz_fail(w, "dup3: %s", strerror(errno));
		v->fds[vi] = v->fds[--v->nfds];
		if (!v->nfds) {
			idm_free(&v->owned);
			idm_free(&v->refs);
			memset(v, 0, sizeof(*v));
		}
		break;
	}
	if (nfd < 0)
		fz_fail(w, "dup: %s", strerror(errno));
	for (k = 0; k < of->nfds; k++)
		if (of->fds[k] == nfd)
			fz_fail(w, "dup returned an fd the file already has");
	of->fds[of->nfds++] = nfd;
	note(w, " -> %d", nfd);
	w->op_ok = 1;
}

/* ---- sysfs and debugfs ---------------------------------------------------- */

void op_peek(struct worker *w, struct rng *r)
{
	static char buf[65536];
	u64 pool, free_b;
	int n;

	(void)r;
	n = read_file(KV_CHECK, buf, sizeof(buf));
	if (n < 0)
		fz_fail(w, "read %s: %s", KV_CHECK, strerror(-n));
	if (strcmp(buf, "ok\n"))
		fz_fail(w, "%s while running:\n%s", KV_CHECK, buf);
	n = read_file("/sys/kernel/debug/kvpool/spaces", buf, sizeof(buf));
	if (n < 0)
		fz_fail(w, "read debugfs spaces: %s", strerror(-n));
	note(w, " check ok, spaces %d bytes", n);
	n = read_file("/sys/kernel/debug/kvpool/nodes", buf, sizeof(buf));
	if (n < 0)
		fz_fail(w, "read debugfs nodes: %s", strerror(-n));
	if (sysfs_u64("pool_bytes", &pool) || sysfs_u64("free_bytes", &free_b) ||
	    pool != w->pool_bytes || free_b > pool)
		fz_fail(w, "sysfs pool_bytes %llu free_bytes %llu (pool was %llu)",
			(unsigned long long)pool, (unsigned long long)free_b,
			(unsigned long long)w->pool_bytes);
	w->op_ok = 1;
}
