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

/* ---- the host ---------------------------------------------------------- */

void host_set(struct host *h, int mode, long long arg)
{
	h->mode = mode;
	h->arg = arg;
	h->script_len = 0;
	h->script_pos = 0;
}

void host_script(struct host *h, unsigned int n, const long long *vals)
{
	unsigned int i;

	if (n > HOST_SCRIPT_MAX)
		n = HOST_SCRIPT_MAX;
	for (i = 0; i < n; i++)
		h->script[i] = vals[i];
	h->script_len = n;
	h->script_pos = 0;
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

static unsigned long long mix(unsigned long long d, unsigned long long v)
{
	int i;

	for (i = 0; i < 8; i++) {
		d ^= (v >> (i * 8)) & 0xff;
		d *= 0x100000001b3ULL;
	}
	return d;
}

static void trace_add(struct host *h, kvc_u64 want, long long got)
{
	h->calls++;
	h->digest = mix(mix(h->digest, want), (unsigned long long)got);
	h->last_want = want;
}

void host_trace_reset(struct host *h)
{
	h->calls = 0;
	h->digest = 0xcbf29ce484222325ULL;
	h->last_want = 0;
	h->bad_in_grow = false;
}

static long long host_grow(struct kvc_space *s, kvc_u64 want)
{
	struct host *h = s->host;
	long long got;

	/* The first calls of each operation are enough to see it. */
	if (h->check_in_grow && h->calls < 8) {
		char msg[160];

		/* The host may look at the space while it is called. */
		if (kvc_space_check(s, msg, sizeof(msg)))
			h->bad_in_grow = true;
	}
	got = host_answer(h, want);
	trace_add(h, want, got);
	return got;
}

const struct kvc_space_ops host_ops = { .grow = host_grow };

/* ---- the reference model ----------------------------------------------- */

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
	return 0;
}

static void ref_fini(struct ref *r)
{
	free(r->owner);
	memset(r, 0, sizeof(*r));
}

/* Every whole block inside backed_bytes becomes a free, valid id. */
static void ref_register(struct ref *r)
{
	kvc_u64 whole = r->backed_bytes / r->block_bytes, id;

	if (whole > r->cap) {
		kvc_u64 cap = r->cap ? r->cap : 16;
		kvc_u32 *o;

		while (cap < whole)
			cap *= 2;
		o = xcalloc(cap, sizeof(*o));
		if (r->registered)
			memcpy(o, r->owner, r->registered * sizeof(*o));
		free(r->owner);
		r->owner = o;
		r->cap = cap;
	}
	for (id = r->registered; id < whole; id++)
		r->owner[id] = 0;
	r->nr_free += whole - r->registered;
	r->registered = whole;
}

kvc_u64 ref_owner_blocks(const struct ref *r, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	if (owner == KVC_OWNER_NONE)
		return 0;
	for (id = 0; id < r->registered; id++)
		n += r->owner[id] == owner;
	return n;
}

kvc_u32 ref_owned_ids(const struct ref *r, kvc_u32 owner, kvc_u32 *ids, kvc_u32 max)
{
	kvc_u64 id;
	kvc_u32 n = 0;

	for (id = 0; id < r->registered && n < max; id++)
		if (owner != KVC_OWNER_NONE && r->owner[id] == owner)
			ids[n++] = (kvc_u32)id;
	return n;
}

struct ref_run {
	bool fault;			/* kvcore's allocation failed during the call */
	unsigned long long core_calls;	/* grow calls kvcore made */
	unsigned long long calls, digest;
	bool fault_used;
};

/*
 * Registering new blocks may need kvcore's own memory.  When kvcore's
 * allocation failed during this call, the failure is the registration
 * kvcore reached last, i.e. the one after as many grow calls as it made.
 */
static int ref_try_register(struct ref *r, struct ref_run *run)
{
	if (r->backed_bytes / r->block_bytes == r->registered)
		return 0;
	if (run->fault && !run->fault_used && run->calls == run->core_calls) {
		run->fault_used = true;
		return -ENOMEM;
	}
	ref_register(r);
	return 0;
}

/*
 * Everything of ALLOC except picking the ids: validation, quota, the grow
 * protocol and what stays behind on failure.  Returns the expected result.
 */
static int ref_alloc_prepare(struct ref *r, struct host *h, kvc_u32 owner, kvc_u32 count,
			     struct ref_run *run)
{
	kvc_u64 range = r->nr_blocks * r->block_bytes;
	int ret;

