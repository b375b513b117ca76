/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The byte encoding fuzz_kvcore.c reads and gen_corpus.c writes.
 * Integers are little-endian; bytes past the end of the input read as 0.
 *
 *   input    := geometry op*
 *   geometry := g:u8 [bb:u64 | bb:u32] (nb:u64 if g & GEO_RAW_NB, else nb:u16) pool:u8
 *               block_bytes: geo_bb[g & 7], or the raw value for GEO_BB_RAW64/32;
 *               nr_blocks: 1 + nb % 4096, or the raw u64 with GEO_RAW_NB;
 *               pool: 0 unlimited (small ranges), else pool * 16 blocks
 *   op       := code:u8 args   (code % FOP_COUNT)
 *     FOP_ALLOC       owner:u8 count:u16      count 0xffff: 0xffffffff
 *     FOP_FREE_OWNED  owner:u8 k:u8 (idx:u16){k}   ids owner holds, picked by idx
 *     FOP_FREE_RAW    owner:u8 k:u8 (id:u16){k}    0xffff: 0xffffffff
 *     FOP_RELEASE     owner:u8
 *     FOP_HOST_MODE   mode:u8 arg:u32          see fuzz_kvcore.c
 *     FOP_HOST_SCRIPT n:u8 (kind:u8 v:u32){n % (HOST_SCRIPT_MAX + 1)}
 *     FOP_FAULT       nth:u8                   kvcore's (nth % 5)th allocation fails
 *     FOP_REINIT      geometry
 *     FOP_PUBLISH     owner:u8 k:u8 (idx:u16 hash:u8 prio:u8){k % 17}
 *                     idx: the owner's (idx % n)th block, 0xffff or no block: idx raw;
 *                     prio < 200: prio % 101, else prio - 99 (out of range)
 *     FOP_LOOKUP      owner:u8 k:u8 (hash:u8){k % 65}
 *     FOP_UNREF       owner:u8 k:u8 (idx:u16){k % 17}  references held, picked by idx
 *     FOP_DROP_REFS   owner:u8
 *     FOP_EVICT       count:u8 cause:u8
 *     FOP_RECLAIM     blk:u16 off:u16 nblk:u8 len_off:u16 cause:u8
 *                     start = blk * bb + off % bb, len = nblk * bb + len_off % bb
 *     FOP_REFILL      kind:u8 v:u8                 see fuzz_kvcore.c
 *     FOP_LIMITS      readers:u8 refs:u8           max_readers 1 + readers,
 *                     every holder's limit 1 + 4 * refs: the bounds within reach
 *   owner := owner_map[u8 % 10]; hash := test_hash(u8 % FUZZ_HASHES)
 */
#ifndef KVC_FUZZ_OPS_H
#define KVC_FUZZ_OPS_H

enum fuzz_op {
	FOP_ALLOC,
	FOP_FREE_OWNED,
	FOP_FREE_RAW,
	FOP_RELEASE,
	FOP_HOST_MODE,
	FOP_HOST_SCRIPT,
	FOP_FAULT,
	FOP_REINIT,
	FOP_PUBLISH,
	FOP_LOOKUP,
	FOP_UNREF,
	FOP_DROP_REFS,
	FOP_EVICT,
	FOP_RECLAIM,
	FOP_REFILL,
	FOP_LIMITS,
	FOP_COUNT,
};

#define GEO_BB_RAW64	6
#define GEO_BB_RAW32	7
#define GEO_RAW_NB	0x80

static const unsigned long long geo_bb[8] = { 1, 7, 512, 3000, 4096, 1 << 20, 0, 0 };

/* A small alphabet of hashes, so that dedups and hits are common. */
#define FUZZ_HASHES	24

/* Script entry kinds (kind % 4). */
enum { SCR_ERRNO, SCR_ZERO, SCR_BYTES, SCR_RAW_NEG };

#endif /* KVC_FUZZ_OPS_H */
