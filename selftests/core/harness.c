// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Test harness for kvcore: scriptable host, reference model, comparison.
 * See harness.h.
 */
#include <limits.h>
#include <stdarg.h>
#include "harness.h"

/* kvc_shim.h's fault injection: the Nth kvc_zalloc from now fails. */
long kvc_fail_alloc_countdown;

void (*harness_on_fail)(struct pair *p);

static void fail(struct pair *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct pair *p, const char *fmt, ...)
{
	va_list ap;

	if (p->failed)
		return;
	p->failed = true;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	if (harness_on_fail)
		harness_on_fail(p);
}

static void *xcalloc(size_t n, size_t size)
{
	void *m = calloc(n ? n : 1, size);

	if (!m) {
		fprintf(stderr, "harness: out of memory\n");
		abort();
	}
	return m;
}

static void *xrealloc(void *old, size_t size)
{
	void *m = realloc(old, size ? size : 1);

	if (!m) {
		fprintf(stderr, "harness: out of memory\n");
		abort();
	}
	return m;
}

typedef unsigned long long ull;

/* Hash bytes for messages: the first 4 and the last 2 are enough to tell test hashes apart. */
static const char *hstr(const kvc_u8 *h)
{
	static char buf[4][32];
	static int k;
	char *b = buf[k++ & 3];

	snprintf(b, 32, "%02x%02x%02x%02x..%02x%02x", h[0], h[1], h[2], h[3], h[30], h[31]);
	return b;
}

void test_hash(kvc_u8 *hash, unsigned int k)
{
	ull x = k * 0x9E3779B97F4A7C15ULL + 0x1234567ULL;
	int i;

	/*
	 * Only 4 distinct first words: kvcore buckets on the start of the
	 * hash, so hash chains get long; the rest tells the keys apart.
	 */
	for (i = 0; i < 8; i++)
		hash[i] = (kvc_u8)(0x40 + (k & 3) * 17 + i);
	for (i = 8; i < 30; i++) {
		x ^= x >> 29;
		x *= 0xBF58476D1CE4E5B9ULL;
		hash[i] = (kvc_u8)(x >> 56);
	}
	hash[30] = (kvc_u8)(k >> 8);
	hash[31] = (kvc_u8)k;
}

/* ---- the host ---------------------------------------------------------- */

void host_set(struct host *h, int mode, long long arg)
{
	h->mode = mode;
	h->arg = arg;
	h->script_len = 0;
	h->script_pos = 0;
}

/* A script keeps its first HOST_SCRIPT_MAX answers. */
static unsigned int script_len(unsigned int n)
{
	return n < HOST_SCRIPT_MAX ? n : HOST_SCRIPT_MAX;
}

void host_script(struct host *h, unsigned int n, const long long *vals)
{
	h->script_len = script_len(n);
	memcpy(h->script, vals, h->script_len * sizeof(*vals));
	h->script_pos = 0;
}

void host_refill_set(struct host *h, int mode, int arg)
{
	h->refill_mode = mode;
	h->refill_arg = arg;
	h->refill_script_len = 0;
	h->refill_script_pos = 0;
}

void host_refill_script(struct host *h, unsigned int n, const int *vals)
{
	h->refill_script_len = script_len(n);
	memcpy(h->refill_script, vals, h->refill_script_len * sizeof(*vals));
	h->refill_script_pos = 0;
}

long long host_answer(struct host *h, kvc_u64 want)
{
	kvc_u64 give, a = h->arg > 0 ? (kvc_u64)h->arg : 1;

	if (h->script_pos < h->script_len)
		return h->script[h->script_pos++];
	switch (h->mode) {
	case HOST_EXACT:
		give = want;
		break;
	case HOST_CHUNK:
		give = want / a + (want % a != 0);
		give = give > ~0ULL / a ? ~0ULL : give * a;
		break;
	case HOST_PARTIAL:
		give = want < a ? want : a;
		break;
	case HOST_ZERO:
		return 0;
	case HOST_ERRNO:
	default:
		return h->arg;
	}
	if (give > h->pool_left)
		give = h->pool_left;
	if (give > (kvc_u64)LLONG_MAX)
		give = LLONG_MAX;
	if (h->pool_left != HOST_UNLIMITED)
		h->pool_left -= give;
	return (long long)give;
}

int host_refill_answer(struct host *h, kvc_u64 len)
{
	if (h->refill_script_pos < h->refill_script_len)
		return h->refill_script[h->refill_script_pos++];
	if (h->refill_mode == REFILL_ERRNO)
		return h->refill_arg;
	if (h->pool_left == HOST_UNLIMITED)
		return 0;
	if (len > h->pool_left)
		return -ENOSPC;
	h->pool_left -= len;
	return 0;
}

static struct trace_ent *trace_add(struct host *h, int kind, kvc_u64 a, kvc_u64 b,
				   long long ret)
{
	struct trace_ent *t;

	if (h->nr_trace == h->trace_cap) {
		h->trace_cap = h->trace_cap ? h->trace_cap * 2 : 64;
		h->trace = xrealloc(h->trace, h->trace_cap * sizeof(*h->trace));
	}
	t = &h->trace[h->nr_trace++];
	memset(t, 0, sizeof(*t));
	t->kind = kind;
	t->a = a;
	t->b = b;
	t->ret = ret;
	return t;
}

void host_trace_reset(struct host *h)
{
	h->nr_trace = 0;
	h->calls = 0;
	h->refills = 0;
	h->evictions = 0;
	h->last_want = 0;
	h->bad_in_grow = false;
}

void host_free(struct host *h)
{
	free(h->trace);
	h->trace = NULL;
	h->nr_trace = h->trace_cap = 0;
}

static void host_check_space(struct host *h, struct kvc_space *s)
{
	/* The first calls of each operation are enough to see it. */
	if (h->check_in_grow && h->calls + h->refills < 8) {
		char msg[160];

		/* The host may look at the space while it is called. */
		if (kvc_space_check(s, msg, sizeof(msg)))
			h->bad_in_grow = true;
	}
}

static long long host_grow(struct kvc_space *s, kvc_u64 want)
{
	struct host *h = s->host;
	long long got;

	host_check_space(h, s);
	got = host_answer(h, want);
	trace_add(h, TR_GROW, want, 0, got);
	h->calls++;
	h->last_want = want;
	return got;
}

static int host_refill(struct kvc_space *s, kvc_u64 start, kvc_u64 len)
{
	struct host *h = s->host;
	int ret;

	host_check_space(h, s);
	ret = host_refill_answer(h, len);
	trace_add(h, TR_REFILL, start, len, ret);
	h->refills++;
	return ret;
}

static void host_evicted(struct kvc_space *s, kvc_u32 id, const kvc_u8 *hash, unsigned int cause)
{
	struct host *h = s->host;
	struct trace_ent *t = trace_add(h, TR_EVICTED, id, cause, 0);

	memcpy(t->hash, hash, KVC_HASH_BYTES);
	/* "called after it left the index" */
	t->in_index = kvc_find(s, hash) != KVC_NONE;
	h->evictions++;
}

const struct kvc_space_ops host_ops = {
	.grow = host_grow,
	.refill = host_refill,
	.evicted = host_evicted,
};

/* ---- the reference model ----------------------------------------------- */

unsigned int holder_of(kvc_u32 owner)
{
	if (owner < NR_HOLDERS - 2)
		return owner;
	return owner == 0xffffffffu ? NR_HOLDERS - 2 : NR_HOLDERS - 1;
}

