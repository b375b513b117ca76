// SPDX-License-Identifier: GPL-2.0
/*
 * lock_order_test: one tenant cannot wedge the kernel or other tenants
 * through the module's locks.  sysfs and debugfs readers of per-space
 * state run against teardown, growth and eviction without hanging; a
 * tenant whose ioctl output buffer never becomes writable (userfaultfd)
 * does not hold up other tenants' opens, closes and the sysfs totals, and
 * neither does the shrink of a space with many fds nor a big teardown.
 * A hang is detected by a parent-side deadline, never by hanging the run.
 */
#include "kvpool_util.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/*
 * The pool is grown into fragmented memory for the test, so its chunks are
 * mostly single pages and a space's chunk list runs to tens of thousands:
 * long walks for the readers, and a teardown that moves a chunk every few
 * instructions.
 */
#define RACE_POOL_MAX	(768 * MiB)
#define RACE_KEEP_FREE	(192 * MiB)	/* the hog stops here; the pool leaves this */
#define RACE_HOG_STEP	(16 * MiB)
#define RACE_BLOCK	(1 * MiB)
#define RACE_QUOTA	(96 * MiB)	/* some 24k chunks of a page */
#define RACE_BLOCKS	(RACE_QUOTA / RACE_BLOCK)
#define RACE_BATCH	64
#define RACE_WORKERS	2
#define RACE_READERS	3
#define RACE_SECONDS	6
#define RACE_HOG_S	30	/* fragmenting stops here (KASAN kernels are slow) */
#define RACE_GRACE_S	60	/* past the deadline a child counts as hung */
#define COMPACT_UNEVICTABLE "/proc/sys/vm/compact_unevictable_allowed"

/* The chunk counts of debugfs nodes, one "chunks=N" per node. */
static const char *chunks_line(char *out, size_t len)
{
	char buf[1024], *p = buf;
	size_t n = 0;

	out[0] = 0;
	if (kv_debugfs_read("nodes", buf, sizeof(buf)) < 0)
		return out;
	while ((p = strstr(p, "chunks=")) && n + 32 < len) {
		n += snprintf(out + n, len - n, "%s%llu", n ? "+" : "",
			      strtoull(p + 7, NULL, 10));
		p += 7;
	}
	return out;
}

static __u64 mem_available(void)
{
	char buf[4096], *p;

	if (read_file("/proc/meminfo", buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "MemAvailable:");
	return p ? strtoull(p + 13, NULL, 10) * KiB : 0;
}

/*
 * The hog: fault in two regions a page of each in turn, so their pages
 * interleave in physical memory, then unmap one.  The other stays mlocked,
 * and with compact_unevictable_allowed 0 compaction cannot move it, so the
 * free memory left is single pages that cannot merge.  Writes 'R' to @ready
 * and waits to be killed.
 */
static void race_hog(int ready)
{
	size_t step = RACE_HOG_STEP, psz = (size_t)sysconf(_SC_PAGESIZE), off;
	__u64 end = kv_now_us() + RACE_HOG_S * 1000000ULL;
	char *freed[256];
	int n = 0, i;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT))
		_exit(2);
	while (n < (int)ARRAY_SIZE(freed) && mem_available() > RACE_KEEP_FREE &&
	       kv_now_us() < end) {
		char *a = mmap(NULL, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		char *b = mmap(NULL, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);

		if (a == MAP_FAILED || b == MAP_FAILED)
			break;
		madvise(a, step, MADV_NOHUGEPAGE);
		madvise(b, step, MADV_NOHUGEPAGE);
		for (off = 0; off < step; off += psz) {
			a[off] = 1;
			b[off] = 1;
		}
		freed[n++] = a;
	}
	for (i = 0; i < n; i++)
		munmap(freed[i], step);
	if (write(ready, "R", 1) != 1)
		_exit(3);
	for (;;)
		pause();
}

/*
 * The pool grew its 2 MiB chunks first, so they lead each node's free list
 * and a shrink frees them first: shrink both nodes to what the smaller
 * one holds in single pages.
 */
static void race_drop_big_chunks(void)
{
	__u64 small = ~0ULL, reserved, chunks, big;
	char buf[1024], num[32], *p = buf;

	if (kv_debugfs_read("nodes", buf, sizeof(buf)) < 0)
		return;
	while ((p = strstr(p, "reserved="))) {
		reserved = strtoull(p + 9, NULL, 10);
		p = strstr(p, "chunks=");
		if (!p)
			return;
		chunks = strtoull(p + 7, NULL, 10);
		big = (reserved - chunks * 4096) / (KV_CHUNK - 4096);
		if ((chunks - big) * 4096 < small)
			small = (chunks - big) * 4096;
	}
	small &= ~(KV_CHUNK - 1);
	if (small == (~0ULL & ~(KV_CHUNK - 1)) || small < 32 * MiB)
		return;
	snprintf(num, sizeof(num), "%llu", (unsigned long long)(2 * small));
	sysfs_write("pool_bytes", num);
}

