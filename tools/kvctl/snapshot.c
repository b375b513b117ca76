// SPDX-License-Identifier: GPL-2.0
/*
 * One read of everything kvctl shows: the pool's sysfs files, nodeN/,
 * space/ID/, uid_limit, the INFO ioctl and, best effort, debugfs "spaces".
 * sysfs has no atomic snapshot; each file is read once, so sums may be off
 * by what changed in between, which an admin view can live with.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "kvctl.h"

const char *const kv_cause_names[KV_CAUSES] = {
	[KVPOOL_EVICT_QUOTA] = "quota",
	[KVPOOL_EVICT_POOL] = "pool",
	[KVPOOL_EVICT_TENANT] = "tenant",
	[KVPOOL_EVICT_RECLAIM] = "reclaim",
	[KVPOOL_EVICT_ADMIN] = "admin",
};

#define POOL_FIELD(f) { #f, offsetof(struct kv_snap, f) }
static const struct { const char *file; size_t off; } kv_pool_files[] = {
	POOL_FIELD(pool_bytes), POOL_FIELD(free_bytes), POOL_FIELD(held_bytes),
	POOL_FIELD(chunk_bytes), POOL_FIELD(max_batch), POOL_FIELD(max_space_bytes),
	POOL_FIELD(spaces), POOL_FIELD(allocs), POOL_FIELD(frees),
	POOL_FIELD(alloc_failures), POOL_FIELD(zeroed_chunks), POOL_FIELD(reclaimed_bytes),
	POOL_FIELD(prefix_hits), POOL_FIELD(prefix_misses), POOL_FIELD(prefix_inserts),
	POOL_FIELD(prefix_dedups), POOL_FIELD(cached_bytes), POOL_FIELD(published_bytes),
	POOL_FIELD(shrinker_enabled), POOL_FIELD(min_cached_bytes),
	POOL_FIELD(event_queue_max), POOL_FIELD(uid_limit_default_bytes),
};

#define SPACE_FIELD(f, file) { file, offsetof(struct kv_space, f) }
static const struct { const char *file; size_t off; } kv_space_files[] = {
	SPACE_FIELD(uid, "uid"), SPACE_FIELD(persistent, "persistent"),
	SPACE_FIELD(clients, "clients"), SPACE_FIELD(block_bytes, "block_bytes"),
	SPACE_FIELD(quota_bytes, "quota_bytes"), SPACE_FIELD(backed_bytes, "backed_bytes"),
	SPACE_FIELD(free, "free_blocks"), SPACE_FIELD(owned, "owned_blocks"),
	SPACE_FIELD(published, "published_blocks"), SPACE_FIELD(cached, "cached_blocks"),
	SPACE_FIELD(holes, "hole_blocks"), SPACE_FIELD(hits, "hits"),
	SPACE_FIELD(misses, "misses"), SPACE_FIELD(hit_rate, "hit_rate"),
	SPACE_FIELD(inserts, "inserts"), SPACE_FIELD(dedups, "dedups"),
};

double kv_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t kv_sum(const uint64_t *v, int n)
{
	uint64_t s = 0;

	while (n--)
		s += *v++;
	return s;
}

/*
 * Bytes in spaces: the nodes' sum when they were read, else what the pool
 * totals leave (files read at different moments may not add up: clamp).
 */
uint64_t kv_pool_in_spaces(const struct kv_snap *s)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < s->nr_nodes; i++)
		v += s->nodes[i].in_spaces;
	if (s->nr_nodes)
		return v;
	v = s->free_bytes + s->held_bytes;
	return s->pool_bytes > v ? s->pool_bytes - v : 0;
}

void kv_features(char *buf, size_t len, uint64_t features)
{
	static const char *const names[] = {
		"spaces", "numa", "prefix", "persist", "residency", "events", "reclaim",
	};
	size_t o = 0;
	unsigned int i;

	buf[0] = '\0';
	for (i = 0; i < 64 && o < len; i++) {
		if (!(features & (1ULL << i)))
			continue;
		if (i < sizeof(names) / sizeof(names[0]))
			o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? "," : "", names[i]);
		else
			o += (size_t)snprintf(buf + o, len - o, "%sbit%u", o ? "," : "", i);
	}
}

