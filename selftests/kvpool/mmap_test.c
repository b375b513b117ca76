// SPDX-License-Identifier: GPL-2.0
/*
 * mmap_test: mapping a space.  The mmap errnos, SIGBUS on pages that are
 * not backed yet, chunks that appear in existing mappings, the paths that
 * go through the space's own address_space (and an mmap racing the join
 * that switches an fd to it), and proofs that
 * the mapping is made of ordinary pages that get_user_pages() accepts:
 * process_vm_readv/process_vm_writev against another process's mapping,
 * and O_DIRECT I/O between a loop block device and the mapping.
 */
#include "kvpool_util.h"

#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>
#include <linux/loop.h>

#define BLOCK	(64 * KiB)
#define QUOTA	(8 * MiB)	/* 128 blocks, 4 chunks */
#define BPC	(KV_CHUNK / BLOCK)	/* blocks per chunk: 32 */

FIXTURE(map) {
	int fd;		/* joined */
	int fd_unjoined;
	char name[KVPOOL_NAME_MAX];
	struct kvpool_space_open so;
	size_t page;
};

FIXTURE_SETUP(map)
{
	self->page = getpagesize();
	kv_name(self->name, sizeof(self->name), "mmap");
	self->fd = kv_open_create(self->name, BLOCK, QUOTA, &self->so);
	ASSERT_LE(0, self->fd) TH_LOG("create: %s", strerror(-self->fd));
	ASSERT_EQ(QUOTA, self->so.map_bytes);
	self->fd_unjoined = kv_open();
	ASSERT_LE(0, self->fd_unjoined);
}

FIXTURE_TEARDOWN(map)
{
	close(self->fd_unjoined);
	close(self->fd);
}

/* mmap returning -errno or 0 (and unmapping what it got). */
static int try_mmap(int fd, size_t len, int prot, int flags, off_t off)
{
	void *p = mmap(NULL, len, prot, flags, fd, off);

	if (p == MAP_FAILED)
		return -errno;
	munmap(p, len);
	return 0;
}

/* ---- errnos --------------------------------------------------------------- */

TEST_F(map, mmap_unjoined_ebadfd)
{
	EXPECT_EQ(-EBADFD, try_mmap(self->fd_unjoined, self->page,
				    PROT_READ | PROT_WRITE, MAP_SHARED, 0));
	EXPECT_EQ(-EBADFD, try_mmap(self->fd_unjoined, self->page,
				    PROT_READ, MAP_SHARED, 0));
}

TEST_F(map, mmap_private_einval)
{
	EXPECT_EQ(-EINVAL, try_mmap(self->fd, QUOTA, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE, 0));
	EXPECT_EQ(-EINVAL, try_mmap(self->fd, self->page, PROT_READ,
				    MAP_PRIVATE, 0));
}

TEST_F(map, mmap_exec_eperm)
{
	EXPECT_EQ(-EPERM, try_mmap(self->fd, QUOTA, PROT_READ | PROT_EXEC,
				   MAP_SHARED, 0));
	EXPECT_EQ(-EPERM, try_mmap(self->fd, QUOTA,
				   PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_SHARED, 0));
	EXPECT_EQ(-EPERM, try_mmap(self->fd, self->page, PROT_EXEC,
				   MAP_SHARED, 0));
}

TEST_F(map, mprotect_adding_exec_fails)
{
	char *m;

	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	EXPECT_EQ(-1, mprotect(m, QUOTA, PROT_READ | PROT_WRITE | PROT_EXEC));
	EXPECT_EQ(-1, mprotect(m, self->page, PROT_READ | PROT_EXEC));
	/* Dropping write and adding it back is fine. */
	EXPECT_EQ(0, mprotect(m, QUOTA, PROT_READ));
	EXPECT_EQ(0, mprotect(m, QUOTA, PROT_READ | PROT_WRITE));
	munmap(m, QUOTA);
}

