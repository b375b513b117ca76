/* SPDX-License-Identifier: GPL-2.0 */
/*
 * carve.h: many arrays from one allocation, each on a cache line, so that
 * a set-up has one failure to check and a teardown one free.
 */
#ifndef TOOLS_COMMON_CARVE_H
#define TOOLS_COMMON_CARVE_H

#include <stddef.h>

struct carve_part {
	void **dst;		/* set to the part's first byte */
	size_t bytes;
};

/*
 * One 64-byte-aligned allocation holding every part; each *dst is set.
 * NULL when it cannot be had (no *dst is touched then).  free() it.
 */
void *carve(const struct carve_part *part, size_t n);

#endif
