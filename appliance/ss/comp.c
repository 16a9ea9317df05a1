/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Gradient compressors (comp.h): the schemes' framing, TOPK's selection,
 * RANDK's draw, and the scalar SIGN kernels every vector variant matches.
 * Nothing here allocates: a summation service calls it per push.
 */
#include "comp.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "comp_simd.h"
#include "sum_conv.h"

static const char *const scheme_names[COMP_SCHEME_COUNT] = {"none",  "sign", "topk",
							    "randk", "bf16", "fp16"};

const char *comp_scheme_name(unsigned s)
{
	return s < COMP_SCHEME_COUNT ? scheme_names[s] : "?";
}

int comp_scheme_parse(const char *s)
{
	unsigned i;

	for (i = 0; s && i < COMP_SCHEME_COUNT; i++)
		if (strcmp(s, scheme_names[i]) == 0)
			return (int)i;
	return -1;
}

static int sparse(const struct comp_spec *c)
{
	return c->scheme == COMP_TOPK || c->scheme == COMP_RANDK;
}

const char *comp_spec_check(const struct comp_spec *c)
{
	if (c->scheme >= COMP_SCHEME_COUNT)
		return "scheme unknown";
	if (sparse(c) && (c->rate_ppm == 0 || c->rate_ppm > COMP_RATE_MAX_PPM))
		return "rate must be 1 to 1000000 ppm (parts per million of the elements)";
	return NULL;
}

size_t comp__bytes(const struct comp_spec *c, size_t n)
{
	return comp_bytes(c, n);
}

/* SplitMix64 (Steele, Lea and Flood): its finaliser mixes the seed's
 * parts; its sequence draws RANDK's indices. Small, fast, and the same in
 * Python's integers and in CUDA. */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t comp_seed(uint32_t job, uint64_t key, uint32_t frag, uint32_t round)
{
	return mix64(mix64(mix64(job ^ 0x70626f78ull) ^ key) ^ ((uint64_t)round << 32 | frag));
}

void comp_randk_indices(uint64_t seed, size_t n, size_t k, uint32_t *idx, uint64_t *seen)
{
	uint64_t state = seed;
	size_t j, i, out = 0;

	memset(seen, 0, (n + 63) / 64 * 8);
	/* Floyd's algorithm: k draws make k distinct indices, uniformly */
	for (j = n - k; j < n; j++) {
		uint64_t r, t;

		state += 0x9e3779b97f4a7c15ull;
		r = mix64(state) >> 32;
		t = (r * (j + 1)) >> 32; /* in [0, j] */
		if (seen[t / 64] >> (t % 64) & 1)
			t = j;
		seen[t / 64] |= 1ull << (t % 64);
	}
	for (i = 0; i < (n + 63) / 64; i++) {
		uint64_t w = seen[i];

		while (w) {
			idx[out++] = (uint32_t)(i * 64 + (unsigned)__builtin_ctzll(w));
			w &= w - 1;
		}
	}
}

size_t comp_scratch_bytes(size_t n)
{
	return (n + 63) / 64 * 8 + n * 4;
}

/* ---- TOPK: the k largest magnitudes, ties to the lower index ---------- */

static uint32_t mag(const float *p, size_t i)
{
	return sum__f32_bits(p[i]) & 0x7fffffffu;
}

/*
 * The k-th largest magnitude (as bits) by radix selection, a byte at a
 * time from the top: four histograms of the candidates left. Returns it,
 * and in @ties how many elements of exactly that magnitude are taken (the
 * lowest-indexed ones). About 5 passes over the fragment.
 */
static uint32_t topk_threshold(const float *p, size_t n, size_t k, size_t *ties)
{
	uint32_t prefix = 0, mask = 0;
	size_t need = k;
	int shift;

	for (shift = 24; shift >= 0; shift -= 8) {
		uint32_t hist[256] = {0};
		size_t i;
		int d;

		for (i = 0; i < n; i++) {
			uint32_t m = mag(p, i);

			if ((m & mask) == prefix)
				hist[m >> shift & 0xff]++;
		}
		for (d = 255; d > 0 && hist[d] < need; d--)
			need -= hist[d];
		prefix |= (uint32_t)d << shift;
		mask |= 0xffu << shift;
	}
	*ties = need;
	return prefix;
}

