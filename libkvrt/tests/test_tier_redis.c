// SPDX-License-Identifier: MIT
/*
 * test_tier_redis: the Redis Cluster tier against a real cluster that the
 * test starts itself (three redis-server masters on loopback ports, joined
 * with redis-cli --cluster create) and stops at the end: blocks stored by
 * one "host" (a struct kvrt with its own embedded pool) found, byte for
 * byte, by another; a tenant's ACL user refused another tenant's keys, and
 * every command but the tier's, by Redis itself (NOPERM); key names that
 * hold no hash; a corrupted and a truncated value each a miss; a hostile
 * node on loopback (a child process) whose forged values are misses, whose
 * redirections to unconfirmed nodes are not followed, whose 256 MiB reply
 * is refused before it is buffered, and whose empty endpoint is its own;
 * lookups while slots are being moved between nodes (ASK, MOVED) all
 * whole; write-back holding its queued blocks in the pool while a node
 * stalls, and its error reported by the next flush; a full node
 * (maxmemory, noeviction), a paused node (SIGSTOP) and a node killed
 * mid-batch each a clean error or a miss within the timeout, the pool
 * untouched.  Needs redis-server and redis-cli (Debian's redis-server and
 * redis-tools; make deps installs them).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <xxhash.h>

#include "kvrt.h"
#include "../../selftests/tap.h"
#include "tier_blocks.h"

#define NODES 3
#define BB 16384ULL
#define H KVRT_HASH_BYTES
#define NB 64
_Static_assert(NB <= TIER_RUN_MAX, "the run helpers take NB blocks");
#define TIMEOUT_MS 500

/*
 * The tier's ACL, as Documentation/libkvrt.rst gives it (and
 * selftests/redis/cluster.sh): AUTH needs no permission, and the tier
 * sends nothing but these commands.
 */
#define TIER_ACL "resetchannels -@all +cluster|slots +exists +get +set +asking"

static char dir[4096];
static int ports[NODES];
static pid_t pids[NODES];
static char seeds[256];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Run argv to the end, its output into the log; its exit status, or -1. */
static int run(char *const argv[])
{
	char log[4200];
	int status, fd;
	pid_t pid;

	snprintf(log, sizeof(log), "%s/commands.log", dir);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static redisContext *conn(int port, const char *user, const char *pass)
{
	redisContext *c = redisConnect("127.0.0.1", port);
	redisReply *r;

	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	if (user) {
		r = redisCommand(c, "AUTH %s %s", user, pass);
		if (r)
			freeReplyObject(r);
	}
	return c;
}

/* The end of a one-off exchange: the reply and the connection, either NULL. */
static void conn_done(redisContext *c, redisReply *r)
{
	if (r)
		freeReplyObject(r);
	if (c)
		redisFree(c);
}

/* A command on one node as the default user; its reply's integer or status, or -1. */
static long long node_cmd(int port, const char *fmt, const char *arg)
{
	redisContext *c = conn(port, NULL, NULL);
	redisReply *r;
	long long v = -1;

	if (!c)
		return -1;
	r = redisCommand(c, fmt, arg);
	if (r && r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r && r->type == REDIS_REPLY_STATUS)
		v = 0;
	conn_done(c, r);
	return v;
}

static bool cluster_ok(int port)
{
	redisContext *c = conn(port, NULL, NULL);
	redisReply *r;
	bool ok = false;

	if (!c)
		return false;
	r = redisCommand(c, "CLUSTER INFO");
	ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
	conn_done(c, r);
	return ok;
}

/* A cluster-enabled redis-server on the port, gone with the test however it ends. */
static pid_t spawn_node(int port)
{
	char p[16], conf[64], logf[4200];
	pid_t pid;

	snprintf(p, sizeof(p), "%d", port);
	snprintf(conf, sizeof(conf), "nodes-%d.conf", port);
	snprintf(logf, sizeof(logf), "%s/redis-%d.log", dir, port);
	fflush(NULL);
	pid = fork();
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1",
		       "--cluster-enabled", "yes", "--cluster-config-file", conf,
		       "--cluster-node-timeout", "3000", "--dir", dir, "--save", "",
		       "--appendonly", "no", "--logfile", logf, "--protected-mode", "no",
		       (char *)NULL);
		_exit(127);
	}
	return pid;
}

/*
 * Ports below the kernel's ephemeral range (32768 up), for a node's port
 * and its cluster bus (port + 10000) alike: outgoing connections never
 * hold them.
 */
static int start_cluster(int base)
{
	char *create[4 + NODES + 4], addr[NODES][32];
	int i, n = 0;
	double t0;

	for (i = 0; i < NODES; i++) {
		ports[i] = base + i;
		pids[i] = spawn_node(ports[i]);
		if (pids[i] < 0)
			return -1;
	}
	for (i = 0; i < NODES; i++) {
		t0 = now_s();
		while (node_cmd(ports[i], "PING", NULL) < 0) {
			if (now_s() - t0 > 10)
				return -1;
			usleep(20000);
		}
	}
	create[n++] = "redis-cli";
	create[n++] = "--cluster";
	create[n++] = "create";
	for (i = 0; i < NODES; i++) {
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", ports[i]);
		create[n++] = addr[i];
	}
	create[n++] = "--cluster-replicas";
	create[n++] = "0";
	create[n++] = "--cluster-yes";
	create[n] = NULL;
	if (run(create))
		return -1;
	t0 = now_s();
	for (i = 0; i < NODES; i++)
		while (!cluster_ok(ports[i])) {
			if (now_s() - t0 > 20)
				return -1;
			usleep(50000);
		}
	/*
	 * Two tenants, on every node (ACLs are per node), as
	 * Documentation/libkvrt.rst has them: each its own prefix, and only
	 * the commands the tier sends.
	 */
	for (i = 0; i < NODES; i++) {
		if (node_cmd(ports[i], "ACL SETUSER alice reset on >alice-pw ~tenA:* " TIER_ACL,
			     NULL) ||
		    node_cmd(ports[i], "ACL SETUSER bob reset on >bob-pw ~tenB:* " TIER_ACL, NULL))
			return -1;
	}
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[1]);
	return 0;
}

static void stop_cluster(void)
{
	int i;

	for (i = 0; i < NODES; i++)
		if (pids[i] > 0) {
			kill(pids[i], SIGCONT);
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			pids[i] = 0;
		}
}

struct host {
	struct kvrt *k;
	struct kvrt_space *s;
	struct kvrt_tier *t;
};

static uint32_t ttl_s, open_flags, open_timeout_ms;	/* the next host_open's */
static const char *open_nodes;				/* NULL: the cluster's seeds */
static const char *open_key_file;

