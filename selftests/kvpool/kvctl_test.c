// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl_test: the admin CLI (tools/kvctl, /bin/kvctl in the VM) against the
 * real module.  Each read command's text and --json agree with sysfs (JSON
 * validated with tools/kvctl/json_check.h: the guest has no python); set
 * changes exactly the tunable it names and a bad key or value changes
 * nothing; a non-root caller gets "permission denied" with status 4; a
 * --sysfs-root without the module gets status 3.  The fixture's space holds
 * 4 owned, 2 published and 2 cached blocks after 4 hits and 2 misses.
 * Every tunable is restored in the teardown.
 */
#include "kvpool_util.h"
#include "../../tools/kvctl/json_check.h"

#define KVCTL		"/bin/kvctl"
#define BLOCK		(64 * KiB)
#define QUOTA		(8 * MiB)
#define SEED		0x6b76u
#define UNPRIV_UID	1000
#define TEST_UID	4242

struct kvctl_res {
	int rc;
	char *out;
	char *err;
};

static char *slurp_fd(int fd)
{
	size_t cap = 8192, len = 0;
	char *buf = malloc(cap), *nb;
	ssize_t n;

	if (!buf || lseek(fd, 0, SEEK_SET) < 0) {
		free(buf);
		return strdup("");
	}
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (cap - len < 2) {
			nb = realloc(buf, cap * 2);
			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
	}
	buf[len] = '\0';
	return buf;
}

static void kvctl_free(struct kvctl_res *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

/*
 * Run kvctl with @argv (argv[0] is KVCTL) as @uid (0: as we are), stdout
 * and stderr to unlinked temp files; returns its exit status (kv_wait()).
 */
static int kvctl_exec(struct kvctl_res *r, uid_t uid, const char *const *argv)
{
	char po[] = "/tmp/kvctl_test.out.XXXXXX", pe[] = "/tmp/kvctl_test.err.XXXXXX";
	int fo = mkstemp(po), fe = mkstemp(pe);
	pid_t pid;

	memset(r, 0, sizeof(*r));
	if (fo < 0 || fe < 0) {
		r->rc = -1;
		r->out = strdup("");
		r->err = strdup("mkstemp failed");
		return r->rc;
	}
	unlink(po);
	unlink(pe);
	pid = fork();
	if (pid == 0) {
		/* The files were opened before the drop, so the child may write them. */
		dup2(fo, STDOUT_FILENO);
		dup2(fe, STDERR_FILENO);
		if (uid) {
			struct kv_cred c = { .uid = uid, .gid = uid, .ngroups = 0 };

			if (kv_drop_to(&c))
				_exit(99);
		}
		execv(KVCTL, (char *const *)argv);
		_exit(98);
	}
	r->rc = pid < 0 ? -1 : kv_wait(pid);
	r->out = slurp_fd(fo);
	r->err = slurp_fd(fe);
	close(fo);
	close(fe);
	return r->rc;
}

#define KVCTL_ARGV(...) ((const char *const[]){ KVCTL, __VA_ARGS__, NULL })
/* Run kvctl as root / as @uid; the result is in self->r. */
#define RUN(...) kvctl_run(_metadata, &self->r, 0, KVCTL_ARGV(__VA_ARGS__))
#define RUN_AS(uid, ...) kvctl_run(_metadata, &self->r, uid, KVCTL_ARGV(__VA_ARGS__))

static void kvctl_run(struct __test_metadata *_metadata, struct kvctl_res *r, uid_t uid,
		      const char *const *argv)
{
	char cmd[512];
	size_t o = 0;
	int i;

	kvctl_free(r);
	kvctl_exec(r, uid, argv);
	for (i = 1; argv[i] && o < sizeof(cmd) - 1; i++)
		o += (size_t)snprintf(cmd + o, sizeof(cmd) - o, " %s", argv[i]);
	if (r->rc < 0 || r->rc >= 98)
		TH_LOG("kvctl%s: could not run (status %d): %s", cmd, r->rc, r->err);
}

/* Log what kvctl said when an expectation fails. */
#define SAID TH_LOG("kvctl exited %d\nstdout: %.2000s\nstderr: %.1000s", self->r.rc, \
		    self->r.out, self->r.err)

