// SPDX-License-Identifier: MIT
/*
 * copy.c: kvrt_copy_blocks on the CPU, and the per-handle copy thread.
 *
 * A block is addressed as [layer][kv][token][head] rows of head_dim
 * elements in each array.  Before copying, the dimensions whose strides
 * are the running contiguous size in both arrays are folded into the
 * memcpy length, innermost first; what is left is looped over.  Two
 * block-major arrays fold everything (one memcpy per block); block-major
 * against layer-major folds [token][head] (2 * layers memcpys per block).
 *
 * Async copies go to one thread per struct kvrt, started on first use;
 * it takes jobs in submission order and kvrt_close() drains the queue
 * before it joins the thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct copy_job {
	struct copy_job *next;		/* kvrt.qhead list */
	struct kvrt_copy *copy;
	struct kvrt_layout dl, sl;
	char *dbase;
	const char *sbase;
	float *dscales;
	const float *sscales;
	uint32_t count;
	struct kvrt_block_pair *pairs;
};

struct kvrt_copy {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int result;
	struct copy_job job;
};

/* Loop dimensions left after folding, outermost first. */
struct copy_plan {
	unsigned int ndims;
	uint32_t n[4];
	int64_t ds[4], ss[4];
	size_t run;			/* bytes per memcpy */
};

static void plan_copy(const struct kvrt_layout *d, const struct kvrt_layout *s,
		      struct copy_plan *p)
{
	uint32_t n[4] = { d->num_layers, 2, d->block_tokens, d->num_kv_heads };
	int64_t ds[4] = { d->layer_stride, d->kv_stride, d->token_stride, d->head_stride };
	int64_t ss[4] = { s->layer_stride, s->kv_stride, s->token_stride, s->head_stride };
	int i, keep = 4;

	p->run = (size_t)d->head_dim * kvrt_dtype_size(d->kv_dtype);
	/* Fold from the innermost dimension out while both arrays are contiguous. */
	for (i = 3; i >= 0; i--) {
		if (n[i] == 1) {
			keep = i;
			continue;
		}
		if (ds[i] != (int64_t)p->run || ss[i] != (int64_t)p->run)
			break;
		p->run *= n[i];
		keep = i;
	}
	p->ndims = 0;
	for (i = 0; i < keep; i++) {
		if (n[i] == 1)
			continue;
		p->n[p->ndims] = n[i];
		p->ds[p->ndims] = ds[i];
		p->ss[p->ndims] = ss[i];
		p->ndims++;
	}
}

static void each_dim(const struct copy_plan *p, unsigned int dim, char *dst, const char *src,
		     kvrt_run_fn fn, void *arg)
{
	uint32_t i;

	if (dim == p->ndims) {
		fn(arg, dst, src, p->run);
		return;
	}
	for (i = 0; i < p->n[dim]; i++)
		each_dim(p, dim + 1, dst + (int64_t)i * p->ds[dim], src + (int64_t)i * p->ss[dim],
			 fn, arg);
}

void kvrt_copy_each_run(const struct kvrt_layout *d, char *dbase, float *dscales,
			const struct kvrt_layout *s, const char *sbase, const float *sscales,
			const struct kvrt_block_pair *pairs, uint32_t count, kvrt_run_fn fn,
			void *arg)
{
	struct copy_plan plan;
	uint32_t i, l, kv;

	plan_copy(d, s, &plan);
	for (i = 0; i < count; i++) {
		uint32_t sb = pairs[i].src, db = pairs[i].dst;

		each_dim(&plan, 0, dbase + (int64_t)db * d->block_stride,
			 sbase + (int64_t)sb * s->block_stride, fn, arg);
		if (d->kv_dtype != KVRT_DTYPE_FP8_E4M3)
			continue;
		for (l = 0; l < d->num_layers; l++)
			for (kv = 0; kv < 2; kv++)
				fn(arg, (char *)(dscales + l * d->scale_layer_stride +
						 kv * d->scale_kv_stride + db * d->scale_block_stride),
				   (const char *)(sscales + l * s->scale_layer_stride +
						  kv * s->scale_kv_stride + sb * s->scale_block_stride),
				   d->num_kv_heads * sizeof(float));
	}
}

