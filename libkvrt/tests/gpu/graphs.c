// SPDX-License-Identifier: MIT
/* test_gpu: with a GPU: one plan object replanned, and a CUDA graph replayed after replans. */
#define _GNU_SOURCE
#include "harness.h"

/*
 * One plan object: batch A, then a different batch B (other sequence
 * count, other lengths), then A again, each checked.  The worlds are
 * separate caches; only the plan is shared.
 */
TEST(replan_same_plan_object)
{
	struct tcase a = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 3,
			   .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16, .o_dt = KVRT_DTYPE_F32,
			   .layout = L_LM, .window = -1, .qamp = 2.0, .lens = { 5, 100, 17 } };
	struct tcase b = a;
	uint32_t s;

	b.nseq = 7;
	for (s = 0; s < 7; s++)
		b.lens[s] = 1 + 1000 * s;
	b.lens[6] = 33000;	/* split in B, not in A */
	run_decode(&a, "replan: batch A", NULL);
	run_decode(&b, "replan: batch B on the same plan", NULL);
	run_decode(&a, "replan: batch A again", NULL);
}

/* ---- CUDA graphs, through the driver (for streams and graphs only) --------------------------- */

typedef int cures;
struct drv {
	void *lib;
	cures (*DeviceGet)(int *, int);
	cures (*PrimaryCtxRetain)(void **, int);
	cures (*PrimaryCtxRelease)(int);
	cures (*CtxPushCurrent)(void *);
	cures (*CtxPopCurrent)(void **);
	cures (*StreamCreate)(void **, unsigned int);
	cures (*StreamDestroy)(void *);
	cures (*StreamBeginCapture)(void *, int);
	cures (*StreamEndCapture)(void *, void **);
	cures (*GraphInstantiate)(void **, void *, unsigned long long);
	cures (*GraphLaunch)(void *, void *);
	cures (*GraphExecDestroy)(void *);
	cures (*GraphDestroy)(void *);
	cures (*StreamSynchronize)(void *);
	int dev;
	void *ctx;
};

/* 0, or why not into why. */
static int drv_load(struct drv *d, char *why, size_t len)
{
	typedef cures (*gpa_fn)(const char *, void **, int, unsigned long long, int *);
	static const struct {
		size_t off;
		const char *name;
	} fns[] = {
#define F(field, name) { offsetof(struct drv, field), name }
		F(DeviceGet, "cuDeviceGet"), F(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		F(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease"),
		F(CtxPushCurrent, "cuCtxPushCurrent"), F(CtxPopCurrent, "cuCtxPopCurrent"),
		F(StreamCreate, "cuStreamCreate"), F(StreamDestroy, "cuStreamDestroy"),
		F(StreamBeginCapture, "cuStreamBeginCapture"),
		F(StreamEndCapture, "cuStreamEndCapture"),
		F(GraphInstantiate, "cuGraphInstantiateWithFlags"),
		F(GraphLaunch, "cuGraphLaunch"), F(GraphExecDestroy, "cuGraphExecDestroy"),
		F(GraphDestroy, "cuGraphDestroy"), F(StreamSynchronize, "cuStreamSynchronize"),
#undef F
	};
	const char *path = getenv("KVRT_LIBCUDA");
	gpa_fn gpa;
	size_t i;
	int st, r;

	memset(d, 0, sizeof(*d));
	if (!path || !*path)
		path = "libcuda.so.1";
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		snprintf(why, len, "%s", dlerror());
		return -1;
	}
	gpa = (gpa_fn)dlsym(d->lib, "cuGetProcAddress_v2");
	if (!gpa) {
		snprintf(why, len, "%s has no cuGetProcAddress_v2", path);
		goto out;
	}
	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		void **fn = (void **)((char *)d + fns[i].off);

		st = 0;
		if (gpa(fns[i].name, fn, 12000, 0, &st) || st || !*fn) {
			snprintf(why, len, "%s: %s not found", path, fns[i].name);
			goto out;
		}
	}
	/* cuInit was called by libkvrt in this process; the same driver is loaded */
	if ((r = d->DeviceGet(&d->dev, GI.device)) || (r = d->PrimaryCtxRetain(&d->ctx, d->dev))) {
		snprintf(why, len, "cuDeviceGet/cuDevicePrimaryCtxRetain: CUDA error %d", r);
		goto out;
	}
	return 0;
out:
	dlclose(d->lib);
	d->lib = NULL;
	return -1;
}

static void drv_unload(struct drv *d)
{
	if (d->ctx)
		d->PrimaryCtxRelease(d->dev);
	if (d->lib)
		dlclose(d->lib);
	memset(d, 0, sizeof(*d));
}

/*
 * The batch's data lives in one cache (the B lengths); batch A reads
 * prefixes of the same sequences.  The graph captures one
 * kvrt_gpu_attn_decode call with fixed buffers: q, out and seq_lens are
 * rewritten in place between replays, and the plan object is re-planned.
 */
