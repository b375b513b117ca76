// SPDX-License-Identifier: MIT
/*
 * Sequence block tables (kvrt_seqs, 0.5).  Each call and each error path
 * with its exact errno, failures checked to change nothing (stats, every
 * block's reference count and the CSR of every sequence compared before and
 * after); copy-on-write shown on data; a randomized model test over a small
 * block pool; the CSR and slots fed to kvrt_append_kv and kvrt_attn_decode
 * with kvrt_copy_blocks doing the copy-on-write; concurrent callers.
 *
 * The fake KV store is one int64 per slot (block * block_tokens + offset);
 * copy_block copies it, and each append writes a fresh value into the slots
 * it got, so reading a sequence back through its CSR shows whether it sees
 * exactly its own history.  KVRT_SEQ_SEED=N reruns the model with seed N.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

#define MAXB 64		/* blocks in the unit tests' tables, at most */
#define MAXS 64		/* sequences a snapshot covers */
#define MAXI 4096	/* CSR indices a snapshot covers */

struct store {
	uint32_t nb, bt;
	int64_t *v;		/* [nb * bt] */
	int fail;		/* copy_block returns this when non-zero */
	unsigned calls, bad;	/* calls; calls breaking copy_block's contract */
	uint32_t src, dst, n;	/* the last call */
};

static int copy_cb(void *arg, uint32_t src, uint32_t dst, uint32_t n)
{
	struct store *st = arg;

	st->calls++;
	st->src = src, st->dst = dst, st->n = n;
	if (src >= st->nb || dst >= st->nb || src == dst || n == 0 || n >= st->bt)
		st->bad++;
	if (st->fail) {
		/* A failed copy may have written part of dst: scribble on it. */
		for (uint32_t i = 0; i < st->bt && dst < st->nb; i++)
			st->v[(size_t)dst * st->bt + i] = -999;
		return st->fail;
	}
	memcpy(&st->v[(size_t)dst * st->bt], &st->v[(size_t)src * st->bt], n * sizeof(int64_t));
	return 0;
}

static struct kvrt_seqs *mk(struct store *st, uint32_t nb, uint32_t bt)
{
	struct kvrt_seqs_opts o = { .nr_blocks = nb, .block_tokens = bt, .copy_block = copy_cb,
				    .copy_arg = st };
	struct kvrt_seqs *t = NULL;

	memset(st, 0, sizeof(*st));
	st->nb = nb, st->bt = bt;
	st->v = calloc((size_t)nb * bt, sizeof(int64_t));
	if (!st->v || kvrt_seqs_create(&t, &o)) {
		free(st->v);
		return NULL;
	}
	return t;
}

/* Destroy the table; no copy it asked for, in any test, may break copy_block's contract. */
static void rm(struct kvrt_seqs *t, struct store *st)
{
	CHECKF(st->bad == 0, "%u copy_block calls broke its contract", st->bad);
	kvrt_seqs_destroy(t);
	free(st->v);
}

/* Everything observable about a table for the given live ids. */
struct snap {
	struct kvrt_seqs_stats s;
	int refs[MAXB];
	int32_t indptr[MAXS + 1], indices[MAXI], lens[MAXS];
	int n;
};

static void take(struct kvrt_seqs *t, const uint64_t *ids, uint32_t n, struct snap *sn)
{
	memset(sn, 0, sizeof(*sn));
	kvrt_seqs_stats(t, &sn->s);
	for (uint32_t b = 0; b < sn->s.nr_blocks && b < MAXB; b++)
		sn->refs[b] = kvrt_seqs_block_refs(t, b);
	sn->n = kvrt_seqs_csr(t, n, ids, sn->indptr, sn->indices, MAXI, sn->lens);
}

