// SPDX-License-Identifier: MIT
/*
 * kvrt_copy_blocks between block arrays of every layout pair (block-major,
 * layer-major, head-major, reversed token order, fp8 with inline scales),
 * checked element by element with the test's own address arithmetic:
 * destination blocks hold their source blocks, everything else is
 * untouched.  Then async handles, ordering, concurrency and every error.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

#define XORSHIFT_SEED 0x13198a2e03707344ULL
#include "xorshift.h"

enum kind { BM, LM, HEAD_MAJOR, REVERSED, BM_INLINE, NKINDS };
static const char *const kind_names[] = { "block-major", "layer-major", "head-major",
					  "reversed-tokens", "block-major-inline-scales" };

struct arr {
	struct kvrt_layout l;
	unsigned char *mem;	/* allocation */
	size_t bytes;
	struct kvrt_block_array a;
	float *smem;
	size_t nscales;
};

static int arr_init(struct arr *x, enum kind kind, uint32_t L, uint32_t H, uint32_t D, uint32_t T,
		    uint32_t N, enum kvrt_dtype dt)
{
	int64_t row = (int64_t)D * (int64_t)kvrt_dtype_size(dt), base_off = 0;
	uint64_t soff = 0;

	memset(x, 0, sizeof(*x));
	if (kvrt_layout_init(&x->l, kind == LM || kind == HEAD_MAJOR ? KVRT_LAYOUT_LAYER_MAJOR :
				    KVRT_LAYOUT_BLOCK_MAJOR, L, H, D, T, N, dt))
		return -1;
	x->bytes = (size_t)L * 2 * N * T * H * row;
	x->nscales = dt == KVRT_DTYPE_FP8_E4M3 ? (size_t)L * 2 * N * H : 0;
	if (kind == HEAD_MAJOR) {
		/* [layer][kv][block][head][token][dim] */
		x->l.token_stride = row;
		x->l.head_stride = (int64_t)T * row;
	} else if (kind == REVERSED) {
		/* Block-major with tokens stored last to first. */
		x->l.token_stride = -x->l.token_stride;
		base_off = (int64_t)(T - 1) * H * row;
	} else if (kind == BM_INLINE) {
		if (kvrt_layout_inline_scales(&x->l, &soff))
			return -1;
		x->bytes = (size_t)x->l.block_stride * N;
		x->nscales = 0;
	}
	x->mem = malloc(x->bytes);
	for (size_t i = 0; i < x->bytes; i++)
		x->mem[i] = (unsigned char)rnd();
	x->a.layout = &x->l;
	x->a.base = x->mem + base_off;
	if (kind == BM_INLINE) {
		x->a.scales = (float *)(x->mem + soff);
		for (uint32_t b = 0; b < N; b++)
			for (uint32_t i = 0; i < 2 * L * H; i++)
				x->a.scales[(size_t)b * x->l.scale_block_stride + i] = (float)(rnd() % 1000);
	} else if (x->nscales) {
		x->smem = malloc(x->nscales * sizeof(float));
		for (size_t i = 0; i < x->nscales; i++)
			x->smem[i] = (float)(rnd() % 1000);
		x->a.scales = x->smem;
	}
	return 0;
}

static void arr_fini(struct arr *x)
{
	free(x->mem);
	free(x->smem);
}

static const unsigned char *elem(const struct arr *x, uint32_t l, int kv, uint32_t b, uint32_t t,
				 uint32_t h)
{
	const struct kvrt_layout *y = &x->l;

	return (const unsigned char *)x->a.base + l * y->layer_stride + kv * y->kv_stride +
	       (int64_t)b * y->block_stride + (int64_t)t * y->token_stride + h * y->head_stride;
}

static float scale(const struct arr *x, uint32_t l, int kv, uint32_t b, uint32_t h)
{
	const struct kvrt_layout *y = &x->l;

	return x->a.scales[l * y->scale_layer_stride + kv * y->scale_kv_stride +
			   (int64_t)b * y->scale_block_stride + h];
}

