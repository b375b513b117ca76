// SPDX-License-Identifier: GPL-2.0
/*
 * Files under the sysfs and debugfs roots, and what to tell the admin when
 * one cannot be read or written: every failure names the file and, where
 * root is what is missing, says so.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvctl.h"

static bool kv_default_sysfs(void)
{
	return !strcmp(kv_env.sysfs, "/sys/class/misc/kvpool");
}

/*
 * 0 when the module's sysfs directory is there; else an exit status.  An
 * empty directory (a --sysfs-root that points nowhere useful) counts as no
 * module too: pool_bytes is the file every kvpool has.
 */
int kv_module_check(void)
{
	char path[4096];
	struct stat st;
	const char *missing = kv_env.sysfs;
	int err;

	if (stat(kv_env.sysfs, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			err = ENOTDIR;
		} else {
			if (kv_sysfs_path(path, sizeof(path), "pool_bytes") || !stat(path, &st))
				return 0;
			err = errno;
			missing = path;
		}
	} else {
		err = errno;
	}
	if (err == EACCES || err == EPERM)
		return kv_file_error("looking up", missing, err, NULL);
	kv_err("kvpool module not loaded: %s %s; load it with 'modprobe kvpool' "
	       "(or insmod kmod/kvpool.ko)%s", missing,
	       err == ENOTDIR ? "is not a directory" : "missing",
	       kv_default_sysfs() ? "" : " (that path came from --sysfs-root or KVCTL_SYSFS)");
	return KV_EXIT_NOMODULE;
}

/* The whole file, NUL-terminated, in *out (free it); 0 or -errno. */
int kv_read_path(const char *path, char **out)
{
	size_t cap = 4096, len = 0;
	char *buf, *nb;
	ssize_t n;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		if (cap - len < 2) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				err = -ENOMEM;
				goto out_free;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			goto out_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*out = buf;
	return 0;

out_free:
	free(buf);
	close(fd);
	return err;
}

int kv_sysfs_path(char *buf, size_t len, const char *rel)
{
	int n = snprintf(buf, len, "%s/%s", kv_env.sysfs, rel);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* One sysfs value without its newline; 0 or -errno. */
int kv_sysfs_str(const char *rel, char *buf, size_t len)
{
	char path[4096], *s;
	size_t n;
	int r = kv_sysfs_path(path, sizeof(path), rel);

	if (r)
		return r;
	r = kv_read_path(path, &s);
	if (r)
		return r;
	n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
	if (n >= len) {
		free(s);
		return -EOVERFLOW;
	}
	memcpy(buf, s, n + 1);
	free(s);
	return 0;
}

/* A decimal sysfs value; -EBADMSG when the file holds something else. */
int kv_sysfs_u64(const char *rel, uint64_t *v)
{
	char buf[64], *end;
	int r = kv_sysfs_str(rel, buf, sizeof(buf));

	if (r)
		return r;
	errno = 0;
	*v = strtoull(buf, &end, 10);
	if (!buf[0] || *end || errno || buf[0] == '-')
		return -EBADMSG;
	return 0;
}

/* One write(2) of "val\n", as echo does; 0 or -errno (the kernel's answer). */
int kv_sysfs_write(const char *rel, const char *val)
{
	char path[4096], line[256];
	ssize_t n;
	size_t len;
	int fd, r = kv_sysfs_path(path, sizeof(path), rel);

	if (r)
		return r;
	len = (size_t)snprintf(line, sizeof(line), "%s\n", val);
	if (len >= sizeof(line))
		return -E2BIG;
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, line, len);
	r = n < 0 ? -errno : (size_t)n != len ? -EIO : 0;
	if (close(fd) && !r)
		r = -errno;
	return r;
}

/*
 * Say why @path could not be read or written and return the exit status.
 * @why_root: why root is needed, for permission errors (NULL: generic).
 */
int kv_file_error(const char *verb, const char *path, int err, const char *why_root)
{
	if (err < 0)
		err = -err;
	if (err == EACCES || err == EPERM) {
		kv_err("permission denied %s %s: %s; run kvctl as root (e.g. with sudo)",
		       verb, path, why_root ? why_root : "root is needed");
		return KV_EXIT_PERM;
	}
	if (err == EISDIR) {
		kv_err("%s %s failed: it is a directory, not a kvpool attribute file", verb, path);
		return KV_EXIT_FAIL;
	}
	if (err == EBADMSG) {
		kv_err("%s %s: unexpected contents (not a number); is this the kvpool module "
		       "of this kvctl (API %d)?", verb, path, KVPOOL_API_VERSION);
		return KV_EXIT_FAIL;
	}
	if (err == ENOENT) {
		kv_err("%s %s failed: no such file; is this the kvpool module of this kvctl "
		       "(API %d)?", verb, path, KVPOOL_API_VERSION);
		return KV_EXIT_FAIL;
	}
	kv_err("%s %s failed: %s", verb, path, strerror(err));
	return KV_EXIT_FAIL;
}

/* A debugfs file of the module in *out; 0 or an exit status, said. */
int kv_debugfs_read(const char *name, char **out)
{
	char path[4096];
	struct stat st;
	int r;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", kv_env.debugfs, name) >= sizeof(path))
		return kv_file_error("reading", name, ENAMETOOLONG, NULL);
	r = kv_read_path(path, out);
	if (!r)
		return 0;
	if (r == -EACCES || r == -EPERM)
		return kv_file_error("reading", path, r, "kvpool's debugfs files are root's only");
	if (r == -ENOENT && stat(kv_env.debugfs, &st)) {
		if (errno == EACCES || errno == EPERM)
			return kv_file_error("looking up", kv_env.debugfs, errno,
					     "debugfs is root's only");
		kv_err("%s missing: debugfs is not mounted (mount -t debugfs none "
		       "/sys/kernel/debug) or --debugfs-root/KVCTL_DEBUGFS points elsewhere",
		       kv_env.debugfs);
		return KV_EXIT_FAIL;
	}
	return kv_file_error("reading", path, r, NULL);
}

/* key=N among the words of @s, separated by spaces, tabs or newlines; 0 or -1. */
int kv_u64_field(const char *s, const char *key, uint64_t *v)
{
	size_t k = strlen(key);
	const char *p = s;
	char *end;

	while (p && *p) {
		/* every separator: one left unskipped would be found again forever */
		while (*p == ' ' || *p == '\t' || *p == '\n')
			p++;
		if (!strncmp(p, key, k) && p[k] == '=') {
			errno = 0;
			*v = strtoull(p + k + 1, &end, 0);
			if (end == p + k + 1 || errno ||
			    (*end && *end != ' ' && *end != '\t' && *end != '\n'))
				return -1;
			return 0;
		}
		p = strpbrk(p, " \t\n");
	}
	return -1;
}