static bool same(const struct snap *a, const struct snap *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* Append n tokens to id and write values base, base + 1, ... into them. */
static int put(struct kvrt_seqs *t, struct store *st, uint64_t id, uint32_t n, int64_t base)
{
	int64_t slots[256];
	int ret = kvrt_seq_append(t, id, n, slots);

	for (uint32_t i = 0; !ret && i < n; i++)
		st->v[slots[i]] = base + i;
	return ret;
}

/* The value at position p of sequence id, read through its CSR; -1 if none. */
static int64_t at(struct kvrt_seqs *t, struct store *st, uint64_t id, uint32_t p)
{
	int32_t indptr[2], idx[MAXB], len;

	if (kvrt_seqs_csr(t, 1, &id, indptr, idx, MAXB, &len) < 0 || p >= (uint32_t)len)
		return -1;
	return st->v[(size_t)idx[p / st->bt] * st->bt + p % st->bt];
}

TEST(create_and_errors)
{
	struct kvrt_seqs_opts o = { .nr_blocks = 8, .block_tokens = 4, .copy_block = copy_cb };
	struct kvrt_seqs *t = (void *)1;
	struct kvrt_seqs_stats s;

	CHECK_EQ(kvrt_seqs_create(NULL, &o), -EINVAL);
	CHECK_EQ(kvrt_seqs_create(&t, NULL), -EINVAL);
	CHECK(t == NULL);
	o.nr_blocks = 0;
	t = (void *)1;
	CHECK_EQ(kvrt_seqs_create(&t, &o), -EINVAL);
	CHECK(t == NULL);
	o.nr_blocks = 8, o.block_tokens = 0;
	CHECK_EQ(kvrt_seqs_create(&t, &o), -EINVAL);
	o.block_tokens = 4, o.copy_block = NULL;
	CHECK_EQ(kvrt_seqs_create(&t, &o), -EINVAL);
	o.copy_block = copy_cb;
	for (int i = 0; i < 4; i++) {
		o.reserved[i] = 1;
		CHECK_EQ(kvrt_seqs_create(&t, &o), -EINVAL);
		o.reserved[i] = 0;
	}
	/* 65536 * 32768 = 2^31 tokens: one past INT32_MAX. */
	o.nr_blocks = 65536, o.block_tokens = 32768;
	CHECK_EQ(kvrt_seqs_create(&t, &o), -EOVERFLOW);
	CHECK(t == NULL);
	o.block_tokens = 32767;
	REQUIRE(kvrt_seqs_create(&t, &o) == 0 && t);
	kvrt_seqs_destroy(t);
	o.nr_blocks = 8, o.block_tokens = 4;
	REQUIRE(kvrt_seqs_create(&t, &o) == 0);
	CHECK_EQ(kvrt_seqs_stats(t, &s), 0);
	CHECK_EQ(s.nr_blocks, 8);
	CHECK_EQ(s.block_tokens, 4);
	CHECK_EQ(s.free_blocks, 8);
	CHECK_EQ(s.used_blocks + s.shared_blocks + s.nr_seqs + s.block_refs + s.copies, 0);
	CHECK_EQ(kvrt_seqs_stats(t, NULL), -EINVAL);
	CHECK_EQ(kvrt_seqs_stats(NULL, &s), -EINVAL);
	CHECK_EQ(kvrt_seqs_block_refs(t, 7), 0);
	CHECK_EQ(kvrt_seqs_block_refs(t, 8), -EINVAL);
	CHECK_EQ(kvrt_seqs_block_refs(NULL, 0), -EINVAL);
	kvrt_seqs_destroy(t);
	kvrt_seqs_destroy(NULL);
}

TEST(add_free_unknown_ids)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 8, 4);
	struct snap a, b;
	uint64_t x, y, z, id, live[2];
	int32_t ip[2], ix[1], ln[1];
	uint32_t blk[1], ni;
	int64_t sl[1];

	REQUIRE(t);
	CHECK_EQ(kvrt_seq_add(NULL, &x), -EINVAL);
	CHECK_EQ(kvrt_seq_add(t, NULL), -EINVAL);
	REQUIRE(kvrt_seq_add(t, &x) == 0 && kvrt_seq_add(t, &y) == 0);
	CHECK(x != 0 && y != 0 && x != y);
	CHECK_EQ(kvrt_seq_len(t, x), 0);
	CHECK_EQ(kvrt_seq_blocks(t, x, NULL, 0), 0);
	REQUIRE(put(t, &st, x, 5, 1) == 0);
	CHECK_EQ(kvrt_seq_free(t, y), 0);
	CHECK_EQ(kvrt_seq_free(t, y), -ENOENT);
	REQUIRE(kvrt_seq_add(t, &z) == 0);
	CHECK(z != y);		/* the slot is reused, the id is not */
	CHECK_EQ(kvrt_seq_len(t, y), -ENOENT);
	CHECK_EQ(kvrt_seq_len(t, z), 0);

	/* Every call on an unknown id (freed, 0, made up): -ENOENT, nothing changed. */
	live[0] = x, live[1] = z;
	take(t, live, 2, &a);
	uint64_t bad[] = { y, 0, 12345, x + (1ULL << 40) };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		id = bad[i];
		sl[0] = -7;
		CHECK_EQ(kvrt_seq_append(t, id, 1, sl), -ENOENT);
		CHECK_EQ(sl[0], -7);
		CHECK_EQ(kvrt_seq_append(t, id, 0, NULL), -ENOENT);
		CHECK_EQ(kvrt_seq_fork(t, id, &z), -ENOENT);
		CHECK_EQ(kvrt_seq_truncate(t, id, 0), -ENOENT);
		CHECK_EQ(kvrt_seq_free(t, id), -ENOENT);
		CHECK_EQ(kvrt_seq_len(t, id), -ENOENT);
		CHECK_EQ(kvrt_seq_blocks(t, id, blk, 1), -ENOENT);
		CHECK_EQ(kvrt_seqs_csr_size(t, 1, &id, &ni), -ENOENT);
		ip[0] = -7;
		CHECK_EQ(kvrt_seqs_csr(t, 1, &id, ip, ix, 1, ln), -ENOENT);
		CHECK_EQ(ip[0], -7);
	}
	/* NULL tables and pointers: -EINVAL. */
	CHECK_EQ(kvrt_seq_append(NULL, x, 1, sl), -EINVAL);
	CHECK_EQ(kvrt_seq_append(t, x, 1, NULL), -EINVAL);
	CHECK_EQ(kvrt_seq_fork(NULL, x, &id), -EINVAL);
	CHECK_EQ(kvrt_seq_fork(t, x, NULL), -EINVAL);
	CHECK_EQ(kvrt_seq_truncate(NULL, x, 0), -EINVAL);
	CHECK_EQ(kvrt_seq_free(NULL, x), -EINVAL);
	CHECK_EQ(kvrt_seq_len(NULL, x), -EINVAL);
	CHECK_EQ(kvrt_seq_blocks(NULL, x, blk, 1), -EINVAL);
	CHECK_EQ(kvrt_seq_blocks(t, x, NULL, 1), -EINVAL);
	CHECK_EQ(kvrt_seq_add_blocks(NULL, 0, NULL, 0, &id), -EINVAL);
	CHECK_EQ(kvrt_seq_add_blocks(t, 0, NULL, 0, NULL), -EINVAL);
	take(t, live, 2, &b);
	CHECK(same(&a, &b));
	CHECK_EQ(b.s.nr_seqs, 2);
	rm(t, &st);
}

TEST(append_slots_and_enospc)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 4, 4);
	int64_t s[16];
	uint64_t a, b, ids[2];
	struct snap x, y;
	uint32_t blk[4];

	REQUIRE(t);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && kvrt_seq_add(t, &b) == 0);
	ids[0] = a, ids[1] = b;
	/* Blocks come from 0 up: a gets block 0, b block 1, a then block 2. */
	REQUIRE(kvrt_seq_append(t, a, 3, s) == 0);
	CHECK(s[0] == 0 && s[1] == 1 && s[2] == 2);
	REQUIRE(kvrt_seq_append(t, b, 2, s) == 0);
	CHECK(s[0] == 4 && s[1] == 5);
	REQUIRE(kvrt_seq_append(t, a, 3, s) == 0);
	CHECK(s[0] == 3 && s[1] == 8 && s[2] == 9);
	CHECK_EQ(kvrt_seq_len(t, a), 6);
	CHECK_EQ(kvrt_seq_blocks(t, a, blk, 4), 2);
	CHECK(blk[0] == 0 && blk[1] == 2);
	take(t, ids, 2, &x);
	CHECK_EQ(x.s.free_blocks, 1);
	CHECK_EQ(x.s.used_blocks, 3);
	CHECK_EQ(x.s.block_refs, 3);
	CHECK_EQ(x.n, 3);
	CHECK(x.indptr[0] == 0 && x.indptr[1] == 2 && x.indptr[2] == 3);
	CHECK(x.lens[0] == 6 && x.lens[1] == 2);

	/* b + 7 needs 2 new blocks, 1 is free: -ENOSPC, slots untouched. */
	for (int i = 0; i < 16; i++)
		s[i] = -7;
	CHECK_EQ(kvrt_seq_append(t, b, 7, s), -ENOSPC);
	CHECK_EQ(kvrt_seq_append(t, b, UINT32_MAX, s), -ENOSPC);
	CHECK_EQ(s[0], -7);
	take(t, ids, 2, &y);
	CHECK(same(&x, &y));
	/* n 0 is a no-op even with nothing free to take. */
	CHECK_EQ(kvrt_seq_append(t, b, 0, NULL), 0);
	/* Exactly what is free: b + 6 takes the last block. */
	REQUIRE(kvrt_seq_append(t, b, 6, s) == 0);
	CHECK(s[0] == 6 && s[1] == 7 && s[2] == 12 && s[5] == 15);
	CHECK_EQ(kvrt_seq_append(t, b, 1, s), -ENOSPC);
	/* a's last block has room: no block needed. */
	REQUIRE(kvrt_seq_append(t, a, 2, s) == 0);
	CHECK(s[0] == 10 && s[1] == 11);
	CHECK_EQ(kvrt_seq_append(t, a, 1, s), -ENOSPC);
	take(t, ids, 2, &y);
	CHECK_EQ(y.s.free_blocks, 0);
	CHECK(y.lens[0] == 8 && y.lens[1] == 8);
	CHECK_EQ(st.calls, 0);
	rm(t, &st);
}

