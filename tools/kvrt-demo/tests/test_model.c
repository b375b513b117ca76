// SPDX-License-Identifier: GPL-2.0
/*
 * test_model: the checkpoint reader and generator (a round trip, the byte
 * layout of the file, errors), the building blocks of the decoder against
 * float64 references, and the property the equivalence check rests on: a
 * token's logits do not depend on the batch, the chunking or the thread
 * count.  One TAP result per check (selftests/tap.h); exit status 1 on any
 * failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../selftests/tap.h"
#include "cache.h"
#include "checkpoint.h"
#include "model.h"

static uint64_t rng = 0x1234567;

static double urand(void)	/* [-1, 1) */
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static const struct model_config small = {
	.dim = 48, .hidden_dim = 100, .n_layers = 3, .n_heads = 6, .n_kv_heads = 2,
	.vocab_size = 97, .seq_len = 64, .shared_classifier = 1,
};

static char tmpfile_path[256];

static long file_size(const char *p)
{
	FILE *f = fopen(p, "rb");
	long n;

	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fclose(f);
	return n;
}

static int read_at(const char *p, long off, void *buf, size_t n)
{
	FILE *f = fopen(p, "rb");
	int ret;

	if (!f)
		return -1;
	ret = fseek(f, off, SEEK_SET) || fread(buf, 1, n, f) != n ? -1 : 0;
	fclose(f);
	return ret;
}

static void test_checkpoint_roundtrip(int shared)
{
	struct model_config c = small;
	struct checkpoint a, b;
	char err[256];
	int32_t hdr[7];
	float f0, last;
	size_t D = (size_t)c.dim, V = (size_t)c.vocab_size, L = (size_t)c.n_layers;
	long wq_off;
	int ret;

	c.shared_classifier = shared;
	ret = ckpt_generate(&a, &c, 42, err, sizeof(err));
	tap_result(ret == 0, "generate (%s classifier): %s", shared ? "shared" : "separate",
	   ret ? err : "ok");
	if (ret)
		return;
	ret = ckpt_save(&a, tmpfile_path, err, sizeof(err));
	tap_result(ret == 0, "save: %s", ret ? err : "ok");
	tap_result(file_size(tmpfile_path) == (long)(CKPT_HEADER_BYTES + 4 * a.n_floats),
	   "file is header + %zu floats", a.n_floats);
	/* the header as llama2.c defines it, with vocab negated for a separate classifier */
	read_at(tmpfile_path, 0, hdr, sizeof(hdr));
	tap_result(hdr[0] == c.dim && hdr[1] == c.hidden_dim && hdr[2] == c.n_layers &&
	   hdr[3] == c.n_heads && hdr[4] == c.n_kv_heads &&
	   hdr[5] == (shared ? c.vocab_size : -c.vocab_size) && hdr[6] == c.seq_len,
	   "header: dim hidden layers heads kv_heads %svocab seq_len", shared ? "" : "-");
	/* tensor order: embedding first, rms_att, then wq; the classifier last */
	read_at(tmpfile_path, CKPT_HEADER_BYTES, &f0, 4);
	tap_result(f0 == a.tok_emb[0], "the token embedding follows the header");
	wq_off = CKPT_HEADER_BYTES + 4 * (long)(V * D + L * D);
	read_at(tmpfile_path, wq_off, &f0, 4);
	tap_result(f0 == a.wq[0] && a.wq == a.data + V * D + L * D, "wq follows rms_att");
	read_at(tmpfile_path, file_size(tmpfile_path) - 4, &last, 4);
	tap_result(shared ? last == a.freq_sin[(size_t)c.seq_len * (D / c.n_heads) / 2 - 1] :
		    last == a.wcls[V * D - 1],
	   "the file ends with %s", shared ? "the legacy RoPE tables" : "wcls");
	ret = ckpt_load(&b, tmpfile_path, err, sizeof(err));
	tap_result(ret == 0, "load: %s", ret ? err : "ok");
	if (!ret) {
		tap_result(!memcmp(&a.cfg, &b.cfg, sizeof(a.cfg)), "config survives the round trip");
		tap_result(a.n_floats == b.n_floats && !memcmp(a.data, b.data, 4 * a.n_floats),
		   "every weight survives the round trip");
		tap_result(ckpt_fingerprint(&a) == ckpt_fingerprint(&b), "fingerprints match");
		tap_result(shared ? b.wcls == b.tok_emb : b.wcls != b.tok_emb,
		   "classifier %s", shared ? "is the embedding" : "is its own tensor");
		ckpt_free(&b);
	}
	ckpt_free(&a);
}