static int ref_init(struct ref *r, kvc_u64 block_bytes, kvc_u64 nr_blocks)
{
	memset(r, 0, sizeof(*r));
	if (!block_bytes || !nr_blocks || nr_blocks > KVC_MAX_BLOCKS)
		return -EINVAL;
	/* The range must be addressable in 64-bit bytes. */
	if (block_bytes > ~0ULL / nr_blocks)
		return -EINVAL;
	r->block_bytes = block_bytes;
	r->nr_blocks = nr_blocks;
	r->max_readers = KVC_READERS_MAX;
	r->refs_limit = KVC_REFS_MAX;
	return 0;
}

/* May a batch of n add a reference to a block with this many readers? */
static bool ref_readers_room(const struct ref *r, kvc_u32 readers, kvc_u64 n)
{
	return (kvc_u64)readers + n <= r->max_readers;
}

static void ref_fini(struct ref *r)
{
	int h;

	free(r->blk);
	for (h = 0; h < NR_HOLDERS; h++)
		free(r->held[h]);
	free(r->index);
	memset(r, 0, sizeof(*r));
}

static void ref_state(struct ref *r, kvc_u32 id, unsigned int st)
{
	r->n[r->blk[id].state]--;
	r->n[st]++;
	r->blk[id].state = (kvc_u8)st;
	if (st != KVC_BLOCK_OWNED)
		r->blk[id].owner = KVC_OWNER_NONE;
}

/* Every whole block inside backed_bytes becomes a free, valid id. */
static void ref_register(struct ref *r)
{
	kvc_u64 whole = r->backed_bytes / r->block_bytes, id;
	int h;

	if (whole > r->cap) {
		kvc_u64 cap = r->cap ? r->cap : 16;

		while (cap < whole)
			cap *= 2;
		r->blk = xrealloc(r->blk, cap * sizeof(*r->blk));
		for (h = 0; h < NR_HOLDERS; h++) {
			r->held[h] = xrealloc(r->held[h], cap * sizeof(kvc_u32));
			memset(r->held[h] + r->cap, 0, (cap - r->cap) * sizeof(kvc_u32));
		}
		r->cap = cap;
	}
	for (id = r->registered; id < whole; id++) {
		memset(&r->blk[id], 0, sizeof(r->blk[id]));
		r->blk[id].state = KVC_BLOCK_FREE;
	}
	r->n[KVC_BLOCK_FREE] += whole - r->registered;
	r->registered = whole;
}

kvc_u64 ref_owner_blocks(const struct ref *r, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	if (owner == KVC_OWNER_NONE)
		return 0;
	for (id = 0; id < r->registered; id++)
		n += r->blk[id].state == KVC_BLOCK_OWNED && r->blk[id].owner == owner;
	return n;
}

kvc_u32 ref_owned_ids(const struct ref *r, kvc_u32 owner, kvc_u32 *ids, kvc_u32 max)
{
	kvc_u64 id;
	kvc_u32 n = 0;

	for (id = 0; id < r->registered && n < max; id++)
		if (owner != KVC_OWNER_NONE && r->blk[id].state == KVC_BLOCK_OWNED &&
		    r->blk[id].owner == owner)
			ids[n++] = (kvc_u32)id;
	return n;
}

kvc_u32 ref_held_ids(const struct ref *r, kvc_u32 owner, kvc_u32 *ids, kvc_u32 max)
{
	const kvc_u32 *held = r->held[holder_of(owner)];
	kvc_u64 id;
	kvc_u32 n = 0, c;

	for (id = 0; id < r->registered && n < max; id++)
		for (c = 0; held && c < held[id] && n < max; c++)
			ids[n++] = (kvc_u32)id;
	return n;
}

kvc_u32 ref_find(const struct ref *r, const kvc_u8 *hash)
{
	kvc_u64 i;

	for (i = 0; i < r->nr_index; i++)
		if (r->index[i].id != KVC_NONE && !memcmp(r->index[i].hash, hash, KVC_HASH_BYTES))
			return r->index[i].id;
	return KVC_NONE;
}

static void ref_index_set(struct ref *r, const kvc_u8 *hash, kvc_u32 id)
{
	kvc_u64 i, spare = r->nr_index;

	for (i = 0; i < r->nr_index; i++) {
		if (!memcmp(r->index[i].hash, hash, KVC_HASH_BYTES)) {
			r->index[i].id = id;
			return;
		}
		if (r->index[i].id == KVC_NONE && spare == r->nr_index)
			spare = i;
	}
	if (id == KVC_NONE)
		return;
	/* Absent hashes are kept (to check kvc_find misses them) until the slot is wanted. */
	if (spare == r->nr_index) {
		if (r->nr_index == r->index_cap) {
			r->index_cap = r->index_cap ? r->index_cap * 2 : 64;
			r->index = xrealloc(r->index, r->index_cap * sizeof(*r->index));
		}
		r->nr_index++;
	}
	memcpy(r->index[spare].hash, hash, KVC_HASH_BYTES);
	r->index[spare].id = id;
}

/* The cached block that goes first: lowest priority, then released longest ago. */
static kvc_u32 ref_victim(const struct ref *r)
{
	kvc_u32 best = KVC_NONE;
	kvc_u64 id;

	for (id = 0; id < r->registered; id++) {
		const struct ref_block *b = &r->blk[id];

		if (b->state != KVC_BLOCK_CACHED)
			continue;
		if (best == KVC_NONE || b->prio < r->blk[best].prio ||
		    (b->prio == r->blk[best].prio && b->stamp < r->blk[best].stamp))
			best = (kvc_u32)id;
	}
	return best;
}

kvc_u32 ref_lru(const struct ref *r, kvc_u32 *ids, kvc_u32 max)
{
	kvc_u32 n = 0, i, j;
	kvc_u64 id;

	for (id = 0; id < r->registered && n < max; id++)
		if (r->blk[id].state == KVC_BLOCK_CACHED)
			ids[n++] = (kvc_u32)id;
	/* Insertion sort by (priority, stamp): small lists only. */
	for (i = 1; i < n; i++) {
		kvc_u32 v = ids[i];

		for (j = i; j > 0; j--) {
			const struct ref_block *a = &r->blk[ids[j - 1]], *b = &r->blk[v];

			if (a->prio < b->prio || (a->prio == b->prio && a->stamp < b->stamp))
				break;
			ids[j] = ids[j - 1];
		}
		ids[j] = v;
	}
	return n;
}

/* One more reader on id for holder h. */
static void ref_get(struct ref *r, unsigned int h, kvc_u32 id)
{
	if (r->blk[id].state == KVC_BLOCK_CACHED)
		ref_state(r, id, KVC_BLOCK_PUBLISHED);
	r->blk[id].readers++;
	r->readers++;
	r->held[h][id]++;
	r->held_total[h]++;
}

/* One reader less; the last one makes the block CACHED, newest (stamp 0: set later). */
static void ref_put(struct ref *r, unsigned int h, kvc_u32 id, bool stamp)
{
	r->held[h][id]--;
	r->held_total[h]--;
	r->readers--;
	if (--r->blk[id].readers == 0) {
		ref_state(r, id, KVC_BLOCK_CACHED);
		r->blk[id].stamp = stamp ? ++r->clock : 0;
	}
}

/* ---- following kvcore's callbacks -------------------------------------- */