/* Every row and scale of dst: the paired source block's, or the snapshot's. */
static int verify(const struct arr *dst, const struct arr *snap, const struct arr *src,
		  const struct kvrt_block_pair *pairs, uint32_t count)
{
	const struct kvrt_layout *y = &dst->l;
	size_t rowb = (size_t)y->head_dim * kvrt_dtype_size(y->kv_dtype);
	int64_t *from = malloc(y->num_blocks * sizeof(*from));
	int bad = 0;

	for (uint32_t b = 0; b < y->num_blocks; b++)
		from[b] = -1;
	for (uint32_t i = 0; i < count; i++)
		from[pairs[i].dst] = pairs[i].src;
	for (uint32_t b = 0; b < y->num_blocks; b++)
		for (uint32_t l = 0; l < y->num_layers; l++)
			for (int kv = 0; kv < 2; kv++) {
				const struct arr *w = from[b] < 0 ? snap : src;
				uint32_t wb = from[b] < 0 ? b : (uint32_t)from[b];

				for (uint32_t t = 0; t < y->block_tokens; t++)
					for (uint32_t h = 0; h < y->num_kv_heads; h++)
						if (memcmp(elem(dst, l, kv, b, t, h), elem(w, l, kv, wb, t, h),
							   rowb) && bad++ < 3)
							tap_diag("block %u (from %lld) l %u kv %d t %u h %u differs",
								 b, (long long)from[b], l, kv, t, h);
				if (y->kv_dtype != KVRT_DTYPE_FP8_E4M3)
					continue;
				for (uint32_t h = 0; h < y->num_kv_heads; h++)
					if (scale(dst, l, kv, b, h) != scale(w, l, kv, wb, h) && bad++ < 3)
						tap_diag("scale block %u l %u kv %d h %u differs", b, l, kv, h);
			}
	free(from);
	return bad;
}

/* A snapshot shares the layout, so elem() works on it. */
static void snapshot(struct arr *s, const struct arr *x)
{
	*s = *x;
	s->mem = malloc(x->bytes);
	memcpy(s->mem, x->mem, x->bytes);
	s->a.layout = &s->l;
	s->a.base = s->mem + ((const unsigned char *)x->a.base - x->mem);
	s->smem = NULL;
	if (x->smem) {
		s->smem = malloc(x->nscales * sizeof(float));
		memcpy(s->smem, x->smem, x->nscales * sizeof(float));
		s->a.scales = s->smem;
	} else if (x->a.scales) {
		s->a.scales = (float *)(s->mem + ((unsigned char *)x->a.scales - x->mem));
	}
}

static uint32_t random_pairs(struct kvrt_block_pair *p, uint32_t ns, uint32_t nd, uint32_t max)
{
	uint32_t *perm = malloc(nd * sizeof(*perm)), n = 1 + (uint32_t)(rnd() % max), i;

	for (i = 0; i < nd; i++)
		perm[i] = i;
	for (i = nd - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1)), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	if (n > nd)
		n = nd;
	for (i = 0; i < n; i++) {
		p[i].dst = perm[i];
		p[i].src = (uint32_t)(rnd() % ns);
	}
	free(perm);
	return n;
}

static struct kvrt *open_handle(void)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED };
	struct kvrt *k = NULL;

	kvrt_open(&k, &o);
	return k;
}

static void layouts_case(enum kvrt_dtype dt, bool async)
{
	struct kvrt *k = open_handle();
	struct kvrt_block_pair pairs[16];
	int bad = 0;

	REQUIRE(k);
	for (int sk = 0; sk < NKINDS; sk++)
		for (int dk = 0; dk < NKINDS; dk++) {
			struct arr src, dst, snap;
			struct kvrt_copy *c = NULL;
			uint32_t L = 1 + (uint32_t)(rnd() % 3), H = 1 + (uint32_t)(rnd() % 4);
			uint32_t D = 1 + (uint32_t)(rnd() % 9), T = 1 + (uint32_t)(rnd() % 5);
			uint32_t n;
			int b;

			if ((sk == BM_INLINE || dk == BM_INLINE) && dt != KVRT_DTYPE_FP8_E4M3)
				continue;
			if (arr_init(&src, (enum kind)sk, L, H, D, T, 9, dt) ||
			    arr_init(&dst, (enum kind)dk, L, H, D, T, 11, dt)) {
				CHECK(!"arr_init");
				return;
			}
			snapshot(&snap, &dst);
			n = random_pairs(pairs, 9, 11, 16);
			if (async) {
				CHECK_EQ(kvrt_copy_blocks(k, &dst.a, &src.a, pairs, n, KVRT_COPY_ASYNC,
							  &c), 0);
				CHECK(c != NULL);
				CHECK_EQ(kvrt_copy_wait(c), 0);
				CHECK_EQ(kvrt_copy_poll(c), 0);
				kvrt_copy_free(c);
			} else {
				CHECK_EQ(kvrt_copy_blocks(k, &dst.a, &src.a, pairs, n, 0, NULL), 0);
			}
			b = verify(&dst, &snap, &src, pairs, n);
			if (b)
				tap_diag("%s -> %s, dtype %d, L %u H %u D %u T %u: %d differences",
					 kind_names[sk], kind_names[dk], dt, L, H, D, T, b);
			bad += b;
			arr_fini(&src);
			arr_fini(&dst);
			arr_fini(&snap);
		}
	CHECK_EQ(bad, 0);
	kvrt_close(k);
}

