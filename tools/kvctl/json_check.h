/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A strict RFC 8259 JSON validator and a naive value lookup, for kvctl's
 * tests: tests/jsoncheck (host) and selftests/kvpool/kvctl_test.c (the VM,
 * which has no python).  Header-only and static inline so that each user
 * compiles what it calls, warning-free under -Wall -Wextra -Werror.
 */
#ifndef KVCTL_JSON_CHECK_H
#define KVCTL_JSON_CHECK_H

#include <stdlib.h>
#include <string.h>

static inline const char *kvj_value(const char *p, int depth);

static inline const char *kvj_ws(const char *p)
{
	while (p && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

static inline int kvj_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static inline const char *kvj_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p != '"') {
		if (!*p || (unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p && strchr("\"\\/bfnrt", *p)) {
				p++;
			} else if (*p == 'u' && kvj_hex(p[1]) && kvj_hex(p[2]) && kvj_hex(p[3]) &&
				   kvj_hex(p[4])) {
				p += 5;
			} else {
				return NULL;
			}
		} else {
			p++;
		}
	}
	return p + 1;
}

static inline const char *kvj_digits(const char *p)
{
	if (*p < '0' || *p > '9')
		return NULL;
	while (*p >= '0' && *p <= '9')
		p++;
	return p;
}

static inline const char *kvj_number(const char *p)
{
	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (!(p = kvj_digits(p)))
		return NULL;
	if (*p == '.' && !(p = kvj_digits(p + 1)))
		return NULL;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!(p = kvj_digits(p)))
			return NULL;
	}
	return p;
}

/* Object or array: members separated by commas, no trailing comma. */
static inline const char *kvj_container(const char *p, int depth, char close)
{
	p = kvj_ws(p + 1);
	if (*p == close)
		return p + 1;
	for (;;) {
		if (close == '}') {
			p = kvj_string(kvj_ws(p));
			if (!p)
				return NULL;
			p = kvj_ws(p);
			if (*p++ != ':')
				return NULL;
		}
		p = kvj_value(p, depth + 1);
		if (!p)
			return NULL;
		p = kvj_ws(p);
		if (*p == close)
			return p + 1;
		if (*p++ != ',')
			return NULL;
	}
}

static inline const char *kvj_value(const char *p, int depth)
{
	if (!p || depth > 64)
		return NULL;
	p = kvj_ws(p);
	switch (*p) {
	case '{':
		return kvj_container(p, depth, '}');
	case '[':
		return kvj_container(p, depth, ']');
	case '"':
		return kvj_string(p);
	case 't':
		return strncmp(p, "true", 4) ? NULL : p + 4;
	case 'f':
		return strncmp(p, "false", 5) ? NULL : p + 5;
	case 'n':
		return strncmp(p, "null", 4) ? NULL : p + 4;
	default:
		return kvj_number(p);
	}
}

/* 1 when @s is exactly one JSON value (whitespace around it allowed). */
static inline int kvj_valid(const char *s)
{
	const char *p = kvj_value(s, 0);

	return p && !*kvj_ws(p);
}

/*
 * The text of the first value of "key" in @s (no structure awareness: the
 * first occurrence wins), or NULL.
 */
static inline const char *kvj_find(const char *s, const char *key)
{
	size_t k = strlen(key);
	const char *p = s;

	while ((p = strchr(p, '"'))) {
		if (!strncmp(p + 1, key, k) && p[k + 1] == '"') {
			const char *q = kvj_ws(p + k + 2);

			if (*q == ':')
				return kvj_ws(q + 1);
		}
		p++;
	}
	return NULL;
}

/* The first "key": unsigned integer in @s; 0 or -1. */
static inline int kvj_u64(const char *s, const char *key, unsigned long long *v)
{
	const char *p = kvj_find(s, key);
	char *end;

	if (!p || *p < '0' || *p > '9')
		return -1;
	*v = strtoull(p, &end, 10);
	return end == p ? -1 : 0;
}

#endif /* KVCTL_JSON_CHECK_H */
