// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_test: a seeded random fuzzer of the whole /dev/kvpool uAPI, run by
 * several processes at once.
 *
 * Each worker process (4 by default) holds a few open files of /dev/kvpool,
 * most of them joined to a handful of space names that all workers share,
 * and runs a random sequence of operations on them:
 *
 *   - every ioctl, with valid arguments and with defects: unknown flags,
 *     non-zero pad and reserved bytes, counts 0 and beyond KVPOOL_MAX_BATCH,
 *     NULL, unmapped, kernel, non-canonical, PROT_NONE, half-mapped and
 *     read-only pointers (for the struct and for the ids array), ids in and
 *     out of range, another file's ids, duplicate ids, a wrong block_bytes
 *     on join, bad names, invalid create fields, an already joined file;
 *     structs and ids arrays placed inside the kvpool mapping itself;
 *     random command numbers in the 0xB7 magic and outside it;
 *   - the prefix cache: PUBLISH of owned blocks under hashes drawn from a
 *     small per-space set (so that workers publish the same hashes and
 *     dedup), LOOKUP of runs of those hashes, RELEASE of the references,
 *     valid and with defects (bad flags, pad, reserved, counts, entry
 *     fields, priorities, ids not owned or not held, duplicates, bad
 *     pointers for the struct and every array, an unjoined file);
 *   - open (O_RDWR, O_RDONLY, O_WRONLY), close, dup, dup3 over another file;
 *   - mmap (valid and invalid: MAP_PRIVATE, PROT_EXEC, beyond map_bytes, ...),
 *     munmap and mprotect of whole mappings and of parts, mremap (shrink,
 *     grow, move, MREMAP_DONTUNMAP), madvise, mlock;
 *   - reads and writes of the mapped blocks, catching SIGBUS where the range
 *     is not backed, and process_vm_readv/process_vm_writev through the
 *     mapping (get_user_pages);
 *   - fork: the child checks what it inherited (SPACE_INFO's my_blocks, the
 *     data of the parent's blocks, through its own mapping and through
 *     process_vm_readv of the parent) and runs a short sequence on files of
 *     its own; the parent waits for it or SIGKILLs it at a random moment;
 *   - reads of the sysfs and debugfs files; debugfs "check" must say "ok"
 *     at any time.
 *
 * The main process SIGKILLs a random worker (with its fork child) every few
 * seconds and starts a new one in its place.
 *
 * What is checked:
 *   - every return against the errnos Documentation/kvpool.rst lists for
 *     the call (mmap(2), mprotect(2), mremap(2) for the mm layer).  The set
 *     is computed from the arguments actually passed: a call with a defect
 *     must fail, with the errno of one of its defects (the order in which
 *     the module checks them is not documented, so any of them); a call
 *     without one must succeed, except that ALLOC may run out of space or
 *     memory and a join may find the name absent, taken, owned by someone
 *     else or of another block_bytes;
 *   - results: INFO and SPACE_INFO fields and their accounting
 *     (free + owned == backed, my_blocks == what this file owns), SPACE_OPEN
 *     out fields (geometry echoed on create, created flag, owner and
 *     permission of a join through a file opened with a non-root euid:
 *     rights are the opener's, whoever calls; one space per name), ALLOC ids (in
 *     range, no duplicates, never a block another file owns: also across
 *     processes, through a table of owners in shared memory), all-or-nothing
 *     after a failed ALLOC or FREE;
 *   - references: a model of the reader references of every file (block id
 *     -> count, and the hash each block holds), checked against
 *     SPACE_STATS' my_refs after every PUBLISH, LOOKUP and RELEASE; a hash
 *     this process holds a reference on is found by PUBLISH (DEDUP to that
 *     block) and LOOKUP (a hit on that block); one hash is never in two
 *     blocks; a published block is never owned (by a file of this process
 *     or in the shared owner table) and never handed out by ALLOC while
 *     referenced; a lookup stops only at a hash that is not held;
 *   - memory: a page of a space below what is known to be backed never
 *     raises SIGBUS; data this process wrote into its blocks reads back;
 *     the first word of every page of space S is 0 or S's tag (every writer
 *     puts it there), so data of another space (an unscrubbed chunk) shows;
 *   - after the run, with every worker reaped and every file closed:
 *     free_bytes, held_bytes, spaces and pool_bytes are back at the
 *     baseline and debugfs "check" reads "ok".
 *
 * A failure prints the failing op with its arguments and result, the last
 * ops of that process (and of its parent, or of its last fork child), and
 * the seed.  An op that finds nothing to work on does the op that would
 * give it something instead (FREE with nothing owned: ALLOC; ALLOC with no
 * joined file: JOIN) and is counted as that op.
 *
 * Settings (environment first, then the kernel command line, which is how
 * they reach the test VM: KVPOOL_VM_APPEND="kvpool_fuzz_seconds=600"; the
 * kernel also hands NAME=value words it does not know to init's
 * environment, so KVPOOL_VM_APPEND="KVPOOL_FUZZ_SEED=42" works as well):
 *   KVPOOL_FUZZ_SECONDS  kvpool_fuzz_seconds  run time (default 120)
 *   KVPOOL_FUZZ_SEED     kvpool_fuzz_seed     seed (default: time and pid)
 *   KVPOOL_FUZZ_WORKERS  kvpool_fuzz_workers  processes (default 4, max 8)
 *   KVPOOL_FUZZ_KILL     kvpool_fuzz_kill     SIGKILL workers (default 1)
 *   KVPOOL_FUZZ_TRACE    kvpool_fuzz_trace    print every op (default 0)
 * The harness timeout follows the run time; for runs longer than about
 * 250 s raise the VM runner's limits too (KVPOOL_VM_TEST_TIMEOUT, 300 s per
 * test binary, and KVPOOL_VM_TIMEOUT).
 *
 * Replay: each worker's operations come from its own generator, seeded from
 * the seed, its slot and its generation (respawn count), and every op draws
 * exactly one number from it; so a replay with the same seed runs the same
 * op kinds with the same random choices in each worker.  What the workers
 * do to each other (shared spaces, kills at wall-clock moments) is not
 * replayed.  KVPOOL_FUZZ_WORKERS=1 KVPOOL_FUZZ_KILL=0 (no kills of workers
 * or of fork children) repeats the same ops with the same arguments and
 * results for as long as the module's own timing does not show (chunks
 * held after a teardown return to the pool from delayed work, so an ALLOC
 * near the pool's end may differ); pids and addresses differ.
 */
#include "kvpool_util.h"

#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#ifndef MADV_COLD
#define MADV_COLD	20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT	21
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

typedef __u64 u64;
typedef __u32 u32;
typedef __u8 u8;

/* ---- settings ------------------------------------------------------------ */

#define FZ_SECONDS_DEFAULT	120
#define FZ_WORKERS_DEFAULT	4
#define FZ_MAX_WORKERS		8
#define FZ_STOP_GRACE_S		60	/* for workers to stop after the run */
/* Harness timeout: the run, the stop grace and the final checks. */
#define FZ_TIMEOUT_EXTRA	(FZ_STOP_GRACE_S + 60)
#define FZ_TIMEOUT_DEFAULT	(FZ_SECONDS_DEFAULT + FZ_TIMEOUT_EXTRA)

static struct {
	u64 seed;
	unsigned int seconds;
	unsigned int workers;
	int kill;
	int trace;
} cfg;

