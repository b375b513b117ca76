// SPDX-License-Identifier: MIT
/* test_gpu: with a GPU: kvrt_gpu_append_kv against the CPU kvrt_append_kv. */
#define _GNU_SOURCE
#include "harness.h"

/* ---- with a GPU: append ----------------------------------------------------------------- */

struct acache {
	struct kvrt_layout lo;
	uint8_t *host;		/* the CPU's cache */
	size_t bytes;
	float *hscales;		/* separate scales (fp8, not inline), else NULL */
	size_t nscales;
	uint64_t scales_off;	/* inline scales: offset into the cache, else 0 */
	void *dev, *dscales;
};

enum { A_BM, A_LM, A_PAD, A_INLINE };
static const char *const akind_name[] = { "block-major", "layer-major", "padded",
					  "block-major inline scales" };

static void acache_free(struct acache *c)
{
	free(c->host);
	free(c->hscales);
	dev_free(c->dev);
	dev_free(c->dscales);
	memset(c, 0, sizeof(*c));
}

/* Identical random contents on both sides: fp8 holds finite codes and scales. */
static int acache_make(struct acache *c, int kind, uint32_t nkv, uint32_t hd, uint32_t bt,
		       uint32_t nblocks, enum kvrt_dtype dt)
{
	size_t i;

	memset(c, 0, sizeof(*c));
	if (kind == A_INLINE) {
		if (kvrt_layout_init(&c->lo, KVRT_LAYOUT_BLOCK_MAJOR, 2, nkv, hd, bt, nblocks, dt) ||
		    kvrt_layout_inline_scales(&c->lo, &c->scales_off))
			return -1;
		c->bytes = (size_t)c->lo.block_stride * nblocks;
	} else {
		fill_layout(&c->lo, kind == A_BM ? L_BM : kind == A_LM ? L_LM : L_PAD, 2, nkv, hd, bt,
			    nblocks, dt);
		c->bytes = layout_bytes(&c->lo);
		c->nscales = scales_count(&c->lo);
	}
	c->host = xmalloc(c->bytes);
	for (i = 0; i < c->bytes; i++) {
		uint8_t b = (uint8_t)rnd();

		if (dt == KVRT_DTYPE_FP8_E4M3 && (b & 0x7f) == 0x7f)
			b ^= 1;
		c->host[i] = b;
	}
	if (c->nscales) {
		c->hscales = xmalloc(sizeof(float) * c->nscales);
		for (i = 0; i < c->nscales; i++)
			c->hscales[i] = (float)ldexp(1.0 + rnd_below(64) / 64.0, -9 - (int)rnd_below(3));
	}
	if (kind == A_INLINE) {
		for (i = 0; i < nblocks; i++) {
			float *s = (float *)(c->host + c->scales_off + i * (size_t)c->lo.block_stride);
			uint32_t j;

			for (j = 0; j < 2 * 2 * nkv; j++)
				s[j] = (float)ldexp(1.0 + rnd_below(64) / 64.0, -9 - (int)rnd_below(3));
		}
	}
	c->dev = dev_dup(c->host, c->bytes);
	if (c->nscales)
		c->dscales = dev_dup(c->hscales, sizeof(float) * c->nscales);
	return c->dev && (!c->nscales || c->dscales) ? 0 : -1;
}

static float *acache_scales(struct acache *c, bool dev)
{
	if (c->lo.kv_dtype != KVRT_DTYPE_FP8_E4M3)
		return NULL;
	if (c->scales_off)
		return (float *)((uint8_t *)(dev ? c->dev : c->host) + c->scales_off);
	return dev ? c->dscales : c->hscales;
}

/* fp8 codes a and b are the same or neighbours on the number line. */
static bool fp8_near(uint8_t a, uint8_t b)
{
	int x = a & 0x80 ? -(int)(a & 0x7f) : (int)a, y = b & 0x80 ? -(int)(b & 0x7f) : (int)b;

	return abs(x - y) <= 1;
}

