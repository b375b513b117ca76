/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers for the prefix-cache selftests (events, tenants, reclaim, prefix
 * stress, the prefix kill campaign): PUBLISH/LOOKUP/RELEASE wrappers, the
 * event stream, SPACE_STATS, per-uid limits and hash-derived patterns.
 *
 * Like kvpool_util.h: every helper returns 0, a count, or a negative errno,
 * and uses no harness macros, so forked children may call them.  Names
 * start with px_ so that they cannot collide with helpers that
 * kvpool_util.h may grow.
 */
#ifndef KVPOOL_PREFIX_UTIL_H
#define KVPOOL_PREFIX_UTIL_H

#include "kvpool_util.h"

#include <poll.h>
#include <sys/klog.h>
#include <sys/prctl.h>

/* ---- hashes and hash-derived content ------------------------------------ */

/* A deterministic 32-byte hash for (tag, n): distinct for distinct inputs. */
static inline void px_hash(__u8 hash[KVPOOL_HASH_BYTES], __u64 tag, __u64 n)
{
	__u64 st = tag * 0x9E3779B97F4A7C15ULL ^ (n + 1) * 0xD1B54A32D192ED03ULL;
	int i;

	for (i = 0; i < KVPOOL_HASH_BYTES / 8; i++) {
		__u64 v = kv_splitmix64(&st);

		memcpy(hash + 8 * i, &v, 8);
	}
	/* Keep (tag, n) readable in a dump. */
	memcpy(hash, &n, 4);
	memcpy(hash + 4, &tag, 4);
}

static inline __u64 px_hash_seed(const __u8 *hash)
{
	__u64 a, b;

	memcpy(&a, hash, 8);
	memcpy(&b, hash + 8, 8);
	return a ^ (b * 0x9E3779B97F4A7C15ULL);
}

/* Word w of the content that belongs to hash (never 0). */
static inline __u64 px_hash_word(const __u8 *hash, size_t w)
{
	__u64 x = px_hash_seed(hash) ^ (w * 0xBF58476D1CE4E5B9ULL);

	x ^= x >> 31;
	x *= 0x94D049BB133111EBULL;
	x ^= x >> 29;
	return x | 1;
}

/* Fill len bytes at p (8-byte multiple) with hash's content. */
static inline void px_fill_hash(void *p, size_t len, const __u8 *hash)
{
	__u64 *q = p;
	size_t w;

	for (w = 0; w < len / 8; w++)
		q[w] = px_hash_word(hash, w);
}

/* Fill only every stride-th word (the ones px_check_hash with that stride reads). */
static inline void px_fill_hash_stride(void *p, size_t len, const __u8 *hash, size_t stride)
{
	__u64 *q = p;
	size_t w;

	if (!stride)
		stride = 1;
	for (w = 0; w < len / 8; w += stride)
		q[w] = px_hash_word(hash, w);
}

/*
 * Check hash's content at p, every stride-th word (stride 1: all).
 * Returns -1 when it matches, else the index of the first bad word.
 */
static inline long px_check_hash(const void *p, size_t len, const __u8 *hash,
				 size_t stride)
{
	const volatile __u64 *q = p;
	size_t w;

	if (!stride)
		stride = 1;
	for (w = 0; w < len / 8; w += stride)
		if (q[w] != px_hash_word(hash, w))
			return (long)w;
	return -1;
}

static inline void px_hex(char *out, size_t len, const __u8 *hash)
{
	size_t i;

	out[0] = '\0';
	for (i = 0; i < KVPOOL_HASH_BYTES && 2 * i + 2 < len; i++)
		snprintf(out + 2 * i, len - 2 * i, "%02x", hash[i]);
}

/* ---- PUBLISH / LOOKUP / RELEASE ----------------------------------------- */

static inline void px_entry(struct kvpool_publish_entry *e, __u32 id,
			    const __u8 *hash, __u32 priority)
{
	memset(e, 0, sizeof(*e));
	memcpy(e->hash, hash, KVPOOL_HASH_BYTES);
	e->id = id;
	e->priority = priority;
}

