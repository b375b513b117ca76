/* SPDX-License-Identifier: MIT */
/*
 * gpu_plan.h: host-side planning of GPU attention (FlashInfer's
 * plan/run split).  It turns a batch's lengths into CTA tasks (struct
 * kvrt_gk_work) and, for decode batches too small to fill the GPU, splits
 * long sequences along the keys (flash-decoding) with merge items that
 * combine the partial results.  Pure host code with no CUDA in it, so the
 * unit tests execute its plans on the CPU against a float64 attention.
 *
 * Header-only (static functions): the tests include it directly.
 */
#ifndef KVRT_GPU_PLAN_H
#define KVRT_GPU_PLAN_H

#include <errno.h>
#include <stdint.h>

#include "kvrt_gpu_abi.h"

/*
 * Resident CTAs that hide the SMs' memory latency.  A batch with fewer
 * than half as many tasks is split along the keys; closer to it, the extra
 * merge pass costs more than the idle SMs.
 */
/*
 * The decode kernel's occupancy, as the split policy assumes it: 3.  The
 * kernels for tasks of up to 4 heads now fit 4 CTAs per SM at hd <= 128 on
 * sm_90 (128 registers, 53 KB of shared memory); the rest stay at 3 (the
 * g8 kernels' 168 registers, hd 256's 57 KB, sm_80's 164 KB).  Moving the
 * policy to 4 waits for a GPU to measure it.
 */
#define KVRT_PLAN_CTAS_PER_SM 3
/* No key range is split finer than this (merging costs a pass). */
#define KVRT_PLAN_MIN_SPLIT_TOKENS 256

struct gpu_plan_shape {
	uint32_t num_q_heads;
	uint32_t num_kv_heads;
	uint32_t block_tokens;
	int32_t window_left;	/* -1: none */
	uint32_t sm_count;
	int no_split;		/* force one task per (sequence, head slice) */
};

/* Where the planner writes; capacities in entries. */
struct gpu_plan_out {
	struct kvrt_gk_work *work;
	uint32_t work_cap;
	struct kvrt_gk_merge *merge;
	uint32_t merge_cap;
	uint32_t partial_cap;
	/* results */
	uint32_t num_work;
	uint32_t num_merge;
	uint32_t num_partials;
	uint32_t num_split;
	uint32_t split_tokens;
};

/* Query-head slices per KV head: groups larger than a task takes. */
static inline uint32_t gpu_plan_slices(const struct gpu_plan_shape *s)
{
	uint32_t group = s->num_q_heads / s->num_kv_heads;

	return (group + KVRT_GK_MAX_GROUP - 1) / KVRT_GK_MAX_GROUP;
}

/* The most query heads one task takes (the decode kernel's width). */
static inline uint32_t gpu_plan_widest_slice(const struct gpu_plan_shape *s)
{
	uint32_t n = gpu_plan_slices(s);

	return (s->num_q_heads / s->num_kv_heads + n - 1) / n;
}

/* Slice i of a group: its first head within the group and its size. */
static inline void gpu_plan_slice(const struct gpu_plan_shape *s, uint32_t i, uint32_t *first,
				  uint32_t *count)
{
	uint32_t group = s->num_q_heads / s->num_kv_heads;
	uint32_t n = gpu_plan_slices(s);
	uint32_t base = group / n, extra = group % n;

	*first = i * base + (i < extra ? i : extra);
	*count = base + (i < extra);
}

/* Keys a query at position pos sees: [*lo, pos + 1). */
static inline int32_t gpu_plan_key_lo(const struct gpu_plan_shape *s, int32_t pos)
{
	if (s->window_left < 0 || pos <= s->window_left)
		return 0;
	return pos - s->window_left;
}

/* Keys the last query of a decode sequence of len tokens sees. */
static inline uint64_t gpu_plan_visible_keys(const struct gpu_plan_shape *s, int32_t len)
{
	return (uint64_t)(len - gpu_plan_key_lo(s, len - 1));
}

static inline int gpu_plan_shape_ok(const struct gpu_plan_shape *s)
{
	return s->num_kv_heads && s->num_q_heads && s->num_q_heads % s->num_kv_heads == 0 &&
	       s->block_tokens && s->sm_count;
}

static inline int gpu_plan_push(struct gpu_plan_out *o, int32_t seq, int32_t kv_head,
				int32_t q_head0, int32_t nq, int32_t row0, int32_t row_end,
				int32_t lo, int32_t hi, int32_t partial)
{
	struct kvrt_gk_work *w;

	if (o->num_work >= o->work_cap)
		return -E2BIG;
	w = &o->work[o->num_work++];
	w->seq = seq;
	w->kv_head = kv_head;
	w->q_head0 = q_head0;
	w->num_q_heads = nq;
	w->q_row0 = row0;
	w->q_row_end = row_end;
	w->tok_begin = lo;
	w->tok_end = hi;
	w->partial = partial;
	w->merge = 0;
	return 0;
}

