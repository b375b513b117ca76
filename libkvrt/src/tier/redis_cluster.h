/* SPDX-License-Identifier: MIT */
/*
 * tier/redis_cluster.h: the part of a Redis Cluster client that Debian 12's
 * hiredis (0.14) lacks: the key-slot map (CRC16 of the key, or of its
 * {hash tag}, mod 16384), read from CLUSTER SLOTS; batches pipelined so
 * that n commands cost one round trip per node involved; MOVED (the slot
 * moved: the map is corrected and the command sent again) and ASK (the
 * slot is moving: ASKING, then the command, on the node named, once).
 * Every connection authenticates as one ACL user and has one timeout for
 * connecting and for each reply; a node that errs or times out is dropped
 * and reconnected on the next batch.  Not locked: its tier holds a lock.
 *
 * Trust: the seeds are the caller's; the slot map is read from a seed
 * only, and a command (and the password) goes only to a seed or a node
 * the last map named.  A redirection elsewhere re-reads the map and is
 * followed only if the node is in it.  Each reply is capped (a batch's
 * at reply_max, a map's at RC_MAP_MAX) before hiredis buffers it: a
 * node that sends more is dropped.
 */
#ifndef KVRT_REDIS_CLUSTER_H
#define KVRT_REDIS_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define RC_SLOTS 16384
#define RC_MAX_NODES 64
#define RC_NO_NODE UINT16_MAX
/* CLUSTER SLOTS of 16384 ranges, each with a few nodes, fits with room. */
#define RC_MAP_MAX (16u << 20)

struct rc_node {
	char host[64];
	int port;
	bool seed;			/* one of rc_open()'s seeds */
	bool mapped;			/* named by the last map read */
	redisContext *c;
	size_t left;			/* of the reply being read: bytes it may still take */
};

struct rc_cluster {
	struct rc_node nodes[RC_MAX_NODES];
	uint16_t nr_nodes;
	uint16_t slot_node[RC_SLOTS];	/* index in nodes, or RC_NO_NODE */
	char user[128], pass[256];
	struct timeval timeout;
	size_t reply_max;		/* a batch's reply, framing included */
	uint64_t redirects;		/* MOVED and ASK replies followed */
	uint64_t refreshes;		/* slot maps read */
	char err[512];			/* the last failure, for the log */
};

/* One command of a batch: argv[1] is its key. */
struct rc_cmd {
	int argc;
	const char **argv;
	const size_t *argvlen;
};

/* CRC16-CCITT (XMODEM) of the key or of its first non-empty {tag}, mod 16384. */
uint16_t rc_key_slot(const char *key, size_t len);

/*
 * Connect to the seeds ("host:port,host:port,..."), read the slot map.
 * user may be NULL or empty (the default user, no AUTH); reply_max bounds
 * each reply of a batch (rc_batch).  0, or a negative
 * errno with the reason in c->err: -EINVAL a seed list that does not parse,
 * -EACCES the credentials refused, -ECONNREFUSED/-ETIMEDOUT no seed
 * answered, -EPROTO a node that is not a cluster.
 */
int rc_open(struct rc_cluster *c, const char *seeds, const char *user, const char *pass,
	    uint32_t timeout_ms, size_t reply_max);
void rc_close(struct rc_cluster *c);

/*
 * Run n commands, pipelined per node; replies[i] gets each one's reply
 * (the caller frees them with freeReplyObject), or NULL where its node
 * failed, timed out or sent more than reply_max.  Redirections to known
 * nodes are followed (at most 5 rounds).  Returns how many replies are not
 * NULL.
 */
uint32_t rc_batch(struct rc_cluster *c, uint32_t n, const struct rc_cmd *cmds,
		  redisReply **replies);

#endif /* KVRT_REDIS_CLUSTER_H */
