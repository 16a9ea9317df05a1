// SPDX-License-Identifier: BSD-3-Clause
//
// The compressors of appliance/ss/comp.h on the GPU, for CUDA tensors: the
// same payloads and residuals to the bit (tests/gpu/comp_check.cu holds
// them to the C code), a whole tensor per call, one block per fragment.
// Every add, subtract and divide is an explicit round-to-nearest intrinsic
// so that no FMA contraction or fast division can change a bit.
#include "comp_cuda.h"

#include <cuda_fp16.h>
#include <errno.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;

// comp_k(), on both sides
__host__ __device__ __forceinline__ size_t k_of(size_t n, uint32_t rate_ppm)
{
	uint64_t k = ((uint64_t)n * rate_ppm + COMP_RATE_MAX_PPM - 1) / COMP_RATE_MAX_PPM;

	return k < 1 ? 1 : k > n ? n : (size_t)k;
}

// comp_spec_check()'s rule (comp.c is not linked into the CUDA module)
bool spec_ok(const struct comp_spec *c)
{
	if (c->scheme >= COMP_SCHEME_COUNT)
		return false;
	return (c->scheme != COMP_TOPK && c->scheme != COMP_RANDK) ||
	       (c->rate_ppm >= 1 && c->rate_ppm <= COMP_RATE_MAX_PPM);
}

__device__ __forceinline__ uint32_t f2u(float f)
{
	return __float_as_uint(f);
}

__device__ __forceinline__ float u2f(uint32_t u)
{
	return __uint_as_float(u);
}

