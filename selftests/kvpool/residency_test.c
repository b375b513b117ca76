// SPDX-License-Identifier: GPL-2.0
/*
 * residency_test: GPU residency records (KVPOOL_IOC_RESIDENCY): ADD, DEL
 * and CLEAR, the device table's slots, LOOKUP's device masks seen from two
 * processes, records that vanish when their fd closes and when their block
 * becomes FREE (FREE, dedup, eviction) but stay while it is only CACHED,
 * every errno, and the debugfs residency dump.
 */
#include "kvpool_util.h"

#define BB	(256 * KiB)
#define Q8	(2 * MiB)	/* 8 blocks of BB: one chunk */
#define SEED	0x7e5du

/* Device UUIDs by number. */
#define DEV_A	1
#define DEV_B	2
#define DEV_C	3

FIXTURE(res) {
	char name[KVPOOL_NAME_MAX];
	struct kvpool_space_open so;
	int fd;
	__u32 p[3];		/* hashes 0..2 published by fd */
};

FIXTURE_SETUP(res)
{
	kv_name(self->name, sizeof(self->name), "resid");
	self->fd = kv_open_create(self->name, BB, Q8, &self->so);
	ASSERT_LE(0, self->fd) TH_LOG("create: %s", strerror(-self->fd));
	ASSERT_EQ(0, kv_alloc(self->fd, self->p, 3));
	ASSERT_EQ(0, kv_publish_seq(self->fd, self->p, 3, SEED, 0, NULL));
}

FIXTURE_TEARDOWN(res)
{
	close(self->fd);
}

/* RESIDENCY @op of device @dev on blocks[i] -> gpu[i] (gpu may be NULL). */
static int res(int fd, __u32 dev, __u32 op, const __u32 *blocks,
	       const __u32 *gpu, __u32 n, __u32 *slot)
{
	struct kvpool_residency_entry e[16];
	__u8 uuid[16];
	__u32 i;

	memset(e, 0, sizeof(e));
	for (i = 0; i < n && i < 16; i++) {
		e[i].block = blocks[i];
		e[i].gpu_block = gpu ? gpu[i] : 1000 + i;
	}
	kv_uuid(uuid, dev);
	return kv_residency(fd, uuid, op, n ? e : NULL, n, slot);
}

static int add1(int fd, __u32 dev, __u32 block, __u32 gpu, __u32 *slot)
{
	return res(fd, dev, KVPOOL_RESIDENCY_ADD, &block, &gpu, 1, slot);
}

/* The space's section of debugfs residency (-1: none, read as empty). */
static int res_section(__u32 space, char *sec, size_t len)
{
	static char dump[1 << 16];
	int n = kv_debugfs_read("residency", dump, sizeof(dump));

	if (n < 0)
		return n;
	n = kv_debugfs_section(dump, space, sec, len);
	if (n < 0)
		sec[0] = '\0';
	return n;
}

/* Records "block=B slot=S ..." in @sec; *gpu, *owner of the last one. */
static int rec_count(const char *sec, __u32 block, __u32 slot, __u64 *gpu,
		     __u64 *owner)
{
	char pre[64];
	const char *p = sec, *o;
	int n = 0;

	snprintf(pre, sizeof(pre), "block=%u slot=%u gpu_block=", block, slot);
	while ((p = strstr(p, pre))) {
		if (p == sec || p[-1] == '\n') {
			n++;
			if (gpu)
				*gpu = strtoull(p + strlen(pre), NULL, 10);
			o = strstr(p, "owner=");
			if (owner && o && (!strchr(p, '\n') || o < strchr(p, '\n')))
				*owner = strtoull(o + 6, NULL, 10);
		}
		p += strlen(pre);
	}
	return n;
}

