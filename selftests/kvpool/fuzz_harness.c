// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_harness: what every topic of fuzz_test uses: settings, output,
 * expected errnos, memory probes, id maps, the owner table, files and
 * mappings, bogus pointers, credentials.
 */
#include "fuzz_harness.h"

struct fz_cfg cfg;
struct fz_shm *sh;

#define X(n, w) #n,
const char *const op_name[OP_NR] = { FZ_OPS(X) };
#undef X

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

void cfg_load(void)
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

u64 mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u64)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void sleep_us(unsigned long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- output -------------------------------------------------------------- */

/* One write(2) per message, so that lines of processes do not interleave. */
void __attribute__((format(printf, 1, 2))) say(const char *fmt, ...)
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

const char *ename(int e)
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

void note(struct worker *w, const char *fmt, ...)
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

struct fz_ring *my_ring(struct worker *w)
{
	return &sh->ring[w->slot][w->child ? 1 : 0];
}

void dump_ring(struct fz_ring *ring, const char *who)
{
	u64 seq = LOAD(ring->seq), i;

	say("#   last ops of %s (oldest first):", who);
	for (i = seq > FZ_RING ? seq - FZ_RING : 0; i < seq; i++)
		say("#     %s", ring->line[i % FZ_RING]);
}

void __attribute__((noreturn, format(printf, 2, 3)))
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
void skip(struct worker *w, const char *why)
{
	note(w, " skipped: %s", why);
	w->op_ok = 2;
}

/* ---- expected results ---------------------------------------------------- */

void ex_add(struct fz_exp *e, int err)
{
	e->allow[err >> 6] |= 1ULL << (err & 63);
}

/* A defect: the call must fail, with this errno or another defect's. */
void ex_defect(struct fz_exp *e, int err)
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
int fz_expect(struct worker *w, int ret, const struct fz_exp *e)
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

void fz_install_handlers(void)
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

u64 pat_base(u32 pat, u32 blk, u64 pg)
{
	return fz_mix((u64)pat << 32 ^ blk ^ pg << 40);
}

__attribute__((noinline)) void fill_words(volatile u64 *p, size_t n,
					  u64 tag, u64 base)
{
	size_t i;

	p[0] = tag;
	for (i = 1; i < n; i++)
		p[i] = base + i * FZ_STEP;
}

__attribute__((noinline)) long check_words(const volatile u64 *p,
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
int probe_fill(u64 *p, size_t n, u64 tag, u64 base)
{
	fz_sig = 0;
	if (sigsetjmp(fz_env, 0))
		return fz_sig;
	fz_armed = 1;
	fill_words(p, n, tag, base);
	fz_armed = 0;
	return 0;
}

int probe_check(const u64 *p, size_t n, u64 tag, u64 base, long *bad,
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

int probe_copy(void *d, const void *s, size_t n)
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

void idm_free(struct idmap *m)
{
	free(m->key);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

long idm_find(const struct idmap *m, u32 id)
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

void idm_put(struct idmap *m, u32 id, u32 val)
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

void idm_del(struct idmap *m, u32 id)
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
long idm_pick(const struct idmap *m, u64 r)
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

int rec_live(u64 rec)
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

void rec_str(u64 rec, char *buf, size_t len)
{
	u32 lo = (u32)rec;

	snprintf(buf, len, "space %u, worker slot %d gen %u%s file #%u%s",
		 (u32)(rec >> 32), (int)((lo >> 28) & 15) - 1, (lo >> 16) & 0x7ff,
		 (lo & (1u << 27)) ? " fork child" : "", lo & 0xffff,
		 rec_live(rec) ? "" : " (dead)");
}

void claim(struct worker *w, struct ofile *of, u32 id)
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

void unclaim(struct worker *w, struct ofile *of, u32 id)
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
void clear_records(u32 mask, u32 want)
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

int of_index(struct worker *w, struct ofile *of)
{
	return (int)(of - w->of);
}

struct ofile *of_pick(struct worker *w, u64 r, int how)
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

int of_fd(struct ofile *of, struct rng *r)
{
	return of->fds[rn(r, of->nfds)];
}

struct ofile *of_new(struct worker *w, int acc)
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
struct ofile *of_new_as(struct worker *w, int acc, uid_t uid, gid_t gid)
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

void of_unclaim_all(struct worker *w, struct ofile *of)
{
	u32 i;

	if (of->inherited || of->name_slot < 0)
		return;
	for (i = 0; i < of->owned.cap; i++)
		if (of->owned.key[i] != ID_EMPTY)
			unclaim(w, of, of->owned.key[i]);
}

/* Close fd number @idx of @of; the last one releases the file. */
void of_close_fd(struct worker *w, struct ofile *of, int idx)
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
struct ofile *of_any(struct worker *w, u64 r, int how)
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

/* The unjoined-file defect: a writable unjoined file instead of @of, if any. */
struct ofile *of_unjoined_or(struct worker *w, struct rng *r, struct ofile *of)
{
	struct ofile *u = of_pick(w, rnd(r), PICK_UNJOINED | PICK_WRITE);

	return u ? u : of;
}

u64 kb_get(struct worker *w, u32 id)
{
	unsigned int i;

	for (i = 0; i < 32; i++)
		if (w->kb[i].id == id)
			return w->kb[i].bytes;
	return 0;
}

/* A live space never gives back a page: what was backed stays backed. */
void kb_raise(struct worker *w, u32 id, u64 bytes)
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

struct kmap *map_new(struct worker *w)
{
	int i;

	for (i = 0; i < FZ_MAX_MAPS; i++)
		if (!w->map[i].used)
			return &w->map[i];
	return NULL;
}

int map_free_slots(struct worker *w)
{
	int i, n = 0;

	for (i = 0; i < FZ_MAX_MAPS; i++)
		n += !w->map[i].used;
	return n;
}

/* A mapping of space @id covering [off, off + len) with @need_prot. */
struct kmap *map_cover(struct worker *w, u32 id, u64 off, u64 len,
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

char *map_at(struct kmap *m, u64 off)
{
	return m->addr + (off - m->off);
}

/* ---- pointers -------------------------------------------------------------- */

const char *const p_name[P_NR] = {
	"good", "misaligned", "in-own-block", "read-only", "kvpool-read-only",
	"NULL", "low", "kernel", "non-canonical", "PROT_NONE", "half-mapped",
};

int p_readable(int k)
{
	return k <= P_KVRO;
}

int p_writable(int k)
{
	return k <= P_KVOWN;
}

int p_fault_kind(struct rng *r)
{
	static const int k[] = { P_NULL, P_LOW, P_KERNEL, P_NONCANON, P_GUARD,
				 P_PARTIAL };

	return k[rn(r, 6)];
}

/* One draw in @n: a struct in read-only, own-block or misaligned memory. */
int odd_struct_kind(struct rng *r, unsigned int n, int k)
{
	switch (rn(r, n)) {
	case 0:
		return P_RO;
	case 1:
		return P_KVOWN;
	case 2:
		return P_MISALIGN;
	}
	return k;
}

/* A bogus pointer of kind @k for an object of @len bytes. */
char *bogus(struct worker *w, struct rng *r, int k, size_t len)
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
char *place_struct(struct worker *w, struct rng *r, int *k,
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
u32 *place_ids(struct worker *w, struct rng *r, int *k, const u32 *src,
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
