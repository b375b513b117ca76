// SPDX-License-Identifier: GPL-2.0
/*
 * tenant_test: per-uid limits on the pool pages that back a uid's spaces.
 *
 *   - sysfs uid_limit: "UID BYTES" sets (0 removes), each line reads
 *     "uid=U limit_bytes=L used_bytes=B spaces=N"; malformed or out of
 *     range writes are EINVAL and change nothing (an empty write never
 *     reaches the module: sysfs returns 0 for it); non-root writes are
 *     EACCES; the file is root's alone (mode 0600: it shows every uid's
 *     usage);
 *   - a uid limited to 4 MiB: its space grows to exactly 4 MiB, then ALLOC
 *     evicts the space's own cached blocks with cause TENANT (events and
 *     statistics) and fails with ENOSPC, evicting nothing, when free +
 *     cached is short; another uid is unaffected;
 *   - used_bytes sums the backing of all spaces of the uid, which share
 *     the limit;
 *   - uid_limit_default_bytes applies to uids without a limit of their
 *     own (an explicit limit overrides it; 0 is unlimited).
 *
 * The spaces are created through a file that a child dropped to the uid
 * opened and passed back (kv_open_as()): rights are fixed at open, so the
 * space's owner and tenant (the opener's fsuid) are that uid while the
 * test, as root, drives the fd (passed_fd_keeps_openers_rights).
 *
 * Issue 30 item 9 (userns_uids_charged_to_owner): a uid that owns a user
 * namespace with a range of ids mapped (65,536 from /etc/subuid) is one
 * tenant, whichever of those ids opens the device: spaces_per_uid_max and
 * its byte limit count them all.
 */
#include "kvpool_prefix_util.h"

#include <fcntl.h>
#include <sys/uio.h>

#define BLOCK	(64 * KiB)
#define QUOTA	(16 * MiB)	/* 256 blocks */

static const struct kv_cred u1000 = { .uid = 1000, .gid = 1000 };
static const struct kv_cred u1001 = { .uid = 1001, .gid = 1001 };
static const struct kv_cred u1002 = { .uid = 1002, .gid = 1002 };
static const struct kv_cred u1003 = { .uid = 1003, .gid = 1003 };

FIXTURE(tenant) {
	char name[4][KVPOOL_NAME_MAX];
	__u64 def0;
	int have_def;
	__u64 tag;
};

FIXTURE_SETUP(tenant)
{
	struct kvpool_info info;
	int i;

	for (i = 0; i < 4; i++)
		kv_name(self->name[i], sizeof(self->name[i]), "tenant");
	self->tag = kv_now_us();
	ASSERT_EQ(0, kv_pool_info(&info));
	ASSERT_EQ(KVPOOL_API_VERSION, info.api_version);
	if (info.chunk_size != KV_CHUNK)
		SKIP(return, "expects 2 MiB chunks, not %u", info.chunk_size);
	self->have_def = sysfs_u64("uid_limit_default_bytes", &self->def0) == 0;
}

FIXTURE_TEARDOWN(tenant)
{
	unsigned int uid;

	for (uid = 1000; uid <= 1003; uid++)
		px_set_uid_limit(uid, 0);
	if (self->have_def)
		px_sysfs_write_u64("uid_limit_default_bytes", self->def0);
}

/*
 * Create name (CREATE|EXCL, mode 0666) through /dev/kvpool opened by uid
 * c (kv_open_as()): the space's owner and tenant are the opener's.  The
 * test, as root, drives the fd.  Returns the fd or -errno.
 */
static int create_as(const struct kv_cred *c, const char *name, __u64 block, __u64 quota,
		     struct kvpool_space_open *out)
{
	struct kvpool_space_open so;
	int fd, ret;

	fd = kv_open_as(c);
	if (fd < 0)
		return fd;
	kv_so_init(&so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL, block, quota);
	so.mode = 0666;
	ret = kv_space_open(fd, &so);
	if (ret) {
		close(fd);
		return ret;
	}
	if (out)
		*out = so;
	return fd;
}

/*
 * In a child that dropped to c and opened the device as c: join name and
 * ALLOC count; 0 or -errno.
 */
static int alloc_as(const struct kv_cred *c, const char *name, __u32 count)
{
	int st;
	pid_t pid;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		static __u32 ids[KVPOOL_MAX_BATCH];
		int fd = kv_drop_and_open(c), ret;

		if (fd < 0)
			_exit(200);
		if (kv_join(fd, name, NULL))
			_exit(201);
		ret = kv_alloc(fd, ids, count);
		_exit(ret ? -ret : 0);
	}
	st = kv_wait(pid);
	return st >= 200 ? -1000 - st : -st;
}

/* uid's line, asserting that it exists and parses. */
#define UID_LINE(uid, l) do { \
	int __r = px_uid_line((uid), (l)); \
	ASSERT_EQ(1, __r) TH_LOG("uid %u in uid_limit: %s", (unsigned int)(uid), \
				 __r == 0 ? "no line" : strerror(-__r)); \
} while (0)