TEST_F(map, mmap_past_end_enxio)
{
	const int rw = PROT_READ | PROT_WRITE;
	size_t pg = self->page;

	EXPECT_EQ(-ENXIO, try_mmap(self->fd, QUOTA + pg, rw, MAP_SHARED, 0));
	EXPECT_EQ(-ENXIO, try_mmap(self->fd, pg, rw, MAP_SHARED, QUOTA));
	EXPECT_EQ(-ENXIO, try_mmap(self->fd, QUOTA, rw, MAP_SHARED, pg));
	EXPECT_EQ(-ENXIO, try_mmap(self->fd, 2 * pg, rw, MAP_SHARED,
				   QUOTA - pg));
	EXPECT_EQ(-ENXIO, try_mmap(self->fd, pg, rw, MAP_SHARED,
				   64 * QUOTA));
	/* The exact range and its last page are fine. */
	EXPECT_EQ(0, try_mmap(self->fd, QUOTA, rw, MAP_SHARED, 0));
	EXPECT_EQ(0, try_mmap(self->fd, pg, rw, MAP_SHARED, QUOTA - pg));
}

/* ---- contents ------------------------------------------------------------- */

TEST_F(map, partial_mapping_at_block_offset)
{
	__u32 ids[8];
	char *whole, *part;
	int i;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 8));
	whole = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, whole);
	for (i = 0; i < 8; i++)
		kv_fill(whole + (size_t)ids[i] * BLOCK, BLOCK, ids[i], 0);
	/* Map just block ids[5]: same bytes at its offset. */
	part = kv_mmap(self->fd, BLOCK, (off_t)ids[5] * BLOCK);
	ASSERT_NE(MAP_FAILED, part);
	EXPECT_EQ(-1, kv_verify(part, BLOCK, ids[5], 0));
	/* Writes through either mapping show in the other. */
	kv_fill(part, BLOCK, 0x55, 0);
	EXPECT_EQ(-1, kv_verify(whole + (size_t)ids[5] * BLOCK, BLOCK, 0x55, 0));
	munmap(part, BLOCK);
	munmap(whole, QUOTA);
}

TEST_F(map, unbacked_page_sigbus)
{
	struct kvpool_space_info si;
	__u32 id;
	char *m;

	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	/* Nothing backed yet: every page raises SIGBUS. */
	EXPECT_EQ(SIGBUS, kv_probe(m, 0));
	EXPECT_EQ(SIGBUS, kv_probe(m, 1));
	EXPECT_EQ(SIGBUS, kv_probe(m + QUOTA - 1, 0));

	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	ASSERT_LT(si.backed_bytes, QUOTA);
	ASSERT_LE(BLOCK, si.backed_bytes);
	/* The backed range works, the page after it does not. */
	EXPECT_EQ(0, kv_probe(m + (size_t)id * BLOCK, 1));
	EXPECT_EQ(0, kv_probe(m, 1));
	EXPECT_EQ(0, kv_probe(m + si.backed_bytes - 1, 1));
	EXPECT_EQ(SIGBUS, kv_probe(m + si.backed_bytes, 0));
	EXPECT_EQ(SIGBUS, kv_probe(m + QUOTA - self->page, 1));
	munmap(m, QUOTA);
}

TEST_F(map, new_chunks_appear_in_existing_mapping)
{
	struct kvpool_space_info si;
	__u32 ids[128];
	char *m;
	int i;

	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, kv_alloc(self->fd, ids, BPC));
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	ASSERT_EQ(KV_CHUNK, si.backed_bytes);
	EXPECT_EQ(SIGBUS, kv_probe(m + KV_CHUNK, 0));

	/* Grow to the whole quota, one block at a time. */
	for (i = BPC; i < 128; i++) {
		ASSERT_EQ(0, kv_alloc(self->fd, &ids[i], 1));
	}
	ASSERT_EQ(0, kv_space_info(self->fd, &si));
	EXPECT_EQ(QUOTA, si.backed_bytes);
	for (i = 0; i < 128; i++) {
		char *b = m + (size_t)ids[i] * BLOCK;

		ASSERT_EQ(0, kv_probe(b, 1)) TH_LOG("block %u", ids[i]);
		kv_fill(b, BLOCK, ids[i] + 1000, 0);
	}
	for (i = 0; i < 128; i++) {
		ASSERT_EQ(-1, kv_verify(m + (size_t)ids[i] * BLOCK, BLOCK,
					ids[i] + 1000, 0))
			TH_LOG("block %u", ids[i]);
	}
	munmap(m, QUOTA);
}