/*
 * A task's fixed cost in keys' worth of time (loading q, combining the
 * warps), and how much faster a wave split must look to pay for its merge
 * pass and partial writes, which the wave count leaves out.
 */
#define KVRT_PLAN_TASK_OVERHEAD_KEYS 32
#define KVRT_PLAN_WAVE_SPLIT_GAIN 0.85
#define KVRT_PLAN_WAVE_SPLIT_MAX 8

/* Tasks and partials when every range longer than chunk is cut into chunk-sized pieces. */
static inline void gpu_plan_count(const struct gpu_plan_shape *s, uint32_t num_seqs,
				  const int32_t *seq_lens, uint64_t chunk, uint64_t *tasks,
				  uint64_t *partials)
{
	uint64_t per_seq = (uint64_t)s->num_kv_heads * gpu_plan_slices(s), n;
	uint32_t i;

	*tasks = *partials = 0;
	for (i = 0; i < num_seqs; i++) {
		n = gpu_plan_visible_keys(s, seq_lens[i]);
		n = n > chunk ? (n + chunk - 1) / chunk : 1;
		*tasks += n * per_seq;
		if (n > 1)
			*partials += n * per_seq;
	}
}

/*
 * Batches that fill the resident CTAs still lose the last wave's idle
 * SMs: 512 equal tasks on 396 slots take two task times, not 1.3.  Cut
 * every range into k pieces when the waves times the piece (the time of
 * equal tasks scheduled as slots free up) drops enough, within
 * partial_cap partials.  0: no split.
 */
static inline uint32_t gpu_plan_wave_split(const struct gpu_plan_shape *s, uint32_t num_seqs,
					   const int32_t *seq_lens, uint64_t target,
					   uint64_t partial_cap)
{
	uint64_t items = (uint64_t)num_seqs * s->num_kv_heads * gpu_plan_slices(s);
	uint64_t maxkeys = 0, keys, chunk, tasks, partials, cost, best = 0, best_chunk = 0;
	uint32_t i, k;

	for (i = 0; i < num_seqs; i++) {
		keys = gpu_plan_visible_keys(s, seq_lens[i]);
		if (keys > maxkeys)
			maxkeys = keys;
	}
	best = (items + target - 1) / target * (maxkeys + KVRT_PLAN_TASK_OVERHEAD_KEYS);
	cost = best;
	for (k = 2; k <= KVRT_PLAN_WAVE_SPLIT_MAX; k++) {
		chunk = (maxkeys + k - 1) / k;
		chunk = (chunk + s->block_tokens - 1) / s->block_tokens * s->block_tokens;
		if (chunk < KVRT_PLAN_MIN_SPLIT_TOKENS || chunk >= maxkeys)
			break;
		gpu_plan_count(s, num_seqs, seq_lens, chunk, &tasks, &partials);
		if (partials > partial_cap)
			break;
		keys = (tasks + target - 1) / target * (chunk + KVRT_PLAN_TASK_OVERHEAD_KEYS);
		if (keys < best) {
			best = keys;
			best_chunk = chunk;
		}
	}
	if (!best_chunk || (double)best > KVRT_PLAN_WAVE_SPLIT_GAIN * (double)cost)
		return 0;
	return best_chunk > INT32_MAX ? 0 : (uint32_t)best_chunk;
}

/*
 * Keys per task when splitting: a batch with tasks for fewer than half the
 * resident CTAs spreads its visible keys over them, a multiple of
 * block_tokens, at least KVRT_PLAN_MIN_SPLIT_TOKENS; a larger one is cut
 * only to shorten its last wave (gpu_plan_wave_split).  0: do not split.
 */
static inline uint32_t gpu_plan_split_tokens(const struct gpu_plan_shape *s, uint32_t num_seqs,
					     const int32_t *seq_lens, uint32_t partial_cap)
{
	uint64_t items = (uint64_t)num_seqs * s->num_kv_heads * gpu_plan_slices(s);
	uint64_t target = (uint64_t)s->sm_count * KVRT_PLAN_CTAS_PER_SM;
	uint64_t keys = 0, chunk;
	uint32_t i;

	if (s->no_split)
		return 0;
	if (2 * items > target)
		return gpu_plan_wave_split(s, num_seqs, seq_lens, target, partial_cap);
	for (i = 0; i < num_seqs; i++)
		keys += gpu_plan_visible_keys(s, seq_lens[i]);
	chunk = (keys * s->num_kv_heads * gpu_plan_slices(s) + target - 1) / target;
	if (chunk < KVRT_PLAN_MIN_SPLIT_TOKENS)
		chunk = KVRT_PLAN_MIN_SPLIT_TOKENS;
	chunk = (chunk + s->block_tokens - 1) / s->block_tokens * s->block_tokens;
	return chunk > INT32_MAX ? 0 : (uint32_t)chunk;
}

/*
 * Decode: one query row per sequence (row = seq) at position
 * seq_lens[s] - 1.  A range longer than the split size is cut at
 * multiples of it (so every cut falls on a block boundary) into partial
 * tasks, merged by one merge item per (sequence, head slice).
 * -EINVAL for a length < 1, -E2BIG past a capacity.
 */