/*
 * What the model knows about one call into kvcore: its callback trace, the
 * model's own copy of the host (whose answers the model uses), and whether
 * kvcore's allocation failed during the call.
 */
struct ref_run {
	struct pair *p;
	const char *op;
	struct host mh;
	unsigned int pos;		/* next trace entry */
	bool fault, fault_used;
	unsigned long long core_grows;	/* grow calls kvcore made */
	unsigned long long grows;	/* grow calls the model made */
	bool bad;
};

static void run_start(struct ref_run *run, struct pair *p, const char *op, const struct host *before,
		      bool fault)
{
	memset(run, 0, sizeof(*run));
	run->p = p;
	run->op = op;
	run->mh = *before;
	/* The model's host copy must not share or grow the trace. */
	run->mh.trace = NULL;
	run->mh.nr_trace = run->mh.trace_cap = 0;
	run->fault = fault;
	run->core_grows = p->h.calls;
}

static const char *kind_name(int kind)
{
	return kind == TR_GROW ? "grow" : kind == TR_REFILL ? "refill" : "evicted";
}

/* The next callback kvcore made, which the model expects to be of kind. */
static const struct trace_ent *run_next(struct ref_run *run, int kind, const char *what)
{
	const struct trace_ent *t;

	if (run->bad)
		return NULL;
	if (run->pos >= run->p->h.nr_trace) {
		fail(run->p, "%s: model expects a %s call (%s) after %u callbacks; kvcore made none",
		     run->op, kind_name(kind), what, run->pos);
		run->bad = true;
		return NULL;
	}
	t = &run->p->h.trace[run->pos++];
	if (t->kind != kind) {
		fail(run->p, "%s: callback %u is %s(%llu, %llu); model expects %s (%s)", run->op,
		     run->pos - 1, kind_name(t->kind), (ull)t->a, (ull)t->b, kind_name(kind), what);
		run->bad = true;
		return NULL;
	}
	return t;
}

static bool run_done(struct ref_run *run)
{
	if (run->bad)
		return false;
	if (run->pos != run->p->h.nr_trace) {
		const struct trace_ent *t = &run->p->h.trace[run->pos];

		fail(run->p, "%s: kvcore made %u callbacks, model %u; the first extra is %s(%llu, %llu)",
		     run->op, run->p->h.nr_trace, run->pos, kind_name(t->kind), (ull)t->a,
		     (ull)t->b);
		run->bad = true;
		return false;
	}
	return true;
}

/* The model grows: kvcore's next callback must be this grow; the model's host answers. */
static long long run_grow(struct ref_run *run, kvc_u64 want)
{
	const struct trace_ent *t = run_next(run, TR_GROW, "grow");
	long long got;

	if (!t)
		return LLONG_MIN;
	run->grows++;
	if (t->a != want) {
		fail(run->p, "%s: grow call %llu wants %llu bytes, model %llu", run->op, run->grows,
		     (ull)t->a, (ull)want);
		run->bad = true;
		return LLONG_MIN;
	}
	got = host_answer(&run->mh, want);
	if (got != t->ret) {
		fail(run->p, "%s: host answered grow %lld, model's host %lld", run->op, t->ret, got);
		run->bad = true;
		return LLONG_MIN;
	}
	return got;
}

/* An eviction the model predicts: kvcore's next callback must report exactly it. */
static bool run_evicted(struct ref_run *run, kvc_u32 id, unsigned int cause)
{
	const struct trace_ent *t = run_next(run, TR_EVICTED, "evicted");
	const struct ref_block *b = &run->p->r.blk[id];

	if (!t)
		return false;
	if (t->a != id || t->b != cause || memcmp(t->hash, b->hash, KVC_HASH_BYTES) || t->in_index) {
		fail(run->p, "%s: evicted(id %llu, hash %s, cause %llu%s); model evicts id %u "
		     "(prio %u, hash %s) cause %u", run->op, (ull)t->a, hstr(t->hash), (ull)t->b,
		     t->in_index ? ", hash still in the index" : "", id, b->prio, hstr(b->hash),
		     cause);
		run->bad = true;
		return false;
	}
	return true;
}

/* A cached block leaves the index and becomes FREE. */
static void ref_evict_one(struct ref *r, kvc_u32 id, unsigned int cause)
{
	ref_index_set(r, r->blk[id].hash, KVC_NONE);
	ref_state(r, id, KVC_BLOCK_FREE);
	r->st.evictions[cause]++;
}

/*
 * Registering new blocks may need kvcore's own memory.  When kvcore's
 * allocation failed during this call, the failure is the registration
 * kvcore reached last, i.e. the one after as many grow calls as it made.
 */
static int ref_try_register(struct ref *r, struct ref_run *run)
{
	if (r->backed_bytes / r->block_bytes == r->registered)
		return 0;
	if (run->fault && !run->fault_used && run->grows == run->core_grows) {
		run->fault_used = true;
		return -ENOMEM;
	}
	ref_register(r);
	return 0;
}

/* Callback errnos that mean "no room here", which eviction may still cure. */
static bool no_room(long long err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/*
 * Everything of ALLOC except picking the ids: validation, quota, the
 * refill and grow protocol, eviction, and what stays behind on failure.
 * Returns the expected result; on success the model has at least count
 * FREE blocks, which kvcore's ids must be taken from.
 */
static int ref_alloc_prepare(struct ref *r, struct ref_run *run, kvc_u32 owner, kvc_u32 count)
{
	kvc_u64 range = r->nr_blocks * r->block_bytes;
	bool tenant = false;
	unsigned int cause;
	long long ret;

	if (!count || owner == KVC_OWNER_NONE)
		return -EINVAL;
	/* More than free, cached and holes plus the unbacked rest of the range. */
	if (count > r->n[KVC_BLOCK_FREE] + r->n[KVC_BLOCK_CACHED] + r->n[KVC_BLOCK_HOLE] +
		    (r->nr_blocks - r->registered)) {
		r->st.last_pressure_cause = KVC_EVICT_QUOTA;	/* more than the range holds */
		ret = -ENOSPC;
		goto out_fail;
	}
	/*
	 * Blocks whose backing came in earlier become ids first; when that
	 * needs memory that is not there, free blocks can still serve.
	 */
	ret = ref_try_register(r, run);
	if (ret && r->n[KVC_BLOCK_FREE] < count)
		goto out_fail;
	ret = 0;
	/* Holes are refilled first, one block per call, only as many as missing. */
	while (r->n[KVC_BLOCK_FREE] < count && r->n[KVC_BLOCK_HOLE]) {
		const struct trace_ent *t = run_next(run, TR_REFILL, "a hole");
		kvc_u64 id;
		int ans;

		if (!t)
			return INT_MIN;
		id = t->a / r->block_bytes;
		if (t->a % r->block_bytes || t->b != r->block_bytes || id >= r->registered ||
		    r->blk[id].state != KVC_BLOCK_HOLE) {
			fail(run->p, "%s: refill(%llu, %llu) is not one hole block", run->op,
			     (ull)t->a, (ull)t->b);
			run->bad = true;
			return INT_MIN;
		}
		ans = host_refill_answer(&run->mh, t->b);
		if (ans != t->ret) {
			fail(run->p, "%s: host answered refill %lld, model's host %d", run->op,
			     t->ret, ans);
			run->bad = true;
			return INT_MIN;
		}
		if (ans) {
			tenant = ans == -EDQUOT;
			ret = ans;
			break;
		}
		ref_state(r, (kvc_u32)id, KVC_BLOCK_FREE);
	}
	/* Then the range grows by exactly what completes the missing blocks. */
	while (!ret && r->n[KVC_BLOCK_FREE] < count && r->registered < r->nr_blocks) {
		kvc_u64 blocks = r->registered + (count - r->n[KVC_BLOCK_FREE]);
		long long got;

		if (blocks > r->nr_blocks)
			blocks = r->nr_blocks;	/* the rest is for eviction */
		got = run_grow(run, blocks * r->block_bytes - r->backed_bytes);
		if (got == LLONG_MIN)
			return INT_MIN;
		if (got < 0) {
			tenant = got == -EDQUOT;
			/* A host value that is no errno must not pass as one. */
			ret = got >= -4095 ? got : -EIO;
			break;
		}
		if (got == 0) {
			ret = -ENOSPC;
			break;
		}
		if ((kvc_u64)got > range - r->backed_bytes)
			got = (long long)(range - r->backed_bytes);
		r->backed_bytes += (kvc_u64)got;
		ret = ref_try_register(r, run);
	}
	if (ret && !no_room(ret))
		goto out_fail;
	if (r->n[KVC_BLOCK_FREE] >= count)
		return 0;
	/* Out of room, for this reason (kept for the pressure event, success or not). */
	if (r->registered == r->nr_blocks && !r->n[KVC_BLOCK_HOLE])
		cause = KVC_EVICT_QUOTA;	/* the whole range is there */
	else
		cause = tenant ? KVC_EVICT_TENANT : KVC_EVICT_POOL;
	r->st.last_pressure_cause = cause;
	/* Cached blocks of this space make way, but only if that suffices. */
	if (r->n[KVC_BLOCK_FREE] + r->n[KVC_BLOCK_CACHED] < count) {
		ret = -ENOSPC;
		goto out_fail;
	}
	while (r->n[KVC_BLOCK_FREE] < count) {
		kvc_u32 v = ref_victim(r);

		if (!run_evicted(run, v, cause))
			return INT_MIN;
		ref_evict_one(r, v, cause);
	}
	r->st.pressure++;
	return 0;

out_fail:
	r->st.alloc_failures++;
	return (int)ret;
}

/* ---- the pair ---------------------------------------------------------- */

#define OWNERS_CHECKED 10
static const kvc_u32 checked_owners[OWNERS_CHECKED] = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 0xffffffffu,
};