/* All record lines in @sec. */
static int rec_total(const char *sec)
{
	const char *p = sec;
	int n = 0;

	while (*p) {
		if (!strncmp(p, "block=", 6))
			n++;
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	return n;
}

/* Records of block @block on any slot. */
static int rec_block(const char *sec, __u32 block)
{
	char pre[32];
	const char *p = sec;
	int n = 0;

	snprintf(pre, sizeof(pre), "block=%u slot=", block);
	while ((p = strstr(p, pre))) {
		if (p == sec || p[-1] == '\n')
			n++;
		p += strlen(pre);
	}
	return n;
}

/* LOOKUP hashes first..first+n-1 with devices, releasing the references. */
static int masks(int fd, __u32 first, __u32 n, __u64 *dev)
{
	__u32 ids[16], hits = 0;
	int ret, i;

	for (i = 0; i < (int)n; i++)
		dev[i] = 0xeeeeeeeeeeeeeeeeULL;
	ret = kv_lookup_seq(fd, SEED, first, n, ids, dev, &hits);
	if (ret)
		return ret;
	if (hits && kv_release(fd, ids, hits))
		return -1000;
	return (int)hits;
}

static __u64 bit(__u32 slot)
{
	return 1ULL << slot;
}

/* ---- ADD, slots, LOOKUP masks ------------------------------------------------------ */

TEST_F(res, add_gives_slot_and_lookup_reports_devices)
{
	static char sec[1 << 16];
	char want[96], hex[33];
	__u32 sa = 99, sa2 = 99, sb = 99;
	__u64 dev[4], gpu, own0, own1;
	__u8 uuid[16];

	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, self->p,
			 (__u32[]){ 10, 11 }, 2, &sa));
	ASSERT_GT(KVPOOL_MAX_DEVICES, sa);
	/* count 0: only the slot. */
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &sa2));
	EXPECT_EQ(sa, sa2);
	ASSERT_EQ(0, res(self->fd, DEV_B, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &sb));
	ASSERT_GT(KVPOOL_MAX_DEVICES, sb);
	EXPECT_NE(sa, sb);

	ASSERT_EQ(3, masks(self->fd, 0, 3, dev));
	EXPECT_EQ(bit(sa), dev[0]);
	EXPECT_EQ(bit(sa), dev[1]);
	EXPECT_EQ(0, dev[2]);

	/* debugfs: both devices in the table, exactly the two records. */
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	kv_uuid(uuid, DEV_A);
	kv_hex(hex, uuid, 16);
	snprintf(want, sizeof(want), "slot=%u uuid=%s\n", sa, hex);
	EXPECT_NE(NULL, strcasestr(sec, want)) TH_LOG("want %s in\n%s", want, sec);
	kv_uuid(uuid, DEV_B);
	kv_hex(hex, uuid, 16);
	snprintf(want, sizeof(want), "slot=%u uuid=%s\n", sb, hex);
	EXPECT_NE(NULL, strcasestr(sec, want)) TH_LOG("want %s in\n%s", want, sec);
	EXPECT_EQ(2, rec_total(sec)) TH_LOG("%s", sec);
	EXPECT_EQ(1, rec_count(sec, self->p[0], sa, &gpu, &own0));
	EXPECT_EQ(10, gpu);
	EXPECT_EQ(1, rec_count(sec, self->p[1], sa, &gpu, &own1));
	EXPECT_EQ(11, gpu);
	EXPECT_EQ(own0, own1);
}

TEST_F(res, readd_updates_gpu_block)
{
	static char sec[1 << 16];
	__u32 s1, s2;
	__u64 gpu = 0;

	ASSERT_EQ(0, add1(self->fd, DEV_A, self->p[0], 10, &s1));
	ASSERT_EQ(0, add1(self->fd, DEV_A, self->p[0], 20, &s2));
	EXPECT_EQ(s1, s2);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(1, rec_count(sec, self->p[0], s1, &gpu, NULL)) TH_LOG("%s", sec);
	EXPECT_EQ(20, gpu);
	EXPECT_EQ(1, rec_total(sec));
	/* Another device on the same block is another record. */
	ASSERT_EQ(0, add1(self->fd, DEV_B, self->p[0], 30, &s2));
	EXPECT_NE(s1, s2);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(1, rec_count(sec, self->p[0], s1, &gpu, NULL)) TH_LOG("%s", sec);
	EXPECT_EQ(20, gpu);
	EXPECT_EQ(1, rec_count(sec, self->p[0], s2, &gpu, NULL)) TH_LOG("%s", sec);
	EXPECT_EQ(30, gpu);
	EXPECT_EQ(2, rec_total(sec));
}

/* Child: join, LOOKUP with devices, ADD DEV_B on hashes 1 and 2, report. */
struct child_report {
	int step;
	int err;
	__u32 hits;
	__u32 sb;
	__u64 dev[4];
};

