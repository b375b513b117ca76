// SPDX-License-Identifier: MIT
/*
 * tier/tier_ssd.c: the SSD tier.  Below opts->dir, one directory per space
 * identity (its hex) holds:
 *
 *   lock    flock()ed by the one handle using the directory
 *   key     32 random bytes: the tenant's tier key when opts->key_file is
 *           NULL (tier_mac.h), made at the first open
 *   data    nr_slots slots of block_bytes, read and written with O_DIRECT
 *           through io_uring, straight between the space's pages and the file
 *   stats   the tier's figures as key=value lines (pid, open, updated, then
 *           the fields of struct kvrt_tier_stats), rewritten at most once a
 *           second and at open and close, for kvctl tiers
 *   index   a log: a 96-byte head (with the key's check), then 96-byte
 *           records, PUT (slot holds hash, data checksum, nonce, tag,
 *           priority) and DEL (slot holds nothing); each record carries
 *           its own checksum, and replay stops at the first that fails it
 *           (a torn tail).  Rewritten compact at open and when it grows
 *           past twice the slots (a new file renamed over it).  An index
 *           of version 1 (before the tags) or of another key is replayed
 *           as empty and rewritten.
 *
 * Trust: the root must be the caller's or root's, sticky if others may
 * write it (they could rename the identity directory away); the identity
 * directory and every file in it must be the caller's with no group or
 * other bits, not symlinks, and the files regular with one link.  What is
 * not is refused with -EPERM (-ELOOP a symlink, -EINVAL not a regular
 * file) and logged; temporary files are removed, then made O_EXCL.  A
 * block is trusted only if its tag, made with the tenant's key over its
 * bytes, identity, hash and nonce, holds.
 *
 * The order that makes a crash harmless (Documentation/libkvrt.rst, Tiers):
 * a slot's DEL is durable before the slot is overwritten; its data is
 * durable (fdatasync) before its PUT is written.  Every read is checked
 * against the PUT's checksum all the same: a block that fails is a miss
 * and is dropped; so is one whose tag fails.
 *
 * Registered buffers are not used: they would pin the whole mapping of the
 * space (backing every block of an embedded space), and 6.1's io_uring
 * refuses file-backed memory, which a kmod space's mapping is, with
 * -EOPNOTSUPP.  Each O_DIRECT request pins its own pages while it runs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>
#include <openssl/crypto.h>
#include <xxhash.h>

#include "ssd_index.h"
#include "tier.h"
#include "tier_mac.h"

#define SSD_HEAD_MAGIC "KVTIER\0\1"
#define SSD_VERSION 2		/* 1: before the tags (0.6, 0.7) */
#define SSD_REC_MAGIC 0x5253564bU	/* "KVSR" */
#define SSD_PUT 1
#define SSD_DEL 2
#define SSD_DEFAULT_QD 64

struct ssd_head {
	char magic[8];
	uint32_t version;
	uint32_t reserved;
	uint64_t block_bytes;
	uint8_t identity[32];
	uint8_t key_check[16];	/* key_check(): written under another key, not replayed */
	uint8_t reserved2[16];
	uint64_t sum;		/* XXH3-64 of the bytes before */
};

struct ssd_rec {
	uint32_t magic;
	uint8_t type;
	uint8_t prio;
	uint16_t reserved;
	uint32_t slot;
	uint32_t reserved2;
	uint64_t data_sum;
	uint8_t hash[KVRT_HASH_BYTES];
	uint8_t nonce[KVRT_TIER_NONCE_BYTES];
	uint8_t tag[KVRT_TIER_TAG_BYTES];
	uint64_t sum;		/* XXH3-64 of the bytes before */
};

_Static_assert(sizeof(struct ssd_head) == 96, "ssd_head is 96 bytes");
_Static_assert(sizeof(struct ssd_rec) == 96, "ssd_rec is 96 bytes");
_Static_assert(KVRT_HASH_BYTES == 32, "ssd_rec's layout");