#define STAT(f) { #f, __builtin_offsetof(struct kvc_space_stats, f) }
static const struct {
	const char *name;
	size_t off;
} stat_fields[] = {
	STAT(allocs), STAT(frees), STAT(alloc_failures), STAT(hits), STAT(misses),
	STAT(inserts), STAT(dedups), STAT(pressure), STAT(last_pressure_cause),
	STAT(evictions[KVC_EVICT_QUOTA]), STAT(evictions[KVC_EVICT_POOL]),
	STAT(evictions[KVC_EVICT_TENANT]), STAT(evictions[KVC_EVICT_RECLAIM]),
	STAT(evictions[KVC_EVICT_ADMIN]),
};
#undef STAT

static bool cmp_stats(struct pair *p, const char *after)
{
	const char *a = (const char *)&p->s.stats, *b = (const char *)&p->r.st;
	unsigned int i;

	/* Every field: a new one that the model does not know fails the build check below. */
	_Static_assert(sizeof(stat_fields) / sizeof(stat_fields[0]) ==
		       sizeof(struct kvc_space_stats) / sizeof(kvc_u64),
		       "the model does not know every field of struct kvc_space_stats");
	for (i = 0; i < sizeof(stat_fields) / sizeof(stat_fields[0]); i++) {
		kvc_u64 x, y;

		memcpy(&x, a + stat_fields[i].off, sizeof(x));
		memcpy(&y, b + stat_fields[i].off, sizeof(y));
		if (x != y) {
			fail(p, "after %s: stats.%s %llu, model %llu", after, stat_fields[i].name,
			     (ull)x, (ull)y);
			return false;
		}
	}
	return true;
}

static const char *const state_names[] = { "free", "owned", "published", "cached", "hole" };

static const char *sname(unsigned int st)
{
	return st < KVC_BLOCK_STATES ? state_names[st] : "?";
}

static bool cmp_blocks(struct pair *p, const char *after)
{
	const struct kvc_space *s = &p->s;
	const struct ref *r = &p->r;
	kvc_u64 id;

	for (id = 0; id < r->registered; id++) {
		const struct kvc_block *b = &s->blocks[id];
		const struct ref_block *m = &r->blk[id];
		bool keyed = m->state == KVC_BLOCK_PUBLISHED || m->state == KVC_BLOCK_CACHED;

		if (b->state != m->state || b->owner != m->owner) {
			fail(p, "after %s: block %llu %s owner %u, model %s owner %u", after, (ull)id,
			     sname(b->state), b->owner, sname(m->state), m->owner);
			return false;
		}
		if (m->state == KVC_BLOCK_PUBLISHED && b->readers != m->readers) {
			fail(p, "after %s: block %llu has %u readers, model %u", after, (ull)id,
			     b->readers, m->readers);
			return false;
		}
		if (keyed && (b->priority != m->prio ||
			      memcmp(s->hashes[id], m->hash, KVC_HASH_BYTES) ||
			      kvc_block_hash(s, (kvc_u32)id) != s->hashes[id])) {
			fail(p, "after %s: block %llu prio %u hash %s, model prio %u hash %s", after,
			     (ull)id, b->priority, hstr(s->hashes[id]), m->prio, hstr(m->hash));
			return false;
		}
	}
	return true;
}

/* kvc_find against the model's index, present and absent hashes. */
static bool cmp_index(struct pair *p, const char *after)
{
	const struct ref *r = &p->r;
	kvc_u64 i;

	for (i = 0; i < r->nr_index; i++) {
		kvc_u32 got = kvc_find(&p->s, r->index[i].hash);

		if (got != r->index[i].id) {
			fail(p, "after %s: kvc_find(%s) = %d, model %d", after,
			     hstr(r->index[i].hash), (int)got, (int)r->index[i].id);
			return false;
		}
	}
	return true;
}

/* kvc_lru_first/next walk the cached blocks in (priority, release time) order. */
static bool cmp_lru(struct pair *p, const char *after)
{
	const struct ref *r = &p->r;
	kvc_u32 id = kvc_lru_first(&p->s), prev = KVC_NONE;
	kvc_u64 n = 0;

	while (id != KVC_NONE) {
		const struct ref_block *b;

		if (id >= r->registered || r->blk[id].state != KVC_BLOCK_CACHED ||
		    n >= r->n[KVC_BLOCK_CACHED]) {
			fail(p, "after %s: LRU entry %llu is block %u, model: %s", after, (ull)n, id,
			     id >= r->registered ? "not a block" :
			     r->blk[id].state != KVC_BLOCK_CACHED ? sname(r->blk[id].state) :
			     "one too many");
			return false;
		}
		b = &r->blk[id];
		if (prev != KVC_NONE &&
		    (b->prio < r->blk[prev].prio ||
		     (b->prio == r->blk[prev].prio && b->stamp < r->blk[prev].stamp))) {
			fail(p, "after %s: LRU has block %u (prio %u, released at %llu) after %u "
			     "(prio %u, released at %llu)", after, id, b->prio, (ull)b->stamp, prev,
			     r->blk[prev].prio, (ull)r->blk[prev].stamp);
			return false;
		}
		prev = id;
		n++;
		id = kvc_lru_next(&p->s, id);
	}
	if (n != r->n[KVC_BLOCK_CACHED]) {
		fail(p, "after %s: LRU walk finds %llu cached blocks, model %llu", after, (ull)n,
		     (ull)r->n[KVC_BLOCK_CACHED]);
		return false;
	}
	return true;
}