#define EXPECT_RC(want) EXPECT_EQ(want, self->r.rc) SAID
#define EXPECT_OUT(s) EXPECT_NE(NULL, strstr(self->r.out, s)) SAID
#define EXPECT_ERR(s) EXPECT_NE(NULL, strstr(self->r.err, s)) SAID
#define EXPECT_JSON() EXPECT_EQ(1, kvj_valid(self->r.out)) SAID
/* The first "key" of the JSON output is the unsigned @want. */
#define EXPECT_KEY(key, want) do { \
	unsigned long long __v = ~0ULL; \
	EXPECT_EQ(0, kvj_u64(self->r.out, key, &__v)) SAID; \
	EXPECT_EQ((unsigned long long)(want), __v) TH_LOG("\"%s\"", key); \
} while (0)

static int count_str(const char *s, const char *needle)
{
	int n = 0;

	while ((s = strstr(s, needle))) {
		n++;
		s += strlen(needle);
	}
	return n;
}

FIXTURE(kvctl) {
	char name[KVPOOL_NAME_MAX];
	char sid[16];
	int fd;
	__u32 space_id;
	__u32 ids[8];
	struct kvctl_res r;
};

FIXTURE_SETUP(kvctl)
{
	struct kvpool_space_open so;
	__u32 look[6], hits = 0;

	self->fd = -1;
	if (access(KVCTL, X_OK))
		SKIP(return, "%s missing: build it with 'make tools' (tools/kvctl)", KVCTL);
	kv_name(self->name, sizeof(self->name), "kvctl");
	self->fd = kv_open_create(self->name, BLOCK, QUOTA, &so);
	ASSERT_LE(0, self->fd) TH_LOG("create: %s", strerror(-self->fd));
	self->space_id = so.space_id;
	snprintf(self->sid, sizeof(self->sid), "%u", so.space_id);
	/* 8 owned; publish 4; look up 6 (4 hits, 2 misses); 2 back to cached. */
	ASSERT_EQ(0, kv_alloc(self->fd, self->ids, 8));
	ASSERT_EQ(0, kv_publish_seq(self->fd, self->ids, 4, SEED, 0, NULL));
	ASSERT_EQ(0, kv_lookup_seq(self->fd, SEED, 0, 6, look, NULL, &hits));
	ASSERT_EQ(4, hits);
	ASSERT_EQ(0, kv_release(self->fd, look, 4));
	ASSERT_EQ(0, kv_release(self->fd, &self->ids[2], 2));
	ASSERT_EQ(2, kv_space_sysfs_get(self->space_id, "cached_blocks"));
	ASSERT_EQ(2, kv_space_sysfs_get(self->space_id, "published_blocks"));
}

FIXTURE_TEARDOWN(kvctl)
{
	char buf[32];

	kvctl_free(&self->r);
	if (self->fd >= 0)
		close(self->fd);
	/* Defaults, whatever a failed test left behind. */
	sysfs_write("event_queue_max", "65536");
	sysfs_write("min_cached_bytes", "0");
	sysfs_write("shrinker_enabled", "1");
	sysfs_write("uid_limit_default_bytes", "0");
	snprintf(buf, sizeof(buf), "%u 0", TEST_UID);
	sysfs_write("uid_limit", buf);
	if (sysfs_get("pool_bytes") != KV_POOL_DEFAULT)
		sysfs_write("pool_bytes", "128M");
}

