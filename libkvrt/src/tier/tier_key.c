// SPDX-License-Identifier: MIT
/*
 * tier/tier_key.c: kvrt_tier_key_create(), a tenant's key file made the
 * way kvrt_tier_key_from_file() will accept it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "internal.h"
#include "tier_mac.h"

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int kvrt_tier_key_create(const char *path)
{
	uint8_t key[KVRT_TIER_KEY_BYTES];
	int fd, ret;

	if (!path)
		return -EINVAL;
	ret = kvrt_tier_random(key, sizeof(key));
	if (ret)
		return ret;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		goto out_cleanse;
	}
	/* The mode is the caller's umask's too: make it exactly 0600. */
	ret = fchmod(fd, 0600) ? -errno : write_all(fd, key, sizeof(key));
	if (!ret && fsync(fd))
		ret = -errno;
	close(fd);
	if (ret)
		unlink(path);
out_cleanse:
	OPENSSL_cleanse(key, sizeof(key));
	return ret;
}