static bool cmp_refs(struct pair *p, const char *after)
{
	const struct ref *r = &p->r;
	unsigned int h;
	kvc_u64 id;

	for (h = 0; h < NR_HOLDERS; h++) {
		const struct kvc_refs *k = &p->refs[h];
		kvc_u64 used = 0;

		if (k->total != r->held_total[h]) {
			fail(p, "after %s: holder %u holds %llu references, model %llu", after, h,
			     (ull)k->total, (ull)r->held_total[h]);
			return false;
		}
		if (!k->cap && !r->held_total[h])
			continue;
		for (id = 0; id < r->registered; id++) {
			kvc_u32 got = kvc_refs_count(k, (kvc_u32)id);

			if (got != r->held[h][id]) {
				fail(p, "after %s: holder %u holds %u references on block %llu, "
				     "model %u", after, h, got, (ull)id, r->held[h][id]);
				return false;
			}
			used += got != 0;
		}
		if (k->used != used) {
			fail(p, "after %s: holder %u table uses %u slots for %llu blocks", after, h,
			     k->used, (ull)used);
			return false;
		}
	}
	return true;
}

bool pair_compare(struct pair *p, const char *after)
{
	const struct kvc_space *s = &p->s;
	const struct ref *r = &p->r;
	unsigned char *in_stack;
	char msg[256];
	kvc_u64 i;
	int k;

	if (p->failed)
		return false;
	if (!p->live)
		return true;
	msg[0] = 0;
	if (kvc_space_check(s, msg, sizeof(msg))) {
		fail(p, "after %s: kvc_space_check: %s", after, msg);
		return false;
	}
	if (s->block_bytes != r->block_bytes || s->nr_blocks != r->nr_blocks ||
	    s->backed_bytes != r->backed_bytes || s->backed_blocks != r->registered ||
	    s->nr_free != r->n[KVC_BLOCK_FREE] || s->nr_owned != r->n[KVC_BLOCK_OWNED] ||
	    s->nr_published != r->n[KVC_BLOCK_PUBLISHED] ||
	    s->nr_cached != r->n[KVC_BLOCK_CACHED] || s->nr_holes != r->n[KVC_BLOCK_HOLE] ||
	    s->nr_readers != r->readers) {
		fail(p, "after %s: space bb %llu nb %llu backed %llu/%llu free %llu owned %llu "
		     "published %llu cached %llu holes %llu readers %llu; model bb %llu nb %llu "
		     "backed %llu/%llu free %llu owned %llu published %llu cached %llu holes %llu "
		     "readers %llu", after,
		     (ull)s->block_bytes, (ull)s->nr_blocks, (ull)s->backed_bytes,
		     (ull)s->backed_blocks, (ull)s->nr_free, (ull)s->nr_owned, (ull)s->nr_published,
		     (ull)s->nr_cached, (ull)s->nr_holes, (ull)s->nr_readers,
		     (ull)r->block_bytes, (ull)r->nr_blocks, (ull)r->backed_bytes,
		     (ull)r->registered, (ull)r->n[KVC_BLOCK_FREE], (ull)r->n[KVC_BLOCK_OWNED],
		     (ull)r->n[KVC_BLOCK_PUBLISHED], (ull)r->n[KVC_BLOCK_CACHED],
		     (ull)r->n[KVC_BLOCK_HOLE], (ull)r->readers);
		return false;
	}
	if (!cmp_stats(p, after) || !cmp_blocks(p, after) || !cmp_index(p, after) ||
	    !cmp_lru(p, after) || !cmp_refs(p, after))
		return false;
	/* The free stack holds each free block exactly once. */
	in_stack = xcalloc(r->registered, 1);
	for (i = 0; i < s->nr_free; i++) {
		kvc_u32 fid = s->free_stack[i];

		if (fid >= r->registered || r->blk[fid].state != KVC_BLOCK_FREE || in_stack[fid]) {
			fail(p, "after %s: free stack entry %llu is block %u", after, (ull)i, fid);
			free(in_stack);
			return false;
		}
		in_stack[fid] = 1;
	}
	free(in_stack);
	for (k = 0; k < OWNERS_CHECKED; k++) {
		kvc_u32 o = checked_owners[k];
		kvc_u64 got = kvc_owner_blocks(s, o), want = ref_owner_blocks(r, o);

		if (got != want) {
			fail(p, "after %s: kvc_owner_blocks(%u) = %llu, model %llu", after, o,
			     (ull)got, (ull)want);
			return false;
		}
	}
	return true;
}

int pair_init(struct pair *p, kvc_u64 block_bytes, kvc_u64 nr_blocks)
{
	int ret, exp;

	memset(p, 0, sizeof(*p));
	host_set(&p->h, HOST_EXACT, 0);
	host_refill_set(&p->h, REFILL_POOL, 0);
	p->h.pool_left = HOST_UNLIMITED;
	p->h.check_in_grow = true;
	host_trace_reset(&p->h);
	ret = kvc_space_init(&p->s, block_bytes, nr_blocks, &host_ops, &p->h);
	exp = ref_init(&p->r, block_bytes, nr_blocks);
	if (ret != exp)
		fail(p, "init(%llu, %llu) = %d, model %d", (ull)block_bytes, (ull)nr_blocks, ret,
		     exp);
	p->live = ret == 0;
	pair_compare(p, "init");
	return ret;
}

void pair_limits(struct pair *p, kvc_u32 max_readers, kvc_u64 refs_limit)
{
	unsigned int h;
	kvc_u64 id;

	/* Never below a block's readers: kvc_space_check holds that bound. */
	for (id = 0; id < p->r.registered; id++)
		if (p->r.blk[id].readers > max_readers)
			max_readers = p->r.blk[id].readers;
	p->s.max_readers = max_readers;
	p->r.max_readers = max_readers;
	for (h = 0; h < NR_HOLDERS; h++)
		p->refs[h].limit = refs_limit;
	p->r.refs_limit = refs_limit;
}

void pair_fini(struct pair *p)
{
	unsigned int h;

	for (h = 0; h < NR_HOLDERS; h++) {
		if (p->live)
			kvc_release_refs(&p->s, &p->refs[h]);
		memset(&p->refs[h], 0, sizeof(p->refs[h]));
	}
	if (p->live)
		kvc_space_fini(&p->s);
	p->live = false;
	ref_fini(&p->r);
	host_free(&p->h);
}

#define ID_POISON 0xa5a5a5a5u
/* ids[] is only written on success; callers pass at least this many. */
#define ID_POISON_MAX 64u

static bool fault_hit(long before)
{
	return before > 0 && kvc_fail_alloc_countdown == 0;
}

