// SPDX-License-Identifier: MIT
/*
 * seq.c: sequence block tables (kvrt.h, "sequence block tables").
 *
 * A table hands out block ids 0..nr_blocks-1 of a cache it does not own.
 * Each block has a reference count (the sequences that hold it); free
 * blocks sit in a set kept as a stack plus each block's position in it, so
 * that taking any given block (kvrt_seq_add_blocks) is O(1) as well.
 * Invariant of a sequence: it holds exactly ceil(len / block_tokens)
 * distinct blocks, in token order.
 *
 * Every call validates and allocates what it may need before it changes
 * anything, so that a failure leaves the table as it was.  One mutex per
 * table serialises the calls; copy_block runs under it.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct seq {
	uint32_t len;		/* tokens */
	uint32_t nblocks;	/* ceil(len / block_tokens) */
	uint32_t cap;		/* room in blocks[] */
	uint32_t *blocks;
};

/* An id is (gen << 32) | index; gen grows each time the slot is freed, so a
 * freed id stays unknown (until the slot is reused 2^32 times). */
struct seq_slot {
	uint32_t gen;		/* never 0, so no id is 0 */
	uint32_t next_free;	/* free-slot chain while s is NULL */
	struct seq *s;
};

struct kvrt_seqs {
	pthread_mutex_t lock;
	uint32_t nr_blocks;
	uint32_t block_tokens;
	int (*copy_block)(void *arg, uint32_t src, uint32_t dst, uint32_t ntokens);
	void *copy_arg;

	uint32_t *refs;		/* [nr_blocks] */
	uint32_t *free_stack;	/* [nr_blocks]; free blocks are [0, nfree) */
	uint32_t *free_pos;	/* [nr_blocks]; a free block's index in free_stack */
	uint32_t nfree;

	struct seq_slot *slots;
	uint32_t nslots, slots_cap;
	uint32_t free_slot;	/* head of the free-slot chain, UINT32_MAX: none */
	uint32_t nr_seqs;

	uint32_t shared;	/* blocks with refs > 1 */
	uint64_t block_refs;	/* sum of refs */
	uint64_t copies;	/* copy-on-write copies made */
};

#define NO_SLOT UINT32_MAX
/* Reference counts stay within int so kvrt_seqs_block_refs can return them. */
#define REFS_MAX ((uint32_t)INT32_MAX)

static uint64_t blocks_for(const struct kvrt_seqs *t, uint64_t len)
{
	return (len + t->block_tokens - 1) / t->block_tokens;
}

static struct seq *seq_find(const struct kvrt_seqs *t, uint64_t id)
{
	uint32_t idx = (uint32_t)id, gen = (uint32_t)(id >> 32);

	if (idx >= t->nslots || !t->slots[idx].s || t->slots[idx].gen != gen)
		return NULL;
	return t->slots[idx].s;
}

static void free_push(struct kvrt_seqs *t, uint32_t b)
{
	t->free_pos[b] = t->nfree;
	t->free_stack[t->nfree++] = b;
}

/* Take block b out of the free set (it must be in it). */
static void free_take(struct kvrt_seqs *t, uint32_t b)
{
	uint32_t pos = t->free_pos[b], last = t->free_stack[--t->nfree];

	t->free_stack[pos] = last;
	t->free_pos[last] = pos;
}

static void ref_get(struct kvrt_seqs *t, uint32_t b)
{
	if (++t->refs[b] == 2)
		t->shared++;
	t->block_refs++;
}

static void ref_put(struct kvrt_seqs *t, uint32_t b)
{
	if (t->refs[b]-- == 2)
		t->shared--;
	t->block_refs--;
	if (!t->refs[b])
		free_push(t, b);
}