/* PUBLISH count entries; *nr_dedup (may be NULL) gets the dedup count. */
static inline int px_publish(int fd, struct kvpool_publish_entry *e, __u32 count,
			     __u32 flags, __u32 *nr_dedup)
{
	struct kvpool_publish p = {
		.entries = (__u64)(uintptr_t)e,
		.count = count,
		.flags = flags,
	};
	int ret = kv_ioctl(fd, KVPOOL_IOC_PUBLISH, &p);

	if (!ret && nr_dedup)
		*nr_dedup = p.nr_dedup;
	return ret;
}

/*
 * Publish one owned block id under hash at the default priority.  *out_id
 * (may be NULL) gets the block that holds hash, *out_flags the entry flags.
 */
static inline int px_publish1(int fd, __u32 id, const __u8 *hash, __u32 *out_id,
			      __u32 *out_flags)
{
	struct kvpool_publish_entry e;
	int ret;

	px_entry(&e, id, hash, 0);
	ret = px_publish(fd, &e, 1, 0, NULL);
	if (!ret) {
		if (out_id)
			*out_id = e.id;
		if (out_flags)
			*out_flags = e.flags;
	}
	return ret;
}

/* As px_publish1 with KVPOOL_PUBLISH_PRIORITY. */
static inline int px_publish1_prio(int fd, __u32 id, const __u8 *hash, __u32 prio,
				   __u32 *out_id, __u32 *out_flags)
{
	struct kvpool_publish_entry e;
	int ret;

	px_entry(&e, id, hash, prio);
	ret = px_publish(fd, &e, 1, KVPOOL_PUBLISH_PRIORITY, NULL);
	if (!ret) {
		if (out_id)
			*out_id = e.id;
		if (out_flags)
			*out_flags = e.flags;
	}
	return ret;
}

/* LOOKUP: returns nr_hits (>= 0) or -errno.  devices may be NULL. */
static inline int px_lookup(int fd, const __u8 (*hashes)[KVPOOL_HASH_BYTES],
			    __u32 count, __u32 *ids, __u64 *devices)
{
	struct kvpool_lookup l = {
		.hashes = (__u64)(uintptr_t)hashes,
		.ids = (__u64)(uintptr_t)ids,
		.devices = (__u64)(uintptr_t)devices,
		.count = count,
	};
	int ret = kv_ioctl(fd, KVPOOL_IOC_LOOKUP, &l);

	return ret ? ret : (int)l.nr_hits;
}

/* LOOKUP of one hash: 1 (hit, *id set), 0 (miss) or -errno. */
static inline int px_lookup1(int fd, const __u8 *hash, __u32 *id)
{
	__u8 h[1][KVPOOL_HASH_BYTES];
	__u32 tmp;

	memcpy(h[0], hash, KVPOOL_HASH_BYTES);
	return px_lookup(fd, (const __u8 (*)[KVPOOL_HASH_BYTES])h, 1, id ? id : &tmp, NULL);
}

static inline int px_release(int fd, __u32 *ids, __u32 count)
{
	return kv_blocks(fd, KVPOOL_IOC_RELEASE, ids, count);
}

static inline int px_release1(int fd, __u32 id)
{
	return px_release(fd, &id, 1);
}

/*
 * Is hash in the space?  LOOKUP, and when it hits, RELEASE the reference
 * again (the block goes back to where it was on the LRU's newest end only
 * if nobody else held it: callers that care about LRU order must not use
 * this).  1, 0, or -errno.
 */
static inline int px_present(int fd, const __u8 *hash, __u32 *id)
{
	__u32 got;
	int ret = px_lookup1(fd, hash, &got);

	if (ret == 1) {
		int r2 = px_release1(fd, got);

		if (r2)
			return r2;
		if (id)
			*id = got;
	}
	return ret;
}

static inline int px_stats(int fd, struct kvpool_space_stats *st)
{
	memset(st, 0, sizeof(*st));
	return kv_ioctl(fd, KVPOOL_IOC_SPACE_STATS, st);
}

