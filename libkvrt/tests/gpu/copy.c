// SPDX-License-Identifier: MIT
/* test_gpu: with a GPU: registration and kvrt_gpu_copy_blocks against the CPU kvrt_copy_blocks. */
#define _GNU_SOURCE
#include "harness.h"

/* ---- with a GPU: registration and copies ---------------------------------------------------- */

#define CP_LAYERS 3
#define CP_HEADS 2
#define CP_DIM 64
#define CP_TOKENS 16
#define CP_DEV_BLOCKS 40
#define CP_POOL_BLOCKS 48

struct pool {
	struct kvrt_space *sp;
	struct kvrt_layout lo;	/* block-major over the space */
	struct kvrt_block_array a;
	uint32_t ids[CP_POOL_BLOCKS];
	uint32_t nids;
	uint64_t block_bytes;
};

static int pool_open(struct pool *p, const char *name, enum kvrt_dtype dt, uint32_t nalloc)
{
	struct kvrt_layout lo;
	uint64_t bb, off = 0, i;
	int r;

	memset(p, 0, sizeof(*p));
	if (kvrt_layout_init(&lo, KVRT_LAYOUT_BLOCK_MAJOR, CP_LAYERS, CP_HEADS, CP_DIM, CP_TOKENS,
			     CP_POOL_BLOCKS, dt) ||
	    (dt == KVRT_DTYPE_FP8_E4M3 && kvrt_layout_inline_scales(&lo, &off)) ||
	    kvrt_layout_block_bytes(&lo, &bb))
		return -EINVAL;
	{
		struct kvrt_space_opts so = {
			.name = name, .flags = KVRT_SPACE_CREATE | KVRT_SPACE_EXCL, .mode = 0600,
			.block_bytes = (bb + 4095) / 4096 * 4096,
			.quota_bytes = (bb + 4095) / 4096 * 4096 * CP_POOL_BLOCKS,
		};

		r = kvrt_space_open(K, &so, &p->sp);
		if (r)
			return r;
		p->block_bytes = so.block_bytes;
	}
	p->lo = lo;
	r = kvrt_layout_for_space(&p->lo, p->sp);
	if (r)
		return r;
	r = nalloc ? kvrt_alloc_blocks(p->sp, nalloc, p->ids) : 0;
	if (r)
		return r;
	p->nids = nalloc;
	p->a = (struct kvrt_block_array){ &p->lo, kvrt_space_base(p->sp), NULL };
	if (dt == KVRT_DTYPE_FP8_E4M3)
		p->a.scales = (float *)((uint8_t *)p->a.base + off);
	for (i = 0; i < p->nids; i++) {
		uint8_t *blk = kvrt_block_addr(p->sp, p->ids[i]);
		uint64_t j;

		for (j = 0; j < p->block_bytes; j++)
			blk[j] = (uint8_t)rnd();
		if (dt == KVRT_DTYPE_FP8_E4M3)	/* finite scales (a NaN's payload could be quieted) */
			for (j = 0; j < 2 * CP_LAYERS * CP_HEADS; j++)
				((float *)(blk + off))[j] = (float)rnd_below(1000) / 64;
	}
	return 0;
}

static void pool_close(struct pool *p)
{
	kvrt_space_close(p->sp);
	memset(p, 0, sizeof(*p));
}

/* A host mirror of the pool's allocated blocks, laid out like the space. */
static uint8_t *pool_snapshot(const struct pool *p)
{
	uint8_t *m = calloc(CP_POOL_BLOCKS, p->block_bytes);
	uint32_t i;

	if (!m)
		exit(2);
	for (i = 0; i < p->nids; i++)
		memcpy(m + p->ids[i] * p->block_bytes, kvrt_block_addr(p->sp, p->ids[i]),
		       p->block_bytes);
	return m;
}

static size_t pool_diff(const struct pool *p, const uint8_t *m)
{
	uint32_t i;

	for (i = 0; i < p->nids; i++)
		if (memcmp(m + p->ids[i] * p->block_bytes, kvrt_block_addr(p->sp, p->ids[i]),
			   p->block_bytes))
			return i + 1;
	return 0;
}