/*
 * The device cache against the CPU's: f16/bf16 every byte; fp8 within the
 * documented tolerance (written: bytes the calls wrote, for the 1 %).
 */
static void acache_compare(struct acache *c, const char *what, size_t written)
{
	uint8_t *got = xmalloc(c->bytes);
	float *gs = NULL;
	size_t i, diff = 0, far = 0, first = (size_t)-1, sdiff = 0;

	if (dev_get(got, c->dev, c->bytes))
		goto out;
	if (c->nscales) {
		gs = xmalloc(sizeof(float) * c->nscales);
		if (dev_get(gs, c->dscales, sizeof(float) * c->nscales))
			goto out;
	}
	if (c->lo.kv_dtype != KVRT_DTYPE_FP8_E4M3) {
		for (i = 0; i < c->bytes && first == (size_t)-1; i++)
			if (got[i] != c->host[i])
				first = i;
		CHECKF(first == (size_t)-1, "%s: the GPU cache differs from the CPU's at byte %zu "
		       "(0x%02x, CPU 0x%02x); f16/bf16 must be bit-identical", what, first,
		       first < c->bytes ? got[first] : 0, first < c->bytes ? c->host[first] : 0);
		goto out;
	}
	/* fp8: scales (inline ones sit in the byte range: compare them as floats) */
	{
		size_t ns = c->scales_off ? (size_t)c->lo.num_blocks * 4 * c->lo.num_kv_heads : c->nscales;

		for (i = 0; i < ns; i++) {
			float a, b;
			size_t at = c->scales_off ? c->scales_off + (i / (4 * c->lo.num_kv_heads)) *
							(size_t)c->lo.block_stride +
							(i % (4 * c->lo.num_kv_heads)) * 4 : 0;

			if (c->scales_off) {
				memcpy(&a, got + at, 4);
				memcpy(&b, c->host + at, 4);
			} else {
				a = gs[i];
				b = c->hscales[i];
			}
			if (a != b) {
				sdiff++;
				CHECKF(fabsf(a - b) <= 0x1p-23f * fmaxf(fabsf(a), fabsf(b)),
				       "%s: scale %zu is %a, CPU %a (more than 1 ulp)", what, i, a, b);
			}
		}
	}
	for (i = 0; i < c->bytes; i++) {
		if (c->scales_off) {
			size_t in = i % (size_t)c->lo.block_stride;

			if (in >= c->scales_off && in < c->scales_off + 16ULL * c->lo.num_kv_heads)
				continue;	/* a scale: compared above */
		}
		if (got[i] != c->host[i]) {
			diff++;
			if (!fp8_near(got[i], c->host[i]) && far++ == 0)
				first = i;
		}
	}
	CHECKF(!far, "%s: %zu fp8 bytes differ by more than one code (first at %zu: 0x%02x, CPU "
	       "0x%02x)", what, far, first, far ? got[first] : 0, far ? c->host[first] : 0);
	CHECKF(diff <= 4 + written / 100, "%s: %zu of %zu written fp8 bytes differ from the CPU's",
	       what, diff, written);
	if ((diff || sdiff) && !far)
		tap_diag("%s: %zu fp8 bytes and %zu scales off by one code / ulp", what, diff, sdiff);
out:
	free(got);
	free(gs);
}

/* k, v: [n][nkv][hd] of src; magnitude per token amp[t] (NULL: 1). */
static void *make_rows(enum kvrt_dtype src, uint32_t n, uint32_t nkv, uint32_t hd,
		       const double *amp)
{
	size_t cnt = (size_t)n * nkv * hd, i;
	void *p = xmalloc(cnt * esize(src));

	for (i = 0; i < cnt; i++)
		enc(src, p, i, (amp ? amp[i / ((size_t)nkv * hd)] : 1.0) * rnd_unit());
	return p;
}

