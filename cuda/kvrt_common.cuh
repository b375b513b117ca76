// SPDX-License-Identifier: MIT
/*
 * kvrt_common.cuh: what the kernels share.
 *
 *   - the execution-model shim: CUDA proper, or (KVRT_EMU) the host
 *     emulator in tests/emu.h that runs the same source on the CPU;
 *   - dtype conversions that are bit-exact with libkvrt/src/kv/dtype.c
 *     (round-to-nearest-even, the same saturation and NaN handling), so
 *     appended bytes and written outputs match the CPU's;
 *   - fast fp8 e4m3 decoding (hardware cvt on sm_89+, a shift trick else);
 *   - division by block_tokens through a multiply (block_tokens 1..128 need
 *     not be a power of two);
 *   - K/V row loads of 8 elements with a fallback for layouts whose strides
 *     are not multiples of the vector width (the padded layouts of tests);
 *   - warp reductions.
 */
#ifndef KVRT_COMMON_CUH
#define KVRT_COMMON_CUH

#include <stdint.h>

#include "kvrt_gpu_abi.h"

#ifdef KVRT_EMU
#include "tests/emu.h"
#define KVRT_DEV static inline
#define KVRT_HD static inline
#define KVRT_MEMBER inline
#define KVRT_SHARED(type, name) type &name = *static_cast<type *>(kvrt_emu::shared_mem(sizeof(type)))
#define KVRT_DYN_SHARED(type, name) KVRT_SHARED(type, name)
#else
#include <math.h>
#define KVRT_DEV __device__ __forceinline__
#define KVRT_HD __host__ __device__ __forceinline__
#define KVRT_MEMBER __device__ __forceinline__
#define KVRT_SHARED(type, name) __shared__ type name
/* type in the launch's dynamic shared memory (sized by the host) */
#define KVRT_DYN_SHARED(type, name)                                  \
	extern __shared__ __align__(16) unsigned char kvrt_dyn_smem[]; \
	type &name = *reinterpret_cast<type *>(kvrt_dyn_smem)
#endif

/* Every kernel: extern "C" (the host looks it up by name), args by value. */
#define KVRT_KERNEL(threads, min_blocks) \
	extern "C" __global__ void __launch_bounds__(threads, min_blocks)

