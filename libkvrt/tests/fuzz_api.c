// SPDX-License-Identifier: MIT
/*
 * fuzz_api.c: libFuzzer target over libkvrt's public API on the embedded
 * backend.  The input is a list of operations (fuzz_api_ops.h); each takes
 * an opcode byte and FUZZ_ARG_BYTES bytes of arguments.  A small model of
 * what the fuzzer holds (handle, spaces, owned blocks, reader references,
 * layouts) lets it issue valid calls as well as bad ones.
 *
 * Oracle: no sanitizer report or crash; every call returns 0, a count or
 * a negative errno; a failed alloc/free/publish/release leaves the space's
 * counters as they were; a failed copy, append or attention leaves the
 * blocks this fuzzer holds, its own buffers and the output as they were;
 * and where the fuzzer's own arithmetic says a block of a layout leaves
 * its pool block, or lands in one the space has no memory behind (past
 * kvrt_space_info's backed_bytes), the call must fail (-ERANGE, -EFAULT:
 * never a signal).  Data calls go to blocks the fuzzer holds and to
 * unbacked ones: touching another participant's backed blocks is the
 * caller's contract, not checked.  Errnos kvrt.h promises are checked
 * where the fuzzer can tell: a device path of 256 bytes or more is
 * -ENAMETOOLONG, kvrt_kv_bytes of 0 tokens is 0, kvrt_layout_inline_scales
 * fails only with -EINVAL or -EOVERFLOW.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvrt.h"
#include "fuzz_api_ops.h"

#define NSPACES 3
#define NLAYOUTS 3
#define MAXB 16			/* blocks per space the model tracks */
#define HOST_BLOCKS 4

struct arg {
	const uint8_t *p;
	size_t n, i;
};

static uint8_t u8(struct arg *a)
{
	return a->i < a->n ? a->p[a->i++] : 0;
}

static uint32_t u32(struct arg *a)
{
	uint32_t v = u8(a);

	v |= (uint32_t)u8(a) << 8;
	v |= (uint32_t)u8(a) << 16;
	return v | (uint32_t)u8(a) << 24;
}

struct space_slot {
	struct kvrt_space *s;
	uint64_t block_bytes, nr_blocks;
	uint8_t own[MAXB];
	uint32_t refs[MAXB];
};

static struct kvrt *k;
static struct space_slot sp[NSPACES];
static struct kvrt_layout lay[NLAYOUTS];
static uint64_t lay_scales_off[NLAYOUTS];
static struct kvrt_workers *workers;	/* for the _on calls, made on first use */

static void fail(const char *what, int ret)
{
	fprintf(stderr, "fuzz_api: %s (ret %d)\n", what, ret);
	abort();
}

/* A call's result must be a count or a negative errno. */
static int check_ret(const char *what, int ret)
{
	if (ret < -4095)
		fail(what, ret);
	return ret;
}

static bool held(const struct space_slot *s, uint64_t b)
{
	return b < MAXB && (s->own[b] || s->refs[b]);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *c = p;

	while (n--)
		h = (h ^ *c++) * 0x100000001b3ULL;
	return h;
}

/* Checksum of every block any slot holds (they are all readable). */
static uint64_t held_sum(void)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (int i = 0; i < NSPACES; i++)
		for (uint64_t b = 0; sp[i].s && b < sp[i].nr_blocks && b < MAXB; b++)
			if (held(&sp[i], b))
				h = fnv(h, kvrt_block_addr(sp[i].s, (uint32_t)b), sp[i].block_bytes);
	return h;
}

static void forget_space(struct space_slot *s)
{
	memset(s, 0, sizeof(*s));
}

