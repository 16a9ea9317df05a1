/* SPDX-License-Identifier: BSD-3-Clause */
/* NH: the scalar variant, the shared tail and the run-time choice. */
#include "nic_nh.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Word @i of the block's @len bytes, zero past the end. */
static inline uint32_t word(const uint8_t *p, size_t i, size_t len)
{
	uint8_t b[4] = {0};

	if (4 * i + 4 <= len)
		return le32(p + 4 * i);
	if (4 * i < len)
		memcpy(b, p + 4 * i, len - 4 * i);
	return le32(b);
}

void nic_nh__tail(const uint8_t *p, size_t from, size_t len, const uint32_t *k, uint64_t acc[2])
{
	size_t i;

	for (i = from / 4; 4 * i < len; i += 2) {
		uint32_t a = word(p, i, len), b = word(p, i + 1, len);

		acc[0] += (uint64_t)(uint32_t)(a + k[i]) * (uint32_t)(b + k[i + 1]);
		acc[1] += (uint64_t)(uint32_t)(a + k[i + 2]) * (uint32_t)(b + k[i + 3]);
	}
}

void nic_nh_scalar(const uint8_t *p, size_t len, const uint32_t *k, uint64_t *out)
{
	for (size_t blk = 0; blk * NIC_NH_BLOCK < len; blk++, out += 2) {
		out[0] = out[1] = 0;
		nic_nh__tail(p + blk * NIC_NH_BLOCK, 0, nic_nh__block_len(len, blk), k, out);
	}
}

/* __builtin_cpu_supports checks XCR0 too (an OS that does not save the
 * AVX-512 state reports none). */
static bool runs(unsigned isa)
{
	__builtin_cpu_init();
	if (isa == 1)
		return __builtin_cpu_supports("avx2");
	if (isa == 2)
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f");
	return isa == 0;
}

static const char *const names[] = {"scalar", "avx2", "avx512"};
static const nic_nh_fn fns[] = {nic_nh_scalar, nic_nh_avx2, nic_nh_avx512};

nic_nh_fn nic_nh_named(const char *isa)
{
	unsigned i;

	for (i = 0; i < 3; i++)
		if (strcmp(isa, names[i]) == 0)
			return runs(i) ? fns[i] : NULL;
	return NULL;
}

static nic_nh_fn chosen;

static void choose_once(void)
{
	const char *cap = getenv("PBOX_SIMD");
	unsigned best = 2;

	for (unsigned i = 0; cap && i < 3; i++)
		if (strcmp(cap, names[i]) == 0)
			best = i; /* sum.c says when it is not a name */
	while (best > 0 && !runs(best))
		best--;
	chosen = fns[best];
}

nic_nh_fn nic_nh_best(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, choose_once);
	return chosen;
}
