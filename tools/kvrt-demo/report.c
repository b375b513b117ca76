// SPDX-License-Identifier: GPL-2.0
/*
 * report.c: the progress line (stderr: rewritten in place on a terminal,
 * a line every few seconds otherwise, so logs stay readable) and the
 * closing table (stdout).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report.h"

double wall_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_init(struct progress *p, int enabled)
{
	memset(p, 0, sizeof(*p));
	p->enabled = enabled;
	p->tty = isatty(STDERR_FILENO);
	p->start = p->last = wall_seconds();
}

void progress_update(struct progress *p, const char *label, const struct pass_result *r,
		     uint32_t done, uint64_t step, int final)
{
	double now = wall_seconds();
	char line[200];

	if (!p->enabled)
		return;
	if (final) {
		if (p->tty && p->drawn)
			fputs("\r\033[K", stderr);	/* the table follows; leave no debris */
		p->drawn = 0;
		return;
	}
	if (now - p->last < (p->tty ? 0.1 : 2.0))
		return;
	p->last = now;
	snprintf(line, sizeof(line),
		 "%s: %u/%u requests done, step %llu, %llu prefill + %llu decode tokens, "
		 "%.1f s", label, done, r->n_requests, (unsigned long long)step,
		 (unsigned long long)r->prefill_tokens, (unsigned long long)r->decode_tokens,
		 now - p->start);
	if (r->have_pool && r->pool.lookups)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), ", prefix hits %.0f%%",
			 100.0 * (double)r->pool.hits / (double)r->pool.lookups);
	if (p->tty) {
		fprintf(stderr, "\r\033[K%s", line);
		p->drawn = 1;
	} else {
		fprintf(stderr, "%s\n", line);
	}
	fflush(stderr);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double percentile(const double *v, uint32_t n, double p)
{
	double *s, rank, res;
	uint32_t lo;

	if (!n)
		return 0;
	s = malloc(sizeof(double) * n);
	if (!s)
		return 0;
	memcpy(s, v, sizeof(double) * n);
	qsort(s, n, sizeof(double), cmp_double);
	/* linear interpolation between closest ranks */
	rank = p / 100.0 * (double)(n - 1);
	lo = (uint32_t)rank;
	res = lo + 1 < n ? s[lo] + (rank - lo) * (s[lo + 1] - s[lo]) : s[lo];
	free(s);
	return res;
}

const char *fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
	if (bytes >= (1ULL << 30))
		snprintf(buf, len, "%.2f GiB", (double)bytes / (1ULL << 30));
	else if (bytes >= (1ULL << 20))
		snprintf(buf, len, "%.1f MiB", (double)bytes / (1ULL << 20));
	else if (bytes >= (1ULL << 10))
		snprintf(buf, len, "%.1f KiB", (double)bytes / (1ULL << 10));
	else
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	return buf;
}

/* A request's TTFT in ms; every request has one. */
static bool ttft_ms(const struct req_result *q, double *ms)
{
	*ms = (q->first - q->arrival) * 1e3;
	return true;
}

/* A request's time per output token in ms; none below two tokens. */
static bool tpot_ms(const struct req_result *q, double *ms)
{
	if (q->n_gen < 2)
		return false;
	*ms = (q->done - q->first) * 1e3 / (q->n_gen - 1);
	return true;
}

/*
 * Mean and percentiles of value() over the requests that have one and
 * match hit (1: with a prefix hit or a resume, 0: without, -1: all).
 */
static struct latency latency_over(const struct pass_result *r,
				   bool (*value)(const struct req_result *q, double *ms), int hit)
{
	struct latency t = { 0 };
	double *v = malloc(sizeof(double) * (r->n_requests ? r->n_requests : 1)), sum = 0;
	uint32_t i;

	if (!v)
		return t;
	for (i = 0; i < r->n_requests; i++) {
		const struct req_result *q = &r->req[i];
		int h = q->hit_blocks > 0 || q->resumed_tokens > 0;

		if ((hit >= 0 && h != hit) || !value(q, &v[t.n]))
			continue;
		sum += v[t.n++];
	}
	if (t.n) {
		t.mean = sum / t.n;
		t.p50 = percentile(v, t.n, 50);
		t.p90 = percentile(v, t.n, 90);
	}
	free(v);
	return t;
}

static struct latency ttft_of(const struct pass_result *r, int hit)
{
	return latency_over(r, ttft_ms, hit);
}

struct latency report_tpot(const struct pass_result *r)
{
	return latency_over(r, tpot_ms, -1);
}

