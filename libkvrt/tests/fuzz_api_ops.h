/* SPDX-License-Identifier: MIT */
/*
 * fuzz_api_ops.h: the input format fuzz_api.c decodes and gen_fuzz_seeds.c
 * writes: operations of one opcode byte (taken modulo FUZZ_NOPS) followed
 * by FUZZ_ARG_BYTES argument bytes (short at the end of the input: missing
 * bytes read as 0).
 */
#ifndef FUZZ_API_OPS_H
#define FUZZ_API_OPS_H

#define FUZZ_ARG_BYTES 24

enum fuzz_op {
	FUZZ_OPEN, FUZZ_CLOSE, FUZZ_SPACE_OPEN, FUZZ_SPACE_CLOSE, FUZZ_ALLOC, FUZZ_FREE,
	FUZZ_PUBLISH, FUZZ_LOOKUP, FUZZ_RELEASE, FUZZ_LAYOUT, FUZZ_COPY, FUZZ_APPEND,
	FUZZ_ATTN, FUZZ_INFO, FUZZ_RESIDENCY, FUZZ_DESTROY, FUZZ_HASH, FUZZ_NOPS
};

#endif
