// SPDX-License-Identifier: GPL-2.0
/*
 * warm.c: `kvrt-demo warm` (warm.h): read a prompt file, compute each
 * prompt's full blocks with the demo's model, publish them into a
 * persistent space at a chosen priority, and report what it did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"
#include "warm.h"

enum { WARM_OK = 0, WARM_USAGE = 2, WARM_RUNTIME = 3 };	/* main.c's exit statuses */

/* ---- options ---------------------------------------------------------------- */

void warm_rows(struct warm_opts *w, struct topt rows[WARM_ROWS])
{
	memset(w, 0, sizeof(*w));
	w->priority = WARM_PRIO_DEFAULT;
	rows[0] = (struct topt){ .name = "--prompts", .arg = "FILE", .kind = TOPT_STR,
				 .dst = &w->prompts };
	rows[1] = (struct topt){ .name = "--priority", .arg = "P", .kind = TOPT_UINT,
				 .dst = &w->priority, .min = 0, .max = KVRT_PRIO_MAX,
				 .want = "an eviction priority from 0 (first evicted) to 100" };
	rows[2] = (struct topt){ .name = "--print-workload-prompt", .kind = TOPT_FLAG,
				 .dst = &w->print_workload };
	rows[3] = (struct topt){ .name = NULL };
}

/* The serving options that mean something to warming: the rest are unknown here. */
static const char *const kept_names[] = {
	"--checkpoint", "--seed", "--dim", "--hidden-dim", "--layers", "--heads", "--kv-heads",
	"--vocab", "--seq-len", "--preset", "--system-tokens", "--block-tokens",
	"--batch-tokens", "--threads", "--kv-dtype", "--backend", "--space", "--pool-mb",
	"--json", "--quiet", "--no-progress", NULL,
};

size_t warm_keep(const struct topt *all, struct topt *kept)
{
	size_t n = 0, i;

	for (; all->name; all++)
		for (i = 0; kept_names[i]; i++)
			if (!strcmp(all->name, kept_names[i]))
				kept[n++] = *all;
	kept[n] = (struct topt){ .name = NULL };
	return n;
}

void warm_usage(FILE *f)
{
	fputs("usage: kvrt-demo warm --space NAME --prompts FILE [--priority P] [options]\n"
	      "       kvrt-demo warm --print-workload-prompt [model options] [--system-tokens N]\n"
	      "\n"
	      "Compute the K/V of common prefixes (system prompts) with the demo's model and\n"
	      "publish them into a persistent space, so that the first request of any engine\n"
	      "process joining it hits.  See kvrt-demo(1), WARMING A SPACE.\n"
	      "\n"
	      "  --prompts FILE         one prompt a line: token ids (decimal, below the vocab)\n"
	      "                         separated by blanks or commas; '#' starts a comment\n"
	      "  --space NAME           the space to create (persistent) or join; required\n"
	      "  --priority P           eviction priority of the published blocks, 0..100 (75;\n"
	      "                         engines publish at 50, lower is evicted first)\n"
	      "  --print-workload-prompt  print the serving workload's system prompt as a\n"
	      "                         prompt file and exit (nothing is computed or published)\n"
	      "  --json                 one JSON object instead of the text report\n"
	      "  --quiet                the summary line only\n"
	      "model (must be the serving engines' own, or nothing will hit):\n"
	      "  --checkpoint FILE --seed N --dim N --hidden-dim N --layers N --heads N\n"
	      "  --kv-heads N --vocab N --seq-len N --preset tiny|default\n"
	      "engine and pool (--block-tokens and --kv-dtype must be the engines' too):\n"
	      "  --block-tokens N --kv-dtype f32|f16|bf16 --batch-tokens N --threads N\n"
	      "  --backend auto|embedded|kmod --pool-mb N (quota when the space is created)\n", f);
}

/* ---- the prompt file ---------------------------------------------------------- */

void warm_file_free(struct warm_file *f)
{
	uint32_t i;

	for (i = 0; f->p && i < f->n; i++)
		free(f->p[i].tok);
	free(f->p);
	memset(f, 0, sizeof(*f));
}

static int add_prompt(struct warm_file *f, uint32_t *tok, uint32_t n, uint32_t line)
{
	struct warm_prompt *p;

	/* room for 4, then doubled whenever n reaches a power of two */
	if (!f->n || (f->n >= 4 && !(f->n & (f->n - 1)))) {
		p = realloc(f->p, sizeof(*p) * (f->n ? 2 * f->n : 4));
		if (!p)
			return -ENOMEM;
		f->p = p;
	}
	f->p[f->n++] = (struct warm_prompt){ .tok = tok, .n = n, .line = line };
	return 0;
}

