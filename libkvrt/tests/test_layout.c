// SPDX-License-Identifier: MIT
/*
 * KV layout presets and size formulas against numbers computed by hand,
 * and the presets' strides against an element-by-element enumeration
 * (every element of the cache at a distinct offset, no gaps).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

/* The strides kvrt_layout_init() gives, in bytes; a field left out is 0. */
struct strides {
	int64_t head, token, kv, layer, block;
	int64_t scale_kv, scale_layer, scale_block;
};

/*
 * Lay out L H D T N of dt as kind, then check every stride against the one
 * worked out by hand; a failure names the case and the stride.
 */
static void check_strides(const char *name, enum kvrt_layout_kind kind, uint32_t L, uint32_t H,
			  uint32_t D, uint32_t T, uint32_t N, enum kvrt_dtype dt,
			  struct strides want)
{
	struct kvrt_layout l;
	int ret = kvrt_layout_init(&l, kind, L, H, D, T, N, dt);

	CHECKF(ret == 0, "%s: kvrt_layout_init = %d", name, ret);
	if (ret)
		return;

	const struct {
		const char *field;
		int64_t got, want;
	} f[] = {
		{ "head_stride", l.head_stride, want.head },
		{ "token_stride", l.token_stride, want.token },
		{ "kv_stride", l.kv_stride, want.kv },
		{ "layer_stride", l.layer_stride, want.layer },
		{ "block_stride", l.block_stride, want.block },
		{ "scale_kv_stride", l.scale_kv_stride, want.scale_kv },
		{ "scale_layer_stride", l.scale_layer_stride, want.scale_layer },
		{ "scale_block_stride", l.scale_block_stride, want.scale_block },
	};

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		CHECKF(f[i].got == f[i].want, "%s: %s is %lld, expected %lld", name, f[i].field,
		       (long long)f[i].got, (long long)f[i].want);
}

/* Llama-3-8B-like geometry: 2 layers shown, f16, 16-token blocks. */
TEST(block_major_f16_by_hand)
{
	struct kvrt_layout l;

	/* L=2 H=4 D=8 T=16 N=10, 2 bytes: row 16, token 64, plane 1024. */
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 4, 8, 16, 10, KVRT_DTYPE_F16) == 0);
	CHECK_EQ(l.num_layers, 2);
	CHECK_EQ(l.num_kv_heads, 4);
	CHECK_EQ(l.head_dim, 8);
	CHECK_EQ(l.block_tokens, 16);
	CHECK_EQ(l.num_blocks, 10);
	CHECK_EQ(l.kv_dtype, KVRT_DTYPE_F16);
	check_strides("block-major f16", KVRT_LAYOUT_BLOCK_MAJOR, 2, 4, 8, 16, 10, KVRT_DTYPE_F16,
		      (struct strides){ .head = 16, .token = 64, .kv = 1024, .layer = 2048,
					.block = 4096 });
}

TEST(layer_major_f16_by_hand)
{
	check_strides("layer-major f16", KVRT_LAYOUT_LAYER_MAJOR, 2, 4, 8, 16, 10, KVRT_DTYPE_F16,
		      (struct strides){ .head = 16, .token = 64, .block = 1024, .kv = 10240,
					.layer = 20480 });
}

TEST(fp8_scales_by_hand)
{
	/* L=3 H=2 D=4 T=5 N=7, 1 byte: row 4, token 8, plane 40. */
	check_strides("block-major fp8", KVRT_LAYOUT_BLOCK_MAJOR, 3, 2, 4, 5, 7,
		      KVRT_DTYPE_FP8_E4M3,
		      (struct strides){ .head = 4, .token = 8, .kv = 40, .layer = 80, .block = 240,
					.scale_kv = 2, .scale_layer = 4, .scale_block = 12 });
	check_strides("layer-major fp8", KVRT_LAYOUT_LAYER_MAJOR, 3, 2, 4, 5, 7,
		      KVRT_DTYPE_FP8_E4M3,
		      (struct strides){ .head = 4, .token = 8, .block = 40, .kv = 280, .layer = 560,
					.scale_block = 2, .scale_kv = 14, .scale_layer = 28 });
}