static int cmdline_get(const char *key, char *out, size_t len)
{
	char buf[4096], *tok, *save;
	size_t kl = strlen(key);

	if (read_file("/proc/cmdline", buf, sizeof(buf)) < 0)
		return 0;
	for (tok = strtok_r(buf, " \t\n", &save); tok;
	     tok = strtok_r(NULL, " \t\n", &save)) {
		if (!strncmp(tok, key, kl) && tok[kl] == '=') {
			snprintf(out, len, "%s", tok + kl + 1);
			return 1;
		}
	}
	return 0;
}

static u64 cfg_u64(const char *env, const char *key, u64 def, int *set)
{
	const char *v = getenv(env);
	char buf[64], *end;
	unsigned long long x;

	if (set)
		*set = 0;
	if (v && *v)
		snprintf(buf, sizeof(buf), "%s", v);
	else if (!cmdline_get(key, buf, sizeof(buf)))
		return def;
	errno = 0;
	x = strtoull(buf, &end, 0);
	if (errno || end == buf || *end) {
		fprintf(stderr, "# fuzz: ignoring %s=%s (not a number)\n", env, buf);
		return def;
	}
	if (set)
		*set = 1;
	return x;
}

/* splitmix64: the seed mixer and the generator of every random choice. */
static inline u64 fz_mix(u64 x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

struct rng {
	u64 s;
};

static inline u64 rnd(struct rng *r)
{
	r->s += 0x9E3779B97F4A7C15ULL;
	return fz_mix(r->s);
}

/* Uniform enough in [0, n); 0 when n is 0. */
static inline u64 rn(struct rng *r, u64 n)
{
	return n ? rnd(r) % n : 0;
}

static inline int chance(struct rng *r, unsigned int one_in)
{
	return rn(r, one_in) == 0;
}

static void cfg_load(void)
{
	static int loaded;
	int set;

	if (loaded)
		return;
	loaded = 1;
	cfg.seconds = cfg_u64("KVPOOL_FUZZ_SECONDS", "kvpool_fuzz_seconds",
			      FZ_SECONDS_DEFAULT, NULL);
	if (cfg.seconds > 7 * 24 * 3600)
		cfg.seconds = 7 * 24 * 3600;
	cfg.workers = cfg_u64("KVPOOL_FUZZ_WORKERS", "kvpool_fuzz_workers",
			      FZ_WORKERS_DEFAULT, NULL);
	if (cfg.workers < 1)
		cfg.workers = 1;
	if (cfg.workers > FZ_MAX_WORKERS)
		cfg.workers = FZ_MAX_WORKERS;
	cfg.kill = !!cfg_u64("KVPOOL_FUZZ_KILL", "kvpool_fuzz_kill", 1, NULL);
	cfg.trace = !!cfg_u64("KVPOOL_FUZZ_TRACE", "kvpool_fuzz_trace", 0, NULL);
	cfg.seed = cfg_u64("KVPOOL_FUZZ_SEED", "kvpool_fuzz_seed", 0, &set);
	if (!set) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		/* Below 2^53 so that it survives any tool that reads it as a double. */
		cfg.seed = fz_mix((u64)ts.tv_sec << 32 ^ (u64)ts.tv_nsec ^
				  (u64)getpid() << 16) >> 11;
	}
}

