// SPDX-License-Identifier: MIT
/*
 * tier/tier_redis.c: the cross-host tier on a Redis Cluster.  A block is
 * one string value under the key
 *
 *     <key_prefix><identity, 64 hex digits>:<hash, 64 hex digits>
 *
 * (no {tag}: the blocks of a space spread over every node), holding a
 * 24-byte head, then the block's bytes:
 *
 *     u32 magic "KVRB", u16 version 1, u16 0, u64 block_bytes, u64 XXH3-64
 *     of the bytes
 *
 * A value that is short, long, of another magic or size, or fails its
 * checksum is a miss (checksum_errors) and is never copied into a block.
 * Batches are one pipelined round trip per node (redis_cluster.c): EXISTS
 * per key to see how long a prefix is there, GET per key to fetch it, SET
 * NX per key to store (a key present is left as it is: Redis's own
 * eviction, maxmemory-policy, decides what goes).  Each tenant connects as
 * its own ACL user, whose key pattern is its key_prefix: Redis itself
 * refuses another tenant's keys (NOPERM), which counts as a miss here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "redis_cluster.h"
#include "tier.h"

#define RB_MAGIC 0x4252564bU	/* "KVRB" */
#define RB_HEAD 24
#define RB_KEY_MAX (128 + 64 + 1 + 64 + 1)
#define RB_ARGS 6	/* SET key value NX EX seconds */

struct redis_tier {
	struct kvrt_tier t;
	pthread_mutex_t lock;
	struct rc_cluster rc;
	uint64_t block_bytes;
	char prefix[128 + 65 + 1];	/* key_prefix, identity, ':' */
	char ttl[16];			/* SET's EX, or empty */
	struct kvrt_tier_stats st;
	/* A batch's scratch (one allocation), grown as needed. */
	uint32_t cap;
	void *scratch;
	char (*keys)[RB_KEY_MAX];
	size_t *lens;			/* RB_ARGS per command */
	const char **argv;		/* RB_ARGS per command */
	struct rc_cmd *cmds;
	redisReply **replies;
	char *values;			/* cap values of RB_HEAD + block_bytes */
};

static struct redis_tier *redis_of(struct kvrt_tier *t)
{
	return kvrt_container_of(t, struct redis_tier, t);
}

/*
 * Room for a batch of n (one allocation, pointer-sized arrays first;
 * contents not kept), and its values when asked.
 */
static int scratch_grow(struct redis_tier *t, uint32_t n, bool values)
{
	size_t argv = RB_ARGS * n * sizeof(*t->argv), lens = RB_ARGS * n * sizeof(*t->lens);
	size_t replies = n * sizeof(*t->replies), cmds = n * sizeof(*t->cmds);
	char *p;

	if (n > t->cap) {
		p = malloc(argv + lens + replies + cmds + n * sizeof(*t->keys));
		if (!p)
			return -ENOMEM;
		free(t->scratch);
		t->scratch = p;
		t->argv = (const char **)p;
		t->lens = (size_t *)(p + argv);
		t->replies = (redisReply **)(p + argv + lens);
		t->cmds = (struct rc_cmd *)(p + argv + lens + replies);
		t->keys = (char (*)[RB_KEY_MAX])(p + argv + lens + replies + cmds);
		free(t->values);
		t->values = NULL;
		t->cap = n;
	}
	if (values && !t->values) {
		t->values = malloc((size_t)t->cap * (RB_HEAD + t->block_bytes));
		if (!t->values)
			return -ENOMEM;
	}
	return 0;
}

/* Command i: verb key [value of vlen [NX [EX ttl]]], the key made from hash. */
static void make_cmd(struct redis_tier *t, uint32_t i, const char *verb, const uint8_t *hash,
		     const char *value, size_t vlen, const char *extra)
{
	const char **argv = &t->argv[RB_ARGS * i];
	size_t *lens = &t->lens[RB_ARGS * i];
	char *k = t->keys[i];
	int len, j, argc = 2;

	len = snprintf(k, RB_KEY_MAX, "%s", t->prefix);
	for (j = 0; j < KVRT_HASH_BYTES; j++)
		len += snprintf(k + len, RB_KEY_MAX - (size_t)len, "%02x", hash[j]);
	argv[0] = verb;
	lens[0] = strlen(verb);
	argv[1] = k;
	lens[1] = (size_t)len;
	if (value) {
		argv[argc] = value;
		lens[argc++] = vlen;
	}
	if (extra) {
		argv[argc] = extra;
		lens[argc++] = strlen(extra);
	}
	if (value && t->ttl[0]) {
		argv[argc] = "EX";
		lens[argc++] = 2;
		argv[argc] = t->ttl;
		lens[argc++] = strlen(t->ttl);
	}
	t->cmds[i] = (struct rc_cmd){ .argc = argc, .argv = argv, .argvlen = lens };
}

