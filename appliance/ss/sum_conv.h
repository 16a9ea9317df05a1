/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Bit-exact scalar conversions between fp32 and fp16/bf16, inlined into
 * every kernel variant (their tails) so all variants agree to the bit.
 * NaNs come out quiet with the top payload bits kept, as x86 does.
 */
#ifndef PBOX_SUM_CONV_H
#define PBOX_SUM_CONV_H

#include <stdint.h>
#include <string.h>

static inline float sum__bits_f32(uint32_t b)
{
	float f;

	memcpy(&f, &b, sizeof(f));
	return f;
}

static inline uint32_t sum__f32_bits(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof(b));
	return b;
}

static inline uint32_t sum__f16_to_f32_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
	int e = -1;

	if (exp == 0x1f) /* inf, NaN (made quiet) */
		return sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0);
	if (exp != 0)
		return sign | ((exp + 112u) << 23) | (man << 13);
	if (man == 0)
		return sign;
	do { /* subnormal: normalise */
		e++;
		man <<= 1;
	} while (!(man & 0x400u));
	return sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
}

static inline uint16_t sum__f32_bits_to_f16(uint32_t f)
{
	uint32_t sign = (f >> 16) & 0x8000u, abs = f & 0x7fffffffu;
	uint32_t q, rem, half, shift;

	if (abs > 0x7f800000u) /* NaN */
		return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
	if (abs >= 0x477ff000u) /* >= 65520: rounds to infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (abs >= 0x38800000u) { /* normal: rebias, round off 13 bits */
		uint32_t r = abs - 0x38000000u;

		q = r >> 13;
		rem = r & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	if (abs <= 0x33000000u) /* <= 2^-25: rounds to zero */
		return (uint16_t)sign;
	/* subnormal result, in units of 2^-24 */
	shift = 126u - (abs >> 23);
	q = ((abs & 0x7fffffu) | 0x800000u) >> shift;
	rem = ((abs & 0x7fffffu) | 0x800000u) & ((1u << shift) - 1u);
	half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (q & 1u)))
		q++;
	return (uint16_t)(sign | q);
}

static inline uint32_t sum__bf16_to_f32_bits(uint16_t h)
{
	return (uint32_t)h << 16;
}

static inline uint16_t sum__f32_bits_to_bf16(uint32_t f)
{
	if ((f & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
		return (uint16_t)((f >> 16) | 0x40u);
	return (uint16_t)((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

/* Byte offset into a buffer, as void * so intrinsics take it uncast. */
static inline void *sum__at(void *p, size_t off)
{
	return (char *)p + off;
}

static inline const void *sum__cat(const void *p, size_t off)
{
	return (const char *)p + off;
}

/* Unaligned element access. */
static inline float sum__ld_f32(const void *p, size_t i)
{
	float v;

	memcpy(&v, (const char *)p + 4 * i, sizeof(v));
	return v;
}

static inline void sum__st_f32(void *p, size_t i, float v)
{
	memcpy((char *)p + 4 * i, &v, sizeof(v));
}

static inline uint16_t sum__ld_u16(const void *p, size_t i)
{
	uint16_t v;

	memcpy(&v, (const char *)p + 2 * i, sizeof(v));
	return v;
}

static inline void sum__st_u16(void *p, size_t i, uint16_t v)
{
	memcpy((char *)p + 2 * i, &v, sizeof(v));
}

/*
 * Scalar loops over [from, n), used whole by the scalar variant and for the
 * tails of the vector ones.
 */
static inline void sum__add_f32_tail(void *acc, const void *x, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_f32(acc, i, sum__ld_f32(acc, i) + sum__ld_f32(x, i));
}

static inline void sum__add_f16_tail(void *acc, const void *x, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_f32(acc, i,
			    sum__ld_f32(acc, i) +
				    sum__bits_f32(sum__f16_to_f32_bits(sum__ld_u16(x, i))));
}

static inline void sum__add_bf16_tail(void *acc, const void *x, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_f32(acc, i,
			    sum__ld_f32(acc, i) +
				    sum__bits_f32(sum__bf16_to_f32_bits(sum__ld_u16(x, i))));
}

static inline void sum__load_f16_tail(void *acc, const void *x, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_f32(acc, i, sum__bits_f32(sum__f16_to_f32_bits(sum__ld_u16(x, i))));
}

static inline void sum__load_bf16_tail(void *acc, const void *x, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_f32(acc, i, sum__bits_f32(sum__bf16_to_f32_bits(sum__ld_u16(x, i))));
}

static inline void sum__store_f16_tail(void *out, const void *acc, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_u16(out, i, sum__f32_bits_to_f16(sum__f32_bits(sum__ld_f32(acc, i))));
}

static inline void sum__store_bf16_tail(void *out, const void *acc, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		sum__st_u16(out, i, sum__f32_bits_to_bf16(sum__f32_bits(sum__ld_f32(acc, i))));
}

#endif /* PBOX_SUM_CONV_H */