/*
 * Each preset maps (l, kv, b, t, h) rows one-to-one onto [0, total) with no
 * gap, and (l, kv, b, h) scales onto [0, L*2*N*H).
 */
static void check_bijection(enum kvrt_layout_kind kind, uint32_t L, uint32_t H, uint32_t D,
			    uint32_t T, uint32_t N, enum kvrt_dtype dt)
{
	struct kvrt_layout l;
	size_t e = kvrt_dtype_size(dt), row = (size_t)D * e;
	size_t rows = (size_t)L * 2 * N * T * H, srows = (size_t)L * 2 * N * H;
	unsigned char *seen = calloc(rows, 1), *sseen = calloc(srows, 1);
	uint32_t a, kv, b, t, h;

	REQUIRE(seen && sseen);
	REQUIRE(kvrt_layout_init(&l, kind, L, H, D, T, N, dt) == 0);
	for (a = 0; a < L; a++)
		for (kv = 0; kv < 2; kv++)
			for (b = 0; b < N; b++) {
				for (t = 0; t < T; t++)
					for (h = 0; h < H; h++) {
						int64_t off = a * l.layer_stride + kv * l.kv_stride +
							      b * l.block_stride + t * l.token_stride +
							      h * l.head_stride;

						CHECK(off >= 0 && off % (int64_t)row == 0 &&
						      (size_t)off / row < rows);
						if (off >= 0 && (size_t)off / row < rows)
							seen[off / row]++;
					}
				if (dt != KVRT_DTYPE_FP8_E4M3)
					continue;
				for (h = 0; h < H; h++) {
					int64_t s = a * l.scale_layer_stride + kv * l.scale_kv_stride +
						    b * l.scale_block_stride + h;

					CHECK(s >= 0 && (size_t)s < srows);
					if (s >= 0 && (size_t)s < srows)
						sseen[s]++;
				}
			}
	for (size_t i = 0; i < rows; i++)
		if (seen[i] != 1) {
			tap_diag("kind %d row %zu covered %u times", kind, i, seen[i]);
			CHECK(seen[i] == 1);
			break;
		}
	for (size_t i = 0; dt == KVRT_DTYPE_FP8_E4M3 && i < srows; i++)
		if (sseen[i] != 1) {
			tap_diag("kind %d scale %zu covered %u times", kind, i, sseen[i]);
			CHECK(sseen[i] == 1);
			break;
		}
	free(seen);
	free(sseen);
}

TEST(presets_cover_the_cache_exactly_once)
{
	static const enum kvrt_dtype dts[] = { KVRT_DTYPE_F32, KVRT_DTYPE_F16, KVRT_DTYPE_BF16,
					       KVRT_DTYPE_FP8_E4M3 };

	for (unsigned int i = 0; i < 4; i++) {
		check_bijection(KVRT_LAYOUT_BLOCK_MAJOR, 3, 2, 5, 4, 6, dts[i]);
		check_bijection(KVRT_LAYOUT_LAYER_MAJOR, 3, 2, 5, 4, 6, dts[i]);
		check_bijection(KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 1, 1, 1, dts[i]);
		check_bijection(KVRT_LAYOUT_LAYER_MAJOR, 2, 8, 16, 1, 3, dts[i]);
	}
}

TEST(layout_init_errors)
{
	struct kvrt_layout l, before;

	memset(&l, 0xab, sizeof(l));
	before = l;
	CHECK_EQ(kvrt_layout_init(NULL, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 1, 1, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 0, 1, 1, 1, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 0, 1, 1, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 0, 1, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 1, 0, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_LAYER_MAJOR, 1, 1, 1, 1, 0, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, (enum kvrt_layout_kind)2, 1, 1, 1, 1, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, (enum kvrt_layout_kind)-1, 1, 1, 1, 1, 1, KVRT_DTYPE_F16),
		 -EINVAL);
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 1, 1, 1, (enum kvrt_dtype)4),
		 -EINVAL);
	/* The plane alone: 2^32-1 dims, f32. */
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, UINT32_MAX, UINT32_MAX,
				  UINT32_MAX, 1, KVRT_DTYPE_F32), -EOVERFLOW);
	/* plane 2^42 (D 2^20 f32, H 2^10, T 2^10) * 2 * L 2^10 * N 2^10 = 2^63: too big. */
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_LAYER_MAJOR, 1U << 10, 1U << 10, 1U << 20,
				  1U << 10, 1U << 10, KVRT_DTYPE_F32), -EOVERFLOW);
	CHECK(!memcmp(&l, &before, sizeof(l)));
	/* Half of it, 2^62, fits. */
	CHECK_EQ(kvrt_layout_init(&l, KVRT_LAYOUT_LAYER_MAJOR, 1U << 10, 1U << 10, 1U << 20,
				  1U << 10, 1U << 9, KVRT_DTYPE_F32), 0);
	CHECK_EQ(l.layer_stride, 1LL << 52);
}

