// SPDX-License-Identifier: GPL-2.0
/* carve.c: many arrays from one allocation (see carve.h). */
#include <stdint.h>
#include <stdlib.h>

#include "carve.h"

#define LINE 64

static size_t line_up(size_t bytes)
{
	return (bytes + LINE - 1) & ~(size_t)(LINE - 1);
}

void *carve(const struct carve_part *part, size_t n)
{
	size_t i, off = 0;
	char *base;

	for (i = 0; i < n; i++) {
		if (line_up(part[i].bytes) < part[i].bytes ||
		    off + line_up(part[i].bytes) < off)
			return NULL;		/* would wrap: no such allocation */
		off += line_up(part[i].bytes);
	}
	base = aligned_alloc(LINE, off ? off : LINE);
	if (!base)
		return NULL;
	for (i = 0, off = 0; i < n; i++) {
		*part[i].dst = base + off;
		off += line_up(part[i].bytes);
	}
	return base;
}
