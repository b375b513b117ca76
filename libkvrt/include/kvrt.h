/* SPDX-License-Identifier: MIT */
/*
 * kvrt.h: libkvrt, the library inference engines link to keep KV-cache
 * blocks in kvpool (or the embedded pool), move them, and attend over them.
 *
 * Conventions: every function returns 0 (or a count) on success and a
 * negative errno on failure; no function prints unless logging was asked
 * for; the library keeps no global mutable state but one list, the
 * mappings of the open spaces (see "bounds" below).
 *
 * Bounds: a call that touches blocks through a layout and a base pointer
 * (kvrt_copy_blocks, kvrt_gpu_copy_blocks' host side, kvrt_append_kv,
 * kvrt_attn_decode/prefill and their _on variants) first checks every
 * block it will touch: where the block's bytes (all layers, K and V, fp8
 * scales) meet an open space's mapping, or its base (scales) pointer lies
 * in one, they must lie inside one pool block of that mapping, else the
 * call returns -ERANGE having touched nothing; and that pool block must
 * have memory behind it (be backed: kvrt_space_info()'s backed_bytes, in
 * whole blocks from the base), else the call returns -EFAULT having
 * touched nothing, where touching it would have been a SIGSEGV (embedded)
 * or SIGBUS (kmod).  kmod: a block the module reclaimed (a HOLE, which
 * no participant owns or references) is inside the backed range but has
 * no pages; it is not caught.  Other memory is the caller's and is not
 * checked.
 *
 * Contents, by concept.  A declaration later than 0.1 says "since 0.N", or
 * its section does; kvrt.map binds each function to that version node.
 *
 *   version
 *   handles and backends      kvrt_open, logging, kvrt_pool_info
 *   spaces, blocks, mapping
 *   element types, KV layouts (and a layout for a pool space)
 *   prefix hashing
 *   prefix cache              publish, lookup, release, persistent spaces, stats
 *   residency records, events
 *   tiers below the pool      SSD, Redis, write-back, tier keys
 *   sequence block tables
 *   paged attention on the CPU (and worker threads), append, block copies
 *   GPU                       probe, memory, registration, copies, append, plans,
 *                             attention
 */
#ifndef KVRT_H
#define KVRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Everything declared here is exported from libkvrt.so; the library is
 * built with -fvisibility=hidden, so nothing else is.
 */
#if defined(__GNUC__) && __GNUC__ >= 4
#pragma GCC visibility push(default)
#endif

/* ---- version ------------------------------------------------------------
 *
 * MINOR grows with every release that adds functions (each such release
 * adds a symbol version node, KVRT_0.MINOR, to libkvrt.so.0); PATCH with
 * fixes only; MAJOR (the soname) only with an incompatible change.
 * 0.1: everything up to block copies.  0.2: the prefix cache (publish,
 * lookup, release, persistent spaces, statistics, residency, events).
 * 0.3: the GPU (driver loading, registration, copies, append, attention).
 * 0.4: worker threads kept between attention calls.  0.5: sequence block
 * tables (fork with copy-on-write, truncate, CSR for the attention calls).
 * 0.6: tiers below the pool (a local SSD tier).
 * 0.7: write-back tiers (KVRT_TIER_WRITE_BACK, kvrt_tier_flush).
 * 0.8: tiers trust only what the tenant's key wrote (kvrt_tier_*_opts.key_file).
 * 0.9: asking the tiers what they hold without reading it (kvrt_tier_contains).
 * 0.10: benchmark limits and what AUTO copies measured (kvrt_gpu_read_stream,
 * kvrt_gpu_copy_calibration).
 */

#define KVRT_VERSION_MAJOR 0
#define KVRT_VERSION_MINOR 10
#define KVRT_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, comparable with kvrt_version_number() */
#define KVRT_VERSION_NUMBER \
	(KVRT_VERSION_MAJOR * 10000 + KVRT_VERSION_MINOR * 100 + KVRT_VERSION_PATCH)

/* The version of the library actually loaded: "MAJOR.MINOR.PATCH". */
const char *kvrt_version(void);
/* The same as a number, as KVRT_VERSION_NUMBER. */
int kvrt_version_number(void);

/* ---- handles and backends --------------------------------------------------
 *
 * struct kvrt is one connection to a pool: kvpool.ko through its device
 * (the kmod backend), or an in-process pool built from the module's own
 * block core (the embedded backend).  The API is the same for both.
 */
struct kvrt;
struct kvrt_space;
struct kvrt_copy;

enum kvrt_backend {
	KVRT_BACKEND_AUTO = 0,		/* KVRT_BACKEND in the environment, else kmod
					 * when the device opens, else embedded */
	KVRT_BACKEND_KMOD = 1,
	KVRT_BACKEND_EMBEDDED = 2,
};

/* Levels as syslog's. */
enum kvrt_log_level {
	KVRT_LOG_ERR = 3,
	KVRT_LOG_WARNING = 4,
	KVRT_LOG_INFO = 6,
	KVRT_LOG_DEBUG = 7,
};

/* A log line, without a trailing newline.  Called from any libkvrt thread. */
typedef void (*kvrt_log_fn)(void *arg, int level, const char *msg);

/* Embedded backend: memory choices, for tests and for hosts that need them. */
#define KVRT_OPEN_NO_HUGETLB	(1U << 0)	/* do not try MAP_HUGETLB */
#define KVRT_OPEN_NO_THP	(1U << 1)	/* do not madvise(MADV_HUGEPAGE) */
#define KVRT_OPEN_NO_MLOCK	(1U << 2)	/* do not mlock */
#define KVRT_OPEN_FLAGS (KVRT_OPEN_NO_HUGETLB | KVRT_OPEN_NO_THP | KVRT_OPEN_NO_MLOCK)

/* Zero-initialise, then set what matters. */
struct kvrt_open_opts {
	enum kvrt_backend backend;	/* AUTO (0): see enum kvrt_backend */
	uint32_t flags;			/* KVRT_OPEN_* */
	const char *device;		/* NULL: $KVRT_DEVICE, else "/dev/kvpool" */
	uint64_t pool_bytes;		/* embedded: cap on the backing of all spaces;
					 * 0: no cap but the spaces' quotas */
	kvrt_log_fn log;		/* NULL: no logging at all */
	void *log_arg;
	int log_level;			/* 0: KVRT_LOG_INFO */
	uint32_t reserved0;		/* must be 0 */
	uint64_t reserved[4];		/* must be 0 */
};

/*
 * Open a handle.  opts may be NULL (all defaults).  Backend choice:
 * opts->backend if not AUTO, else $KVRT_BACKEND ("kmod" or "embedded") if
 * set, else kmod when the device opens and answers KVPOOL_IOC_INFO, else
 * embedded.  Errors: -EINVAL for unknown flags, non-zero reserved fields, a
 * bad backend value in opts or $KVRT_BACKEND; -ENAMETOOLONG for a device
 * path (opts->device or $KVRT_DEVICE) of 256 bytes or more, whichever
 * backend is chosen (nothing is opened); -ENODEV when kmod is forced
 * and the device is absent or is no kvpool device; -EACCES/-EPERM when kmod
 * is forced and the device may not be opened; -ENOMEM.
 */
int kvrt_open(struct kvrt **out, const struct kvrt_open_opts *opts);

/*
 * Close a handle: closes the spaces still open on it (their handles become
 * invalid), waits for queued copies, frees everything; embedded: tears
 * down the handle's persistent spaces too.  NULL is a no-op.
 */
void kvrt_close(struct kvrt *k);

/* The live backend, and a line that says which and why, e.g.
 * "kmod: /dev/kvpool (api 1)" or
 * "embedded: /dev/kvpool: No such file or directory".  Valid until close. */
enum kvrt_backend kvrt_backend(const struct kvrt *k);
const char *kvrt_backend_info(const struct kvrt *k);

struct kvrt_pool_info {
	enum kvrt_backend backend;
	uint32_t api_version;	/* kmod: the module's; embedded: KVPOOL_API_VERSION */
	uint64_t features;	/* KVPOOL_FEAT_* bits as the uAPI defines them */
	uint32_t page_size;
	uint32_t chunk_size;	/* bytes spaces grow by */
	uint32_t nr_nodes;	/* NUMA nodes that may hold pool pages */
	uint32_t max_batch;	/* ids per alloc/free call */
	uint64_t node_mask;
	uint64_t pool_bytes;	/* kmod: reserved; embedded: the cap, 0 if none */
	uint64_t used_bytes;	/* held by spaces */
	uint64_t free_bytes;	/* kmod: not held by a space; embedded: cap - used,
				 * 0 if there is no cap */
};

/* -EINVAL for NULL arguments, or the ioctl's errno. */
int kvrt_pool_info(struct kvrt *k, struct kvrt_pool_info *info);

/* ---- spaces, blocks, mapping -----------------------------------------------
 *
 * A space is a trust domain with a fixed block size; block i lives at
 * kvrt_space_base() + i * block_bytes.  Each struct kvrt_space is one
 * participant (kmod: one open file descriptor) and owns the blocks it
 * allocated; closing it frees them, and the last close of a space destroys
 * it.  kmod spaces are host-wide and checked against credentials; embedded
 * spaces live in the struct kvrt that created them (one namespace per
 * handle), owned by the process's effective uid/gid.
 */
#define KVRT_NAME_MAX		64		/* with the NUL */
#define KVRT_MAX_BATCH		65536		/* ids per alloc/free call */
#define KVRT_MAX_BLOCK_BYTES	(1ULL << 30)
#define KVRT_MAX_SPACE_BYTES	(1ULL << 40)

#define KVRT_SPACE_CREATE	(1U << 0)	/* create when absent */
#define KVRT_SPACE_EXCL		(1U << 1)	/* with CREATE: fail if present */
#define KVRT_SPACE_PERSIST	(1U << 2)	/* with CREATE: outlive the last close
						 * (0.2; see "prefix cache" below) */
#define KVRT_SPACE_FOREIGN	(1U << 3)	/* join only: a space owned by
						 * expect_uid (not with CREATE) */

enum kvrt_numa_policy {
	KVRT_NUMA_PREFERRED = 0,	/* nodes in mask first (empty: the caller's) */
	KVRT_NUMA_BIND = 1,		/* only nodes in mask */
	KVRT_NUMA_INTERLEAVE = 2,	/* chunk by chunk across mask (empty: all) */
};

struct kvrt_space_opts {
	const char *name;	/* [A-Za-z0-9._-]+, shorter than KVRT_NAME_MAX */
	uint32_t flags;		/* KVRT_SPACE_* */
	uint32_t mode;		/* create: 0777 bits; joining needs r and w */
	uint64_t block_bytes;	/* page multiple; on join 0 or the space's */
	uint64_t quota_bytes;	/* create: at least block_bytes */
	uint64_t node_mask;	/* create: nodes for the policy */
	enum kvrt_numa_policy numa_policy;	/* create */
	uint32_t expect_uid;	/* FOREIGN: the owner to accept; else 0 */
	uint64_t reserved[4];	/* must be 0 */
};