static double decode_only_rate(const struct pass_result *r)
{
	return r->decode_only_time > 0 ? r->decode_only_tokens / r->decode_only_time : 0;
}

static void row(FILE *f, const char *name, const char *a, const char *b)
{
	if (*b)
		fprintf(f, "  %-34s %18s %18s\n", name, a, b);
	else
		fprintf(f, "  %-34s %18s\n", name, a);
}

static void row_latency(FILE *f, const char *name, struct latency a, struct latency b, int have_b)
{
	char x[32], y[32];

	if (a.n)
		snprintf(x, sizeof(x), "%.1f / %.1f", a.mean, a.p50);
	else
		snprintf(x, sizeof(x), "-");
	if (have_b && b.n)
		snprintf(y, sizeof(y), "%.1f / %.1f", b.mean, b.p50);
	else
		snprintf(y, sizeof(y), "-");
	row(f, name, x, y);
}

void report_table(FILE *f, const struct pass_result *c, const struct pass_result *ref)
{
	struct latency ca = ttft_of(c, -1), ch = ttft_of(c, 1), cm = ttft_of(c, 0), ra = { 0 };
	const struct pool_stats *ps = &c->pool;
	char a[48], b[48], x[24], y[24];

	if (ref)
		ra = ttft_of(ref, -1);
	fputs("\n", f);
	row(f, "", "prefix cache", "reference");
	row(f, "", "+ offload", "(no cache)");
	row_latency(f, "TTFT ms, all requests (mean / p50)", ca, ra, ref != NULL);
	row_latency(f, "  requests that reused K/V", ch, (struct latency){ 0 }, 0);
	row_latency(f, "  requests that reused none", cm, (struct latency){ 0 }, 0);
	snprintf(a, sizeof(a), "%.1f", ca.p90);
	snprintf(b, sizeof(b), "%.1f", ra.p90);
	row(f, "TTFT ms, p90", a, ref ? b : "-");
	if (c->have_pool && ps->lookups)
		snprintf(a, sizeof(a), "%.1f%% (%llu/%llu)", 100.0 * ps->hits / ps->lookups,
			 (unsigned long long)ps->hits, (unsigned long long)ps->lookups);
	else
		snprintf(a, sizeof(a), "-");
	row(f, "prefix hit rate (blocks)", a, ref ? "off" : "-");
	snprintf(a, sizeof(a), "%llu / %llu", (unsigned long long)c->reused_tokens,
		 (unsigned long long)c->prompt_tokens);
	snprintf(b, sizeof(b), "0 / %llu", ref ? (unsigned long long)ref->prompt_tokens : 0ULL);
	row(f, "prompt tokens reused / total", a, ref ? b : "-");
	snprintf(a, sizeof(a), "%llu", (unsigned long long)c->resumed_tokens);
	row(f, "tokens resumed from offload", a, ref ? "0" : "-");
	snprintf(a, sizeof(a), "%llu", (unsigned long long)c->prefill_tokens);
	snprintf(b, sizeof(b), "%llu", ref ? (unsigned long long)ref->prefill_tokens : 0ULL);
	row(f, "prefill tokens computed", a, ref ? b : "-");
	snprintf(a, sizeof(a), "%s", fmt_bytes(x, sizeof(x), ps->offload_bytes + ps->publish_bytes));
	row(f, "bytes offloaded (device -> pool)", a, ref ? "0" : "-");
	snprintf(a, sizeof(a), "%s", fmt_bytes(x, sizeof(x), ps->publish_bytes));
	row(f, "  publish (new full prompt blocks)", a, "");
	snprintf(a, sizeof(a), "%s", fmt_bytes(x, sizeof(x), ps->offload_bytes));
	row(f, "  idle conversations", a, "");
	snprintf(a, sizeof(a), "%s",
		 fmt_bytes(x, sizeof(x), ps->fetch_hit_bytes + ps->fetch_resume_bytes));
	row(f, "bytes fetched (pool -> device)", a, ref ? "0" : "-");
	snprintf(a, sizeof(a), "%s", fmt_bytes(x, sizeof(x), ps->fetch_hit_bytes));
	row(f, "  prefix hits", a, "");
	snprintf(a, sizeof(a), "%s", fmt_bytes(y, sizeof(y), ps->fetch_resume_bytes));
	row(f, "  resumed conversations", a, "");
	snprintf(a, sizeof(a), "%.0f", c->prefill_time > 0 ? c->prefill_tokens / c->prefill_time : 0);
	snprintf(b, sizeof(b), "%.0f", ref && ref->prefill_time > 0 ?
		 ref->prefill_tokens / ref->prefill_time : 0);
	row(f, "prefill tokens/s", a, ref ? b : "-");
	row_latency(f, "time per output token, ms mean / p50", report_tpot(c),
		    ref ? report_tpot(ref) : report_tpot(c), ref != NULL);
	/* a step's rate grows with its batch: say the batch beside it */
	snprintf(a, sizeof(a), "%.0f (batch %.1f)", decode_only_rate(c),
		 c->decode_only_steps ? (double)c->decode_only_tokens / c->decode_only_steps : 0);
	snprintf(b, sizeof(b), "%.0f (batch %.1f)", ref ? decode_only_rate(ref) : 0,
		 ref && ref->decode_only_steps ?
		 (double)ref->decode_only_tokens / ref->decode_only_steps : 0);
	row(f, "decode-only steps: tokens/s", a, ref ? b : "-");
	snprintf(a, sizeof(a), "%.2f", c->wall_time);
	snprintf(b, sizeof(b), "%.2f", ref ? ref->wall_time : 0);
	row(f, "wall time, s", a, ref ? b : "-");
}

