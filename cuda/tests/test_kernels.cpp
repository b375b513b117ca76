// SPDX-License-Identifier: MIT
/*
 * test_kernels.cpp: every kernel of cuda/, run on the CPU by the
 * emulator (emu.h), against libkvrt's own CPU code:
 *
 *   - the conversions of kvrt_common.cuh against dtype.c, bit for bit
 *     (fp8 decoding on the pre-sm_89 path, which is the emulator's);
 *   - decode (whole and split items, merged by kvrt_attn_merge or inside
 *     the decode launch by the last partial, whose counters must be back
 *     at 0 after; the g8 kernels when a slice has more than 4 heads; any
 *     group size to the g8 kernels sometimes) and prefill
 *     against kvrt_attn_decode/_prefill(KVRT_ATTN_REFERENCE), over random
 *     head dims, dtypes, group sizes and slices, block sizes (1..128, not
 *     only powers of two), windows, soft-caps, and the block-major,
 *     layer-major, padded (8-byte aligned strides) and odd (2- or 1-byte
 *     aligned) layouts; outputs are poisoned with NaN first, and the
 *     tolerances are test_attn's (relative to the largest |v|);
 *   - the emulated mma.sync m16n8k16 (f16, bf16) against a plain matrix
 *     product, with fragments built from PTX's layout tables; mis-laid
 *     fragments must be caught;
 *   - the tensor-core prefill against the same reference, with q rounded
 *     as the kernel rounds it and the tolerance derived by test_prefill;
 *   - append against kvrt_append_kv(), byte for byte (fp8: the scale rule,
 *     with runs that start mid-block and scale raises), padding and
 *     out-of-range slots included;
 *   - copy_runs against memcpy for random sizes and alignments;
 *   - read_stream: the CTAs' sums add up to the CPU's sum of every 32-bit
 *     word (so every byte was read, once), for sizes around whole tiles.
 *
 * Each kernel is launched with a grid smaller than its work, so the
 * grid-stride loops run more than once.  KVRT_TEST_SEED picks the seed,
 * KVRT_TEST_CASES the number of random attention cases, KVRT_TEST_LONG the
 * longest sequence (default: about 400 tokens).  One TAP result per check
 * (selftests/tap.h), then "# test_kernels: N passed, N failed, N skipped".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <vector>

extern "C" {
#include "kvrt.h"
#include "kv/dtype.h"
}
#include "../kvrt_gpu_abi.h"
#include "../../selftests/tap.h"
#include "emu.h"

/* ---- the kernels --------------------------------------------------------- */

#define ATTN(hd, name, kv)                                                     \
	extern "C" void kvrt_decode_hd##hd##_##name(const kvrt_gk_attn_args a);  \
	extern "C" void kvrt_decode_g8_hd##hd##_##name(const kvrt_gk_attn_args a); \
	extern "C" void kvrt_prefill_hd##hd##_##name(const kvrt_gk_attn_args a);  \
	extern "C" void kvrt_prefill_tc_hd##hd##_##name(const kvrt_gk_attn_args a);
KVRT_GK_ATTN_VARIANTS(ATTN)
#undef ATTN
extern "C" void kvrt_attn_merge(const kvrt_gk_merge_args a);
extern "C" void kvrt_append_f16(const kvrt_gk_append_args a);
extern "C" void kvrt_append_bf16(const kvrt_gk_append_args a);
extern "C" void kvrt_append_fp8(const kvrt_gk_append_args a);
extern "C" void kvrt_copy_runs(const kvrt_gk_copy_args a);
extern "C" void kvrt_read_stream(const kvrt_gk_read_args a);

typedef void (*attn_fn)(const kvrt_gk_attn_args);

/* [hd 64, 128, 256][kv f16, bf16, fp8] */
static const attn_fn decode_fns[3][3] = {
	{ kvrt_decode_hd64_f16, kvrt_decode_hd64_bf16, kvrt_decode_hd64_fp8 },
	{ kvrt_decode_hd128_f16, kvrt_decode_hd128_bf16, kvrt_decode_hd128_fp8 },
	{ kvrt_decode_hd256_f16, kvrt_decode_hd256_bf16, kvrt_decode_hd256_fp8 },
};
/* items of 5..8 query heads */
static const attn_fn decode_g8_fns[3][3] = {
	{ kvrt_decode_g8_hd64_f16, kvrt_decode_g8_hd64_bf16, kvrt_decode_g8_hd64_fp8 },
	{ kvrt_decode_g8_hd128_f16, kvrt_decode_g8_hd128_bf16, kvrt_decode_g8_hd128_fp8 },
	{ kvrt_decode_g8_hd256_f16, kvrt_decode_g8_hd256_bf16, kvrt_decode_g8_hd256_fp8 },
};
static const attn_fn prefill_fns[3][3] = {
	{ kvrt_prefill_hd64_f16, kvrt_prefill_hd64_bf16, kvrt_prefill_hd64_fp8 },
	{ kvrt_prefill_hd128_f16, kvrt_prefill_hd128_bf16, kvrt_prefill_hd128_fp8 },
	{ kvrt_prefill_hd256_f16, kvrt_prefill_hd256_bf16, kvrt_prefill_hd256_fp8 },
};
static const attn_fn prefill_tc_fns[3][3] = {
	{ kvrt_prefill_tc_hd64_f16, kvrt_prefill_tc_hd64_bf16, kvrt_prefill_tc_hd64_fp8 },
	{ kvrt_prefill_tc_hd128_f16, kvrt_prefill_tc_hd128_bf16, kvrt_prefill_tc_hd128_fp8 },
	{ kvrt_prefill_tc_hd256_f16, kvrt_prefill_tc_hd256_bf16, kvrt_prefill_tc_hd256_fp8 },
};

static int hd_index(uint32_t hd)
{
	return hd == 64 ? 0 : hd == 128 ? 1 : 2;
}

static std::mt19937_64 rng;

static uint64_t rnd(uint64_t n)	/* [0, n) */
{
	return n ? rng() % n : 0;
}

static double urand(double lo, double hi)
{
	return lo + (hi - lo) * ((rng() >> 11) * 0x1p-53);
}

static unsigned seed_for_emu()
{
	return (unsigned)rng();
}

static size_t esize(enum kvrt_dtype dt)
{
	return kvrt_dtype_size(dt);
}

static const char *dtname(int dt)
{
	static const char *n[] = { "f32", "f16", "bf16", "fp8" };

	return n[dt];
}

/* ---- conversions ---------------------------------------------------------- */

/* The kernels' helpers, compiled here for the host (the emulator's path). */
#include "../kvrt_common.cuh"
#include "../kvrt_mma.cuh"

