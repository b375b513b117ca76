// SPDX-License-Identifier: GPL-2.0
/*
 * Byte sizes and other values typed by admins.  Sizes use powers of 1024,
 * like the kernel's memparse() behind the sysfs files; kvctl converts them
 * itself and writes plain byte counts, so what it accepts does not depend
 * on the module's parser and overflow is caught here rather than wrapped.
 */
#include <ctype.h>
#include <strings.h>
#include <string.h>

#include "kvctl.h"

/* Digits into *out; KV_SIZE_RANGE past 2^64 - 1.  *end: first non-digit. */
static int kv_digits(const char *s, uint64_t *out, const char **end)
{
	uint64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return KV_SIZE_BAD;
	for (; isdigit((unsigned char)*s); s++) {
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return KV_SIZE_RANGE;
	}
	*out = v;
	*end = s;
	return KV_SIZE_OK;
}

static int kv_scale(uint64_t v, unsigned int shift, uint64_t *out)
{
	if (shift && v > (UINT64_MAX >> shift))
		return KV_SIZE_RANGE;
	*out = v << shift;
	return KV_SIZE_OK;
}

/*
 * Digits, then at most one suffix from units (any case), each 1024 times
 * the one before; sizes may spell it with "iB" after.
 */
static int parse_scaled(const char *s, const char *units, bool ib_allowed, uint64_t *out)
{
	const char *end, *u;
	uint64_t v;
	int r = kv_digits(s, &v, &end);

	if (r)
		return r;
	if (!*end)
		return kv_scale(v, 0, out);
	u = strchr(units, toupper((unsigned char)*end));
	if (!u || !*u)
		return KV_SIZE_BAD;
	if (end[1] && (!ib_allowed || (strcmp(end + 1, "iB") && strcmp(end + 1, "ib"))))
		return KV_SIZE_BAD;
	return kv_scale(v, 10 * (unsigned int)(u - units + 1), out);
}

/* "4096", "512M", "2G", "1T", "64KiB": bytes.  "2GB" is refused: ambiguous. */
int kv_parse_size(const char *s, uint64_t *out)
{
	return parse_scaled(s, "KMGT", true, out);
}

/* Token counts: "8192", "128k", "1M" (k = 1024, as context lengths go). */
int kv_parse_count(const char *s, uint64_t *out)
{
	return parse_scaled(s, "KM", false, out);
}

/* The spellings kstrtobool() takes, whole words only; 0 or -1. */
int kv_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "y", "yes", "on", "true", "enable", "enabled" };
	static const char *const no[] = { "0", "n", "no", "off", "false", "disable", "disabled" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

/* "512 B", "1.5 GiB": one decimal, binary units. */
const char *kv_bytes(char *buf, size_t len, uint64_t v)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double d = (double)v;
	int i = -1;

	if (v < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)v);
		return buf;
	}
	while (d >= 1024 && i < 5) {
		d /= 1024;
		i++;
	}
	snprintf(buf, len, "%.1f %s", d, unit[i]);
	return buf;
}

/* What the module takes as a space name: [A-Za-z0-9._-], 1..63 bytes. */
bool kv_valid_name(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n < KVPOOL_NAME_MAX &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}