/*
 * Join or create a space, and map it.  Errnos as KVPOOL_IOC_SPACE_OPEN
 * documents (Documentation/kvpool.rst), for both backends: -EINVAL (flags,
 * EXCL or PERSIST without CREATE, reserved fields, name, create fields,
 * block_bytes mismatch on join), -E2BIG (block_bytes > KVRT_MAX_BLOCK_BYTES
 * or quota_bytes > KVRT_MAX_SPACE_BYTES), -ENOENT, -EEXIST, -EACCES,
 * -ENOMEM; plus the mmap errno of the mapping.  The create fields (mode,
 * quota_bytes, node_mask, numa_policy) must be 0 without CREATE; with it
 * they are checked whether the open creates or joins (kmod API 4; libkvrt
 * checks for older modules).  PERSIST and the create fields count only
 * when the call creates the space: kvrt_space_info() says whether the open
 * created the space or joined it (created), who owns it (uid) and the
 * space's own mode, policy and geometry.
 *
 * Names are shared (kmod: host-wide), so someone else may hold the name
 * first.  A join lands only in a space owned by the caller (kmod: its
 * fsuid when it calls kvrt_space_open(), which opens the space's own
 * descriptor; embedded: its euid) or, with KVRT_SPACE_FOREIGN, by exactly
 * expect_uid; otherwise it fails and joins nothing: -EEXIST with CREATE
 * (the name is another owner's), -EACCES without.  Root is no exception.
 * FOREIGN with CREATE, or expect_uid non-zero without FOREIGN: -EINVAL.
 * Before kmod API 3 the module has no such check: libkvrt joins, compares
 * the owner with the caller's euid (or expect_uid), and leaves again with
 * the same errnos when they differ.
 */
int kvrt_space_open(struct kvrt *k, const struct kvrt_space_opts *opts,
		    struct kvrt_space **out);

/* Free this participant's blocks, unmap, leave the space.  NULL: no-op. */
void kvrt_space_close(struct kvrt_space *space);

struct kvrt_space_info {
	uint32_t space_id;
	uint32_t created;	/* 1 when this handle's open created the space */
	uint32_t uid;		/* owner */
	uint32_t gid;
	uint32_t mode;
	enum kvrt_numa_policy numa_policy;
	uint64_t node_mask;
	uint64_t block_bytes;
	uint64_t nr_blocks;	/* quota in blocks: ids are < nr_blocks */
	uint64_t map_bytes;	/* nr_blocks * block_bytes */
	uint64_t backed_blocks;	/* blocks with memory behind them */
	uint64_t free_blocks;
	uint64_t owned_blocks;	/* all participants */
	uint64_t my_blocks;	/* owned by this handle */
	uint64_t backed_bytes;
};

int kvrt_space_info(struct kvrt_space *space, struct kvrt_space_info *info);

/*
 * Allocate count blocks, all or none, ids to ids[count].  -EINVAL count 0;
 * -E2BIG count > KVRT_MAX_BATCH; -EFAULT ids NULL (kmod: not writable);
 * -ENOSPC quota or pool exhausted; -ENOMEM; kmod also -EINTR.
 */
int kvrt_alloc_blocks(struct kvrt_space *space, uint32_t count, uint32_t *ids);

/*
 * Free count blocks, all or none.  -EINVAL count 0, an id outside the
 * backed range or twice in the batch; -E2BIG; -EFAULT ids NULL;
 * -EPERM a block this handle does not own.
 */
int kvrt_free_blocks(struct kvrt_space *space, uint32_t count, const uint32_t *ids);

/* Start of the space's mapping (map_bytes long, read/write, shared with the
 * space's other participants).  Only allocated blocks may be touched: past
 * the backed blocks a touch is a signal (the calls that take block ids
 * check this and return an errno instead; a pointer is not checked). */
void *kvrt_space_base(const struct kvrt_space *space);

/* Address of block id, or NULL when id >= nr_blocks. */
void *kvrt_block_addr(const struct kvrt_space *space, uint32_t id);

/*
 * What memory backs the space, never guessed: kmod reports the module's
 * pinned pool pages; embedded reports, per mechanism, what was asked, what
 * the kernel granted (THP from /proc/self/smaps) and why it refused.
 */
enum kvrt_mem_kind {
	KVRT_MEM_KMOD_POOL = 0,	/* kvpool.ko's pinned pages */
	KVRT_MEM_EMBEDDED = 1,	/* this process's memory */
};

struct kvrt_mem_info {
	enum kvrt_mem_kind kind;
	uint32_t chunk_bytes;	/* growth unit: 2 MiB */
	uint64_t backed_bytes;	/* chunk bytes mapped (embedded) / backed (kmod) */
	uint64_t hugetlb_bytes;	/* in MAP_HUGETLB 2 MiB pages */
	uint64_t thp_bytes;	/* in transparent huge pages, as smaps reports */
	uint64_t locked_bytes;	/* mlock'd, pinned by the module, or hugetlb */
	int32_t hugetlb_errno;	/* last MAP_HUGETLB failure, 0 if none */
	int32_t thp_errno;	/* last madvise(MADV_HUGEPAGE) failure, 0 if none */
	int32_t mlock_errno;	/* last mlock failure, 0 if none */
	int32_t numa_errno;	/* last mbind failure, 0 if none */
	uint32_t disabled;	/* KVRT_OPEN_NO_* bits that were in force */
	uint32_t reserved0;
	char summary[512];	/* one human-readable line saying all of the above */
};

int kvrt_space_mem_info(struct kvrt_space *space, struct kvrt_mem_info *info);

/* ---- element types ----------------------------------------------------- */

enum kvrt_dtype {
	KVRT_DTYPE_F32 = 0,
	KVRT_DTYPE_F16 = 1,
	KVRT_DTYPE_BF16 = 2,
	KVRT_DTYPE_FP8_E4M3 = 3,	/* KV only; with per-block-per-head scales */
};

/* Bytes per element, or 0 for an unknown dtype. */
size_t kvrt_dtype_size(enum kvrt_dtype dtype);

/* ---- KV layouts ------------------------------------------------------------
 *
 * A paged KV cache holds, for each layer l, K and V (kv = 0, 1) of each
 * block b, token slot t (< block_tokens), KV head h and dim d.  The byte
 * offset of that element from the cache base is
 *
 *   l * layer_stride + kv * kv_stride + b * block_stride
 *     + t * token_stride + h * head_stride + d * element size
 *
 * so any layout with a contiguous head_dim is expressible.  Two presets:
 *
 *   KVRT_LAYOUT_BLOCK_MAJOR  [block][layer][kv][token][head][dim]: all layers
 *                            of a block contiguous; one block is one copy.
 *   KVRT_LAYOUT_LAYER_MAJOR  [layer][kv][block][token][head][dim]: per-layer
 *                            caches as vLLM and FlashInfer keep them (NHD).
 *
 * For fp8, scales are float32 per (layer, kv, block, head), at
 *   scales[l * scale_layer_stride + kv * scale_kv_stride
 *          + b * scale_block_stride + h]   (strides in floats)
 * and a stored value x means x * scale.
 */
enum kvrt_layout_kind {
	KVRT_LAYOUT_BLOCK_MAJOR = 0,
	KVRT_LAYOUT_LAYER_MAJOR = 1,
};

struct kvrt_layout {
	uint32_t num_layers;
	uint32_t num_kv_heads;
	uint32_t head_dim;
	uint32_t block_tokens;	/* tokens per block */
	uint32_t num_blocks;	/* blocks in the cache this layout describes */
	enum kvrt_dtype kv_dtype;
	int64_t layer_stride;	/* bytes */
	int64_t kv_stride;
	int64_t block_stride;
	int64_t token_stride;
	int64_t head_stride;
	int64_t scale_layer_stride;	/* floats; fp8 only */
	int64_t scale_kv_stride;
	int64_t scale_block_stride;
};

/*
 * Fill a layout for a preset.  -EINVAL for zero sizes, an unknown kind or
 * dtype; -EOVERFLOW when the cache would not fit in 63 bits.
 */
int kvrt_layout_init(struct kvrt_layout *layout, enum kvrt_layout_kind kind,
		     uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
		     uint32_t block_tokens, uint32_t num_blocks, enum kvrt_dtype kv_dtype);

/*
 * Bytes one block occupies across all layers, K and V:
 *   num_layers * 2 * block_tokens * num_kv_heads * head_dim * element size,
 * plus, for fp8, the block's scales (num_layers * 2 * num_kv_heads floats,
 * after the data rounded up to a multiple of 4 bytes).
 * This is what a pool block must hold to take one block in a block-major
 * copy (size the space's block_bytes from it, rounded up to the page size).
 * -EINVAL for a NULL or inconsistent layout, -EOVERFLOW when it does not fit
 * in 63 bits.
 */
int kvrt_layout_block_bytes(const struct kvrt_layout *layout, uint64_t *bytes);

/*
 * The memory formula: bytes of K and V for tokens tokens,
 *   2 * tokens * num_layers * num_kv_heads * head_dim * element size.
 * tokens == 1 gives the bytes per token, tokens == 0 gives 0 whatever the
 * sizes.  fp8 scales are per block, so they are not in this figure:
 * kvrt_layout_block_bytes() counts them.  -EINVAL for a zero size (tokens
 * may be 0) or unknown dtype, -EOVERFLOW when the result does not fit in
 * 63 bits.
 */
int kvrt_kv_bytes(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
		  uint64_t tokens, enum kvrt_dtype dtype, uint64_t *bytes);

/*
 * Turn an fp8 KVRT_LAYOUT_BLOCK_MAJOR layout into one that keeps each
 * block's scales inside the block, right after its K/V data, so that one
 * block is one self-contained kvrt_layout_block_bytes() range (the form a
 * pool block takes).  block_stride becomes kvrt_layout_block_bytes(); the
 * scale strides are set to match; *scales_offset receives the byte offset
 * from the cache base of the first scale: use base + *scales_offset as the
 * scales pointer of a struct kvrt_kv_cache or kvrt_block_array.
 * -EINVAL unless the layout is fp8 and exactly the block-major preset;
 * -EOVERFLOW when the cache with the scales inline (num_blocks times the
 * new block_stride) would not fit in 63 bits, as kvrt_layout_init() says
 * of the data alone.  On failure the layout is unchanged.
 */
int kvrt_layout_inline_scales(struct kvrt_layout *layout, uint64_t *scales_offset);

/* ---- a layout for a pool space (since 0.2) ----------------------------------
 *
 * Make a layout describe a space's blocks: num_blocks becomes the space's
 * nr_blocks and block_stride its block_bytes (page-rounded, so usually more
 * than the layout's block), so that a kvrt_block_array with base
 * kvrt_space_base(space) addresses block id i of the space.  The layout
 * must have self-contained blocks: the block-major preset, and for fp8
 * after kvrt_layout_inline_scales() (its inline scales move with the
 * stride).  -EINVAL for NULL arguments or another layout, -E2BIG when
 * kvrt_layout_block_bytes() exceeds the space's block_bytes, -EOVERFLOW
 * for a space of more than 2^32 blocks.
 */