struct ssd_tier {
	struct kvrt_tier t;
	pthread_mutex_t lock;
	struct ssd_index x;
	struct io_uring ring;
	int dirfd, lockfd, datafd, logfd;
	uint32_t qd;
	uint64_t block_bytes;
	uint64_t log_records;	/* records in the index file since its head */
	pid_t opener;		/* a fork()ed child's close leaves the stats file alone */
	uint8_t identity[32];
	uint8_t key[KVRT_TIER_KEY_BYTES];
	uint8_t key_check[16];
	struct kvrt_tier_stats st;	/* the counters; the rest filled on demand */
	time_t stats_at;		/* when the stats file was last written */
	/* A batch's scratch (one allocation), grown as needed. */
	uint32_t cap;
	void *scratch;
	uint32_t *slots;
	int *res;
	char **bufs;
	struct ssd_rec *recs;
};

static struct ssd_tier *ssd_of(struct kvrt_tier *t)
{
	return kvrt_container_of(t, struct ssd_tier, t);
}

static void rec_fill(struct ssd_rec *r, uint8_t type, uint32_t slot, const struct ssd_slot *s)
{
	memset(r, 0, sizeof(*r));
	r->magic = SSD_REC_MAGIC;
	r->type = type;
	r->slot = slot;
	if (s) {
		r->prio = s->prio;
		r->data_sum = s->sum;
		memcpy(r->hash, s->hash, KVRT_HASH_BYTES);
		memcpy(r->nonce, s->nonce, sizeof(r->nonce));
		memcpy(r->tag, s->tag, sizeof(r->tag));
	}
	r->sum = XXH3_64bits(r, offsetof(struct ssd_rec, sum));
}

static bool rec_valid(const struct ssd_rec *r)
{
	return r->magic == SSD_REC_MAGIC && (r->type == SSD_PUT || r->type == SSD_DEL) &&
	       r->prio <= KVRT_PRIO_MAX && r->sum == XXH3_64bits(r, offsetof(struct ssd_rec, sum));
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * name in the identity directory, opened without following a symlink or
 * waiting on a FIFO, and used only if it is the tier's own: a regular file
 * of the caller's, no group or other bits, one link (through a hard link
 * the tier would write another file).  -ELOOP a symlink, -EINVAL not a
 * regular file, -EPERM the rest; logged.
 */
static int open_own(struct ssd_tier *t, const char *name, int flags)
{
	const char *why = NULL;
	struct stat st;
	int fd, ret = 0;

	fd = openat(t->dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT && !(flags & O_CREAT))
			return ret;	/* absent: the caller's case */
		why = ret == -ELOOP ? "a symlink" : ret == -EINVAL && (flags & O_DIRECT) ?
		      "the file system refuses O_DIRECT" : strerror(-ret);
		goto out;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		why = strerror(-ret);
	} else if (!S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		why = "not a regular file";
	} else if (st.st_uid != geteuid()) {
		ret = -EPERM;
		why = "owned by another user";
	} else if (st.st_mode & 077) {
		ret = -EPERM;
		why = "group or others have permissions on it";
	} else if (st.st_nlink != 1) {
		ret = -EPERM;
		why = "it has other hard links";
	} else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		ret = -errno;	/* io_uring would fail reads with -EAGAIN on O_NONBLOCK */
		why = strerror(-ret);
	}
	if (ret)
		close(fd);
out:
	if (ret)
		kvrt_log(t->t.space->k, KVRT_LOG_ERR, "ssd tier: %s in the identity directory: %s; "
			 "refused", name, why);
	return ret ? ret : fd;
}

/* A temporary file, new: whatever had its name (a leftover, a symlink) is removed first. */
static int open_new(struct ssd_tier *t, const char *name)
{
	if (unlinkat(t->dirfd, name, 0) && errno != ENOENT)
		return -errno;
	return open_own(t, name, O_WRONLY | O_CREAT | O_EXCL);
}

/*
 * Rename an open_new() file, written with result ret, over name and make
 * the rename durable; on any failure the temporary goes, name is untouched.
 */
static int install_new(struct ssd_tier *t, int ret, const char *tmp, const char *name)
{
	if (!ret && renameat(t->dirfd, tmp, t->dirfd, name))
		ret = -errno;
	if (!ret && fsync(t->dirfd))
		ret = -errno;
	if (ret)
		unlinkat(t->dirfd, tmp, 0);
	return ret;
}

/* The tag of nothing under the key: what the index's head says it was written with. */
static int key_check(const uint8_t key[KVRT_TIER_KEY_BYTES], const uint8_t identity[32],
		     uint8_t out[KVRT_TIER_TAG_BYTES])
{
	static const uint8_t zero[KVRT_HASH_BYTES];
	struct kvrt_tier_bind b = { .identity = identity, .hash = zero, .nonce = zero };

	return kvrt_tier_mac(key, &b, "", 0, out);
}