// fp32 -> bf16 and fp16, nearest even, NaNs quiet with their top payload
// bits: appliance/ss/sum_conv.h's rules, bit for bit.
__device__ __forceinline__ uint16_t to_bf16(float f)
{
	uint32_t x = f2u(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float from_bf16(uint16_t h)
{
	return u2f((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t to_f16(float f)
{
	uint32_t x = f2u(f), abs = x & 0x7fffffffu;

	if (abs > 0x7f800000u)
		return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((abs >> 13) & 0x3ffu));
	return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float from_f16(uint16_t h)
{
	uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

	if (exp == 0x1f && man) // NaN: quiet, as x86's vcvtph2ps
		return u2f(((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | (man << 13));
	return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct frag {
	size_t off, n;
	uint8_t *out;
};

__device__ __forceinline__ frag frag_of(size_t n, size_t fsize, size_t stride, uint8_t *base)
{
	frag f;

	f.off = (size_t)blockIdx.x * fsize;
	f.n = n - f.off < fsize ? n - f.off : fsize;
	f.out = base + (size_t)blockIdx.x * stride;
	return f;
}

// p = g + resid, into resid (g may be null)
__device__ __forceinline__ void add_in(const float *g, float *r, size_t n)
{
	if (g)
		for (size_t i = threadIdx.x; i < n; i += blockDim.x)
			r[i] = __fadd_rn(r[i], g[i]);
	__syncthreads();
}

// An exclusive prefix sum of one value per thread over the block, and the
// total (kThreads threads).
__device__ uint32_t block_scan(uint32_t v, uint32_t *total)
{
	__shared__ uint32_t s[kThreads];
	unsigned t = threadIdx.x;

	s[t] = v;
	__syncthreads();
	for (unsigned d = 1; d < kThreads; d *= 2) {
		uint32_t x = t >= d ? s[t - d] : 0;

		__syncthreads();
		s[t] += x;
		__syncthreads();
	}
	*total = s[kThreads - 1];
	uint32_t r = s[t] - v;
	__syncthreads();
	return r;
}

__global__ void sign_encode(const float *g, float *resid, size_t n, size_t fsize, size_t stride,
			    uint8_t *out)
{
	__shared__ float lanes[16];
	__shared__ float scale;
	frag f = frag_of(n, fsize, stride, out);
	float *r = resid + f.off;

	add_in(g ? g + f.off : nullptr, r, f.n);
	if (threadIdx.x < 16) { // lane j adds its elements in order, as comp.c
		float s = 0.0f;

		for (size_t i = threadIdx.x; i < f.n; i += 16)
			s = __fadd_rn(s, fabsf(r[i]));
		lanes[threadIdx.x] = s;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int w = 8; w >= 1; w /= 2)
			for (int j = 0; j < w; j++)
				lanes[j] = __fadd_rn(lanes[j], lanes[j + w]);
		scale = __fdiv_rn(lanes[0], (float)f.n);
		uint32_t sb = f2u(scale);
		for (int b = 0; b < 4; b++)
			f.out[b] = (uint8_t)(sb >> (8 * b));
	}
	__syncthreads();
	const uint32_t sb = f2u(scale);
	for (size_t b = threadIdx.x; b < (f.n + 7) / 8; b += blockDim.x) {
		uint8_t bits = 0;

		for (size_t i = 8 * b; i < 8 * b + 8 && i < f.n; i++) {
			uint32_t neg = f2u(r[i]) & 0x80000000u;

			bits |= (uint8_t)((neg >> 31) << (i % 8));
			r[i] = __fsub_rn(r[i], u2f(sb ^ neg));
		}
		f.out[4 + b] = bits;
	}
}

__global__ void sign_add(float *acc, size_t n, size_t fsize, size_t stride, const uint8_t *in)
{
	frag f = frag_of(n, fsize, stride, const_cast<uint8_t *>(in));
	uint32_t sb = f.out[0] | (uint32_t)f.out[1] << 8 | (uint32_t)f.out[2] << 16 |
		      (uint32_t)f.out[3] << 24;

	for (size_t i = threadIdx.x; i < f.n; i += blockDim.x) {
		uint32_t neg = (uint32_t)(f.out[4 + i / 8] >> (i % 8) & 1) << 31;

		acc[f.off + i] = __fadd_rn(acc[f.off + i], u2f(sb ^ neg));
	}
}

__device__ __forceinline__ void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

__device__ __forceinline__ uint32_t get32(const uint8_t *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// TOPK: comp.c's radix selection (a byte at a time from the top), then the
// chosen ones written in index order by a block scan per tile.
__global__ void topk_encode(const float *g, float *resid, size_t n, size_t fsize, size_t stride,
			    uint8_t *out, uint32_t rate_ppm)
{
	__shared__ uint32_t hist[256];
	__shared__ uint32_t prefix, mask, need;
	frag f = frag_of(n, fsize, stride, out);
	float *r = resid + f.off;
	const size_t k = k_of(f.n, rate_ppm);

	add_in(g ? g + f.off : nullptr, r, f.n);
	if (threadIdx.x == 0) {
		prefix = 0;
		mask = 0;
		need = (uint32_t)k;
	}
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int d = threadIdx.x; d < 256; d += blockDim.x)
			hist[d] = 0;
		__syncthreads();
		for (size_t i = threadIdx.x; i < f.n; i += blockDim.x) {
			uint32_t m = f2u(r[i]) & 0x7fffffffu;

			if ((m & mask) == prefix)
				atomicAdd(&hist[m >> shift & 0xff], 1u);
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			int d = 255;

			for (; d > 0 && hist[d] < need; d--)
				need -= hist[d];
			prefix |= (uint32_t)d << shift;
			mask |= 0xffu << shift;
		}
		__syncthreads();
	}
	const uint32_t t = prefix;
	uint32_t ties_before = 0, taken = 0;
	for (size_t base = 0; base < f.n; base += kThreads) {
		size_t i = base + threadIdx.x;
		uint32_t m = i < f.n ? f2u(r[i]) & 0x7fffffffu : 0;
		uint32_t tie = i < f.n && m == t, ntie, nsel;
		uint32_t tie_rank = ties_before + block_scan(tie, &ntie);
		uint32_t sel = i < f.n && (m > t || (tie && tie_rank < need));
		uint32_t pos = taken + block_scan(sel, &nsel);

		if (sel) {
			put32(f.out + 4 * pos, (uint32_t)i);
			put32(f.out + 4 * (k + pos), f2u(r[i]));
			r[i] = 0.0f;
		}
		ties_before += ntie;
		taken += nsel;
	}
}

// RANDK's indices into @seen (a bitmap of the fragment), by thread 0:
// Floyd's k draws over SplitMix64, as comp.c.
__device__ void randk_draw(uint64_t seed, size_t n, size_t k, uint32_t *seen)
{
	for (size_t w = threadIdx.x; w < (n + 31) / 32; w += blockDim.x)
		seen[w] = 0;
	__syncthreads();
	if (threadIdx.x == 0) {
		uint64_t state = seed;

		for (size_t j = n - k; j < n; j++) {
			state += 0x9e3779b97f4a7c15ull;
			uint64_t t = ((mix64(state) >> 32) * (j + 1)) >> 32;

			if (seen[t / 32] >> (t % 32) & 1)
				t = j;
			seen[t / 32] |= 1u << (t % 32);
		}
	}
	__syncthreads();
}

// Walk the drawn indices in order: fn(index, its place among the k).
template <typename F>
__device__ void randk_walk(const uint32_t *seen, size_t n, F fn)
{
	uint32_t before = 0;

	for (size_t base = 0; base < n; base += kThreads) {
		size_t i = base + threadIdx.x;
		uint32_t hit = i < n && (seen[i / 32] >> (i % 32) & 1), total;
		uint32_t pos = before + block_scan(hit, &total);

		if (hit)
			fn(i, pos);
		before += total;
	}
}

__global__ void randk_encode(const float *g, float *resid, size_t n, size_t fsize, size_t stride,
			     uint8_t *out, uint32_t rate_ppm, const uint64_t *seeds)
{
	extern __shared__ uint32_t seen[];
	frag f = frag_of(n, fsize, stride, out);
	float *r = resid + f.off;

	add_in(g ? g + f.off : nullptr, r, f.n);
	randk_draw(seeds[blockIdx.x], f.n, k_of(f.n, rate_ppm), seen);
	randk_walk(seen, f.n, [&](size_t i, uint32_t pos) {
		put32(f.out + 4 * pos, f2u(r[i]));
		r[i] = 0.0f;
	});
}

__global__ void sparse_add(float *acc, size_t n, size_t fsize, size_t stride, const uint8_t *in,
			   uint32_t rate_ppm, const uint64_t *seeds)
{
	extern __shared__ uint32_t seen[];
	frag f = frag_of(n, fsize, stride, const_cast<uint8_t *>(in));
	const size_t k = k_of(f.n, rate_ppm);
	float *a = acc + f.off;

	if (!seeds) { // TOPK: indices in the payload, distinct: no two threads meet
		for (size_t j = threadIdx.x; j < k; j += blockDim.x) {
			uint32_t i = get32(f.out + 4 * j);

			if (i < f.n)
				a[i] = __fadd_rn(a[i], u2f(get32(f.out + 4 * (k + j))));
		}
		return;
	}
	randk_draw(seeds[blockIdx.x], f.n, k, seen);
	randk_walk(seen, f.n, [&](size_t i, uint32_t pos) {
		a[i] = __fadd_rn(a[i], u2f(get32(f.out + 4 * pos)));
	});
}

template <bool BF16>
__global__ void cast_encode(const float *g, float *resid, size_t n, uint16_t *out)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float p = g ? __fadd_rn(resid[i], g[i]) : resid[i];
		uint16_t h = BF16 ? to_bf16(p) : to_f16(p);

		out[i] = h;
		resid[i] = __fsub_rn(p, BF16 ? from_bf16(h) : from_f16(h));
	}
}

template <bool BF16>
__global__ void cast_add(float *acc, size_t n, const uint16_t *in)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		acc[i] = __fadd_rn(acc[i], BF16 ? from_bf16(in[i]) : from_f16(in[i]));
}

__global__ void f32_encode(const float *g, float *resid, size_t n, float *out)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		out[i] = g ? __fadd_rn(resid[i], g[i]) : resid[i];
		resid[i] = 0.0f;
	}
}

__global__ void f32_add(float *acc, size_t n, const float *in)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		acc[i] = __fadd_rn(acc[i], in[i]);
}

