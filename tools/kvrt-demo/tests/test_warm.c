// SPDX-License-Identifier: GPL-2.0
/*
 * test_warm: `kvrt-demo warm` in one process on the embedded backend (an
 * embedded space lives only in the process that made it; the VM test
 * selftests/kvpool/demo_share_test.c does the same across processes with
 * kvpool.ko).  The prompt file reader and its errors; warming the
 * workload's system prompt, then serving the workload with a fresh prefix
 * cache on the warmed space: the first request must find every system
 * prompt block, and every token and logit must equal a recomputation
 * without cache; the same run on a cold space finds nothing; a second warm
 * computes nothing; the priority decides what eviction takes first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../selftests/tap.h"
#include "cache.h"
#include "checkpoint.h"
#include "model.h"
#include "scheduler.h"
#include "warm.h"
#include "workload.h"

#define BT 16

/* the tiny preset of main.c */
static const struct model_config tiny = {
	.dim = 64, .hidden_dim = 172, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 512, .seq_len = 512, .shared_classifier = 1,
};

static const struct workload_opts tiny_wl = {
	.seed = 1, .requests = 8, .system_tokens = 96, .user_tokens = 16, .gen_tokens = 8,
	.max_turns = 3, .multi_turn = 0.5, .rate = 200, .think_s = 0.002, .vocab = 512,
};

static char dir[200];
static char written[16][300];	/* removed at the end */
static int n_written;

/* Returns its path, in a buffer the next call reuses. */
static const char *write_file(const char *name, const char *text)
{
	static char path[300];
	FILE *f;
	int i;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	for (i = 0; i < n_written && strcmp(written[i], path); i++)
		;
	if (i == n_written && n_written < 16)
		snprintf(written[n_written++], sizeof(written[0]), "%s", path);
	f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(text, f);
	fclose(f);
	return path;
}

/* The workload's system prompt as a prompt file line, then extra lines. */
static const char *workload_file(const struct workload *wl, const char *extra)
{
	static char text[8192];
	size_t used = 0;
	uint32_t i;

	used += (size_t)snprintf(text + used, sizeof(text) - used, "# system prompt\n\n");
	for (i = 0; i < wl->n_system; i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used, "%s%u", i ? " " : "",
					 wl->system[i]);
	snprintf(text + used, sizeof(text) - used, "\n%s", extra);
	return write_file("prompts.txt", text);
}