/* A JSON string: quotes, backslashes and control characters escaped. */
void report_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_pass(FILE *f, const char *name, const struct pass_result *r, int last)
{
	struct latency all = ttft_of(r, -1), hit = ttft_of(r, 1), miss = ttft_of(r, 0);
	const struct pool_stats *ps = &r->pool;

	fprintf(f, "  \"%s\": {\n", name);
	fprintf(f, "    \"requests\": %u,\n", r->n_requests);
	fprintf(f, "    \"ttft_ms\": {\"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f},\n", all.mean,
		all.p50, all.p90);
	fprintf(f, "    \"ttft_ms_reused\": {\"requests\": %u, \"mean\": %.3f, \"p50\": %.3f},\n",
		hit.n, hit.mean, hit.p50);
	fprintf(f, "    \"ttft_ms_not_reused\": {\"requests\": %u, \"mean\": %.3f, \"p50\": %.3f},\n",
		miss.n, miss.mean, miss.p50);
	fprintf(f, "    \"prefix_lookups\": %llu, \"prefix_hits\": %llu, \"prefix_hit_rate\": %.4f,\n",
		(unsigned long long)ps->lookups, (unsigned long long)ps->hits,
		ps->lookups ? (double)ps->hits / ps->lookups : 0.0);
	/* the first arrival: nothing this process published can serve it */
	fprintf(f, "    \"first_request_hit_blocks\": %u,\n", r->n_requests ? r->req[0].hit_blocks : 0);
	fprintf(f, "    \"shared_hits\": %llu, \"shared_blocks\": %llu, \"inserted\": %llu, "
		"\"dedups\": %llu, \"publish_skipped\": %llu, \"offload_dropped\": %llu,\n",
		(unsigned long long)ps->shared_hits, (unsigned long long)ps->shared_distinct,
		(unsigned long long)ps->inserted, (unsigned long long)ps->dedups,
		(unsigned long long)ps->publish_skipped, (unsigned long long)ps->offload_dropped);
	fprintf(f, "    \"tier_hits\": %llu, \"tier_stores\": %llu, \"tier_store_errors\": %llu,\n",
		(unsigned long long)ps->tier_hits, (unsigned long long)ps->tier_stores,
		(unsigned long long)ps->tier_store_errors);
	fprintf(f, "    \"prompt_tokens\": %llu, \"reused_tokens\": %llu, \"resumed_tokens\": %llu,\n",
		(unsigned long long)r->prompt_tokens, (unsigned long long)r->reused_tokens,
		(unsigned long long)r->resumed_tokens);
	fprintf(f, "    \"prefill_tokens\": %llu, \"decode_tokens\": %llu, \"steps\": %llu,\n",
		(unsigned long long)r->prefill_tokens, (unsigned long long)r->decode_tokens,
		(unsigned long long)r->steps);
	fprintf(f, "    \"prefill_tokens_per_s\": %.1f, \"decode_tokens_per_s\": %.1f,\n",
		r->prefill_time > 0 ? r->prefill_tokens / r->prefill_time : 0.0,
		r->decode_time > 0 ? r->decode_tokens / r->decode_time : 0.0);
	{
		struct latency tp = report_tpot(r);

		fprintf(f, "    \"decode_only_steps\": %llu, \"decode_only_tokens_per_s\": %.1f,\n",
			(unsigned long long)r->decode_only_steps, decode_only_rate(r));
		fprintf(f, "    \"tpot_ms\": {\"n\": %u, \"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f},\n",
			tp.n, tp.mean, tp.p50, tp.p90);
	}
	fprintf(f, "    \"offloaded_bytes\": %llu, \"offloaded_publish_bytes\": %llu, "
		"\"offloaded_idle_bytes\": %llu,\n",
		(unsigned long long)(ps->offload_bytes + ps->publish_bytes),
		(unsigned long long)ps->publish_bytes, (unsigned long long)ps->offload_bytes);
	fprintf(f, "    \"fetched_bytes\": %llu, \"fetched_hit_bytes\": %llu, "
		"\"fetched_resume_bytes\": %llu,\n",
		(unsigned long long)(ps->fetch_hit_bytes + ps->fetch_resume_bytes),
		(unsigned long long)ps->fetch_hit_bytes, (unsigned long long)ps->fetch_resume_bytes);
	fprintf(f, "    \"busy_s\": %.4f, \"wall_s\": %.4f\n", r->busy_time, r->wall_time);
	fprintf(f, "  }%s\n", last ? "" : ",");
}