/* used_bytes of uid (0 when it has no line). */
static __u64 used_of(unsigned int uid)
{
	struct px_uid_line l;
	int r = px_uid_line(uid, &l);

	return r == 1 ? l.used_bytes : r == 0 ? 0 : ~0ULL;
}

TEST_F(tenant, uid_limit_format_and_errors)
{
	static const char *const bad[] = {
		"1000", "1000 ", " 4096", "abc 4096", "1000 abc", "1000 -1", "-1 4096",
		"4294967295 4096", "1000 4096 7", "1000 4096x", "1000x 4096",
		"1000 18446744073709551616", "1000 99999999999999999999999",
	};
	struct px_uid_line l;
	char buf[4096], path[256];
	struct stat sb;
	unsigned int i;
	pid_t pid;
	int st;

	RETURN_IF_SKIPPED();
	snprintf(path, sizeof(path), KV_SYSFS "/uid_limit");
	ASSERT_EQ(0, stat(path, &sb));
	EXPECT_EQ(0600, sb.st_mode & 07777);
	snprintf(path, sizeof(path), KV_SYSFS "/uid_limit_default_bytes");
	ASSERT_EQ(0, stat(path, &sb));
	EXPECT_EQ(0644, sb.st_mode & 07777);

	ASSERT_EQ(0, px_set_uid_limit(1000, 4 * MiB));
	UID_LINE(1000, &l);
	EXPECT_EQ(1000, l.uid);
	EXPECT_EQ(4 * MiB, l.limit_bytes);
	EXPECT_EQ(0, l.used_bytes);
	EXPECT_EQ(0, l.spaces);
	/* Every line parses (px_uid_line checks them all on the way). */
	ASSERT_LT(0, px_sysfs_read("uid_limit", buf, sizeof(buf)));
	TH_LOG("uid_limit:\n%s", buf);

	/* A newline (echo) is fine; a second write replaces the limit. */
	EXPECT_EQ(0, sysfs_write("uid_limit", "1000 8388608\n"));
	UID_LINE(1000, &l);
	EXPECT_EQ(8 * MiB, l.limit_bytes);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = sysfs_write("uid_limit", bad[i]), found;

		EXPECT_EQ(-EINVAL, r) TH_LOG("wrote \"%s\"", bad[i]);
		found = px_uid_line(1000, &l);
		EXPECT_EQ(1, found) TH_LOG("after \"%s\" uid 1000 has no line", bad[i]);
		if (found == 1)
			EXPECT_EQ(8 * MiB, l.limit_bytes) TH_LOG("after \"%s\"", bad[i]);
		/* Go on from the same state whatever the write did. */
		ASSERT_EQ(0, px_set_uid_limit(1000, 8 * MiB));
	}
	EXPECT_EQ(-EINVAL, sysfs_write("uid_limit_default_bytes", "abc"));
	EXPECT_EQ(-EINVAL, sysfs_write("uid_limit_default_bytes", "-1"));
	EXPECT_EQ(-EINVAL, sysfs_write("uid_limit_default_bytes", "18446744073709551616"));
	EXPECT_EQ(-EINVAL, sysfs_write("uid_limit_default_bytes", "4096x"));
	EXPECT_EQ(0, sysfs_get("uid_limit_default_bytes"));

	/* Not root: EACCES on write; reading is allowed. */
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		char b2[4096];
		int fd;

		if (kv_drop_to(&u1001))
			_exit(10);
		fd = open(KV_SYSFS "/uid_limit", O_WRONLY);
		if (fd >= 0 || errno != EACCES)
			_exit(11);
		fd = open(KV_SYSFS "/uid_limit_default_bytes", O_WRONLY);
		if (fd >= 0 || errno != EACCES)
			_exit(12);
		/* Every uid's usage is root's to read (issue 14 finding 14). */
		if (px_sysfs_read("uid_limit", b2, sizeof(b2)) != -EACCES)
			_exit(13);
		_exit(0);
	}
	st = kv_wait(pid);
	EXPECT_EQ(0, st) TH_LOG("11/12: a non-root write was not EACCES, 13: a non-root read was not");

	/* 0 removes the limit: the line goes, or says 0. */
	EXPECT_EQ(0, px_set_uid_limit(1000, 0));
	if (px_uid_line(1000, &l) == 1)
		EXPECT_EQ(0, l.limit_bytes);
}

