// SPDX-License-Identifier: GPL-2.0
/*
 * checkpoint.c: the llama2.c checkpoint format, written from its
 * description: a header of seven little-endian int32 (dim, hidden_dim,
 * n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
 * vocab_size means an unshared classifier follows the other tensors), then
 * fp32 tensors in the order checkpoint.h lists.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"

static void set_err(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

int ckpt_config_check(const struct model_config *c, char *err, size_t errlen)
{
	if (c->dim <= 0 || c->dim > CKPT_MAX_DIM || c->hidden_dim <= 0 ||
	    c->hidden_dim > CKPT_MAX_HIDDEN || c->n_layers <= 0 || c->n_layers > CKPT_MAX_LAYERS ||
	    c->vocab_size <= 0 || c->vocab_size > CKPT_MAX_VOCAB || c->seq_len <= 0 ||
	    c->seq_len > CKPT_MAX_SEQ || c->n_heads <= 0 || c->n_kv_heads <= 0) {
		set_err(err, errlen, "sizes out of range (dim %d, hidden %d, layers %d, heads %d, "
			"kv heads %d, vocab %d, seq_len %d)", c->dim, c->hidden_dim, c->n_layers,
			c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len);
		return -EINVAL;
	}
	if (c->dim % c->n_heads) {
		set_err(err, errlen, "dim %d is not a multiple of n_heads %d", c->dim, c->n_heads);
		return -EINVAL;
	}
	if (c->n_heads % c->n_kv_heads) {
		set_err(err, errlen, "n_heads %d is not a multiple of n_kv_heads %d", c->n_heads,
			c->n_kv_heads);
		return -EINVAL;
	}
	if ((c->dim / c->n_heads) % 2) {
		set_err(err, errlen, "head dim %d is odd: RoPE rotates pairs", c->dim / c->n_heads);
		return -EINVAL;
	}
	return 0;
}

/* Offsets (in floats) of each tensor; the last entry is the total. */
enum { T_EMB, T_RMS_ATT, T_WQ, T_WK, T_WV, T_WO, T_RMS_FFN, T_W1, T_W2, T_W3, T_RMS_FINAL,
       T_FCOS, T_FSIN, T_WCLS, T_END };

static void tensor_offsets(const struct model_config *c, size_t off[T_END + 1])
{
	size_t D = (size_t)c->dim, H = (size_t)c->hidden_dim, L = (size_t)c->n_layers;
	size_t V = (size_t)c->vocab_size, S = (size_t)c->seq_len;
	size_t hd = D / (size_t)c->n_heads, KV = hd * (size_t)c->n_kv_heads;
	size_t sz[T_END] = {
		[T_EMB] = V * D, [T_RMS_ATT] = L * D, [T_WQ] = L * D * D, [T_WK] = L * KV * D,
		[T_WV] = L * KV * D, [T_WO] = L * D * D, [T_RMS_FFN] = L * D, [T_W1] = L * H * D,
		[T_W2] = L * D * H, [T_W3] = L * H * D, [T_RMS_FINAL] = D, [T_FCOS] = S * hd / 2,
		[T_FSIN] = S * hd / 2, [T_WCLS] = c->shared_classifier ? 0 : V * D,
	};
	int i;

	off[0] = 0;
	for (i = 0; i < T_END; i++)
		off[i + 1] = off[i] + sz[i];
}

size_t ckpt_float_count(const struct model_config *c)
{
	size_t off[T_END + 1];

	tensor_offsets(c, off);
	return off[T_END];
}

uint64_t ckpt_param_count(const struct model_config *c)
{
	size_t off[T_END + 1];

	tensor_offsets(c, off);
	return (uint64_t)(off[T_END] - (off[T_FSIN + 1] - off[T_FCOS]));
}