void report_json(FILE *f, const struct json_info *ji, const struct pass_result *c,
		 const struct pass_result *ref)
{
	const struct model_config *m = ji->cfg;

	fprintf(f, "{\n  \"tool\": \"kvrt-demo\", \"version\": ");
	report_json_str(f, ji->version);
	fprintf(f, ",\n  \"backend\": ");
	report_json_str(f, ji->backend);
	fprintf(f, ", \"backend_info\": ");
	report_json_str(f, ji->backend_info);
	fprintf(f, ", \"device\": \"cpu\",\n  \"space\": {\"name\": ");
	report_json_str(f, ji->space);
	fprintf(f, ", \"created\": %s, \"persistent\": %s, \"destroyed\": %s},\n",
		ji->space_created ? "true" : "false", ji->space_persistent ? "true" : "false",
		ji->space_destroyed ? "true" : "false");
	fprintf(f, "  \"model\": {\"dim\": %d, \"hidden_dim\": %d, \"layers\": %d, \"heads\": %d, "
		"\"kv_heads\": %d, \"vocab\": %d, \"seq_len\": %d, \"params\": %llu},\n", m->dim,
		m->hidden_dim, m->n_layers, m->n_heads, m->n_kv_heads, m->vocab_size, m->seq_len,
		(unsigned long long)ji->params);
	fprintf(f, "  \"workload\": {\"requests\": %u, \"conversations\": %u, \"multi_turn\": %u, "
		"\"system_tokens\": %u},\n", ji->wl->n_requests, ji->wl->n_convs, ji->n_multi,
		ji->wl->n_system);
	fprintf(f, "  \"engine\": {\"block_tokens\": %u, \"kv_dtype\": \"%s\", \"threads\": %u, "
		"\"decode_kernel\": \"%s\", \"device\": \"%s\"},\n", ji->block_tokens, ji->kv_dtype,
		ji->threads, ji->decode_kernel, ji->device);
	if (ji->gpu) {
		fprintf(f, "  \"gpu\": {\"name\": ");
		report_json_str(f, ji->gpu_name);
		fprintf(f, ", \"reference_device\": \"%s\"", ji->reference_on_gpu ? "gpu" : "cpu");
		fprintf(f, ", \"steps\": %llu, \"attention_calls\": %llu, \"check\": %s, "
			"\"rows_checked\": %llu, \"worst_in_tolerances\": %.4g, \"up_bytes\": %llu, "
			"\"down_bytes\": %llu},\n", (unsigned long long)ji->gpu->steps,
			(unsigned long long)ji->gpu->calls, ji->gpu_check ? "true" : "false",
			(unsigned long long)ji->gpu->rows_checked,
			ji->gpu->worst < 1e300 ? ji->gpu->worst : 1e300,	/* NaN was made inf */
			(unsigned long long)ji->gpu->up_bytes, (unsigned long long)ji->gpu->down_bytes);
	}
	json_pass(f, "cached", c, 0);
	if (ref)
		json_pass(f, "reference", ref, 0);
	fprintf(f, "  \"equivalence\": {\"result\": \"%s\", \"requests\": %u, \"tokens\": %llu, "
		"\"logits_identical\": %llu, \"why\": ", ji->equivalence, ji->eq_requests,
		(unsigned long long)ji->eq_tokens, (unsigned long long)ji->eq_same_logits);
	report_json_str(f, ji->eq_why);
	fprintf(f, "},\n  \"tokens_digest\": \"%016llx\"\n}\n",
		(unsigned long long)ji->tokens_digest);
}
