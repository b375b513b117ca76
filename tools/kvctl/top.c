// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl top: a refreshing view of the pool.  Rates (evictions/s, allocs/s,
 * the hit rate of the last interval) come from the difference between two
 * successive snapshots over their measured time apart, not the requested
 * interval, so a slow read does not inflate them.  Plain ANSI escapes, no
 * curses: the binary stays static and small for the VM's initramfs.
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvctl.h"

enum { OPT_INTERVAL = 1, OPT_COUNT, OPT_JSON };

struct kv_rates {
	double dt;		/* seconds since the previous sample; 0 on the first */
	double ev_per_s, allocs_per_s, frees_per_s;
	uint64_t ev_delta;
	double hit_rate_iv;	/* NAN when nothing was looked up in the interval */
};

static const struct kv_space *kv_prev_space(const struct kv_snap *p, const struct kv_space *sp)
{
	int i;

	for (i = 0; p && i < p->nr_sp; i++)
		if (p->sp[i].id == sp->id)
			return &p->sp[i];
	return NULL;
}

/* Counter difference; a space torn down in between lowers sums: clamp at 0. */
static uint64_t kv_delta(uint64_t now, uint64_t before)
{
	return now > before ? now - before : 0;
}

static void kv_rates(const struct kv_snap *s, const struct kv_snap *p, struct kv_rates *r)
{
	uint64_t dh, dm;

	memset(r, 0, sizeof(*r));
	r->hit_rate_iv = NAN;
	if (!p)
		return;
	r->dt = s->t - p->t;
	if (r->dt <= 0)
		return;
	r->ev_delta = kv_delta(kv_sum(s->evictions, KV_CAUSES), kv_sum(p->evictions, KV_CAUSES));
	r->ev_per_s = (double)r->ev_delta / r->dt;
	r->allocs_per_s = (double)kv_delta(s->allocs, p->allocs) / r->dt;
	r->frees_per_s = (double)kv_delta(s->frees, p->frees) / r->dt;
	dh = kv_delta(s->prefix_hits, p->prefix_hits);
	dm = kv_delta(s->prefix_misses, p->prefix_misses);
	if (dh + dm)
		r->hit_rate_iv = (double)dh / (double)(dh + dm);
}

static double kv_pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void kv_top_json(const struct kv_snap *s, const struct kv_snap *p,
			const struct kv_rates *r, unsigned long sample)
{
	uint64_t lookups = s->prefix_hits + s->prefix_misses;
	struct kv_json j;
	int i;

	kv_json_init(&j, stdout, false);
	kv_json_obj(&j, NULL);
	kv_json_u64(&j, "sample", sample);
	kv_json_num(&j, "dt", r->dt);
	kv_json_u64(&j, "pool_bytes", s->pool_bytes);
	kv_json_u64(&j, "free_bytes", s->free_bytes);
	kv_json_u64(&j, "held_bytes", s->held_bytes);
	kv_json_u64(&j, "cached_bytes", s->cached_bytes);
	kv_json_u64(&j, "published_bytes", s->published_bytes);
	kv_json_num(&j, "hit_rate", lookups ? (double)s->prefix_hits / (double)lookups : 0);
	if (isnan(r->hit_rate_iv))
		kv_json_null(&j, "interval_hit_rate");
	else
		kv_json_num(&j, "interval_hit_rate", r->hit_rate_iv);
	kv_json_u64(&j, "evictions_total", kv_sum(s->evictions, KV_CAUSES));
	kv_json_u64(&j, "evictions_delta", r->ev_delta);
	kv_json_num(&j, "evictions_per_s", r->ev_per_s);
	kv_json_num(&j, "allocs_per_s", r->allocs_per_s);
	kv_json_num(&j, "frees_per_s", r->frees_per_s);
	kv_json_arr(&j, "nodes");
	for (i = 0; i < s->nr_nodes; i++) {
		kv_json_obj(&j, NULL);
		kv_json_u64(&j, "node", (uint64_t)s->nodes[i].id);
		kv_json_u64(&j, "reserved_bytes", s->nodes[i].reserved);
		kv_json_u64(&j, "free_bytes", s->nodes[i].free);
		kv_json_u64(&j, "in_spaces_bytes", s->nodes[i].in_spaces);
		kv_json_end(&j, '}');
	}
	kv_json_end(&j, ']');
	kv_json_arr(&j, "spaces");
	for (i = 0; i < s->nr_sp; i++) {
		const struct kv_space *sp = &s->sp[i], *ps = kv_prev_space(p, sp);
		uint64_t d = ps ? kv_delta(kv_sum(sp->evictions, KV_CAUSES),
					   kv_sum(ps->evictions, KV_CAUSES)) : 0;

		kv_json_obj(&j, NULL);
		kv_json_u64(&j, "id", sp->id);
		kv_json_str(&j, "name", sp->name);
		kv_json_u64(&j, "backed_bytes", sp->backed_bytes);
		kv_json_u64(&j, "quota_bytes", sp->quota_bytes);
		kv_json_u64(&j, "cached_blocks", sp->cached);
		kv_json_num(&j, "hit_rate", sp->hit_rate / 1000.0);
		kv_json_num(&j, "evictions_per_s", r->dt > 0 ? (double)d / r->dt : 0);
		kv_json_end(&j, '}');
	}
	kv_json_end(&j, ']');
	kv_json_end(&j, '}');
	kv_json_done(&j);
}