TEST_F(map, fork_child_writes_through_inherited_mapping)
{
	__u32 ids[4];
	pid_t pid;
	char *m;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 4));
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	memset(m + (size_t)ids[2] * BLOCK, 0, BLOCK);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		kv_fill(m + (size_t)ids[2] * BLOCK, BLOCK, 77, 0);
		_exit(0);
	}
	ASSERT_EQ(0, kv_wait(pid));
	EXPECT_EQ(-1, kv_verify(m + (size_t)ids[2] * BLOCK, BLOCK, 77, 0));
	munmap(m, QUOTA);
}

TEST_F(map, madvise_dontneed_keeps_data)
{
	__u32 ids[BPC];
	char *m;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, BPC));
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m, KV_CHUNK, 9, 0);
	/* Zapping the PTEs of a shared mapping must not lose the pages. */
	ASSERT_EQ(0, madvise(m, KV_CHUNK, MADV_DONTNEED));
	EXPECT_EQ(-1, kv_verify(m, KV_CHUNK, 9, 0));
	munmap(m, QUOTA);
	/* Nor does unmapping and mapping again. */
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	EXPECT_EQ(-1, kv_verify(m, KV_CHUNK, 9, 0));
	munmap(m, QUOTA);
}

/* ---- the space's own address_space ---------------------------------------- */

/*
 * Once it joined, an fd's f_mapping is its space's inode, not the device's:
 * the paths that use f_mapping or its host on a shared file mapping
 * (fadvise, readahead, sync_file_range, msync, madvise, mremap, fork)
 * work, or fail as on any character device, and leave the data alone.
 */
TEST_F(map, mapping_paths_through_space_inode)
{
	__u32 ids[BPC];
	char *m, *moved;
	void *dst;
	pid_t pid;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, BPC));
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	kv_fill(m, KV_CHUNK, 31, 0);

	EXPECT_EQ(0, posix_fadvise(self->fd, 0, 0, POSIX_FADV_WILLNEED));
	EXPECT_EQ(0, posix_fadvise(self->fd, 0, 0, POSIX_FADV_DONTNEED));
	EXPECT_EQ(0, posix_fadvise(self->fd, 0, KV_CHUNK, POSIX_FADV_NOREUSE));
	EXPECT_EQ(-1, readahead(self->fd, 0, KV_CHUNK));
	EXPECT_EQ(-1, sync_file_range(self->fd, 0, 0, SYNC_FILE_RANGE_WRITE));
	EXPECT_EQ(0, msync(m, KV_CHUNK, MS_ASYNC));
	EXPECT_EQ(0, msync(m, KV_CHUNK, MS_INVALIDATE));
	msync(m, KV_CHUNK, MS_SYNC);	/* no fsync: EINVAL, as before */
	EXPECT_EQ(0, madvise(m, KV_CHUNK, MADV_WILLNEED));
	EXPECT_EQ(0, madvise(m, KV_CHUNK, MADV_COLD));
	EXPECT_EQ(0, madvise(m, KV_CHUNK, MADV_PAGEOUT));
	EXPECT_EQ(-1, madvise(m, KV_CHUNK, MADV_REMOVE));	/* no fallocate */
	EXPECT_EQ(0, madvise(m, KV_CHUNK, MADV_POPULATE_WRITE));
	EXPECT_EQ(-1, kv_verify(m, KV_CHUNK, 31, 0));

	/* A child inherits the mapping, splits it, writes and unmaps part of it. */
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (kv_verify(m, KV_CHUNK, 31, 0) != -1)
			_exit(1);
		if (mprotect(m + KV_CHUNK / 2, KV_CHUNK / 2, PROT_READ))
			_exit(2);
		kv_fill(m, KV_CHUNK / 2, 32, 0);
		if (munmap(m + KV_CHUNK / 4, KV_CHUNK / 4) || madvise(m, KV_CHUNK / 4, MADV_DONTNEED))
			_exit(3);
		_exit(kv_verify(m, KV_CHUNK / 4, 32, 0) == -1 ? 0 : 4);
	}
	ASSERT_EQ(0, kv_wait(pid));
	EXPECT_EQ(-1, kv_verify(m, KV_CHUNK / 2, 32, 0));
	EXPECT_EQ(-1, kv_verify(m + KV_CHUNK / 2, KV_CHUNK / 2, 31, KV_CHUNK / 2));

	/* Moving the first chunk's mapping elsewhere keeps it on the same pages. */
	dst = mmap(NULL, KV_CHUNK, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, dst);
	moved = mremap(m, KV_CHUNK, KV_CHUNK, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	ASSERT_EQ(dst, (void *)moved);
	EXPECT_EQ(-1, kv_verify(moved, KV_CHUNK / 2, 32, 0));
	kv_fill(moved + KV_CHUNK / 2, KV_CHUNK / 2, 33, KV_CHUNK / 2);
	munmap(moved, KV_CHUNK);
	munmap(m + KV_CHUNK, QUOTA - KV_CHUNK);
	m = kv_mmap(self->fd, KV_CHUNK, 0);
	ASSERT_NE(MAP_FAILED, m);
	EXPECT_EQ(-1, kv_verify(m + KV_CHUNK / 2, KV_CHUNK / 2, 33, KV_CHUNK / 2));
	munmap(m, KV_CHUNK);
}