static float rand_float_bits()
{
	uint32_t u;
	float f;

	switch (rnd(4)) {
	case 0:		/* anything, NaN and inf included */
		u = (uint32_t)rng();
		break;
	case 1:		/* around the f16 / fp8 ranges */
		u = ((uint32_t)rng() & 0x807fffffu) | ((uint32_t)(100 + rnd(60)) << 23);
		break;
	case 2:		/* near ties: low mantissa bits 1000... */
		u = ((uint32_t)rng() & 0xfff00000u) | (1u << (12 + rnd(9)));
		break;
	default:	/* small: subnormal f16 / fp8 */
		u = ((uint32_t)rng() & 0x807fffffu) | ((uint32_t)(95 + rnd(30)) << 23);
		break;
	}
	memcpy(&f, &u, 4);
	return f;
}

static void test_conversions()
{
	unsigned bad16 = 0, badb = 0, bad8 = 0, badd = 0, badh = 0, badf = 0, i;

	for (i = 0; i < 2000000; i++) {
		float f = rand_float_bits();

		bad16 += kvgpu::f32_to_f16(f) != kvrt_f32_to_f16(f);
		badb += kvgpu::f32_to_bf16(f) != kvrt_f32_to_bf16(f);
		bad8 += kvgpu::f32_to_fp8(f) != kvrt_f32_to_fp8e4m3(f);
	}
	for (i = 0; i < 65536; i++) {
		float a = kvgpu::f16_to_f32(i), b = kvrt_f16_to_f32((uint16_t)i);

		badh += memcmp(&a, &b, 4) != 0 && !(isnan(a) && isnan(b));
	}
	for (i = 0; i < 256; i++) {
		float a = kvgpu::fp8_to_f32(i), b = kvrt_fp8e4m3_to_f32((uint8_t)i);
		uint32_t lo, hi, w = i | (i << 8) | ((i ^ 0x80) << 16) | (0x7fu << 24);
		float x[4];

		badd += memcmp(&a, &b, 4) != 0 && !(isnan(a) && isnan(b));
		/* the packed decoder, times its unit, on four lanes at once */
		kvgpu::fp8x4_to_f16x4(w, lo, hi);
		x[0] = kvgpu::f16_to_f32(lo & 0xffff) * kvgpu::fp8_unit();
		x[1] = kvgpu::f16_to_f32(lo >> 16) * kvgpu::fp8_unit();
		x[2] = kvgpu::f16_to_f32(hi & 0xffff) * kvgpu::fp8_unit();
		x[3] = kvgpu::f16_to_f32(hi >> 16) * kvgpu::fp8_unit();
		for (int k = 0; k < 4; k++) {
			uint8_t byte = (uint8_t)(w >> (8 * k));
			float want = kvrt_fp8e4m3_to_f32(byte);

			badd += !(x[k] == want || (isnan(x[k]) && isnan(want)));
		}
	}
	tap_result(!bad16, "f32_to_f16 matches dtype.c (%u differ)", bad16);
	tap_result(!badb, "f32_to_bf16 matches dtype.c (%u differ)", badb);
	tap_result(!bad8, "f32_to_fp8 matches dtype.c (%u differ)", bad8);
	tap_result(!badh, "f16_to_f32 matches dtype.c for all 65536 (%u differ)", badh);
	tap_result(!badd, "fp8 decoding (scalar, packed) matches dtype.c for all 256 (%u differ)", badd);

	for (uint32_t d = 1; d <= 300; d++) {
		kvgpu::FastDiv fd = kvgpu::make_fastdiv(d);

		for (uint32_t n = 0; n < 70000; n++)
			badf += kvgpu::fdiv(fd, n) != n / d;
		for (int k = 0; k < 20000; k++) {
			uint32_t n = (uint32_t)rng() & 0x7fffffffu;

			badf += kvgpu::fdiv(fd, n) != n / d;
		}
		badf += kvgpu::fdiv(fd, 0x7fffffffu) != 0x7fffffffu / d;
	}
	tap_result(!badf, "fastdiv for divisors 1..300 (%u wrong)", badf);
}

/* ---- warp MMA ------------------------------------------------------------- */

static uint16_t to_half(bool bf16, double x)
{
	return bf16 ? kvrt_f32_to_bf16((float)x) : kvrt_f32_to_f16((float)x);
}

/*
 * Fragment variants a lane loads: PTX's layout, and two classic mistakes
 * (A's a[1] and a[2] exchanged: row g + 8 taken for column 2t + 8; B's
 * storage read transposed) that the test must tell apart from it.
 */
enum { MMA_RIGHT, MMA_SWAP_A, MMA_B_ROWMAJOR };