static int host_open(struct host *h, const char *user, const char *pass, const char *prefix)
{
	struct kvrt_space_opts so = { .name = "redis-test", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = BB, .quota_bytes = BB * 4 * NB };
	struct kvrt_tier_redis_opts ro = { .nodes = open_nodes ? open_nodes : seeds,
					   .user = user, .password = pass,
					   .key_prefix = prefix,
					   .timeout_ms = open_timeout_ms ? open_timeout_ms : TIMEOUT_MS,
					   .ttl_s = ttl_s, .flags = open_flags,
					   .key_file = open_key_file };
	int ret;

	memset(h, 0, sizeof(*h));
	ret = tier_open_space(&so, &h->k, &h->s);
	if (!ret)
		ret = kvrt_tier_open_redis(h->s, &ro, &h->t);
	return ret;
}

static void host_close(struct host *h)
{
	tier_close_space(h->k, h->s);
	memset(h, 0, sizeof(*h));
}

static int store(struct host *h, uint32_t tag, uint32_t n)
{
	return tier_store_run(h->s, tag, 0, n, BB, -1);
}

/* tag:[0, n) published in h's pool, then stored; the pool keeps them cached. */
static int publish_store(struct host *h, uint32_t tag, uint32_t n)
{
	return tier_publish_store(h->s, tag, 0, n, BB);
}

/* How many of tag:[0, n) h's pool has, asked one by one. */
static int in_pool(struct host *h, uint32_t tag, uint32_t n)
{
	uint8_t hs[1][H];
	uint32_t id, i;
	int have = 0;

	for (i = 0; i < n; i++) {
		tier_hash(hs[0], tag, i);
		if (kvrt_lookup(h->s, 1, (const uint8_t (*)[H])hs, &id, NULL) == 1) {
			have++;
			kvrt_release(h->s, 1, &id);
		}
	}
	return have;
}

/* Lookup of tag:[0, n) across pool and tier: hits, each checked; *bad the wrong ones. */
static int lookup(struct host *h, uint32_t tag, uint32_t n, int *bad, int *from_tier)
{
	uint8_t w[NB];
	int got = tier_lookup_run(h->s, tag, n, BB, w, bad);

	if (from_tier)
		*from_tier = 0;
	for (int i = 0; from_tier && i < got; i++)
		*from_tier += w[i] == 1;
	return got;
}

static struct kvrt_tier_stats stats(struct host *h)
{
	return tier_stats_now(h->t);
}

#define KEY_MAX 512
#define KEYS_MAX 8192

/* Every key under prefix, on every node, listed as the default user: how many. */
static int keys_list(const char *prefix, char (*keys)[KEY_MAX], int max)
{
	redisContext *c;
	redisReply *r;
	size_t e;
	int j, n = 0;

	for (j = 0; j < NODES; j++) {
		c = conn(ports[j], NULL, NULL);
		r = c ? redisCommand(c, "SCAN 0 MATCH %s* COUNT 1000000", prefix) : NULL;
		for (e = 0; r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			    e < r->element[1]->elements && n < max; e++)
			snprintf(keys[n++], KEY_MAX, "%s", r->element[1]->element[e]->str);
		conn_done(c, r);
	}
	return n;
}

/*
 * The key the tier gives tag:i (i > 0 or a tag stored nowhere yet): the
 * one key that storing tag:i adds, tag:[0, i) stored first.  Names are the
 * tier's business (blinded by its key), so they are found, not made.
 */
static void key_of(struct host *h, const char *prefix, uint32_t tag, uint32_t i, char *key,
		   size_t len)
{
	static char before[KEYS_MAX][KEY_MAX], after[KEYS_MAX][KEY_MAX];
	int nb, na, x, y, found = 0;

	key[0] = 0;
	if (i && store(h, tag, i) < 0)
		return;
	nb = keys_list(prefix, before, KEYS_MAX);
	if (store(h, tag, i + 1) != 1)
		return;
	na = keys_list(prefix, after, KEYS_MAX);
	for (x = 0; x < na; x++) {
		for (y = 0; y < nb && strcmp(after[x], before[y]); y++)
			;
		if (y == nb) {
			snprintf(key, len, "%s", after[x]);
			found++;
		}
	}
	if (found != 1)
		key[0] = 0;
}

/* SET key value through a cluster-aware redis-cli (-c follows MOVED). */
static int cli_set(const char *key, const char *value)
{
	char port[16];
	char *argv[] = { "redis-cli", "-c", "-p", port, "SET", (char *)key, (char *)value, NULL };

	snprintf(port, sizeof(port), "%d", ports[0]);
	return run(argv);
}

TEST(another_host_finds_the_blocks)
{
	struct host a, b;
	int bad, tier;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(store(&a, 1, NB), NB);
	CHECK_EQ(store(&a, 1, NB), 0);	/* SET NX: present, left alone */
	CHECK_EQ(stats(&a).stores, NB);
	CHECK_EQ(stats(&a).store_skips, NB);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(lookup(&b, 1, NB, &bad, &tier), NB);
	CHECK_EQ(bad, 0);
	CHECK_EQ(tier, NB);
	CHECK_EQ(stats(&b).hits, NB);
	CHECK_EQ(stats(&b).read_bytes, NB * BB);
	/* Brought up into b's pool: found there the second time. */
	CHECK_EQ(lookup(&b, 1, NB, &bad, &tier), NB);
	CHECK_EQ(tier, 0);
	/* A hash never stored: a miss, nothing else. */
	CHECK_EQ(lookup(&b, 2, 4, &bad, NULL), 0);
	CHECK_EQ(stats(&b).misses, 1);
	CHECK_EQ(stats(&b).io_errors, 0);
	host_close(&a);
	host_close(&b);
}

/*
 * kvrt_tier_contains (0.9) on Redis: EXISTS only, so another host learns
 * the stored prefix with no value read and nothing in its pool; a gap
 * ends it.
 */
TEST(contains_asks_exists_and_reads_nothing)
{
	struct kvrt_tier_stats st0, st1;
	struct kvrt_space_stats ps0, ps1;
	uint8_t hs[NB][H], w[NB];
	struct host a, b;
	uint32_t i;
	int bad;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(store(&a, 40, 5), 5);
	for (i = 0; i < NB; i++)
		tier_hash(hs[i], 40, i);
	st0 = stats(&b);
	REQUIRE(kvrt_space_stats(b.s, &ps0) == 0);
	memset(w, 0xee, sizeof(w));
	CHECK_EQ(kvrt_tier_contains(b.s, NB, (const uint8_t (*)[H])hs, w), 5);
	CHECK(w[0] == 1 && w[4] == 1 && w[5] == 0xee);
	st1 = stats(&b);
	REQUIRE(kvrt_space_stats(b.s, &ps1) == 0);
	CHECK_EQ(st1.read_bytes, st0.read_bytes);
	CHECK_EQ(st1.hits, st0.hits);
	CHECK_EQ(ps1.allocs, ps0.allocs);
	CHECK_EQ(ps1.inserts, ps0.inserts);
	/* A gap (40:5 never stored) ends the prefix; a tag never stored: 0. */
	tier_hash(hs[5], 41, 0);
	CHECK_EQ(kvrt_tier_contains(b.s, 7, (const uint8_t (*)[H])hs, NULL), 5);
	CHECK_EQ(kvrt_tier_contains(b.s, 3, (const uint8_t (*)[H])(hs + 5), NULL), 0);
	/* The lookup then reads those five, whole. */
	CHECK_EQ(lookup(&b, 40, 7, &bad, NULL), 5);
	CHECK_EQ(bad, 0);
	host_close(&a);
	host_close(&b);
}