struct join_race {
	int fd;
	size_t len;
	volatile int tries;
	int bad_errno;		/* an mmap errno other than EBADFD, or 0 */
	void *map;
};

/* Map r->fd until that works: EBADFD until the fd has joined, nothing else. */
static void *join_race_mapper(void *arg)
{
	struct join_race *r = arg;

	for (;;) {
		void *p = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);

		r->tries++;
		if (p != MAP_FAILED) {
			r->map = p;
			return NULL;
		}
		if (errno != EBADFD) {
			r->bad_errno = errno;
			return NULL;
		}
	}
}

/*
 * Joining points the fd's f_mapping at the space's inode, and mmap reads
 * f_mapping before and after ->mmap to count writable shared mappings: an
 * mmap that straddled the join would take a count from the space that it
 * never gave, and a space whose count goes negative refuses writable
 * shared mappings (EPERM).  A thread maps each new fd while it joins:
 * every mmap fails with EBADFD or maps, and the space keeps mapping.
 */
TEST_F(map, mmap_racing_join_keeps_space_mappable)
{
	int round;

	for (round = 0; round < 200; round++) {
		struct join_race r = { .len = self->page };
		pthread_t t;

		r.fd = kv_open();
		ASSERT_LE(0, r.fd);
		ASSERT_EQ(0, pthread_create(&t, NULL, join_race_mapper, &r));
		while (r.tries < 1 + round % 4)
			sched_yield();
		ASSERT_EQ(0, kv_join(r.fd, self->name, NULL));
		ASSERT_EQ(0, pthread_join(t, NULL));
		EXPECT_EQ(0, r.bad_errno) TH_LOG("round %d: mmap failed: %s", round,
						 strerror(r.bad_errno));
		if (r.map)
			munmap(r.map, r.len);
		close(r.fd);
		if (r.bad_errno)
			break;
	}
	EXPECT_EQ(0, try_mmap(self->fd, QUOTA, PROT_READ | PROT_WRITE, MAP_SHARED, 0));
}

/* ---- get_user_pages: process_vm_readv / process_vm_writev ------------------ */

#define GUP_BYTES	(2 * KV_CHUNK)	/* spans a chunk boundary */