static void op_open(struct arg *a)
{
	struct kvrt_open_opts o = { .backend = KVRT_BACKEND_EMBEDDED };
	uint8_t bad = u8(a);
	int ret;

	if (k)
		return;
	o.flags = u8(a) & (bad & 1 ? 0xff : KVRT_OPEN_FLAGS);
	o.flags |= KVRT_OPEN_NO_HUGETLB | KVRT_OPEN_NO_MLOCK;
	o.pool_bytes = (uint64_t)u8(a) << 16;
	if (bad & 2)
		o.reserved0 = 1;
	if (bad & 4)
		o.backend = (enum kvrt_backend)(3 + (bad >> 4));
	if (bad & 8) {
		/* A device path of 248..263 bytes: from 256 on, -ENAMETOOLONG. */
		static char path[264];
		size_t n = 248 + (bad >> 4) % 16;

		memset(path, 'd', n);
		path[0] = '/';
		path[n] = '\0';
		o.device = path;
		ret = check_ret("open", kvrt_open(&k, &o));
		/* Bad flags, reserved fields or backend are -EINVAL first. */
		if (n >= 256 && (ret >= 0 || (!(bad & 6) && !(o.flags & ~KVRT_OPEN_FLAGS) &&
					      ret != -ENAMETOOLONG)))
			fail("a device path of 256 bytes or more was not -ENAMETOOLONG", ret);
		if (n < 256 && ret == -ENAMETOOLONG)
			fail("a device path under 256 bytes was -ENAMETOOLONG", ret);
		if (ret < 0)
			k = NULL;
		return;
	}
	if (check_ret("open", kvrt_open(&k, &o)) < 0)
		k = NULL;
}

static void op_close(void)
{
	kvrt_close(k);
	k = NULL;
	for (int i = 0; i < NSPACES; i++)
		forget_space(&sp[i]);
}

static const char *const names[] = { "a", "b", "c", "", "bad/name", "a.b-c_d" };

static void op_space_open(struct arg *a)
{
	static const uint64_t bbs[] = { 4096, 8192, 0, 100, 4096 * 3, 1ULL << 31 };
	uint8_t slot = u8(a) % NSPACES, sel = u8(a), q = u8(a), f = u8(a);
	struct kvrt_space_opts o = { 0 };
	struct kvrt_space_info info;
	struct space_slot *s = &sp[slot];
	int ret;

	if (!k || s->s)
		return;
	o.name = names[sel % 6];
	o.block_bytes = bbs[(sel >> 3) % 6];
	/* Past KVRT_MAX_SPACE_BYTES, or at most MAXB blocks (the model's size). */
	o.quota_bytes = q & 0x80 ? (1ULL << 40) + ((uint64_t)q << 12) :
				   o.block_bytes * (q % (MAXB + 1));
	if (q == 0x7f)
		o.quota_bytes = o.block_bytes + 1;
	o.flags = f & 7;
	if (f & 0x08)
		o.flags |= 0x100;
	o.mode = f & 0x10 ? 0 : 0600;
	o.numa_policy = (enum kvrt_numa_policy)((f >> 5) & 3);
	o.node_mask = f & 0x80 ? ~0ULL : 0;
	ret = check_ret("space_open", kvrt_space_open(k, &o, &s->s));
	if (ret < 0) {
		if (s->s)
			fail("space_open failed with a handle", ret);
		return;
	}
	if (check_ret("space_info", kvrt_space_info(s->s, &info)))
		fail("space_info on a new space", -1);
	s->block_bytes = info.block_bytes;
	s->nr_blocks = info.nr_blocks;
	if (info.nr_blocks > MAXB || info.map_bytes != info.nr_blocks * info.block_bytes)
		fail("space geometry", (int)info.nr_blocks);
}

static void op_space_close(struct arg *a)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];

	if (!s->s)
		return;
	kvrt_space_close(s->s);
	forget_space(s);
}

static void info_snapshot(struct space_slot *s, struct kvrt_space_info *i)
{
	if (kvrt_space_info(s->s, i))
		fail("space_info", -1);
}

static void info_same(struct space_slot *s, const struct kvrt_space_info *before,
		      const char *what, int ret)
{
	struct kvrt_space_info after;

	info_snapshot(s, &after);
	if (after.free_blocks != before->free_blocks ||
	    after.my_blocks != before->my_blocks || after.owned_blocks != before->owned_blocks)
		fail(what, ret);
}

/* Ids for a batch: ones the slot owns or holds, or bad ones, per sel's bits. */
static uint32_t pick_ids(struct arg *a, const struct space_slot *s, uint32_t *ids, uint32_t n,
			 bool want_refs)
{
	uint32_t got = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = u8(a);

		if (c & 0x80) {
			ids[got++] = c & 0x40 ? u32(a) : (uint32_t)(s->nr_blocks + (c & 3));
			continue;
		}
		for (uint32_t t = 0; t < MAXB; t++) {
			uint32_t b = (c + t) % MAXB;

			if (want_refs ? s->refs[b] > 0 : s->own[b]) {
				ids[got++] = b;
				break;
			}
		}
	}
	return got;
}

