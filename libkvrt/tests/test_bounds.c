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
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
static int copy_into_space(struct fixture *f, const struct kvrt_layout *l, int64_t dst_block)
{
	struct kvrt_layout own_l;
	void *own = own_cache(l, &own_l);
	struct kvrt_block_array dst = { .layout = l, .base = f->base };
	struct kvrt_block_array src = { .layout = &own_l, .base = own };
	struct kvrt_block_pair p = { .src = 0, .dst = (uint32_t)dst_block };
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

/* A write into the space through a layout: copy_into_space, append_one. */
typedef int (*through_fn)(struct fixture *f, const struct kvrt_layout *l, int64_t where);

/* op through the widened layout at where is refused with -ERANGE and writes nothing. */
static void widened_refuses(through_fn op, int64_t where, const char *what)
{
	struct fixture f;
	struct kvrt_layout l;
	int ret;

	REQUIRE(fixture_init(&f, KVRT_DTYPE_F32, 8) == 0);
	l = widened(&f);
	ret = op(&f, &l, where);
	CHECKF(ret == -ERANGE, "%s at %lld: returned %d, want -ERANGE", what, (long long)where,
	       ret);
	CHECKF(fixture_unchanged(&f), "%s at %lld: refused, but bytes changed", what,
	       (long long)where);
	fixture_fini(&f);
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
	widened_refuses(copy_into_space, NBLK - 1, "copy into the last block");
}

TEST(copy_into_block_spills_into_next)
{
	widened_refuses(copy_into_space, 0, "copy into block");
}

/*
 * The one-pair copy dst <- src is refused with -ERANGE and leaves the
 * space's bytes as they are now; what names the copy in a failure.
 */
static void copy_refused(struct fixture *f, const struct kvrt_block_array *dst,
			 const struct kvrt_block_array *src, const struct kvrt_block_pair *p,
			 const char *what)
{
	int ret;

	memcpy(f->before, f->base, f->map_bytes + TAIL);
	ret = kvrt_copy_blocks(f->k, dst, src, p, 1, 0, NULL);
	CHECKF(ret == -ERANGE, "%s: returned %d, want -ERANGE", what, ret);
	CHECKF(fixture_unchanged(f), "%s: refused, but bytes changed", what);
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
	dst.base = f.base + PAGE + 64;
	p.dst = 0;		/* straddles pool blocks 1 and 2 */
	copy_refused(&f, &dst, &src, &p, "copy to a base off a block boundary");
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
	l.scale_kv_stride = PAGE / sizeof(float);
	copy_refused(&f, &dst, &src, &p, "copy of fp8 scales past the mapping");
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

/* Append one token of 64 f32 (K 0..63, V 0..-63) at slot of the cache (l, base). */
static int append_token(const struct kvrt_layout *l, void *base, int64_t slot)
{
	struct kvrt_kv_cache kv = { .layout = l, .base = base };
	float k[64], v[64];

	for (int i = 0; i < 64; i++) {
		k[i] = (float)i;
		v[i] = -(float)i;
	}
	return kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, &slot, 1);
}

static int append_one(struct fixture *f, const struct kvrt_layout *l, int64_t slot)
{
	return append_token(l, f->base, slot);
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
	widened_refuses(append_one, 3, "append into slot");
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

/* ---- backed blocks ----------------------------------------------------------
 *
 * No signal for a bad id (DESIGN.md): an id inside the mapping whose pool
 * block has no memory behind it is -EFAULT before any byte moves.  The
 * embedded backend reserves a space's range PROT_NONE and backs it 2 MiB
 * chunk by chunk (a SIGSEGV there); the module's fault handler sends
 * SIGBUS.  Here one block is allocated in a space of two chunks, so blocks
 * [UB_CHUNK, UB_BLOCKS) are unbacked.  Each call that could fault runs in
 * a child, which reports the call's errno and whether any byte it was
 * refused changed: a signal (or a sanitizer's report) there is this test's
 * failure, not the end of the run.
 */
#define UB_BLOCKS 1024			/* 4 KiB pool blocks: two 2 MiB chunks */
#define UB_CHUNK 512			/* blocks in the first chunk */

struct ub {
	struct kvrt *k;
	struct kvrt_space *s;
	uint8_t *base;
	uint64_t backed;		/* blocks backed (kvrt_space_info) */
	struct kvrt_layout space_l;	/* one page per block, f32 */
	struct kvrt_layout own_l;	/* the caller's cache of two blocks */
	uint8_t *before;		/* the backed blocks at the start */
	uint8_t own[2 * PAGE], own_before[2 * PAGE];
	float out[64], out_before[64];
};

static int ub_init(struct ub *f, uint32_t nalloc)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED,
				    .flags = KVRT_OPEN_NO_HUGETLB };
	struct kvrt_space_opts so = { .name = "unbacked", .flags = KVRT_SPACE_CREATE,
				      .mode = 0600, .block_bytes = PAGE,
				      .quota_bytes = UB_BLOCKS * PAGE };
	struct kvrt_space_info si;
	uint32_t id;
	uint64_t i;

	memset(f, 0, sizeof(*f));
	if (kvrt_open(&f->k, &o) || kvrt_space_open(f->k, &so, &f->s))
		return -1;
	if (nalloc && kvrt_alloc_blocks(f->s, nalloc, &id))
		return -1;
	if (kvrt_space_info(f->s, &si))
		return -1;
	f->backed = si.backed_blocks;
	f->base = kvrt_space_base(f->s);
	if (kvrt_layout_init(&f->space_l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 8, 1,
			     KVRT_DTYPE_F32) ||
	    kvrt_layout_init(&f->own_l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 64, 8, 2,
			     KVRT_DTYPE_F32) ||
	    kvrt_layout_for_space(&f->space_l, f->s))
		return -1;
	f->before = malloc(f->backed * PAGE + 1);
	if (!f->before)
		return -1;
	for (i = 0; i < f->backed * PAGE; i++)
		f->base[i] = (uint8_t)(i * 7 + 1);
	memcpy(f->before, f->base, f->backed * PAGE);
	memset(f->own, 0x5a, sizeof(f->own));
	memcpy(f->own_before, f->own, sizeof(f->own));
	memset(f->out, 0x7f, sizeof(f->out));
	memcpy(f->out_before, f->out, sizeof(f->out));
	return 0;
}