/* Append n records to the index and make them durable. */
static int log_append(struct ssd_tier *t, const struct ssd_rec *r, uint32_t n)
{
	int ret;

	if (!n)
		return 0;
	ret = write_all(t->logfd, r, (size_t)n * sizeof(*r));
	if (!ret && fdatasync(t->logfd))
		ret = -errno;
	if (!ret)
		t->log_records += n;
	return ret;
}

/*
 * The index rewritten: the head, then one PUT per held slot, oldest first
 * within each priority (a replay rebuilds the same order); a new file,
 * durable, renamed over the old one.  logfd then appends to it.
 */
static int log_compact(struct ssd_tier *t)
{
	struct ssd_head h = { .version = SSD_VERSION, .block_bytes = t->block_bytes };
	struct ssd_rec r;
	unsigned int p;
	uint32_t i;
	int fd, ret = 0;
	FILE *f;

	memcpy(h.magic, SSD_HEAD_MAGIC, sizeof(h.magic));
	memcpy(h.identity, t->identity, sizeof(h.identity));
	memcpy(h.key_check, t->key_check, sizeof(h.key_check));
	h.sum = XXH3_64bits(&h, offsetof(struct ssd_head, sum));
	fd = open_new(t, "index.new");
	if (fd < 0)
		return fd;
	f = fdopen(fd, "w");
	if (!f) {
		ret = -errno;
		close(fd);
		return ret;
	}
	fwrite(&h, sizeof(h), 1, f);
	for (p = 0; p <= KVRT_PRIO_MAX; p++)
		for (i = t->x.oldest[p]; i != SSD_NONE; i = t->x.slots[i].next) {
			rec_fill(&r, SSD_PUT, i, &t->x.slots[i]);
			fwrite(&r, sizeof(r), 1, f);
		}
	errno = 0;
	if (fflush(f) || ferror(f) || fdatasync(fd))
		ret = errno ? -errno : -EIO;
	if (fclose(f) && !ret)
		ret = -errno;
	ret = install_new(t, ret, "index.new", "index");
	if (ret)
		return ret;
	fd = open_own(t, "index", O_WRONLY | O_APPEND);
	if (fd < 0)
		return fd;
	if (t->logfd >= 0)
		close(t->logfd);
	t->logfd = fd;
	t->log_records = t->x.nr_used;
	return 0;
}

/*
 * The index's records into t->x; a wrong head or a torn tail ends the
 * replay.  An index that is not the tier's own file is refused.
 */
static int log_replay(struct ssd_tier *t)
{
	struct ssd_head h;
	struct ssd_rec r;
	uint64_t skipped = 0;
	uint32_t old;
	size_t got;
	FILE *f;
	int fd;

	fd = open_own(t, "index", O_RDONLY);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	/* Version 1's head is shorter: its magic and version are enough to say so. */
	got = fread(&h, 1, sizeof(h), f);
	if (got >= offsetof(struct ssd_head, reserved) &&
	    !memcmp(h.magic, SSD_HEAD_MAGIC, sizeof(h.magic)) && h.version == 1) {
		kvrt_log(t->t.space->k, KVRT_LOG_INFO,
			 "ssd tier: the index is of version 1 (no tags): starting empty");
		fclose(f);
		return 0;
	}
	if (got != sizeof(h) || memcmp(h.magic, SSD_HEAD_MAGIC, sizeof(h.magic)) ||
	    h.version != SSD_VERSION || h.block_bytes != t->block_bytes ||
	    memcmp(h.identity, t->identity, sizeof(h.identity)) ||
	    h.sum != XXH3_64bits(&h, offsetof(struct ssd_head, sum))) {
		kvrt_log(t->t.space->k, KVRT_LOG_WARNING,
			 "ssd tier: the index has no valid head: starting empty");
		fclose(f);
		return 0;
	}
	if (CRYPTO_memcmp(h.key_check, t->key_check, sizeof(h.key_check))) {
		kvrt_log(t->t.space->k, KVRT_LOG_WARNING,
			 "ssd tier: the index was written with another key: starting empty");
		fclose(f);
		return 0;
	}
	while (fread(&r, sizeof(r), 1, f) == 1 && rec_valid(&r)) {
		if (r.slot >= t->x.nr_slots) {
			skipped++;	/* the tier is smaller than when it was written */
			continue;
		}
		if (t->x.slots[r.slot].used)
			ssd_index_remove(&t->x, r.slot);
		if (r.type == SSD_DEL)
			continue;
		old = ssd_index_find(&t->x, r.hash);
		if (old != SSD_NONE)
			ssd_index_remove(&t->x, old);
		ssd_index_insert(&t->x, r.slot, r.hash, r.data_sum, r.prio);
		memcpy(t->x.slots[r.slot].nonce, r.nonce, sizeof(r.nonce));
		memcpy(t->x.slots[r.slot].tag, r.tag, sizeof(r.tag));
	}
	fclose(f);
	ssd_index_rebuild_free(&t->x);
	if (skipped)
		kvrt_log(t->t.space->k, KVRT_LOG_INFO,
			 "ssd tier: %llu records beyond the capacity dropped",
			 (unsigned long long)skipped);
	return 0;
}

