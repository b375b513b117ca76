// SPDX-License-Identifier: MIT
/*
 * layout.c: KV layout presets, size formulas, and the bounds check that
 * append and copy run on a caller's layout before touching memory.
 * Every product is overflow-checked; sizes are limited to 63 bits.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

static bool mul64(int64_t a, int64_t b, int64_t *r)
{
	return !__builtin_mul_overflow(a, b, r) && *r >= 0;
}

static bool mul_u(uint64_t a, uint64_t b, uint64_t *r)
{
	return !__builtin_mul_overflow(a, b, r) && *r <= (uint64_t)INT64_MAX;
}

static bool sizes_valid(uint32_t layers, uint32_t heads, uint32_t dim, uint32_t block_tokens,
			enum kvrt_dtype dtype)
{
	return layers && heads && dim && block_tokens && kvrt_dtype_size(dtype);
}

/* Bytes of one (layer, K or V) plane of one block: T * H * D * e. */
static int plane_bytes(uint32_t heads, uint32_t dim, uint32_t block_tokens,
		       enum kvrt_dtype dtype, int64_t *row, int64_t *token, int64_t *plane)
{
	if (!mul64((int64_t)dim, (int64_t)kvrt_dtype_size(dtype), row) ||
	    !mul64(*row, heads, token) || !mul64(*token, block_tokens, plane))
		return -EOVERFLOW;
	return 0;
}

int kvrt_layout_init(struct kvrt_layout *l, enum kvrt_layout_kind kind, uint32_t num_layers,
		     uint32_t num_kv_heads, uint32_t head_dim, uint32_t block_tokens,
		     uint32_t num_blocks, enum kvrt_dtype kv_dtype)
{
	int64_t row, token, plane, block, kv, total, sblock;

	if (!l || !sizes_valid(num_layers, num_kv_heads, head_dim, block_tokens, kv_dtype) ||
	    !num_blocks)
		return -EINVAL;
	if (kind != KVRT_LAYOUT_BLOCK_MAJOR && kind != KVRT_LAYOUT_LAYER_MAJOR)
		return -EINVAL;
	if (plane_bytes(num_kv_heads, head_dim, block_tokens, kv_dtype, &row, &token, &plane))
		return -EOVERFLOW;
	/* The whole cache, L * 2 * N * plane, must fit whichever the order. */
	if (!mul64(plane, 2, &kv) || !mul64(kv, num_layers, &block) ||
	    !mul64(block, num_blocks, &total))
		return -EOVERFLOW;

	memset(l, 0, sizeof(*l));
	l->num_layers = num_layers;
	l->num_kv_heads = num_kv_heads;
	l->head_dim = head_dim;
	l->block_tokens = block_tokens;
	l->num_blocks = num_blocks;
	l->kv_dtype = kv_dtype;
	l->head_stride = row;
	l->token_stride = token;
	if (kind == KVRT_LAYOUT_BLOCK_MAJOR) {
		/* [block][layer][kv][token][head][dim] */
		l->kv_stride = plane;
		l->layer_stride = 2 * plane;
		l->block_stride = block;
	} else {
		/* [layer][kv][block][token][head][dim] */
		l->block_stride = plane;
		l->kv_stride = (int64_t)num_blocks * plane;
		l->layer_stride = 2 * l->kv_stride;
	}
	if (kv_dtype == KVRT_DTYPE_FP8_E4M3) {
		/* Scales in the same order as the data, one float per head. */
		sblock = 2 * (int64_t)num_layers * num_kv_heads;
		if (kind == KVRT_LAYOUT_BLOCK_MAJOR) {
			l->scale_kv_stride = num_kv_heads;
			l->scale_layer_stride = 2 * (int64_t)num_kv_heads;
			l->scale_block_stride = sblock;
		} else {
			l->scale_block_stride = num_kv_heads;
			l->scale_kv_stride = (int64_t)num_blocks * num_kv_heads;
			l->scale_layer_stride = 2 * l->scale_kv_stride;
		}
	}
	return 0;
}

/* Add stride * (n - 1) to the lower or upper bound of an extent. */
static bool extent_dim(int64_t stride, uint32_t n, int64_t *lo, int64_t *hi)
{
	int64_t span;

	if (__builtin_mul_overflow(stride, (int64_t)n - 1, &span))
		return false;
	if (span < 0)
		return !__builtin_add_overflow(*lo, span, lo);
	return !__builtin_add_overflow(*hi, span, hi);
}

int kvrt_layout_extent(const struct kvrt_layout *l, struct kvrt_extent *e)
{
	int64_t row, lo = 0, hi = 0;

	if (!l || !sizes_valid(l->num_layers, l->num_kv_heads, l->head_dim, l->block_tokens,
			       l->kv_dtype) || !l->num_blocks)
		return -EINVAL;
	if (!mul64((int64_t)l->head_dim, (int64_t)kvrt_dtype_size(l->kv_dtype), &row))
		return -EOVERFLOW;
	if (!extent_dim(l->layer_stride, l->num_layers, &lo, &hi) ||
	    !extent_dim(l->kv_stride, 2, &lo, &hi) ||
	    !extent_dim(l->block_stride, l->num_blocks, &lo, &hi) ||
	    !extent_dim(l->token_stride, l->block_tokens, &lo, &hi) ||
	    !extent_dim(l->head_stride, l->num_kv_heads, &lo, &hi) ||
	    __builtin_add_overflow(hi, row, &hi))
		return -EOVERFLOW;
	e->min_off = lo;
	e->max_end = hi;
	e->scale_min = e->scale_max_end = 0;
	if (l->kv_dtype == KVRT_DTYPE_FP8_E4M3) {
		lo = 0;
		hi = 0;
		if (!extent_dim(l->scale_layer_stride, l->num_layers, &lo, &hi) ||
		    !extent_dim(l->scale_kv_stride, 2, &lo, &hi) ||
		    !extent_dim(l->scale_block_stride, l->num_blocks, &lo, &hi) ||
		    __builtin_add_overflow(hi, (int64_t)l->num_kv_heads, &hi))
			return -EOVERFLOW;
		e->scale_min = lo;
		e->scale_max_end = hi;
	}
	return 0;
}

