// SPDX-License-Identifier: GPL-2.0
/*
 * tiers.c: kvctl tiers DIR: the SSD tiers below DIR, one per space identity
 * (a directory named by its 64 hex digits), from the stats file libkvrt
 * keeps in each (Documentation/libkvrt.rst, "The SSD tier"): who has it
 * open, blocks and bytes against the capacity, hit rate, stores,
 * evictions, checksum and I/O errors, the write-back queue.  Text, --json
 * or --prometheus; kvctl stats --tiers DIR adds the same to its output.
 * No module needed: the tiers belong to the processes that open them.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvctl.h"

/*
 * The fields of the stats file, in its order; the last two came with
 * write-back (libkvrt 0.7) and read as 0 from an older file.
 */
static const char *const tier_keys[] = {
	"pid", "open", "updated", "capacity_bytes", "used_bytes", "blocks", "hits", "misses",
	"stores", "store_skips", "read_bytes", "write_bytes", "evictions", "checksum_errors",
	"io_errors", "queued", "deferred",
};
#define NR_TIER_KEYS (sizeof(tier_keys) / sizeof(tier_keys[0]))
#define NR_TIER_KEYS_06 15
enum { T_PID, T_OPEN, T_UPDATED, T_CAP, T_USED, T_BLOCKS, T_HITS, T_MISSES, T_STORES,
       T_SKIPS, T_READ, T_WRITE, T_EVICT, T_CSUM, T_IO, T_QUEUED, T_DEFERRED };
/* Gauges; the rest (from hits on) are counters. */
static bool tier_key_gauge(size_t k)
{
	return k < T_HITS || k == T_QUEUED;
}

struct kv_tier_entry {
	char id[65];
	bool have;		/* a stats file with every field */
	uint64_t v[NR_TIER_KEYS];
};

static bool hex64(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* The identities below dir, sorted, each with its figures when it has them. */
static int read_tiers(const char *dir, struct kv_tier_entry **out, size_t *n)
{
	struct kv_tier_entry *e = NULL, *ne;
	struct dirent *d;
	size_t cap = 0, k;
	DIR *dp = opendir(dir);

	*n = 0;
	if (!dp)
		return -errno;
	while ((d = readdir(dp))) {
		char path[4096], *s = NULL;

		if (!hex64(d->d_name))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 8;
			ne = realloc(e, cap * sizeof(*e));
			if (!ne) {
				free(e);
				closedir(dp);
				return -ENOMEM;
			}
			e = ne;
		}
		memset(&e[*n], 0, sizeof(e[*n]));
		snprintf(e[*n].id, sizeof(e[*n].id), "%s", d->d_name);
		snprintf(path, sizeof(path), "%s/%s/stats", dir, d->d_name);
		if (!kv_read_path(path, &s)) {
			e[*n].have = true;
			for (k = 0; k < NR_TIER_KEYS; k++)
				if (kv_u64_field(s, tier_keys[k], &e[*n].v[k]) &&
				    k < NR_TIER_KEYS_06)
					e[*n].have = false;
			free(s);
		}
		(*n)++;
	}
	closedir(dp);
	for (k = 1; k < *n; k++)	/* insertion sort: a handful of identities */
		for (size_t j = k; j > 0 && strcmp(e[j - 1].id, e[j].id) > 0; j--) {
			struct kv_tier_entry t = e[j];

			e[j] = e[j - 1];
			e[j - 1] = t;
		}
	*out = e;
	return 0;
}

/* "open by 1234", "closed", or "open by 1234 (gone)" when that process died without closing. */
static const char *tier_state(const struct kv_tier_entry *e, char *buf, size_t len)
{
	if (!e->v[T_OPEN])
		return "closed";
	snprintf(buf, len, "open by %llu%s", (unsigned long long)e->v[T_PID],
		 kill((pid_t)e->v[T_PID], 0) && errno == ESRCH ? " (gone)" : "");
	return buf;
}

static double hit_rate(const struct kv_tier_entry *e)
{
	uint64_t asked = e->v[T_HITS] + e->v[T_MISSES];

	return asked ? (double)e->v[T_HITS] / (double)asked : 0;
}

int kv_tiers_read(const char *dir, struct kv_tiers *t)
{
	t->dir = dir;
	return read_tiers(dir, &t->e, &t->n);
}

void kv_tiers_free(struct kv_tiers *t)
{
	free(t->e);
	t->e = NULL;
	t->n = 0;
}

