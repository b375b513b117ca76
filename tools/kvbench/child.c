// SPDX-License-Identifier: GPL-2.0
/*
 * child.c: starting a program with a pipe to it, reading what it prints
 * with a deadline, and waiting for it (see child.h).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "report.h"

pid_t kvb_child_start(const char *path, char *const argv[], unsigned int flags, int *fd)
{
	bool feed = flags & KVB_CHILD_FEED;
	int fds[2], err;
	pid_t pid;

	if (pipe(fds))
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		close(fds[0]);
		close(fds[1]);
		return err;
	}
	if (!pid) {
		dup2(fds[feed ? 0 : 1], feed ? STDIN_FILENO : STDOUT_FILENO);
		if (feed)
			dup2(STDERR_FILENO, STDOUT_FILENO);
		else if (flags & KVB_CHILD_STDERR)
			dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		if (flags & KVB_CHILD_SEARCH)
			execvp(path, argv);
		else
			execv(path, argv);
		_exit(127);
	}
	close(fds[feed ? 0 : 1]);
	*fd = fds[feed ? 1 : 0];
	return pid;
}

size_t kvb_child_read(int fd, pid_t pid, char *buf, size_t size, double timeout_s,
		      bool *timed_out)
{
	double t0 = kvb_now_s();
	size_t got = 0;

	*timed_out = false;
	while (got + 1 < size) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int ready;

		if (timeout_s > 0 && kvb_now_s() - t0 > timeout_s) {
			kill(pid, SIGKILL);
			*timed_out = true;
			break;
		}
		ready = poll(&pfd, 1, 1000);
		if (ready < 0 && errno != EINTR)
			break;
		if (ready <= 0)
			continue;
		n = read(fd, buf + got, size - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (size)
		buf[got] = 0;
	close(fd);
	return got;
}

int kvb_child_wait(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}
