// SPDX-License-Identifier: GPL-2.0
/*
 * The read commands that show state: status, spaces, space, blocks, check.
 * Text for people, --json for scripts; both come from one kv_snap.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvctl.h"

enum { OPT_JSON = 1, OPT_ID, OPT_SPACE };

static double kv_rate(uint64_t hits, uint64_t misses)
{
	return hits + misses ? (double)hits / (double)(hits + misses) : 0.0;
}

static void kv_print_evictions(const uint64_t *ev)
{
	int i;

	printf("%llu (", (unsigned long long)kv_sum(ev, KV_CAUSES));
	for (i = 0; i < KV_CAUSES; i++)
		printf("%s%s %llu", i ? ", " : "", kv_cause_names[i], (unsigned long long)ev[i]);
	printf(")\n");
}

/* The pool-wide part of status and stats --json, into the open object. */
void kv_json_pool(struct kv_json *j, const struct kv_snap *s)
{
	int i;

	kv_json_obj(j, "pool");
	kv_json_u64(j, "pool_bytes", s->pool_bytes);
	kv_json_u64(j, "free_bytes", s->free_bytes);
	kv_json_u64(j, "in_spaces_bytes", kv_pool_in_spaces(s));
	kv_json_u64(j, "held_bytes", s->held_bytes);
	kv_json_u64(j, "chunk_bytes", s->chunk_bytes);
	kv_json_u64(j, "max_batch", s->max_batch);
	kv_json_u64(j, "max_space_bytes", s->max_space_bytes);
	kv_json_u64(j, "spaces", s->spaces);
	kv_json_end(j, '}');

	kv_json_arr(j, "nodes");
	for (i = 0; i < s->nr_nodes; i++) {
		kv_json_obj(j, NULL);
		kv_json_u64(j, "node", (uint64_t)s->nodes[i].id);
		kv_json_u64(j, "reserved_bytes", s->nodes[i].reserved);
		kv_json_u64(j, "free_bytes", s->nodes[i].free);
		kv_json_u64(j, "in_spaces_bytes", s->nodes[i].in_spaces);
		kv_json_u64(j, "held_bytes", s->nodes[i].held);
		kv_json_end(j, '}');
	}
	kv_json_end(j, ']');

	kv_json_obj(j, "prefix");
	kv_json_u64(j, "hits", s->prefix_hits);
	kv_json_u64(j, "misses", s->prefix_misses);
	kv_json_num(j, "hit_rate", kv_rate(s->prefix_hits, s->prefix_misses));
	kv_json_u64(j, "inserts", s->prefix_inserts);
	kv_json_u64(j, "dedups", s->prefix_dedups);
	kv_json_u64(j, "cached_bytes", s->cached_bytes);
	kv_json_u64(j, "published_bytes", s->published_bytes);
	kv_json_end(j, '}');

	kv_json_obj(j, "evictions");
	for (i = 0; i < KV_CAUSES; i++)
		kv_json_u64(j, kv_cause_names[i], s->evictions[i]);
	kv_json_u64(j, "total", kv_sum(s->evictions, KV_CAUSES));
	kv_json_end(j, '}');

	kv_json_obj(j, "counters");
	kv_json_u64(j, "allocs", s->allocs);
	kv_json_u64(j, "frees", s->frees);
	kv_json_u64(j, "alloc_failures", s->alloc_failures);
	kv_json_u64(j, "zeroed_chunks", s->zeroed_chunks);
	kv_json_u64(j, "reclaimed_bytes", s->reclaimed_bytes);
	kv_json_end(j, '}');

	kv_json_obj(j, "tunables");
	kv_json_bool(j, "shrinker_enabled", s->shrinker_enabled);
	kv_json_u64(j, "min_cached_bytes", s->min_cached_bytes);
	kv_json_u64(j, "event_queue_max", s->event_queue_max);
	kv_json_u64(j, "uid_limit_default_bytes", s->uid_limit_default_bytes);
	kv_json_end(j, '}');

	kv_json_arr(j, "tenants");
	for (i = 0; i < s->nr_tenants; i++) {
		kv_json_obj(j, NULL);
		kv_json_u64(j, "uid", s->tenants[i].uid);
		kv_json_u64(j, "limit_bytes", s->tenants[i].limit);
		kv_json_u64(j, "used_bytes", s->tenants[i].used);
		kv_json_u64(j, "spaces", s->tenants[i].spaces);
		kv_json_end(j, '}');
	}
	kv_json_end(j, ']');
}

