// SPDX-License-Identifier: MIT
/*
 * hash.c: chained prefix-block hashes with SHA-256 from OpenSSL libcrypto.
 *
 * The message of one block (kvrt.h has the normative description):
 *
 *   parent[32] | le32 n | le32 token[0..n) | le64 extra_len | extra
 *
 * Lengths are in the message so that no two different (tokens, extra)
 * pairs share a message.  The digest is fetched once per call
 * (EVP_MD_fetch) and one EVP_MD_CTX is reused across the blocks of a
 * prompt, so OpenSSL 3's per-init algorithm lookup is not paid per block.
 * A block's message is assembled in a stack buffer when it fits, so
 * each block costs one EVP_DigestUpdate.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "internal.h"

#define MSG_BUF 1024	/* bytes assembled on the stack; longer messages stream */

struct hasher {
	EVP_MD *md;
	EVP_MD_CTX *ctx;
};

static int hasher_init(struct hasher *h)
{
	h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
	h->ctx = EVP_MD_CTX_new();
	if (!h->md || !h->ctx) {
		EVP_MD_free(h->md);
		EVP_MD_CTX_free(h->ctx);
		return -ENOMEM;
	}
	return 0;
}

static void hasher_fini(struct hasher *h)
{
	EVP_MD_CTX_free(h->ctx);
	EVP_MD_free(h->md);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put_le64(uint8_t *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Token ids as little-endian bytes: a copy on little-endian hosts. */
static void put_tokens(uint8_t *p, const uint32_t *tokens, uint32_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (n)
		memcpy(p, tokens, (size_t)n * 4);
#else
	uint32_t i;

	for (i = 0; i < n; i++)
		put_le32(p + 4 * i, tokens[i]);
#endif
}

static const uint8_t zero_root[KVRT_HASH_BYTES];

static int hash_one(struct hasher *h, const uint8_t *parent, const uint32_t *tokens,
		    uint32_t n, const void *extra, size_t extra_len, uint8_t *out)
{
	uint8_t buf[MSG_BUF], *p = buf;
	unsigned int len = 0;
	/* Both terms are bounded first, so the sum cannot wrap. */
	bool fits = n <= MSG_BUF / 4 && extra_len <= MSG_BUF &&
		    KVRT_HASH_BYTES + 4 + (size_t)n * 4 + 8 + extra_len <= sizeof(buf);
	size_t need = fits ? KVRT_HASH_BYTES + 4 + (size_t)n * 4 + 8 + extra_len : 0;

	if (!EVP_DigestInit_ex2(h->ctx, h->md, NULL))
		return -ENOMEM;
	if (fits) {
		memcpy(p, parent, KVRT_HASH_BYTES);
		put_le32(p + KVRT_HASH_BYTES, n);
		p += KVRT_HASH_BYTES + 4;
		put_tokens(p, tokens, n);
		p += (size_t)n * 4;
		put_le64(p, extra_len);
		p += 8;
		if (extra_len)
			memcpy(p, extra, extra_len);
		if (!EVP_DigestUpdate(h->ctx, buf, need))
			return -ENOMEM;
	} else {
		/* Stream: the header, the tokens in pieces, the extra keys. */
		uint32_t i = 0;

		memcpy(buf, parent, KVRT_HASH_BYTES);
		put_le32(buf + KVRT_HASH_BYTES, n);
		if (!EVP_DigestUpdate(h->ctx, buf, KVRT_HASH_BYTES + 4))
			return -ENOMEM;
		while (i < n) {
			uint32_t m = n - i < MSG_BUF / 4 ? n - i : MSG_BUF / 4;

			put_tokens(buf, tokens + i, m);
			if (!EVP_DigestUpdate(h->ctx, buf, (size_t)m * 4))
				return -ENOMEM;
			i += m;
		}
		put_le64(buf, extra_len);
		if (!EVP_DigestUpdate(h->ctx, buf, 8) ||
		    (extra_len && !EVP_DigestUpdate(h->ctx, extra, extra_len)))
			return -ENOMEM;
	}
	if (!EVP_DigestFinal_ex(h->ctx, out, &len) || len != KVRT_HASH_BYTES)
		return -ENOMEM;
	return 0;
}

int kvrt_hash_block(const uint8_t *parent, const uint32_t *tokens, uint32_t num_tokens,
		    const void *extra, size_t extra_len, uint8_t out[KVRT_HASH_BYTES])
{
	struct hasher h;
	int ret;

	if (!out || (num_tokens && !tokens) || (extra_len && !extra))
		return -EINVAL;
	ret = hasher_init(&h);
	if (ret)
		return ret;
	ret = hash_one(&h, parent ? parent : zero_root, tokens, num_tokens, extra, extra_len, out);
	hasher_fini(&h);
	return ret;
}

int kvrt_hash_prompt(const uint8_t *root, const uint32_t *tokens, size_t num_tokens,
		     uint32_t block_tokens, const void *extra, const uint64_t *extra_indptr,
		     uint8_t (*hashes)[KVRT_HASH_BYTES], size_t max_hashes)
{
	const uint8_t *parent = root ? root : zero_root;
	const uint8_t *ex = extra;
	struct hasher h;
	size_t n, j;
	int ret;

	if (!block_tokens)
		return -EINVAL;
	n = num_tokens / block_tokens;
	if (n > max_hashes)
		n = max_hashes;
	if (!n)
		return 0;
	if (n > INT32_MAX)
		return -EOVERFLOW;
	if (!tokens || !hashes || (extra_indptr && !extra))
		return -EINVAL;
	if (extra_indptr)
		for (j = 0; j < n; j++)
			if (extra_indptr[j] > extra_indptr[j + 1])
				return -EINVAL;
	ret = hasher_init(&h);
	if (ret)
		return ret;
	for (j = 0; j < n && !ret; j++) {
		const void *e = NULL;
		size_t elen = 0;

		if (extra_indptr) {
			e = ex + extra_indptr[j];
			elen = (size_t)(extra_indptr[j + 1] - extra_indptr[j]);
		}
		ret = hash_one(&h, parent, tokens + j * block_tokens, block_tokens, e, elen,
			       hashes[j]);
		parent = hashes[j];
	}
	hasher_fini(&h);
	return ret ? ret : (int)n;
}

static int cpu_sha_ni(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned int a, b, c, d;

	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	return (b >> 29) & 1;
#else
	return 0;
#endif
}

int kvrt_hash_info(struct kvrt_hash_info *info)
{
	const char *cap;

	if (!info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->cpu_sha_ni = cpu_sha_ni();
	cap = getenv("OPENSSL_ia32cap");
	info->ia32cap_override = cap && *cap;
	strncpy(info->libcrypto, OpenSSL_version(OPENSSL_VERSION), sizeof(info->libcrypto) - 1);
	return 0;
}
