// SPDX-License-Identifier: GPL-2.0
/*
 * bench_gpu_copy.c: kvbench gpu-copy, block copies between the GPU and a
 * host pool, and what registering the pool costs.
 *
 *   kvbench gpu-copy [--json] [--device N] [--mib M] [--batch-mib B]
 *                    [--reg-gib G] [common options]
 *
 * The host side is a space of the embedded backend (kvrt_open with
 * KVRT_BACKEND_EMBEDDED, kvrt_space_open), --mib MiB (default 1024) of
 * blocks, every block allocated and filled, registered with
 * kvrt_gpu_register_space(); the device side an array of as many blocks
 * in device memory.  Blocks are block-major (bf16, head dim 128, 4 KV
 * heads, 16 tokens: 32 KiB per layer) with 1, 8 and 64 layers: 32 KiB,
 * 256 KiB and 2 MiB per block, one contiguous run each.  One call copies
 * --batch-mib MiB (default 256: 8192, 1024 and 128 blocks) between random
 * scattered block pairs, with each method of kvrt_gpu_copy_blocks():
 *
 *   offload_blockNk_METHOD   device -> pool (GPU to host)
 *   fetch_blockNk_METHOD     pool -> device (host to GPU)
 *   offload_lm_block2048k_METHOD, fetch_lm_block2048k_METHOD
 *                            the same with a layer-major device array (as
 *                            vLLM keeps per-layer caches): every 2 MiB
 *                            block is 128 runs of 16 KiB on the device side
 *
 * METHOD is auto, batch (skipped, with a note, where the driver has no
 * cuMemcpyBatchAsync: -ENOTSUP), kernel or memcpy.  value = GB/s of block
 * bytes moved per call (1 GB = 1e9 bytes; calls queued back to back on the
 * default stream, then kvrt_gpu_sync); limit = one kvrt_gpu_memcpy() of
 * --batch-mib MiB in the same direction between a host buffer registered
 * with kvrt_gpu_register_host() and device memory, measured between the
 * repetitions (the pinned cuMemcpy the copies cannot beat);
 * ratio = value / limit.  After the repetitions three copied blocks are
 * compared with their sources.
 *
 * Registration: register_space_KIND: value = milliseconds per GiB for
 * kvrt_gpu_register_space() of an embedded space of --reg-gib GiB
 * (default 4), every 2 MiB block allocated and touched; KIND says what
 * backs it per kvrt_space_mem_info(): hugetlb (MAP_HUGETLB pages), thp
 * (transparent huge pages) or 4k (neither), more than half of it, and a
 * note gives the whole summary.  limit = milliseconds per GiB for
 * kvrt_gpu_register_host() of as much malloc'd memory held on 4 KiB pages
 * (madvise MADV_NOHUGEPAGE), touched first; ratio = limit / value (a cost:
 * above 1 when the space registers faster).  Each repetition registers
 * and unregisters once; only the registration is timed.
 *
 * AUTO's calibration, reported when the first AUTO case runs (from
 * kvrt_gpu_copy_calibration(); its rates are its own, not this run's):
 *
 *   auto_calib_runNk     value = GB/s of the copy kernel moving a 16 MiB
 *                        THP-advised registered host buffer to the device
 *                        in scattered N KiB runs; limit = the batched memcpy
 *                        (memcpy per run without cuMemcpyBatchAsync) of the
 *                        same runs; ratio > 1: the kernel was faster
 *   auto_threshold_kib   value = the threshold picked (kvrt_gpu_info's
 *                        kernel_copy_max) in KiB; limit = the largest run
 *                        size calibrated; a note gives its source and how
 *                        much of the buffer was on huge pages
 *
 * Timing: CLOCK_MONOTONIC; value and limit repetitions alternate, each at
 * least --rep-time seconds (default 0.1), medians of --reps (default 5).
 * Without a usable GPU (kvrt_gpu_probe) it prints the reason on stderr
 * and exits with status 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvrt.h"
#include "data.h"
#include "report.h"

#define HEAD_DIM 128
#define KV_HEADS 4
#define BLOCK_TOKENS 16
#define LAYER_BYTES (2ULL * BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2)	/* 32 KiB */

struct gcopy_opts {
	struct kvb_opts c;
	int device;
	unsigned long mib, batch_mib, reg_gib;
};