/* Append the same tokens on both sides (cpu_slots: what the CPU gets) and compare. */
static void append_both(struct acache *c, uint32_t layer, enum kvrt_dtype src, uint32_t n,
			const int64_t *gpu_slots, const int64_t *cpu_slots, const double *amp,
			const char *what)
{
	uint32_t nkv = c->lo.num_kv_heads, hd = c->lo.head_dim;
	void *k = make_rows(src, n, nkv, hd, amp), *v = make_rows(src, n, nkv, hd, amp);
	size_t rb = (size_t)n * nkv * hd * esize(src), written = 0;
	struct kvrt_kv_cache hkv = { &c->lo, c->host, acache_scales(c, false), layer };
	struct kvrt_kv_cache dkv = { &c->lo, c->dev, acache_scales(c, true), layer };
	void *dk = dev_dup(k, rb), *dv = dev_dup(v, rb), *ds = dev_dup(gpu_slots, 8 * (size_t)n);
	uint32_t i;
	int r;

	r = kvrt_append_kv(&hkv, k, v, src, cpu_slots, n);
	CHECKF(!r, "%s: CPU kvrt_append_kv = %d", what, r);
	for (i = 0; i < n; i++)
		written += cpu_slots[i] >= 0 ? 2 * (size_t)nkv * hd : 0;
	if (!r && dk && dv && ds) {
		r = kvrt_gpu_append_kv(G, &dkv, dk, dv, src, ds, n, NULL);
		CHECKF(!r, "%s: kvrt_gpu_append_kv = %d", what, r);
		if (!r && !dev_sync())
			acache_compare(c, what, written);
	}
	dev_free(dk);
	dev_free(dv);
	dev_free(ds);
	free(k);
	free(v);
}

/* f16/bf16: random distinct slots in random order, some padding (< 0). */
TEST(append_f16_bf16_bit_identical)
{
	static const uint32_t hds[] = { 64, 128, 256, 80 };
	int kind, i;

	for (i = 0; i < 12; i++) {
		enum kvrt_dtype dt = i % 2 ? KVRT_DTYPE_BF16 : KVRT_DTYPE_F16;
		enum kvrt_dtype src = qo_types[i % 3];
		uint32_t hd = hds[i % 4], bt = i % 3 ? 16 : 1 + rnd_below(40), nkv = 1 + rnd_below(4);
		uint32_t nb = 20, nslots = nb * bt, n = nslots * 3 / 5 + 1, j, *perm;
		int64_t *slots;
		struct acache c;
		char what[128];

		kind = i % 3;	/* block-major, layer-major, padded */
		if (acache_make(&c, kind, nkv, hd, bt, nb, dt)) {
			tap_failf("append: cache setup");
			acache_free(&c);
			continue;
		}
		perm = xmalloc(sizeof(*perm) * nslots);
		shuffle(perm, nslots);
		slots = xmalloc(sizeof(*slots) * n);
		for (j = 0; j < n; j++)
			slots[j] = rnd_below(10) ? (int64_t)perm[j] : -1 - (int64_t)rnd_below(100);
		snprintf(what, sizeof(what), "append %s from %s, %s, hd %u, block %u, %u heads, layer %d",
			 dtname(dt), dtname(src), akind_name[kind], hd, bt, nkv, i % 2);
		append_both(&c, (uint32_t)(i % 2), src, n, slots, slots, NULL, what);
		/* again over some of the same slots: overwrites */
		for (j = 0; j < n; j++)
			slots[j] = (int64_t)perm[(j + n / 3) % nslots];
		append_both(&c, (uint32_t)(i % 2), src, n / 2, slots, slots, NULL, what);
		free(perm);
		free(slots);
		acache_free(&c);
	}
}

/*
 * fp8: blocks in random order, each block's tokens one run from offset 0
 * (growing magnitudes in some blocks: scales rise, earlier slots are
 * requantised), padding between runs; then a decode-like step: one more
 * token at the next offset of each block (some larger), then a second step.
 */
