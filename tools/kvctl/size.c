// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl size: how many bytes a KV cache takes.
 *
 *   bytes = batch x tokens x layers x V x (ceil(D x bits / 8) + scales(D))
 *
 * where V vectors of D elements are cached per token per layer:
 *   MHA/GQA: V = 2 x kv_heads (K and V of each KV head), D = head_dim;
 *   MLA:     V = 1, D = kv_lora_rank + qk_rope_head_dim (one latent that
 *            every head reads; DeepSeek-V2/V3).
 *
 * Scales, per vector, by data type (the choice is ours, stated in --help
 * and kvctl(8)):
 *   fp8, int8  one fp32 scale per token per head: 4 bytes per vector;
 *   fp4        NVFP4: one FP8 E4M3 scale per 16 elements (1 byte each);
 *   mxfp4      OCP MX: one E8M0 scale per 32 elements (1 byte each);
 *   int4       one fp16 scale per 32 elements (2 bytes each), symmetric.
 * NVFP4's per-tensor fp32 scale is a constant, not counted.
 *
 * Tensor parallelism splits KV heads over ranks: kv_heads / tp each when
 * tp divides kv_heads; with fewer heads than ranks (tp a multiple of
 * kv_heads) each rank holds one head and each head sits on tp / kv_heads
 * ranks.  An MLA latent is on every rank.
 *
 * Presets are from each model's published config.json (num_hidden_layers,
 * num_key_value_heads, head_dim or hidden_size / num_attention_heads).
 * Sliding-window layers (Gemma-2, Mistral-7B v0.1) are counted as full
 * attention: the figures are the upper bound an engine allocates by default.
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "kvctl.h"

struct kv_model {
	const char *name;
	const char *aliases;	/* space-separated, matched like names */
	unsigned int layers, kv_heads, head_dim;
	unsigned int mla_rank, mla_rope;	/* MLA: kv_lora_rank, qk_rope_head_dim */
	const char *note;
};

static const struct kv_model kv_models[] = {
	{ "Llama-2-7B", "", 32, 32, 128, 0, 0, "MHA" },
	{ "Llama-2-13B", "", 40, 40, 128, 0, 0, "MHA" },
	{ "Llama-2-70B", "", 80, 8, 128, 0, 0, "" },
	{ "Llama-3-8B", "Llama-3.1-8B", 32, 8, 128, 0, 0, "" },
	{ "Llama-3-70B", "Llama-3.1-70B Llama-3.3-70B", 80, 8, 128, 0, 0, "" },
	{ "Llama-3.1-405B", "", 126, 8, 128, 0, 0, "" },
	{ "Llama-3.2-1B", "", 16, 8, 64, 0, 0, "" },
	{ "Llama-3.2-3B", "", 28, 8, 128, 0, 0, "" },
	{ "Mistral-7B", "", 32, 8, 128, 0, 0, "v0.1's 4096-token sliding window counted as full" },
	{ "Mixtral-8x7B", "", 32, 8, 128, 0, 0, "" },
	{ "Mixtral-8x22B", "", 56, 8, 128, 0, 0, "" },
	{ "Qwen2.5-0.5B", "", 24, 2, 64, 0, 0, "" },
	{ "Qwen2.5-1.5B", "", 28, 2, 128, 0, 0, "" },
	{ "Qwen2.5-3B", "", 36, 2, 128, 0, 0, "" },
	{ "Qwen2.5-7B", "", 28, 4, 128, 0, 0, "" },
	{ "Qwen2.5-14B", "", 48, 8, 128, 0, 0, "" },
	{ "Qwen2.5-32B", "", 64, 8, 128, 0, 0, "" },
	{ "Qwen2.5-72B", "", 80, 8, 128, 0, 0, "" },
	{ "Qwen3-8B", "", 36, 8, 128, 0, 0, "" },
	{ "Qwen3-32B", "", 64, 8, 128, 0, 0, "" },
	{ "Gemma-2-2B", "", 26, 4, 256, 0, 0, "sliding-window layers counted as full" },
	{ "Gemma-2-9B", "", 42, 8, 256, 0, 0, "sliding-window layers counted as full" },
	{ "Gemma-2-27B", "", 46, 16, 128, 0, 0, "sliding-window layers counted as full" },
	{ "Phi-3-mini", "", 32, 32, 96, 0, 0, "MHA" },
	{ "DeepSeek-V2-Lite", "", 27, 0, 0, 512, 64, "MLA: one 576-element latent per token per layer" },
	{ "DeepSeek-V3", "DeepSeek-R1", 61, 0, 0, 512, 64,
	  "MLA: one 576-element latent per token per layer" },
};
#define NR_MODELS (sizeof(kv_models) / sizeof(kv_models[0]))

