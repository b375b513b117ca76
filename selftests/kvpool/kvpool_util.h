/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the kvpool selftests.
 *
 * Every helper returns 0 or a negative errno, never touches errno-based
 * control flow of the caller, and uses no harness macros, so it is safe to
 * call from forked children (where ASSERT_*() must not be used: it would
 * longjmp into the parent's test frame).
 */
#ifndef KVPOOL_SELFTEST_UTIL_H
#define KVPOOL_SELFTEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <linux/capability.h>
#include <linux/kvpool.h>

/*
 * -Wextra meets the vendored harness: its EXPECT_*()/ASSERT_*() compare an
 * int constant with __u64 fields by design (it prints both with their own
 * signedness), and its TEST() and SIGALRM callbacks have unused parameters.
 */
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
/*
 * The harness defines globals: a program of several files (fuzz_test)
 * includes it in the one that holds its tests, and defines
 * KVPOOL_UTIL_NO_HARNESS in the others (their helpers use no harness macro).
 */
#ifndef KVPOOL_UTIL_NO_HARNESS
#include "kselftest_harness.h"
#endif

#define KV_DEV		"/dev/kvpool"
#define KV_SYSFS	"/sys/class/misc/kvpool"
#define KV_CHECK	"/sys/kernel/debug/kvpool/check"

#define KiB		(1ULL << 10)
#define MiB		(1ULL << 20)
#define GiB		(1ULL << 30)
#define KV_CHUNK	(2 * MiB)
/* The VM loads the module with 64 MiB on each of nodes 0 and 1. */
#define KV_POOL_DEFAULT	(128 * MiB)
#define KV_NODE_DEFAULT	(64 * MiB)

/* Pin the caller to @cpu; its NUMA node, or -1. */
static inline int kv_pin_to_cpu(int cpu)
{
	unsigned int c, node;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		return -1;
	if (syscall(SYS_getcpu, &c, &node, NULL) || (int)c != cpu)
		return -1;
	return (int)node;
}

static inline int kv_open(void)
{
	return open(KV_DEV, O_RDWR | O_CLOEXEC);
}

static inline int kv_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static inline int kv_info(int fd, struct kvpool_info *info)
{
	memset(info, 0, sizeof(*info));
	return kv_ioctl(fd, KVPOOL_IOC_INFO, info);
}

/* KVPOOL_IOC_INFO through a descriptor of its own: 0 or -errno. */
static inline int kv_pool_info(struct kvpool_info *info)
{
	int fd = kv_open(), ret;

	if (fd < 0)
		return -errno;
	ret = kv_info(fd, info);
	close(fd);
	return ret;
}

/* A unique, valid space name: "<tag>-<pid>-<n>". */
static inline void kv_name(char *buf, size_t len, const char *tag)
{
	static unsigned int seq;

	snprintf(buf, len, "%.40s-%d-%u", tag, (int)getpid(), seq++);
}

/*
 * Fill a SPACE_OPEN request: with CREATE mode 0600, PREFERRED, empty mask;
 * without, no create fields (API 4 refuses them on a plain join).
 */
static inline void kv_so_init(struct kvpool_space_open *so, const char *name,
			      __u32 flags, __u64 block_bytes, __u64 quota_bytes)
{
	size_t n = strlen(name);

	memset(so, 0, sizeof(*so));
	if (n > sizeof(so->name) - 1)
		n = sizeof(so->name) - 1;
	memcpy(so->name, name, n);
	so->flags = flags;
	so->block_bytes = block_bytes;
	if (flags & KVPOOL_SPACE_CREATE) {
		so->mode = 0600;
		so->quota_bytes = quota_bytes;
		so->numa_policy = KVPOOL_NUMA_PREFERRED;
	}
}

static inline int kv_space_open(int fd, struct kvpool_space_open *so)
{
	return kv_ioctl(fd, KVPOOL_IOC_SPACE_OPEN, so);
}

/* Create a new space (CREATE|EXCL) on @fd; @so may be NULL. */
static inline int kv_create(int fd, const char *name, __u64 block_bytes,
			    __u64 quota_bytes, struct kvpool_space_open *so)
{
	struct kvpool_space_open tmp;

	if (!so)
		so = &tmp;
	kv_so_init(so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
		   block_bytes, quota_bytes);
	return kv_space_open(fd, so);
}

/* Create with a NUMA policy. */
static inline int kv_create_numa(int fd, const char *name, __u64 block_bytes,
				 __u64 quota_bytes, __u32 policy, __u64 mask,
				 struct kvpool_space_open *so)
{
	struct kvpool_space_open tmp;

	if (!so)
		so = &tmp;
	kv_so_init(so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL,
		   block_bytes, quota_bytes);
	so->numa_policy = policy;
	so->node_mask = mask;
	return kv_space_open(fd, so);
}

/* Join an existing space (no CREATE), block_bytes 0. */
static inline int kv_join(int fd, const char *name,
			  struct kvpool_space_open *so)
{
	struct kvpool_space_open tmp;

	if (!so)
		so = &tmp;
	kv_so_init(so, name, 0, 0, 0);
	return kv_space_open(fd, so);
}

/* Join a space that @owner owns (KVPOOL_SPACE_FOREIGN), block_bytes 0. */
static inline int kv_join_foreign(int fd, const char *name, uid_t owner,
				  struct kvpool_space_open *so)
{
	struct kvpool_space_open tmp;

	if (!so)
		so = &tmp;
	kv_so_init(so, name, KVPOOL_SPACE_FOREIGN, 0, 0);
	so->expect_uid = owner;
	return kv_space_open(fd, so);
}

/* Open the device and create a space on the new fd; returns fd or -errno. */
static inline int kv_open_create(const char *name, __u64 block_bytes,
				 __u64 quota_bytes,
				 struct kvpool_space_open *so)
{
	int fd = kv_open();
	int ret;

	if (fd < 0)
		return -errno;
	ret = kv_create(fd, name, block_bytes, quota_bytes, so);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

static inline int kv_open_join(const char *name, struct kvpool_space_open *so)
{
	int fd = kv_open();
	int ret;

	if (fd < 0)
		return -errno;
	ret = kv_join(fd, name, so);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

static inline int kv_blocks(int fd, unsigned long cmd, __u32 *ids,
			    __u32 count)
{
	struct kvpool_blocks b = {
		.ids = (__u64)(uintptr_t)ids,
		.count = count,
	};

	return kv_ioctl(fd, cmd, &b);
}

static inline int kv_alloc(int fd, __u32 *ids, __u32 count)
{
	return kv_blocks(fd, KVPOOL_IOC_ALLOC, ids, count);
}

static inline int kv_free(int fd, __u32 *ids, __u32 count)
{
	return kv_blocks(fd, KVPOOL_IOC_FREE, ids, count);
}

static inline int kv_space_info(int fd, struct kvpool_space_info *si)
{
	memset(si, 0, sizeof(*si));
	return kv_ioctl(fd, KVPOOL_IOC_SPACE_INFO, si);
}

/*
 * Allocate single blocks until ALLOC fails; ids go to @ids (room for @max).
 * Returns the number allocated; *@err gets the errno of the failing call
 * (0 when @max was reached first).
 */
static inline long kv_alloc_until_fail(int fd, __u32 *ids, long max, int *err)
{
	long n = 0;
	int ret = 0;

	while (n < max) {
		ret = kv_alloc(fd, &ids[n], 1);
		if (ret)
			break;
		n++;
	}
	*err = ret;
	return n;
}

static inline void *kv_mmap(int fd, size_t len, off_t off)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
}

/*
 * A child process's first steps: join name and map the whole space.  The
 * fd, or the negated exit code that says which step failed (10: join,
 * 11: mmap).
 */
static inline int kv_child_join_map(const char *name, struct kvpool_space_open *so, char **map)
{
	int fd = kv_open_join(name, so);

	if (fd < 0)
		return -10;
	*map = kv_mmap(fd, so->map_bytes, 0);
	if (*map == MAP_FAILED)
		return -11;
	return fd;
}

/*
 * The 6.1 harness runs the test body even when FIXTURE_SETUP() called
 * SKIP(); tests whose setup may skip start with this.
 */
#define RETURN_IF_SKIPPED() do { \
	if (_metadata->skip) \
		return; \
} while (0)

/* ---- sysfs / debugfs ---------------------------------------------------- */

static inline int read_file(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0) {
		n = -errno;
		close(fd);
		return n;
	}
	close(fd);
	buf[n] = '\0';
	return (int)n;
}

