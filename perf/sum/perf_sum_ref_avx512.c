/* SPDX-License-Identifier: BSD-3-Clause */
#include "perf_sum_ref.h"

#include <immintrin.h>

void perf_ref_avx512(void *a, const void *s, size_t a_bytes, int half)
{
	char *pa = a;
	const char *ps = s;
	size_t i;

	if (half) {
		for (i = 0; i < a_bytes; i += 64) {
			__m512i x = _mm512_broadcast_i64x4(
				_mm256_loadu_si256((const __m256i *)(ps + i / 2)));

			_mm512_storeu_si512(pa + i,
					    _mm512_xor_si512(_mm512_loadu_si512(pa + i), x));
		}
		return;
	}
	for (i = 0; i < a_bytes; i += 64)
		_mm512_storeu_si512(pa + i, _mm512_xor_si512(_mm512_loadu_si512(pa + i),
							     _mm512_loadu_si512(ps + i)));
}
