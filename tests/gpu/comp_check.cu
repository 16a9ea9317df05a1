// SPDX-License-Identifier: BSD-3-Clause
//
// make test-gpu: the CUDA compressors (worker/cuda/comp.cu) against the C
// ones (appliance/ss/comp.c, themselves held to tests/python/comp_ref.py):
// every scheme, whole tensors in fragments of several sizes, three steps of
// error feedback, with and without a gradient (a summation service
// compresses its accumulator in place): payloads and residuals equal to the
// bit, and decompress-add the same. Then, with "perf", each encoder's time
// over 64 MiB of fp32 against a device-to-device copy of it in the same run.
//
//   comp_check [perf]
// Last line: "comp_check: N tensors, every payload and residual bit-exact"
// or RESULT gpu_comp ...; exits non-zero at the first difference.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "comp_cuda.h"

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "comp_check: %s: %s\n", #x, cudaGetErrorString(e_));       \
			exit(2);                                                                   \
		}                                                                                  \
	} while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)(rng >> 40) / (float)(1u << 24) - 0.5f;
}

// kind 0: plain; 1: ties, zeros and -0.0; 2: a wide range (casts overflow,
// go subnormal)
static void fill(std::vector<float> &g, int kind)
{
	for (size_t i = 0; i < g.size(); i++) {
		float x = uniform() * 0.02f;

		if (kind == 1)
			x = i % 5 == 0 ? 0.0f : i % 7 == 1 ? -0.0f : (float)(int)(x * 300) / 300.0f;
		if (kind == 2) {
			// below fp16's 65504: an overflow's inf - inf is a NaN whose
			// bits x86 and CUDA make differently (the default NaN
			// 0xffc00000 against 0x7fffffff)
			int e = (int)((uniform() + 0.5f) * 15) - 12;

			for (; e > 0; e--)
				x *= 10.0f;
			for (; e < 0; e++)
				x /= 10.0f;
		}
		g[i] = x;
	}
}

static bool same_bits(const void *a, const void *b, size_t bytes, const char *what,
		      const char *scheme, size_t n, size_t fsize, int step)
{
	if (memcmp(a, b, bytes) == 0)
		return true;
	const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
	size_t i = 0;

	while (x[i] == y[i])
		i++;
	printf("comp_check: FAIL %s n=%zu fragments of %zu step %d: %s differs at byte %zu "
	       "(GPU %02x, CPU %02x)\n",
	       scheme, n, fsize, step, what, i, x[i], y[i]);
	return false;
}

static int check(void)
{
	const size_t sizes[][2] = {{3 * 2048 + 100, 2048}, {5000, 1000}, {2048, 2048},
				   {1, 2048},	       {9000, 4096}, {17, 16}};
	const uint32_t rates[] = {10000, 333333};
	int tensors = 0;

	for (int scheme = 0; scheme < COMP_SCHEME_COUNT; scheme++)
		for (uint32_t rate : rates) {
			if (rate != rates[0] && scheme != COMP_TOPK && scheme != COMP_RANDK)
				continue;
			for (auto &sz : sizes) {
				const size_t n = sz[0], fsize = sz[1], frags = (n + fsize - 1) / fsize;
				struct comp_spec c = {(uint8_t)scheme, rate};
				const size_t bytes = comp_cuda_bytes(&c, n, fsize),
					     stride = comp_bytes(&c, fsize);
				std::vector<float> g(n), rc(n, 0.0f), rg(n), acc(n), accg(n);
				std::vector<uint8_t> oc(bytes + 8), og(bytes + 8);
				std::vector<uint64_t> seeds(frags);
				std::vector<uint8_t> scratch(comp_scratch_bytes(fsize) + 8);
				float *d_g, *d_r, *d_acc;
				void *d_out;
				uint64_t *d_seeds;

				CK(cudaMalloc(&d_g, 4 * n));
				CK(cudaMalloc(&d_r, 4 * n));
				CK(cudaMalloc(&d_acc, 4 * n));
				CK(cudaMalloc(&d_out, bytes + 8));
				CK(cudaMalloc(&d_seeds, 8 * frags));
				CK(cudaMemset(d_r, 0, 4 * n));
				for (int step = 0; step < 4; step++) {
					// step 3: no gradient, the residual compressed as it is
					const bool nog = step == 3;

					fill(g, step % 3);
					for (size_t f = 0; f < frags; f++)
						seeds[f] = comp_seed(9, n, (uint32_t)f, (uint32_t)step);
					for (size_t f = 0; f < frags; f++) {
						size_t off = f * fsize, m = n - off < fsize ? n - off : fsize;

						comp_encode(&c, nog ? NULL : &g[off], &rc[off], m,
							    &oc[f * stride], seeds[f], scratch.data());
					}
					CK(cudaMemcpy(d_g, g.data(), 4 * n, cudaMemcpyHostToDevice));
					CK(cudaMemcpy(d_seeds, seeds.data(), 8 * frags,
						      cudaMemcpyHostToDevice));
					if (comp_cuda_encode(&c, nog ? NULL : d_g, d_r, n, fsize, d_out,
							     d_seeds, 0)) {
						printf("comp_check: FAIL comp_cuda_encode refused %s\n",
						       comp_scheme_name(scheme));
						return 1;
					}
					CK(cudaMemcpy(og.data(), d_out, bytes, cudaMemcpyDeviceToHost));
					CK(cudaMemcpy(rg.data(), d_r, 4 * n, cudaMemcpyDeviceToHost));
					if (!same_bits(og.data(), oc.data(), bytes, "payload",
						       comp_scheme_name(scheme), n, fsize, step) ||
					    !same_bits(rg.data(), rc.data(), 4 * n, "residual",
						       comp_scheme_name(scheme), n, fsize, step))
						return 1;
					// a summation service's decompress-sum, on both
					fill(acc, 0);
					CK(cudaMemcpy(d_acc, acc.data(), 4 * n, cudaMemcpyHostToDevice));
					for (size_t f = 0; f < frags; f++) {
						size_t off = f * fsize, m = n - off < fsize ? n - off : fsize;

						comp_add(&c, &acc[off], &oc[f * stride], m, seeds[f],
							 scratch.data());
					}
					if (comp_cuda_add(&c, d_acc, d_out, n, fsize, d_seeds, 0))
						return 1;
					CK(cudaMemcpy(accg.data(), d_acc, 4 * n, cudaMemcpyDeviceToHost));
					if (!same_bits(accg.data(), acc.data(), 4 * n, "sum",
						       comp_scheme_name(scheme), n, fsize, step))
						return 1;
				}
				cudaFree(d_g);
				cudaFree(d_r);
				cudaFree(d_acc);
				cudaFree(d_out);
				cudaFree(d_seeds);
				tensors++;
			}
			printf("comp_check: %-5s rate %6u ppm: %zu tensor shapes x 4 steps bit-exact "
			       "with the C compressors (payload, residual, decompress-add)\n",
			       comp_scheme_name(scheme), rate, sizeof(sizes) / sizeof(sizes[0]));
		}
	printf("comp_check: %d tensors, every payload and residual bit-exact\n", tensors);
	return 0;
}

