/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NH with AVX2: 32 bytes a step, both key offsets from one load of the
 * payload, two steps per iteration into separate sums. Compiled for AVX2 by
 * target attributes (the rest of the build is baseline x86-64), reached
 * only through nic_nh_best() or nic_nh_named() on a CPU that has it.
 */
#include "nic_nh.h"

#include <immintrin.h>

static inline __attribute__((target("avx2"))) __m256i nh_step(__m256i m, const uint32_t *k)
{
	__m256i x = _mm256_add_epi32(m, _mm256_loadu_si256((const __m256i *)k));

	return _mm256_mul_epu32(x, _mm256_srli_epi64(x, 32));
}

static inline __attribute__((target("avx2"))) uint64_t hsum(__m256i v)
{
	__m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
}

__attribute__((target("avx2"))) void nic_nh_avx2(const uint8_t *p, size_t len, const uint32_t *k,
						 uint64_t *out)
{
	for (size_t blk = 0; blk * NIC_NH_BLOCK < len; blk++, out += 2) {
		size_t n = nic_nh__block_len(len, blk), i = 0;
		const uint8_t *b = p + blk * NIC_NH_BLOCK;
		__m256i a0 = _mm256_setzero_si256(), a1 = a0, c0 = a0, c1 = a0;

		for (; i + 64 <= n; i += 64) {
			__m256i m0 = _mm256_loadu_si256((const __m256i *)(b + i));
			__m256i m1 = _mm256_loadu_si256((const __m256i *)(b + i + 32));

			a0 = _mm256_add_epi64(a0, nh_step(m0, k + i / 4));
			c0 = _mm256_add_epi64(c0, nh_step(m0, k + i / 4 + 2));
			a1 = _mm256_add_epi64(a1, nh_step(m1, k + i / 4 + 8));
			c1 = _mm256_add_epi64(c1, nh_step(m1, k + i / 4 + 10));
		}
		for (; i + 32 <= n; i += 32) {
			__m256i m0 = _mm256_loadu_si256((const __m256i *)(b + i));

			a0 = _mm256_add_epi64(a0, nh_step(m0, k + i / 4));
			c0 = _mm256_add_epi64(c0, nh_step(m0, k + i / 4 + 2));
		}
		out[0] = hsum(_mm256_add_epi64(a0, a1));
		out[1] = hsum(_mm256_add_epi64(c0, c1));
		nic_nh__tail(b, i, n, k, out);
	}
}
