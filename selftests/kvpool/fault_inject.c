// SPDX-License-Identifier: GPL-2.0
/*
 * fault_inject: make every allocation on each of kvpool's allocating paths
 * fail, one at a time, and require a clean result each time.
 *
 * Not a *_test: it needs a kernel with CONFIG_FAULT_INJECTION,
 * CONFIG_FAILSLAB, CONFIG_FAIL_PAGE_ALLOC and CONFIG_FAULT_INJECTION_DEBUG_FS
 * (the debug lane's, selftests/debug/), so the regular VM lane does not run
 * it.  Where those files are missing it fails (exit status 1), so that a
 * lane cannot skip it silently.  It must run as root with the module loaded
 * from /kvpool.ko, in the selftests VM; it unloads and reloads the module and
 * leaves it loaded with the parameters it found.
 *
 * Selecting "the Nth allocation": /proc/thread-self/fail-nth
 * (Documentation/fault-injection/fault-injection.rst of 6.1: "intended for
 * systematic testing of faults in a single system call") makes exactly the
 * Nth fault point of this task fail and reads back 0 once it has fired.  A
 * fault point is a call into failslab or fail_page_alloc that passes that
 * capability's filters.  The debugfs knobs alone cannot aim at the Nth
 * call: "interval" counts in a per-attribute counter that cannot be reset,
 * "space" counts bytes, not calls, and times=1 with probability=100 only
 * ever hits the first call.  So the knobs let allocations through the
 * filters and inject nothing on their own (probability=0, interval=1,
 * space=0, times=-1, verbose=0, task-filter=Y, ignore-gfp-wait=N and, for
 * pages, ignore-gfp-highmem=N), /proc/self/make-it-fail is 1 for this
 * process only, and everything is restored at exit.
 *
 * Each path is swept in three passes, because the order of fault points is
 * only repeatable within one allocator: in the debug kernel SLUB refills a
 * cache with a page allocation whenever its slab runs out, which shifts the
 * page-allocation points in between the slab ones from one call to the
 * next, so a single mixed sweep can step over a kmalloc.
 *   slab     failslab only (fail_page_alloc min-order=100 hides pages):
 *            every kmalloc/kmem_cache_alloc, kmemleak's metadata included;
 *   page     fail_page_alloc only, min-order=0 (failslab cache-filter=Y
 *            with no cache marked hides slab): vmalloc pages, large
 *            kmallocs, chunks, slab refills;
 *   page>=4  the same with min-order=4: only the pool's 2 MiB and 64 KiB
 *            chunks and kmallocs of 64 KiB or more, in a repeatable order.
 * In each pass N runs from 1 upward: arm fail-nth with N, make the call,
 * disarm; when fail-nth did not fire, the call made fewer than N fault
 * points and the pass is done (K = N - 1).  After every call: the result is
 * 0 (the fault was absorbed, e.g. by a fallback) or the one errno the path
 * may return (ENOMEM; never EINTR), the all-or-nothing promises hold
 * (nothing allocated or freed by a failed ALLOC/FREE, no space left by a
 * failed create), the debugfs check says "ok", the object still works
 * without injection, and once everything is closed free_bytes, pool_bytes
 * and spaces are back at their baseline.
 *
 * Paths: open(/dev/kvpool); SPACE_OPEN create; SPACE_OPEN join; ALLOC that
 * grows the backing and kvcore's arrays (64 KiB blocks); ALLOC of 2048 4 KiB
 * blocks (xarray nodes, kvcore arrays and the ids buffer past kmalloc into
 * the vmalloc fallback); FREE of 100 and of 4096 ids (ids buffer);
 * RESIDENCY ADD of records on 64 blocks that have none (a record array
 * per block, xarray nodes: issue 30 item 12, a failed ADD left the arrays
 * it had reserved behind, empty, and the debugfs check flagged them); sysfs
 * pool_bytes growth; module load (finit_module after delete_module, with
 * pool_mb_per_node=4 to keep the sweep short; the pool growth loop is the
 * same code at any size), its N counted from the start of the module's
 * init by the module itself (fail_nth_at_init, kmod/main.c): the loader's
 * own points before it are the kernel's code, and took most of the sweep.  A module load that succeeds although its debugfs
 * files could not be created is counted, not failed: modules ignore debugfs
 * errors by kernel convention.
 *
 * The kernel log is read from /dev/kmsg for the program's own window:
 * "page allocation failure" / "vmalloc error" reports with their stack
 * dumps are what a failed allocation without __GFP_NOWARN prints and are
 * counted, not failed; KASAN, UBSAN, BUG:, WARNING:, lockdep, list
 * corruption, kmemleak leak reports or Oops lines fail the run.  The
 * runner's own dmesg scan matches "Call Trace" and so also sees the
 * expected reports: a lane that runs this program must scan with that in
 * mind.
 *
 * Output: TAP (kselftest harness), then counts per path and per errno.
 * Kernel command line: kvpool_fi_max=N caps N per pass (default 20000;
 * reaching it fails the path); kvpool_fi_only=a,b runs only the paths whose
 * test names contain one of the words (the others skip); kvpool_fi_trace=1
 * prints one line per injected fault.
 */