/* An array in device memory (with a host twin of the same layout and bytes). */
struct darr {
	struct kvrt_layout lo;
	size_t bytes, sbytes;
	uint8_t *h;		/* host twin */
	float *hs;
	void *d, *ds;
	struct kvrt_block_array ha, da;
};

static int darr_make(struct darr *x, enum kvrt_layout_kind kind, enum kvrt_dtype dt)
{
	size_t i;

	memset(x, 0, sizeof(*x));
	if (kvrt_layout_init(&x->lo, kind, CP_LAYERS, CP_HEADS, CP_DIM, CP_TOKENS, CP_DEV_BLOCKS, dt))
		return -1;
	x->bytes = (size_t)CP_LAYERS * 2 * CP_DEV_BLOCKS * CP_TOKENS * CP_HEADS * CP_DIM *
		   kvrt_dtype_size(dt);
	x->h = xmalloc(x->bytes);
	for (i = 0; i < x->bytes; i++)
		x->h[i] = (uint8_t)rnd();
	if (dt == KVRT_DTYPE_FP8_E4M3) {
		x->sbytes = sizeof(float) * CP_LAYERS * 2 * CP_DEV_BLOCKS * CP_HEADS;
		x->hs = xmalloc(x->sbytes);
		for (i = 0; i < x->sbytes / 4; i++)
			x->hs[i] = (float)rnd_below(1000) / 64;
	}
	x->d = dev_dup(x->h, x->bytes);
	x->ds = x->sbytes ? dev_dup(x->hs, x->sbytes) : NULL;
	x->ha = (struct kvrt_block_array){ &x->lo, x->h, x->hs };
	x->da = (struct kvrt_block_array){ &x->lo, x->d, x->ds };
	return x->d && (!x->sbytes || x->ds) ? 0 : -1;
}

/* Refresh the host twin from the device. */
static int darr_pull(struct darr *x)
{
	if (dev_get(x->h, x->d, x->bytes))
		return -1;
	return x->sbytes ? dev_get(x->hs, x->ds, x->sbytes) : 0;
}

/* The device bytes equal the twin's (which the caller updated with the CPU). */
static bool darr_same(const struct darr *x, const char *what)
{
	uint8_t *g = xmalloc(x->bytes);
	float *gs = x->sbytes ? xmalloc(x->sbytes) : NULL;
	bool ok = !dev_get(g, x->d, x->bytes) && (!gs || !dev_get(gs, x->ds, x->sbytes));

	if (ok && memcmp(g, x->h, x->bytes)) {
		size_t i = 0;

		while (g[i] == x->h[i])
			i++;
		tap_failf("%s: device bytes differ from the CPU copy's at %zu", what, i);
		ok = false;
	}
	if (ok && gs && memcmp(gs, x->hs, x->sbytes)) {
		tap_failf("%s: device scales differ from the CPU copy's", what);
		ok = false;
	}
	free(g);
	free(gs);
	return ok;
}

static void darr_free(struct darr *x)
{
	free(x->h);
	free(x->hs);
	dev_free(x->d);
	dev_free(x->ds);
	memset(x, 0, sizeof(*x));
}

/* count random pairs: sources from src ids, distinct destinations from dst ids. */
static uint32_t make_pairs(struct kvrt_block_pair *pr, const uint32_t *sids, uint32_t ns,
			   const uint32_t *dids, uint32_t nd, uint32_t count)
{
	uint32_t *perm = xmalloc(sizeof(*perm) * nd), i;

	shuffle(perm, nd);
	if (count > nd)
		count = nd;
	for (i = 0; i < count; i++)
		pr[i] = (struct kvrt_block_pair){ .src = sids[rnd_below(ns)], .dst = dids[perm[i]] };
	free(perm);
	return count;
}

static const char *const method_name[] = { "AUTO", "BATCH", "KERNEL", "MEMCPY" };

/*
 * One GPU copy against the CPU's: dst is a pool (host) or a device array;
 * src the other or a device array.  Returns the GPU's errno.
 */