static void free_replies(struct redis_tier *t, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (t->replies[i])
			freeReplyObject(t->replies[i]);
}

static void note_failure(struct redis_tier *t, const redisReply *r)
{
	if (!r || r->type == REDIS_REPLY_ERROR) {
		t->st.io_errors++;
		kvrt_log(t->t.space->k, KVRT_LOG_WARNING, "redis tier: %s",
			 r ? r->str : t->rc.err);
	}
}

/* verb KEY for each hash, one batch; false (nothing sent) without memory. */
static bool key_batch(struct redis_tier *t, const char *verb, uint32_t count,
		      const uint8_t (*hashes)[KVRT_HASH_BYTES])
{
	uint32_t i;

	if (scratch_grow(t, count, false))
		return false;
	for (i = 0; i < count; i++)
		make_cmd(t, i, verb, hashes[i], NULL, 0, NULL);
	rc_batch(&t->rc, count, t->cmds, t->replies);
	return true;
}

/* The figures kvrt_tier_stats() shows, at the end of each op (t->lock held). */
static void redis_show(struct redis_tier *t)
{
	struct kvrt_tier_stats st = t->st;

	st.kind = KVRT_TIER_REDIS;
	st.redirects = t->rc.redirects;
	kvrt_tier_show_stats(&t->t, &st);
}

static uint32_t redis_present(struct kvrt_tier *tier, uint32_t count,
			      const uint8_t (*hashes)[KVRT_HASH_BYTES])
{
	struct redis_tier *t = redis_of(tier);
	uint32_t i = 0;

	pthread_mutex_lock(&t->lock);
	if (!key_batch(t, "EXISTS", count, hashes))
		goto out;
	for (i = 0; i < count; i++) {
		const redisReply *r = t->replies[i];

		if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
			note_failure(t, r);
			break;
		}
	}
	free_replies(t, count);
	if (!i)
		t->st.misses++;
out:
	redis_show(t);
	pthread_mutex_unlock(&t->lock);
	return i;
}

/* A fetched value: whole, of this geometry, checksum right?  Else why not. */
static const char *value_bad(const struct redis_tier *t, const redisReply *r)
{
	uint64_t bb, sum;
	uint32_t magic;
	uint16_t version;

	if (r->type == REDIS_REPLY_NIL)
		return "gone";
	if (r->type != REDIS_REPLY_STRING)
		return "not a string";
	if (r->len != RB_HEAD + t->block_bytes)
		return "wrong length";
	memcpy(&magic, r->str, 4);
	memcpy(&version, r->str + 4, 2);
	memcpy(&bb, r->str + 8, 8);
	memcpy(&sum, r->str + 16, 8);
	if (magic != RB_MAGIC || version != 1 || bb != t->block_bytes)
		return "wrong head";
	if (XXH3_64bits(r->str + RB_HEAD, t->block_bytes) != sum)
		return "checksum mismatch";
	return NULL;
}

static uint32_t redis_fetch(struct kvrt_tier *tier, uint32_t count,
			    const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids)
{
	struct redis_tier *t = redis_of(tier);
	uint32_t i = 0;

	pthread_mutex_lock(&t->lock);
	if (!key_batch(t, "GET", count, hashes))
		goto out;
	for (i = 0; i < count; i++) {
		const redisReply *r = t->replies[i];
		const char *bad;

		if (!r || r->type == REDIS_REPLY_ERROR) {
			note_failure(t, r);
			break;
		}
		bad = value_bad(t, r);
		if (bad) {
			if (r->type != REDIS_REPLY_NIL)
				t->st.checksum_errors++;
			kvrt_log(tier->space->k, KVRT_LOG_WARNING, "redis tier: %s: %s",
				 t->keys[i], bad);
			break;
		}
		memcpy(kvrt_block_addr(tier->space, ids[i]), r->str + RB_HEAD, t->block_bytes);
		t->st.read_bytes += t->block_bytes;
	}
	free_replies(t, count);
	t->st.hits += i;
out:
	redis_show(t);
	pthread_mutex_unlock(&t->lock);
	return i;
}