/* Grow the pool into fragmented memory; the pool size it got. */
static __u64 race_fragmented_pool(struct __test_metadata *_metadata)
{
	struct pollfd pfd;
	__u64 avail, want;
	char buf[32], c;
	int ready[2];
	pid_t hog;

	/* Empty first, so that none of the pool's 2 MiB chunks stay. */
	sysfs_write("pool_bytes", "0");
	if (kv_write_path(COMPACT_UNEVICTABLE, "0"))
		TH_LOG("cannot keep compaction off mlocked pages: chunks may stay large");
	if (pipe(ready))
		return sysfs_get("pool_bytes");
	hog = fork();
	if (hog == 0) {
		close(ready[0]);
		race_hog(ready[1]);
	}
	close(ready[1]);
	pfd.fd = ready[0];
	pfd.events = POLLIN;
	if (hog > 0 && poll(&pfd, 1, 120000) == 1 && read(ready[0], &c, 1) == 1) {
		avail = mem_available();
		want = avail > RACE_KEEP_FREE ? avail - RACE_KEEP_FREE : 0;
		if (want > RACE_POOL_MAX)
			want = RACE_POOL_MAX;
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(want & ~(KV_CHUNK - 1)));
		sysfs_write("pool_bytes", buf);
	}
	close(ready[0]);
	if (hog > 0) {
		kill(hog, SIGKILL);
		kv_wait(hog);
	}
	kv_write_path(COMPACT_UNEVICTABLE, "1");
	race_drop_big_chunks();
	/* Whatever the hog managed, the test needs a pool. */
	if (sysfs_get("pool_bytes") < KV_POOL_DEFAULT) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)KV_POOL_DEFAULT);
		sysfs_write("pool_bytes", buf);
	}
	return sysfs_get("pool_bytes");
}

static volatile sig_atomic_t race_stop;

/* Shared with the children, for the log: teardowns done, chunk walks read. */
static struct race_counts {
	unsigned long teardowns, walks;
} *race_counts;

static void race_alarm(int sig)
{
	(void)sig;
	race_stop = 1;
}

/* Every regular file of one space directory, read once. */
static void read_space_dir(const char *dir)
{
	char path[512], buf[4096];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%.200s/%.64s", dir, de->d_name);
		read_file(path, buf, sizeof(buf));
	}
	closedir(d);
}

/* The newest space directory (highest id), or 0. */
static __u32 newest_space(void)
{
	struct dirent *de;
	DIR *d = opendir(KV_SYSFS "/space");
	__u32 best = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		__u32 id = (__u32)strtoul(de->d_name, NULL, 10);

		if (id > best)
			best = id;
	}
	closedir(d);
	return best;
}

static const char *const debugfs_files[] = {
	"spaces", "hashes", "lru", "residency", "tenants", "nodes", "check",
};

/*
 * Reader n: the first ones hammer backed_bytes of the newest space until
 * its directory goes, so they read right through its teardown; the last
 * reads every per-space file and the debugfs dumps now and then.
 */
static void race_reader(int n)
{
	char path[256], buf[1 << 16];
	unsigned long rounds = 0;

	while (!race_stop) {
		__u32 id = newest_space();
		struct dirent *de;
		size_t i;
		DIR *d;
		int fd;

		if (n < RACE_READERS - 1) {
			if (!id)
				continue;
			snprintf(path, sizeof(path), KV_SYSFS "/space/%u/backed_bytes", id);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			while (!race_stop && pread(fd, buf, 64, 0) > 0)
				__atomic_add_fetch(&race_counts->walks, 1, __ATOMIC_RELAXED);
			close(fd);
			continue;
		}
		d = opendir(KV_SYSFS "/space");
		if (!d)
			_exit(2);
		while ((de = readdir(d)) && !race_stop) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), KV_SYSFS "/space/%.32s", de->d_name);
			read_space_dir(path);
		}
		closedir(d);
		if (rounds++ % 4 == 0)
			for (i = 0; i < ARRAY_SIZE(debugfs_files); i++)
				kv_debugfs_read(debugfs_files[i], buf, sizeof(buf));
		usleep(1000);
	}
	_exit(0);
}

