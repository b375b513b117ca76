/* SPDX-License-Identifier: MIT */
/*
 * tier/tier_mac.h: the tenant's key, and what it binds.  Storage below the
 * pool may be writable by others (a shared directory, a Redis node, the
 * path to it), so a block read from a tier counts only if its tag proves
 * that the tenant's key wrote these bytes for this identity and hash.
 *
 * The tag: a one-time Poly1305 key, HMAC-SHA256(key, label, identity, hash,
 * nonce), over the bytes; the nonce is random per write, so no one-time
 * key ever signs two messages.  Poly1305 runs near memory speed; the HMAC
 * costs the same for any block size.
 */
#ifndef KVRT_TIER_MAC_H
#define KVRT_TIER_MAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVRT_TIER_KEY_BYTES 32
#define KVRT_TIER_NONCE_BYTES 16
#define KVRT_TIER_TAG_BYTES 16
/* A key file holds at least this many bytes of secret. */
#define KVRT_TIER_KEY_FILE_MIN 16
#define KVRT_TIER_KEY_FILE_MAX 4096

/* What a tag binds besides the bytes. */
struct kvrt_tier_bind {
	const uint8_t *identity;	/* 32 bytes: kvrt_tier_identity() */
	const uint8_t *hash;		/* KVRT_HASH_BYTES */
	const uint8_t *nonce;		/* KVRT_TIER_NONCE_BYTES */
};

/*
 * The key from a file of the caller's: opened without following a
 * symlink, a regular file owned by the caller's euid with no group or other
 * permission bits, 16 to 4096 bytes; the key is the SHA-256 of its bytes.
 * -ENOENT, -ELOOP (a symlink), -EPERM (another owner, or group/other may
 * read or write it: chmod 600), -EINVAL (not a regular file, or its size),
 * -EIO.
 */
int kvrt_tier_key_from_file(const char *path, uint8_t key[KVRT_TIER_KEY_BYTES]);

/* The same from a file already open (the SSD tier's own key, opened at its directory). */
int kvrt_tier_key_from_fd(int fd, uint8_t key[KVRT_TIER_KEY_BYTES]);

/* The key derived from a secret the tenant holds (say a password): HMAC-SHA256(label, secret). */
int kvrt_tier_key_derive(const char *label, const void *secret, size_t len,
			 uint8_t key[KVRT_TIER_KEY_BYTES]);

/* len random bytes (getrandom); -EIO when the kernel gives none. */
int kvrt_tier_random(void *buf, size_t len);

/* A new key's bytes written to fd (made O_EXCL by the caller), then made durable. */
int kvrt_tier_key_write(int fd);

/* A fresh random nonce: kvrt_tier_random(). */
int kvrt_tier_nonce(uint8_t nonce[KVRT_TIER_NONCE_BYTES]);

/* The tag of bytes[0..len) as bound by *b; -ENOMEM when OpenSSL fails. */
int kvrt_tier_mac(const uint8_t key[KVRT_TIER_KEY_BYTES], const struct kvrt_tier_bind *b,
		  const void *bytes, size_t len, uint8_t tag[KVRT_TIER_TAG_BYTES]);

/* Whether tag is bytes' tag as bound by *b (compared in constant time). */
bool kvrt_tier_mac_ok(const uint8_t key[KVRT_TIER_KEY_BYTES], const struct kvrt_tier_bind *b,
		      const void *bytes, size_t len, const uint8_t tag[KVRT_TIER_TAG_BYTES]);

/*
 * A name for (identity, hash) that leaks nothing without the key
 * (HMAC-SHA256(key, label, identity, hash)): what a Redis key is named by,
 * so that listing keys confirms no guessed prompt or space.  -ENOMEM when
 * OpenSSL fails.
 */
int kvrt_tier_blind_name(const uint8_t key[KVRT_TIER_KEY_BYTES], const uint8_t identity[32],
			 const uint8_t *hash, uint8_t name[32]);

#endif /* KVRT_TIER_MAC_H */
