/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Summation kernels: the only arithmetic of a summation service.
 *
 * Accumulators are always fp32. A round of a fragment is
 *     load[dtype](acc, first contribution)      copy or widen
 *     add[dtype](acc, each further contribution) in place, acc += x
 *     store[dtype](out, acc)                    narrow once, nearest-even
 * so fp16/bf16 sums are rounded once, at completion, however many workers.
 *
 * Buffers may have any alignment (packet payloads usually are 64-byte
 * aligned, but nothing breaks when they are not); @dst and @src must not
 * overlap. @n counts elements.
 *
 * Variants: scalar (any x86-64), AVX2 (+F16C, FMA), AVX-512 (F, BW, VL, DQ).
 * The best one the CPU has is chosen once, at the first call of
 * sum_ops_best(); PBOX_SIMD=scalar|avx2|avx512 caps the choice (for tests and
 * for comparing), the way DPDK's --force-max-simd-bitwidth does.
 */
#ifndef PBOX_SUM_H
#define PBOX_SUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sum_dtype { SUM_FP32, SUM_FP16, SUM_BF16, SUM_DTYPE_COUNT };
enum sum_isa { SUM_ISA_SCALAR, SUM_ISA_AVX2, SUM_ISA_AVX512, SUM_ISA_COUNT };

typedef void (*sum_fn)(void *restrict dst, const void *restrict src, size_t n);

struct sum_ops {
	const char *name;
	enum sum_isa isa;
	sum_fn add[SUM_DTYPE_COUNT];   /* fp32 acc[i] += (float)x[i] */
	sum_fn load[SUM_DTYPE_COUNT];  /* fp32 acc[i]  = (float)x[i] */
	sum_fn store[SUM_DTYPE_COUNT]; /* out[i] = (dtype)acc[i], round to nearest even */
};

/* Bytes per element on the wire. */
static inline size_t sum_dtype_size(enum sum_dtype t)
{
	return t == SUM_FP32 ? 4 : 2;
}

const char *sum_dtype_name(enum sum_dtype t);
const char *sum_isa_name(enum sum_isa isa);

/* Whether this CPU (and OS) can run @isa. */
bool sum_isa_supported(enum sum_isa isa);

/* The kernels of @isa, or NULL when the CPU cannot run them. */
const struct sum_ops *sum_ops_isa(enum sum_isa isa);

/* The kernels every summation service uses: the best the CPU has, capped
 * by PBOX_SIMD. Chosen once; thread-safe. */
const struct sum_ops *sum_ops_best(void);

/*
 * The choice sum_ops_best() makes, as a pure function: the best ISA this
 * CPU supports, capped by @cap ("scalar", "avx2", "avx512" or NULL).
 * Returns -EINVAL for an unknown @cap (and still fills @isa, uncapped).
 */
int sum_isa_choose(const char *cap, enum sum_isa *isa);

/* Scalar element conversions (exact, round to nearest even), for tests
 * and for the control path. */
float sum_f16_to_f32(uint16_t h);
uint16_t sum_f32_to_f16(float f);
float sum_bf16_to_f32(uint16_t h);
uint16_t sum_f32_to_bf16(float f);

/* Variant tables, defined in sum_scalar.c, sum_avx2.c and sum_avx512.c. */
extern const struct sum_ops sum_ops_scalar;
extern const struct sum_ops sum_ops_avx2;
extern const struct sum_ops sum_ops_avx512;

#endif /* PBOX_SUM_H */
