// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_worker: fuzz_test's worker process: the op loop, and fork.
 */
#include "fuzz_harness.h"

#define X(n, w) w,
static const unsigned int op_weight[] = { FZ_OPS(X) };
#undef X

/* ---- fork ---------------------------------------------------------------------- */

static void worker_loop(struct worker *w);
static void worker_cleanup(struct worker *w);

static void op_fork(struct worker *w, struct rng *r)
{
	/* Killed at a wall-clock moment: not with KVPOOL_FUZZ_KILL=0 (replays). */
	unsigned int mode = rn(r, 3) + !cfg.kill;
	u64 cseed = rnd(r), nops = 1 + rn(r, 40);
	u32 seq;
	pid_t pid, me;
	int st, k;

	if (w->child) {
		skip(w, "no fork in a fork child");
		return;
	}
	seq = ++w->next_childseq & 0xffff;
	if (!seq)
		seq = ++w->next_childseq & 0xffff;
	STORE(sh->child_alive[w->slot], seq);
	ADD(sh->children, 1);
	note(w, " child %u, %llu ops, %s", seq, (unsigned long long)nops,
	     mode == 0 ? "then SIGKILL" : "waited for");
	me = getpid();
	pid = fork();
	if (pid < 0)
		fz_fail(w, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != me)	/* the parent died before prctl() */
			_exit(0);
		w->parent = me;
		w->child = 1;
		w->childseq = seq;
		w->rng.s = cseed;
		w->max_ops = w->opno + nops;
		for (k = 0; k < FZ_MAX_OFILES; k++)
			w->of[k].inherited = w->of[k].used;
		for (k = 0; k < FZ_MAX_MAPS; k++)
			w->map[k].inh = w->map[k].used;
		STORE(sh->ring[w->slot][1].seq, 0);
		worker_loop(w);
		worker_cleanup(w);
		_exit(0);
	}
	if (mode == 0) {
		sleep_us(rn(r, 20000));
		STORE(sh->child_alive[w->slot], 0);	/* its records die with it */
		kill(pid, SIGKILL);
	}
	if (waitpid(pid, &st, 0) != pid)
		fz_fail(w, "waitpid(%d): %s", (int)pid, strerror(errno));
	STORE(sh->child_alive[w->slot], 0);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && mode == 0) {
		ADD(sh->children_killed, 1);
		note(w, " killed");
	} else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		if (WIFSIGNALED(st))
			dump_ring(&sh->ring[w->slot][1], "the fork child");
		fz_fail(w, "fork child %u ended with %s %d", seq,
			WIFSIGNALED(st) ? "signal" : "status",
			WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	} else {
		note(w, " exited");
	}
	/* Records of a killed child: dead already, drop them for good. */
	clear_records(0xf800ffffu, (u32)(w->slot + 1) << 28 | 1u << 27 | seq);
	w->op_ok = 1;
}

/* ---- the worker ------------------------------------------------------------------ */

static void run_kind(struct worker *w, int kind, struct rng *r)
{
	switch (kind) {
	case OP_OPEN: op_open(w, r); break;
	case OP_CLOSE: op_close(w, r); break;
	case OP_DUP: op_dup(w, r); break;
	case OP_JOIN: op_join(w, r, 0); break;
	case OP_JOIN_BAD: op_join(w, r, 1); break;
	case OP_ALLOC: op_alloc(w, r, 0); break;
	case OP_ALLOC_BAD: op_alloc(w, r, 1); break;
	case OP_FREE: op_free(w, r, 0); break;
	case OP_FREE_BAD: op_free(w, r, 1); break;
	case OP_INFO: op_info(w, r); break;
	case OP_SPACE_INFO: op_space_info(w, r); break;
	case OP_IOCTL_RAND: op_ioctl_rand(w, r); break;
	case OP_BADFD: op_badfd(w, r); break;
	case OP_MMAP: op_mmap(w, r, 0); break;
	case OP_MMAP_BAD: op_mmap(w, r, 1); break;
	case OP_MUNMAP: op_munmap(w, r); break;
	case OP_MPROTECT: op_mprotect(w, r); break;
	case OP_MREMAP: op_mremap(w, r); break;
	case OP_MADVISE: op_madvise(w, r); break;
	case OP_MLOCK: op_mlock(w, r); break;
	case OP_WRITE: op_write(w, r); break;
	case OP_VERIFY: op_verify(w, r); break;
	case OP_TOUCH: op_touch(w, r); break;
	case OP_GUP: op_gup(w, r); break;
	case OP_FORK: op_fork(w, r); break;
	case OP_PEEK: op_peek(w, r); break;
	case OP_PUBLISH: op_publish(w, r, 0); break;
	case OP_PUBLISH_BAD: op_publish(w, r, 1); break;
	case OP_LOOKUP: op_lookup(w, r, 0); break;
	case OP_LOOKUP_BAD: op_lookup(w, r, 1); break;
	case OP_RELEASE: op_release(w, r, 0); break;
	case OP_RELEASE_BAD: op_release(w, r, 1); break;
	}
}

/*
 * The op cannot do its job (nothing owned to FREE, no joined file to
 * ALLOC on, ...): do the op that would make it possible instead.  It is
 * counted as that op; the RNG stream is the same either way.
 */
void instead(struct worker *w, struct rng *r, int kind, const char *why)
{
	ADD(sh->stat[w->kind].calls, -1);
	ADD(sh->stat[kind].calls, 1);
	note(w, " %s: %s instead", why, op_name[kind]);
	w->kind = kind;
	if (++w->depth > 2) {	/* no ping-pong */
		skip(w, "nested");
	} else {
		run_kind(w, kind, r);
	}
	w->depth--;
}