	run->calls = 0;
	run->digest = 0xcbf29ce484222325ULL;
	if (!count || owner == KVC_OWNER_NONE)
		return -EINVAL;
	/* More than the free blocks plus the unbacked rest of the range. */
	if (count > r->nr_free + (r->nr_blocks - r->registered)) {
		ret = -ENOSPC;
		goto out_fail;
	}
	/*
	 * Blocks whose backing came in earlier become ids first; when that
	 * needs memory that is not there, free blocks can still serve.
	 */
	ret = ref_try_register(r, run);
	if (ret && r->nr_free < count)
		goto out_fail;
	while (r->nr_free < count) {
		/* Exactly the bytes that complete the missing blocks. */
		kvc_u64 want = (r->registered + (count - r->nr_free)) * r->block_bytes -
			       r->backed_bytes;
		long long got = host_answer(h, want);

		run->calls++;
		run->digest = mix(mix(run->digest, want), (unsigned long long)got);
		if (got < 0) {
			/* A host value that is no errno must not pass as one. */
			ret = got >= -4095 ? (int)got : -EIO;
			goto out_fail;
		}
		if (got == 0) {
			ret = -ENOSPC;
			goto out_fail;
		}
		if ((kvc_u64)got > range - r->backed_bytes)
			got = (long long)(range - r->backed_bytes);
		r->backed_bytes += (kvc_u64)got;
		ret = ref_try_register(r, run);
		if (ret)
			goto out_fail;
	}
	return 0;

out_fail:
	r->alloc_failures++;
	return ret;
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
	for (i = 0; i < count && !ret; i++) {
		kvc_u32 id = ids[i];

		if (id >= r->registered || seen[id])
			ret = -EINVAL;
		else if (owner == KVC_OWNER_NONE || r->owner[id] != owner)
			ret = -EPERM;
		else
			seen[id] = 1;
	}
	free(seen);
	if (ret)
		return ret;
	for (i = 0; i < count; i++)
		r->owner[ids[i]] = 0;
	r->nr_free += count;
	r->nr_owned -= count;
	r->frees += count;
	return 0;
}

static kvc_u64 ref_release(struct ref *r, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	if (owner == KVC_OWNER_NONE)
		return 0;
	for (id = 0; id < r->registered; id++) {
		if (r->owner[id] == owner) {
			r->owner[id] = 0;
			n++;
		}
	}
	r->nr_free += n;
	r->nr_owned -= n;
	r->frees += n;
	return n;
}

/* ---- the pair ---------------------------------------------------------- */

#define OWNERS_CHECKED 10
static const kvc_u32 checked_owners[OWNERS_CHECKED] = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 0xffffffffu,
};

bool pair_compare(struct pair *p, const char *after)
{
	const struct kvc_space *s = &p->s;
	const struct ref *r = &p->r;
	unsigned char *in_stack;
	char msg[256];
	kvc_u64 id, i;
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
	    s->nr_free != r->nr_free || s->nr_owned != r->nr_owned) {
		fail(p, "after %s: space bb %llu nb %llu backed %llu/%llu free %llu owned %llu, "
		     "model bb %llu nb %llu backed %llu/%llu free %llu owned %llu", after,
		     (unsigned long long)s->block_bytes, (unsigned long long)s->nr_blocks,
		     (unsigned long long)s->backed_bytes, (unsigned long long)s->backed_blocks,
		     (unsigned long long)s->nr_free, (unsigned long long)s->nr_owned,
		     (unsigned long long)r->block_bytes, (unsigned long long)r->nr_blocks,
		     (unsigned long long)r->backed_bytes, (unsigned long long)r->registered,
		     (unsigned long long)r->nr_free, (unsigned long long)r->nr_owned);
		return false;
	}
	if (s->stats.allocs != r->allocs || s->stats.frees != r->frees ||
	    s->stats.alloc_failures != r->alloc_failures) {
		fail(p, "after %s: stats allocs %llu frees %llu failures %llu, model %llu %llu %llu",
		     after, (unsigned long long)s->stats.allocs,
		     (unsigned long long)s->stats.frees,
		     (unsigned long long)s->stats.alloc_failures, (unsigned long long)r->allocs,
		     (unsigned long long)r->frees, (unsigned long long)r->alloc_failures);
		return false;
	}
	for (id = 0; id < r->registered; id++) {
		const struct kvc_block *b = &s->blocks[id];
		unsigned int want_state = r->owner[id] ? KVC_BLOCK_OWNED : KVC_BLOCK_FREE;

		if (b->state != want_state || b->owner != r->owner[id]) {
			fail(p, "after %s: block %llu state %u owner %u, model owner %u", after,
			     (unsigned long long)id, b->state, b->owner, r->owner[id]);
			return false;
		}
	}
	/* The free stack holds each free block exactly once. */
	in_stack = xcalloc(r->registered, 1);
	for (i = 0; i < s->nr_free; i++) {
		kvc_u32 fid = s->free_stack[i];

		if (fid >= r->registered || r->owner[fid] || in_stack[fid]) {
			fail(p, "after %s: free stack entry %llu is block %u", after,
			     (unsigned long long)i, fid);
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
			     (unsigned long long)got, (unsigned long long)want);
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
	p->h.pool_left = HOST_UNLIMITED;
	p->h.check_in_grow = true;
	host_trace_reset(&p->h);
	ret = kvc_space_init(&p->s, block_bytes, nr_blocks, &host_ops, &p->h);
	exp = ref_init(&p->r, block_bytes, nr_blocks);
	if (ret != exp)
		fail(p, "init(%llu, %llu) = %d, model %d", (unsigned long long)block_bytes,
		     (unsigned long long)nr_blocks, ret, exp);
	p->live = ret == 0;
	pair_compare(p, "init");
	return ret;
}

