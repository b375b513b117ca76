// SPDX-License-Identifier: GPL-2.0
/*
 * The commands that write sysfs: set (tunables), destroy and drop-cached
 * (actions).  Every argument is validated before the first write, so a
 * typo in the third pair does not leave the first two applied.  Values are
 * written in the canonical form the module parses (plain bytes, 1/0).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvctl.h"

#define ROOT_ONLY "the kvpool tunables are writable by root only"
#define ROOT_ONLY_ACTION "kvpool's destroy_space and drop_cached are root's only"

enum kv_kind { KV_K_SIZE, KV_K_BOOL, KV_K_RANGE, KV_K_UID };

static const struct kv_key {
	const char *key;
	enum kv_kind kind;
	uint64_t min, max;
	const char *expect;	/* "pool_bytes wants ..." */
} kv_keys[] = {
	{ "pool_bytes", KV_K_SIZE, 0, UINT64_MAX, "a size like 512M or 2G" },
	{ "min_cached_bytes", KV_K_SIZE, 0, UINT64_MAX, "a size like 0, 256M or 1G" },
	{ "uid_limit_default_bytes", KV_K_SIZE, 0, UINT64_MAX, "a size like 8G (0: no limit)" },
	{ "uid_limit", KV_K_UID, 0, UINT64_MAX,
	  "UID:SIZE like 1000:8G (SIZE 0 removes the uid's own limit)" },
	{ "event_queue_max", KV_K_RANGE, 16, 1048576, "a whole number from 16 to 1048576" },
	{ "refs_per_fd_max", KV_K_RANGE, 1, 2147483647,
	  "a whole number from 1 to 2147483647 (descriptors opened later)" },
	{ "spaces_per_uid_max", KV_K_RANGE, 0, 4294967295ULL,
	  "a whole number from 0 (no bound) to 4294967295" },
	{ "shrinker_enabled", KV_K_BOOL, 0, 1, "1 or 0 (also on/off, yes/no, true/false)" },
};
#define NR_KEYS (sizeof(kv_keys) / sizeof(kv_keys[0]))

struct kv_write {
	const struct kv_key *k;
	char val[96];		/* what goes to the file */
	uint64_t bytes;		/* sizes: the value */
	uint64_t uid;		/* uid_limit */
};

static void kv_list_keys(void)
{
	size_t i;

	fprintf(stderr, "valid keys:");
	for (i = 0; i < NR_KEYS; i++)
		fprintf(stderr, " %s", kv_keys[i].key);
	fprintf(stderr, "\n");
}

static int kv_bad_value(const struct kv_key *k, const char *v, int why)
{
	kv_usage("set", "%s wants %s, not '%s'%s", k->key, k->expect, v,
		 why == KV_SIZE_RANGE ? " (too large: more than 2^64 - 1)" : "");
	if (k->kind == KV_K_SIZE || k->kind == KV_K_UID)
		fprintf(stderr, "sizes: whole bytes with an optional K, M, G or T suffix "
			"(powers of 1024), e.g. 4096, 512M, 2G\n");
	return KV_EXIT_USAGE;
}

/* MemTotal and MemAvailable in bytes; 0 when meminfo does not say. */
static void kv_meminfo(uint64_t *total, uint64_t *avail)
{
	const char *path = getenv("KVCTL_MEMINFO");	/* tests: a fake meminfo */
	unsigned long long kb;
	char line[256];
	FILE *f;

	*total = *avail = 0;
	f = fopen(path && *path ? path : "/proc/meminfo", "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			*total = (uint64_t)kb * 1024;
		else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			*avail = (uint64_t)kb * 1024;
	}
	fclose(f);
}

/*
 * Pinned pages cannot be reclaimed or swapped: on the way to a pool_bytes
 * the host cannot supply, the module pins every free page before it gets
 * ENOMEM, and the OOM killer finds nothing to free (the test VM panics,
 * "System is deadlocked on memory").  Past MemTotal is refused outright,
 * growth past MemAvailable unless --force.  0 or the exit status.
 */