TEST(add_blocks)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 6, 4);
	uint64_t a, c, e, ids[3];
	uint32_t bl[3];
	int64_t s[8];
	struct snap x, y;

	REQUIRE(t);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && kvrt_seq_append(t, a, 1, s) == 0);	/* holds 0 */
	ids[0] = a;
	take(t, ids, 1, &x);
	CHECK_EQ(kvrt_seq_add_blocks(t, 1, NULL, 1, &c), -EINVAL);
	bl[0] = 2, bl[1] = 3;
	CHECK_EQ(kvrt_seq_add_blocks(t, 2, bl, 4, &c), -EINVAL);	/* 4 tokens: 1 block */
	CHECK_EQ(kvrt_seq_add_blocks(t, 1, bl, 5, &c), -EINVAL);	/* 5 tokens: 2 blocks */
	CHECK_EQ(kvrt_seq_add_blocks(t, 1, bl, 0, &c), -EINVAL);
	CHECK_EQ(kvrt_seq_add_blocks(t, 7, bl, 28, &c), -EINVAL);	/* more than the table */
	bl[1] = 6;
	CHECK_EQ(kvrt_seq_add_blocks(t, 2, bl, 5, &c), -EINVAL);	/* block 6 >= 6 */
	bl[1] = 2;
	CHECK_EQ(kvrt_seq_add_blocks(t, 2, bl, 5, &c), -EINVAL);	/* twice */
	bl[1] = 0;
	CHECK_EQ(kvrt_seq_add_blocks(t, 2, bl, 5, &c), -EBUSY);	/* a holds 0 */
	bl[0] = 3, bl[1] = 4, bl[2] = 0;
	CHECK_EQ(kvrt_seq_add_blocks(t, 3, bl, 9, &c), -EBUSY);
	take(t, ids, 1, &y);
	CHECK(same(&x, &y));	/* the repeat marks were undone: all refs 0 again */

	/* Blocks 5 and 3, filled by the caller, 6 tokens. */
	bl[0] = 5, bl[1] = 3;
	st.v[20] = 50, st.v[21] = 51, st.v[22] = 52, st.v[23] = 53;
	st.v[12] = 54, st.v[13] = 55;
	REQUIRE(kvrt_seq_add_blocks(t, 2, bl, 6, &c) == 0);
	CHECK_EQ(kvrt_seq_len(t, c), 6);
	CHECK_EQ(kvrt_seqs_block_refs(t, 5), 1);
	CHECK_EQ(kvrt_seqs_block_refs(t, 3), 1);
	for (uint32_t p = 0; p < 6; p++)
		CHECK_EQ(at(t, &st, c, p), 50 + p);
	REQUIRE(kvrt_seq_append(t, c, 3, s) == 0);
	CHECK(s[0] == 14 && s[1] == 15);
	CHECK(s[2] != 20 && s[2] != 12 && s[2] / 4 != 0);	/* a fresh block */
	REQUIRE(kvrt_seq_add_blocks(t, 0, NULL, 0, &e) == 0);
	CHECK_EQ(kvrt_seq_len(t, e), 0);
	ids[1] = c, ids[2] = e;
	take(t, ids, 3, &y);
	CHECK_EQ(y.s.free_blocks, 2);
	CHECK_EQ(y.s.nr_seqs, 3);
	CHECK(y.indices[1] == 5 && y.indices[2] == 3);
	CHECK(y.indptr[3] == y.indptr[2]);
	/* Free hands them back. */
	CHECK_EQ(kvrt_seq_free(t, c), 0);
	CHECK_EQ(kvrt_seqs_block_refs(t, 5), 0);
	REQUIRE(kvrt_seq_add_blocks(t, 1, &bl[0], 4, &c) == 0);
	rm(t, &st);
}

TEST(fork_shares)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 8, 4);
	uint64_t a, c, ids[2];
	struct snap x;

	REQUIRE(t);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && put(t, &st, a, 6, 100) == 0);
	REQUIRE(kvrt_seq_fork(t, a, &c) == 0);
	CHECK(c != a);
	ids[0] = a, ids[1] = c;
	take(t, ids, 2, &x);
	CHECK_EQ(x.n, 4);
	CHECK(x.indices[0] == x.indices[2] && x.indices[1] == x.indices[3]);
	CHECK(x.lens[0] == 6 && x.lens[1] == 6);
	CHECK(x.refs[0] == 2 && x.refs[1] == 2 && x.refs[2] == 0);
	CHECK_EQ(x.s.shared_blocks, 2);
	CHECK_EQ(x.s.used_blocks, 2);
	CHECK_EQ(x.s.block_refs, 4);
	CHECK_EQ(x.s.nr_seqs, 2);
	/* Freeing the parent leaves the child's blocks held. */
	CHECK_EQ(kvrt_seq_free(t, a), 0);
	take(t, &c, 1, &x);
	CHECK(x.refs[0] == 1 && x.refs[1] == 1);
	CHECK_EQ(x.s.shared_blocks, 0);
	CHECK_EQ(x.s.free_blocks, 6);
	for (uint32_t p = 0; p < 6; p++)
		CHECK_EQ(at(t, &st, c, p), 100 + p);
	rm(t, &st);
}