#define KV_PER_VECTOR 0xffffffffu	/* group: one scale per whole vector */

static const struct kv_dtype {
	const char *name;
	const char *aliases;
	unsigned int bits;
	unsigned int group;	/* elements per scale; 0: no scales */
	unsigned int scale_bytes;
	const char *scales;	/* in words */
} kv_dtypes[] = {
	{ "fp32", "float32 float", 32, 0, 0, "none" },
	{ "fp16", "float16 half", 16, 0, 0, "none" },
	{ "bf16", "bfloat16", 16, 0, 0, "none" },
	{ "fp8", "fp8_e4m3 fp8_e5m2 e4m3 e5m2", 8, KV_PER_VECTOR, 4,
	  "one fp32 scale per token per head" },
	{ "int8", "", 8, KV_PER_VECTOR, 4, "one fp32 scale per token per head" },
	{ "fp4", "nvfp4", 4, 16, 1, "one fp8 (E4M3) scale per 16 elements (NVFP4)" },
	{ "mxfp4", "", 4, 32, 1, "one E8M0 scale per 32 elements (OCP MXFP4)" },
	{ "int4", "", 4, 32, 2, "one fp16 scale per 32 elements" },
};
#define NR_DTYPES (sizeof(kv_dtypes) / sizeof(kv_dtypes[0]))

/* Lowercase, no org prefix, no -instruct/-chat/-it/-hf/-base/-vN.N, no '-' '_'. */
static void kv_norm(char *out, size_t len, const char *in)
{
	static const char *const suffixes[] = { "-instruct", "-chat", "-it", "-hf", "-base" };
	char buf[128], *p;
	size_t i, n, o = 0;
	bool again = true;

	p = strrchr(in, '/');
	snprintf(buf, sizeof(buf), "%s", p ? p + 1 : in);
	for (i = 0; buf[i]; i++)
		buf[i] = (char)tolower((unsigned char)buf[i]);
	p = !strncmp(buf, "meta-", 5) ? buf + 5 : buf;
	while (again) {
		again = false;
		n = strlen(p);
		for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
			size_t k = strlen(suffixes[i]);

			if (n > k && !strcmp(p + n - k, suffixes[i])) {
				p[n - k] = '\0';
				again = true;
				break;
			}
		}
		/* A trailing release tag such as -v0.3. */
		n = strlen(p);
		for (i = n; i > 0 && (isdigit((unsigned char)p[i - 1]) || p[i - 1] == '.'); i--)
			;
		if (!again && i >= 2 && i < n && p[i - 1] == 'v' && p[i - 2] == '-') {
			p[i - 2] = '\0';
			again = true;
		}
	}
	for (; *p && o + 1 < len; p++)
		if (*p != '-' && *p != '_' && *p != ' ')
			out[o++] = *p;
	out[o] = '\0';
}

static bool kv_name_in(const char *want, const char *name, const char *aliases)
{
	char a[128], b[128], list[256], *t, *save = NULL;

	kv_norm(a, sizeof(a), want);
	kv_norm(b, sizeof(b), name);
	if (!strcmp(a, b))
		return true;
	snprintf(list, sizeof(list), "%s", aliases);
	for (t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		kv_norm(b, sizeof(b), t);
		if (!strcmp(a, b))
			return true;
	}
	return false;
}

static const struct kv_model *kv_find_model(const char *name)
{
	size_t i;

	for (i = 0; i < NR_MODELS; i++)
		if (kv_name_in(name, kv_models[i].name, kv_models[i].aliases))
			return &kv_models[i];
	return NULL;
}

