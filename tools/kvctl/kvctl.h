/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvctl: the kvpool admin CLI.  Declarations shared by its source files:
 *
 *   main.c        command table, global options, help, usage errors
 *   args.c        option parsing (../common/opts.c) and numeric option values
 *   units.c       byte sizes: parsing "512M", printing "1.5 GiB"
 *   sysfs.c       file access under the sysfs/debugfs roots, errno messages
 *   snapshot.c    one consistent-enough read of pool, nodes, spaces, tenants
 *   json.c        a small JSON writer
 *   show.c        status, spaces, space, blocks, check
 *   stats.c       stats (text and JSON)
 *   prometheus.c  stats --prometheus
 *   set.c         set, destroy, drop-cached
 *   top.c         top
 *   tiers.c       tiers: the SSD tiers below a directory, from their stats files
 *   size.c        size: the KV-cache memory calculator
 */
#ifndef KVCTL_H
#define KVCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <linux/kvpool.h>

#include "../common/opts.h"

#define KVCTL_VERSION	"1.0"

/* Exit statuses; kvctl(8) documents them. */
enum {
	KV_EXIT_OK = 0,
	KV_EXIT_FAIL = 1,	/* check found violations, the kernel refused, I/O */
	KV_EXIT_USAGE = 2,	/* bad command line, key or value: nothing was written */
	KV_EXIT_NOMODULE = 3,	/* /sys/class/misc/kvpool missing */
	KV_EXIT_PERM = 4,	/* permission denied: needs root */
	KV_EXIT_NOSPACE = 5,	/* no space of that name or id */
};

/* Where kvctl looks; --sysfs-root, --debugfs-root, --dev or KVCTL_* env. */
struct kv_env {
	const char *sysfs;
	const char *debugfs;
	const char *dev;
};
extern struct kv_env kv_env;

/* main.c */
struct kv_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *synopsis;	/* options after "kvctl NAME" */
	const char *summary;	/* one line for kvctl --help */
	const char *help;	/* the rest of kvctl NAME --help */
};
void kv_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int kv_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kv_help(const char *cmd);

/*
 * args.c: the tools' one option style (../common/opts.h): "--name value",
 * "--name=value", "-h", "--" and positionals.  A command's options are
 * TOPT_ID rows; kv_args_next returns the row's id, or one of these.
 */
enum { KV_OPT_END = 0, KV_OPT_POS = -1, KV_OPT_ERR = -2, KV_OPT_HELP = -3 };
struct kv_args {
	const char *cmd;
	struct topt_args t;
};
void kv_args_init(struct kv_args *a, const char *cmd, int argc, char **argv);
int kv_args_next(struct kv_args *a, const struct topt *opts, const char **val);
int kv_opt_u64(const char *cmd, const char *opt, const char *val, uint64_t min,
	       uint64_t max, bool suffixes, uint64_t *out);
int kv_format_args(const char *cmd, int argc, char **argv, bool *json, bool *prom,
		   const char **pos, const char **tiers);
int kv_opt_double(const char *cmd, const char *opt, const char *val, double min,
		  double max, double *out);

/* units.c */
enum { KV_SIZE_OK = 0, KV_SIZE_BAD = -1, KV_SIZE_RANGE = -2 };
int kv_parse_size(const char *s, uint64_t *out);
int kv_parse_count(const char *s, uint64_t *out);
int kv_parse_bool(const char *s, bool *out);
const char *kv_bytes(char *buf, size_t len, uint64_t v);
#define KV_BYTES_LEN 32
bool kv_valid_name(const char *s);

/* sysfs.c */
int kv_module_check(void);
int kv_read_path(const char *path, char **out);
int kv_sysfs_path(char *buf, size_t len, const char *rel);
int kv_sysfs_str(const char *rel, char *buf, size_t len);
int kv_sysfs_u64(const char *rel, uint64_t *v);
int kv_sysfs_write(const char *rel, const char *val);
int kv_debugfs_read(const char *name, char **out);
int kv_file_error(const char *verb, const char *path, int err, const char *why_root);
int kv_u64_field(const char *s, const char *key, uint64_t *v);

/* snapshot.c */
#define KV_CAUSES KVPOOL_EVICT_CAUSES
extern const char *const kv_cause_names[KV_CAUSES];

struct kv_node {
	int id;
	uint64_t reserved, free, in_spaces, held;
};

struct kv_node_bytes {
	int node;
	uint64_t bytes;
};

struct kv_space {
	unsigned int id;
	char name[KVPOOL_NAME_MAX];
	uint64_t uid, persistent, clients, block_bytes, quota_bytes, backed_bytes;
	uint64_t free, owned, published, cached, holes;
	uint64_t hits, misses, hit_rate, inserts, dedups;
	uint64_t evictions[KV_CAUSES];
	/* From debugfs "spaces" (root only); valid when have_dbg. */
	bool have_dbg;
	uint64_t gid, mode, nr_blocks, backed_blocks, dbg_backed_bytes, readers, unlinked;
	uint64_t node_mask;
	char policy[16];
	struct kv_node_bytes node_bytes[8];
	int nr_node_bytes;
};

