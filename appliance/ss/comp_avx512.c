/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SIGN's kernels in AVX-512 (comp.h): the 16 lanes are one vector, so the
 * L1 is the scalar reference's to the bit. Compiled with -mavx512f and the
 * rest in its own object, reached only through comp_ops_best().
 */
#include "comp.h"
#include "comp_simd.h"

#include <immintrin.h>
#include <string.h>

static float sign_l1(const float *g, float *resid, size_t n)
{
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	__m512 a = _mm512_setzero_ps();
	float s[16];
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512 p = _mm512_loadu_ps(resid + i);

		if (g) {
			p = _mm512_add_ps(p, _mm512_loadu_ps(g + i));
			_mm512_storeu_ps(resid + i, p);
		}
		a = _mm512_add_ps(
			a, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(p), abs)));
	}
	_mm512_storeu_ps(s, a);
	return comp__sign_l1_tail(g, resid, i, n, s);
}

static void sign_pack(float *resid, size_t n, float scale, uint8_t *bits)
{
	const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
	const __m512i s = _mm512_castps_si512(_mm512_set1_ps(scale));
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512i p = _mm512_castps_si512(_mm512_loadu_ps(resid + i));
		__mmask16 m = _mm512_movepi32_mask(p);
		__m512 d = _mm512_castsi512_ps(_mm512_xor_si512(s, _mm512_and_si512(p, sign)));

		memcpy(bits + i / 8, &m, 2);
		_mm512_storeu_ps(resid + i, _mm512_sub_ps(_mm512_castsi512_ps(p), d));
	}
	comp__sign_pack_tail(resid, i, n, scale, bits);
}

static void sign_add(float *acc, const uint8_t *bits, size_t n, float scale)
{
	const __m512i s = _mm512_castps_si512(_mm512_set1_ps(scale));
	const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__mmask16 m;
		__m512 d;

		memcpy(&m, bits + i / 8, 2);
		d = _mm512_castsi512_ps(_mm512_mask_xor_epi32(s, m, s, sign));
		_mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), d));
	}
	comp__sign_add_tail(acc, bits, i, n, scale);
}

const struct comp_ops comp_ops_avx512 = {sign_l1, sign_pack, sign_add};