TEST(append_fp8_matches_cpu)
{
	int i;

	for (i = 0; i < 8; i++) {
		int kind = i % 4;	/* bm, lm, padded, inline */
		enum kvrt_dtype src = qo_types[i % 3];
		uint32_t hd = i % 2 ? 128 : 64, bt = i % 3 ? 16 : 7, nkv = 1 + rnd_below(3), nb = 24;
		uint32_t *perm = xmalloc(sizeof(*perm) * nb), *fill = calloc(nb, sizeof(uint32_t));
		int64_t *slots = xmalloc(sizeof(*slots) * (nb * (bt + 1) + nb));
		double *amp = xmalloc(sizeof(double) * (nb * (bt + 1) + nb));
		uint32_t n = 0, b, t, step;
		struct acache c;
		char what[128];

		if (acache_make(&c, kind, nkv, hd, bt, nb, KVRT_DTYPE_FP8_E4M3)) {
			tap_failf("append fp8: cache setup");
			goto next;
		}
		shuffle(perm, nb);
		for (b = 0; b < nb * 3 / 4; b++) {
			uint32_t blk = perm[b], len = 1 + rnd_below(bt - 1), mode = rnd_below(3);

			for (t = 0; t < len; t++) {
				slots[n] = (int64_t)blk * bt + t;
				/* rising, falling or random magnitudes */
				amp[n++] = mode == 0 ? 0.1 * (t + 1) : mode == 1 ? 2.0 / (t + 1) :
					   0.05 + 3.0 * rnd_below(16) / 15;
			}
			fill[blk] = len;
			if (!rnd_below(4)) {
				slots[n] = -1;
				amp[n++] = 1;
			}
		}
		snprintf(what, sizeof(what), "append fp8 from %s, %s, hd %u, block %u, %u heads",
			 dtname(src), akind_name[kind], hd, bt, nkv);
		append_both(&c, 1, src, n, slots, slots, amp, what);
		for (step = 0; step < 2; step++) {
			n = 0;
			for (b = 0; b < nb; b++) {
				uint32_t blk = perm[b];

				if (!fill[blk] || fill[blk] >= bt)
					continue;
				slots[n] = (int64_t)blk * bt + fill[blk]++;
				amp[n++] = rnd_below(3) ? 0.3 : 5.0;	/* some raise the scale */
			}
			snprintf(what, sizeof(what), "append fp8 decode step %u, %s, hd %u, block %u",
				 step + 1, akind_name[kind], hd, bt);
			if (n)
				append_both(&c, 1, src, n, slots, slots, amp, what);
		}
next:
		acache_free(&c);
		free(perm);
		free(fill);
		free(slots);
		free(amp);
	}
}

/* Slots >= num_blocks * block_tokens and < 0 are skipped on the GPU; nothing else moves. */
TEST(append_out_of_range_slots_skipped)
{
	int i;

	for (i = 0; i < 3; i++) {
		enum kvrt_dtype dt = i == 0 ? KVRT_DTYPE_BF16 : i == 1 ? KVRT_DTYPE_F16 :
				     KVRT_DTYPE_FP8_E4M3;
		uint32_t bt = 16, nb = 8, n = 0, b, t, k = 0;
		int64_t gs[64], cs[64], ns = (int64_t)nb * bt;
		/* num_blocks * block_tokens is 128 */
		static const int64_t bad[] = { 128, 129, 1000000, INT64_MAX, -1, INT64_MIN, -2 };
		struct acache c;
		char what[96];

		if (acache_make(&c, i == 2 ? A_INLINE : A_LM, 2, 128, bt, nb, dt)) {
			tap_failf("append oob: cache setup");
			acache_free(&c);
			continue;
		}
		for (b = 0; b < nb; b += 2) {	/* runs of 5 from offset 0, a bad slot after each */
			for (t = 0; t < 5; t++) {
				gs[n] = cs[n] = (int64_t)b * bt + t;
				n++;
			}
			gs[n] = bad[k++];
			cs[n++] = -1;
		}
		while (k < sizeof(bad) / sizeof(bad[0])) {
			gs[n] = bad[k++];
			cs[n++] = -1;
		}
		snprintf(what, sizeof(what), "append %s with slots >= %lld and < 0", dtname(dt),
			 (long long)ns);
		append_both(&c, 0, KVRT_DTYPE_F32, n, gs, cs, NULL, what);
		acache_free(&c);
	}
}

