// SPDX-License-Identifier: GPL-2.0
/*
 * jsoncheck: validate JSON on stdin for tests/run.sh, with json_check.h,
 * the validator the VM selftest uses too (run.sh also cross-checks it
 * against python3's json module where python3 exists).
 *
 *   jsoncheck [--lines] [--get KEY]...
 *
 * Exit 0 when stdin is one valid JSON value (--lines: every non-empty
 * line is one); --get prints the first value of each KEY, one per line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../json_check.h"

static char *slurp(void)
{
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap), *nb;

	while (buf && (n = fread(buf + len, 1, cap - len - 1, stdin)) > 0) {
		len += n;
		if (cap - len < 2) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	if (buf)
		buf[len] = '\0';
	return buf;
}

int main(int argc, char **argv)
{
	char *text = slurp(), *line, *save = NULL;
	int i, lines = 0, bad = 0, n = 0;

	if (!text) {
		fprintf(stderr, "jsoncheck: out of memory\n");
		return 2;
	}
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--lines"))
			lines = 1;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--get") && i + 1 < argc) {
			const char *v = kvj_find(text, argv[++i]);
			const char *end = v ? kvj_value(v, 0) : NULL;

			if (!end) {
				fprintf(stderr, "jsoncheck: no key \"%s\"\n", argv[i]);
				return 1;
			}
			printf("%.*s\n", (int)(end - v), v);
		}
	}
	if (!lines) {
		if (kvj_valid(text))
			return 0;
		fprintf(stderr, "jsoncheck: invalid JSON\n");
		return 1;
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		n++;
		if (!kvj_valid(line)) {
			fprintf(stderr, "jsoncheck: line %d is not valid JSON\n", n);
			bad = 1;
		}
	}
	if (!n) {
		fprintf(stderr, "jsoncheck: no lines\n");
		return 1;
	}
	return bad;
}