TEST(arguments_and_credentials)
{
	struct kvrt_tier_redis_opts ro = { .nodes = seeds };
	struct kvrt_tier *t = (struct kvrt_tier *)&ro;
	struct host h;

	REQUIRE(host_open(&h, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(kvrt_tier_open_redis(NULL, &ro, &t), -EINVAL);
	CHECK(t == NULL);
	CHECK_EQ(kvrt_tier_open_redis(h.s, NULL, &t), -EINVAL);
	ro.flags = 2;
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EINVAL);
	ro.flags = 0;
	ro.reserved[1] = 1;
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EINVAL);
	ro.reserved[1] = 0;
	ro.writeback_max = 1;	/* without KVRT_TIER_WRITE_BACK */
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EINVAL);
	ro.flags = KVRT_TIER_WRITE_BACK;
	ro.writeback_max = KVRT_MAX_BATCH + 1;
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EINVAL);
	ro.flags = 0;
	ro.writeback_max = 0;
	ro.nodes = "127.0.0.1";
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EINVAL);
	ro.nodes = "127.0.0.1:0";
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EINVAL);
	ro.nodes = "127.0.0.1:1";	/* nobody there */
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -ECONNREFUSED);
	ro.nodes = seeds;
	ro.user = "alice";
	ro.password = "wrong";
	CHECK_EQ(kvrt_tier_open_redis(h.s, &ro, &t), -EACCES);
	host_close(&h);
}

/* ttl_s: every block stored expires (SET ... EX). */
TEST(blocks_expire_after_ttl)
{
	struct host a;
	char key[512];
	long long ttl;
	redisContext *c;
	redisReply *r;
	int i;

	ttl_s = 100;
	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	ttl_s = 0;
	key_of(&a, "tenA:", 12, 2, key, sizeof(key));
	REQUIRE(key[0]);
	CHECK_EQ(store(&a, 12, 4), 1);
	ttl = -3;
	for (i = 0; i < NODES; i++) {
		c = conn(ports[i], NULL, NULL);
		r = c ? redisCommand(c, "TTL %s", key) : NULL;
		/* -2 on the nodes that do not hold the key's slot (MOVED is an error here) */
		if (r && r->type == REDIS_REPLY_INTEGER)
			ttl = r->integer;
		conn_done(c, r);
	}
	CHECKF(ttl > 0 && ttl <= 100, "TTL %lld", ttl);
	host_close(&a);
}

/* bob's credentials cannot read alice's blocks: Redis says NOPERM. */
TEST(a_tenant_cannot_reach_another_tenants_keys)
{
	struct host a, b;
	redisContext *c;
	redisReply *r;
	char key[512];
	int bad, i;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	key_of(&a, "tenA:", 3, 0, key, sizeof(key));
	REQUIRE(key[0]);
	CHECK_EQ(store(&a, 3, 8), 7);
	/* bob, pointed at alice's prefix: every answer is Redis's refusal. */
	REQUIRE(host_open(&b, "bob", "bob-pw", "tenA:") == 0);
	CHECK_EQ(lookup(&b, 3, 8, &bad, NULL), 0);
	CHECK(stats(&b).io_errors > 0);
	CHECK_EQ(store(&b, 4, 2), -EIO);
	host_close(&b);
	/* Redis itself, asked directly with bob's credentials. */
	for (i = 0; i < NODES; i++) {
		c = conn(ports[i], "bob", "bob-pw");
		REQUIRE(c);
		r = redisCommand(c, "GET %s", key);
		CHECKF(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM", 6),
		       "node %d: GET as bob: %s", i, r && r->str ? r->str : "(no error)");
		conn_done(c, r);
	}
	/* With its own prefix bob has a tier of its own. */
	REQUIRE(host_open(&b, "bob", "bob-pw", "tenB:") == 0);
	CHECK_EQ(store(&b, 3, 8), 8);
	CHECK_EQ(stats(&b).io_errors, 0);
	host_close(&b);
	host_close(&a);
}

/*
 * Everything else a tenant's credentials might try, each refused with
 * NOPERM: listing and sampling keys (whose names would confirm a guessed
 * prompt), flushing, other clients, the server's settings, another
 * tenant's keys.  %s is a key under the other tenant's prefix.
 */
static const char *const not_the_tiers[] = {
	"KEYS *", "SCAN 0", "RANDOMKEY", "DBSIZE", "FLUSHALL", "FLUSHDB", "CLIENT LIST",
	"CLIENT KILL ID 999999", "CLIENT SETNAME x", "CONFIG GET maxmemory",
	"CONFIG SET maxmemory 1", "INFO", "CLUSTER NODES", "CLUSTER INFO", "CLUSTER SHARDS",
	"CLUSTER GETKEYSINSLOT 0 10", "CLUSTER COUNTKEYSINSLOT 0", "ACL LIST", "ACL WHOAMI",
	"ACL SETUSER bob +@all", "MONITOR", "SUBSCRIBE c", "PUBLISH c m", "EVAL return 1 0",
	"FUNCTION LIST", "MEMORY USAGE %s", "OBJECT ENCODING %s", "DUMP %s", "TYPE %s",
	"TTL %s", "DEL %s", "UNLINK %s", "EXPIRE %s 1", "APPEND %s x", "GETDEL %s",
	"GET %s", "SET %s x", "EXISTS %s", "SWAPDB 0 1", "BGSAVE", "WAIT 0 0", "MULTI",
};

/* cmd on the node as user: whether Redis answered NOPERM (its reply, for the log, in why). */
static bool refused(int port, const char *user, const char *pass, const char *cmd,
		    char *why, size_t len)
{
	redisContext *c = conn(port, user, pass);
	redisReply *r = c ? redisCommand(c, cmd) : NULL;
	bool no = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM", 6);

	snprintf(why, len, "%s", !r ? "no reply" : r->type == REDIS_REPLY_ERROR ? r->str :
				 r->type == REDIS_REPLY_STATUS ? r->str : "a reply");
	conn_done(c, r);
	return no;
}

/*
 * Item by item, on every node: bob's credentials run nothing but the
 * tier's commands, and those only on tenB:'s keys.
 */