static u64 mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void sleep_us(unsigned long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- operations ---------------------------------------------------------- */

/* name, weight (per mille, roughly) */
#define FZ_OPS(X) \
	X(OPEN, 25) X(CLOSE, 18) X(DUP, 14) X(JOIN, 50) X(JOIN_BAD, 40) \
	X(ALLOC, 130) X(ALLOC_BAD, 50) X(FREE, 110) X(FREE_BAD, 50) \
	X(INFO, 20) X(SPACE_INFO, 50) X(IOCTL_RAND, 30) X(BADFD, 5) \
	X(MMAP, 45) X(MMAP_BAD, 30) X(MUNMAP, 28) X(MPROTECT, 25) \
	X(MREMAP, 15) X(MADVISE, 15) X(MLOCK, 10) X(WRITE, 80) \
	X(VERIFY, 60) X(TOUCH, 60) X(GUP, 25) X(FORK, 6) X(PEEK, 4) \
	X(PUBLISH, 40) X(PUBLISH_BAD, 15) X(LOOKUP, 40) X(LOOKUP_BAD, 12) \
	X(RELEASE, 35) X(RELEASE_BAD, 12)

#define X(n, w) OP_##n,
enum fz_op { FZ_OPS(X) OP_NR };
#undef X
#define X(n, w) #n,
static const char *const op_name[] = { FZ_OPS(X) };
#undef X
#define X(n, w) w,
static const unsigned int op_weight[] = { FZ_OPS(X) };
#undef X

/* ---- shared memory ------------------------------------------------------- */

#define FZ_NSHARED	8	/* space names every worker uses */
#define FZ_TRACK	4096	/* blocks per shared name in the owner table */
#define FZ_RING		24	/* last ops kept per process */
#define FZ_LINE		320
#define FZ_ALIVE	0x80000000u

struct fz_stat {
	u64 calls, ok, err, skipped;
	u32 errs[128];		/* by errno */
};

struct fz_ring {
	u64 seq;
	char line[FZ_RING][FZ_LINE];
};

struct fz_shm {
	int stop;
	u64 deadline_ns;
	u64 pool_bytes, pool_mask;
	/* FZ_ALIVE | generation, per slot; 0 while the slot is being killed */
	u32 gen_alive[FZ_MAX_WORKERS];
	/* sequence number of the slot's live fork child, 0 when none */
	u32 child_alive[FZ_MAX_WORKERS];
	/*
	 * Who owns block b of the space named shared[n]: space id << 32 |
	 * token (slot, child, generation, file serial), 0 for nobody.  A
	 * record is cleared before the FREE or close that gives the block up;
	 * records of dead processes are ignored (see rec_live()).
	 */
	u64 owner[FZ_NSHARED][FZ_TRACK];
	struct fz_stat stat[OP_NR];
	u64 sigbus, children, children_killed;
	struct fz_ring ring[FZ_MAX_WORKERS][2];
};

static struct fz_shm *sh;

#define LOAD(x)		__atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE(x, v)	__atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
#define ADD(x, v)	__atomic_fetch_add(&(x), (v), __ATOMIC_RELAXED)

/* ---- per-process state ----------------------------------------------------- */

#define FZ_MAX_OFILES	6
#define FZ_MAX_FDS	3
#define FZ_MAX_MAPS	12
#define FZ_IDS_MAX	(KVPOOL_MAX_BATCH + 1024)
#define ID_EMPTY	0xffffffffu
#define FZ_NHASH	48	/* hashes per space: few, so that workers share them */
#define FZ_PBATCH	8	/* entries per PUBLISH, hashes per LOOKUP, at most */

/* id -> pattern seed of the data written there (0: not written/unknown) */
struct idmap {
	u32 *key, *val;
	u32 cap, n;
};

/* An open file of /dev/kvpool (one or more fds: dup). */
struct ofile {
	int used;
	int inherited;		/* in a fork child: the parent's file */
	u32 serial;
	int fds[FZ_MAX_FDS];
	int nfds;
	int acc;		/* O_RDWR, O_RDONLY, O_WRONLY */
	int as_user;		/* opened with euid uid, egid gid (else as root) */
	uid_t uid;
	gid_t gid;
	int joined;
	int name_slot;		/* index into the shared names, or -1 */
	char name[KVPOOL_NAME_MAX];
	u32 space_id;
	u64 block_bytes, nr_blocks, map_bytes;
	struct idmap owned;
	/* reader references: id -> hash number << 20 | count */
	struct idmap refs;
	u64 nrefs;		/* sum of the counts */
	u32 hblk[FZ_NHASH];	/* hash number -> block + 1 it holds refs on, 0 */
};

/* A mapped range of a space; a vma or part of one. */
struct kmap {
	int used;
	int inh;		/* in a fork child: same address and prot in the parent */
	char *addr;
	u64 len;
	u64 off;		/* offset in the space of addr */
	int prot;
	int acc;
	int locked;		/* VM_LOCKED may be set */
	u32 space_id;
};

struct worker {
	int slot;
	u32 gen;
	int child;
	u32 childseq;		/* in a child: its number */
	u32 next_childseq;
	pid_t parent;
	u64 opno, max_ops;
	struct rng rng;
	u32 ps;
	u64 pool_mask, pool_bytes;
	unsigned int nr_nodes;
	char names[FZ_NSHARED][KVPOOL_NAME_MAX];
	u64 last_bb[FZ_NSHARED];
	struct ofile of[FZ_MAX_OFILES];
	struct kmap map[FZ_MAX_MAPS];
	struct {
		u32 id;
		u64 bytes;
	} kb[32];		/* bytes of a space known to be backed */
	unsigned int kb_next;
	u32 serial_next, priv_next;
	gid_t groups[64];
	int ngroups;
	char *scr;		/* FZ_SCR pages read-write ... */
	char *guard;		/* ... then a PROT_NONE page */
	u32 *ids;		/* scr + ps: room for FZ_IDS_MAX ids */
	char *ro, *ro_rw;	/* one memfd mapped read-only and read-write */
	size_t scr_len;
	u32 *tmp;		/* FZ_IDS_MAX ids */
	int kind;
	int depth;
	int op_ok;
	char line[FZ_LINE];
	size_t line_len;
};

/* ---- output -------------------------------------------------------------- */

/* One write(2) per message, so that lines of processes do not interleave. */
static void __attribute__((format(printf, 1, 2))) say(const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	if (buf[n - 1] != '\n')
		buf[n++] = '\n';
	if (write(STDOUT_FILENO, buf, n) < 0)
		return;
}

static const char *ename(int e)
{
	static char buf[16];

	switch (e) {
	case 0: return "0";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EINTR: return "EINTR";
	case ENXIO: return "ENXIO";
	case E2BIG: return "E2BIG";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case ENOTTY: return "ENOTTY";
	case ENOSPC: return "ENOSPC";
	case ESPIPE: return "ESPIPE";
	case EOVERFLOW: return "EOVERFLOW";
	case EBADFD: return "EBADFD";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	}
	snprintf(buf, sizeof(buf), "E%d", e);
	return buf;
}

static void note(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note(struct worker *w, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (w->line_len >= sizeof(w->line) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(w->line + w->line_len, sizeof(w->line) - w->line_len, fmt, ap);
	va_end(ap);
	if (n > 0)
		w->line_len += n;
	if (w->line_len > sizeof(w->line) - 1)
		w->line_len = sizeof(w->line) - 1;
}

static struct fz_ring *my_ring(struct worker *w)
{
	return &sh->ring[w->slot][w->child ? 1 : 0];
}

static void dump_ring(struct fz_ring *ring, const char *who)
{
	u64 seq = LOAD(ring->seq), i;

	say("#   last ops of %s (oldest first):", who);
	for (i = seq > FZ_RING ? seq - FZ_RING : 0; i < seq; i++)
		say("#     %s", ring->line[i % FZ_RING]);
}

static void __attribute__((noreturn, format(printf, 2, 3)))
fz_fail(struct worker *w, const char *fmt, ...)
{
	char msg[1024], who[32];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	say("# fuzz: FAIL in %s\n#   %s\n#   seed %llu, replay with KVPOOL_FUZZ_SEED=%llu",
	    w->line, msg, (unsigned long long)cfg.seed,
	    (unsigned long long)cfg.seed);
	snprintf(who, sizeof(who), "this process (pid %d)", (int)getpid());
	dump_ring(my_ring(w), who);
	if (w->child)
		dump_ring(&sh->ring[w->slot][0], "its parent");
	else if (LOAD(sh->ring[w->slot][1].seq))
		dump_ring(&sh->ring[w->slot][1], "its last fork child");
	_exit(1);
}

/* The op found nothing to work on. */
static void skip(struct worker *w, const char *why)
{
	note(w, " skipped: %s", why);
	w->op_ok = 2;
}

static void run_kind(struct worker *w, int kind, struct rng *r);
static void instead(struct worker *w, struct rng *r, int kind, const char *why);

/* ---- expected results ---------------------------------------------------- */

struct fz_exp {
	u64 allow[2];		/* errno bits, errno < 128 */
	int must_fail;
};

static void ex_add(struct fz_exp *e, int err)
{
	e->allow[err >> 6] |= 1ULL << (err & 63);
}

/* A defect: the call must fail, with this errno or another defect's. */
static void ex_defect(struct fz_exp *e, int err)
{
	ex_add(e, err);
	e->must_fail = 1;
}

static int ex_has(const struct fz_exp *e, int err)
{
	return err > 0 && err < 128 && ((e->allow[err >> 6] >> (err & 63)) & 1);
}

static const char *ex_str(const struct fz_exp *e)
{
	static char buf[256];
	size_t n = 0;
	int i;

	buf[0] = 0;
	for (i = 1; i < 128 && n < sizeof(buf) - 16; i++)
		if (ex_has(e, i))
			n += snprintf(buf + n, sizeof(buf) - n, "%s%s",
				      n ? " " : "", ename(i));
	return buf;
}

/* Check @ret (0 or -errno) against @e; returns @ret. */
static int fz_expect(struct worker *w, int ret, const struct fz_exp *e)
{
	note(w, " -> %s", ret ? ename(-ret) : "0");
	w->op_ok = !ret;
	if (ret < 0 && ret > -128)
		ADD(sh->stat[w->kind].errs[-ret], 1);
	if (!ret && e->must_fail)
		fz_fail(w, "succeeded, but its arguments must make it fail with one of {%s}",
			ex_str(e));
	if (ret && !ex_has(e, -ret))
		fz_fail(w, "failed with %s, which is not among the errnos documented for these arguments {%s}",
			ename(-ret), ex_str(e));
	return ret;
}

static int sys_ret(long r)
{
	return r < 0 ? -errno : 0;
}

static int fz_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

/* ---- memory probes --------------------------------------------------------- */

static sigjmp_buf fz_env;
static volatile sig_atomic_t fz_armed, fz_sig;
static void *volatile fz_si_addr;

static void fz_handler(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (fz_armed) {
		fz_armed = 0;
		fz_sig = sig;
		fz_si_addr = si->si_addr;
		siglongjmp(fz_env, 1);
	}
	/* Not expected: die of it, the main process reports the crash. */
	signal(sig, SIG_DFL);
}

static void fz_install_handlers(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fz_handler;
	/* No mask to restore: siglongjmp leaves the handler with sigsetjmp(, 0). */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGSEGV, &sa, NULL);
}

#define FZ_TAG(space)	(0x4b56504f00000000ULL | (u32)(space))	/* "KVPO" */
#define FZ_STEP		0x9E3779B97F4A7C15ULL

static u64 pat_base(u32 pat, u32 blk, u64 pg)
{
	return fz_mix((u64)pat << 32 ^ blk ^ pg << 40);
}

static __attribute__((noinline)) void fill_words(volatile u64 *p, size_t n,
						 u64 tag, u64 base)
{
	size_t i;

	p[0] = tag;
	for (i = 1; i < n; i++)
		p[i] = base + i * FZ_STEP;
}

static __attribute__((noinline)) long check_words(const volatile u64 *p,
						  size_t n, u64 tag, u64 base,
						  u64 *got)
{
	size_t i;

	if (p[0] != tag) {
		*got = p[0];
		return 0;
	}
	for (i = 1; i < n; i++) {
		if (p[i] != base + i * FZ_STEP) {
			*got = p[i];
			return i;
		}
	}
	return -1;
}

static __attribute__((noinline)) void copy_bytes(volatile char *d,
						 const volatile char *s, size_t n)
{
	while (n--)
		*d++ = *s++;
}

/* 0, or the signal the access raised. */
static int probe_fill(u64 *p, size_t n, u64 tag, u64 base)
{
	fz_sig = 0;
	if (sigsetjmp(fz_env, 0))
		return fz_sig;
	fz_armed = 1;
	fill_words(p, n, tag, base);
	fz_armed = 0;
	return 0;
}

static int probe_check(const u64 *p, size_t n, u64 tag, u64 base, long *bad,
		       u64 *got)
{
	fz_sig = 0;
	if (sigsetjmp(fz_env, 0))
		return fz_sig;
	fz_armed = 1;
	*bad = check_words(p, n, tag, base, got);
	fz_armed = 0;
	return 0;
}

static int probe_copy(void *d, const void *s, size_t n)
{
	fz_sig = 0;
	if (sigsetjmp(fz_env, 0))
		return fz_sig;
	fz_armed = 1;
	copy_bytes(d, s, n);
	fz_armed = 0;
	return 0;
}

/* ---- id maps ------------------------------------------------------------- */

static u32 id_hash(u32 id)
{
	return id * 2654435761u;
}

static void idm_free(struct idmap *m)
{
	free(m->key);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

static long idm_find(const struct idmap *m, u32 id)
{
	u32 mask, i;

	if (!m->cap)
		return -1;
	mask = m->cap - 1;
	for (i = id_hash(id) & mask; m->key[i] != ID_EMPTY; i = (i + 1) & mask)
		if (m->key[i] == id)
			return i;
	return -1;
}

static void idm_put(struct idmap *m, u32 id, u32 val);

static void idm_grow(struct idmap *m)
{
	struct idmap old = *m;
	u32 i;

	m->cap = old.cap ? old.cap * 2 : 64;
	m->n = 0;
	m->key = malloc(m->cap * sizeof(u32));
	m->val = malloc(m->cap * sizeof(u32));
	if (!m->key || !m->val) {
		say("# fuzz: out of memory");
		_exit(3);
	}
	memset(m->key, 0xff, m->cap * sizeof(u32));
	for (i = 0; i < old.cap; i++)
		if (old.key[i] != ID_EMPTY)
			idm_put(m, old.key[i], old.val[i]);
	free(old.key);
	free(old.val);
}

static void idm_put(struct idmap *m, u32 id, u32 val)
{
	u32 mask, i;

	if ((m->n + 1) * 2 > m->cap)
		idm_grow(m);
	mask = m->cap - 1;
	for (i = id_hash(id) & mask; m->key[i] != ID_EMPTY; i = (i + 1) & mask)
		if (m->key[i] == id)
			break;
	if (m->key[i] == ID_EMPTY)
		m->n++;
	m->key[i] = id;
	m->val[i] = val;
}

static void idm_del(struct idmap *m, u32 id)
{
	long at = idm_find(m, id);
	u32 mask = m->cap - 1, i, j, h;

	if (at < 0)
		return;
	i = at;
	/* Backward-shift deletion keeps every probe chain unbroken. */
	for (j = (i + 1) & mask; m->key[j] != ID_EMPTY; j = (j + 1) & mask) {
		h = id_hash(m->key[j]) & mask;
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			m->key[i] = m->key[j];
			m->val[i] = m->val[j];
			i = j;
		}
	}
	m->key[i] = ID_EMPTY;
	m->n--;
}

/* Index of some used slot, or -1. */
static long idm_pick(const struct idmap *m, u64 r)
{
	u32 i;

	if (!m->n)
		return -1;
	for (i = r & (m->cap - 1); m->key[i] == ID_EMPTY; i = (i + 1) & (m->cap - 1))
		;
	return i;
}

/* ---- the owner table ------------------------------------------------------- */

static u32 fz_token(struct worker *w, struct ofile *of)
{
	u32 serial = w->child ? w->childseq : of->serial;

	return (u32)(w->slot + 1) << 28 | (u32)!!w->child << 27 |
	       (w->gen & 0x7ff) << 16 | (serial & 0xffff);
}

static int rec_live(u64 rec)
{
	u32 lo = (u32)rec, ga, ca;
	int s = (int)((lo >> 28) & 15) - 1;

	if (!rec || s < 0 || s >= FZ_MAX_WORKERS)
		return 0;
	ga = LOAD(sh->gen_alive[s]);
	if (!(ga & FZ_ALIVE) || (ga & 0x7ff) != ((lo >> 16) & 0x7ff))
		return 0;
	if (lo & (1u << 27)) {
		ca = LOAD(sh->child_alive[s]);
		return ca && (ca & 0xffff) == (lo & 0xffff);
	}
	return 1;
}

static void rec_str(u64 rec, char *buf, size_t len)
{
	u32 lo = (u32)rec;

	snprintf(buf, len, "space %u, worker slot %d gen %u%s file #%u%s",
		 (u32)(rec >> 32), (int)((lo >> 28) & 15) - 1, (lo >> 16) & 0x7ff,
		 (lo & (1u << 27)) ? " fork child" : "", lo & 0xffff,
		 rec_live(rec) ? "" : " (dead)");
}

static void claim(struct worker *w, struct ofile *of, u32 id)
{
	u64 *slot, old, rec;
	char a[128], b[128];

	if (of->name_slot < 0 || id >= FZ_TRACK)
		return;
	slot = &sh->owner[of->name_slot][id];
	rec = (u64)of->space_id << 32 | fz_token(w, of);
	old = LOAD(*slot);
	do {
		if (old && (u32)(old >> 32) == of->space_id && rec_live(old)) {
			rec_str(old, a, sizeof(a));
			rec_str(rec, b, sizeof(b));
			fz_fail(w, "block %u of space %u (%s) handed to [%s] while [%s] owns it",
				id, of->space_id, of->name, b, a);
		}
	} while (!__atomic_compare_exchange_n(slot, &old, rec, 0, __ATOMIC_SEQ_CST,
					      __ATOMIC_SEQ_CST));
}

static void unclaim(struct worker *w, struct ofile *of, u32 id)
{
	u64 *slot, rec;

	if (of->name_slot < 0 || id >= FZ_TRACK)
		return;
	slot = &sh->owner[of->name_slot][id];
	rec = (u64)of->space_id << 32 | fz_token(w, of);
	__atomic_compare_exchange_n(slot, &rec, 0, 0, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
}

/* Drop every record whose token matches @mask/@want (main, or a parent). */
static void clear_records(u32 mask, u32 want)
{
	int n, i;

	for (n = 0; n < FZ_NSHARED; n++) {
		for (i = 0; i < FZ_TRACK; i++) {
			u64 old = LOAD(sh->owner[n][i]);

			if (old && ((u32)old & mask) == want)
				__atomic_compare_exchange_n(&sh->owner[n][i], &old, 0, 0,
							    __ATOMIC_SEQ_CST,
							    __ATOMIC_SEQ_CST);
		}
	}
}

/* ---- files, mappings, known backing --------------------------------------- */

static int of_index(struct worker *w, struct ofile *of)
{
	return (int)(of - w->of);
}

#define PICK_ANY	0
#define PICK_JOINED	1
#define PICK_UNJOINED	2
#define PICK_MUT	4	/* not a parent's file (in a fork child), open for writing */
#define PICK_OWNS	8	/* owns blocks */
#define PICK_WRITE	16	/* open for writing (mutating ioctls need FMODE_WRITE) */

static struct ofile *of_pick(struct worker *w, u64 r, int how)
{
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *of = &w->of[(r + k) % FZ_MAX_OFILES];

		if (!of->used)
			continue;
		if ((how & PICK_JOINED) && !of->joined)
			continue;
		if ((how & PICK_UNJOINED) && of->joined)
			continue;
		if ((how & PICK_MUT) && (of->inherited || of->acc == O_RDONLY))
			continue;
		if ((how & PICK_OWNS) && !of->owned.n)
			continue;
		if ((how & PICK_WRITE) && of->acc == O_RDONLY)
			continue;
		return of;
	}
	return NULL;
}

static int of_fd(struct ofile *of, struct rng *r)
{
	return of->fds[rn(r, of->nfds)];
}

static struct ofile *of_new(struct worker *w, int acc)
{
	int i, fd;

	for (i = 0; i < FZ_MAX_OFILES; i++) {
		struct ofile *of = &w->of[i];

		if (of->used)
			continue;
		fd = open(KV_DEV, acc | O_CLOEXEC);
		if (fd < 0)
			fz_fail(w, "open %s: %s", KV_DEV, strerror(errno));
		memset(of, 0, sizeof(*of));
		of->used = 1;
		of->serial = ++w->serial_next;
		of->fds[0] = fd;
		of->nfds = 1;
		of->acc = acc;
		of->name_slot = -1;
		return of;
	}
	return NULL;
}

static void become(struct worker *w, uid_t uid, gid_t gid);
static void unbecome(struct worker *w);

/*
 * A file opened with euid @uid and egid @gid: the module fixes its rights
 * at open (f_cred), so it acts as that user in whoever's hands.  The
 * device is root's: CAP_DAC_OVERRIDE (still permitted, the saved uid is 0)
 * stands in for membership of its group, and the module never asks for it.
 */
static struct ofile *of_new_as(struct worker *w, int acc, uid_t uid, gid_t gid)
{
	struct ofile *of;
	int ret;

	become(w, uid, gid);
	ret = kv_dac_override(1);
	if (ret)
		fz_fail(w, "CAP_DAC_OVERRIDE as %u: %s", uid, strerror(-ret));
	of = of_new(w, acc);
	unbecome(w);
	if (of) {
		of->as_user = 1;
		of->uid = uid;
		of->gid = gid;
	}
	return of;
}

static void of_unclaim_all(struct worker *w, struct ofile *of)
{
	u32 i;

	if (of->inherited || of->name_slot < 0)
		return;
	for (i = 0; i < of->owned.cap; i++)
		if (of->owned.key[i] != ID_EMPTY)
			unclaim(w, of, of->owned.key[i]);
}

/* Close fd number @idx of @of; the last one releases the file. */
static void of_close_fd(struct worker *w, struct ofile *of, int idx)
{
	int fd = of->fds[idx];

	if (of->nfds == 1)
		of_unclaim_all(w, of);
	if (close(fd))
		fz_fail(w, "close(%d): %s", fd, strerror(errno));
	of->fds[idx] = of->fds[--of->nfds];
	if (!of->nfds) {
		idm_free(&of->owned);
		idm_free(&of->refs);
		memset(of, 0, sizeof(*of));
	}
}

/* Some file to work on: open one when there is none. */
static struct ofile *of_any(struct worker *w, u64 r, int how)
{
	struct ofile *of = of_pick(w, r, how);

	if (!of)
		of = of_pick(w, r, PICK_MUT);
	if (!of)
		of = of_new(w, O_RDWR);
	if (!of) {		/* all slots are a parent's files */
		of = &w->of[r % FZ_MAX_OFILES];
		while (of->nfds)
			of_close_fd(w, of, 0);
		of = of_new(w, O_RDWR);
	}
	return of;
}

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

static u64 kb_get(struct worker *w, u32 id)
{
	unsigned int i;

	for (i = 0; i < 32; i++)
		if (w->kb[i].id == id)
			return w->kb[i].bytes;
	return 0;
}

/* A live space never gives back a page: what was backed stays backed. */
static void kb_raise(struct worker *w, u32 id, u64 bytes)
{
	unsigned int i;

	for (i = 0; i < 32; i++) {
		if (w->kb[i].id == id) {
			if (bytes > w->kb[i].bytes)
				w->kb[i].bytes = bytes;
			return;
		}
	}
	i = w->kb_next++ % 32;
	w->kb[i].id = id;
	w->kb[i].bytes = bytes;
}

static struct kmap *map_new(struct worker *w)
{
	int i;

	for (i = 0; i < FZ_MAX_MAPS; i++)
		if (!w->map[i].used)
			return &w->map[i];
	return NULL;
}

static int map_free_slots(struct worker *w)
{
	int i, n = 0;

	for (i = 0; i < FZ_MAX_MAPS; i++)
		n += !w->map[i].used;
	return n;
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

/* A mapping of space @id covering [off, off + len) with @need_prot. */
static struct kmap *map_cover(struct worker *w, u32 id, u64 off, u64 len,
			      int need_prot, u64 r)
{
	int k;

	for (k = 0; k < FZ_MAX_MAPS; k++) {
		struct kmap *m = &w->map[(r + k) % FZ_MAX_MAPS];

		if (m->used && m->space_id == id &&
		    (m->prot & need_prot) == need_prot && off >= m->off &&
		    off + len <= m->off + m->len)
			return m;
	}
	return NULL;
}

static char *map_at(struct kmap *m, u64 off)
{
	return m->addr + (off - m->off);
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

/* ---- pointers -------------------------------------------------------------- */

enum {
	P_GOOD,		/* scratch memory */
	P_MISALIGN,	/* scratch memory, not naturally aligned */
	P_KVOWN,	/* a page of a block this process owns, mapped read-write */
	P_RO,		/* read-only memory (memfd alias) */
	P_KVRO,		/* a backed page of a read-only kvpool mapping */
	P_NULL,
	P_LOW,		/* below mmap_min_addr */
	P_KERNEL,
	P_NONCANON,
	P_GUARD,	/* a PROT_NONE page */
	P_PARTIAL,	/* runs from read-write memory into a PROT_NONE page */
	P_NR
};

static const char *const p_name[P_NR] = {
	"good", "misaligned", "in-own-block", "read-only", "kvpool-read-only",
	"NULL", "low", "kernel", "non-canonical", "PROT_NONE", "half-mapped",
};

static int p_readable(int k)
{
	return k <= P_KVRO;
}

static int p_writable(int k)
{
	return k <= P_KVOWN;
}

static int p_fault_kind(struct rng *r)
{
	static const int k[] = { P_NULL, P_LOW, P_KERNEL, P_NONCANON, P_GUARD,
				 P_PARTIAL };

	return k[rn(r, 6)];
}

/* A bogus pointer of kind @k for an object of @len bytes. */
static char *bogus(struct worker *w, struct rng *r, int k, size_t len)
{
	switch (k) {
	case P_NULL:
		return NULL;
	case P_LOW:
		return (char *)(uintptr_t)(0x1000 + rn(r, 0xe000));
	case P_KERNEL:
		return (char *)(uintptr_t)(0xffff888000000000ULL + rn(r, 1ULL << 30) * 8);
	case P_NONCANON:
		return (char *)(uintptr_t)(0x8000000000000000ULL |
					   (rnd(r) & 0x7fffffffffffULL));
	case P_GUARD:
		return w->guard + rn(r, w->ps / 2);
	case P_PARTIAL:
		/* Starts 1..len-1 bytes before the PROT_NONE page. */
		return w->guard - (len > 1 ? 1 + rn(r, len - 1) : 1);
	}
	return NULL;
}

/*
 * Where an object of @len bytes goes in a page of a block this process
 * owns (not a parent's), at page offset [lo, ps): lo >= 8 keeps the page's
 * tag, and structs (below 256) and ids arrays (from 256) of one call never
 * overlap.  The block's data is unknown from now on.
 */
#define SPOT_STRUCT	8
#define SPOT_IDS	256

static char *own_spot(struct worker *w, struct rng *r, size_t len, size_t lo)
{
	size_t hi = lo == SPOT_STRUCT ? SPOT_IDS : w->ps;
	int k;

	if (lo + len > hi)
		return NULL;
	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *of = &w->of[(r->s + k) % FZ_MAX_OFILES];
		struct kmap *m;
		long at;
		u64 off;

		if (!of->used || of->inherited || !of->joined)
			continue;
		at = idm_pick(&of->owned, rnd(r));
		if (at < 0)
			continue;
		off = (u64)of->owned.key[at] * of->block_bytes;
		m = map_cover(w, of->space_id, off, w->ps, PROT_READ | PROT_WRITE,
			      rnd(r));
		if (!m)
			continue;
		of->owned.val[at] = 0;
		return map_at(m, off) + lo + 4 * rn(r, (hi - lo - len) / 4 + 1);
	}
	return NULL;
}

/* A backed page of a read-only mapping; no writes happen through it. */
static char *kvro_spot(struct worker *w, struct rng *r, size_t len)
{
	int k;

	for (k = 0; k < FZ_MAX_MAPS; k++) {
		struct kmap *m = &w->map[(r->s + k) % FZ_MAX_MAPS];
		u64 backed, end, off;

		if (!m->used || m->prot != PROT_READ)
			continue;
		backed = kb_get(w, m->space_id);
		end = m->off + m->len < backed ? m->off + m->len : backed;
		if (end <= m->off)
			continue;
		off = m->off + rn(r, (end - m->off) / w->ps) * w->ps;
		return map_at(m, off) + 8 + rn(r, w->ps - 8 - len);
	}
	return NULL;
}

/*
 * Put a struct of @len bytes where a pointer of kind *@k points and return
 * that pointer.  Kinds that need what is not there fall back to P_GOOD.
 */
static char *place_struct(struct worker *w, struct rng *r, int *k,
			  const void *src, size_t len)
{
	char *p;

	switch (*k) {
	case P_MISALIGN:
		p = w->scr + 1 + rn(r, 7);
		memcpy(p, src, len);
		return p;
	case P_KVOWN:
		p = own_spot(w, r, len, SPOT_STRUCT);
		if (!p)
			break;
		if (probe_copy(p, src, len))
			fz_fail(w, "fault writing a struct into an owned block at %p", p);
		return p;
	case P_RO:
		memcpy(w->ro_rw, src, len);
		return w->ro;
	case P_KVRO:
		p = kvro_spot(w, r, len);
		if (!p)
			break;
		return p;
	case P_GOOD:
		break;
	default:
		return bogus(w, r, *k, len);
	}
	*k = P_GOOD;
	p = w->scr + 8 * rn(r, 8);
	memcpy(p, src, len);
	return p;
}

/* Same for an ids array of @count entries (content @src may be NULL). */
static u32 *place_ids(struct worker *w, struct rng *r, int *k, const u32 *src,
		      u32 count)
{
	size_t len = (size_t)count * 4;
	char *p;

	if (count > FZ_IDS_MAX - 4 && p_readable(*k))
		*k = P_GOOD;	/* too many for anything but the big buffer */
	switch (*k) {
	case P_MISALIGN:
		p = (char *)w->ids + 1 + rn(r, 3);
		if (src)
			memcpy(p, src, len);
		return (u32 *)p;
	case P_KVOWN:
		p = own_spot(w, r, len, SPOT_IDS);
		if (!p)
			break;
		if (src && probe_copy(p, src, len))
			fz_fail(w, "fault writing ids into an owned block at %p", p);
		return (u32 *)p;
	case P_RO:	/* the page after the one structs use */
		if (len > w->scr_len - w->ps)
			break;
		if (src)
			memcpy(w->ro_rw + w->ps, src, len);
		return (u32 *)(w->ro + w->ps);
	case P_KVRO:
		p = kvro_spot(w, r, len);
		if (!p)
			break;
		return (u32 *)p;
	case P_GOOD:
		break;
	case P_PARTIAL:
		if (count < 2)
			return (u32 *)(w->guard - 2);
		p = w->guard - 4 * (1 + rn(r, count - 1));
		if (src)
			memcpy(p, src, w->guard - p);
		return (u32 *)p;
	default:
		return (u32 *)bogus(w, r, *k, len);
	}
	*k = P_GOOD;
	if (src)
		memcpy(w->ids, src, len);
	return w->ids;
}

/* ---- credentials ------------------------------------------------------------ */

static void become(struct worker *w, uid_t uid, gid_t gid)
{
	if (setegid(gid) || seteuid(uid))
		fz_fail(w, "seteuid(%u)/setegid(%u): %s", uid, gid, strerror(errno));
}

static void unbecome(struct worker *w)
{
	if (seteuid(0) || setegid(0))
		fz_fail(w, "back to euid 0: %s", strerror(errno));
	/* A credential change clears the parent-death signal: set it again. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != w->parent)
		_exit(0);
}

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

/* ---- SPACE_OPEN ---------------------------------------------------------- */

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
static void so_expect(struct worker *w, const struct kvpool_space_open *so,
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

static void op_join(struct worker *w, struct rng *r, int bad)
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
	switch (rn(r, 25)) {
	case 0:
		sk = P_RO;
		break;
	case 1:
		sk = P_KVOWN;
		break;
	case 2:
		sk = P_MISALIGN;
		break;
	}
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
	ret = fz_ioctl(fd, KVPOOL_IOC_SPACE_OPEN, arg);
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

/* ---- ALLOC and FREE ------------------------------------------------------- */

static void check_my_blocks(struct worker *w, struct ofile *of, const char *why)
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

static u32 huge_count(struct rng *r)
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

static void op_free(struct worker *w, struct rng *r, int bad);

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
static struct ofile *of_with_refs(struct worker *w, u64 r)
{
	int k;

	for (k = 0; k < FZ_MAX_OFILES; k++) {
		struct ofile *of = &w->of[(r + k) % FZ_MAX_OFILES];

		if (of->used && !of->inherited && of->joined && of->refs.n)
			return of;
	}
	return NULL;
}

static void op_alloc(struct worker *w, struct rng *r, int bad)
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
	switch (rn(r, 20)) {
	case 0:
		sk = P_RO;
		break;
	case 1:
		sk = P_KVOWN;
		break;
	case 2:
		sk = P_MISALIGN;
		break;
	}
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
	if (unjoined) {
		struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED | PICK_WRITE);

		if (u)
			of = u;
	}
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
	ret = fz_ioctl(fd, KVPOOL_IOC_ALLOC, arg);
	fz_expect(w, ret, &e);
	if (!ret)
		alloc_took(w, of, at, b.count);
	else if (of->joined && (ret == -EFAULT || chance(r, 4)))
		check_my_blocks(w, of, "after a failed ALLOC");
}

/* Up to @max distinct ids this file owns, into w->tmp; returns how many. */
static u32 pick_owned(struct worker *w, struct rng *r, struct ofile *of, u32 max)
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
static u32 foreign_id(struct worker *w, struct rng *r, struct ofile *of)
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

static void op_free(struct worker *w, struct rng *r, int bad)
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
	if (unjoined) {
		struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED | PICK_WRITE);

		if (u)
			of = u;
	}
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
	ret = fz_ioctl(fd, KVPOOL_IOC_FREE, arg);
	fz_expect(w, ret, &e);
	if (!ret) {
		for (i = 0; i < cnt; i++)
			idm_del(&of->owned, w->tmp[i]);
	} else if (of->joined && (chance(r, 4) || ret == -EFAULT)) {
		check_my_blocks(w, of, "after a failed FREE");
	}
}

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

static void op_publish(struct worker *w, struct rng *r, int bad)
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
	if (unjoined) {
		struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED | PICK_WRITE);

		if (u)
			of = u;
	}
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
	ret = fz_ioctl(fd, KVPOOL_IOC_PUBLISH, arg);
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