/*
 * Worker n: create a space, grow it in steps to its quota, cache a part
 * (publish, release), drop that with sysfs drop_cached, then tear it down:
 * by close, or by destroy_space of a persistent space then close.
 */
static void race_worker(int n)
{
	__u32 ids[RACE_BLOCKS];
	unsigned int iter = 0;

	while (!race_stop) {
		struct kvpool_space_open so;
		char name[KVPOOL_NAME_MAX];
		int fd = kv_open(), got = 0;

		if (fd < 0)
			_exit(2);
		snprintf(name, sizeof(name), "race-%d-%d-%u", (int)getpid(), n, iter);
		kv_so_init(&so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL, RACE_BLOCK,
			   RACE_QUOTA);
		if (iter & 1)
			so.flags |= KVPOOL_SPACE_PERSIST;
		if (kv_space_open(fd, &so))
			_exit(3);
		while (got < (int)RACE_BLOCKS && !kv_alloc(fd, &ids[got], RACE_BATCH))
			got += RACE_BATCH;
		if (got && !kv_publish_seq(fd, ids, RACE_BATCH, (__u32)getpid(), iter, NULL))
			kv_release(fd, ids, RACE_BATCH);
		sysfs_write("drop_cached", name);
		if (iter & 1)
			sysfs_write("destroy_space", name);
		close(fd);
		__atomic_add_fetch(&race_counts->teardowns, 1, __ATOMIC_RELAXED);
		iter++;
	}
	_exit(0);
}

/* Workers stop after RACE_SECONDS; readers when told, after the last teardown. */
static pid_t race_fork(void (*fn)(int), int n, bool timed)
{
	pid_t pid = fork();

	if (pid == 0) {
		signal(SIGALRM, race_alarm);
		if (timed)
			alarm(RACE_SECONDS);
		fn(n);
	}
	return pid;
}

/* Log a child's state from /proc: R spinning, D waiting. */
static void log_proc(struct __test_metadata *_metadata, pid_t pid, const char *what)
{
	char path[64], stat[256] = "", wchan[64] = "";

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	read_file(path, stat, sizeof(stat));
	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	read_file(path, wchan, sizeof(wchan));
	TH_LOG("%s %d did not return: stat %.60s wchan %s", what, (int)pid, stat, wchan);
}

/*
 * Wait for @pids until @deadline_us; returns how many did not exit, each
 * logged and sent SIGKILL (which a task stuck in the kernel ignores).
 * *@failed counts those that exited other than with status 0.
 */
static int wait_all(struct __test_metadata *_metadata, pid_t *pids, int n, __u64 deadline_us,
		    const char *what, int *failed)
{
	int i, status, left = n, hung = 0;

	while (left && kv_now_us() < deadline_us) {
		for (i = 0; i < n; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
				if (!WIFEXITED(status) || WEXITSTATUS(status)) {
					TH_LOG("%s %d: status 0x%x", what, (int)pids[i], status);
					(*failed)++;
				}
				pids[i] = 0;
				left--;
			}
		}
		if (left)
			usleep(20000);
	}
	for (i = 0; i < n; i++) {
		if (pids[i] <= 0)
			continue;
		log_proc(_metadata, pids[i], what);
		kill(pids[i], SIGKILL);
		hung++;
	}
	return hung;
}

/*
 * Issue 14, finding 2: a reader of space/ID/backed_bytes walked the chunk
 * list while teardown moved the chunks to the pool without the space's
 * lock, and spun forever (or read freed chunks).  Readers of every
 * per-space sysfs file and of the debugfs dumps run against creation,
 * growth, drop_cached and teardown; every child must finish.
 */
FIXTURE(locks) {
	int unused;
};

FIXTURE_SETUP(locks)
{
	if (access(KV_SYSFS "/space", R_OK) || access(KV_CHECK, R_OK))
		SKIP(return, "no sysfs space/ or debugfs check");
}

/*
 * Back to the pool every test expects, in 2 MiB chunks again: emptied
 * first (a hung teardown may keep some chunks).
 */
FIXTURE_TEARDOWN(locks)
{
	char pool[32], buf[512];
	int tries = 50;

	/* Chunks still held by a mapping come back within seconds. */
	while (sysfs_write("pool_bytes", "0") && tries--)
		usleep(100000);
	snprintf(pool, sizeof(pool), "%llu", (unsigned long long)KV_POOL_DEFAULT);
	sysfs_write("pool_bytes", pool);
	TH_LOG("pool back to %llu bytes in %s chunks",
	       (unsigned long long)sysfs_get("pool_bytes"), chunks_line(buf, sizeof(buf)));
}

