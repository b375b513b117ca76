// SPDX-License-Identifier: MIT
/*
 * The bounds rule: a layout laid over a space's mapping must keep every
 * block a call touches inside one pool block of the mapping.  Each case
 * widens one stride of a kvrt_layout_for_space() layout (as a caller's
 * edit or a fuzzer would) so that a block reaches into the next pool block
 * or past the mapping's end, and checks that copy, append and attention
 * refuse with -ERANGE having changed nothing: the mapping, the bytes after
 * it (the embedded backend backs whole 2 MiB chunks, so they are readable)
 * and the caller's buffers.  The unwidened layout must still work.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

#define PAGE 4096
#define NBLK 4		/* pool blocks in the space */
#define TAIL 4096	/* bytes after the mapping that must stay as they were */

struct fixture {
	struct kvrt *k;
	struct kvrt_space *s;
	uint8_t *base;
	uint64_t map_bytes;
	struct kvrt_layout space_l;	/* kvrt_layout_for_space()'s */
	uint8_t *before;		/* the mapping and its tail at the start */
};

/* One layer, one head, 64 dims, 8 tokens of f32: exactly one page per block. */
static int fixture_init(struct fixture *f, enum kvrt_dtype dt, uint32_t tokens)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED,
				    .flags = KVRT_OPEN_NO_HUGETLB };
	struct kvrt_space_opts so = { .name = "bounds", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = PAGE,
				      .quota_bytes = NBLK * PAGE };
	uint32_t ids[NBLK];
	uint64_t soff, i;

	memset(f, 0, sizeof(*f));
	if (kvrt_open(&f->k, &o) || kvrt_space_open(f->k, &so, &f->s) ||
	    kvrt_alloc_blocks(f->s, NBLK, ids))
		return -1;
	f->base = kvrt_space_base(f->s);
	f->map_bytes = NBLK * PAGE;
	if (kvrt_layout_init(&f->space_l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, tokens, 1, dt))
		return -1;
	if (dt == KVRT_DTYPE_FP8_E4M3 && kvrt_layout_inline_scales(&f->space_l, &soff))
		return -1;
	if (kvrt_layout_for_space(&f->space_l, f->s))
		return -1;
	for (i = 0; i < f->map_bytes + TAIL; i++)
		f->base[i] = (uint8_t)(i * 7 + 1);
	f->before = malloc(f->map_bytes + TAIL);
	if (!f->before)
		return -1;
	memcpy(f->before, f->base, f->map_bytes + TAIL);
	return 0;
}

static int fixture_unchanged(const struct fixture *f)
{
	return !memcmp(f->before, f->base, f->map_bytes + TAIL);
}

static void fixture_fini(struct fixture *f)
{
	free(f->before);
	kvrt_close(f->k);
}

/* A caller's block-major cache of one block, the space layout's shape. */
static void *own_cache(const struct kvrt_layout *shape, struct kvrt_layout *l)
{
	uint64_t bytes;
	uint8_t *p;

	if (kvrt_layout_init(l, KVRT_LAYOUT_BLOCK_MAJOR, shape->num_layers, shape->num_kv_heads,
			     shape->head_dim, shape->block_tokens, 1, shape->kv_dtype) ||
	    kvrt_layout_block_bytes(l, &bytes))
		return NULL;
	p = malloc(bytes);
	if (p)
		memset(p, 0x5a, bytes);
	return p;
}

/* Copy caller block 0 to space block dst_block through layout l. */
static int copy_into_space(struct fixture *f, const struct kvrt_layout *l, uint32_t dst_block)
{
	struct kvrt_layout own_l;
	void *own = own_cache(l, &own_l);
	struct kvrt_block_array dst = { .layout = l, .base = f->base };
	struct kvrt_block_array src = { .layout = &own_l, .base = own };
	struct kvrt_block_pair p = { .src = 0, .dst = dst_block };
	int ret;

	if (!own)
		return -ENOMEM;
	ret = kvrt_copy_blocks(f->k, &dst, &src, &p, 1, 0, NULL);
	free(own);
	return ret;
}

/* The space layout with V one pool block after K: V of block b is in b + 1. */
static struct kvrt_layout widened(const struct fixture *f)
{
	struct kvrt_layout l = f->space_l;

	l.kv_stride = PAGE;
	return l;
}

TEST(copy_space_layout_reaches_every_block)
{
	struct fixture f;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	CHECK_EQ(copy_into_space(&f, &f.space_l, NBLK - 1), 0);
	CHECK(!memcmp(f.base + (NBLK - 1) * PAGE, "\x5a\x5a\x5a\x5a", 4));
	CHECK(!memcmp(f.base + f.map_bytes, f.before + f.map_bytes, TAIL));
	fixture_fini(&f);
}

