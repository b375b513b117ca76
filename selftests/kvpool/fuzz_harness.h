/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fuzz_harness.h: what the files of fuzz_test share: settings, the random
 * generator, the shared memory, the per-process state, the helpers of
 * fuzz_harness.c and the ops of each topic's file.
 *
 * The files (fuzz_test.c says what the fuzzer does and checks):
 *   fuzz_test.c     the test: runs, kills and reaps workers; the final checks
 *   fuzz_harness.c  what every topic uses: settings, output, expected errnos,
 *                   memory probes, id maps, owner table, files, bogus pointers
 *   fuzz_worker.c   the worker process: the op loop, fork
 *   fuzz_space.c    SPACE_OPEN
 *   fuzz_blocks.c   ALLOC, FREE
 *   fuzz_prefix.c   PUBLISH, LOOKUP, RELEASE
 *   fuzz_ioctl.c    INFO, SPACE_INFO, random commands, bad fds
 *   fuzz_files.c    open, close, dup; sysfs and debugfs reads
 *   fuzz_mmap.c     mmap, munmap, mprotect, mremap, madvise, mlock; data, GUP
 */
#ifndef KVPOOL_FUZZ_HARNESS_H
#define KVPOOL_FUZZ_HARNESS_H

/* fuzz_test.c includes kvpool_util.h, and the harness with it, before this. */
#define KVPOOL_UTIL_NO_HARNESS
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

struct fz_cfg {
	u64 seed;
	unsigned int seconds;
	unsigned int workers;
	int kill;
	int trace;
};
extern struct fz_cfg cfg;

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
extern const char *const op_name[OP_NR];

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

extern struct fz_shm *sh;

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

/* ---- expected results, pointers, picks ----------------------------------- */

struct fz_exp {
	u64 allow[2];		/* errno bits, errno < 128 */
	int must_fail;
};

#define FZ_TAG(space)	(0x4b56504f00000000ULL | (u32)(space))	/* "KVPO" */
#define FZ_STEP		0x9E3779B97F4A7C15ULL

#define PICK_ANY	0
#define PICK_JOINED	1
#define PICK_UNJOINED	2
#define PICK_MUT	4	/* not a parent's file (in a fork child), open for writing */
#define PICK_OWNS	8	/* owns blocks */
#define PICK_WRITE	16	/* open for writing (mutating ioctls need FMODE_WRITE) */

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