static const struct kvb_opts gcopy_defaults = {
	.bench = "gpu-copy", .reps = 5, .rep_time = 0.1,
};

static const uint32_t layers_per_block[] = { 1, 8, 64 };
static const enum kvrt_gpu_copy_method methods[] = {
	KVRT_GPU_COPY_AUTO, KVRT_GPU_COPY_BATCH, KVRT_GPU_COPY_KERNEL, KVRT_GPU_COPY_MEMCPY,
};
static const char *const method_name[] = { "auto", "batch", "kernel", "memcpy" };

static const char gcopy_about[] =
	"Block copies with kvrt_gpu_copy_blocks() between device memory and a\n"
	"registered embedded-backend space (offload: device -> pool, fetch: pool ->\n"
	"device), 32 KiB, 256 KiB and 2 MiB blocks, per method (auto, batch, kernel,\n"
	"memcpy), against one pinned kvrt_gpu_memcpy() of the same bytes; and the cost\n"
	"of kvrt_gpu_register_space() per GiB against registering malloc'd 4 KiB-page\n"
	"memory.\n";

static void fill_random(void *p, size_t bytes, uint64_t seed)
{
	uint64_t *w = p;
	size_t i;

	seed |= 1;
	for (i = 0; i < bytes / 8; i++)
		w[i] = kvb_xorshift(&seed);
}

static void *map_anon(size_t bytes, int advice)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, advice);
	return p;
}

struct gc {
	const struct gcopy_opts *o;
	struct kvrt *k;
	struct kvrt_gpu *g;
	struct kvrt_gpu_info info;
	/* the limit: a registered host buffer and a device buffer of batch bytes */
	void *lim_host, *lim_dev;
	size_t batch_bytes;
	bool batch_ok;
	bool auto_noted;	/* the calibrated AUTO threshold was reported */
};

static int fail_ret(const struct gc *x, const char *what, int ret)
{
	(void)x;
	fprintf(stderr, "kvbench gpu-copy: %s: %s\n", what, strerror(-ret));
	return ret;
}

struct copy_set {
	const struct kvrt_block_array *dst, *src;
	struct kvrt_block_pair *pairs;
	uint32_t count;
	enum kvrt_gpu_copy_method m;
};

/* A side of a copy case: the pinned memcpy limit, or the set's copies. */
struct copy_side {
	struct gc *x;
	const struct copy_set *s;
	bool to_host;		/* the limit's direction */
};

/* n synchronous memcpys of the limit's batch. */
static int run_limit(void *ctx, unsigned long n)
{
	const struct copy_side *c = ctx;
	struct gc *x = c->x;
	int ret = 0;

	while (n-- && !ret)
		ret = c->to_host ? kvrt_gpu_memcpy(x->g, x->lim_host, x->lim_dev, x->batch_bytes) :
				   kvrt_gpu_memcpy(x->g, x->lim_dev, x->lim_host, x->batch_bytes);
	return ret;
}

/* n calls, each followed by a sync. */
static int run_copies(void *ctx, unsigned long n)
{
	const struct copy_side *c = ctx;
	const struct copy_set *s = c->s;
	int ret = 0;

	while (n-- && !ret) {
		ret = kvrt_gpu_copy_blocks(c->x->g, s->dst, s->src, s->pairs, s->count, s->m, NULL);
		if (!ret)
			ret = kvrt_gpu_sync(c->x->g, NULL);
	}
	return ret;
}

/* Three pairs: the destination block's bytes (device or host) equal the source's. */
static int verify(struct gc *x, const struct copy_set *s, size_t block_bytes)
{
	uint32_t at[3] = { 0, s->count / 2, s->count - 1 }, i;
	uint8_t *a = malloc(block_bytes), *b = malloc(block_bytes);
	int ret = a && b ? 0 : -ENOMEM;

	for (i = 0; i < 3 && !ret; i++) {
		const struct kvrt_block_pair *p = &s->pairs[at[i]];
		const struct kvrt_layout *dl = s->dst->layout, *sl = s->src->layout;

		/* block-major on both sides in the checked cases: one run per block */
		ret = kvrt_gpu_memcpy(x->g, a, (uint8_t *)s->dst->base + (size_t)p->dst * dl->block_stride,
				      block_bytes);
		if (!ret)
			ret = kvrt_gpu_memcpy(x->g, b, (uint8_t *)s->src->base +
					      (size_t)p->src * sl->block_stride, block_bytes);
		if (!ret && memcmp(a, b, block_bytes))
			ret = -EIO;
	}
	free(a);
	free(b);
	return ret;
}