TEST(test_read)
{
	struct warm_file f;
	char err[512], text[4096];
	const char *p;
	size_t used = 0;
	int ret, i;

	p = write_file("ok.txt", "# a comment line\n\n  1 2,3\t4 # trailing comment\n\r\n"
				 "511,0\n");
	REQUIRE(p);
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == 0, "warm_read: %d %s", ret, err);
	REQUIRE(ret == 0);
	CHECK_EQ(f.n, 2);
	CHECK_EQ(f.p[0].n, 4);
	CHECK_EQ(f.p[0].line, 3);
	CHECK_EQ(f.p[0].tok[2], 3);
	CHECK_EQ(f.p[1].n, 2);
	CHECK_EQ(f.p[1].line, 5);
	CHECK_EQ(f.p[1].tok[0], 511);
	CHECK_EQ(warm_blocks_needed(&f, 2), 2);
	warm_file_free(&f);

	/* many prompts: the list grows */
	for (i = 0; i < 20; i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used, "%d %d\n", i, i + 1);
	p = write_file("many.txt", text);
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == 0 && f.n == 20, "20 prompts: %d, %u read", ret, f.n);
	for (i = 0; ret == 0 && i < 20; i++)
		CHECKF(f.p[i].n == 2 && f.p[i].tok[0] == (uint32_t)i && f.p[i].line == (uint32_t)i + 1,
		       "prompt %d: %u tokens from %u at line %u", i, f.p[i].n, f.p[i].tok[0],
		       f.p[i].line);
	warm_file_free(&f);
	used = 0;

	snprintf(text, sizeof(text), "%s/missing.txt", dir);
	ret = warm_read(&f, text, 512, 512, err, sizeof(err));
	CHECKF(ret == -ENOENT && strstr(err, "missing.txt") && strstr(err, "--prompts"),
	       "missing file: %d '%s'", ret, err);
	CHECK(f.n == 0 && f.p == NULL);

	p = write_file("empty.txt", "# only comments\n\n   \n");
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == -EINVAL && strstr(err, "has no prompt"), "empty file: %d '%s'", ret, err);

	p = write_file("vocab.txt", "1 2\n3 512 4\n");
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == -EINVAL && strstr(err, "vocab.txt:2:") && strstr(err, "512"),
	       "id past the vocab: %d '%s'", ret, err);
	CHECK(f.n == 0 && f.p == NULL);

	p = write_file("word.txt", "1 2 hello 3\n");
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == -EINVAL && strstr(err, "word.txt:1: 'hello' is not a token id"),
	       "a word: %d '%s'", ret, err);
	p = write_file("neg.txt", "1 -2\n");
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == -EINVAL && strstr(err, "'-2'"), "a negative id: %d '%s'", ret, err);
	p = write_file("huge.txt", "1 99999999999999999999999\n");
	ret = warm_read(&f, p, 512, 512, err, sizeof(err));
	CHECKF(ret == -EINVAL && strstr(err, "is not a token id"), "an overflow: %d '%s'", ret, err);

	/* seq_len tokens fit, one more does not */
	for (i = 0; i < 8; i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used, "%d ", i);
	p = write_file("fits.txt", text);
	ret = warm_read(&f, p, 512, 8, err, sizeof(err));
	CHECKF(ret == 0 && f.n == 1 && f.p[0].n == 8, "seq_len tokens: %d '%s'", ret, err);
	warm_file_free(&f);
	snprintf(text + used, sizeof(text) - used, "8\n");
	p = write_file("long.txt", text);
	ret = warm_read(&f, p, 512, 8, err, sizeof(err));
	CHECKF(ret == -EINVAL && strstr(err, "long.txt:1:") && strstr(err, "seq_len, 8"),
	       "seq_len + 1 tokens: %d '%s'", ret, err);
}

struct rig {
	struct checkpoint ck;
	struct model m;
	struct devcache dev;
	struct kvrt *k;
	struct workload wl;
	char model_id[160];
};

static int rig_init(struct rig *r)
{
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	char err[256];
	uint32_t blocks;

	memset(r, 0, sizeof(*r));
	if (ckpt_generate(&r->ck, &tiny, 1, err, sizeof(err)) || workload_make(&r->wl, &tiny_wl))
		return -1;
	/* as main.c sizes them: max_seqs sequences of the longest request */
	blocks = 8 * ((r->wl.max_request_tokens + BT - 1) / BT);
	if (model_init(&r->m, &r->ck, 64, 2, DECODE_WITH_PREFILL) ||
	    devcache_init(&r->dev, 2, 2, 16, BT, blocks, KVRT_DTYPE_F16, NULL) ||
	    kvrt_open(&r->k, &oo))
		return -1;
	pcache_model_id(r->model_id, sizeof(r->model_id), ckpt_fingerprint(&r->ck),
			KVRT_DTYPE_F16, BT);
	return 0;
}

static void rig_fini(struct rig *r)
{
	kvrt_close(r->k);
	devcache_fini(&r->dev);
	model_fini(&r->m);
	workload_free(&r->wl);
	ckpt_free(&r->ck);
}

static int open_space(struct rig *r, struct pcache *pc, const char *name, uint32_t flags,
		      uint64_t quota)
{
	struct pool_opts po = { .space_name = name, .space_flags = flags, .mode = 0600,
				.quota_bytes = quota };
	char err[512];
	int ret = pcache_open(pc, r->k, &r->dev, &po, r->model_id, strlen(r->model_id), err,
			      sizeof(err));

	if (ret)
		tap_diag("pcache_open(%s): %s", name, err);
	return ret;
}

/* Warm the space with the file; 0 or the errno. */
static int warm(struct rig *r, const char *space, uint32_t flags, uint64_t quota,
		const char *path, uint32_t prio, struct warm_stats *st)
{
	struct warm_file f;
	struct pcache pc;
	char err[512];
	int ret;

	ret = warm_read(&f, path, 512, 512, err, sizeof(err));
	if (ret) {
		tap_diag("warm_read: %s", err);
		return ret;
	}
	ret = open_space(r, &pc, space, flags, quota);
	if (!ret) {
		pc.priority = prio;
		ret = warm_space(&r->m, &r->dev, &pc, &f, 64, st, err, sizeof(err));
		if (ret)
			tap_diag("warm_space: %s", err);
		pcache_close(&pc);
	}
	warm_file_free(&f);
	return ret;
}