TEST_F_TIMEOUT(tenant, limit_evicts_own_cached_as_tenant_then_enospc, 60)
{
	struct kvpool_space_stats s0, s1;
	struct kvpool_space_open so;
	struct kvpool_space_info si;
	struct kvpool_event ev[64];
	__u64 g0[KVPOOL_EVICT_CAUSES] = { 0 }, g1[KVPOOL_EVICT_CAUSES] = { 0 };
	struct px_uid_line l;
	__u32 ids[256], more[256];
	int a, b, i, n, evicted = 0, qp = 0;

	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, px_set_uid_limit(1000, 4 * MiB));
	a = create_as(&u1000, self->name[0], BLOCK, QUOTA, &so);
	ASSERT_LE(0, a) TH_LOG("create as uid 1000: %s", strerror(-a));
	EXPECT_EQ(1000, so.uid);
	UID_LINE(1000, &l);
	EXPECT_EQ(4 * MiB, l.limit_bytes);
	EXPECT_EQ(1, l.spaces);
	EXPECT_EQ(0, l.used_bytes);

	/* Exactly the limit: 2 chunks, 64 blocks. */
	ASSERT_EQ(0, kv_alloc(a, ids, 64));
	ASSERT_EQ(0, kv_space_info(a, &si));
	EXPECT_EQ(4 * MiB, si.backed_bytes);
	UID_LINE(1000, &l);
	EXPECT_EQ(4 * MiB, l.used_bytes);
	EXPECT_EQ(-ENOSPC, kv_alloc(a, more, 1));
	/* The same from a process of the uid itself. */
	EXPECT_EQ(-ENOSPC, alloc_as(&u1000, self->name[0], 1));
	ASSERT_EQ(0, px_stats(a, &s0));
	for (i = 0; i < KVPOOL_EVICT_CAUSES; i++)
		EXPECT_EQ(0, s0.evictions[i]) TH_LOG("cause %d", i);
	/* Each failed ALLOC sent this fd a QUOTA_PRESSURE with count 0. */
	n = px_drain_events(a, ev, 64, NULL);
	ASSERT_EQ(2, n);
	for (i = 0; i < n; i++) {
		EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[i].type);
		EXPECT_EQ(0, ev[i].count);
	}

	/* Blocks 0..9 published and released: 10 cached, oldest first. */
	for (i = 0; i < 10; i++) {
		__u8 h[KVPOOL_HASH_BYTES];
		__u32 got, fl;

		px_hash(h, self->tag, i);
		ASSERT_EQ(0, px_publish1(a, ids[i], h, &got, &fl));
		ASSERT_EQ(ids[i], got);
		ASSERT_EQ(0, px_release1(a, ids[i]));
	}
	ASSERT_EQ(0, px_sysfs_evictions("evictions", g0));

	/* ALLOC 4: the 4 oldest go, cause TENANT. */
	ASSERT_EQ(0, kv_alloc(a, more, 4));
	ASSERT_EQ(0, px_stats(a, &s1));
	EXPECT_EQ(4, s1.evictions[KVPOOL_EVICT_TENANT]);
	EXPECT_EQ(0, s1.evictions[KVPOOL_EVICT_QUOTA]);
	EXPECT_EQ(0, s1.evictions[KVPOOL_EVICT_POOL]);
	EXPECT_EQ(6, s1.cached_blocks);
	n = px_drain_events(a, ev, 64, NULL);
	ASSERT_EQ(5, n);
	for (i = 0; i < n; i++) {
		EXPECT_EQ(3 + i, ev[i].seq);
		EXPECT_EQ(KVPOOL_EVICT_TENANT, ev[i].cause);
		if (ev[i].type == KVPOOL_EVENT_EVICTED) {
			__u8 h[KVPOOL_HASH_BYTES];

			px_hash(h, self->tag, evicted);
			EXPECT_EQ(ids[evicted], ev[i].block);
			EXPECT_EQ(0, memcmp(h, ev[i].hash, KVPOOL_HASH_BYTES));
			evicted++;
		} else {
			EXPECT_EQ(KVPOOL_EVENT_QUOTA_PRESSURE, ev[i].type);
			EXPECT_EQ(4, ev[i].count);
			qp++;
		}
	}
	EXPECT_EQ(4, evicted);
	EXPECT_EQ(1, qp);

	/* 6 cached, none free: ALLOC 7 fails and evicts nothing. */
	EXPECT_EQ(-ENOSPC, kv_alloc(a, more + 4, 7));
	ASSERT_EQ(0, px_stats(a, &s0));
	EXPECT_EQ(4, s0.evictions[KVPOOL_EVICT_TENANT]);
	EXPECT_EQ(6, s0.cached_blocks);
	for (i = 4; i < 10; i++) {
		__u8 h[KVPOOL_HASH_BYTES];

		px_hash(h, self->tag, i);
		/* Looked up and released again in order: the LRU order stays. */
		EXPECT_EQ(1, px_present(a, h, NULL)) TH_LOG("hash %d", i);
	}
	ASSERT_EQ(0, kv_alloc(a, more + 4, 6));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, more + 10, 1));
	ASSERT_EQ(0, px_stats(a, &s1));
	EXPECT_EQ(10, s1.evictions[KVPOOL_EVICT_TENANT]);
	EXPECT_EQ(0, s1.cached_blocks);
	ASSERT_EQ(0, px_sysfs_evictions("evictions", g1));
	EXPECT_EQ(10, g1[KVPOOL_EVICT_TENANT] - g0[KVPOOL_EVICT_TENANT]);
	EXPECT_EQ(0, g1[KVPOOL_EVICT_QUOTA] - g0[KVPOOL_EVICT_QUOTA]);
	UID_LINE(1000, &l);
	EXPECT_EQ(4 * MiB, l.used_bytes);

	/* uid 1001 has no limit: its space grows to its quota meanwhile. */
	b = create_as(&u1001, self->name[1], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, b) TH_LOG("create as uid 1001: %s", strerror(-b));
	EXPECT_EQ(0, kv_alloc(b, more, 256));
	EXPECT_EQ(QUOTA, used_of(1001));
	EXPECT_EQ(4 * MiB, used_of(1000));

	/* A higher limit lets the space grow again. */
	ASSERT_EQ(0, px_set_uid_limit(1000, 6 * MiB));
	EXPECT_EQ(0, kv_alloc(a, more, 32));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, more + 32, 1));
	EXPECT_EQ(6 * MiB, used_of(1000));

	close(a);
	close(b);
	EXPECT_EQ(0, used_of(1000));
	EXPECT_EQ(0, used_of(1001));
	if (px_uid_line(1000, &l) == 1)
		EXPECT_EQ(0, l.spaces);
	ASSERT_KV_CHECK_OK();
}