TEST_F_TIMEOUT(locks, sysfs_read_during_teardown, 240)
{
	pid_t readers[RACE_READERS], workers[RACE_WORKERS];
	__u64 deadline;
	int i, hung, failed = 0;
	char buf[512];
	__u64 pool;

	RETURN_IF_SKIPPED();
	pool = race_fragmented_pool(_metadata);
	TH_LOG("pool %llu bytes in %s chunks", (unsigned long long)pool,
	       chunks_line(buf, sizeof(buf)));
	race_counts = mmap(NULL, sizeof(*race_counts), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, race_counts);
	for (i = 0; i < RACE_READERS; i++)
		ASSERT_LT(0, readers[i] = race_fork(race_reader, i, false));
	for (i = 0; i < RACE_WORKERS; i++)
		ASSERT_LT(0, workers[i] = race_fork(race_worker, i, true));
	deadline = kv_now_us() + (RACE_SECONDS + RACE_GRACE_S) * 1000000ULL;
	hung = wait_all(_metadata, workers, RACE_WORKERS, deadline, "worker", &failed);
	for (i = 0; i < RACE_READERS; i++)
		kill(readers[i], SIGALRM);
	hung += wait_all(_metadata, readers, RACE_READERS, kv_now_us() + RACE_GRACE_S * 1000000ULL,
			 "reader", &failed);
	TH_LOG("%lu teardowns, %lu reads of backed_bytes", race_counts->teardowns,
	       race_counts->walks);
	ASSERT_EQ(0, hung) TH_LOG("a sysfs/debugfs read or a teardown hung");
	EXPECT_EQ(0, failed);
	ASSERT_KV_CHECK_OK();
}

/*
 * Issue 14, finding 7: an ioctl copied its output to user memory with the
 * space's lock held, and the sysfs totals waited on every space's lock
 * with the global lock held.  A stalled copy (a userfaultfd page nobody
 * serves) so froze every tenant's open and close.
 *
 * Process A's ioctl array straddles two userfaultfd pages, P1 then P2.
 * The call faults them in up front, P1 then P2; copy-in reads them in the
 * same order, and so does the copy-out.  The handler serves every fault
 * but takes the other page away as it does; once the last fault before
 * the call does its work has come (P2's write fault, or for PUBLISH, whose
 * array is read in between, P2's read fault), P1 is missing and the next
 * fault is the copy-out's.  That one is never served.  Then B opens, uses
 * and closes a space of its own and reads the totals; it must finish in
 * time.  ALLOC pins its array before it takes any lock and writes the ids
 * into the pinned pages (issue 14, finding 13), so its copy-out never
 * faults: its stall is P2's fault in the pin, which is never served.
 */
#define STALL_BLOCK	(64 * KiB)
#define STALL_QUOTA	(4 * MiB)
#define STALL_N		4
#define STALL_WAIT_S	20	/* for A to reach its copy-out */
#define STALL_B_S	5	/* what B may take */

enum stall_op { STALL_ALLOC, STALL_LOOKUP, STALL_PUBLISH };

FIXTURE(stall) {
	int unused;
};

FIXTURE_SETUP(stall)
{
	if (access(KV_SYSFS "/space", R_OK) || access(KV_CHECK, R_OK))
		SKIP(return, "no sysfs space/ or debugfs check");
}

FIXTURE_TEARDOWN(stall)
{
}

FIXTURE_VARIANT(stall) {
	enum stall_op op;
};

FIXTURE_VARIANT_ADD(stall, alloc) {
	.op = STALL_ALLOC,
};

FIXTURE_VARIANT_ADD(stall, lookup) {
	.op = STALL_LOOKUP,
};

FIXTURE_VARIANT_ADD(stall, publish) {
	.op = STALL_PUBLISH,
};

struct stall {
	int uffd;
	size_t psz;
	char *pages;		/* P1, P2: registered */
	char *tmpl;		/* what a served fault of each gets */
	bool reads;		/* the call reads its array before working */
	bool pins;		/* the call pins its array: stall in the pin */
	int report;		/* to the test: 'S' at the copy-out */
};

static void stall_serve(struct stall *st, int pg)
{
	struct uffdio_copy copy;

	/* The other page goes first: the next access to it faults again. */
	madvise(st->pages + (1 - pg) * st->psz, st->psz, MADV_DONTNEED);
	memset(&copy, 0, sizeof(copy));
	copy.dst = (unsigned long)(st->pages + pg * st->psz);
	copy.src = (unsigned long)(st->tmpl + pg * st->psz);
	copy.len = st->psz;
	if (ioctl(st->uffd, UFFDIO_COPY, &copy))
		_exit(21);
}

