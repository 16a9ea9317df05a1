/* SPDX-License-Identifier: BSD-3-Clause */
#include "perf_sum_ref.h"

#include <immintrin.h>

void perf_ref_avx2(void *a, const void *s, size_t a_bytes, int half)
{
	char *pa = a;
	const char *ps = s;
	size_t i;

	if (half) {
		for (i = 0; i < a_bytes; i += 64) {
			const __m128i *q = (const __m128i *)(ps + i / 2);
			__m256i x0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(q));
			__m256i x1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(q + 1));
			__m256i *d = (__m256i *)(pa + i);

			_mm256_storeu_si256(d, _mm256_xor_si256(_mm256_loadu_si256(d), x0));
			_mm256_storeu_si256(d + 1, _mm256_xor_si256(_mm256_loadu_si256(d + 1), x1));
		}
		return;
	}
	for (i = 0; i < a_bytes; i += 64) {
		const __m256i *q = (const __m256i *)(ps + i);
		__m256i *d = (__m256i *)(pa + i);

		_mm256_storeu_si256(d,
				    _mm256_xor_si256(_mm256_loadu_si256(d), _mm256_loadu_si256(q)));
		_mm256_storeu_si256(d + 1, _mm256_xor_si256(_mm256_loadu_si256(d + 1),
							    _mm256_loadu_si256(q + 1)));
	}
}
