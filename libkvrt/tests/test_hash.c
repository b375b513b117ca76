// SPDX-License-Identifier: MIT
/*
 * Prefix hashing against independent computations: the test encodes each
 * block's message itself and hashes it with libcrypto's one-shot SHA256()
 * (a different code path from the library's EVP context), checks frozen
 * known answers (computed outside this project with Python's hashlib), and
 * once runs the system's sha256sum over bytes the test wrote to a file.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "kvrt.h"
#include "../../selftests/tap.h"

static uint64_t rng = 0x243f6a8885a308d3ULL;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void hex(const uint8_t *h, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
}

/* The message of kvrt.h, byte by byte. */
static size_t encode(uint8_t *msg, const uint8_t *parent, const uint32_t *tok, uint32_t n,
		     const uint8_t *extra, uint64_t elen)
{
	size_t p = 0;

	memcpy(msg, parent, 32);
	p = 32;
	for (int i = 0; i < 4; i++)
		msg[p++] = (uint8_t)(n >> (8 * i));
	for (uint32_t t = 0; t < n; t++)
		for (int i = 0; i < 4; i++)
			msg[p++] = (uint8_t)(tok[t] >> (8 * i));
	for (int i = 0; i < 8; i++)
		msg[p++] = (uint8_t)(elen >> (8 * i));
	if (elen)
		memcpy(msg + p, extra, elen);
	return p + elen;
}

static void ref_block(const uint8_t *parent, const uint32_t *tok, uint32_t n,
		      const uint8_t *extra, uint64_t elen, uint8_t *out)
{
	static const uint8_t zero[32];
	uint8_t *msg = malloc(32 + 4 + 4 * (size_t)n + 8 + elen);

	SHA256(msg, encode(msg, parent ? parent : zero, tok, n, extra, elen), out);
	free(msg);
}

/* kvrt_hash_block of one root block succeeds and equals the reference. */
static bool block_matches_ref(const uint32_t *tok, uint32_t n, const uint8_t *extra, uint64_t elen)
{
	uint8_t h[32], want[32];

	if (kvrt_hash_block(NULL, tok, n, extra, elen, h))
		return false;
	ref_block(NULL, tok, n, extra, elen, want);
	return !memcmp(h, want, 32);
}

TEST(known_answers)
{
	uint32_t tok[32];
	uint8_t h[2][32], e[32];
	char s[65];

	for (int i = 0; i < 32; i++)
		tok[i] = (uint32_t)i;
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 32, 16, NULL, NULL, h, 2), 2);
	hex(h[0], s);
	CHECK(!strcmp(s, "ee6a3592f64019cf25ef7e85e7e2fd59a635d29296c02101a9bdebf8f250d010"));
	CHECK_EQ(kvrt_hash_block(h[0], tok + 16, 16, "lora:7", 6, e), 0);
	hex(e, s);
	CHECK(!strcmp(s, "6e168b50cabbc84b3d5bd05af2b39ec8bd4875480ee92217f50c6be234ba00f8"));
	CHECK_EQ(kvrt_hash_block(NULL, NULL, 0, NULL, 0, e), 0);
	hex(e, s);
	CHECK(!strcmp(s, "85759b3811ff7dc47b03792ac85317be51431a3f9e01dcafce317ed736a391b0"));
}

TEST(sha256sum_of_the_message)
{
	uint32_t tok[16];
	uint8_t parent[32], h[32], msg[256];
	char path[] = "/tmp/kvrt-hash-XXXXXX", cmd[128], line[128], s[65];
	FILE *f, *p;
	size_t n;
	int fd;

	for (int i = 0; i < 16; i++)
		tok[i] = rnd32();
	for (int i = 0; i < 32; i++)
		parent[i] = (uint8_t)rnd32();
	CHECK_EQ(kvrt_hash_block(parent, tok, 16, "x", 1, h), 0);
	n = encode(msg, parent, tok, 16, (const uint8_t *)"x", 1);
	fd = mkstemp(path);
	REQUIRE(fd >= 0);
	f = fdopen(fd, "w");
	REQUIRE(f && fwrite(msg, 1, n, f) == n);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "sha256sum %s 2>/dev/null", path);
	p = popen(cmd, "r");
	if (!p || !fgets(line, sizeof(line), p)) {
		tap_skip("no sha256sum");
	} else {
		hex(h, s);
		CHECK(!strncmp(line, s, 64));
	}
	if (p)
		pclose(p);
	unlink(path);
}