/* One block size's pool, device array and pairs, for bench_size()'s cases. */
struct size_run {
	struct gc *x;
	const struct kvb_report *rep;
	uint32_t layers;
	unsigned int *step, steps;
	uint64_t block_bytes, seed;
	uint32_t nblocks, count;	/* blocks of each side; pairs per call */
	uint32_t *ids, *perm;
	struct kvrt_layout pool_lo, dev_bm, dev_lm;
	struct kvrt_block_array pool, dbm, dlm;
	struct kvrt_block_pair *off_pairs, *fetch_pairs;
	struct kvrt_space *sp;
	void *dev;
	char sname[64];
};

/* The space's blocks, allocated and filled. */
static int size_fill_pool(struct size_run *r)
{
	struct gc *x = r->x;
	uint32_t i;
	int ret = 0;

	r->ids = malloc(sizeof(*r->ids) * r->nblocks);
	r->perm = malloc(sizeof(*r->perm) * r->nblocks);
	r->off_pairs = malloc(sizeof(*r->off_pairs) * r->count);
	r->fetch_pairs = malloc(sizeof(*r->fetch_pairs) * r->count);
	if (!r->ids || !r->perm || !r->off_pairs || !r->fetch_pairs)
		return -ENOMEM;
	for (i = 0; i < r->nblocks && !ret; i += KVRT_MAX_BATCH) {
		uint32_t n = r->nblocks - i < KVRT_MAX_BATCH ? r->nblocks - i : KVRT_MAX_BATCH;

		ret = kvrt_alloc_blocks(r->sp, n, r->ids + i);
	}
	if (ret)
		return fail_ret(x, "kvrt_alloc_blocks", ret);
	kvb_progress(&x->o->c, *r->step, r->steps, "filling the pool");
	for (i = 0; i < r->nblocks; i++)
		fill_random(kvrt_block_addr(r->sp, r->ids[i]), r->block_bytes, r->seed + i);
	return 0;
}

/* The layouts, the space registered, the device array as a copy of the pool,
 * and the random pairs of each direction. */
static int size_setup_device(struct size_run *r)
{
	struct gc *x = r->x;
	uint32_t i, nblocks = r->nblocks;
	uint64_t perm_seed;
	int ret;

	ret = kvrt_layout_init(&r->pool_lo, KVRT_LAYOUT_BLOCK_MAJOR, r->layers, KV_HEADS, HEAD_DIM,
			       BLOCK_TOKENS, nblocks, KVRT_DTYPE_BF16);
	if (!ret)
		ret = kvrt_layout_for_space(&r->pool_lo, r->sp);
	if (!ret)
		ret = kvrt_layout_init(&r->dev_bm, KVRT_LAYOUT_BLOCK_MAJOR, r->layers, KV_HEADS,
				       HEAD_DIM, BLOCK_TOKENS, nblocks, KVRT_DTYPE_BF16);
	if (!ret)
		ret = kvrt_layout_init(&r->dev_lm, KVRT_LAYOUT_LAYER_MAJOR, r->layers, KV_HEADS,
				       HEAD_DIM, BLOCK_TOKENS, nblocks, KVRT_DTYPE_BF16);
	if (ret)
		return fail_ret(x, "layouts", ret);
	ret = kvrt_gpu_register_space(x->g, r->sp);
	if (ret)
		return fail_ret(x, "kvrt_gpu_register_space", ret);
	ret = kvrt_gpu_alloc(x->g, (size_t)r->block_bytes * nblocks, &r->dev);
	if (ret)
		return fail_ret(x, "device array", ret);
	r->pool = (struct kvrt_block_array){ &r->pool_lo, kvrt_space_base(r->sp), NULL };
	r->dbm = (struct kvrt_block_array){ &r->dev_bm, r->dev, NULL };
	r->dlm = (struct kvrt_block_array){ &r->dev_lm, r->dev, NULL };
	/* the device array starts as a copy of the pool, in place */
	for (i = 0; i < nblocks && !ret; i++)
		ret = kvrt_gpu_memcpy(x->g, (uint8_t *)r->dev + (size_t)i * r->block_bytes,
				      kvrt_block_addr(r->sp, i), r->block_bytes);
	/* random scattered pairs: distinct destinations, distinct sources */
	perm_seed = r->seed * 3;
	kvb_shuffle(r->perm, nblocks, &perm_seed);
	for (i = 0; i < r->count; i++)
		r->off_pairs[i] = (struct kvrt_block_pair){ .src = r->perm[i],
							    .dst = r->ids[r->perm[nblocks - 1 - i]] };
	perm_seed = r->seed * 5;
	kvb_shuffle(r->perm, nblocks, &perm_seed);
	for (i = 0; i < r->count; i++)
		r->fetch_pairs[i] = (struct kvrt_block_pair){ .src = r->ids[r->perm[i]],
							      .dst = r->perm[nblocks - 1 - i] };
	return ret;
}

