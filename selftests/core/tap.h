/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * A small TAP runner: "ok N - name" / "not ok N - name", diagnostics as
 * "# ..." lines, and a final "N passed, N failed" line.
 */
#ifndef KVC_TAP_H
#define KVC_TAP_H

#include <stdbool.h>
#include <stdio.h>

struct tap_test {
	const char *name;
	void (*fn)(void);
};

extern bool tap_ok;	/* the running test has not failed yet */
void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                                    \
	do {                                                                           \
		if (!(cond)) {                                                         \
			tap_diag("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
			tap_ok = false;                                                \
		}                                                                      \
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

/* Tests in other files. */
void t_random_differential(void);
void t_random_fault_storm(void);
void t_random_prefix(void);
void t_random_prefix_faults(void);
extern const struct tap_test prefix_tests[];
extern const unsigned int nr_prefix_tests;
extern const struct tap_test rules_tests[];
extern const unsigned int nr_rules_tests;

#endif /* KVC_TAP_H */