int pair_alloc(struct pair *p, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids)
{
	long before = kvc_fail_alloc_countdown;
	struct host host_before;
	struct ref_run run;
	int ret, exp;
	kvc_u32 i;

	if (!p->live)
		return -EINVAL;
	for (i = 0; i < count && i < ID_POISON_MAX; i++)
		ids[i] = ID_POISON ^ i;
	host_trace_reset(&p->h);
	host_before = p->h;
	ret = kvc_alloc(&p->s, owner, count, ids);

	run_start(&run, p, "alloc", &host_before, fault_hit(before));
	exp = ref_alloc_prepare(&p->r, &run, owner, count);
	if (exp == INT_MIN)
		return ret;		/* the trace disagreed; fail() said how */
	if (ret != exp) {
		fail(p, "alloc(owner %u, count %u) = %d, model %d (grow calls %llu, model %llu, "
		     "refills %llu, evictions %llu%s)", owner, count, ret, exp, p->h.calls,
		     run.grows, p->h.refills, p->h.evictions,
		     run.fault ? ", kvcore allocation failed" : "");
		return ret;
	}
	if (!run_done(&run))
		return ret;
	if (run.fault && !run.fault_used) {
		fail(p, "alloc(owner %u, count %u): kvcore's allocation failed unnoticed", owner,
		     count);
		return ret;
	}
	if (p->h.bad_in_grow) {
		fail(p, "alloc(owner %u, count %u): space inconsistent inside grow/refill", owner,
		     count);
		return ret;
	}
	if (ret) {
		for (i = 0; i < count && i < ID_POISON_MAX; i++) {
			if (ids[i] != (ID_POISON ^ i)) {
				fail(p, "alloc(owner %u, count %u) = %d wrote ids[%u]", owner,
				     count, ret, i);
				return ret;
			}
		}
	} else {
		for (i = 0; i < count; i++) {
			kvc_u32 id = ids[i];

			if (id >= p->r.registered || p->r.blk[id].state != KVC_BLOCK_FREE) {
				fail(p, "alloc(owner %u, count %u): ids[%u] = %u is %s", owner,
				     count, i, id,
				     id >= p->r.registered ? "not backed" :
				     p->r.blk[id].state == KVC_BLOCK_OWNED &&
				     p->r.blk[id].owner == owner ? "repeated" :
				     sname(p->r.blk[id].state));
				return ret;
			}
			ref_state(&p->r, id, KVC_BLOCK_OWNED);
			p->r.blk[id].owner = owner;
		}
		p->r.st.allocs += count;
	}
	pair_compare(p, "alloc");
	return ret;
}

/* Calls that must neither allocate nor call back (other than evicted). */
static void expect_quiet(struct pair *p, long before, const char *op)
{
	if (kvc_fail_alloc_countdown != before || p->h.calls || p->h.refills)
		fail(p, "%s allocated memory or called grow/refill", op);
}

/*
 * One id of a FREE or PUBLISH batch: in range and not seen before in the
 * batch (-EINVAL), then owned by owner (-EPERM); marks it seen.
 */
static int ref_owned_once(const struct ref *r, kvc_u32 owner, kvc_u32 id, unsigned char *seen)
{
	if (id >= r->registered || seen[id])
		return -EINVAL;
	if (owner == KVC_OWNER_NONE || r->blk[id].state != KVC_BLOCK_OWNED ||
	    r->blk[id].owner != owner)
		return -EPERM;
	seen[id] = 1;
	return 0;
}

static int ref_free(struct ref *r, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids)
{
	unsigned char *seen;
	kvc_u32 i;
	int ret = 0;

	if (!count)
		return -EINVAL;
	seen = xcalloc(r->registered, 1);
	/* The first bad id, in order, decides the errno. */
	for (i = 0; i < count && !ret; i++)
		ret = ref_owned_once(r, owner, ids[i], seen);
	free(seen);
	if (ret)
		return ret;
	for (i = 0; i < count; i++)
		ref_state(r, ids[i], KVC_BLOCK_FREE);
	r->st.frees += count;
	return 0;
}

/* A failed call must leave every byte of the space as it was. */
static void expect_unchanged(struct pair *p, struct snap *sn, const char *op, int ret)
{
	if (!snap_same(sn, &p->s))
		fail(p, "%s failed (%d) but changed the space", op, ret);
}

int pair_free(struct pair *p, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids)
{
	long before = kvc_fail_alloc_countdown;
	struct snap sn;
	int ret, exp;

	if (!p->live)
		return -EINVAL;
	host_trace_reset(&p->h);
	snap_take(&sn, &p->s);
	ret = kvc_free(&p->s, owner, count, ids);
	expect_quiet(p, before, "free");
	if (ret)
		expect_unchanged(p, &sn, "free", ret);
	snap_free(&sn);
	exp = ref_free(&p->r, owner, count, ids);
	if (ret != exp)
		fail(p, "free(owner %u, count %u, ids[0] %u) = %d, model %d", owner, count,
		     count ? ids[0] : 0, ret, exp);
	pair_compare(p, "free");
	return ret;
}

static kvc_u64 ref_release(struct ref *r, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	if (owner == KVC_OWNER_NONE)
		return 0;
	for (id = 0; id < r->registered; id++) {
		if (r->blk[id].state == KVC_BLOCK_OWNED && r->blk[id].owner == owner) {
			ref_state(r, (kvc_u32)id, KVC_BLOCK_FREE);
			n++;
		}
	}
	r->st.frees += n;
	return n;
}

kvc_u64 pair_release(struct pair *p, kvc_u32 owner)
{
	long before = kvc_fail_alloc_countdown;
	kvc_u64 n, exp;

	if (!p->live)
		return 0;
	host_trace_reset(&p->h);
	n = kvc_release_owner(&p->s, owner);
	expect_quiet(p, before, "release");
	if (p->h.evictions)
		fail(p, "release(owner %u) evicted", owner);
	exp = ref_release(&p->r, owner);
	if (n != exp)
		fail(p, "release(owner %u) = %llu, model %llu", owner, (ull)n, (ull)exp);
	pair_compare(p, "release");
	return n;
}

/* ---- the prefix cache -------------------------------------------------- */

/*
 * PUBLISH's validation.  Priorities and ids are both checked before
 * anything changes; when a batch has a bad priority and an id of another
 * owner, either errno is a right answer (alt).
 */
static int ref_publish_check(const struct ref *r, kvc_u32 owner, kvc_u32 count,
			     const struct kvc_publish_entry *e, int *alt)
{
	unsigned char *seen;
	int prio_bad = 0, ret = 0;
	kvc_u32 i;

	*alt = 0;
	if (!count)
		return -EINVAL;
	for (i = 0; i < count; i++)
		prio_bad |= e[i].priority > KVC_PRIO_MAX;
	seen = xcalloc(r->registered, 1);
	for (i = 0; i < count && !ret; i++)
		ret = ref_owned_once(r, owner, e[i].id, seen);
	free(seen);
	if (prio_bad && ret == -EPERM) {
		*alt = -EPERM;
		return -EINVAL;
	}
	return prio_bad ? -EINVAL : ret;
}

/*
 * The reference bounds, checked on the state before the batch and by its
 * whole size: the holder's total, and every block a hash may land on.
 */
static int ref_publish_bound(const struct ref *r, kvc_u32 owner, kvc_u32 count,
			     const struct kvc_publish_entry *e)
{
	kvc_u32 i;

	if (r->held_total[holder_of(owner)] + count > r->refs_limit ||
	    !ref_readers_room(r, 0, count))
		return -EOVERFLOW;
	for (i = 0; i < count; i++) {
		kvc_u32 have = ref_find(r, e[i].hash);

		if (have != KVC_NONE && !ref_readers_room(r, r->blk[have].readers, count))
			return -EOVERFLOW;
	}
	return 0;
}