static void op_alloc(struct arg *a)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];
	uint8_t c = u8(a);
	uint32_t ids[MAXB + 1], n = c % (MAXB + 2);
	struct kvrt_space_info before;
	int ret;

	if (!s->s)
		return;
	if (c & 0x80)
		n = KVRT_MAX_BATCH + 1;
	info_snapshot(s, &before);
	ret = check_ret("alloc", kvrt_alloc_blocks(s->s, n, n > MAXB + 1 || c & 0x40 ? NULL : ids));
	if (ret < 0) {
		info_same(s, &before, "failed alloc changed the space", ret);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] >= s->nr_blocks || s->own[ids[i]] || s->refs[ids[i]])
			fail("alloc returned a held or bad id", (int)ids[i]);
		s->own[ids[i]] = 1;
	}
}

/*
 * FREE's and RELEASE's first half: a space and up to 8 of its ids (of its
 * references when refs) from the input, then the call; a failed call must
 * leave the space as it was.  The slot where the call succeeded, else NULL.
 */
static struct space_slot *ids_call(struct arg *a, bool refs, const char *name,
				   int (*call)(struct kvrt_space *, uint32_t, const uint32_t *),
				   uint32_t ids[8], uint32_t *n)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];
	struct kvrt_space_info before;
	char why[64];
	int ret;

	*n = u8(a) % 9;
	if (!s->s)
		return NULL;
	*n = pick_ids(a, s, ids, *n, refs);
	info_snapshot(s, &before);
	ret = check_ret(name, call(s->s, *n, ids));
	if (ret < 0) {
		snprintf(why, sizeof(why), "failed %s changed the space", name);
		info_same(s, &before, why, ret);
		return NULL;
	}
	return s;
}

static void op_free(struct arg *a)
{
	uint32_t ids[8], n;
	struct space_slot *s = ids_call(a, false, "free", kvrt_free_blocks, ids, &n);

	if (!s)
		return;
	for (uint32_t i = 0; i < n; i++) {
		if (!s->own[ids[i]])
			fail("freed a block not owned", (int)ids[i]);
		s->own[ids[i]] = 0;
	}
}

static void hash_of(uint8_t h[KVRT_HASH_BYTES], uint8_t tag)
{
	memset(h, 0, KVRT_HASH_BYTES);
	h[0] = tag % 8;
}

static void op_publish(struct arg *a)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];
	uint32_t ids[8], orig[8], prio[8], flags[8], n = u8(a) % 9;
	uint8_t hashes[8][KVRT_HASH_BYTES];
	struct kvrt_space_info before;
	int ret;

	if (!s->s)
		return;
	n = pick_ids(a, s, ids, n, false);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = u8(a);

		hash_of(hashes[i], c);
		prio[i] = c & 0x80 ? KVRT_PRIO_MAX + 1 : c & 0x7f;
		orig[i] = ids[i];
	}
	info_snapshot(s, &before);
	ret = check_ret("publish", kvrt_publish(s->s, n, ids, (const uint8_t (*)[KVRT_HASH_BYTES])hashes,
						u8(a) & 1 ? NULL : prio, flags));
	if (ret < 0) {
		info_same(s, &before, "failed publish changed the space", ret);
		if (memcmp(ids, orig, n * sizeof(*ids)))
			fail("failed publish changed ids", ret);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		s->own[orig[i]] = 0;
		if (ids[i] >= MAXB)
			fail("publish returned a bad id", (int)ids[i]);
		s->refs[ids[i]]++;
	}
}

static void op_lookup(struct arg *a)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];
	uint8_t hashes[8][KVRT_HASH_BYTES];
	uint32_t ids[8], n = u8(a) % 9;
	uint64_t devices[8];
	int ret;

	if (!s->s)
		return;
	for (uint32_t i = 0; i < n; i++)
		hash_of(hashes[i], u8(a));
	ret = check_ret("lookup", kvrt_lookup(s->s, n, (const uint8_t (*)[KVRT_HASH_BYTES])hashes,
					      ids, u8(a) & 1 ? devices : NULL));
	for (int i = 0; i < ret; i++) {
		if (ids[i] >= MAXB)
			fail("lookup returned a bad id", (int)ids[i]);
		s->refs[ids[i]]++;
	}
}