int warm_read(struct warm_file *f, const char *path, uint32_t vocab, uint32_t seq_len,
	      char *err, size_t errlen)
{
	FILE *in;
	char *buf = NULL, *p, *end;
	size_t cap = 0;
	ssize_t len;
	uint32_t line = 0, *tok = NULL, n, tcap = 0;
	unsigned long id;
	int ret = 0;

	memset(f, 0, sizeof(*f));
	in = fopen(path, "r");
	if (!in) {
		ret = -errno;
		snprintf(err, errlen, "cannot open %s: %s (--prompts wants a readable prompt file)",
			 path, strerror(-ret));
		return ret;
	}
	while ((len = getline(&buf, &cap, in)) >= 0) {
		line++;
		if ((p = strchr(buf, '#')))
			*p = '\0';
		n = 0;
		for (p = buf; *p;) {
			size_t skip = strspn(p, " \t,\r\n");
			size_t word = strcspn(p + skip, " \t,\r\n");

			p += skip;
			if (!word)
				break;
			errno = 0;
			id = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
			if (*p < '0' || *p > '9' || end != p + word || errno) {
				snprintf(err, errlen, "%s:%u: '%.*s' is not a token id (want decimal "
					 "ids below the vocab, %u, separated by blanks or commas)",
					 path, line, (int)(word > 40 ? 40 : word), p, vocab);
				ret = -EINVAL;
				goto out;
			}
			if (id >= vocab) {
				snprintf(err, errlen, "%s:%u: token id %lu is not below the model's "
					 "vocab, %u (was the file made for another model?)", path,
					 line, id, vocab);
				ret = -EINVAL;
				goto out;
			}
			if (n == seq_len) {
				snprintf(err, errlen, "%s:%u: the prompt has more tokens than the "
					 "model's seq_len, %u: shorten it (a prompt must fit the "
					 "context)", path, line, seq_len);
				ret = -EINVAL;
				goto out;
			}
			if (n == tcap) {
				uint32_t *t = realloc(tok, sizeof(*t) * (tcap ? 2 * tcap : 64));

				if (!t) {
					ret = -ENOMEM;
					snprintf(err, errlen, "%s: out of memory", path);
					goto out;
				}
				tok = t;
				tcap = tcap ? 2 * tcap : 64;
			}
			tok[n++] = (uint32_t)id;
			p += word;
		}
		if (!n)
			continue;	/* blank, or a comment */
		ret = add_prompt(f, tok, n, line);
		if (ret) {
			snprintf(err, errlen, "%s: out of memory", path);
			goto out;
		}
		tok = NULL;
		tcap = 0;
	}
	if (ferror(in)) {
		ret = -EIO;
		snprintf(err, errlen, "reading %s: %s", path, strerror(EIO));
		goto out;
	}
	if (!f->n) {
		ret = -EINVAL;
		snprintf(err, errlen, "%s has no prompt (want one prompt a line: token ids separated "
			 "by blanks; '#' starts a comment)", path);
	}
out:
	free(tok);
	free(buf);
	fclose(in);
	if (ret)
		warm_file_free(f);
	return ret;
}

uint32_t warm_blocks_needed(const struct warm_file *f, uint32_t block_tokens)
{
	uint32_t i, most = 1;

	for (i = 0; i < f->n; i++)
		if (f->p[i].n / block_tokens > most)
			most = f->p[i].n / block_tokens;
	return most;
}

/* ---- warming -------------------------------------------------------------------- */

