// SPDX-License-Identifier: GPL-2.0
/*
 * A small streaming JSON writer: enough for kvctl's objects of numbers and
 * strings.  Integers are printed exactly (byte counts exceed what a double
 * holds); strings are escaped per RFC 8259.
 */
#include <math.h>
#include <string.h>

#include "kvctl.h"

void kv_json_init(struct kv_json *j, FILE *f, bool pretty)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->pretty = pretty;
	j->first[0] = true;
}

/* The short escapes RFC 8259 names; other control bytes take \u00XX. */
static const char *const kv_json_esc[] = {
	['"'] = "\\\"", ['\\'] = "\\\\", ['\n'] = "\\n", ['\t'] = "\\t", ['\r'] = "\\r",
};

static void kv_json_string(FILE *f, const char *s)
{
	const unsigned char *p;

	fputc('"', f);
	for (p = (const unsigned char *)s; *p; p++) {
		if (*p < sizeof(kv_json_esc) / sizeof(kv_json_esc[0]) && kv_json_esc[*p])
			fputs(kv_json_esc[*p], f);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* Comma, newline and indentation before a value, then its key if any. */
static void kv_json_sep(struct kv_json *j, const char *key)
{
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = false;
	if (j->pretty && j->depth)
		fprintf(j->f, "\n%*s", 2 * j->depth, "");
	if (key) {
		kv_json_string(j->f, key);
		fputs(j->pretty ? ": " : ":", j->f);
	}
}

static void kv_json_open(struct kv_json *j, const char *key, char c)
{
	kv_json_sep(j, key);
	fputc(c, j->f);
	if (j->depth + 1 < (int)(sizeof(j->first) / sizeof(j->first[0])))
		j->depth++;
	j->first[j->depth] = true;
}

void kv_json_obj(struct kv_json *j, const char *key)
{
	kv_json_open(j, key, '{');
}

void kv_json_arr(struct kv_json *j, const char *key)
{
	kv_json_open(j, key, '[');
}

void kv_json_end(struct kv_json *j, char close)
{
	bool empty = j->first[j->depth];

	if (j->depth)
		j->depth--;
	if (j->pretty && !empty)
		fprintf(j->f, "\n%*s", 2 * j->depth, "");
	fputc(close, j->f);
}

void kv_json_u64(struct kv_json *j, const char *key, uint64_t v)
{
	kv_json_sep(j, key);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void kv_json_num(struct kv_json *j, const char *key, double v)
{
	kv_json_sep(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.6g", v);
	else
		fputs("null", j->f);
}

void kv_json_str(struct kv_json *j, const char *key, const char *s)
{
	kv_json_sep(j, key);
	kv_json_string(j->f, s);
}

void kv_json_bool(struct kv_json *j, const char *key, bool v)
{
	kv_json_sep(j, key);
	fputs(v ? "true" : "false", j->f);
}

void kv_json_null(struct kv_json *j, const char *key)
{
	kv_json_sep(j, key);
	fputs("null", j->f);
}

void kv_json_done(struct kv_json *j)
{
	fputc('\n', j->f);
}

/* One space as spaces, space and stats print it. */
void kv_json_space(struct kv_json *j, const char *key, const struct kv_space *sp)
{
	uint64_t backed = sp->free + sp->owned + sp->published + sp->cached + sp->holes;
	int i;

	kv_json_obj(j, key);
	kv_json_u64(j, "id", sp->id);
	kv_json_str(j, "name", sp->name);
	kv_json_u64(j, "uid", sp->uid);
	kv_json_bool(j, "persistent", sp->persistent);
	kv_json_u64(j, "clients", sp->clients);
	kv_json_u64(j, "block_bytes", sp->block_bytes);
	kv_json_u64(j, "quota_bytes", sp->quota_bytes);
	kv_json_u64(j, "nr_blocks", sp->block_bytes ? sp->quota_bytes / sp->block_bytes : 0);
	kv_json_u64(j, "backed_bytes", sp->backed_bytes);
	kv_json_u64(j, "backed_blocks", backed);
	kv_json_u64(j, "free_blocks", sp->free);
	kv_json_u64(j, "owned_blocks", sp->owned);
	kv_json_u64(j, "published_blocks", sp->published);
	kv_json_u64(j, "cached_blocks", sp->cached);
	kv_json_u64(j, "hole_blocks", sp->holes);
	kv_json_u64(j, "hits", sp->hits);
	kv_json_u64(j, "misses", sp->misses);
	kv_json_num(j, "hit_rate", sp->hit_rate / 1000.0);
	kv_json_u64(j, "inserts", sp->inserts);
	kv_json_u64(j, "dedups", sp->dedups);
	kv_json_obj(j, "evictions");
	for (i = 0; i < KV_CAUSES; i++)
		kv_json_u64(j, kv_cause_names[i], sp->evictions[i]);
	kv_json_end(j, '}');
	if (sp->have_dbg) {
		char mode[8];

		snprintf(mode, sizeof(mode), "%04llo", (unsigned long long)sp->mode);
		kv_json_u64(j, "gid", sp->gid);
		kv_json_str(j, "mode", mode);
		kv_json_u64(j, "readers", sp->readers);
		kv_json_bool(j, "unlinked", sp->unlinked);
		kv_json_str(j, "numa_policy", sp->policy);
		kv_json_u64(j, "node_mask", sp->node_mask);
		kv_json_obj(j, "node_bytes");
		for (i = 0; i < sp->nr_node_bytes; i++) {
			char k[24];

			snprintf(k, sizeof(k), "%d", sp->node_bytes[i].node);
			kv_json_u64(j, k, sp->node_bytes[i].bytes);
		}
		kv_json_end(j, '}');
	}
	kv_json_end(j, '}');
}