static void kv_status_json(const struct kv_snap *s)
{
	char feat[256], *p, *save = NULL;
	struct kv_json j;

	kv_json_init(&j, stdout, true);
	kv_json_obj(&j, NULL);
	kv_json_str(&j, "sysfs", kv_env.sysfs);
	kv_json_obj(&j, "device");
	kv_json_str(&j, "path", kv_env.dev);
	kv_json_bool(&j, "ok", !s->info_err);
	if (s->info_err) {
		kv_json_str(&j, "error", strerror(s->info_err));
	} else {
		kv_json_u64(&j, "api_version", s->info.api_version);
		kv_json_u64(&j, "page_size", s->info.page_size);
		kv_json_u64(&j, "chunk_size", s->info.chunk_size);
		kv_json_u64(&j, "nr_nodes", s->info.nr_nodes);
		kv_json_u64(&j, "node_mask", s->info.node_mask);
		kv_json_arr(&j, "features");
		kv_features(feat, sizeof(feat), s->info.features);
		for (p = strtok_r(feat, ",", &save); p; p = strtok_r(NULL, ",", &save))
			kv_json_str(&j, NULL, p);
		kv_json_end(&j, ']');
	}
	kv_json_end(&j, '}');
	kv_json_pool(&j, s);
	kv_json_end(&j, '}');
	kv_json_done(&j);
}

int cmd_status(int argc, char **argv)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN], b3[KV_BYTES_LEN], b4[KV_BYTES_LEN];
	char b5[KV_BYTES_LEN], feat[256];
	struct kv_snap s;
	bool json = false;
	int r, i;

	r = kv_format_args("status", argc, argv, &json, NULL, NULL, NULL);
	if (r >= 0)
		return r;
	r = kv_snap_take(&s, KV_SNAP_POOL | KV_SNAP_NODES | KV_SNAP_TENANTS | KV_SNAP_INFO);
	if (r)
		return r;
	if (json) {
		kv_status_json(&s);
		kv_snap_free(&s);
		return KV_EXIT_OK;
	}
	if (!s.info_err) {
		kv_features(feat, sizeof(feat), s.info.features);
		printf("kvpool     loaded: API %u, features %s\n", s.info.api_version, feat);
	} else {
		printf("kvpool     loaded (sysfs); %s: %s%s\n", kv_env.dev, strerror(s.info_err),
		       s.info_err == EACCES ? " (API version and features: root or the device's group)" : "");
	}
	printf("pool       %s reserved: %s free, %s in spaces, %s held; chunk %s\n",
	       kv_bytes(b1, sizeof(b1), s.pool_bytes), kv_bytes(b2, sizeof(b2), s.free_bytes),
	       kv_bytes(b3, sizeof(b3), kv_pool_in_spaces(&s)), kv_bytes(b4, sizeof(b4), s.held_bytes),
	       kv_bytes(b5, sizeof(b5), s.chunk_bytes));
	for (i = 0; i < s.nr_nodes; i++) {
		const struct kv_node *n = &s.nodes[i];

		printf("node%-6d %s reserved: %s free, %s in spaces, %s held\n", n->id,
		       kv_bytes(b1, sizeof(b1), n->reserved), kv_bytes(b2, sizeof(b2), n->free),
		       kv_bytes(b3, sizeof(b3), n->in_spaces), kv_bytes(b4, sizeof(b4), n->held));
	}
	printf("spaces     %llu: %s cached, %s published\n", (unsigned long long)s.spaces,
	       kv_bytes(b1, sizeof(b1), s.cached_bytes), kv_bytes(b2, sizeof(b2), s.published_bytes));
	printf("prefix     hit rate %.1f%% (%llu hits, %llu misses); %llu inserts, %llu dedups\n",
	       100 * kv_rate(s.prefix_hits, s.prefix_misses), (unsigned long long)s.prefix_hits,
	       (unsigned long long)s.prefix_misses, (unsigned long long)s.prefix_inserts,
	       (unsigned long long)s.prefix_dedups);
	printf("evictions  ");
	kv_print_evictions(s.evictions);
	printf("counters   allocs %llu, frees %llu, alloc failures %llu, zeroed chunks %llu, "
	       "reclaimed %s\n", (unsigned long long)s.allocs, (unsigned long long)s.frees,
	       (unsigned long long)s.alloc_failures, (unsigned long long)s.zeroed_chunks,
	       kv_bytes(b1, sizeof(b1), s.reclaimed_bytes));
	printf("tunables   shrinker_enabled=%llu min_cached_bytes=%llu event_queue_max=%llu "
	       "uid_limit_default_bytes=%llu\n", (unsigned long long)s.shrinker_enabled,
	       (unsigned long long)s.min_cached_bytes, (unsigned long long)s.event_queue_max,
	       (unsigned long long)s.uid_limit_default_bytes);
	for (i = 0; i < s.nr_tenants; i++) {
		const struct kv_tenant *t = &s.tenants[i];

		printf("%-10s uid %llu: limit %s, used %s, %llu space%s\n", i ? "" : "tenants",
		       (unsigned long long)t->uid,
		       t->limit ? kv_bytes(b1, sizeof(b1), t->limit) : "none",
		       kv_bytes(b2, sizeof(b2), t->used), (unsigned long long)t->spaces,
		       t->spaces == 1 ? "" : "s");
	}
	if (s.tenants_hidden)
		printf("tenants    (per-uid usage is readable by root only)\n");
	else if (!s.nr_tenants)
		printf("tenants    none\n");
	kv_snap_free(&s);
	return KV_EXIT_OK;
}

