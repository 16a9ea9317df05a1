/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar kernels: the reference every vector variant is tested against, and
 * the fallback for CPUs without AVX2. */
#include "sum.h"
#include "sum_conv.h"

static void add_f32(void *restrict acc, const void *restrict x, size_t n)
{
	sum__add_f32_tail(acc, x, 0, n);
}

static void add_f16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__add_f16_tail(acc, x, 0, n);
}

static void add_bf16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__add_bf16_tail(acc, x, 0, n);
}

static void copy_f32(void *restrict dst, const void *restrict src, size_t n)
{
	memcpy(dst, src, n * 4);
}

static void load_f16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__load_f16_tail(acc, x, 0, n);
}

static void load_bf16(void *restrict acc, const void *restrict x, size_t n)
{
	sum__load_bf16_tail(acc, x, 0, n);
}

static void store_f16(void *restrict out, const void *restrict acc, size_t n)
{
	sum__store_f16_tail(out, acc, 0, n);
}

static void store_bf16(void *restrict out, const void *restrict acc, size_t n)
{
	sum__store_bf16_tail(out, acc, 0, n);
}

const struct sum_ops sum_ops_scalar = {
	.name = "scalar",
	.isa = SUM_ISA_SCALAR,
	.add = {add_f32, add_f16, add_bf16},
	.load = {copy_f32, load_f16, load_bf16},
	.store = {copy_f32, store_f16, store_bf16},
};

float sum_f16_to_f32(uint16_t h)
{
	return sum__bits_f32(sum__f16_to_f32_bits(h));
}

uint16_t sum_f32_to_f16(float f)
{
	return sum__f32_bits_to_f16(sum__f32_bits(f));
}

float sum_bf16_to_f32(uint16_t h)
{
	return sum__bits_f32(sum__bf16_to_f32_bits(h));
}

uint16_t sum_f32_to_bf16(float f)
{
	return sum__f32_bits_to_bf16(sum__f32_bits(f));
}
