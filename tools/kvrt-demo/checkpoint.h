/* SPDX-License-Identifier: GPL-2.0 */
/*
 * checkpoint.h: llama2.c-style model checkpoints (the original "version 0"
 * format): read, write, and generate a random one.
 */
#ifndef KVRT_DEMO_CHECKPOINT_H
#define KVRT_DEMO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

/* The seven int32 of the file header, in file order. */
struct model_config {
	int32_t dim;
	int32_t hidden_dim;
	int32_t n_layers;
	int32_t n_heads;
	int32_t n_kv_heads;
	int32_t vocab_size;	/* always positive here; the file stores it negated
				 * when the classifier is not shared */
	int32_t seq_len;
	int shared_classifier;	/* 1: logits use the token embedding */
};

/*
 * The weights, all fp32, pointing into one buffer laid out as the file:
 * token embedding [vocab][dim], then per layer stacks of rms_att [dim],
 * wq [dim][dim], wk [kv_dim][dim], wv [kv_dim][dim], wo [dim][dim],
 * rms_ffn [dim], w1 [hidden][dim], w2 [dim][hidden], w3 [hidden][dim]
 * (each tensor for all layers before the next tensor), rms_final [dim],
 * the legacy RoPE tables [seq_len][head_dim / 2] twice (cos, sin; kept only
 * to write them back), and wcls [vocab][dim] when not shared.  A matrix
 * [out][in] maps an in-vector to an out-vector: y[o] = sum_i W[o][i] x[i].
 */
struct checkpoint {
	struct model_config cfg;
	float *data;		/* owns everything below */
	size_t n_floats;
	float *tok_emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3;
	float *rms_final, *freq_cos, *freq_sin, *wcls;
};

#define CKPT_HEADER_BYTES (7 * 4)
/* Limits that keep every size computation far from overflow. */
#define CKPT_MAX_DIM	 16384
#define CKPT_MAX_HIDDEN	 65536
#define CKPT_MAX_LAYERS	 256
#define CKPT_MAX_VOCAB	 (1 << 20)
#define CKPT_MAX_SEQ	 (1 << 20)

/* 0 when the shape is usable; else -EINVAL and a reason in err. */
int ckpt_config_check(const struct model_config *c, char *err, size_t errlen);

/* Floats after the header for this shape (including the classifier). */
size_t ckpt_float_count(const struct model_config *c);

int ckpt_load(struct checkpoint *ck, const char *path, char *err, size_t errlen);
int ckpt_save(const struct checkpoint *ck, const char *path, char *err, size_t errlen);

/* Random weights from seed: the same seed and shape give the same bytes. */
int ckpt_generate(struct checkpoint *ck, const struct model_config *cfg, uint64_t seed,
		  char *err, size_t errlen);

/*
 * A new checkpoint of src's first `layers` layers with its embedding, final
 * norm and classifier: a layer-skipping draft model for speculative
 * decoding.  -EINVAL (and a sentence) unless 1 <= layers <= src's layers.
 */
int ckpt_first_layers(struct checkpoint *dst, const struct checkpoint *src, int32_t layers,
		      char *err, size_t errlen);

void ckpt_free(struct checkpoint *ck);

/* A 64-bit fingerprint of the shape and every weight (FNV-1a). */
uint64_t ckpt_fingerprint(const struct checkpoint *ck);
/* Continue hash h over n bytes at p, 8 bytes per step. */
uint64_t fnv64_words(const void *p, size_t n, uint64_t h);

/* Parameters that the forward pass uses (no legacy tables). */
uint64_t ckpt_param_count(const struct model_config *c);

#endif