/* Positions [from, to) of one sequence into its device blocks dv, in chunks. */
static int compute(struct model *m, struct devcache *dev, const uint32_t *tok, const uint32_t *dv,
		   uint32_t from, uint32_t to, uint32_t chunk)
{
	uint32_t bt = dev->layout.block_tokens, p, i, c, len, nblk;
	int32_t *pos = malloc(sizeof(*pos) * chunk), *idx = malloc(sizeof(*idx) * (to / bt + 1));
	int64_t *slot = malloc(sizeof(*slot) * chunk);
	int32_t qi[2], bi[2], sl[1];
	int ret = 0;

	if (!pos || !idx || !slot) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < to / bt + (to % bt != 0); i++)
		idx[i] = (int32_t)dv[i];
	for (p = from; p < to && !ret; p += c) {
		struct fwd_batch b;

		c = to - p < chunk ? to - p : chunk;
		for (i = 0; i < c; i++) {
			pos[i] = (int32_t)(p + i);
			slot[i] = (int64_t)dv[(p + i) / bt] * bt + (p + i) % bt;
		}
		len = p + c;
		nblk = (len + bt - 1) / bt;
		qi[0] = 0;
		qi[1] = (int32_t)c;
		bi[0] = 0;
		bi[1] = (int32_t)nblk;
		sl[0] = (int32_t)len;
		/* a prompt chunk as the scheduler builds one; no row samples a token */
		b = (struct fwd_batch){ .n_tokens = c, .tokens = tok + p, .pos = pos, .slots = slot,
					.n_seqs = 1, .n_decode = 0, .q_indptr = qi,
					.blk_indptr = bi, .blk_indices = idx, .seq_lens = sl,
					.n_out = 0 };
		ret = model_forward(m, &dev->layout, dev->base, &b);
	}
out:
	free(pos);
	free(idx);
	free(slot);
	return ret;
}

static int fail(char *err, size_t errlen, int ret, const char *what)
{
	snprintf(err, errlen, "%s: %s", what, strerror(-ret));
	return ret;
}

int warm_space(struct model *m, struct devcache *dev, struct pcache *pc,
	       const struct warm_file *f, uint32_t batch_tokens, struct warm_stats *st,
	       char *err, size_t errlen)
{
	uint32_t bt = pc->block_tokens, most = warm_blocks_needed(f, bt), i, n_refs = 0, total = 0;
	uint32_t chunk = batch_tokens < m->max_tokens ? batch_tokens : m->max_tokens;
	uint32_t *ids = malloc(sizeof(*ids) * most), *dv = malloc(sizeof(*dv) * most), *refs;
	uint8_t (*hash)[KVRT_HASH_BYTES] = malloc(KVRT_HASH_BYTES * (size_t)most);
	struct pool_stats before = pc->st;
	double t0 = wall_seconds();
	int ret = 0, r;

	memset(st, 0, sizeof(*st));
	for (i = 0; i < f->n; i++)
		total += f->p[i].n / bt;
	refs = malloc(sizeof(*refs) * (total ? total : 1));
	if (!ids || !dv || !hash || !refs) {
		ret = fail(err, errlen, -ENOMEM, "warm");
		goto out;
	}
	for (i = 0; i < f->n; i++) {
		const struct warm_prompt *p = &f->p[i];
		uint32_t full = p->n / bt, h;

		st->prompts++;
		st->blocks += full;
		if (!full) {
			st->short_prompts++;
			continue;
		}
		ret = pcache_hash(pc, p->tok, full * bt, hash, full);
		if (ret != (int)full) {
			ret = fail(err, errlen, ret < 0 ? ret : -EIO, "kvrt_hash_prompt");
			goto out;
		}
		ret = pcache_lookup(pc, (const uint8_t (*)[KVRT_HASH_BYTES])hash, full, ids);
		if (ret < 0) {
			ret = fail(err, errlen, ret, "kvrt_lookup");
			goto out;
		}
		h = (uint32_t)ret;
		memcpy(refs + n_refs, ids, sizeof(*ids) * h);
		n_refs += h;
		st->present += h;
		if (h == full)
			continue;
		ret = devcache_alloc(dev, full, dv);
		if (ret) {
			ret = fail(err, errlen, ret, "device cache (warm_blocks_needed)");
			goto out;
		}
		/* the blocks present are the attention context of the ones computed */
		ret = pcache_fetch(pc, h, ids, dv, 0);
		if (ret) {
			devcache_free(dev, full, dv);
			ret = fail(err, errlen, ret, "fetch of the blocks present");
			goto out;
		}
		ret = compute(m, dev, p->tok, dv, h * bt, full * bt, chunk);
		if (ret) {
			devcache_free(dev, full, dv);
			ret = fail(err, errlen, ret, "forward pass");
			goto out;
		}
		ret = pcache_publish(pc, full - h, dv + h, (const uint8_t (*)[KVRT_HASH_BYTES])(hash + h),
				     ids);
		devcache_free(dev, full, dv);
		if (ret == -ENOSPC) {
			snprintf(err, errlen, "the space is full: line %u's %u blocks do not fit "
				 "beside the %u this run holds (create the space with a larger "
				 "--pool-mb, or warm fewer prompts)", p->line, full - h, n_refs);
			goto out;
		}
		if (ret) {
			ret = fail(err, errlen, ret, "publish");
			goto out;
		}
		memcpy(refs + n_refs, ids, sizeof(*ids) * (full - h));
		n_refs += full - h;
		st->computed += full - h;
	}
	ret = 0;
out:
	/* released, the blocks stay CACHED for the engines to find */
	for (i = 0; i < n_refs; i += KVRT_MAX_BATCH) {
		r = pcache_release(pc, n_refs - i < KVRT_MAX_BATCH ? n_refs - i : KVRT_MAX_BATCH,
				   refs + i);
		if (r && !ret)
			ret = fail(err, errlen, r, "kvrt_release");
	}
	st->published = pc->st.inserted - before.inserted;
	st->dedups = pc->st.dedups - before.dedups;
	st->published_bytes = st->published * pc->kv_block_bytes;
	st->seconds = wall_seconds() - t0;
	free(ids);
	free(dv);
	free(hash);
	free(refs);
	return ret;
}

