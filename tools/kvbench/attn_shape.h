/* SPDX-License-Identifier: GPL-2.0 */
/*
 * attn_shape.h: the head shape kvbench attn and gpu-attn measure (that of
 * Llama 3 8B: GQA 4), one definition so that the CPU and GPU figures, and
 * the GPU peer's, are for the same work.
 */
#ifndef KVBENCH_ATTN_SHAPE_H
#define KVBENCH_ATTN_SHAPE_H

#define HEAD_DIM 128
#define Q_HEADS 32
#define KV_HEADS 8

#endif