static void op_release(struct arg *a)
{
	uint32_t ids[8], n, need[MAXB] = { 0 };
	struct space_slot *s = ids_call(a, true, "release", kvrt_release, ids, &n);

	if (!s)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= MAXB || ++need[ids[i]] > s->refs[ids[i]])
			fail("released a reference not held", (int)ids[i]);
	for (uint32_t i = 0; i < n; i++)
		s->refs[ids[i]]--;
}

/* A layout: a small preset, then perhaps one fuzzed field, inline scales, a space. */
static void op_layout(struct arg *a)
{
	static const uint32_t dims[] = { 8, 16, 64, 0 };
	uint8_t slot = u8(a) % NLAYOUTS, shape = u8(a), more = u8(a), field = u8(a);
	struct kvrt_layout *l = &lay[slot];
	uint64_t bytes;
	int32_t delta = (int32_t)u32(a);
	int ret;

	if (check_ret("layout_init",
		      kvrt_layout_init(l, (enum kvrt_layout_kind)(more & 1 ? 1 : 0),
				       1 + (shape & 1), 1 + ((shape >> 1) & 1), dims[(shape >> 2) & 3],
				       1u << ((shape >> 4) & 3), 1 + (more >> 4),
				       (enum kvrt_dtype)((shape >> 6) & 3))) < 0)
		memset(l, 0, sizeof(*l));
	lay_scales_off[slot] = 0;
	if (more & 2) {
		ret = check_ret("inline_scales",
				kvrt_layout_inline_scales(l, &lay_scales_off[slot]));
		if (ret && ret != -EINVAL && ret != -EOVERFLOW)
			fail("inline_scales: an errno kvrt.h does not list", ret);
	}
	if (more & 4) {
		struct space_slot *s = &sp[(more >> 3) % NSPACES];

		if (s->s)
			check_ret("layout_for_space", kvrt_layout_for_space(l, s->s));
	}
	if (field & 0x80) {
		/* One field moved a little, or set to something wild: what a
		 * caller's edit or bug would do. */
		int64_t *strides = &l->layer_stride;
		uint32_t *sizes = &l->num_layers;
		uint8_t which = field & 15;
		bool wild = ((field >> 4) & 7) == 7;

		if (which < 8)
			strides[which] = wild ? (int64_t)delta * (1LL << 24) :
						strides[which] + delta % 0x10000;
		else if (which < 13)
			sizes[which - 8] = wild ? (uint32_t)delta :
						  sizes[which - 8] + (uint32_t)delta % 4;
	}
	check_ret("block_bytes", kvrt_layout_block_bytes(l, &bytes));
	bytes = 1;
	ret = check_ret("kv_bytes", kvrt_kv_bytes(l->num_layers, l->num_kv_heads, l->head_dim,
						  field, l->kv_dtype, &bytes));
	/* 0 tokens take 0 bytes, whatever the sizes: only a bad argument fails. */
	if (!field && ret != -EINVAL && (ret || bytes))
		fail("kv_bytes of 0 tokens is not 0", ret);
}

/*
 * The fuzzer's own arithmetic: bytes [lo, hi) of block b of l from base,
 * and of its fp8 scales (in bytes) from the scales pointer.  False when a
 * figure overflows (the library must then refuse the layout).
 */
static bool span_of(const struct kvrt_layout *l, uint64_t b, __int128 *lo, __int128 *hi,
		    __int128 *slo, __int128 *shi)
{
	const int64_t s[5] = { l->layer_stride, l->kv_stride, l->token_stride, l->head_stride, 0 };
	const uint32_t n[5] = { l->num_layers, 2, l->block_tokens, l->num_kv_heads, 1 };
	const int64_t ss[2] = { l->scale_layer_stride, l->scale_kv_stride };
	__int128 x;

	*lo = *hi = (__int128)b * l->block_stride;
	for (int i = 0; i < 4; i++) {
		x = (__int128)s[i] * (n[i] - 1);
		if (x < 0)
			*lo += x;
		else
			*hi += x;
	}
	*hi += (__int128)l->head_dim * kvrt_dtype_size(l->kv_dtype);
	*slo = *shi = (__int128)b * l->scale_block_stride;
	for (int i = 0; i < 2; i++) {
		x = (__int128)ss[i] * (n[i] - 1);
		if (x < 0)
			*slo += x;
		else
			*shi += x;
	}
	*shi += l->num_kv_heads;
	*slo *= 4;
	*shi *= 4;
	return *lo >= INT64_MIN && *hi <= INT64_MAX;
}

