// SPDX-License-Identifier: BSD-3-Clause
/*
 * CUDA tensors through libpbox's C API, on a machine with a GPU: N ranks
 * (threads, each its own context, on loopback UDP) sharing one GPU.
 *
 *   gpu_check check [N]   fp32, fp16 and bf16 tensors of one piece, many
 *                         pieces and a partial last piece, in place and
 *                         not, each rank's own stream: every sum exact;
 *                         pbox_rejoin() refused with a staged push-pull in
 *                         flight, and between steps taken (the machine
 *                         renewed with local aggregation); without local
 *                         aggregation, the whole-buffer calls of GPU
 *                         memory (reduce-scatter, all-gather, broadcast,
 *                         an asynchronous store), each element exact;
 *                         and without local aggregation, sign and top-k
 *                         compressed on the GPU ("SCHEME@gpu"): every sum
 *                         bitwise that of the same values compressed on
 *                         the CPU
 *   gpu_check perf [N]    staging throughput against the pinned-memory copy
 *                         peak measured in the same run, and an allreduce of
 *                         CUDA tensors against the same allreduce of host
 *                         tensors, and the ranks as one machine (local
 *                         aggregation) summing on the GPU against through
 *                         host memory; and sign compressed on the GPU
 *                         against on the CPU and against none; last line
 *                         RESULT gpu staging=X device_vs_host=Y
 *                         local_ipc_vs_host=Z comp_gpu_vs_cpu=C
 *                         comp_gpu_vs_none=D
 *
 * Exit 0 when every check held.
 */
#include <cuda_runtime.h>
#include <execinfo.h>
#include <inttypes.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pbox.h"

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "gpu_check: %s: %s\n", #x, cudaGetErrorString(e_));        \
			exit(2);                                                                   \
		}                                                                                  \
	} while (0)

namespace {

unsigned n_ranks = 4;
unsigned port0;
const char *mode = "check";

double now_s()
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Small integers: exact in fp16 and bf16 and in their sums over N ranks. */
float val(unsigned r, uint64_t i)
{
	return (float)((i * 7 + r * 3) % 17);
}

uint16_t to_half(float f) /* exact for the small integers above */
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if (f == 0)
		return 0;
	int e = (int)((x >> 23) & 0xff) - 127 + 15;
	return (uint16_t)((x >> 16 & 0x8000) | (uint32_t)e << 10 | (x >> 13 & 0x3ff));
}

float from_half(uint16_t h)
{
	if (!(h & 0x7fff))
		return 0;
	uint32_t x = (uint32_t)(h & 0x8000) << 16 | (uint32_t)(((h >> 10) & 0x1f) - 15 + 127) << 23 |
		     (uint32_t)(h & 0x3ff) << 13;
	float f;

	memcpy(&f, &x, 4);
	return f;
}

void put(void *p, uint64_t i, enum pbox_dtype dt, float v)
{
	if (dt == PBOX_FP32) {
		((float *)p)[i] = v;
	} else if (dt == PBOX_FP16) {
		((uint16_t *)p)[i] = to_half(v);
	} else {
		uint32_t x;

		memcpy(&x, &v, 4);
		((uint16_t *)p)[i] = (uint16_t)(x >> 16);
	}
}

float get(const void *p, uint64_t i, enum pbox_dtype dt)
{
	if (dt == PBOX_FP32)
		return ((const float *)p)[i];
	if (dt == PBOX_FP16)
		return from_half(((const uint16_t *)p)[i]);
	uint32_t x = (uint32_t)((const uint16_t *)p)[i] << 16;
	float f;

	memcpy(&f, &x, 4);
	return f;
}

size_t esize(enum pbox_dtype dt)
{
	return dt == PBOX_FP32 ? 4 : 2;
}

struct pbox *open_rank(unsigned r, const char *extra)
{
	char path[128];
	struct pbox *px;
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/pbox-gpu-%d-%u.ini", (int)getpid(), r);
	f = fopen(path, "w");
	if (!f)
		exit(2);
	fprintf(f,
		"[worker]\nrank = %u\nworld_size = %u\n[data]\naddress = 127.0.0.1\nport = %u\n"
		"bandwidth = 10G\nmtu = 9000\n[tuning]\ndeadline = 20s\n%s\n[peers]\n",
		r, n_ranks, port0 + r, extra);
	for (unsigned k = 0; k < n_ranks; k++)
		fprintf(f, "%u = 127.0.0.1:%u\n", k, port0 + k);
	fclose(f);
	if (pbox_init(path, &px) || pbox_start(px)) {
		fprintf(stderr, "gpu_check: rank %u: %s\n", r, pbox_last_error());
		exit(2);
	}
	unlink(path);
	return px;
}