TEST(copy_every_layout_pair_f16)
{
	for (int r = 0; r < 3; r++)
		layouts_case(KVRT_DTYPE_F16, false);
}

TEST(copy_every_layout_pair_f32_async)
{
	for (int r = 0; r < 3; r++)
		layouts_case(KVRT_DTYPE_F32, true);
}

TEST(copy_every_layout_pair_fp8_with_scales)
{
	for (int r = 0; r < 3; r++) {
		layouts_case(KVRT_DTYPE_FP8_E4M3, false);
		layouts_case(KVRT_DTYPE_FP8_E4M3, true);
	}
}

TEST(copy_within_one_array)
{
	struct kvrt *k = open_handle();
	struct arr x, snap;
	struct kvrt_block_pair ok[2] = { { 0, 5 }, { 1, 6 } }, bad[2] = { { 0, 1 }, { 1, 2 } };

	REQUIRE(k);
	REQUIRE(arr_init(&x, LM, 2, 2, 4, 4, 8, KVRT_DTYPE_BF16) == 0);
	snapshot(&snap, &x);
	CHECK_EQ(kvrt_copy_blocks(k, &x.a, &x.a, bad, 2, 0, NULL), -EINVAL);
	CHECK(!memcmp(x.mem, snap.mem, x.bytes));
	CHECK_EQ(kvrt_copy_blocks(k, &x.a, &x.a, ok, 2, 0, NULL), 0);
	CHECK_EQ(verify(&x, &snap, &snap, ok, 2), 0);
	arr_fini(&x);
	arr_fini(&snap);
	kvrt_close(k);
}

/* Async copies complete in submission order: the last write of a block wins. */
TEST(async_copies_in_order)
{
	struct kvrt *k = open_handle();
	struct arr s1, s2, d;
	struct kvrt_copy *c[40];
	struct kvrt_block_pair p1 = { 0, 3 }, p2 = { 1, 3 };

	REQUIRE(k);
	REQUIRE(arr_init(&s1, BM, 4, 8, 128, 16, 2, KVRT_DTYPE_F16) == 0);
	REQUIRE(arr_init(&s2, LM, 4, 8, 128, 16, 2, KVRT_DTYPE_F16) == 0);
	REQUIRE(arr_init(&d, BM, 4, 8, 128, 16, 4, KVRT_DTYPE_F16) == 0);
	for (int i = 0; i < 40; i++)
		CHECK_EQ(kvrt_copy_blocks(k, &d.a, i % 2 ? &s2.a : &s1.a, i % 2 ? &p2 : &p1, 1,
					  KVRT_COPY_ASYNC, &c[i]), 0);
	CHECK_EQ(kvrt_copy_wait(c[39]), 0);
	/* Earlier ones are done once a later one is. */
	for (int i = 0; i < 40; i++)
		CHECK_EQ(kvrt_copy_poll(c[i]), 0);
	for (uint32_t l = 0; l < 4; l++)
		for (uint32_t t = 0; t < 16; t++)
			CHECK(!memcmp(elem(&d, l, 1, 3, t, 7), elem(&s2, l, 1, 1, t, 7), 256));
	for (int i = 0; i < 40; i++)
		kvrt_copy_free(c[i]);
	arr_fini(&s1);
	arr_fini(&s2);
	arr_fini(&d);
	kvrt_close(k);
}