static void op_lookup(struct worker *w, struct rng *r, int bad)
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
	if (unjoined) {
		struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED | PICK_WRITE);

		if (u)
			of = u;
	}
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
	ret = fz_ioctl(fd, KVPOOL_IOC_LOOKUP, arg);
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

static void op_release(struct worker *w, struct rng *r, int bad)
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
	if (unjoined) {
		struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED | PICK_WRITE);

		if (u)
			of = u;
	}
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
	ret = fz_ioctl(fd, KVPOOL_IOC_RELEASE, arg);
	fz_expect(w, ret, &e);
	if (!ret)
		for (i = 0; i < cnt; i++)
			ref_drop(of, ids[i]);
	check_refs(w, of, ret ? "after a failed RELEASE" : "after RELEASE");
}

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

static void op_info(struct worker *w, struct rng *r)
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
	ret = fz_ioctl(fd, KVPOOL_IOC_INFO, arg);
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

static void op_space_info(struct worker *w, struct rng *r)
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
	ret = fz_ioctl(fd, KVPOOL_IOC_SPACE_INFO, arg);
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

static void op_ioctl_rand(struct worker *w, struct rng *r)
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
		ret = fz_ioctl(fd, cmd, arg);
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
	ret = fz_ioctl(fd, cmd, arg);
	fz_expect(w, ret, &e);
}

