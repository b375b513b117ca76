/* SPDX-License-Identifier: MIT */
/*
 * kvrt_gpu_abi.h: the contract between libkvrt's host code (C, gcc) and
 * the kernels in the cuda/ directory (nvcc).  Every kernel takes one of these
 * structs by value; device addresses travel as uint64_t so the struct has
 * one layout on both sides.  Change a struct here and both sides rebuild;
 * nothing outside libkvrt sees it.
 *
 * Kernel names (extern "C", so the host finds them with
 * cuModuleGetFunction):
 *
 *   kvrt_decode_hd{64,128,256}_{f16,bf16,fp8}   struct kvrt_gk_attn_args
 *   kvrt_decode_g8_hd{64,128,256}_{f16,bf16,fp8}  struct kvrt_gk_attn_args
 *   kvrt_prefill_hd{64,128,256}_{f16,bf16,fp8}  struct kvrt_gk_attn_args
 *   kvrt_prefill_tc_hd{64,128,256}_{f16,bf16,fp8}  struct kvrt_gk_attn_args
 *   kvrt_attn_merge                             struct kvrt_gk_merge_args
 *   kvrt_append_{f16,bf16,fp8}                  struct kvrt_gk_append_args
 *   kvrt_copy_runs                              struct kvrt_gk_copy_args
 *   kvrt_read_stream                            struct kvrt_gk_read_args
 *
 * The suffix is the KV cache dtype; query and output dtypes are fields.
 * kvrt_decode_hd* takes items of 1..4 query heads, kvrt_decode_g8_hd*
 * items of 1..8 (built for 5..8: more registers, fewer CTAs per SM).
 */
#ifndef KVRT_GPU_ABI_H
#define KVRT_GPU_ABI_H

#include <stdint.h>

/* Values of the dtype fields: enum kvrt_dtype's. */
#define KVRT_GK_F32 0
#define KVRT_GK_F16 1
#define KVRT_GK_BF16 2
#define KVRT_GK_FP8_E4M3 3

/*
 * The attention kernels built, one per (head dim, KV dtype): X(hd, name,
 * dtype) gives kvrt_decode_hd<hd>_<name>, kvrt_prefill_hd<hd>_<name> and
 * kvrt_prefill_tc_hd<hd>_<name> (tensor cores, sm_80+: the same work
 * items and results to 16-bit rounding), the names the host looks up
 * (gpu.c).  One list for every place that
 * names them.
 */
#define KVRT_GK_ATTN_VARIANTS(X)                                               \
	X(64, f16, KVRT_GK_F16) X(64, bf16, KVRT_GK_BF16)                        \
	X(64, fp8, KVRT_GK_FP8_E4M3)                                           \
	X(128, f16, KVRT_GK_F16) X(128, bf16, KVRT_GK_BF16)                      \
	X(128, fp8, KVRT_GK_FP8_E4M3)                                          \
	X(256, f16, KVRT_GK_F16) X(256, bf16, KVRT_GK_BF16)                      \
	X(256, fp8, KVRT_GK_FP8_E4M3)

/* Launch shapes the host uses; the kernels are written for them. */
#define KVRT_GK_DECODE_THREADS 128
#define KVRT_GK_PREFILL_THREADS 128
#define KVRT_GK_MERGE_THREADS 128
#define KVRT_GK_APPEND_THREADS 128
#define KVRT_GK_COPY_THREADS 256
#define KVRT_GK_READ_THREADS 256

/*
 * Decode's dynamic shared memory (the host sets the function's maximum and
 * passes it at launch): a ring of K/V tiles of KVRT_GK_DECODE_RING bytes,
 * then q (float [KVRT_GK_MAX_GROUP][hd]) and the warps' p and (m, l).
 */
#define KVRT_GK_DECODE_RING 49152
#define KVRT_GK_DECODE_SMEM(hd) (KVRT_GK_DECODE_RING + KVRT_GK_MAX_GROUP * 4 * (hd) + 896)