/* Read /sys/class/misc/kvpool/<rel> as an unsigned decimal. */
/* splitmix64: a seeded PRNG whose sequence a printed seed replays. */
static inline __u64 kv_splitmix64(__u64 *state)
{
	__u64 z = (*state += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static inline __u64 kv_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* key=N from the kernel command line (the VM runner passes knobs so), or def. */
static inline unsigned long kv_cmdline_ulong(const char *key, unsigned long def)
{
	char buf[4096], *p;
	size_t klen = strlen(key);

	if (read_file("/proc/cmdline", buf, sizeof(buf)) < 0)
		return def;
	for (p = buf; (p = strstr(p, key)); p += klen) {
		if ((p == buf || p[-1] == ' ') && p[klen] == '=')
			return strtoul(p + klen + 1, NULL, 0);
	}
	return def;
}

static inline int sysfs_u64(const char *rel, __u64 *val)
{
	char path[256], buf[64], *end;
	unsigned long long v;
	int n;

	snprintf(path, sizeof(path), KV_SYSFS "/%s", rel);
	n = read_file(path, buf, sizeof(buf));
	if (n < 0)
		return n;
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || end == buf || (*end && *end != '\n'))
		return -EINVAL;
	*val = v;
	return 0;
}

/* Same, but returns the value and ~0 when it cannot be read. */
static inline __u64 sysfs_get(const char *rel)
{
	__u64 v;

	return sysfs_u64(rel, &v) ? ~0ULL : v;
}

/* write(2) @s to @path in one call; 0 or -errno. */
static inline int kv_write_path(const char *path, const char *s)
{
	ssize_t n;
	int fd, ret = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, s, strlen(s));
	if (n < 0)
		ret = -errno;
	else if ((size_t)n != strlen(s))
		ret = -EIO;
	close(fd);
	return ret;
}

