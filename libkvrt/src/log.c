// SPDX-License-Identifier: MIT
/*
 * log.c: kvrt_log(), the one way every part of libkvrt reports through the
 * caller's log callback (kvrt_open_opts.log); apart from kvrt.c so that the
 * backends and tiers that log do not depend on the top of the library.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

void kvrt_log(const struct kvrt *k, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!k || !k->log || level > k->log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	k->log(k->log_arg, level, msg);
}
