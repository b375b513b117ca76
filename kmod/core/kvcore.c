// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * kvcore: blocks and the prefix cache of a space.  See kvcore.h for the
 * contract.
 * The caller holds the space's lock around every function here.
 */
#include "kvcore.h"

/* Transient mark used while a FREE batch is validated. */
#define KVC_BLOCK_MARKED 0x80

int kvc_space_init(struct kvc_space *s, kvc_u64 block_bytes, kvc_u64 nr_blocks,
		   const struct kvc_space_ops *ops, void *host)
{
	unsigned int p;

	if (!block_bytes || !nr_blocks || nr_blocks > KVC_MAX_BLOCKS || !ops || !ops->grow)
		return -EINVAL;
	/* The range is counted in bytes: nr_blocks * block_bytes must not wrap. */
	if (block_bytes > ~0ULL / nr_blocks)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->block_bytes = block_bytes;
	s->nr_blocks = nr_blocks;
	s->ops = ops;
	s->host = host;
	s->max_readers = KVC_READERS_MAX;
	kvc_random_bytes(s->bucket_key, sizeof(s->bucket_key));
	for (p = 0; p < KVC_PRIO_LEVELS; p++)
		s->lru[p] = (struct kvc_list){ KVC_NONE, KVC_NONE };
	s->holes = (struct kvc_list){ KVC_NONE, KVC_NONE };
	return 0;
}

void kvc_space_fini(struct kvc_space *s)
{
	kvc_free_mem(s->blocks);
	kvc_free_mem(s->free_stack);
	kvc_free_mem(s->hashes);
	kvc_free_mem(s->buckets);
	s->blocks = NULL;
	s->free_stack = NULL;
	s->hashes = NULL;
	s->buckets = NULL;
	s->capacity = 0;
	s->nr_buckets = 0;
}

/* Lists threaded through the blocks: the LRUs and the hole list. */
static void kvc_list_add_tail(struct kvc_space *s, struct kvc_list *l, kvc_u32 id)
{
	s->blocks[id].prev = l->tail;
	s->blocks[id].next = KVC_NONE;
	if (l->tail != KVC_NONE)
		s->blocks[l->tail].next = id;
	else
		l->head = id;
	l->tail = id;
}

static void kvc_list_del(struct kvc_space *s, struct kvc_list *l, kvc_u32 id)
{
	struct kvc_block *b = &s->blocks[id];

	if (b->prev != KVC_NONE)
		s->blocks[b->prev].next = b->next;
	else
		l->head = b->next;
	if (b->next != KVC_NONE)
		s->blocks[b->next].prev = b->prev;
	else
		l->tail = b->prev;
	b->prev = KVC_NONE;
	b->next = KVC_NONE;
}

static void kvc_free_push(struct kvc_space *s, kvc_u32 id)
{
	s->blocks[id].state = KVC_BLOCK_FREE;
	s->blocks[id].owner = KVC_OWNER_NONE;
	s->blocks[id].prev = (kvc_u32)s->nr_free;
	s->free_stack[s->nr_free++] = id;
}

static kvc_u32 kvc_free_pop(struct kvc_space *s)
{
	return s->free_stack[--s->nr_free];
}

/* Take a FREE block out of the middle of the stack (reclaim). */
static void kvc_free_remove(struct kvc_space *s, kvc_u32 id)
{
	kvc_u32 pos = s->blocks[id].prev, last = s->free_stack[s->nr_free - 1];

	s->free_stack[pos] = last;
	s->blocks[last].prev = pos;
	s->nr_free--;
}

static void kvc_lru_add(struct kvc_space *s, kvc_u32 id)
{
	unsigned int p = s->blocks[id].priority;

	kvc_list_add_tail(s, &s->lru[p], id);
	s->lru_nonempty[p / 64] |= 1ULL << (p % 64);
}

static void kvc_lru_del(struct kvc_space *s, kvc_u32 id)
{
	unsigned int p = s->blocks[id].priority;

	kvc_list_del(s, &s->lru[p], id);
	if (s->lru[p].head == KVC_NONE)
		s->lru_nonempty[p / 64] &= ~(1ULL << (p % 64));
}

/* Long loops give the CPU up this often (a kernel host holds only a mutex). */
#define KVC_YIELD_EVERY 4096

static inline kvc_u64 kvc_rotl(kvc_u64 x, unsigned int b)
{
	return (x << b) | (x >> (64 - b));
}

static inline void kvc_sipround(kvc_u64 v[4])
{
	v[0] += v[1];
	v[1] = kvc_rotl(v[1], 13) ^ v[0];
	v[0] = kvc_rotl(v[0], 32);
	v[2] += v[3];
	v[3] = kvc_rotl(v[3], 16) ^ v[2];
	v[0] += v[3];
	v[3] = kvc_rotl(v[3], 21) ^ v[0];
	v[2] += v[1];
	v[1] = kvc_rotl(v[1], 17) ^ v[2];
	v[2] = kvc_rotl(v[2], 32);
}