/* The same for /sys/class/misc/kvpool/<rel>. */
static inline int sysfs_write(const char *rel, const char *s)
{
	char path[256];

	snprintf(path, sizeof(path), KV_SYSFS "/%s", rel);
	return kv_write_path(path, s);
}

/* 1 when debugfs check reads exactly "ok\n", 0 otherwise, -errno if absent. */
static inline int kv_check(char *buf, size_t len)
{
	int n = read_file(KV_CHECK, buf, len);

	if (n < 0)
		return n;
	return strcmp(buf, "ok\n") == 0;
}

#define ASSERT_KV_CHECK_OK() do { \
	char __ck[256]; \
	int __r = kv_check(__ck, sizeof(__ck)); \
	ASSERT_EQ(1, __r) TH_LOG("debugfs %s: %s", KV_CHECK, \
				 __r < 0 ? strerror(-__r) : __ck); \
} while (0)

/* Event @e is QUOTA_PRESSURE number @seq, for @count blocks, of cause @cause. */
#define EXPECT_PRESSURE_EVENT(e, seq_, count_, cause_) do { \
	EXPECT_EQ(seq_, (e).seq); \
	EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, (e).type); \
	EXPECT_EQ(count_, (e).count); \
	EXPECT_EQ(cause_, (e).cause); \
} while (0)