static int kv_name_width(const struct kv_snap *s)
{
	int i, w = 4;

	for (i = 0; i < s->nr_sp; i++)
		if ((int)strlen(s->sp[i].name) > w)
			w = (int)strlen(s->sp[i].name);
	return w;
}

/* The snapshot as one JSON document on stdout: its pool (with_pool), then its spaces. */
void kv_json_snap(const struct kv_snap *s, bool with_pool, const struct kv_tiers *tiers)
{
	struct kv_json j;
	int i;

	kv_json_init(&j, stdout, true);
	kv_json_obj(&j, NULL);
	if (with_pool)
		kv_json_pool(&j, s);
	kv_json_arr(&j, "spaces");
	for (i = 0; i < s->nr_sp; i++)
		kv_json_space(&j, NULL, &s->sp[i]);
	kv_json_end(&j, ']');
	if (tiers)
		kv_tiers_json(&j, "ssd_tiers", tiers);
	kv_json_end(&j, '}');
	kv_json_done(&j);
}

int cmd_spaces(int argc, char **argv)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN], b3[KV_BYTES_LEN];
	struct kv_snap s;
	bool json = false;
	int r, i, w;

	r = kv_format_args("spaces", argc, argv, &json, NULL, NULL, NULL);
	if (r >= 0)
		return r;
	r = kv_snap_take(&s, KV_SNAP_SPACES);
	if (r)
		return r;
	if (json) {
		kv_json_snap(&s, false, NULL);
		kv_snap_free(&s);
		return KV_EXIT_OK;
	}
	if (!s.nr_sp) {
		printf("no spaces\n");
		kv_snap_free(&s);
		return KV_EXIT_OK;
	}
	w = kv_name_width(&s);
	printf("%4s %-*s %6s %4s %4s %10s %10s %10s %7s %7s %7s %7s %7s %6s\n", "ID", w, "NAME",
	       "UID", "CLI", "PERS", "BLOCK", "QUOTA", "BACKED", "FREE", "OWNED", "PUBL",
	       "CACHED", "HOLES", "HIT%");
	for (i = 0; i < s.nr_sp; i++) {
		const struct kv_space *sp = &s.sp[i];

		printf("%4u %-*s %6llu %4llu %4s %10s %10s %10s %7llu %7llu %7llu %7llu %7llu %5.1f%%\n",
		       sp->id, w, sp->name, (unsigned long long)sp->uid,
		       (unsigned long long)sp->clients, sp->persistent ? "yes" : "no",
		       kv_bytes(b1, sizeof(b1), sp->block_bytes),
		       kv_bytes(b2, sizeof(b2), sp->quota_bytes),
		       kv_bytes(b3, sizeof(b3), sp->backed_bytes), (unsigned long long)sp->free,
		       (unsigned long long)sp->owned, (unsigned long long)sp->published,
		       (unsigned long long)sp->cached, (unsigned long long)sp->holes,
		       sp->hit_rate / 10.0);
	}
	kv_snap_free(&s);
	return KV_EXIT_OK;
}