TEST(append_errors_match_cpu)
{
	struct acache c, c8;
	int64_t slot = 3, *dslot = NULL;
	float k[2 * 128] = { 0 };
	void *dk = NULL;
	int rc, rg;

	REQUIRE(acache_make(&c, A_LM, 2, 128, 16, 4, KVRT_DTYPE_BF16) == 0);
	REQUIRE(acache_make(&c8, A_LM, 2, 128, 16, 4, KVRT_DTYPE_FP8_E4M3) == 0);
	dk = dev_dup(k, sizeof(k));
	dslot = dev_dup(&slot, sizeof(slot));
	if (dk && dslot) {
		struct kvrt_kv_cache h = { &c.lo, c.host, NULL, 0 }, d = { &c.lo, c.dev, NULL, 0 };
		struct kvrt_kv_cache h8 = { &c8.lo, c8.host, c8.hscales, 0 };
		struct kvrt_kv_cache d8 = { &c8.lo, c8.dev, c8.dscales, 0 };
		struct kvrt_layout bad = c.lo;

#define SAME(what, HKV, DKV, src, n)                                                           \
	do {                                                                                   \
		rc = kvrt_append_kv(HKV, k, k, src, &slot, n);                                 \
		rg = kvrt_gpu_append_kv(G, DKV, dk, dk, src, dslot, n, NULL);                  \
		CHECKF(rc == rg, "append %s: GPU %d, CPU %d", what, rg, rc);                   \
	} while (0)
		SAME("NULL kv", NULL, NULL, KVRT_DTYPE_F32, 1);
		h.layer = d.layer = 2;
		SAME("layer == num_layers", &h, &d, KVRT_DTYPE_F32, 1);
		h.layer = d.layer = 0;
		SAME("src fp8", &h, &d, KVRT_DTYPE_FP8_E4M3, 1);
		SAME("src 9", &h, &d, (enum kvrt_dtype)9, 1);
		h8.scales = d8.scales = NULL;
		SAME("fp8 without scales", &h8, &d8, KVRT_DTYPE_F32, 1);
		SAME("0 tokens", &h, &d, KVRT_DTYPE_F32, 0);
		CHECKF(rc == 0, "append of 0 tokens = %d", rc);
		bad.head_dim = 0;
		h.layout = d.layout = &bad;
		SAME("head_dim 0", &h, &d, KVRT_DTYPE_F32, 1);
		h.layout = d.layout = &c.lo;
		h.base = d.base = NULL;
		SAME("NULL base", &h, &d, KVRT_DTYPE_F32, 1);
#undef SAME
		rg = kvrt_gpu_append_kv(G, &d, NULL, dk, KVRT_DTYPE_F32, dslot, 1, NULL);
		CHECKF(rg == -EINVAL, "GPU append with NULL k = %d", rg);
		rg = kvrt_gpu_append_kv(G, &d, dk, dk, KVRT_DTYPE_F32, NULL, 1, NULL);
		CHECKF(rg == -EINVAL, "GPU append with NULL slots = %d", rg);
		dev_sync();
		/* nothing was written by the failures */
		acache_compare(&c, "append errors leave the bf16 cache", 0);
	}
	dev_free(dk);
	dev_free(dslot);
	acache_free(&c);
	acache_free(&c8);
}

GPU_TESTS(gpu_append_tests,
	T(append_f16_bf16_bit_identical),
	T(append_fp8_matches_cpu),
	T(append_out_of_range_slots_skipped),
	T(append_errors_match_cpu));