enum reach { REACH_HELD, REACH_OUTSIDE, REACH_UNHELD, REACH_UNBACKED };

/* Bytes of the space with memory behind them, in whole blocks from its base. */
static uint64_t backed_bytes(const struct space_slot *s)
{
	struct kvrt_space_info info;

	if (check_ret("space_info", kvrt_space_info(s->s, &info)) || !info.block_bytes)
		fail("space_info of an open space", -1);
	return info.backed_bytes / info.block_bytes * info.block_bytes;
}

/*
 * Where [lo, hi) from the slot's base + off lands: in a held pool block,
 * across or out of the mapping, in one not held, in one with no memory
 * behind it (which no one holds).
 */
static enum reach classify(const struct space_slot *s, __int128 lo, __int128 hi)
{
	__int128 map = (__int128)s->nr_blocks * s->block_bytes;

	if (hi <= lo)
		return REACH_HELD;
	if (lo < 0 || hi > map || lo / s->block_bytes != (hi - 1) / s->block_bytes)
		return REACH_OUTSIDE;
	if (hi > (__int128)backed_bytes(s))
		return REACH_UNBACKED;
	return held(s, (uint64_t)(lo / s->block_bytes)) ? REACH_HELD : REACH_UNHELD;
}

/* How the blocks ids[] of layout l from base offset off would land. */
static enum reach layout_reach(const struct space_slot *s, const struct kvrt_layout *l,
			       uint64_t off, uint64_t soff, const int64_t *ids, uint32_t n)
{
	enum reach worst = REACH_HELD, r;
	__int128 lo, hi, slo, shi;
	bool fp8 = l->kv_dtype == KVRT_DTYPE_FP8_E4M3;

	for (uint32_t i = 0; i < n; i++) {
		if (ids[i] < 0)
			continue;
		if (ids[i] >= l->num_blocks || !l->num_layers || !l->num_kv_heads ||
		    !l->head_dim || !l->block_tokens || !kvrt_dtype_size(l->kv_dtype))
			return REACH_OUTSIDE;	/* refused before anything is touched */
		if (!span_of(l, (uint64_t)ids[i], &lo, &hi, &slo, &shi))
			return REACH_OUTSIDE;
		r = classify(s, lo + off, hi + off);
		if (r == REACH_HELD && fp8)
			r = classify(s, slo + soff, shi + soff);
		if (r == REACH_UNHELD)
			return r;
		if (r != REACH_HELD && worst == REACH_HELD)
			worst = r;
	}
	return worst;
}

/* Whether the fuzzer's own buffers (q, out, k, v, the host cache) can be sized for l. */
static bool small_shape(const struct kvrt_layout *l)
{
	return l->num_layers <= 4 && l->num_kv_heads <= 8 && l->head_dim <= 256 &&
	       l->block_tokens <= 64;
}

/* A space-side view for data calls: the slot, a layout, base and scales offsets. */
struct view {
	struct space_slot *s;
	struct kvrt_layout *l;
	uint64_t off, soff;
	char *base;
	float *scales;
};

static bool pick_view(struct arg *a, struct view *v)
{
	uint8_t c = u8(a), d = u8(a);

	v->s = &sp[c % NSPACES];
	v->l = &lay[(c >> 2) % NLAYOUTS];
	if (!v->s->s || !v->s->nr_blocks || !v->l->num_layers)
		return false;
	/* Mostly the space's base; sometimes a held block's, or a few bytes on. */
	v->off = d & 0x10 ? (uint64_t)((d >> 5) % v->s->nr_blocks) * v->s->block_bytes : 0;
	if (d & 0x08)
		v->off += (d & 7) * 64;
	v->soff = v->off + lay_scales_off[(c >> 2) % NLAYOUTS];
	v->base = (char *)kvrt_space_base(v->s->s) + v->off;
	v->scales = v->l->kv_dtype == KVRT_DTYPE_FP8_E4M3 && !(d & 0x80) ?
			    (float *)((char *)kvrt_space_base(v->s->s) + v->soff) : NULL;
	return true;
}