TEST(a_tenants_credentials_can_run_only_the_tiers_commands)
{
	static const char *const allowed[] = { "CLUSTER SLOTS", "EXISTS tenB:k", "GET tenB:k",
						"SET tenB:k v NX EX 100", "ASKING" };
	char cmd[128], why[256];
	size_t k;
	int i;

	for (i = 0; i < NODES; i++) {
		for (k = 0; k < sizeof(not_the_tiers) / sizeof(not_the_tiers[0]); k++) {
			snprintf(cmd, sizeof(cmd), not_the_tiers[k], "tenA:k");
			CHECKF(refused(ports[i], "bob", "bob-pw", cmd, why, sizeof(why)),
			       "node %d: %s as bob: %s", i, cmd, why);
		}
		/* Allowed: an answer that is not NOPERM (MOVED where another node has the slot). */
		for (k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
			CHECKF(!refused(ports[i], "bob", "bob-pw", allowed[k], why, sizeof(why)),
			       "node %d: %s as bob: %s", i, allowed[k], why);
	}
}

/* Every key alice's tier writes: prefix and 64 hex digits that hold no hash of hers. */
TEST(key_names_leak_no_hash)
{
	static char keys[KEYS_MAX][KEY_MAX];
	static const char *hex = "0123456789abcdef";
	char hs[NB][2 * H + 1];
	uint8_t h[H];
	struct host a;
	int n, k, i, j, leaks = 0, odd = 0;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(store(&a, 44, NB), NB);
	host_close(&a);
	for (i = 0; i < NB; i++) {
		tier_hash(h, 44, (uint32_t)i);
		for (j = 0; j < H; j++) {
			hs[i][2 * j] = hex[h[j] >> 4];
			hs[i][2 * j + 1] = hex[h[j] & 15];
		}
		hs[i][2 * H] = 0;
	}
	n = keys_list("tenA:", keys, KEYS_MAX);
	CHECKF(n >= NB, "%d keys listed", n);
	for (k = 0; k < n; k++) {
		for (i = 0; i < NB; i++)
			if (strcasestr(keys[k], hs[i]) || strcasestr(keys[k], hs[i] + 32) ||
			    strncasecmp(keys[k] + 5, hs[i], 16) == 0)
				leaks++;
		if (strlen(keys[k]) != 5 + 64 || strspn(keys[k] + 5, hex) != 64)
			odd++;
	}
	CHECKF(!leaks, "%d of %d key names hold a chained hash (e.g. %s)", leaks, n, keys[0]);
	CHECKF(!odd, "%d of %d key names are not the prefix and 64 hex digits (e.g. %s)", odd,
	       n, keys[0]);
}

/*
 * key_file: the tenant's key, not the password's.  Its file's errors as
 * kvrt_tier_key_from_file's; a host with the password but not the file
 * finds nothing of what the file's holder stored, another with the file
 * finds it all, whole.
 */
TEST(a_key_file_is_the_tenants_key_not_the_passwords)
{
	char path[4200], open_to_all[4200], link[4200];
	struct host a, b;
	int fd, bad, tier;

	snprintf(path, sizeof(path), "%s/tenA.key", dir);
	snprintf(open_to_all, sizeof(open_to_all), "%s/tenA-0644.key", dir);
	snprintf(link, sizeof(link), "%s/tenA-link.key", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0 && write(fd, "0123456789abcdef0123456789abcdef", 32) == 32);
	close(fd);
	fd = open(open_to_all, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0 && write(fd, "0123456789abcdef0123456789abcdef", 32) == 32);
	close(fd);
	fchmodat(AT_FDCWD, open_to_all, 0644, 0);
	REQUIRE(symlink(path, link) == 0);
	open_key_file = "/nonexistent/kvrt.key";
	CHECK_EQ(host_open(&a, "alice", "alice-pw", "tenA:"), -ENOENT);
	host_close(&a);
	open_key_file = open_to_all;
	CHECK_EQ(host_open(&a, "alice", "alice-pw", "tenA:"), -EPERM);
	host_close(&a);
	open_key_file = link;
	CHECK_EQ(host_open(&a, "alice", "alice-pw", "tenA:"), -ELOOP);
	host_close(&a);
	open_key_file = path;
	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	open_key_file = NULL;
	CHECK_EQ(store(&a, 45, 8), 8);
	host_close(&a);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(lookup(&b, 45, 8, &bad, NULL), 0);
	host_close(&b);
	open_key_file = path;
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	open_key_file = NULL;
	CHECK_EQ(lookup(&b, 45, 8, &bad, &tier), 8);
	CHECK_EQ(bad, 0);
	CHECK_EQ(tier, 8);
	host_close(&b);
}

/*
 * A hostile "node" on loopback (a child process): CLUSTER SLOTS names
 * itself for every slot (its host as mode says), AUTH, SET and ASKING are
 * +OK, EXISTS is 1, and GET is what mode says.  Every byte it receives
 * goes to its log.
 */
enum fake_mode {
	FAKE_FORGED_V1,		/* GET: a version 1 value, head and XXH3 right */
	FAKE_FORGED_V2,		/* GET: a version 2 head with a made-up tag */
	FAKE_MOVED,		/* every keyed command: MOVED to 127.0.0.1:arg */
	FAKE_ASK,		/* every keyed command: ASK to 127.0.0.1:arg */
	FAKE_HUGE,		/* GET: a 256 MiB string, streamed */
	FAKE_DRIP,		/* GET: a value's length, then a byte every 100 ms for 10 s */
	FAKE_EMPTY_HOST,	/* CLUSTER SLOTS' host: "" (arg 0), "?" (1), nil (2) */
	FAKE_LISTEN,		/* answers nothing: only logs */
};

struct fake {
	pid_t pid;
	int port;
	char addr[32];
	char log[4200];
};

static void fake_write(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0)
			_exit(0);	/* the client hung up: the next one */
		p += n;
		len -= (size_t)n;
	}
}

static void fake_printf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fake_printf(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fake_write(fd, buf, (size_t)n);
}

/* One RESP line of the client's ("*3", "$5"), into line; false at EOF. */
static bool fake_line(FILE *in, FILE *log, char *line, size_t len)
{
	if (!fgets(line, (int)len, in))
		return false;
	fputs(line, log);
	return true;
}