TEST(copy_into_last_block_past_mapping)
{
	struct fixture f;
	struct kvrt_layout l;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	CHECK_EQ(copy_into_space(&f, &l, NBLK - 1), -ERANGE);
	CHECK(fixture_unchanged(&f));
	fixture_fini(&f);
}

TEST(copy_into_block_spills_into_next)
{
	struct fixture f;
	struct kvrt_layout l;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	CHECK_EQ(copy_into_space(&f, &l, 0), -ERANGE);
	CHECK(fixture_unchanged(&f));
	fixture_fini(&f);
}

/* A base inside the mapping but not on a pool block boundary. */
TEST(copy_base_off_block_boundary)
{
	struct fixture f;
	struct kvrt_layout l;
	struct kvrt_block_array dst, src;
	struct kvrt_block_pair p = { .src = 0, .dst = 0 };
	void *own;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	own = own_cache(&f.space_l, &l);
	REQUIRE(own != NULL);
	src = (struct kvrt_block_array){ .layout = &l, .base = own };
	dst = (struct kvrt_block_array){ .layout = &f.space_l, .base = f.base + PAGE };
	p.dst = NBLK - 2;	/* pool block NBLK - 1: fine */
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), 0);
	memcpy(f.before, f.base, f.map_bytes + TAIL);
	dst.base = f.base + PAGE + 64;
	p.dst = 0;		/* straddles pool blocks 1 and 2 */
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), -ERANGE);
	CHECK(fixture_unchanged(&f));
	free(own);
	fixture_fini(&f);
}

TEST(copy_from_last_block_past_mapping)
{
	struct fixture f;
	struct kvrt_layout l, own_l;
	struct kvrt_block_array dst, src;
	struct kvrt_block_pair p = { .src = NBLK - 1, .dst = 0 };
	uint8_t *own, *own_before;
	uint64_t bytes;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	own = own_cache(&l, &own_l);
	REQUIRE(own != NULL && kvrt_layout_block_bytes(&own_l, &bytes) == 0);
	own_before = malloc(bytes);
	REQUIRE(own_before != NULL);
	memcpy(own_before, own, bytes);
	dst = (struct kvrt_block_array){ .layout = &own_l, .base = own };
	src = (struct kvrt_block_array){ .layout = &l, .base = f.base };
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), -ERANGE);
	CHECK(!memcmp(own, own_before, bytes));
	free(own_before);
	free(own);
	fixture_fini(&f);
}

/* fp8 with inline scales: V's scales moved one pool block on. */
TEST(copy_fp8_scales_past_mapping)
{
	struct fixture f;
	struct kvrt_layout l, own_l;
	struct kvrt_block_array dst, src;
	struct kvrt_block_pair p = { .src = 0, .dst = NBLK - 1 };
	float own_scales[2] = { 1.0f, 2.0f };
	uint64_t soff;
	void *own;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_FP8_E4M3, 16) == 0);
	own = own_cache(&f.space_l, &own_l);
	REQUIRE(own != NULL);
	/* The scales sit after the data: the same offset as the preset's. */
	l = f.space_l;
	REQUIRE(kvrt_layout_init(&own_l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 16, 1,
				 KVRT_DTYPE_FP8_E4M3) == 0);
	REQUIRE(kvrt_layout_inline_scales(&own_l, &soff) == 0);
	src = (struct kvrt_block_array){ .layout = &own_l, .base = own, .scales = own_scales };
	dst = (struct kvrt_block_array){ .layout = &l, .base = f.base,
					 .scales = (float *)(f.base + soff) };
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), 0);
	memcpy(f.before, f.base, f.map_bytes + TAIL);
	l.scale_kv_stride = PAGE / sizeof(float);
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), -ERANGE);
	CHECK(fixture_unchanged(&f));
	free(own);
	fixture_fini(&f);
}

/* A base in the mapping addresses the space, even where a stride leaves it entirely. */
TEST(copy_from_space_base_leaving_mapping)
{
	struct fixture f;
	struct kvrt_layout l;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = f.space_l;
	l.block_stride = -(int64_t)(64 * PAGE);
	CHECK_EQ(copy_into_space(&f, &l, 1), -ERANGE);
	CHECK(fixture_unchanged(&f));
	fixture_fini(&f);
}

static int append_one(struct fixture *f, const struct kvrt_layout *l, int64_t slot)
{
	struct kvrt_kv_cache kv = { .layout = l, .base = f->base };
	float k[64], v[64];

	for (int i = 0; i < 64; i++) {
		k[i] = (float)i;
		v[i] = -(float)i;
	}
	return kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, &slot, 1);
}