static void test_checkpoint_generator(void)
{
	struct checkpoint a, b, c;
	char err[256];

	ckpt_generate(&a, &small, 7, err, sizeof(err));
	ckpt_generate(&b, &small, 7, err, sizeof(err));
	ckpt_generate(&c, &small, 8, err, sizeof(err));
	tap_result(!memcmp(a.data, b.data, 4 * a.n_floats), "the same seed gives the same weights");
	tap_result(memcmp(a.data, c.data, 4 * a.n_floats) != 0, "another seed gives other weights");
	tap_result(a.rms_att[0] == 1.0f && a.rms_final[small.dim - 1] == 1.0f, "norm weights are 1");
	ckpt_free(&a);
	ckpt_free(&b);
	ckpt_free(&c);
}

static void test_checkpoint_errors(void)
{
	struct model_config c = small;
	struct checkpoint a, b;
	char err[256];
	FILE *f;
	long n;

	tap_result(ckpt_load(&b, "/nonexistent/model.bin", err, sizeof(err)) == -ENOENT,
	   "missing file: ENOENT (%s)", err);
	c.n_kv_heads = 4;	/* 6 heads are not a multiple of 4 */
	tap_result(ckpt_generate(&a, &c, 1, err, sizeof(err)) == -EINVAL, "bad shape refused (%s)", err);
	ckpt_generate(&a, &small, 1, err, sizeof(err));
	ckpt_save(&a, tmpfile_path, err, sizeof(err));
	n = file_size(tmpfile_path);
	if (truncate(tmpfile_path, n - 4) == 0)
		tap_result(ckpt_load(&b, tmpfile_path, err, sizeof(err)) == -EINVAL,
		   "truncated file refused (%s)", err);
	f = fopen(tmpfile_path, "wb");
	if (f) {
		fwrite("\x01\x00", 1, 2, f);
		fclose(f);
	}
	tap_result(ckpt_load(&b, tmpfile_path, err, sizeof(err)) == -EINVAL, "short header refused (%s)",
	   err);
	ckpt_free(&a);
}

/* The draft of speculative decoding: a prefix of every layer stack. */
static void test_checkpoint_first_layers(void)
{
	struct model_config c = small;
	struct checkpoint a, d, all;
	size_t D = (size_t)c.dim, H = (size_t)c.hidden_dim, KV = D / 6 * 2;
	char err[256];

	c.shared_classifier = 0;
	ckpt_generate(&a, &c, 5, err, sizeof(err));
	tap_result(ckpt_first_layers(&d, &a, 0, err, sizeof(err)) == -EINVAL &&
		   ckpt_first_layers(&d, &a, 4, err, sizeof(err)) == -EINVAL,
		   "0 or more layers than the model refused (%s)", err);
	tap_result(ckpt_first_layers(&all, &a, 3, err, sizeof(err)) == 0 &&
		   ckpt_fingerprint(&all) == ckpt_fingerprint(&a),
		   "all layers: the same checkpoint, fingerprint and all");
	tap_result(ckpt_first_layers(&d, &a, 2, err, sizeof(err)) == 0 && d.cfg.n_layers == 2 &&
		   d.n_floats < a.n_floats, "2 of 3 layers: a smaller checkpoint");
	tap_result(!memcmp(d.wq, a.wq, 4 * 2 * D * D) && !memcmp(d.wk, a.wk, 4 * 2 * KV * D) &&
		   !memcmp(d.w2, a.w2, 4 * 2 * D * H) && !memcmp(d.w3, a.w3, 4 * 2 * H * D) &&
		   !memcmp(d.rms_ffn, a.rms_ffn, 4 * 2 * D) &&
		   !memcmp(d.tok_emb, a.tok_emb, 4 * (size_t)c.vocab_size * D) &&
		   !memcmp(d.wcls, a.wcls, 4 * (size_t)c.vocab_size * D) && d.wcls != d.tok_emb,
		   "its layers, embedding and classifier are the model's first ones");
	ckpt_free(&d);
	ckpt_free(&all);
	ckpt_free(&a);
}

static void test_rmsnorm(void)
{
	enum { N = 333 };
	float x[N], w[N], out[N];
	double ss = 0, maxerr = 0;
	int i;

	for (i = 0; i < N; i++) {
		x[i] = (float)(urand() * 3);
		w[i] = (float)(1 + urand() * 0.5);
		ss += (double)x[i] * x[i];
	}
	rmsnorm(out, x, w, N);
	for (i = 0; i < N; i++) {
		double ref = (double)w[i] * x[i] / sqrt(ss / N + (double)MODEL_RMS_EPS);
		double e = fabs(out[i] - ref) / (fabs(ref) + 1e-6);

		if (e > maxerr)
			maxerr = e;
	}
	tap_result(maxerr < 2e-6, "rmsnorm against float64: max relative error %.2g", maxerr);
}