TEST(block_bytes_by_hand)
{
	static const struct {
		const char *name;
		enum kvrt_layout_kind kind;
		uint32_t L, H, D, T, N;
		enum kvrt_dtype dt;
		uint64_t bytes;
	} cases[] = {
		/* 2 layers * 2 * 16 tokens * 4 heads * 8 dims * 2 bytes = 4096. */
		{ "block-major f16", KVRT_LAYOUT_BLOCK_MAJOR, 2, 4, 8, 16, 10, KVRT_DTYPE_F16, 4096 },
		{ "layer-major f16", KVRT_LAYOUT_LAYER_MAJOR, 2, 4, 8, 16, 10, KVRT_DTYPE_F16, 4096 },
		/* Llama-3-8B, bf16, 16 tokens: 32 * 2 * 16 * 8 * 128 * 2 = 2 MiB. */
		{ "Llama-3-8B bf16", KVRT_LAYOUT_BLOCK_MAJOR, 32, 8, 128, 16, 1, KVRT_DTYPE_BF16,
		  2 << 20 },
		/* fp8: data 3*2*5*2*4 = 240, then 3*2*2 scales of 4 bytes = 48. */
		{ "block-major fp8", KVRT_LAYOUT_BLOCK_MAJOR, 3, 2, 4, 5, 7, KVRT_DTYPE_FP8_E4M3, 288 },
		/* fp8, data 2*1*1*3 = 6 rounded to 8, then 2 scales: 16. */
		{ "layer-major fp8, odd data", KVRT_LAYOUT_LAYER_MAJOR, 1, 1, 3, 1, 2,
		  KVRT_DTYPE_FP8_E4M3, 16 },
	};
	struct kvrt_layout l;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ret = kvrt_layout_init(&l, cases[i].kind, cases[i].L, cases[i].H, cases[i].D,
					   cases[i].T, cases[i].N, cases[i].dt);
		uint64_t b = 0;

		CHECKF(ret == 0, "%s: kvrt_layout_init = %d", cases[i].name, ret);
		if (ret)
			continue;
		ret = kvrt_layout_block_bytes(&l, &b);
		CHECKF(ret == 0, "%s: kvrt_layout_block_bytes = %d", cases[i].name, ret);
		CHECKF(b == cases[i].bytes, "%s: %llu block bytes, expected %llu", cases[i].name,
		       (unsigned long long)b, (unsigned long long)cases[i].bytes);
		/* With no scales, a block-major block is one block_stride. */
		if (i == 0)
			CHECK_EQ((int64_t)b, l.block_stride);
	}
}

TEST(block_bytes_errors)
{
	struct kvrt_layout l;
	uint64_t b = 77;

	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 4, 8, 16, 10, KVRT_DTYPE_F16) == 0);
	CHECK_EQ(kvrt_layout_block_bytes(NULL, &b), -EINVAL);
	CHECK_EQ(kvrt_layout_block_bytes(&l, NULL), -EINVAL);
	l.head_dim = 0;
	CHECK_EQ(kvrt_layout_block_bytes(&l, &b), -EINVAL);
	l.head_dim = 8;
	l.kv_dtype = (enum kvrt_dtype)9;
	CHECK_EQ(kvrt_layout_block_bytes(&l, &b), -EINVAL);
	l.kv_dtype = KVRT_DTYPE_F16;
	l.num_blocks = 0;
	CHECK_EQ(kvrt_layout_block_bytes(&l, &b), -EINVAL);
	l.num_blocks = 10;
	l.block_stride = INT64_MAX / 4;	/* the extent overflows */
	CHECK_EQ(kvrt_layout_block_bytes(&l, &b), -EOVERFLOW);
	CHECK_EQ(b, 77);
}