/* Each tensor's pointer: data at its offset; wcls, the last, may be tok_emb instead. */
static void bind_tensors(struct checkpoint *ck)
{
	float **dst[T_WCLS] = {
		[T_EMB] = &ck->tok_emb, [T_RMS_ATT] = &ck->rms_att, [T_WQ] = &ck->wq,
		[T_WK] = &ck->wk, [T_WV] = &ck->wv, [T_WO] = &ck->wo, [T_RMS_FFN] = &ck->rms_ffn,
		[T_W1] = &ck->w1, [T_W2] = &ck->w2, [T_W3] = &ck->w3, [T_RMS_FINAL] = &ck->rms_final,
		[T_FCOS] = &ck->freq_cos, [T_FSIN] = &ck->freq_sin,
	};
	size_t off[T_END + 1];
	int i;

	tensor_offsets(&ck->cfg, off);
	for (i = 0; i < T_WCLS; i++)
		*dst[i] = ck->data + off[i];
	ck->wcls = ck->cfg.shared_classifier ? ck->tok_emb : ck->data + off[T_WCLS];
}

static int32_t le32(const unsigned char *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			 (uint32_t)p[3] << 24);
}

static void put_le32(unsigned char *p, int32_t v)
{
	uint32_t u = (uint32_t)v;

	p[0] = (unsigned char)u;
	p[1] = (unsigned char)(u >> 8);
	p[2] = (unsigned char)(u >> 16);
	p[3] = (unsigned char)(u >> 24);
}

static int alloc_data(struct checkpoint *ck, char *err, size_t errlen)
{
	ck->n_floats = ckpt_float_count(&ck->cfg);
	/* 64-byte aligned: the matmul reads rows with vector loads */
	ck->data = aligned_alloc(64, (ck->n_floats * sizeof(float) + 63) & ~(size_t)63);
	if (!ck->data) {
		set_err(err, errlen, "out of memory for %zu weights", ck->n_floats);
		return -ENOMEM;
	}
	bind_tensors(ck);
	return 0;
}

int ckpt_load(struct checkpoint *ck, const char *path, char *err, size_t errlen)
{
	unsigned char hdr[CKPT_HEADER_BYTES];
	struct stat st;
	size_t want, n_shared;
	FILE *f;
	int ret;

	memset(ck, 0, sizeof(*ck));
	f = fopen(path, "rb");
	if (!f) {
		ret = -errno;
		set_err(err, errlen, "%s: %s", path, strerror(errno));
		return ret;
	}
	if (fstat(fileno(f), &st) || fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
		set_err(err, errlen, "%s: shorter than the %d-byte header", path, CKPT_HEADER_BYTES);
		ret = -EINVAL;
		goto out_close;
	}
	ck->cfg.dim = le32(hdr);
	ck->cfg.hidden_dim = le32(hdr + 4);
	ck->cfg.n_layers = le32(hdr + 8);
	ck->cfg.n_heads = le32(hdr + 12);
	ck->cfg.n_kv_heads = le32(hdr + 16);
	ck->cfg.vocab_size = le32(hdr + 20);
	ck->cfg.seq_len = le32(hdr + 24);
	ck->cfg.shared_classifier = ck->cfg.vocab_size > 0;
	if (ck->cfg.vocab_size < 0 && ck->cfg.vocab_size != INT32_MIN)
		ck->cfg.vocab_size = -ck->cfg.vocab_size;
	ret = ckpt_config_check(&ck->cfg, err, errlen);
	if (ret)
		goto out_close;
	want = ckpt_float_count(&ck->cfg);
	if ((uint64_t)st.st_size != CKPT_HEADER_BYTES + (uint64_t)want * 4) {
		/* Say which layout the size would have matched, if any. */
		struct model_config other = ck->cfg;

		other.shared_classifier = !other.shared_classifier;
		n_shared = ckpt_float_count(&other);
		set_err(err, errlen, "%s: %lld bytes, but this header (%s classifier) needs %llu%s",
			path, (long long)st.st_size, ck->cfg.shared_classifier ? "shared" : "separate",
			(unsigned long long)(CKPT_HEADER_BYTES + (uint64_t)want * 4),
			(uint64_t)st.st_size == CKPT_HEADER_BYTES + (uint64_t)n_shared * 4 ?
			" (the size fits the other classifier choice: the sign of vocab_size is wrong)" : "");
		ret = -EINVAL;
		goto out_close;
	}
	ret = alloc_data(ck, err, errlen);
	if (ret)
		goto out_close;
	if (fread(ck->data, sizeof(float), want, f) != want) {
		set_err(err, errlen, "%s: short read", path);
		ret = -EIO;
		goto out_free;
	}
	fclose(f);
	return 0;

out_free:
	ckpt_free(ck);
out_close:
	fclose(f);
	return ret;
}

