// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * libFuzzer target for kvcore: the input is a geometry and a sequence of
 * operations (fuzz_ops.h), the block operations and the prefix cache's.
 * Each operation runs on kvcore and on the reference model (harness.c),
 * which compares results, callbacks, the whole state and kvc_space_check
 * after every step.  A mismatch aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include "harness.h"
#include "fuzz_ops.h"

#define FUZZ_MAX_COUNT	1024	/* ids per ALLOC, FREE */
#define FUZZ_MAX_OPS	4096
#define FUZZ_POOL_CAP	4096	/* blocks the host gives a huge range */

struct reader {
	const uint8_t *p;
	size_t n, off;
};

static uint64_t rd(struct reader *r, int bytes)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < bytes; i++, r->off++)
		if (r->off < r->n)
			v |= (uint64_t)r->p[r->off] << (8 * i);
	return v;
}

static const kvc_u32 owner_map[10] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 0xffffffffu };

static kvc_u32 rd_owner(struct reader *r)
{
	return owner_map[rd(r, 1) % 10];
}

static struct pair P;
static kvc_u32 ids[FUZZ_MAX_COUNT + 64], owned[FUZZ_MAX_COUNT * 4];
static struct kvc_publish_entry ents[16];
static kvc_u8 hashes[64][KVC_HASH_BYTES];

static void on_mismatch(struct pair *p)
{
	fprintf(stderr, "fuzz_kvcore: kvcore and the model disagree: %s\n", p->why);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	harness_on_fail = on_mismatch;
	return 0;
}

static kvc_u64 sat_mul(kvc_u64 a, kvc_u64 b)
{
	return a && b > ~0ULL / a ? ~0ULL : a * b;
}

static void geometry(struct reader *r)
{
	unsigned int g = (unsigned int)rd(r, 1), pool;
	kvc_u64 bb, nb;

	if ((g & 7) == GEO_BB_RAW64)
		bb = rd(r, 8);
	else if ((g & 7) == GEO_BB_RAW32)
		bb = rd(r, 4);
	else
		bb = geo_bb[g & 7];
	nb = g & GEO_RAW_NB ? rd(r, 8) : 1 + rd(r, 2) % 4096;
	pool = (unsigned int)rd(r, 1);

	pair_fini(&P);
	if (pair_init(&P, bb, nb))
		return;
	P.h.check_in_grow = true;
	if (pool)
		P.h.pool_left = sat_mul(pool * 16ULL, bb);
	else if (nb > 4096)
		P.h.pool_left = sat_mul(FUZZ_POOL_CAP, bb);
}

static void host_mode(struct reader *r)
{
	unsigned int mode = (unsigned int)(rd(r, 1) % HOST_MODES);
	kvc_u64 v = rd(r, 4), bb = P.r.block_bytes;
	long long arg = 0;

	switch (mode) {
	case HOST_CHUNK:
		arg = (long long)(1 + v);
		break;
	case HOST_PARTIAL:
		/* At most about 64 calls per block. */
		arg = (long long)(bb / (1 + v % 64));
		if (!arg)
			arg = 1;
		break;
	case HOST_ERRNO:
		if (v >> 31)
			arg = -(long long)((v & 0x7fffffff) << 24) - 1;
		else
			arg = -(long long)(1 + v % 4200);
		break;
	}
	host_set(&P.h, (int)mode, arg);
}

static void host_script_op(struct reader *r)
{
	long long script[HOST_SCRIPT_MAX];
	unsigned int n = (unsigned int)(rd(r, 1) % (HOST_SCRIPT_MAX + 1)), i;
	kvc_u64 bb = P.r.block_bytes, lim = sat_mul(4, bb);

	for (i = 0; i < n; i++) {
		unsigned int kind = (unsigned int)(rd(r, 1) % 4);
		kvc_u64 v = rd(r, 4);

		switch (kind) {
		case SCR_ERRNO:
			script[i] = -(long long)(1 + v % 4200);
			break;
		case SCR_ZERO:
			script[i] = 0;
			break;
		case SCR_BYTES:
			script[i] = (long long)(1 + v % lim);
			break;
		default:
			script[i] = -(long long)((v << 31) | 1);
			break;
		}
	}
	host_script(&P.h, n, script);
}

static void free_owned(struct reader *r)
{
	kvc_u32 o = rd_owner(r), k = (kvc_u32)rd(r, 1), n, i;

	n = ref_owned_ids(&P.r, o, owned, sizeof(owned) / sizeof(owned[0]));
	if (k == 255)
		k = n < FUZZ_MAX_COUNT ? n : FUZZ_MAX_COUNT;	/* all of them, in order */
	for (i = 0; i < k; i++)
		ids[i] = k == n ? owned[i] : n ? owned[rd(r, 2) % n] : (kvc_u32)rd(r, 2);
	pair_free(&P, o, k, ids);
}

static void free_raw(struct reader *r)
{
	kvc_u32 o = rd_owner(r), k = (kvc_u32)rd(r, 1), i;

	for (i = 0; i < k; i++) {
		kvc_u32 id = (kvc_u32)rd(r, 2);

		ids[i] = id == 0xffff ? 0xffffffffu : id;
	}
	pair_free(&P, o, k, ids);
}