static void do_op(struct worker *w, int kind, u64 seed)
{
	struct rng r = { fz_mix(seed ^ 0x5DEECE66DULL) };
	struct fz_ring *ring = my_ring(w);
	u64 seq;

	w->kind = kind;
	w->op_ok = 0;
	w->line_len = 0;
	w->opno++;
	if (w->child)
		note(w, "w%d.%u.c%u #%llu %s", w->slot, w->gen, w->childseq,
		     (unsigned long long)w->opno, op_name[kind]);
	else
		note(w, "w%d.%u #%llu %s", w->slot, w->gen,
		     (unsigned long long)w->opno, op_name[kind]);
	ADD(sh->stat[kind].calls, 1);
	run_kind(w, kind, &r);
	kind = w->kind;	/* the op it turned into, if it did */
	ADD(*(w->op_ok == 2 ? &sh->stat[kind].skipped :
	      w->op_ok ? &sh->stat[kind].ok : &sh->stat[kind].err), 1);
	seq = LOAD(ring->seq);
	memcpy(ring->line[seq % FZ_RING], w->line, FZ_LINE);
	ring->line[seq % FZ_RING][FZ_LINE - 1] = 0;
	STORE(ring->seq, seq + 1);
	if (cfg.trace)
		say("# %s", w->line);
}

static int pick_kind(u64 s)
{
	static unsigned int total;
	unsigned int x, k;

	if (!total)
		for (k = 0; k < OP_NR; k++)
			total += op_weight[k];
	x = (u32)(s >> 32) % total;
	for (k = 0; k < OP_NR; k++) {
		if (x < op_weight[k])
			return k;
		x -= op_weight[k];
	}
	return OP_TOUCH;
}

static void worker_loop(struct worker *w)
{
	while (!LOAD(sh->stop) && mono_ns() < sh->deadline_ns &&
	       (!w->max_ops || w->opno < w->max_ops)) {
		u64 s = rnd(&w->rng);

		do_op(w, pick_kind(s), s);
	}
}

static void worker_cleanup(struct worker *w)
{
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++)
		while (w->of[k].nfds)
			of_close_fd(w, &w->of[k], 0);
	for (k = 0; k < FZ_MAX_MAPS; k++)
		if (w->map[k].used)
			map_drop(w, &w->map[k]);
}

static void worker_init(struct worker *w, int slot, u32 gen)
{
	struct kvpool_info info;
	size_t ids_bytes = (size_t)FZ_IDS_MAX * 4;
	int fd, k;

	memset(w, 0, sizeof(*w));
	w->slot = slot;
	w->gen = gen;
	w->parent = getppid();
	w->ps = getpagesize();
	w->rng.s = fz_mix(cfg.seed ^ fz_mix((u64)slot << 32 | gen));
	fz_install_handlers();
	w->line_len = 0;
	note(w, "w%d.%u init", slot, gen);
	w->pool_bytes = sh->pool_bytes;
	w->pool_mask = sh->pool_mask;
	w->scr_len = (1 + (ids_bytes + 64 + w->ps - 1) / w->ps) * w->ps;
	w->scr = mmap(NULL, w->scr_len + w->ps, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->scr == MAP_FAILED)
		fz_fail(w, "scratch mmap: %s", strerror(errno));
	w->guard = w->scr + w->scr_len;
	if (mprotect(w->guard, w->ps, PROT_NONE))
		fz_fail(w, "guard mprotect: %s", strerror(errno));
	w->ids = (u32 *)(w->scr + w->ps);
	fd = memfd_create("fuzz-ro", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, w->scr_len))
		fz_fail(w, "memfd: %s", strerror(errno));
	w->ro = mmap(NULL, w->scr_len, PROT_READ, MAP_SHARED, fd, 0);
	w->ro_rw = mmap(NULL, w->scr_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w->ro == MAP_FAILED || w->ro_rw == MAP_FAILED)
		fz_fail(w, "memfd mmap: %s", strerror(errno));
	close(fd);
	w->tmp = malloc(ids_bytes);
	if (!w->tmp)
		fz_fail(w, "malloc");
	w->ngroups = getgroups(64, w->groups);
	if (w->ngroups < 0)
		w->ngroups = 0;
	for (k = 0; k < FZ_NSHARED; k++)
		snprintf(w->names[k], sizeof(w->names[k]), "%s",
			 k == 5 ? ".." : k == 6 ? "Fz5.x-y_Z" : "");
	strcpy(w->names[0], "fz0");
	strcpy(w->names[1], "fz1");
	strcpy(w->names[2], "fz.2");
	strcpy(w->names[3], "fz_3");
	strcpy(w->names[4], "fz-4");
	memset(w->names[7], 'x', KVPOOL_NAME_MAX - 1);	/* the longest name */
	memcpy(w->names[7], "fz7", 3);
	/* INFO once, so that the worker's view of the pool is checked too. */
	fd = kv_open();
	if (fd < 0 || kv_info(fd, &info))
		fz_fail(w, "INFO at start: %s", strerror(errno));
	close(fd);
	w->nr_nodes = info.nr_nodes;
}

void __attribute__((noreturn)) worker_main(int slot, u32 gen)
{
	static struct worker wk;
	struct worker *w = &wk;
	int k;

	worker_init(w, slot, gen);
	/* A few files and joins to start with, then random ops. */
	for (k = 0; k < 3; k++)
		do_op(w, OP_OPEN, rnd(&w->rng));
	for (k = 0; k < 2; k++)
		do_op(w, OP_JOIN, rnd(&w->rng));
	worker_loop(w);
	worker_cleanup(w);
	_exit(0);
}