static void test_rope(void)
{
	enum { HD = 64, HEADS = 3, N = HD * HEADS, SEQ = 4096 };
	float *ct = malloc(sizeof(float) * SEQ * HD / 2), *st = malloc(sizeof(float) * SEQ * HD / 2);
	float v[N], orig[N];
	double maxerr = 0;
	int pos, i;

	rope_tables(ct, st, SEQ, HD);
	for (pos = 0; pos < SEQ; pos += 509) {
		for (i = 0; i < N; i++)
			orig[i] = v[i] = (float)urand();
		rope_apply(v, N, HD, ct + (size_t)pos * HD / 2, st + (size_t)pos * HD / 2);
		for (i = 0; i < N; i += 2) {
			/* pairs (2j, 2j+1) of a head turn by pos * 10000^(-2j/HD) */
			int j = (i % HD) / 2;
			double th = pos * pow(10000.0, -2.0 * j / HD);
			double r0 = orig[i] * cos(th) - orig[i + 1] * sin(th);
			double r1 = orig[i] * sin(th) + orig[i + 1] * cos(th);

			maxerr = fmax(maxerr, fmax(fabs(v[i] - r0), fabs(v[i + 1] - r1)));
		}
	}
	tap_result(maxerr < 1e-6, "rope against float64 up to position %d: max error %.2g", SEQ - 1,
	   maxerr);
	free(ct);
	free(st);
}

static void test_swiglu(void)
{
	enum { N = 1000 };
	float g[N], u[N], out[N];
	double maxerr = 0;
	int i;

	for (i = 0; i < N; i++) {
		g[i] = (float)(urand() * 12);
		u[i] = (float)(urand() * 2);
	}
	memcpy(out, g, sizeof(g));
	swiglu(out, u, N);
	for (i = 0; i < N; i++) {
		double ref = (double)g[i] / (1 + exp(-(double)g[i])) * u[i];

		maxerr = fmax(maxerr, fabs(out[i] - ref) / (fabs(ref) + 1e-6));
	}
	tap_result(maxerr < 1e-5, "swiglu against float64: max relative error %.2g", maxerr);
}

static void test_matmul(void)
{
	enum { T = 13, N = 37, K = 203 };
	float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
	float *y = malloc(sizeof(float) * T * N), *y1 = malloc(sizeof(float) * N);
	float *y2 = malloc(sizeof(float) * T * N);
	struct tpool *pool = tpool_create(3);
	double maxerr = 0;
	int t, n, k, same = 1;

	for (k = 0; k < T * K; k++)
		x[k] = (float)urand();
	for (k = 0; k < N * K; k++)
		w[k] = (float)urand();
	matmul(NULL, y, x, w, T, N, K);
	for (t = 0; t < T; t++) {
		for (n = 0; n < N; n++) {
			double ref = 0;

			for (k = 0; k < K; k++)
				ref += (double)x[t * K + k] * w[n * K + k];
			maxerr = fmax(maxerr, fabs(y[t * N + n] - ref));
		}
	}
	tap_result(maxerr < 1e-4, "matmul against float64: max error %.2g", maxerr);
	/* each row alone, and the whole on three threads: the same bits */
	for (t = 0; t < T; t++) {
		matmul(NULL, y1, x + (size_t)t * K, w, 1, N, K);
		same &= !memcmp(y1, y + (size_t)t * N, sizeof(float) * N);
	}
	tap_result(same, "matmul rows do not depend on the batch");
	matmul(pool, y2, x, w, T, N, K);
	tap_result(!memcmp(y, y2, sizeof(float) * T * N), "matmul does not depend on the thread count");
	tpool_destroy(pool);
	free(x);
	free(w);
	free(y);
	free(y1);
	free(y2);
}

static void test_argmax(void)
{
	float l[6] = { 1, 3, -2, 3, 0, 3 };

	tap_result(argmax(l, 6) == 1, "argmax takes the lowest id on ties");
}

/*
 * A prompt run as one chunk, as ragged chunks batched with another
 * sequence, and then decoded: the logits of its last position and of the
 * next token are the same bits every way.
 */