/* What AUTO's first-use calibration measured, and its threshold (lines). */
static void report_calibration(struct gc *x, const struct kvb_report *rep)
{
	const struct kvb_opts *c = &x->o->c;
	struct kvrt_gpu_copy_calib cal;
	char name[64];
	uint32_t i;

	if (kvrt_gpu_copy_calibration(x->g, &cal))
		return;
	kvb_note(c, "auto: the copy kernel for runs up to %llu bytes (%s; buffer of %llu bytes, "
		 "%lld on huge pages)", (unsigned long long)cal.kernel_copy_max,
		 cal.source == KVRT_GPU_CALIB_MEASURED ? "calibrated at first use" :
		 cal.source == KVRT_GPU_CALIB_ENV ? "$KVRT_GPU_KERNEL_COPY_MAX" :
		 cal.source == KVRT_GPU_CALIB_NO_KERNEL ? "no kernel copies here" :
		 "calibration failed", (unsigned long long)cal.buffer_bytes,
		 (long long)cal.buffer_thp_bytes);
	for (i = 0; i < cal.num_sizes; i++) {
		snprintf(name, sizeof(name), "auto_calib_run%lluk",
			 (unsigned long long)(cal.sizes[i].run_bytes >> 10));
		kvb_report(rep, name, cal.sizes[i].kernel_gbps,
			   "GB/s H2D, copy kernel (ratio = value/limit)", cal.sizes[i].large_gbps,
			   x->batch_ok ? "GB/s H2D, batched memcpy, same runs" :
			   "GB/s H2D, memcpy per run, same runs");
	}
	if (cal.num_sizes)
		kvb_report(rep, "auto_threshold_kib", cal.kernel_copy_max / 1024.0,
			   "KiB: AUTO's kernel runs up to (ratio = value/limit)",
			   cal.sizes[cal.num_sizes - 1].run_bytes / 1024.0,
			   "KiB: the largest run calibrated");
}

/*
 * One case: method methods[mi], device to pool (dir 0) or back (1), on the
 * block-major device array (pass 0, then verified) or the layer-major one.
 * 0 also when skipped; an error is reported here.
 */