/* Poll until sysfs @rel equals @want (processes exiting release lazily). */
static inline __u64 sysfs_wait_eq(const char *rel, __u64 want, int ms)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	__u64 v = sysfs_get(rel);

	while (v != want && ms > 0) {
		nanosleep(&ts, NULL);
		ms -= 10;
		v = sysfs_get(rel);
	}
	return v;
}

/* ---- memory probes -------------------------------------------------------- */

static sigjmp_buf kv_probe_env;
static volatile sig_atomic_t kv_probe_sig;

static inline void kv_probe_handler(int sig)
{
	kv_probe_sig = sig;
	siglongjmp(kv_probe_env, 1);
}

/*
 * Touch one byte at @p (read, or read+write when @write); returns 0 or the
 * signal (SIGBUS/SIGSEGV) the access raised.
 */
static inline int kv_probe(volatile char *p, int write)
{
	struct sigaction sa, old_bus, old_segv;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kv_probe_handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old_bus);
	sigaction(SIGSEGV, &sa, &old_segv);
	kv_probe_sig = 0;
	if (sigsetjmp(kv_probe_env, 1) == 0) {
		char c = *p;

		if (write)
			*p = c;
	}
	sigaction(SIGBUS, &old_bus, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	return kv_probe_sig;
}

/* Deterministic byte pattern: different for each (seed, offset). */
static inline unsigned char kv_pat(unsigned int seed, size_t off)
{
	__u64 x = (off >> 3) * 0x9E3779B97F4A7C15ULL + seed * 0xBF58476D1CE4E5B9ULL;

	x ^= x >> 29;
	return (unsigned char)(x >> (8 * (off & 7)));
}

static inline void kv_fill(void *p, size_t len, unsigned int seed, size_t base)
{
	unsigned char *c = p;
	size_t i;

	for (i = 0; i < len; i++)
		c[i] = kv_pat(seed, base + i);
}

/* Offset of the first mismatch, or -1 when all of [p, p+len) matches. */
static inline long kv_verify(const void *p, size_t len, unsigned int seed,
			     size_t base)
{
	const unsigned char *c = p;
	size_t i;

	for (i = 0; i < len; i++)
		if (c[i] != kv_pat(seed, base + i))
			return (long)i;
	return -1;
}

/* ---- credentials ---------------------------------------------------------- */

struct kv_cred {
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[4];
};

/* Drop to @c for good (no capabilities left); 0 or -errno. */
static inline int kv_drop_to(const struct kv_cred *c)
{
	if (setgroups(c->ngroups, c->groups))
		return -errno;
	if (setresgid(c->gid, c->gid, c->gid))
		return -errno;
	if (setresuid(c->uid, c->uid, c->uid))
		return -errno;
	return 0;
}

/*
 * Raise (@on) or lower CAP_DAC_OVERRIDE in the effective set; it must be
 * permitted (a uid still 0, or PR_SET_KEEPCAPS across the drop).  0 or
 * -errno.
 */
static inline int kv_dac_override(int on)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	unsigned int i = CAP_TO_INDEX(CAP_DAC_OVERRIDE);

	if (syscall(SYS_capget, &h, d))
		return -errno;
	if (on)
		d[i].effective |= CAP_TO_MASK(CAP_DAC_OVERRIDE);
	else
		d[i].effective &= ~CAP_TO_MASK(CAP_DAC_OVERRIDE);
	return syscall(SYS_capset, &h, d) ? -errno : 0;
}

/*
 * Drop to @c for good and open /dev/kvpool as @c: the fd or -errno.
 *
 * Rights are fixed at open (the file model: the module checks the fd's
 * f_cred), so a test that acts as another user opens the device as that
 * user.  The device is root's (0660 root:root in the test VM), so the open
 * is made as a member of its group would: with CAP_DAC_OVERRIDE alone,
 * which the module never asks for, kept across the drop and given up
 * right after.  The process keeps no capability.
 */