/*
 * Child: its own fd and mapping of @name; fills [0, GUP_BYTES) with seed
 * 5, sends its mapping address, waits, then checks seed 6 (written by the
 * parent with process_vm_writev).
 */
static int pvm_child(const char *name, int rd, int wr)
{
	struct kvpool_space_open so;
	char *m, c;
	int fd;

	fd = kv_child_join_map(name, &so, &m);
	if (fd < 0)
		return -fd;
	kv_fill(m, GUP_BYTES, 5, 0);
	if (write(wr, &m, sizeof(m)) != sizeof(m))
		return 12;
	if (read(rd, &c, 1) != 1)
		return 13;
	if (kv_verify(m, GUP_BYTES, 6, 0) != -1)
		return 14;
	return 0;
}

/*
 * process_vm_readv (remote -> local) or, where write, process_vm_writev
 * (local -> remote) of len bytes in pid, one iovec each side.
 */
static ssize_t pvm_copy(pid_t pid, void *local, void *remote, size_t len, bool write)
{
	struct iovec l = { .iov_base = local, .iov_len = len };
	struct iovec r = { .iov_base = remote, .iov_len = len };

	return write ? process_vm_writev(pid, &l, 1, &r, 1, 0) :
		       process_vm_readv(pid, &l, 1, &r, 1, 0);
}

TEST_F(map, process_vm_readv_writev_on_mapping)
{
	int to_child[2], to_parent[2];
	__u32 ids[2 * BPC];
	char *m, *remote_m, *buf;
	ssize_t n;
	pid_t pid;
	char c = 'x';

	ASSERT_EQ(0, kv_alloc(self->fd, ids, 2 * BPC));
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	buf = malloc(GUP_BYTES);
	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, pipe(to_child));
	ASSERT_EQ(0, pipe(to_parent));

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		munmap(m, QUOTA);
		close(self->fd);
		_exit(pvm_child(self->name, to_child[0], to_parent[1]));
	}
	ASSERT_EQ(sizeof(remote_m), read(to_parent[0], &remote_m,
					 sizeof(remote_m)));

	/* Remote mapping -> local heap: GUP on the child's pages. */
	memset(buf, 0, GUP_BYTES);
	n = pvm_copy(pid, buf, remote_m, GUP_BYTES, false);
	ASSERT_EQ(GUP_BYTES, n) TH_LOG("process_vm_readv: %s",
				      n < 0 ? strerror(errno) : "short");
	EXPECT_EQ(-1, kv_verify(buf, GUP_BYTES, 5, 0));
	/* And the parent's own mapping shows the child's writes. */
	EXPECT_EQ(-1, kv_verify(m, GUP_BYTES, 5, 0));

	/* Local heap -> remote mapping. */
	kv_fill(buf, GUP_BYTES, 6, 0);
	n = pvm_copy(pid, buf, remote_m, GUP_BYTES, true);
	ASSERT_EQ(GUP_BYTES, n) TH_LOG("process_vm_writev: %s",
				      n < 0 ? strerror(errno) : "short");
	EXPECT_EQ(-1, kv_verify(m, GUP_BYTES, 6, 0));
	ASSERT_EQ(1, write(to_child[1], &c, 1));
	EXPECT_EQ(0, kv_wait(pid));
	free(buf);
	munmap(m, QUOTA);
}

TEST_F(map, process_vm_readv_into_local_mapping)
{
	__u32 ids[2 * BPC];
	char *m, *src;
	ssize_t n;

	/* Our own pid as the remote: GUP on the mapping as the source. */
	ASSERT_EQ(0, kv_alloc(self->fd, ids, 2 * BPC));
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	src = malloc(KV_CHUNK);
	ASSERT_NE(NULL, src);
	kv_fill(m, KV_CHUNK, 21, 0);
	n = pvm_copy(getpid(), src, m, KV_CHUNK, false);
	ASSERT_EQ(KV_CHUNK, n);
	EXPECT_EQ(-1, kv_verify(src, KV_CHUNK, 21, 0));
	/* And as the target: copy chunk 0 to chunk 1 through GUP. */
	n = pvm_copy(getpid(), m, m + KV_CHUNK, KV_CHUNK, true);
	ASSERT_EQ(KV_CHUNK, n);
	EXPECT_EQ(-1, kv_verify(m + KV_CHUNK, KV_CHUNK, 21, 0));
	free(src);
	munmap(m, QUOTA);
}

