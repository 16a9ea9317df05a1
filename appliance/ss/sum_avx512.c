/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * AVX-512 (F, BW, VL, DQ) kernels, compiled in their own object and reached
 * only through sum_ops_best() on a CPU that has them. Tails use masked loads
 * and stores, so no scalar loop runs at all.
 * bf16 is narrowed with integer arithmetic, not VCVTNEPS2BF16: that
 * instruction flushes subnormals, and every variant must agree to the bit.
 */
#include "sum.h"
#include "sum_conv.h"

#include <immintrin.h>
#include <stdbool.h>

#define P32(p, i) sum__at((p), 4 * (i))
#define C32(p, i) sum__cat((p), 4 * (i))
#define P16(p, i) sum__at((p), 2 * (i))
#define C16(p, i) sum__cat((p), 2 * (i))

static inline __mmask16 tail_mask(size_t left)
{
	return (__mmask16)((1u << left) - 1u);
}

static inline __m512 widen(__m256i h, bool bf16)
{
	if (bf16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
	return _mm512_cvtph_ps(h);
}

static inline __m256i narrow(__m512 v, bool bf16)
{
	if (!bf16)
		return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);

	const __m512i x = _mm512_castps_si512(v);
	const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
	const __m512i rnd = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
	const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
	const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
	const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));

	return _mm512_cvtepi32_epi16(
		_mm512_mask_blend_epi32(nan, _mm512_srli_epi32(rnd, 16), quiet));
}

static void add_f32(void *restrict acc, const void *restrict x, size_t n)
{
	size_t i = 0;

	for (; i + 64 <= n; i += 64) {
		__m512 a0 = _mm512_add_ps(_mm512_loadu_ps(P32(acc, i)), _mm512_loadu_ps(C32(x, i)));
		__m512 a1 = _mm512_add_ps(_mm512_loadu_ps(P32(acc, i + 16)),
					  _mm512_loadu_ps(C32(x, i + 16)));
		__m512 a2 = _mm512_add_ps(_mm512_loadu_ps(P32(acc, i + 32)),
					  _mm512_loadu_ps(C32(x, i + 32)));
		__m512 a3 = _mm512_add_ps(_mm512_loadu_ps(P32(acc, i + 48)),
					  _mm512_loadu_ps(C32(x, i + 48)));
		_mm512_storeu_ps(P32(acc, i), a0);
		_mm512_storeu_ps(P32(acc, i + 16), a1);
		_mm512_storeu_ps(P32(acc, i + 32), a2);
		_mm512_storeu_ps(P32(acc, i + 48), a3);
	}
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(P32(acc, i), _mm512_add_ps(_mm512_loadu_ps(P32(acc, i)),
							    _mm512_loadu_ps(C32(x, i))));
	if (i < n) {
		__mmask16 m = tail_mask(n - i);
		__m512 a = _mm512_maskz_loadu_ps(m, P32(acc, i));

		_mm512_mask_storeu_ps(P32(acc, i), m,
				      _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, C32(x, i))));
	}
}

/* The four widening kernels; @bf16 and @add are constants at every call. */
static inline __attribute__((always_inline)) void
widen_loop(void *restrict acc, const void *restrict x, size_t n, bool bf16, bool add)
{
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512 w0 = widen(_mm256_loadu_si256(C16(x, i)), bf16);
		__m512 w1 = widen(_mm256_loadu_si256(C16(x, i + 16)), bf16);

		if (add) {
			w0 = _mm512_add_ps(_mm512_loadu_ps(P32(acc, i)), w0);
			w1 = _mm512_add_ps(_mm512_loadu_ps(P32(acc, i + 16)), w1);
		}
		_mm512_storeu_ps(P32(acc, i), w0);
		_mm512_storeu_ps(P32(acc, i + 16), w1);
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
		__m512 w = widen(_mm256_maskz_loadu_epi16(m, C16(x, i)), bf16);

		if (add)
			w = _mm512_add_ps(_mm512_maskz_loadu_ps(m, P32(acc, i)), w);
		_mm512_mask_storeu_ps(P32(acc, i), m, w);
	}
}

static inline __attribute__((always_inline)) void
narrow_loop(void *restrict out, const void *restrict acc, size_t n, bool bf16)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm256_storeu_si256(P16(out, i), narrow(_mm512_loadu_ps(C32(acc, i)), bf16));
	if (i < n) {
		__mmask16 m = tail_mask(n - i);

		_mm256_mask_storeu_epi16(P16(out, i), m,
					 narrow(_mm512_maskz_loadu_ps(m, C32(acc, i)), bf16));
	}
}

static void add_f16(void *restrict acc, const void *restrict x, size_t n)
{
	widen_loop(acc, x, n, false, true);
}

static void add_bf16(void *restrict acc, const void *restrict x, size_t n)
{
	widen_loop(acc, x, n, true, true);
}

static void load_f16(void *restrict acc, const void *restrict x, size_t n)
{
	widen_loop(acc, x, n, false, false);
}

static void load_bf16(void *restrict acc, const void *restrict x, size_t n)
{
	widen_loop(acc, x, n, true, false);
}

static void copy_f32(void *restrict dst, const void *restrict src, size_t n)
{
	memcpy(dst, src, n * 4);
}

static void store_f16(void *restrict out, const void *restrict acc, size_t n)
{
	narrow_loop(out, acc, n, false);
}

static void store_bf16(void *restrict out, const void *restrict acc, size_t n)
{
	narrow_loop(out, acc, n, true);
}

const struct sum_ops sum_ops_avx512 = {
	.name = "avx512",
	.isa = SUM_ISA_AVX512,
	.add = {add_f32, add_f16, add_bf16},
	.load = {copy_f32, load_f16, load_bf16},
	.store = {copy_f32, store_f16, store_bf16},
};
