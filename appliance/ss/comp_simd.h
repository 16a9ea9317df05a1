/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the vector SIGN kernels share with the scalar ones (comp.c): the
 * tails and the fold, so every variant ends a fragment the same way.
 */
#ifndef PBOX_COMP_SIMD_H
#define PBOX_COMP_SIMD_H

#include <stddef.h>
#include <stdint.h>

float comp__fold16(float s[16]);
float comp__sign_l1_tail(const float *g, float *resid, size_t i, size_t n, float s[16]);
void comp__sign_pack_tail(float *resid, size_t i, size_t n, float scale, uint8_t *bits);
void comp__sign_add_tail(float *acc, const uint8_t *bits, size_t i, size_t n, float scale);

#endif /* PBOX_COMP_SIMD_H */