static void publish(struct reader *r)
{
	kvc_u32 o = rd_owner(r), k = (kvc_u32)(rd(r, 1) % 17), n, i;

	n = ref_owned_ids(&P.r, o, owned, sizeof(owned) / sizeof(owned[0]));
	for (i = 0; i < k; i++) {
		kvc_u32 idx = (kvc_u32)rd(r, 2);
		unsigned int h = (unsigned int)rd(r, 1), prio = (unsigned int)rd(r, 1);

		memset(&ents[i], 0, sizeof(ents[i]));
		ents[i].id = n && idx != 0xffff ? owned[idx % n] : idx;
		test_hash(ents[i].hash, h % FUZZ_HASHES);
		ents[i].priority = prio < 200 ? prio % (KVC_PRIO_MAX + 1) : prio - 99;
	}
	pair_publish(&P, o, k, ents);
}

static void lookup(struct reader *r)
{
	kvc_u32 o = rd_owner(r), k = (kvc_u32)(rd(r, 1) % 65), i;

	for (i = 0; i < k; i++)
		test_hash(hashes[i], (unsigned int)(rd(r, 1) % FUZZ_HASHES));
	pair_lookup(&P, o, k, (const kvc_u8 (*)[KVC_HASH_BYTES])hashes, ids);
}

static void unref(struct reader *r)
{
	kvc_u32 o = rd_owner(r), k = (kvc_u32)(rd(r, 1) % 17), n, i;

	n = ref_held_ids(&P.r, o, owned, sizeof(owned) / sizeof(owned[0]));
	for (i = 0; i < k; i++) {
		kvc_u32 idx = (kvc_u32)rd(r, 2);

		ids[i] = n && idx != 0xffff ? owned[idx % n] : idx;
	}
	pair_unref(&P, o, k, ids);
}

static void reclaim(struct reader *r)
{
	kvc_u64 bb = P.r.block_bytes, blk = rd(r, 2), off = rd(r, 2), nblk = rd(r, 1);
	kvc_u64 len_off = rd(r, 2), start, len;
	unsigned int cause = (unsigned int)(rd(r, 1) % KVC_EVICT_CAUSES);

	/* Saturate: huge blocks must not wrap the range into something small. */
	start = sat_mul(blk, bb);
	start = start > ~0ULL - off % bb ? ~0ULL : start + off % bb;
	len = sat_mul(nblk, bb);
	len = len > ~0ULL - len_off % bb ? ~0ULL : len + len_off % bb;
	pair_reclaim(&P, start, len, cause);
}

static void refill_mode(struct reader *r)
{
	static const int errs[] = { -ENOSPC, -EDQUOT, -ENOMEM, -EIO, -EINTR, -4095 };
	unsigned int kind = (unsigned int)(rd(r, 1) % 3), v = (unsigned int)rd(r, 1), i, n;
	int script[HOST_SCRIPT_MAX];

	if (kind == 0) {
		host_refill_set(&P.h, REFILL_POOL, 0);
	} else if (kind == 1) {
		host_refill_set(&P.h, REFILL_ERRNO, errs[v % 6]);
	} else {
		n = v % 8;
		for (i = 0; i < n; i++) {
			unsigned int e = (unsigned int)rd(r, 1);

			script[i] = e % 3 == 0 ? 0 : errs[e % 6];
		}
		host_refill_script(&P.h, n, script);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader r = { data, size, 0 };
	unsigned int nops = 0;

	kvc_fail_alloc_countdown = 0;
	geometry(&r);
	while (r.off < r.n && nops++ < FUZZ_MAX_OPS) {
		unsigned int op = (unsigned int)(rd(&r, 1) % FOP_COUNT);
		kvc_u32 o, count;

		if (!P.live && op != FOP_REINIT)
			continue;
		switch (op) {
		case FOP_ALLOC:
			o = rd_owner(&r);
			count = (kvc_u32)rd(&r, 2);
			if (count == 0xffff)
				count = 0xffffffffu;
			else if (count > FUZZ_MAX_COUNT)
				count %= FUZZ_MAX_COUNT + 1;
			pair_alloc(&P, o, count, ids);
			break;
		case FOP_FREE_OWNED:
			free_owned(&r);
			break;
		case FOP_FREE_RAW:
			free_raw(&r);
			break;
		case FOP_RELEASE:
			pair_release(&P, rd_owner(&r));
			break;
		case FOP_HOST_MODE:
			host_mode(&r);
			break;
		case FOP_HOST_SCRIPT:
			host_script_op(&r);
			break;
		case FOP_FAULT:
			kvc_fail_alloc_countdown = (long)(rd(&r, 1) % 5);
			break;
		case FOP_REINIT:
			kvc_fail_alloc_countdown = 0;
			geometry(&r);
			break;
		case FOP_PUBLISH:
			publish(&r);
			break;
		case FOP_LOOKUP:
			lookup(&r);
			break;
		case FOP_UNREF:
			unref(&r);
			break;
		case FOP_DROP_REFS:
			pair_drop_refs(&P, rd_owner(&r));
			break;
		case FOP_EVICT:
			count = (kvc_u32)rd(&r, 1);
			pair_evict(&P, count, (unsigned int)(rd(&r, 1) % KVC_EVICT_CAUSES));
			break;
		case FOP_RECLAIM:
			reclaim(&r);
			break;
		case FOP_REFILL:
			refill_mode(&r);
			break;
		case FOP_LIMITS:
			count = (kvc_u32)rd(&r, 1);
			pair_limits(&P, 1 + count, 1 + 4 * rd(&r, 1));
			break;
		}
	}
	kvc_fail_alloc_countdown = 0;
	pair_fini(&P);
	return 0;
}
