// SPDX-License-Identifier: MIT
/*
 * tier/redis_cluster.c: slot routing, pipelined batches and redirections
 * over hiredis (redis_cluster.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_cluster.h"

uint16_t rc_key_slot(const char *key, size_t len)
{
	size_t open, close, i;
	uint16_t crc = 0;
	int b;

	/* A {tag} with something inside names the slot instead of the whole key. */
	for (open = 0; open < len && key[open] != '{'; open++)
		;
	if (open < len) {
		for (close = open + 1; close < len && key[close] != '}'; close++)
			;
		if (close < len && close > open + 1) {
			key += open + 1;
			len = close - open - 1;
		}
	}
	for (i = 0; i < len; i++) {
		crc ^= (uint16_t)((uint8_t)key[i] << 8);
		for (b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc & (RC_SLOTS - 1);
}

/* The node host:port, added when add says so and it is new; else RC_NO_NODE. */
static uint16_t node_index(struct rc_cluster *c, const char *host, size_t hlen, int port,
			   bool add)
{
	uint16_t i;

	if (!hlen || hlen >= sizeof(c->nodes[0].host) || memchr(host, 0, hlen) || port < 1 ||
	    port > 65535)
		return RC_NO_NODE;
	for (i = 0; i < c->nr_nodes; i++)
		if (c->nodes[i].port == port && !strncmp(c->nodes[i].host, host, hlen) &&
		    !c->nodes[i].host[hlen])
			return i;
	if (!add || c->nr_nodes == RC_MAX_NODES)
		return RC_NO_NODE;
	memset(&c->nodes[i], 0, sizeof(c->nodes[i]));
	memcpy(c->nodes[i].host, host, hlen);
	c->nodes[i].port = port;
	return c->nr_nodes++;
}

/*
 * Reply objects as hiredis makes them, each charged to its node's budget
 * (rc_node.left, via the reader's privdata) first: past it the reader
 * fails (out of memory) instead of allocating, so that an array header
 * naming a billion elements allocates nothing.
 */
static redisReplyObjectFunctions *hiredis_fn;
static redisReplyObjectFunctions capped_fn;
static pthread_once_t capped_once = PTHREAD_ONCE_INIT;

static bool charge(const redisReadTask *task, size_t bytes)
{
	struct rc_node *n = task->privdata;

	if (!n || bytes > n->left)
		return false;
	n->left -= bytes;
	return true;
}

static void *capped_string(const redisReadTask *task, char *str, size_t len)
{
	return charge(task, sizeof(redisReply) + len + 1) ?
	       hiredis_fn->createString(task, str, len) : NULL;
}

static void *capped_array(const redisReadTask *task, int elements)
{
	return elements >= 0 && charge(task, sizeof(redisReply) +
					     (size_t)elements * sizeof(redisReply *)) ?
	       hiredis_fn->createArray(task, elements) : NULL;
}

static void *capped_integer(const redisReadTask *task, long long value)
{
	return charge(task, sizeof(redisReply)) ? hiredis_fn->createInteger(task, value) : NULL;
}

static void *capped_nil(const redisReadTask *task)
{
	return charge(task, sizeof(redisReply)) ? hiredis_fn->createNil(task) : NULL;
}

static void capped_init(void)
{
	redisReader *r = redisReaderCreate();

	if (!r)
		return;
	hiredis_fn = r->fn;
	redisReaderFree(r);
	capped_fn = (redisReplyObjectFunctions){
		.createString = capped_string,
		.createArray = capped_array,
		.createInteger = capped_integer,
		.createNil = capped_nil,
		.freeObject = hiredis_fn->freeObject,
	};
}

/* Microseconds of the monotonic clock. */
static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * The node's next reply into *out, at most cap bytes buffered and cap
 * bytes of objects, read within the timeout: redisGetReply() would buffer
 * a bulk string whole, however long, before the caller saw its length,
 * and its read timeout never fires while bytes flow.  -1 when over the
 * cap or too slow, the reason in c->err; the caller drops the node.
 * Writing what is queued keeps the timeout per send: a batch of large
 * values may take longer than one reply.
 */
static int get_reply(struct rc_cluster *c, struct rc_node *n, size_t cap, redisReply **out)
{
	int64_t timeout = (int64_t)c->timeout.tv_sec * 1000000 + c->timeout.tv_usec, end, left;
	redisContext *ctx = n->c;
	void *r = NULL;
	int done = 0;

	*out = NULL;
	n->left = cap;
	if (redisGetReplyFromReader(ctx, &r) != REDIS_OK)
		goto fail;
	if (!r) {
		redisSetTimeout(ctx, c->timeout);
		do {
			if (redisBufferWrite(ctx, &done) != REDIS_OK)
				goto fail;
		} while (!done);
		end = now_us() + timeout;
		do {
			/* What the reader holds unparsed: this reply's part so far. */
			if (ctx->reader->len - ctx->reader->pos > cap) {
				snprintf(c->err, sizeof(c->err), "%s:%d: a reply over %zu bytes",
					 n->host, n->port, cap);
				return -1;
			}
			/* Each read waits only for what is left of the reply's time. */
			left = end - now_us();
			if (left <= 0) {
				snprintf(c->err, sizeof(c->err), "%s:%d: a reply slower than %lld ms",
					 n->host, n->port, (long long)timeout / 1000);
				return -1;
			}
			redisSetTimeout(ctx, (struct timeval){ .tv_sec = left / 1000000,
							      .tv_usec = left % 1000000 });
			if (redisBufferRead(ctx) != REDIS_OK ||
			    redisGetReplyFromReader(ctx, &r) != REDIS_OK)
				goto fail;
		} while (!r);
	}
	*out = r;
	return 0;
fail:
	if (ctx->err == REDIS_ERR_OOM)
		snprintf(c->err, sizeof(c->err), "%s:%d: a reply over %zu bytes", n->host,
			 n->port, cap);
	else
		snprintf(c->err, sizeof(c->err), "%s:%d: %s", n->host, n->port, ctx->errstr);
	return -1;
}

static void node_drop(struct rc_node *n)
{
	if (n->c)
		redisFree(n->c);
	n->c = NULL;
}

/* The node's connection, made and authenticated when there is none; NULL on failure. */
static redisContext *node_conn(struct rc_cluster *c, uint16_t i, int *why)
{
	struct rc_node *n = &c->nodes[i];
	redisReply *r;

	*why = -ECONNREFUSED;
	if (n->c)
		return n->c;
	n->c = redisConnectWithTimeout(n->host, n->port, c->timeout);
	if (!n->c || n->c->err) {
		snprintf(c->err, sizeof(c->err), "%s:%d: %s", n->host, n->port,
			 n->c ? n->c->errstr : "out of memory");
		*why = n->c && n->c->err == REDIS_ERR_IO && errno == EINPROGRESS ? -ETIMEDOUT :
		       -ECONNREFUSED;
		node_drop(n);
		return NULL;
	}
	redisSetTimeout(n->c, c->timeout);
	pthread_once(&capped_once, capped_init);
	if (!hiredis_fn) {
		snprintf(c->err, sizeof(c->err), "out of memory");
		node_drop(n);
		return NULL;
	}
	n->c->reader->fn = &capped_fn;
	n->c->reader->privdata = n;
	if (c->user[0]) {
		redisAppendCommand(n->c, "AUTH %s %s", c->user, c->pass);
		if (get_reply(c, n, 4096, &r) || r->type == REDIS_REPLY_ERROR) {
			if (r)
				snprintf(c->err, sizeof(c->err), "%s:%d: AUTH %s: %s", n->host,
					 n->port, c->user, r->str);
			*why = r ? -EACCES : -ETIMEDOUT;
			if (r)
				freeReplyObject(r);
			node_drop(n);
			return NULL;
		}
		freeReplyObject(r);
	}
	return n->c;
}

/*
 * One range of CLUSTER SLOTS: [first, last, [host, port, id, ...], replicas...]
 * into the map.  A host of "" or "?" (or nil) is Redis 7's "the address you
 * asked at": the seed's.
 */
static void map_range(struct rc_cluster *c, const struct rc_node *seed, const redisReply *rng)
{
	const redisReply *m, *h;
	const char *host;
	long long a, b;
	uint16_t node;
	size_t hlen;

	if (rng->type != REDIS_REPLY_ARRAY || rng->elements < 3 ||
	    rng->element[0]->type != REDIS_REPLY_INTEGER ||
	    rng->element[1]->type != REDIS_REPLY_INTEGER)
		return;
	m = rng->element[2];
	if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
	    m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
	    m->element[1]->integer > 65535)
		return;
	h = m->element[0];
	if (h->type == REDIS_REPLY_STRING && h->len && strcmp(h->str, "?")) {
		host = h->str;
		hlen = h->len;
	} else if (h->type == REDIS_REPLY_STRING || h->type == REDIS_REPLY_NIL) {
		host = seed->host;
		hlen = strlen(seed->host);
	} else {
		return;
	}
	node = node_index(c, host, hlen, (int)m->element[1]->integer, true);
	if (node == RC_NO_NODE)
		return;
	c->nodes[node].mapped = true;
	for (a = rng->element[0]->integer, b = rng->element[1]->integer;
	     a <= b && a >= 0 && a < RC_SLOTS; a++)
		c->slot_node[a] = node;
}

