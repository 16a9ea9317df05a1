/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SIGN's kernels in AVX2 (comp.h): 16 lanes as two vectors, so the L1 is
 * the scalar reference's to the bit. Compiled with -mavx2 in its own object
 * and reached only through comp_ops_best() on a CPU that has it.
 */
#include "comp.h"
#include "comp_simd.h"

#include <immintrin.h>

static float sign_l1(const float *g, float *resid, size_t n)
{
	const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	float s[16];
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 p0 = _mm256_loadu_ps(resid + i), p1 = _mm256_loadu_ps(resid + i + 8);

		if (g) {
			p0 = _mm256_add_ps(p0, _mm256_loadu_ps(g + i));
			p1 = _mm256_add_ps(p1, _mm256_loadu_ps(g + i + 8));
			_mm256_storeu_ps(resid + i, p0);
			_mm256_storeu_ps(resid + i + 8, p1);
		}
		a0 = _mm256_add_ps(a0, _mm256_and_ps(p0, abs));
		a1 = _mm256_add_ps(a1, _mm256_and_ps(p1, abs));
	}
	_mm256_storeu_ps(s, a0);
	_mm256_storeu_ps(s + 8, a1);
	return comp__sign_l1_tail(g, resid, i, n, s);
}

static void sign_pack(float *resid, size_t n, float scale, uint8_t *bits)
{
	const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
	const __m256 s = _mm256_set1_ps(scale);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 p = _mm256_loadu_ps(resid + i);

		bits[i / 8] = (uint8_t)_mm256_movemask_ps(p);
		_mm256_storeu_ps(resid + i,
				 _mm256_sub_ps(p, _mm256_xor_ps(s, _mm256_and_ps(p, sign))));
	}
	comp__sign_pack_tail(resid, i, n, scale, bits);
}

static void sign_add(float *acc, const uint8_t *bits, size_t n, float scale)
{
	const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
	const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
	const __m256 s = _mm256_set1_ps(scale);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256i b = _mm256_and_si256(_mm256_set1_epi32(bits[i / 8]), lane);
		__m256i neg = _mm256_and_si256(_mm256_cmpeq_epi32(b, lane), sign);
		__m256 d = _mm256_xor_ps(s, _mm256_castsi256_ps(neg));

		_mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), d));
	}
	comp__sign_add_tail(acc, bits, i, n, scale);
}

const struct comp_ops comp_ops_avx2 = {sign_l1, sign_pack, sign_add};