static void two_proc_child(const char *name, int rd, int wr)
{
	struct child_report r;
	__u32 ids[4];
	char c;
	int fd, ret;

	memset(&r, 0, sizeof(r));
	fd = kv_open_join(name, NULL);
	if (fd < 0) {
		r.step = 1;
		r.err = -fd;
		goto out;
	}
	ret = kv_lookup_seq(fd, SEED, 0, 4, ids, r.dev, &r.hits);
	if (ret) {
		r.step = 2;
		r.err = -ret;
		goto out;
	}
	/* It holds references on hashes 0..2 now: that is enough to ADD. */
	ret = res(fd, DEV_B, KVPOOL_RESIDENCY_ADD, &ids[1], (__u32[]){ 21, 22 },
		  2, &r.sb);
	if (ret) {
		r.step = 3;
		r.err = -ret;
	}
out:
	if (write(wr, &r, sizeof(r)) != sizeof(r))
		_exit(20);
	if (read(rd, &c, 1) < 0)
		_exit(21);
	_exit(r.step);
}

TEST_F(res, lookup_masks_across_processes_and_close_removes_records)
{
	static char sec[1 << 16];
	struct child_report r;
	int to[2], from[2];
	__u64 dev[3], ownA = 0, ownB = 1;
	__u32 sa;
	pid_t pid;

	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, self->p,
			 (__u32[]){ 10, 11 }, 2, &sa));
	ASSERT_EQ(0, pipe(to));
	ASSERT_EQ(0, pipe(from));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(self->fd);
		close(to[1]);
		close(from[0]);
		two_proc_child(self->name, to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	ASSERT_EQ(sizeof(r), read(from[0], &r, sizeof(r)));
	ASSERT_EQ(0, r.step) TH_LOG("child step %d: %s", r.step, strerror(r.err));
	/* What the child saw. */
	EXPECT_EQ(3, r.hits);
	EXPECT_EQ(bit(sa), r.dev[0]);
	EXPECT_EQ(bit(sa), r.dev[1]);
	EXPECT_EQ(0, r.dev[2]);
	EXPECT_GT(KVPOOL_MAX_DEVICES, r.sb);
	EXPECT_NE(sa, r.sb);
	/* What this process sees: both fds' records. */
	ASSERT_EQ(3, masks(self->fd, 0, 3, dev));
	EXPECT_EQ(bit(sa), dev[0]);
	EXPECT_EQ(bit(sa) | bit(r.sb), dev[1]);
	EXPECT_EQ(bit(r.sb), dev[2]);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(4, rec_total(sec)) TH_LOG("%s", sec);
	EXPECT_EQ(1, rec_count(sec, self->p[1], sa, NULL, &ownA));
	EXPECT_EQ(1, rec_count(sec, self->p[1], r.sb, NULL, &ownB));
	EXPECT_NE(ownA, ownB);

	/* The child's fd closes: its records go, ours stay. */
	ASSERT_EQ(1, write(to[1], "x", 1));
	EXPECT_EQ(0, kv_wait(pid));
	ASSERT_EQ(3, masks(self->fd, 0, 3, dev));
	EXPECT_EQ(bit(sa), dev[0]);
	EXPECT_EQ(bit(sa), dev[1]);
	EXPECT_EQ(0, dev[2]);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(2, rec_total(sec)) TH_LOG("%s", sec);
	EXPECT_EQ(0, rec_count(sec, self->p[1], r.sb, NULL, NULL));
	close(to[1]);
	close(from[0]);
}

/* ---- records and block states ------------------------------------------------------- */

TEST_F(res, owned_block_records_vanish_on_free)
{
	static char sec[1 << 16];
	__u32 o[2], sa;
	__u64 dev[1];

	ASSERT_EQ(0, kv_alloc(self->fd, o, 2));
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, o,
			 (__u32[]){ 1, 2 }, 2, &sa));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(2, rec_total(sec));
	ASSERT_EQ(0, kv_free(self->fd, &o[0], 1));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(0, rec_block(sec, o[0])) TH_LOG("%s", sec);
	EXPECT_EQ(1, rec_block(sec, o[1])) TH_LOG("%s", sec);
	ASSERT_KV_CHECK_OK();
	/* Publishing keeps the block (and its record). */
	ASSERT_EQ(0, kv_publish_seq(self->fd, &o[1], 1, SEED, 5, NULL));
	ASSERT_EQ(1, masks(self->fd, 5, 1, dev));
	EXPECT_EQ(bit(sa), dev[0]);
}