static const struct kv_dtype *kv_find_dtype(const char *name)
{
	size_t i;

	for (i = 0; i < NR_DTYPES; i++)
		if (!strcasecmp(name, kv_dtypes[i].name) ||
		    kv_name_in(name, kv_dtypes[i].name, kv_dtypes[i].aliases))
			return &kv_dtypes[i];
	return NULL;
}

/* Bytes of one cached vector of @dim elements, scales included. */
static uint64_t kv_vec_bytes(const struct kv_dtype *t, uint64_t dim, bool scales,
			     uint64_t *scale_bytes)
{
	uint64_t s = 0;

	if (scales && t->group == KV_PER_VECTOR)
		s = t->scale_bytes;
	else if (scales && t->group)
		s = (dim + t->group - 1) / t->group * t->scale_bytes;
	*scale_bytes = s;
	return (dim * t->bits + 7) / 8 + s;
}

static bool kv_mul(uint64_t *acc, uint64_t v)
{
	return !__builtin_mul_overflow(*acc, v, acc);
}

/* fp16 bytes per token: K and V per KV head, or MLA's one latent per layer. */
static uint64_t kv_model_bpt(const struct kv_model *m)
{
	return m->mla_rank ? (uint64_t)m->layers * (m->mla_rank + m->mla_rope) * 2 :
			     (uint64_t)m->layers * 2 * m->kv_heads * m->head_dim * 2;
}

static void kv_model_bytes(char *buf, size_t len, const struct kv_model *m)
{
	kv_bytes(buf, len, kv_model_bpt(m));
}

static int kv_list_models(bool json)
{
	char b[KV_BYTES_LEN], shape[32], list[256], *t, *save = NULL;
	struct kv_json j;
	size_t i;

	if (json) {
		kv_json_init(&j, stdout, true);
		kv_json_obj(&j, NULL);
		kv_json_arr(&j, "models");
	} else {
		printf("%-17s %6s %8s %8s  %s\n", "MODEL", "LAYERS", "KV_HEADS", "HEAD_DIM",
		       "FP16 PER TOKEN, NOTES");
	}
	for (i = 0; i < NR_MODELS; i++) {
		const struct kv_model *m = &kv_models[i];
		uint64_t bpt = kv_model_bpt(m);

		if (json) {
			kv_json_obj(&j, NULL);
			kv_json_str(&j, "name", m->name);
			kv_json_arr(&j, "aliases");
			snprintf(list, sizeof(list), "%s", m->aliases);
			save = NULL;
			for (t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save))
				kv_json_str(&j, NULL, t);
			kv_json_end(&j, ']');
			kv_json_str(&j, "attention", m->mla_rank ? "mla" : "gqa");
			kv_json_u64(&j, "layers", m->layers);
			if (m->mla_rank) {
				kv_json_u64(&j, "kv_lora_rank", m->mla_rank);
				kv_json_u64(&j, "rope_dim", m->mla_rope);
			} else {
				kv_json_u64(&j, "kv_heads", m->kv_heads);
				kv_json_u64(&j, "head_dim", m->head_dim);
			}
			kv_json_u64(&j, "fp16_bytes_per_token", bpt);
			kv_json_str(&j, "note", m->note);
			kv_json_end(&j, '}');
			continue;
		}
		if (m->mla_rank)
			snprintf(shape, sizeof(shape), "%8s %5u+%-2u", "MLA", m->mla_rank,
				 m->mla_rope);
		else
			snprintf(shape, sizeof(shape), "%8u %8u", m->kv_heads, m->head_dim);
		kv_model_bytes(b, sizeof(b), m);
		printf("%-17s %6u %s  %s%s%s%s%s\n", m->name, m->layers, shape, b,
		       *m->aliases ? "; also " : "", m->aliases, *m->note ? "; " : "", m->note);
	}
	if (json) {
		kv_json_end(&j, ']');
		kv_json_end(&j, '}');
		kv_json_done(&j);
	} else {
		printf("\nNames match without case, org prefix or -Instruct: "
		       "meta-llama/Meta-Llama-3-8B-Instruct is Llama-3-8B.\n");
	}
	return KV_EXIT_OK;
}

