// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl stats --prometheus: the Prometheus text exposition format as the
 * node_exporter textfile collector reads it: per family one # HELP and one
 * # TYPE line, then all its samples together; no timestamps.
 *
 * The pool-wide prefix and eviction sums cover the spaces alive now, so
 * they drop when a space is torn down; Prometheus takes a drop of a
 * counter as a reset.  The per-space series (labelled by id) never drop.
 */
#include <string.h>

#include "kvctl.h"

void kv_prom_family(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, quote and newline escaped. */
void kv_prom_label(const char *key, const char *v, bool first)
{
	printf("%s%s=\"", first ? "" : ",", key);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			printf("\\%c", *v);
		else if (*v == '\n')
			printf("\\n");
		else
			putchar(*v);
	}
	putchar('"');
}

static void kv_metric(const char *name, const char *type, const char *help, uint64_t v)
{
	kv_prom_family(name, type, help);
	printf("%s %llu\n", name, (unsigned long long)v);
}

static void kv_space_sample(const char *name, const struct kv_space *sp, uint64_t v)
{
	char id[16];

	snprintf(id, sizeof(id), "%u", sp->id);
	printf("%s{", name);
	kv_prom_label("space", sp->name, true);
	kv_prom_label("id", id, false);
	printf("} %llu\n", (unsigned long long)v);
}

void kv_prometheus_down(void)
{
	kv_metric("kvpool_up", "gauge", "1 when the kvpool module is loaded.", 0);
}

/* A metric read from a uint64_t field at off of a record. */
struct prom_metric {
	const char *name, *type, *help;
	size_t off;
};

#define SPACE_FIELD(f) offsetof(struct kv_space, f)
static const struct prom_metric kv_space_metrics[] = {
	{ "kvpool_space_persistent", "gauge", "1 when the space outlives its last descriptor.",
	  SPACE_FIELD(persistent) },
	{ "kvpool_space_clients", "gauge", "File descriptors joined to the space.",
	  SPACE_FIELD(clients) },
	{ "kvpool_space_block_bytes", "gauge", "Bytes per block.", SPACE_FIELD(block_bytes) },
	{ "kvpool_space_quota_bytes", "gauge", "The space's range: nr_blocks * block_bytes.",
	  SPACE_FIELD(quota_bytes) },
	{ "kvpool_space_backed_bytes", "gauge", "Bytes of the chunks the space holds.",
	  SPACE_FIELD(backed_bytes) },
	{ "kvpool_space_free_blocks", "gauge", "Free blocks.", SPACE_FIELD(free) },
	{ "kvpool_space_owned_blocks", "gauge", "Blocks owned by a descriptor.",
	  SPACE_FIELD(owned) },
	{ "kvpool_space_published_blocks", "gauge", "Published blocks with readers.",
	  SPACE_FIELD(published) },
	{ "kvpool_space_cached_blocks", "gauge", "Published blocks without readers (evictable).",
	  SPACE_FIELD(cached) },
	{ "kvpool_space_hole_blocks", "gauge", "Blocks whose pages the shrinker took.",
	  SPACE_FIELD(holes) },
	{ "kvpool_space_hits_total", "counter", "Looked-up blocks found.", SPACE_FIELD(hits) },
	{ "kvpool_space_misses_total", "counter", "Looked-up hashes not served.",
	  SPACE_FIELD(misses) },
	{ "kvpool_space_inserts_total", "counter", "Blocks published under a new hash.",
	  SPACE_FIELD(inserts) },
	{ "kvpool_space_dedups_total", "counter", "Published blocks whose hash was present.",
	  SPACE_FIELD(dedups) },
};