static int copy_check(enum kvrt_gpu_copy_method m, struct pool *dp, struct darr *dd,
		      struct pool *sp, struct darr *sd, uint32_t count, const char *what)
{
	static uint32_t devids[CP_DEV_BLOCKS];
	struct kvrt_block_pair pr[CP_DEV_BLOCKS];
	const struct kvrt_block_array *gdst = dp ? &dp->a : &dd->da, *gsrc = sp ? &sp->a : &sd->da;
	struct kvrt_block_array cdst, csrc;
	uint8_t *mirror = NULL;
	struct kvrt_layout mlo;
	uint32_t i, n;
	int rc, rg;

	for (i = 0; i < CP_DEV_BLOCKS; i++)
		devids[i] = i;
	n = make_pairs(pr, sp ? sp->ids : devids, sp ? sp->nids : CP_DEV_BLOCKS,
		       dp ? dp->ids : devids, dp ? dp->nids : CP_DEV_BLOCKS, count);
	/* the CPU's side: host twins; a pool destination gets a mirror */
	if (sd && darr_pull(sd))
		return -EIO;
	if (dd && darr_pull(dd))
		return -EIO;
	csrc = sp ? sp->a : sd->ha;
	if (dp) {
		mirror = pool_snapshot(dp);
		mlo = dp->lo;
		cdst = dp->a;
		cdst.layout = &mlo;
		cdst.base = mirror;
		if (dp->a.scales)
			cdst.scales = (float *)(mirror + ((uint8_t *)dp->a.scales -
							  (uint8_t *)dp->a.base));
	} else {
		cdst = dd->ha;
	}
	rc = kvrt_copy_blocks(K, &cdst, &csrc, pr, n, 0, NULL);
	CHECKF(!rc, "%s: CPU kvrt_copy_blocks = %d", what, rc);
	rg = kvrt_gpu_copy_blocks(G, gdst, gsrc, pr, n, m, NULL);
	if (rg == -ENOTSUP && m == KVRT_GPU_COPY_BATCH) {
		free(mirror);
		return rg;
	}
	CHECKF(!rg, "%s: kvrt_gpu_copy_blocks(%s) = %d", what, method_name[m], rg);
	if (!rg && !rc && !dev_sync()) {
		if (dp) {
			size_t bad = pool_diff(dp, mirror);

			CHECKF(!bad, "%s (%s): pool block %u differs from the CPU copy's", what,
			       method_name[m], bad ? dp->ids[bad - 1] : 0);
		} else {
			char w2[160];

			snprintf(w2, sizeof(w2), "%s (%s)", what, method_name[m]);
			darr_same(dd, w2);
		}
	}
	free(mirror);
	return rg;
}

static bool pools_registered;
static struct pool pool16, pool8;

static int copy_setup(void)
{
	int r;

	if (pools_registered)
		return 0;
	r = pool_open(&pool16, "test_gpu_bf16", KVRT_DTYPE_BF16, 32);
	if (!r)
		r = pool_open(&pool8, "test_gpu_fp8", KVRT_DTYPE_FP8_E4M3, 32);
	if (r) {
		tap_failf("copy pools: %d", r);
		return r;
	}
	if ((r = kvrt_gpu_register_space(G, pool16.sp)) ||
	    (r = kvrt_gpu_register_space(G, pool8.sp))) {
		tap_failf("kvrt_gpu_register_space = %d", r);
		return r;
	}
	pools_registered = true;
	return 0;
}