TEST(graph_replay_after_replan)
{
	static char why[256];
	struct tcase tc = { .bt = 16, .nkv = 2, .group = 4, .hd = 128, .nseq = 4,
			    .kv_dt = KVRT_DTYPE_BF16, .q_dt = KVRT_DTYPE_BF16,
			    .o_dt = KVRT_DTYPE_F32, .layout = L_LM, .window = -1, .qamp = 2.0,
			    .lens = { 20000, 1, 333, 4096 } };
	static const int32_t lens_a[4] = { 17, 1, 100, 64 };
	const int32_t *lens_b = NULL;
	int32_t lb[4];
	struct kvrt_gpu_plan *pl = NULL;
	struct kvrt_gpu_plan_info ia, ib;
	void *stream = NULL, *graph = NULL, *exec = NULL, *popped;
	void *dq = NULL, *dout = NULL, *dlens = NULL;
	size_t qbytes, obytes;
	uint8_t *gout = NULL;
	struct world w;
	struct drv d;
	int r, round;
	uint32_t s;

	if (drv_load(&d, why, sizeof(why))) {
		tap_skip(why);
		return;
	}
	for (s = 0; s < 4; s++)
		lb[s] = (int32_t)tc.lens[s];
	lens_b = lb;
	memset(&w, 0, sizeof(w));
	REQUIRE(d.CtxPushCurrent(d.ctx) == 0);
	if (world_make(&w, &tc) || world_upload(&w))
		goto out;
	qbytes = (size_t)4 * 8 * 128 * esize(tc.q_dt);
	obytes = (size_t)4 * 8 * 128 * esize(tc.o_dt);
	gout = xmalloc(obytes + GUARD);
	dq = dev_alloc(qbytes);
	dout = dev_out(obytes);
	dlens = dev_dup(lens_a, sizeof(lens_a));
	if (!dq || !dout || !dlens)
		goto out;
	r = kvrt_gpu_plan_create(G, 8, 64, &pl);
	CHECKF(!r, "kvrt_gpu_plan_create = %d", r);
	if (r || (r = d.StreamCreate(&stream, 1 /* non-blocking */))) {
		CHECKF(!r, "cuStreamCreate = %d", r);
		goto out;
	}
	/* rounds: A (capture), B, A, B: plan, rewrite the inputs, replay, check */
	for (round = 0; round < 4; round++) {
		const int32_t *lens = round % 2 ? lens_b : lens_a;
		struct kvrt_attn_params p = case_params(&tc, KVRT_ATTN_FAST);
		void *q = make_q(&tc, 4), *cpu_out = xmalloc(obytes);
		uint32_t seqs[4] = { 0, 1, 2, 3 };
		int64_t pos[4];
		char what[128];

		for (s = 0; s < 4; s++)
			pos[s] = lens[s] - 1;
		r = kvrt_gpu_plan_decode(pl, &p, &w.lo, 4, lens);
		CHECKF(!r, "round %d: kvrt_gpu_plan_decode = %d", round, r);
		kvrt_gpu_plan_info(pl, round % 2 ? &ib : &ia);
		if (!r && (kvrt_gpu_memcpy(G, dq, q, qbytes) ||
			   kvrt_gpu_memcpy(G, dlens, lens, sizeof(lens_a))))
			r = -EIO;
		if (!r && round == 0) {
			struct kvrt_kv_cache kv = { &w.lo, w.d_cache, w.d_scales, w.layer };
			struct kvrt_block_table bt = { 4, w.d_indptr, w.d_indices, dlens };
			int rc, re;

			rc = d.StreamBeginCapture(stream, 0 /* global, as PyTorch's default */);
			r = rc ? -EIO : kvrt_gpu_attn_decode(pl, dq, &kv, &bt, dout, stream);
			re = rc ? 0 : d.StreamEndCapture(stream, &graph);
			CHECKF(!rc && !r && !re && graph,
			       "capture: cuStreamBeginCapture %d, kvrt_gpu_attn_decode %d, "
			       "cuStreamEndCapture %d (the run must be capturable)", rc, r, re);
			if (!r && (rc || re || !graph))
				r = -EIO;
			if (!r && (re = d.GraphInstantiate(&exec, graph, 0))) {
				tap_failf("cuGraphInstantiateWithFlags = %d", re);
				r = -EIO;
			}
		}
		if (!r && ((r = d.GraphLaunch(exec, stream)) || (r = d.StreamSynchronize(stream))))
			tap_failf("round %d: cuGraphLaunch/cuStreamSynchronize = %d", round, r);
		if (!r)
			r = dev_get(gout, dout, obytes + GUARD);
		if (!r) {
			struct kvrt_kv_cache kv = { &w.lo, w.cache, w.scales, w.layer };
			struct kvrt_block_table bt = { 4, w.indptr, w.indices, lens };
			struct qrows qr = { 4, seqs, pos, q };

			p.impl = KVRT_ATTN_REFERENCE;
			r = kvrt_attn_decode(&p, q, &kv, &bt, cpu_out);
			CHECKF(!r, "CPU kvrt_attn_decode = %d", r);
			snprintf(what, sizeof(what), "graph replay %d (batch %c: lens %d,%d,%d,%d; the "
				 "cache below holds B's)", round, round % 2 ? 'B' : 'A', lens[0], lens[1],
				 lens[2], lens[3]);
			if (!r)
				check_outputs(&w, &qr, cpu_out, gout, what);
		}
		free(q);
		free(cpu_out);
		if (r)
			break;
	}
	tap_diag("graph: plan A %u tasks %u split, plan B %u tasks %u split", ia.num_work,
		 ia.num_split, ib.num_work, ib.num_split);
out:
	if (exec)
		d.GraphExecDestroy(exec);
	if (graph)
		d.GraphDestroy(graph);
	if (stream)
		d.StreamDestroy(stream);
	kvrt_gpu_plan_destroy(pl);
	dev_free(dq);
	dev_free(dout);
	dev_free(dlens);
	free(gout);
	world_free(&w);
	d.CtxPopCurrent(&popped);
	drv_unload(&d);
}

GPU_TESTS(gpu_graphs_tests,
	T(replan_same_plan_object),
	T(graph_replay_after_replan));