static int run_chunks(struct model *m, struct devcache *dev, const uint32_t *tok, uint32_t n,
		      uint32_t chunk, const uint32_t *other, float *logits)
{
	uint32_t bt = dev->layout.block_tokens, done = 0, od = 0, t, nb, ob, i;
	int32_t pos[128], qi[3], bi[3], idx[32], len[2];
	uint32_t bt_tok[128], out[2];
	int64_t slot[128];
	int ret = 0;

	/* blocks 0..7 for the sequence, 8..15 for the other one */
	for (i = 0; i < 16; i++)
		idx[i] = (int32_t)i;
	while (done < n) {
		uint32_t c = n - done < chunk ? n - done : chunk;
		uint32_t oc = other && od < 40 ? 5 : 0;
		struct fwd_batch b = { 0 };
		float lg[2 * 128];

		t = 0;
		for (i = 0; i < c; i++, t++) {
			bt_tok[t] = tok[done + i];
			pos[t] = (int32_t)(done + i);
			slot[t] = pos[t];
		}
		nb = (done + c + bt - 1) / bt;
		qi[0] = 0;
		qi[1] = (int32_t)t;
		bi[0] = 0;
		bi[1] = (int32_t)nb;
		len[0] = (int32_t)(done + c);
		for (i = 0; i < oc; i++, t++) {
			bt_tok[t] = other[od + i];
			pos[t] = (int32_t)(od + i);
			slot[t] = 8 * bt + pos[t];
		}
		ob = (od + oc + bt - 1) / bt;
		memmove(idx + nb, idx + 8, sizeof(int32_t) * ob);
		qi[2] = (int32_t)t;
		bi[2] = (int32_t)(nb + ob);
		len[1] = (int32_t)(od + oc);
		out[0] = c - 1;
		b = (struct fwd_batch){ .n_tokens = t, .tokens = bt_tok, .pos = pos, .slots = slot,
			.n_seqs = oc ? 2 : 1, .q_indptr = qi, .blk_indptr = bi, .blk_indices = idx,
			.seq_lens = len, .n_out = 1, .out_rows = out, .logits = lg };
		ret = model_forward(m, &dev->layout, dev->base, &b);
		for (i = 0; i < 16; i++)
			idx[i] = (int32_t)i;
		if (ret)
			return ret;
		done += c;
		od += oc;
		if (done == n)
			memcpy(logits, lg, sizeof(float) * (size_t)m->cfg.vocab_size);
	}
	return 0;
}

static void test_forward_invariance(void)
{
	struct model_config c = { .dim = 64, .hidden_dim = 160, .n_layers = 2, .n_heads = 4,
				  .n_kv_heads = 2, .vocab_size = 200, .seq_len = 256,
				  .shared_classifier = 1 };
	struct checkpoint ck;
	struct model m1, m2;
	struct devcache dev;
	uint32_t tok[100], other[64], i;
	float *a, *b, *d;
	char err[128];
	int ret;

	for (i = 0; i < 100; i++)
		tok[i] = (uint32_t)(i * 37 % 200);
	for (i = 0; i < 64; i++)
		other[i] = (uint32_t)(i * 11 % 200);
	a = malloc(sizeof(float) * 200);
	b = malloc(sizeof(float) * 200);
	d = malloc(sizeof(float) * 200);
	ckpt_generate(&ck, &c, 3, err, sizeof(err));
	model_init(&m1, &ck, 128, 1, DECODE_WITH_PREFILL);
	model_init(&m2, &ck, 128, 2, DECODE_WITH_PREFILL);
	devcache_init(&dev, 2, 2, 16, 16, 16, KVRT_DTYPE_F16, NULL);
	ret = run_chunks(&m1, &dev, tok, 100, 100, NULL, a);
	tap_result(ret == 0, "forward, one chunk of 100 tokens: %d", ret);
	ret = run_chunks(&m2, &dev, tok, 100, 7, other, b);
	tap_result(ret == 0, "forward, chunks of 7 batched with another sequence, 2 threads: %d", ret);
	tap_result(!memcmp(a, b, sizeof(float) * 200), "the logits are the same bits both ways");
	ret = run_chunks(&m2, &dev, tok, 100, 1, NULL, d);
	tap_result(!ret && !memcmp(a, d, sizeof(float) * 200),
	   "token by token (1-token prefill chunks): the same bits");
	tap_result(argmax(a, 200) == argmax(b, 200), "the same next token");
	devcache_fini(&dev);
	model_fini(&m1);
	model_fini(&m2);
	ckpt_free(&ck);
	free(a);
	free(b);
	free(d);
}

int main(void)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	snprintf(tmpfile_path, sizeof(tmpfile_path), "%s/kvrt-demo-test-%d.bin", dir,
		 (int)getpid());
	test_checkpoint_roundtrip(1);
	test_checkpoint_roundtrip(0);
	test_checkpoint_generator();
	test_checkpoint_errors();
	test_checkpoint_first_layers();
	test_rmsnorm();
	test_rope();
	test_swiglu();
	test_matmul();
	test_argmax();
	test_forward_invariance();
	unlink(tmpfile_path);
	return tap_done("test_model");
}
