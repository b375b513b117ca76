// SPDX-License-Identifier: MIT
/*
 * attn_fast.c: the fast CPU paged attention: which kernel, which work
 * items, how many threads.
 *
 * Kernel: the widest the CPU supports of AVX-512 with BF16 (F/BW/VL/DQ +
 * AVX512_BF16: bf16 q . bf16 K by vdpbf16ps), AVX-512 (F/BW/VL/DQ),
 * AVX2+FMA+F16C, and the portable fallback (plain C with 4-wide GCC vector
 * types: SSE2 on x86-64, whatever the compiler has elsewhere).
 * __builtin_cpu_supports is asked on every call: no cached state.  The
 * environment variable KVRT_CPU_ISA (avx512, avx2, generic or scalar)
 * lowers the choice, never raises it; the tests use it to cover every
 * kernel on one machine.
 *
 * Work items: decode: (sequence, a range of KV heads), every head of the
 * sequence when there are enough sequences to keep the threads busy (see
 * heads_per_item); prefill: (sequence, KV head, a run of query tokens of
 * about PREFILL_ROWS rows).  An item reads each K/V row of its heads once
 * and computes every query head of each group from it.  Items are sorted
 * longest first and handed out through an atomic counter, so ragged
 * batches balance.  Every output row belongs to exactly one item and is
 * computed in an order fixed by the call's shapes (never by the thread
 * count or the item split), so results do not depend on the thread count.
 *
 * Threads are created per call and joined before it returns (no pool, no
 * global state), or, for the _on calls, taken from the caller's kept
 * kvrt_workers (workers.c).  The calling thread works too, so num_threads =
 * 1 creates none; num_threads = 0 means the CPUs of the caller's affinity
 * mask (or all the kept threads).  A call is given fewer threads than asked
 * when it has fewer items or too little work to pay for a thread
 * (WORK_PER_THREAD).  kvbench attn measures the spawn cost: ~40-60 us to
 * create and join a thread on the 2-core VM, against ~30 ms for a decode
 * over 1 GiB of K/V.  All scratch memory is allocated before any thread
 * starts, so -ENOMEM leaves the output untouched; a failed pthread_create
 * only means fewer threads.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "attn_internal.h"
#include "workers.h"

/* Rows (query tokens x group) that a prefill item aims at. */
#define PREFILL_ROWS 32
/* Decode items per thread below which items are split across KV heads. */
#define ITEMS_PER_THREAD 4
/*
 * Work units (key positions x head dims x (rows + 2), per head) each extra
 * thread must have.  A bf16 decode runs ~31 units/ns on one core from L3
 * or DRAM (2-core EPYC VM), so 4 Mi units is ~0.13 ms of work, about 2.6
 * times the 40-60 us measured to create and join a thread there (kvbench
 * attn, thread_spawn).  16 Mi made every call under ~21 MB of K/V single-
 * threaded: a batch-1 decode over 4096 tokens (16 MiB) ran 1.7x slower.
 */
#define WORK_PER_THREAD (4ULL << 20)

struct attn_pool {
	const struct attn_job *job;
	attn_kern_fn kern;
	const struct attn_item *items;
	uint32_t num_items;
	atomic_uint next;
};

struct attn_worker {
	struct attn_pool *pool;
	struct attn_ws ws;
};