enum {
	OPT_MODEL = 1, OPT_LAYERS, OPT_HEADS, OPT_DIM, OPT_TOKENS, OPT_BATCH, OPT_DTYPE,
	OPT_TP, OPT_BLOCK, OPT_NOSCALES, OPT_LIST, OPT_JSON,
};

struct kv_size_in {
	const struct kv_model *model;
	const struct kv_dtype *dtype;
	uint64_t layers, kv_heads, head_dim, tokens, batch, tp, block_tokens;
	bool scales, json, overridden;
};

struct kv_size_out {
	uint64_t vectors, dim, vec_bytes, scale_bytes;
	uint64_t bytes_per_token, bytes;
	uint64_t heads_per_rank, replicas;
	uint64_t bytes_per_token_rank, bytes_per_rank, bytes_all_ranks;
	uint64_t block_bytes, block_bytes_page, blocks_per_rank;
	bool mla;
};

static int kv_compute(const struct kv_size_in *in, struct kv_size_out *o)
{
	uint64_t v, per_seq_blocks;

	memset(o, 0, sizeof(*o));
	o->mla = in->model && in->model->mla_rank;
	o->vectors = o->mla ? 1 : 2 * in->kv_heads;
	o->dim = o->mla ? (uint64_t)in->model->mla_rank + in->model->mla_rope : in->head_dim;
	o->vec_bytes = kv_vec_bytes(in->dtype, o->dim, in->scales, &o->scale_bytes);

	if (o->mla) {
		o->heads_per_rank = 1;
		o->replicas = in->tp;
	} else if (in->kv_heads >= in->tp) {
		if (in->kv_heads % in->tp)
			return kv_usage("size", "%llu KV heads do not split evenly over --tp %llu: "
					"use a tp that divides %llu, or a multiple of it "
					"(then heads are replicated)",
					(unsigned long long)in->kv_heads,
					(unsigned long long)in->tp,
					(unsigned long long)in->kv_heads);
		o->heads_per_rank = in->kv_heads / in->tp;
		o->replicas = 1;
	} else {
		if (in->tp % in->kv_heads)
			return kv_usage("size", "--tp %llu is more than the %llu KV heads but not a "
					"multiple of them: each head must sit on the same number "
					"of ranks", (unsigned long long)in->tp,
					(unsigned long long)in->kv_heads);
		o->heads_per_rank = 1;
		o->replicas = in->tp / in->kv_heads;
	}

	o->bytes_per_token = in->layers;
	o->bytes_per_token_rank = in->layers;
	o->bytes = in->batch;
	v = in->batch;
	if (!kv_mul(&o->bytes_per_token, o->vectors) ||
	    !kv_mul(&o->bytes_per_token, o->vec_bytes) ||
	    !kv_mul(&o->bytes_per_token_rank, o->mla ? 1 : 2 * o->heads_per_rank) ||
	    !kv_mul(&o->bytes_per_token_rank, o->vec_bytes) ||
	    !kv_mul(&o->bytes, in->tokens) || !kv_mul(&o->bytes, o->bytes_per_token) ||
	    !kv_mul(&v, in->tokens) || !kv_mul(&v, o->bytes_per_token_rank))
		goto overflow;
	o->bytes_per_rank = v;
	o->bytes_all_ranks = v;
	if (!kv_mul(&o->bytes_all_ranks, in->tp))
		goto overflow;
	if (in->block_tokens) {
		o->block_bytes = in->block_tokens;
		if (!kv_mul(&o->block_bytes, o->bytes_per_token_rank))
			goto overflow;
		o->block_bytes_page = (o->block_bytes + 4095) / 4096 * 4096;
		per_seq_blocks = (in->tokens + in->block_tokens - 1) / in->block_tokens;
		o->blocks_per_rank = per_seq_blocks;
		if (!kv_mul(&o->blocks_per_rank, in->batch))
			goto overflow;
	}
	return 0;

overflow:
	return kv_usage("size", "the result does not fit in 64 bits; lower --tokens or --batch");
}