static void fake_reply(int fd, enum fake_mode mode, int arg, int port, char **argv, int argc)
{
	static char value[48 + BB];
	uint64_t bb = BB, sum;
	uint32_t magic = 0x4252564bU;
	uint16_t version;
	int i;

	if (!strcasecmp(argv[0], "CLUSTER") && argc > 1 && !strcasecmp(argv[1], "SLOTS")) {
		fake_printf(fd, "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n");
		if (mode != FAKE_EMPTY_HOST)
			fake_printf(fd, "$9\r\n127.0.0.1\r\n");
		else if (arg == 0)
			fake_printf(fd, "$0\r\n\r\n");
		else if (arg == 1)
			fake_printf(fd, "$1\r\n?\r\n");
		else
			fake_printf(fd, "$-1\r\n");
		fake_printf(fd, ":%d\r\n$40\r\n%040d\r\n", port, port);
	} else if ((mode == FAKE_MOVED || mode == FAKE_ASK) && argc > 1 &&
		   strcasecmp(argv[0], "AUTH")) {
		fake_printf(fd, "-%s 1 127.0.0.1:%d\r\n", mode == FAKE_MOVED ? "MOVED" : "ASK", arg);
	} else if (!strcasecmp(argv[0], "EXISTS")) {
		fake_printf(fd, ":1\r\n");
	} else if (!strcasecmp(argv[0], "GET") && mode == FAKE_HUGE) {
		static char zeros[1 << 20];

		fake_printf(fd, "$%d\r\n", 256 << 20);
		for (i = 0; i < 256; i++)
			fake_write(fd, zeros, sizeof(zeros));
		fake_printf(fd, "\r\n");
	} else if (!strcasecmp(argv[0], "GET") && mode == FAKE_DRIP) {
		fake_printf(fd, "$%llu\r\n", 48 + BB);
		for (i = 0; i < 100; i++) {
			usleep(100000);
			fake_write(fd, "x", 1);
		}
		_exit(0);
	} else if (!strcasecmp(argv[0], "GET") && mode <= FAKE_FORGED_V2) {
		memset(value, 0x5a, sizeof(value));
		memcpy(value, &magic, 4);
		version = mode == FAKE_FORGED_V1 ? 1 : 2;
		memcpy(value + 4, &version, 2);
		memset(value + 6, 0, 2);
		memcpy(value + 8, &bb, 8);
		if (mode == FAKE_FORGED_V1) {
			sum = XXH3_64bits(value + 24, BB);
			memcpy(value + 16, &sum, 8);
		}
		fake_printf(fd, "$%llu\r\n", (mode == FAKE_FORGED_V1 ? 24 : 48) + BB);
		fake_write(fd, value, (mode == FAKE_FORGED_V1 ? 24 : 48) + BB);
		fake_printf(fd, "\r\n");
	} else if (!strcasecmp(argv[0], "GET")) {
		fake_printf(fd, "$-1\r\n");
	} else if (!strcasecmp(argv[0], "AUTH") || !strcasecmp(argv[0], "SET") ||
		   !strcasecmp(argv[0], "ASKING")) {
		fake_printf(fd, "+OK\r\n");
	} else {
		fake_printf(fd, "-ERR not here\r\n");
	}
}

/* One client, command by command, to its end. */
static void fake_serve(int fd, enum fake_mode mode, int arg, int port, FILE *log)
{
	static char buf[64][1024];
	FILE *in = fdopen(dup(fd), "r");
	char line[64], *argv[64];
	int argc, i;

	while (in && fake_line(in, log, line, sizeof(line))) {
		if (mode == FAKE_LISTEN || line[0] != '*')
			continue;
		argc = atoi(line + 1);
		if (argc < 1 || argc > 64)
			break;
		for (i = 0; i < argc; i++) {
			long len;

			if (!fake_line(in, log, line, sizeof(line)) || line[0] != '$')
				goto out;
			len = atol(line + 1);
			argv[i] = buf[i];
			if (len < 0)
				goto out;
			/* Values are kept only up to 1 KiB: the rest is read past. */
			if (fread(buf[i], 1, (size_t)(len < 1023 ? len : 1023), in) !=
			    (size_t)(len < 1023 ? len : 1023))
				goto out;
			buf[i][len < 1023 ? len : 1023] = 0;
			fprintf(log, "%s\n", buf[i]);
			for (len = len < 1023 ? 2 : len - 1023 + 2; len > 0; len--)
				if (fgetc(in) == EOF)
					goto out;
		}
		fflush(log);
		fake_reply(fd, mode, arg, port, argv, argc);
	}
out:
	fflush(log);
	if (in)
		fclose(in);
}

static int fake_start(struct fake *f, enum fake_mode mode, int arg)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	static int n;
	int fd, one = 1;

	memset(f, 0, sizeof(*f));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl)) {
		close(fd);
		return -errno;
	}
	f->port = ntohs(sa.sin_port);
	snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", f->port);
	snprintf(f->log, sizeof(f->log), "%s/fake-%d.log", dir, n++);
	fflush(NULL);
	f->pid = fork();
	if (f->pid < 0) {
		close(fd);
		return -errno;
	}
	if (!f->pid) {
		FILE *log = fopen(f->log, "w");

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGPIPE, SIG_IGN);
		for (;;) {
			int c = accept(fd, NULL, NULL);
			pid_t one_client;

			if (c < 0 || !log)
				_exit(1);
			fprintf(log, "# accepted\n");
			fflush(log);
			/* A client of its own, so that a hang-up ends only it. */
			one_client = fork();
			if (!one_client) {
				fake_serve(c, mode, arg, f->port, log);
				_exit(0);
			}
			close(c);
			if (one_client > 0)
				waitpid(one_client, NULL, 0);
		}
	}
	close(fd);
	return 0;
}

static void fake_stop(struct fake *f)
{
	if (f->pid > 0) {
		kill(f->pid, SIGKILL);
		waitpid(f->pid, NULL, 0);
	}
	f->pid = 0;
}

/* What the fake's log holds (at most len - 1 bytes of it). */
static size_t fake_log(const struct fake *f, char *buf, size_t len)
{
	FILE *fp = fopen(f->log, "r");
	size_t n = fp ? fread(buf, 1, len - 1, fp) : 0;

	if (fp)
		fclose(fp);
	buf[n] = 0;
	return n;
}

/*
 * A host whose tier's only seed is the fake node; timeout_ms 3000 unless
 * open_timeout_ms says, since the fake forks for each client and the
 * machine may be busy.
 */
static int fake_host(struct host *h, const struct fake *f)
{
	uint32_t timeout = open_timeout_ms;
	int ret;

	open_nodes = f->addr;
	open_timeout_ms = timeout ? timeout : 3000;
	ret = host_open(h, "alice", "alice-pw", "tenA:");
	open_nodes = NULL;
	open_timeout_ms = timeout;
	return ret;
}

/*
 * A node that answers every GET with a well-formed value (the old format,
 * head and XXH3 right; or the new head with a made-up tag): a miss, counted
 * as a checksum error, and nothing of it published in the pool.
 */