int kvrt_layout_for_space(struct kvrt_layout *layout, struct kvrt_space *space);

/* ---- prefix hashing ----------------------------------------------------------
 *
 * The hash of block j of a prompt is SHA-256 over
 *
 *   parent[32] || le32(n) || le32(token[0]) .. le32(token[n-1])
 *              || le64(extra_len) || extra[extra_len]
 *
 * where parent is the hash of block j - 1 (for j = 0: the root, 32 zero
 * bytes unless the caller gives one), n the tokens in the block and leN
 * little-endian.  Tokens are hashed as the uint32 bit pattern given.
 * Only full blocks are hashed.  SHA-256 is OpenSSL libcrypto's (EVP), which
 * uses the SHA extensions (SHA-NI) when the CPU has them.
 */
#define KVRT_HASH_BYTES 32

/* One block.  parent NULL: the zero root.  -EINVAL for NULL tokens with
 * num_tokens > 0, NULL extra with extra_len > 0, NULL out; -ENOMEM. */
int kvrt_hash_block(const uint8_t *parent, const uint32_t *tokens, uint32_t num_tokens,
		    const void *extra, size_t extra_len, uint8_t out[KVRT_HASH_BYTES]);

/*
 * A prompt: hashes of its first min(num_tokens / block_tokens, max_hashes)
 * blocks into hashes[], chained from root (NULL: the zero root); returns
 * how many.  Extra keys per block are optional: block j's are
 * extra[extra_indptr[j] .. extra_indptr[j + 1]) (extra_indptr has one entry
 * per hashed block plus one); extra_indptr NULL means none.  To continue a
 * prompt, pass the last hash as root and the tokens after it.
 * -EINVAL for block_tokens 0, NULL tokens/hashes with work to do, extra
 * NULL with extra_indptr given, a decreasing extra_indptr; -EOVERFLOW for
 * more than INT32_MAX blocks; -ENOMEM.
 */
int kvrt_hash_prompt(const uint8_t *root, const uint32_t *tokens, size_t num_tokens,
		     uint32_t block_tokens, const void *extra, const uint64_t *extra_indptr,
		     uint8_t (*hashes)[KVRT_HASH_BYTES], size_t max_hashes);

struct kvrt_hash_info {
	int32_t cpu_sha_ni;		/* 1 when CPUID.(7,0):EBX[29] (SHA) is set */
	int32_t ia32cap_override;	/* 1 when $OPENSSL_ia32cap is set: it can
					 * hide SHA-NI from libcrypto */
	char libcrypto[64];		/* OpenSSL_version(OPENSSL_VERSION) */
};

int kvrt_hash_info(struct kvrt_hash_info *info);

/* ---- prefix cache (since 0.2) -----------------------------------------------
 *
 * A space can share blocks by content.  A participant fills a block it
 * owns, then publishes it under the block's 32-byte hash (kvrt_hash_prompt
 * computes the chained hashes); any participant of the space finds it again
 * with kvrt_lookup.  A published block is immutable by contract (nothing
 * stops a write, but readers trust it) and shared: each holder keeps reader
 * references, and a block with no readers stays CACHED (still found by
 * lookup) until an allocation that cannot be served otherwise evicts it:
 * lowest priority first, and within a priority the block released longest
 * ago first.  Nothing is evicted unless the allocation then succeeds, and a
 * referenced or owned block is never evicted.  The hash is an opaque key
 * scoped to the space; isolation between tenants comes from spaces.
 *
 * Block states: FREE, OWNED (by one participant), PUBLISHED (hash in the
 * index, readers > 0), CACHED (hash in the index, no readers), HOLE (kmod
 * only: pages given back under memory pressure, refilled on demand).
 *
 * Both backends have the same semantics and errnos (kmod: the module's, as
 * Documentation/kvpool.rst gives them; embedded: kmod/core, the module's own
 * code, with the same checks made in the library).  A struct kvrt_space is
 * the unit that holds references, residency records and an event queue,
 * as one file descriptor is with the module; closing it drops all three.
 *
 * Thread safety: every call below is thread-safe, also on one space handle
 * from many threads (embedded: the space's mutex; kmod: the module's
 * locks), except that kvrt_space_close() must not race any call on that
 * space.  Reader references belong to the space handle, not to a thread.
 *
 * Requires KVRT_FEAT_PREFIX (publish, lookup, release, stats),
 * KVRT_FEAT_PERSIST (KVRT_SPACE_PERSIST, kvrt_space_destroy),
 * KVRT_FEAT_RESIDENCY and KVRT_FEAT_EVENTS in kvrt_pool_info().features;
 * a kmod backend on an older module returns -EOPNOTSUPP for calls whose
 * feature it lacks.  The embedded backend has all of them but RECLAIM.
 */
#define KVRT_FEAT_SPACES	(1ULL << 0)	/* spaces, alloc/free, mapping */
#define KVRT_FEAT_NUMA		(1ULL << 1)	/* NUMA policies honoured */
#define KVRT_FEAT_PREFIX	(1ULL << 2)	/* publish, lookup, release, eviction */
#define KVRT_FEAT_PERSIST	(1ULL << 3)	/* persistent spaces, destroy */
#define KVRT_FEAT_RESIDENCY	(1ULL << 4)	/* GPU residency records */
#define KVRT_FEAT_EVENTS	(1ULL << 5)	/* event queue */
#define KVRT_FEAT_RECLAIM	(1ULL << 6)	/* cached blocks given back under pressure */

#define KVRT_PRIO_MAX		100	/* eviction priorities are 0..100, */
#define KVRT_PRIO_DEFAULT	50	/* lower goes first */

/* kvrt_publish flags[], out */
#define KVRT_PUBLISHED_DEDUP	(1U << 0)	/* the hash was present: ids[i] is that
						 * block and the caller's was freed */

/*
 * Publish count blocks this space handle owns, block ids[i] under
 * hashes[i], all or none.  On success each entry leaves the handle one
 * reader reference on the block that now holds its hash, whose id is
 * written back to ids[i]:
 *   - hash absent: the block becomes PUBLISHED; ids[i] is unchanged and
 *     flags[i] is 0;
 *   - hash present (published or cached by any participant, or by an
 *     earlier entry of this batch): ids[i] becomes the block that holds it,
 *     flags[i] is KVRT_PUBLISHED_DEDUP, and the caller's own block is freed
 *     (its data is not looked at).
 * priorities NULL: every block gets KVRT_PRIO_DEFAULT; else priorities[i]
 * (0..KVRT_PRIO_MAX).  A dedup keeps the existing block's priority.
 * flags NULL: not reported.  Returns the number of dedups, or:
 *   -EINVAL  NULL space, count 0, a priority > KVRT_PRIO_MAX, an id outside
 *            the backed range, the same id twice;
 *   -E2BIG   count > KVRT_MAX_BATCH;
 *   -EFAULT  ids or hashes NULL;
 *   -EPERM   a block this handle does not own (another's, free, published
 *            or cached);
 *   -EOVERFLOW  a reference bound: the handle would hold more than 2^24
 *            references (kmod: sysfs refs_per_fd_max), or a block a hash
 *            may land on has 2^31 - count readers already;
 *   -ENOMEM; kmod also -EINTR.
 * On failure ids[] and flags[] are untouched and nothing changed.
 */
int kvrt_publish(struct kvrt_space *space, uint32_t count, uint32_t *ids,
		 const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *priorities,
		 uint32_t *flags);

/*
 * The longest prefix of hashes[0..count) present in the space: walks the
 * hashes in order and stops at the first one absent.  Returns nr_hits (0
 * is success, not an error) and writes ids[0..nr_hits) (ids[] must hold
 * count entries; later ones are untouched).  The handle takes one reader
 * reference per hit (a cached hit is published again), to be dropped with
 * kvrt_release().  devices non-NULL: devices[i] receives, for each hit, the
 * OR of 1 << slot over every residency record of that block held by any
 * participant of the space (see kvrt_residency_add).  Statistics: hits +=
 * nr_hits, misses += count - nr_hits.
 * -EINVAL NULL space or count 0; -E2BIG count > KVRT_MAX_BATCH; -EFAULT
 * hashes or ids NULL; -EOVERFLOW a reference bound as for kvrt_publish;
 * -ENOMEM (no reference taken); kmod also -EINTR.
 */
int kvrt_lookup(struct kvrt_space *space, uint32_t count,
		const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint64_t *devices);

/*
 * Drop one reader reference per listed id, all or none; an id may appear
 * as often as the handle holds references on it.  A block left without
 * readers becomes CACHED, the newest on its priority's eviction list.
 * -EINVAL NULL space, count 0, an id this handle does not hold that many
 * references on; -E2BIG; -EFAULT ids NULL.
 */
int kvrt_release(struct kvrt_space *space, uint32_t count, const uint32_t *ids);

/*
 * Persistence.  A space created with KVRT_SPACE_PERSIST outlives its last
 * close: owned blocks and references of closed handles are dropped as
 * always, so its published blocks stay CACHED, and a later join finds them
 * with kvrt_lookup.  kmod: it lives in the module, until
 * kvrt_space_destroy() or the module unloads.  embedded: it lives in the
 * struct kvrt that created it, until kvrt_space_destroy() or kvrt_close().
 *
 * kvrt_space_destroy() unlinks a space by name, joined or not, like
 * unlinking a file: the name can be created again at once and the space
 * stops being persistent; handles still joined keep working, each gets a
 * KVRT_EVENT_SPACE_DESTROYED, and the space goes with the last of them (at
 * once when there is none).  The space's owner (kmod: the fsuid that
 * created it; embedded: the euid) or root (kmod: CAP_SYS_ADMIN) only;
 * kmod checks the ids the process had at kvrt_open(), which opened the
 * descriptor the request goes through (the module fixes rights at open),
 * embedded the ids at the call.
 * -EINVAL NULL handle or invalid name; -ENOENT no such space; -EPERM not
 * the owner; -EOPNOTSUPP kmod without KVRT_FEAT_PERSIST.
 */
int kvrt_space_destroy(struct kvrt *k, const char *name);

enum kvrt_evict_cause {
	KVRT_EVICT_QUOTA = 0,	/* the space's quota (range) was full */
	KVRT_EVICT_POOL = 1,	/* the pool was out of pages (embedded: the
				 * pool_bytes cap, or memory) */
	KVRT_EVICT_TENANT = 2,	/* kmod: the owner uid's limit was reached */
	KVRT_EVICT_RECLAIM = 3,	/* kmod: host memory pressure (shrinker) */
	KVRT_EVICT_ADMIN = 4,	/* kmod: an administrator dropped the cache */
	KVRT_EVICT_CAUSES = 5,
};