static void kv_size_json(const struct kv_size_in *in, const struct kv_size_out *o)
{
	struct kv_json j;

	kv_json_init(&j, stdout, true);
	kv_json_obj(&j, NULL);
	if (in->model)
		kv_json_str(&j, "model", in->model->name);
	else
		kv_json_null(&j, "model");
	kv_json_bool(&j, "model_overridden", in->overridden);
	kv_json_str(&j, "attention", o->mla ? "mla" : "gqa");
	kv_json_u64(&j, "layers", in->layers);
	if (o->mla) {
		kv_json_u64(&j, "kv_lora_rank", in->model->mla_rank);
		kv_json_u64(&j, "rope_dim", in->model->mla_rope);
	} else {
		kv_json_u64(&j, "kv_heads", in->kv_heads);
		kv_json_u64(&j, "head_dim", in->head_dim);
	}
	kv_json_u64(&j, "tokens", in->tokens);
	kv_json_u64(&j, "batch", in->batch);
	kv_json_str(&j, "dtype", in->dtype->name);
	kv_json_u64(&j, "bits_per_element", in->dtype->bits);
	kv_json_str(&j, "scales", in->scales ? in->dtype->scales : "none");
	kv_json_u64(&j, "vectors_per_token_per_layer", o->vectors);
	kv_json_u64(&j, "vector_dim", o->dim);
	kv_json_u64(&j, "vector_bytes", o->vec_bytes);
	kv_json_u64(&j, "scale_bytes_per_vector", o->scale_bytes);
	kv_json_u64(&j, "bytes_per_token", o->bytes_per_token);
	kv_json_u64(&j, "bytes", o->bytes);
	kv_json_u64(&j, "tp", in->tp);
	kv_json_u64(&j, "kv_heads_per_rank", o->mla ? 0 : o->heads_per_rank);
	kv_json_bool(&j, "replicated", o->replicas > 1);
	kv_json_u64(&j, "ranks_per_head", o->replicas);
	kv_json_u64(&j, "bytes_per_token_per_rank", o->bytes_per_token_rank);
	kv_json_u64(&j, "bytes_per_rank", o->bytes_per_rank);
	kv_json_u64(&j, "bytes_all_ranks", o->bytes_all_ranks);
	if (in->block_tokens) {
		kv_json_u64(&j, "block_tokens", in->block_tokens);
		kv_json_u64(&j, "block_bytes_per_rank", o->block_bytes);
		kv_json_u64(&j, "block_bytes_page_aligned", o->block_bytes_page);
		kv_json_u64(&j, "blocks_per_rank", o->blocks_per_rank);
	}
	kv_json_end(&j, '}');
	kv_json_done(&j);
}

