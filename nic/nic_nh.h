/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NH, the universal hash of UMAC (Black, Halevi, Krawczyk, Krovetz, Rogaway,
 * "UMAC: Fast and Secure Message Authentication", CRYPTO '99), under the
 * payload MAC (nic_mac_digest()). A payload is cut into blocks of
 * NIC_NH_BLOCK bytes; each block gives two 64-bit words,
 *
 *     NH_k(M) = sum over pairs i of (m[2i] + k[2i] mod 2^32) * (m[2i+1] + k[2i+1] mod 2^32)
 *               mod 2^64
 *
 * with m the block's little-endian 32-bit words (a last partial pair padded
 * with zeros) and k the NH key's words; the second word uses the key two
 * words on (the Toeplitz construction: the pair is 2^-64-almost-universal
 * over blocks of one length). The words are never on the wire: SipHash
 * keyed by the job turns them into the digest, so NH needs no nonce.
 *
 * One multiply per 8 payload bytes and no carry chain: with AVX-512 a block
 * costs a few hundred cycles, against SipHash-2-4's thousands. Variants:
 * scalar, AVX2, AVX-512, agreeing to the bit (the sums are exact modulo
 * 2^64 in any order); the best the CPU has is chosen once, capped by
 * PBOX_SIMD=scalar|avx2|avx512 as the summation kernels are.
 */
#ifndef PBOX_NIC_NH_H
#define PBOX_NIC_NH_H

#include <stddef.h>
#include <stdint.h>

#define NIC_NH_BLOCK	 1024u
#define NIC_NH_KEY_WORDS (NIC_NH_BLOCK / 4 + 2)

/* The NH words of @len bytes at @p: two per started block into @out
 * (2 * ceil(len / NIC_NH_BLOCK) of them), key @k (NIC_NH_KEY_WORDS). */
typedef void (*nic_nh_fn)(const uint8_t *p, size_t len, const uint32_t *k, uint64_t *out);

void nic_nh_scalar(const uint8_t *p, size_t len, const uint32_t *k, uint64_t *out);
void nic_nh_avx2(const uint8_t *p, size_t len, const uint32_t *k, uint64_t *out);
void nic_nh_avx512(const uint8_t *p, size_t len, const uint32_t *k, uint64_t *out);

/* The variant of this name ("scalar", "avx2", "avx512") if the CPU runs it,
 * else NULL. nic_nh_best(): the best the CPU runs, capped by PBOX_SIMD;
 * chosen once, thread-safe. */
nic_nh_fn nic_nh_named(const char *isa);
nic_nh_fn nic_nh_best(void);

/* The bytes of block @b of a payload of @len bytes (0 < @len). */
static inline size_t nic_nh__block_len(size_t len, size_t b)
{
	size_t last = (len - 1) / NIC_NH_BLOCK;

	return b < last ? NIC_NH_BLOCK : len - last * NIC_NH_BLOCK;
}

/* The scalar tail of one block, shared by the vector variants: words
 * [@from, @len) of the block at @p (from a multiple of 8), added into
 * @acc[0] (key @k) and @acc[1] (key @k + 2). */
void nic_nh__tail(const uint8_t *p, size_t from, size_t len, const uint32_t *k, uint64_t acc[2]);

#endif /* PBOX_NIC_NH_H */