/*
 * Issue 14 finding 4: teardown uncharged the owner while a page reference
 * (here vmsplice into a pipe) kept the chunk on the held list, so a uid
 * limited to 4 MiB could pin 4 MiB, drop the space, and take 4 MiB more,
 * again and again, showing 0 bytes used.  Held chunks now stay charged
 * until they are back in the pool.
 */
TEST_F_TIMEOUT(tenant, pinned_pages_stay_charged, 60)
{
	const __u32 n = 4 * MiB / BLOCK;
	static __u32 ids[4 * MiB / BLOCK];
	int fd, pipefd[2], tries;
	struct iovec iov[2];
	char *p;

	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, px_set_uid_limit(1001, 4 * MiB));
	fd = create_as(&u1001, self->name[0], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, kv_alloc(fd, ids, n));
	EXPECT_EQ(4 * MiB, used_of(1001));
	p = kv_mmap(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x5a, 4 * MiB);
	/* One page of each 2 MiB chunk goes into a pipe: both chunks stay busy. */
	ASSERT_EQ(0, pipe(pipefd));
	iov[0] = (struct iovec){ .iov_base = p, .iov_len = 4096 };
	iov[1] = (struct iovec){ .iov_base = p + 2 * MiB, .iov_len = 4096 };
	ASSERT_EQ(8192, vmsplice(pipefd[1], iov, 2, 0));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	/* The space is gone; its pinned chunks still count against uid 1001. */
	EXPECT_EQ(4 * MiB, used_of(1001));
	fd = create_as(&u1001, self->name[1], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-ENOSPC, kv_alloc(fd, ids, 1));
	/* The pipe lets go: the chunks return to the pool and the charge with them. */
	close(pipefd[0]);
	close(pipefd[1]);
	for (tries = 0; tries < 100 && used_of(1001); tries++)
		px_sleep_ms(50);
	EXPECT_EQ(0, used_of(1001));
	EXPECT_EQ(0, kv_alloc(fd, ids, n));
	EXPECT_EQ(4 * MiB, used_of(1001));
	close(fd);
}

/*
 * Issue 14 finding 6: nothing bounded the spaces of one uid (20,000
 * persistent ones cost 148 MiB and made every create 20 times slower).
 * With spaces_per_uid_max at 2, a uid's third create fails with EDQUOT;
 * other uids are unaffected and a destroyed space frees a slot.
 */
TEST_F(tenant, spaces_per_uid_limit)
{
	__u64 max0;
	char buf[32];
	int a, b, c, d;

	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, sysfs_u64("spaces_per_uid_max", &max0));
	EXPECT_EQ(1024, max0);
	EXPECT_EQ(-EINVAL, sysfs_write("spaces_per_uid_max", "abc"));
	EXPECT_EQ(-EINVAL, sysfs_write("spaces_per_uid_max", "-1"));
	ASSERT_EQ(0, sysfs_write("spaces_per_uid_max", "2"));
	a = create_as(&u1001, self->name[0], BLOCK, QUOTA, NULL);
	b = create_as(&u1001, self->name[1], BLOCK, QUOTA, NULL);
	c = create_as(&u1001, self->name[2], BLOCK, QUOTA, NULL);
	d = create_as(&u1002, self->name[3], BLOCK, QUOTA, NULL);
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)max0);
	EXPECT_LE(0, a);
	EXPECT_LE(0, b);
	EXPECT_EQ(-EDQUOT, c);
	EXPECT_LE(0, d);
	/* The last fd of a gives the slot back. */
	close(a);
	c = create_as(&u1001, self->name[2], BLOCK, QUOTA, NULL);
	EXPECT_LE(0, c);
	ASSERT_EQ(0, sysfs_write("spaces_per_uid_max", buf));
	if (b >= 0)
		close(b);
	if (c >= 0)
		close(c);
	if (d >= 0)
		close(d);
}