static void kv_size_text(const struct kv_size_in *in, const struct kv_size_out *o)
{
	char b1[KV_BYTES_LEN], b2[KV_BYTES_LEN];

	if (in->model)
		printf("model      %s%s%s%s\n", in->model->name,
		       in->overridden ? " (with your overrides)" : "",
		       *in->model->note ? "; " : "", in->model->note);
	if (o->mla)
		printf("shape      %llu layers, MLA latent %u + %u rope = %llu elements per token "
		       "per layer\n", (unsigned long long)in->layers, in->model->mla_rank,
		       in->model->mla_rope, (unsigned long long)o->dim);
	else
		printf("shape      %llu layers, %llu KV heads, head dim %llu\n",
		       (unsigned long long)in->layers, (unsigned long long)in->kv_heads,
		       (unsigned long long)in->head_dim);
	printf("dtype      %s: %u bits per element, scales: %s", in->dtype->name, in->dtype->bits,
	       in->scales ? in->dtype->scales : "none");
	if (o->scale_bytes)
		printf(" (%llu B per %llu-element vector)", (unsigned long long)o->scale_bytes,
		       (unsigned long long)o->dim);
	printf("\n");
	printf("tokens     %llu per sequence x batch %llu\n", (unsigned long long)in->tokens,
	       (unsigned long long)in->batch);
	if (o->mla)
		printf("per token  %s (%llu B) = %llu layers x %llu B\n",
		       kv_bytes(b1, sizeof(b1), o->bytes_per_token),
		       (unsigned long long)o->bytes_per_token, (unsigned long long)in->layers,
		       (unsigned long long)o->vec_bytes);
	else
		printf("per token  %s (%llu B) = %llu layers x 2 (K, V) x %llu heads x %llu B\n",
		       kv_bytes(b1, sizeof(b1), o->bytes_per_token),
		       (unsigned long long)o->bytes_per_token, (unsigned long long)in->layers,
		       (unsigned long long)in->kv_heads, (unsigned long long)o->vec_bytes);
	printf("total      %s (%llu bytes)\n", kv_bytes(b1, sizeof(b1), o->bytes),
	       (unsigned long long)o->bytes);
	if (in->tp > 1 || o->replicas > 1) {
		if (o->mla)
			printf("per rank   %s (%llu bytes) on each of %llu ranks: the MLA latent is "
			       "replicated, not split\n", kv_bytes(b1, sizeof(b1), o->bytes_per_rank),
			       (unsigned long long)o->bytes_per_rank, (unsigned long long)in->tp);
		else if (o->replicas > 1)
			printf("per rank   %s (%llu bytes): %llu KV heads < tp %llu, so each head is "
			       "replicated on %llu ranks and every rank holds 1; all ranks %s\n",
			       kv_bytes(b1, sizeof(b1), o->bytes_per_rank),
			       (unsigned long long)o->bytes_per_rank,
			       (unsigned long long)in->kv_heads, (unsigned long long)in->tp,
			       (unsigned long long)o->replicas,
			       kv_bytes(b2, sizeof(b2), o->bytes_all_ranks));
		else
			printf("per rank   %s (%llu bytes): %llu KV heads per rank over tp %llu\n",
			       kv_bytes(b1, sizeof(b1), o->bytes_per_rank),
			       (unsigned long long)o->bytes_per_rank,
			       (unsigned long long)o->heads_per_rank, (unsigned long long)in->tp);
	}
	if (in->block_tokens) {
		printf("block      %llu tokens = %s (%llu B) per rank, all layers", (unsigned long long)
		       in->block_tokens, kv_bytes(b1, sizeof(b1), o->block_bytes),
		       (unsigned long long)o->block_bytes);
		if (o->block_bytes_page != o->block_bytes)
			printf("; not a page multiple: a kvpool space needs block_bytes %llu",
			       (unsigned long long)o->block_bytes_page);
		printf("; %llu blocks per rank\n", (unsigned long long)o->blocks_per_rank);
	}
}