static inline int px_destroy(int fd, const char *name)
{
	struct kvpool_space_destroy d;

	memset(&d, 0, sizeof(d));
	snprintf(d.name, sizeof(d.name), "%s", name);
	return kv_ioctl(fd, KVPOOL_IOC_SPACE_DESTROY, &d);
}

/* ---- events ----------------------------------------------------------- */

/*
 * read() up to max events; returns the number read (>= 0, 0 only at
 * EOF-like 0 returns), or -errno.  A short (non-multiple) result is -EIO.
 */
static inline int px_read_events(int fd, struct kvpool_event *ev, int max)
{
	ssize_t n = read(fd, ev, (size_t)max * sizeof(*ev));

	if (n < 0)
		return -errno;
	if (n % sizeof(*ev))
		return -EIO;
	return (int)(n / sizeof(*ev));
}

/*
 * Drain every pending event of a fd (O_NONBLOCK is set for the call and
 * restored) into ev (room for max; more are counted in *lost_room).
 * Returns the number stored, or -errno of a read that failed other than
 * with EAGAIN.
 */
static inline int px_drain_events(int fd, struct kvpool_event *ev, int max, int *lost_room)
{
	int fl = fcntl(fd, F_GETFL), n = 0, ret = 0;
	struct kvpool_event tmp[64];

	if (lost_room)
		*lost_room = 0;
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	for (;;) {
		int r = px_read_events(fd, tmp, 64), i;

		if (r == -EAGAIN)
			break;
		if (r < 0) {
			ret = r;
			break;
		}
		if (r == 0) {
			ret = -ENODATA;
			break;
		}
		for (i = 0; i < r; i++) {
			if (n < max)
				ev[n++] = tmp[i];
			else if (lost_room)
				(*lost_room)++;
		}
	}
	if (!(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl);
	return ret ? ret : n;
}

static inline const char *px_event_name(__u32 type)
{
	switch (type) {
	case KVPOOL_EVENT_EVICTED: return "EVICTED";
	case KVPOOL_EVENT_SPACE_DESTROYED: return "SPACE_DESTROYED";
	case KVPOOL_EVENT_QUOTA_PRESSURE: return "QUOTA_PRESSURE";
	case KVPOOL_EVENT_OVERFLOW: return "OVERFLOW";
	}
	return "?";
}

static inline void px_event_str(char *buf, size_t len, const struct kvpool_event *e)
{
	char hex[2 * KVPOOL_HASH_BYTES + 1];

	px_hex(hex, sizeof(hex), e->hash);
	snprintf(buf, len, "seq=%llu type=%u(%s) cause=%u block=%u count=%u reserved=%llu hash=%.16s..",
		 (unsigned long long)e->seq, e->type, px_event_name(e->type), e->cause,
		 e->block, e->count, (unsigned long long)e->reserved, hex);
}

/* ---- sysfs ------------------------------------------------------------ */

/* Whole file /sys/class/misc/kvpool/<rel> into buf; length or -errno. */
static inline int px_sysfs_read(const char *rel, char *buf, size_t len)
{
	char path[256];

	snprintf(path, sizeof(path), KV_SYSFS "/%s", rel);
	return read_file(path, buf, len);
}

/*
 * Parse "quota=N pool=N tenant=N reclaim=N admin=N" into ev[5].
 * 0 or -EINVAL.
 */
static inline int px_parse_evictions(const char *s, __u64 ev[KVPOOL_EVICT_CAUSES])
{
	unsigned long long q, p, t, r, a;
	int n = 0;

	if (sscanf(s, "quota=%llu pool=%llu tenant=%llu reclaim=%llu admin=%llu%n",
		   &q, &p, &t, &r, &a, &n) != 5)
		return -EINVAL;
	if (s[n] && s[n] != '\n')
		return -EINVAL;
	ev[KVPOOL_EVICT_QUOTA] = q;
	ev[KVPOOL_EVICT_POOL] = p;
	ev[KVPOOL_EVICT_TENANT] = t;
	ev[KVPOOL_EVICT_RECLAIM] = r;
	ev[KVPOOL_EVICT_ADMIN] = a;
	return 0;
}

static inline int px_sysfs_evictions(const char *rel, __u64 ev[KVPOOL_EVICT_CAUSES])
{
	char buf[256];
	int n = px_sysfs_read(rel, buf, sizeof(buf));

	if (n < 0)
		return n;
	return px_parse_evictions(buf, ev);
}

struct px_uid_line {
	unsigned int uid;
	__u64 limit_bytes, used_bytes, spaces;
};

/*
 * Find uid's line in sysfs uid_limit.  1 (found, *out filled), 0 (no
 * line), -EPROTO (a line that does not parse), or -errno.
 */
static inline int px_uid_line(unsigned int uid, struct px_uid_line *out)
{
	static char buf[65536];
	char *line, *save = NULL;
	int n = px_sysfs_read("uid_limit", buf, sizeof(buf));

	if (n < 0)
		return n;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		struct px_uid_line l;
		unsigned long long lim, used, sp;
		int end = 0;

		if (sscanf(line, "uid=%u limit_bytes=%llu used_bytes=%llu spaces=%llu%n",
			   &l.uid, &lim, &used, &sp, &end) != 4 || line[end])
			return -EPROTO;
		if (l.uid != uid)
			continue;
		l.limit_bytes = lim;
		l.used_bytes = used;
		l.spaces = sp;
		if (out)
			*out = l;
		return 1;
	}
	return 0;
}