void pair_fini(struct pair *p)
{
	if (p->live)
		kvc_space_fini(&p->s);
	p->live = false;
	ref_fini(&p->r);
}

#define ID_POISON 0xa5a5a5a5u
/* ids[] is only written on success; callers pass at least this many. */
#define ID_POISON_MAX 64u

int pair_alloc(struct pair *p, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids)
{
	long before = kvc_fail_alloc_countdown;
	struct ref_run run = { 0 };
	struct host model_host;
	int ret, exp;
	kvc_u32 i;

	if (!p->live)
		return -EINVAL;
	for (i = 0; i < count && i < ID_POISON_MAX; i++)
		ids[i] = ID_POISON ^ i;
	host_trace_reset(&p->h);
	model_host = p->h;
	ret = kvc_alloc(&p->s, owner, count, ids);

	run.fault = before > 0 && kvc_fail_alloc_countdown == 0;
	run.core_calls = p->h.calls;
	exp = ref_alloc_prepare(&p->r, &model_host, owner, count, &run);
	if (ret != exp) {
		fail(p, "alloc(owner %u, count %u) = %d, model %d (grow calls %llu, model %llu%s)",
		     owner, count, ret, exp, p->h.calls, run.calls,
		     run.fault ? ", kvcore allocation failed" : "");
		return ret;
	}
	if (run.calls != p->h.calls || run.digest != p->h.digest) {
		fail(p, "alloc(owner %u, count %u): grow called %llu times (last want %llu), "
		     "model %llu times or with other sizes", owner, count, p->h.calls,
		     (unsigned long long)p->h.last_want, run.calls);
		return ret;
	}
	if (run.fault && !run.fault_used) {
		fail(p, "alloc(owner %u, count %u): kvcore's allocation failed unnoticed", owner,
		     count);
		return ret;
	}
	if (p->h.bad_in_grow) {
		fail(p, "alloc(owner %u, count %u): space inconsistent inside grow", owner, count);
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

			if (id >= p->r.registered || p->r.owner[id]) {
				fail(p, "alloc(owner %u, count %u): ids[%u] = %u is %s", owner,
				     count, i, id,
				     id >= p->r.registered ? "not backed" :
				     p->r.owner[id] == owner ? "repeated" : "not free");
				return ret;
			}
			p->r.owner[id] = owner;
		}
		p->r.nr_free -= count;
		p->r.nr_owned += count;
		p->r.allocs += count;
	}
	pair_compare(p, "alloc");
	return ret;
}

int pair_free(struct pair *p, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids)
{
	long before = kvc_fail_alloc_countdown;
	int ret, exp;

	if (!p->live)
		return -EINVAL;
	host_trace_reset(&p->h);
	ret = kvc_free(&p->s, owner, count, ids);
	if (kvc_fail_alloc_countdown != before || p->h.calls)
		fail(p, "free(owner %u, count %u) allocated memory or called grow", owner, count);
	exp = ref_free(&p->r, owner, count, ids);
	if (ret != exp)
		fail(p, "free(owner %u, count %u, ids[0] %u) = %d, model %d", owner, count,
		     count ? ids[0] : 0, ret, exp);
	pair_compare(p, "free");
	return ret;
}

kvc_u64 pair_release(struct pair *p, kvc_u32 owner)
{
	long before = kvc_fail_alloc_countdown;
	kvc_u64 n, exp;

	if (!p->live)
		return 0;
	host_trace_reset(&p->h);
	n = kvc_release_owner(&p->s, owner);
	if (kvc_fail_alloc_countdown != before || p->h.calls)
		fail(p, "release(owner %u) allocated memory or called grow", owner);
	exp = ref_release(&p->r, owner);
	if (n != exp)
		fail(p, "release(owner %u) = %llu, model %llu", owner, (unsigned long long)n,
		     (unsigned long long)exp);
	pair_compare(p, "release");
	return n;
}