/* "quota=N pool=N tenant=N reclaim=N admin=N": every cause must be there. */
static int kv_parse_evictions(const char *rel, uint64_t *ev)
{
	char buf[256], path[4096];
	int r = kv_sysfs_str(rel, buf, sizeof(buf)), i;

	if (r)
		return r;
	for (i = 0; i < KV_CAUSES; i++) {
		if (kv_u64_field(buf, kv_cause_names[i], &ev[i])) {
			kv_sysfs_path(path, sizeof(path), rel);
			kv_err("%s: unexpected contents '%s' (wanted quota=N pool=N tenant=N "
			       "reclaim=N admin=N)", path, buf);
			return -EPROTO;	/* said */
		}
	}
	return 0;
}

/* Say why sysfs file @rel could not be read; -EPROTO was said already. */
static int kv_read_error(const char *rel, int r)
{
	char path[4096];

	if (r == -EPROTO)
		return KV_EXIT_FAIL;
	kv_sysfs_path(path, sizeof(path), rel);
	return kv_file_error("reading", path, r, NULL);
}

static int kv_snap_pool(struct kv_snap *s)
{
	size_t i;
	int r;

	for (i = 0; i < sizeof(kv_pool_files) / sizeof(kv_pool_files[0]); i++) {
		r = kv_sysfs_u64(kv_pool_files[i].file,
				 (uint64_t *)((char *)s + kv_pool_files[i].off));
		if (r)
			return kv_read_error(kv_pool_files[i].file, r);
	}
	r = kv_parse_evictions("evictions", s->evictions);
	return r ? kv_read_error("evictions", r) : 0;
}

static int kv_cmp_node(const void *a, const void *b)
{
	return ((const struct kv_node *)a)->id - ((const struct kv_node *)b)->id;
}

static int kv_snap_nodes(struct kv_snap *s)
{
	static const char *const files[] = {
		"reserved_bytes", "free_bytes", "in_spaces_bytes", "held_bytes",
	};
	char path[4096], rel[128];
	struct dirent *de;
	struct kv_node *n;
	DIR *d;
	int id, k, r = 0, cap = 0;
	char c;

	d = opendir(kv_env.sysfs);
	if (!d)
		return kv_file_error("listing", kv_env.sysfs, errno, NULL);
	while ((de = readdir(d))) {
		if (sscanf(de->d_name, "node%d%c", &id, &c) != 1 || id < 0)
			continue;
		if (s->nr_nodes == cap) {
			cap = cap ? cap * 2 : 4;
			n = realloc(s->nodes, (size_t)cap * sizeof(*n));
			if (!n) {
				r = kv_file_error("listing", kv_env.sysfs, ENOMEM, NULL);
				break;
			}
			s->nodes = n;
		}
		n = &s->nodes[s->nr_nodes];
		n->id = id;
		for (k = 0; k < 4 && !r; k++) {
			uint64_t *dst[] = { &n->reserved, &n->free, &n->in_spaces, &n->held };

			snprintf(rel, sizeof(rel), "node%d/%s", id, files[k]);
			r = kv_sysfs_u64(rel, dst[k]);
			if (r) {
				kv_sysfs_path(path, sizeof(path), rel);
				r = kv_file_error("reading", path, r, NULL);
			}
		}
		if (r)
			break;
		s->nr_nodes++;
	}
	closedir(d);
	if (!r)
		qsort(s->nodes, (size_t)s->nr_nodes, sizeof(*s->nodes), kv_cmp_node);
	return r;
}

/* 0, 1 when the space went away while being read, or an exit status. */
static int kv_snap_one_space(struct kv_space *sp, unsigned int id)
{
	char rel[128], buf[KVPOOL_NAME_MAX];
	size_t i;
	int r;

	memset(sp, 0, sizeof(*sp));
	sp->id = id;
	snprintf(rel, sizeof(rel), "space/%u/name", id);
	r = kv_sysfs_str(rel, buf, sizeof(buf));
	if (r == -ENOENT)
		return 1;
	if (r == -EACCES || r == -EPERM) {
		kv_err("the per-space files in sysfs are readable by root only; run kvctl as root");
		return KV_EXIT_PERM;
	}
	if (r)
		return kv_read_error(rel, r);
	memcpy(sp->name, buf, sizeof(sp->name));
	for (i = 0; i < sizeof(kv_space_files) / sizeof(kv_space_files[0]); i++) {
		snprintf(rel, sizeof(rel), "space/%u/%s", id, kv_space_files[i].file);
		r = kv_sysfs_u64(rel, (uint64_t *)((char *)sp + kv_space_files[i].off));
		if (r == -ENOENT)
			return 1;
		if (r)
			return kv_read_error(rel, r);
	}
	snprintf(rel, sizeof(rel), "space/%u/evictions", id);
	r = kv_parse_evictions(rel, sp->evictions);
	if (r == -ENOENT)
		return 1;
	return r ? kv_read_error(rel, r) : 0;
}