int cmd_size(int argc, char **argv)
{
	static const struct topt opts[] = {
		{ .name = "--model", .arg = "NAME", .kind = TOPT_ID, .id = OPT_MODEL },
		{ .name = "--layers", .arg = "N", .kind = TOPT_ID, .id = OPT_LAYERS },
		{ .name = "--kv-heads", .arg = "N", .kind = TOPT_ID, .id = OPT_HEADS },
		{ .name = "--head-dim", .arg = "N", .kind = TOPT_ID, .id = OPT_DIM },
		{ .name = "--tokens", .arg = "N", .kind = TOPT_ID, .id = OPT_TOKENS },
		{ .name = "--batch", .arg = "N", .kind = TOPT_ID, .id = OPT_BATCH },
		{ .name = "--dtype", .arg = "DTYPE", .kind = TOPT_ID, .id = OPT_DTYPE },
		{ .name = "--tp", .arg = "N", .kind = TOPT_ID, .id = OPT_TP },
		{ .name = "--block-tokens", .arg = "N", .kind = TOPT_ID, .id = OPT_BLOCK },
		{ .name = "--no-scales", .kind = TOPT_ID, .id = OPT_NOSCALES },
		{ .name = "--list-models", .kind = TOPT_ID, .id = OPT_LIST },
		{ .name = "--json", .kind = TOPT_ID, .id = OPT_JSON },
		{ .name = NULL },
	};
	struct kv_size_in in = { .batch = 1, .tp = 1, .scales = true };
	uint64_t layers = 0, heads = 0, dim = 0;
	const char *model = NULL, *v;
	struct kv_size_out out;
	bool list = false;
	struct kv_args a;
	size_t i;
	int o, r;

	in.dtype = kv_find_dtype("fp16");
	kv_args_init(&a, "size", argc, argv);
	while ((o = kv_args_next(&a, opts, &v)) != KV_OPT_END) {
		r = 0;
		switch (o) {
		case KV_OPT_HELP:
			return kv_help("size");
		case KV_OPT_ERR:
			return KV_EXIT_USAGE;
		case KV_OPT_POS:
			return kv_usage("size", "unexpected argument '%s' (a model goes with "
					"--model NAME)", v);
		case OPT_MODEL:
			model = v;
			break;
		case OPT_LAYERS:
			r = kv_opt_u64("size", "layers", v, 1, 100000, false, &layers);
			break;
		case OPT_HEADS:
			r = kv_opt_u64("size", "kv-heads", v, 1, 65536, false, &heads);
			break;
		case OPT_DIM:
			r = kv_opt_u64("size", "head-dim", v, 1, 65536, false, &dim);
			break;
		case OPT_TOKENS:
			r = kv_opt_u64("size", "tokens", v, 1, 1ULL << 40, true, &in.tokens);
			break;
		case OPT_BATCH:
			r = kv_opt_u64("size", "batch", v, 1, 1ULL << 32, false, &in.batch);
			break;
		case OPT_TP:
			r = kv_opt_u64("size", "tp", v, 1, 65536, false, &in.tp);
			break;
		case OPT_BLOCK:
			r = kv_opt_u64("size", "block-tokens", v, 1, 1 << 20, false, &in.block_tokens);
			break;
		case OPT_DTYPE:
			in.dtype = kv_find_dtype(v);
			if (!in.dtype) {
				kv_usage("size", "unknown --dtype '%s'", v);
				fprintf(stderr, "dtypes:");
				for (i = 0; i < NR_DTYPES; i++)
					fprintf(stderr, " %s", kv_dtypes[i].name);
				fprintf(stderr, "\n");
				return KV_EXIT_USAGE;
			}
			break;
		case OPT_NOSCALES:
			in.scales = false;
			break;
		case OPT_LIST:
			list = true;
			break;
		case OPT_JSON:
			in.json = true;
			break;
		}
		if (r)
			return KV_EXIT_USAGE;
	}
	if (list)
		return kv_list_models(in.json);
	if (model) {
		in.model = kv_find_model(model);
		if (!in.model) {
			kv_usage("size", "unknown --model '%s'", model);
			fprintf(stderr, "models:");
			for (i = 0; i < NR_MODELS; i++)
				fprintf(stderr, " %s", kv_models[i].name);
			fprintf(stderr, "\n(kvctl size --list-models shows their shapes; or give "
				"--layers, --kv-heads and --head-dim)\n");
			return KV_EXIT_USAGE;
		}
		if (in.model->mla_rank && (heads || dim))
			return kv_usage("size", "%s uses MLA: it caches one latent per token per "
					"layer, not K and V per head, so --kv-heads and --head-dim "
					"do not apply", in.model->name);
		in.layers = layers ? layers : in.model->layers;
		in.kv_heads = heads ? heads : in.model->kv_heads;
		in.head_dim = dim ? dim : in.model->head_dim;
		in.overridden = layers || heads || dim;
	} else {
		if (!layers || !heads || !dim)
			return kv_usage("size", "give --model NAME, or all of --layers, --kv-heads "
					"and --head-dim (missing:%s%s%s)", layers ? "" : " --layers",
					heads ? "" : " --kv-heads", dim ? "" : " --head-dim");
		in.layers = layers;
		in.kv_heads = heads;
		in.head_dim = dim;
	}
	if (!in.tokens)
		return kv_usage("size", "give --tokens N, the context length per sequence "
				"(e.g. --tokens 8192 or --tokens 128k)");
	r = kv_compute(&in, &out);
	if (r)
		return r;
	if (in.json)
		kv_size_json(&in, &out);
	else
		kv_size_text(&in, &out);
	return KV_EXIT_OK;
}