/*
 * Issue 14 finding 14: sysfs showed every tenant's space names, owners,
 * counters and per-uid usage to every local user.  The per-space files
 * and uid_limit are root's now; the pool totals stay readable.
 */
TEST_F(tenant, other_tenants_sysfs_is_root_only)
{
	struct kvpool_space_open so;
	char path[256];
	pid_t pid;
	int fd;

	RETURN_IF_SKIPPED();
	fd = create_as(&u1001, self->name[0], BLOCK, QUOTA, &so);
	ASSERT_LE(0, fd);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		static const char *const own[] = { "name", "uid", "backed_bytes", "hits" };
		unsigned int i;

		if (kv_drop_to(&u1002))
			_exit(200);
		for (i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
			snprintf(path, sizeof(path), KV_SYSFS "/space/%u/%s", so.space_id, own[i]);
			if (open(path, O_RDONLY) >= 0 || errno != EACCES)
				_exit(10 + i);
		}
		if (open(KV_SYSFS "/uid_limit", O_RDONLY) >= 0 || errno != EACCES)
			_exit(20);
		if (open(KV_SYSFS "/free_bytes", O_RDONLY) < 0)
			_exit(21);
		_exit(0);
	}
	EXPECT_EQ(0, kv_wait(pid));
	/* Root still reads them (kvctl). */
	EXPECT_LT(0, kv_space_sysfs(so.space_id, "name", path, sizeof(path)));
	close(fd);
}

TEST_F(tenant, two_spaces_of_one_uid_add_up_and_share_the_limit)
{
	struct kvpool_space_stats st;
	struct px_uid_line l;
	char dbg[8192], want[160];
	__u32 ids[128];
	int a, b, i;

	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, px_set_uid_limit(1002, 6 * MiB));
	a = create_as(&u1002, self->name[0], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, a) TH_LOG("create: %s", strerror(-a));
	b = create_as(&u1002, self->name[1], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, b) TH_LOG("create: %s", strerror(-b));
	UID_LINE(1002, &l);
	EXPECT_EQ(2, l.spaces);

	ASSERT_EQ(0, kv_alloc(a, ids, 32));		/* 2 MiB */
	EXPECT_EQ(2 * MiB, used_of(1002));
	ASSERT_EQ(0, kv_alloc(b, ids + 32, 64));	/* 4 MiB */
	UID_LINE(1002, &l);
	EXPECT_EQ(6 * MiB, l.used_bytes);
	EXPECT_EQ(2, l.spaces);
	EXPECT_EQ(6 * MiB, l.limit_bytes);
	/* Neither may grow now. */
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 96, 1));
	EXPECT_EQ(-ENOSPC, kv_alloc(b, ids + 96, 1));
	/* b's cached blocks are b's: a's ALLOC does not evict them. */
	for (i = 0; i < 4; i++) {
		__u8 h[KVPOOL_HASH_BYTES];

		px_hash(h, self->tag, i);
		ASSERT_EQ(0, px_publish1(b, ids[32 + i], h, NULL, NULL));
		ASSERT_EQ(0, px_release1(b, ids[32 + i]));
	}
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 96, 1));
	ASSERT_EQ(0, px_stats(b, &st));
	EXPECT_EQ(4, st.cached_blocks);
	EXPECT_EQ(0, st.evictions[KVPOOL_EVICT_TENANT]);
	/* b's own ALLOC does, with cause TENANT. */
	ASSERT_EQ(0, kv_alloc(b, ids + 32, 4));
	ASSERT_EQ(0, px_stats(b, &st));
	EXPECT_EQ(0, st.cached_blocks);
	EXPECT_EQ(4, st.evictions[KVPOOL_EVICT_TENANT]);

	/* debugfs tenants shows the same line. */
	if (read_file("/sys/kernel/debug/kvpool/tenants", dbg, sizeof(dbg)) > 0) {
		snprintf(want, sizeof(want), "uid=1002 limit_bytes=%llu used_bytes=%llu spaces=2\n",
			 6 * MiB, 6 * MiB);
		EXPECT_NE(NULL, strstr(dbg, want)) TH_LOG("debugfs tenants:\n%s", dbg);
	} else {
		EXPECT_TRUE(false) TH_LOG("no debugfs tenants");
	}

	/* FREE keeps the backing: b can reuse its blocks, a still cannot grow. */
	ASSERT_EQ(0, kv_free(b, ids + 32, 32));
	EXPECT_EQ(6 * MiB, used_of(1002));
	EXPECT_EQ(0, kv_alloc(b, ids + 32, 32));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 96, 1));

	/* Closing b tears its space down: its 4 MiB go, a may grow by 4 MiB. */
	close(b);
	UID_LINE(1002, &l);
	EXPECT_EQ(2 * MiB, l.used_bytes);
	EXPECT_EQ(1, l.spaces);
	EXPECT_EQ(0, kv_alloc(a, ids + 32, 64));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 96, 1));
	EXPECT_EQ(6 * MiB, used_of(1002));
	close(a);
	EXPECT_EQ(0, used_of(1002));
	ASSERT_KV_CHECK_OK();
}