/* After a data call: a refusal changed nothing; a predicted refusal happened. */
static void data_verdict(const char *what, int ret, enum reach r, uint64_t before, uint64_t after)
{
	check_ret(what, ret);
	if (ret < 0 && before != after)
		fail("a failed data call changed held blocks or buffers", ret);
	if (r == REACH_OUTSIDE && ret >= 0)
		fail("a layout leaving its pool block was accepted", ret);
	if (r == REACH_UNBACKED && ret >= 0)
		fail("a block with no memory behind it was accepted", ret);
}

static void op_copy(struct arg *a)
{
	struct view v;
	struct kvrt_layout hl;
	struct kvrt_block_pair pairs[4];
	struct kvrt_block_array sa, ha;
	uint32_t n = u8(a) % 5, flags = u8(a);
	int64_t space_ids[4];
	float hscales[HOST_BLOCKS * 2 * 2 * 2];
	uint64_t hbytes, sum, sum2;
	struct kvrt_copy *done = NULL;
	enum reach r;
	char *host;
	int ret;

	if (!pick_view(a, &v) || !small_shape(v.l))
		return;
	if (kvrt_layout_init(&hl, KVRT_LAYOUT_BLOCK_MAJOR, v.l->num_layers, v.l->num_kv_heads,
			     v.l->head_dim ? v.l->head_dim : 1, v.l->block_tokens ? v.l->block_tokens : 1,
			     HOST_BLOCKS, kvrt_dtype_size(v.l->kv_dtype) ? v.l->kv_dtype : 0) ||
	    kvrt_layout_block_bytes(&hl, &hbytes))
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = u8(a);

		pairs[i].src = c & 0x80 ? HOST_BLOCKS + (c & 1) : c % HOST_BLOCKS;
		pairs[i].dst = c & 0x40 ? u32(a) % (v.l->num_blocks + 2) : (c >> 2) % MAXB;
		space_ids[i] = pairs[i].dst;
	}
	r = layout_reach(v.s, v.l, v.off, v.soff, space_ids, n);
	if (r == REACH_UNHELD)
		return;
	host = malloc(hbytes * HOST_BLOCKS);
	if (!host)
		return;
	memset(host, flags, hbytes * HOST_BLOCKS);
	memset(hscales, 0, sizeof(hscales));
	sa = (struct kvrt_block_array){ .layout = v.l, .base = v.base, .scales = v.scales };
	ha = (struct kvrt_block_array){ .layout = &hl, .base = host,
					.scales = hl.kv_dtype == KVRT_DTYPE_FP8_E4M3 ? hscales : NULL };
	if (flags & 1) {
		/* Space to host: swap each pair's ends. */
		for (uint32_t i = 0; i < n; i++) {
			uint32_t t = pairs[i].src;

			pairs[i].src = pairs[i].dst;
			pairs[i].dst = t;
		}
	}
	sum = fnv(held_sum(), host, hbytes * HOST_BLOCKS);
	ret = kvrt_copy_blocks(k, flags & 1 ? &ha : &sa, flags & 1 ? &sa : &ha, pairs, n,
			       flags & 2 ? KVRT_COPY_ASYNC : 0, flags & 4 ? &done : NULL);
	if (done) {
		check_ret("copy_poll", kvrt_copy_poll(done));
		check_ret("copy_wait", kvrt_copy_wait(done));
		kvrt_copy_free(done);
	}
	sum2 = fnv(held_sum(), host, hbytes * HOST_BLOCKS);
	data_verdict("copy", ret, r, sum, sum2);
	free(host);
}

static void op_append(struct arg *a)
{
	struct view v;
	struct kvrt_kv_cache kv;
	uint32_t n = u8(a) % 5, layer = u8(a) % 3, rows;
	int64_t slots[4], ids[4];
	enum kvrt_dtype src = (enum kvrt_dtype)(u8(a) % 4);
	uint64_t sum;
	enum reach r;
	float *kbuf, *vbuf;
	int ret;

	if (!pick_view(a, &v) || !v.l->block_tokens || !small_shape(v.l))
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = u8(a);

		slots[i] = c & 0x80 ? -(int64_t)(c & 3) - 1 :
			   (int64_t)((c >> 2) % (MAXB + 1)) * v.l->block_tokens + c % v.l->block_tokens;
		ids[i] = slots[i] < 0 ? -1 : slots[i] / v.l->block_tokens;
	}
	r = layout_reach(v.s, v.l, v.off, v.soff, ids, n);
	if (r == REACH_UNHELD)
		return;
	rows = 4 * v.l->num_kv_heads * v.l->head_dim;
	kbuf = calloc(rows ? rows : 1, sizeof(float));
	vbuf = calloc(rows ? rows : 1, sizeof(float));
	if (kbuf && vbuf) {
		for (uint32_t i = 0; i < rows; i++)
			kbuf[i] = vbuf[i] = (float)(int8_t)u8(a) / 8.0f;
		kv = (struct kvrt_kv_cache){ .layout = v.l, .base = v.base, .scales = v.scales,
					     .layer = layer };
		sum = held_sum();
		ret = kvrt_append_kv(&kv, kbuf, vbuf, src, slots, n);
		data_verdict("append", ret, n ? r : REACH_HELD, sum, held_sum());
	}
	free(kbuf);
	free(vbuf);
}