/* ---- the subcommand ------------------------------------------------------------ */

static int print_workload(const struct warm_setup *s, uint32_t vocab)
{
	struct workload_opts wo = *s->wl;
	struct workload wl;
	uint32_t i;
	int ret;

	wo.vocab = vocab;
	ret = workload_make(&wl, &wo);
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: workload: %s\n", strerror(-ret));
		return WARM_RUNTIME;
	}
	printf("# kvrt-demo warm prompt file: one prompt a line, token ids below the vocab (%u)\n"
	       "# the serving workload's system prompt: %u tokens (--system-tokens %u)\n", vocab,
	       wl.n_system, wl.n_system);
	for (i = 0; i < wl.n_system; i++)
		printf("%s%u", i ? " " : "", wl.system[i]);
	printf("\n");
	workload_free(&wl);
	return WARM_OK;
}

static void report(const struct warm_opts *w, const struct warm_setup *s, struct kvrt *k,
		   const struct warm_file *f, const struct warm_stats *st, int created)
{
	const char *backend = kvrt_backend(k) == KVRT_BACKEND_KMOD ? "kmod" : "embedded";
	char b[32];

	if (s->json) {
		printf("{\"tool\": \"kvrt-demo\", \"command\": \"warm\", \"backend\": \"%s\", "
		       "\"backend_info\": ", backend);
		report_json_str(stdout, kvrt_backend_info(k));
		printf(",\n \"space\": {\"name\": ");
		report_json_str(stdout, s->space);
		/* a joined space persists or not as its creator chose */
		printf(", \"created\": %s, \"persistent\": %s}, \"priority\": %u,\n",
		       created ? "true" : "false", created ? "true" : "null", w->priority);
		printf(" \"prompts\": %u, \"short_prompts\": %u, \"blocks\": %" PRIu64
		       ", \"present\": %" PRIu64 ", \"computed\": %" PRIu64 ", \"published\": %"
		       PRIu64 ", \"dedups\": %" PRIu64 ", \"published_bytes\": %" PRIu64
		       ", \"block_tokens\": %u, \"seconds\": %.4f}\n", st->prompts,
		       st->short_prompts, st->blocks, st->present, st->computed, st->published,
		       st->dedups, st->published_bytes, s->block_tokens, st->seconds);
		return;
	}
	if (!s->quiet) {
		uint32_t i;

		printf("kvrt-demo warm: space %s (%s), priority %u, backend %s\n", s->space,
		       created ? "created, persistent" : "joined: persistent if its creator made it so",
		       w->priority, kvrt_backend_info(k));
		for (i = 0; i < f->n; i++)
			if (f->p[i].n < s->block_tokens)
				printf("note: %s:%u: %u tokens, shorter than one block (%u): "
				       "nothing to cache\n", w->prompts, f->p[i].line, f->p[i].n,
				       s->block_tokens);
		printf("warmed %u prompts from %s: %" PRIu64 " full blocks of %u tokens: %" PRIu64
		       " already present, %" PRIu64 " computed, %" PRIu64 " published (%" PRIu64
		       " found published meanwhile), %s of K/V in %.3f s\n", st->prompts,
		       w->prompts, st->blocks, s->block_tokens, st->present, st->computed,
		       st->published, st->dedups, fmt_bytes(b, sizeof(b), st->published_bytes),
		       st->seconds);
	}
	printf("summary: backend=%s space=%s priority=%u prompts=%u blocks=%" PRIu64
	       " present=%" PRIu64 " computed=%" PRIu64 " published=%" PRIu64 " dedups=%" PRIu64
	       " bytes=%" PRIu64 " seconds=%.3f\n", backend, s->space, w->priority, st->prompts,
	       st->blocks, st->present, st->computed, st->published, st->dedups,
	       st->published_bytes, st->seconds);
}