static void *stall_handler(void *arg)
{
	struct stall *st = arg;
	bool armed = false;

	for (;;) {
		struct pollfd pfd = { .fd = st->uffd, .events = POLLIN };
		struct uffd_msg msg;
		bool wr;
		int pg;

		if (poll(&pfd, 1, -1) != 1)
			continue;
		if (read(st->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		pg = msg.arg.pagefault.address >= (unsigned long)st->pages + st->psz;
		wr = msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE;
		if (pg == 0 && armed) {
			/* The copy-out: never served. */
			if (write(st->report, "S", 1) != 1)
				_exit(22);
			for (;;)
				pause();
		}
		if (pg == 1 && wr != st->reads)
			armed = true;
		if (armed && st->pins) {
			/* The pin's last fault, before any lock: never served. */
			if (write(st->report, "S", 1) != 1)
				_exit(22);
			for (;;)
				pause();
		}
		stall_serve(st, pg);
	}
	return NULL;
}

/* Process A: never returns from the ioctl unless its copy-out did not fault. */
static void stall_tenant(const FIXTURE_VARIANT(stall) *variant, const char *name, int report)
{
	struct kvpool_publish_entry *e;
	struct uffdio_register reg;
	struct uffdio_api api;
	struct kvpool_publish p;
	struct kvpool_lookup l;
	struct kvpool_blocks b;
	__u64 arr;
	__u8 hashes[STALL_N][KVPOOL_HASH_BYTES];
	__u32 ids[STALL_N];
	size_t off, len;
	struct stall st;
	pthread_t th;
	int fd, i;

	memset(&st, 0, sizeof(st));
	st.report = report;
	st.psz = (size_t)sysconf(_SC_PAGESIZE);
	st.reads = variant->op == STALL_PUBLISH;
	st.pins = variant->op == STALL_ALLOC;
	fd = kv_open_create(name, STALL_BLOCK, STALL_QUOTA, NULL);
	if (fd < 0)
		_exit(10);
	st.uffd = (int)syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (st.uffd < 0)
		_exit(errno == ENOSYS ? 12 : 13);
	memset(&api, 0, sizeof(api));
	api.api = UFFD_API;
	if (ioctl(st.uffd, UFFDIO_API, &api))
		_exit(14);
	st.pages = mmap(NULL, 2 * st.psz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			-1, 0);
	st.tmpl = calloc(2, st.psz);
	if (st.pages == MAP_FAILED || !st.tmpl)
		_exit(15);
	memset(&reg, 0, sizeof(reg));
	reg.range.start = (unsigned long)st.pages;
	reg.range.len = 2 * st.psz;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(st.uffd, UFFDIO_REGISTER, &reg))
		_exit(16);

	/* The array: half in P1, half in P2. */
	len = variant->op == STALL_PUBLISH ? sizeof(*e) : sizeof(__u32);
	off = st.psz - STALL_N / 2 * len;
	if (kv_alloc(fd, ids, STALL_N))
		_exit(17);
	if (variant->op == STALL_LOOKUP) {
		/* LOOKUP finds these: published, then cached. */
		if (kv_publish_seq(fd, ids, STALL_N, 7, 0, NULL) || kv_release(fd, ids, STALL_N))
			_exit(18);
		for (i = 0; i < STALL_N; i++)
			kv_hash(hashes[i], 7, i);
	}
	if (variant->op == STALL_PUBLISH) {
		e = (void *)(st.tmpl + off);
		for (i = 0; i < STALL_N; i++) {
			__u8 h[KVPOOL_HASH_BYTES];

			kv_hash(h, 8, i);
			kv_pub_entry(&e[i], h, ids[i], 0);
		}
	}
	if (pthread_create(&th, NULL, stall_handler, &st))
		_exit(19);

	/* The array straddling P1 and P2; every other field 0. */
	arr = (unsigned long)(st.pages + off);
	switch (variant->op) {
	case STALL_ALLOC:
		b = (struct kvpool_blocks){ .ids = arr, .count = STALL_N };
		ioctl(fd, KVPOOL_IOC_ALLOC, &b);
		break;
	case STALL_LOOKUP:
		l = (struct kvpool_lookup){ .hashes = (unsigned long)hashes, .ids = arr,
					    .count = STALL_N };
		ioctl(fd, KVPOOL_IOC_LOOKUP, &l);
		break;
	case STALL_PUBLISH:
		p = (struct kvpool_publish){ .entries = arr, .count = STALL_N };
		ioctl(fd, KVPOOL_IOC_PUBLISH, &p);
		break;
	}
	/* Here only when the copy-out found its pages. */
	_exit(4);
}

/* B: the totals, then a space of its own opened, used and closed. */
static void stall_other_tenant(int what)
{
	static const char *const totals[] = {
		"prefix_hits", "prefix_misses", "prefix_inserts", "prefix_dedups",
		"cached_bytes", "published_bytes", "evictions", "spaces", "pool_bytes",
	};
	char name[KVPOOL_NAME_MAX], buf[256];
	__u32 id;
	size_t i;
	int fd, fd2;

	if (what == 0) {
		for (i = 0; i < ARRAY_SIZE(totals); i++) {
			char path[128];

			snprintf(path, sizeof(path), KV_SYSFS "/%s", totals[i]);
			if (read_file(path, buf, sizeof(buf)) < 0)
				_exit(2);
		}
		_exit(0);
	}
	snprintf(name, sizeof(name), "other-%d", (int)getpid());
	fd = kv_open_create(name, STALL_BLOCK, STALL_QUOTA, NULL);
	if (fd < 0)
		_exit(3);
	fd2 = kv_open_join(name, NULL);
	if (fd2 < 0 || kv_alloc(fd2, &id, 1))
		_exit(4);
	close(fd2);
	close(fd);
	_exit(0);
}

TEST_F_TIMEOUT(stall, stalled_user_buffer_does_not_block_others, 90)
{
	char name[KVPOOL_NAME_MAX], c;
	struct pollfd pfd;
	pid_t a, b[2];
	int report[2], hung, failed = 0, status, i;

	RETURN_IF_SKIPPED();
	kv_name(name, sizeof(name), "stall");
	ASSERT_EQ(0, pipe(report));
	a = fork();
	ASSERT_LE(0, a);
	if (a == 0) {
		close(report[0]);
		stall_tenant(variant, name, report[1]);
	}
	close(report[1]);
	pfd.fd = report[0];
	pfd.events = POLLIN;
	if (poll(&pfd, 1, STALL_WAIT_S * 1000) != 1 || read(report[0], &c, 1) != 1) {
		kill(a, SIGKILL);
		status = kv_wait(a);
		if (status == 12)
			SKIP(return, "no userfaultfd");
		ASSERT_TRUE(0) TH_LOG("tenant A's copy-out never faulted (exit %d)", status);
	}

	/* A now sits in its ioctl's user copy.  B must not care. */
	for (i = 0; i < 2; i++) {
		b[i] = fork();
		ASSERT_LE(0, b[i]);
		if (b[i] == 0)
			stall_other_tenant(i);
		usleep(300000);
	}
	hung = wait_all(_metadata, b, 2, kv_now_us() + STALL_B_S * 1000000ULL,
			"other tenant", &failed);

	/* Let A go: the copy fails and the call undoes what it did. */
	kill(a, SIGKILL);
	kv_wait(a);
	for (i = 0; i < 2; i++)
		if (b[i] > 0)
			kv_wait(b[i]);
	ASSERT_EQ(0, hung) TH_LOG("another tenant waited on the stalled one");
	EXPECT_EQ(0, failed);
	ASSERT_KV_CHECK_OK();
}

/*
 * Issue 30, item 7: the shrinker evicted with kvp_spaces_lock held, and
 * every evicted block visited every fd of its space, so one tenant with
 * many fds made every open and close on the host wait for its shrink.
 *
 * One space of SHRINK_BLOCKS cached 4 KiB blocks (one chunk) is joined by
 * SHRINK_FDS fds; each looks up SHRINK_PER_FD of the blocks and releases
 * them, so it hears of their eviction: the eviction has real work left to
 * do after the fix (SHRINK_FDS * SHRINK_PER_FD events), just not under
 * the global lock.  The publisher's fd hears of every block, in the order
 * they go.  drop_caches runs the shrinker; once the publisher hears of the
 * first eviction, another tenant joins its own space.  Its SPACE_OPEN must
 * return while the shrink is provably still under way: fewer than all
 * SHRINK_BLOCKS evictions reported by then.
 */
#define SHRINK_FDS	8192	/* a bounded run on the KASAN kernel too */
#define SHRINK_BLOCKS	512	/* 4 KiB blocks: one 2 MiB chunk */
#define SHRINK_PER_FD	4
#define SHRINK_SEED	0x5eed
#define OTHER_UID	4242

struct shrink_run {
	__u64 t0, t1;
	int err;
};

static void *shrink_thread(void *arg)
{
	struct shrink_run *r = arg;
	int dc = open("/proc/sys/vm/drop_caches", O_WRONLY);

	r->t0 = kv_now_us();
	r->err = dc < 0 || write(dc, "2", 1) != 1 ? errno : 0;
	r->t1 = kv_now_us();
	if (dc >= 0)
		close(dc);
	return NULL;
}

/* EVICTED records among the events pending on @fd; -1 on OVERFLOW or error. */
static int evicted_pending(int fd)
{
	struct kvpool_event ev[256];
	int n, i, total = 0;

	while ((n = kv_read_events(fd, ev, 256)) > 0) {
		for (i = 0; i < n; i++) {
			if (ev[i].type == KVPOOL_EVENT_OVERFLOW)
				return -1;
			total += ev[i].type == KVPOOL_EVENT_EVICTED;
		}
	}
	return n < 0 ? -1 : total;
}

TEST_F_TIMEOUT(locks, an_open_is_not_stalled_by_a_shrink_over_many_fds, 900)
{
	const struct kv_cred other = { .uid = OTHER_UID, .gid = OTHER_UID };
	char name[KVPOOL_NAME_MAX], oname[KVPOOL_NAME_MAX];
	__u64 min_cached0 = 0, enabled0 = 1, tb0, tb1;
	__u32 ids[SHRINK_BLOCKS], got[SHRINK_PER_FD], hits;
	struct rlimit nofile0, nofile;
	struct shrink_run run = { 0 };
	int fd0, ofd0, ofd, *fds, i, seen, rest;
	struct pollfd pfd;
	pthread_t th;

	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &nofile0));
	nofile.rlim_cur = nofile.rlim_max = SHRINK_FDS + 256;
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &nofile));
	ASSERT_EQ(0, sysfs_u64("min_cached_bytes", &min_cached0));
	ASSERT_EQ(0, sysfs_u64("shrinker_enabled", &enabled0));
	ASSERT_EQ(0, sysfs_write("min_cached_bytes", "0"));
	ASSERT_EQ(0, sysfs_write("shrinker_enabled", "1"));
	fds = calloc(SHRINK_FDS, sizeof(*fds));
	ASSERT_NE(NULL, fds);

	kv_name(name, sizeof(name), "shrinkfds");
	kv_name(oname, sizeof(oname), "shrinkother");
	fd0 = kv_open_create(name, 4 * KiB, SHRINK_BLOCKS * 4 * KiB, NULL);
	ASSERT_LE(0, fd0);
	ASSERT_EQ(0, kv_alloc(fd0, ids, SHRINK_BLOCKS));
	ASSERT_EQ(0, kv_publish_seq(fd0, ids, SHRINK_BLOCKS, SHRINK_SEED, 0, NULL));
	ASSERT_EQ(0, kv_release(fd0, ids, SHRINK_BLOCKS));
	for (i = 0; i < SHRINK_FDS; i++) {
		fds[i] = kv_open_join(name, NULL);
		ASSERT_LE(0, fds[i]) TH_LOG("fd %d: %s", i, strerror(-fds[i]));
		ASSERT_EQ(0, kv_lookup_seq(fds[i], SHRINK_SEED, (i * SHRINK_PER_FD) % SHRINK_BLOCKS,
					   SHRINK_PER_FD, got, NULL, &hits));
		ASSERT_EQ(SHRINK_PER_FD, hits);
		ASSERT_EQ(0, kv_release(fds[i], got, SHRINK_PER_FD));
	}
	/* The other tenant's space, and the fd that joins it during the shrink. */
	ofd0 = kv_open_as(&other);
	ASSERT_LE(0, ofd0);
	ASSERT_EQ(0, kv_create(ofd0, oname, 4 * KiB, 1 * MiB, NULL));
	ofd = kv_open_as(&other);
	ASSERT_LE(0, ofd);
	ASSERT_EQ(0, evicted_pending(fd0));

	ASSERT_EQ(0, pthread_create(&th, NULL, shrink_thread, &run));
	pfd.fd = fd0;
	pfd.events = POLLIN;
	ASSERT_EQ(1, poll(&pfd, 1, 120000)) TH_LOG("no eviction reported");
	tb0 = kv_now_us();
	ASSERT_EQ(0, kv_join(ofd, oname, NULL));
	tb1 = kv_now_us();
	seen = evicted_pending(fd0);
	pthread_join(th, NULL);
	rest = evicted_pending(fd0);
	TH_LOG("shrink %llu us; the other tenant's SPACE_OPEN %llu us, after %d of %d evictions",
	       (unsigned long long)(run.t1 - run.t0), (unsigned long long)(tb1 - tb0), seen,
	       SHRINK_BLOCKS);

	close(ofd);
	close(ofd0);
	for (i = 0; i < SHRINK_FDS; i++)
		close(fds[i]);
	close(fd0);
	free(fds);
	sysfs_write("shrinker_enabled", enabled0 ? "1" : "0");
	{
		char num[32];

		snprintf(num, sizeof(num), "%llu", (unsigned long long)min_cached0);
		sysfs_write("min_cached_bytes", num);
	}
	setrlimit(RLIMIT_NOFILE, &nofile0);

	ASSERT_EQ(0, run.err);
	ASSERT_LE(0, seen);
	ASSERT_LE(0, rest);
	/* The shrink got to every block: the count below means something. */
	ASSERT_EQ(SHRINK_BLOCKS, seen + rest);
	EXPECT_LT(seen, SHRINK_BLOCKS)
		TH_LOG("the open waited for the whole shrink of another tenant's space");
	EXPECT_LT(tb1, run.t1);
	ASSERT_KV_CHECK_OK();
}

