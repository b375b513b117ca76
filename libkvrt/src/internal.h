/* SPDX-License-Identifier: MIT */
/*
 * internal.h: what libkvrt's source files share.  Nothing here is exported
 * (the library builds with -fvisibility=hidden and kvrt.map).
 *
 * Where things live (basenames are unique across folders):
 *   kvrt.c              the handle, backend choice, the space and prefix
 *                       cache calls, made through the backend's ops table
 *   log.c               kvrt_log(), through the caller's callback
 *   pool/               the pool backends: backend.h (the ops table),
 *                       backend_kmod.c (spaces on /dev/kvpool),
 *                       create_args.c (the create checks both make)
 *   pool/embedded/      the embedded backend (spaces in this process, on
 *                       kmod/core's kvcore), a file per concern:
 *                       emb_{pool,space,prefix,residency,events}.c as
 *                       kmod/{pool,space,prefix,residency,events}.c,
 *                       plus emb_backing.c (chunks), emb_blocks.c (per-block
 *                       side state of prefix cache and residency) and
 *                       emb_meminfo.c;
 *                       embedded.h is what they share
 *   kv/                 layouts, dtypes, append, block copies, prefix
 *                       hashing, and the bounds rule of layouts on mappings
 *   attn/               CPU paged attention, its SIMD kernels and workers
 *   seq/                sequence block tables (seq.c): per-block reference
 *                       counts, fork with copy-on-write, truncate, CSR out;
 *                       standalone, one mutex per table, taken alone
 *   tier/               tiers below the pool: tier.h (the ops table a
 *                       tier implements), tier.c (the calls: lookup
 *                       across tiers, stores by policy), writeback.c
 *                       (a write-back tier's queue and thread),
 *                       tier_ssd.c (the SSD tier: io_uring, O_DIRECT)
 *                       with ssd_index.c (its slots, LRU and index log),
 *                       tier_redis.c (the Redis Cluster tier) with
 *                       redis_cluster.c (slot routing, redirections)
 *   gpu/                the GPU backend, a file per concern: gpu_loader.c
 *                       and cuda_drv.h (libcuda), gpu.c (the handle),
 *                       gpu_register.{c,h} (host registration),
 *                       gpu_copy.c, gpu_plan.h and gpu_attn.c (planning
 *                       and attention), gpu_append.c, gpu_fatbin.S (the
 *                       embedded kernels)
 *   ../../kmod/core/    shared with the module, compiled in: kvcore.c (a
 *                       space's blocks and prefix cache) and kvrules.c
 *                       (the namespace's rules, the event-loss rule)
 *
 * Locking, outermost first:
 *   kvrt.lock         the handle's list of open spaces and, for the embedded
 *                     backend, its namespace (emb_pool's list of spaces,
 *                     their refs, owner ids).  Never held across a backend call that
 *                     may block on memory.
 *   kmod_space.ev_lock  one kmod space handle's event reads (so that a
 *                     read after poll never blocks).  Taken alone.
 *   bounds.c maps_lock  the process's list of mappings (a rwlock); a bounds
 *                     check that finds a block past what its handle saw
 *                     backed asks the backend under the read lock
 *                     (kvrt_space_info: embedded takes emb_space.lock, kmod
 *                     makes an ioctl), so no backend call may take it.
 *   emb_space.lock    one embedded space: its kvcore state, chunks and
 *                     memory counters (the kvcore contract: the caller
 *                     serialises every call on a space), and its prefix
 *                     cache side state: the clients' references,
 *                     residency records, who to tell of evictions, and
 *                     every client's event queue.
 *   emb_pool.used     an atomic, not a lock: the embedded pool cap.
 *   kvrt.qlock        the copy queue (taken alone).
 *   kvrt_copy.lock    one copy's completion (taken alone or under qlock).
 */
#ifndef KVRT_INTERNAL_H
#define KVRT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvrt.h"
#include <linux/kvpool.h>
#include "kvcore.h"
#include "kvrules.h"

#define KVRT_CHUNK_BYTES (2ULL << 20)

/*
 * A backend's space embeds struct kvrt_space, a tier struct kvrt_tier;
 * their calls get the common part and reach their own with this.
 */
#define kvrt_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define KVRT_DEFAULT_DEVICE "/dev/kvpool"

/*
 * What API 4 changed in the uAPI, as modules of API 1..3 still speak it:
 * ALLOC was _IOWR, and a residency entry was 8 bytes with no entry_bytes
 * (that word of struct kvpool_residency was reserved, 0).  The kmod
 * backend uses these with older modules.
 */
#define KVPOOL_IOC_ALLOC_API3	_IOWR(KVPOOL_IOC_MAGIC, 0x02, struct kvpool_blocks)
struct kvpool_residency_entry_api3 {
	__u32 block;
	__u32 gpu_block;
};

struct copy_job;
struct kvrt_backend_ops;

struct kvrt {
	const struct kvrt_backend_ops *ops;	/* the chosen backend (pool/backend.h) */
	/*
	 * The backend's own part, which its probe allocates and its close
	 * frees: struct kmod_pool (pool/backend_kmod.c) or struct emb_pool
	 * (pool/embedded/embedded.h).
	 */
	void *pool;
	enum kvrt_backend backend;		/* ops->backend */
	uint32_t flags;			/* KVRT_OPEN_* */
	char info[320];			/* kvrt_backend_info() */
	char device[256];
	uint64_t features;		/* KVPOOL_FEAT_* the backend has */
	uint32_t page_size;