static void topk_encode(float *p, size_t n, size_t k, uint8_t *out)
{
	size_t ties, i, j = 0;
	uint32_t t = topk_threshold(p, n, k, &ties);

	for (i = 0; i < n && j < k; i++) {
		uint32_t m = mag(p, i), ix = (uint32_t)i;

		if (m < t || (m == t && ties == 0))
			continue;
		if (m == t)
			ties--;
		memcpy(out + 4 * j, &ix, 4);
		memcpy(out + 4 * (k + j), &p[i], 4);
		p[i] = 0.0f;
		j++;
	}
}

/* ---- casts ------------------------------------------------------------- */

/* resid -= widen(out): what the narrowing lost, in blocks through the sum
 * kernels' widening loads. */
static void cast_residual(const struct sum_ops *s, enum sum_dtype t, float *resid,
			  const uint8_t *out, size_t n)
{
	float w[256];
	size_t i, b;

	for (b = 0; b < n; b += 256) {
		size_t m = n - b < 256 ? n - b : 256;

		s->load[t](w, out + 2 * b, m);
		for (i = 0; i < m; i++)
			resid[b + i] -= w[i];
	}
}

/* ---- the calls --------------------------------------------------------- */

void comp_encode_with(const struct comp_ops *ops, const struct comp_spec *c, const float *g,
		      float *resid, size_t n, void *out, uint64_t seed, void *scratch)
{
	const struct sum_ops *s = sum_ops_best();
	uint8_t *o = out;

	switch (c->scheme) {
	case COMP_SIGN: {
		float scale = ops->sign_l1(g, resid, n) / (float)n;

		memcpy(o, &scale, 4);
		ops->sign_pack(resid, n, scale, o + 4);
		return;
	}
	case COMP_TOPK:
		if (g)
			s->add[SUM_FP32](resid, g, n);
		topk_encode(resid, n, comp_k(n, c->rate_ppm), o);
		return;
	case COMP_RANDK: {
		size_t k = comp_k(n, c->rate_ppm), j;
		uint32_t *idx = (uint32_t *)((uint8_t *)scratch + (n + 63) / 64 * 8);

		if (g)
			s->add[SUM_FP32](resid, g, n);
		comp_randk_indices(seed, n, k, idx, scratch);
		for (j = 0; j < k; j++) {
			memcpy(o + 4 * j, &resid[idx[j]], 4);
			resid[idx[j]] = 0.0f;
		}
		return;
	}
	case COMP_BF16:
	case COMP_FP16: {
		enum sum_dtype t = c->scheme == COMP_BF16 ? SUM_BF16 : SUM_FP16;

		if (g)
			s->add[SUM_FP32](resid, g, n);
		s->store[t](o, resid, n);
		cast_residual(s, t, resid, o, n);
		return;
	}
	default: /* NONE: nothing is held back */
		if (g)
			s->add[SUM_FP32](resid, g, n);
		memcpy(o, resid, 4 * n);
		memset(resid, 0, 4 * n);
		return;
	}
}

const char *comp_payload_check(const struct comp_spec *c, const void *payload, size_t len, size_t n)
{
	const uint8_t *p = payload;
	size_t k, j;
	uint32_t prev = 0;

	if (len != comp_bytes(c, n))
		return "compressed payload length not the scheme's for the fragment";
	if (c->scheme != COMP_TOPK)
		return NULL;
	k = comp_k(n, c->rate_ppm);
	for (j = 0; j < k; j++) {
		uint32_t ix;

		memcpy(&ix, p + 4 * j, 4);
		if (ix >= n || (j > 0 && ix <= prev))
			return "top-k index out of the fragment or not ascending";
		prev = ix;
	}
	return NULL;
}

void comp_add_with(const struct comp_ops *ops, const struct comp_spec *c, float *acc,
		   const void *payload, size_t n, uint64_t seed, void *scratch)
{
	const struct sum_ops *s = sum_ops_best();
	const uint8_t *p = payload;
	size_t k, j;

	switch (c->scheme) {
	case COMP_SIGN: {
		float scale;

		memcpy(&scale, p, 4);
		ops->sign_add(acc, p + 4, n, scale);
		return;
	}
	case COMP_TOPK:
		k = comp_k(n, c->rate_ppm);
		for (j = 0; j < k; j++) {
			uint32_t ix;
			float v;

			memcpy(&ix, p + 4 * j, 4);
			memcpy(&v, p + 4 * (k + j), 4);
			acc[ix] += v;
		}
		return;
	case COMP_RANDK: {
		uint32_t *idx = (uint32_t *)((uint8_t *)scratch + (n + 63) / 64 * 8);

		k = comp_k(n, c->rate_ppm);
		comp_randk_indices(seed, n, k, idx, scratch);
		for (j = 0; j < k; j++) {
			float v;

			memcpy(&v, p + 4 * j, 4);
			acc[idx[j]] += v;
		}
		return;
	}
	case COMP_BF16:
		s->add[SUM_BF16](acc, p, n);
		return;
	case COMP_FP16:
		s->add[SUM_FP16](acc, p, n);
		return;
	default:
		s->add[SUM_FP32](acc, p, n);
		return;
	}
}