/* Write "uid bytes" to uid_limit. */
static inline int px_set_uid_limit(unsigned int uid, __u64 bytes)
{
	char s[64];

	snprintf(s, sizeof(s), "%u %llu", uid, (unsigned long long)bytes);
	return sysfs_write("uid_limit", s);
}

static inline int px_sysfs_write_u64(const char *rel, __u64 v)
{
	char s[32];

	snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
	return sysfs_write(rel, s);
}

/* ---- misc -------------------------------------------------------------- */

/* Process state letter from /proc/pid/stat ('S' sleeping, ...), or '?'. */
static inline char px_proc_state(pid_t pid)
{
	char path[64], buf[512], *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file(path, buf, sizeof(buf)) < 0)
		return '?';
	p = strrchr(buf, ')');
	if (!p || !p[1] || !p[2])
		return '?';
	return p[2];
}

static inline void px_sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* waitpid with a timeout: exit code (as kv_wait), or -ETIMEDOUT (child left running). */
static inline int px_wait_timeout(pid_t pid, int ms)
{
	__u64 t0 = kv_now_us();
	int status;

	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid) {
			if (WIFEXITED(status))
				return WEXITSTATUS(status);
			if (WIFSIGNALED(status))
				return 1000 + WTERMSIG(status);
			return -1;
		}
		if (w < 0)
			return -errno;
		if ((kv_now_us() - t0) / 1000 >= (__u64)ms)
			return -ETIMEDOUT;
		px_sleep_ms(5);
	}
}