struct rank_arg {
	unsigned r;
	int fails;
	double dev_s, host_s, stage_s; /* perf: best times */
};

/* The tensors of the check: (count, dtype, in place). Piece size 256 KiB. */
const struct {
	uint64_t count;
	enum pbox_dtype dt;
	bool inplace;
} cases[] = {
	{1000, PBOX_FP32, true},	{65536, PBOX_FP32, true},  {1000003, PBOX_FP32, false},
	{524288 + 77, PBOX_FP16, true}, {300001, PBOX_BF16, false}, {4 << 20, PBOX_FP32, true},
};

/* The sum of every rank's val(r + it, i). */
float sum_of(unsigned it, uint64_t i)
{
	float want = 0;

	for (unsigned r = 0; r < n_ranks; r++)
		want += val(r + it, i);
	return want;
}

/* GPU memory through the whole-buffer calls (libpbox 3.12), twice each
 * (the first staged on the caller's thread, the second on libpbox's):
 * reduce-scatter, all-gather and broadcast of uneven shards, each element
 * exact, and an asynchronous store (rank 0's initial parameters, then each
 * rank's delta of 1 in its answer). The failures counted. */
int check_whole(struct pbox *px, unsigned me, cudaStream_t s)
{
	const enum pbox_dtype dt = PBOX_FP32;
	const uint64_t nst = 1000; /* the store's elements */
	uint64_t counts[64], total = 0, before = 0;
	int fails = 0;

	for (unsigned r = 0; r < n_ranks; r++) {
		counts[r] = 1000 + 70001 * r;
		before += r < me ? counts[r] : 0;
		total += counts[r];
	}
	float *h = static_cast<float *>(malloc((total * 3 + nst) * 4)), *d_all, *d_part, *d_out;

	CK(cudaMalloc(&d_all, total * 4));
	CK(cudaMalloc(&d_part, total * 4));
	CK(cudaMalloc(&d_out, (total + nst) * 4));
	for (unsigned it = 0; it < 2; it++) {
		struct pbox_handle *op[4];
		uint64_t bad = 0;

		for (uint64_t i = 0; i < total; i++)
			h[i] = val(me + it, i);
		for (uint64_t i = 0; i < nst; i++)
			h[total + i] = it ? 1 : val(me, i);
		CK(cudaMemcpyAsync(d_all, h, total * 4, cudaMemcpyHostToDevice, s));
		CK(cudaMemcpyAsync(d_part, h + before, counts[me] * 4, cudaMemcpyHostToDevice, s));
		CK(cudaMemcpyAsync(d_out + counts[me], h + total, nst * 4, cudaMemcpyHostToDevice, s));
		if (pbox_reduce_scatter_cuda(px, 7, d_all, d_out, counts, dt, s, &op[0]) ||
		    pbox_wait(op[0]) ||
		    pbox_all_gather_cuda(px, 8, d_part, d_all, counts, dt, s, &op[1]) ||
		    pbox_wait(op[1]) ||
		    pbox_broadcast_cuda(px, 9, d_part, counts[0], dt, 0, s, &op[2]) ||
		    pbox_wait(op[2]) ||
		    pbox_push_pull_async_cuda(px, 10, d_out + counts[me], d_out + counts[me], nst, dt,
					      s, &op[3]) ||
		    pbox_wait(op[3])) {
			fprintf(stderr, "gpu_check: rank %u: %s\n", me, pbox_last_error());
			return fails + 1;
		}
		CK(cudaMemcpy(h, d_all, total * 4, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(h + total, d_part, counts[0] * 4, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(h + 2 * total, d_out, (counts[me] + nst) * 4, cudaMemcpyDeviceToHost));
		for (uint64_t i = 0, r = 0, at = 0; i < total; i++) { /* all-gather */
			while (i >= at + counts[r])
				at += counts[r++];
			bad += h[i] != val((unsigned)r + it, i);
		}
		for (uint64_t i = 0; i < counts[0]; i++) /* broadcast */
			bad += h[total + i] != val(it, i);
		for (uint64_t i = 0; i < counts[me]; i++) /* reduce-scatter */
			bad += h[2 * total + i] != sum_of(it, before + i);
		for (uint64_t i = 0; i < nst; i++) { /* the store: rank 0's, then deltas */
			float d = h[2 * total + counts[me] + i] - val(0, i);

			bad += it ? d < 1 || d > (float)n_ranks || d != (float)(int)d : d != 0;
		}
		if (bad) {
			fprintf(stderr,
				"gpu_check: rank %u: whole-buffer calls, round %u: %" PRIu64 " wrong\n",
				me, it, bad);
			fails++;
		}
	}
	cudaFree(d_all);
	cudaFree(d_part);
	cudaFree(d_out);
	free(h);
	return fails;
}

void *check_rank(void *p)
{
	struct rank_arg *a = static_cast<struct rank_arg *>(p);
	struct pbox *px = open_rank(a->r, "partition_size = 256K");
	cudaStream_t s;

	struct pbox_machine_info mi;
	bool local;

	pbox_machine(px, &mi);
	local = mi.local_size > 1;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	for (unsigned it = 0; it < 3; it++) {
		/* between steps, with CUDA tensors: the machine renewed where local */
		if (it == 2 && pbox_rejoin(px)) {
			fprintf(stderr, "gpu_check: rank %u: pbox_rejoin: %s\n", a->r,
				pbox_last_error());
			a->fails++;
		}
		for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			uint64_t n = cases[c].count;
			enum pbox_dtype dt = cases[c].dt;
			size_t bytes = n * esize(dt);
			void *h = malloc(bytes), *d_in, *d_out;
			struct pbox_handle *op;
			uint64_t bad = 0;

			for (uint64_t i = 0; i < n; i++)
				put(h, i, dt, val(a->r + it, i));
			CK(cudaMalloc(&d_in, bytes));
			d_out = d_in;
			if (!cases[c].inplace)
				CK(cudaMalloc(&d_out, bytes));
			/* queued on the rank's stream: the push-pull must wait for it */
			CK(cudaMemcpyAsync(d_in, h, bytes, cudaMemcpyHostToDevice, s));
			if (pbox_push_pull_cuda(px, 100 + c, d_in, d_out, n, dt, s, &op)) {
				fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
				exit(1);
			}
			/* staged: in flight until its handle is answered, whatever the GPU did */
			if (it == 1 && c == 0 && !local && pbox_rejoin(px) != PBOX_ESTATE) {
				fprintf(stderr,
					"gpu_check: rank %u: pbox_rejoin() with a CUDA push-pull in "
					"flight was not refused\n",
					a->r);
				a->fails++;
			}
			if (pbox_wait(op)) {
				fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
				exit(1);
			}
			memset(h, 0xff, bytes);
			CK(cudaMemcpy(h, d_out, bytes, cudaMemcpyDeviceToHost));
			for (uint64_t i = 0; i < n; i++) {
				float want = 0;

				for (unsigned r = 0; r < n_ranks; r++)
					want += val(r + it, i);
				bad += get(h, i, dt) != want;
			}
			if (bad) {
				fprintf(stderr,
					"gpu_check: rank %u: key %u (%" PRIu64
					" elements, dtype %d): %" PRIu64 " wrong\n",
					a->r, 100 + c, n, (int)dt, bad);
				a->fails++;
			}
			if (d_out != d_in)
				cudaFree(d_out);
			cudaFree(d_in);
			free(h);
		}
	}
	if (!local) /* the whole-buffer calls: the network job only */
		a->fails += check_whole(px, a->r, s);
	cudaStreamDestroy(s);
	if (pbox_finalize(px)) {
		fprintf(stderr, "gpu_check: rank %u: finalize: %s\n", a->r, pbox_last_error());
		a->fails++;
	}
	return NULL;
}

/* CUDA tensors compressed on the GPU (libpbox 3.14, "SCHEME@gpu"): the
 * same values as a host tensor compressed on the CPU, sign then top-k,
 * every sum bitwise the host tensor's through the error feedback of four
 * steps (zeros first: every residual zero; [job] deterministic: each sum
 * in rank order). The failures counted. Without local aggregation. */
void *comp_rank(void *p)
{
	struct rank_arg *a = static_cast<struct rank_arg *>(p);
	struct pbox *px = open_rank(
		a->r, "partition_size = 256K\n[job]\ncompression = sign\ndeterministic = on");
	const uint64_t n = 1000003;
	float *h = static_cast<float *>(malloc(n * 4)), *g = static_cast<float *>(malloc(n * 4)),
	      *d;
	static const char *const plan[5][2] = {{NULL, NULL},
					       {"sign@gpu", "sign"},
					       {NULL, NULL},
					       {"topk@gpu", "topk"},
					       {NULL, NULL}};

	CK(cudaMalloc(&d, n * 4));
	for (unsigned it = 0; it < 5; it++) {
		struct pbox_handle *op[2];
		uint64_t bad = 0;

		if (plan[it][0] && (pbox_set_compression(px, 300, plan[it][0]) ||
				    pbox_set_compression(px, 301, plan[it][1]))) {
			fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
			exit(1);
		}
		for (uint64_t i = 0; i < n; i++)
			h[i] = it ? (float)((int)val(a->r + it, i) - 8) / (float)(1 + i % 5) : 0;
		CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
		if (pbox_push_pull_cuda(px, 300, d, d, n, PBOX_FP32, NULL, &op[0]) ||
		    pbox_push_pull(px, 301, h, h, n, PBOX_FP32, &op[1]) || pbox_wait(op[0]) ||
		    pbox_wait(op[1])) {
			fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
			exit(1);
		}
		CK(cudaMemcpy(g, d, n * 4, cudaMemcpyDeviceToHost));
		for (uint64_t i = 0; i < n; i++)
			bad += memcmp(&g[i], &h[i], 4) != 0;
		if (bad) {
			fprintf(stderr,
				"gpu_check: rank %u: step %u: %" PRIu64 " of %" PRIu64 " sums "
				"compressed on the GPU differ from the CPU's\n",
				a->r, it, bad, n);
			a->fails++;
		}
	}
	cudaFree(d);
	free(h);
	free(g);
	if (pbox_finalize(px)) {
		fprintf(stderr, "gpu_check: rank %u: finalize: %s\n", a->r, pbox_last_error());
		a->fails++;
	}
	return NULL;
}

/* perf: PERF_MB of fp32, the best of 5 timed iterations after 2 warm ones,
 * from CUDA memory and from host memory, alternating. */
const uint64_t PERF_COUNT = 64ull << 20 >> 2;

void *perf_rank(void *p)
{
	struct rank_arg *a = static_cast<struct rank_arg *>(p);
	struct pbox *px = open_rank(a->r, "pacing = false"); /* loopback: no link to pace */
	size_t bytes = PERF_COUNT * 4;
	float *h, *d;
	cudaStream_t s;

	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMallocHost(&h, bytes));
	CK(cudaMalloc(&d, bytes));
	for (uint64_t i = 0; i < PERF_COUNT; i++)
		h[i] = val(a->r, i);
	CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	a->dev_s = a->host_s = 1e9;
	for (unsigned it = 0; it < 7; it++) {
		struct pbox_handle *op;
		double t0 = now_s(), t1, t2;

		if (pbox_push_pull_cuda(px, 7, d, d, PERF_COUNT, PBOX_FP32, s, &op) || pbox_wait(op)) {
			fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
			exit(1);
		}
		t1 = now_s();
		if (pbox_allreduce(px, 8, h, h, PERF_COUNT, PBOX_FP32)) {
			fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
			exit(1);
		}
		t2 = now_s();
		if (it >= 2) {
			a->dev_s = t1 - t0 < a->dev_s ? t1 - t0 : a->dev_s;
			a->host_s = t2 - t1 < a->host_s ? t2 - t1 : a->host_s;
		}
	}
	cudaFree(d);
	cudaFreeHost(h);
	cudaStreamDestroy(s);
	pbox_finalize(px);
	return NULL;
}