TEST(kv_bytes_by_hand)
{
	uint64_t b = 0;

	/* Llama-3-8B: 32 layers, 8 KV heads, 128 dims, bf16: 128 KiB a token. */
	CHECK_EQ(kvrt_kv_bytes(32, 8, 128, 1, KVRT_DTYPE_BF16, &b), 0);
	CHECK_EQ(b, 131072);
	CHECK_EQ(kvrt_kv_bytes(32, 8, 128, 8192, KVRT_DTYPE_BF16, &b), 0);
	CHECK_EQ(b, 1ULL << 30);
	CHECK_EQ(kvrt_kv_bytes(32, 8, 128, 1, KVRT_DTYPE_FP8_E4M3, &b), 0);
	CHECK_EQ(b, 65536);
	CHECK_EQ(kvrt_kv_bytes(32, 8, 128, 1, KVRT_DTYPE_F32, &b), 0);
	CHECK_EQ(b, 262144);
	/* Llama-2-70B (80 layers, GQA 8, 128 dims, f16), 4096 tokens: 1.25 GiB. */
	CHECK_EQ(kvrt_kv_bytes(80, 8, 128, 4096, KVRT_DTYPE_F16, &b), 0);
	CHECK_EQ(b, 1342177280ULL);
	CHECK_EQ(kvrt_kv_bytes(1, 1, 1, 0, KVRT_DTYPE_F16, &b), 0);
	CHECK_EQ(b, 0);
}

TEST(kv_bytes_errors)
{
	uint64_t b = 5;

	CHECK_EQ(kvrt_kv_bytes(0, 8, 128, 1, KVRT_DTYPE_F16, &b), -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(32, 0, 128, 1, KVRT_DTYPE_F16, &b), -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(32, 8, 0, 1, KVRT_DTYPE_F16, &b), -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(32, 8, 128, 1, (enum kvrt_dtype)4, &b), -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(32, 8, 128, 1, KVRT_DTYPE_F16, NULL), -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(1, 1, 1, UINT64_MAX, KVRT_DTYPE_F32, &b), -EOVERFLOW);
	/* 8 bytes a token: 2^60 tokens is 2^63, one past the limit... */
	CHECK_EQ(kvrt_kv_bytes(1, 1, 1, 1ULL << 60, KVRT_DTYPE_F32, &b), -EOVERFLOW);
	CHECK_EQ(kvrt_kv_bytes(UINT32_MAX, UINT32_MAX, UINT32_MAX, 1, KVRT_DTYPE_F32, &b),
		 -EOVERFLOW);
	CHECK_EQ(b, 5);
	/* ...and one token fewer fits. */
	CHECK_EQ(kvrt_kv_bytes(1, 1, 1, (1ULL << 60) - 1, KVRT_DTYPE_F32, &b), 0);
	CHECK_EQ(b, (1ULL << 63) - 8);
}

TEST(inline_scales)
{
	struct kvrt_layout l;
	uint64_t off = 0, bb = 0;
	uint32_t a, kv, b, h, t;

	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 3, 2, 4, 5, 7,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	REQUIRE(kvrt_layout_block_bytes(&l, &bb) == 0);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), 0);
	CHECK_EQ(off, 240);
	CHECK_EQ(l.block_stride, 288);
	CHECK_EQ(l.scale_block_stride, 72);
	CHECK_EQ(l.scale_layer_stride, 4);
	CHECK_EQ(l.scale_kv_stride, 2);
	/* Data and scales of block b stay inside [b * 288, (b + 1) * 288). */
	for (b = 0; b < 7; b++)
		for (a = 0; a < 3; a++)
			for (kv = 0; kv < 2; kv++)
				for (h = 0; h < 2; h++) {
					int64_t s = (int64_t)off + 4 * (a * l.scale_layer_stride +
						kv * l.scale_kv_stride + b * l.scale_block_stride + h);

					CHECK(s >= (int64_t)b * 288 + 240 && s + 4 <= (int64_t)(b + 1) * 288);
					for (t = 0; t < 5; t++) {
						int64_t d = a * l.layer_stride + kv * l.kv_stride +
							    b * l.block_stride + t * l.token_stride +
							    h * l.head_stride;

						CHECK(d >= (int64_t)b * 288 && d + 4 <= (int64_t)b * 288 + 240);
					}
				}
	/* The block bytes do not change: the scales were always counted. */
	CHECK_EQ(kvrt_layout_block_bytes(&l, &bb), 0);
	CHECK_EQ(bb, 288);
	/* Odd data bytes: the scales start 4-aligned. */
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 3, 1, 2,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), 0);
	CHECK_EQ(off, 8);
	CHECK_EQ(l.block_stride, 16);
	CHECK_EQ(l.scale_block_stride, 4);
}