static void kv_top_text(const struct kv_snap *s, const struct kv_snap *p,
			const struct kv_rates *r, unsigned long sample, unsigned long count,
			double interval, bool tty)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN], b3[KV_BYTES_LEN], b4[KV_BYTES_LEN];
	char rate[32], ivr[32];
	uint64_t in_sp = kv_pool_in_spaces(s);
	int i, w = 4;

	if (tty)
		fputs("\033[H\033[2J", stdout);
	else if (sample > 1)
		putchar('\n');
	printf("kvctl top  sample %lu", sample);
	if (count)
		printf("/%lu", count);
	printf("  every %.2gs  (%s)\n", interval, kv_env.sysfs);
	printf("pool    %s: %s in spaces (%.1f%%), %s free, %s held\n",
	       kv_bytes(b1, sizeof(b1), s->pool_bytes), kv_bytes(b2, sizeof(b2), in_sp),
	       kv_pct(in_sp, s->pool_bytes), kv_bytes(b3, sizeof(b3), s->free_bytes),
	       kv_bytes(b4, sizeof(b4), s->held_bytes));
	if (isnan(r->hit_rate_iv))
		snprintf(ivr, sizeof(ivr), "-");
	else
		snprintf(ivr, sizeof(ivr), "%.1f%%", 100 * r->hit_rate_iv);
	printf("cache   %s cached, %s published; hit rate %.1f%% since load, %s last interval\n",
	       kv_bytes(b1, sizeof(b1), s->cached_bytes),
	       kv_bytes(b2, sizeof(b2), s->published_bytes),
	       kv_pct(s->prefix_hits, s->prefix_hits + s->prefix_misses), ivr);
	if (r->dt > 0)
		printf("rates   evictions/s %.1f  allocs/s %.1f  frees/s %.1f\n", r->ev_per_s,
		       r->allocs_per_s, r->frees_per_s);
	else
		printf("rates   evictions/s -  allocs/s -  frees/s -  (from the next sample on)\n");
	printf("\n%-6s %10s %10s %10s %6s\n", "NODE", "RESERVED", "IN SPACES", "FREE", "USED%");
	for (i = 0; i < s->nr_nodes; i++) {
		const struct kv_node *n = &s->nodes[i];
		char name[16];

		snprintf(name, sizeof(name), "node%d", n->id);
		printf("%-6s %10s %10s %10s %5.1f%%\n", name, kv_bytes(b1, sizeof(b1), n->reserved),
		       kv_bytes(b2, sizeof(b2), n->in_spaces), kv_bytes(b3, sizeof(b3), n->free),
		       kv_pct(n->in_spaces, n->reserved));
	}
	for (i = 0; i < s->nr_sp; i++)
		if ((int)strlen(s->sp[i].name) > w)
			w = (int)strlen(s->sp[i].name);
	printf("\n%4s %-*s %10s %10s %6s %7s %7s %7s %6s %8s\n", "ID", w, "NAME", "BACKED",
	       "QUOTA", "USED%", "OWNED", "PUBL", "CACHED", "HIT%", "EVICT/s");
	for (i = 0; i < s->nr_sp; i++) {
		const struct kv_space *sp = &s->sp[i], *ps = kv_prev_space(p, sp);
		uint64_t used = (sp->owned + sp->published + sp->cached) * sp->block_bytes;

		if (ps && r->dt > 0)
			snprintf(rate, sizeof(rate), "%.1f",
				 (double)kv_delta(kv_sum(sp->evictions, KV_CAUSES),
						  kv_sum(ps->evictions, KV_CAUSES)) / r->dt);
		else
			snprintf(rate, sizeof(rate), "-");
		printf("%4u %-*s %10s %10s %5.1f%% %7llu %7llu %7llu %5.1f%% %8s\n", sp->id, w,
		       sp->name, kv_bytes(b1, sizeof(b1), sp->backed_bytes),
		       kv_bytes(b2, sizeof(b2), sp->quota_bytes), kv_pct(used, sp->quota_bytes),
		       (unsigned long long)sp->owned, (unsigned long long)sp->published,
		       (unsigned long long)sp->cached, sp->hit_rate / 10.0, rate);
	}
	if (!s->nr_sp)
		printf("(no spaces)\n");
	fflush(stdout);
}