TEST_F(map, process_vm_readv_unbacked_range_efault)
{
	char *m, buf[64];
	__u32 id;

	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, m);
	/* The last chunk: unbacked. */
	EXPECT_EQ(-1, pvm_copy(getpid(), buf, m + QUOTA - KV_CHUNK, sizeof(buf), false));
	EXPECT_EQ(EFAULT, errno);
	munmap(m, QUOTA);
}

/* ---- get_user_pages: O_DIRECT on a loop device ---------------------------- */

#define LOOP_BYTES	(2 * KV_CHUNK)
#define LOOP_SEED	0x77

FIXTURE(loop) {
	int fd;
	struct kvpool_space_open so;
	char name[KVPOOL_NAME_MAX];
	char backing[64];
	char dev[32];
	int backing_fd;
	int loop_fd;
	int dio_fd;
	char *m;
};

static int loop_attach(int loop_fd, int backing_fd)
{
	struct loop_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.fd = backing_fd;
	cfg.block_size = 512;
	if (!ioctl(loop_fd, LOOP_CONFIGURE, &cfg))
		return 0;
	if (errno != EINVAL && errno != ENOTTY)
		return -errno;
	return ioctl(loop_fd, LOOP_SET_FD, backing_fd) ? -errno : 0;
}

static int open_retry(const char *path, int flags)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int i, fd = -1;

	for (i = 0; i < 100; i++) {
		fd = open(path, flags);
		if (fd >= 0 || errno != ENOENT)
			break;
		nanosleep(&ts, NULL);	/* devtmpfs creates the node */
	}
	return fd;
}

FIXTURE_SETUP(loop)
{
	char *pat;
	int ctl, nr, ret;
	ssize_t n;

	self->backing_fd = self->loop_fd = self->dio_fd = -1;
	self->m = MAP_FAILED;
	kv_name(self->name, sizeof(self->name), "dio");
	self->fd = kv_open_create(self->name, BLOCK, QUOTA, &self->so);
	ASSERT_LE(0, self->fd);

	/* Backing file on tmpfs with a known pattern. */
	snprintf(self->backing, sizeof(self->backing),
		 "/tmp/kvpool-loop-%d.img", (int)getpid());
	self->backing_fd = open(self->backing, O_RDWR | O_CREAT | O_TRUNC,
				0600);
	ASSERT_LE(0, self->backing_fd) TH_LOG("%s: %s", self->backing,
					      strerror(errno));
	pat = malloc(LOOP_BYTES);
	ASSERT_NE(NULL, pat);
	kv_fill(pat, LOOP_BYTES, LOOP_SEED, 0);
	n = pwrite(self->backing_fd, pat, LOOP_BYTES, 0);
	free(pat);
	ASSERT_EQ(LOOP_BYTES, n);

	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, ctl) TH_LOG("/dev/loop-control: %s (is loop.ko loaded?)",
				 strerror(errno));
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	ASSERT_LE(0, nr) TH_LOG("LOOP_CTL_GET_FREE: %s", strerror(errno));
	snprintf(self->dev, sizeof(self->dev), "/dev/loop%d", nr);
	self->loop_fd = open_retry(self->dev, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, self->loop_fd) TH_LOG("%s: %s", self->dev,
					   strerror(errno));
	ret = loop_attach(self->loop_fd, self->backing_fd);
	ASSERT_EQ(0, ret) TH_LOG("attach %s: %s", self->dev, strerror(-ret));
	self->dio_fd = open(self->dev, O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, self->dio_fd) TH_LOG("%s O_DIRECT: %s", self->dev,
					  strerror(errno));

	self->m = kv_mmap(self->fd, QUOTA, 0);
	ASSERT_NE(MAP_FAILED, self->m);
}

