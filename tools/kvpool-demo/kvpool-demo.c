// SPDX-License-Identifier: GPL-2.0
/*
 * kvpool-demo: a walk through the /dev/kvpool uAPI with two processes.
 *
 * The parent creates the space "demo", allocates blocks and maps the space.
 * A forked writer joins the same space by name on its own file descriptor,
 * allocates its own blocks and fills them with a pattern that names the block
 * id, the offset and the writer.  The parent reads those blocks through its
 * own mapping and checks every byte.  Then the parent frees its blocks and
 * the writer exits without freeing, so closing its descriptor is what returns
 * its blocks.  Every step prints what it did and what the module answered.
 *
 * usage: kvpool-demo [device]       (default /dev/kvpool)
 * Exit status: 0 when every step and every byte checked out, 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/kvpool.h>

#define DEMO_SPACE		"demo"
#define DEMO_BLOCK_BYTES	(64ULL << 10)
#define DEMO_QUOTA_BYTES	(16ULL << 20)
#define DEMO_MODE		0600
#define PARENT_BLOCKS		8
#define WRITER_BLOCKS		4
#define DEMO_TIMEOUT_S		60	/* a stuck step fails instead of hanging */
#define PATTERN_MAGIC		0x4b56ULL	/* "KV" */

static const char *dev_path = "/dev/kvpool";
static const char *who = "demo";	/* message prefix: demo or writer */
static int step_no;

/* The writer's report to the parent, over a pipe. */
struct writer_report {
	int32_t status;		/* 0, or the errno of the step that failed */
	uint32_t pid;
	uint32_t space_id;
	uint32_t count;
	uint32_t ids[WRITER_BLOCKS];
};