static void op_badfd(struct worker *w, struct rng *r)
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
		ret = fz_ioctl(fd, KVPOOL_IOC_INFO, &info);
	} else {
		note(w, " mmap(fd %d)", fd);
		p = mmap(NULL, w->ps, PROT_READ, MAP_SHARED, fd, 0);
		ret = p == MAP_FAILED ? -errno : 0;
	}
	fz_expect(w, ret, &e);
}

/* ---- files ------------------------------------------------------------------ */

static void op_open(struct worker *w, struct rng *r)
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

static void op_close(struct worker *w, struct rng *r)
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

static void op_dup(struct worker *w, struct rng *r)
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

/* ---- mappings ------------------------------------------------------------------ */

static void map_drop(struct worker *w, struct kmap *m)
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

static void op_mmap(struct worker *w, struct rng *r, int bad)
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

static void op_munmap(struct worker *w, struct rng *r)
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

static void op_mprotect(struct worker *w, struct rng *r)
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

static void op_mremap(struct worker *w, struct rng *r)
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

static void op_madvise(struct worker *w, struct rng *r)
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

static void op_mlock(struct worker *w, struct rng *r)
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

static void op_write(struct worker *w, struct rng *r)
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

static void op_verify(struct worker *w, struct rng *r)
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


static void op_touch(struct worker *w, struct rng *r)
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