/* perf, compressed (sign, [job] compression): the same CUDA tensor's
 * allreduce compressed on the GPU ("sign@gpu": only the compressed bytes
 * cross PCIe), on the CPU after staging ("sign@cpu"), and sent as it is
 * ("none"), the best of 5 after 2 warm ones each, in turn. */
void *perf_comp_rank(void *p)
{
	struct rank_arg *a = static_cast<struct rank_arg *>(p);
	struct pbox *px = open_rank(a->r, "pacing = false\n[job]\ncompression = sign");
	static const char *const how[3] = {"sign@gpu", "sign@cpu", "none"};
	size_t bytes = PERF_COUNT * 4;
	double best[3] = {1e9, 1e9, 1e9};
	float *h, *d;

	CK(cudaMallocHost(&h, bytes));
	CK(cudaMalloc(&d, bytes));
	for (uint64_t i = 0; i < PERF_COUNT; i++)
		h[i] = val(a->r, i) - 8;
	CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	for (unsigned it = 0; it < 7; it++)
		for (unsigned k = 0; k < 3; k++) {
			struct pbox_handle *op;
			/* the key's first call takes the job's (it is not known before) */
			int rc = it || k ? pbox_set_compression(px, 9, how[k]) : PBOX_OK;
			double t0 = now_s();

			if (rc || pbox_push_pull_cuda(px, 9, d, d, PERF_COUNT, PBOX_FP32, NULL, &op) ||
			    pbox_wait(op)) {
				fprintf(stderr, "gpu_check: rank %u: %s\n", a->r, pbox_last_error());
				exit(1);
			}
			if (it >= 2 && now_s() - t0 < best[k])
				best[k] = now_s() - t0;
		}
	a->dev_s = best[0];
	a->host_s = best[1];
	a->stage_s = best[2];
	cudaFree(d);
	cudaFreeHost(h);
	pbox_finalize(px);
	return NULL;
}

