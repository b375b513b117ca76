// SPDX-License-Identifier: MIT
/*
 * append.c: kvrt_append_kv, the reshape-and-cache step.  New K/V rows
 * ([token][kv head][head_dim], contiguous) are written to their slots
 * through the cache's strides, converted to the cache dtype; fp8 e4m3
 * caches get per-(block, head) scales by the rule documented in kvrt.h.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "internal.h"
#include "dtype.h"

struct append_ctx {
	const struct kvrt_layout *l;
	char *base;
	float *scales;
	uint32_t layer;
	enum kvrt_dtype src;
	size_t src_elem;
	const int64_t *slots;
};

/* Convert one head row of head_dim elements into a non-fp8 cache. */
static void put_row(const struct append_ctx *c, void *dst, const void *src)
{
	enum kvrt_dtype to = c->l->kv_dtype;
	uint32_t d, n = c->l->head_dim;

	if (to == c->src) {
		memcpy(dst, src, n * c->src_elem);
		return;
	}
	for (d = 0; d < n; d++)
		kvrt_store_f32(to, dst, d, kvrt_load_f32(c->src, src, d));
}

static float row_absmax(const struct append_ctx *c, const void *src)
{
	uint32_t d;
	float m = 0.0f;

	for (d = 0; d < c->l->head_dim; d++)
		m = fmaxf(m, fabsf(kvrt_load_f32(c->src, src, d)));
	return m;
}

static void quant_row(const struct append_ctx *c, uint8_t *dst, const void *src, float scale)
{
	uint32_t d;

	for (d = 0; d < c->l->head_dim; d++) {
		float x = kvrt_load_f32(c->src, src, d);

		dst[d] = scale > 0.0f ? kvrt_f32_to_fp8e4m3(x / scale) : 0;
	}
}

/* Re-encode one stored fp8 row from scale old to scale new (> old). */
static void requant_row(uint32_t n, uint8_t *row, float old, float new)
{
	uint32_t d;

	for (d = 0; d < n; d++)
		row[d] = kvrt_f32_to_fp8e4m3(kvrt_fp8e4m3_to_f32(row[d]) * old / new);
}

/* Write one head row of K (kv 0) or V (kv 1) to block b, offset t. */
static void put(const struct append_ctx *c, uint32_t kv, uint64_t b, uint32_t t, uint32_t h,
		const void *src)
{
	const struct kvrt_layout *l = c->l;
	char *plane = c->base + (int64_t)c->layer * l->layer_stride + (int64_t)kv * l->kv_stride +
		      (int64_t)b * l->block_stride;
	char *dst = plane + (int64_t)t * l->token_stride + (int64_t)h * l->head_stride;
	float *scale, m, want;
	uint32_t u;

	if (l->kv_dtype != KVRT_DTYPE_FP8_E4M3) {
		put_row(c, dst, src);
		return;
	}
	scale = c->scales + (int64_t)c->layer * l->scale_layer_stride +
		(int64_t)kv * l->scale_kv_stride + (int64_t)b * l->scale_block_stride + h;
	m = row_absmax(c, src);
	want = m / KVRT_FP8E4M3_MAX;
	if (t == 0) {
		*scale = want;	/* the block starts afresh */
	} else if (want > *scale) {
		for (u = 0; u < l->block_tokens; u++)
			if (u != t)
				requant_row(l->head_dim,
					    (uint8_t *)(plane + (int64_t)u * l->token_stride +
							(int64_t)h * l->head_stride),
					    *scale, want);
		*scale = want;
	}
	quant_row(c, (uint8_t *)dst, src, *scale);
}

/* The block of slot i, or -1 for a skipped (negative) slot. */
static int64_t slot_block(const void *arg, uint32_t i)
{
	const struct append_ctx *c = arg;

	return c->slots[i] < 0 ? -1 : c->slots[i] / c->l->block_tokens;
}

int kvrt_append_kv(const struct kvrt_kv_cache *kv, const void *k, const void *v,
		   enum kvrt_dtype src_dtype, const int64_t *slots, uint32_t num_tokens)
{
	const struct kvrt_layout *l;
	struct append_ctx c;
	struct kvrt_extent e;
	uint64_t nslots, row_bytes, tok_bytes;
	uint32_t i, h;
	int ret;

	if (!kv || !kv->layout || !kv->base)
		return -EINVAL;
	l = kv->layout;
	ret = kvrt_layout_extent(l, &e);
	if (ret)
		return ret == -EOVERFLOW ? -EINVAL : ret;
	if (kv->layer >= l->num_layers)
		return -EINVAL;
	if (src_dtype != KVRT_DTYPE_F32 && src_dtype != KVRT_DTYPE_F16 &&
	    src_dtype != KVRT_DTYPE_BF16)
		return -EINVAL;
	if (l->kv_dtype == KVRT_DTYPE_FP8_E4M3 && !kv->scales)
		return -EINVAL;
	if (!num_tokens)
		return 0;
	if (!k || !v || !slots)
		return -EINVAL;
	nslots = (uint64_t)l->num_blocks * l->block_tokens;
	for (i = 0; i < num_tokens; i++)
		if (slots[i] >= 0 && (uint64_t)slots[i] >= nslots)
			return -EINVAL;

	c.l = l;
	c.base = (char *)kv->base;
	c.scales = (float *)kv->scales;
	c.layer = kv->layer;
	c.src = src_dtype;
	c.src_elem = kvrt_dtype_size(src_dtype);
	c.slots = slots;
	ret = kvrt_bounds_check(l, c.base, c.scales, num_tokens, slot_block, &c);
	if (ret)
		return ret;
	row_bytes = (uint64_t)l->head_dim * c.src_elem;
	tok_bytes = row_bytes * l->num_kv_heads;
	for (i = 0; i < num_tokens; i++) {
		uint64_t b, s = (uint64_t)slots[i];
		uint32_t t;

		if (slots[i] < 0)
			continue;
		b = s / l->block_tokens;
		t = (uint32_t)(s % l->block_tokens);
		for (h = 0; h < l->num_kv_heads; h++) {
			uint64_t off = i * tok_bytes + h * row_bytes;

			put(&c, 0, b, t, h, (const char *)k + off);
			put(&c, 1, b, t, h, (const char *)v + off);
		}
	}
	return 0;
}