/* Random prompts, block sizes and per-block extras against SHA256(). */
TEST(prompts_match_one_shot_sha256)
{
	static uint32_t tok[5000];
	static uint8_t hashes[400][32], extra[400 * 40];
	static uint64_t indptr[401];
	static const uint32_t bts[] = { 1, 2, 3, 16, 17, 64, 255, 256, 257, 300 };
	int bad = 0;

	for (unsigned int c = 0; c < 40; c++) {
		uint32_t bt = bts[c % 10];
		size_t ntok = rnd32() % 5000, nb = ntok / bt, j;
		uint8_t root[32], want[32];
		const uint8_t *parent;
		bool with_root = c & 1, with_extra = c & 2;
		int got;

		if (nb > 400)
			nb = 400, ntok = nb * bt + rnd32() % bt;
		for (size_t i = 0; i < ntok; i++)
			tok[i] = rnd32();
		for (int i = 0; i < 32; i++)
			root[i] = (uint8_t)rnd32();
		indptr[0] = 0;
		for (j = 0; j < nb; j++) {
			uint32_t len = j % 3 ? rnd32() % 40 : 0;

			for (uint32_t i = 0; i < len; i++)
				extra[indptr[j] + i] = (uint8_t)rnd32();
			indptr[j + 1] = indptr[j] + len;
		}
		got = kvrt_hash_prompt(with_root ? root : NULL, tok, ntok, bt,
				       with_extra ? extra : NULL, with_extra ? indptr : NULL,
				       hashes, 400);
		CHECK_EQ(got, (int)nb);
		parent = with_root ? root : NULL;
		for (j = 0; j < nb; j++) {
			ref_block(parent, tok + j * bt, bt, with_extra ? extra + indptr[j] : NULL,
				  with_extra ? indptr[j + 1] - indptr[j] : 0, want);
			if (memcmp(want, hashes[j], 32) && bad++ < 3)
				tap_diag("case %u bt %u block %zu differs", c, bt, j);
			parent = hashes[j];
		}
	}
	CHECK_EQ(bad, 0);
}

/* Messages longer than the library's stack buffer are streamed. */
TEST(long_blocks_and_extras_stream)
{
	static uint32_t tok[4096];
	static uint8_t extra[5000];
	for (int i = 0; i < 4096; i++)
		tok[i] = rnd32();
	for (int i = 0; i < 5000; i++)
		extra[i] = (uint8_t)rnd32();
	CHECK(block_matches_ref(tok, 4096, extra, 5000));
	CHECK(block_matches_ref(tok, 16, extra, 2000));
	/* Exactly at the edge of the buffer (1024 bytes: 44 + 4n + e). */
	CHECK(block_matches_ref(tok, 245, NULL, 0));
	CHECK(block_matches_ref(tok, 244, extra, 4));
}

TEST(chaining_partial_blocks_and_continuation)
{
	uint32_t tok[100];
	uint8_t all[6][32], part[6][32], one[32];

	for (int i = 0; i < 100; i++)
		tok[i] = rnd32();
	/* 100 tokens, blocks of 16: 6 full blocks, the last 4 tokens unhashed. */
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 100, 16, NULL, NULL, all, 6), 6);
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 100, 16, NULL, NULL, all, 99), 6);
	/* max_hashes caps the work. */
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 100, 16, NULL, NULL, part, 2), 2);
	CHECK(!memcmp(part, all, 64));
	/* Continuing from the last hash gives the same chain. */
	CHECK_EQ(kvrt_hash_prompt(part[1], tok + 32, 68, 16, NULL, NULL, part + 2, 4), 4);
	CHECK(!memcmp(part, all, sizeof(all)));
	/* Single blocks chained by hand, too. */
	CHECK_EQ(kvrt_hash_block(all[2], tok + 48, 16, NULL, 0, one), 0);
	CHECK(!memcmp(one, all[3], 32));
	/* A change in block 3 changes hashes 3.. and nothing before. */
	tok[50] ^= 1;
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 100, 16, NULL, NULL, part, 6), 6);
	CHECK(!memcmp(part, all, 3 * 32));
	for (int j = 3; j < 6; j++)
		CHECK(memcmp(part[j], all[j], 32));
	/* Fewer tokens than a block: nothing, even with NULL arrays. */
	CHECK_EQ(kvrt_hash_prompt(NULL, NULL, 15, 16, NULL, NULL, NULL, 6), 0);
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 100, 16, NULL, NULL, NULL, 0), 0);
}