unsigned grid_of(size_t n)
{
	size_t b = (n + kThreads - 1) / kThreads;

	return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

} // namespace

extern "C" size_t comp_cuda_bytes(const struct comp_spec *c, size_t n, size_t fsize)
{
	if (c->scheme == COMP_NONE || c->scheme == COMP_BF16 || c->scheme == COMP_FP16)
		return comp_bytes(c, n);
	size_t whole = n / fsize, rest = n % fsize;

	return whole * comp_bytes(c, fsize) + (rest ? comp_bytes(c, rest) : 0);
}

extern "C" int comp_cuda_encode(const struct comp_spec *c, const float *g, float *resid, size_t n,
				size_t fsize, void *out, const uint64_t *seeds, cudaStream_t s)
{
	const size_t frags = (n + fsize - 1) / fsize, stride = comp_bytes(c, fsize);
	const size_t seen = (fsize + 31) / 32 * 4;

	if (!n || !fsize || !spec_ok(c) || (c->scheme == COMP_RANDK && !seeds))
		return -EINVAL;
	switch (c->scheme) {
	case COMP_SIGN:
		sign_encode<<<frags, kThreads, 0, s>>>(g, resid, n, fsize, stride, (uint8_t *)out);
		break;
	case COMP_TOPK:
		topk_encode<<<frags, kThreads, 0, s>>>(g, resid, n, fsize, stride, (uint8_t *)out,
						       c->rate_ppm);
		break;
	case COMP_RANDK:
		randk_encode<<<frags, kThreads, seen, s>>>(g, resid, n, fsize, stride, (uint8_t *)out,
							   c->rate_ppm, seeds);
		break;
	case COMP_BF16:
		cast_encode<true><<<grid_of(n), kThreads, 0, s>>>(g, resid, n, (uint16_t *)out);
		break;
	case COMP_FP16:
		cast_encode<false><<<grid_of(n), kThreads, 0, s>>>(g, resid, n, (uint16_t *)out);
		break;
	default:
		f32_encode<<<grid_of(n), kThreads, 0, s>>>(g, resid, n, (float *)out);
		break;
	}
	return cudaPeekAtLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int comp_cuda_add(const struct comp_spec *c, float *acc, const void *in, size_t n,
			     size_t fsize, const uint64_t *seeds, cudaStream_t s)
{
	const size_t frags = (n + fsize - 1) / fsize, stride = comp_bytes(c, fsize);
	const size_t seen = (fsize + 31) / 32 * 4;
	const uint8_t *p = (const uint8_t *)in;

	if (!n || !fsize || !spec_ok(c) || (c->scheme == COMP_RANDK && !seeds))
		return -EINVAL;
	switch (c->scheme) {
	case COMP_SIGN:
		sign_add<<<frags, kThreads, 0, s>>>(acc, n, fsize, stride, p);
		break;
	case COMP_TOPK:
		sparse_add<<<frags, kThreads, 0, s>>>(acc, n, fsize, stride, p, c->rate_ppm, nullptr);
		break;
	case COMP_RANDK:
		sparse_add<<<frags, kThreads, seen, s>>>(acc, n, fsize, stride, p, c->rate_ppm, seeds);
		break;
	case COMP_BF16:
		cast_add<true><<<grid_of(n), kThreads, 0, s>>>(acc, n, (const uint16_t *)in);
		break;
	case COMP_FP16:
		cast_add<false><<<grid_of(n), kThreads, 0, s>>>(acc, n, (const uint16_t *)in);
		break;
	default:
		f32_add<<<grid_of(n), kThreads, 0, s>>>(acc, n, (const float *)in);
		break;
	}
	return cudaPeekAtLastError() == cudaSuccess ? 0 : -EIO;
}