/* kvrt_close drains the queue; handles outlive the kvrt. */
TEST(close_drains_pending_copies)
{
	struct kvrt *k = open_handle();
	struct arr s, d, snap;
	struct kvrt_block_pair p[32];
	struct kvrt_copy *c;
	int r;

	REQUIRE(k);
	/* 32 blocks of 1 MiB (8 layers, 8 heads, 128 dims, 16 tokens, f32). */
	REQUIRE(arr_init(&s, LM, 8, 8, 128, 16, 32, KVRT_DTYPE_F32) == 0);
	REQUIRE(arr_init(&d, BM, 8, 8, 128, 16, 32, KVRT_DTYPE_F32) == 0);
	snapshot(&snap, &d);
	for (uint32_t i = 0; i < 32; i++)
		p[i] = (struct kvrt_block_pair){ .src = i, .dst = 31 - i };
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, p, 32, KVRT_COPY_ASYNC, &c), 0);
	r = kvrt_copy_poll(c);
	CHECK(r == 0 || r == -EAGAIN);
	kvrt_close(k);
	CHECK_EQ(kvrt_copy_poll(c), 0);
	CHECK_EQ(kvrt_copy_wait(c), 0);
	kvrt_copy_free(c);
	CHECK_EQ(verify(&d, &snap, &s, p, 32), 0);
	arr_fini(&s);
	arr_fini(&d);
	arr_fini(&snap);
}

struct thr {
	struct kvrt *k;
	struct arr *src, *dst;
	uint32_t first;
	int fails;
};

static void *submitter(void *arg)
{
	struct thr *t = arg;

	for (uint32_t i = 0; i < 25; i++) {
		struct kvrt_block_pair p = { .src = i % 4, .dst = t->first + i };
		struct kvrt_copy *c;

		if (kvrt_copy_blocks(t->k, &t->dst->a, &t->src->a, &p, 1,
				     i % 3 ? KVRT_COPY_ASYNC : 0, &c)) {
			t->fails++;
			continue;
		}
		if (i % 2)
			t->fails += kvrt_copy_wait(c) != 0;
		kvrt_copy_free(c);
	}
	return NULL;
}

TEST(concurrent_submitters)
{
	struct kvrt *k = open_handle();
	struct arr s, d, snap;
	struct thr t[4];
	pthread_t th[4];
	struct kvrt_block_pair all[100];

	REQUIRE(k);
	REQUIRE(arr_init(&s, BM, 2, 4, 64, 16, 4, KVRT_DTYPE_BF16) == 0);
	REQUIRE(arr_init(&d, LM, 2, 4, 64, 16, 100, KVRT_DTYPE_BF16) == 0);
	snapshot(&snap, &d);
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){ .k = k, .src = &s, .dst = &d, .first = 25 * (uint32_t)i };
		pthread_create(&th[i], NULL, submitter, &t[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(t[i].fails, 0);
	}
	for (uint32_t i = 0; i < 100; i++)
		all[i] = (struct kvrt_block_pair){ .src = (i % 25) % 4, .dst = i };
	CHECK_EQ(verify(&d, &snap, &s, all, 100), 0);
	arr_fini(&s);
	arr_fini(&d);
	arr_fini(&snap);
	kvrt_close(k);
}