#define SNAP_FIELD(f) offsetof(struct kv_snap, f)
static const struct prom_metric kv_pool_metrics[] = {
	{ "kvpool_pool_bytes", "gauge", "Bytes of pinned pages the pool holds.",
	  SNAP_FIELD(pool_bytes) },
	{ "kvpool_free_bytes", "gauge", "Pool bytes no space holds.", SNAP_FIELD(free_bytes) },
	{ "kvpool_held_bytes", "gauge", "Bytes that left a space while still mapped or pinned.",
	  SNAP_FIELD(held_bytes) },
	{ "kvpool_chunk_bytes", "gauge", "Size of a full chunk.", SNAP_FIELD(chunk_bytes) },
	{ "kvpool_spaces", "gauge", "Live spaces.", SNAP_FIELD(spaces) },
	{ "kvpool_cached_bytes", "gauge", "Bytes of cached blocks, all spaces.",
	  SNAP_FIELD(cached_bytes) },
	{ "kvpool_published_bytes", "gauge", "Bytes of published blocks with readers.",
	  SNAP_FIELD(published_bytes) },
	{ "kvpool_allocs_total", "counter", "Blocks handed out by ALLOC since load.",
	  SNAP_FIELD(allocs) },
	{ "kvpool_frees_total", "counter", "Blocks returned by FREE or close since load.",
	  SNAP_FIELD(frees) },
	{ "kvpool_alloc_failures_total", "counter", "ALLOC calls that failed after validation.",
	  SNAP_FIELD(alloc_failures) },
	{ "kvpool_zeroed_chunks_total", "counter", "Chunks scrubbed for another space.",
	  SNAP_FIELD(zeroed_chunks) },
	{ "kvpool_reclaimed_bytes_total", "counter", "Bytes the shrinker gave back.",
	  SNAP_FIELD(reclaimed_bytes) },
	{ "kvpool_prefix_hits_total", "counter", "Looked-up blocks found, live spaces.",
	  SNAP_FIELD(prefix_hits) },
	{ "kvpool_prefix_misses_total", "counter", "Looked-up hashes not served, live spaces.",
	  SNAP_FIELD(prefix_misses) },
	{ "kvpool_prefix_inserts_total", "counter", "Blocks published under a new hash, live "
	  "spaces.", SNAP_FIELD(prefix_inserts) },
	{ "kvpool_prefix_dedups_total", "counter", "Published blocks whose hash was present, "
	  "live spaces.", SNAP_FIELD(prefix_dedups) },
	{ "kvpool_shrinker_enabled", "gauge", "1 when the shrinker may reclaim.",
	  SNAP_FIELD(shrinker_enabled) },
	{ "kvpool_min_cached_bytes", "gauge", "Cached bytes the shrinker leaves alone.",
	  SNAP_FIELD(min_cached_bytes) },
	{ "kvpool_event_queue_max", "gauge", "Events queued per descriptor at most.",
	  SNAP_FIELD(event_queue_max) },
	{ "kvpool_uid_limit_default_bytes", "gauge", "Limit of uids without their own (0: none).",
	  SNAP_FIELD(uid_limit_default_bytes) },
};

/* A gauge per uint64_t field of an array of records, one sample a record. */
struct prom_col {
	const char *name, *help;
	size_t off;
};

static const struct prom_col node_cols[] = {
	{ "kvpool_node_reserved_bytes", "Bytes the pool holds on the node.",
	  offsetof(struct kv_node, reserved) },
	{ "kvpool_node_free_bytes", "Bytes on the node no space holds.",
	  offsetof(struct kv_node, free) },
	{ "kvpool_node_in_spaces_bytes", "Bytes on the node held by spaces.",
	  offsetof(struct kv_node, in_spaces) },
	{ "kvpool_node_held_bytes", "Bytes on the node waiting for a mapping or pin.",
	  offsetof(struct kv_node, held) },
};

static const struct prom_col tenant_cols[] = {
	{ "kvpool_uid_limit_bytes", "The uid's limit in effect (0: none).",
	  offsetof(struct kv_tenant, limit) },
	{ "kvpool_uid_used_bytes", "Bytes of chunks backing the uid's spaces.",
	  offsetof(struct kv_tenant, used) },
	{ "kvpool_uid_spaces", "Spaces the uid owns.", offsetof(struct kv_tenant, spaces) },
};