FIXTURE_TEARDOWN(loop)
{
	if (self->m != MAP_FAILED)
		munmap(self->m, QUOTA);
	if (self->dio_fd >= 0)
		close(self->dio_fd);
	if (self->loop_fd >= 0) {
		ioctl(self->loop_fd, LOOP_CLR_FD, 0);
		close(self->loop_fd);
	}
	if (self->backing_fd >= 0)
		close(self->backing_fd);
	unlink(self->backing);
	close(self->fd);
}

TEST_F(loop, odirect_read_from_loop_into_mapping)
{
	__u32 ids[LOOP_BYTES / BLOCK];
	ssize_t n;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, LOOP_BYTES / BLOCK));
	memset(self->m, 0, LOOP_BYTES);
	/* One read spanning two chunks, the device DMA-ing into the pages. */
	n = pread(self->dio_fd, self->m, LOOP_BYTES, 0);
	ASSERT_EQ(LOOP_BYTES, n) TH_LOG("pread O_DIRECT: %s",
					n < 0 ? strerror(errno) : "short");
	EXPECT_EQ(-1, kv_verify(self->m, LOOP_BYTES, LOOP_SEED, 0));

	/* Unaligned to chunks: 1 MiB from device offset 64 KiB. */
	memset(self->m + KV_CHUNK - MiB / 2, 0, MiB);
	n = pread(self->dio_fd, self->m + KV_CHUNK - MiB / 2, MiB, 64 * KiB);
	ASSERT_EQ(MiB, n);
	EXPECT_EQ(-1, kv_verify(self->m + KV_CHUNK - MiB / 2, MiB, LOOP_SEED,
				64 * KiB));
}

TEST_F(loop, odirect_write_from_mapping_to_loop)
{
	__u32 ids[LOOP_BYTES / BLOCK];
	char *back;
	ssize_t n;

	ASSERT_EQ(0, kv_alloc(self->fd, ids, LOOP_BYTES / BLOCK));
	kv_fill(self->m, LOOP_BYTES, 0x78, 0);
	n = pwrite(self->dio_fd, self->m, LOOP_BYTES, 0);
	ASSERT_EQ(LOOP_BYTES, n) TH_LOG("pwrite O_DIRECT: %s",
					n < 0 ? strerror(errno) : "short");
	ASSERT_EQ(0, fsync(self->dio_fd));

	/* Read back through the device into page-aligned heap memory. */
	ASSERT_EQ(0, posix_memalign((void **)&back, 4096, LOOP_BYTES));
	memset(back, 0, LOOP_BYTES);
	n = pread(self->dio_fd, back, LOOP_BYTES, 0);
	ASSERT_EQ(LOOP_BYTES, n);
	EXPECT_EQ(-1, kv_verify(back, LOOP_BYTES, 0x78, 0));
	/* And the backing file itself holds it. */
	memset(back, 0, LOOP_BYTES);
	n = pread(self->backing_fd, back, LOOP_BYTES, 0);
	ASSERT_EQ(LOOP_BYTES, n);
	EXPECT_EQ(-1, kv_verify(back, LOOP_BYTES, 0x78, 0));
	free(back);

	/* Round trip: device -> mapping after clearing it. */
	memset(self->m, 0, LOOP_BYTES);
	n = pread(self->dio_fd, self->m, LOOP_BYTES, 0);
	ASSERT_EQ(LOOP_BYTES, n);
	EXPECT_EQ(-1, kv_verify(self->m, LOOP_BYTES, 0x78, 0));
}

TEST_F(loop, odirect_read_into_unbacked_range_fails)
{
	__u32 id;
	ssize_t n;

	/* Only the first chunk is backed; the read targets the second. */
	ASSERT_EQ(0, kv_alloc(self->fd, &id, 1));
	n = pread(self->dio_fd, self->m + KV_CHUNK, 64 * KiB, 0);
	EXPECT_EQ(-1, n);
	EXPECT_EQ(EFAULT, errno);
}

TEST_HARNESS_MAIN
