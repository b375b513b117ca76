// SPDX-License-Identifier: MIT
/*
 * tier/tier_redis.c: the cross-host tier on a Redis Cluster.  A block is
 * one string value under the key
 *
 *     <key_prefix><HMAC-SHA256(tenant key, identity, hash), 64 hex digits>
 *
 * (kvrt_tier_blind_name: a listed name confirms no guessed prompt; no
 * {tag}: the blocks of a space spread over every node), holding a 48-byte
 * head, then the block's bytes:
 *
 *     u32 magic "KVRB", u16 version 2, u16 0, u64 block_bytes,
 *     u8 nonce[16], u8 tag[16]
 *
 * The tag (tier_mac.h) binds the bytes to the identity, the hash and the
 * nonce under the tenant's key: the key file's, else one derived from the
 * user and password.  A value that is short, long, of another magic,
 * version (version 1, before 0.8, had an unkeyed XXH3) or size, or whose
 * tag is not right is a miss (checksum_errors) and is never copied into a
 * block.  Batches are one pipelined round trip per node (redis_cluster.c):
 * EXISTS per key to see how long a prefix is there, GET per key to fetch
 * it, SET NX per key to store (a key present is left as it is: Redis's own
 * eviction, maxmemory-policy, decides what goes).  Each tenant connects as
 * its own ACL user, whose key pattern is its key_prefix and whose commands
 * are only these: Redis itself refuses another tenant's keys (NOPERM),
 * which counts as a miss here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "redis_cluster.h"
#include "tier.h"
#include "tier_mac.h"

#define RB_MAGIC 0x4252564bU	/* "KVRB" */
#define RB_VERSION 2
#define RB_HEAD 48
#define RB_NONCE 16		/* the head's nonce, then its tag */
#define RB_TAG (RB_NONCE + KVRT_TIER_NONCE_BYTES)
#define RB_KEY_MAX (128 + 64 + 1)
#define RB_ARGS 6	/* SET key value NX EX seconds */
/* A reply's RESP framing around a value: "$<digits>\r\n" and "\r\n". */
#define RB_FRAMING 64
/* The key derived from user and password names its use. */
#define RB_KEY_LABEL "kvrt redis tier key v1"