static int kv_check_growth(const struct kv_write *w, bool force)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN];
	uint64_t total, avail, cur = 0;

	if (strcmp(w->k->key, "pool_bytes"))
		return 0;
	kv_meminfo(&total, &avail);
	if (total && w->bytes > total) {
		kv_usage("set", "pool_bytes=%s is more than this host's memory (MemTotal %s): the "
			 "module would pin every page it could get and the host would run out "
			 "of memory; --force does not override this",
			 kv_bytes(b1, sizeof(b1), w->bytes), kv_bytes(b2, sizeof(b2), total));
		return KV_EXIT_USAGE;
	}
	if (kv_sysfs_u64("pool_bytes", &cur))
		cur = 0;
	if (!force && avail && w->bytes > cur && w->bytes - cur > avail) {
		kv_usage("set", "growing the pool by %s is more than MemAvailable (%s): pinned "
			 "pages cannot be reclaimed, so the host may run out of memory; add "
			 "--force if you mean it", kv_bytes(b1, sizeof(b1), w->bytes - cur),
			 kv_bytes(b2, sizeof(b2), avail));
		return KV_EXIT_USAGE;
	}
	return 0;
}

/* One KEY=VALUE into @w; 0 or the exit status after saying what is wrong. */
static int kv_parse_pair(const char *arg, struct kv_write *w)
{
	char key[64];
	const char *eq = strchr(arg, '='), *v, *colon;
	uint64_t n;
	size_t i, klen;
	bool on;
	int r;

	if (!eq || eq == arg)
		return kv_usage("set", "'%s' is not KEY=VALUE (e.g. pool_bytes=2G)", arg);
	klen = (size_t)(eq - arg);
	if (klen >= sizeof(key))
		klen = sizeof(key) - 1;
	memcpy(key, arg, klen);
	key[klen] = '\0';
	v = eq + 1;
	memset(w, 0, sizeof(*w));
	/* uid_limit.UID=SIZE is uid_limit=UID:SIZE spelled another way. */
	if (!strncmp(key, "uid_limit.", 10)) {
		static char alt[160];

		snprintf(alt, sizeof(alt), "uid_limit=%s:%s", key + 10, v);
		return kv_parse_pair(alt, w);
	}
	for (i = 0; i < NR_KEYS; i++)
		if (!strcmp(key, kv_keys[i].key))
			w->k = &kv_keys[i];
	if (!w->k) {
		kv_usage("set", "unknown key '%s'", key);
		kv_list_keys();
		return KV_EXIT_USAGE;
	}
	switch (w->k->kind) {
	case KV_K_SIZE:
		r = kv_parse_size(v, &w->bytes);
		if (r)
			return kv_bad_value(w->k, v, r);
		snprintf(w->val, sizeof(w->val), "%llu", (unsigned long long)w->bytes);
		break;
	case KV_K_RANGE:
		if (strspn(v, "0123456789") != strlen(v) || kv_parse_size(v, &n) ||
		    n < w->k->min || n > w->k->max)
			return kv_bad_value(w->k, v, 0);
		snprintf(w->val, sizeof(w->val), "%llu", (unsigned long long)n);
		break;
	case KV_K_BOOL:
		if (kv_parse_bool(v, &on))
			return kv_bad_value(w->k, v, 0);
		snprintf(w->val, sizeof(w->val), "%d", on);
		break;
	case KV_K_UID:
		colon = strchr(v, ':');
		if (!colon || colon == v)
			return kv_bad_value(w->k, v, 0);
		{
			char uid[32];
			size_t ulen = (size_t)(colon - v);

			if (ulen >= sizeof(uid) || strspn(v, "0123456789") != ulen)
				return kv_bad_value(w->k, v, 0);
			memcpy(uid, v, ulen);
			uid[ulen] = '\0';
			/* (uid_t)-1 is no uid: the module refuses it too. */
			if (kv_parse_size(uid, &w->uid) || w->uid >= UINT32_MAX) {
				kv_usage("set", "uid_limit: UID must be 0 to 4294967294, not '%s'",
					 uid);
				return KV_EXIT_USAGE;
			}
		}
		r = kv_parse_size(colon + 1, &w->bytes);
		if (r)
			return kv_bad_value(w->k, v, r);
		snprintf(w->val, sizeof(w->val), "%llu %llu", (unsigned long long)w->uid,
			 (unsigned long long)w->bytes);
		break;
	}
	return 0;
}