TEST(extra_keys_and_lengths_separate_messages)
{
	uint32_t tok[17] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17 };
	uint8_t a[32], b[32];
	uint32_t le17[1] = { 17 };

	/* Same tokens, different extra: different hash. */
	CHECK_EQ(kvrt_hash_block(NULL, tok, 16, "a", 1, a), 0);
	CHECK_EQ(kvrt_hash_block(NULL, tok, 16, "b", 1, b), 0);
	CHECK(memcmp(a, b, 32));
	/* 17 tokens versus 16 tokens with token 17's bytes as extra keys. */
	CHECK_EQ(kvrt_hash_block(NULL, tok, 17, NULL, 0, a), 0);
	CHECK_EQ(kvrt_hash_block(NULL, tok, 16, le17, 4, b), 0);
	CHECK(memcmp(a, b, 32));
	/* An empty extra range is the same as no extra keys. */
	{
		uint8_t h1[1][32], h2[1][32];
		uint64_t ip[2] = { 3, 3 };

		CHECK_EQ(kvrt_hash_prompt(NULL, tok, 16, 16, "xyz", ip, h1, 1), 1);
		CHECK_EQ(kvrt_hash_prompt(NULL, tok, 16, 16, NULL, NULL, h2, 1), 1);
		CHECK(!memcmp(h1, h2, 32));
	}
}

TEST(hash_errors)
{
	uint32_t tok[32] = { 0 };
	uint8_t h[2][32], one[32];
	uint64_t ip[3] = { 0, 5, 4 };

	memset(h, 0x11, sizeof(h));
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 32, 0, NULL, NULL, h, 2), -EINVAL);
	CHECK_EQ(kvrt_hash_prompt(NULL, NULL, 32, 16, NULL, NULL, h, 2), -EINVAL);
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 32, 16, NULL, NULL, NULL, 2), -EINVAL);
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 32, 16, NULL, ip, h, 2), -EINVAL);
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 32, 16, "abcdef", ip, h, 2), -EINVAL);
	/* More than INT32_MAX blocks is refused before any memory is read. */
	CHECK_EQ(kvrt_hash_prompt(NULL, tok, 1ULL << 31, 1, NULL, NULL, h, SIZE_MAX),
		 -EOVERFLOW);
	{
		uint8_t untouched[2][32];

		memset(untouched, 0x11, sizeof(untouched));
		CHECK(!memcmp(h, untouched, sizeof(h)));
	}
	CHECK_EQ(kvrt_hash_block(NULL, tok, 16, NULL, 0, NULL), -EINVAL);
	CHECK_EQ(kvrt_hash_block(NULL, NULL, 16, NULL, 0, one), -EINVAL);
	CHECK_EQ(kvrt_hash_block(NULL, tok, 16, NULL, 3, one), -EINVAL);
	CHECK_EQ(kvrt_hash_info(NULL), -EINVAL);
}

TEST(hash_info_matches_cpuinfo)
{
	struct kvrt_hash_info hi;
	char line[4096];
	int flag = -1;
	FILE *f;

	REQUIRE(kvrt_hash_info(&hi) == 0);
	CHECK(!strncmp(hi.libcrypto, "OpenSSL ", 8));
	f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "flags", 5)) {
			flag = strstr(line, " sha_ni") != NULL;
			break;
		}
	if (f)
		fclose(f);
	tap_diag("CPUID SHA-NI: %s; /proc/cpuinfo sha_ni: %d; %s; OPENSSL_ia32cap %s",
		 hi.cpu_sha_ni ? "yes" : "no", flag, hi.libcrypto,
		 hi.ia32cap_override ? "set" : "unset");
	if (flag >= 0)
		CHECK_EQ(hi.cpu_sha_ni, flag);
	CHECK_EQ(hi.ia32cap_override, getenv("OPENSSL_ia32cap") && *getenv("OPENSSL_ia32cap"));
}

int main(void)
{
	RUN(known_answers);
	RUN(sha256sum_of_the_message);
	RUN(prompts_match_one_shot_sha256);
	RUN(long_blocks_and_extras_stream);
	RUN(chaining_partial_blocks_and_continuation);
	RUN(extra_keys_and_lengths_separate_messages);
	RUN(hash_errors);
	RUN(hash_info_matches_cpuinfo);
	return tap_done("test_hash");
}