/* CLUSTER SLOTS from the first seed that answers: the map, all of it anew. */
static int rc_refresh(struct rc_cluster *c)
{
	int why = -ECONNREFUSED;
	uint16_t i, s;
	size_t e;

	c->refreshes++;
	for (i = 0; i < c->nr_nodes; i++) {
		struct rc_node *seed = &c->nodes[i];
		redisContext *ctx;
		redisReply *r;

		if (!seed->seed || !(ctx = node_conn(c, i, &why)))
			continue;
		redisAppendCommand(ctx, "CLUSTER SLOTS");
		if (get_reply(c, seed, RC_MAP_MAX, &r)) {
			node_drop(seed);
			continue;
		}
		if (r->type != REDIS_REPLY_ARRAY) {
			snprintf(c->err, sizeof(c->err), "%s:%d: CLUSTER SLOTS: %s", seed->host,
				 seed->port, r->type == REDIS_REPLY_ERROR ? r->str : "not a list");
			freeReplyObject(r);
			why = -EPROTO;
			continue;
		}
		for (s = 0; s < RC_SLOTS; s++)
			c->slot_node[s] = RC_NO_NODE;
		for (s = 0; s < c->nr_nodes; s++)
			c->nodes[s].mapped = false;
		for (e = 0; e < r->elements; e++)
			map_range(c, seed, r->element[e]);
		freeReplyObject(r);
		return 0;
	}
	return why;
}