TEST(copy_on_write)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 16, 4);
	uint64_t a, c, d, e;
	struct kvrt_seqs_stats s;
	uint32_t ba[4], bc[4];

	REQUIRE(t);
	/* Partial last block shared: the first append of either side copies. */
	REQUIRE(kvrt_seq_add(t, &a) == 0 && put(t, &st, a, 6, 100) == 0);
	REQUIRE(kvrt_seq_fork(t, a, &c) == 0);
	REQUIRE(put(t, &st, a, 1, 200) == 0);
	CHECK_EQ(st.calls, 1);
	CHECK(st.src == 1 && st.n == 2 && st.dst >= 2);
	REQUIRE(put(t, &st, c, 1, 300) == 0);	/* c alone holds block 1 now */
	CHECK_EQ(st.calls, 1);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.copies, 1);
	CHECK_EQ(s.shared_blocks, 1);	/* block 0, full */
	for (uint32_t p = 0; p < 6; p++) {
		CHECK_EQ(at(t, &st, a, p), 100 + p);
		CHECK_EQ(at(t, &st, c, p), 100 + p);
	}
	CHECK_EQ(at(t, &st, a, 6), 200);
	CHECK_EQ(at(t, &st, c, 6), 300);
	CHECK_EQ(kvrt_seq_blocks(t, a, ba, 4), 2);
	CHECK_EQ(kvrt_seq_blocks(t, c, bc, 4), 2);
	CHECK(ba[0] == bc[0] && ba[1] != bc[1] && bc[1] == 1);

	/* Full blocks are never copied: fork at a block boundary, both grow. */
	REQUIRE(kvrt_seq_add(t, &d) == 0 && put(t, &st, d, 8, 400) == 0);
	REQUIRE(kvrt_seq_fork(t, d, &e) == 0);
	REQUIRE(put(t, &st, d, 3, 500) == 0 && put(t, &st, e, 3, 600) == 0);
	REQUIRE(put(t, &st, d, 3, 510) == 0 && put(t, &st, e, 3, 610) == 0);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.copies, 1);
	CHECK_EQ(st.calls, 1);
	CHECK_EQ(s.shared_blocks, 3);
	for (uint32_t p = 0; p < 8; p++)
		CHECK(at(t, &st, d, p) == 400 + p && at(t, &st, e, p) == 400 + p);
	CHECK(at(t, &st, d, 8) == 500 && at(t, &st, e, 8) == 600);
	CHECK(at(t, &st, d, 13) == 512 && at(t, &st, e, 13) == 612);

	/* Three holders of a partial block: two copies, the last writes in place. */
	REQUIRE(kvrt_seq_free(t, a) == 0 && kvrt_seq_free(t, c) == 0);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && put(t, &st, a, 2, 700) == 0);
	REQUIRE(kvrt_seq_fork(t, a, &c) == 0 && kvrt_seq_fork(t, c, &e) == 0);
	CHECK_EQ(kvrt_seq_blocks(t, a, ba, 4), 1);
	CHECK_EQ(kvrt_seqs_block_refs(t, ba[0]), 3);
	REQUIRE(put(t, &st, a, 1, 800) == 0 && put(t, &st, c, 1, 810) == 0);
	REQUIRE(put(t, &st, e, 1, 820) == 0);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.copies, 3);
	CHECK_EQ(kvrt_seqs_block_refs(t, ba[0]), 1);
	CHECK(at(t, &st, a, 2) == 800 && at(t, &st, c, 2) == 810 && at(t, &st, e, 2) == 820);
	CHECK(at(t, &st, a, 1) == 701 && at(t, &st, c, 1) == 701 && at(t, &st, e, 1) == 701);
	rm(t, &st);
}

TEST(truncate)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 8, 4);
	uint64_t a, c, ids[2];
	struct snap x, y;
	struct kvrt_seqs_stats s;

	REQUIRE(t);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && put(t, &st, a, 10, 100) == 0);
	take(t, &a, 1, &x);
	CHECK_EQ(kvrt_seq_truncate(t, a, 11), -ERANGE);
	CHECK_EQ(kvrt_seq_truncate(t, a, UINT32_MAX), -ERANGE);
	CHECK_EQ(kvrt_seq_truncate(t, a, 10), 0);
	take(t, &a, 1, &y);
	CHECK(same(&x, &y));
	CHECK_EQ(x.s.free_blocks, 5);
	CHECK_EQ(kvrt_seq_truncate(t, a, 8), 0);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.free_blocks, 6);
	CHECK_EQ(kvrt_seq_truncate(t, a, 5), 0);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.free_blocks, 6);	/* 5 tokens still need 2 blocks */
	CHECK_EQ(kvrt_seq_len(t, a), 5);
	REQUIRE(put(t, &st, a, 1, 900) == 0);	/* overwrites position 5, in place */
	CHECK(at(t, &st, a, 4) == 104 && at(t, &st, a, 5) == 900);
	CHECK_EQ(kvrt_seq_truncate(t, a, 0), 0);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.free_blocks, 8);
	CHECK_EQ(s.block_refs, 0);
	CHECK_EQ(kvrt_seq_blocks(t, a, NULL, 0), 0);

	/* A shared block left partial by truncate is not written through. */
	REQUIRE(put(t, &st, a, 8, 100) == 0);
	REQUIRE(kvrt_seq_fork(t, a, &c) == 0);
	CHECK_EQ(kvrt_seq_truncate(t, c, 6), 0);
	kvrt_seqs_stats(t, &s);
	CHECK_EQ(s.shared_blocks, 2);
	REQUIRE(put(t, &st, c, 1, 300) == 0);
	CHECK_EQ(st.calls, 1);
	CHECK_EQ(st.n, 2);
	CHECK(at(t, &st, a, 6) == 106 && at(t, &st, a, 7) == 107);
	CHECK(at(t, &st, c, 5) == 105 && at(t, &st, c, 6) == 300);
	/* Truncating the parent below a block the child holds only drops a ref. */
	ids[0] = a, ids[1] = c;
	take(t, ids, 2, &x);
	CHECK_EQ(kvrt_seq_truncate(t, a, 3), 0);
	take(t, ids, 2, &y);
	CHECK_EQ(y.s.free_blocks, x.s.free_blocks + 1);	/* a's second block, a's own */
	CHECK_EQ(y.refs[x.indices[0]], 2);
	CHECK_EQ(y.s.shared_blocks, 1);
	REQUIRE(put(t, &st, a, 1, 500) == 0);	/* block 0 shared, partial: copied */
	CHECK_EQ(st.calls, 2);
	CHECK(at(t, &st, c, 3) == 103 && at(t, &st, a, 3) == 500);
	rm(t, &st);
}

