/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The streaming reference of perf/sum: a[] ^= s[] in place, reading a and s
 * and writing a, with s half as long as a when the kernel's input is 16-bit.
 * It moves the bytes of acc += x without the arithmetic, so the ratio of the
 * two is how close the kernel comes to the memory system's limit.
 */
#ifndef PBOX_PERF_SUM_REF_H
#define PBOX_PERF_SUM_REF_H

#include <stddef.h>

#include "sum.h"

/* @a_bytes a multiple of 64; s is a_bytes or a_bytes / 2 long (@half). */
typedef void (*perf_ref_fn)(void *a, const void *s, size_t a_bytes, int half);

void perf_ref_scalar(void *a, const void *s, size_t a_bytes, int half);
void perf_ref_avx2(void *a, const void *s, size_t a_bytes, int half);
void perf_ref_avx512(void *a, const void *s, size_t a_bytes, int half);

/* The reference written for @isa. */
perf_ref_fn perf_ref_for(enum sum_isa isa);

#endif /* PBOX_PERF_SUM_REF_H */