namespace kvgpu {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kFp8Max = 448.0f;	/* KVRT_FP8E4M3_MAX */

KVRT_HD constexpr int ilog2(int x)
{
	return x <= 1 ? 0 : 1 + ilog2(x / 2);
}

KVRT_HD constexpr int cmin(int a, int b)
{
	return a < b ? a : b;
}

KVRT_DEV int imin(int a, int b)
{
	return a < b ? a : b;
}

KVRT_DEV int imax(int a, int b)
{
	return a > b ? a : b;
}

KVRT_DEV uint32_t f2u(float f)
{
	return __float_as_uint(f);
}

KVRT_DEV float u2f(uint32_t u)
{
	return __uint_as_float(u);
}

/* ---- scalar conversions, bit-exact with dtype.c ------------------------- */

KVRT_DEV float f16_to_f32(uint32_t h)
{
#ifdef __CUDA_ARCH__
	float f;
	unsigned short s = (unsigned short)h;

	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
	return f;
#else
	uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;

	if (exp == 0x1f)
		return u2f(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		float v = (float)mant * 0x1p-24f;

		return sign ? -v : v;
	}
	return u2f(sign | ((exp + 127 - 15) << 23) | (mant << 13));
#endif
}

KVRT_DEV float bf16_to_f32(uint32_t b)
{
	return u2f(b << 16);
}

/* f16 bits, round to nearest even; NaN keeps its top payload bits. */
KVRT_DEV uint32_t f32_to_f16(float f)
{
	uint32_t x = f2u(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;

	if (ax > 0x7f800000u)
		return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
	if (ax >= 0x477ff000u)
		return sign | 0x7c00u;
	if (ax < 0x38800000u) {
		/* subnormal: the float add rounds to the 2^-24 grid (no FTZ here) */
		float r = u2f(ax) + 0.5f;

		return sign | ((f2u(r) - f2u(0.5f)) & 0xffffu);
	}
	ax += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((ax >> 13) & 1u);
	return sign | ((ax >> 13) & 0xffffu);
}

KVRT_DEV uint32_t f32_to_bf16(float f)
{
	uint32_t x = f2u(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return ((x >> 16) | 0x0040u) & 0xffffu;
	x += 0x7fffu + ((x >> 16) & 1u);
	return x >> 16;
}

KVRT_DEV float fp8_to_f32(uint32_t v)
{
	uint32_t sign = (v & 0x80u) << 24, exp = (v >> 3) & 0xf, mant = v & 0x7;

	if (exp == 0xf && mant == 0x7)
		return u2f(sign | 0x7fc00000u);
	if (exp == 0) {
		float r = (float)mant * 0x1p-9f;

		return sign ? -r : r;
	}
	return u2f(sign | ((exp + 127 - 7) << 23) | (mant << 20));
}

/* fp8 e4m3 byte: RNE, saturating at +-448 (inf too), NaN -> 0x7f | sign. */
KVRT_DEV uint32_t f32_to_fp8(float f)
{
	uint32_t x = f2u(f);
	uint32_t sign = (x >> 24) & 0x80u;
	uint32_t ax = x & 0x7fffffffu;

	if (ax > 0x7f800000u)
		return sign | 0x7fu;
	if (ax >= 0x43e00000u)	/* 448.0f */
		return sign | 0x7eu;
	if (ax < 0x3c800000u) {
		/* subnormal: 2^14 has an ulp of 2^-9, the fp8 subnormal step */
		float r = u2f(ax) + 0x1p14f;

		return sign | ((f2u(r) - f2u(0x1p14f)) & 0xffu);
	}
	ax += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + ((ax >> 20) & 1u);
	return sign | ((ax >> 20) & 0xffu);
}

/* Element i of a q/out array of dtype dt (f32, f16, bf16). */
KVRT_DEV float load_f32(const void *base, int64_t i, uint32_t dt)
{
	if (dt == KVRT_GK_F32)
		return static_cast<const float *>(base)[i];
	if (dt == KVRT_GK_F16)
		return f16_to_f32(static_cast<const uint16_t *>(base)[i]);
	return bf16_to_f32(static_cast<const uint16_t *>(base)[i]);
}

KVRT_DEV void store_f32(void *base, int64_t i, uint32_t dt, float v)
{
	if (dt == KVRT_GK_F32)
		static_cast<float *>(base)[i] = v;
	else if (dt == KVRT_GK_F16)
		static_cast<uint16_t *>(base)[i] = (uint16_t)f32_to_f16(v);
	else
		static_cast<uint16_t *>(base)[i] = (uint16_t)f32_to_bf16(v);
}

/* ---- packed conversions for the attention inner loops ------------------- */

/* Two f16 (low half first) to floats. */
KVRT_DEV void f16x2_to_f32(uint32_t w, float &a, float &b)
{
#ifdef __CUDA_ARCH__
	asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
	    "cvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;\n\t}"
	    : "=f"(a), "=f"(b) : "r"(w));
#else
	a = f16_to_f32(w & 0xffffu);
	b = f16_to_f32(w >> 16);
#endif
}

/*
 * Four fp8 e4m3 (byte 0 first) to four f16, as two f16x2 words.  On sm_89+
 * the hardware converts exactly.  Before that, moving the 7 exponent and
 * mantissa bits down one place lands them in the f16 fields, which reads as
 * the value times 2^-8 (subnormals too: m * 2^-9 becomes the f16
 * subnormal m * 2^-17); only the NaN bytes (0x7f, 0xff) need a fix-up.  fp8_unit() is the factor that
 * turns the result back into the fp8 value: the kernels fold it into the
 * block scale so it costs nothing.
 */
KVRT_DEV constexpr float fp8_unit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	return 1.0f;
#else
	return 256.0f;
#endif
}

KVRT_DEV void fp8x4_to_f16x4(uint32_t w, uint32_t &lo, uint32_t &hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\t"
	    "cvt.rn.f16x2.e4m3x2 %0, a;\n\tcvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
	    : "=r"(lo), "=r"(hi) : "r"(w));
#else
	/* [0, b0, 0, b1] and [0, b2, 0, b3]: each f16 lane holds byte << 8 */
	uint32_t t0 = __byte_perm(w, 0, 0x1404);
	uint32_t t1 = __byte_perm(w, 0, 0x3424);
	/* bit 7 of each byte of nan: that byte is 0x7f or 0xff */
	uint32_t nan = ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;