TEST_F(res, dedup_frees_block_and_its_records)
{
	static char sec[1 << 16];
	struct kvpool_publish_entry e;
	__u8 h[KVPOOL_HASH_BYTES];
	__u32 x, sb;
	__u64 dev[1];
	int fd2;

	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(fd2, &x, 1));
	ASSERT_EQ(0, add1(fd2, DEV_B, x, 7, &sb));
	kv_hash(h, SEED, 0);
	kv_pub_entry(&e, h, x, 0);
	ASSERT_EQ(0, kv_publish(fd2, &e, 1, 0, NULL));
	ASSERT_EQ(KVPOOL_PUBLISHED_DEDUP, e.flags);
	ASSERT_EQ(self->p[0], e.id);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(0, rec_block(sec, x)) TH_LOG("%s", sec);
	EXPECT_EQ(0, rec_total(sec));
	ASSERT_EQ(1, masks(fd2, 0, 1, dev));
	EXPECT_EQ(0, dev[0]);
	ASSERT_KV_CHECK_OK();
	close(fd2);
}

TEST_F(res, records_stay_while_cached_and_vanish_on_eviction)
{
	static char sec[1 << 16];
	__u32 sa, more[5], got;
	__u64 dev[1];
	int fd2;

	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, self->p,
			 (__u32[]){ 1, 2 }, 2, &sa));
	ASSERT_EQ(0, kv_release(self->fd, &self->p[0], 1));
	ASSERT_EQ(0, kv_release(self->fd, &self->p[1], 1));
	/* Cached: the records stay, another fd sees them. */
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(1, masks(fd2, 0, 1, dev));	/* hash 0 is now the newest */
	EXPECT_EQ(bit(sa), dev[0]);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(2, rec_total(sec));
	/* 5 free blocks, then hash 1's block is evicted. */
	ASSERT_EQ(0, kv_alloc(fd2, more, 5));
	ASSERT_EQ(0, kv_alloc(fd2, &got, 1));
	ASSERT_EQ(self->p[1], got);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(0, rec_block(sec, self->p[1])) TH_LOG("%s", sec);
	EXPECT_EQ(1, rec_block(sec, self->p[0])) TH_LOG("%s", sec);
	ASSERT_KV_CHECK_OK();
	/* Dropped by an administrator: gone as well. */
	ASSERT_EQ(0, sysfs_write("drop_cached", self->name));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(0, rec_total(sec)) TH_LOG("%s", sec);
	ASSERT_KV_CHECK_OK();
	close(fd2);
}

/* ---- DEL and CLEAR ----------------------------------------------------------------- */

TEST_F(res, del_removes_only_listed_records_all_or_nothing)
{
	static char sec[1 << 16];
	__u32 sa, s, got, hits;
	__u64 dev[3];
	int fd2;

	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, self->p,
			 NULL, 3, &sa));
	s = 99;
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_DEL, &self->p[1],
			 NULL, 1, &s));
	EXPECT_EQ(sa, s);
	ASSERT_EQ(3, masks(self->fd, 0, 3, dev));
	EXPECT_EQ(bit(sa), dev[0]);
	EXPECT_EQ(0, dev[1]);
	EXPECT_EQ(bit(sa), dev[2]);
	/* Again: no such record. */
	EXPECT_EQ(-ENOENT, res(self->fd, DEV_A, KVPOOL_RESIDENCY_DEL,
			       &self->p[1], NULL, 1, NULL));
	/* One present, one absent: nothing removed. */
	EXPECT_EQ(-ENOENT, res(self->fd, DEV_A, KVPOOL_RESIDENCY_DEL,
			       (__u32[]){ self->p[0], self->p[1] }, NULL, 2, NULL));
	/* A device never seen. */
	EXPECT_EQ(-ENOENT, res(self->fd, DEV_C, KVPOOL_RESIDENCY_DEL,
			       &self->p[0], NULL, 1, NULL));
	/* Another fd has no record of its own to delete. */
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 0, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);
	EXPECT_EQ(-ENOENT, res(fd2, DEV_A, KVPOOL_RESIDENCY_DEL, &self->p[0],
			       NULL, 1, NULL));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(2, rec_total(sec)) TH_LOG("%s", sec);
	EXPECT_EQ(1, rec_count(sec, self->p[0], sa, NULL, NULL));
	EXPECT_EQ(1, rec_count(sec, self->p[2], sa, NULL, NULL));
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_DEL,
			 (__u32[]){ self->p[2], self->p[0] }, NULL, 2, NULL));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(0, rec_total(sec)) TH_LOG("%s", sec);
	close(fd2);
}