static int serve(struct rig *r, const char *space, struct pass_result *res)
{
	struct engine_opts eo = { .max_batch_tokens = 64, .max_seqs = 8, .label = "cached" };
	struct pcache pc;
	char err[512];
	int ret;

	/* CREATE: as a serving run opens it, joining when it exists */
	ret = open_space(r, &pc, space, KVRT_SPACE_CREATE, 8ULL << 20);
	if (ret)
		return ret;
	ret = engine_run(&r->m, &r->dev, &pc, &r->wl, &eo, res, err, sizeof(err));
	if (ret)
		tap_diag("engine_run: %s", err);
	pcache_close(&pc);
	return ret;
}

TEST(test_warm_then_serve)
{
	struct engine_opts eo = { .max_batch_tokens = 64, .max_seqs = 8, .label = "reference" };
	struct pass_result hot = { 0 }, cold = { 0 }, ref = { 0 };
	struct kvrt_space_stats ss;
	struct warm_stats st;
	struct pcache pc;
	struct rig r;
	const char *p;
	char err[512];
	uint32_t i, j, n_sys;
	int ret;

	REQUIRE(rig_init(&r) == 0);
	n_sys = r.wl.n_system / BT;
	/* the system prompt (6 blocks), one of 2 blocks and a tail, one shorter than a block */
	p = workload_file(&r.wl, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 "
				 "24 25 26 27 28 29 30 31 32 33 34 35\n7 7 7\n");
	REQUIRE(p);
	ret = warm(&r, "warmed", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, 8ULL << 20, p, 90, &st);
	REQUIRE(ret == 0);
	CHECK_EQ(st.prompts, 3);
	CHECK_EQ(st.short_prompts, 1);
	CHECK_EQ(st.blocks, n_sys + 2);
	CHECK_EQ(st.computed, n_sys + 2);
	CHECK_EQ(st.published, n_sys + 2);
	CHECK_EQ(st.present, 0);
	CHECK_EQ(st.published_bytes, (n_sys + 2) * 4096ULL);

	/* closed: the space persists, its blocks cached with no reader */
	REQUIRE(open_space(&r, &pc, "warmed", 0, 0) == 0);
	CHECK(kvrt_space_stats(pc.space, &ss) == 0);
	CHECK_EQ(ss.cached_blocks, n_sys + 2);
	CHECK_EQ(ss.published_blocks, 0);
	pcache_close(&pc);

	/* warming again finds everything and computes nothing */
	REQUIRE(warm(&r, "warmed", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, 8ULL << 20, p, 90,
		     &st) == 0);
	CHECK_EQ(st.present, n_sys + 2);
	CHECK_EQ(st.computed, 0);
	CHECK_EQ(st.published, 0);

	/* a fresh engine on the warmed space: its first request hits the system prompt */
	REQUIRE(serve(&r, "warmed", &hot) == 0);
	CHECKF(hot.req[0].hit_blocks == n_sys, "first request: %u of %u blocks hit, want %u",
	       hot.req[0].hit_blocks, hot.req[0].lookup_blocks, n_sys);
	CHECKF(hot.req[0].computed_tokens == hot.req[0].prompt_len - n_sys * BT,
	       "first request computed %u of its %u prompt tokens", hot.req[0].computed_tokens,
	       hot.req[0].prompt_len);
	/* not published by this engine's cache: counted as another's */
	CHECK(hot.pool.shared_hits >= n_sys);
	tap_diag("warmed: first request hit %u of %u blocks; %llu hits, %llu shared",
		 hot.req[0].hit_blocks, hot.req[0].lookup_blocks,
		 (unsigned long long)hot.pool.hits, (unsigned long long)hot.pool.shared_hits);

	/* the same engine on a cold space: nothing for the first request */
	REQUIRE(serve(&r, "cold", &cold) == 0);
	CHECK_EQ(cold.req[0].hit_blocks, 0);
	CHECK_EQ(cold.pool.shared_hits, 0);

	/* the warmed K/V are what computing gives: tokens and logits, bit for bit */
	REQUIRE(engine_run(&r.m, &r.dev, NULL, &r.wl, &eo, &ref, err, sizeof(err)) == 0);
	for (i = 0; i < ref.n_requests; i++) {
		CHECKF(hot.req[i].n_gen == ref.req[i].n_gen, "request %u: %u against %u tokens", i,
		       hot.req[i].n_gen, ref.req[i].n_gen);
		for (j = 0; j < ref.req[i].n_gen && j < hot.req[i].n_gen; j++) {
			CHECKF(hot.req[i].gen[j] == ref.req[i].gen[j] &&
			       hot.req[i].logit_hash[j] == ref.req[i].logit_hash[j],
			       "request %u token %u: %u against %u (logits %s)", i, j,
			       hot.req[i].gen[j], ref.req[i].gen[j],
			       hot.req[i].logit_hash[j] == ref.req[i].logit_hash[j] ? "same" :
			       "differ");
		}
	}
	kvrt_space_destroy(r.k, "warmed");
	pass_result_free(&hot);
	pass_result_free(&cold);
	pass_result_free(&ref);
	rig_fini(&r);
}