#include "kvpool_util.h"

#include <sys/klog.h>

#define MODULE_FILE	"/kvpool.ko"
#define MOD_SYSFS	"/sys/module/kvpool"
#define FI_LOAD_ARGS	"pool_mb_per_node=4"

/* The harness ends each test process with _exit(): flush every message. */
#define say(...) do { ksft_print_msg(__VA_ARGS__); fflush(stdout); } while (0)

/* The value of @key= on the kernel command line, or NULL. */
static const char *cmdline_str(const char *key)
{
	static char buf[4096];
	size_t klen = strlen(key);
	char *p;

	if (read_file("/proc/cmdline", buf, sizeof(buf)) < 0)
		return NULL;
	buf[strcspn(buf, "\n")] = '\0';
	for (p = buf; (p = strstr(p, key)); p += klen) {
		if ((p == buf || p[-1] == ' ') && p[klen] == '=') {
			p += klen + 1;
			p[strcspn(p, " ")] = '\0';
			return p;
		}
	}
	return NULL;
}

/* Whether @test is selected by kvpool_fi_only= (all are when it is absent). */
static bool selected(const char *test)
{
	const char *only = cmdline_str("kvpool_fi_only");
	char words[256], *w, *save = NULL;

	if (!only || !*only)
		return true;
	snprintf(words, sizeof(words), "%s", only);
	for (w = strtok_r(words, ",", &save); w; w = strtok_r(NULL, ",", &save))
		if (strstr(test, w))
			return true;
	return false;
}

static int trace;

/* ---- results shared across the harness's per-test processes ------------- */

#define MAX_PATHS	16
#define MAX_ERRNO	140

enum { PASS_SLAB, PASS_PAGE, PASS_PAGE4, NR_PASSES };

static const char *const pass_names[NR_PASSES] = { "slab", "page", "page>=4" };

struct path_result {
	char name[40];
	unsigned long k[NR_PASSES];	/* fault points the call made, per pass */
	unsigned long faults;		/* fault points that fired, all passes */
	unsigned long absorbed;		/* ... and the call still succeeded */
	unsigned long by_errno[MAX_ERRNO];
	unsigned long bad;		/* undocumented results or broken state */
	unsigned long no_debugfs;	/* loads that succeeded without debugfs files */
	int complete;			/* every pass ended with a call of < N points */
	double seconds;
};

struct results {
	int nr;
	struct path_result p[MAX_PATHS];
};

static struct results *res;

static void __attribute__((constructor)) results_init(void)
{
	res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(res, 0, sizeof(*res));
}

static struct path_result *new_path(const char *name)
{
	struct path_result *p = &res->p[res->nr < MAX_PATHS ? res->nr++ : MAX_PATHS - 1];

	snprintf(p->name, sizeof(p->name), "%s", name);
	return p;
}

/* ---- fault-injection knobs ------------------------------------------------- */

#define DBG	"/sys/kernel/debug/"

struct knob {
	const char *path;
	const char *value;
	char saved[32];
	int have_saved;
};

static struct knob knobs[] = {
	{ .path = DBG "failslab/ignore-gfp-wait", .value = "N" },
	{ .path = DBG "failslab/probability", .value = "0" },
	{ .path = DBG "failslab/interval", .value = "1" },
	{ .path = DBG "failslab/space", .value = "0" },
	{ .path = DBG "failslab/times", .value = "-1" },
	{ .path = DBG "failslab/verbose", .value = "0" },
	{ .path = DBG "failslab/task-filter", .value = "Y" },
	{ .path = DBG "fail_page_alloc/ignore-gfp-wait", .value = "N" },
	{ .path = DBG "fail_page_alloc/ignore-gfp-highmem", .value = "N" },
	{ .path = DBG "fail_page_alloc/min-order", .value = "100" },
	{ .path = DBG "failslab/cache-filter", .value = "Y" },
	{ .path = DBG "fail_page_alloc/probability", .value = "0" },
	{ .path = DBG "fail_page_alloc/interval", .value = "1" },
	{ .path = DBG "fail_page_alloc/space", .value = "0" },
	{ .path = DBG "fail_page_alloc/times", .value = "-1" },
	{ .path = DBG "fail_page_alloc/verbose", .value = "0" },
	{ .path = DBG "fail_page_alloc/task-filter", .value = "Y" },
};

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	errno = EIO;
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		ret = -errno;
	close(fd);
	return ret;
}

static int nth_fd = -1;

/* Arm: the @n-th fault point of this thread from now fails. */
static void arm(unsigned int n)
{
	char buf[16];
	int len = snprintf(buf, sizeof(buf), "%u", n);

	if (write(nth_fd, buf, len) != len) {
		perror("fail-nth");
		_exit(2);
	}
}

/* Disarm; the count that was left (0: the armed fault fired). */
static unsigned long disarm_left(void)
{
	char buf[16] = "";
	ssize_t n = pread(nth_fd, buf, sizeof(buf) - 1, 0);

	if (write(nth_fd, "0", 1) != 1 || n <= 0) {
		perror("fail-nth");
		_exit(2);
	}
	return strtoul(buf, NULL, 10);
}

