/* SPDX-License-Identifier: MIT */
/*
 * pool/backend.h: what a pool backend implements, one table per backend
 * (as the kernel's dma-buf heaps give each heap its ops).  kvrt.c picks
 * the table at kvrt_open(), checks every argument that never reaches the
 * module (NULL pointers, counts, feature bits, names) and then calls
 * through k->ops, so a backend sees only arguments that passed those
 * checks, and the out structures already zeroed.  Errors are negative
 * errnos, the module's own for the same mistake.
 */
#ifndef KVRT_POOL_BACKEND_H
#define KVRT_POOL_BACKEND_H

#include <stddef.h>

#include "internal.h"

struct kvrt_backend_ops {
	/* What kvrt_backend() and kvrt_pool_info() report for this table. */
	enum kvrt_backend backend;

	/*
	 * Make the backend ready on k: set k->features and allocate k->pool,
	 * the backend's own part of k.  kmod opens device; on failure
	 * k->info says "DEVICE: reason" and nothing is left open or
	 * allocated.  The embedded backend ignores device and takes its cap
	 * from o->pool_bytes.
	 */
	int (*probe)(struct kvrt *k, const struct kvrt_open_opts *o, const char *device);
	/* kvrt_close(), after every space handle is closed: frees k->pool. */
	void (*close)(struct kvrt *k);
	/* info->backend is already set; fill the rest. */
	int (*pool_info)(struct kvrt *k, struct kvrt_pool_info *info);

	/*
	 * Create or join o->name (flags, reserved fields and name already
	 * checked): allocate the backend's space, fill its struct kvrt_space
	 * (k, base, block_bytes, nr_blocks, map_bytes, created) and return
	 * that in *out.  On failure nothing is left allocated or joined.
	 */
	int (*space_open)(struct kvrt *k, const struct kvrt_space_opts *o,
			  struct kvrt_space **out);
	/*
	 * Leave the space and free s (kvrt.c has unlinked it): the handle's
	 * blocks, references and records go with it.
	 */
	void (*space_close)(struct kvrt_space *s);
	int (*space_info)(struct kvrt_space *s, struct kvrt_space_info *info);
	/* m->chunk_bytes holds the default chunk size; the backend may correct it. */
	int (*mem_info)(struct kvrt_space *s, struct kvrt_mem_info *m);
	/* Destroy a persistent space by name (KVPOOL_FEAT_PERSIST checked). */
	int (*space_destroy)(struct kvrt *k, const char *name);

	/* All or nothing: count ids, or none on error. */
	int (*alloc)(struct kvrt_space *s, uint32_t count, uint32_t *ids);
	int (*free)(struct kvrt_space *s, uint32_t count, const uint32_t *ids);

	/*
	 * The prefix cache (KVPOOL_FEAT_PREFIX checked).  publish may replace
	 * ids[i] by the block already published under hashes[i]; prio and
	 * flags may be NULL.  lookup's devices may be NULL.
	 */
	int (*publish)(struct kvrt_space *s, uint32_t count, uint32_t *ids,
		       const uint8_t (*hashes)[KVRT_HASH_BYTES], const uint32_t *prio,
		       uint32_t *flags);
	int (*lookup)(struct kvrt_space *s, uint32_t count,
		      const uint8_t (*hashes)[KVRT_HASH_BYTES], uint32_t *ids, uint64_t *devices);
	int (*release)(struct kvrt_space *s, uint32_t count, const uint32_t *ids);
	int (*space_stats)(struct kvrt_space *s, struct kvrt_space_stats *st);

	/*
	 * KVPOOL_RESIDENCY_{ADD,DEL,CLEAR} for the device uuid: returns its
	 * device slot (>= 0) or an errno.  DEL passes entries with only
	 * .block set; CLEAR passes count 0 and entries NULL.
	 */
	int (*residency)(struct kvrt_space *s, uint32_t op, const uint8_t *uuid, uint32_t count,
			 const struct kvrt_residency_entry *entries);

	/* A descriptor that polls readable while events are queued; the space keeps it. */
	int (*events_fd)(struct kvrt_space *s);
	/* Never blocks: 0 when none is queued.  max is already capped. */
	int (*read_events)(struct kvrt_space *s, struct kvrt_event *ev, uint32_t max);
};

extern const struct kvrt_backend_ops kvrt_kmod_ops, kvrt_embedded_ops;

#endif /* KVRT_POOL_BACKEND_H */