static void op_gup(struct worker *w, struct rng *r)
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

/* ---- sysfs and debugfs ---------------------------------------------------- */

static void op_peek(struct worker *w, struct rng *r)
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
static void instead(struct worker *w, struct rng *r, int kind, const char *why)
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

static void __attribute__((noreturn)) worker_main(int slot, u32 gen)
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

/* ---- the main process ---------------------------------------------------------- */

struct slot {
	pid_t pid;
	u32 gen;
	int killing;
};

static struct slot slots[FZ_MAX_WORKERS];
static int failures;

static void spawn(int s)
{
	pid_t pid, me = getpid();

	slots[s].gen++;
	slots[s].killing = 0;
	STORE(sh->child_alive[s], 0);
	STORE(sh->gen_alive[s], FZ_ALIVE | (slots[s].gen & 0x7ff));
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		say("# fuzz: fork: %s", strerror(errno));
		failures++;
		return;
	}
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != me)
			_exit(0);
		worker_main(s, slots[s].gen);
	}
	setpgid(pid, pid);
	slots[s].pid = pid;
}

/* A child of ours ended: a worker, or an orphaned fork child (ignored). */
static void reaped(pid_t pid, int st)
{
	int s;
	char who[48];

	for (s = 0; s < FZ_MAX_WORKERS; s++) {
		if (slots[s].pid != pid)
			continue;
		slots[s].pid = 0;
		if (slots[s].killing)
			return;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			return;
		failures++;
		STORE(sh->stop, 1);
		if (WIFSIGNALED(st)) {
			say("# fuzz: FAIL: worker w%d.%u (pid %d) died of signal %d",
			    s, slots[s].gen, (int)pid, WTERMSIG(st));
			snprintf(who, sizeof(who), "w%d.%u", s, slots[s].gen);
			dump_ring(&sh->ring[s][0], who);
			dump_ring(&sh->ring[s][1], "its last fork child");
		} else {
			say("# fuzz: worker w%d.%u (pid %d) failed (status %d)", s,
			    slots[s].gen, (int)pid, WEXITSTATUS(st));
		}
		return;
	}
}