/* Little-endian load of n <= 8 bytes: one unaligned load for a whole word. */
static inline kvc_u64 kvc_load_le(const kvc_u8 *p, unsigned int n)
{
	kvc_u64 x = 0;

	if (n == 8) {
		memcpy(&x, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		x = __builtin_bswap64(x);
#endif
		return x;
	}
	while (n--)
		x = (x << 8) | p[n];
	return x;
}

kvc_u64 kvc_siphash(const kvc_u64 key[2], const void *data, kvc_u64 len)
{
	kvc_u64 v[4] = {
		key[0] ^ 0x736f6d6570736575ULL, key[1] ^ 0x646f72616e646f6dULL,
		key[0] ^ 0x6c7967656e657261ULL, key[1] ^ 0x7465646279746573ULL,
	};
	const kvc_u8 *p = data;
	kvc_u64 m, off;

	for (off = 0; off + 8 <= len; off += 8) {
		m = kvc_load_le(p + off, 8);
		v[3] ^= m;
		kvc_sipround(v);
		kvc_sipround(v);
		v[0] ^= m;
	}
	m = kvc_load_le(p + off, (unsigned int)(len - off)) | len << 56;
	v[3] ^= m;
	kvc_sipround(v);
	kvc_sipround(v);
	v[0] ^= m;
	v[2] ^= 0xff;
	kvc_sipround(v);
	kvc_sipround(v);
	kvc_sipround(v);
	kvc_sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* Bucket of a hash: keyed, since callers choose their hashes. */
static kvc_u64 kvc_bucket(const struct kvc_space *s, const kvc_u8 *hash)
{
	return kvc_siphash(s->bucket_key, hash, KVC_HASH_BYTES) & (s->nr_buckets - 1);
}

kvc_u32 kvc_find(const struct kvc_space *s, const kvc_u8 *hash)
{
	kvc_u32 id;

	if (!s->nr_buckets)
		return KVC_NONE;
	for (id = s->buckets[kvc_bucket(s, hash)]; id != KVC_NONE; id = s->blocks[id].hnext)
		if (!memcmp(s->hashes[id], hash, KVC_HASH_BYTES))
			return id;
	return KVC_NONE;
}

static void kvc_index_add(struct kvc_space *s, kvc_u32 id)
{
	kvc_u64 b = kvc_bucket(s, s->hashes[id]);

	s->blocks[id].hnext = s->buckets[b];
	s->buckets[b] = id;
}

static void kvc_index_del(struct kvc_space *s, kvc_u32 id)
{
	kvc_u32 *link = &s->buckets[kvc_bucket(s, s->hashes[id])];

	while (*link != id)
		link = &s->blocks[*link].hnext;
	*link = s->blocks[id].hnext;
	s->blocks[id].hnext = KVC_NONE;
}

/*
 * Make the per-block arrays hold at least want entries, and the hash index
 * at least as many buckets as blocks.
 */
static int kvc_reserve(struct kvc_space *s, kvc_u64 want)
{
	struct kvc_block *blocks;
	kvc_u8 (*hashes)[KVC_HASH_BYTES];
	kvc_u32 *stack, *buckets;
	kvc_u64 cap = s->capacity ? s->capacity : 64, nb, i;

	if (want <= s->capacity)
		return 0;
	while (cap < want)
		cap *= 2;
	if (cap > s->nr_blocks)
		cap = s->nr_blocks;
	for (nb = 64; nb < cap; nb *= 2)
		;
	blocks = kvc_zalloc(cap * sizeof(*blocks));
	stack = kvc_zalloc(cap * sizeof(*stack));
	hashes = kvc_zalloc(cap * sizeof(*hashes));
	buckets = nb > s->nr_buckets ? kvc_zalloc(nb * sizeof(*buckets)) : NULL;
	if (!blocks || !stack || !hashes || (nb > s->nr_buckets && !buckets)) {
		kvc_free_mem(blocks);
		kvc_free_mem(stack);
		kvc_free_mem(hashes);
		kvc_free_mem(buckets);
		return -ENOMEM;
	}
	if (s->capacity) {
		memcpy(blocks, s->blocks, s->capacity * sizeof(*blocks));
		memcpy(stack, s->free_stack, s->nr_free * sizeof(*stack));
		memcpy(hashes, s->hashes, s->capacity * sizeof(*hashes));
	}
	kvc_free_mem(s->blocks);
	kvc_free_mem(s->free_stack);
	kvc_free_mem(s->hashes);
	s->blocks = blocks;
	s->free_stack = stack;
	s->hashes = hashes;
	s->capacity = cap;
	if (buckets) {
		kvc_free_mem(s->buckets);
		s->buckets = buckets;
		s->nr_buckets = nb;
		for (i = 0; i < nb; i++)
			buckets[i] = KVC_NONE;
		for (i = 0; i < s->backed_blocks; i++)
			if (blocks[i].state == KVC_BLOCK_PUBLISHED ||
			    blocks[i].state == KVC_BLOCK_CACHED)
				kvc_index_add(s, (kvc_u32)i);
	}
	return 0;
}

/*
 * Push the blocks that backed_bytes now completes.  backed_bytes is updated
 * before this can fail, so the host's pages are never lost track of: a
 * failed push is retried by the next allocation.
 */
static int kvc_push_backed(struct kvc_space *s)
{
	kvc_u64 new_blocks = s->backed_bytes / s->block_bytes, id;
	int ret;

	if (new_blocks == s->backed_blocks)
		return 0;
	ret = kvc_reserve(s, new_blocks);
	if (ret)
		return ret;
	/* Push in reverse so the lowest new id is handed out first. */
	for (id = new_blocks; id > s->backed_blocks; id--) {
		s->blocks[id - 1].hnext = KVC_NONE;
		kvc_free_push(s, (kvc_u32)(id - 1));
	}
	s->backed_blocks = new_blocks;
	return 0;
}

/* A cached block leaves the index and becomes FREE. */
static void kvc_evict_one(struct kvc_space *s, kvc_u32 id, unsigned int cause)
{
	kvc_lru_del(s, id);
	kvc_index_del(s, id);
	s->nr_cached--;
	s->stats.evictions[cause]++;
	if (s->ops->evicted)
		s->ops->evicted(s, id, s->hashes[id], cause);
	memset(s->hashes[id], 0, KVC_HASH_BYTES);
	kvc_free_push(s, id);
}

kvc_u32 kvc_lru_first(const struct kvc_space *s)
{
	unsigned int w;

	for (w = 0; w < 2; w++) {
		kvc_u64 bits = s->lru_nonempty[w];
		unsigned int p = w * 64;

		if (!bits)
			continue;
		while (!(bits & 1)) {
			bits >>= 1;
			p++;
		}
		return s->lru[p].head;
	}
	return KVC_NONE;
}

kvc_u32 kvc_lru_next(const struct kvc_space *s, kvc_u32 id)
{
	unsigned int p;

	if (s->blocks[id].next != KVC_NONE)
		return s->blocks[id].next;
	for (p = s->blocks[id].priority + 1; p < KVC_PRIO_LEVELS; p++)
		if (s->lru[p].head != KVC_NONE)
			return s->lru[p].head;
	return KVC_NONE;
}

kvc_u64 kvc_evict(struct kvc_space *s, kvc_u64 count, unsigned int cause)
{
	kvc_u64 n = 0;

	if (cause >= KVC_EVICT_CAUSES)
		return 0;
	while (n < count && s->nr_cached) {
		kvc_evict_one(s, kvc_lru_first(s), cause);
		n++;
	}
	return n;
}

/* Callback errnos that mean "no room" rather than a failure. */
static int kvc_no_room(long long err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/*
 * Refill holes until count blocks are free.  Returns 0, or the errno that
 * stopped it; *tenant is set when that was the per-uid limit.
 */
static int kvc_refill_holes(struct kvc_space *s, kvc_u32 count, int *tenant)
{
	while (s->nr_free < count && s->holes.head != KVC_NONE) {
		kvc_u32 id = s->holes.head;
		int ret = s->ops->refill ? s->ops->refill(s, (kvc_u64)id * s->block_bytes,
							    s->block_bytes) : -ENOSPC;

		if (ret) {
			*tenant |= ret == -EDQUOT;
			return ret;
		}
		kvc_list_del(s, &s->holes, id);
		s->nr_holes--;
		kvc_free_push(s, id);
	}
	return 0;
}

/* Grow the backed prefix until count blocks are free; errno as above. */
static int kvc_grow_range(struct kvc_space *s, kvc_u32 count, int *tenant)
{
	kvc_u64 range_bytes = s->nr_blocks * s->block_bytes;
	int ret;

	while (s->nr_free < count && s->backed_blocks < s->nr_blocks) {
		/* Clamp in blocks first: the product may not fit 64 bits near the top. */
		kvc_u64 blocks = s->backed_blocks + count - s->nr_free;
		long long got;

		if (blocks > s->nr_blocks)
			blocks = s->nr_blocks;
		got = s->ops->grow(s, blocks * s->block_bytes - s->backed_bytes);
		if (got < 0) {
			*tenant |= got == -EDQUOT;
			/* Anything below -4095 is no errno: do not truncate it to one. */
			return got >= -4095 ? (int)got : -EIO;
		}
		if (got == 0)
			return -ENOSPC;
		if ((kvc_u64)got > range_bytes - s->backed_bytes)
			got = (long long)(range_bytes - s->backed_bytes);
		s->backed_bytes += (kvc_u64)got;
		ret = kvc_push_backed(s);
		if (ret)
			return ret;
	}
	return 0;
}

int kvc_alloc(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, kvc_u32 *ids)
{
	int ret = 0, tenant = 0;
	unsigned int cause;
	kvc_u32 i;

	if (!count || owner == KVC_OWNER_NONE)
		return -EINVAL;
	if (count > s->nr_free + s->nr_cached + s->nr_holes + (s->nr_blocks - s->backed_blocks)) {
		s->stats.last_pressure_cause = KVC_EVICT_QUOTA;
		ret = -ENOSPC;
		goto out_fail;
	}
	/*
	 * Backing that came in earlier becomes blocks first.  When that needs
	 * memory that is not there, free blocks can still serve the request.
	 */
	ret = kvc_push_backed(s);
	if (ret && s->nr_free < count)
		goto out_fail;
	ret = kvc_refill_holes(s, count, &tenant);
	if (!ret)
		ret = kvc_grow_range(s, count, &tenant);
	if (ret && !kvc_no_room(ret))
		goto out_fail;
	if (s->nr_free < count) {
		/* Out of room: the space's own cached blocks make way, or nothing does. */
		if (s->backed_blocks == s->nr_blocks && !s->nr_holes)
			cause = KVC_EVICT_QUOTA;
		else
			cause = tenant ? KVC_EVICT_TENANT : KVC_EVICT_POOL;
		s->stats.last_pressure_cause = cause;
		if (s->nr_free + s->nr_cached < count) {
			ret = -ENOSPC;
			goto out_fail;
		}
		kvc_evict(s, count - s->nr_free, cause);
		s->stats.pressure++;
	}
	for (i = 0; i < count; i++) {
		kvc_u32 id = kvc_free_pop(s);

		s->blocks[id].state = KVC_BLOCK_OWNED;
		s->blocks[id].owner = owner;
		ids[i] = id;
	}
	s->nr_owned += count;
	s->stats.allocs += count;
	return 0;

out_fail:
	s->stats.alloc_failures++;
	return ret;
}

static void kvc_unmark(struct kvc_block *blocks, kvc_u32 n, const kvc_u32 *ids, kvc_u32 stride)
{
	kvc_u32 i;

	for (i = 0; i < n; i++)
		blocks[ids[(kvc_u64)i * stride]].state &= ~KVC_BLOCK_MARKED;
}

/*
 * Check that every id (ids[i * stride]) is a block owner owns, once.
 * 0, -EINVAL or -EPERM; on success the blocks stay marked.
 */
static int kvc_mark_owned(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids,
			  kvc_u32 stride)
{
	kvc_u32 i;
	int ret;

	for (i = 0; i < count; i++) {
		kvc_u32 id = ids[(kvc_u64)i * stride];

		if (id >= s->backed_blocks || (s->blocks[id].state & KVC_BLOCK_MARKED)) {
			ret = -EINVAL;
			goto out_unmark;
		}
		if (s->blocks[id].state != KVC_BLOCK_OWNED || s->blocks[id].owner != owner) {
			ret = -EPERM;
			goto out_unmark;
		}
		s->blocks[id].state |= KVC_BLOCK_MARKED;
	}
	return 0;

out_unmark:
	kvc_unmark(s->blocks, i, ids, stride);
	return ret;
}

int kvc_free(struct kvc_space *s, kvc_u32 owner, kvc_u32 count, const kvc_u32 *ids)
{
	kvc_u32 i;
	int ret;

	if (!count)
		return -EINVAL;
	/* Validate the whole batch before changing anything. */
	ret = kvc_mark_owned(s, owner, count, ids, 1);
	if (ret)
		return ret;
	for (i = 0; i < count; i++)
		kvc_free_push(s, ids[i]);
	s->nr_owned -= count;
	s->stats.frees += count;
	return 0;
}

kvc_u64 kvc_release_owner(struct kvc_space *s, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	if (owner == KVC_OWNER_NONE)
		return 0;
	for (id = 0; id < s->backed_blocks; id++) {
		if (s->blocks[id].state == KVC_BLOCK_OWNED && s->blocks[id].owner == owner) {
			kvc_free_push(s, (kvc_u32)id);
			n++;
		}
		if (id % KVC_YIELD_EVERY == KVC_YIELD_EVERY - 1)
			kvc_yield();
	}
	s->nr_owned -= n;
	s->stats.frees += n;
	return n;
}

kvc_u64 kvc_owner_blocks(const struct kvc_space *s, kvc_u32 owner)
{
	kvc_u64 id, n = 0;

	for (id = 0; id < s->backed_blocks; id++)
		if (s->blocks[id].state == KVC_BLOCK_OWNED && s->blocks[id].owner == owner)
			n++;
	return n;
}

/* Reader references per holder: open addressing, linear probing. */
static kvc_u32 kvc_refs_slot(const struct kvc_refs *r, kvc_u32 id)
{
	kvc_u32 mask = r->cap - 1, i = (kvc_u32)((id * 0x9E3779B9U) & mask);

	while (r->keys[i] && r->keys[i] != id + 1)
		i = (i + 1) & mask;
	return i;
}

kvc_u32 kvc_refs_count(const struct kvc_refs *r, kvc_u32 id)
{
	kvc_u32 i;

	if (!r->cap)
		return 0;
	i = kvc_refs_slot(r, id);
	return r->keys[i] ? r->counts[i] : 0;
}

/* Room for n more ids at a load of at most 1/2, so adds cannot fail. */
static int kvc_refs_reserve(struct kvc_refs *r, kvc_u64 n)
{
	kvc_u64 need = ((kvc_u64)r->used + n) * 2, cap = r->cap ? r->cap : 16, i;
	struct kvc_refs grown = { 0 };

	if (need <= r->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (cap > (1ULL << 32) / 2)
		return -ENOMEM;
	grown.keys = kvc_zalloc(cap * sizeof(*grown.keys));
	grown.counts = kvc_zalloc(cap * sizeof(*grown.counts));
	if (!grown.keys || !grown.counts) {
		kvc_free_mem(grown.keys);
		kvc_free_mem(grown.counts);
		return -ENOMEM;
	}
	grown.cap = (kvc_u32)cap;
	grown.used = r->used;
	grown.total = r->total;
	grown.limit = r->limit;
	for (i = 0; i < r->cap; i++) {
		kvc_u32 slot;

		if (!r->keys[i])
			continue;
		slot = kvc_refs_slot(&grown, r->keys[i] - 1);
		grown.keys[slot] = r->keys[i];
		grown.counts[slot] = r->counts[i];
	}
	kvc_free_mem(r->keys);
	kvc_free_mem(r->counts);
	*r = grown;
	return 0;
}

static void kvc_refs_add(struct kvc_refs *r, kvc_u32 id)
{
	kvc_u32 i = kvc_refs_slot(r, id);

	if (!r->keys[i]) {
		r->keys[i] = id + 1;
		r->used++;
	}
	r->counts[i]++;
	r->total++;
}

/* Remove slot i, shifting later entries of its probe run back. */
static void kvc_refs_remove_slot(struct kvc_refs *r, kvc_u32 i)
{
	kvc_u32 mask = r->cap - 1, j = i;

	r->keys[i] = 0;
	r->counts[i] = 0;
	r->used--;
	for (;;) {
		kvc_u32 home;

		j = (j + 1) & mask;
		if (!r->keys[j])
			return;
		home = (kvc_u32)(((r->keys[j] - 1) * 0x9E3779B9U) & mask);
		/* Move j back to i when i lies between its home slot and j. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			r->keys[i] = r->keys[j];
			r->counts[i] = r->counts[j];
			r->keys[j] = 0;
			r->counts[j] = 0;
			i = j;
		}
	}
}

/* One more reader on id, held in refs; a CACHED block leaves its LRU. */
static void kvc_reader_get(struct kvc_space *s, struct kvc_refs *refs, kvc_u32 id)
{
	struct kvc_block *b = &s->blocks[id];

	if (b->state == KVC_BLOCK_CACHED) {
		kvc_lru_del(s, id);
		b->state = KVC_BLOCK_PUBLISHED;
		s->nr_cached--;
		s->nr_published++;
	}
	b->readers++;
	s->nr_readers++;
	kvc_refs_add(refs, id);
}

static void kvc_reader_put(struct kvc_space *s, kvc_u32 id)
{
	struct kvc_block *b = &s->blocks[id];

	b->readers--;
	s->nr_readers--;
	if (!b->readers) {
		b->state = KVC_BLOCK_CACHED;
		s->nr_published--;
		s->nr_cached++;
		kvc_lru_add(s, id);
	}
}

static kvc_u64 kvc_refs_limit(const struct kvc_refs *refs)
{
	return refs->limit ? refs->limit : KVC_REFS_MAX;
}

/* May a batch of n add one reference each to blocks with this many readers? */
static int kvc_readers_room(const struct kvc_space *s, kvc_u32 readers, kvc_u64 n)
{
	return (kvc_u64)readers + n <= s->max_readers;
}

int kvc_publish(struct kvc_space *s, kvc_u32 owner, struct kvc_refs *refs, kvc_u32 count,
		struct kvc_publish_entry *e)
{
	kvc_u32 stride = sizeof(*e) / sizeof(kvc_u32);
	int ret, dedups = 0;
	kvc_u32 i;

	if (!count || count > (1U << 30))
		return -EINVAL;
	for (i = 0; i < count; i++)
		if (e[i].priority > KVC_PRIO_MAX)
			return -EINVAL;
	/* e[i].id sits at a fixed word offset of each entry. */
	ret = kvc_mark_owned(s, owner, count, &e[0].id, stride);
	if (ret)
		return ret;
	/*
	 * Bound every block a hash may land on, conservatively by the whole
	 * batch: entries of this batch may dedup onto each other.
	 */
	if (refs->total + count > kvc_refs_limit(refs) || !kvc_readers_room(s, 0, count))
		ret = -EOVERFLOW;
	for (i = 0; i < count && !ret; i++) {
		kvc_u32 have = kvc_find(s, e[i].hash);

		if (have != KVC_NONE && !kvc_readers_room(s, s->blocks[have].readers, count))
			ret = -EOVERFLOW;
	}
	if (!ret)
		ret = kvc_refs_reserve(refs, count);
	kvc_unmark(s->blocks, count, &e[0].id, stride);
	if (ret)
		return ret;
	for (i = 0; i < count; i++) {
		kvc_u32 id = e[i].id, have = kvc_find(s, e[i].hash);

		if (i % KVC_YIELD_EVERY == KVC_YIELD_EVERY - 1)
			kvc_yield();
		s->nr_owned--;
		if (have != KVC_NONE) {
			/* One copy per host: keep the block already there. */
			kvc_free_push(s, id);
			s->stats.frees++;
			s->stats.dedups++;
			kvc_reader_get(s, refs, have);
			e[i].id = have;
			e[i].flags = KVC_PUBLISH_DEDUP;
			dedups++;
			continue;
		}
		s->blocks[id].state = KVC_BLOCK_PUBLISHED;
		s->blocks[id].owner = KVC_OWNER_NONE;
		s->blocks[id].priority = (kvc_u8)e[i].priority;
		s->blocks[id].readers = 0;
		memcpy(s->hashes[id], e[i].hash, KVC_HASH_BYTES);
		kvc_index_add(s, id);
		s->nr_published++;
		s->stats.inserts++;
		kvc_reader_get(s, refs, id);
		e[i].flags = 0;
	}
	return dedups;
}

int kvc_lookup(struct kvc_space *s, struct kvc_refs *refs, kvc_u32 count,
	       const kvc_u8 (*hashes)[KVC_HASH_BYTES], kvc_u32 *ids)
{
	kvc_u32 n, i;
	int ret;

	for (n = 0; n < count; n++) {
		kvc_u32 id = kvc_find(s, hashes[n]);

		if (n % KVC_YIELD_EVERY == KVC_YIELD_EVERY - 1)
			kvc_yield();
		if (id == KVC_NONE)
			break;
		ids[n] = id;
	}
	if (refs->total + n > kvc_refs_limit(refs))
		return -EOVERFLOW;
	for (i = 0; i < n; i++)
		if (!kvc_readers_room(s, s->blocks[ids[i]].readers, n))
			return -EOVERFLOW;
	ret = kvc_refs_reserve(refs, n);
	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		kvc_reader_get(s, refs, ids[i]);
	s->stats.hits += n;
	s->stats.misses += count - n;
	return (int)n;
}

int kvc_release(struct kvc_space *s, struct kvc_refs *refs, kvc_u32 count, const kvc_u32 *ids)
{
	kvc_u32 i, j;

	if (!count)
		return -EINVAL;
	/* Take the references out of refs first; put them back on a bad id. */
	for (i = 0; i < count; i++) {
		kvc_u32 slot;

		if (!refs->cap || ids[i] >= s->backed_blocks)
			goto out_restore;
		slot = kvc_refs_slot(refs, ids[i]);
		if (!refs->keys[slot] || !refs->counts[slot])
			goto out_restore;
		refs->counts[slot]--;
	}
	for (i = 0; i < count; i++) {
		kvc_u32 slot = kvc_refs_slot(refs, ids[i]);

		if (refs->keys[slot] && !refs->counts[slot])
			kvc_refs_remove_slot(refs, slot);
		refs->total--;
		kvc_reader_put(s, ids[i]);
	}
	return 0;

out_restore:
	for (j = 0; j < i; j++)
		refs->counts[kvc_refs_slot(refs, ids[j])]++;
	return -EINVAL;
}

kvc_u64 kvc_release_refs(struct kvc_space *s, struct kvc_refs *refs)
{
	kvc_u64 n = 0;
	kvc_u32 i;

	for (i = 0; i < refs->cap; i++) {
		kvc_u32 c;

		if (!refs->keys[i])
			continue;
		for (c = refs->counts[i]; c; c--)
			kvc_reader_put(s, refs->keys[i] - 1);
		kvc_yield();
		n += refs->counts[i];
	}
	kvc_free_mem(refs->keys);
	kvc_free_mem(refs->counts);
	*refs = (struct kvc_refs){ .limit = refs->limit };
	return n;
}

/* Blocks touched by bytes [start, start + len), or 0 when that is not a valid range. */
static int kvc_range_blocks(const struct kvc_space *s, kvc_u64 start, kvc_u64 len,
			    kvc_u64 *first, kvc_u64 *end)
{
	if (!len || start >= s->backed_blocks * s->block_bytes ||
	    len > s->backed_blocks * s->block_bytes - start)
		return 0;
	*first = start / s->block_bytes;
	*end = (start + len - 1) / s->block_bytes + 1;
	return 1;
}

int kvc_range_reclaimable(const struct kvc_space *s, kvc_u64 start, kvc_u64 len)
{
	kvc_u64 first, end, id;

	if (!kvc_range_blocks(s, start, len, &first, &end))
		return 0;
	for (id = first; id < end; id++) {
		unsigned int st = s->blocks[id].state;

		if (st != KVC_BLOCK_FREE && st != KVC_BLOCK_CACHED && st != KVC_BLOCK_HOLE)
			return 0;
	}
	return 1;
}

kvc_u64 kvc_reclaim_range(struct kvc_space *s, kvc_u64 start, kvc_u64 len, unsigned int cause)
{
	kvc_u64 first, end, id, n = 0;

	if (cause >= KVC_EVICT_CAUSES || !kvc_range_reclaimable(s, start, len) ||
	    !kvc_range_blocks(s, start, len, &first, &end))
		return 0;
	for (id = first; id < end; id++) {
		if (s->blocks[id].state == KVC_BLOCK_HOLE)
			continue;
		if (s->blocks[id].state == KVC_BLOCK_CACHED) {
			kvc_evict_one(s, (kvc_u32)id, cause);	/* now FREE */
			n++;
		}
		kvc_free_remove(s, (kvc_u32)id);
		s->blocks[id].state = KVC_BLOCK_HOLE;
		kvc_list_add_tail(s, &s->holes, (kvc_u32)id);
		s->nr_holes++;
	}
	return n;
}

static int kvc_fail(char *msg, unsigned long len, const char *what, kvc_u64 id)
{
	snprintf(msg, len, "block %llu: %s", (unsigned long long)id, what);
	return -EUCLEAN;
}

/* Walk a list: every member in want_state (and priority prio when >= 0), links consistent. */
static int kvc_check_list(const struct kvc_space *s, const struct kvc_list *l,
			  unsigned int want_state, int prio, kvc_u64 *n, char *msg,
			  unsigned long len)
{
	kvc_u32 id = l->head, prev = KVC_NONE;
	kvc_u64 steps = 0;

	while (id != KVC_NONE) {
		if (id >= s->backed_blocks || ++steps > s->backed_blocks)
			return kvc_fail(msg, len, "list leaves the backed blocks or loops", id);
		if (s->blocks[id].state != want_state)
			return kvc_fail(msg, len, "on a list its state does not belong to", id);
		if (prio >= 0 && s->blocks[id].priority != prio)
			return kvc_fail(msg, len, "on the LRU of another priority", id);
		if (s->blocks[id].prev != prev)
			return kvc_fail(msg, len, "list back link is wrong", id);
		prev = id;
		id = s->blocks[id].next;
	}
	if (l->tail != prev)
		return kvc_fail(msg, len, "list tail is not the last block", prev);
	*n += steps;
	return 0;
}

int kvc_space_check(const struct kvc_space *s, char *msg, unsigned long len)
{
	kvc_u64 id, counted[KVC_BLOCK_STATES] = { 0 }, readers = 0, on_lists = 0, holes = 0;
	kvc_u64 i, indexed = 0;
	unsigned int p;
	int ret;

	if (s->backed_bytes > s->nr_blocks * s->block_bytes ||
	    s->backed_blocks > s->backed_bytes / s->block_bytes) {
		snprintf(msg, len, "backed_bytes %llu backed_blocks %llu disagree",
			 (unsigned long long)s->backed_bytes,
			 (unsigned long long)s->backed_blocks);
		return -EUCLEAN;
	}
	for (id = 0; id < s->backed_blocks; id++) {
		const struct kvc_block *b = &s->blocks[id];

		if (b->state >= KVC_BLOCK_STATES)
			return kvc_fail(msg, len, "bad state", id);
		int owned = b->state == KVC_BLOCK_OWNED, has_owner = b->owner != KVC_OWNER_NONE;
		int published = b->state == KVC_BLOCK_PUBLISHED, has_readers = b->readers != 0;

		if (owned != has_owner)
			return kvc_fail(msg, len, "owner does not match state", id);
		if (published != has_readers)
			return kvc_fail(msg, len, "readers do not match state", id);
		if (b->readers > s->max_readers)
			return kvc_fail(msg, len, "readers above max_readers", id);
		if ((b->state == KVC_BLOCK_PUBLISHED || b->state == KVC_BLOCK_CACHED) &&
		    (b->priority > KVC_PRIO_MAX || kvc_find(s, s->hashes[id]) != id))
			return kvc_fail(msg, len, "published but not found by its hash", id);
		counted[b->state]++;
		readers += b->readers;
	}
	if (counted[KVC_BLOCK_FREE] != s->nr_free || counted[KVC_BLOCK_OWNED] != s->nr_owned ||
	    counted[KVC_BLOCK_PUBLISHED] != s->nr_published ||
	    counted[KVC_BLOCK_CACHED] != s->nr_cached || counted[KVC_BLOCK_HOLE] != s->nr_holes ||
	    s->nr_free + s->nr_owned + s->nr_published + s->nr_cached + s->nr_holes !=
	    s->backed_blocks || readers != s->nr_readers) {
		snprintf(msg, len,
			 "free %llu/%llu owned %llu/%llu published %llu/%llu cached %llu/%llu holes %llu/%llu (kept/counted) backed %llu readers %llu/%llu",
			 (unsigned long long)s->nr_free,
			 (unsigned long long)counted[KVC_BLOCK_FREE],
			 (unsigned long long)s->nr_owned,
			 (unsigned long long)counted[KVC_BLOCK_OWNED],
			 (unsigned long long)s->nr_published,
			 (unsigned long long)counted[KVC_BLOCK_PUBLISHED],
			 (unsigned long long)s->nr_cached,
			 (unsigned long long)counted[KVC_BLOCK_CACHED],
			 (unsigned long long)s->nr_holes,
			 (unsigned long long)counted[KVC_BLOCK_HOLE],
			 (unsigned long long)s->backed_blocks,
			 (unsigned long long)s->nr_readers, (unsigned long long)readers);
		return -EUCLEAN;
	}
	/* Bits past the last priority would send kvc_lru_first() off the array. */
	if (s->lru_nonempty[1] >> (KVC_PRIO_LEVELS - 64)) {
		snprintf(msg, len, "LRU bits set past priority %u", KVC_PRIO_MAX);
		return -EUCLEAN;
	}
	for (p = 0; p < KVC_PRIO_LEVELS; p++) {
		int nonempty = !!(s->lru_nonempty[p / 64] & (1ULL << (p % 64)));

		int has_head = s->lru[p].head != KVC_NONE;

		if (nonempty != has_head) {
			snprintf(msg, len, "LRU %u: non-empty bit is wrong", p);
			return -EUCLEAN;
		}
		ret = kvc_check_list(s, &s->lru[p], KVC_BLOCK_CACHED, (int)p, &on_lists, msg, len);
		if (ret)
			return ret;
	}
	ret = kvc_check_list(s, &s->holes, KVC_BLOCK_HOLE, -1, &holes, msg, len);
	if (ret)
		return ret;
	if (on_lists != s->nr_cached || holes != s->nr_holes) {
		snprintf(msg, len, "LRUs hold %llu of %llu cached, hole list %llu of %llu holes",
			 (unsigned long long)on_lists, (unsigned long long)s->nr_cached,
			 (unsigned long long)holes, (unsigned long long)s->nr_holes);
		return -EUCLEAN;
	}
	for (i = 0; i < s->nr_buckets; i++) {
		kvc_u32 b;

		for (b = s->buckets[i]; b != KVC_NONE; b = s->blocks[b].hnext) {
			if (b >= s->backed_blocks || ++indexed > s->backed_blocks)
				return kvc_fail(msg, len, "hash chain runs outside the blocks", b);
			if (s->blocks[b].state != KVC_BLOCK_PUBLISHED &&
			    s->blocks[b].state != KVC_BLOCK_CACHED)
				return kvc_fail(msg, len, "in the hash index but not published", b);
		}
	}
	if (indexed != s->nr_published + s->nr_cached) {
		snprintf(msg, len, "hash index holds %llu blocks, %llu published or cached",
			 (unsigned long long)indexed,
			 (unsigned long long)(s->nr_published + s->nr_cached));
		return -EUCLEAN;
	}
	/*
	 * Each free block must be in the stack exactly once, at the position
	 * it records: mark them while scanning (the caller holds the space's
	 * lock, as for every call) and take the marks off again.
	 */
	for (i = 0; i < s->nr_free; i++) {
		kvc_u32 id2 = s->free_stack[i];

		if (id2 >= s->backed_blocks || s->blocks[id2].state != KVC_BLOCK_FREE ||
		    s->blocks[id2].prev != i) {
			snprintf(msg, len, "free stack entry %llu holds block %u that is %s",
				 (unsigned long long)i, id2,
				 id2 >= s->backed_blocks ? "not backed" :
				 s->blocks[id2].state & KVC_BLOCK_MARKED ? "already in the stack" :
				 s->blocks[id2].state != KVC_BLOCK_FREE ? "not free" :
				 "recorded at another position");
			break;
		}
		s->blocks[id2].state |= KVC_BLOCK_MARKED;
	}
	kvc_unmark(s->blocks, (kvc_u32)i, s->free_stack, 1);
	return i == s->nr_free ? 0 : -EUCLEAN;
}

static unsigned int kvc_add_nodes(kvc_u64 mask, unsigned int first, kvc_u8 *order,
				  unsigned int n)
{
	unsigned int i;

	for (i = 0; i < KVC_MAX_NODES; i++) {
		unsigned int nid = (first + i) % KVC_MAX_NODES;
		unsigned int j;
		int seen = 0;

		if (!(mask & (1ULL << nid)))
			continue;
		for (j = 0; j < n; j++)
			seen |= order[j] == nid;
		if (!seen)
			order[n++] = (kvc_u8)nid;
	}
	return n;
}

unsigned int kvc_numa_order(unsigned int policy, kvc_u64 mask, kvc_u64 pool_mask, int local,
			    unsigned int cursor, kvc_u8 *order)
{
	unsigned int n = 0;

	switch (policy) {
	case KVC_NUMA_BIND:
		return kvc_add_nodes(mask & pool_mask, 0, order, 0);
	case KVC_NUMA_INTERLEAVE:
		return kvc_add_nodes((mask ? mask : pool_mask) & pool_mask,
				     cursor % KVC_MAX_NODES, order, 0);
	default:
		/* Preferred: the mask, or the caller's node, then every other node. */
		if (mask)
			n = kvc_add_nodes(mask & pool_mask, 0, order, 0);
		else if (local >= 0 && local < KVC_MAX_NODES && (pool_mask & (1ULL << local)))
			order[n++] = (kvc_u8)local;
		return kvc_add_nodes(pool_mask, 0, order, n);
	}
}