TEST(register_space_and_host)
{
	struct kvrt_gpu_info a, b;
	struct kvrt_gpu *g2 = NULL;
	struct pool p;
	size_t hb = 3 << 20;
	uint8_t *h = aligned_alloc(4096, hb);
	int r;

	REQUIRE(h);
	memset(h, 1, hb);
	REQUIRE(pool_open(&p, "test_gpu_reg", KVRT_DTYPE_BF16, 8) == 0);
	REQUIRE(kvrt_gpu_info(G, &a) == 0);
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space = %d", r);
	kvrt_gpu_info(G, &b);
	CHECKF(b.registered_bytes > a.registered_bytes, "registered_bytes %llu -> %llu",
	       (unsigned long long)a.registered_bytes, (unsigned long long)b.registered_bytes);
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space again = %d", r);
	/* the space grows: registering again takes the rest */
	r = kvrt_alloc_blocks(p.sp, 16, p.ids + 8);
	CHECKF(!r, "kvrt_alloc_blocks = %d", r);
	if (!r)
		p.nids = 24;
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space after growth = %d", r);
	/* another kvrt_gpu may not register it too */
	r = kvrt_gpu_open(K, GI.device, &g2);
	CHECKF(!r, "second kvrt_gpu_open = %d", r);
	if (!r) {
		CHECKF((r = kvrt_gpu_register_space(g2, p.sp)) == -EBUSY,
		       "register_space from a second kvrt_gpu = %d, want -EBUSY", r);
	}
	/* host ranges */
	CHECKF((r = kvrt_gpu_register_host(G, h + 1, 4096)) == -EINVAL,
	       "register_host(unaligned addr) = %d", r);
	CHECKF((r = kvrt_gpu_register_host(G, h, 4095)) == -EINVAL,
	       "register_host(unaligned size) = %d", r);
	CHECKF((r = kvrt_gpu_register_host(G, h, hb)) == 0, "register_host = %d", r);
	CHECKF((r = kvrt_gpu_unregister_host(G, h)) == 0, "unregister_host = %d", r);
	CHECKF((r = kvrt_gpu_unregister_host(G, h)) < 0, "unregister_host twice = %d", r);
	CHECKF((r = kvrt_gpu_unregister_space(G, p.sp)) == 0, "unregister_space = %d", r);
	kvrt_gpu_info(G, &b);
	CHECKF(b.registered_bytes == a.registered_bytes, "registered_bytes %llu after unregistering "
	       "everything, %llu before", (unsigned long long)b.registered_bytes,
	       (unsigned long long)a.registered_bytes);
	/* kvrt_gpu_close unregisters what is left */
	if (g2) {
		CHECKF((r = kvrt_gpu_register_space(g2, p.sp)) == 0,
		       "register_space from the second kvrt_gpu once free = %d", r);
		kvrt_gpu_close(g2);
		CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0,
		       "register_space after the other kvrt_gpu closed = %d", r);
		CHECKF((r = kvrt_gpu_unregister_space(G, p.sp)) == 0, "unregister_space = %d", r);
	}
	pool_close(&p);
	free(h);
}