TEST(a_forged_value_from_a_hostile_node_is_a_miss)
{
	enum fake_mode modes[] = { FAKE_FORGED_V1, FAKE_FORGED_V2 };
	struct fake f;
	struct host h;
	int bad, m;

	for (m = 0; m < 2; m++) {
		REQUIRE(fake_start(&f, modes[m], 0) == 0);
		REQUIRE(fake_host(&h, &f) == 0);
		CHECKF(lookup(&h, 40, 4, &bad, NULL) == 0, "mode %d: the forged value was a hit "
		       "(%d of them wrong)", m, bad);
		CHECK_EQ(in_pool(&h, 40, 4), 0);
		CHECK_EQ(stats(&h).hits, 0);
		CHECK_EQ(stats(&h).checksum_errors, 1);
		host_close(&h);
		fake_stop(&f);
	}
}

/*
 * A node that answers MOVED to a host:port no seed's CLUSTER SLOTS names:
 * not followed (a miss, -EIO for a store), and nothing at all, AUTH
 * least of all, reaches the listener there.
 */
TEST(a_redirection_to_an_unconfirmed_node_is_not_followed_and_gets_no_password)
{
	enum fake_mode modes[] = { FAKE_MOVED, FAKE_ASK };
	struct fake f, thief;
	struct host h;
	char log[4096];
	int bad, m;

	for (m = 0; m < 2; m++) {
		REQUIRE(fake_start(&thief, FAKE_LISTEN, 0) == 0);
		REQUIRE(fake_start(&f, modes[m], thief.port) == 0);
		REQUIRE(fake_host(&h, &f) == 0);
		CHECK_EQ(lookup(&h, 41, 4, &bad, NULL), 0);
		CHECK_EQ(store(&h, 41, 4), -EIO);
		CHECK_EQ(stats(&h).redirects, 0);
		host_close(&h);
		usleep(100000);
		fake_log(&thief, log, sizeof(log));
		CHECKF(!strstr(log, "AUTH") && !strstr(log, "alice-pw"), "%s: the password went "
		       "to the unconfirmed node: %.200s", m ? "ASK" : "MOVED", log);
		CHECKF(!log[0], "%s: the unconfirmed node was reached: %.200s",
		       m ? "ASK" : "MOVED", log);
		/* The seed was asked again for its map: it never named the listener. */
		fake_log(&f, log, sizeof(log));
		CHECK(strstr(log, "SLOTS") != NULL);
		fake_stop(&f);
		fake_stop(&thief);
	}
}

/* A line of /proc/self/status, in KiB ("VmRSS:"). */
static long status_kib(const char *field)
{
	FILE *fp = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	while (fp && fgets(line, sizeof(line), fp))
		if (!strncmp(line, field, strlen(field)))
			v = atol(line + strlen(field));
	if (fp)
		fclose(fp);
	return v;
}

/*
 * A GET answered with 256 MiB: the connection is dropped once more than
 * a value (head + block_bytes) is buffered, and the lookup is a miss.  The
 * bound on the peak RSS's growth: the reader's buffer (a reply's cap plus
 * one 16 KiB read, at most doubled by its growth) and a reply object the
 * size of a value, four values in all, and 16 MiB for the allocator's and
 * the sanitizer's slack.  Unbounded, it was twice the reply: 512 MiB.
 */
TEST(an_oversized_reply_is_refused_before_it_is_buffered)
{
	long before, peak, bound = (4 * (48 + (long)BB) + (16 << 20)) / 1024;
	struct fake f;
	struct host h;
	double t0;
	int bad, fd, got;

	REQUIRE(fake_start(&f, FAKE_HUGE, 0) == 0);
	REQUIRE(fake_host(&h, &f) == 0);
	before = status_kib("VmRSS:");
	/* "5": the peak (VmHWM) starts again from the RSS now. */
	fd = open("/proc/self/clear_refs", O_WRONLY);
	REQUIRE(fd >= 0 && write(fd, "5", 1) == 1);
	close(fd);
	t0 = now_s();
	got = lookup(&h, 42, 1, &bad, NULL);
	peak = status_kib("VmHWM:");
	CHECK_EQ(got, 0);
	CHECKF(peak - before < bound, "the peak RSS grew by %ld KiB (bound %ld KiB)",
	       peak - before, bound);
	tap_diag("oversized reply: refused in %.3f s, the peak RSS %ld KiB above the start",
		 now_s() - t0, peak - before);
	CHECK(stats(&h).io_errors >= 1);
	host_close(&h);
	fake_stop(&f);
}

/*
 * A GET answered a byte every 100 ms, each within the read timeout: the
 * reply as a whole still gets timeout_ms (2 s here), then the node is
 * dropped and the lookup is a miss (it took the node's 10 s before).
 */
TEST(a_reply_trickling_in_ends_within_the_timeout)
{
	struct fake f;
	struct host h;
	double t0, took;
	int bad;

	REQUIRE(fake_start(&f, FAKE_DRIP, 0) == 0);
	open_timeout_ms = 2000;
	REQUIRE(fake_host(&h, &f) == 0);
	open_timeout_ms = 0;
	t0 = now_s();
	CHECK_EQ(lookup(&h, 47, 1, &bad, NULL), 0);
	took = now_s() - t0;
	CHECKF(took < 2 * 2.0, "the lookup took %.2f s (timeout 2 s)", took);
	CHECK(stats(&h).io_errors >= 1);
	host_close(&h);
	fake_stop(&f);
}

/*
 * CLUSTER SLOTS naming its node "" (or "?", or nil): "the address you
 * asked at", the seed's own; its slots are the seed's and stores land.
 */
TEST(a_node_reporting_an_empty_endpoint_gets_its_slots)
{
	int how, port = ports[NODES - 1] + 1;
	char addr[32], host[64] = "(none)";
	redisContext *c;
	redisReply *r;
	struct fake f;
	struct host h;
	double t0;
	pid_t pid;

	for (how = 0; how < 3; how++) {
		REQUIRE(fake_start(&f, FAKE_EMPTY_HOST, how) == 0);
		REQUIRE(fake_host(&h, &f) == 0);
		CHECKF(store(&h, 43, 4) == 4, "endpoint %s: the store failed",
		       how == 0 ? "\"\"" : how == 1 ? "\"?\"" : "nil");
		CHECK_EQ(stats(&h).io_errors, 0);
		host_close(&h);
		fake_stop(&f);
	}
	/* A real one: a one-node cluster without cluster-announce-ip, as Redis 7 has it. */
	pid = spawn_node(port);
	REQUIRE(pid > 0);
	t0 = now_s();
	while (node_cmd(port, "PING", NULL) < 0 && now_s() - t0 < 10)
		usleep(20000);
	CHECK_EQ(node_cmd(port, "CLUSTER ADDSLOTSRANGE 0 %s", "16383"), 0);
	CHECK_EQ(node_cmd(port, "ACL SETUSER alice reset on >alice-pw ~tenA:* " TIER_ACL "%s",
			  ""), 0);
	while (!cluster_ok(port) && now_s() - t0 < 20)
		usleep(50000);
	c = conn(port, NULL, NULL);
	r = c ? redisCommand(c, "CLUSTER SLOTS") : NULL;
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
	    r->element[0]->elements >= 3 && r->element[0]->element[2]->elements >= 1 &&
	    r->element[0]->element[2]->element[0]->type == REDIS_REPLY_STRING)
		snprintf(host, sizeof(host), "\"%s\"", r->element[0]->element[2]->element[0]->str);
	conn_done(c, r);
	tap_diag("a one-node cluster names itself %s", host);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	open_nodes = addr;
	REQUIRE(host_open(&h, "alice", "alice-pw", "tenA:") == 0);
	open_nodes = NULL;
	CHECK_EQ(store(&h, 46, 4), 4);
	CHECK_EQ(stats(&h).io_errors, 0);
	host_close(&h);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