struct kvrt_space_stats {
	uint32_t space_id;
	uint32_t reserved0;		/* 0 */
	uint64_t hits;			/* looked-up blocks found */
	uint64_t misses;		/* looked-up blocks not served */
	uint64_t inserts;		/* blocks published under a new hash */
	uint64_t dedups;		/* published blocks whose hash was present */
	uint64_t evictions[KVRT_EVICT_CAUSES];
	uint64_t pressure;		/* allocations that had to evict */
	uint64_t published_blocks;	/* with readers */
	uint64_t cached_blocks;		/* without readers */
	uint64_t hole_blocks;		/* kmod: reclaimed, refilled on demand */
	uint64_t readers;		/* reader references, all participants */
	uint64_t my_refs;		/* reader references held by this handle */
	uint64_t allocs;		/* blocks handed out */
	uint64_t frees;			/* blocks freed, released or deduplicated */
	uint64_t reserved[4];		/* 0 */
};

/* The space's prefix-cache figures.  -EINVAL NULL arguments; kmod: the
 * ioctl's errno, -EOPNOTSUPP without KVRT_FEAT_PREFIX. */
int kvrt_space_stats(struct kvrt_space *space, struct kvrt_space_stats *stats);

/* ---- residency records (since 0.2) ------------------------------------------
 *
 * This handle says host block `block` holds a copy of
 * GPU block `gpu_block` of the device whose UUID (cuDeviceGetUuid) is
 * given.  A successful add registers the device for this handle and gives
 * it a slot 0..KVRT_MAX_DEVICES-1 in the space's device table if it has
 * none; the slot is the device's while any handle has it registered, and
 * clear and close unregister (kmod API 4: a module before it never reuses
 * a slot); kvrt_lookup() reports slots as bits.  Records go when this handle
 * closes, on del or clear, and when the host block becomes free (freed,
 * deduplicated away, evicted); a block released but still cached keeps
 * them.  Each call returns the device's slot (>= 0) or a negative errno.
 * kmod: KVPOOL_IOC_RESIDENCY; embedded: the same table kept in process.
 */
#define KVRT_UUID_BYTES		16
#define KVRT_MAX_DEVICES	64

struct kvrt_residency_entry {
	uint32_t block;		/* host block: owned or referenced by this handle */
	uint32_t gpu_block;
};

/*
 * Add or update records, all or none: re-adding (handle, block, device)
 * updates gpu_block.  count 0 only registers the device (entries may then
 * be NULL).  Errors: -EINVAL NULL space or uuid; -E2BIG count >
 * KVRT_MAX_BATCH; -EFAULT entries NULL with count > 0; then entry by
 * entry -EINVAL a block outside the backed range, -EPERM a block this
 * handle neither owns nor holds a reference on; then -ENOSPC the device is
 * new and the table is full; -ENOMEM.  A failed call registers no device.
 */
int kvrt_residency_add(struct kvrt_space *space, const uint8_t uuid[KVRT_UUID_BYTES],
		       uint32_t count, const struct kvrt_residency_entry *entries);

/*
 * Remove this handle's records of blocks[0..count) on the device, all or
 * none (a block listed twice is fine).  -EINVAL NULL space or uuid, count
 * 0; -E2BIG; -EFAULT blocks NULL; -ENOENT unknown device; then entry by
 * entry: -EINVAL a block outside the backed range, -ENOENT a block without
 * such a record; -ENOMEM.
 */
int kvrt_residency_del(struct kvrt_space *space, const uint8_t uuid[KVRT_UUID_BYTES],
		       uint32_t count, const uint32_t *blocks);

/* Remove all this handle's records on the device, and its registration of
 * the device.  -ENOENT unknown device; -EINVAL NULL space or uuid. */
int kvrt_residency_clear(struct kvrt_space *space, const uint8_t uuid[KVRT_UUID_BYTES]);

/* ---- events (since 0.2) -----------------------------------------------------
 *
 * Each space handle has its own queue.  seq counts from 1 per
 * handle without gaps, except that events dropped because the queue was
 * full (kmod: sysfs event_queue_max, default 65536; embedded: 65536) are
 * replaced by one KVRT_EVENT_OVERFLOW whose count says how many seqs were
 * skipped.  The layout is struct kvpool_event's.
 */
enum kvrt_event_type {
	KVRT_EVENT_EVICTED = 1,		/* a block this handle published or looked
					 * up (hit) since it was last published */
	KVRT_EVENT_SPACE_DESTROYED = 2,	/* kvrt_space_destroy() or an admin */
	KVRT_EVENT_QUOTA_PRESSURE = 3,	/* an allocation in the space evicted count
					 * blocks, or failed with -ENOSPC (count 0) */
	KVRT_EVENT_OVERFLOW = 4,	/* count events were lost before this one */
};

struct kvrt_event {
	uint64_t seq;
	uint32_t type;		/* enum kvrt_event_type */
	uint32_t cause;		/* EVICTED, QUOTA_PRESSURE: enum kvrt_evict_cause */
	uint32_t block;		/* EVICTED: the block id */
	uint32_t count;		/* QUOTA_PRESSURE: blocks evicted; OVERFLOW: events lost */
	uint8_t hash[KVRT_HASH_BYTES];	/* EVICTED: the block's hash */
	uint64_t reserved;
};

/*
 * A descriptor that polls readable (POLLIN) while events are pending, for
 * the caller's poll/epoll loop; it belongs to the space handle and stays
 * valid until kvrt_space_close().  Do not read from it or close it: use
 * kvrt_read_events().  kmod: the space's device descriptor; embedded: an
 * eventfd (non-blocking, close-on-exec), created on the first call.
 * -EINVAL NULL space; -EOPNOTSUPP kmod without KVRT_FEAT_EVENTS; embedded:
 * eventfd's errno (-EMFILE, -ENFILE, -ENOMEM).
 */
int kvrt_events_fd(struct kvrt_space *space);

/*
 * Take up to max pending events, oldest first, into events[]; never
 * waits.  Returns how many (0: none pending).  -EINVAL NULL space or max
 * 0; -EFAULT events NULL; -EOPNOTSUPP kmod without KVRT_FEAT_EVENTS; kmod:
 * the read or poll errno.
 */
int kvrt_read_events(struct kvrt_space *space, struct kvrt_event *events, uint32_t max);

/* ---- tiers below the pool (since 0.6) ---------------------------------------
 *
 * A tier keeps a space's blocks, by
 * their chained hashes, outside host memory.  Tiers are opened on a space
 * handle, in order: kvrt_lookup_tiers() asks the pool first, then each
 * tier in the order it was opened.  A hit below the pool is read into
 * blocks this handle allocates and published in the space (so that every
 * process on the host finds it in memory next time); kvrt_tier_store()
 * writes blocks through to every tier of the handle.  kvrt_space_close()
 * closes the handle's tiers.
 *
 * A tier's blocks belong to one space identity: the space's name, its
 * owner uid, its block_bytes and, when the opener gives it, its layout;
 * blocks stored under another identity never match.  Every block carries
 * a checksum (XXH3-64) verified on every read: a block that fails it is a
 * miss, counted in checksum_errors, and is dropped from the tier.
 *
 * The SSD tier: one directory per identity below dir, holding a data file
 * of capacity_bytes / block_bytes slots, read and written with O_DIRECT
 * through io_uring straight between the space's pages and the file, and
 * an index log (Documentation/libkvrt.rst, "Tiers", gives the format).
 * It survives process and machine restarts: a block is in the index only
 * once its data is on the device (fdatasync), and a slot leaves the index
 * (a record made durable) before it is overwritten, so a crash at any
 * point leaves every block lookup returns whole.  When full, it evicts
 * the least recently used block of the lowest priority, as the pool does.
 * One process at a time uses an identity's directory (-EBUSY for a
 * second); the other processes of the host reach its blocks through the
 * pool, where every hit is published.
 *
 * Trust (since 0.8).  The SSD tier trusts no file it did not make for the
 * caller: dir must be the caller's or root's, and sticky (chmod 1777, as
 * /tmp) when group or others may write it, else -EPERM; the identity
 * directory must be the caller's (geteuid()) with no group or other
 * bits (0700), not even read, as the blocks are the tenant's prompts (else
 * -EPERM; -ELOOP a symlink); each file in it (lock, key, data, index)
 * must be a regular file (-EINVAL) of the caller's, no group or other
 * bits, one link (else -EPERM), never a symlink (-ELOOP).  Temporary
 * files (index.new, stats.new, key.new) are removed and made afresh.
 * Each refusal is also logged (kvrt_open_opts.log).  In a sticky shared
 * root another uid can still take an identity's name first: the tier is
 * then refused (-EPERM), a denial of service, never a read or write of
 * the other's files; per-tenant directories made by root (each 0700, the
 * tenant's) leave no name to take.  Every block stored carries a random
 * nonce and a tag (Poly1305, keyed by the tenant's key, over its bytes,
 * identity and hash); a block whose tag fails is a miss, counted in
 * checksum_errors, and dropped.  The key: key_file's (a file of the
 * caller's, mode 0600, 16 to 4096 bytes of secret: its SHA-256), else the
 * identity directory's own "key", 32 random bytes made 0600 at its first
 * open.  An index written under another key, or by 0.6 or 0.7 (index
 * version 1, untagged), is read as empty and rewritten: the blocks it
 * named are gone.
 *
 * Policy (since 0.7): a tier is write-through unless opened with
 * KVRT_TIER_WRITE_BACK.  kvrt_tier_store() writes a write-through tier's
 * blocks before it returns; for a write-back tier it queues the blocks
 * and returns, and a thread of the tier writes them in batches.  A queued
 * block is held in the pool by a reader reference (taken by a lookup of
 * its hash, so it counts as a pool hit) until written: nothing queued is
 * lost to eviction, and kvrt_tier_flush() or closing the tier writes
 * what is queued.  A block whose hash is not published in the pool, and
 * what does not fit in the queue (writeback_max blocks), is written
 * before kvrt_tier_store() returns, as write-through.  What a crash or
 * kill -9 finds still queued is not in the tier.  A child of fork() must
 * not use its parent's tiers: there kvrt_tier_store() and kvrt_tier_flush()
 * of a handle with a write-back tier fail with -ECHILD (the thread and its
 * references are the parent's), and closing leaves the parent's queue alone.
 */
#define KVRT_TIER_WRITE_BACK	0x1u	/* kvrt_tier_*_opts.flags */
struct kvrt_tier;

enum kvrt_tier_kind {
	KVRT_TIER_SSD = 1,
	KVRT_TIER_REDIS = 2,
};