static int size_case(struct size_run *r, int pass, unsigned int mi, int dir)
{
	struct gc *x = r->x;
	const struct kvb_opts *c = &x->o->c;
	const struct kvrt_block_array *darr = pass ? &r->dlm : &r->dbm;
	struct copy_set s = {
		.dst = dir ? darr : &r->pool, .src = dir ? &r->pool : darr,
		.pairs = dir ? r->fetch_pairs : r->off_pairs, .count = r->count,
		.m = methods[mi],
	};
	struct copy_side vside = { .x = x, .s = &s };
	struct copy_side lside = { .x = x, .to_host = !dir };
	struct kvb_case m = {
		.value = { .run = run_copies, .ctx = &vside,
			   .units = (double)r->count * r->block_bytes },
		.limit = { .run = run_limit, .ctx = &lside, .units = (double)x->batch_bytes },
		.per_call = true,
	};
	char name[64], unit[96];
	double v, l;
	int ret;

	snprintf(name, sizeof(name), "%s%s_block%uk_%s", dir ? "fetch" : "offload",
		 pass ? "_lm" : "", (unsigned int)(r->block_bytes >> 10), method_name[mi]);
	kvb_progress(c, ++*r->step, r->steps, name);
	if (s.m == KVRT_GPU_COPY_BATCH && !x->batch_ok)
		return 0;
	/* warm: first use (AUTO calibrates), page tables */
	ret = kvrt_gpu_copy_blocks(x->g, s.dst, s.src, s.pairs, s.count, s.m, NULL);
	if (ret == -ENOTSUP && s.m == KVRT_GPU_COPY_BATCH) {
		kvb_note(c, "batch cases skipped: kvrt_gpu_copy_blocks says -ENOTSUP "
			 "(driver %d, cuMemcpyBatchAsync needs 12.8)", x->info.driver_version);
		x->batch_ok = false;
		return 0;
	}
	if (!ret)
		ret = kvrt_gpu_sync(x->g, NULL);
	if (!ret && s.m == KVRT_GPU_COPY_AUTO && !x->auto_noted) {
		x->auto_noted = true;
		report_calibration(x, r->rep);
	}
	if (!ret)
		ret = kvb_measure(c, &m, &v, &l);
	if (!ret && !pass) {
		ret = verify(x, &s, r->block_bytes);
		if (ret == -EIO)
			fprintf(stderr, "kvbench gpu-copy: %s: a copied block differs from its "
				"source\n", name);
	}
	if (ret) {
		if (ret != -EIO)
			fail_ret(x, name, ret);
		return ret;
	}
	v = 1 / v / 1e9;
	l = 1 / l / 1e9;
	snprintf(unit, sizeof(unit), "GB/s one pinned %s memcpy of %lu MiB", dir ? "H2D" : "D2H",
		 x->o->batch_mib);
	kvb_report(r->rep, name, v, "GB/s block bytes copied (ratio = value/limit)", l, unit);
	return 0;
}

/* One block size: every method, both directions. */
static int bench_size(struct gc *x, const struct kvb_report *rep, uint32_t layers, unsigned int *step,
		      unsigned int steps)
{
	struct size_run r = {
		.x = x, .rep = rep, .layers = layers, .step = step, .steps = steps,
		.block_bytes = layers * LAYER_BYTES, .seed = 0x1234567ULL + layers,
	};
	struct kvrt_space_opts so = { .flags = KVRT_SPACE_CREATE | KVRT_SPACE_EXCL, .mode = 0600 };
	unsigned int mi;
	int ret, pass, dir;

	r.nblocks = (uint32_t)(((uint64_t)x->o->mib << 20) / r.block_bytes);
	r.count = (uint32_t)(x->batch_bytes / r.block_bytes);
	so.block_bytes = r.block_bytes;
	so.quota_bytes = r.block_bytes * r.nblocks;
	snprintf(r.sname, sizeof(r.sname), "kvbench-gpu-copy-%u-%d", layers, (int)getpid());
	so.name = r.sname;
	ret = kvrt_space_open(x->k, &so, &r.sp);
	if (ret)
		return fail_ret(x, "kvrt_space_open", ret);
	ret = size_fill_pool(&r);
	if (!ret)
		ret = size_setup_device(&r);
	/* the layer-major device array only for the largest blocks */
	for (pass = 0; pass < (layers == 64 ? 2 : 1) && !ret; pass++)
		for (mi = 0; mi < 4 && !ret; mi++)
			for (dir = 0; dir < 2 && !ret; dir++)
				ret = size_case(&r, pass, mi, dir);
	kvrt_gpu_free(x->g, r.dev);
	kvrt_gpu_unregister_space(x->g, r.sp);
	kvrt_space_close(r.sp);
	free(r.ids);
	free(r.perm);
	free(r.off_pairs);
	free(r.fetch_pairs);
	return ret;
}