/* NAME or --id ID, and --json, for space and blocks. */
static int kv_space_args(const char *cmd, int argc, char **argv, bool named_opt,
			 const char **name, long *id, bool *json)
{
	static const struct topt opts[] = {
		{ .name = "--json", .kind = TOPT_ID, .id = OPT_JSON },
		{ .name = "--id", .arg = "ID", .kind = TOPT_ID, .id = OPT_ID },
		{ .name = "--space", .arg = "NAME", .kind = TOPT_ID, .id = OPT_SPACE },
		{ .name = NULL },
	};
	struct kv_args a;
	const char *v;
	uint64_t n;
	int o;

	kv_args_init(&a, cmd, argc, argv);
	while ((o = kv_args_next(&a, opts, &v)) != KV_OPT_END) {
		switch (o) {
		case KV_OPT_HELP:
			return kv_help(cmd);
		case KV_OPT_ERR:
			return KV_EXIT_USAGE;
		case OPT_JSON:
			*json = true;
			break;
		case OPT_ID:
			if (kv_opt_u64(cmd, "id", v, 0, UINT32_MAX, false, &n))
				return KV_EXIT_USAGE;
			*id = (long)n;
			break;
		case OPT_SPACE:
			if (!named_opt)
				return kv_usage(cmd, "give the space as NAME, without --space");
			*name = v;
			break;
		case KV_OPT_POS:
			if (named_opt)
				return kv_usage(cmd, "unexpected argument '%s' (a space goes "
						"with --space NAME)", v);
			if (*name)
				return kv_usage(cmd, "one space at a time ('%s' and '%s')", *name, v);
			*name = v;
			break;
		}
	}
	if (*name && *id >= 0)
		return kv_usage(cmd, "give a NAME or --id, not both");
	if (*name && !kv_valid_name(*name))
		return kv_usage(cmd, "'%s' is not a space name: 1 to %d characters of "
				"A-Z a-z 0-9 . _ -", *name, KVPOOL_NAME_MAX - 1);
	return -1;
}

