/* SPDX-License-Identifier: MIT */
/*
 * selftests/tap.h: the one TAP emitter of the project's user-space C and
 * C++ tests (selftests/core, libkvrt/tests, cuda/tests, the tools' tests/).
 * Header-only.
 *
 *   TEST(name) { CHECK(x); CHECK_EQ(a, b); CHECKF(x, "fmt", ...); ... }
 *   int main(void) { RUN(name); ...; return tap_done("test_what"); }
 *
 * prints "ok N - name" / "not ok N - name" (with "# ..." diagnostics),
 * "ok N - name # SKIP why" for tap_skip(), then "1..N" and a "# PROG: N
 * passed, N failed, N skipped" line (libkvrt/tests/run.sh adds these up;
 * the leading '#' keeps a suite's own closing "N passed, N failed" line,
 * which selftests/vm/summarize.sh counts, the only bare one).
 *
 *   CHECK / CHECK_EQ   fail the running test, naming the expression
 *   CHECKF, tap_failf  fail it with a printf-style message ("# FAIL ...";
 *                      at most 40 such lines per test)
 *   REQUIRE            fail it and return from the test
 *   tap_skip(why)      report the running test skipped (unless it failed)
 *   tap_result(ok, fmt, ...)   one result of its own: a check reported as
 *                      a test, or a test that could not run
 *   tap_result_skip    a test that was not run, as skipped
 *   tap_only           when set, tests whose name lacks it report SKIP
 *
 * The state is one set of weak globals, so a program of several files
 * that each include this header keeps one count.
 *
 * Where tests live: a user-space test is one program, test_<what>.c, in
 * the tests/ folder of the part it tests (libkvrt/tests/, cuda/tests/,
 * tools/<tool>/tests/; kvcore's are in selftests/core/), using this header;
 * one that outgrows a file keeps test_<what>.c (overview, main) and puts
 * its topics in tests/<what>/ (libkvrt's test_gpu: tests/gpu/).
 * The module's selftests in selftests/kvpool/ follow the kernel instead:
 * <what>_test.c on kselftest_harness.h, and the VM runs every *_test.
 * (Documentation/libkvrt.rst, "Testing", says the same.)
 */
#ifndef SELFTESTS_TAP_H
#define SELFTESTS_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAP_STATE __attribute__((weak))
TAP_STATE int tap_n, tap_pass, tap_fail, tap_skipped;
TAP_STATE bool tap_ok;			/* the running test has not failed yet */
TAP_STATE const char *tap_skip_why;
TAP_STATE const char *tap_only;		/* run only tests whose name holds this */
TAP_STATE int tap_fail_lines;		/* tap_failf() lines of this test so far */

struct tap_test {
	const char *name;
	void (*fn)(void);
};

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

/* Fail the running test with a message; a flood is cut after 40 lines. */
__attribute__((format(printf, 1, 2), unused))
static void tap_failf(const char *fmt, ...)
{
	va_list ap;

	tap_ok = false;
	if (++tap_fail_lines > 40) {
		if (tap_fail_lines == 41)
			puts("# FAIL ... (more failures in this test not shown)");
		return;
	}
	fputs("# FAIL ", stdout);
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

/* CHECKF(cond, fmt, ...): the message says what was seen. */
#define CHECKF(cond, ...)                                                                 \
	do {                                                                              \
		if (!(cond))                                                              \
			tap_failf(__VA_ARGS__);                                            \
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

/* Results of tests that were not run: a whole group skipped or refused. */
/* "ok N - <name> # SKIP <why>" */
__attribute__((format(printf, 2, 3), unused))
static void tap_result_skip(const char *name, const char *fmt, ...)
{
	va_list ap;

	tap_skipped++;
	printf("ok %d - %s # SKIP ", ++tap_n, name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/*
 * "ok N - <message>" or "not ok N - <message>": a result of its own, for a
 * result outside any TEST or a program that reports each check as a test.
 */
__attribute__((format(printf, 2, 3), unused))
static bool tap_result(bool ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		tap_pass++;
	else
		tap_fail++;
	printf("%sok %d - ", ok ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
	return ok;
}

__attribute__((unused))
static void tap_run(const char *name, void (*fn)(void))
{
	if (tap_only && !strstr(name, tap_only)) {
		tap_result_skip(name, "not selected");
		return;
	}
	tap_ok = true;
	tap_skip_why = NULL;
	tap_fail_lines = 0;
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

#endif /* SELFTESTS_TAP_H */
