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
#include "fuzz_harness.h"

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