void kv_tiers_text(const struct kv_tiers *t)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN], st[64];
	const struct kv_tier_entry *e = t->e;
	time_t now = time(NULL);
	size_t i;

	printf("%zu SSD tier%s below %s\n", t->n, t->n == 1 ? "" : "s", t->dir);
	if (!t->n)
		return;
	printf("%-12s  %-20s %10s  %-21s %8s %8s %9s %8s %6s %7s  %s\n", "IDENTITY", "STATE",
	       "BLOCKS", "USED / CAPACITY", "HIT RATE", "STORES", "EVICTIONS", "CHECKSUM", "IO",
	       "QUEUED", "UPDATED");
	for (i = 0; i < t->n; i++) {
		char used[48];

		if (!e[i].have) {
			printf("%.12s  %-20s (no stats file yet, or one from another version)\n",
			       e[i].id, "?");
			continue;
		}
		snprintf(used, sizeof(used), "%s / %s", kv_bytes(b1, sizeof(b1), e[i].v[T_USED]),
			 kv_bytes(b2, sizeof(b2), e[i].v[T_CAP]));
		printf("%.12s  %-20s %10llu  %-21s %7.1f%% %8llu %9llu %8llu %6llu %7llu  %llds ago\n",
		       e[i].id, tier_state(&e[i], st, sizeof(st)),
		       (unsigned long long)e[i].v[T_BLOCKS], used, 100 * hit_rate(&e[i]),
		       (unsigned long long)e[i].v[T_STORES], (unsigned long long)e[i].v[T_EVICT],
		       (unsigned long long)e[i].v[T_CSUM], (unsigned long long)e[i].v[T_IO],
		       (unsigned long long)e[i].v[T_QUEUED],
		       (long long)now - (long long)e[i].v[T_UPDATED]);
	}
}

void kv_tiers_json(struct kv_json *j, const char *key, const struct kv_tiers *t)
{
	size_t i, k;

	kv_json_obj(j, key);
	kv_json_str(j, "dir", t->dir);
	kv_json_arr(j, "tiers");
	for (i = 0; i < t->n; i++) {
		kv_json_obj(j, NULL);
		kv_json_str(j, "identity", t->e[i].id);
		kv_json_str(j, "kind", "ssd");
		kv_json_bool(j, "have_stats", t->e[i].have);
		for (k = 0; t->e[i].have && k < NR_TIER_KEYS; k++)
			kv_json_u64(j, tier_keys[k], t->e[i].v[k]);
		kv_json_end(j, '}');
	}
	kv_json_end(j, ']');
	kv_json_end(j, '}');
}

void kv_tiers_prometheus(const struct kv_tiers *t)
{
	size_t i, k;

	/* pid and updated are no metrics. */
	for (k = T_OPEN; k < NR_TIER_KEYS; k++) {
		char name[64];
		bool gauge = tier_key_gauge(k);

		if (k == T_UPDATED)
			continue;
		snprintf(name, sizeof(name), "kvpool_tier_%s%s", tier_keys[k], gauge ? "" : "_total");
		kv_prom_family(name, gauge ? "gauge" : "counter",
			       "An SSD tier's figure from its stats file (kvctl tiers).");
		for (i = 0; i < t->n; i++) {
			if (!t->e[i].have)
				continue;
			printf("%s{", name);
			kv_prom_label("dir", t->dir, true);
			kv_prom_label("identity", t->e[i].id, false);
			printf("} %llu\n", (unsigned long long)t->e[i].v[k]);
		}
	}
}

int cmd_tiers(int argc, char **argv)
{
	struct kv_tiers t;
	const char *dir = NULL;
	bool json, prom;
	int r;

	r = kv_format_args("tiers", argc, argv, &json, &prom, &dir, NULL);
	if (r >= 0)
		return r;
	if (!dir)
		return kv_usage("tiers", "name the directory the tiers were opened in "
				"(kvrt_tier_ssd_opts.dir, kvrt-demo --tier ssd:DIR)");
	r = kv_tiers_read(dir, &t);
	if (r) {
		kv_err("tiers: cannot read %s: %s", dir, strerror(-r));
		return KV_EXIT_FAIL;
	}
	if (json) {
		struct kv_json j;

		kv_json_init(&j, stdout, true);
		kv_tiers_json(&j, NULL, &t);
		kv_json_done(&j);
	} else if (prom) {
		kv_tiers_prometheus(&t);
	} else {
		kv_tiers_text(&t);
	}
	kv_tiers_free(&t);
	return KV_EXIT_OK;
}