/* Room for a batch of n: one allocation, the widest arrays first; contents not kept. */
static int scratch_grow(struct ssd_tier *t, uint32_t n)
{
	size_t recs = n * sizeof(*t->recs), bufs = n * sizeof(*t->bufs);
	char *p;

	if (n <= t->cap)
		return 0;
	p = malloc(recs + bufs + n * (sizeof(*t->slots) + sizeof(*t->res)));
	if (!p)
		return -ENOMEM;
	free(t->scratch);
	t->scratch = p;
	t->recs = (struct ssd_rec *)p;
	t->bufs = (char **)(p + recs);
	t->slots = (uint32_t *)(p + recs + bufs);
	t->res = (int *)(t->slots + n);
	t->cap = n;
	return 0;
}

/*
 * n requests of block_bytes, slot t->slots[i] <-> t->bufs[i], queue_depth at
 * a time; t->res[i] gets each one's result.  Every request has completed
 * when this returns (the kernel writes into the buffers until then).
 */
static void ssd_rw(struct ssd_tier *t, bool write, uint32_t n)
{
	uint32_t queued = 0, done = 0, inflight = 0, hard = 0;
	struct io_uring_cqe *cqe;
	int ret;

	while (done < n) {
		while (queued < n && inflight < t->qd) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
			off_t off = (off_t)t->slots[queued] * (off_t)t->block_bytes;

			if (!sqe)
				break;
			if (write)
				io_uring_prep_write(sqe, t->datafd, t->bufs[queued],
						    (unsigned int)t->block_bytes, off);
			else
				io_uring_prep_read(sqe, t->datafd, t->bufs[queued],
						   (unsigned int)t->block_bytes, off);
			sqe->user_data = queued;
			queued++;
			inflight++;
		}
		ret = io_uring_submit_and_wait(&t->ring, 1);
		/* A ring that keeps refusing io_uring_enter: what is left fails. */
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY && ++hard > 3) {
			for (; queued < n; queued++)
				t->res[queued] = ret;
			while (inflight && !io_uring_wait_cqe(&t->ring, &cqe)) {
				t->res[cqe->user_data] = cqe->res;
				io_uring_cqe_seen(&t->ring, cqe);
				inflight--;
			}
			return;
		}
		while (io_uring_peek_cqe(&t->ring, &cqe) == 0) {
			t->res[cqe->user_data] = cqe->res;
			io_uring_cqe_seen(&t->ring, cqe);
			done++;
			inflight--;
		}
	}
}

static void ssd_stats_locked(struct ssd_tier *t, struct kvrt_tier_stats *st)
{
	*st = t->st;
	st->kind = KVRT_TIER_SSD;
	st->capacity_bytes = (uint64_t)t->x.nr_slots * t->block_bytes;
	st->blocks = t->x.nr_used;
	st->used_bytes = (uint64_t)t->x.nr_used * t->block_bytes;
}

/*
 * The figures, at the end of each op: shown to kvrt_tier_stats(), and the
 * stats file for kvctl, written whole and renamed over the old one (a
 * reader never sees half of it) at most once a second unless forced.  Not
 * synced: it is advisory, and a crash only leaves it older.
 */
