/* SPDX-License-Identifier: MIT */
/*
 * gpu_register.h: how gpu_register.c cuts a host range into
 * cuMemHostRegister calls.  Header-only, without CUDA, so that the unit
 * tests (test_gpu_plan) run it on its own.
 */
#ifndef KVRT_GPU_REGISTER_H
#define KVRT_GPU_REGISTER_H

#include <stdint.h>

/*
 * Cut [0, bytes) into registration pieces of at most max bytes, each
 * ending on a multiple of unit (a block) except the last, which ends at
 * bytes.  unit > max: pieces of whole multiples of unit cannot exist, so
 * each piece is one unit (the driver takes it or fails).  Returns the
 * number of pieces; sizes (may be NULL) receives their lengths.
 */
static inline uint32_t gpu_reg_pieces(uint64_t bytes, uint64_t unit, uint64_t max,
				      uint64_t *sizes)
{
	uint64_t step = unit && unit <= max ? max / unit * unit : unit ? unit : max;
	uint32_t n = 0;

	if (!step)
		return 0;
	while (bytes) {
		uint64_t piece = bytes < step ? bytes : step;

		if (sizes)
			sizes[n] = piece;
		n++;
		bytes -= piece;
	}
	return n;
}

#endif /* KVRT_GPU_REGISTER_H */