/* Disarm; true when the armed fault fired. */
static bool disarm(void)
{
	return disarm_left() == 0;
}

/* Open one allocator's fault points and hide the other's (see the top). */
static int set_pass(int pass)
{
	static const char *const min_order[NR_PASSES] = { "0", "0", "4" };
	int ret;

	ret = write_str(DBG "failslab/cache-filter", pass == PASS_SLAB ? "N" : "Y");
	if (!ret)
		ret = write_str(DBG "fail_page_alloc/min-order",
				pass == PASS_SLAB ? "100" : min_order[pass]);
	return ret;
}

static void restore_knobs(void)
{
	size_t i;

	if (nth_fd >= 0) {
		if (write(nth_fd, "0", 1) != 1)
			perror("fail-nth");
	}
	write_str("/proc/self/make-it-fail", "0");
	for (i = 0; i < ARRAY_SIZE(knobs); i++)
		if (knobs[i].have_saved)
			write_str(knobs[i].path, knobs[i].saved);
}

/* 0, or a message naming what is missing. */
static const char *setup_knobs(void)
{
	static char why[256];
	size_t i;
	int n;

	if (access("/proc/thread-self/fail-nth", W_OK) ||
	    access("/proc/self/make-it-fail", W_OK))
		return "/proc/thread-self/fail-nth or /proc/self/make-it-fail missing: "
		       "kernel without CONFIG_FAULT_INJECTION";
	for (i = 0; i < ARRAY_SIZE(knobs); i++) {
		n = read_file(knobs[i].path, knobs[i].saved, sizeof(knobs[i].saved));
		if (n < 0) {
			snprintf(why, sizeof(why), "%s: %s (needs CONFIG_FAILSLAB, CONFIG_FAIL_PAGE_ALLOC, CONFIG_FAULT_INJECTION_DEBUG_FS and debugfs)",
				 knobs[i].path, strerror(-n));
			return why;
		}
		knobs[i].saved[strcspn(knobs[i].saved, "\n")] = '\0';
		knobs[i].have_saved = 1;
	}
	for (i = 0; i < ARRAY_SIZE(knobs); i++) {
		n = write_str(knobs[i].path, knobs[i].value);
		if (n) {
			snprintf(why, sizeof(why), "writing %s to %s: %s", knobs[i].value,
				 knobs[i].path, strerror(-n));
			return why;
		}
	}
	if (write_str("/proc/self/make-it-fail", "1"))
		return "cannot write /proc/self/make-it-fail";
	nth_fd = open("/proc/thread-self/fail-nth", O_RDWR | O_CLOEXEC);
	if (nth_fd < 0)
		return "cannot open /proc/thread-self/fail-nth";
	/*
	 * Keep user pages resident, so that a fault point inside a syscall
	 * is the kernel's own allocation, not a page fault on our buffers.
	 */
	if (mlockall(MCL_CURRENT))
		return "mlockall failed";
	return NULL;
}

/* ---- module helpers ---------------------------------------------------------- */

static long sys_delete_module(const char *name, unsigned int flags)
{
	return syscall(SYS_delete_module, name, flags);
}