TEST(inline_scales_errors)
{
	struct kvrt_layout l, before;
	uint64_t off = 3;

	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 4, 4, 4, KVRT_DTYPE_F16) == 0);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), -EINVAL);		/* not fp8 */
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_LAYER_MAJOR, 2, 2, 4, 4, 4,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), -EINVAL);		/* not block-major */
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 2, 2, 4, 4, 4,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	CHECK_EQ(kvrt_layout_inline_scales(NULL, &off), -EINVAL);
	CHECK_EQ(kvrt_layout_inline_scales(&l, NULL), -EINVAL);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), 0);
	before = l;
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), -EINVAL);		/* twice */
	CHECK(!memcmp(&l, &before, sizeof(l)));
}

/* kvrt.h: the result must not fit for -EOVERFLOW; for 0 tokens it is 0, whatever the sizes. */
TEST(kv_bytes_of_zero_tokens_is_zero_whatever_the_dimensions)
{
	uint64_t b = 5;

	CHECK_EQ(kvrt_kv_bytes(UINT32_MAX, UINT32_MAX, UINT32_MAX, 0, KVRT_DTYPE_F32, &b), 0);
	CHECK_EQ(b, 0);
	b = 5;
	CHECK_EQ(kvrt_kv_bytes(1U << 31, 1U << 31, 2, 0, KVRT_DTYPE_BF16, &b), 0);
	CHECK_EQ(b, 0);
	/* The argument checks still come first. */
	CHECK_EQ(kvrt_kv_bytes(0, UINT32_MAX, UINT32_MAX, 0, KVRT_DTYPE_F32, &b), -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(UINT32_MAX, UINT32_MAX, UINT32_MAX, 0, (enum kvrt_dtype)9, &b),
		 -EINVAL);
	CHECK_EQ(kvrt_kv_bytes(UINT32_MAX, UINT32_MAX, UINT32_MAX, 0, KVRT_DTYPE_F32, NULL),
		 -EINVAL);
}

/*
 * kvrt.h: an fp8 block-major preset whose blocks, with their scales
 * inline, no longer fit the cache in 63 bits is -EOVERFLOW (as every
 * layout call says of a size past 63 bits), and the layout is unchanged.
 * 2^32 - 1 blocks of 2^31 bytes of data (K and V of 2^30) fit; with 8
 * bytes of scales each they do not.
 */
TEST(inline_scales_past_63_bits_is_eoverflow)
{
	struct kvrt_layout l, before;
	uint64_t off = 3;

	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 1U << 30, 1, UINT32_MAX,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	before = l;
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), -EOVERFLOW);
	CHECK(!memcmp(&l, &before, sizeof(l)));
	CHECK_EQ(off, 3);
	/* Half the blocks: fits. */
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 1U << 30, 1, UINT32_MAX / 2,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	CHECK_EQ(kvrt_layout_inline_scales(&l, &off), 0);
}

int main(void)
{
	RUN(block_major_f16_by_hand);
	RUN(layer_major_f16_by_hand);
	RUN(fp8_scales_by_hand);
	RUN(presets_cover_the_cache_exactly_once);
	RUN(layout_init_errors);
	RUN(block_bytes_by_hand);
	RUN(block_bytes_errors);
	RUN(kv_bytes_by_hand);
	RUN(kv_bytes_errors);
	RUN(inline_scales);
	RUN(inline_scales_errors);
	RUN(kv_bytes_of_zero_tokens_is_zero_whatever_the_dimensions);
	RUN(inline_scales_past_63_bits_is_eoverflow);
	return tap_done("test_layout");
}
