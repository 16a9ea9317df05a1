/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NH with AVX-512F: 64 bytes a step, both key offsets from one load of the
 * payload, two steps per iteration into separate sums. Compiled for
 * AVX-512F by target attributes (the rest of the build is baseline
 * x86-64), reached only through nic_nh_best() or nic_nh_named() on a CPU
 * that has it.
 */
#include "nic_nh.h"

#include <immintrin.h>

static inline __attribute__((target("avx512f"))) __m512i nh_step(__m512i m, const uint32_t *k)
{
	__m512i x = _mm512_add_epi32(m, _mm512_loadu_si512(k));

	return _mm512_mul_epu32(x, _mm512_srli_epi64(x, 32));
}

/* The lanes' sum modulo 2^64 (_mm512_reduce_add_epi64 adds them as signed
 * integers, whose overflow C leaves undefined). */
static inline __attribute__((target("avx512f"))) uint64_t hsum(__m512i v)
{
	uint64_t l[8], s = 0;

	_mm512_storeu_si512(l, v);
	for (int i = 0; i < 8; i++)
		s += l[i];
	return s;
}

__attribute__((target("avx512f"))) void nic_nh_avx512(const uint8_t *p, size_t len,
						      const uint32_t *k, uint64_t *out)
{
	for (size_t blk = 0; blk * NIC_NH_BLOCK < len; blk++, out += 2) {
		size_t n = nic_nh__block_len(len, blk), i = 0;
		const uint8_t *b = p + blk * NIC_NH_BLOCK;
		__m512i a0 = _mm512_setzero_si512(), a1 = a0, c0 = a0, c1 = a0;

		for (; i + 128 <= n; i += 128) {
			__m512i m0 = _mm512_loadu_si512(b + i), m1 = _mm512_loadu_si512(b + i + 64);

			a0 = _mm512_add_epi64(a0, nh_step(m0, k + i / 4));
			c0 = _mm512_add_epi64(c0, nh_step(m0, k + i / 4 + 2));
			a1 = _mm512_add_epi64(a1, nh_step(m1, k + i / 4 + 16));
			c1 = _mm512_add_epi64(c1, nh_step(m1, k + i / 4 + 18));
		}
		for (; i + 64 <= n; i += 64) {
			__m512i m0 = _mm512_loadu_si512(b + i);

			a0 = _mm512_add_epi64(a0, nh_step(m0, k + i / 4));
			c0 = _mm512_add_epi64(c0, nh_step(m0, k + i / 4 + 2));
		}
		out[0] = hsum(_mm512_add_epi64(a0, a1));
		out[1] = hsum(_mm512_add_epi64(c0, c1));
		nic_nh__tail(b, i, n, k, out);
	}
}