/* fuzz_harness.c */
void cfg_load(void);
u64 mono_ns(void);
void sleep_us(unsigned long us);
void __attribute__((format(printf, 1, 2))) say(const char *fmt, ...);
const char *ename(int e);
void note(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
struct fz_ring *my_ring(struct worker *w);
void dump_ring(struct fz_ring *ring, const char *who);
void __attribute__((noreturn, format(printf, 2, 3)))
fz_fail(struct worker *w, const char *fmt, ...);
void skip(struct worker *w, const char *why);
void ex_add(struct fz_exp *e, int err);
void ex_defect(struct fz_exp *e, int err);
int fz_expect(struct worker *w, int ret, const struct fz_exp *e);
void fz_install_handlers(void);
u64 pat_base(u32 pat, u32 blk, u64 pg);
__attribute__((noinline)) void fill_words(volatile u64 *p, size_t n,
					  u64 tag, u64 base);
__attribute__((noinline)) long check_words(const volatile u64 *p,
					   size_t n, u64 tag, u64 base,
					   u64 *got);
int probe_fill(u64 *p, size_t n, u64 tag, u64 base);
int probe_check(const u64 *p, size_t n, u64 tag, u64 base, long *bad,
		u64 *got);
int probe_copy(void *d, const void *s, size_t n);
void idm_free(struct idmap *m);
long idm_find(const struct idmap *m, u32 id);
void idm_put(struct idmap *m, u32 id, u32 val);
void idm_del(struct idmap *m, u32 id);
long idm_pick(const struct idmap *m, u64 r);
int rec_live(u64 rec);
void rec_str(u64 rec, char *buf, size_t len);
void claim(struct worker *w, struct ofile *of, u32 id);
void unclaim(struct worker *w, struct ofile *of, u32 id);
void clear_records(u32 mask, u32 want);
int of_index(struct worker *w, struct ofile *of);
struct ofile *of_pick(struct worker *w, u64 r, int how);
int of_fd(struct ofile *of, struct rng *r);
struct ofile *of_new(struct worker *w, int acc);
struct ofile *of_new_as(struct worker *w, int acc, uid_t uid, gid_t gid);
void of_unclaim_all(struct worker *w, struct ofile *of);
void of_close_fd(struct worker *w, struct ofile *of, int idx);
struct ofile *of_any(struct worker *w, u64 r, int how);
struct ofile *of_unjoined_or(struct worker *w, struct rng *r, struct ofile *of);
u64 kb_get(struct worker *w, u32 id);
void kb_raise(struct worker *w, u32 id, u64 bytes);
struct kmap *map_new(struct worker *w);
int map_free_slots(struct worker *w);
struct kmap *map_cover(struct worker *w, u32 id, u64 off, u64 len,
		       int need_prot, u64 r);
char *map_at(struct kmap *m, u64 off);
extern const char *const p_name[P_NR];
int p_readable(int k);
int p_writable(int k);
int p_fault_kind(struct rng *r);
int odd_struct_kind(struct rng *r, unsigned int n, int k);
char *bogus(struct worker *w, struct rng *r, int k, size_t len);
char *place_struct(struct worker *w, struct rng *r, int *k,
		   const void *src, size_t len);
u32 *place_ids(struct worker *w, struct rng *r, int *k, const u32 *src,
	       u32 count);

/* fuzz_space.c */
void so_expect(struct worker *w, const struct kvpool_space_open *so,
	       struct ofile *of, int sk, int as_user, struct fz_exp *e,
	       int *cbad);
void op_join(struct worker *w, struct rng *r, int bad);

/* fuzz_blocks.c */
void check_my_blocks(struct worker *w, struct ofile *of, const char *why);
u32 huge_count(struct rng *r);
struct ofile *of_with_refs(struct worker *w, u64 r);
void op_alloc(struct worker *w, struct rng *r, int bad);
u32 pick_owned(struct worker *w, struct rng *r, struct ofile *of, u32 max);
u32 foreign_id(struct worker *w, struct rng *r, struct ofile *of);
void op_free(struct worker *w, struct rng *r, int bad);

/* fuzz_prefix.c */
void op_publish(struct worker *w, struct rng *r, int bad);
void op_lookup(struct worker *w, struct rng *r, int bad);
void op_release(struct worker *w, struct rng *r, int bad);

/* fuzz_ioctl.c */
void op_info(struct worker *w, struct rng *r);
void op_space_info(struct worker *w, struct rng *r);
void op_ioctl_rand(struct worker *w, struct rng *r);
void op_badfd(struct worker *w, struct rng *r);

/* fuzz_files.c */
void op_open(struct worker *w, struct rng *r);
void op_close(struct worker *w, struct rng *r);
void op_dup(struct worker *w, struct rng *r);
void op_peek(struct worker *w, struct rng *r);

/* fuzz_mmap.c */
void map_drop(struct worker *w, struct kmap *m);
void op_mmap(struct worker *w, struct rng *r, int bad);
void op_munmap(struct worker *w, struct rng *r);
void op_mprotect(struct worker *w, struct rng *r);
void op_mremap(struct worker *w, struct rng *r);
void op_madvise(struct worker *w, struct rng *r);
void op_mlock(struct worker *w, struct rng *r);
void op_write(struct worker *w, struct rng *r);
void op_verify(struct worker *w, struct rng *r);
void op_touch(struct worker *w, struct rng *r);
void op_gup(struct worker *w, struct rng *r);

/* fuzz_worker.c */
void instead(struct worker *w, struct rng *r, int kind, const char *why);
void __attribute__((noreturn)) worker_main(int slot, u32 gen);

#endif /* KVPOOL_FUZZ_HARNESS_H */