/* Kill and reap a child that px_wait_timeout left running. */
static inline void px_kill_reap(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* ---- real memory pressure ------------------------------------------------ */

/*
 * A hog child that drives the guest into page reclaim without an OOM kill:
 * it allocates anonymous memory until every large zone (the DMA32/Normal
 * zones of each node, or of one node it is bound to, read from
 * /proc/zoneinfo) is below its low watermark, which wakes kswapd on those
 * nodes, and never takes the zones
 * closer than PX_HOG_SAFETY pages in all to their min watermarks (below
 * which an allocation would enter direct reclaim and, with nothing
 * reclaimable, the OOM killer).  Under pressure it keeps topping up, in
 * small steps, whatever reclaim frees (with sustain) so that kswapd keeps
 * running and calling the shrinkers.  Each page it touches starts with a
 * marker word (PX_HOG_MARK ^ page index), so a page that went from the
 * hog to someone else unscrubbed is recognisable.  oom_score_adj 1000:
 * if the OOM killer runs anyway, the hog is its victim.
 *
 * kswapd gives up on a node after 16 runs that end without balancing it
 * (pgdat->kswapd_failures; only a direct reclaim that frees LRU pages
 * revives it, and this guest has none to free), so an episode in which the
 * shrinkers cannot free enough (shrinker disabled, floor reached) leaves
 * that node without kswapd for the rest of the boot: px_pressure_str
 * reports pageoutrun, and callers check it to tell "no pressure" from "no
 * reclaim".
 */
#define PX_HOG_MARK	0x484f47214d41524bULL	/* "HOG!MARK" */
#define PX_HOG_SAFETY	(6 * 256)		/* pages: 6 MiB above the min watermarks */
#define PX_BIG_ZONE	16384			/* pages: zones under 64 MiB (DMA) do not count */

struct px_zone {
	int node;
	char name[16];
	long free, min, low, high, managed;
};

/* A whole (proc) file, read until EOF; length or -errno (-EFBIG: too long). */
static inline int px_read_all(const char *path, char *buf, size_t len)
{
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (got + 1 >= len) {
			close(fd);
			return -EFBIG;
		}
		n = read(fd, buf + got, len - 1 - got);
		if (n < 0) {
			n = -errno;
			close(fd);
			return (int)n;
		}
		if (n == 0)
			break;
		got += n;
	}
	close(fd);
	buf[got] = '\0';
	return (int)got;
}

/* Parse /proc/zoneinfo: zones with managed pages; count or -errno. */
static inline int px_read_zones(struct px_zone *z, int max)
{
	static char buf[1 << 20];
	char *line, *save = NULL;
	int n = -1, len = px_read_all("/proc/zoneinfo", buf, sizeof(buf));

	if (len < 0)
		return len;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char key[32], zname[16];
		long v;
		int node;

		if (sscanf(line, "Node %d, zone %15s", &node, zname) == 2) {
			if (n >= 0 && z[n].managed > 0)
				n++;
			else if (n < 0)
				n = 0;
			if (n >= max)
				return -E2BIG;
			memset(&z[n], 0, sizeof(z[n]));
			z[n].node = node;
			snprintf(z[n].name, sizeof(z[n].name), "%s", zname);
			continue;
		}
		if (n < 0)
			continue;
		if (sscanf(line, " pages free %ld", &v) == 1) {
			z[n].free = v;
			continue;
		}
		if (sscanf(line, " %31s %ld", key, &v) != 2)
			continue;
		if (!strcmp(key, "min"))
			z[n].min = v;
		else if (!strcmp(key, "low"))
			z[n].low = v;
		else if (!strcmp(key, "high"))
			z[n].high = v;
		else if (!strcmp(key, "managed"))
			z[n].managed = v;
	}
	if (n >= 0 && z[n].managed > 0)
		n++;
	return n < 0 ? 0 : n;
}

/* /proc/vmstat key (sum of all keys starting with key when prefix). */
static inline long long px_vmstat(const char *key, int prefix)
{
	static char buf[65536];
	char *line, *save = NULL;
	size_t klen = strlen(key);
	long long sum = 0;
	int found = 0;

	if (px_read_all("/proc/vmstat", buf, sizeof(buf)) < 0)
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, key, klen))
			continue;
		if (!prefix && line[klen] != ' ')
			continue;
		sum += strtoll(strchr(line, ' ') + 1, NULL, 10);
		found = 1;
	}
	return found ? sum : -1;
}

struct px_vmstats {
	long long pageoutrun, allocstall, slabs_scanned, pgscan_kswapd, oom_kill;
};

static inline void px_vmstats_read(struct px_vmstats *v)
{
	v->pageoutrun = px_vmstat("pageoutrun", 0);
	v->allocstall = px_vmstat("allocstall_", 1);
	v->slabs_scanned = px_vmstat("slabs_scanned", 0);
	v->pgscan_kswapd = px_vmstat("pgscan_kswapd", 0);
	v->oom_kill = px_vmstat("oom_kill", 0);
}