TEST_F(res, clear_removes_this_fds_records_of_the_device)
{
	static char sec[1 << 16];
	__u32 sa, sb, s, got, hits;
	int fd2;

	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_lookup_seq(fd2, SEED, 2, 1, &got, NULL, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, self->p, NULL, 2,
			 &sa));
	ASSERT_EQ(0, add1(self->fd, DEV_B, self->p[0], 50, &sb));
	ASSERT_EQ(0, add1(fd2, DEV_A, self->p[2], 60, &s));
	EXPECT_EQ(sa, s);
	/* CLEAR takes no entries. */
	EXPECT_EQ(-EINVAL, res(self->fd, DEV_A, KVPOOL_RESIDENCY_CLEAR,
			       self->p, NULL, 1, NULL));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(4, rec_total(sec)) TH_LOG("%s", sec);
	s = 99;
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_CLEAR, NULL, NULL, 0, &s));
	EXPECT_EQ(sa, s);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(2, rec_total(sec)) TH_LOG("%s", sec);
	EXPECT_EQ(1, rec_count(sec, self->p[0], sb, NULL, NULL));
	EXPECT_EQ(1, rec_count(sec, self->p[2], sa, NULL, NULL));
	/* Nothing left of fd's on DEV_A: a second CLEAR is fine too. */
	EXPECT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_CLEAR, NULL, NULL, 0, NULL));
	close(fd2);
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(1, rec_total(sec)) TH_LOG("%s", sec);
}

/* ---- errnos -------------------------------------------------------------------------- */

TEST_F(res, add_errnos_change_nothing)
{
	static char sec[1 << 16];
	struct kvpool_residency r;
	struct kvpool_residency_entry e[2];
	__u32 sa, o, other, cached, theirs, fid, used[8], i;
	__u64 gpu = 0;
	int fd2;

	ASSERT_EQ(0, add1(self->fd, DEV_A, self->p[0], 10, &sa));
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, kv_alloc(self->fd, &o, 1));		/* fd's own */
	ASSERT_EQ(0, kv_alloc(fd2, &other, 1));		/* fd2's own */
	ASSERT_EQ(0, kv_alloc(fd2, &theirs, 1));
	ASSERT_EQ(0, kv_publish_seq(fd2, &theirs, 1, SEED, 7, NULL));
	cached = self->p[2];
	ASSERT_EQ(0, kv_release(self->fd, &cached, 1));
	used[0] = self->p[0];
	used[1] = self->p[1];
	used[2] = self->p[2];
	used[3] = o;
	used[4] = other;
	used[5] = theirs;
	for (fid = 0; fid < 8; fid++) {
		for (i = 0; i < 6; i++)
			if (used[i] == fid)
				break;
		if (i == 6)
			break;
	}
	ASSERT_GT(8, fid);

#define ADD_FAILS(err, bad, what) do { \
	EXPECT_EQ(-(err), res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, \
			      (__u32[]){ self->p[1], bad }, NULL, 2, NULL)) \
		TH_LOG("%s", what); \
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec))); \
	EXPECT_EQ(1, rec_total(sec)) TH_LOG("%s:\n%s", what, sec); \
} while (0)
	ADD_FAILS(EPERM, fid, "a FREE block");
	ADD_FAILS(EPERM, other, "another fd's owned block");
	ADD_FAILS(EPERM, theirs, "a block only another fd references");
	ADD_FAILS(EPERM, cached, "a CACHED block");
	ADD_FAILS(EINVAL, 8, "block == backed blocks");
	ADD_FAILS(EINVAL, 0xffffffffu, "block ~0");
