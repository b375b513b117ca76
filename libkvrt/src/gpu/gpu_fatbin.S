/* SPDX-License-Identifier: MIT */
/*
 * The GPU kernels (cuda/, built by nvcc into one fatbin) inside libkvrt,
 * for cuModuleLoadData.  Without KVRT_FATBIN (no nvcc) the range is empty
 * and kvrt_gpu_open() says the GPU backend was compiled out.
 */
	.section .rodata.kvrt_fatbin, "a"
	.balign 64
	.globl kvrt_fatbin_start
	.hidden kvrt_fatbin_start
kvrt_fatbin_start:
#ifdef KVRT_FATBIN
	.incbin KVRT_FATBIN
#endif
	.globl kvrt_fatbin_end
	.hidden kvrt_fatbin_end
kvrt_fatbin_end:
	.byte 0
	.section .note.GNU-stack, "", @progbits