	kvrt_log_fn log;
	void *log_arg;
	int log_level;

	pthread_mutex_t lock;
	struct kvrt_space *spaces;	/* open handles (kvrt.lock) */

	/* The copy thread: started on the first async copy. */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct copy_job *qhead, *qtail;
	bool worker_started;
	bool stopping;
	pthread_t worker;
};

/*
 * One client in a space: what every backend's space has.  A backend
 * embeds it in its own (struct kmod_space, struct emb_client) and reaches
 * that with kvrt_container_of (pool/backend.h).
 */
struct kvrt_space {
	struct kvrt *k;
	struct kvrt_space *prev, *next;	/* kvrt.spaces */
	struct kvrt_space *map_prev, *map_next;	/* bounds.c's list of mappings */
	void *base;
	uint64_t block_bytes;
	uint64_t nr_blocks;
	uint64_t map_bytes;
	/*
	 * Bytes from base in whole pool blocks that have memory behind them,
	 * as the backend last said (kvrt_space_backed()): the backed prefix
	 * only grows while the space is mapped, so what was seen stays true.
	 * Atomic: read by any thread's bounds check, raised on a refresh.
	 */
	uint64_t backed_seen;
	uint32_t created;
	char name[KVRT_NAME_MAX];	/* as opened: part of a tier's identity */
	struct kvrt_tier *tiers;	/* tier/: searched in this order */
};

/* log.c */
__attribute__((format(printf, 3, 4)))
void kvrt_log(const struct kvrt *k, int level, const char *fmt, ...);

/* A batch call's first checks, the module's order: -EINVAL, -E2BIG, -EFAULT (kvrt.c). */
int kvrt_batch_args(const struct kvrt_space *s, uint32_t count, const void *ids);

/*
 * The same for a batch call that then reads or writes blocks ids[] of the
 * space through its mapping (kvrt_tier_store): kvrt_batch_args(), each id
 * < nr_blocks (-EINVAL), each block backed (-EFAULT, logged as the bounds
 * check logs it), before any byte moves (kvrt.c).
 */
int kvrt_batch_ids(struct kvrt_space *s, uint32_t count, const uint32_t *ids);

/*
 * How many bytes from the space's base have memory behind them, in whole
 * pool blocks: the backed prefix, [0, backed_bytes / block_bytes) blocks
 * (kvcore's backed_blocks, the same for both backends).  refresh false:
 * what was last seen (no backend call); true: asks the backend first (an
 * ioctl on kmod).  Memory past it is PROT_NONE (embedded) or SIGBUS
 * (kmod).  kmod only: a HOLE block inside the prefix (reclaimed, and so
 * neither owned nor referenced by anyone) has no pages either; the
 * module has no call that says which, so it is not caught here (kvrt.c).
 */
uint64_t kvrt_space_backed(struct kvrt_space *s, bool refresh);

/* kvrules' create checks on kvrt_space_opts: both backends, the module before API 4 (pool/create_args.c). */
int kvrt_create_args_valid(const struct kvrt_space_opts *o, uint32_t page_size,
			   uint64_t pool_node_mask);

/* Copy thread (copy.c), stopped by kvrt_close(). */
void kvrt_copy_shutdown(struct kvrt *k);

/* What kvrt_copy_blocks() validates (copy.c); the GPU copy checks the same. */
int kvrt_copy_check(const struct kvrt_block_array *dst, const struct kvrt_block_array *src,
		    const struct kvrt_block_pair *pairs, uint32_t count);

/*
 * Every contiguous run a block copy moves, largest both layouts allow,
 * fp8 scales included: fn(arg, dst, src, bytes) for each (copy.c).
 */
typedef void (*kvrt_run_fn)(void *arg, char *dst, const char *src, size_t bytes);
void kvrt_copy_each_run(const struct kvrt_layout *d, char *dbase, float *dscales,
			const struct kvrt_layout *s, const char *sbase, const float *sscales,
			const struct kvrt_block_pair *pairs, uint32_t count, kvrt_run_fn fn,
			void *arg);

/*
 * Layout checks shared by append and copy (layout.c): the layout's sizes
 * and dtype are valid and every element it addresses lies within
 * [min_off, max_off] bytes from the base, both computed without overflow;
 * same for the scales (in floats) when the dtype is fp8.
 */
struct kvrt_extent {
	int64_t min_off, max_end;		/* bytes: [min_off, max_end) */
	int64_t scale_min, scale_max_end;	/* floats, fp8 only */
};
int kvrt_layout_extent(const struct kvrt_layout *l, struct kvrt_extent *e);

/*
 * The mappings of every open space handle, process-wide (bounds.c), and
 * the check copy, append and attention run before touching memory: each
 * block id block_at(arg, i) (negative: skipped) of the layout at base (and
 * scales) must, where it touches a space's mapping, lie inside one pool
 * block of it (-ERANGE otherwise), and that pool block must have memory
 * behind it (kvrt_space_backed(); -EFAULT otherwise, logged through the
 * space's handle).  Ids must already be < l->num_blocks.
 */
typedef int64_t (*kvrt_block_at_fn)(const void *arg, uint32_t i);
void kvrt_bounds_add(struct kvrt_space *s);
void kvrt_bounds_remove(struct kvrt_space *s);
int kvrt_bounds_check(const struct kvrt_layout *l, const void *base, const float *scales,
		      uint32_t count, kvrt_block_at_fn block_at, const void *arg);

#endif /* KVRT_INTERNAL_H */
