// SPDX-License-Identifier: GPL-2.0
/* test_carve.c: carve's parts are aligned, disjoint and hold their bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../selftests/tap.h"
#include "../carve.h"

TEST(parts_on_their_own_lines)
{
	char *a = NULL, *b = NULL, *c = NULL;
	const struct carve_part part[] = {
		{ (void **)&a, 1 }, { (void **)&b, 100 }, { (void **)&c, 0 },
	};
	char *base = carve(part, 3);

	REQUIRE(base != NULL);
	CHECK(((uintptr_t)base & 63) == 0);
	CHECK(a == base);
	CHECK(b == base + 64);
	CHECK(c == base + 192);
	memset(a, 1, 1);
	memset(b, 2, 100);	/* ASan: every part's bytes lie inside the allocation */
	CHECK(a[0] == 1 && b[0] == 2 && b[99] == 2);
	free(base);
}

TEST(sizes_that_wrap_are_refused)
{
	void *a = (void *)1, *b = (void *)1;
	const struct carve_part part[] = { { &a, SIZE_MAX - 10 }, { &b, 100 } };

	CHECK(carve(part, 2) == NULL);
	CHECK(a == (void *)1 && b == (void *)1);	/* no part pointer touched */
}

int main(void)
{
	RUN(parts_on_their_own_lines);
	RUN(sizes_that_wrap_are_refused);
	return tap_done("test_carve");
}