int ckpt_save(const struct checkpoint *ck, const char *path, char *err, size_t errlen)
{
	unsigned char hdr[CKPT_HEADER_BYTES];
	const struct model_config *c = &ck->cfg;
	FILE *f;
	int ret = 0;

	put_le32(hdr, c->dim);
	put_le32(hdr + 4, c->hidden_dim);
	put_le32(hdr + 8, c->n_layers);
	put_le32(hdr + 12, c->n_heads);
	put_le32(hdr + 16, c->n_kv_heads);
	put_le32(hdr + 20, c->shared_classifier ? c->vocab_size : -c->vocab_size);
	put_le32(hdr + 24, c->seq_len);
	f = fopen(path, "wb");
	if (!f) {
		ret = -errno;
		set_err(err, errlen, "%s: %s", path, strerror(errno));
		return ret;
	}
	errno = 0;
	if (fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr) ||
	    fwrite(ck->data, sizeof(float), ck->n_floats, f) != ck->n_floats) {
		ret = errno ? -errno : -EIO;
		set_err(err, errlen, "%s: write: %s", path, strerror(-ret));
	}
	if (fclose(f) && !ret) {
		ret = -errno;
		set_err(err, errlen, "%s: close: %s", path, strerror(errno));
	}
	return ret;
}

/* splitmix64: small, seedable, and the same on every platform. */
static uint64_t mix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* Uniform in [-scale, scale): 24 random bits, exact in a float. */
static void fill_uniform(float *p, size_t n, float scale, uint64_t *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = ((float)(mix64(s) >> 40) * (2.0f / 16777216.0f) - 1.0f) * scale;
}

static void fill_const(float *p, size_t n, float v)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = v;
}

int ckpt_generate(struct checkpoint *ck, const struct model_config *cfg, uint64_t seed,
		  char *err, size_t errlen)
{
	size_t D, H, L, V, KV, hd, S, p, i;
	/* each tensor from its own stream, so shapes do not shift each other */
	uint64_t s;
	float in_d, in_h, resid;
	int ret;

	memset(ck, 0, sizeof(*ck));
	ck->cfg = *cfg;
	ret = ckpt_config_check(cfg, err, errlen);
	if (ret)
		return ret;
	ret = alloc_data(ck, err, errlen);
	if (ret)
		return ret;
	D = (size_t)cfg->dim;
	H = (size_t)cfg->hidden_dim;
	L = (size_t)cfg->n_layers;
	V = (size_t)cfg->vocab_size;
	S = (size_t)cfg->seq_len;
	hd = D / (size_t)cfg->n_heads;
	KV = hd * (size_t)cfg->n_kv_heads;
	/*
	 * Uniform weights with variance 1 / fan_in keep activations near unit
	 * scale; the two matrices that write into the residual stream are
	 * scaled down by sqrt(2 L) so that it does not grow with depth.
	 */
	in_d = sqrtf(3.0f / (float)D);
	in_h = sqrtf(3.0f / (float)H);
	resid = 1.0f / sqrtf(2.0f * (float)L);
	s = seed ^ 0x01;
	fill_uniform(ck->tok_emb, V * D, 1.0f, &s);
	fill_const(ck->rms_att, L * D, 1.0f);
	s = seed ^ 0x02;
	fill_uniform(ck->wq, L * D * D, in_d, &s);
	s = seed ^ 0x03;
	fill_uniform(ck->wk, L * KV * D, in_d, &s);
	s = seed ^ 0x04;
	fill_uniform(ck->wv, L * KV * D, in_d, &s);
	s = seed ^ 0x05;
	fill_uniform(ck->wo, L * D * D, in_d * resid, &s);
	fill_const(ck->rms_ffn, L * D, 1.0f);
	s = seed ^ 0x06;
	fill_uniform(ck->w1, L * H * D, in_d, &s);
	s = seed ^ 0x07;
	fill_uniform(ck->w2, L * D * H, in_h * resid, &s);
	s = seed ^ 0x08;
	fill_uniform(ck->w3, L * H * D, in_d, &s);
	fill_const(ck->rms_final, D, 1.0f);
	/* The legacy tables as their definition gives them (nothing reads them). */
	for (p = 0; p < S; p++) {
		for (i = 0; i < hd / 2; i++) {
			double freq = pow(10000.0, -(double)(2 * i) / (double)hd);

			ck->freq_cos[p * hd / 2 + i] = (float)cos((double)p * freq);
			ck->freq_sin[p * hd / 2 + i] = (float)sin((double)p * freq);
		}
	}
	if (!cfg->shared_classifier) {
		s = seed ^ 0x09;
		fill_uniform(ck->wcls, V * D, 1.0f, &s);
	}
	return 0;
}