static void copy_method(enum kvrt_gpu_copy_method m)
{
	struct darr lm16, bm16, lm8;
	size_t hb;
	uint8_t *h = NULL;
	char what[96];
	int r, i;

	memset(&lm16, 0, sizeof(lm16));
	memset(&bm16, 0, sizeof(bm16));
	memset(&lm8, 0, sizeof(lm8));
	if (copy_setup())
		return;
	if (darr_make(&lm16, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_BF16) ||
	    darr_make(&bm16, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_BF16) ||
	    darr_make(&lm8, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_FP8_E4M3))
		goto out;

	r = copy_check(m, &pool16, NULL, NULL, &lm16, 20, "offload layer-major device -> pool");
	if (r == -ENOTSUP && m == KVRT_GPU_COPY_BATCH) {
		static char why[160];

		CHECKF(!GI.batch_memcpy, "BATCH: -ENOTSUP, but info.batch_memcpy is 1");
		snprintf(why, sizeof(why), "BATCH: -ENOTSUP, driver %d has no cuMemcpyBatchAsync "
			 "(12.8+)", GI.driver_version);
		tap_skip(why);
		goto out;
	}
	if (m == KVRT_GPU_COPY_BATCH)
		CHECKF(GI.batch_memcpy, "BATCH worked, but info.batch_memcpy is 0");
	for (i = 0; i < 2; i++) {
		copy_check(m, NULL, &lm16, &pool16, NULL, 25, "fetch pool -> layer-major device");
		copy_check(m, &pool16, NULL, NULL, &bm16, 17, "offload block-major device -> pool");
		copy_check(m, NULL, &bm16, &pool16, NULL, 30, "fetch pool -> block-major device");
		copy_check(m, &pool8, NULL, NULL, &lm8, 20,
			   "offload fp8 layer-major (scales apart) -> pool (inline scales)");
		copy_check(m, NULL, &lm8, &pool8, NULL, 20, "fetch fp8 pool -> layer-major device");
		copy_check(m, NULL, &lm16, NULL, &bm16, 15, "device block-major -> layer-major");
		copy_check(m, NULL, &bm16, NULL, &lm16, 1, "device layer-major -> block-major, 1 block");
	}
	/* a malloc'd host array registered with kvrt_gpu_register_host, both ways */
	{
		struct kvrt_layout lo;
		struct kvrt_block_array ha, md;
		struct kvrt_block_pair pr[CP_DEV_BLOCKS];
		uint32_t ids[CP_DEV_BLOCKS], n, j;
		uint8_t *mirror;
		int rc;

		kvrt_layout_init(&lo, KVRT_LAYOUT_BLOCK_MAJOR, CP_LAYERS, CP_HEADS, CP_DIM, CP_TOKENS,
				 CP_DEV_BLOCKS, KVRT_DTYPE_BF16);
		hb = ((size_t)lo.block_stride * CP_DEV_BLOCKS + 4095) / 4096 * 4096;
		h = aligned_alloc(4096, hb);
		if (!h)
			goto out;
		for (j = 0; j < hb; j++)
			h[j] = (uint8_t)rnd();
		r = kvrt_gpu_register_host(G, h, hb);
		CHECKF(!r, "register_host = %d", r);
		if (r)
			goto out;
		for (j = 0; j < CP_DEV_BLOCKS; j++)
			ids[j] = j;
		ha = (struct kvrt_block_array){ &lo, h, NULL };
		mirror = xmalloc(hb);
		md = (struct kvrt_block_array){ &lo, mirror, NULL };
		n = make_pairs(pr, ids, CP_DEV_BLOCKS, ids, CP_DEV_BLOCKS, 22);
		if (!darr_pull(&lm16)) {
			memcpy(mirror, h, hb);
			rc = kvrt_copy_blocks(K, &md, &lm16.ha, pr, n, 0, NULL);
			r = kvrt_gpu_copy_blocks(G, &ha, &lm16.da, pr, n, m, NULL);
			CHECKF(!rc && !r, "device -> registered host array (%s): GPU %d, CPU %d",
			       method_name[m], r, rc);
			if (!r && !rc && !dev_sync())
				CHECKF(!memcmp(mirror, h, hb), "device -> registered host array (%s): "
				       "host bytes differ from the CPU copy's", method_name[m]);
		}
		n = make_pairs(pr, ids, CP_DEV_BLOCKS, ids, CP_DEV_BLOCKS, 22);
		if (!darr_pull(&lm16)) {
			rc = kvrt_copy_blocks(K, &lm16.ha, &ha, pr, n, 0, NULL);
			r = kvrt_gpu_copy_blocks(G, &lm16.da, &ha, pr, n, m, NULL);
			CHECKF(!rc && !r, "registered host array -> device (%s): GPU %d, CPU %d",
			       method_name[m], r, rc);
			snprintf(what, sizeof(what), "registered host array -> device (%s)",
				 method_name[m]);
			if (!r && !rc && !dev_sync())
				darr_same(&lm16, what);
		}
		free(mirror);
		r = kvrt_gpu_unregister_host(G, h);
		CHECKF(!r, "unregister_host = %d", r);
	}
out:
	darr_free(&lm16);
	darr_free(&bm16);
	darr_free(&lm8);
	free(h);
}

/*
 * A space registered before its blocks had pages (an engine registers it
 * once, at start): the first copy into blocks backed later registers them
 * (the copy kernel would fault on unregistered memory and end the
 * context), and the blocks hold what the CPU's copy gives.
 */
