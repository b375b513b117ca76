// SPDX-License-Identifier: MIT
/*
 * attn_ref.c: the reference CPU paged attention.
 *
 * Written to be read, not to be fast: one query row at a time, every key
 * fetched through the block table element by element, float accumulation,
 * and a two-pass softmax (logits and their maximum first, then the
 * exponentials, their sum and the weighted sum of values).  Single-threaded;
 * params->num_threads is ignored.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kvrt.h"
#include "kv/dtype.h"
#include "attn_internal.h"

/* Element d of K (kv = 0) or V (kv = 1) at position p, dequantised. */
static float kv_elem(const struct attn_job *job, int kv, uint32_t s, int64_t p, uint32_t h,
		     uint32_t d)
{
	const uint8_t *base = kv ? job->v_base : job->k_base;
	const void *row = base + attn_kv_offset(job, s, p, h);

	return kvrt_load_f32(job->kv_dtype, row, d) * attn_kv_scale(job, kv, s, p, h);
}

/*
 * One output row: query token qi (global index into q) at position pos of
 * sequence s, query head h.  logits has room for pos + 1 floats, acc for
 * head_dim.
 */
static void ref_row(const struct attn_job *job, uint32_t s, int64_t qi, int64_t pos,
		    uint32_t h, float *logits, float *acc)
{
	uint32_t kvh = h / job->group;
	size_t row = ((size_t)qi * job->num_q_heads + h) * job->head_dim;
	int64_t lo = attn_key_lo(job, pos);
	float maxv = -INFINITY, sum = 0.0f;
	int64_t p;
	uint32_t d;

	for (p = lo; p <= pos; p++) {
		float x = 0.0f;

		for (d = 0; d < job->head_dim; d++)
			x += kvrt_load_f32(job->q_dtype, job->q, row + d) * kv_elem(job, 0, s, p, kvh, d);
		x *= job->sm_scale;
		if (job->softcap > 0.0f)
			x = job->softcap * tanhf(x / job->softcap);
		logits[p - lo] = x;
		if (x > maxv)
			maxv = x;
	}

	for (d = 0; d < job->head_dim; d++)
		acc[d] = 0.0f;
	for (p = lo; p <= pos; p++) {
		float w = expf(logits[p - lo] - maxv);

		sum += w;
		for (d = 0; d < job->head_dim; d++)
			acc[d] += w * kv_elem(job, 1, s, p, kvh, d);
	}

	for (d = 0; d < job->head_dim; d++)
		kvrt_store_f32(job->o_dtype, job->out, row + d, acc[d] / sum);
}

int kvrt_attn_ref_run(const struct attn_job *job)
{
	int64_t max_len = 0;
	float *logits, *acc;
	uint32_t s, h;
	int64_t j;

	for (s = 0; s < job->num_seqs; s++)
		if (job->seq_lens[s] > max_len)
			max_len = job->seq_lens[s];
	logits = malloc(sizeof(*logits) * (size_t)max_len);
	acc = malloc(sizeof(*acc) * job->head_dim);
	if (!logits || !acc) {
		free(logits);
		free(acc);
		return -ENOMEM;
	}

	for (s = 0; s < job->num_seqs; s++) {
		int64_t q0 = attn_q_start(job, s), n = attn_q_len(job, s);

		for (j = 0; j < n; j++) {
			int64_t pos = job->seq_lens[s] - n + j;

			for (h = 0; h < job->num_q_heads; h++)
				ref_row(job, s, q0 + j, pos, h, logits, acc);
		}
	}

	free(logits);
	free(acc);
	return 0;
}