struct px_pressure {
	/* in */
	unsigned int hold_ms;	/* stay under pressure at least this long */
	unsigned int quiet_ms;	/* ...and until reclaimed_bytes was unchanged this long */
	unsigned int max_ms;	/* give up after this long in all */
	int sustain;		/* keep allocating what reclaim frees */
	int node;		/* bind the hog to this node; -1: all nodes */
	/* out */
	volatile int done;
	volatile int reached;	/* every large zone was below its low watermark */
	volatile __u64 ms_to_reach, ms_total;
	volatile __u64 hog_bytes;
	volatile long min_headroom;	/* pages above min, least seen (large zones) */
	volatile __u64 reclaimed0, reclaimed1;	/* sysfs reclaimed_bytes, ~0 if none */
	struct px_vmstats vm0, vm1;
	char err[160];
};

static inline void px_hog_run(struct px_pressure *pp)
{
	__u64 t0 = kv_now_us(), now, reached_at = 0, last_change, last_r;
	struct px_zone z[16];
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* 4 KiB pages only: a 2 MiB fault would overshoot the watermarks. */
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
	fd = open("/proc/self/oom_score_adj", O_WRONLY);
	if (fd < 0 || write(fd, "1000", 4) != 4) {
		snprintf(pp->err, sizeof(pp->err), "oom_score_adj: %s", strerror(errno));
		_exit(2);
	}
	close(fd);
	if (pp->node >= 0) {
		unsigned long mask = 1UL << pp->node;

		/* MPOL_BIND: only this node's zones fill, only its kswapd wakes. */
		if (syscall(SYS_set_mempolicy, 2, &mask, 8 * sizeof(mask))) {
			snprintf(pp->err, sizeof(pp->err), "set_mempolicy: %s", strerror(errno));
			_exit(5);
		}
	}
	px_vmstats_read(&pp->vm0);
	pp->reclaimed0 = sysfs_get("reclaimed_bytes");
	last_r = pp->reclaimed0;
	last_change = t0;
	pp->min_headroom = 1L << 40;

	for (;;) {
		long headroom = 0, above_low = 0, want = 0;
		int nz = px_read_zones(z, 16), i, big = 0, below = 0;
		__u64 r;

		if (nz <= 0) {
			snprintf(pp->err, sizeof(pp->err), "/proc/zoneinfo: %s",
				 nz < 0 ? strerror(-nz) : "no zones");
			_exit(3);
		}
		for (i = 0; i < nz; i++) {
			if (z[i].managed < PX_BIG_ZONE || (pp->node >= 0 && z[i].node != pp->node))
				continue;
			big++;
			below += z[i].free < z[i].low;
			headroom += z[i].free > z[i].min ? z[i].free - z[i].min : 0;
			above_low += z[i].free > z[i].low ? z[i].free - z[i].low : 0;
		}
		now = kv_now_us();
		if (pp->reached && headroom < pp->min_headroom)
			pp->min_headroom = headroom;
		if (big && below == big && !pp->reached) {
			pp->reached = 1;
			reached_at = now;
			pp->ms_to_reach = (now - t0) / 1000;
		}
		r = sysfs_get("reclaimed_bytes");
		if (r != last_r) {
			last_r = r;
			last_change = now;
		}
		if (pp->reached && (now - reached_at) / 1000 >= pp->hold_ms &&
		    (now - last_change) / 1000 >= pp->quiet_ms)
			break;
		if ((now - t0) / 1000 >= pp->max_ms)
			break;

		/*
		 * Down to just under low everywhere, then 256 KiB nudges: the
		 * allocation that crossed low took the fast path, kswapd wakes
		 * only in the slow path (and node 0's small DMA zone must be
		 * drained below its watermark plus lowmem reserve first).
		 */
		if (!pp->reached || pp->sustain ||
		    px_vmstat("pageoutrun", 0) == pp->vm0.pageoutrun) {
			want = above_low ? above_low + 64 : (pp->reached ? 64 : 0);
			if (want > headroom - PX_HOG_SAFETY)
				want = headroom - PX_HOG_SAFETY;
			if (want > 16384)
				want = 16384;	/* 64 MiB a step */
		}
		/*
		 * One zone still above low while the node's headroom is under
		 * the safety margin: the margin would stall the hog for good.
		 * 64 KiB nudges while more than 1 MiB stays above min cross low
		 * without ever reaching min (no direct reclaim, no OOM).
		 */
		if (want < 16 && !pp->reached && above_low && headroom > 256)
			want = 16;
		if (want >= 16) {
			size_t len = (size_t)want * 4096, p;
			char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

			if (m == MAP_FAILED) {
				snprintf(pp->err, sizeof(pp->err), "mmap %zu: %s", len,
					 strerror(errno));
				_exit(4);
			}
			for (p = 0; p < len; p += 4096)
				*(volatile __u64 *)(m + p) = PX_HOG_MARK ^ (pp->hog_bytes + p) / 4096;
			pp->hog_bytes += len;
		} else {
			px_sleep_ms(pp->reached ? 10 : 2);
		}
	}
	pp->ms_total = (kv_now_us() - t0) / 1000;
	pp->reclaimed1 = sysfs_get("reclaimed_bytes");
	px_vmstats_read(&pp->vm1);
	pp->done = 1;
	_exit(0);
}