TEST(copy_into_blocks_backed_after_registration)
{
	struct kvrt_gpu_info a, b;
	struct darr s;
	struct pool p;
	uint64_t i, j;
	int r;

	REQUIRE(pool_open(&p, "test_gpu_late", KVRT_DTYPE_BF16, 0) == 0);
	REQUIRE(darr_make(&s, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_BF16) == 0);
	REQUIRE(kvrt_gpu_info(G, &a) == 0);
	CHECKF((r = kvrt_gpu_register_space(G, p.sp)) == 0, "register_space, no block backed = %d",
	       r);
	r = kvrt_alloc_blocks(p.sp, 8, p.ids);
	CHECKF(!r, "kvrt_alloc_blocks = %d", r);
	if (!r) {
		p.nids = 8;
		for (i = 0; i < p.nids; i++) {
			uint8_t *blk = kvrt_block_addr(p.sp, p.ids[i]);

			for (j = 0; j < p.block_bytes; j++)
				blk[j] = (uint8_t)rnd();
		}
		r = copy_check(KVRT_GPU_COPY_KERNEL, &p, NULL, NULL, &s, 8, "late blocks");
		CHECKF(!r, "kernel copy into blocks backed after registration = %d", r);
		kvrt_gpu_info(G, &b);
		CHECKF(b.registered_bytes >= a.registered_bytes + 8 * p.block_bytes,
		       "registered_bytes %llu -> %llu: the copy did not register the new blocks",
		       (unsigned long long)a.registered_bytes,
		       (unsigned long long)b.registered_bytes);
	}
	CHECKF((r = kvrt_gpu_unregister_space(G, p.sp)) == 0, "unregister_space = %d", r);
	darr_free(&s);
	pool_close(&p);
}

TEST(copy_method_auto)
{
	struct kvrt_gpu_copy_calib c;
	uint32_t i;
	int r;

	copy_method(KVRT_GPU_COPY_AUTO);
	r = kvrt_gpu_copy_calibration(G, &c);
	CHECKF(!r, "kvrt_gpu_copy_calibration = %d", r);
	if (r)
		return;
	tap_diag("AUTO: kernel_copy_max %llu bytes (source %u; buffer %llu bytes, %lld on huge "
		 "pages)", (unsigned long long)c.kernel_copy_max, c.source,
		 (unsigned long long)c.buffer_bytes, (long long)c.buffer_thp_bytes);
	for (i = 0; i < c.num_sizes; i++)
		tap_diag("AUTO calibration: %llu-byte runs: kernel %.2f GB/s, large %.2f GB/s",
			 (unsigned long long)c.sizes[i].run_bytes, c.sizes[i].kernel_gbps,
			 c.sizes[i].large_gbps);
}

TEST(copy_method_batch)
{
	copy_method(KVRT_GPU_COPY_BATCH);
}

TEST(copy_method_kernel)
{
	copy_method(KVRT_GPU_COPY_KERNEL);
}

TEST(copy_method_memcpy)
{
	copy_method(KVRT_GPU_COPY_MEMCPY);
}