TEST_F(kvctl, status_text_and_json)
{
	RETURN_IF_SKIPPED();
	RUN("status");
	EXPECT_RC(0);
	{
		char want[64];

		snprintf(want, sizeof(want), "kvpool     loaded: API %d, features spaces,numa,prefix",
			 KVPOOL_API_VERSION);
		EXPECT_OUT(want);
	}
	EXPECT_OUT("\nnode0 ");
	EXPECT_OUT("\nnode1 ");
	EXPECT_OUT("\ntunables   shrinker_enabled=1");

	RUN("status", "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	EXPECT_KEY("api_version", KVPOOL_API_VERSION);
	EXPECT_KEY("pool_bytes", sysfs_get("pool_bytes"));
	EXPECT_KEY("chunk_bytes", KV_CHUNK);
	EXPECT_KEY("event_queue_max", 65536);
	EXPECT_OUT("\"ok\": true");
}

TEST_F(kvctl, spaces_and_space)
{
	char want[160];

	RETURN_IF_SKIPPED();
	RUN("spaces");
	EXPECT_RC(0);
	EXPECT_OUT(self->name);

	RUN("spaces", "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	snprintf(want, sizeof(want), "\"name\": \"%s\"", self->name);
	EXPECT_OUT(want);

	RUN("space", self->name, "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	EXPECT_KEY("id", self->space_id);
	EXPECT_KEY("block_bytes", BLOCK);
	EXPECT_KEY("quota_bytes", QUOTA);
	EXPECT_KEY("owned_blocks", 4);
	EXPECT_KEY("published_blocks", 2);
	EXPECT_KEY("cached_blocks", kv_space_sysfs_get(self->space_id, "cached_blocks"));
	EXPECT_KEY("backed_blocks", 32);	/* one 2 MiB chunk of 64 KiB blocks */
	EXPECT_KEY("hits", 4);
	EXPECT_KEY("misses", 2);
	EXPECT_KEY("readers", 2);		/* debugfs, as root */

	RUN("space", self->name);
	EXPECT_RC(0);
	EXPECT_OUT("32 blocks: 24 free, 4 owned, 2 published, 2 cached, 0 holes; 96 not backed yet");
	EXPECT_OUT("hit rate 66.6% (4 hits, 2 misses)");
	EXPECT_OUT("  numa        preferred");

	RUN("space", "--id", self->sid, "--json");
	EXPECT_RC(0);
	EXPECT_KEY("cached_blocks", 2);

	RUN("space", "kvctl-no-such-space");
	EXPECT_RC(5);
	EXPECT_ERR("no space named 'kvctl-no-such-space'");
}

TEST_F(kvctl, blocks)
{
	char want[160];

	RETURN_IF_SKIPPED();
	RUN("blocks");
	EXPECT_RC(0);
	snprintf(want, sizeof(want), " %s ", self->name);
	EXPECT_OUT(want);

	RUN("blocks", "--json");
	EXPECT_RC(0);
	EXPECT_JSON();

	/* The hash index holds the 4 published blocks, the LRU the 2 cached. */
	RUN("blocks", "--space", self->name, "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	EXPECT_EQ(4, count_str(self->r.out, "\"hash\":")) SAID;
	EXPECT_EQ(2, count_str(self->r.out, "\"state\": \"cached\"")) SAID;
	EXPECT_EQ(4 + 2, count_str(self->r.out, "\"block\":")) SAID;

	RUN("blocks", "--space", self->name);
	EXPECT_RC(0);
	EXPECT_OUT("eviction order");
}

TEST_F(kvctl, stats_prometheus_and_json)
{
	char want[256];

	RETURN_IF_SKIPPED();
	RUN("stats", "--prometheus");
	EXPECT_RC(0);
	EXPECT_OUT("# TYPE kvpool_pool_bytes gauge\n");
	snprintf(want, sizeof(want), "\nkvpool_pool_bytes %llu\n",
		 (unsigned long long)sysfs_get("pool_bytes"));
	EXPECT_OUT(want);
	snprintf(want, sizeof(want), "\nkvpool_space_cached_blocks{space=\"%s\",id=\"%u\"} 2\n",
		 self->name, self->space_id);
	EXPECT_OUT(want);
	snprintf(want, sizeof(want), "\nkvpool_space_hits_total{space=\"%s\",id=\"%u\"} 4\n",
		 self->name, self->space_id);
	EXPECT_OUT(want);
	EXPECT_OUT("\nkvpool_evictions_total{cause=\"quota\"} ");
	EXPECT_OUT("\nkvpool_node_reserved_bytes{node=\"1\"} ");

	RUN("stats", "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	EXPECT_KEY("allocs", sysfs_get("allocs"));

	RUN("stats");
	EXPECT_RC(0);
	snprintf(want, sizeof(want), "\nspace.%u.owned_blocks 4\n", self->space_id);
	EXPECT_OUT(want);
}

TEST_F(kvctl, check)
{
	RETURN_IF_SKIPPED();
	RUN("check");
	EXPECT_RC(0);
	EXPECT_EQ(0, strcmp(self->r.out, "ok\n")) SAID;

	RUN("check", "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	EXPECT_OUT("\"ok\": true");
}

/* kvctl set KEY=VALUE, then sysfs says @want; then restore with @restore. */
#define SET_AND_CHECK(pair, file, want) do { \
	RUN("set", pair); \
	EXPECT_RC(0); \
	EXPECT_EQ((__u64)(want), sysfs_get(file)) TH_LOG("%s after set %s", file, pair); \
} while (0)

/*
 * kvctl set set_fmt (of TEST_UID) succeeds; then the uid_limit file lists
 * an entry entry_fmt (of TEST_UID) or, unless listed, lists none.
 */
static void set_uid_limit(struct __test_metadata *_metadata, FIXTURE_DATA(kvctl) *self,
			  const char *set_fmt, const char *entry_fmt, bool listed)
{
	char buf[4096], arg[96], entry[96];
	ssize_t n;

	snprintf(arg, sizeof(arg), set_fmt, TEST_UID);
	snprintf(entry, sizeof(entry), entry_fmt, TEST_UID);
	RUN("set", arg);
	EXPECT_RC(0);
	n = read_file(KV_SYSFS "/uid_limit", buf, sizeof(buf));
	if (listed) {
		ASSERT_LT(0, n);
		EXPECT_NE(NULL, strstr(buf, entry)) TH_LOG("uid_limit: %s", buf);
	} else {
		ASSERT_LE(0, n);
		EXPECT_EQ(NULL, strstr(buf, entry)) TH_LOG("uid_limit: %s", buf);
	}
}

TEST_F(kvctl, set_valid_values)
{
	RETURN_IF_SKIPPED();
	SET_AND_CHECK("event_queue_max=1024", "event_queue_max", 1024);
	EXPECT_OUT("event_queue_max: 65536 -> 1024");
	SET_AND_CHECK("event_queue_max=65536", "event_queue_max", 65536);
	SET_AND_CHECK("min_cached_bytes=4M", "min_cached_bytes", 4 * MiB);
	SET_AND_CHECK("min_cached_bytes=0", "min_cached_bytes", 0);
	SET_AND_CHECK("shrinker_enabled=off", "shrinker_enabled", 0);
	SET_AND_CHECK("shrinker_enabled=on", "shrinker_enabled", 1);
	SET_AND_CHECK("uid_limit_default_bytes=1G", "uid_limit_default_bytes", GiB);
	SET_AND_CHECK("uid_limit_default_bytes=0", "uid_limit_default_bytes", 0);

	/* 192 MiB over 2 nodes: 96 MiB each, whole chunks. */
	SET_AND_CHECK("pool_bytes=192M", "pool_bytes", 192 * MiB);
	EXPECT_OUT("-> 201326592 (192.0 MiB)");
	EXPECT_EQ(96 * MiB, sysfs_get("node0/reserved_bytes"));
	SET_AND_CHECK("pool_bytes=128M", "pool_bytes", KV_POOL_DEFAULT);

	set_uid_limit(_metadata, self, "uid_limit=%u:8M", "uid=%u limit_bytes=8388608 ", true);
	set_uid_limit(_metadata, self, "uid_limit.%u=0", "uid=%u ", false);

	/* Several at once. */
	RUN("set", "event_queue_max=4096", "min_cached_bytes=1M");
	EXPECT_RC(0);
	EXPECT_EQ(4096, sysfs_get("event_queue_max"));
	EXPECT_EQ(MiB, sysfs_get("min_cached_bytes"));
	ASSERT_KV_CHECK_OK();
}

TEST_F(kvctl, set_invalid_changes_nothing)
{
	__u64 pool = sysfs_get("pool_bytes"), evq = sysfs_get("event_queue_max");

	RETURN_IF_SKIPPED();
	RUN("set", "pool_bytes=lots");
	EXPECT_RC(2);
	EXPECT_ERR("pool_bytes wants a size like 512M or 2G");
	RUN("set", "pool_bytes=2GB");
	EXPECT_RC(2);
	RUN("set", "pool_size=1G");
	EXPECT_RC(2);
	EXPECT_ERR("unknown key 'pool_size'");
	EXPECT_ERR("valid keys: pool_bytes");
	RUN("set", "event_queue_max=8");
	EXPECT_RC(2);
	EXPECT_ERR("event_queue_max wants a whole number from 16 to 1048576");
	RUN("set", "shrinker_enabled=maybe");
	EXPECT_RC(2);
	RUN("set", "uid_limit=4294967295:1G");
	EXPECT_RC(2);
	EXPECT_ERR("UID must be 0 to 4294967294");
	/* Validated before writing: the good pair before the bad one is not applied. */
	RUN("set", "event_queue_max=2048", "min_cached_bytes=huge");
	EXPECT_RC(2);
	/*
	 * More than the guest's 2 GiB: the module would pin every page on the
	 * way and the OOM killer could free none (a panic), so even --force
	 * is refused.
	 */
	RUN("set", "--force", "pool_bytes=100G");
	EXPECT_RC(2);
	EXPECT_ERR("more than this host's memory");
	/* 2^64 and more is refused, not wrapped as memparse() would. */
	RUN("set", "min_cached_bytes=17179869184G");
	EXPECT_RC(2);
	EXPECT_ERR("too large");

	EXPECT_EQ(pool, sysfs_get("pool_bytes"));
	EXPECT_EQ(evq, sysfs_get("event_queue_max"));
	EXPECT_EQ(0, sysfs_get("min_cached_bytes"));
	EXPECT_EQ(1, sysfs_get("shrinker_enabled"));
}

TEST_F(kvctl, not_root_permission_denied)
{
	__u64 evq = sysfs_get("event_queue_max");
	char want[160];

	RETURN_IF_SKIPPED();
	RUN_AS(UNPRIV_UID, "set", "event_queue_max=1024");
	EXPECT_RC(4);
	EXPECT_ERR("permission denied writing /sys/class/misc/kvpool/event_queue_max");
	EXPECT_ERR("writable by root only; run kvctl as root");
	EXPECT_EQ(evq, sysfs_get("event_queue_max"));

	RUN_AS(UNPRIV_UID, "check");
	EXPECT_RC(4);
	EXPECT_ERR("permission denied");

	RUN_AS(UNPRIV_UID, "destroy", self->name);
	EXPECT_RC(4);
	EXPECT_ERR("permission denied writing /sys/class/misc/kvpool/destroy_space");
	EXPECT_EQ(1, kv_space_sysfs_exists(self->space_id));

	RUN_AS(UNPRIV_UID, "drop-cached", self->name);
	EXPECT_RC(4);
	EXPECT_EQ(2, kv_space_sysfs_get(self->space_id, "cached_blocks"));

	/*
	 * The pool's sysfs needs no root; /dev/kvpool (0660 root) is refused,
	 * and per-space and per-uid figures are root's (issue 14 finding 14).
	 */
	RUN_AS(UNPRIV_UID, "status");
	EXPECT_RC(0);
	EXPECT_OUT("/dev/kvpool: Permission denied");
	EXPECT_OUT("per-uid usage is readable by root only");
	RUN_AS(UNPRIV_UID, "space", self->name, "--json");
	EXPECT_RC(4);
	EXPECT_ERR("readable by root only; run kvctl as root");
	snprintf(want, sizeof(want), "\"name\": \"%s\"", self->name);
	EXPECT_EQ(NULL, strstr(self->r.out, want));
}

TEST_F(kvctl, module_not_loaded)
{
	RETURN_IF_SKIPPED();
	if (mkdir("/tmp/kvctl_test.empty", 0755) && errno != EEXIST)
		ASSERT_EQ(0, -errno);
	RUN("--sysfs-root", "/tmp/kvctl_test.empty", "status");
	EXPECT_RC(3);
	EXPECT_ERR("kvpool module not loaded: /tmp/kvctl_test.empty/pool_bytes missing; "
		   "load it with 'modprobe kvpool' (or insmod kmod/kvpool.ko)");
	RUN("--sysfs-root", "/tmp/kvctl_test.empty/kvpool", "spaces");
	EXPECT_RC(3);
	EXPECT_ERR("kvpool module not loaded: /tmp/kvctl_test.empty/kvpool missing");
	RUN("--sysfs-root", "/tmp/kvctl_test.empty", "set", "event_queue_max=1024");
	EXPECT_RC(3);
	RUN("--sysfs-root", "/tmp/kvctl_test.empty", "stats", "--prometheus");
	EXPECT_RC(3);
	EXPECT_OUT("kvpool_up 0\n");
	EXPECT_EQ(65536, sysfs_get("event_queue_max"));
	rmdir("/tmp/kvctl_test.empty");
}

TEST_F(kvctl, drop_cached_and_destroy)
{
	struct kvpool_space_open so;
	char other[KVPOOL_NAME_MAX];
	int fd;

	RETURN_IF_SKIPPED();
	RUN("drop-cached", self->name);
	EXPECT_RC(0);
	EXPECT_OUT("2 evicted (cause admin)");
	EXPECT_EQ(0, kv_space_sysfs_get(self->space_id, "cached_blocks"));
	EXPECT_EQ(2, kv_space_sysfs_get(self->space_id, "published_blocks"));

	/* A persistent space with no descriptor: destroy tears it down at once. */
	kv_name(other, sizeof(other), "kvctl-persist");
	fd = kv_open();
	ASSERT_LE(0, fd);
	kv_so_init(&so, other, KVPOOL_SPACE_CREATE | KVPOOL_SPACE_EXCL | KVPOOL_SPACE_PERSIST,
		   BLOCK, QUOTA);
	ASSERT_EQ(0, kv_space_open(fd, &so));
	close(fd);
	ASSERT_EQ(1, kv_space_sysfs_exists(so.space_id));
	RUN("destroy", other);
	EXPECT_RC(0);
	EXPECT_OUT("destroyed space");
	EXPECT_EQ(0, kv_space_sysfs_exists(so.space_id));

	RUN("destroy", other);
	EXPECT_RC(5);
	EXPECT_ERR("no space named");
	RUN("destroy", "bad/name");
	EXPECT_RC(2);
	ASSERT_KV_CHECK_OK();
}

TEST_F(kvctl, top_refreshes_and_stops)
{
	char *line, *save = NULL;
	int n = 0;

	RETURN_IF_SKIPPED();
	RUN("top", "--count", "2", "--interval", "0.2");
	EXPECT_RC(0);
	EXPECT_OUT("sample 1/2");
	EXPECT_OUT("sample 2/2");
	EXPECT_OUT(self->name);

	RUN("top", "--json", "--count", "2", "--interval", "0.2");
	EXPECT_RC(0);
	for (line = strtok_r(self->r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		EXPECT_EQ(1, kvj_valid(line)) TH_LOG("line %d: %s", n + 1, line);
		n++;
	}
	EXPECT_EQ(2, n);
}

TEST_F(kvctl, size_in_the_guest)
{
	RETURN_IF_SKIPPED();
	/* 2 x 32 layers x 8 heads x 128 x 2 bytes x 8192 tokens = 1 GiB. */
	RUN("size", "--model", "llama-3-8b", "--tokens", "8192", "--json");
	EXPECT_RC(0);
	EXPECT_JSON();
	EXPECT_KEY("bytes", GiB);
	EXPECT_KEY("bytes_per_token", 131072);
}

TEST_HARNESS_MAIN