TEST(copy_errors_copy_nothing)
{
	struct kvrt *k = open_handle();
	struct arr s, d, snap, f8s, f8d, other;
	struct kvrt_block_pair p[2] = { { 0, 1 }, { 1, 2 } }, dup[2] = { { 0, 1 }, { 1, 1 } };
	struct kvrt_block_pair oobs = { 4, 0 }, oobd = { 0, 6 };
	struct kvrt_block_array a;
	struct kvrt_layout bad;
	struct kvrt_copy *c = (struct kvrt_copy *)&c;

	REQUIRE(k);
	REQUIRE(arr_init(&s, BM, 2, 2, 8, 4, 4, KVRT_DTYPE_F16) == 0);
	REQUIRE(arr_init(&d, LM, 2, 2, 8, 4, 6, KVRT_DTYPE_F16) == 0);
	REQUIRE(arr_init(&f8s, BM, 2, 2, 8, 4, 4, KVRT_DTYPE_FP8_E4M3) == 0);
	REQUIRE(arr_init(&f8d, LM, 2, 2, 8, 4, 6, KVRT_DTYPE_FP8_E4M3) == 0);
	snapshot(&snap, &d);

	CHECK_EQ(kvrt_copy_blocks(NULL, &d.a, &s.a, p, 2, 0, &c), -EINVAL);
	CHECK(c == NULL);
	CHECK_EQ(kvrt_copy_blocks(k, NULL, &s.a, p, 2, 0, NULL), -EINVAL);
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, NULL, p, 2, 0, NULL), -EINVAL);
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, p, 2, 2, NULL), -EINVAL);
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, NULL, 2, 0, NULL), -EINVAL);
	a = d.a;
	a.layout = NULL;
	CHECK_EQ(kvrt_copy_blocks(k, &a, &s.a, p, 2, 0, NULL), -EINVAL);
	a = d.a;
	a.base = NULL;
	CHECK_EQ(kvrt_copy_blocks(k, &a, &s.a, p, 2, 0, NULL), -EINVAL);
	/* Geometry: each field in turn. */
	for (int f = 0; f < 5; f++) {
		bad = d.l;
		switch (f) {
		case 0: bad.num_layers = 1; break;
		case 1: bad.num_kv_heads = 1; break;
		case 2: bad.head_dim = 4; break;
		case 3: bad.block_tokens = 2; break;
		default: bad.kv_dtype = KVRT_DTYPE_BF16; break;
		}
		a = d.a;
		a.layout = &bad;
		CHECK_EQ(kvrt_copy_blocks(k, &a, &s.a, p, 2, 0, NULL), -EINVAL);
	}
	/* A layout whose extent overflows. */
	bad = d.l;
	bad.layer_stride = INT64_MAX;
	a = d.a;
	a.layout = &bad;
	CHECK_EQ(kvrt_copy_blocks(k, &a, &s.a, p, 2, 0, NULL), -EINVAL);
	/* Ids out of range, a destination twice. */
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, &oobs, 1, 0, NULL), -EINVAL);
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, &oobd, 1, KVRT_COPY_ASYNC, &c), -EINVAL);
	CHECK(c == NULL);
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, dup, 2, 0, NULL), -EINVAL);
	/* fp8 without scales on either side. */
	a = f8d.a;
	a.scales = NULL;
	CHECK_EQ(kvrt_copy_blocks(k, &a, &f8s.a, p, 2, 0, NULL), -EINVAL);
	a = f8s.a;
	a.scales = NULL;
	CHECK_EQ(kvrt_copy_blocks(k, &f8d.a, &a, p, 2, 0, NULL), -EINVAL);
	CHECK(!memcmp(d.mem, snap.mem, d.bytes));
	/* count 0 is a no-op, with or without a handle. */
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, NULL, 0, 0, NULL), 0);
	CHECK_EQ(kvrt_copy_blocks(k, &d.a, &s.a, NULL, 0, KVRT_COPY_ASYNC, &c), 0);
	CHECK(c != NULL);
	CHECK_EQ(kvrt_copy_poll(c), 0);
	kvrt_copy_free(c);
	/* Handle calls. */
	CHECK_EQ(kvrt_copy_poll(NULL), -EINVAL);
	CHECK_EQ(kvrt_copy_wait(NULL), -EINVAL);
	kvrt_copy_free(NULL);
	/* Arrays of different num_blocks are fine. */
	REQUIRE(arr_init(&other, HEAD_MAJOR, 2, 2, 8, 4, 100, KVRT_DTYPE_F16) == 0);
	CHECK_EQ(kvrt_copy_blocks(k, &other.a, &s.a, p, 2, 0, NULL), 0);
	arr_fini(&other);
	arr_fini(&s);
	arr_fini(&d);
	arr_fini(&snap);
	arr_fini(&f8s);
	arr_fini(&f8d);
	kvrt_close(k);
}

int main(void)
{
	RUN(copy_every_layout_pair_f16);
	RUN(copy_every_layout_pair_f32_async);
	RUN(copy_every_layout_pair_fp8_with_scales);
	RUN(copy_within_one_array);
	RUN(async_copies_in_order);
	RUN(close_drains_pending_copies);
	RUN(concurrent_submitters);
	RUN(copy_errors_copy_nothing);
	return tap_done("test_copy");
}
