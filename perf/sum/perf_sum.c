/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * perf/sum: how close the summation kernels come to the memory system.
 *
 * For each kernel variant this CPU has and each dtype, acc += x is timed
 * against a streaming reference of the same ISA that reads and writes the
 * same bytes (perf_sum_ref.h), at a 32 KB chunk (cache-resident: the cost
 * of the arithmetic shows) and at a DRAM-sized working set (>= 256 MB of
 * accumulators: bandwidth-bound, which is where a box lives). Kernel and
 * reference alternate, best of N each, so a noisy neighbour hits both.
 *
 * Traffic counted per element: acc read + x read + acc write, i.e. 12 bytes
 * for fp32 and 10 for fp16/bf16.
 *
 * Last line: RESULT sum fp32=R fp16=R bf16=R, R = kernel traffic rate /
 * reference traffic rate at the DRAM size, for the kernels pboxd would use.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "perf_sum_ref.h"
#include "sum.h"

#define CHUNK_BYTES (32u << 10)

struct opts {
	size_t dram_mb;
	unsigned reps;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *big_alloc(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, 2u << 20, bytes))
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE); /* same for kernel and reference */
	memset(p, 0, bytes);		  /* fault every page in before timing */
	return p;
}

/* Values that stay normal however often they are added. */
static void fill_inputs(float *acc_k, void *x, size_t n, enum sum_dtype t)
{
	for (size_t i = 0; i < n; i++) {
		float v = 0.5f + (float)(i % 1024) / 2048.0f;

		acc_k[i] = v;
		if (t == SUM_FP32)
			((float *)x)[i] = v;
		else if (t == SUM_FP16)
			((uint16_t *)x)[i] = sum_f32_to_f16(v);
		else
			((uint16_t *)x)[i] = sum_f32_to_bf16(v);
	}
}

struct result {
	double kern_gbs, ref_gbs;
};

static struct result measure(const struct sum_ops *o, enum sum_dtype t, size_t acc_bytes,
			     unsigned reps, float *acc_k, void *acc_r, void *x)
{
	size_t n = acc_bytes / 4;
	double traffic = (double)n * (8.0 + (double)sum_dtype_size(t));
	/* enough calls per sample that a sample lasts milliseconds */
	unsigned calls = acc_bytes >= (64u << 20) ? 1 : (unsigned)((256u << 20) / acc_bytes);
	perf_ref_fn ref = perf_ref_for(o->isa);
	sum_fn add = o->add[t];
	double best_k = 1e30, best_r = 1e30;
	struct result r;

	fill_inputs(acc_k, x, n, t);
	for (unsigned rep = 0; rep < reps; rep++) {
		double t0 = now();

		for (unsigned c = 0; c < calls; c++)
			add(acc_k, x, n);
		double t1 = now();
		for (unsigned c = 0; c < calls; c++)
			ref(acc_r, x, acc_bytes, t != SUM_FP32);
		double t2 = now();

		if (t1 - t0 < best_k)
			best_k = t1 - t0;
		if (t2 - t1 < best_r)
			best_r = t2 - t1;
	}
	r.kern_gbs = traffic * calls / best_k / 1e9;
	r.ref_gbs = traffic * calls / best_r / 1e9;
	return r;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"dram-mb", required_argument, NULL, 'm'},
		{"reps", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	o->dram_mb = 256;
	o->reps = 7;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		char *end;
		unsigned long v;

		switch (c) {
		case 'm':
		case 'r':
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || v == 0 || v > (c == 'm' ? 65536ul : 1000ul)) {
				fprintf(stderr, "perf_sum: bad --%s '%s'\n",
					c == 'm' ? "dram-mb" : "reps", optarg);
				return -1;
			}
			if (c == 'm')
				o->dram_mb = v;
			else
				o->reps = (unsigned)v;
			break;
		default:
			fprintf(stderr, "usage: perf_sum [--dram-mb N (256)] [--reps N (7)]\n");
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	const struct sum_ops *best = sum_ops_best();
	double result[SUM_DTYPE_COUNT] = {0};
	size_t sizes[2], dram;
	struct opts o;
	float *acc_k;
	void *acc_r, *x;

	if (parse_opts(argc, argv, &o))
		return 2;
	dram = o.dram_mb << 20;
	sizes[0] = CHUNK_BYTES;
	sizes[1] = dram;
	acc_k = big_alloc(dram);
	acc_r = big_alloc(dram);
	x = big_alloc(dram);
	if (!acc_k || !acc_r || !x) {
		fprintf(stderr, "perf_sum: cannot allocate 3 x %zu MB\n", o.dram_mb);
		return 1;
	}
	if (o.dram_mb < 256)
		fprintf(stderr, "perf_sum: --dram-mb %zu is below 256: caches may hold it\n",
			o.dram_mb);
	printf("perf/sum: acc += x against a stream moving the same bytes, best of %u, "
	       "alternating; pboxd uses %s\n",
	       o.reps, best->name);
	printf("%-8s %-5s %8s %14s %14s %7s\n", "variant", "dtype", "acc", "kernel GB/s",
	       "stream GB/s", "ratio");
	for (enum sum_isa isa = SUM_ISA_SCALAR; isa < SUM_ISA_COUNT; isa++) {
		const struct sum_ops *ops = sum_ops_isa(isa);

		if (!ops) {
			printf("%-8s (not on this CPU)\n", sum_isa_name(isa));
			continue;
		}
		for (int t = SUM_FP32; t < SUM_DTYPE_COUNT; t++)
			for (int s = 0; s < 2; s++) {
				struct result r = measure(ops, (enum sum_dtype)t, sizes[s], o.reps,
							  acc_k, acc_r, x);
				char sz[16];

				if (sizes[s] >= (1u << 20))
					snprintf(sz, sizeof(sz), "%zuM", sizes[s] >> 20);
				else
					snprintf(sz, sizeof(sz), "%zuK", sizes[s] >> 10);
				printf("%-8s %-5s %8s %14.2f %14.2f %7.3f\n", ops->name,
				       sum_dtype_name((enum sum_dtype)t), sz, r.kern_gbs, r.ref_gbs,
				       r.kern_gbs / r.ref_gbs);
				fflush(stdout);
				if (ops == best && s == 1)
					result[t] = r.kern_gbs / r.ref_gbs;
			}
	}
	printf("RESULT sum fp32=%.3f fp16=%.3f bf16=%.3f\n", result[SUM_FP32], result[SUM_FP16],
	       result[SUM_BF16]);
	free(acc_k);
	free(acc_r);
	free(x);
	return 0;
}