TEST_F(tenant, default_limit_applies_without_own_limit)
{
	__u32 ids[256];
	int a, c;

	RETURN_IF_SKIPPED();
	ASSERT_TRUE(self->have_def) TH_LOG("no sysfs uid_limit_default_bytes");
	EXPECT_EQ(0, self->def0);
	ASSERT_EQ(0, sysfs_write("uid_limit_default_bytes", "2097152"));
	EXPECT_EQ(2 * MiB, sysfs_get("uid_limit_default_bytes"));

	a = create_as(&u1003, self->name[0], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, a) TH_LOG("create: %s", strerror(-a));
	EXPECT_EQ(0, kv_alloc(a, ids, 32));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 32, 1));
	EXPECT_EQ(2 * MiB, used_of(1003));

	/* An explicit limit overrides the default... */
	ASSERT_EQ(0, px_set_uid_limit(1003, 4 * MiB));
	EXPECT_EQ(0, kv_alloc(a, ids + 32, 32));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 64, 1));
	/* ...and without it the default is back (4 MiB used > 2 MiB). */
	ASSERT_EQ(0, px_set_uid_limit(1003, 0));
	EXPECT_EQ(-ENOSPC, kv_alloc(a, ids + 64, 1));
	/* The default covers every such uid: 1001 too, while 1000 has its own. */
	ASSERT_EQ(0, px_set_uid_limit(1000, 8 * MiB));
	c = create_as(&u1001, self->name[1], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, c);
	EXPECT_EQ(0, kv_alloc(c, ids + 64, 32));
	EXPECT_EQ(-ENOSPC, kv_alloc(c, ids + 96, 1));
	close(c);
	c = create_as(&u1000, self->name[2], BLOCK, QUOTA, NULL);
	ASSERT_LE(0, c);
	EXPECT_EQ(0, kv_alloc(c, ids + 64, 128));
	EXPECT_EQ(-ENOSPC, kv_alloc(c, ids + 192, 1));
	close(c);

	/* Default 0: unlimited again. */
	ASSERT_EQ(0, sysfs_write("uid_limit_default_bytes", "0"));
	EXPECT_EQ(0, sysfs_get("uid_limit_default_bytes"));
	EXPECT_EQ(0, kv_alloc(a, ids + 64, 64));
	EXPECT_EQ(8 * MiB, used_of(1003));
	close(a);
	ASSERT_KV_CHECK_OK();
}

/* What a process running as uid b did with a file that uid a opened. */
struct as_b {
	int create, alloc, more;
	uid_t ruid;
	struct kvpool_space_open so;
};

/*
 * Fork a process that ends up as uid @b using /dev/kvpool opened as uid
 * @a.  With @fd < 0 it opens the device as @a itself and then switches to
 * @b with setresuid(); else it drops to @b first and gets @fd (opened as
 * @a) over a unix socket.  As @b it creates @name (mode 0666), ALLOCs
 * @count blocks and then one more, reports in *res and holds the space
 * until *hold is closed.  Returns the pid, or -errno.
 */