TEST(csr)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 8, 4);
	uint64_t a, b, e, ids[4];
	int32_t ip[5], ix[8], ln[4];
	uint32_t n;
	struct snap x, y;

	REQUIRE(t);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && put(t, &st, a, 9, 0) == 0);
	REQUIRE(kvrt_seq_add(t, &b) == 0 && put(t, &st, b, 4, 0) == 0);
	REQUIRE(kvrt_seq_add(t, &e) == 0);
	ids[0] = b, ids[1] = e, ids[2] = a, ids[3] = b;	/* b twice */
	take(t, ids, 3, &x);
	CHECK_EQ(kvrt_seqs_csr_size(t, 4, ids, &n), 0);
	CHECK_EQ(n, 5);
	CHECK_EQ(kvrt_seqs_csr_size(t, 0, NULL, &n), 0);
	CHECK_EQ(n, 0);
	CHECK_EQ(kvrt_seqs_csr_size(t, 1, NULL, &n), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr_size(t, 1, ids, NULL), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr_size(NULL, 1, ids, &n), -EINVAL);

	memset(ip, 0x55, sizeof(ip));
	memset(ix, 0x55, sizeof(ix));
	memset(ln, 0x55, sizeof(ln));
	CHECK_EQ(kvrt_seqs_csr(t, 4, ids, ip, ix, 4, ln), -ENOSPC);
	CHECK_EQ(kvrt_seqs_csr(t, 4, ids, NULL, ix, 8, ln), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr(t, 4, NULL, ip, ix, 8, ln), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr(t, 4, ids, ip, NULL, 8, ln), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr(t, 4, ids, ip, ix, 8, NULL), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr(NULL, 4, ids, ip, ix, 8, ln), -EINVAL);
	CHECK_EQ(kvrt_seqs_csr(t, 4, ids, ip, NULL, 0, ln), -ENOSPC);
	CHECK_EQ(ip[0], 0x55555555);
	CHECK_EQ(ix[0], 0x55555555);
	CHECK_EQ(ln[0], 0x55555555);
	CHECK_EQ(kvrt_seqs_csr(t, 4, ids, ip, ix, 5, ln), 5);
	CHECK(ip[0] == 0 && ip[1] == 1 && ip[2] == 1 && ip[3] == 4 && ip[4] == 5);
	CHECK(ln[0] == 4 && ln[1] == 0 && ln[2] == 9 && ln[3] == 4);
	CHECK(ix[0] == 3 && ix[1] == 0 && ix[2] == 1 && ix[3] == 2 && ix[4] == 3);
	CHECK_EQ(ix[5], 0x55555555);
	/* An empty subset: just indptr[0]. */
	ip[0] = -1;
	CHECK_EQ(kvrt_seqs_csr(t, 0, NULL, ip, NULL, 0, NULL), 0);
	CHECK_EQ(ip[0], 0);
	/* Block lists: -ENOSPC writing nothing when cap is short. */
	uint32_t bl[3] = { 77, 77, 77 };
	CHECK_EQ(kvrt_seq_blocks(t, a, bl, 2), -ENOSPC);
	CHECK_EQ(bl[0], 77);
	CHECK_EQ(kvrt_seq_blocks(t, a, bl, 3), 3);
	CHECK(bl[0] == 0 && bl[1] == 1 && bl[2] == 2);
	take(t, ids, 3, &y);
	CHECK(same(&x, &y));
	rm(t, &st);
}

TEST(copy_failure_and_enospc_changes_nothing)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 4, 4);
	uint64_t a, c, f, ids[3];
	int64_t s[8] = { -7, -7, -7, -7 };
	struct snap x, y;

	REQUIRE(t);
	REQUIRE(kvrt_seq_add(t, &a) == 0 && put(t, &st, a, 2, 100) == 0);
	REQUIRE(kvrt_seq_fork(t, a, &c) == 0);
	ids[0] = a, ids[1] = c;
	take(t, ids, 2, &x);
	st.fail = -EIO;
	CHECK_EQ(kvrt_seq_append(t, a, 1, s), -EIO);
	st.fail = -ENOMEM;
	CHECK_EQ(kvrt_seq_append(t, c, 3, s), -ENOMEM);
	st.fail = 1;	/* not an errno: reported as -EIO */
	CHECK_EQ(kvrt_seq_append(t, a, 1, s), -EIO);
	CHECK_EQ(s[0], -7);
	CHECK_EQ(st.calls, 3);
	take(t, ids, 2, &y);
	CHECK(same(&x, &y));
	CHECK_EQ(y.s.copies, 0);
	st.fail = 0;
	REQUIRE(put(t, &st, a, 1, 200) == 0);
	CHECK(at(t, &st, a, 1) == 101 && at(t, &st, a, 2) == 200);
	CHECK_EQ(at(t, &st, c, 2), -1);
	CHECK(at(t, &st, c, 0) == 100 && at(t, &st, c, 1) == 101);

	/* The copy needs a block too: with none free, -ENOSPC and no copy call. */
	REQUIRE(kvrt_seq_fork(t, a, &f) == 0);
	REQUIRE(kvrt_seq_append(t, c, 8, s) == 0);	/* c: 3 blocks, all taken */
	ids[2] = f;
	take(t, ids, 3, &x);
	CHECK_EQ(x.s.free_blocks, 0);
	CHECK_EQ(kvrt_seq_append(t, a, 1, s), -ENOSPC);
	CHECK_EQ(st.calls, 4);
	take(t, ids, 3, &y);
	CHECK(same(&x, &y));
	rm(t, &st);
}

/* ---- the model test --------------------------------------------------------
 *
 * The model knows each sequence as the list of values written at its token
 * positions, nothing about blocks.  From the table it takes only the block
 * lists (kvrt_seq_blocks) to predict which appends must fail for want of
 * blocks and which must copy; it checks every block's reference count
 * against the holders those lists give, the free count against the
 * distinct held blocks, and every sequence's values read through the CSR
 * against its own history.
 */
#define M_NB 12
#define M_BT 4
#define M_SEQS 10
#define M_LEN (M_NB * M_BT)

struct mseq {
	uint64_t id;
	uint32_t len;
	int64_t val[M_LEN];
};

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* Check the table against the model; returns false (and says why) on a
 * mismatch. */
