/* SPDX-License-Identifier: GPL-2.0 */
/*
 * child.h: the programs kvbench runs beside a measurement (kvrt-demo,
 * gnuplot, the GPU peer in python3), each with one end of a pipe, started
 * without a shell.
 */
#ifndef KVBENCH_CHILD_H
#define KVBENCH_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum {
	KVB_CHILD_FEED = 1 << 0,	/* the pipe is its stdin; its stdout goes to our stderr */
	KVB_CHILD_STDERR = 1 << 1,	/* its stderr into the pipe too */
	KVB_CHILD_SEARCH = 1 << 2,	/* path is a name looked up on $PATH */
};

/* Start path with argv; *fd is our end of the pipe.  The pid, or -errno. */
pid_t kvb_child_start(const char *path, char *const argv[], unsigned int flags, int *fd);

/*
 * Read fd into buf until end of file, buf is full, or timeout_s passes
 * (0: no limit), then close it; buf is NUL-terminated.  A child that runs
 * past the limit is killed and *timed_out set.  Returns the bytes read.
 */
size_t kvb_child_read(int fd, pid_t pid, char *buf, size_t size, double timeout_s,
		      bool *timed_out);

/* waitpid through EINTR: 0 with *status, or -errno. */
int kvb_child_wait(pid_t pid, int *status);

#endif