	lo = ((t0 >> 1) & 0x3f803f80u) | (t0 & 0x80008000u);
	hi = ((t1 >> 1) & 0x3f803f80u) | (t1 & 0x80008000u);
	if (nan) {
		if (nan & 0x00000080u)
			lo = (lo & 0xffff0000u) | 0x7fffu;
		if (nan & 0x00008000u)
			lo = (lo & 0x0000ffffu) | 0x7fff0000u;
		if (nan & 0x00800000u)
			hi = (hi & 0xffff0000u) | 0x7fffu;
		if (nan & 0x80000000u)
			hi = (hi & 0x0000ffffu) | 0x7fff0000u;
	}
#endif
}

/*
 * A K/V row chunk: 8 consecutive elements of one head row, 16 bytes for
 * f16/bf16, 8 for fp8.  KVW is its size in 32-bit words.
 */
template <int KV>
struct KvType {
	static constexpr int kBytes = KV == KVRT_GK_FP8_E4M3 ? 1 : 2;
	static constexpr int kChunk = 8 * kBytes;	/* bytes of 8 elements */
	static constexpr int kWords = kChunk / 4;
	static constexpr bool kFp8 = KV == KVRT_GK_FP8_E4M3;
};

/*
 * 8 elements to float.  fp8 comes out in units of 1/fp8_unit() (see
 * fp8x4_to_f16x4); the caller's scale carries the factor.
 */
template <int KV>
KVRT_DEV void chunk_to_f32(const uint32_t (&r)[KvType<KV>::kWords], float (&f)[8])
{
	if constexpr (KV == KVRT_GK_BF16) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			f[2 * i] = u2f(r[i] << 16);
			f[2 * i + 1] = u2f(r[i] & 0xffff0000u);
		}
	} else if constexpr (KV == KVRT_GK_F16) {
#pragma unroll
		for (int i = 0; i < 4; i++)
			f16x2_to_f32(r[i], f[2 * i], f[2 * i + 1]);
	} else {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			uint32_t lo, hi;

			fp8x4_to_f16x4(r[i], lo, hi);
			f16x2_to_f32(lo, f[4 * i], f[4 * i + 1]);
			f16x2_to_f32(hi, f[4 * i + 2], f[4 * i + 3]);
		}
	}
}

/* ---- loads ---------------------------------------------------------------- */

/*
 * K/V data is read once per item and is not written while a kernel runs:
 * the read-only path, without allocating in L1.
 */
KVRT_DEV void ld_nc_v4(uint32_t (&r)[4], const void *p)
{
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
#else
	memcpy(r, p, 16);
#endif
}

/* Ask L2 for the 128-byte line holding p; nothing waits for it (no-op on the emulator). */
KVRT_DEV void prefetch_l2(const void *p)
{
#ifdef __CUDA_ARCH__
	asm volatile("prefetch.global.L2 [%0];" : : "l"(p));
#else
	(void)p;
#endif
}

KVRT_DEV void ld_nc_v2(uint32_t *r, const void *p)
{
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
	    : "=r"(r[0]), "=r"(r[1]) : "l"(p));
#else
	memcpy(r, p, 8);
#endif
}