/* Every invalid copy: the GPU's errno is the CPU's, and nothing moves. */
TEST(copy_errors_match_cpu)
{
	struct darr s, d, s8, d8;
	struct kvrt_block_pair p[2] = { { 0, 1 }, { 1, 2 } }, dup[2] = { { 0, 1 }, { 1, 1 } };
	struct kvrt_block_pair oobs = { CP_DEV_BLOCKS, 0 }, oobd = { 0, CP_DEV_BLOCKS };
	struct kvrt_block_pair self[2] = { { 0, 1 }, { 1, 2 } };
	struct kvrt_layout bad;
	struct kvrt_block_array hs, hd, gs, gd;
	int rc, rg, f;

	memset(&s, 0, sizeof(s));
	memset(&d, 0, sizeof(d));
	memset(&s8, 0, sizeof(s8));
	memset(&d8, 0, sizeof(d8));
	if (darr_make(&s, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_F16) ||
	    darr_make(&d, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_F16) ||
	    darr_make(&s8, KVRT_LAYOUT_BLOCK_MAJOR, KVRT_DTYPE_FP8_E4M3) ||
	    darr_make(&d8, KVRT_LAYOUT_LAYER_MAJOR, KVRT_DTYPE_FP8_E4M3))
		goto out;

#define SAME(what, HD, HS, GD, GS, PAIRS, N, M)                                                \
	do {                                                                                   \
		rc = kvrt_copy_blocks(K, HD, HS, PAIRS, N, 0, NULL);                           \
		rg = kvrt_gpu_copy_blocks(G, GD, GS, PAIRS, N, M, NULL);                       \
		CHECKF(rc == rg, "copy %s: GPU %d, CPU %d", what, rg, rc);                     \
	} while (0)
	for (int m = 0; m < 4; m++) {
		if (m == KVRT_GPU_COPY_BATCH && !GI.batch_memcpy)
			continue;
		SAME("valid", &d.ha, &s.ha, &d.da, &s.da, p, 2, m);
		SAME("NULL dst", NULL, &s.ha, NULL, &s.da, p, 2, m);
		SAME("NULL src", &d.ha, NULL, &d.da, NULL, p, 2, m);
		SAME("NULL pairs", &d.ha, &s.ha, &d.da, &s.da, NULL, 2, m);
		SAME("count 0", &d.ha, &s.ha, &d.da, &s.da, NULL, 0, m);
		hd = d.ha, gd = d.da;
		hd.layout = gd.layout = NULL;
		SAME("NULL layout", &hd, &s.ha, &gd, &s.da, p, 2, m);
		hd = d.ha, gd = d.da;
		hd.base = gd.base = NULL;
		SAME("NULL base", &hd, &s.ha, &gd, &s.da, p, 2, m);
		for (f = 0; f < 6; f++) {	/* 5 geometries that differ, then one too large */
			bad = d.lo;
			switch (f) {
			case 0: bad.num_layers = 1; break;
			case 1: bad.num_kv_heads = 1; break;
			case 2: bad.head_dim = 32; break;
			case 3: bad.block_tokens = 8; break;
			case 4: bad.kv_dtype = KVRT_DTYPE_BF16; break;
			default: bad.layer_stride = INT64_MAX; break;
			}
			hd = d.ha, gd = d.da;
			hd.layout = gd.layout = &bad;
			SAME(f < 5 ? "geometry mismatch" : "layout extent overflows", &hd, &s.ha, &gd,
			     &s.da, p, 2, m);
		}
		SAME("src id >= num_blocks", &d.ha, &s.ha, &d.da, &s.da, &oobs, 1, m);
		SAME("dst id >= num_blocks", &d.ha, &s.ha, &d.da, &s.da, &oobd, 1, m);
		SAME("a destination twice", &d.ha, &s.ha, &d.da, &s.da, dup, 2, m);
		SAME("a block both source and destination", &d.ha, &d.ha, &d.da, &d.da, self, 2, m);
		hd = d8.ha, gd = d8.da;
		hd.scales = gd.scales = NULL;
		SAME("fp8 dst without scales", &hd, &s8.ha, &gd, &s8.da, p, 2, m);
		hs = s8.ha, gs = s8.da;
		hs.scales = gs.scales = NULL;
		SAME("fp8 src without scales", &d8.ha, &hs, &d8.da, &gs, p, 2, m);
	}
#undef SAME
	rg = kvrt_gpu_copy_blocks(G, &d.da, &s.da, p, 2, (enum kvrt_gpu_copy_method)7, NULL);
	CHECKF(rg == -EINVAL, "copy with method 7 = %d, want -EINVAL", rg);
	dev_sync();
	/* the valid copies went through the twins too: the device must match them */
	darr_same(&d, "device array after the error cases");
	darr_same(&d8, "fp8 device array after the error cases");
out:
	darr_free(&s);
	darr_free(&d);
	darr_free(&s8);
	darr_free(&d8);
}

void copy_teardown(void)
{
	if (pools_registered) {
		kvrt_gpu_unregister_space(G, pool16.sp);
		kvrt_gpu_unregister_space(G, pool8.sp);
	}
	pool_close(&pool16);
	pool_close(&pool8);
}

GPU_TESTS(gpu_copy_tests,
	T(register_space_and_host),
	T(copy_into_blocks_backed_after_registration),
	T(copy_method_auto),
	T(copy_method_batch),
	T(copy_method_kernel),
	T(copy_method_memcpy),
	T(copy_errors_match_cpu));