static void op_attn(struct arg *a)
{
	struct view v;
	struct kvrt_kv_cache kv;
	struct kvrt_attn_params p = { 0 };
	int32_t indptr[3], indices[4], seq_lens[2], q_indptr[3];
	int64_t ids[4];
	struct kvrt_block_table t;
	uint8_t c = u8(a), m = u8(a);
	uint32_t nseq = c % 3, nblk = 0, qheads, qrows;
	uint64_t sum;
	enum reach r;
	float *q, *out;
	int ret;

	if (!pick_view(a, &v) || !small_shape(v.l))
		return;
	indptr[0] = q_indptr[0] = 0;
	for (uint32_t s = 0; s < nseq; s++) {
		uint32_t b = 1 + u8(a) % 2;

		for (uint32_t i = 0; i < b; i++) {
			uint8_t x = u8(a);

			indices[nblk] = x & 0x80 ? -1 - (x & 1) : (int32_t)(x % (MAXB + 1));
			ids[nblk] = indices[nblk] < 0 ? (int64_t)v.l->num_blocks : indices[nblk];
			nblk++;
		}
		indptr[s + 1] = (int32_t)nblk;
		seq_lens[s] = (int32_t)(u8(a) % (b * (v.l->block_tokens ? v.l->block_tokens : 1) + 2));
		q_indptr[s + 1] = q_indptr[s] + (seq_lens[s] > 0 ? 1 : 0);
	}
	r = layout_reach(v.s, v.l, v.off, v.soff, ids, nblk);
	if (r == REACH_UNHELD)
		return;
	qheads = v.l->num_kv_heads * (1 + (m & 1)) + (m & 0x80 ? 1 : 0);
	p = (struct kvrt_attn_params){ .num_q_heads = qheads, .sm_scale = 0.125f,
				       .window_left = (int32_t)(m >> 4) % 4 - 2,
				       .logit_softcap = m & 2 ? 30.0f : 0.0f,
				       .q_dtype = (enum kvrt_dtype)((m >> 2) % 4),
				       .o_dtype = KVRT_DTYPE_F32,
				       .impl = (enum kvrt_attn_impl)((m >> 3) & 1),
				       .num_threads = 1 + (c >> 7) };
	qrows = 2 * qheads * (v.l->head_dim ? v.l->head_dim : 1);
	q = calloc(qrows, sizeof(float));
	out = calloc(qrows, sizeof(float));
	if (q && out) {
		t = (struct kvrt_block_table){ .num_seqs = nseq, .indptr = indptr, .indices = indices,
					       .seq_lens = seq_lens };
		kv = (struct kvrt_kv_cache){ .layout = v.l, .base = v.base, .scales = v.scales,
					     .layer = (c >> 2) % 3 };
		sum = fnv(held_sum(), out, qrows * sizeof(float));
		if (c & 0x20 && !workers)
			check_ret("workers_create", kvrt_workers_create(2, &workers));
		if (c & 0x20 && workers)
			ret = c & 0x40 ? kvrt_attn_prefill_on(workers, &p, q, q_indptr, &kv, &t, out) :
					 kvrt_attn_decode_on(workers, &p, q, &kv, &t, out);
		else
			ret = c & 0x40 ? kvrt_attn_prefill(&p, q, q_indptr, &kv, &t, out) :
					 kvrt_attn_decode(&p, q, &kv, &t, out);
		data_verdict("attention", ret, nseq ? r : REACH_HELD, sum,
			     fnv(held_sum(), out, qrows * sizeof(float)));
	}
	free(q);
	free(out);
}