static unsigned long long node_id(const void *rec)
{
	return (unsigned long long)((const struct kv_node *)rec)->id;
}

static unsigned long long tenant_uid(const void *rec)
{
	return ((const struct kv_tenant *)rec)->uid;
}

static void prom_columns(const struct prom_col *col, size_t ncol, const void *recs,
			 size_t stride, int nrec, const char *label,
			 unsigned long long (*id)(const void *rec))
{
	size_t c;
	int i;

	for (c = 0; c < ncol; c++) {
		kv_prom_family(col[c].name, "gauge", col[c].help);
		for (i = 0; i < nrec; i++) {
			const char *rec = (const char *)recs + (size_t)i * stride;

			printf("%s{%s=\"%llu\"} %llu\n", col[c].name, label, id(rec),
			       (unsigned long long)*(const uint64_t *)(rec + col[c].off));
		}
	}
}

int kv_prometheus(const struct kv_snap *s)
{
	char v[32];
	size_t m;
	int i, k;

	kv_metric("kvpool_up", "gauge", "1 when the kvpool module is loaded.", 1);
	for (m = 0; m < sizeof(kv_pool_metrics) / sizeof(kv_pool_metrics[0]); m++)
		kv_metric(kv_pool_metrics[m].name, kv_pool_metrics[m].type, kv_pool_metrics[m].help,
			  *(const uint64_t *)((const char *)s + kv_pool_metrics[m].off));
	kv_metric("kvpool_in_spaces_bytes", "gauge", "Pool bytes held by spaces.",
		 kv_pool_in_spaces(s));
	kv_prom_family("kvpool_evictions_total", "counter", "Evicted blocks per cause, live spaces.");
	for (k = 0; k < KV_CAUSES; k++)
		printf("kvpool_evictions_total{cause=\"%s\"} %llu\n", kv_cause_names[k],
		       (unsigned long long)s->evictions[k]);

	prom_columns(node_cols, sizeof(node_cols) / sizeof(node_cols[0]), s->nodes,
		     sizeof(s->nodes[0]), s->nr_nodes, "node", node_id);
	prom_columns(tenant_cols, sizeof(tenant_cols) / sizeof(tenant_cols[0]), s->tenants,
		     sizeof(s->tenants[0]), s->nr_tenants, "uid", tenant_uid);

	kv_prom_family("kvpool_space_info", "gauge", "1 per live space; labels name its owner.");
	for (i = 0; i < s->nr_sp; i++) {
		printf("kvpool_space_info{");
		kv_prom_label("space", s->sp[i].name, true);
		snprintf(v, sizeof(v), "%u", s->sp[i].id);
		kv_prom_label("id", v, false);
		snprintf(v, sizeof(v), "%llu", (unsigned long long)s->sp[i].uid);
		kv_prom_label("uid", v, false);
		printf("} 1\n");
	}
	for (m = 0; m < sizeof(kv_space_metrics) / sizeof(kv_space_metrics[0]); m++) {
		kv_prom_family(kv_space_metrics[m].name, kv_space_metrics[m].type,
			  kv_space_metrics[m].help);
		for (i = 0; i < s->nr_sp; i++)
			kv_space_sample(kv_space_metrics[m].name, &s->sp[i],
					*(const uint64_t *)((const char *)&s->sp[i] +
							    kv_space_metrics[m].off));
	}
	kv_prom_family("kvpool_space_evictions_total", "counter", "Evicted blocks of the space per "
		  "cause.");
	for (i = 0; i < s->nr_sp; i++) {
		for (k = 0; k < KV_CAUSES; k++) {
			printf("kvpool_space_evictions_total{");
			kv_prom_label("space", s->sp[i].name, true);
			snprintf(v, sizeof(v), "%u", s->sp[i].id);
			kv_prom_label("id", v, false);
			kv_prom_label("cause", kv_cause_names[k], false);
			printf("} %llu\n", (unsigned long long)s->sp[i].evictions[k]);
		}
	}
	return KV_EXIT_OK;
}