TEST(a_corrupted_or_truncated_value_is_a_miss)
{
	struct host a, b;
	char key[512];
	int bad;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	key_of(&a, "tenA:", 5, 3, key, sizeof(key));
	REQUIRE(key[0]);
	CHECK_EQ(store(&a, 5, 8), 4);
	CHECK_EQ(cli_set(key, "short"), 0);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(lookup(&b, 5, 8, &bad, NULL), 3);
	CHECK_EQ(bad, 0);
	CHECK_EQ(stats(&b).checksum_errors, 1);
	host_close(&b);
	host_close(&a);
}

/* The node's cluster id into id; false when it does not answer. */
static bool node_id(int port, char *id, size_t len)
{
	redisContext *c = conn(port, NULL, NULL);
	redisReply *r = c ? redisCommand(c, "CLUSTER MYID") : NULL;
	bool ok = r && r->type == REDIS_REPLY_STRING;

	if (ok)
		snprintf(id, len, "%s", r->str);
	conn_done(c, r);
	return ok;
}

/* Lookups while redis-cli moves 4000 slots, keys and all, between two nodes. */
TEST(lookups_while_slots_move)
{
	char from[64], to[64], port[16];
	char *reshard[] = { "redis-cli", "--cluster", "reshard", NULL, "--cluster-from", from,
			    "--cluster-to", to, "--cluster-slots", "4000", "--cluster-yes",
			    "--cluster-pipeline", "1", NULL };
	char addr[32];
	struct host a, b, before;
	int bad, rounds = 0, whole = 0, status, got;
	pid_t pid;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(store(&a, 6, NB), NB);
	host_close(&a);
	REQUIRE(node_id(ports[0], from, sizeof(from)) && node_id(ports[1], to, sizeof(to)));
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ports[0]);
	reshard[3] = addr;
	(void)port;
	/* before's slot map is read now, and used only after the move. */
	REQUIRE(host_open(&before, "alice", "alice-pw", "tenA:") == 0);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	fflush(NULL);
	pid = fork();
	REQUIRE(pid >= 0);
	if (!pid)
		_exit(run(reshard));
	do {
		/* A fresh pool each round, so that every hit comes from the cluster. */
		host_close(&b);
		REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
		got = lookup(&b, 6, NB, &bad, NULL);
		rounds++;
		whole += got == NB && !bad;
		CHECKF(got == NB && !bad, "round %d: %d hits, %d wrong", rounds, got, bad);
	} while (waitpid(pid, &status, WNOHANG) == 0);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reshard status %d", status);
	/* After the move, with a map read before it: MOVED, followed. */
	CHECK_EQ(lookup(&before, 6, NB, &bad, NULL), NB);
	CHECK_EQ(bad, 0);
	CHECK(stats(&before).redirects > 0);
	tap_diag("%d lookups of %d blocks during the move, %d whole; %llu redirects after it",
		 rounds, NB, whole, (unsigned long long)stats(&before).redirects);
	host_close(&before);
	host_close(&b);
}

/*
 * Write-back while a node stalls (SIGSTOP): the store returns with its
 * blocks queued; they stay in the pool under pressure that evicts their
 * unqueued neighbours; the stalled batch's failure is reported by the next
 * flush, once; with the node back, what is flushed another host finds.
 */
TEST(write_back_holds_queued_blocks_while_a_node_stalls)
{
	static uint32_t fill[4 * NB];
	uint32_t nfill = 0, ids[8];
	uint8_t hs[8][H];
	struct host a, b;
	int bad, tier;

	/* A stall of 3 s: the checks below run inside it, even under a sanitizer. */
	open_flags = KVRT_TIER_WRITE_BACK;
	open_timeout_ms = 3000;
	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	open_flags = 0;
	open_timeout_ms = 0;
	/* Neighbours: published, released, not stored. */
	REQUIRE(tier_publish(a.s, 22, 0, 8, BB, ids, hs) == 0);
	kvrt_release(a.s, 8, ids);
	kill(pids[2], SIGSTOP);
	/* 24 keys: some on the stalled node (which ones follows from the hashes). */
	CHECK_EQ(publish_store(&a, 21, 24), 24);
	CHECK_EQ(stats(&a).queued, 24);
	CHECK_EQ(stats(&a).deferred, 24);
	/* Take every block the space can give: the cached neighbours go, the queued stay. */
	while (nfill < 4 * NB && kvrt_alloc_blocks(a.s, 1, &fill[nfill]) == 0)
		nfill++;
	CHECK_EQ(in_pool(&a, 22, 8), 0);
	CHECK_EQ(in_pool(&a, 21, 24), 24);
	CHECKF(stats(&a).queued == 24, "the stall ended before the checks (%llu queued)",
	       (unsigned long long)stats(&a).queued);
	if (nfill)
		kvrt_free_blocks(a.s, nfill, fill);
	/* The stalled batch times out: its error, once. */
	CHECK_EQ(kvrt_tier_flush(a.s), -EIO);
	CHECK_EQ(kvrt_tier_flush(a.s), 0);
	CHECK_EQ(stats(&a).queued, 0);
	CHECK(stats(&a).io_errors > 0);
	kill(pids[2], SIGCONT);

	CHECK_EQ(publish_store(&a, 23, 24), 24);
	CHECK_EQ(kvrt_tier_flush(a.s), 0);
	CHECK(stats(&a).stores >= 24);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(lookup(&b, 23, 24, &bad, &tier), 24);
	CHECK_EQ(bad, 0);
	CHECK_EQ(tier, 24);
	host_close(&a);
	host_close(&b);
}

/* A node out of memory (noeviction): the store fails cleanly, what was there stays. */
TEST(a_full_node_fails_the_store_cleanly)
{
	struct host a;
	int bad, i;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(store(&a, 7, 8), 8);
	for (i = 0; i < NODES; i++) {
		CHECK_EQ(node_cmd(ports[i], "CONFIG SET maxmemory-policy %s", "noeviction"), 0);
		CHECK_EQ(node_cmd(ports[i], "CONFIG SET maxmemory %s", "1"), 0);
	}
	CHECK_EQ(store(&a, 8, NB), -EIO);
	CHECK(stats(&a).io_errors > 0);
	/* Reading is still allowed, and the earlier blocks are whole. */
	host_close(&a);
	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(lookup(&a, 7, 8, &bad, NULL), 8);
	CHECK_EQ(bad, 0);
	for (i = 0; i < NODES; i++)
		CHECK_EQ(node_cmd(ports[i], "CONFIG SET maxmemory %s", "0"), 0);
	host_close(&a);
}