/*
 * A space of 10 blocks: 4 warmed at prio, then 6 at the engines' default,
 * then an allocation of 4 must evict.  Returns how many of the warmed
 * blocks a lookup still finds, or -1.
 */
static int warmed_left(uint32_t prio)
{
	struct warm_stats st;
	struct pcache pc;
	struct rig r;
	struct warm_file f;
	uint8_t hash[4][KVRT_HASH_BYTES];
	uint32_t ids[6];
	char err[256], line[1024], warm_p[300];
	const char *other_p;
	size_t used = 0;
	int i, hits = -1;

	if (rig_init(&r))
		return -1;
	for (i = 0; i < 4 * BT; i++)
		used += (size_t)snprintf(line + used, sizeof(line) - used, "%d ", 100 + i);
	snprintf(warm_p, sizeof(warm_p), "%s", write_file("warm4.txt", line));
	if (warm(&r, "prio", KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST, 10 * 4096, warm_p, prio,
		 &st) || st.published != 4)
		goto out;
	/* six one-block prompts of other traffic, published at the default */
	for (i = 0, used = 0; i < 6; i++)
		used += (size_t)snprintf(line + used, sizeof(line) - used,
					 "%d 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n", 300 + i);
	other_p = write_file("other6.txt", line);
	if (warm(&r, "prio", 0, 0, other_p, KVRT_PRIO_DEFAULT, &st) || st.published != 6)
		goto out;
	if (open_space(&r, &pc, "prio", 0, 0))
		goto out;
	/* the space is full of cached blocks: this allocation evicts 4 */
	if (!kvrt_alloc_blocks(pc.space, 4, ids) && !kvrt_free_blocks(pc.space, 4, ids) &&
	    !warm_read(&f, warm_p, 512, 512, err, sizeof(err))) {
		pcache_hash(&pc, f.p[0].tok, f.p[0].n, hash, 4);
		hits = kvrt_lookup(pc.space, 4, (const uint8_t (*)[KVRT_HASH_BYTES])hash, ids, NULL);
		if (hits > 0)
			kvrt_release(pc.space, (uint32_t)hits, ids);
		warm_file_free(&f);
	}
	pcache_close(&pc);
out:
	kvrt_space_destroy(r.k, "prio");
	rig_fini(&r);
	return hits;
}

TEST(test_priority)
{
	int high = warmed_left(90), low = warmed_left(10);

	CHECKF(high == 4, "warmed at 90 over traffic at 50: %d of 4 blocks left, want 4", high);
	CHECKF(low == 0, "warmed at 10 under traffic at 50: %d of 4 blocks left, want 0", low);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "%s/kvrt-demo-warm-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_read);
	RUN(test_warm_then_serve);
	RUN(test_priority);
	while (n_written)
		unlink(written[--n_written]);
	rmdir(dir);
	return tap_done("test_warm");
}
