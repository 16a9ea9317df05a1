/* SPDX-License-Identifier: BSD-3-Clause */
/* Run-time choice of the summation kernels (control path, once). */
#include "sum.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_names[SUM_DTYPE_COUNT] = {"fp32", "fp16", "bf16"};
static const char *const isa_names[SUM_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *sum_dtype_name(enum sum_dtype t)
{
	return (unsigned)t < SUM_DTYPE_COUNT ? dtype_names[t] : "?";
}

const char *sum_isa_name(enum sum_isa isa)
{
	return (unsigned)isa < SUM_ISA_COUNT ? isa_names[isa] : "?";
}

/* __builtin_cpu_supports checks XCR0 too: a CPU with AVX-512 under an OS
 * that does not save its state reports no AVX-512. */
bool sum_isa_supported(enum sum_isa isa)
{
	__builtin_cpu_init();
	switch (isa) {
	case SUM_ISA_SCALAR:
		return true;
	case SUM_ISA_AVX2:
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       __builtin_cpu_supports("f16c");
	case SUM_ISA_AVX512:
		return sum_isa_supported(SUM_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		       __builtin_cpu_supports("avx512dq");
	case SUM_ISA_COUNT:
		break;
	}
	return false;
}

const struct sum_ops *sum_ops_isa(enum sum_isa isa)
{
	static const struct sum_ops *const table[SUM_ISA_COUNT] = {&sum_ops_scalar, &sum_ops_avx2,
								   &sum_ops_avx512};

	if ((unsigned)isa >= SUM_ISA_COUNT || !sum_isa_supported(isa))
		return NULL;
	return table[isa];
}

int sum_isa_choose(const char *cap, enum sum_isa *out)
{
	enum sum_isa best = SUM_ISA_AVX512, limit = SUM_ISA_AVX512;
	int rc = 0;

	if (cap && *cap) {
		unsigned i;

		for (i = 0; i < SUM_ISA_COUNT; i++)
			if (strcmp(cap, isa_names[i]) == 0)
				break;
		if (i == SUM_ISA_COUNT)
			rc = -EINVAL;
		else
			limit = (enum sum_isa)i;
	}
	best = limit;
	while (best > SUM_ISA_SCALAR && !sum_isa_supported(best))
		best--;
	*out = best;
	return rc;
}

static const struct sum_ops *chosen;

static void choose_once(void)
{
	const char *cap = getenv("PBOX_SIMD");
	enum sum_isa isa;

	if (sum_isa_choose(cap, &isa) < 0)
		fprintf(stderr, "pbox: PBOX_SIMD=%s is not one of scalar, avx2, avx512; ignored\n",
			cap);
	chosen = sum_ops_isa(isa);
}

const struct sum_ops *sum_ops_best(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, choose_once);
	return chosen;
}
