/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpus.h: how many CPUs this process may run on, the tools' default thread
 * count.  libkvrt has the same count inside (cpus_available), not exported.
 */
#ifndef TOOLS_COMMON_CPUS_H
#define TOOLS_COMMON_CPUS_H

#include <stdint.h>

/* The CPUs of this process's affinity mask; else the online ones; else 1. */
uint32_t cpus(void);

#endif