static void kv_space_text(const struct kv_space *sp)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN];
	uint64_t backed = sp->free + sp->owned + sp->published + sp->cached + sp->holes;
	uint64_t nr = sp->block_bytes ? sp->quota_bytes / sp->block_bytes : 0;
	int i;

	printf("space %u %s\n", sp->id, sp->name);
	if (sp->have_dbg)
		printf("  owner       uid %llu, gid %llu, mode %04llo%s\n",
		       (unsigned long long)sp->uid, (unsigned long long)sp->gid,
		       (unsigned long long)sp->mode, sp->unlinked ? "; destroyed, still in use" : "");
	else
		printf("  owner       uid %llu\n", (unsigned long long)sp->uid);
	printf("  persistent  %s\n", sp->persistent ? "yes" : "no");
	printf("  clients     %llu\n", (unsigned long long)sp->clients);
	printf("  blocks      %s each; quota %s = %llu blocks\n",
	       kv_bytes(b1, sizeof(b1), sp->block_bytes), kv_bytes(b2, sizeof(b2), sp->quota_bytes),
	       (unsigned long long)nr);
	printf("  backed      %s of chunks; %llu blocks: %llu free, %llu owned, %llu published, "
	       "%llu cached, %llu holes; %llu not backed yet\n",
	       kv_bytes(b1, sizeof(b1), sp->backed_bytes), (unsigned long long)backed,
	       (unsigned long long)sp->free, (unsigned long long)sp->owned,
	       (unsigned long long)sp->published, (unsigned long long)sp->cached,
	       (unsigned long long)sp->holes, (unsigned long long)(nr > backed ? nr - backed : 0));
	if (sp->have_dbg) {
		printf("  readers     %llu\n", (unsigned long long)sp->readers);
		printf("  numa        %s, mask 0x%llx;", sp->policy, (unsigned long long)sp->node_mask);
		for (i = 0; i < sp->nr_node_bytes; i++)
			printf(" node%d %s", sp->node_bytes[i].node,
			       kv_bytes(b1, sizeof(b1), sp->node_bytes[i].bytes));
		printf("\n");
	}
	printf("  prefix      hit rate %.1f%% (%llu hits, %llu misses); %llu inserts, %llu dedups\n",
	       sp->hit_rate / 10.0, (unsigned long long)sp->hits, (unsigned long long)sp->misses,
	       (unsigned long long)sp->inserts, (unsigned long long)sp->dedups);
	printf("  evictions   ");
	kv_print_evictions(sp->evictions);
	if (!sp->have_dbg)
		printf("  (as root, debugfs adds group, mode, readers and NUMA placement)\n");
}

int cmd_space(int argc, char **argv)
{
	const char *name = NULL;
	struct kv_json j;
	struct kv_snap s;
	bool json = false;
	long id = -1;
	int r, k;

	r = kv_space_args("space", argc, argv, false, &name, &id, &json);
	if (r >= 0)
		return r;
	if (!name && id < 0)
		return kv_usage("space", "which space? give its NAME (kvctl spaces lists them)");
	r = kv_snap_take(&s, KV_SNAP_SPACES | KV_SNAP_DEBUG);
	if (r)
		return r;
	k = kv_find_space(&s, "space", name, id);
	if (k < 0) {
		kv_snap_free(&s);
		return -k;
	}
	if (json) {
		kv_json_init(&j, stdout, true);
		kv_json_space(&j, NULL, &s.sp[k]);
		kv_json_done(&j);
	} else {
		kv_space_text(&s.sp[k]);
	}
	kv_snap_free(&s);
	return KV_EXIT_OK;
}

/*
 * The lines of space @id in a per-space debugfs dump: the "space ID
 * name=..." header, then indented lines.  Calls @fn on each, unindented.
 */
static int kv_dbg_section(char *text, unsigned int id,
			  void (*fn)(const char *line, void *arg), void *arg)
{
	char *line, *save = NULL;
	bool in = false;
	unsigned int got;
	int n = 0;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != ' ' && line[0] != '\t') {
			in = sscanf(line, "space %u", &got) == 1 && got == id;
			continue;
		}
		if (!in)
			continue;
		fn(line + strspn(line, " \t"), arg);
		n++;
	}
	return n;
}

struct kv_blk_out {
	struct kv_json *j;	/* NULL: text */
	bool lru;
};

static void kv_blk_line(const char *line, void *arg)
{
	struct kv_blk_out *o = arg;
	uint64_t block = 0, readers = 0, prio = 0;
	char state[16] = "?", hash[80] = "";
	const char *p;

	kv_u64_field(line, "block", &block);
	kv_u64_field(line, "prio", &prio);
	if (!o->lru) {
		kv_u64_field(line, "readers", &readers);
		if ((p = strstr(line, "state=")))
			sscanf(p, "state=%15s", state);
		if ((p = strstr(line, "hash=")))
			sscanf(p, "hash=%79s", hash);
	}
	if (o->j) {
		kv_json_obj(o->j, NULL);
		kv_json_u64(o->j, "block", block);
		if (!o->lru) {
			kv_json_str(o->j, "state", state);
			kv_json_u64(o->j, "readers", readers);
		}
		kv_json_u64(o->j, "prio", prio);
		if (!o->lru)
			kv_json_str(o->j, "hash", hash);
		kv_json_end(o->j, '}');
	} else if (o->lru) {
		printf("  %8llu %5llu\n", (unsigned long long)block, (unsigned long long)prio);
	} else {
		printf("  %8llu %-10s %7llu %5llu %s\n", (unsigned long long)block, state,
		       (unsigned long long)readers, (unsigned long long)prio, hash);
	}
}