static inline int kv_drop_and_open(const struct kv_cred *c)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3];
	int fd, ret;

	memset(none, 0, sizeof(none));
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
		return -errno;
	ret = kv_drop_to(c);
	if (!ret)
		ret = kv_dac_override(1);
	fd = ret ? ret : kv_open();
	if (fd < 0 && !ret)
		fd = -errno;
	/* Nothing kept, whatever happened. */
	if (syscall(SYS_capset, &h, none) || prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)) {
		if (fd >= 0)
			close(fd);
		return -EPERM;
	}
	return fd;
}

/* Send @fd over the unix socket @sk (SCM_RIGHTS): 0 or -errno. */
static inline int kv_send_fd(int sk, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	char byte = 0;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = u.buf, .msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sk, &m, 0) == 1 ? 0 : -errno;
}

/*
 * Receive an fd sent with kv_send_fd(): the fd, or -errno, where a sender
 * that has no fd to send writes its errno as the one byte instead.
 */
static inline int kv_recv_fd(int sk)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	char byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = u.buf, .msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;
	int fd;

	n = recvmsg(sk, &m, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	if (n != 1)
		return -EBADMSG;
	cm = CMSG_FIRSTHDR(&m);
	if (!cm)
		return byte ? -(int)(unsigned char)byte : -EBADMSG;
	if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
	    cm->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EBADMSG;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/*
 * A unix socket pair to pass fds over; 1 when the kernel has no unix
 * sockets (the debug kernel has no CONFIG_NET) and the fd must reach the
 * other process by inheritance across fork() instead, which the module
 * sees the same way; -errno on other failures.
 */
static inline int kv_fd_channel(int sk[2])
{
	if (!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sk))
		return 0;
	if (errno == ENOSYS || errno == EAFNOSUPPORT) {
		sk[0] = sk[1] = -1;
		return 1;
	}
	return -errno;
}

/*
 * Without unix sockets (the debug kernel has no CONFIG_NET): a child dropped
 * to @c opens the device and waits while this process takes the fd with
 * pidfd_getfd(), root's to do to any process.  The fd, or -errno.
 */