/* Registration cost: an embedded space against malloc'd 4 KiB pages. */
static int bench_register(struct gc *x, const struct kvb_report *rep)
{
	const struct kvb_opts *c = &x->o->c;
	uint64_t bytes = (uint64_t)x->o->reg_gib << 30, block = 2ULL << 20;
	uint32_t nblocks = (uint32_t)(bytes / block), i, *ids = malloc(sizeof(uint32_t) * (bytes / block));
	struct kvrt_space_opts so = { .flags = KVRT_SPACE_CREATE | KVRT_SPACE_EXCL, .mode = 0600,
				      .block_bytes = block, .quota_bytes = bytes };
	struct kvrt_space *sp = NULL;
	struct kvrt_mem_info mi;
	double vs[KVB_MAX_REPS], ls[KVB_MAX_REPS], t0;
	const char *kind;
	char sname[64], name[64], unit[128];
	uint8_t *plain = NULL;
	unsigned int r;
	int ret;

	if (!ids)
		return -ENOMEM;
	snprintf(sname, sizeof(sname), "kvbench-gpu-register-%d", (int)getpid());
	so.name = sname;
	ret = kvrt_space_open(x->k, &so, &sp);
	if (ret) {
		free(ids);
		return fail_ret(x, "kvrt_space_open (registration)", ret);
	}
	for (i = 0; i < nblocks && !ret; i += KVRT_MAX_BATCH)
		ret = kvrt_alloc_blocks(sp, nblocks - i < KVRT_MAX_BATCH ? nblocks - i : KVRT_MAX_BATCH,
					ids + i);
	if (ret) {
		fail_ret(x, "kvrt_alloc_blocks (registration)", ret);
		goto out;
	}
	for (i = 0; i < nblocks; i++)
		memset(kvrt_block_addr(sp, ids[i]), 1, block);
	ret = kvrt_space_mem_info(sp, &mi);
	if (ret) {
		fail_ret(x, "kvrt_space_mem_info", ret);
		goto out;
	}
	kind = mi.hugetlb_bytes * 2 > mi.backed_bytes ? "hugetlb" :
	       mi.thp_bytes * 2 > mi.backed_bytes ? "thp" : "4k";
	kvb_note(c, "registration: space of %lu GiB: %s", x->o->reg_gib, mi.summary);
	plain = map_anon(bytes, MADV_NOHUGEPAGE);
	if (!plain) {
		ret = -ENOMEM;
		fail_ret(x, "mapping the 4 KiB-page buffer", ret);
		goto out;
	}
	memset(plain, 1, bytes);
	for (r = 0; r < c->reps && !ret; r++) {
		t0 = kvb_now_s();
		ret = kvrt_gpu_register_host(x->g, plain, bytes);
		ls[r] = kvb_now_s() - t0;
		if (!ret)
			ret = kvrt_gpu_unregister_host(x->g, plain);
		if (ret) {
			fail_ret(x, "kvrt_gpu_register_host", ret);
			break;
		}
		t0 = kvb_now_s();
		ret = kvrt_gpu_register_space(x->g, sp);
		vs[r] = kvb_now_s() - t0;
		if (!ret)
			ret = kvrt_gpu_unregister_space(x->g, sp);
		if (ret)
			fail_ret(x, "kvrt_gpu_register_space", ret);
	}
	if (!ret) {
		double gib = (double)bytes / (1ULL << 30);

		snprintf(name, sizeof(name), "register_space_%s", kind);
		snprintf(unit, sizeof(unit),
			 "ms per GiB kvrt_gpu_register_space, %s-backed space (ratio = limit/value)", kind);
		kvb_report(rep, name, kvb_median(vs, c->reps) * 1e3 / gib, unit,
			   kvb_median(ls, c->reps) * 1e3 / gib,
			   "ms per GiB kvrt_gpu_register_host, malloc'd 4 KiB pages");
	}
out:
	if (plain)
		munmap(plain, bytes);
	kvrt_space_close(sp);
	free(ids);
	return ret;
}