struct redis_tier {
	struct kvrt_tier t;
	pthread_mutex_t lock;
	struct rc_cluster rc;
	uint64_t block_bytes;
	uint8_t key[KVRT_TIER_KEY_BYTES];	/* the tenant's */
	uint8_t identity[32];
	char prefix[128 + 1];		/* key_prefix */
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

/*
 * Command i: verb key [value of vlen [NX [EX ttl]]], the key the blind
 * name of hash; -ENOMEM when OpenSSL fails.
 */
static int make_cmd(struct redis_tier *t, uint32_t i, const char *verb, const uint8_t *hash,
		    const char *value, size_t vlen, const char *extra)
{
	static const char hex[] = "0123456789abcdef";
	const char **argv = &t->argv[RB_ARGS * i];
	size_t *lens = &t->lens[RB_ARGS * i];
	char *k = t->keys[i];
	uint8_t name[32];
	int len, j, argc = 2;

	if (kvrt_tier_blind_name(t->key, t->identity, hash, name))
		return -ENOMEM;
	len = snprintf(k, RB_KEY_MAX, "%s", t->prefix);
	for (j = 0; j < 32; j++) {
		k[len++] = hex[name[j] >> 4];
		k[len++] = hex[name[j] & 15];
	}
	k[len] = 0;
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
	return 0;
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
		if (make_cmd(t, i, verb, hashes[i], NULL, 0, NULL))
			return false;
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

/* A fetched value: whole, of this geometry, its tag right for hash?  Else why not. */
static const char *value_bad(const struct redis_tier *t, const redisReply *r,
			     const uint8_t *hash)
{
	struct kvrt_tier_bind b = { t->identity, hash, NULL };
	uint32_t magic;
	uint16_t version;
	uint64_t bb;

	if (r->type == REDIS_REPLY_NIL)
		return "gone";
	if (r->type != REDIS_REPLY_STRING)
		return "not a string";
	if (r->len != RB_HEAD + t->block_bytes)
		return "wrong length";
	memcpy(&magic, r->str, 4);
	memcpy(&version, r->str + 4, 2);
	memcpy(&bb, r->str + 8, 8);
	if (magic != RB_MAGIC || version != RB_VERSION || bb != t->block_bytes)
		return "wrong head";
	b.nonce = (const uint8_t *)r->str + RB_NONCE;
	if (!kvrt_tier_mac_ok(t->key, &b, r->str + RB_HEAD, t->block_bytes,
			      (const uint8_t *)r->str + RB_TAG))
		return "tag mismatch: not written with this tenant's key for this block";
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
		bad = value_bad(t, r, hashes[i]);
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
		struct kvrt_tier_bind b = { t->identity, hashes[i], (uint8_t *)v + RB_NONCE };
		uint32_t magic = RB_MAGIC;
		uint16_t version = RB_VERSION, zero = 0;

		memcpy(v, &magic, 4);
		memcpy(v + 4, &version, 2);
		memcpy(v + 6, &zero, 2);
		memcpy(v + 8, &t->block_bytes, 8);
		memcpy(v + RB_HEAD, data, t->block_bytes);
		/* The tag over the copy: the bytes sent are the bytes tagged. */
		ret = kvrt_tier_nonce((uint8_t *)v + RB_NONCE);
		if (!ret)
			ret = kvrt_tier_mac(t->key, &b, v + RB_HEAD, t->block_bytes,
					    (uint8_t *)v + RB_TAG);
		/* NX: a block present stays as it is. */
		if (!ret)
			ret = make_cmd(t, i, "SET", hashes[i], v, vbytes, "NX");
		if (ret) {
			t->st.io_errors++;
			goto out;
		}
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
	OPENSSL_cleanse(t, sizeof(*t));
	free(t);
}

static const struct kvrt_tier_ops redis_ops = {
	.present = redis_present,
	.fetch = redis_fetch,
	.store = redis_store,
	.close = redis_close,
};

/*
 * The tenant's key: the key file's, else derived from user and password
 * (whoever knows both can then forge values: a key file can be kept from
 * the nodes).
 */
static int tenant_key(const struct kvrt_tier_redis_opts *o, uint8_t key[KVRT_TIER_KEY_BYTES])
{
	char secret[128 + 1 + 256];
	size_t ulen, plen;
	int ret;

	if (o->key_file)
		return kvrt_tier_key_from_file(o->key_file, key);
	ulen = o->user ? strlen(o->user) : 0;
	plen = o->password ? strlen(o->password) : 0;
	if (ulen >= 128 || plen >= 256)
		return -EINVAL;
	/* user, NUL, password: no two pairs give one secret. */
	memcpy(secret, o->user ? o->user : "", ulen);
	secret[ulen] = 0;
	memcpy(secret + ulen + 1, o->password ? o->password : "", plen);
	ret = kvrt_tier_key_derive(RB_KEY_LABEL, secret, ulen + 1 + plen, key);
	OPENSSL_cleanse(secret, sizeof(secret));
	return ret;
}

int kvrt_redis_open(struct kvrt_space *s, const struct kvrt_tier_redis_opts *o,
		    const uint8_t identity[32], struct kvrt_tier **out)
{
	struct redis_tier *t = calloc(1, sizeof(*t));
	const char *prefix = o->key_prefix ? o->key_prefix : "kvt:";
	int ret;

	if (!t)
		return -ENOMEM;
	t->t.ops = &redis_ops;
	t->t.space = s;
	t->block_bytes = s->block_bytes;
	memcpy(t->identity, identity, sizeof(t->identity));
	pthread_mutex_init(&t->lock, NULL);
	kvrt_tier_common_init(&t->t);
	snprintf(t->prefix, sizeof(t->prefix), "%s", prefix);
	if (o->ttl_s)
		snprintf(t->ttl, sizeof(t->ttl), "%u", o->ttl_s);
	ret = tenant_key(o, t->key);
	if (ret) {
		kvrt_log(s->k, KVRT_LOG_ERR, "redis tier: the key%s%s: %s",
			 o->key_file ? " file " : "", o->key_file ? o->key_file : "",
			 strerror(-ret));
		goto fail;
	}
	/* A reply of a batch is at most a value and its framing. */
	ret = rc_open(&t->rc, o->nodes, o->user, o->password,
		      o->timeout_ms ? o->timeout_ms : 1000, RB_HEAD + t->block_bytes + RB_FRAMING);
	if (ret) {
		kvrt_log(s->k, KVRT_LOG_ERR, "redis tier: %s", t->rc.err);
		rc_close(&t->rc);
		goto fail;
	}
	redis_show(t);
	*out = &t->t;
	return 0;
fail:
	pthread_mutex_destroy(&t->lock);
	kvrt_tier_common_destroy(&t->t);
	OPENSSL_cleanse(t, sizeof(*t));
	free(t);
	return ret;
}