static int seq_reserve(struct seq *s, uint32_t nblocks)
{
	uint32_t cap;
	uint32_t *nb;

	if (nblocks <= s->cap)
		return 0;
	cap = s->cap ? s->cap : 4;
	while (cap < nblocks)
		cap = cap > UINT32_MAX / 2 ? nblocks : cap * 2;
	nb = realloc(s->blocks, (size_t)cap * sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	s->blocks = nb;
	s->cap = cap;
	return 0;
}

static void seq_destroy(struct seq *s)
{
	if (s) {
		free(s->blocks);
		free(s);
	}
}

/* Make sure a slot is available for seq_insert (may fail, changes nothing
 * visible). */
static int slot_reserve(struct kvrt_seqs *t)
{
	struct seq_slot *ns;
	uint32_t cap;

	if (t->free_slot != NO_SLOT || t->nslots < t->slots_cap)
		return 0;
	if (t->slots_cap >= (1U << 31))
		return -ENOMEM;
	cap = t->slots_cap ? t->slots_cap * 2 : 16;
	ns = realloc(t->slots, (size_t)cap * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	t->slots = ns;
	t->slots_cap = cap;
	return 0;
}

/* After slot_reserve(): cannot fail. */
static uint64_t seq_insert(struct kvrt_seqs *t, struct seq *s)
{
	uint32_t idx;

	if (t->free_slot != NO_SLOT) {
		idx = t->free_slot;
		t->free_slot = t->slots[idx].next_free;
	} else {
		idx = t->nslots++;
		t->slots[idx].gen = 1;
	}
	t->slots[idx].s = s;
	t->nr_seqs++;
	return (uint64_t)t->slots[idx].gen << 32 | idx;
}

static void seq_remove(struct kvrt_seqs *t, uint64_t id)
{
	uint32_t idx = (uint32_t)id;

	t->slots[idx].s = NULL;
	if (++t->slots[idx].gen == 0)
		t->slots[idx].gen = 1;
	t->slots[idx].next_free = t->free_slot;
	t->free_slot = idx;
	t->nr_seqs--;
}

int kvrt_seqs_create(struct kvrt_seqs **out, const struct kvrt_seqs_opts *opts)
{
	struct kvrt_seqs *t;
	uint32_t i;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!opts || !opts->nr_blocks || !opts->block_tokens || !opts->copy_block)
		return -EINVAL;
	for (i = 0; i < sizeof(opts->reserved) / sizeof(opts->reserved[0]); i++)
		if (opts->reserved[i])
			return -EINVAL;
	/* Positions and lengths must fit the attention calls' int32 CSR. */
	if ((uint64_t)opts->nr_blocks * opts->block_tokens > INT32_MAX)
		return -EOVERFLOW;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->refs = calloc(opts->nr_blocks, sizeof(*t->refs));
	t->free_stack = malloc((size_t)opts->nr_blocks * sizeof(*t->free_stack));
	t->free_pos = malloc((size_t)opts->nr_blocks * sizeof(*t->free_pos));
	if (!t->refs || !t->free_stack || !t->free_pos || pthread_mutex_init(&t->lock, NULL)) {
		free(t->refs);
		free(t->free_stack);
		free(t->free_pos);
		free(t);
		return -ENOMEM;
	}
	t->nr_blocks = opts->nr_blocks;
	t->block_tokens = opts->block_tokens;
	t->copy_block = opts->copy_block;
	t->copy_arg = opts->copy_arg;
	t->free_slot = NO_SLOT;
	/* Pushed high to low, so blocks are handed out from 0 up. */
	for (i = t->nr_blocks; i-- > 0;)
		free_push(t, i);
	*out = t;
	return 0;
}

void kvrt_seqs_destroy(struct kvrt_seqs *seqs)
{
	uint32_t i;

	if (!seqs)
		return;
	for (i = 0; i < seqs->nslots; i++)
		seq_destroy(seqs->slots[i].s);
	free(seqs->slots);
	free(seqs->refs);
	free(seqs->free_stack);
	free(seqs->free_pos);
	pthread_mutex_destroy(&seqs->lock);
	free(seqs);
}

/* A new empty sequence with room for nblocks blocks, and a free slot for
 * it: all that adding one allocates, done before anything changes. */
static int add_seq(struct kvrt_seqs *t, struct seq **sp, uint32_t nblocks)
{
	struct seq *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	if (seq_reserve(s, nblocks) || slot_reserve(t)) {
		seq_destroy(s);
		return -ENOMEM;
	}
	*sp = s;
	return 0;
}

int kvrt_seq_add(struct kvrt_seqs *seqs, uint64_t *id)
{
	struct seq *s;
	int ret;

	if (!seqs || !id)
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	ret = add_seq(seqs, &s, 0);
	if (!ret)
		*id = seq_insert(seqs, s);
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seq_add_blocks(struct kvrt_seqs *seqs, uint32_t count, const uint32_t *blocks,
			uint32_t ntokens, uint64_t *id)
{
	struct seq *s;
	uint32_t i, j;
	int ret = 0;

	if (!seqs || !id || (count && !blocks))
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	if (count > seqs->nr_blocks || blocks_for(seqs, ntokens) != count) {
		ret = -EINVAL;
		goto out;
	}
	for (i = 0; i < count; i++)
		if (blocks[i] >= seqs->nr_blocks) {
			ret = -EINVAL;
			goto out;
		}
	/* Mark each listed free block (refs = REFS_MAX + 1, never a real count)
	 * to find repeats, then undo the marks whatever the outcome. */
	for (i = 0; i < count && !ret; i++) {
		uint32_t b = blocks[i];

		if (seqs->refs[b] == REFS_MAX + 1)
			ret = -EINVAL;
		else if (seqs->refs[b])
			ret = -EBUSY;
		else
			seqs->refs[b] = REFS_MAX + 1;
	}
	for (j = 0; j < i; j++)
		if (seqs->refs[blocks[j]] == REFS_MAX + 1)
			seqs->refs[blocks[j]] = 0;
	if (ret)
		goto out;
	ret = add_seq(seqs, &s, count);
	if (ret)
		goto out;
	for (i = 0; i < count; i++) {
		free_take(seqs, blocks[i]);
		ref_get(seqs, blocks[i]);
		s->blocks[i] = blocks[i];
	}
	s->nblocks = count;
	s->len = ntokens;
	*id = seq_insert(seqs, s);
out:
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

/* Lock the table and find id: the sequence, locked; or NULL, unlocked. */
static struct seq *seq_lock(struct kvrt_seqs *seqs, uint64_t id)
{
	struct seq *s;

	pthread_mutex_lock(&seqs->lock);
	s = seq_find(seqs, id);
	if (!s)
		pthread_mutex_unlock(&seqs->lock);
	return s;
}

int kvrt_seq_append(struct kvrt_seqs *seqs, uint64_t id, uint32_t n, int64_t *slots)
{
	struct seq *s;
	uint32_t off, need, last = 0, dst = 0, i, bt;
	uint64_t p;
	bool cow;
	int ret = 0;

	if (!seqs || (n && !slots))
		return -EINVAL;
	s = seq_lock(seqs, id);
	if (!s)
		return -ENOENT;
	if (!n)
		goto out;
	bt = seqs->block_tokens;
	off = s->len % bt;
	cow = off && seqs->refs[s->blocks[s->nblocks - 1]] > 1;
	/* Blocks are distinct per sequence, so len + n fits while they last. */
	if (blocks_for(seqs, (uint64_t)s->len + n) - s->nblocks + cow > seqs->nfree) {
		ret = -ENOSPC;
		goto out;
	}
	need = (uint32_t)blocks_for(seqs, (uint64_t)s->len + n);
	ret = seq_reserve(s, need);
	if (ret)
		goto out;
	if (cow) {
		/* Copy into the block that would be taken next, and take it only
		 * when the copy succeeded: a failure changes nothing. */
		last = s->blocks[s->nblocks - 1];
		dst = seqs->free_stack[seqs->nfree - 1];
		ret = seqs->copy_block(seqs->copy_arg, last, dst, off);
		if (ret) {
			ret = ret < 0 ? ret : -EIO;
			goto out;
		}
		free_take(seqs, dst);
		ref_get(seqs, dst);
		ref_put(seqs, last);
		s->blocks[s->nblocks - 1] = dst;
		seqs->copies++;
	}
	while (s->nblocks < need) {
		uint32_t b = seqs->free_stack[seqs->nfree - 1];

		free_take(seqs, b);
		ref_get(seqs, b);
		s->blocks[s->nblocks++] = b;
	}
	for (i = 0, p = s->len; i < n; i++, p++)
		slots[i] = (int64_t)s->blocks[p / bt] * bt + p % bt;
	s->len += n;
out:
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seq_fork(struct kvrt_seqs *seqs, uint64_t parent, uint64_t *child)
{
	struct seq *p, *s;
	uint32_t i;
	int ret;

	if (!seqs || !child)
		return -EINVAL;
	p = seq_lock(seqs, parent);
	if (!p)
		return -ENOENT;
	for (i = 0; i < p->nblocks; i++)
		if (seqs->refs[p->blocks[i]] >= REFS_MAX) {
			ret = -EOVERFLOW;
			goto out;
		}
	ret = add_seq(seqs, &s, p->nblocks);
	if (ret)
		goto out;
	for (i = 0; i < p->nblocks; i++) {
		ref_get(seqs, p->blocks[i]);
		s->blocks[i] = p->blocks[i];
	}
	s->nblocks = p->nblocks;
	s->len = p->len;
	*child = seq_insert(seqs, s);
out:
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seq_truncate(struct kvrt_seqs *seqs, uint64_t id, uint32_t len)
{
	struct seq *s;
	uint32_t keep;
	int ret = 0;

	if (!seqs)
		return -EINVAL;
	s = seq_lock(seqs, id);
	if (!s)
		return -ENOENT;
	if (len > s->len) {
		ret = -ERANGE;
		goto out;
	}
	/* A kept partial block that others share stays as it is: the next
	 * append sees refs > 1 and copies it. */
	keep = (uint32_t)blocks_for(seqs, len);
	while (s->nblocks > keep)
		ref_put(seqs, s->blocks[--s->nblocks]);
	s->len = len;
out:
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seq_free(struct kvrt_seqs *seqs, uint64_t id)
{
	struct seq *s;

	if (!seqs)
		return -EINVAL;
	s = seq_lock(seqs, id);
	if (!s)
		return -ENOENT;
	while (s->nblocks)
		ref_put(seqs, s->blocks[--s->nblocks]);
	seq_remove(seqs, id);
	seq_destroy(s);
	pthread_mutex_unlock(&seqs->lock);
	return 0;
}

int kvrt_seq_len(struct kvrt_seqs *seqs, uint64_t id)
{
	struct seq *s;
	int ret;

	if (!seqs)
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	s = seq_find(seqs, id);
	ret = s ? (int)s->len : -ENOENT;
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seq_blocks(struct kvrt_seqs *seqs, uint64_t id, uint32_t *blocks, uint32_t cap)
{
	struct seq *s;
	int ret;

	if (!seqs || (cap && !blocks))
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	s = seq_find(seqs, id);
	if (!s) {
		ret = -ENOENT;
	} else if (s->nblocks > cap) {
		ret = -ENOSPC;
	} else {
		if (s->nblocks)
			memcpy(blocks, s->blocks, (size_t)s->nblocks * sizeof(*blocks));
		ret = (int)s->nblocks;
	}
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

/* The indices a CSR of ids needs; -ENOENT, -EOVERFLOW. Under the lock. */
static int csr_count(struct kvrt_seqs *t, uint32_t nseq, const uint64_t *ids, uint32_t *count)
{
	uint64_t total = 0;
	uint32_t i;

	for (i = 0; i < nseq; i++) {
		struct seq *s = seq_find(t, ids[i]);

		if (!s)
			return -ENOENT;
		total += s->nblocks;
	}
	if (total > INT32_MAX)
		return -EOVERFLOW;
	*count = (uint32_t)total;
	return 0;
}

int kvrt_seqs_csr_size(struct kvrt_seqs *seqs, uint32_t nseq, const uint64_t *ids,
		       uint32_t *nindices)
{
	uint32_t count;
	int ret;

	if (!seqs || !nindices || (nseq && !ids) || nseq > INT32_MAX)
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	ret = csr_count(seqs, nseq, ids, &count);
	pthread_mutex_unlock(&seqs->lock);
	if (!ret)
		*nindices = count;
	return ret;
}

int kvrt_seqs_csr(struct kvrt_seqs *seqs, uint32_t nseq, const uint64_t *ids, int32_t *indptr,
		  int32_t *indices, uint32_t indices_cap, int32_t *seq_lens)
{
	uint32_t count, i, at = 0;
	int ret;

	if (!seqs || !indptr || (nseq && (!ids || !seq_lens)) || (indices_cap && !indices) ||
	    nseq > INT32_MAX)
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	ret = csr_count(seqs, nseq, ids, &count);
	if (ret)
		goto out;
	if (count > indices_cap) {
		ret = -ENOSPC;
		goto out;
	}
	for (i = 0; i < nseq; i++) {
		const struct seq *s = seq_find(seqs, ids[i]);

		indptr[i] = (int32_t)at;
		seq_lens[i] = (int32_t)s->len;
		/* Block ids are < nr_blocks <= INT32_MAX: the bit patterns agree. */
		if (s->nblocks)
			memcpy(indices + at, s->blocks, (size_t)s->nblocks * sizeof(*indices));
		at += s->nblocks;
	}
	indptr[nseq] = (int32_t)at;
	ret = (int)count;
out:
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seqs_block_refs(struct kvrt_seqs *seqs, uint32_t block)
{
	int ret;

	if (!seqs)
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	ret = block < seqs->nr_blocks ? (int)seqs->refs[block] : -EINVAL;
	pthread_mutex_unlock(&seqs->lock);
	return ret;
}

int kvrt_seqs_stats(struct kvrt_seqs *seqs, struct kvrt_seqs_stats *stats)
{
	if (!seqs || !stats)
		return -EINVAL;
	pthread_mutex_lock(&seqs->lock);
	memset(stats, 0, sizeof(*stats));
	stats->nr_blocks = seqs->nr_blocks;
	stats->block_tokens = seqs->block_tokens;
	stats->free_blocks = seqs->nfree;
	stats->used_blocks = seqs->nr_blocks - seqs->nfree;
	stats->shared_blocks = seqs->shared;
	stats->nr_seqs = seqs->nr_seqs;
	stats->block_refs = seqs->block_refs;
	stats->copies = seqs->copies;
	pthread_mutex_unlock(&seqs->lock);
	return 0;
}