static void ssd_publish_stats(struct ssd_tier *t, bool open, bool force)
{
	struct kvrt_tier_stats st;
	time_t now = time(NULL);
	char buf[1024];
	int fd, len;

	ssd_stats_locked(t, &st);
	kvrt_tier_show_stats(&t->t, &st);
	if (!force && now == t->stats_at)
		return;
	t->stats_at = now;
	if (t->t.wb)	/* its lock is taken alone, or inside this tier's */
		kvrt_writeback_stats(&t->t, &st);
	len = snprintf(buf, sizeof(buf),
		       "kind=ssd\npid=%d\nopen=%d\nupdated=%lld\ncapacity_bytes=%llu\n"
		       "used_bytes=%llu\nblocks=%llu\nhits=%llu\nmisses=%llu\nstores=%llu\n"
		       "store_skips=%llu\nread_bytes=%llu\nwrite_bytes=%llu\nevictions=%llu\n"
		       "checksum_errors=%llu\nio_errors=%llu\nqueued=%llu\ndeferred=%llu\n",
		       (int)getpid(), open,
		       (long long)now, (unsigned long long)st.capacity_bytes,
		       (unsigned long long)st.used_bytes, (unsigned long long)st.blocks,
		       (unsigned long long)st.hits, (unsigned long long)st.misses,
		       (unsigned long long)st.stores, (unsigned long long)st.store_skips,
		       (unsigned long long)st.read_bytes, (unsigned long long)st.write_bytes,
		       (unsigned long long)st.evictions, (unsigned long long)st.checksum_errors,
		       (unsigned long long)st.io_errors, (unsigned long long)st.queued,
		       (unsigned long long)st.deferred);
	fd = open_new(t, "stats.new");
	if (fd < 0)
		return;
	if (write_all(fd, buf, (size_t)len) || renameat(t->dirfd, "stats.new", t->dirfd, "stats"))
		unlinkat(t->dirfd, "stats.new", 0);
	close(fd);
}

static uint32_t ssd_present(struct kvrt_tier *tier, uint32_t count,
			    const uint8_t (*hashes)[KVRT_HASH_BYTES])
{
	struct ssd_tier *t = ssd_of(tier);
	uint32_t i;

	pthread_mutex_lock(&t->lock);
	for (i = 0; i < count && ssd_index_find(&t->x, hashes[i]) != SSD_NONE; i++)
		;
	if (!i)
		t->st.misses++;
	ssd_publish_stats(t, true, false);
	pthread_mutex_unlock(&t->lock);
	return i;
}

/* A slot whose data failed: out of the index, its DEL appended (not synced: see top). */
static void ssd_drop(struct ssd_tier *t, uint32_t slot)
{
	struct ssd_rec r;

	ssd_index_remove(&t->x, slot);
	ssd_index_put_free(&t->x, slot);
	rec_fill(&r, SSD_DEL, slot, NULL);
	if (!write_all(t->logfd, &r, sizeof(r)))
		t->log_records++;
}