/* Apply a valid PUBLISH to the model; e[] gets the expected outputs. */
static int ref_publish(struct ref *r, kvc_u32 owner, kvc_u32 count, struct kvc_publish_entry *e)
{
	unsigned int h = holder_of(owner);
	int dedups = 0;
	kvc_u32 i;

	for (i = 0; i < count; i++) {
		kvc_u32 id = e[i].id, have = ref_find(r, e[i].hash);

		if (have != KVC_NONE) {
			/* The hash is there (maybe from earlier in this batch): ours is freed. */
			ref_state(r, id, KVC_BLOCK_FREE);
			r->st.frees++;
			r->st.dedups++;
			ref_get(r, h, have);
			e[i].id = have;
			e[i].flags = KVC_PUBLISH_DEDUP;
			dedups++;
			continue;
		}
		ref_state(r, id, KVC_BLOCK_PUBLISHED);
		r->blk[id].prio = (kvc_u8)e[i].priority;
		r->blk[id].readers = 0;
		memcpy(r->blk[id].hash, e[i].hash, KVC_HASH_BYTES);
		ref_index_set(r, e[i].hash, id);
		r->st.inserts++;
		ref_get(r, h, id);
		e[i].flags = 0;
	}
	return dedups;
}

int pair_publish(struct pair *p, kvc_u32 owner, kvc_u32 count, struct kvc_publish_entry *e)
{
	long before = kvc_fail_alloc_countdown;
	struct kvc_publish_entry *want;
	struct snap sn;
	int ret, exp, alt;

	if (!p->live)
		return -EINVAL;
	want = xcalloc(count, sizeof(*want));
	if (count)
		memcpy(want, e, count * sizeof(*e));
	host_trace_reset(&p->h);
	snap_take(&sn, &p->s);
	ret = kvc_publish(&p->s, owner, &p->refs[holder_of(owner)], count, e);
	if (p->h.nr_trace)
		fail(p, "publish called back the host");
	exp = ref_publish_check(&p->r, owner, count, want, &alt);
	if (!exp)
		exp = ref_publish_bound(&p->r, owner, count, want);
	if (!exp && fault_hit(before))
		exp = -ENOMEM;		/* the reference table could not grow */
	/* Valid batches return their dedup count, compared below. */
	if ((ret < 0 || exp < 0) && ret != exp && !(alt && ret == alt)) {
		fail(p, "publish(owner %u, count %u, ids[0] %u) = %d, model %d%s", owner, count,
		     count ? want[0].id : 0, ret, exp, fault_hit(before) ? " (allocation failed)" : "");
		goto out;
	}
	if (ret < 0) {
		expect_unchanged(p, &sn, "publish", ret);
		if (count && memcmp(want, e, count * sizeof(*e)))
			fail(p, "publish failed (%d) but wrote its entries", ret);
		goto out;
	}
	exp = ref_publish(&p->r, owner, count, want);
	if (ret != exp) {
		fail(p, "publish(owner %u, count %u) = %d dedups, model %d", owner, count, ret, exp);
		goto out;
	}
	if (memcmp(want, e, count * sizeof(*e))) {
		kvc_u32 i;

		for (i = 0; i < count && !memcmp(&want[i], &e[i], sizeof(*e)); i++)
			;
		fail(p, "publish(owner %u): entry %u id %u flags %u, model id %u flags %u", owner,
		     i, e[i].id, e[i].flags, want[i].id, want[i].flags);
		goto out;
	}
	pair_compare(p, "publish");
out:
	snap_free(&sn);
	free(want);
	return ret;
}

int pair_lookup(struct pair *p, kvc_u32 owner, kvc_u32 count,
		const kvc_u8 (*hashes)[KVC_HASH_BYTES], kvc_u32 *ids)
{
	long before = kvc_fail_alloc_countdown;
	unsigned int h = holder_of(owner);
	struct ref *r = &p->r;
	kvc_u32 *want, n, i;
	struct snap sn;
	bool over;
	int ret;

	if (!p->live)
		return -EINVAL;
	want = xcalloc(count, sizeof(*want));
	host_trace_reset(&p->h);
	snap_take(&sn, &p->s);
	ret = kvc_lookup(&p->s, &p->refs[h], count, hashes, ids);
	if (p->h.nr_trace)
		fail(p, "lookup called back the host");
	for (n = 0; n < count; n++) {
		want[n] = ref_find(r, hashes[n]);
		if (want[n] == KVC_NONE)
			break;
	}
	over = r->held_total[h] + n > r->refs_limit;
	for (i = 0; i < n && !over; i++)
		over = !ref_readers_room(r, r->blk[want[i]].readers, n);
	if (over) {
		if (ret != -EOVERFLOW)
			fail(p, "lookup(owner %u, count %u) = %d past a reference bound, model %d",
			     owner, count, ret, -EOVERFLOW);
		else
			expect_unchanged(p, &sn, "lookup", ret);
		goto out;
	}
	if (fault_hit(before)) {
		/* Nothing taken, nothing counted. */
		if (ret != -ENOMEM)
			fail(p, "lookup(count %u) = %d though its allocation failed", count, ret);
		else
			expect_unchanged(p, &sn, "lookup", ret);
		goto out;
	}
	if (ret != (int)n) {
		fail(p, "lookup(owner %u, count %u) = %d hits, model %u", owner, count, ret, n);
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (ids[i] != want[i]) {
			fail(p, "lookup: ids[%u] = %u, model %u", i, ids[i], want[i]);
			goto out;
		}
		ref_get(r, h, want[i]);
	}
	r->st.hits += n;
	r->st.misses += count - n;
	pair_compare(p, "lookup");
out:
	snap_free(&sn);
	free(want);
	return ret;
}

int pair_unref(struct pair *p, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids)
{
	long before = kvc_fail_alloc_countdown;
	unsigned int h = holder_of(owner);
	struct ref *r = &p->r;
	kvc_u32 *tally = NULL, i;
	struct snap sn;
	int ret, exp = 0;

	if (!p->live)
		return -EINVAL;
	host_trace_reset(&p->h);
	snap_take(&sn, &p->s);
	ret = kvc_release(&p->s, &p->refs[h], count, ids);
	expect_quiet(p, before, "release of references");
	if (p->h.evictions)
		fail(p, "release of references evicted");
	/* An id may come as often as the holder holds it, no more. */
	if (!count)
		exp = -EINVAL;
	tally = xcalloc(r->registered, sizeof(*tally));
	for (i = 0; i < count && !exp; i++)
		if (ids[i] >= r->registered || ++tally[ids[i]] > r->held[h][ids[i]])
			exp = -EINVAL;
	free(tally);
	if (ret != exp) {
		fail(p, "release refs(owner %u, count %u, ids[0] %u) = %d, model %d", owner, count,
		     count ? ids[0] : 0, ret, exp);
		goto out;
	}
	if (ret) {
		expect_unchanged(p, &sn, "release of references", ret);
		goto out;
	}
	/* In list order: the last reference gone makes a block the newest cached. */
	for (i = 0; i < count; i++)
		ref_put(r, h, ids[i], true);
	pair_compare(p, "release of references");
out:
	snap_free(&sn);
	return ret;
}