/* Whether the backed blocks, the caller's cache or the output changed. */
static bool ub_changed(const struct ub *f)
{
	return memcmp(f->before, f->base, f->backed * PAGE) ||
	       memcmp(f->own, f->own_before, sizeof(f->own)) ||
	       memcmp(f->out, f->out_before, sizeof(f->out));
}

static void ub_fini(struct ub *f)
{
	free(f->before);
	kvrt_close(f->k);
}

typedef int (*ub_call_fn)(struct ub *f, int64_t block);

/*
 * call(f, block) in a child: it must return want and change nothing.
 * The child exits with the call's errno, plus 128 when bytes changed.
 */
static void ub_expect(struct ub *f, ub_call_fn call, int64_t block, int want, const char *what)
{
	int st = 0, code;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		tap_failf("fork: %s", strerror(errno));
		return;
	}
	if (!pid) {
		int ret = call(f, block);

		_exit((ret <= 0 && ret > -128 ? -ret : 127) | (ub_changed(f) ? 128 : 0));
	}
	if (waitpid(pid, &st, 0) != pid) {
		tap_failf("waitpid: %s", strerror(errno));
		return;
	}
	if (WIFSIGNALED(st)) {
		tap_failf("%s, block %lld: killed by signal %d (%s)", what, (long long)block,
			  WTERMSIG(st), strsignal(WTERMSIG(st)));
		return;
	}
	code = WEXITSTATUS(st);
	CHECKF(-(code & 127) == want, "%s, block %lld: returned %d, want %d", what,
	       (long long)block, -(code & 127), want);
	CHECKF(!(code & 128), "%s, block %lld: refused, but bytes changed", what,
	       (long long)block);
}

/*
 * In a space with one chunk backed, call(f, block) on each block of
 * blocks[n] is refused with -EFAULT and changes nothing; what names the
 * call in a failure (with the block).
 */
static void ub_expect_efault_past_one_chunk(ub_call_fn call, const int64_t *blocks, size_t n,
					    const char *what)
{
	struct ub f;

	REQUIRE(ub_init(&f, 1) == 0);
	for (size_t i = 0; i < n; i++)
		ub_expect(&f, call, blocks[i], -EFAULT, what);
	ub_fini(&f);
}

/* The last block of the space, then the first that is not backed. */
static const int64_t ub_last_and_first_unbacked[] = { UB_BLOCKS - 1, UB_CHUNK };

/* Caller block 0 into space block `block`. */
static int ub_copy_in(struct ub *f, int64_t block)
{
	struct kvrt_block_array dst = { .layout = &f->space_l, .base = f->base };
	struct kvrt_block_array src = { .layout = &f->own_l, .base = f->own };
	struct kvrt_block_pair p = { .src = 0, .dst = (uint32_t)block };

	return kvrt_copy_blocks(f->k, &dst, &src, &p, 1, 0, NULL);
}

