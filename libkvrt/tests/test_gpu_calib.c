// SPDX-License-Identifier: MIT
/*
 * AUTO's calibration without a GPU (src/gpu/gpu_calib.h): the threshold
 * picked from given rates, and the host buffer it copies from being of
 * the pools' kind (2 MiB aligned, advised MADV_HUGEPAGE, touched).  What
 * the rates are on a device is test_gpu's and kvbench gpu-copy's.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_calib.h"
#include "../../selftests/tap.h"

/* Sizes 4 KiB .. 1 MiB with the given (kernel, large) GB/s pairs. */
static struct kvrt_gpu_copy_calib rates(const double (*r)[2], uint32_t n)
{
	struct kvrt_gpu_copy_calib c = { .num_sizes = n };
	uint32_t i;

	for (i = 0; i < n; i++) {
		c.sizes[i].run_bytes = 4096ULL << i;
		c.sizes[i].kernel_gbps = r[i][0];
		c.sizes[i].large_gbps = r[i][1];
	}
	return c;
}

TEST(pick_largest_win_before_two_losses)
{
	/* an H200 on a THP pool, roughly: the kernel ahead to 64 KiB */
	static const double h200[][2] = { { 20, 8 }, { 30, 15 }, { 40, 25 }, { 42, 28 },
					  { 43, 40 }, { 40, 48 }, { 41, 52 }, { 42, 53 }, { 42, 54 } };
	static const double one_loss[][2] = { { 2, 1 }, { 1, 2 }, { 2, 1 }, { 1, 2 }, { 1, 2 },
					      { 9, 1 } };
	static const double never[][2] = { { 1, 2 }, { 1, 2 }, { 5, 1 } };
	static const double always[][2] = { { 2, 1 }, { 2, 1 }, { 2, 1 } };
	struct kvrt_gpu_copy_calib c;

	c = rates(h200, 9);
	CHECK_EQ(gpu_calib_pick(&c), 64 << 10);
	/* one loss is not the end; the second in a row is, whatever follows */
	c = rates(one_loss, 6);
	CHECK_EQ(gpu_calib_pick(&c), 16 << 10);
	c = rates(never, 3);
	CHECK_EQ(gpu_calib_pick(&c), 0);
	c = rates(always, 3);
	CHECK_EQ(gpu_calib_pick(&c), 16 << 10);
	c = rates(always, 0);
	CHECK_EQ(gpu_calib_pick(&c), 0);
}

TEST(pick_failed_measurements_lose)
{
	static const double failed[][2] = { { 2, 1 }, { 0, 1 }, { 2, 0 }, { 9, 1 } };
	static const double tie[][2] = { { 2, 1 }, { 1, 1 }, { 3, 1 } };
	struct kvrt_gpu_copy_calib c;

	c = rates(failed, 4);
	CHECK_EQ(gpu_calib_pick(&c), 4096);
	c = rates(tie, 3);	/* a tie is not a win, but only one loss */
	CHECK_EQ(gpu_calib_pick(&c), 16 << 10);
}

TEST(buffer_is_aligned_advised_and_touched)
{
	const size_t bytes = 16ULL << 20;
	int advise_errno = -1;
	char *p = gpu_calib_buffer_map(bytes, &advise_errno);
	bool advised = false;
	int64_t thp;
	size_t i;

	REQUIRE(p != NULL);
	CHECK_EQ((uintptr_t)p % GPU_CALIB_ALIGN, 0);
	CHECKF(advise_errno == 0, "madvise(MADV_HUGEPAGE): %s", strerror(advise_errno));
	for (i = 0; i < bytes; i += 4096)
		if (p[i] != 0x5a)
			break;
	CHECKF(i == bytes, "byte %zu not touched", i);
	thp = gpu_calib_thp_bytes(p, &advised);
	CHECKF(thp >= 0 && thp <= (int64_t)bytes, "AnonHugePages %lld", (long long)thp);
	CHECKF(advised, "VmFlags of the buffer's mapping lack hg (MADV_HUGEPAGE)");
	tap_diag("calibration buffer: %lld of %zu bytes on huge pages (THP is the host's choice)",
		 (long long)thp, bytes);
	/* the stack's mapping was never advised: the flag is the buffer's own */
	gpu_calib_thp_bytes(&advised, &advised);
	CHECK(!advised);
	munmap(p, bytes);
}

/* Measuring stops once two sizes in a row were lost, not before. */
TEST(settled_after_two_losses)
{
	static const double r[][2] = { { 2, 1 }, { 1, 2 }, { 2, 1 }, { 1, 2 }, { 0, 2 } };
	static const bool settled[] = { false, false, false, false, false, true };
	struct kvrt_gpu_copy_calib c;
	uint32_t n;

	for (n = 0; n <= 5; n++) {
		c = rates(r, n);
		CHECKF(gpu_calib_settled(&c) == settled[n], "%u sizes: settled %d", n,
		       gpu_calib_settled(&c));
	}
	CHECK_EQ(gpu_calib_pick(&c), 16 << 10);
}

int main(void)
{
	RUN(pick_largest_win_before_two_losses);
	RUN(pick_failed_measurements_lose);
	RUN(settled_after_two_losses);
	RUN(buffer_is_aligned_advised_and_touched);
	return tap_done("test_gpu_calib");
}
