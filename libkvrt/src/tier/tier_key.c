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

#include "internal.h"
#include "tier_mac.h"

int kvrt_tier_key_create(const char *path)
{
	int fd, ret;

	if (!path)
		return -EINVAL;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* The mode is the caller's umask's too: make it exactly 0600. */
	ret = fchmod(fd, 0600) ? -errno : kvrt_tier_key_write(fd);
	close(fd);
	if (ret)
		unlink(path);
	return ret;
}