int rc_open(struct rc_cluster *c, const char *seeds, const char *user, const char *pass,
	    uint32_t timeout_ms, size_t reply_max)
{
	const char *p = seeds;
	uint16_t s;

	memset(c, 0, sizeof(*c));
	for (s = 0; s < RC_SLOTS; s++)
		c->slot_node[s] = RC_NO_NODE;
	c->timeout.tv_sec = timeout_ms / 1000;
	c->timeout.tv_usec = (timeout_ms % 1000) * 1000;
	c->reply_max = reply_max;
	if ((user && strlen(user) >= sizeof(c->user)) || (pass && strlen(pass) >= sizeof(c->pass)))
		return -EINVAL;
	snprintf(c->user, sizeof(c->user), "%s", user ? user : "");
	snprintf(c->pass, sizeof(c->pass), "%s", pass ? pass : "");
	while (p && *p) {
		const char *colon, *end = strchr(p, ',');
		char *num_end;
		uint16_t node;
		long port;

		if (!end)
			end = p + strlen(p);
		colon = memrchr(p, ':', (size_t)(end - p));
		if (!colon)
			return -EINVAL;
		port = strtol(colon + 1, &num_end, 10);
		if (num_end != end || port < 1 || port > 65535)
			return -EINVAL;
		node = node_index(c, p, (size_t)(colon - p), (int)port, true);
		if (node == RC_NO_NODE)
			return -EINVAL;
		c->nodes[node].seed = true;
		p = *end ? end + 1 : end;
	}
	if (!c->nr_nodes)
		return -EINVAL;
	return rc_refresh(c);
}

void rc_close(struct rc_cluster *c)
{
	uint16_t i;

	for (i = 0; i < c->nr_nodes; i++)
		node_drop(&c->nodes[i]);
}

/*
 * "MOVED 3999 127.0.0.1:6381" / "ASK ...": the node named, if a seed or
 * named by the last map; else RC_NO_NODE (never a node added).
 */
static uint16_t redirect_target(struct rc_cluster *c, const char *msg, uint16_t *slot)
{
	const char *sp = strchr(msg, ' '), *addr, *colon;
	uint16_t node;

	if (!sp)
		return RC_NO_NODE;
	*slot = (uint16_t)(strtoul(sp + 1, NULL, 10) & (RC_SLOTS - 1));
	addr = strchr(sp + 1, ' ');
	colon = addr ? strrchr(addr, ':') : NULL;
	if (!colon)
		return RC_NO_NODE;
	node = node_index(c, addr + 1, (size_t)(colon - addr - 1), atoi(colon + 1), false);
	return node != RC_NO_NODE && (c->nodes[node].seed || c->nodes[node].mapped) ? node :
	       RC_NO_NODE;
}

/*
 * The node's next reply into *r (a previous one there is freed first);
 * false when it timed out or the connection broke: then the node is
 * dropped, and the rest of its replies are lost with it.
 */
static bool read_reply(struct rc_cluster *c, uint16_t node, redisReply **r)
{
	struct rc_node *n = &c->nodes[node];

	if (*r)
		freeReplyObject(*r);
	*r = NULL;
	if (!n->c)
		return false;
	if (!get_reply(c, n, c->reply_max, r))
		return true;
	node_drop(n);
	*r = NULL;
	return false;
}