#undef ADD_FAILS
	/* Owned or referenced is enough. */
	EXPECT_EQ(0, add1(self->fd, DEV_A, o, 3, NULL));
	EXPECT_EQ(0, add1(fd2, DEV_A, theirs, 4, NULL));

	/* Bad ops, flags, reserved: EINVAL. */
	memset(&r, 0, sizeof(r));
	memset(e, 0, sizeof(e));
	kv_uuid(r.device_uuid, DEV_A);
	r.entry_bytes = sizeof(e[0]);
	e[0].block = self->p[1];
	e[0].gpu_block = 9;
	r.entries = (uintptr_t)e;
	r.count = 1;
	r.op = 3;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.op = 0xffffffffu;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.op = KVPOOL_RESIDENCY_ADD;
	r.flags = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.flags = 0;
	r.pad = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.pad = 0;
	r.reserved = 1ULL << 63;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.reserved = 0;
	e[0].reserved = 1;
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	e[0].reserved = 0;
	r.entry_bytes = 8;	/* an API 3 caller's entries */
	EXPECT_EQ(-EINVAL, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.entry_bytes = sizeof(e[0]);
	r.count = KVPOOL_MAX_BATCH + 1;
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	r.count = 0xffffffffu;
	EXPECT_EQ(-E2BIG, kv_ioctl(self->fd, KVPOOL_IOC_RESIDENCY, &r));
	ASSERT_LE(0, res_section(self->so.space_id, sec, sizeof(sec)));
	EXPECT_EQ(3, rec_total(sec)) TH_LOG("%s", sec);
	EXPECT_EQ(0, rec_block(sec, self->p[1]));
	EXPECT_EQ(1, rec_count(sec, self->p[0], sa, &gpu, NULL));
	EXPECT_EQ(10, gpu);
	close(fd2);
}

TEST_F(res, device_table_holds_64_uuids_then_enospc)
{
	char other[KVPOOL_NAME_MAX];
	__u64 seen = 0;
	__u32 s, i;
	int fd;

	for (i = 0; i < KVPOOL_MAX_DEVICES; i++) {
		s = 99;
		ASSERT_EQ(0, res(self->fd, 100 + i, KVPOOL_RESIDENCY_ADD, NULL,
				 NULL, 0, &s)) TH_LOG("device %u", i);
		ASSERT_GT(KVPOOL_MAX_DEVICES, s);
		EXPECT_FALSE(seen & bit(s)) TH_LOG("slot %u twice", s);
		seen |= bit(s);
	}
	EXPECT_EQ(~0ULL, seen);
	EXPECT_EQ(-ENOSPC, res(self->fd, 100 + KVPOOL_MAX_DEVICES,
			       KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, NULL));
	EXPECT_EQ(-ENOSPC, res(self->fd, 100 + KVPOOL_MAX_DEVICES + 1,
			       KVPOOL_RESIDENCY_ADD, self->p, NULL, 1, NULL));
	/* A known device still works. */
	s = 99;
	EXPECT_EQ(0, res(self->fd, 100 + 17, KVPOOL_RESIDENCY_ADD, self->p,
			 NULL, 1, &s));
	EXPECT_GT(KVPOOL_MAX_DEVICES, s);
	/* The table is the space's: another space has room. */
	kv_name(other, sizeof(other), "resid-b");
	fd = kv_open_create(other, BB, Q8, NULL);
	ASSERT_LE(0, fd);
	EXPECT_EQ(0, res(fd, 100 + KVPOOL_MAX_DEVICES, KVPOOL_RESIDENCY_ADD,
			 NULL, NULL, 0, &s));
	close(fd);
}

/* The slots of the space's device table that hold a device (debugfs). */
static int table_slots(__u32 space, __u64 *used)
{
	static char sec[1 << 16];
	const char *p;
	int n = 0;

	*used = 0;
	if (res_section(space, sec, sizeof(sec)) < 0)
		return -1;
	for (p = sec; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
		if (strncmp(p, "slot=", 5))
			continue;	/* a record: "block=B slot=S ..." */
		*used |= bit((__u32)strtoul(p + 5, NULL, 10));
		n++;
	}
	return n;
}

/*
 * Issue 14, finding 13: slots were never given back, so 64 UUIDs filled a
 * space's table for good, and any fd that could join could fill it.  Now
 * a slot is held while some fd has its device registered (a successful
 * ADD registers it); CLEAR and close unregister, and a slot no fd holds
 * takes the next new device.
 */
