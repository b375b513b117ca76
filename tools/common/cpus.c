// SPDX-License-Identifier: GPL-2.0
/*
 * cpus.c: see cpus.h.  The affinity mask first, so that a tool run under
 * taskset or a cgroup's cpuset starts no more threads than it may use.
 */
#define _GNU_SOURCE	/* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <unistd.h>

#include "cpus.h"

uint32_t cpus(void)
{
	cpu_set_t set;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return (uint32_t)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (uint32_t)n : 1;
}
