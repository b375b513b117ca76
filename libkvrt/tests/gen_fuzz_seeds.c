// SPDX-License-Identifier: MIT
/*
 * gen_fuzz_seeds.c DIR: writes fuzz_api's seed inputs, each a scenario
 * that reaches a deep state at once (a space with blocks, a layout for it,
 * data calls, the prefix cache), so that the fuzzer starts from there
 * rather than from finding kvrt_open by chance.  Argument bytes follow
 * the decoding in fuzz_api.c.
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_api_ops.h"

static unsigned char buf[4096];
static size_t len;

static void op(int code, const unsigned char *args, size_t n)
{
	buf[len++] = (unsigned char)code;
	memset(buf + len, 0, FUZZ_ARG_BYTES);
	memcpy(buf + len, args, n);
	len += FUZZ_ARG_BYTES;
}

#define OP(code, ...)                                                            \
	do {                                                                     \
		const unsigned char a_[] = { 0, __VA_ARGS__ };                  \
		op(code, a_ + 1, sizeof(a_) - 1);                                \
	} while (0)

/* Open, a space "a" of 8 blocks of 4 KiB, all allocated, layout 0 for it. */
static void prologue(unsigned char shape, unsigned char more, unsigned char field,
		     unsigned char delta_lo, unsigned char delta_hi)
{
	OP(FUZZ_OPEN);
	OP(FUZZ_SPACE_OPEN, 0, 0, 8, 1);
	OP(FUZZ_ALLOC, 0, 8);
	OP(FUZZ_LAYOUT, 0, shape, more, field, delta_lo, delta_hi);
}

/* Host blocks 0, 1 to space blocks 1, 2; back; append; decode; prefill. */
static void data_calls(void)
{
	OP(FUZZ_COPY, 2, 0, 0, 0, 0x04, 0x09);
	OP(FUZZ_COPY, 2, 1 | 4, 0, 0, 0x04, 0x09);
	OP(FUZZ_APPEND, 2, 0, 0, 0, 0, 0x04, 0x08, 1, 2, 3, 4, 5, 6, 7, 8);
	OP(FUZZ_ATTN, 0x01, 0x10, 0, 0, 0, 1, 8);
	OP(FUZZ_ATTN, 0x41, 0x18, 0, 0, 0, 2, 8);
}

static int save(const char *dir, const char *name)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		perror(path);
		return 1;
	}
	len = 0;
	return 0;
}

int main(int argc, char **argv)
{
	int bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	/* f32, 1 layer, 1 head, 64 dims, 8 tokens: one 4 KiB block. */
	prologue(0x38, 0x04, 0, 0, 0);
	data_calls();
	OP(FUZZ_PUBLISH, 0, 2, 3, 4, 1, 2, 0);
	OP(FUZZ_LOOKUP, 0, 3, 1, 2, 3, 1);
	OP(FUZZ_RESIDENCY, 0, 0x09, 0, 5);
	OP(FUZZ_RELEASE, 0, 2, 3, 4);
	OP(FUZZ_INFO, 0, 4);
	OP(FUZZ_HASH, 8, 2, 1, 0, 0, 0, 2, 0, 0, 0);
	OP(FUZZ_FREE, 0, 2, 0, 1);
	OP(FUZZ_SPACE_CLOSE, 0);
	OP(FUZZ_DESTROY, 0);
	OP(FUZZ_CLOSE);
	bad |= save(argv[1], "seed-f32-space");

	/* fp8 with inline scales, laid over the space. */
	prologue(0xf8, 0x06, 0, 0, 0);
	data_calls();
	bad |= save(argv[1], "seed-fp8-inline");

	/* kv_stride widened by one pool block: V leaves each pool block. */
	prologue(0x38, 0x04, 0x81, 0x00, 0x08);
	data_calls();
	bad |= save(argv[1], "seed-widened-stride");

	/* Two participants of one persistent space, the second joining. */
	OP(FUZZ_OPEN);
	OP(FUZZ_SPACE_OPEN, 0, 0, 8, 1 | 4);
	OP(FUZZ_SPACE_OPEN, 1, 0, 0, 0);
	OP(FUZZ_ALLOC, 0, 2);
	OP(FUZZ_PUBLISH, 0, 2, 0, 1, 1, 2, 0);
	OP(FUZZ_LOOKUP, 1, 2, 1, 2, 0);
	OP(FUZZ_SPACE_CLOSE, 0);
	OP(FUZZ_DESTROY, 0);
	OP(FUZZ_INFO, 1, 4);
	bad |= save(argv[1], "seed-two-participants");
	return bad;
}