/* Query heads one work item covers: one KV head's group, or a slice of it. */
#define KVRT_GK_MAX_GROUP 8
/* Query tokens one prefill work item covers. */
#define KVRT_GK_PREFILL_QTILE 16

/*
 * One CTA's task, made by the host planner.  It attends query heads
 * [q_head0, q_head0 + num_q_heads) (all of KV head kv_head's group or a
 * slice) of query rows [q_row0, q_row_end) of sequence seq, to key
 * positions [tok_begin, tok_end).  Decode: the row is seq (q_row0 = seq,
 * q_row_end = seq + 1; the kernels use seq).
 *
 * Prefill: query row r sits at position seq_lens[seq] - (q_indptr[seq+1]
 * - r); causality and the window are applied inside the kernel, from the
 * positions.  tok_end never exceeds the last row's position + 1.
 *
 * partial < 0: the item covers the whole key range of its rows; write
 * the normalised result to out.  partial >= 0: write the unnormalised
 * partial state to slot `partial` of the workspace:
 *   partial_o[((partial * KVRT_GK_MAX_GROUP) + h) * head_dim + d]   float
 *   partial_ml[((partial * KVRT_GK_MAX_GROUP) + h) * 2 + {0: max, 1: sum}]
 * where h is the head's index within the item (0..num_q_heads-1), max is
 * the largest scaled (and capped) logit and sum is sum(exp(logit - max)),
 * and o is sum(exp(logit - max) * v).  A partial with no visible key
 * writes max = -inf, sum = 0, o = 0; a final row with none (or a merge of
 * only such partials) writes zeros.  Split items are decode only: prefill
 * items always have partial < 0.
 *
 * Decode with kvrt_gk_attn_args.merge set: a partial item names its merge
 * item in merge, and whichever of the merge's partial items finishes last
 * (a counter per merge item) runs the merge, so one launch does it all.
 */
struct kvrt_gk_work {
	int32_t seq;
	int32_t kv_head;
	int32_t q_head0;
	int32_t num_q_heads;	/* 1..KVRT_GK_MAX_GROUP */
	int32_t q_row0;
	int32_t q_row_end;
	int32_t tok_begin;
	int32_t tok_end;
	int32_t partial;
	int32_t merge;		/* partial >= 0: its merge item; else unused */
};

/*
 * Merge of split partials: query row row, heads [q_head0, q_head0 +
 * num_q_heads), from slots [partial0, partial0 + num_partials).
 * out = sum_i exp(m_i - M) * o_i / sum_i exp(m_i - M) * l_i, M = max m_i.
 */
struct kvrt_gk_merge {
	int32_t row;
	int32_t q_head0;
	int32_t num_q_heads;
	int32_t partial0;
	int32_t num_partials;
	int32_t reserved;
};

/*
 * Counts the kernels read from device memory, so that a launch captured
 * in a CUDA graph picks up the next plan: the grid is fixed by the plan's
 * capacity and CTAs stride over [0, num_work) / [0, num_merge).
 */
struct kvrt_gk_plan_hdr {
	uint32_t num_work;
	uint32_t num_merge;
};