static void kv_sleep(double sec)
{
	struct timespec ts = { (time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int cmd_top(int argc, char **argv)
{
	static const struct topt opts[] = {
		{ .name = "--interval", .arg = "SEC", .kind = TOPT_ID, .id = OPT_INTERVAL },
		{ .name = "--count", .arg = "N", .kind = TOPT_ID, .id = OPT_COUNT },
		{ .name = "--json", .kind = TOPT_ID, .id = OPT_JSON },
		{ .name = NULL },
	};
	struct kv_snap snaps[2], *cur, *prev = NULL;
	unsigned long sample;
	double interval = 1.0;
	uint64_t count = 0;
	bool json = false, tty;
	struct kv_rates r;
	struct kv_args a;
	const char *v;
	int o, ret;

	kv_args_init(&a, "top", argc, argv);
	while ((o = kv_args_next(&a, opts, &v)) != KV_OPT_END) {
		switch (o) {
		case KV_OPT_HELP:
			return kv_help("top");
		case KV_OPT_ERR:
			return KV_EXIT_USAGE;
		case KV_OPT_POS:
			return kv_usage("top", "unexpected argument '%s'", v);
		case OPT_INTERVAL:
			if (kv_opt_double("top", "interval", v, 0.01, 3600, &interval))
				return KV_EXIT_USAGE;
			break;
		case OPT_COUNT:
			if (kv_opt_u64("top", "count", v, 0, UINT32_MAX, false, &count))
				return KV_EXIT_USAGE;
			break;
		case OPT_JSON:
			json = true;
			break;
		}
	}
	tty = !json && isatty(STDOUT_FILENO);
	for (sample = 1; !count || sample <= count; sample++) {
		cur = &snaps[sample & 1];
		ret = kv_snap_take(cur, KV_SNAP_POOL | KV_SNAP_NODES | KV_SNAP_SPACES);
		if (ret) {
			if (prev)
				kv_snap_free(prev);
			return ret;
		}
		kv_rates(cur, prev, &r);
		if (json)
			kv_top_json(cur, prev, &r, sample);
		else
			kv_top_text(cur, prev, &r, sample, (unsigned long)count, interval, tty);
		if (fflush(stdout) == EOF || ferror(stdout)) {
			kv_snap_free(cur);
			if (prev)
				kv_snap_free(prev);
			return KV_EXIT_FAIL;
		}
		if (prev)
			kv_snap_free(prev);
		prev = cur;
		if (!count || sample < count)
			kv_sleep(interval);
	}
	if (prev)
		kv_snap_free(prev);
	return KV_EXIT_OK;
}