struct kvrt_tier_ssd_opts {
	const char *dir;		/* created 0700 when absent; see "Trust" above */
	uint64_t capacity_bytes;	/* the identity's limit: 1 to 2^31 blocks */
	uint32_t queue_depth;		/* I/Os in flight: 0 is 64; at most 4096 */
	uint32_t flags;			/* 0 or KVRT_TIER_WRITE_BACK */
	const struct kvrt_layout *layout;	/* NULL: the identity has no layout */
	/* Blocks queued at most; 0: an eighth of the space's blocks, at most 1024 (0 if not WRITE_BACK). */
	uint32_t writeback_max;
	uint32_t reserved0;		/* 0 */
	/* The tenant's tier key (since 0.8; see "Trust" above); NULL: the directory's own. */
	const char *key_file;
	uint64_t reserved[2];		/* 0 */
};

/*
 * Open the SSD tier of the space's identity below opts->dir and add it to
 * this handle's tiers.  -EINVAL NULL arguments, flags or reserved fields,
 * capacity_bytes below one block, above 2^50 or of more than 2^31 blocks
 * (the index numbers slots in 32 bits), queue_depth above 4096,
 * writeback_max above KVRT_MAX_BATCH or given without KVRT_TIER_WRITE_BACK;
 * key_file: -ENOENT absent, -ELOOP a symlink, -EPERM another owner's or
 * with group or other bits (chmod 600), -EINVAL not a regular file or not
 * 16 to 4096 bytes, checked before anything is created;
 * -EPERM dir, the identity directory or a file in it fails "Trust" above
 * (-ELOOP a symlink, -EINVAL not a regular file);
 * -EAGAIN the write-back thread could not start; -EBUSY another process
 * (or handle) has the identity's directory open; -ENOSYS io_uring is not
 * available (kernel.io_uring_disabled, a seccomp filter); the errno of
 * creating or opening the directory or files (-EACCES, -ENOSPC, ...);
 * -ENOMEM.  On failure nothing is added and nothing below dir is changed
 * but directories created (and, past the trust checks, the key file and
 * a rewritten index).
 */
int kvrt_tier_open_ssd(struct kvrt_space *space, const struct kvrt_tier_ssd_opts *opts,
		       struct kvrt_tier **tier);

/*
 * The cross-host tier on a Redis Cluster (Redis 7).  Each block is one
 * value, under key_prefix + 64 hex digits: HMAC-SHA256 under the tenant's
 * key of the identity and the hash, so that a listed name confirms no
 * guessed prompt.  The value (format 2, since 0.8) is a 48-byte head
 * (magic, version, block_bytes, a random nonce, a tag) and the bytes; the
 * tag (Poly1305 under a one-time key derived from the tenant's key, the
 * identity, the hash and the nonce) binds the bytes to their block.  A
 * value that is short, of another format or geometry or whose tag is not
 * right is a miss (checksum_errors), never copied into a block; values of
 * 0.6 and 0.7 are not found.  The tenant's key: key_file's, else derived
 * from user and password (then whoever learns the password can forge
 * values).  A lookup of n hashes costs one pipelined round trip per node
 * involved (EXISTS, then GET); a store one more (SET NX: a key present is
 * left alone; Redis's maxmemory-policy decides what is evicted, and the
 * tier's capacity, blocks and used_bytes are not known here: 0).  The
 * slot map comes from CLUSTER SLOTS, read from a seed only; MOVED and ASK
 * are followed to a seed or a node the map names (else the map is read
 * again, and a node still not in it is a miss, never contacted), and the
 * map read again after a MOVED.  Each reply is capped (a batch's at a
 * value and its framing) before it is buffered: a node that sends more is
 * dropped, a miss.
 *
 * Isolation: each tenant connects as its own ACL user (user, password),
 * restricted by the administrator to its key_prefix and to the tier's
 * commands, on every node:
 *   ACL SETUSER T reset on >PW ~PREFIX* resetchannels -@all +cluster|slots
 *       +exists +get +set +asking
 * Redis refuses everything else (another tenant's keys, KEYS, SCAN,
 * FLUSHALL, CLIENT, CONFIG...) with NOPERM, a miss here.
 * The wire: plain TCP (Debian 12's hiredis has no TLS), AUTH in clear: one
 * trust domain on the wire; key_file keeps values unforgeable even so.
 * Faults: every connection and every reply waits at most timeout_ms; a
 * node that fails or stalls is a miss (lookup) or -EIO (store), dropped and
 * reconnected on the next call; the pool and the other tiers are untouched.
 */
struct kvrt_tier_redis_opts {
	const char *nodes;		/* seeds: "host:port[,host:port...]" */
	const char *user;		/* ACL user; NULL or "": the default user */
	const char *password;
	const char *key_prefix;		/* NULL: "kvt:"; at most 128 bytes */
	uint32_t timeout_ms;		/* 0: 1000 */
	uint32_t flags;			/* 0 or KVRT_TIER_WRITE_BACK */
	const struct kvrt_layout *layout;	/* as for the SSD tier */
	uint32_t ttl_s;			/* blocks expire after this (SET EX); 0: never */
	uint32_t writeback_max;		/* as for the SSD tier */
	/* The tenant's tier key (since 0.8); NULL: derived from user and password. */
	const char *key_file;
	uint64_t reserved[2];		/* 0 */
};

/*
 * Connect to the cluster and add its tier to this handle's tiers.  -EINVAL
 * NULL arguments, flags or reserved fields, a seed list that does not
 * parse, a key_prefix over 128 bytes, user or password of 128 or 256 bytes
 * or more, writeback_max as for the SSD tier; key_file's errors
 * (-ENOENT, -ELOOP a symlink, -EPERM not the caller's or not 0600,
 * -EINVAL not a regular file of 16 to 4096 bytes, -EIO); -EAGAIN the
 * write-back thread could not start; -EACCES the credentials refused;
 * -ECONNREFUSED or -ETIMEDOUT no seed answered; -EPROTO not a cluster;
 * -ENOMEM.  On failure nothing is added.
 */
int kvrt_tier_open_redis(struct kvrt_space *space, const struct kvrt_tier_redis_opts *opts,
			 struct kvrt_tier **tier);

/* Remove the tier from its handle's tiers and close it; NULL is a no-op. */
void kvrt_tier_close(struct kvrt_tier *tier);

struct kvrt_tier_stats {
	uint32_t kind;			/* enum kvrt_tier_kind */
	uint32_t reserved0;		/* 0 */
	uint64_t capacity_bytes;
	uint64_t used_bytes;		/* blocks held x block_bytes */
	uint64_t blocks;		/* blocks held */
	uint64_t hits;			/* looked-up blocks it had and gave back whole */
	uint64_t misses;		/* lookups that asked it for the next hash, absent */
	uint64_t stores;		/* blocks written */
	uint64_t store_skips;		/* blocks asked to be stored that it had */
	uint64_t read_bytes;
	uint64_t write_bytes;
	uint64_t evictions;		/* blocks dropped to make room */
	uint64_t checksum_errors;	/* blocks whose data failed the checksum */
	uint64_t io_errors;		/* reads or writes that failed or came short */
	uint64_t redirects;		/* Redis: MOVED and ASK replies followed */
	uint64_t queued;		/* write-back: blocks waiting to be written now */
	uint64_t deferred;		/* write-back: blocks handed to its thread so far */
	uint64_t reserved[3];		/* 0 */
};

/* The tier's figures.  -EINVAL NULL arguments. */
int kvrt_tier_stats(struct kvrt_tier *tier, struct kvrt_tier_stats *stats);

/*
 * kvrt_lookup() across the pool and this handle's tiers: the longest
 * prefix of hashes[0..count) found, each hash in the first place that has
 * it.  Returns nr_hits and ids[0..nr_hits) with one reader reference each,
 * as kvrt_lookup() (drop them with kvrt_release()); where (may be NULL)
 * gets, per hit, 0 for the pool or n for the n-th tier opened on this
 * handle.  A tier hit takes a block of the space: when the space has none
 * left (-ENOSPC from kvrt_alloc_blocks), or a tier's read fails, the
 * prefix ends there; what is in the pool and the tiers stays as it was.
 * Errors as kvrt_lookup(), before any reference is taken.
 */
int kvrt_lookup_tiers(struct kvrt_space *space, uint32_t count,
		      const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint8_t *where);

/*
 * How many of hashes[0..count), from the first, this handle's tiers hold
 * (since 0.9), each hash in the first tier, in the order opened, that
 * holds the run it starts; the pool is not asked.  Nothing is read,
 * allocated or published: the SSD tier answers from its index, Redis with
 * EXISTS (a round trip per node involved).  A block found here can still
 * fail its check when kvrt_lookup_tiers() reads it, and a tier can evict
 * it meanwhile: kvrt_lookup_tiers() has the last word.  where (may be
 * NULL) gets, per hash held, n for the n-th tier opened.  Returns the
 * count, 0 with no tier open, or kvrt_lookup()'s argument errors
 * (-EINVAL NULL space or count 0, -E2BIG count > KVRT_MAX_BATCH, -EFAULT
 * hashes NULL).  Each tier counts a miss when it lacks the first hash it
 * is asked about, as for a lookup.
 */
int kvrt_tier_contains(struct kvrt_space *space, uint32_t count,
		       const uint8_t (*hashes)[KVRT_HASH_BYTES], uint8_t *where);

/*
 * Write blocks ids[i] (holding the data of hashes[i]) to every tier of
 * this handle that lacks them, or queue them for a write-back tier (see
 * KVRT_TIER_WRITE_BACK); a tier that has a hash only marks it used.  priorities NULL: KVRT_PRIO_DEFAULT each; else 0..KVRT_PRIO_MAX,
 * the eviction order in the tier as in the pool.  When a batch holds more
 * new blocks than a tier has room for, the first ones are stored.  Returns
 * the number of blocks written or queued (the most of any tier), or -EINVAL (NULL space,
 * count 0, an id outside the space, a priority above KVRT_PRIO_MAX),
 * -E2BIG (count > KVRT_MAX_BATCH), -EFAULT (ids or hashes NULL, or a block of ids with no memory behind it), -ENODEV
 * (no tier open on this handle), -ECHILD (a write-back tier of the parent,
 * in a fork()ed child), -EIO (a tier could not write or sync:
 * nothing of this call is in the SSD tier's index; on Redis the blocks
 * that were written stay; a write-back tier fails before queueing, except
 * when the queue overflows: what was queued stays), -ENOMEM.
 */
int kvrt_tier_store(struct kvrt_space *space, uint32_t count, const uint32_t *ids,
		    const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *priorities);

/*
 * Wait until every block queued on this handle's write-back tiers before
 * the call has been written (since 0.7).  Returns 0, -EINVAL (NULL),
 * -ECHILD (as kvrt_tier_store), or
 * the first error a write-back write met since the last call (-EIO,
 * -ENOMEM: those blocks are not in that tier, and stay in the pool as
 * long as the pool keeps them); the error is reported once.
 */
int kvrt_tier_flush(struct kvrt_space *space);