static bool model_check(struct kvrt_seqs *t, struct store *st, struct mseq *m, int nm,
			uint64_t copies, int step)
{
	int holders[M_NB] = { 0 };
	uint32_t bl[M_NB];
	uint64_t ids[M_SEQS], refs = 0;
	int32_t ip[M_SEQS + 1], ix[M_SEQS * M_NB], ln[M_SEQS];
	struct kvrt_seqs_stats s;
	uint32_t distinct = 0, shared = 0, need;
	int n;

	for (int i = 0; i < nm; i++) {
		n = kvrt_seq_blocks(t, m[i].id, bl, M_NB);
		if (n != (int)((m[i].len + M_BT - 1) / M_BT)) {
			tap_diag("step %d: seq %d has %d blocks for %u tokens", step, i, n,
				 m[i].len);
			return false;
		}
		for (int j = 0; j < n; j++) {
			for (int k = 0; k < j; k++)
				if (bl[k] == bl[j]) {
					tap_diag("step %d: seq %d holds block %u twice", step, i, bl[j]);
					return false;
				}
			holders[bl[j]]++;
		}
		ids[i] = m[i].id;
		refs += n;
	}
	for (uint32_t b = 0; b < M_NB; b++) {
		if (kvrt_seqs_block_refs(t, b) != holders[b]) {
			tap_diag("step %d: block %u refs %d, held by %d", step, b,
				 kvrt_seqs_block_refs(t, b), holders[b]);
			return false;
		}
		distinct += holders[b] > 0;
		shared += holders[b] > 1;
	}
	kvrt_seqs_stats(t, &s);
	if (s.free_blocks + distinct != M_NB || s.used_blocks != distinct ||
	    s.shared_blocks != shared || s.block_refs != refs || s.nr_seqs != (uint32_t)nm ||
	    s.copies != copies) {
		tap_diag("step %d: stats free %u used %u shared %u refs %llu seqs %u copies %llu;"
			 " model: distinct %u shared %u refs %llu seqs %d copies %llu", step,
			 s.free_blocks, s.used_blocks, s.shared_blocks,
			 (unsigned long long)s.block_refs, s.nr_seqs,
			 (unsigned long long)s.copies, distinct, shared,
			 (unsigned long long)refs, nm, (unsigned long long)copies);
		return false;
	}
	if (kvrt_seqs_csr_size(t, nm, ids, &need) || need != refs ||
	    kvrt_seqs_csr(t, nm, ids, ip, ix, sizeof(ix) / sizeof(ix[0]), ln) != (int)need) {
		tap_diag("step %d: csr failed", step);
		return false;
	}
	for (int i = 0; i < nm; i++) {
		if (ln[i] != (int32_t)m[i].len ||
		    ip[i + 1] - ip[i] != (int32_t)((m[i].len + M_BT - 1) / M_BT)) {
			tap_diag("step %d: seq %d csr len %d blocks %d, model len %u", step, i, ln[i],
				 ip[i + 1] - ip[i], m[i].len);
			return false;
		}
		for (uint32_t p = 0; p < m[i].len; p++) {
			int64_t v = st->v[(size_t)ix[ip[i] + p / M_BT] * M_BT + p % M_BT];

			if (v != m[i].val[p]) {
				tap_diag("step %d: seq %d position %u reads %lld, wrote %lld", step, i,
					 p, (long long)v, (long long)m[i].val[p]);
				return false;
			}
		}
	}
	return true;
}

/* Blocks that no sequence holds, from the block lists. */
static int free_list(struct kvrt_seqs *t, struct mseq *m, int nm, uint32_t *out)
{
	bool held[M_NB] = { false };
	uint32_t bl[M_NB];
	int n = 0;

	for (int i = 0; i < nm; i++) {
		int k = kvrt_seq_blocks(t, m[i].id, bl, M_NB);

		for (int j = 0; j < k; j++)
			held[bl[j]] = true;
	}
	for (uint32_t b = 0; b < M_NB; b++)
		if (!held[b])
			out[n++] = b;
	return n;
}

static bool run_model(uint64_t seed, int steps, unsigned *counts)
{
	static struct mseq m[M_SEQS];
	struct store st;
	struct kvrt_seqs *t = mk(&st, M_NB, M_BT);
	struct snap before, after;
	uint64_t ids[M_SEQS], copies = 0, dead[64];
	int64_t next = 1, slots[M_LEN + 8];
	int nm = 0, ndead = 0;
	bool ok = true;

	if (!t)
		return false;
	rng = seed ? seed : 1;
	for (int step = 0; step < steps && ok; step++) {
		int op = rnd(100), i = nm ? (int)rnd(nm) : -1, ret, want = 0;
		uint32_t fb[M_NB], nfree = free_list(t, m, nm, fb);

		for (int j = 0; j < nm; j++)
			ids[j] = m[j].id;
		take(t, ids, nm, &before);
		if (op < 8 && nm < M_SEQS) {			/* add */
			ret = kvrt_seq_add(t, &m[nm].id);
			if (ret == 0)
				m[nm++].len = 0;
			counts[0]++;
		} else if (op < 16 && nm < M_SEQS) {		/* add_blocks */
			uint32_t k = rnd(4), ntok = k ? (k - 1) * M_BT + 1 + rnd(M_BT) : 0;
			uint32_t bl[4];
			bool busy = false;

			if (k > nfree || rnd(4) == 0) {		/* take a held one on purpose */
				if (!nm || !k)
					continue;
				uint32_t hb[M_NB];
				int hn = kvrt_seq_blocks(t, m[i].id, hb, M_NB);

				if (hn <= 0)
					continue;
				for (uint32_t j = 0; j < k; j++)
					bl[j] = j < nfree ? fb[j] : hb[0];
				bl[rnd(k)] = hb[rnd(hn)];
				busy = true;
			} else {
				for (uint32_t j = 0; j < k; j++) {	/* k distinct free blocks */
					uint32_t r = j + rnd(nfree - j), tmp = fb[j];

					fb[j] = fb[r], fb[r] = tmp;
					bl[j] = fb[j];
				}
			}
			/* The caller fills the blocks first: the values the model expects. */
			if (!busy)
				for (uint32_t p = 0; p < ntok; p++) {
					m[nm].val[p] = next;
					st.v[(size_t)bl[p / M_BT] * M_BT + p % M_BT] = next++;
				}
			ret = kvrt_seq_add_blocks(t, k, bl, ntok, &m[nm].id);
			want = busy ? -EBUSY : 0;
			if (ret == 0)
				m[nm++].len = ntok;
			counts[1]++;
		} else if (op < 60 && nm) {			/* append */
			uint32_t n = 1 + rnd(rnd(4) ? 3 : 9), hb[M_NB];
			int hn = kvrt_seq_blocks(t, m[i].id, hb, M_NB);
			bool cow = m[i].len % M_BT && kvrt_seqs_block_refs(t, hb[hn - 1]) > 1;
			uint32_t need = (m[i].len + n + M_BT - 1) / M_BT - hn + cow;
			bool fail = cow && rnd(8) == 0;

			st.fail = fail ? -EIO : 0;
			want = need > nfree ? -ENOSPC : fail ? -EIO : 0;
			ret = kvrt_seq_append(t, m[i].id, n, slots);
			st.fail = 0;
			counts[7] += ret == 0 && cow;
			counts[8] += ret == -EIO;
			if (ret == 0) {
				copies += cow;
				for (uint32_t j = 0; j < n; j++) {
					m[i].val[m[i].len + j] = next;
					st.v[slots[j]] = next++;
				}
				m[i].len += n;
			}
			counts[ret == -ENOSPC ? 3 : 2]++;
		} else if (op < 75 && nm && nm < M_SEQS) {	/* fork */
			ret = kvrt_seq_fork(t, m[i].id, &m[nm].id);
			if (ret == 0) {
				m[nm].len = m[i].len;
				memcpy(m[nm].val, m[i].val, sizeof(m[i].val));
				nm++;
			}
			counts[4]++;
		} else if (op < 90 && nm) {			/* truncate */
			uint32_t len = rnd(8) ? rnd(m[i].len + 1) : m[i].len + 1 + rnd(3);

			want = len > m[i].len ? -ERANGE : 0;
			ret = kvrt_seq_truncate(t, m[i].id, len);
			if (ret == 0)
				m[i].len = len;
			counts[5]++;
		} else if (nm) {				/* free, or a dead id */
			if (ndead && rnd(4) == 0) {
				ret = kvrt_seq_free(t, dead[rnd(ndead)]);
				want = -ENOENT;
			} else {
				ret = kvrt_seq_free(t, m[i].id);
				if (ret == 0) {
					dead[ndead++ % 64] = m[i].id;
					ndead = ndead > 64 ? 64 : ndead;
					m[i] = m[--nm];
				}
			}
			counts[6]++;
		} else {
			continue;
		}
		if (ret != want) {
			tap_diag("seed %llu step %d op %d: returned %d, expected %d",
				 (unsigned long long)seed, step, op, ret, want);
			ok = false;
		}
		if (ret) {
			take(t, ids, before.s.nr_seqs, &after);
			if (!same(&before, &after)) {
				tap_diag("seed %llu step %d: failed call %d changed the table",
					 (unsigned long long)seed, step, ret);
				ok = false;
			}
		}
		if (ok && !model_check(t, &st, m, nm, copies, step)) {
			tap_diag("seed %llu", (unsigned long long)seed);
			ok = false;
		}
	}
	if (st.bad) {
		tap_diag("seed %llu: %u copy_block calls broke the contract",
			 (unsigned long long)seed, st.bad);
		ok = false;
	}
	rm(t, &st);
	return ok;
}