/* Say why the kernel refused @w and return the exit status. */
static int kv_write_failed(const struct kv_write *w, int err)
{
	char path[4096], b1[KV_BYTES_LEN], b2[KV_BYTES_LEN];
	uint64_t now = 0;

	kv_sysfs_path(path, sizeof(path), w->k->key);
	if (err == -EACCES || err == -EPERM || err == -ENOENT || err == -EISDIR)
		return kv_file_error("writing", path, err, ROOT_ONLY);
	if (!strcmp(w->k->key, "pool_bytes") && (err == -ENOMEM || err == -EBUSY)) {
		kv_sysfs_u64("pool_bytes", &now);
		kv_err("pool_bytes=%s (%s): %s; the pool is now %s", w->val,
		       kv_bytes(b1, sizeof(b1), w->bytes),
		       err == -ENOMEM ? "a node could not allocate its share (ENOMEM); what was "
					"allocated stays" :
					"chunks held by spaces, mappings or pins cannot be freed "
					"(EBUSY); what could be freed was",
		       kv_bytes(b2, sizeof(b2), now));
		return KV_EXIT_FAIL;
	}
	if (err == -EINVAL)
		kv_err("the kernel refused %s=%s (EINVAL): %s wants %s", w->k->key, w->val,
		       w->k->key, w->k->expect);
	else
		kv_err("writing %s=%s to %s failed: %s", w->k->key, w->val, path, strerror(-err));
	return KV_EXIT_FAIL;
}

static void kv_show_result(const struct kv_write *w, bool had_old, uint64_t old)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN];
	uint64_t now;

	if (w->k->kind == KV_K_UID) {
		if (w->bytes)
			printf("uid_limit: uid %llu limited to %s\n", (unsigned long long)w->uid,
			       kv_bytes(b1, sizeof(b1), w->bytes));
		else
			printf("uid_limit: uid %llu has no limit of its own now\n",
			       (unsigned long long)w->uid);
		return;
	}
	if (kv_sysfs_u64(w->k->key, &now)) {
		printf("%s: set to %s\n", w->k->key, w->val);
		return;
	}
	if (w->k->kind == KV_K_SIZE) {
		printf("%s: ", w->k->key);
		if (had_old)
			printf("%llu (%s) -> ", (unsigned long long)old, kv_bytes(b1, sizeof(b1), old));
		printf("%llu (%s)", (unsigned long long)now, kv_bytes(b2, sizeof(b2), now));
		if (now != w->bytes && !strcmp(w->k->key, "pool_bytes"))
			printf(", rounded up to whole chunks on each node");
		printf("\n");
	} else {
		printf("%s: ", w->k->key);
		if (had_old)
			printf("%llu -> ", (unsigned long long)old);
		printf("%llu\n", (unsigned long long)now);
	}
}

int cmd_set(int argc, char **argv)
{
	static const struct topt opts[] = {
		{ .name = "--force", .kind = TOPT_ID, .id = 1 },
		{ .name = NULL },
	};
	struct kv_write *w;
	struct kv_args a;
	const char *v;
	const char **pairs;
	bool force = false, had_old;
	uint64_t old;
	int o, r = 0, n = 0, i;

	pairs = calloc((size_t)argc + 1, sizeof(*pairs));
	w = calloc((size_t)argc + 1, sizeof(*w));
	if (!pairs || !w) {
		free(pairs);
		free(w);
		kv_err("out of memory");
		return KV_EXIT_FAIL;
	}
	kv_args_init(&a, "set", argc, argv);
	while ((o = kv_args_next(&a, opts, &v)) != KV_OPT_END) {
		if (o == KV_OPT_HELP) {
			r = kv_help("set");
			goto out;
		}
		if (o == KV_OPT_ERR) {
			if (argc && strstr(argv[a.t.i - 1], "json"))
				fprintf(stderr, "(set prints what it changed; kvctl status --json "
					"reads the tunables)\n");
			r = KV_EXIT_USAGE;
			goto out;
		}
		if (o == 1)
			force = true;
		else
			pairs[n++] = v;
	}
	if (!n) {
		r = kv_usage("set", "nothing to set; give KEY=VALUE, e.g. kvctl set pool_bytes=2G");
		kv_list_keys();
		goto out;
	}
	for (i = 0; i < n; i++) {
		r = kv_parse_pair(pairs[i], &w[i]);
		if (r)
			goto out;
	}
	r = kv_module_check();
	if (r)
		goto out;
	for (i = 0; i < n; i++) {
		r = kv_check_growth(&w[i], force);
		if (r)
			goto out;
	}
	for (i = 0; i < n; i++) {
		had_old = w[i].k->kind != KV_K_UID && !kv_sysfs_u64(w[i].k->key, &old);
		r = kv_sysfs_write(w[i].k->key, w[i].val);
		if (r) {
			r = kv_write_failed(&w[i], r);
			if (i)
				fprintf(stderr, "kvctl: the %d pair%s before it %s applied\n", i,
					i == 1 ? "" : "s", i == 1 ? "was" : "were");
			goto out;
		}
		kv_show_result(&w[i], had_old, old);
	}
out:
	free(pairs);
	free(w);
	return r;
}