/*
 * Issue 30, item 11: the last close gave a space's chunks back to the pool
 * with kvp_spaces_lock held, visiting every page, so the bigger the space
 * the longer every open and close on the host waited.  The pool is grown
 * into fragmented memory, so a space that takes most of it is tens of
 * thousands of chunks.  Its fd is closed; once the pool's free_bytes
 * shows the teardown giving chunks back, another tenant joins its own
 * space.  The join must return while the teardown is provably still under
 * way: the pool's free bytes then short of what the teardown ends with.
 */
#define BIG_BLOCK	(1 * MiB)
#define BIG_IDS		1024

struct close_run {
	int fd;
	__u64 t0, t1;
};

static void *close_thread(void *arg)
{
	struct close_run *r = arg;

	r->t0 = kv_now_us();
	close(r->fd);
	r->t1 = kv_now_us();
	return NULL;
}

TEST_F_TIMEOUT(locks, teardown_of_a_big_space_does_not_hold_the_spaces_lock, 600)
{
	const struct kv_cred other = { .uid = OTHER_UID, .gid = OTHER_UID };
	char name[KVPOOL_NAME_MAX], oname[KVPOOL_NAME_MAX], buf[512];
	__u64 pool, free0, free_open, free_end, tb0, tb1, deadline;
	static __u32 ids[BIG_IDS];
	struct close_run run = { 0 };
	int ofd0, ofd, err;
	pthread_t th;
	long blocks;

	RETURN_IF_SKIPPED();
	pool = race_fragmented_pool(_metadata);
	kv_name(name, sizeof(name), "bigspace");
	kv_name(oname, sizeof(oname), "bigother");
	ofd0 = kv_open_as(&other);
	ASSERT_LE(0, ofd0);
	ASSERT_EQ(0, kv_create(ofd0, oname, 4 * KiB, 1 * MiB, NULL));
	ofd = kv_open_as(&other);
	ASSERT_LE(0, ofd);

	run.fd = kv_open_create(name, BIG_BLOCK, pool & ~(BIG_BLOCK - 1), NULL);
	ASSERT_LE(0, run.fd);
	blocks = kv_alloc_until_fail(run.fd, ids, BIG_IDS, &err);
	free0 = sysfs_get("free_bytes");
	TH_LOG("pool %llu bytes; a space of %ld MiB, %llu bytes left free; %s chunks",
	       (unsigned long long)pool, blocks, (unsigned long long)free0,
	       chunks_line(buf, sizeof(buf)));
	ASSERT_LT(0, blocks);

	ASSERT_EQ(0, pthread_create(&th, NULL, close_thread, &run));
	deadline = kv_now_us() + 60 * 1000000ULL;
	while (sysfs_get("free_bytes") == free0 && kv_now_us() < deadline)
		;
	tb0 = kv_now_us();
	ASSERT_EQ(0, kv_join(ofd, oname, NULL));
	tb1 = kv_now_us();
	free_open = sysfs_get("free_bytes");
	pthread_join(th, NULL);
	free_end = sysfs_get("free_bytes");
	close(ofd);
	close(ofd0);
	TH_LOG("close %llu us; the join %llu us, with %llu of %llu bytes back in the pool",
	       (unsigned long long)(run.t1 - run.t0), (unsigned long long)(tb1 - tb0),
	       (unsigned long long)(free_open - free0), (unsigned long long)(free_end - free0));
	ASSERT_LT(free0, free_end) TH_LOG("the teardown gave nothing back");
	EXPECT_LT(free_open, free_end) TH_LOG("the join waited for the whole teardown");
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