int ckpt_first_layers(struct checkpoint *dst, const struct checkpoint *src, int32_t layers,
		      char *err, size_t errlen)
{
	size_t D, H, KV, L;
	int ret;

	memset(dst, 0, sizeof(*dst));
	if (layers < 1 || layers > src->cfg.n_layers) {
		set_err(err, errlen, "a model of %d layers has no first %d layers (want 1 to %d)",
			src->cfg.n_layers, layers, src->cfg.n_layers);
		return -EINVAL;
	}
	dst->cfg = src->cfg;
	dst->cfg.n_layers = layers;
	ret = alloc_data(dst, err, errlen);
	if (ret)
		return ret;
	D = (size_t)src->cfg.dim;
	H = (size_t)src->cfg.hidden_dim;
	KV = D / (size_t)src->cfg.n_heads * (size_t)src->cfg.n_kv_heads;
	L = (size_t)layers;
	/* each per-layer tensor stacks its layers: the first L are a prefix */
	memcpy(dst->tok_emb, src->tok_emb, sizeof(float) * (size_t)src->cfg.vocab_size * D);
	memcpy(dst->rms_att, src->rms_att, sizeof(float) * L * D);
	memcpy(dst->wq, src->wq, sizeof(float) * L * D * D);
	memcpy(dst->wk, src->wk, sizeof(float) * L * KV * D);
	memcpy(dst->wv, src->wv, sizeof(float) * L * KV * D);
	memcpy(dst->wo, src->wo, sizeof(float) * L * D * D);
	memcpy(dst->rms_ffn, src->rms_ffn, sizeof(float) * L * D);
	memcpy(dst->w1, src->w1, sizeof(float) * L * H * D);
	memcpy(dst->w2, src->w2, sizeof(float) * L * D * H);
	memcpy(dst->w3, src->w3, sizeof(float) * L * H * D);
	memcpy(dst->rms_final, src->rms_final, sizeof(float) * D);
	memcpy(dst->freq_cos, src->freq_cos,
	       sizeof(float) * (size_t)src->cfg.seq_len * (D / (size_t)src->cfg.n_heads) / 2);
	memcpy(dst->freq_sin, src->freq_sin,
	       sizeof(float) * (size_t)src->cfg.seq_len * (D / (size_t)src->cfg.n_heads) / 2);
	if (!src->cfg.shared_classifier)
		memcpy(dst->wcls, src->wcls, sizeof(float) * (size_t)src->cfg.vocab_size * D);
	return 0;
}

void ckpt_free(struct checkpoint *ck)
{
	free(ck->data);
	memset(ck, 0, sizeof(*ck));
}

uint64_t ckpt_fingerprint(const struct checkpoint *ck)
{
	const unsigned char *b = (const unsigned char *)ck->data;
	size_t n = ck->n_floats * sizeof(float), i;
	uint64_t h = 0xcbf29ce484222325ULL;
	int32_t hdr[8] = { ck->cfg.dim, ck->cfg.hidden_dim, ck->cfg.n_layers, ck->cfg.n_heads,
			   ck->cfg.n_kv_heads, ck->cfg.vocab_size, ck->cfg.seq_len,
			   ck->cfg.shared_classifier };

	for (i = 0; i < sizeof(hdr); i++)
		h = (h ^ ((const unsigned char *)hdr)[i]) * 0x100000001b3ULL;
	return fnv64_words(b, n, h);
}

/* FNV-style, 8 bytes per step: byte-wise over 40 MB would take ~40 ms. */
uint64_t fnv64_words(const void *p, size_t n, uint64_t h)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, 8);
		h = (h ^ w) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}