static int kv_cmp_space(const void *a, const void *b)
{
	unsigned int x = ((const struct kv_space *)a)->id, y = ((const struct kv_space *)b)->id;

	return x < y ? -1 : x > y;
}

static int kv_snap_spaces(struct kv_snap *s)
{
	char path[4096];
	struct dirent *de;
	struct kv_space *n;
	unsigned long id;
	char *end;
	int r = 0, cap = 0;
	DIR *d;

	kv_sysfs_path(path, sizeof(path), "space");
	d = opendir(path);
	if (!d)
		return kv_file_error("listing", path, errno, NULL);
	while ((de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		id = strtoul(de->d_name, &end, 10);
		if (*end || id > UINT32_MAX)
			continue;
		if (s->nr_sp == cap) {
			cap = cap ? cap * 2 : 8;
			n = realloc(s->sp, (size_t)cap * sizeof(*n));
			if (!n) {
				r = kv_file_error("listing", path, ENOMEM, NULL);
				break;
			}
			s->sp = n;
		}
		r = kv_snap_one_space(&s->sp[s->nr_sp], (unsigned int)id);
		if (r == 1) {
			r = 0;
			continue;
		}
		if (r)
			break;
		s->nr_sp++;
	}
	closedir(d);
	if (!r)
		qsort(s->sp, (size_t)s->nr_sp, sizeof(*s->sp), kv_cmp_space);
	return r;
}

static int kv_snap_tenants(struct kv_snap *s)
{
	char path[4096], *text, *line, *save = NULL;
	struct kv_tenant t, *n;
	int r, cap = 0;

	kv_sysfs_path(path, sizeof(path), "uid_limit");
	r = kv_read_path(path, &text);
	/* Every uid's usage is root's: without root, status shows the pool alone. */
	if (r == -EACCES || r == -EPERM) {
		s->tenants_hidden = 1;
		return 0;
	}
	if (r)
		return kv_file_error("reading", path, r, NULL);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (kv_u64_field(line, "uid", &t.uid) || kv_u64_field(line, "limit_bytes", &t.limit) ||
		    kv_u64_field(line, "used_bytes", &t.used) || kv_u64_field(line, "spaces", &t.spaces)) {
			kv_err("%s: unexpected line '%s' (wanted uid=U limit_bytes=L used_bytes=B "
			       "spaces=N)", path, line);
			free(text);
			return KV_EXIT_FAIL;
		}
		if (s->nr_tenants == cap) {
			cap = cap ? cap * 2 : 8;
			n = realloc(s->tenants, (size_t)cap * sizeof(*n));
			if (!n) {
				free(text);
				return kv_file_error("reading", path, ENOMEM, NULL);
			}
			s->tenants = n;
		}
		s->tenants[s->nr_tenants++] = t;
	}
	free(text);
	return 0;
}

/* Merge one debugfs "spaces" line into the sysfs record of its id. */
static void kv_merge_dbg(struct kv_snap *s, const char *line)
{
	struct kv_space *sp = NULL;
	const char *p, *q;
	unsigned int id;
	int i, node;

	if (sscanf(line, "space %u ", &id) != 1)
		return;
	for (i = 0; i < s->nr_sp; i++)
		if (s->sp[i].id == id)
			sp = &s->sp[i];
	if (!sp)
		return;
	if (kv_u64_field(line, "gid", &sp->gid) || kv_u64_field(line, "mode", &sp->mode) ||
	    kv_u64_field(line, "nr_blocks", &sp->nr_blocks) ||
	    kv_u64_field(line, "backed_blocks", &sp->backed_blocks) ||
	    kv_u64_field(line, "backed_bytes", &sp->dbg_backed_bytes) ||
	    kv_u64_field(line, "readers", &sp->readers) ||
	    kv_u64_field(line, "unlinked", &sp->unlinked) ||
	    kv_u64_field(line, "node_mask", &sp->node_mask))
		return;
	p = strstr(line, " policy=");
	if (p) {
		p += 8;
		q = p + strcspn(p, " \n");
		snprintf(sp->policy, sizeof(sp->policy), "%.*s", (int)(q - p), p);
	}
	for (p = strstr(line, " node"); p; p = strstr(p + 1, " node")) {
		unsigned long long b;

		if (sscanf(p, " node%d_bytes=%llu", &node, &b) == 2 &&
		    sp->nr_node_bytes < (int)(sizeof(sp->node_bytes) / sizeof(sp->node_bytes[0]))) {
			sp->node_bytes[sp->nr_node_bytes].node = node;
			sp->node_bytes[sp->nr_node_bytes++].bytes = b;
		}
	}
	sp->have_dbg = true;
}