static void memcpy_run(void *arg, char *dst, const char *src, size_t bytes)
{
	(void)arg;
	memcpy(dst, src, bytes);
}

static void run_job(const struct copy_job *j)
{
	kvrt_copy_each_run(&j->dl, j->dbase, j->dscales, &j->sl, j->sbase, j->sscales, j->pairs,
			   j->count, memcpy_run, NULL);
}

static bool same_geometry(const struct kvrt_layout *a, const struct kvrt_layout *b)
{
	return a->num_layers == b->num_layers && a->num_kv_heads == b->num_kv_heads &&
	       a->head_dim == b->head_dim && a->block_tokens == b->block_tokens &&
	       a->kv_dtype == b->kv_dtype;
}

static int check_array(const struct kvrt_block_array *a)
{
	struct kvrt_extent e;

	if (!a || !a->layout || !a->base)
		return -EINVAL;
	if (kvrt_layout_extent(a->layout, &e))
		return -EINVAL;
	if (a->layout->kv_dtype == KVRT_DTYPE_FP8_E4M3 && !a->scales)
		return -EINVAL;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Ids in range, no destination twice, and within one array no block both
 * a source and a destination.  Sorting copies of the ids keeps the memory
 * proportional to count, whatever the arrays' num_blocks.
 */
static int check_pairs(const struct kvrt_block_array *dst, const struct kvrt_block_array *src,
		       const struct kvrt_block_pair *pairs, uint32_t count)
{
	uint32_t dn = dst->layout->num_blocks, sn = src->layout->num_blocks, i, j;
	bool alias = dst->base == src->base && dst->scales == src->scales &&
		     !memcmp(dst->layout, src->layout, sizeof(*dst->layout));
	uint32_t *d, *sv = NULL;
	int ret = 0;

	for (i = 0; i < count; i++)
		if (pairs[i].dst >= dn || pairs[i].src >= sn)
			return -EINVAL;
	if (count < 2 && !alias)
		return 0;
	d = malloc((size_t)count * sizeof(*d));
	if (alias)
		sv = malloc((size_t)count * sizeof(*sv));
	if (!d || (alias && !sv)) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (i = 0; i < count; i++) {
		d[i] = pairs[i].dst;
		if (alias)
			sv[i] = pairs[i].src;
	}
	qsort(d, count, sizeof(*d), cmp_u32);
	for (i = 1; i < count; i++)
		if (d[i] == d[i - 1]) {
			ret = -EINVAL;
			goto out_free;
		}
	if (alias) {
		qsort(sv, count, sizeof(*sv), cmp_u32);
		for (i = j = 0; i < count && j < count;) {
			if (d[i] == sv[j]) {
				ret = -EINVAL;
				break;
			}
			if (d[i] < sv[j])
				i++;
			else
				j++;
		}
	}
out_free:
	free(sv);
	free(d);
	return ret;
}

static int64_t pair_dst(const void *pairs, uint32_t i)
{
	return ((const struct kvrt_block_pair *)pairs)[i].dst;
}

static int64_t pair_src(const void *pairs, uint32_t i)
{
	return ((const struct kvrt_block_pair *)pairs)[i].src;
}

int kvrt_copy_check(const struct kvrt_block_array *dst, const struct kvrt_block_array *src,
		    const struct kvrt_block_pair *pairs, uint32_t count)
{
	int ret;

	ret = check_array(dst);
	if (!ret)
		ret = check_array(src);
	if (ret)
		return ret;
	if (!same_geometry(dst->layout, src->layout))
		return -EINVAL;
	if (count && !pairs)
		return -EINVAL;
	ret = check_pairs(dst, src, pairs, count);
	if (!ret)
		ret = kvrt_bounds_check(dst->layout, dst->base, dst->scales, count, pair_dst,
					pairs);
	if (!ret)
		ret = kvrt_bounds_check(src->layout, src->base, src->scales, count, pair_src,
					pairs);
	return ret;
}

static void complete(struct kvrt_copy *c, int result)
{
	pthread_mutex_lock(&c->lock);
	c->result = result;
	c->done = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void *copy_worker(void *arg)
{
	struct kvrt *k = arg;
	struct copy_job *j;

	for (;;) {
		pthread_mutex_lock(&k->qlock);
		while (!k->qhead && !k->stopping)
			pthread_cond_wait(&k->qcond, &k->qlock);
		j = k->qhead;
		if (j) {
			k->qhead = j->next;
			if (!k->qhead)
				k->qtail = NULL;
		}
		pthread_mutex_unlock(&k->qlock);
		if (!j)
			return NULL;	/* stopping, and the queue is drained */
		run_job(j);
		complete(j->copy, 0);
	}
}

/* Queue a job; false when the copy thread cannot be started. */
static bool enqueue(struct kvrt *k, struct copy_job *j)
{
	int ret = 0;

	pthread_mutex_lock(&k->qlock);
	if (!k->worker_started && !k->stopping) {
		ret = pthread_create(&k->worker, NULL, copy_worker, k);
		k->worker_started = !ret;
	}
	if (!k->worker_started) {
		pthread_mutex_unlock(&k->qlock);
		kvrt_log(k, KVRT_LOG_WARNING,
			 "kvrt_copy_blocks: no copy thread (%s): copying in the caller",
			 ret ? strerror(ret) : "the handle is closing");
		return false;
	}
	j->next = NULL;
	if (k->qtail)
		k->qtail->next = j;
	else
		k->qhead = j;
	k->qtail = j;
	pthread_cond_signal(&k->qcond);
	pthread_mutex_unlock(&k->qlock);
	return true;
}

void kvrt_copy_shutdown(struct kvrt *k)
{
	bool started;

	pthread_mutex_lock(&k->qlock);
	k->stopping = true;
	started = k->worker_started;
	pthread_cond_broadcast(&k->qcond);
	pthread_mutex_unlock(&k->qlock);
	if (started)
		pthread_join(k->worker, NULL);
}

int kvrt_copy_blocks(struct kvrt *k, const struct kvrt_block_array *dst,
		     const struct kvrt_block_array *src, const struct kvrt_block_pair *pairs,
		     uint32_t count, uint32_t flags, struct kvrt_copy **done)
{
	struct kvrt_copy *c;
	struct copy_job *j;
	int ret;

	if (done)
		*done = NULL;
	if (!k || (flags & ~KVRT_COPY_ASYNC))
		return -EINVAL;
	ret = kvrt_copy_check(dst, src, pairs, count);
	if (ret)
		return ret;

	if (!done) {
		/* In the caller: the caller's pairs stay valid throughout. */
		struct copy_job sj = {
			.dl = *dst->layout, .sl = *src->layout,
			.dbase = dst->base, .sbase = src->base,
			.dscales = dst->scales, .sscales = src->scales,
			.count = count, .pairs = (struct kvrt_block_pair *)pairs,
		};

		run_job(&sj);
		return 0;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	j = &c->job;
	j->copy = c;
	j->dl = *dst->layout;
	j->sl = *src->layout;
	j->dbase = dst->base;
	j->sbase = src->base;
	j->dscales = dst->scales;
	j->sscales = src->scales;
	j->count = count;
	if (count) {
		j->pairs = malloc((size_t)count * sizeof(*pairs));
		if (!j->pairs) {
			free(c);
			return -ENOMEM;
		}
		memcpy(j->pairs, pairs, (size_t)count * sizeof(*pairs));
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	*done = c;
	if (count && (flags & KVRT_COPY_ASYNC) && enqueue(k, j))
		return 0;
	run_job(j);
	complete(c, 0);
	return 0;
}

int kvrt_copy_poll(struct kvrt_copy *c)
{
	int ret;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	ret = c->done ? c->result : -EAGAIN;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int kvrt_copy_wait(struct kvrt_copy *c)
{
	int ret;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	while (!c->done)
		pthread_cond_wait(&c->cond, &c->lock);
	ret = c->result;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static void copy_destroy(struct kvrt_copy *c)
{
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c->job.pairs);
	free(c);
}

void kvrt_copy_free(struct kvrt_copy *c)
{
	if (!c)
		return;
	kvrt_copy_wait(c);
	copy_destroy(c);
}
