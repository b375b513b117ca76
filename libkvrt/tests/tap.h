/* SPDX-License-Identifier: MIT */
/*
 * tap.h: a header-only TAP runner for the libkvrt tests.
 *
 *   TEST(name) { ... CHECK(x); CHECK_EQ(a, b); ... }
 *   int main(void) { RUN(name); ...; return tap_done(); }
 *
 * prints "ok N - name" / "not ok N - name" (with "# ..." diagnostics),
 * "ok N - name # SKIP why" for tap_skip(), then "1..N" and a "# PROG: N
 * passed, N failed, N skipped" line (tests/run.sh adds these up; the
 * leading '#' keeps the suite's own closing line the only bare one).
 */
#ifndef KVRT_TAP_H
#define KVRT_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_n, tap_pass, tap_fail, tap_skipped;
static bool tap_ok;
static const char *tap_skip_why;

__attribute__((format(printf, 1, 2), unused))
static void tap_diag(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

/* Call inside a test: it reports as skipped unless a check failed. */
__attribute__((unused))
static void tap_skip(const char *why)
{
	tap_skip_why = why;
}

#define CHECK(cond)                                                                       \
	do {                                                                              \
		if (!(cond)) {                                                            \
			tap_diag("%s:%d: check failed: %s", __FILE__, __LINE__, #cond);   \
			tap_ok = false;                                                   \
		}                                                                         \
	} while (0)

#define CHECK_EQ(a, b)                                                                    \
	do {                                                                              \
		long long _a = (long long)(a), _b = (long long)(b);                       \
		if (_a != _b) {                                                           \
			tap_diag("%s:%d: %s is %lld, expected %s = %lld", __FILE__, __LINE__, \
				 #a, _a, #b, _b);                                         \
			tap_ok = false;                                                   \
		}                                                                         \
	} while (0)

/* Stop the running test when a precondition fails (after reporting it). */
#define REQUIRE(cond)                                                                     \
	do {                                                                              \
		if (!(cond)) {                                                            \
			tap_diag("%s:%d: required: %s", __FILE__, __LINE__, #cond);       \
			tap_ok = false;                                                   \
			return;                                                           \
		}                                                                         \
	} while (0)

#define TEST(name) static void name(void)

static void tap_run(const char *name, void (*fn)(void))
{
	tap_ok = true;
	tap_skip_why = NULL;
	fflush(stdout);
	fn();
	tap_n++;
	if (!tap_ok) {
		tap_fail++;
		printf("not ok %d - %s\n", tap_n, name);
	} else if (tap_skip_why) {
		tap_skipped++;
		printf("ok %d - %s # SKIP %s\n", tap_n, name, tap_skip_why);
	} else {
		tap_pass++;
		printf("ok %d - %s\n", tap_n, name);
	}
	fflush(stdout);
}

#define RUN(name) tap_run(#name, name)

__attribute__((unused))
static int tap_done(const char *prog)
{
	printf("1..%d\n# %s: %d passed, %d failed, %d skipped\n", tap_n, prog, tap_pass,
	       tap_fail, tap_skipped);
	return tap_fail ? 1 : 0;
}

#endif /* KVRT_TAP_H */