static void step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void step(const char *fmt, ...)
{
	va_list ap;

	printf("\n[%d] ", ++step_no);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

#define say(fmt, ...)	printf("    " fmt "\n", ##__VA_ARGS__)
#define fail(fmt, ...)	fprintf(stderr, "%s: FAIL: " fmt "\n", who, ##__VA_ARGS__)

static int do_ioctl(int fd, unsigned long req, void *arg, const char *name)
{
	int err;

	if (ioctl(fd, req, arg) == 0)
		return 0;
	err = errno;
	fail("%s: %s (errno %d)", name, strerror(err), err);
	errno = err;
	return -1;
}

static double mib(uint64_t bytes)
{
	return bytes / (1024.0 * 1024.0);
}

/*
 * The 64-bit word at byte offset @off of block @id, as written by @pid:
 * 0x4b56 ^ low 16 bits of the pid | block id (16 bits) | offset (32 bits).
 * Any byte read from the wrong block, offset or writer differs.
 */
static uint64_t pattern(uint32_t id, uint64_t off, uint32_t pid)
{
	return ((PATTERN_MAGIC ^ (pid & 0xffff)) << 48) |
	       ((uint64_t)(id & 0xffff) << 32) | (uint32_t)off;
}

static void fill_block(unsigned char *map, uint64_t block_bytes, uint32_t id, uint32_t pid)
{
	uint64_t *w = (uint64_t *)(map + (uint64_t)id * block_bytes);
	uint64_t off;

	for (off = 0; off < block_bytes; off += sizeof(*w))
		w[off / sizeof(*w)] = pattern(id, off, pid);
}

/* A fault while reading a mapping becomes an error, not a dead demo. */
static sigjmp_buf fault_jmp;
static volatile sig_atomic_t fault_armed;

static void on_fault(int sig)
{
	if (fault_armed)
		siglongjmp(fault_jmp, sig);
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * Check every byte of blocks @ids against @pid's pattern.  Returns the number
 * of bytes checked when all of them matched, -1 otherwise.
 */
static long long verify_blocks(const unsigned char *map, uint64_t block_bytes,
			       const uint32_t *ids, unsigned int n, uint32_t pid)
{
	volatile unsigned int i = 0;
	volatile uint64_t off = 0;
	volatile unsigned long long bad = 0;
	int sig;

	sig = sigsetjmp(fault_jmp, 1);
	if (sig) {
		fault_armed = 0;
		fail("%s reading block %u at offset %" PRIu64 ": the mapping does not reach it",
		     strsignal(sig), ids[i], (uint64_t)off);
		return -1;
	}
	fault_armed = 1;
	for (i = 0; i < n; i++) {
		const uint64_t *w = (const uint64_t *)(map + (uint64_t)ids[i] * block_bytes);

		for (off = 0; off < block_bytes; off += sizeof(*w)) {
			uint64_t want = pattern(ids[i], off, pid);
			uint64_t got = w[off / sizeof(*w)];

			if (got == want)
				continue;
			if (bad++ < 5)
				fail("block %u offset %" PRIu64 ": read 0x%016" PRIx64
				     ", expected 0x%016" PRIx64, ids[i], (uint64_t)off, got, want);
		}
	}
	fault_armed = 0;
	if (bad) {
		fail("%llu of %llu words differ", (unsigned long long)bad,
		     (unsigned long long)(n * block_bytes / sizeof(uint64_t)));
		return -1;
	}
	return (long long)(n * block_bytes);
}

/* What an admin would see now; absent files (no debugfs) are said so. */
static void show_file(const char *what, const char *path)
{
	char line[1024];
	FILE *f = fopen(path, "r");

	printf("    %s (%s):\n", what, path);
	if (!f) {
		printf("      unavailable: %s\n", strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f))
		printf("      %s", line);
	fclose(f);
}

static void print_ids(const char *what, const uint32_t *ids, unsigned int n)
{
	unsigned int i;

	printf("    %s:", what);
	for (i = 0; i < n; i++)
		printf(" %u", ids[i]);
	putchar('\n');
}

static int open_dev(void)
{
	int fd = open(dev_path, O_RDWR | O_CLOEXEC);
	int err = errno;

	if (fd < 0) {
		fail("open %s: %s%s", dev_path, strerror(err),
		     err == ENOENT ? " (is kvpool.ko loaded?)" : "");
		errno = err;
	}
	return fd;
}

static int space_open(int fd, uint32_t flags, struct kvpool_space_open *so)
{
	memset(so, 0, sizeof(*so));
	snprintf(so->name, sizeof(so->name), "%s", DEMO_SPACE);
	so->flags = flags;
	if (flags & KVPOOL_SPACE_CREATE) {
		so->mode = DEMO_MODE;
		so->block_bytes = DEMO_BLOCK_BYTES;
		so->quota_bytes = DEMO_QUOTA_BYTES;
		so->node_mask = 0;
		so->numa_policy = KVPOOL_NUMA_PREFERRED;
	}
	return do_ioctl(fd, KVPOOL_IOC_SPACE_OPEN, so, "KVPOOL_IOC_SPACE_OPEN");
}

static int blocks_ioctl(int fd, unsigned long req, const char *name, uint32_t *ids, unsigned int n)
{
	struct kvpool_blocks b;

	memset(&b, 0, sizeof(b));
	b.ids = (uintptr_t)ids;
	b.count = n;
	return do_ioctl(fd, req, &b, name);
}

static int space_info(int fd, struct kvpool_space_info *si)
{
	memset(si, 0, sizeof(*si));
	if (do_ioctl(fd, KVPOOL_IOC_SPACE_INFO, si, "KVPOOL_IOC_SPACE_INFO"))
		return -1;
	say("space %u: %" PRIu64 " blocks of %" PRIu64 " KiB; backed %" PRIu64
	    " (%.1f MiB), free %" PRIu64 ", owned %" PRIu64 " (mine %" PRIu64 ")",
	    si->space_id, (uint64_t)si->nr_blocks, (uint64_t)si->block_bytes >> 10,
	    (uint64_t)si->backed_blocks, mib(si->backed_bytes), (uint64_t)si->free_blocks,
	    (uint64_t)si->owned_blocks, (uint64_t)si->my_blocks);
	return 0;
}

static int pool_info(int fd, struct kvpool_info *info)
{
	memset(info, 0, sizeof(*info));
	return do_ioctl(fd, KVPOOL_IOC_INFO, info, "KVPOOL_IOC_INFO");
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t r = write(fd, p, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		len -= r;
	}
	return 0;
}

static ssize_t read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t r = read(fd, p + got, len - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += r;
	}
	return got;
}

/*
 * The writer: join "demo" by name on a new fd, allocate, fill, report the
 * ids, then wait until the parent has read them.  It never calls FREE.
 */
static int writer(int report_fd, int done_fd)
{
	struct writer_report rep;
	struct kvpool_space_open so;
	unsigned char *map;
	unsigned int i;
	char c;
	int fd;

	who = "writer";
	memset(&rep, 0, sizeof(rep));
	rep.pid = getpid();

	fd = open_dev();
	if (fd < 0)
		goto out_report;
	if (space_open(fd, 0, &so))
		goto out_report;
	rep.space_id = so.space_id;
	say("[writer %u] joined space \"%s\" (id %u) on its own fd; created=%u",
	    rep.pid, so.name, so.space_id, so.created);

	if (blocks_ioctl(fd, KVPOOL_IOC_ALLOC, "KVPOOL_IOC_ALLOC", rep.ids, WRITER_BLOCKS))
		goto out_report;
	rep.count = WRITER_BLOCKS;
	map = mmap(NULL, so.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rep.status = errno;
		fail("mmap %" PRIu64 " bytes: %s", (uint64_t)so.map_bytes, strerror(rep.status));
		goto out_report;
	}
	for (i = 0; i < rep.count; i++)
		fill_block(map, so.block_bytes, rep.ids[i], rep.pid);
	say("[writer %u] allocated and wrote %u blocks (%" PRIu64 " KiB); block %u starts 0x%016" PRIx64,
	    rep.pid, rep.count, rep.count * (uint64_t)so.block_bytes >> 10, rep.ids[0],
	    *(uint64_t *)(map + (uint64_t)rep.ids[0] * so.block_bytes));
	fflush(stdout);
	if (write_full(report_fd, &rep, sizeof(rep)))
		return 1;
	/* Keep the blocks until the parent is done with them. */
	while (read(done_fd, &c, 1) < 0 && errno == EINTR)
		;
	say("[writer %u] exiting without FREE: closing its fd returns its %u blocks",
	    rep.pid, rep.count);
	fflush(stdout);
	return 0;

out_report:
	if (!rep.status)
		rep.status = errno ? errno : EIO;
	rep.count = 0;
	fflush(stdout);
	write_full(report_fd, &rep, sizeof(rep));
	return 1;
}

int main(int argc, char **argv)
{
	uint32_t ids[PARENT_BLOCKS];
	struct kvpool_space_info si0, si;
	struct kvpool_space_open so;
	struct writer_report rep;
	struct kvpool_info info;
	int report[2], done[2];
	unsigned char *map;
	long long verified;
	unsigned int i, j;
	int fd, status = 0;
	pid_t pid;

	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: %s [device]   (default /dev/kvpool)\n", argv[0]);
		return 2;
	}
	if (argc == 2)
		dev_path = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGBUS, on_fault);
	signal(SIGSEGV, on_fault);
	alarm(DEMO_TIMEOUT_S);

	printf("kvpool-demo: two processes share KV blocks through %s\n", dev_path);
	fd = open_dev();
	if (fd < 0)
		return 1;

	step("KVPOOL_IOC_INFO: what the pool holds");
	if (pool_info(fd, &info))
		return 1;
	say("api version %u, features 0x%" PRIx64 "%s%s", info.api_version, (uint64_t)info.features,
	    info.features & KVPOOL_FEAT_SPACES ? " spaces" : "",
	    info.features & KVPOOL_FEAT_NUMA ? " numa" : "");
	say("page %u B, chunk %u KiB, max batch %u", info.page_size, info.chunk_size >> 10,
	    info.max_batch);
	say("%u node(s), mask 0x%" PRIx64 "; pool %.1f MiB, free %.1f MiB", info.nr_nodes,
	    (uint64_t)info.node_mask, mib(info.pool_bytes), mib(info.free_bytes));

	step("KVPOOL_IOC_SPACE_OPEN: create space \"%s\" (%llu KiB blocks, quota %llu MiB, mode %04o, PREFERRED)",
	     DEMO_SPACE, DEMO_BLOCK_BYTES >> 10, DEMO_QUOTA_BYTES >> 20, DEMO_MODE);
	if (space_open(fd, KVPOOL_SPACE_CREATE, &so))
		return 1;
	say("space id %u, owner %u:%u, %" PRIu64 " blocks, map %.1f MiB, %s",
	    so.space_id, so.uid, so.gid, (uint64_t)so.nr_blocks, mib(so.map_bytes),
	    so.created ? "created by this call" : "already existed; joined it");
	if (so.block_bytes != DEMO_BLOCK_BYTES) {
		fail("space has %" PRIu64 "-byte blocks, expected %llu",
		     (uint64_t)so.block_bytes, DEMO_BLOCK_BYTES);
		return 1;
	}

	step("KVPOOL_IOC_SPACE_INFO: before any allocation");
	if (space_info(fd, &si0))
		return 1;

	step("KVPOOL_IOC_ALLOC: %d blocks for this fd", PARENT_BLOCKS);
	if (blocks_ioctl(fd, KVPOOL_IOC_ALLOC, "KVPOOL_IOC_ALLOC", ids, PARENT_BLOCKS))
		return 1;
	print_ids("got block ids", ids, PARENT_BLOCKS);

	step("mmap: map the space's %.1f MiB, MAP_SHARED; block i at offset i * %llu",
	     mib(so.map_bytes), DEMO_BLOCK_BYTES);
	map = mmap(NULL, so.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		fail("mmap: %s", strerror(errno));
		return 1;
	}
	for (i = 0; i < PARENT_BLOCKS; i++)
		fill_block(map, so.block_bytes, ids[i], getpid());
	verified = verify_blocks(map, so.block_bytes, ids, PARENT_BLOCKS, getpid());
	if (verified < 0)
		return 1;
	say("mapped at %p; wrote and re-read %lld bytes of this process's blocks", (void *)map, verified);

	step("fork a writer that joins \"%s\" by name on its own fd", DEMO_SPACE);
	if (pipe(report) || pipe(done)) {
		fail("pipe: %s", strerror(errno));
		return 1;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		fail("fork: %s", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		close(report[0]);
		close(done[1]);
		close(fd);
		munmap(map, so.map_bytes);
		_exit(writer(report[1], done[0]));
	}
	close(report[1]);
	close(done[0]);
	memset(&rep, 0, sizeof(rep));
	if (read_full(report[0], &rep, sizeof(rep)) != (ssize_t)sizeof(rep)) {
		fail("the writer (pid %d) died before reporting", (int)pid);
		goto out_reap;
	}
	if (rep.status || rep.count != WRITER_BLOCKS) {
		fail("the writer failed: %s", strerror(rep.status));
		goto out_reap;
	}
	if (rep.space_id != so.space_id) {
		fail("the writer joined space %u, not %u", rep.space_id, so.space_id);
		goto out_reap;
	}
	print_ids("writer reported block ids", rep.ids, rep.count);
	for (i = 0; i < rep.count; i++)
		for (j = 0; j < PARENT_BLOCKS; j++)
			if (rep.ids[i] == ids[j]) {
				fail("block %u was handed to both processes", ids[j]);
				goto out_reap;
			}

	step("KVPOOL_IOC_SPACE_INFO: both processes hold blocks");
	if (space_info(fd, &si))
		goto out_reap;
	if (si.my_blocks != PARENT_BLOCKS ||
	    si.owned_blocks != si0.owned_blocks + PARENT_BLOCKS + WRITER_BLOCKS) {
		fail("expected mine %d and owned %" PRIu64, PARENT_BLOCKS,
		     (uint64_t)si0.owned_blocks + PARENT_BLOCKS + WRITER_BLOCKS);
		goto out_reap;
	}
	show_file("debugfs spaces, while both hold blocks", "/sys/kernel/debug/kvpool/spaces");
	show_file("debugfs nodes", "/sys/kernel/debug/kvpool/nodes");

	step("read the writer's blocks through this process's own mapping");
	verified = verify_blocks(map, so.block_bytes, rep.ids, rep.count, rep.pid);
	if (verified < 0)
		goto out_reap;
	say("reader verified %lld bytes written by pid %u", verified, rep.pid);

	step("KVPOOL_IOC_FREE: this fd's %d blocks", PARENT_BLOCKS);
	if (blocks_ioctl(fd, KVPOOL_IOC_FREE, "KVPOOL_IOC_FREE", ids, PARENT_BLOCKS))
		goto out_reap;
	if (space_info(fd, &si))
		goto out_reap;
	if (si.my_blocks != 0) {
		fail("%" PRIu64 " blocks still mine after FREE", (uint64_t)si.my_blocks);
		goto out_reap;
	}

	step("let the writer exit");
	close(done[1]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fail("the writer ended with status 0x%x", status);
		return 1;
	}
	say("writer %d exited with status 0", (int)pid);

	step("KVPOOL_IOC_SPACE_INFO: after the writer's fd closed");
	if (space_info(fd, &si))
		return 1;
	if (si.owned_blocks != si0.owned_blocks) {
		fail("%" PRIu64 " blocks owned, expected %" PRIu64 " as before the demo",
		     (uint64_t)si.owned_blocks, (uint64_t)si0.owned_blocks);
		return 1;
	}
	say("the writer's %u blocks went back when its fd closed: %" PRIu64 " backed, %" PRIu64 " free",
	    rep.count, (uint64_t)si.backed_blocks, (uint64_t)si.free_blocks);

	step("KVPOOL_IOC_INFO: the pool afterwards");
	if (pool_info(fd, &info))
		return 1;
	say("pool %.1f MiB, free %.1f MiB",
	    mib(info.pool_bytes), mib(info.free_bytes));

	munmap(map, so.map_bytes);
	close(fd);
	printf("\nkvpool-demo: PASS\n");
	return 0;

out_reap:
	close(done[1]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	printf("\nkvpool-demo: FAIL\n");
	return 1;
}