/*
 * Create a tenant's tier key (since 0.8): path, a new file (O_EXCL; a
 * symlink is not followed) of mode 0600 holding 32 random bytes, made
 * durable.  Give it as kvrt_tier_*_opts.key_file: a tier then trusts only
 * the blocks this key wrote.  Copy it, as a secret, to every host whose
 * engines share a Redis tier.  Returns 0, -EINVAL (NULL), -EEXIST (path
 * exists: a key is never overwritten), -EIO (no randomness, a short
 * write), or the errno of creating the file (-EACCES, -ENOENT, ...); on
 * failure no file is left behind.
 */
int kvrt_tier_key_create(const char *path);

/* ---- sequence block tables (since 0.5) --------------------------------------
 *
 * A struct kvrt_seqs manages the block tables of many sequences over one
 * paged cache of nr_blocks blocks of block_tokens tokens.  The cache itself
 * (host or GPU, any layout) stays the caller's: the table only hands out
 * block ids 0..nr_blocks-1 and keeps a reference count per block, the
 * number of sequences that hold it.  A sequence of len tokens holds
 * ceil(len / block_tokens) distinct blocks; token p lives in its block
 * p / block_tokens at offset p % block_tokens, as the CSR block tables of
 * the attention calls say.
 *
 * Sharing: kvrt_seq_fork() makes a sequence that shares every block of its
 * parent (beam search, parallel sampling).  Full blocks are never written
 * again, so they stay shared and are never copied.  The only block a
 * sequence writes into is its partial last block: when kvrt_seq_append()
 * finds that block held by another sequence too, it first copies it into a
 * free block (copy-on-write, through the caller's copy_block) and switches
 * this sequence to the copy.  kvrt_seq_truncate() (rolling back rejected
 * speculative tokens, editing a conversation) drops blocks past the new end
 * and never writes: a kept partial block that is shared is copied by the
 * next append.
 *
 * copy_block(arg, src, dst, ntokens) must copy the first ntokens token
 * slots (1 <= ntokens < block_tokens) of block src into block dst, for
 * every layer, K and V (and fp8 scales), and return 0 or a negative errno
 * (a positive return counts as -EIO).
 * Implement it with kvrt_copy_blocks() (host) or kvrt_gpu_copy_blocks()
 * (GPU, both arrays the device cache) on pair { src, dst }, or any copy of
 * the caller's; copying the whole block is fine.  It is called with the
 * table's lock held and must not call into the same table.  When it fails
 * the append returns its errno and nothing changed (dst is still free).
 *
 * Slots from kvrt_seq_append() are block * block_tokens + offset, the
 * int64_t slots of kvrt_append_kv() and kvrt_gpu_append_kv().
 * kvrt_seqs_csr() writes int32_t indptr, indices and seq_lens for any
 * subset of sequences: point a struct kvrt_block_table at them for
 * kvrt_attn_decode/prefill (copy them to the device for the kvrt_gpu_*
 * calls).  The attention calls need seq_lens >= 1: leave empty sequences
 * out of the subset.
 *
 * Prefix cache: kvrt_seq_blocks() lists a sequence's blocks; its first
 * len / block_tokens are full, so they can be copied to a pool space and
 * published under their kvrt_hash_prompt() hashes.  To start a sequence
 * from a kvrt_lookup() hit, either kvrt_seq_add() and kvrt_seq_append()
 * the hit's tokens, then copy the hit's blocks into the blocks the slots
 * name; or, when the caller picks the cache blocks itself, fill free blocks
 * and hand them over with kvrt_seq_add_blocks().
 *
 * Sequence ids are never 0, and a freed id stays unknown (-ENOENT).
 * Errors are negative errnos and leave the table, and the caller's output
 * arrays, unchanged: -EINVAL for a NULL table or pointer that the call
 * needs, -ENOENT for an id that is not a live sequence of this table,
 * -ENOMEM.  Thread safety: every call is thread-safe (a mutex per table),
 * but kvrt_seqs_destroy(), which no call may race.
 */
struct kvrt_seqs;

/* Zero-initialise, then set what matters. */
struct kvrt_seqs_opts {
	uint32_t nr_blocks;	/* blocks in the cache: ids 0..nr_blocks-1 */
	uint32_t block_tokens;	/* tokens per block */
	int (*copy_block)(void *arg, uint32_t src_block, uint32_t dst_block,
			  uint32_t ntokens);	/* copy-on-write; required */
	void *copy_arg;
	uint64_t reserved[4];	/* must be 0 */
};

/*
 * Create a table with every block free; *out is NULL on failure.  -EINVAL
 * for NULL out or opts, nr_blocks or block_tokens 0, copy_block NULL,
 * non-zero reserved fields; -EOVERFLOW when nr_blocks * block_tokens
 * exceeds INT32_MAX (positions must fit the CSR's int32); -ENOMEM.
 * kvrt_seqs_destroy: frees the table and its sequences (the cache's
 * contents are the caller's); NULL is a no-op.
 */
int kvrt_seqs_create(struct kvrt_seqs **out, const struct kvrt_seqs_opts *opts);
void kvrt_seqs_destroy(struct kvrt_seqs *seqs);

/* A new empty sequence; its id to *id. */
int kvrt_seq_add(struct kvrt_seqs *seqs, uint64_t *id);

/*
 * A new sequence of ntokens tokens in blocks[0..count), which the caller
 * has already filled (e.g. copied in from a kvrt_lookup() hit): the table
 * takes them from its free blocks.  count must be ceil(ntokens /
 * block_tokens) (0 and 0 is an empty sequence).  -EINVAL for blocks NULL
 * with count > 0, a count that does not match ntokens, a block >=
 * nr_blocks or listed twice; -EBUSY for a block a sequence holds.
 */
int kvrt_seq_add_blocks(struct kvrt_seqs *seqs, uint32_t count, const uint32_t *blocks,
			uint32_t ntokens, uint64_t *id);

/*
 * Reserve n more tokens at the end of sequence id and write their slots to
 * slots[0..n), taking free blocks as needed (copy-on-write first when the
 * partial last block is shared; see above).  n 0 is a no-op.  -EINVAL
 * slots NULL with n > 0; -ENOSPC when the free blocks do not suffice (none
 * is taken, no copy is made); copy_block's errno when it fails.
 */
int kvrt_seq_append(struct kvrt_seqs *seqs, uint64_t id, uint32_t n, int64_t *slots);

/* A new sequence sharing every block of parent, its id to *child.
 * -EOVERFLOW when a block already has INT32_MAX references. */
int kvrt_seq_fork(struct kvrt_seqs *seqs, uint64_t parent, uint64_t *child);

/*
 * Cut sequence id to its first len tokens.  Blocks past ceil(len /
 * block_tokens) are dropped, and freed when no sequence holds them any
 * more.  len equal to the length is a no-op; -ERANGE when len is greater
 * (a separate errno, so a rollback past the end is not mistaken for a bad
 * argument).
 */
int kvrt_seq_truncate(struct kvrt_seqs *seqs, uint64_t id, uint32_t len);

/* Drop sequence id and its references. */
int kvrt_seq_free(struct kvrt_seqs *seqs, uint64_t id);

/* Tokens in sequence id (>= 0). */
int kvrt_seq_len(struct kvrt_seqs *seqs, uint64_t id);

/*
 * Sequence id's blocks in token order to blocks[]; returns how many,
 * ceil(kvrt_seq_len() / block_tokens).  -ENOSPC, writing nothing, when cap
 * is smaller; -EINVAL blocks NULL with cap > 0.
 */
int kvrt_seq_blocks(struct kvrt_seqs *seqs, uint64_t id, uint32_t *blocks, uint32_t cap);

/*
 * CSR block tables of the nseq sequences ids[] (an id may repeat), in that
 * order: indptr[0..nseq], seq_lens[0..nseq), indices[0..indptr[nseq]).
 * kvrt_seqs_csr_size() writes indptr[nseq], the indices needed, to
 * *nindices; kvrt_seqs_csr() returns it, or -ENOSPC (nothing written) when
 * indices_cap is smaller.  Both: -EINVAL for NULL arguments (ids and
 * seq_lens may be NULL when nseq is 0, indices when indices_cap is 0) or
 * nseq > INT32_MAX; -ENOENT for an unknown id; -EOVERFLOW when the indices
 * would exceed INT32_MAX.
 */
int kvrt_seqs_csr_size(struct kvrt_seqs *seqs, uint32_t nseq, const uint64_t *ids,
		       uint32_t *nindices);
int kvrt_seqs_csr(struct kvrt_seqs *seqs, uint32_t nseq, const uint64_t *ids, int32_t *indptr,
		  int32_t *indices, uint32_t indices_cap, int32_t *seq_lens);

/* The number of sequences holding block (>= 0); -EINVAL for block >=
 * nr_blocks. */
int kvrt_seqs_block_refs(struct kvrt_seqs *seqs, uint32_t block);

struct kvrt_seqs_stats {
	uint32_t nr_blocks;
	uint32_t block_tokens;
	uint32_t free_blocks;
	uint32_t used_blocks;	/* held by a sequence: nr_blocks - free_blocks */
	uint32_t shared_blocks;	/* held by more than one sequence */
	uint32_t nr_seqs;
	uint64_t block_refs;	/* sum of the sequences' block counts: the blocks
				 * they would use without sharing */
	uint64_t copies;	/* copy-on-write copies made since creation */
	uint64_t reserved[4];	/* 0 */
};

int kvrt_seqs_stats(struct kvrt_seqs *seqs, struct kvrt_seqs_stats *stats);

/* ---- paged attention on the CPU ---------------------------------------------
 *
 * Block tables are CSR: sequence s owns blocks indices[indptr[s] ..
 * indptr[s + 1]) in order, and seq_lens[s] tokens (1 <= seq_lens[s] <=
 * blocks * block_tokens).  Token position p of sequence s lives in block
 * indices[indptr[s] + p / block_tokens], slot p % block_tokens.
 */
struct kvrt_block_table {
	uint32_t num_seqs;
	const int32_t *indptr;	/* [num_seqs + 1] */
	const int32_t *indices;	/* [indptr[num_seqs]] */
	const int32_t *seq_lens;	/* [num_seqs], tokens in the cache incl. new ones */
};

/* One layer of a paged cache. */
struct kvrt_kv_cache {
	const struct kvrt_layout *layout;
	const void *base;
	const float *scales;	/* fp8 only, else NULL */
	uint32_t layer;
};

enum kvrt_attn_impl {
	KVRT_ATTN_FAST = 0,	/* vectorised, threaded */
	KVRT_ATTN_REFERENCE = 1,	/* plain and obviously right */
};

struct kvrt_attn_params {
	uint32_t num_q_heads;	/* a multiple of the layout's num_kv_heads (GQA) */
	float sm_scale;		/* usually 1 / sqrt(head_dim) */
	int32_t window_left;	/* sliding window: keys at p >= q_pos - window_left; -1: none */
	float logit_softcap;	/* 0: none; else cap * tanh(logit / cap) */
	enum kvrt_dtype q_dtype;	/* f32, f16 or bf16 */
	enum kvrt_dtype o_dtype;	/* f32, f16 or bf16 */
	enum kvrt_attn_impl impl;
	uint32_t num_threads;	/* 0: one per online CPU */
};