TEST(append_space_layout_last_block)
{
	struct fixture f;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	CHECK_EQ(append_one(&f, &f.space_l, (NBLK - 1) * 8 + 7), 0);
	CHECK(!memcmp(f.base + f.map_bytes, f.before + f.map_bytes, TAIL));
	fixture_fini(&f);
}

TEST(append_into_last_block_past_mapping)
{
	struct fixture f;
	struct kvrt_layout l;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	CHECK_EQ(append_one(&f, &l, (NBLK - 1) * 8 + 7), -ERANGE);
	CHECK(fixture_unchanged(&f));
	/* A skipped (negative) slot touches nothing, so it is not refused. */
	CHECK_EQ(append_one(&f, &l, -1), 0);
	fixture_fini(&f);
}

TEST(append_into_block_spills_into_next)
{
	struct fixture f;
	struct kvrt_layout l;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	CHECK_EQ(append_one(&f, &l, 3), -ERANGE);
	CHECK(fixture_unchanged(&f));
	fixture_fini(&f);
}

/* Decode (q_indptr NULL) or prefill of one sequence over space block `block`. */
static int attend(struct fixture *f, const struct kvrt_layout *l, int32_t block,
		  const int32_t *q_indptr, float *out)
{
	struct kvrt_kv_cache kv = { .layout = l, .base = f->base };
	struct kvrt_attn_params p = { .num_q_heads = 1, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32,
				      .impl = KVRT_ATTN_REFERENCE, .num_threads = 1 };
	int32_t indptr[2] = { 0, 1 }, seq_lens[1] = { 8 };
	struct kvrt_block_table t = { .num_seqs = 1, .indptr = indptr, .indices = &block,
				      .seq_lens = seq_lens };
	float q[64];

	for (int i = 0; i < 64; i++)
		q[i] = 0.01f * (float)i;
	if (q_indptr)
		return kvrt_attn_prefill(&p, q, q_indptr, &kv, &t, out);
	return kvrt_attn_decode(&p, q, &kv, &t, out);
}

static void attn_case(const int32_t *q_indptr)
{
	struct fixture f;
	struct kvrt_layout l;
	float out[64], sentinel[64];

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	memset(out, 0x7f, sizeof(out));
	memcpy(sentinel, out, sizeof(out));
	/* Embedded pages hold arbitrary bytes: the result may be NaN, the call works. */
	CHECK_EQ(attend(&f, &f.space_l, NBLK - 1, q_indptr, out), 0);
	CHECK(memcmp(out, sentinel, sizeof(out)) != 0);
	memcpy(out, sentinel, sizeof(out));
	l = widened(&f);
	CHECK_EQ(attend(&f, &l, NBLK - 1, q_indptr, out), -ERANGE);
	CHECK(!memcmp(out, sentinel, sizeof(out)));
	CHECK_EQ(attend(&f, &l, 0, q_indptr, out), -ERANGE);
	CHECK(!memcmp(out, sentinel, sizeof(out)));
	fixture_fini(&f);
}

TEST(attn_decode_past_mapping)
{
	attn_case(NULL);
}

TEST(attn_prefill_past_mapping)
{
	static const int32_t q_indptr[2] = { 0, 1 };

	attn_case(q_indptr);
}

/* Outside every mapping the rule does not apply: that memory is the caller's. */
TEST(caller_memory_is_not_bounded)
{
	struct fixture f;
	struct kvrt_layout l, own_l;
	struct kvrt_block_array dst, src;
	struct kvrt_block_pair p = { .src = 0, .dst = 0 };
	uint8_t *buf, *own;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	own = own_cache(&l, &own_l);
	buf = malloc(2 * PAGE);
	REQUIRE(own != NULL && buf != NULL);
	l.num_blocks = 1;
	dst = (struct kvrt_block_array){ .layout = &l, .base = buf };
	src = (struct kvrt_block_array){ .layout = &own_l, .base = own };
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), 0);
	free(buf);
	free(own);
	fixture_fini(&f);
}

int main(void)
{
	RUN(copy_space_layout_reaches_every_block);
	RUN(copy_into_last_block_past_mapping);
	RUN(copy_into_block_spills_into_next);
	RUN(copy_base_off_block_boundary);
	RUN(copy_from_last_block_past_mapping);
	RUN(copy_fp8_scales_past_mapping);
	RUN(copy_from_space_base_leaving_mapping);
	RUN(append_space_layout_last_block);
	RUN(append_into_last_block_past_mapping);
	RUN(append_into_block_spills_into_next);
	RUN(attn_decode_past_mapping);
	RUN(attn_prefill_past_mapping);
	RUN(caller_memory_is_not_bounded);
	return tap_done("test_bounds");
}