static attn_kern_fn pick_kernel(void)
{
#if defined(__x86_64__)
	const char *env = getenv("KVRT_CPU_ISA");
	int cap = 3;

	if (env && !strcmp(env, "avx512"))
		cap = 2;
	else if (env && !strcmp(env, "avx2"))
		cap = 1;
	else if (env && (!strcmp(env, "generic") || !strcmp(env, "scalar")))
		cap = 0;
	if (cap >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
		if (cap >= 3 && __builtin_cpu_supports("avx512bf16"))
			return kvrt_attn_kern_avx512bf16;
		return kvrt_attn_kern_avx512;
	}
	if (cap >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c"))
		return kvrt_attn_kern_avx2;
#endif
	return kvrt_attn_kern_generic;
}

static uint32_t rows_per_item(const struct attn_job *job)
{
	uint32_t qt;

	if (!job->q_indptr)
		return 1;
	qt = PREFILL_ROWS / job->group;
	return qt ? qt : 1;
}

/*
 * KV heads per item.  Decode items cover all KV heads of a sequence when
 * there are enough sequences to keep every thread busy (ITEMS_PER_THREAD
 * items each), fewer heads (halving) when not: a tile of an item then reads
 * whole token rows, all heads at once.  Only where a token's heads are
 * contiguous (head_stride = head_dim x element size, as in both presets):
 * the kernel prefetches them as one run.  Prefill items have one head
 * (they are compute-bound and already have many rows).
 */
static uint32_t heads_per_item(const struct attn_job *job, uint32_t nthreads)
{
	uint32_t hpi = job->num_kv_heads;

	if (job->q_indptr)
		return 1;
	/* the kernel prefetches an item's heads of a token as one run */
	if (job->head_stride != (int64_t)(job->head_dim * job->kv_esize))
		return 1;
	while (hpi > 1 && (uint64_t)job->num_seqs * ((job->num_kv_heads + hpi - 1) / hpi) <
				  (uint64_t)ITEMS_PER_THREAD * nthreads)
		hpi = (hpi + 1) / 2;
	return hpi;
}

static uint64_t item_keys(const struct attn_job *job, const struct attn_item *it)
{
	int64_t qlen = attn_q_len(job, it->seq), slen = job->seq_lens[it->seq];
	int64_t hi = slen - qlen + it->j1 - 1;
	int64_t lo = attn_key_lo(job, slen - qlen + it->j0);

	return (uint64_t)(hi - lo + 1);
}

static int cmp_cost(const void *a, const void *b)
{
	const struct attn_item *x = a, *y = b;

	if (x->cost != y->cost)
		return x->cost > y->cost ? -1 : 1;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	if (x->kv_head != y->kv_head)
		return x->kv_head < y->kv_head ? -1 : 1;
	return x->j0 < y->j0 ? -1 : x->j0 > y->j0;
}

/* All items of the call, costed; *total gets the summed work units. */
static struct attn_item *make_items(const struct attn_job *job, uint32_t hpi, uint32_t *count,
				    uint64_t *total)
{
	uint32_t qt = rows_per_item(job), s, h, n = 0;
	uint64_t num = 0;
	struct attn_item *items;

	for (s = 0; s < job->num_seqs; s++)
		num += ((uint64_t)attn_q_len(job, s) + qt - 1) / qt *
		       ((job->num_kv_heads + hpi - 1) / hpi);
	if (num > UINT32_MAX)
		return NULL;
	items = malloc(sizeof(*items) * (num ? num : 1));
	if (!items)
		return NULL;
	*total = 0;
	for (s = 0; s < job->num_seqs; s++) {
		uint32_t qlen = (uint32_t)attn_q_len(job, s), j0;

		for (h = 0; h < job->num_kv_heads; h += hpi) {
			for (j0 = 0; j0 < qlen; j0 += qt) {
				struct attn_item *it = &items[n++];
				uint32_t rows;

				it->seq = s;
				it->kv_head = h;
				it->kv_heads = h + hpi <= job->num_kv_heads ? hpi : job->num_kv_heads - h;
				it->j0 = j0;
				it->j1 = j0 + qt < qlen ? j0 + qt : qlen;
				rows = (it->j1 - it->j0) * job->group;
				it->cost = item_keys(job, it) * job->head_dim * (rows + 2) * it->kv_heads;
				*total += it->cost;
			}
		}
	}
	*count = n;
	return items;
}

static size_t align64(size_t x)
{
	return (x + 63) & ~(size_t)63;
}

/* Bytes of one thread's workspace; with base != NULL, also carve it up. */
static size_t ws_layout(struct attn_ws *ws, const struct attn_job *job, uint32_t qt,
			uint32_t hpi, uint8_t *base)
{
	uint32_t dpad = (job->head_dim + 15) & ~15u;
	/*
	 * Keys per tile, a multiple of 16 from 16 to 64: for prefill about 16
	 * KiB of f32 K per tile; for decode half that, as an item may cover
	 * several heads whose rows of a tile are all in flight together (keep
	 * them near L1).  Not a function of the heads per item, which follow
	 * the thread count: tiles fix the order of the online softmax, and
	 * results must not depend on the thread count.
	 */
	uint32_t tile = (4096 / dpad / (job->q_indptr ? 1 : 2)) & ~15u;
	uint32_t rows = hpi * ((qt * job->group + 3) & ~3u);
	/* decode keeps VL rows per vector: acc, m, l and s in whole vectors */
	uint32_t vrows = (rows + 15) & ~15u;
	size_t off = 0;

	if (tile < 16)
		tile = 16;
	if (tile > 64)
		tile = 64;
	ws->dpad = dpad;
	ws->tile = tile;
	ws->max_rows = rows;
#define CARVE(field, bytes)                                                  \
	do {                                                                 \
		if (base)                                                    \
			ws->field = (void *)(base + off);                    \
		off += align64(bytes);                                       \
	} while (0)
	CARVE(q, sizeof(float) * rows * dpad);
	CARVE(qh, sizeof(uint16_t) * rows * dpad);
	CARVE(acc, sizeof(float) * vrows * dpad);
	CARVE(m, sizeof(float) * vrows);
	CARVE(l, sizeof(float) * vrows);
	CARVE(k, sizeof(float) * tile * dpad);
	CARVE(v, sizeof(float) * tile * dpad);
	CARVE(s, sizeof(float) * vrows * tile);
	CARVE(lo, sizeof(int64_t) * rows);
	CARVE(hi, sizeof(int64_t) * rows);
	CARVE(kp, sizeof(void *) * (ATTN_PF_TILES + 1) * tile);
	CARVE(vp, sizeof(void *) * (ATTN_PF_TILES + 1) * tile);
	CARVE(blk, sizeof(int64_t) * (ATTN_PF_TILES + 1) * tile);
	CARVE(ks, sizeof(float) * hpi * tile);
	CARVE(vs, sizeof(float) * hpi * tile);
	CARVE(skp, sizeof(void *) * tile);
	CARVE(svp, sizeof(void *) * tile);
#undef CARVE
	return off;
}

static void run_items(struct attn_worker *w)
{
	struct attn_pool *pool = w->pool;
	uint32_t i;

	while ((i = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed)) <
	       pool->num_items)
		pool->kern(pool->job, &w->ws, &pool->items[i]);
}