static void reap_some(void)
{
	pid_t pid;
	int st;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
		reaped(pid, st);
}

/* Print where a process is stuck (root reads /proc/PID/stack). */
static void show_stuck(pid_t pid)
{
	char path[64], buf[4096];

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	if (read_file(path, buf, sizeof(buf)) >= 0)
		say("#   pid %d wchan %s", (int)pid, buf);
	snprintf(path, sizeof(path), "/proc/%d/stack", (int)pid);
	if (read_file(path, buf, sizeof(buf)) >= 0)
		say("#   pid %d stack:\n%s", (int)pid, buf);
}

/* SIGKILL worker @s and its fork child; wait until all of them are gone. */
static int kill_slot(int s)
{
	pid_t pgid = slots[s].pid;
	u64 t0 = mono_ns();

	if (!pgid)
		return 0;
	slots[s].killing = 1;
	STORE(sh->gen_alive[s], 0);	/* its owner records die now */
	STORE(sh->child_alive[s], 0);
	kill(-pgid, SIGKILL);
	kill(pgid, SIGKILL);
	for (;;) {
		reap_some();
		if (kill(-pgid, 0) && errno == ESRCH && !slots[s].pid)
			break;
		if (mono_ns() - t0 > 30ULL * 1000000000ULL) {
			say("# fuzz: FAIL: worker w%d.%u (pgid %d) did not die within 30 s of SIGKILL",
			    s, slots[s].gen, (int)pgid);
			show_stuck(pgid);
			failures++;
			return -1;
		}
		sleep_us(1000);
	}
	clear_records(0xf0000000u, (u32)(s + 1) << 28);
	return 0;
}