/* The pinned-memory copy peak: a buffer to the host and back, on two
 * streams in pieces as the stager does, the best of 5. */
double copy_peak_s(size_t bytes, size_t piece)
{
	void *h, *d;
	cudaStream_t a, b;
	cudaEvent_t *ev;
	size_t n = (bytes + piece - 1) / piece;
	double best = 1e9;

	CK(cudaMallocHost(&h, bytes));
	CK(cudaMalloc(&d, bytes));
	CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
	ev = static_cast<cudaEvent_t *>(calloc(n, sizeof(*ev)));
	for (size_t i = 0; i < n; i++)
		CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
	for (int it = 0; it < 7; it++) {
		double t0 = now_s();

		for (size_t i = 0; i < n; i++) {
			size_t off = i * piece, len = bytes - off < piece ? bytes - off : piece;

			CK(cudaMemcpyAsync((char *)h + off, (char *)d + off, len,
					   cudaMemcpyDeviceToHost, a));
			CK(cudaEventRecord(ev[i], a));
			CK(cudaStreamWaitEvent(b, ev[i], 0));
			CK(cudaMemcpyAsync((char *)d + off, (char *)h + off, len,
					   cudaMemcpyHostToDevice, b));
		}
		CK(cudaStreamSynchronize(b));
		if (it >= 2 && now_s() - t0 < best)
			best = now_s() - t0;
	}
	for (size_t i = 0; i < n; i++)
		cudaEventDestroy(ev[i]);
	free(ev);
	cudaStreamDestroy(a);
	cudaStreamDestroy(b);
	cudaFree(d);
	cudaFreeHost(h);
	return best;
}