/* D = A B + C on one warp per matrix set; A 16x16, B 16x8, C and D 16x8, row-major. */
static void run_mma(bool bf16, int variant, int warps, const std::vector<double> &A,
		    const std::vector<double> &B, const std::vector<double> &Cm, std::vector<float> &D)
{
	D.assign((size_t)warps * 128, NAN);
	kvrt_emu::launch([&] {
		const unsigned tid = kvrt_emu::thread_index(), wp = tid / 32, lane = tid % 32;
		const unsigned g = lane / 4, t = lane % 4;
		const double *a = &A[wp * 256], *b = &B[wp * 128], *cm = &Cm[wp * 128];
		auto pk = [&](double lo, double hi) {
			return (uint32_t)to_half(bf16, lo) | (uint32_t)to_half(bf16, hi) << 16;
		};
		uint32_t fa[4] = {
			pk(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
			pk(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
			pk(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
			pk(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]),
		};
		uint32_t fb[2] = {
			pk(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
			pk(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]),
		};
		float d[4];

		if (variant == MMA_SWAP_A)
			std::swap(fa[1], fa[2]);
		if (variant == MMA_B_ROWMAJOR) {
			/* B's storage read as [n][k], the transpose */
			fb[0] = pk(b[g * 16 + 2 * t], b[g * 16 + 2 * t + 1]);
			fb[1] = pk(b[g * 16 + 2 * t + 8], b[g * 16 + 2 * t + 9]);
		}
		for (int i = 0; i < 4; i++)
			d[i] = (float)cm[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
		if (bf16)
			kvgpu::mma16816<KVRT_GK_BF16>(d, fa, fb);
		else
			kvgpu::mma16816<KVRT_GK_F16>(d, fa, fb);
		for (int i = 0; i < 4; i++)
			D[wp * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
	}, 1, 32 * warps, seed_for_emu());
}

/* Largest |D - (A B + C)| over the warps' matrices, in float64. */
static double mma_err(int warps, const std::vector<double> &A, const std::vector<double> &B,
		      const std::vector<double> &Cm, const std::vector<float> &D)
{
	double worst = 0;

	for (int w = 0; w < warps; w++)
		for (int r = 0; r < 16; r++)
			for (int n = 0; n < 8; n++) {
				double want = Cm[w * 128 + r * 8 + n];

				for (int k = 0; k < 16; k++)
					want += A[w * 256 + r * 16 + k] * B[w * 128 + k * 8 + n];
				double e = fabs(D[w * 128 + r * 8 + n] - want);

				if (!(e <= worst))
					worst = e;
			}
	return worst;
}

static void test_mma()
{
	const int warps = 3;	/* lanes of later warps address their own fragments */

	for (int bf = 0; bf < 2; bf++) {
		const bool bf16 = bf;
		std::vector<double> A(warps * 256), B(warps * 128), Cm(warps * 128);
		std::vector<float> D;

		/* small integers: every product and sum is exact, so D must be too */
		for (auto &x : A)
			x = (double)((int)rnd(17) - 8);
		for (auto &x : B)
			x = (double)((int)rnd(17) - 8);
		for (auto &x : Cm)
			x = (double)((int)rnd(201) - 100);
		run_mma(bf16, MMA_RIGHT, warps, A, B, Cm, D);
		double e = mma_err(warps, A, B, Cm, D);

		tap_result(e == 0, "mma m16n8k16 %s: integer A B + C exact (err %g)", bf16 ? "bf16" : "f16", e);

		run_mma(bf16, MMA_SWAP_A, warps, A, B, Cm, D);
		e = mma_err(warps, A, B, Cm, D);
		tap_result(e > 0, "mma %s: A fragments with rows and columns mixed up are caught (err %g)",
			   bf16 ? "bf16" : "f16", e);
		run_mma(bf16, MMA_B_ROWMAJOR, warps, A, B, Cm, D);
		e = mma_err(warps, A, B, Cm, D);
		tap_result(e > 0, "mma %s: B read row-major is caught (err %g)", bf16 ? "bf16" : "f16", e);

		/* reals in the 16-bit type: exact products, f32 sums of 17 terms */
		double sum_abs = 0;

		for (auto &x : A)
			x = bf16 ? kvrt_bf16_to_f32(to_half(true, urand(-4, 4))) :
				   kvrt_f16_to_f32(to_half(false, urand(-4, 4)));
		for (auto &x : B)
			x = bf16 ? kvrt_bf16_to_f32(to_half(true, urand(-4, 4))) :
				   kvrt_f16_to_f32(to_half(false, urand(-4, 4)));
		for (auto &x : Cm)
			x = (float)urand(-50, 50);
		run_mma(bf16, MMA_RIGHT, warps, A, B, Cm, D);
		e = mma_err(warps, A, B, Cm, D);
		sum_abs = 50 + 16 * 16;	/* |C| + sum |a b| at most */
		tap_result(e <= 17 * 0x1p-24 * sum_abs, "mma %s: random A B + C within f32 rounding (err %g)",
			   bf16 ? "bf16" : "f16", e);
	}
}

/* ---- paged KV worlds -------------------------------------------------------- */

enum { LAYOUT_BLOCK_MAJOR, LAYOUT_LAYER_MAJOR, LAYOUT_PADDED, LAYOUT_ODD, NR_LAYOUTS };
static const char *layout_name[] = { "block-major", "layer-major", "padded", "odd" };

static void fill_layout(kvrt_layout *lo, int kind, uint32_t layers, uint32_t heads, uint32_t hd,
			uint32_t bt, uint32_t nblocks, enum kvrt_dtype dt)
{
	int64_t es = (int64_t)esize(dt), row = hd * es;

	memset(lo, 0, sizeof(*lo));
	lo->num_layers = layers;
	lo->num_kv_heads = heads;
	lo->head_dim = hd;
	lo->block_tokens = bt;
	lo->num_blocks = nblocks;
	lo->kv_dtype = dt;
	switch (kind) {
	case LAYOUT_BLOCK_MAJOR:
	case LAYOUT_LAYER_MAJOR:
		if (kvrt_layout_init(lo, kind == LAYOUT_BLOCK_MAJOR ? KVRT_LAYOUT_BLOCK_MAJOR :
				     KVRT_LAYOUT_LAYER_MAJOR, layers, heads, hd, bt, nblocks, dt)) {
			fprintf(stderr, "kvrt_layout_init failed\n");
			exit(2);
		}
		break;
	case LAYOUT_PADDED:	/* [block][layer][kv][head][token][dim], gaps of 8s */
		lo->token_stride = row + 24;
		lo->head_stride = bt * lo->token_stride + 8;
		lo->kv_stride = heads * lo->head_stride + 40;
		lo->layer_stride = 2 * lo->kv_stride + 16;
		lo->block_stride = layers * lo->layer_stride + 128;
		lo->scale_block_stride = heads + 3;
		lo->scale_kv_stride = (int64_t)nblocks * (heads + 3) + 1;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride + 5;
		break;
	default:		/* odd: element-aligned only */
		lo->head_stride = row + es;
		lo->token_stride = heads * lo->head_stride + es;
		lo->block_stride = bt * lo->token_stride + 3 * es;
		lo->kv_stride = nblocks * lo->block_stride + es;
		lo->layer_stride = 2 * lo->kv_stride + es;
		lo->scale_block_stride = heads + 1;
		lo->scale_kv_stride = (int64_t)nblocks * (heads + 1) + 3;
		lo->scale_layer_stride = 2 * lo->scale_kv_stride + 1;
		break;
	}
}

static size_t layout_bytes(const kvrt_layout *lo)
{
	return (size_t)((lo->num_layers - 1) * lo->layer_stride + lo->kv_stride +
			(lo->num_blocks - 1) * lo->block_stride +
			(lo->block_tokens - 1) * lo->token_stride +
			(lo->num_kv_heads - 1) * lo->head_stride) +
	       lo->head_dim * esize(lo->kv_dtype);
}

static size_t scales_count(const kvrt_layout *lo)
{
	return (size_t)((lo->num_layers - 1) * lo->scale_layer_stride + lo->scale_kv_stride +
			(lo->num_blocks - 1) * lo->scale_block_stride) +
	       lo->num_kv_heads;
}

static size_t elem_off(const kvrt_layout *lo, uint32_t l, int kv, int64_t b, int64_t t, uint32_t h)
{
	return (size_t)(l * lo->layer_stride + kv * lo->kv_stride + b * lo->block_stride +
			t * lo->token_stride + h * lo->head_stride);
}

static size_t scale_idx(const kvrt_layout *lo, uint32_t l, int kv, int64_t b, uint32_t h)
{
	return (size_t)(l * lo->scale_layer_stride + kv * lo->scale_kv_stride +
			b * lo->scale_block_stride + h);
}

static void put_elem(enum kvrt_dtype dt, void *p, double x)
{
	if (dt == KVRT_DTYPE_F16) {
		uint16_t h = kvrt_f32_to_f16((float)x);

		memcpy(p, &h, 2);
	} else if (dt == KVRT_DTYPE_BF16) {
		uint16_t h = kvrt_f32_to_bf16((float)x);

		memcpy(p, &h, 2);
	} else if (dt == KVRT_DTYPE_F32) {
		float f = (float)x;

		memcpy(p, &f, 4);
	}
}

static double get_elem(enum kvrt_dtype dt, const void *p)
{
	uint16_t h;
	float f;

	switch (dt) {
	case KVRT_DTYPE_F16:
		memcpy(&h, p, 2);
		return kvrt_f16_to_f32(h);
	case KVRT_DTYPE_BF16:
		memcpy(&h, p, 2);
		return kvrt_bf16_to_f32(h);
	case KVRT_DTYPE_FP8_E4M3:
		return kvrt_fp8e4m3_to_f32(*(const uint8_t *)p);
	default:
		memcpy(&f, p, 4);
		return f;
	}
}

struct World {
	kvrt_layout lo;
	std::vector<uint8_t> cache;
	std::vector<float> scales;
	uint32_t nseq;
	std::vector<int32_t> indptr, indices, lens;
	double vmax;		/* largest |v| stored (dequantised) */
	uint32_t layer;
};

static void make_world(World &w, int kind, uint32_t heads, uint32_t hd, uint32_t bt,
		       enum kvrt_dtype dt, const std::vector<int32_t> &lens)
{
	uint32_t nblocks = 0;

	w.nseq = (uint32_t)lens.size();
	w.lens = lens;
	w.indptr.assign(1, 0);
	for (int32_t len : lens) {
		uint32_t nb = (uint32_t)((len + bt - 1) / bt) + (uint32_t)rnd(2);

		nblocks += nb;
		w.indptr.push_back((int32_t)nblocks);
	}
	nblocks += (uint32_t)rnd(3);	/* blocks no sequence uses */
	w.indices.resize(nblocks);
	for (uint32_t i = 0; i < nblocks; i++)
		w.indices[i] = (int32_t)i;
	std::shuffle(w.indices.begin(), w.indices.end(), rng);
	w.indices.resize(w.indptr.back());

	fill_layout(&w.lo, kind, 2, heads, hd, bt, nblocks, dt);
	w.layer = 1;
	w.cache.assign(layout_bytes(&w.lo), 0xff);	/* NaN everywhere nothing is written */
	w.scales.assign(scales_count(&w.lo), NAN);
	w.vmax = 0;
	for (uint32_t s = 0; s < w.nseq; s++)
		for (int32_t p = 0; p < lens[s]; p++) {
			int64_t b = w.indices[w.indptr[s] + p / bt];

			for (int kv = 0; kv < 2; kv++)
				for (uint32_t h = 0; h < heads; h++) {
					uint8_t *row = &w.cache[elem_off(&w.lo, 1, kv, b, p % bt, h)];
					double sc = 1;

					if (dt == KVRT_DTYPE_FP8_E4M3) {
						float &f = w.scales[scale_idx(&w.lo, 1, kv, b, h)];

						if (isnan(f))
							f = (float)urand(0.002, 0.01);
						sc = f;
					}
					for (uint32_t d = 0; d < hd; d++) {
						uint8_t *e = row + d * esize(dt);
						double x;

						if (dt == KVRT_DTYPE_FP8_E4M3) {
							uint8_t v;

							do
								v = (uint8_t)rnd(256);
							while ((v & 0x7f) == 0x7f);
							*e = v;
						} else {
							put_elem(dt, e, urand(-1, 1));
						}
						x = get_elem(dt, e) * sc;
						if (kv == 1 && fabs(x) > w.vmax)
							w.vmax = fabs(x);
					}
				}
		}
}

struct AttnCase {
	uint32_t hd, nkv, group, bt;
	enum kvrt_dtype kv, q, o;
	int layout;
	int32_t window;
	float softcap;
	double qamp;
	std::vector<int32_t> lens;
};

static void describe(char *buf, size_t n, const AttnCase &c, const char *what)
{
	int o = snprintf(buf, n, "%s hd=%u kv=%s q=%s o=%s nkv=%u group=%u bt=%u %s win=%d cap=%g lens=",
			 what, c.hd, dtname(c.kv), dtname(c.q), dtname(c.o), c.nkv, c.group, c.bt,
			 layout_name[c.layout], c.window, c.softcap);

	for (size_t s = 0; s < c.lens.size() && o < (int)n; s++)
		o += snprintf(buf + o, n - o, "%d%s", c.lens[s], s + 1 < c.lens.size() ? "," : "");
}

static int long_seqs;	/* KVRT_TEST_LONG: longest sequence instead of ~400 */

static AttnCase random_case(bool prefill)
{
	static const uint32_t hds[] = { 64, 128, 256 };
	static const uint32_t groups[] = { 1, 2, 3, 4, 5, 8 };
	static const uint32_t bts[] = { 1, 2, 3, 7, 16, 16, 32, 100, 128 };
	static const enum kvrt_dtype kvs[] = { KVRT_DTYPE_F16, KVRT_DTYPE_BF16, KVRT_DTYPE_FP8_E4M3 };
	static const enum kvrt_dtype qo[] = { KVRT_DTYPE_F32, KVRT_DTYPE_F16, KVRT_DTYPE_BF16 };
	AttnCase c;
	uint32_t nseq = 1 + (uint32_t)rnd(3);

	c.hd = hds[rnd(3)];
	c.kv = kvs[rnd(3)];
	c.q = qo[rnd(3)];
	c.o = qo[rnd(3)];
	c.group = groups[rnd(6)];
	c.nkv = 1 + (uint32_t)rnd(2);
	c.bt = bts[rnd(9)];
	c.layout = (int)rnd(NR_LAYOUTS);
	c.window = rnd(3) == 0 ? (int32_t)rnd(80) : -1;
	c.softcap = rnd(4) == 0 ? (float)urand(5, 30) : 0.0f;
	c.qamp = urand(0.3, 3);
	for (uint32_t s = 0; s < nseq; s++) {
		int32_t len = rnd(4) == 0 ? 1 + (int32_t)rnd(8) : 1 + (int32_t)rnd(prefill ? 150 : 300);

		if (rnd(5) == 0)
			len = (int32_t)(c.bt * (1 + rnd(3)));	/* an exact block multiple */
		if (long_seqs)
			len = 1 + (int32_t)rnd(long_seqs);
		c.lens.push_back(long_seqs ? len : std::min(len, 400));
	}
	return c;
}

static void fill_q(std::vector<uint8_t> &q, size_t n, enum kvrt_dtype dt, double amp)
{
	q.resize(n * esize(dt));
	for (size_t i = 0; i < n; i++)
		put_elem(dt, &q[i * esize(dt)], urand(-amp, amp));
}

static double tolerance(enum kvrt_dtype o)
{
	return 1e-5 + (o == KVRT_DTYPE_F16 ? 0x1p-11 : o == KVRT_DTYPE_BF16 ? 0x1p-8 : 0);
}

static kvrt_gk_attn_args attn_args(const World &w, const AttnCase &c, const void *q, void *out)
{
	kvrt_gk_attn_args a;
	const kvrt_layout &lo = w.lo;
	const uint8_t *k = w.cache.data() + w.layer * lo.layer_stride;

	memset(&a, 0, sizeof(a));
	a.q = (uint64_t)q;
	a.out = (uint64_t)out;
	a.k = (uint64_t)k;
	a.v = (uint64_t)(k + lo.kv_stride);
	if (c.kv == KVRT_DTYPE_FP8_E4M3) {
		const float *ks = w.scales.data() + w.layer * lo.scale_layer_stride;

		a.k_scales = (uint64_t)ks;
		a.v_scales = (uint64_t)(ks + lo.scale_kv_stride);
	}
	a.block_stride = lo.block_stride;
	a.token_stride = lo.token_stride;
	a.head_stride = lo.head_stride;
	a.scale_block_stride = lo.scale_block_stride;
	a.indices = (uint64_t)w.indices.data();
	a.indptr = (uint64_t)w.indptr.data();
	a.seq_lens = (uint64_t)w.lens.data();
	a.num_q_heads = c.nkv * c.group;
	a.block_tokens = c.bt;
	a.sm_scale = (float)(1 / sqrt((double)c.hd));
	a.logit_softcap = c.softcap;
	a.window_left = c.window;
	a.q_dtype = c.q;
	a.o_dtype = c.o;
	return a;
}

static kvrt_attn_params cpu_params(const AttnCase &c)
{
	kvrt_attn_params p;

	memset(&p, 0, sizeof(p));
	p.num_q_heads = c.nkv * c.group;
	p.sm_scale = (float)(1 / sqrt((double)c.hd));
	p.window_left = c.window;
	p.logit_softcap = c.softcap;
	p.q_dtype = c.q;
	p.o_dtype = KVRT_DTYPE_F32;
	p.impl = KVRT_ATTN_REFERENCE;
	p.num_threads = 1;
	return p;
}

/* Largest |gpu - ref| / vmax; NaN (an unwritten output) wins. */
static double compare(const std::vector<uint8_t> &out, enum kvrt_dtype o,
		      const std::vector<float> &ref, double vmax, size_t *where)
{
	double worst = 0;

	for (size_t i = 0; i < ref.size(); i++) {
		double e = fabs(get_elem(o, &out[i * esize(o)]) - ref[i]) / (vmax > 0 ? vmax : 1);

		if (!(e <= worst)) {
			worst = e;
			*where = i;
			if (isnan(e))
				break;
		}
	}
	return worst;
}

/* Heads [0, group) of a KV head in slices of at most 8, sometimes uneven. */
static std::vector<std::pair<int, int>> head_slices(uint32_t group)
{
	std::vector<std::pair<int, int>> v;
	uint32_t h = 0;

	while (h < group) {
		uint32_t n = std::min<uint32_t>(group - h, 8);

		if (n > 1 && rnd(3) == 0)
			n = 1 + (uint32_t)rnd(n);
		v.push_back({ (int)h, (int)n });
		h += n;
	}
	return v;
}

/* A work item of sequence s and KV head g over the query heads sl of its group; rows and splits are the caller's. */
static kvrt_gk_work work_for(uint32_t s, uint32_t g, uint32_t group, std::pair<int, int> sl)
{
	kvrt_gk_work it;

	memset(&it, 0, sizeof(it));
	it.seq = (int32_t)s;
	it.kv_head = (int32_t)g;
	it.q_head0 = (int32_t)(g * group + (uint32_t)sl.first);
	it.num_q_heads = sl.second;
	return it;
}

static void test_decode(const AttnCase &c)
{
	World w;
	char desc[512];
	uint32_t nq = c.nkv * c.group, hd = c.hd, nseq = (uint32_t)c.lens.size();
	std::vector<uint8_t> q, out;
	std::vector<float> ref(nseq * nq * hd);
	std::vector<kvrt_gk_work> work;
	std::vector<kvrt_gk_merge> merges;
	uint32_t nslots = 0, widest = 0;
	bool fused = rnd(2) == 0;

	describe(desc, sizeof(desc), c, "decode");
	make_world(w, c.layout, c.nkv, hd, c.bt, c.kv, c.lens);
	fill_q(q, nseq * nq * hd, c.q, c.qamp);
	out.assign(nseq * nq * hd * esize(c.o), 0xff);

	kvrt_kv_cache kc = { &w.lo, w.cache.data(), c.kv == KVRT_DTYPE_FP8_E4M3 ? w.scales.data() : NULL,
			     w.layer };
	kvrt_block_table tab = { nseq, w.indptr.data(), w.indices.data(), w.lens.data() };
	kvrt_attn_params p = cpu_params(c);
	int ret = kvrt_attn_decode(&p, q.data(), &kc, &tab, ref.data());

	if (ret) {
		tap_result(false, "%s: CPU reference returned %d", desc, ret);
		return;
	}

	/* the plan: whole items, or splits along the keys merged after */
	for (uint32_t s = 0; s < nseq; s++)
		for (uint32_t g = 0; g < c.nkv; g++)
			for (auto sl : head_slices(c.group)) {
				int32_t len = c.lens[s];
				uint32_t nsplit = rnd(3) == 0 ? 1 + (uint32_t)rnd(4) : 1;
				kvrt_gk_work it = work_for(s, g, c.group, sl);

				widest = std::max(widest, (uint32_t)sl.second);
				it.q_row0 = (int32_t)s;
				it.q_row_end = (int32_t)s + 1;
				if (nsplit == 1) {
					it.tok_begin = 0;
					it.tok_end = len;
					it.partial = -1;
					work.push_back(it);
					continue;
				}
				kvrt_gk_merge mg = { (int32_t)s, it.q_head0, sl.second, (int32_t)nslots,
						     (int32_t)nsplit, 0 };
				for (uint32_t k = 0; k < nsplit; k++) {
					it.tok_begin = (int32_t)((int64_t)len * k / nsplit);
					it.tok_end = (int32_t)((int64_t)len * (k + 1) / nsplit);
					it.partial = (int32_t)nslots++;
					it.merge = (int32_t)merges.size();
					work.push_back(it);
				}
				merges.push_back(mg);
			}
	std::shuffle(work.begin(), work.end(), rng);

	std::vector<float> po((size_t)std::max(nslots, 1u) * KVRT_GK_MAX_GROUP * hd, NAN);
	std::vector<float> pml((size_t)std::max(nslots, 1u) * KVRT_GK_MAX_GROUP * 2, NAN);
	kvrt_gk_plan_hdr hdr = { (uint32_t)work.size(), (uint32_t)merges.size() };
	kvrt_gk_attn_args a = attn_args(w, c, q.data(), out.data());

	a.work = (uint64_t)work.data();
	a.hdr = (uint64_t)&hdr;
	a.partial_o = (uint64_t)po.data();
	a.partial_ml = (uint64_t)pml.data();
	std::vector<uint32_t> done(merges.size() + 1, 0);
	if (fused) {
		a.merge = (uint64_t)merges.data();
		a.merge_done = (uint64_t)done.data();
	}
	/* the g8 kernels take any item; the others up to 4 heads */
	bool wide = widest > 4 || rnd(4) == 0;
	attn_fn fn = (wide ? decode_g8_fns : decode_fns)[hd_index(hd)][c.kv - 1];
	unsigned grid = 1 + (unsigned)rnd(std::min<size_t>(work.size(), 4));

	kvrt_emu::launch([&] { fn(a); }, grid, KVRT_GK_DECODE_THREADS, seed_for_emu());
	if (!merges.empty() && !fused) {
		kvrt_gk_merge_args ma;

		memset(&ma, 0, sizeof(ma));
		ma.out = (uint64_t)out.data();
		ma.merge = (uint64_t)merges.data();
		ma.hdr = (uint64_t)&hdr;
		ma.partial_o = (uint64_t)po.data();
		ma.partial_ml = (uint64_t)pml.data();
		ma.num_q_heads = nq;
		ma.head_dim = hd;
		ma.o_dtype = c.o;
		kvrt_emu::launch([&] { kvrt_attn_merge(ma); }, 1 + (unsigned)rnd(2),
				 KVRT_GK_MERGE_THREADS, seed_for_emu());
	}

	size_t where = 0;
	double err = compare(out, c.o, ref, w.vmax, &where);

	size_t counted = 0;

	for (uint32_t d : done)
		counted += d != 0;
	tap_result(err <= tolerance(c.o) && !counted,
		   "%s splits=%zu%s%s: err %.3g (tol %.3g) at seq %zu head %zu, %zu counters left", desc,
		   merges.size(), fused ? " fused" : "", wide ? " g8" : "", err, tolerance(c.o),
		   where / hd / nq, where / hd % nq, counted);
}

/*
 * The tensor-core prefill's tolerance, relative to the largest |v| like
 * tolerance()'s, from what the kernel rounds.  u(t) is the unit roundoff:
 * bf16 2^-8, f16 2^-11, f32 2^-24; N is the most keys a row attends.
 *
 *   q        rounded to the MMA type (bf16 for bf16 K/V, else f16).  Not
 *            in the error: the reference gets the same rounded q (the
 *            conversions are dtype.c's, bit for bit), and K enters the
 *            MMA exactly (f16/bf16 as stored; every fp8 e4m3 value is an
 *            f16, its scale is applied to the f32 logit).  Logits are then
 *            f32 dot products of the same inputs, as the SIMT kernel's:
 *            the 1e-5 that tolerance() allows for f32 arithmetic.
 *   P        each weight p = exp(s - m) in (0, 1] is rounded to the MMA
 *            type: p(1 + e), |e| <= u_p, while the row sum l adds the
 *            unrounded p.  o = sum p(1 + e) v / sum p is then off by at
 *            most u_p max|v|.  f16 weights under 2^-14 are subnormal, off
 *            by at most 2^-25 absolute each; with l >= 1 (the largest
 *            weight is 1) that adds at most N 2^-25.
 *   V (fp8)  byte x scale rounded to f16: each v off by u(f16) |v| (+2^-25
 *            absolute when subnormal); a convex combination of them by
 *            at most as much.
 *   sums     P V and l accumulate in f32 over the N keys, the partial sums
 *            bounded by l max|v| and l, so at most N 2^-24 each relative.
 *   output   rounded to o_dtype: u(o).
 *
 *   tol = 1e-5 + u(o) + u_p + [f16: N 2^-25] + [fp8: 2^-11 + 2^-25] + 2 N 2^-24
 *
 * bf16: about 2^-8 (+ u(o)); f16 with 400 keys: about 6e-4.  A key
 * missed or attended twice, a mis-laid fragment or a wrong scale moves
 * outputs by far more on the short rows every case has.
 */
static double tolerance_tc(const AttnCase &c, int32_t nkeys)
{
	const bool bf = c.kv == KVRT_DTYPE_BF16, fp8 = c.kv == KVRT_DTYPE_FP8_E4M3;
	double t = tolerance(c.o) + (bf ? 0x1p-8 : 0x1p-11) + 2 * nkeys * 0x1p-24;

	if (!bf)
		t += nkeys * 0x1p-25;
	if (fp8)
		t += 0x1p-11 + 0x1p-25;
	return t;
}

/* q as the tensor-core kernel gives it to the MMA: rounded to bf16 (bf16 K/V) or f16. */
static std::vector<float> q_rounded(const std::vector<uint8_t> &q, enum kvrt_dtype qdt,
				     enum kvrt_dtype kv)
{
	std::vector<float> r(q.size() / esize(qdt));

	for (size_t i = 0; i < r.size(); i++) {
		float x = (float)get_elem(qdt, &q[i * esize(qdt)]);

		r[i] = kv == KVRT_DTYPE_BF16 ? kvrt_bf16_to_f32(kvrt_f32_to_bf16(x)) :
					       kvrt_f16_to_f32(kvrt_f32_to_f16(x));
	}
	return r;
}

static void test_prefill(const AttnCase &c, bool tc)
{
	World w;
	char desc[512];
	uint32_t nq = c.nkv * c.group, hd = c.hd, nseq = (uint32_t)c.lens.size();
	std::vector<int32_t> qptr(1, 0);
	std::vector<uint8_t> q, out;
	std::vector<kvrt_gk_work> work;

	describe(desc, sizeof(desc), c, tc ? "prefill_tc" : "prefill");
	make_world(w, c.layout, c.nkv, hd, c.bt, c.kv, c.lens);
	for (uint32_t s = 0; s < nseq; s++) {
		int32_t n = rnd(3) == 0 ? c.lens[s] : 1 + (int32_t)rnd((uint64_t)c.lens[s]);

		qptr.push_back(qptr.back() + n);
	}
	uint32_t rows = (uint32_t)qptr.back();
	std::vector<float> ref((size_t)rows * nq * hd);

	fill_q(q, (size_t)rows * nq * hd, c.q, c.qamp);
	out.assign((size_t)rows * nq * hd * esize(c.o), 0xff);

	kvrt_kv_cache kc = { &w.lo, w.cache.data(), c.kv == KVRT_DTYPE_FP8_E4M3 ? w.scales.data() : NULL,
			     w.layer };
	kvrt_block_table tab = { nseq, w.indptr.data(), w.indices.data(), w.lens.data() };
	kvrt_attn_params p = cpu_params(c);
	std::vector<float> qr;

	if (tc) {
		qr = q_rounded(q, c.q, c.kv);
		p.q_dtype = KVRT_DTYPE_F32;
	}
	int ret = kvrt_attn_prefill(&p, tc ? (const void *)qr.data() : (const void *)q.data(), qptr.data(),
				    &kc, &tab, ref.data());

	if (ret) {
		tap_result(false, "%s: CPU reference returned %d", desc, ret);
		return;
	}
	for (uint32_t s = 0; s < nseq; s++) {
		int32_t r = qptr[s];

		while (r < qptr[s + 1]) {
			int32_t n = std::min<int32_t>(qptr[s + 1] - r,
						      rnd(3) == 0 ? 1 + (int32_t)rnd(16) : 16);
			int32_t last = c.lens[s] - (qptr[s + 1] - (r + n - 1));
			int32_t first = c.lens[s] - (qptr[s + 1] - r);

			for (uint32_t g = 0; g < c.nkv; g++)
				for (auto sl : head_slices(c.group)) {
					kvrt_gk_work it = work_for(s, g, c.group, sl);

					it.q_row0 = r;
					it.q_row_end = r + n;
					it.tok_begin = c.window >= 0 && rnd(2) ?
						       std::max(0, first - c.window) : 0;
					it.tok_end = last + 1;
					it.partial = -1;
					work.push_back(it);
				}
			r += n;
		}
	}
	std::shuffle(work.begin(), work.end(), rng);

	kvrt_gk_plan_hdr hdr = { (uint32_t)work.size(), 0 };
	kvrt_gk_attn_args a = attn_args(w, c, q.data(), out.data());

	a.q_indptr = (uint64_t)qptr.data();
	a.work = (uint64_t)work.data();
	a.hdr = (uint64_t)&hdr;
	attn_fn fn = (tc ? prefill_tc_fns : prefill_fns)[hd_index(hd)][c.kv - 1];
	unsigned grid = 1 + (unsigned)rnd(std::min<size_t>(work.size(), 4));

	kvrt_emu::launch([&] { fn(a); }, grid, KVRT_GK_PREFILL_THREADS, seed_for_emu());

	size_t where = 0;
	double err = compare(out, c.o, ref, w.vmax, &where);
	double tol = tc ? tolerance_tc(c, *std::max_element(c.lens.begin(), c.lens.end())) :
			  tolerance(c.o);

	tap_result(err <= tol, "%s q_lens=%d..: err %.3g (tol %.3g) at row %zu head %zu", desc,
	      qptr[1], err, tol, where / hd / nq, where / hd % nq);
}

/* ---- append ------------------------------------------------------------------ */

static void test_append(enum kvrt_dtype kvdt, enum kvrt_dtype src, int kind)
{
	static const uint32_t bts[] = { 1, 3, 16, 32 };
	static const uint32_t hds[] = { 64, 128, 256, 80 };
	uint32_t bt = bts[rnd(4)], hd = hds[rnd(4)], heads = 1 + (uint32_t)rnd(3);
	uint32_t nblocks = 6 + (uint32_t)rnd(6);
	kvrt_layout lo;
	char desc[256];

	if (kind == LAYOUT_ODD && hd == 80)
		hd = 64;
	fill_layout(&lo, kind, 2, heads, hd, bt, nblocks, kvdt);
	snprintf(desc, sizeof(desc), "append kv=%s src=%s %s bt=%u hd=%u heads=%u", dtname(kvdt),
		 dtname(src), layout_name[kind], bt, hd, heads);

	/* the same random start for both: bytes (no NaN fp8) and scales */
	std::vector<uint8_t> cache(layout_bytes(&lo));
	std::vector<float> scales(scales_count(&lo));

	for (auto &b : cache) {
		b = (uint8_t)rnd(256);
		if (kvdt == KVRT_DTYPE_FP8_E4M3 && (b & 0x7f) == 0x7f)
			b = 0x11;
		if (kvdt != KVRT_DTYPE_FP8_E4M3 && (b & 0x7f) >= 0x7c)
			b = 0x3c;	/* keep f16/bf16 finite: the high byte's exponent */
	}
	for (auto &s : scales)
		s = (float)urand(0.001, 0.02);

	/* tokens: runs of consecutive offsets per block, padding in between */
	std::vector<int64_t> slots;
	std::vector<uint32_t> order(nblocks);

	for (uint32_t i = 0; i < nblocks; i++)
		order[i] = i;
	std::shuffle(order.begin(), order.end(), rng);
	for (uint32_t i = 0; i < nblocks; i++) {
		uint32_t b = order[i], t0 = rnd(3) == 0 ? (uint32_t)rnd(bt) : 0;
		uint32_t n = 1 + (uint32_t)rnd(bt - t0);

		for (uint32_t t = t0; t < t0 + n; t++)
			slots.push_back((int64_t)b * bt + t);
		if (rnd(3) == 0)
			slots.push_back(-1 - (int64_t)rnd(5));
		if (rnd(4) == 0)
			slots.push_back((int64_t)nblocks * bt + (int64_t)rnd(100));
	}
	uint32_t ntok = (uint32_t)slots.size();
	std::vector<uint8_t> k((size_t)ntok * heads * hd * esize(src));
	std::vector<uint8_t> v(k.size());

	for (uint32_t i = 0; i < ntok; i++) {
		/* growing magnitudes make later tokens raise the fp8 scale */
		double amp = rnd(3) == 0 ? urand(0.01, 5) * (1 + i % 5) : urand(0.5, 2);

		for (uint32_t e = 0; e < heads * hd; e++) {
			size_t at = ((size_t)i * heads * hd + e) * esize(src);

			put_elem(src, &k[at], rnd(50) == 0 ? 0.0 : urand(-amp, amp));
			put_elem(src, &v[at], urand(-amp, amp) * (rnd(7) == 0 ? 0 : 1));
		}
		if (rnd(10) == 0)	/* an all-zero head row: scale 0 */
			memset(&k[(size_t)i * heads * hd * esize(src)], 0, hd * esize(src));
	}

	/* CPU: kvrt_append_kv rejects out-of-range slots, which the GPU skips */
	std::vector<uint8_t> cpu_cache = cache;
	std::vector<float> cpu_scales = scales;
	std::vector<int64_t> cpu_slots = slots;

	for (auto &s : cpu_slots)
		if (s >= (int64_t)nblocks * bt)
			s = -1;
	kvrt_kv_cache kc = { &lo, cpu_cache.data(),
			     kvdt == KVRT_DTYPE_FP8_E4M3 ? cpu_scales.data() : NULL, 1 };
	int ret = kvrt_append_kv(&kc, k.data(), v.data(), src, cpu_slots.data(), ntok);

	if (ret) {
		tap_result(false, "%s: kvrt_append_kv returned %d", desc, ret);
		return;
	}

	kvrt_gk_append_args a;
	uint8_t *base = cache.data() + lo.layer_stride;

	memset(&a, 0, sizeof(a));
	a.k_src = (uint64_t)k.data();
	a.v_src = (uint64_t)v.data();
	a.slots = (uint64_t)slots.data();
	a.k = (uint64_t)base;
	a.v = (uint64_t)(base + lo.kv_stride);
	if (kvdt == KVRT_DTYPE_FP8_E4M3) {
		a.k_scales = (uint64_t)(scales.data() + lo.scale_layer_stride);
		a.v_scales = (uint64_t)(scales.data() + lo.scale_layer_stride + lo.scale_kv_stride);
	}
	a.block_stride = lo.block_stride;
	a.token_stride = lo.token_stride;
	a.head_stride = lo.head_stride;
	a.scale_block_stride = lo.scale_block_stride;
	a.num_slots = (int64_t)nblocks * bt;
	a.num_tokens = ntok;
	a.num_kv_heads = heads;
	a.head_dim = hd;
	a.block_tokens = bt;
	a.src_dtype = src;
	void (*fn)(const kvrt_gk_append_args) = kvdt == KVRT_DTYPE_F16 ? kvrt_append_f16 :
						kvdt == KVRT_DTYPE_BF16 ? kvrt_append_bf16 :
						kvrt_append_fp8;

	kvrt_emu::launch([&] { fn(a); }, 1 + (unsigned)rnd(3), KVRT_GK_APPEND_THREADS, seed_for_emu());

	size_t diff = 0, first = 0, sdiff = 0;

	for (size_t i = 0; i < cache.size(); i++)
		if (cache[i] != cpu_cache[i] && !diff++)
			first = i;
	for (size_t i = 0; i < scales.size(); i++)
		sdiff += memcmp(&scales[i], &cpu_scales[i], 4) != 0;
	tap_result(!diff && !sdiff, "%s tokens=%u: %zu bytes differ (first at %zu), %zu scales differ", desc,
	      ntok, diff, first, sdiff);
}

/* ---- copy ------------------------------------------------------------------- */

static void test_copy()
{
	unsigned bad = 0, n = 0;

	for (int round = 0; round < 6; round++) {
		size_t size = 1 << 16;
		std::vector<uint8_t> src(size), dst(size, 0), want(size, 0);
		std::vector<kvrt_gk_copy_run> runs;
		size_t at = 0;

		for (auto &b : src)
			b = (uint8_t)rng();
		while (at < size - 9000) {
			uint64_t bytes = rnd(8) == 0 ? rnd(8000) : rnd(100);
			size_t soff = rnd(size - bytes);

			at += rnd(40);
			kvrt_gk_copy_run r = { (uint64_t)(src.data() + soff), (uint64_t)(dst.data() + at),
					       bytes };

			if (rnd(2)) {	/* same alignment mod 16: the vector path */
				r.src = (uint64_t)(src.data() + (soff & ~(size_t)15) + (at & 15));
				if ((r.src - (uint64_t)src.data()) + bytes > size)
					r.src -= 16;
			}
			memcpy(&want[at], (const void *)r.src, bytes);
			runs.push_back(r);
			at += bytes;
		}
		kvrt_gk_copy_args a = { (uint64_t)runs.data(), (uint32_t)runs.size(), 0 };

		kvrt_emu::launch([&] { kvrt_copy_runs(a); }, 1 + (unsigned)rnd(5), KVRT_GK_COPY_THREADS,
				 seed_for_emu());
		bad += dst != want;
		n += (unsigned)runs.size();
	}
	tap_result(!bad, "copy_runs: %u runs of random sizes and alignments", n);
}

/* ---- read stream ------------------------------------------------------------- */

static void test_read_stream()
{
	const uint64_t tile = KVRT_GK_READ_THREADS * 8;	/* vectors per CTA pass */
	const uint64_t sizes[] = { 1, 7, tile - 1, tile, tile + 1, 3 * tile + 77, 9 * tile };
	unsigned bad = 0;

	for (uint64_t units : sizes) {
		std::vector<uint32_t> src(units * 4);
		unsigned grid = 1 + (unsigned)rnd(5);
		std::vector<uint64_t> sums(grid, 0xdeadbeefcafef00dULL);	/* each CTA must write */
		uint64_t want = 0, got = 0;

		for (auto &w : src) {
			w = (uint32_t)rng() | 1;	/* no word is 0: a skipped one shows */
			want += w;
		}
		kvrt_gk_read_args a = { (uint64_t)src.data(), units, (uint64_t)sums.data() };

		kvrt_emu::launch([&] { kvrt_read_stream(a); }, grid, KVRT_GK_READ_THREADS,
				 seed_for_emu());
		for (uint64_t s : sums)
			got += s;
		if (got != want) {
			bad++;
			tap_diag("read_stream: %llu vectors, grid %u: sum %llx, CPU %llx",
				 (unsigned long long)units, grid, (unsigned long long)got,
				 (unsigned long long)want);
		}
	}
	tap_result(!bad, "read_stream: CTA sums equal the CPU's sum of every word, %zu sizes",
		   sizeof(sizes) / sizeof(sizes[0]));
}

int main()
{
	const char *env = getenv("KVRT_TEST_SEED");
	unsigned long seed = env ? strtoul(env, NULL, 0) : 12345;
	int cases = getenv("KVRT_TEST_CASES") ? atoi(getenv("KVRT_TEST_CASES")) : 40;

	long_seqs = getenv("KVRT_TEST_LONG") ? atoi(getenv("KVRT_TEST_LONG")) : 0;
	rng.seed(seed);
	printf("# test_kernels: seed %lu (KVRT_TEST_SEED), %d cases (KVRT_TEST_CASES)\n", seed, cases);
	test_conversions();
	test_copy();
	test_read_stream();
	for (int kind = 0; kind < NR_LAYOUTS; kind++)
		for (int kv = 1; kv <= 3; kv++)
			for (int src = 0; src <= 2; src++)
				test_append((enum kvrt_dtype)kv, (enum kvrt_dtype)src, kind);
	for (int i = 0; i < cases; i++)
		test_decode(random_case(false));
	for (int i = 0; i < cases; i++)
		test_prefill(random_case(true), false);
	test_mma();
	/* every head dim and K/V dtype, causal and windowed, then random cases */
	for (uint32_t hd : { 64u, 128u, 256u })
		for (enum kvrt_dtype kv : { KVRT_DTYPE_F16, KVRT_DTYPE_BF16, KVRT_DTYPE_FP8_E4M3 })
			for (int win = 0; win < 2; win++) {
				AttnCase c = random_case(true);

				c.hd = hd;
				c.kv = kv;
				c.window = win ? 1 + (int32_t)rnd(60) : -1;
				test_prefill(c, true);
			}
	for (int i = 0; i < cases / 2; i++)
		test_prefill(random_case(true), true);
	return tap_done("test_kernels");
}