static int kv_blocks_space(const struct kv_space *sp, bool json)
{
	char *hashes = NULL, *lru = NULL;
	struct kv_blk_out o = { NULL, false };
	struct kv_json j;
	int r;

	r = kv_debugfs_read("hashes", &hashes);
	if (!r)
		r = kv_debugfs_read("lru", &lru);
	if (r) {
		free(hashes);
		return r;
	}
	if (json) {
		kv_json_init(&j, stdout, true);
		o.j = &j;
		kv_json_obj(&j, NULL);
		kv_json_space(&j, "space", sp);
		kv_json_arr(&j, "hashes");
		kv_dbg_section(hashes, sp->id, kv_blk_line, &o);
		kv_json_end(&j, ']');
		o.lru = true;
		kv_json_arr(&j, "lru");
		kv_dbg_section(lru, sp->id, kv_blk_line, &o);
		kv_json_end(&j, ']');
		kv_json_end(&j, '}');
		kv_json_done(&j);
	} else {
		printf("space %u %s: %llu free, %llu owned, %llu published, %llu cached, %llu holes\n",
		       sp->id, sp->name, (unsigned long long)sp->free, (unsigned long long)sp->owned,
		       (unsigned long long)sp->published, (unsigned long long)sp->cached,
		       (unsigned long long)sp->holes);
		printf("\nhash index (published and cached blocks; debugfs hashes):\n");
		printf("  %8s %-10s %7s %5s %s\n", "BLOCK", "STATE", "READERS", "PRIO", "HASH");
		if (!kv_dbg_section(hashes, sp->id, kv_blk_line, &o))
			printf("  (none)\n");
		printf("\neviction order, first out first (cached blocks; debugfs lru):\n");
		printf("  %8s %5s\n", "BLOCK", "PRIO");
		o.lru = true;
		if (!kv_dbg_section(lru, sp->id, kv_blk_line, &o))
			printf("  (none)\n");
	}
	free(hashes);
	free(lru);
	return KV_EXIT_OK;
}