struct kv_tenant {
	uint64_t uid, limit, used, spaces;
};

struct kv_snap {
	int tenants_hidden;	/* uid_limit is root's (mode 0600): tenants left out */
	uint64_t pool_bytes, free_bytes, held_bytes, chunk_bytes, max_batch, max_space_bytes;
	uint64_t spaces, allocs, frees, alloc_failures, zeroed_chunks, reclaimed_bytes;
	uint64_t prefix_hits, prefix_misses, prefix_inserts, prefix_dedups;
	uint64_t cached_bytes, published_bytes;
	uint64_t evictions[KV_CAUSES];
	uint64_t shrinker_enabled, min_cached_bytes, event_queue_max, uid_limit_default_bytes;
	struct kv_node *nodes;
	int nr_nodes;
	struct kv_space *sp;
	int nr_sp;
	struct kv_tenant *tenants;
	int nr_tenants;
	int info_err;		/* 0: info is valid; else the errno of open/ioctl */
	struct kvpool_info info;
	int dbg_err;		/* 0: spaces carry the debugfs extras */
	double t;		/* CLOCK_MONOTONIC seconds */
};

enum {
	KV_SNAP_POOL = 1 << 0,
	KV_SNAP_NODES = 1 << 1,
	KV_SNAP_SPACES = 1 << 2,
	KV_SNAP_TENANTS = 1 << 3,
	KV_SNAP_INFO = 1 << 4,
	KV_SNAP_DEBUG = 1 << 5,	/* best effort: dbg_err says why not */
	KV_SNAP_ALL = 0x3f,
};
int kv_snap_take(struct kv_snap *s, unsigned int what);
void kv_snap_free(struct kv_snap *s);
int kv_find_space(const struct kv_snap *s, const char *cmd, const char *name, long id);
uint64_t kv_sum(const uint64_t *v, int n);
uint64_t kv_pool_in_spaces(const struct kv_snap *s);
double kv_now(void);
void kv_features(char *buf, size_t len, uint64_t features);

/* json.c: values go into the open object or array; key is NULL in arrays. */
struct kv_json {
	FILE *f;
	bool pretty;
	int depth;
	bool first[32];
};
void kv_json_init(struct kv_json *j, FILE *f, bool pretty);
void kv_json_obj(struct kv_json *j, const char *key);
void kv_json_arr(struct kv_json *j, const char *key);
void kv_json_end(struct kv_json *j, char close);
void kv_json_u64(struct kv_json *j, const char *key, uint64_t v);
void kv_json_num(struct kv_json *j, const char *key, double v);
void kv_json_str(struct kv_json *j, const char *key, const char *s);
void kv_json_bool(struct kv_json *j, const char *key, bool v);
void kv_json_null(struct kv_json *j, const char *key);
void kv_json_done(struct kv_json *j);
void kv_json_space(struct kv_json *j, const char *key, const struct kv_space *sp);
void kv_json_pool(struct kv_json *j, const struct kv_snap *s);	/* show.c */
struct kv_tiers;
/* show.c; tiers NULL: none */
void kv_json_snap(const struct kv_snap *s, bool with_pool, const struct kv_tiers *tiers);

/* Commands. */
int cmd_status(int argc, char **argv);
int cmd_spaces(int argc, char **argv);
int cmd_space(int argc, char **argv);
int cmd_blocks(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int kv_prometheus(const struct kv_snap *s);
/* prometheus.c's pieces, for tiers.c: a family's HELP and TYPE, one escaped label. */
void kv_prom_family(const char *name, const char *type, const char *help);
void kv_prom_label(const char *key, const char *v, bool first);
int cmd_tiers(int argc, char **argv);

/*
 * tiers.c: the SSD tiers below a directory, from their stats files, for
 * kvctl tiers DIR and kvctl stats --tiers DIR.
 */
struct kv_tier_entry;
struct kv_tiers {
	const char *dir;
	struct kv_tier_entry *e;
	size_t n;
};
int kv_tiers_read(const char *dir, struct kv_tiers *t);	/* 0 or -errno */
void kv_tiers_free(struct kv_tiers *t);
void kv_tiers_text(const struct kv_tiers *t);
void kv_tiers_json(struct kv_json *j, const char *key, const struct kv_tiers *t);
void kv_tiers_prometheus(const struct kv_tiers *t);
void kv_prometheus_down(void);
int cmd_set(int argc, char **argv);
int cmd_destroy(int argc, char **argv);
int cmd_drop_cached(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_size(int argc, char **argv);

#endif /* KVCTL_H */