static int perf(void)
{
	const size_t n = 16u << 20, fsize = 2048, frags = n / fsize; // 64 MiB of fp32
	float *d_g, *d_r, *d_copy;
	void *d_out;
	uint64_t *d_seeds;
	cudaEvent_t a, b;
	std::vector<uint64_t> seeds(frags);
	float copy_ms = 0;
	char line[512];
	int at = snprintf(line, sizeof(line), "RESULT gpu_comp");

	for (size_t f = 0; f < frags; f++)
		seeds[f] = comp_seed(1, 2, (uint32_t)f, 3);
	CK(cudaMalloc(&d_g, 4 * n));
	CK(cudaMalloc(&d_r, 4 * n));
	CK(cudaMalloc(&d_copy, 4 * n));
	CK(cudaMalloc(&d_out, 4 * n));
	CK(cudaMalloc(&d_seeds, 8 * frags));
	CK(cudaMemcpy(d_seeds, seeds.data(), 8 * frags, cudaMemcpyHostToDevice));
	std::vector<float> g(n);
	fill(g, 0);
	CK(cudaMemcpy(d_g, g.data(), 4 * n, cudaMemcpyHostToDevice));
	CK(cudaMemset(d_r, 0, 4 * n));
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int s = -1; s < COMP_SCHEME_COUNT; s++) {
		struct comp_spec c = {(uint8_t)(s < 0 ? 0 : s), 10000};
		float ms = 0;

		for (int rep = 0; rep < 6; rep++) { // the first is a warm-up
			CK(cudaEventRecord(a));
			if (s < 0)
				CK(cudaMemcpyAsync(d_copy, d_g, 4 * n, cudaMemcpyDeviceToDevice));
			else if (comp_cuda_encode(&c, d_g, d_r, n, fsize, d_out, d_seeds, 0))
				return 1;
			CK(cudaEventRecord(b));
			CK(cudaEventSynchronize(b));
			float t;
			CK(cudaEventElapsedTime(&t, a, b));
			if (rep)
				ms += t / 5;
		}
		if (s < 0) {
			copy_ms = ms;
			printf("gpu_comp: 64 MiB fp32, device-to-device copy %.3f ms (%.0f GB/s)\n", ms,
			       2 * 4.0 * n / ms / 1e6);
			continue;
		}
		printf("gpu_comp: %-5s encode with error feedback, fragments of 2048: %.3f ms "
		       "(%.0f GB/s of gradient)\n",
		       comp_scheme_name(s), ms, 4.0 * n / ms / 1e6);
		at += snprintf(line + at, sizeof(line) - at, " %s_vs_copy=%.3f", comp_scheme_name(s),
			       copy_ms / ms);
	}
	puts(line);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "perf") == 0)
		return perf();
	return check();
}