int cmd_blocks(int argc, char **argv)
{
	uint64_t tot[7] = { 0 };
	const char *name = NULL;
	struct kv_json j;
	struct kv_snap s;
	bool json = false;
	long id = -1;
	int r, i, k, w;

	r = kv_space_args("blocks", argc, argv, true, &name, &id, &json);
	if (r >= 0)
		return r;
	r = kv_snap_take(&s, KV_SNAP_SPACES | ((name || id >= 0) ? KV_SNAP_DEBUG : 0));
	if (r)
		return r;
	if (name || id >= 0) {
		k = kv_find_space(&s, "blocks", name, id);
		r = k < 0 ? -k : kv_blocks_space(&s.sp[k], json);
		kv_snap_free(&s);
		return r;
	}
	if (json) {
		kv_json_init(&j, stdout, true);
		kv_json_obj(&j, NULL);
		kv_json_arr(&j, "spaces");
	} else {
		w = kv_name_width(&s);
		printf("%4s %-*s %8s %8s %9s %8s %8s %8s %8s\n", "ID", w, "NAME", "FREE", "OWNED",
		       "PUBLISHED", "CACHED", "HOLES", "BACKED", "UNBACKED");
	}
	for (i = 0; i < s.nr_sp; i++) {
		const struct kv_space *sp = &s.sp[i];
		uint64_t backed = sp->free + sp->owned + sp->published + sp->cached + sp->holes;
		uint64_t nr = sp->block_bytes ? sp->quota_bytes / sp->block_bytes : 0;
		uint64_t unbacked = nr > backed ? nr - backed : 0;
		uint64_t v[7] = { sp->free, sp->owned, sp->published, sp->cached, sp->holes,
				  backed, unbacked };

		for (k = 0; k < 7; k++)
			tot[k] += v[k];
		if (json) {
			kv_json_obj(&j, NULL);
			kv_json_u64(&j, "id", sp->id);
			kv_json_str(&j, "name", sp->name);
			kv_json_u64(&j, "free", sp->free);
			kv_json_u64(&j, "owned", sp->owned);
			kv_json_u64(&j, "published", sp->published);
			kv_json_u64(&j, "cached", sp->cached);
			kv_json_u64(&j, "holes", sp->holes);
			kv_json_u64(&j, "backed", backed);
			kv_json_u64(&j, "unbacked", unbacked);
			kv_json_u64(&j, "block_bytes", sp->block_bytes);
			kv_json_end(&j, '}');
		} else {
			printf("%4u %-*s %8llu %8llu %9llu %8llu %8llu %8llu %8llu\n", sp->id, w,
			       sp->name, (unsigned long long)v[0], (unsigned long long)v[1],
			       (unsigned long long)v[2], (unsigned long long)v[3],
			       (unsigned long long)v[4], (unsigned long long)v[5],
			       (unsigned long long)v[6]);
		}
	}
	if (json) {
		kv_json_end(&j, ']');
		kv_json_obj(&j, "total");
		kv_json_u64(&j, "free", tot[0]);
		kv_json_u64(&j, "owned", tot[1]);
		kv_json_u64(&j, "published", tot[2]);
		kv_json_u64(&j, "cached", tot[3]);
		kv_json_u64(&j, "holes", tot[4]);
		kv_json_u64(&j, "backed", tot[5]);
		kv_json_u64(&j, "unbacked", tot[6]);
		kv_json_end(&j, '}');
		kv_json_end(&j, '}');
		kv_json_done(&j);
	} else {
		printf("%4s %-*s %8llu %8llu %9llu %8llu %8llu %8llu %8llu\n", "", w, "total",
		       (unsigned long long)tot[0], (unsigned long long)tot[1],
		       (unsigned long long)tot[2], (unsigned long long)tot[3],
		       (unsigned long long)tot[4], (unsigned long long)tot[5],
		       (unsigned long long)tot[6]);
	}
	kv_snap_free(&s);
	return KV_EXIT_OK;
}

int cmd_check(int argc, char **argv)
{
	char *text, *line, *save = NULL;
	struct kv_json j;
	bool json = false, ok;
	int r, n = 0;

	r = kv_format_args("check", argc, argv, &json, NULL, NULL, NULL);
	if (r >= 0)
		return r;
	r = kv_module_check();
	if (r)
		return r;
	r = kv_debugfs_read("check", &text);
	if (r)
		return r;
	ok = !strcmp(text, "ok\n") || !strcmp(text, "ok");
	if (json) {
		kv_json_init(&j, stdout, true);
		kv_json_obj(&j, NULL);
		kv_json_bool(&j, "ok", ok);
		kv_json_arr(&j, "violations");
		if (!ok)
			for (line = strtok_r(text, "\n", &save); line;
			     line = strtok_r(NULL, "\n", &save))
				kv_json_str(&j, NULL, line);
		kv_json_end(&j, ']');
		kv_json_end(&j, '}');
		kv_json_done(&j);
	} else if (ok) {
		printf("ok\n");
	} else {
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			printf("%s\n", line);
			n++;
		}
		if (n)
			kv_err("check: %d violation%s of the accounting invariants (%s/check)",
			       n, n == 1 ? "" : "s", kv_env.debugfs);
		else
			kv_err("check: %s/check printed nothing, not \"ok\"", kv_env.debugfs);
	}
	free(text);
	return ok ? KV_EXIT_OK : KV_EXIT_FAIL;
}
