/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * AVX2 + F16C kernels. Compiled with -mavx2 -mfma -mf16c in their own object
 * and reached only through sum_ops_best() on a CPU that has them.
 * Four vectors per iteration keep two loads and a store in flight per cycle;
 * at DRAM sizes every kernel runs at the memory bandwidth (perf/sum).
 */
#include "sum.h"
#include "sum_conv.h"

#include <immintrin.h>
#include <stdbool.h>

#define LD(p, i)     _mm256_loadu_ps(sum__cat((p), 4 * (i)))
#define ST(p, i, v)  _mm256_storeu_ps(sum__at((p), 4 * (i)), (v))
#define LDH(p, i)    _mm_loadu_si128(sum__cat((p), 2 * (i)))
#define STH(p, i, v) _mm_storeu_si128(sum__at((p), 2 * (i)), (v))

static inline __m256 widen_f16(__m128i h)
{
	return _mm256_cvtph_ps(h);
}

static inline __m256 widen_bf16(__m128i h)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* fp32 -> bf16, nearest even; NaNs stay quiet NaNs. */
static inline __m128i narrow_bf16(__m256 v)
{
	const __m256i x = _mm256_castps_si256(v);
	const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
	const __m256i rnd = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
	const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
	const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
	const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
	const __m256i r = _mm256_blendv_epi8(_mm256_srli_epi32(rnd, 16), quiet, nan);
	/* pack within 128-bit lanes, then gather the two halves */
	const __m256i p = _mm256_packus_epi32(r, r);

	return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

static void add_f32(void *restrict acc, const void *restrict x, size_t n)
{
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256 a0 = _mm256_add_ps(LD(acc, i), LD(x, i));
		__m256 a1 = _mm256_add_ps(LD(acc, i + 8), LD(x, i + 8));
		__m256 a2 = _mm256_add_ps(LD(acc, i + 16), LD(x, i + 16));
		__m256 a3 = _mm256_add_ps(LD(acc, i + 24), LD(x, i + 24));
		ST(acc, i, a0);
		ST(acc, i + 8, a1);
		ST(acc, i + 16, a2);
		ST(acc, i + 24, a3);
	}
	for (; i + 8 <= n; i += 8)
		ST(acc, i, _mm256_add_ps(LD(acc, i), LD(x, i)));
	sum__add_f32_tail(acc, x, i, n);
}

/*
 * One body for the four widening kernels; @bf16 and @add are constants at
 * every call, so each kernel compiles to its own straight loop. Returns how
 * many elements it did (a multiple of 8).
 */
static inline __attribute__((always_inline)) size_t
widen_loop(void *restrict acc, const void *restrict x, size_t n, bool bf16, bool add)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 w0 = bf16 ? widen_bf16(LDH(x, i)) : widen_f16(LDH(x, i));
		__m256 w1 = bf16 ? widen_bf16(LDH(x, i + 8)) : widen_f16(LDH(x, i + 8));

		if (add) {
			w0 = _mm256_add_ps(LD(acc, i), w0);
			w1 = _mm256_add_ps(LD(acc, i + 8), w1);
		}
		ST(acc, i, w0);
		ST(acc, i + 8, w1);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 w = bf16 ? widen_bf16(LDH(x, i)) : widen_f16(LDH(x, i));

		ST(acc, i, add ? _mm256_add_ps(LD(acc, i), w) : w);
	}
	return i;
}

static void add_f16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__add_f16_tail(acc, x, widen_loop(acc, x, n, false, true), n);
}

static void add_bf16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__add_bf16_tail(acc, x, widen_loop(acc, x, n, true, true), n);
}

static void load_f16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__load_f16_tail(acc, x, widen_loop(acc, x, n, false, false), n);
}

static void load_bf16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__load_bf16_tail(acc, x, widen_loop(acc, x, n, true, false), n);
}

static void copy_f32(void *restrict dst, const void *restrict src, size_t n)
{
	memcpy(dst, src, n * 4);
}

static void store_f16(void *restrict out, const void *restrict acc, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		STH(out, i, _mm256_cvtps_ph(LD(acc, i), _MM_FROUND_TO_NEAREST_INT));
	sum__store_f16_tail(out, acc, i, n);
}

static void store_bf16(void *restrict out, const void *restrict acc, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		STH(out, i, narrow_bf16(LD(acc, i)));
	sum__store_bf16_tail(out, acc, i, n);
}

const struct sum_ops sum_ops_avx2 = {
	.name = "avx2",
	.isa = SUM_ISA_AVX2,
	.add = {add_f32, add_f16, add_bf16},
	.load = {copy_f32, load_f16, load_bf16},
	.store = {copy_f32, store_f16, store_bf16},
};