/* worker i of the call (workers_run, threads_run) */
static void run_worker(void *arg, uint32_t i)
{
	run_items((struct attn_worker *)arg + i);
}

int kvrt_attn_fast_run(const struct attn_job *job, struct kvrt_workers *kept)
{
	struct attn_pool pool = { .job = job, .kern = pick_kernel() };
	struct attn_worker *workers;
	struct attn_item *items;
	uint32_t nthreads, i, hpi;
	uint64_t total = 0, by_work;
	size_t ws_bytes;
	uint8_t *mem;
	struct attn_ws tmp;
	int ret = -ENOMEM;

	nthreads = job->num_threads ? job->num_threads : kept ? workers_count(kept) :
							     cpus_available();
	if (kept && nthreads > workers_count(kept))
		nthreads = workers_count(kept);
	hpi = heads_per_item(job, nthreads);
	items = make_items(job, hpi, &pool.num_items, &total);
	if (!items)
		return -ENOMEM;
	/* Every query chunk empty (prefill allows that): no row to compute. */
	if (!pool.num_items) {
		free(items);
		return 0;
	}
	pool.items = items;

	if (nthreads > pool.num_items)
		nthreads = pool.num_items;
	by_work = total / WORK_PER_THREAD;
	if (nthreads > by_work)
		nthreads = by_work ? (uint32_t)by_work : 1;
	if (nthreads > 1)
		qsort(items, pool.num_items, sizeof(*items), cmp_cost);

	ws_bytes = ws_layout(&tmp, job, rows_per_item(job), hpi, NULL);
	workers = calloc(nthreads, sizeof(*workers));
	/* zeroed: the padding lanes of q and staged k/v rows must stay 0 */
	mem = aligned_alloc(64, ws_bytes * nthreads);
	if (!workers || !mem)
		goto out_free;
	memset(mem, 0, ws_bytes * nthreads);
	for (i = 0; i < nthreads; i++) {
		workers[i].pool = &pool;
		ws_layout(&workers[i].ws, job, rows_per_item(job), hpi, mem + ws_bytes * i);
	}

	if (kept)
		workers_run(kept, nthreads, run_worker, workers);
	else
		threads_run(nthreads, run_worker, workers);
	ret = 0;

out_free:
	free(mem);
	free(workers);
	free(items);
	return ret;
}