TEST(model_random)
{
	unsigned c[9] = { 0 };
	const char *env = getenv("KVRT_SEQ_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 0x5eed17;

	for (int r = 0; r < 10; r++)
		if (!run_model(seed + r, 10000, c)) {
			CHECK(!"model mismatch");
			break;
		}
	tap_diag("ops: add %u add_blocks %u append %u (copied %u, copy failed %u) enospc %u"
		 " fork %u truncate %u free %u", c[0], c[1], c[2], c[7], c[8], c[3], c[4], c[5],
		 c[6]);
	/* The run must have exercised the failure paths it is meant to. */
	CHECK(c[3] > 100 && c[7] > 100 && c[8] > 10);
	CHECK(c[4] > 100 && c[5] > 100 && c[1] > 100);
}

/* ---- the real thing: append_kv, kvrt_copy_blocks, attention ------------------ */

struct real {
	struct kvrt *k;
	struct kvrt_block_array arr;
};

static int real_copy(void *arg, uint32_t src, uint32_t dst, uint32_t ntokens)
{
	struct real *r = arg;
	struct kvrt_block_pair p = { .src = src, .dst = dst };

	(void)ntokens;
	return kvrt_copy_blocks(r->k, &r->arr, &r->arr, &p, 1, 0, NULL);
}

/* K/V of token p of branch br (br 0: the shared prompt), one head of 8 dims. */
static void kv_of(uint32_t p, int br, float *k, float *v)
{
	for (int d = 0; d < 8; d++) {
		k[d] = sinf((float)(p * 8 + d + 100 * br)) * 0.5f;
		v[d] = cosf((float)(p * 3 + d + 77 * br));
	}
}

TEST(with_append_kv_and_attention)
{
	struct kvrt_open_opts oo = { .backend = KVRT_BACKEND_EMBEDDED };
	struct kvrt_layout l;
	struct real r = { 0 };
	struct kvrt_seqs *t = NULL;
	struct kvrt_seqs_opts so = { .nr_blocks = 8, .block_tokens = 4, .copy_block = real_copy,
				     .copy_arg = &r };
	struct kvrt_attn_params ap = { .num_q_heads = 2, .sm_scale = 0.35f, .window_left = -1,
				       .q_dtype = KVRT_DTYPE_F32, .o_dtype = KVRT_DTYPE_F32,
				       .impl = KVRT_ATTN_REFERENCE, .num_threads = 1 };
	float k[8], v[8], q[2][2][8], out[2][2][8], ref[2][2][8];
	uint64_t a, b, ids[2];
	int64_t slot;
	int32_t ip[3], ix[8], ln[2];
	struct kvrt_seqs_stats st;

	REQUIRE(kvrt_open(&r.k, &oo) == 0);
	REQUIRE(kvrt_layout_init(&l, KVRT_LAYOUT_BLOCK_MAJOR, 1, 1, 8, 4, 8, KVRT_DTYPE_F32) == 0);
	r.arr.layout = &l;
	r.arr.base = calloc(8, (size_t)l.block_stride);
	REQUIRE(r.arr.base);
	struct kvrt_kv_cache kv = { .layout = &l, .base = r.arr.base };
	REQUIRE(kvrt_seqs_create(&t, &so) == 0);

	/* A 6-token prompt, forked; each branch appends 3 tokens of its own. */
	REQUIRE(kvrt_seq_add(t, &a) == 0);
	for (uint32_t p = 0; p < 6; p++) {
		kv_of(p, 0, k, v);
		REQUIRE(kvrt_seq_append(t, a, 1, &slot) == 0);
		REQUIRE(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, &slot, 1) == 0);
	}
	REQUIRE(kvrt_seq_fork(t, a, &b) == 0);
	ids[0] = a, ids[1] = b;
	for (uint32_t p = 6; p < 9; p++)
		for (int s = 0; s < 2; s++) {
			kv_of(p, s + 1, k, v);
			REQUIRE(kvrt_seq_append(t, ids[s], 1, &slot) == 0);
			REQUIRE(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, &slot, 1) == 0);
		}
	REQUIRE(kvrt_seqs_stats(t, &st) == 0);
	CHECK_EQ(st.copies, 1);
	CHECK_EQ(st.shared_blocks, 1);
	CHECK_EQ(st.used_blocks, 5);	/* 1 shared + 2 each; unshared would be 6 */
	REQUIRE(kvrt_seqs_csr(t, 2, ids, ip, ix, 8, ln) == 6);
	for (int s = 0; s < 2; s++)
		for (int h = 0; h < 2; h++)
			for (int d = 0; d < 8; d++)
				q[s][h][d] = cosf((float)(s * 31 + h * 7 + d));
	struct kvrt_block_table bt = { .num_seqs = 2, .indptr = ip, .indices = ix,
				       .seq_lens = ln };
	REQUIRE(kvrt_attn_decode(&ap, q, &kv, &bt, out) == 0);

	/* The same two histories written independently, without the table. */
	memset(r.arr.base, 0, 8 * (size_t)l.block_stride);
	int32_t rip[3] = { 0, 3, 6 }, rix[6] = { 0, 1, 2, 3, 4, 5 }, rln[2] = { 9, 9 };
	for (int s = 0; s < 2; s++)
		for (uint32_t p = 0; p < 9; p++) {
			kv_of(p, p < 6 ? 0 : s + 1, k, v);
			slot = (int64_t)(s * 3 + p / 4) * 4 + p % 4;
			REQUIRE(kvrt_append_kv(&kv, k, v, KVRT_DTYPE_F32, &slot, 1) == 0);
		}
	struct kvrt_block_table rbt = { .num_seqs = 2, .indptr = rip, .indices = rix,
					.seq_lens = rln };
	REQUIRE(kvrt_attn_decode(&ap, q, &kv, &rbt, ref) == 0);
	CHECK(!memcmp(out, ref, sizeof(out)));
	CHECK(memcmp(out[0], out[1], sizeof(out[0])));	/* the branches differ */

	kvrt_seqs_destroy(t);
	free(r.arr.base);
	kvrt_close(r.k);
}

