// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl stats: every counter and gauge.  Text is one "name value" per line
 * (grep-able, like sysctl -a); --json nests them; --prometheus is the
 * node_exporter textfile format (prometheus.c).
 */
#include <string.h>

#include "kvctl.h"

static void kv_kv(const char *prefix, const char *name, uint64_t v)
{
	printf("%s%s %llu\n", prefix, name, (unsigned long long)v);
}

static void kv_stats_text(const struct kv_snap *s)
{
	char p[64];
	int i, k;

	kv_kv("pool.", "pool_bytes", s->pool_bytes);
	kv_kv("pool.", "free_bytes", s->free_bytes);
	kv_kv("pool.", "held_bytes", s->held_bytes);
	kv_kv("pool.", "chunk_bytes", s->chunk_bytes);
	kv_kv("pool.", "max_batch", s->max_batch);
	kv_kv("pool.", "max_space_bytes", s->max_space_bytes);
	kv_kv("pool.", "spaces", s->spaces);
	kv_kv("pool.", "allocs", s->allocs);
	kv_kv("pool.", "frees", s->frees);
	kv_kv("pool.", "alloc_failures", s->alloc_failures);
	kv_kv("pool.", "zeroed_chunks", s->zeroed_chunks);
	kv_kv("pool.", "reclaimed_bytes", s->reclaimed_bytes);
	kv_kv("pool.", "prefix_hits", s->prefix_hits);
	kv_kv("pool.", "prefix_misses", s->prefix_misses);
	kv_kv("pool.", "prefix_inserts", s->prefix_inserts);
	kv_kv("pool.", "prefix_dedups", s->prefix_dedups);
	kv_kv("pool.", "cached_bytes", s->cached_bytes);
	kv_kv("pool.", "published_bytes", s->published_bytes);
	for (k = 0; k < KV_CAUSES; k++)
		kv_kv("pool.evictions.", kv_cause_names[k], s->evictions[k]);
	kv_kv("tunables.", "shrinker_enabled", s->shrinker_enabled);
	kv_kv("tunables.", "min_cached_bytes", s->min_cached_bytes);
	kv_kv("tunables.", "event_queue_max", s->event_queue_max);
	kv_kv("tunables.", "uid_limit_default_bytes", s->uid_limit_default_bytes);
	for (i = 0; i < s->nr_nodes; i++) {
		snprintf(p, sizeof(p), "node%d.", s->nodes[i].id);
		kv_kv(p, "reserved_bytes", s->nodes[i].reserved);
		kv_kv(p, "free_bytes", s->nodes[i].free);
		kv_kv(p, "in_spaces_bytes", s->nodes[i].in_spaces);
		kv_kv(p, "held_bytes", s->nodes[i].held);
	}
	for (i = 0; i < s->nr_tenants; i++) {
		snprintf(p, sizeof(p), "uid.%llu.", (unsigned long long)s->tenants[i].uid);
		kv_kv(p, "limit_bytes", s->tenants[i].limit);
		kv_kv(p, "used_bytes", s->tenants[i].used);
		kv_kv(p, "spaces", s->tenants[i].spaces);
	}
	for (i = 0; i < s->nr_sp; i++) {
		const struct kv_space *sp = &s->sp[i];

		snprintf(p, sizeof(p), "space.%u.", sp->id);
		printf("%sname %s\n", p, sp->name);
		kv_kv(p, "uid", sp->uid);
		kv_kv(p, "persistent", sp->persistent);
		kv_kv(p, "clients", sp->clients);
		kv_kv(p, "block_bytes", sp->block_bytes);
		kv_kv(p, "quota_bytes", sp->quota_bytes);
		kv_kv(p, "backed_bytes", sp->backed_bytes);
		kv_kv(p, "free_blocks", sp->free);
		kv_kv(p, "owned_blocks", sp->owned);
		kv_kv(p, "published_blocks", sp->published);
		kv_kv(p, "cached_blocks", sp->cached);
		kv_kv(p, "hole_blocks", sp->holes);
		kv_kv(p, "hits", sp->hits);
		kv_kv(p, "misses", sp->misses);
		kv_kv(p, "hit_rate_permille", sp->hit_rate);
		kv_kv(p, "inserts", sp->inserts);
		kv_kv(p, "dedups", sp->dedups);
		for (k = 0; k < KV_CAUSES; k++) {
			char n[64];

			snprintf(n, sizeof(n), "evictions.%s", kv_cause_names[k]);
			kv_kv(p, n, sp->evictions[k]);
		}
	}
}

int cmd_stats(int argc, char **argv)
{
	struct kv_tiers tiers = { 0 };
	const char *tiers_dir;
	bool json, prom;
	struct kv_snap s;
	int r;

	r = kv_format_args("stats", argc, argv, &json, &prom, NULL, &tiers_dir);
	if (r >= 0)
		return r;
	/* The tiers first: a directory that cannot be read fails before anything is printed. */
	if (tiers_dir) {
		r = kv_tiers_read(tiers_dir, &tiers);
		if (r) {
			kv_err("stats: cannot read the tiers' directory %s: %s", tiers_dir,
			       strerror(-r));
			return KV_EXIT_FAIL;
		}
	}
	r = kv_snap_take(&s, KV_SNAP_POOL | KV_SNAP_NODES | KV_SNAP_SPACES | KV_SNAP_TENANTS);
	if (r) {
		/* A textfile scrape should still say the module is gone, and show the tiers. */
		if (prom && r == KV_EXIT_NOMODULE) {
			kv_prometheus_down();
			if (tiers_dir)
				kv_tiers_prometheus(&tiers);
		}
		kv_tiers_free(&tiers);
		return r;
	}
	if (prom) {
		r = kv_prometheus(&s);
		if (tiers_dir)
			kv_tiers_prometheus(&tiers);
	} else if (json) {
		kv_json_snap(&s, true, tiers_dir ? &tiers : NULL);
	} else {
		kv_stats_text(&s);
		if (tiers_dir) {
			printf("\n");
			kv_tiers_text(&tiers);
		}
	}
	kv_snap_free(&s);
	kv_tiers_free(&tiers);
	return r;
}