void comp_encode(const struct comp_spec *c, const float *g, float *resid, size_t n, void *out,
		 uint64_t seed, void *scratch)
{
	comp_encode_with(comp_ops_best(), c, g, resid, n, out, seed, scratch);
}

void comp_add(const struct comp_spec *c, float *acc, const void *payload, size_t n, uint64_t seed,
	      void *scratch)
{
	comp_add_with(comp_ops_best(), c, acc, payload, n, seed, scratch);
}

void comp_decode(const struct comp_spec *c, float *out, const void *payload, size_t n,
		 uint64_t seed, void *scratch)
{
	const struct sum_ops *s = sum_ops_best();

	switch (c->scheme) {
	case COMP_NONE:
		memcpy(out, payload, 4 * n);
		return;
	case COMP_BF16:
		s->load[SUM_BF16](out, payload, n);
		return;
	case COMP_FP16:
		s->load[SUM_FP16](out, payload, n);
		return;
	default: /* the sparse and sign schemes: zeros, and the payload added */
		memset(out, 0, 4 * n);
		comp_add(c, out, payload, n, seed, scratch);
		return;
	}
}

/* ---- SIGN, scalar: the reference ---------------------------------------- */

/* The lanes folded in halves: the order every variant uses. */
float comp__fold16(float s[16])
{
	int w, j;

	for (w = 8; w >= 1; w /= 2)
		for (j = 0; j < w; j++)
			s[j] += s[j + w];
	return s[0];
}

/* The tail after a vector loop stopped at @i: lanes as the vectors left them. */
float comp__sign_l1_tail(const float *g, float *resid, size_t i, size_t n, float s[16])
{
	for (; i < n; i++) {
		if (g)
			resid[i] += g[i];
		s[i % 16] += fabsf(resid[i]);
	}
	return comp__fold16(s);
}

static float sign_l1_scalar(const float *g, float *resid, size_t n)
{
	float s[16] = {0};

	return comp__sign_l1_tail(g, resid, 0, n, s);
}

void comp__sign_pack_tail(float *resid, size_t i, size_t n, float scale, uint8_t *bits)
{
	const uint32_t sb = sum__f32_bits(scale);

	for (; i < n; i++) {
		uint32_t neg = sum__f32_bits(resid[i]) & 0x80000000u;

		if (i % 8 == 0)
			bits[i / 8] = 0;
		bits[i / 8] |= (uint8_t)((neg >> 31) << (i % 8));
		resid[i] -= sum__bits_f32(sb ^ neg);
	}
}

static void sign_pack_scalar(float *resid, size_t n, float scale, uint8_t *bits)
{
	comp__sign_pack_tail(resid, 0, n, scale, bits);
}

void comp__sign_add_tail(float *acc, const uint8_t *bits, size_t i, size_t n, float scale)
{
	const uint32_t sb = sum__f32_bits(scale);

	for (; i < n; i++)
		acc[i] += sum__bits_f32(sb ^ (uint32_t)(bits[i / 8] >> (i % 8) & 1) << 31);
}

static void sign_add_scalar(float *acc, const uint8_t *bits, size_t n, float scale)
{
	comp__sign_add_tail(acc, bits, 0, n, scale);
}

const struct comp_ops comp_ops_scalar = {sign_l1_scalar, sign_pack_scalar, sign_add_scalar};

static const struct comp_ops *const ops_of_isa[SUM_ISA_COUNT] = {&comp_ops_scalar, &comp_ops_avx2,
								 &comp_ops_avx512};

const struct comp_ops *comp_ops_isa(enum sum_isa isa)
{
	if ((unsigned)isa >= SUM_ISA_COUNT || !sum_isa_supported(isa))
		return NULL;
	return ops_of_isa[isa];
}

/* Per push on a summation service: the kernels of the ISA sum_ops_best()
 * chose once (it runs here), without asking the CPU again. */
const struct comp_ops *comp_ops_best(void)
{
	return ops_of_isa[sum_ops_best()->isa];
}