TEST_F(res, device_slots_freed_by_clear_and_close)
{
	__u32 s, s5 = 99, sa = 99, sa2 = 99, i;
	__u64 used, dev[1];
	int fd2;

	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	/* fd2 fills the table. */
	for (i = 0; i < KVPOOL_MAX_DEVICES; i++) {
		ASSERT_EQ(0, res(fd2, 100 + i, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &s))
			TH_LOG("device %u", i);
		if (i == 5)
			s5 = s;
	}
	EXPECT_EQ(-ENOSPC, res(self->fd, 200, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, NULL));
	EXPECT_EQ(KVPOOL_MAX_DEVICES, table_slots(self->so.space_id, &used));
	/* CLEAR gives device 105's slot back: the next new device takes it. */
	ASSERT_EQ(0, res(fd2, 105, KVPOOL_RESIDENCY_CLEAR, NULL, NULL, 0, &s));
	EXPECT_EQ(s5, s);
	EXPECT_EQ(KVPOOL_MAX_DEVICES - 1, table_slots(self->so.space_id, &used));
	EXPECT_FALSE(used & bit(s5));
	EXPECT_EQ(-ENOENT, res(fd2, 105, KVPOOL_RESIDENCY_CLEAR, NULL, NULL, 0, NULL));
	s = 99;
	ASSERT_EQ(0, res(self->fd, 200, KVPOOL_RESIDENCY_ADD, self->p, NULL, 1, &s));
	EXPECT_EQ(s5, s);
	EXPECT_EQ(-ENOSPC, res(self->fd, 201, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, NULL));
	/* LOOKUP's bit for that slot is device 200's record now. */
	ASSERT_EQ(1, masks(self->fd, 0, 1, dev));
	EXPECT_EQ(bit(s5), dev[0]);
	/* fd2 closes: its 63 slots go, device 200's (fd's) stays. */
	close(fd2);
	EXPECT_EQ(1, table_slots(self->so.space_id, &used));
	EXPECT_EQ(bit(s5), used);
	for (i = 0; i < KVPOOL_MAX_DEVICES - 1; i++)
		ASSERT_EQ(0, res(self->fd, 300 + i, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, NULL))
			TH_LOG("device %u after the close", i);
	EXPECT_EQ(-ENOSPC, res(self->fd, 400, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, NULL));
	ASSERT_KV_CHECK_OK();

	/* A device two fds registered keeps its slot until both let go. */
	for (i = 0; i < KVPOOL_MAX_DEVICES - 1; i++)
		ASSERT_EQ(0, res(self->fd, 300 + i, KVPOOL_RESIDENCY_CLEAR, NULL, NULL, 0, NULL));
	fd2 = kv_open_join(self->name, NULL);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &sa));
	ASSERT_EQ(0, res(fd2, DEV_A, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &sa2));
	EXPECT_EQ(sa, sa2);
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_CLEAR, NULL, NULL, 0, NULL));
	s = 99;
	ASSERT_EQ(0, res(fd2, DEV_A, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &s));
	EXPECT_EQ(sa, s);
	ASSERT_EQ(0, res(self->fd, DEV_B, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &s));
	EXPECT_NE(sa, s);
	close(fd2);
	table_slots(self->so.space_id, &used);
	EXPECT_FALSE(used & bit(sa));
	EXPECT_TRUE(used & bit(s));
	ASSERT_KV_CHECK_OK();
}

/* Records keep their fd's slot: a block freed, evicted or deduplicated leaves it held. */
TEST_F(res, slot_outlives_its_records_while_registered)
{
	__u32 o, sa, s;
	__u64 used;

	ASSERT_EQ(0, kv_alloc(self->fd, &o, 1));
	ASSERT_EQ(0, add1(self->fd, DEV_A, o, 9, &sa));
	ASSERT_EQ(0, kv_free(self->fd, &o, 1));
	table_slots(self->so.space_id, &used);
	EXPECT_TRUE(used & bit(sa));
	ASSERT_EQ(0, res(self->fd, DEV_A, KVPOOL_RESIDENCY_ADD, NULL, NULL, 0, &s));
	EXPECT_EQ(sa, s);
	/* A failed ADD of a new device takes no slot. */
	EXPECT_EQ(-EPERM, res(self->fd, DEV_B, KVPOOL_RESIDENCY_ADD, &o, NULL, 1, NULL));
	EXPECT_EQ(1, table_slots(self->so.space_id, &used));
	ASSERT_KV_CHECK_OK();
}

TEST_HARNESS_MAIN