KVRT_DEV uint32_t ld_nc_u32(const void *p)
{
#ifdef __CUDA_ARCH__
	uint32_t r;

	asm("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
	return r;
#else
	uint32_t r;

	memcpy(&r, p, 4);
	return r;
#endif
}

/* A float another CTA of this launch wrote (before a fence): from L2, never a stale L1 line. */
KVRT_DEV float ld_cg_f32(const float *p)
{
#ifdef __CUDA_ARCH__
	return __ldcg(p);
#else
	return *p;
#endif
}

template <class T>
KVRT_DEV T ldg(const T *p)
{
#ifdef __CUDA_ARCH__
	return __ldg(p);
#else
	return *p;
#endif
}

/*
 * One chunk (16 or 8 bytes) at p, whose address is a multiple of al (a
 * power of two, 16 at most).  The branch is uniform over a launch; layouts
 * with 8- or 4-byte aligned strides (padded ones) take word loads, and
 * only element-aligned ones the compact byte loop.
 */
template <int CB>
KVRT_DEV void ld_chunk(uint32_t (&r)[CB / 4], const char *p, int al)
{
	if (al >= CB) {
		if constexpr (CB == 16)
			ld_nc_v4(r, p);
		else
			ld_nc_v2(r, p);
	} else if (al >= 8) {
#pragma unroll
		for (int i = 0; i < CB / 8; i++)
			ld_nc_v2(r + 2 * i, p + 8 * i);
	} else if (al >= 4) {
#pragma unroll
		for (int i = 0; i < CB / 4; i++)
			r[i] = ld_nc_u32(p + 4 * i);
	} else {
		const uint8_t *b = reinterpret_cast<const uint8_t *>(p);
		uint64_t lo = 0, hi = 0;

#pragma unroll 1
		for (int i = 0; i < 8; i++)
			lo |= (uint64_t)ldg(b + i) << (8 * i);
		if constexpr (CB == 16) {
#pragma unroll 1
			for (int i = 0; i < 8; i++)
				hi |= (uint64_t)ldg(b + 8 + i) << (8 * i);
		}
		r[0] = (uint32_t)lo;
		r[1] = (uint32_t)(lo >> 32);
		if constexpr (CB == 16) {
			r[2] = (uint32_t)hi;
			r[3] = (uint32_t)(hi >> 32);
		}
	}
}

/* The largest power of two (<= 16) dividing every value: what ld_chunk may assume. */
KVRT_DEV int common_align(uint64_t a, uint64_t b, int64_t c, int64_t d, int64_t e)
{
	uint64_t x = a | b | (uint64_t)c | (uint64_t)d | (uint64_t)e | 16u;

	return (int)(x & (~x + 1));
}

/* ---- division by block_tokens ------------------------------------------- */

/*
 * n / d for 1 <= d and 0 <= n < 2^31 as (umulhi(n, m) + n) >> s, with
 * s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1 (Granlund and
 * Montgomery's round-up method; n < 2^31 keeps the sum in 32 bits).
 */
struct FastDiv {
	uint32_t d, m, s;
};

KVRT_HD FastDiv make_fastdiv(uint32_t d)
{
	uint32_t s = 0;

	while (s < 31 && (1u << s) < d)
		s++;
	FastDiv f = { d, (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << s) - d)) / d + 1), s };
	return f;
}

KVRT_DEV uint32_t fdiv(const FastDiv &f, uint32_t n)
{
	return (__umulhi(n, f.m) + n) >> f.s;
}

/* ---- warp reductions ------------------------------------------------------ */

KVRT_DEV float shfl_xor(float v, int mask)
{
	return __shfl_xor_sync(0xffffffffu, v, mask);
}

/* Sum (max) over the lanes whose index differs only in bits [LO, HI) (as masks). */
template <int LO, int HI>
KVRT_DEV float xor_sum(float v)
{
#pragma unroll
	for (int off = LO; off < HI; off <<= 1)
		v += shfl_xor(v, off);
	return v;
}

template <int LO, int HI>
KVRT_DEV float xor_max(float v)
{
#pragma unroll
	for (int off = LO; off < HI; off <<= 1)
		v = fmaxf(v, shfl_xor(v, off));
	return v;
}

