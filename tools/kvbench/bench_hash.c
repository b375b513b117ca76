// SPDX-License-Identifier: GPL-2.0
/*
 * bench_hash.c: kvbench hash, prefix hashing of a prompt with libkvrt.
 *
 *   kvbench hash [--json] [--tokens N] [common options]
 *
 * Cases prompt_<N>_blockB: kvrt_hash_prompt() over an N-token prompt (default
 * 32768 random token ids) in B-token blocks (B = 16, 32, 128): every full
 * block's chained SHA-256.  value = ns per token.
 *
 * limit, measured in the same run: SHA-256 of the prompt's token bytes (4 N
 * bytes) in one EVP_DigestUpdate, ns per token: what hashing the tokens
 * costs with no chaining, no per-block finalisation and no framing.
 * ratio = limit / value.  Chained hashing hashes more bytes than that floor
 * (a 32-byte parent and 12 bytes of lengths per block) and pays one
 * finalisation per block, so its ratio stays below 1 by design; the case
 * shows how close the per-block cost gets.
 *
 * The limit_unit says whether the CPU has SHA-NI (CPUID); OpenSSL uses it
 * unless $OPENSSL_ia32cap masks it (e.g. OPENSSL_ia32cap=:~0x20000000
 * forces the plain x86-64 code, for comparison).
 *
 * Timing: CLOCK_MONOTONIC; each repetition runs whole calls for at least
 * --rep-time seconds (default 0.2); value and limit repetitions alternate
 * and the medians of --reps (default 5) are reported.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "kvrt.h"
#include "report.h"

struct hash_opts {
	struct kvb_opts c;
	unsigned long tokens;
};

static const struct kvb_opts hash_defaults = { .bench = "hash", .reps = 5, .rep_time = 0.2 };

struct hash_ctx {
	const uint32_t *tokens;
	size_t ntok;
	uint32_t block;
	uint8_t (*hashes)[KVRT_HASH_BYTES];
	EVP_MD *md;
	EVP_MD_CTX *ctx;
};

/* n calls of each kind; 0 or a negative errno. */
static int run_prompt(void *ctx, unsigned long n)
{
	struct hash_ctx *c = ctx;
	int got;

	while (n--) {
		got = kvrt_hash_prompt(NULL, c->tokens, c->ntok, c->block, NULL, NULL, c->hashes,
				       c->ntok / c->block);
		if (got < 0)
			return got;
		if ((size_t)got != c->ntok / c->block)
			return -EPROTO;
	}
	return 0;
}

static int run_raw(void *ctx, unsigned long n)
{
	struct hash_ctx *c = ctx;
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int len;

	while (n--)
		if (!EVP_DigestInit_ex2(c->ctx, c->md, NULL) ||
		    !EVP_DigestUpdate(c->ctx, c->tokens, c->ntok * sizeof(*c->tokens)) ||
		    !EVP_DigestFinal_ex(c->ctx, out, &len))
			return -EIO;
	return 0;
}

static const char hash_about[] =
	"Chained SHA-256 prefix hashing of a prompt with libkvrt, ns per token,\n"
	"against SHA-256 of the same token bytes in one call.  ratio = limit / value.\n";

/* argv[0] is "hash". */
int cmd_hash(int argc, char **argv)
{
	static const uint32_t blocks[] = { 16, 32, 128 };
	struct hash_opts o = { .c = hash_defaults, .tokens = 32768 };
	struct kvb_report rep = { .o = &o.c, .ratio = KVB_COST, .name_w = 28, .num_w = 12,
				  .unit_w = 40, .ratio_w = 8 };
	struct kvrt_hash_info hi;
	struct hash_ctx c = { 0 };
	char limit_unit[128];
	uint32_t *tok = NULL;
	uint64_t x = 0x2545f4914f6cdd1dULL;
	unsigned int b;
	int ret;
	const struct topt opts[] = {
		{ .name = "--tokens", .arg = "N", .kind = TOPT_ULONG, .dst = &o.tokens, .min = 128,
		  .max = 1UL << 26, .want = "a number from 128 to 2^26",
		  .help = "prompt length (default 32768; 128 .. 2^26)" },
		{ NULL },
	};
	if (!kvb_parse(&hash_defaults, hash_about, opts, &o.c, argc, argv, &ret))
		return ret;
	tok = malloc(o.tokens * sizeof(*tok));
	c.hashes = malloc((o.tokens / 16) * sizeof(*c.hashes));
	c.md = EVP_MD_fetch(NULL, "SHA256", NULL);
	c.ctx = EVP_MD_CTX_new();
	if (!tok || !c.hashes || !c.md || !c.ctx) {
		fprintf(stderr, "kvbench hash: out of memory\n");
		ret = 1;
		goto out_free;
	}
	/* Random ids below a 256k vocabulary. */
	for (size_t i = 0; i < o.tokens; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		tok[i] = (uint32_t)(x % 262144);
	}
	c.tokens = tok;
	c.ntok = o.tokens;
	kvrt_hash_info(&hi);
	kvb_note(&o.c, "CPU SHA-NI %s; %s%s", hi.cpu_sha_ni ? "yes" : "no", hi.libcrypto,
		 hi.ia32cap_override ? "; OPENSSL_ia32cap is set" : "");
	snprintf(limit_unit, sizeof(limit_unit),
		 "ns/token SHA-256 of the token bytes in one call (SHA-NI %s%s)",
		 hi.cpu_sha_ni ? "yes" : "no", hi.ia32cap_override ? ", OPENSSL_ia32cap set" : "");
	kvb_report_header(&rep, "ns/token");
	for (b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
		struct kvb_case m = {
			.value = { .run = run_prompt, .ctx = &c, .units = (double)c.ntok },
			.limit = { .run = run_raw, .ctx = &c, .units = (double)c.ntok },
		};
		char name[64];

		c.block = blocks[b];
		snprintf(name, sizeof(name), "prompt_%lu_block%u", o.tokens, blocks[b]);
		kvb_progress(&o.c, b + 1, 3, name);
		ret = kvb_measure_report(&rep, name, &m, "ns/token (cost; ratio = limit/value)",
					 limit_unit, NULL, NULL);
		if (ret) {
			fprintf(stderr, "kvbench hash: %s: %s\n", name, strerror(-ret));
			ret = 1;
			goto out_free;
		}
	}

out_free:
	kvb_progress_end();
	EVP_MD_CTX_free(c.ctx);
	EVP_MD_free(c.md);
	free(c.hashes);
	free(tok);
	return ret;
}