static void kv_snap_debug(struct kv_snap *s)
{
	char path[4096], *text, *line, *save = NULL;
	int r;

	snprintf(path, sizeof(path), "%s/spaces", kv_env.debugfs);
	r = kv_read_path(path, &text);
	if (r) {
		s->dbg_err = -r;
		return;
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		kv_merge_dbg(s, line);
	free(text);
}

static void kv_snap_info(struct kv_snap *s)
{
	int fd = open(kv_env.dev, O_RDONLY | O_CLOEXEC);

	memset(&s->info, 0, sizeof(s->info));
	if (fd < 0) {
		s->info_err = errno;
		return;
	}
	s->info_err = ioctl(fd, KVPOOL_IOC_INFO, &s->info) ? errno : 0;
	close(fd);
}

/* Fill @s with what @what asks for; 0 or an exit status (already said). */
int kv_snap_take(struct kv_snap *s, unsigned int what)
{
	int r;

	memset(s, 0, sizeof(*s));
	r = kv_module_check();
	if (r)
		return r;
	s->t = kv_now();
	if ((what & KV_SNAP_POOL) && (r = kv_snap_pool(s)))
		goto out_free;
	if ((what & KV_SNAP_NODES) && (r = kv_snap_nodes(s)))
		goto out_free;
	if ((what & KV_SNAP_SPACES) && (r = kv_snap_spaces(s)))
		goto out_free;
	if ((what & KV_SNAP_TENANTS) && (r = kv_snap_tenants(s)))
		goto out_free;
	if (what & KV_SNAP_INFO)
		kv_snap_info(s);
	if ((what & KV_SNAP_DEBUG) && (what & KV_SNAP_SPACES))
		kv_snap_debug(s);
	return 0;

out_free:
	kv_snap_free(s);
	return r;
}

void kv_snap_free(struct kv_snap *s)
{
	free(s->nodes);
	free(s->sp);
	free(s->tenants);
	s->nodes = NULL;
	s->sp = NULL;
	s->tenants = NULL;
	s->nr_nodes = s->nr_sp = s->nr_tenants = 0;
}

/*
 * The index of the space called @name (or with id @id when @id >= 0);
 * -KV_EXIT_* after saying why not.  Two spaces may share a name while a
 * destroyed one is still in use: the live one wins when debugfs tells.
 */
int kv_find_space(const struct kv_snap *s, const char *cmd, const char *name, long id)
{
	int i, found = -1, n = 0, live = -1, nlive = 0;

	for (i = 0; i < s->nr_sp; i++) {
		if (id >= 0 ? s->sp[i].id == (unsigned long)id : !strcmp(s->sp[i].name, name)) {
			found = i;
			n++;
			if (s->sp[i].have_dbg && !s->sp[i].unlinked) {
				live = i;
				nlive++;
			}
		}
	}
	if (n == 1)
		return found;
	if (n > 1 && nlive == 1)
		return live;
	if (n > 1) {
		fflush(stdout);
		fprintf(stderr, "kvctl %s: %d spaces are named '%s' (a destroyed space keeps its "
			"name while in use); pick one with --id:", cmd, n, name);
		for (i = 0; i < s->nr_sp; i++)
			if (!strcmp(s->sp[i].name, name))
				fprintf(stderr, " %u", s->sp[i].id);
		fputc('\n', stderr);
		return -KV_EXIT_USAGE;
	}
	if (id >= 0)
		kv_err("%s: no space with id %ld; 'kvctl spaces' lists them", cmd, id);
	else
		kv_err("%s: no space named '%s'; 'kvctl spaces' lists them", cmd, name);
	return -KV_EXIT_NOSPACE;
}