uint32_t rc_batch(struct rc_cluster *c, uint32_t n, const struct rc_cmd *cmds,
		  redisReply **replies)
{
	/*
	 * target: where a command goes next round; sent: where it went this
	 * round (its reply is read from there, whatever a redirection says
	 * about the next one); asking: the next send is preceded by ASKING;
	 * unknown: its redirection names a node the map does not (the reply
	 * waits in replies[i] until the map is read again).
	 */
	uint16_t *target = malloc(n * sizeof(*target)), *sent = malloc(n * sizeof(*sent));
	uint8_t *asking = calloc(n, 1), *sent_asking = calloc(n, 1), *todo = malloc(n);
	uint8_t *unknown = calloc(n, 1);
	uint32_t i, got = 0, left = n, total = n;
	int round, why;
	uint16_t node;
	bool no_mem = !target || !sent || !asking || !sent_asking || !todo || !unknown;

	if (no_mem) {
		left = 0;
		n = 0;
	}
	for (i = 0; i < n; i++) {
		replies[i] = NULL;
		todo[i] = 1;
		target[i] = c->slot_node[rc_key_slot(cmds[i].argv[1], cmds[i].argvlen[1])];
	}
	for (round = 0; round < 5 && left; round++) {
		bool moved = false, need_map = false;

		/* Every node's commands go out before any reply is read: one round trip each. */
		for (i = 0; i < n; i++)
			sent[i] = RC_NO_NODE;
		for (node = 0; node < c->nr_nodes; node++) {
			redisContext *ctx = NULL;

			for (i = 0; i < n; i++) {
				if (!todo[i] || target[i] != node)
					continue;
				if (!ctx && !(ctx = node_conn(c, node, &why)))
					break;
				if (asking[i])
					redisAppendCommand(ctx, "ASKING");
				redisAppendCommandArgv(ctx, cmds[i].argc, cmds[i].argv, cmds[i].argvlen);
				sent[i] = node;
				sent_asking[i] = asking[i];
				asking[i] = 0;
			}
		}
		/* Unreachable nodes and slots nobody serves: those commands fail now. */
		for (i = 0; i < n; i++)
			if (todo[i] && sent[i] == RC_NO_NODE) {
				if (target[i] == RC_NO_NODE)
					snprintf(c->err, sizeof(c->err), "slot %u: no node serves it",
						 rc_key_slot(cmds[i].argv[1], cmds[i].argvlen[1]));
				todo[i] = 0;
				left--;
			}
		for (node = 0; node < c->nr_nodes; node++) {
			for (i = 0; i < n; i++) {
				redisReply *r = NULL;
				uint16_t slot, to;

				if (!todo[i] || sent[i] != node)
					continue;
				/* ASKING's own reply first, then the command's. */
				if ((sent_asking[i] && !read_reply(c, node, &r)) ||
				    !read_reply(c, node, &r)) {
					todo[i] = 0;
					left--;
					continue;
				}
				if (r->type == REDIS_REPLY_ERROR &&
				    (!strncmp(r->str, "MOVED ", 6) || !strncmp(r->str, "ASK ", 4))) {
					to = redirect_target(c, r->str, &slot);
					if (to == RC_NO_NODE) {
						replies[i] = r;
						unknown[i] = 1;
						need_map = true;
						continue;
					}
					c->redirects++;
					if (r->str[1] == 'S') {
						asking[i] = 1;
					} else {
						c->slot_node[slot] = to;
						moved = true;
					}
					freeReplyObject(r);
					target[i] = to;
					continue;	/* again, next round */
				}
				replies[i] = r;
				todo[i] = 0;
				left--;
				got++;
			}
		}
		/* A slot moved: the map is likely stale beyond it. */
		if ((moved || need_map) && !rc_refresh(c))
			for (i = 0; i < n; i++)
				if (todo[i] && !asking[i])
					target[i] = c->slot_node[rc_key_slot(cmds[i].argv[1],
									     cmds[i].argvlen[1])];
		/* Sent to a node no map named: followed only if the map read now names it. */
		for (i = 0; i < n; i++) {
			redisReply *r = replies[i];
			uint16_t slot, to;

			if (!unknown[i])
				continue;
			unknown[i] = 0;
			replies[i] = NULL;
			to = redirect_target(c, r->str, &slot);
			if (to == RC_NO_NODE) {
				snprintf(c->err, sizeof(c->err), "%s: not a node of the cluster's map",
					 r->str);
				todo[i] = 0;
				left--;
			} else {
				c->redirects++;
				asking[i] = r->str[1] == 'S';
				target[i] = to;
			}
			freeReplyObject(r);
		}
	}
	if (no_mem)
		memset(replies, 0, total * sizeof(*replies));
	free(target);
	free(sent);
	free(asking);
	free(sent_asking);
	free(todo);
	free(unknown);
	return got;
}