/*
 * Run a hog (see px_hog_run) in a child and wait for it; pp is in shared
 * memory (px_pressure_new).  0 when it ran to its end, else -errno /
 * -ECHILD (see pp->err).
 */
static inline struct px_pressure *px_pressure_new(void)
{
	struct px_pressure *pp = mmap(NULL, sizeof(*pp), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (pp == MAP_FAILED)
		return NULL;
	memset(pp, 0, sizeof(*pp));
	return pp;
}

/*
 * /proc/sys/vm/<name>, read into old (up to len bytes) and set to val;
 * 0 when the file is not there (an older kernel: nothing to set).
 */
static inline int px_vm_sysctl(const char *name, const char *val, char *old, size_t len)
{
	char path[96];
	ssize_t n = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/sys/vm/%s", name);
	if (old) {
		fd = open(path, O_RDONLY);
		if (fd < 0)
			return 0;
		n = read(fd, old, len - 1);
		close(fd);
		old[n > 0 ? n : 0] = '\0';
	}
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return 0;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -EIO;
}

/*
 * What the hog changes while it runs, because both move free memory under
 * its margin above min:
 * - watermark_boost_factor 0: a boost raises a zone's watermarks by up to
 *   150% of high at once, after an allocation fell back to another
 *   migratetype: the 6 MiB margin became -2 MiB in the middle of a step,
 *   and the debug kernel OOM-killed the hog (min 27 MiB, boost 8 MiB);
 * - percpu_pagelist_high_fraction 1000000: from 6.7 the per-CPU free lists
 *   tune their size up to the zone's low watermark, and one refill takes
 *   that much out of the zone's free count at once; on 6.12 a node-bound
 *   hog saw 7.8 MiB above min, then an allocation found the zone below min
 *   with 26 MiB on one CPU's list, and the OOM killer ran.  A huge
 *   fraction pins every list at its floor (4 batches, about 1 MiB).
 */
static const char *const px_hog_sysctls[][2] = {
	{ "watermark_boost_factor", "0" },
	{ "percpu_pagelist_high_fraction", "1000000" },
};
#define PX_HOG_SYSCTLS	(sizeof(px_hog_sysctls) / sizeof(px_hog_sysctls[0]))

static inline void px_hog_sysctls_restore(char old[][32])
{
	size_t i;

	for (i = 0; i < PX_HOG_SYSCTLS; i++)
		if (old[i][0])
			px_vm_sysctl(px_hog_sysctls[i][0], old[i], NULL, 0);
}

/*
 * After an OOM kill of the hog, the kernel's own account of the zones
 * (free, min, free_pcp per zone): the lines of the last OOM report that
 * name a node or the totals, so that a failure says where memory went.
 */
static inline void px_print_oom_report(void)
{
	static char log[1 << 18];
	char *line, *save = NULL, *last = NULL;
	int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, log, sizeof(log) - 1);

	if (n <= 0)
		return;
	log[n] = '\0';
	for (line = log; (line = strstr(line, "invoked oom-killer")); line++)
		last = line;
	if (!last)
		return;
	for (line = strtok_r(last, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strstr(line, "invoked oom-killer") || strstr(line, "Node ") ||
		    strstr(line, " free:") || strstr(line, "oom-kill:"))
			ksft_print_msg("oom report: %s\n", line);
		if (strstr(line, "Killed process"))
			break;
	}
}