/*
 * Transposing reduction: each of the lanes of a group of 2*OFF lanes
 * (aligned) holds N partial sums v[0..N); afterwards lane x of the group
 * holds the group's full sum of element x >> (log2(2*OFF) - log2(N)) in
 * v[0].  Each halving step swaps half the values with the partner lane,
 * so N sums cost N - 1 shuffles instead of N * log2(lanes); once one value
 * is left, a plain butterfly finishes (lanes then hold copies).
 * Requires N <= 2 * OFF, both powers of two.
 */
template <int N, int OFF>
struct ReduceScatter {
	template <int M>
	KVRT_MEMBER static float run(float (&v)[M], int lane)
	{
		if constexpr (N == 1) {
			float s = v[0];

#pragma unroll
			for (int off = OFF; off >= 1; off >>= 1)
				s += shfl_xor(s, off);
			return s;
		} else {
			constexpr int H = N / 2;
			const bool up = (lane & OFF) != 0;

#pragma unroll
			for (int j = 0; j < H; j++) {
				float send = up ? v[j] : v[j + H];
				float keep = up ? v[j + H] : v[j];

				v[j] = keep + shfl_xor(send, OFF);
			}
			return ReduceScatter<H, OFF / 2>::run(v, lane);
		}
	}
};

template <int N>
struct ReduceScatter<N, 0> {
	template <int M>
	KVRT_MEMBER static float run(float (&v)[M], int)
	{
		static_assert(N == 1, "ReduceScatter: more values than lanes");
		return v[0];
	}
};

/* ---- the attention kernels' arguments, as typed pointers ------------------ */

struct AttnCtx {
	const char *q;
	char *out;
	const char *k, *v;
	const float *ks, *vs;
	int64_t block_stride, token_stride, head_stride;	/* bytes */
	int64_t scale_block_stride;			/* floats */
	const int32_t *indices, *indptr, *seq_lens, *q_indptr;
	float *po, *pml;
	const kvrt_gk_merge *merge;	/* decode: merges run by the last partial, or NULL */
	uint32_t *merge_done;
	int num_q_heads;
	int bt;
	FastDiv bdiv;
	float sm_scale, softcap;
	int window_left;
	uint32_t q_dtype, o_dtype;
	int al;
};

KVRT_DEV AttnCtx make_attn_ctx(const kvrt_gk_attn_args &a)
{
	AttnCtx c;

	c.q = reinterpret_cast<const char *>(a.q);
	c.out = reinterpret_cast<char *>(a.out);
	c.k = reinterpret_cast<const char *>(a.k);
	c.v = reinterpret_cast<const char *>(a.v);
	c.ks = reinterpret_cast<const float *>(a.k_scales);
	c.vs = reinterpret_cast<const float *>(a.v_scales);
	c.block_stride = a.block_stride;
	c.token_stride = a.token_stride;
	c.head_stride = a.head_stride;
	c.scale_block_stride = a.scale_block_stride;
	c.indices = reinterpret_cast<const int32_t *>(a.indices);
	c.indptr = reinterpret_cast<const int32_t *>(a.indptr);
	c.seq_lens = reinterpret_cast<const int32_t *>(a.seq_lens);
	c.q_indptr = reinterpret_cast<const int32_t *>(a.q_indptr);
	c.po = reinterpret_cast<float *>(a.partial_o);
	c.pml = reinterpret_cast<float *>(a.partial_ml);
	c.merge = reinterpret_cast<const kvrt_gk_merge *>(a.merge);
	c.merge_done = reinterpret_cast<uint32_t *>(a.merge_done);
	c.num_q_heads = (int)a.num_q_heads;
	c.bt = (int)a.block_tokens;
	c.bdiv = make_fastdiv(a.block_tokens);
	c.sm_scale = a.sm_scale;
	c.softcap = a.logit_softcap;
	c.window_left = a.window_left;
	c.q_dtype = a.q_dtype;
	c.o_dtype = a.o_dtype;
	c.al = common_align(a.k, a.v, a.block_stride, a.token_stride, a.head_stride);
	return c;
}

} /* namespace kvgpu */

#endif /* KVRT_COMMON_CUH */