/*
 * Decode: one query token per sequence, at position seq_lens[s] - 1.
 * q: [num_seqs][num_q_heads][head_dim], out: same shape, dtypes per params.
 * -EINVAL on inconsistent shapes or dtypes, -ERANGE when a block of the
 * table breaks the bounds rule (top of this file), -EFAULT when one is a
 * space's block with no memory behind it (same place), -ENOMEM on scratch
 * failure; out is untouched on failure.
 */
int kvrt_attn_decode(const struct kvrt_attn_params *params, const void *q,
		     const struct kvrt_kv_cache *kv, const struct kvrt_block_table *table,
		     void *out);

/*
 * Chunked prefill: sequence s has q_indptr[s + 1] - q_indptr[s] query
 * tokens, the last ones of its seq_lens[s] (their K/V already appended),
 * attending causally to every earlier position including earlier chunks.
 * q: [q_indptr[num_seqs]][num_q_heads][head_dim], out: same shape.
 */
int kvrt_attn_prefill(const struct kvrt_attn_params *params, const void *q,
		      const int32_t *q_indptr, const struct kvrt_kv_cache *kv,
		      const struct kvrt_block_table *table, void *out);

/*
 * Worker threads kept between calls (since 0.4).  kvrt_attn_decode() and
 * kvrt_attn_prefill() create their threads and join them before returning,
 * which costs tens of microseconds per thread per call.  An engine that
 * calls them per layer can keep the threads instead: kvrt_workers_create()
 * starts num_threads - 1 threads (the calling thread is the first; 0: one
 * per CPU in the caller's affinity mask) that sleep between calls, and the
 * _on variants run on them.  params->num_threads caps how many take part
 * (0: all); fewer do when the call has little work, as without workers.
 * Results are bitwise those of the calls without workers.  A workers object
 * runs one call at a time: calls from several threads wait their turn.
 *
 * kvrt_workers_create: -EINVAL for a NULL workers or num_threads above
 * KVRT_WORKERS_MAX, -ENOMEM, -EAGAIN when a thread cannot be created (none
 * is left running).  kvrt_workers_destroy: NULL is a no-op; no call may be
 * running on the object.  The _on variants: -EINVAL for a NULL workers,
 * else as kvrt_attn_decode() and kvrt_attn_prefill().
 */
#define KVRT_WORKERS_MAX 1024

struct kvrt_workers;

int kvrt_workers_create(uint32_t num_threads, struct kvrt_workers **workers);
void kvrt_workers_destroy(struct kvrt_workers *workers);
int kvrt_attn_decode_on(struct kvrt_workers *workers, const struct kvrt_attn_params *params,
			const void *q, const struct kvrt_kv_cache *kv,
			const struct kvrt_block_table *table, void *out);
int kvrt_attn_prefill_on(struct kvrt_workers *workers, const struct kvrt_attn_params *params,
			 const void *q, const int32_t *q_indptr,
			 const struct kvrt_kv_cache *kv, const struct kvrt_block_table *table,
			 void *out);

/* ---- append (reshape and cache) ------------------------------------------
 *
 * Write the K and V of num_tokens new tokens of one layer (kv->layer) into
 * their slots: token i goes to block slots[i] / block_tokens, offset
 * slots[i] % block_tokens.  A negative slot skips the token (padding).
 * k, v: [num_tokens][num_kv_heads][head_dim] of src_dtype (f32, f16 or
 * bf16), converted to the cache's dtype with round-to-nearest-even.
 *
 * kv->base (and kv->scales for fp8) must point to writable memory: the
 * struct is the attention's read view, append writes through it.
 *
 * fp8 e4m3 caches keep one float scale per (layer, kv, block, head); a
 * stored byte q means kvrt_fp8(q) * scale.  Rule, per (block, head), applied
 * token by token in the order given:
 *   - writing offset 0 starts the block afresh: scale = absmax / 448 of
 *     that token's head vector (0 if it is all zeros);
 *   - writing offset t > 0 with absmax / 448 > scale raises the scale to
 *     absmax / 448 and requantizes every other slot of the block's head
 *     with the new scale (old values are decoded with the old scale), so
 *     values are never clipped;
 *   - otherwise the value is quantized with the block's current scale.
 * So offset 0 of a block must be appended before its other offsets (as
 * engines do), and non-finite inputs give unspecified fp8 contents.
 *
 * All-or-nothing validation: -EINVAL (nothing written) for a NULL pointer,
 * an inconsistent layout, a layer >= num_layers, src_dtype not f32/f16/
 * bf16, a missing fp8 scales pointer, or any slot >= num_blocks *
 * block_tokens; -ERANGE (nothing written) when a slot's block breaks the
 * bounds rule (top of this file); -EFAULT (nothing written) when it is a
 * space's block with no memory behind it (same place).  num_tokens 0 is a
 * no-op.  Not thread-safe against other writers of the same blocks.
 */
int kvrt_append_kv(const struct kvrt_kv_cache *kv, const void *k, const void *v,
		   enum kvrt_dtype src_dtype, const int64_t *slots, uint32_t num_tokens);

/* ---- block copies -------------------------------------------------------------
 *
 * Copy whole blocks between two block arrays of the same geometry (layers,
 * KV heads, head dim, block tokens, dtype), each with its own strides, e.g.
 * a layer-major cache and a block-major pool.  fp8 scales travel with
 * their blocks.  The CPU implementation copies with memcpy over the largest
 * runs both layouts keep contiguous (a whole block for two block-major
 * arrays, one (layer, K/V) plane of a block between block-major and
 * layer-major).  The GPU implementation will sit behind the same call.
 */
struct kvrt_block_array {
	const struct kvrt_layout *layout;
	void *base;
	float *scales;		/* fp8 only, else NULL */
};

struct kvrt_block_pair {
	uint32_t src;		/* block in the source array */
	uint32_t dst;		/* block in the destination array */
};

#define KVRT_COPY_ASYNC (1U << 0)	/* run on the handle's copy thread */

/*
 * Copy count blocks.  Validation happens in the call, before anything is
 * copied: -EINVAL for NULL arguments, unknown flags, inconsistent layouts,
 * geometries that differ, missing fp8 scales, an id >= the array's
 * num_blocks, a destination id twice, or (same base and layout) an id that
 * is both a source and a destination; -ERANGE when a listed block of
 * either array breaks the bounds rule (top of this file); -EFAULT when
 * one is a space's block with no memory behind it, e.g. an id the space
 * never backed (same place; never a signal); -ENOMEM.  count 0 is a no-op.
 *
 * done NULL: the copy runs in the caller and the call returns its result.
 * done non-NULL: *done receives a handle; with KVRT_COPY_ASYNC the copy
 * runs on the handle's copy thread (one per struct kvrt, started on first
 * use, copies complete in submission order), without it the copy has
 * completed on return.  pairs are copied; the arrays' memory must stay
 * valid until completion.  Thread-safe.
 */
int kvrt_copy_blocks(struct kvrt *k, const struct kvrt_block_array *dst,
		     const struct kvrt_block_array *src, const struct kvrt_block_pair *pairs,
		     uint32_t count, uint32_t flags, struct kvrt_copy **done);

/* 0 when the copy completed, -EAGAIN while it runs, else its errno. */
int kvrt_copy_poll(struct kvrt_copy *copy);

/* Wait for completion; returns what kvrt_copy_poll() would then. */
int kvrt_copy_wait(struct kvrt_copy *copy);

/* Wait for completion if needed, then free the handle.  NULL: no-op. */
void kvrt_copy_free(struct kvrt_copy *copy);

/* ---- GPU (since 0.3) --------------------------------------------------------
 *
 * libkvrt drives NVIDIA GPUs through the CUDA driver API.  libcuda.so.1 is
 * opened at run time ($KVRT_LIBCUDA names another file), so the library
 * links and runs on hosts without a driver: there kvrt_gpu_probe() and
 * kvrt_gpu_open() return -ENODEV and say why.  The kernels are built by
 * nvcc into a fatbin (sm_80, sm_90a, PTX for newer GPUs) embedded in the
 * library; a build without nvcc has no GPU backend and says so the same way.
 *
 * A struct kvrt_gpu works in the device's primary context, the one the
 * CUDA runtime (and so PyTorch) uses: device pointers from cudaMalloc or a
 * torch tensor's data_ptr() are valid here.  Device memory is named by
 * plain pointers (CUdeviceptr values cast to void *) in the same structs
 * the CPU path takes: struct kvrt_kv_cache's base and scales, struct
 * kvrt_block_table's arrays.  stream is a CUstream (NULL: the legacy
 * default stream); every call is asynchronous on it unless it says not.
 * One struct kvrt_gpu may be used from several threads; a plan from one
 * at a time.
 */
struct kvrt_gpu;
struct kvrt_gpu_plan;

/*
 * 0 when a GPU can be used: the driver loads, is CUDA 12.0 or newer, sees a
 * device, and the library has kernels.  Else -ENODEV and, when why is
 * not NULL, the reason in why[len] (e.g. "libcuda.so.1: cannot open
 * shared object file", "cuInit: CUDA_ERROR_NO_DEVICE", "built without
 * nvcc").  Loads the driver once per call; cheap enough for a startup check.
 */
int kvrt_gpu_probe(char *why, size_t len);

/*
 * Open device ordinal device (0 is the first) for handle k, retaining its
 * primary context and loading the kernels.  *out is NULL on failure.  -EINVAL NULL k or out, a
 * negative device; -ENODEV as kvrt_gpu_probe() or no such ordinal (the
 * reason goes to k's log); -ENOTSUP a device older than compute 8.0 (the
 * fatbin's oldest target); -ENOMEM.
 */
int kvrt_gpu_open(struct kvrt *k, int device, struct kvrt_gpu **out);

/* Unregisters what is still registered, frees plans' memory. NULL: no-op. */
void kvrt_gpu_close(struct kvrt_gpu *gpu);

struct kvrt_gpu_info {
	char name[128];			/* "NVIDIA H100 80GB HBM3" */
	int32_t device;			/* ordinal */
	int32_t cc_major, cc_minor;	/* compute capability */
	int32_t driver_version;		/* cuDriverGetVersion(): 12080 is 12.8 */
	uint32_t sm_count;
	uint32_t batch_memcpy;		/* 1: the driver has cuMemcpyBatchAsync */
	uint64_t total_mem;		/* bytes */
	uint64_t kernel_copy_max;	/* KVRT_GPU_COPY_AUTO: runs up to this size go
					 * through the copy kernel (0: not calibrated) */
	uint64_t registered_bytes;	/* host memory registered through this handle */
	uint64_t reserved[4];
};

int kvrt_gpu_info(struct kvrt_gpu *gpu, struct kvrt_gpu_info *info);

