/* SPDX-License-Identifier: BSD-3-Clause */
#include "perf_sum_ref.h"

#include <stdint.h>
#include <string.h>

void perf_ref_scalar(void *a, const void *s, size_t a_bytes, int half)
{
	uint64_t *pa = a;
	const uint32_t *ps = s;
	const uint64_t *pf = s;
	size_t i, n = a_bytes / 8;

	if (half)
		for (i = 0; i < n; i++)
			pa[i] ^= ps[i];
	else
		for (i = 0; i < n; i++)
			pa[i] ^= pf[i];
}

perf_ref_fn perf_ref_for(enum sum_isa isa)
{
	switch (isa) {
	case SUM_ISA_AVX512:
		return perf_ref_avx512;
	case SUM_ISA_AVX2:
		return perf_ref_avx2;
	case SUM_ISA_SCALAR:
	case SUM_ISA_COUNT:
		break;
	}
	return perf_ref_scalar;
}