int warm_main(const struct warm_opts *w, const struct warm_setup *s)
{
	struct checkpoint ck;
	struct warm_file f = { 0 };
	struct warm_stats st;
	struct model m;
	struct devcache dev;
	struct pcache pc;
	struct kvrt *k = NULL;
	struct kvrt_open_opts oo = { .backend = s->backend };
	struct kvrt_space_info si;
	struct pool_opts po = { 0 };
	char err[512], model_id[160];
	int ret, rc = WARM_RUNTIME, created = 0;

	if (!w->print_workload && !w->prompts) {
		fprintf(stderr, "kvrt-demo warm: --prompts FILE is needed (one prompt a line, token "
			"ids), or --print-workload-prompt to make one\n");
		return WARM_USAGE;
	}
	if (!w->print_workload && !s->space) {
		fprintf(stderr, "kvrt-demo warm: --space NAME is needed: the space the engines "
			"join (kvrt-demo --space NAME)\n");
		return WARM_USAGE;
	}
	if (s->checkpoint)
		ret = ckpt_load(&ck, s->checkpoint, err, sizeof(err));
	else
		ret = ckpt_generate(&ck, s->cfg, s->model_seed, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: %s\n", err);
		return !s->checkpoint && ret == -EINVAL ? WARM_USAGE : WARM_RUNTIME;
	}
	if (w->print_workload) {
		rc = print_workload(s, (uint32_t)ck.cfg.vocab_size);
		goto out_ckpt;
	}
	/* the whole file is checked before anything is computed or published */
	ret = warm_read(&f, w->prompts, (uint32_t)ck.cfg.vocab_size, (uint32_t)ck.cfg.seq_len,
			err, sizeof(err));
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: %s\n", err);
		rc = ret == -ENOMEM ? WARM_RUNTIME : WARM_USAGE;
		goto out_ckpt;
	}
	ret = model_init(&m, &ck, s->batch_tokens, s->threads, DECODE_WITH_PREFILL);
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: model: %s\n", strerror(-ret));
		goto out_file;
	}
	ret = devcache_init(&dev, (uint32_t)ck.cfg.n_layers, (uint32_t)ck.cfg.n_kv_heads,
			    (uint32_t)(ck.cfg.dim / ck.cfg.n_heads), s->block_tokens,
			    warm_blocks_needed(&f, s->block_tokens), s->kv_dtype, NULL);
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: device KV cache: %s\n", strerror(-ret));
		goto out_model;
	}
	ret = kvrt_open(&k, &oo);
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: kvrt_open: %s%s\n", strerror(-ret),
			ret == -ENODEV ? " (is kvpool.ko loaded?)" : "");
		goto out_dev;
	}
	if (kvrt_backend(k) != KVRT_BACKEND_KMOD)
		fprintf(stderr, "kvrt-demo warm: note: %s: an embedded space ends with this "
			"process; engines in other processes find warmed blocks only through "
			"kvpool.ko (--backend kmod)\n", kvrt_backend_info(k));
	po.space_name = s->space;
	po.space_flags = KVRT_SPACE_CREATE | KVRT_SPACE_PERSIST;
	po.mode = 0600;
	po.quota_bytes = s->pool_bytes;
	/* the serving run's chain root, so that its lookups find these blocks */
	pcache_model_id(model_id, sizeof(model_id), ckpt_fingerprint(&ck), s->kv_dtype,
			s->block_tokens);
	ret = pcache_open(&pc, k, &dev, &po, model_id, strlen(model_id), err, sizeof(err));
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: %s\n", err);
		goto out_kvrt;
	}
	pc.priority = w->priority;
	if (!kvrt_space_info(pc.space, &si))
		created = si.created;
	ret = warm_space(&m, &dev, &pc, &f, s->batch_tokens, &st, err, sizeof(err));
	pcache_close(&pc);
	if (ret) {
		fprintf(stderr, "kvrt-demo warm: %s (%" PRIu64 " blocks published before that "
			"stay)\n", err, st.published);
		goto out_kvrt;
	}
	report(w, s, k, &f, &st, created);
	rc = WARM_OK;
out_kvrt:
	kvrt_close(k);
out_dev:
	devcache_fini(&dev);
out_model:
	model_fini(&m);
out_file:
	warm_file_free(&f);
out_ckpt:
	ckpt_free(&ck);
	return rc;
}