static int redis_store(struct kvrt_tier *tier, uint32_t count,
		       const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids,
		       const uint32_t *prio)
{
	struct redis_tier *t = redis_of(tier);
	size_t vbytes = RB_HEAD + t->block_bytes;
	uint32_t i, written = 0, failed = 0;
	int ret;

	(void)prio;	/* Redis evicts by its own policy */
	pthread_mutex_lock(&t->lock);
	ret = scratch_grow(t, count, true);
	if (ret)
		goto out;
	for (i = 0; i < count; i++) {
		char *v = t->values + (size_t)i * vbytes;
		const void *data = kvrt_block_addr(tier->space, ids[i]);
		uint32_t magic = RB_MAGIC;
		uint16_t version = 1, zero = 0;
		uint64_t sum = XXH3_64bits(data, t->block_bytes);

		memcpy(v, &magic, 4);
		memcpy(v + 4, &version, 2);
		memcpy(v + 6, &zero, 2);
		memcpy(v + 8, &t->block_bytes, 8);
		memcpy(v + 16, &sum, 8);
		memcpy(v + RB_HEAD, data, t->block_bytes);
		/* NX: a block present stays as it is. */
		make_cmd(t, i, "SET", hashes[i], v, vbytes, "NX");
	}
	rc_batch(&t->rc, count, t->cmds, t->replies);
	for (i = 0; i < count; i++) {
		const redisReply *r = t->replies[i];

		if (r && r->type == REDIS_REPLY_STATUS) {
			written++;
			t->st.write_bytes += t->block_bytes;
		} else if (r && r->type == REDIS_REPLY_NIL) {
			t->st.store_skips++;
		} else {
			failed++;
			note_failure(t, r);
		}
	}
	free_replies(t, count);
	t->st.stores += written;
	ret = failed ? -EIO : (int)written;
out:
	redis_show(t);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

static void redis_close(struct kvrt_tier *tier)
{
	struct redis_tier *t = redis_of(tier);

	rc_close(&t->rc);
	pthread_mutex_destroy(&t->lock);
	kvrt_tier_common_destroy(&t->t);
	free(t->scratch);
	free(t->values);
	free(t);
}

static const struct kvrt_tier_ops redis_ops = {
	.present = redis_present,
	.fetch = redis_fetch,
	.store = redis_store,
	.close = redis_close,
};

int kvrt_redis_open(struct kvrt_space *s, const struct kvrt_tier_redis_opts *o,
		    const uint8_t identity[32], struct kvrt_tier **out)
{
	struct redis_tier *t = calloc(1, sizeof(*t));
	const char *prefix = o->key_prefix ? o->key_prefix : "kvt:";
	int ret, i, len;

	if (!t)
		return -ENOMEM;
	t->t.ops = &redis_ops;
	t->t.space = s;
	t->block_bytes = s->block_bytes;
	pthread_mutex_init(&t->lock, NULL);
	kvrt_tier_common_init(&t->t);
	len = snprintf(t->prefix, sizeof(t->prefix), "%s", prefix);
	for (i = 0; i < 32; i++)
		len += snprintf(t->prefix + len, sizeof(t->prefix) - (size_t)len, "%02x",
				identity[i]);
	snprintf(t->prefix + len, sizeof(t->prefix) - (size_t)len, ":");
	if (o->ttl_s)
		snprintf(t->ttl, sizeof(t->ttl), "%u", o->ttl_s);
	ret = rc_open(&t->rc, o->nodes, o->user, o->password,
		      o->timeout_ms ? o->timeout_ms : 1000);
	if (ret) {
		kvrt_log(s->k, KVRT_LOG_ERR, "redis tier: %s", t->rc.err);
		rc_close(&t->rc);
		pthread_mutex_destroy(&t->lock);
		kvrt_tier_common_destroy(&t->t);
		free(t);
		return ret;
	}
	redis_show(t);
	*out = &t->t;
	return 0;
}
