/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Gradient compressors with error feedback (ByteComp, shared/seeds/004):
 * what a worker does to a fragment before it pushes it, what a summation
 * service does to each push (decompress into its fp32 accumulator) and to
 * the sum (compress once, with its own error feedback), and what a worker
 * does to the result. The same code on the box's cores, in a worker's
 * SS_GPU and in libpbox; worker/cuda/comp.cu is its CUDA twin, to the bit.
 *
 * One call compresses one fragment of @n fp32 elements (a summation
 * service's unit), so the layout, the fragment state machine and loss
 * recovery are those of any push; only the payload is shorter.
 *
 *   scheme  payload (little-endian)                      bytes
 *   SIGN    scale (f32), then n sign bits (LSB first)    4 + ceil(n / 8)
 *   TOPK    k indices (u32, ascending), then k values    8k
 *   RANDK   k values, at the indices the seed draws      4k
 *   BF16    n bf16, nearest even                         2n
 *   FP16    n fp16, nearest even                         2n
 *
 * k = comp_k(n, rate_ppm): the rate in parts per million of the elements,
 * rounded up, at least 1 (1% of 2048 is 21).
 *
 * Error feedback (Karimireddy et al., the paper's [29]): the caller keeps a
 * residual @resid of n floats per fragment, zero at the start. Encoding
 * forms p = g + resid, sends C(p), and leaves resid = p - D(C(p)): what was
 * not sent goes into the next step's push. A summation service keeps one
 * for each fragment's result the same way. Without error feedback, pass a
 * zeroed residual every time.
 *
 * Each scheme, exactly (tests/python/comp_ref.py is the same in torch, and
 * `make test` holds every variant to it bit for bit):
 *   SIGN   scale = L1(p) / n, L1 summed in 16 lanes (lane j adds |p[i]| for
 *          i = j mod 16, in order), the lanes then folded in halves (j +=
 *          j + 8, j += j + 4, j += j + 2, j += j + 1); bit i = sign bit of
 *          p[i]; decoded: -scale where the bit is set, else scale.
 *   TOPK   the k elements of largest |p|, compared as the 31 magnitude bits
 *          (so NaN counts as largest), ties to the lower index; sent in
 *          index order. resid = p with the sent elements zeroed.
 *   RANDK  k distinct indices drawn by Floyd's algorithm from a generator
 *          seeded by comp_seed(job, key, fragment, round): every rank of a
 *          round draws the same indices and sends none of them, and a sum
 *          of RANDK payloads is the RANDK payload of the sum (an SS adds
 *          the values as they are). Not rescaled: error feedback carries
 *          the rest. resid = p with the sent elements zeroed.
 *   BF16, FP16  resid = p - widen(narrow(p)).
 * One thing is not the same everywhere: the bits of a NaN that arithmetic
 * makes (inf - inf after an fp16 overflow): x86 makes 0xffc00000, CUDA
 * and some torch builds 0x7fffffff. A NaN stays a NaN on every side.
 */
#ifndef PBOX_COMP_H
#define PBOX_COMP_H

#include <stddef.h>
#include <stdint.h>

#include "sum.h"

#ifdef __cplusplus
extern "C" {
#endif

enum comp_scheme {
	COMP_NONE = 0, /* fp32, uncompressed */
	COMP_SIGN,     /* EFSignSGD: 1 bit per element and a scale */
	COMP_TOPK,     /* DGC / top-k: the k largest, with their indices */
	COMP_RANDK,    /* Randomk: k values at seeded indices */
	COMP_BF16,     /* fp32 to bf16 on the wire */
	COMP_FP16,     /* fp32 to fp16 on the wire */
	COMP_SCHEME_COUNT
};

#define COMP_RATE_DEFAULT_PPM 10000u /* 1% */
#define COMP_RATE_MAX_PPM     1000000u

/* What a fragment is compressed with: the scheme, and for TOPK and RANDK
 * the rate. */
struct comp_spec {
	uint8_t scheme;	   /* enum comp_scheme */
	uint32_t rate_ppm; /* TOPK, RANDK: 1 .. COMP_RATE_MAX_PPM */
};

/* "none", "sign", "topk", "randk", "bf16", "fp16"; "?" past the end.
 * comp_scheme_parse: the scheme named @s, or -1. */
const char *comp_scheme_name(unsigned s);
int comp_scheme_parse(const char *s);

/* NULL, or what is wrong with @c ("rate must be 1 to 1000000 ppm"). */
const char *comp_spec_check(const struct comp_spec *c);

/* Elements a TOPK or RANDK fragment of @n elements sends: at least 1, at
 * most n. (Inline: worker/cuda/comp.cu sizes with it too.) */
static inline size_t comp_k(size_t n, uint32_t rate_ppm)
{
	uint64_t k = ((uint64_t)n * rate_ppm + COMP_RATE_MAX_PPM - 1) / COMP_RATE_MAX_PPM;

	if (k < 1)
		k = 1;
	return k > n ? n : (size_t)k;
}

/* Payload bytes of a fragment of @n elements under @c. */
static inline size_t comp_bytes(const struct comp_spec *c, size_t n)
{
	switch (c->scheme) {
	case COMP_SIGN:
		return 4 + (n + 7) / 8;
	case COMP_TOPK:
		return 8 * comp_k(n, c->rate_ppm);
	case COMP_RANDK:
		return 4 * comp_k(n, c->rate_ppm);
	case COMP_BF16:
	case COMP_FP16:
		return 2 * n;
	default:
		return 4 * n;
	}
}

/* RANDK's seed for one fragment of one round of one tensor of one job: the
 * same on every rank, different for every round. */
uint64_t comp_seed(uint32_t job, uint64_t key, uint32_t frag, uint32_t round);

/* The k distinct indices below @n RANDK draws from @seed, ascending, into
 * @idx (k of them). @scratch: ceil(n / 64) words the call may write. */
void comp_randk_indices(uint64_t seed, size_t n, size_t k, uint32_t *idx, uint64_t *scratch);

/* Scratch a call below needs for a fragment of @n elements (bytes): TOPK's
 * selection and RANDK's draw. A summation service sizes it once. */
size_t comp_scratch_bytes(size_t n);

/*
 * Compress @g (@n floats) with error feedback into @out (comp_bytes()
 * bytes): @resid (n floats) is added in, then left holding what was not
 * sent. @g may be @resid's own array (a summation service compresses its
 * accumulator that way after adding its residual in: then pass g = NULL).
 * @seed: RANDK's (comp_seed()), else unused. @scratch: comp_scratch_bytes(n)
 * bytes, 8-aligned. Allocates nothing.
 */
void comp_encode(const struct comp_spec *c, const float *g, float *resid, size_t n, void *out,
		 uint64_t seed, void *scratch);

/* NULL, or why @len payload bytes cannot be a fragment of @n elements
 * under @c (its length; TOPK: an index not ascending or not below n): what
 * a summation service checks before anything is touched. */
const char *comp_payload_check(const struct comp_spec *c, const void *payload, size_t len,
			       size_t n);

/* @acc (n floats) += the decoded @payload (checked by comp_payload_check()).
 * @seed and @scratch as for comp_encode(). */
void comp_add(const struct comp_spec *c, float *acc, const void *payload, size_t n, uint64_t seed,
	      void *scratch);

/* @out (n floats) = the decoded @payload. */
void comp_decode(const struct comp_spec *c, float *out, const void *payload, size_t n,
		 uint64_t seed, void *scratch);

/*
 * The vector kernels behind SIGN, chosen at run time as the sum kernels are
 * (sum_ops_best(), capped by PBOX_SIMD): every variant gives the same bits.
 *   sign_l1   resid[i] += g[i] (g NULL: resid as is), returns the 16-lane L1
 *   sign_pack bits of resid's signs into @bits; resid[i] -= copysign(scale)
 *   sign_add  acc[i] += the bit's -scale or scale
 */
struct comp_ops {
	float (*sign_l1)(const float *g, float *resid, size_t n);
	void (*sign_pack)(float *resid, size_t n, float scale, uint8_t *bits);
	void (*sign_add)(float *acc, const uint8_t *bits, size_t n, float scale);
};

/* The kernels of @isa (NULL when the CPU cannot run them), and the ones
 * comp_encode() and comp_add() use: those of sum_ops_best()'s ISA. */
const struct comp_ops *comp_ops_isa(enum sum_isa isa);
const struct comp_ops *comp_ops_best(void);

/* For tests: the same calls with @ops instead of comp_ops_best(). */
void comp_encode_with(const struct comp_ops *ops, const struct comp_spec *c, const float *g,
		      float *resid, size_t n, void *out, uint64_t seed, void *scratch);
size_t comp__bytes(const struct comp_spec *c, size_t n); /* comp_bytes(), not inlined */
void comp_add_with(const struct comp_ops *ops, const struct comp_spec *c, float *acc,
		   const void *payload, size_t n, uint64_t seed, void *scratch);

extern const struct comp_ops comp_ops_scalar;
extern const struct comp_ops comp_ops_avx2;
extern const struct comp_ops comp_ops_avx512;

#ifdef __cplusplus
}
#endif

#endif /* PBOX_COMP_H */