/* Space block `block` into caller block 0. */
static int ub_copy_out(struct ub *f, int64_t block)
{
	struct kvrt_block_array dst = { .layout = &f->own_l, .base = f->own };
	struct kvrt_block_array src = { .layout = &f->space_l, .base = f->base };
	struct kvrt_block_pair p = { .src = (uint32_t)block, .dst = 0 };

	return kvrt_copy_blocks(f->k, &dst, &src, &p, 1, 0, NULL);
}

TEST(a_copy_into_an_unbacked_block_is_efault_not_a_signal)
{
	struct ub f;

	REQUIRE(ub_init(&f, 1) == 0);
	REQUIRE(f.backed == UB_CHUNK);
	ub_expect(&f, ub_copy_in, UB_BLOCKS - 1, -EFAULT, "copy into the last block");
	ub_expect(&f, ub_copy_in, UB_CHUNK, -EFAULT, "copy into the first unbacked block");
	/* The last backed block still takes a copy. */
	CHECK_EQ(ub_copy_in(&f, UB_CHUNK - 1), 0);
	CHECK(!memcmp(f.base + (UB_CHUNK - 1) * PAGE, f.own, PAGE));
	ub_fini(&f);
}

TEST(a_copy_from_an_unbacked_block_is_efault_not_a_signal)
{
	ub_expect_efault_past_one_chunk(ub_copy_out, ub_last_and_first_unbacked, 2, "copy from");
}

/* A batch whose second pair is unbacked: the first, backed, is not copied either. */
static int ub_copy_batch(struct ub *f, int64_t block)
{
	struct kvrt_block_array dst = { .layout = &f->space_l, .base = f->base };
	struct kvrt_block_array src = { .layout = &f->own_l, .base = f->own };
	struct kvrt_block_pair p[2] = { { .src = 0, .dst = 0 },
					{ .src = 1, .dst = (uint32_t)block } };

	return kvrt_copy_blocks(f->k, &dst, &src, p, 2, 0, NULL);
}

TEST(a_copy_batch_with_one_unbacked_block_copies_nothing)
{
	ub_expect_efault_past_one_chunk(ub_copy_batch, ub_last_and_first_unbacked, 1, "batch copy");
}

/* Asynchronous: refused in the call, no handle, nothing queued. */
static int ub_copy_async(struct ub *f, int64_t block)
{
	struct kvrt_block_array dst = { .layout = &f->space_l, .base = f->base };
	struct kvrt_block_array src = { .layout = &f->own_l, .base = f->own };
	struct kvrt_block_pair p = { .src = 0, .dst = (uint32_t)block };
	struct kvrt_copy *done = (struct kvrt_copy *)&done;
	int ret = kvrt_copy_blocks(f->k, &dst, &src, &p, 1, KVRT_COPY_ASYNC, &done);

	if (done) {		/* wait, so that a queued copy would show */
		kvrt_copy_free(done);
		return -ENOTRECOVERABLE;
	}
	return ret;
}

TEST(an_async_copy_of_an_unbacked_block_is_efault_and_queues_nothing)
{
	ub_expect_efault_past_one_chunk(ub_copy_async, ub_last_and_first_unbacked, 1, "async copy");
}

TEST(a_copy_into_a_space_with_nothing_backed_is_efault)
{
	struct ub f;

	REQUIRE(ub_init(&f, 0) == 0);
	REQUIRE(f.backed == 0);
	ub_expect(&f, ub_copy_in, 0, -EFAULT, "copy into block 0");
	ub_fini(&f);
}

/* The library may remember how far a space was backed; it must see it grow. */
TEST(a_block_backed_after_a_refusal_takes_a_copy)
{
	struct ub f;
	uint32_t ids[UB_CHUNK];

	REQUIRE(ub_init(&f, 1) == 0);
	ub_expect(&f, ub_copy_in, UB_CHUNK + 10, -EFAULT, "copy before the space grew");
	/* The rest of the first chunk, then one more block: the second chunk. */
	REQUIRE(kvrt_alloc_blocks(f.s, UB_CHUNK, ids) == 0);
	CHECK_EQ(ub_copy_in(&f, UB_CHUNK + 10), 0);
	CHECK(!memcmp(f.base + (UB_CHUNK + 10) * PAGE, f.own, PAGE));
	ub_fini(&f);
}

static int ub_append(struct ub *f, int64_t block)
{
	return append_token(&f->space_l, f->base, block * 8 + 3);
}

TEST(an_append_into_an_unbacked_block_is_efault_not_a_signal)
{
	ub_expect_efault_past_one_chunk(ub_append, ub_last_and_first_unbacked, 2, "append");
}