/* K/V data of one block across layers, and the scales' offset and size. */
static int block_parts(const struct kvrt_layout *l, uint64_t *data, uint64_t *scale_off,
		       uint64_t *total)
{
	int64_t row, token, plane;
	uint64_t d, sc;

	if (plane_bytes(l->num_kv_heads, l->head_dim, l->block_tokens, l->kv_dtype, &row,
			&token, &plane))
		return -EOVERFLOW;
	if (!mul_u((uint64_t)plane, 2ULL * l->num_layers, &d))
		return -EOVERFLOW;
	*data = d;
	*scale_off = d;
	*total = d;
	if (l->kv_dtype == KVRT_DTYPE_FP8_E4M3) {
		sc = 2ULL * l->num_layers * l->num_kv_heads * sizeof(float);
		*scale_off = (d + 3) & ~3ULL;
		if (*scale_off > (uint64_t)INT64_MAX - sc)
			return -EOVERFLOW;
		*total = *scale_off + sc;
	}
	return 0;
}

int kvrt_layout_block_bytes(const struct kvrt_layout *l, uint64_t *bytes)
{
	struct kvrt_extent e;
	uint64_t data, off;
	int ret;

	if (!bytes)
		return -EINVAL;
	ret = kvrt_layout_extent(l, &e);
	if (ret)
		return ret;
	return block_parts(l, &data, &off, bytes);
}

int kvrt_kv_bytes(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
		  uint64_t tokens, enum kvrt_dtype dtype, uint64_t *bytes)
{
	uint64_t r;

	if (!bytes || !num_layers || !num_kv_heads || !head_dim || !kvrt_dtype_size(dtype))
		return -EINVAL;
	/* The result is what must fit: no tokens take no bytes, however large a token. */
	if (!tokens) {
		*bytes = 0;
		return 0;
	}
	if (!mul_u(2ULL * num_layers, num_kv_heads, &r) || !mul_u(r, head_dim, &r) ||
	    !mul_u(r, kvrt_dtype_size(dtype), &r) || !mul_u(r, tokens, &r))
		return -EOVERFLOW;
	*bytes = r;
	return 0;
}

int kvrt_layout_inline_scales(struct kvrt_layout *l, uint64_t *scales_offset)
{
	struct kvrt_layout preset;
	uint64_t data, off, total, end;

	if (!l || !scales_offset || l->kv_dtype != KVRT_DTYPE_FP8_E4M3)
		return -EINVAL;
	if (kvrt_layout_init(&preset, KVRT_LAYOUT_BLOCK_MAJOR, l->num_layers, l->num_kv_heads,
			     l->head_dim, l->block_tokens, l->num_blocks, l->kv_dtype) ||
	    memcmp(&preset, l, sizeof(preset)))
		return -EINVAL;
	if (block_parts(l, &data, &off, &total) || !mul_u(total, l->num_blocks, &end))
		return -EOVERFLOW;
	l->block_stride = (int64_t)total;
	l->scale_block_stride = (int64_t)(total / sizeof(float));
	l->scale_layer_stride = 2 * (int64_t)l->num_kv_heads;
	l->scale_kv_stride = l->num_kv_heads;
	*scales_offset = off;
	return 0;
}

/*
 * What kvrt_layout_for_space takes: the block-major preset of l's own
 * shape, or for fp8 that preset after kvrt_layout_inline_scales().  Any
 * other stride (a kv_stride of one pool block, say) would put bytes of a
 * block past the pool block that holds it, and past the space's mapping.
 */
static int is_space_layout(const struct kvrt_layout *l)
{
	struct kvrt_layout preset;
	uint64_t off;

	if (kvrt_layout_init(&preset, KVRT_LAYOUT_BLOCK_MAJOR, l->num_layers, l->num_kv_heads,
			     l->head_dim, l->block_tokens, l->num_blocks, l->kv_dtype))
		return 0;
	if (!memcmp(&preset, l, sizeof(preset)))
		return 1;
	return l->kv_dtype == KVRT_DTYPE_FP8_E4M3 && !kvrt_layout_inline_scales(&preset, &off) &&
	       !memcmp(&preset, l, sizeof(preset));
}

int kvrt_layout_for_space(struct kvrt_layout *l, struct kvrt_space *space)
{
	uint64_t need;
	int inline_scales, ret;

	if (!l || !space)
		return -EINVAL;
	ret = kvrt_layout_block_bytes(l, &need);
	if (ret)
		return ret;
	if (!is_space_layout(l))
		return -EINVAL;
	/* Only self-contained blocks can each live in one pool block. */
	if (l->block_stride != (int64_t)need)
		return -EINVAL;
	/* The geometry is fixed at open: no need to ask the backend again. */
	if (need > space->block_bytes)
		return -E2BIG;
	if (space->nr_blocks > UINT32_MAX || space->block_bytes > INT64_MAX)
		return -EOVERFLOW;
	inline_scales = l->kv_dtype == KVRT_DTYPE_FP8_E4M3 &&
			l->scale_block_stride * (int64_t)sizeof(float) == l->block_stride;
	l->block_stride = (int64_t)space->block_bytes;
	l->num_blocks = (uint32_t)space->nr_blocks;
	if (inline_scales)
		l->scale_block_stride = (int64_t)(space->block_bytes / sizeof(float));
	return 0;
}