/*
 * Device memory and synchronisation, so that a C engine (or a test) needs
 * no CUDA runtime.  kvrt_gpu_memcpy copies bytes between any two of host
 * and device memory (unified addressing decides the direction) and
 * returns when done.  Errors: -EINVAL, -ENOMEM (device memory), -EIO for a
 * CUDA error (logged with its name).
 */
int kvrt_gpu_alloc(struct kvrt_gpu *gpu, size_t bytes, void **dptr);
int kvrt_gpu_free(struct kvrt_gpu *gpu, void *dptr);
int kvrt_gpu_memcpy(struct kvrt_gpu *gpu, void *dst, const void *src, size_t bytes);
int kvrt_gpu_sync(struct kvrt_gpu *gpu, void *stream);

/*
 * Read bytes of device memory at src with a kernel that only reads (each
 * thread keeps several 16-byte loads in flight): the read bandwidth a
 * reader such as decode attention can reach, for benchmarks (since 0.10).
 * src and bytes multiples of 16.  sum NULL: queued on stream.  Else *sum
 * is the sum mod 2^64 of the little-endian 32-bit words read, and the call
 * returns when the read is done (it synchronises stream).  -EINVAL,
 * -ENOMEM, -EIO.
 */
int kvrt_gpu_read_stream(struct kvrt_gpu *gpu, const void *src, size_t bytes, uint64_t *sum,
			 void *stream);

/*
 * Register host memory with the GPU so copies run at full speed and the
 * copy kernel can read and write it.  A space: the mapping's blocks
 * [0, nr_blocks), in pieces of at most 64 GiB that start and end on block
 * boundaries; called again after the space grew, it registers only what
 * is new (0 when nothing is).  Blocks backed after the registration are
 * registered by the first kvrt_gpu_copy_blocks() that touches them, so an
 * engine may register a space once, before it holds any block.  The space
 * must stay open until
 * kvrt_gpu_unregister_space() or kvrt_gpu_close().  kmod: the module's
 * pages are registered like any other mapping (the driver pins them).
 * -EINVAL, -EBUSY another kvrt_gpu registered it, -ENOMEM, -EIO.
 */
int kvrt_gpu_register_space(struct kvrt_gpu *gpu, struct kvrt_space *space);
int kvrt_gpu_unregister_space(struct kvrt_gpu *gpu, struct kvrt_space *space);

/* Any host range (page-aligned addr and bytes), e.g. a malloc'd buffer. */
int kvrt_gpu_register_host(struct kvrt_gpu *gpu, void *addr, size_t bytes);
int kvrt_gpu_unregister_host(struct kvrt_gpu *gpu, void *addr);

/*
 * Copy blocks, as kvrt_copy_blocks() and with its validation, between any
 * two of device memory and registered host memory, queued on stream.  The
 * pairs are split into the largest runs both layouts keep contiguous, then
 * moved by method:
 *   BATCH   one cuMemcpyBatchAsync (driver 12.8+) for all runs;
 *   KERNEL  one launch of a gather/scatter copy kernel that reads and
 *           writes the registered host mapping directly;
 *   MEMCPY  one cuMemcpyAsync per run;
 *   AUTO    runs up to kvrt_gpu_info.kernel_copy_max through the kernel,
 *           larger ones batched (or MEMCPY without batching); the
 *           threshold is measured on the device at the first AUTO copy
 *           (kvrt_gpu_copy_calibration() says how).
 * Never one call per layer per block unless the layouts leave nothing
 * larger.  Host memory must be registered (KERNEL needs it; the others
 * would fall back to slow staged copies).  -EINVAL, -ERANGE and -EFAULT
 * (as kvrt_copy_blocks: a block of a space that has no memory behind it),
 * -ENOTSUP BATCH without driver support or KERNEL without unified
 * addressing, -ENOMEM, -EIO.
 */
enum kvrt_gpu_copy_method {
	KVRT_GPU_COPY_AUTO = 0,
	KVRT_GPU_COPY_BATCH = 1,
	KVRT_GPU_COPY_KERNEL = 2,
	KVRT_GPU_COPY_MEMCPY = 3,
};

int kvrt_gpu_copy_blocks(struct kvrt_gpu *gpu, const struct kvrt_block_array *dst,
			 const struct kvrt_block_array *src, const struct kvrt_block_pair *pairs,
			 uint32_t count, enum kvrt_gpu_copy_method method, void *stream);

/*
 * What AUTO's threshold (kvrt_gpu_info.kernel_copy_max) came from (since
 * 0.10).  At the first AUTO copy (or the first kvrt_gpu_copy_calibration())
 * each method copies a 16 MiB host buffer of the kind pools are (2 MiB
 * aligned, madvise MADV_HUGEPAGE, registered as kvrt_gpu_register_space()
 * does) to the device in scattered runs of 4 KiB .. 1 MiB, three times
 * after a warm-up, timed with events, from 4 KiB upwards until the kernel
 * loses at two sizes in a row (larger runs favour the copy engines); the
 * threshold is the largest run size at which the kernel was faster.
 * $KVRT_GPU_KERNEL_COPY_MAX (bytes) sets it instead and nothing is
 * measured.  The same figures go to the handle's log (INFO).
 */
#define KVRT_GPU_CALIB_MAX 12

enum kvrt_gpu_calib_source {
	KVRT_GPU_CALIB_MEASURED = 0,	/* sizes[] below */
	KVRT_GPU_CALIB_ENV = 1,		/* $KVRT_GPU_KERNEL_COPY_MAX */
	KVRT_GPU_CALIB_NO_KERNEL = 2,	/* no unified addressing: never the kernel */
	KVRT_GPU_CALIB_FAILED = 3,	/* the buffer or the driver failed: 0 */
};

struct kvrt_gpu_copy_calib {
	uint64_t kernel_copy_max;	/* the threshold chosen */
	uint32_t source;		/* enum kvrt_gpu_calib_source */
	uint32_t num_sizes;		/* sizes[] filled */
	uint64_t buffer_bytes;		/* the host buffer copied from */
	int64_t buffer_thp_bytes;	/* of it, on transparent huge pages (smaps); -1 unknown */
	int32_t buffer_advise_errno;	/* 0, or why madvise(MADV_HUGEPAGE) failed */
	uint32_t reserved0;
	struct {
		uint64_t run_bytes;
		double kernel_gbps;	/* the copy kernel; 0: failed */
		double large_gbps;	/* the batched memcpy (else one memcpy per run) */
	} sizes[KVRT_GPU_CALIB_MAX];
	uint64_t reserved[4];
};

/* Calibrate now unless done; what it measured into *out.  -EINVAL. */
int kvrt_gpu_copy_calibration(struct kvrt_gpu *gpu, struct kvrt_gpu_copy_calib *out);

/*
 * Append on the GPU: kvrt_append_kv() with k, v, slots (int64) and the
 * cache in device memory.  Slots the host cannot check (they are on the
 * device): a negative one or one >= num_blocks * block_tokens is skipped.
 * fp8: the tokens of one block must be consecutive in the list (as an
 * engine appends them); the scale rule is kvrt_append_kv()'s.
 */
int kvrt_gpu_append_kv(struct kvrt_gpu *gpu, const struct kvrt_kv_cache *kv, const void *k,
		       const void *v, enum kvrt_dtype src_dtype, const int64_t *slots,
		       uint32_t num_tokens, void *stream);

/*
 * Attention on the GPU: plan on the host, then run (as FlashInfer does).
 *
 * kvrt_gpu_plan_create() makes a plan for batches of up to max_seqs
 * sequences and max_q_tokens query tokens (prefill; decode needs
 * max_seqs).  Its device workspace is allocated at the first plan, for
 * that plan's head counts: a later plan needing more tasks per sequence
 * (more KV heads, or more than 8 query heads per KV head) gets -E2BIG, so
 * keep one plan object per model shape.  Re-planning overwrites the task
 * list in place: the plan's previous run must have finished (synchronise
 * its stream first), as with any buffer a kernel still reads.  kvrt_gpu_plan_decode()/_prefill() look at the host copies of
 * the batch's lengths, split the work into CTA tasks (one task reads a KV
 * head's blocks once for all the query heads of its group; long
 * sequences in small batches are split along the keys, flash-decoding,
 * and merged after), and upload the task list with a synchronous copy.
 * Call them outside stream capture.  The run calls launch with a grid
 * fixed by the plan's capacity and read the task counts from the
 * workspace, so a run captured in a CUDA graph replays correctly after a
 * later plan of the same plan object.
 *
 * params: as the CPU's (impl and num_threads ignored); q_dtype and o_dtype
 * f16, bf16 or f32.  layout: head_dim 64, 128 or 256; block_tokens 1..128;
 * kv_dtype f16, bf16 or fp8 e4m3.  -EINVAL for what the GPU path does not
 * take, -E2BIG past the plan's capacity.
 */
int kvrt_gpu_plan_create(struct kvrt_gpu *gpu, uint32_t max_seqs, uint32_t max_q_tokens,
			 struct kvrt_gpu_plan **out);
void kvrt_gpu_plan_destroy(struct kvrt_gpu_plan *plan);

int kvrt_gpu_plan_decode(struct kvrt_gpu_plan *plan, const struct kvrt_attn_params *params,
			 const struct kvrt_layout *layout, uint32_t num_seqs,
			 const int32_t *seq_lens);
int kvrt_gpu_plan_prefill(struct kvrt_gpu_plan *plan, const struct kvrt_attn_params *params,
			  const struct kvrt_layout *layout, uint32_t num_seqs,
			  const int32_t *q_indptr, const int32_t *seq_lens);

/* Tasks and splits of the last plan, for tests and kvbench. */
struct kvrt_gpu_plan_info {
	uint32_t num_seqs;
	uint32_t num_work;	/* CTA tasks */
	uint32_t num_split;	/* (sequence, head group)s split along the keys */
	uint32_t split_tokens;	/* keys per task when split (a multiple of block_tokens) */
	uint32_t grid;		/* CTAs launched */
	uint32_t reserved[3];
};
int kvrt_gpu_plan_info(const struct kvrt_gpu_plan *plan, struct kvrt_gpu_plan_info *info);

/*
 * Run the last plan: q, out, kv->base, kv->scales, table's arrays (and
 * q_indptr) in device memory; table->num_seqs must be the plan's.  The
 * layer is kv->layer; the layout must match the planned one.
 */
int kvrt_gpu_attn_decode(struct kvrt_gpu_plan *plan, const void *q,
			 const struct kvrt_kv_cache *kv, const struct kvrt_block_table *table,
			 void *out, void *stream);
int kvrt_gpu_attn_prefill(struct kvrt_gpu_plan *plan, const void *q, const int32_t *q_indptr,
			  const struct kvrt_kv_cache *kv, const struct kvrt_block_table *table,
			  void *out, void *stream);

#if defined(__GNUC__) && __GNUC__ >= 4
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* KVRT_H */