kvc_u64 pair_drop_refs(struct pair *p, kvc_u32 owner)
{
	long before = kvc_fail_alloc_countdown;
	unsigned int h = holder_of(owner);
	struct ref *r = &p->r;
	kvc_u64 n, exp, id, steps = 0;
	kvc_u32 v;

	if (!p->live)
		return 0;
	host_trace_reset(&p->h);
	n = kvc_release_refs(&p->s, &p->refs[h]);
	expect_quiet(p, before, "kvc_release_refs");
	if (p->h.evictions)
		fail(p, "kvc_release_refs evicted");
	if (p->refs[h].cap || p->refs[h].keys || p->refs[h].counts || p->refs[h].total)
		fail(p, "kvc_release_refs left its table");
	exp = r->held_total[h];
	for (id = 0; id < r->registered; id++)
		while (r->held[h][id])
			ref_put(r, h, (kvc_u32)id, false);
	if (n != exp)
		fail(p, "kvc_release_refs(holder %u) = %llu, model %llu", h, (ull)n, (ull)exp);
	/*
	 * The order among the blocks this made CACHED is kvcore's: take it
	 * from the LRU walk; each must still be newer than the older ones.
	 */
	for (v = kvc_lru_first(&p->s); v != KVC_NONE && steps++ <= r->registered;
	     v = kvc_lru_next(&p->s, v))
		if (v < r->registered && r->blk[v].state == KVC_BLOCK_CACHED && !r->blk[v].stamp)
			r->blk[v].stamp = ++r->clock;
	for (id = 0; id < r->registered; id++)
		if (r->blk[id].state == KVC_BLOCK_CACHED && !r->blk[id].stamp)
			r->blk[id].stamp = ++r->clock;	/* missing from the LRU: compare says so */
	pair_compare(p, "kvc_release_refs");
	return n;
}

kvc_u64 pair_evict(struct pair *p, kvc_u64 count, unsigned int cause)
{
	long before = kvc_fail_alloc_countdown;
	struct host host_before;
	struct ref *r = &p->r;
	struct ref_run run;
	kvc_u64 n, exp = 0;

	if (!p->live)
		return 0;
	host_trace_reset(&p->h);
	host_before = p->h;
	n = kvc_evict(&p->s, count, cause);
	expect_quiet(p, before, "evict");
	run_start(&run, p, "evict", &host_before, false);
	while (exp < count && r->n[KVC_BLOCK_CACHED]) {
		kvc_u32 v = ref_victim(r);

		if (!run_evicted(&run, v, cause))
			return n;
		ref_evict_one(r, v, cause);
		exp++;
	}
	if (!run_done(&run))
		return n;
	if (n != exp)
		fail(p, "evict(%llu, cause %u) = %llu, model %llu", (ull)count, cause, (ull)n,
		     (ull)exp);
	pair_compare(p, "evict");
	return n;
}

long long pair_reclaim(struct pair *p, kvc_u64 start, kvc_u64 len, unsigned int cause)
{
	long before = kvc_fail_alloc_countdown;
	struct ref *r = &p->r;
	kvc_u64 bb = r->block_bytes, backed = r->registered * bb, first = 0, end = 0, id;
	kvc_u64 n, exp = 0;
	bool ok, want;
	unsigned int i;
	struct snap sn;

	if (!p->live)
		return -1;
	host_trace_reset(&p->h);
	snap_take(&sn, &p->s);
	ok = kvc_range_reclaimable(&p->s, start, len);
	if (!snap_same(&sn, &p->s))
		fail(p, "kvc_range_reclaimable changed the space");
	snap_free(&sn);
	/* Inside the whole backed blocks, and only FREE, CACHED or HOLE blocks touched. */
	want = len && start < backed && len <= backed - start;
	if (want) {
		first = start / bb;
		end = (start + len - 1) / bb + 1;
		for (id = first; id < end && want; id++)
			want = r->blk[id].state == KVC_BLOCK_FREE ||
			       r->blk[id].state == KVC_BLOCK_CACHED ||
			       r->blk[id].state == KVC_BLOCK_HOLE;
	}
	if (ok != want) {
		fail(p, "kvc_range_reclaimable(%llu, %llu) = %d, model %d", (ull)start, (ull)len,
		     ok, want);
		return -1;
	}
	if (!ok)
		return -1;
	n = kvc_reclaim_range(&p->s, start, len, cause);
	expect_quiet(p, before, "reclaim");
	/* Every cached block of the range evicted, once, in any order. */
	for (i = 0; i < p->h.nr_trace; i++) {
		const struct trace_ent *t = &p->h.trace[i];
		kvc_u32 v = (kvc_u32)t->a;

		if (t->kind != TR_EVICTED || t->a < first || t->a >= end ||
		    r->blk[v].state != KVC_BLOCK_CACHED || t->b != cause ||
		    memcmp(t->hash, r->blk[v].hash, KVC_HASH_BYTES) || t->in_index) {
			fail(p, "reclaim(%llu, %llu): callback %u is %s(%llu, %llu), not the eviction "
			     "of a cached block of the range with cause %u", (ull)start, (ull)len, i,
			     kind_name(t->kind), (ull)t->a, (ull)t->b, cause);
			return (long long)n;
		}
		ref_evict_one(r, v, cause);
		exp++;
	}
	for (id = first; id < end; id++) {
		if (r->blk[id].state == KVC_BLOCK_CACHED) {
			fail(p, "reclaim(%llu, %llu) did not evict cached block %llu", (ull)start,
			     (ull)len, (ull)id);
			return (long long)n;
		}
		if (r->blk[id].state != KVC_BLOCK_HOLE)
			ref_state(r, (kvc_u32)id, KVC_BLOCK_HOLE);
	}
	if (n != exp)
		fail(p, "reclaim(%llu, %llu) = %llu, model %llu", (ull)start, (ull)len, (ull)n,
		     (ull)exp);
	pair_compare(p, "reclaim");
	return (long long)n;
}

/* ---- snapshots --------------------------------------------------------- */

static void *dup_mem(const void *src, size_t n)
{
	void *d = xcalloc(1, n);

	if (src && n)
		memcpy(d, src, n);
	return d;
}

void snap_take(struct snap *sn, const struct kvc_space *s)
{
	sn->s = *s;
	sn->blocks = dup_mem(s->blocks, s->capacity * sizeof(*s->blocks));
	sn->stack = dup_mem(s->free_stack, s->capacity * sizeof(*s->free_stack));
	sn->hashes = dup_mem(s->hashes, s->capacity * sizeof(*s->hashes));
	sn->buckets = dup_mem(s->buckets, s->nr_buckets * sizeof(*s->buckets));
}

bool snap_same(const struct snap *sn, const struct kvc_space *s)
{
	const struct kvc_space *o = &sn->s;

	if (memcmp(o, s, sizeof(*s)))
		return false;
	return (!s->capacity ||
		(!memcmp(sn->blocks, s->blocks, s->capacity * sizeof(*s->blocks)) &&
		 !memcmp(sn->stack, s->free_stack, s->capacity * sizeof(*s->free_stack)) &&
		 !memcmp(sn->hashes, s->hashes, s->capacity * sizeof(*s->hashes)))) &&
	       (!s->nr_buckets ||
		!memcmp(sn->buckets, s->buckets, s->nr_buckets * sizeof(*s->buckets)));
}

void snap_free(struct snap *sn)
{
	free(sn->blocks);
	free(sn->stack);
	free(sn->hashes);
	free(sn->buckets);
	memset(sn, 0, sizeof(*sn));
}