/* ---- concurrent callers ----------------------------------------------------------
 *
 * Four threads share one table and one store, each working on sequences of
 * its own (so no two threads write one block); each checks its sequences'
 * values at the end, and the table's counts must add up.
 */
struct thr {
	struct kvrt_seqs *t;
	struct store *st;
	int id;
	bool ok;
	uint64_t ids[8];
	int n;
};

static void *thr_run(void *arg)
{
	struct thr *h = arg;
	uint64_t r = 0x9e3779b97f4a7c15ULL * (h->id + 1);
	static __thread int64_t val[8][512];
	static __thread uint32_t len[8];
	int64_t slots[16];
	int64_t next = (int64_t)h->id << 40;

	h->ok = true;
	for (int step = 0; step < 4000; step++) {
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		int op = r % 10, i = h->n ? (int)((r >> 8) % h->n) : -1;

		if (h->n == 0 || (op == 0 && h->n < 8)) {
			if (kvrt_seq_add(h->t, &h->ids[h->n]) == 0)
				len[h->n++] = 0;
		} else if (op < 6) {
			uint32_t n = 1 + (r >> 20) % 8;

			if (len[i] + n <= 512 && kvrt_seq_append(h->t, h->ids[i], n, slots) == 0) {
				for (uint32_t j = 0; j < n; j++) {
					h->st->v[slots[j]] = next;
					val[i][len[i]++] = next++;
				}
			}
		} else if (op < 8 && h->n < 8) {
			if (kvrt_seq_fork(h->t, h->ids[i], &h->ids[h->n]) == 0) {
				memcpy(val[h->n], val[i], sizeof(val[i]));
				len[h->n++] = len[i];
			}
		} else if (op == 8) {
			uint32_t l = len[i] ? (uint32_t)((r >> 30) % len[i]) : 0;

			if (kvrt_seq_truncate(h->t, h->ids[i], l))
				h->ok = false;
			len[i] = l;
		} else {
			if (kvrt_seq_free(h->t, h->ids[i]))
				h->ok = false;
			h->n--;
			h->ids[i] = h->ids[h->n];
			len[i] = len[h->n];
			memcpy(val[i], val[h->n], sizeof(val[i]));
		}
	}
	for (int i = 0; i < h->n; i++)
		for (uint32_t p = 0; p < len[i]; p++)
			if (at(h->t, h->st, h->ids[i], p) != val[i][p])
				h->ok = false;
	return NULL;
}

TEST(threads)
{
	struct store st;
	struct kvrt_seqs *t = mk(&st, 64, 4);
	struct thr h[4];
	pthread_t th[4];
	uint32_t bl[64];
	int holders[64] = { 0 }, nseq = 0;
	struct kvrt_seqs_stats s;
	uint64_t refs = 0;

	REQUIRE(t);
	/* at() reads through a fixed-size CSR: keep sequences within MAXB blocks. */
	for (int i = 0; i < 4; i++) {
		h[i] = (struct thr){ .t = t, .st = &st, .id = i };
		REQUIRE(pthread_create(&th[i], NULL, thr_run, &h[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(h[i].ok);
		for (int j = 0; j < h[i].n; j++) {
			int n = kvrt_seq_blocks(t, h[i].ids[j], bl, 64);

			CHECK(n >= 0);
			for (int k = 0; k < n; k++)
				holders[bl[k]]++;
			refs += n > 0 ? n : 0;
			nseq++;
		}
	}
	kvrt_seqs_stats(t, &s);
	uint32_t used = 0;
	for (uint32_t b = 0; b < 64; b++) {
		CHECK_EQ(kvrt_seqs_block_refs(t, b), holders[b]);
		used += holders[b] > 0;
	}
	CHECK_EQ(s.used_blocks, used);
	CHECK_EQ(s.free_blocks + used, 64);
	CHECK_EQ(s.block_refs, refs);
	CHECK_EQ(s.nr_seqs, nseq);
	rm(t, &st);
}

int main(void)
{
	RUN(create_and_errors);
	RUN(add_free_unknown_ids);
	RUN(append_slots_and_enospc);
	RUN(add_blocks);
	RUN(fork_shares);
	RUN(copy_on_write);
	RUN(truncate);
	RUN(csr);
	RUN(copy_failure_and_enospc_changes_nothing);
	RUN(model_random);
	RUN(with_append_kv_and_attention);
	RUN(threads);
	return tap_done("test_seq");
}