static inline int kv_open_as_getfd(const struct kv_cred *c)
{
	int rep[2], go[2], fd, pidfd, child_fd = -1;
	pid_t pid;
	char byte;

	if (pipe(rep))
		return -errno;
	if (pipe(go)) {
		close(rep[0]);
		close(rep[1]);
		return -errno;
	}
	pid = fork();
	if (pid == 0) {
		close(rep[0]);
		close(go[1]);
		fd = kv_drop_and_open(c);
		if (write(rep[1], &fd, sizeof(fd)) != sizeof(fd))
			_exit(1);
		/* Keep the fd open until the parent has its copy. */
		_exit(read(go[0], &byte, 1) < 0);
	}
	close(rep[1]);
	close(go[0]);
	fd = pid < 0 ? -errno : -EPIPE;
	if (pid > 0 && read(rep[0], &child_fd, sizeof(child_fd)) == sizeof(child_fd))
		fd = child_fd;
	if (fd >= 0) {
		pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		fd = pidfd < 0 ? -errno : (int)syscall(SYS_pidfd_getfd, pidfd, child_fd, 0);
		if (pidfd >= 0 && fd < 0)
			fd = -errno;
		if (pidfd >= 0)
			close(pidfd);
	}
	if (write(go[1], "g", 1) != 1 && fd >= 0) {
		close(fd);
		fd = -EPIPE;
	}
	close(go[1]);
	close(rep[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return fd;
}

/*
 * /dev/kvpool opened by a child dropped to @c and passed here over a unix
 * socket: the fd (its rights are @c's, whoever uses it), or -errno.
 */
static inline int kv_open_as(const struct kv_cred *c)
{
	int sk[2], fd, status;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sk))
		return errno == ENOSYS || errno == EAFNOSUPPORT ? kv_open_as_getfd(c) : -errno;
	pid = fork();
	if (pid < 0) {
		fd = -errno;
		close(sk[0]);
		close(sk[1]);
		return fd;
	}
	if (pid == 0) {
		close(sk[0]);
		fd = kv_drop_and_open(c);
		if (fd < 0) {
			/* The errno instead of an fd: one byte, no rights. */
			char e = (char)-fd;

			_exit(write(sk[1], &e, 1) == 1 ? 0 : 1);
		}
		_exit(kv_send_fd(sk[1], fd) ? 1 : 0);
	}
	close(sk[1]);
	fd = kv_recv_fd(sk[0]);
	close(sk[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		if (fd >= 0)
			close(fd);
		return -ECHILD;
	}
	return fd;
}

/* Wait for @pid; returns its exit code, or 1000 + signal when killed. */
static inline int kv_wait(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 1000 + WTERMSIG(status);
	return -1;
}

/* ---- prefix cache, persistence, residency, events (API v2) --------------- */

#define KV_DEBUGFS	"/sys/kernel/debug/kvpool"

/*
 * A deterministic 32-byte hash for (@seed, @idx): the kernel treats hashes
 * as opaque keys, so any distinct bytes do.  Different (seed, idx) pairs
 * give different hashes.
 */
static inline void kv_hash(__u8 *out, __u32 seed, __u32 idx)
{
	__u64 st = ((__u64)seed << 32 | idx) * 0xD6E8FEB86659FD93ULL;
	int i;

	for (i = 0; i < KVPOOL_HASH_BYTES; i += 8) {
		__u64 v = kv_splitmix64(&st);

		memcpy(out + i, &v, 8);
	}
}

/* A deterministic 16-byte device UUID for @n. */
static inline void kv_uuid(__u8 *out, __u32 n)
{
	__u64 st = 0x55AA00000000ULL + n, v;

	v = kv_splitmix64(&st);
	memcpy(out, &v, 8);
	v = kv_splitmix64(&st);
	memcpy(out + 8, &v, 8);
}

/* Lowercase hex of @len bytes into @buf (2 * len + 1 bytes). */
static inline void kv_hex(char *buf, const __u8 *p, size_t len)
{
	static const char dig[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < len; i++) {
		buf[2 * i] = dig[p[i] >> 4];
		buf[2 * i + 1] = dig[p[i] & 15];
	}
	buf[2 * len] = '\0';
}

static inline void kv_pub_entry(struct kvpool_publish_entry *e,
				const __u8 *hash, __u32 id, __u32 priority)
{
	memset(e, 0, sizeof(*e));
	memcpy(e->hash, hash, KVPOOL_HASH_BYTES);
	e->id = id;
	e->priority = priority;
}

/* PUBLISH @count entries; *@nr_dedup (may be NULL) gets the out field. */
static inline int kv_publish(int fd, struct kvpool_publish_entry *ents,
			     __u32 count, __u32 flags, __u32 *nr_dedup)
{
	struct kvpool_publish p;
	int ret;

	memset(&p, 0, sizeof(p));
	p.entries = (__u64)(uintptr_t)ents;
	p.count = count;
	p.flags = flags;
	ret = kv_ioctl(fd, KVPOOL_IOC_PUBLISH, &p);
	if (!ret && nr_dedup)
		*nr_dedup = p.nr_dedup;
	return ret;
}

/*
 * Publish ids[i] under kv_hash(seed, first + i), priority default; on
 * success ids[i] becomes the block that holds the hash.
 */
static inline int kv_publish_seq(int fd, __u32 *ids, __u32 count, __u32 seed,
				 __u32 first, __u32 *nr_dedup)
{
	struct kvpool_publish_entry *e = calloc(count ? count : 1, sizeof(*e));
	__u8 h[KVPOOL_HASH_BYTES];
	__u32 i;
	int ret;

	if (!e)
		return -ENOMEM;
	for (i = 0; i < count; i++) {
		kv_hash(h, seed, first + i);
		kv_pub_entry(&e[i], h, ids[i], 0);
	}
	ret = kv_publish(fd, e, count, 0, nr_dedup);
	if (!ret)
		for (i = 0; i < count; i++)
			ids[i] = e[i].id;
	free(e);
	return ret;
}

/*
 * Fill blocks ids[0..n) of a space mapped at @m (@block_bytes each) with
 * kv_fill(@fill0 + i), then publish them as kv_publish_seq(@seed) does,
 * through @pub (a copy of @ids: publishing may change an id).
 */
static inline int kv_fill_and_publish(int fd, char *m, size_t block_bytes, const __u32 *ids,
				      __u32 *pub, __u32 n, unsigned int fill0, __u32 seed)
{
	__u32 i;

	for (i = 0; i < n; i++)
		kv_fill(m + (size_t)ids[i] * block_bytes, block_bytes, fill0 + i, 0);
	memcpy(pub, ids, n * sizeof(*pub));
	return kv_publish_seq(fd, pub, n, seed, 0, NULL);
}

/* LOOKUP; @devices may be NULL; *@nr_hits (may be NULL) gets the out field. */
static inline int kv_lookup(int fd, const void *hashes, __u32 count,
			    __u32 *ids, __u64 *devices, __u32 *nr_hits)
{
	struct kvpool_lookup l;
	int ret;

	memset(&l, 0, sizeof(l));
	l.hashes = (__u64)(uintptr_t)hashes;
	l.ids = (__u64)(uintptr_t)ids;
	l.devices = (__u64)(uintptr_t)devices;
	l.count = count;
	ret = kv_ioctl(fd, KVPOOL_IOC_LOOKUP, &l);
	if (!ret && nr_hits)
		*nr_hits = l.nr_hits;
	return ret;
}

/* LOOKUP kv_hash(seed, first + i) for i < count. */
static inline int kv_lookup_seq(int fd, __u32 seed, __u32 first, __u32 count,
				__u32 *ids, __u64 *devices, __u32 *nr_hits)
{
	__u8 *h = malloc((size_t)(count ? count : 1) * KVPOOL_HASH_BYTES);
	__u32 i;
	int ret;

	if (!h)
		return -ENOMEM;
	for (i = 0; i < count; i++)
		kv_hash(h + (size_t)i * KVPOOL_HASH_BYTES, seed, first + i);
	ret = kv_lookup(fd, h, count, ids, devices, nr_hits);
	free(h);
	return ret;
}

static inline int kv_release(int fd, __u32 *ids, __u32 count)
{
	return kv_blocks(fd, KVPOOL_IOC_RELEASE, ids, count);
}

static inline int kv_space_stats(int fd, struct kvpool_space_stats *st)
{
	memset(st, 0, sizeof(*st));
	return kv_ioctl(fd, KVPOOL_IOC_SPACE_STATS, st);
}

static inline int kv_destroy(int fd, const char *name)
{
	struct kvpool_space_destroy d;
	size_t n = strlen(name);

	memset(&d, 0, sizeof(d));
	if (n > sizeof(d.name) - 1)
		n = sizeof(d.name) - 1;
	memcpy(d.name, name, n);
	return kv_ioctl(fd, KVPOOL_IOC_SPACE_DESTROY, &d);
}

/* Destroy @name through a fresh fd; 0 or -errno. */
static inline int kv_destroy_name(const char *name)
{
	int fd = kv_open(), ret;

	if (fd < 0)
		return -errno;
	ret = kv_destroy(fd, name);
	close(fd);
	return ret;
}

/* RESIDENCY; *@slot (may be NULL) gets device_slot. */
static inline int kv_residency(int fd, const __u8 *uuid, __u32 op,
			       struct kvpool_residency_entry *ents, __u32 count,
			       __u32 *slot)
{
	struct kvpool_residency r;
	int ret;

	memset(&r, 0, sizeof(r));
	memcpy(r.device_uuid, uuid, sizeof(r.device_uuid));
	r.entries = (__u64)(uintptr_t)ents;
	r.count = count;
	r.op = op;
	r.entry_bytes = sizeof(struct kvpool_residency_entry);
	ret = kv_ioctl(fd, KVPOOL_IOC_RESIDENCY, &r);
	if (!ret && slot)
		*slot = r.device_slot;
	return ret;
}

/*
 * Read the pending events of @fd without blocking (at most @max); returns
 * how many, or -errno of a failed read other than EAGAIN.
 */
static inline int kv_read_events(int fd, struct kvpool_event *ev, int max)
{
	int fl = fcntl(fd, F_GETFL), n = 0;
	ssize_t r;

	if (fl < 0)
		return -errno;
	if (fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	while (n < max) {
		r = read(fd, &ev[n], (size_t)(max - n) * sizeof(*ev));
		if (r < 0) {
			r = errno == EAGAIN ? 0 : -errno;
			fcntl(fd, F_SETFL, fl);
			return r ? (int)r : n;
		}
		if (r == 0 || r % sizeof(*ev)) {
			fcntl(fd, F_SETFL, fl);
			return -EIO;
		}
		n += r / sizeof(*ev);
	}
	fcntl(fd, F_SETFL, fl);
	return n;
}

/* Read /sys/kernel/debug/kvpool/<name>. */
static inline int kv_debugfs_read(const char *name, char *buf, size_t len)
{
	char path[256];

	snprintf(path, sizeof(path), KV_DEBUGFS "/%s", name);
	return read_file(path, buf, len);
}

/*
 * The lines of space @id in a per-space debugfs dump ("space ID" then
 * indented lines) copied to @out, each without its indentation and ending
 * in '\n'.  Returns the number of lines, or -1 when the space has no
 * section.
 */
static inline int kv_debugfs_section(const char *dump, __u32 id, char *out,
				     size_t len)
{
	char hdr[32];
	const char *p = dump, *nl;
	size_t o = 0;
	int n = -1;

	snprintf(hdr, sizeof(hdr), "space %u", id);
	out[0] = '\0';
	while (*p) {
		nl = strchr(p, '\n');
		if (!nl)
			nl = p + strlen(p);
		if (n < 0) {
			if ((size_t)(nl - p) >= strlen(hdr) &&
			    !strncmp(p, hdr, strlen(hdr)) &&
			    (p[strlen(hdr)] == '\n' || p[strlen(hdr)] == ' ' ||
			     p + strlen(hdr) == nl))
				n = 0;
		} else if (*p == ' ' || *p == '\t') {
			while (p < nl && (*p == ' ' || *p == '\t'))
				p++;
			if (o + (nl - p) + 2 < len) {
				memcpy(out + o, p, nl - p);
				o += nl - p;
				out[o++] = '\n';
				out[o] = '\0';
			}
			n++;
		} else {
			break;
		}
		p = *nl ? nl + 1 : nl;
	}
	return n;
}

/* Read /sys/class/misc/kvpool/space/<id>/<attr>. */
static inline int kv_space_sysfs(__u32 id, const char *attr, char *buf,
				 size_t len)
{
	char rel[128];
	char path[256];

	snprintf(rel, sizeof(rel), "space/%u/%s", id, attr);
	snprintf(path, sizeof(path), KV_SYSFS "/%s", rel);
	return read_file(path, buf, len);
}

/* Same as a number, ~0 when it cannot be read or is not a number. */
static inline __u64 kv_space_sysfs_get(__u32 id, const char *attr)
{
	char rel[128];

	snprintf(rel, sizeof(rel), "space/%u/%s", id, attr);
	return sysfs_get(rel);
}

/* 1 when the per-space sysfs directory of @id exists. */
static inline int kv_space_sysfs_exists(__u32 id)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), KV_SYSFS "/space/%u", id);
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

#endif /* KVPOOL_SELFTEST_UTIL_H */