static inline int px_pressure_run(struct px_pressure *pp)
{
	char old[PX_HOG_SYSCTLS][32];
	size_t i;
	pid_t pid;
	int st;

	pp->done = 0;
	pp->reached = 0;
	pp->hog_bytes = 0;
	pp->err[0] = '\0';
	memset(old, 0, sizeof(old));
	for (i = 0; i < PX_HOG_SYSCTLS; i++) {
		if (px_vm_sysctl(px_hog_sysctls[i][0], px_hog_sysctls[i][1], old[i],
				 sizeof(old[i]))) {
			snprintf(pp->err, sizeof(pp->err), "cannot set vm.%s to %s",
				 px_hog_sysctls[i][0], px_hog_sysctls[i][1]);
			px_hog_sysctls_restore(old);
			return -EIO;
		}
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		st = -errno;
		px_hog_sysctls_restore(old);
		return st;
	}
	if (pid == 0)
		px_hog_run(pp);
	st = px_wait_timeout(pid, pp->max_ms + 60000);
	px_hog_sysctls_restore(old);
	if (st == -ETIMEDOUT) {
		px_kill_reap(pid);
		snprintf(pp->err, sizeof(pp->err), "hog did not finish");
		return -ETIMEDOUT;
	}
	if (st != 0 || !pp->done) {
		/* the hog read none: the counters as they are after its end */
		px_vmstats_read(&pp->vm1);
		pp->reclaimed1 = sysfs_get("reclaimed_bytes");
		if (st == 1000 + SIGKILL)
			px_print_oom_report();
		if (!pp->err[0])
			snprintf(pp->err, sizeof(pp->err), "hog ended with %s %d%s",
				 st >= 1000 ? "signal" : "status", st >= 1000 ? st - 1000 : st,
				 st == 1000 + SIGKILL ? " (the OOM killer?)" : "");
		return -ECHILD;
	}
	return 0;
}

static inline void px_pressure_str(char *buf, size_t len, const struct px_pressure *pp)
{
	snprintf(buf, len,
		 "hog %llu MiB (node %d), pressure %s after %llu ms, %llu ms in all, least headroom above min %ld pages; "
		 "vmstat: pageoutrun +%lld allocstall +%lld slabs_scanned +%lld pgscan_kswapd +%lld oom_kill +%lld; "
		 "reclaimed_bytes %llu -> %llu",
		 (unsigned long long)(pp->hog_bytes >> 20), pp->node, pp->reached ? "reached" : "NOT reached",
		 (unsigned long long)pp->ms_to_reach, (unsigned long long)pp->ms_total,
		 pp->reached ? pp->min_headroom : -1L,
		 pp->vm1.pageoutrun - pp->vm0.pageoutrun, pp->vm1.allocstall - pp->vm0.allocstall,
		 pp->vm1.slabs_scanned - pp->vm0.slabs_scanned,
		 pp->vm1.pgscan_kswapd - pp->vm0.pgscan_kswapd,
		 pp->vm1.oom_kill - pp->vm0.oom_kill,
		 (unsigned long long)pp->reclaimed0, (unsigned long long)pp->reclaimed1);
}

#endif /* KVPOOL_PREFIX_UTIL_H */