/* finit_module with args, no fault armed: 0 or -errno. */
static int load_module(const char *args)
{
	int fd = open(MODULE_FILE, O_RDONLY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (syscall(SYS_finit_module, fd, args, 0))
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * A count the module loader cannot use up before kvp_init: armed with it,
 * the thread reads back near it after a load whose module ignored
 * fail_nth_at_init, where 0 would pass for a fault that fired.
 */
#define FI_FAR	1000000000u

/*
 * finit_module with fail_nth_at_init=n: the nth fault point from the start
 * of the module's init fails (kmod/main.c).  *fired as disarm() says;
 * *hooked false when the module did not take the count over.
 */
static int load_module_failing_init(unsigned int n, bool *fired, bool *hooked)
{
	char args[96];
	unsigned long left;
	int fd = open(MODULE_FILE, O_RDONLY | O_CLOEXEC);
	int ret = 0;

	*fired = false;
	*hooked = true;
	if (fd < 0)
		return -errno;
	snprintf(args, sizeof(args), "%s fail_nth_at_init=%u", FI_LOAD_ARGS, n);
	arm(FI_FAR);
	if (syscall(SYS_finit_module, fd, args, 0))
		ret = -errno;
	left = disarm_left();
	close(fd);
	*fired = left == 0;
	*hooked = left < FI_FAR / 2;
	return ret;
}

static bool module_loaded(void)
{
	return access(MOD_SYSFS, F_OK) == 0;
}

/* ---- per-test fixture ---------------------------------------------------------- */

FIXTURE(fi) {
	__u64 free0, pool0, spaces0;
	__u32 nr_nodes;
	unsigned long max_n;
	struct timespec t0;
	struct path_result *cur;
};

FIXTURE_SETUP(fi)
{
	struct kvpool_info info;
	const char *why;

	if (!selected(_metadata->name))
		SKIP(return, "not in kvpool_fi_only=");
	why = setup_knobs();
	trace = kv_cmdline_ulong("kvpool_fi_trace", 0);
	ASSERT_EQ(NULL, why) TH_LOG("fault injection unavailable: %s", why);
	ASSERT_TRUE(module_loaded()) TH_LOG("kvpool is not loaded");
	ASSERT_EQ(0, kv_pool_info(&info));
	self->nr_nodes = info.nr_nodes;
	ASSERT_EQ(0, sysfs_u64("free_bytes", &self->free0));
	ASSERT_EQ(0, sysfs_u64("pool_bytes", &self->pool0));
	ASSERT_EQ(0, sysfs_u64("spaces", &self->spaces0));
	ASSERT_EQ(self->pool0, self->free0) TH_LOG("the pool is in use before the test");
	self->max_n = kv_cmdline_ulong("kvpool_fi_max", 20000);
	clock_gettime(CLOCK_MONOTONIC, &self->t0);
}

/* The module_load path's original parameters, to put the module back. */
static char restore_args[64];

FIXTURE_TEARDOWN(fi)
{
	struct path_result *p = self->cur;
	struct timespec t1;
	char buf[32];

	restore_knobs();
	if (restore_args[0]) {
		/* module_load stopped half-way: reload as it was found. */
		if (module_loaded() &&
		    (read_file(MOD_SYSFS "/parameters/pool_mb_per_node", buf, sizeof(buf)) < 0 ||
		     strncmp(restore_args + strlen("pool_mb_per_node="), buf,
			     strcspn(buf, "\n"))))
			sys_delete_module("kvpool", O_NONBLOCK);
		if (!module_loaded() && load_module(restore_args))
			say("could not load kvpool back with %s\n", restore_args);
	}
	if (!p)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	p->seconds = (t1.tv_sec - self->t0.tv_sec) + (t1.tv_nsec - self->t0.tv_nsec) / 1e9;
	say("%-22s K=%lu/%lu/%lu faults=%lu absorbed=%lu ENOMEM=%lu bad=%lu no_debugfs=%lu %s (%.1f s)\n",
	    p->name, p->k[PASS_SLAB], p->k[PASS_PAGE], p->k[PASS_PAGE4], p->faults,
	    p->absorbed, p->by_errno[ENOMEM], p->bad, p->no_debugfs,
	    p->complete ? "complete" : "INCOMPLETE", p->seconds);
}

/* Record the outcome of one armed call; false when it is not acceptable. */
static bool account(struct __test_metadata *_metadata, struct path_result *p,
		    int pass, unsigned int n, int ret)
{
	p->faults++;
	if (trace)
		say("%s: %s fault %u: %s\n", p->name, pass_names[pass], n,
		    ret ? strerror(-ret) : "absorbed");
	if (ret == 0) {
		p->absorbed++;
		return true;
	}
	if (-ret > 0 && -ret < MAX_ERRNO)
		p->by_errno[-ret]++;
	if (ret == -ENOMEM)
		return true;
	p->bad++;
	TH_LOG("%s: %s fault %u surfaced as %s (only ENOMEM is documented)", p->name,
	       pass_names[pass], n, strerror(-ret));
	return false;
}

static bool check_ok(struct __test_metadata *_metadata, const char *what, unsigned int n)
{
	char ck[512];
	int r = kv_check(ck, sizeof(ck));

	if (r == 1)
		return true;
	TH_LOG("%s, fault %u: debugfs check: %s", what, n, r < 0 ? strerror(-r) : ck);
	return false;
}

static bool at_baseline(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
			const char *what, unsigned int n)
{
	__u64 free_b = sysfs_wait_eq("free_bytes", self->free0, 1000);
	__u64 pool = sysfs_get("pool_bytes"), spaces = sysfs_get("spaces");

	if (free_b == self->free0 && pool == self->pool0 && spaces == self->spaces0 &&
	    check_ok(_metadata, what, n))
		return true;
	TH_LOG("%s, fault %u: after closing everything free_bytes %llu (want %llu), pool_bytes %llu (want %llu), spaces %llu (want %llu)",
	       what, n, (unsigned long long)free_b, (unsigned long long)self->free0,
	       (unsigned long long)pool, (unsigned long long)self->pool0,
	       (unsigned long long)spaces, (unsigned long long)self->spaces0);
	return false;
}

/*
 * One armed call of a path with fault point @n: set up, arm, call, disarm,
 * account, check, clean up.  Sets *fired to whether the fault fired; when
 * it did not, the call must have succeeded.
 */
typedef void (*one_call)(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
			 struct path_result *p, int pass, unsigned int n, bool *fired);

static void sweep(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		  struct path_result *p, one_call one)
{
	unsigned int n;
	int pass;
	bool fired;

	p->complete = 1;
	for (pass = 0; pass < NR_PASSES; pass++) {
		ASSERT_EQ(0, set_pass(pass));
		for (n = 1; n <= self->max_n; n++) {
			fired = false;
			one(_metadata, self, p, pass, n, &fired);
			if (!fired)
				break;
		}
		p->k[pass] = n - 1;
		if (n > self->max_n) {
			p->complete = 0;
			TH_LOG("%s: %s pass still firing at N=%lu (kvpool_fi_max)", p->name,
			       pass_names[pass], self->max_n);
		}
	}
	ASSERT_TRUE(p->complete);
}

/* ---- the paths -------------------------------------------------------------------- */

static char name_buf[KVPOOL_NAME_MAX];

static const char *fresh_name(const char *tag)
{
	kv_name(name_buf, sizeof(name_buf), tag);
	return name_buf;
}

static void one_open(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		     struct path_result *p, int pass, unsigned int n, bool *fired)
{
	struct kvpool_info info;
	int fd, ret;

	arm(n);
	fd = open(KV_DEV, O_RDWR | O_CLOEXEC);
	ret = fd < 0 ? -errno : 0;
	*fired = disarm();
	if (!*fired) {
		ASSERT_LE(0, fd) TH_LOG("open without a fault: %s", strerror(-ret));
		close(fd);
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	if (fd >= 0) {
		ASSERT_EQ(0, kv_info(fd, &info));
		close(fd);
	}
	ASSERT_TRUE(at_baseline(_metadata, self, p->name, n));
}

TEST_F_TIMEOUT(fi, open_dev, 1800)
{
	RETURN_IF_SKIPPED();
	sweep(_metadata, self, self->cur = new_path("open"), one_open);
}

static void one_create(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		       struct path_result *p, int pass, unsigned int n, bool *fired)
{
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	int fd, ret;

	fd = kv_open();
	ASSERT_LE(0, fd);
	kv_so_init(&so, fresh_name("fi-create"), KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
		   64 * KiB, 4 * MiB);
	arm(n);
	ret = kv_space_open(fd, &so);
	*fired = disarm();
	if (!*fired) {
		ASSERT_EQ(0, ret);
		close(fd);
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	if (ret) {
		/* Not joined, no space left behind, and the fd still works. */
		EXPECT_EQ(-EBADFD, kv_space_info(fd, &si));
		EXPECT_EQ(self->spaces0, sysfs_get("spaces"));
		/* A failed call may have written part of the out fields: start afresh. */
		memset(&so.space_id, 0, offsetof(struct kvpool_space_open, expect_uid) -
					offsetof(struct kvpool_space_open, space_id));
		ASSERT_EQ(0, kv_space_open(fd, &so));
	}
	ASSERT_EQ(0, kv_space_info(fd, &si));
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
	close(fd);
	ASSERT_TRUE(at_baseline(_metadata, self, p->name, n));
}

TEST_F_TIMEOUT(fi, space_open_create, 1800)
{
	RETURN_IF_SKIPPED();
	sweep(_metadata, self, self->cur = new_path("SPACE_OPEN create"), one_create);
}

static char join_name[KVPOOL_NAME_MAX];

static void one_join(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		     struct path_result *p, int pass, unsigned int n, bool *fired)
{
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	int fd, ret;

	fd = kv_open();
	ASSERT_LE(0, fd);
	kv_so_init(&so, join_name, 0, 0, 0);
	arm(n);
	ret = kv_space_open(fd, &so);
	*fired = disarm();
	if (!*fired) {
		ASSERT_EQ(0, ret);
		close(fd);
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	if (ret) {
		kv_so_init(&so, join_name, 0, 0, 0);
		ASSERT_EQ(0, kv_space_open(fd, &so));
	}
	ASSERT_EQ(0, kv_space_info(fd, &si));
	close(fd);
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
}

TEST_F_TIMEOUT(fi, space_open_join, 1800)
{
	int owner;

	RETURN_IF_SKIPPED();
	snprintf(join_name, sizeof(join_name), "%s", fresh_name("fi-join"));
	owner = kv_open_create(join_name, 64 * KiB, 4 * MiB, NULL);
	ASSERT_LE(0, owner);
	sweep(_metadata, self, self->cur = new_path("SPACE_OPEN join"), one_join);
	close(owner);
	ASSERT_TRUE(at_baseline(_metadata, self, "SPACE_OPEN join", 0));
}

static __u32 ids_a[8192], ids_b[8192];

/* The geometry of the ALLOC and FREE sweeps. */
static struct {
	__u64 block, quota;
	__u32 pre, count;
} geo;

/*
 * ALLOC geo.count blocks on a fresh space in which geo.pre blocks are
 * already allocated.
 */
static void one_alloc(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		      struct path_result *p, int pass, unsigned int n, bool *fired)
{
	struct kvpool_space_info before, after;
	int fd, ret;

	fd = kv_open_create(fresh_name("fi-alloc"), geo.block, geo.quota, NULL);
	ASSERT_LE(0, fd);
	if (geo.pre)
		ASSERT_EQ(0, kv_alloc(fd, ids_a, geo.pre));
	ASSERT_EQ(0, kv_space_info(fd, &before));
	arm(n);
	ret = kv_alloc(fd, ids_b, geo.count);
	*fired = disarm();
	if (!*fired) {
		ASSERT_EQ(0, ret);
		close(fd);
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	ASSERT_EQ(0, kv_space_info(fd, &after));
	if (trace)
		say("  backed %llu -> %llu blocks, %llu -> %llu bytes; mine %llu -> %llu\n",
		    (unsigned long long)before.backed_blocks,
		    (unsigned long long)after.backed_blocks,
		    (unsigned long long)before.backed_bytes,
		    (unsigned long long)after.backed_bytes,
		    (unsigned long long)before.my_blocks,
		    (unsigned long long)after.my_blocks);
	if (ret) {
		/* All or nothing: no block changed hands. */
		EXPECT_EQ(before.my_blocks, after.my_blocks);
		EXPECT_EQ(before.owned_blocks, after.owned_blocks);
		ASSERT_TRUE(check_ok(_metadata, p->name, n));
		/* And the space recovers: the same call now succeeds. */
		ASSERT_EQ(0, kv_alloc(fd, ids_b, geo.count))
			TH_LOG("%s: ALLOC after fault %u", p->name, n);
		ASSERT_EQ(0, kv_space_info(fd, &after));
	}
	EXPECT_EQ(before.my_blocks + geo.count, after.my_blocks);
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
	close(fd);
	ASSERT_TRUE(at_baseline(_metadata, self, p->name, n));
}

TEST_F_TIMEOUT(fi, alloc_grow_backing_and_arrays, 1800)
{
	RETURN_IF_SKIPPED();
	/*
	 * 60 of 256 blocks held (2 chunks, kvcore capacity 64); 100 more need
	 * 3 chunks and kvcore's arrays grow to 256 entries.
	 */
	geo.block = 64 * KiB;
	geo.quota = 16 * MiB;
	geo.pre = 60;
	geo.count = 100;
	sweep(_metadata, self, self->cur = new_path("ALLOC grow"), one_alloc);
}

TEST_F_TIMEOUT(fi, alloc_2048_small_blocks, 1800)
{
	RETURN_IF_SKIPPED();
	/*
	 * 8 MiB of 4 KiB pages in one call: 32 xarray leaf nodes under an
	 * inner one, 16 KiB and 8 KiB kvcore arrays and an 8 KiB ids buffer,
	 * all above a page (kvmalloc: kmalloc, then vmalloc).  4096 blocks
	 * reached no other path and took 165 s of the sweep's 435 s in the
	 * debug lane; each fault point costs one whole ALLOC.
	 */
	geo.block = 4 * KiB;
	geo.quota = 32 * MiB;
	geo.pre = 0;
	geo.count = 2048;
	sweep(_metadata, self, self->cur = new_path("ALLOC 2048 x 4 KiB"), one_alloc);
}

/* FREE geo.count of geo.pre blocks held. */
static void one_free(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		     struct path_result *p, int pass, unsigned int n, bool *fired)
{
	struct kvpool_space_info before, after;
	int fd, ret;

	fd = kv_open_create(fresh_name("fi-free"), geo.block, geo.quota, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids_a, geo.pre));
	ASSERT_EQ(0, kv_space_info(fd, &before));
	arm(n);
	ret = kv_free(fd, ids_a, geo.count);
	*fired = disarm();
	if (!*fired) {
		ASSERT_EQ(0, ret);
		close(fd);
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	ASSERT_EQ(0, kv_space_info(fd, &after));
	if (ret) {
		EXPECT_EQ(before.my_blocks, after.my_blocks);
		ASSERT_TRUE(check_ok(_metadata, p->name, n));
		ASSERT_EQ(0, kv_free(fd, ids_a, geo.count));
		ASSERT_EQ(0, kv_space_info(fd, &after));
	}
	EXPECT_EQ(before.my_blocks - geo.count, after.my_blocks);
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
	close(fd);
	ASSERT_TRUE(at_baseline(_metadata, self, p->name, n));
}

TEST_F_TIMEOUT(fi, free_100, 1800)
{
	RETURN_IF_SKIPPED();
	geo.block = 4 * KiB;
	geo.quota = 32 * MiB;
	geo.pre = 200;
	geo.count = 100;
	sweep(_metadata, self, self->cur = new_path("FREE 100"), one_free);
}

TEST_F_TIMEOUT(fi, free_4096, 1800)
{
	RETURN_IF_SKIPPED();
	geo.block = 4 * KiB;
	geo.quota = 32 * MiB;
	geo.pre = 4096;
	geo.count = 4096;
	sweep(_metadata, self, self->cur = new_path("FREE 4096"), one_free);
}

/*
 * RESIDENCY ADD of geo.count fresh blocks: a failure leaves no record, no
 * empty record array (the debugfs check, with the fd still open) and no
 * device slot taken; the same call then succeeds.
 */
static void one_residency_add(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
			      struct path_result *p, int pass, unsigned int n, bool *fired)
{
	static struct kvpool_residency_entry ents[KVPOOL_MAX_BATCH];
	__u32 i, slot = ~0U;
	__u8 uuid[16];
	int fd, ret;

	fd = kv_open_create(fresh_name("fi-res"), geo.block, geo.quota, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids_a, geo.count));
	memset(ents, 0, sizeof(ents));
	for (i = 0; i < geo.count; i++) {
		ents[i].block = ids_a[i];
		ents[i].gpu_block = i;
	}
	kv_uuid(uuid, 7);
	arm(n);
	ret = kv_residency(fd, uuid, KVPOOL_RESIDENCY_ADD, ents, geo.count, &slot);
	*fired = disarm();
	if (!*fired) {
		ASSERT_EQ(0, ret);
		close(fd);
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	/* Checked while the fd, and so anything it left, is still there. */
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
	if (ret)
		ASSERT_EQ(0, kv_residency(fd, uuid, KVPOOL_RESIDENCY_ADD, ents, geo.count, &slot))
			TH_LOG("%s: ADD after fault %u", p->name, n);
	ASSERT_EQ(0, slot);
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
	close(fd);
	ASSERT_TRUE(at_baseline(_metadata, self, p->name, n));
}

TEST_F_TIMEOUT(fi, residency_add, 1800)
{
	RETURN_IF_SKIPPED();
	geo.block = 64 * KiB;
	geo.quota = 8 * MiB;
	geo.count = 64;
	sweep(_metadata, self, self->cur = new_path("RESIDENCY ADD 64"), one_residency_add);
}

static char grow_to[32], grow_base[32];

static void one_grow(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		     struct path_result *p, int pass, unsigned int n, bool *fired)
{
	int fd, ret;

	fd = open(KV_SYSFS "/pool_bytes", O_WRONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	arm(n);
	ret = write(fd, grow_to, strlen(grow_to)) == (ssize_t)strlen(grow_to) ? 0 : -errno;
	*fired = disarm();
	close(fd);
	if (!*fired) {
		ASSERT_EQ(0, ret);
		ASSERT_EQ(0, sysfs_write("pool_bytes", grow_base));
		ASSERT_EQ(self->pool0, sysfs_get("pool_bytes"));
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	/* Whatever was allocated stays (ABI), and adds up. */
	ASSERT_TRUE(check_ok(_metadata, p->name, n));
	EXPECT_EQ(sysfs_get("pool_bytes"), sysfs_get("free_bytes"));
	/* Back to the old size in one write: shrinking frees free chunks. */
	ASSERT_EQ(0, sysfs_write("pool_bytes", grow_base));
	ASSERT_TRUE(at_baseline(_metadata, self, p->name, n));
}

TEST_F_TIMEOUT(fi, sysfs_pool_bytes_grow, 1800)
{
	RETURN_IF_SKIPPED();
	/* 4 MiB more on each node: two chunks per node. */
	snprintf(grow_to, sizeof(grow_to), "%llu",
		 (unsigned long long)(self->pool0 + 4 * MiB * self->nr_nodes));
	snprintf(grow_base, sizeof(grow_base), "%llu", (unsigned long long)self->pool0);
	sweep(_metadata, self, self->cur = new_path("sysfs pool_bytes grow"), one_grow);
}

static void one_load(struct __test_metadata *_metadata, FIXTURE_DATA(fi) *self,
		     struct path_result *p, int pass, unsigned int n, bool *fired)
{
	__u64 want = 4 * MiB * self->nr_nodes;
	struct kvpool_info info;
	bool hooked = true;
	int ret, fd;

	ret = load_module_failing_init(n, fired, &hooked);
	ASSERT_TRUE(hooked)
		TH_LOG("kvpool.ko ignored fail_nth_at_init (built without CONFIG_FAULT_INJECTION?)");
	if (!*fired) {
		ASSERT_EQ(0, ret) TH_LOG("finit_module without a fault: %s", strerror(-ret));
		ASSERT_TRUE(check_ok(_metadata, p->name, n));
		ASSERT_EQ(0, sys_delete_module("kvpool", O_NONBLOCK));
		return;
	}
	ASSERT_TRUE(account(_metadata, p, pass, n, ret));
	if (ret) {
		/* Nothing of the failed load may remain. */
		if (module_loaded() || !access(KV_DEV, F_OK)) {
			p->bad++;
			ASSERT_TRUE(false)
				TH_LOG("fault %u: finit_module failed with %s but %s%s remains", n,
				       strerror(-ret), module_loaded() ? MOD_SYSFS " " : "",
				       access(KV_DEV, F_OK) ? "" : KV_DEV);
		}
		return;
	}
	/*
	 * Loaded despite the fault: it must be complete and consistent.  The
	 * one exception is debugfs, whose errors a module ignores by kernel
	 * convention: a load without its debugfs files is counted (and
	 * reported), not failed, when the device works.
	 */
	fd = kv_open();
	if (fd < 0 || kv_info(fd, &info) || info.pool_bytes != want ||
	    info.free_bytes != want || sysfs_get("pool_bytes") != want) {
		p->bad++;
		TH_LOG("fault %u absorbed, but the device does not work: open %s, pool_bytes %llu (want %llu)",
		       n, fd < 0 ? strerror(errno) : "ok",
		       (unsigned long long)sysfs_get("pool_bytes"), (unsigned long long)want);
	}
	if (fd >= 0)
		close(fd);
	if (access(KV_CHECK, F_OK))
		p->no_debugfs++;
	else if (!check_ok(_metadata, p->name, n))
		p->bad++;
	ASSERT_EQ(0, sys_delete_module("kvpool", O_NONBLOCK))
		TH_LOG("fault %u: delete_module after an absorbed fault: %s", n, strerror(errno));
	ASSERT_EQ(0, p->bad);
}

TEST_F_TIMEOUT(fi, module_load, 3600)
{
	char *args = restore_args, buf[32];
	int ret;

	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, access(MODULE_FILE, R_OK)) TH_LOG("%s: %s", MODULE_FILE, strerror(errno));
	ASSERT_LT(0, read_file(MOD_SYSFS "/parameters/pool_mb_per_node", buf, sizeof(buf)));
	snprintf(restore_args, sizeof(restore_args), "pool_mb_per_node=%lu",
		 strtoul(buf, NULL, 10));
	ASSERT_EQ(0, sys_delete_module("kvpool", O_NONBLOCK))
		TH_LOG("delete_module: %s", strerror(errno));
	self->cur = new_path("module load");
	sweep(_metadata, self, self->cur, one_load);
	/* Leave the module as we found it (the teardown cannot ASSERT). */
	if (module_loaded())
		sys_delete_module("kvpool", O_NONBLOCK);
	ret = load_module(args);
	ASSERT_EQ(0, ret) TH_LOG("reloading with %s: %s", args, strerror(-ret));
	ASSERT_TRUE(at_baseline(_metadata, self, "module load", 0));
}

/* ---- kernel log of our own window ---------------------------------------------- */

static int kmsg_fd = -1;

static void __attribute__((constructor)) kmsg_start(void)
{
	kmsg_fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (kmsg_fd >= 0)
		lseek(kmsg_fd, 0, SEEK_END);
}

/* A fixture declared after fi, so that its test runs after all of fi's. */
FIXTURE(report) {
	int unused;
};

FIXTURE_SETUP(report)
{
}

FIXTURE_TEARDOWN(report)
{
}

TEST_F(report, kernel_log_and_totals)
{
	/* What fails the run. */
	static const char *const splat[] = {
		"BUG:", "WARNING:", "KASAN", "UBSAN", "suspected memory leak",
		"kmemleak_object", "leak detector disabled", "possible circular locking",
		"possible recursive locking", "inconsistent lock state",
		"suspicious RCU usage", "bad unlock balance", "DEBUG_LOCKS_WARN_ON",
		"Oops", "general protection", "list_add corruption", "list_del corruption",
		"Kernel panic", "blocked for more than", "INFO: task",
	};
	/* What a failed allocation prints: counted, not failed. */
	static const char *const expected[] = {
		"page allocation failure", "vmalloc error", "vmap allocation",
		"kmemleak: Cannot allocate a scan area",
	};
	unsigned long faults = 0, absorbed = 0, bad = 0, no_debugfs = 0;
	unsigned long by_errno[MAX_ERRNO] = { 0 };
	unsigned long alloc_reports = 0, splats = 0;
	char rec[8192];
	int i, e;

	ASSERT_LE(0, kmsg_fd) TH_LOG("/dev/kmsg: %s", strerror(errno));
	for (;;) {
		ssize_t n = read(kmsg_fd, rec, sizeof(rec) - 1);
		char *msg;
		size_t k;

		if (n < 0 && errno == EPIPE)
			continue;	/* overwritten records: go on with the next */
		if (n <= 0)
			break;
		rec[n] = '\0';
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		for (k = 0; k < ARRAY_SIZE(expected); k++)
			if (strstr(msg, expected[k]))
				alloc_reports++;
		for (k = 0; k < ARRAY_SIZE(splat); k++) {
			if (strstr(msg, splat[k])) {
				splats++;
				TH_LOG("kernel log: %.*s", (int)strcspn(msg, "\n"), msg);
				break;
			}
		}
	}
	for (i = 0; i < res->nr; i++) {
		faults += res->p[i].faults;
		absorbed += res->p[i].absorbed;
		bad += res->p[i].bad;
		no_debugfs += res->p[i].no_debugfs;
		for (e = 0; e < MAX_ERRNO; e++)
			by_errno[e] += res->p[i].by_errno[e];
	}
	say("paths=%d injected faults=%lu absorbed (call succeeded)=%lu undocumented=%lu\n",
	    res->nr, faults, absorbed, bad);
	for (e = 1; e < MAX_ERRNO; e++)
		if (by_errno[e])
			say("  surfaced as %s: %lu\n", strerror(e), by_errno[e]);
	say("per path: fault points per pass (slab/page/page>=4), outcomes, time:\n");
	for (i = 0; i < res->nr; i++)
		say("  %-22s K=%lu/%lu/%lu: %lu absorbed, %lu ENOMEM, %lu other; %.1f s\n",
		    res->p[i].name, res->p[i].k[PASS_SLAB], res->p[i].k[PASS_PAGE],
		    res->p[i].k[PASS_PAGE4], res->p[i].absorbed, res->p[i].by_errno[ENOMEM],
		    res->p[i].bad, res->p[i].seconds);
	if (no_debugfs)
		say("module loads that succeeded without their debugfs files: %lu\n", no_debugfs);
	say("kernel log: %lu allocation-failure reports (expected; their stack dumps match the runner's \"Call Trace\"), %lu splat lines\n",
	    alloc_reports, splats);
	EXPECT_EQ(0, splats);
	EXPECT_EQ(0, bad);
}

TEST_HARNESS_MAIN