static uint32_t ssd_fetch(struct kvrt_tier *tier, uint32_t count,
			  const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids)
{
	struct ssd_tier *t = ssd_of(tier);
	const char *why = NULL;
	uint32_t n, i;

	pthread_mutex_lock(&t->lock);
	if (scratch_grow(t, count)) {
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	for (n = 0; n < count; n++) {
		t->slots[n] = ssd_index_find(&t->x, hashes[n]);
		if (t->slots[n] == SSD_NONE)
			break;
		t->bufs[n] = kvrt_block_addr(tier->space, ids[n]);
	}
	ssd_rw(t, false, n);
	for (i = 0; i < n; i++) {
		const struct ssd_slot *s = &t->x.slots[t->slots[i]];
		struct kvrt_tier_bind b = { .identity = t->identity, .hash = s->hash,
					    .nonce = s->nonce };

		if (t->res[i] != (int)t->block_bytes) {
			t->st.io_errors++;
			why = t->res[i] < 0 ? strerror(-t->res[i]) : "short read";
			break;
		}
		t->st.read_bytes += t->block_bytes;
		if (XXH3_64bits(t->bufs[i], t->block_bytes) != s->sum) {
			t->st.checksum_errors++;
			why = "checksum mismatch";
			break;
		}
		/* The checksum is unkeyed: only the tag says the tenant's key wrote these bytes. */
		if (!kvrt_tier_mac_ok(t->key, &b, t->bufs[i], t->block_bytes, s->tag)) {
			t->st.checksum_errors++;
			why = "tag mismatch (not written with this key)";
			break;
		}
		ssd_index_touch(&t->x, t->slots[i]);
	}
	if (i < n) {
		kvrt_log(tier->space->k, KVRT_LOG_WARNING, "ssd tier: slot %u: %s; dropped",
			 t->slots[i], why);
		ssd_drop(t, t->slots[i]);
	}
	t->st.hits += i;
	ssd_publish_stats(t, true, false);
	pthread_mutex_unlock(&t->lock);
	return i;
}

/* Undo a store's pending slots: out of the index and free again. */
static void ssd_unwind(struct ssd_tier *t, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (t->slots[i] != SSD_NONE && t->x.slots[t->slots[i]].pending) {
			ssd_index_remove(&t->x, t->slots[i]);
			ssd_index_put_free(&t->x, t->slots[i]);
		}
}

static int ssd_store_locked(struct ssd_tier *t, uint32_t count,
			    const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids,
			    const uint32_t *prio)
{
	uint32_t i, n = 0, ndel = 0, slot, victim, ok;
	int ret;

	/* recs: the PUTs at [0, count), the victims' DELs at [count, 2 count). */
	ret = scratch_grow(t, 2 * count);
	if (ret)
		return ret;
	for (i = 0; i < count; i++) {
		uint8_t nonce[KVRT_TIER_NONCE_BYTES], tag[KVRT_TIER_TAG_BYTES];
		struct kvrt_tier_bind b = { .identity = t->identity, .hash = hashes[i],
					    .nonce = nonce };
		void *bytes;

		slot = ssd_index_find(&t->x, hashes[i]);
		if (slot != SSD_NONE) {
			/* Held, or earlier in this batch. */
			if (!t->x.slots[slot].pending) {
				ssd_index_touch(&t->x, slot);
				t->st.store_skips++;
			}
			continue;
		}
		/* Sealed before a slot is taken: a failure here leaves the index as it was. */
		bytes = kvrt_block_addr(t->t.space, ids[i]);
		ret = kvrt_tier_nonce(nonce);
		if (!ret)
			ret = kvrt_tier_mac(t->key, &b, bytes, t->block_bytes, tag);
		if (ret)
			break;
		slot = ssd_index_take_free(&t->x);
		if (slot == SSD_NONE) {
			victim = ssd_index_victim(&t->x);
			if (victim == SSD_NONE)
				break;	/* every slot is this batch's: the rest do not fit */
			ssd_index_remove(&t->x, victim);
			rec_fill(&t->recs[count + ndel], SSD_DEL, victim, NULL);
			ndel++;
			t->st.evictions++;
			slot = victim;
		}
		t->bufs[n] = bytes;
		ssd_index_insert(&t->x, slot, hashes[i], XXH3_64bits(t->bufs[n], t->block_bytes),
				 (uint8_t)(prio ? prio[i] : KVRT_PRIO_DEFAULT));
		memcpy(t->x.slots[slot].nonce, nonce, sizeof(nonce));
		memcpy(t->x.slots[slot].tag, tag, sizeof(tag));
		t->x.slots[slot].pending = 1;
		t->slots[n++] = slot;
	}
	if (ret)
		goto fail;
	if (!n)
		return 0;
	/* The victims' DELs durable before their slots are overwritten. */
	ret = log_append(t, &t->recs[count], ndel);
	if (ret)
		goto fail;
	ssd_rw(t, true, n);
	for (i = 0, ok = 0; i < n; i++) {
		if (t->res[i] != (int)t->block_bytes) {
			t->st.io_errors++;
			ret = -EIO;
			continue;
		}
		t->st.write_bytes += t->block_bytes;
		rec_fill(&t->recs[ok++], SSD_PUT, t->slots[i], &t->x.slots[t->slots[i]]);
	}
	if (ret)
		goto fail;
	if (fdatasync(t->datafd)) {
		ret = -EIO;
		goto fail;
	}
	ret = log_append(t, t->recs, ok);
	if (ret)
		goto fail;
	for (i = 0; i < n; i++)
		t->x.slots[t->slots[i]].pending = 0;
	t->st.stores += n;
	if (t->log_records > 2ULL * t->x.nr_slots + 1024 && log_compact(t))
		kvrt_log(t->t.space->k, KVRT_LOG_WARNING, "ssd tier: index compaction failed");
	return (int)n;
fail:
	kvrt_log(t->t.space->k, KVRT_LOG_WARNING, "ssd tier: store of %u blocks failed: %s", n,
		 strerror(-ret));
	ssd_unwind(t, n);
	return ret == -ENOMEM ? ret : -EIO;
}

static int ssd_store(struct kvrt_tier *tier, uint32_t count,
		     const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *ids,
		     const uint32_t *prio)
{
	struct ssd_tier *t = ssd_of(tier);
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = ssd_store_locked(t, count, hashes, ids, prio);
	ssd_publish_stats(t, true, false);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

static void ssd_close(struct kvrt_tier *tier)
{
	struct ssd_tier *t = ssd_of(tier);

	if (t->logfd >= 0 && t->opener == getpid())
		ssd_publish_stats(t, false, true);	/* opened whole: its last figures */
	if (t->ring.ring_fd > 0)
		io_uring_queue_exit(&t->ring);
	if (t->logfd >= 0)
		close(t->logfd);
	if (t->datafd >= 0)
		close(t->datafd);
	if (t->lockfd >= 0)
		close(t->lockfd);	/* and the flock with it */
	if (t->dirfd >= 0)
		close(t->dirfd);
	ssd_index_destroy(&t->x);
	OPENSSL_cleanse(t->key, sizeof(t->key));
	pthread_mutex_destroy(&t->lock);
	kvrt_tier_common_destroy(&t->t);
	free(t->scratch);
	free(t);
}

static const struct kvrt_tier_ops ssd_ops = {
	.present = ssd_present,
	.fetch = ssd_fetch,
	.store = ssd_store,
	.close = ssd_close,
};

/*
 * The root the caller names, created 0700 when absent (its path is the
 * caller's: symlinks are followed).  Whoever may write it may rename what
 * is below it, so it must be the caller's or root's, and sticky when group
 * or others may write it (as /tmp: only an entry's owner renames it).
 * An O_DIRECTORY fd, or -EPERM (logged).
 */
static int root_dir(struct ssd_tier *t, const char *dir)
{
	const char *why = NULL;
	struct stat st;
	int fd, ret;

	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	fd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0)
		why = "owned by another user";
	else if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
		why = "group or others may write it and it is not sticky (chmod +t)";
	if (why) {
		kvrt_log(t->t.space->k, KVRT_LOG_ERR, "ssd tier: %s: %s; refused", dir, why);
		close(fd);
		return -EPERM;
	}
	return fd;
}

/*
 * root/<identity in hex>, created 0700 when absent; an O_DIRECTORY fd of
 * it only if it is the caller's with no group or other bits: anyone else
 * who can write it could forge or redirect what the tier reads and
 * writes, and the blocks are the tenant's prompts.  -ELOOP a symlink,
 * -EPERM (logged).
 */
static int identity_dir(struct ssd_tier *t, int root)
{
	const char *why = NULL;
	struct stat st;
	char sub[65];
	int fd, i, ret;

	for (i = 0; i < 32; i++)
		snprintf(sub + 2 * i, 3, "%02x", t->identity[i]);
	if (mkdirat(root, sub, 0700) && errno != EEXIST)
		return -errno;
	fd = openat(root, sub, O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		/* O_DIRECTORY answers a symlink with -ENOTDIR. */
		if (ret == -ENOTDIR && !fstatat(root, sub, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISLNK(st.st_mode)) {
			ret = -ELOOP;
			kvrt_log(t->t.space->k, KVRT_LOG_ERR,
				 "ssd tier: identity directory %s is a symlink; refused", sub);
		}
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	if (st.st_uid != geteuid())
		why = "owned by another user (remove it, or use a root others cannot write)";
	else if (st.st_mode & 077)
		why = "group or others have permissions on it (chmod 700)";
	if (why) {
		kvrt_log(t->t.space->k, KVRT_LOG_ERR, "ssd tier: identity directory %s: %s; refused",
			 sub, why);
		close(fd);
		return -EPERM;
	}
	return fd;
}

/*
 * The tenant's key when no key_file is given: the directory's key file,
 * made at the first open as key.new renamed into place (a crash leaves no
 * half key).  Under the lock: no other opener races to make it.
 */
static int ssd_dir_key(struct ssd_tier *t)
{
	int fd, ret;

	fd = open_own(t, "key", O_RDONLY);
	if (fd == -ENOENT) {
		fd = open_new(t, "key.new");
		if (fd < 0)
			return fd;
		ret = kvrt_tier_key_write(fd);
		close(fd);
		ret = install_new(t, ret, "key.new", "key");
		if (ret)
			return ret;
		fd = open_own(t, "key", O_RDONLY);
	}
	if (fd < 0)
		return fd;
	ret = kvrt_tier_key_from_fd(fd, t->key);
	close(fd);
	if (ret)
		kvrt_log(t->t.space->k, KVRT_LOG_ERR, "ssd tier: key in the identity directory: %s",
			 strerror(-ret));
	return ret;
}

static int ssd_files(struct ssd_tier *t)
{
	off_t size = (off_t)t->x.nr_slots * (off_t)t->block_bytes;
	int ret;

	t->lockfd = open_own(t, "lock", O_RDWR | O_CREAT);
	if (t->lockfd < 0)
		return t->lockfd;
	if (flock(t->lockfd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	t->datafd = open_own(t, "data", O_RDWR | O_CREAT | O_DIRECT);
	if (t->datafd < 0)
		return t->datafd;
	ret = fallocate(t->datafd, 0, 0, size) ? -errno : 0;
	if (ret == -EOPNOTSUPP)
		ret = ftruncate(t->datafd, size) ? -errno : 0;
	return ret;
}

int kvrt_ssd_open(struct kvrt_space *s, const struct kvrt_tier_ssd_opts *o,
		  const uint8_t identity[32], struct kvrt_tier **out)
{
	struct ssd_tier *t = calloc(1, sizeof(*t));
	struct stat st;
	int ret, root;

	if (!t)
		return -ENOMEM;
	t->t.ops = &ssd_ops;
	t->t.space = s;
	t->dirfd = t->lockfd = t->datafd = t->logfd = -1;
	t->ring.ring_fd = -1;
	t->block_bytes = s->block_bytes;
	t->qd = o->queue_depth ? o->queue_depth : SSD_DEFAULT_QD;
	memcpy(t->identity, identity, 32);
	t->opener = getpid();
	pthread_mutex_init(&t->lock, NULL);
	kvrt_tier_common_init(&t->t);
	/* Whole: a count truncated to 32 bits would open a far smaller tier silently. */
	ret = ssd_index_init(&t->x, o->capacity_bytes / s->block_bytes);
	if (ret)
		goto fail;
	/* The caller's key first: a bad key_file changes nothing below dir. */
	if (o->key_file) {
		ret = kvrt_tier_key_from_file(o->key_file, t->key);
		if (ret) {
			kvrt_log(s->k, KVRT_LOG_ERR, "ssd tier: key_file %s: %s%s", o->key_file,
				 strerror(-ret), ret == -EPERM ? " (it must be yours, mode 0600)" :
				 ret == -ELOOP ? " (a symlink)" : "");
			goto fail;
		}
	}
	root = root_dir(t, o->dir);
	if (root < 0) {
		ret = root;
		goto fail;
	}
	t->dirfd = identity_dir(t, root);
	close(root);
	if (t->dirfd < 0) {
		ret = t->dirfd;
		goto fail;
	}
	ret = ssd_files(t);
	if (!ret && !o->key_file)
		ret = ssd_dir_key(t);
	if (!ret)
		ret = key_check(t->key, t->identity, t->key_check);
	if (ret)
		goto fail;
	ret = io_uring_queue_init(t->qd, &t->ring, 0);
	if (ret) {
		t->ring.ring_fd = -1;
		if (ret == -EPERM)
			ret = -ENOSYS;	/* kernel.io_uring_disabled, or a filter */
		goto fail;
	}
	ret = log_replay(t);
	if (!ret)
		ret = log_compact(t);
	if (ret)
		goto fail;
	/* A tier that shrank gives the space beyond its slots back. */
	if (!fstat(t->datafd, &st) && st.st_size > (off_t)t->x.nr_slots * (off_t)t->block_bytes &&
	    ftruncate(t->datafd, (off_t)t->x.nr_slots * (off_t)t->block_bytes))
		kvrt_log(s->k, KVRT_LOG_WARNING, "ssd tier: could not shrink the data file");
	ssd_publish_stats(t, true, true);
	kvrt_log(s->k, KVRT_LOG_DEBUG, "ssd tier: %u slots of %llu bytes, %u held, queue depth %u",
		 t->x.nr_slots, (unsigned long long)t->block_bytes, t->x.nr_used, t->qd);
	*out = &t->t;
	return 0;
fail:
	ssd_close(&t->t);
	return ret;
}