struct kvrt_gk_attn_args {
	uint64_t q;		/* [rows][num_q_heads][head_dim], q_dtype */
	uint64_t out;		/* [rows][num_q_heads][head_dim], o_dtype */
	uint64_t k;		/* cache base + layer * layer_stride */
	uint64_t v;		/* the same + kv_stride */
	uint64_t k_scales;	/* fp8: scales + layer * scale_layer_stride, else 0 */
	uint64_t v_scales;	/* the same + scale_kv_stride */
	int64_t block_stride;	/* bytes */
	int64_t token_stride;	/* bytes */
	int64_t head_stride;	/* bytes */
	int64_t scale_block_stride;	/* floats; a head adds 1 */
	uint64_t indices;	/* int32 [indptr[num_seqs]]: block ids */
	uint64_t indptr;	/* int32 [num_seqs + 1] */
	uint64_t seq_lens;	/* int32 [num_seqs] */
	uint64_t q_indptr;	/* prefill: int32 [num_seqs + 1]; decode: 0 */
	uint64_t work;		/* struct kvrt_gk_work [hdr->num_work] */
	uint64_t hdr;		/* struct kvrt_gk_plan_hdr */
	uint64_t partial_o;	/* float, see struct kvrt_gk_work */
	uint64_t partial_ml;	/* float */
	/*
	 * decode: struct kvrt_gk_merge [hdr->num_merge] that the last partial
	 * of each runs, with merge_done, uint32 [num_merge] zeros (the last
	 * partial puts its count back to 0); 0: kvrt_attn_merge runs them.
	 */
	uint64_t merge;
	uint64_t merge_done;
	uint32_t num_q_heads;
	uint32_t block_tokens;	/* 1..128 */
	float sm_scale;
	float logit_softcap;	/* 0: none; else cap * tanh(logit / cap) */
	int32_t window_left;	/* -1: none; else keys at p >= q_pos - window_left */
	uint32_t q_dtype;	/* KVRT_GK_F32/F16/BF16 */
	uint32_t o_dtype;	/* KVRT_GK_F32/F16/BF16 */
	uint32_t reserved;
};

struct kvrt_gk_merge_args {
	uint64_t out;		/* as kvrt_gk_attn_args.out */
	uint64_t merge;		/* struct kvrt_gk_merge [hdr->num_merge] */
	uint64_t hdr;
	uint64_t partial_o;
	uint64_t partial_ml;
	uint32_t num_q_heads;
	uint32_t head_dim;
	uint32_t o_dtype;
	uint32_t reserved;
};

/*
 * Append: token i goes to block slots[i] / block_tokens, offset
 * slots[i] % block_tokens; a negative slot or one >= num_slots is skipped
 * (the host cannot see device slots to reject them first).  src is
 * [num_tokens][num_kv_heads][head_dim] of src_dtype.  fp8 follows
 * kvrt_append_kv()'s scale rule; tokens of one block must be consecutive
 * in the list, each block's run is then applied in order by one CTA.
 */
struct kvrt_gk_append_args {
	uint64_t k_src;
	uint64_t v_src;
	uint64_t slots;		/* int64 [num_tokens] */
	uint64_t k;		/* cache base + layer * layer_stride */
	uint64_t v;		/* the same + kv_stride */
	uint64_t k_scales;	/* fp8 only */
	uint64_t v_scales;
	int64_t block_stride;
	int64_t token_stride;
	int64_t head_stride;
	int64_t scale_block_stride;	/* floats */
	int64_t num_slots;	/* num_blocks * block_tokens */
	uint32_t num_tokens;
	uint32_t num_kv_heads;
	uint32_t head_dim;
	uint32_t block_tokens;
	uint32_t src_dtype;	/* KVRT_GK_F32/F16/BF16 */
	uint32_t reserved;
};

/* Copy: runs[i].bytes from runs[i].src to runs[i].dst; any alignment. */
struct kvrt_gk_copy_run {
	uint64_t src;
	uint64_t dst;
	uint64_t bytes;
};

struct kvrt_gk_copy_args {
	uint64_t runs;		/* struct kvrt_gk_copy_run [num_runs] */
	uint32_t num_runs;
	uint32_t reserved;
};

/*
 * Read stream (a benchmark's limit, not a KV operation): read src[0,
 * units * 16) (16-byte aligned) and write, for each CTA, the sum mod 2^64
 * of the 32-bit words it read to sums[blockIdx.x] (uint64 [gridDim.x]).
 */
struct kvrt_gk_read_args {
	uint64_t src;
	uint64_t units;		/* 16-byte vectors */
	uint64_t sums;		/* uint64 [gridDim.x] */
};

#endif /* KVRT_GPU_ABI_H */
