// SPDX-License-Identifier: MIT
/*
 * tier/tier_mac.c: the tenant's tier key and the tags it makes
 * (tier_mac.h says what they bind and why).  OpenSSL 3's HMAC and
 * Poly1305, fetched once per process.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "internal.h"
#include "tier_mac.h"

static const char tag_label[] = "kvrt tier tag v1";
static const char name_label[] = "kvrt tier name v2";

static EVP_MAC *hmac_alg, *poly_alg;
static pthread_once_t algs_once = PTHREAD_ONCE_INIT;

static void algs_fetch(void)
{
	hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
	poly_alg = EVP_MAC_fetch(NULL, "POLY1305", NULL);
}

/* One MAC over the pieces; params NULL for Poly1305, the digest for HMAC. */
static int mac_run(EVP_MAC *alg, const uint8_t *key, size_t key_len, const OSSL_PARAM *params,
		   const struct iovec *piece, unsigned int n, uint8_t *out, size_t out_len)
{
	uint8_t full[EVP_MAX_MD_SIZE];
	EVP_MAC_CTX *ctx;
	size_t got = 0;
	unsigned int i;
	int ok;

	ctx = alg ? EVP_MAC_CTX_new(alg) : NULL;
	if (!ctx)
		return -ENOMEM;
	ok = EVP_MAC_init(ctx, key, key_len, params);
	for (i = 0; ok && i < n; i++)
		ok = EVP_MAC_update(ctx, piece[i].iov_base, piece[i].iov_len);
	ok = ok && EVP_MAC_final(ctx, full, &got, sizeof(full)) && got >= out_len;
	EVP_MAC_CTX_free(ctx);
	if (ok)
		memcpy(out, full, out_len);
	OPENSSL_cleanse(full, sizeof(full));
	return ok ? 0 : -ENOMEM;
}

static int hmac_sha256(const uint8_t *key, size_t key_len, const struct iovec *piece,
		       unsigned int n, uint8_t out[32])
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};

	pthread_once(&algs_once, algs_fetch);
	return mac_run(hmac_alg, key, key_len, params, piece, n, out, 32);
}

int kvrt_tier_key_derive(const char *label, const void *secret, size_t len,
			 uint8_t key[KVRT_TIER_KEY_BYTES])
{
	struct iovec piece = { (void *)secret, len };

	if (!label || (!secret && len))
		return -EINVAL;
	return hmac_sha256((const uint8_t *)label, strlen(label), &piece, 1, key);
}

/* The file's bytes, whole, after the checks of kvrt_tier_key_from_file(). */
static int key_file_read(int fd, uint8_t *buf, size_t *len)
{
	struct stat st;
	size_t got = 0;

	if (fstat(fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_uid != geteuid() || (st.st_mode & 077))
		return -EPERM;
	if (st.st_size < KVRT_TIER_KEY_FILE_MIN || st.st_size > KVRT_TIER_KEY_FILE_MAX)
		return -EINVAL;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	*len = got;
	return 0;
}

int kvrt_tier_key_from_fd(int fd, uint8_t key[KVRT_TIER_KEY_BYTES])
{
	uint8_t buf[KVRT_TIER_KEY_FILE_MAX];
	unsigned int md_len = KVRT_TIER_KEY_BYTES;
	size_t len = 0;
	int ret;

	ret = key_file_read(fd, buf, &len);
	if (!ret && EVP_Digest(buf, len, key, &md_len, EVP_sha256(), NULL) != 1)
		ret = -ENOMEM;
	OPENSSL_cleanse(buf, sizeof(buf));
	return ret;
}

int kvrt_tier_key_from_file(const char *path, uint8_t key[KVRT_TIER_KEY_BYTES])
{
	int fd, ret;

	if (!path)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = kvrt_tier_key_from_fd(fd, key);
	close(fd);
	return ret;
}

int kvrt_tier_random(void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = getrandom(p + got, len - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

int kvrt_tier_key_write(int fd)
{
	uint8_t raw[KVRT_TIER_KEY_BYTES];
	ssize_t n;
	int ret;

	ret = kvrt_tier_random(raw, sizeof(raw));
	if (!ret) {
		/* 32 bytes to a regular file: short only on a full device. */
		n = write(fd, raw, sizeof(raw));
		ret = n == (ssize_t)sizeof(raw) ? 0 : n < 0 ? -errno : -EIO;
	}
	if (!ret && fdatasync(fd))
		ret = -errno;
	OPENSSL_cleanse(raw, sizeof(raw));
	return ret;
}

int kvrt_tier_nonce(uint8_t nonce[KVRT_TIER_NONCE_BYTES])
{
	return kvrt_tier_random(nonce, KVRT_TIER_NONCE_BYTES);
}

int kvrt_tier_mac(const uint8_t key[KVRT_TIER_KEY_BYTES], const struct kvrt_tier_bind *b,
		  const void *bytes, size_t len, uint8_t tag[KVRT_TIER_TAG_BYTES])
{
	struct iovec bind[] = {
		{ (void *)tag_label, sizeof(tag_label) },
		{ (void *)b->identity, 32 },
		{ (void *)b->hash, KVRT_HASH_BYTES },
		{ (void *)b->nonce, KVRT_TIER_NONCE_BYTES },
	};
	struct iovec data = { (void *)bytes, len };
	uint8_t once[32];
	int ret;

	ret = hmac_sha256(key, KVRT_TIER_KEY_BYTES, bind, sizeof(bind) / sizeof(bind[0]), once);
	if (!ret)
		ret = mac_run(poly_alg, once, sizeof(once), NULL, &data, 1, tag,
			      KVRT_TIER_TAG_BYTES);
	OPENSSL_cleanse(once, sizeof(once));
	return ret;
}

bool kvrt_tier_mac_ok(const uint8_t key[KVRT_TIER_KEY_BYTES], const struct kvrt_tier_bind *b,
		      const void *bytes, size_t len, const uint8_t tag[KVRT_TIER_TAG_BYTES])
{
	uint8_t want[KVRT_TIER_TAG_BYTES];

	return !kvrt_tier_mac(key, b, bytes, len, want) &&
	       !CRYPTO_memcmp(want, tag, KVRT_TIER_TAG_BYTES);
}

int kvrt_tier_blind_name(const uint8_t key[KVRT_TIER_KEY_BYTES], const uint8_t identity[32],
			 const uint8_t *hash, uint8_t name[32])
{
	struct iovec piece[] = {
		{ (void *)name_label, sizeof(name_label) },
		{ (void *)identity, 32 },
		{ (void *)hash, KVRT_HASH_BYTES },
	};

	return hmac_sha256(key, KVRT_TIER_KEY_BYTES, piece, sizeof(piece) / sizeof(piece[0]), name);
}