static pid_t use_as(const struct kv_cred *a, const struct kv_cred *b, int fd,
		    const char *name, __u32 count, struct as_b *res, int *hold)
{
	int sk[2], rep[2], hp[2], ret, inherit = kv_fd_channel(sk);
	pid_t pid;

	if (inherit < 0)
		return inherit;
	if (pipe(rep) || pipe(hp))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		static __u32 ids[KVPOOL_MAX_BATCH];
		struct as_b r;
		int kfd;
		char c;

		if (!inherit)
			close(sk[0]);
		close(rep[0]);
		close(hp[1]);
		memset(&r, 0, sizeof(r));
		if (fd < 0) {
			/* uid a, saved uid 0: a's ids, a way back, no capability but the open's. */
			if (setgroups(a->ngroups, a->groups) ||
			    setresgid(a->gid, a->gid, 0) || setresuid(a->uid, a->uid, 0) ||
			    kv_dac_override(1))
				_exit(200);
			kfd = kv_open();
			if (kfd < 0)
				_exit(201);
			/* Back to root, then b for good: the file keeps a's ids. */
			if (setresuid(0, 0, 0) || setresgid(0, 0, 0) || kv_drop_to(b))
				_exit(202);
		} else {
			if (!inherit)
				close(fd);
			if (kv_drop_to(b))
				_exit(202);
			kfd = inherit ? fd : kv_recv_fd(sk[1]);
			if (kfd < 0)
				_exit(203);
		}
		r.ruid = getuid();
		kv_so_init(&r.so, name, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL, BLOCK, QUOTA);
		r.so.mode = 0666;
		r.create = kv_space_open(kfd, &r.so);
		r.alloc = r.create ? 1 : kv_alloc(kfd, ids, count);
		r.more = r.create ? 1 : kv_alloc(kfd, ids + count, 1);
		if (write(rep[1], &r, sizeof(r)) != sizeof(r))
			_exit(204);
		/* Hold the space until the parent closes its end. */
		while (read(hp[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(rep[1]);
	close(hp[0]);
	ret = 0;
	if (!inherit) {
		close(sk[1]);
		ret = fd < 0 ? 0 : kv_send_fd(sk[0], fd);
		close(sk[0]);
	}
	if (!ret && read(rep[0], res, sizeof(*res)) != sizeof(*res))
		ret = -EPIPE;
	close(rep[0]);
	if (ret) {
		close(hp[1]);
		kill(pid, SIGKILL);
		kv_wait(pid);
		return ret;
	}
	*hold = hp[1];
	return pid;
}

/*
 * Issue 14 finding 12: the module took a created space's owner and tenant
 * from the caller, not from the file's opener, so a file kept across
 * setresuid() or passed over a unix socket created spaces as, and charged,
 * whoever used it; a user outside the device's group could create spaces
 * with a member's fd and charge itself.  Rights are fixed at open now: uid
 * 1001 opens, uid 1002 creates and fills, and 1001 owns the space and pays
 * for it (its 4 MiB limit stops the ALLOC), by either route.
 */
/* One route of passed_fd_charges_the_opener: @passed, or kept across setresuid(). */
static void opener_charged(struct __test_metadata *_metadata, const char *name, int passed)
{
	const char *how = passed ? "passed over a unix socket" : "kept across setresuid()";
	struct px_uid_line l;
	int hold = -1, tries, fd = -1, got;
	struct as_b r;
	pid_t pid;

	if (passed) {
		fd = kv_open_as(&u1001);
		ASSERT_LE(0, fd) TH_LOG("open as 1001: %s", strerror(-fd));
	}
	pid = use_as(&u1001, &u1002, fd, name, 4 * MiB / BLOCK, &r, &hold);
	if (fd >= 0)
		close(fd);
	ASSERT_LT(0, pid) TH_LOG("%s: %s", how, strerror(-pid));
	EXPECT_EQ(1002, r.ruid) TH_LOG("%s", how);
	EXPECT_EQ(0, r.create) TH_LOG("%s: create: %s", how, strerror(-r.create));
	EXPECT_EQ(1001, r.so.uid) TH_LOG("%s", how);
	EXPECT_EQ(1001, r.so.gid) TH_LOG("%s", how);
	EXPECT_EQ(0, r.alloc) TH_LOG("%s: alloc: %s", how, strerror(-r.alloc));
	/* 1001's limit, not 1002's (it has none). */
	EXPECT_EQ(-ENOSPC, r.more) TH_LOG("%s", how);
	got = px_uid_line(1001, &l);
	EXPECT_EQ(1, got) TH_LOG("%s: no line for uid 1001", how);
	if (got == 1) {
		EXPECT_EQ(4 * MiB, l.used_bytes) TH_LOG("%s", how);
		EXPECT_EQ(1, l.spaces) TH_LOG("%s", how);
	}
	got = px_uid_line(1002, &l);
	EXPECT_TRUE(got == 0 || (got == 1 && !l.spaces && !l.used_bytes))
		TH_LOG("%s: uid 1002 charged %llu bytes, %llu spaces", how,
		       (unsigned long long)l.used_bytes, (unsigned long long)l.spaces);
	close(hold);
	EXPECT_EQ(0, kv_wait(pid));
	for (tries = 0; tries < 100 && used_of(1001); tries++)
		px_sleep_ms(50);
	EXPECT_EQ(0, used_of(1001));
}

/*
 * Issue 14 finding 12: the module took a created space's owner and tenant
 * from the caller, not from the file's opener, so a file kept across
 * setresuid() or passed over a unix socket created spaces as, and charged,
 * whoever used it; a user outside the device's group could create spaces
 * with a member's fd and charge itself.  Rights are fixed at open now: uid
 * 1001 opens, uid 1002 creates and fills, and 1001 owns the space and pays
 * for it (its 4 MiB limit stops the ALLOC), by either route.
 */
TEST_F_TIMEOUT(tenant, passed_fd_charges_the_opener, 60)
{
	RETURN_IF_SKIPPED();
	ASSERT_EQ(0, px_set_uid_limit(1001, 4 * MiB));
	opener_charged(_metadata, self->name[0], 0);
	opener_charged(_metadata, self->name[1], 1);
}

#define NS_OWNER	4242		/* the unprivileged uid that owns the namespace */
#define NS_BASE		200000		/* its subordinate range, as adduser gives it */
#define NS_IDS		5		/* ids inside it that each create a space */

/*
 * The namespace's child: become NS_OWNER, unshare a user namespace, wait
 * for the maps, then as inner uids 0..NS_IDS-1 in turn open /dev/kvpool
 * and pass each fd to the parent.  Exit code: the step that failed.
 */
static int userns_child(int go, int sk)
{
	char c;
	int i, fd;

	if (setgroups(0, NULL) || setresgid(NS_OWNER, NS_OWNER, NS_OWNER) ||
	    setresuid(NS_OWNER, NS_OWNER, NS_OWNER))
		return 10;
	if (unshare(CLONE_NEWUSER)) {
		c = (char)errno;
		return write(sk, &c, 1) == 1 ? 11 : 12;
	}
	c = 0;
	if (write(sk, &c, 1) != 1 || read(go, &c, 1) != 1)
		return 13;
	/* Root of the namespace (kuid NS_BASE), then each inner uid. */
	if (setresgid(0, 0, 0) || setresuid(0, 0, 0))
		return 14;
	for (i = 0; i < NS_IDS; i++) {
		if (setresuid(0, i, 0))
			return 15;
		fd = open(KV_DEV, O_RDWR | O_CLOEXEC);
		if (setresuid(0, 0, 0))
			return 16;
		if (fd < 0)
			return 17;
		if (kv_send_fd(sk, fd))
			return 18;
		close(fd);
	}
	return 0;
}

static int write_map(pid_t pid, const char *which, const char *map)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, which);
	return kv_write_path(path, map);
}

TEST_F_TIMEOUT(tenant, userns_uids_charged_to_owner, 60)
{
	char names[NS_IDS][KVPOOL_NAME_MAX], map[64], buf[32];
	int fds[NS_IDS], ret[NS_IDS], go[2], sk[2], i, st;
	struct kvpool_space_open so;
	struct px_uid_line l;
	struct stat dev;
	__u64 max0;
	pid_t pid;
	char c;

	RETURN_IF_SKIPPED();
	/* The debug kernel (tinyconfig) has neither. */
	if (access("/proc/self/ns/user", F_OK))
		SKIP(return, "no user namespaces (CONFIG_USER_NS)");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sk))
		SKIP(return, "no unix sockets to pass the fds: %s", strerror(errno));
	ASSERT_EQ(0, stat(KV_DEV, &dev));
	ASSERT_EQ(0, sysfs_u64("spaces_per_uid_max", &max0));
	/* The inner ids are mapped to no group of the device: let them open it. */
	ASSERT_EQ(0, chmod(KV_DEV, 0666));
	ASSERT_EQ(0, sysfs_write("spaces_per_uid_max", "3"));
	ASSERT_EQ(0, pipe(go));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(go[1]);
		close(sk[0]);
		_exit(userns_child(go[0], sk[1]));
	}
	close(go[0]);
	close(sk[1]);
	ASSERT_EQ(1, read(sk[0], &c, 1));
	if (c) {
		kill(pid, SIGKILL);
		kv_wait(pid);
		chmod(KV_DEV, dev.st_mode & 07777);
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)max0);
		sysfs_write("spaces_per_uid_max", buf);
		SKIP(return, "unshare(CLONE_NEWUSER) as uid %d: %s", NS_OWNER, strerror(c));
	}
	snprintf(map, sizeof(map), "0 %d 65536", NS_BASE);
	EXPECT_EQ(0, write_map(pid, "uid_map", map));
	EXPECT_EQ(0, write_map(pid, "gid_map", map));
	ASSERT_EQ(1, write(go[1], "g", 1));
	for (i = 0; i < NS_IDS; i++)
		fds[i] = kv_recv_fd(sk[0]);
	st = kv_wait(pid);
	EXPECT_EQ(0, st);

	/* Each fd is a different kuid (NS_BASE + i): one tenant, NS_OWNER. */
	for (i = 0; i < NS_IDS; i++) {
		kv_name(names[i], sizeof(names[i]), "userns");
		ret[i] = fds[i] < 0 ? fds[i] : kv_create(fds[i], names[i], BLOCK, QUOTA, &so);
	}
	for (i = 0; i < NS_IDS; i++) {
		int want = i < 3 ? 0 : -EDQUOT, got = ret[i];

		EXPECT_EQ(want, got) TH_LOG("inner uid %d: %s", i, strerror(-got));
	}
	EXPECT_EQ(1, px_uid_line(NS_OWNER, &l));
	EXPECT_EQ(3, l.spaces);
	EXPECT_EQ(0, px_uid_line(NS_BASE, NULL));
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)max0);
	EXPECT_EQ(0, sysfs_write("spaces_per_uid_max", buf));
	EXPECT_EQ(0, chmod(KV_DEV, dev.st_mode & 07777));
	for (i = 0; i < NS_IDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