/* Attention over one sequence of 8 tokens in block `block`: decode, prefill, on workers. */
static int ub_attend(struct ub *f, int64_t block, int how)
{
	static const int32_t q_indptr[2] = { 0, 1 };
	struct kvrt_kv_cache kv = { .layout = &f->space_l, .base = f->base };
	struct kvrt_attn_params p = { .num_q_heads = 1, .sm_scale = 0.125f, .window_left = -1,
				      .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32,
				      .impl = how == 3 ? KVRT_ATTN_REFERENCE : KVRT_ATTN_FAST,
				      .num_threads = 1 };
	int32_t indptr[2] = { 0, 1 }, seq_lens[1] = { 8 }, idx = (int32_t)block;
	struct kvrt_block_table t = { .num_seqs = 1, .indptr = indptr, .indices = &idx,
				      .seq_lens = seq_lens };
	struct kvrt_workers *w = NULL;
	float q[64];
	int ret;

	for (int i = 0; i < 64; i++)
		q[i] = 0.01f * (float)i;
	switch (how) {
	case 0:
	case 3:
		return kvrt_attn_decode(&p, q, &kv, &t, f->out);
	case 1:
		return kvrt_attn_prefill(&p, q, q_indptr, &kv, &t, f->out);
	default:
		ret = kvrt_workers_create(2, &w);
		if (ret)
			return ret;
		ret = kvrt_attn_decode_on(w, &p, q, &kv, &t, f->out);
		if (!ret)
			ret = kvrt_attn_prefill_on(w, &p, q, q_indptr, &kv, &t, f->out);
		kvrt_workers_destroy(w);
		return ret;
	}
}

static int ub_decode(struct ub *f, int64_t b) { return ub_attend(f, b, 0); }
static int ub_prefill(struct ub *f, int64_t b) { return ub_attend(f, b, 1); }
static int ub_on_workers(struct ub *f, int64_t b) { return ub_attend(f, b, 2); }
static int ub_decode_ref(struct ub *f, int64_t b) { return ub_attend(f, b, 3); }

TEST(an_attention_decode_over_an_unbacked_block_is_efault_not_a_signal)
{
	struct ub f;

	REQUIRE(ub_init(&f, 1) == 0);
	ub_expect(&f, ub_decode, UB_BLOCKS - 1, -EFAULT, "decode");
	ub_expect(&f, ub_decode_ref, UB_CHUNK, -EFAULT, "decode (reference)");
	/* A backed block attends (its bytes are arbitrary: any result). */
	CHECK_EQ(ub_decode(&f, 0), 0);
	ub_fini(&f);
}

TEST(an_attention_prefill_over_an_unbacked_block_is_efault_not_a_signal)
{
	ub_expect_efault_past_one_chunk(ub_prefill, ub_last_and_first_unbacked, 1, "prefill");
}

TEST(attention_on_workers_over_an_unbacked_block_is_efault_not_a_signal)
{
	ub_expect_efault_past_one_chunk(ub_on_workers, ub_last_and_first_unbacked, 1, "decode_on, prefill_on");
}

/* Past the bounds rule, the old errno: a block leaving its pool block is -ERANGE first. */
TEST(a_layout_leaving_its_pool_block_is_still_erange)
{
	struct ub f;
	struct kvrt_layout wide;
	struct kvrt_block_array dst, src;
	struct kvrt_block_pair p = { .src = 0, .dst = 0 };

	REQUIRE(ub_init(&f, 1) == 0);
	wide = f.space_l;
	wide.kv_stride = PAGE;
	dst = (struct kvrt_block_array){ .layout = &wide, .base = f.base };
	src = (struct kvrt_block_array){ .layout = &f.own_l, .base = f.own };
	CHECK_EQ(kvrt_copy_blocks(f.k, &dst, &src, &p, 1, 0, NULL), -ERANGE);
	CHECK(!ub_changed(&f));
	ub_fini(&f);
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
	RUN(a_copy_into_an_unbacked_block_is_efault_not_a_signal);
	RUN(a_copy_from_an_unbacked_block_is_efault_not_a_signal);
	RUN(a_copy_batch_with_one_unbacked_block_copies_nothing);
	RUN(an_async_copy_of_an_unbacked_block_is_efault_and_queues_nothing);
	RUN(a_copy_into_a_space_with_nothing_backed_is_efault);
	RUN(a_block_backed_after_a_refusal_takes_a_copy);
	RUN(an_append_into_an_unbacked_block_is_efault_not_a_signal);
	RUN(an_attention_decode_over_an_unbacked_block_is_efault_not_a_signal);
	RUN(an_attention_prefill_over_an_unbacked_block_is_efault_not_a_signal);
	RUN(attention_on_workers_over_an_unbacked_block_is_efault_not_a_signal);
	RUN(a_layout_leaving_its_pool_block_is_still_erange);
	return tap_done("test_bounds");
}