void on_fault(int sig)
{
	void *bt[64];
	int n = backtrace(bt, 64);

	fprintf(stderr, "gpu_check: signal %d; the stack (file(+offset) for addr2line):\n", sig);
	backtrace_symbols_fd(bt, n, 2);
	_exit(3);
}

int run(void *(*fn)(void *), struct rank_arg *ra)
{
	pthread_t t[64];
	int fails = 0;

	for (unsigned r = 0; r < n_ranks; r++) {
		ra[r].r = r;
		pthread_create(&t[r], NULL, fn, &ra[r]);
	}
	for (unsigned r = 0; r < n_ranks; r++) {
		pthread_join(t[r], NULL);
		fails += ra[r].fails;
	}
	return fails;
}

} // namespace

int main(int argc, char **argv)
{
	struct rank_arg ra[64];
	int ndev = 0;

	if (argc > 1)
		mode = argv[1];
	if (argc > 2)
		n_ranks = (unsigned)atoi(argv[2]);
	if (n_ranks < 1 || n_ranks > 64 || (strcmp(mode, "check") && strcmp(mode, "perf"))) {
		fprintf(stderr, "usage: gpu_check check|perf [RANKS (1..64)]\n");
		return 2;
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "gpu_check: no GPU here\n");
		return 2;
	}
	/* below the kernel's ephemeral ports (32768 and up by default), which
	 * a connection may hold */
	port0 = 20000 + (unsigned)(getpid() % 750) * 16;
	signal(SIGSEGV, on_fault);
	signal(SIGBUS, on_fault);
	memset(ra, 0, sizeof(ra));
	if (!strcmp(mode, "check")) {
		const char *loc = getenv("PBOX_WORKER_LOCAL_AGGREGATION");
		int fails = run(check_rank, ra), cfails = 0;

		printf("gpu_check: %u ranks on one GPU, %zu tensors x 3 rounds: %s\n", n_ranks,
		       sizeof(cases) / sizeof(cases[0]), fails ? "WRONG SUMS" : "every sum exact");
		if (!loc || strcmp(loc, "on")) { /* compressed on the GPU: no local aggregation */
			memset(ra, 0, sizeof(ra));
			cfails = run(comp_rank, ra);
			printf("gpu_check: %u ranks, sign and top-k compressed on the GPU: %s\n",
			       n_ranks, cfails ? "NOT THE CPU'S SUMS" : "bitwise the CPU's sums");
			fails += cfails;
		}
		return fails ? 1 : 0;
	}
	/* perf: the staging alone (a rank alone, PBOX_CUDA_STAGE_ONLY: no
	 * network) against the copy peak; N ranks compare device with host */
	unsigned n = n_ranks;
	double peak = copy_peak_s(PERF_COUNT * 4, 4 << 20), dev = 0, host = 0, stage;

	setenv("PBOX_CUDA_STAGE_ONLY", "1", 1);
	n_ranks = 1;
	run(perf_rank, ra);
	stage = ra[0].dev_s;
	unsetenv("PBOX_CUDA_STAGE_ONLY");
	n_ranks = n;
	memset(ra, 0, sizeof(ra));
	run(perf_rank, ra);
	for (unsigned r = 0; r < n_ranks; r++) {
		dev = ra[r].dev_s > dev ? ra[r].dev_s : dev;
		host = ra[r].host_s > host ? ra[r].host_s : host;
	}
	printf("gpu: %llu MiB fp32, pieces of 4 MiB: pinned copies there and back %.2f ms (%.1f "
	       "GB/s); the stager alone %.2f ms (%.1f GB/s)\n",
	       (unsigned long long)(PERF_COUNT * 4 >> 20), peak * 1e3,
	       2.0 * PERF_COUNT * 4 / peak / 1e9, stage * 1e3, 2.0 * PERF_COUNT * 4 / stage / 1e9);
	printf("gpu: %u ranks: allreduce of CUDA tensors %.2f ms, of host tensors %.2f ms\n",
	       n_ranks, dev * 1e3, host * 1e3);
	/* the same ranks as one machine: CUDA tensors summed on the GPU, then
	 * through host memory by the CPU (BytePS §4.2's two paths) */
	double local[2] = {0, 0};
	const char *paths[2] = {"ipc", "host"};

	setenv("PBOX_WORKER_LOCAL_AGGREGATION", "on", 1);
	for (int k = 0; k < 2; k++) {
		setenv("PBOX_WORKER_LOCAL_CUDA", paths[k], 1);
		memset(ra, 0, sizeof(ra));
		run(perf_rank, ra);
		for (unsigned r = 0; r < n_ranks; r++)
			local[k] = ra[r].dev_s > local[k] ? ra[r].dev_s : local[k];
	}
	printf("gpu: %u ranks as one machine: allreduce of CUDA tensors summed on the GPU "
	       "(local_cuda = ipc) %.2f ms, through host memory (local_cuda = host) %.2f ms\n",
	       n_ranks, local[0] * 1e3, local[1] * 1e3);
	/* sign compressed on the GPU, on the CPU, and not at all */
	double comp[3] = {0, 0, 0};

	unsetenv("PBOX_WORKER_LOCAL_AGGREGATION");
	unsetenv("PBOX_WORKER_LOCAL_CUDA");
	memset(ra, 0, sizeof(ra));
	run(perf_comp_rank, ra);
	for (unsigned r = 0; r < n_ranks; r++) {
		comp[0] = ra[r].dev_s > comp[0] ? ra[r].dev_s : comp[0];
		comp[1] = ra[r].host_s > comp[1] ? ra[r].host_s : comp[1];
		comp[2] = ra[r].stage_s > comp[2] ? ra[r].stage_s : comp[2];
	}
	printf("gpu: %u ranks: allreduce of CUDA tensors with sign compressed on the GPU %.2f ms, "
	       "on the CPU after staging %.2f ms, sent as they are %.2f ms\n",
	       n_ranks, comp[0] * 1e3, comp[1] * 1e3, comp[2] * 1e3);
	printf("RESULT gpu staging=%.3f device_vs_host=%.3f local_ipc_vs_host=%.3f "
	       "comp_gpu_vs_cpu=%.3f comp_gpu_vs_none=%.3f\n",
	       peak / stage, dev / host, local[0] / local[1], comp[0] / comp[1], comp[0] / comp[2]);
	return 0;
}