/* destroy NAME and drop-cached NAME|'*'. */
static int kv_action(const char *cmd, const char *file, int argc, char **argv, bool star)
{
	char path[4096], b1[KV_BYTES_LEN];
	uint64_t ev_before[KV_CAUSES] = { 0 }, ev_after[KV_CAUSES] = { 0 };
	const char *name = NULL, *v;
	struct kv_snap s;
	struct stat st;
	struct kv_args a;
	uint64_t clients = 0;
	bool have_before = false;
	int o, r, k;

	kv_args_init(&a, cmd, argc, argv);
	while ((o = kv_args_next(&a, NULL, &v)) != KV_OPT_END) {
		if (o == KV_OPT_HELP)
			return kv_help(cmd);
		if (o == KV_OPT_ERR)
			return KV_EXIT_USAGE;
		if (name)
			return kv_usage(cmd, "one space at a time ('%s' and '%s')", name, v);
		name = v;
	}
	if (!name)
		return kv_usage(cmd, "which space? give its NAME%s (kvctl spaces lists them)",
				star ? " or '*' for all" : "");
	if (!(star && !strcmp(name, "*")) && !kv_valid_name(name))
		return kv_usage(cmd, "'%s' is not a space name: 1 to %d characters of "
				"A-Z a-z 0-9 . _ -%s", name, KVPOOL_NAME_MAX - 1,
				star ? ", or '*' (quoted) for every space" : "");
	r = kv_module_check();
	if (r)
		return r;
	kv_sysfs_path(path, sizeof(path), file);
	if (stat(path, &st))
		return kv_file_error("writing", path, errno, ROOT_ONLY_ACTION);
	/* Before: the space's clients (destroy) or the admin evictions (drop). */
	if (!kv_snap_take(&s, KV_SNAP_POOL | KV_SNAP_SPACES | KV_SNAP_DEBUG)) {
		memcpy(ev_before, s.evictions, sizeof(ev_before));
		have_before = true;
		for (k = 0; k < s.nr_sp; k++)
			if (!strcmp(s.sp[k].name, name) && !(s.sp[k].have_dbg && s.sp[k].unlinked))
				clients = s.sp[k].clients;
		kv_snap_free(&s);
	}
	r = kv_sysfs_write(file, name);
	if (r == -ENOENT) {
		kv_err("%s: no space named '%s'; 'kvctl spaces' lists them", cmd, name);
		return KV_EXIT_NOSPACE;
	}
	if (r == -EINVAL) {
		kv_err("%s: the kernel refused '%s' (EINVAL): not a valid space name", cmd, name);
		return KV_EXIT_FAIL;
	}
	if (r)
		return kv_file_error("writing", path, r, ROOT_ONLY_ACTION);
	if (!strcmp(cmd, "destroy")) {
		printf("destroyed space '%s'", name);
		if (clients)
			printf("; its %llu joined descriptor%s keep%s it alive until they close",
			       (unsigned long long)clients, clients == 1 ? "" : "s",
			       clients == 1 ? "s" : "");
		printf("\n");
		return KV_EXIT_OK;
	}
	/* The admin evictions it caused, as far as the sums before and after tell. */
	snprintf(b1, sizeof(b1), "its cached blocks were");
	if (have_before && !kv_snap_take(&s, KV_SNAP_POOL)) {
		memcpy(ev_after, s.evictions, sizeof(ev_after));
		kv_snap_free(&s);
		if (ev_after[KVPOOL_EVICT_ADMIN] >= ev_before[KVPOOL_EVICT_ADMIN])
			snprintf(b1, sizeof(b1), "%llu",
				 (unsigned long long)(ev_after[KVPOOL_EVICT_ADMIN] -
						      ev_before[KVPOOL_EVICT_ADMIN]));
	}
	printf("dropped the cached blocks of %s: %s evicted (cause admin)\n",
	       strcmp(name, "*") ? name : "every space", b1);
	return KV_EXIT_OK;
}

int cmd_destroy(int argc, char **argv)
{
	return kv_action("destroy", "destroy_space", argc, argv, false);
}

int cmd_drop_cached(int argc, char **argv)
{
	return kv_action("drop-cached", "drop_cached", argc, argv, true);
}