static inline int gpu_plan_decode(const struct gpu_plan_shape *s, uint32_t num_seqs,
				  const int32_t *seq_lens, struct gpu_plan_out *o)
{
	uint32_t slices, chunk, seq, h, i;
	int ret;

	o->num_work = o->num_merge = o->num_partials = o->num_split = 0;
	o->split_tokens = 0;
	if (!gpu_plan_shape_ok(s))
		return -EINVAL;
	for (seq = 0; seq < num_seqs; seq++)
		if (seq_lens[seq] < 1)
			return -EINVAL;
	slices = gpu_plan_slices(s);
	chunk = gpu_plan_split_tokens(s, num_seqs, seq_lens, o->partial_cap);
	o->split_tokens = chunk;
	for (seq = 0; seq < num_seqs; seq++) {
		int32_t hi = seq_lens[seq], lo = gpu_plan_key_lo(s, hi - 1);
		int split = chunk && (uint32_t)(hi - lo) > chunk;

		for (h = 0; h < s->num_kv_heads; h++) {
			for (i = 0; i < slices; i++) {
				uint32_t first, nq, q0;
				int32_t a, b, p0 = (int32_t)o->num_partials, n = 0;

				gpu_plan_slice(s, i, &first, &nq);
				q0 = h * (s->num_q_heads / s->num_kv_heads) + first;
				if (!split) {
					ret = gpu_plan_push(o, seq, h, q0, nq, seq, seq + 1, lo, hi, -1);
					if (ret)
						return ret;
					continue;
				}
				for (a = lo; a < hi; a = b, n++) {
					b = (a / (int32_t)chunk + 1) * (int32_t)chunk;
					if (b > hi)
						b = hi;
					if (o->num_partials >= o->partial_cap)
						return -E2BIG;
					ret = gpu_plan_push(o, seq, h, q0, nq, seq, seq + 1, a, b,
							    (int32_t)o->num_partials++);
					if (ret)
						return ret;
					/* the merge item pushed below */
					o->work[o->num_work - 1].merge = (int32_t)o->num_merge;
				}
				if (o->num_merge >= o->merge_cap)
					return -E2BIG;
				o->merge[o->num_merge++] = (struct kvrt_gk_merge){
					.row = (int32_t)seq, .q_head0 = (int32_t)q0,
					.num_q_heads = (int32_t)nq, .partial0 = p0,
					.num_partials = n,
				};
				o->num_split++;
			}
		}
	}
	return 0;
}

/*
 * Prefill: sequence s's query rows [q_indptr[s], q_indptr[s + 1]) are the
 * last of its seq_lens[s] positions; tasks take KVRT_GK_PREFILL_QTILE rows
 * and the keys the tile can see.  No splits.  -EINVAL for more rows than
 * positions, a decreasing q_indptr or q_indptr[0] != 0.
 */
static inline int gpu_plan_prefill(const struct gpu_plan_shape *s, uint32_t num_seqs,
				   const int32_t *q_indptr, const int32_t *seq_lens,
				   struct gpu_plan_out *o)
{
	uint32_t slices, seq, h, i;
	int ret;

	o->num_work = o->num_merge = o->num_partials = o->num_split = 0;
	o->split_tokens = 0;
	if (!gpu_plan_shape_ok(s) || q_indptr[0] != 0)
		return -EINVAL;
	for (seq = 0; seq < num_seqs; seq++) {
		int32_t rows = q_indptr[seq + 1] - q_indptr[seq];

		if (rows < 0 || seq_lens[seq] < rows || seq_lens[seq] < 1)
			return -EINVAL;
	}
	slices = gpu_plan_slices(s);
	for (seq = 0; seq < num_seqs; seq++) {
		int32_t row_end = q_indptr[seq + 1], r0;
		int32_t first_pos = seq_lens[seq] - (row_end - q_indptr[seq]);

		for (r0 = q_indptr[seq]; r0 < row_end; r0 += KVRT_GK_PREFILL_QTILE) {
			int32_t r1 = r0 + KVRT_GK_PREFILL_QTILE < row_end ?
				     r0 + KVRT_GK_PREFILL_QTILE : row_end;
			int32_t pos0 = first_pos + (r0 - q_indptr[seq]);
			int32_t hi = first_pos + (r1 - q_indptr[seq]);

			for (h = 0; h < s->num_kv_heads; h++) {
				for (i = 0; i < slices; i++) {
					uint32_t first, nq;

					gpu_plan_slice(s, i, &first, &nq);
					ret = gpu_plan_push(o, seq, h,
							    h * (s->num_q_heads / s->num_kv_heads) + first,
							    nq, r0, r1, gpu_plan_key_lo(s, pos0), hi, -1);
					if (ret)
						return ret;
				}
			}
		}
	}
	return 0;
}

#endif /* KVRT_GPU_PLAN_H */