static void op_info(struct arg *a)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];
	struct kvrt_pool_info pi;
	struct kvrt_space_info si;
	struct kvrt_mem_info mi;
	struct kvrt_space_stats st;
	struct kvrt_event ev[4];

	check_ret("version", kvrt_version_number());
	if (!k)
		return;
	check_ret("pool_info", kvrt_pool_info(k, &pi));
	(void)kvrt_backend(k);
	(void)kvrt_backend_info(k);
	if (!s->s)
		return;
	check_ret("space_info", kvrt_space_info(s->s, &si));
	check_ret("mem_info", kvrt_space_mem_info(s->s, &mi));
	check_ret("stats", kvrt_space_stats(s->s, &st));
	check_ret("events_fd", kvrt_events_fd(s->s));
	check_ret("read_events", kvrt_read_events(s->s, ev, u8(a) % 5));
	(void)kvrt_block_addr(s->s, u32(a));
}

static void op_residency(struct arg *a)
{
	struct space_slot *s = &sp[u8(a) % NSPACES];
	uint8_t uuid[KVRT_UUID_BYTES] = { 0 }, c = u8(a);
	struct kvrt_residency_entry e[4];
	uint32_t ids[4], n = c % 5;
	struct kvrt_space_info before;

	if (!s->s)
		return;
	uuid[0] = c >> 5;
	n = pick_ids(a, s, ids, n, (c >> 3) & 1);
	for (uint32_t i = 0; i < n; i++)
		e[i] = (struct kvrt_residency_entry){ .block = ids[i], .gpu_block = u8(a) };
	info_snapshot(s, &before);
	switch ((c >> 4) % 3) {
	case 0:
		check_ret("residency_add", kvrt_residency_add(s->s, uuid, n, n || c & 4 ? e : NULL));
		break;
	case 1:
		check_ret("residency_del", kvrt_residency_del(s->s, uuid, n, ids));
		break;
	default:
		check_ret("residency_clear", kvrt_residency_clear(s->s, uuid));
	}
	info_same(s, &before, "residency changed block states", 0);
}

static void op_destroy(struct arg *a)
{
	if (k)
		check_ret("space_destroy", kvrt_space_destroy(k, names[u8(a) % 6]));
}

static void op_hash(struct arg *a)
{
	uint32_t tokens[8];
	uint8_t out[3][KVRT_HASH_BYTES];
	uint32_t n = u8(a) % 9, bt = u8(a) % 4;

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = u32(a);
	check_ret("hash_block", kvrt_hash_block(NULL, tokens, n, NULL, 0, out[0]));
	check_ret("hash_prompt", kvrt_hash_prompt(NULL, tokens, n, bt, NULL, NULL, out, 3));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 0;

	while (pos < size) {
		uint8_t op = data[pos++];
		struct arg a = { .p = data + pos,
				 .n = size - pos < FUZZ_ARG_BYTES ? size - pos : FUZZ_ARG_BYTES };

		pos += a.n;
		switch (op % FUZZ_NOPS) {
		case FUZZ_OPEN: op_open(&a); break;
		case FUZZ_CLOSE: op_close(); break;
		case FUZZ_SPACE_OPEN: op_space_open(&a); break;
		case FUZZ_SPACE_CLOSE: op_space_close(&a); break;
		case FUZZ_ALLOC: op_alloc(&a); break;
		case FUZZ_FREE: op_free(&a); break;
		case FUZZ_PUBLISH: op_publish(&a); break;
		case FUZZ_LOOKUP: op_lookup(&a); break;
		case FUZZ_RELEASE: op_release(&a); break;
		case FUZZ_LAYOUT: op_layout(&a); break;
		case FUZZ_COPY: op_copy(&a); break;
		case FUZZ_APPEND: op_append(&a); break;
		case FUZZ_ATTN: op_attn(&a); break;
		case FUZZ_INFO: op_info(&a); break;
		case FUZZ_RESIDENCY: op_residency(&a); break;
		case FUZZ_DESTROY: op_destroy(&a); break;
		case FUZZ_HASH: op_hash(&a); break;
		}
	}
	op_close();
	kvrt_workers_destroy(workers);
	workers = NULL;
	memset(lay, 0, sizeof(lay));
	return 0;
}