static int bench(const struct gcopy_opts *o)
{
	const struct kvb_opts *c = &o->c;
	struct kvb_report rate = { .o = c, .ratio = KVB_RATE, .name_w = 30, .num_w = 10,
				   .unit_w = 40, .ratio_w = 7 };
	struct kvb_report cost = rate;
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	struct gc x = { .o = o };
	unsigned int i, step = 0, steps = 3 * 8 + 8;
	char why[512];
	int ret;

	cost.ratio = KVB_COST;
	ret = kvrt_gpu_probe(why, sizeof(why));
	if (ret) {
		fprintf(stderr, "kvbench gpu-copy: no usable GPU: %s\n", why);
		return 1;
	}
	ret = kvrt_open(&x.k, &oo);
	if (ret) {
		fail_ret(&x, "kvrt_open", ret);
		return 1;
	}
	ret = kvrt_gpu_open(x.k, o->device, &x.g);
	if (ret) {
		fprintf(stderr, "kvbench gpu-copy: kvrt_gpu_open(%d): %s\n", o->device, strerror(-ret));
		kvrt_close(x.k);
		return 1;
	}
	kvrt_gpu_info(x.g, &x.info);
	x.batch_ok = true;
	kvb_note(c, "%s (driver %d, cuMemcpyBatchAsync %s); %s", x.info.name, x.info.driver_version,
		 x.info.batch_memcpy ? "yes" : "no", kvrt_backend_info(x.k));
	x.batch_bytes = (size_t)o->batch_mib << 20;
	x.lim_host = map_anon(x.batch_bytes, MADV_HUGEPAGE);
	if (!x.lim_host) {
		ret = fail_ret(&x, "mapping the limit's host buffer", -ENOMEM);
		goto out;
	}
	fill_random(x.lim_host, x.batch_bytes, 99);
	ret = kvrt_gpu_register_host(x.g, x.lim_host, x.batch_bytes);
	if (ret) {
		fail_ret(&x, "kvrt_gpu_register_host (limit buffer)", ret);
		goto out;
	}
	ret = kvrt_gpu_alloc(x.g, x.batch_bytes, &x.lim_dev);
	if (ret) {
		fail_ret(&x, "device buffer for the limit", ret);
		goto out;
	}
	kvb_report_header(&rate, "GB/s");
	for (i = 0; i < sizeof(layers_per_block) / sizeof(layers_per_block[0]) && !ret; i++)
		ret = bench_size(&x, &rate, layers_per_block[i], &step, steps);
	if (!ret && o->reg_gib) {
		kvb_progress(c, steps, steps, "registration");
		ret = bench_register(&x, &cost);
	}
	kvb_progress_end();
out:
	if (x.lim_dev)
		kvrt_gpu_free(x.g, x.lim_dev);
	if (x.lim_host) {
		kvrt_gpu_unregister_host(x.g, x.lim_host);
		munmap(x.lim_host, x.batch_bytes);
	}
	kvrt_gpu_close(x.g);
	kvrt_close(x.k);
	return ret ? 1 : 0;
}

/* argv[0] is "gpu-copy". */
int cmd_gpu_copy(int argc, char **argv)
{
	struct gcopy_opts o = { .c = gcopy_defaults, .mib = 1024, .batch_mib = 256, .reg_gib = 4 };
	int ret;
	const struct topt opts[] = {
		{ .name = "--device", .arg = "N", .kind = TOPT_INT, .dst = &o.device, .min = 0,
		  .max = 1023, .want = "an ordinal", .help = "GPU ordinal (default 0)" },
		{ .name = "--mib", .arg = "M", .kind = TOPT_ULONG, .dst = &o.mib, .min = 4,
		  .max = 1 << 20, .want = "a number from 4 to 1048576",
		  .help = "pool and device array per block size, MiB (default 1024)" },
		{ .name = "--batch-mib", .arg = "B", .kind = TOPT_ULONG, .dst = &o.batch_mib,
		  .min = 2, .max = 1 << 16, .want = "a number from 2 to 65536",
		  .help = "bytes per copy call, MiB (default 256; at most --mib)" },
		{ .name = "--reg-gib", .arg = "G", .kind = TOPT_ULONG, .dst = &o.reg_gib, .min = 0,
		  .max = 1024, .want = "a number from 0 to 1024",
		  .help = "memory registered in the registration case, GiB (default 4;\n"
			  "0: skip it)" },
		{ NULL },
	};
	const struct kvb_cmd cmd = { .defaults = &gcopy_defaults, .about = gcopy_about,
				     .opts = opts, .epilogue = KVB_NO_GPU_NOTE };

	if (!kvb_parse_args(&cmd, &o.c, argc, argv, NULL, &ret))
		return ret;
	if (o.batch_mib > o.mib)
		return kvb_usage_error(&cmd, "--batch-mib %lu is more than --mib %lu",
				       o.batch_mib, o.mib);
	return bench(&o);
}