FIXTURE(fuzz) {
	__u64 free0, spaces0, held0, pool0;
};

FIXTURE_SETUP(fuzz)
{
	if (access(KV_DEV, R_OK | W_OK))
		SKIP(return, "%s: %s", KV_DEV, strerror(errno));
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
	ASSERT_EQ(0, sysfs_u64("held_bytes", &self->held0));
	ASSERT_EQ(0, sysfs_u64("pool_bytes", &self->pool0));
	ASSERT_KV_CHECK_OK();
}

FIXTURE_TEARDOWN(fuzz)
{
}

TEST_F_TIMEOUT(fuzz, random_ops, FZ_TIMEOUT_DEFAULT)
{
	struct kvpool_info info;
	struct rng mr;
	u64 t0, t_end, next_kill, calls = 0, kills = 0, secs_x100;
	unsigned int s, k;

	RETURN_IF_SKIPPED();
	cfg_load();
	ksft_print_msg("seed %llu, replay with KVPOOL_FUZZ_SEED=%llu\n",
		       (unsigned long long)cfg.seed, (unsigned long long)cfg.seed);
	ksft_print_msg("fuzz: %u s, %u workers, %s (KVPOOL_FUZZ_SECONDS/_WORKERS/_KILL/_TRACE or kvpool_fuzz_seconds=... on the kernel command line)\n",
		       cfg.seconds, cfg.workers,
		       cfg.kill ? "workers SIGKILLed and respawned" : "no kills");
	fflush(stdout);	/* the harness ends the test with _exit() */

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, sh);
	ASSERT_EQ(0, kv_pool_info(&info));
	sh->pool_bytes = info.pool_bytes;
	sh->pool_mask = info.node_mask;
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));

	mr.s = fz_mix(cfg.seed ^ 0x4B494C4CULL);
	t0 = mono_ns();
	sh->deadline_ns = t0 + (u64)cfg.seconds * 1000000000ULL;
	for (s = 0; s < cfg.workers; s++)
		spawn(s);
	next_kill = t0 + (200 + rn(&mr, 2800)) * 1000000ULL;
	while (!failures && mono_ns() < sh->deadline_ns) {
		reap_some();
		for (s = 0; s < cfg.workers && !failures; s++) {
			/* A worker that ended early (it cannot: only on failure). */
			if (!slots[s].pid && mono_ns() < sh->deadline_ns - 1000000000ULL)
				spawn(s);
		}
		if (cfg.kill && mono_ns() >= next_kill && !failures) {
			s = rn(&mr, cfg.workers);
			if (kill_slot(s) == 0) {
				kills++;
				spawn(s);
			}
			next_kill = mono_ns() + (200 + rn(&mr, 2800)) * 1000000ULL;
		}
		sleep_us(5000);
	}

	/* Stop: workers close everything and exit. */
	STORE(sh->stop, 1);
	t_end = mono_ns();
	for (;;) {
		int alive = 0;

		reap_some();
		for (s = 0; s < FZ_MAX_WORKERS; s++)
			alive += slots[s].pid != 0;
		if (!alive)
			break;
		if (mono_ns() - t_end > FZ_STOP_GRACE_S * 1000000000ULL) {
			for (s = 0; s < FZ_MAX_WORKERS; s++) {
				if (!slots[s].pid)
					continue;
				say("# fuzz: FAIL: worker w%d.%u (pid %d) did not stop within %d s",
				    s, slots[s].gen, (int)slots[s].pid, FZ_STOP_GRACE_S);
				show_stuck(slots[s].pid);
				dump_ring(&sh->ring[s][0], "it");
				failures++;
				kill_slot(s);
			}
			break;
		}
		sleep_us(10000);
	}
	/* Orphaned fork children of killed workers are ours to reap. */
	for (k = 0; k < 3000; k++) {
		pid_t pid = waitpid(-1, NULL, WNOHANG);

		if (pid < 0 && errno == ECHILD)
			break;
		if (pid <= 0)
			sleep_us(10000);
	}

	secs_x100 = (mono_ns() - t0) / 10000000ULL;
	for (k = 0; k < OP_NR; k++)
		calls += sh->stat[k].calls;
	ksft_print_msg("fuzz: %llu ops in %llu.%02llu s (%llu ops/s), %llu worker kills, %llu fork children (%llu killed), %llu SIGBUS caught\n",
		       (unsigned long long)calls,
		       (unsigned long long)secs_x100 / 100,
		       (unsigned long long)secs_x100 % 100,
		       (unsigned long long)(secs_x100 ? calls * 100 / secs_x100 : 0),
		       (unsigned long long)kills,
		       (unsigned long long)sh->children,
		       (unsigned long long)sh->children_killed,
		       (unsigned long long)sh->sigbus);
	ksft_print_msg("fuzz: %-11s %8s %8s %8s %8s  %s\n", "op", "calls", "ok",
		       "failed", "skipped", "errnos");
	for (k = 0; k < OP_NR; k++) {
		char errs[256];
		size_t n = 0;
		int e;

		errs[0] = 0;
		for (e = 1; e < 128 && n < sizeof(errs) - 32; e++)
			if (sh->stat[k].errs[e])
				n += snprintf(errs + n, sizeof(errs) - n, " %s:%u",
					      ename(e), sh->stat[k].errs[e]);
		ksft_print_msg("fuzz: %-11s %8llu %8llu %8llu %8llu %s\n", op_name[k],
			       (unsigned long long)sh->stat[k].calls,
			       (unsigned long long)sh->stat[k].ok,
			       (unsigned long long)sh->stat[k].err,
			       (unsigned long long)sh->stat[k].skipped, errs);
	}
	if (failures)
		ksft_print_msg("seed %llu, replay with KVPOOL_FUZZ_SEED=%llu\n",
			       (unsigned long long)cfg.seed,
			       (unsigned long long)cfg.seed);
	fflush(stdout);
	EXPECT_EQ(0, failures);

	/* Everything the workers held is back. */
	EXPECT_EQ(self->free0, sysfs_wait_eq("free_bytes", self->free0, 5000));
	EXPECT_EQ(self->held0, sysfs_wait_eq("held_bytes", self->held0, 5000));
	EXPECT_EQ(self->spaces0, sysfs_wait_eq("spaces", self->spaces0, 5000));
	EXPECT_EQ(self->pool0, sysfs_get("pool_bytes"));
	ASSERT_KV_CHECK_OK();
}

/*
 * The harness's timeout is fixed when the test is defined; the run time is
 * known only now (environment, kernel command line): stretch it.
 */
static void __attribute__((constructor)) fuzz_timeout(void)
{
	cfg_load();
	if (cfg.seconds + FZ_TIMEOUT_EXTRA > FZ_TIMEOUT_DEFAULT)
		_fuzz_random_ops_object.timeout = cfg.seconds + FZ_TIMEOUT_EXTRA;
}

TEST_HARNESS_MAIN