/* One call of the mid-batch phase, in a thread of its own. */
struct in_flight {
	struct host *h;
	bool store;
	int ret, bad;
	volatile int done;
	double ended;
};

static void *call_in_flight(void *arg)
{
	struct in_flight *f = arg;

	f->ret = f->store ? store(f->h, 12, NB) : lookup(f->h, 9, NB, &f->bad, NULL);
	f->ended = now_s();
	__atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A stalled node (SIGSTOP), then the same node killed while a lookup and
 * then a store wait on it mid-batch (their commands sent, other nodes'
 * replies in): a shorter prefix or -EIO, within the timeout, never a hang;
 * the blocks returned whole; the pool keeps what it had.
 */
TEST(a_paused_node_then_one_killed_mid_batch)
{
	struct in_flight f[2];
	struct host a, b;
	double t0, took, killed;
	pthread_t th[2];
	int bad, got, i;

	REQUIRE(host_open(&a, "alice", "alice-pw", "tenA:") == 0);
	CHECK_EQ(store(&a, 9, NB), NB);
	REQUIRE(host_open(&b, "alice", "alice-pw", "tenA:") == 0);
	kill(pids[2], SIGSTOP);
	t0 = now_s();
	got = lookup(&b, 9, NB, &bad, NULL);
	took = now_s() - t0;
	/* Some of 64 random keys are on the third node: the prefix ends at the first. */
	CHECKF(got < NB, "paused: %d hits of %d", got, NB);
	CHECK_EQ(bad, 0);
	CHECKF(took < 5.0 * TIMEOUT_MS / 1000, "paused: the lookup took %.2f s", took);
	t0 = now_s();
	CHECK_EQ(store(&a, 10, NB), -EIO);
	took = now_s() - t0;
	CHECKF(took < 5.0 * TIMEOUT_MS / 1000, "paused: the store took %.2f s", took);

	/*
	 * Mid-batch: each call reconnects to the still stopped node (the
	 * kernel accepts for it), sends, and waits; the kill comes while it
	 * waits, a quarter of the timeout in.
	 */
	memset(f, 0, sizeof(f));
	f[0].h = &b;
	f[1].h = &a;
	f[1].store = true;
	for (i = 0; i < 2; i++)
		REQUIRE(pthread_create(&th[i], NULL, call_in_flight, &f[i]) == 0);
	usleep(TIMEOUT_MS * 1000 / 4);
	for (i = 0; i < 2; i++)
		CHECKF(!__atomic_load_n(&f[i].done, __ATOMIC_ACQUIRE),
		       "the %s ended before the kill", f[i].store ? "store" : "lookup");
	kill(pids[2], SIGKILL);
	killed = now_s();
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pids[2] = 0;
	CHECKF(f[0].ret >= 0 && f[0].ret < NB, "killed mid-batch: %d hits of %d", f[0].ret, NB);
	CHECK_EQ(f[0].bad, 0);
	CHECK_EQ(f[1].ret, -EIO);
	for (i = 0; i < 2; i++)
		CHECKF(f[i].ended - killed < 5.0 * TIMEOUT_MS / 1000,
		       "the %s ended %.2f s after the kill", f[i].store ? "store" : "lookup",
		       f[i].ended - killed);
	tap_diag("killed mid-batch: the lookup (%d hits) ended %.3f s after the kill, the store "
		 "%.3f s", f[0].ret, f[0].ended - killed, f[1].ended - killed);
	/* The pool kept what it had: b's earlier hits are found there. */
	if (got > 0)
		CHECK_EQ(lookup(&b, 9, (uint32_t)got, &bad, NULL), got);
	CHECK_EQ(bad, 0);
	/* And with the node gone for good, a lookup is a miss, still within the timeout. */
	t0 = now_s();
	CHECKF(lookup(&b, 9, NB, &bad, NULL) < NB, "dead: all %d hits", NB);
	CHECKF(now_s() - t0 < 5.0 * TIMEOUT_MS / 1000, "dead: the lookup took %.2f s",
	       now_s() - t0);
	host_close(&a);
	host_close(&b);
}

int main(int argc, char **argv)
{
	const char *t = getenv("TMPDIR");
	char tmpl[4096];
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	tap_only = argc > 1 ? argv[1] : NULL;	/* a part of a test's name: only those */
	snprintf(tmpl, sizeof(tmpl), "%s/kvrt-redis.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpl)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(dir, sizeof(dir), "%s", tmpl);
	for (int attempt = 0; attempt < 3; attempt++) {
		ret = start_cluster(10000 + (int)((getpid() * 7 + attempt * 1999) % 4000) * 3);
		if (!ret)
			break;
		stop_cluster();
	}
	if (ret) {
		char cmd[4200];

		tap_result(false, "a Redis Cluster of %d masters started (redis-server and redis-cli "
			   "from Debian's redis-server and redis-tools: make deps installs them; "
			   "logs in %s)", NODES, dir);
		snprintf(cmd, sizeof(cmd), "tail -n 5 %s/*.log", dir);
		if (system(cmd))
			tap_diag("no logs");
		stop_cluster();
		return tap_done("test_tier_redis");
	}
	RUN(another_host_finds_the_blocks);
	RUN(arguments_and_credentials);
	RUN(contains_asks_exists_and_reads_nothing);
	RUN(blocks_expire_after_ttl);
	RUN(a_tenant_cannot_reach_another_tenants_keys);
	RUN(a_corrupted_or_truncated_value_is_a_miss);
	RUN(a_tenants_credentials_can_run_only_the_tiers_commands);
	RUN(key_names_leak_no_hash);
	RUN(a_key_file_is_the_tenants_key_not_the_passwords);
	RUN(a_forged_value_from_a_hostile_node_is_a_miss);
	RUN(a_redirection_to_an_unconfirmed_node_is_not_followed_and_gets_no_password);
	RUN(an_oversized_reply_is_refused_before_it_is_buffered);
	RUN(a_reply_trickling_in_ends_within_the_timeout);
	RUN(a_node_reporting_an_empty_endpoint_gets_its_slots);
	RUN(lookups_while_slots_move);
	RUN(write_back_holds_queued_blocks_while_a_node_stalls);
	RUN(a_full_node_fails_the_store_cleanly);
	RUN(a_paused_node_then_one_killed_mid_batch);
	stop_cluster();
	{
		char cmd[4200];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			tap_diag("could not remove %s", dir);
	}
	return tap_done("test_tier_redis");
}
